/* The training ops of include/flexpoint_nn.h on device tensors (the fx_gnn_* entry points of
 * gpu_nn.h), CUDA builds. src/nn/... validates and calls these when its tensors live on a
 * device; each runs the kernels of gpu_nn.cu and writes through the device write path
 * (fx_gpu_write_stage -> fx_write_shared_with), so exponents and statistics come from the
 * host's own code, as for the simple ops.
 *
 * Correspondence with the CPU code, op by op:
 *   pooling, relu_backward, dropout, mean, sgd/adam, loss scaling: the same integer or IEEE
 *     steps per element in the same order (integer formats bit-identical; float formats too,
 *     except the fp32 sums of tensor_mean, which add in tensor_sum's device order);
 *   batch norm: the same double computations in the same order (one thread per channel), so
 *     bit-identical as well;
 *   softmax cross-entropy: the same steps, with CUDA's exp/log/log1p instead of glibc's
 *     (results within a few fp32 ulps; the loss is summed on the host in row order).
 * Raw pointers (include/flexpoint_gpu.h): element-sized buffers (argmax, master, momentum and
 * Adam moments, the unscaled gradients) are device memory of the tensors' device; small
 * per-row or per-channel arrays (labels, loss, batch-norm statistics) are host memory. Both
 * are checked with cudaPointerGetAttributes before any device work.
 */
#include "../core/dispatch.h"
#include "gpu_internal.h"
#include "gpu_nn.h"
#include "gpu_nn_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- one op call: its device, temporaries and status ---------------------------------------- */

#define GNN_MAX_TMP 16

typedef struct gnn {
    const char *func;
    int device, prev;
    int rc; /* first failure; later steps do nothing once it is set */
    void *tmp[GNN_MAX_TMP];
    int ntmp;
} gnn;

/* Make the tensors' device current for the call (CUDA's current device is per thread and
 * belongs to the caller, so it is restored by gnn_end). */
static int gnn_begin(gnn *g, int device, const char *func)
{
    memset(g, 0, sizeof *g);
    g->func = func;
    g->device = device;
    g->prev = device;
    g->rc = fx_gr_get_device(&g->prev, func);
    if (!g->rc && g->prev != device) g->rc = fx_gr_set_device(device, func);
    return g->rc;
}

/* Zero-filled device memory for the call (NULL once the call has failed). Zeroed because the
 * statistics are reduced with atomics into it and the scatter stages add into it. */
static void *gnn_alloc(gnn *g, int64_t n, size_t sz)
{
    if (g->rc) return NULL;
    if (g->ntmp >= GNN_MAX_TMP) {
        g->rc = fx_error(FX_ENOMEM, g->func, "too many device temporaries in one op");
        return NULL;
    }
    const size_t bytes = (size_t)(n > 0 ? n : 1) * sz;
    void *p = NULL;
    g->rc = fx_gr_malloc(bytes, &p, g->func);
    if (!g->rc) g->rc = fx_gr_memset0(p, bytes, g->func);
    if (p) g->tmp[g->ntmp++] = p;
    return g->rc ? NULL : p;
}

static fx_dstage_stats *gnn_stats(gnn *g) { return gnn_alloc(g, 1, sizeof(fx_dstage_stats)); }

static void gnn_copy(gnn *g, void *dst, const void *src, size_t bytes, int dir)
{
    if (!g->rc) g->rc = fx_gr_memcpy(dst, src, bytes, dir, g->func);
}

/* Report known errors (the work itself runs on asynchronously), free the temporaries into the
 * cache (their reuse is ordered on the stream), restore the caller's device; the status. */
static int gnn_end(gnn *g)
{
    if (!g->rc) g->rc = fx_gr_op_done(g->func);
    for (int i = 0; i < g->ntmp; i++) fx_gr_free(g->tmp[i]);
    g->ntmp = 0;
    if (g->prev != g->device) fx_gr_set_device(g->prev, g->func);
    return g->rc;
}

static void gnn_write(gnn *g, tensor_t *out, int ic, int64_t n, void *stage, fx_dexp exp,
                      const fx_dstage_stats *st)
{
    if (g->rc) return;
    g->rc = fx_gpu_write_stage(out, ic ? FX_STAGE_I64 : FX_STAGE_F32, n, ic ? NULL : stage,
                               ic ? stage : NULL, exp, st, g->func);
}

