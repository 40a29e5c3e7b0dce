/* Bulk fp32 <-> bf16 conversion kernels, one per ISA level. Declarations only (no
 * intrinsics), so that tests and benchmarks can name every kernel directly.
 *
 * Every kernel gives exactly the bits of the scalar definitions fx_f32_to_bf16 and
 * fx_bf16_to_f32 (src/bf16/bf16_scalar.c), for any length n >= 0 and any (unaligned)
 * pointers, and never touches src[n..] or dst[n..]. A kernel may only be called on a CPU that
 * has its ISA: *_avx2 needs AVX2, *_avx512 needs AVX-512 F/BW/VL, *_avx512bf16 needs those
 * plus AVX512_BF16 (vcvtneps2bf16). */
#ifndef FX_BF16_KERNELS_H
#define FX_BF16_KERNELS_H

#include <stdint.h>

void fx_cvt_f32_to_bf16_scalar(const float *src, uint16_t *dst, int64_t n);
void fx_cvt_bf16_to_f32_scalar(const uint16_t *src, float *dst, int64_t n);

void fx_cvt_f32_to_bf16_avx2(const float *src, uint16_t *dst, int64_t n);
void fx_cvt_bf16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n);

void fx_cvt_f32_to_bf16_avx512(const float *src, uint16_t *dst, int64_t n);
void fx_cvt_bf16_to_f32_avx512(const uint16_t *src, float *dst, int64_t n);

/* vcvtneps2bf16 with lane fix-ups (NaN, subnormal inputs) so the bits match the definition. */
void fx_cvt_f32_to_bf16_avx512bf16(const float *src, uint16_t *dst, int64_t n);

#endif
