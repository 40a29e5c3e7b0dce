#!/usr/bin/env python3
"""Draws the CSV of tools/error_table.c: the maximum and mean ULP error of every function in
every format (the worst backend), one panel each, as a PNG.

    python3 tools/plot_error_table.py results/error_table/error_table.csv \
        -o results/error_table/error_table.png [--summary]
"""
import argparse
import csv
import sys
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FORMATS = ["fp32", "fp16", "bf16", "flex16_5", "dfp16"]


def load(path):
    """{function: {format: (max_ulp, mean_ulp, bound)}} over the backends (worst max)"""
    data = OrderedDict()
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            fn, fmt = row["function"], row["format"]
            mx, mean, bound = float(row["max_ulp"]), float(row["mean_ulp"]), float(row["bound_ulp"])
            cur = data.setdefault(fn, {}).get(fmt)
            if cur is None or mx > cur[0]:
                data[fn][fmt] = (mx, mean, bound)
    if not data:
        sys.exit("no rows in %s" % path)
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("-o", "--output", default="results/error_table/error_table.png")
    ap.add_argument("--summary", action="store_true",
                    help="also print the maximum ULP errors as a Markdown table, one row a "
                         "function and one column a format")
    args = ap.parse_args()
    data = load(args.csv)
    if args.summary:
        fmts = [f for f in FORMATS if any(f in d for d in data.values())]
        print("| function | " + " | ".join(fmts) + " |")
        print("|---|" + "---:|" * len(fmts))
        for fn, d in data.items():
            print("| %s | %s |" % (fn, " | ".join("%.3f" % d[f][0] if f in d else "" for f in fmts)))
    fns = list(data)
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5), sharey=False)
    width = 0.8 / len(FORMATS)
    for ax, idx, title in ((axes[0], 0, "maximum error"), (axes[1], 1, "mean error")):
        for k, fmt in enumerate(FORMATS):
            xs = [i + (k - 2) * width for i in range(len(fns))]
            ys = [data[fn].get(fmt, (0, 0, 0))[idx] for fn in fns]
            ax.bar(xs, ys, width, label=fmt)
        if idx == 0:
            for i, fn in enumerate(fns):
                b = data[fn].get("fp32", (0, 0, 0))[2]
                ax.plot([i - 0.45, i + 0.45], [b, b], "k--", lw=0.8)
        ax.set_xticks(range(len(fns)))
        ax.set_xticklabels(fns, rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("ulps of the output format (shared exponent: quanta)")
        ax.set_title(title + (" (dashed: fp32 bound of docs/math.md)" if idx == 0 else ""))
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print("wrote", args.output)


if __name__ == "__main__":
    main()
