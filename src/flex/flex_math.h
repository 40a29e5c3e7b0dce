/* Integer primitives of the shared-exponent formats (docs/formats.md). Plain C, no intrinsics:
 * every backend's result is defined by these. The functions are FX_HD (src/core/fx_hd.h):
 * the CUDA kernels compile these same definitions. */
#ifndef FX_FLEX_MATH_H
#define FX_FLEX_MATH_H

#include <math.h>
#include <stdint.h>

#include <string.h>

#include "../core/fx_hd.h"

#define FX_MANT_MAX 32767
#define FX_DFP_EXP_MIN (-128)
#define FX_DFP_EXP_MAX 127
#define FX_FLEX_WINDOW 32 /* 5-bit exponent: 32 consecutive values */
/* Sentinel returned by the exact-exponent helpers for a zero maximum. */
#define FX_EXP_NONE (-100000)

/* Statistics reported by every quantising kernel (kernels only report; Autoflex decides). */
typedef struct fx_qstats {
    int64_t saturated; /* elements whose rounded value was outside [-32767, 32767] */
    int64_t nonfinite; /* NaN / Inf inputs */
    int64_t underflow; /* nonzero finite inputs that rounded to 0 */
    double max_abs_in; /* largest finite |input|, in the input's own units (f32: real value;
                          i64: integer units of the accumulator exponent) */
    int32_t max_abs_out; /* largest |m| stored, after saturation */
} fx_qstats;

static inline FX_HD void fx_qstats_init(fx_qstats *s)
{
    s->saturated = s->nonfinite = s->underflow = 0;
    s->max_abs_in = 0.0;
    s->max_abs_out = 0;
}

static inline FX_HD void fx_qstats_merge(fx_qstats *d, const fx_qstats *s)
{
    d->saturated += s->saturated;
    d->nonfinite += s->nonfinite;
    d->underflow += s->underflow;
    if (s->max_abs_in > d->max_abs_in) d->max_abs_in = s->max_abs_in;
    if (s->max_abs_out > d->max_abs_out) d->max_abs_out = s->max_abs_out;
}

/* Rounding of float -> int16 conversions. */
typedef struct fx_rounding {
    int mode;         /* FX_ROUND_NEAREST_EVEN or FX_ROUND_STOCHASTIC */
    uint64_t seed;
    uint64_t counter; /* the tensor's write counter */
} fx_rounding;

/* Counter-based generator: a pure function of (seed, counter, index), so every thread count
 * and backend draws the same bits for the same element. SplitMix64 finaliser, applied in a
 * chain so that each key component is fully mixed before the next is added. */
static inline FX_HD uint64_t fx_mix64(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z;
}

static inline FX_HD uint64_t fx_rng_u64(uint64_t seed, uint64_t counter, uint64_t index)
{
    uint64_t k = fx_mix64(seed ^ fx_mix64(counter + 0x9e3779b97f4a7c15ULL));
    return fx_mix64(k + index * 0x9e3779b97f4a7c15ULL);
}

/* Uniform double in [0, 1) with 53 random bits. */
static inline FX_HD double fx_rng_unit(uint64_t seed, uint64_t counter, uint64_t index)
{
    return (double)(fx_rng_u64(seed, counter, index) >> 11) * 0x1.0p-53;
}

/* Rounding right shift of v by s >= 1, ties to even. Any s >= 1 is allowed. */
static inline FX_HD int64_t fx_rshift_rne(int64_t v, int s)
{
    if (s >= 64) {
        /* |v| <= 2^63, so |v| / 2^s <= 1/2, with equality only for v = INT64_MIN and s = 64,
         * a tie that rounds to the even value 0. */
        return 0;
    }
    uint64_t mask = (s == 63) ? 0x7fffffffffffffffULL : ((1ULL << s) - 1);
    int64_t q = v >> s; /* floor */
    uint64_t r = (uint64_t)v & mask;
    uint64_t half = 1ULL << (s - 1);
    if (r > half || (r == half && (q & 1))) q++;
    return q;
}

/* Saturate to [-32767, 32767]; *sat is incremented when the value had to be clamped. */
static inline FX_HD int32_t fx_sat16(int64_t v, int64_t *sat)
{
    if (v > FX_MANT_MAX) { ++*sat; return FX_MANT_MAX; }
    if (v < -FX_MANT_MAX) { ++*sat; return -FX_MANT_MAX; }
    return (int32_t)v;
}

/* v * 2^-shift as an int16 mantissa: shift >= 1 is a rounding right shift (ties to even),
 * shift <= 0 a left shift; then saturation. The one rounding step every integer op ends in. */
