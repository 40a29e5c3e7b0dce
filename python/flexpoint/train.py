"""Training through the C training API (flexpoint_train.h).

:class:`TrainConfig` maps field for field onto ``struct fx_train_config``; a field left as None
keeps the library's default (fx_train_config_default), so the defaults live in one place, the C
library. :class:`Trainer` wraps ``fx_trainer``: steps, epochs, evaluation, the registry of
named tensors (weights, gradients, activations) and checkpoints. Nothing here computes: every
number comes from the library.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import sys
import weakref
from ctypes import POINTER, c_double, c_float
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from ._check import c_bool, c_int, c_int64, c_path, c_str
from ._lib import lib
from ._structs import EpochMetricsC, TrainConfigC, TrainHealthC
from .data import Dataset
from .device import device_ordinal
from .errors import ArgumentTypeError, InvalidArgumentError, StateError, check, raise_last
from .formats import FORMATS, FormatLike, fmt_id, fmt_name
from .optim import LossScaler
from .tensor import Tensor

__all__ = ["TrainConfig", "EpochMetrics", "Trainer", "MODELS", "LR_SCHEDULES", "OPTIMIZERS",
           "TENSOR_CLASSES", "HEALTH_WARN_FRACTION"]

#: The built-in networks of fx_train_config.model. Each heads a family (fx_model_check,
#: docs/training.md): "mlp<W>x<D>", "cnn<C1>-<C2>-<F>", "resnet<6n+2>" and "resnet<6n+2>x<K>",
#: e.g. "mlp512x3", "cnn64-128-256", "resnet110", "resnet56x2".
MODELS = ("mlp", "cnn", "resnet20")
#: Learning-rate schedules (FX_LR_CONSTANT, FX_LR_COSINE, FX_LR_STEP).
LR_SCHEDULES = ("constant", "cosine", "step")
#: Optimisers (FX_OPT_SGD, FX_OPT_ADAM, FX_OPT_ADAMW).
OPTIMIZERS = ("sgd", "adam", "adamw")
#: The tensor classes of :meth:`Trainer.health` (FX_TENSOR_WEIGHTS, _ACTIVATIONS, _GRADIENTS).
TENSOR_CLASSES = ("weights", "activations", "gradients")
#: FX_HEALTH_WARN_FRACTION: the fraction above which :meth:`Trainer.health_warnings` warns.
HEALTH_WARN_FRACTION = 0.01

_fp = POINTER(c_float)


def _encode_name(value: str, field: str, size: int = 16) -> bytes:
    # a char[16] field: at most 15 bytes and no NUL, else the C side would read another name
    return c_str(value, f"TrainConfig.{field}", size)


def _device_ordinal(value: Union[str, int]) -> int:
    """fx_train_config.device of "cpu", "cuda", "cuda:N" or an integer (-1 is the host)."""
    return device_ordinal(value, "TrainConfig.device")


@dataclass
class TrainConfig:
    """Training configuration; None means the library default (shown in brackets).

    model: "mlp" | "cnn" | "resnet20" or a member of their families ("mlp512x3",
    "cnn64-128-256", "resnet110", "resnet56x2"; see MODELS) ["cnn"]; fmt: format of the weights, activations and
    gradients of every GEMM and conv ["fp32"]; master_weights: fp32 master weights [True];
    loss_scaling: None/"auto" (on for fp16 only), True or False ["auto"]; stochastic_rounding of
    weight writes without master weights [False]; autoflex: preset of flex16_5 tensors
    ["published"]; grad/act/weight_window_lo: flex16_5 window starts [-44, -31, -31];
    batch_size [128]; lr [0.02]; momentum [0.9]; weight_decay [0]; lr_schedule: "constant" |
    "cosine" | "step" ["constant"]; epochs: planned epochs, for the schedule [5]; augment: random
    crop and flip [False]; seed: weights, batch order and augmentation [0]; threads: 0 for the
    library default [0]; device: where to train, "cpu" or -1 (the host), "cuda" (device 0),
    "cuda:N" or N (CUDA device N) [-1]; a device the library cannot use makes Trainer raise
    DeviceError. optimizer: "sgd" | "adam" | "adamw" ["sgd"] with adam_beta1 [0.9], adam_beta2
    [0.999], adam_eps [1e-8]; clip_norm: clip the gradients' global L2 norm, 0 off [0];
    loss_scaling also takes "static" (a fixed scale, loss_scale_init); loss_scale_init [65536],
    loss_scale_growth [2], loss_scale_backoff [0.5], loss_scale_interval [2000],
    loss_scale_min: the dynamic scale's floor [0]; policy: a format policy such as
    "bn*=fp32; fc2=fp16; grads=bf16" or "O2" on top of fmt [""] (docs/training.md).

    :meth:`to_c` (called by Trainer and :meth:`resolved`) checks every field before it is
    stored in the C struct, which would otherwise wrap integers silently: ArgumentTypeError for
    a wrong type (a float batch_size, a str lr, a non-bool flag, a non-str model),
    ArgumentRangeError for an integer its C field cannot hold (batch_size=2**32+16 is refused,
    not trained with 16; a seed outside [0, 2**64-1]), InvalidArgumentError for a name longer
    than 15 bytes or containing NUL and for an unknown lr_schedule or loss_scaling string,
    FormatError for an unknown fmt. Values of the right type are then validated by the library
    when the Trainer is built.
    """
    model: Optional[str] = None
    fmt: Optional[FormatLike] = None
    master_weights: Optional[bool] = None
    loss_scaling: Union[None, str, bool, int] = None
    stochastic_rounding: Optional[bool] = None
    autoflex: Optional[str] = None
    grad_window_lo: Optional[int] = None
    act_window_lo: Optional[int] = None
    weight_window_lo: Optional[int] = None
    batch_size: Optional[int] = None
    lr: Optional[float] = None
    momentum: Optional[float] = None
    weight_decay: Optional[float] = None
    lr_schedule: Union[None, str, int] = None
    epochs: Optional[int] = None
    augment: Optional[bool] = None
    seed: Optional[int] = None
    threads: Optional[int] = None
    device: Union[None, str, int] = None
    optimizer: Union[None, str, int] = None
    adam_beta1: Optional[float] = None
    adam_beta2: Optional[float] = None
    adam_eps: Optional[float] = None
    clip_norm: Optional[float] = None
    loss_scale_init: Optional[float] = None
    loss_scale_growth: Optional[float] = None
    loss_scale_backoff: Optional[float] = None
    loss_scale_interval: Optional[int] = None
    loss_scale_min: Optional[float] = None
    policy: Optional[str] = None

    def to_c(self) -> TrainConfigC:
        """The C struct: the library's defaults overridden by every field that is not None.
        Raises for a field that cannot be stored unchanged (see the class docstring)."""
        c = TrainConfigC()
        lib().fx_train_config_default(ctypes.byref(c))
        # TrainConfigC checks each value against its C field as it is assigned (int, int64,
        # uint64 seed, double, char[16]); flags and names are converted here first.
        if self.model is not None:
            c.model = _encode_name(self.model, "model")
        if self.fmt is not None:
            c.fmt = fmt_id(self.fmt)
        for f in ("master_weights", "stochastic_rounding", "augment"):
            v = getattr(self, f)
            if v is not None:
                setattr(c, f, c_bool(v, f"TrainConfig.{f}"))
        if self.loss_scaling is not None:
            ls = self.loss_scaling
            if isinstance(ls, str):
                if ls not in ("auto", "static"):
                    raise InvalidArgumentError(f"TrainConfig.loss_scaling={ls!r}: expected "
                                               "'auto', 'static', True or False", -1)
                c.loss_scaling = -1 if ls == "auto" else 2
            elif isinstance(ls, (bool, np.bool_)):
                c.loss_scaling = int(ls)
            else:
                c.loss_scaling = ls
        if self.autoflex is not None:
            c.autoflex = _encode_name(self.autoflex, "autoflex")
        if self.policy is not None:
            c.policy = _encode_name(self.policy, "policy", 128)
        for f in ("grad_window_lo", "act_window_lo", "weight_window_lo", "batch_size", "epochs",
                  "threads", "lr", "momentum", "weight_decay", "seed", "adam_beta1",
                  "adam_beta2", "adam_eps", "clip_norm", "loss_scale_init", "loss_scale_growth",
                  "loss_scale_backoff", "loss_scale_interval", "loss_scale_min"):
            v = getattr(self, f)
            if v is not None:
                setattr(c, f, v)
        if self.lr_schedule is not None:
            s = self.lr_schedule
            if isinstance(s, str):
                if s not in LR_SCHEDULES:
                    raise InvalidArgumentError(f"TrainConfig.lr_schedule={s!r}: expected one of "
                                               f"{LR_SCHEDULES}", -1)
                s = LR_SCHEDULES.index(s)
            c.lr_schedule = s
        if self.device is not None:
            c.device = _device_ordinal(self.device)
        if self.optimizer is not None:
            o = self.optimizer
            if isinstance(o, str):
                if o not in OPTIMIZERS:
                    raise InvalidArgumentError(f"TrainConfig.optimizer={o!r}: expected one of "
                                               f"{OPTIMIZERS}", -1)
                o = OPTIMIZERS.index(o)
            c.optimizer = o
        return c

    @classmethod
    def from_c(cls, c: TrainConfigC) -> "TrainConfig":
        """A fully specified configuration from the C struct."""
        sched = c.lr_schedule
        return cls(model=c.model.decode(), fmt=FORMATS[c.fmt] if 0 <= c.fmt < len(FORMATS)
                   else c.fmt, master_weights=bool(c.master_weights),
                   loss_scaling="auto" if c.loss_scaling < 0 else
                   "static" if c.loss_scaling == 2 else bool(c.loss_scaling),
                   stochastic_rounding=bool(c.stochastic_rounding),
                   autoflex=c.autoflex.decode(), grad_window_lo=c.grad_window_lo,
                   act_window_lo=c.act_window_lo, weight_window_lo=c.weight_window_lo,
                   batch_size=c.batch_size, lr=c.lr, momentum=c.momentum,
                   weight_decay=c.weight_decay,
                   lr_schedule=LR_SCHEDULES[sched] if 0 <= sched < len(LR_SCHEDULES) else sched,
                   epochs=c.epochs, augment=bool(c.augment), seed=c.seed, threads=c.threads,
                   device=c.device,
                   optimizer=OPTIMIZERS[c.optimizer] if 0 <= c.optimizer < len(OPTIMIZERS)
                   else c.optimizer, adam_beta1=c.adam_beta1, adam_beta2=c.adam_beta2,
                   adam_eps=c.adam_eps, clip_norm=c.clip_norm,
                   loss_scale_init=c.loss_scale_init, loss_scale_growth=c.loss_scale_growth,
                   loss_scale_backoff=c.loss_scale_backoff,
                   loss_scale_interval=c.loss_scale_interval, loss_scale_min=c.loss_scale_min,
                   policy=c.policy.decode())

    def resolved(self) -> "TrainConfig":
        """This configuration with every None replaced by the library default."""
        return TrainConfig.from_c(self.to_c())

    @classmethod
    def default(cls) -> "TrainConfig":
        """The library's default configuration, fully specified."""
        return cls().resolved()


