"""Hostile arguments: every value the binding hands to C either arrives unchanged or is refused.

ctypes wraps integers to the C type of a parameter (``t.exp = 2**40`` would set 0), NumPy's
astype truncates float labels and wraps int64 ones, and a C string ends at its first NUL. The
table below lists every setter, constructor and function that passes a Python value to the
library, with the kind of its C parameter; each is fed the hostile values of that kind and
must raise the documented exception (ArgumentRangeError, ArgumentTypeError,
InvalidArgumentError, OutOfMemoryError) and leave its objects exactly as they were. The table
is checked for completeness against the package itself: every public function, method,
property setter and dataclass field that takes an integer, shape, format, device or path must
be in it, or in EXCLUDED with the reason. The last tests check that the valid values at the
edges of each range still go through unchanged.
"""
from __future__ import annotations

import dataclasses
import inspect
import os
import re
import sys
from typing import Any, Callable, List, Tuple

import numpy as np
import pytest

import flexpoint as fx
from flexpoint import _check

# ------------------------------------------------------------------------------------------
# hostile values by kind of C parameter, with the exception each must raise
# ------------------------------------------------------------------------------------------
INT_BEYOND_INT32 = [2**31, -2**31 - 1, 2**32 + 16, 2**32 - 20, 2**63, -2**63 - 1, 2**64]
INT_BEYOND_INT64 = [2**63, -2**63 - 1, 2**64, 2**64 + 16]
INT_BEYOND_UINT64 = [-1, -2**31 - 1, -2**63 - 1, 2**64, 2**64 + 16]
NOT_INTS = [1.5, 2.0, np.float64(3.0), "3", b"3", None, True, False, np.bool_(True), [1]]
NOT_FLAGS = ["yes", "no", "", None, 1.0, 0.5, [True]]
NOT_REALS = ["1.0", b"1", None, True, np.bool_(False), object(), [1.0]]
NUL_NAMES = ["fp32\0", "\0", "flex16_5\0x", "robust\0published"]
NOT_NAMES = [None, 3, 3.0, b"fp32", ["fp32"]]
NUL_PATHS = ["ckpt\0.bin", b"ckpt\0.bin", "/tmp/\0"]
NOT_PATHS = [None, 3, 1.5, ["a"]]
BAD_SHAPES_RANGE = [(2**63,), (-1,), (3, -2), (2**64,), (1, -2**63 - 1)]
BAD_SHAPES_OVERFLOW = [(0, 2**40, 2**40), (2**32, 2**32), (2**62, 2, 1)]
BAD_SHAPES_TYPE = [(1.5,), ("3",), (None,), (True, 2), 2.5, None, "3", (2, 2.0)]
INT32_ARRAYS_RANGE = [[0, 2**31], [0, 2**40], np.array([0, 2**32 + 1], dtype=np.int64),
                      [-2**31 - 1], [2**64], np.array([2**63], dtype=np.uint64), [0, 2**63]]
INT64_ARRAYS_RANGE = [[2**63], [-2**63 - 1], [0, 2**64], np.array([2**63], dtype=np.uint64)]
NOT_INT_ARRAYS = [np.array([0.0, 1.0]), [0.0, 1.0], [0.5, 1], np.array([True, False]),
                  [True, False], ["0", "1"], [None, 1], np.array([0j, 1j]),
                  np.array([0, 1], dtype=np.float32)]

R, T, I, M = fx.ArgumentRangeError, fx.ArgumentTypeError, fx.InvalidArgumentError, \
    fx.OutOfMemoryError

#: kind -> [(value, exception)]
HOSTILE = {
    "int": [(v, R) for v in INT_BEYOND_INT32] + [(v, T) for v in NOT_INTS],
    "int64": [(v, R) for v in INT_BEYOND_INT64] + [(v, T) for v in NOT_INTS],
    "uint64": [(v, R) for v in INT_BEYOND_UINT64] + [(v, T) for v in NOT_INTS],
    "flag": [(v, R) for v in [2, -1] + INT_BEYOND_INT32] + [(v, T) for v in NOT_FLAGS],
    "double": [(10**400, R), (-(2**1100), R)] + [(v, T) for v in NOT_REALS],
    "name": [(v, I) for v in NUL_NAMES] + [(v, T) for v in NOT_NAMES],
    # a format is a name or a fmt_t int: anything else, or an int that is not one, is a
    # FormatError (never wrapped into a valid format)
    "fmt": [(v, I) for v in NUL_NAMES] +
           [(v, fx.FormatError) for v in [None, 3.0, b"fp32", True, 5, -1, 2**32 + 3, 2**64]],
    "name16": [(v, I) for v in NUL_NAMES + ["x" * 16, "é" * 8]] + [(v, T) for v in NOT_NAMES],
    "path": [(v, I) for v in NUL_PATHS] + [(v, T) for v in NOT_PATHS],
    "shape": [(v, R) for v in BAD_SHAPES_RANGE] + [(v, M) for v in BAD_SHAPES_OVERFLOW] +
             [(v, T) for v in BAD_SHAPES_TYPE],
    "int32[]": [(v, R) for v in INT32_ARRAYS_RANGE] + [(v, T) for v in NOT_INT_ARRAYS],
    "int64[]": [(v, R) for v in INT64_ARRAYS_RANGE] + [(v, T) for v in NOT_INT_ARRAYS],
}


# ------------------------------------------------------------------------------------------
# the objects the targets act on; each case gets fresh ones (a trainer is shared: refused
# calls must not change it, and the state check says so)
# ------------------------------------------------------------------------------------------
def flex(values=(1.0, -0.5, 0.25), exp=-6) -> fx.Tensor:
    t = fx.tensor((len(values),), "flex16_5", autoflex="fixed", exp=exp)
    return t.assign(np.float32(values))


def tstate(*ts: fx.Tensor) -> Tuple:
    """What must not change in tensors: raw bits, and the exponent state of shared ones."""
    out = []
    for t in ts:
        out.append((t.shape, t.fmt, t.get_raw().tobytes()))
        if t.is_shared_exponent:
            out.append((t.exp, t.exp_window, t.stats))
    return tuple(out)


_TRAINER: List[Any] = []


def trainer() -> fx.Trainer:
    if not _TRAINER:
        ds = fx.data.synthetic(8, 1, 4, 4, 2, seed=3)
        _TRAINER.append(fx.Trainer(fx.TrainConfig(model="mlp", batch_size=4, seed=1), ds, ds))
    return _TRAINER[0]


def trainer_state() -> Tuple:
    tr = trainer()
    return tr.global_step, tr.epoch_index, tr.params().tobytes()


def _never(v: Any) -> bool:
    return False


def is_none(v: Any) -> bool:  # None means "the default" for optional arguments
    return v is None


def is_str(v: Any) -> bool:  # a str is meaningful (a device, a mode name, a tensor name)
    return isinstance(v, str)


def is_list(v: Any) -> bool:  # a sequence is meaningful (a pair of ints)
    return isinstance(v, list)


def is_none_or_str(v: Any) -> bool:
    return v is None or isinstance(v, str)


def is_none_or_list(v: Any) -> bool:
    return v is None or isinstance(v, list)


@dataclasses.dataclass
class Target:
    """One way of handing a value to C: make() returns (call(value), state()); state() is
    compared before and after a refused call (None: nothing outlives the call). `skip` drops
    the hostile values that are valid for this parameter (None for an optional one)."""
    name: str
    kind: str
    make: Callable[[], Tuple[Callable[[Any], Any], Callable[[], Any]]]
    skip: Callable[[Any], bool] = _never


