"""Conversions through numpy: every format round-trips; fp16 and bf16 equal NumPy's and
ml_dtypes' casts; flex16_5 and dfp16 equal an independent NumPy quantiser at the tensor's
exponent."""
from __future__ import annotations

import numpy as np
import pytest

import flexpoint as fx

ml_dtypes = pytest.importorskip("ml_dtypes")

N_RANDOM = 200_000


def edge_values() -> np.ndarray:
    f32 = np.finfo(np.float32)
    v = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, 65504.0, -65504.0, 65519.99, 65520.0, -65520.0,
         65536.0, 1e5, 6.1035156e-05, 6.097555e-05, 5.9604645e-08, 2.9802322e-08, 2.98023259e-08,
         8.940697e-08, 1e-10, -1e-10, f32.max, -f32.max, f32.tiny, f32.tiny / 2, 1.4e-45,
         3.0e38, 1.00048828125, 1.000244140625, 1.0009765625, 1.00146484375, 1.00390625,
         1.005859375, 1.0078125, 1.01171875, 255.5, 256.5, 2049.0, 2051.0,
         np.inf, -np.inf, np.nan, -np.nan]
    return np.array(v, dtype=np.float32)


def random_values(rng, n=N_RANDOM) -> np.ndarray:
    # random bit patterns cover every exponent, both signs, subnormals, inf and NaN
    bits = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
    wide = bits.view(np.float32)
    normalish = (rng.standard_normal(n) * np.exp(rng.uniform(-20, 15, n))).astype(np.float32)
    return np.concatenate([wide, normalish, edge_values()])


def assert_same_floats(got: np.ndarray, want: np.ndarray):
    """Bit-equal, except that NaNs are compared as NaN."""
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    g, w = got[~nan], want[~nan]
    assert np.array_equal(g.view(np.uint16 if g.dtype.itemsize == 2 else np.uint32),
                          w.view(np.uint16 if w.dtype.itemsize == 2 else np.uint32))


# ------------------------------------------------------------------------------------------
# fp16 and bf16 against the reference casts
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["random", "edge"])
def test_fp16_equals_numpy_float16(rng, kind):
    x = random_values(rng) if kind == "random" else edge_values()
    t = fx.from_numpy(x, "fp16")
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16)
    assert_same_floats(t.get_raw().view(np.float16), want)
    assert_same_floats(t.raw().view(np.float16), want)
    assert_same_floats(t.numpy(), want.astype(np.float32))


@pytest.mark.parametrize("kind", ["random", "edge"])
def test_bf16_equals_ml_dtypes_bfloat16(rng, kind):
    x = random_values(rng) if kind == "random" else edge_values()
    t = fx.from_numpy(x, "bf16")
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(ml_dtypes.bfloat16)
    got = t.get_raw()
    nan = np.isnan(x)
    assert np.array_equal(got[~nan], want.view(np.uint16)[~nan])
    assert np.all(np.isnan(got[nan].view(ml_dtypes.bfloat16).astype(np.float32)))
    assert_same_floats(t.numpy(), want.astype(np.float32))


def test_nan_keeps_its_sign_in_fp16_and_bf16():
    x = np.array([np.nan, -np.nan], dtype=np.float32)
    x[1] = -abs(x[1])
    for fmt in ("fp16", "bf16"):
        raw = fx.from_numpy(x, fmt).get_raw()
        assert raw[0] >> 15 == 0 and raw[1] >> 15 == 1, fmt


# ------------------------------------------------------------------------------------------
# flex16_5 and dfp16 against an independent quantiser
# ------------------------------------------------------------------------------------------
def reference_quantise(x: np.ndarray, e: int) -> np.ndarray:
    """int16 mantissas of x at exponent e: nearest-even rounding of x * 2^-e, saturating to
    +-32767; NaN -> 0, +-inf -> +-32767 (docs/formats.md)."""
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.rint(x.astype(np.float64) * 2.0 ** -e)
    q = np.where(np.isnan(q), 0.0, q)
    return np.clip(q, -32767, 32767).astype(np.int16)


def reference_exact_exponent(m: float) -> int:
    e = int(np.floor(np.log2(m))) - 14
    if np.rint(m * 2.0 ** -e) > 32767:
        e += 1
    return e


def shared_exp_inputs(rng):
    yield "normal", rng.standard_normal(50_000).astype(np.float32)
    yield "wide", (rng.standard_normal(50_000) * np.exp(rng.uniform(-12, 8, 50_000))).astype(
        np.float32)
    ties = (np.arange(-600, 600) + 0.5).astype(np.float32) * 2.0 ** -3
    yield "ties", np.concatenate([ties, np.float32([4096.0])])
    yield "edges", np.array([0, -0.0, 1e-30, -1e-30, 3.0, -3.0, 32767.4, 0.75, np.nan, np.inf,
                             -np.inf, 12.0], dtype=np.float32)


@pytest.mark.parametrize("fmt", ["flex16_5", "dfp16"])
def test_shared_exponent_equals_reference_quantiser(rng, fmt):
    for name, x in shared_exp_inputs(rng):
        t = fx.from_numpy(x, fmt)
        e = t.exp
        want = reference_quantise(x, e)
        assert np.array_equal(t.get_raw(), want), (fmt, name, e)
        assert np.array_equal(t.raw(), want), (fmt, name)
        assert np.array_equal(t.numpy(), want.astype(np.float64) * 2.0 ** e), (fmt, name)
        st = t.stats
        finite = x[np.isfinite(x)]
        assert st["nonfinite"] == int(np.sum(~np.isfinite(x))), (fmt, name)
        assert st["true_max"] == pytest.approx(float(np.max(np.abs(finite))), rel=1e-6)
        assert st["exp"] == e and st["writes"] == 1


