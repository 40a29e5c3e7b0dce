"""Number formats, their names and their raw storage types."""
from __future__ import annotations

import enum
from typing import Dict, Union

import numpy as np

from ._check import INT_MAX, INT_MIN, c_str
from ._lib import lib
from .errors import FormatError, check

__all__ = ["Format", "FORMATS", "FormatLike", "fmt_id", "fmt_name", "is_shared_exponent",
           "raw_dtype", "elem_size"]


class Format(enum.IntEnum):
    """The fmt_t values of flexpoint.h (stable: part of the ABI and of checkpoints)."""
    FP32 = 0
    FP16 = 1
    BF16 = 2
    FLEX16_5 = 3
    DFP16 = 4


#: Format names in enum order, as fmt_name() gives them.
FORMATS = ("fp32", "fp16", "bf16", "flex16_5", "dfp16")

#: A format given as a name ("flex16_5", "flex16+5"), a Format or its integer value.
FormatLike = Union[str, int, Format]

_RAW: Dict[int, np.dtype] = {0: np.dtype(np.uint32), 1: np.dtype(np.uint16), 2: np.dtype(np.uint16),
        3: np.dtype(np.int16), 4: np.dtype(np.int16)}


def fmt_id(fmt: FormatLike) -> int:
    """The integer fmt_t of a format name, Format or int.

    Raises FormatError for an unknown name, an int that is not a format (any int outside the
    C int range included: it is not wrapped into one) or another type; InvalidArgumentError for
    a name containing NUL (which would otherwise be cut there and name another format)."""
    if isinstance(fmt, str):
        return check(lib().fmt_from_name(c_str(fmt, "fmt")), "fmt_from_name")
    if isinstance(fmt, (int, np.integer)) and not isinstance(fmt, bool):
        f = int(fmt)
        if not INT_MIN <= f <= INT_MAX or lib().fmt_name(f) is None:
            shown = f if abs(f) < 2**64 else "a huge int"
            raise FormatError(f"fmt={shown} is not a format (0..{len(FORMATS) - 1})", -3)
        return f
    raise FormatError(f"a format is a name such as 'flex16_5' or a Format, not {fmt!r}", -3)


def fmt_name(fmt: FormatLike) -> str:
    """Canonical name of a format ("flex16_5" for "flex16+5", Format.FLEX16_5 or 3); raises as
    :func:`fmt_id`."""
    return lib().fmt_name(fmt_id(fmt)).decode()


def is_shared_exponent(fmt: FormatLike) -> bool:
    """True for the int16-mantissa formats with one shared exponent (flex16_5, dfp16); raises
    as :func:`fmt_id`."""
    return bool(lib().fmt_is_shared_exponent(fmt_id(fmt)))


def elem_size(fmt: FormatLike) -> int:
    """Bytes per stored element (4 for fp32, 2 for the others); raises as :func:`fmt_id`."""
    return int(lib().fmt_elem_size(fmt_id(fmt)))


def raw_dtype(fmt: FormatLike) -> np.dtype:
    """NumPy dtype of the raw storage: uint32 bit patterns for fp32, uint16 for fp16 and bf16,
    int16 mantissas for flex16_5 and dfp16; raises as :func:`fmt_id`."""
    return _RAW[fmt_id(fmt)]
