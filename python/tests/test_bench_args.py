"""The C benchmarks refuse malformed settings before they time anything: status 2, a message
naming the setting, nothing on stdout past the header. They are found beside the library the
tests load (FLEXPOINT_LIBRARY's build folder, bench/); the tests skip where that build has
none."""
from __future__ import annotations

import os
import subprocess

import pytest

from conftest import REPO


def bench_dir() -> str:
    lib = os.environ.get("FLEXPOINT_LIBRARY", "")
    build = os.path.dirname(lib) if lib.endswith(".so") else lib
    return os.path.join(build or os.path.join(REPO, "build", "release"), "bench")


def run_bench(name: str, args, env_extra) -> subprocess.CompletedProcess:
    path = os.path.join(bench_dir(), name)
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} not built")
    return subprocess.run([path, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **env_extra))


@pytest.mark.parametrize("shape", ["12x0x3", "abc", "12x", "4x4x4x4", "99999999999x9x9",
                                   "70000x70000x1"])
def test_gemm_f32_bad_shape(shape):
    r = run_bench("bench_gemm_f32", ["64", shape], {"BENCH_BACKENDS": "none"})
    assert r.returncode == 2, (shape, r.stdout, r.stderr)
    assert f"shape '{shape}'" in r.stderr
    assert "GFLOP" not in r.stdout  # refused before the table starts


@pytest.mark.parametrize("env,message", [
    ({"BENCH_OUTPUTS": "disposable"}, "BENCH_OUTPUTS=disposable"),
    ({"BENCH_LAYER": "16,8,16"}, "BENCH_LAYER='16,8,16'"),
    ({"BENCH_LAYER": "16,8,16,3,9"}, "BENCH_LAYER='16,8,16,3,9'"),  # a stride past the input
    ({"BENCH_LAYER": "r21"}, "BENCH_LAYER='r21'"),  # not the ResNet-20 preset
    ({"BENCH_I16_EPILOGUE": "maybe"}, "BENCH_I16_EPILOGUE=maybe"),
])
def test_conv_bad_setting(env, message):
    r = run_bench("bench_conv", ["1", "1", "fp32"], env)
    assert r.returncode == 2, (env, r.stdout, r.stderr)
    assert message in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("model", ["", "vgg", "resnet21", "transformer", "gpt2x64h4c64",
                                   "resnet20resnet20resnet20"])
def test_profile_bad_model(model):
    """BENCH_MODEL names an image model of the trainer, or bench_profile stops before it loads
    the data, naming the setting"""
    r = run_bench("bench_profile", ["1", "1"], {"BENCH_MODEL": model, "BENCH_FORMATS": "fp32"})
    assert r.returncode == 2, (model, r.stdout, r.stderr)
    assert f"BENCH_MODEL='{model}'" in r.stderr
    assert r.stdout == ""


def test_conv_r20_layers_and_limit_shares():
    """BENCH_LAYER=r20 times ResNet-20's six 3 x 3 shapes, and each format's row is followed by
    its passes' shares of the measured instruction limit: a percentage per pass run, '-' for a
    pass left out."""
    r = run_bench("bench_conv", ["1", "1", "fp32"],
                  {"BENCH_LAYER": "r20", "BENCH_PASSES": "forward,weight"})
    assert r.returncode == 0, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    rows = [i for i, line in enumerate(lines) if line.startswith("r20 ")]
    assert [lines[i].split()[1] for i in rows] == [
        "stem", "16->16", "16->32", "32->32", "32->64", "64->64"]
    assert "instruction limits per thread (measured)" in r.stdout
    for i in rows:
        shares = lines[i + 1].split()
        assert shares[:2] == ["of", "limit"], lines[i + 1]
        forward, grad_input, grad_weight, total = shares[2:]
        assert grad_input == "-"
        for cell in (forward, grad_weight, total):
            assert cell.endswith("%") and 0 < float(cell[:-1]) < 1000, lines[i + 1]
