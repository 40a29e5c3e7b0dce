"""The Tensor class: a Python handle on a libflexpoint tensor_t.

A Tensor owns its C tensor and frees it when the Python object goes away. Views (reshape,
transpose, slicing) share the storage and hold a reference to the tensor they were made from, so a
parent outlives its views; raw NumPy views of the storage hold a reference to the tensor.
"""
from __future__ import annotations

import ctypes
import math
import numbers
import os
from ctypes import POINTER, c_double, c_float
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._check import (c_bool, c_int, c_int64, c_int_array, c_path, c_shape, c_str, c_uint64,
                     is_scalar)
from ._lib import lib
from ._structs import AutoflexConfigC, TraceRecordC
from .autoflex import AutoflexConfig, TraceRecord, trace_to_arrays
from .device import DeviceLike, device_name, device_ordinal
from .device import on_device as _on_device
from .errors import (ArgumentTypeError, InvalidArgumentError, ShapeError, StateError, check,
                     raise_last)
from .formats import FORMATS, FormatLike, fmt_id, raw_dtype

__all__ = ["Tensor", "tensor", "zeros", "from_numpy", "from_raw", "STAT_NAMES", "MAX_DIMS",
           "ShapeLike"]

#: Largest number of dimensions (FX_MAX_DIMS).
MAX_DIMS = 8

#: Statistics of a shared-exponent tensor, as tensor_stat() names them.
STAT_NAMES = ("saturated", "true_max", "nonfinite", "underflow", "clamped", "overflows",
              "clamped_total", "nonfinite_total", "writes", "exp")

_ROUNDING = {"nearest": 0, "nearest_even": 0, "stochastic": 1}

ShapeLike = Union[int, Sequence[int]]

_fp = POINTER(c_float)


def _shape_tuple(shape: ShapeLike, name: str = "shape") -> Tuple[int, ...]:
    # Checked in full before any C call: tensor_new reads int64 dimensions and computes strides
    # from their product, so a dimension or a product beyond int64 must never reach it.
    return c_shape(shape, name, 1, MAX_DIMS)


def _reshape_dims(shape: Any) -> Tuple[int, ...]:
    """The entries of a reshape as int64 values >= -1 (-1: inferred)."""
    if is_scalar(shape):
        shape = (shape,)
    if isinstance(shape, (str, bytes)) or shape is None:
        raise ArgumentTypeError(f"reshape{(shape,)!r}: expected integers")
    try:
        seq = tuple(shape)
    except TypeError:
        raise ArgumentTypeError(f"reshape: expected integers, not {type(shape).__name__}") \
            from None
    return tuple(c_int64(d, f"reshape[{i}]", lo=-1) for i, d in enumerate(seq))


def _c_shape(dims: Sequence[int]) -> ctypes.Array:
    return (ctypes.c_int64 * len(dims))(*dims)


class _RawHolder:
    """Exposes a tensor's storage through the array interface; NumPy keeps this object as the
    array's base, and it keeps the tensor (hence the storage) alive."""
    __slots__ = ("tensor", "__array_interface__")

    def __init__(self, tensor: "Tensor", interface: Dict[str, Any]) -> None:
        self.tensor = tensor
        self.__array_interface__ = interface


