/* 16 fp32 bit patterns rounded to bf16 with the definition's bits (bf16_scalar.c) on AVX-512F/BW
 * integer vectors: round to nearest even on the low 16 bits, NaN lanes to sign | 0x7FC0. Exact
 * for every input, subnormals and NaN included, and independent of MXCSR. Shared by the bulk
 * conversion (bf16_avx512.c) and the kernels that round their own fp32 results to bf16 in
 * registers (the batch norm's, src/nn/batchnorm_avx512.c). */
#ifndef FX_BF16_ROUND_AVX512_H
#define FX_BF16_ROUND_AVX512_H

#include <immintrin.h>

static inline __m256i fx_bf16_round16_bits(__m512i u)
{
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7F800000));
    const __m512i canon = _mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)),
        _mm512_set1_epi32(0x7FC0));
    r = _mm512_mask_mov_epi32(r, is_nan, canon);
    return _mm512_cvtepi32_epi16(r);
}

#endif
