/* Dropout: y = x * mask / (1 - p), forward and backward.
 *
 * Mask: element i (row-major index over the logical shape) is dropped when
 * fx_rng_unit(seed, step, i) < p, i.e. when the top 53 bits of fx_rng_u64(seed, step, i),
 * read as a fraction in [0, 1), fall below p. The generator is a pure function of
 * (seed, step, i) (src/flex/flex_math.h), so the mask is the same for any thread count and
 * backend, and the backward pass recomputes the very same mask from the same key.
 *
 * Arithmetic:
 *   - x FLEX16_5/DFP16 (integer compute, no dequantisation): the kept int16 mantissas are
 *     multiplied exactly by the factor 1/(1-p) rounded to a 31-bit mantissa m_s * 2^k_s (as
 *     tensor_scale does; relative error <= 2^-30, exact for p = 0, 1/2, 3/4, ...), the int64
 *     products at exponent e_x + k_s are written once (one rounding to y's exponent). Dropped
 *     elements are exact zeros.
 *   - x fp32/fp16/bf16: x is widened exactly to fp32 and multiplied in double by
 *     mask * (1/(1-p)), then rounded once into y's format (through fp32 with round-to-odd when
 *     y is not fp32). As in PyTorch, the mask multiplies: a dropped NaN/Inf stays NaN.
 * p == 0 keeps every element with factor 1, which is the identity (exact values).
 * Backward: dx = dy * mask / (1 - p) with the same mask: the same computation applied to dy.
 */
#include "nn_stage.h"
#include "nn_ops.h"

#include <math.h>

/* fx_rng_unit(seed, step, i) < p, i.e. (u64 >> 11) * 2^-53 < p, is (u64 >> 11) < p * 2^53 and,
 * the left side being an integer, (u64 >> 11) < ceil(p * 2^53): an integer comparison (p * 2^53
 * is exact, and at most 2^53). A table lookup on the result keeps the loops branch-free: the
 * mask is a coin flip, which a branch predictor cannot learn. */
static uint64_t nn_drop_threshold(double p) { return (uint64_t)ceil(ldexp(p, 53)); }

static inline int nn_dropped(uint64_t seed, uint64_t step, int64_t i, uint64_t thr)
{
    return (fx_rng_u64(seed, step, (uint64_t)i) >> 11) < thr;
}

static int nn_dropout(const char *func, const char *yname, tensor_t *y, const char *xname,
                      const tensor_t *x, double p, uint64_t seed, uint64_t step)
{
    if (!y || !x) return fx_error(FX_EINVAL, func, "%s is NULL", !y ? yname : xname);
    int rc = nn_same_shape(func, yname, y, xname, x);
    if (rc) return rc;
    if (!(p >= 0.0 && p < 1.0))
        return fx_error(FX_EINVAL, func, "p=%g is outside [0, 1)", p);

    const double factor = 1.0 / (1.0 - p);
    const uint64_t thr = nn_drop_threshold(p);
    /* factor = f * 2^k2, f in [0.5, 1): mantissa round(f * 2^30) <= 2^30, so each integer
     * product |m * ms| <= 2^45 is exact */
    int k2;
    const double f = frexp(factor, &k2);
    const int64_t ms = (int64_t)nearbyint(f * 1073741824.0);
    fx_op_args a = {.op = FX_OP_DROPOUT, .func = func, .nt = 2, .t = {y, x}, .tn = {yname, xname}};
    a.u.dropout.y = y;
    a.u.dropout.x = x;
    a.u.dropout.thr = thr;
    a.u.dropout.factor = factor;
    a.u.dropout.ms = ms;
    a.u.dropout.k2 = k2;
    a.u.dropout.seed = seed;
    a.u.dropout.step = step;
    return fx_op_run(&a);
}

int fx_nn_dropout_host(const fx_op_args *a)
{
    tensor_t *y = a->u.dropout.y;
    const tensor_t *x = a->u.dropout.x;
    const char *func = a->func;
    const uint64_t thr = a->u.dropout.thr, seed = a->u.dropout.seed, step = a->u.dropout.step;
    const double factor = a->u.dropout.factor;
    const int64_t ms = a->u.dropout.ms, n = fx_numel_of(x->ndim, x->shape);
    const int k2 = a->u.dropout.k2;
    int rc = FX_OK;
    const int nt = nn_threads_for(n);
    (void)nt;
    fx_scratch sc = {.n = 0};
    if (fx_is_int_compute(x)) {
        const int16_t *m;
        int e;
        int64_t *v = fx_scratch_alloc(&sc, n, sizeof *v);
        if (!v) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld int64 values", (long long)n);
            goto done;
        }
        if ((rc = nn_in_i16(x, &m, &e, &sc, func))) goto done;
        const int64_t mul[2] = {ms, 0}; /* [dropped] */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
        for (int64_t i = 0; i < n; i++) v[i] = m[i] * mul[nn_dropped(seed, step, i, thr)];
        rc = fx_write_i64(y, v, e + k2 - 30, func);
    } else {
        const float *xv;
        const tensor_t *ins[1] = {x};
        if ((rc = nn_in_f32(x, &xv, &sc, func))) goto done;
        float *v = nn_out_f32(y, ins, 1, nn_private_f32(x, xv), &sc);
        if (!v) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)n);
            goto done;
        }
        const fmt_t yf = y->fmt;
        const double mul[2] = {factor, 0.0}; /* [dropped] */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
        for (int64_t i = 0; i < n; i++)
            v[i] = nn_stage_f32((double)xv[i] * mul[nn_dropped(seed, step, i, thr)], yf);
        rc = fx_write_f32(y, v, func);
    }
done:
    fx_scratch_free(&sc);
    return rc;
}

int tensor_dropout(tensor_t *y, const tensor_t *x, double p, uint64_t seed, uint64_t step)
{
    return nn_dropout(__func__, "y", y, "x", x, p, seed, step);
}

int tensor_dropout_backward(tensor_t *dx, const tensor_t *dy, double p, uint64_t seed,
                            uint64_t step)
{
    return nn_dropout(__func__, "dx", dx, "dy", dy, p, seed, step);
}
