/* The exact int64 sums of the AMX integer convolution kernels (conv_i16_amx.c,
 * conv_i16_wgrad_amx.c) from their four int32 accumulator tiles, stored row by row (16 int32 a
 * row) in acc[0..3] = HH, HL, LH, LL over the high and low bytes (gemm_i16_amx.c derives it):
 * sum = 65536 HH + 256 (HL + LH) + LL, formed in int64, so exact. Included only by files
 * compiled with the AMX and AVX-512 flags. */
#ifndef FX_FLEX_AMX_I16_SUMS_H
#define FX_FLEX_AMX_I16_SUMS_H

#include <immintrin.h>
#include <stdint.h>

/* The 8 sums of accumulator elements q .. q + 7 (q a multiple of 8) */
static inline __m512i fx_amx_i16_sums8(const int32_t acc[4][256], int q)
{
    const __m512i hh = _mm512_cvtepi32_epi64(_mm256_load_si256((const void *)(acc[0] + q)));
    const __m512i hl = _mm512_cvtepi32_epi64(_mm256_load_si256((const void *)(acc[1] + q)));
    const __m512i lh = _mm512_cvtepi32_epi64(_mm256_load_si256((const void *)(acc[2] + q)));
    const __m512i ll = _mm512_cvtepi32_epi64(_mm256_load_si256((const void *)(acc[3] + q)));
    return _mm512_add_epi64(
        _mm512_add_epi64(_mm512_slli_epi64(hh, 16), _mm512_slli_epi64(_mm512_add_epi64(hl, lh), 8)),
        ll);
}

#endif
