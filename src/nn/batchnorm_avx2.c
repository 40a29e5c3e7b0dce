/* AVX2 batch-norm kernels: the portable definitions of bn_kernels.h, four partial sums in the
 * four double lanes of a vector and up to FX_BN_GROUP channels' chains interleaved (the portable
 * loop is bound by the latency of its additions, not by their number). The same operations on
 * the same values in the same order, so the same bits; this file is compiled with
 * -ffp-contract=off (CMakeLists.txt), since a fused multiply-add would round differently. */
#include "bn_kernels.h"
#include "nn_stage.h"

#include <immintrin.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* as -ffp-contract=off, for builds that do not pass the flag */
#endif

static inline __m256d ld4(const float *p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }

/* v + (a, 0, 0, 0) in lane 0 only: a row's tail element joins partial sum 0; the other lanes
 * are kept as they are (adding +0.0 would turn a -0.0 partial into +0.0) */
static inline __m256d add_lane0(__m256d v, double a)
{
    return _mm256_blend_pd(v, _mm256_add_pd(v, _mm256_set1_pd(a)), 1);
}

/* (p0 + p1) + (p2 + p3) of the lanes, as the portable combination */
static inline double combine(__m256d v)
{
    double l[4];
    _mm256_storeu_pd(l, v);
    return (l[0] + l[1]) + (l[2] + l[3]);
}

/* the low 32 bits of each 64-bit lane (compare masks narrowed to fp32 lanes) */
static inline __m128i narrow(__m256d m)
{
    const __m256i idx = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(m), idx));
}

/* fp32 of four doubles, to nearest, or to odd as fx_f64_to_f32_round_odd: the nearest float,
 * stepped back towards zero when it rounded away, with its last bit set when inexact (not for
 * NaN) */
static inline __m128 to_f32(__m256d d, int odd)
{
    const __m128 f = _mm256_cvtpd_ps(d);
    if (!odd) return f;
    const __m256d back = _mm256_cvtps_pd(f);
    const __m256d abs = _mm256_castsi256_pd(_mm256_set1_epi64x(INT64_MAX));
    const __m256d inexact =
        _mm256_and_pd(_mm256_cmp_pd(back, d, _CMP_NEQ_UQ), _mm256_cmp_pd(d, d, _CMP_EQ_OQ));
    const __m256d away =
        _mm256_cmp_pd(_mm256_and_pd(back, abs), _mm256_and_pd(d, abs), _CMP_GT_OQ);
    __m128i u = _mm_add_epi32(_mm_castps_si128(f), narrow(away)); /* - 1 where away */
    u = _mm_or_si128(u, _mm_srli_epi32(narrow(inexact), 31));     /* | 1 where inexact */
    return _mm_castsi128_ps(u);
}

/* The chains of NC channels (a constant after inlining) side by side. */
static inline __attribute__((always_inline)) void stats_n(const float *x, const fx_bn_dims *d,
                                                          int64_t c0, const int NC, double *mean,
                                                          double *var)
{
    const int64_t S = d->S;
    __m256d acc[FX_BN_GROUP], mu[FX_BN_GROUP];
    for (int j = 0; j < NC; j++) acc[j] = _mm256_setzero_pd();
    for (int64_t n = 0; n < d->N; n++) {
        const float *p = x + (n * d->C + c0) * S;
        int64_t s = 0;
        for (; s + 4 <= S; s += 4)
            for (int j = 0; j < NC; j++) acc[j] = _mm256_add_pd(acc[j], ld4(p + j * S + s));
        for (; s < S; s++)
            for (int j = 0; j < NC; j++) acc[j] = add_lane0(acc[j], (double)p[j * S + s]);
    }
    for (int j = 0; j < NC; j++) {
        mean[j] = combine(acc[j]) / (double)d->M;
        mu[j] = _mm256_set1_pd(mean[j]);
        acc[j] = _mm256_setzero_pd();
    }
    for (int64_t n = 0; n < d->N; n++) {
        const float *p = x + (n * d->C + c0) * S;
        int64_t s = 0;
        for (; s + 4 <= S; s += 4)
            for (int j = 0; j < NC; j++) {
                const __m256d t = _mm256_sub_pd(ld4(p + j * S + s), mu[j]);
                acc[j] = _mm256_add_pd(acc[j], _mm256_mul_pd(t, t));
            }
        for (; s < S; s++)
            for (int j = 0; j < NC; j++) {
                const double t = (double)p[j * S + s] - mean[j];
                acc[j] = add_lane0(acc[j], t * t);
            }
    }
    for (int j = 0; j < NC; j++) var[j] = combine(acc[j]) / (double)d->M;
}

