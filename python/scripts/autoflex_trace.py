#!/usr/bin/env python3
"""Follow one flex16_5 tensor's exponent and maximum through training, with overflows marked.

Trains a network in flex16_5 (through libflexpoint's trainer) and records every write of one of
its tensors (a weight gradient by default) with the library's trace: the exponent Autoflex
chose, the largest |value| the write produced (before saturation), and whether it overflowed.
The first figure is in the style of the Flexpoint paper's (Koster et al. 2017): the tensor's
maximum against the largest value the exponent can represent, 32767 * 2^exp, on a log2 scale.
The same run is then repeated for each Autoflex variant and compared.

A variant is a preset name (published, truemax, exact_init, robust, fixed), optionally with
overrides of its constants for the traced tensor: "published:gamma=0:beta=0" removes the
published safety margin (gamma = 100 steps of 2^e, beta = 3 standard deviations). The published
margin is wide enough that ordinary training rarely overflows; without it, overflows appear, and
the presets differ in how they react (truemax re-aims at once, robust recomputes the write so no
saturated value is kept).

Writes, in --out-dir:
  trace_<variant>.csv    the library's per-write trace (tensor_trace_write_csv)
  losses.csv             training loss per step and variant
  summary.csv            per variant: writes, overflows, saturated elements, clamps, recomputes,
                         mean headroom, final loss
  autoflex_trace.png     the main variant's tensor: max vs representable max, and the exponent
  autoflex_presets.png   the variants compared: exponent and headroom per step

The default run (MLP on 4,096 Fashion-MNIST images, 200 steps, five variants) takes a minute or
two on 2 cores; --fast runs 30 steps on 512 images.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Dict, List

import _common

PRESET_COLORS = {"published": "tab:blue", "truemax": "tab:orange", "exact_init": "tab:green",
                 "robust": "tab:red", "fixed": "tab:gray"}
DEFAULT_COMPARE = ("published,published:gamma=0:beta=0,truemax:gamma=0:beta=0,"
                   "exact_init:gamma=0:beta=0,robust:gamma=0:beta=0")
_INT_FIELDS = ("history_len", "init_exp", "probe_tries", "managed")


def parse_variant(spec: str):
    """"preset[:field=value...]" -> (preset, {field: value}) with AutoflexConfig fields."""
    parts = spec.split(":")
    overrides = {}
    for kv in parts[1:]:
        if "=" not in kv:
            raise SystemExit(f"bad variant {spec!r}: expected preset:field=value")
        k, v = kv.split("=", 1)
        if k in _INT_FIELDS:
            overrides[k] = int(v)
        elif k in ("beta", "gamma", "alpha"):
            overrides[k] = float(v)
        elif k in ("init_mode", "stat_mode", "overflow_mode"):
            overrides[k] = v
        else:
            raise SystemExit(f"bad variant {spec!r}: unknown field {k!r}")
    return parts[0], overrides


def file_tag(spec: str) -> str:
    return spec.replace(":", "_").replace("=", "")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--model", choices=("mlp", "cnn", "resnet20"), default="mlp",
                   help="network (default: %(default)s)")
    _common.add_data_args(p, train_size=4096, test_size=512)
    p.add_argument("--tensor", default="auto",
                   help="name of the traced tensor, e.g. fc1.w.grad, fc2.out, loss.dlogits; "
                        "'auto' = the first weight gradient; 'list' prints the names and exits "
                        "(default: %(default)s)")
    p.add_argument("--steps", type=int, default=200, help="training steps (default: %(default)s)")
    p.add_argument("--preset", default="published",
                   help="variant of the main figure (default: %(default)s)")
    p.add_argument("--compare", default=DEFAULT_COMPARE,
                   help="comma-separated variants to compare (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=64, help="default: %(default)s")
    p.add_argument("--lr", type=float, default=0.02, help="default: %(default)s")
    p.add_argument("--momentum", type=float, default=0.9, help="default: %(default)s")
    p.add_argument("--grad-window-lo", type=int, default=None,
                   help="flex16_5 window start of gradients (default: the library's)")
    p.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    p.add_argument("--threads", type=int, default=0, help="library threads, 0 = default")
    p.add_argument("--out-dir", default="autoflex_trace_out",
                   help="output directory (default: %(default)s)")
    p.add_argument("--fast", action="store_true",
                   help="tiny run for tests: 512 training images, 30 steps")
    args = p.parse_args(argv)
    if args.fast:
        args.train_size, args.test_size, args.steps = 512, 64, 30
    return args


def presets_to_run(args) -> List[str]:
    names = [args.preset] + [p.strip() for p in args.compare.split(",") if p.strip()]
    seen: List[str] = []
    for n in names:
        if n not in seen:
            seen.append(n)
    return seen


def pick_tensor(trainer, wanted: str) -> str:
    names = trainer.tensor_names()
    if wanted != "auto":
        return wanted
    for n in names:
        if n.endswith(".w.grad"):
            return n
    return names[0]


def run_preset(fx, args, train, spec: str, out: str) -> Dict:
    preset, overrides = parse_variant(spec)
    cfg = fx.TrainConfig(model=args.model, fmt="flex16_5", autoflex=preset,
                         batch_size=args.batch_size, lr=args.lr, momentum=args.momentum,
                         seed=args.seed, threads=args.threads,
                         grad_window_lo=args.grad_window_lo)
    trainer = fx.Trainer(cfg, train)
    name = pick_tensor(trainer, args.tensor)
    t = trainer.tensor(name)
    if overrides:
        ac = t.autoflex_config
        for k, v in overrides.items():
            setattr(ac, k, v)
        t.set_autoflex(ac)
    t.trace_enable(True)
    losses = [trainer.step() for _ in range(args.steps)]
    csv_path = os.path.join(out, f"trace_{file_tag(spec)}.csv")
    t.write_trace_csv(csv_path)
    tr = t.trace_arrays()
    window = t.exp_window
    stats = t.stats
    t.trace_enable(False)
    del t, trainer
    return {"preset": spec, "base": preset, "tensor": name, "trace": tr, "losses": losses, "csv": csv_path,
            "window": window, "stats": stats}


def headroom_bits(tr) -> List[float]:
    """log2(representable max / true max) per write: negative means the write overflowed."""
    out = []
    for e, m in zip(tr["exp"], tr["true_max"]):
        out.append(math.log2(32767.0 * 2.0 ** int(e) / m) if m > 0 else float("nan"))
    return out


def plot_main(plt, res: Dict, path: str, args) -> str:
    tr = res["trace"]
    w = tr["write"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7.5, 6.2), dpi=110, sharex=True,
                                   gridspec_kw={"height_ratios": [2, 1]})
    rep = [32767.0 * 2.0 ** int(e) for e in tr["exp"]]
    ax1.step(w, rep, where="mid", color="tab:gray", lw=1.5,
             label=r"representable max $32767\cdot 2^{e}$")
    ax1.plot(w, tr["true_max"], color="tab:blue", lw=1.2, label="max |value| (before saturation)")
    ax1.plot(w, tr["stored_max"], color="tab:cyan", lw=0.8, ls="--", label="max |stored value|")
    ov = tr["overflow"]
    if ov.any():
        ax1.scatter(w[ov], tr["true_max"][ov], marker="x", color="red", zorder=5, s=36,
                    label=f"overflow ({int(ov.sum())} writes)")
    ax1.set_yscale("log", base=2)
    ax1.set_ylabel("magnitude")
    ax1.grid(True, alpha=0.3, which="both")
    ax1.legend(fontsize=8, loc="best")
    ax1.set_title(f"{res['tensor']} in flex16_5, Autoflex '{res['preset']}' "
                  f"({args.model}, {args.dataset})")
    ax2.step(w, tr["exp"], where="mid", color="tab:blue", label="exponent e")
    cl = tr["clamped"]
    if cl.any():
        ax2.scatter(w[cl], tr["exp"][cl], marker="s", color="tab:orange", s=16, zorder=5,
                    label="clamped to window")
    if ov.any():
        ax2.scatter(w[ov], tr["exp"][ov], marker="x", color="red", s=30, zorder=5,
                    label="overflow")
    lo, hi = res["window"]
    ax2.axhline(lo, color="k", lw=0.6, ls=":")
    ax2.axhline(hi, color="k", lw=0.6, ls=":")
    ax2.set_ylabel("exponent")
    ax2.set_xlabel("write (training step)")
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_presets(plt, results: List[Dict], path: str, args) -> str:
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7.5, 6.2), dpi=110, sharex=True)
    seen: Dict[str, int] = {}
    for r in results:
        tr = r["trace"]
        c = PRESET_COLORS.get(r["base"])
        ls = ("-", "--", ":", "-.")[seen.get(r["base"], 0) % 4]
        seen[r["base"]] = seen.get(r["base"], 0) + 1
        n_ov = int(tr["overflow"].sum())
        n_sat = int(tr["saturated"].sum())
        ax1.step(tr["write"], tr["exp"], where="mid", color=c, ls=ls,
                 label=f"{r['preset']} ({n_ov} overflows, {n_sat} kept saturated)")
        hb = headroom_bits(tr)
        ax2.plot(tr["write"], hb, color=c, ls=ls, lw=1.0)
        ov = tr["overflow"]
        if ov.any():
            ax2.scatter(tr["write"][ov], [hb[i] for i in range(len(hb)) if ov[i]], marker="x",
                        color=c, s=28, zorder=5)
    ax2.axhline(0.0, color="red", lw=0.8, ls="--")
    ax1.set_ylabel("exponent e")
    ax1.set_title(f"Autoflex variants on {results[0]['tensor']} ({args.model}, {args.dataset})")
    ax1.grid(True, alpha=0.3)
    ax1.legend(fontsize=7)
    ax2.set_ylabel("headroom, bits\n" + r"$\log_2(32767\cdot 2^e / \max|x|)$")
    ax2.set_xlabel("write (training step)")
    ax2.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def summary_rows(results: List[Dict]) -> List[dict]:
    rows = []
    for r in results:
        tr = r["trace"]
        hb = [h for h in headroom_bits(tr) if not math.isnan(h)]
        rows.append({
            "variant": r["preset"], "tensor": r["tensor"], "writes": int(len(tr["write"])),
            "overflow_writes": int(tr["overflow"].sum()),
            "saturated_elements": int(tr["saturated"].sum()),
            "clamped_writes": int(tr["clamped"].sum()),
            "recomputed_writes": int(tr["recomputed"].sum()),
            "underflow_elements": int(tr["underflow"].sum()),
            "mean_headroom_bits": (sum(hb) / len(hb)) if hb else "",
            "final_exp": int(tr["exp"][-1]) if len(tr["exp"]) else "",
            "final_loss": r["losses"][-1] if r["losses"] else "",
            "mean_loss_last_10": (sum(r["losses"][-10:]) / len(r["losses"][-10:]))
            if r["losses"] else "",
        })
    return rows


def run(args: argparse.Namespace) -> Dict[str, str]:
    fx = _common.import_flexpoint()
    plt = _common.pyplot()
    out = _common.ensure_dir(args.out_dir)
    train, _ = _common.load_data(fx, args, seed=args.seed)
    print(f"train: {train}", flush=True)
    if args.tensor == "list":
        tr = fx.Trainer(fx.TrainConfig(model=args.model, fmt="flex16_5",
                                       batch_size=args.batch_size), train)
        print("\n".join(tr.tensor_names()))
        return {}
    results = []
    for preset in presets_to_run(args):
        r = run_preset(fx, args, train, preset, out)
        tr = r["trace"]
        print(f"{preset:32s} {r['tensor']}: {len(tr['write'])} writes, "
              f"{int(tr['overflow'].sum())} overflows, {int(tr['saturated'].sum())} saturated "
              f"kept, exp {int(tr['exp'].min())}.."
              f"{int(tr['exp'].max())}, final loss {r['losses'][-1]:.4f}", flush=True)
        results.append(r)
    files = {f"trace_{file_tag(r['preset'])}_csv": r["csv"] for r in results}
    loss_rows = [{"variant": r["preset"], "step": i + 1, "loss": l}
                 for r in results for i, l in enumerate(r["losses"])]
    files["losses_csv"] = _common.write_csv(os.path.join(out, "losses.csv"), loss_rows,
                                            ["variant", "step", "loss"])
    files["summary_csv"] = _common.write_csv(os.path.join(out, "summary.csv"),
                                             summary_rows(results))
    files["trace_png"] = plot_main(plt, results[0], os.path.join(out, "autoflex_trace.png"), args)
    files["presets_png"] = plot_presets(plt, results, os.path.join(out, "autoflex_presets.png"),
                                        args)
    _common.print_files(files.values())
    return files


def main(argv=None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
