"""Tensor objects: views and their lifetimes, raw views that alias the storage, the
shared-exponent state, Autoflex, traces, and the errors of bad arguments."""
from __future__ import annotations

import csv
import gc
import pickle
import weakref

import numpy as np
import pytest

import flexpoint as fx


def test_tensor_basics():
    t = fx.tensor((2, 3))
    assert t.fmt == "flex16_5" and t.shape == (2, 3) and t.strides == (3, 1)
    assert t.is_contiguous and len(t) == 2 and t.exp == -8 and t.exp_window == (-31, 0)
    assert np.array_equal(t.numpy(), np.zeros((2, 3), np.float32))
    assert fx.tensor(5, "dfp16").exp == 0
    assert fx.tensor((4,), "fp16").exp is None and fx.tensor((4,), "fp16").stats == {}
    assert fx.Tensor((0, 3), "bf16").numpy().shape == (0, 3)
    assert "flex16_5" in repr(t)
    with pytest.raises(TypeError):
        iter(t)


@pytest.mark.parametrize("shape", [(), (0,) * 9, (2, -1), ("a",), (1.5,)])
def test_bad_shapes_raise(shape):
    with pytest.raises((fx.InvalidArgumentError, TypeError)):
        fx.tensor(shape)


def test_views_match_numpy(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    t = fx.from_numpy(x, "fp32")
    assert np.array_equal(t.reshape(3, 8).numpy(), x.reshape(3, 8))
    assert np.array_equal(t.reshape(-1).numpy(), x.reshape(-1))
    assert np.array_equal(t.T.numpy(), x.T)
    assert np.array_equal(t.transpose(0, 1).numpy(), x.T)
    assert np.array_equal(t[1:3, ::2].numpy(), x[1:3, ::2])
    assert np.array_equal(t[..., 4:].numpy(), x[..., 4:])
    assert np.array_equal(t.slice(1, 1, 5, 3).numpy(), x[:, 1:5:3])
    assert t[3:1].shape == (0, 6)
    assert not t.T.is_contiguous
    with pytest.raises(fx.InvalidArgumentError) as ei:
        t.T.reshape(24)  # a transposed view is not contiguous
    assert "contiguous" in str(ei.value)
    with pytest.raises(TypeError):
        t[0]
    with pytest.raises(fx.InvalidArgumentError):
        t[::-1]
    with pytest.raises(fx.InvalidArgumentError):
        t.slice(0, 2, 9)
    with pytest.raises(fx.InvalidArgumentError):
        t.transpose(0, 5)


def test_view_keeps_parent_alive_and_shares_storage(rng):
    x = rng.standard_normal((8, 8)).astype(np.float32)
    parent = fx.from_numpy(x, "bf16")
    ref = weakref.ref(parent)
    view = parent[2:6, 1:7].T
    del parent
    gc.collect()
    assert ref() is not None, "a view must keep its parent alive"
    want = x.astype(np.float32)[2:6, 1:7].T
    assert np.allclose(view.numpy(), want, rtol=2**-8)
    # writing through the view changes the parent's storage
    view.assign(np.zeros(view.shape))
    assert np.all(ref().numpy()[2:6, 1:7] == 0)
    assert ref().numpy()[0, 0] != 0 or x[0, 0] == 0
    del view
    gc.collect()
    assert ref() is None, "parent freed once its last view goes"


def test_raw_view_aliases_storage_without_copying(rng):
    t = fx.from_numpy(rng.standard_normal((5, 7)), "flex16_5")
    r = t.raw()
    assert r.dtype == np.int16 and r.shape == (5, 7) and not r.flags.writeable
    assert not r.flags.owndata
    assert np.array_equal(r, t.get_raw())
    t.assign(np.full((5, 7), 0.5))  # a new write shows through the old view
    assert np.array_equal(r, t.get_raw())
    assert np.all(r.astype(np.float64) * 2.0 ** t.exp == 0.5)
    w = t.raw(writable=True)
    w[0, 0] = 123
    assert t.get_raw()[0, 0] == 123 and r[0, 0] == 123
    # strided views of views
    rt = t.T.raw()
    assert rt.shape == (7, 5) and np.array_equal(rt, t.get_raw().T)
    rs = t[1:4, ::3].raw()
    assert np.array_equal(rs, t.get_raw()[1:4, ::3])
    # fp16 bits, fp32 bits
    h = fx.from_numpy(np.float32([1.0, -2.0]), "fp16")
    assert h.raw().dtype == np.uint16 and list(h.raw()) == [0x3C00, 0xC000]
    f = fx.from_numpy(np.float32([1.5]), "fp32")
    assert f.raw().view(np.float32)[0] == 1.5


def test_raw_view_keeps_tensor_alive():
    t = fx.from_numpy(np.arange(6, dtype=np.float32), "fp16")
    ref = weakref.ref(t)
    r = t.raw()
    del t
    gc.collect()
    assert ref() is not None
    assert list(r.view(np.float16).astype(int)) == [0, 1, 2, 3, 4, 5]
    del r
    gc.collect()
    assert ref() is None


def test_set_raw_validates():
    t = fx.tensor((3,), "dfp16", exp=-2)
    t.set_raw([4, -8, 32767])
    assert list(t.numpy()) == [1.0, -2.0, 32767 / 4]
    with pytest.raises(fx.RangeError):
        t.set_raw(np.int16([0, -32768, 1]))
    assert list(t.numpy()) == [1.0, -2.0, 32767 / 4], "nothing written on failure"
    with pytest.raises(fx.ShapeError):
        t.set_raw([1, 2])
    with pytest.raises(fx.InvalidArgumentError):
        t.set_raw(np.float32([1, 2, 3]))


def test_exponent_and_window():
    t = fx.from_numpy(np.float32([1.0, 0.5]), "flex16_5", autoflex="fixed", exp=-10)
    assert t.exp == -10 and list(t.numpy()) == [1.0, 0.5]
    t.exp = -4  # rescales the mantissas, keeps the values
    assert t.exp == -4 and list(t.numpy()) == [1.0, 0.5]
    with pytest.raises(fx.RangeError) as ei:
        t.exp = 3
    assert ei.value.status_name == "FX_ERANGE"
    t.set_exp_window(-60)
    assert t.exp_window == (-60, -29) and t.exp == -29
    with pytest.raises(fx.RangeError):
        t.set_exp_window(200)
    with pytest.raises(fx.FormatError):
        fx.tensor(2, "fp32").exp = 1
    with pytest.raises(fx.FormatError):
        fx.tensor(2, "dfp16").set_exp_window(-40)


def test_autoflex_config_and_golden_trace(tmp_path):
    """The docs/autoflex.md golden trace of the published preset, read through the binding."""
    t = fx.tensor((4,), "flex16_5")
    t.set_autoflex("published").trace_enable()
    base = np.float32([1.0, -0.5, 0.25, 0.1])
    for step in range(30):
        s = 100.0 if 6 <= step <= 9 else 1.0
        t.assign(base * np.float32(s))
        if step == 8:
            assert np.allclose(t.numpy(), [31.999, -31.999, 25, 10], atol=1e-3)
    tr = t.trace()
    assert len(tr) == 30
    exps = [r.exp for r in tr]
    assert exps[:6] == [-14] * 6 and exps[6:10] == [-14, -12, -10, -8]
    assert exps[10:26] == [-7] * 16 and exps[26:] == [-14] * 4
    assert [r.saturated for r in tr[6:10]] == [4, 4, 2, 0]
    assert [r.overflow for r in tr[5:10]] == [False, True, True, True, False]
    arr = t.trace_arrays()
    assert arr["exp"].dtype == np.int64 and arr["overflow"].sum() == 3
    assert t.stats["overflows"] == 3 and t.stats["writes"] == 30
    path = tmp_path / "trace.csv"
    t.write_trace_csv(path)
    rows = list(csv.DictReader(open(path)))
    assert [int(r["exp"]) for r in rows] == exps
    cfg = t.autoflex_config
    assert cfg == fx.autoflex_preset("published")
    cfg.stat_mode = "true_max"
    t.set_autoflex(cfg)
    assert t.autoflex_config.stat_mode == "true_max"
    with pytest.raises(fx.InvalidArgumentError):
        t.set_autoflex(fx.AutoflexConfig(history_len=0))
    with pytest.raises(fx.UnknownNameError):
        t.set_autoflex("nonsense")
    with pytest.raises(fx.FormatError):
        fx.tensor(3, "dfp16").set_autoflex("published")
    with pytest.raises(fx.FormatError):
        fx.tensor(3, "bf16").trace_enable()


def test_stats_after_a_write_with_nonfinite_values():
    t = fx.from_numpy(np.float32([1.0, np.nan, np.inf, 1e-30]), "dfp16")
    st = t.stats
    assert set(st) == set(fx.STAT_NAMES)
    assert st["nonfinite"] == 2 and st["underflow"] == 1 and st["writes"] == 1
    assert t.stat("exp") == t.exp
    with pytest.raises(fx.UnknownNameError) as ei:
        t.stat("colour")
    assert "colour" in str(ei.value)


def test_clone_pickle_and_copies(rng):
    x = rng.standard_normal((3, 5)).astype(np.float32)
    for fmt in fx.FORMATS:
        t = fx.from_numpy(x, fmt)
        c = t.clone()
        assert np.array_equal(c.get_raw(), t.get_raw()) and c.exp == t.exp
        p = pickle.loads(pickle.dumps(t))
        assert p.fmt == fmt and np.array_equal(p.numpy(), t.numpy())
        assert np.array_equal(t.T.clone().numpy(), t.numpy().T)
        assert np.array_equal(t.astype("fp32").numpy(), t.numpy())


def test_assign_broadcasts_and_checks_shape():
    t = fx.tensor((2, 3), "fp32")
    t.assign([1, 2, 3])
    assert np.array_equal(t.numpy(), np.float32([[1, 2, 3], [1, 2, 3]]))
    with pytest.raises(fx.ShapeError):
        t.assign(np.ones((3, 2)))


def test_errors_carry_status_and_message():
    a = fx.tensor((2, 3), "fp32")
    b = fx.tensor((4, 5), "fp32")
    with pytest.raises(fx.ShapeError) as ei:
        a + b
    e = ei.value
    assert isinstance(e, ValueError) and isinstance(e, fx.FlexpointError)
    assert e.status == -2 and e.status_name == "FX_ESHAPE"
    assert "tensor_add" in e.message and "[2, 3]" in e.message
    assert str(e).startswith("[FX_ESHAPE] ")
