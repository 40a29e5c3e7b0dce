/* Bulk fp32 <-> fp16 conversion kernels, one pair per ISA level. Declarations only (no
 * intrinsics), so that tests and benchmarks can name every kernel directly.
 *
 * Every kernel gives exactly the bits of the scalar definitions fx_f32_to_fp16 and
 * fx_fp16_to_f32 (src/fp16/fp16_scalar.c), for any length n >= 0 and any (unaligned) pointers,
 * and never touches src[n..] or dst[n..]. Large outputs are written with streaming stores (see
 * FX_CVT_STREAM_MIN_BYTES), followed by an sfence before returning. A kernel may only be called
 * on a CPU that has its ISA: *_avx2 needs AVX2 + F16C, *_avx512 needs AVX-512 F/BW/VL. */
#ifndef FX_FP16_KERNELS_H
#define FX_FP16_KERNELS_H

#include <stdint.h>

/* Destination size (bytes) from which the SIMD kernels write with streaming (non-temporal)
 * stores, as memcpy does past its non-temporal threshold: a normal store first reads the line
 * it writes (read-for-ownership), which costs a third to a half of the bandwidth of a large
 * conversion. Below this size the output is likely to be used again from the cache (it fits in
 * half of a typical last-level cache), so normal stores are kept. Tests use it to reach the
 * streaming path. */
#ifndef FX_CVT_STREAM_MIN_BYTES
#define FX_CVT_STREAM_MIN_BYTES ((int64_t)16 << 20)
#endif

void fx_cvt_f32_to_fp16_scalar(const float *src, uint16_t *dst, int64_t n);
void fx_cvt_fp16_to_f32_scalar(const uint16_t *src, float *dst, int64_t n);

void fx_cvt_f32_to_fp16_avx2(const float *src, uint16_t *dst, int64_t n);
void fx_cvt_fp16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n);

void fx_cvt_f32_to_fp16_avx512(const float *src, uint16_t *dst, int64_t n);
void fx_cvt_fp16_to_f32_avx512(const uint16_t *src, float *dst, int64_t n);

#endif
