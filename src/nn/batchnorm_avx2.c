/* AVX2 batch-norm kernels: the portable definitions of bn_kernels.h, four partial sums in the
 * four double lanes of a vector and up to FX_BN_GROUP channels' chains interleaved (the portable
 * loop is bound by the latency of its additions, not by their number). The same operations on
 * the same values in the same order, so the same bits; this file is compiled with
 * -ffp-contract=off (CMakeLists.txt), since a fused multiply-add would round differently.
 *
 * Every loop is instantiated per source kind (fx_bn_src: fp32, int16 mantissas, bf16; K below
 * is a constant after inlining), so the widening costs no branch per element. */
#include "bn_f32_bound_avx2.h"
#include "bn_kernels.h"
#include "nn_stage.h"
#include "../bf16/bf16_round_avx2.h"
#include "../bf16/bf16_scalar.h"
#include "../fp16/fp16_round_avx2.h"
#include "../fp16/fp16_scalar.h"
#include "../flex/flex_math.h"

#include <float.h>
#include <immintrin.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* as -ffp-contract=off, for builds that do not pass the flag */
#endif

/* four mantissas from p as doubles, unscaled (the folded kernels' loads) */
static inline __m256d ld4_mant(const int16_t *p)
{
    return _mm256_cvtepi32_pd(_mm_cvtepi16_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* Elements i..i+3 of a source as fx_bn_at_exact gives them: fp32 widened; an exact mantissa
 * (bn_kernels.h: fx_bn_i16_exact, run as kind FX_BN_I16_EXACT; other mantissa sources take the
 * portable kernels) times 2^exp in double; bf16 shifted into fp32. */
static inline __attribute__((always_inline)) __m256d ld4(const fx_bn_src *x, int64_t i,
                                                         const int K)
{
    if (K == FX_BN_I16_EXACT)
        return _mm256_mul_pd(ld4_mant((const int16_t *)x->p + i), _mm256_set1_pd(x->scale));
    if (K == FX_BN_BF16) {
        const uint16_t *p = (const uint16_t *)x->p + i;
        /* value j into the high word of lane j, zeros below: the fp32 bits in one unpack
         * instead of a zero extension and a shift (bench_bn with FLEXPOINT_CPU=avx2 on a Zen 4,
         * one thread: bf16 forward passes 8-10 % and backward 5-8 % faster; the same bits) */
        const __m128i h = _mm_loadl_epi64((const __m128i *)p);
        return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h)));
    }
    if (K == FX_BN_FP16) /* F16C: exact; a NaN reaches the double fx_bn_at gives it */
        return _mm256_cvtps_pd(
            _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)((const uint16_t *)x->p + i))));
    return _mm256_cvtps_pd(_mm_loadu_ps((const float *)x->p + i));
}

/* The statistics of four fp32 outputs (fx_bn_max_add's rule), per lane: the largest finite
 * |value| in mv, the NaN/Inf counted down in nv (compare masks are -1); max4_finish adds them
 * to a record. */
static inline void max4(__m128 q, __m128 *mv, __m128i *nv)
{
    const __m128 a = _mm_and_ps(q, _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff)));
    const __m128 finite = _mm_cmp_ps(a, _mm_set1_ps(FLT_MAX), _CMP_LE_OQ); /* not NaN or Inf */
    *mv = _mm_max_ps(*mv, _mm_and_ps(a, finite));
    const __m128 nonfinite = _mm_xor_ps(finite, _mm_castsi128_ps(_mm_set1_epi32(-1)));
    *nv = _mm_sub_epi32(*nv, _mm_castps_si128(nonfinite));
}

/* mv and nv folded into m: the row's counts are below 2^31 per lane (rows are bounded by int32
 * indices elsewhere) */
static inline void max4_finish(__m128 mv, __m128i nv, fx_bn_max *m)
{
    float l[4];
    int32_t c[4];
    _mm_storeu_ps(l, mv);
    _mm_storeu_si128((__m128i *)c, nv);
    for (int i = 0; i < 4; i++) {
        m->max = l[i] > m->max ? l[i] : m->max;
        m->nonfinite += c[i];
    }
}

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

/* The round to odd of to_f32 where every result is a normal fp32 number (the caller checks
 * that with in_range and else rounds again with to_f32): the double's significand cut to
 * fp32's 24 bits (towards zero), with the lowest kept bit set when a cut bit was set. That
 * double is an fp32 number, so the conversion is exact: integer operations in place of
 * to_f32's second conversion and its compares (round to odd took 60 % of the normalisation
 * of int16 sources). Below 2^-126 fp32 keeps fewer bits, from 2^128 up the cut value is not
 * finite in fp32: those results, NaN and zero fail in_range. */
static inline __attribute__((always_inline)) __m128 to_f32_odd_normal(__m256d d)
{
    const __m256i bits = _mm256_castpd_si256(d), cut = _mm256_set1_epi64x((1LL << 29) - 1);
    const __m256i exact = _mm256_cmpeq_epi64(_mm256_and_si256(bits, cut), _mm256_setzero_si256());
    const __m256i kept = _mm256_andnot_si256(cut, bits);
    const __m256i sticky = _mm256_andnot_si256(exact, _mm256_set1_epi64x(1LL << 29));
    return _mm256_cvtpd_ps(_mm256_castsi256_pd(_mm256_or_si256(kept, sticky)));
}

/* -1 lanes where to_f32_odd_normal's result r is right: |r| a normal fp32 number above
 * FLT_MIN. FLT_MIN itself is left out: a double just below 2^-126, cut to 24 bits, lies
 * half-way between the largest subnormal and FLT_MIN and converts to FLT_MIN, where the round
 * to odd gives the subnormal. */
static inline __m128 in_range(__m128 r)
{
    const __m128 a = _mm_and_ps(r, _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff)));
    return _mm_and_ps(_mm_cmp_ps(a, _mm_set1_ps(FLT_MIN), _CMP_GT_OQ),
                      _mm_cmp_ps(a, _mm_set1_ps(FLT_MAX), _CMP_LE_OQ));
}

