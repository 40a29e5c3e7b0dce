/* What the AMX integer convolution kernels (conv_i16_amx.c, conv_i16_wgrad_amx.c) share: the
 * step of their four int32 accumulators tmm0-3 = HH, HL, LH, LL over the high and low bytes
 * (gemm_i16_amx.c derives the split), and the exact int64 sums from those accumulators,
 * 65536 HH + 256 (HL + LH) + LL. Included only by files compiled with the AMX and AVX-512
 * flags. */
#ifndef FX_FLEX_AMX_I16_SUMS_H
#define FX_FLEX_AMX_I16_SUMS_H

#include <immintrin.h>
#include <stdint.h>

/* tmm0-3 += one step: A's high and low byte planes (tmm4-5, rows a_stride bytes apart) times
 * B's (tmm6-7, rows b_stride bytes apart), in the four signedness combinations */
static inline void fx_amx_i16_step(const void *a_hi, const void *a_lo, int64_t a_stride,
                                   const void *b_hi, const void *b_lo, int64_t b_stride)
{
    _tile_loadd(4, a_hi, a_stride);
    _tile_loadd(5, a_lo, a_stride);
    _tile_loadd(6, b_hi, b_stride);
    _tile_loadd(7, b_lo, b_stride);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbsud(1, 4, 7);
    _tile_dpbusd(2, 5, 6);
    _tile_dpbuud(3, 5, 7);
}

/* tmm0-3 stored row by row (16 int32 a row) into acc[0..3] */
static inline void fx_amx_i16_store(int32_t acc[4][256])
{
    _tile_stored(0, acc[0], 64);
    _tile_stored(1, acc[1], 64);
    _tile_stored(2, acc[2], 64);
    _tile_stored(3, acc[3], 64);
}

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

/* The 16 sums of accumulator row q (q a multiple of 16), as two vectors of 8 (columns q .. q + 7,
 * then q + 8 .. q + 15), for sums of at most FX_AMX_I16_SUMS32_MAX_K products: 256 HH + HL + LH
 * then fits int32 (|HH| <= 2^14 K, |HL| and |LH| <= 32640 K: 4259584 K < 2^31), so it is formed
 * in 16 int32 lanes and only it and LL are widened, three widenings of the four gone. The same
 * sums as fx_amx_i16_sums8's. */
#define FX_AMX_I16_SUMS32_MAX_K 504
static inline void fx_amx_i16_sums16_small(const int32_t acc[4][256], int q, __m512i *s0,
                                           __m512i *s1)
{
    const __m512i hh = _mm512_load_si512((const void *)(acc[0] + q));
    const __m512i hl = _mm512_load_si512((const void *)(acc[1] + q));
    const __m512i lh = _mm512_load_si512((const void *)(acc[2] + q));
    const __m512i a = _mm512_add_epi32(_mm512_slli_epi32(hh, 8), _mm512_add_epi32(hl, lh));
    const __m512i lo = _mm512_cvtepi32_epi64(_mm256_load_si256((const void *)(acc[3] + q)));
    const __m512i hi = _mm512_cvtepi32_epi64(_mm256_load_si256((const void *)(acc[3] + q + 8)));
    *s0 = _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(a)), 8), lo);
    *s1 = _mm512_add_epi64(
        _mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(a, 1)), 8), hi);
}

#endif
