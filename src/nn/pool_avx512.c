/* AVX-512 2x2 / stride-2 max pooling of one int16 or fp32 plane: the values and argmax indices of the
 * portable plane loop (pool.c, maxpool_2x2_plane_i16), 16 windows per step. In int32 lanes, lane
 * k holds the pair (x[2k], x[2k+1]) of each of the two input rows; the four candidates are
 * compared in the portable loop's order with strict '>', so the first largest one wins, as
 * there. */
#include "../core/backend.h"
#include "conv_panels.h"
#include "pool_kernels.h"

#include <immintrin.h>

/* lane k of a row step: window ow + k, whose first candidate is at flat index r0 + 2k; off
 * holds the chosen candidate's offset from it (0, 1, W or W + 1) */
static const int32_t fx_pool_lane2[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};

static inline void fx_pool_store_idx(int32_t *idx, int32_t r0, __m512i off, __mmask16 live)
{
    const __m512i lane2 = _mm512_loadu_si512((const void *)fx_pool_lane2);
    _mm512_mask_storeu_epi32(idx, live,
                             _mm512_add_epi32(_mm512_add_epi32(_mm512_set1_epi32(r0), lane2), off));
}

void fx_maxpool2x2_i16_avx512(const int16_t *x, int64_t x_base, int64_t W, int64_t OH,
                              int64_t OW, int16_t *out, int32_t *idx)
{
    const __m512i offs[3] = {_mm512_set1_epi32(1), _mm512_set1_epi32((int32_t)W),
                             _mm512_set1_epi32((int32_t)W + 1)};
    for (int64_t oh = 0; oh < OH; oh++) {
        const int16_t *x0 = x + 2 * oh * W, *x1 = x0 + W;
        for (int64_t ow = 0; ow < OW; ow += 16) {
            const int64_t left = OW - ow < 16 ? OW - ow : 16;
            const __mmask16 live = (__mmask16)((1u << left) - 1);
            const __mmask32 live2 = (__mmask32)(((uint64_t)1 << (2 * left)) - 1);
            const __m512i p0 = _mm512_maskz_loadu_epi16(live2, x0 + 2 * ow);
            const __m512i p1 = _mm512_maskz_loadu_epi16(live2, x1 + 2 * ow);
            const __m512i v0 = _mm512_srai_epi32(_mm512_slli_epi32(p0, 16), 16);
            const __m512i v1 = _mm512_srai_epi32(p0, 16);
            const __m512i v2 = _mm512_srai_epi32(_mm512_slli_epi32(p1, 16), 16);
            const __m512i v3 = _mm512_srai_epi32(p1, 16);
            const __m512i cand[3] = {v1, v2, v3};
            __m512i best = v0, off = _mm512_setzero_si512();
            for (int k = 0; k < 3; k++) {
                const __mmask16 m = _mm512_cmpgt_epi32_mask(cand[k], best);
                best = _mm512_mask_mov_epi32(best, m, cand[k]);
                off = _mm512_mask_mov_epi32(off, m, offs[k]);
            }
            _mm512_mask_cvtepi32_storeu_epi16(out + oh * OW + ow, live, best);
            if (idx)
                fx_pool_store_idx(idx + oh * OW + ow, (int32_t)(x_base + 2 * oh * W + 2 * ow), off,
                                  live);
        }
    }
}

/* The same for fp32 planes, with the portable loop's comparison: a candidate wins when it is
 * greater, or when it is NaN and the best so far is not (so the first NaN wins). The even and
 * odd columns of 32 consecutive values are separated with two-source permutes. */
