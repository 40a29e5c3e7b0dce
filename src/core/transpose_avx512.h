/* 16 x 16 transpose of 32-bit elements in AVX-512 registers. Include only from files compiled
 * with the AVX-512 flags (*_avx512.c). Shuffles move bits unchanged, so any 32-bit data
 * (floats, int32, pairs of int16) can go through the float-typed registers. */
#ifndef FX_CORE_TRANSPOSE_AVX512_H
#define FX_CORE_TRANSPOSE_AVX512_H

#include <immintrin.h>

/* r[i] holds row i on entry, column i on exit. Three rounds: 32-bit interleave of row pairs,
 * 64-bit interleave of pair pairs (then each 128-bit lane l of b[4g + c] holds rows 4g..4g+3
 * of column 4l + c), and two 128-bit lane shuffles that gather the four row groups of each
 * column. 64 shuffles in all. */
static inline void fx_transpose16x16_ps(__m512 r[16])
{
    __m512 a[16], b[16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {
        const __m512d lo = _mm512_castps_pd(a[4 * g]), hi = _mm512_castps_pd(a[4 * g + 1]);
        const __m512d lo2 = _mm512_castps_pd(a[4 * g + 2]), hi2 = _mm512_castps_pd(a[4 * g + 3]);
        b[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, lo2));
        b[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, lo2));
        b[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi, hi2));
        b[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi, hi2));
    }
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
 * i. Two rounds of interleaves as in fx_transpose16x16_ps (then lane l of b[4h + q] holds column
 * 4l + q's rows 4h..4h+3), and one two-source permute per pair of columns that joins each
 * column's two halves: 24 shuffles, where the 16 x 16 transpose with zero rows took 64. */
static inline void fx_transpose8x16_ps(const __m512 r[16], __m256 t[16])
{
    __m512 a[8], b[8];
    for (int i = 0; i < 4; i++) {
        a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) {
        const __m512d lo = _mm512_castps_pd(a[4 * h]), hi = _mm512_castps_pd(a[4 * h + 1]);
        const __m512d lo2 = _mm512_castps_pd(a[4 * h + 2]), hi2 = _mm512_castps_pd(a[4 * h + 3]);
        b[4 * h + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, lo2));
        b[4 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, lo2));
        b[4 * h + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi, hi2));
        b[4 * h + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi, hi2));
    }
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
