"""Exceptions: one class per library status code, each carrying the library's message.

Every negative status returned by libflexpoint becomes an instance of a :class:`FlexpointError`
subclass. ``err.status`` is the numeric code, ``err.status_name`` its constant name ("FX_ESHAPE")
and ``str(err)`` the message from ``flexpoint_last_error()``, which names the C function and the
offending values. The subclasses also derive from the closest built-in exception, so
``except ValueError`` catches a shape error as it would in NumPy.

Two classes are raised by the binding alone, before any C call, when a Python value cannot
cross into C unchanged (see :mod:`flexpoint._check`): :class:`ArgumentTypeError` (a wrong
type: a float, str, None or bool where an integer is expected) and :class:`ArgumentRangeError`
(an integer that the C parameter's type cannot hold, such as ``2**40`` for a C ``int``).
Both derive from :class:`InvalidArgumentError`; the range error is also a :class:`RangeError`
and an :class:`OverflowError`, so it is caught by whichever class the library reports for a
value just outside a parameter's domain, and by the built-in class Python uses for an integer
too large for a C type.
"""
from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "FlexpointError", "InvalidArgumentError", "ShapeError", "FormatError", "UnsupportedError",
    "OutOfMemoryError", "RangeError", "FlexpointIOError", "CorruptError", "DeviceError",
    "UnknownNameError", "StateError", "ArgumentTypeError", "ArgumentRangeError", "STATUS_NAMES",
    "check", "raise_last",
]

#: Status code -> constant name, as in flexpoint.h.
STATUS_NAMES: Dict[int, str] = {
    0: "FX_OK", -1: "FX_EINVAL", -2: "FX_ESHAPE", -3: "FX_EFORMAT", -4: "FX_EUNSUPPORTED",
    -5: "FX_ENOMEM", -6: "FX_ERANGE", -7: "FX_EIO", -8: "FX_ECORRUPT", -9: "FX_EDEVICE",
    -10: "FX_ENAME", -11: "FX_ESTATE",
}


class FlexpointError(Exception):
    """A libflexpoint call failed. ``status`` is the FX_E* code (None if unknown)."""

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    @property
    def status_name(self) -> str:
        """Constant name of the status, e.g. "FX_ESHAPE" ("FX_UNKNOWN" if not known)."""
        return STATUS_NAMES.get(self.status, "FX_UNKNOWN") if self.status is not None \
            else "FX_UNKNOWN"

    def __str__(self) -> str:
        return f"[{self.status_name}] {self.message}"


class InvalidArgumentError(FlexpointError, ValueError):
    """FX_EINVAL: a NULL pointer, bad ndim, negative size, bad axis, bad parameter."""


class ShapeError(FlexpointError, ValueError):
    """FX_ESHAPE: operand shapes do not fit together."""


class FormatError(FlexpointError, ValueError):
    """FX_EFORMAT: unknown format, or an operation the tensor's format does not have."""


class UnsupportedError(FlexpointError, NotImplementedError):
    """FX_EUNSUPPORTED: a valid request this build, CPU or format cannot do."""


class OutOfMemoryError(FlexpointError, MemoryError):
    """FX_ENOMEM: allocation failed or a size overflows."""


class RangeError(FlexpointError, ValueError):
    """FX_ERANGE: a value is outside its allowed range (exponent window, label, index)."""


class FlexpointIOError(FlexpointError, OSError):
    """FX_EIO: a file could not be read or written."""

    def __str__(self) -> str:  # OSError would otherwise format its own way
        return FlexpointError.__str__(self)


class CorruptError(FlexpointError, ValueError):
    """FX_ECORRUPT: a file or buffer has bad contents (magic, size, checksum)."""


class DeviceError(FlexpointError, RuntimeError):
    """FX_EDEVICE: a GPU call failed or no device exists."""


class UnknownNameError(FlexpointError, LookupError):
    """FX_ENAME: unknown preset, statistic, backend or tensor name."""


class StateError(FlexpointError, RuntimeError):
    """FX_ESTATE: the operation is not valid in the object's current state."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """FX_EINVAL, raised by the binding: a value of the wrong type for its parameter (a float,
    str, None or bool where an integer is expected, a non-str name, a float label array)."""

    def __init__(self, message: str, status: Optional[int] = -1) -> None:
        super().__init__(message, status)


class ArgumentRangeError(InvalidArgumentError, RangeError, OverflowError):
    """FX_ERANGE, raised by the binding: an integer the parameter's C type cannot hold (an
    ``int`` outside [-2**31, 2**31-1], a negative or too large uint64 seed, an int64 label
    beyond int32, a negative dimension), which ctypes would otherwise wrap silently."""

    def __init__(self, message: str, status: Optional[int] = -6) -> None:
        super().__init__(message, status)


_CLASSES: Dict[int, Type[FlexpointError]] = {
    -1: InvalidArgumentError, -2: ShapeError, -3: FormatError, -4: UnsupportedError,
    -5: OutOfMemoryError, -6: RangeError, -7: FlexpointIOError, -8: CorruptError,
    -9: DeviceError, -10: UnknownNameError, -11: StateError,
}


def error_class(status: Optional[int]) -> Type[FlexpointError]:
    """The exception class for a status code (FlexpointError for unknown codes)."""
    return _CLASSES.get(status, FlexpointError) if status is not None else FlexpointError


def make_error(status: Optional[int], message: str) -> FlexpointError:
    """Build the exception for a status code and message."""
    cls = error_class(status)
    if cls is FlexpointIOError:
        err = cls(message, status)
        err.args = (message,)
        return err
    return cls(message, status)


def _last_message(what: str) -> str:
    from ._lib import lib
    raw = lib().flexpoint_last_error()
    msg = raw.decode("utf-8", "replace") if raw else ""
    return msg or f"{what} failed"


def check(status: int, what: str = "flexpoint") -> int:
    """Return `status` if it is >= 0, else raise the matching exception with the library's
    message (``what`` names the call when the library left no message)."""
    if status >= 0:
        return status
    raise make_error(status, _last_message(what))


def raise_last(status: Optional[int], what: str) -> None:
    """Raise for a constructor that returned NULL. Those return no status code, only the
    message, so the caller passes the code the failure must mean (None when it cannot know)."""
    raise make_error(status, _last_message(what))
