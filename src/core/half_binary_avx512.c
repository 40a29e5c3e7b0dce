/* The fp16/bf16 same-shape add of half_binary.c in registers, sixteen elements a step: widen
 * both operands (exact), one fp32 add with the fp32 kernels' NaN rule (a NaN first operand
 * survives, quieted), the format's rounding by its definition (fp16_round_avx512.h,
 * bf16_round_avx512.h), then the epilogue on the bits (half_bits.h's rules: the ReLU, or the
 * ReLU gradient's gate). The same bits as the chunk route, which widens each operand into an
 * fp32 buffer, adds, narrows into a 16-bit buffer and applies the epilogue, five passes over
 * L1 per chunk (on a Zen 5 the adds of a bf16 ResNet-20 step took about 6 % of it that way).
 * The last step loads and stores under masks, so nothing outside [0, n) is touched; out may be
 * a itself (each vector of a is read before the same vector of out is written). */
#include "../bf16/bf16_round_avx512.h"
#include "../fp16/fp16_round_avx512.h"
#include "half_binary.h"
#include "lanes_avx512.h"

#include <immintrin.h>

static inline __attribute__((always_inline)) __m512 widen16(__m256i h, const int BF)
{
    if (BF) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* x + y where x is not NaN, else x quieted (fx_f32_nan_first) */
static inline __attribute__((always_inline)) __m512 add_nan_first(__m512 x, __m512 y)
{
    const __m512i ux = _mm512_castps_si512(x);
    const __mmask16 x_nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(ux, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    const __m512 q = _mm512_castsi512_ps(_mm512_or_si512(ux, _mm512_set1_epi32(0x00400000)));
    return _mm512_mask_mov_ps(_mm512_add_ps(x, y), x_nan, q);
}

/* NaN patterns: magnitude above +Inf */
static inline __attribute__((always_inline)) __mmask16 nan16(__m256i h, const int BF)
{
    return _mm256_cmpgt_epu16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7FFF)),
                                   _mm256_set1_epi16(BF ? 0x7F80 : 0x7C00));
}

/* positive patterns: nonzero and at most +Inf, unsigned (a set sign bit is above +Inf) */
static inline __attribute__((always_inline)) __mmask16 positive(__m256i h, const int BF)
{
    const __m256i inf = _mm256_set1_epi16(BF ? 0x7F80 : 0x7C00);
    return _mm256_test_epi16_mask(h, h) & _mm256_cmple_epu16_mask(h, inf);
}

/* one vector of 16 under m (the live lanes: whole vectors take plain loads and stores) */
static inline __attribute__((always_inline)) void add16(const uint16_t *a, const uint16_t *b,
                                                       const uint16_t *gate, uint16_t *out,
                                                       __mmask16 m, const int BF, const int KIND)
{
    const __m512 r = add_nan_first(widen16(fx_load_w16(a, m), BF), widen16(fx_load_w16(b, m), BF));
    __m256i h = BF ? fx_bf16_round16_bits(_mm512_castps_si512(r)) : fx_f32_to_fp16_16(r);
    /* the roundings above already give NaN lanes the canonical pattern (sign | qnan) that the
     * epilogue's rules keep */
    if (KIND == FX_HALF_ADD_RELU)
        h = _mm256_maskz_mov_epi16(positive(h, BF) | nan16(h, BF), h);
    else if (KIND == FX_HALF_ADD_GATE)
        h = _mm256_maskz_mov_epi16(positive(fx_load_w16(gate, m), BF), h);
    fx_store_w16(out, m, h);
}

static inline __attribute__((always_inline)) void add_rows(const uint16_t *a, const uint16_t *b,
                                                          const uint16_t *gate, uint16_t *out,
                                                          int64_t n, const int BF, const int KIND)
{
    const int G = KIND == FX_HALF_ADD_GATE;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) add16(a + i, b + i, G ? gate + i : NULL, out + i, 0xFFFF, BF, KIND);
    if (i < n)
        add16(a + i, b + i, G ? gate + i : NULL, out + i, (__mmask16)((1u << (n - i)) - 1u), BF,
              KIND);
}

FX_HALF_ADD_ENTRY(fx_half_add_avx512)
