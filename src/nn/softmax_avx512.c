/* AVX-512 softmax rows (fx_cvt_table.exp_f32, softmax_row_f32, softmax_backward_row_f32): the
 * operations of softmax_def.h lane by lane, 16 lanes being the definition's 16 partial sums,
 * so the bits are the portable code's. Tails are masked: a dead lane adds nothing to a sum
 * (masked adds) and takes no part in a maximum or a statistic. */
#include "../core/backend.h"
#include "softmax_def.h"
#include "softmax_kernels.h"

#include <immintrin.h>

/* Lanes at or below FX_EXPF_X_MIN (a causal row's masked scores are -Inf: half of the
 * attention's) give exactly +0, e 2^-159 rounded, but that scaling underflows, and on the Xeon
 * reporting model 167 each vector multiply with an underflowing lane took a microcode assist:
 * half the time of the attention's softmax. They compute exp(0) instead and are set to +0,
 * the value they had. */
static inline __m512 fx_exp16(__m512 x)
{
    const __mmask16 dead = _mm512_cmp_ps_mask(x, _mm512_set1_ps(FX_EXPF_X_MIN), _CMP_LE_OQ);
    const __m512 xc = _mm512_maskz_mov_ps(
        (__mmask16)~dead, _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(FX_EXPF_X_MIN)),
                                        _mm512_set1_ps(FX_EXPF_X_MAX)));
    const __m512 shifter = _mm512_set1_ps(FX_EXPF_SHIFTER);
    const __m512 n =
        _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(FX_EXPF_LOG2E), shifter), shifter);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(FX_EXPF_LN2_HI), xc); /* fmaf(-n, hi, x) */
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(FX_EXPF_LN2_LO), r);
    const __m512 z = _mm512_mul_ps(r, r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(FX_EXPF_P0), r, _mm512_set1_ps(FX_EXPF_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FX_EXPF_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FX_EXPF_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FX_EXPF_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FX_EXPF_P5));
    const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(p, z, r), _mm512_set1_ps(1.0f));
    const __m512i k = _mm512_cvtps_epi32(n); /* n is an integer: exact in any rounding mode */
    const __m512i k1 = _mm512_srai_epi32(k, 1), k2 = _mm512_sub_epi32(k, k1);
    const __m512i bias = _mm512_set1_epi32(127);
    const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k1, bias), 23));
    const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k2, bias), 23));
    const __m512 res = _mm512_maskz_mov_ps((__mmask16)~dead, _mm512_mul_ps(_mm512_mul_ps(e, s1), s2));
    return _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

/* fx_nan_canonical */
static inline __m512 fx_canon16(__m512 v)
{
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_ps(NAN));
}

static inline __mmask16 fx_live16(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* fx_sum16_tree of the 16 lanes */
static inline float fx_tree16(__m512 acc)
{
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc),
                                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

void fx_exp_f32_avx512(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 live = fx_live16(n - i);
        _mm512_mask_storeu_ps(y + i, live, fx_exp16(_mm512_maskz_loadu_ps(live, x + i)));
    }
}

void fx_softmax_row_f32_avx512(const float *x, float *y, int64_t len, int logsm, float *rmax,
                               int64_t *rbad)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = ninf;
    __mmask16 nan_seen = 0;
    for (int64_t k = 0; k < len; k += 16) {
        const __m512 v = _mm512_mask_loadu_ps(ninf, fx_live16(len - k), x + k);
        nan_seen |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        mx = _mm512_max_ps(v, mx); /* a NaN v gives mx: NaN never wins */
    }
    float m = _mm512_reduce_max_ps(mx);
    m = nan_seen || m == INFINITY || m == -INFINITY ? NAN : m + 0.0f;
    const __m512 vm = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < len; k += 16) {
        const __mmask16 live = fx_live16(len - k);
        const __m512 e = fx_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, x + k), vm));
        acc = _mm512_mask_add_ps(acc, live, acc, e);
        if (!logsm) _mm512_mask_storeu_ps(y + k, live, e);
    }
    const float sum = fx_tree16(acc);
    if (!logsm) { /* statistics without a pass: see fx_softmax_row_def */
        const float r = 1.0f / sum;
        const __m512 vr = _mm512_set1_ps(r), nan = _mm512_set1_ps(NAN);
        for (int64_t k = 0; k < len; k += 16) {
            const __mmask16 live = fx_live16(len - k);
            const __m512 val = m != m ? nan : _mm512_mul_ps(_mm512_maskz_loadu_ps(live, y + k), vr);
            _mm512_mask_storeu_ps(y + k, live, val);
        }
        if (m != m) *rbad += len;
        else if (r > *rmax) *rmax = r;
        return;
    }
    const __m512 vlse = _mm512_set1_ps(logf(sum)), inf = _mm512_set1_ps(INFINITY);
    __m512 vmax = _mm512_setzero_ps();
    int64_t bad = 0;
    for (int64_t k = 0; k < len; k += 16) {
        const __mmask16 live = fx_live16(len - k);
        const __m512 val = fx_canon16(
            _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, x + k), vm), vlse));
        _mm512_mask_storeu_ps(y + k, live, val);
        const __m512 a = _mm512_abs_ps(val);
        const __mmask16 fin = _mm512_cmp_ps_mask(a, inf, _CMP_LT_OQ) & live;
        vmax = _mm512_mask_max_ps(vmax, fin, vmax, a);
        bad += __builtin_popcount((unsigned)(live & ~fin));
    }
    const float rm = _mm512_reduce_max_ps(vmax);
    *rmax = rm > *rmax ? rm : *rmax;
    *rbad += bad;
}

void fx_softmax_backward_row_f32_avx512(const float *g, const float *y, float *dx, int64_t len,
                                        int logsm)
{
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < len; k += 16) {
        const __mmask16 live = fx_live16(len - k);
        const __m512 gk = _mm512_maskz_loadu_ps(live, g + k);
        const __m512 t = logsm ? gk : _mm512_mul_ps(gk, _mm512_maskz_loadu_ps(live, y + k));
        acc = _mm512_mask_add_ps(acc, live, acc, t);
    }
    const __m512 a = _mm512_set1_ps(fx_tree16(acc));
    for (int64_t k = 0; k < len; k += 16) {
        const __mmask16 live = fx_live16(len - k);
        const __m512 gk = _mm512_maskz_loadu_ps(live, g + k), p = _mm512_maskz_loadu_ps(live, y + k);
        const __m512 val = logsm ? _mm512_sub_ps(gk, _mm512_mul_ps(fx_exp16(p), a))
                                 : _mm512_mul_ps(p, _mm512_sub_ps(gk, a));
        _mm512_mask_storeu_ps(dx + k, live, fx_canon16(val));
    }
}
