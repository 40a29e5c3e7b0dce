/* Batch normalisation, forward (training and inference) and backward, PyTorch semantics.
 *
 * Layout: x is [N, C, H, W] (statistics per channel over N, H, W) or [N, F] (per feature over
 * N). gamma, beta (and dgamma, dbeta) are tensors of any format and shape with C elements.
 *
 * Precision (docs/formats.md: normalisation statistics are not fixed-point in nature): every input
 * is dequantised/widened exactly to fp32; the statistics are two-pass (mean, then the mean
 * squared deviation) accumulated in double, the per-element arithmetic is done in double, and
 * each output is rounded once by the one write path (through fp32 with round-to-odd when the
 * output is not fp32). This holds for the shared-exponent formats too: the op dequantises.
 * FLEX16_5/DFP16 mantissas and bf16 inputs are read in place, widened by the kernels to the
 * same fp32 values a copy would hold (bn_kernels.h, fx_bn_src), and for a shared-exponent
 * output the kernels keep the statistics the write would scan its stage for; both change no
 * bit (tests/test_bn_kernels.c) and save passes over the tensors.
 *   training:  y = (x - mean) * invstd * gamma + beta,  invstd = 1 / sqrt(var + eps) with the
 *              biased batch variance; running_mean/var <- (1 - momentum) * running +
 *              momentum * batch, using the unbiased variance (M / (M - 1)), M = N*H*W;
 *              save_mean/save_invstd receive the batch mean and invstd (rounded to fp32).
 *   inference: the same with running_mean/running_var in place of the batch statistics.
 *   backward:  with xhat = (x - mean) * invstd and sums over the channel's M elements,
 *              dbeta = sum dy, dgamma = sum dy * xhat,
 *              dx = gamma * invstd * (dy - dbeta / M - xhat * dgamma / M).
 * Training needs M >= 2 (as PyTorch: the variance of one value is undefined). In training,
 * running_mean/running_var may both be NULL (no running statistics are kept) and
 * save_mean/save_invstd may be NULL (not stored); inference needs the running statistics and
 * leaves save_* untouched. Channels are independent and each is reduced by one thread in a
 * fixed order, so the results do not depend on the thread count or the backend.
 */
#include "nn_stage.h"
#include "nn_ops.h"
#include "bn_kernels.h"
#include "bn_direct.h"
#include "../core/backend.h"
#include "../gpu/gpu_nn_math.h" /* fx_bn_dims, shared with the device */

#include <math.h>
#include <string.h>

/* Geometry: element (n, c, s) is at (n * C + c) * S + s; M = N * S values per channel
 * (shared with the device implementation, src/gpu/gpu_nn_math.h). */
typedef fx_bn_dims nn_bn_dims;

static int nn_bn_dims_of(const tensor_t *x, nn_bn_dims *d, const char *func)
{
    char b1[160];
    if (x->ndim != 2 && x->ndim != 4)
        return fx_error(FX_ESHAPE, func, "x must be [N, C, H, W] or [N, F], got x.shape=%s",
                        fx_shape_str(x, b1, sizeof b1));
    d->N = x->shape[0];
    d->C = x->shape[1];
    d->S = x->ndim == 4 ? x->shape[2] * x->shape[3] : 1;
    d->M = d->N * d->S;
    return FX_OK;
}

static int nn_bn_per_channel(const char *func, const char *name, const tensor_t *t, int64_t C)
{
    if (fx_numel_of(t->ndim, t->shape) == C) return FX_OK;
    char b1[160];
    return fx_error(FX_ESHAPE, func, "%s.shape=%s must have C=%lld elements", name,
                    fx_shape_str(t, b1, sizeof b1), (long long)C);
}

static int nn_bn_need_batch(const char *func, const nn_bn_dims *d, const tensor_t *x)
{
    if (d->M >= 2) return FX_OK;
    char b1[160];
    return fx_error(FX_ESHAPE, func, "training needs more than one value per channel, "
                    "x.shape=%s gives %lld", fx_shape_str(x, b1, sizeof b1), (long long)d->M);
}

/* Threads for a loop over the channels. */
static int nn_bn_threads(const nn_bn_dims *d)
{
    return d->C > 1 ? nn_threads_for(d->C * d->M) : 1;
}

/* Channel sums. Each keeps four partial sums over interleaved elements (a scalar loop
 * otherwise serialises on the latency of one addition chain), combined as (0+1)+(2+3) at the
 * end. The order is fixed, so the results do not depend on the thread count. */

/* sum of f(p[s]) for one row of S values into the four partial sums a0..a3 */
#define NN_BN_ROW_SUM(S, EXPR, a0, a1, a2, a3)                                                 \
    do {                                                                                       \
        int64_t s_ = 0;                                                                        \
        for (; s_ + 4 <= (S); s_ += 4) {                                                       \
            { const int64_t s = s_; a0 += (EXPR); }                                            \
            { const int64_t s = s_ + 1; a1 += (EXPR); }                                        \
            { const int64_t s = s_ + 2; a2 += (EXPR); }                                        \
            { const int64_t s = s_ + 3; a3 += (EXPR); }                                        \
        }                                                                                      \
        for (; s_ < (S); s_++) {                                                               \
            const int64_t s = s_;                                                              \
            a0 += (EXPR);                                                                      \
        }                                                                                      \
    } while (0)

