/* SIMD matrix transposes (fx_cvt_table.transpose16/32/64) of the AVX2 and AVX-512 levels
 * (layout_avx2.c, layout_avx512.c): dst[j*rows + i] = src[i*cols + j], bits moved unchanged, so
 * the results equal the portable loops' (src/nn/im2col.c) for any data. Declarations only (no
 * intrinsics); an *_avx2 function may only run on a CPU with AVX2, an *_avx512 one with AVX-512
 * F/BW/VL. */
#ifndef FX_CORE_LAYOUT_KERNELS_H
#define FX_CORE_LAYOUT_KERNELS_H

#include <stdint.h>

void fx_transpose16_avx2(const void *srcv, void *dstv, int64_t rows, int64_t cols);
void fx_transpose32_avx2(const void *srcv, void *dstv, int64_t rows, int64_t cols);

void fx_transpose16_avx512(const void *srcv, void *dstv, int64_t rows, int64_t cols);
void fx_transpose32_avx512(const void *srcv, void *dstv, int64_t rows, int64_t cols);
void fx_transpose64_avx512(const void *srcv, void *dstv, int64_t rows, int64_t cols);

#endif
