"""The transformer ops through the binding (flexpoint.transformer) against NumPy in fp64: every
format, with normwise bounds of a few units of the format's precision (the C tests check the
per-element bounds of docs/transformer_ops.md on every backend); bad shapes, axes and indices
raise with the library's message and write nothing."""
from __future__ import annotations

import numpy as np
import pytest

import flexpoint as fx

from conftest import needs

pytestmark = needs("tensor_softmax", "tensor_layernorm", "tensor_bmm", "tensor_embedding",
                   "fx_adamw_step", "fx_clip_grad_norm")

FORMATS = ["fp32", "fp16", "bf16", "flex16_5", "dfp16"]
# normwise tolerance per format: a few units of its precision (15 bits for the shared-exponent
# formats at the tensor's maximum)
TOL = {"fp32": 1e-6, "fp16": 4e-3, "bf16": 3e-2, "flex16_5": 4e-4, "dfp16": 4e-4}


def stored(a: np.ndarray, fmt: str) -> np.ndarray:
    """the values a tensor of fmt holds for a (what the op reads)"""
    return fx.from_numpy(a.astype(np.float32), fmt).numpy().astype(np.float64)


def close(got: np.ndarray, ref: np.ndarray, fmt: str, scale: float = 1.0) -> None:
    err = np.max(np.abs(got.astype(np.float64) - ref)) if ref.size else 0.0
    assert err <= TOL[fmt] * scale * max(np.max(np.abs(ref)) if ref.size else 0.0, 1e-30), \
        (fmt, err)


def np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_and_backward(fmt, axis, rng):
    x = stored(rng.standard_normal((3, 5, 7)) * 2, fmt)
    dy = stored(rng.standard_normal((3, 5, 7)), fmt)
    p = np_softmax(x, axis)
    y = fx.softmax(fx.from_numpy(x.astype(np.float32), fmt), axis)
    close(y.numpy(), p, fmt)
    ls = fx.log_softmax(fx.from_numpy(x.astype(np.float32), fmt), axis)
    close(ls.numpy(), np.log(p), fmt, 2.0)
    ys = y.numpy().astype(np.float64)
    dx = fx.softmax_backward(fx.from_numpy(dy.astype(np.float32), fmt), y, axis)
    close(dx.numpy(), ys * (dy - (dy * ys).sum(axis=axis, keepdims=True)), fmt, 4.0)
    lss = ls.numpy().astype(np.float64)
    dl = fx.log_softmax_backward(fx.from_numpy(dy.astype(np.float32), fmt), ls, axis)
    close(dl.numpy(), dy - np.exp(lss) * dy.sum(axis=axis, keepdims=True), fmt, 4.0)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("causal", [True, False])
