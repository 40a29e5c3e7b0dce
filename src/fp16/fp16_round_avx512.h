/* 16 fp32 values rounded to fp16 with the definition's bits (fp16_scalar.c) on AVX-512F/BW:
 * vcvtps2ph to nearest even (exact IEEE rounding, subnormals included, whatever MXCSR holds:
 * the rounding is given in the instruction and fp16 results are never flushed), then NaN lanes
 * rewritten to sign | 0x7E00, the definition's NaN (fp16_avx2.c says why only NaNs differ).
 * Shared by the bulk conversion (fp16_avx512.c) and the kernels that round their own fp32
 * results to fp16 in registers (the batch norm's, src/nn/batchnorm_avx512.c). */
#ifndef FX_FP16_ROUND_AVX512_H
#define FX_FP16_ROUND_AVX512_H

#include <immintrin.h>

static inline __m256i fx_f32_to_fp16_16(__m512 x)
{
    const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i mag = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
    const __mmask16 is_nan = _mm256_cmpgt_epi16_mask(mag, _mm256_set1_epi16(0x7C00));
    const __m256i canon = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16((short)0x8000)),
                                          _mm256_set1_epi16(0x7E00));
    return _mm256_mask_mov_epi16(h, is_nan, canon);
}

#endif
