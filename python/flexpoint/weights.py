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

Files are opened as the C library opens them (docs/robustness.md): :func:`read` refuses at
once anything but a regular file, and :func:`write` never leaves a partial file under the name.
"""
from __future__ import annotations

import errno
import math
import os
import stat
import struct
import zlib
from typing import Dict, Mapping, Tuple, Union

import numpy as np

from ._check import INT64_MAX as _INT64_MAX, c_path
from .errors import CorruptError, FlexpointIOError, InvalidArgumentError

__all__ = ["read", "write", "MAGIC", "VERSION"]

MAGIC = b"FXWEIGHT"
VERSION = 1
_NAME_MAX = 63
_EIO, _ECORRUPT = -7, -8  # FX_EIO, FX_ECORRUPT: the library's statuses for these faults


def _path(path: Union[str, os.PathLike, bytes], func: str) -> Tuple[bytes, str]:
    """(bytes for os calls, text for messages); the binding's path rules (flexpoint._check):
    ArgumentTypeError for another type, InvalidArgumentError for a NUL byte, which the OS would
    refuse with a bare ValueError and C would take as the end of another path."""
    b = c_path(path, f"weights.{func}: path")
    return b, os.fsdecode(b)


def _kind(mode: int) -> str:
    # the C library's words (src/data/file_read.c), so that a message reads the same from both
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a plain file"


def _os_error(shown: str, what: str, e: OSError) -> FlexpointIOError:
    if e.errno == errno.ELOOP:
        return FlexpointIOError(f"{shown}: {what}: too many levels of symbolic links", _EIO)
    return FlexpointIOError(f"{shown}: {what}: {e.strerror or e}", _EIO)


def _read_regular(b: bytes, shown: str) -> bytes:
    """The bytes of a regular file, opened as the C library opens what it reads: a stat first
    (a device is never opened), then O_NONBLOCK (opening a FIFO waits for a writer forever
    otherwise) and an fstat of what was opened (a file swapped in between)."""
    try:
        st = os.stat(b)
    except OSError as e:
        raise _os_error(shown, "cannot open", e) from None
    if not stat.S_ISREG(st.st_mode):
        raise FlexpointIOError(f"{shown}: not a regular file ({_kind(st.st_mode)})", _EIO)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | \
        getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(b, flags)
    except OSError as e:
        raise _os_error(shown, "cannot open", e) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FlexpointIOError(f"{shown}: not a regular file ({_kind(st.st_mode)})", _EIO)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            return f.read()
    except OSError as e:
        raise _os_error(shown, "read error", e) from None
    finally:
        if fd >= 0:
            os.close(fd)


def _fsync_folder(folder: bytes, shown: str) -> None:
    """Make a rename in `folder` durable. A folder that cannot be opened or synced (no read
    permission; EINVAL where the file system has no folder sync) is passed over, as the C
    library does: the rename itself has happened."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EROFS, errno.EBADF):
            raise _os_error(shown, "written, but syncing its folder failed", e) from None
    finally:
        os.close(fd)


def _write_atomic(b: bytes, shown: str, data: bytes) -> None:
    """data into the file b, durably and atomically, as fx_write_file_atomic writes a
    checkpoint: the temporary PATH.tmp.PID next to it (the name the C library gives its
    temporaries, so that its cleanup of killed writers recognises this one too), created with
    O_EXCL | O_NOFOLLOW (never written through a link or into a FIFO planted under that name),
    fsync, rename over the target, fsync of the folder. On failure the temporary is removed
    and the target is what it was: a reader never sees a partial file."""
    folder, base = os.path.split(b)
    if not base:
        raise FlexpointIOError(f"{shown}: the path names a folder, not a file", _EIO)
    tmp = b + b".tmp." + str(os.getpid()).encode()
    tshown = os.fsdecode(tmp)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | \
        getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        try:
            fd = os.open(tmp, flags, 0o666)
        except FileExistsError:
            # the name carries this process's pid: a leftover of an earlier process that had it,
            # replaced when it is a regular file, else (a FIFO, folder or link) refused
            if not stat.S_ISREG(os.lstat(tmp).st_mode):
                raise
            os.unlink(tmp)
            fd = os.open(tmp, flags, 0o666)
    except OSError as e:
        raise _os_error(tshown, "cannot create", e) from None
    ok = False
    try:
        try:
            with os.fdopen(fd, "wb", closefd=True) as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise _os_error(tshown, "write failed", e) from None
        try:
            os.replace(tmp, b)
        except OSError as e:
            raise _os_error(tshown, f"cannot rename to {shown}", e) from None
        ok = True
    finally:
        if not ok:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    _fsync_folder(folder or b".", shown)