/* ---- raw pointer checks ---------------------------------------------------------------------- */

/* p must be memory of CUDA device `device` (or managed memory). */
static int gnn_dev_ptr(const void *p, int device, const char *name, const char *func)
{
    int where = -1;
    int rc = fx_gnr_pointer_where(p, &where, func);
    if (rc) return rc;
    if (where == device || where == FX_GNN_MANAGED) return FX_OK;
    if (where < 0)
        return fx_error(FX_EINVAL, func, "%s is host memory, but the tensors live on CUDA "
                        "device %d: it must be device memory of that device (allocate it "
                        "with flexpoint_gpu_malloc)", name, device);
    return fx_error(FX_EINVAL, func, "%s is memory of CUDA device %d, but the tensors live on "
                    "CUDA device %d", name, where, device);
}

int fx_gnn_host_ptr(const void *p, const char *name, const char *func)
{
    int where = -1;
    int rc = fx_gnr_pointer_where(p, &where, func);
    if (rc) return rc;
    if (where == -1 || where == FX_GNN_MANAGED) return FX_OK;
    return fx_error(FX_EINVAL, func, "%s is memory of CUDA device %d, but it must be host "
                    "memory (small per-row and per-channel arrays stay on the host when the "
                    "tensors live on a device, flexpoint_gpu.h)", name, where);
}

/* ---- pooling --------------------------------------------------------------------------------- */

static int gnn_ic(const tensor_t *t) { return fmt_is_shared_exponent(t->fmt) != 0; }

/* pool.c's pool_divide_exact on a device stage: a power-of-two count only moves the exponent;
 * otherwise every value becomes its round-to-odd quotient at the shift chosen from the largest
 * magnitude (*st: the stage's statistics, replaced by those of the quotients). */
static void gnn_divide_exact(gnn *g, int64_t *v, int64_t n, int64_t count, fx_dexp *e,
                             fx_dstage_stats **st)
{
    if (g->rc) return;
    const uint64_t cnt = (uint64_t)count;
    if ((cnt & (cnt - 1)) == 0) {
        e->c -= fx_bitlen_u64(cnt) - 1;
        return;
    }
    fx_dstage_stats h;
    gnn_copy(g, &h, *st, sizeof h, FX_GR_D2H);
    if (g->rc || h.imax == 0) return;
    const int k = fx_div_odd_shift(h.imax, cnt);
    fx_dstage_stats *q = gnn_stats(g);
    if (!g->rc) g->rc = fx_gnk_div_odd(v, n, cnt, k, q, g->func);
    e->c -= k;
    *st = q;
}

int fx_gnn_maxpool2d(tensor_t *y, int32_t *argmax, const tensor_t *x, const fx_pool_geom *pg,
                     const char *func)
{
    const int device = x->st->device;
    if (argmax) {
        int rc = gnn_dev_ptr(argmax, device, "argmax", func);
        if (rc) return rc;
    }
    gnn g;
    if (gnn_begin(&g, device, func)) return gnn_end(&g);
    const int ic = gnn_ic(x);
    const int64_t ny = pg->N * pg->C * pg->OH * pg->OW;
    const fx_dview xv = fx_gpu_view_of(x);
    fx_dstage_stats *st = gnn_stats(&g);
    void *stage = gnn_alloc(&g, ny, ic ? sizeof(int64_t) : sizeof(float));
    /* the caller's argmax is written only after y's write has succeeded */
    int32_t *idx = argmax ? gnn_alloc(&g, ny, sizeof(int32_t)) : NULL;
    if (!g.rc) g.rc = fx_gnk_maxpool(&xv, ic, pg, stage, idx, st, func);
    gnn_write(&g, y, ic, ny, stage, fx_dexp_view(&xv, 0), st);
    if (argmax) gnn_copy(&g, argmax, idx, (size_t)ny * sizeof(int32_t), FX_GR_D2D);
    return gnn_end(&g);
}