def _none() -> None:
    return None


def t_exp():
    t = flex()

    def call(v):
        t.exp = v
    return call, lambda: tstate(t)


def t_method(method: str, fmt: str = "flex16_5", pos: int = 0, nargs: int = 1, **kw):
    """A Tensor method with the hostile value at position `pos` of `nargs` (others valid)."""
    def make():
        t = flex() if fmt == "flex16_5" else fx.from_numpy(np.ones((2, 3)), fmt)
        valid = {"transpose": [0, 1], "slice": [0, 0, 1, 1]}.get(method, [0] * nargs)

        def call(v):
            args = list(valid[:nargs])
            args[pos] = v
            return getattr(t, method)(*args, **kw)
        return call, lambda: tstate(t)
    return make


def t_kw(fn: Callable, key: str, *args, **kw):
    """A function called with the hostile value as keyword `key` (no prior state)."""
    def make():
        return (lambda v: fn(*args, **{**kw, key: v})), _none
    return make


def op_out(fn: Callable, key: str, x_shape=(1, 1, 4, 4), **kw):
    """An op writing into a given `out` tensor: a refused call must leave out untouched."""
    def make():
        x = fx.from_numpy(np.arange(np.prod(x_shape), dtype=np.float32).reshape(x_shape) / 7,
                          "fp32")
        y = fn(x, **kw)  # the valid call gives out its shape
        out = y[0] if isinstance(y, tuple) else y
        out.assign(np.full(out.shape, 3.0))

        def call(v):
            return fn(x, **{**kw, key: v}, out=out)
        return call, lambda: tstate(out, x)
    return make


def conv_out(key: str):
    def make():
        x = fx.from_numpy(np.ones((1, 1, 5, 5)), "fp32")
        w = fx.from_numpy(np.ones((1, 1, 3, 3)), "fp32")
        out = fx.conv2d(x, w).assign(np.full((1, 1, 3, 3), 2.0))

        def call(v):
            return fx.conv2d(x, w, **{key: v}, out=out)
        return call, lambda: tstate(out)
    return make


def dropout_out(key: str, backward: bool = False):
    def make():
        x = fx.from_numpy(np.ones((4, 4)), "fp32")
        out = fx.tensor((4, 4), "fp32").assign(np.full((4, 4), 5.0))
        fn = fx.dropout_backward if backward else fx.dropout
        args = {"p": 0.5, "seed": 1, "step": 2}

        def call(v):
            return fn(x, **{**args, key: v}, out=out)
        return call, lambda: tstate(out)
    return make


def sgd(key: str, adam: bool = False):
    def make():
        w = fx.from_numpy(np.ones(4), "fp32")
        g = fx.from_numpy(np.full(4, 0.5), "fp32")
        bufs = [np.zeros(4, np.float32) for _ in range(3)]

        def call(v):
            if adam:
                args = {"lr": 0.1, "step": 1, "seed": 0, "stochastic": False}
                fx.adam_step(w, g, bufs[0], bufs[1], **{**args, key: v})
            else:
                args = {"lr": 0.1, "step": 0, "seed": 0, "stochastic": False}
                fx.sgd_step(w, g, bufs[0], **{**args, key: v})
        return call, lambda: (tstate(w), [b.tobytes() for b in bufs])
    return make


def softmax(key: str):
    def make():
        logits = fx.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), "fp32")
        d = fx.tensor((2, 3), "fp32").assign(np.full((2, 3), 9.0))
        args = {"labels": [0, 2], "grad_scale": 1.0}

        def call(v):
            a = {**args, key: v}
            return fx.softmax_cross_entropy(logits, a["labels"], grad_scale=a["grad_scale"],
                                            dlogits=d)
        return call, lambda: tstate(d, logits)
    return make


def batchnorm(key: str):
    def make():
        x = fx.from_numpy(np.arange(8, dtype=np.float32).reshape(4, 2), "fp32")
        g, b = fx.from_numpy(np.ones(2), "fp32"), fx.from_numpy(np.zeros(2), "fp32")
        rm, rv = np.zeros(2, np.float32), np.ones(2, np.float32)
        out = fx.tensor((4, 2), "fp32").assign(np.full((4, 2), 4.0))
        args = {"training": True, "momentum": 0.1, "eps": 1e-5}

        def call(v):
            return fx.batchnorm(x, g, b, rm, rv, **{**args, key: v}, out=out)
        return call, lambda: (tstate(out), rm.tobytes(), rv.tobytes())
    return make


def maxpool_backward():
    dy = fx.from_numpy(np.ones((1, 1, 1, 2)), "fp32")
    out = fx.tensor((1, 1, 2, 4), "fp32").assign(np.full((1, 1, 2, 4), 6.0))

    def call(v):
        return fx.maxpool2d_backward(dy, v, (1, 1, 2, 4), out=out)
    return call, lambda: tstate(out)


def data_fn(method: str, *valid, pos: int = 0):
    def make():
        ds = fx.data.synthetic(6, 1, 3, 3, 2, seed=4)

        def call(v):
            args = list(valid)
            args[pos] = v
            return getattr(ds, method)(*args)
        return call, lambda: (len(ds), ds.images.tobytes(), ds.labels.tobytes())
    return make


def synthetic(key: str):
    args = {"n": 4, "channels": 1, "height": 3, "width": 3, "classes": 2, "seed": 0}
    return t_kw(lambda **a: fx.data.synthetic(**a), key, **args)


def from_arrays(key: str):
    x = np.zeros((2, 1, 2, 2), np.float32)
    args = {"labels": [0, 1], "classes": 2}
    return t_kw(lambda **a: fx.data.from_arrays(x, **a), key, **args)


def train_config(key: str):
    return t_kw(lambda **a: fx.TrainConfig(**a).to_c(), key)


def trainer_new(key: str):
    """The configuration is refused before fx_trainer_new: the same checks, through Trainer."""
    def make():
        ds = fx.data.synthetic(8, 1, 4, 4, 2, seed=3)

        def call(v):
            return fx.Trainer(fx.TrainConfig(model="mlp", **{key: v}), ds)
        return call, _none
    return make


def trainer_method(method: str):
    def make():
        tr = trainer()
        return (lambda v: getattr(tr, method)(v)), trainer_state
    return make


def autoflex_field(key: str):
    def make():
        t = flex()
        cfg = fx.autoflex_preset("published")

        def call(v):
            t.set_autoflex(dataclasses.replace(cfg, **{key: v}))
        return call, lambda: (tstate(t), t.autoflex_config)
    return make


def scaler_attr(key: str):
    def make():
        s = fx.LossScaler()

        def call(v):
            setattr(s, key, v)
        return call, s.state_dict
    return make


def scaler_load(key: str):
    def make():
        s = fx.LossScaler()

        def call(v):
            st = s.state_dict()
            st["scale"] = 2.0  # a valid change that must not be applied either
            st[key] = v
            s.load_state_dict(st)
        return call, s.state_dict
    return make


def scaler_update():
    s = fx.LossScaler()
    return s.update, s.state_dict


def global_setter(setter: Callable, getter: Callable):
    def make():
        return setter, getter
    return make


def tensor_to():
    t = flex()
    return t.to, lambda: tstate(t)


