/* The training ops of flexpoint_nn.h (convolution aside) on device tensors, against the CPU
 * scalar backend (include/flexpoint_gpu.h, src/gpu/gpu_nn.c).
 *
 * Every op runs on host tensors under the "scalar" backend and on device copies of the same
 * inputs, for every input format and two output formats (the input's and another), then:
 *   - pooling, ReLU backward, dropout, batch norm (+ its running/saved statistics), SGD and
 *     Adam (weights, master, optimiser buffers, over several steps, with and without master
 *     weights and stochastic rounding), loss unscaling, and tensor_mean of FLEX16_5/DFP16
 *     inputs: identical results: raw bits, and for FLEX16_5/DFP16 outputs the exponent and
 *     every write statistic (the device repeats the CPU's integer or IEEE steps);
 *   - tensor_mean of float inputs (fp32 sums in another order) and softmax cross-entropy
 *     (the device's exp/log): within a bound of an fp64 reference computed here, on both
 *     sides: gamma_n * sum|x| / n for the fp32 sums, plus the output format's rounding;
 *   - maxpool's argmax indices: identical.
 * Placement rules: mixed host/device tensors fail with FX_EINVAL naming the operands (checked
 * with tensors marked as device memory, so it runs everywhere); with a device, host memory
 * where device memory is required (and the reverse) fails with FX_EINVAL, an out-of-plane
 * argmax with FX_ERANGE, and the device memory API works and refuses misuse.
 * The device copy of stochastic rounding (gpu_nn_math.h) is compared bit for bit with the
 * CPU's fx_sr_round on the host.
 *
 * Without a CUDA device the test skips (77). FX_GPU_TEST_ON_HOST=1 runs the same comparisons
 * with host tensors and malloc'd buffers standing in for device ones, under the best CPU
 * backend, which checks the test's own logic and bounds on a machine without a GPU. */
#include "core/internal.h" /* host stand-ins copy the exponent state; placement marking */
#include "flexpoint_nn.h"
#include "gpu/gpu_nn_math.h"
#include "nn/pool_own.h"
#include "nn/stochastic_round.h"
#include "testutil.h"
#include "gpu_testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *g_alt_backend = "scalar";

static const fmt_t ALL[5] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5, FMT_DFP16};

static int is_int(fmt_t f) { return fmt_is_shared_exponent(f); }

/* ---- host/device helpers ------------------------------------------------------------------ */


/* A device buffer holding a copy of `bytes` of host memory src (src NULL: zero-filled). */
static void *dev_buf(const void *src, size_t bytes)
{
    void *p = NULL;
    if (gpu_test_on_host) {
        p = calloc(1, bytes ? bytes : 1);
        if (p && src) memcpy(p, src, bytes);
    } else {
        CHECK_STATUS(flexpoint_gpu_malloc(&p, bytes ? bytes : 1), FX_OK);
        if (p && src) CHECK_STATUS(flexpoint_gpu_memcpy_to_device(p, src, bytes), FX_OK);
    }
    CHECK(p != NULL, "device buffer of %zu bytes", bytes);
    return p;
}

static void dev_read(void *dst, const void *dev, size_t bytes)
{
    if (gpu_test_on_host)
        memcpy(dst, dev, bytes);
    else
        CHECK_STATUS(flexpoint_gpu_memcpy_to_host(dst, dev, bytes), FX_OK);
}

static void dev_free(void *p)
{
    if (gpu_test_on_host)
        free(p);
    else if (p)
        CHECK_STATUS(flexpoint_gpu_free(p), FX_OK);
}

/* Run the host call under the scalar backend, the device call (or its stand-in under the best
 * CPU backend); both must succeed. */
#define RUN_BOTH(what, host_call, dev_call)                                                     \
    do {                                                                                        \
        flexpoint_set_backend("scalar");                                                        \
        int rh_ = (host_call);                                                                  \
        const char *eh_ = rh_ ? flexpoint_last_error() : "";                                    \
        char eh_buf_[256];                                                                      \
        snprintf(eh_buf_, sizeof eh_buf_, "%s", eh_);                                           \
        flexpoint_set_backend(g_alt_backend);                                                   \
        int rd_ = (dev_call);                                                                   \
        flexpoint_set_backend("scalar");                                                        \
        CHECK(rh_ == FX_OK && rd_ == FX_OK, "%s: host %d (%s), device %d (%s)", what, rh_,      \
              eh_buf_, rd_, rd_ ? flexpoint_last_error() : "");                                 \
    } while (0)

/* IEEE special values and ties at the start of v (n >= 8). */
static void add_specials(float *v, int64_t n)
{
    if (n < 8) return;
    v[0] = NAN;
    v[1] = INFINITY;
    v[2] = -INFINITY;
    v[3] = -0.0f;
    v[4] = 0.0f;
    v[5] = 1e-40f;
    v[6] = 65520.0f;
    v[7] = -3.0e38f;
}

static tensor_t *host_tensor(fmt_t f, int ndim, const int64_t *shape, const float *v)
{
    tensor_t *t = tensor_new(f, ndim, shape);
    CHECK(t != NULL, "tensor_new: %s", flexpoint_last_error());
    if (t) CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    return t;
}

/* A host tensor and its device copy with random values. */
typedef struct pair {
    tensor_t *h, *d;
} pair;

static pair make_pair(fmt_t f, int ndim, const int64_t *shape, test_rng *r, int kspan,
                      int specials)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    gpu_test_fill(v, n, r, kspan);
    if (specials) add_specials(v, n);
    pair p;
    p.h = host_tensor(f, ndim, shape, v);
    p.d = p.h ? gpu_test_to_dev(p.h) : NULL;
    free(v);
    return p;
}

/* Zeroed outputs on both sides. */
static pair out_pair(fmt_t f, int ndim, const int64_t *shape)
{
    pair p;
    p.h = tensor_new(f, ndim, shape);
    p.d = gpu_test_on_host ? tensor_new(f, ndim, shape) : tensor_new_device(f, ndim, shape);
    CHECK(p.h && p.d, "output tensors: %s", flexpoint_last_error());
    return p;
}

