"""Optimiser steps and dynamic loss scaling (flexpoint_nn.h).

The arithmetic is the library's (fx_sgd_step, fx_adam_step, fx_loss_scaler_*); the classes here
only own the state buffers (fp32 master weights, momentum, Adam moments): NumPy arrays for host
weights, :class:`~flexpoint.device.DeviceBuffer` on the weights' device for device weights.

Scalars are checked before any call (see :mod:`flexpoint._check`): a hyperparameter that is not
a real number (a str, None or bool) raises ArgumentTypeError; a seed or step outside
[0, 2**64-1] raises ArgumentRangeError instead of being wrapped; a flag must be a bool (or 0/1).
Nothing is updated when a call raises.
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, c_float, c_int, c_void_p
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._check import c_bool, c_double, c_uint64
from ._lib import lib
from ._structs import LossScalerC
from .device import DeviceBuffer
from .errors import InvalidArgumentError, check
from .ops import _dev_ptr, _f32_buffer, _tensor
from .tensor import Tensor

__all__ = ["sgd_step", "adam_step", "SGD", "Adam", "LossScaler"]

_fp = POINTER(c_float)


def _opt_ptr(a: Any, n: int, name: str):
    if a is None:
        return None
    if isinstance(a, DeviceBuffer):
        if a.size != n or a.dtype != np.float32:
            raise InvalidArgumentError(f"{name} is a {a!r}; the op needs {n} float32 elements",
                                       -1)
        return _dev_ptr(a, _fp)
    return _f32_buffer(a, n, name).ctypes.data_as(_fp)


def _state(p: Tensor, values: Optional[np.ndarray] = None) -> Any:
    """An optimiser state buffer of p.size float32 values (zeros, or a copy of values) where p
    lives."""
    where = p._ordinal()
    if where < 0:
        return np.zeros(p.size, dtype=np.float32) if values is None else values
    if values is None:
        return DeviceBuffer((p.size,), np.float32, where)  # zero-filled
    return DeviceBuffer.from_numpy(values, np.float32, where)


def sgd_step(w: Tensor, grad: Tensor, momentum_buf: np.ndarray, lr: float,
             momentum: float = 0.0, weight_decay: float = 0.0, grad_scale: float = 1.0,
             master: Optional[np.ndarray] = None, stochastic: bool = False, seed: int = 0,
             step: int = 0) -> None:
    """One SGD step with momentum and weight decay (PyTorch semantics) on w, in place.

    momentum_buf and master are float32 arrays of w.size elements, updated in place; with
    master (fp32 master weights) the result is written to w once, in w's format; without it w's
    own values are updated (stochastic rounding keyed by seed and step if asked).

    Raises InvalidArgumentError for buffers of the wrong size or type and for hyperparameters
    the library refuses, ArgumentTypeError / ArgumentRangeError for scalars that cannot cross
    into C unchanged (see the module docstring); nothing is updated then."""
    w, grad = _tensor(w, "w"), _tensor(grad, "grad")
    hyper = (c_double(lr, "lr"), c_double(momentum, "momentum"),
             c_double(weight_decay, "weight_decay"), c_double(grad_scale, "grad_scale"),
             c_bool(stochastic, "stochastic"), c_uint64(seed, "seed"), c_uint64(step, "step"))
    n = w.size
    check(lib().fx_sgd_step(w._h, grad._h, _opt_ptr(master, n, "master"),
                            _opt_ptr(momentum_buf, n, "momentum_buf"), *hyper),
          "fx_sgd_step")


def adam_step(w: Tensor, grad: Tensor, m: np.ndarray, v: np.ndarray, lr: float, step: int,
              beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
              weight_decay: float = 0.0, grad_scale: float = 1.0,
              master: Optional[np.ndarray] = None, stochastic: bool = False,
              seed: int = 0) -> None:
    """One bias-corrected Adam step on w (weight decay added to the gradient, as
    torch.optim.Adam). m and v are float32 arrays of w.size elements; step counts from 1.
    Raises as :func:`sgd_step`."""
    w, grad = _tensor(w, "w"), _tensor(grad, "grad")
    hyper = (c_double(lr, "lr"), c_double(beta1, "beta1"), c_double(beta2, "beta2"),
             c_double(eps, "eps"), c_double(weight_decay, "weight_decay"),
             c_double(grad_scale, "grad_scale"), c_bool(stochastic, "stochastic"),
             c_uint64(seed, "seed"), c_uint64(step, "step"))
    n = w.size
    check(lib().fx_adam_step(w._h, grad._h, _opt_ptr(master, n, "master"), _opt_ptr(m, n, "m"),
                             _opt_ptr(v, n, "v"), *hyper),
          "fx_adam_step")


class _Optimizer:
    def __init__(self, params: Sequence[Tensor], master_weights: bool, stochastic: bool,
                 seed: int) -> None:
        self.params: List[Tensor] = [_tensor(p, "param") for p in params]
        self.stochastic = bool(c_bool(stochastic, "stochastic"))
        self.seed = c_uint64(seed, "seed")
        self.master: List[Any] = [
            _state(p, p.cpu().numpy().reshape(-1).copy()) if master_weights else None
            for p in self.params]
        self.steps = 0

    def _grads(self, grads: Sequence[Tensor]) -> List[Tensor]:
        grads = list(grads)
        if len(grads) != len(self.params):
            raise InvalidArgumentError(f"{len(grads)} gradients for {len(self.params)} "
                                       "parameters", -1)
        return grads


class SGD(_Optimizer):
    """SGD with momentum and weight decay over a list of weight tensors.

    ``opt.step(grads, grad_scale=1.0)`` updates every weight from its gradient (same order).
    With master_weights (default) fp32 copies of the weights are kept and each step writes the
    weights once in their format. The constructor raises ArgumentTypeError /
    ArgumentRangeError for hyperparameters that are not real numbers, a seed outside
    [0, 2**64-1] or a flag that is not a bool; :meth:`step` raises as :func:`sgd_step`."""

    def __init__(self, params: Sequence[Tensor], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0, master_weights: bool = True,
                 stochastic: bool = False, seed: int = 0) -> None:
        self.lr, self.momentum = c_double(lr, "lr"), c_double(momentum, "momentum")
        self.weight_decay = c_double(weight_decay, "weight_decay")
        super().__init__(params, master_weights, stochastic, seed)
        self.momentum_buf = [_state(p) for p in self.params]

    def step(self, grads: Sequence[Tensor], grad_scale: float = 1.0) -> None:
        """Apply one step; grad_scale multiplies the gradients (1 / loss scale to unscale)."""
        for w, g, mb, ms in zip(self.params, self._grads(grads), self.momentum_buf, self.master):
            sgd_step(w, g, mb, self.lr, self.momentum, self.weight_decay, grad_scale, ms,
                     self.stochastic, self.seed, self.steps)
        self.steps += 1


class Adam(_Optimizer):
    """Adam (bias-corrected) over a list of weight tensors; see :class:`SGD` (the same checks
    and exceptions)."""

    def __init__(self, params: Sequence[Tensor], lr: float = 1e-3, beta1: float = 0.9,
                 beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0,
                 master_weights: bool = True, stochastic: bool = False, seed: int = 0) -> None:
        self.lr, self.beta1 = c_double(lr, "lr"), c_double(beta1, "beta1")
        self.beta2, self.eps = c_double(beta2, "beta2"), c_double(eps, "eps")
        self.weight_decay = c_double(weight_decay, "weight_decay")
        super().__init__(params, master_weights, stochastic, seed)
        self.m = [_state(p) for p in self.params]
        self.v = [_state(p) for p in self.params]

    def step(self, grads: Sequence[Tensor], grad_scale: float = 1.0) -> None:
        """Apply one step (the step counter starts at 1)."""
        self.steps += 1
        for w, g, m, v, ms in zip(self.params, self._grads(grads), self.m, self.v, self.master):
            adam_step(w, g, m, v, self.lr, self.steps, self.beta1, self.beta2, self.eps,
                      self.weight_decay, grad_scale, ms, self.stochastic, self.seed)


class LossScaler:
    """Dynamic loss scaling (fx_loss_scaler): initial scale 2**16, x2 after 2000 clean steps,
    x0.5 and skip the step on Inf/NaN. Disabled, the scale stays 1 and nothing is skipped.

    Use: multiply the loss gradient by :attr:`scale`; then ``unscaled, found_inf =
    scaler.unscale(grads)``; ``if scaler.update(found_inf): apply the step``.

    The state fields (``scale``, ``growth_factor``, ``backoff_factor`` doubles;
    ``growth_interval``, ``good_steps``, ``skipped_steps`` int64; ``enabled`` a flag) can be set
    as attributes; a value that does not fit the C field raises ArgumentTypeError /
    ArgumentRangeError and leaves the field unchanged (ctypes would wrap it)."""

    _FIELDS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "good_steps",
               "skipped_steps", "enabled")

    def __init__(self, enabled: bool = True) -> None:
        """Raises ArgumentTypeError / ArgumentRangeError for `enabled` other than a bool (or
        1/0)."""
        on = c_bool(enabled, "LossScaler.enabled")
        self._c = LossScalerC()
        lib().fx_loss_scaler_init(ctypes.byref(self._c), on)

    @classmethod
    def from_c(cls, c: LossScalerC) -> "LossScaler":
        """A scaler holding a copy of a C scaler's state."""
        s = cls.__new__(cls)
        s._c = LossScalerC.from_buffer_copy(c)
        return s

    def __getattr__(self, name: str) -> Any:
        if name in LossScaler._FIELDS:
            v = getattr(self.__dict__["_c"], name)
            return bool(v) if name == "enabled" else v
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in LossScaler._FIELDS:
            # the struct checks the value against the field's C type (LossScalerC)
            setattr(self._c, name, c_bool(value, "LossScaler.enabled") if name == "enabled"
                    else value)
        else:
            object.__setattr__(self, name, value)

    def state_dict(self) -> Dict[str, Any]:
        """The state as a dict (plain data; :meth:`load_state_dict` restores it)."""
        return {k: getattr(self._c, k) for k in self._FIELDS}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`. All or nothing: KeyError for a missing
        field, ArgumentTypeError / ArgumentRangeError for a value that does not fit its C field
        leave the scaler unchanged."""
        c = LossScalerC.from_buffer_copy(self._c)
        for k in self._FIELDS:
            v = state[k]
            setattr(c, k, c_bool(v, "LossScaler.enabled") if k == "enabled" else v)
        self._c = c

    def unscale(self, grads: Sequence[Tensor],
                out: Optional[Sequence[Any]] = None) -> Tuple[List[Any], bool]:
        """(grad / scale for each gradient as float32 arrays of its shape, found_inf): found_inf
        is True if any value is NaN/Inf or a shared-exponent gradient's last write counted
        non-finite inputs. For device gradients the arrays are DeviceBuffers on their device.
        `out`: the arrays / DeviceBuffers to write (one per gradient, reused across steps)."""
        gs = [_tensor(g, "grad") for g in grads]
        if out is not None:
            outs = list(out)
            if len(outs) != len(gs):
                raise InvalidArgumentError(f"{len(outs)} outputs for {len(gs)} gradients", -1)
            for i, (g, o) in enumerate(zip(gs, outs)):
                if isinstance(o, DeviceBuffer):
                    _opt_ptr(o, g.size, f"out[{i}]")  # checks its size and type
                else:
                    outs[i] = _f32_buffer(o, g.size, f"out[{i}]")
        else:
            outs = [np.empty(g.shape, dtype=np.float32) if g._ordinal() < 0
                    else DeviceBuffer(g.shape, np.float32, g._ordinal()) for g in gs]
        n = len(gs)
        handles = (c_void_p * max(n, 1))(*[g._h for g in gs])
        ptrs = (_fp * max(n, 1))(*[_dev_ptr(o, _fp) if isinstance(o, DeviceBuffer)
                                   else o.ctypes.data_as(_fp) for o in outs])
        found = c_int(0)
        check(lib().fx_loss_scaler_unscale(ctypes.byref(self._c), handles, n, ptrs,
                                           ctypes.byref(found)), "fx_loss_scaler_unscale")
        return outs, bool(found.value)

    def update(self, found_inf: bool) -> bool:
        """Adjust the scale after a step; True if the step should be applied, False if it must
        be skipped. Raises ArgumentTypeError / ArgumentRangeError for `found_inf` other than a
        bool (or 1/0)."""
        return bool(check(lib().fx_loss_scaler_update(ctypes.byref(self._c),
                                                      c_bool(found_inf, "found_inf")),
                          "fx_loss_scaler_update"))

    def __repr__(self) -> str:
        return "LossScaler(" + ", ".join(f"{k}={v!r}" for k, v in self.state_dict().items()) + ")"