/* stats' second pass for the chains of NC channels: the mean of (x - mean[j])^2 */
static inline __attribute__((always_inline)) void var_n(const fx_bn_src *x, const fx_bn_dims *d,
                                                        int64_t c0, const int NC,
                                                        const double *mean, double *var,
                                                        const int K)
{
    const int64_t S = d->S;
    __m256d acc[FX_BN_GROUP], mu[FX_BN_GROUP];
    for (int j = 0; j < NC; j++) {
        mu[j] = _mm256_set1_pd(mean[j]);
        acc[j] = _mm256_setzero_pd();
    }
    const int64_t eb = fx_bn_src_bytes(K), ahead = fx_bn_ahead(d, eb);
    for (int64_t n = 0; n < d->N; n++) {
        const int64_t o = (n * d->C + c0) * S;
        int64_t s = 0;
        for (; s + 4 <= S; s += 4)
            for (int j = 0; j < NC; j++) {
                fx_bn_prefetch(x, o + j * S + s, s, ahead, eb);
                const __m256d t = _mm256_sub_pd(ld4(x, o + j * S + s, K), mu[j]);
                acc[j] = _mm256_add_pd(acc[j], _mm256_mul_pd(t, t));
            }
        for (; s < S; s++)
            for (int j = 0; j < NC; j++) {
                const double t = fx_bn_at_exact(x, o + j * S + s) - mean[j];
                acc[j] = add_lane0(acc[j], t * t);
            }
    }
    for (int j = 0; j < NC; j++) var[j] = combine(acc[j]) / (double)d->M;
}

/* The chains of NC channels (a constant after inlining) side by side. */
static inline __attribute__((always_inline)) void stats_n(const fx_bn_src *x, const fx_bn_dims *d,
                                                          int64_t c0, const int NC, double *mean,
                                                          double *var, const int K)
{
    const int64_t S = d->S;
    __m256d acc[FX_BN_GROUP];
    for (int j = 0; j < NC; j++) acc[j] = _mm256_setzero_pd();
    const int64_t eb = fx_bn_src_bytes(K), ahead = fx_bn_ahead(d, eb);
    for (int64_t n = 0; n < d->N; n++) {
        const int64_t o = (n * d->C + c0) * S;
        int64_t s = 0;
        for (; s + 4 <= S; s += 4)
            for (int j = 0; j < NC; j++) {
                fx_bn_prefetch(x, o + j * S + s, s, ahead, eb);
                acc[j] = _mm256_add_pd(acc[j], ld4(x, o + j * S + s, K));
            }
        for (; s < S; s++)
            for (int j = 0; j < NC; j++)
                acc[j] = add_lane0(acc[j], fx_bn_at_exact(x, o + j * S + s));
    }
    for (int j = 0; j < NC; j++) mean[j] = combine(acc[j]) / (double)d->M;
    var_n(x, d, c0, NC, mean, var, K);
}

static inline __attribute__((always_inline)) void stats_k(const fx_bn_src *x, const fx_bn_dims *d,
                                                          int64_t c0, int nc, double *mean,
                                                          double *var, const int K)
{
    if (nc == FX_BN_GROUP) {
        stats_n(x, d, c0, FX_BN_GROUP, mean, var, K);
        return;
    }
    for (int j = 0; j < nc; j++) stats_n(x, d, c0 + j, 1, mean + j, var + j, K);
}

static void bn_stats_avx2(const fx_bn_src *x, const fx_bn_dims *d, int64_t c0, int nc,
                      double *mean, double *var)
{
    const fx_bn_src xe = fx_bn_exact_kind(x);
    switch (xe.kind) {
    case FX_BN_I16_EXACT: stats_k(&xe, d, c0, nc, mean, var, FX_BN_I16_EXACT); break;
    case FX_BN_BF16: stats_k(x, d, c0, nc, mean, var, FX_BN_BF16); break;
    case FX_BN_FP16: stats_k(x, d, c0, nc, mean, var, FX_BN_FP16); break;
    case FX_BN_F32: stats_k(x, d, c0, nc, mean, var, FX_BN_F32); break;
    default: fx_bn_kernels_portable.stats(x, d, c0, nc, mean, var); break;
    }
}

static inline __attribute__((always_inline)) void var_k(const fx_bn_src *x, const fx_bn_dims *d,
                                                        int64_t c0, int nc, const double *mean,
                                                        double *var, const int K)
{
    if (nc == FX_BN_GROUP) {
        var_n(x, d, c0, FX_BN_GROUP, mean, var, K);
        return;
    }
    for (int j = 0; j < nc; j++) var_n(x, d, c0 + j, 1, mean + j, var + j, K);
}

static void bn_var_avx2(const fx_bn_src *x, const fx_bn_dims *d, int64_t c0, int nc,
                    const double *mean, double *var)
{
    const fx_bn_src xe = fx_bn_exact_kind(x);
    switch (xe.kind) {
    case FX_BN_I16_EXACT: var_k(&xe, d, c0, nc, mean, var, FX_BN_I16_EXACT); break;
    case FX_BN_BF16: var_k(x, d, c0, nc, mean, var, FX_BN_BF16); break;
    case FX_BN_FP16: var_k(x, d, c0, nc, mean, var, FX_BN_FP16); break;
    case FX_BN_F32: var_k(x, d, c0, nc, mean, var, FX_BN_F32); break;
    default: fx_bn_kernels_portable.var(x, d, c0, nc, mean, var); break;
    }
}

/* The mantissas' sum, smallest and largest value per channel, sixteen at a time: pairs summed
 * by vpmaddwd into int32 lanes, widened into int64 lanes every FX_BN_SUM32_VECS vectors
 * (bn_kernels.h). */
static inline int64_t hsum_epi64_256(__m256i v)
{
    int64_t l[4];
    _mm256_storeu_si256((__m256i *)l, v);
    return (l[0] + l[1]) + (l[2] + l[3]);
}

static inline __m256i widen_add_256(__m256i acc64, __m256i acc32)
{
    acc64 = _mm256_add_epi64(acc64, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(acc32)));
    return _mm256_add_epi64(acc64, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(acc32, 1)));
}

static void bn_sum_range_i16_avx2(const int16_t *m, const fx_bn_dims *d, int64_t c0, int nc,
                              int64_t *sum, int16_t *lo, int16_t *hi)
{
    const __m256i ones = _mm256_set1_epi16(1);
    for (int j = 0; j < nc; j++) {
        __m256i s32 = _mm256_setzero_si256(), s64 = _mm256_setzero_si256();
        __m256i vlo = _mm256_set1_epi16(INT16_MAX), vhi = _mm256_set1_epi16(INT16_MIN);
        int64_t tail = 0, vecs = 0;
        int16_t l = INT16_MAX, h = INT16_MIN;
        const int64_t ahead = fx_bn_ahead(d, 2);
        for (int64_t n = 0; n < d->N; n++) {
            const int16_t *p = m + (n * d->C + c0 + j) * d->S;
            int64_t s = 0;
            for (; s + 16 <= d->S; s += 16) {
                if (s % 32 == 0) fx_prefetch_at(p + s, 2 * ahead);
                const __m256i v = _mm256_loadu_si256((const __m256i *)(p + s));
                s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(v, ones));
                vlo = _mm256_min_epi16(vlo, v);
                vhi = _mm256_max_epi16(vhi, v);
                if (++vecs == FX_BN_SUM32_VECS) {
                    s64 = widen_add_256(s64, s32);
                    s32 = _mm256_setzero_si256();
                    vecs = 0;
                }
            }
            for (; s < d->S; s++) {
                tail += p[s];
                l = p[s] < l ? p[s] : l;
                h = p[s] > h ? p[s] : h;
            }
        }
        s64 = widen_add_256(s64, s32);
        int16_t a[16], b[16];
        _mm256_storeu_si256((__m256i *)a, vlo);
        _mm256_storeu_si256((__m256i *)b, vhi);
        for (int i = 0; i < 16; i++) {
            l = a[i] < l ? a[i] : l;
            h = b[i] > h ? b[i] : h;
        }
        sum[j] = hsum_epi64_256(s64) + tail;
        lo[j] = l;
        hi[j] = h;
    }
}