static void bn_stats_avx2(const float *x, const fx_bn_dims *d, int64_t c0, int nc, double *mean,
                          double *var)
{
    if (nc == FX_BN_GROUP) {
        stats_n(x, d, c0, FX_BN_GROUP, mean, var);
        return;
    }
    for (int j = 0; j < nc; j++) stats_n(x, d, c0 + j, 1, mean + j, var + j);
}

static inline __attribute__((always_inline)) void grad_n(const float *x, const float *dy,
                                                         const fx_bn_dims *d, int64_t c0,
                                                         const int NC, const double *mu,
                                                         const double *is, double *sdy,
                                                         double *sdyx)
{
    const int64_t S = d->S;
    __m256d a[FX_BN_GROUP], b[FX_BN_GROUP], vmu[FX_BN_GROUP], vis[FX_BN_GROUP];
    for (int j = 0; j < NC; j++) {
        a[j] = b[j] = _mm256_setzero_pd();
        vmu[j] = _mm256_set1_pd(mu[j]);
        vis[j] = _mm256_set1_pd(is[j]);
    }
    for (int64_t n = 0; n < d->N; n++) {
        const int64_t o = (n * d->C + c0) * S;
        const float *px = x + o, *pg = dy + o;
        int64_t s = 0;
        for (; s + 4 <= S; s += 4)
            for (int j = 0; j < NC; j++) {
                const __m256d g = ld4(pg + j * S + s);
                const __m256d xh = _mm256_mul_pd(_mm256_sub_pd(ld4(px + j * S + s), vmu[j]), vis[j]);
                a[j] = _mm256_add_pd(a[j], g);
                b[j] = _mm256_add_pd(b[j], _mm256_mul_pd(g, xh));
            }
        for (; s < S; s++)
            for (int j = 0; j < NC; j++) {
                const double g = (double)pg[j * S + s];
                a[j] = add_lane0(a[j], g);
                b[j] = add_lane0(b[j], g * (((double)px[j * S + s] - mu[j]) * is[j]));
            }
    }
    for (int j = 0; j < NC; j++) {
        sdy[j] = combine(a[j]);
        sdyx[j] = combine(b[j]);
    }
}

static void bn_grad_sums_avx2(const float *x, const float *dy, const fx_bn_dims *d, int64_t c0,
                              int nc, const double *mu, const double *is, double *sdy,
                              double *sdyx)
{
    if (nc == FX_BN_GROUP) {
        grad_n(x, dy, d, c0, FX_BN_GROUP, mu, is, sdy, sdyx);
        return;
    }
    for (int j = 0; j < nc; j++)
        grad_n(x, dy, d, c0 + j, 1, mu + j, is + j, sdy + j, sdyx + j);
}

static void bn_normalize_avx2(const float *p, float *q, int64_t S, double mu, double a, double b,
                              int odd)
{
    const __m256d vmu = _mm256_set1_pd(mu), va = _mm256_set1_pd(a), vb = _mm256_set1_pd(b);
    int64_t s = 0;
    for (; s + 4 <= S; s += 4) {
        const __m256d t = _mm256_add_pd(_mm256_mul_pd(_mm256_sub_pd(ld4(p + s), vmu), va), vb);
        _mm_storeu_ps(q + s, to_f32(t, odd));
    }
    for (; s < S; s++) q[s] = nn_round_f32(((double)p[s] - mu) * a + b, odd);
}

static void bn_backward_avx2(const float *x, const float *g, float *q, int64_t S, double mu,
                             double is, double k, double mdy, double mdyx, int odd)
{
    const __m256d vmu = _mm256_set1_pd(mu), vis = _mm256_set1_pd(is), vk = _mm256_set1_pd(k);
    const __m256d vmdy = _mm256_set1_pd(mdy), vmdyx = _mm256_set1_pd(mdyx);
    int64_t s = 0;
    for (; s + 4 <= S; s += 4) {
        const __m256d xh = _mm256_mul_pd(_mm256_sub_pd(ld4(x + s), vmu), vis);
        const __m256d t = _mm256_sub_pd(_mm256_sub_pd(ld4(g + s), vmdy), _mm256_mul_pd(xh, vmdyx));
        _mm_storeu_ps(q + s, to_f32(_mm256_mul_pd(vk, t), odd));
    }
    for (; s < S; s++) {
        const double xhat = ((double)x[s] - mu) * is;
        q[s] = nn_round_f32(k * ((double)g[s] - mdy - xhat * mdyx), odd);
    }
}

const fx_bn_kernels fx_bn_kernels_avx2 = {bn_stats_avx2, bn_grad_sums_avx2, bn_normalize_avx2,
                                          bn_backward_avx2};
