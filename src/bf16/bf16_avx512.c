/* fp32 <-> bf16 bulk conversions on 16-lane AVX-512 integer vectors.
 *
 * Same integer rounding as the definition (bf16_scalar.c), NaN lanes fixed under a mask,
 * vpmovdw to narrow, and masked loads and stores for the tail so no byte outside [0, n) is
 * touched (the 16-bit masked forms need AVX-512BW and VL). Outputs of FX_CVT_STREAM_MIN_BYTES
 * or more are written with streaming stores, by the driver both levels share
 * (src/core/cvt_stream_tmpl.h).
 *
 * The per-vector code is not bf16_avx2.c's at twice the width: AVX2 has no mask registers, no
 * 32-to-16-bit narrowing (vpmovdw) and no 16-bit masked stores, so there NaN lanes are fixed by
 * a blend only in blocks that hold one, the halves are narrowed with packus plus a permute, and
 * tails of fewer than 8 elements take the scalar definition.
 *
 * Where the CPU has AVX512_BF16 the level installs the vcvtneps2bf16 path (bf16_avx512bf16.c)
 * for fp32 -> bf16 instead (src/cpu/avx512.c). */
#include "../core/backend.h"
#include "bf16_kernels.h"
#include "bf16_round_avx512.h"

#include <immintrin.h>

static inline __mmask16 fx_tail_mask16(int64_t r) { return (__mmask16)((1u << r) - 1u); }

static void fx_f32_to_bf16_cached(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i h0 = fx_bf16_round16_bits(_mm512_loadu_si512(src + i));
        __m256i h1 = fx_bf16_round16_bits(_mm512_loadu_si512(src + i + 16));
        _mm256_storeu_si256((__m256i *)(dst + i), h0);
        _mm256_storeu_si256((__m256i *)(dst + i + 16), h1);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : fx_tail_mask16(n - i);
        __m256i h = fx_bf16_round16_bits(_mm512_maskz_loadu_epi32(k, src + i));
        _mm256_mask_storeu_epi16(dst + i, k, h);
    }
}

/* one streaming step: 32 elements, one 64-byte store */
static inline void fx_f32_to_bf16_stream32(const float *src, uint16_t *dst)
{
    __m256i h0 = fx_bf16_round16_bits(_mm512_loadu_si512(src));
    __m256i h1 = fx_bf16_round16_bits(_mm512_loadu_si512(src + 16));
    _mm512_stream_si512((void *)dst, _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1));
}

#define FX_CS_NAME fx_cvt_f32_to_bf16_avx512
#define FX_CS_SRC float
#define FX_CS_DST uint16_t
#define FX_CS_CACHED fx_f32_to_bf16_cached
#define FX_CS_LINE 64
#define FX_CS_STEP 32
#define FX_CS_STREAM fx_f32_to_bf16_stream32
#include "../core/cvt_stream_tmpl.h"

static inline __m512i fx_bf16_widen16(__m256i h)
{
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
}

static void fx_bf16_to_f32_cached(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i f0 = fx_bf16_widen16(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m512i f1 = fx_bf16_widen16(_mm256_loadu_si256((const __m256i *)(src + i + 16)));
        _mm512_storeu_si512(dst + i, f0);
        _mm512_storeu_si512(dst + i + 16, f1);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : fx_tail_mask16(n - i);
        __m512i f = fx_bf16_widen16(_mm256_maskz_loadu_epi16(k, src + i));
        _mm512_mask_storeu_epi32(dst + i, k, f);
    }
}

/* one streaming step: 16 elements, one 64-byte store */
static inline void fx_bf16_to_f32_stream16(const uint16_t *src, float *dst)
{
    _mm512_stream_si512((void *)dst,
                        fx_bf16_widen16(_mm256_loadu_si256((const __m256i *)src)));
}

#define FX_CS_NAME fx_cvt_bf16_to_f32_avx512
#define FX_CS_SRC uint16_t
#define FX_CS_DST float
#define FX_CS_CACHED fx_bf16_to_f32_cached
#define FX_CS_LINE 64
#define FX_CS_STEP 16
#define FX_CS_STREAM fx_bf16_to_f32_stream16
#include "../core/cvt_stream_tmpl.h"
