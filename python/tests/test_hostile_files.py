"""Files that are not files, from Python: flexpoint.weights and the scripts' CSV writer.

A FIFO (whose open for reading would wait for a writer forever), a folder, a character device
or a symbolic-link loop given as a weights file must be refused at once with the library's
FlexpointIOError naming the path and the problem, as the C readers refuse them
(tests/test_hostile_files.c). Every case runs under an alarm: a hang fails the test with the
case's name instead of stalling the suite. Damaged shapes are a CorruptError, never NumPy's
ValueError or an allocation; writes are atomic (nothing partial, no temporary left behind).
"""
from __future__ import annotations

import contextlib
import os
import signal
import struct
import sys
import zlib

import numpy as np
import pytest

import flexpoint as fx
from flexpoint import weights

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "scripts"))
import _common  # noqa: E402  (python/scripts/_common.py)

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo") or not hasattr(signal, "SIGALRM"),
                                reason="needs FIFOs and SIGALRM (POSIX)")

CASE_SECONDS = 20  # a refusal takes microseconds; generous for a loaded machine


class Hung(Exception):
    pass


@contextlib.contextmanager
def bounded(case: str):
    """Fail with the case's name if the body does not return within CASE_SECONDS."""
    def on_alarm(signum, frame):
        raise Hung(f"{case}: no answer within {CASE_SECONDS} s (blocked)")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(CASE_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


KINDS = {
    "fifo": ("not a regular file (a FIFO)", lambda p: os.mkfifo(p)),
    "folder": ("not a regular file (a folder)", lambda p: os.mkdir(p)),
    "loop": ("too many levels of symbolic links", lambda p: os.symlink(p, p)),
    "device": ("not a regular file (a character device)", lambda p: os.symlink("/dev/null", p)),
}


def _entries(path) -> dict:
    return {f: os.lstat(os.path.join(path, f)).st_mode for f in os.listdir(path)}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_read_refuses_what_is_not_a_file(tmp_path, kind):
    problem, make = KINDS[kind]
    p = str(tmp_path / "w.fxw")
    make(p)
    with bounded(f"weights.read ({kind})"), pytest.raises(fx.FlexpointIOError) as ei:
        weights.read(p)
    assert isinstance(ei.value, OSError) and ei.value.status_name == "FX_EIO"
    assert p in str(ei.value) and problem in str(ei.value)


def test_read_missing_file(tmp_path):
    with pytest.raises(fx.FlexpointIOError, match="cannot open"):
        weights.read(tmp_path / "none.fxw")


@pytest.mark.parametrize("path", ["w.fxw\0x", b"w.fxw\0", "\0"])
def test_nul_in_paths_is_refused(tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)
    weights.write("w.fxw", {"a": np.ones(2)})  # the name a cut path would name
    with pytest.raises(fx.InvalidArgumentError, match="NUL"):
        weights.read(path)
    with pytest.raises(fx.InvalidArgumentError, match="NUL"):
        weights.write(path, {"a": np.zeros(2)})
    assert weights.read("w.fxw")["a"].tolist() == [1.0, 1.0]  # not overwritten


@pytest.mark.parametrize("path", [None, 3, 1.5, ["a"]])
def test_path_types(path):
    with pytest.raises(fx.ArgumentTypeError):
        weights.read(path)
    with pytest.raises(fx.ArgumentTypeError):
        weights.write(path, {"a": np.zeros(2)})


def _file(shape, values: bytes = b"") -> bytes:
    body = b"FXWEIGHT" + struct.pack("<II", 1, 1) + struct.pack("<I", 1) + b"w" + \
        struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}q", *shape) + values
    return body + struct.pack("<I", zlib.crc32(body))


@pytest.mark.parametrize("shape", [(2**32, 2**32), (2**62, 4), (2**31, 2**31, 4),
                                   (0, 2**62, 2**62), (2**63 - 1,), (-1, -4), (1, -1)])