static inline FX_HD int32_t fx_requant(int64_t v, int shift, int64_t *sat)
{
    if (shift >= 1) return fx_sat16(fx_rshift_rne(v, shift), sat);
    if (v == 0) return 0;
    if (shift <= -16) { /* |v| >= 1, so |v| * 2^16 > 32767 */
        ++*sat;
        return v > 0 ? FX_MANT_MAX : -FX_MANT_MAX;
    }
    int64_t w = v;
    /* |v| can be up to 2^63; saturate before shifting to avoid overflow */
    if (w > ((int64_t)FX_MANT_MAX << 1) || w < -((int64_t)FX_MANT_MAX << 1)) {
        ++*sat;
        return v > 0 ? FX_MANT_MAX : -FX_MANT_MAX;
    }
    return fx_sat16(w * ((int64_t)1 << (-shift)), sat);
}

/* Right shift with a "jam" (sticky) bit: the result's lowest bit is ORed with whether any
 * discarded bit was nonzero (round to odd). A later rounding to at least 2 fewer bits is then
 * correctly rounded. Used to align add/sub operands whose exponents are far apart. */
static inline FX_HD int64_t fx_rshift_jam(int64_t v, int s)
{
    if (s <= 0) return v;
    if (s >= 63) return v > 0 ? 1 : (v < 0 ? -1 : 0);
    int64_t mag = v < 0 ? -v : v;
    int64_t q = mag >> s;
    if (mag & (((int64_t)1 << s) - 1)) q |= 1;
    return v < 0 ? -q : q;
}

/* Exponent alignment for exact add/sub (docs/formats.md): both operands are brought to the common
 * exponent emin' = max(min(ea, eb), max(ea, eb) - FX_ALIGN_SPAN). Within the span the shift is
 * exact (15 + 40 bits fit int64). Beyond it the smaller operand is jammed: when the output
 * exponent is >= emin' + 2 the final rounding is still correct (round-to-odd argument); when
 * it is lower, the larger operand alone exceeds 2^(span-2) output units, so the result
 * saturates either way. */
#define FX_ALIGN_SPAN 40
static inline FX_HD int fx_align_exp(int ea, int eb)
{
    int lo = ea < eb ? ea : eb, hi = ea < eb ? eb : ea;
    return lo > hi - FX_ALIGN_SPAN ? lo : hi - FX_ALIGN_SPAN;
}
static inline FX_HD int64_t fx_align_to(int64_t m, int e, int e_common)
{
    return e >= e_common ? m * ((int64_t)1 << (e - e_common)) : fx_rshift_jam(m, e_common - e);
}

/* Exact exponent for a finite maximum M > 0 (docs/formats.md): the smallest e with
 * round(M * 2^-e) <= 32767, i.e. floor(log2 M) - 14, plus one when rounding would carry past
 * 32767. Unclamped. FX_EXP_NONE for M == 0. */
static inline FX_HD int fx_exact_exp_f64(double M)
{
    if (!(M > 0.0)) return FX_EXP_NONE;
    int b;
    double f = frexp(M, &b); /* M = f * 2^b, f in [0.5, 1) */
    int e = b - 15;          /* floor(log2 M) - 14 */
    if (f * 32768.0 >= 32767.5) e += 1; /* RNE of 32767.5 is 32768: it carries too */
    return e;
}

/* Same for an integer maximum |v| = maxabs at exponent e_acc (exact integer arithmetic). */
static inline FX_HD int fx_exact_exp_u64(uint64_t maxabs, int e_acc)
{
    if (maxabs == 0) return FX_EXP_NONE;
    int b = 63 - fx_clz64(maxabs); /* floor(log2) */
    int s = b - 14;
    int e = e_acc + s;
    if (s >= 1) { /* s <= 49 because b <= 63 */
        uint64_t q = maxabs >> s, r = maxabs & ((1ULL << s) - 1), half = 1ULL << (s - 1);
        if (r > half || (r == half && (q & 1))) q++;
        if (q > FX_MANT_MAX) e += 1;
    }
    return e;
}

/* Number of significant bits of v (0 for 0). */
static inline FX_HD int fx_bitlen_u64(uint64_t v) { return v ? 64 - fx_clz64(v) : 0; }

/* floor(a * 2^frac / d) with its lowest bit ORed with "remainder != 0" (round to odd), for
 * frac >= 0 and d > 0; the caller guarantees the quotient fits 64 bits. Long division in
 * chunks, so the shifted remainder (< d < 2^bitlen(d)) never overflows. Exact integer averages
 * (pooling, mean) divide with it and leave the single correct rounding to the write. */
static inline FX_HD uint64_t fx_udiv_round_odd(uint64_t a, uint64_t d, int frac)
{
    uint64_t q = a / d, r = a % d;
    const int step = 63 - fx_bitlen_u64(d);
    for (int left = frac; left > 0;) {
        int k = left < step ? left : step;
        uint64_t rs = r << k;
        q = (q << k) | (rs / d);
        r = rs % d;
        left -= k;
    }
    return r ? q | 1 : q;
}

