/* Layer normalisation over the last axis, forward and backward (include/flexpoint_nn.h,
 * docs/transformer_ops.md).
 *
 * For each row r of x viewed as [R, D] (D the last axis, R the product of the others):
 *   mean_r = sum_k x_rk / D,  var_r = sum_k (x_rk - mean_r)^2 / D (biased, as PyTorch),
 *   rstd_r = 1 / sqrt(var_r + eps),  xhat_rk = (x_rk - mean_r) rstd_r,
 *   y_rk = xhat_rk gamma_k + beta_k.
 * Backward, with g_rk = dy_rk gamma_k:
 *   dx_rk = rstd_r (g_rk - mean_k(g_r) - xhat_rk mean_k(g_r xhat_r)),
 *   dgamma_k = sum_r dy_rk xhat_rk,  dbeta_k = sum_r dy_rk.
 *
 * Precision: normalisation is not fixed-point in nature, so every format computes on its
 * exactly widened or dequantised values. The statistics are two-pass and accumulated in fp32,
 * as the formats' rule asks: the sum of x, then the sum of (x - mean)^2, each in index order
 * k = 0..D-1 with one scalar accumulator; eps is rounded to fp32 once, rstd = 1/sqrtf(var +
 * eps). The per-element arithmetic is fp32 too, and each tensor output is rounded once into its format by the one write path (through
 * fp32 with round-to-odd when it is not fp32). The affine parameters gamma, beta and their
 * gradients are fp32 arrays (a transformer keeps its normalisation parameters in fp32); the
 * mean and rstd outputs are fp32 too. The backward pass recomputes the statistics from x with
 * the forward's code, so it needs nothing saved.
 *
 * The row kernels below are the definition (the portable level runs them); the AVX2 and AVX-512
 * levels run the same operations 8 or 16 rows side by side (src/nn/ln_kernels.h). OpenMP only
 * splits rows: each row is computed whole by one thread in the fixed order above, and
 * dgamma/dbeta sum the rows in fp32 in row order for each column, so the results are
 * bit-identical across thread counts and backends. The file is compiled in ISO C mode without
 * FMA flags, so there is no contraction (the SIMD files are built with -ffp-contract=off).
 * Each output element is a float already, so its fp32 stage is the value itself (the round to
 * odd of an fp32 value is that value), and the write rounds it once into the output format.
 * fp32 statistics overflow where fp32 arithmetic does: a row with |x - mean| above ~1.8e19
 * has var = Inf, rstd = 0 and outputs 0 (beta with affine; NaN where x - mean itself
 * overflows), as in an fp32 layer norm elsewhere. Special values are IEEE data: a NaN or Inf
 * in a row makes the row's statistics and outputs NaN; a constant row with eps = 0 gives
 * rstd = Inf and NaN outputs (0 * Inf), as PyTorch does.
 */
#include "tfm_common.h"
#include "ln_kernels.h"
#include "nn_rows_write.h"
#include "../core/dispatch.h"
#include "../core/backend.h"
#include "nn_ops.h"
#include "flexpoint_nn.h"

#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

static int ln_check(const char *func, const tensor_t *x, double eps, int64_t *R, int64_t *D)
{
    char b1[160];
    if (!(eps >= 0.0) || !isfinite(eps))
        return fx_error(FX_EINVAL, func, "eps=%g must be finite and >= 0", eps);
    *D = x->shape[x->ndim - 1];
    if (*D == 0)
        return fx_error(FX_ESHAPE, func, "the last axis of x.shape=%s is empty: there is "
                        "nothing to normalise over", fx_shape_str(x, b1, sizeof b1));
    *R = fx_numel_of(x->ndim, x->shape) / *D;
    return FX_OK;
}

/* Two-pass mean and biased variance of one row, in fp32, index order. */
static void ln_row_stats(const float *xr, int64_t D, float eps, float *mean, float *rstd)
{
    float s = 0.0f;
    for (int64_t k = 0; k < D; k++) s += xr[k];
    const float mu = s / (float)D;
    float q = 0.0f;
    for (int64_t k = 0; k < D; k++) q += (xr[k] - mu) * (xr[k] - mu);
    *mean = mu;
    *rstd = 1.0f / sqrtf(q / (float)D + eps);
}

