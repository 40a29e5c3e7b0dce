#!/usr/bin/python3
"""PyTorch baseline for the flexpoint format comparison.

Trains the same MLP (784-256-256-10), CNN (cnn<C1>-<C2>-<F>; cnn is cnn32-64-128) and CIFAR
ResNet (resnet<6n+2>[x<K>]: 3x3 convolutions without bias, batch norm, the downsampling
shortcut a 1x1 convolution with batch norm, global average pooling, a linear classifier) as
flexpoint-train on Fashion-MNIST with the same hyperparameters (batch 128, SGD lr 0.02,
momentum 0.9, PyTorch's default initialisation, --pad N zero pixels per side before the
per-channel normalisation from the (padded) training set, the last partial batch dropped) in
fp32 and with bf16 autocast, on the CPU (or with --device cuda on a GPU, next to
flexpoint-train --device cuda), and prints the same summary table. It is an outside
reference for fp32 accuracy and for speed; run it with Debian's python3-torch:

    /usr/bin/python3 tools/pytorch_baseline.py --model cnn --epochs 5 --threads 2
    /usr/bin/python3 tools/pytorch_baseline.py --model resnet20 --pad 2 --epochs 1 --threads 2

With --data fortunes (or text:PATH) and a transformer name (gpt<L>x<D>h<H>c<T>, or
transformer = gpt4x128h4c128) it trains flexpoint's character-level language model instead:
the same text, byte vocabulary, 10 % held out at the end, non-overlapping windows of T bytes
with next-byte targets, and the same GPT-2 pre-norm blocks (token and position embeddings;
per block layer norm, causal multi-head attention without biases, residual, layer norm,
linear 4D with bias, GELU (erf form), linear D with bias, residual; final layer norm and a
linear head), trained with AdamW (weight decay 0, as flexpoint's default) and clipping by the
global norm, in fp32 (and bf16 autocast), and reports the held-out loss and bits per byte:

    /usr/bin/python3 tools/pytorch_baseline.py --data fortunes --model gpt2x64h4c64 \
        --epochs 1 --batch 32 --lr 0.003 --clip-norm 1 --train-subset 16000 --threads 1

The data order is a seeded permutation per epoch (torch.Generator), not flexpoint's order:
PyTorch cannot consume our permutation without reimplementing it, and the comparison is about
accuracy after the same number of epochs and seconds per epoch.
"""
import argparse
import csv
import gzip
import math
import os
import re
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
FORTUNES_DIR = "/usr/share/games/fortunes"


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


def load(dirname, pad=0):
    """[(images [n, 1, 28 + 2 pad, 28 + 2 pad], labels)] for the training and test sets: the
    pixels in [0, 1], padded with zeros, then normalised by the padded training set's mean and
    standard deviation, as flexpoint-train --pad does."""
    xs, ys = [], []
    for prefix in ("train", "t10k"):
        x = read_idx(find(dirname, f"{prefix}-images-idx3-ubyte")).astype(np.float32) / 255.0
        y = read_idx(find(dirname, f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
        x = x.reshape(-1, 1, 28, 28)
        if pad:
            x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        xs.append(x)
        ys.append(y)
    mean, std = xs[0].mean(), xs[0].std()
    return [(torch.from_numpy((x - mean) / std), torch.from_numpy(y)) for x, y in zip(xs, ys)]


def read_text(spec):
    """The bytes of --data text:PATH (a file, or a folder's regular files that are not hidden,
    .dat or .u8, in byte order of their names, concatenated) or fortunes, as flexpoint reads
    them."""
    path = FORTUNES_DIR if spec == "fortunes" else spec[len("text:"):]
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.startswith(".") and
                       not n.endswith((".dat", ".u8")) and
                       os.path.isfile(os.path.join(path, n)) and
                       not os.path.islink(os.path.join(path, n)))
        return b"".join(open(os.path.join(path, n), "rb").read() for n in names)
    return open(path, "rb").read()


def text_windows(text, context, val_fraction=0.1):
    """(train, held-out) as (windows [n, T], targets [n, T]) of byte-rank tokens: the last
    val_fraction of the bytes held out, non-overlapping windows with next-token targets."""
    vocab = sorted(set(text))
    rank = np.zeros(256, dtype=np.int64)
    rank[vocab] = np.arange(len(vocab))
    tok = rank[np.frombuffer(text, dtype=np.uint8)]
    nval = int(len(tok) * val_fraction)
    parts = []
    for t in (tok[:len(tok) - nval], tok[len(tok) - nval:]):
        n = (len(t) - 1) // context
        x = t[:n * context].reshape(n, context)
        y = t[1:n * context + 1].reshape(n, context)
        parts.append((torch.from_numpy(x.copy()), torch.from_numpy(y.copy())))
    return parts[0], parts[1], len(vocab)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln1(x)
        q, k, v = (w(h).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(
            F, "scaled_dot_product_attention") else self._attend(q, k, v)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, d))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))

    @staticmethod
    def _attend(q, k, v):
        t = q.shape[-2]
        s = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5)
        s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
        return torch.softmax(s, -1) @ v