int fx_gnn_maxpool2d_backward(tensor_t *dx, const tensor_t *dy, const int32_t *argmax,
                              int own_indices, const char *func)
{
    const int device = dx->st->device;
    int rc = gnn_dev_ptr(argmax, device, "argmax", func);
    if (rc) return rc;
    const int64_t planes = dx->shape[0] * dx->shape[1], HW = dx->shape[2] * dx->shape[3];
    const int64_t P = dy->shape[2] * dy->shape[3], ny = planes * P, nx = planes * HW;
    gnn g;
    if (gnn_begin(&g, device, func)) return gnn_end(&g);
    /* every index in its own plane, checked before anything is written (as on the host);
     * indices from the library's own forward pass need no check, and no wait for it */
    unsigned long long hbad = 0;
    if (!own_indices) {
        unsigned long long *bad = gnn_alloc(&g, 1, sizeof *bad);
        if (!g.rc) g.rc = fx_gnk_argmax_check(argmax, ny, P, HW, bad, func);
        gnn_copy(&g, &hbad, bad, sizeof hbad, FX_GR_D2H);
    }
    if (!g.rc && hbad) {
        const int64_t i = ny - (int64_t)hbad, lo = (i / P) * HW;
        int32_t v = 0;
        gnn_copy(&g, &v, argmax + i, sizeof v, FX_GR_D2H);
        char b1[160];
        if (!g.rc)
            g.rc = fx_error(FX_ERANGE, func, "argmax[%lld]=%d is outside the (n, c) plane of "
                            "that output, [%lld, %lld) in dx.shape=%s", (long long)i, v,
                            (long long)lo, (long long)(lo + HW), fx_shape_str(dx, b1, sizeof b1));
        return gnn_end(&g);
    }
    const int ic = gnn_ic(dy);
    const fx_dview dyv = fx_gpu_view_of(dy);
    fx_dstage_stats *st = gnn_stats(&g);
    void *stage = gnn_alloc(&g, nx, ic ? sizeof(int64_t) : sizeof(float));
    if (!g.rc) g.rc = fx_gnk_maxpool_backward(&dyv, ic, argmax, planes, P, HW, stage, st, func);
    gnn_write(&g, dx, ic, nx, stage, fx_dexp_view(&dyv, 0), st);
    return gnn_end(&g);
}

/* Average pooling of x by geometry pg into y (also the global average pool). */
static int gnn_avgpool(tensor_t *y, const tensor_t *x, const fx_pool_geom *pg, const char *func)
{
    gnn g;
    if (gnn_begin(&g, x->st->device, func)) return gnn_end(&g);
    const int ic = gnn_ic(x);
    const int64_t ny = pg->N * pg->C * pg->OH * pg->OW;
    const fx_dview xv = fx_gpu_view_of(x);
    fx_dstage_stats *st = gnn_stats(&g);
    void *stage = gnn_alloc(&g, ny, ic ? sizeof(int64_t) : sizeof(float));
    if (!g.rc) g.rc = fx_gnk_avgpool(&xv, ic, pg, stage, st, func);
    fx_dexp e = fx_dexp_view(&xv, 0);
    if (ic) gnn_divide_exact(&g, stage, ny, pg->KH * pg->KW, &e, &st);
    gnn_write(&g, y, ic, ny, stage, e, st);
    return gnn_end(&g);
}

int fx_gnn_avgpool2d(tensor_t *y, const tensor_t *x, const fx_pool_geom *pg, const char *func)
{
    return gnn_avgpool(y, x, pg, func);
}

int fx_gnn_avgpool2d_backward(tensor_t *dx, const tensor_t *dy, const fx_pool_geom *pg,
                              const char *func)
{
    gnn g;
    if (gnn_begin(&g, dx->st->device, func)) return gnn_end(&g);
    const int ic = gnn_ic(dy);
    const int64_t nx = pg->N * pg->C * pg->H * pg->W;
    const fx_dview dyv = fx_gpu_view_of(dy);
    fx_dstage_stats *st = gnn_stats(&g);
    void *stage = gnn_alloc(&g, nx, ic ? sizeof(int64_t) : sizeof(float));
    if (!g.rc) g.rc = fx_gnk_avgpool_backward(&dyv, ic, pg, stage, st, func);
    fx_dexp e = fx_dexp_view(&dyv, 0);
    if (ic) gnn_divide_exact(&g, stage, nx, pg->KH * pg->KW, &e, &st);
    gnn_write(&g, dx, ic, nx, stage, e, st);
    return gnn_end(&g);
}

