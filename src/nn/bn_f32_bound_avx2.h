/* Batch norm's fp16/bf16 outputs from fp32 arithmetic with an error bound, eight lanes (AVX2
 * with FMA and F16C): the steps of bn_f32_bound.h's route, which says why a lane they accept
 * holds the definition's bits; the same operations as the AVX-512 steps
 * (bn_f32_bound_avx512.h), with vector compares for mask registers. */
#ifndef FX_BN_F32_BOUND_AVX2_H
#define FX_BN_F32_BOUND_AVX2_H

#include "bn_f32_bound.h"

#include <immintrin.h>
#include <math.h>

/* normalize's constants (bn_f32_bound.h) for half format H in eight lanes */
typedef struct fx_bn_f32_norm8 {
    __m256 mu, a, b, c0, cd, ct;
} fx_bn_f32_norm8;

static inline int fx_bn_f32_norm8_init(fx_bn_f32_norm8 *c, double mu, double a, double b,
                                       const int H)
{
    fx_bn_f32_norm_c s;
    if (!fx_bn_f32_norm_coefs(&s, mu, a, b, H)) return 0;
    *c = (fx_bn_f32_norm8){_mm256_set1_ps(s.mu), _mm256_set1_ps(s.a),  _mm256_set1_ps(s.b),
                           _mm256_set1_ps(s.c0), _mm256_set1_ps(s.cd), _mm256_set1_ps(s.ct)};
    return 1;
}

/* backward's constants likewise */
typedef struct fx_bn_f32_bwd8 {
    __m256 mu, is, k, mdy, mdyx, c0, cw, ch;
} fx_bn_f32_bwd8;

static inline int fx_bn_f32_bwd8_init(fx_bn_f32_bwd8 *c, double mu, double is, double k,
                                      double mdy, double mdyx, const int H)
{
    fx_bn_f32_bwd_c s;
    if (!fx_bn_f32_bwd_coefs(&s, mu, is, k, mdy, mdyx, H)) return 0;
    *c = (fx_bn_f32_bwd8){_mm256_set1_ps(s.mu),  _mm256_set1_ps(s.is),   _mm256_set1_ps(s.k),
                          _mm256_set1_ps(s.mdy), _mm256_set1_ps(s.mdyx), _mm256_set1_ps(s.c0),
                          _mm256_set1_ps(s.cw),  _mm256_set1_ps(s.ch)};
    return 1;
}

/* eight elements of a bf16, fp16 or fp32 source as fp32 (exact) */
static inline __attribute__((always_inline)) __m256 fx_bn_ld8_f32(const fx_bn_src *x, int64_t i,
                                                                   const int K)
{
    if (K == FX_BN_F32) return _mm256_loadu_ps((const float *)x->p + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)x->p + i));
    if (K == FX_BN_FP16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); /* bf16 */
}

static inline __m256 fx_bn_abs8(__m256 v)
{
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
}

/* t rounded to the half format H (ReLU first where RELU) into *out; 1 where all eight lanes
 * are accepted (bn_f32_bound.h) for the doubled bound e2 */
static inline __attribute__((always_inline)) int fx_bn_f32_half8(__m256 t, __m256 e2, const int H,
                                                                 const int RELU, __m128i *out)
{
    if (H == FX_BN_OUT_BF16) {
        const __m256i bits = _mm256_castps_si256(t);
        const __m256i mid =
            _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32((int)0xFFFF0000u)),
                            _mm256_set1_epi32(0x8000));
        const __m256 dist = fx_bn_abs8(_mm256_sub_ps(t, _mm256_castsi256_ps(mid)));
        const int ok = _mm256_movemask_ps(_mm256_cmp_ps(e2, dist, _CMP_LT_OQ)) == 0xFF;
        const __m256 v = RELU ? _mm256_max_ps(t, _mm256_setzero_ps()) : t;
        const __m256i r = _mm256_srli_epi32(
            _mm256_add_epi32(_mm256_castps_si256(v), _mm256_set1_epi32(0x8000)), 16);
        *out = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        return ok;
    }
    __m256 lo = _mm256_sub_ps(t, e2), hi = _mm256_add_ps(t, e2);
    if (RELU) {
        lo = _mm256_max_ps(lo, _mm256_setzero_ps());
        hi = _mm256_max_ps(hi, _mm256_setzero_ps());
    }
    const __m128i hl = _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i hh = _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    *out = hl;
    return _mm_movemask_epi8(_mm_cmpeq_epi16(hl, hh)) == 0xFFFF &&
           _mm256_movemask_ps(_mm256_cmp_ps(e2, _mm256_set1_ps(INFINITY), _CMP_LT_OQ)) == 0xFF;
}

/* normalize_half's eight outputs from x (fp32); 1 where all are accepted */
static inline __attribute__((always_inline)) int
fx_bn_f32_normalize8(const fx_bn_f32_norm8 *c, __m256 x, const int H, const int RELU, __m128i *out)
{
    const __m256 d = _mm256_sub_ps(x, c->mu);
    const __m256 t = _mm256_fmadd_ps(d, c->a, c->b);
    const __m256 e2 =
        _mm256_fmadd_ps(fx_bn_abs8(d), c->cd, _mm256_fmadd_ps(fx_bn_abs8(t), c->ct, c->c0));
    return fx_bn_f32_half8(t, e2, H, RELU, out);
}

/* backward_half's eight outputs from x and g (fp32); 1 where all are accepted */
static inline __attribute__((always_inline)) int
fx_bn_f32_backward8(const fx_bn_f32_bwd8 *c, __m256 x, __m256 g, const int H, __m128i *out)
{
    const __m256 h = _mm256_mul_ps(_mm256_sub_ps(x, c->mu), c->is);
    const __m256 w = _mm256_fnmadd_ps(h, c->mdyx, _mm256_sub_ps(g, c->mdy));
    const __m256 t = _mm256_mul_ps(w, c->k);
    const __m256 e2 =
        _mm256_fmadd_ps(fx_bn_abs8(w), c->cw, _mm256_fmadd_ps(fx_bn_abs8(h), c->ch, c->c0));
    return fx_bn_f32_half8(t, e2, H, 0, out);
}

#endif