static void free_pair(pair p)
{
    tensor_free(p.h);
    tensor_free(p.d);
}


static void check_same_pair(pair o, const char *what) { gpu_test_check_same(o.h, o.d, what); }

/* Identical bytes of a host array and a device buffer. */
static void check_same_buf(const void *host, const void *dev, size_t bytes, const char *what)
{
    unsigned char *b = malloc(bytes ? bytes : 1);
    dev_read(b, dev, bytes);
    CHECK(memcmp(host, b, bytes) == 0, "%s: host and device buffers differ", what);
    free(b);
}

/* |t - ref| <= bound elementwise (t read as fp32; t may live on the device). */
static void check_bound(const tensor_t *t, const double *ref, const double *bound,
                        const char *what)
{
    tensor_t *b = fx_on_device(t) ? gpu_test_to_host(t) : gpu_test_host_clone(t);
    if (!b) return;
    int64_t n = tensor_numel(b);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    tensor_to_f32(b, v);
    int64_t worst = -1;
    for (int64_t i = 0; i < n && worst < 0; i++)
        if (!(fabs((double)v[i] - ref[i]) <= bound[i])) worst = i;
    CHECK(worst < 0, "%s (%s): element %lld = %.9g, reference %.9g, bound %.3g", what,
          fmt_name(tensor_fmt(b)), (long long)(worst < 0 ? 0 : worst),
          worst < 0 ? 0.0 : v[worst], worst < 0 ? 0.0 : ref[worst],
          worst < 0 ? 0.0 : bound[worst]);
    free(v);
    tensor_free(b);
}

/* Unit roundoff of a float format; an absolute allowance for its subnormals or, for a
 * shared-exponent output, half a step of its exponent. */
static double fmt_u(fmt_t f)
{
    return f == FMT_FP16 ? 0x1p-11 : f == FMT_BF16 ? 0x1p-8 : f == FMT_FP32 ? 0x1p-24 : 0.0;
}
static double fmt_abs(const tensor_t *t)
{
    fmt_t f = tensor_fmt(t);
    if (is_int(f)) return ldexp(0.5, tensor_exp(t));
    return f == FMT_FP16 ? 0x1p-25 : f == FMT_BF16 ? 0x1p-134 : 0x1p-150;
}

static double gamma_n(int64_t n)
{
    double nu = (double)n * 0x1p-24;
    return nu / (1.0 - nu);
}

static float *values_of(const tensor_t *h)
{
    int64_t n = tensor_numel(h);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    tensor_to_f32(h, v);
    return v;
}

/* ---- pooling -------------------------------------------------------------------------------- */

typedef struct pool_case {
    int kh, kw, sh, sw, ph, pw;
} pool_case;

static const pool_case POOLS[3] = {{2, 2, 2, 2, 0, 0}, {3, 3, 2, 2, 1, 1}, {3, 2, 1, 2, 1, 0}};

