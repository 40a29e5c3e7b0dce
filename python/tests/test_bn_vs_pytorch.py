"""bench/bn_vs_pytorch.py times flexpoint's batch norm and PyTorch's in one process: every
configuration gets a row with positive times, PyTorch bf16's ratio to itself is 1, and a
malformed BENCH_LAYER is refused with status 2 before anything runs.

The script runs on Debian's python3-torch (/usr/bin/python3), which need not be the interpreter
running these tests, so it runs in a subprocess; the test skips where that PyTorch is not
installed (CI installs it only for FLEXPOINT_BASELINE=1)."""
from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bn_vs_pytorch.py"
CONFIGS = ["flexpoint fp32", "flexpoint bf16", "flexpoint flex16_5", "flexpoint dfp16",
           "pytorch fp32", "pytorch bf16"]


def run(python: str, layer: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, BENCH_LAYER=layer,
               PYTHONPATH=os.pathsep.join([str(ROOT / "python"),
                                           os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([python, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, env=env)


def test_every_configuration_timed(torch_python):
    r = run(torch_python, "4,4", "1", "2", "1")
    assert r.returncode == 0, r.stderr
    rows = {}
    for line in r.stdout.splitlines():
        for name in CONFIGS:
            if line.startswith("4 x 4x4") and f" {name} " in line:
                rows[name] = line.split()[-4:]
    assert sorted(rows) == sorted(CONFIGS), r.stdout
    for name, (fwd, bwd, rf, rb) in rows.items():
        assert float(fwd) > 0 and float(bwd) > 0, (name, r.stdout)
        assert rf.endswith("x") and rb.endswith("x") and float(rf[:-1]) > 0, (name, r.stdout)
    assert rows["pytorch bf16"][2:] == ["1.00x", "1.00x"], r.stdout


@pytest.mark.parametrize("layer", ["8", "a,b", "0,4", "4,4,4"])
def test_malformed_layer_refused(torch_python, layer):
    r = run(torch_python, layer)
    assert r.returncode == 2, (layer, r.stdout, r.stderr)
    assert "BENCH_LAYER" in r.stderr and r.stdout == ""
