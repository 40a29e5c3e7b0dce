/* Optimiser steps: SGD with momentum, Adam and AdamW (include/flexpoint_nn.h), for weights of
 * every format, with or without an fp32 master copy.
 *
 * Semantics (decisions documented here once):
 * - Every element is updated in double from the fp32 state (weight, gradient, optimiser
 *   buffers) and each stored quantity is rounded once to fp32: the momentum buffer / Adam
 *   moments first, and the weight update then uses those stored fp32 values, as PyTorch's
 *   data flow does (buf is stored, then p -= lr * buf). The result is a pure function of the
 *   stored state, identical for every thread count and backend.
 * - With a master copy, the master (not w) is the weight the update and the weight decay read;
 *   the caller initialises it from w (tensor_to_f32) before the first step. w is then written
 *   once from the new master: fp16/bf16 round to nearest even, DFP16 takes the exact exponent,
 *   FLEX16_5 is an Autoflex-managed write (rounding as set by tensor_set_rounding).
 * - Without a master copy, w's stored values are read (exactly), updated and written back.
 * - stochastic != 0 rounds the write of w stochastically, keyed by (seed, step, element index)
 *   (row-major over w's shape), in both paths: fp16/bf16 through fx_sr_round_array; FLEX16_5
 *   and DFP16 through the write path's own stochastic rounding, by switching the storage to
 *   stochastic rounding with seed `seed` and write counter `step` for this one write and then
 *   restoring mode, seed and counter (so a rounding stream the user set with
 *   tensor_set_rounding continues undisturbed). Pass a different seed per parameter tensor if
 *   the roundings of different tensors must be independent. fp32 weights ignore it.
 *   stochastic == 0 leaves FLEX16_5/DFP16 writes to the tensor's own rounding mode.
 * - AdamW (fx_adamw_step) decouples the weight decay as torch.optim.AdamW: the gradient gets no
 *   decay term and the update is p (1 - lr weight_decay) - step_size m / denom, one double
 *   expression rounded once to fp32.
 * - momentum_buf may be NULL when momentum == 0 (PyTorch keeps no buffer then); when given it
 *   receives the gradient with weight decay, which is what a zero momentum keeps.
 * - Validation (pointers, shapes, hyper-parameters) happens before anything is written, and
 *   the caller's buffers are updated only after w's write has succeeded, so a failing step
 *   changes nothing.
 */
#include "flexpoint_nn.h"
#include "../core/compose.h"
#include "stochastic_round.h"
#include "nn_ops.h"

#include <math.h>
#include <string.h>

/* Loops shorter than this run on one thread: thread start-up would cost more than the work. */
#define FX_OPTIM_PAR_MIN ((int64_t)1 << 15)

static int fx_need_finite(const char *func, const char *name, double v, int nonneg)
{
    if (!isfinite(v)) return fx_error(FX_EINVAL, func, "%s=%g is not finite", name, v);
    if (nonneg && v < 0)
        return fx_error(FX_EINVAL, func, "%s=%g is negative (it must be >= 0)", name, v);
    return FX_OK;
}

/* Checks shared by both optimisers: tensors, shapes, lr, weight decay, gradient scale. */
static int fx_optim_check(const char *func, const tensor_t *w, const tensor_t *grad, double lr,
                          double weight_decay, double grad_scale, int stochastic)
{
    if (!w || !grad) return fx_error(FX_EINVAL, func, "%s is NULL", !w ? "w" : "grad");
    if (stochastic != 0 && stochastic != 1)
        return fx_error(FX_EINVAL, func, "stochastic=%d must be 0 or 1", stochastic);
    bool same = w->ndim == grad->ndim;
    for (int d = 0; same && d < w->ndim; d++) same = w->shape[d] == grad->shape[d];
    if (!same) {
        char b1[160], b2[160];
        return fx_error(FX_ESHAPE, func, "w.shape=%s != grad.shape=%s",
                        fx_shape_str(w, b1, sizeof b1), fx_shape_str(grad, b2, sizeof b2));
    }
    int rc = fx_need_finite(func, "lr", lr, 1);
    if (!rc) rc = fx_need_finite(func, "weight_decay", weight_decay, 1);
    if (!rc) rc = fx_need_finite(func, "grad_scale", grad_scale, 0);
    return rc;
}

/* The request of an optimiser step on (w, grad); on a device, the float buffers are device
 * memory (include/flexpoint_gpu.h), checked by the device implementation. */
