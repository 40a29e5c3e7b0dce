"""Ops through the binding against NumPy references: bit for bit where the library's rule makes
the result exact (integer formats: exact arithmetic, one rounding; float formats: one fp32
operation, one rounding), with a tolerance where fp32 accumulation order matters."""
from __future__ import annotations

import numpy as np
import pytest

import flexpoint as fx

from conftest import needs
from test_formats import reference_quantise

ml_dtypes = pytest.importorskip("ml_dtypes")


def round_to(fmt: str, v: np.ndarray, exp=None) -> np.ndarray:
    """v (float64 or float32 results of the op) rounded once into fmt, as float64."""
    if fmt == "fp32":
        return v.astype(np.float32).astype(np.float64)
    if fmt == "fp16":
        return v.astype(np.float32).astype(np.float16).astype(np.float64)
    if fmt == "bf16":
        return v.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    return reference_quantise(v, exp).astype(np.float64) * 2.0 ** exp


def operands(rng, fmt, shape_a, shape_b):
    a = fx.from_numpy(rng.standard_normal(shape_a) * 3, fmt)
    b = fx.from_numpy(rng.standard_normal(shape_b), fmt)
    return a, b


# ------------------------------------------------------------------------------------------
# elementwise
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", fx.FORMATS)
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_elementwise_bit_exact(rng, fmt, op):
    a, b = operands(rng, fmt, (4, 1, 6), (5, 1))  # broadcasts to (4, 5, 6)
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op]
    out = getattr(fx, op)(a, b)
    assert out.shape == (4, 5, 6) and out.fmt == fmt
    av, bv = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    if fmt in ("flex16_5", "dfp16"):
        exact = fn(av, bv)  # exact in float64: int16 mantissas times powers of two
    else:
        exact = fn(av.astype(np.float32), bv.astype(np.float32))  # one fp32 operation
    assert np.array_equal(out.numpy().astype(np.float64), round_to(fmt, exact, out.exp))
    # the operator is the same function
    sym = {"add": a + b, "sub": a - b, "mul": a * b}[op]
    assert np.array_equal(sym.numpy(), out.numpy())


def test_out_of_another_format_and_in_place(rng):
    a, b = operands(rng, "fp32", (3, 4), (3, 4))
    o = fx.tensor((3, 4), "bf16")
    assert fx.add(a, b, out=o) is o
    want = (a.numpy() + b.numpy()).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(o.numpy(), want)
    assert fx.add(a, b, fmt="fp16").fmt == "fp16"
    before = a.numpy()
    a += b
    assert np.array_equal(a.numpy(), before + b.numpy())
    a *= 2.0
    assert np.array_equal(a.numpy(), (before + b.numpy()) * 2)
    with pytest.raises(fx.ShapeError):
        c = fx.tensor((1, 4), "fp32")
        c += a  # the result's shape (3, 4) is not c's


@pytest.mark.parametrize("fmt", ["flex16_5", "dfp16"])
def test_scale_relu_copy_integer_exact(rng, fmt):
    a = fx.from_numpy(rng.standard_normal((7, 9)), fmt)
    av = a.numpy().astype(np.float64)
    s = fx.scale(a, 0.75)
    assert np.array_equal(s.numpy(), round_to(fmt, av * 0.75, s.exp))
    n = -a
    assert np.array_equal(n.numpy(), round_to(fmt, -av, n.exp))
    assert np.array_equal((3 * a).numpy(), fx.scale(a, 3.0).numpy())
    r = fx.relu(a)
    assert np.array_equal(r.numpy(), round_to(fmt, np.maximum(av, 0), r.exp))
    c = fx.copy(a, fmt="fp32")
    assert np.array_equal(c.numpy(), av)
    with pytest.raises(fx.InvalidArgumentError) as ei:
        fx.scale(a, float("inf"))
    assert "tensor_scale" in ei.value.message


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
def test_scale_relu_float_formats(rng, fmt):
    x = rng.standard_normal((5, 6)).astype(np.float32)
    a = fx.from_numpy(x, fmt)
    av = a.numpy()
    assert np.array_equal(fx.relu(a).numpy(), np.maximum(av, 0))
    got = fx.scale(a, 0.5).numpy()
    assert np.array_equal(got, round_to(fmt, av.astype(np.float64) * 0.5))


