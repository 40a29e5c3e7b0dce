/* Embedding lookup and its scatter-add gradient (include/flexpoint_nn.h,
 * docs/transformer_ops.md).
 *
 *   forward:  y[i, :] = table[idx[i], :]            (y viewed as [n, D], table [V, D])
 *   backward: dtable[v, :] = sum over i with idx[i] = v of dy[i, :]   (zero rows elsewhere)
 *
 * Arithmetic:
 *   - FLEX16_5/DFP16 table (forward) or dy (backward): integers only. The forward gathers the
 *     int16 mantissas exactly (an int16 stage at the table's exponent); the backward adds the
 *     mantissas of dy exactly in int64 at dy's exponent. Each output is then one write (one
 *     rounding to its exponent, with the write's statistics). The results are the same bits
 *     on every backend and thread count.
 *   - fp32/fp16/bf16: the forward copies the widened values (exact: an fp16 table gathered into
 *     an fp16 y keeps its bits); the backward sums each element in double, in index order, and
 *     rounds once into dtable's format (through fp32 with round-to-odd when dtable is not fp32).
 * Every index is checked before anything is written: one outside [0, V) gives FX_ERANGE naming
 * it. Special values are data: NaN and Inf rows are gathered as they are, and summed by IEEE
 * rules in the backward (a shared-exponent output counts them as non-finite).
 */
#include "tfm_common.h"
#include "nn_ops.h"
#include "flexpoint_nn.h"

#include <string.h>

static int emb_validate(const char *func, const char *tn, const tensor_t *table, const char *yn,
                        const tensor_t *y, const int32_t *idx, int64_t nidx, int64_t *V,
                        int64_t *D)
{
    char b1[160], b2[160];
    if (!table || !y) return fx_error(FX_EINVAL, func, "%s is NULL", !table ? tn : yn);
    if (nidx < 0) return fx_error(FX_EINVAL, func, "n_indices=%lld is negative", (long long)nidx);
    if (nidx > 0 && !idx) return fx_error(FX_EINVAL, func, "indices is NULL");
    if (table->ndim != 2)
        return fx_error(FX_ESHAPE, func, "%s must be 2-D [V, D], got %s.shape=%s", tn, tn,
                        fx_shape_str(table, b1, sizeof b1));
    *V = table->shape[0];
    *D = table->shape[1];
    const int64_t ny = fx_numel_of(y->ndim, y->shape);
    if (y->shape[y->ndim - 1] != *D || (*D > 0 && ny / *D != nidx))
        return fx_error(FX_ESHAPE, func, "%s.shape=%s must be [..., D=%lld] holding n_indices="
                        "%lld rows (%s.shape=%s)", yn, fx_shape_str(y, b1, sizeof b1),
                        (long long)*D, (long long)nidx, tn, fx_shape_str(table, b2, sizeof b2));
    for (int64_t i = 0; i < nidx; i++)
        if (idx[i] < 0 || (int64_t)idx[i] >= *V)
            return fx_error(FX_ERANGE, func, "indices[%lld]=%d is outside the table's rows "
                            "[0, %lld)", (long long)i, (int)idx[i], (long long)*V);
    return FX_OK;
}

/* One embedding op on validated arguments for the dispatcher: out from in (named on, inn) at
 * the n indices, over a V x D table. The indices are host memory wherever the tensors live
 * (emb_validate has read them). */
static int emb_run(int op, const char *func, tensor_t *out, const char *on, const tensor_t *in,
                   const char *inn, const int32_t *indices, int64_t n, int64_t V, int64_t D)
{
    fx_op_args a = {.op = op, .func = func, .nt = 2, .t = {out, in}, .tn = {on, inn}};
    a.u.tfm.out = out;
    a.u.tfm.in[0] = in;
    a.u.tfm.indices = indices;
    a.u.tfm.n = n;
    a.u.tfm.R = V;
    a.u.tfm.D = D;
    return fx_op_run(&a);
}

int tensor_embedding(tensor_t *y, const tensor_t *table, const int32_t *indices,
                     int64_t n_indices)
{
    const char *func = __func__;
    int64_t V = 0, D = 0;
    int rc = emb_validate(func, "table", table, "y", y, indices, n_indices, &V, &D);
    if (rc) return rc;
    return emb_run(FX_OP_EMBEDDING, func, y, "y", table, "table", indices, n_indices, V, D);
}