static void test_pooling(test_rng *r)
{
    const int64_t xs[4] = {2, 3, 9, 11};
    for (int c = 0; c < 3; c++) {
        const pool_case *p = &POOLS[c];
        const int64_t ys[4] = {2, 3, (9 + 2 * p->ph - p->kh) / p->sh + 1,
                               (11 + 2 * p->pw - p->kw) / p->sw + 1};
        const int64_t ny = ys[0] * ys[1] * ys[2] * ys[3];
        for (int fi = 0; fi < 5; fi++)
            for (int v = 0; v < 2; v++) {
                const fmt_t f = ALL[fi], fo = v ? ALL[(fi + 2) % 5] : f;
                char what[128];
                pair x = make_pair(f, 4, xs, r, 6, 1);
                pair y = out_pair(fo, 4, ys);
                int32_t *am_h = malloc((size_t)ny * sizeof *am_h);
                int32_t *am_d = dev_buf(NULL, (size_t)ny * sizeof *am_d);
                snprintf(what, sizeof what, "maxpool %dx%d/%d pad %d %s -> %s", p->kh, p->kw,
                         p->sh, p->ph, fmt_name(f), fmt_name(fo));
                RUN_BOTH(what,
                         tensor_maxpool2d(y.h, am_h, x.h, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw),
                         tensor_maxpool2d(y.d, am_d, x.d, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw));
                check_same_pair(y, what);
                check_same_buf(am_h, am_d, (size_t)ny * sizeof *am_h, what);
                if (v == 0) { /* without argmax */
                    pair y2 = out_pair(fo, 4, ys);
                    RUN_BOTH(what,
                             tensor_maxpool2d(y2.h, NULL, x.h, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw),
                             tensor_maxpool2d(y2.d, NULL, x.d, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw));
                    check_same_pair(y2, what);
                    free_pair(y2);
                }

                /* gradients: dy of format f into dx of format fo; overlapping windows send
                 * several gradients to one input (the order of the fp32 sums matters) */
                pair dy = make_pair(f, 4, ys, r, 5, 1);
                pair dx = out_pair(fo, 4, xs);
                snprintf(what, sizeof what, "maxpool_backward %dx%d/%d %s -> %s", p->kh, p->kw,
                         p->sh, fmt_name(f), fmt_name(fo));
                RUN_BOTH(what, tensor_maxpool2d_backward(dx.h, dy.h, am_h),
                         tensor_maxpool2d_backward(dx.d, dy.d, am_d));
                check_same_pair(dx, what);
                /* the trainer's entry (indices from the forward pass above, no device check)
                 * gives the same result, and on a device without waiting for one */
                snprintf(what, sizeof what, "maxpool_backward_own %dx%d/%d %s -> %s", p->kh,
                         p->kw, p->sh, fmt_name(f), fmt_name(fo));
                pair dx2 = out_pair(fo, 4, xs);
                const long long w0 = flexpoint_gpu_host_waits();
                RUN_BOTH(what, fx_maxpool2d_backward_own(dx2.h, dy.h, am_h),
                         fx_maxpool2d_backward_own(dx2.d, dy.d, am_d));
                const long long waited = flexpoint_gpu_host_waits() - w0;
                check_same_pair(dx2, what);
                /* (a float dx: a shared-exponent dx waits in its first write, which
                 * measures its own data; FLEXPOINT_GPU_SYNC=1 makes every op wait) */
                const char *sync_env = getenv("FLEXPOINT_GPU_SYNC");
                if (!gpu_test_on_host && !fmt_is_shared_exponent(fo) &&
                    !(sync_env && sync_env[0] == '1'))
                    CHECK(waited == 0, "%s: %lld host waits", what, waited);
                free_pair(dx2);

                snprintf(what, sizeof what, "avgpool %dx%d/%d pad %d %s -> %s", p->kh, p->kw,
                         p->sh, p->ph, fmt_name(f), fmt_name(fo));
                RUN_BOTH(what,
                         tensor_avgpool2d(y.h, x.h, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw),
                         tensor_avgpool2d(y.d, x.d, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw));
                check_same_pair(y, what);
                snprintf(what, sizeof what, "avgpool_backward %dx%d/%d %s -> %s", p->kh, p->kw,
                         p->sh, fmt_name(f), fmt_name(fo));
                RUN_BOTH(what,
                         tensor_avgpool2d_backward(dx.h, dy.h, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw),
                         tensor_avgpool2d_backward(dx.d, dy.d, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw));
                check_same_pair(dx, what);
                free(am_h);
                dev_free(am_d);
                free_pair(x);
                free_pair(y);
                free_pair(dy);
                free_pair(dx);
            }
    }

    /* global average pooling: a plane of 35 (not a power of two) and of 16 */
    const int64_t gx[2][4] = {{3, 4, 5, 7}, {2, 3, 4, 4}};
    for (int s = 0; s < 2; s++)
        for (int fi = 0; fi < 5; fi++)
            for (int v = 0; v < 2; v++) {
                const fmt_t f = ALL[fi], fo = v ? ALL[(fi + 3) % 5] : f;
                const int64_t ys[4] = {gx[s][0], gx[s][1], 1, 1};
                const int yd = v ? 4 : 2; /* [N, C, 1, 1] or [N, C] */
                char what[96];
                pair x = make_pair(f, 4, gx[s], r, 6, s == 0);
                pair y = out_pair(fo, yd, ys);
                snprintf(what, sizeof what, "global_avgpool %lldx%lld %s -> %s",
                         (long long)gx[s][2], (long long)gx[s][3], fmt_name(f), fmt_name(fo));
                RUN_BOTH(what, tensor_global_avgpool(y.h, x.h), tensor_global_avgpool(y.d, x.d));
                check_same_pair(y, what);
                pair dy = make_pair(f, yd, ys, r, 6, s == 0);
                pair dx = out_pair(fo, 4, gx[s]);
                snprintf(what, sizeof what, "global_avgpool_backward %s -> %s", fmt_name(f),
                         fmt_name(fo));
                RUN_BOTH(what, tensor_global_avgpool_backward(dx.h, dy.h),
                         tensor_global_avgpool_backward(dx.d, dy.d));
                check_same_pair(dx, what);
                free_pair(x);
                free_pair(y);
                free_pair(dy);
                free_pair(dx);
            }
}

/* ---- element-wise ops ------------------------------------------------------------------------ */

static void test_relu_backward_and_dropout(test_rng *r)
{
    const int64_t s[2] = {7, 45};
    for (int fi = 0; fi < 5; fi++)
        for (int v = 0; v < 2; v++) {
            const fmt_t f = ALL[fi], fo = v ? ALL[(fi + 1) % 5] : f, fx = ALL[(fi + v + 2) % 5];
            char what[96];
            pair dy = make_pair(f, 2, s, r, 7, 1);
            pair x = make_pair(fx, 2, s, r, 3, 1); /* sign pattern, zeros, NaN, in format fx */
            pair dx = out_pair(fo, 2, s);
            snprintf(what, sizeof what, "relu_backward dy %s, x %s -> %s", fmt_name(f),
                     fmt_name(fx), fmt_name(fo));
            RUN_BOTH(what, tensor_relu_backward(dx.h, dy.h, x.h),
                     tensor_relu_backward(dx.d, dy.d, x.d));
            check_same_pair(dx, what);

            const double ps[3] = {0.0, 0.3, 0.5};
            for (int k = 0; k < 3; k++) {
                snprintf(what, sizeof what, "dropout p=%g %s -> %s", ps[k], fmt_name(f),
                         fmt_name(fo));
                RUN_BOTH(what, tensor_dropout(dx.h, dy.h, ps[k], 77, (uint64_t)k + 5),
                         tensor_dropout(dx.d, dy.d, ps[k], 77, (uint64_t)k + 5));
                check_same_pair(dx, what);
                snprintf(what, sizeof what, "dropout_backward p=%g %s -> %s", ps[k],
                         fmt_name(f), fmt_name(fo));
                RUN_BOTH(what, tensor_dropout_backward(dx.h, dy.h, ps[k], 78, 9),
                         tensor_dropout_backward(dx.d, dy.d, ps[k], 78, 9));
                check_same_pair(dx, what);
            }
            free_pair(dy);
            free_pair(x);
            free_pair(dx);
        }
}

/* ---- mean --------------------------------------------------------------------------------- */

