/* Stochastic rounding of fp32 values onto the fp16 and bf16 grids (docs/formats.md, "Stochastic
 * rounding"), for the optimisers' in-place updates of 16-bit weights. FLEX16_5/DFP16 have their
 * own stochastic rounding in the write path (tensor_set_rounding); these functions cover the
 * float formats, which the write path always rounds to nearest even. */
#ifndef FX_NN_STOCHASTIC_ROUND_H
#define FX_NN_STOCHASTIC_ROUND_H

#include "flexpoint.h"

#include <stdint.h>

/* x rounded to a neighbouring value of the fmt grid (FMT_FP16 or FMT_BF16), returned as an
 * fp32 value that the format represents exactly (so a following round-to-nearest write stores
 * it unchanged). With the discarded fraction f of x (its distance to the lower-magnitude
 * neighbour, in units of the grid step there), the magnitude is rounded up iff bits < f * 2^64:
 * with uniform bits that is probability f, exactly (f has at most 64 significant bits except
 * far below the format's smallest subnormal, where it is truncated to 64 bits: an error of at
 * most 2^-64 in the probability). Equivalently: add 64 random bits below the kept precision
 * and truncate.
 * The sign is kept (-0 for negative values that round to zero); values on the grid, +-0, +-Inf
 * and NaN are returned unchanged; a magnitude that rounds up past the largest finite value
 * becomes +-Inf, as the next grid point would lie at 2^16 (fp16) or 2^128 (bf16). */
float fx_sr_round(fmt_t fmt, float x, uint64_t bits);

/* In place over vals[0..n): element i uses fx_rng_u64(seed, counter, i), so the result depends
 * only on (seed, counter, index), never on threads or backends. */
void fx_sr_round_array(fmt_t fmt, float *vals, int64_t n, uint64_t seed, uint64_t counter);

#endif