# ------------------------------------------------------------------------------------------
# reductions and matmul
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["flex16_5", "dfp16"])
def test_sum_integer_exact(rng, fmt):
    a = fx.from_numpy(rng.standard_normal((6, 5, 4)), fmt)
    av = a.numpy().astype(np.float64)
    s = fx.sum(a)
    assert s.shape == (1,)
    assert np.array_equal(s.numpy(), round_to(fmt, np.array([av.sum()]), s.exp))
    s1 = fx.sum(a, axis=1)
    assert s1.shape == (6, 4)
    assert np.array_equal(s1.numpy(), round_to(fmt, av.sum(axis=1), s1.exp))
    assert fx.sum(a, axis=-1, keepdims=True).shape == (6, 5, 1)
    with pytest.raises(fx.InvalidArgumentError) as ei:
        fx.sum(a, axis=7)
    assert "axis" in ei.value.message


@needs("tensor_mean")
@pytest.mark.parametrize("fmt", fx.FORMATS)
def test_mean(rng, fmt):
    a = fx.from_numpy(rng.standard_normal((8, 6)), fmt)
    av = a.numpy().astype(np.float64)
    m = fx.mean(a, axis=0)
    want = av.mean(axis=0)
    step = 2.0 ** m.exp if m.exp is not None else np.abs(want) * 2**-7 + 1e-6
    assert np.all(np.abs(m.numpy() - want) <= step)
    assert fx.mean(a).shape == (1,)


@pytest.mark.parametrize("fmt", fx.FORMATS)
def test_matmul(rng, fmt):
    a, b = operands(rng, fmt, (9, 13), (13, 5))
    c = a @ b
    assert c.shape == (9, 5) and c.fmt == fmt
    av, bv = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    exact = av @ bv
    if fmt in ("flex16_5", "dfp16"):
        assert np.array_equal(c.numpy(), round_to(fmt, exact, c.exp))  # exact sum, one rounding
    else:
        tol = {"fp32": 1e-5, "fp16": 2**-10, "bf16": 2**-7}[fmt]
        assert np.allclose(c.numpy(), exact, rtol=tol, atol=tol * np.abs(exact).max())
    ct = fx.matmul(b.T, a.T)  # transposed operands as views
    assert np.allclose(ct.numpy(), c.numpy().T, rtol=1e-2, atol=1e-2 * np.abs(exact).max())
    with pytest.raises(fx.ShapeError) as ei:
        a @ a
    assert "tensor_matmul" in ei.value.message


def test_non_tensor_arguments_are_rejected():
    a = fx.tensor((2, 2), "fp32")
    with pytest.raises(fx.InvalidArgumentError):
        fx.add(a, np.ones((2, 2)))
    with pytest.raises(TypeError):
        a + np.ones((2, 2))  # no silent NumPy arithmetic
    with pytest.raises(TypeError):
        np.ones((2, 2)) * a
    assert np.array_equal((np.float32(2) * fx.from_numpy(np.ones(2), "fp32")).numpy(), [2, 2])
    with pytest.raises(TypeError):
        a @ 3


# ------------------------------------------------------------------------------------------
# training ops (flexpoint_nn.h)
# ------------------------------------------------------------------------------------------
def conv_ref(x, w, stride, pad, dil):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    y = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dil:i * dil + stride * (oh - 1) + 1:stride,
                       j * dil:j * dil + stride * (ow - 1) + 1:stride]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return y


