/* Batch norm's fp16/bf16 outputs from fp32 arithmetic with an error bound (AVX-512).
 *
 * The definition computes each output in double and rounds it to odd into fp32, then to the
 * half format (bn_kernels.h, normalize_half and backward_half). Rounding to odd keeps enough
 * bits for the second rounding to give the half format's nearest-even rounding of the double
 * itself, so the output is a function of that double alone: RNE_half(t_d). These steps compute
 * t in sixteen fp32 lanes instead of eight double ones, with the rounding error of every
 * operation bounded (E below, per lane), and accept a lane only where every value within E of
 * t rounds to the same half value, which t_d then does too. A vector with a lane not accepted
 * is computed again by the double route, so the bits are always the definition's; the checks
 * fail about once in 2^10 vectors on training data (a lane's t within about 2^-14 of its
 * rounding interval's width from a midpoint), on zeros, NaN, Inf and values near fp32's
 * limits.
 *
 * The bounds (u = 2^-24, fp32's unit roundoff; each fp32 operation rounds to nearest, so
 * |fl(z) - z| <= u |z| and <= u |fl(z)| above the subnormals, and <= 2^-150 within them; the
 * constants' fp32 roundings mu_f, a_f, ... lie within u of the doubles, which must be 0 or at
 * least 2^-60 in magnitude and at most 2^60, else the row takes the double route):
 *
 *   normalize, T = (x - mu) a + b:   d = x - mu_f,  t = fma(d, a_f, b_f)
 *     |d - (x - mu)| <= u (|mu| + |d|),   |t - T| <= u (2 |a| |d| + |a| |mu| + |b| + |t|)
 *   backward, T = k ((g - mdy) - (x - mu) is mdyx):
 *     d = x - mu_f,  h = d is_f,  e = g - mdy_f,  w = e - h mdyx_f (fused),  t = w k_f
 *     |h - (x - mu) is| <= u (3.01 |h| + |is| |mu|),  |e| <= 1.01 (|w| + |h| |mdyx|),
 *     |t - T| <= u |k| (4.04 |w| + 5.03 |mdyx| |h| + |mdy| + |mdyx| |is| |mu|)
 *
 * The double route's own error (2^-52 relative to the same terms) and the fp32 evaluation of
 * the bound itself are covered by a factor 1.001, and the subnormal absolute errors (2^-150 per
 * operation, times at most the constants' products) by an absolute term of at least 2^-120.
 * The step keeps per lane a bound E2 from coefficients set per half format: for bf16 twice
 * the bound, for fp16 the bound and 1.1 u |t| more.
 *
 * Acceptance. bf16: t's rounding interval (the fp32 patterns sharing t's top 16 bits) has its
 * midpoint M at those bits with 0x8000 below, and |t - M| is exact (the same binade). With
 * E2 < |t - M|, every value within E of t lies on t's side of M and within a quarter interval
 * of t's interval (so within the interval below a power of two, whose width may be half), so
 * it rounds as t does; t is no tie, so RNE is (bits + 0x8000) >> 16. The absolute term of
 * 2^-120 keeps every accepted |t| above 2^-111, far above E, so the sign is certain, and with a
 * ReLU, max(t, 0) gives the definition's +0 for every certain negative. fp16: t - E2 and t + E2
 * (their fp32 roundings still enclose every value within E of t, as E2 - E >= 1.1 u |t|)
 * round to the same fp16 value (vcvtps2ph, nearest even, monotone), NaN and Inf excluded; a
 * bracket of twice the bound turned away 3 % of ResNet-20's stage-3 gradient vectors. */
#ifndef FX_BN_F32_BOUND_AVX512_H
#define FX_BN_F32_BOUND_AVX512_H

#include "bn_kernels.h"

#include <immintrin.h>
#include <math.h>

/* the constants are fp32 numbers: 0 or within [2^-60, 2^60] in magnitude */
static inline int fx_bn_f32_const_ok(double v)
{
    const double a = fabs(v);
    return a == 0.0 || (a >= 0x1p-60 && a <= 0x1p60);
}

