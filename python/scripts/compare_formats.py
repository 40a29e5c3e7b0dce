#!/usr/bin/env python3
"""Train the same network on the same data in several number formats, side by side, and plot it.

Every run uses the same seed, hence the same initial weights (drawn once in fp32, then
converted), the same batch order and augmentation: the differences between the curves come from
the number format alone. All training happens in libflexpoint (fx_trainer_*), through the binding.

Writes, in --out-dir:
  epochs.csv    one row per format and epoch (loss, accuracy, time, loss scale, skipped steps)
  summary.csv   one row per format: final test accuracy, gap to fp32, time ratio to fp32
  accuracy.png  test accuracy against epoch, one line per format
  loss.png      training loss against epoch, one line per format

The default run (MLP, 10,000 Fashion-MNIST training images, 3 epochs, five formats) takes a few
minutes on 2 cores; --fast runs 1 epoch on 512 images.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Dict, List

import _common

FORMAT_STYLE = {"fp32": ("black", "-"), "fp16": ("tab:orange", "--"), "bf16": ("tab:green", "-."),
                "flex16_5": ("tab:blue", "-"), "dfp16": ("tab:purple", ":")}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--formats", default="fp32,fp16,bf16,flex16_5,dfp16",
                   help="comma-separated formats (default: %(default)s)")
    p.add_argument("--model", choices=("mlp", "cnn", "resnet20"), default="mlp",
                   help="network (default: %(default)s)")
    _common.add_data_args(p)
    p.add_argument("--epochs", type=int, default=3, help="epochs (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=128, help="default: %(default)s")
    p.add_argument("--lr", type=float, default=0.02, help="learning rate (default: %(default)s)")
    p.add_argument("--momentum", type=float, default=0.9, help="default: %(default)s")
    p.add_argument("--weight-decay", type=float, default=0.0, help="default: %(default)s")
    p.add_argument("--lr-schedule", choices=("constant", "cosine", "step"), default="constant",
                   help="default: %(default)s")
    p.add_argument("--autoflex", default="published",
                   help="Autoflex preset of the flex16_5 run (default: %(default)s)")
    p.add_argument("--no-master-weights", action="store_true",
                   help="keep the weights only in the format (no fp32 master copy)")
    p.add_argument("--stochastic-rounding", action="store_true",
                   help="round weight writes stochastically (with --no-master-weights)")
    p.add_argument("--loss-scaling", choices=("auto", "on", "off"), default="auto",
                   help="dynamic loss scaling; auto = fp16 only (default: %(default)s)")
    p.add_argument("--augment", action="store_true", help="random crop + flip (CIFAR)")
    p.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    p.add_argument("--threads", type=int, default=0,
                   help="library threads, 0 = default (default: %(default)s)")
    p.add_argument("--out-dir", default="compare_formats_out",
                   help="output directory (default: %(default)s)")
    p.add_argument("--fast", action="store_true",
                   help="tiny run for tests: 512 training / 256 test images, 1 epoch")
    args = p.parse_args(argv)
    if args.fast:
        args.train_size, args.test_size, args.epochs = 512, 256, 1
        args.batch_size = min(args.batch_size, 64)
    return args


def run(args: argparse.Namespace) -> Dict[str, str]:
    fx = _common.import_flexpoint()
    plt = _common.pyplot()
    formats = [fx.fmt_name(f.strip()) for f in args.formats.split(",") if f.strip()]
    out = _common.ensure_dir(args.out_dir)
    train, test = load_and_report(fx, args)

    rows: List[dict] = []
    curves: Dict[str, List] = {}
    for fmt in formats:
        cfg = fx.TrainConfig(
            model=args.model, fmt=fmt, master_weights=not args.no_master_weights,
            loss_scaling={"auto": "auto", "on": True, "off": False}[args.loss_scaling],
            stochastic_rounding=args.stochastic_rounding, autoflex=args.autoflex,
            batch_size=args.batch_size, lr=args.lr, momentum=args.momentum,
            weight_decay=args.weight_decay, lr_schedule=args.lr_schedule, epochs=args.epochs,
            augment=args.augment, seed=args.seed, threads=args.threads)
        trainer = fx.Trainer(cfg, train, test)
        metrics = []
        t0 = time.time()
        for _ in range(args.epochs):
            m = trainer.epoch()
            metrics.append(m)
            print(f"{fmt:9s} epoch {m.epoch}: loss {m.train_loss:.4f}  test acc "
                  f"{m.test_accuracy:.4f}  {m.seconds:.1f} s  {m.images_per_second:.0f} img/s"
                  + (f"  skipped {m.skipped_steps}" if m.skipped_steps else ""), flush=True)
            rows.append({"format": fmt, **m.as_dict()})
        curves[fmt] = metrics
        print(f"{fmt:9s} done in {time.time() - t0:.1f} s", flush=True)
        del trainer

    files = {"epochs_csv": _common.write_csv(os.path.join(out, "epochs.csv"), rows)}
    files["summary_csv"] = _common.write_csv(os.path.join(out, "summary.csv"), summary(curves))
    files["accuracy_png"] = plot(plt, curves, "test_accuracy", "test accuracy",
                                 os.path.join(out, "accuracy.png"), args)
    files["loss_png"] = plot(plt, curves, "train_loss", "training loss",
                             os.path.join(out, "loss.png"), args)
    _common.print_files(files.values())
    return files


def load_and_report(fx, args):
    train, test = _common.load_data(fx, args, seed=args.seed)
    print(f"train: {train}\ntest:  {test}", flush=True)
    return train, test


def summary(curves: Dict[str, list]) -> List[dict]:
    ref = curves.get("fp32")
    ref_acc = ref[-1].test_accuracy if ref else None
    ref_time = sum(m.seconds for m in ref) if ref else None
    rows = []
    for fmt, ms in curves.items():
        secs = sum(m.seconds for m in ms)
        rows.append({
            "format": fmt, "epochs": len(ms), "final_test_accuracy": ms[-1].test_accuracy,
            "final_train_loss": ms[-1].train_loss,
            "gap_to_fp32": (ms[-1].test_accuracy - ref_acc) if ref_acc is not None else "",
            "train_seconds": secs,
            "time_ratio_to_fp32": (secs / ref_time) if ref_time else "",
            "skipped_steps": sum(m.skipped_steps for m in ms),
            "nonfinite_losses": sum(m.nonfinite_losses for m in ms),
        })
    return rows


def plot(plt, curves: Dict[str, list], field: str, label: str, path: str,
         args: argparse.Namespace) -> str:
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    for fmt, ms in curves.items():
        color, ls = FORMAT_STYLE.get(fmt, (None, "-"))
        ax.plot([m.epoch for m in ms], [getattr(m, field) for m in ms], ls, marker="o",
                color=color, label=fmt)
    ax.set_xlabel("epoch")
    ax.set_ylabel(label)
    ax.set_title(f"{args.model} on {args.dataset}: {label}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    if curves:
        ax.set_xticks(sorted({m.epoch for ms in curves.values() for m in ms}))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
