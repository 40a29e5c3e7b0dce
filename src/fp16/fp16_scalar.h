/* IEEE binary16 (fp16) <-> binary32 on bit patterns: THE definitions (semantics at the top of
 * fp16_scalar.c). FX_HD: compiled by the C library and by the CUDA kernels alike, so both run
 * this code. Integer arithmetic only: no dependence on MXCSR, FTZ/DAZ or compiler flags. */
#ifndef FX_FP16_SCALAR_H
#define FX_FP16_SCALAR_H

#include "../core/fx_hd.h"

/* The conversions work on bit patterns, and the bulk loops move bit patterns with memcpy, so a
 * signalling NaN is never loaded into a float register (where some ABIs would quiet it). */
static inline FX_HD uint16_t fx_fp16_from_bits(uint32_t u)
{
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;

    if (a > 0x7F800000u) return sign | 0x7E00u;   /* NaN */
    if (a >= 0x477FF000u) return sign | 0x7C00u;  /* |x| >= 65520, or Inf */

    if (a >= 0x38800000u) {
        /* |x| >= 2^-14: an fp16 normal. Rebias the exponent (127 -> 15: subtract 112 << 23),
         * then drop 13 fraction bits with ties to even. A carry out of the fraction moves into
         * the exponent field, which is exactly the next binade; it cannot reach Inf because
         * |x| < 65520 here. */
        uint32_t r = a - 0x38000000u;
        r += 0x0FFFu + ((r >> 13) & 1u);
        return sign | (uint16_t)(r >> 13);
    }

    /* |x| < 2^-14: an fp16 subnormal (or zero), in units of 2^-24. The fp32 value is
     * sig * 2^(exp - 150) with the implicit bit in sig, so the count of 2^-24 units is
     * sig >> (126 - exp), rounded to nearest even. Below 2^-25 (exp < 102) everything rounds
     * to zero, and fp32 subnormals (exp 0) are far below that. */
    uint32_t exp = a >> 23;
    if (exp < 102) return sign;
    uint32_t sig = (a & 0x007FFFFFu) | 0x00800000u;
    uint32_t shift = 126u - exp; /* 14 .. 24 */
    uint32_t q = sig >> shift;
    uint32_t rem = sig & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    /* q may reach 0x400, the smallest normal, whose encoding is exactly 0x400. */
    return sign | (uint16_t)q;
}

static inline FX_HD uint32_t fx_fp16_to_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t frac = h & 0x03FFu;

    if (exp == 0x1F) return sign | 0x7F800000u | (frac << 13); /* Inf, NaN */
    if (exp != 0) return sign | ((exp + 112u) << 23) | (frac << 13);
    if (frac == 0) return sign;

    /* Subnormal: frac * 2^-24. Normalise so the leading one becomes the implicit bit. With
     * the leading one at bit p (0..9), the value is 2^(p - 24) * (1 + rest), a normal fp32
     * with biased exponent p - 24 + 127. */
    uint32_t p = 9;
    while (!(frac & (1u << p))) p--;
    uint32_t mant = (frac << (23 - p)) & 0x007FFFFFu;
    return sign | ((p + 103u) << 23) | mant;
}

#endif