static void test_mean(test_rng *r)
{
    const int64_t s[3] = {6, 5, 37};
    for (int fi = 0; fi < 5; fi++)
        for (int v = 0; v < 2; v++)
            for (int axis = -1; axis < 3; axis++) {
                const fmt_t f = ALL[fi], fo = v ? ALL[(fi + 4) % 5] : f;
                int64_t os[3];
                int od = 0;
                for (int d = 0; d < 3 && axis >= 0; d++)
                    if (d != axis) os[od++] = s[d];
                if (axis < 0) os[od++] = 1;
                pair a = make_pair(f, 3, s, r, 6, 0);
                pair o = out_pair(fo, od, os);
                const int ax = axis < 0 ? FX_AXIS_ALL : axis;
                char what[96];
                snprintf(what, sizeof what, "mean axis %d %s -> %s", axis, fmt_name(f),
                         fmt_name(fo));
                RUN_BOTH(what, tensor_mean(o.h, a.h, ax), tensor_mean(o.d, a.d, ax));
                if (is_int(f)) {
                    check_same_pair(o, what); /* exact sums, one rounding: identical */
                } else {
                    /* fp32 sums in backend/device order: both within the bound of fp64 */
                    float *x = values_of(a.h);
                    const int64_t len = axis < 0 ? 6 * 5 * 37 : s[axis];
                    const int64_t inner = axis < 0 ? 1 : axis == 2 ? 1 : axis == 1 ? 37 : 5 * 37;
                    const int64_t nout = axis < 0 ? 1 : 6 * 5 * 37 / len;
                    double *ref = malloc((size_t)nout * sizeof *ref);
                    double *bh = malloc((size_t)nout * sizeof *bh);
                    double *bd = malloc((size_t)nout * sizeof *bd);
                    for (int64_t j = 0; j < nout; j++) {
                        const int64_t oo = j / inner, ii = j % inner;
                        double sum = 0, mag = 0;
                        for (int64_t k = 0; k < len; k++) {
                            double t = x[(oo * len + k) * inner + ii];
                            sum += t;
                            mag += fabs(t);
                        }
                        ref[j] = sum / (double)len;
                        const double b = gamma_n(len + 8) * mag / (double)len +
                                         2 * fmt_u(fo) * fabs(ref[j]);
                        bh[j] = b + fmt_abs(o.h);
                        bd[j] = b + fmt_abs(o.d);
                    }
                    check_bound(o.h, ref, bh, what);
                    check_bound(o.d, ref, bd, what);
                    free(x);
                    free(ref);
                    free(bh);
                    free(bd);
                }
                free_pair(a);
                free_pair(o);
            }
}

/* ---- softmax cross-entropy ---------------------------------------------------------------- */

static void test_softmax_ce(test_rng *r)
{
    const int64_t N = 9, K = 10, s[2] = {9, 10};
    int32_t labels[9];
    for (int i = 0; i < N; i++) labels[i] = (int32_t)test_rng_range(r, 0, K - 1);
    for (int fi = 0; fi < 5; fi++)
        for (int v = 0; v < 2; v++) {
            const fmt_t f = ALL[fi], fo = v ? ALL[(fi + 2) % 5] : f;
            const double scale = v ? 1024.0 : 1.0;
            pair lg = make_pair(f, 2, s, r, 3, 0);
            pair g = out_pair(fo, 2, s);
            float loss_h = -1, loss_d = -2;
            char what[96];
            snprintf(what, sizeof what, "softmax_ce %s -> %s", fmt_name(f), fmt_name(fo));
            RUN_BOTH(what, tensor_softmax_cross_entropy(&loss_h, g.h, lg.h, labels, scale),
                     tensor_softmax_cross_entropy(&loss_d, g.d, lg.d, labels, scale));
            /* fp64 reference from the stored logits */
            float *x = values_of(lg.h);
            double *ref = malloc((size_t)(N * K) * sizeof *ref);
            double *bh = malloc((size_t)(N * K) * sizeof *bh), *bd = malloc((size_t)(N * K) * sizeof *bd);
            double total = 0;
            for (int64_t i = 0; i < N; i++) {
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < K; j++) m = fmax(m, x[i * K + j]);
                for (int64_t j = 0; j < K; j++) sum += exp(x[i * K + j] - m);
                total += m + log(sum) - x[i * K + labels[i]];
                for (int64_t j = 0; j < K; j++) {
                    const double p = exp(x[i * K + j] - m) / sum;
                    ref[i * K + j] = scale * (p - (j == labels[i])) / (double)N;
                }
            }
            const double lref = total / (double)N;
            for (int64_t j = 0; j < N * K; j++) {
                const double b = 2 * fmt_u(fo) * fabs(ref[j]) + 1e-12 * scale;
                bh[j] = b + fmt_abs(g.h);
                bd[j] = b + fmt_abs(g.d);
            }
            CHECK(fabs(loss_h - lref) <= 4e-7 * fabs(lref) + 1e-12, "%s: host loss %.9g, ref %.9g",
                  what, loss_h, lref);
            CHECK(fabs(loss_d - lref) <= 4e-7 * fabs(lref) + 1e-12,
                  "%s: device loss %.9g, ref %.9g", what, loss_d, lref);
            check_bound(g.h, ref, bh, what);
            check_bound(g.d, ref, bd, what);
            /* the loss alone (no gradient) */
            RUN_BOTH(what, tensor_softmax_cross_entropy(&loss_h, NULL, lg.h, labels, 1.0),
                     tensor_softmax_cross_entropy(&loss_d, NULL, lg.d, labels, 1.0));
            CHECK(fabs(loss_d - lref) <= 4e-7 * fabs(lref) + 1e-12, "%s: loss only %.9g",
                  what, loss_d);
            free(x);
            free(ref);
            free(bh);
            free(bd);
            free_pair(lg);
            free_pair(g);
        }
}

/* ---- batch norm --------------------------------------------------------------------------- */

