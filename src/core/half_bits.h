/* fp16/bf16 values handled as bit patterns by ops that only select or compare values (relu,
 * max-pooling and their gradients), so that 16-bit inputs need not be widened into an fp32
 * copy and rounded back. Each helper gives exactly what the fp32 route gives: widening is exact,
 * and rounding a widened value back to its own format returns it unchanged, except a NaN,
 * which the conversions (fp16_scalar.h, bf16_scalar.h) return as the canonical quiet NaN with
 * the same sign. */
#ifndef FX_CORE_HALF_BITS_H
#define FX_CORE_HALF_BITS_H

#include <stdint.h>
#include <string.h>

#include "flexpoint.h"
#include "../bf16/bf16_scalar.h"
#include "../fp16/fp16_scalar.h"

/* +Inf's pattern; anything above it (sign clear) is a NaN. */
static inline uint16_t fx_half_inf(fmt_t f) { return f == FMT_FP16 ? 0x7C00u : 0x7F80u; }

/* The pattern after a round trip through fp32: NaN -> sign | canonical quiet NaN. */
static inline uint16_t fx_half_canonical(fmt_t f, uint16_t h)
{
    if ((uint16_t)(h & 0x7FFFu) > fx_half_inf(f))
        return (uint16_t)((h & 0x8000u) | (f == FMT_FP16 ? 0x7E00u : 0x7FC0u));
    return h;
}

/* x > 0: sign clear, nonzero, not NaN. */
static inline int fx_half_positive(fmt_t f, uint16_t h) { return h != 0 && h <= fx_half_inf(f); }

/* A key whose integer order is the float order of non-NaN patterns (sign-magnitude to two's
 * complement; -0 and +0 share key 0, as they compare equal). */
static inline int32_t fx_half_key(uint16_t h)
{
    const int32_t mag = h & 0x7FFF;
    return (h & 0x8000u) ? -mag : mag;
}

static inline int fx_half_isnan(fmt_t f, uint16_t h) { return (uint16_t)(h & 0x7FFFu) > fx_half_inf(f); }

/* The exact fp32 value. */
static inline float fx_half_widen(fmt_t f, uint16_t h)
{
    const uint32_t u = f == FMT_FP16 ? fx_fp16_to_bits(h) : fx_bf16_to_bits(h);
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

#endif
