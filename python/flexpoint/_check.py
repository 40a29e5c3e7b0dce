"""Checks on Python values before they cross into C.

ctypes converts silently: a Python int passed as a C ``int`` keeps its low 32 bits (``2**40``
becomes 0, ``2**32 - 20`` becomes -20), -1 passed as a ``uint64_t`` becomes ``2**64 - 1``, a
``char[16]`` struct field filled with 16 bytes has no terminator, and a C string ends at its
first NUL byte (``"a.ckpt\\0x"`` names the file ``a.ckpt``). NumPy's ``astype`` wraps and
truncates the same way (a float label 2.7 becomes 2). Every value the package hands to the
library goes through one of the functions below, so that a call either receives exactly the
value it was given or is not made at all (and changes nothing).

The rules, the same in every module:

* integers (``c_int``, ``c_int64``, ``c_uint64``, ``c_size``): ``int``, NumPy integers, or any
  object with ``__index__``. Not ``bool`` (a bool where a count, index or exponent is meant is
  a mistake), not ``float`` even when integral (as ``range(3.0)``), not ``str`` or ``None``:
  :class:`ArgumentTypeError`. A value outside the C type's range, or outside a narrower
  ``[lo, hi]`` the caller gives: :class:`ArgumentRangeError`.
* flags (a C ``int`` read as a boolean, ``c_bool``): ``bool``, ``numpy.bool_`` or the ints 0
  and 1; anything else is refused rather than judged by its truthiness (``"no"`` is truthy).
* real numbers (``c_double``): ints, floats, NumPy numbers, anything with ``__float__``; not
  ``bool``, ``str`` or ``None``. An int too large for a double: :class:`ArgumentRangeError`.
* names (``c_str``): ``str`` only, UTF-8 encoded, without NUL; a ``char[N]`` field holds at
  most N-1 bytes. NUL, unencodable text or a too long name: :class:`InvalidArgumentError`.
* paths (``c_path``): ``str``, ``bytes`` or ``os.PathLike`` (``os.fsencode``), without NUL
  (:class:`InvalidArgumentError`, as Python's own ``open`` raises ValueError).
* integer arrays (``c_int_array``: labels, indices, argmax): an integer dtype, or a sequence of
  Python ints. Float, complex, string and bool arrays are refused (:class:`ArgumentTypeError`):
  a float label would be truncated, and a bool array is a mask, not class indices. An empty
  array of any dtype is accepted. An element outside the C element type:
  :class:`ArgumentRangeError` naming it.
* shapes (``c_shape``): an int or a sequence of ints, each in [0, 2**63-1]; the product of the
  non-zero dimensions (which bounds every stride and the element count) must fit int64, else
  :class:`OutOfMemoryError`, the class the library uses for a size that overflows.
"""
from __future__ import annotations

import ctypes
import math
import operator
import os
from typing import Any, Optional, Sequence, Tuple, Type

import numpy as np

from .errors import ArgumentRangeError, ArgumentTypeError, InvalidArgumentError, OutOfMemoryError

__all__ = ["INT_MIN", "INT_MAX", "INT64_MIN", "INT64_MAX", "UINT64_MAX", "SIZE_MAX", "c_int",
           "c_int64", "c_uint64", "c_size", "c_integer", "c_bool", "c_double", "c_str",
           "c_path", "c_shape", "c_int_array", "c_field", "is_scalar"]


def _limits(ctype: Any) -> Tuple[int, int]:
    bits = 8 * ctypes.sizeof(ctype)
    if ctype(-1).value < 0:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


INT_MIN, INT_MAX = _limits(ctypes.c_int)
INT64_MIN, INT64_MAX = _limits(ctypes.c_int64)
UINT64_MAX = _limits(ctypes.c_uint64)[1]
SIZE_MAX = _limits(ctypes.c_size_t)[1]

_EINVAL, _ENOMEM = -1, -5  # FX_EINVAL, FX_ENOMEM: the library's statuses for these faults