def test_shapes_the_file_cannot_hold_are_corrupt(tmp_path, shape):
    # (2**32, 2**32) multiplies to 0 in int64: it used to reach reshape (a NumPy ValueError);
    # the rest would ask for more values than the file has, or wrap the strides
    p = tmp_path / "s.fxw"
    p.write_bytes(_file(shape, b"\0" * 16))
    with pytest.raises(fx.CorruptError) as ei:
        weights.read(p)
    assert str(p) in str(ei.value)


def test_valid_empty_and_exact_shapes(tmp_path):
    p = tmp_path / "e.fxw"
    p.write_bytes(_file((0, 5)))
    assert weights.read(p)["w"].shape == (0, 5)
    p.write_bytes(_file((2, 1), struct.pack("<2f", 1.5, -2.0)))
    assert weights.read(p)["w"].tolist() == [[1.5], [-2.0]]


def test_write_is_atomic_and_leaves_no_temporary(tmp_path, monkeypatch):
    p = tmp_path / "a.fxw"
    weights.write(p, {"a": np.arange(3.0)})
    assert sorted(os.listdir(tmp_path)) == ["a.fxw"]
    before = p.read_bytes()

    # a failure after the temporary is written (the sync here) leaves the old file and no
    # temporary
    def failing_fsync(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(fx.FlexpointIOError, match="write failed"):
        weights.write(p, {"a": np.zeros(7)})
    monkeypatch.undo()
    assert p.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["a.fxw"]

    # a stale temporary of this pid (an earlier process had it) is replaced, not an obstacle
    (tmp_path / f"a.fxw.tmp.{os.getpid()}").write_bytes(b"junk")
    weights.write(p, {"b": np.ones((2, 2))})
    assert list(weights.read(p)) == ["b"] and sorted(os.listdir(tmp_path)) == ["a.fxw"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_write_never_blocks_nor_writes_through(tmp_path, kind):
    problem, make = KINDS[kind]
    p = str(tmp_path / "w.fxw")
    # a FIFO, folder, link or device under the temporary name: refused and left as it was
    planted = f"{p}.tmp.{os.getpid()}"
    make(planted)
    with bounded(f"weights.write (planted {kind})"), pytest.raises(fx.FlexpointIOError) as ei:
        weights.write(p, {"a": np.ones(2)})
    assert planted in str(ei.value)
    assert not os.path.lexists(p)
    mode = os.lstat(planted).st_mode
    (os.rmdir if kind == "folder" else os.unlink)(planted)
    # the target itself: replaced by the rename (a folder cannot be, and says so)
    make(p)
    with bounded(f"weights.write (target {kind})"):
        if kind == "folder":
            with pytest.raises(fx.FlexpointIOError, match="w.fxw"):
                weights.write(p, {"a": np.ones(2)})
        else:
            weights.write(p, {"a": np.ones(2)})
            assert weights.read(p)["a"].tolist() == [1.0, 1.0]
    assert not os.path.lexists(planted), oct(mode)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_scripts_csv_writer_refuses_what_is_not_a_file(tmp_path, kind):
    problem, make = KINDS[kind]
    p = str(tmp_path / "out.csv")
    make(p)
    before = _entries(tmp_path)
    with bounded(f"write_csv ({kind})"), pytest.raises(OSError) as ei:
        _common.write_csv(p, [{"a": 1}])
    assert p in str(ei.value)
    assert _entries(tmp_path) == before  # nothing replaced, no temporary left


def test_scripts_csv_writer(tmp_path):
    p = str(tmp_path / "out.csv")
    _common.write_csv(p, [{"a": 1, "b": 0.5}])
    # a FIFO planted under the old fixed temporary name (out.csv.tmp) is not waited on
    os.mkfifo(p + ".tmp")
    with bounded("write_csv (FIFO at out.csv.tmp)"):
        _common.write_csv(p, [{"a": 2, "b": 0.25}])
    assert open(p).read().splitlines() == ["a,b", "2,0.25"]
    assert sorted(os.listdir(tmp_path)) == ["out.csv", "out.csv.tmp"]
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(p).st_mode & 0o777 == 0o666 & ~mask
