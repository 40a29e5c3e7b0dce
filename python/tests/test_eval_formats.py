"""Evaluating a trained model in another format: checkpoint_config, Trainer.from_checkpoint,
Trainer.copy_weights_from (fx_checkpoint_config, fx_trainer_copy_weights)."""
from __future__ import annotations

import numpy as np
import pytest

import flexpoint as fx


def _data():
    train = fx.data.synthetic(200, 1, 8, 8, 4, seed=3)
    test = fx.data.synthetic(80, 1, 8, 8, 4, seed=4)
    return train, test


def test_checkpoint_in_every_format(tmp_path):
    train, test = _data()
    cfg = fx.TrainConfig(model="mlp", fmt="flex16_5", batch_size=20, seed=5)
    a = fx.Trainer(cfg, train, test)
    for _ in range(8):
        a.step()
    acc_a, loss_a = a.evaluate()
    path = tmp_path / "a.ckpt"
    a.save(path)

    back = fx.checkpoint_config(path)
    assert back.model == "mlp" and back.fmt == "flex16_5" and back.batch_size == 20
    assert back.seed == 5 and back.device == -1

    b = fx.Trainer.from_checkpoint(path, train, test)
    assert b.evaluate() == (acc_a, loss_a)  # the same bits as the trainer that wrote it
    src = b.params()
    for fmt in ("fp32", "fp16", "bf16", "flex16_5", "dfp16"):
        d = fx.Trainer(fx.TrainConfig(model="mlp", fmt=fmt, batch_size=20), train, test)
        d.copy_weights_from(b)
        # master weights are the source's fp32 values, bit for bit
        np.testing.assert_array_equal(d.params(), src)
        acc, _ = d.evaluate()
        assert abs(acc - acc_a) <= 0.05, (fmt, acc, acc_a)
        d.close()


def test_refusals(tmp_path):
    train, test = _data()
    mlp = fx.Trainer(fx.TrainConfig(model="mlp", batch_size=20), train, test)
    cnn = fx.Trainer(fx.TrainConfig(model="cnn", batch_size=20), train, test)
    before = cnn.params()
    with pytest.raises(fx.ShapeError, match="mlp"):
        cnn.copy_weights_from(mlp)
    np.testing.assert_array_equal(cnn.params(), before)
    with pytest.raises(fx.InvalidArgumentError):
        mlp.copy_weights_from(mlp)
    with pytest.raises(fx.ArgumentTypeError):
        mlp.copy_weights_from("mlp")
    with pytest.raises(fx.FlexpointIOError):
        fx.checkpoint_config(tmp_path / "missing.ckpt")
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"FLEXCKPT" + bytes(40))
    with pytest.raises(fx.CorruptError):
        fx.checkpoint_config(bad)
    with pytest.raises(fx.InvalidArgumentError):
        fx.checkpoint_config(str(tmp_path / "a\0b"))



def test_evaluate_in_another_format():
    """Trainer.evaluate(fmt=..., policy=...) equals a trainer of that format given the weights,
    and is the plain evaluation in the trainer's own format; the trainer is unchanged."""
    train, test = _data()
    a = fx.Trainer(fx.TrainConfig(model="mlp", fmt="flex16_5", batch_size=20, seed=5),
                   train, test)
    for _ in range(8):
        a.step()
    own = a.evaluate()
    assert a.evaluate(fmt="flex16_5") == own
    before, step = a.params(), a.global_step
    for fmt, policy in (("fp32", None), ("fp16", None), ("bf16", None), ("dfp16", None),
                        ("fp16", "fc2=fp32"), ("flex16_5", "O1:bf16")):
        d = fx.Trainer(fx.TrainConfig(model="mlp", fmt=fmt, batch_size=20, seed=5,
                                      master_weights=False, policy=policy), train, test)
        d.copy_weights_from(a)
        assert a.evaluate(fmt=fmt, policy=policy) == d.evaluate(), (fmt, policy)
        d.close()
    np.testing.assert_array_equal(a.params(), before)
    assert a.global_step == step and a.evaluate() == own
    with pytest.raises(fx.FormatError):
        a.evaluate(fmt="fp8")
    with pytest.raises(fx.UnknownNameError, match="not a tensor class"):
        a.evaluate(fmt="fp16", policy="activations=fp32")
    with pytest.raises(fx.UnknownNameError):
        a.evaluate(autoflex="nosuch")
    with pytest.raises(fx.InvalidArgumentError):
        a.evaluate(fmt="fp16", policy="fc1=fp32\0x")
    a.close()


def test_cast_count_and_time():
    train, test = _data()
    t = fx.Trainer(fx.TrainConfig(model="mlp", fmt="fp16", batch_size=20,
                                  policy="edges-fp32"), train, test)
    assert t.cast_count == 1 and t.cast_seconds == 0.0
    for _ in range(3):
        t.step()
    assert t.cast_seconds > 0.0
    t.close()
    plain = fx.Trainer(fx.TrainConfig(model="mlp", batch_size=20), train, test)
    plain.step()
    assert plain.cast_count == 0 and plain.cast_seconds == 0.0
    plain.close()
