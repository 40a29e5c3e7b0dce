"""Data sets (flexpoint_data.h): Fashion-MNIST, CIFAR-10, seeded synthetic images, arrays.

A :class:`Dataset` owns its C fx_dataset and frees it when it goes away. Images are float32
NCHW, labels int32; :attr:`Dataset.images` and :attr:`Dataset.labels` are read-only NumPy views
of the library's memory (no copy) that keep the dataset alive.

Arguments are checked before they reach the library (see :mod:`flexpoint._check`): counts,
sizes and indices must be integers (ArgumentTypeError for a float, str, None or bool) that fit
their C type (ArgumentRangeError: ``subset(0, 2**64 + 5)`` is refused, not taken as 5); labels
must be an integer array (a float or bool array raises ArgumentTypeError instead of being
truncated), each within int32; a path containing a NUL byte raises InvalidArgumentError
instead of naming a shorter path.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, c_double, c_float, c_int32
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from ._check import c_bool, c_int, c_int64, c_int_array, c_path, c_uint64
from ._check import c_double as c_double_arg
from ._lib import lib
from .errors import InvalidArgumentError, StateError, check, raise_last

__all__ = ["Dataset", "fashion_mnist", "cifar10", "synthetic", "from_arrays", "text",
           "FORTUNES_DIR"]

#: FX_DATA_FORTUNES_DIR: the folder of the Debian package ``fortunes`` (plain-text fortunes).
FORTUNES_DIR = "/usr/share/games/fortunes"

_fp = POINTER(c_float)
_dp = POINTER(c_double)
_i32p = POINTER(c_int32)
_i64p = POINTER(ctypes.c_int64)

PathLike = Union[str, os.PathLike, None]


class _MemHolder:
    __slots__ = ("owner", "__array_interface__")

    def __init__(self, owner: Any, interface: dict) -> None:
        self.owner = owner
        self.__array_interface__ = interface


def _null_status(default: int) -> int:
    """Status of a constructor that returned NULL: flexpoint_last_status(), which the failure sets
    with its message. Should it be unset, the message's wording decides (flexpoint_data.h
    documents the classes): an unreadable file is FX_EIO, an allocation failure FX_ENOMEM, and
    anything else the constructor's `default` (FX_ECORRUPT for loaders: bad contents)."""
    status = lib().flexpoint_last_status()  # set together with the message by the failure
    if status < 0:
        return status
    msg = lib().flexpoint_last_error().decode("utf-8", "replace")
    if any(w in msg for w in ("cannot allocate", "do not fit in memory", "out of memory")):
        return -5
    if any(w in msg for w in ("cannot open", "cannot stat", "not a regular file", "read error",
                              "gzip error")):
        return -7
    if "NULL" in msg:
        return -1
    return default