int fx_gnn_global_avgpool(tensor_t *y, const tensor_t *x, int64_t planes, int64_t HW,
                          const char *func)
{
    (void)planes;
    (void)HW;
    /* the window that covers the whole plane: pool.c's global loop sums the plane in row-major
     * order and divides by H*W, which is what the average pool does for this window */
    fx_pool_geom pg;
    memset(&pg, 0, sizeof pg);
    pg.N = x->shape[0];
    pg.C = x->shape[1];
    pg.H = x->shape[2];
    pg.W = x->shape[3];
    pg.KH = pg.H;
    pg.KW = pg.W;
    pg.OH = pg.OW = 1;
    pg.sh = pg.sw = 1;
    return gnn_avgpool(y, x, &pg, func);
}

int fx_gnn_global_avgpool_backward(tensor_t *dx, const tensor_t *dy, int64_t planes, int64_t HW,
                                   const char *func)
{
    gnn g;
    if (gnn_begin(&g, dx->st->device, func)) return gnn_end(&g);
    const int ic = gnn_ic(dy);
    const int64_t nx = planes * HW;
    const fx_dview dyv = fx_gpu_view_of(dy);
    fx_dstage_stats *st = gnn_stats(&g);
    void *stage = gnn_alloc(&g, nx, ic ? sizeof(int64_t) : sizeof(float));
    if (!g.rc) g.rc = fx_gnk_gap_backward(&dyv, ic, planes, HW, stage, st, func);
    /* the largest of the broadcast values is the largest of dy: the same shift as pool.c's
     * division of the planes' values before it broadcasts them */
    fx_dexp e = fx_dexp_view(&dyv, 0);
    if (ic) gnn_divide_exact(&g, stage, nx, HW, &e, &st);
    gnn_write(&g, dx, ic, nx, stage, e, st);
    return gnn_end(&g);
}

/* ---- element-wise ops ---------------------------------------------------------------------- */

int fx_gnn_relu_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x, const char *func)
{
    gnn g;
    if (gnn_begin(&g, dx->st->device, func)) return gnn_end(&g);
    const int ic = gnn_ic(dy);
    const int64_t n = fx_numel_of(dy->ndim, dy->shape);
    const fx_dview dyv = fx_gpu_view_of(dy), xv = fx_gpu_view_of(x);
    fx_dstage_stats *st = gnn_stats(&g);
    void *stage = gnn_alloc(&g, n, ic ? sizeof(int64_t) : sizeof(float));
    if (!g.rc) g.rc = fx_gnk_relu_backward(&dyv, ic, &xv, n, stage, st, func);
    gnn_write(&g, dx, ic, n, stage, fx_dexp_view(&dyv, 0), st);
    return gnn_end(&g);
}

int fx_gnn_dropout(tensor_t *y, const tensor_t *x, uint64_t thr, double factor, int64_t ms,
                   int k2, uint64_t seed, uint64_t step, const char *func)
{
    gnn g;
    if (gnn_begin(&g, y->st->device, func)) return gnn_end(&g);
    const int ic = gnn_ic(x);
    const int64_t n = fx_numel_of(x->ndim, x->shape);
    const fx_dview xv = fx_gpu_view_of(x);
    fx_dstage_stats *st = gnn_stats(&g);
    void *stage = gnn_alloc(&g, n, ic ? sizeof(int64_t) : sizeof(float));
    if (!g.rc)
        g.rc = fx_gnk_dropout(&xv, ic, n, seed, step, thr, ms, factor, y->fmt, stage, st, func);
    gnn_write(&g, y, ic, n, stage, ic ? fx_dexp_view(&xv, k2 - 30) : fx_dexp_const(0), st);
    return gnn_end(&g);
}

