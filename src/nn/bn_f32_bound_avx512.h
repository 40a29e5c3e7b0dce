/* Batch norm's fp16/bf16 outputs from fp32 arithmetic with an error bound, sixteen lanes
 * (AVX-512 F/BW/VL/DQ with FMA and F16C): the steps of bn_f32_bound.h's route, which says why
 * a lane they accept holds the definition's bits. */
#ifndef FX_BN_F32_BOUND_AVX512_H
#define FX_BN_F32_BOUND_AVX512_H

#include "bn_f32_bound.h"

#include <immintrin.h>
#include <math.h>

/* normalize's constants (bn_f32_bound.h) for half format H in sixteen lanes */
typedef struct fx_bn_f32_norm {
    __m512 mu, a, b, c0, cd, ct;
} fx_bn_f32_norm;

static inline int fx_bn_f32_norm_init(fx_bn_f32_norm *c, double mu, double a, double b,
                                      const int H)
{
    fx_bn_f32_norm_c s;
    if (!fx_bn_f32_norm_coefs(&s, mu, a, b, H)) return 0;
    *c = (fx_bn_f32_norm){_mm512_set1_ps(s.mu), _mm512_set1_ps(s.a),  _mm512_set1_ps(s.b),
                          _mm512_set1_ps(s.c0), _mm512_set1_ps(s.cd), _mm512_set1_ps(s.ct)};
    return 1;
}

/* backward's constants likewise */
typedef struct fx_bn_f32_bwd {
    __m512 mu, is, k, mdy, mdyx, c0, cw, ch;
} fx_bn_f32_bwd;

static inline int fx_bn_f32_bwd_init(fx_bn_f32_bwd *c, double mu, double is, double k,
                                     double mdy, double mdyx, const int H)
{
    fx_bn_f32_bwd_c s;
    if (!fx_bn_f32_bwd_coefs(&s, mu, is, k, mdy, mdyx, H)) return 0;
    *c = (fx_bn_f32_bwd){_mm512_set1_ps(s.mu),   _mm512_set1_ps(s.is), _mm512_set1_ps(s.k),
                         _mm512_set1_ps(s.mdy),  _mm512_set1_ps(s.mdyx), _mm512_set1_ps(s.c0),
                         _mm512_set1_ps(s.cw),   _mm512_set1_ps(s.ch)};
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