class GPT(nn.Module):
    def __init__(self, vocab, layers, d, heads, context):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.lnf, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        return self.head(self.lnf(self.blocks(h)))


def gpt_shape(name):
    """(L, D, H, T) of gpt<L>x<D>h<H>c<T> or transformer, else None."""
    if name == "transformer":
        name = "gpt4x128h4c128"
    m = re.fullmatch(r"gpt(\d+)x(\d+)h(\d+)c(\d+)", name)
    return tuple(int(g) for g in m.groups()) if m else None


def run_lm(args, name, bf16, train, test, vocab, shape, writer):
    torch.manual_seed(args.seed)
    layers, d, heads, context = shape
    model = GPT(vocab, layers, d, heads, context).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)
    x, y = train
    gen = torch.Generator().manual_seed(args.seed)
    steps = len(x) // args.batch
    total, vloss = 0.0, 0.0
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(len(x), generator=gen)
        t0 = time.perf_counter()
        loss_sum = 0.0
        for s in range(steps):
            idx = perm[s * args.batch:(s + 1) * args.batch]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = model(x[idx])
                loss = F.cross_entropy(out.float().reshape(-1, vocab), y[idx].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if args.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
            opt.step()
            loss_sum += loss.item()
        secs = time.perf_counter() - t0
        total += secs
        model.eval()
        vsum, vn = 0.0, 0
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            for i in range(0, len(test[0]), 256):
                out = model(test[0][i:i + 256]).float()
                vsum += F.cross_entropy(out.reshape(-1, vocab), test[1][i:i + 256].reshape(-1),
                                        reduction="sum").item()
                vn += test[1][i:i + 256].numel()
        model.train()
        vloss = vsum / vn
        tps = steps * args.batch * context / secs
        print(f"pytorch-{name:6s} epoch {epoch}/{args.epochs}  loss {loss_sum / steps:.4f}  "
              f"held-out loss {vloss:.4f} ({vloss / math.log(2):.4f} bits/char)  {secs:.1f} s  "
              f"{tps:.0f} tokens/s", file=sys.stderr)
        writer.writerow([f"pytorch-{name}", args.model, epoch, loss_sum / steps, "", vloss, "",
                         f"{secs:.3f}", f"{tps:.1f}", 1, 0, 0])
    return vloss, total / args.epochs


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm; the shortcut is the input, or where the block
    strides a 1x1 convolution with batch norm (option B), added before the last ReLU."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                                   nn.BatchNorm2d(cout)) if stride != 1 else None)

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.down(x) if self.down is not None else x))


