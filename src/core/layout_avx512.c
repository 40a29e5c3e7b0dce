/* AVX-512 matrix transposes for the layout changes around convolution GEMMs
 * (fx_chunk_scatter_t: a chunk's pixel-major GEMM output to NCHW). Shuffles move bits
 * unchanged, so the results equal the portable loops' for any data; only the speed differs
 * (the portable loops move one element per load/store pair). */
#include "backend.h"
#include "lanes_avx512.h"
#include "layout_kernels.h"
#include "transpose_avx512.h"

#include <immintrin.h>

/* 8 x 8 transpose of 64-bit elements: r[i] row i in, column i out. Interleave row pairs,
 * then two rounds of 128-bit lane gathers. */
static inline void fx_transpose8x8_epi64(__m512i r[8])
{
    __m512i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm512_unpacklo_epi64(r[2 * i], r[2 * i + 1]);     /* cols 0,2,4,6 */
        t[2 * i + 1] = _mm512_unpackhi_epi64(r[2 * i], r[2 * i + 1]); /* cols 1,3,5,7 */
    }
    for (int h = 0; h < 2; h++) { /* rows 0-3 (h = 0) and 4-7 (h = 1) */
        const __m512i *tt = t + 4 * h;
        u[4 * h + 0] = _mm512_shuffle_i64x2(tt[0], tt[2], 0x88); /* cols 0, 4 */
        u[4 * h + 1] = _mm512_shuffle_i64x2(tt[0], tt[2], 0xDD); /* cols 2, 6 */
        u[4 * h + 2] = _mm512_shuffle_i64x2(tt[1], tt[3], 0x88); /* cols 1, 5 */
        u[4 * h + 3] = _mm512_shuffle_i64x2(tt[1], tt[3], 0xDD); /* cols 3, 7 */
    }
    r[0] = _mm512_shuffle_i64x2(u[0], u[4], 0x88);
    r[4] = _mm512_shuffle_i64x2(u[0], u[4], 0xDD);
    r[2] = _mm512_shuffle_i64x2(u[1], u[5], 0x88);
    r[6] = _mm512_shuffle_i64x2(u[1], u[5], 0xDD);
    r[1] = _mm512_shuffle_i64x2(u[2], u[6], 0x88);
    r[5] = _mm512_shuffle_i64x2(u[2], u[6], 0xDD);
    r[3] = _mm512_shuffle_i64x2(u[3], u[7], 0x88);
    r[7] = _mm512_shuffle_i64x2(u[3], u[7], 0xDD);
}

/* dst[j*rows + i] = src[i*cols + j], 64-bit elements, in 8 x 8 register tiles (masked at the
 * edges only: nothing outside the two matrices is read or written, and whole tiles take plain
 * loads and stores, which on the Zen 5 cost less than masked ones on every row). */
void fx_transpose64_avx512(const void *srcv, void *dstv, int64_t rows, int64_t cols)
{
    const int64_t *src = srcv;
    int64_t *dst = dstv;
    for (int64_t i0 = 0; i0 < rows; i0 += 8) {
        const int nr = rows - i0 < 8 ? (int)(rows - i0) : 8;
        const __mmask8 rmask = (__mmask8)((1u << nr) - 1);
        for (int64_t j0 = 0; j0 < cols; j0 += 8) {
            const int nc = cols - j0 < 8 ? (int)(cols - j0) : 8;
            const __mmask8 cmask = (__mmask8)((1u << nc) - 1);
            __m512i r[8];
            for (int i = 0; i < 8; i++)
                r[i] = i < nr ? fx_load_q8(src + (i0 + i) * cols + j0, cmask)
                              : _mm512_setzero_si512();
            fx_transpose8x8_epi64(r);
            for (int j = 0; j < nc; j++) fx_store_q8(dst + (j0 + j) * rows + i0, rmask, r[j]);
        }
    }
}

/* The same for 32-bit elements, in 16 x 16 tiles. */
void fx_transpose32_avx512(const void *srcv, void *dstv, int64_t rows, int64_t cols)
{
    const float *src = srcv; /* bits only: shuffles never interpret them */
    float *dst = dstv;
    for (int64_t i0 = 0; i0 < rows; i0 += 16) {
        const int nr = rows - i0 < 16 ? (int)(rows - i0) : 16;
        const __mmask16 rmask = (__mmask16)((1u << nr) - 1);
        for (int64_t j0 = 0; j0 < cols; j0 += 16) {
            const int nc = cols - j0 < 16 ? (int)(cols - j0) : 16;
            const __mmask16 cmask = (__mmask16)((1u << nc) - 1);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < nr ? fx_load_d16(src + (i0 + i) * cols + j0, cmask) : _mm512_setzero_ps();
            fx_transpose16x16_ps(r);
            for (int j = 0; j < nc; j++) fx_store_d16(dst + (j0 + j) * rows + i0, rmask, r[j]);
        }
    }
}

