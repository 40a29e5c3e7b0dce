#!/usr/bin/env python3
"""Plot flexpoint-train results: test accuracy and training loss against epoch, one line per
run (and the PyTorch baseline's rows when pytorch_epochs.csv is next to epochs.csv).

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
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, rs in runs.items():
        ep = [int(r["epoch"]) for r in rs]
        style = "--" if name.startswith("pytorch") else "-"
        axes[0].plot(ep, [float(r["test_accuracy"]) for r in rs], style, marker="o", label=name)
        axes[1].plot(ep, [float(r["train_loss"]) for r in rs], style, marker="o", label=name)
    axes[0].set(xlabel="epoch", ylabel="test accuracy", title="Test accuracy")
    axes[1].set(xlabel="epoch", ylabel="training loss", title="Training loss")
    for a in axes:
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    out = os.path.join(args.dir, "curves.png")
    fig.savefig(out, dpi=110)
    print(f"plot_results: wrote {out}")


if __name__ == "__main__":
    main()