def test_attention_softmax_is_scale_mask_softmax(fmt, causal, rng):
    x = fx.from_numpy((rng.standard_normal((2, 3, 6, 6)) * 3).astype(np.float32), fmt)
    s = 1 / np.sqrt(32)
    t = fx.scale(x, s, fmt="fp32")
    if causal:
        t = fx.causal_mask(t, float("-inf"), fmt="fp32")
    want = fx.softmax(t, -1, fmt=fmt)
    got = fx.attention_softmax(x, s, causal, fmt=fmt)
    assert np.array_equal(got.numpy(), want.numpy())
    if causal:  # masked probabilities are exactly 0
        assert np.all(np.triu(got.numpy()[0, 0], 1) == 0)
    with pytest.raises(fx.InvalidArgumentError, match="scale"):
        fx.attention_softmax(x, float("nan"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_attention_softmax_backward_is_softmax_backward_then_scale(fmt, rng):
    x = fx.from_numpy((rng.standard_normal((2, 3, 6, 6)) * 3).astype(np.float32), fmt)
    s = 1 / np.sqrt(32)
    y = fx.attention_softmax(x, s, True, fmt=fmt)
    dy = fx.from_numpy(rng.standard_normal((2, 3, 6, 6)).astype(np.float32), fmt)
    want = fx.scale(fx.softmax_backward(dy, y, -1, fmt="fp32"), s, fmt=fmt)
    got = fx.attention_softmax_backward(dy, y, s, fmt=fmt)
    assert np.array_equal(got.numpy(), want.numpy())
    ys, g = y.numpy().astype(np.float64), dy.numpy().astype(np.float64)
    ref = s * ys * (g - (g * ys).sum(axis=-1, keepdims=True))
    close(got.numpy(), ref, fmt, 4.0)
    assert np.all(np.triu(got.numpy()[0, 0], 1) == 0)  # masked positions get 0
    with pytest.raises(fx.InvalidArgumentError, match="scale"):
        fx.attention_softmax_backward(dy, y, float("inf"))
    with pytest.raises(fx.ShapeError):
        fx.attention_softmax_backward(fx.from_numpy(np.ones((2, 3), np.float32), fmt), y, s)


def test_softmax_bad_axis_writes_nothing():
    x = fx.from_numpy(np.ones((2, 3), np.float32), "fp32")
    out = fx.from_numpy(np.full((2, 3), 7, np.float32), "fp32")
    with pytest.raises(fx.InvalidArgumentError, match="axis=2"):
        fx.softmax(x, 2, out=out)
    with pytest.raises(fx.ShapeError):
        fx.softmax(x, 1, out=fx.zeros((3, 2), "fp32"))
    assert np.all(out.numpy() == 7)


def test_softmax_special_values():
    x = fx.from_numpy(np.array([[0, np.nan, 1], [1, -np.inf, 1]], np.float32), "fp32")
    y = fx.softmax(x, -1).numpy()
    assert np.all(np.isnan(y[0])) and y[1, 1] == 0 and abs(y[1, 0] - 0.5) < 1e-7


@pytest.mark.parametrize("fmt", FORMATS)
def test_layernorm_and_backward(fmt, rng):
    x = stored(rng.standard_normal((4, 6, 16)) * 3 + 1, fmt)
    dy = stored(rng.standard_normal((4, 6, 16)), fmt)
    g = (1 + 0.3 * rng.standard_normal(16)).astype(np.float32)
    b = (0.5 * rng.standard_normal(16)).astype(np.float32)
    eps = 1e-5
    mu = x.mean(-1, keepdims=True)
    rs = 1 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    xh = (x - mu) * rs
    tx = fx.from_numpy(x.astype(np.float32), fmt)
    y, mean, rstd = fx.layernorm(tx, g, b, eps)
    close(y.numpy(), xh * g + b, fmt, 2.0)
    assert np.allclose(mean, mu.reshape(-1), rtol=1e-6, atol=1e-6)
    assert np.allclose(rstd, rs.reshape(-1), rtol=1e-6)
    gg = dy * g
    dx_ref = rs * (gg - gg.mean(-1, keepdims=True) - xh * (gg * xh).mean(-1, keepdims=True))
    dx, dg, db = fx.layernorm_backward(fx.from_numpy(dy.astype(np.float32), fmt), tx, g, eps)
    close(dx.numpy(), dx_ref, fmt, 4.0)
    assert np.allclose(dg, (dy * xh).reshape(-1, 16).sum(0), rtol=1e-5, atol=1e-5)
    assert np.allclose(db, dy.reshape(-1, 16).sum(0), rtol=1e-5, atol=1e-5)


def test_layernorm_bad_gamma():
    x = fx.from_numpy(np.ones((2, 3), np.float32), "fp32")
    with pytest.raises(fx.InvalidArgumentError):
        fx.layernorm(x, np.ones(4, np.float32))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_bmm_and_backward(fmt, ta, tb, rng):
    a = stored(rng.standard_normal((2, 3, 5, 4) if not ta else (2, 3, 4, 5)), fmt)
    b = stored(rng.standard_normal((2, 3, 4, 6) if not tb else (2, 3, 6, 4)), fmt)
    A = np.swapaxes(a, -1, -2) if ta else a
    Bm = np.swapaxes(b, -1, -2) if tb else b
    ta_, tb_ = fx.from_numpy(a.astype(np.float32), fmt), fx.from_numpy(b.astype(np.float32), fmt)
    out = fx.bmm(ta_, tb_, bool(ta), bool(tb))
    ref = A @ Bm
    close(out.numpy(), ref, fmt, 2.0)
    if fmt in ("flex16_5", "dfp16"):  # exact integer sums: equal to tensor_matmul per batch
        m = fx.matmul(fx.from_numpy(A[0, 0].astype(np.float32), fmt),
                      fx.from_numpy(Bm[0, 0].astype(np.float32), fmt))
        assert np.allclose(m.numpy(), out.numpy()[0, 0], rtol=2 ** -14, atol=0)
    dout = stored(rng.standard_normal(ref.shape), fmt)
    da, db = fx.bmm_backward(fx.from_numpy(dout.astype(np.float32), fmt), ta_, tb_, bool(ta),
                             bool(tb))
    dA = dout @ np.swapaxes(Bm, -1, -2)
    dB = np.swapaxes(A, -1, -2) @ dout
    close(da.numpy(), np.swapaxes(dA, -1, -2) if ta else dA, fmt, 2.0)
    close(db.numpy(), np.swapaxes(dB, -1, -2) if tb else dB, fmt, 2.0)


def test_bmm_shape_errors():
    a = fx.zeros((2, 3, 4), "fp32")
    with pytest.raises(fx.ShapeError, match="inner sizes"):
        fx.bmm(a, fx.zeros((2, 5, 6), "fp32"))
    with pytest.raises(fx.ShapeError, match="batch axis"):
        fx.bmm(a, fx.zeros((3, 4, 6), "fp32"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_masks(fmt, rng):
    x = stored(rng.standard_normal((2, 4, 5)), fmt)
    tx = fx.from_numpy(x.astype(np.float32), fmt)
    y = fx.causal_mask(tx, -3.0).numpy()
    keep = np.tril(np.ones((4, 5), bool))
    assert np.array_equal(y, np.where(keep, x, -3.0).astype(np.float32))
    yi = fx.causal_mask(tx, fmt="fp32").numpy()  # -inf into a float output
    assert np.all(np.isneginf(yi[:, ~keep]))
    m = fx.from_numpy(np.array([[1, 0, 0, 1, 0]], np.float32), "fp32")
    z = fx.masked_fill(tx, m, 0.0).numpy()
    assert np.array_equal(z, np.where(np.array([1, 0, 0, 1, 0], bool), 0.0, x).astype(np.float32))
    with pytest.raises(fx.ShapeError):
        fx.masked_fill(tx, fx.zeros((3, 3), "fp32"), 0.0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_embedding_and_backward(fmt, rng):
    t = stored(rng.standard_normal((10, 8)) * 2, fmt)
    idx = rng.integers(0, 10, size=(3, 4))
    tt = fx.from_numpy(t.astype(np.float32), fmt)
    y = fx.embedding(tt, idx)
    assert y.shape == (3, 4, 8)
    if fmt in ("fp32", "fp16", "bf16", "dfp16"):  # copied exactly
        assert np.array_equal(y.numpy().astype(np.float64), t[idx])
    else:
        close(y.numpy(), t[idx], fmt)
    dy = stored(rng.standard_normal((3, 4, 8)), fmt)
    ref = np.zeros((10, 8))
    np.add.at(ref, idx.reshape(-1), dy.reshape(-1, 8))
    d = fx.embedding_backward(fx.from_numpy(dy.astype(np.float32), fmt), idx, 10)
    close(d.numpy(), ref, fmt, 2.0)


def test_embedding_bad_index_writes_nothing():
    t = fx.zeros((4, 2), "dfp16")
    out = fx.from_numpy(np.full((2, 2), 5, np.float32), "fp32")
    with pytest.raises(fx.RangeError, match=r"indices\[1\]=4"):
        fx.embedding(t, [0, 4], out=out)
    with pytest.raises(fx.ArgumentTypeError):
        fx.embedding(t, [0.0, 1.0])
    assert np.all(out.numpy() == 5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_adamw_step(fmt, rng):
    w0 = stored(rng.standard_normal(50), fmt)
    g = stored(0.1 * rng.standard_normal(50), fmt)
    w = fx.from_numpy(w0.astype(np.float32), fmt)
    m = np.zeros(50, np.float32)
    v = np.zeros(50, np.float32)
    lr, wd = 1e-2, 0.1
    fx.adamw_step(w, fx.from_numpy(g.astype(np.float32), fmt), m, v, lr, 1, weight_decay=wd)
    mr, vr = 0.1 * g, 0.001 * g * g
    ref = w0 * (1 - lr * wd) - lr / 0.1 * mr / (np.sqrt(vr) / np.sqrt(0.001) + 1e-8)
    assert np.allclose(m, mr, rtol=1e-6)
    close(w.numpy(), ref, fmt, 2.0)
    with pytest.raises(fx.InvalidArgumentError):
        fx.adamw_step(w, fx.from_numpy(g.astype(np.float32), fmt), m, v, lr, 0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_clip_grad_norm(fmt, rng):
    a = stored(rng.standard_normal((4, 5)), fmt)
    b = stored(rng.standard_normal(7), "fp32")
    ta, tb = fx.from_numpy(a.astype(np.float32), fmt), fx.from_numpy(b.astype(np.float32), "fp32")
    total = np.sqrt((a ** 2).sum() + (b ** 2).sum())
    norm = fx.clip_grad_norm([ta, tb], total / 2)
    assert abs(norm - total) <= 1e-12 * total
    coef = (total / 2) / (total + 1e-6)
    close(ta.numpy(), a * coef, fmt, 2.0)
    close(tb.numpy(), b * coef, "fp32", 2.0)
    assert fx.clip_grad_norm([ta, tb], 10 * total) <= total
