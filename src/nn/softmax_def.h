/* The arithmetic of softmax and log-softmax rows, forward and backward: the definition that
 * every backend's kernels reproduce bit for bit (docs/transformer_ops.md).
 *
 * Why a definition of its own instead of libm's expf and one running sum: a row's work is
 * one exponential per element, and a call to expf per element with a sequential fp32 sum
 * cannot use vector instructions (the transformer's attention makes 2^23 scores per block and
 * step). Here the exponential is a fixed sequence of fp32 operations (fx_expf_def) and a
 * row's sums run in 16 interleaved partial sums added by a fixed tree (fx_sum16_tree), so a
 * SIMD kernel that performs the same operations lane by lane gives the same bits as this
 * scalar code on every backend and thread count.
 *
 * fx_expf_def(x): x clamped to [-110, 89] (beyond it the result is 0 or +Inf either way),
 * n = nearest integer to x log2(e) (one fused multiply-add with 1.5 2^23, which rounds to an
 * integer), r = x - n ln2 in two fused steps (ln2 split into 0.693359375 + (-2.12194440e-4):
 * the first product is exact), exp(r) = 1 + (r + r^2 P(r)) with the degree-5 polynomial P of
 * Cephes' expf on |r| <= ln2/2, then the scaling by 2^n as two exact powers of two 2^(n1) and
 * 2^(n - n1), n1 = floor(n/2), so that a subnormal result is rounded once and an overflow
 * becomes +Inf. NaN returns x. Every multiply-add is fmaf (one rounding), every other
 * operation one fp32 rounding, under the default rounding mode. tests/test_nn_expf.c measures
 * its error against exp in double.
 *
 * Files that include this header must be compiled without contraction (ISO C mode does not
 * contract; the vector files also get -ffp-contract=off): a * b + c written out is two
 * roundings here, and the kernels do the same. */
#ifndef FX_NN_SOFTMAX_DEF_H
#define FX_NN_SOFTMAX_DEF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define FX_EXPF_X_MIN (-110.0f)
#define FX_EXPF_X_MAX 89.0f
#define FX_EXPF_LOG2E 1.44269504088896341f
#define FX_EXPF_SHIFTER 12582912.0f /* 1.5 * 2^23: x + it is rounded to an integer */
#define FX_EXPF_LN2_HI 0.693359375f
#define FX_EXPF_LN2_LO (-2.12194440e-4f)
#define FX_EXPF_P0 1.9875691500e-4f
#define FX_EXPF_P1 1.3981999507e-3f
#define FX_EXPF_P2 8.3334519073e-3f
#define FX_EXPF_P3 4.1665795894e-2f
#define FX_EXPF_P4 1.6666665459e-1f
#define FX_EXPF_P5 5.0000001201e-1f