@needs("tensor_conv2d_bias_relu")
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("relu", [True, False])
def test_conv2d_bias_relu_is_the_three_ops(rng, fmt, relu):
    x = fx.from_numpy(rng.standard_normal((2, 3, 9, 8)), fmt)
    w = fx.from_numpy(rng.standard_normal((5, 3, 3, 3)) * 0.3, fmt)
    b = fx.from_numpy(rng.standard_normal((5, 1, 1)), fmt)
    y = fx.conv2d_bias_relu(x, w, b, relu=relu, padding=1)
    t = fx.add(fx.conv2d(x, w, padding=1), b)
    want = fx.relu(t) if relu else t
    assert y.fmt == fmt and y.shape == (2, 5, 9, 8)
    assert np.array_equal(y.raw(), want.raw())
    if relu:
        assert (y.numpy() >= 0).all() and (y.numpy() > 0).any()
    with pytest.raises(fx.UnsupportedError):
        fx.conv2d_bias_relu(x, w, b, out=fx.tensor((2, 5, 9, 8), "flex16_5"), padding=1)
    with pytest.raises(fx.ShapeError):
        fx.conv2d_bias_relu(x, w, fx.tensor((4, 1, 1), fmt), padding=1)


def test_gpu_helpers_without_a_device():
    if fx.gpu_device_count() > 0:
        pytest.skip("a device is present")
    fx.gpu_release_cache()  # nothing cached: not an error
    with pytest.raises(fx.DeviceError):
        fx.gpu_synchronize()
    # nothing was ever waited for: no device to wait on
    assert fx.gpu_host_waits() == 0


@needs("tensor_conv2d", "tensor_conv2d_backward_input", "tensor_conv2d_backward_weight")
@pytest.mark.parametrize("stride,pad,dil", [(1, 1, 1), (2, 0, 1), (1, 2, 2)])
def test_conv2d_forward_and_adjoint_backward(rng, stride, pad, dil):
    x = fx.from_numpy(rng.standard_normal((2, 3, 9, 8)), "fp32")
    w = fx.from_numpy(rng.standard_normal((4, 3, 3, 3)) * 0.3, "fp32")
    y = fx.conv2d(x, w, stride=stride, padding=pad, dilation=dil)
    want = conv_ref(x.numpy().astype(np.float64), w.numpy().astype(np.float64), stride, pad, dil)
    assert y.shape == want.shape
    assert np.allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
    # backward by the adjoint identity <conv(x, w), dy> = <x, dx> = <w, dw>
    dy = fx.from_numpy(rng.standard_normal(y.shape), "fp32")
    dx = fx.conv2d_backward_input(dy, w, x.shape, stride, pad, dil)
    dw = fx.conv2d_backward_weight(x, dy, (3, 3), stride, pad, dil)
    lhs = float(np.sum(want * dy.numpy()))
    assert np.isclose(float(np.sum(x.numpy().astype(np.float64) * dx.numpy())), lhs, rtol=1e-4)
    assert np.isclose(float(np.sum(w.numpy().astype(np.float64) * dw.numpy())), lhs, rtol=1e-4)
    with pytest.raises(fx.ShapeError):
        fx.conv2d(x, fx.tensor((4, 2, 3, 3), "fp32"))


@needs("tensor_conv2d")
def test_conv2d_dfp16_is_exact(rng):
    x = fx.from_numpy(rng.standard_normal((1, 2, 6, 6)), "dfp16")
    w = fx.from_numpy(rng.standard_normal((3, 2, 3, 3)), "dfp16")
    y = fx.conv2d(x, w, padding=1)
    exact = conv_ref(x.numpy().astype(np.float64), w.numpy().astype(np.float64), 1, 1, 1)
    assert np.array_equal(y.numpy(), round_to("dfp16", exact, y.exp))


def pool_windows(x, k, s, p, fill):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    win = np.empty((n, c, oh, ow, k, k))
    for i in range(k):
        for j in range(k):
            win[..., i, j] = xp[:, :, i:i + s * (oh - 1) + 1:s, j:j + s * (ow - 1) + 1:s]
    return win


@needs("tensor_maxpool2d", "tensor_maxpool2d_backward")
@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1)])
def test_maxpool2d(rng, k, s, p):
    xv = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    x = fx.from_numpy(xv, "fp32")
    y, argmax = fx.maxpool2d(x, k, s, p, return_indices=True)
    want = pool_windows(xv, k, s, p, -np.inf).max(axis=(-1, -2))
    assert np.array_equal(y.numpy(), want)
    assert argmax.dtype == np.int32 and np.array_equal(xv.reshape(-1)[argmax], want)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = fx.maxpool2d_backward(fx.from_numpy(dy, "fp32"), argmax, x.shape)
    ref = np.zeros(xv.size)
    np.add.at(ref, argmax.reshape(-1), dy.reshape(-1).astype(np.float64))
    assert np.allclose(dx.numpy().reshape(-1), ref, atol=1e-6)
    bad = argmax.copy()
    bad.flat[0] = xv.size  # out of range: rejected before the library reads it
    with pytest.raises(fx.InvalidArgumentError):
        fx.maxpool2d_backward(fx.from_numpy(dy, "fp32"), bad, x.shape)
    with pytest.raises(fx.InvalidArgumentError):
        fx.maxpool2d_backward(fx.from_numpy(dy, "fp32"), argmax[:1], x.shape)