def x4(shape=(1, 1, 4, 4)) -> fx.Tensor:
    return fx.from_numpy(np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 7, "fp32")


def fn_out(fn: Callable, key: str, args: Callable[[], tuple], **kw):
    """fn(*args(), **kw) with the hostile value as keyword `key`, into an `out` tensor that a
    refused call must leave untouched (the valid call gives out its shape)."""
    def make():
        a = args()
        y = fn(*a, **kw)
        out = y[0] if isinstance(y, tuple) else y
        out.assign(np.full(out.shape, 3.0))

        def call(v):
            return fn(*a, **{**kw, key: v}, out=out)
        return call, lambda: tstate(out, *[t for t in a if isinstance(t, fx.Tensor)])
    return make


def conv_bw(key: str, weight: bool = False):
    """conv2d_backward_input / _weight into an out tensor; a hostile stride, padding, dilation
    or kernel size is refused before anything is allocated."""
    if weight:
        return fn_out(fx.conv2d_backward_weight, key, lambda: (x4((1, 1, 5, 5)), x4((1, 1, 3, 3))),
                      kernel_size=3)
    return fn_out(fx.conv2d_backward_input, key,
                  lambda: (x4((1, 1, 3, 3)), x4((1, 1, 3, 3)), (1, 1, 5, 5)))


def bias_relu(key: str):
    return fn_out(fx.conv2d_bias_relu, key, lambda: (x4((1, 1, 5, 5)), x4((1, 1, 3, 3))))


def axis_op(fn: Callable, backward: bool = False):
    if backward:
        return fn_out(fn, "axis", lambda: (x4((2, 3)), fx.softmax(x4((2, 3)))), axis=-1)
    return fn_out(fn, "axis", lambda: (x4((2, 3)),), axis=-1)


def bmm_flag(key: str, backward: bool = False):
    def make():
        a, b = x4((2, 2, 3)), x4((2, 3, 2))
        if backward:
            d = x4((2, 2, 2))
            return (lambda v: fx.bmm_backward(d, a, b, **{key: v})), lambda: tstate(a, b, d)
        out = fx.bmm(a, b).assign(np.full((2, 2, 2), 3.0))
        return (lambda v: fx.bmm(a, b, **{key: v}, out=out)), lambda: tstate(out, a, b)
    return make


def embedding(key: str, backward: bool = False):
    if backward:
        kw = {"indices": [0, 2], "num_embeddings": 3}
        return fn_out(lambda dy, **k: fx.embedding_backward(dy, k.pop("indices"),
                                                            k.pop("num_embeddings"), **k),
                      key, lambda: (x4((2, 4)),), **kw)
    return fn_out(lambda t, **k: fx.embedding(t, k.pop("indices"), **k), key,
                  lambda: (x4((3, 4)),), indices=[0, 2])


def adamw(key: str):
    def make():
        w = fx.from_numpy(np.ones(4), "fp32")
        g = fx.from_numpy(np.full(4, 0.5), "fp32")
        m, v = np.zeros(4, np.float32), np.zeros(4, np.float32)
        args = {"lr": 0.1, "step": 1, "seed": 0, "stochastic": False}

        def call(val):
            fx.adamw_step(w, g, m, v, **{**args, key: val})
        return call, lambda: (tstate(w, g), m.tobytes(), v.tobytes())
    return make


def clip_norm():
    gs = [x4((2, 2)), x4((3,))]
    return (lambda v: fx.clip_grad_norm(gs, v)), lambda: tstate(*gs)


def layernorm(key: str, backward: bool = False):
    if backward:
        return fn_out(lambda dy, x, **k: fx.layernorm_backward(dy, x, **k), key,
                      lambda: (x4((2, 3)), x4((2, 3))))
    return fn_out(fx.layernorm, key, lambda: (x4((2, 3)),))


def pool_bw(key: str, kind: str = "avg"):
    if kind == "global":
        return fn_out(lambda dy, **k: fx.global_avgpool_backward(dy, k.pop("input_shape"), **k),
                      key, lambda: (x4((1, 1)),), input_shape=(1, 1, 2, 2))
    if kind == "max":
        def make():
            x = x4()
            y, am = fx.maxpool2d(x, 2, return_indices=True)
            out = fx.maxpool2d_backward(y, am, x.shape).assign(np.full(x.shape, 3.0))
            return (lambda v: fx.maxpool2d_backward(y, am, v, out=out)), lambda: tstate(out)
        return make
    return fn_out(lambda dy, **k: fx.avgpool2d_backward(dy, k.pop("input_shape"), **k), key,
                  lambda: (x4((1, 1, 2, 2)),), input_shape=(1, 1, 4, 4), kernel_size=2)


def shape_fn(fn: Callable, key: str, **kw):
    """conv2d_output_shape / pool2d_output_shape: pure arithmetic on the values given, which
    must be dimensions and C ints like the ops' own (never a float or wrapped shape)."""
    return t_kw(lambda **a: fn(**a), key, **kw)


def from_checkpoint():
    ds = fx.data.synthetic(8, 1, 4, 4, 2, seed=3)
    return (lambda v: fx.Trainer.from_checkpoint(v, ds)), _none


def profile_enable():
    tr = trainer()

    def state():
        return trainer_state() + (tr.profile()["steps"],)
    return tr.profile_enable, state


def set_kernel(key: str):
    def make():
        def call(v):
            args = {"op": "matmul", "fmt": "bf16", "name": "widen"}
            args[key] = v
            fx.set_kernel(args["op"], args["fmt"], args["name"])
        return call, lambda: fx.kernel_info()["report"]
    return make


def weights_path(write: bool):
    def make():
        if write:
            return (lambda v: fx.weights.write(v, {"a": np.ones(2)})), _none
        return fx.weights.read, _none
    return make


def device_buffer(from_numpy: bool):
    if from_numpy:
        return t_kw(lambda **a: fx.DeviceBuffer.from_numpy(np.ones(2), **a), "device")
    return t_kw(lambda **a: fx.DeviceBuffer((2,), **a), "device")


def tensor_cuda():
    t = flex()
    return t.cuda, lambda: tstate(t)


