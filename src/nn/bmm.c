/* Batched matrix products with transposes, their gradient, and attention masks
 * (include/flexpoint_nn.h, docs/transformer_ops.md).
 *
 * tensor_bmm: out[..., M, N] = op(a)[..., M, K] x op(b)[..., K, N], op(t) = t or its transpose
 * over the last two axes; the leading (batch) axes of a, b and out are equal. Each batch runs
 * through the active backend's matmul kernel (fx_matmul_stage, the kernel tensor_matmul uses)
 * on 2-D operands whose strides express the transposes, so no transpose is copied:
 *   - a FLEX16_5/DFP16 (integer compute): the int16 mantissas of a and b (a float b quantised
 *     at its exact exponent) give the exact int64 sums of the products, at exponent
 *     e_a + e_b, for every batch into one int64 stage, written once (one rounding, one exponent
 *     for the whole output). The sums are exact, so the bits are the same on every backend,
 *     blocking and thread count, and equal tensor_matmul's for one batch.
 *   - bf16 a and b: the bf16 MATMUL kernel of the route in use (amx, dpbf16 or widen: the
 *     one tensor_matmul runs) into an fp32 stage, each item the same bits as tensor_matmul of
 *     its two matrices;
 *   - otherwise: fp32 operands (fp16/bf16 widened exactly, shared-exponent b dequantised), the
 *     fp32 GEMM into an fp32 stage, rounded once into out's format (as tensor_matmul's fp32
 *     route). Many small items run side by side on the threads, one thread each.
 * tensor_bmm_backward expresses both gradients as tensor_bmm calls with the transposes swapped.
 *
 * tensor_causal_mask / tensor_masked_fill: y = x, with `fill` where the mask says so. Kept
 * elements are copied exactly (a shared-exponent x with fill 0 keeps its mantissas: an int16
 * stage), masked ones take fill rounded once into y's format. -Inf has no shared-exponent
 * representation: written into a FLEX16_5/DFP16 y it is stored as -32767 and counted as
 * non-finite, so mask attention scores into a float y (fp32/fp16/bf16) when fill is -Inf.
 */
#include "tfm_common.h"
#include "nn_ops.h"
#include "flexpoint_nn.h"
#include "../core/dispatch.h"
#include "../core/shared_matmul.h"

#include <math.h>
#include <string.h>

/* Geometry of one bmm: batch count, and the stored [rows, cols] of a and b's last two axes. */
typedef struct {
    int64_t B, M, N, K;
    int64_t ar, ac, br, bc;
} bmm_dims;

static int bmm_validate(const char *func, const tensor_t *out, const tensor_t *a,
                        const tensor_t *b, int ta, int tb, bmm_dims *d)
{
    char s1[160], s2[160], s3[160];
    if (!out || !a || !b)
        return fx_error(FX_EINVAL, func, "%s is NULL", !out ? "out" : (!a ? "a" : "b"));
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
        return fx_error(FX_EINVAL, func, "trans_a=%d and trans_b=%d must be 0 or 1", ta, tb);
    if (a->ndim < 2 || b->ndim != a->ndim || out->ndim != a->ndim)
        return fx_error(FX_ESHAPE, func, "a, b and out need the same number (>= 2) of axes, got "
                        "a.shape=%s b.shape=%s out.shape=%s", fx_shape_str(a, s1, sizeof s1),
                        fx_shape_str(b, s2, sizeof s2), fx_shape_str(out, s3, sizeof s3));
    const int nd = a->ndim;
    d->B = 1;
    for (int i = 0; i < nd - 2; i++) {
        if (a->shape[i] != b->shape[i] || a->shape[i] != out->shape[i])
            return fx_error(FX_ESHAPE, func, "batch axis %d differs: a.shape=%s b.shape=%s "
                            "out.shape=%s", i, fx_shape_str(a, s1, sizeof s1),
                            fx_shape_str(b, s2, sizeof s2), fx_shape_str(out, s3, sizeof s3));
        d->B *= a->shape[i];
    }
    d->ar = a->shape[nd - 2];
    d->ac = a->shape[nd - 1];
    d->br = b->shape[nd - 2];
    d->bc = b->shape[nd - 1];
    d->M = ta ? d->ac : d->ar;
    d->K = ta ? d->ar : d->ac;
    const int64_t kb = tb ? d->bc : d->br;
    d->N = tb ? d->br : d->bc;
    if (kb != d->K)
        return fx_error(FX_ESHAPE, func, "inner sizes differ: op(a) is [%lld, %lld] (a.shape=%s, "
                        "trans_a=%d) but op(b) is [%lld, %lld] (b.shape=%s, trans_b=%d)",
                        (long long)d->M, (long long)d->K, fx_shape_str(a, s1, sizeof s1), ta,
                        (long long)kb, (long long)d->N, fx_shape_str(b, s2, sizeof s2), tb);
    if (out->shape[nd - 2] != d->M || out->shape[nd - 1] != d->N)
        return fx_error(FX_ESHAPE, func, "out.shape=%s but the product is [..., %lld, %lld]",
                        fx_shape_str(out, s1, sizeof s1), (long long)d->M, (long long)d->N);
    return FX_OK;
}

