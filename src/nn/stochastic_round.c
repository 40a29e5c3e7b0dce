/* Stochastic rounding onto the fp16/bf16 grids; see stochastic_round.h.
 *
 * Why integers: |x| = M * 2^k exactly, with M the 24-bit significand (implicit bit included)
 * and k its weight, and the target grid step at x is 2^g. The kept part is M >> (g - k) and the
 * discarded fraction is the low (g - k) bits of M, read as a binary fraction. Working on those
 * bits makes the probability of rounding up exactly the fraction, with no floating-point
 * rounding anywhere, and handles normal numbers, subnormals of both formats and fp32
 * subnormals with one formula. */
#include "stochastic_round.h"

#include "../flex/flex_math.h"
#include "../gpu/gpu_nn_math.h" /* fx_sr_round_hd: the one definition, shared with CUDA */

float fx_sr_round(fmt_t fmt, float x, uint64_t bits)
{
    if (fmt == FMT_FP16 || fmt == FMT_BF16) return fx_sr_round_hd(fmt == FMT_FP16, x, bits);
    return x; /* fp32 holds every fp32 value; shared-exponent formats round in the write path */
}

void fx_sr_round_array(fmt_t fmt, float *vals, int64_t n, uint64_t seed, uint64_t counter)
{
    if (fmt != FMT_FP16 && fmt != FMT_BF16) return;
    const int fp16 = fmt == FMT_FP16;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(flexpoint_num_threads()) if (n >= (1 << 17))
#endif
    for (int64_t i = 0; i < n; i++)
        vals[i] = fx_sr_round_hd(fp16, vals[i], fx_rng_u64(seed, counter, (uint64_t)i));
}