TARGETS = [
    # Tensor: exponent state, views, rounding, statistics, traces
    Target("Tensor.exp=", "int", t_exp),
    Target("Tensor.set_exp", "int", t_method("set_exp")),
    Target("Tensor.set_exp_window", "int", t_method("set_exp_window")),
    Target("Tensor.set_rounding(mode)", "int", t_method("set_rounding", nargs=2), is_str),
    Target("Tensor.set_rounding(seed)", "uint64", t_method("set_rounding", pos=1, nargs=2)),
    Target("Tensor.transpose(d0)", "int", t_method("transpose", "fp32", 0, 2)),
    Target("Tensor.transpose(d1)", "int", t_method("transpose", "fp32", 1, 2)),
    Target("Tensor.slice(dim)", "int", t_method("slice", "fp32", 0, 4)),
    Target("Tensor.slice(start)", "int64", t_method("slice", "fp32", 1, 4)),
    Target("Tensor.slice(stop)", "int64", t_method("slice", "fp32", 2, 4), is_none),
    Target("Tensor.slice(step)", "int64", t_method("slice", "fp32", 3, 4)),
    Target("Tensor.reshape", "shape", t_method("reshape", "fp32"), lambda v: v == (-1,)),
    Target("Tensor.trace_enable", "flag", t_method("trace_enable")),
    Target("Tensor.stat", "name", t_method("stat")),
    Target("Tensor.set_autoflex", "name", t_method("set_autoflex")),
    Target("Tensor.write_trace_csv", "path", t_method("write_trace_csv")),
    Target("Tensor.to", "int", tensor_to, is_str),
    # constructors
    Target("Tensor(shape)", "shape", t_kw(fx.Tensor, "shape")),
    Target("tensor(shape)", "shape", t_kw(fx.tensor, "shape")),
    Target("tensor(fmt)", "fmt", t_kw(fx.tensor, "fmt", (2,))),
    Target("tensor(exp)", "int", t_kw(fx.tensor, "exp", (2,)), is_none),
    Target("tensor(window_lo)", "int", t_kw(fx.tensor, "window_lo", (2,)), is_none),
    Target("tensor(autoflex)", "name", t_kw(fx.tensor, "autoflex", (2,)), is_none),
    Target("tensor(device)", "int", t_kw(fx.tensor, "device", (2,)), is_str),
    Target("from_numpy(seed)", "uint64", t_kw(fx.from_numpy, "seed", [1.0, 2.0],
                                              rounding="stochastic")),
    Target("from_numpy(exp)", "int", t_kw(fx.from_numpy, "exp", [1.0, 2.0]), is_none),
    Target("from_raw(exp)", "int", t_kw(fx.from_raw, "exp", np.int16([1, 2]), "dfp16"),
           is_none),
    Target("fmt_name", "fmt", t_kw(lambda fmt: fx.fmt_name(fmt), "fmt")),
    # ops: integer arguments, flags, scalars, labels and argmax
    Target("sum(axis)", "int", op_out(fx.sum, "axis", (2, 3)), is_none),
    Target("mean(axis)", "int", op_out(fx.mean, "axis", (2, 3)), is_none),
    Target("conv2d(stride)", "int", conv_out("stride"), is_list),
    Target("conv2d(padding)", "int", conv_out("padding"), is_list),
    Target("conv2d(dilation)", "int", conv_out("dilation"), is_list),
    Target("maxpool2d(kernel_size)", "int", op_out(fx.maxpool2d, "kernel_size"), is_list),
    Target("avgpool2d(stride)", "int", op_out(fx.avgpool2d, "stride"), is_none_or_list),
    Target("avgpool2d(padding)", "int", op_out(fx.avgpool2d, "padding"), is_list),
    Target("conv2d_bias_relu(relu)", "flag",
           t_kw(lambda relu: fx.conv2d_bias_relu(fx.tensor((1, 1, 3, 3), "fp32"),
                                                 fx.tensor((1, 1, 1, 1), "fp32"), relu=relu),
                "relu")),
    Target("conv2d_backward_input(input_shape)", "shape",
           t_kw(lambda s: fx.conv2d_backward_input(fx.tensor((1, 1, 1, 1), "fp32"),
                                                   fx.tensor((1, 1, 1, 1), "fp32"), s), "s")),
    Target("scale(s)", "double", op_out(fx.scale, "s", (2, 2), s=2.0)),
    Target("dropout(p)", "double", dropout_out("p")),
    Target("dropout(seed)", "uint64", dropout_out("seed")),
    Target("dropout(step)", "uint64", dropout_out("step")),
    Target("dropout_backward(seed)", "uint64", dropout_out("seed", backward=True)),
    Target("softmax_cross_entropy(labels)", "int32[]", softmax("labels")),
    Target("softmax_cross_entropy(grad_scale)", "double", softmax("grad_scale")),
    Target("maxpool2d_backward(argmax)", "int32[]", maxpool_backward),
    Target("batchnorm(training)", "flag", batchnorm("training")),
    Target("batchnorm(momentum)", "double", batchnorm("momentum")),
    Target("batchnorm(eps)", "double", batchnorm("eps")),
    # optimisers and loss scaling
    Target("sgd_step(lr)", "double", sgd("lr")),
    Target("sgd_step(seed)", "uint64", sgd("seed")),
    Target("sgd_step(step)", "uint64", sgd("step")),
    Target("sgd_step(stochastic)", "flag", sgd("stochastic")),
    Target("adam_step(lr)", "double", sgd("lr", adam=True)),
    Target("adam_step(step)", "uint64", sgd("step", adam=True)),
    Target("adam_step(seed)", "uint64", sgd("seed", adam=True)),
    Target("SGD(seed)", "uint64", t_kw(fx.SGD, "seed", [], lr=0.1)),
    Target("SGD(lr)", "double", t_kw(fx.SGD, "lr", [])),
    Target("Adam(seed)", "uint64", t_kw(fx.Adam, "seed", [])),
    Target("LossScaler(enabled)", "flag", t_kw(fx.LossScaler, "enabled")),
    Target("LossScaler.scale=", "double", scaler_attr("scale")),
    Target("LossScaler.growth_interval=", "int64", scaler_attr("growth_interval")),
    Target("LossScaler.good_steps=", "int64", scaler_attr("good_steps")),
    Target("LossScaler.enabled=", "flag", scaler_attr("enabled")),
    Target("LossScaler.load_state_dict(skipped_steps)", "int64", scaler_load("skipped_steps")),
    Target("LossScaler.load_state_dict(backoff_factor)", "double",
           scaler_load("backoff_factor")),
    Target("LossScaler.update", "flag", scaler_update),
    # Autoflex configurations (struct fields)
    Target("AutoflexConfig.history_len", "int", autoflex_field("history_len")),
    Target("AutoflexConfig.init_exp", "int", autoflex_field("init_exp")),
    Target("AutoflexConfig.probe_tries", "int", autoflex_field("probe_tries")),
    Target("AutoflexConfig.init_mode", "int", autoflex_field("init_mode"), is_str),
    Target("AutoflexConfig.managed", "flag", autoflex_field("managed")),
    Target("AutoflexConfig.beta", "double", autoflex_field("beta")),
    Target("autoflex_preset", "name", t_kw(fx.autoflex_preset, "name")),
    # data sets
    Target("synthetic(n)", "int64", synthetic("n")),
    Target("synthetic(channels)", "int", synthetic("channels")),
    Target("synthetic(height)", "int", synthetic("height")),
    Target("synthetic(classes)", "int", synthetic("classes")),
    Target("synthetic(seed)", "uint64", synthetic("seed")),
    Target("from_arrays(labels)", "int32[]", from_arrays("labels")),
    Target("from_arrays(classes)", "int", from_arrays("classes"), is_none),
    Target("fashion_mnist(dir)", "path", t_kw(fx.data.fashion_mnist, "dir"), is_none),
    Target("fashion_mnist(train)", "flag", t_kw(fx.data.fashion_mnist, "train", "/nonexistent")),
    Target("cifar10(dir)", "path", t_kw(fx.data.cifar10, "dir"), is_none),
    Target("text(path)", "path", t_kw(fx.data.text, "path", context=8)),
    Target("text(context)", "int", t_kw(fx.data.text, "context", "/nonexistent")),
    Target("Dataset.subset(start)", "int64", data_fn("subset", 0, 2, pos=0)),
    Target("Dataset.subset(n)", "int64", data_fn("subset", 0, 2, pos=1)),
    Target("Dataset.pad", "int", data_fn("pad", 1)),
    Target("Dataset.batch(indices)", "int64[]", data_fn("batch", [0])),
    # training configuration (char[16], int, uint64 and double struct fields) and trainers;
    # None is the library default there
    Target("TrainConfig.model", "name16", train_config("model"), is_none),
    Target("TrainConfig.autoflex", "name16", train_config("autoflex"), is_none),
    Target("TrainConfig.fmt", "fmt", train_config("fmt"), is_none),
    Target("TrainConfig.batch_size", "int", train_config("batch_size"), is_none),
    Target("TrainConfig.epochs", "int", train_config("epochs"), is_none),
    Target("TrainConfig.threads", "int", train_config("threads"), is_none),
    Target("TrainConfig.grad_window_lo", "int", train_config("grad_window_lo"), is_none),
    Target("TrainConfig.act_window_lo", "int", train_config("act_window_lo"), is_none),
    Target("TrainConfig.weight_window_lo", "int", train_config("weight_window_lo"), is_none),
    Target("TrainConfig.lr_schedule", "int", train_config("lr_schedule"), is_none_or_str),
    Target("TrainConfig.loss_scaling", "int", train_config("loss_scaling"),
           lambda v: is_none_or_str(v) or isinstance(v, (bool, np.bool_))),
    Target("TrainConfig.device", "int", train_config("device"), is_none_or_str),
    Target("TrainConfig.seed", "uint64", train_config("seed"), is_none),
    Target("TrainConfig.master_weights", "flag", train_config("master_weights"), is_none),
    Target("TrainConfig.augment", "flag", train_config("augment"), is_none),
    Target("TrainConfig.stochastic_rounding", "flag", train_config("stochastic_rounding"),
           is_none),
    Target("TrainConfig.lr", "double", train_config("lr"), is_none),
    Target("TrainConfig.weight_decay", "double", train_config("weight_decay"), is_none),
    Target("Trainer(batch_size)", "int", trainer_new("batch_size"), is_none),
    Target("Trainer(autoflex)", "name16", trainer_new("autoflex"), is_none),
    Target("Trainer.load", "path", trainer_method("load")),
    Target("Trainer.save", "path", trainer_method("save")),
    Target("Trainer.tensor(name)", "name", trainer_method("tensor"),
           lambda v: isinstance(v, int)),  # an int is an index
    Target("Trainer.tensor(index)", "int", trainer_method("tensor"), is_str),
    Target("Trainer.fit(epochs)", "int64", trainer_method("fit"), is_none),
    # library-wide settings and devices
    Target("set_num_threads", "int", global_setter(fx.set_num_threads, fx.num_threads)),
    Target("set_backend", "name", global_setter(fx.set_backend, fx.backend)),
    Target("device.set_device", "int", t_kw(fx.device.set_device, "device"), is_str),
    Target("DeviceBuffer(shape)", "shape", t_kw(fx.DeviceBuffer, "shape")),
    Target("DeviceBuffer(device)", "int", device_buffer(False), is_str),
    Target("DeviceBuffer.from_numpy(device)", "int", device_buffer(True), is_str),
    Target("device_ordinal(value)", "int", t_kw(fx.device.device_ordinal, "value"), is_str),
    Target("Tensor.cuda", "int", tensor_cuda, is_str),
    Target("from_numpy(window_lo)", "int", t_kw(fx.from_numpy, "window_lo", [1.0, 2.0]),
           is_none),
    Target("from_numpy(device)", "int", t_kw(fx.from_numpy, "device", [1.0, 2.0]), is_str),
    Target("from_raw(window_lo)", "int", t_kw(fx.from_raw, "window_lo", np.int16([1, 2]),
                                              "flex16_5"), is_none),
    Target("synthetic(width)", "int", synthetic("width")),
    Target("set_kernel(op)", "name", set_kernel("op")),
    Target("set_kernel(fmt)", "fmt", set_kernel("fmt")),
    Target("set_kernel(name)", "name", set_kernel("name")),
    # convolution and pooling: every integer argument, the backward ops and the shape helpers
    Target("conv2d_bias_relu(stride)", "int", bias_relu("stride"), is_list),
    Target("conv2d_bias_relu(padding)", "int", bias_relu("padding"), is_list),
    Target("conv2d_bias_relu(dilation)", "int", bias_relu("dilation"), is_list),
    Target("conv2d_backward_input(stride)", "int", conv_bw("stride"), is_list),
    Target("conv2d_backward_input(padding)", "int", conv_bw("padding"), is_list),
    Target("conv2d_backward_input(dilation)", "int", conv_bw("dilation"), is_list),
    Target("conv2d_backward_weight(kernel_size)", "int", conv_bw("kernel_size", True), is_list),
    Target("conv2d_backward_weight(stride)", "int", conv_bw("stride", True), is_list),
    Target("conv2d_backward_weight(padding)", "int", conv_bw("padding", True), is_list),
    Target("conv2d_backward_weight(dilation)", "int", conv_bw("dilation", True), is_list),
    Target("maxpool2d(stride)", "int", op_out(fx.maxpool2d, "stride"), is_none_or_list),
    Target("maxpool2d(padding)", "int", op_out(fx.maxpool2d, "padding"), is_list),
    Target("avgpool2d(kernel_size)", "int", op_out(fx.avgpool2d, "kernel_size"), is_list),
    Target("maxpool2d_backward(input_shape)", "shape", pool_bw("input_shape", "max")),
    Target("avgpool2d_backward(input_shape)", "shape", pool_bw("input_shape")),
    Target("avgpool2d_backward(kernel_size)", "int", pool_bw("kernel_size"), is_list),
    Target("avgpool2d_backward(stride)", "int", pool_bw("stride"), is_none_or_list),
    Target("avgpool2d_backward(padding)", "int", pool_bw("padding"), is_list),
    Target("global_avgpool_backward(input_shape)", "shape", pool_bw("input_shape", "global")),
    Target("conv2d_output_shape(x_shape)", "shape",
           shape_fn(fx.ops.conv2d_output_shape, "x_shape", w_shape=(1, 1, 1, 1))),
    Target("conv2d_output_shape(w_shape)", "shape",
           shape_fn(fx.ops.conv2d_output_shape, "w_shape", x_shape=(1, 1, 4, 4))),
    Target("conv2d_output_shape(stride)", "int", shape_fn(fx.ops.conv2d_output_shape, "stride",
           x_shape=(1, 1, 4, 4), w_shape=(1, 1, 1, 1)), is_list),
    Target("conv2d_output_shape(padding)", "int", shape_fn(fx.ops.conv2d_output_shape,
           "padding", x_shape=(1, 1, 4, 4), w_shape=(1, 1, 1, 1)), is_list),
    Target("conv2d_output_shape(dilation)", "int", shape_fn(fx.ops.conv2d_output_shape,
           "dilation", x_shape=(1, 1, 4, 4), w_shape=(1, 1, 1, 1)), is_list),
    Target("pool2d_output_shape(x_shape)", "shape",
           shape_fn(fx.ops.pool2d_output_shape, "x_shape", kernel_size=2)),
    Target("pool2d_output_shape(kernel_size)", "int", shape_fn(fx.ops.pool2d_output_shape,
           "kernel_size", x_shape=(1, 1, 4, 4)), is_list),
    Target("pool2d_output_shape(stride)", "int", shape_fn(fx.ops.pool2d_output_shape,
           "stride", x_shape=(1, 1, 4, 4), kernel_size=2), is_none_or_list),
    Target("pool2d_output_shape(padding)", "int", shape_fn(fx.ops.pool2d_output_shape,
           "padding", x_shape=(1, 1, 4, 4), kernel_size=2), is_list),
    Target("dropout_backward(step)", "uint64", dropout_out("step", backward=True)),
    # transformer ops (flexpoint.transformer)
    Target("softmax(axis)", "int", axis_op(fx.softmax)),
    Target("log_softmax(axis)", "int", axis_op(fx.log_softmax)),
    Target("softmax_backward(axis)", "int", axis_op(fx.softmax_backward, backward=True)),
    Target("log_softmax_backward(axis)", "int",
           axis_op(fx.log_softmax_backward, backward=True)),
    Target("bmm(trans_a)", "flag", bmm_flag("trans_a")),
    Target("bmm(trans_b)", "flag", bmm_flag("trans_b")),
    Target("bmm_backward(trans_a)", "flag", bmm_flag("trans_a", backward=True)),
    Target("bmm_backward(trans_b)", "flag", bmm_flag("trans_b", backward=True)),
    Target("embedding(indices)", "int32[]", embedding("indices")),
    Target("embedding_backward(indices)", "int32[]", embedding("indices", backward=True)),
    Target("embedding_backward(num_embeddings)", "int",
           embedding("num_embeddings", backward=True)),
    Target("adamw_step(step)", "uint64", adamw("step")),
    Target("adamw_step(seed)", "uint64", adamw("seed")),
    Target("adamw_step(lr)", "double", adamw("lr")),
    Target("adamw_step(weight_decay)", "double", adamw("weight_decay")),
    Target("adamw_step(stochastic)", "flag", adamw("stochastic")),
    Target("clip_grad_norm(max_norm)", "double", clip_norm),
    Target("layernorm(eps)", "double", layernorm("eps")),
    Target("layernorm_backward(eps)", "double", layernorm("eps", backward=True)),
    # training: the remaining configuration fields, files, profiling, health
    Target("TrainConfig.momentum", "double", train_config("momentum"), is_none),
    Target("TrainConfig.optimizer", "int", train_config("optimizer"), is_none_or_str),
    Target("TrainConfig.adam_beta1", "double", train_config("adam_beta1"), is_none),
    Target("TrainConfig.adam_beta2", "double", train_config("adam_beta2"), is_none),
    Target("TrainConfig.adam_eps", "double", train_config("adam_eps"), is_none),
    Target("TrainConfig.clip_norm", "double", train_config("clip_norm"), is_none),
    Target("TrainConfig.loss_scale_init", "double", train_config("loss_scale_init"), is_none),
    Target("TrainConfig.loss_scale_growth", "double", train_config("loss_scale_growth"),
           is_none),
    Target("TrainConfig.loss_scale_backoff", "double", train_config("loss_scale_backoff"),
           is_none),
    Target("TrainConfig.loss_scale_interval", "int64", train_config("loss_scale_interval"),
           is_none),
    Target("TrainConfig.loss_scale_min", "double", train_config("loss_scale_min"), is_none),
    Target("TrainConfig.policy", "name", train_config("policy"), is_none),
    Target("Trainer.export_weights", "path", trainer_method("export_weights")),
    Target("Trainer.import_weights", "path", trainer_method("import_weights")),
    Target("Trainer.from_checkpoint", "path", from_checkpoint),
    Target("checkpoint_config", "path", t_kw(fx.checkpoint_config, "path")),
    Target("Trainer.profile_enable", "flag", profile_enable),
    Target("Trainer.health_warnings(epoch)", "int", trainer_method("health_warnings"), is_none),
    Target("Trainer.fit(warn)", "flag", t_kw(lambda warn: trainer().fit(0, warn=warn), "warn")),
    Target("weights.read", "path", weights_path(False)),
    Target("weights.write", "path", weights_path(True)),
    Target("AutoflexConfig.stat_mode", "int", autoflex_field("stat_mode"), is_str),
    Target("AutoflexConfig.overflow_mode", "int", autoflex_field("overflow_mode"), is_str),
    Target("AutoflexConfig.gamma", "double", autoflex_field("gamma")),
    Target("AutoflexConfig.alpha", "double", autoflex_field("alpha")),
]

