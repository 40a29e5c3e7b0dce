/* Softmax cross-entropy: the mean loss over the batch and, optionally, its gradient, in one op.
 *
 * Precision (docs/formats.md: softmax and losses are not fixed-point in nature): the logits of any
 * format are dequantised/widened exactly to fp32, and each row is computed in double
 * (log-sum-exp with the row maximum subtracted, exp and log from libm, sums in double), which
 * costs little next to the rest of a training step and makes the fp32 results nearly
 * correctly rounded. The loss is returned as fp32; the gradient
 *     dlogits = grad_scale * (softmax(logits) - onehot(labels)) / N
 * is rounded from double once into dlogits' format (through fp32 with round-to-odd when dlogits
 * is not fp32, so that the 16-bit rounding is the only one) by the one write path.
 *
 * Non-finite logits are data, not errors: a NaN or +Inf logit makes its row's loss and its whole
 * gradient row NaN (as IEEE arithmetic gives), and so the mean loss; a -Inf logit that is not
 * the label only gets probability 0. A shared-exponent dlogits counts the NaNs as non-finite
 * inputs of its write (tensor_stat "nonfinite"), which the loss scaler reads.
 *
 * Rows are independent, each computed by one thread in a fixed order, and the mean is summed in
 * row order, so the results do not depend on the thread count or the backend.
 */
#include "nn_stage.h"
#include "nn_ops.h"
#include "softmax_ce.h"

#include <math.h>

static int nn_ce_validate(const float *loss, const tensor_t *dlogits, const tensor_t *logits,
                          const int32_t *labels, double grad_scale, const char *func)
{
    char b1[160], b2[160];
    if (!loss) return fx_error(FX_EINVAL, func, "loss is NULL");
    if (!logits) return fx_error(FX_EINVAL, func, "logits is NULL");
    if (!labels) return fx_error(FX_EINVAL, func, "labels is NULL");
    if (logits->ndim != 2)
        return fx_error(FX_ESHAPE, func, "logits must be 2-D [N, K], got logits.shape=%s",
                        fx_shape_str(logits, b1, sizeof b1));
    const int64_t N = logits->shape[0], K = logits->shape[1];
    if (N == 0)
        return fx_error(FX_ESHAPE, func, "the batch is empty (logits.shape=%s): the mean loss "
                        "is undefined", fx_shape_str(logits, b1, sizeof b1));
    if (K == 0)
        return fx_error(FX_ESHAPE, func, "no classes (logits.shape=%s)",
                        fx_shape_str(logits, b1, sizeof b1));
    if (dlogits && (dlogits->ndim != 2 || dlogits->shape[0] != N || dlogits->shape[1] != K))
        return fx_error(FX_ESHAPE, func, "dlogits.shape=%s != logits.shape=%s",
                        fx_shape_str(dlogits, b1, sizeof b1),
                        fx_shape_str(logits, b2, sizeof b2));
    if (!isfinite(grad_scale))
        return fx_error(FX_EINVAL, func, "grad_scale=%g is not finite", grad_scale);
    for (int64_t i = 0; i < N; i++)
        if (labels[i] < 0 || (int64_t)labels[i] >= K)
            return fx_error(FX_ERANGE, func, "labels[%lld]=%d is outside [0, %lld)",
                            (long long)i, (int)labels[i], (long long)K);
    return FX_OK;
}

/* The host computation: each row's loss into row_loss (caller's, N doubles; NULL: scratch)
 * and, with dlogits, the gradient grad_scale * (softmax - onehot) / n_div; *loss (may be
 * NULL) the mean over the N rows. */
