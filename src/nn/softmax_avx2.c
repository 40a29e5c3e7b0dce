/* AVX2 softmax rows (fx_cvt_table.exp_f32, softmax_row_f32, softmax_backward_row_f32): the
 * operations of softmax_def.h lane by lane. The definition's 16 partial sums are two ymm
 * accumulators (elements k mod 16 < 8 and >= 8), so the bits are the portable code's. A row's
 * last partial block of 16 goes through a stack copy filled with a value that changes nothing
 * (-Inf for the maximum), and its dead lanes are cleared (+0) before they reach a sum: the
 * partial sums never hold -0 (they start at +0, and x + y is -0 only for two -0), so adding
 * +0 leaves them as they are. */
#include "../core/backend.h"
#include "softmax_def.h"
#include "softmax_kernels.h"

#include <immintrin.h>

/* Lanes at or below FX_EXPF_X_MIN compute exp(0) and are set to +0, their value: their
 * scaling would underflow, which costs a microcode assist per vector on Intel cores (the
 * AVX-512 twin, softmax_avx512.c, says more). */
static inline __m256 fx_exp8(__m256 x)
{
    const __m256 dead = _mm256_cmp_ps(x, _mm256_set1_ps(FX_EXPF_X_MIN), _CMP_LE_OQ);
    const __m256 xc = _mm256_andnot_ps(
        dead, _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(FX_EXPF_X_MIN)),
                            _mm256_set1_ps(FX_EXPF_X_MAX)));
    const __m256 shifter = _mm256_set1_ps(FX_EXPF_SHIFTER);
    const __m256 n =
        _mm256_sub_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(FX_EXPF_LOG2E), shifter), shifter);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(FX_EXPF_LN2_HI), xc); /* fmaf(-n, hi, x) */
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(FX_EXPF_LN2_LO), r);
    const __m256 z = _mm256_mul_ps(r, r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(FX_EXPF_P0), r, _mm256_set1_ps(FX_EXPF_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FX_EXPF_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FX_EXPF_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FX_EXPF_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FX_EXPF_P5));
    const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, z, r), _mm256_set1_ps(1.0f));
    const __m256i k = _mm256_cvtps_epi32(n); /* n is an integer: exact in any rounding mode */
    const __m256i k1 = _mm256_srai_epi32(k, 1), k2 = _mm256_sub_epi32(k, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    const __m256 res = _mm256_andnot_ps(dead, _mm256_mul_ps(_mm256_mul_ps(e, s1), s2));
    return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* fx_nan_canonical */
static inline __m256 fx_canon8(__m256 v)
{
    return _mm256_blendv_ps(v, _mm256_set1_ps(NAN), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* A block of 16 values from src (left of them live, 1..16) as two vectors, dead lanes = fill */
typedef struct fx_blk16 {
    __m256 lo, hi;
} fx_blk16;

static inline fx_blk16 fx_load16(const float *src, int64_t left, float fill)
{
    fx_blk16 b;
    if (left >= 16) {
        b.lo = _mm256_loadu_ps(src);
        b.hi = _mm256_loadu_ps(src + 8);
    } else {
        float t[16];
        for (int i = 0; i < 16; i++) t[i] = i < left ? src[i] : fill;
        b.lo = _mm256_loadu_ps(t);
        b.hi = _mm256_loadu_ps(t + 8);
    }
    return b;
}

static inline void fx_store16(float *dst, int64_t left, __m256 lo, __m256 hi)
{
    if (left >= 16) {
        _mm256_storeu_ps(dst, lo);
        _mm256_storeu_ps(dst + 8, hi);
    } else {
        float t[16];
        _mm256_storeu_ps(t, lo);
        _mm256_storeu_ps(t + 8, hi);
        memcpy(dst, t, (size_t)left * sizeof *t);
    }
}

/* all-ones in the live lanes of the half starting at lane `first` of a block with `left` live */
static inline __m256 fx_live8(int64_t left, int first)
{
    const __m256i idx = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                         _mm256_set1_epi32(first));
    const int32_t l = left >= 16 ? 16 : (int32_t)left;
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(l), idx));
}

