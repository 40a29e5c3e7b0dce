/* Element-wise functions by name (tensor_unary, tensor_unary_backward), clamp and pow: validate,
 * then one FX_OP_UNARY / FX_OP_UNARY_BACKWARD request for the dispatcher.
 *
 * How each format computes them (docs/math.md):
 *   - fp32, fp16, bf16 inputs: the fp32 cores of src/fp32/f32_math.h on the values (16-bit
 *     inputs widened exactly), then one rounding into out's format.
 *   - FLEX16_5 / DFP16 inputs: dequantised to fp32 and the same cores. These functions are
 *     not fixed-point in nature (exp, log, tanh, ...), so the dispatcher's "first input
 *     decides" rule, which would pick integer compute for a shared-exponent first input, gives
 *     way here: no integer kernel is registered, and the dispatcher's fallback dequantises.
 *     The result is one write into out (exponent chosen by Autoflex or exactly, with its
 *     statistics; NaN/Inf results of the math are counted as non-finite, never a crash). The
 *     cores give the same bits on every backend and thread count, so shared-exponent outputs
 *     are bit-identical across them, as the integer ops are.
 * Device tensors: the CUDA backend does not support these ops (its supports_op says so), and
 * the dispatcher answers FX_EUNSUPPORTED.
 */
#include "ops_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The names tensor_unary accepts, in the order of fx_unary_fn (the one list: op_table.h). */
#define FX_UN_NAME_ENTRY(id, name) name,
static const char *const fx_unary_names[] = {FX_UNARY_NAMED(FX_UN_NAME_ENTRY)};
#undef FX_UN_NAME_ENTRY
#define FX_UNARY_NAME_COUNT ((int)(sizeof fx_unary_names / sizeof *fx_unary_names))

const char *tensor_unary_name(int i)
{
    return i >= 0 && i < FX_UNARY_NAME_COUNT ? fx_unary_names[i] : NULL;
}

static int fx_unary_lookup(const char *fn, const char *func, int *id)
{
    if (!fn) return fx_error(FX_EINVAL, func, "fn is NULL");
    for (int i = 0; i < FX_UNARY_NAME_COUNT; i++)
        if (strcmp(fn, fx_unary_names[i]) == 0) {
            *id = i;
            return FX_OK;
        }
    char known[256];
    size_t len = 0;
    known[0] = '\0';
    for (int i = 0; i < FX_UNARY_NAME_COUNT && len < sizeof known; i++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "",
                                fx_unary_names[i]);
    return fx_error(FX_ENAME, func, "unknown function '%.64s' (known: %s)", fn, known);
}

/* a and b have the same shape; names for the message */
static int fx_same_shape(const char *func, const char *na, const tensor_t *a, const char *nb,
                         const tensor_t *b)
{
    bool same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    if (same) return FX_OK;
    char b1[160], b2[160];
    return fx_error(FX_ESHAPE, func, "%s.shape=%s != %s.shape=%s", na,
                    fx_shape_str(a, b1, sizeof b1), nb, fx_shape_str(b, b2, sizeof b2));
}

static int fx_unary_forward(tensor_t *out, const tensor_t *a, int fn, double p0, double p1,
                            const char *func)
{
    int rc = fx_same_shape(func, "out", out, "a", a);
    if (rc) return rc;
    fx_op_request rq = {.op = FX_OP_UNARY, .func = func, .out = out, .nin = 1, .in = {a},
                        .unary_fn = fn, .unary_p = {p0, p1}};
    return fx_dispatch(&rq);
}

static int fx_unary_grad(tensor_t *dx, const tensor_t *dy, const tensor_t *x, int fn, double p0,
                         double p1, const char *func)
{
    int rc = fx_same_shape(func, "dy", dy, "x", x);
    if (!rc) rc = fx_same_shape(func, "dx", dx, "dy", dy);
    if (rc) return rc;
    fx_op_request rq = {.op = FX_OP_UNARY_BACKWARD, .func = func, .out = dx, .nin = 2,
                        .in = {dy, x}, .unary_fn = fn, .unary_p = {p0, p1}};
    return fx_dispatch(&rq);
}

int tensor_unary(tensor_t *out, const tensor_t *a, const char *fn)
{
    if (!out || !a) return FX_FAIL(FX_EINVAL, "%s is NULL", !out ? "out" : "a");
    int id = 0;
    int rc = fx_unary_lookup(fn, __func__, &id);
    return rc ? rc : fx_unary_forward(out, a, id, 0.0, 0.0, __func__);
}

int tensor_unary_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x, const char *fn)
{
    if (!dx || !dy || !x)
        return FX_FAIL(FX_EINVAL, "%s is NULL", !dx ? "dx" : (!dy ? "dy" : "x"));
    int id = 0;
    int rc = fx_unary_lookup(fn, __func__, &id);
    return rc ? rc : fx_unary_grad(dx, dy, x, id, 0.0, 0.0, __func__);
}

static int fx_clamp_bounds(double lo, double hi, const char *func)
{
    if (isnan(lo) || isnan(hi))
        return fx_error(FX_EINVAL, func, "the bounds must not be NaN (lo=%g, hi=%g)", lo, hi);
    if (lo > hi) return fx_error(FX_EINVAL, func, "lo=%g > hi=%g", lo, hi);
    return FX_OK;
}

int tensor_clamp(tensor_t *out, const tensor_t *a, double lo, double hi)
{
    if (!out || !a) return FX_FAIL(FX_EINVAL, "%s is NULL", !out ? "out" : "a");
    int rc = fx_clamp_bounds(lo, hi, __func__);
    return rc ? rc : fx_unary_forward(out, a, FX_UN_CLAMP, lo, hi, __func__);
}

int tensor_clamp_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x, double lo,
                          double hi)
{
    if (!dx || !dy || !x)
        return FX_FAIL(FX_EINVAL, "%s is NULL", !dx ? "dx" : (!dy ? "dy" : "x"));
    int rc = fx_clamp_bounds(lo, hi, __func__);
    return rc ? rc : fx_unary_grad(dx, dy, x, FX_UN_CLAMP, lo, hi, __func__);
}

int tensor_pow_scalar(tensor_t *out, const tensor_t *a, double p)
{
    if (!out || !a) return FX_FAIL(FX_EINVAL, "%s is NULL", !out ? "out" : "a");
    if (!isfinite(p)) return FX_FAIL(FX_EINVAL, "the exponent p=%g is not finite", p);
    return fx_unary_forward(out, a, FX_UN_POW, p, 0.0, __func__);
}

int tensor_pow_scalar_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x, double p)
{
    if (!dx || !dy || !x)
        return FX_FAIL(FX_EINVAL, "%s is NULL", !dx ? "dx" : (!dy ? "dy" : "x"));
    if (!isfinite(p)) return FX_FAIL(FX_EINVAL, "the exponent p=%g is not finite", p);
    return fx_unary_grad(dx, dy, x, FX_UN_POW, p, 0.0, __func__);
}
