/* Dynamic loss scaling with the behaviour of torch.cuda.amp.GradScaler (include/flexpoint_nn.h).
 *
 * Reference behaviour reproduced exactly (torch's _amp_update_scale_):
 * - the scale is an fp32 value (a tensor in torch): every product is rounded to fp32;
 * - found_inf: scale *= backoff_factor, good_steps = 0, the step is skipped;
 * - clean step: good_steps + 1 == growth_interval grows the scale by growth_factor unless the
 *   product overflows fp32 (then the scale is kept) and resets good_steps to 0; otherwise
 *   good_steps is incremented.
 * One documented deviation, in a state torch cannot usefully be in either: a backoff that
 * would round the scale to 0 (after about 165 consecutive overflows from 2^16) keeps the
 * smallest positive fp32 value instead, so that unscaling never divides by zero.
 *
 * Unscaling multiplies by inv_scale = fp32(1 / scale), as torch does, and reports found_inf
 * when any unscaled value is NaN/Inf. That includes every NaN/Inf gradient value, and also a
 * finite gradient that overflows when unscaled by a scale below 1 (torch checks only the
 * input; applying such a step would write Inf into the weights). FLEX16_5/DFP16 gradients hold
 * no NaN/Inf (their conversions map NaN to 0 and Inf to the largest mantissa and count them),
 * so for them the storage's non-finite count of its last write is the signal as well.
 *
 * Disabled (enabled == 0): the scale is 1, unscale copies the gradients and still reports
 * found_inf, and update always returns 1 and changes nothing (torch's disabled scaler is a
 * no-op that never skips).
 */
#include "flexpoint_nn.h"
#include "../core/dispatch.h"
#include "../nn/nn_ops.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* Elements converted and checked per chunk: small enough that the chunk stays in L1/L2
 * between the conversion and the scale-and-check, which makes the two one pass over memory. */
#define FX_UNSCALE_CHUNK 4096
/* Gradients shorter than this are unscaled on one thread. */
#define FX_UNSCALE_PAR_MIN ((int64_t)1 << 16)

void fx_loss_scaler_init(fx_loss_scaler *s, int enabled)
{
    if (!s) return;
    memset(s, 0, sizeof *s);
    s->enabled = enabled != 0;
    s->scale = s->enabled ? 65536.0 : 1.0;
    s->growth_factor = 2.0;
    s->backoff_factor = 0.5;
    s->growth_interval = 2000;
}

/* The state a scaler must be in to be used (fields are public, so they are checked). */
static int fx_scaler_check(const fx_loss_scaler *s, const char *func)
{
    if (!s) return fx_error(FX_EINVAL, func, "scaler is NULL");
    if (s->enabled != 0 && s->enabled != 1)
        return fx_error(FX_EINVAL, func, "enabled=%d must be 0 or 1", s->enabled);
    if (!s->enabled) return FX_OK;
    if (!(isfinite(s->scale) && s->scale > 0 && s->scale <= FLT_MAX))
        return fx_error(FX_EINVAL, func, "scale=%g must be a positive finite fp32 value",
                        s->scale);
    if (!(s->growth_factor > 1.0 && isfinite(s->growth_factor)))
        return fx_error(FX_EINVAL, func, "growth_factor=%g must be finite and > 1",
                        s->growth_factor);
    if (!(s->backoff_factor > 0.0 && s->backoff_factor < 1.0))
        return fx_error(FX_EINVAL, func, "backoff_factor=%g must lie in (0, 1)",
                        s->backoff_factor);
    if (s->growth_interval < 1)
        return fx_error(FX_EINVAL, func, "growth_interval=%lld must be >= 1",
                        (long long)s->growth_interval);
    if (s->good_steps < 0 || s->good_steps >= s->growth_interval)
        return fx_error(FX_EINVAL, func, "good_steps=%lld is outside [0, growth_interval=%lld)",
                        (long long)s->good_steps, (long long)s->growth_interval);
    return FX_OK;
}

/* Multiply n values by inv in place; 1 if any result is NaN/Inf. */
static int fx_scale_and_check(float *x, int64_t n, float inv)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float y = x[i] * inv;
        x[i] = y;
        bad |= !isfinite(y);
    }
    return bad;
}