int fx_gnn_mean(tensor_t *out, const tensor_t *a, int64_t outer, int64_t len, int64_t inner,
                const char *func)
{
    gnn g;
    if (gnn_begin(&g, out->st->device, func)) return gnn_end(&g);
    const int ic = gnn_ic(a);
    const int64_t nout = outer * inner;
    fx_dview av = fx_gpu_view_of(a);
    /* the integer mean into a float format divides at a's exponent on the host's side of the
     * kernel call: it must be known (a pending device choice is settled, one wait) */
    if (ic && !fmt_is_shared_exponent(out->fmt)) g.rc = fx_gpu_view_known(a, &av, func);
    fx_dstage_stats *st = gnn_stats(&g);
    void *sums = gnn_alloc(&g, nout, ic ? sizeof(int64_t) : sizeof(float));
    if (!g.rc && nout > 0) g.rc = fx_gk_sum(&av, ic, outer, len, inner, sums, st, func);
    if (!ic) {
        /* fp32 sums (tensor_sum's device order), then sum / len in double, rounded once */
        fx_dstage_stats *q = gnn_stats(&g);
        if (!g.rc) g.rc = fx_gnk_mean_f32(sums, nout, (double)len, out->fmt, q, func);
        gnn_write(&g, out, 0, nout, sums, fx_dexp_const(0), q);
    } else if (fmt_is_shared_exponent(out->fmt)) {
        /* reduce.c: the largest quotient |S| / len is max|S| / len (floor is monotonic), and
         * gives the common grid of frac fraction bits */
        fx_dstage_stats h;
        memset(&h, 0, sizeof h);
        gnn_copy(&g, &h, st, sizeof h, FX_GR_D2H);
        const int frac = 62 - fx_bitlen_u64(len > 0 ? h.imax / (uint64_t)len : 0);
        fx_dstage_stats *q = gnn_stats(&g);
        if (!g.rc && len > 0)
            g.rc = fx_gnk_mean_int(sums, nout, (uint64_t)len, frac, 0, NULL, out->fmt, q, func);
        gnn_write(&g, out, 1, nout, sums, fx_dexp_view(&av, -frac), q);
    } else {
        float *f = gnn_alloc(&g, nout, sizeof(float));
        if (!g.rc && len > 0)
            g.rc = fx_gnk_mean_int(sums, nout, (uint64_t)len, 0, av.exp, f, out->fmt, NULL, func);
        gnn_write(&g, out, 0, nout, f, fx_dexp_const(0), NULL);
    }
    return gnn_end(&g);
}

/* ---- softmax cross-entropy ----------------------------------------------------------------- */

int fx_gnn_softmax_ce(float *loss, tensor_t *dlogits, const tensor_t *logits,
                      const int32_t *labels, double grad_scale, const char *func)
{
    int rc = fx_gnn_host_ptr(loss, "loss", func);
    if (rc) return rc;
    const int64_t N = logits->shape[0], K = logits->shape[1];
    double *row_loss = fx_alloc_array(N, sizeof *row_loss);
    if (!row_loss) return fx_error(FX_ENOMEM, func, "cannot allocate %lld doubles", (long long)N);
    gnn g;
    if (gnn_begin(&g, logits->st->device, func)) {
        free(row_loss);
        return gnn_end(&g);
    }
    const fx_dview lv = fx_gpu_view_of(logits);
    int32_t *dlab = gnn_alloc(&g, N, sizeof *dlab);
    double *drow = gnn_alloc(&g, N, sizeof *drow);
    float *dg = dlogits ? gnn_alloc(&g, N * K, sizeof *dg) : NULL;
    fx_dstage_stats *st = gnn_stats(&g);
    gnn_copy(&g, dlab, labels, (size_t)N * sizeof *dlab, FX_GR_H2D);
    if (!g.rc)
        g.rc = fx_gnk_softmax_ce(&lv, dlab, N, K, grad_scale / (double)N, drow, dg,
                                 dlogits ? (int)dlogits->fmt : FMT_FP32, st, func);
    gnn_copy(&g, row_loss, drow, (size_t)N * sizeof *drow, FX_GR_D2H);
    if (dlogits) gnn_write(&g, dlogits, 0, N * K, dg, fx_dexp_const(0), st);
    if (!g.rc) {
        double total = 0.0; /* row order, as on the host */
        for (int64_t i = 0; i < N; i++) total += row_loss[i];
        *loss = (float)(total / (double)N);
    }
    free(row_loss);
    return gnn_end(&g);
}

/* ---- batch norm ------------------------------------------------------------------------------ */