void fx_maxpool2x2_f32_avx512(const float *x, int64_t x_base, int64_t W, int64_t OH,
                              int64_t OW, float *out, int32_t *idx)
{
    const __m512i even = _mm512_loadu_si512((const void *)fx_pool_lane2);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const __m512i offs[3] = {_mm512_set1_epi32(1), _mm512_set1_epi32((int32_t)W),
                             _mm512_set1_epi32((int32_t)W + 1)};
    for (int64_t oh = 0; oh < OH; oh++) {
        const float *x0 = x + 2 * oh * W, *x1 = x0 + W;
        for (int64_t ow = 0; ow < OW; ow += 16) {
            const int64_t left = OW - ow < 16 ? OW - ow : 16;
            const __mmask16 live = (__mmask16)((1u << left) - 1);
            /* 2 * left values per row: the first 16 and the rest */
            const int64_t lo_n = 2 * left < 16 ? 2 * left : 16, hi_n = 2 * left - lo_n;
            const __mmask16 mlo = (__mmask16)((1u << lo_n) - 1);
            const __mmask16 mhi = (__mmask16)((1u << hi_n) - 1);
            const __m512 a0 = _mm512_maskz_loadu_ps(mlo, x0 + 2 * ow);
            const __m512 a1 = _mm512_maskz_loadu_ps(mhi, x0 + 2 * ow + 16);
            const __m512 b0 = _mm512_maskz_loadu_ps(mlo, x1 + 2 * ow);
            const __m512 b1 = _mm512_maskz_loadu_ps(mhi, x1 + 2 * ow + 16);
            const __m512 v0 = _mm512_permutex2var_ps(a0, even, a1);
            const __m512 v1 = _mm512_permutex2var_ps(a0, odd, a1);
            const __m512 v2 = _mm512_permutex2var_ps(b0, even, b1);
            const __m512 v3 = _mm512_permutex2var_ps(b0, odd, b1);
            __m512 best = v0;
            __m512i off = _mm512_setzero_si512();
            const __m512 cand[3] = {v1, v2, v3};
            for (int k = 0; k < 3; k++) {
                const __mmask16 m =
                    _mm512_cmp_ps_mask(cand[k], best, _CMP_GT_OQ) |
                    (_mm512_cmp_ps_mask(cand[k], cand[k], _CMP_UNORD_Q) &
                     _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q));
                best = _mm512_mask_mov_ps(best, m, cand[k]);
                off = _mm512_mask_mov_epi32(off, m, offs[k]);
            }
            _mm512_mask_storeu_ps(out + oh * OW + ow, live, best);
            if (idx)
                fx_pool_store_idx(idx + oh * OW + ow, (int32_t)(x_base + 2 * oh * W + 2 * ow), off,
                                  live);
        }
    }
}

/* Which cell of its 2x2 block each of a step's live indices names (m0 top left, m1 top right,
 * m2 bottom left, m3 bottom right), from its offset to the block's first cell, first + 2k for
 * block k (0, 1, W or W + 1). Returns 0 where a live index names none of them. */
static inline int fx_unpool_cells(const int32_t *idx, __mmask16 live, int64_t first, int64_t W,
                                  __mmask16 *m0, __mmask16 *m1, __mmask16 *m2, __mmask16 *m3)
{
    const __m512i lane2 = _mm512_loadu_si512((const void *)fx_pool_lane2);
    const __m512i code = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(live, idx),
                                          _mm512_add_epi32(_mm512_set1_epi32((int32_t)first), lane2));
    *m0 = _mm512_cmpeq_epi32_mask(code, _mm512_setzero_si512());
    *m1 = _mm512_cmpeq_epi32_mask(code, _mm512_set1_epi32(1));
    *m2 = _mm512_cmpeq_epi32_mask(code, _mm512_set1_epi32((int32_t)W));
    *m3 = _mm512_cmpeq_epi32_mask(code, _mm512_set1_epi32((int32_t)W + 1));
    return (__mmask16)((*m0 | *m1 | *m2 | *m3) & live) == live;
}

/* The max-pool gradient's scatter in 2x2 blocks (backend.h maxunpool2x2_u16), 16 blocks per
 * step: each index's offset from its block's first cell (0, 1, W or W + 1) picks which of the
 * block's four cells gets the value; a row pair of 32 cells is then two 32-bit interleaves of
 * (left, right) cells, one store per input row. Why: the portable scatter stores one value at
 * a time after checking its index (about a third of a CNN's pooling gradient). */
