/* The definitions of the shared-exponent conversions (docs/formats.md, "fp32 to a shared-exponent
 * tensor"). Every SIMD level reproduces these bits and statistics exactly.
 *
 * Why double: a float x has at most 24 significant bits and |x| in [2^-149, 2^128), and the
 * exponents of a tensor lie in [-128, 127], so q = x * 2^-e lies in [2^-276, 2^256) and keeps
 * all 24 bits: in double the scaling is exact. Beyond 2^16 units every rounding saturates;
 * below, the split q = floor(q) + frac is exact (Sterbenz for |q| >= 1, frac = q for q in
 * [0, 1)), except for tiny negative q, where frac = 1 - |q| may round, possibly to 1.0: for
 * nearest-even that still rounds to 0, as it must, and for stochastic rounding it moves the
 * probability by at most 2^-53. */
#include "flex_kernels.h"

#include <math.h>

void fx_flex_quant_f32_scalar(const float *src, int16_t *dst, int64_t n, int e,
                              const fx_rounding *r, int64_t index0, fx_qstats *st)
{
    const int stochastic = r != NULL && r->mode == FX_ROUND_STOCHASTIC;
    /* locals, so that the key mixing of (seed, counter) is hoisted out of the loop */
    const uint64_t seed = stochastic ? r->seed : 0, counter = stochastic ? r->counter : 0;
    const double scale = ldexp(1.0, -e); /* a power of two: multiplying by it is exact */
    int64_t saturated = 0, nonfinite = 0, underflow = 0;
    double max_in = 0.0;
    int32_t max_out = 0;

    for (int64_t i = 0; i < n; i++) {
        const float x = src[i];
        /* the element's rounding draw; negative selects nearest-even */
        const double u =
            stochastic ? fx_rng_unit(seed, counter, (uint64_t)index0 + (uint64_t)i) : -1.0;
        int flags = 0;
        const int32_t m = fx_quant1_f32(x, scale, u, &flags); /* flex_math.h: the definition */
        if (flags & FX_Q_NONFINITE) {
            nonfinite++;
        } else {
            const double ax = fabs((double)x);
            if (ax > max_in) max_in = ax;
            saturated += (flags & FX_Q_SATURATED) != 0;
            underflow += (flags & FX_Q_UNDERFLOW) != 0;
        }
        const int32_t am = m < 0 ? -m : m;
        if (am > max_out) max_out = am;
        if (dst) dst[i] = (int16_t)m;
    }
    st->saturated = saturated;
    st->nonfinite = nonfinite;
    st->underflow = underflow;
    st->max_abs_in = max_in;
    st->max_abs_out = max_out;
}

/* m * 2^e with |m| <= 32767 (15 bits) and e in [-128, 127]: the lowest bit weighs >= 2^-128,
 * above the smallest fp32 subnormal 2^-149, and 15 bits fit the 24-bit significand, so the
 * value is exactly representable unless it is >= 2^128, where the conversion gives +-Inf. */
void fx_flex_dequant_scalar(const int16_t *src, float *dst, int64_t n, int e)
{
    const double scale = ldexp(1.0, e);
    for (int64_t i = 0; i < n; i++) dst[i] = (float)((double)src[i] * scale);
}

/* The definition (fx_shared_scale_f32): the exact product m c (below 2^46) in double, scaled
 * by the power of two p2, rounded once to fp32. */
void fx_flex_scaled_f32_scalar(const int16_t *src, float *dst, int64_t n, int64_t c, double p2)
{
    for (int64_t i = 0; i < n; i++) dst[i] = (float)((double)((int64_t)src[i] * c) * p2);
}

void fx_flex_quant_i64_scalar(const int64_t *src, int16_t *dst, int64_t n, int shift,
                              fx_qstats *st)
{
    int64_t saturated = 0, underflow = 0;
    uint64_t max_in = 0; /* |INT64_MIN| = 2^63 fits only unsigned */
    int32_t max_out = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t v = src[i];
        const uint64_t av = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
        if (av > max_in) max_in = av;
        const int32_t m = fx_requant(v, shift, &saturated);
        if (m == 0 && v != 0) underflow++;
        const int32_t am = m < 0 ? -m : m;
        if (am > max_out) max_out = am;
        if (dst) dst[i] = (int16_t)m;
    }
    st->saturated = saturated;
    st->nonfinite = 0;
    st->underflow = underflow;
    st->max_abs_in = (double)max_in;
    st->max_abs_out = max_out;
}