static void test_batchnorm(test_rng *r)
{
    const int64_t s4[4] = {4, 3, 5, 5}, s2[2] = {16, 6};
    for (int sh = 0; sh < 2; sh++)
        for (int fi = 0; fi < 5; fi++)
            for (int v = 0; v < 2; v++) {
                const int nd = sh ? 2 : 4;
                const int64_t *s = sh ? s2 : s4;
                const int64_t C = s[1];
                const fmt_t f = ALL[fi], fo = v ? ALL[(fi + 1) % 5] : f;
                const fmt_t fp = v ? FMT_FP32 : f; /* parameters' format */
                const int64_t cs[1] = {C};
                pair x = make_pair(f, nd, s, r, 4, 0);
                pair gm = make_pair(fp, 1, cs, r, 1, 0), bt = make_pair(fp, 1, cs, r, 1, 0);
                pair y = out_pair(fo, nd, s);
                float rm_h[6], rv_h[6], sm_h[6], si_h[6], rm_d[6], rv_d[6], sm_d[6], si_d[6];
                for (int c = 0; c < C; c++) {
                    rm_h[c] = rm_d[c] = (float)(0.1 * c);
                    rv_h[c] = rv_d[c] = (float)(1.0 + 0.5 * c);
                }
                char what[128];
                snprintf(what, sizeof what, "batchnorm %dD %s (params %s) -> %s", nd, fmt_name(f),
                         fmt_name(fp), fmt_name(fo));
                for (int step = 0; step < 2; step++) {
                    RUN_BOTH(what,
                             tensor_batchnorm(y.h, x.h, gm.h, bt.h, rm_h, rv_h, sm_h, si_h, 0.1,
                                              1e-5, 1),
                             tensor_batchnorm(y.d, x.d, gm.d, bt.d, rm_d, rv_d, sm_d, si_d, 0.1,
                                              1e-5, 1));
                    check_same_pair(y, what);
                    CHECK(memcmp(rm_h, rm_d, (size_t)C * 4) == 0 &&
                              memcmp(rv_h, rv_d, (size_t)C * 4) == 0,
                          "%s: running statistics differ", what);
                    CHECK(memcmp(sm_h, sm_d, (size_t)C * 4) == 0 &&
                              memcmp(si_h, si_d, (size_t)C * 4) == 0,
                          "%s: saved statistics differ", what);
                }
                RUN_BOTH(what,
                         tensor_batchnorm(y.h, x.h, gm.h, bt.h, rm_h, rv_h, NULL, NULL, 0.1, 1e-5, 0),
                         tensor_batchnorm(y.d, x.d, gm.d, bt.d, rm_d, rv_d, NULL, NULL, 0.1, 1e-5, 0));
                check_same_pair(y, "batchnorm inference");

                pair dy = make_pair(f, nd, s, r, 3, 0);
                pair dx = out_pair(fo, nd, s), dg = out_pair(fo, 1, cs), db = out_pair(fp, 1, cs);
                snprintf(what, sizeof what, "batchnorm_backward %dD %s -> %s", nd, fmt_name(f),
                         fmt_name(fo));
                RUN_BOTH(what,
                         tensor_batchnorm_backward(dx.h, dg.h, db.h, dy.h, x.h, gm.h, sm_h, si_h),
                         tensor_batchnorm_backward(dx.d, dg.d, db.d, dy.d, x.d, gm.d, sm_d, si_d));
                check_same_pair(dx, what);
                check_same_pair(dg, "batchnorm_backward dgamma");
                check_same_pair(db, "batchnorm_backward dbeta");
                RUN_BOTH(what,
                         tensor_batchnorm_backward(dx.h, NULL, NULL, dy.h, x.h, gm.h, sm_h, si_h),
                         tensor_batchnorm_backward(dx.d, NULL, NULL, dy.d, x.d, gm.d, sm_d, si_d));
                check_same_pair(dx, "batchnorm_backward without dgamma/dbeta");
                free_pair(x);
                free_pair(gm);
                free_pair(bt);
                free_pair(y);
                free_pair(dy);
                free_pair(dx);
                free_pair(dg);
                free_pair(db);
            }
}

/* ---- optimisers ----------------------------------------------------------------------------- */

static void test_optimisers(test_rng *r)
{
    const int64_t s[2] = {13, 29};
    const int64_t n = 13 * 29;
    const size_t bytes = (size_t)n * sizeof(float);
    for (int fi = 0; fi < 5; fi++)
        for (int variant = 0; variant < 4; variant++) {
            const fmt_t f = ALL[fi], fg = ALL[(fi + 1 + variant) % 5];
            const int use_master = variant & 1, stochastic = (variant >> 1) & 1;
            pair w = make_pair(f, 2, s, r, 2, 0), w2 = make_pair(f, 2, s, r, 2, 0);
            float *master = malloc(bytes), *buf = calloc(1, bytes), *am = calloc(1, bytes),
                  *av = calloc(1, bytes), *master2 = malloc(bytes);
            tensor_to_f32(w.h, master);
            tensor_to_f32(w2.h, master2);
            float *d_master = dev_buf(master, bytes), *d_buf = dev_buf(NULL, bytes);
            float *d_master2 = dev_buf(master2, bytes);
            float *d_am = dev_buf(NULL, bytes), *d_av = dev_buf(NULL, bytes);
            char what[128];
            for (int step = 1; step <= 3; step++) {
                pair g = make_pair(fg, 2, s, r, 3, 0);
                snprintf(what, sizeof what, "sgd %s (grad %s) master %d stochastic %d step %d",
                         fmt_name(f), fmt_name(fg), use_master, stochastic, step);
                /* momentum with a buffer, or none (no buffer) on the last step */
                const double mom = step < 3 ? 0.9 : 0.0;
                RUN_BOTH(what,
                         fx_sgd_step(w.h, g.h, use_master ? master : NULL, step < 3 ? buf : NULL,
                                     0.05, mom, 1e-3, 0.5, stochastic, 11, (uint64_t)step),
                         fx_sgd_step(w.d, g.d, use_master ? d_master : NULL,
                                     step < 3 ? d_buf : NULL, 0.05, mom, 1e-3, 0.5, stochastic,
                                     11, (uint64_t)step));
                check_same_pair(w, what);
                if (use_master) check_same_buf(master, d_master, bytes, "sgd master");
                check_same_buf(buf, d_buf, bytes, "sgd momentum buffer");

                snprintf(what, sizeof what, "adam %s (grad %s) master %d stochastic %d step %d",
                         fmt_name(f), fmt_name(fg), use_master, stochastic, step);
                RUN_BOTH(what,
                         fx_adam_step(w2.h, g.h, use_master ? master2 : NULL, am, av, 1e-2, 0.9,
                                      0.999, 1e-8, 1e-4, 0.5, stochastic, 12, (uint64_t)step),
                         fx_adam_step(w2.d, g.d, use_master ? d_master2 : NULL, d_am, d_av, 1e-2,
                                      0.9, 0.999, 1e-8, 1e-4, 0.5, stochastic, 12,
                                      (uint64_t)step));
                check_same_pair(w2, what);
                if (use_master) check_same_buf(master2, d_master2, bytes, "adam master");
                check_same_buf(am, d_am, bytes, "adam m");
                check_same_buf(av, d_av, bytes, "adam v");
                free_pair(g);
            }
            free(master);
            free(master2);
            free(buf);
            free(am);
            free(av);
            dev_free(d_master);
            dev_free(d_master2);
            dev_free(d_buf);
            dev_free(d_am);
            dev_free(d_av);
            free_pair(w);
            free_pair(w2);
        }
}

