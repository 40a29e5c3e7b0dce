/* fp32 values rounded to fp16 with the definition's bits (fp16_scalar.c) with F16C, 8 lanes:
 * vcvtps2ph to nearest even (the rounding in the immediate, MXCSR.RC not consulted; fp16
 * results are never flushed), then NaN lanes rewritten to sign | 0x7E00, the definition's NaN
 * (fp16_avx2.c says why only NaNs differ). Shared by the bulk conversion (fp16_avx2.c) and the
 * kernels that round their own fp32 results to fp16 in registers (the batch norm's,
 * src/nn/batchnorm_avx2.c, and the fp16/bf16 add, src/core/half_binary_avx2.c). */
#ifndef FX_FP16_ROUND_AVX2_H
#define FX_FP16_ROUND_AVX2_H

#include <immintrin.h>

/* NaN lanes of vcvtps2ph results -> sign | 0x7E00. A NaN result is any pattern whose
 * magnitude is above the Inf pattern 0x7C00. */
static inline __m128i fx_fp16_canonical_nan8(__m128i h)
{
    __m128i mag = _mm_and_si128(h, _mm_set1_epi16(0x7FFF));
    __m128i is_nan = _mm_cmpgt_epi16(mag, _mm_set1_epi16(0x7C00));
    __m128i canon = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16((short)0x8000)),
                                 _mm_set1_epi16(0x7E00));
    return _mm_blendv_epi8(h, canon, is_nan);
}

/* 8 fp32 values -> their 8 fp16 patterns in order (NaN lanes fixed only where present) */
static inline __attribute__((always_inline)) __m128i fx_f32_to_fp16_8(__m256 x)
{
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    const __m128i mag = _mm_and_si128(h, _mm_set1_epi16(0x7FFF));
    const __m128i is_nan = _mm_cmpgt_epi16(mag, _mm_set1_epi16(0x7C00));
    if (_mm_testz_si128(is_nan, is_nan)) return h;
    return fx_fp16_canonical_nan8(h);
}

#endif
