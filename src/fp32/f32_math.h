/* Element-wise math kernels (FX_OP_UNARY, FX_OP_UNARY_BACKWARD): the fp32 cores of exp, log,
 * tanh, erf/erfc and the functions built on them, one definition for every ISA level.
 *
 * The arithmetic is written once, in f32_math_impl.h, against a small set of vector
 * operations (add, mul, fma, div, sqrt, compares, selects, bit operations, an 8-entry table
 * lookup). f32_math.c instantiates it with plain floats (fmaf, fma from libm), and
 * f32_math_avx2.c / f32_math_avx512.c with 8- and 16-lane registers. Every operation is an
 * IEEE operation rounded to nearest even, done in the same order on every level, and FMA is
 * used everywhere (never a separate multiply and add where the other level fuses), so the
 * three levels give the same bits for every input: float and shared-exponent outputs are
 * therefore identical across backends and thread counts (the kernels split the work into
 * fixed chunks of independent elements). The bounds below hold on every level.
 *
 * Error bounds in fp32, in units in the last place of the exact result (on the fp32 grid, so
 * below 2^-126 one unit is 2^-149), held on every fp32 input (the maxima measured over all
 * 2^32 inputs, the command and the references are in docs/math.md):
 *   exp 1, log 1, sqrt 0.5, rsqrt 1, reciprocal 0.5, square 0.5, tanh 1.5, sigmoid 2.5,
 *   silu 3.5, gelu_tanh 3.5, gelu 4, erf 2, erfc 2.5, pow 0.5 + 2^-16 (binary64 inside);
 *   clamp and abs are exact.
 * The tests assert these bounds (tests/unary_common.h). Backward functions (dy * f'(x)) take
 * a few more roundings each; docs/math.md states the tolerance they are tested to.
 *
 * Assumes the default floating-point environment (round to nearest, no FTZ/DAZ), as the
 * rest of the fp32 code does.
 */
#ifndef FX_FP32_MATH_H
#define FX_FP32_MATH_H

#include "core/backend.h"

#include <stdint.h>

/* The FX_OP_UNARY / FX_OP_UNARY_BACKWARD kernel of each level (fp32 operands): registered for
 * FMT_FP32; fp16, bf16 and shared-exponent operands reach it widened or dequantised by the
 * dispatcher. FX_EINVAL for a function it does not know. */
int fx_f32_k_unary_scalar(const fx_op_call *c);
int fx_f32_k_unary_avx2(const fx_op_call *c);
int fx_f32_k_unary_avx512(const fx_op_call *c);

/* The same arithmetic on plain arrays, single-threaded (tests and measurements):
 * y[i] = f(x[i]) when dy is NULL, else y[i] = dy[i] * f'(x[i]) for fn (an fx_unary_fn; erf
 * and erfc have no backward). p: the parameters of clamp (lo, hi) and pow (p); may be NULL for
 * other functions. y may equal x or dy. FX_OK, or FX_EINVAL for an unknown fn. The avx2 and
 * avx512 versions run only on CPUs with those instruction sets. */
int fx_f32_math_scalar(int fn, const double *p, const float *x, const float *dy, float *y,
                       int64_t n);
int fx_f32_math_avx2(int fn, const double *p, const float *x, const float *dy, float *y,
                     int64_t n);
int fx_f32_math_avx512(int fn, const double *p, const float *x, const float *dy, float *y,
                       int64_t n);

/* Elements from which the kernels use several threads (in fixed chunks of FX_F32_EW_CHUNK):
 * the functions cost tens of cycles an element, so threads pay off much earlier than for the
 * memory-bound element-wise ops (FX_F32_EW_MIN_PARALLEL). */
#define FX_F32_MATH_MIN_PARALLEL (1 << 15)

#endif
