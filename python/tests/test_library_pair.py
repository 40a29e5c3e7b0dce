"""Loading the two shared libraries: libflexpoint (tensors) and libflexpoint_train (data sets,
models, the trainer), both from one folder, whichever of them (or the folder) FLEXPOINT_LIBRARY
names."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import flexpoint as fx
from conftest import PYROOT

# prints both loaded paths, then trains one step (a function of libflexpoint_train) and makes
# a tensor (libflexpoint)
_PROBE = """
import flexpoint as fx, numpy as np
L = fx.lib()
print('CORE', L.path)
print('TRAIN', L.train_path)
t = fx.from_numpy(np.ones((2, 2), np.float32), 'flex16_5')
print('SUM', float((t + t).numpy().sum()))
print('HASTRAIN', L.has('fx_trainer_new') and L.has('fx_dataset_synthetic'))
"""


def _run(env_value: str):
    env = dict(os.environ, FLEXPOINT_LIBRARY=env_value,
               PYTHONPATH=PYROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, timeout=120)


def _lines(out: str) -> dict:
    return dict(line.split(" ", 1) for line in out.strip().splitlines())


def test_loaded_pair_shares_a_folder():
    L = fx.lib()
    assert os.path.basename(L.train_path).startswith("libflexpoint_train")
    assert os.path.dirname(os.path.abspath(L.path)) == \
        os.path.dirname(os.path.abspath(L.train_path))
    assert L.has("tensor_new") and L.has("fx_trainer_new") and L.has("fx_dataset_synthetic")


@pytest.mark.parametrize("form", ["core", "train", "folder"])
def test_library_variable_forms(form):
    folder = os.path.dirname(os.path.abspath(fx.lib().path))
    value = {"core": fx.lib().path, "train": fx.lib().train_path, "folder": folder}[form]
    r = _run(value)
    assert r.returncode == 0, r.stderr
    got = _lines(r.stdout)
    assert os.path.dirname(os.path.abspath(got["CORE"])) == folder
    assert os.path.dirname(os.path.abspath(got["TRAIN"])) == folder
    assert os.path.basename(got["TRAIN"]).startswith("libflexpoint_train")
    assert float(got["SUM"]) == 8.0
    assert got["HASTRAIN"] == "True"


def test_missing_training_library_is_a_clear_error(tmp_path):
    # a folder with libflexpoint.so alone: the binding refuses it and names the missing file
    # (unless a bundled or installed pair, tried after FLEXPOINT_LIBRARY, would load instead)
    from flexpoint import _lib
    if _lib._bundled_candidates() or _lib._prefix_candidates():
        pytest.skip("a bundled or installed libflexpoint would be loaded after the variable's")
    shutil.copy(fx.lib().path, tmp_path / "libflexpoint.so")
    code = ("import flexpoint as fx\ntry:\n    fx.version()\n"
            "except fx.LibraryNotFoundError as e:\n    print('LNF', e)\n")
    env = dict(os.environ, FLEXPOINT_LIBRARY=str(tmp_path / "libflexpoint.so"),
               PYTHONPATH=PYROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "LNF" in r.stdout
    assert str(tmp_path / "libflexpoint_train.so") in r.stdout