/* Where an operand's items lie: item i (row-major over the batch axes) starts at element
 * sum_d idx_d(i) * bstride[d] of base, its rows ld elements apart, its columns adjacent. */
typedef struct {
    const void *base;
    int nb;
    int64_t bshape[FX_MAX_DIMS], bstride[FX_MAX_DIMS];
    int64_t ld;
} bmm_items_at;

/* A contiguous operand: items of rows x cols one after another. */
static bmm_items_at bmm_items_packed(const void *base, int64_t B, int64_t rows, int64_t cols)
{
    bmm_items_at w = {.base = base, .nb = 1, .ld = cols};
    w.bshape[0] = B;
    w.bstride[0] = rows * cols;
    return w;
}

/* t read where it lies (a host tensor already in the compute format whose last axis is
 * contiguous: the attention's heads, [B, T, H, D/H] viewed as [B, H, T, D/H], whose rows are
 * D apart), so that no copy of it is gathered first; 0 where t does not qualify. */
static int bmm_items_in_place(const tensor_t *t, fmt_t cf, bmm_items_at *w)
{
    const int nd = t->ndim;
    if (t->fmt != cf || t->st->on_device || t->strides[nd - 1] != 1 ||
        t->strides[nd - 2] < t->shape[nd - 1])
        return 0;
    for (int d = 0; d < nd; d++)
        if (t->strides[d] < 0) return 0;
    w->base = fx_tensor_base(t);
    w->nb = nd - 2;
    for (int d = 0; d < nd - 2; d++) {
        w->bshape[d] = t->shape[d];
        w->bstride[d] = t->strides[d];
    }
    w->ld = t->strides[nd - 2];
    return 1;
}

static int64_t bmm_item_offset(const bmm_items_at *w, int64_t i)
{
    int64_t off = 0;
    for (int d = w->nb - 1; d >= 0; d--) {
        off += (i % w->bshape[d]) * w->bstride[d];
        i /= w->bshape[d];
    }
    return off;
}

/* The item layout w as fx_shared_bmm's two levels (unit batch axes dropped, axes that step
 * through memory as one merged); 0 where more than two levels remain. */
static int bmm_items_two_level(const bmm_items_at *w, fx_sm_items *o)
{
    int64_t sh[2], st[2];
    int n = 0;
    for (int d = 0; d < w->nb; d++) {
        if (w->bshape[d] == 1) continue;
        if (n > 0 && st[n - 1] == w->bshape[d] * w->bstride[d]) {
            sh[n - 1] *= w->bshape[d];
            st[n - 1] = w->bstride[d];
        } else {
            if (n == 2) return 0;
            sh[n] = w->bshape[d];
            st[n] = w->bstride[d];
            n++;
        }
    }
    if (n == 2) *o = (fx_sm_items){.step = st[0], .inner = sh[1], .inner_step = st[1]};
    else *o = (fx_sm_items){.step = n ? st[0] : 0, .inner = 1, .inner_step = 0};
    return 1;
}