static inline FX_HD int fx_clamp_exp(int e, int lo, int hi, int *clamped)
{
    if (e < lo) { if (clamped) *clamped = 1; return lo; }
    if (e > hi) { if (clamped) *clamped = 1; return hi; }
    return e;
}

/* The exponent rules that decide a write from its own statistics, shared by the core
 * (src/core/store.c, src/autoflex/autoflex.c) and the device kernels that make the same
 * decision without a round trip to the host (src/gpu/gpu_kernels.cu). */

/* Exact exponent of a real maximum M, clamped to [lo, hi] (docs/autoflex.md): a NaN or zero
 * maximum keeps cur_e; an infinite one asks for more than any window (so the top). */
static inline FX_HD int fx_exact_clamped(double M, int cur_e, int lo, int hi, int *clamped)
{
    if (M != M) return cur_e;
    if (M > 1.7976931348623157e308) return fx_clamp_exp(hi + 1, lo, hi, clamped);
    int e = fx_exact_exp_f64(M);
    if (e == FX_EXP_NONE) return cur_e;
    return fx_clamp_exp(e, lo, hi, clamped);
}

/* Overflow mode RECOMPUTE (docs/autoflex.md): the exponent at which a write rounded at e with
 * `saturated` saturated values and real maximum true_max is redone; e itself when it is not
 * (nothing saturated, no positive maximum, or the window's top already reached). */
static inline FX_HD int fx_recompute_exp(int64_t saturated, double true_max, int e, int lo,
                                         int hi)
{
    if (saturated <= 0 || !(true_max > 0.0)) return e;
    return fx_exact_clamped(true_max, e, lo, hi, NULL);
}

/* DFP16's exponent for a whole write (docs/formats.md): the exact exponent of the stage's maximum
 * (f32: the largest finite |x| M; else the largest |v| imax of int64 values at stage_exp,
 * exact on the integers), clamped; cur_e when every value is zero. */
static inline FX_HD int fx_dfp16_write_exp(int f32, double M, uint64_t imax, int stage_exp,
                                           int cur_e, int lo, int hi, int *clamped)
{
    const int want = f32 ? fx_exact_exp_f64(M) : fx_exact_exp_u64(imax, stage_exp);
    return want == FX_EXP_NONE ? cur_e : fx_clamp_exp(want, lo, hi, clamped);
}

/* One element of fp32 -> int16 mantissa at exponent e (docs/formats.md "fp32 to a shared-exponent
 * tensor", steps 1-5; the reasoning about exactness is at the top of src/flex/quant_scalar.c).
 * scale = 2^-e (a power of two, so x * scale is exact in double). u is the rounding draw in
 * [0, 1) for stochastic rounding (fx_rng_unit of the element's key), or a negative value for
 * nearest-even. Returns the mantissa and ORs FX_Q_* into *flags. */
#define FX_Q_SATURATED 1
#define FX_Q_NONFINITE 2
#define FX_Q_UNDERFLOW 4
static inline FX_HD int32_t fx_quant1_f32(float x, double scale, double u, int *flags)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    const uint32_t mag = bits & 0x7FFFFFFFu;
    if (mag > 0x7F800000u) { /* NaN */
        *flags |= FX_Q_NONFINITE;
        return 0;
    }
    if (mag == 0x7F800000u) { /* +-Inf */
        *flags |= FX_Q_NONFINITE;
        return x > 0 ? FX_MANT_MAX : -FX_MANT_MAX;
    }
    int32_t m;
    const double q = (double)x * scale;
    if (!(fabs(q) < 65536.0)) {
        /* beyond 2^16 units every rounding mode saturates */
        m = q > 0 ? FX_MANT_MAX : -FX_MANT_MAX;
        *flags |= FX_Q_SATURATED;
    } else {
        int64_t fl = (int64_t)q;            /* toward zero, exact here; then floor */
        fl -= (double)fl > q;               /* branchless: the sign is data-dependent */
        const double frac = q - (double)fl; /* in [0, 1] */
        /* stochastic: round up with probability frac (frac == 0 never rounds up);
         * nearest-even: bitwise, not short-circuit, to keep the data-dependent choice
         * branchless */
        const int up = u >= 0.0 ? (u < frac) : ((frac > 0.5) | ((frac == 0.5) & (int)(fl & 1)));
        const int64_t rq = fl + up;
        if (rq > FX_MANT_MAX) {
            m = FX_MANT_MAX;
            *flags |= FX_Q_SATURATED;
        } else if (rq < -FX_MANT_MAX) {
            m = -FX_MANT_MAX;
            *flags |= FX_Q_SATURATED;
        } else {
            m = (int32_t)rq;
        }
    }
    if (m == 0 && x != 0.0f) *flags |= FX_Q_UNDERFLOW;
    return m;
}

#endif
