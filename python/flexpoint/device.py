"""CUDA devices from Python: names for where a tensor lives, and the device API of
include/flexpoint_gpu.h.

A place is written as in PyTorch: ``"cpu"`` (the host), ``"cuda"`` (device 0) or ``"cuda:N"``,
or as an integer ordinal (-1 is the host). Tensors move with :meth:`Tensor.to`; ops on tensors
that all live on one device run there (see the README's GPU section for what the device runs
and what is bit-identical to the host). Without CUDA in the library, or without a device, every
call that needs one raises :class:`DeviceError` with the library's message.
"""
from __future__ import annotations

import ctypes
from ctypes import c_void_p
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from ._check import SIZE_MAX, c_int, c_shape, is_scalar
from ._lib import lib
from .errors import (ArgumentTypeError, InvalidArgumentError, OutOfMemoryError, StateError,
                     check)

__all__ = ["DeviceLike", "DeviceBuffer", "device_ordinal", "device_name", "built",
           "device_count", "current_device", "set_device", "current_device_name",
           "synchronize", "release_cache", "host_waits"]

DeviceLike = Union[str, int]


def device_ordinal(value: DeviceLike, what: str = "device") -> int:
    """The ordinal of a place: -1 for "cpu", N for "cuda:N" (0 for "cuda") or an integer.
    Raises ArgumentTypeError for another type (a bool, float or None), InvalidArgumentError for
    another string or a NUL in it, ArgumentRangeError for an ordinal below -1 or beyond the C
    int range (all three are InvalidArgumentErrors)."""
    if not isinstance(value, str):
        if isinstance(value, (bool, np.bool_)) or not is_scalar(value):
            raise ArgumentTypeError(f"{what}={value!r}: expected 'cpu', 'cuda', 'cuda:N' or an "
                                    "integer")
        return c_int(value, what, lo=-1)
    if value == "cpu":
        return -1
    if value == "cuda":
        return 0
    digits = value[5:]
    if value.startswith("cuda:") and digits.isascii() and digits.isdigit():
        return c_int(int(digits), what, lo=-1)
    raise InvalidArgumentError(f"{what}={value!r}: expected 'cpu', 'cuda', 'cuda:N' or an "
                               "integer", -1)


def device_name(ordinal: int) -> str:
    """The place's name for an ordinal: "cpu" or "cuda:N"."""
    return "cpu" if ordinal < 0 else f"cuda:{ordinal}"


def built() -> bool:
    """True if this build of the library contains the CUDA backend."""
    return bool(lib().flexpoint_gpu_built())


def device_count() -> int:
    """Number of CUDA devices visible to the library (0 without CUDA or without a device)."""
    return int(lib().flexpoint_gpu_device_count())


def current_device() -> int:
    """The CUDA device this thread uses for new device tensors; DeviceError without one."""
    return check(lib().flexpoint_gpu_device(), "flexpoint_gpu_device")


def set_device(device: DeviceLike) -> None:
    """Select the CUDA device of this thread ("cuda:N" or N). Raises as
    :func:`device_ordinal`, InvalidArgumentError for "cpu", DeviceError without that device."""
    n = device_ordinal(device)
    if n < 0:
        raise InvalidArgumentError(f"device={device!r}: set_device takes a CUDA device", -1)
    check(lib().flexpoint_gpu_set_device(n), "flexpoint_gpu_set_device")


def current_device_name() -> str:
    """The name of this thread's CUDA device (e.g. "NVIDIA H100 80GB HBM3")."""
    L = lib()
    L.flexpoint_clear_error()
    name = L.flexpoint_gpu_device_name()
    if not name:
        check(L.flexpoint_last_status() or -9, "flexpoint_gpu_device_name")  # FX_EDEVICE
    return name.decode("utf-8", "replace")


def synchronize() -> None:
    """Wait for the device work queued by this thread (device ops are asynchronous);
    DeviceError without a device or when a kernel failed."""
    check(lib().flexpoint_gpu_synchronize(), "flexpoint_gpu_synchronize")


def release_cache() -> None:
    """Give the device memory the library keeps for reuse back to CUDA."""
    check(lib().flexpoint_gpu_release_cache(), "flexpoint_gpu_release_cache")


def host_waits() -> int:
    """How many times the library has waited for a CUDA device in this process (copies
    between host and device, synchronisations, write statistics not yet arrived); 0 without
    CUDA. Take differences around a training step to profile it."""
    return int(lib().flexpoint_gpu_host_waits())


