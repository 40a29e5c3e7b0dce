/* The first-NaN rule of f32_scalar.c (fx_f32_nan_first) on sixteen fp32 lanes, for the AVX-512
 * element-wise kernels and the bf16 GEMM's bias add. Include only from files compiled with the
 * AVX-512 flags. */
#ifndef FX_F32_NAN_AVX512_H
#define FX_F32_NAN_AVX512_H

#include <immintrin.h>

/* a op b as r: lanes where a is NaN take a, quieted (the compiler may emit the instruction
 * with its operands swapped, and then b's NaN would win) */
static inline __m512 fx_f32_nan_first16(__m512 a, __m512 r)
{
    const __mmask16 an = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    const __m512 qa = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x00400000)));
    return _mm512_mask_mov_ps(r, an, qa);
}

static inline __m512 fx_f32_add_nf16(__m512 a, __m512 b)
{
    return fx_f32_nan_first16(a, _mm512_add_ps(a, b));
}

#endif
