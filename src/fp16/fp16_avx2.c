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
 * Tails (fewer than 8 elements) go through the scalar definition. */
#include "../core/backend.h"
#include "fp16_kernels.h"

#include <immintrin.h>

/* NaN lanes of a vcvtps2ph result -> sign | 0x7E00. A NaN result is any pattern whose
 * magnitude is above the Inf pattern 0x7C00. */
static inline __m128i fx_fp16_canonical_nan8(__m128i h)
{
    __m128i mag = _mm_and_si128(h, _mm_set1_epi16(0x7FFF));
    __m128i is_nan = _mm_cmpgt_epi16(mag, _mm_set1_epi16(0x7C00));
    __m128i canon = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16((short)0x8000)),
                                 _mm_set1_epi16(0x7E00));
    return _mm_blendv_epi8(h, canon, is_nan);
}

static inline void fx_f32_to_fp16_8(const float *src, uint16_t *dst)
{
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128((__m128i *)dst, fx_fp16_canonical_nan8(h));
}

void fx_cvt_f32_to_fp16_avx2(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        fx_f32_to_fp16_8(src + i, dst + i);
        fx_f32_to_fp16_8(src + i + 8, dst + i + 8);
    }
    if (i + 8 <= n) {
        fx_f32_to_fp16_8(src + i, dst + i);
        i += 8;
    }
    fx_cvt_f32_to_fp16_scalar(src + i, dst + i, n - i);
}

static inline void fx_fp16_to_f32_8(const uint16_t *src, float *dst)
{
    __m128i h = _mm_loadu_si128((const __m128i *)src);
    __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
    /* Signalling NaN inputs: magnitude in (0x7C00, 0x7E00), i.e. NaN with the quiet bit 0x200
     * clear. Their fp32 results get the quiet bit 0x00400000 cleared again. */
    __m128i mag = _mm_and_si128(h, _mm_set1_epi16(0x7FFF));
    __m128i is_snan = _mm_and_si128(_mm_cmpgt_epi16(mag, _mm_set1_epi16(0x7C00)),
                                    _mm_cmpgt_epi16(_mm_set1_epi16(0x7E00), mag));
    __m256i quiet_bit = _mm256_and_si256(_mm256_cvtepi16_epi32(is_snan),
                                         _mm256_set1_epi32(0x00400000));
    f = _mm256_andnot_si256(quiet_bit, f);
    _mm256_storeu_si256((__m256i *)dst, f);
}

void fx_cvt_fp16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        fx_fp16_to_f32_8(src + i, dst + i);
        fx_fp16_to_f32_8(src + i + 8, dst + i + 8);
    }
    if (i + 8 <= n) {
        fx_fp16_to_f32_8(src + i, dst + i);
        i += 8;
    }
    fx_cvt_fp16_to_f32_scalar(src + i, dst + i, n - i);
}

void fx_register_fp16_avx2(fx_backend *b, const fx_cpu_features *cpu)
{
    if (!(cpu->avx2 && cpu->f16c)) return; /* keep the inherited (scalar) entries */
    b->cvt.f32_to_fp16 = fx_cvt_f32_to_fp16_avx2;
    b->cvt.fp16_to_f32 = fx_cvt_fp16_to_f32_avx2;
}