int fx_gnn_batchnorm(tensor_t *y, const tensor_t *x, const tensor_t *gamma, const tensor_t *beta,
                     float *running_mean, float *running_var, float *save_mean,
                     float *save_invstd, double momentum, double eps, int training,
                     const fx_bn_dims *d, const char *func)
{
    const float *ptrs[4] = {running_mean, running_var, save_mean, save_invstd};
    static const char *const names[4] = {"running_mean", "running_var", "save_mean",
                                         "save_invstd"};
    for (int i = 0; i < 4; i++) {
        if (!ptrs[i] || (!training && i >= 2)) continue;
        int rc = fx_gnn_host_ptr(ptrs[i], names[i], func);
        if (rc) return rc;
    }
    const int64_t C = d->C, n = d->N * d->C * d->S;
    double *chan = fx_alloc_array(C, FX_BN_FWD * sizeof(double));
    if (!chan)
        return fx_error(FX_ENOMEM, func, "cannot allocate statistics for %lld channels",
                        (long long)C);
    gnn g;
    if (gnn_begin(&g, y->st->device, func)) {
        free(chan);
        return gnn_end(&g);
    }
    const fx_dview xv = fx_gpu_view_of(x), gv = fx_gpu_view_of(gamma), bv = fx_gpu_view_of(beta);
    float *drm = NULL, *drv = NULL;
    if (!training) { /* inference reads the running statistics on the device */
        drm = gnn_alloc(&g, C, sizeof(float));
        drv = gnn_alloc(&g, C, sizeof(float));
        gnn_copy(&g, drm, running_mean, (size_t)C * sizeof(float), FX_GR_H2D);
        gnn_copy(&g, drv, running_var, (size_t)C * sizeof(float), FX_GR_H2D);
    }
    double *dchan = gnn_alloc(&g, C, FX_BN_FWD * sizeof(double));
    float *stage = gnn_alloc(&g, n, sizeof(float));
    fx_dstage_stats *st = gnn_stats(&g);
    if (!g.rc)
        g.rc = fx_gnk_bn_channels(&xv, &gv, &bv, drm, drv, d->N, C, d->S, eps, dchan, func);
    if (!g.rc) g.rc = fx_gnk_bn_apply(&xv, n, C, d->S, dchan, y->fmt, stage, st, func);
    gnn_write(&g, y, 0, n, stage, fx_dexp_const(0), st);
    if (training) {
        gnn_copy(&g, chan, dchan, (size_t)C * FX_BN_FWD * sizeof(double), FX_GR_D2H);
        /* batchnorm.c's update of the caller's arrays, after y's write succeeded */
        for (int64_t c = 0; c < C && !g.rc; c++) {
            const double *ch = chan + c * FX_BN_FWD;
            if (running_mean) {
                running_mean[c] =
                    (float)((1.0 - momentum) * running_mean[c] + momentum * ch[FX_BN_MU]);
                running_var[c] =
                    (float)((1.0 - momentum) * running_var[c] + momentum * ch[FX_BN_UVAR]);
            }
            if (save_mean) save_mean[c] = (float)ch[FX_BN_MU];
            if (save_invstd) save_invstd[c] = (float)ch[FX_BN_IS];
        }
    }
    free(chan);
    return gnn_end(&g);
}

int fx_gnn_batchnorm_backward(tensor_t *dx, tensor_t *dgamma, tensor_t *dbeta, const tensor_t *dy,
                              const tensor_t *x, const tensor_t *gamma, const float *save_mean,
                              const float *save_invstd, const fx_bn_dims *d, const char *func)
{
    int rc = fx_gnn_host_ptr(save_mean, "save_mean", func);
    if (!rc) rc = fx_gnn_host_ptr(save_invstd, "save_invstd", func);
    if (rc) return rc;
    const int64_t C = d->C, n = d->N * d->C * d->S;
    gnn g;
    if (gnn_begin(&g, dx->st->device, func)) return gnn_end(&g);
    const fx_dview xv = fx_gpu_view_of(x), dyv = fx_gpu_view_of(dy),
                   gv = fx_gpu_view_of(gamma);
    float *dsm = gnn_alloc(&g, C, sizeof(float)), *dsi = gnn_alloc(&g, C, sizeof(float));
    gnn_copy(&g, dsm, save_mean, (size_t)C * sizeof(float), FX_GR_H2D);
    gnn_copy(&g, dsi, save_invstd, (size_t)C * sizeof(float), FX_GR_H2D);
    double *dchan = gnn_alloc(&g, C, FX_BN_BWD * sizeof(double));
    float *dg = gnn_alloc(&g, C, sizeof(float)), *db = gnn_alloc(&g, C, sizeof(float));
    float *stage = gnn_alloc(&g, n, sizeof(float));
    fx_dstage_stats *gst = gnn_stats(&g), *bst = gnn_stats(&g), *st = gnn_stats(&g);
    const int gf = dgamma ? (int)dgamma->fmt : FMT_FP32, bf = dbeta ? (int)dbeta->fmt : FMT_FP32;
    if (!g.rc)
        g.rc = fx_gnk_bn_grad_channels(&xv, &dyv, &gv, dsm, dsi, d->N, C, d->S, dg, gf, gst, db,
                                       bf, bst, dchan, func);
    if (!g.rc) g.rc = fx_gnk_bn_grad_apply(&xv, &dyv, n, C, d->S, dchan, dx->fmt, stage, st, func);
    gnn_write(&g, dx, 0, n, stage, fx_dexp_const(0), st);
    if (dgamma) gnn_write(&g, dgamma, 0, C, dg, fx_dexp_const(0), gst);
    if (dbeta) gnn_write(&g, dbeta, 0, C, db, fx_dexp_const(0), bst);
    return gnn_end(&g);
}

