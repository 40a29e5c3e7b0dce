/* AVX2 2x2 / stride-2 max pooling of one fp32 plane (also the fp16/bf16 route, which pools
 * widened rows): the values and argmax indices of the portable plane loop (pool.c,
 * FX_MAXPOOL_2X2_PLANE), 8 windows per step. The four candidates of every window are compared in
 * the portable loop's order (top left, top right, bottom left, bottom right) with its
 * comparison, so the first largest one wins, and the first NaN, as there.
 *
 * Why: the portable fp32 loop does not vectorise (the two candidates of a row are interleaved);
 * this kernel took the CNN's pooling forward passes from 3.3-3.9 to 2.0-3.0 ms (fp32) and from
 * 3.2-3.4 to 1.9-2.4 ms (bf16) on a Zen 3. The int16 planes of FLEX16_5/DFP16 have their own
 * (fx_maxpool2x2_i16_avx2).
 *
 * fp16 and bf16 planes have a kernel of their own (fx_maxpool2x2_half_avx2): the same
 * comparisons on the widened candidates, and the output taken from the winning 16-bit pattern
 * (NaN made canonical, as the fp32 route's narrowing makes it), so values and indices are the
 * fp32 route's; it reads one 32-byte vector per row and step where the fp32 kernel reads two,
 * and needs no widened plane, pooled plane and narrowing (on the CNN's pool1, one thread on the
 * AVX2 EPYC, the bf16 pooling had taken 1.25x fp32's time that way).
 *
 * A row's last windows (OW not a multiple of 8: the CNN's rows of 14 and 7 windows) are read
 * by masked loads, whose masked-off lanes read as 0, and written in pieces of 4, 2 and 1
 * values, not by masked stores, which AMD microcodes. Through small buffers copied with
 * memcpy, these tails had been a library call per row and array, 2 % of a bf16 CNN epoch at
 * this level (`perf`, an Intel model 167 with FLEXPOINT_CPU=avx2). */
#include "../core/backend.h"
#include "pool_kernels.h"

#include <immintrin.h>
#include <string.h>

enum { FX_POOL_STEP = 8 }; /* windows per step */

/* the lanes below n of 8 32-bit lanes, as a mask */
static inline __m256i fx_lanes_below(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* v's first n (< 8) 32-bit lanes to p (floats or int32: the bits as they are), in pieces */
static inline void fx_store_f32_tail(void *p, __m256 v, int n)
{
    char *d = p;
    __m128 h = _mm256_castps256_ps128(v);
    if (n & 4) {
        _mm_storeu_ps((float *)(void *)d, h);
        d += 16;
        h = _mm256_extractf128_ps(v, 1);
    }
    if (n & 2) {
        _mm_storel_pi((__m64 *)(void *)d, h);
        d += 8;
        h = _mm_movehl_ps(h, h);
    }
    if (n & 1) memcpy(d, &h, 4); /* a fixed size: one move */
}

/* v's first n (< 8) 16-bit lanes to p, in pieces */
static inline void fx_store_u16_tail(uint16_t *p, __m128i v, int n)
{
    if (n & 4) {
        _mm_storel_epi64((__m128i *)p, v);
        p += 4;
        v = _mm_srli_si128(v, 8);
    }
    if (n & 2) {
        const int32_t w = _mm_cvtsi128_si32(v);
        memcpy(p, &w, 4);
        p += 2;
        v = _mm_srli_si128(v, 4);
    }
    if (n & 1) *p = (uint16_t)_mm_cvtsi128_si32(v);
}

/* idx[k] = r0 + 2k + off[k] for the step's n windows (n = 8 stores the whole vector). */
static inline void fx_pool_idx_avx2(int32_t *idx, int32_t r0, __m256i off, int n)
{
    const __m256i lane2 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i v = _mm256_add_epi32(_mm256_add_epi32(_mm256_set1_epi32(r0), lane2), off);
    if (n == FX_POOL_STEP) {
        _mm256_storeu_si256((__m256i *)idx, v);
        return;
    }
    fx_store_f32_tail(idx, _mm256_castsi256_ps(v), n);
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

/* The lanes where candidate c takes the window from best: greater, or a NaN where the best so
 * far is not one (the portable loop's rule) */
static inline __m256 fx_pool_takes(__m256 c, __m256 best)
{
    return _mm256_or_ps(_mm256_cmp_ps(c, best, _CMP_GT_OQ),
                        _mm256_and_ps(_mm256_cmp_ps(c, c, _CMP_UNORD_Q),
                                      _mm256_cmp_ps(best, best, _CMP_ORD_Q)));
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
                const __m256i m0 = fx_lanes_below(2 * n), m1 = fx_lanes_below(2 * n - 8);
                a0 = _mm256_maskload_ps(x0 + 2 * ow, m0);
                a1 = _mm256_maskload_ps(x0 + 2 * ow + 8, m1);
                b0 = _mm256_maskload_ps(x1 + 2 * ow, m0);
                b1 = _mm256_maskload_ps(x1 + 2 * ow + 8, m1);
            }
            __m256 best, c[3];
            fx_pool_deinterleave(a0, a1, &best, &c[0]);
            fx_pool_deinterleave(b0, b1, &c[1], &c[2]);
            __m256i off = _mm256_setzero_si256();
            for (int k = 0; k < 3; k++) {
                const __m256 m = fx_pool_takes(c[k], best);
                best = _mm256_blendv_ps(best, c[k], m);
                off = _mm256_blendv_epi8(off, offs[k], _mm256_castps_si256(m));
            }
            if (n == FX_POOL_STEP) {
                _mm256_storeu_ps(o + ow, best);
            } else {
                fx_store_f32_tail(o + ow, best, n);
            }
            if (idx)
                fx_pool_idx_avx2(idx + oh * OW + ow, (int32_t)(x_base + 2 * oh * W + 2 * ow), off,
                                 n);
        }
    }
}

