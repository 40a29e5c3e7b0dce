/* cvt.round_odd_i64 (round_odd.c: fx_rshift_jam) in four int64 lanes, as floor(v / 2^k) with
 * its last bit set where inexact (the same odd neighbour): AVX2 has no 64-bit
 * arithmetic shift, so the logical shift takes the sign's bits from a compare, and the eight
 * low dwords of two vectors are gathered into one store. */
#include "flex_kernels.h"

#include <immintrin.h>
#include <stdint.h>

int fx_flex_round_odd_i64_avx2(const int64_t *src, int32_t *dst, int64_t n, int k)
{
    const __m128i cnt = _mm_cvtsi32_si128(k), fill = _mm_cvtsi32_si128(64 - k);
    const __m256i low = _mm256_set1_epi64x((int64_t)(((uint64_t)1 << k) - 1));
    const __m256i one = _mm256_set1_epi64x(1), zero = _mm256_setzero_si256();
    const __m256i top = _mm256_set1_epi64x(INT32_MAX), bottom = _mm256_set1_epi64x(INT32_MIN);
    const __m256i gather = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    __m256i out_of_range = zero;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i half[2];
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(src + i + 4 * h));
            const __m256i sign = _mm256_cmpgt_epi64(zero, v);
            __m256i q = _mm256_or_si256(_mm256_srl_epi64(v, cnt), _mm256_sll_epi64(sign, fill));
            const __m256i exact = _mm256_cmpeq_epi64(_mm256_and_si256(v, low), zero);
            q = _mm256_or_si256(q, _mm256_andnot_si256(exact, one));
            out_of_range = _mm256_or_si256(out_of_range,
                                           _mm256_or_si256(_mm256_cmpgt_epi64(q, top),
                                                           _mm256_cmpgt_epi64(bottom, q)));
            half[h] = _mm256_permutevar8x32_epi32(q, gather); /* its low dwords first */
        }
        _mm256_storeu_si256((__m256i *)(void *)(dst + i),
                            _mm256_permute2x128_si256(half[0], half[1], 0x20));
    }
    const int fits = _mm256_testz_si256(out_of_range, out_of_range);
    return fx_flex_round_odd_i64_scalar(src + i, dst + i, n - i, k) && fits;
}
