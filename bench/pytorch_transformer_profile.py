"""Where PyTorch's bf16 training step of `--model transformer` goes, op by op, to set next to
`flexpoint-train --profile` and bench_tfm.

    /usr/bin/python3 bench/pytorch_transformer_profile.py [threads] [steps]

The model is tools/pytorch_baseline.py's (4 pre-norm blocks of width 128, 4 heads, context 128,
a vocabulary of 114), batch 128, random tokens, AdamW, bf16 autocast as that script trains it.
Prints the mean time of a step after three warm-up steps, then torch.autograd.profiler's table
of the ops' own CPU time over `steps` more steps (divide by `steps` for a step's share).
Needs Debian's python3-torch."""
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import pytorch_baseline  # noqa: E402  (the model definition)


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    vocab, batch, context = 114, 128, 128
    model = pytorch_baseline.GPT(vocab, 4, 128, 4, context)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, vocab, (batch, context))
    y = torch.randint(0, vocab, (batch, context))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
            loss = F.cross_entropy(out.float().reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(5):
        step()
    print(f"{threads} thread(s): {(time.perf_counter() - t0) / 5 * 1e3:.1f} ms a step")
    with torch.autograd.profiler.profile() as prof:
        for _ in range(steps):
            step()
    print(f"ops over {steps} steps:")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()
