"""The op set of flexpoint.h and flexpoint_nn.h as functions.

Every function writes into ``out`` when it is given (a Tensor of any format and the right shape)
and returns it; otherwise it allocates the output in ``fmt``, which defaults to the format of the
first tensor argument. Shapes are checked by the library, whose message the exception carries;
the binding itself checks what the library cannot: the sizes of the NumPy buffers it hands over
(labels, argmax, batch-norm statistics), and that every scalar and array crosses into C
unchanged (see :mod:`flexpoint._check`). Every function therefore also raises
ArgumentTypeError for a wrong type (a float stride, a float or bool label array, a str scale)
and ArgumentRangeError for an integer its C parameter cannot hold (a stride of 2**32, a label
or argmax beyond int32, a negative seed); nothing is written into ``out`` then.

Layout is NCHW, convolution weights are [O, C, KH, KW]. Arguments given as ``int | (int, int)``
apply to (height, width).
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, c_float, c_int32
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from ._check import c_bool, c_double, c_int, c_int_array, c_shape, c_uint64, is_scalar
from ._lib import lib
from .errors import ArgumentTypeError, InvalidArgumentError, check
from .formats import FormatLike
from .device import DeviceBuffer
from .tensor import Tensor, _new_on, _shape_tuple

__all__ = [
    "add", "sub", "mul", "scale", "relu", "relu_backward", "copy", "sum", "mean", "matmul",
    "conv2d", "conv2d_bias_relu", "conv2d_backward_input", "conv2d_backward_weight",
    "conv2d_output_shape",
    "maxpool2d", "maxpool2d_backward", "avgpool2d", "avgpool2d_backward", "pool2d_output_shape",
    "global_avgpool", "global_avgpool_backward", "softmax_cross_entropy", "batchnorm",
    "batchnorm_backward", "dropout", "dropout_backward", "AXIS_ALL",
]

#: FX_AXIS_ALL: reduce over every element.
AXIS_ALL = -1000

Pair = Union[int, Tuple[int, int], Sequence[int]]
_fp = POINTER(c_float)
_i32p = POINTER(c_int32)


def _tensor(x: Any, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise InvalidArgumentError(f"{name} must be a flexpoint Tensor, not {type(x).__name__} "
                                   "(convert arrays with flexpoint.from_numpy)", -1)
    return x


def _out(out: Optional[Tensor], shape: Sequence[int], fmt: Optional[FormatLike],
         like: Tensor) -> Tensor:
    if out is not None:
        return _tensor(out, "out")
    # where the operand lives: an op on device tensors writes a device tensor
    return _new_on(tuple(shape), like.fmt_id if fmt is None else fmt, like._ordinal())


def _pair(v: Pair, name: str) -> Tuple[int, int]:
    """(h, w) from an int or a pair of ints, each a C int (ArgumentTypeError /
    ArgumentRangeError otherwise, InvalidArgumentError for a sequence of another length)."""
    if is_scalar(v):
        x = c_int(v, name)
        return x, x
    try:
        if isinstance(v, (str, bytes)):
            raise TypeError
        t = tuple(v)
    except TypeError:
        raise ArgumentTypeError(f"{name}={v!r}: expected an int or a pair of ints") from None
    if len(t) != 2:
        raise InvalidArgumentError(f"{name}={v!r}: expected an int or a pair of ints", -1)
    return c_int(t[0], f"{name}[0]"), c_int(t[1], f"{name}[1]")


def _f32_buffer(a: Any, n: Optional[int], name: str, inplace: bool = True) -> np.ndarray:
    """A float32 buffer of exactly n elements for the library. One that the library updates in
    place (inplace=True) must already be a writable C-contiguous float32 ndarray: a silent copy
    would lose the update. n None skips the size check (the library rejects the call first)."""
    if inplace:
        if not isinstance(a, np.ndarray) or a.dtype != np.float32 or \
                not a.flags.c_contiguous or not a.flags.writeable:
            raise InvalidArgumentError(f"{name} must be a writable C-contiguous float32 ndarray",
                                       -1)
    else:
        a = np.ascontiguousarray(a, dtype=np.float32)
    if n is not None and a.size != n:
        raise InvalidArgumentError(f"{name} has {a.size} elements, the op needs {n}", -1)
    return a


# ------------------------------------------------------------------------------------------
# elementwise, reductions, matmul (flexpoint.h)
# ------------------------------------------------------------------------------------------
def _broadcast(a: Tensor, b: Tensor) -> Tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        # Let the library reject it, with its own message naming the shapes.
        return a.shape


def _binary(fn: str, a: Tensor, b: Tensor, out: Optional[Tensor],
            fmt: Optional[FormatLike]) -> Tensor:
    a, b = _tensor(a, "a"), _tensor(b, "b")
    o = _out(out, _broadcast(a, b), fmt, a)
    check(getattr(lib(), fn)(o._h, a._h, b._h), fn)
    return o


def add(a: Tensor, b: Tensor, out: Optional[Tensor] = None,
        fmt: Optional[FormatLike] = None) -> Tensor:
    """out = a + b elementwise, with NumPy broadcasting of a and b to out's shape."""
    return _binary("tensor_add", a, b, out, fmt)