/* ---- loss scaling ------------------------------------------------------------------------- */

static void test_unscale(test_rng *r)
{
    const int64_t s[2] = {11, 17};
    const int64_t n = 11 * 17;
    const size_t bytes = (size_t)n * sizeof(float);
    for (int rep = 0; rep < 5; rep++) {
        pair g[3];
        for (int i = 0; i < 3; i++) g[i] = make_pair(ALL[(rep + i) % 5], 2, s, r, 8, rep == 4 && i == 0);
        /* one strided view on each side */
        tensor_t *vh = tensor_view_transpose(g[2].h, 0, 1), *vd = tensor_view_transpose(g[2].d, 0, 1);
        const tensor_t *gh[3] = {g[0].h, g[1].h, vh}, *gd[3] = {g[0].d, g[1].d, vd};
        float *oh[3], *od[3];
        for (int i = 0; i < 3; i++) {
            oh[i] = calloc(1, bytes);
            od[i] = dev_buf(NULL, bytes);
        }
        fx_loss_scaler sc;
        fx_loss_scaler_init(&sc, rep != 1);
        if (rep == 3) sc.scale = 1e-37; /* unscaling overflows: found_inf from finite values */
        int fh = -1, fd = -2;
        char what[64];
        snprintf(what, sizeof what, "unscale rep %d", rep);
        RUN_BOTH(what, fx_loss_scaler_unscale(&sc, gh, 3, oh, &fh),
                 fx_loss_scaler_unscale(&sc, gd, 3, od, &fd));
        CHECK(fh == fd, "%s: found_inf host %d device %d", what, fh, fd);
        if (rep == 3) CHECK(fh == 1, "%s: overflow not found", what);
        for (int i = 0; i < 3; i++) check_same_buf(oh[i], od[i], bytes, what);
        for (int i = 0; i < 3; i++) {
            free(oh[i]);
            dev_free(od[i]);
            free_pair(g[i]);
        }
        tensor_free(vh);
        tensor_free(vd);
    }
}

/* ---- placement and misuse ------------------------------------------------------------------- */

static int msg_has(const char *s) { return strstr(flexpoint_last_error(), s) != NULL; }

/* Mixed placements, with a host tensor marked as device memory (nothing may touch it). */
static void test_mixed_placement(void)
{
    const int64_t s4[4] = {1, 2, 4, 4}, s2[2] = {2, 3}, c2[1] = {2};
    tensor_t *h = tensor_new(FMT_FP32, 4, s4), *m = tensor_new(FMT_FP32, 4, s4);
    tensor_t *h2 = tensor_new(FMT_FP32, 2, s2), *m2 = tensor_new(FMT_FP32, 2, s2);
    tensor_t *c = tensor_new(FMT_FP32, 1, c2);
    tensor_t *y = tensor_new(FMT_FP32, 4, (const int64_t[]){1, 2, 2, 2});
    if (!h || !m || !h2 || !m2 || !c || !y) {
        CHECK(0, "tensor_new");
        return;
    }
    m->st->on_device = true;
    m->st->device = 5;
    m2->st->on_device = true;
    m2->st->device = 5;
    int32_t am[8] = {0};
    float buf[16] = {0}, loss = 0, st[2] = {0, 1};
    int32_t labels[2] = {0, 1};
    CHECK_STATUS(tensor_maxpool2d(y, am, m, 2, 2, 2, 2, 0, 0), FX_EINVAL);
    CHECK(msg_has("y lives on the host but x lives on CUDA device 5"), "'%s'",
          flexpoint_last_error());
    CHECK_STATUS(tensor_avgpool2d(y, m, 2, 2, 2, 2, 0, 0), FX_EINVAL);
    CHECK_STATUS(tensor_avgpool2d_backward(m, y, 2, 2, 2, 2, 0, 0), FX_EINVAL);
    CHECK(msg_has("dx lives on CUDA device 5 but dy lives on the host"), "'%s'",
          flexpoint_last_error());
    CHECK_STATUS(tensor_maxpool2d_backward(m, y, am), FX_EINVAL);
    CHECK_STATUS(tensor_global_avgpool(h2, m), FX_ESHAPE); /* shapes first */
    CHECK_STATUS(tensor_relu_backward(h, h, m), FX_EINVAL);
    CHECK(msg_has("tensor_relu_backward") && msg_has("x lives on CUDA device 5"), "'%s'",
          flexpoint_last_error());
    CHECK_STATUS(tensor_dropout(h, m, 0.5, 1, 1), FX_EINVAL);
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, h2, m2, labels, 1.0), FX_EINVAL);
    CHECK(msg_has("logits lives on CUDA device 5 but dlogits lives on the host"), "'%s'",
          flexpoint_last_error());
    CHECK_STATUS(tensor_batchnorm(h, m, c, c, NULL, NULL, NULL, NULL, 0.1, 1e-5, 1), FX_EINVAL);
    CHECK_STATUS(tensor_batchnorm_backward(h, NULL, NULL, h, m, c, st, st), FX_EINVAL);
    const int64_t one = 1;
    tensor_t *mo = tensor_new(FMT_FP32, 1, &one);
    CHECK_STATUS(tensor_mean(mo, m, FX_AXIS_ALL), FX_EINVAL);
    CHECK(msg_has("out lives on the host but a lives on CUDA device 5"), "'%s'",
          flexpoint_last_error());
    CHECK_STATUS(fx_sgd_step(h, m, NULL, NULL, 0.1, 0, 0, 1, 0, 0, 1), FX_EINVAL);
    CHECK(msg_has("w lives on the host but grad lives on CUDA device 5"), "'%s'",
          flexpoint_last_error());
    CHECK_STATUS(fx_adam_step(m, h, NULL, buf, buf + 8, 0.1, 0.9, 0.99, 1e-8, 0, 1, 0, 0, 1),
                 FX_EINVAL);
    fx_loss_scaler sc;
    fx_loss_scaler_init(&sc, 1);
    const tensor_t *gs[2] = {h, m};
    float *outs[2] = {buf, buf};
    int found = 0;
    CHECK_STATUS(fx_loss_scaler_unscale(&sc, gs, 2, outs, &found), FX_EINVAL);
    CHECK(msg_has("grads[0] lives on the host but grads[1] lives on CUDA device 5"), "'%s'",
          flexpoint_last_error());
    m->st->on_device = false;
    m2->st->on_device = false;
    tensor_free(mo);
    tensor_free(h);
    tensor_free(m);
    tensor_free(h2);
    tensor_free(m2);
    tensor_free(c);
    tensor_free(y);
}