/* The top (x0) and bottom (x1) rows of n <= 8 windows of 16-bit values, a window's two values
 * one 32-bit lane: whole vectors, or masked loads whose lanes past n read 0 */
static inline void fx_pool_rows16(const void *x0, const void *x1, int n, __m256i *r0, __m256i *r1)
{
    if (n == FX_POOL_STEP) {
        *r0 = _mm256_loadu_si256((const __m256i *)x0);
        *r1 = _mm256_loadu_si256((const __m256i *)x1);
    } else {
        const __m256i m = fx_lanes_below(n);
        *r0 = _mm256_maskload_epi32((const int *)x0, m);
        *r1 = _mm256_maskload_epi32((const int *)x1, m);
    }
}

/* The four candidates of 8 windows from two rows of 16 fp16/bf16 values each (r0: the top row,
 * r1: the bottom one; 32-bit lane k holds window k's two columns): as fp32 for the comparisons,
 * f[0..3] (top left, top right, bottom left, bottom right), and their 16-bit patterns in 32-bit
 * lanes, h[0..3]. bf16 widens by its position in the lane; fp16 through vcvtph2ps (which quiets
 * a signalling NaN: the comparisons see a NaN either way, and the output is made from h). */
static inline void fx_pool_half_candidates(__m256i r0, __m256i r1, int fp16, __m256 f[4],
                                           __m256i h[4])
{
    const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
    h[0] = _mm256_and_si256(r0, lo16);
    h[1] = _mm256_srli_epi32(r0, 16);
    h[2] = _mm256_and_si256(r1, lo16);
    h[3] = _mm256_srli_epi32(r1, 16);
    if (!fp16) {
        const __m256i hi16 = _mm256_set1_epi32((int)0xFFFF0000u);
        f[0] = _mm256_castsi256_ps(_mm256_slli_epi32(r0, 16));
        f[1] = _mm256_castsi256_ps(_mm256_and_si256(r0, hi16));
        f[2] = _mm256_castsi256_ps(_mm256_slli_epi32(r1, 16));
        f[3] = _mm256_castsi256_ps(_mm256_and_si256(r1, hi16));
        return;
    }
    for (int k = 0; k < 4; k++) /* 8 patterns in order in the low 128 bits, then vcvtph2ps */
        f[k] = _mm256_cvtph_ps(
            _mm_packus_epi32(_mm256_castsi256_si128(h[k]), _mm256_extracti128_si256(h[k], 1)));
}