static fx_op_args fx_optim_args(int op, const char *func, tensor_t *w, const tensor_t *grad,
                                float *master, double lr, double weight_decay, double grad_scale,
                                int stochastic, uint64_t seed, uint64_t step)
{
    fx_op_args a = {.op = op, .func = func, .nt = 2, .t = {w, grad}, .tn = {"w", "grad"}};
    a.u.optim.w = w;
    a.u.optim.grad = grad;
    a.u.optim.master = master;
    a.u.optim.lr = lr;
    a.u.optim.weight_decay = weight_decay;
    a.u.optim.grad_scale = grad_scale;
    a.u.optim.stochastic = stochastic;
    a.u.optim.seed = seed;
    a.u.optim.step = step;
    return a;
}

/* Two caller buffers given as the same pointer would be updated twice. */
static int fx_distinct(const char *func, const void *a, const char *na, const void *b,
                       const char *nb)
{
    if (a && a == b)
        return fx_error(FX_EINVAL, func, "%s and %s are the same buffer (%p)", na, nb, a);
    return FX_OK;
}

/* The one write of w from fp32 values (vals may be rounded in place for fp16/bf16). */
static int fx_optim_write_w(tensor_t *w, float *vals, int stochastic, uint64_t seed,
                            uint64_t step, const char *func)
{
    int64_t n = fx_numel_of(w->ndim, w->shape);
    if (!stochastic || w->fmt == FMT_FP32) return fx_write_f32(w, vals, func);
    if (w->fmt == FMT_FP16 || w->fmt == FMT_BF16) {
        fx_sr_round_array(w->fmt, vals, n, seed, step); /* onto the grid: the write is exact */
        return fx_write_f32(w, vals, func);
    }
    fx_storage *st = w->st;
    const int mode = st->rounding;
    const uint64_t old_seed = st->seed, old_counter = st->write_counter;
    st->rounding = FX_ROUND_STOCHASTIC;
    st->seed = seed;
    st->write_counter = step; /* the quantiser draws fx_rng_unit(seed, step, index) */
    int rc = fx_write_f32(w, vals, func);
    st->rounding = mode;
    st->seed = old_seed;
    st->write_counter = old_counter;
    return rc;
}

/* Reads the gradient and the current weights (master, or w's stored values) into fp32 and
 * allocates the outputs of the update. */
typedef struct fx_optim_io {
    fx_scratch s;
    int64_t n;
    const float *g;  /* gradient, fp32, row-major */
    const float *p;  /* current weights */
    float *new_p;    /* updated weights (becomes the master; w is written from it) */
    float *w_vals;   /* what w is written from: new_p, or a copy for stochastic rounding */
} fx_optim_io;

static int fx_optim_prepare(fx_optim_io *io, const tensor_t *w, const tensor_t *grad,
                            const float *master, int stochastic, int nbufs, float **bufs,
                            const char *func)
{
    memset(io, 0, sizeof *io);
    io->n = fx_numel_of(w->ndim, w->shape);
    float *g;
    int rc = fx_read_f32(grad, &g, &io->s, func);
    if (rc) return rc;
    io->g = g;
    if (master) {
        io->p = master;
    } else {
        float *p;
        rc = fx_read_f32(w, &p, &io->s, func);
        if (rc) return rc;
        io->p = p;
    }
    io->new_p = fx_scratch_alloc(&io->s, io->n, sizeof(float));
    if (!io->new_p) goto nomem;
    io->w_vals = io->new_p;
    if (master && stochastic && (w->fmt == FMT_FP16 || w->fmt == FMT_BF16)) {
        /* the master keeps the exact update; only w's copy is rounded */
        io->w_vals = fx_scratch_alloc(&io->s, io->n, sizeof(float));
        if (!io->w_vals) goto nomem;
    }
    for (int b = 0; b < nbufs; b++) {
        bufs[b] = fx_scratch_alloc(&io->s, io->n, sizeof(float));
        if (!bufs[b]) goto nomem;
    }
    return FX_OK;
nomem:
    return fx_error(FX_ENOMEM, func, "cannot allocate %lld floats for the update",
                    (long long)io->n);
}

/* Write w, then (only on success) commit the new master and optimiser state. */
static int fx_optim_commit(fx_optim_io *io, tensor_t *w, float *master, int stochastic,
                           uint64_t seed, uint64_t step, int nbufs, float *const *dst,
                           float *const *src, const char *func)
{
    size_t bytes = (size_t)io->n * sizeof(float);
    /* the copies by the threads: a linear layer's master and momentum are megabytes */
    if (io->w_vals != io->new_p) fx_parallel_copy(io->w_vals, io->new_p, bytes);
    int rc = fx_optim_write_w(w, io->w_vals, stochastic, seed, step, func);
    if (rc) return rc;
    if (master) fx_parallel_copy(master, io->new_p, bytes);
    for (int b = 0; b < nbufs; b++)
        if (dst[b]) fx_parallel_copy(dst[b], src[b], bytes);
    return FX_OK;
}

