"""flexpoint.convert: the public scalar conversions against NumPy's float16 and ml_dtypes'
bfloat16 over all 65,536 patterns of each format, the values between them (half-way points
and their neighbours), and the argument checks.

References: NumPy's float32 -> float16 and float64 -> float16 casts round once to nearest even;
ml_dtypes' float32 -> bfloat16 cast rounds to nearest even. ml_dtypes' float64 -> bfloat16 cast
goes through float32 (it rounds 1 + 2**-8 + 2**-30 to 1.0, a double rounding), so f64_to_bf16
is compared with an independent rounding in binary64 arithmetic instead (_round_f64)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import flexpoint as fx
from flexpoint import convert

from conftest import needs

ml_dtypes = pytest.importorskip("ml_dtypes")

pytestmark = needs("fx_f32_to_fp16", "fx_fp16_to_f32", "fx_f32_to_bf16", "fx_f32_to_bf16_trunc",
                   "fx_bf16_to_f32", "fx_f64_to_fp16", "fx_f64_to_bf16")

ALL = np.arange(65536, dtype=np.uint32).astype(np.uint16)


def _fp16_values() -> np.ndarray:
    with np.errstate(invalid="ignore"):  # the signalling NaN patterns
        return ALL.view(np.float16).astype(np.float32)


def _bf16_values() -> np.ndarray:
    return (ALL.astype(np.uint32) << 16).view(np.float32)


def _same(got: int, want: int, fmt: str) -> bool:
    """Equal patterns, or both NaN with the same sign (payloads may differ)."""
    exp_mask, man_mask = (0x7C00, 0x3FF) if fmt == "fp16" else (0x7F80, 0x7F)

    def nan(h: int) -> bool:
        return (h & exp_mask) == exp_mask and (h & man_mask) != 0

    if nan(got) or nan(want):
        return nan(got) and nan(want) and (got & 0x8000) == (want & 0x8000)
    return got == want


def _between(values: np.ndarray) -> np.ndarray:
    """fp32 inputs around every finite value v of a 16-bit format (sorted by pattern): v, the
    half-way point to the next pattern's value when fp32 holds it, and the fp32 neighbours of
    that point, which must round to either side."""
    with np.errstate(invalid="ignore"):
        v = values.astype(np.float64)
    nxt = np.roll(v, -1)
    ok = np.isfinite(v) & np.isfinite(nxt) & (np.signbit(v) == np.signbit(nxt))
    mid = ((v + nxt) / 2)[ok].astype(np.float32)
    out = [values[np.isfinite(values)], mid, np.nextafter(mid, np.float32(np.inf)),
           np.nextafter(mid, np.float32(-np.inf))]
    return np.concatenate(out).astype(np.float32)


def _round_f64(d: float, mant: int, emin: int, overflow: float, inf_bits: int) -> int:
    """binary64 -> 16-bit pattern, rounded once to nearest even (finite or infinite d): the
    magnitude scaled to the target's integer grid (exact: powers of two), Python's round
    (ties to even), rebuilt."""
    sign = 0x8000 if math.copysign(1.0, d) < 0 else 0
    a = abs(d)
    if a >= overflow:
        return sign | inf_bits
    if a == 0:
        return sign
    e = max(math.frexp(a)[1] - 1, emin)
    q = round(math.ldexp(a, mant - e))  # an int; 2**(mant+1) means a carry into the exponent
    if q == 0:
        return sign
    biased = e - emin + 1 if q >= (1 << mant) else 0  # subnormal results keep biased 0
    if q >= (1 << (mant + 1)):
        q >>= 1
        biased += 1
    frac = q - (1 << mant) if biased else q
    return sign | (biased << mant) | frac


def test_widening_every_pattern():
    f16 = _fp16_values()
    bf = _bf16_values()
    bad = []
    for h in range(65536):
        a, b = convert.fp16_to_f32(h), convert.bf16_to_f32(h)
        if not (a == f16[h] or (math.isnan(a) and np.isnan(f16[h]))):
            bad.append(("fp16", h, a, f16[h]))
        # ml_dtypes' view of the same bits
        want_b = float(np.array([h], dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)[0])
        if not (b == bf[h] == want_b or (math.isnan(b) and math.isnan(want_b))):
            bad.append(("bf16", h, b, want_b))
        # the sign of zero survives
        if a == 0 and math.copysign(1.0, a) != (-1.0 if h & 0x8000 else 1.0):
            bad.append(("fp16 sign", h, a, None))
    assert not bad, bad[:5]


def test_f32_to_fp16_against_numpy():
    xs = _between(_fp16_values())
    want = xs.astype(np.float16).view(np.uint16)
    got = [convert.f32_to_fp16(x) for x in xs]
    bad = [(float(x), g, int(w)) for x, g, w in zip(xs, got, want) if not _same(g, int(w), "fp16")]
    assert not bad, bad[:5]
    assert len(xs) > 4 * 60000
    # beyond the range: Inf from 65520 on, the largest finite value below it
    assert convert.f32_to_fp16(65519.0) == 0x7BFF
    assert convert.f32_to_fp16(65520.0) == 0x7C00
    assert convert.f32_to_fp16(np.float32(-1e38)) == 0xFC00
    assert convert.f32_to_fp16(np.float32(3e38)) == 0x7C00


def test_f32_to_bf16_against_ml_dtypes():
    xs = _between(_bf16_values())
    want = xs.astype(ml_dtypes.bfloat16).view(np.uint16)
    got = [convert.f32_to_bf16(x) for x in xs]
    bad = [(float(x), g, int(w)) for x, g, w in zip(xs, got, want) if not _same(g, int(w), "bf16")]
    assert not bad, bad[:5]


def test_f32_to_bf16_trunc():
    # every pattern with several low halves: the top 16 bits, NaN a quiet NaN with its sign
    lows = np.array([0, 0x7FFF, 0x8000, 0xFFFF], dtype=np.uint32)
    bad = []
    for low in lows:
        bits = (ALL.astype(np.uint32) << 16) | low
        for b, x in zip(bits, bits.view(np.float32)):
            got = convert.f32_to_bf16_trunc(x)
            want = 0x7FC0 | (int(b) >> 16 & 0x8000) if np.isnan(x) else int(b) >> 16
            if got != want:
                bad.append((hex(int(b)), hex(got), hex(want)))
    assert not bad, bad[:5]
    # truncation differs from rounding above the half-way point
    x = np.uint32(0x3F80FFFF).view(np.float32)
    assert convert.f32_to_bf16_trunc(x) == 0x3F80 and convert.f32_to_bf16(x) == 0x3F81


def test_f64_to_fp16_rounds_once():
    with np.errstate(invalid="ignore"):
        v = _fp16_values().astype(np.float64)
    nxt = np.roll(v, -1)
    ok = np.isfinite(v) & np.isfinite(nxt) & (np.signbit(v) == np.signbit(nxt))
    mid = ((v + nxt) / 2)[ok]
    ds = np.concatenate([v[np.isfinite(v)], mid, mid + np.abs(mid) * 2.0 ** -40,
                         mid - np.abs(mid) * 2.0 ** -40, [1e300, -1e300, 1e-300, -1e-300]])
    with np.errstate(over="ignore"):  # the +-1e300 cases: Inf
        want = ds.astype(np.float16).view(np.uint16)  # NumPy rounds double -> half once
    bad = []
    twice = 0
    for d, w in zip(ds, want):
        got = convert.f64_to_fp16(float(d))
        indep = _round_f64(float(d), 10, -14, 65520.0, 0x7C00)
        if got != int(w) or got != indep:
            bad.append((float(d).hex(), hex(got), hex(int(w)), hex(indep)))
        if abs(d) < 65520.0:
            twice += convert.f32_to_fp16(np.float32(d)) != got
    assert not bad, bad[:5]
    assert twice > 10000  # rounding through fp32 would get these wrong
    assert convert.f64_to_fp16(1 + 2 ** -11 + 2 ** -30) == 0x3C01
    assert convert.f32_to_fp16(np.float32(1 + 2 ** -11 + 2 ** -30)) == 0x3C00


def test_f64_to_bf16_rounds_once():
    with np.errstate(invalid="ignore"):
        v = _bf16_values().astype(np.float64)
    nxt = np.roll(v, -1)
    ok = np.isfinite(v) & np.isfinite(nxt) & (np.signbit(v) == np.signbit(nxt))
    mid = ((v + nxt) / 2)[ok]
    ds = np.concatenate([v[np.isfinite(v)], mid, mid + np.abs(mid) * 2.0 ** -40,
                         mid - np.abs(mid) * 2.0 ** -40, [1e300, -1e300, 1e-300, -1e-300]])
    bad = []
    for d in ds:
        got = convert.f64_to_bf16(float(d))
        want = _round_f64(float(d), 7, -126, float.fromhex("0x1.ffp127"), 0x7F80)
        if got != want:
            bad.append((float(d).hex(), hex(got), hex(want)))
    assert not bad, bad[:5]
    # the case a cast through fp32 gets wrong (as ml_dtypes' did before its 0.7 release): fp32
    # rounds the 2^-30 away to a tie, which rounds to even
    assert convert.f64_to_bf16(1 + 2 ** -8 + 2 ** -30) == 0x3F81
    assert convert.f32_to_bf16(float(np.float32(1 + 2 ** -8 + 2 ** -30))) == 0x3F80


def test_nan_and_signed_zero():
    assert convert.f32_to_fp16(-0.0) == 0x8000 and convert.f32_to_bf16(-0.0) == 0x8000
    assert convert.f64_to_fp16(-0.0) == 0x8000 and convert.f64_to_bf16(-0.0) == 0x8000
    for fn, mask in ((convert.f32_to_fp16, 0x7C00), (convert.f64_to_fp16, 0x7C00),
                     (convert.f32_to_bf16, 0x7F80), (convert.f64_to_bf16, 0x7F80),
                     (convert.f32_to_bf16_trunc, 0x7F80)):
        h = fn(float("nan"))
        assert (h & mask) == mask and (h & ~mask & 0x7FFF) != 0, (fn.__name__, hex(h))
    assert math.isinf(convert.fp16_to_f32(0x7C00)) and math.isnan(convert.bf16_to_f32(0x7FC1))


def test_argument_checks():
    for bad in (-1, 65536, 2 ** 40):
        with pytest.raises(fx.ArgumentRangeError):
            convert.fp16_to_f32(bad)
        with pytest.raises(fx.ArgumentRangeError):
            convert.bf16_to_f32(bad)
    for bad in (1.0, "1", None, True, b"\x00"):
        with pytest.raises(fx.ArgumentTypeError):
            convert.fp16_to_f32(bad)
    for fn in (convert.f32_to_fp16, convert.f32_to_bf16, convert.f32_to_bf16_trunc,
               convert.f64_to_fp16, convert.f64_to_bf16):
        for bad in ("0.5", None, True, np.bool_(False), b"1"):
            with pytest.raises(fx.ArgumentTypeError):
                fn(bad)
        with pytest.raises(fx.ArgumentRangeError):
            fn(10 ** 400)  # beyond the double range
    # a double that fp32 does not hold would round twice: refused, naming the one-rounding call
    for fn, other in ((convert.f32_to_fp16, "f64_to_fp16"), (convert.f32_to_bf16, "f64_to_bf16"),
                      (convert.f32_to_bf16_trunc, "f64_to_bf16")):
        with pytest.raises(fx.ArgumentRangeError, match=other):
            fn(0.1)
        with pytest.raises(fx.ArgumentRangeError):
            fn(1e300)
        assert fn(np.float32(0.1)) == fn(float(np.float32(0.1)))
    # NumPy scalars and ints are accepted where they are exact
    assert convert.f32_to_fp16(np.float16(1.5)) == 0x3E00
    assert convert.f32_to_fp16(2) == 0x4000
    assert convert.fp16_to_f32(np.uint16(0x3C00)) == 1.0
    assert convert.f64_to_fp16(np.float64(0.1)) == int(np.float16(0.1).view(np.uint16))
    assert fx.convert is convert