/* fx_sum16_tree of lanes 0-7 (lo) and 8-15 (hi) */
static inline float fx_tree16(__m256 lo, __m256 hi)
{
    const __m256 s8 = _mm256_add_ps(lo, hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

static inline float fx_hmax8(__m256 v)
{
    float t[8], m = -INFINITY;
    _mm256_storeu_ps(t, v);
    for (int i = 0; i < 8; i++) m = t[i] > m ? t[i] : m;
    return m;
}

void fx_exp_f32_avx2(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const fx_blk16 b = fx_load16(x + i, n - i, 0.0f);
        fx_store16(y + i, n - i, fx_exp8(b.lo), fx_exp8(b.hi));
    }
}

void fx_softmax_row_f32_avx2(const float *x, float *y, int64_t len, int logsm, float *rmax,
                             int64_t *rbad)
{
    __m256 mx = _mm256_set1_ps(-INFINITY), nan_seen = _mm256_setzero_ps();
    for (int64_t k = 0; k < len; k += 16) {
        const fx_blk16 b = fx_load16(x + k, len - k, -INFINITY);
        nan_seen = _mm256_or_ps(nan_seen, _mm256_cmp_ps(b.lo, b.lo, _CMP_UNORD_Q));
        nan_seen = _mm256_or_ps(nan_seen, _mm256_cmp_ps(b.hi, b.hi, _CMP_UNORD_Q));
        mx = _mm256_max_ps(b.lo, mx); /* a NaN operand gives mx: NaN never wins */
        mx = _mm256_max_ps(b.hi, mx);
    }
    float m = fx_hmax8(mx);
    m = _mm256_movemask_ps(nan_seen) || m == INFINITY || m == -INFINITY ? NAN : m + 0.0f;
    const __m256 vm = _mm256_set1_ps(m);
    __m256 acc_lo = _mm256_setzero_ps(), acc_hi = _mm256_setzero_ps();
    for (int64_t k = 0; k < len; k += 16) {
        const fx_blk16 b = fx_load16(x + k, len - k, 0.0f);
        __m256 e_lo = fx_exp8(_mm256_sub_ps(b.lo, vm)), e_hi = fx_exp8(_mm256_sub_ps(b.hi, vm));
        if (len - k < 16) {
            e_lo = _mm256_and_ps(e_lo, fx_live8(len - k, 0));
            e_hi = _mm256_and_ps(e_hi, fx_live8(len - k, 8));
        }
        acc_lo = _mm256_add_ps(acc_lo, e_lo);
        acc_hi = _mm256_add_ps(acc_hi, e_hi);
        if (!logsm) fx_store16(y + k, len - k, e_lo, e_hi);
    }
    const float sum = fx_tree16(acc_lo, acc_hi);
    if (!logsm) { /* statistics without a pass: see fx_softmax_row_def */
        const float r = 1.0f / sum;
        const __m256 vr = _mm256_set1_ps(r), nan = _mm256_set1_ps(NAN);
        for (int64_t k = 0; k < len; k += 16) {
            const fx_blk16 b = fx_load16(y + k, len - k, 0.0f);
            fx_store16(y + k, len - k, m != m ? nan : _mm256_mul_ps(b.lo, vr),
                       m != m ? nan : _mm256_mul_ps(b.hi, vr));
        }
        if (m != m) *rbad += len;
        else if (r > *rmax) *rmax = r;
        return;
    }
    const __m256 vlse = _mm256_set1_ps(logf(sum));
    const __m256 inf = _mm256_set1_ps(INFINITY);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 vmax = _mm256_setzero_ps();
    int64_t bad = 0;
    for (int64_t k = 0; k < len; k += 16) {
        const fx_blk16 b = fx_load16(x + k, len - k, 0.0f);
        __m256 v[2] = {b.lo, b.hi};
        for (int h = 0; h < 2; h++) {
            v[h] = fx_canon8(_mm256_sub_ps(_mm256_sub_ps(v[h], vm), vlse));
            const __m256 a = _mm256_and_ps(v[h], absmask);
            const __m256 fin = _mm256_and_ps(_mm256_cmp_ps(a, inf, _CMP_LT_OQ), fx_live8(len - k, 8 * h));
            const __m256 dead = _mm256_andnot_ps(fin, fx_live8(len - k, 8 * h));
            vmax = _mm256_max_ps(vmax, _mm256_and_ps(a, fin));
            bad += __builtin_popcount((unsigned)_mm256_movemask_ps(dead));
        }
        fx_store16(y + k, len - k, v[0], v[1]);
    }
    const float rm = fx_hmax8(vmax);
    *rmax = rm > *rmax ? rm : *rmax;
    *rbad += bad;
}

void fx_softmax_backward_row_f32_avx2(const float *g, const float *y, float *dx, int64_t len,
                                      int logsm)
{
    __m256 acc_lo = _mm256_setzero_ps(), acc_hi = _mm256_setzero_ps();
    for (int64_t k = 0; k < len; k += 16) {
        const fx_blk16 gb = fx_load16(g + k, len - k, 0.0f); /* dead lanes: +0, adding nothing */
        if (logsm) {
            acc_lo = _mm256_add_ps(acc_lo, gb.lo);
            acc_hi = _mm256_add_ps(acc_hi, gb.hi);
        } else {
            const fx_blk16 yb = fx_load16(y + k, len - k, 0.0f); /* +0 * +0 = +0 */
            acc_lo = _mm256_add_ps(acc_lo, _mm256_mul_ps(gb.lo, yb.lo));
            acc_hi = _mm256_add_ps(acc_hi, _mm256_mul_ps(gb.hi, yb.hi));
        }
    }
    const __m256 a = _mm256_set1_ps(fx_tree16(acc_lo, acc_hi));
    for (int64_t k = 0; k < len; k += 16) {
        const fx_blk16 gb = fx_load16(g + k, len - k, 0.0f), yb = fx_load16(y + k, len - k, 0.0f);
        __m256 v[2];
        const __m256 gs[2] = {gb.lo, gb.hi}, ps[2] = {yb.lo, yb.hi};
        for (int h = 0; h < 2; h++)
            v[h] = fx_canon8(logsm ? _mm256_sub_ps(gs[h], _mm256_mul_ps(fx_exp8(ps[h]), a))
                                   : _mm256_mul_ps(ps[h], _mm256_sub_ps(gs[h], a)));
        fx_store16(dx + k, len - k, v[0], v[1]);
    }
}