void fx_maxpool2x2_half_avx2(const uint16_t *x, int64_t x_base, int64_t W, int64_t OH,
                             int64_t OW, uint16_t *out, int32_t *idx, int fp16)
{
    const __m256i offs[3] = {_mm256_set1_epi32(1), _mm256_set1_epi32((int32_t)W),
                             _mm256_set1_epi32((int32_t)W + 1)};
    /* a NaN output is the format's quiet NaN with its sign, as the fp32 route's narrowing
     * leaves it: magnitudes above inf */
    const __m256i inf = _mm256_set1_epi32(fp16 ? 0x7C00 : 0x7F80);
    const __m256i qnan = _mm256_set1_epi32(fp16 ? 0x7E00 : 0x7FC0);
    const __m256i mag = _mm256_set1_epi32(0x7FFF), sign = _mm256_set1_epi32(0x8000);
    for (int64_t oh = 0; oh < OH; oh++) {
        const uint16_t *x0 = x + 2 * oh * W, *x1 = x0 + W;
        uint16_t *o = out + oh * OW;
        for (int64_t ow = 0; ow < OW; ow += FX_POOL_STEP) {
            const int n = OW - ow < FX_POOL_STEP ? (int)(OW - ow) : FX_POOL_STEP;
            __m256i r0, r1;
            fx_pool_rows16(x0 + 2 * ow, x1 + 2 * ow, n, &r0, &r1);
            __m256 f[4];
            __m256i h[4];
            fx_pool_half_candidates(r0, r1, fp16, f, h);
            __m256 best = f[0];
            __m256i bh = h[0], off = _mm256_setzero_si256();
            for (int k = 0; k < 3; k++) { /* fx_maxpool2x2_f32_avx2's comparison */
                const __m256 c = f[k + 1];
                const __m256i m = _mm256_castps_si256(fx_pool_takes(c, best));
                best = _mm256_blendv_ps(best, c, _mm256_castsi256_ps(m));
                bh = _mm256_blendv_epi8(bh, h[k + 1], m);
                off = _mm256_blendv_epi8(off, offs[k], m);
            }
            const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bh, mag), inf);
            bh = _mm256_blendv_epi8(bh, _mm256_or_si256(_mm256_and_si256(bh, sign), qnan), is_nan);
            const __m128i y8 =
                _mm_packus_epi32(_mm256_castsi256_si128(bh), _mm256_extracti128_si256(bh, 1));
            if (n == FX_POOL_STEP) {
                _mm_storeu_si128((__m128i *)(o + ow), y8);
            } else {
                fx_store_u16_tail(o + ow, y8, n);
            }
            if (idx)
                fx_pool_idx_avx2(idx + oh * OW + ow, (int32_t)(x_base + 2 * oh * W + 2 * ow), off,
                                 n);
        }
    }
}

/* The same of an int16 plane (FLEX16_5/DFP16 mantissas): the candidates sign-extended in
 * 32-bit lanes (a window's two values of a row are one lane) and compared with '>', so the
 * first largest one wins, as in the portable loop. With the row tails read by masked loads
 * rather than through buffers, the CNN's pooling forward passes took 0.61x the portable loop's
 * time (`perf` of a one-thread FLEX16_5 CNN epoch at this level on the Xeon model 167: 425
 * samples against 708, 1.4 % of the step). */