/* The biased variance of channel c about its mean mu: the second pass of the two. */
static double nn_bn_channel_var(const fx_bn_src *x, const nn_bn_dims *d, int64_t c, double mu)
{
    double q0 = 0, q1 = 0, q2 = 0, q3 = 0;
    for (int64_t n = 0; n < d->N; n++) {
        const int64_t o = (n * d->C + c) * d->S;
        NN_BN_ROW_SUM(d->S, (fx_bn_at(x, o + s) - mu) * (fx_bn_at(x, o + s) - mu), q0, q1, q2,
                      q3);
    }
    return ((q0 + q1) + (q2 + q3)) / (double)d->M;
}

/* Two-pass mean and biased variance of channel c. */
static void nn_bn_channel_stats(const fx_bn_src *x, const nn_bn_dims *d, int64_t c, double *mean,
                                double *var)
{
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int64_t n = 0; n < d->N; n++) {
        const int64_t o = (n * d->C + c) * d->S;
        NN_BN_ROW_SUM(d->S, fx_bn_at(x, o + s), a0, a1, a2, a3);
    }
    *mean = ((a0 + a1) + (a2 + a3)) / (double)d->M;
    *var = nn_bn_channel_var(x, d, c, *mean);
}

/* sum dy and sum dy * xhat over channel c, xhat = (x - mu) * is. */
static void nn_bn_grad_sums(const fx_bn_src *x, const fx_bn_src *dy, const nn_bn_dims *d,
                            int64_t c, double mu, double is, double *sdy, double *sdyx)
{
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;
    for (int64_t n = 0; n < d->N; n++) {
        const int64_t o = (n * d->C + c) * d->S;
        NN_BN_ROW_SUM(d->S, fx_bn_at(dy, o + s), a0, a1, a2, a3);
        NN_BN_ROW_SUM(d->S, fx_bn_at(dy, o + s) * ((fx_bn_at(x, o + s) - mu) * is), b0, b1, b2,
                      b3);
    }
    *sdy = (a0 + a1) + (a2 + a3);
    *sdyx = (b0 + b1) + (b2 + b3);
}

/* The portable kernels (bn_kernels.h): the definition the SIMD levels reproduce. */
static void nn_bn_stats_portable(const fx_bn_src *x, const nn_bn_dims *d, int64_t c0, int nc,
                                 double *mean, double *var)
{
    for (int j = 0; j < nc; j++) nn_bn_channel_stats(x, d, c0 + j, mean + j, var + j);
}

static void nn_bn_grad_sums_portable(const fx_bn_src *x, const fx_bn_src *dy,
                                     const nn_bn_dims *d, int64_t c0, int nc, const double *mu,
                                     const double *is, double *sdy, double *sdyx)
{
    for (int j = 0; j < nc; j++)
        nn_bn_grad_sums(x, dy, d, c0 + j, mu[j], is[j], sdy + j, sdyx + j);
}

static void nn_bn_normalize_portable(const fx_bn_src *x, int64_t off, float *q, int64_t S,
                                     double mu, double a, double b, int odd, fx_bn_max *mx)
{
    for (int64_t s = 0; s < S; s++) {
        q[s] = nn_round_f32((fx_bn_at(x, off + s) - mu) * a + b, odd);
        if (mx) fx_bn_max_add(mx, q[s]);
    }
}

static void nn_bn_backward_portable(const fx_bn_src *x, const fx_bn_src *g, int64_t off, float *q,
                                    int64_t S, double mu, double is, double k, double mdy,
                                    double mdyx, int odd, fx_bn_max *mx)
{
    for (int64_t s = 0; s < S; s++) {
        const double xhat = (fx_bn_at(x, off + s) - mu) * is;
        q[s] = nn_round_f32(k * (fx_bn_at(g, off + s) - mdy - xhat * mdyx), odd);
        if (mx) fx_bn_max_add(mx, q[s]);
    }
}

static void nn_bn_var_portable(const fx_bn_src *x, const nn_bn_dims *d, int64_t c0, int nc,
                               const double *mean, double *var)
{
    for (int j = 0; j < nc; j++) var[j] = nn_bn_channel_var(x, d, c0 + j, mean[j]);
}

static void nn_bn_sum_range_i16_portable(const int16_t *m, const nn_bn_dims *d, int64_t c0,
                                         int nc, int64_t *sum, int16_t *lo, int16_t *hi)
{
    for (int j = 0; j < nc; j++) {
        int64_t t = 0;
        int16_t l = INT16_MAX, h = INT16_MIN;
        for (int64_t n = 0; n < d->N; n++) {
            const int16_t *p = m + (n * d->C + c0 + j) * d->S;
            for (int64_t s = 0; s < d->S; s++) {
                t += p[s];
                l = p[s] < l ? p[s] : l;
                h = p[s] > h ? p[s] : h;
            }
        }
        sum[j] = t;
        lo[j] = l;
        hi[j] = h;
    }
}

