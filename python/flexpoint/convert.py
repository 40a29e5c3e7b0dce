"""Scalar conversions between fp32/binary64 values and fp16/bf16 bit patterns.

The library's public conversions (``include/flexpoint.h``, docs/math.md "Scalar conversions"),
one value at a time:

* :func:`f32_to_fp16`, :func:`f32_to_bf16`: fp32 value -> 16-bit pattern, round to nearest
  even; :func:`f32_to_bf16_trunc` truncates (round toward zero), as TensorFlow's
  ``FloatToBFloat16`` does, for reproducing such numbers; a NaN stays a quiet NaN.
* :func:`fp16_to_f32`, :func:`bf16_to_f32`: 16-bit pattern -> its value, exactly.
* :func:`f64_to_fp16`, :func:`f64_to_bf16`: binary64 value -> 16-bit pattern, rounded *once*
  (not through fp32, which would round twice: 1 + 2**-11 + 2**-30 gives 0x3C01, not 0x3C00).

Patterns are Python ints in [0, 65535]; values are Python floats. The fp32 functions take only
values that fp32 holds exactly (any ``numpy.float32``, or a float such as 0.5): a float such as
0.1 would first be rounded to fp32 by ctypes and then again to 16 bits, so it is refused with
:class:`ArgumentRangeError` naming the f64 function to use instead. Wrong types raise
:class:`ArgumentTypeError` (the conventions of :mod:`flexpoint._check`).
"""
from __future__ import annotations

import ctypes
import math
from typing import Any

from ._check import c_double, c_integer
from ._lib import lib
from .errors import ArgumentRangeError

__all__ = ["f32_to_fp16", "fp16_to_f32", "f32_to_bf16", "f32_to_bf16_trunc", "bf16_to_f32",
           "f64_to_fp16", "f64_to_bf16"]


def _bits(value: Any, name: str) -> int:
    """A 16-bit pattern: an integer in [0, 65535] (ArgumentTypeError, ArgumentRangeError)."""
    return c_integer(value, name, ctypes.c_uint16, tname="uint16")


def _f32(value: Any, name: str, f64_name: str) -> float:
    """A real number that fp32 holds exactly (NaN and +-Inf included)."""
    v = c_double(value, name)
    if math.isnan(v):
        return v
    near = ctypes.c_float(v).value
    if near != v:
        raise ArgumentRangeError(
            f"{name}={v!r} is not an fp32 value (fp32 would hold {near!r}); converting it "
            f"would round twice: use {f64_name}() to round a double once, or pass "
            "numpy.float32(x) to round to fp32 first on purpose")
    return v


def f32_to_fp16(x: Any) -> int:
    """fp32 value -> fp16 bits, round to nearest even (fx_f32_to_fp16). Values beyond the fp16
    range give +-Inf (0x7C00 | sign) from 65520 on; NaN gives a quiet NaN.

    Raises ArgumentTypeError (not a real number) or ArgumentRangeError (not an fp32 value: use
    :func:`f64_to_fp16`)."""
    return int(lib().fx_f32_to_fp16(_f32(x, "x", "f64_to_fp16")))


def fp16_to_f32(h: Any) -> float:
    """fp16 bits -> the value, exactly (fx_fp16_to_f32; NaN payloads kept).

    Raises ArgumentTypeError (not an integer) or ArgumentRangeError (outside [0, 65535])."""
    return float(lib().fx_fp16_to_f32(_bits(h, "h")))


def f32_to_bf16(x: Any) -> int:
    """fp32 value -> bf16 bits, round to nearest even (fx_f32_to_bf16); NaN stays NaN.

    Raises ArgumentTypeError or ArgumentRangeError (not an fp32 value: use
    :func:`f64_to_bf16`)."""
    return int(lib().fx_f32_to_bf16(_f32(x, "x", "f64_to_bf16")))


def f32_to_bf16_trunc(x: Any) -> int:
    """fp32 value -> bf16 bits by truncation, the top 16 bits (fx_f32_to_bf16_trunc): what
    TensorFlow's FloatToBFloat16 computes. A NaN gives the quiet NaN sign | 0x7FC0 (truncating
    a NaN whose payload is in the low bits would give Inf).

    Raises ArgumentTypeError or ArgumentRangeError (not an fp32 value)."""
    return int(lib().fx_f32_to_bf16_trunc(_f32(x, "x", "f64_to_bf16")))


def bf16_to_f32(h: Any) -> float:
    """bf16 bits -> the value, exactly (fx_bf16_to_f32).

    Raises ArgumentTypeError (not an integer) or ArgumentRangeError (outside [0, 65535])."""
    return float(lib().fx_bf16_to_f32(_bits(h, "h")))


def f64_to_fp16(x: Any) -> int:
    """binary64 value -> fp16 bits, rounded once to nearest even (fx_f64_to_fp16).

    Any real number is accepted (a Python int is converted to a double first; one beyond the
    double range raises ArgumentRangeError); ArgumentTypeError for other types."""
    return int(lib().fx_f64_to_fp16(c_double(x, "x")))


def f64_to_bf16(x: Any) -> int:
    """binary64 value -> bf16 bits, rounded once to nearest even (fx_f64_to_bf16).

    Raises as :func:`f64_to_fp16`."""
    return int(lib().fx_f64_to_bf16(c_double(x, "x")))