static inline __attribute__((always_inline)) void grad_n(const fx_bn_src *x, const fx_bn_src *dy,
                                                         const fx_bn_dims *d, int64_t c0,
                                                         const int NC, const double *mu,
                                                         const double *is, double *sdy,
                                                         double *sdyx, const int KX,
                                                         const int KG)
{
    const int64_t S = d->S;
    __m256d a[FX_BN_GROUP], b[FX_BN_GROUP], vmu[FX_BN_GROUP], vis[FX_BN_GROUP];
    for (int j = 0; j < NC; j++) {
        a[j] = b[j] = _mm256_setzero_pd();
        vmu[j] = _mm256_set1_pd(mu[j]);
        vis[j] = _mm256_set1_pd(is[j]);
    }
    const int64_t ebx = fx_bn_src_bytes(KX), ebg = fx_bn_src_bytes(KG);
    const int64_t ahead = fx_bn_ahead(d, ebx > ebg ? ebx : ebg);
    for (int64_t n = 0; n < d->N; n++) {
        const int64_t o = (n * d->C + c0) * S;
        int64_t s = 0;
        for (; s + 4 <= S; s += 4)
            for (int j = 0; j < NC; j++) {
                fx_bn_prefetch(dy, o + j * S + s, s, ahead, ebg);
                fx_bn_prefetch(x, o + j * S + s, s, ahead, ebx);
                const __m256d g = ld4(dy, o + j * S + s, KG);
                const __m256d xh =
                    _mm256_mul_pd(_mm256_sub_pd(ld4(x, o + j * S + s, KX), vmu[j]), vis[j]);
                a[j] = _mm256_add_pd(a[j], g);
                b[j] = _mm256_add_pd(b[j], _mm256_mul_pd(g, xh));
            }
        for (; s < S; s++)
            for (int j = 0; j < NC; j++) {
                const double g = fx_bn_at_exact(dy, o + j * S + s);
                a[j] = add_lane0(a[j], g);
                b[j] = add_lane0(b[j], g * ((fx_bn_at_exact(x, o + j * S + s) - mu[j]) * is[j]));
            }
    }
    for (int j = 0; j < NC; j++) {
        sdy[j] = combine(a[j]);
        sdyx[j] = combine(b[j]);
    }
}

/* bn_kernels.h's pairs with exact mantissa sources (the others take the portable kernels) */
#define FX_BN_AVX2_KIND_PAIRS(X) FX_BN_KIND_PAIRS_OF(X, FX_BN_I16_EXACT)

static inline __attribute__((always_inline)) void grad_k(const fx_bn_src *x, const fx_bn_src *dy,
                                                         const fx_bn_dims *d, int64_t c0, int nc,
                                                         const double *mu, const double *is,
                                                         double *sdy, double *sdyx, const int KX,
                                                         const int KG)
{
    if (nc == FX_BN_GROUP) {
        grad_n(x, dy, d, c0, FX_BN_GROUP, mu, is, sdy, sdyx, KX, KG);
        return;
    }
    for (int j = 0; j < nc; j++)
        grad_n(x, dy, d, c0 + j, 1, mu + j, is + j, sdy + j, sdyx + j, KX, KG);
}


static void bn_grad_sums_avx2(const fx_bn_src *x, const fx_bn_src *dy, const fx_bn_dims *d,
                          int64_t c0, int nc, const double *mu, const double *is, double *sdy,
                          double *sdyx)
{
    const fx_bn_src xe = fx_bn_exact_kind(x), ge = fx_bn_exact_kind(dy);
#define FX_BN_GRAD_CASE(KX, KG)                                                                \
    if (xe.kind == (KX) && ge.kind == (KG)) {                                                  \
        grad_k(&xe, &ge, d, c0, nc, mu, is, sdy, sdyx, (KX), (KG));                            \
        return;                                                                                \
    }
    FX_BN_AVX2_KIND_PAIRS(FX_BN_GRAD_CASE)
#undef FX_BN_GRAD_CASE
    fx_bn_kernels_portable.grad_sums(x, dy, d, c0, nc, mu, is, sdy, sdyx); /* the other kinds */
}

/* fp32 of four results: to nearest (ODD = 0), or to odd by the fast cut where all four are
 * normal fp32 numbers and else by to_f32. The choice is made per vector, so that every output
 * is written once, after its own inputs were read: an output may be the private fp32 copy of
 * its source (batchnorm.c), which a second pass over the row would read overwritten. */
static inline __attribute__((always_inline)) __m128 round4(__m256d t, const int ODD)
{
    if (!ODD) return to_f32(t, 0);
    const __m128 r = to_f32_odd_normal(t);
    if (_mm_movemask_ps(in_range(r)) == 0xF) return r;
    return to_f32(t, 1);
}

/* One row, rounded as round4 (ODD a constant after inlining). */
static inline __attribute__((always_inline)) void normalize_run(const fx_bn_src *x, int64_t off,
                                                                float *q, int64_t S, double mu,
                                                                double a, double b, int odd,
                                                                fx_bn_max *mx, const int K,
                                                                const int ODD)
{
    const __m256d vmu = _mm256_set1_pd(mu), va = _mm256_set1_pd(a), vb = _mm256_set1_pd(b);
    __m128 mv = _mm_setzero_ps();
    __m128i nv = _mm_setzero_si128();
    int64_t s = 0;
    for (; s + 4 <= S; s += 4) {
        const __m256d t =
            _mm256_add_pd(_mm256_mul_pd(_mm256_sub_pd(ld4(x, off + s, K), vmu), va), vb);
        const __m128 r = round4(t, ODD);
        _mm_storeu_ps(q + s, r);
        if (mx) max4(r, &mv, &nv);
    }
    if (mx) max4_finish(mv, nv, mx);
    for (; s < S; s++) {
        q[s] = nn_round_f32((fx_bn_at_exact(x, off + s) - mu) * a + b, odd);
        if (mx) fx_bn_max_add(mx, q[s]);
    }
}

