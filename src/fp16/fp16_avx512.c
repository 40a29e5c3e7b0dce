/* fp32 <-> fp16 bulk conversions with AVX-512F vcvtps2ph / vcvtph2ps on 16 lanes.
 *
 * Same instructions as the AVX2 path (see fp16_avx2.c for why their bits match the definition
 * apart from NaNs), with the NaN fix-ups done under mask registers, and masked loads and stores
 * for the tail so no byte outside [0, n) is touched. Mask compares on 16-bit lanes and the
 * 16-bit masked store need AVX-512BW and VL. Outputs of FX_CVT_STREAM_MIN_BYTES or more are
 * written with streaming stores, by the driver both levels share (src/core/cvt_stream_tmpl.h).
 *
 * The per-vector code is not fp16_avx2.c's at twice the width: AVX2 has neither mask registers
 * nor 16-bit masked stores, so there the NaN fix-up is a blend applied only to blocks that hold
 * a NaN, and tails of fewer than 8 elements take the scalar definition; here the fix-up is one
 * masked move on every block and a tail is one masked step. */
#include "../core/backend.h"
#include "fp16_kernels.h"
#include "fp16_round_avx512.h"

#include <immintrin.h>

static inline __mmask16 fx_tail_mask16(int64_t r) { return (__mmask16)((1u << r) - 1u); }

static void fx_f32_to_fp16_cached(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i h0 = fx_f32_to_fp16_16(_mm512_loadu_ps(src + i));
        __m256i h1 = fx_f32_to_fp16_16(_mm512_loadu_ps(src + i + 16));
        _mm256_storeu_si256((__m256i *)(dst + i), h0);
        _mm256_storeu_si256((__m256i *)(dst + i + 16), h1);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : fx_tail_mask16(n - i);
        __m256i h = fx_f32_to_fp16_16(_mm512_maskz_loadu_ps(k, src + i));
        _mm256_mask_storeu_epi16(dst + i, k, h);
    }
}

/* one streaming step: 32 elements, one 64-byte store */
static inline void fx_f32_to_fp16_stream32(const float *src, uint16_t *dst)
{
    __m256i h0 = fx_f32_to_fp16_16(_mm512_loadu_ps(src));
    __m256i h1 = fx_f32_to_fp16_16(_mm512_loadu_ps(src + 16));
    _mm512_stream_si512((void *)dst, _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1));
}

#define FX_CS_NAME fx_cvt_f32_to_fp16_avx512
#define FX_CS_SRC float
#define FX_CS_DST uint16_t
#define FX_CS_CACHED fx_f32_to_fp16_cached
#define FX_CS_LINE 64
#define FX_CS_STEP 32
#define FX_CS_STREAM fx_f32_to_fp16_stream32
#include "../core/cvt_stream_tmpl.h"

/* vcvtph2ps on 16 lanes; signalling NaN inputs get the quiet bit cleared again. */
static inline __m512 fx_fp16_to_f32_16(__m256i h)
{
    __m512i f = _mm512_castps_si512(_mm512_cvtph_ps(h));
    __m256i mag = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
    __mmask16 is_snan = _mm256_cmpgt_epi16_mask(mag, _mm256_set1_epi16(0x7C00)) &
                        _mm256_cmplt_epi16_mask(mag, _mm256_set1_epi16(0x7E00));
    f = _mm512_mask_andnot_epi32(f, is_snan, _mm512_set1_epi32(0x00400000), f);
    return _mm512_castsi512_ps(f);
}

static void fx_fp16_to_f32_cached(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 f0 = fx_fp16_to_f32_16(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m512 f1 = fx_fp16_to_f32_16(_mm256_loadu_si256((const __m256i *)(src + i + 16)));
        _mm512_storeu_ps(dst + i, f0);
        _mm512_storeu_ps(dst + i + 16, f1);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : fx_tail_mask16(n - i);
        __m512 f = fx_fp16_to_f32_16(_mm256_maskz_loadu_epi16(k, src + i));
        _mm512_mask_storeu_ps(dst + i, k, f);
    }
}

/* one streaming step: 16 elements, one 64-byte store */
static inline void fx_fp16_to_f32_stream16(const uint16_t *src, float *dst)
{
    _mm512_stream_ps(dst, fx_fp16_to_f32_16(_mm256_loadu_si256((const __m256i *)src)));
}

#define FX_CS_NAME fx_cvt_fp16_to_f32_avx512
#define FX_CS_SRC uint16_t
#define FX_CS_DST float
#define FX_CS_CACHED fx_fp16_to_f32_cached
#define FX_CS_LINE 64
#define FX_CS_STEP 16
#define FX_CS_STREAM fx_fp16_to_f32_stream16
#include "../core/cvt_stream_tmpl.h"