def sub(a: Tensor, b: Tensor, out: Optional[Tensor] = None,
        fmt: Optional[FormatLike] = None) -> Tensor:
    """out = a - b elementwise, with broadcasting."""
    return _binary("tensor_sub", a, b, out, fmt)


def mul(a: Tensor, b: Tensor, out: Optional[Tensor] = None,
        fmt: Optional[FormatLike] = None) -> Tensor:
    """out = a * b elementwise, with broadcasting."""
    return _binary("tensor_mul", a, b, out, fmt)


def scale(a: Tensor, s: float, out: Optional[Tensor] = None,
          fmt: Optional[FormatLike] = None) -> Tensor:
    """out = s * a; s must be finite (InvalidArgumentError otherwise; ArgumentTypeError for a
    bool, str or None)."""
    s = c_double(s, "s")
    a = _tensor(a, "a")
    o = _out(out, a.shape, fmt, a)
    check(lib().tensor_scale(o._h, a._h, s), "tensor_scale")
    return o


def relu(a: Tensor, out: Optional[Tensor] = None, fmt: Optional[FormatLike] = None) -> Tensor:
    """out = max(a, 0)."""
    a = _tensor(a, "a")
    o = _out(out, a.shape, fmt, a)
    check(lib().tensor_relu(o._h, a._h), "tensor_relu")
    return o


def relu_backward(dy: Tensor, x: Tensor, out: Optional[Tensor] = None,
                  fmt: Optional[FormatLike] = None) -> Tensor:
    """dx = dy where x > 0, else 0."""
    dy, x = _tensor(dy, "dy"), _tensor(x, "x")
    o = _out(out, dy.shape, fmt, dy)
    check(lib().tensor_relu_backward(o._h, dy._h, x._h), "tensor_relu_backward")
    return o


def copy(a: Tensor, out: Optional[Tensor] = None, fmt: Optional[FormatLike] = None) -> Tensor:
    """out = a with format conversion (a write into out)."""
    a = _tensor(a, "a")
    o = _out(out, a.shape, fmt, a)
    check(lib().tensor_copy(o._h, a._h), "tensor_copy")
    return o


def _reduced_shape(a: Tensor, axis: Optional[int], keepdims: bool) -> Tuple[Tuple[int, ...], int]:
    if axis is None:
        return ((1,) * a.ndim if keepdims else (1,)), AXIS_ALL
    axis = c_int(axis, "axis")
    if axis == AXIS_ALL:
        return ((1,) * a.ndim if keepdims else (1,)), AXIS_ALL
    d = axis + a.ndim if axis < 0 else axis
    if not 0 <= d < a.ndim:
        return (1,), axis  # the library reports the bad axis
    if keepdims or a.ndim == 1:
        shape = a.shape[:d] + (1,) + a.shape[d + 1:]
    else:
        shape = a.shape[:d] + a.shape[d + 1:]
    return shape, axis


def sum(a: Tensor, axis: Optional[int] = None, keepdims: bool = False,
        out: Optional[Tensor] = None, fmt: Optional[FormatLike] = None) -> Tensor:
    """Sum over every element (axis None: a tensor of shape (1,)) or along one axis. Float
    formats accumulate in fp32, integer formats exactly in int64. InvalidArgumentError for a
    bad axis (ArgumentTypeError / ArgumentRangeError for one that is not a C int)."""
    a = _tensor(a, "a")
    shape, ax = _reduced_shape(a, axis, keepdims)
    o = _out(out, shape, fmt, a)
    check(lib().tensor_sum(o._h, a._h, ax), "tensor_sum")
    return o


