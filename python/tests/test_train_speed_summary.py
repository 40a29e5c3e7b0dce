"""tools/train_speed_summary.py: per-run ratios and their medians over repeated train_speed
runs, from run folders written here by hand."""
from __future__ import annotations

import csv
import importlib.util
import os

import pytest

from conftest import REPO


def load_tool():
    path = os.path.join(REPO, "tools", "train_speed_summary.py")
    spec = importlib.util.spec_from_file_location("train_speed_summary", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_run(folder, flex, torch=None):
    """flex / torch: {label: [seconds of each epoch]}"""
    os.makedirs(folder, exist_ok=True)
    for name, rows in (("epochs.csv", flex), ("pytorch_epochs.csv", torch)):
        if rows is None:
            continue
        with open(os.path.join(folder, name), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["run", "model", "epoch", "seconds"])
            for label, secs in rows.items():
                for e, s in enumerate(secs, 1):
                    w.writerow([label, "cnn", e, s])


def test_medians_of_per_run_ratios(tmp_path):
    tool = load_tool()
    # run 2 is a slow phase of the machine: both sides twice as long
    write_run(tmp_path / "run1", {"fp32": [10.0], "bf16": [4.0]}, {"pytorch-bf16": [5.0]})
    write_run(tmp_path / "run2", {"fp32": [20.0], "bf16": [8.0]}, {"pytorch-bf16": [10.0]})
    write_run(tmp_path / "run3", {"fp32": [11.0], "bf16": [6.0]}, {"pytorch-bf16": [5.0]})
    out = tmp_path / "summary.csv"
    rc = tool.main([str(tmp_path / f"run{i}") for i in (1, 2, 3)] + ["--csv", str(out)])
    assert rc == 0
    with open(out, newline="") as f:
        rows = {(r["run"], r["repeat"]): r for r in csv.DictReader(f)}
    # per-run ratios 0.8, 0.8, 1.2: the slow run's doubled seconds cancel in its ratio
    assert float(rows[("bf16", "median")]["ratio_to_pytorch_bf16"]) == pytest.approx(0.8)
    assert float(rows[("bf16", "median")]["seconds"]) == pytest.approx(6.0)
    assert float(rows[("bf16", "3")]["ratio_to_fp32"]) == pytest.approx(6.0 / 11.0, abs=1e-4)
    assert float(rows[("pytorch-bf16", "median")]["ratio_to_fp32"]) == pytest.approx(0.5)


def test_epochs_averaged_and_missing_reference(tmp_path):
    tool = load_tool()
    write_run(tmp_path / "a", {"fp32": [3.0, 5.0], "dfp16": [2.0, 2.0]})  # no PyTorch rows
    rows = tool.summarize([tool.load_run(str(tmp_path / "a"))])
    med = {r[0]: r for r in rows if r[1] == "median"}
    assert med["fp32"][2] == pytest.approx(4.0)
    assert med["dfp16"][3] is None  # no PyTorch bf16 to divide by
    assert med["dfp16"][4] == pytest.approx(0.5)


def test_not_a_run_folder(tmp_path, capsys):
    tool = load_tool()
    (tmp_path / "empty").mkdir()
    assert tool.main([str(tmp_path / "empty")]) == 2
    assert "no epochs.csv" in capsys.readouterr().err
