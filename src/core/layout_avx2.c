/* AVX2 matrix transposes for the layout changes around convolution GEMMs
 * (fx_chunk_scatter_t: a chunk's pixel-major GEMM output to NCHW), as layout_avx512.c does for
 * AVX-512. Shuffles move bits unchanged, so the results equal the portable loops' for any
 * data. Whole 8 x 8 tiles go through registers; the edge rows and columns (fewer than 8) take
 * the element loop, so nothing outside the two matrices is read or written. */
#include "backend.h"
#include "layout_kernels.h"
#include "transpose_avx2.h"

#include <immintrin.h>

/* dst[j*rows + i] = src[i*cols + j] for i in [i0, i1), j in [j0, j1): one element at a time. */
#define FX_EDGE_LOOP(T)                                                                          \
    for (int64_t i = i0; i < i1; i++)                                                            \
        for (int64_t j = j0; j < j1; j++) ((T *)dstv)[j * rows + i] = ((const T *)srcv)[i * cols + j]

void fx_transpose32_avx2(const void *srcv, void *dstv, int64_t rows, int64_t cols)
{
    const float *src = srcv; /* bits only: shuffles never interpret them */
    float *dst = dstv;
    const int64_t rf = rows / 8 * 8, cf = cols / 8 * 8; /* the whole tiles */
    for (int64_t i0 = 0; i0 < rf; i0 += 8)
        for (int64_t j0 = 0; j0 < cf; j0 += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + (i0 + i) * cols + j0);
            fx_transpose8x8_ps(r);
            for (int j = 0; j < 8; j++) _mm256_storeu_ps(dst + (j0 + j) * rows + i0, r[j]);
        }
    int64_t i0 = 0, i1 = rf, j0 = cf, j1 = cols; /* the right edge of the tiled rows */
    FX_EDGE_LOOP(uint32_t);
    i0 = rf, i1 = rows, j0 = 0, j1 = cols; /* the bottom rows */
    FX_EDGE_LOOP(uint32_t);
}

/* 16-bit elements: 8 x 8 tiles of 8 rows of one 128-bit vector each, transposed by three
 * rounds of unpacks (16-, 32-, then 64-bit interleaves). */
void fx_transpose16_avx2(const void *srcv, void *dstv, int64_t rows, int64_t cols)
{
    const int16_t *src = srcv;
    int16_t *dst = dstv;
    const int64_t rf = rows / 8 * 8, cf = cols / 8 * 8;
    for (int64_t i0 = 0; i0 < rf; i0 += 8)
        for (int64_t j0 = 0; j0 < cf; j0 += 8) {
            __m128i r[8], a[8], b[8];
            for (int i = 0; i < 8; i++)
                r[i] = _mm_loadu_si128((const __m128i *)(src + (i0 + i) * cols + j0));
            for (int i = 0; i < 4; i++) { /* row pairs 2i, 2i+1 */
                a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);     /* cols 0-3 */
                a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]); /* cols 4-7 */
            }
            for (int h = 0; h < 2; h++) { /* rows 0-3 (h = 0), 4-7 (h = 1): 4 rows per column */
                const __m128i *aa = a + 4 * h;
                b[4 * h + 0] = _mm_unpacklo_epi32(aa[0], aa[2]); /* cols 0, 1 */
                b[4 * h + 1] = _mm_unpackhi_epi32(aa[0], aa[2]); /* cols 2, 3 */
                b[4 * h + 2] = _mm_unpacklo_epi32(aa[1], aa[3]); /* cols 4, 5 */
                b[4 * h + 3] = _mm_unpackhi_epi32(aa[1], aa[3]); /* cols 6, 7 */
            }
            for (int k = 0; k < 4; k++) { /* all 8 rows of columns 2k and 2k + 1 */
                _mm_storeu_si128((__m128i *)(dst + (j0 + 2 * k) * rows + i0),
                                 _mm_unpacklo_epi64(b[k], b[4 + k]));
                _mm_storeu_si128((__m128i *)(dst + (j0 + 2 * k + 1) * rows + i0),
                                 _mm_unpackhi_epi64(b[k], b[4 + k]));
            }
        }
    int64_t i0 = 0, i1 = rf, j0 = cf, j1 = cols;
    FX_EDGE_LOOP(uint16_t);
    i0 = rf, i1 = rows, j0 = 0, j1 = cols;
    FX_EDGE_LOOP(uint16_t);
}
