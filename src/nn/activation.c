/* ReLU backward: dx = dy where x > 0, else 0 (PyTorch's threshold_backward: x == 0 gives 0).
 *
 * The op is a selection, so no value is ever computed, only kept or dropped:
 *   - dy FLEX16_5/DFP16 (integer compute): dy's int16 mantissas are kept as exact int64
 *     values at dy's exponent and written once; the write is exact whenever dx's exponent is
 *     not coarser than dy's (always for a DFP16 dx, which picks the exact exponent).
 *   - dy fp32/fp16/bf16: dy is widened exactly to fp32, the kept values are written once (an
 *     exact copy when dx has dy's format). A NaN in dy is kept where x > 0, as in PyTorch.
 * x may have any format; only its sign is used (a NaN x counts as "not > 0"), read from its
 * stored values without conversion.
 */
#include "nn_stage.h"

/* keep[i] = 1 where x[i] > 0, read from x's own values without widening: int16 mantissas,
 * fp32 values, or fp16/bf16 bit patterns (positive: sign clear, nonzero, at most +Inf, which
 * excludes NaN). */
static int nn_positive_mask(const tensor_t *x, uint8_t *keep, int64_t n, int nt, fx_scratch *s,
                            const char *func)
{
    int rc;
    (void)nt;
    if (fmt_is_shared_exponent(x->fmt)) {
        const int16_t *m;
        int e;
        if ((rc = nn_in_i16(x, &m, &e, s, func))) return rc;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
        for (int64_t i = 0; i < n; i++) keep[i] = m[i] > 0;
    } else if (x->fmt == FMT_FP32) {
        const float *v;
        if ((rc = nn_in_f32(x, &v, s, func))) return rc;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
        for (int64_t i = 0; i < n; i++) keep[i] = v[i] > 0.0f;
    } else {
        fx_operand o; /* contiguous 16-bit patterns, not converted */
        if ((rc = fx_operand_make(x, 0, x->fmt, 0, 0, NULL, &o, s, func))) return rc;
        const uint16_t *h = o.data;
        const uint16_t inf = x->fmt == FMT_FP16 ? 0x7c00 : 0x7f80;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
        for (int64_t i = 0; i < n; i++) keep[i] = h[i] != 0 && h[i] <= inf;
    }
    return FX_OK;
}

int tensor_relu_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x)
{
    if (!dx || !dy || !x)
        return FX_FAIL(FX_EINVAL, "%s is NULL", !dx ? "dx" : (!dy ? "dy" : "x"));
    int rc = nn_same_shape(__func__, "dy", dy, "x", x);
    if (!rc) rc = nn_same_shape(__func__, "dx", dx, "dy", dy);
    if (rc) return rc;

    const int64_t n = fx_numel_of(dy->ndim, dy->shape);
    const int nt = nn_threads_for(n);
    (void)nt;
    fx_scratch s = {.n = 0};
    uint8_t *keep = fx_scratch_alloc(&s, n, sizeof *keep);
    if (!keep) {
        rc = FX_FAIL(FX_ENOMEM, "cannot allocate a mask of %lld elements", (long long)n);
        goto done;
    }
    if ((rc = nn_positive_mask(x, keep, n, nt, &s, __func__))) goto done;

    if (fx_is_int_compute(dy)) {
        const int16_t *g;
        int e;
        /* masked mantissas: an int16 stage (fx_write_i16), no widening */
        int16_t *v = fx_scratch_alloc(&s, n, sizeof *v);
        if (!v) {
            rc = FX_FAIL(FX_ENOMEM, "cannot allocate %lld int16 values", (long long)n);
            goto done;
        }
        if ((rc = nn_in_i16(dy, &g, &e, &s, __func__))) goto done;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
        for (int64_t i = 0; i < n; i++) v[i] = keep[i] ? g[i] : 0;
        rc = fx_write_i16(dx, v, e, __func__);
    } else {
        const float *g;
        const tensor_t *ins[2] = {dy, x};
        if ((rc = nn_in_f32(dy, &g, &s, __func__))) goto done;
        float *v = nn_out_f32(dx, ins, 2, nn_private_f32(dy, g), &s);
        if (!v) {
            rc = FX_FAIL(FX_ENOMEM, "cannot allocate %lld floats", (long long)n);
            goto done;
        }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
        for (int64_t i = 0; i < n; i++) v[i] = keep[i] ? g[i] : 0.0f;
        rc = fx_write_f32(dx, v, __func__);
    }
done:
    fx_scratch_free(&s);
    return rc;
}