@dataclass(frozen=True)
class EpochMetrics:
    """Metrics of one epoch (fx_epoch_metrics). test_loss/test_accuracy are -1 without a test
    set."""
    epoch: int
    train_loss: float
    train_accuracy: float
    test_loss: float
    test_accuracy: float
    seconds: float
    images_per_second: float
    steps: int
    skipped_steps: int
    nonfinite_losses: int
    loss_scale: float

    @classmethod
    def from_c(cls, m: EpochMetricsC) -> "EpochMetrics":
        return cls(**{f.name: getattr(m, f.name) for f in dataclasses.fields(cls)})

    def as_dict(self) -> Dict[str, float]:
        return dataclasses.asdict(self)


class Trainer:
    """A model trained in one number format (fx_trainer).

    ``Trainer(config, train, test=None)`` builds the model for the data sets' image shape and
    classes; the initial weights are drawn in fp32 from config.seed and converted, so every
    format starts from the same point. The trainer borrows the data sets and keeps them alive.

    Tensors from :meth:`tensor` belong to the trainer: they keep it alive, and :meth:`close`
    refuses to free it while any of them is still referenced.
    """

    def __init__(self, config: Optional[TrainConfig], train: Dataset,
                 test: Optional[Dataset] = None, model=None) -> None:
        """Raises what :meth:`TrainConfig.to_c` raises for the configuration (before anything
        is built), ArgumentTypeError for a config that is not a TrainConfig or None or data
        sets that are not Datasets, and the library's error when it cannot build the model
        (UnknownNameError, ShapeError, RangeError, DeviceError, ...). model: a
        :class:`flexpoint.Model` trained in place of config.model (fx_trainer_new_model; the
        trainer keeps its own copy)."""
        self._ptr: Optional[int] = None
        self._borrowed: "weakref.WeakSet[Tensor]" = weakref.WeakSet()
        if not isinstance(train, Dataset) or (test is not None and not isinstance(test, Dataset)):
            raise ArgumentTypeError("train and test must be flexpoint Datasets")
        if config is not None and not isinstance(config, TrainConfig):
            raise ArgumentTypeError(f"config must be a TrainConfig or None, not "
                                    f"{type(config).__name__}")
        self.config = (config or TrainConfig()).resolved()
        self._cfg_c = self.config.to_c()
        self.train_set = train
        self.test_set = test
        L = lib()
        L.flexpoint_clear_error()
        if model is not None:
            from .model import Model  # a model definition in place of a built-in name
            if not isinstance(model, Model):
                raise ArgumentTypeError(f"model must be a flexpoint.Model or None, not "
                                        f"{type(model).__name__}")
            p = L.fx_trainer_new_model(ctypes.byref(self._cfg_c), model.handle, train.handle,
                                       test.handle if test is not None else None)
        else:
            p = L.fx_trainer_new(ctypes.byref(self._cfg_c), train.handle,
                                 test.handle if test is not None else None)
        if not p:
            raise_last(_trainer_new_status(), "fx_trainer_new")
        self._ptr = p

    # lifetime -------------------------------------------------------------------------------
    @property
    def _h(self) -> int:
        if not self._ptr:
            raise StateError("the trainer was closed", -11)
        return self._ptr

    def close(self) -> None:
        """Free the trainer now. StateError while tensors from :meth:`tensor` are alive."""
        if not self._ptr:
            return
        alive = [t for t in self._borrowed if t._ptr]
        if alive:
            raise StateError(f"close: {len(alive)} tensor(s) from Trainer.tensor() are still "
                             "referenced; delete them first", -11)
        ptr, self._ptr = self._ptr, None
        lib().fx_trainer_free(ptr)

    def __del__(self) -> None:
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            try:
                lib().fx_trainer_free(ptr)
            except Exception:  # interpreter shutdown
                pass

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # training -------------------------------------------------------------------------------
    def step(self) -> float:
        """One optimiser step on the next batch; returns the batch loss."""
        loss = c_float()
        check(lib().fx_trainer_step(self._h, ctypes.byref(loss)), "fx_trainer_step")
        return float(loss.value)

    def epoch(self) -> EpochMetrics:
        """Train the rest of the current epoch, then evaluate on the test set."""
        m = EpochMetricsC()
        check(lib().fx_trainer_epoch(self._h, ctypes.byref(m)), "fx_trainer_epoch")
        return EpochMetrics.from_c(m)

    def fit(self, epochs: Optional[int] = None,
            callback: Optional[Callable[[EpochMetrics], None]] = None,
            warn: bool = True) -> List[EpochMetrics]:
        """Run `epochs` epochs (default: config.epochs minus those done); returns their
        metrics, calling callback(metrics) after each. With warn (the default), after each
        epoch the lines of :meth:`health_warnings` (saturation, underflow, non-finite weights:
        what the loss does not show) are printed to stderr, as flexpoint-train prints them.
        Raises ArgumentTypeError for epochs that is not an integer or a warn that is not a
        bool, ArgumentRangeError for a negative epochs."""
        if epochs is None:
            n = max(int(self.config.epochs or 0) - self.epoch_index, 0)
        else:
            n = c_int64(epochs, "epochs", lo=0)
        w = c_bool(warn, "warn")
        out = []
        for _ in range(n):
            m = self.epoch()
            out.append(m)
            if w:
                for line in self.health_warnings(m.epoch):
                    print(line, file=sys.stderr, flush=True)
            if callback is not None:
                callback(m)
        return out

    def health(self) -> Dict[str, object]:
        """The numeric health of the current epoch (fx_trainer_health): what the format did to
        the values it stored. Right after :meth:`epoch` (or each epoch of :meth:`fit`) the
        counts are those of the epoch just reported; they restart with the next epoch's first
        step. Returns::

            {"measured": bool,   # counts kept: flex16_5 and dfp16 (0 for the float formats)
             "steps": int,       # optimiser steps counted
             "weights" | "activations" | "gradients": {
                 "writes", "written", "saturated", "underflow", "zeroed": int,
                 "worst_saturated": tensor name or None, "worst_saturated_fraction": float,
                 "worst_zeroed": tensor name or None, "worst_zeroed_fraction": float},
             "params": int, "nonfinite_weights": int}  # NaN/Inf weights now, every format

        per class: tensor writes, elements written, elements saturated, nonzero inputs rounded
        to 0, writes whose every nonzero input rounded to 0, and the tensor with the largest
        saturated (zeroed) fraction. Compare the fractions with HEALTH_WARN_FRACTION, as
        :meth:`health_warnings` does."""
        h = TrainHealthC()
        check(lib().fx_trainer_health(self._h, ctypes.byref(h)), "fx_trainer_health")
        names = self.tensor_names()

        def name(i: int) -> Optional[str]:
            return names[i] if 0 <= i < len(names) else None

        out: Dict[str, object] = {"measured": bool(h.measured), "steps": int(h.steps)}
        for c, cls in enumerate(TENSOR_CLASSES):
            out[cls] = {
                "writes": int(h.writes[c]), "written": int(h.written[c]),
                "saturated": int(h.saturated[c]), "underflow": int(h.underflow[c]),
                "zeroed": int(h.zeroed[c]), "worst_saturated": name(h.worst_saturated[c]),
                "worst_saturated_fraction": float(h.worst_saturated_fraction[c]),
                "worst_zeroed": name(h.worst_zeroed[c]),
                "worst_zeroed_fraction": float(h.worst_zeroed_fraction[c])}
        out["params"] = int(h.params)
        out["nonfinite_weights"] = int(h.nonfinite_weights)
        return out

    def health_warnings(self, epoch: Optional[int] = None) -> List[str]:
        """The warning lines flexpoint-train prints after an epoch, from :meth:`health`: a
        class with a tensor more than HEALTH_WARN_FRACTION saturated, or with more than that
        fraction of its writes zeroed, and weights that are NaN or Inf. Each reads
        ``flexpoint: warning: <fmt> epoch <epoch>: ...`` (epoch, as in EpochMetrics.epoch:
        default the last one reported); an empty list for a healthy epoch."""
        # EpochMetrics.epoch counts from 1: after n epochs, the last reported is epoch n
        e = self.epoch_index if epoch is None else c_int(epoch, "epoch")
        h = self.health()
        head = f"flexpoint: warning: {fmt_name(self.config.fmt)} epoch {e}:"
        lines = []
        for cls in TENSOR_CLASSES if h["measured"] else ():
            c = h[cls]
            assert isinstance(c, dict)
            if c["worst_saturated_fraction"] > HEALTH_WARN_FRACTION:
                lines.append(f"{head} {cls} saturated: {c['saturated']} of {c['written']} "
                             f"elements written ({c['worst_saturated']}: "
                             f"{100.0 * c['worst_saturated_fraction']:.1f}% of its elements)")
            if c["worst_zeroed_fraction"] > HEALTH_WARN_FRACTION:
                lines.append(f"{head} {cls} underflowed: {c['zeroed']} of {c['writes']} writes "
                             f"kept no nonzero value, {c['underflow']} of {c['written']} "
                             f"elements rounded to 0 ({c['worst_zeroed']}: "
                             f"{100.0 * c['worst_zeroed_fraction']:.1f}% of its writes zeroed)")
        if h["nonfinite_weights"]:
            lines.append(f"{head} {h['nonfinite_weights']} of {h['params']} weights are NaN "
                         "or Inf")
        return lines

    def evaluate(self, dataset: Optional[Dataset] = None, fmt: Optional[FormatLike] = None,
                 policy: Optional[str] = None,
                 autoflex: Optional[str] = None) -> Tuple[float, float]:
        """(accuracy in [0, 1], mean loss) on a data set (default: the test set), in inference
        mode, with fp32 images in and fp32 logits out.

        With fmt, policy or autoflex, the trainer's weights are evaluated in that format
        (default: the trainer's own), under that format policy (default: the trainer's own
        when fmt is not given, else none) and Autoflex preset (fx_trainer_evaluate_as): a temporary trainer of the same model receives them as
        :meth:`copy_weights_from` gives them. In the trainer's own format, preset and policy
        this is the plain evaluation exactly. The trainer itself is unchanged either way.

        ArgumentTypeError for a dataset that is not a Dataset; FormatError for an unknown
        format; UnknownNameError for an unknown preset, policy class or a rule that matches no
        layer; InvalidArgumentError for NUL in a name."""
        if dataset is not None and not isinstance(dataset, Dataset):
            raise ArgumentTypeError(f"dataset must be a flexpoint Dataset, not "
                                    f"{type(dataset).__name__}")
        ds = self.test_set if dataset is None else dataset
        if ds is None:
            raise InvalidArgumentError("evaluate: no data set given and the trainer has no test "
                                       "set", -1)
        acc, loss = c_double(), c_double()
        if fmt is None and policy is None and autoflex is None:
            check(lib().fx_trainer_evaluate(self._h, ds.handle, ctypes.byref(acc),
                                            ctypes.byref(loss)), "fx_trainer_evaluate")
            return float(acc.value), float(loss.value)
        f = self.config.fmt if fmt is None else fmt
        own_policy = self.config.policy or ""
        p = c_str(own_policy if policy is None and fmt is None else (policy or ""), "policy",
                  128)
        a = c_str(autoflex or "", "autoflex", 16)
        check(lib().fx_trainer_evaluate_as(self._h, fmt_id(f), a, p, ds.handle,
                                           ctypes.byref(acc), ctypes.byref(loss)),
              "fx_trainer_evaluate_as")
        return float(acc.value), float(loss.value)

    @property
    def cast_count(self) -> int:
        """Casts the model builder inserted where the format policy changes format
        (fx_trainer_cast_count); 0 without a policy."""
        return int(check(lib().fx_trainer_cast_count(self._h), "fx_trainer_cast_count"))

    @property
    def cast_seconds(self) -> float:
        """Seconds this trainer's training steps have spent in its casts, forward and backward
        (fx_trainer_cast_seconds; on a device only while profiling)."""
        return float(lib().fx_trainer_cast_seconds(self._h))

    @property
    def global_step(self) -> int:
        """Optimiser steps taken so far."""
        return int(check(lib().fx_trainer_global_step(self._h), "fx_trainer_global_step"))

    @property
    def epoch_index(self) -> int:
        """The current epoch, 0-based."""
        return int(check(lib().fx_trainer_epoch_index(self._h), "fx_trainer_epoch_index"))

    @property
    def loss_scaler(self) -> LossScaler:
        """A snapshot of the trainer's loss-scaler state."""
        p = lib().fx_trainer_loss_scaler(self._h)
        if not p:
            check(-1, "fx_trainer_loss_scaler")
        return LossScaler.from_c(p.contents)

    # tensors and parameters -----------------------------------------------------------------
    def tensor_names(self) -> List[str]:
        """Names of the trainer's tensors: "<layer>.w", "<layer>.w.grad", "<layer>.out", ..."""
        L = lib()
        h = self._h
        n = check(L.fx_trainer_tensor_count(h), "fx_trainer_tensor_count")
        return [L.fx_trainer_tensor_name(h, i).decode() for i in range(n)]

    def tensor(self, name: Union[str, int]) -> Tensor:
        """The trainer's tensor with this name (or index), for statistics, traces and reads.
        It stays owned by the trainer and keeps the trainer alive. UnknownNameError for an
        unknown name, RangeError for an index out of range (ArgumentRangeError beyond the C int
        range), InvalidArgumentError for a name containing NUL, ArgumentTypeError for a key
        that is neither a str nor an integer, StateError for a tensor that the last step's
        fused ops left unwritten (an fp32/fp16/bf16 batch norm's or residual add's output
        before its ReLU, a ReLU's summed output gradient; FLEXPOINT_NO_FUSION=1 keeps them)."""
        L = lib()
        h = self._h
        if isinstance(name, str):
            i = check(L.fx_trainer_tensor_find(h, c_str(name, "name")), "fx_trainer_tensor_find")
        else:
            i = c_int(name, "index")
        L.flexpoint_clear_error()
        p = L.fx_trainer_tensor(h, i)
        if not p:  # FX_ESTATE: a tensor left unwritten; anything else, an index out of range
            state = L.flexpoint_last_status() == -11
            raise_last(-11 if state else -6, "fx_trainer_tensor")
        t = Tensor._wrap(p, self, owned=False)
        self._borrowed.add(t)
        return t

    def tensors(self) -> Dict[str, Tensor]:
        """All the trainer's tensors by name, but those that the last step's fused ops left
        unwritten (see tensor())."""
        out: Dict[str, Tensor] = {}
        for i, n in enumerate(self.tensor_names()):
            try:
                out[n] = self.tensor(i)
            except StateError:
                continue
        return out

    @property
    def param_count(self) -> int:
        """Number of parameters (weights) of the model."""
        return int(check(lib().fx_trainer_param_count(self._h), "fx_trainer_param_count"))

    def params(self) -> np.ndarray:
        """All fp32 master weights (or the dequantised working weights without them), float32
        [param_count], in tensor order."""
        out = np.empty(self.param_count, dtype=np.float32)
        check(lib().fx_trainer_get_params(self._h, out.ctypes.data_as(_fp)),
              "fx_trainer_get_params")
        return out

    # checkpoints ----------------------------------------------------------------------------
    def save(self, path: Union[str, os.PathLike]) -> None:
        """Save everything needed to resume bit for bit (atomically). Raises FlexpointIOError
        when the file cannot be written, InvalidArgumentError for a path containing NUL (it
        would name another file), ArgumentTypeError for a path of another type."""
        check(lib().fx_trainer_save(self._h, c_path(path, "path")), "fx_trainer_save")

    def load(self, path: Union[str, os.PathLike]) -> None:
        """Restore a checkpoint of a trainer with the same configuration and data shapes;
        CorruptError (trainer unchanged) on any mismatch, FlexpointIOError when the file cannot
        be read, InvalidArgumentError for a path containing NUL (never cut to a shorter path
        that names another checkpoint), ArgumentTypeError for a path of another type."""
        check(lib().fx_trainer_load(self._h, c_path(path, "path")), "fx_trainer_load")

    def copy_weights_from(self, src: "Trainer") -> None:
        """Take src's trained weights, converted into this trainer's format
        (fx_trainer_copy_weights): fp32 values (src's master weights, or its decoded working
        weights) written once into this trainer's working weights and kept as its master
        weights, batch-norm running statistics copied. Both trainers must hold the same model
        for the same data shape: ShapeError names the first difference (this trainer is then
        unchanged). With :meth:`evaluate` this evaluates a model in another format."""
        if not isinstance(src, Trainer):
            raise ArgumentTypeError(f"src must be a Trainer, not {type(src).__name__}")
        check(lib().fx_trainer_copy_weights(self._h, src._h), "fx_trainer_copy_weights")

    def profile_enable(self, on: bool = True) -> None:
        """Start (and reset) or stop timing the layers and phases of training steps
        (fx_trainer_profile_enable). Profiling changes no result."""
        check(lib().fx_trainer_profile_enable(self._h, c_bool(on, "on")),
              "fx_trainer_profile_enable")

    def profile(self) -> Dict[str, object]:
        """The measured steps: {"steps", "data_s", "forward_s", "loss_s", "backward_s",
        "update_s", "total_s", "layers": [{"name", "kind", "forward_s", "backward_s"}, ...]}
        (seconds summed over the steps; fx_trainer_profile, fx_trainer_layer_profile)."""
        from ._structs import LayerProfileC, TrainProfileC
        L = lib()
        p = TrainProfileC()
        check(L.fx_trainer_profile(self._h, ctypes.byref(p)), "fx_trainer_profile")
        out: Dict[str, object] = {f: getattr(p, f) for f, _ in TrainProfileC._fields_}
        layers = []
        for i in range(check(L.fx_trainer_layer_count(self._h), "fx_trainer_layer_count")):
            lp = LayerProfileC()
            check(L.fx_trainer_layer_profile(self._h, i, ctypes.byref(lp)),
                  "fx_trainer_layer_profile")
            layers.append({"name": lp.name.decode(), "kind": lp.kind.decode(),
                           "forward_s": lp.forward_s, "backward_s": lp.backward_s})
        out["layers"] = layers
        return out

    def export_weights(self, path: Union[str, os.PathLike]) -> None:
        """Write the fp32 weights with their names and shapes (fx_trainer_export_weights; read
        them with :func:`flexpoint.weights.read`). RangeError (nothing written) for a NaN or
        infinite weight, FlexpointIOError when the file cannot be written."""
        check(lib().fx_trainer_export_weights(self._h, c_path(path, "path")),
              "fx_trainer_export_weights")

    def import_weights(self, path: Union[str, os.PathLike]) -> None:
        """Set the weights from a weights file (fx_trainer_import_weights; write one from NumPy
        with :func:`flexpoint.weights.write`): every parameter and batch-norm statistic by
        name, with its shape, and nothing else. ShapeError for a name the model lacks or
        another shape, CorruptError for a damaged file, RangeError for a non-finite value; the
        trainer is unchanged then."""
        check(lib().fx_trainer_import_weights(self._h, c_path(path, "path")),
              "fx_trainer_import_weights")

    @classmethod
    def from_checkpoint(cls, path: Union[str, os.PathLike], train: Dataset,
                        test: Optional[Dataset] = None) -> "Trainer":
        """The trainer a checkpoint was written by, with the checkpoint loaded: its
        configuration is read from the file (:func:`checkpoint_config`); train must be the
        training set it was trained on (it gives the normalisation; CorruptError otherwise)."""
        t = cls(checkpoint_config(path), train, test)
        try:
            t.load(path)
        except BaseException:
            t.close()
            raise
        return t

    def __repr__(self) -> str:
        c = self.config
        state = f"step={self.global_step}" if self._ptr else "closed"
        return f"Trainer(model={c.model!r}, fmt={c.fmt!r}, {state})"


