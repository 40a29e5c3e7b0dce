"""Batch norm in training mode, flexpoint against PyTorch, in one process.

    FLEXPOINT_LIBRARY=build/release PYTHONPATH=python \
        /usr/bin/python3 bench/bn_vs_pytorch.py [threads] [repetitions] [rounds]

At ResNet-20's three activation shapes (batch 128: 16 x 32^2, 32 x 16^2, 64 x 8^2), or
BENCH_LAYER=C,HW for one of your own, times the forward pass (training mode: batch statistics,
running statistics updated) and the backward pass (dx, dgamma, dbeta) of flexpoint's
tensor_batchnorm in fp32, bf16, flex16_5 and dfp16 (outputs in the input's format, gamma and
beta fp32, as the trainer holds them) and of PyTorch's BatchNorm2d in fp32 and bf16 (every
tensor in that dtype, what autocast hands it after a bf16 convolution; the backward through
autograd, whose bookkeeping is a few microseconds). The configurations take turns, `rounds`
times, so that the machine's drift falls on all alike; each prints its best time over all
rounds of `repetitions` calls, in ms, and the ratio of PyTorch bf16's time to it (above 1:
faster than PyTorch's bf16). Inputs are standard-normal; the times do not depend on the values.
Needs Debian's python3-torch and the flexpoint binding (pip-installed, or PYTHONPATH=python
with FLEXPOINT_LIBRARY naming the build)."""
from __future__ import annotations

import os
import sys
from typing import Callable, Dict, List, Tuple

import numpy as np
import torch

import flexpoint as fx
from pytorch_layers import best_of  # this folder's: best wall ms of n calls

FX_FORMATS = ("fp32", "bf16", "flex16_5", "dfp16")
SHAPES = ((16, 32), (32, 16), (64, 8))
BATCH = 128


def refuse(message: str) -> None:
    """Exit with status 2 (bad usage), as the C benchmarks do."""
    print(f"bn_vs_pytorch: {message}", file=sys.stderr)
    raise SystemExit(2)


def shapes_from_env() -> List[Tuple[int, int]]:
    spec = os.environ.get("BENCH_LAYER", "")
    if not spec:
        return list(SHAPES)
    try:
        c, hw = (int(p) for p in spec.split(","))
    except ValueError:
        refuse(f"BENCH_LAYER='{spec}': want C,HW (two positive integers)")
    if c < 1 or hw < 1 or c * hw * hw > 1 << 22:
        refuse(f"BENCH_LAYER='{spec}': want C,HW positive with C*HW*HW <= 2^22")
    return [(c, hw)]


def flexpoint_passes(fmt: str, x: np.ndarray, dy: np.ndarray
                     ) -> Tuple[Callable[[], object], Callable[[], object]]:
    c = x.shape[1]
    xt = fx.Tensor(x.shape, fmt).assign(x)
    dyt = fx.Tensor(x.shape, fmt).assign(dy)
    gamma = fx.Tensor((c,), "fp32").assign(np.ones(c, np.float32))
    beta = fx.Tensor((c,), "fp32").assign(np.zeros(c, np.float32))
    rm, rv = np.zeros(c, np.float32), np.ones(c, np.float32)
    y = fx.Tensor(x.shape, fmt)
    _, sm, si = fx.batchnorm(xt, gamma, beta, rm, rv, out=y)
    dx = fx.Tensor(x.shape, fmt)
    dgamma, dbeta = fx.Tensor((c,), "fp32"), fx.Tensor((c,), "fp32")

    def fwd() -> object:
        return fx.batchnorm(xt, gamma, beta, rm, rv, out=y)

    def bwd() -> object:
        return fx.batchnorm_backward(dyt, xt, gamma, sm, si, dx=dx, dgamma=dgamma, dbeta=dbeta)
    return fwd, bwd


def torch_passes(dtype: torch.dtype, x: np.ndarray, dy: np.ndarray
                 ) -> Tuple[Callable[[], object], Callable[[], object]]:
    xt = torch.from_numpy(x).to(dtype).requires_grad_(True)
    dyt = torch.from_numpy(dy).to(dtype)
    bn = torch.nn.BatchNorm2d(x.shape[1]).to(dtype)
    bn.train()
    y = bn(xt)
    wrt = [xt, bn.weight, bn.bias]

    def fwd() -> object:
        return bn(xt)

    def bwd() -> object:
        return torch.autograd.grad(y, wrt, dyt, retain_graph=True)
    return fwd, bwd


def main() -> int:
    usage = "usage: bn_vs_pytorch.py [threads >= 1] [repetitions >= 1] [rounds >= 1]"
    try:
        args = [int(a) for a in sys.argv[1:4]]
    except ValueError:
        refuse(usage)
    threads, reps, rounds = (args + [1, 10, 3][len(args):])[:3]
    if threads < 1 or reps < 1 or rounds < 1:
        refuse(usage)
    shapes = shapes_from_env()
    fx.set_num_threads(threads)
    torch.set_num_threads(threads)
    print(f"bn_vs_pytorch: batch {BATCH}, {threads} thread(s), best of {rounds} rounds x "
          f"{reps}; ms, and PyTorch bf16's time over each (above 1: faster); PyTorch "
          f"{torch.__version__}")
    print(f"{'shape':<13} {'config':<18} {'forward':>9} {'backward':>9} {'pt-bf16/fwd':>12} "
          f"{'pt-bf16/bwd':>12}")
    rng = np.random.default_rng(0)
    for c, hw in shapes:
        x = rng.standard_normal((BATCH, c, hw, hw), dtype=np.float32)
        dy = (rng.standard_normal((BATCH, c, hw, hw), dtype=np.float32) * 0.01).astype(np.float32)
        configs: Dict[str, Tuple[Callable[[], object], Callable[[], object]]] = {}
        for fmt in FX_FORMATS:
            configs[f"flexpoint {fmt}"] = flexpoint_passes(fmt, x, dy)
        configs["pytorch fp32"] = torch_passes(torch.float32, x, dy)
        configs["pytorch bf16"] = torch_passes(torch.bfloat16, x, dy)
        best = {name: [float("inf"), float("inf")] for name in configs}
        for _ in range(rounds):
            for name, (fwd, bwd) in configs.items():
                best[name][0] = min(best[name][0], best_of(reps, fwd))
                best[name][1] = min(best[name][1], best_of(reps, bwd))
        ref = best["pytorch bf16"]
        for name, (f, b) in best.items():
            shape = f"{c} x {hw}x{hw}"
            print(f"{shape:<13} {name:<18} {f:9.3f} {b:9.3f} {ref[0] / f:11.2f}x "
                  f"{ref[1] / b:11.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