int fx_loss_scaler_unscale(const fx_loss_scaler *s, const tensor_t *const *grads, int n,
                           float *const *out, int *found_inf)
{
    const char *func = __func__;
    int rc = fx_scaler_check(s, func);
    if (rc) return rc;
    if (!found_inf) return FX_FAIL(FX_EINVAL, "found_inf is NULL");
    if (n < 0) return FX_FAIL(FX_EINVAL, "n=%d is negative", n);
    if (n > 0 && (!grads || !out))
        return FX_FAIL(FX_EINVAL, "%s is NULL", !grads ? "grads" : "out");
    for (int i = 0; i < n; i++) {
        if (!grads[i]) return FX_FAIL(FX_EINVAL, "grads[%d] is NULL", i);
        if (!out[i] && fx_numel_of(grads[i]->ndim, grads[i]->shape) > 0)
            return FX_FAIL(FX_EINVAL, "out[%d] is NULL", i);
    }
    /* all gradients in one place: the host, or one device (then out[i] are device memory,
     * include/flexpoint_gpu.h) */
    fx_op_args a = {.op = FX_OP_UNSCALE, .func = func, .tlist = grads, .tlist_n = n,
                    .tlist_name = "grads"};
    /* torch: inv_scale = scale.double().reciprocal().float() */
    a.u.unscale.inv = s->enabled ? (float)(1.0 / s->scale) : 1.0f;
    a.u.unscale.out = out;
    a.u.unscale.found_inf = found_inf;
    return fx_op_run(&a);
}

int fx_nn_unscale_host(const fx_op_args *a)
{
    const tensor_t *const *grads = a->tlist;
    const int n = a->tlist_n;
    float *const *out = a->u.unscale.out;
    int *found_inf = a->u.unscale.found_inf;
    const float inv = a->u.unscale.inv;
    const char *func = a->func;
    int rc;
    const fx_backend *be = fx_backend_active();
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const tensor_t *g = grads[i];
        const int64_t numel = fx_numel_of(g->ndim, g->shape);
        if (numel == 0) continue;
        if ((rc = fx_storage_settle(g->st, func))) return rc;
        if (fmt_is_shared_exponent(g->fmt) && g->st->last.nonfinite > 0) bad = 1;
        float *o = out[i];
        if (!fx_tensor_is_contiguous(g)) {
            /* a strided view: one gather into out, then the scale-and-check pass (its
             * temporary copy is the only thing that can fail after validation: ENOMEM, with
             * the earlier gradients' outputs already written) */
            rc = tensor_to_f32(g, o);
            if (rc) return rc;
            bad |= fx_scale_and_check(o, numel, inv);
            continue;
        }
        /* contiguous: widen a chunk, then scale and check it while it is in cache */
        const char *src = fx_tensor_base(g);
        const size_t es = fmt_elem_size(g->fmt);
        const int exp = fmt_is_shared_exponent(g->fmt) ? g->st->exp : 0;
        const int64_t nchunks = (numel + FX_UNSCALE_CHUNK - 1) / FX_UNSCALE_CHUNK;
        const int nt = numel >= FX_UNSCALE_PAR_MIN ? flexpoint_num_threads() : 1;
        int chunk_bad = 0;
        (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1) reduction(| : chunk_bad)
#endif
        for (int64_t c = 0; c < nchunks; c++) {
            const int64_t lo = c * FX_UNSCALE_CHUNK;
            const int64_t len = numel - lo < FX_UNSCALE_CHUNK ? numel - lo : FX_UNSCALE_CHUNK;
            /* a chunk is below the converter's own threading threshold: no nested threads */
            fx_widen_to_f32(be, g->fmt, exp, src + (size_t)lo * es, o + lo, len);
            chunk_bad |= fx_scale_and_check(o + lo, len, inv);
        }
        bad |= chunk_bad;
    }
    *found_inf = bad;
    return FX_OK;
}

int fx_loss_scaler_update(fx_loss_scaler *s, int found_inf)
{
    int rc = fx_scaler_check(s, __func__);
    if (rc) return rc;
    if (found_inf != 0 && found_inf != 1)
        return FX_FAIL(FX_EINVAL, "found_inf=%d must be 0 or 1", found_inf);
    if (!s->enabled) return 1; /* a disabled scaler never skips and never changes */
    if (found_inf) {
        float backed = (float)(s->scale * s->backoff_factor);
        s->scale = backed > 0.0f ? backed : FLT_TRUE_MIN;
        s->good_steps = 0;
        s->skipped_steps++;
        return 0;
    }
    int64_t successful = s->good_steps + 1;
    if (successful == s->growth_interval) {
        double grown = s->scale * s->growth_factor;
        /* do not grow past the fp32 range: torch keeps the scale when fp32(product) is Inf,
         * which happens from FLT_MAX + half an ulp (0x1.ffffffp127) up */
        if (grown < 0x1.ffffffp127) s->scale = (float)grown;
        s->good_steps = 0;
    } else {
        s->good_steps = successful;
    }
    return 1;
}
