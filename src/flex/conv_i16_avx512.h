/* The int32 chains of the exact int16 direct convolutions (conv_i16_avx512.c, forward;
 * conv_i16_wgrad_avx512.c, weight gradient), AVX512_VNNI. Include only from files compiled with
 * the AVX-512 flags.
 *
 * A lane of vpdpwssd sums is exact while every partial sum stays inside int32. The kernels cut
 * their chains where a Cauchy-Schwarz bound of the products still to come could leave it, and
 * fold each lane there, as the GEMM's fast kernel does (src/flex/gemm_i16.h): hi += s >> 16,
 * s &= 0xFFFF. A chain then starts from a lane in [0, 2^16), its bounds sum to at most
 * FX_I16_CHAIN_LIMIT, so it ends inside int32, and the sum is 2^16 hi + s at the end. */
#ifndef FX_FLEX_CONV_I16_AVX512_H
#define FX_FLEX_CONV_I16_AVX512_H

#include "conv_i16_direct.h" /* FX_I16_CHAIN_LIMIT, FX_I16_MAX_ROWS */
#include "../core/lanes_avx512.h"

#include <immintrin.h>
#include <stdint.h>

/* fx_ceil_sqrt (gemm_i16.h) of eight lanes below 2^40: the correctly rounded double root,
 * truncated, is exact there, and one comparison of its square makes it the ceiling */
static inline __m256i fx_i16_ceil_sqrt8(__m512i x)
{
    const __m512i r = _mm512_cvttpd_epu64(_mm512_sqrt_pd(_mm512_cvtepu64_pd(x)));
    const __mmask8 up = _mm512_cmplt_epu64_mask(_mm512_mullo_epi64(r, r), x);
    return _mm512_cvtepi64_epi32(_mm512_mask_add_epi64(r, up, r, _mm512_set1_epi64(1)));
}

/* The fold of NV x MR lanes: hi (in memory, 16 int32 per vector) takes the upper bits */
static inline __attribute__((always_inline)) void fx_i16_fold(const int MR, const int NV,
                                                              __m512i acc[][4],
                                                              int32_t (*hi)[4][16])
{
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            const __m512i h = _mm512_load_si512((const void *)hi[r][v]);
            _mm512_store_si512((void *)hi[r][v],
                               _mm512_add_epi32(h, _mm512_srai_epi32(acc[r][v], 16)));
            acc[r][v] = _mm512_and_si512(acc[r][v], low16);
        }
}

/* The sixteen sums 2^16 hi + acc of one vector of lanes as int64, lanes 0-7 in s[0] and 8-15
 * in s[1] */
static inline __attribute__((always_inline)) void fx_i16_sums_of(__m512i acc, const int32_t *hi,
                                                                 __m512i s[2])
{
    const __m512i hv = _mm512_load_si512((const void *)hi);
    for (int h = 0; h < 2; h++) {
        const __m256i a32 = h ? _mm512_extracti64x4_epi64(acc, 1) : _mm512_castsi512_si256(acc);
        const __m256i h32 = h ? _mm512_extracti64x4_epi64(hv, 1) : _mm512_castsi512_si256(hv);
        s[h] = _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(h32), 16),
                                _mm512_cvtepi32_epi64(a32));
    }
}

/* The first `rows` of MR rows of sums 2^16 hi + acc as int64, NV vectors of 16 per row (the last
 * one's lanes under mask last), row r at out + r ldo, or added to what is there (add = 1), or
 * nowhere (add = FX_I16_MAX_ONLY, out unused); returns the largest |sum| of these rows. */
#define FX_I16_MAX_ONLY 2
static inline __attribute__((always_inline)) uint64_t
fx_i16_store_rows(const int MR, const int NV, __m512i acc[][4], int32_t (*hi)[4][16],
                  int64_t *out, int64_t ldo, int rows, __mmask16 last, int add)
{
    __m512i mx = _mm512_setzero_si512();
    for (int r = 0; r < MR && r < rows; r++)
        for (int v = 0; v < NV; v++) {
            const __mmask16 m = v == NV - 1 ? last : (__mmask16)0xFFFF;
            __m512i s[2];
            fx_i16_sums_of(acc[r][v], hi[r][v], s);
            for (int h = 0; h < 2; h++) {
                const __mmask8 mh = (__mmask8)(h ? m >> 8 : m);
                if (add != FX_I16_MAX_ONLY)
                    fx_store_add_q8(out + r * ldo + 16 * v + 8 * h, mh, s[h], add);
                mx = _mm512_mask_max_epu64(mx, mh, mx, _mm512_abs_epi64(s[h]));
            }
        }
    return _mm512_reduce_max_epu64(mx);
}

#endif