class Tensor:
    """A libflexpoint tensor of one number format.

    Create one with :func:`flexpoint.tensor` (zeros), :func:`flexpoint.from_numpy` or
    ``Tensor(shape, fmt)``. Read it with :meth:`numpy`; write it with :meth:`assign`.
    Shared-exponent formats (flex16_5, dfp16) have an exponent (:attr:`exp`), statistics
    (:attr:`stats`), an Autoflex configuration (:meth:`set_autoflex`) and a write trace
    (:meth:`trace_enable`, :meth:`trace`).

    Operators: ``a + b``, ``a - b``, ``a * b`` (elementwise with broadcasting), ``a @ b``
    (2-D matrix product), ``s * a`` and ``-a`` (scaling by a number). Each allocates its result in
    the left operand's format, where the left operand lives; the functions in
    :mod:`flexpoint.ops` take an ``out=`` tensor of any format instead.

    A tensor lives on the host (:attr:`device` ``"cpu"``) or on a CUDA device (``"cuda:N"``);
    :meth:`to` moves a copy (bits and exponent state). Ops whose tensors all live on one device
    run there. Element access (:meth:`numpy`, :meth:`assign`, raw storage) needs a host tensor.

    Arguments are checked before they reach the library, which receives exactly the value given
    or is not called at all (the tensor is then unchanged): a wrong type (a float, str, None or
    bool for an integer) raises :class:`~flexpoint.ArgumentTypeError`, an integer outside the C
    parameter's type (``t.exp = 2**40``) :class:`~flexpoint.ArgumentRangeError` (also a
    RangeError and an OverflowError), a name or path containing NUL
    :class:`~flexpoint.InvalidArgumentError`. Both argument errors are InvalidArgumentErrors.
    """

    __slots__ = ("_ptr", "_base", "_owned", "_shape", "_fmt", "__weakref__")
    _ptr: Optional[int]
    _base: Any
    _owned: bool
    _shape: Optional[Tuple[int, ...]]
    _fmt: Optional[int]
    __iter__ = None  # not iterable: indexing takes slices only (see __getitem__)
    # NumPy ufuncs do not apply: `tensor + ndarray` raises TypeError instead of silently
    # computing in NumPy (np.asarray(tensor) still converts, through __array__).
    __array_ufunc__ = None

    def __init__(self, shape: ShapeLike, fmt: FormatLike = "flex16_5") -> None:
        """A new zero-filled host tensor. Raises ArgumentTypeError (shape not integers),
        ArgumentRangeError (a negative dimension or one beyond int64), InvalidArgumentError (ndim
        outside [1, MAX_DIMS]), OutOfMemoryError (the dimensions multiply beyond int64, or the
        allocation fails), FormatError (unknown fmt)."""
        dims = _shape_tuple(shape)
        f = fmt_id(fmt)
        L = lib()
        L.flexpoint_clear_error()
        ptr = L.tensor_new(f, len(dims), _c_shape(dims))
        if not ptr:
            # Arguments were validated above, so what is left is an allocation failure.
            raise_last(-5, "tensor_new")
        self._ptr = ptr
        self._base = None
        self._owned = True
        self._shape = dims
        self._fmt = f

    # ------------------------------------------------------------------------------------
    # construction helpers and lifetime
    # ------------------------------------------------------------------------------------
    @classmethod
    def _wrap(cls, ptr: Optional[int], base: Any, owned: bool = True) -> "Tensor":
        """Wrap a tensor_t* that the library returned. `base` is kept alive as long as this
        object (the parent of a view, or the trainer that owns a borrowed tensor)."""
        t = object.__new__(cls)
        t._ptr = ptr
        t._base = base
        t._owned = owned
        t._shape = None
        t._fmt = None
        return t

    @property
    def _h(self) -> int:
        p = self._ptr
        if not p:
            raise StateError("the tensor is no longer valid (it was freed, or its trainer was "
                             "closed)", -11)
        return p

    def __del__(self) -> None:
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr and getattr(self, "_owned", False):
            try:
                lib().tensor_free(ptr)
            except Exception:  # interpreter shutdown: module globals may already be gone
                pass

    def _invalidate(self) -> None:
        """Forget the C pointer (its owner freed it); later use raises StateError."""
        self._ptr = None

    @property
    def handle(self) -> int:
        """The tensor_t* as an integer, for passing to other ctypes code."""
        return self._h

    # ------------------------------------------------------------------------------------
    # shape, format, layout
    # ------------------------------------------------------------------------------------
    @property
    def shape(self) -> Tuple[int, ...]:
        """The shape, a tuple of ints."""
        if self._shape is None:
            L = lib()
            h = self._h
            n = check(L.tensor_ndim(h), "tensor_ndim")
            sp = L.tensor_shape(h)
            self._shape = tuple(int(sp[i]) for i in range(n))
        return self._shape

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements (also :attr:`numel`)."""
        return int(np.prod(self.shape, dtype=np.int64))

    numel = size

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def strides(self) -> Tuple[int, ...]:
        """Strides in elements (not bytes)."""
        L = lib()
        h = self._h
        st = L.tensor_strides(h)
        return tuple(int(st[i]) for i in range(self.ndim))

    @property
    def fmt_id(self) -> int:
        """The format as its integer fmt_t."""
        if self._fmt is None:
            self._fmt = check(lib().tensor_fmt(self._h), "tensor_fmt")
        return self._fmt

    @property
    def fmt(self) -> str:
        """The format's name: "fp32", "fp16", "bf16", "flex16_5" or "dfp16"."""
        return FORMATS[self.fmt_id]

    @property
    def device(self) -> str:
        """Where the elements live: "cpu" or "cuda:N"."""
        return device_name(self._ordinal())

    def to(self, device: DeviceLike) -> "Tensor":
        """This tensor on `device` ("cpu", "cuda", "cuda:N" or an ordinal): itself when it
        already lives there, else a new contiguous copy with the same bits and exponent state
        (tensor_to_device / tensor_to_host). DeviceError when the device cannot be used."""
        want, here = device_ordinal(device), self._ordinal()
        if want == here:
            return self
        if want >= 0 and here >= 0:  # device to device, through the host
            return self.to("cpu").to(want)
        L = lib()
        L.flexpoint_clear_error()
        if want < 0:
            ptr = L.tensor_to_host(self._h)
            if not ptr:
                raise_last(L.flexpoint_last_status() or None, "tensor_to_host")
            return Tensor._wrap(ptr, None)
        with _on_device(want):
            ptr = L.tensor_to_device(self._h)
            if not ptr:
                raise_last(L.flexpoint_last_status() or None, "tensor_to_device")
        return Tensor._wrap(ptr, None)

    def cpu(self) -> "Tensor":
        """``to("cpu")``."""
        return self.to("cpu")

    def cuda(self, device: DeviceLike = "cuda") -> "Tensor":
        """``to(device)``, device 0 by default."""
        return self.to(device)

    @property
    def is_shared_exponent(self) -> bool:
        """True for flex16_5 and dfp16 (int16 mantissas with one shared exponent)."""
        return self.fmt_id in (3, 4)

    @property
    def is_contiguous(self) -> bool:
        """True if the elements are contiguous in row-major order."""
        return bool(check(lib().tensor_is_contiguous(self._h), "tensor_is_contiguous"))

    @property
    def raw_dtype(self) -> np.dtype:
        """dtype of the raw storage (see :meth:`raw`)."""
        return raw_dtype(self.fmt_id)

    def __repr__(self) -> str:
        if not self._ptr:
            return "Tensor(<invalid>)"
        extra = f", exp={self.exp}" if self.is_shared_exponent else ""
        view = ", view" if isinstance(self._base, Tensor) else ""
        return f"Tensor(shape={self.shape}, fmt={self.fmt!r}{extra}{view})"

    # ------------------------------------------------------------------------------------
    # data in and out
    # ------------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A new float32 array with the tensor's values (exact for every format, except dfp16
        values beyond the fp32 range, which become +-inf)."""
        out = np.empty(self.shape, dtype=np.float32)
        check(lib().tensor_to_f32(self._h, out.ctypes.data_as(_fp)), "tensor_to_f32")
        return out

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def tolist(self) -> list:
        """The values as nested Python lists of floats."""
        return self.numpy().tolist()

    def assign(self, values: Any) -> "Tensor":
        """Write `values` (anything NumPy can broadcast to this shape) into the tensor. This is a
        write: fp16/bf16 round to nearest even, shared-exponent formats pick their exponent
        (flex16_5 through Autoflex, dfp16 exactly) and count statistics. Values are converted to
        float32 first (float64 input is rounded to float32, then to the format). Returns self."""
        a = np.asarray(values, dtype=np.float32)
        if a.shape != self.shape:
            try:
                a = np.broadcast_to(a, self.shape)
            except ValueError:
                raise ShapeError(f"assign: values of shape {a.shape} do not broadcast to the "
                                 f"tensor's shape {self.shape}", -2) from None
        a = np.ascontiguousarray(a)
        check(lib().tensor_from_f32(self._h, a.ctypes.data_as(_fp)), "tensor_from_f32")
        return self

    def get_raw(self) -> np.ndarray:
        """A copy of the raw storage elements in row-major order (see :meth:`raw` for types)."""
        out = np.empty(self.shape, dtype=self.raw_dtype)
        check(lib().tensor_get_raw(self._h, out.ctypes.data), "tensor_get_raw")
        return out

    def set_raw(self, values: Any) -> "Tensor":
        """Write raw storage elements (uint32 fp32 bits, uint16 fp16/bf16 bits, int16 mantissas).
        Mantissas must lie in [-32767, 32767] (RangeError otherwise, nothing written); the
        exponent is unchanged. Returns self. Raises ArgumentTypeError for non-integer values (a
        float or bool array), ArgumentRangeError for a value beyond the storage type (never
        wrapped: bit patterns held in a signed type are passed as ``.view(np.uint16)`` or
        ``.view(np.uint32)``), ShapeError for the wrong number of values; nothing is written on
        any error."""
        dt = self.raw_dtype
        a = np.asarray(values) if not isinstance(values, (list, tuple)) else values
        if not isinstance(a, np.ndarray) or a.dtype != dt:
            # integers only, each within the storage type: astype would wrap 65536 to 0
            a = c_int_array(a, "set_raw values", dt)
        if a.shape != self.shape:
            if a.size != self.size:
                raise ShapeError(f"set_raw: {a.size} values for a tensor of shape {self.shape}",
                                 -2)
            a = a.reshape(self.shape)
        a = np.ascontiguousarray(a)
        check(lib().tensor_set_raw(self._h, a.ctypes.data), "tensor_set_raw")
        return self

    def raw(self, writable: bool = False) -> np.ndarray:
        """A NumPy view of the tensor's storage, without copying: uint16 bit patterns for fp16
        and bf16, int16 mantissas for flex16_5 and dfp16 (value = m * 2**exp), uint32 bit
        patterns for fp32 (``.view(np.float32)`` gives the floats). The view has the tensor's
        shape and strides (a transposed or sliced tensor gives a strided array) and keeps the
        tensor alive. It aliases the storage: later writes to the tensor show through.

        With ``writable=True`` the array may be written; mantissas written this way must stay in
        [-32767, 32767], which the library's kernels rely on (use :meth:`set_raw` for a checked
        write)."""
        h = self._h
        dt = self.raw_dtype
        shape = self.shape
        if self.size == 0:
            return np.empty(shape, dtype=dt)
        ptr = lib().tensor_data(h)
        if not ptr:
            check(-1, "tensor_data")
        es = dt.itemsize
        iface = {"version": 3, "shape": shape, "typestr": dt.str,
                 "strides": tuple(s * es for s in self.strides),
                 "data": (int(ptr), not writable)}
        arr = np.asarray(_RawHolder(self, iface))
        return arr

    # ------------------------------------------------------------------------------------
    # copies and conversions
    # ------------------------------------------------------------------------------------
    def astype(self, fmt: FormatLike) -> "Tensor":
        """A new contiguous tensor in `fmt` holding this tensor's values (tensor_copy: a write
        into the new tensor, with its rounding and exponent choice)."""
        out = _new_on(self.shape, fmt, self._ordinal())
        check(lib().tensor_copy(out._h, self._h), "tensor_copy")
        return out

    def copy(self) -> "Tensor":
        """A new contiguous tensor of the same format (a write through tensor_copy; for a
        bit-exact duplicate of a shared-exponent tensor use :meth:`clone`)."""
        return self.astype(self.fmt_id)

    def clone(self) -> "Tensor":
        """A bit-exact contiguous duplicate: same format, raw storage, exponent and window. The
        Autoflex history and statistics are not copied."""
        where = self._ordinal()
        if where >= 0:
            return self.to("cpu").clone().to(where)
        out = Tensor(self.shape, self.fmt_id)
        if self.fmt_id == 3:
            out.set_exp_window(self.exp_window[0])
        e = self.exp
        if e is not None:
            out.exp = e
        out.set_raw(self.get_raw())
        return out

    def _ordinal(self) -> int:
        """-1 on the host, else the CUDA device (tensor_device; the handle is never NULL)."""
        return int(lib().tensor_device(self._h))

    def __copy__(self) -> "Tensor":
        return self.clone()  # where it lives (a pickle, below, holds host data)

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Tensor":
        return self.clone()

    def __reduce__(self):
        if self._ordinal() >= 0:  # pickles hold host data: load them with .to(device)
            return self.to("cpu").__reduce__()
        window = self.exp_window[0] if self.fmt_id == 3 else None
        return (_rebuild, (self.fmt, self.shape, self.get_raw(),
                           self.exp if self.is_shared_exponent else None, window))

    # ------------------------------------------------------------------------------------
    # views
    # ------------------------------------------------------------------------------------
    def reshape(self, *shape: Any) -> "Tensor":
        """A view with a new shape of the same size (one entry may be -1). Raises
        InvalidArgumentError (the tensor is not contiguous, more than one -1), ShapeError (the -1
        cannot be inferred, or the sizes differ), and for the dimensions what :class:`Tensor`
        raises for a shape."""
        if len(shape) == 1 and not is_scalar(shape[0]):
            shape = shape[0]
        dims = list(_reshape_dims(shape))
        if dims.count(-1) > 1:
            raise InvalidArgumentError(f"reshape{tuple(dims)}: more than one -1", -1)
        if -1 in dims:
            known = math.prod(d for d in dims if d != -1)
            if known == 0 or self.size % known:
                raise ShapeError(f"reshape{tuple(dims)}: cannot infer -1 for size {self.size}",
                                 -2)
            dims[dims.index(-1)] = self.size // known
        dims = list(_shape_tuple(dims, "reshape"))
        L = lib()
        L.flexpoint_clear_error()
        p = L.tensor_view_reshape(self._h, len(dims), _c_shape(dims))
        if not p:
            _raise_view_error("tensor_view_reshape")
        return Tensor._wrap(p, self)

    def transpose(self, d0: int = -2, d1: int = -1) -> "Tensor":
        """A view with dimensions d0 and d1 swapped (default: the last two). Raises
        InvalidArgumentError for a dimension out of range (ArgumentTypeError /
        ArgumentRangeError for one that is not a C int)."""
        a, b = c_int(d0, "d0"), c_int(d1, "d1")
        L = lib()
        L.flexpoint_clear_error()
        p = L.tensor_view_transpose(self._h, a, b)
        if not p:
            _raise_view_error("tensor_view_transpose")
        return Tensor._wrap(p, self)

    @property
    def T(self) -> "Tensor":
        """Transposed view of a 2-D tensor."""
        if self.ndim != 2:
            raise InvalidArgumentError(f".T needs a 2-D tensor, this one has shape {self.shape}",
                                       -1)
        return self.transpose(0, 1)

    def slice(self, dim: int, start: int, stop: Optional[int] = None, step: int = 1) -> "Tensor":
        """A view of indices start, start+step, ... < stop along `dim` (step >= 1,
        0 <= start <= stop <= shape[dim]). Raises InvalidArgumentError for bounds outside those;
        ArgumentTypeError / ArgumentRangeError for a dim that is not a C int or bounds that are
        not int64."""
        dim = c_int(dim, "dim")
        start, step = c_int64(start, "start"), c_int64(step, "step")
        ndim = self.ndim
        d = dim + ndim if -ndim <= dim < 0 else dim
        end = c_int64(stop, "stop") if stop is not None else \
            (self.shape[d] if 0 <= d < ndim else 0)
        L = lib()
        L.flexpoint_clear_error()
        p = L.tensor_view_slice(self._h, dim, start, end, step)
        if not p:
            _raise_view_error("tensor_view_slice")
        return Tensor._wrap(p, self)

    def __getitem__(self, key: Any) -> "Tensor":
        """Basic slicing with positive steps, e.g. ``t[1:3, ::2]`` or ``t[..., :4]``: a view.
        Integer indices are not supported (they would drop a dimension); use a length-1 slice
        and :meth:`reshape`."""
        if not isinstance(key, tuple):
            key = (key,)
        if sum(k is Ellipsis for k in key) > 1:
            raise InvalidArgumentError("an index can only have one ellipsis", -1)
        if Ellipsis in key:
            i = key.index(Ellipsis)
            fill = self.ndim - (len(key) - 1)
            key = key[:i] + (slice(None),) * max(fill, 0) + key[i + 1:]
        if len(key) > self.ndim:
            raise InvalidArgumentError(f"too many indices ({len(key)}) for a {self.ndim}-D "
                                       "tensor", -1)
        view = self
        for dim, k in enumerate(key):
            if not isinstance(k, slice):
                raise TypeError("flexpoint tensors take slices only (start:stop:step with "
                                f"step >= 1), not {type(k).__name__}")
            try:
                start, stop, step = k.indices(self.shape[dim])
            except TypeError:
                raise ArgumentTypeError(f"index {k!r}: slice bounds must be integers or None") \
                    from None
            if step < 1:
                raise InvalidArgumentError(f"slice step {step} must be >= 1", -1)
            if stop < start:
                stop = start
            # any step beyond the dimension selects only `start`, as a step of shape[dim] does
            step = min(step, max(self.shape[dim], 1))
            if (start, stop, step) != (0, self.shape[dim], 1):
                view = view.slice(dim, start, stop, step)
        return view

    # ------------------------------------------------------------------------------------
    # shared exponent, Autoflex, statistics, traces
    # ------------------------------------------------------------------------------------
    @property
    def exp(self) -> Optional[int]:
        """The shared exponent of a flex16_5/dfp16 tensor (value = m * 2**exp); None for float
        formats. Setting it rescales the stored mantissas. Setting raises RangeError outside the
        window, FormatError for a float format, ArgumentTypeError for a non-integer (a float,
        bool, str or None) and ArgumentRangeError (a RangeError) for an int beyond the C int
        range; nothing changes on any error."""
        if not self.is_shared_exponent:
            return None
        e = ctypes.c_int(0)
        # the status form: a device write that cannot be completed raises instead of passing
        check(lib().tensor_get_exp(self._h, ctypes.byref(e)), "tensor_get_exp")
        return int(e.value)

    @exp.setter
    def exp(self, e: int) -> None:
        check(lib().tensor_set_exp(self._h, c_int(e, "exp")), "tensor_set_exp")

    def set_exp(self, e: int) -> "Tensor":
        """Set the shared exponent (see :attr:`exp`). Returns self. Raises RangeError outside
        the window, FormatError for a float format, ArgumentTypeError for a non-integer and
        ArgumentRangeError for an int beyond the C int range (never wrapped into the window);
        the tensor is unchanged on any error."""
        self.exp = e
        return self

    @property
    def exp_window(self) -> Tuple[int, int]:
        """(lo, hi) exponent window of a shared-exponent tensor (FormatError otherwise)."""
        lo, hi = ctypes.c_int(), ctypes.c_int()
        check(lib().tensor_exp_window(self._h, ctypes.byref(lo), ctypes.byref(hi)),
              "tensor_exp_window")
        return lo.value, hi.value

    def set_exp_window(self, lo: int) -> "Tensor":
        """flex16_5 only: set the window to [lo, lo+31], lo in [-128, 96]. Returns self.
        Raises RangeError for lo outside [-128, 96] (ArgumentRangeError when it is not even a C
        int: it is never wrapped into another window), ArgumentTypeError for a non-integer,
        FormatError for other formats; the tensor is unchanged on any error."""
        check(lib().tensor_set_exp_window(self._h, c_int(lo, "window_lo")),
              "tensor_set_exp_window")
        return self

    def set_rounding(self, mode: Union[str, int] = "nearest", seed: int = 0) -> "Tensor":
        """Rounding of writes into a flex16_5/dfp16 tensor: "nearest" (ties to even) or
        "stochastic" (counter-based, keyed by seed, write counter and element). Returns self.
        Raises InvalidArgumentError for an unknown mode, FormatError for float formats,
        ArgumentTypeError / ArgumentRangeError for a mode that is not a C int or a seed outside
        [0, 2**64-1] (a negative seed is refused, not wrapped)."""
        if isinstance(mode, str):
            if mode not in _ROUNDING:
                raise InvalidArgumentError(f"rounding mode {mode!r}: expected 'nearest' or "
                                           "'stochastic'", -1)
            m = _ROUNDING[mode]
        else:
            m = c_int(mode, "mode")
        check(lib().tensor_set_rounding(self._h, m, c_uint64(seed, "seed")),
              "tensor_set_rounding")
        return self

    def stat(self, name: str) -> float:
        """One statistic of a shared-exponent tensor (see :data:`STAT_NAMES`). Raises
        UnknownNameError for another name, FormatError for float formats, ArgumentTypeError
        for a non-str, InvalidArgumentError for a name containing NUL."""
        v = c_double()
        check(lib().tensor_stat(self._h, c_str(name, "name"), ctypes.byref(v)), "tensor_stat")
        return v.value

    @property
    def stats(self) -> Dict[str, float]:
        """All statistics of a shared-exponent tensor as a dict (:data:`STAT_NAMES`); counts are
        ints. Empty for float formats, which keep none."""
        if not self.is_shared_exponent:
            return {}
        out: Dict[str, float] = {}
        for name in STAT_NAMES:
            v = self.stat(name)
            out[name] = v if name == "true_max" else int(v)
        return out

    def set_autoflex(self, preset: Union[str, AutoflexConfig] = "published") -> "Tensor":
        """Switch a flex16_5 tensor to a named Autoflex preset or an explicit
        :class:`AutoflexConfig`. Resets the history; keeps the exponent. Returns self.
        Raises UnknownNameError (unknown preset), FormatError (not flex16_5),
        InvalidArgumentError (a configuration field out of range, a name containing NUL),
        ArgumentTypeError / ArgumentRangeError (a preset that is neither a str nor an
        AutoflexConfig, a field that does not fit its C type); nothing changes on any error."""
        if isinstance(preset, AutoflexConfig):
            c = preset.to_c()
            check(lib().tensor_set_autoflex_config(self._h, ctypes.byref(c)),
                  "tensor_set_autoflex_config")
        else:
            check(lib().tensor_set_autoflex(self._h, c_str(preset, "preset")),
                  "tensor_set_autoflex")
        return self

    @property
    def autoflex_config(self) -> AutoflexConfig:
        """The tensor's Autoflex configuration (flex16_5)."""
        c = AutoflexConfigC()
        check(lib().tensor_get_autoflex_config(self._h, ctypes.byref(c)),
              "tensor_get_autoflex_config")
        return AutoflexConfig.from_c(c)

    def trace_enable(self, on: bool = True) -> "Tensor":
        """Start (clearing any old trace) or stop recording one record per write. Returns
        self. Raises FormatError for float formats, ArgumentTypeError / ArgumentRangeError for
        `on` other than True, False, 1 or 0."""
        check(lib().tensor_trace_enable(self._h, c_bool(on, "on")), "tensor_trace_enable")
        return self

    def trace(self) -> List[TraceRecord]:
        """The recorded writes, as :class:`TraceRecord` objects."""
        L = lib()
        h = self._h
        n = check(L.tensor_trace_len(h), "tensor_trace_len")
        rec = TraceRecordC()
        out = []
        for i in range(n):
            check(L.tensor_trace_get(h, i, ctypes.byref(rec)), "tensor_trace_get")
            out.append(TraceRecord.from_c(rec))
        return out

    def trace_arrays(self) -> Dict[str, np.ndarray]:
        """The trace as column arrays ({"exp": ..., "overflow": ..., ...})."""
        return trace_to_arrays(self.trace())

    def write_trace_csv(self, path: Union[str, os.PathLike]) -> None:
        """Write the trace as CSV (header, one row per write), atomically. Raises
        FlexpointIOError when the file cannot be written, ArgumentTypeError for a path that is
        not str, bytes or os.PathLike, InvalidArgumentError for a path containing NUL."""
        check(lib().tensor_trace_write_csv(self._h, c_path(path, "path")),
              "tensor_trace_write_csv")

    # ------------------------------------------------------------------------------------
    # operators (see flexpoint.ops for the functions with out=)
    # ------------------------------------------------------------------------------------
    def __add__(self, other: Any) -> "Tensor":
        if not isinstance(other, Tensor):
            return NotImplemented
        return _ops().add(self, other)

    def __sub__(self, other: Any) -> "Tensor":
        if not isinstance(other, Tensor):
            return NotImplemented
        return _ops().sub(self, other)

    def __mul__(self, other: Any) -> "Tensor":
        if isinstance(other, Tensor):
            return _ops().mul(self, other)
        if _is_number(other):
            return _ops().scale(self, float(other))
        return NotImplemented

    def __rmul__(self, other: Any) -> "Tensor":
        if _is_number(other):
            return _ops().scale(self, float(other))
        return NotImplemented

    def __neg__(self) -> "Tensor":
        return _ops().scale(self, -1.0)

    def __matmul__(self, other: Any) -> "Tensor":
        if not isinstance(other, Tensor):
            return NotImplemented
        return _ops().matmul(self, other)

    def __iadd__(self, other: Any) -> "Tensor":
        if not isinstance(other, Tensor):
            return NotImplemented
        return _ops().add(self, other, out=self)

    def __isub__(self, other: Any) -> "Tensor":
        if not isinstance(other, Tensor):
            return NotImplemented
        return _ops().sub(self, other, out=self)

    def __imul__(self, other: Any) -> "Tensor":
        if isinstance(other, Tensor):
            return _ops().mul(self, other, out=self)
        if _is_number(other):
            return _ops().scale(self, float(other), out=self)
        return NotImplemented