class Dataset:
    """An in-memory image data set (NCHW float32 images, int32 labels)."""

    __slots__ = ("_ptr", "__weakref__")
    _ptr: Optional[int]

    def __init__(self) -> None:  # use the constructors below
        raise TypeError("create datasets with flexpoint.data.fashion_mnist, cifar10, synthetic, "
                        "from_arrays, or Dataset.subset / Dataset.pad")

    @classmethod
    def _wrap(cls, ptr: Optional[int], fn: str, status: Optional[int]) -> "Dataset":
        if not ptr:
            raise_last(status, fn)
        d = object.__new__(cls)
        d._ptr = ptr
        return d

    def __del__(self) -> None:
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            try:
                lib().fx_dataset_free(ptr)
            except Exception:  # interpreter shutdown
                pass

    @property
    def handle(self) -> int:
        """The fx_dataset* as an integer."""
        p = self._ptr
        if not p:
            raise StateError("the data set was freed", -11)
        return p

    # sizes ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(lib().fx_dataset_len(self.handle))

    @property
    def channels(self) -> int:
        return int(lib().fx_dataset_channels(self.handle))

    @property
    def height(self) -> int:
        return int(lib().fx_dataset_height(self.handle))

    @property
    def width(self) -> int:
        return int(lib().fx_dataset_width(self.handle))

    @property
    def classes(self) -> int:
        return int(lib().fx_dataset_classes(self.handle))

    @property
    def image_shape(self) -> Tuple[int, int, int]:
        """(channels, height, width)."""
        return self.channels, self.height, self.width

    @property
    def context(self) -> int:
        """Tokens per window of a text data set (:func:`text`); 0 for images."""
        return int(lib().fx_dataset_seq_len(self.handle))

    @property
    def vocab(self) -> bytes:
        """A text data set's vocabulary: token t is the byte ``vocab[t]``; b"" for images."""
        buf = ctypes.create_string_buffer(256)
        n = int(lib().fx_dataset_vocab(self.handle, buf))
        return buf.raw[:max(n, 0)]

    @property
    def source(self) -> str:
        """Where the data came from, e.g. "synthetic seed=1"."""
        s = lib().fx_dataset_source(self.handle)
        return s.decode("utf-8", "replace") if s else ""

    def __repr__(self) -> str:
        c, h, w = self.image_shape
        return f"Dataset(len={len(self)}, shape={c}x{h}x{w}, classes={self.classes}, " \
               f"source={self.source!r})"

    # data -----------------------------------------------------------------------------------
    def _view(self, ptr: Optional[int], shape: Tuple[int, ...], dtype: Any) -> np.ndarray:
        if not ptr:
            raise InvalidArgumentError("fx_dataset accessor returned NULL", -1)
        dt = np.dtype(dtype)
        iface = {"version": 3, "shape": shape, "typestr": dt.str, "data": (int(ptr), True)}
        return np.asarray(_MemHolder(self, iface))

    @property
    def images(self) -> np.ndarray:
        """All images, float32 [len, C, H, W], a read-only view of the library's memory."""
        return self._view(lib().fx_dataset_images(self.handle), (len(self),) + self.image_shape,
                          np.float32)

    @property
    def labels(self) -> np.ndarray:
        """All labels, int32 [len], a read-only view of the library's memory."""
        return self._view(lib().fx_dataset_labels(self.handle), (len(self),), np.int32)

    def batch(self, indices: Sequence[int]) -> Tuple[np.ndarray, np.ndarray]:
        """(images [n, C, H, W] float32, labels [n] int32) of the given indices (copies).
        RangeError names the first index outside [0, len) (ArgumentRangeError one beyond
        int64); ArgumentTypeError for indices that are not integers (a float or bool array)."""
        idx = c_int_array(indices, "indices", np.int64).reshape(-1)
        n = idx.size
        x = np.empty((n,) + self.image_shape, dtype=np.float32)
        y = np.empty(n, dtype=np.int32)
        if n:
            check(lib().fx_dataset_batch(self.handle, idx.ctypes.data_as(_i64p), n,
                                         x.ctypes.data_as(_fp), y.ctypes.data_as(_i32p)),
                  "fx_dataset_batch")
        return x, y

    # derived data sets ----------------------------------------------------------------------
    def subset(self, start: int, n: int) -> "Dataset":
        """A new data set holding a copy of images [start, start + n). Raises RangeError when
        the range is not inside the data set, ArgumentTypeError / ArgumentRangeError for start or
        n that are not int64 integers."""
        s, k = c_int64(start, "start"), c_int64(n, "n")
        L = lib()
        L.flexpoint_clear_error()
        p = L.fx_dataset_subset(self.handle, s, k)
        return Dataset._wrap(p, "fx_dataset_subset", None if p else _null_status(-6))

    def pad(self, pad: int) -> "Dataset":
        """A new data set with `pad` zero pixels on every side (28x28 -> 32x32 with pad 2).
        Raises InvalidArgumentError for a negative pad, ArgumentTypeError / ArgumentRangeError
        for one that is not a C int."""
        k = c_int(pad, "pad")
        L = lib()
        L.flexpoint_clear_error()
        p = L.fx_dataset_pad(self.handle, k)
        return Dataset._wrap(p, "fx_dataset_pad", None if p else _null_status(-1))

    # statistics and transforms --------------------------------------------------------------
    def channel_stats(self) -> Tuple[np.ndarray, np.ndarray]:
        """(mean[C], std[C]) of the pixels per channel (population std), float64."""
        c = self.channels
        mean = np.empty(c, dtype=np.float64)
        std = np.empty(c, dtype=np.float64)
        check(lib().fx_dataset_channel_stats(self.handle, mean.ctypes.data_as(_dp),
                                             std.ctypes.data_as(_dp)),
              "fx_dataset_channel_stats")
        return mean, std

    def normalize(self, mean: Optional[Sequence[float]] = None,
                  std: Optional[Sequence[float]] = None) -> "Dataset":
        """Normalise in place, x = (x - mean[c]) / std[c]; defaults to the data set's own
        channel statistics. Returns self."""
        if mean is None or std is None:
            m0, s0 = self.channel_stats()
        m = np.ascontiguousarray(m0 if mean is None else mean, dtype=np.float64).reshape(-1)
        s = np.ascontiguousarray(s0 if std is None else std, dtype=np.float64).reshape(-1)
        c = self.channels
        if m.size != c or s.size != c:
            raise InvalidArgumentError(f"normalize: mean and std need {c} entries, got "
                                       f"{m.size} and {s.size}", -1)
        check(lib().fx_dataset_normalize(self.handle, m.ctypes.data_as(_dp),
                                         s.ctypes.data_as(_dp)), "fx_dataset_normalize")
        return self

    def class_counts(self) -> np.ndarray:
        """Number of images of each class, int64[classes]."""
        out = np.empty(self.classes, dtype=np.int64)
        check(lib().fx_dataset_class_counts(self.handle, out.ctypes.data_as(_i64p)),
              "fx_dataset_class_counts")
        return out


