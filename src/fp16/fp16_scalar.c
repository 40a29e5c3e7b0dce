/* IEEE binary16 (fp16) <-> binary32: the scalar definitions every other path reproduces.
 *
 * Both directions work on the bit patterns with integer arithmetic only. The result therefore
 * does not depend on MXCSR (rounding mode, FTZ, DAZ) or on the compiler's float evaluation:
 * subnormal inputs and outputs are always kept.
 *
 * fp32 -> fp16: round to nearest, ties to even. |x| >= 65520 (the midpoint between 65504, the
 * largest fp16, and 65536) gives +-Inf. NaN gives sign | 0x7E00: the quiet NaN with the sign
 * kept and the payload dropped. -0 stays -0.
 * fp16 -> fp32: exact. A NaN keeps its sign and payload (the 10 fraction bits become the top
 * fraction bits of the fp32), including whether it is quiet or signalling. */
#include "../core/backend.h"
#include "fp16_kernels.h"

#include <string.h>

/* The conversions work on bit patterns, and the bulk loops move bit patterns with memcpy, so a
 * signalling NaN is never loaded into a float register (where some ABIs would quiet it). */
static inline uint16_t fx_fp16_from_bits(uint32_t u)
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

static inline uint32_t fx_fp16_to_bits(uint16_t h)
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

uint16_t fx_f32_to_fp16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return fx_fp16_from_bits(u);
}

float fx_fp16_to_f32(uint16_t h)
{
    uint32_t u = fx_fp16_to_bits(h);
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

void fx_cvt_f32_to_fp16_scalar(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, sizeof u);
        dst[i] = fx_fp16_from_bits(u);
    }
}

void fx_cvt_fp16_to_f32_scalar(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = fx_fp16_to_bits(src[i]);
        memcpy(dst + i, &u, sizeof u);
    }
}

void fx_register_fp16_scalar(fx_backend *b, const fx_cpu_features *cpu)
{
    (void)cpu;
    b->cvt.f32_to_fp16 = fx_cvt_f32_to_fp16_scalar;
    b->cvt.fp16_to_f32 = fx_cvt_fp16_to_f32_scalar;
}