const fx_bn_kernels fx_bn_kernels_portable = {
    nn_bn_stats_portable,    nn_bn_grad_sums_portable, nn_bn_normalize_portable,
    nn_bn_backward_portable, nn_bn_var_portable,       nn_bn_sum_range_i16_portable,
    NULL, /* fp16/bf16 outputs go through an fp32 row: the definition's route */
    NULL,
    NULL, /* FLEX16_5/DFP16 outputs likewise: the row, then quant_f32 */
    NULL,
    0}; /* fp16 through the copy: fx_bn_at widens it element by element */

/* Test switches (fx_bn_relu_set_enabled, fx_bn_set_in_place) and the fused calls' count: read
 * by every call, so relaxed atomics. */
static int nn_bn_relu_flag = 1;
static int64_t nn_bn_relu_made;
int64_t fx_bn_relu_made(void) { return __atomic_load_n(&nn_bn_relu_made, __ATOMIC_RELAXED); }
void fx_bn_relu_set_enabled(int on) { __atomic_store_n(&nn_bn_relu_flag, on != 0, __ATOMIC_RELAXED); }
static int nn_bn_relu_enabled(void) { return __atomic_load_n(&nn_bn_relu_flag, __ATOMIC_RELAXED); }

static int nn_bn_in_place_flag = 1;
void fx_bn_set_in_place(int on)
{
    __atomic_store_n(&nn_bn_in_place_flag, on != 0, __ATOMIC_RELAXED);
}
static int nn_bn_in_place(void) { return __atomic_load_n(&nn_bn_in_place_flag, __ATOMIC_RELAXED); }

/* An input as a kernel source: FLEX16_5/DFP16 mantissas and bf16 and fp16 patterns are read as
 * they are stored (a strided view is first gathered in its own 16-bit format) and widened by
 * the kernels themselves to the fp32 values of a copy; fp32 is read in place when contiguous;
 * anything else (strided fp32, mantissas whose 2^exp is no fp32 number, which no tensor
 * holds today: exponents stay in [-128, 127]; fp16 on levels that take it faster from a copy,
 * fx_bn_kernels.fp16_in_place) goes through an exact fp32 copy in sc
 * (nn_in_f32). *copy is that copy (NULL otherwise), which an output may overwrite. */
static int nn_bn_source(const fx_bn_kernels *k, const tensor_t *t, fx_bn_src *src,
                        float **copy, fx_scratch *sc, const char *func)
{
    int rc;
    *copy = NULL;
    src->scale = 1.0;
    const int in_place = nn_bn_in_place();
    if (in_place && fmt_is_shared_exponent(t->fmt)) {
        const int16_t *m;
        int e;
        if ((rc = nn_in_i16(t, &m, &e, sc, func))) return rc;
        if (e >= FX_BN_I16_EXP_MIN && e <= FX_BN_I16_EXP_MAX) {
            src->p = m;
            src->kind = FX_BN_I16;
            src->scale = ldexp(1.0, e);
            return FX_OK;
        }
    }
    if (in_place && (t->fmt == FMT_BF16 || (t->fmt == FMT_FP16 && k->fp16_in_place))) {
        fx_operand o; /* contiguous bf16 or fp16 patterns, not converted */
        if ((rc = fx_operand_make(t, 0, t->fmt, 0, 0, NULL, &o, sc, func))) return rc;
        src->p = o.data;
        src->kind = t->fmt == FMT_BF16 ? FX_BN_BF16 : FX_BN_FP16;
        return FX_OK;
    }
    const float *v;
    if ((rc = nn_in_f32(t, &v, sc, func))) return rc;
    src->p = v;
    src->kind = FX_BN_F32;
    *copy = nn_private_f32(t, v);
    return FX_OK;
}

/* The kernels' statistics records of a write into out, one per channel group, zeroed (the
 * kernels add to them): *rec stays NULL when out is not shared-exponent (its write scans
 * nothing) or the test switch is off. */
static int nn_bn_max_records(const tensor_t *out, int64_t ngroups, fx_bn_max **rec,
                             fx_scratch *sc, const char *func)
{
    *rec = NULL;
    if (!fmt_is_shared_exponent(out->fmt) || !nn_bn_in_place()) return FX_OK;
    *rec = fx_scratch_alloc(sc, ngroups, sizeof **rec);
    if (!*rec)
        return fx_error(FX_ENOMEM, func, "cannot allocate %lld statistics records",
                        (long long)ngroups);
    memset(*rec, 0, (size_t)ngroups * sizeof **rec);
    return FX_OK;
}

/* A write of the fp32 stage v into out, with the statistics the kernels kept in the ngroups
 * records rec (NULL: none kept) in place of the write's own scan of the stage. */
static int nn_bn_write(tensor_t *out, const float *v, const fx_bn_max *rec, int64_t ngroups,
                       const char *func)
{
    if (!rec) return fx_write_f32(out, v, func);
    fx_bn_max all = {0.0f, 0};
    for (int64_t g = 0; g < ngroups; g++) {
        all.max = rec[g].max > all.max ? rec[g].max : all.max;
        all.nonfinite += rec[g].nonfinite;
    }
    return fx_write_f32_max(out, v, all.max, all.nonfinite, func);
}