CASES = [pytest.param(t, v, exc, id=f"{t.name}-{i}")
         for t in TARGETS for i, (v, exc) in enumerate(HOSTILE[t.kind]) if not t.skip(v)]


@pytest.mark.parametrize("target, value, exc", CASES)
def test_hostile_value_is_refused_and_changes_nothing(target, value, exc):
    call, state = target.make()
    before = state()
    with pytest.raises(exc) as ei:
        call(value)
    assert isinstance(ei.value, fx.FlexpointError)
    assert state() == before, f"{target.name} changed state on a refused call"


def test_every_kind_is_covered():
    kinds = {t.kind for t in TARGETS}
    assert kinds == set(HOSTILE), set(HOSTILE) - kinds
    assert len(CASES) > 1000


# ------------------------------------------------------------------------------------------
# the table is complete: every public function, method, property setter and dataclass field
# of the package that takes an integer, a format, a device, a shape or a path is in it
# ------------------------------------------------------------------------------------------
#: annotations of the parameters that must be in the table (integers, shapes, pairs of ints,
#: formats and devices, which may be ints, and paths)
_HOSTILE_ANNOTATION = re.compile(r"\bint\b|PathLike|FormatLike|DeviceLike|ShapeLike|Pair")
_PATH_NAMES = {"path", "dir"}

