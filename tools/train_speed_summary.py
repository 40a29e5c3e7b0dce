#!/usr/bin/env python3
"""Medians over repeated runs of bench/train_speed.sh (RUNS=N writes OUT/run1 .. OUT/runN).

Each run folder holds flexpoint-train's ``epochs.csv`` and, where PyTorch ran,
``pytorch_epochs.csv``. Per run label (every flexpoint format, pytorch-fp32, pytorch-bf16) and
run: the seconds per epoch (the mean over the run's epochs), its ratio to PyTorch's bf16 epoch
and to flexpoint's fp32 epoch of the same run; then the median of each over the runs. Ratios
are taken run by run, so that a slow phase of the machine, which lengthens both sides of one
run, cancels in them:

    python3 tools/train_speed_summary.py results/train_speed/run* [--csv summary.csv]

Exit status 2 with a message naming the folder when a folder has no epochs.csv.
"""
import argparse
import csv
import os
import statistics
import sys


def seconds_by_label(path):
    """{run label: mean seconds per epoch} of one epochs CSV"""
    out = {}
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for label in dict.fromkeys(r["run"] for r in rows):
        secs = [float(r["seconds"]) for r in rows if r["run"] == label]
        out[label] = sum(secs) / len(secs)
    return out


def load_run(folder):
    """{label: seconds per epoch} of one run folder, flexpoint's and PyTorch's rows together"""
    ep = os.path.join(folder, "epochs.csv")
    if not os.path.isfile(ep):
        raise ValueError(f"{folder}: no epochs.csv (not a train_speed run folder)")
    run = seconds_by_label(ep)
    pt = os.path.join(folder, "pytorch_epochs.csv")
    if os.path.isfile(pt):
        run.update(seconds_by_label(pt))
    return run


def summarize(runs):
    """Rows (label, run index or 'median', seconds, ratio to pytorch-bf16, ratio to fp32),
    labels in first-seen order; a ratio is None where its reference did not run."""
    def ratio(r, label, ref):
        return r[label] / r[ref] if ref in r else None

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    rows = []
    for label in dict.fromkeys(k for r in runs for k in r):
        mine = [(i, r[label], ratio(r, label, "pytorch-bf16"), ratio(r, label, "fp32"))
                for i, r in enumerate(runs, 1) if label in r]
        rows += [(label, *m) for m in mine]
        rows.append((label, "median", *(median(col) for col in list(zip(*mine))[1:])))
    return rows


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", help="run folders (OUT/run1 ... of train_speed.sh)")
    ap.add_argument("--csv", help="also write every row to this CSV file")
    a = ap.parse_args(argv)
    try:
        runs = [load_run(f) for f in a.folders]
    except (ValueError, OSError, KeyError) as e:
        print(f"train_speed_summary: {e}", file=sys.stderr)
        return 2
    rows = summarize(runs)
    medians = [r for r in rows if r[1] == "median"]
    print(f"{len(runs)} runs; medians of the per-run values")
    print(f"{'run':<14} {'s/epoch':>9} {'/ PyTorch bf16':>15} {'/ fp32':>8}")
    for label, _, s, pt, f32 in medians:
        print(f"{label:<14} {s:>9.2f} {fmt(pt, '>14.2f')}x {fmt(f32, '>7.2f')}x")
    if a.csv:
        with open(a.csv, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["run", "repeat", "seconds", "ratio_to_pytorch_bf16", "ratio_to_fp32"])
            for label, i, s, pt, f32 in rows:
                w.writerow([label, i, f"{s:.4f}", fmt(pt, ".4f"), fmt(f32, ".4f")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
