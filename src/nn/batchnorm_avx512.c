/* AVX-512 batch-norm kernels: the element-wise passes (normalize, backward) of bn_kernels.h in
 * eight double lanes, with the rounding to odd and the output statistics in mask registers;
 * the channel sums with their widening, differences and products in eight lanes, added to
 * the four partial sums of the portable order four lanes at a time; the mantissas' integer sums
 * and extremes thirty-two at a time.
 *
 * The same operations on the same values as the portable loops, element by element, so the
 * same bits; this file is compiled with -ffp-contract=off (CMakeLists.txt), since a fused
 * multiply-add would round differently. Every loop is instantiated per source kind, rounding
 * (to nearest or to odd) and whether statistics are kept, so that none of them is a branch in
 * the loop: with the rounding and the statistics tested per vector the loop ran at a third of
 * the speed of its fp32 instance. The fp16/bf16 outputs (normalize_half, backward_half) are the
 * exception: they are computed in sixteen fp32 lanes with fused multiply-adds and a bound on
 * their error, and each vector the bound cannot certify is computed again by the double route
 * (bn_f32_bound_avx512.h): the same bits by a proof rather than by the same operations. */
#include "../bf16/bf16_round_avx512.h"
#include "../core/lanes_avx512.h"
#include "../fp16/fp16_round_avx512.h"
#include "bn_f32_bound_avx512.h"
#include "bn_kernels.h"
#include "nn_stage.h"

#include <float.h>
#include <immintrin.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* as -ffp-contract=off, for builds that do not pass the flag */
#endif

/* Elements i..i+7 of a source as fx_bn_at_exact gives them, except that mantissas come
 * unscaled. Mantissa sources of the exact range (bn_kernels.h: fx_bn_i16_exact) run as kind
 * FX_BN_I16_EXACT, widened in one conversion (the fp32 route's second conversion took about a
 * tenth of the element-wise passes on a Zen 5), and their weight 2^exp (unit(), 1 for the other
 * kinds) goes into each kernel's constants and results instead of a multiply per vector: every
 * product and difference of the definition then holds the same value divided by a power of
 * two, which rounding to double commutes with (no value comes near double's subnormal or
 * overflow range: mantissas are integers below 2^15 and 2^exp is an fp32 number), so the bits
 * are the definition's with a sixth fewer operations in the sums. Other mantissa sources take
 * the portable kernels. */
static inline double unit(const fx_bn_src *x, const int K)
{
    return K == FX_BN_I16_EXACT ? x->scale : 1.0;
}

/* element i as ld8 gives it (the scalar tails) */
static inline double at_u(const fx_bn_src *x, int64_t i, const int K)
{
    return K == FX_BN_I16_EXACT ? (double)((const int16_t *)x->p)[i] : fx_bn_at_exact(x, i);
}

/* The backward pass's constants for unscaled sources (see unit()): x - mu comes divided by
 * ux (so xhat), dy by ug, so mu, mdy and mdyx are scaled to match and k takes ug back; k's
 * product is then the definition's. */
static inline void bwd_unscaled(const fx_bn_src *x, const fx_bn_src *g, const int KX,
                                const int KG, double *mu, double *k, double *mdy, double *mdyx)
{
    const double ux = unit(x, KX), ug = unit(g, KG);
    *mu /= ux;
    *mdy /= ug;
    *mdyx = *mdyx * ux / ug;
    *k *= ug;
}

/* Eight bf16 values as fp32, their bits shifted up by 16: one word permutation puts value j in
 * the high word of lane j and zeros in the low words, where a zero extension and a shift took
 * two operations (bench_bn, Zen 4, one thread: bf16 forward passes 6-8 % and backward 3-5 %
 * faster; the same values, so the same bits) */
static inline __attribute__((always_inline)) __m256 bf16x8_to_f32(__m128i h)
{
    const __m256i idx = _mm256_setr_epi16(0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7);
    return _mm256_castsi256_ps(
        _mm256_maskz_permutexvar_epi16((__mmask16)0xAAAA, idx, _mm256_castsi128_si256(h)));
}

static inline __attribute__((always_inline)) __m512d ld8(const fx_bn_src *x, int64_t i,
                                                         const int K)
{
    if (K == FX_BN_I16_EXACT) {
        const __m128i h = _mm_loadu_si128((const __m128i *)((const int16_t *)x->p + i));
        return _mm512_cvtepi32_pd(_mm256_cvtepi16_epi32(h));
    }
    if (K == FX_BN_BF16) {
        const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)x->p + i));
        return _mm512_cvtps_pd(bf16x8_to_f32(h));
    }
    if (K == FX_BN_FP16) /* exact; a NaN reaches the double fx_bn_at gives it */
        return _mm512_cvtps_pd(
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)x->p + i))));
    return _mm512_cvtps_pd(_mm256_loadu_ps((const float *)x->p + i));
}

