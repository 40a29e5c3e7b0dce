"""tools/pytorch_baseline.py builds the image models flexpoint-train builds: the same layers,
so the same number of trainable parameters (weights, biases, batch norm's gamma and beta) for
every family and input size, and it parses the same names.

The baseline runs on Debian's python3-torch (/usr/bin/python3), which need not be the
interpreter running these tests, so it is asked in a subprocess; the test skips where that
PyTorch is not installed (CI installs it only for FLEXPOINT_BASELINE=1)."""
from __future__ import annotations

import json
import pathlib
import subprocess

import pytest

import flexpoint as fx

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = [("mlp", 28), ("cnn", 28), ("cnn8-16-32", 32), ("resnet20", 28), ("resnet20", 32),
          ("resnet8x2", 32)]
NAMES = ["resnet56x4", "cnn", "resnet21", "resnet2", "cnn1-2", "gpt2x64h4c64", "vgg"]

PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import pytorch_baseline as pb
models, names = json.loads(sys.argv[2]), json.loads(sys.argv[3])
out = {"params": [], "shapes": [], "names": [pb.image_model_shape(n) for n in names]}
for name, side in models:
    m = pb.make_model(name, side).eval()
    out["params"].append(sum(p.numel() for p in m.parameters() if p.requires_grad))
    with torch.no_grad():
        out["shapes"].append(list(m(torch.zeros(2, 1, side, side)).shape))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probed(torch_python):
    r = subprocess.run([torch_python, "-c", PROBE, str(ROOT / "tools"), json.dumps(MODELS),
                        json.dumps(NAMES)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_same_parameter_count_and_output(probed):
    for (name, side), theirs, shape in zip(MODELS, probed["params"], probed["shapes"]):
        train = fx.data.synthetic(40, 1, side, side, 10, seed=2)
        t = fx.Trainer(fx.TrainConfig(model=name, batch_size=20), train)
        try:
            assert theirs == t.param_count, (name, side)
        finally:
            t.close()
        assert shape == [2, 10]


def test_names(probed):
    got = dict(zip(NAMES, probed["names"]))
    assert got["resnet56x4"] == ["resnet", [9, 4]]
    assert got["cnn"] == ["cnn", [32, 64, 128]]
    for bad in ("resnet21", "resnet2", "cnn1-2", "gpt2x64h4c64", "vgg"):
        assert got[bad] is None


@pytest.mark.parametrize("args,message", [
    (["--model", "vgg"], "--model 'vgg'"),
    (["--model", "resnet21"], "--model 'resnet21'"),
    (["--model", "resnet20", "--pad", "65"], "--pad 65: 0 to 64"),
    (["--model", "resnet20", "--pad", "-1"], "--pad -1: 0 to 64"),
    (["--data", "fortunes", "--model", "transformer", "--pad", "2"], "--pad 2: text data"),
])
def test_bad_arguments_are_refused(probed, torch_python, args, message, tmp_path):
    """A model or padding the baseline cannot build stops before any data is read, with a
    status and a message naming the argument."""
    r = subprocess.run([torch_python, str(ROOT / "tools" / "pytorch_baseline.py"), *args,
                        "--data-dir", str(tmp_path), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
