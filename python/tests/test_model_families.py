"""Model families by name: mlp<W>x<D>, cnn<C1>-<C2>-<F>, resnet<6n+2>[x<K>] (fx_model_check)."""
from __future__ import annotations

import pytest

import flexpoint as fx


def test_model_families():
    train = fx.data.synthetic(200, 1, 8, 8, 4, seed=3)
    t = fx.Trainer(fx.TrainConfig(model="resnet14x2", batch_size=20), train)
    assert "s3b2.conv2.w" in t.tensor_names() and "s3b3.conv2.w" not in t.tensor_names()
    t.close()
    with pytest.raises(fx.UnknownNameError, match="6n\\+2"):
        fx.Trainer(fx.TrainConfig(model="resnet21", batch_size=20), train)


@pytest.mark.parametrize("fmt", ["bf16", "flex16_5"])
def test_fused_outputs_are_refused_not_stale(fmt):
    """A bf16 ResNet's fused ops leave a batch norm's output, a residual add's and a ReLU's
    summed gradient unwritten: tensor() refuses them with StateError, tensors() leaves them
    out, and every tensor it hands out has values. flex16_5 writes all of them."""
    train = fx.data.synthetic(128, 3, 8, 8, 4, seed=5)
    t = fx.Trainer(fx.TrainConfig(model="resnet8", fmt=fmt, batch_size=64, seed=2, threads=1),
                   train)
    t.step()
    fused = ["s1b1.bn1.out", "s1b1.add.out", "s1b1.relu.dy"]
    for name in fused:
        if fmt == "bf16":
            with pytest.raises(fx.StateError, match=name.replace(".", "\\.")):
                t.tensor(name)
        else:
            assert abs(t.tensor(name).numpy()).max() > 0
    handed = t.tensors()
    assert all((n in handed) == (fmt != "bf16") for n in fused)
    for n in ("s1b1.relu.out", "s1b1.conv1.out"):
        assert abs(handed[n].numpy()).max() > 0
    del handed
    t.close()
