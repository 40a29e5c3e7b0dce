/* Public accessors of the shared-exponent state: exponent, window, rounding, statistics. */
#include "dispatch.h"
#include "device_backend.h"

#include <string.h>

static int fx_need_shared(const tensor_t *t, const char *func)
{
    if (!t) return fx_error(FX_EINVAL, func, "tensor is NULL");
    if (!fmt_is_shared_exponent(t->fmt))
        return fx_error(FX_EFORMAT, func, "tensor format %s has no shared exponent (needs "
                        "flex16_5 or dfp16)", fmt_name(t->fmt));
    return FX_OK;
}

int tensor_get_exp(const tensor_t *t, int *e)
{
    if (!e) return fx_error(FX_EINVAL, __func__, "e is NULL");
    *e = 0;
    int rc = fx_need_shared(t, __func__);
    if (rc) return rc;
    rc = fx_storage_settle(t->st, __func__);
    *e = t->st->exp;
    return rc;
}

int tensor_exp(const tensor_t *t)
{
    if (fx_need_shared(t, __func__)) return 0;
    /* a device write may still hold its exponent; if it cannot be collected (a device
     * fault), the status stays in flexpoint_last_error and the exponent returned is the one
     * before that write */
    fx_storage_settle(t->st, __func__);
    return t->st->exp;
}

/* Move every stored mantissa from exponent `from` to `to`, keeping values (one rounding).
 * Blocks of zeros are skipped (0 stays 0 at any exponent): a model places every new tensor in
 * its exponent window this way, and a new tensor is all zeros (the transformer's evaluation
 * context is some 10^8 of them, placed every epoch). */
static int64_t fx_rescale_storage(fx_storage *st, int from, int to)
{
    enum { BLOCK = 4096 };
    int16_t *m = st->data;
    int64_t sat = 0;
    for (int64_t lo = 0; lo < st->numel; lo += BLOCK) {
        const int64_t hi = st->numel - lo < BLOCK ? st->numel : lo + BLOCK;
        int16_t any = 0;
        for (int64_t i = lo; i < hi; i++) any |= m[i];
        if (!any) continue;
        for (int64_t i = lo; i < hi; i++) m[i] = (int16_t)fx_requant(m[i], to - from, &sat);
    }
    return sat;
}

/* The same for a storage wherever it lives (device mantissas are rescaled on their device). */
static int fx_rescale(fx_storage *st, int from, int to, int64_t *sat, const char *func)
{
    if (st->on_device)
        return fx_device_rescale(st->device, st->data, st->numel, from, to, sat, func);
    *sat = fx_rescale_storage(st, from, to);
    return FX_OK;
}

int tensor_set_exp(tensor_t *t, int e)
{
    int rc = fx_need_shared(t, __func__);
    if (rc) return rc;
    fx_storage *st = t->st;
    if ((rc = fx_storage_settle(st, __func__))) return rc;
    if (e < st->win_lo || e > st->win_hi)
        return FX_FAIL(FX_ERANGE, "exponent %d is outside the %s window [%d, %d]", e,
                       fmt_name(t->fmt), st->win_lo, st->win_hi);
    if (e != st->exp) {
        int64_t sat = 0;
        if ((rc = fx_rescale(st, st->exp, e, &sat, __func__))) return rc;
        st->last.saturated = sat;
        st->exp = e;
    }
    return FX_OK;
}

/* tensor_set_exp_window, with the mantissas rescaled (rescale) or, for a storage that holds only
 * zeros, left as they are: zero at any exponent, nothing saturates, the same state. */