def _type_name(ctype: Any) -> str:
    lo, _ = _limits(ctype)
    bits = 8 * ctypes.sizeof(ctype)
    if lo < 0 and bits == 8 * ctypes.sizeof(ctypes.c_int):
        return "C int"
    return f"{'u' if lo == 0 else ''}int{bits}"


def _show(value: Any, limit: int = 60) -> str:
    """repr of a value, shortened: a hostile value may be a 10,000-digit int."""
    r = repr(value)
    return r if len(r) <= limit else r[:limit - 3] + "..."


def is_scalar(value: Any) -> bool:
    """True for a single integer-like value (int, NumPy integer, 0-d integer array, bool), as
    opposed to a sequence; an ndarray of one or more dimensions also has ``__index__`` (which
    raises), so the attribute alone does not tell."""
    try:
        operator.index(value)
    except TypeError:
        return isinstance(value, (bool, np.bool_))
    return True


def _index(value: Any, name: str, what: str = "an integer") -> int:
    if isinstance(value, (bool, np.bool_)):
        raise ArgumentTypeError(f"{name}={value!r}: expected {what}, not a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise ArgumentTypeError(f"{name}={_show(value)}: expected {what}, not "
                                f"{type(value).__name__}") from None


def c_integer(value: Any, name: str, ctype: Any, lo: Optional[int] = None,
              hi: Optional[int] = None, tname: Optional[str] = None) -> int:
    """`value` as an integer for a parameter of the ctypes type `ctype` (named `tname` in the
    message), optionally narrowed to [lo, hi]. Raises ArgumentTypeError (not an integer, or a
    bool) or ArgumentRangeError."""
    tlo, thi = _limits(ctype)
    v = _index(value, name)
    lo_ = tlo if lo is None else max(lo, tlo)
    hi_ = thi if hi is None else min(hi, thi)
    if not lo_ <= v <= hi_:
        if (lo_, hi_) == (tlo, thi):
            raise ArgumentRangeError(f"{name}={_show(v)} does not fit the parameter's C type "
                                     f"({tname or _type_name(ctype)}, [{tlo}, {thi}])")
        raise ArgumentRangeError(f"{name}={_show(v)} is outside [{lo_}, {hi_}]")
    return v


def c_int(value: Any, name: str, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    """`value` for a C ``int`` parameter (32 bits), optionally narrowed to [lo, hi].
    Raises ArgumentTypeError or ArgumentRangeError."""
    return c_integer(value, name, ctypes.c_int, lo, hi)


def c_int64(value: Any, name: str, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    """`value` for an ``int64_t`` parameter. Raises ArgumentTypeError or ArgumentRangeError."""
    return c_integer(value, name, ctypes.c_int64, lo, hi)


def c_uint64(value: Any, name: str) -> int:
    """`value` for a ``uint64_t`` parameter (seeds, counters): [0, 2**64-1], negative values are
    refused rather than wrapped. Raises ArgumentTypeError or ArgumentRangeError."""
    return c_integer(value, name, ctypes.c_uint64)


def c_size(value: Any, name: str) -> int:
    """`value` for a ``size_t`` parameter. Raises ArgumentTypeError or ArgumentRangeError."""
    return c_integer(value, name, ctypes.c_size_t, tname="size_t")


def c_bool(value: Any, name: str) -> int:
    """A flag for a C ``int`` read as a boolean: 1 or 0 from True/False, numpy bools, 1 or 0.
    Raises ArgumentTypeError (another type) or ArgumentRangeError (another integer)."""
    if isinstance(value, (bool, np.bool_)):
        return int(bool(value))
    try:
        v = operator.index(value)
    except TypeError:
        raise ArgumentTypeError(f"{name}={_show(value)}: expected True or False, not "
                                f"{type(value).__name__}") from None
    if v not in (0, 1):
        raise ArgumentRangeError(f"{name}={_show(v)}: a flag is True or False (or 1 or 0)")
    return v


def c_double(value: Any, name: str) -> float:
    """`value` for a C ``double`` parameter. Raises ArgumentTypeError (bool, str, bytes, None or
    a non-number) or ArgumentRangeError (an int beyond the double range)."""
    if value is None or isinstance(value, (bool, np.bool_, str, bytes, bytearray, memoryview)):
        raise ArgumentTypeError(f"{name}={_show(value)}: expected a real number, not "
                                f"{type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise ArgumentRangeError(f"{name}={_show(value)} is too large for a C double") from None
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"{name}={_show(value)}: expected a real number, not "
                                f"{type(value).__name__}") from None


def _name_bytes(b: bytes, shown: Any, name: str, size: Optional[int]) -> bytes:
    if b"\0" in b:
        raise InvalidArgumentError(f"{name}={_show(shown)} contains a NUL character, which "
                                   "would end the C string early", _EINVAL)
    if size is not None and len(b) >= size:
        raise InvalidArgumentError(f"{name}={_show(shown)} is {len(b)} bytes; the C field "
                                   f"holds at most {size - 1}", _EINVAL)
    return b


def c_str(value: Any, name: str, size: Optional[int] = None) -> bytes:
    """A name (format, preset, statistic, backend, tensor name) as the bytes of a C string;
    `size` is the capacity of a ``char[size]`` field, terminator included. Raises
    ArgumentTypeError (not a str) or InvalidArgumentError (NUL, not UTF-8 encodable, too long).
    """
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name}={_show(value)}: expected a str, not "
                                f"{type(value).__name__}")
    try:
        b = value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{name}={_show(value)} cannot be encoded as UTF-8",
                                   _EINVAL) from None
    return _name_bytes(b, value, name, size)


