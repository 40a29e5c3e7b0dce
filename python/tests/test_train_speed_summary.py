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


def test_paired_run_takes_each_formats_neighbour(tmp_path):
    """PAIRED=1: each format's ratio against the PyTorch bf16 epoch run right after it, not
    against a mean or a single PyTorch epoch of the run"""
    tool = load_tool()
    run = tmp_path / "run1"
    # the machine slows down between the two pairs: both sides of the second pair twice as long
    write_run(run / "fp32", {"fp32": [10.0]}, {"pytorch-bf16": [5.0]})
    write_run(run / "dfp16", {"dfp16": [9.0]}, {"pytorch-bf16": [10.0]})
    write_run(run / "pytorch-fp32", {}, {"pytorch-fp32": [12.0]})
    out = tmp_path / "summary.csv"
    assert tool.main([str(run), "--csv", str(out)]) == 0
    with open(out, newline="") as f:
        rows = {(r["run"], r["repeat"]): r for r in csv.DictReader(f)}
    assert float(rows[("dfp16", "1")]["ratio_to_pytorch_bf16"]) == pytest.approx(0.9)
    assert float(rows[("fp32", "1")]["ratio_to_pytorch_bf16"]) == pytest.approx(2.0)
    assert float(rows[("dfp16", "1")]["ratio_to_fp32"]) == pytest.approx(0.9)
    # the run's PyTorch bf16 epoch: the mean of the neighbours; fp32's from its own folder
    assert float(rows[("pytorch-bf16", "1")]["seconds"]) == pytest.approx(7.5)
    assert float(rows[("pytorch-fp32", "1")]["ratio_to_fp32"]) == pytest.approx(1.2)
    assert ("_paired_bf16", "1") not in rows


def test_paired_run_without_a_flexpoint_epoch(tmp_path, capsys):
    tool = load_tool()
    write_run(tmp_path / "run1" / "pytorch-fp32", {}, {"pytorch-fp32": [12.0]})
    assert tool.main([str(tmp_path / "run1")]) == 2
    assert "no epochs.csv" in capsys.readouterr().err
