/* The fp16/bf16 same-shape add of half_binary.c in registers on AVX2 (F16C for fp16), eight
 * elements a step: widen both operands (exact), one fp32 add with the fp32 kernels' NaN rule (a
 * NaN first operand survives, quieted), the format's rounding by its definition
 * (fp16_round_avx2.h, bf16_round_avx2.h), then the epilogue on the bits (half_bits.h's rules:
 * the ReLU, or the ReLU gradient's gate). The same bits as the chunk route, which widens each
 * operand into an fp32 buffer, adds, narrows into a 16-bit buffer and applies the epilogue, five
 * passes over L1 per chunk (the AVX-512 level's half_binary_avx512.c says what that cost). AVX2
 * has no 16-bit masked loads: the last step (fewer than eight elements) goes through copies on
 * the stack, so nothing outside [0, n) is touched; out may be a itself (each vector of a is
 * read before the same vector of out is written). */
#include "../bf16/bf16_round_avx2.h"
#include "../fp16/fp16_round_avx2.h"
#include "half_binary.h"

#include <immintrin.h>
#include <string.h>

static inline __attribute__((always_inline)) __m256 widen8(__m128i h, const int BF)
{
    if (BF) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* x + y where x is not NaN, else x quieted (fx_f32_nan_first) */
static inline __attribute__((always_inline)) __m256 add_nan_first(__m256 x, __m256 y)
{
    const __m256i ux = _mm256_castps_si256(x);
    const __m256i x_nan = _mm256_cmpgt_epi32(_mm256_and_si256(ux, _mm256_set1_epi32(0x7FFFFFFF)),
                                             _mm256_set1_epi32(0x7F800000));
    const __m256 q = _mm256_castsi256_ps(_mm256_or_si256(ux, _mm256_set1_epi32(0x00400000)));
    return _mm256_blendv_ps(_mm256_add_ps(x, y), q, _mm256_castsi256_ps(x_nan));
}

/* all-ones 16-bit lanes where a pattern is positive: sign clear, nonzero, at most +Inf (as a
 * signed number: in (0, inf]) */
static inline __attribute__((always_inline)) __m128i positive8(__m128i h, const int BF)
{
    const __m128i inf = _mm_set1_epi16(BF ? 0x7F80 : 0x7C00);
    return _mm_andnot_si128(_mm_cmpgt_epi16(h, inf), _mm_cmpgt_epi16(h, _mm_setzero_si128()));
}

/* tensor_relu's rule: kept where positive or NaN. Positive NaNs are above 0 as signed numbers
 * too, so "above 0, or a magnitude above +Inf" covers both. */
static inline __attribute__((always_inline)) __m128i relu_keep8(__m128i h, const int BF)
{
    const __m128i inf = _mm_set1_epi16(BF ? 0x7F80 : 0x7C00);
    const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7FFF)), inf);
    return _mm_or_si128(_mm_cmpgt_epi16(h, _mm_setzero_si128()), nan);
}

/* one vector of eight */
static inline __attribute__((always_inline)) __m128i add8(__m128i a, __m128i b, __m128i gate,
                                                         const int BF, const int KIND)
{
    const __m256 r = add_nan_first(widen8(a, BF), widen8(b, BF));
    __m128i h = BF ? fx_bf16_round8_bits(_mm256_castps_si256(r)) : fx_f32_to_fp16_8(r);
    /* the roundings above already give NaN lanes the canonical pattern that the epilogue's
     * rules keep */
    if (KIND == FX_HALF_ADD_RELU) h = _mm_and_si128(h, relu_keep8(h, BF));
    else if (KIND == FX_HALF_ADD_GATE) h = _mm_and_si128(h, positive8(gate, BF));
    return h;
}

static inline __attribute__((always_inline)) void add_rows(const uint16_t *a, const uint16_t *b,
                                                          const uint16_t *gate, uint16_t *out,
                                                          int64_t n, const int BF, const int KIND)
{
    const int G = KIND == FX_HALF_ADD_GATE;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i g = G ? _mm_loadu_si128((const __m128i *)(gate + i)) : _mm_setzero_si128();
        const __m128i h = add8(_mm_loadu_si128((const __m128i *)(a + i)),
                               _mm_loadu_si128((const __m128i *)(b + i)), g, BF, KIND);
        _mm_storeu_si128((__m128i *)(out + i), h);
    }
    if (i < n) {
        uint16_t ta[8] = {0}, tb[8] = {0}, tg[8] = {0}, to[8];
        const size_t bytes = sizeof(uint16_t) * (size_t)(n - i);
        memcpy(ta, a + i, bytes);
        memcpy(tb, b + i, bytes);
        if (G) memcpy(tg, gate + i, bytes);
        _mm_storeu_si128((__m128i *)to, add8(_mm_loadu_si128((const __m128i *)ta),
                                             _mm_loadu_si128((const __m128i *)tb),
                                             _mm_loadu_si128((const __m128i *)tg), BF, KIND));
        memcpy(out + i, to, bytes);
    }
}

FX_HALF_ADD_ENTRY(fx_half_add_avx2)