/* The device memory API: without a device every call reports FX_EDEVICE (or FX_EINVAL for bad
 * arguments); with one, it allocates zeroed memory, copies both ways and refuses misuse. */
static void test_memory_api(void)
{
    void *p = (void *)1;
    CHECK_STATUS(flexpoint_gpu_malloc(NULL, 16), FX_EINVAL);
    CHECK_STATUS(flexpoint_gpu_malloc(&p, 0), FX_EINVAL);
    CHECK(p == NULL, "malloc(0) left %p", p);
    CHECK_STATUS(flexpoint_gpu_free(NULL), FX_OK);
    CHECK_STATUS(flexpoint_gpu_memcpy_to_device(NULL, NULL, 0), FX_OK);
    if (flexpoint_gpu_device_count() <= 0) {
        CHECK_STATUS(flexpoint_gpu_malloc(&p, 64), FX_EDEVICE);
        CHECK(p == NULL, "malloc without a device left %p", p);
        float h[4] = {1, 2, 3, 4};
        CHECK_STATUS(flexpoint_gpu_memcpy_to_device(h, h, sizeof h), FX_EDEVICE);
        CHECK_STATUS(flexpoint_gpu_memcpy_to_host(h, h, sizeof h), FX_EDEVICE);
        return;
    }
    float in[37], out[37];
    for (int i = 0; i < 37; i++) in[i] = (float)i - 18.5f;
    CHECK_STATUS(flexpoint_gpu_malloc(&p, sizeof in), FX_OK);
    CHECK_STATUS(flexpoint_gpu_memcpy_to_host(out, p, sizeof out), FX_OK);
    int zero = 1;
    for (int i = 0; i < 37; i++) zero &= out[i] == 0.0f;
    CHECK(zero, "flexpoint_gpu_malloc memory is not zero-filled");
    CHECK_STATUS(flexpoint_gpu_memcpy_to_device(p, in, sizeof in), FX_OK);
    CHECK_STATUS(flexpoint_gpu_memcpy_to_host(out, p, sizeof out), FX_OK);
    CHECK(memcmp(in, out, sizeof in) == 0, "device round trip");
    CHECK_STATUS(flexpoint_gpu_memcpy_to_device(out, in, sizeof in), FX_EINVAL); /* dst host */
    CHECK(msg_has("dst is host memory"), "'%s'", flexpoint_last_error());
    CHECK_STATUS(flexpoint_gpu_memcpy_to_host(p, p, sizeof in), FX_EINVAL);     /* dst device */
    CHECK_STATUS(flexpoint_gpu_free(in), FX_EINVAL);
    CHECK_STATUS(flexpoint_gpu_free(p), FX_OK);
}

