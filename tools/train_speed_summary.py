#!/usr/bin/env python3
"""Medians over repeated runs of bench/train_speed.sh (RUNS=N writes OUT/run1 .. OUT/runN).

Each run folder holds flexpoint-train's ``epochs.csv`` and, where PyTorch ran,
``pytorch_epochs.csv``. Per run label (every flexpoint format, pytorch-fp32, pytorch-bf16) and
run: the seconds per epoch (the mean over the run's epochs), its ratio to PyTorch's bf16 epoch
and to flexpoint's fp32 epoch of the same run; then the median of each over the runs. Ratios
are taken run by run, so that a slow phase of the machine, which lengthens both sides of one
run, cancels in them:

    python3 tools/train_speed_summary.py results/train_speed/run* [--csv summary.csv]

A paired run (train_speed.sh with PAIRED=1) is a folder of sub-folders instead, one per
flexpoint format with that format's epochs.csv and the PyTorch bf16 epoch run right after it
(and one with PyTorch's fp32 epoch alone): each format's ratio to PyTorch's bf16 is then taken
against its own neighbour, minutes closer than one PyTorch epoch after all five formats, and
the run's pytorch-bf16 seconds are the mean of its neighbours'.

Exit status 2 with a message naming the folder when a folder has neither an epochs.csv nor
sub-folders with one.
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


def load_pair(folder):
    """{label: seconds per epoch} of one folder's epochs.csv and pytorch_epochs.csv (each
    optional); None where it has neither"""
    run = {}
    for name in ("epochs.csv", "pytorch_epochs.csv"):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            run.update(seconds_by_label(path))
    return run if run else None


PAIRED = "_paired_bf16"  # a paired run's {label: its neighbouring PyTorch bf16 epoch}


def load_run(folder):
    """{label: seconds per epoch} of one run folder, flexpoint's and PyTorch's rows together;
    a paired run's (sub-folders, PAIRED=1) also holds PAIRED: each flexpoint label's own
    PyTorch bf16 epoch"""
    if os.path.isfile(os.path.join(folder, "epochs.csv")):
        return load_pair(folder)
    # in the order they ran (each folder made when its pair began), so the table lists the
    # formats in train_speed.sh's order
    subs = [os.path.join(folder, d) for d in os.listdir(folder)] if os.path.isdir(folder) else []
    subs = sorted((s for s in subs if os.path.isdir(s)), key=lambda s: (os.path.getmtime(s), s))
    parts = [p for p in (load_pair(s) for s in subs) if p]
    if not any(any(not k.startswith("pytorch-") for k in p) for p in parts):
        raise ValueError(f"{folder}: no epochs.csv (not a train_speed run folder)")
    run, paired, neighbours = {}, {}, []
    for p in parts:
        mine = [k for k in p if not k.startswith("pytorch-")]
        for k in mine:
            run[k] = p[k]
            if "pytorch-bf16" in p:
                paired[k] = p["pytorch-bf16"]
        if "pytorch-bf16" in p:
            neighbours.append(p["pytorch-bf16"])
        for k in p:
            if k.startswith("pytorch-") and k != "pytorch-bf16":
                run[k] = p[k]
    if neighbours:
        run["pytorch-bf16"] = sum(neighbours) / len(neighbours)
    run[PAIRED] = paired
    return run


def summarize(runs):
    """Rows (label, run index or 'median', seconds, ratio to pytorch-bf16, ratio to fp32),
    labels in first-seen order; a ratio is None where its reference did not run."""
    def ratio(r, label, ref):
        if ref == "pytorch-bf16" and label in r.get(PAIRED, {}):
            return r[label] / r[PAIRED][label]
        return r[label] / r[ref] if ref in r else None

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    rows = []
    for label in dict.fromkeys(k for r in runs for k in r if k != PAIRED):
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