/* The conversion an fp16/bf16 output is written with plane by plane (NULL: the fp32 stage
 * route). Where out is a whole fp16/bf16 tensor that no rank sums into, each plane's fp32 values
 * (rounded to odd, as into the stage) go to a buffer per channel group that stays in L1 and
 * are converted into out at once by the write's own conversion, so the bits are the stage
 * route's, without the whole fp32 stage that the write reads back (for ResNet-20's 16-channel
 * layers, 8 MB written and read and then 4 MB written, per pass). Each plane is read before it
 * is written, and only by its own channel group, so out may also be an input itself. */
typedef void (*nn_bn_half_fn)(const float *, uint16_t *, int64_t);
static nn_bn_half_fn nn_bn_half_out(const tensor_t *out)
{
    if ((out->fmt != FMT_FP16 && out->fmt != FMT_BF16) || !fx_tensor_covers_storage(out) ||
        !nn_bn_in_place()) /* the test switch's reference route takes the stage */
        return NULL;
    if (out->st->dist && out->st->dist_mode == FX_DIST_SUM) return NULL;
    const fx_backend *be = fx_backend_active();
    return out->fmt == FMT_FP16 ? be->cvt.f32_to_fp16 : be->cvt.f32_to_bf16;
}

/* the kernels' name for an fp16/bf16 output's format (normalize_half, backward_half) */
static int nn_bn_half_kind(const tensor_t *out)
{
    return out->fmt == FMT_BF16 ? FX_BN_OUT_BF16 : FX_BN_OUT_FP16;
}

/* Where the route that is not `direct` writes out: *half (nn_bn_half_out) with *hbuf, S floats
 * per channel group, or else the fp32 stage *v (nn_out_f32: out itself, own, or scratch).
 * FX_ENOMEM when a buffer cannot be had. */
static int nn_bn_out_stage(tensor_t *out, int direct, const tensor_t *const *ins, float *own,
                           int64_t ngroups, int64_t S, nn_bn_half_fn *half, float **hbuf,
                           float **v, fx_scratch *sc, const char *func)
{
    *half = direct ? NULL : nn_bn_half_out(out);
    *hbuf = *half ? fx_scratch_alloc(sc, ngroups * S, sizeof(float)) : NULL;
    *v = direct || *half ? NULL : nn_out_f32(out, ins, 3, own, sc);
    if ((*half && !*hbuf) || (!direct && !*half && !*v))
        return fx_error(FX_ENOMEM, func, "cannot allocate the output stage");
    return FX_OK;
}


/* The active level's kernels (the same bits on every level). */
static const fx_bn_kernels *nn_bn_kernels(void)
{
    const fx_backend *b = fx_backend_active();
    return b && b->bn ? b->bn : &fx_bn_kernels_portable;
}

static int nn_bn_validate(const tensor_t *y, const tensor_t *x, const tensor_t *gamma,
                          const tensor_t *beta, const float *running_mean,
                          const float *running_var, double momentum, double eps, int training,
                          nn_bn_dims *d, const char *func)
{
    if (!y || !x || !gamma || !beta)
        return fx_error(FX_EINVAL, func, "%s is NULL",
                        !y ? "y" : (!x ? "x" : (!gamma ? "gamma" : "beta")));
    if (training != 0 && training != 1)
        return fx_error(FX_EINVAL, func, "training=%d must be 0 or 1", training);
    int rc = nn_bn_dims_of(x, d, func);
    if (!rc) rc = nn_same_shape(func, "y", y, "x", x);
    if (!rc) rc = nn_bn_per_channel(func, "gamma", gamma, d->C);
    if (!rc) rc = nn_bn_per_channel(func, "beta", beta, d->C);
    if (rc) return rc;
    if (!(eps >= 0.0) || !isfinite(eps))
        return fx_error(FX_EINVAL, func, "eps=%g must be finite and >= 0", eps);
    if (training) {
        if (!(momentum >= 0.0 && momentum <= 1.0))
            return fx_error(FX_EINVAL, func, "momentum=%g is outside [0, 1]", momentum);
        if (!running_mean != !running_var)
            return fx_error(FX_EINVAL, func, "%s is NULL but %s is not (give both running "
                            "statistics or neither)",
                            !running_mean ? "running_mean" : "running_var",
                            !running_mean ? "running_var" : "running_mean");
        return nn_bn_need_batch(func, d, x);
    }
    if (!running_mean || !running_var)
        return fx_error(FX_EINVAL, func, "inference needs the running statistics, but %s is "
                        "NULL", !running_mean ? "running_mean" : "running_var");
    return FX_OK;
}