/* The same for 16-bit elements, in tiles of 8 rows x 32 columns: within each 128-bit lane
 * (8 columns) three rounds of unpacks (16-, 32-, then 64-bit) make an 8 x 8 transpose, after
 * which lane L of vector j holds column 8L + j of the 8 rows, stored as 16 bytes. */
void fx_transpose16_avx512(const void *srcv, void *dstv, int64_t rows, int64_t cols)
{
    const int16_t *src = srcv;
    int16_t *dst = dstv;
    for (int64_t i0 = 0; i0 < rows; i0 += 8) {
        const int nr = rows - i0 < 8 ? (int)(rows - i0) : 8;
        const __mmask8 rmask = (__mmask8)((1u << nr) - 1);
        for (int64_t j0 = 0; j0 < cols; j0 += 32) {
            const int nc = cols - j0 < 32 ? (int)(cols - j0) : 32;
            const __mmask32 cmask = nc == 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << nc) - 1);
            __m512i r[8], a[8], b[8], c[8];
            for (int i = 0; i < 8; i++)
                r[i] = i < nr ? fx_load_w32(src + (i0 + i) * cols + j0, cmask)
                              : _mm512_setzero_si512();
            for (int i = 0; i < 4; i++) { /* row pairs: (r2i[c], r2i+1[c]) */
                a[2 * i] = _mm512_unpacklo_epi16(r[2 * i], r[2 * i + 1]);     /* cols 0-3 */
                a[2 * i + 1] = _mm512_unpackhi_epi16(r[2 * i], r[2 * i + 1]); /* cols 4-7 */
            }
            for (int h = 0; h < 2; h++) { /* rows 0-3 (h = 0), 4-7 (h = 1): 4 rows per column */
                const __m512i *aa = a + 4 * h;
                b[4 * h + 0] = _mm512_unpacklo_epi32(aa[0], aa[2]); /* cols 0, 1 */
                b[4 * h + 1] = _mm512_unpackhi_epi32(aa[0], aa[2]); /* cols 2, 3 */
                b[4 * h + 2] = _mm512_unpacklo_epi32(aa[1], aa[3]); /* cols 4, 5 */
                b[4 * h + 3] = _mm512_unpackhi_epi32(aa[1], aa[3]); /* cols 6, 7 */
            }
            for (int k = 0; k < 4; k++) { /* all 8 rows of columns 2k and 2k + 1 */
                c[2 * k] = _mm512_unpacklo_epi64(b[k], b[4 + k]);
                c[2 * k + 1] = _mm512_unpackhi_epi64(b[k], b[4 + k]);
            }
            for (int j = 0; j < 8; j++) {
                const __m128i l0 = _mm512_castsi512_si128(c[j]);
                const __m128i l1 = _mm512_extracti32x4_epi32(c[j], 1);
                const __m128i l2 = _mm512_extracti32x4_epi32(c[j], 2);
                const __m128i l3 = _mm512_extracti32x4_epi32(c[j], 3);
                if (nr == 8 && nc == 32) { /* a whole tile: plain stores */
                    _mm_storeu_si128((__m128i *)(dst + (j0 + j) * rows + i0), l0);
                    _mm_storeu_si128((__m128i *)(dst + (j0 + 8 + j) * rows + i0), l1);
                    _mm_storeu_si128((__m128i *)(dst + (j0 + 16 + j) * rows + i0), l2);
                    _mm_storeu_si128((__m128i *)(dst + (j0 + 24 + j) * rows + i0), l3);
                    continue;
                }
                if (j < nc) _mm_mask_storeu_epi16(dst + (j0 + j) * rows + i0, rmask, l0);
                if (8 + j < nc) _mm_mask_storeu_epi16(dst + (j0 + 8 + j) * rows + i0, rmask, l1);
                if (16 + j < nc) _mm_mask_storeu_epi16(dst + (j0 + 16 + j) * rows + i0, rmask, l2);
                if (24 + j < nc) _mm_mask_storeu_epi16(dst + (j0 + 24 + j) * rows + i0, rmask, l3);
            }
        }
    }
}
