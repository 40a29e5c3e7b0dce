/* AVX-512 batch-norm kernels: the element-wise passes (normalize, backward) of bn_kernels.h in
 * eight double lanes, with the rounding to odd and the output statistics in mask registers;
 * the channel sums are the AVX2 kernels' (their four lanes are the four partial sums of the
 * portable order, so a wider vector would not change their speed, only their bits).
 *
 * The same operations on the same values as the portable loops, element by element, so the
 * same bits; this file is compiled with -ffp-contract=off (CMakeLists.txt), since a fused
 * multiply-add would round differently. Every loop is instantiated per source kind, rounding
 * (to nearest or to odd) and whether statistics are kept, so that none of them is a branch in
 * the loop: with the rounding and the statistics tested per vector the loop ran at a third of
 * the speed of its fp32 instance. */
#include "bn_kernels.h"
#include "nn_stage.h"

#include <float.h>
#include <immintrin.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* as -ffp-contract=off, for builds that do not pass the flag */
#endif

/* Elements i..i+7 of a source as fx_bn_at gives them (see ld4 in batchnorm_avx2.c: a mantissa
 * times 2^exp is one correctly rounded fp32 multiply, then widened). */
static inline __attribute__((always_inline)) __m512d ld8(const fx_bn_src *x, int64_t i,
                                                         const int K)
{
    if (K == FX_BN_I16) {
        const __m128i h = _mm_loadu_si128((const __m128i *)((const int16_t *)x->p + i));
        const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(h));
        return _mm512_cvtps_pd(_mm256_mul_ps(m, _mm256_set1_ps((float)x->scale)));
    }
    if (K == FX_BN_BF16) {
        const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)x->p + i));
        return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
    return _mm512_cvtps_pd(_mm256_loadu_ps((const float *)x->p + i));
}

/* fp32 of eight doubles, to nearest, or to odd as fx_f64_to_f32_round_odd. Rounding to odd is
 * truncation with the last bit set when inexact; the conversion's own rounding control
 * truncates (beyond FLT_MAX that is FLT_MAX, whose last bit is set, as the nearest float
 * stepped back), and NaN, unordered, is never inexact. */
static inline __attribute__((always_inline)) __m256 to_f32(__m512d d, const int ODD)
{
    if (!ODD) return _mm512_cvtpd_ps(d);
    const __m256 t = _mm512_cvt_roundpd_ps(d, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvtps_pd(t), d, _CMP_NEQ_OQ);
    const __m256i u = _mm256_castps_si256(t);
    return _mm256_castsi256_ps(_mm256_mask_or_epi32(u, inexact, u, _mm256_set1_epi32(1)));
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
    const __m512d vmu = _mm512_set1_pd(mu), va = _mm512_set1_pd(a), vb = _mm512_set1_pd(b);
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
        q[s] = nn_round_f32((fx_bn_at(x, off + s) - mu) * a + b, ODD);
        if (MX) fx_bn_max_add(mx, q[s]);
    }
}


static void bn_normalize_avx512(const fx_bn_src *x, int64_t off, float *q, int64_t S, double mu,
                                double a, double b, int odd, fx_bn_max *mx)
{
#define FX_BN_NORM_MODE(O, M) normalize_k(x, off, q, S, mu, a, b, mx, kind_, (O), (M))
    switch (x->kind) {
    case FX_BN_I16: {
        const int kind_ = FX_BN_I16;
        FX_BN_RUN_MODES(FX_BN_NORM_MODE);
        break;
    }
    case FX_BN_BF16: {
        const int kind_ = FX_BN_BF16;
        FX_BN_RUN_MODES(FX_BN_NORM_MODE);
        break;
    }
    default: {
        const int kind_ = FX_BN_F32;
        FX_BN_RUN_MODES(FX_BN_NORM_MODE);
        break;
    }
    }
#undef FX_BN_NORM_MODE
}

static inline __attribute__((always_inline)) void backward_k(
    const fx_bn_src *x, const fx_bn_src *g, int64_t off, float *q, int64_t S, double mu,
    double is, double k, double mdy, double mdyx, fx_bn_max *mx, const int KX, const int KG,
    const int ODD, const int MX)
{
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
        const double xhat = (fx_bn_at(x, off + s) - mu) * is;
        q[s] = nn_round_f32(k * (fx_bn_at(g, off + s) - mdy - xhat * mdyx), ODD);
        if (MX) fx_bn_max_add(mx, q[s]);
    }
}

static void bn_backward_avx512(const fx_bn_src *x, const fx_bn_src *g, int64_t off, float *q,
                               int64_t S, double mu, double is, double k, double mdy,
                               double mdyx, int odd, fx_bn_max *mx)
{
#define FX_BN_BWD_MODE(O, M) backward_k(x, g, off, q, S, mu, is, k, mdy, mdyx, mx, kx_, kg_, (O), (M))
#define FX_BN_BWD_CASE(KX, KG)                                                                 \
    if (x->kind == (KX) && g->kind == (KG)) {                                                  \
        const int kx_ = (KX), kg_ = (KG);                                                      \
        FX_BN_RUN_MODES(FX_BN_BWD_MODE);                                                       \
        return;                                                                                \
    }
    FX_BN_KIND_PAIRS(FX_BN_BWD_CASE)
#undef FX_BN_BWD_CASE
#undef FX_BN_BWD_MODE
    fx_bn_kernels_portable.backward(x, g, off, q, S, mu, is, k, mdy, mdyx, odd, mx); /* no other kinds */
}

const fx_bn_kernels fx_bn_kernels_avx512 = {fx_bn_stats_avx2, fx_bn_grad_sums_avx2,
                                            bn_normalize_avx512, bn_backward_avx512};