/* An integer bmm's operand t as int16 mantissas and its exponent: a FLEX16_5/DFP16 tensor
 * where it lies (bmm_items_in_place: the attention's heads are read without a gathered copy),
 * anything else made contiguous (gathered; a float tensor quantised at its exact exponent). */
static int bmm_int_operand(const tensor_t *t, int64_t B, int64_t rows, int64_t cols,
                           bmm_items_at *w, int *exp, fx_scratch *s, const char *func)
{
    if (fmt_is_shared_exponent(t->fmt) && bmm_items_in_place(t, t->fmt, w)) {
        *exp = t->st->exp; /* as fx_read_i16 reads it */
        return FX_OK;
    }
    const int16_t *m;
    const int rc = fx_read_i16(t, &m, exp, s, func);
    if (!rc) *w = bmm_items_packed(m, B, rows, cols);
    return rc;
}

/* A float bmm's operand t in compute format cf: where it lies (bmm_items_in_place), else made
 * contiguous in cf (gathered, widened or dequantised). */
static int bmm_float_operand(const tensor_t *t, fmt_t cf, int64_t B, int64_t rows, int64_t cols,
                             bmm_items_at *w, fx_scratch *s, const char *func)
{
    if (bmm_items_in_place(t, cf, w)) return FX_OK;
    fx_operand o;
    const int rc = fx_operand_make(t, 0, cf, 0, 0, NULL, &o, s, func);
    if (!rc) *w = bmm_items_packed(o.data, B, rows, cols);
    return rc;
}

/* The float items of one bmm: item i of the operands (elements es bytes wide, in compute
 * format cf) into its [M, N] block of the fp32 stage v. */
typedef struct {
    const bmm_dims *d;
    fmt_t cf;
    bmm_items_at aw, bw;
    size_t es;
    int ta, tb;
    float *v;
    const char *func;
    /* a 16-bit output's staging (NULL: none): item i's values converted by cvt into
     * h + i M N, in the GEMM where its kernel takes it */
    uint16_t *h;
    void (*cvt)(const float *, uint16_t *, int64_t);
} bmm_float_items;

static int bmm_float_item(const void *ctx, int64_t i, int nthreads)
{
    const bmm_float_items *it = ctx;
    const bmm_dims *d = it->d;
    fx_operand oa = fx_operand_2d((const char *)it->aw.base +
                                      (size_t)bmm_item_offset(&it->aw, i) * it->es,
                                  0, 0, d->ar, d->ac, it->aw.ld, it->ta);
    fx_operand ob = fx_operand_2d((const char *)it->bw.base +
                                      (size_t)bmm_item_offset(&it->bw, i) * it->es,
                                  0, 0, d->br, d->bc, it->bw.ld, it->tb);
    oa.fmt = ob.fmt = it->cf;
    float *v = it->v + i * d->M * d->N;
    if (!it->h) return fx_matmul_float(&oa, &ob, it->cf, v, nthreads, it->func);
    uint16_t *h = it->h + i * d->M * d->N;
    int done = 0;
    const int rc = fx_matmul_float_h16(&oa, &ob, it->cf, v, h, it->cvt, &done, nthreads, it->func);
    if (rc == FX_OK && !done) it->cvt(v, h, d->M * d->N); /* the write's conversion */
    return rc;
}

/* The integer items of one bmm: item i's exact sums (mantissas of a and b at exponents ea, eb,
 * so the sums are at ea + eb) into its [M, N] block of the int64 stage v, and its largest
 * |sum| into imax[i]. */
typedef struct {
    const bmm_dims *d;
    bmm_items_at aw, bw; /* int16 mantissas */
    int ea, eb, ta, tb;
    int64_t *v;
    uint64_t *imax;
    const char *func;
} bmm_int_items;

