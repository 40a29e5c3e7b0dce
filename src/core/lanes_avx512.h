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

/* fx_load_SUF(p, m) and fx_store_SUF(p, m, v) for one vector type: the plain instruction where
 * m is WHOLE, else the masked one. The four variants differ only in their types and
 * instructions, so they are made by one macro. */
#define FX_LANES_PAIR(SUF, VEC, MASK, WHOLE, LOADU, MASKZ_LOAD, STOREU, MASK_STORE)             \
    FX_LANES_INLINE VEC fx_load_##SUF(const void *p, MASK m)                                    \
    {                                                                                          \
        return m == (MASK)(WHOLE) ? LOADU(p) : MASKZ_LOAD(m, p);                               \
    }                                                                                          \
    FX_LANES_INLINE void fx_store_##SUF(void *p, MASK m, VEC v)                                 \
    {                                                                                          \
        if (m == (MASK)(WHOLE))                                                                \
            STOREU(p, v);                                                                      \
        else                                                                                   \
            MASK_STORE(p, m, v);                                                               \
    }

/* w16: 16 16-bit lanes (256 bits); w32: 32 16-bit lanes; d16: 16 32-bit lanes, as floats (any
 * 32-bit elements: the bits move unchanged); q8: 8 64-bit lanes */
FX_LANES_PAIR(w16, __m256i, __mmask16, 0xFFFF, _mm256_loadu_si256, _mm256_maskz_loadu_epi16,
              _mm256_storeu_si256, _mm256_mask_storeu_epi16)
FX_LANES_PAIR(w32, __m512i, __mmask32, 0xFFFFFFFFu, _mm512_loadu_si512, _mm512_maskz_loadu_epi16,
              _mm512_storeu_si512, _mm512_mask_storeu_epi16)
FX_LANES_PAIR(d16, __m512, __mmask16, 0xFFFF, _mm512_loadu_ps, _mm512_maskz_loadu_ps,
              _mm512_storeu_ps, _mm512_mask_storeu_ps)
FX_LANES_PAIR(q8, __m512i, __mmask8, 0xFF, _mm512_loadu_si512, _mm512_maskz_loadu_epi64,
              _mm512_storeu_si512, _mm512_mask_storeu_epi64)

/* n zero bytes at p: 64-byte stores, then the rest in pieces of 32, 16, 8, 4, 2 and 1 bytes.
 * For the padding between the rows of a padded copy, a few bytes (a pixel's pair words at each
 * end of ResNet-20's 3 x 3 rows), where a memset call a row is mostly call: in `perf` of
 * one-thread bf16 ResNet-20 epochs on the model 167 (bf16's copy then through pair planes) the
 * pair copy and memset took 352-369 samples of about 6 k with the calls and 339-344 with these
 * stores; 64-byte masked stores of the same bytes left the copy alone at 369. */
FX_LANES_INLINE void fx_zero_bytes(void *p, int64_t n)
{
    char *d = p;
    for (; n >= 64; n -= 64, d += 64) {
        _mm512_storeu_si512(d, _mm512_setzero_si512());
        __asm__ volatile("" ::: "memory"); /* else GCC makes the loop a memset call again */
    }
    if (n & 32) {
        _mm256_storeu_si256((__m256i *)(void *)d, _mm256_setzero_si256());
        d += 32;
    }
    if (n & 16) {
        _mm_storeu_si128((__m128i *)(void *)d, _mm_setzero_si128());
        d += 16;
    }
    const uint64_t z = 0;
    if (n & 8) {
        __builtin_memcpy(d, &z, 8); /* a fixed size: one move */
        d += 8;
    }
    if (n & 4) {
        __builtin_memcpy(d, &z, 4);
        d += 4;
    }
    if (n & 2) {
        __builtin_memcpy(d, &z, 2);
        d += 2;
    }
    if (n & 1) *d = 0;
}

#undef FX_LANES_PAIR

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
