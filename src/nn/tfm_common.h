/* Helpers shared by the transformer ops (softmax_axis.c, layernorm.c, bmm.c, embedding.c,
 * clip_norm.c): axis geometry. Definitions and bounds: docs/transformer_ops.md. */
#ifndef FX_NN_TFM_COMMON_H
#define FX_NN_TFM_COMMON_H

#include "nn_stage.h"

/* The rows of t along axis: element k of row (o, i) is at (o * len + k) * inner + i over t's
 * row-major logical order. FX_EINVAL for an axis outside [-ndim, ndim). */
static inline int tfm_axis(const char *func, const tensor_t *t, int axis, int64_t *outer,
                           int64_t *len, int64_t *inner)
{
    const int ax = axis < 0 ? axis + t->ndim : axis;
    if (ax < 0 || ax >= t->ndim) {
        char b1[160];
        return fx_error(FX_EINVAL, func, "axis=%d is out of range for the %d-D shape %s (valid: "
                        "%d..%d)", axis, t->ndim, fx_shape_str(t, b1, sizeof b1), -t->ndim,
                        t->ndim - 1);
    }
    *outer = 1;
    for (int d = 0; d < ax; d++) *outer *= t->shape[d];
    *len = t->shape[ax];
    *inner = 1;
    for (int d = ax + 1; d < t->ndim; d++) *inner *= t->shape[d];
    return FX_OK;
}

#endif