/* 2^k as an fp32 value, k in [-126, 127] */
static inline float fx_pow2i_f32(int32_t k)
{
    const uint32_t bits = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float fx_expf_def(float x)
{
    if (x != x) return x;
    const float xc = x < FX_EXPF_X_MIN ? FX_EXPF_X_MIN : (x > FX_EXPF_X_MAX ? FX_EXPF_X_MAX : x);
    const float n = fmaf(xc, FX_EXPF_LOG2E, FX_EXPF_SHIFTER) - FX_EXPF_SHIFTER; /* |n| <= 159 */
    float r = fmaf(-n, FX_EXPF_LN2_HI, xc);
    r = fmaf(-n, FX_EXPF_LN2_LO, r);
    const float z = r * r;
    float p = fmaf(FX_EXPF_P0, r, FX_EXPF_P1);
    p = fmaf(p, r, FX_EXPF_P2);
    p = fmaf(p, r, FX_EXPF_P3);
    p = fmaf(p, r, FX_EXPF_P4);
    p = fmaf(p, r, FX_EXPF_P5);
    const float e = fmaf(p, z, r) + 1.0f;
    const int32_t k = (int32_t)n;
    const int32_t k1 = (k - (k & 1)) / 2; /* floor(k / 2): the vector kernels' arithmetic shift */
    return (e * fx_pow2i_f32(k1)) * fx_pow2i_f32(k - k1);
}

/* Every NaN result as the one quiet NaN NAN: which of two NaN operands an fp32 operation
 * passes on depends on their order, and a compiler may swap the operands of an addition, so
 * NaN payloads and signs are not part of the definition; the stored NaN is. */
static inline float fx_nan_canonical(float v) { return v != v ? NAN : v; }

/* The 16 partial sums of a row added as a tree: p[i] += p[i + w] for w = 8, 4, 2, 1. */
static inline float fx_sum16_tree(float p[16])
{
    for (int w = 8; w >= 1; w >>= 1)
        for (int i = 0; i < w; i++) p[i] += p[i + w];
    return p[0];
}

/* The row's maximum for the subtraction: NaN when the row holds a NaN or an infinite maximum
 * (then every result is NaN, as exp(Inf - Inf) makes it) or is all -Inf (0/0). */
static inline float fx_softmax_row_max(const float *x, int64_t stride, int64_t len)
{
    float m = -INFINITY;
    int nan_seen = 0;
    for (int64_t k = 0; k < len; k++) {
        const float v = x[k * stride];
        if (v > m) m = v; /* NaN never wins here; nan_seen poisons the row */
        nan_seen |= v != v;
    }
    /* + 0 makes a zero maximum +0 whichever signed zeros the row holds (a SIMD maximum may
     * meet them in another order) */
    return nan_seen || m == INFINITY || m == -INFINITY ? NAN : m + 0.0f;
}

/* One row of softmax (logsm 0) or log-softmax (1): element k at x[k * stride], result at
 * y[k * stride] (y may be x: each pass reads element k before writing it). The largest finite
 * |result| raises *rmax, non-finite results count in *rbad.
 *   softmax:     e_k = fx_expf_def(x_k - m), S = the tree of the partial sums of e_k (element
 *                k into sum k mod 16, in index order), y_k = e_k * (1 / S)
 *   log-softmax: S likewise, y_k = (x_k - m) - logf(S)
 * Softmax's statistics need no pass: with m a number every x_k - m is <= 0, so every e_k is
 * in [0, 1] and the maximum's is exactly 1 (fx_expf_def(0)); S is then in [1, len], every
 * y_k finite and the largest 1 * r = r. With m NaN every result is NaN. */
static inline void fx_softmax_row_def(const float *x, float *y, int64_t stride, int64_t len,
                                      int logsm, float *rmax, int64_t *rbad)
{
    const float m = fx_softmax_row_max(x, stride, len);
    float part[16] = {0};
    for (int64_t k = 0; k < len; k++) {
        const float e = fx_expf_def(x[k * stride] - m);
        part[k & 15] += e;
        if (!logsm) y[k * stride] = e;
    }
    const float sum = fx_sum16_tree(part);
    if (!logsm) {
        const float r = 1.0f / sum;
        for (int64_t k = 0; k < len; k++) y[k * stride] = m != m ? NAN : y[k * stride] * r;
        if (m != m) *rbad += len;
        else if (r > *rmax) *rmax = r;
        return;
    }
    const float lse = logf(sum);
    for (int64_t k = 0; k < len; k++) {
        const float val = fx_nan_canonical((x[k * stride] - m) - lse);
        y[k * stride] = val;
        if (isfinite(val)) *rmax = fabsf(val) > *rmax ? fabsf(val) : *rmax;
        else (*rbad)++;
    }
}

/* One row of the backward pass from dy (g) and the forward's output y into dx (dx may be g):
 *   softmax:     a = tree of partial sums of g_k y_k (each product rounded), dx_k = y_k (g_k - a)
 *   log-softmax: a = tree of partial sums of g_k,                 dx_k = g_k - fx_expf_def(y_k) a */
static inline void fx_softmax_backward_row_def(const float *g, const float *y, float *dx,
                                               int64_t stride, int64_t len, int logsm)
{
    float part[16] = {0};
    for (int64_t k = 0; k < len; k++) {
        const float gk = g[k * stride];
        part[k & 15] += logsm ? gk : gk * y[k * stride];
    }
    const float a = fx_sum16_tree(part);
    for (int64_t k = 0; k < len; k++) {
        const float gk = g[k * stride], p = y[k * stride];
        dx[k * stride] = fx_nan_canonical(logsm ? gk - fx_expf_def(p) * a : p * (gk - a));
    }
}

#endif