def _is_number(x: Any) -> bool:
    return isinstance(x, (numbers.Real, np.floating, np.integer)) and not isinstance(x, bool)


def _ops():
    from . import ops
    return ops


def _raise_view_error(fn: str) -> None:
    # View constructors return NULL; the failure set the library's status with its message.
    status = lib().flexpoint_last_status()
    if status >= 0:  # unset: EINVAL covers every argument problem they report, ENOMEM the
        msg = lib().flexpoint_last_error().decode("utf-8", "replace")  # allocation failure
        status = -5 if "out of memory" in msg else -1
    raise_last(status, fn)


def _new_on(shape: Sequence[int], fmt: FormatLike, ordinal: int) -> Tensor:
    """A new zero-filled contiguous tensor on the host (ordinal -1) or on CUDA device
    `ordinal`."""
    if ordinal < 0:
        return Tensor(shape, fmt)
    dims = _shape_tuple(shape)
    f = fmt_id(fmt)
    L = lib()
    with _on_device(ordinal):
        L.flexpoint_clear_error()
        ptr = L.tensor_new_device(f, len(dims), _c_shape(dims))
        if not ptr:
            raise_last(L.flexpoint_last_status() or None, "tensor_new_device")
    return Tensor._wrap(ptr, None)


def _rebuild(fmt: str, shape: Tuple[int, ...], raw: np.ndarray, exp: Optional[int],
             window_lo: Optional[int]) -> Tensor:
    t = Tensor(shape, fmt)
    if window_lo is not None:
        t.set_exp_window(window_lo)
    if exp is not None:
        t.exp = exp
    t.set_raw(raw)
    return t


