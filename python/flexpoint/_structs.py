"""ctypes mirrors of the C structs of the public headers, field for field.

Each Structure lists the fields in the order and with the types of its C declaration; the test
suite parses the headers and compares (python/tests/test_library.py), and, where a C compiler is
present, also compares every offset and the size with the C compiler's. Structs are only ever
passed to the library by pointer.

Assigning a field checks the value first (:func:`flexpoint._check.c_field`): a plain ctypes
Structure keeps the low bits of an integer that does not fit the field, cuts a ``char[N]`` at
its first NUL and stores N bytes without a terminator. A refused assignment raises
ArgumentTypeError, ArgumentRangeError or InvalidArgumentError and leaves the field unchanged.
"""
from __future__ import annotations

from ctypes import Structure, c_char, c_char_p, c_double, c_int, c_int64, c_uint64
from typing import Any

from ._check import c_field


class _CheckedStructure(Structure):
    """A Structure whose field assignments (keyword arguments of the constructor included) are
    range- and type-checked; `_label_` names the struct in the messages."""
    _label_ = "struct"

    def __setattr__(self, name: str, value: Any) -> None:
        for fname, ftype in type(self)._fields_:
            if fname == name:
                value = c_field(value, f"{self._label_}.{name}", ftype)
                break
        super().__setattr__(name, value)


class AutoflexConfigC(_CheckedStructure):
    """struct fx_autoflex_config (flexpoint.h)."""
    _label_ = "AutoflexConfig"
    _fields_ = [
        ("managed", c_int),
        ("history_len", c_int),
        ("beta", c_double),
        ("gamma", c_double),
        ("alpha", c_double),
        ("init_mode", c_int),
        ("stat_mode", c_int),
        ("overflow_mode", c_int),
        ("init_exp", c_int),
        ("probe_tries", c_int),
    ]


class TraceRecordC(_CheckedStructure):
    """struct fx_trace_record (flexpoint.h)."""
    _label_ = "fx_trace_record"
    _fields_ = [
        ("write", c_int64),
        ("exp", c_int),
        ("clamped", c_int),
        ("overflow", c_int),
        ("recomputed", c_int),
        ("saturated", c_int64),
        ("nonfinite", c_int64),
        ("underflow", c_int64),
        ("true_max", c_double),
        ("stored_max", c_double),
    ]


class LossScalerC(_CheckedStructure):
    """struct fx_loss_scaler (flexpoint_nn.h)."""
    _label_ = "LossScaler"
    _fields_ = [
        ("scale", c_double),
        ("growth_factor", c_double),
        ("backoff_factor", c_double),
        ("growth_interval", c_int64),
        ("good_steps", c_int64),
        ("skipped_steps", c_int64),
        ("enabled", c_int),
    ]


class TrainConfigC(_CheckedStructure):
    """struct fx_train_config (flexpoint_train.h)."""
    _label_ = "TrainConfig"
    _fields_ = [
        ("model", c_char * 16),
        ("fmt", c_int),
        ("master_weights", c_int),
        ("loss_scaling", c_int),
        ("stochastic_rounding", c_int),
        ("autoflex", c_char * 16),
        ("grad_window_lo", c_int),
        ("act_window_lo", c_int),
        ("weight_window_lo", c_int),
        ("batch_size", c_int),
        ("lr", c_double),
        ("momentum", c_double),
        ("weight_decay", c_double),
        ("lr_schedule", c_int),
        ("epochs", c_int),
        ("augment", c_int),
        ("seed", c_uint64),
        ("threads", c_int),
        ("device", c_int),
        ("optimizer", c_int),
        ("adam_beta1", c_double),
        ("adam_beta2", c_double),
        ("adam_eps", c_double),
        ("clip_norm", c_double),
        ("loss_scale_init", c_double),
        ("loss_scale_growth", c_double),
        ("loss_scale_backoff", c_double),
        ("loss_scale_interval", c_int64),
        ("loss_scale_min", c_double),
        ("policy", c_char * 128),
    ]


class EpochMetricsC(_CheckedStructure):
    """struct fx_epoch_metrics (flexpoint_train.h)."""
    _label_ = "fx_epoch_metrics"
    _fields_ = [
        ("epoch", c_int),
        ("train_loss", c_double),
        ("train_accuracy", c_double),
        ("test_loss", c_double),
        ("test_accuracy", c_double),
        ("seconds", c_double),
        ("images_per_second", c_double),
        ("steps", c_int64),
        ("skipped_steps", c_int64),
        ("nonfinite_losses", c_int64),
        ("loss_scale", c_double),
    ]


class TrainProfileC(_CheckedStructure):
    """struct fx_train_profile (flexpoint_train.h)."""
    _label_ = "fx_train_profile"
    _fields_ = [
        ("steps", c_int64),
        ("data_s", c_double),
        ("forward_s", c_double),
        ("loss_s", c_double),
        ("backward_s", c_double),
        ("update_s", c_double),
        ("total_s", c_double),
    ]


class LayerProfileC(Structure):
    """struct fx_layer_profile (flexpoint_train.h); filled by the library only."""
    _fields_ = [
        ("name", c_char_p),
        ("kind", c_char_p),
        ("forward_s", c_double),
        ("backward_s", c_double),
    ]


class TrainHealthC(Structure):
    """struct fx_train_health (flexpoint_train.h); filled by the library only. The arrays have
    FX_TENSOR_CLASSES (3) entries, a macro the header parser of the STRUCTS layout test does not
    read: python/tests/test_train_health.py checks this layout against the compiler."""
    _fields_ = [
        ("measured", c_int),
        ("steps", c_int64),
        ("writes", c_int64 * 3),
        ("written", c_int64 * 3),
        ("saturated", c_int64 * 3),
        ("underflow", c_int64 * 3),
        ("zeroed", c_int64 * 3),
        ("worst_saturated", c_int * 3),
        ("worst_saturated_fraction", c_double * 3),
        ("worst_zeroed", c_int * 3),
        ("worst_zeroed_fraction", c_double * 3),
        ("params", c_int64),
        ("nonfinite_weights", c_int64),
    ]


#: C struct name -> (header file, ctypes mirror); used by the layout tests.
STRUCTS = {
    "fx_autoflex_config": ("flexpoint.h", AutoflexConfigC),
    "fx_trace_record": ("flexpoint.h", TraceRecordC),
    "fx_loss_scaler": ("flexpoint_nn.h", LossScalerC),
    "fx_train_config": ("flexpoint_train.h", TrainConfigC),
    "fx_epoch_metrics": ("flexpoint_train.h", EpochMetricsC),
    "fx_train_profile": ("flexpoint_train.h", TrainProfileC),
    "fx_layer_profile": ("flexpoint_train.h", LayerProfileC),
}