#: (callable, parameter) pairs left out of the table on purpose; None: every parameter
EXCLUDED = {
    # outputs: built by the binding from C structs the library filled, never passed to C
    ("EpochMetrics", None), ("TraceRecord", None),
    # pure Python formatting of an ordinal already returned by the library
    ("device_name", "ordinal"),
}


def _excluded_param(qual: str, param: str) -> bool:
    # The output format of every op (``fmt=``) and of Tensor.astype, Tensor() and the format
    # helpers goes through formats.fmt_id, covered by the "fmt" targets (tensor(fmt),
    # fmt_name, set_kernel(fmt), TrainConfig.fmt) and, op by op, by
    # test_output_formats_go_through_fmt_id below.
    return param == "fmt" or (qual, None) in EXCLUDED or (qual, param) in EXCLUDED


def _public_modules():
    mods = [fx] + [getattr(fx, n) for n in fx.__all__ if inspect.ismodule(getattr(fx, n))]
    return mods + [sys.modules[f"flexpoint.{n}"] for n in ("tensor", "autoflex", "formats")]


def _needs_table(fn: Callable, qual: str, out: set) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    for p in sig.parameters.values():
        if p.name in ("self", "cls") or p.kind in (p.VAR_KEYWORD,):
            continue
        if _HOSTILE_ANNOTATION.search(str(p.annotation)) or p.name in _PATH_NAMES:
            if not _excluded_param(qual, p.name):
                out.add((qual, p.name))


