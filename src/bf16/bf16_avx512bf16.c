/* fp32 -> bf16 with AVX512_BF16 vcvtneps2bf16, 16 lanes, fixed up to the definition's bits.
 *
 * Intel documents vcvtneps2bf16 as: round to nearest even, MXCSR neither consulted nor
 * updated, input denormals treated as zero, output denormals flushed to zero, and a NaN
 * truncated to its top 16 bits with the quiet bit (bit 6) set. Against the definition
 * (bf16_scalar.c) that differs on two kinds of input only:
 *  - NaN: the definition drops the payload (sign | 0x7FC0);
 *  - fp32 subnormals (exponent field 0, fraction != 0): the definition rounds them like any
 *    other value to a bf16 subnormal (or a carry to the smallest normal 0x0080), never to 0.
 * A normal input can never round to a subnormal (2^-126 is a bf16 value), so output flushing
 * only ever concerns subnormal inputs. Zeros and infinities already match.
 * A block of 16 that holds any such lane is converted again by the integer path
 * (fx_cvt_f32_to_bf16_avx512), which is bit-exact for every input; in ordinary data this never
 * happens, so the fast path is one instruction per 16 values.
 *
 * This file is compiled with -mavx512bf16 and only installed when the CPU reports
 * AVX512_BF16 (bf16_avx512.c). */
#include "../core/backend.h"
#include "bf16_kernels.h"
#include "bf16_round_avx512bf16.h"

#include <immintrin.h>

/* 16 fp32 from src -> 16 bf16 with the definition's bits. */
static inline __m256i fx_bf16_block16(const float *src)
{
    const __m512 v = _mm512_loadu_ps(src);
    return fx_bf16_round16(v, fx_bf16_special_lanes(v) != 0);
}

/* Whole blocks, then a masked tail. */
static void fx_f32_to_bf16_cached(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), fx_bf16_block16(src + i));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        const __m512 v = _mm512_maskz_loadu_ps(k, src + i); /* masked-off lanes read as +0 */
        if (fx_bf16_special_lanes(v))
            fx_cvt_f32_to_bf16_avx512(src + i, dst + i, n - i);
        else
            _mm256_mask_storeu_epi16(dst + i, k, fx_bf16_round16(v, 0));
    }
}

/* one streaming step: 32 elements, one 64-byte store */
static inline void fx_f32_to_bf16_stream32(const float *src, uint16_t *dst)
{
    __m256i h0 = fx_bf16_block16(src), h1 = fx_bf16_block16(src + 16);
    _mm512_stream_si512((void *)dst, _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1));
}

#define FX_CS_NAME fx_cvt_f32_to_bf16_avx512bf16
#define FX_CS_SRC float
#define FX_CS_DST uint16_t
#define FX_CS_CACHED fx_f32_to_bf16_cached
#define FX_CS_LINE 64
#define FX_CS_STEP 32
#define FX_CS_STREAM fx_f32_to_bf16_stream32
#include "../core/cvt_stream_tmpl.h"
