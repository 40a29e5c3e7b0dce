/* Softmax and log-softmax along one axis, forward and backward (include/flexpoint_nn.h,
 * docs/transformer_ops.md).
 *
 *   softmax:          y_k = exp(x_k - m) / S,        m = max_k x_k, S = sum_k exp(x_k - m)
 *   log-softmax:      y_k = (x_k - m) - log(S)
 *   softmax grad:     dx_k = y_k (dy_k - sum_j dy_j y_j)
 *   log-softmax grad: dx_k = dy_k - exp(y_k) sum_j dy_j
 * The backward passes take the forward's output y (as stored), like PyTorch's
 * _softmax_backward_data.
 *
 * Precision: softmax is not fixed-point in nature, so every format computes on its exactly
 * widened or dequantised values (fp16/bf16 widened, FLEX16_5/DFP16 m * 2^e), each row in fp32,
 * as the formats' rule asks, by the arithmetic of softmax_def.h: the maximum subtracted, the
 * library's own exponential (fx_expf_def, a fixed sequence of fp32 operations; logf from libm
 * once per log-softmax row), and every sum over a row in 16 interleaved fp32 partial sums
 * (element k into sum k mod 16, in index order) added by a fixed tree. Each result is then
 * rounded once into y's format by the one write path (through fp32 with round-to-odd when y is
 * not fp32). A shared-exponent y is one write: its exponent is DFP16's exact one or
 * Autoflex's, with the write's statistics.
 *
 * Special values are IEEE data, never errors: a NaN or +Inf in a row makes the whole row NaN
 * (exp(Inf - Inf)), as in PyTorch; -Inf elements get probability 0 (log-probability -Inf)
 * unless every element of the row is -Inf (then the row is NaN: 0/0). ±0 and subnormal inputs
 * are ordinary values. A shared-exponent output counts NaN/Inf results as non-finite.
 *
 * Contiguous rows (the last axis) run on the level's row kernels (fx_cvt_table.softmax_row_f32,
 * softmax_backward_row_f32: AVX2 and AVX-512, whose lanes are the 16 partial sums), other axes
 * on the definition itself; OpenMP only splits the rows (each row is computed whole by one
 * thread), so the results are bit-identical across backends and thread counts. The file is
 * compiled without FMA flags and in ISO C mode (no contraction), so a*b+c is two roundings
 * everywhere unless the definition asks for fmaf.
 */
#include "tfm_common.h"
#include "flexpoint_nn.h"
#include "nn_ops.h"
#include "softmax_def.h"
#include "nn_rows_write.h"
#include "core/shared_scale.h"

#include <math.h>

/* the longest strided row copied into a stack buffer for the level's row kernel (8 KB) */
#define SM_GATHER_MAX 2048

static int sm_check(const char *func, const char *on, const tensor_t *o, const char *in,
                    const tensor_t *i, int axis, int64_t *outer, int64_t *len, int64_t *inner)
{
    if (!o || !i) return fx_error(FX_EINVAL, func, "%s is NULL", !o ? on : in);
    int rc = tfm_axis(func, i, axis, outer, len, inner);
    if (!rc) rc = nn_same_shape(func, on, o, in, i);
    return rc;
}

static int sm_forward(const char *func, tensor_t *y, const tensor_t *x, int axis, int logsm)
{
    int64_t outer = 0, len = 0, inner = 0;
    int rc = sm_check(func, "y", y, "x", x, axis, &outer, &len, &inner);
    if (rc) return rc;
    fx_op_args a = {.op = logsm ? FX_OP_LOG_SOFTMAX : FX_OP_SOFTMAX, .func = func, .nt = 2,
                    .t = {y, x}, .tn = {"y", "x"}};
    a.u.tfm.out = y;
    a.u.tfm.in[0] = x;
    a.u.tfm.axis = axis;
    return fx_op_run(&a);
}

/* A contiguous host input read row by row in its stored format: rows are widened into a
 * stack buffer (exactly: fp16/bf16 widened, FLEX16_5/DFP16 m 2^e, the same floats as
 * nn_in_f32's whole copy; fp32 rows are read in place) instead of the whole tensor into an
 * fp32 copy first. The softmax rows along the last axis, forward and backward, and the
 * attention's rows read their inputs so. */