def _path_arg(path: PathLike) -> Optional[bytes]:
    return None if path is None else c_path(path, "dir")


def fashion_mnist(dir: PathLike = None, train: bool = True) -> Dataset:
    """Fashion-MNIST (or MNIST) from a directory of IDX files (gzip or plain). dir None: the
    FLEXPOINT_FASHION_MNIST_DIR environment variable, else /usr/share/datasets/fashion-mnist.
    FlexpointIOError for missing files, CorruptError for bad contents, InvalidArgumentError for
    a dir containing NUL, ArgumentTypeError for a dir of another type or a non-bool train."""
    d, tr = _path_arg(dir), c_bool(train, "train")
    L = lib()
    L.flexpoint_clear_error()
    p = L.fx_dataset_fashion_mnist(d, tr)
    return Dataset._wrap(p, "fx_dataset_fashion_mnist", None if p else _null_status(-8))


def cifar10(dir: PathLike = None, train: bool = True) -> Dataset:
    """CIFAR-10 (binary version) from a directory of data_batch_*.bin / test_batch.bin. dir None:
    FLEXPOINT_CIFAR10_DIR, else "cifar-10-batches-bin". Raises as :func:`fashion_mnist`."""
    d, tr = _path_arg(dir), c_bool(train, "train")
    L = lib()
    L.flexpoint_clear_error()
    p = L.fx_dataset_cifar10(d, tr)
    return Dataset._wrap(p, "fx_dataset_cifar10", None if p else _null_status(-8))


