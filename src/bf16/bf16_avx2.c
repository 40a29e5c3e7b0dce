/* fp32 <-> bf16 bulk conversions on 8-lane AVX2 integer vectors.
 *
 * The rounding is the definition's own integer arithmetic (bf16_scalar.c) done lane-wise:
 * add 0x7FFF plus the lowest kept bit, keep the high half; NaN lanes become sign | 0x7FC0.
 * Being integer-only, it is independent of MXCSR. No bf16 instruction exists at this level.
 * Tails (fewer than 8 elements) go through the scalar definition. */
#include "../core/backend.h"
#include "bf16_kernels.h"

#include <immintrin.h>

/* 8 fp32 bit patterns -> 8 bf16 patterns, each in the low half of its 32-bit lane. */
static inline __m256i fx_bf16_round8(__m256i u)
{
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    /* The magnitude fits in 31 bits, so the signed compare is an unsigned one here. */
    __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i is_nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7F800000));
    __m256i canon = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
        _mm256_set1_epi32(0x7FC0));
    return _mm256_blendv_epi8(r, canon, is_nan);
}

void fx_cvt_f32_to_bf16_avx2(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r0 = fx_bf16_round8(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m256i r1 = fx_bf16_round8(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
        /* packus works within 128-bit halves: [r0 0-3, r1 0-3, r0 4-7, r1 4-7]; the 64-bit
         * permute puts the quarters back in order. Values are <= 0xFFFF: no saturation. */
        __m256i p = _mm256_packus_epi32(r0, r1);
        p = _mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
    if (i + 8 <= n) {
        __m256i r = fx_bf16_round8(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128((__m128i *)(dst + i), p);
        i += 8;
    }
    fx_cvt_f32_to_bf16_scalar(src + i, dst + i, n - i);
}

static inline void fx_bf16_to_f32_8(const uint16_t *src, float *dst)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)src));
    _mm256_storeu_si256((__m256i *)dst, _mm256_slli_epi32(w, 16));
}

void fx_cvt_bf16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        fx_bf16_to_f32_8(src + i, dst + i);
        fx_bf16_to_f32_8(src + i + 8, dst + i + 8);
    }
    if (i + 8 <= n) {
        fx_bf16_to_f32_8(src + i, dst + i);
        i += 8;
    }
    fx_cvt_bf16_to_f32_scalar(src + i, dst + i, n - i);
}

void fx_register_bf16_avx2(fx_backend *b, const fx_cpu_features *cpu)
{
    if (!cpu->avx2) return; /* keep the inherited (scalar) entries */
    b->cvt.f32_to_bf16 = fx_cvt_f32_to_bf16_avx2;
    b->cvt.bf16_to_f32 = fx_cvt_bf16_to_f32_avx2;
}