static int bmm_int_item(const void *ctx, int64_t i, int nthreads)
{
    const bmm_int_items *it = ctx;
    const bmm_dims *d = it->d;
    const fx_operand oa = fx_operand_2d((const int16_t *)it->aw.base + bmm_item_offset(&it->aw, i),
                                        1, it->ea, d->ar, d->ac, it->aw.ld, it->ta);
    const fx_operand ob = fx_operand_2d((const int16_t *)it->bw.base + bmm_item_offset(&it->bw, i),
                                        1, it->eb, d->br, d->bc, it->bw.ld, it->tb);
    return fx_matmul_i64_max(&oa, &ob, it->v + i * d->M * d->N, nthreads, &it->imax[i], it->func);
}

/* Every item of a bmm through item(ctx, i, nthreads). Many small items (attention's heads:
 * 512 products of 128 x 128 x 32) run side by side, one thread each: the kernels thread only
 * products of 2^20 multiply-adds and up, so these ran one after another on one thread. Larger
 * items run one after another, each on every thread. Each item's result does not depend on
 * the thread that computes it. FX_OK, or the status of an item that failed (with a message
 * naming it where the worker's own stayed on its thread). */
static int bmm_items_run(const bmm_dims *d, int (*item)(const void *, int64_t, int),
                         const void *ctx, const char *func)
{
    const double work = (double)d->M * (double)d->N * (double)d->K;
    const int nt = flexpoint_num_threads();
    flexpoint_clear_error();
    int failed = FX_OK;
    if (nt > 1 && d->B >= nt && work < (double)((int64_t)1 << 24)) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
        for (int64_t i = 0; i < d->B; i++) {
            int bad;
#ifdef _OPENMP
#pragma omp atomic read
#endif
            bad = failed;
            if (bad) continue;
            const int r = item(ctx, i, 1);
            if (r) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
                failed = r;
            }
        }
    } else {
        /* no parallel region around the kernels: one, even of one thread, would make their
         * own regions nested, which libgomp serves with new threads every call */
        for (int64_t i = 0; i < d->B && !failed; i++) failed = item(ctx, i, nt);
    }
    if (!failed) return FX_OK;
    return flexpoint_last_error()[0] ? failed
                                     : fx_error(failed, func, "the matmul kernel failed on a "
                                                "batch item (status %d)", failed);
}

static int64_t bmm_h16_direct_runs;

int64_t fx_nn_bmm_h16_direct_runs(void)
{
    return __atomic_load_n(&bmm_h16_direct_runs, __ATOMIC_RELAXED);
}