static inline __attribute__((always_inline)) void normalize_k(const fx_bn_src *x, int64_t off,
                                                              float *q, int64_t S, double mu,
                                                              double a, double b, int odd,
                                                              fx_bn_max *mx, const int K)
{
    if (odd) normalize_run(x, off, q, S, mu, a, b, odd, mx, K, 1);
    else normalize_run(x, off, q, S, mu, a, b, odd, mx, K, 0);
}

static void bn_normalize_avx2(const fx_bn_src *x, int64_t off, float *q, int64_t S, double mu,
                              double a, double b, int odd, fx_bn_max *mx)
{
    const fx_bn_src xe = fx_bn_exact_kind(x);
    switch (xe.kind) {
    case FX_BN_I16_EXACT: normalize_k(&xe, off, q, S, mu, a, b, odd, mx, FX_BN_I16_EXACT); break;
    case FX_BN_BF16: normalize_k(x, off, q, S, mu, a, b, odd, mx, FX_BN_BF16); break;
    case FX_BN_FP16: normalize_k(x, off, q, S, mu, a, b, odd, mx, FX_BN_FP16); break;
    case FX_BN_F32: normalize_k(x, off, q, S, mu, a, b, odd, mx, FX_BN_F32); break;
    default: fx_bn_kernels_portable.normalize(x, off, q, S, mu, a, b, odd, mx); break;
    }
}

/* One row of the backward pass, as normalize_run. */
static inline __attribute__((always_inline)) void backward_run(
    const fx_bn_src *x, const fx_bn_src *g, int64_t off, float *q, int64_t S, double mu,
    double is, double k, double mdy, double mdyx, int odd, fx_bn_max *mx, const int KX,
    const int KG, const int ODD)
{
    const __m256d vmu = _mm256_set1_pd(mu), vis = _mm256_set1_pd(is), vk = _mm256_set1_pd(k);
    const __m256d vmdy = _mm256_set1_pd(mdy), vmdyx = _mm256_set1_pd(mdyx);
    __m128 mv = _mm_setzero_ps();
    __m128i nv = _mm_setzero_si128();
    int64_t s = 0;
    for (; s + 4 <= S; s += 4) {
        const __m256d xh = _mm256_mul_pd(_mm256_sub_pd(ld4(x, off + s, KX), vmu), vis);
        const __m256d t =
            _mm256_sub_pd(_mm256_sub_pd(ld4(g, off + s, KG), vmdy), _mm256_mul_pd(xh, vmdyx));
        const __m128 r = round4(_mm256_mul_pd(vk, t), ODD);
        _mm_storeu_ps(q + s, r);
        if (mx) max4(r, &mv, &nv);
    }
    if (mx) max4_finish(mv, nv, mx);
    for (; s < S; s++) {
        const double xhat = (fx_bn_at_exact(x, off + s) - mu) * is;
        q[s] = nn_round_f32(k * (fx_bn_at_exact(g, off + s) - mdy - xhat * mdyx), odd);
        if (mx) fx_bn_max_add(mx, q[s]);
    }
}

static inline __attribute__((always_inline)) void backward_k(
    const fx_bn_src *x, const fx_bn_src *g, int64_t off, float *q, int64_t S, double mu,
    double is, double k, double mdy, double mdyx, int odd, fx_bn_max *mx, const int KX,
    const int KG)
{
    if (odd) backward_run(x, g, off, q, S, mu, is, k, mdy, mdyx, odd, mx, KX, KG, 1);
    else backward_run(x, g, off, q, S, mu, is, k, mdy, mdyx, odd, mx, KX, KG, 0);
}

static void bn_backward_avx2(const fx_bn_src *x, const fx_bn_src *g, int64_t off, float *q,
                             int64_t S, double mu, double is, double k, double mdy, double mdyx,
                             int odd, fx_bn_max *mx)
{
    const fx_bn_src xe = fx_bn_exact_kind(x), ge = fx_bn_exact_kind(g);
#define FX_BN_BWD_CASE(KX, KG)                                                                 \
    if (xe.kind == (KX) && ge.kind == (KG)) {                                                  \
        backward_k(&xe, &ge, off, q, S, mu, is, k, mdy, mdyx, odd, mx, (KX), (KG));            \
        return;                                                                                \
    }
    FX_BN_AVX2_KIND_PAIRS(FX_BN_BWD_CASE)
#undef FX_BN_BWD_CASE
    fx_bn_kernels_portable.backward(x, g, off, q, S, mu, is, k, mdy, mdyx, odd, mx); /* others */
}

/* The fp16/bf16 outputs in registers (bn_kernels.h: normalize_half, backward_half) for the
 * source kinds of the vector loops (others are declined, nothing written): eight elements a
 * step as two vectors of four doubles, rounded to odd into fp32 as normalize and backward round
 * them, then the ReLU (relu: x > 0 or NaN kept, else +0, tensor_relu's rule) and the half
 * format's rounding by its definition (bf16_round_avx2.h, fp16_round_avx2.h). The row's last S
 * mod 8 elements take the scalar operations of normalize's and backward's tails, hence the
 * same bits. */

/* -1 lanes where to_f32_odd_normal's eight results are right (in_range, eight lanes) */
static inline __m256 in_range8(__m256 r)
{
    const __m256 a = _mm256_and_ps(r, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    return _mm256_and_ps(_mm256_cmp_ps(a, _mm256_set1_ps(FLT_MIN), _CMP_GT_OQ),
                         _mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX), _CMP_LE_OQ));
}

/* Eight results rounded to odd into fp32: the fast cut where all eight are normal fp32
 * numbers, else to_f32 on the same doubles (per step, as round4). */
static inline __attribute__((always_inline)) __m256 odd8(__m256d t0, __m256d t1)
{
    const __m256 r = _mm256_set_m128(to_f32_odd_normal(t1), to_f32_odd_normal(t0));
    if (_mm256_movemask_ps(in_range8(r)) == 0xFF) return r;
    return _mm256_set_m128(to_f32(t1, 1), to_f32(t0, 1));
}

/* the ReLU (RELU set) and the half format's rounding of eight fp32 values */
static inline __attribute__((always_inline)) __m128i half8(__m256 v, const int H, const int RELU)
{
    if (RELU) /* not (v <= 0): v > 0 or NaN */
        v = _mm256_and_ps(v, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NLE_UQ));
    if (H == FX_BN_OUT_BF16) return fx_bf16_round8_bits(_mm256_castps_si256(v));
    return fx_f32_to_fp16_8(v);
}

