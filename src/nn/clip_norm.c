/* Gradient clipping by the global L2 norm (include/flexpoint_nn.h, docs/transformer_ops.md).
 *
 * total = sqrt(sum over every gradient and element of g^2); when total > max_norm, every
 * gradient is multiplied by max_norm / (total + 1e-6) (torch.nn.utils.clip_grad_norm_).
 *
 * The norm: a FLEX16_5/DFP16 gradient's sum of squares is exact in integers (sum of m^2 in
 * uint64, at most 2^33 elements of < 2^30 each, then times 2^(2e), one rounding to double);
 * float gradients are widened exactly and their squares summed in double in element order. The
 * tensors' sums are added in the given order and the square root taken in double, so the norm
 * is the same on every backend and thread count. The scaling is tensor_scale (in place): one
 * multiplication and one write per tensor (for the integer formats an exact integer product
 * with a 31-bit mantissa of the factor, then one rounding).
 *
 * A norm that is not finite (a float gradient holding NaN or Inf) scales nothing: *total_norm
 * reports it and the caller skips the step, as a loss scaler does.
 */
#include "tfm_common.h"
#include "flexpoint_nn.h"
#include "nn_ops.h"

#include <math.h>

/* sum of squares of all of t, in double */
static int clip_sumsq(const tensor_t *t, double *out, const char *func)
{
    const int64_t n = fx_numel_of(t->ndim, t->shape);
    fx_scratch s = {.n = 0};
    int rc;
    if (fmt_is_shared_exponent(t->fmt)) {
        const int16_t *m;
        int e;
        if ((rc = nn_in_i16(t, &m, &e, &s, func))) goto done;
        double total = 0.0;
        for (int64_t c = 0; c < n; c += (int64_t)1 << 33) { /* chunks exact in uint64 */
            const int64_t end = n - c > ((int64_t)1 << 33) ? c + ((int64_t)1 << 33) : n;
            uint64_t acc = 0;
            for (int64_t i = c; i < end; i++) acc += (uint64_t)((int32_t)m[i] * (int32_t)m[i]);
            total += ldexp((double)acc, 2 * e);
        }
        *out = total;
    } else {
        const float *v;
        if ((rc = nn_in_f32(t, &v, &s, func))) goto done;
        double total = 0.0;
        for (int64_t i = 0; i < n; i++) total += (double)v[i] * (double)v[i];
        *out = total;
    }
done:
    fx_scratch_free(&s);
    return rc;
}

int fx_clip_grad_norm(tensor_t *const *grads, int n, double max_norm, double *total_norm)
{
    const char *func = __func__;
    if (n < 0) return FX_FAIL(FX_EINVAL, "n=%d is negative", n);
    if (n > 0 && !grads) return FX_FAIL(FX_EINVAL, "grads is NULL");
    if (!isfinite(max_norm) || max_norm < 0)
        return FX_FAIL(FX_EINVAL, "max_norm=%g must be finite and >= 0", max_norm);
    for (int i = 0; i < n; i++) {
        if (!grads[i]) return FX_FAIL(FX_EINVAL, "grads[%d] is NULL", i);
        for (int j = 0; j < i; j++)
            if (grads[j]->st == grads[i]->st)
                return FX_FAIL(FX_EINVAL, "grads[%d] and grads[%d] share storage: it would be "
                               "counted and scaled twice", j, i);
    }
    fx_op_args a = {.op = FX_OP_CLIP_GRAD_NORM, .func = func,
                    .tlist = (const tensor_t *const *)grads, .tlist_n = n, .tlist_name = "grads"};
    a.u.clip.max_norm = max_norm;
    a.u.clip.total_norm = total_norm;
    return fx_op_run(&a);
}

int fx_nn_clip_grad_norm_host(const fx_op_args *a)
{
    /* the caller's gradients, which it gave as writable (fx_clip_grad_norm) */
    tensor_t *const *grads = (tensor_t *const *)a->tlist;
    const int n = a->tlist_n;
    const double max_norm = a->u.clip.max_norm;
    double *total_norm = a->u.clip.total_norm;
    const char *func = a->func;
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        double sq;
        int rc = clip_sumsq(grads[i], &sq, func);
        if (rc) return rc;
        total += sq;
    }
    total = sqrt(total);
    if (isfinite(total) && total > max_norm) {
        const double coef = max_norm / (total + 1e-6);
        for (int i = 0; i < n; i++) {
            int rc = tensor_scale(grads[i], grads[i], coef);
            if (rc) return rc;
        }
    }
    if (total_norm) *total_norm = total;
    return FX_OK;
}
