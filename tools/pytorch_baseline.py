#!/usr/bin/python3
"""PyTorch baseline for the flexpoint format comparison.

Trains the same MLP (784-256-256-10) and small CNN as flexpoint-train on Fashion-MNIST with the
same hyperparameters (batch 128, SGD lr 0.02, momentum 0.9, PyTorch's default initialisation,
per-channel normalisation from the training set, the last partial batch dropped) in fp32 and
with bf16 autocast, on the CPU (or with --device cuda on a GPU, next to flexpoint-train
--device cuda), and prints the same summary table. It is an outside reference for
fp32 accuracy and for speed; run it with Debian's python3-torch:

    /usr/bin/python3 tools/pytorch_baseline.py --model cnn --epochs 5 --threads 2

The data order is a seeded permutation per epoch (torch.Generator), not flexpoint's order:
PyTorch cannot consume our permutation without reimplementing it, and the comparison is about
accuracy after the same number of epochs and seconds per epoch.
"""
import argparse
import csv
import gzip
import os
import struct
import sys
import time

import numpy as np

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - the point is the message
    sys.exit("pytorch_baseline: PyTorch is not installed; on Debian: apt-get install python3-torch "
             "and run with /usr/bin/python3")

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise ValueError(f"{path}: size mismatch")
    return arr.reshape(dims)


def find(dirname, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(dirname, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{dirname}: no {stem}[.gz]")


def load(dirname):
    xs, ys = [], []
    for prefix in ("train", "t10k"):
        x = read_idx(find(dirname, f"{prefix}-images-idx3-ubyte")).astype(np.float32) / 255.0
        y = read_idx(find(dirname, f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
        xs.append(x.reshape(-1, 1, 28, 28))
        ys.append(y)
    mean, std = xs[0].mean(), xs[0].std()
    return [(torch.from_numpy((x - mean) / std), torch.from_numpy(y)) for x, y in zip(xs, ys)]


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256),
                             nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def evaluate(model, x, y, bf16):
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad(), torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        for i in range(0, len(x), 1000):
            out = model(x[i:i + 1000]).float()
            loss += F.cross_entropy(out, y[i:i + 1000], reduction="sum").item()
            correct += (out.argmax(1) == y[i:i + 1000]).sum().item()
    model.train()
    return correct / len(x), loss / len(x)


def run(args, name, bf16, train, test, writer):
    torch.manual_seed(args.seed)
    model = make_model(args.model).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    x, y = train
    dev = torch.device(args.device)
    gen = torch.Generator().manual_seed(args.seed)
    steps = len(x) // args.batch
    acc = 0.0
    total = 0.0
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(len(x), generator=gen).to(dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss_sum = 0.0
        for s in range(steps):
            idx = perm[s * args.batch:(s + 1) * args.batch]
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                out = model(x[idx])
                loss = F.cross_entropy(out.float(), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.item()  # a host sync per step, as flexpoint-train's loss readout
        secs = time.perf_counter() - t0
        total += secs
        acc, tloss = evaluate(model, *test, bf16)
        print(f"pytorch-{name:6s} epoch {epoch}/{args.epochs}  loss {loss_sum / steps:.4f}  "
              f"test acc {acc:.4f}  {secs:.1f} s  {steps * args.batch / secs:.0f} img/s", file=sys.stderr)
        writer.writerow([f"pytorch-{name}", args.model, epoch, loss_sum / steps, "", tloss, acc,
                         f"{secs:.3f}", f"{steps * args.batch / secs:.1f}", 1, 0, 0])
    return acc, total / args.epochs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], default="cnn")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda[:N] for a GPU")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=os.environ.get("FLEXPOINT_FASHION_MNIST_DIR", DEFAULT_DIR))
    ap.add_argument("--train-subset", type=int, default=0)
    ap.add_argument("--test-subset", type=int, default=0)
    ap.add_argument("--modes", default="fp32,bf16", help="comma list of fp32, bf16 (autocast)")
    ap.add_argument("--out", default="results", help="directory for pytorch_epochs.csv")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    train, test = load(args.data_dir)
    if args.train_subset:
        train = (train[0][:args.train_subset], train[1][:args.train_subset])
    if args.test_subset:
        test = (test[0][:args.test_subset], test[1][:args.test_subset])
    train = tuple(t.to(args.device) for t in train)
    test = tuple(t.to(args.device) for t in test)
    os.makedirs(args.out, exist_ok=True)
    results = []
    with open(os.path.join(args.out, "pytorch_epochs.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "model", "epoch", "train_loss", "train_accuracy", "test_loss",
                    "test_accuracy", "seconds", "images_per_second", "loss_scale", "skipped_steps",
                    "nonfinite_losses"])
        for mode in args.modes.split(","):
            if mode not in ("fp32", "bf16"):
                sys.exit(f"pytorch_baseline: unknown mode {mode!r} (fp32, bf16)")
            results.append((f"pytorch-{mode}",) + run(args, mode, mode == "bf16", train, test, w))
    ref = results[0]
    print(f"\n{'format':20s} {'test acc':>10s} {'gap to fp32':>12s} {'s/epoch':>12s} {'time ratio':>10s}")
    for name, acc, spe in results:
        print(f"{name:20s} {acc:10.4f} {100 * (acc - ref[1]):+9.2f} pts {spe:12.1f} {spe / ref[2]:9.2f}x")
    where = (torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda")
             else f"{args.threads} threads")
    print(f"(torch {torch.__version__}, {where})")


if __name__ == "__main__":
    main()
