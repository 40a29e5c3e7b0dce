/* fp32 <-> bf16 bulk conversions on 8-lane AVX2 integer vectors.
 *
 * The rounding is the definition's own integer arithmetic (bf16_scalar.c) done lane-wise:
 * add 0x7FFF plus the lowest kept bit, keep the high half; NaN lanes become sign | 0x7FC0.
 * Being integer-only, it is independent of MXCSR. No bf16 instruction exists at this level.
 * NaN lanes are detected per block of 16 and fixed only when present (never, in ordinary
 * data). Outputs of FX_CVT_STREAM_MIN_BYTES or more are written with streaming stores, by the
 * driver both levels share (src/core/cvt_stream_tmpl.h). Tails (fewer than 8 elements) go
 * through the scalar definition (bf16_avx512.c says why its per-vector code differs). */
#include "../core/backend.h"
#include "bf16_kernels.h"
#include "bf16_round_avx2.h"

#include <immintrin.h>

/* 16 fp32 -> 16 bf16 in order. */
static inline __m256i fx_f32_to_bf16_16(const float *src)
{
    __m256i u0 = _mm256_loadu_si256((const __m256i *)src);
    __m256i u1 = _mm256_loadu_si256((const __m256i *)(src + 8));
    __m256i r0 = fx_bf16_round8(u0), r1 = fx_bf16_round8(u1);
    __m256i n0 = fx_bf16_nan_lanes8(u0), n1 = fx_bf16_nan_lanes8(u1);
    __m256i any = _mm256_or_si256(n0, n1);
    if (!_mm256_testz_si256(any, any)) {
        r0 = fx_bf16_fix_nan8(r0, u0, n0);
        r1 = fx_bf16_fix_nan8(r1, u1, n1);
    }
    /* packus works within 128-bit halves: [r0 0-3, r1 0-3, r0 4-7, r1 4-7]; the 64-bit
     * permute puts the quarters back in order. Values are <= 0xFFFF: no saturation. */
    __m256i p = _mm256_packus_epi32(r0, r1);
    return _mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0));
}

static void fx_f32_to_bf16_cached(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), fx_f32_to_bf16_16(src + i));
    if (i + 8 <= n) {
        _mm_storeu_si128((__m128i *)(dst + i),
                         fx_bf16_round8_bits(_mm256_loadu_si256((const __m256i *)(src + i))));
        i += 8;
    }
    fx_cvt_f32_to_bf16_scalar(src + i, dst + i, n - i);
}

/* one streaming step: 16 elements, one 32-byte store */
static inline void fx_f32_to_bf16_stream16(const float *src, uint16_t *dst)
{
    _mm256_stream_si256((__m256i *)dst, fx_f32_to_bf16_16(src));
}

#define FX_CS_NAME fx_cvt_f32_to_bf16_avx2
#define FX_CS_SRC float
#define FX_CS_DST uint16_t
#define FX_CS_CACHED fx_f32_to_bf16_cached
#define FX_CS_LINE 32
#define FX_CS_STEP 16
#define FX_CS_STREAM fx_f32_to_bf16_stream16
#include "../core/cvt_stream_tmpl.h"

static inline __m256i fx_bf16_widen8(const uint16_t *src)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)src));
    return _mm256_slli_epi32(w, 16);
}

static void fx_bf16_to_f32_cached(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_si256((__m256i *)(dst + i), fx_bf16_widen8(src + i));
        _mm256_storeu_si256((__m256i *)(dst + i + 8), fx_bf16_widen8(src + i + 8));
    }
    if (i + 8 <= n) {
        _mm256_storeu_si256((__m256i *)(dst + i), fx_bf16_widen8(src + i));
        i += 8;
    }
    fx_cvt_bf16_to_f32_scalar(src + i, dst + i, n - i);
}

/* one streaming step: 8 elements, one 32-byte store */
static inline void fx_bf16_to_f32_stream8(const uint16_t *src, float *dst)
{
    _mm256_stream_si256((__m256i *)dst, fx_bf16_widen8(src));
}

#define FX_CS_NAME fx_cvt_bf16_to_f32_avx2
#define FX_CS_SRC uint16_t
#define FX_CS_DST float
#define FX_CS_CACHED fx_bf16_to_f32_cached
#define FX_CS_LINE 32
#define FX_CS_STEP 8
#define FX_CS_STREAM fx_bf16_to_f32_stream8
#include "../core/cvt_stream_tmpl.h"