/* ld8 of the first `live` lanes (mask) only, nothing read beyond them */
static inline __attribute__((always_inline)) __m512d ld8_mask(const fx_bn_src *x, int64_t i,
                                                              __mmask8 live, const int K)
{
    if (K == FX_BN_I16_EXACT) {
        const __m128i h = _mm_maskz_loadu_epi16(live, (const int16_t *)x->p + i);
        return _mm512_cvtepi32_pd(_mm256_cvtepi16_epi32(h));
    }
    if (K == FX_BN_BF16) {
        const __m128i h = _mm_maskz_loadu_epi16(live, (const uint16_t *)x->p + i);
        return _mm512_cvtps_pd(bf16x8_to_f32(h));
    }
    if (K == FX_BN_FP16)
        return _mm512_cvtps_pd(
            _mm256_cvtph_ps(_mm_maskz_loadu_epi16(live, (const uint16_t *)x->p + i)));
    return _mm512_cvtps_pd(_mm256_maskz_loadu_ps(live, (const float *)x->p + i));
}

/* stats' second pass (bn_kernels.h) for NC channels side by side, eight elements a step: the
 * differences and squares in eight lanes, then the low four squares and the high four added to
 * the four partial sums in that order, which is the portable order (element s goes to partial
 * s mod 4, and s before s + 4): the same bits as the AVX2 loop in about half its operations. */
static inline __attribute__((always_inline)) void var8_n(const fx_bn_src *x,
                                                         const fx_bn_dims *d, int64_t c0,
                                                         const int NC, const double *mean,
                                                         double *var, const int K)
{
    const int64_t S = d->S;
    const double u = unit(x, K); /* the differences come divided by u, the squares by u^2 */
    __m256d acc[FX_BN_GROUP];
    __m512d mu[FX_BN_GROUP];
    double mu_u[FX_BN_GROUP];
    for (int j = 0; j < NC; j++) {
        mu_u[j] = mean[j] / u;
        mu[j] = _mm512_set1_pd(mu_u[j]);
        acc[j] = _mm256_setzero_pd();
    }
    const int64_t eb = fx_bn_src_bytes(K), ahead = fx_bn_ahead(d, eb);
    for (int64_t n = 0; n < d->N; n++) {
        const int64_t o = (n * d->C + c0) * S;
        int64_t s = 0;
        for (; s + 8 <= S; s += 8)
            for (int j = 0; j < NC; j++) {
                fx_bn_prefetch(x, o + j * S + s, s, ahead, eb);
                const __m512d t = _mm512_sub_pd(ld8(x, o + j * S + s, K), mu[j]);
                const __m512d q = _mm512_mul_pd(t, t);
                acc[j] = _mm256_add_pd(acc[j], _mm512_castpd512_pd256(q));
                acc[j] = _mm256_add_pd(acc[j], _mm512_extractf64x4_pd(q, 1));
            }
        if (s + 4 <= S) {
            for (int j = 0; j < NC; j++) {
                const __m512d t = _mm512_sub_pd(ld8_mask(x, o + j * S + s, 0x0F, K), mu[j]);
                acc[j] = _mm256_add_pd(acc[j], _mm512_castpd512_pd256(_mm512_mul_pd(t, t)));
            }
            s += 4;
        }
        for (; s < S; s++) /* a row's tail joins partial sum 0 only (see add_lane0, AVX2) */
            for (int j = 0; j < NC; j++) {
                const double t = at_u(x, o + j * S + s, K) - mu_u[j];
                acc[j] = _mm256_blend_pd(acc[j], _mm256_add_pd(acc[j], _mm256_set1_pd(t * t)), 1);
            }
    }
    for (int j = 0; j < NC; j++) {
        double l[4];
        _mm256_storeu_pd(l, acc[j]);
        var[j] = ((l[0] + l[1]) + (l[2] + l[3])) / (double)d->M * u * u;
    }
}

/* stats' first pass in the same way: the mean of channel c0 + j for j < NC */
static inline __attribute__((always_inline)) void mean8_n(const fx_bn_src *x,
                                                          const fx_bn_dims *d, int64_t c0,
                                                          const int NC, double *mean,
                                                          const int K)
{
    const int64_t S = d->S;
    __m256d acc[FX_BN_GROUP];
    for (int j = 0; j < NC; j++) acc[j] = _mm256_setzero_pd();
    const int64_t eb = fx_bn_src_bytes(K), ahead = fx_bn_ahead(d, eb);
    for (int64_t n = 0; n < d->N; n++) {
        const int64_t o = (n * d->C + c0) * S;
        int64_t s = 0;
        for (; s + 8 <= S; s += 8)
            for (int j = 0; j < NC; j++) {
                fx_bn_prefetch(x, o + j * S + s, s, ahead, eb);
                const __m512d v = ld8(x, o + j * S + s, K);
                acc[j] = _mm256_add_pd(acc[j], _mm512_castpd512_pd256(v));
                acc[j] = _mm256_add_pd(acc[j], _mm512_extractf64x4_pd(v, 1));
            }
        if (s + 4 <= S) {
            for (int j = 0; j < NC; j++)
                acc[j] = _mm256_add_pd(
                    acc[j], _mm512_castpd512_pd256(ld8_mask(x, o + j * S + s, 0x0F, K)));
            s += 4;
        }
        for (; s < S; s++)
            for (int j = 0; j < NC; j++) {
                const __m256d v = _mm256_set1_pd(at_u(x, o + j * S + s, K));
                acc[j] = _mm256_blend_pd(acc[j], _mm256_add_pd(acc[j], v), 1);
            }
    }
    for (int j = 0; j < NC; j++) {
        double l[4];
        _mm256_storeu_pd(l, acc[j]);
        mean[j] = ((l[0] + l[1]) + (l[2] + l[3])) / (double)d->M * unit(x, K);
    }
}

