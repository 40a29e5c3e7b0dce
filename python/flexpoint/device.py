"""CUDA devices from Python: names for where a tensor lives, and the device API of
include/flexpoint_gpu.h.

A place is written as in PyTorch: ``"cpu"`` (the host), ``"cuda"`` (device 0) or ``"cuda:N"``,
or as an integer ordinal (-1 is the host). Tensors move with :meth:`Tensor.to`; ops on tensors
that all live on one device run there (see the README's GPU section for what the device runs
and what is bit-identical to the host). Without CUDA in the library, or without a device, every
call that needs one raises :class:`DeviceError` with the library's message.
"""
from __future__ import annotations

from typing import Union

from ._lib import lib
from .errors import InvalidArgumentError, check

__all__ = ["DeviceLike", "device_ordinal", "device_name", "built", "device_count",
           "current_device", "set_device", "current_device_name", "synchronize",
           "release_cache", "host_waits"]

DeviceLike = Union[str, int]


def device_ordinal(value: DeviceLike, what: str = "device") -> int:
    """The ordinal of a place: -1 for "cpu", N for "cuda:N" (0 for "cuda") or an integer."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidArgumentError(f"{what}={value!r}: expected 'cpu', 'cuda', 'cuda:N' or an "
                                   "integer", -1)
    if isinstance(value, int):
        ordinal = value
    elif value == "cpu":
        ordinal = -1
    elif value == "cuda":
        ordinal = 0
    elif value.startswith("cuda:") and value[5:].isdigit():
        ordinal = int(value[5:])
    else:
        raise InvalidArgumentError(f"{what}={value!r}: expected 'cpu', 'cuda', 'cuda:N' or an "
                                   "integer", -1)
    if ordinal < -1 or ordinal > 2**31 - 1:
        raise InvalidArgumentError(f"{what}={value!r}: the ordinal must be -1 (the host) or a "
                                   "CUDA device number >= 0", -1)
    return ordinal


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
    """Select the CUDA device of this thread ("cuda:N" or N)."""
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