typedef struct sm_rows {
    const fx_backend *be;
    fmt_t fmt;
    int exp;
    const void *base;
} sm_rows;

/* Whether t can be read so (then *r describes it): contiguous, on the host, settled. */
static int sm_rows_of(const tensor_t *t, sm_rows *r, const char *func)
{
    if (t->st->on_device || !fx_tensor_is_contiguous(t)) return 0;
    if (fmt_is_shared_exponent(t->fmt) && fx_storage_settle(t->st, func) != FX_OK) return 0;
    r->be = fx_backend_active();
    r->fmt = t->fmt;
    r->exp = fmt_is_shared_exponent(t->fmt) ? t->st->exp : 0;
    r->base = fx_tensor_base(t);
    return 1;
}

/* Elements [off, off + len) as floats: a pointer into t's storage for fp32, else buf. */
static const float *sm_rows_get(const sm_rows *r, int64_t off, int64_t len, float *buf)
{
    return fx_f32_block(r->be, r->fmt, r->exp, r->base, off, len, buf);
}

/* A softmax row of x read row by row (the forward's by_rows route), for nn_write_rows */
typedef struct sm_fwd_rows {
    const sm_rows *xr;
    int64_t len;
    int logsm;
    void (*kernel)(const float *, float *, int64_t, int, float *, int64_t *);
} sm_fwd_rows;

static void sm_fwd_row(const void *vc, int64_t r, int64_t nr, float *row, float *rmax,
                       int64_t *rbad)
{
    (void)nr; /* one row a call */
    const sm_fwd_rows *c = vc;
    float buf[SM_GATHER_MAX], m = 0.0f;
    int64_t b = 0;
    c->kernel(sm_rows_get(c->xr, r * c->len, c->len, buf), row, c->len, c->logsm,
              rmax ? rmax : &m, rbad ? rbad : &b);
}

int fx_nn_softmax_host(const fx_op_args *req)
{
    tensor_t *y = req->u.tfm.out;
    const tensor_t *x = req->u.tfm.in[0];
    const int logsm = req->op == FX_OP_LOG_SOFTMAX;
    const char *func = req->func;
    int64_t outer = 0, len = 0, inner = 0;
    int rc = tfm_axis(func, x, req->u.tfm.axis, &outer, &len, &inner);
    if (rc) return rc;
    const int64_t n = fx_numel_of(x->ndim, x->shape);
    if (n == 0) return FX_OK;
    fx_scratch s = {.n = 0};
    const tensor_t *ins[1] = {x};
    void (*fw_kernel)(const float *, float *, int64_t, int, float *, int64_t *) =
        fx_backend_active()->cvt.softmax_row_f32;
    /* contiguous rows along the last axis are read row by row (sm_rows), without a whole
     * fp32 copy of x; other axes, views, long rows and levels without the kernel take one */
    sm_rows xr;
    const int by_rows =
        inner == 1 && len <= SM_GATHER_MAX && fw_kernel && sm_rows_of(x, &xr, func);
    if (by_rows) { /* each row rounded into y as it is made (nn_rows_write.h) */
        const sm_fwd_rows c = {&xr, len, logsm, fw_kernel};
        return nn_write_rows(y, outer, len, 1, sm_fwd_row, &c, 1, x->st == y->st,
                             outer > 1 ? nn_threads_for(n) : 1, func);
    }
    const float *xv = NULL;
    if (!by_rows && (rc = nn_in_f32(x, &xv, &s, func))) goto done;
    /* each row reads all its elements before writing any, and rows are disjoint: y may
     * overwrite a private copy of x */
    float *v = nn_out_f32(y, ins, 1, by_rows ? NULL : nn_private_f32(x, xv), &s);
    if (!v) {
        rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)n);
        goto done;
    }
    const int64_t rows = outer * inner;
    /* the level's row kernel (the same bits as the definition): contiguous rows in place,
     * strided ones through a copy on the stack (up to SM_GATHER_MAX values) */
    void (*row_kernel)(const float *, float *, int64_t, int, float *, int64_t *) =
        inner == 1 || len <= SM_GATHER_MAX ? fw_kernel : NULL;
    const int nt = rows > 1 ? nn_threads_for(n) : 1;
    (void)nt;
    /* the write's statistics of the values, taken as they are stored (fx_write_f32_max): the
     * largest finite |value| and the count of the others */
    float vmax = 0.0f;
    int64_t nonfinite = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1) \
    reduction(max : vmax) reduction(+ : nonfinite)