static inline __attribute__((always_inline)) void stats8_k(const fx_bn_src *x,
                                                           const fx_bn_dims *d, int64_t c0,
                                                           int nc, double *mean, double *var,
                                                           const int K)
{
    if (nc == FX_BN_GROUP) {
        mean8_n(x, d, c0, FX_BN_GROUP, mean, K);
        var8_n(x, d, c0, FX_BN_GROUP, mean, var, K);
        return;
    }
    for (int j = 0; j < nc; j++) {
        mean8_n(x, d, c0 + j, 1, mean + j, K);
        var8_n(x, d, c0 + j, 1, mean + j, var + j, K);
    }
}

static void bn_stats_avx512(const fx_bn_src *x, const fx_bn_dims *d, int64_t c0, int nc,
                            double *mean, double *var)
{
    const fx_bn_src xe = fx_bn_exact_kind(x);
    switch (xe.kind) {
    case FX_BN_I16_EXACT: stats8_k(&xe, d, c0, nc, mean, var, FX_BN_I16_EXACT); break;
    case FX_BN_BF16: stats8_k(x, d, c0, nc, mean, var, FX_BN_BF16); break;
    case FX_BN_FP16: stats8_k(x, d, c0, nc, mean, var, FX_BN_FP16); break;
    case FX_BN_F32: stats8_k(x, d, c0, nc, mean, var, FX_BN_F32); break;
    default: fx_bn_kernels_portable.stats(x, d, c0, nc, mean, var); break;
    }
}

/* grad_sums (bn_kernels.h) in the same way: sum dy and sum dy * xhat of channel c0 + j */
static inline __attribute__((always_inline)) void grad8_n(const fx_bn_src *x,
                                                          const fx_bn_src *dy,
                                                          const fx_bn_dims *d, int64_t c0,
                                                          const int NC, const double *mu,
                                                          const double *is, double *sdy,
                                                          double *sdyx, const int KX,
                                                          const int KG)
{
    const int64_t S = d->S;
    /* dy comes divided by ug and x - mu by ux, so xhat by ux and the products by ux ug */
    const double ux = unit(x, KX), ug = unit(dy, KG);
    __m256d a[FX_BN_GROUP], b[FX_BN_GROUP];
    __m512d vmu[FX_BN_GROUP], vis[FX_BN_GROUP];
    double mu_u[FX_BN_GROUP];
    for (int j = 0; j < NC; j++) {
        a[j] = b[j] = _mm256_setzero_pd();
        mu_u[j] = mu[j] / ux;
        vmu[j] = _mm512_set1_pd(mu_u[j]);
        vis[j] = _mm512_set1_pd(is[j]);
    }
    const int64_t ebx = fx_bn_src_bytes(KX), ebg = fx_bn_src_bytes(KG);
    const int64_t ahead = fx_bn_ahead(d, ebx > ebg ? ebx : ebg);
    for (int64_t n = 0; n < d->N; n++) {
        const int64_t o = (n * d->C + c0) * S;
        int64_t s = 0;
        for (; s + 8 <= S; s += 8)
            for (int j = 0; j < NC; j++) {
                fx_bn_prefetch(dy, o + j * S + s, s, ahead, ebg);
                fx_bn_prefetch(x, o + j * S + s, s, ahead, ebx);
                const __m512d g = ld8(dy, o + j * S + s, KG);
                const __m512d xh =
                    _mm512_mul_pd(_mm512_sub_pd(ld8(x, o + j * S + s, KX), vmu[j]), vis[j]);
                const __m512d p = _mm512_mul_pd(g, xh);
                a[j] = _mm256_add_pd(a[j], _mm512_castpd512_pd256(g));
                a[j] = _mm256_add_pd(a[j], _mm512_extractf64x4_pd(g, 1));
                b[j] = _mm256_add_pd(b[j], _mm512_castpd512_pd256(p));
                b[j] = _mm256_add_pd(b[j], _mm512_extractf64x4_pd(p, 1));
            }
        if (s + 4 <= S) {
            for (int j = 0; j < NC; j++) {
                const __m512d g = ld8_mask(dy, o + j * S + s, 0x0F, KG);
                const __m512d xh = _mm512_mul_pd(
                    _mm512_sub_pd(ld8_mask(x, o + j * S + s, 0x0F, KX), vmu[j]), vis[j]);
                a[j] = _mm256_add_pd(a[j], _mm512_castpd512_pd256(g));
                b[j] = _mm256_add_pd(b[j], _mm512_castpd512_pd256(_mm512_mul_pd(g, xh)));
            }
            s += 4;
        }
        for (; s < S; s++)
            for (int j = 0; j < NC; j++) {
                const double g = at_u(dy, o + j * S + s, KG);
                const double p = g * ((at_u(x, o + j * S + s, KX) - mu_u[j]) * is[j]);
                a[j] = _mm256_blend_pd(a[j], _mm256_add_pd(a[j], _mm256_set1_pd(g)), 1);
                b[j] = _mm256_blend_pd(b[j], _mm256_add_pd(b[j], _mm256_set1_pd(p)), 1);
            }
    }
    for (int j = 0; j < NC; j++) {
        double l[4], m[4];
        _mm256_storeu_pd(l, a[j]);
        _mm256_storeu_pd(m, b[j]);
        sdy[j] = ((l[0] + l[1]) + (l[2] + l[3])) * ug;
        sdyx[j] = ((m[0] + m[1]) + (m[2] + m[3])) * ux * ug;
    }
}

