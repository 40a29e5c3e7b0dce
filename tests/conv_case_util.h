/* Helpers shared by the tests of the direct float convolution kernels
 * (tests/test_conv_f32_dgrad.c, tests/test_conv_f32_wgrad.c): one convolution case, its output
 * size, normal-valued operands and operands with non-finite values. */
#ifndef FX_TESTS_CONV_CASE_UTIL_H
#define FX_TESTS_CONV_CASE_UTIL_H

#include "flexpoint.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>

/* N images of C x H x W, O output channels, a K x K kernel */
typedef struct conv_case {
    int64_t N, C, H, W, O, K;
    int stride, pad, dil;
} conv_case;

/* the output size along an axis of `in` inputs */
static inline int64_t conv_case_out(int64_t in, const conv_case *sh)
{
    return (in + 2 * sh->pad - sh->dil * (sh->K - 1) - 1) / sh->stride + 1;
}

/* a 4-D tensor of format f and shape s, scale times standard normal values */
static inline tensor_t *conv_case_tensor(fmt_t f, const int64_t *s, double scale, test_rng *r)
{
    tensor_t *t = tensor_new(f, 4, s);
    if (t) test_fill_normal(t, scale, r);
    return t;
}

/* Inf, NaN and -Inf at the first, middle and last elements of t (and with zero_third a zero at
 * the third) */
static inline void conv_case_poison(tensor_t *t, int zero_third)
{
    const int64_t n = tensor_numel(t);
    float *v = malloc(sizeof(float) * (size_t)n);
    CHECK_STATUS(tensor_to_f32(t, v), FX_OK);
    v[0] = INFINITY;
    v[n / 2] = NAN;
    v[n - 1] = -INFINITY;
    if (zero_third) v[n / 3] = 0.0f;
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    free(v);
}

#endif