#endif
    for (int64_t r = 0; r < rows; r++) {
        const int64_t base = (r / inner) * len * inner + r % inner;
        float rmax = 0.0f;
        int64_t rbad = 0;
        if (by_rows) {
            float buf[SM_GATHER_MAX];
            fw_kernel(sm_rows_get(&xr, base, len, buf), v + base, len, logsm, &rmax, &rbad);
        } else if (row_kernel && inner == 1) {
            row_kernel(xv + base, v + base, len, logsm, &rmax, &rbad);
        } else if (row_kernel) {
            float row[SM_GATHER_MAX];
            for (int64_t k = 0; k < len; k++) row[k] = xv[base + k * inner];
            row_kernel(row, row, len, logsm, &rmax, &rbad);
            for (int64_t k = 0; k < len; k++) v[base + k * inner] = row[k];
        } else
            fx_softmax_row_def(xv + base, v + base, inner, len, logsm, &rmax, &rbad);
        vmax = rmax > vmax ? rmax : vmax;
        nonfinite += rbad;
    }
    rc = fx_write_f32_max(y, v, vmax, nonfinite, func);
done:
    fx_scratch_free(&s);
    return rc;
}

static int sm_backward(const char *func, tensor_t *dx, const tensor_t *dy, const tensor_t *y,
                       int axis, int logsm)
{
    int64_t outer = 0, len = 0, inner = 0;
    if (!dx || !dy || !y)
        return fx_error(FX_EINVAL, func, "%s is NULL", !dx ? "dx" : (!dy ? "dy" : "y"));
    int rc = sm_check(func, "dy", dy, "y", y, axis, &outer, &len, &inner);
    if (!rc) rc = nn_same_shape(func, "dx", dx, "dy", dy);
    if (rc) return rc;
    fx_op_args a = {.op = logsm ? FX_OP_LOG_SOFTMAX_BACKWARD : FX_OP_SOFTMAX_BACKWARD,
                    .func = func, .nt = 3, .t = {dx, dy, y}, .tn = {"dx", "dy", "y"}};
    a.u.tfm.out = dx;
    a.u.tfm.in[0] = dy;
    a.u.tfm.in[1] = y;
    a.u.tfm.axis = axis;
    return fx_op_run(&a);
}

/* A softmax gradient row from dy and y read row by row (the backward's by_rows route, and
 * the attention's score gradient, which multiplies it by sf) */
typedef struct sm_bwd_rows {
    const sm_rows *gr, *yr;
    int64_t len;
    int logsm;
    void (*kernel)(const float *, const float *, float *, int64_t, int); /* NULL: the definition */
    int scaled;
    float sf;
} sm_bwd_rows;

static void sm_bwd_row(const void *vc, int64_t r, int64_t nr, float *row, float *rmax,
                       int64_t *rbad)
{
    (void)nr; /* one row a call */
    const sm_bwd_rows *c = vc;
    (void)rmax;
    (void)rbad;
    float gbuf[SM_GATHER_MAX], ybuf[SM_GATHER_MAX];
    const float *g = sm_rows_get(c->gr, r * c->len, c->len, gbuf);
    const float *y = sm_rows_get(c->yr, r * c->len, c->len, ybuf);
    if (c->kernel) c->kernel(g, y, row, c->len, c->logsm);
    else fx_softmax_backward_row_def(g, y, row, 1, c->len, c->logsm);
    if (c->scaled) /* the fp32 SCALE kernels' one rounding */
        for (int64_t k = 0; k < c->len; k++) row[k] *= c->sf;
}