/* The op's arguments, validated (tensor_batchnorm's checks and messages), into *a with *d */
static int nn_bn_args(tensor_t *y, const tensor_t *x, const tensor_t *gamma, const tensor_t *beta,
                      float *running_mean, float *running_var, float *save_mean,
                      float *save_invstd, double momentum, double eps, int training,
                      nn_bn_dims *d, fx_op_args *a)
{
    static const char func[] = "tensor_batchnorm";
    int rc = nn_bn_validate(y, x, gamma, beta, running_mean, running_var, momentum, eps,
                            training, d, func);
    if (rc) return rc;
    /* the per-channel float arrays are host memory wherever the tensors live */
    *a = (fx_op_args){.op = FX_OP_BATCHNORM, .func = func, .nt = 4, .t = {y, x, gamma, beta},
                      .tn = {"y", "x", "gamma", "beta"}};
    a->u.bn.y = y;
    a->u.bn.x = x;
    a->u.bn.gamma = gamma;
    a->u.bn.beta = beta;
    a->u.bn.running_mean = running_mean;
    a->u.bn.running_var = running_var;
    a->u.bn.save_mean = save_mean;
    a->u.bn.save_invstd = save_invstd;
    a->u.bn.momentum = momentum;
    a->u.bn.eps = eps;
    a->u.bn.training = training;
    a->u.bn.d = d;
    return FX_OK;
}

int tensor_batchnorm(tensor_t *y, const tensor_t *x, const tensor_t *gamma,
                     const tensor_t *beta, float *running_mean, float *running_var,
                     float *save_mean, float *save_invstd, double momentum, double eps,
                     int training)
{
    nn_bn_dims d;
    fx_op_args a;
    const int rc = nn_bn_args(y, x, gamma, beta, running_mean, running_var, save_mean,
                              save_invstd, momentum, eps, training, &d, &a);
    return rc ? rc : fx_op_run(&a);
}

/* relu of fp32 values in place, tensor_relu's rule (x > 0 or NaN kept, else +0). On the
 * values before their rounding to fp16/bf16 it gives the bits of tensor_relu after it: the
 * rounding keeps the sign, NaN and zero (a positive value that rounds to +0 is +0 either way). */
static void nn_relu_f32_inplace(float *restrict q, int64_t n)
{
    for (int64_t i = 0; i < n; i++) q[i] = q[i] > 0.0f || q[i] != q[i] ? q[i] : 0.0f;
}

int fx_batchnorm_relu(tensor_t *y, const tensor_t *x, const tensor_t *gamma, const tensor_t *beta,
                      float *running_mean, float *running_var, float *save_mean,
                      float *save_invstd, double momentum, double eps, int training)
{
    if (!y || !x || !gamma || !beta || fmt_is_shared_exponent(y->fmt) || y->st->on_device ||
        x->st->on_device || gamma->st->on_device || beta->st->on_device || y->st->dist ||
        !nn_bn_relu_enabled())
        return FX_BN_RELU_NOT_TAKEN;
    nn_bn_dims d;
    fx_op_args a;
    int rc = nn_bn_args(y, x, gamma, beta, running_mean, running_var, save_mean, save_invstd,
                        momentum, eps, training, &d, &a);
    if (rc) return rc;
    a.u.bn.relu = 1;
    flexpoint_clear_error();
    rc = fx_nn_batchnorm_host(&a);
    if (rc == FX_OK) __atomic_fetch_add(&nn_bn_relu_made, 1, __ATOMIC_RELAXED);
    return rc;
}

int fx_batchnorm_shared_relu(tensor_t *y, tensor_t *relu_y, const tensor_t *x,
                             const tensor_t *gamma, const tensor_t *beta, float *running_mean,
                             float *running_var, float *save_mean, float *save_invstd,
                             double momentum, double eps, int training, int *y_written)
{
    if (y_written) *y_written = 1;
    if (!y || !relu_y || !x || !gamma || !beta || !fmt_is_shared_exponent(y->fmt) ||
        !fmt_is_shared_exponent(relu_y->fmt) || y->st->on_device || relu_y->st->on_device ||
        x->st->on_device || gamma->st->on_device || beta->st->on_device || y->st->dist ||
        relu_y->st->dist || relu_y->st == y->st || relu_y->st == x->st ||
        relu_y->st == gamma->st || relu_y->st == beta->st || !nn_bn_relu_enabled())
        return FX_BN_RELU_NOT_TAKEN;
    nn_bn_dims d;
    fx_op_args a;
    int rc = nn_bn_args(y, x, gamma, beta, running_mean, running_var, save_mean, save_invstd,
                        momentum, eps, training, &d, &a);
    if (!rc) rc = nn_same_shape("tensor_relu", "out", relu_y, "a", y);
    if (rc) return rc;
    a.u.bn.relu_y = relu_y;
    /* a traced y is one its user watches: kept whole */
    a.u.bn.y_written = y->st->trace.enabled ? NULL : y_written;
    flexpoint_clear_error();
    rc = fx_nn_batchnorm_host(&a);
    if (rc == FX_OK) __atomic_fetch_add(&nn_bn_relu_made, 1, __ATOMIC_RELAXED);
    return rc;
}