/* Eight doubles to bf16 patterns straight from their high words, where every result is a
 * normal bf16 number or rounds up to Inf from below 2^128: to nearest even at bf16's 8 bits,
 * the low word folded into a sticky bit (the round to odd into fp32 and the bf16 rounding after
 * it, normalize's route, give the correct rounding, and so the same bits: fp32 keeps 16 bits
 * more than bf16, below 2^-126 too, and a result of 2^-126 rounded up from below is 2^-126 at
 * the subnormals' coarser step as well). Returns 0 where some result would be zero,
 * subnormal, NaN, Inf itself or beyond 2^128 (the caller then takes odd8 and half8). Then the
 * ReLU (no NaN here: negative to +0) or the sign. About half the operations of odd8 and
 * half8. */
static inline __attribute__((always_inline)) int bf16_direct8(__m256d t0, __m256d t1,
                                                              const int RELU, __m128i *out)
{
    const __m256 a = _mm256_castpd_ps(t0), b = _mm256_castpd_ps(t1);
    /* per 128-bit lane: the high (low) words of two doubles of t0, then two of t1 */
    const __m256i hi = _mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m256i lo = _mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i sticky =
        _mm256_andnot_si256(_mm256_cmpeq_epi32(lo, _mm256_setzero_si256()), one);
    const __m256i mag =
        _mm256_and_si256(_mm256_or_si256(hi, sticky), _mm256_set1_epi32(0x7FFFFFFF));
    /* the 11-bit exponent and 7 fraction bits rounded at bit 13, rebiased from 1023 to 127 */
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(mag, 13), one);
    __m256i r = _mm256_add_epi32(mag, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x0FFF)));
    r = _mm256_sub_epi32(_mm256_srli_epi32(r, 13), _mm256_set1_epi32((1023 - 127) << 7));
    const __m256i bad = _mm256_or_si256(_mm256_cmpgt_epi32(r, _mm256_set1_epi32(0x7F80)),
                                        _mm256_cmpgt_epi32(_mm256_set1_epi32(0x80), r));
    if (!_mm256_testz_si256(bad, bad)) return 0;
    if (RELU)
        r = _mm256_andnot_si256(_mm256_srai_epi32(hi, 31), r);
    else
        r = _mm256_or_si256(r, _mm256_and_si256(_mm256_srli_epi32(hi, 16),
                                                _mm256_set1_epi32(0x8000)));
    const __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    *out = _mm_shuffle_epi32(p, _MM_SHUFFLE(3, 1, 2, 0)); /* t0's four, then t1's */
    return 1;
}

/* Eight results t0, t1 (doubles) into the half format H: bf16_direct8 where it applies, else
 * the round to odd and the conversion */
static inline __attribute__((always_inline)) __m128i half_of8(__m256d t0, __m256d t1, const int H,
                                                             const int RELU)
{
    __m128i h;
    if (H == FX_BN_OUT_BF16 && bf16_direct8(t0, t1, RELU, &h)) return h;
    return half8(odd8(t0, t1), H, RELU);
}

/* the scalar tail's element: q (rounded to odd), the ReLU, the half format's definition */
static inline uint16_t half1(float q, const int H, const int RELU)
{
    if (RELU && !(q > 0.0f || q != q)) q = 0.0f;
    uint32_t u;
    memcpy(&u, &q, sizeof u);
    return H == FX_BN_OUT_BF16 ? fx_bf16_from_bits(u) : fx_fp16_from_bits(u);
}

/* The constants of a half-output pass: normalize's mu, a, b (c1 = a, c2 = b), or backward's
 * mu, is, k, mdy, mdyx (c1 = is, c2 = k), in double and in vectors of four */
typedef struct half_consts {
    double mu, c1, c2, mdy, mdyx;
    __m256d vmu, vc1, vc2, vmdy, vmdyx;
} half_consts;

static inline half_consts half_consts_of(double mu, double c1, double c2, double mdy,
                                         double mdyx)
{
    return (half_consts){mu,
                         c1,
                         c2,
                         mdy,
                         mdyx,
                         _mm256_set1_pd(mu),
                         _mm256_set1_pd(c1),
                         _mm256_set1_pd(c2),
                         _mm256_set1_pd(mdy),
                         _mm256_set1_pd(mdyx)};
}

/* eight outputs at element i by the double route (BWD: backward_half's, else normalize_half's) */
static inline __attribute__((always_inline)) __m128i half8_double(
    const fx_bn_src *x, const fx_bn_src *g, int64_t i, const half_consts *d, const int BWD,
    const int KX, const int KG, const int H, const int RELU)
{
    __m256d v[2];
    for (int h = 0; h < 2; h++) {
        const __m256d xd = _mm256_sub_pd(ld4(x, i + 4 * h, KX), d->vmu);
        if (BWD) {
            const __m256d xh = _mm256_mul_pd(xd, d->vc1);
            const __m256d t = _mm256_sub_pd(_mm256_sub_pd(ld4(g, i + 4 * h, KG), d->vmdy),
                                            _mm256_mul_pd(xh, d->vmdyx));
            v[h] = _mm256_mul_pd(d->vc2, t);
        } else {
            v[h] = _mm256_add_pd(_mm256_mul_pd(xd, d->vc1), d->vc2);
        }
    }
    return half_of8(v[0], v[1], H, BWD ? 0 : RELU);
}

/* one output (a row's last S mod 8) by the scalar operations of normalize's and backward's
 * tails, hence the same bits */
static inline __attribute__((always_inline)) uint16_t half1_double(
    const fx_bn_src *x, const fx_bn_src *g, int64_t i, const half_consts *d, const int BWD,
    const int H, const int RELU)
{
    if (BWD) {
        const double xhat = (fx_bn_at_exact(x, i) - d->mu) * d->c1;
        return half1(nn_round_f32(d->c2 * (fx_bn_at_exact(g, i) - d->mdy - xhat * d->mdyx), 1),
                     H, 0);
    }
    return half1(nn_round_f32((fx_bn_at_exact(x, i) - d->mu) * d->c1 + d->c2, 1), H, RELU);
}

/* the same by the fp32 route into *h (c: its constants, fx_bn_f32_bwd8 or fx_bn_f32_norm8);
 * 1 where it accepts all eight */
static inline __attribute__((always_inline)) int half8_f32(const fx_bn_src *x,
                                                           const fx_bn_src *g, int64_t i,
                                                           const void *c, __m128i *h,
                                                           const int BWD, const int KX,
                                                           const int KG, const int H,
                                                           const int RELU)
{
    if (BWD)
        return fx_bn_f32_backward8((const fx_bn_f32_bwd8 *)c, fx_bn_ld8_f32(x, i, KX),
                                   fx_bn_ld8_f32(g, i, KG), H, h);
    return fx_bn_f32_normalize8((const fx_bn_f32_norm8 *)c, fx_bn_ld8_f32(x, i, KX), H, RELU, h);
}