int fx_nn_softmax_backward_host(const fx_op_args *req)
{
    tensor_t *dx = req->u.tfm.out;
    const tensor_t *dy = req->u.tfm.in[0], *y = req->u.tfm.in[1];
    const int logsm = req->op == FX_OP_LOG_SOFTMAX_BACKWARD;
    const char *func = req->func;
    int64_t outer = 0, len = 0, inner = 0;
    int rc = tfm_axis(func, y, req->u.tfm.axis, &outer, &len, &inner);
    if (rc) return rc;
    const int64_t n = fx_numel_of(y->ndim, y->shape);
    if (n == 0) return FX_OK;
    fx_scratch s = {.n = 0};
    const tensor_t *ins[2] = {dy, y};
    void (*bw_kernel)(const float *, const float *, float *, int64_t, int) =
        fx_backend_active()->cvt.softmax_backward_row_f32;
    /* contiguous rows along the last axis: dy and y read row by row (sm_rows), without
     * their two whole fp32 copies (the attention's dP and P in a transformer's backward);
     * other axes, views, long rows and levels without the kernel take the copies */
    sm_rows gr, yr;
    const int by_rows = inner == 1 && len <= SM_GATHER_MAX && bw_kernel &&
                        sm_rows_of(dy, &gr, func) && sm_rows_of(y, &yr, func);
    if (by_rows) { /* each row rounded into dx as it is made (nn_rows_write.h) */
        const sm_bwd_rows c = {&gr, &yr, len, logsm, bw_kernel, 0, 1.0f};
        return nn_write_rows(dx, outer, len, 1, sm_bwd_row, &c, 0,
                             dy->st == dx->st || y->st == dx->st,
                             outer > 1 ? nn_threads_for(n) : 1, func);
    }
    const float *gv = NULL, *yv = NULL;
    if (!by_rows && (rc = nn_in_f32(dy, &gv, &s, func))) goto done;
    if (!by_rows && (rc = nn_in_f32(y, &yv, &s, func))) goto done;
    /* the last pass reads dy_k and y_k before writing element k: dx may overwrite a private
     * copy of dy */
    float *v = nn_out_f32(dx, ins, 2, by_rows ? NULL : nn_private_f32(dy, gv), &s);
    if (!v) {
        rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)n);
        goto done;
    }
    const int64_t rows = outer * inner;
    void (*row_kernel)(const float *, const float *, float *, int64_t, int) =
        inner == 1 || len <= SM_GATHER_MAX ? bw_kernel : NULL;
    const int nt = rows > 1 ? nn_threads_for(n) : 1;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t r = 0; r < rows; r++) {
        const int64_t base = (r / inner) * len * inner + r % inner;
        if (by_rows) {
            float gbuf[SM_GATHER_MAX], ybuf[SM_GATHER_MAX];
            bw_kernel(sm_rows_get(&gr, base, len, gbuf), sm_rows_get(&yr, base, len, ybuf),
                      v + base, len, logsm);
        } else if (row_kernel && inner == 1) {
            row_kernel(gv + base, yv + base, v + base, len, logsm);
        } else if (row_kernel) {
            float grow[SM_GATHER_MAX], yrow[SM_GATHER_MAX];
            for (int64_t k = 0; k < len; k++) {
                grow[k] = gv[base + k * inner];
                yrow[k] = yv[base + k * inner];
            }
            row_kernel(grow, yrow, grow, len, logsm);
            for (int64_t k = 0; k < len; k++) v[base + k * inner] = grow[k];
        } else
            fx_softmax_backward_row_def(gv + base, yv + base, v + base, inner, len, logsm);
    }
    rc = fx_write_f32(dx, v, func);
done:
    fx_scratch_free(&s);
    return rc;
}

int tensor_softmax(tensor_t *y, const tensor_t *x, int axis)
{
    return sm_forward(__func__, y, x, axis, 0);
}

int tensor_log_softmax(tensor_t *y, const tensor_t *x, int axis)
{
    return sm_forward(__func__, y, x, axis, 1);
}

int tensor_softmax_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *y, int axis)
{
    return sm_backward(__func__, dx, dy, y, axis, 0);
}

int tensor_log_softmax_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *y, int axis)
{
    return sm_backward(__func__, dx, dy, y, axis, 1);
}

