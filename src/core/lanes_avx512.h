/* Loads and stores of a vector's first lanes under a mask, taking the plain instruction where
 * the mask is whole. Why: loops over whole tensors that masked every vector (the mask being
 * all ones but for the last) ran several percent of a training step slower on a Zen 5 than with
 * plain loads and stores on whole vectors, although a hot-cache loop shows both at one rate
 * (docs/performance.md). Masked-off lanes load as 0 and are not stored. With a constant whole
 * mask the test folds away. Include only from files compiled with the AVX-512 flags. */
#ifndef FX_CORE_LANES_AVX512_H
#define FX_CORE_LANES_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#define FX_LANES_INLINE static inline __attribute__((always_inline))

/* 16 16-bit lanes (256 bits) */
FX_LANES_INLINE __m256i fx_load_w16(const void *p, __mmask16 m)
{
    return m == 0xFFFF ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(m, p);
}

FX_LANES_INLINE void fx_store_w16(void *p, __mmask16 m, __m256i v)
{
    if (m == 0xFFFF)
        _mm256_storeu_si256((__m256i *)p, v);
    else
        _mm256_mask_storeu_epi16(p, m, v);
}

/* 32 16-bit lanes (512 bits) */
FX_LANES_INLINE __m512i fx_load_w32(const void *p, __mmask32 m)
{
    return m == 0xFFFFFFFFu ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(m, p);
}

FX_LANES_INLINE void fx_store_w32(void *p, __mmask32 m, __m512i v)
{
    if (m == 0xFFFFFFFFu)
        _mm512_storeu_si512(p, v);
    else
        _mm512_mask_storeu_epi16(p, m, v);
}

/* 16 32-bit lanes, as floats (any 32-bit elements: the bits move unchanged) */
FX_LANES_INLINE __m512 fx_load_d16(const void *p, __mmask16 m)
{
    return m == 0xFFFF ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

FX_LANES_INLINE void fx_store_d16(void *p, __mmask16 m, __m512 v)
{
    if (m == 0xFFFF)
        _mm512_storeu_ps(p, v);
    else
        _mm512_mask_storeu_ps(p, m, v);
}

/* 8 64-bit lanes */
FX_LANES_INLINE __m512i fx_load_q8(const void *p, __mmask8 m)
{
    return m == 0xFF ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi64(m, p);
}

FX_LANES_INLINE void fx_store_q8(void *p, __mmask8 m, __m512i v)
{
    if (m == 0xFF)
        _mm512_storeu_si512(p, v);
    else
        _mm512_mask_storeu_epi64(p, m, v);
}

/* p's int64 lanes under m become v, or v plus what they held (add); returns what was stored
 * (the accumulate-and-store of the integer tiles' int64 outputs) */
FX_LANES_INLINE __m512i fx_store_add_q8(int64_t *p, __mmask8 m, __m512i v, int add)
{
    if (add) v = _mm512_add_epi64(v, fx_load_q8(p, m));
    fx_store_q8(p, m, v);
    return v;
}

#undef FX_LANES_INLINE

#endif