def mean(a: Tensor, axis: Optional[int] = None, keepdims: bool = False,
         out: Optional[Tensor] = None, fmt: Optional[FormatLike] = None) -> Tensor:
    """Mean over every element or along one axis (shapes and errors as :func:`sum`)."""
    a = _tensor(a, "a")
    shape, ax = _reduced_shape(a, axis, keepdims)
    o = _out(out, shape, fmt, a)
    check(lib().tensor_mean(o._h, a._h, ax), "tensor_mean")
    return o


def matmul(a: Tensor, b: Tensor, out: Optional[Tensor] = None,
           fmt: Optional[FormatLike] = None) -> Tensor:
    """out[M, N] = a[M, K] @ b[K, N] for 2-D operands (transposed operands as views: ``a.T``)."""
    a, b = _tensor(a, "a"), _tensor(b, "b")
    shape = (a.shape[0], b.shape[-1]) if a.ndim == 2 and b.ndim == 2 else (1, 1)
    o = _out(out, shape, fmt, a)
    check(lib().tensor_matmul(o._h, a._h, b._h), "tensor_matmul")
    return o


# ------------------------------------------------------------------------------------------
# convolution and pooling (flexpoint_nn.h)
# ------------------------------------------------------------------------------------------
def conv2d_output_shape(x_shape: Sequence[int], w_shape: Sequence[int], stride: Pair = 1,
                        padding: Pair = 0, dilation: Pair = 1) -> Optional[Tuple[int, ...]]:
    """[N, O, OH, OW] of a convolution, or None when the shapes do not make one. Raises what
    :class:`Tensor` raises for a shape whose values are not dimensions (a float, a negative
    or beyond-int64 value), and as :func:`conv2d` for stride, padding and dilation."""
    x_shape = c_shape(x_shape, "x_shape", min_dims=0)
    w_shape = c_shape(w_shape, "w_shape", min_dims=0)
    if len(x_shape) != 4 or len(w_shape) != 4:
        return None
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride, "stride"), _pair(padding, "padding"), \
        _pair(dilation, "dilation")
    if sh < 1 or sw < 1:
        return None
    nh = x_shape[2] + 2 * ph - dh * (w_shape[2] - 1) - 1
    nw = x_shape[3] + 2 * pw - dw * (w_shape[3] - 1) - 1
    if nh < 0 or nw < 0:
        return None
    return (x_shape[0], w_shape[0], nh // sh + 1, nw // sw + 1)


def _conv_args(stride: Pair, padding: Pair, dilation: Pair) -> Tuple[int, ...]:
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride, "stride"), _pair(padding, "padding"), \
        _pair(dilation, "dilation")
    return sh, sw, ph, pw, dh, dw


def conv2d(x: Tensor, w: Tensor, stride: Pair = 1, padding: Pair = 0, dilation: Pair = 1,
           out: Optional[Tensor] = None, fmt: Optional[FormatLike] = None) -> Tensor:
    """y[N, O, OH, OW] = conv(x[N, C, H, W], w[O, C, KH, KW]), zero padding, no bias.
    Raises ArgumentTypeError / ArgumentRangeError for a stride, padding, dilation or kernel
    size that is not an int (or pair of ints) within the C int range."""
    x, w = _tensor(x, "x"), _tensor(w, "w")
    shape = conv2d_output_shape(x.shape, w.shape, stride, padding, dilation) or (1, 1, 1, 1)
    o = _out(out, shape, fmt, x)
    check(lib().tensor_conv2d(o._h, x._h, w._h, *_conv_args(stride, padding, dilation)),
          "tensor_conv2d")
    return o


def conv2d_bias_relu(x: Tensor, w: Tensor, bias: Optional[Tensor] = None, relu: bool = True,
                     stride: Pair = 1, padding: Pair = 0, dilation: Pair = 1,
                     out: Optional[Tensor] = None, fmt: Optional[FormatLike] = None) -> Tensor:
    """relu(conv2d(x, w) + bias) in one write, with the bits of conv2d, add and relu called one
    after the other (tensor_conv2d_bias_relu). bias: None or shape (O, 1, 1). The output must be
    fp32, fp16 or bf16 (UnsupportedError for flex16_5/dfp16: call the three ops). Raises as
    :func:`conv2d`, and ArgumentTypeError / ArgumentRangeError for `relu` other than a bool."""
    x, w = _tensor(x, "x"), _tensor(w, "w")
    b = _tensor(bias, "bias") if bias is not None else None
    r = c_bool(relu, "relu")
    args = _conv_args(stride, padding, dilation)
    shape = conv2d_output_shape(x.shape, w.shape, stride, padding, dilation) or (1, 1, 1, 1)
    o = _out(out, shape, fmt, x)
    check(lib().tensor_conv2d_bias_relu(o._h, x._h, w._h, b._h if b is not None else None,
                                        r, *args),
          "tensor_conv2d_bias_relu")
    return o