static int bmm_run(const char *func, tensor_t *out, const tensor_t *a, const tensor_t *b, int ta,
                   int tb, const bmm_dims *d)
{
    const int64_t n = d->B * d->M * d->N;
    if (n == 0) return FX_OK;
    fx_scratch s = {.n = 0};
    int rc;
    const int ic = fx_is_int_compute(a);
    if (ic) {
        /* read-only: out is written only after the products (or, rounded straight into out,
         * where no operand reaches it: fx_shared_bmm) */
        bmm_items_at aw, bw;
        int ea, eb, e = 0;
        if (d->K > ((int64_t)1 << 32)) { /* each product is below 2^30: 2^32 of them fit int64 */
            rc = fx_error(FX_EUNSUPPORTED, func, "integer compute with K=%lld: sums of more "
                          "than 2^32 products exceed the exact int64 accumulation",
                          (long long)d->K);
            goto done;
        }
        if ((rc = bmm_int_operand(a, d->B, d->ar, d->ac, &aw, &ea, &s, func))) goto done;
        if ((rc = bmm_int_operand(b, d->B, d->br, d->bc, &bw, &eb, &s, func))) goto done;
        e = ea + eb;
        fx_sm_items ai, bi;
        if (d->K > 0 && bmm_items_two_level(&aw, &ai) && bmm_items_two_level(&bw, &bi)) {
            /* a large FLEX16_5/DFP16 output of short products (attention's scores): blocks
             * rounded in cache, no whole int64 stage (src/core/shared_matmul.c) */
            const fx_operand oa = fx_operand_2d(aw.base, 1, ea, d->ar, d->ac, aw.ld, ta);
            const fx_operand ob = fx_operand_2d(bw.base, 1, eb, d->br, d->bc, bw.ld, tb);
            rc = fx_shared_bmm(out, &oa, &ob, &ai, &bi, d->B, func);
            if (rc != FX_SHARED_MATMUL_NOT_TAKEN) goto done;
        }
        int64_t *v = fx_scratch_alloc(&s, n, sizeof *v);
        uint64_t *imax = fx_scratch_alloc(&s, d->B, sizeof *imax); /* each item's max |sum| */
        if (!v || !imax) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld int64 values", (long long)n);
            goto done;
        }
        uint64_t whole_max = 0;
        if (d->K == 0) memset(v, 0, sizeof *v * (size_t)n);
        else {
            const bmm_int_items it = {d, aw, bw, ea, eb, ta, tb, v, imax, func};
            if ((rc = bmm_items_run(d, bmm_int_item, &it, func))) goto done;
            for (int64_t i = 0; i < d->B; i++)
                whole_max = imax[i] > whole_max ? imax[i] : whole_max;
        }
        rc = fx_write_i64_max(out, v, e, whole_max, func);
    } else {
        /* bf16 x bf16 through the bf16 MATMUL kernel of the route in use, as tensor_matmul:
         * each item the same bits as tensor_matmul of its two matrices */
        const fx_backend *be = fx_backend_active();
        const fmt_t cf = a->fmt == FMT_BF16 && b->fmt == FMT_BF16 &&
                                 be->kernels[FX_OP_MATMUL][FMT_BF16]
                             ? FMT_BF16
                             : FMT_FP32;
        bmm_items_at aw, bw;
        if ((rc = bmm_float_operand(a, cf, d->B, d->ar, d->ac, &aw, &s, func))) goto done;
        if ((rc = bmm_float_operand(b, cf, d->B, d->br, d->bc, &bw, &s, func))) goto done;
        /* a scratch stage, never out's own storage: a kernel failing at a later batch must
         * leave out untouched */
        float *v = fx_scratch_alloc(&s, n, sizeof *v);
        if (!v) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)n);
            goto done;
        }
        if (d->K == 0) memset(v, 0, sizeof *v * (size_t)n);
        /* an fp16/bf16 output: the items' values converted in the GEMM into a 16-bit staging,
         * copied into out once every item has succeeded (an item that failed leaves out as it
         * was), rather than an fp32 stage twice the size that the write converts in a pass of
         * its own; the same conversion, so the same bits. Not a summed distributed output,
         * whose write sums the ranks. A disposable output (the trainer's activations and
         * gradients, fx_storage.disposable: a failed op may leave other values there) that is
         * contiguous and in another storage than a and b is its own staging, with no copy
         * (the attention's [B, H, T, T] scores and their gradient: 16 MB copied a call). */
        const int half_out = (out->fmt == FMT_FP16 || out->fmt == FMT_BF16) && !out->st->dist &&
                             fx_gemm_h16_enabled();
        const int direct = half_out && out->st->disposable && !out->st->on_device &&
                           fx_tensor_is_contiguous(out) && out->st != a->st && out->st != b->st;
        if (direct) __atomic_fetch_add(&bmm_h16_direct_runs, 1, __ATOMIC_RELAXED);
        uint16_t *h = direct ? (uint16_t *)fx_tensor_base(out)
                      : half_out ? fx_scratch_alloc(&s, n, sizeof *h)
                                 : NULL;
        if (h && d->K == 0) memset(h, 0, sizeof *h * (size_t)n); /* +0 */
        const bmm_float_items it = {d, cf, aw, bw, fmt_elem_size(cf), ta, tb, v, func,
                                    h, out->fmt == FMT_FP16 ? be->cvt.f32_to_fp16
                                                            : be->cvt.f32_to_bf16};
        if (d->K > 0 && (rc = bmm_items_run(d, bmm_float_item, &it, func))) goto done;
        rc = h ? fx_write_half_bits(out, h, func) : fx_write_f32(out, v, func);
    }