void fx_maxpool2x2_i16_avx2(const int16_t *x, int64_t x_base, int64_t W, int64_t OH, int64_t OW,
                            int16_t *out, int32_t *idx)
{
    const __m256i offs[3] = {_mm256_set1_epi32(1), _mm256_set1_epi32((int32_t)W),
                             _mm256_set1_epi32((int32_t)W + 1)};
    for (int64_t oh = 0; oh < OH; oh++) {
        const int16_t *x0 = x + 2 * oh * W, *x1 = x0 + W;
        int16_t *o = out + oh * OW;
        for (int64_t ow = 0; ow < OW; ow += FX_POOL_STEP) {
            const int n = OW - ow < FX_POOL_STEP ? (int)(OW - ow) : FX_POOL_STEP;
            __m256i r0, r1;
            fx_pool_rows16(x0 + 2 * ow, x1 + 2 * ow, n, &r0, &r1);
            const __m256i c[3] = {_mm256_srai_epi32(r0, 16),
                                  _mm256_srai_epi32(_mm256_slli_epi32(r1, 16), 16),
                                  _mm256_srai_epi32(r1, 16)};
            __m256i best = _mm256_srai_epi32(_mm256_slli_epi32(r0, 16), 16);
            __m256i off = _mm256_setzero_si256();
            for (int k = 0; k < 3; k++) {
                const __m256i m = _mm256_cmpgt_epi32(c[k], best);
                best = _mm256_blendv_epi8(best, c[k], m);
                off = _mm256_blendv_epi8(off, offs[k], m);
            }
            const __m128i y8 =
                _mm_packs_epi32(_mm256_castsi256_si128(best), _mm256_extracti128_si256(best, 1));
            if (n == FX_POOL_STEP)
                _mm_storeu_si128((__m128i *)(o + ow), y8);
            else
                fx_store_u16_tail((uint16_t *)(o + ow), y8, n);
            if (idx)
                fx_pool_idx_avx2(idx + oh * OW + ow, (int32_t)(x_base + 2 * oh * W + 2 * ow), off,
                                 n);
        }
    }
}

/* Which cell of its 2x2 block each of 8 indices names (m[0] top left, m[1] top right, m[2]
 * bottom left, m[3] bottom right, as all-ones lanes), from its offset to its block's first
 * cell, base + 2k for block k (0, 1, W or W + 1). Returns 0 where an index names none. */
static inline int fx_unpool_cells8(__m256i index, int64_t base, int32_t W, __m256i m[4])
{
    const __m256i lane2 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i code =
        _mm256_sub_epi32(index, _mm256_add_epi32(_mm256_set1_epi32((int32_t)base), lane2));
    m[0] = _mm256_cmpeq_epi32(code, _mm256_setzero_si256());
    m[1] = _mm256_cmpeq_epi32(code, _mm256_set1_epi32(1));
    m[2] = _mm256_cmpeq_epi32(code, _mm256_set1_epi32(W));
    m[3] = _mm256_cmpeq_epi32(code, _mm256_set1_epi32(W + 1));
    const __m256i any = _mm256_or_si256(_mm256_or_si256(m[0], m[1]), _mm256_or_si256(m[2], m[3]));
    return _mm256_movemask_ps(_mm256_castsi256_ps(any)) == 0xFF;
}

/* The indices of a step's left (1..8) blocks, those past them named as their own blocks' first
 * cells (base + 2k), which every check passes */