def conv2d_backward_input(dy: Tensor, w: Tensor, input_shape: Sequence[int], stride: Pair = 1,
                          padding: Pair = 0, dilation: Pair = 1, out: Optional[Tensor] = None,
                          fmt: Optional[FormatLike] = None) -> Tensor:
    """dx[N, C, H, W] (input_shape) = gradient of the convolution with respect to its input.
    Raises as :func:`conv2d`, and for input_shape what :class:`Tensor` raises for a shape."""
    dy, w = _tensor(dy, "dy"), _tensor(w, "w")
    args = _conv_args(stride, padding, dilation)
    o = _out(out, _shape_tuple(input_shape, "input_shape"), fmt, dy)
    check(lib().tensor_conv2d_backward_input(o._h, dy._h, w._h, *args),
          "tensor_conv2d_backward_input")
    return o


def conv2d_backward_weight(x: Tensor, dy: Tensor, kernel_size: Pair, stride: Pair = 1,
                           padding: Pair = 0, dilation: Pair = 1, out: Optional[Tensor] = None,
                           fmt: Optional[FormatLike] = None) -> Tensor:
    """dw[O, C, KH, KW] = gradient with respect to the weights (summed over the batch);
    O = dy.shape[1], C = x.shape[1], (KH, KW) = kernel_size. Raises as :func:`conv2d`."""
    x, dy = _tensor(x, "x"), _tensor(dy, "dy")
    kh, kw = _pair(kernel_size, "kernel_size")
    args = _conv_args(stride, padding, dilation)
    shape = (dy.shape[1], x.shape[1], kh, kw) if x.ndim == 4 and dy.ndim == 4 else (1, 1, kh, kw)
    o = _out(out, shape, fmt, dy)
    check(lib().tensor_conv2d_backward_weight(o._h, x._h, dy._h, *args),
          "tensor_conv2d_backward_weight")
    return o


