/* fp16/bf16 values handled as bit patterns by ops that only select values (relu, the relu and
 * max-pool gradients), so that 16-bit inputs need not be widened into an fp32
 * copy and rounded back. Each helper gives exactly what the fp32 route gives: widening is exact,
 * and rounding a widened value back to its own format returns it unchanged, except a NaN,
 * which the conversions (fp16_scalar.h, bf16_scalar.h) return as the canonical quiet NaN with
 * the same sign. */
#ifndef FX_CORE_HALF_BITS_H
#define FX_CORE_HALF_BITS_H

#include <stdint.h>

#include "flexpoint.h"

/* +Inf's pattern; anything above it (sign clear) is a NaN. */
static inline uint16_t fx_half_inf(fmt_t f) { return f == FMT_FP16 ? 0x7C00u : 0x7F80u; }

/* The canonical quiet NaN's pattern (sign clear). */
static inline uint16_t fx_half_qnan(fmt_t f) { return f == FMT_FP16 ? 0x7E00u : 0x7FC0u; }

/* The pattern after a round trip through fp32: NaN -> sign | canonical quiet NaN. Written with
 * masks, and with the format's constants as arguments, so that loops over it vectorise. */
static inline uint16_t fx_half_canonical_c(uint16_t h, uint16_t inf, uint16_t qnan)
{
    const uint16_t nan = (uint16_t)-(uint16_t)((uint16_t)(h & 0x7FFFu) > inf);
    return (uint16_t)((h & (uint16_t)~nan) | (((h & 0x8000u) | qnan) & nan));
}

static inline uint16_t fx_half_canonical(fmt_t f, uint16_t h)
{
    return fx_half_canonical_c(h, fx_half_inf(f), fx_half_qnan(f));
}

/* x > 0: sign clear, nonzero, not NaN. */
static inline int fx_half_positive(fmt_t f, uint16_t h) { return h != 0 && h <= fx_half_inf(f); }

static inline int fx_half_isnan(fmt_t f, uint16_t h) { return (uint16_t)(h & 0x7FFFu) > fx_half_inf(f); }

/* relu(h), tensor_relu's rule on the bits (the fp32 route's x > 0 ? x : +0 with NaN kept):
 * h canonical where it is positive or NaN, else +0. Masks, for loops that vectorise. */
static inline uint16_t fx_half_relu_c(uint16_t h, uint16_t inf, uint16_t qnan)
{
    const uint16_t mag = (uint16_t)(h & 0x7FFFu);
    const uint16_t keep = (uint16_t)-(uint16_t)((h != 0 && h <= inf) | (mag > inf));
    return (uint16_t)(fx_half_canonical_c(h, inf, qnan) & keep);
}

/* The ReLU gradient's selection, tensor_relu_backward's rule on the bits: g canonical where the
 * ReLU's input x is positive (sign clear, nonzero, not NaN), else +0. */
static inline uint16_t fx_half_gated_c(uint16_t g, uint16_t x, uint16_t inf, uint16_t qnan)
{
    const uint16_t keep = (uint16_t)-(uint16_t)(x != 0 && x <= inf);
    return (uint16_t)(fx_half_canonical_c(g, inf, qnan) & keep);
}


#endif
