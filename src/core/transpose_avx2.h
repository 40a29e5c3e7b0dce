/* 8 x 8 transposes in AVX2 registers: of 32-bit elements, and of int16 in each 128-bit lane.
 * Include only from files compiled with the AVX2 flags (*_avx2.c) or the AVX-512 ones. Shuffles
 * move bits unchanged, so any 32-bit data (floats, int32, pairs of int16) can go through the
 * float-typed registers. */
#ifndef FX_CORE_TRANSPOSE_AVX2_H
#define FX_CORE_TRANSPOSE_AVX2_H

#include <immintrin.h>

/* r[i] holds row i on entry, column i on exit: 32-bit interleave of row pairs, 64-bit
 * interleave of pair pairs (u0: words 0 and 4 of rows 0..3, u1: words 1 and 5, ...; u4..u7 the
 * same for rows 4..7), then the 128-bit halves of the two row groups gathered. */
static inline void fx_transpose8x8_ps(__m256 r[8])
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* The same for integer vectors (the casts cost nothing). */
static inline void fx_transpose8x8_epi32(__m256i r[8])
{
    __m256 f[8];
    for (int i = 0; i < 8; i++) f[i] = _mm256_castsi256_ps(r[i]);
    fx_transpose8x8_ps(f);
    for (int i = 0; i < 8; i++) r[i] = _mm256_castps_si256(f[i]);
}

/* 8 pixels of 16 int16 channels, r[i] pixel i (channels 0-7 in its low 128-bit lane, 8-15 in
 * its high one), as runs of 8 pixels per channel: c[j] holds channel j's in its low lane and
 * channel j + 8's in its high one. An 8 x 8 transpose of int16 per lane, in three rounds of
 * unpacks: t holds four channels of two pixels, u two channels of four pixels (u[0]: channels
 * 0 and 1 of pixels 0-3, u[1]: 2 and 3, ...; u[4..7] the same of pixels 4-7). Used where a
 * convolution's pixel-major mantissas go into NCHW planes (src/flex/conv_i16_*). */
static inline void fx_transpose8x16_epi16(const __m256i r[8], __m256i c[8])
{
    __m256i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 2; i++) {
            u[4 * h + 2 * i] = _mm256_unpacklo_epi32(t[4 * h + i], t[4 * h + i + 2]);
            u[4 * h + 2 * i + 1] = _mm256_unpackhi_epi32(t[4 * h + i], t[4 * h + i + 2]);
        }
    for (int j = 0; j < 4; j++) {
        c[2 * j] = _mm256_unpacklo_epi64(u[j], u[4 + j]);
        c[2 * j + 1] = _mm256_unpackhi_epi64(u[j], u[4 + j]);
    }
}

#endif
