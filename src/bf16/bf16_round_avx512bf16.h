/* 16 fp32 values rounded to bf16 with the definition's bits (bf16_scalar.c) on AVX512_BF16:
 * vcvtneps2bf16, except where a lane holds a NaN or a nonzero subnormal, the two inputs on which
 * that instruction and the definition differ (bf16_avx512bf16.c says how); such a vector takes
 * the integer path (fx_cvt_f32_to_bf16_avx512), which is exact for every input. Shared by the
 * bulk conversion and the direct convolution's tiles. Include only from files compiled with
 * -mavx512bf16 (the *_avx512bf16.c files). */
#ifndef FX_BF16_ROUND_AVX512BF16_H
#define FX_BF16_ROUND_AVX512BF16_H

#include "bf16_kernels.h"

#include <immintrin.h>
#include <stdint.h>

/* Lanes where vcvtneps2bf16 and the definition can differ: NaN or nonzero subnormal, read from
 * the bits (vfpclassps would be shorter, but with MXCSR.DAZ set it takes a subnormal for zero,
 * and the conversions must not depend on MXCSR) */
static inline __mmask16 fx_bf16_special_lanes(__m512 v)
{
    const __m512i mag = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF));
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7F800000));
    /* mag in [1, 0x007FFFFF] <=> mag - 1 < 0x007FFFFF unsigned (mag = 0 wraps around) */
    const __mmask16 is_sub = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(mag, _mm512_set1_epi32(1)),
                                                     _mm512_set1_epi32(0x007FFFFF));
    return is_nan | is_sub;
}

/* v rounded to bf16; special: fx_bf16_special_lanes(v) != 0, where the caller knows it */
static inline __m256i fx_bf16_round16(__m512 v, int special)
{
    if (!special) return (__m256i)_mm512_cvtneps_pbh(v);
    float f[16];
    uint16_t b[16];
    _mm512_storeu_ps(f, v);
    fx_cvt_f32_to_bf16_avx512(f, b, 16);
    return _mm256_loadu_si256((const __m256i *)(const void *)b);
}

#endif