static void bn_grad_sums_avx512(const fx_bn_src *x, const fx_bn_src *dy, const fx_bn_dims *d,
                                int64_t c0, int nc, const double *mu, const double *is,
                                double *sdy, double *sdyx)
{
    const fx_bn_src xe = fx_bn_exact_kind(x), ge = fx_bn_exact_kind(dy);
#define FX_BN_GRAD8_CASE(KX, KG)                                                               \
    if (xe.kind == (KX) && ge.kind == (KG)) {                                                  \
        if (nc == FX_BN_GROUP)                                                                 \
            grad8_n(&xe, &ge, d, c0, FX_BN_GROUP, mu, is, sdy, sdyx, (KX), (KG));              \
        else                                                                                   \
            for (int j = 0; j < nc; j++)                                                       \
                grad8_n(&xe, &ge, d, c0 + j, 1, mu + j, is + j, sdy + j, sdyx + j, (KX),       \
                        (KG));                                                                 \
        return;                                                                                \
    }
    FX_BN_KIND_PAIRS_OF(FX_BN_GRAD8_CASE, FX_BN_I16_EXACT)
#undef FX_BN_GRAD8_CASE
    fx_bn_kernels_portable.grad_sums(x, dy, d, c0, nc, mu, is, sdy, sdyx); /* no other kinds */
}

static inline __attribute__((always_inline)) void var8_k(const fx_bn_src *x,
                                                         const fx_bn_dims *d, int64_t c0,
                                                         int nc, const double *mean,
                                                         double *var, const int K)
{
    if (nc == FX_BN_GROUP) {
        var8_n(x, d, c0, FX_BN_GROUP, mean, var, K);
        return;
    }
    for (int j = 0; j < nc; j++) var8_n(x, d, c0 + j, 1, mean + j, var + j, K);
}

static void bn_var_avx512(const fx_bn_src *x, const fx_bn_dims *d, int64_t c0, int nc,
                          const double *mean, double *var)
{
    const fx_bn_src xe = fx_bn_exact_kind(x);
    switch (xe.kind) {
    case FX_BN_I16_EXACT: var8_k(&xe, d, c0, nc, mean, var, FX_BN_I16_EXACT); break;
    case FX_BN_BF16: var8_k(x, d, c0, nc, mean, var, FX_BN_BF16); break;
    case FX_BN_FP16: var8_k(x, d, c0, nc, mean, var, FX_BN_FP16); break;
    case FX_BN_F32: var8_k(x, d, c0, nc, mean, var, FX_BN_F32); break;
    default: fx_bn_kernels_portable.var(x, d, c0, nc, mean, var); break;
    }
}

/* sum_range_i16 (bn_kernels.h) thirty-two mantissas at a time, as the AVX2 kernel: pairs summed
 * into int32 lanes, widened into int64 lanes every FX_BN_SUM32_VECS vectors. */
static inline __m512i widen_add_512(__m512i acc64, __m512i acc32)
{
    acc64 = _mm512_add_epi64(acc64, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc32)));
    return _mm512_add_epi64(acc64, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc32, 1)));
}

static void bn_sum_range_i16_avx512(const int16_t *m, const fx_bn_dims *d, int64_t c0, int nc,
                                    int64_t *sum, int16_t *lo, int16_t *hi)
{
    const __m512i ones = _mm512_set1_epi16(1);
    for (int j = 0; j < nc; j++) {
        __m512i s32 = _mm512_setzero_si512(), s64 = _mm512_setzero_si512();
        __m512i vlo = _mm512_set1_epi16(INT16_MAX), vhi = _mm512_set1_epi16(INT16_MIN);
        int64_t vecs = 0;
        const int64_t ahead = fx_bn_ahead(d, 2);
        for (int64_t n = 0; n < d->N; n++) {
            const int16_t *p = m + (n * d->C + c0 + j) * d->S;
            for (int64_t s = 0; s < d->S; s += 32) {
                fx_prefetch_at(p + s, 2 * ahead);
                const int64_t left = d->S - s;
                const __mmask32 live = left >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << left) - 1u);
                /* lanes past the row: 0 for the sum, the neutral ends for the extremes */
                const __m512i v = fx_load_w32(p + s, live);
                s32 = _mm512_add_epi32(s32, _mm512_madd_epi16(v, ones));
                vlo = _mm512_mask_min_epi16(vlo, live, vlo, v);
                vhi = _mm512_mask_max_epi16(vhi, live, vhi, v);
                if (++vecs == FX_BN_SUM32_VECS) {
                    s64 = widen_add_512(s64, s32);
                    s32 = _mm512_setzero_si512();
                    vecs = 0;
                }
            }
        }
        s64 = widen_add_512(s64, s32);
        sum[j] = _mm512_reduce_add_epi64(s64);
        int16_t a[32], b[32];
        _mm512_storeu_si512(a, vlo);
        _mm512_storeu_si512(b, vhi);
        int16_t l = INT16_MAX, h = INT16_MIN;
        for (int i = 0; i < 32; i++) {
            l = a[i] < l ? a[i] : l;
            h = b[i] > h ? b[i] : h;
        }
        lo[j] = l;
        hi[j] = h;
    }
}