/* a bound's coefficient as an fp32 number no smaller than c (c >= 0, at most 2^90) */
static inline float fx_bn_f32_up(double c)
{
    return (float)(c * (1.0 + 0x1p-20));
}

#define FX_BN_F32_U 0x1p-24
#define FX_BN_F32_SLACK 1.001
#define FX_BN_F32_ABS_MIN 0x1p-120

/* normalize's constants for half format H: E2 = c0 + cd |d| + ct |t| */
typedef struct fx_bn_f32_norm {
    __m512 mu, a, b, c0, cd, ct;
} fx_bn_f32_norm;

static inline int fx_bn_f32_norm_init(fx_bn_f32_norm *c, double mu, double a, double b,
                                      const int H)
{
    if (!fx_bn_f32_const_ok(mu) || !fx_bn_f32_const_ok(a) || !fx_bn_f32_const_ok(b)) return 0;
    /* bf16: twice the bound; fp16: the bound and 1.1 u |t| more */
    const double u = FX_BN_F32_U, k = (H == FX_BN_OUT_BF16 ? 2.0 : 1.0) * FX_BN_F32_SLACK;
    const double fa = fabs(a), t_coef = H == FX_BN_OUT_BF16 ? 1.0 : 2.1;
    double abs_term = 0x1p-146 * (fa + 1.0);
    if (abs_term < FX_BN_F32_ABS_MIN) abs_term = FX_BN_F32_ABS_MIN;
    c->mu = _mm512_set1_ps((float)mu);
    c->a = _mm512_set1_ps((float)a);
    c->b = _mm512_set1_ps((float)b);
    c->c0 = _mm512_set1_ps(fx_bn_f32_up(k * (u * (fa * fabs(mu) + fabs(b)) + abs_term)));
    c->cd = _mm512_set1_ps(fx_bn_f32_up(k * u * 2.0 * fa));
    c->ct = _mm512_set1_ps(fx_bn_f32_up(k * u * t_coef));
    return 1;
}

/* backward's constants for half format H: E2 = c0 + cw |w| + ch |h| */
typedef struct fx_bn_f32_bwd {
    __m512 mu, is, k, mdy, mdyx, c0, cw, ch;
} fx_bn_f32_bwd;

static inline int fx_bn_f32_bwd_init(fx_bn_f32_bwd *c, double mu, double is, double k,
                                     double mdy, double mdyx, const int H)
{
    if (!fx_bn_f32_const_ok(mu) || !fx_bn_f32_const_ok(is) || !fx_bn_f32_const_ok(k) ||
        !fx_bn_f32_const_ok(mdy) || !fx_bn_f32_const_ok(mdyx))
        return 0;
    /* bf16: twice the bound; fp16: the bound and 1.1 u |t| more (|t| <= 1.01 |k| |w|) */
    const double u = FX_BN_F32_U, s = (H == FX_BN_OUT_BF16 ? 2.0 : 1.0) * FX_BN_F32_SLACK;
    const double fk = fabs(k), fx = fabs(mdyx), w_coef = H == FX_BN_OUT_BF16 ? 4.1 : 5.25;
    double abs_term = 0x1p-146 * (fk * (1.0 + fx * (1.0 + fabs(is))) + 1.0);
    if (abs_term < FX_BN_F32_ABS_MIN) abs_term = FX_BN_F32_ABS_MIN;
    c->mu = _mm512_set1_ps((float)mu);
    c->is = _mm512_set1_ps((float)is);
    c->k = _mm512_set1_ps((float)k);
    c->mdy = _mm512_set1_ps((float)mdy);
    c->mdyx = _mm512_set1_ps((float)mdyx);
    c->c0 = _mm512_set1_ps(
        fx_bn_f32_up(s * (u * fk * (fabs(mdy) + fx * fabs(is) * fabs(mu)) + abs_term)));
    c->cw = _mm512_set1_ps(fx_bn_f32_up(s * u * fk * w_coef));
    c->ch = _mm512_set1_ps(fx_bn_f32_up(s * u * fk * fx * 5.1));
    return 1;
}

