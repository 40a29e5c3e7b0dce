"""PyTorch's time for each layer of the small CNN, to set next to bench_conv's and to say where
an epoch's time goes on each side.

    /usr/bin/python3 bench/pytorch_layers.py [threads] [repetitions] [fp32|bf16]

Batch 128, the CNN's shapes (conv1 1->32 at 28x28, conv2 32->64 at 14x14, 5x5 kernels with
padding 2 and a bias; ReLU and 2x2 max pooling after each). Prints the best wall time of the
repetitions, in ms, for each layer's forward pass and for its backward pass (conv1's backward
computes only the weight and bias gradients, as in training, where the image needs none).
Inputs are random; the times do not depend on the values. bf16 runs every tensor in bfloat16
(what autocast hands these ops in training, where the activations arrive in bf16 and only the
weights' cast is added per step), on oneDNN's bf16 kernels where the CPU has AVX512_BF16.
Needs Debian's python3-torch."""
import sys
import time

import torch
import torch.nn.functional as F


def best_of(reps, fn):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def conv_layer(cin, cout, hw, reps, dtype):
    x = torch.randn(128, cin, hw, hw, dtype=dtype, requires_grad=cin > 1)
    w = torch.randn(cout, cin, 5, 5, dtype=dtype, requires_grad=True)
    b = torch.randn(cout, dtype=dtype, requires_grad=True)
    fwd = best_of(reps, lambda: F.conv2d(x, w, b, padding=2))
    y = F.conv2d(x, w, b, padding=2)
    g = torch.randn_like(y)
    bwd = best_of(reps, lambda: y.backward(g, retain_graph=True))
    return fwd, bwd


def relu_pool_layer(c, hw, reps, dtype):
    x = torch.randn(128, c, hw, hw, dtype=dtype, requires_grad=True)
    relu = best_of(reps, lambda: F.relu(x))
    r = F.relu(x)
    pool = best_of(reps, lambda: F.max_pool2d(r, 2))
    p = F.max_pool2d(r, 2)
    g = torch.randn_like(p)
    bwd = best_of(reps, lambda: p.backward(g, retain_graph=True))
    return relu, pool, bwd


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    mode = sys.argv[3] if len(sys.argv) > 3 else "fp32"
    if mode not in ("fp32", "bf16"):
        sys.exit(f"pytorch_layers: unknown type '{mode}' (fp32 or bf16)")
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    torch.set_num_threads(threads)
    print(f"PyTorch {torch.__version__}, {mode}, {threads} thread(s), batch 128, best of {reps}, ms")
    for name, (cin, cout, hw) in (("conv1 1->32 28x28", (1, 32, 28)),
                                  ("conv2 32->64 14x14", (32, 64, 14))):
        fwd, bwd = conv_layer(cin, cout, hw, reps, dtype)
        relu, pool, pbwd = relu_pool_layer(cout, hw, reps, dtype)
        print(f"{name:20s} conv forward {fwd:6.1f}  conv backward {bwd:6.1f}  "
              f"relu {relu:5.1f}  maxpool {pool:5.1f}  relu+maxpool backward {pbwd:5.1f}")


if __name__ == "__main__":
    main()
