"""Training steps, flexpoint against PyTorch, in one process and in alternation.

    FLEXPOINT_LIBRARY=build/release/libflexpoint.so PYTHONPATH=python \
        /usr/bin/python3 bench/steps_vs_pytorch.py [threads] [rounds] [steps]

The speed goal against PyTorch is stated for epochs, and an epoch of ours and one of PyTorch's
run one after the other (bench/train_speed.sh) lie minutes apart, over which this kind of VM
drifts by 10-40 %: one ratio can then read 0.8 or 1.2 for the same code. This script takes the
comparison step by step instead. It builds flexpoint's trainer for each format (the Python
binding's Trainer, the model and data flexpoint-train builds from the same options) and
PyTorch's model in fp32 and with bf16 autocast (tools/pytorch_baseline.py's models, data
and training step, SGD with momentum, a host sync per step as the loss read-out), runs three
warm-up steps of each, then `rounds` rounds in which every configuration takes `steps` steps
in turn (the order reversed every other round). Each round's ratio of a configuration's step
to PyTorch bf16's step of the same round is taken, and the median of those ratios printed,
with the median step in ms and the ratio to PyTorch's fp32 step likewise. An epoch of either
side is its steps plus a permutation of the data, so these ratios are what the epochs' would be
without the drift.

Settings (environment): BENCH_MODEL, an image model both sides know (mlp, cnn, cnn<C1>-<C2>-<F>,
resnet<6n+2>[x<K>]; default cnn); BENCH_PAD, zero pixels per side as flexpoint-train --pad
(0-64; default 0, 2 for ResNet-20 at CIFAR's 32 x 32); BENCH_IMAGES, the training images both
sides cycle through (at least one batch of 128; default 6400); BENCH_FORMATS, flexpoint's
formats (a space- or comma-separated subset of fp32 fp16 bf16 flex16_5 dfp16; default all).
Fashion-MNIST from FLEXPOINT_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist. Bad
arguments or settings exit with status 2 and a message before anything is built. Needs
Debian's python3-torch and the flexpoint binding (pip-installed, or PYTHONPATH=python with
FLEXPOINT_LIBRARY naming the library)."""
from __future__ import annotations

import os
import pathlib
import statistics
import sys
import time
from typing import Callable, Dict, List

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import torch  # noqa: E402  (after the path: pytorch_baseline is tools/'s)
import torch.nn.functional as F  # noqa: E402

import flexpoint as fx  # noqa: E402
import pytorch_baseline as pb  # noqa: E402

FORMATS = ("fp32", "fp16", "bf16", "flex16_5", "dfp16")
BATCH = 128
WARMUP = 3


def refuse(message: str) -> None:
    """Exit with status 2 (bad usage), as the C benchmarks do."""
    print(f"steps_vs_pytorch: {message}", file=sys.stderr)
    raise SystemExit(2)


def env_int(name: str, default: int, lo: int, hi: int) -> int:
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = lo - 1
    if not lo <= value <= hi:
        refuse(f"{name}='{text}': want a whole number from {lo} to {hi}")
    return value


def settings() -> Dict[str, object]:
    model = os.environ.get("BENCH_MODEL", "") or "cnn"
    if pb.image_model_shape(model) is None:
        refuse(f"BENCH_MODEL='{model}': want mlp, cnn, cnn<C1>-<C2>-<F>, resnet<6n+2> or "
               "resnet<6n+2>x<K>")
    formats = os.environ.get("BENCH_FORMATS", "").replace(",", " ").split() or list(FORMATS)
    for f in formats:
        if f not in FORMATS:
            refuse(f"BENCH_FORMATS: unknown format '{f}' (want some of {' '.join(FORMATS)})")
    if len(set(formats)) != len(formats):
        refuse("BENCH_FORMATS names a format twice")
    return {"model": model, "formats": formats,
            "pad": env_int("BENCH_PAD", 0, 0, 64),
            "images": env_int("BENCH_IMAGES", 6400, BATCH, 60000),
            "dir": os.environ.get("FLEXPOINT_FASHION_MNIST_DIR", pb.DEFAULT_DIR)}