static int nn_softmax_ce_host(float *loss, double *row_loss_out, tensor_t *dlogits,
                              const tensor_t *logits, const int32_t *labels, double grad_scale,
                              int64_t n_div, const char *func)
{
    int rc = FX_OK;
    const int64_t N = logits->shape[0], K = logits->shape[1];
    fx_scratch s = {.n = 0};
    const float *x;
    float *g = NULL;
    double *row_loss = row_loss_out ? row_loss_out : fx_scratch_alloc(&s, N, sizeof *row_loss);
    if (!row_loss) {
        rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld doubles", (long long)N);
        goto done;
    }
    if ((rc = nn_in_f32(logits, &x, &s, func))) goto done;
    if (dlogits) {
        const tensor_t *ins[1] = {logits};
        g = nn_out_f32(dlogits, ins, 1, NULL, &s);
        if (!g) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)(N * K));
            goto done;
        }
    }

    const double gscale = grad_scale / (double)n_div;
    const fmt_t gfmt = dlogits ? dlogits->fmt : FMT_FP32;
    const int nt = N > 1 ? nn_threads_for(N * K) : 1;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t i = 0; i < N; i++) {
        const float *xr = x + i * K;
        /* NaN never wins the comparison; it reaches the sum below and poisons the row */
        double m = -INFINITY;
        for (int64_t j = 0; j < K; j++)
            if (xr[j] > m) m = xr[j];
        /* the label's term is kept apart: 1 - p_label = others / sum and the loss
         * log1p(others / e_label) then keep their precision when p_label is close to 1 */
        const int32_t lab = labels[i];
        const double e_lab = exp((double)xr[lab] - m);
        double others = 0.0;
        for (int64_t j = 0; j < K; j++)
            if (j != lab) others += exp((double)xr[j] - m);
        const double sum = e_lab + others;
        /* e_lab > 1/e: the log1p form (no cancellation). Otherwise p_label <= e_lab <= 1/e,
         * so the loss is >= 1 and the plain form is accurate (e_lab may even underflow). */
        row_loss[i] = (double)xr[lab] - m > -1.0 ? log1p(others / e_lab)
                                                 : m + log(sum) - (double)xr[lab];
        if (g) {
            float *gr = g + i * K;
            const double c = gscale / sum;
            for (int64_t j = 0; j < K; j++) {
                double v = j == lab ? -others * c : exp((double)xr[j] - m) * c;
                gr[j] = nn_stage_f32(v, gfmt);
            }
        }
    }
    double total = 0.0;
    for (int64_t i = 0; i < N; i++) total += row_loss[i];
    if (g) rc = fx_write_f32(dlogits, g, func);
    if (rc == FX_OK && loss) *loss = (float)(total / (double)N);
done:
    fx_scratch_free(&s);
    return rc;
}

/* The request of both softmax cross-entropy ops, without their loss outputs. */
static fx_op_args ce_args(int op, const char *func, tensor_t *dlogits, const tensor_t *logits,
                          const int32_t *labels, double grad_scale)
{
    fx_op_args a = {.op = op, .func = func, .nt = 2, .t = {logits, dlogits},
                    .tn = {"logits", "dlogits"}};
    a.u.ce.dlogits = dlogits;
    a.u.ce.logits = logits;
    a.u.ce.labels = labels;
    a.u.ce.grad_scale = grad_scale;
    return a;
}

int tensor_softmax_cross_entropy(float *loss, tensor_t *dlogits, const tensor_t *logits,
                                 const int32_t *labels, double grad_scale)
{
    fx_op_args a = ce_args(FX_OP_SOFTMAX_CE, __func__, dlogits, logits, labels, grad_scale);
    a.u.ce.loss = loss;
    int rc;
    /* the validation reads labels, which must be memory the host can read wherever the
     * tensors live (flexpoint_gpu.h); a bad placement is reported first */
    if (loss && logits && labels && (rc = fx_op_host_readable(&a, labels, "labels"))) return rc;
    rc = nn_ce_validate(loss, dlogits, logits, labels, grad_scale, __func__);
    if (rc) return rc;
    return fx_op_run(&a);
}

int fx_nn_softmax_ce_host(const fx_op_args *a)
{
    return nn_softmax_ce_host(a->u.ce.loss, NULL, a->u.ce.dlogits, a->u.ce.logits,
                              a->u.ce.labels, a->u.ce.grad_scale, a->u.ce.logits->shape[0],
                              a->func);
}

int fx_softmax_ce_rows(double *row_loss, tensor_t *dlogits, const tensor_t *logits,
                       const int32_t *labels, double grad_scale, int64_t n_div)
{
    if (!row_loss || n_div < 1)
        return FX_FAIL(FX_EINVAL, "%s", !row_loss ? "row_loss is NULL" : "n_div must be >= 1");
    float unused = 0.0f; /* nn_ce_validate only checks that the pointer is not NULL */
    int rc = nn_ce_validate(&unused, dlogits, logits, labels, grad_scale, __func__);
    if (rc) return rc;
    fx_op_args a = ce_args(FX_OP_SOFTMAX_CE_ROWS, __func__, dlogits, logits, labels, grad_scale);
    a.u.ce.row_loss = row_loss;
    a.u.ce.n_div = n_div;
    return fx_op_run(&a);
}

int fx_nn_softmax_ce_rows_host(const fx_op_args *a)
{
    return nn_softmax_ce_host(NULL, a->u.ce.row_loss, a->u.ce.dlogits, a->u.ce.logits,
                              a->u.ce.labels, a->u.ce.grad_scale, a->u.ce.n_div, a->func);
}
