/* AVX2 2x2 / stride-2 max pooling of one fp32 plane (also the fp16/bf16 route, which pools
 * widened rows): the values and argmax indices of the portable plane loop (pool.c,
 * FX_MAXPOOL_2X2_PLANE), 8 windows per step. The four candidates of every window are compared in
 * the portable loop's order (top left, top right, bottom left, bottom right) with its
 * comparison, so the first largest one wins, and the first NaN, as there.
 *
 * Why: the portable fp32 loop does not vectorise (the two candidates of a row are interleaved);
 * this kernel took the CNN's pooling forward passes from 3.3-3.9 to 2.0-3.0 ms (fp32) and from
 * 3.2-3.4 to 1.9-2.4 ms (bf16) on a Zen 3. An int16 version of it measured no faster than the
 * portable int16 loop on those shapes (7 and 14 windows per row, mostly row tails), so the
 * integer formats keep that loop on AVX2.
 *
 * A row's last windows (OW not a multiple of 8) go through small zeroed buffers instead of
 * masked moves, which AMD microcodes. */
#include "../core/backend.h"
#include "pool_kernels.h"

#include <immintrin.h>
#include <string.h>

enum { FX_POOL_STEP = 8 }; /* windows per step */

/* idx[k] = r0 + 2k + off[k] for the step's n windows (n = 8 stores the whole vector). */
static inline void fx_pool_idx_avx2(int32_t *idx, int32_t r0, __m256i off, int n)
{
    const __m256i lane2 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i v = _mm256_add_epi32(_mm256_add_epi32(_mm256_set1_epi32(r0), lane2), off);
    if (n == FX_POOL_STEP) {
        _mm256_storeu_si256((__m256i *)idx, v);
        return;
    }
    int32_t tmp[FX_POOL_STEP];
    _mm256_storeu_si256((__m256i *)tmp, v);
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
}

/* Even and odd elements of 16 consecutive floats (a: the first 8, b: the next 8), in order. */
static inline void fx_pool_deinterleave(__m256 a, __m256 b, __m256 *even, __m256 *odd)
{
    /* shuffle_ps works per 128-bit half: (a0 a2 b0 b2 | a4 a6 b4 b6); the 64-bit permute
     * restores the order a0 a2 a4 a6 b0 b2 b4 b6 */
    *even = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    *odd = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

void fx_maxpool2x2_f32_avx2(const float *x, int64_t x_base, int64_t W, int64_t OH, int64_t OW,
                            float *out, int32_t *idx)
{
    const __m256i offs[3] = {_mm256_set1_epi32(1), _mm256_set1_epi32((int32_t)W),
                             _mm256_set1_epi32((int32_t)W + 1)};
    for (int64_t oh = 0; oh < OH; oh++) {
        const float *x0 = x + 2 * oh * W, *x1 = x0 + W;
        float *o = out + oh * OW;
        for (int64_t ow = 0; ow < OW; ow += FX_POOL_STEP) {
            const int n = OW - ow < FX_POOL_STEP ? (int)(OW - ow) : FX_POOL_STEP;
            __m256 a0, a1, b0, b1;
            if (n == FX_POOL_STEP) {
                a0 = _mm256_loadu_ps(x0 + 2 * ow);
                a1 = _mm256_loadu_ps(x0 + 2 * ow + 8);
                b0 = _mm256_loadu_ps(x1 + 2 * ow);
                b1 = _mm256_loadu_ps(x1 + 2 * ow + 8);
            } else {
                float t0[2 * FX_POOL_STEP] = {0}, t1[2 * FX_POOL_STEP] = {0};
                memcpy(t0, x0 + 2 * ow, (size_t)(2 * n) * sizeof *t0);
                memcpy(t1, x1 + 2 * ow, (size_t)(2 * n) * sizeof *t1);
                a0 = _mm256_loadu_ps(t0);
                a1 = _mm256_loadu_ps(t0 + 8);
                b0 = _mm256_loadu_ps(t1);
                b1 = _mm256_loadu_ps(t1 + 8);
            }
            __m256 best, c[3];
            fx_pool_deinterleave(a0, a1, &best, &c[0]);
            fx_pool_deinterleave(b0, b1, &c[1], &c[2]);
            __m256i off = _mm256_setzero_si256();
            for (int k = 0; k < 3; k++) {
                /* greater, or a NaN where the best so far is not one */
                const __m256 m = _mm256_or_ps(
                    _mm256_cmp_ps(c[k], best, _CMP_GT_OQ),
                    _mm256_and_ps(_mm256_cmp_ps(c[k], c[k], _CMP_UNORD_Q),
                                  _mm256_cmp_ps(best, best, _CMP_ORD_Q)));
                best = _mm256_blendv_ps(best, c[k], m);
                off = _mm256_blendv_epi8(off, offs[k], _mm256_castps_si256(m));
            }
            if (n == FX_POOL_STEP) {
                _mm256_storeu_ps(o + ow, best);
            } else {
                float tmp[FX_POOL_STEP];
                _mm256_storeu_ps(tmp, best);
                memcpy(o + ow, tmp, (size_t)n * sizeof *tmp);
            }
            if (idx)
                fx_pool_idx_avx2(idx + oh * OW + ow, (int32_t)(x_base + 2 * oh * W + 2 * ow), off,
                                 n);
        }
    }
}