@needs("tensor_avgpool2d", "tensor_avgpool2d_backward", "tensor_global_avgpool",
       "tensor_global_avgpool_backward")
def test_avgpool_and_global_avgpool(rng):
    xv = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    x = fx.from_numpy(xv, "fp32")
    y = fx.avgpool2d(x, 3, 2, 1)
    want = pool_windows(xv.astype(np.float64), 3, 2, 1, 0.0).mean(axis=(-1, -2))
    assert np.allclose(y.numpy(), want, atol=1e-6)
    dy = fx.from_numpy(rng.standard_normal(y.shape), "fp32")
    dx = fx.avgpool2d_backward(dy, x.shape, 3, 2, 1)
    lhs = float(np.sum(want * dy.numpy()))
    assert np.isclose(float(np.sum(xv * dx.numpy())), lhs, rtol=1e-4)
    g = fx.global_avgpool(x)
    assert g.shape == (2, 3) and np.allclose(g.numpy(), xv.mean(axis=(2, 3)), atol=1e-6)
    assert fx.global_avgpool(x, keepdims=True).shape == (2, 3, 1, 1)
    gd = fx.global_avgpool_backward(g, x.shape)
    assert np.allclose(gd.numpy(), np.broadcast_to(g.numpy()[:, :, None, None] / 30, xv.shape),
                       atol=1e-7)


@needs("tensor_relu_backward")
@pytest.mark.parametrize("fmt", ["fp32", "dfp16"])
def test_relu_backward(rng, fmt):
    x = fx.from_numpy(rng.standard_normal((4, 5)), fmt)
    dy = fx.from_numpy(rng.standard_normal((4, 5)), fmt)
    dx = fx.relu_backward(dy, x)
    want = np.where(x.numpy() > 0, dy.numpy(), 0)
    assert np.array_equal(dx.numpy(), round_to(fmt, want.astype(np.float64), dx.exp))


@needs("tensor_softmax_cross_entropy")
def test_softmax_cross_entropy(rng):
    z = rng.standard_normal((6, 4)).astype(np.float32) * 3
    labels = np.array([0, 3, 1, 2, 2, 0])
    logits = fx.from_numpy(z, "fp32")
    loss, d = fx.softmax_cross_entropy(logits, labels, grad_scale=8.0)
    z64 = z.astype(np.float64)
    lse = np.log(np.exp(z64 - z64.max(1, keepdims=True)).sum(1)) + z64.max(1)
    assert loss == pytest.approx(float(np.mean(lse - z64[np.arange(6), labels])), rel=1e-5)
    p = np.exp(z64 - lse[:, None])
    p[np.arange(6), labels] -= 1
    assert np.allclose(d.numpy(), 8.0 * p / 6, atol=1e-6)
    loss2, none = fx.softmax_cross_entropy(logits, labels, grad=False)
    assert none is None and loss2 == loss
    with pytest.raises(fx.RangeError) as ei:
        fx.softmax_cross_entropy(logits, [0, 3, 1, 9, 2, 0])
    assert "9" in ei.value.message
    with pytest.raises(fx.InvalidArgumentError):
        fx.softmax_cross_entropy(logits, [0, 1])  # too few labels: checked before the call


