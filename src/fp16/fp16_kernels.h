/* Bulk fp32 <-> fp16 conversion kernels, one pair per ISA level. Declarations only (no
 * intrinsics), so that tests and benchmarks can name every kernel directly.
 *
 * Every kernel gives exactly the bits of the scalar definitions fx_f32_to_fp16 and
 * fx_fp16_to_f32 (src/fp16/fp16_scalar.c), for any length n >= 0 and any (unaligned)
 * pointers, and never touches src[n..] or dst[n..]. A kernel may only be called on a CPU that
 * has its ISA: *_avx2 needs AVX2 + F16C, *_avx512 needs AVX-512 F/BW/VL. */
#ifndef FX_FP16_KERNELS_H
#define FX_FP16_KERNELS_H

#include <stdint.h>

void fx_cvt_f32_to_fp16_scalar(const float *src, uint16_t *dst, int64_t n);
void fx_cvt_fp16_to_f32_scalar(const uint16_t *src, float *dst, int64_t n);

void fx_cvt_f32_to_fp16_avx2(const float *src, uint16_t *dst, int64_t n);
void fx_cvt_fp16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n);

void fx_cvt_f32_to_fp16_avx512(const float *src, uint16_t *dst, int64_t n);
void fx_cvt_fp16_to_f32_avx512(const uint16_t *src, float *dst, int64_t n);

#endif