int fx_nn_batchnorm_host(const fx_op_args *r)
{
    tensor_t *y = r->u.bn.y;
    const tensor_t *x = r->u.bn.x, *gamma = r->u.bn.gamma, *beta = r->u.bn.beta;
    float *running_mean = r->u.bn.running_mean, *running_var = r->u.bn.running_var;
    float *save_mean = r->u.bn.save_mean, *save_invstd = r->u.bn.save_invstd;
    const double momentum = r->u.bn.momentum, eps = r->u.bn.eps;
    const int training = r->u.bn.training;
    const int relu = r->u.bn.relu; /* a float y only (fx_batchnorm_relu) */
    tensor_t *relu_y = r->u.bn.relu_y; /* a shared-exponent y only (fx_batchnorm_shared_relu) */
    int relu_done = 0;
    const nn_bn_dims d = *r->u.bn.d;
    const char *func = r->func;
    int rc = FX_OK;

    const int64_t C = d.C, S = d.S;
    const fx_bn_kernels *k = nn_bn_kernels();
    fx_scratch sc = {.n = 0};
    const float *gv, *bv;
    fx_bn_src xs;
    float *xcopy;
    /* per channel: mean, invstd and unbiased variance, for the caller's float arrays */
    double *mean = fx_scratch_alloc(&sc, C, sizeof *mean);
    double *invstd = fx_scratch_alloc(&sc, C, sizeof *invstd);
    double *uvar = fx_scratch_alloc(&sc, C, sizeof *uvar);
    if (!mean || !invstd || !uvar) {
        rc = fx_error(FX_ENOMEM, func, "cannot allocate statistics for %lld channels",
                      (long long)C);
        goto done;
    }
    const tensor_t *ins[3] = {x, gamma, beta};
    if ((rc = nn_bn_source(k, x, &xs, &xcopy, &sc, func))) goto done;
    if ((rc = nn_in_f32(gamma, &gv, &sc, func))) goto done;
    if ((rc = nn_in_f32(beta, &bv, &sc, func))) goto done;
    /* a shared-exponent y from mantissas: the statistics first, then y rounded straight from
     * the normalised rows (bn_direct.h), without the fp32 stage; the coefficients per channel */
    const int direct = fx_bn_direct_ok(y, x, &xs);
    double *ca = direct ? fx_scratch_alloc(&sc, C, sizeof *ca) : NULL;
    double *cb = direct ? fx_scratch_alloc(&sc, C, sizeof *cb) : NULL;
    /* Mantissas whose mean is their exact integer sum scaled (fx_bn_int_mean_ok): one integer
     * pass gives the mean's bits and each channel's extreme mantissas, which fix the direct
     * route's largest output, in place of the first pass of doubles and a scan of its own. */
    const int int_mean = training && fx_bn_int_mean_ok(&xs, &d);
    int16_t *lo = direct || int_mean ? fx_scratch_alloc(&sc, C, sizeof *lo) : NULL;
    int16_t *hi = direct || int_mean ? fx_scratch_alloc(&sc, C, sizeof *hi) : NULL;
    if ((direct && (!ca || !cb)) || ((direct || int_mean) && (!lo || !hi))) {
        rc = fx_error(FX_ENOMEM, func, "cannot allocate coefficients for %lld channels",
                      (long long)C);
        goto done;
    }
    const int nt = nn_bn_threads(&d);
    (void)nt;
    const int odd = y->fmt != FMT_FP32;
    const int64_t gsz = fx_bn_group_size(C, nt), ngroups = (C + gsz - 1) / gsz;
    /* y may overwrite a private copy of x: channel c's statistics are taken before its
     * elements are normalised, and each element only reads its own x */
    nn_bn_half_fn half;
    float *hbuf, *yv;
    if ((rc = nn_bn_out_stage(y, direct, ins, xcopy, ngroups, S, &half, &hbuf, &yv, &sc, func)))
        goto done;
    fx_bn_max *gmax; /* a shared-exponent y: the write's statistics, kept by the kernels */
    if ((rc = nn_bn_max_records(y, ngroups, &gmax, &sc, func))) goto done;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t g = 0; g < ngroups; g++) {
        const int64_t c0 = g * gsz;
        const int nc = (int)(C - c0 < gsz ? C - c0 : gsz);
        double var[FX_BN_GROUP];
        /* the kernels update the record after every row: a local one, copied out once, keeps
         * the two threads off each other's cache lines (neighbouring records share one) */
        fx_bn_max local = {0.0f, 0};
        fx_bn_max *mx = gmax ? &local : NULL;
        int64_t sum[FX_BN_GROUP];
        if (int_mean || direct) k->sum_range_i16(xs.p, &d, c0, nc, sum, lo + c0, hi + c0);
        if (training) {
            if (int_mean) {
                for (int j = 0; j < nc; j++)
                    mean[c0 + j] = fx_bn_int_mean(sum[j], xs.scale, &d);
                k->var(&xs, &d, c0, nc, mean + c0, var);
            } else
                k->stats(&xs, &d, c0, nc, mean + c0, var);
            for (int j = 0; j < nc; j++) uvar[c0 + j] = var[j] * (double)d.M / (double)(d.M - 1);
        } else
            for (int j = 0; j < nc; j++) {
                mean[c0 + j] = running_mean[c0 + j];
                var[j] = running_var[c0 + j];
            }
        for (int j = 0; j < nc; j++) {
            const int64_t c = c0 + j;
            const double mu = mean[c], is = 1.0 / sqrt(var[j] + eps);
            invstd[c] = is;
            /* y = (x - mu) * a + b: the subtraction first, so that a large mean cancels
             * exactly in double before scaling */
            const double a = is * (double)gv[c], b = bv[c];
            if (direct) {
                ca[c] = a;
                cb[c] = b;
                continue;
            }
            if (half && k->normalize_half && /* the same bits, rounded in registers */
                k->normalize_half(&xs, c * S, (uint16_t *)fx_tensor_base(y) + c * S, S, d.N,
                                  C * S, mu, a, b, nn_bn_half_kind(y), relu))
                continue;
            for (int64_t n = 0; n < d.N; n++) {
                const int64_t o = (n * C + c) * S;
                float *q = half ? hbuf + g * S : yv + o;
                k->normalize(&xs, o, q, S, mu, a, b, odd, mx);
                if (relu) nn_relu_f32_inplace(q, S);
                if (half) half(q, (uint16_t *)fx_tensor_base(y) + o, S);
            }
        }
        if (gmax) gmax[g] = local;
    }
    if (direct) {
        rc = fx_bn_forward_direct(y, &xs, &d, k, mean, ca, cb, lo, hi, relu_y, &relu_done,
                                  relu_y ? r->u.bn.y_written : NULL, func);
        if (rc == FX_BN_DIRECT_DECLINED) { /* a non-finite output: the stage route counts it */
            yv = nn_out_f32(y, ins, 3, xcopy, &sc);
            if (!yv) {
                rc = fx_error(FX_ENOMEM, func, "cannot allocate the output stage");
                goto done;
            }
            for (int64_t g = 0; g < ngroups; g++) {
                const int64_t c0 = g * gsz, c1 = c0 + gsz < C ? c0 + gsz : C;
                for (int64_t c = c0; c < c1; c++)
                    for (int64_t n = 0; n < d.N; n++) {
                        const int64_t o = (n * C + c) * S;
                        k->normalize(&xs, o, yv + o, S, mean[c], ca[c], cb[c], odd,
                                     gmax ? gmax + g : NULL);
                    }
            }
            rc = nn_bn_write(y, yv, gmax, ngroups, func);
        }
        if (rc) goto done;
    } else if (!half && (rc = nn_bn_write(y, yv, gmax, ngroups, func)))
        goto done;
    if (relu_y && !relu_done && (rc = tensor_relu(relu_y, y))) goto done;
    if (training) {
        for (int64_t c = 0; c < C; c++) {
            if (running_mean) {
                running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean[c]);
                running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * uvar[c]);
            }
            if (save_mean) save_mean[c] = (float)mean[c];
            if (save_invstd) save_invstd[c] = (float)invstd[c];
        }
    }