def checkpoint_config(path: Union[str, os.PathLike]) -> TrainConfig:
    """The training configuration a checkpoint was written with (fx_checkpoint_config), fully
    specified, device the host. FlexpointIOError when the file cannot be read, CorruptError for
    a damaged header or checksum or a stored configuration out of range."""
    c = TrainConfigC()
    check(lib().fx_checkpoint_config(c_path(path, "path"), ctypes.byref(c)),
          "fx_checkpoint_config")
    return TrainConfig.from_c(c)


def _trainer_new_status() -> Optional[int]:
    # fx_trainer_new returns NULL; the library's thread-local status (set with the message by
    # the same failure) says which error it was. The wording below is only a fallback.
    status = lib().flexpoint_last_status()
    if status < 0:
        return status
    msg = lib().flexpoint_last_error().decode("utf-8", "replace")
    if "CUDA backend" in msg or "CUDA device" in msg:  # fx_place_select (placement.c)
        return -9
    if "out of memory" in msg or "cannot allocate" in msg:
        return -5
    if "is not a format" in msg:
        return -3
    if "not supported" in msg:
        return -4
    if "window" in msg:
        return -6
    if "preset" in msg or "unknown model" in msg:
        return -10
    if "fewer than one batch" in msg or "differs from" in msg:
        return -2
    return -1