static int fx_set_exp_window(tensor_t *t, int lo, int rescale, const char *func)
{
    if (!t) return FX_FAIL(FX_EINVAL, "tensor is NULL");
    if (t->fmt != FMT_FLEX16_5)
        return fx_error(FX_EFORMAT, func, "only flex16_5 tensors have a settable window (got %s)",
                        fmt_name(t->fmt));
    if (lo < FX_DFP_EXP_MIN || lo + FX_FLEX_WINDOW - 1 > FX_DFP_EXP_MAX)
        return fx_error(FX_ERANGE, func, "window start %d is outside [%d, %d]", lo,
                        FX_DFP_EXP_MIN, FX_DFP_EXP_MAX - FX_FLEX_WINDOW + 1);
    fx_storage *st = t->st;
    int rc = fx_storage_settle(st, func);
    if (rc) return rc;
    /* rescale first: a failure (on a device) leaves the window and the exponent as they were */
    const int e = fx_clamp_exp(st->exp, lo, lo + FX_FLEX_WINDOW - 1, NULL);
    if (e != st->exp) {
        int64_t sat = 0;
        if (rescale && (rc = fx_rescale(st, st->exp, e, &sat, func))) return rc;
        st->last.saturated = sat;
        st->exp = e;
    }
    st->win_lo = lo;
    st->win_hi = lo + FX_FLEX_WINDOW - 1;
    return FX_OK;
}

int tensor_set_exp_window(tensor_t *t, int lo)
{
    return fx_set_exp_window(t, lo, 1, __func__);
}

/* Documented in internal.h. Why: the rescale's scan reads every page of a new tensor, which
 * maps each one to the kernel's shared zero page, and the first write then faults on every
 * page again to copy it, with a TLB shootdown of the other threads' cores: in the first
 * training step of a flex16_5 ResNet-20 (every activation and gradient fresh) that doubled
 * the step's page faults. */
int fx_tensor_set_window_fresh(tensor_t *t, int lo)
{
    return fx_set_exp_window(t, lo, 0, "tensor_set_exp_window");
}

int tensor_exp_window(const tensor_t *t, int *lo, int *hi)
{
    int rc = fx_need_shared(t, __func__);
    if (rc) return rc;
    if (!lo || !hi) return FX_FAIL(FX_EINVAL, "lo or hi is NULL");
    *lo = t->st->win_lo;
    *hi = t->st->win_hi;
    return FX_OK;
}

int tensor_set_rounding(tensor_t *t, int mode, uint64_t seed)
{
    int rc = fx_need_shared(t, __func__);
    if (rc) return rc;
    if (mode != FX_ROUND_NEAREST_EVEN && mode != FX_ROUND_STOCHASTIC)
        return FX_FAIL(FX_EINVAL, "rounding mode %d is unknown (0 nearest-even, 1 stochastic)",
                       mode);
    t->st->rounding = mode;
    t->st->seed = seed;
    t->st->write_counter = 0;
    return FX_OK;
}

int tensor_stat(const tensor_t *t, const char *name, double *value)
{
    int rc = fx_need_shared(t, __func__);
    if (rc) return rc;
    if (!name || !value) return FX_FAIL(FX_EINVAL, "%s is NULL", !name ? "name" : "value");
    if ((rc = fx_storage_settle(t->st, __func__))) return rc;
    const fx_storage *st = t->st;
    static const char *const names[] = {"saturated", "true_max",      "nonfinite",
                                        "underflow", "clamped",       "overflows",
                                        "clamped_total", "nonfinite_total", "writes",
                                        "exp",       "stored_max"};
    double v[] = {(double)st->last.saturated, st->last.true_max,
                  (double)st->last.nonfinite, (double)st->last.underflow,
                  (double)st->last.clamped,   (double)st->overflows,
                  (double)st->clamped_total,  (double)st->nonfinite_total,
                  (double)st->writes,         (double)st->exp,
                  st->last.stored_max};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(name, names[i]) == 0) {
            *value = v[i];
            return FX_OK;
        }
    return FX_FAIL(FX_ENAME, "unknown statistic '%.64s' (known: saturated, true_max, "
                   "nonfinite, underflow, clamped, overflows, clamped_total, nonfinite_total, "
                   "writes, exp, stored_max)", name);
}