static void ln_forward_portable(const float *x, float *y, float *st, int64_t r0, int64_t r1,
                                int64_t D, float eps, const float *gamma, const float *beta)
{
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * D;
        float mu, is;
        ln_row_stats(xr, D, eps, &mu, &is);
        st[2 * r] = mu;
        st[2 * r + 1] = is;
        if (!y) continue;
        float *yr = y + r * D;
        for (int64_t k = 0; k < D; k++) {
            float val = (xr[k] - mu) * is;
            if (gamma) val *= gamma[k];
            if (beta) val += beta[k];
            yr[k] = val;
        }
    }
}

static void ln_param_sums_portable(const float *x, const float *dy, const float *st, int64_t R,
                                   int64_t D, int64_t k0, int64_t k1, float *sg)
{
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * D, *gr = dy + r * D;
        const float mu = st[2 * r], is = st[2 * r + 1];
        for (int64_t k = k0; k < k1; k++) {
            sg[k] += gr[k] * ((xr[k] - mu) * is);
            sg[D + k] += gr[k];
        }
    }
}

static void ln_backward_portable(const float *x, const float *dy, const float *st, float *dx,
                                 int64_t r0, int64_t r1, int64_t D, const float *gamma)
{
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * D, *gr = dy + r * D;
        float *vr = dx + r * D;
        const float mu = st[2 * r], is = st[2 * r + 1];
        float a = 0.0f, b = 0.0f; /* sum g, sum g xhat: fp32, index order */
        for (int64_t k = 0; k < D; k++) {
            const float g = gr[k] * (gamma ? gamma[k] : 1.0f);
            a += g;
            b += g * ((xr[k] - mu) * is);
        }
        a /= (float)D;
        b /= (float)D;
        for (int64_t k = 0; k < D; k++) {
            const float g = gr[k] * (gamma ? gamma[k] : 1.0f);
            const float xh = (xr[k] - mu) * is;
            vr[k] = is * (g - a - xh * b);
        }
    }
}

const fx_ln_kernels fx_ln_kernels_portable = {ln_forward_portable, ln_param_sums_portable,
                                              ln_backward_portable};

/* The active level's kernels (the same bits on every level). */
static const fx_ln_kernels *ln_kernels(void)
{
    const fx_backend *b = fx_backend_active();
    return b && b->ln ? b->ln : &fx_ln_kernels_portable;
}

/* This thread's rows [*r0, *r1) of [0, R): whole groups of FX_LN_ROW_GROUP, split among the
 * threads of the enclosing parallel region as OpenMP's static schedule splits items */
static void ln_my_rows(int64_t R, int64_t *r0, int64_t *r1)
{
#ifdef _OPENMP
    const int64_t tid = omp_get_thread_num(), nt = omp_get_num_threads();
#else
    const int64_t tid = 0, nt = 1;
#endif
    const int64_t groups = (R + FX_LN_ROW_GROUP - 1) / FX_LN_ROW_GROUP;
    const int64_t share = groups / nt, extra = groups % nt;
    const int64_t g0 = tid * share + (tid < extra ? tid : extra);
    const int64_t g1 = g0 + share + (tid < extra ? 1 : 0);
    *r0 = g0 * FX_LN_ROW_GROUP < R ? g0 * FX_LN_ROW_GROUP : R;
    *r1 = g1 * FX_LN_ROW_GROUP < R ? g1 * FX_LN_ROW_GROUP : R;
}

int tensor_layernorm(tensor_t *y, const tensor_t *x, const float *gamma, const float *beta,
                     double eps, float *mean, float *rstd)
{
    const char *func = __func__;
    if (!y || !x) return FX_FAIL(FX_EINVAL, "%s is NULL", !y ? "y" : "x");
    int64_t R = 0, D = 0;
    int rc = ln_check(func, x, eps, &R, &D);
    if (!rc) rc = nn_same_shape(func, "y", y, "x", x);
    if (rc) return rc;
    fx_op_args a = {.op = FX_OP_LAYERNORM, .func = func, .nt = 2, .t = {y, x}, .tn = {"y", "x"}};
    a.u.tfm.out = y;
    a.u.tfm.in[0] = x;
    a.u.tfm.fin[0] = gamma;
    a.u.tfm.fin[1] = beta;
    a.u.tfm.fout[0] = mean;
    a.u.tfm.fout[1] = rstd;
    a.u.tfm.value = eps;
    a.u.tfm.R = R;
    a.u.tfm.D = D;
    return fx_op_run(&a);
}

/* Where a pass reads a tensor: its own contiguous storage in place, a group of rows
 * at a time widened or dequantised into a stack buffer (fx_f32_block; fp32 read as it is), or
 * a whole fp32 copy made before (fmt FMT_FP32, base the copy) */