/* sixteen elements of a bf16, fp16 or fp32 source as fp32 (exact), lanes outside m read as 0 */
static inline __attribute__((always_inline)) __m512 fx_bn_ld16_f32(const fx_bn_src *x,
                                                                    int64_t i, __mmask16 m,
                                                                    const int K)
{
    if (K == FX_BN_F32) return _mm512_maskz_loadu_ps(m, (const float *)x->p + i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)x->p + i);
    if (K == FX_BN_FP16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bf16 */
}

static inline __m512 fx_bn_abs16(__m512 v)
{
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF)));
}

/* t rounded to the half format H (ReLU first where RELU) into *out, and the lanes accepted
 * (the header's rule) for the doubled bound e2 */
static inline __attribute__((always_inline)) __mmask16 fx_bn_f32_half(__m512 t, __m512 e2,
                                                                       const int H, const int RELU,
                                                                       __m256i *out)
{
    if (H == FX_BN_OUT_BF16) {
        const __m512i bits = _mm512_castps_si512(t);
        const __m512i mid = _mm512_ternarylogic_epi32(bits, _mm512_set1_epi32((int)0xFFFF0000u),
                                                      _mm512_set1_epi32(0x8000), 0xEA);
        const __m512 dist = fx_bn_abs16(_mm512_sub_ps(t, _mm512_castsi512_ps(mid)));
        const __mmask16 ok = _mm512_cmp_ps_mask(e2, dist, _CMP_LT_OQ);
        const __m512 v = RELU ? _mm512_max_ps(t, _mm512_setzero_ps()) : t;
        const __m512i r =
            _mm512_srli_epi32(_mm512_add_epi32(_mm512_castps_si512(v), _mm512_set1_epi32(0x8000)),
                              16);
        *out = _mm512_cvtepi32_epi16(r);
        return ok;
    }
    __m512 lo = _mm512_sub_ps(t, e2), hi = _mm512_add_ps(t, e2);
    if (RELU) {
        lo = _mm512_max_ps(lo, _mm512_setzero_ps());
        hi = _mm512_max_ps(hi, _mm512_setzero_ps());
    }
    const __m256i hl = _mm512_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i hh = _mm512_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    *out = hl;
    return _mm256_cmpeq_epi16_mask(hl, hh) &
           _mm512_cmp_ps_mask(e2, _mm512_set1_ps(INFINITY), _CMP_LT_OQ);
}

/* normalize_half's sixteen outputs from x (fp32) */
static inline __attribute__((always_inline)) __mmask16
fx_bn_f32_normalize16(const fx_bn_f32_norm *c, __m512 x, const int H, const int RELU,
                      __m256i *out)
{
    const __m512 d = _mm512_sub_ps(x, c->mu);
    const __m512 t = _mm512_fmadd_ps(d, c->a, c->b);
    const __m512 e2 =
        _mm512_fmadd_ps(fx_bn_abs16(d), c->cd, _mm512_fmadd_ps(fx_bn_abs16(t), c->ct, c->c0));
    return fx_bn_f32_half(t, e2, H, RELU, out);
}

/* backward_half's sixteen outputs from x and g (fp32) */
static inline __attribute__((always_inline)) __mmask16
fx_bn_f32_backward16(const fx_bn_f32_bwd *c, __m512 x, __m512 g, const int H, __m256i *out)
{
    const __m512 h = _mm512_mul_ps(_mm512_sub_ps(x, c->mu), c->is);
    const __m512 w = _mm512_fnmadd_ps(h, c->mdyx, _mm512_sub_ps(g, c->mdy));
    const __m512 t = _mm512_mul_ps(w, c->k);
    const __m512 e2 =
        _mm512_fmadd_ps(fx_bn_abs16(w), c->cw, _mm512_fmadd_ps(fx_bn_abs16(h), c->ch, c->c0));
    return fx_bn_f32_half(t, e2, H, 0, out);
}

#endif
