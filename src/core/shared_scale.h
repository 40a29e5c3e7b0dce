/* tensor_scale of a FLEX16_5 / DFP16 tensor into a FLEX16_5, DFP16 or fp32 tensor without an
 * int64 stage (shared_scale.c): the dispatcher's bits, exponent, statistics and trace. */
#ifndef FX_CORE_SHARED_SCALE_H
#define FX_CORE_SHARED_SCALE_H

#include "backend.h"

#include <math.h>

#define FX_SHARED_SCALE_NOT_TAKEN (-1)

/* out = s * a (shapes already validated, s finite, none NULL): the write's status when done,
 * or FX_SHARED_SCALE_NOT_TAKEN (nothing written, no state changed) where the tensors are not
 * of a form handled here. */
int fx_shared_scale(tensor_t *out, const tensor_t *a, double s);

/* The dispatcher's split of a finite scalar s != 0 for the integer formats: s = c 2^k with
 * c = round(f 2^30) from s = f 2^(k + 30), f in [0.5, 1); s = 0 gives c = 0, k = 0. */
static inline void fx_shared_scale_split(double s, int64_t *c, int *k)
{
    *c = 0;
    *k = 0;
    if (s != 0.0) {
        int k2;
        const double f = frexp(s, &k2);
        *c = (int64_t)nearbyint(f * 1073741824.0);
        *k = k2 - 30;
    }
}

/* The fp32 value of mantissa m scaled by c 2^k, for a tensor at exponent e (p2 = 2^(e + k)):
 * the integer product first, so that a zero is +0 as the dispatcher's stage gives it. */
static inline float fx_shared_scale_f32(int16_t m, int64_t c, double p2)
{
    return (float)((double)((int64_t)m * c) * p2);
}

/* Test hook: 0 sends every scale through the dispatcher (to compare the two routes). */
void fx_shared_scale_set_enabled(int on);
/* Test hook: how many scales this file has done since the process started. */
int64_t fx_shared_scale_taken(void);

#endif
