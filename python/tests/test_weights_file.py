"""Weights files from NumPy and back (flexpoint.weights, Trainer.export_weights/import_weights):
a model's weights can come from anywhere, e.g. a PyTorch state_dict renamed to the trainer's
names."""
from __future__ import annotations

import numpy as np
import pytest

import flexpoint as fx


def _trainer(fmt="fp32", model="resnet8"):
    train = fx.data.synthetic(64, 1, 8, 8, 4, seed=2)
    return fx.Trainer(fx.TrainConfig(model=model, fmt=fmt, batch_size=16), train, train)


def test_export_read_write_import(tmp_path):
    a = _trainer("flex16_5")
    for _ in range(2):
        a.step()
    path = tmp_path / "a.fxw"
    a.export_weights(path)
    arrays = fx.weights.read(path)
    params = [n for n in a.tensor_names() if not n.endswith(".grad")][: len(arrays)]
    assert "bn0.running_mean" in arrays and "bn0.running_var" in arrays
    flat = np.concatenate([arrays[n].ravel() for n in arrays if "running_" not in n])
    np.testing.assert_array_equal(flat, a.params())
    assert params[0] == next(iter(arrays))

    # change the weights in NumPy, write them, import into another format
    changed = {n: (v * 0.5 if "running_" not in n else v) for n, v in arrays.items()}
    fx.weights.write(tmp_path / "b.fxw", changed)
    b = _trainer("bf16")
    b.import_weights(tmp_path / "b.fxw")
    np.testing.assert_array_equal(b.params(), flat * np.float32(0.5))


def test_refusals(tmp_path):
    a = _trainer()
    path = tmp_path / "a.fxw"
    a.export_weights(path)
    arrays = fx.weights.read(path)
    before = a.params()
    missing = dict(arrays)
    missing.pop("fc.b")
    fx.weights.write(tmp_path / "m.fxw", missing)
    with pytest.raises(fx.CorruptError, match="tensors, the model has"):
        a.import_weights(tmp_path / "m.fxw")
    wrong = dict(arrays)
    wrong["fc.w"] = np.zeros((3, 3), np.float32)
    fx.weights.write(tmp_path / "w.fxw", wrong)
    with pytest.raises(fx.ShapeError, match="fc.w"):
        a.import_weights(tmp_path / "w.fxw")
    extra = {("fc.wx" if n == "fc.w" else n): v for n, v in arrays.items()}
    fx.weights.write(tmp_path / "x.fxw", extra)
    with pytest.raises(fx.ShapeError, match="fc.wx"):
        a.import_weights(tmp_path / "x.fxw")
    np.testing.assert_array_equal(a.params(), before)
    with pytest.raises(fx.InvalidArgumentError, match="NaN"):
        fx.weights.write(tmp_path / "n.fxw", {"fc.w": np.array([np.nan], np.float32)})
    data = bytearray(path.read_bytes())
    data[40] ^= 1
    (tmp_path / "c.fxw").write_bytes(bytes(data))
    with pytest.raises(fx.CorruptError, match="checksum"):
        fx.weights.read(tmp_path / "c.fxw")
    with pytest.raises(fx.CorruptError, match="checksum"):
        a.import_weights(tmp_path / "c.fxw")
