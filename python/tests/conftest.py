"""Test setup: import flexpoint from this source tree unless it is installed, and helpers.

The library comes from FLEXPOINT_LIBRARY (tools/test.sh points it at build/release), from a
bundled copy, or from the installed prefix (see flexpoint/_lib.py)."""
from __future__ import annotations

import functools
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)
REPO = os.path.dirname(PYROOT)

try:
    import flexpoint  # noqa: F401  (an installed package)
except ImportError:
    sys.path.insert(0, PYROOT)
    import flexpoint  # noqa: F401

import flexpoint as fx  # noqa: E402


def has(*symbols: str) -> bool:
    """True if the loaded library exports every named C function."""
    L = fx.lib()
    return all(L.has(s) for s in symbols)


def needs(*symbols: str):
    """Skip a test when the loaded library predates the C functions it exercises."""
    return pytest.mark.skipif(not has(*symbols),
                              reason="library lacks " + ", ".join(s for s in symbols
                                                                 if not fx.lib().has(s)))


# Debian's python3-torch runs on the system interpreter, which need not be the one running the
# tests: the PyTorch comparisons run it in a subprocess.
TORCH_PYTHON = "/usr/bin/python3"


@functools.lru_cache(maxsize=None)
def _torch_python_missing() -> str:
    """Why TORCH_PYTHON cannot run the comparisons ("" where it imports torch and numpy),
    asked once per test run."""
    try:
        r = subprocess.run([TORCH_PYTHON, "-c", "import torch, numpy"], capture_output=True,
                           timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return f"{TORCH_PYTHON} cannot run"
    if r.returncode != 0:
        return f"no PyTorch for {TORCH_PYTHON} (apt-get install python3-torch)"
    return ""


@pytest.fixture(scope="module")
def torch_python() -> str:
    """TORCH_PYTHON where it imports torch and numpy; skips the test otherwise (CI installs
    python3-torch only for FLEXPOINT_BASELINE=1)."""
    missing = _torch_python_missing()
    if missing:
        pytest.skip(missing)
    return TORCH_PYTHON


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def pytest_report_header(config):
    try:
        return [f"flexpoint {fx.version()} from {fx.library_path()}, package "
                f"{os.path.dirname(fx.__file__)}, backend {fx.backend()}"]
    except Exception as e:  # the header must not hide the real failure
        return [f"flexpoint library not loaded: {e}"]
