#!/usr/bin/env python3
"""Plot flexpoint-train results: test accuracy and training loss against epoch, and the sampled
training loss against step, one line per run (with the PyTorch baseline's rows when
pytorch_epochs.csv is next to epochs.csv).

    python3 tools/plot_results.py results/cnn_fashion
"""
import argparse
import csv
import os
import sys


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="directory holding epochs.csv (written by flexpoint-train --out)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_results: matplotlib is not installed (pip install matplotlib)")
    rows = read_rows(os.path.join(args.dir, "epochs.csv"))
    extra = os.path.join(args.dir, "pytorch_epochs.csv")
    if os.path.exists(extra):
        rows += read_rows(extra)
    runs = {}
    for r in rows:
        runs.setdefault(r["run"], []).append(r)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for name, rs in runs.items():
        ep = [int(r["epoch"]) for r in rs]
        style = "--" if name.startswith("pytorch") else "-"
        axes[0].plot(ep, [float(r["test_accuracy"]) for r in rs], style, marker="o", label=name)
        axes[1].plot(ep, [float(r["train_loss"]) for r in rs], style, marker="o", label=name)
    steps = os.path.join(args.dir, "steps.csv")
    if os.path.exists(steps):
        per_run = {}
        for r in read_rows(steps):
            per_run.setdefault(r["run"], []).append((int(r["step"]), float(r["loss"])))
        for name, pts in per_run.items():
            pts.sort()
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            k = 5  # moving average over 5 samples (50 steps) to show the trend
            sm = [sum(ys[max(0, i - k + 1):i + 1]) / len(ys[max(0, i - k + 1):i + 1])
                  for i in range(len(ys))]
            axes[2].plot(xs, sm, label=name)
    axes[0].set(xlabel="epoch", ylabel="test accuracy", title="Test accuracy")
    axes[1].set(xlabel="epoch", ylabel="training loss", title="Training loss per epoch")
    axes[2].set(xlabel="step", ylabel="training loss", title="Training loss (sampled, smoothed)")
    for a in axes:
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=8)
    fig.tight_layout()
    out = os.path.join(args.dir, "curves.png")
    fig.savefig(out, dpi=110)
    print(f"plot_results: wrote {out}")


if __name__ == "__main__":
    main()
