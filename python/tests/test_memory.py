"""Memory: tensors, views, raw views, data sets and trainers are freed when their Python objects
go away; many creations must not grow the resident set."""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import flexpoint as fx

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
statm = pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")


def rss_bytes() -> int:
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def churn_tensors(n: int, x: np.ndarray) -> None:
    for i in range(n):
        fmt = fx.FORMATS[i % len(fx.FORMATS)]
        t = fx.from_numpy(x, fmt)                  # 64 x 64: 8 or 16 KiB of storage each
        v = t.T[1:, ::2]                           # views of views
        r = v.raw()                                # a raw view holding the tensor
        s = t + t                                  # an op allocating its output
        _ = s.numpy()[0, 0] + r[0, 0]
        try:
            t @ fx.tensor((3, 3), fmt)             # a failing call must not leak either
        except fx.ShapeError:
            pass


@statm
def test_many_tensors_do_not_leak():
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    churn_tensors(1000, x)  # warm up allocator pools and caches
    before = rss_bytes()
    churn_tensors(10_000, x)
    grown = rss_bytes() - before
    # A leak of the tensors alone would be >= 10,000 * 8 KiB = 80 MiB.
    assert grown < 8 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB"


@statm
def test_datasets_and_trainers_do_not_leak():
    def churn(n):
        for i in range(n):
            ds = fx.data.synthetic(64, 1, 8, 8, 4, seed=i)
            sub = ds.subset(0, 32)
            _ = sub.images[0, 0, 0, 0]
            tr = fx.Trainer(fx.TrainConfig(model="mlp", fmt=fx.FORMATS[i % 5], batch_size=16,
                                           epochs=1), sub)
            _ = tr.tensor("fc1.w").stats
            tr.step()
            del tr
    churn(4)
    before = rss_bytes()
    churn(30)
    grown = rss_bytes() - before
    # each MLP trainer holds over 1 MiB (weights, gradients, master copies, momentum)
    assert grown < 8 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB"


def test_trainer_close_refuses_while_its_tensors_live():
    ds = fx.data.synthetic(32, 1, 8, 8, 4, seed=1)
    tr = fx.Trainer(fx.TrainConfig(model="mlp", batch_size=16), ds)
    w = tr.tensor("fc1.w")
    with pytest.raises(fx.StateError):
        tr.close()
    del w
    gc.collect()
    tr.close()
    with pytest.raises(fx.StateError):
        tr.step()
    tr.close()  # closing twice is harmless


def test_interpreter_exits_cleanly_with_live_objects():
    """Objects still alive at interpreter shutdown (globals, views, raw arrays, a trainer and
    its tensors, a reference cycle) are freed or dropped without errors or crashes."""
    import subprocess
    import sys

    from conftest import PYROOT
    code = (
        "import numpy as np, flexpoint as fx\n"
        "t = fx.from_numpy(np.ones((4, 4)), 'flex16_5')\n"
        "v = t.T[1:]\n"
        "r = v.raw()\n"
        "ds = fx.data.synthetic(32, 1, 8, 8, 4, seed=1)\n"
        "tr = fx.Trainer(fx.TrainConfig(model='mlp', batch_size=16), ds)\n"
        "g = tr.tensor('fc1.w.grad')\n"
        "cycle = [t]; cycle.append(cycle)\n"
        "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=PYROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr
    assert "Exception ignored" not in res.stderr and "Error" not in res.stderr, res.stderr
