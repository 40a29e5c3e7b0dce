/* AVX2 reduction kernel of the shared-exponent formats: sum (a training step's bias gradients,
 * the loss's batch sums). It produces exactly the int64 values of the definition in
 * intops_scalar.c: integer additions have no rounding, so only their order differs. Before
 * it, AVX2 machines ran the scalar definition, about 3 % of a flex16_5 CNN epoch. The threads'
 * share of the work is src/flex/sum_drive.c's. */
#include "flex_kernels.h"

#include <immintrin.h>


/* Sum of n contiguous int16: vpmaddwd against ones adds pairs into int32 lanes (each step adds
 * at most 2^16 in magnitude per lane), widened to int64 every FX_SUM_FLUSH steps, long before
 * a lane could reach 2^31. A tail of fewer than 16 values is added in scalar code. */
#define FX_SUM_FLUSH 16384
static int64_t fx_sum_row_i16(const int16_t *x, int64_t n)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i total = _mm256_setzero_si256(); /* 4 int64 lanes */
    int64_t i = 0;
    while (i + 16 <= n) {
        __m256i acc = _mm256_setzero_si256();
        for (int64_t steps = 0; steps < FX_SUM_FLUSH && i + 16 <= n; steps++, i += 16)
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(x + i)), ones));
        total = _mm256_add_epi64(total, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(acc)));
        total = _mm256_add_epi64(total, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(acc, 1)));
    }
    int64_t lanes[4] __attribute__((aligned(32)));
    _mm256_store_si256((__m256i *)lanes, total);
    int64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    for (; i < n; i++) s += x[i];
    return s;
}

/* dst[0..w) = sum over k < len of src[k * inner + 0..w), w <= 8: two int64 vectors of 4. */
static void fx_sum_cols8(const int16_t *src, int64_t len, int64_t inner, int64_t *dst, int w)
{
    __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
    if (w == 8) {
        for (int64_t k = 0; k < len; k++) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(src + k * inner));
            lo = _mm256_add_epi64(lo, _mm256_cvtepi16_epi64(v));
            hi = _mm256_add_epi64(hi, _mm256_cvtepi16_epi64(_mm_srli_si128(v, 8)));
        }
        _mm256_storeu_si256((__m256i *)dst, lo);
        _mm256_storeu_si256((__m256i *)(dst + 4), hi);
        return;
    }
    for (int j = 0; j < w; j++) dst[j] = 0; /* a narrow tail: the definition's loop */
    for (int64_t k = 0; k < len; k++)
        for (int j = 0; j < w; j++) dst[j] += src[k * inner + j];
}

/* out[0..inner) = the column sums of rows [0, len) of src (row stride inner), 8 columns at a
 * time (fx_sum_rows_fn) */
static void fx_sum_cols_avx2(const int16_t *src, int64_t len, int64_t inner, int64_t *out)
{
    for (int64_t i = 0; i < inner; i += 8)
        fx_sum_cols8(src + i, len, inner, out + i, inner - i >= 8 ? 8 : (int)(inner - i));
}

int fx_flex_sum_avx2(const fx_op_call *c)
{
    return fx_flex_sum_drive(c, fx_sum_row_i16, fx_sum_cols_avx2);
}