/* A half-output pass over `rows` rows (bn_kernels.h). With fp32 constants c (NULL: the double
 * route alone; mantissa sources, and constants outside the bound's range, take that), sources
 * in fp32 lanes (bf16, fp16, fp32) take the fp32 route with its error bound (bn_f32_bound.h,
 * bn_f32_bound_avx2.h) over up to 64 vectors at a time, each vector it does not accept written
 * again by the double route after the pass (or at once in place), as on AVX-512
 * (batchnorm_avx512.c says why); a row's last S mod 8 values take the scalar operations. */
#define FX_BN_F32_SPAN8 512 /* values per pass of the fp32 route: 64 vectors, one bit each */

static inline __attribute__((always_inline)) void half_rows(
    const fx_bn_src *x, const fx_bn_src *g, int64_t off, uint16_t *out, int64_t S, int64_t rows,
    int64_t stride, const half_consts *d, const void *c, const int BWD, const int KX,
    const int KG, const int H, const int RELU)
{
    const int in_place = c && (fx_bn_half_overlaps(out, x, off, S, rows, stride) ||
                               (BWD && fx_bn_half_overlaps(out, g, off, S, rows, stride)));
    const int64_t S8 = S - S % 8;
    for (int64_t r = 0; r < rows; r++, off += stride, out += stride) {
        if (!c) {
            for (int64_t s = 0; s < S8; s += 8)
                _mm_storeu_si128((__m128i *)(out + s),
                                 half8_double(x, g, off + s, d, BWD, KX, KG, H, RELU));
        }
        for (int64_t s0 = 0; c && s0 < S8; s0 += FX_BN_F32_SPAN8) {
            const int64_t s1 = S8 - s0 < FX_BN_F32_SPAN8 ? S8 : s0 + FX_BN_F32_SPAN8;
            uint64_t redo = 0;
            for (int64_t s = s0; s < s1; s += 8) {
                __m128i h;
                const int again = !half8_f32(x, g, off + s, c, &h, BWD, KX, KG, H, RELU);
                if (in_place && again) h = half8_double(x, g, off + s, d, BWD, KX, KG, H, RELU);
                _mm_storeu_si128((__m128i *)(out + s), h);
                redo |= (uint64_t)(again && !in_place) << ((s - s0) / 8);
            }
            for (; redo; redo &= redo - 1) {
                const int64_t s = s0 + 8 * __builtin_ctzll(redo);
                _mm_storeu_si128((__m128i *)(out + s),
                                 half8_double(x, g, off + s, d, BWD, KX, KG, H, RELU));
            }
        }
        for (int64_t s = S8; s < S; s++) out[s] = half1_double(x, g, off + s, d, BWD, H, RELU);
    }
}

static inline __attribute__((always_inline)) void normalize_half_k(
    const fx_bn_src *x, int64_t off, uint16_t *out, int64_t S, int64_t rows, int64_t stride,
    double mu, double a, double b, const int K, const int H, const int RELU)
{
    fx_bn_f32_norm8 c;
    const int f32 = K != FX_BN_I16_EXACT && fx_bn_f32_norm8_init(&c, mu, a, b, H);
    const half_consts d = half_consts_of(mu, a, b, 0.0, 0.0);
    half_rows(x, x, off, out, S, rows, stride, &d, f32 ? &c : NULL, 0, K, K, H, RELU);
}

static inline __attribute__((always_inline)) void backward_half_k(
    const fx_bn_src *x, const fx_bn_src *g, int64_t off, uint16_t *out, int64_t S, int64_t rows,
    int64_t stride, double mu, double is, double k, double mdy, double mdyx, const int KX,
    const int KG, const int H)
{
    fx_bn_f32_bwd8 c;
    const int f32 = KX != FX_BN_I16_EXACT && KG != FX_BN_I16_EXACT &&
                    fx_bn_f32_bwd8_init(&c, mu, is, k, mdy, mdyx, H);
    const half_consts d = half_consts_of(mu, is, k, mdy, mdyx);
    half_rows(x, g, off, out, S, rows, stride, &d, f32 ? &c : NULL, 1, KX, KG, H, 0);
}

FX_BN_HALF_ENTRIES(bn_normalize_half_avx2, bn_backward_half_avx2)

/* ---- FLEX16_5/DFP16 outputs rounded in registers ---------------------------------------------
 * normalize_i16 and backward_i16 (bn_kernels.h). The definition rounds each double t to odd
 * fp32 (x), and quant_f32 then rounds x 2^-e to the nearest integer, ties to even, saturating
 * at +-32767 (fx_quant1_f32). Round to odd keeps at least two bits beyond the integer grid at
 * e (24 significant bits against at most 17 for |x 2^-e| < 2^16; in fp32's subnormals from
 * e >= FX_BN_Q16_EXP_MIN), so the integer nearest x 2^-e is the one nearest t 2^-e (Boldo and
 * Melquiond's round-to-odd property): every grid point and midpoint is an fp32 number with an
 * even last bit, so x and t lie on the same side of each. Here t 2^-e (exact: a power of two)
 * is rounded in double, clamped to +-2^16 first so that the conversion stays exact (beyond
 * 2^16 both saturate), and saturated as quant_f32 does. The statistics follow without x:
 * - x is 0 exactly where t is (round to odd never reaches 0 from a nonzero t), so the
 *   underflows (m = 0, x != 0) are the zeros of m less the zeros of t;
 * - round to odd is monotone and odd, so the largest |x| is the largest |t| rounded to odd;
 * - coefficients finite and at most 2^200 (else declined) keep every t finite in double: no
 *   NaN/Inf to count; a t beyond FLT_MAX (whose x is FLT_MAX) fails fx_bn_q16_stats, and the
 *   piece then takes the fp32 row.
 * The statistics stay per lane in the caller's record (fx_bn_q16) across the rows of a piece.
 * A row's last S mod 8 elements take the definition itself (nn_round_f32, fx_quant1_f32). */
typedef struct q16_acc {
    __m256d max_t;                /* largest |t| per lane (|t 2^-e| where folded) */
    __m256i zero_t;               /* t == 0 per 64-bit lane (compare masks subtracted) */
    __m256i zero_m, sat, max_out; /* per 32-bit lane: m == 0, saturations, largest |m| */
} q16_acc;

static inline int q16_coef_ok(double c) { return fabs(c) <= 0x1p200; /* NaN fails */ }
static inline int q16_exp_ok(int e) { return e >= FX_BN_Q16_EXP_MIN && e <= FX_BN_Q16_EXP_MAX; }