/* Host memory where device memory is required, and the reverse (device only). */
static void test_pointer_rules(test_rng *r)
{
    const int64_t xs[4] = {1, 2, 4, 4}, ys[4] = {1, 2, 2, 2}, s2[2] = {3, 4};
    pair x = make_pair(FMT_FP32, 4, xs, r, 2, 0);
    pair y = out_pair(FMT_FP32, 4, ys), dx = out_pair(FMT_FP32, 4, xs);
    int32_t host_am[8];
    CHECK_STATUS(tensor_maxpool2d(y.d, host_am, x.d, 2, 2, 2, 2, 0, 0), FX_EINVAL);
    CHECK(msg_has("argmax is host memory"), "'%s'", flexpoint_last_error());
    /* an argmax outside its plane: FX_ERANGE, dx unchanged */
    int32_t bad[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    bad[5] = 3; /* plane 1 is [16, 32) */
    int32_t *d_am = dev_buf(bad, sizeof bad);
    tensor_t *before = gpu_test_to_host(dx.d);
    CHECK_STATUS(tensor_maxpool2d_backward(dx.d, y.d, d_am), FX_ERANGE);
    CHECK(msg_has("argmax[4]=4") || msg_has("argmax[5]=3"), "'%s'", flexpoint_last_error());
    gpu_test_check_same(before, dx.d, "dx unchanged after FX_ERANGE");
    tensor_free(before);
    dev_free(d_am);

    pair lg = make_pair(FMT_FP32, 2, s2, r, 1, 0);
    int32_t labels[3] = {0, 1, 2};
    int32_t *d_labels = dev_buf(labels, sizeof labels);
    float loss = 0, *d_loss = dev_buf(NULL, sizeof(float));
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, NULL, lg.d, d_labels, 1.0), FX_EINVAL);
    CHECK(msg_has("labels is memory of CUDA device"), "'%s'", flexpoint_last_error());
    CHECK_STATUS(tensor_softmax_cross_entropy(d_loss, NULL, lg.d, labels, 1.0), FX_EINVAL);
    dev_free(d_labels);
    dev_free(d_loss);

    float host_master[12] = {0};
    pair w = make_pair(FMT_FP16, 2, s2, r, 1, 0), g = make_pair(FMT_FP16, 2, s2, r, 1, 0);
    tensor_t *w_before = gpu_test_to_host(w.d);
    CHECK_STATUS(fx_sgd_step(w.d, g.d, host_master, NULL, 0.1, 0, 0, 1, 0, 0, 1), FX_EINVAL);
    CHECK(msg_has("master is host memory"), "'%s'", flexpoint_last_error());
    gpu_test_check_same(w_before, w.d, "w unchanged after a refused step");
    tensor_free(w_before);
    float *d_m = dev_buf(NULL, sizeof host_master);
    CHECK_STATUS(fx_adam_step(w.d, g.d, NULL, d_m, host_master, 0.1, 0.9, 0.99, 1e-8, 0, 1, 0,
                              0, 1),
                 FX_EINVAL);
    CHECK(msg_has("v is host memory"), "'%s'", flexpoint_last_error());
    dev_free(d_m);

    const int64_t cs[1] = {4};
    pair gm = make_pair(FMT_FP32, 1, cs, r, 1, 0);
    pair yy = out_pair(FMT_FP32, 2, s2);
    float *d_rm = dev_buf(NULL, 4 * sizeof(float)), rv[4] = {1, 1, 1, 1};
    CHECK_STATUS(tensor_batchnorm(yy.d, lg.d, gm.d, gm.d, d_rm, rv, NULL, NULL, 0.1, 1e-5, 1),
                 FX_EINVAL);
    CHECK(msg_has("running_mean is memory of CUDA device"), "'%s'", flexpoint_last_error());
    dev_free(d_rm);

    fx_loss_scaler sc;
    fx_loss_scaler_init(&sc, 1);
    const tensor_t *gs[1] = {g.d};
    float host_out[12];
    float *outs[1] = {host_out};
    int found = 0;
    CHECK_STATUS(fx_loss_scaler_unscale(&sc, gs, 1, outs, &found), FX_EINVAL);
    CHECK(msg_has("out[0] is host memory"), "'%s'", flexpoint_last_error());

    free_pair(x);
    free_pair(y);
    free_pair(dx);
    free_pair(lg);
    free_pair(w);
    free_pair(g);
    free_pair(gm);
    free_pair(yy);
}

/* The device's stochastic rounding (gpu_nn_math.h) is the CPU's, bit for bit. */
static void test_sr_definition(test_rng *r)
{
    int64_t diff = 0;
    for (int i = 0; i < 400000; i++) {
        uint32_t u = (uint32_t)test_rng_u64(r);
        if (i % 4 == 1) u = (u & 0x80000000u) | (uint32_t)test_rng_range(r, 0, 0x00ffffff); /* tiny */
        if (i % 4 == 2) u = (u & 0x807fffffu) | ((uint32_t)test_rng_range(r, 100, 150) << 23);
        float x;
        memcpy(&x, &u, sizeof x);
        const uint64_t bits = test_rng_u64(r);
        for (int fp16 = 0; fp16 < 2; fp16++) {
            float a = fx_sr_round(fp16 ? FMT_FP16 : FMT_BF16, x, bits);
            float b = fx_sr_round_hd(fp16, x, bits);
            diff += memcmp(&a, &b, sizeof a) != 0;
        }
    }
    CHECK(diff == 0, "fx_sr_round_hd differs from fx_sr_round in %lld cases", (long long)diff);
}

int main(void)
{
    const char *env = getenv("FX_GPU_TEST_ON_HOST");
    gpu_test_on_host = env && env[0] == '1';
    test_rng r;
    test_rng_seed(&r, 20261123);
    /* checks that need no device */
    test_sr_definition(&r);
    test_mixed_placement();
    test_memory_api();
    if (!gpu_test_on_host && flexpoint_gpu_device_count() <= 0) {
        if (fx_test_failures) return test_finish("test_gpu_nn");
        return test_skip("test_gpu_nn", "no CUDA device (or built without CUDA); set "
                         "FX_GPU_TEST_ON_HOST=1 to check the test itself on the CPU");
    }
    if (gpu_test_on_host) {
        for (int i = flexpoint_backend_count() - 1; i >= 0; i--)
            if (flexpoint_backend_available(i)) {
                g_alt_backend = flexpoint_backend_name(i);
                break;
            }
        printf("test_gpu_nn: host stand-ins, backend %s vs scalar\n", g_alt_backend);
    } else {
        printf("test_gpu_nn: device %d (%s) vs CPU scalar\n", flexpoint_gpu_device(),
               flexpoint_gpu_device_name());
    }
    test_pooling(&r);
    test_relu_backward_and_dropout(&r);
    test_mean(&r);
    test_softmax_ce(&r);
    test_batchnorm(&r);
    test_optimisers(&r);
    test_unscale(&r);
    if (!gpu_test_on_host) test_pointer_rules(&r);
    return test_finish("test_gpu_nn");
}