/* ---- attention's probabilities in one pass -------------------------------------------------
 * tensor_attention_softmax(y, x, s, causal) is, by definition, tensor_scale into an fp32
 * tensor, tensor_causal_mask with -Inf (when causal) and tensor_softmax along the last axis:
 * the same bits in y, the same write. For a contiguous host x in another storage than y, each
 * row is made in a stack buffer, the scaled values with tensor_scale's arithmetic (FLEX16_5,
 * DFP16: fx_shared_scale_f32; fp32, and fp16/bf16 exactly widened: the fp32 product by
 * (float)s) with -Inf past the diagonal, and goes through the level's softmax row kernel into
 * the fp32 stage of y's one write; the scaled scores never go to memory (the transformer's
 * attention made three passes over [B, H, T, T] fp32 scores for these three ops). Other
 * inputs run the three ops on an fp32 temporary. */
/* One row of the attention's probabilities (attn_sm_fused), for nn_write_rows */
typedef struct attn_sm_rows {
    const sm_rows *xr;
    int64_t Sk, Sq;
    int causal, shared;
    int64_t c;
    double p2;
    float sf;
    void (*kernel)(const float *, float *, int64_t, int, float *, int64_t *);
} attn_sm_rows;

static void attn_sm_row(const void *vc, int64_t r, int64_t nr, float *out, float *rmax,
                        int64_t *rbad)
{
    (void)nr; /* one row a call */
    const attn_sm_rows *a = vc;
    const int64_t Sk = a->Sk;
    float row[SM_GATHER_MAX], m = 0.0f;
    int64_t b = 0;
    /* row i keeps columns j <= i (all of them from i = Sk on, where Sq > Sk) */
    const int64_t keep = a->causal && r % a->Sq + 1 < Sk ? r % a->Sq + 1 : Sk;
    if (a->shared) {
        const int16_t *mr = (const int16_t *)a->xr->base + r * Sk;
        a->xr->be->cvt.scaled_i16_f32(mr, row, keep, a->c, a->p2); /* fx_shared_scale_f32 */
    } else { /* fp16/bf16 exactly widened first, as the dispatcher's stage */
        const float *f = sm_rows_get(a->xr, r * Sk, keep, row);
        for (int64_t j = 0; j < keep; j++) row[j] = f[j] * a->sf;
    }
    for (int64_t j = keep; j < Sk; j++) row[j] = -INFINITY;
    if (a->kernel)
        a->kernel(row, out, Sk, 0, rmax ? rmax : &m, rbad ? rbad : &b);
    else
        fx_softmax_row_def(row, out, 1, Sk, 0, rmax ? rmax : &m, rbad ? rbad : &b);
}

static int attn_sm_fused(tensor_t *y, const sm_rows *xr, const tensor_t *x, double scale,
                         int causal, const char *func)
{
    const int64_t Sk = x->shape[x->ndim - 1], Sq = x->shape[x->ndim - 2];
    const int64_t n = fx_numel_of(x->ndim, x->shape), rows = n / Sk;
    attn_sm_rows a = {.xr = xr, .Sk = Sk, .Sq = Sq, .causal = causal,
                      .shared = fmt_is_shared_exponent(x->fmt) != 0,
                      .sf = (float)scale, /* the float formats' scale: the fp32 product by (float)s */
                      .kernel = xr->be->cvt.softmax_row_f32};
    int k = 0;
    if (a.shared) fx_shared_scale_split(scale, &a.c, &k);
    a.p2 = a.shared ? ldexp(1.0, xr->exp + k) : 0.0;
    /* x is in another storage than y (tensor_attention_softmax's condition) */
    return nn_write_rows(y, rows, Sk, 1, attn_sm_row, &a, 1, 0, rows > 1 ? nn_threads_for(n) : 1,
                         func);
}