@needs("tensor_batchnorm", "tensor_batchnorm_backward")
def test_batchnorm_forward_backward_and_running_stats(rng):
    xv = (rng.standard_normal((4, 3, 5, 5)) * 2 + 1).astype(np.float32)
    x = fx.from_numpy(xv, "fp32")
    gv, bv = np.float32([1.0, 0.5, 2.0]), np.float32([0.0, 0.1, -1.0])
    gamma, beta = fx.from_numpy(gv, "fp32"), fx.from_numpy(bv, "fp32")
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    y, sm, si = fx.batchnorm(x, gamma, beta, rm, rv, training=True, momentum=0.1, eps=1e-5)
    x64 = xv.astype(np.float64)
    mu, var = x64.mean(axis=(0, 2, 3)), x64.var(axis=(0, 2, 3))
    inv = 1 / np.sqrt(var + 1e-5)
    xhat = (x64 - mu[None, :, None, None]) * inv[None, :, None, None]
    want = xhat * gv[None, :, None, None] + bv[None, :, None, None]
    assert np.allclose(y.numpy(), want, atol=1e-4)
    assert np.allclose(sm, mu, atol=1e-5) and np.allclose(si, inv, rtol=1e-4)
    m = xv.size // 3
    assert np.allclose(rm, 0.1 * mu, atol=1e-5)
    assert np.allclose(rv, 0.9 + 0.1 * var * m / (m - 1), rtol=1e-4)
    dyv = rng.standard_normal(xv.shape)
    dy = fx.from_numpy(dyv, "fp32")
    dx, dg, db = fx.batchnorm_backward(dy, x, gamma, sm, si)
    dy64 = dy.numpy().astype(np.float64)
    s_dy, s_dyx = dy64.sum(axis=(0, 2, 3)), (dy64 * xhat).sum(axis=(0, 2, 3))
    ref_dx = (gv * inv)[None, :, None, None] / m * (
        m * dy64 - s_dy[None, :, None, None] - xhat * s_dyx[None, :, None, None])
    assert np.allclose(dx.numpy(), ref_dx, atol=1e-4)
    assert np.allclose(dg.numpy(), s_dyx, rtol=1e-4) and np.allclose(db.numpy(), s_dy, rtol=1e-4)
    y_eval, none1, none2 = fx.batchnorm(x, gamma, beta, rm, rv, training=False)
    assert none1 is None and none2 is None
    ref_eval = (x64 - rm[None, :, None, None]) / np.sqrt(rv + 1e-5)[None, :, None, None] * \
        gv[None, :, None, None] + bv[None, :, None, None]
    assert np.allclose(y_eval.numpy(), ref_eval, atol=1e-4)
    with pytest.raises(fx.InvalidArgumentError):
        fx.batchnorm(x, gamma, beta, np.zeros(3), rv)  # float64 buffer: would lose the update
    with pytest.raises(fx.InvalidArgumentError):
        fx.batchnorm(x, gamma, beta, np.zeros(2, np.float32), rv)


@needs("tensor_dropout", "tensor_dropout_backward")
def test_dropout_is_reproducible_and_backward_matches(rng):
    xv = (rng.random((50, 40)) + 0.5).astype(np.float32)
    x = fx.from_numpy(xv, "fp32")
    y = fx.dropout(x, 0.25, seed=3, step=1).numpy()
    kept = y != 0
    assert 0.70 < kept.mean() < 0.80
    assert np.allclose(y[kept], xv[kept] / 0.75, rtol=1e-6)
    assert np.array_equal(fx.dropout(x, 0.25, seed=3, step=1).numpy(), y)
    assert not np.array_equal(fx.dropout(x, 0.25, seed=3, step=2).numpy(), y)
    dx = fx.dropout_backward(fx.from_numpy(np.ones_like(xv), "fp32"), 0.25, seed=3, step=1)
    assert np.array_equal(dx.numpy() != 0, kept)
    with pytest.raises(fx.InvalidArgumentError):
        fx.dropout(x, 1.0)