/* The folded kernels compute t 2^-e itself: the sources' 2^exp and the output's 2^-e are moved
 * into the coefficients (mu 2^-exp, a 2^(exp - e), ...), which saves two multiplies per four
 * values in normalize_i16 and three in backward_i16. Scaling by a power of two
 * commutes with every rounded subtraction, product and sum as long as no value on either side
 * leaves the normal range. With every coefficient 0 or in [2^-100, 2^200], mantissa weights
 * in [2^-149, 2^112] and e in [-140, 127], a nonzero x - mu is at least 2^-152 (both are
 * multiples of it), and following every operation through, each value and its scaled twin
 * stays within [2^-640, 2^950]: the folded kernel's t 2^-e and its zeros are those of the
 * definition's t scaled, and its largest |t 2^-e| scales back exactly. Other coefficients
 * (0 < |c| < 2^-100: a mean or a gradient sum of some 1e-31) take the unfolded kernel. */
static inline int q16_fold_ok(double c)
{
    const double a = fabs(c);
    return a == 0.0 || (a >= 0x1p-100 && a <= 0x1p200);
}

/* 2^k for k in [-1022, 1023], from its bits (ldexp is a library call, once per row of as few
 * as 64 values) */
static inline double q16_pow2(int k)
{
    const uint64_t bits = (uint64_t)(k + 1023) << 52;
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* eight t (t0: elements 0-3, t1: 4-7) rounded at scale = 2^-e into eight int16; FOLD: the t
 * are already t 2^-e (scale unused) */
static inline __attribute__((always_inline)) __m128i q16_round8(__m256d t0, __m256d t1,
                                                               __m256d scale, q16_acc *A,
                                                               const int FOLD)
{
    const __m256d sign = _mm256_set1_pd(-0.0), zero = _mm256_setzero_pd();
    const __m256d top = _mm256_set1_pd(65536.0), bottom = _mm256_set1_pd(-65536.0);
    const __m256i mmax = _mm256_set1_epi32(FX_MANT_MAX), mmin = _mm256_set1_epi32(-FX_MANT_MAX);
    A->max_t = _mm256_max_pd(A->max_t, _mm256_max_pd(_mm256_andnot_pd(sign, t0),
                                                     _mm256_andnot_pd(sign, t1)));
    const __m256d z0 = _mm256_cmp_pd(t0, zero, _CMP_EQ_OQ), z1 = _mm256_cmp_pd(t1, zero, _CMP_EQ_OQ);
    A->zero_t = _mm256_sub_epi64(A->zero_t, _mm256_castpd_si256(z0));
    A->zero_t = _mm256_sub_epi64(A->zero_t, _mm256_castpd_si256(z1));
    const __m256d s0 = FOLD ? t0 : _mm256_mul_pd(t0, scale);
    const __m256d s1 = FOLD ? t1 : _mm256_mul_pd(t1, scale);
    /* the rounding mode a literal: clang wants an integer constant expression there */
    const __m256d y0 = _mm256_round_pd(_mm256_min_pd(_mm256_max_pd(s0, bottom), top),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256d y1 = _mm256_round_pd(_mm256_min_pd(_mm256_max_pd(s1, bottom), top),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* integers in [-2^16, 2^16]: adding 1.5 2^52 is exact and leaves each in the low 32 bits
     * of its lane (two's complement), which one shuffle gathers, in order after a permute */
    const __m256d magic = _mm256_set1_pd(0x1.8p52);
    const __m256 lo = _mm256_shuffle_ps(_mm256_castpd_ps(_mm256_add_pd(y0, magic)),
                                        _mm256_castpd_ps(_mm256_add_pd(y1, magic)), 0x88);
    const __m256i rq = _mm256_permute4x64_epi64(_mm256_castps_si256(lo), 0xD8);
    /* the clamp to +-32767 creates no zero and keeps the order of |m|: the zeros and the
     * largest |m| (clamped in q16_store) are taken before it; packs saturates the top */
    const __m256i arq = _mm256_abs_epi32(rq);
    A->sat = _mm256_sub_epi32(A->sat, _mm256_cmpgt_epi32(arq, mmax));
    A->zero_m = _mm256_sub_epi32(A->zero_m, _mm256_cmpeq_epi32(rq, _mm256_setzero_si256()));
    A->max_out = _mm256_max_epi32(A->max_out, arq);
    const __m256i m = _mm256_max_epi32(rq, mmin);
    return _mm_packs_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
}

/* one element by the definition itself (a row's last S mod 8), counted in the record */
static inline void q16_one(fx_bn_q16 *r, double t, double scale, int16_t *out)
{
    const double at = fabs(t);
    r->tail_max_t = at > r->tail_max_t ? at : r->tail_max_t;
    int flags = 0;
    const int32_t m = fx_quant1_f32(nn_round_f32(t, 1), scale, -1.0, &flags);
    r->tail_sat += (flags & FX_Q_SATURATED) != 0;
    r->tail_zero_m += m == 0;
    r->tail_zero_t += t == 0.0;
    const int32_t am = m < 0 ? -m : m;
    r->tail_max_out = am > r->tail_max_out ? am : r->tail_max_out;
    if (out) *out = (int16_t)m;
}

/* the record's counts; the largest |t| starts from 0 (a run's own, in its units) */
static inline q16_acc q16_load(const fx_bn_q16 *r)
{
    return (q16_acc){_mm256_setzero_pd(), _mm256_loadu_si256((const __m256i *)r->zero_t),
                     _mm256_loadu_si256((const __m256i *)r->zero_m),
                     _mm256_loadu_si256((const __m256i *)r->sat),
                     _mm256_loadu_si256((const __m256i *)r->max_out)};
}

/* back into the record: the run's largest |t| times unit (2^e where folded, else 1: exact, see
 * q16_fold_ok) joins the record's, the largest |m| clamped to 32767 */
static inline void q16_store(const q16_acc *A, fx_bn_q16 *r, double unit)
{
    _mm256_storeu_pd(r->max_t, _mm256_max_pd(_mm256_loadu_pd(r->max_t),
                                             _mm256_mul_pd(A->max_t, _mm256_set1_pd(unit))));
    _mm256_storeu_si256((__m256i *)r->zero_t, A->zero_t);
    _mm256_storeu_si256((__m256i *)r->zero_m, A->zero_m);
    _mm256_storeu_si256((__m256i *)r->sat, A->sat);
    _mm256_storeu_si256((__m256i *)r->max_out,
                        _mm256_min_epi32(A->max_out, _mm256_set1_epi32(FX_MANT_MAX)));
}

/* normalize's whole vectors: t = ((x - mu) a) + b, or FOLD (the mantissas m unscaled, the
 * coefficients scaled by the caller) ((m - mu') a') + b' = t 2^-e */
static inline __attribute__((always_inline)) int64_t
normalize_i16_run(const fx_bn_src *xe, int64_t off, int16_t *out, int64_t S, double mu,
                  double a, double b, double scale, q16_acc *A, const int FOLD)
{
    const __m256d vmu = _mm256_set1_pd(mu), va = _mm256_set1_pd(a), vb = _mm256_set1_pd(b);
    const __m256d vs = _mm256_set1_pd(scale);
    const int16_t *xm = (const int16_t *)xe->p + off;
    int64_t s = 0;
    for (; s + 8 <= S; s += 8) {
        const __m256d x0 = FOLD ? ld4_mant(xm + s) : ld4(xe, off + s, FX_BN_I16_EXACT);
        const __m256d x1 = FOLD ? ld4_mant(xm + s + 4) : ld4(xe, off + s + 4, FX_BN_I16_EXACT);
        const __m256d t0 = _mm256_add_pd(_mm256_mul_pd(_mm256_sub_pd(x0, vmu), va), vb);
        const __m256d t1 = _mm256_add_pd(_mm256_mul_pd(_mm256_sub_pd(x1, vmu), va), vb);
        const __m128i m = q16_round8(t0, t1, vs, A, FOLD);
        if (out) _mm_storeu_si128((__m128i *)(out + s), m);
    }
    return s;
}

static int bn_normalize_i16_avx2(const fx_bn_src *x, int64_t off, int16_t *out, int64_t S,
                                 double mu, double a, double b, int e, fx_bn_q16 *acc)
{
    const fx_bn_src xe = fx_bn_exact_kind(x);
    if (xe.kind != FX_BN_I16_EXACT || !q16_exp_ok(e) || !q16_coef_ok(mu) || !q16_coef_ok(a) ||
        !q16_coef_ok(b))
        return 0;
    const double scale = q16_pow2(-e);
    const int fold = q16_fold_ok(mu) && q16_fold_ok(a) && q16_fold_ok(b);
    q16_acc A = q16_load(acc);
    int64_t s;
    if (fold) /* xe.scale and scale are powers of two: the coefficients' products are exact */
        s = normalize_i16_run(&xe, off, out, S, mu / xe.scale, a * (xe.scale * scale), b * scale,
                              1.0, &A, 1);
    else
        s = normalize_i16_run(&xe, off, out, S, mu, a, b, scale, &A, 0);
    q16_store(&A, acc, fold ? 1.0 / scale : 1.0);
    for (; s < S; s++)
        q16_one(acc, (fx_bn_at_exact(&xe, off + s) - mu) * a + b, scale, out ? out + s : NULL);
    return 1;
}

/* backward's whole vectors: t = k ((g - mdy) - xhat mdyx) with xhat = (x - mu) is, or FOLD
 * (both sources' mantissas unscaled, the coefficients scaled by the caller) t 2^-e */
static inline __attribute__((always_inline)) int64_t
backward_i16_run(const fx_bn_src *xe, const fx_bn_src *ge, int64_t off, int16_t *out, int64_t S,
                 double mu, double is, double k, double mdy, double mdyx, double scale,
                 q16_acc *A, const int FOLD)
{
    const __m256d vmu = _mm256_set1_pd(mu), vis = _mm256_set1_pd(is), vk = _mm256_set1_pd(k);
    const __m256d vmdy = _mm256_set1_pd(mdy), vmdyx = _mm256_set1_pd(mdyx);
    const __m256d vs = _mm256_set1_pd(scale);
    const int16_t *xm = (const int16_t *)xe->p + off, *gm = (const int16_t *)ge->p + off;
    int64_t s = 0;
    for (; s + 8 <= S; s += 8) {
        __m256d t[2];
        for (int h = 0; h < 2; h++) {
            const int64_t i = s + 4 * h;
            const __m256d xv = FOLD ? ld4_mant(xm + i) : ld4(xe, off + i, FX_BN_I16_EXACT);
            const __m256d gv = FOLD ? ld4_mant(gm + i) : ld4(ge, off + i, FX_BN_I16_EXACT);
            const __m256d xh = _mm256_mul_pd(_mm256_sub_pd(xv, vmu), vis);
            t[h] = _mm256_mul_pd(
                vk, _mm256_sub_pd(_mm256_sub_pd(gv, vmdy), _mm256_mul_pd(xh, vmdyx)));
        }
        const __m128i m = q16_round8(t[0], t[1], vs, A, FOLD);
        if (out) _mm_storeu_si128((__m128i *)(out + s), m);
    }
    return s;
}

static int bn_backward_i16_avx2(const fx_bn_src *x, const fx_bn_src *g, int64_t off,
                                int16_t *out, int64_t S, double mu, double is, double k,
                                double mdy, double mdyx, int e, fx_bn_q16 *acc)
{
    const fx_bn_src xe = fx_bn_exact_kind(x), ge = fx_bn_exact_kind(g);
    if (xe.kind != FX_BN_I16_EXACT || ge.kind != FX_BN_I16_EXACT || !q16_exp_ok(e) ||
        !q16_coef_ok(mu) || !q16_coef_ok(is) || !q16_coef_ok(k) || !q16_coef_ok(mdy) ||
        !q16_coef_ok(mdyx))
        return 0;
    const double scale = q16_pow2(-e);
    const int fold = q16_fold_ok(mu) && q16_fold_ok(is) && q16_fold_ok(k) && q16_fold_ok(mdy) &&
                     q16_fold_ok(mdyx);
    q16_acc A = q16_load(acc);
    int64_t s;
    if (fold) /* x - mu in units of x's weight, g - mdy and xhat mdyx in units of g's, k to 2^-e */
        s = backward_i16_run(&xe, &ge, off, out, S, mu / xe.scale, is * xe.scale,
                             k * (ge.scale * scale), mdy / ge.scale, mdyx / ge.scale, 1.0, &A, 1);
    else
        s = backward_i16_run(&xe, &ge, off, out, S, mu, is, k, mdy, mdyx, scale, &A, 0);
    q16_store(&A, acc, fold ? 1.0 / scale : 1.0);
    for (; s < S; s++) {
        const double xhat = (fx_bn_at_exact(&xe, off + s) - mu) * is;
        q16_one(acc, k * (fx_bn_at_exact(&ge, off + s) - mdy - xhat * mdyx), scale,
                out ? out + s : NULL);
    }
    return 1;
}

const fx_bn_kernels fx_bn_kernels_avx2 = {bn_stats_avx2,  bn_grad_sums_avx2,
                                          bn_normalize_avx2, bn_backward_avx2,
                                          bn_var_avx2,    bn_sum_range_i16_avx2,
                                          bn_normalize_half_avx2, bn_backward_half_avx2,
                                          bn_normalize_i16_avx2, bn_backward_i16_avx2,
                                          /* fp16 read in place: with the fp32 route to half
                                           * outputs, ResNet-20's three batch-norm shapes took
                                           * 4.67 ms forward and backward in place against 5.50
                                           * through the copy (bench_bn with FLEXPOINT_CPU=avx2,
                                           * Zen 4, one thread; backward at 16 x 32^2 1.37
                                           * against 2.10 ms); before that route the copy was
                                           * the faster */
                                          1};