done:
    fx_scratch_free(&s);
    return rc;
}

int tensor_bmm(tensor_t *out, const tensor_t *a, const tensor_t *b, int trans_a, int trans_b)
{
    bmm_dims d;
    int rc = bmm_validate(__func__, out, a, b, trans_a, trans_b, &d);
    if (rc) return rc;
    fx_op_args r = {.op = FX_OP_BMM, .func = __func__, .nt = 3, .t = {out, a, b},
                    .tn = {"out", "a", "b"}};
    r.u.tfm.out = out;
    r.u.tfm.in[0] = a;
    r.u.tfm.in[1] = b;
    r.u.tfm.ta = trans_a;
    r.u.tfm.tb = trans_b;
    r.u.tfm.geom = &d;
    return fx_op_run(&r);
}

int fx_nn_bmm_host(const fx_op_args *r)
{
    return bmm_run(r->func, r->u.tfm.out, r->u.tfm.in[0], r->u.tfm.in[1], r->u.tfm.ta,
                   r->u.tfm.tb, r->u.tfm.geom);
}

int tensor_bmm_backward(tensor_t *da, tensor_t *db, const tensor_t *dout, const tensor_t *a,
                        const tensor_t *b, int trans_a, int trans_b)
{
    const char *func = __func__;
    if (!dout) return FX_FAIL(FX_EINVAL, "dout is NULL");
    bmm_dims d;
    int rc = bmm_validate(func, dout, a, b, trans_a, trans_b, &d);
    if (!rc && da) rc = nn_same_shape(func, "da", da, "a", a);
    if (!rc && db) rc = nn_same_shape(func, "db", db, "b", b);
    if (rc) return rc;
    if (da && db && da->st == db->st)
        return FX_FAIL(FX_EINVAL, "da and db share storage: the second write would overwrite "
                       "the first");
    fx_op_args r = {.op = FX_OP_BMM_BACKWARD, .func = func, .nt = 5, .t = {da, db, dout, a, b},
                    .tn = {"da", "db", "dout", "a", "b"}};
    r.u.tfm.out = da;
    r.u.tfm.out2 = db;
    r.u.tfm.in[0] = dout;
    r.u.tfm.in[1] = a;
    r.u.tfm.in[2] = b;
    r.u.tfm.ta = trans_a;
    r.u.tfm.tb = trans_b;
    return fx_op_run(&r);
}

int fx_nn_bmm_backward_host(const fx_op_args *r)
{
    tensor_t *da = r->u.tfm.out, *db = r->u.tfm.out2;
    const tensor_t *dout = r->u.tfm.in[0], *a = r->u.tfm.in[1], *b = r->u.tfm.in[2];
    const int trans_a = r->u.tfm.ta, trans_b = r->u.tfm.tb;
    const char *func = r->func;
    int rc;
    /* out = op(a) op(b):
     *   d op(a) = dout op(b)^T, so da = dout op(b)^T, or its transpose op(b) dout^T;
     *   d op(b) = op(a)^T dout, so db = op(a)^T dout, or its transpose dout^T op(a). */
    bmm_dims e;
    if (da) {
        if (!trans_a) {
            if ((rc = bmm_validate(func, da, dout, b, 0, !trans_b, &e))) return rc;
            if ((rc = bmm_run(func, da, dout, b, 0, !trans_b, &e))) return rc;
        } else {
            if ((rc = bmm_validate(func, da, b, dout, trans_b, 1, &e))) return rc;
            if ((rc = bmm_run(func, da, b, dout, trans_b, 1, &e))) return rc;
        }
    }
    if (db) {
        if (!trans_b) {
            if ((rc = bmm_validate(func, db, a, dout, !trans_a, 0, &e))) return rc;
            rc = bmm_run(func, db, a, dout, !trans_a, 0, &e);
        } else {
            if ((rc = bmm_validate(func, db, dout, a, 1, trans_a, &e))) return rc;
            rc = bmm_run(func, db, dout, a, 1, trans_a, &e);
        }
    }
    return rc;
}