static inline __m256i fx_unpool_index8(const int32_t *idx, int left, int64_t base)
{
    if (left == 8) return _mm256_loadu_si256((const __m256i *)idx);
    const __m256i lanes = fx_lanes_below(left);
    const __m256i pad = _mm256_add_epi32(_mm256_set1_epi32((int32_t)base),
                                         _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    return _mm256_blendv_epi8(pad, _mm256_maskload_epi32(idx, lanes), lanes);
}

/* Eight 2x2 blocks of fx_maxunpool2x2_u16_avx2: dy values d, their indices, and the blocks'
 * first positions base + 2 * lane. Makes the blocks' top and bottom rows (each pair of
 * values one 32-bit lane) and returns 0 when an index lies outside its block. */
static inline int fx_unpool8(__m128i d, __m256i index, int64_t base, int32_t W, int half,
                             __m128i vinf, __m128i vqnan, __m128i *vmx, __m256i *top,
                             __m256i *bot)
{
    __m256i m[4];
    if (!fx_unpool_cells8(index, base, W, m)) return 0;
    const __m256i m0 = m[0], m1 = m[1], m2 = m[2], m3 = m[3];
    if (half) { /* -0 as +0, NaN as the format's quiet NaN with its sign */
        const __m128i mag = _mm_and_si128(d, _mm_set1_epi16(0x7FFF)); /* signed compares */
        const __m128i nan = _mm_cmpgt_epi16(mag, vinf);
        d = _mm_blendv_epi8(d, _mm_or_si128(_mm_and_si128(d, _mm_set1_epi16((short)0x8000)), vqnan),
                            nan);
        d = _mm_andnot_si128(_mm_cmpeq_epi16(mag, _mm_setzero_si128()), d);
    } else {
        *vmx = _mm_max_epu16(*vmx, _mm_abs_epi16(d)); /* |-32768| = 0x8000 */
    }
    const __m256i d32 = _mm256_cvtepu16_epi32(d);
    *top = _mm256_or_si256(_mm256_and_si256(m0, d32),
                           _mm256_slli_epi32(_mm256_and_si256(m1, d32), 16));
    *bot = _mm256_or_si256(_mm256_and_si256(m2, d32),
                           _mm256_slli_epi32(_mm256_and_si256(m3, d32), 16));
    return 1;
}

/* The max-pool gradient's scatter in 2x2 blocks (backend.h maxunpool2x2_u16), as
 * fx_maxunpool2x2_u16_avx512 (pool_avx512.c), 8 blocks per step. A row's last 1..7 blocks take
 * the same step through zero-padded copies (the padding's indices name their own blocks' first
 * positions and its values are 0, so they neither fail nor move the maximum), and only their
 * 2 x 2 values are copied out: the CNN's pooled rows are 14 and 7 blocks wide, so value by
 * value these tails were most of the work. */
int fx_maxunpool2x2_u16_avx2(const uint16_t *dy, const int32_t *idx, int64_t lo, int64_t H,
                             int64_t W, int64_t OH, int64_t OW, int half, uint16_t inf,
                             uint16_t qnan, uint16_t *dst, int32_t *mx)
{
    const __m128i vinf = _mm_set1_epi16((short)inf), vqnan = _mm_set1_epi16((short)qnan);
    __m128i vmx = _mm_setzero_si128();
    int32_t m = *mx;
    __m256i top, bot;
    for (int64_t oh = 0; oh < OH; oh++) {
        uint16_t *r0 = dst + 2 * oh * W, *r1 = r0 + W;
        int64_t ow = 0;
        for (; ow + 8 <= OW; ow += 8) {
            const __m128i d = _mm_loadu_si128((const __m128i *)(dy + oh * OW + ow));
            const int64_t base = lo + 2 * oh * W + 2 * ow;
            if (!fx_unpool8(d, fx_unpool_index8(idx + oh * OW + ow, 8, base), base, (int32_t)W,
                            half, vinf, vqnan, &vmx, &top, &bot))
                return 0;
            _mm256_storeu_si256((__m256i *)(r0 + 2 * ow), top);
            _mm256_storeu_si256((__m256i *)(r1 + 2 * ow), bot);
        }
        if (ow < OW) {
            const int left = (int)(OW - ow);
            const int64_t base = lo + 2 * oh * W + 2 * ow;
            const int16_t *dl = (const int16_t *)(dy + oh * OW + ow);
            /* the first left values by pairs, an odd last one blended into its lane */
            __m128i d = _mm_maskload_epi32((const int *)(const void *)dl,
                                           _mm256_castsi256_si128(fx_lanes_below(left / 2)));
            if (left & 1)
                d = _mm_blendv_epi8(d, _mm_set1_epi16(dl[left - 1]),
                                    _mm_cmpeq_epi16(_mm_set1_epi16((short)(left - 1)),
                                                    _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7)));
            if (!fx_unpool8(d, fx_unpool_index8(idx + oh * OW + ow, left, base), base,
                            (int32_t)W, half, vinf, vqnan, &vmx, &top, &bot))
                return 0;
            /* a block's two values of a row are one 32-bit lane */
            fx_store_f32_tail(r0 + 2 * ow, _mm256_castsi256_ps(top), left);
            fx_store_f32_tail(r1 + 2 * ow, _mm256_castsi256_ps(bot), left);
        }
        for (int64_t w = 2 * OW; w < W; w++) r0[w] = r1[w] = 0; /* an odd last column */
    }
    for (int64_t w = 2 * OH * W; w < H * W; w++) dst[w] = 0; /* an odd last row */
    if (!half) {
        const __m128i lo16 = _mm_unpacklo_epi16(vmx, _mm_setzero_si128());
        const __m128i hi16 = _mm_unpackhi_epi16(vmx, _mm_setzero_si128());
        int32_t lanes[8];
        _mm_storeu_si128((__m128i *)lanes, lo16);
        _mm_storeu_si128((__m128i *)(lanes + 4), hi16);
        for (int l = 0; l < 8; l++) m = lanes[l] > m ? lanes[l] : m;
        *mx = m;
    }
    return 1;
}