# ----------------------------------------------------------------------------------------
# module-level constructors
# ----------------------------------------------------------------------------------------
def tensor(shape: ShapeLike, fmt: FormatLike = "flex16_5", *, autoflex: Optional[str] = None,
           exp: Optional[int] = None, window_lo: Optional[int] = None,
           device: DeviceLike = "cpu") -> Tensor:
    """A new zero-filled contiguous tensor, on the host or on `device` ("cuda", "cuda:N").

    A shared-exponent tensor starts at exponent -8 (flex16_5, window [-31, 0], Autoflex preset
    from FLEXPOINT_AUTOFLEX or "robust") or 0 (dfp16); `window_lo`, `exp` and `autoflex`
    change that (flex16_5 only for the window and preset).

    Raises what :class:`Tensor` raises for the shape and format, what :meth:`Tensor.set_exp`,
    :meth:`Tensor.set_exp_window` and :meth:`Tensor.set_autoflex` raise for those arguments
    (their types are checked before anything is allocated), InvalidArgumentError for a bad
    device and DeviceError when it cannot be used."""
    dims = _shape_tuple(shape)
    if window_lo is not None:
        c_int(window_lo, "window_lo")
    if exp is not None:
        c_int(exp, "exp")
    if autoflex is not None:
        c_str(autoflex, "autoflex")
    t = _new_on(dims, fmt, device_ordinal(device))
    if window_lo is not None:
        t.set_exp_window(window_lo)
    if exp is not None:
        t.exp = exp
    if autoflex is not None:
        t.set_autoflex(autoflex)
    return t


