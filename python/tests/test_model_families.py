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