def public_entry_points() -> set:
    """(qualified name, parameter) of every public callable taking a value of a hostile kind:
    functions and classes in the modules' __all__, their public methods and property setters
    ("Tensor.exp=", parameter "e"), and every field of the configuration dataclasses."""
    out: set = set()
    for m in _public_modules():
        for name in getattr(m, "__all__", ()):
            obj = getattr(m, name, None)
            if inspect.isfunction(obj):
                _needs_table(obj, obj.__name__, out)
            elif inspect.isclass(obj) and obj.__module__.startswith("flexpoint") and \
                    not issubclass(obj, BaseException):
                if dataclasses.is_dataclass(obj) and (obj.__name__, None) not in EXCLUDED:
                    # every field crosses into a C struct: all of them, whatever their type
                    out |= {(obj.__name__, f.name) for f in dataclasses.fields(obj)}
                else:
                    _needs_table(obj, obj.__name__, out)
                for mname, member in vars(obj).items():
                    if mname.startswith("_"):
                        continue
                    if isinstance(member, property):
                        if member.fset is not None:
                            _needs_table(member.fset, f"{obj.__name__}.{mname}=", out)
                        continue
                    if isinstance(member, (classmethod, staticmethod)):
                        member = member.__func__
                    if inspect.isfunction(member):
                        _needs_table(member, f"{obj.__name__}.{mname}", out)
    return out


_MODULE_PREFIXES = ("device.", "weights.")


def covered_entry_points() -> set:
    """(qualified name, parameter or None for all) of the TARGETS: "sum(axis)" covers sum's
    axis, "Tensor.set_exp" every parameter of Tensor.set_exp, "TrainConfig.lr" the field lr."""
    out = set()
    for t in TARGETS:
        m = re.fullmatch(r"([\w.]+=?)(?:\((\w+)\))?", t.name)
        assert m, t.name
        qual, param = m.group(1), m.group(2)
        for prefix in _MODULE_PREFIXES:
            if qual.startswith(prefix):
                qual = qual[len(prefix):]
        head, _, tail = qual.partition(".")
        cls = getattr(fx, head, None)
        if param is None and tail and dataclasses.is_dataclass(cls) and \
                tail in {f.name for f in dataclasses.fields(cls)}:
            qual, param = head, tail
        out.add((qual, param))
    return out


def test_every_public_entry_point_is_in_the_table():
    covered = covered_entry_points()
    missing = sorted((q, p) for q, p in public_entry_points()
                     if (q, p) not in covered and (q, None) not in covered)
    assert not missing, ("public entry points taking integers, shapes, formats, devices or "
                         "paths that TARGETS does not feed hostile values to (add a Target, or "
                         f"an EXCLUDED entry saying why): {missing}")


def test_the_enumeration_finds_entry_points():
    # the check above would pass vacuously if the enumeration found nothing
    found = public_entry_points()
    for want in [("Tensor.exp=", "e"), ("softmax", "axis"), ("Trainer.export_weights", "path"),
                 ("TrainConfig", "momentum"), ("read", "path"), ("conv2d_output_shape",
                                                                 "x_shape")]:
        assert want in found, want
    assert len(found) > 100


@pytest.mark.parametrize("fn, args", [
    (fx.relu, lambda: (x4(),)), (fx.copy, lambda: (x4(),)), (fx.scale, lambda: (x4(), 2.0)),
    (fx.sum, lambda: (x4(),)), (fx.softmax, lambda: (x4((2, 3)),)),
    (fx.unary, lambda: (x4(), "exp")), (fx.matmul, lambda: (x4((2, 2)), x4((2, 2)))),
    (fx.maxpool2d, lambda: (x4(),)), (fx.conv2d, lambda: (x4(), x4((1, 1, 3, 3)))),
    (fx.causal_mask, lambda: (x4((2, 2)),)), (fx.embedding, lambda: (x4((3, 2)), [1])),
    (lambda x, fmt: x.astype(fmt), lambda: (x4(),))])
@pytest.mark.parametrize("fmt, exc", [(v, e) for v, e in HOSTILE["fmt"] if v is not None])
def test_output_formats_go_through_fmt_id(fn, args, fmt, exc):
    # None is the default there (the first tensor's format)
    with pytest.raises(exc):
        fn(*args(), fmt=fmt)


# ------------------------------------------------------------------------------------------
# the classes: both argument errors are InvalidArgumentErrors; the range one is also a
# RangeError and an OverflowError, the type one a TypeError
# ------------------------------------------------------------------------------------------
def test_exception_classes():
    assert issubclass(fx.ArgumentRangeError, fx.InvalidArgumentError)
    assert issubclass(fx.ArgumentRangeError, fx.RangeError)
    assert issubclass(fx.ArgumentRangeError, OverflowError)
    assert issubclass(fx.ArgumentRangeError, ValueError)
    assert issubclass(fx.ArgumentTypeError, fx.InvalidArgumentError)
    assert issubclass(fx.ArgumentTypeError, TypeError)
    t = flex()
    with pytest.raises(OverflowError) as ei:
        t.exp = 2**40
    assert ei.value.status_name == "FX_ERANGE" and "1099511627776" in str(ei.value)
    with pytest.raises(TypeError) as ei:
        t.exp = 1.0
    assert ei.value.status_name == "FX_EINVAL"
    with pytest.raises(ValueError) as ei:
        t.stat("exp\0x")
    assert ei.value.status_name == "FX_EINVAL"


def test_issue_examples():
    """The cases that used to be wrapped or cut, one by one."""
    t = flex()
    with pytest.raises(fx.RangeError):
        t.exp = 2**40  # used to set 0
    assert t.exp == -6
    with pytest.raises(fx.RangeError):
        t.set_exp_window(2**32 - 20)  # used to set the window [-20, 11]
    assert t.exp_window == (-31, 0)
    logits = fx.from_numpy(np.zeros((2, 3)), "fp32")
    with pytest.raises(fx.RangeError) as ei:
        fx.softmax_cross_entropy(logits, [0, 2**40])  # used to be [0, 0]
    assert "labels[1]" in str(ei.value)
    with pytest.raises(TypeError):
        fx.softmax_cross_entropy(logits, np.array([0.0, 1.7]))  # used to be [0, 1]
    with pytest.raises(fx.RangeError):
        fx.TrainConfig(batch_size=2**32 + 16).to_c()  # used to train with 16
    with pytest.raises(fx.InvalidArgumentError):
        fx.maxpool2d_backward(fx.from_numpy(np.ones((1, 1, 1, 1)), "fp32"),
                              np.array([2**32], dtype=np.int64), (1, 1, 2, 2))  # was index 0
    with pytest.raises(ValueError, match="NUL"):
        trainer().load("checkpoint.bin\0.old")  # used to load checkpoint.bin
    with pytest.raises(MemoryError):
        fx.tensor((0, 2**40, 2**40))  # used to reach C and crash it


# ------------------------------------------------------------------------------------------
# valid values at the edges still go through unchanged
# ------------------------------------------------------------------------------------------
def test_window_and_exponent_limits_are_accepted():
    t = fx.tensor((2,), "flex16_5", autoflex="fixed")
    for lo in (-128, 96, np.int64(-31), np.int8(5)):
        t.set_exp_window(lo)
        assert t.exp_window == (int(lo), int(lo) + 31)
        for e in (int(lo), int(lo) + 31):
            t.exp = e
            assert t.exp == e
    with pytest.raises(fx.RangeError) as ei:  # just outside: the library's own RangeError
        t.set_exp_window(97)
    assert type(ei.value) is fx.RangeError
    d = fx.tensor((2,), "dfp16")
    for e in (-128, 127):
        d.exp = e
        assert d.exp == e