def c_path(value: Any, name: str = "path") -> bytes:
    """A file or directory path as bytes for the library (os.fsencode). Raises
    ArgumentTypeError (not str, bytes or os.PathLike) or InvalidArgumentError (a NUL byte)."""
    try:
        b = os.fsencode(value)
    except TypeError:
        raise ArgumentTypeError(f"{name}={_show(value)}: expected a str, bytes or os.PathLike "
                                f"path, not {type(value).__name__}") from None
    if b"\0" in b:
        raise InvalidArgumentError(f"{name}={_show(value)} contains a NUL byte, which would "
                                   "end the C string early and name another file", _EINVAL)
    return b


def c_shape(shape: Any, name: str = "shape", min_dims: int = 1,
            max_dims: Optional[int] = None) -> Tuple[int, ...]:
    """A shape (an int or a sequence of ints) as a tuple of int64 dimensions, each >= 0, with
    min_dims..max_dims entries. Raises ArgumentTypeError (not integers),
    ArgumentRangeError (a negative dimension or one beyond int64), InvalidArgumentError (the
    number of dimensions) or OutOfMemoryError (the non-zero dimensions multiply beyond int64,
    so the element count or a stride would overflow)."""
    if isinstance(shape, (bool, np.bool_)):
        raise ArgumentTypeError(f"{name}={shape!r}: expected an integer or a sequence of "
                                "integers, not a bool")
    if is_scalar(shape):
        seq: Sequence[Any] = (shape,)
    elif isinstance(shape, (str, bytes)) or shape is None:
        raise ArgumentTypeError(f"{name}={_show(shape)}: expected an integer or a sequence of "
                                "integers")
    else:
        try:
            seq = tuple(shape)
        except TypeError:
            raise ArgumentTypeError(f"{name}={_show(shape)}: expected an integer or a sequence "
                                    "of integers") from None
    dims = tuple(_index(d, f"{name}[{i}]") for i, d in enumerate(seq))
    for i, d in enumerate(dims):
        if d < 0:
            raise ArgumentRangeError(f"{name} {_show(dims)}: {name}[{i}]={d} is negative")
        if d > INT64_MAX:
            raise ArgumentRangeError(f"{name} {_show(dims)}: {name}[{i}]={_show(d)} does not "
                                     f"fit int64 (at most {INT64_MAX})")
    if len(dims) < min_dims or (max_dims is not None and len(dims) > max_dims):
        raise InvalidArgumentError(f"{name} {_show(dims)}: ndim={len(dims)} is outside "
                                   f"[{min_dims}, {max_dims}]", _EINVAL)
    n = math.prod(d for d in dims if d)
    if n > INT64_MAX:
        raise OutOfMemoryError(f"{name} {_show(dims)}: the non-zero dimensions multiply to "
                               f"{_show(n)}, beyond int64, so the element count or the strides "
                               "would overflow", _ENOMEM)
    return dims


