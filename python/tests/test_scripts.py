"""The research scripts: --help works, and a fast run on tiny synthetic data writes valid PNG
and CSV files."""
from __future__ import annotations

import csv
import math
import os
import subprocess
import sys

import pytest

from conftest import PYROOT

SCRIPTS = os.path.join(PYROOT, "scripts")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TINY = ["--dataset", "synthetic", "--synthetic-shape", "1x8x8", "--threads", "1"]

mpimg = pytest.importorskip("matplotlib.image")


def run_script(name, *args, timeout=240):
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, name), *args],
                       capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
    assert r.returncode == 0, f"{name} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def check_png(path):
    assert os.path.getsize(path) > 1000, path
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE, path
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert img.std() > 0, f"{path} is blank"


def read_csv(path, want_fields):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows, f"{path} has no rows"
    assert set(want_fields) <= set(rows[0]), (path, rows[0].keys())
    return rows


@pytest.mark.parametrize("script", ["compare_formats.py", "autoflex_trace.py",
                                    "format_error.py"])
def test_help(script):
    out = run_script(script, "--help", timeout=60)
    assert out.startswith("usage:") and "--fast" in out and "--out-dir" in out


def test_compare_formats_fast(tmp_path):
    out = tmp_path / "cf"
    run_script("compare_formats.py", "--fast", *TINY, "--out-dir", str(out))
    rows = read_csv(out / "epochs.csv", ["format", "epoch", "train_loss", "test_accuracy",
                                        "seconds", "images_per_second", "loss_scale"])
    assert [r["format"] for r in rows] == ["fp32", "fp16", "bf16", "flex16_5", "dfp16"]
    for r in rows:
        assert int(r["epoch"]) == 1 and math.isfinite(float(r["train_loss"]))
        assert 0.0 <= float(r["test_accuracy"]) <= 1.0
    assert float(rows[1]["loss_scale"]) > 1.0  # fp16 scales its loss, the others do not
    summ = read_csv(out / "summary.csv", ["format", "final_test_accuracy", "gap_to_fp32",
                                         "time_ratio_to_fp32"])
    assert len(summ) == 5 and float(summ[0]["gap_to_fp32"]) == 0.0
    check_png(out / "accuracy.png")
    check_png(out / "loss.png")


def test_autoflex_trace_fast(tmp_path):
    out = tmp_path / "at"
    run_script("autoflex_trace.py", "--fast", *TINY, "--out-dir", str(out),
               "--compare", "published,robust:gamma=0:beta=0")
    variants = ["published", "robust:gamma=0:beta=0"]
    for tag in ("published", "robust_gamma0_beta0"):
        rows = read_csv(out / f"trace_{tag}.csv", ["write", "exp", "overflow", "true_max",
                                                   "stored_max"])
        assert len(rows) >= 30  # at least one write per step
        assert all(-128 <= int(r["exp"]) <= 127 for r in rows)
        assert all(float(r["stored_max"]) <= 32767 * 2.0 ** int(r["exp"]) for r in rows)
    summ = read_csv(out / "summary.csv", ["variant", "tensor", "writes", "overflow_writes",
                                         "saturated_elements"])
    assert [r["variant"] for r in summ] == variants
    assert summ[0]["tensor"].endswith(".w.grad")
    assert int(summ[1]["saturated_elements"]) == 0  # robust recomputes every overflowing write
    losses = read_csv(out / "losses.csv", ["variant", "step", "loss"])
    assert len(losses) == 2 * 30 and all(math.isfinite(float(r["loss"])) for r in losses)
    check_png(out / "autoflex_trace.png")
    check_png(out / "autoflex_presets.png")


def test_format_error_fast(tmp_path):
    out = tmp_path / "fe"
    run_script("format_error.py", "--fast", "--out-dir", str(out))
    bins = read_csv(out / "format_error.csv", ["format", "bin_lo", "bin_hi", "count",
                                              "median_rel_err", "frac_zero"])
    fmts = {r["format"] for r in bins}
    assert fmts == {"fp16", "bf16", "flex16_5", "dfp16"}
    assert sum(int(r["count"]) for r in bins if r["format"] == "bf16") > 19_000
    # bf16: about 2^-9 relative error at every magnitude; fp16 overflows above 65504
    bf = [float(r["median_rel_err"]) for r in bins if r["format"] == "bf16"]
    assert all(1e-4 < e < 2**-7 for e in bf)
    fp16_top = [r for r in bins if r["format"] == "fp16" and float(r["bin_lo"]) > 7e4]
    assert fp16_top and all(float(r["frac_inf_or_saturated"]) == 1.0 for r in fp16_top)
    summ = read_csv(out / "format_error_summary.csv", ["format", "exp", "median_rel_err"])
    assert [r["format"] for r in summ] == ["fp16", "bf16", "flex16_5", "dfp16"]
    check_png(out / "format_error.png")
