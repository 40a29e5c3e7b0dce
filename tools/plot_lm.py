#!/usr/bin/env python3
"""Learning curves and Autoflex traces of a flexpoint-train language-model run: the held-out
bits per character against step, one line per run (curve.csv, written with --eval-every), and
the shared exponent of traced tensors against write (trace_<run>_<tensor>.csv, written with
--trace). Draws lm_curve.png and lm_traces.png into the folder and prints both as Markdown
tables.

    python3 tools/plot_lm.py results/lm
    python3 tools/plot_lm.py results/lm --tensors b1.attn.pre,b2.attn.pre --no-plot
"""
import argparse
import csv
import glob
import math
import os
import sys


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def curve_table(rows):
    """Markdown: one row per evaluated step, one column per run (bits per character)."""
    runs, steps, val = [], [], {}
    for r in rows:
        if r["run"] not in runs:
            runs.append(r["run"])
        s = int(r["step"])
        if s not in steps:
            steps.append(s)
        key = "test_bits_per_char" if "test_bits_per_char" in r else "test_loss"
        val[(r["run"], s)] = float(r[key])
    out = ["| step | " + " | ".join(runs) + " |", "|---" * (len(runs) + 1) + "|"]
    for s in sorted(steps):
        cells = ["%.4f" % val[(n, s)] if (n, s) in val else "" for n in runs]
        out.append("| %d | " % s + " | ".join(cells) + " |")
    return "\n".join(out), runs


def trace_files(folder, tensors):
    """(run, tensor, path) of every trace file, restricted to `tensors` when given. The run
    label comes first in the name and holds no '_' but that of flex16_5; tensor names hold
    none either, so the name splits at the last '_'."""
    found = []
    for path in sorted(glob.glob(os.path.join(folder, "trace_*.csv"))):
        stem = os.path.basename(path)[len("trace_"):-len(".csv")]
        run, _, tensor = stem.rpartition("_")
        if "_" in tensor or not run:
            continue
        if tensors and tensor not in tensors:
            continue
        found.append((run, tensor, path))
    return found


def trace_summary(rows):
    """Exponent at chosen writes and the counts of the whole trace."""
    n = len(rows)
    picks = sorted({0, n // 10, n // 4, n // 2, (3 * n) // 4, n - 1}) if n else []
    exps = [int(r["exp"]) for r in rows]
    return {
        "writes": n,
        "at": [(i + 1, exps[i]) for i in picks],  # write numbers from 1 (= training step)
        "min": min(exps) if exps else None,
        "max": max(exps) if exps else None,
        "overflow": sum(int(r["overflow"]) for r in rows),
        "recomputed": sum(int(r["recomputed"]) for r in rows),
        "saturated": sum(int(r["saturated"]) for r in rows),
        "underflow": sum(int(r["underflow"]) for r in rows),
        "max_abs": max((float(r["true_max"]) for r in rows), default=0.0),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="the folder of a flexpoint-train run (--out)")
    ap.add_argument("--tensors", default="", help="comma list of traced tensors (default all)")
    ap.add_argument("--no-plot", action="store_true", help="print the tables only")
    args = ap.parse_args()
    tensors = [t for t in args.tensors.split(",") if t]
    curve_path = os.path.join(args.dir, "curve.csv")
    curve = read_rows(curve_path) if os.path.exists(curve_path) else []
    traces = trace_files(args.dir, tensors)
    if not curve and not traces:
        sys.exit("plot_lm: %s has neither curve.csv (--eval-every) nor trace files (--trace)"
                 % args.dir)
    if curve:
        table, runs = curve_table(curve)
        print("Held-out bits per character (curve.csv):\n")
        print(table)
        print()
    summaries = []
    for run, tensor, path in traces:
        s = trace_summary(read_rows(path))
        summaries.append((run, tensor, s))
    if summaries:
        print("Shared exponent of the traced tensors (value = mantissa x 2^exp):\n")
        print("| run | tensor | writes | exponent at write (write: exp) | min | max | "
              "overflows | recomputed | saturated | rounded to 0 | largest |value| |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for run, tensor, s in summaries:
            at = ", ".join("%d: %d" % (w, e) for w, e in s["at"])
            print("| %s | `%s` | %d | %s | %s | %s | %d | %d | %d | %d | %.4g |" % (
                run, tensor, s["writes"], at, s["min"], s["max"], s["overflow"],
                s["recomputed"], s["saturated"], s["underflow"], s["max_abs"]))
        print()
    if args.no_plot:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_lm: matplotlib is not installed (pip install matplotlib)")
    if curve:
        fig, ax = plt.subplots(figsize=(7, 4))
        for name in runs:
            rs = [r for r in curve if r["run"] == name]
            key = "test_bits_per_char" if "test_bits_per_char" in rs[0] else "test_loss"
            ax.plot([int(r["step"]) for r in rs], [float(r[key]) for r in rs], marker="o",
                    markersize=3, label=name)
        ax.set_xlabel("step")
        ax.set_ylabel("held-out bits per character")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(args.dir, "lm_curve.png"), dpi=120)
        print("wrote", os.path.join(args.dir, "lm_curve.png"))
    if traces:
        fig, axes = plt.subplots(1, 2, figsize=(13, 4))
        for run, tensor, path in traces:
            rows = read_rows(path)
            w = [int(r["write"]) for r in rows]
            axes[0].plot(w, [int(r["exp"]) for r in rows], label="%s %s" % (run, tensor))
            axes[1].plot(w, [math.log2(float(r["true_max"])) if float(r["true_max"]) > 0
                             else float("nan") for r in rows], label="%s %s" % (run, tensor))
        axes[0].set_ylabel("shared exponent")
        axes[1].set_ylabel("log2 of the largest |value| written")
        for a in axes:
            a.set_xlabel("write (one per training step)")
            a.grid(alpha=0.3)
            a.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(args.dir, "lm_traces.png"), dpi=120)
        print("wrote", os.path.join(args.dir, "lm_traces.png"))


if __name__ == "__main__":
    main()