/* ---- masks ---------------------------------------------------------------------------------- */

/* mask_at[i] = 1 where element i (row-major over x) is replaced by fill. */
typedef struct {
    const tensor_t *x;
    const float *mask; /* general mask values, row-major over the mask's shape */
    int64_t mstr[FX_MAX_DIMS]; /* the mask's strides broadcast to x's axes (0 where broadcast) */
    int causal;
} mask_src;

static void mask_fill_flags(const mask_src *m, uint8_t *flags, int64_t n)
{
    const tensor_t *x = m->x;
    const int nd = x->ndim;
    if (m->causal) {
        /* row by row: row r is query r % Sq, masked from key q + 1 on (a division per element
         * took 8 % of a transformer's training step) */
        const int64_t Sq = x->shape[nd - 2], Sk = x->shape[nd - 1], rows = Sk ? n / Sk : 0;
        const int nt = n >= ((int64_t)1 << 16) ? flexpoint_num_threads() : 1;
        (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
        for (int64_t r = 0; r < rows; r++) {
            const int64_t q = r % Sq, kept = q + 1 < Sk ? q + 1 : Sk;
            memset(flags + r * Sk, 0, (size_t)kept);
            memset(flags + r * Sk + kept, 1, (size_t)(Sk - kept));
        }
        return;
    }
    int64_t idx[FX_MAX_DIMS] = {0}, off = 0;
    for (int64_t i = 0; i < n; i++) {
        const float v = m->mask[off];
        flags[i] = v != 0.0f; /* NaN counts as set */
        for (int dd = nd - 1; dd >= 0; dd--) { /* advance the multi-index */
            off += m->mstr[dd];
            if (++idx[dd] < x->shape[dd]) break;
            off -= m->mstr[dd] * idx[dd];
            idx[dd] = 0;
        }
    }
}

static int mask_apply(const char *func, tensor_t *y, const tensor_t *x, const mask_src *m,
                      double fill)
{
    const int64_t n = fx_numel_of(x->ndim, x->shape);
    if (n == 0) return FX_OK;
    fx_scratch s = {.n = 0};
    int rc;
    uint8_t *flags = fx_scratch_alloc(&s, n, 1);
    if (!flags) {
        rc = fx_error(FX_ENOMEM, func, "cannot allocate a mask of %lld elements", (long long)n);
        goto done;
    }
    mask_fill_flags(m, flags, n);
    if (fx_is_int_compute(x) && fill == 0.0) {
        const int16_t *xm;
        int e;
        int16_t *v = fx_scratch_alloc(&s, n, sizeof *v);
        if (!v) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld int16 values", (long long)n);
            goto done;
        }
        if ((rc = nn_in_i16(x, &xm, &e, &s, func))) goto done;
        const int nt = n >= ((int64_t)1 << 16) ? flexpoint_num_threads() : 1;
        (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
        for (int64_t i = 0; i < n; i++) v[i] = flags[i] ? 0 : xm[i];
        rc = fx_write_i16(y, v, e, func);
    } else {
        const float *xv;
        if ((rc = nn_in_f32(x, &xv, &s, func))) goto done;
        const tensor_t *ins[1] = {x};
        float *v = nn_out_f32(y, ins, 1, nn_private_f32(x, xv), &s);
        if (!v) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)n);
            goto done;
        }
        const float fv = nn_stage_f32(fill, y->fmt);
        const int nt = n >= ((int64_t)1 << 16) ? flexpoint_num_threads() : 1;
        (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
        for (int64_t i = 0; i < n; i++) v[i] = flags[i] ? fv : xv[i];
        rc = fx_write_f32(y, v, func);
    }
