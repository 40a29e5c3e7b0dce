/* SIMD 2x2 / stride-2 max pooling of one plane (fx_cvt_table.maxpool2x2_i16/f32): the values
 * and argmax indices of the portable plane loop (src/nn/pool.c). Declarations only (no
 * intrinsics); fx_maxpool2x2_f32_avx2 (pool_avx2.c) may only run on a CPU with AVX2, the
 * *_avx512 functions (pool_avx512.c) on one with AVX-512 F/BW/VL. */
#ifndef FX_NN_POOL_KERNELS_H
#define FX_NN_POOL_KERNELS_H

#include <stdint.h>

void fx_maxpool2x2_f32_avx2(const float *x, int64_t x_base, int64_t W, int64_t OH, int64_t OW,
                            float *out, int32_t *idx);
/* the same of one fp16 (fp16 != 0) or bf16 plane, out in x's format (NaN as the format's quiet
 * NaN with its sign): fx_cvt_table.maxpool2x2_half */
void fx_maxpool2x2_half_avx2(const uint16_t *x, int64_t x_base, int64_t W, int64_t OH,
                             int64_t OW, uint16_t *out, int32_t *idx, int fp16);
void fx_maxpool2x2_i16_avx512(const int16_t *x, int64_t x_base, int64_t W, int64_t OH,
                              int64_t OW, int16_t *out, int32_t *idx);
void fx_maxpool2x2_i16_avx2(const int16_t *x, int64_t x_base, int64_t W, int64_t OH, int64_t OW,
                            int16_t *out, int32_t *idx);
void fx_maxpool2x2_f32_avx512(const float *x, int64_t x_base, int64_t W, int64_t OH,
                              int64_t OW, float *out, int32_t *idx);

/* the max-pool gradient's 2x2 scatter of one plane (fx_cvt_table.maxunpool2x2_u16) */
int fx_maxunpool2x2_u16_avx512(const uint16_t *dy, const int32_t *idx, int64_t lo, int64_t H,
                               int64_t W, int64_t OH, int64_t OW, int half, uint16_t inf,
                               uint16_t qnan, uint16_t *dst, int32_t *mx);
int fx_maxunpool2x2_u16_avx2(const uint16_t *dy, const int32_t *idx, int64_t lo, int64_t H,
                             int64_t W, int64_t OH, int64_t OW, int half, uint16_t inf,
                             uint16_t qnan, uint16_t *dst, int32_t *mx);

/* the fp32 max-pool gradient's 2x2 scatter of one plane (fx_cvt_table.maxunpool2x2_f32) */
int fx_maxunpool2x2_f32_avx512(const float *dy, const int32_t *idx, int64_t lo, int64_t H,
                               int64_t W, int64_t OH, int64_t OW, float *dst);
int fx_maxunpool2x2_f32_avx2(const float *dy, const int32_t *idx, int64_t lo, int64_t H,
                             int64_t W, int64_t OH, int64_t OW, float *dst);

#endif
