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
#include "fp16_scalar.h"

#include <string.h>

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