typedef struct ln_src {
    const fx_backend *be;
    fmt_t fmt;
    int exp;
    const void *base;
} ln_src;

/* rows [r0, r0 + nr) of s as fp32, D values a row (nr * D <= NN_ROW_MAX where buf is used) */
static const float *ln_rows_f32(const ln_src *s, int64_t r0, int64_t nr, int64_t D, float *buf)
{
    return fx_f32_block(s->be, s->fmt, s->exp, s->base, r0 * D, nr * D, buf);
}

/* Whether t can be read in place a group of rows at a time: host, contiguous, its exponent
 * settled where it has one */
static int ln_in_place_ok(const tensor_t *t, const char *func)
{
    return !t->st->on_device && fx_tensor_is_contiguous(t) &&
           (!fmt_is_shared_exponent(t->fmt) || fx_storage_settle(t->st, func) == FX_OK);
}

static ln_src ln_src_of(const tensor_t *t)
{
    const ln_src s = {fx_backend_active(), t->fmt, fmt_is_shared_exponent(t->fmt) ? t->st->exp : 0,
                      fx_tensor_base(t)};
    return s;
}

/* Rows of the forward pass for nn_write_rows: x's rows read in place (fp32) or widened into a
 * stack buffer, the statistics into st (each row's own entries, the same values whenever a row
 * is computed again), the outputs into out. */
typedef struct ln_fwd_rows {
    const fx_ln_kernels *k;
    ln_src x;
    int64_t D;
    float *st, eps;
    const float *gamma, *beta;
} ln_fwd_rows;

static void ln_fwd_row(const void *vc, int64_t r0, int64_t nr, float *out, float *rmax,
                       int64_t *rbad)
{
    (void)rmax; /* the write scans a stage itself */
    (void)rbad;
    const ln_fwd_rows *c = vc;
    float buf[NN_ROW_MAX];
    const float *xr = ln_rows_f32(&c->x, r0, nr, c->D, buf);
    c->k->forward(xr, out, c->st + 2 * r0, 0, nr, c->D, c->eps, c->gamma, c->beta);
}

/* Rows of dx for nn_write_rows, from x, dy (each row group read from its source) and the
 * statistics */
typedef struct ln_bwd_rows {
    const fx_ln_kernels *k;
    ln_src x, g;
    const float *st, *gamma;
    int64_t D;
} ln_bwd_rows;

static void ln_bwd_row(const void *vc, int64_t r0, int64_t nr, float *out, float *rmax,
                       int64_t *rbad)
{
    (void)rmax;
    (void)rbad;
    const ln_bwd_rows *c = vc;
    float bx[NN_ROW_MAX], bg[NN_ROW_MAX];
    const float *xr = ln_rows_f32(&c->x, r0, nr, c->D, bx);
    const float *gr = ln_rows_f32(&c->g, r0, nr, c->D, bg);
    c->k->backward(xr, gr, c->st + 2 * r0, out, 0, nr, c->D, c->gamma);
}

/* Rows a call of the row functions takes: whole groups of FX_LN_ROW_GROUP within the row
 * buffer where a row is short enough, so that the SIMD levels keep their rows side by side */
static int64_t ln_rows_per_call(int64_t D)
{
    const int64_t g = NN_ROW_MAX / (D > 0 ? D : 1);
    return g >= FX_LN_ROW_GROUP ? g / FX_LN_ROW_GROUP * FX_LN_ROW_GROUP : (g > 0 ? g : 1);
}

