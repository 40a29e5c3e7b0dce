/* fp32 bit patterns rounded to bf16 with the definition's bits (bf16_scalar.c) on 8-lane AVX2
 * integer vectors: add 0x7FFF plus the lowest kept bit, keep the high half; NaN lanes become
 * sign | 0x7FC0. Exact for every input, subnormals and NaN included, and independent of MXCSR.
 * Shared by the bulk conversion (bf16_avx2.c) and the kernels that round their own fp32
 * results to bf16 in registers (the batch norm's, src/nn/batchnorm_avx2.c, and the fp16/bf16
 * add, src/core/half_binary_avx2.c). */
#ifndef FX_BF16_ROUND_AVX2_H
#define FX_BF16_ROUND_AVX2_H

#include <immintrin.h>

/* 8 fp32 bit patterns -> 8 bf16 patterns rounded to nearest even, each in the low half of its
 * 32-bit lane (NaN lanes not yet canonical). */
static inline __m256i fx_bf16_round8(__m256i u)
{
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF));
    return _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
}

/* All-ones lanes where u is a NaN. The magnitude fits in 31 bits, so the signed compare is an
 * unsigned one here. */
static inline __m256i fx_bf16_nan_lanes8(__m256i u)
{
    __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    return _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7F800000));
}

/* r with its NaN lanes replaced by sign | 0x7FC0. */
static inline __m256i fx_bf16_fix_nan8(__m256i r, __m256i u, __m256i is_nan)
{
    __m256i canon = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
        _mm256_set1_epi32(0x7FC0));
    return _mm256_blendv_epi8(r, canon, is_nan);
}

/* 8 fp32 bit patterns -> their 8 bf16 patterns in order, NaN canonical (fixed only where a
 * lane is NaN: never, in ordinary data). */
static inline __attribute__((always_inline)) __m128i fx_bf16_round8_bits(__m256i u)
{
    __m256i r = fx_bf16_round8(u);
    const __m256i n = fx_bf16_nan_lanes8(u);
    if (!_mm256_testz_si256(n, n)) r = fx_bf16_fix_nan8(r, u, n);
    /* values are <= 0xFFFF: no saturation */
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

#endif
