/* int64 sums rounded to odd into int32 (backend.h, cvt.round_odd_i64), the portable kernel:
 * fx_rshift_jam (flex_math.h), the odd one of the two integers around v / 2^k (v / 2^k itself
 * where it is one). No tie of a coarser grid is created or hidden, so the nearest-even rounding
 * of the result at 2^j, j >= 2, is that of v at 2^(k + j) (Boldo and Melquiond's round-to-odd
 * property, in fixed point). A DFP16 convolution keeps its sums so where its write may pick an
 * exponent other than the one it rounded at (src/nn/conv2d.c). */
#include "flex_kernels.h"
#include "flex_math.h"

#include <stdint.h>

int fx_flex_round_odd_i64_scalar(const int64_t *src, int32_t *dst, int64_t n, int k)
{
    int fits = 1;
    for (int64_t i = 0; i < n; i++) {
        const int64_t q = fx_rshift_jam(src[i], k);
        fits &= q >= INT32_MIN && q <= INT32_MAX;
        dst[i] = (int32_t)q;
    }
    return fits;
}
