/* Batch norm's forward output straight into a shared-exponent y (batchnorm_direct.c says how
 * and why the bits are the stage route's). */
#ifndef FX_BN_DIRECT_H
#define FX_BN_DIRECT_H

#include "bn_kernels.h"
#include "flexpoint.h"

#define FX_BN_DIRECT_DECLINED 1 /* not taken: the caller runs the stage route */

/* Whether the route may take y = batchnorm(x) where the kernels read x as xs: x's int16
 * mantissas, into a whole FLEX16_5/DFP16 y that shares no storage with x (the route may
 * normalise x again after it has written y, when the write recomputes an overflow). */
int fx_bn_direct_ok(const tensor_t *y, const tensor_t *x, const fx_bn_src *xs);

/* y's write with channel c's output (xs - mu[c]) * a[c] + b[c] (as the kernels compute it,
 * rounded to odd fp32): FX_OK or the write's status, or FX_BN_DIRECT_DECLINED (nothing written)
 * where an output is not finite, which the stage route counts, or where there are no inputs. */
int fx_bn_forward_direct(tensor_t *y, const fx_bn_src *xs, const fx_bn_dims *d,
                         const fx_bn_kernels *k, const double *mu, const double *a,
                         const double *b, const char *func);

/* Test hooks: 0 sends every forward pass to the stage route; runs counted */
void fx_bn_direct_set_enabled(int on);
int64_t fx_bn_direct_runs(void);

#endif