/* ---- optimisers -------------------------------------------------------------------------------- */

/* optim.c's fx_optim_write_w on the device: new_p written once into w; stochastic rounding
 * for fp16/bf16 onto the grid first (into w_vals), for FLEX16_5/DFP16 by the write path's own
 * stochastic rounding keyed (seed, step) for this one write. */
static void gnn_write_w(gnn *g, tensor_t *w, float *new_p, float *w_vals, int64_t n,
                        int stochastic, uint64_t seed, uint64_t step,
                        const fx_dstage_stats *st)
{
    if (g->rc) return;
    if (!stochastic || w->fmt == FMT_FP32) {
        gnn_write(g, w, 0, n, new_p, fx_dexp_const(0), st);
        return;
    }
    if (w->fmt == FMT_FP16 || w->fmt == FMT_BF16) {
        g->rc = fx_gnk_sr_round(new_p, w_vals, n, w->fmt == FMT_FP16, seed, step, g->func);
        gnn_write(g, w, 0, n, w_vals, fx_dexp_const(0), st);
        return;
    }
    fx_storage *s = w->st;
    const int mode = s->rounding;
    const uint64_t old_seed = s->seed, old_counter = s->write_counter;
    s->rounding = FX_ROUND_STOCHASTIC;
    s->seed = seed;
    s->write_counter = step;
    gnn_write(g, w, 0, n, new_p, fx_dexp_const(0), st);
    s->rounding = mode;
    s->seed = old_seed;
    s->write_counter = old_counter;
}

/* Buffers of an optimiser step: each non-NULL one device memory of w's device. */
static int gnn_check_bufs(int device, int nb, const float *const *bufs, const char *const *names,
                          const char *func)
{
    for (int i = 0; i < nb; i++) {
        if (!bufs[i]) continue;
        int rc = gnn_dev_ptr(bufs[i], device, names[i], func);
        if (rc) return rc;
    }
    return FX_OK;
}

int fx_gnn_sgd_step(tensor_t *w, const tensor_t *grad, float *master, float *momentum_buf,
                    double lr, double momentum, double weight_decay, double grad_scale,
                    int stochastic, uint64_t seed, uint64_t step, const char *func)
{
    const int device = w->st->device;
    const float *bufs[2] = {master, momentum_buf};
    static const char *const names[2] = {"master", "momentum_buf"};
    int rc = gnn_check_bufs(device, 2, bufs, names, func);
    if (rc) return rc;
    const int64_t n = fx_numel_of(w->ndim, w->shape);
    gnn g;
    if (gnn_begin(&g, device, func)) return gnn_end(&g);
    const fx_dview gv = fx_gpu_view_of(grad), wv = fx_gpu_view_of(w);
    float *new_p = gnn_alloc(&g, n, sizeof(float)), *new_buf = gnn_alloc(&g, n, sizeof(float));
    const int sr16 = stochastic && (w->fmt == FMT_FP16 || w->fmt == FMT_BF16);
    /* the master keeps the exact update; only w's copy is rounded stochastically */
    float *w_vals = sr16 && master ? gnn_alloc(&g, n, sizeof(float)) : new_p;
    fx_dstage_stats *st = gnn_stats(&g);
    if (!g.rc)
        g.rc = fx_gnk_sgd(&gv, &wv, master, momentum_buf, n, lr, momentum, weight_decay,
                          grad_scale, new_p, new_buf, st, func);
    gnn_write_w(&g, w, new_p, w_vals, n, stochastic, seed, step, st);
    /* commit only after w's write succeeded: a failing step changes nothing */
    if (master) gnn_copy(&g, master, new_p, (size_t)n * sizeof(float), FX_GR_D2D);
    if (momentum_buf) gnn_copy(&g, momentum_buf, new_buf, (size_t)n * sizeof(float), FX_GR_D2D);
    return gnn_end(&g);
}

