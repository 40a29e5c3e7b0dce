"""Element-wise math through the binding (fx.unary, fx.unary_backward, fx.clamp, fx.pow) against
NumPy: every fp16 value and a sweep of bf16 values (ml_dtypes), within 1 ulp of the correctly
rounded result, as the C tests check on every backend (tests/test_unary.c, docs/math.md)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import flexpoint as fx

from conftest import needs

ml_dtypes = pytest.importorskip("ml_dtypes")

pytestmark = needs("tensor_unary", "tensor_unary_backward", "tensor_clamp", "tensor_pow_scalar")

NAMES = ["exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid", "gelu", "gelu_tanh",
         "silu", "square", "abs"]

_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def reference(fn: str, x: np.ndarray) -> np.ndarray:
    """fp64 values of the definitions in docs/math.md"""
    with np.errstate(all="ignore"):
        if fn == "rsqrt":
            return 1 / np.sqrt(x)
        if fn == "reciprocal":
            return 1 / x
        if fn == "sigmoid":
            return np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))
        # the forms without cancellation for x < 0: erfc, and 1 + tanh(u) = 2 sigmoid(2u)
        if fn == "gelu":
            return np.where(np.isneginf(x), -0.0, 0.5 * x * _erfc(-x / math.sqrt(2)))
        if fn == "gelu_tanh":
            u2 = 2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
            return np.where(np.isneginf(x), -0.0, x * reference("sigmoid", u2))
        if fn == "silu":
            return np.where(np.isneginf(x), -0.0, x * reference("sigmoid", x))
        if fn == "square":
            return x * x
        return getattr(np, fn)(x)


def ordered(bits: np.ndarray) -> np.ndarray:
    """16-bit patterns as positions on the number line (+0 and -0 both 0)"""
    b = bits.astype(np.int64)
    return np.where(b & 0x8000, -(b & 0x7FFF), b & 0x7FFF)


def round_to_odd_f32(d: np.ndarray) -> np.ndarray:
    """float64 -> float32 truncated, with the last bit set when anything was dropped: a
    following rounding to a narrower format is then a single correct rounding of d"""
    f = d.astype(np.float32)
    back = f.astype(np.float64)
    inexact = (back != d) & ~np.isnan(d)
    bits = f.view(np.uint32).copy()
    bits -= (inexact & (np.abs(back) > np.abs(d))).astype(np.uint32)
    bits |= inexact.astype(np.uint32)
    return bits.view(np.float32)


def within_one_ulp(fmt: str, got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """got (fp32 values read back from an fp16/bf16 tensor) against the exact values rounded
    once to the format; NaN must match NaN"""
    dt = np.float16 if fmt == "fp16" else ml_dtypes.bfloat16
    with np.errstate(all="ignore"):
        if fmt == "fp16":  # NumPy rounds float64 to float16 once
            want = exact.astype(np.float16).view(np.uint16)
        else:  # once: to float32 rounding to odd, then to bf16 to nearest even
            want = round_to_odd_f32(exact).astype(dt).view(np.uint16)
        have = got.astype(dt).view(np.uint16)
    nan_w, nan_h = np.isnan(exact), np.isnan(got)
    close = np.abs(ordered(have) - ordered(want)) <= 1
    return np.where(nan_w | nan_h, nan_w & nan_h, close)


def all_fp16() -> np.ndarray:
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)


def bf16_values(rng) -> np.ndarray:
    """every 7th bf16 pattern and 4000 random ones, as float32 (the top half of the bits)"""
    bits = np.concatenate([np.arange(0, 65536, 7, dtype=np.uint32),
                           rng.integers(0, 65536, 4000, dtype=np.uint32)])
    return (bits << 16).view(np.float32)


@pytest.mark.parametrize("fn", NAMES)
def test_fp16_every_value(fn):
    x16 = all_fp16()
    a = fx.from_numpy(x16.astype(np.float32), "fp16")
    y = fx.unary(a, fn).numpy()
    ok = within_one_ulp("fp16", y, reference(fn, x16.astype(np.float64)))
    assert ok.all(), f"{fn}: {np.count_nonzero(~ok)} fp16 inputs off, first at " \
                     f"{x16[~ok][:4]}"


@pytest.mark.parametrize("fn", NAMES)
def test_bf16_against_ml_dtypes(rng, fn):
    xb = bf16_values(rng)
    a = fx.from_numpy(xb, "bf16")
    y = fx.unary(a, fn).numpy()
    with np.errstate(invalid="ignore"):  # signalling NaN patterns
        x64 = xb.astype(np.float64)
    ok = within_one_ulp("bf16", y, reference(fn, x64))
    assert ok.all(), f"{fn}: {np.count_nonzero(~ok)} bf16 inputs off"


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16", "flex16_5", "dfp16"])
def test_clamp_and_pow(rng, fmt):
    x = (rng.standard_normal(300) * 3).astype(np.float32)
    a = fx.from_numpy(x, fmt)
    xa = a.numpy().astype(np.float64)
    got = fx.clamp(a, -1.25, 2.5, fmt="fp32").numpy()
    np.testing.assert_array_equal(got, np.clip(xa, -1.25, 2.5).astype(np.float32))
    pos = fx.from_numpy(np.abs(x) + 0.125, fmt)
    xp = pos.numpy().astype(np.float64)
    got = fx.pow(pos, 2.5, fmt="fp32").numpy()
    # pow is rounded once from binary64: within half an ulp, so equal to NumPy's rounding
    np.testing.assert_array_equal(got, (xp ** 2.5).astype(np.float32))


def test_backward_against_numpy(rng):
    x = (rng.standard_normal(500) * 2).astype(np.float32)
    dy = rng.standard_normal(500).astype(np.float32)
    xt, gt = fx.from_numpy(x, "fp32"), fx.from_numpy(dy, "fp32")
    xd, gd = x.astype(np.float64), dy.astype(np.float64)
    s = reference("sigmoid", xd)
    want = {
        "tanh": gd * (1 - np.tanh(xd) ** 2),
        "sigmoid": gd * s * (1 - s),
        "silu": gd * s * (1 + xd * (1 - s)),
        "gelu": gd * (0.5 * (1 + _erf(xd / math.sqrt(2))) +
                      xd * np.exp(-0.5 * xd * xd) / math.sqrt(2 * math.pi)),
        "square": gd * 2 * xd,
        "exp": gd * np.exp(xd),
    }
    for fn, w in want.items():
        got = fx.unary_backward(gt, xt, fn).numpy()
        np.testing.assert_allclose(got, w, rtol=2e-6, atol=1e-6, err_msg=fn)
    got = fx.clamp_backward(gt, xt, -1.0, 1.0).numpy()
    np.testing.assert_array_equal(got, np.where((x >= -1) & (x <= 1), dy, 0).astype(np.float32))
    xp = fx.from_numpy(np.abs(x) + 0.5, "fp32")
    got = fx.pow_backward(gt, xp, 1.5).numpy()
    np.testing.assert_allclose(got, gd * 1.5 * (np.abs(xd) + 0.5) ** 0.5, rtol=1e-6)


def test_special_values():
    a = fx.from_numpy(np.array([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan], np.float32), "fp32")
    y = fx.unary(a, "log").numpy()
    assert y[0] == -np.inf and y[1] == -np.inf and np.isnan(y[2]) and y[3] == np.inf
    assert np.isnan(y[4]) and np.isnan(y[5])
    y = fx.unary(a, "reciprocal").numpy()
    assert y[0] == np.inf and y[1] == -np.inf and y[4] == 0 and math.copysign(1, y[4]) < 0
    y = fx.unary(a, "gelu").numpy()
    assert y[3] == np.inf and y[4] == 0 and math.copysign(1, y[4]) < 0 and np.isnan(y[5])


def test_names_and_errors():
    assert fx.unary_names() == NAMES
    a = fx.from_numpy(np.ones(3, np.float32), "fp16")
    with pytest.raises(fx.UnknownNameError, match="known: exp, log"):
        fx.unary(a, "expm1")
    with pytest.raises(fx.UnknownNameError):
        fx.unary_backward(a, a, "nope")
    with pytest.raises(fx.InvalidArgumentError):
        fx.clamp(a, 2.0, 1.0)
    with pytest.raises(fx.InvalidArgumentError):
        fx.clamp(a, float("nan"), 1.0)
    with pytest.raises(fx.InvalidArgumentError):
        fx.pow(a, float("inf"))
    with pytest.raises(fx.ShapeError):
        fx.unary(a, "exp", out=fx.zeros((4,), "fp16"))


def test_arguments_checked_before_the_call():
    a = fx.from_numpy(np.arange(3, dtype=np.float32), "fp32")
    out = fx.zeros((3,), "fp32")
    with pytest.raises(fx.ArgumentTypeError):
        fx.unary(a, 3, out=out)
    with pytest.raises(fx.InvalidArgumentError):
        fx.unary(a, "exp\0log", out=out)
    with pytest.raises(fx.ArgumentTypeError):
        fx.clamp(a, "0", 1.0, out=out)
    with pytest.raises(fx.ArgumentTypeError):
        fx.pow(a, None, out=out)
    with pytest.raises(fx.ArgumentTypeError):
        fx.pow_backward(a, a, True, out=out)
    assert (out.numpy() == 0).all()  # nothing was written