def _where(a: np.ndarray, flat: int) -> str:
    if a.ndim <= 1:
        return f"[{flat}]"
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat, a.shape)) + "]"


def c_int_array(values: Any, name: str, dtype: Any, lo: Optional[int] = None,
                hi: Optional[int] = None) -> np.ndarray:
    """`values` (an integer array or a sequence of ints) as a C-contiguous array of the integer
    `dtype`, each element within the dtype's range and [lo, hi] when given. Raises
    ArgumentTypeError (float, complex, bool, string or object elements that are not ints) or
    ArgumentRangeError naming the offending element."""
    dt = np.dtype(dtype)
    info = np.iinfo(dt)
    lo_ = int(info.min) if lo is None else max(lo, int(info.min))
    hi_ = int(info.max) if hi is None else min(hi, int(info.max))
    a = values if isinstance(values, np.ndarray) else None
    if a is None:
        try:
            a = np.asarray(values)
        except (OverflowError, ValueError, TypeError):
            a = None
        # Python ints beyond int64 make NumPy pick float64 or object: look at the elements
        if a is None or (a.dtype.kind in "fO" and a.size):
            try:
                a = np.asarray(values, dtype=object)
            except (ValueError, TypeError):
                raise ArgumentTypeError(f"{name}: expected an array of integers") from None
    if a.size == 0:
        return np.zeros(a.shape, dtype=dt)
    kind = a.dtype.kind
    if kind == "b":
        raise ArgumentTypeError(f"{name} is a bool array: expected integers (a bool array is a "
                                "mask; convert it with .astype(int) if 0/1 are meant)")
    if kind in "iu":
        amin, amax = int(a.min()), int(a.max())
        if amin < lo_:
            flat = int(np.argmin(a))
        elif amax > hi_:
            flat = int(np.argmax(a))
        else:
            return np.ascontiguousarray(a, dtype=dt)
        bad = int(a.reshape(-1)[flat])
    elif kind == "O":
        flat_vals = a.reshape(-1)
        ints = [_index(v, f"{name}{_where(a, i)}") for i, v in enumerate(flat_vals)]
        bad_at = next((i for i, v in enumerate(ints) if not lo_ <= v <= hi_), None)
        if bad_at is None:
            return np.ascontiguousarray(np.array(ints, dtype=dt).reshape(a.shape))
        flat, bad = bad_at, ints[bad_at]
    else:
        raise ArgumentTypeError(f"{name} has dtype {a.dtype.name}: expected integers (a float "
                                "would be truncated; convert with .astype(np.int64) if the "
                                "values are whole)")
    if (lo_, hi_) == (int(info.min), int(info.max)):
        raise ArgumentRangeError(f"{name}{_where(a, flat)}={_show(bad)} does not fit "
                                 f"{dt.name} [{lo_}, {hi_}]")
    raise ArgumentRangeError(f"{name}{_where(a, flat)}={_show(bad)} is outside [{lo_}, {hi_}]")


def c_field(value: Any, name: str, ctype: Type[Any]) -> Any:
    """`value` checked for a ctypes Structure field of type `ctype`: integers against the
    field's C type, doubles as :func:`c_double`, ``char[N]`` from str or bytes without NUL and
    at most N-1 bytes long. Other field types pass unchanged."""
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Array) and \
            ctype._type_ is ctypes.c_char:
        if isinstance(value, (bytes, bytearray)):
            return _name_bytes(bytes(value), value, name, ctype._length_)
        return c_str(value, name, ctype._length_)
    if ctype in (ctypes.c_double, ctypes.c_float):
        return c_double(value, name)
    if isinstance(ctype, type) and issubclass(ctype, ctypes._SimpleCData) and \
            ctype._type_ in "bBhHiIlLqQnN":
        return c_integer(value, name, ctype)
    return value
