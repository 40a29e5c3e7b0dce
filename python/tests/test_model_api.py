"""Model definitions from Python (flexpoint.Model over flexpoint_model.h): a chained builder
and model files, trained by fx.Trainer in place of a built-in name."""
from __future__ import annotations

import os

import numpy as np
import pytest

import flexpoint as fx

from conftest import REPO, needs

pytestmark = needs("fx_model_def_new", "fx_trainer_new_model")


def chained_cnn(C=1, H=28, W=28, classes=10):
    return (fx.Model((C, H, W), name="cnn")
            .conv2d("conv1", 32, 5, pad=2).relu("relu1")
            .maxpool2d("pool1", 2)
            .conv2d("conv2", 64, 5, pad=2).relu("relu2")
            .maxpool2d("pool2", 2)
            .linear("fc1", 128).relu("relu3")
            .linear("fc2", classes))


def losses_and_params(trainer, steps):
    losses = [trainer.step() for _ in range(steps)]
    return np.array(losses, dtype=np.float32), trainer.params()


@pytest.mark.parametrize("fmt", ["fp32", "flex16_5"])
def test_chained_cnn_trains_like_the_builtin(fmt):
    train = fx.data.synthetic(64, 1, 28, 28, 10, seed=4)
    cfg = fx.TrainConfig(model="cnn", fmt=fmt, batch_size=16, seed=5)
    with fx.Trainer(cfg, train) as a, fx.Trainer(cfg, train, model=chained_cnn()) as b:
        assert a.tensor_names() == b.tensor_names()
        la, pa = losses_and_params(a, 3)
        lb, pb = losses_and_params(b, 3)
    assert la.tobytes() == lb.tobytes()
    assert pa.tobytes() == pb.tobytes()


def test_model_file_equals_builder_and_builtin():
    path = os.path.join(REPO, "examples", "models", "cnn.txt")
    f = fx.Model.load(path)
    b = fx.Model.builtin("cnn", (1, 28, 28), 10)
    c = chained_cnn()
    assert f.identity == b.identity == c.identity
    assert f.identity.startswith("@") and len(f.identity) == 15
    assert len(f) == 9 and f.shape() == (10,) and f.shape("pool1") == (32, 14, 14)
    assert fx.Model.parse(f.to_text()).to_text() == f.to_text()
    assert f.layer_names()[:3] == ("conv1", "relu1", "pool1")


def test_errors_name_the_layer_and_line():
    m = fx.Model((3, 8, 8)).conv2d("c", 4, 3, pad=1)
    with pytest.raises(fx.ShapeError, match="'big'"):
        m.conv2d("big", 4, 11)
    with pytest.raises(fx.UnknownNameError, match="'nope'"):
        m.relu("r", input="nope")
    with pytest.raises(fx.UnknownNameError, match="taken"):
        m.relu("c")
    with pytest.raises(fx.ShapeError, match="differ in shape"):
        m.flatten("f").add("s", "f", "c")
    assert len(m) == 2  # the failed adds left it unchanged
    with pytest.raises(fx.CorruptError, match=r"net\.txt:3: unknown layer kind 'lstm'"):
        fx.Model.parse("input shape=4\nlinear a out=2\nlstm b\n", source="net.txt")
    with pytest.raises(fx.CorruptError, match=r":3: .*defined later, on line 4"):
        fx.Model.parse("input shape=4\nrelu a\nrelu b in=c\nrelu c in=a\n")


def test_other_kinds_train_and_auto_names():
    train = fx.data.synthetic(128, 1, 8, 8, 4, seed=1)
    m = (fx.Model((1, 8, 8), name="zoo")
         .conv2d("c1", 8, 3, pad=1).tanh()
         .avgpool2d("p1", 2)
         .conv2d("c2", 8, 3, pad=1, bias=False).batchnorm("bn").gelu()
         .add("res", "p1")
         .flatten().linear("fc1", 32).silu().dropout(0.2)
         .linear("fc2", 4))
    assert m.layer_names()[1] == "tanh1" and "dropout" in m.to_text()
    cfg = fx.TrainConfig(fmt="bf16", batch_size=32, lr=0.1, seed=2)
    with fx.Trainer(cfg, train, model=m) as a, fx.Trainer(cfg, train, model=m) as b:
        la = [a.step() for _ in range(8)]
        lb = [b.step() for _ in range(8)]
    assert np.all(np.isfinite(la)) and la == lb
    with pytest.raises(fx.ShapeError, match="one per class"):
        fx.Trainer(cfg, train, model=fx.Model(64).linear("fc", 3))
    with pytest.raises(fx.ArgumentTypeError):
        fx.Trainer(cfg, train, model="cnn")