def pool2d_output_shape(x_shape: Sequence[int], kernel_size: Pair, stride: Optional[Pair] = None,
                        padding: Pair = 0) -> Optional[Tuple[int, ...]]:
    """[N, C, OH, OW] of a pooling, or None when the arguments do not make one. Raises what
    :class:`Tensor` raises for a shape whose values are not dimensions, and as
    :func:`maxpool2d` for kernel_size, stride and padding."""
    x_shape = c_shape(x_shape, "x_shape", min_dims=0)
    if len(x_shape) != 4:
        return None
    (kh, kw) = _pair(kernel_size, "kernel_size")
    (sh, sw) = _pair(kernel_size if stride is None else stride, "stride")
    (ph, pw) = _pair(padding, "padding")
    if kh < 1 or kw < 1 or sh < 1 or sw < 1:
        return None
    nh, nw = x_shape[2] + 2 * ph - kh, x_shape[3] + 2 * pw - kw
    if nh < 0 or nw < 0:
        return None
    return (x_shape[0], x_shape[1], nh // sh + 1, nw // sw + 1)


def _pool_args(kernel_size: Pair, stride: Optional[Pair], padding: Pair) -> Tuple[int, ...]:
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(kernel_size if stride is None else stride, "stride")
    ph, pw = _pair(padding, "padding")
    return kh, kw, sh, sw, ph, pw


def _dev_ptr(buf: DeviceBuffer, ptype: Any) -> Any:
    """A DeviceBuffer's address as the pointer type of a library argument."""
    return ctypes.cast(ctypes.c_void_p(buf.ptr), ptype)


def maxpool2d(x: Tensor, kernel_size: Pair = 2, stride: Optional[Pair] = None, padding: Pair = 0,
              return_indices: bool = False, out: Optional[Tensor] = None,
              fmt: Optional[FormatLike] = None, indices: Optional[DeviceBuffer] = None
              ) -> Union[Tensor, Tuple[Tensor, Union[np.ndarray, DeviceBuffer]]]:
    """Max pooling (stride defaults to the kernel size; padding never wins). With
    return_indices, also returns the int32 argmax (flat indices into x) that
    :func:`maxpool2d_backward` needs: a NumPy array for host tensors, a
    :class:`~flexpoint.device.DeviceBuffer` on x's device for device tensors (written into
    `indices` when given, so that a training loop reuses one buffer). Raises
    ArgumentTypeError / ArgumentRangeError for a kernel size, stride or padding that is not an
    int (or pair of ints) within the C int range."""
    x = _tensor(x, "x")
    args = _pool_args(kernel_size, stride, padding)
    shape = pool2d_output_shape(x.shape, kernel_size, stride, padding) or (1, 1, 1, 1)
    o = _out(out, shape, fmt, x)
    if not return_indices:
        check(lib().tensor_maxpool2d(o._h, None, x._h, *args), "tensor_maxpool2d")
        return o
    if x._ordinal() >= 0:
        if indices is not None and (not isinstance(indices, DeviceBuffer) or
                                    indices.size != o.size or indices.dtype != np.int32):
            raise InvalidArgumentError(f"indices must be an int32 DeviceBuffer of {o.size} "
                                       f"elements, got {indices!r}", -1)
        dev = indices if indices is not None else DeviceBuffer(o.shape, np.int32, x._ordinal())
        check(lib().tensor_maxpool2d(o._h, _dev_ptr(dev, _i32p), x._h, *args),
              "tensor_maxpool2d")
        return o, dev
    argmax = np.empty(o.shape, dtype=np.int32)
    ptr: Any = argmax.ctypes.data_as(_i32p) if argmax.size else (c_int32 * 1)()
    check(lib().tensor_maxpool2d(o._h, ptr, x._h, *args), "tensor_maxpool2d")
    return o, argmax


def maxpool2d_backward(dy: Tensor, argmax: Union[np.ndarray, DeviceBuffer],
                       input_shape: Sequence[int], out: Optional[Tensor] = None,
                       fmt: Optional[FormatLike] = None) -> Tensor:
    """dx (input_shape) = scatter-add of dy at argmax, zeros elsewhere. For device tensors
    argmax is the DeviceBuffer that maxpool2d returned (a host array is copied to the device
    after its range check); the library checks a device argmax's range on the device.
    A host argmax must hold integers (ArgumentTypeError for a float or bool array) in
    [0, dx size) (ArgumentRangeError, an InvalidArgumentError, otherwise: an int64 index is never
    wrapped into range); input_shape raises what :class:`Tensor` raises for a shape."""
    dy = _tensor(dy, "dy")
    o = _out(out, _shape_tuple(input_shape, "input_shape"), fmt, dy)
    if isinstance(argmax, DeviceBuffer):
        if argmax.size != dy.size or argmax.dtype != np.int32:
            raise InvalidArgumentError(f"argmax is a {argmax!r}; dy has {dy.size} elements "
                                       "(int32 needed)", -1)
        check(lib().tensor_maxpool2d_backward(o._h, dy._h, _dev_ptr(argmax, _i32p)),
              "tensor_maxpool2d_backward")
        return o
    # integers only, each in [0, dx size) before the cast to int32: an int64 index of 2**32
    # would otherwise wrap to 0 and pass (ArgumentRangeError is an InvalidArgumentError)
    am = c_int_array(argmax, "argmax", np.int32, lo=0, hi=o.size - 1)
    if am.size != dy.size:
        raise InvalidArgumentError(f"argmax has {am.size} entries, dy has {dy.size} elements",
                                   -1)
    if dy._ordinal() >= 0:  # a host array for device tensors: checked above, then copied
        return maxpool2d_backward(dy, DeviceBuffer.from_numpy(am, np.int32, dy._ordinal()),
                                  input_shape, o)
    ptr: Any = am.ctypes.data_as(_i32p) if am.size else (c_int32 * 1)()
    check(lib().tensor_maxpool2d_backward(o._h, dy._h, ptr), "tensor_maxpool2d_backward")
    return o


def avgpool2d(x: Tensor, kernel_size: Pair = 2, stride: Optional[Pair] = None, padding: Pair = 0,
              out: Optional[Tensor] = None, fmt: Optional[FormatLike] = None) -> Tensor:
    """Average pooling; padded positions count in the divisor. Raises as :func:`maxpool2d`."""
    x = _tensor(x, "x")
    args = _pool_args(kernel_size, stride, padding)
    shape = pool2d_output_shape(x.shape, kernel_size, stride, padding) or (1, 1, 1, 1)
    o = _out(out, shape, fmt, x)
    check(lib().tensor_avgpool2d(o._h, x._h, *args),
          "tensor_avgpool2d")
    return o


def avgpool2d_backward(dy: Tensor, input_shape: Sequence[int], kernel_size: Pair = 2,
                       stride: Optional[Pair] = None, padding: Pair = 0,
                       out: Optional[Tensor] = None, fmt: Optional[FormatLike] = None) -> Tensor:
    """Gradient of :func:`avgpool2d` with respect to its input (of shape input_shape). Raises
    as :func:`avgpool2d`, and for input_shape what :class:`Tensor` raises for a shape."""
    dy = _tensor(dy, "dy")
    args = _pool_args(kernel_size, stride, padding)
    o = _out(out, _shape_tuple(input_shape, "input_shape"), fmt, dy)
    check(lib().tensor_avgpool2d_backward(o._h, dy._h, *args),
          "tensor_avgpool2d_backward")
    return o


def global_avgpool(x: Tensor, keepdims: bool = False, out: Optional[Tensor] = None,
                   fmt: Optional[FormatLike] = None) -> Tensor:
    """x[N, C, H, W] -> y[N, C] (or [N, C, 1, 1] with keepdims)."""
    x = _tensor(x, "x")
    if x.ndim == 4:
        shape = x.shape[:2] + ((1, 1) if keepdims else ())
    else:
        shape = (1, 1)
    o = _out(out, shape, fmt, x)
    check(lib().tensor_global_avgpool(o._h, x._h), "tensor_global_avgpool")
    return o


def global_avgpool_backward(dy: Tensor, input_shape: Sequence[int], out: Optional[Tensor] = None,
                            fmt: Optional[FormatLike] = None) -> Tensor:
    """dx[N, C, H, W] = dy / (H * W) broadcast over each window; input_shape raises what
    :class:`Tensor` raises for a shape."""
    dy = _tensor(dy, "dy")
    o = _out(out, _shape_tuple(input_shape, "input_shape"), fmt, dy)
    check(lib().tensor_global_avgpool_backward(o._h, dy._h), "tensor_global_avgpool_backward")
    return o


# ------------------------------------------------------------------------------------------
# loss, normalisation, dropout
# ------------------------------------------------------------------------------------------
def softmax_cross_entropy(logits: Tensor, labels: Any, grad: bool = True,
                          grad_scale: float = 1.0, dlogits: Optional[Tensor] = None,
                          fmt: Optional[FormatLike] = None) -> Tuple[float, Optional[Tensor]]:
    """Mean softmax cross-entropy of logits[N, K] against integer labels[N] in [0, K).

    Returns (loss, dlogits): dlogits = grad_scale * (softmax - onehot) / N, written once in its
    format (allocated in `fmt` or the logits' format unless given), or None when grad is False.
    An out-of-range label raises RangeError naming it (ArgumentRangeError, also a RangeError,
    for one beyond int32). Labels must be integers: a float or bool array raises
    ArgumentTypeError rather than being truncated (an empty one of any dtype is accepted)."""
    logits = _tensor(logits, "logits")
    gs = c_double(grad_scale, "grad_scale")
    lab = c_int_array(labels, "labels", np.int32).reshape(-1)
    n = logits.shape[0] if logits.ndim == 2 else None
    if n is not None and lab.size != n:
        raise InvalidArgumentError(f"labels has {lab.size} entries, logits has {n} rows", -1)
    d = None
    if grad or dlogits is not None:
        d = _out(dlogits, logits.shape, fmt, logits)
    loss = c_float()
    lab_ptr: Any = lab.ctypes.data_as(_i32p) if lab.size else (c_int32 * 1)()
    check(lib().tensor_softmax_cross_entropy(ctypes.byref(loss), d._h if d else None, logits._h,
                                             lab_ptr, gs),
          "tensor_softmax_cross_entropy")
    return float(loss.value), d


def _channels(x: Tensor) -> Optional[int]:
    # None for a rank the library rejects before it reads any buffer.
    return x.shape[1] if x.ndim in (2, 4) else None


def batchnorm(x: Tensor, gamma: Tensor, beta: Tensor, running_mean: np.ndarray,
              running_var: np.ndarray, training: bool = True, momentum: float = 0.1,
              eps: float = 1e-5, out: Optional[Tensor] = None,
              fmt: Optional[FormatLike] = None
              ) -> Tuple[Tensor, Optional[np.ndarray], Optional[np.ndarray]]:
    """Batch normalisation per channel of NCHW x (or per feature of [N, F] x).

    running_mean and running_var are float32 arrays of C entries, updated in place when
    training (PyTorch momentum, unbiased variance). Returns (y, save_mean, save_invstd); the two
    saved arrays feed :func:`batchnorm_backward` and are None in inference mode.
    ArgumentTypeError / ArgumentRangeError for `training` other than a bool and for momentum
    or eps that are not real numbers; the running statistics are unchanged then."""
    x, gamma, beta = _tensor(x, "x"), _tensor(gamma, "gamma"), _tensor(beta, "beta")
    mom, ep, tr = c_double(momentum, "momentum"), c_double(eps, "eps"), \
        c_bool(training, "training")
    c = _channels(x)
    rm = _f32_buffer(running_mean, c, "running_mean")
    rv = _f32_buffer(running_var, c, "running_var")
    o = _out(out, x.shape, fmt, x)
    sm = np.zeros(c or 1, dtype=np.float32) if tr else None
    si = np.zeros(c or 1, dtype=np.float32) if tr else None
    check(lib().tensor_batchnorm(
        o._h, x._h, gamma._h, beta._h, rm.ctypes.data_as(_fp), rv.ctypes.data_as(_fp),
        sm.ctypes.data_as(_fp) if sm is not None else None,
        si.ctypes.data_as(_fp) if si is not None else None, mom, ep, tr), "tensor_batchnorm")
    return o, sm, si


def batchnorm_backward(dy: Tensor, x: Tensor, gamma: Tensor, save_mean: np.ndarray,
                       save_invstd: np.ndarray, param_grads: bool = True,
                       dx: Optional[Tensor] = None, dgamma: Optional[Tensor] = None,
                       dbeta: Optional[Tensor] = None, fmt: Optional[FormatLike] = None
                       ) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """Gradients of training-mode batch norm: (dx, dgamma, dbeta); the last two are None when
    param_grads is False and none were given. dgamma/dbeta default to gamma's format."""
    dy, x, gamma = _tensor(dy, "dy"), _tensor(x, "x"), _tensor(gamma, "gamma")
    c = _channels(x)
    sm = _f32_buffer(save_mean, c, "save_mean", inplace=False)
    si = _f32_buffer(save_invstd, c, "save_invstd", inplace=False)
    o = _out(dx, x.shape, fmt, dy)
    if param_grads or dgamma is not None:
        dgamma = _out(dgamma, gamma.shape, None, gamma)
    if param_grads or dbeta is not None:
        dbeta = _out(dbeta, gamma.shape, None, gamma)
    check(lib().tensor_batchnorm_backward(
        o._h, dgamma._h if dgamma is not None else None, dbeta._h if dbeta is not None else None,
        dy._h, x._h, gamma._h, sm.ctypes.data_as(_fp), si.ctypes.data_as(_fp)),
        "tensor_batchnorm_backward")
    return o, dgamma, dbeta


def dropout(x: Tensor, p: float, seed: int = 0, step: int = 0, out: Optional[Tensor] = None,
            fmt: Optional[FormatLike] = None) -> Tensor:
    """y = x * mask / (1 - p); the mask is drawn from (seed, step, element index), so the
    backward pass with the same seed and step recomputes it. p in [0, 1) (InvalidArgumentError
    otherwise); seed and step in [0, 2**64-1] (ArgumentRangeError otherwise: a negative seed is
    refused, not wrapped)."""
    x = _tensor(x, "x")
    args = c_double(p, "p"), c_uint64(seed, "seed"), c_uint64(step, "step")
    o = _out(out, x.shape, fmt, x)
    check(lib().tensor_dropout(o._h, x._h, *args), "tensor_dropout")
    return o


def dropout_backward(dy: Tensor, p: float, seed: int = 0, step: int = 0,
                     out: Optional[Tensor] = None, fmt: Optional[FormatLike] = None) -> Tensor:
    """dx = dy * mask / (1 - p) with the mask of :func:`dropout` for the same seed and step;
    raises as :func:`dropout`."""
    dy = _tensor(dy, "dy")
    args = c_double(p, "p"), c_uint64(seed, "seed"), c_uint64(step, "step")
    o = _out(out, dy.shape, fmt, dy)
    check(lib().tensor_dropout_backward(o._h, dy._h, *args), "tensor_dropout_backward")
    return o


# ------------------------------------------------------------------------------------------
# element-wise math functions (flexpoint.h: tensor_unary, tensor_clamp, tensor_pow_scalar)
# ------------------------------------------------------------------------------------------
from typing import List  # noqa: E402

from ._check import c_str  # noqa: E402

__all__ += ["unary", "unary_backward", "unary_names", "clamp", "clamp_backward", "pow",
            "pow_backward"]


def unary_names() -> List[str]:
    """The function names :func:`unary` accepts, in the library's order."""
    L, names = lib(), []
    while True:
        n = L.tensor_unary_name(len(names))
        if n is None:
            return names
        names.append(n.decode())


def unary(a: Tensor, fn: str, out: Optional[Tensor] = None,
          fmt: Optional[FormatLike] = None) -> Tensor:
    """out = fn(a) elementwise; fn is one of :func:`unary_names` ("exp", "log", "sqrt",
    "rsqrt", "reciprocal", "tanh", "sigmoid", "gelu", "gelu_tanh", "silu", "square", "abs").
    The math runs in fp32 for every format and is rounded once into out (docs/math.md).
    UnknownNameError for another name (its message lists the known ones)."""
    name = c_str(fn, "fn")
    a = _tensor(a, "a")
    o = _out(out, a.shape, fmt, a)
    check(lib().tensor_unary(o._h, a._h, name), "tensor_unary")
    return o


def unary_backward(dy: Tensor, x: Tensor, fn: str, out: Optional[Tensor] = None,
                   fmt: Optional[FormatLike] = None) -> Tensor:
    """dx = dy * fn'(x) for a name of :func:`unary`; out defaults to dy's format."""
    name = c_str(fn, "fn")
    dy, x = _tensor(dy, "dy"), _tensor(x, "x")
    o = _out(out, dy.shape, fmt, dy)
    check(lib().tensor_unary_backward(o._h, dy._h, x._h, name), "tensor_unary_backward")
    return o


def clamp(a: Tensor, lo: float, hi: float, out: Optional[Tensor] = None,
          fmt: Optional[FormatLike] = None) -> Tensor:
    """out = min(max(a, lo), hi), NaN kept; -inf / inf leave a side open. InvalidArgumentError
    for a NaN bound or lo > hi."""
    lo, hi = c_double(lo, "lo"), c_double(hi, "hi")
    a = _tensor(a, "a")
    o = _out(out, a.shape, fmt, a)
    check(lib().tensor_clamp(o._h, a._h, lo, hi), "tensor_clamp")
    return o


def clamp_backward(dy: Tensor, x: Tensor, lo: float, hi: float, out: Optional[Tensor] = None,
                   fmt: Optional[FormatLike] = None) -> Tensor:
    """dx = dy where lo <= x <= hi, else 0."""
    lo, hi = c_double(lo, "lo"), c_double(hi, "hi")
    dy, x = _tensor(dy, "dy"), _tensor(x, "x")
    o = _out(out, dy.shape, fmt, dy)
    check(lib().tensor_clamp_backward(o._h, dy._h, x._h, lo, hi), "tensor_clamp_backward")
    return o


def pow(a: Tensor, p: float, out: Optional[Tensor] = None,  # noqa: A001 - fx.pow only
        fmt: Optional[FormatLike] = None) -> Tensor:
    """out = a ** p with C99 pow semantics, p a finite real used exactly (InvalidArgumentError
    otherwise); rounded once from binary64."""
    p = c_double(p, "p")
    a = _tensor(a, "a")
    o = _out(out, a.shape, fmt, a)
    check(lib().tensor_pow_scalar(o._h, a._h, p), "tensor_pow_scalar")
    return o


def pow_backward(dy: Tensor, x: Tensor, p: float, out: Optional[Tensor] = None,
                 fmt: Optional[FormatLike] = None) -> Tensor:
    """dx = dy * p * x ** (p - 1) (0 for p = 0)."""
    p = c_double(p, "p")
    dy, x = _tensor(dy, "dy"), _tensor(x, "x")
    o = _out(out, dy.shape, fmt, dy)
    check(lib().tensor_pow_scalar_backward(o._h, dy._h, x._h, p), "tensor_pow_scalar_backward")
    return o