zeros = tensor


def from_numpy(a: Any, fmt: FormatLike = "flex16_5", *, autoflex: Optional[str] = None,
               window_lo: Optional[int] = None, exp: Optional[int] = None,
               rounding: Optional[str] = None, seed: int = 0,
               device: DeviceLike = "cpu") -> Tensor:
    """A new tensor of `a`'s shape holding its values in `fmt` (a 0-d array becomes shape (1,)),
    on the host or, written there and then copied, on `device`.

    The values are converted to float32 and written once (tensor_from_f32): fp16 and bf16 round
    to nearest even; dfp16 picks the exact exponent; flex16_5 picks it with Autoflex (the first
    write probes from exponent -8, or from `exp` when given). `autoflex`, `window_lo`,
    `rounding` ("nearest" / "stochastic") and `seed` configure the tensor before the write.

    Raises what :func:`tensor` and :meth:`Tensor.set_rounding` raise (a seed outside
    [0, 2**64-1] included, checked before anything is allocated)."""
    c_uint64(seed, "seed")
    arr = np.asarray(a, dtype=np.float32)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    t = tensor(arr.shape, fmt, autoflex=autoflex, exp=exp, window_lo=window_lo)
    if rounding is not None:
        t.set_rounding(rounding, seed)
    t.assign(arr)
    return t.to(device)


def from_raw(raw: Any, fmt: FormatLike, exp: Optional[int] = None,
             window_lo: Optional[int] = None) -> Tensor:
    """A new tensor holding raw storage values (see :meth:`Tensor.raw` for their types); for
    shared-exponent formats, `exp` sets the exponent the mantissas are read at. Raises what
    :func:`tensor` and :meth:`Tensor.set_raw` raise."""
    r = np.asarray(raw)
    t = tensor(r.shape if r.ndim else (1,), fmt, exp=exp, window_lo=window_lo)
    return t.set_raw(r.reshape(t.shape))
