/* The public one-value conversions (include/flexpoint.h) that are not the format definitions
 * themselves. fx_f32_to_fp16, fx_fp16_to_f32, fx_f32_to_bf16 and fx_bf16_to_f32 are the
 * definitions (src/fp16/fp16_scalar.c, src/bf16/bf16_scalar.c), made public as they are.
 *
 * binary64 -> fp16/bf16 rounds once: the double is first rounded to fp32 *to odd*
 * (fx_f64_to_f32_round_odd: truncate, and set the last bit when anything was dropped), then to
 * the 16-bit format to nearest even. Round-to-odd into a format with at least two more bits than
 * the target never creates or hides a tie, so the second rounding is the correct rounding of
 * the double. Rounding to nearest twice (double -> float -> half) is wrong where the float
 * lands exactly on a half-way point of the 16-bit format: 1 + 2^-11 + 2^-30 is above the
 * midpoint between 1 and 1 + 2^-10, rounds to the midpoint 1 + 2^-11 in fp32, and then to 1
 * (ties to even) instead of 1 + 2^-10. */
#include "backend.h"
#include "fx_hd.h"
#include "../bf16/bf16_scalar.h"
#include "../fp16/fp16_scalar.h"

#include <string.h>

static uint32_t fx_bits32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

uint16_t fx_f32_to_bf16_trunc(float x)
{
    const uint32_t u = fx_bits32(x);
    /* a NaN whose payload sits in the low half would otherwise become Inf */
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u);
    return (uint16_t)(u >> 16);
}

uint16_t fx_f64_to_fp16(double x) { return fx_fp16_from_bits(fx_bits32(fx_f64_to_f32_round_odd(x))); }

uint16_t fx_f64_to_bf16(double x) { return fx_bf16_from_bits(fx_bits32(fx_f64_to_f32_round_odd(x))); }