def write(path: Union[str, os.PathLike, bytes], arrays: Mapping[str, np.ndarray]) -> None:
    """Write arrays (name -> array of 1 to 4 dimensions, converted to float32) as a weights
    file, atomically and durably: a temporary ``PATH.tmp.PID`` beside it, fsync, rename over
    the target, fsync of the folder; a failed write leaves the target as it was and no
    temporary. InvalidArgumentError for an empty or too long name, a name with NUL, a rank
    outside [1, 4], a non-finite value (the library would refuse the file) or a path with a
    NUL byte; ArgumentTypeError for a path that is not a str, bytes or os.PathLike;
    FlexpointIOError (an OSError) naming the file when it cannot be written (a folder as
    the target, a FIFO or folder planted under the temporary name, no permission, a full
    disk)."""
    b, shown = _path(path, "write")
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
    _write_atomic(b, shown, body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF))


def read(path: Union[str, os.PathLike, bytes]) -> Dict[str, np.ndarray]:
    """The arrays of a weights file, in file order. CorruptError for a file that is not one
    (magic, version, checksum, lengths, a shape whose values the file cannot hold);
    FlexpointIOError (an OSError) at once, never waiting, for a path that is not a regular
    file (a FIFO, folder, device or symbolic-link loop: "not a regular file (a FIFO)", "too
    many levels of symbolic links") or that cannot be read; InvalidArgumentError for a path
    with a NUL byte, ArgumentTypeError for one that is not a str, bytes or os.PathLike."""
    b, shown = _path(path, "read")
    data = _read_regular(b, shown)
    if len(data) < 20 or data[:8] != MAGIC:
        raise CorruptError(f"{shown}: not a flexpoint weights file", _ECORRUPT)
    if zlib.crc32(data[:-4]) & 0xFFFFFFFF != struct.unpack("<I", data[-4:])[0]:
        raise CorruptError(f"{shown}: checksum mismatch", _ECORRUPT)
    version, count = struct.unpack_from("<II", data, 8)
    if version != VERSION:
        raise CorruptError(f"{shown}: version {version}, this reader reads {VERSION}",
                           _ECORRUPT)
    pos, end, arrays = 16, len(data) - 4, {}
    try:
        for _ in range(count):
            (nl,) = struct.unpack_from("<I", data, pos)
            if not 1 <= nl <= _NAME_MAX or pos + 4 + nl > end:
                raise CorruptError(f"{shown}: bad name length {nl}", _ECORRUPT)
            name = data[pos + 4:pos + 4 + nl].decode("utf-8")
            pos += 4 + nl
            (nd,) = struct.unpack_from("<I", data, pos)
            if not 1 <= nd <= 4:
                raise CorruptError(f"{shown}: {name}: ndim {nd}", _ECORRUPT)
            shape = struct.unpack_from(f"<{nd}q", data, pos + 4)
            pos += 4 + 8 * nd
            if min(shape) < 0:
                raise CorruptError(f"{shown}: {name}: negative dimension in {shape}", _ECORRUPT)
            # exact (Python ints): an int64 product would wrap, (2**32, 2**32) to 0; and the
            # non-zero dimensions too, since NumPy refuses a shape whose strides overflow even
            # when it has no element
            n = math.prod(shape)
            if 4 * n > end - pos or 4 * math.prod(d for d in shape if d) > _INT64_MAX:
                raise CorruptError(f"{shown}: {name}: shape {shape} needs {4 * n} bytes, the "
                                   f"file has {end - pos} left", _ECORRUPT)
            arrays[name] = np.frombuffer(data, dtype="<f4", count=n, offset=pos) \
                .reshape(shape).astype(np.float32)
            pos += 4 * n
    except (struct.error, UnicodeDecodeError) as e:
        raise CorruptError(f"{shown}: {e}", _ECORRUPT) from None
    if pos != end:
        raise CorruptError(f"{shown}: {end - pos} unexpected bytes after the last tensor",
                           _ECORRUPT)
    return arrays