def test_int_extremes_reach_c_unchanged():
    # at the C int limits the value crosses unchanged and the library judges it
    t = flex()
    for e in (2**31 - 1, -2**31):
        with pytest.raises(fx.RangeError) as ei:
            t.exp = e
        assert type(ei.value) is fx.RangeError and str(e) in str(ei.value)
    logits = fx.from_numpy(np.zeros((2, 3)), "fp32")
    with pytest.raises(fx.RangeError) as ei:
        fx.softmax_cross_entropy(logits, np.array([0, 2**31 - 1], dtype=np.int64))
    assert type(ei.value) is fx.RangeError and str(2**31 - 1) in str(ei.value)
    ds = fx.data.synthetic(4, 1, 2, 2, 2)
    with pytest.raises(fx.RangeError) as ei:
        ds.subset(0, 2**63 - 1)
    assert type(ei.value) is fx.RangeError


def test_struct_fields_at_their_limits():
    c = fx.TrainConfig(batch_size=2**31 - 1, grad_window_lo=-2**31, seed=2**64 - 1,
                       threads=0, epochs=np.int32(3), augment=np.bool_(True),
                       master_weights=0).to_c()
    assert (c.batch_size, c.grad_window_lo, c.seed) == (2**31 - 1, -2**31, 2**64 - 1)
    assert (c.epochs, c.augment, c.master_weights) == (3, 1, 0)
    assert fx.TrainConfig(model="x" * 15).to_c().model == b"x" * 15  # 15 bytes + terminator
    assert fx.TrainConfig(seed=2**64 - 1).resolved().seed == 2**64 - 1
    s = fx.LossScaler()
    s.growth_interval = 2**63 - 1
    s.skipped_steps = -2**63
    s.enabled = np.bool_(False)
    assert (s.growth_interval, s.skipped_steps, s.enabled) == (2**63 - 1, -2**63, False)
    s.scale = 2**64  # an int is a valid double
    assert s.scale == float(2**64)


def test_seeds_at_their_limits():
    x = fx.from_numpy(np.ones(64), "fp32")
    a = fx.dropout(x, 0.5, seed=2**64 - 1, step=2**64 - 1)
    b = fx.dropout(x, 0.5, seed=np.uint64(2**64 - 1), step=2**64 - 1)
    assert np.array_equal(a.numpy(), b.numpy())
    flex().set_rounding("stochastic", seed=2**64 - 1)
    ds = fx.data.synthetic(4, 1, 2, 2, 2, seed=2**64 - 1)
    assert str(2**64 - 1) in ds.source


def test_shapes_at_their_limits():
    t = fx.tensor((2**31 + 1, 0), "fp32")  # beyond int32, crosses as int64 unchanged
    assert t.shape == (2**31 + 1, 0)
    assert fx.tensor(np.int64(3)).shape == (3,)
    assert fx.tensor(np.array([2, 3])).shape == (2, 3)
    assert _check.c_shape((1, 2**63 - 1)) == (1, 2**63 - 1)
    assert _check.c_shape((2**62, 1, 0)) == (2**62, 1, 0)
    with pytest.raises(fx.OutOfMemoryError):
        _check.c_shape((2, 2**62))  # 2**63: one past int64
    r = fx.from_numpy(np.arange(12.0), "fp32").reshape(np.int64(3), -1)
    assert r.shape == (3, 4)
    assert fx.from_numpy(np.arange(4.0), "fp32")[::2**70].shape == (1,)


def test_integer_arrays():
    """Labels and indices: integer dtypes of any width within the C type; floats and bools are
    refused (a bool array is a mask, not class indices); an empty list is fine."""
    a = _check.c_int_array([2**31 - 1, -2**31], "labels", np.int32)
    assert a.dtype == np.int32 and a.tolist() == [2**31 - 1, -2**31]
    assert _check.c_int_array(np.uint8([3, 4]), "l", np.int32).tolist() == [3, 4]
    assert _check.c_int_array([], "l", np.int32).shape == (0,)
    assert _check.c_int_array([[1, 2], [3, 2**40]], "i", np.int64).shape == (2, 2)
    with pytest.raises(fx.ArgumentRangeError, match=r"l\[1, 0\]"):
        _check.c_int_array([[1, 2], [2**40, 0]], "l", np.int32)
    ds = fx.data.from_arrays(np.zeros((3, 1, 2, 2), np.float32), np.int64([0, 1, 1]))
    assert ds.labels.tolist() == [0, 1, 1] and ds.classes == 2
    x, y = ds.batch(np.uint16([2, 0]))
    assert y.tolist() == [1, 0]


def test_flags():
    t = flex()
    for on in (True, False, 1, 0, np.bool_(True), np.int8(0)):
        t.trace_enable(on)
    with pytest.raises(fx.ArgumentTypeError):
        t.trace_enable("off")  # truthy: it would have turned tracing on


def test_names_and_paths(tmp_path):
    t = flex()
    t.trace_enable()
    t.assign([1.0, 2.0, 3.0])
    p = tmp_path / "trace.csv"
    t.write_trace_csv(p)  # os.PathLike
    t.write_trace_csv(os.fsencode(str(tmp_path / "b.csv")))  # bytes
    assert p.exists() and (tmp_path / "b.csv").exists()
    with pytest.raises(fx.InvalidArgumentError):
        t.write_trace_csv(str(tmp_path / "c.csv") + "\0.txt")
    assert not (tmp_path / "c.csv").exists()
    assert fx.fmt_name("flex16+5") == "flex16_5"
    with pytest.raises(fx.FormatError):
        fx.tensor(2, 2**32 + 3)  # not wrapped to 3 (flex16_5)
    with pytest.raises(fx.InvalidArgumentError, match="15"):
        fx.TrainConfig(autoflex="é" * 8).to_c()  # 16 bytes of UTF-8


def test_helper_api():
    """flexpoint._check, the one place the rules live."""
    assert _check.c_size(_check.SIZE_MAX, "n") == 2**64 - 1
    with pytest.raises(fx.ArgumentRangeError, match="size_t"):
        _check.c_size(-1, "n")
    assert _check.c_int(np.int16(-7), "x", lo=-8, hi=8) == -7
    with pytest.raises(fx.ArgumentRangeError, match=r"outside \[0, 3\]"):
        _check.c_int(5, "x", lo=0, hi=3)
    assert _check.c_uint64(2**64 - 1, "seed") == 2**64 - 1
    assert _check.c_double(np.float32(0.5), "lr") == 0.5 and _check.c_double(3, "lr") == 3.0
    assert _check.c_str("flex16_5", "fmt", size=16) == b"flex16_5"
    with pytest.raises(fx.InvalidArgumentError):
        _check.c_str("x" * 16, "model", size=16)  # no room for the terminator
    with pytest.raises(fx.InvalidArgumentError):
        _check.c_str("\udc80", "name")  # a lone surrogate is not UTF-8
    assert _check.c_path(os.path.join("a", "b")) == os.fsencode(os.path.join("a", "b"))
    c = fx._structs.TrainConfigC()
    with pytest.raises(fx.InvalidArgumentError):
        c.model = b"x" * 16  # ctypes itself would store it without a terminator
    with pytest.raises(fx.InvalidArgumentError):
        c.model = b"cnn\0mlp"  # ctypes itself would store "cnn"
    c.model = b"mlp"
    with pytest.raises(fx.ArgumentRangeError):
        c.batch_size = 2**32 + 16  # ctypes itself would store 16
    assert c.model == b"mlp" and c.batch_size == 0
    assert _check.is_scalar(np.int64(2)) and _check.is_scalar(True)
    assert not _check.is_scalar(np.array([2])) and not _check.is_scalar(2.0)