int fx_sgd_step(tensor_t *w, const tensor_t *grad, float *master, float *momentum_buf,
                double lr, double momentum, double weight_decay, double grad_scale,
                int stochastic, uint64_t seed, uint64_t step)
{
    const char *func = __func__;
    int rc = fx_optim_check(func, w, grad, lr, weight_decay, grad_scale, stochastic);
    if (!rc) rc = fx_need_finite(func, "momentum", momentum, 1);
    if (rc) return rc;
    if (!momentum_buf && momentum != 0)
        return FX_FAIL(FX_EINVAL, "momentum_buf is NULL but momentum=%g (NULL is allowed only "
                       "for momentum 0)", momentum);
    rc = fx_distinct(func, master, "master", momentum_buf, "momentum_buf");
    if (rc) return rc;
    fx_op_args a = fx_optim_args(FX_OP_SGD_STEP, func, w, grad, master, lr, weight_decay,
                                 grad_scale, stochastic, seed, step);
    a.u.optim.buf1 = momentum_buf;
    a.u.optim.momentum = momentum;
    return fx_op_run(&a);
}

/* Every backend's step returns at once for an empty w (after the placement check). */
int fx_nn_sgd_step_host(const fx_op_args *a)
{
    tensor_t *w = a->u.optim.w;
    const tensor_t *grad = a->u.optim.grad;
    float *master = a->u.optim.master, *momentum_buf = a->u.optim.buf1;
    const double lr = a->u.optim.lr, momentum = a->u.optim.momentum;
    const double weight_decay = a->u.optim.weight_decay, grad_scale = a->u.optim.grad_scale;
    const int stochastic = a->u.optim.stochastic;
    const uint64_t seed = a->u.optim.seed, step = a->u.optim.step;
    const char *func = a->func;
    int rc;
    if (fx_numel_of(w->ndim, w->shape) == 0) return FX_OK;

    fx_optim_io io;
    float *new_buf = NULL;
    rc = fx_optim_prepare(&io, w, grad, master, stochastic, 1, &new_buf, func);
    if (rc) {
        fx_scratch_free(&io.s);
        return rc;
    }
    const float *restrict g = io.g, *restrict p = io.p, *restrict buf = momentum_buf;
    float *restrict np = io.new_p, *restrict nb = new_buf;
    const int64_t n = io.n;
    const int nt = n >= FX_OPTIM_PAR_MIN ? flexpoint_num_threads() : 1;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t i = 0; i < n; i++) {
        double d = (double)g[i] * grad_scale + weight_decay * (double)p[i];
        double b = buf ? momentum * (double)buf[i] + d : d;
        float b32 = (float)b; /* the stored buffer, which the update uses (PyTorch's order) */
        nb[i] = b32;
        np[i] = (float)((double)p[i] - lr * (double)b32);
    }
    float *dst[1] = {momentum_buf};
    float *src[1] = {new_buf};
    rc = fx_optim_commit(&io, w, master, stochastic, seed, step, 1, dst, src, func);
    fx_scratch_free(&io.s);
    return rc;
}

/* Adam (decoupled 0: weight decay added to the gradient, torch.optim.Adam) and AdamW
 * (decoupled 1: the weight first multiplied by 1 - lr * weight_decay, torch.optim.AdamW). */