int fx_nn_layernorm_host(const fx_op_args *req)
{
    tensor_t *y = req->u.tfm.out;
    const tensor_t *x = req->u.tfm.in[0];
    const float *gamma = req->u.tfm.fin[0], *beta = req->u.tfm.fin[1];
    float *mean = req->u.tfm.fout[0], *rstd = req->u.tfm.fout[1];
    const double eps = req->u.tfm.value;
    const int64_t R = req->u.tfm.R, D = req->u.tfm.D;
    const char *func = req->func;
    int rc = FX_OK;
    if (R == 0) return FX_OK;
    fx_scratch s = {.n = 0};
    const float *xv;
    float *st = fx_scratch_alloc(&s, 2 * R, sizeof *st);
    const float epsf = (float)eps;
    if (!st) {
        rc = fx_error(FX_ENOMEM, func, "cannot allocate statistics for %lld rows", (long long)R);
        goto done;
    }
    /* a contiguous host x: its rows read (widened) a group at a time and each group of y's
     * rows written as it is made (nn_write_rows), without a whole fp32 copy of x or an fp32
     * stage of y where y's format allows; the same operations on the same values */
    if (D <= NN_ROW_MAX && ln_in_place_ok(x, func)) {
        const ln_fwd_rows c = {ln_kernels(), ln_src_of(x), D, st, epsf, gamma, beta};
        rc = nn_write_rows(y, R, D, ln_rows_per_call(D), ln_fwd_row, &c, 0, x->st == y->st,
                           R > FX_LN_ROW_GROUP ? nn_threads_for(R * D) : 1, func);
        if (rc == FX_OK)
            for (int64_t r = 0; r < R; r++) {
                if (mean) mean[r] = st[2 * r];
                if (rstd) rstd[r] = st[2 * r + 1];
            }
        goto done;
    }
    if ((rc = nn_in_f32(x, &xv, &s, func))) goto done;
    const tensor_t *ins[1] = {x};
    /* each row's statistics are taken before its elements are written */
    float *v = nn_out_f32(y, ins, 1, nn_private_f32(x, xv), &s);
    if (!v) {
        rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)(R * D));
        goto done;
    }
    const fx_ln_kernels *k = ln_kernels();
    const int nt = R > FX_LN_ROW_GROUP ? nn_threads_for(R * D) : 1;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        int64_t r0, r1;
        ln_my_rows(R, &r0, &r1);
        if (r0 < r1) k->forward(xv, v, st, r0, r1, D, epsf, gamma, beta);
    }
    rc = fx_write_f32(y, v, func);
    if (rc == FX_OK)
        for (int64_t r = 0; r < R; r++) {
            if (mean) mean[r] = st[2 * r];
            if (rstd) rstd[r] = st[2 * r + 1];
        }
done:
    fx_scratch_free(&s);
    return rc;
}

int tensor_layernorm_backward(tensor_t *dx, float *dgamma, float *dbeta, const tensor_t *dy,
                              const tensor_t *x, const float *gamma, double eps)
{
    const char *func = __func__;
    if (!dx || !dy || !x)
        return FX_FAIL(FX_EINVAL, "%s is NULL", !dx ? "dx" : (!dy ? "dy" : "x"));
    if (dgamma && dgamma == dbeta)
        return FX_FAIL(FX_EINVAL, "dgamma and dbeta are the same buffer (%p)", (void *)dgamma);
    int64_t R = 0, D = 0;
    int rc = ln_check(func, x, eps, &R, &D);
    if (!rc) rc = nn_same_shape(func, "dy", dy, "x", x);
    if (!rc) rc = nn_same_shape(func, "dx", dx, "x", x);
    if (rc) return rc;
    fx_op_args a = {.op = FX_OP_LAYERNORM_BACKWARD, .func = func, .nt = 3, .t = {dx, dy, x},
                    .tn = {"dx", "dy", "x"}};
    a.u.tfm.out = dx;
    a.u.tfm.in[0] = dy;
    a.u.tfm.in[1] = x;
    a.u.tfm.fin[0] = gamma;
    a.u.tfm.fout[0] = dgamma;
    a.u.tfm.fout[1] = dbeta;
    a.u.tfm.value = eps;
    a.u.tfm.R = R;
    a.u.tfm.D = D;
    return fx_op_run(&a);
}

/* columns of dgamma/dbeta per thread's block in the backward (a multiple of 16 floats: the
 * AVX-512 kernel keeps a block's sums in four registers of each) */
#define LN_COL_BLOCK 64

