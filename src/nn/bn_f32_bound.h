/* Batch norm's fp16/bf16 outputs from fp32 arithmetic with an error bound: the proof and the
 * bound's coefficients, shared by the AVX-512 and AVX2 steps (bn_f32_bound_avx512.h,
 * bn_f32_bound_avx2.h).
 *
 * The definition computes each output in double and rounds it to odd into fp32, then to the
 * half format (bn_kernels.h, normalize_half and backward_half). Rounding to odd keeps enough
 * bits for the second rounding to give the half format's nearest-even rounding of the double
 * itself, so the output is a function of that double alone: RNE_half(t_d). These steps compute
 * t in fp32 lanes, twice as many as double lanes, with the rounding error of every
 * operation bounded (E below, per lane), and accept a lane only where every value within E of
 * t rounds to the same half value, which t_d then does too. A vector with a lane not accepted
 * is computed again by the double route, so the bits are always the definition's; in a
 * ResNet-20 run 0.5-3.2 % of the sixteen-lane vectors went back (a lane's t within a few
 * 2^-16 of its rounding interval's width from a midpoint), and zeros, NaN, Inf and values near
 * fp32's limits always do.
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
 * round to the same fp16 value (vcvtps2ph, nearest even, monotone), NaN and Inf excluded; their
 * fp32 roundings still enclose every value within E of t, as E2 - E >= 1.1 u |t| and the
 * slack's 0.001 E2 cover the at most u |t + E2| each rounding moves. A bracket of twice the
 * bound turned away 3 % of ResNet-20's stage-3 gradient vectors. */
#ifndef FX_BN_F32_BOUND_H
#define FX_BN_F32_BOUND_H

#include "bn_kernels.h"

#include <math.h>
#include <stdint.h>

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

/* Whether the outputs of `rows` rows (row r at out + r * stride, S values) share memory with a
 * source's elements at the same places (off + r * stride): the kernels then run in place */
static inline int fx_bn_half_overlaps(const uint16_t *out, const fx_bn_src *x, int64_t off,
                                      int64_t S, int64_t rows, int64_t stride)
{
    if (rows < 1 || S < 1) return 0;
    const int64_t n = (rows - 1) * stride + S, eb = fx_bn_src_bytes(x->kind);
    const uintptr_t o0 = (uintptr_t)out, o1 = o0 + (uintptr_t)(2 * n);
    const uintptr_t x0 = (uintptr_t)((const char *)x->p + off * eb);
    return o0 < x0 + (uintptr_t)(n * eb) && x0 < o1;
}

#define FX_BN_F32_U 0x1p-24
#define FX_BN_F32_SLACK 1.001
#define FX_BN_F32_ABS_MIN 0x1p-120

/* normalize's constants for half format H, in fp32: E2 = c0 + cd |d| + ct |t| */
typedef struct fx_bn_f32_norm_c {
    float mu, a, b, c0, cd, ct;
} fx_bn_f32_norm_c;

static inline int fx_bn_f32_norm_coefs(fx_bn_f32_norm_c *c, double mu, double a, double b,
                                       int H)
{
    if (!fx_bn_f32_const_ok(mu) || !fx_bn_f32_const_ok(a) || !fx_bn_f32_const_ok(b)) return 0;
    /* bf16: twice the bound; fp16: the bound and 1.1 u |t| more */
    const double u = FX_BN_F32_U, k = (H == FX_BN_OUT_BF16 ? 2.0 : 1.0) * FX_BN_F32_SLACK;
    const double fa = fabs(a), t_coef = H == FX_BN_OUT_BF16 ? 1.0 : 2.1;
    double abs_term = 0x1p-146 * (fa + 1.0);
    if (abs_term < FX_BN_F32_ABS_MIN) abs_term = FX_BN_F32_ABS_MIN;
    *c = (fx_bn_f32_norm_c){(float)mu,
                            (float)a,
                            (float)b,
                            fx_bn_f32_up(k * (u * (fa * fabs(mu) + fabs(b)) + abs_term)),
                            fx_bn_f32_up(k * u * 2.0 * fa),
                            fx_bn_f32_up(k * u * t_coef)};
    return 1;
}

/* backward's constants for half format H, in fp32: E2 = c0 + cw |w| + ch |h| */
typedef struct fx_bn_f32_bwd_c {
    float mu, is, k, mdy, mdyx, c0, cw, ch;
} fx_bn_f32_bwd_c;

static inline int fx_bn_f32_bwd_coefs(fx_bn_f32_bwd_c *c, double mu, double is, double k,
                                      double mdy, double mdyx, int H)
{
    if (!fx_bn_f32_const_ok(mu) || !fx_bn_f32_const_ok(is) || !fx_bn_f32_const_ok(k) ||
        !fx_bn_f32_const_ok(mdy) || !fx_bn_f32_const_ok(mdyx))
        return 0;
    /* bf16: twice the bound; fp16: the bound and 1.1 u |t| more (|t| <= 1.01 |k| |w|) */
    const double u = FX_BN_F32_U, s = (H == FX_BN_OUT_BF16 ? 2.0 : 1.0) * FX_BN_F32_SLACK;
    const double fk = fabs(k), fx = fabs(mdyx), w_coef = H == FX_BN_OUT_BF16 ? 4.1 : 5.25;
    double abs_term = 0x1p-146 * (fk * (1.0 + fx * (1.0 + fabs(is))) + 1.0);
    if (abs_term < FX_BN_F32_ABS_MIN) abs_term = FX_BN_F32_ABS_MIN;
    *c = (fx_bn_f32_bwd_c){
        (float)mu,
        (float)is,
        (float)k,
        (float)mdy,
        (float)mdyx,
        fx_bn_f32_up(s * (u * fk * (fabs(mdy) + fx * fabs(is) * fabs(mu)) + abs_term)),
        fx_bn_f32_up(s * u * fk * w_coef),
        fx_bn_f32_up(s * u * fk * fx * 5.1)};
    return 1;
}

#endif
