"""bench/steps_vs_pytorch.py alternates flexpoint's training steps with PyTorch's in one
process: every configuration gets a row with a positive step time, PyTorch bf16's ratio to
itself is 1, BENCH_FORMATS picks flexpoint's rows, and bad arguments or settings are refused
with status 2 and a message before anything is built or printed.

The script runs on Debian's python3-torch (/usr/bin/python3), which need not be the interpreter
running these tests, so it runs in a subprocess; the test skips where that PyTorch is not
installed (CI installs it only for FLEXPOINT_BASELINE=1)."""
from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "steps_vs_pytorch.py"


def run(python: str, *args: str, **settings: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_")}
    env.update(settings)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])
    return subprocess.run([python, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=600, env=env)


def rows(stdout: str) -> dict:
    """config name -> (ms a step, ratio to PyTorch bf16, ratio to PyTorch fp32)"""
    out = {}
    for line in stdout.splitlines():
        if line.startswith(("flexpoint ", "pytorch ")):
            f = line.split()
            out[f"{f[0]} {f[1]}"] = (float(f[2]), f[4], f[5])
    return out


def test_every_configuration_timed(torch_python):
    r = run(torch_python, "1", "2", "1", BENCH_MODEL="mlp", BENCH_IMAGES="256")
    assert r.returncode == 0, r.stderr
    got = rows(r.stdout)
    want = [f"flexpoint {f}" for f in ("fp32", "fp16", "bf16", "flex16_5", "dfp16")]
    assert sorted(got) == sorted(want + ["pytorch fp32", "pytorch bf16"]), r.stdout
    for name, (ms, to_bf16, to_fp32) in got.items():
        assert ms > 0, (name, r.stdout)
        assert to_bf16.endswith("x") and float(to_bf16[:-1]) > 0, (name, r.stdout)
        assert to_fp32.endswith("x") and float(to_fp32[:-1]) > 0, (name, r.stdout)
    assert got["pytorch bf16"][1] == "1.000x" and got["pytorch fp32"][2] == "1.000x", r.stdout


def test_formats_chosen(torch_python):
    r = run(torch_python, "1", "1", "1", BENCH_MODEL="mlp", BENCH_IMAGES="128",
            BENCH_FORMATS="flex16_5,bf16")
    assert r.returncode == 0, r.stderr
    assert sorted(rows(r.stdout)) == ["flexpoint bf16", "flexpoint flex16_5", "pytorch bf16",
                                      "pytorch fp32"], r.stdout


@pytest.mark.parametrize("args,settings,word", [
    (("0",), {}, "usage"),
    (("1", "x"), {}, "usage"),
    (("1", "1", "1", "1"), {}, "usage"),
    ((), {"BENCH_MODEL": "vgg"}, "BENCH_MODEL"),
    ((), {"BENCH_PAD": "65"}, "BENCH_PAD"),
    ((), {"BENCH_PAD": "two"}, "BENCH_PAD"),
    ((), {"BENCH_IMAGES": "127"}, "BENCH_IMAGES"),
    ((), {"BENCH_FORMATS": "fp8"}, "BENCH_FORMATS"),
    ((), {"BENCH_FORMATS": "bf16 bf16"}, "BENCH_FORMATS"),
])
def test_bad_arguments_refused(torch_python, args, settings, word):
    r = run(torch_python, *args, **settings)
    assert r.returncode == 2, (args, settings, r.stdout, r.stderr)
    assert word in r.stderr and r.stdout == "", (args, settings, r.stderr)