class on_device:
    """Make CUDA device n this thread's device for a block, then restore the previous one (if
    there was none, nothing is restored)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.prev = -1

    def __enter__(self) -> None:
        L = lib()
        prev = L.flexpoint_gpu_device()
        self.prev = prev if prev >= 0 else -1
        L.flexpoint_clear_error()
        check(L.flexpoint_gpu_set_device(self.n), "flexpoint_gpu_set_device")

    def __exit__(self, *exc: Any) -> None:
        if self.prev >= 0 and self.prev != self.n:
            lib().flexpoint_gpu_set_device(self.prev)


class DeviceBuffer:
    """A typed array in CUDA device memory (flexpoint_gpu_malloc: zero-filled, freed with the
    object), for the raw-pointer arguments that device ops take in device memory: the max-pool
    argmax, optimiser state (master weights, momentum, Adam moments) and the loss scaler's
    unscaled outputs. :meth:`numpy` copies it to the host; :meth:`from_numpy` makes one from
    host data. Freeing one waits for the device (flexpoint_gpu_free), so a training loop
    should reuse its buffers (``maxpool2d(..., indices=buf)``, ``LossScaler.unscale(...,
    out=bufs)``) rather than make new ones every step.

    The constructor raises ArgumentTypeError / ArgumentRangeError for a shape that is not
    non-negative integers, OutOfMemoryError when its size in bytes overflows, and DeviceError
    without a device; the shape is checked before any device call."""

    __slots__ = ("_ptr", "shape", "dtype", "device", "__weakref__")

    def __init__(self, shape: Union[int, Sequence[int]], dtype: Any = np.float32,
                 device: DeviceLike = "cuda") -> None:
        self._ptr: Optional[int] = None
        self.shape: Tuple[int, ...] = c_shape(shape, "shape", min_dims=0)
        self.dtype = np.dtype(dtype)
        nbytes = self.nbytes
        if nbytes > SIZE_MAX:
            raise OutOfMemoryError(f"DeviceBuffer{self.shape} of {self.dtype.name}: {nbytes} "
                                   "bytes overflow size_t", -5)
        n = device_ordinal(device, "device")
        if n < 0:
            raise InvalidArgumentError("a DeviceBuffer lives on a CUDA device, not 'cpu'", -1)
        self.device = device_name(n)
        p = c_void_p()
        with on_device(n):  # flexpoint_gpu_malloc uses the thread's device
            check(lib().flexpoint_gpu_malloc(ctypes.byref(p), max(nbytes, 1)),
                  "flexpoint_gpu_malloc")
        self._ptr = p.value

    @classmethod
    def from_numpy(cls, a: Any, dtype: Any = np.float32,
                   device: DeviceLike = "cuda") -> "DeviceBuffer":
        """A device copy of the array a (converted to dtype)."""
        arr = np.ascontiguousarray(a, dtype=dtype)
        buf = cls(arr.shape, arr.dtype, device)
        buf.copy_from(arr)
        return buf

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ptr(self) -> int:
        """The device address, for the library's raw-pointer arguments."""
        if not self._ptr:
            raise StateError("the device buffer was freed", -11)
        return self._ptr

    def copy_from(self, a: Any) -> "DeviceBuffer":
        """Overwrite the contents with the array a (same number of elements)."""
        arr = np.ascontiguousarray(a, dtype=self.dtype)
        if arr.size != self.size:
            raise InvalidArgumentError(f"{arr.size} elements for a device buffer of {self.size}",
                                       -1)
        check(lib().flexpoint_gpu_memcpy_to_device(self.ptr, arr.ctypes.data, arr.nbytes),
              "flexpoint_gpu_memcpy_to_device")
        return self

    def numpy(self) -> np.ndarray:
        """A host copy (waits for the device work that writes the buffer)."""
        out = np.empty(self.shape, dtype=self.dtype)
        check(lib().flexpoint_gpu_memcpy_to_host(out.ctypes.data, self.ptr, out.nbytes),
              "flexpoint_gpu_memcpy_to_host")
        return out

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def __len__(self) -> int:
        return self.shape[0]

    # Copies own their own memory (two owners of one pointer would free it twice); a pickle
    # holds the values and is loaded onto the same device.
    def __copy__(self) -> "DeviceBuffer":
        return DeviceBuffer.from_numpy(self.numpy(), self.dtype, self.device)

    def __deepcopy__(self, memo: Any) -> "DeviceBuffer":
        return self.__copy__()

    def __reduce__(self) -> Any:
        return (DeviceBuffer.from_numpy, (self.numpy(), self.dtype, self.device))

    def __repr__(self) -> str:
        return f"DeviceBuffer(shape={self.shape}, dtype={self.dtype.name}, device={self.device!r})"

    def __del__(self) -> None:
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            try:
                lib().flexpoint_gpu_free(ptr)
            except Exception:  # interpreter shutdown: module globals may already be gone
                pass