/* The aligned sum of fx_sum2, exact (|v| <= 2^30 + 2^15 by the contract on sa, sb). */
static inline int64_t fx_sum2_at(const fx_sum2 *p, int64_t i)
{
    if (p->gate && p->gate[i] <= 0) return 0;
    const int64_t x = (int64_t)p->a[i] * ((int64_t)1 << p->sa);
    const int64_t y = (int64_t)p->b[i * p->b_inc] * ((int64_t)1 << p->sb);
    return p->negate_b ? x - y : x + y;
}

/* Plain int16 values (a + 0, no shift, no gate): the write path's int16 stages. */
static int fx_sum2_is_plain(const fx_sum2 *p)
{
    return p->sa == 0 && p->b_inc == 0 && p->b[0] == 0 && !p->gate;
}

uint32_t fx_flex_sum2_maxabs_scalar(const fx_sum2 *p, int64_t n)
{
    if (fx_sum2_is_plain(p)) { /* a loop the compiler vectorises on any level */
        int32_t m = 0;
        for (int64_t i = 0; i < n; i++) {
            const int32_t v = p->a[i] < 0 ? -(int32_t)p->a[i] : p->a[i];
            m = v > m ? v : m;
        }
        return (uint32_t)m;
    }
    uint32_t mx = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t v = fx_sum2_at(p, i);
        const uint32_t av = (uint32_t)(v < 0 ? -v : v);
        mx = av > mx ? av : mx;
    }
    return mx;
}

void fx_flex_sum2_widen_scalar(const fx_sum2 *p, int64_t n, int64_t *wide)
{
    for (int64_t i = 0; i < n; i++) wide[i] = fx_sum2_at(p, i);
}

/* Defined as quant_i64 of the widened values, in blocks that stay in L1 (with the given
 * level's widening and quant_i64: the AVX2 backend's sum2_quant). */
void fx_flex_sum2_quant_with(fx_quant_i64_fn quant_i64, fx_sum2_widen_fn widen, const fx_sum2 *p,
                             int64_t n, int16_t *dst, int shift, fx_qstats *st)
{
    if (shift == 0 && fx_sum2_is_plain(p)) {
        /* plain int16 values at their own exponent are kept as they are unless one is -32768
         * (outside the symmetric range, so it saturates): check the range while copying */
        int32_t mx = 0;
        for (int64_t i = 0; i < n; i++) {
            const int32_t a = p->a[i] < 0 ? -(int32_t)p->a[i] : p->a[i];
            mx = a > mx ? a : mx;
            if (dst) dst[i] = p->a[i];
        }
        if (mx <= FX_MANT_MAX) {
            fx_qstats_init(st);
            st->max_abs_in = (double)mx;
            st->max_abs_out = mx;
            return;
        }
    }
    enum { BLOCK = 512 };
    int64_t wide[BLOCK];
    fx_qstats_init(st);
    for (int64_t lo = 0; lo < n; lo += BLOCK) {
        const int64_t len = n - lo < BLOCK ? n - lo : BLOCK;
        const fx_sum2 q = {p->a + lo, p->b + lo * p->b_inc, p->b_inc, p->sa, p->sb, p->negate_b,
                           p->gate ? p->gate + lo : NULL};
        widen(&q, len, wide);
        fx_qstats part;
        quant_i64(wide, dst ? dst + lo : NULL, len, shift, &part);
        fx_qstats_merge(st, &part);
    }
}

void fx_flex_sum2_quant_scalar(const fx_sum2 *p, int64_t n, int16_t *dst, int shift,
                               fx_qstats *st)
{
    fx_flex_sum2_quant_with(fx_flex_quant_i64_scalar, fx_flex_sum2_widen_scalar, p, n, dst, shift,
                            st);
}

void fx_flex_maxabs_f32_scalar(const float *src, int64_t n, float *maxabs, int64_t *nonfinite)
{
    float mx = 0.0f;
    int64_t nf = 0;
    for (int64_t i = 0; i < n; i++) {
        const float ax = fabsf(src[i]);
        if (!isfinite(ax))
            nf++;
        else if (ax > mx)
            mx = ax;
    }
    *maxabs = mx;
    *nonfinite = nf;
}