/* The fp32 max-pool gradient's scatter in 2x2 blocks (backend.h maxunpool2x2_f32), 8 blocks per
 * step, as fx_maxunpool2x2_u16_avx2: each index's offset from its block's first cell picks the
 * cell that gets 0 + dy (what the portable scatter's add into a zeroed plane stores: -0 as +0,
 * a signalling NaN quieted), the other three get +0, and a row pair of 16 cells is the
 * interleave of the (left, right) cells. A row's last 1..7 blocks take the same step, their
 * values and indices read by masked loads (the indices past the row named as their own
 * blocks' first cells) and their cells written in pieces. Why: the portable route checks
 * every index in a pass of its own, clears the plane and stores one value at a time; the
 * CNN's pool1 gradient (12.8 MB of dx a step) had taken twice bf16's time there. */
int fx_maxunpool2x2_f32_avx2(const float *dy, const int32_t *idx, int64_t lo, int64_t H,
                             int64_t W, int64_t OH, int64_t OW, float *dst)
{
    for (int64_t oh = 0; oh < OH; oh++) {
        float *r0 = dst + 2 * oh * W, *r1 = r0 + W;
        for (int64_t ow = 0; ow < OW; ow += 8) {
            const int left = OW - ow < 8 ? (int)(OW - ow) : 8;
            const int64_t base = lo + 2 * oh * W + 2 * ow;
            const __m256 d = left == 8 ? _mm256_loadu_ps(dy + oh * OW + ow)
                                       : _mm256_maskload_ps(dy + oh * OW + ow, fx_lanes_below(left));
            __m256i m[4];
            if (!fx_unpool_cells8(fx_unpool_index8(idx + oh * OW + ow, left, base), base,
                                  (int32_t)W, m))
                return 0;
            const __m256 v = _mm256_add_ps(_mm256_setzero_ps(), d);
            __m256 rows[2][2];
            for (int r = 0; r < 2; r++) {
                const __m256 e = _mm256_and_ps(_mm256_castsi256_ps(m[2 * r]), v);
                const __m256 o = _mm256_and_ps(_mm256_castsi256_ps(m[2 * r + 1]), v);
                const __m256 lo4 = _mm256_unpacklo_ps(e, o), hi4 = _mm256_unpackhi_ps(e, o);
                rows[r][0] = _mm256_permute2f128_ps(lo4, hi4, 0x20); /* blocks 0-3 */
                rows[r][1] = _mm256_permute2f128_ps(lo4, hi4, 0x31); /* blocks 4-7 */
            }
            for (int r = 0; r < 2; r++) {
                float *row = (r ? r1 : r0) + 2 * ow;
                if (left == 8) {
                    _mm256_storeu_ps(row, rows[r][0]);
                    _mm256_storeu_ps(row + 8, rows[r][1]);
                } else if (left >= 4) {
                    _mm256_storeu_ps(row, rows[r][0]);
                    fx_store_f32_tail(row + 8, rows[r][1], 2 * left - 8);
                } else {
                    fx_store_f32_tail(row, rows[r][0], 2 * left);
                }
            }
        }
        for (int64_t w = 2 * OW; w < W; w++) r0[w] = r1[w] = 0.0f; /* an odd last column */
    }
    for (int64_t w = 2 * OH * W; w < H * W; w++) dst[w] = 0.0f; /* an odd last row */
    return 1;
}