def flexpoint_step(s: Dict[str, object], fmt: str, threads: int) -> Callable[[], object]:
    """One optimiser step of flexpoint's trainer for fmt, on the next batch of the subset."""
    data = fx.data.fashion_mnist(s["dir"]).subset(0, s["images"])
    if s["pad"]:
        data = data.pad(s["pad"])
    trainer = fx.train.Trainer(fx.train.TrainConfig(model=s["model"], fmt=fmt, threads=threads),
                               data)
    return trainer.step


def torch_step(s: Dict[str, object], x: torch.Tensor, y: torch.Tensor,
               bf16: bool) -> Callable[[], object]:
    """One step of pytorch_baseline.run's loop (its model, SGD, autocast and loss read-out) on
    the next batch of a seeded permutation, drawn again when the subset is used up."""
    torch.manual_seed(0)
    model = pb.make_model(s["model"], x.shape[-1])
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    steps = len(x) // BATCH
    state = {"perm": torch.randperm(len(x), generator=gen), "s": 0}

    def step() -> float:
        if state["s"] == steps:
            state["perm"], state["s"] = torch.randperm(len(x), generator=gen), 0
        idx = state["perm"][state["s"] * BATCH:(state["s"] + 1) * BATCH]
        state["s"] += 1
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(x[idx])
            loss = F.cross_entropy(out.float(), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def timed(step: Callable[[], object], n: int) -> float:
    """Wall ms a step over n steps."""
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - t0) * 1e3 / n


def main() -> int:
    usage = "usage: steps_vs_pytorch.py [threads >= 1] [rounds >= 1] [steps >= 1]"
    try:
        args = [int(a) for a in sys.argv[1:4]]
    except ValueError:
        refuse(usage)
    if len(sys.argv) > 4:
        refuse(usage)
    threads, rounds, steps = (args + [2, 10, 2][len(args):])[:3]
    if threads < 1 or rounds < 1 or steps < 1:
        refuse(usage)
    s = settings()
    fx.set_num_threads(threads)
    torch.set_num_threads(threads)
    x, y = pb.load(s["dir"], s["pad"])[0]
    x, y = x[:s["images"]], y[:s["images"]]
    configs: Dict[str, Callable[[], object]] = {}
    for fmt in s["formats"]:
        configs[f"flexpoint {fmt}"] = flexpoint_step(s, fmt, threads)
    configs["pytorch fp32"] = torch_step(s, x, y, False)
    configs["pytorch bf16"] = torch_step(s, x, y, True)
    print(f"steps_vs_pytorch: {s['model']} on Fashion-MNIST (pad {s['pad']}, {s['images']} "
          f"images), batch {BATCH}, {threads} thread(s), {rounds} rounds of {steps} step(s) "
          f"after {WARMUP}; flexpoint {fx.version()}, PyTorch {torch.__version__}")
    for step in configs.values():
        timed(step, WARMUP)
    ms: Dict[str, List[float]] = {name: [] for name in configs}
    names = list(configs)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            ms[name].append(timed(configs[name], steps))
    print(f"{'config':<20} {'ms a step':>10} {'range':>17} {'/ pt-bf16':>10} {'/ pt-fp32':>10}")
    for name in names:
        to_bf16 = [a / b for a, b in zip(ms[name], ms["pytorch bf16"])]
        to_fp32 = [a / b for a, b in zip(ms[name], ms["pytorch fp32"])]
        rng = f"{min(ms[name]):.1f}-{max(ms[name]):.1f}"
        print(f"{name:<20} {statistics.median(ms[name]):10.1f} {rng:>17} "
              f"{statistics.median(to_bf16):9.3f}x {statistics.median(to_fp32):9.3f}x")
    print("(median over the rounds of each round's ratio; below 1: faster than PyTorch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