int fx_nn_layernorm_backward_host(const fx_op_args *req)
{
    tensor_t *dx = req->u.tfm.out;
    const tensor_t *dy = req->u.tfm.in[0], *x = req->u.tfm.in[1];
    const float *gamma = req->u.tfm.fin[0];
    float *dgamma = req->u.tfm.fout[0], *dbeta = req->u.tfm.fout[1];
    const double eps = req->u.tfm.value;
    const int64_t R = req->u.tfm.R, D = req->u.tfm.D;
    const char *func = req->func;
    int rc = FX_OK;
    fx_scratch s = {.n = 0};
    const float *xv = NULL, *gv = NULL;
    float *st = fx_scratch_alloc(&s, 2 * R + 1, sizeof *st);
    float *sg = fx_scratch_alloc(&s, 2 * D, sizeof *sg); /* dgamma, dbeta sums, fp32 */
    const float epsf = (float)eps;
    if (!st || !sg) {
        rc = fx_error(FX_ENOMEM, func, "cannot allocate statistics for %lld rows", (long long)R);
        goto done;
    }
    memset(sg, 0, sizeof *sg * (size_t)(2 * D));
    if (R > 0) {
        /* dx's rows written as they are made (nn_write_rows) where its storage is its own and
         * its rows are short enough; else row r reads its dy and x before writing its
         * elements into a stage (dy's private copy where there is one) */
        const int by_rows = dx->st != dy->st && dx->st != x->st && D <= NN_ROW_MAX;
        /* with by_rows, x and dy are read in place a group of rows at a time by every pass
         * (the statistics, dgamma and dbeta, dx), never copied whole: in the transformer's
         * [16384, 128] bf16 layer norms the two whole fp32 copies and their reads took over
         * half of the backward's time (docs/performance.md) */
        const int stream = by_rows && ln_in_place_ok(x, func) && ln_in_place_ok(dy, func);
        ln_src xs, gs;
        if (stream) {
            xs = ln_src_of(x);
            gs = ln_src_of(dy);
        } else {
            if ((rc = nn_in_f32(x, &xv, &s, func))) goto done;
            if ((rc = nn_in_f32(dy, &gv, &s, func))) goto done;
            xs = (ln_src){fx_backend_active(), FMT_FP32, 0, xv};
            gs = (ln_src){fx_backend_active(), FMT_FP32, 0, gv};
        }
        const tensor_t *ins[2] = {dy, x};
        float *v = by_rows ? NULL : nn_out_f32(dx, ins, 2, nn_private_f32(dy, gv), &s);
        if (!by_rows && !v) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)(R * D));
            goto done;
        }
        /* the rows' statistics, then dgamma, dbeta while dy is still intact: each column's
         * sums in row order, columns split among the threads in blocks of LN_COL_BLOCK and
         * rows taken a group at a time (the same order, so the same bits, as one thread going
         * row by row) */
        const fx_ln_kernels *kn = ln_kernels();
        const int nt = R > FX_LN_ROW_GROUP ? nn_threads_for(R * D) : 1;
        (void)nt;
        const int64_t ncb = (D + LN_COL_BLOCK - 1) / LN_COL_BLOCK;
        const int64_t G = ln_rows_per_call(D); /* rows a group: G * D <= NN_ROW_MAX if D is */
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
        {
            int64_t r0, r1;
            ln_my_rows(R, &r0, &r1);
            float bx[NN_ROW_MAX], bg[NN_ROW_MAX];
            for (int64_t r = r0; r < r1; r += G) {
                const int64_t nr = r1 - r < G ? r1 - r : G;
                kn->forward(ln_rows_f32(&xs, r, nr, D, bx), NULL, st + 2 * r, 0, nr, D, epsf,
                            NULL, NULL);
            }
#ifdef _OPENMP
#pragma omp barrier
#pragma omp for schedule(static)
#endif
            for (int64_t cb = 0; cb < ncb; cb++) {
                const int64_t k0 = cb * LN_COL_BLOCK;
                const int64_t k1 = k0 + LN_COL_BLOCK < D ? k0 + LN_COL_BLOCK : D;
                for (int64_t r = 0; r < R; r += G) {
                    const int64_t nr = R - r < G ? R - r : G;
                    kn->param_sums(ln_rows_f32(&xs, r, nr, D, bx), ln_rows_f32(&gs, r, nr, D, bg),
                                   st + 2 * r, nr, D, k0, k1, sg);
                }
            }
            /* the loop's barrier: every column's sums read dy before any dx row is written
             * (dx may be dy's private copy) */
            if (v && r0 < r1) kn->backward(xv, gv, st, v, r0, r1, D, gamma);
        }
        if (by_rows) {
            const ln_bwd_rows c = {kn, xs, gs, st, gamma, D};
            rc = nn_write_rows(dx, R, D, ln_rows_per_call(D), ln_bwd_row, &c, 0, 0, nt, func);
        } else {
            rc = fx_write_f32(dx, v, func);
        }
    }
    if (rc == FX_OK)
        for (int64_t k = 0; k < D; k++) {
            if (dgamma) dgamma[k] = sg[k];
            if (dbeta) dbeta[k] = sg[D + k];
        }
done:
    fx_scratch_free(&s);
    return rc;
}