int fx_gnn_adam_step(tensor_t *w, const tensor_t *grad, float *master, float *m, float *v,
                     double lr, double beta1, double beta2, double eps, double weight_decay,
                     double grad_scale, double bc1, double sqrt_bc2, int stochastic,
                     uint64_t seed, uint64_t step, const char *func)
{
    const int device = w->st->device;
    const float *bufs[3] = {master, m, v};
    static const char *const names[3] = {"master", "m", "v"};
    int rc = gnn_check_bufs(device, 3, bufs, names, func);
    if (rc) return rc;
    const int64_t n = fx_numel_of(w->ndim, w->shape);
    gnn g;
    if (gnn_begin(&g, device, func)) return gnn_end(&g);
    const fx_dview gv = fx_gpu_view_of(grad), wv = fx_gpu_view_of(w);
    float *new_p = gnn_alloc(&g, n, sizeof(float));
    float *new_m = gnn_alloc(&g, n, sizeof(float)), *new_v = gnn_alloc(&g, n, sizeof(float));
    const int sr16 = stochastic && (w->fmt == FMT_FP16 || w->fmt == FMT_BF16);
    float *w_vals = sr16 && master ? gnn_alloc(&g, n, sizeof(float)) : new_p;
    fx_dstage_stats *st = gnn_stats(&g);
    if (!g.rc)
        g.rc = fx_gnk_adam(&gv, &wv, master, m, v, n, lr / bc1, beta1, beta2, eps, sqrt_bc2,
                           weight_decay, grad_scale, new_p, new_m, new_v, st, func);
    gnn_write_w(&g, w, new_p, w_vals, n, stochastic, seed, step, st);
    if (master) gnn_copy(&g, master, new_p, (size_t)n * sizeof(float), FX_GR_D2D);
    gnn_copy(&g, m, new_m, (size_t)n * sizeof(float), FX_GR_D2D);
    gnn_copy(&g, v, new_v, (size_t)n * sizeof(float), FX_GR_D2D);
    return gnn_end(&g);
}

/* ---- loss scaling ------------------------------------------------------------------------------ */

int fx_gnn_unscale(float inv, const tensor_t *const *grads, int n, float *const *out,
                   int *found_inf, const char *func)
{
    const int device = grads[0]->st->device;
    for (int i = 0; i < n; i++) {
        if (fx_numel_of(grads[i]->ndim, grads[i]->shape) == 0) continue;
        char name[32];
        snprintf(name, sizeof name, "out[%d]", i);
        int rc = gnn_dev_ptr(out[i], device, name, func);
        if (rc) return rc;
    }
    gnn g;
    if (gnn_begin(&g, device, func)) return gnn_end(&g);
    unsigned int *dbad = gnn_alloc(&g, 1, sizeof *dbad);
    int bad = 0;
    for (int i = 0; i < n && !g.rc; i++) {
        const tensor_t *t = grads[i];
        const int64_t numel = fx_numel_of(t->ndim, t->shape);
        if (numel == 0) continue;
        g.rc = fx_storage_settle(t->st, func); /* its last write's statistics are needed */
        if (g.rc) break;
        if (fmt_is_shared_exponent(t->fmt) && t->st->last.nonfinite > 0) bad = 1;
        const fx_dview tv = fx_gpu_view_of(t);
        g.rc = fx_gnk_unscale(&tv, numel, inv, out[i], dbad, func);
    }
    unsigned int hbad = 0;
    gnn_copy(&g, &hbad, dbad, sizeof hbad, FX_GR_D2H);
    if (!g.rc) *found_inf = bad || hbad;
    return gnn_end(&g);
}