done:
    fx_scratch_free(&s);
    return rc;
}

static int mask_common(const char *func, const tensor_t *y, const tensor_t *x, double fill)
{
    if (!y || !x) return fx_error(FX_EINVAL, func, "%s is NULL", !y ? "y" : "x");
    if (isnan(fill)) return fx_error(FX_EINVAL, func, "fill is NaN");
    return nn_same_shape(func, "y", y, "x", x);
}

int tensor_causal_mask(tensor_t *y, const tensor_t *x, double fill)
{
    int rc = mask_common(__func__, y, x, fill);
    if (rc) return rc;
    if (x->ndim < 2) {
        char b1[160];
        return FX_FAIL(FX_ESHAPE, "a causal mask needs [..., Sq, Sk], got x.shape=%s",
                       fx_shape_str(x, b1, sizeof b1));
    }
    fx_op_args r = {.op = FX_OP_CAUSAL_MASK, .func = __func__, .nt = 2, .t = {y, x},
                    .tn = {"y", "x"}};
    r.u.tfm.out = y;
    r.u.tfm.in[0] = x;
    r.u.tfm.value = fill;
    return fx_op_run(&r);
}

int fx_nn_causal_mask_host(const fx_op_args *r)
{
    const tensor_t *x = r->u.tfm.in[0];
    mask_src m = {.x = x, .causal = 1};
    return mask_apply(r->func, r->u.tfm.out, x, &m, r->u.tfm.value);
}

int tensor_masked_fill(tensor_t *y, const tensor_t *x, const tensor_t *mask, double fill)
{
    int rc = mask_common(__func__, y, x, fill);
    if (rc) return rc;
    if (!mask) return FX_FAIL(FX_EINVAL, "mask is NULL");
    char b1[160], b2[160];
    mask_src m = {.x = x};
    bool ok = mask->ndim <= x->ndim;
    int64_t stride = 1;
    for (int d = x->ndim - 1; d >= 0 && ok; d--) {
        const int dm = d - (x->ndim - mask->ndim);
        const int64_t sz = dm >= 0 ? mask->shape[dm] : 1;
        if (sz != x->shape[d] && sz != 1) ok = false;
        m.mstr[d] = sz == 1 ? 0 : stride;
        stride *= sz;
    }
    if (!ok)
        return FX_FAIL(FX_ESHAPE, "mask.shape=%s does not broadcast to x.shape=%s (NumPy rules: "
                       "axes aligned from the end, each equal or 1)",
                       fx_shape_str(mask, b1, sizeof b1), fx_shape_str(x, b2, sizeof b2));
    fx_op_args r = {.op = FX_OP_MASKED_FILL, .func = __func__, .nt = 3, .t = {y, x, mask},
                    .tn = {"y", "x", "mask"}};
    r.u.tfm.out = y;
    r.u.tfm.in[0] = x;
    r.u.tfm.in[1] = mask;
    r.u.tfm.value = fill;
    r.u.tfm.geom = &m;
    return fx_op_run(&r);
}

int fx_nn_masked_fill_host(const fx_op_args *r)
{
    tensor_t *y = r->u.tfm.out;
    const tensor_t *x = r->u.tfm.in[0], *mask = r->u.tfm.in[1];
    const double fill = r->u.tfm.value;
    mask_src m = *(const mask_src *)r->u.tfm.geom;
    const char *func = r->func;
    int rc;
    if (fx_numel_of(x->ndim, x->shape) == 0) return FX_OK;
    fx_scratch s = {.n = 0};
    const float *mv;
    if ((rc = nn_in_f32(mask, &mv, &s, func)) == FX_OK) {
        m.mask = mv;
        rc = mask_apply(func, y, x, &m, fill);
    }
    fx_scratch_free(&s);
    return rc;
}
