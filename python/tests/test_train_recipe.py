"""The trainer's recipe from Python: optimiser, clipping, loss-scaler parameters."""
from __future__ import annotations

import numpy as np
import pytest

import flexpoint as fx


def _data():
    return fx.data.synthetic(64, 1, 8, 8, 4, seed=2)


def test_defaults_round_trip():
    d = fx.TrainConfig.default()
    assert d.optimizer == "sgd" and d.clip_norm == 0 and d.loss_scale_init == 65536
    assert d.loss_scale_growth == 2 and d.loss_scale_backoff == 0.5
    assert d.loss_scale_interval == 2000 and d.loss_scale_min == 0
    c = fx.TrainConfig(optimizer="adamw", adam_beta2=0.99, clip_norm=1.0,
                       loss_scaling="static", loss_scale_init=1024).resolved()
    assert c.optimizer == "adamw" and c.adam_beta2 == 0.99 and c.clip_norm == 1.0
    assert c.loss_scaling == "static" and c.loss_scale_init == 1024


def test_adam_and_static_scale_train():
    train = _data()
    t = fx.Trainer(fx.TrainConfig(model="mlp", fmt="fp16", batch_size=16, optimizer="adam",
                                  lr=1e-3, loss_scaling="static", loss_scale_init=256,
                                  clip_norm=5.0), train)
    before = t.params().copy()
    for _ in range(4):
        t.step()
    assert t.loss_scaler.scale == 256
    assert not np.array_equal(before, t.params())


def test_refusals():
    train = _data()
    with pytest.raises(fx.InvalidArgumentError, match="optimizer"):
        fx.TrainConfig(optimizer="lamb").to_c()
    with pytest.raises(fx.InvalidArgumentError, match="clip_norm"):
        fx.Trainer(fx.TrainConfig(model="mlp", batch_size=16, clip_norm=-1.0), train)
    with pytest.raises(fx.InvalidArgumentError, match="loss_scale_backoff"):
        fx.Trainer(fx.TrainConfig(model="mlp", batch_size=16, loss_scale_backoff=1.5), train)


def test_profile():
    train = _data()
    t = fx.Trainer(fx.TrainConfig(model="cnn", batch_size=16), train)
    t.profile_enable()
    for _ in range(2):
        t.step()
    p = t.profile()
    assert p["steps"] == 2 and p["total_s"] > 0
    assert [x["name"] for x in p["layers"]][:2] == ["conv1", "relu1"]
    assert sum(x["forward_s"] for x in p["layers"]) <= p["forward_s"] * (1 + 1e-9)
    t.profile_enable(False)
    assert t.profile()["steps"] == 0
    with pytest.raises(fx.ArgumentTypeError):
        t.profile_enable("yes")


def test_policy():
    train = _data()
    t = fx.Trainer(fx.TrainConfig(model="mlp", fmt="flex16_5", batch_size=16,
                                  policy="fc2=fp32; grads=bf16"), train)
    assert t.config.policy == "fc2=fp32; grads=bf16"
    assert t.tensor("fc2.w").fmt == "fp32" and t.tensor("fc1.w").fmt == "flex16_5"
    assert t.tensor("fc1.w.grad").fmt == "bf16"
    assert "fc2.cast.out" in t.tensor_names()
    t.step()
    with pytest.raises(fx.UnknownNameError, match="matches no layer"):
        fx.Trainer(fx.TrainConfig(model="mlp", batch_size=16, policy="conv*=fp16"), train)
    with pytest.raises(fx.FormatError, match="fp8"):
        fx.Trainer(fx.TrainConfig(model="mlp", batch_size=16, policy="fc1=fp8"), train)
    with pytest.raises(fx.InvalidArgumentError):
        fx.TrainConfig(policy="x" * 128).to_c()