int tensor_attention_softmax(tensor_t *y, const tensor_t *x, double scale, int causal)
{
    static const char func[] = "tensor_attention_softmax";
    if (!y || !x) return fx_error(FX_EINVAL, func, "%s is NULL", !y ? "y" : "x");
    if (!isfinite(scale)) return fx_error(FX_EINVAL, func, "scale %g is not finite", scale);
    if (causal != 0 && causal != 1)
        return fx_error(FX_EINVAL, func, "causal is %d (0 or 1)", causal);
    int rc = nn_same_shape(func, "y", y, "x", x);
    if (rc) return rc;
    if (x->ndim < 2) {
        char b1[160];
        return fx_error(FX_ESHAPE, func, "x must be [..., Sq, Sk], got x.shape=%s",
                        fx_shape_str(x, b1, sizeof b1));
    }
    if (x->st->on_device || y->st->on_device)
        return fx_error(FX_EUNSUPPORTED, func, "%s is a device tensor: no device kernel yet",
                        x->st->on_device ? "x" : "y");
    const int64_t n = fx_numel_of(x->ndim, x->shape);
    if (n == 0) return FX_OK;
    sm_rows xr;
    if (x->st != y->st && x->shape[x->ndim - 1] <= SM_GATHER_MAX && sm_rows_of(x, &xr, func))
        return attn_sm_fused(y, &xr, x, scale, causal, func);
    tensor_t *t = tensor_new(FMT_FP32, x->ndim, x->shape);
    if (!t) return fx_error(FX_ENOMEM, func, "cannot allocate the fp32 scores (%lld values)",
                            (long long)n);
    rc = tensor_scale(t, x, scale);
    if (!rc && causal) rc = tensor_causal_mask(t, t, -INFINITY);
    if (!rc) rc = tensor_softmax(y, t, -1);
    tensor_free(t);
    return rc;
}

/* ---- attention's score gradient in one pass ------------------------------------------------
 * tensor_attention_softmax_backward(dx, dy, y, s) is, by definition, tensor_softmax_backward
 * along the last axis into an fp32 tensor, then tensor_scale by s into dx: the same bits in
 * dx, the same write. Where dy and y are contiguous on the host and dx has a storage of its
 * own, each gradient row is made by the level's row kernel (the definition's arithmetic, the
 * same bits on every level) in a stack buffer, multiplied by (float)s there (the fp32 SCALE
 * kernels' one rounding) and goes into dx's one write (nn_write_rows: in place, converted or
 * rounded row by row where dx allows, else an fp32 stage): the unscaled gradient never goes
 * to memory (the transformer's attention wrote and read back a [B, H, T, T] tensor for it, and
 * for FLEX16_5/DFP16 rounded twice). Other inputs (views, rows longer than SM_GATHER_MAX) run
 * the two ops on an fp32 temporary. */

int tensor_attention_softmax_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *y,
                                      double scale)
{
    static const char func[] = "tensor_attention_softmax_backward";
    if (!dx || !dy || !y)
        return fx_error(FX_EINVAL, func, "%s is NULL", !dx ? "dx" : (!dy ? "dy" : "y"));
    if (!isfinite(scale)) return fx_error(FX_EINVAL, func, "scale %g is not finite", scale);
    int rc = nn_same_shape(func, "dy", dy, "y", y);
    if (!rc) rc = nn_same_shape(func, "dx", dx, "y", y);
    if (rc) return rc;
    if (y->ndim < 2) {
        char b1[160];
        return fx_error(FX_ESHAPE, func, "y must be [..., Sq, Sk], got y.shape=%s",
                        fx_shape_str(y, b1, sizeof b1));
    }
    if (dx->st->on_device || dy->st->on_device || y->st->on_device)
        return fx_error(FX_EUNSUPPORTED, func, "%s is a device tensor: no device kernel yet",
                        dx->st->on_device ? "dx" : (dy->st->on_device ? "dy" : "y"));
    const int64_t n = fx_numel_of(y->ndim, y->shape);
    if (n == 0) return FX_OK;
    const int64_t len = y->shape[y->ndim - 1];
    sm_rows gr, yr;
    if (len <= SM_GATHER_MAX && sm_rows_of(dy, &gr, func) && sm_rows_of(y, &yr, func)) {
        const sm_bwd_rows c = {&gr, &yr, len, 0, gr.be->cvt.softmax_backward_row_f32, 1,
                               (float)scale};
        return nn_write_rows(dx, n / len, len, 1, sm_bwd_row, &c, 0,
                             dy->st == dx->st || y->st == dx->st,
                             n > len ? nn_threads_for(n) : 1, func);
    }
    tensor_t *t = tensor_new(FMT_FP32, y->ndim, y->shape);
    if (!t) return fx_error(FX_ENOMEM, func, "cannot allocate the fp32 gradient (%lld values)",
                            (long long)n);
    rc = tensor_softmax_backward(t, dy, y, -1);
    if (!rc) rc = tensor_scale(dx, t, scale);
    tensor_free(t);
    return rc;
}
