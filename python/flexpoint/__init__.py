"""flexpoint: 16-bit training number formats (fp16, bf16, flex16+5, DFP-16, fp32) from Python.

A ctypes binding of the libflexpoint C library. Typical use::

    import numpy as np
    import flexpoint as fx

    a = fx.from_numpy(np.random.randn(64, 32), fmt="flex16_5")
    b = fx.from_numpy(np.random.randn(32, 16), fmt="flex16_5")
    c = a @ b                      # integer GEMM, one rounding, in a's format
    print(c.exp, c.stats["saturated"], c.numpy()[0, :4])

See python/README.md for a tutorial, :mod:`flexpoint.ops` for the op set,
:mod:`flexpoint.data` and :mod:`flexpoint.train` for data sets and training.
"""
from __future__ import annotations

import ctypes
from typing import List

from . import data, device, ops, optim, train, weights
from ._check import c_int, c_str
from ._lib import LibraryNotFoundError, lib, library_path
from .autoflex import PRESETS, AutoflexConfig, TraceRecord, autoflex_preset, trace_to_arrays
from .data import Dataset
from .device import DeviceBuffer
from .errors import (ArgumentRangeError, ArgumentTypeError, CorruptError, DeviceError,
                     FlexpointError, FlexpointIOError, FormatError, InvalidArgumentError,
                     OutOfMemoryError, RangeError, ShapeError, StateError, UnknownNameError,
                     UnsupportedError, check)
from .formats import (FORMATS, Format, elem_size, fmt_id, fmt_name, is_shared_exponent,
                      raw_dtype)
from .ops import (AXIS_ALL, add, avgpool2d, avgpool2d_backward, batchnorm, batchnorm_backward,
                  conv2d, conv2d_backward_input, conv2d_backward_weight, conv2d_bias_relu,
                  copy, dropout,
                  dropout_backward, global_avgpool, global_avgpool_backward, matmul, maxpool2d,
                  maxpool2d_backward, mean, mul, relu, relu_backward, scale,
                  softmax_cross_entropy, sub)
from .ops import sum  # noqa: A004 - mirrors tensor_sum; shadows the builtin only as fx.sum
from .ops import clamp, clamp_backward, unary, unary_backward, unary_names
from .ops import pow, pow_backward  # noqa: A004 - mirrors tensor_pow_scalar; only as fx.pow
from .optim import SGD, Adam, LossScaler, adam_step, sgd_step
from . import convert, transformer
from .transformer import (adamw_step, attention_softmax, attention_softmax_backward, bmm,
                          bmm_backward, causal_mask,
                          clip_grad_norm, embedding,
                          embedding_backward, layernorm, layernorm_backward, log_softmax,
                          log_softmax_backward, masked_fill, softmax, softmax_backward)
from .tensor import MAX_DIMS, STAT_NAMES, Tensor, from_numpy, from_raw, tensor, zeros
from .train import EpochMetrics, TrainConfig, Trainer, checkpoint_config
from . import model
from .model import Model

__version__ = "0.2.0"


def version() -> str:
    """Version of the loaded C library ("MAJOR.MINOR.PATCH")."""
    return lib().flexpoint_version().decode()


def backends() -> List[str]:
    """Names of the CPU backends compiled into the library ("scalar", "avx2", "avx512")."""
    L = lib()
    return [L.flexpoint_backend_name(i).decode() for i in range(L.flexpoint_backend_count())]


def available_backends() -> List[str]:
    """The compiled-in backends this CPU can run."""
    L = lib()
    return [L.flexpoint_backend_name(i).decode() for i in range(L.flexpoint_backend_count())
            if L.flexpoint_backend_available(i)]


def backend() -> str:
    """Name of the backend in use."""
    return lib().flexpoint_backend().decode()


def set_backend(name: str) -> None:
    """Select a backend by name (UnknownNameError, UnsupportedError if the CPU cannot run it,
    ArgumentTypeError for a non-str, InvalidArgumentError for a name containing NUL)."""
    check(lib().flexpoint_set_backend(c_str(name, "name")), "flexpoint_set_backend")


def cpu_features() -> List[str]:
    """CPU features the library detected ("avx2", "fma", "f16c", "avx512f", ...)."""
    return lib().flexpoint_cpu_features().decode().split()


def kernel_info() -> dict:
    """The CPU, its measured instruction limits and the kernel the active backend runs per op
    and format.

    Returns a dict: ``cpu`` ("GenuineIntel family 6 model 207"), ``features`` (as
    cpu_features()), ``backend``, ``kernels`` ({"matmul/bf16": "avx512-widen",
    "matmul/flex16_5": "avx2-i16", ...}, one key per format; a forced int16 kernel shows as
    "avx2-i16-split" and so on), ``report`` (flexpoint_kernel_report(): also what chose the bf16
    route, the per-CPU table, FLEXPOINT_KERNEL_BF16_GEMM or set_kernel(), and how the int16
    matmul picks its kernel per tile and what chose that, FLEXPOINT_KERNEL_I16_GEMM or
    set_kernel()), ``limits`` ({"fp32_fma": GFLOP/s, "i16_pairs": GOP/s, "bf16_pairs": GFLOP/s}
    of one thread, 0.0 where the CPU lacks the instruction) and ``limits_report`` (the same
    with the instructions measured), as flexpoint-info prints them
    (flexpoint_instruction_limits: measured once per process, about 0.1-0.2 s at the first
    call). Without that function in the loaded library the two limit keys are None."""
    L = lib()
    kernels = {}
    for f in FORMATS:
        name = L.flexpoint_kernel_name(b"matmul", fmt_id(f))
        kernels["matmul/" + f] = name.decode() if name is not None else None
    limits = limits_report = None
    if L.has("flexpoint_instruction_limits"):
        vals = [ctypes.c_double(0.0) for _ in range(3)]
        # FX_EUNSUPPORTED only on a non-x86 build, where every limit stays 0.0
        L.flexpoint_instruction_limits(*(ctypes.byref(v) for v in vals))
        limits = {"fp32_fma": vals[0].value, "i16_pairs": vals[1].value,
                  "bf16_pairs": vals[2].value}
        limits_report = L.flexpoint_instruction_limits_report().decode()
    return {"cpu": L.flexpoint_cpu_model().decode(), "features": cpu_features(),
            "backend": backend(), "kernels": kernels,
            "report": L.flexpoint_kernel_report().decode(), "limits": limits,
            "limits_report": limits_report}


