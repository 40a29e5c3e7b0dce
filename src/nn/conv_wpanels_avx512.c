/* AVX-512 builder of the weight gradient's fp32 GEMM A panels straight from the padded chunk
 * (conv_panels.h) for the 12-row AVX-512 tile, from fp32, fp16 or bf16 input.
 *
 * As on AVX2 (conv_panels_avx2.c), per 8 pixels a tap's values are one load from the padded
 * input (two blended where the block continues on the next output row), widened exactly; the
 * panel's 12 taps then go through two 8 x 8 register transposes (taps 0-7, and 8-11 with four
 * zero rows), and each pixel's 12 values are stored as 8 + 4 floats. The values are those of
 * the patch matrix widened as the GEMM's packing widens them, in the same places: the same
 * products in the same order, the same bits. */
#include "conv_panels.h"
#include "../core/transpose_avx2.h"
#include "../fp32/f32_kernels.h"

#include <immintrin.h>

#define FX_WPANEL_ROWS 12
_Static_assert(FX_WPANEL_ROWS == FX_F32_MR_AVX512, "the panels are the AVX-512 fp32 GEMM's A panels");

/* 8 values at src widened to fp32 (exact), per source format */
static inline __attribute__((always_inline)) __m256 load8(const char *src, int fmt)
{
    if (fmt == FMT_FP32) return _mm256_loadu_ps((const float *)(const void *)src);
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)src);
    if (fmt == FMT_BF16) /* bf16 is the upper half of the fp32 bits */
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* Tap row i's 8 values of block b: one run, or lanes < split from the first and the others
 * from the second */
static inline __attribute__((always_inline)) __m256 block_row(const char *x, size_t esz, int fmt,
                                                             int64_t roff, const fx_f32_block *bk)
{
    const __m256 a = load8(x + (size_t)(roff + bk->off) * esz, fmt);
    if (bk->split == 8) return a;
    const __m256 b = load8(x + (size_t)(roff + bk->off2) * esz, fmt);
    return _mm256_mask_blend_ps((__mmask8)((1u << bk->split) - 1), b, a);
}

static inline __attribute__((always_inline)) void
pack_blocks12(float *dst, const char *x, size_t esz, int fmt, const int64_t *off, int rows,
              const fx_f32_block *blk, int64_t ncols)
{
    const int64_t nblk = (ncols + 7) / 8;
    for (int64_t b = 0; b < nblk; b++) {
        __m256 lo[8], hi[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) /* no pointer is formed for a missing row */
            lo[i] = i < rows ? block_row(x, esz, fmt, off[i], &blk[b]) : _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            hi[i] = i < 4 && 8 + i < rows ? block_row(x, esz, fmt, off[8 + i], &blk[b])
                                          : _mm256_setzero_ps();
        fx_transpose8x8_ps(lo);
        fx_transpose8x8_ps(hi);
        /* pixel t of the block: taps 0-7 in lo[t], 8-11 in the low half of hi[t] */
        float *d = dst + b * 8 * FX_WPANEL_ROWS;
        const int n = ncols - b * 8 < 8 ? (int)(ncols - b * 8) : 8;
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++)
            if (t < n) {
                _mm256_storeu_ps(d + t * FX_WPANEL_ROWS, lo[t]);
                _mm_storeu_ps(d + t * FX_WPANEL_ROWS + 8, _mm256_castps256_ps128(hi[t]));
            }
    }
}

/* fx_f32_pack_blocks_fn for 12 rows, per source format */
static void pack_blocks12_any(float *dst, const void *src, int fmt, const int64_t *off, int rows,
                              const fx_f32_block *blk, int64_t ncols)
{
    if (fmt == FMT_FP32)
        pack_blocks12(dst, src, sizeof(float), FMT_FP32, off, rows, blk, ncols);
    else if (fmt == FMT_FP16)
        pack_blocks12(dst, src, sizeof(uint16_t), FMT_FP16, off, rows, blk, ncols);
    else
        pack_blocks12(dst, src, sizeof(uint16_t), FMT_BF16, off, rows, blk, ncols);
}

int fx_conv_wpanels_f32_avx512(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb,
                               int mr, float *ap)
{
    return mr == FX_WPANEL_ROWS &&
           fx_conv_wpanels_f32_build(g, xp, fmt, nb, mr, pack_blocks12_any, ap);
}
