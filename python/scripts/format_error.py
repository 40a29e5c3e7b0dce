#!/usr/bin/env python3
"""Relative quantisation error of each 16-bit format against the magnitude of the value.

Draws values from a chosen distribution, writes them once into a tensor of each format through
libflexpoint (fp32 -> format, as a training write would), reads them back, and plots
|q - x| / |x| against |x| on log-log axes, binned by magnitude. The picture shows the formats'
characters:
  fp16      ~2^-11 relative error, but only between 2^-14 and 65504: below, subnormals lose
            relative precision and then flush to zero; above, values become inf;
  bf16      the range of fp32 with coarse 2^-8 steps everywhere;
  flex16_5  one shared exponent e for the whole tensor: a uniform absolute grid of step 2^e,
            so the relative error falls as 2^e / |x| and values below 2^(e-1) become 0;
  dfp16     the same grid with the exponent chosen exactly for each write.

Writes, in --out-dir:
  format_error.csv           per format and magnitude bin: count, median / 90th percentile /
                             max relative error, fraction flushed to zero, fraction inf or
                             saturated
  format_error_summary.csv   per format: exponent (shared-exponent formats), median and max
                             relative error, counts of zeros, infs and saturated values
  format_error.png           the plot

The default run (200,000 log-uniform values over 1e-9 .. 1e6) takes seconds; --fast uses
20,000.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List

import numpy as np

import _common

STYLE = {"fp32": ("black", "-"), "fp16": ("tab:orange", "-"), "bf16": ("tab:green", "-"),
         "flex16_5": ("tab:blue", "-"), "dfp16": ("tab:purple", "--")}
DISTRIBUTIONS = ("loguniform", "lognormal", "normal", "laplace", "uniform")
ERR_FLOOR = 2.0 ** -30  # exact results are drawn at this level on the log axis


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--distribution", choices=DISTRIBUTIONS, default="loguniform",
                   help="distribution of |x| (random signs): loguniform over [--low, --high]; "
                        "lognormal(0, --sigma); normal/laplace with scale --scale; uniform "
                        "over [--low, --high] (default: %(default)s)")
    p.add_argument("--low", type=float, default=1e-9, help="default: %(default)s")
    p.add_argument("--high", type=float, default=1e6, help="default: %(default)s")
    p.add_argument("--sigma", type=float, default=3.0, help="lognormal sigma (default: 3)")
    p.add_argument("--scale", type=float, default=1.0, help="normal/laplace scale (default: 1)")
    p.add_argument("--n", type=int, default=200_000, help="values (default: %(default)s)")
    p.add_argument("--formats", default="fp16,bf16,flex16_5,dfp16",
                   help="comma-separated formats (default: %(default)s)")
    p.add_argument("--flex-window-lo", default="auto",
                   help="flex16_5 exponent window start, or 'auto' to centre the window on the "
                        "data's exact exponent (default: %(default)s)")
    p.add_argument("--autoflex", default="published",
                   help="Autoflex preset of the flex16_5 tensor (default: %(default)s)")
    p.add_argument("--bins", type=int, default=60, help="magnitude bins (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    p.add_argument("--out-dir", default="format_error_out",
                   help="output directory (default: %(default)s)")
    p.add_argument("--fast", action="store_true", help="tiny run for tests: 20,000 values")
    args = p.parse_args(argv)
    if args.fast:
        args.n = min(args.n, 20_000)
    return args


def sample(args) -> np.ndarray:
    rng = np.random.default_rng(args.seed)
    n = args.n
    if args.distribution == "loguniform":
        mag = np.exp(rng.uniform(np.log(args.low), np.log(args.high), n))
    elif args.distribution == "lognormal":
        mag = rng.lognormal(0.0, args.sigma, n)
    elif args.distribution == "normal":
        mag = np.abs(rng.normal(0.0, args.scale, n))
    elif args.distribution == "laplace":
        mag = np.abs(rng.laplace(0.0, args.scale, n))
    else:
        mag = rng.uniform(args.low, args.high, n)
    signs = rng.choice(np.array([-1.0, 1.0]), n)
    x = (signs * mag).astype(np.float32)
    return x[x != 0]


def exact_exponent(m: float) -> int:
    """Smallest e with round(m * 2^-e) <= 32767 (docs/formats.md), for the 'auto' flex window."""
    e = int(np.floor(np.log2(m))) - 14
    if np.rint(m * 2.0 ** -e) > 32767:
        e += 1
    return e


def quantise(fx, x: np.ndarray, fmt: str, args):
    kw = {}
    if fmt == "flex16_5":
        if args.flex_window_lo == "auto":
            lo = exact_exponent(float(np.max(np.abs(x)))) - 16
            kw["window_lo"] = int(min(max(lo, -128), 96))
        else:
            kw["window_lo"] = int(args.flex_window_lo)
        kw["autoflex"] = args.autoflex
    t = fx.from_numpy(x, fmt, **kw)
    return t.numpy(), t


def errors(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    x64, q64 = x.astype(np.float64), q.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.abs(q64 - x64) / np.abs(x64)


def bin_rows(fmt: str, x: np.ndarray, q: np.ndarray, rel: np.ndarray, edges: np.ndarray,
             sat_level: float) -> List[dict]:
    ax = np.abs(x.astype(np.float64))
    idx = np.clip(np.searchsorted(edges, ax, side="right") - 1, 0, len(edges) - 2)
    rows = []
    for b in range(len(edges) - 1):
        sel = idx == b
        n = int(sel.sum())
        if n == 0:
            continue
        r = rel[sel]
        finite = r[np.isfinite(r)]
        big = (~np.isfinite(q[sel])) | (np.abs(q[sel]) >= sat_level)
        rows.append({
            "format": fmt, "bin_lo": float(edges[b]), "bin_hi": float(edges[b + 1]), "count": n,
            "median_rel_err": float(np.median(finite)) if finite.size else float("inf"),
            "p90_rel_err": float(np.percentile(finite, 90)) if finite.size else float("inf"),
            "max_rel_err": float(finite.max()) if finite.size else float("inf"),
            "frac_zero": float(np.mean(q[sel] == 0)),
            "frac_inf_or_saturated": float(np.mean(big)),
        })
    return rows


def run(args: argparse.Namespace) -> Dict[str, str]:
    fx = _common.import_flexpoint()
    plt = _common.pyplot()
    out = _common.ensure_dir(args.out_dir)
    x = sample(args)
    ax = np.abs(x.astype(np.float64))
    edges = np.geomspace(ax.min(), ax.max() * (1 + 1e-12), args.bins + 1)
    formats = [fx.fmt_name(f.strip()) for f in args.formats.split(",") if f.strip()]

    bins: List[dict] = []
    summary: List[dict] = []
    per_fmt = {}
    for fmt in formats:
        q, t = quantise(fx, x, fmt, args)
        rel = errors(x, q)
        e = t.exp
        sat_level = 32767.0 * 2.0 ** e if e is not None else float("inf")
        rows = bin_rows(fmt, x, q, rel, edges, sat_level)
        bins += rows
        finite = rel[np.isfinite(rel)]
        summary.append({
            "format": fmt, "exp": "" if e is None else e,
            "window": "" if fmt != "flex16_5" else "%d..%d" % t.exp_window,
            "median_rel_err": float(np.median(finite)) if finite.size else "",
            "max_rel_err": float(finite.max()) if finite.size else "",
            "zeros": int(np.sum(q == 0)), "infs": int(np.sum(~np.isfinite(q))),
            "saturated": int(t.stats["saturated"]) if t.is_shared_exponent else "",
        })
        per_fmt[fmt] = (rows, e)
        print(f"{fmt:9s} exp={'-' if e is None else e:>4}  median rel err "
              f"{summary[-1]['median_rel_err']:.3g}  zeros {summary[-1]['zeros']}  "
              f"inf {summary[-1]['infs']}", flush=True)

    files = {
        "bins_csv": _common.write_csv(os.path.join(out, "format_error.csv"), bins),
        "summary_csv": _common.write_csv(os.path.join(out, "format_error_summary.csv"), summary),
        "png": plot(plt, per_fmt, args, os.path.join(out, "format_error.png"), ax),
    }
    _common.print_files(files.values())
    return files


def plot(plt, per_fmt: Dict, args, path: str, ax_values: np.ndarray) -> str:
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    top = 1e1
    for fmt, (rows, e) in per_fmt.items():
        color, ls = STYLE.get(fmt, (None, "-"))
        mid = np.array([np.sqrt(r["bin_lo"] * r["bin_hi"]) for r in rows])
        med = np.array([r["median_rel_err"] for r in rows])
        mx = np.array([r["max_rel_err"] for r in rows])
        label = fmt if e is None else f"{fmt} (e={e})"
        ax.plot(mid, np.clip(np.where(np.isfinite(med), med, top), ERR_FLOOR, top), ls,
                color=color, lw=1.6, label=label + ", median")
        ax.fill_between(mid, np.clip(med, ERR_FLOOR, top),
                        np.clip(np.where(np.isfinite(mx), mx, top), ERR_FLOOR, top),
                        color=color, alpha=0.12, lw=0)
        bad = np.array([r["frac_inf_or_saturated"] > 0.5 for r in rows])
        if bad.any():
            ax.scatter(mid[bad], np.full(bad.sum(), top * 0.8), marker="^", color=color, s=20)
        if e is not None:
            ax.axvline(2.0 ** e, color=color, lw=0.7, ls=":")
    for v, txt in ((2.0 ** -24, "fp16 min subnormal"), (2.0 ** -14, "fp16 min normal"),
                   (65504.0, "fp16 max")):
        if "fp16" in per_fmt and ax_values.min() < v < ax_values.max():
            ax.axvline(v, color="tab:orange", lw=0.7, ls="--")
            ax.text(v, ERR_FLOOR * 4, " " + txt, rotation=90, fontsize=7, color="tab:orange",
                    va="bottom")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(ERR_FLOOR / 2, top * 2)
    ax.set_xlabel("|x|")
    ax.set_ylabel("relative error |q - x| / |x|  (band: median..max per bin)")
    ax.set_title(f"Quantisation error by magnitude ({args.distribution}, n={args.n}); "
                 "dotted: 2^e of shared exponents; ^: inf/saturated")
    ax.title.set_fontsize(9)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