done:
    fx_scratch_free(&sc);
    return rc;
}

int tensor_batchnorm_backward(tensor_t *dx, tensor_t *dgamma, tensor_t *dbeta,
                              const tensor_t *dy, const tensor_t *x, const tensor_t *gamma,
                              const float *save_mean, const float *save_invstd)
{
    const char *func = __func__;
    if (!dx || !dy || !x || !gamma || !save_mean || !save_invstd)
        return FX_FAIL(FX_EINVAL, "%s is NULL",
                       !dx ? "dx" : !dy ? "dy" : !x ? "x" : !gamma ? "gamma"
                                                   : !save_mean ? "save_mean" : "save_invstd");
    nn_bn_dims d;
    int rc = nn_bn_dims_of(x, &d, func);
    if (!rc) rc = nn_same_shape(func, "dy", dy, "x", x);
    if (!rc) rc = nn_same_shape(func, "dx", dx, "x", x);
    if (!rc) rc = nn_bn_per_channel(func, "gamma", gamma, d.C);
    if (!rc && dgamma) rc = nn_bn_per_channel(func, "dgamma", dgamma, d.C);
    if (!rc && dbeta) rc = nn_bn_per_channel(func, "dbeta", dbeta, d.C);
    if (!rc) rc = nn_bn_need_batch(func, &d, x);
    if (rc) return rc;
    fx_op_args a = {.op = FX_OP_BATCHNORM_BACKWARD, .func = func, .nt = 6,
                    .t = {dx, dgamma, dbeta, dy, x, gamma},
                    .tn = {"dx", "dgamma", "dbeta", "dy", "x", "gamma"}};
    a.u.bn_bwd.dx = dx;
    a.u.bn_bwd.dgamma = dgamma;
    a.u.bn_bwd.dbeta = dbeta;
    a.u.bn_bwd.dy = dy;
    a.u.bn_bwd.x = x;
    a.u.bn_bwd.gamma = gamma;
    a.u.bn_bwd.save_mean = save_mean;
    a.u.bn_bwd.save_invstd = save_invstd;
    a.u.bn_bwd.d = &d;
    return fx_op_run(&a);
}