/* fp32 of eight doubles, to nearest, or to odd as fx_f64_to_f32_round_odd. Rounded down and
 * rounded up, a double gives the same float when it is exact (or NaN: the rounding direction
 * does not touch a NaN's conversion) and two adjacent floats otherwise, of which exactly one
 * has its last bit set: that one is the round to odd (beyond FLT_MAX it is FLT_MAX against
 * Inf, below the smallest subnormal the subnormal against 0, with either sign). Two
 * conversions, a bit test and a blend, where truncating and testing the conversion back for
 * inexactness took two double-width operations (bench_bn, Zen 4, one thread: the 16-bit
 * formats' passes 2-5 % faster; checked against fx_f64_to_f32_round_odd on 3.2e8 doubles,
 * every bit pattern class included, and by tests/test_bn_kernels.c). */
static inline __attribute__((always_inline)) __m256 to_f32(__m512d d, const int ODD)
{
    if (!ODD) return _mm512_cvtpd_ps(d);
    const __m256i dn = _mm256_castps_si256(
        _mm512_cvt_roundpd_ps(d, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    const __m256i up = _mm256_castps_si256(
        _mm512_cvt_roundpd_ps(d, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC));
    const __mmask8 dn_odd = _mm256_test_epi32_mask(dn, _mm256_set1_epi32(1));
    return _mm256_castsi256_ps(_mm256_mask_blend_epi32(dn_odd, up, dn));
}

/* fx_bn_max_add's rule for eight outputs: the largest finite |value| per lane in *mv, the NaN
 * and Inf counted per lane in *nv */
static inline __attribute__((always_inline)) void max8(__m256 q, __m256 *mv, __m256i *nv)
{
    const __m256 a = _mm256_and_ps(q, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    const __mmask8 finite = _mm256_cmp_ps_mask(a, _mm256_set1_ps(FLT_MAX), _CMP_LE_OQ);
    *mv = _mm256_mask_max_ps(*mv, finite, *mv, a);
    *nv = _mm256_mask_add_epi32(*nv, (__mmask8)~finite, *nv, _mm256_set1_epi32(1));
}

/* mv and nv folded into m (a row's counts are below 2^31 per lane, as in the AVX2 kernels) */
static inline void max8_finish(__m256 mv, __m256i nv, fx_bn_max *m)
{
    float l[8];
    int32_t c[8];
    _mm256_storeu_ps(l, mv);
    _mm256_storeu_si256((__m256i *)c, nv);
    for (int i = 0; i < 8; i++) {
        m->max = l[i] > m->max ? l[i] : m->max;
        m->nonfinite += c[i];
    }
}

/* One call of an element-wise kernel instance per rounding (to odd or not) and statistics
 * setting (mx kept or not), so that neither is a test per vector in the SIMD loops: CALL(O, M)
 * with constants O and M, from the caller's odd and mx. */
#define FX_BN_RUN_MODES(CALL)                                                                  \
    do {                                                                                       \
        if (odd && mx) CALL(1, 1);                                                             \
        else if (odd) CALL(1, 0);                                                              \
        else if (mx) CALL(0, 1);                                                               \
        else CALL(0, 0);                                                                       \
    } while (0)

static inline __attribute__((always_inline)) void normalize_k(const fx_bn_src *x, int64_t off,
                                                              float *q, int64_t S, double mu,
                                                              double a, double b, fx_bn_max *mx,
                                                              const int K, const int ODD,
                                                              const int MX)
{
    /* x - mu comes divided by u: a times u makes the same product */
    const double u = unit(x, K), mu_u = mu / u, a_u = a * u;
    const __m512d vmu = _mm512_set1_pd(mu_u), va = _mm512_set1_pd(a_u), vb = _mm512_set1_pd(b);
    __m256 mv = _mm256_setzero_ps();
    __m256i nv = _mm256_setzero_si256();
    int64_t s = 0;
    for (; s + 8 <= S; s += 8) {
        const __m512d t =
            _mm512_add_pd(_mm512_mul_pd(_mm512_sub_pd(ld8(x, off + s, K), vmu), va), vb);
        const __m256 r = to_f32(t, ODD);
        _mm256_storeu_ps(q + s, r);
        if (MX) max8(r, &mv, &nv);
    }
    if (MX) max8_finish(mv, nv, mx);
    for (; s < S; s++) {
        q[s] = nn_round_f32((at_u(x, off + s, K) - mu_u) * a_u + b, ODD);
        if (MX) fx_bn_max_add(mx, q[s]);
    }
}


static void bn_normalize_avx512(const fx_bn_src *x, int64_t off, float *q, int64_t S, double mu,
                                double a, double b, int odd, fx_bn_max *mx)
{
    const fx_bn_src xe = fx_bn_exact_kind(x);
#define FX_BN_NORM_MODE(O, M) normalize_k(&xe, off, q, S, mu, a, b, mx, kind_, (O), (M))
    switch (xe.kind) {
    case FX_BN_I16_EXACT: {
        const int kind_ = FX_BN_I16_EXACT;
        FX_BN_RUN_MODES(FX_BN_NORM_MODE);
        break;
    }
    case FX_BN_BF16: {
        const int kind_ = FX_BN_BF16;
        FX_BN_RUN_MODES(FX_BN_NORM_MODE);
        break;
    }
    case FX_BN_FP16: {
        const int kind_ = FX_BN_FP16;
        FX_BN_RUN_MODES(FX_BN_NORM_MODE);
        break;
    }
    case FX_BN_F32: {
        const int kind_ = FX_BN_F32;
        FX_BN_RUN_MODES(FX_BN_NORM_MODE);
        break;
    }
    default: fx_bn_kernels_portable.normalize(x, off, q, S, mu, a, b, odd, mx); break;
    }
#undef FX_BN_NORM_MODE
}

static inline __attribute__((always_inline)) void backward_k(
    const fx_bn_src *x, const fx_bn_src *g, int64_t off, float *q, int64_t S, double mu,
    double is, double k, double mdy, double mdyx, fx_bn_max *mx, const int KX, const int KG,
    const int ODD, const int MX)
{
    bwd_unscaled(x, g, KX, KG, &mu, &k, &mdy, &mdyx);
    const __m512d vmu = _mm512_set1_pd(mu), vis = _mm512_set1_pd(is), vk = _mm512_set1_pd(k);
    const __m512d vmdy = _mm512_set1_pd(mdy), vmdyx = _mm512_set1_pd(mdyx);
    __m256 mv = _mm256_setzero_ps();
    __m256i nv = _mm256_setzero_si256();
    int64_t s = 0;
    for (; s + 8 <= S; s += 8) {
        const __m512d xh = _mm512_mul_pd(_mm512_sub_pd(ld8(x, off + s, KX), vmu), vis);
        const __m512d t =
            _mm512_sub_pd(_mm512_sub_pd(ld8(g, off + s, KG), vmdy), _mm512_mul_pd(xh, vmdyx));
        const __m256 r = to_f32(_mm512_mul_pd(vk, t), ODD);
        _mm256_storeu_ps(q + s, r);
        if (MX) max8(r, &mv, &nv);
    }
    if (MX) max8_finish(mv, nv, mx);
    for (; s < S; s++) {
        const double xhat = (at_u(x, off + s, KX) - mu) * is;
        q[s] = nn_round_f32(k * (at_u(g, off + s, KG) - mdy - xhat * mdyx), ODD);
        if (MX) fx_bn_max_add(mx, q[s]);
    }
}

static void bn_backward_avx512(const fx_bn_src *x, const fx_bn_src *g, int64_t off, float *q,
                               int64_t S, double mu, double is, double k, double mdy,
                               double mdyx, int odd, fx_bn_max *mx)
{
    const fx_bn_src xe = fx_bn_exact_kind(x), ge = fx_bn_exact_kind(g);
#define FX_BN_BWD_MODE(O, M)                                                                   \
    backward_k(&xe, &ge, off, q, S, mu, is, k, mdy, mdyx, mx, kx_, kg_, (O), (M))
#define FX_BN_BWD_CASE(KX, KG)                                                                 \
    if (xe.kind == (KX) && ge.kind == (KG)) {                                                  \
        const int kx_ = (KX), kg_ = (KG);                                                      \
        FX_BN_RUN_MODES(FX_BN_BWD_MODE);                                                       \
        return;                                                                                \
    }
    FX_BN_KIND_PAIRS_OF(FX_BN_BWD_CASE, FX_BN_I16_EXACT)
#undef FX_BN_BWD_CASE
#undef FX_BN_BWD_MODE
    /* no other kinds */
    fx_bn_kernels_portable.backward(x, g, off, q, S, mu, is, k, mdy, mdyx, odd, mx);
}

/* The fp16/bf16 outputs in registers (bn_kernels.h: normalize_half, backward_half) for the
 * source kinds of the SIMD loops (others are declined, nothing written): sixteen
 * elements a step as two halves of eight doubles, each rounded to odd into fp32 as normalize
 * rounds them, then the ReLU (relu: x > 0 or NaN kept, else +0, tensor_relu's rule) and the
 * half format's rounding by its definition. The last step loads and stores under masks, so
 * nothing outside the row is touched; its lanes compute the same operations as the scalar
 * tails of normalize and backward, hence the same bits. */

/* elements off .. off + 15 of a source as two vectors of eight doubles, under the mask m of
 * sixteen lanes and its halves m0 and m1 (plain loads where all sixteen are live) */
static inline __attribute__((always_inline)) void ld16(const fx_bn_src *x, int64_t off,
                                                      __mmask16 m, __mmask8 m0, __mmask8 m1,
                                                      const int K, __m512d *lo, __m512d *hi)
{
    if (m == 0xFFFF) {
        *lo = ld8(x, off, K);
        *hi = ld8(x, off + 8, K);
    } else {
        *lo = ld8_mask(x, off, m0, K);
        *hi = ld8_mask(x, off + 8, m1, K);
    }
}

static inline __attribute__((always_inline)) __m256i half_of(__m256 lo, __m256 hi, const int H,
                                                             const int RELU)
{
    __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    if (RELU) /* not (v <= 0): v > 0 or NaN */
        v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NLE_UQ), v);
    if (H == FX_BN_OUT_BF16) return fx_bf16_round16_bits(_mm512_castps_si512(v));
    return fx_f32_to_fp16_16(v);
}

/* normalize_half's sixteen outputs at off + s by the definition's double route */
static inline __attribute__((always_inline)) __m256i normalize_half16(
    const fx_bn_src *x, int64_t i, __mmask16 m, __m512d vmu, __m512d va, __m512d vb, const int K,
    const int H, const int RELU)
{
    __m512d t0, t1;
    ld16(x, i, m, (__mmask8)m, (__mmask8)(m >> 8), K, &t0, &t1);
    t0 = _mm512_add_pd(_mm512_mul_pd(_mm512_sub_pd(t0, vmu), va), vb);
    t1 = _mm512_add_pd(_mm512_mul_pd(_mm512_sub_pd(t1, vmu), va), vb);
    return half_of(to_f32(t0, 1), to_f32(t1, 1), H, RELU);
}

/* backward_half's sixteen outputs at off + s by the definition's double route */
static inline __attribute__((always_inline)) __m256i backward_half16(
    const fx_bn_src *x, const fx_bn_src *g, int64_t i, __mmask16 m, __m512d vmu, __m512d vis,
    __m512d vk, __m512d vmdy, __m512d vmdyx, const int KX, const int KG, const int H)
{
    __m512d x0, x1, g0, g1;
    const __mmask8 m0 = (__mmask8)m, m1 = (__mmask8)(m >> 8);
    ld16(x, i, m, m0, m1, KX, &x0, &x1);
    ld16(g, i, m, m0, m1, KG, &g0, &g1);
    const __m512d h0 = _mm512_mul_pd(_mm512_sub_pd(x0, vmu), vis);
    const __m512d h1 = _mm512_mul_pd(_mm512_sub_pd(x1, vmu), vis);
    const __m512d t0 = _mm512_sub_pd(_mm512_sub_pd(g0, vmdy), _mm512_mul_pd(h0, vmdyx));
    const __m512d t1 = _mm512_sub_pd(_mm512_sub_pd(g1, vmdy), _mm512_mul_pd(h1, vmdyx));
    return half_of(to_f32(_mm512_mul_pd(vk, t0), 1), to_f32(_mm512_mul_pd(vk, t1), 1), H, 0);
}

/* The mask of a row's first `left` lanes (at most sixteen) */
static inline __mmask16 lanes16(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* The double route's constants of a half-output pass: normalize's mu, a, b (c1 = a, c2 = b), or
 * backward's mu, is, k, mdy, mdyx (c1 = is, c2 = k), as unscaled sources want them */
typedef struct half_dbl {
    __m512d mu, c1, c2, mdy, mdyx;
} half_dbl;

/* sixteen outputs at element i by the double route (BWD: backward_half's, else normalize_half's) */
static inline __attribute__((always_inline)) __m256i half16_double(
    const fx_bn_src *x, const fx_bn_src *g, int64_t i, __mmask16 m, const half_dbl *d,
    const int BWD, const int KX, const int KG, const int H, const int RELU)
{
    if (BWD) return backward_half16(x, g, i, m, d->mu, d->c1, d->c2, d->mdy, d->mdyx, KX, KG, H);
    return normalize_half16(x, i, m, d->mu, d->c1, d->c2, KX, H, RELU);
}

/* the same by the fp32 route into *h (c: its constants, fx_bn_f32_bwd or fx_bn_f32_norm);
 * returns the lanes it accepts */
static inline __attribute__((always_inline)) __mmask16 half16_f32(
    const fx_bn_src *x, const fx_bn_src *g, int64_t i, __mmask16 m, const void *c, __m256i *h,
    const int BWD, const int KX, const int KG, const int H, const int RELU)
{
    if (BWD)
        return fx_bn_f32_backward16((const fx_bn_f32_bwd *)c, fx_bn_ld16_f32(x, i, m, KX),
                                    fx_bn_ld16_f32(g, i, m, KG), H, h);
    return fx_bn_f32_normalize16((const fx_bn_f32_norm *)c, fx_bn_ld16_f32(x, i, m, KX), H, RELU,
                                 h);
}

/* A half-output pass over `rows` rows (bn_kernels.h). With fp32 constants c (NULL: the double
 * route alone; mantissa sources, and constants outside the bound's range, take that), sources
 * in fp32 lanes (bf16, fp16, fp32) take the fp32 route with its error bound
 * (bn_f32_bound_avx512.h) over up to 64 vectors at a time, noting the vectors it does not
 * accept, which the double route then writes again. A branch on each vector's verdict made the
 * loop wait for it: ResNet-20's 64-value rows with fp16 outputs ran slower than by the double
 * route alone. In place (out over a source) a vector not accepted is written again at once,
 * before the next store can overwrite its inputs. The callers set the constants once for all
 * the channel's rows: per row, they cost as much as a 64-value row's vectors. On the Zen 4
 * (bench_bn, one thread, alternated with the double route alone) ResNet-20's bf16 batch norms
 * took 24-31 % less time, the fp16 ones 9-20 %. */
#define FX_BN_F32_SPAN 1024 /* values per pass of the fp32 route: 64 vectors, one bit each */

static inline __attribute__((always_inline)) void half_rows(
    const fx_bn_src *x, const fx_bn_src *g, int64_t off, uint16_t *out, int64_t S, int64_t rows,
    int64_t stride, const half_dbl *d, const void *c, const int BWD, const int KX, const int KG,
    const int H, const int RELU)
{
    const int in_place = c && (fx_bn_half_overlaps(out, x, off, S, rows, stride) ||
                               (BWD && fx_bn_half_overlaps(out, g, off, S, rows, stride)));
    for (int64_t r = 0; r < rows; r++, off += stride, out += stride) {
        if (!c) {
            for (int64_t s = 0; s < S; s += 16) {
                const __mmask16 m = lanes16(S - s);
                fx_store_w16(out + s, m, half16_double(x, g, off + s, m, d, BWD, KX, KG, H, RELU));
            }
            continue;
        }
        for (int64_t s0 = 0; s0 < S; s0 += FX_BN_F32_SPAN) {
            const int64_t s1 = S - s0 < FX_BN_F32_SPAN ? S : s0 + FX_BN_F32_SPAN;
            uint64_t redo = 0;
            for (int64_t s = s0; s < s1; s += 16) {
                const __mmask16 m = lanes16(s1 - s);
                __m256i h;
                const __mmask16 ok = half16_f32(x, g, off + s, m, c, &h, BWD, KX, KG, H, RELU);
                const int again = (__mmask16)(ok | (__mmask16)~m) != (__mmask16)0xFFFF;
                if (in_place && again) h = half16_double(x, g, off + s, m, d, BWD, KX, KG, H, RELU);
                fx_store_w16(out + s, m, h);
                redo |= (uint64_t)(again && !in_place) << ((s - s0) / 16);
            }
            for (; redo; redo &= redo - 1) {
                const int64_t s = s0 + 16 * __builtin_ctzll(redo);
                const __mmask16 m = lanes16(s1 - s);
                fx_store_w16(out + s, m, half16_double(x, g, off + s, m, d, BWD, KX, KG, H, RELU));
            }
        }
    }
}

static inline __attribute__((always_inline)) void normalize_half_k(
    const fx_bn_src *x, int64_t off, uint16_t *out, int64_t S, int64_t rows, int64_t stride,
    double mu, double a, double b, const int K, const int H, const int RELU)
{
    const double u = unit(x, K); /* as normalize_k */
    const half_dbl d = {_mm512_set1_pd(mu / u), _mm512_set1_pd(a * u), _mm512_set1_pd(b),
                        _mm512_setzero_pd(), _mm512_setzero_pd()};
    fx_bn_f32_norm c;
    const int f32 = K != FX_BN_I16_EXACT && fx_bn_f32_norm_init(&c, mu, a, b, H);
    half_rows(x, x, off, out, S, rows, stride, &d, f32 ? &c : NULL, 0, K, K, H, RELU);
}

static inline __attribute__((always_inline)) void backward_half_k(
    const fx_bn_src *x, const fx_bn_src *g, int64_t off, uint16_t *out, int64_t S, int64_t rows,
    int64_t stride, double mu, double is, double k, double mdy, double mdyx, const int KX,
    const int KG, const int H)
{
    fx_bn_f32_bwd c;
    const int f32 = KX != FX_BN_I16_EXACT && KG != FX_BN_I16_EXACT &&
                    fx_bn_f32_bwd_init(&c, mu, is, k, mdy, mdyx, H);
    bwd_unscaled(x, g, KX, KG, &mu, &k, &mdy, &mdyx);
    const half_dbl d = {_mm512_set1_pd(mu), _mm512_set1_pd(is), _mm512_set1_pd(k),
                        _mm512_set1_pd(mdy), _mm512_set1_pd(mdyx)};
    half_rows(x, g, off, out, S, rows, stride, &d, f32 ? &c : NULL, 1, KX, KG, H, 0);
}

FX_BN_HALF_ENTRIES(bn_normalize_half_avx512, bn_backward_half_avx512)

const fx_bn_kernels fx_bn_kernels_avx512 = {
    bn_stats_avx512,         bn_grad_sums_avx512, bn_normalize_avx512,
    bn_backward_avx512,      bn_var_avx512,       bn_sum_range_i16_avx512,
    bn_normalize_half_avx512, bn_backward_half_avx512,
    /* FLEX16_5/DFP16 outputs go through the fp32 row and quant_f32. batchnorm_avx2.c's
     * registers route, ported to eight double lanes, was slower here both times it was
     * built (docs/performance.md): on the Zen 5 1.16-1.18x the row's time at 64 channels;
     * on the Zen 4 (a vrangepd clamp, vcvtpd2dq {rn-sae}, the statistics in mask registers)
     * ResNet-20's 16-channel batch norm (batch 128, one thread) took 1.47 / 1.92 ms forward /
     * backward against 1.28 / 1.78 through the row, the 64-channel one 0.43 / 0.53 against
     * 0.35 / 0.45. Its statistics cost eight-lane double and int32 operations per value where
     * quant_f32 keeps them on sixteen fp32 lanes, and the row it saves stays in L1. */
    NULL, NULL,
    /* fp16 read in place (one vcvtph2ps per eight values): ResNet-20's batch norms 3-13 %
     * faster forward and 9-35 % backward than through the fp32 copy (bench_bn, Zen 4) */
    1};
