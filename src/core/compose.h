/* Building blocks for composite ops (convolution, pooling, losses, optimisers, layers):
 * they read inputs into the compute format, run kernels into stages, and write results
 * through the one write path, exactly as the simple ops do. */
#ifndef FX_CORE_COMPOSE_H
#define FX_CORE_COMPOSE_H

#include "dispatch.h"

/* 1 if an op whose first input is t computes on integers (FLEX16_5/DFP16), else 0. */
int fx_is_int_compute(const tensor_t *t);

/* Contiguous fp32 copy of all of t (row-major), allocated in s. */
int fx_read_f32(const tensor_t *t, float **out, fx_scratch *s, const char *func);

/* Contiguous int16 mantissas of a FLEX16_5/DFP16 tensor (or of a float tensor quantised at its
 * exact exponent), read-only: t's own storage where it is contiguous, else a copy allocated in
 * s; *exp receives the exponent. The caller must be done reading before anything writes t. */
int fx_read_i16(const tensor_t *t, const int16_t **out, int *exp, fx_scratch *s,
                const char *func);

/* Write all of out from fp32 values / exact int64 values at exponent exp (one write:
 * rounding, exponent choice, statistics, as tensor_from_f32). */
int fx_write_f32(tensor_t *out, const float *vals, const char *func);
int fx_write_i64(tensor_t *out, const int64_t *vals, int exp, const char *func);
/* fx_write_f32 when the producer already has the statistics of the write's scan of vals: max =
 * the largest finite |vals[i]| and nonfinite = the count of NaN and Inf (as
 * fx_flex_maxabs_f32_scalar gives them). A shared-exponent write then skips that pass. */
int fx_write_f32_max(tensor_t *out, const float *vals, float max, int64_t nonfinite,
                     const char *func);
/* fx_write_i64 when the producer already knows imax = max |vals[i]| (computed while the values
 * were in cache): the write path then skips its own pass for the exponent. */
int fx_write_i64_max(tensor_t *out, const int64_t *vals, int exp, uint64_t imax,
                     const char *func);
/* Write all of out from int16 mantissas at exponent exp: for outputs that select or mask their
 * input's mantissas (relu, max-pooling and their gradients), which need no int64 stage. The
 * result is that of fx_write_i64 on the same values widened; _max as fx_write_i64_max. */
int fx_write_i16(tensor_t *out, const int16_t *vals, int exp, const char *func);
int fx_write_i16_max(tensor_t *out, const int16_t *vals, int exp, uint64_t imax,
                     const char *func);
/* Write all of out (FP16 or BF16) from patterns of its own format, as they are: for outputs
 * that select their input's values, made with src/core/half_bits.h so that they equal the
 * fp32 route's (a float write rounds a widened 16-bit value back to itself, NaN aside). */
int fx_write_half_bits(tensor_t *out, const uint16_t *bits, const char *func);

/* memcpy of `bytes` bytes between buffers that do not overlap, in pieces of 256 KiB shared by
 * the library's threads (a copy of megabytes on one thread is a serial part of a step). */
void fx_parallel_copy(void *dst, const void *src, size_t bytes);
/* out's own elements when an op may build its 16-bit patterns there directly (out FP16/BF16,
 * on the host, contiguous, sharing storage with none of the n inputs), else NULL. Passing that
 * buffer to fx_write_half_bits then copies nothing. */
uint16_t *fx_half_direct(tensor_t *out, const tensor_t *const *in, int n);
/* max |vals[i]| (one thread). */
uint64_t fx_maxabs_i16(const int16_t *vals, int64_t n);
/* max |vals[i]| with backend be's kernel, or the portable loop (one thread: for the write
 * path's chunks and for producers on theirs). */
uint64_t fx_maxabs_i64(const fx_backend *be, const int64_t *vals, int64_t n);

/* out[M,N] = a[M,K] x b[K,N] with the active backend's matmul kernel: fp32 operands into
 * out_f32 (int_compute 0), or int16 operands into exact int64 out_i64 at *out_exp. Operands
 * carry their own strides, so transposes are free. */
int fx_matmul_stage(const fx_operand *a, const fx_operand *b, int int_compute, float *out_f32,
                    int64_t *out_i64, int *out_exp, const char *func);
/* out_f32[M,N] = a[M,K] x b[K,N] for float operands of format fmt (FMT_FP32, or FMT_BF16 for
 * the bf16 MATMUL kernel of the route in use, the one tensor_matmul of bf16 tensors runs) on
 * nthreads threads (1: no parallel region of its own, for callers that run several products
 * at once). */
int fx_matmul_float(const fx_operand *a, const fx_operand *b, fmt_t fmt, float *out_f32,
                    int nthreads, const char *func);
/* The same, with an fp16/bf16 destination out_h16 ([M, N], row stride N) that the kernel may
 * fill itself by cvt (fx_op_call.out_h16), then setting *done; where it does not (*done 0),
 * the fp32 results are in out_f32 as above. */
int fx_matmul_float_h16(const fx_operand *a, const fx_operand *b, fmt_t fmt, float *out_f32,
                        uint16_t *out_h16, void (*cvt)(const float *, uint16_t *, int64_t),
                        int *done, int nthreads, const char *func);
/* fx_matmul_stage of int16 operands on nthreads threads (1: no parallel region of its own),
 * the exact sums into out_i64 ([M, N], at exponent a.exp + b.exp) and their largest |value|
 * into *imax, reported by the kernel or, where it does not, taken by a pass over out_i64. */
int fx_matmul_i64_max(const fx_operand *a, const fx_operand *b, int64_t *out_i64, int nthreads,
                      uint64_t *imax, const char *func);

/* The int16 product of fx_matmul_i64_max rounded by the level's kernel (fx_op_call.out_i16;
 * AMX in registers, the register tiles from a column in cache): only where the active level's
 * gemm.i16_rounds(M, K, N) said yes and fx_q64_fast_ok(shift). The sums
 * rounded to nearest even at 2^shift into out ([M, N], contiguous), their largest |value|
 * into *imax and their underflows added to *nuf; the values are valid only where *imax <=
 * fx_q64_fast_bound(shift) (nothing saturated). */
int fx_matmul_i16_rounded(const fx_operand *a, const fx_operand *b, int16_t *out, int shift,
                          int nthreads, uint64_t *imax, int64_t *nuf, const char *func);

/* A 2-D operand over a contiguous buffer: rows x cols with row stride ld (elements).
 * trans != 0 describes the transpose of that buffer (cols x rows) without copying. */
fx_operand fx_operand_2d(const void *data, int int_compute, int exp, int64_t rows, int64_t cols,
                         int64_t ld, int trans);

#endif
