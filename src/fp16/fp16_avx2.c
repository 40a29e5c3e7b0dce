/* fp32 <-> fp16 bulk conversions with F16C, 8 lanes per instruction (AVX2 level).
 *
 * vcvtps2ph with an immediate rounding mode (round to nearest even, MXCSR.RC not consulted)
 * gives the definition's bits for every finite value and Inf: it ignores MXCSR.FTZ, so fp16
 * subnormal results are kept, and an fp32 subnormal input (which DAZ may read as zero) rounds
 * to a signed zero either way. The one difference is NaN: the instruction keeps the top payload
 * bits, while the definition gives sign | 0x7E00. NaN lanes are rewritten after the conversion.
 *
 * vcvtph2ps is exact and ignores MXCSR.DAZ, but it quiets signalling NaNs (sets fraction bit
 * 22). The definition keeps the bits, so the quiet bit is cleared again on lanes whose input
 * was a signalling NaN.
 *
 * Both fix-ups are detected on 16 lanes at a time and applied only when a block holds such a
 * lane (never, in ordinary data), which keeps the common path short enough to run at cache
 * speed. Outputs of FX_CVT_STREAM_MIN_BYTES or more are written with streaming stores, by the
 * driver both levels share (src/core/cvt_stream_tmpl.h). A tail (fewer than 8 elements) is
 * one more vector step through copies on the stack: AVX2 has no 16-bit masked loads, and the
 * scalar definition's branches per element were half a per cent of an fp16 CNN step on a Zen 3
 * (padded rows of 28 values, widened row by row). */
#include "../core/backend.h"
#include "fp16_kernels.h"
#include "fp16_round_avx2.h"

#include <immintrin.h>
#include <string.h>

#define FX_RNE _MM_FROUND_TO_NEAREST_INT /* imm8 rounding, MXCSR.RC ignored */

static inline __m256i fx_f32_to_fp16_16(const float *src)
{
    __m128i lo = _mm256_cvtps_ph(_mm256_loadu_ps(src), FX_RNE);
    __m128i hi = _mm256_cvtps_ph(_mm256_loadu_ps(src + 8), FX_RNE);
    __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    __m256i mag = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
    __m256i is_nan = _mm256_cmpgt_epi16(mag, _mm256_set1_epi16(0x7C00));
    if (!_mm256_testz_si256(is_nan, is_nan)) {
        __m256i canon = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16((short)0x8000)),
                                        _mm256_set1_epi16(0x7E00));
        h = _mm256_blendv_epi8(h, canon, is_nan);
    }
    return h;
}

/* Whole vectors from src/dst as they are, then the tail. */
static void fx_f32_to_fp16_cached(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), fx_f32_to_fp16_16(src + i));
    if (i + 8 <= n) {
        _mm_storeu_si128((__m128i *)(dst + i), fx_f32_to_fp16_8(_mm256_loadu_ps(src + i)));
        i += 8;
    }
    if (i < n) { /* the tail as one vector through copies (fx_f32_to_fp16_8: the same bits) */
        float t[8] = {0};
        uint16_t h[8];
        memcpy(t, src + i, (size_t)(n - i) * sizeof *t);
        _mm_storeu_si128((__m128i *)h, fx_f32_to_fp16_8(_mm256_loadu_ps(t)));
        memcpy(dst + i, h, (size_t)(n - i) * sizeof *h);
    }
}

/* one streaming step: 16 elements, one 32-byte store */
static inline void fx_f32_to_fp16_stream16(const float *src, uint16_t *dst)
{
    _mm256_stream_si256((__m256i *)dst, fx_f32_to_fp16_16(src));
}

#define FX_CS_NAME fx_cvt_f32_to_fp16_avx2
#define FX_CS_SRC float
#define FX_CS_DST uint16_t
#define FX_CS_CACHED fx_f32_to_fp16_cached
#define FX_CS_LINE 32
#define FX_CS_STEP 16
#define FX_CS_STREAM fx_f32_to_fp16_stream16
#include "../core/cvt_stream_tmpl.h"

/* fp32 images of 8 halves; lanes flagged in is_snan (16-bit lanes, all ones) get their quiet
 * bit 0x00400000 cleared again. */
static inline __m256 fx_fp16_to_f32_8(__m128i h, __m128i is_snan, int fix)
{
    __m256 f = _mm256_cvtph_ps(h);
    if (fix) {
        __m256i quiet = _mm256_and_si256(_mm256_cvtepi16_epi32(is_snan),
                                         _mm256_set1_epi32(0x00400000));
        f = _mm256_castsi256_ps(_mm256_andnot_si256(quiet, _mm256_castps_si256(f)));
    }
    return f;
}

/* Signalling NaN halves: magnitude in (0x7C00, 0x7E00), i.e. NaN with the quiet bit clear. */
static inline __m128i fx_fp16_snan8(__m128i h)
{
    __m128i mag = _mm_and_si128(h, _mm_set1_epi16(0x7FFF));
    return _mm_and_si128(_mm_cmpgt_epi16(mag, _mm_set1_epi16(0x7C00)),
                         _mm_cmpgt_epi16(_mm_set1_epi16(0x7E00), mag));
}

static inline void fx_fp16_to_f32_16(const uint16_t *src, __m256 *f0, __m256 *f1)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)src);
    __m256i mag = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
    __m256i is_snan = _mm256_and_si256(_mm256_cmpgt_epi16(mag, _mm256_set1_epi16(0x7C00)),
                                       _mm256_cmpgt_epi16(_mm256_set1_epi16(0x7E00), mag));
    int fix = !_mm256_testz_si256(is_snan, is_snan);
    *f0 = fx_fp16_to_f32_8(_mm256_castsi256_si128(h), _mm256_castsi256_si128(is_snan), fix);
    *f1 = fx_fp16_to_f32_8(_mm256_extracti128_si256(h, 1), _mm256_extracti128_si256(is_snan, 1),
                           fix);
}

static void fx_fp16_to_f32_cached(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 f0, f1;
        fx_fp16_to_f32_16(src + i, &f0, &f1);
        _mm256_storeu_ps(dst + i, f0);
        _mm256_storeu_ps(dst + i + 8, f1);
    }
    if (i + 8 <= n) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        _mm256_storeu_ps(dst + i, fx_fp16_to_f32_8(h, fx_fp16_snan8(h), 1));
        i += 8;
    }
    if (i < n) { /* the tail as one vector through copies */
        uint16_t t[8] = {0};
        float f[8];
        memcpy(t, src + i, (size_t)(n - i) * sizeof *t);
        const __m128i h = _mm_loadu_si128((const __m128i *)t);
        _mm256_storeu_ps(f, fx_fp16_to_f32_8(h, fx_fp16_snan8(h), 1));
        memcpy(dst + i, f, (size_t)(n - i) * sizeof *f);
    }
}

/* one streaming step: 16 elements, two 32-byte stores */
static inline void fx_fp16_to_f32_stream16(const uint16_t *src, float *dst)
{
    __m256 f0, f1;
    fx_fp16_to_f32_16(src, &f0, &f1);
    _mm256_stream_ps(dst, f0);
    _mm256_stream_ps(dst + 8, f1);
}

#define FX_CS_NAME fx_cvt_fp16_to_f32_avx2
#define FX_CS_SRC uint16_t
#define FX_CS_DST float
#define FX_CS_CACHED fx_fp16_to_f32_cached
#define FX_CS_LINE 32
#define FX_CS_STEP 16
#define FX_CS_STREAM fx_fp16_to_f32_stream16
#include "../core/cvt_stream_tmpl.h"
