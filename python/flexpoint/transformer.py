"""The transformer ops of flexpoint_nn.h (docs/transformer_ops.md) as functions.

Softmax and log-softmax along an axis, layer norm, batched matmul with transposes, causal and
general masks, embedding lookup and its scatter-add gradient, AdamW and gradient clipping by the
global norm, forward and backward. The conventions are :mod:`flexpoint.ops`': every function
writes into ``out`` when given (a Tensor of any format and the right shape) and returns it, else
allocates it in ``fmt`` (default: the first tensor argument's format); shapes, axes and indices
are checked by the library, whose message the exception carries; scalars and arrays that cannot
cross into C unchanged raise ArgumentTypeError / ArgumentRangeError, and nothing is written then.
Host tensors only: device tensors raise UnsupportedError.
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, c_float, c_int32, c_void_p
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from ._check import c_bool, c_double, c_int, c_int_array, c_uint64
from ._lib import lib
from .errors import InvalidArgumentError, check
from .formats import FormatLike
from .ops import _f32_buffer, _out, _tensor
from .tensor import Tensor

__all__ = [
    "softmax", "log_softmax", "softmax_backward", "log_softmax_backward", "layernorm",
    "layernorm_backward", "bmm", "bmm_backward", "causal_mask", "attention_softmax",
    "attention_softmax_backward", "masked_fill", "embedding",
    "embedding_backward", "adamw_step", "clip_grad_norm",
]

_fp = POINTER(c_float)
_i32p = POINTER(c_int32)


def _opt_f32(a: Any, n: int, name: str, inplace: bool) -> Any:
    if a is None:
        return None, None
    buf = _f32_buffer(a, n, name, inplace=inplace)
    return buf, buf.ctypes.data_as(_fp)


# ------------------------------------------------------------------------------------------
# softmax
# ------------------------------------------------------------------------------------------
def softmax(x: Tensor, axis: int = -1, out: Optional[Tensor] = None,
            fmt: Optional[FormatLike] = None) -> Tensor:
    """y = exp(x - max) / sum(exp(x - max)) along `axis` (max subtracted, computed in fp32 by
    the library's defined exponential and 16 interleaved partial sums, one rounding into y's
    format; docs/transformer_ops.md).
    InvalidArgumentError for an axis out of range."""
    x = _tensor(x, "x")
    ax = c_int(axis, "axis")
    o = _out(out, x.shape, fmt, x)
    check(lib().tensor_softmax(o._h, x._h, ax), "tensor_softmax")
    return o


def log_softmax(x: Tensor, axis: int = -1, out: Optional[Tensor] = None,
                fmt: Optional[FormatLike] = None) -> Tensor:
    """y = (x - max) - log(sum(exp(x - max))) along `axis`; raises as :func:`softmax`."""
    x = _tensor(x, "x")
    ax = c_int(axis, "axis")
    o = _out(out, x.shape, fmt, x)
    check(lib().tensor_log_softmax(o._h, x._h, ax), "tensor_log_softmax")
    return o


def softmax_backward(dy: Tensor, y: Tensor, axis: int = -1, out: Optional[Tensor] = None,
                     fmt: Optional[FormatLike] = None) -> Tensor:
    """dx = y * (dy - sum(dy * y)) from the forward output y; raises as :func:`softmax`."""
    dy, y = _tensor(dy, "dy"), _tensor(y, "y")
    ax = c_int(axis, "axis")
    o = _out(out, dy.shape, fmt, dy)
    check(lib().tensor_softmax_backward(o._h, dy._h, y._h, ax), "tensor_softmax_backward")
    return o


def log_softmax_backward(dy: Tensor, y: Tensor, axis: int = -1, out: Optional[Tensor] = None,
                         fmt: Optional[FormatLike] = None) -> Tensor:
    """dx = dy - exp(y) * sum(dy) from the forward output y (log-probabilities)."""
    dy, y = _tensor(dy, "dy"), _tensor(y, "y")
    ax = c_int(axis, "axis")
    o = _out(out, dy.shape, fmt, dy)
    check(lib().tensor_log_softmax_backward(o._h, dy._h, y._h, ax),
          "tensor_log_softmax_backward")
    return o


# ------------------------------------------------------------------------------------------
# layer norm
# ------------------------------------------------------------------------------------------
def _last(x: Tensor) -> Tuple[int, int]:
    d = x.shape[-1]
    return d, (x.size // d if d else 0)


def layernorm(x: Tensor, gamma: Optional[np.ndarray] = None, beta: Optional[np.ndarray] = None,
              eps: float = 1e-5, out: Optional[Tensor] = None, fmt: Optional[FormatLike] = None
              ) -> Tuple[Tensor, np.ndarray, np.ndarray]:
    """Layer norm over the last axis: y = (x - mean) / sqrt(var + eps) * gamma + beta.

    gamma and beta are float32 arrays of D = x.shape[-1] values (None: 1 and 0), the affine
    parameters kept in fp32. Returns (y, mean, rstd), the last two float32 arrays of one value
    per row. InvalidArgumentError for a gamma/beta of another size or a bad eps."""
    x = _tensor(x, "x")
    ep = c_double(eps, "eps")
    d, rows = _last(x)
    _, gp = _opt_f32(gamma, d, "gamma", False)
    _, bp = _opt_f32(beta, d, "beta", False)
    o = _out(out, x.shape, fmt, x)
    mean = np.zeros(max(rows, 1), dtype=np.float32)
    rstd = np.zeros(max(rows, 1), dtype=np.float32)
    check(lib().tensor_layernorm(o._h, x._h, gp, bp, ep, mean.ctypes.data_as(_fp),
                                 rstd.ctypes.data_as(_fp)), "tensor_layernorm")
    return o, mean[:rows], rstd[:rows]


def layernorm_backward(dy: Tensor, x: Tensor, gamma: Optional[np.ndarray] = None,
                       eps: float = 1e-5, out: Optional[Tensor] = None,
                       fmt: Optional[FormatLike] = None
                       ) -> Tuple[Tensor, np.ndarray, np.ndarray]:
    """Gradients of :func:`layernorm`: (dx, dgamma, dbeta); dgamma and dbeta are float32
    arrays of D values (the statistics are recomputed from x)."""
    dy, x = _tensor(dy, "dy"), _tensor(x, "x")
    ep = c_double(eps, "eps")
    d, _ = _last(x)
    _, gp = _opt_f32(gamma, d, "gamma", False)
    o = _out(out, x.shape, fmt, dy)
    dg = np.zeros(max(d, 1), dtype=np.float32)
    db = np.zeros(max(d, 1), dtype=np.float32)
    check(lib().tensor_layernorm_backward(o._h, dg.ctypes.data_as(_fp), db.ctypes.data_as(_fp),
                                          dy._h, x._h, gp, ep), "tensor_layernorm_backward")
    return o, dg[:d], db[:d]


# ------------------------------------------------------------------------------------------
# batched matmul and masks
# ------------------------------------------------------------------------------------------
def _bmm_shape(a: Tensor, b: Tensor, ta: int, tb: int) -> Tuple[int, ...]:
    if a.ndim < 2 or b.ndim != a.ndim:
        return (1, 1)  # the library reports the shapes
    m = a.shape[-1] if ta else a.shape[-2]
    n = b.shape[-2] if tb else b.shape[-1]
    return tuple(a.shape[:-2]) + (m, n)


def bmm(a: Tensor, b: Tensor, trans_a: bool = False, trans_b: bool = False,
        out: Optional[Tensor] = None, fmt: Optional[FormatLike] = None) -> Tensor:
    """out[..., M, N] = op(a) @ op(b) per batch, op = transpose of the last two axes when its
    flag is set (attention scores: ``bmm(q, k, trans_b=True)``). Integer formats sum exactly.
    ShapeError when the shapes do not fit."""
    a, b = _tensor(a, "a"), _tensor(b, "b")
    ta, tb = c_bool(trans_a, "trans_a"), c_bool(trans_b, "trans_b")
    o = _out(out, _bmm_shape(a, b, ta, tb), fmt, a)
    check(lib().tensor_bmm(o._h, a._h, b._h, ta, tb), "tensor_bmm")
    return o


def bmm_backward(dout: Tensor, a: Tensor, b: Tensor, trans_a: bool = False,
                 trans_b: bool = False, fmt: Optional[FormatLike] = None
                 ) -> Tuple[Tensor, Tensor]:
    """(da, db), the gradients of :func:`bmm` for the same flags, in `fmt` (default: dout's)."""
    dout, a, b = _tensor(dout, "dout"), _tensor(a, "a"), _tensor(b, "b")
    ta, tb = c_bool(trans_a, "trans_a"), c_bool(trans_b, "trans_b")
    da, db = _out(None, a.shape, fmt, dout), _out(None, b.shape, fmt, dout)
    check(lib().tensor_bmm_backward(da._h, db._h, dout._h, a._h, b._h, ta, tb),
          "tensor_bmm_backward")
    return da, db


def causal_mask(x: Tensor, fill: float = float("-inf"), out: Optional[Tensor] = None,
                fmt: Optional[FormatLike] = None) -> Tensor:
    """y = x with `fill` where column > row over the last two axes (the gradient:
    ``causal_mask(dy, 0.0)``). -inf into a flex16_5/dfp16 output is stored as -32767 and counted
    as non-finite: mask such scores into a float output (fmt="fp32")."""
    x = _tensor(x, "x")
    f = c_double(fill, "fill")
    o = _out(out, x.shape, fmt, x)
    check(lib().tensor_causal_mask(o._h, x._h, f), "tensor_causal_mask")
    return o


def attention_softmax(x: Tensor, scale: float, causal: bool = True,
                      out: Optional[Tensor] = None, fmt: Optional[FormatLike] = None) -> Tensor:
    """Attention's probabilities: softmax along the last axis of ``scale * x`` with the
    elements above the diagonal of each [Sq, Sk] matrix at -inf first when `causal`. The same
    bits as ``softmax(causal_mask(scale(x, s) into fp32, -inf))``, without writing the scaled
    scores out. InvalidArgumentError for a scale that is not
    finite, ShapeError for x below 2-D."""
    x = _tensor(x, "x")
    s = c_double(scale, "scale")
    o = _out(out, x.shape, fmt, x)
    check(lib().tensor_attention_softmax(o._h, x._h, s, c_bool(causal, "causal")),
          "tensor_attention_softmax")
    return o


def attention_softmax_backward(dy: Tensor, y: Tensor, scale: float,
                               out: Optional[Tensor] = None,
                               fmt: Optional[FormatLike] = None) -> Tensor:
    """The gradient of :func:`attention_softmax` with respect to its scores:
    ``scale * y * (dy - sum(dy * y))`` along the last axis, from the forward's output y. The
    same bits as :func:`softmax_backward` into fp32, then ``scale(..., scale)``: one rounding
    into the output's format. InvalidArgumentError for a scale that is not finite, ShapeError
    for y below 2-D or dy of another shape."""
    dy, y = _tensor(dy, "dy"), _tensor(y, "y")
    s = c_double(scale, "scale")
    o = _out(out, y.shape, fmt, dy)
    check(lib().tensor_attention_softmax_backward(o._h, dy._h, y._h, s),
          "tensor_attention_softmax_backward")
    return o


def masked_fill(x: Tensor, mask: Tensor, fill: float, out: Optional[Tensor] = None,
                fmt: Optional[FormatLike] = None) -> Tensor:
    """y = x with `fill` where mask (a Tensor broadcastable to x's shape) is nonzero; ShapeError
    for a mask that does not broadcast."""
    x, m = _tensor(x, "x"), _tensor(mask, "mask")
    f = c_double(fill, "fill")
    o = _out(out, x.shape, fmt, x)
    check(lib().tensor_masked_fill(o._h, x._h, m._h, f), "tensor_masked_fill")
    return o


# ------------------------------------------------------------------------------------------
# embedding
# ------------------------------------------------------------------------------------------
def _indices(indices: Any) -> Tuple[np.ndarray, Any]:
    idx = c_int_array(indices, "indices", np.int32)
    ptr: Any = idx.reshape(-1).ctypes.data_as(_i32p) if idx.size else (c_int32 * 1)()
    return idx, ptr


def embedding(table: Tensor, indices: Any, out: Optional[Tensor] = None,
              fmt: Optional[FormatLike] = None) -> Tensor:
    """y[..., D] = table[indices] (table [V, D]; y has indices' shape plus D). Integer formats
    gather their mantissas exactly. RangeError naming an index outside [0, V); indices must be
    integers (ArgumentTypeError for floats or bools)."""
    table = _tensor(table, "table")
    idx, ptr = _indices(indices)
    d = table.shape[-1] if table.ndim == 2 else 1
    o = _out(out, tuple(idx.shape) + (d,), fmt, table)
    check(lib().tensor_embedding(o._h, table._h, ptr, idx.size), "tensor_embedding")
    return o


def embedding_backward(dy: Tensor, indices: Any, num_embeddings: int,
                       out: Optional[Tensor] = None, fmt: Optional[FormatLike] = None) -> Tensor:
    """dtable[num_embeddings, D]: the rows of dy (indices' shape plus D) added at their indices,
    zeros elsewhere; integer formats sum exactly."""
    dy = _tensor(dy, "dy")
    idx, ptr = _indices(indices)
    v = c_int(num_embeddings, "num_embeddings", lo=0)
    o = _out(out, (v, dy.shape[-1]), fmt, dy)
    check(lib().tensor_embedding_backward(o._h, dy._h, ptr, idx.size),
          "tensor_embedding_backward")
    return o


# ------------------------------------------------------------------------------------------
# optimiser step and clipping
# ------------------------------------------------------------------------------------------
def adamw_step(w: Tensor, grad: Tensor, m: np.ndarray, v: np.ndarray, lr: float, step: int,
               beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 0.01, grad_scale: float = 1.0,
               master: Optional[np.ndarray] = None, stochastic: bool = False,
               seed: int = 0) -> None:
    """One AdamW step on w (decoupled weight decay, as torch.optim.AdamW). m, v (and master)
    are writable float32 arrays of w.size elements, updated in place; step counts from 1.
    Raises as :func:`flexpoint.adam_step`."""
    w, grad = _tensor(w, "w"), _tensor(grad, "grad")
    hyper = (c_double(lr, "lr"), c_double(beta1, "beta1"), c_double(beta2, "beta2"),
             c_double(eps, "eps"), c_double(weight_decay, "weight_decay"),
             c_double(grad_scale, "grad_scale"), c_bool(stochastic, "stochastic"),
             c_uint64(seed, "seed"), c_uint64(step, "step"))
    n = w.size
    _, mp = _opt_f32(m, n, "m", True)
    _, vp = _opt_f32(v, n, "v", True)
    _, wp = _opt_f32(master, n, "master", True)
    if mp is None or vp is None:
        raise InvalidArgumentError("m and v are required float32 arrays", -1)
    check(lib().fx_adamw_step(w._h, grad._h, wp, mp, vp, *hyper), "fx_adamw_step")


def clip_grad_norm(grads: Sequence[Tensor], max_norm: float) -> float:
    """Scale the gradients in place so that their global L2 norm is at most max_norm
    (torch.nn.utils.clip_grad_norm_: factor max_norm / (norm + 1e-6)); returns the norm before
    clipping. A non-finite norm scales nothing (returned as inf or nan)."""
    gs = [_tensor(g, f"grads[{i}]") for i, g in enumerate(grads)]
    mx = c_double(max_norm, "max_norm")
    arr = (c_void_p * max(len(gs), 1))(*[g._h for g in gs])
    norm = ctypes.c_double(0.0)
    check(lib().fx_clip_grad_norm(ctypes.cast(arr, POINTER(c_void_p)), len(gs), mx,
                                  ctypes.byref(norm)), "fx_clip_grad_norm")
    return float(norm.value)