def synthetic(n: int, channels: int = 3, height: int = 32, width: int = 32, classes: int = 10,
              seed: int = 0) -> Dataset:
    """Seeded, learnable synthetic images (class templates, shifted, with contrast,
    brightness and noise); the same arguments give the same bytes. Raises InvalidArgumentError
    for sizes the library refuses, ArgumentTypeError / ArgumentRangeError for n that is not an
    int64, sizes that are not C ints and a seed outside [0, 2**64-1] (never wrapped)."""
    args = (c_int64(n, "n"), c_int(channels, "channels"), c_int(height, "height"),
            c_int(width, "width"), c_int(classes, "classes"), c_uint64(seed, "seed"))
    L = lib()
    L.flexpoint_clear_error()
    p = L.fx_dataset_synthetic(*args)
    return Dataset._wrap(p, "fx_dataset_synthetic", None if p else _null_status(-1))


def from_arrays(images: Any, labels: Any, classes: Optional[int] = None) -> Dataset:
    """A data set holding a copy of `images` (float [n, C, H, W], or [n, H, W] for one channel)
    and `labels` (int [n] in [0, classes); classes defaults to max(labels) + 1).

    Raises InvalidArgumentError for labels outside [0, classes), a label count other than n, a
    non-finite pixel or a bad image rank; ArgumentTypeError for labels that are not integers
    (float labels would be truncated, a bool array is a mask: convert explicitly) or a classes
    that is not an int; ArgumentRangeError for a label or classes beyond int32."""
    x = np.ascontiguousarray(images, dtype=np.float32)
    if x.ndim == 3:
        x = x[:, None, :, :]
    if x.ndim != 4:
        raise InvalidArgumentError(f"images must be [n, C, H, W] or [n, H, W], got shape "
                                   f"{x.shape}", -1)
    y = c_int_array(labels, "labels", np.int32).reshape(-1)
    n, c, h, w = x.shape
    if y.size != n:
        raise InvalidArgumentError(f"{y.size} labels for {n} images", -1)
    k = c_int(int(y.max()) + 1 if y.size else 1, "classes (max(labels) + 1)") \
        if classes is None else c_int(classes, "classes")
    dims = (c_int64(n, "n"), c_int(c, "channels"), c_int(h, "height"), c_int(w, "width"))
    L = lib()
    L.flexpoint_clear_error()
    p = L.fx_dataset_from_arrays(*dims, k, x.ctypes.data_as(_fp), y.ctypes.data_as(_i32p))
    return Dataset._wrap(p, "fx_dataset_from_arrays", None if p else _null_status(-1))


def text(path: PathLike, context: int, val_fraction: float = 0.1
         ) -> Tuple[Dataset, Optional[Dataset]]:
    """A character-level corpus (a text file, plain or gzip, or a folder of them such as
    :data:`FORTUNES_DIR`) as (train, held_out) data sets of non-overlapping windows of
    `context` byte tokens with their next-token targets (fx_dataset_text): each window is a
    1 x 1 x context "image" of token numbers, classes is the vocabulary's size
    (:attr:`Dataset.vocab`), and the last ``floor(len * val_fraction)`` bytes are held out
    (held_out is None when val_fraction is 0). A sequence model (``model="transformer"`` or
    ``"gpt<L>x<D>h<H>c<T>"`` with T = context, or an :class:`~flexpoint.Model` starting with
    an embedding) trains on them. FlexpointIOError for a missing or unreadable path,
    CorruptError for an empty text or a part shorter than one window, InvalidArgumentError for
    a context outside [1, 1024] or val_fraction outside [0, 0.5]."""
    p = c_path(path, "path")
    ctx = c_int(context, "context")
    vf = c_double_arg(val_fraction, "val_fraction")
    tr, va = ctypes.c_void_p(), ctypes.c_void_p()
    L = lib()
    L.flexpoint_clear_error()
    check(L.fx_dataset_text(p, ctx, vf, ctypes.byref(tr), ctypes.byref(va)), "fx_dataset_text")
    train = Dataset._wrap(tr.value, "fx_dataset_text", None)
    return train, (Dataset._wrap(va.value, "fx_dataset_text", None) if va.value else None)
