"""Weights files from and to NumPy: a model's fp32 weights with their names and shapes.

The layout (docs/training.md, "Weights files"), little-endian::

    b"FXWEIGHT" | u32 version (1) | u32 entry count
    per entry: u32 name length (1..63) | UTF-8 name | u32 ndim (1..4) | i64 shape[ndim]
               | f32 values
    u32 CRC-32 (zlib's) of every byte before it

:meth:`flexpoint.Trainer.export_weights` writes one and :meth:`flexpoint.Trainer.import_weights`
reads one, so a model trained elsewhere (PyTorch, say) can be evaluated or trained on in every
format: write its arrays here under the trainer's names (``Trainer.tensor_names()`` lists the
parameters; batch-norm layers add ``<layer>.running_mean`` and ``<layer>.running_var``).
"""
from __future__ import annotations

import os
import struct
import zlib
from typing import Dict, Mapping, Union

import numpy as np

from .errors import CorruptError, InvalidArgumentError

__all__ = ["read", "write", "MAGIC", "VERSION"]

MAGIC = b"FXWEIGHT"
VERSION = 1
_NAME_MAX = 63


def write(path: Union[str, os.PathLike], arrays: Mapping[str, np.ndarray]) -> None:
    """Write arrays (name -> array of 1 to 4 dimensions, converted to float32) as a weights
    file. InvalidArgumentError for an empty or too long name, a name with NUL, a rank outside
    [1, 4] or a non-finite value (the library would refuse the file)."""
    out = [MAGIC, struct.pack("<II", VERSION, len(arrays))]
    for name, a in arrays.items():
        if not isinstance(name, str):
            raise InvalidArgumentError(f"weights.write: name {name!r} is not a str", -1)
        raw = name.encode("utf-8")
        if not 1 <= len(raw) <= _NAME_MAX or b"\0" in raw:
            raise InvalidArgumentError(f"weights.write: name {name!r} must be 1..{_NAME_MAX} "
                                       "bytes without NUL", -1)
        v = np.ascontiguousarray(a, dtype="<f4")
        if not 1 <= v.ndim <= 4:
            raise InvalidArgumentError(f"weights.write: {name}: {v.ndim} dimensions, 1..4 "
                                       "allowed", -1)
        if not np.all(np.isfinite(v)):
            raise InvalidArgumentError(f"weights.write: {name} holds NaN or Inf", -1)
        out += [struct.pack("<I", len(raw)), raw, struct.pack("<I", v.ndim),
                struct.pack(f"<{v.ndim}q", *v.shape), v.tobytes()]
    body = b"".join(out)
    with open(path, "wb") as f:
        f.write(body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF))


def read(path: Union[str, os.PathLike]) -> Dict[str, np.ndarray]:
    """The arrays of a weights file, in file order. CorruptError for a file that is not one
    (magic, version, checksum, lengths)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 20 or data[:8] != MAGIC:
        raise CorruptError(f"{path}: not a flexpoint weights file", -8)
    if zlib.crc32(data[:-4]) & 0xFFFFFFFF != struct.unpack("<I", data[-4:])[0]:
        raise CorruptError(f"{path}: checksum mismatch", -8)
    version, count = struct.unpack_from("<II", data, 8)
    if version != VERSION:
        raise CorruptError(f"{path}: version {version}, this reader reads {VERSION}", -8)
    pos, end, arrays = 16, len(data) - 4, {}
    try:
        for _ in range(count):
            (nl,) = struct.unpack_from("<I", data, pos)
            if not 1 <= nl <= _NAME_MAX or pos + 4 + nl > end:
                raise CorruptError(f"{path}: bad name length {nl}", -8)
            name = data[pos + 4:pos + 4 + nl].decode("utf-8")
            pos += 4 + nl
            (nd,) = struct.unpack_from("<I", data, pos)
            if not 1 <= nd <= 4:
                raise CorruptError(f"{path}: {name}: ndim {nd}", -8)
            shape = struct.unpack_from(f"<{nd}q", data, pos + 4)
            pos += 4 + 8 * nd
            n = int(np.prod(shape, dtype=np.int64))
            if min(shape) < 0 or pos + 4 * n > end:
                raise CorruptError(f"{path}: {name}: truncated values", -8)
            arrays[name] = np.frombuffer(data, dtype="<f4", count=n, offset=pos) \
                .reshape(shape).astype(np.float32)
            pos += 4 * n
    except (struct.error, UnicodeDecodeError) as e:
        raise CorruptError(f"{path}: {e}", -8) from None
    if pos != end:
        raise CorruptError(f"{path}: {end - pos} unexpected bytes after the last tensor", -8)
    return arrays