# ------------------------------------------------------------------------------------------
# optimisers and loss scaling
# ------------------------------------------------------------------------------------------
def test_sgd_step_matches_pytorch_semantics(rng):
    w0 = rng.standard_normal(10).astype(np.float32)
    w = fx.from_numpy(w0, "fp32")
    buf = np.zeros(10, np.float32)
    ref_w, ref_buf = w0.astype(np.float64), np.zeros(10)
    for step in range(3):
        gv = rng.standard_normal(10).astype(np.float32)
        fx.sgd_step(w, fx.from_numpy(gv, "fp32"), buf, lr=0.1, momentum=0.9, weight_decay=0.01,
                    grad_scale=0.5, step=step)
        g = gv * 0.5 + 0.01 * ref_w
        ref_buf = 0.9 * ref_buf + g
        ref_w = ref_w - 0.1 * ref_buf
    assert np.allclose(w.numpy(), ref_w, atol=1e-5)
    assert np.allclose(buf, ref_buf, atol=1e-5)
    with pytest.raises(fx.InvalidArgumentError):
        fx.sgd_step(w, w, np.zeros(3, np.float32), lr=0.1)


def test_sgd_with_master_weights_writes_the_format_once(rng):
    w0 = rng.standard_normal(16).astype(np.float32)
    w = fx.from_numpy(w0, "bf16")
    m0 = w.numpy().copy()
    master = m0.copy()
    buf = np.zeros(16, np.float32)
    fx.sgd_step(w, fx.from_numpy(np.ones(16), "bf16"), buf, lr=1e-3, master=master)
    assert np.allclose(master, m0 - 1e-3, atol=1e-6)  # the fp32 master took the small step
    want = master.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(w.numpy(), want)


def test_adam_step(rng):
    w0 = rng.standard_normal(8).astype(np.float32)
    w = fx.from_numpy(w0, "fp32")
    m, v = np.zeros(8, np.float32), np.zeros(8, np.float32)
    rw, rm, rv = w0.astype(np.float64), np.zeros(8), np.zeros(8)
    for step in (1, 2):
        gv = rng.standard_normal(8).astype(np.float32)
        fx.adam_step(w, fx.from_numpy(gv, "fp32"), m, v, lr=0.01, step=step)
        rm = 0.9 * rm + 0.1 * gv
        rv = 0.999 * rv + 0.001 * gv.astype(np.float64) ** 2
        mh, vh = rm / (1 - 0.9 ** step), rv / (1 - 0.999 ** step)
        rw = rw - 0.01 * mh / (np.sqrt(vh) + 1e-8)
    assert np.allclose(w.numpy(), rw, atol=1e-5)


@pytest.mark.parametrize("opt", ["sgd", "adam"])
@pytest.mark.parametrize("fmt", ["fp32", "flex16_5"])
def test_optimizer_classes_minimise_a_quadratic(rng, opt, fmt):
    target = fx.from_numpy(rng.standard_normal(32), "fp32")
    w = fx.from_numpy(np.zeros(32), fmt)
    o = fx.SGD([w], lr=0.1, momentum=0.5) if opt == "sgd" else fx.Adam([w], lr=0.05)
    first = None
    for _ in range(60):
        diff = fx.sub(w, target, fmt="fp32")
        loss = float(np.sum(diff.numpy() ** 2))
        first = loss if first is None else first
        o.step([fx.scale(diff, 2.0)])
    assert loss < 0.05 * first
    with pytest.raises(fx.InvalidArgumentError):
        o.step([])


def test_loss_scaler():
    s = fx.LossScaler()
    assert s.enabled and s.scale == 65536.0 and s.growth_interval == 2000
    g = fx.from_numpy(np.float32([65536.0, -32768.0]), "fp32")
    (u,), found = s.unscale([g])
    assert not found and np.array_equal(u, [1.0, -0.5])
    bad = fx.from_numpy(np.float32([1.0, np.inf]), "fp32")
    _, found = s.unscale([g, bad])
    assert found
    assert s.update(True) is False and s.scale == 32768.0 and s.skipped_steps == 1
    s.growth_interval = 2
    assert s.update(False) and s.update(False)
    assert s.scale == 65536.0 and s.good_steps == 0
    st = s.state_dict()
    s2 = fx.LossScaler(enabled=False)
    assert s2.scale == 1.0 and s2.update(True) is True
    s2.load_state_dict(st)
    assert s2.state_dict() == st
    # a shared-exponent gradient whose last write saw non-finite inputs counts as found_inf
    flex = fx.from_numpy(np.float32([1.0, np.nan]), "dfp16")
    _, found = s.unscale([flex])
    assert found
