/* bfloat16 <-> binary32 on bit patterns: THE definitions (semantics at the top of
 * bf16_scalar.c). FX_HD: compiled by the C library and by the CUDA kernels alike. */
#ifndef FX_BF16_SCALAR_H
#define FX_BF16_SCALAR_H

#include "../core/fx_hd.h"

/* Bit patterns travel through memcpy so that a signalling NaN is never loaded into a float
 * register (where some ABIs would quiet it). */
static inline FX_HD uint16_t fx_bf16_from_bits(uint32_t u)
{
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u);
    /* Adding 0x7FFF rounds up exactly when the low half exceeds 0x8000; the extra 1 taken
     * from bit 16 (the lowest kept bit) turns the tie 0x8000 into a round-up only when the
     * kept part is odd. The sum cannot wrap: the largest non-NaN pattern is 0xFF800000. */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bf16 -> fp32 bits: exact, the top half of a binary32. */
static inline FX_HD uint32_t fx_bf16_to_bits(uint16_t h) { return (uint32_t)h << 16; }

#endif