def test_dfp16_picks_the_exact_exponent(rng):
    for scale in (1e-30, 1e-6, 0.3, 1.0, 1000.0, 2.0 ** 20, 1e30):
        x = (rng.standard_normal(1000) * scale).astype(np.float32)
        t = fx.from_numpy(x, "dfp16")
        assert t.exp == reference_exact_exponent(float(np.max(np.abs(x)))), scale
        assert t.stats["saturated"] == 0
    # a maximum that rounds past 32767 at floor(log2 M) - 14 moves one exponent up
    x = np.float32([32767.75, 1.0])
    assert fx.from_numpy(x, "dfp16").exp == 1


def test_flex_overflow_saturates_and_is_counted():
    t = fx.tensor((4,), "flex16_5", autoflex="fixed", exp=-10)
    t.assign([1.0, 100.0, -100.0, 0.001])
    want = reference_quantise(np.float32([1.0, 100.0, -100.0, 0.001]), -10)
    assert np.array_equal(t.get_raw(), want)
    st = t.stats
    assert st["saturated"] == 2 and st["overflows"] == 1 and st["true_max"] == 100.0
    assert t.exp == -10  # "fixed" keeps the exponent


# ------------------------------------------------------------------------------------------
# round trips
# ------------------------------------------------------------------------------------------
def test_fp32_round_trip_is_bit_exact(rng):
    x = random_values(rng, 50_000)
    t = fx.from_numpy(x, "fp32")
    assert_same_floats(t.numpy(), x)
    assert np.array_equal(t.get_raw()[~np.isnan(x)], x.view(np.uint32)[~np.isnan(x)])


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_representable_values_round_trip(rng, fmt):
    bits = rng.integers(0, 2**16, 100_000, dtype=np.uint32).astype(np.uint16)
    vals = bits.view(np.float16).astype(np.float32) if fmt == "fp16" else \
        bits.view(ml_dtypes.bfloat16).astype(np.float32)
    ok = ~np.isnan(vals)
    t = fx.from_numpy(vals[ok], fmt)
    assert np.array_equal(t.get_raw(), bits[ok])
    assert_same_floats(t.numpy(), vals[ok])
    t2 = fx.from_raw(bits, fmt)
    assert_same_floats(t2.numpy(), vals)


@pytest.mark.parametrize("fmt", ["flex16_5", "dfp16"])
def test_shared_exponent_round_trip(rng, fmt):
    m = rng.integers(-32767, 32768, 100_000).astype(np.int16)
    for e in (-20, -3, 0):
        t = fx.from_raw(m, fmt, exp=e)
        vals = t.numpy()
        assert np.array_equal(vals, m.astype(np.float64) * 2.0 ** e)
        back = fx.from_numpy(vals, fmt, exp=e, autoflex="fixed" if fmt == "flex16_5" else None)
        assert np.array_equal(back.numpy(), vals)


@pytest.mark.parametrize("fmt", fx.FORMATS)
def test_numpy_round_trip_shapes_and_conversions(rng, fmt):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    t = fx.from_numpy(x, fmt)
    assert t.shape == (3, 4, 5) and t.fmt == fmt and t.ndim == 3 and t.size == 60
    y = t.numpy()
    assert y.dtype == np.float32 and y.shape == x.shape
    tol = {"fp32": 0, "fp16": 2**-11, "bf16": 2**-8, "flex16_5": 2**-13, "dfp16": 2**-13}[fmt]
    assert np.max(np.abs(y - x)) <= tol * max(1.0, float(np.max(np.abs(x))))
    assert np.array_equal(np.asarray(t), y)
    # astype goes through tensor_copy and lands on the same values as a direct write
    if fmt != "fp32":
        direct = fx.from_numpy(x, fmt).numpy()
        via = fx.from_numpy(x, "fp32").astype(fmt).numpy()
        assert np.array_equal(direct, via)
    assert fx.from_numpy(np.float32(2.5), fmt).shape == (1,)


def test_stochastic_rounding_is_unbiased_and_reproducible():
    x = np.full(20_000, 0.3, dtype=np.float32)
    # exponent -2 fixed: step 0.25, and 0.3 lies 20% of the way from 0.25 to 0.5
    a = fx.tensor(x.shape, "flex16_5", autoflex="fixed", exp=-2)
    a.set_rounding("stochastic", seed=7).assign(x)
    b = fx.tensor(x.shape, "flex16_5", autoflex="fixed", exp=-2)
    b.set_rounding("stochastic", seed=7).assign(x)
    va = a.numpy()
    assert set(np.unique(va)) <= {0.25, 0.5}
    assert abs(float(va.mean()) - 0.3) < 0.01
    assert a.exp == -2
    assert np.array_equal(va, b.numpy())
    with pytest.raises(fx.InvalidArgumentError):
        a.set_rounding("sideways")
    with pytest.raises(fx.FormatError):
        fx.tensor(3, "fp16").set_rounding("stochastic")
