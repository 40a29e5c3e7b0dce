/* Transposes of 32-bit elements in AVX-512 registers (16 x 16, and 8 x 16 into 16 columns of
 * 8). Include only from files compiled with the AVX-512 flags (*_avx512.c). Shuffles move bits
 * unchanged, so any 32-bit data (floats, int32, pairs of int16) can go through the float-typed
 * registers. */
#ifndef FX_CORE_TRANSPOSE_AVX512_H
#define FX_CORE_TRANSPOSE_AVX512_H

#include <immintrin.h>

/* The transposes' first two rounds on rows r[0 .. 4G - 1] (G groups of four rows), in the
 * caller's arrays a (2G pairs) and b: a 32-bit interleave of row pairs, then a 64-bit
 * interleave of pair pairs, after which b[4g + c]'s 128-bit lane l holds rows 4g..4g+3 of
 * column 4l + c. A macro, not a function: as an inlined function it changed GCC's register
 * allocation of the 16 x 16 transpose's callers (fx_pair_rows_transpose_avx512: 41
 * instructions more). */
#define FX_TRANSPOSE_INTERLEAVE(r, a, b, G)                                                      \
    do {                                                                                         \
        for (int i_ = 0; i_ < 2 * (G); i_++) {                                                   \
            (a)[2 * i_] = _mm512_unpacklo_ps((r)[2 * i_], (r)[2 * i_ + 1]);                      \
            (a)[2 * i_ + 1] = _mm512_unpackhi_ps((r)[2 * i_], (r)[2 * i_ + 1]);                  \
        }                                                                                        \
        for (int g_ = 0; g_ < (G); g_++) {                                                       \
            const __m512d lo_ = _mm512_castps_pd((a)[4 * g_]);                                   \
            const __m512d hi_ = _mm512_castps_pd((a)[4 * g_ + 1]);                               \
            const __m512d lo2_ = _mm512_castps_pd((a)[4 * g_ + 2]);                              \
            const __m512d hi2_ = _mm512_castps_pd((a)[4 * g_ + 3]);                              \
            (b)[4 * g_ + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo_, lo2_));                   \
            (b)[4 * g_ + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo_, lo2_));                   \
            (b)[4 * g_ + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi_, hi2_));                   \
            (b)[4 * g_ + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi_, hi2_));                   \
        }                                                                                        \
    } while (0)

/* r[i] holds row i on entry, column i on exit. Three rounds: the two interleaves of
 * FX_TRANSPOSE_INTERLEAVE, then two 128-bit lane shuffles that gather the four row groups
 * of each column. 64 shuffles in all. */
static inline void fx_transpose16x16_ps(__m512 r[16])
{
    __m512 a[16], b[16];
    FX_TRANSPOSE_INTERLEAVE(r, a, b, 4);
    for (int c = 0; c < 4; c++) {
        const __m512 u0 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0x44);
        const __m512 u1 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0xEE);
        const __m512 v0 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0x44);
        const __m512 v1 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0xEE);
        r[c] = _mm512_shuffle_f32x4(u0, v0, 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(u0, v0, 0xDD);
        r[8 + c] = _mm512_shuffle_f32x4(u1, v1, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(u1, v1, 0xDD);
    }
}

/* The 8 x 16 transpose of rows r[0..7] (r[8..15] ignored) into 16 columns of 8: t[i] = column
 * i. The two interleaves of FX_TRANSPOSE_INTERLEAVE (then lane l of b[4h + q] holds column
 * 4l + q's rows 4h..4h+3), and one two-source permute per pair of columns that joins each
 * column's two halves: 24 shuffles, where the 16 x 16 transpose with zero rows took 64. */
static inline void fx_transpose8x16_ps(const __m512 r[16], __m256 t[16])
{
    __m512 a[8], b[8];
    FX_TRANSPOSE_INTERLEAVE(r, a, b, 2);
    /* columns q and 4 + q from lanes 0 and 1 of b[q] (rows 0-3) and b[4 + q] (rows 4-7), columns
     * 8 + q and 12 + q from lanes 2 and 3 */
    const __m512i first = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
    const __m512i second =
        _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8);
    for (int q = 0; q < 4; q++) {
        const __m512 u = _mm512_permutex2var_ps(b[q], first, b[4 + q]);
        const __m512 w = _mm512_permutex2var_ps(b[q], second, b[4 + q]);
        t[q] = _mm512_castps512_ps256(u);
        t[4 + q] = _mm512_extractf32x8_ps(u, 1);
        t[8 + q] = _mm512_castps512_ps256(w);
        t[12 + q] = _mm512_extractf32x8_ps(w, 1);
    }
}

#endif