static int fx_adam_impl(tensor_t *w, const tensor_t *grad, float *master, float *m, float *v,
                        double lr, double beta1, double beta2, double eps, double weight_decay,
                        double grad_scale, int stochastic, uint64_t seed, uint64_t step,
                        int decoupled, const char *func)
{
    int rc = fx_optim_check(func, w, grad, lr, weight_decay, grad_scale, stochastic);
    if (!rc) rc = fx_need_finite(func, "eps", eps, 1);
    if (rc) return rc;
    if (!m || !v) return fx_error(FX_EINVAL, func, "%s is NULL", !m ? "m" : "v");
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
        return fx_error(FX_EINVAL, func, "beta1=%g and beta2=%g must lie in [0, 1)", beta1,
                        beta2);
    if (step < 1)
        return fx_error(FX_EINVAL, func, "step=%llu must count from 1 (bias correction)",
                        (unsigned long long)step);
    rc = fx_distinct(func, m, "m", v, "v");
    if (!rc) rc = fx_distinct(func, master, "master", m, "m");
    if (!rc) rc = fx_distinct(func, master, "master", v, "v");
    if (rc) return rc;
    fx_op_args a = fx_optim_args(decoupled ? FX_OP_ADAMW_STEP : FX_OP_ADAM_STEP, func, w, grad,
                                 master, lr, weight_decay, grad_scale, stochastic, seed, step);
    a.u.optim.buf1 = m;
    a.u.optim.buf2 = v;
    a.u.optim.beta1 = beta1;
    a.u.optim.beta2 = beta2;
    a.u.optim.eps = eps;
    /* bias corrections of torch.optim.Adam: step size lr / (1 - beta1^t), denominator
     * sqrt(v) / sqrt(1 - beta2^t) + eps */
    a.u.optim.bc1 = 1.0 - pow(beta1, (double)step);
    a.u.optim.sqrt_bc2 = sqrt(1.0 - pow(beta2, (double)step));
    return fx_op_run(&a);
}

/* Adam (FX_OP_ADAM_STEP) and AdamW (FX_OP_ADAMW_STEP) on the host. */
int fx_nn_adam_step_host(const fx_op_args *a)
{
    tensor_t *w = a->u.optim.w;
    const tensor_t *grad = a->u.optim.grad;
    float *master = a->u.optim.master, *m = a->u.optim.buf1, *v = a->u.optim.buf2;
    const double lr = a->u.optim.lr, beta1 = a->u.optim.beta1, beta2 = a->u.optim.beta2;
    const double eps = a->u.optim.eps, weight_decay = a->u.optim.weight_decay;
    const double grad_scale = a->u.optim.grad_scale, bc1 = a->u.optim.bc1;
    const double sqrt_bc2 = a->u.optim.sqrt_bc2;
    const int stochastic = a->u.optim.stochastic, decoupled = a->op == FX_OP_ADAMW_STEP;
    const uint64_t seed = a->u.optim.seed, step = a->u.optim.step;
    const char *func = a->func;
    int rc;
    if (fx_numel_of(w->ndim, w->shape) == 0) return FX_OK;

    fx_optim_io io;
    float *nbufs[2] = {NULL, NULL};
    rc = fx_optim_prepare(&io, w, grad, master, stochastic, 2, nbufs, func);
    if (rc) {
        fx_scratch_free(&io.s);
        return rc;
    }
    const double step_size = lr / bc1;
    const double decay = decoupled ? 1.0 - lr * weight_decay : 1.0;
    const float *restrict g = io.g, *restrict p = io.p, *restrict mo = m, *restrict vo = v;
    float *restrict np = io.new_p, *restrict nm = nbufs[0], *restrict nv = nbufs[1];
    const int64_t n = io.n;
    const int nt = n >= FX_OPTIM_PAR_MIN ? flexpoint_num_threads() : 1;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t i = 0; i < n; i++) {
        const double pi = (double)p[i];
        double d = (double)g[i] * grad_scale + (decoupled ? 0.0 : weight_decay * pi);
        float m32 = (float)(beta1 * (double)mo[i] + (1.0 - beta1) * d);
        float v32 = (float)(beta2 * (double)vo[i] + (1.0 - beta2) * d * d);
        nm[i] = m32;
        nv[i] = v32;
        double denom = sqrt((double)v32) / sqrt_bc2 + eps;
        np[i] = (float)(pi * decay - step_size * (double)m32 / denom);
    }
    float *dst[2] = {m, v};
    float *src[2] = {nbufs[0], nbufs[1]};
    rc = fx_optim_commit(&io, w, master, stochastic, seed, step, 2, dst, src, func);
    fx_scratch_free(&io.s);
    return rc;
}

int fx_adam_step(tensor_t *w, const tensor_t *grad, float *master, float *m, float *v,
                 double lr, double beta1, double beta2, double eps, double weight_decay,
                 double grad_scale, int stochastic, uint64_t seed, uint64_t step)
{
    return fx_adam_impl(w, grad, master, m, v, lr, beta1, beta2, eps, weight_decay, grad_scale,
                        stochastic, seed, step, 0, __func__);
}

int fx_adamw_step(tensor_t *w, const tensor_t *grad, float *master, float *m, float *v,
                  double lr, double beta1, double beta2, double eps, double weight_decay,
                  double grad_scale, int stochastic, uint64_t seed, uint64_t step)
{
    return fx_adam_impl(w, grad, master, m, v, lr, beta1, beta2, eps, weight_decay, grad_scale,
                        stochastic, seed, step, 1, __func__);
}