int fx_maxunpool2x2_u16_avx512(const uint16_t *dy, const int32_t *idx, int64_t lo, int64_t H,
                               int64_t W, int64_t OH, int64_t OW, int half, uint16_t inf,
                               uint16_t qnan, uint16_t *dst, int32_t *mx)
{
    const __m256i mag_mask = _mm256_set1_epi16(0x7FFF), sign = _mm256_set1_epi16((short)0x8000);
    const __m256i vinf = _mm256_set1_epi16((short)inf), vqnan = _mm256_set1_epi16((short)qnan);
    __m256i vmx = _mm256_setzero_si256();
    for (int64_t oh = 0; oh < OH; oh++) {
        uint16_t *r0 = dst + 2 * oh * W, *r1 = r0 + W;
        for (int64_t ow = 0; ow < OW; ow += 16) {
            const int64_t left = OW - ow < 16 ? OW - ow : 16;
            const __mmask16 live = (__mmask16)((1u << left) - 1);
            const __mmask32 live2 = (__mmask32)(((uint64_t)1 << (2 * left)) - 1);
            __m256i d = _mm256_maskz_loadu_epi16(live, dy + oh * OW + ow);
            __mmask16 m0, m1, m2, m3;
            if (!fx_unpool_cells(idx + oh * OW + ow, live, lo + 2 * oh * W + 2 * ow, W, &m0, &m1,
                                 &m2, &m3))
                return 0;
            if (half) { /* -0 as +0, NaN as the format's quiet NaN with its sign */
                const __m256i mag = _mm256_and_si256(d, mag_mask);
                const __mmask16 nan = _mm256_cmpgt_epu16_mask(mag, vinf);
                d = _mm256_mask_mov_epi16(d, nan, _mm256_or_si256(_mm256_and_si256(d, sign), vqnan));
                d = _mm256_maskz_mov_epi16(_mm256_test_epi16_mask(mag, mag), d);
            } else {
                vmx = _mm256_max_epu16(vmx, _mm256_abs_epi16(d)); /* |-32768| = 0x8000 */
            }
            const __m512i d32 = _mm512_cvtepu16_epi32(d);
            const __m512i top = _mm512_or_si512(_mm512_maskz_mov_epi32(m0, d32),
                                                _mm512_slli_epi32(_mm512_maskz_mov_epi32(m1, d32), 16));
            const __m512i bot = _mm512_or_si512(_mm512_maskz_mov_epi32(m2, d32),
                                                _mm512_slli_epi32(_mm512_maskz_mov_epi32(m3, d32), 16));
            _mm512_mask_storeu_epi16(r0 + 2 * ow, live2, top);
            _mm512_mask_storeu_epi16(r1 + 2 * ow, live2, bot);
        }
        for (int64_t w = 2 * OW; w < W; w++) r0[w] = r1[w] = 0; /* an odd last column */
    }
    for (int64_t w = 2 * OH * W; w < H * W; w++) dst[w] = 0; /* an odd last row */
    if (!half) {
        const __m512i m32 = _mm512_cvtepu16_epi32(vmx);
        const int32_t m = _mm512_reduce_max_epi32(m32);
        *mx = m > *mx ? m : *mx;
    }
    return 1;
}

/* The fp32 max-pool gradient's scatter in 2x2 blocks (backend.h maxunpool2x2_f32), 16 blocks
 * per step, as fx_maxunpool2x2_f32_avx2 (pool_avx2.c): the chosen cell of each block gets
 * 0 + dy, the others +0, and each input row's 32 cells are two interleaves of the (left,
 * right) cells. */
int fx_maxunpool2x2_f32_avx512(const float *dy, const int32_t *idx, int64_t lo, int64_t H,
                               int64_t W, int64_t OH, int64_t OW, float *dst)
{
    /* output cell j of a row's first (second) 16: block j / 2's (8 + j / 2's) left cell
     * where j is even, its right one where odd (the right cells are lanes 16 on) */
    const __m512i lo_cells = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22,
                                               7, 23);
    const __m512i hi_cells = _mm512_add_epi32(lo_cells, _mm512_set1_epi32(8));
    for (int64_t oh = 0; oh < OH; oh++) {
        float *r0 = dst + 2 * oh * W, *r1 = r0 + W;
        for (int64_t ow = 0; ow < OW; ow += 16) {
            const int64_t left = OW - ow < 16 ? OW - ow : 16;
            const __mmask16 live = (__mmask16)((1u << left) - 1);
            const uint32_t live2 = (uint32_t)(((uint64_t)1 << (2 * left)) - 1);
            const __m512 d = _mm512_maskz_loadu_ps(live, dy + oh * OW + ow);
            __mmask16 m0, m1, m2, m3;
            if (!fx_unpool_cells(idx + oh * OW + ow, live, lo + 2 * oh * W + 2 * ow, W, &m0, &m1,
                                 &m2, &m3))
                return 0;
            const __m512 v = _mm512_add_ps(_mm512_setzero_ps(), d);
            for (int r = 0; r < 2; r++) {
                const __m512 e = _mm512_maskz_mov_ps(r ? m2 : m0, v);
                const __m512 o = _mm512_maskz_mov_ps(r ? m3 : m1, v);
                float *row = (r ? r1 : r0) + 2 * ow;
                _mm512_mask_storeu_ps(row, (__mmask16)live2, _mm512_permutex2var_ps(e, lo_cells, o));
                _mm512_mask_storeu_ps(row + 16, (__mmask16)(live2 >> 16),
                                      _mm512_permutex2var_ps(e, hi_cells, o));
            }
        }
        for (int64_t w = 2 * OW; w < W; w++) r0[w] = r1[w] = 0.0f; /* an odd last column */
    }
    for (int64_t w = 2 * OH * W; w < H * W; w++) dst[w] = 0.0f; /* an odd last row */
    return 1;
}