int fx_nn_batchnorm_backward_host(const fx_op_args *r)
{
    tensor_t *dx = r->u.bn_bwd.dx, *dgamma = r->u.bn_bwd.dgamma, *dbeta = r->u.bn_bwd.dbeta;
    const tensor_t *dy = r->u.bn_bwd.dy, *x = r->u.bn_bwd.x, *gamma = r->u.bn_bwd.gamma;
    const float *save_mean = r->u.bn_bwd.save_mean, *save_invstd = r->u.bn_bwd.save_invstd;
    const nn_bn_dims d = *r->u.bn_bwd.d;
    const char *func = r->func;
    int rc = FX_OK;

    const int64_t C = d.C, S = d.S;
    const double M = (double)d.M;
    const fx_bn_kernels *kn = nn_bn_kernels();
    fx_scratch sc = {.n = 0};
    const float *gv;
    fx_bn_src xs, gys;
    float *xcopy, *gycopy;
    float *dg = fx_scratch_alloc(&sc, C, sizeof *dg), *db = fx_scratch_alloc(&sc, C, sizeof *db);
    if (!dg || !db) {
        rc = fx_error(FX_ENOMEM, func, "cannot allocate gradients for %lld channels", (long long)C);
        goto done;
    }
    const tensor_t *ins[3] = {dy, x, gamma};
    if ((rc = nn_bn_source(kn, x, &xs, &xcopy, &sc, func))) goto done;
    if ((rc = nn_bn_source(kn, dy, &gys, &gycopy, &sc, func))) goto done;
    if ((rc = nn_in_f32(gamma, &gv, &sc, func))) goto done;
    /* a shared-exponent dx from in-place sources whose exponent can be guessed (e): the sums
     * first, then dx rounded straight from the rows at e (bn_direct.h), without the fp32
     * stage; per channel the coefficients k, mdy and mdyx (mu and is are save_*) */
    int e = 0;
    const int direct = nn_bn_in_place() && fx_bn_backward_direct_ok(dx, x, dy, &d, &e);
    double *coef = direct ? fx_scratch_alloc(&sc, 3 * C, sizeof *coef) : NULL;
    if (direct && !coef) {
        rc = fx_error(FX_ENOMEM, func, "cannot allocate coefficients for %lld channels",
                      (long long)C);
        goto done;
    }
    const int nt = nn_bn_threads(&d);
    (void)nt;
    const int odd = dx->fmt != FMT_FP32;
    const fmt_t gf = dgamma ? dgamma->fmt : FMT_FP32, bf = dbeta ? dbeta->fmt : FMT_FP32;
    const int64_t gsz = fx_bn_group_size(C, nt), ngroups = (C + gsz - 1) / gsz;
    /* dx may overwrite a private copy of dy: channel c's sums are taken before its dx, and
     * each element only reads its own dy and x */
    nn_bn_half_fn half;
    float *hbuf, *dxv;
    if ((rc = nn_bn_out_stage(dx, direct, ins, gycopy, ngroups, S, &half, &hbuf, &dxv, &sc,
                              func)))
        goto done;
    /* a shared-exponent dx on the stage route: the write's statistics, kept by the kernels */
    fx_bn_max *gmax = NULL;
    if (!direct && (rc = nn_bn_max_records(dx, ngroups, &gmax, &sc, func))) goto done;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t g = 0; g < ngroups; g++) {
        const int64_t c0 = g * gsz;
        const int nc = (int)(C - c0 < gsz ? C - c0 : gsz);
        double mu[FX_BN_GROUP], is[FX_BN_GROUP], sdy[FX_BN_GROUP], sdyx[FX_BN_GROUP];
        fx_bn_max local = {0.0f, 0}; /* copied out once, as in the forward pass */
        fx_bn_max *mx = gmax ? &local : NULL;
        for (int j = 0; j < nc; j++) {
            mu[j] = save_mean[c0 + j];
            is[j] = save_invstd[c0 + j];
        }
        kn->grad_sums(&xs, &gys, &d, c0, nc, mu, is, sdy, sdyx);
        for (int j = 0; j < nc; j++) {
            const int64_t c = c0 + j;
            dg[c] = nn_stage_f32(sdyx[j], gf);
            db[c] = nn_stage_f32(sdy[j], bf);
            const double k = (double)gv[c] * is[j], mdy = sdy[j] / M, mdyx = sdyx[j] / M;
            if (direct) {
                coef[c] = k;
                coef[C + c] = mdy;
                coef[2 * C + c] = mdyx;
                continue;
            }
            if (half && kn->backward_half && /* the same bits, rounded in registers */
                kn->backward_half(&xs, &gys, c * S, (uint16_t *)fx_tensor_base(dx) + c * S, S,
                                  d.N, C * S, mu[j], is[j], k, mdy, mdyx, nn_bn_half_kind(dx)))
                continue;
            for (int64_t n = 0; n < d.N; n++) {
                const int64_t o = (n * C + c) * S;
                float *q = half ? hbuf + g * S : dxv + o;
                kn->backward(&xs, &gys, o, q, S, mu[j], is[j], k, mdy, mdyx, odd, mx);
                if (half) half(q, (uint16_t *)fx_tensor_base(dx) + o, S);
            }
        }
        if (gmax) gmax[g] = local;
    }
    if (direct) {
        const fx_bn_coefs cf = {save_mean, save_invstd, coef, coef + C, coef + 2 * C};
        rc = fx_bn_backward_direct(dx, e, &xs, &gys, &d, kn, &cf, func);
    } else if (!half)
        rc = nn_bn_write(dx, dxv, gmax, ngroups, func);
    if (!rc && dgamma) rc = fx_write_f32(dgamma, dg, func);
    if (!rc && dbeta) rc = fx_write_f32(dbeta, db, func);
done:
    fx_scratch_free(&sc);
    return rc;
}
