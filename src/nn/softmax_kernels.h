/* SIMD softmax rows (fx_cvt_table.exp_f32, softmax_row_f32, softmax_backward_row_f32): the
 * bits of the portable definition in softmax_def.h. Declarations only (no intrinsics); the
 * *_avx2 functions (softmax_avx2.c) may only run on a CPU with AVX2 and FMA, the *_avx512
 * ones (softmax_avx512.c) on one with AVX-512 F/DQ. */
#ifndef FX_NN_SOFTMAX_KERNELS_H
#define FX_NN_SOFTMAX_KERNELS_H

#include <stdint.h>

void fx_exp_f32_avx2(const float *x, float *y, int64_t n);
void fx_softmax_row_f32_avx2(const float *x, float *y, int64_t len, int logsm, float *rmax,
                             int64_t *rbad);
void fx_softmax_backward_row_f32_avx2(const float *g, const float *y, float *dx, int64_t len,
                                      int logsm);

void fx_exp_f32_avx512(const float *x, float *y, int64_t n);
void fx_softmax_row_f32_avx512(const float *x, float *y, int64_t len, int logsm, float *rmax,
                               int64_t *rbad);
void fx_softmax_backward_row_f32_avx512(const float *g, const float *y, float *dx, int64_t len,
                                        int logsm);

#endif