def resnet(blocks, widen, channels=1, classes=10):
    """flexpoint's resnet<6n+2>x<K>: a 3x3 stem of 16K channels with batch norm and ReLU, three
    stages of n blocks with 16K, 32K and 64K channels (the first block of stages 2 and 3
    strides 2), global average pooling and a linear classifier."""
    ch = [16 * widen, 32 * widen, 64 * widen]
    layers = [nn.Conv2d(channels, ch[0], 3, 1, 1, bias=False), nn.BatchNorm2d(ch[0]), nn.ReLU()]
    cin = ch[0]
    for s in range(3):
        for b in range(blocks):
            layers.append(BasicBlock(cin, ch[s], 2 if s > 0 and b == 0 else 1))
            cin = ch[s]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def image_model_shape(name):
    """("mlp", ()), ("cnn", (C1, C2, F)) or ("resnet", (n, K)) for the image models flexpoint
    names so, else None."""
    if name == "mlp":
        return "mlp", ()
    if name == "cnn":
        return "cnn", (32, 64, 128)
    m = re.fullmatch(r"cnn(\d+)-(\d+)-(\d+)", name)
    if m:
        return "cnn", tuple(int(g) for g in m.groups())
    m = re.fullmatch(r"resnet(\d+)(?:x(\d+))?", name)
    if m and int(m.group(1)) >= 8 and (int(m.group(1)) - 2) % 6 == 0:
        return "resnet", ((int(m.group(1)) - 2) // 6, int(m.group(2) or 1))
    return None


def make_model(name, side=28):
    kind, shape = image_model_shape(name)
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(side * side, 256), nn.ReLU(),
                             nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    if kind == "resnet":
        return resnet(*shape)
    c1, c2, width = shape
    return nn.Sequential(nn.Conv2d(1, c1, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(c1, c2, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(c2 * (side // 4) ** 2, width), nn.ReLU(), nn.Linear(width, 10))


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
    model = make_model(args.model, train[0].shape[-1]).to(args.device)
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
    ap.add_argument("--model", default="cnn",
                    help="mlp, cnn, cnn<C1>-<C2>-<F>, resnet<6n+2>[x<K>], or with text data "
                         "transformer / gpt<L>x<D>h<H>c<T>")
    ap.add_argument("--data", default="fashion-mnist",
                    help="fashion-mnist, or fortunes / text:PATH for the language model")
    ap.add_argument("--clip-norm", type=float, default=0.0,
                    help="language model: clip the gradients' global norm (0: off)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda[:N] for a GPU")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=os.environ.get("FLEXPOINT_FASHION_MNIST_DIR", DEFAULT_DIR))
    ap.add_argument("--pad", type=int, default=0,
                    help="zero-pad the images by N pixels per side (2: 28x28 -> 32x32)")
    ap.add_argument("--train-subset", type=int, default=0)
    ap.add_argument("--test-subset", type=int, default=0)
    ap.add_argument("--modes", default="fp32,bf16", help="comma list of fp32, bf16 (autocast)")
    ap.add_argument("--out", default="results", help="directory for pytorch_epochs.csv")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.data != "fashion-mnist":
        return main_lm(args)
    if image_model_shape(args.model) is None:
        sys.exit(f"pytorch_baseline: --model {args.model!r}: mlp, cnn, cnn<C1>-<C2>-<F>, "
                 "resnet<6n+2> or resnet<6n+2>x<K> for images")
    if not 0 <= args.pad <= 64:
        sys.exit(f"pytorch_baseline: --pad {args.pad}: 0 to 64")
    train, test = load(args.data_dir, args.pad)
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


def main_lm(args):
    if args.pad:
        sys.exit(f"pytorch_baseline: --pad {args.pad}: text data has tokens, not images to pad")
    shape = gpt_shape(args.model)
    if shape is None or not (args.data == "fortunes" or args.data.startswith("text:")):
        sys.exit("pytorch_baseline: text data (fortunes, text:PATH) takes --model transformer "
                 "or gpt<L>x<D>h<H>c<T>")
    train, test, vocab = text_windows(read_text(args.data), shape[3])
    if args.train_subset:
        train = (train[0][:args.train_subset], train[1][:args.train_subset])
    if args.test_subset:
        test = (test[0][:args.test_subset], test[1][:args.test_subset])
    os.makedirs(args.out, exist_ok=True)
    results = []
    with open(os.path.join(args.out, "pytorch_epochs.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "model", "epoch", "train_loss", "train_accuracy", "test_loss",
                    "test_accuracy", "seconds", "tokens_per_second", "loss_scale",
                    "skipped_steps", "nonfinite_losses"])
        for mode in args.modes.split(","):
            if mode not in ("fp32", "bf16"):
                sys.exit(f"pytorch_baseline: unknown mode {mode!r} (fp32, bf16)")
            results.append((f"pytorch-{mode}",) +
                           run_lm(args, mode, mode == "bf16", train, test, vocab, shape, w))
    ref = results[0]
    print(f"\n{'format':20s} {'held-out loss':>14s} {'bits/char':>10s} {'s/epoch':>10s} "
          f"{'time ratio':>10s}")
    for name, vloss, spe in results:
        print(f"{name:20s} {vloss:14.4f} {vloss / math.log(2):10.4f} {spe:10.1f} "
              f"{spe / ref[2]:9.2f}x")
    print(f"(torch {torch.__version__}, {args.threads} threads; {len(train[0])} training and "
          f"{len(test[0])} held-out windows, vocabulary {vocab})")


if __name__ == "__main__":
    main()
