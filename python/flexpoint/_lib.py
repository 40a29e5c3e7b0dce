"""Finding and loading libflexpoint and libflexpoint_train, and the ctypes prototypes of their C API.

The binding uses ctypes in ABI mode: nothing is compiled when the package is installed, and the
prototypes below mirror the public headers (include/flexpoint*.h) by hand. The C API was designed
for this: every object is an opaque pointer, shapes are int64 arrays, enums travel as int, and
structs are only ever passed by pointer.

The C library is two shared libraries: libflexpoint (tensors, formats, ops, backends) and
libflexpoint_train (data sets, models, the trainer), which depends on libflexpoint. The binding
loads both, from one folder, so that the pair always comes from the same build. Where they come
from, in this order:

1. next to this package (a wheel that bundles ``libflexpoint.so`` and ``libflexpoint_train.so``);
2. the ``FLEXPOINT_LIBRARY`` environment variable: the path of either library (for example
   ``build/release/libflexpoint.so``) or of the folder that holds them;
3. the installed prefix: ``ctypes.util.find_library("flexpoint")``, then the usual lib folders.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
import threading
from ctypes import (POINTER, c_char_p, c_double, c_float, c_int, c_int32, c_int64, c_size_t,
                    c_uint64, c_void_p)
from typing import Dict, List, Optional

from ._structs import (AutoflexConfigC, EpochMetricsC, LayerProfileC, LossScalerC,
                       TraceRecordC, TrainConfigC, TrainHealthC, TrainProfileC)

__all__ = ["lib", "library_path", "LibraryNotFoundError"]

ENV_VAR = "FLEXPOINT_LIBRARY"
_NAMES = ("libflexpoint.so", "libflexpoint.dylib", "flexpoint.dll")
# the training library's name for each of _NAMES' prefixes (same folder, same suffix)
_TRAIN_OF = (("libflexpoint_train", "libflexpoint"), ("flexpoint_train", "flexpoint"))


class LibraryNotFoundError(ImportError):
    """The shared libraries libflexpoint and libflexpoint_train could not be found or loaded."""


_p = c_void_p  # opaque tensor_t*, fx_dataset*, fx_trainer*
_i64p = POINTER(c_int64)
_i32p = POINTER(c_int32)
_fp = POINTER(c_float)
_dp = POINTER(c_double)
_ip = POINTER(c_int)

# name: (restype, argtypes). Kept in the order of the headers so a reader can compare them.
_PROTOTYPES: Dict[str, tuple] = {
    # flexpoint.h: status, version
    "flexpoint_status_str": (c_char_p, [c_int]),
    "flexpoint_last_error": (c_char_p, []),
    "flexpoint_last_status": (c_int, []),
    "flexpoint_clear_error": (None, []),
    "flexpoint_version": (c_char_p, []),
    # formats
    "fmt_name": (c_char_p, [c_int]),
    "fmt_from_name": (c_int, [c_char_p]),
    "fmt_elem_size": (c_size_t, [c_int]),
    "fmt_is_shared_exponent": (c_int, [c_int]),
    # tensors
    "tensor_new": (_p, [c_int, c_int, _i64p]),
    "tensor_free": (None, [_p]),
    "tensor_numel": (c_int64, [_p]),
    "tensor_ndim": (c_int, [_p]),
    "tensor_shape": (_i64p, [_p]),
    "tensor_strides": (_i64p, [_p]),
    "tensor_fmt": (c_int, [_p]),
    "tensor_is_contiguous": (c_int, [_p]),
    "tensor_from_f32": (c_int, [_p, _fp]),
    "tensor_to_f32": (c_int, [_p, _fp]),
    "tensor_get_raw": (c_int, [_p, c_void_p]),
    "tensor_set_raw": (c_int, [_p, c_void_p]),
    "tensor_data": (c_void_p, [_p]),
    "tensor_view_reshape": (_p, [_p, c_int, _i64p]),
    "tensor_view_transpose": (_p, [_p, c_int, c_int]),
    "tensor_view_slice": (_p, [_p, c_int, c_int64, c_int64, c_int64]),
    # shared exponent
    "tensor_exp": (c_int, [_p]),
    "tensor_get_exp": (c_int, [_p, _ip]),
    "tensor_set_exp": (c_int, [_p, c_int]),
    "tensor_set_exp_window": (c_int, [_p, c_int]),
    "tensor_exp_window": (c_int, [_p, _ip, _ip]),
    "tensor_set_rounding": (c_int, [_p, c_int, c_uint64]),
    "tensor_stat": (c_int, [_p, c_char_p, _dp]),
    # Autoflex
    "fx_autoflex_preset": (c_int, [c_char_p, POINTER(AutoflexConfigC)]),
    "tensor_set_autoflex": (c_int, [_p, c_char_p]),
    "tensor_set_autoflex_config": (c_int, [_p, POINTER(AutoflexConfigC)]),
    "tensor_get_autoflex_config": (c_int, [_p, POINTER(AutoflexConfigC)]),
    "tensor_trace_enable": (c_int, [_p, c_int]),
    "tensor_trace_len": (c_int64, [_p]),
    "tensor_trace_get": (c_int, [_p, c_int64, POINTER(TraceRecordC)]),
    "tensor_trace_write_csv": (c_int, [_p, c_char_p]),
    # ops
    "tensor_add": (c_int, [_p, _p, _p]),
    "tensor_sub": (c_int, [_p, _p, _p]),
    "tensor_mul": (c_int, [_p, _p, _p]),
    "tensor_scale": (c_int, [_p, _p, c_double]),
    "tensor_relu": (c_int, [_p, _p]),
    "tensor_copy": (c_int, [_p, _p]),
    "tensor_sum": (c_int, [_p, _p, c_int]),
    "tensor_matmul": (c_int, [_p, _p, _p]),
    "tensor_unary": (c_int, [_p, _p, c_char_p]),
    "tensor_unary_backward": (c_int, [_p, _p, _p, c_char_p]),
    "tensor_unary_name": (c_char_p, [c_int]),
    "tensor_clamp": (c_int, [_p, _p, c_double, c_double]),
    "tensor_clamp_backward": (c_int, [_p, _p, _p, c_double, c_double]),
    "tensor_pow_scalar": (c_int, [_p, _p, c_double]),
    "tensor_pow_scalar_backward": (c_int, [_p, _p, _p, c_double]),
    # backends and threads
    "flexpoint_backend_count": (c_int, []),
    "flexpoint_backend_name": (c_char_p, [c_int]),
    "flexpoint_backend_available": (c_int, [c_int]),
    "flexpoint_set_backend": (c_int, [c_char_p]),
    "flexpoint_backend": (c_char_p, []),
    "flexpoint_cpu_features": (c_char_p, []),
    "flexpoint_cpu_model": (c_char_p, []),
    "flexpoint_kernel_name": (c_char_p, [c_char_p, c_int]),
    "flexpoint_set_kernel": (c_int, [c_char_p, c_int, c_char_p]),
    "flexpoint_kernel_report": (c_char_p, []),
    "flexpoint_instruction_limits": (c_int, [POINTER(c_double), POINTER(c_double),
                                             POINTER(c_double)]),
    "flexpoint_instruction_limits_report": (c_char_p, []),
    # flexpoint_gemm_i16_stats_t is five int64 fields in order: read as an array of five
    "flexpoint_gemm_i16_stats": (c_int, [_i64p]),
    "flexpoint_set_num_threads": (c_int, [c_int]),
    "flexpoint_num_threads": (c_int, []),
    "flexpoint_gpu_device_count": (c_int, []),
    # flexpoint_gpu.h
    "flexpoint_gpu_built": (c_int, []),
    "flexpoint_gpu_set_device": (c_int, [c_int]),
    "flexpoint_gpu_device": (c_int, []),
    "flexpoint_gpu_device_name": (c_char_p, []),
    "tensor_new_device": (_p, [c_int, c_int, _i64p]),
    "tensor_device": (c_int, [_p]),
    "tensor_to_device": (_p, [_p]),
    "tensor_to_host": (_p, [_p]),
    "flexpoint_gpu_malloc": (c_int, [POINTER(c_void_p), c_size_t]),
    "flexpoint_gpu_free": (c_int, [c_void_p]),
    "flexpoint_gpu_memcpy_to_device": (c_int, [c_void_p, c_void_p, c_size_t]),
    "flexpoint_gpu_memcpy_to_host": (c_int, [c_void_p, c_void_p, c_size_t]),
    "flexpoint_gpu_synchronize": (c_int, []),
    "flexpoint_gpu_release_cache": (c_int, []),
    "flexpoint_gpu_host_waits": (c_int64, []),  # long long: 64 bits on every supported ABI
    # flexpoint_nn.h
    "tensor_conv2d": (c_int, [_p, _p, _p, c_int, c_int, c_int, c_int, c_int, c_int]),
    "tensor_conv2d_bias_relu": (c_int, [_p, _p, _p, _p, c_int, c_int, c_int, c_int, c_int, c_int,
                                        c_int]),
    "tensor_conv2d_backward_input": (c_int, [_p, _p, _p, c_int, c_int, c_int, c_int, c_int,
                                             c_int]),
    "tensor_conv2d_backward_weight": (c_int, [_p, _p, _p, c_int, c_int, c_int, c_int, c_int,
                                              c_int]),
    "tensor_maxpool2d": (c_int, [_p, _i32p, _p, c_int, c_int, c_int, c_int, c_int, c_int]),
    "tensor_maxpool2d_backward": (c_int, [_p, _p, _i32p]),
    "tensor_avgpool2d": (c_int, [_p, _p, c_int, c_int, c_int, c_int, c_int, c_int]),
    "tensor_avgpool2d_backward": (c_int, [_p, _p, c_int, c_int, c_int, c_int, c_int, c_int]),
    "tensor_global_avgpool": (c_int, [_p, _p]),
    "tensor_global_avgpool_backward": (c_int, [_p, _p]),
    "tensor_relu_backward": (c_int, [_p, _p, _p]),
    "tensor_softmax_cross_entropy": (c_int, [_fp, _p, _p, _i32p, c_double]),
    "tensor_batchnorm": (c_int, [_p, _p, _p, _p, _fp, _fp, _fp, _fp, c_double, c_double,
                                 c_int]),
    "tensor_batchnorm_backward": (c_int, [_p, _p, _p, _p, _p, _p, _fp, _fp]),
    "tensor_dropout": (c_int, [_p, _p, c_double, c_uint64, c_uint64]),
    "tensor_dropout_backward": (c_int, [_p, _p, c_double, c_uint64, c_uint64]),
    "tensor_mean": (c_int, [_p, _p, c_int]),
    "fx_sgd_step": (c_int, [_p, _p, _fp, _fp, c_double, c_double, c_double, c_double, c_int,
                            c_uint64, c_uint64]),
    "fx_adam_step": (c_int, [_p, _p, _fp, _fp, _fp, c_double, c_double, c_double, c_double,
                             c_double, c_double, c_int, c_uint64, c_uint64]),
    "fx_loss_scaler_init": (None, [POINTER(LossScalerC), c_int]),
    "fx_loss_scaler_unscale": (c_int, [POINTER(LossScalerC), POINTER(_p), c_int,
                                       POINTER(_fp), _ip]),
    "fx_loss_scaler_update": (c_int, [POINTER(LossScalerC), c_int]),
    # flexpoint_nn.h: transformer ops (flexpoint.transformer)
    "tensor_softmax": (c_int, [_p, _p, c_int]),
    "tensor_log_softmax": (c_int, [_p, _p, c_int]),
    "tensor_softmax_backward": (c_int, [_p, _p, _p, c_int]),
    "tensor_log_softmax_backward": (c_int, [_p, _p, _p, c_int]),
    "tensor_layernorm": (c_int, [_p, _p, _fp, _fp, c_double, _fp, _fp]),
    "tensor_layernorm_backward": (c_int, [_p, _fp, _fp, _p, _p, _fp, c_double]),
    "tensor_bmm": (c_int, [_p, _p, _p, c_int, c_int]),
    "tensor_bmm_backward": (c_int, [_p, _p, _p, _p, _p, c_int, c_int]),
    "tensor_causal_mask": (c_int, [_p, _p, c_double]),
    "tensor_attention_softmax": (c_int, [_p, _p, c_double, c_int]),
    "tensor_attention_softmax_backward": (c_int, [_p, _p, _p, c_double]),
    "tensor_masked_fill": (c_int, [_p, _p, _p, c_double]),
    "tensor_embedding": (c_int, [_p, _p, _i32p, c_int64]),
    "tensor_embedding_backward": (c_int, [_p, _p, _i32p, c_int64]),
    "fx_adamw_step": (c_int, [_p, _p, _fp, _fp, _fp, c_double, c_double, c_double, c_double,
                              c_double, c_double, c_int, c_uint64, c_uint64]),
    "fx_clip_grad_norm": (c_int, [POINTER(_p), c_int, c_double, _dp]),
    # flexpoint_data.h
    "fx_dataset_fashion_mnist": (_p, [c_char_p, c_int]),
    "fx_dataset_cifar10": (_p, [c_char_p, c_int]),
    "fx_dataset_synthetic": (_p, [c_int64, c_int, c_int, c_int, c_int, c_uint64]),
    "fx_dataset_from_arrays": (_p, [c_int64, c_int, c_int, c_int, c_int, _fp, _i32p]),
    "fx_dataset_text": (c_int, [c_char_p, c_int, c_double, POINTER(_p), POINTER(_p)]),
    "fx_dataset_seq_len": (c_int, [_p]),
    "fx_dataset_vocab": (c_int, [_p, c_char_p]),
    "fx_dataset_free": (None, [_p]),
    "fx_dataset_len": (c_int64, [_p]),
    "fx_dataset_channels": (c_int, [_p]),
    "fx_dataset_height": (c_int, [_p]),
    "fx_dataset_width": (c_int, [_p]),
    "fx_dataset_classes": (c_int, [_p]),
    "fx_dataset_images": (c_void_p, [_p]),
    "fx_dataset_labels": (c_void_p, [_p]),
    "fx_dataset_source": (c_char_p, [_p]),
    "fx_dataset_batch": (c_int, [_p, _i64p, c_int64, _fp, _i32p]),
    "fx_dataset_pad": (_p, [_p, c_int]),
    "fx_dataset_subset": (_p, [_p, c_int64, c_int64]),
    "fx_dataset_channel_stats": (c_int, [_p, _dp, _dp]),
    "fx_dataset_normalize": (c_int, [_p, _dp, _dp]),
    "fx_dataset_class_counts": (c_int, [_p, _i64p]),
    # flexpoint_train.h
    "fx_train_config_default": (None, [POINTER(TrainConfigC)]),
    "fx_trainer_new": (_p, [POINTER(TrainConfigC), _p, _p]),
    "fx_trainer_free": (None, [_p]),
    "fx_trainer_step": (c_int, [_p, _fp]),
    "fx_trainer_epoch": (c_int, [_p, POINTER(EpochMetricsC)]),
    "fx_trainer_evaluate": (c_int, [_p, _p, _dp, _dp]),
    "fx_trainer_evaluate_as": (c_int, [_p, c_int, c_char_p, c_char_p, _p, _dp, _dp]),
    "fx_trainer_cast_seconds": (c_double, [_p]),
    "fx_trainer_cast_count": (c_int, [_p]),
    "fx_trainer_global_step": (c_int64, [_p]),
    "fx_trainer_epoch_index": (c_int, [_p]),
    "fx_trainer_loss_scaler": (POINTER(LossScalerC), [_p]),
    "fx_trainer_tensor_count": (c_int, [_p]),
    "fx_trainer_tensor_name": (c_char_p, [_p, c_int]),
    "fx_trainer_tensor": (_p, [_p, c_int]),
    "fx_trainer_tensor_find": (c_int, [_p, c_char_p]),
    "fx_trainer_param_count": (c_int64, [_p]),
    "fx_trainer_get_params": (c_int, [_p, _fp]),
    "fx_trainer_save": (c_int, [_p, c_char_p]),
    "fx_trainer_load": (c_int, [_p, c_char_p]),
    "fx_checkpoint_config": (c_int, [c_char_p, POINTER(TrainConfigC)]),
    "fx_trainer_copy_weights": (c_int, [_p, _p]),
    "fx_trainer_export_weights": (c_int, [_p, c_char_p]),
    "fx_trainer_import_weights": (c_int, [_p, c_char_p]),
    "fx_model_check": (c_int, [c_char_p]),
    "fx_trainer_profile_enable": (c_int, [_p, c_int]),
    "fx_trainer_profile": (c_int, [_p, POINTER(TrainProfileC)]),
    "fx_trainer_layer_count": (c_int, [_p]),
    "fx_trainer_layer_profile": (c_int, [_p, c_int, POINTER(LayerProfileC)]),
    "fx_trainer_health": (c_int, [_p, POINTER(TrainHealthC)]),
}


class _Lib:
    """The loaded library: one attribute per C function that the library exports.

    A function named in the headers but missing from the loaded library (an older build) raises
    :class:`flexpoint.UnsupportedError` when it is used, instead of failing at import.
    """

    def __init__(self, cdlls: List[ctypes.CDLL], paths: List[str]) -> None:
        # cdlls: libflexpoint, then libflexpoint_train; a name is looked up in each in turn
        self._cdlls = cdlls
        self.path = paths[0]
        self.train_path = paths[1]
        self.missing: List[str] = []
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = None
            for cdll in cdlls:
                try:
                    fn = getattr(cdll, name)
                    break
                except AttributeError:
                    continue
            if fn is None:
                self.missing.append(name)
                continue
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)

    def has(self, name: str) -> bool:
        """True if the loaded library exports the function `name`."""
        return name in self.__dict__

    def __getattr__(self, name: str):
        # Only reached for names that were not set in __init__.
        if name in _PROTOTYPES:
            from .errors import UnsupportedError
            raise UnsupportedError(
                f"{name}: not exported by {self.path} (a library built before this function "
                "existed); rebuild libflexpoint", status=-4)
        raise AttributeError(name)


def _bundled_candidates() -> List[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    found: List[str] = []
    for d in (here, os.path.join(here, "lib")):
        for name in _NAMES:
            found += sorted(glob.glob(os.path.join(d, name + "*")))
    return found


def _prefix_candidates() -> List[str]:
    found: List[str] = []
    name = ctypes.util.find_library("flexpoint")
    if name:
        found.append(name)
    dirs = [os.path.join(sys.prefix, "lib"), os.path.join(sys.prefix, "lib64"),
            "/usr/local/lib", "/usr/local/lib64", "/usr/lib", "/usr/lib64",
            "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/opt/homebrew/lib"]
    for d in dirs:
        for name in _NAMES:
            for p in sorted(glob.glob(os.path.join(d, name + "*"))):
                if p not in found:
                    found.append(p)
    return found


def _pair(path: str) -> Optional[tuple]:
    """(libflexpoint, libflexpoint_train) for a candidate: a folder, either library's file, or
    a bare name that the dynamic loader resolves (find_library's "libflexpoint.so.0"). The
    training library is the core's name with "_train" after "flexpoint", in the same folder
    (libflexpoint_train.so there for a file of another name). None for a folder holding
    neither."""
    if os.path.isdir(path):
        for name in _NAMES:
            core = os.path.join(path, name)
            train_name = name.replace("flexpoint", "flexpoint_train", 1)
            if os.path.exists(core) or os.path.exists(os.path.join(path, train_name)):
                return core, os.path.join(path, train_name)
        return None
    folder, base = os.path.split(path)
    for train_prefix, core_prefix in _TRAIN_OF:
        if base.startswith(train_prefix):
            return os.path.join(folder, core_prefix + base[len(train_prefix):]), path
    for train_prefix, core_prefix in _TRAIN_OF:
        if base.startswith(core_prefix):
            return path, os.path.join(folder, train_prefix + base[len(core_prefix):])
    return path, os.path.join(folder, "libflexpoint_train.so")


def _load() -> _Lib:
    tried: List[str] = []
    candidates = _bundled_candidates()
    env = os.environ.get(ENV_VAR, "")
    if env:
        if not os.path.exists(env):
            raise LibraryNotFoundError(
                f"{ENV_VAR}={env!r} does not exist; point it at libflexpoint.so from the CMake "
                "build (build/release/libflexpoint.so, with libflexpoint_train.so beside it), "
                "or at that folder, or unset it")
        candidates.append(env)
    candidates += _prefix_candidates()
    for path in candidates:
        pair = _pair(path)
        if pair is None:
            tried.append(f"{path}: neither libflexpoint nor libflexpoint_train")
            continue
        # libflexpoint first: libflexpoint_train's dependency on it (by soname) then resolves
        # to this very file rather than to another copy on the loader's search path
        cdlls = []
        for p in pair:
            try:
                cdlls.append(ctypes.CDLL(p))
            except OSError as e:
                tried.append(f"{p}: {e}")
                break
        if len(cdlls) == 2:
            return _Lib(cdlls, [getattr(c, "_name", p) for c, p in zip(cdlls, pair)])
    raise LibraryNotFoundError(
        "libflexpoint and libflexpoint_train were not found. Build them with CMake "
        "(cmake -S . -B build/release && cmake --build build/release) and either install them "
        f"(cmake --install build/release) or set {ENV_VAR} to the path of libflexpoint.so "
        "(libflexpoint_train.so must be in the same folder)." +
        ("\nTried:\n  " + "\n  ".join(tried) if tried else ""))


_LIB: Optional[_Lib] = None
_LOCK = threading.Lock()


def lib() -> _Lib:
    """The loaded library (loaded on first use)."""
    global _LIB
    if _LIB is None:
        with _LOCK:
            if _LIB is None:
                _LIB = _load()
    return _LIB


def library_path() -> str:
    """Path of the loaded libflexpoint (libflexpoint_train is beside it: lib().train_path)."""
    return lib().path


# flexpoint.h: the public scalar conversions (flexpoint.convert). Added to the table before the
# library is loaded (lib() reads it on first use).
_PROTOTYPES.update({
    "fx_f32_to_fp16": (ctypes.c_uint16, [c_float]),
    "fx_fp16_to_f32": (c_float, [ctypes.c_uint16]),
    "fx_f32_to_bf16": (ctypes.c_uint16, [c_float]),
    "fx_f32_to_bf16_trunc": (ctypes.c_uint16, [c_float]),
    "fx_bf16_to_f32": (c_float, [ctypes.c_uint16]),
    "fx_f64_to_fp16": (ctypes.c_uint16, [c_double]),
    "fx_f64_to_bf16": (ctypes.c_uint16, [c_double]),
})


# flexpoint_model.h: model definitions (flexpoint.model). Added to the table before the library
# is loaded (lib() reads it on first use).
_PROTOTYPES.update({
    "fx_model_def_new": (c_int, [c_char_p, c_int, _i64p, POINTER(_p)]),
    "fx_model_def_free": (None, [_p]),
    "fx_model_def_layer": (c_int, [_p, c_char_p, c_char_p, c_char_p]),
    "fx_model_def_parse": (c_int, [c_char_p, c_size_t, c_char_p, POINTER(_p)]),
    "fx_model_def_load": (c_int, [c_char_p, POINTER(_p)]),
    "fx_model_def_builtin": (c_int, [c_char_p, c_int, c_int, c_int, c_int, POINTER(_p)]),
    "fx_model_def_layer_count": (c_int, [_p]),
    "fx_model_def_shape": (c_int, [_p, c_char_p, _ip, _i64p]),
    "fx_model_def_to_text": (c_int, [_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "fx_model_def_identity": (c_int, [_p, c_char_p]),
    "fx_trainer_new_model": (_p, [POINTER(TrainConfigC), _p, _p, _p]),
})