def gemm_i16_stats() -> dict:
    """The exact int16 GEMM's work since the process started (flexpoint_gemm_i16_stats): FLEX16_5
    and DFP16 products on the CPU's register-tile kernels, counted in units of one register tile
    and one K block. Keys: ``fast_tiles`` and ``anydata_tiles`` (units on the fast kernel and
    on an any-data kernel, split or wrap), ``fast_pairs`` and ``anydata_pairs`` (pairs of k
    they ran), ``fast_chains`` (int32 chains of the fast units: fast_pairs / fast_chains pairs
    between folds). Process-wide and cumulative: take the difference of two readings around
    the work of interest. The results are the same bits whichever kernel ran."""
    vals = (ctypes.c_int64 * 5)()
    check(lib().flexpoint_gemm_i16_stats(vals), "flexpoint_gemm_i16_stats")
    keys = ("fast_tiles", "anydata_tiles", "fast_pairs", "anydata_pairs", "fast_chains")
    return {k: int(v) for k, v in zip(keys, vals)}


def set_kernel(op: str, fmt, name: str) -> None:
    """Force the kernel of an op and format, e.g. set_kernel("matmul", "bf16", "widen"),
    "dpbf16" or "amx", or the int16 matmul of flex16_5 and dfp16 (one setting for both) with "auto",
    "split", "wrap" or "fast" (flexpoint_set_kernel: UnknownNameError for an unknown op or
    kernel, UnsupportedError for a kernel this CPU cannot run, such as "wrap" without
    AVX512_VNNI; nothing changes then)."""
    check(lib().flexpoint_set_kernel(c_str(op, "op"), fmt_id(fmt), c_str(name, "name")),
          "flexpoint_set_kernel")


def set_num_threads(n: int) -> int:
    """Threads used by ops (n <= 0 restores the default); returns the previous setting.
    Raises ArgumentTypeError for a non-integer, ArgumentRangeError for one beyond the C int
    range (2**32 + 4 is refused, not taken as 4)."""
    return int(lib().flexpoint_set_num_threads(c_int(n, "n")))


def num_threads() -> int:
    """Threads used by ops."""
    return int(lib().flexpoint_num_threads())


# The device API also lives in flexpoint.device; these names predate it.
gpu_device_count = device.device_count
gpu_synchronize = device.synchronize
gpu_release_cache = device.release_cache
gpu_host_waits = device.host_waits


__all__ = [
    # tensors
    "Tensor", "tensor", "zeros", "from_numpy", "from_raw", "STAT_NAMES", "MAX_DIMS",
    # formats
    "Format", "FORMATS", "fmt_id", "fmt_name", "is_shared_exponent", "raw_dtype", "elem_size",
    # Autoflex
    "AutoflexConfig", "TraceRecord", "PRESETS", "autoflex_preset", "trace_to_arrays",
    # ops
    "add", "sub", "mul", "scale", "relu", "relu_backward", "copy", "sum", "mean", "matmul",
    "conv2d", "conv2d_bias_relu", "conv2d_backward_input", "conv2d_backward_weight", "maxpool2d",
    "maxpool2d_backward", "avgpool2d", "avgpool2d_backward", "global_avgpool",
    "global_avgpool_backward", "softmax_cross_entropy", "batchnorm", "batchnorm_backward",
    "dropout", "dropout_backward", "AXIS_ALL",
    "unary", "unary_backward", "unary_names", "clamp", "clamp_backward", "pow", "pow_backward",
    # optimisers
    "sgd_step", "adam_step", "SGD", "Adam", "LossScaler",
    # transformer ops
    "softmax", "log_softmax", "softmax_backward", "log_softmax_backward", "layernorm",
    "layernorm_backward", "bmm", "bmm_backward", "causal_mask", "attention_softmax",
    "attention_softmax_backward", "masked_fill", "embedding",
    "embedding_backward", "adamw_step", "clip_grad_norm", "transformer", "convert",
    # data and training
    "Dataset", "TrainConfig", "EpochMetrics", "Trainer", "checkpoint_config", "data", "device",
    "DeviceBuffer", "ops", "optim", "train", "weights",
    # errors
    "FlexpointError", "InvalidArgumentError", "ShapeError", "FormatError", "UnsupportedError",
    "OutOfMemoryError", "RangeError", "FlexpointIOError", "CorruptError", "DeviceError",
    "UnknownNameError", "StateError", "ArgumentTypeError", "ArgumentRangeError",
    "LibraryNotFoundError",
    # library
    "version", "backends", "available_backends", "backend", "set_backend", "cpu_features",
    "kernel_info", "set_kernel", "gemm_i16_stats",
    "set_num_threads", "num_threads", "gpu_device_count", "gpu_synchronize", "gpu_release_cache",
    "gpu_host_waits", "library_path",
]