int fx_nn_embedding_host(const fx_op_args *r)
{
    tensor_t *y = r->u.tfm.out;
    const tensor_t *table = r->u.tfm.in[0];
    const int32_t *indices = r->u.tfm.indices;
    const int64_t n_indices = r->u.tfm.n, D = r->u.tfm.D;
    const char *func = r->func;
    int rc;
    const int64_t n = n_indices * D;
    if (n == 0) return FX_OK;
    fx_scratch s = {.n = 0};
    if (fx_is_int_compute(table)) {
        const int16_t *tm;
        int e;
        int16_t *v = fx_scratch_alloc(&s, n, sizeof *v);
        if (!v) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld int16 values", (long long)n);
            goto done;
        }
        if ((rc = nn_in_i16(table, &tm, &e, &s, func))) goto done;
        for (int64_t i = 0; i < n_indices; i++)
            memcpy(v + i * D, tm + (int64_t)indices[i] * D, sizeof *v * (size_t)D);
        rc = fx_write_i16(y, v, e, func);
    } else {
        const float *tv;
        if ((rc = nn_in_f32(table, &tv, &s, func))) goto done;
        const tensor_t *ins[1] = {table};
        float *v = nn_out_f32(y, ins, 1, NULL, &s);
        if (!v) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)n);
            goto done;
        }
        for (int64_t i = 0; i < n_indices; i++)
            memcpy(v + i * D, tv + (int64_t)indices[i] * D, sizeof *v * (size_t)D);
        rc = fx_write_f32(y, v, func);
    }
done:
    fx_scratch_free(&s);
    return rc;
}

int tensor_embedding_backward(tensor_t *dtable, const tensor_t *dy, const int32_t *indices,
                              int64_t n_indices)
{
    const char *func = __func__;
    int64_t V = 0, D = 0;
    int rc = emb_validate(func, "dtable", dtable, "dy", dy, indices, n_indices, &V, &D);
    if (rc) return rc;
    return emb_run(FX_OP_EMBEDDING_BACKWARD, func, dtable, "dtable", dy, "dy", indices, n_indices,
                   V, D);
}

int fx_nn_embedding_backward_host(const fx_op_args *r)
{
    tensor_t *dtable = r->u.tfm.out;
    const tensor_t *dy = r->u.tfm.in[0];
    const int32_t *indices = r->u.tfm.indices;
    const int64_t n_indices = r->u.tfm.n, V = r->u.tfm.R, D = r->u.tfm.D;
    const char *func = r->func;
    int rc;
    const int64_t n = V * D;
    if (n == 0) return FX_OK;
    fx_scratch s = {.n = 0};
    if (fx_is_int_compute(dy)) {
        const int16_t *gm;
        int e;
        int64_t *v = fx_scratch_alloc(&s, n, sizeof *v);
        if (!v) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld int64 values", (long long)n);
            goto done;
        }
        if ((rc = nn_in_i16(dy, &gm, &e, &s, func))) goto done;
        memset(v, 0, sizeof *v * (size_t)n);
        /* each sum has at most n_indices terms below 2^15: exact in int64 */
        for (int64_t i = 0; i < n_indices; i++) {
            int64_t *row = v + (int64_t)indices[i] * D;
            const int16_t *g = gm + i * D;
            for (int64_t k = 0; k < D; k++) row[k] += g[k];
        }
        rc = fx_write_i64(dtable, v, e, func);
    } else {
        const float *gv;
        double *acc = fx_scratch_alloc(&s, n, sizeof *acc);
        if (!acc) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld doubles", (long long)n);
            goto done;
        }
        if ((rc = nn_in_f32(dy, &gv, &s, func))) goto done;
        const tensor_t *ins[1] = {dy};
        float *v = nn_out_f32(dtable, ins, 1, NULL, &s);
        if (!v) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)n);
            goto done;
        }
        memset(acc, 0, sizeof *acc * (size_t)n);
        for (int64_t i = 0; i < n_indices; i++) {
            double *row = acc + (int64_t)indices[i] * D;
            const float *g = gv + i * D;
            for (int64_t k = 0; k < D; k++) row[k] += (double)g[k];
        }
        const fmt_t f = dtable->fmt;
        for (int64_t j = 0; j < n; j++) v[j] = nn_stage_f32(acc[j], f);
        rc = fx_write_f32(dtable, v, func);
    }
done:
    fx_scratch_free(&s);
    return rc;
}
