/* bfloat16 <-> binary32: the scalar definitions every other path reproduces.
 *
 * bf16 is the top half of a binary32, so both directions are integer operations on the bits;
 * they do not depend on MXCSR (rounding mode, FTZ, DAZ).
 *
 * fp32 -> bf16: round to nearest, ties to even, on the low 16 bits. A carry ripples into the
 * exponent, which is the next binade; from the largest finite values it reaches the Inf
 * pattern, which is the correct overflow. Subnormals round like any other value (they are
 * never flushed). NaN gives sign | 0x7FC0: the quiet NaN with the sign kept and the payload
 * dropped (the Eigen / ml_dtypes convention). -0 stays -0.
 * bf16 -> fp32: exact (shift left by 16), NaN payloads and signalling NaNs included. */
#include "../core/backend.h"
#include "bf16_kernels.h"
#include "bf16_scalar.h"

#include <string.h>

uint16_t fx_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return fx_bf16_from_bits(u);
}

float fx_bf16_to_f32(uint16_t h)
{
    uint32_t u = fx_bf16_to_bits(h);
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

void fx_cvt_f32_to_bf16_scalar(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, sizeof u);
        dst[i] = fx_bf16_from_bits(u);
    }
}

void fx_cvt_bf16_to_f32_scalar(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = fx_bf16_to_bits(src[i]);
        memcpy(dst + i, &u, sizeof u);
    }
}
