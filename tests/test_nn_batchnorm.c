/* tensor_batchnorm / tensor_batchnorm_backward: the backward reference against central finite
 * differences of the forward reference, then every format and backend (training, inference,
 * backward) against the fp64 references, bit-identity across backends and thread counts, bad
 * input.
 *
 * References (fp64, written here): per channel over its M = N*H*W values, mean, biased
 * variance, invstd = 1/sqrt(var + eps), y = (x - mean) invstd gamma + beta; running statistics
 * r <- (1 - m) r + m batch with the unbiased variance; backward with xhat = (x - mean) invstd:
 * dbeta = sum dy, dgamma = sum dy xhat, dx = gamma invstd (dy - dbeta/M - xhat dgamma/M).
 * Bounds: the op widens its inputs exactly and computes in double, so both it and the
 * reference carry only double rounding errors, bounded by 2 (M + 16) u64 times the magnitudes
 * each result is built from (listed at each check); then the output rounding of nn_bound, or
 * the fp32 rounding u32 |r| of the float[C] statistics.
 * fx_batchnorm_relu (a batch norm writing the ReLU after it) against tensor_batchnorm then
 * tensor_relu, bit for bit, with the same running and saved statistics.
 */
#include "flexpoint_nn.h"
#include "nn/nn_stage.h" /* the ops' inline round-to-odd, checked against the core's */
#include "nn/nn_ops.h"   /* fx_batchnorm_relu */
#include "nn_misc_util.h"

#define MAXC 32 /* largest channel count of the cases */

typedef struct {
    int64_t N, C, S, M;
} dims;

static int64_t at(const dims *d, int64_t n, int64_t c, int64_t s)
{
    return (n * d->C + c) * d->S + s;
}

static void ref_stats(const double *x, const dims *d, int64_t c, double *mean, double *var)
{
    double s = 0;
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t k = 0; k < d->S; k++) s += x[at(d, n, c, k)];
    double mu = s / (double)d->M, q = 0;
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t k = 0; k < d->S; k++) q += (x[at(d, n, c, k)] - mu) * (x[at(d, n, c, k)] - mu);
    *mean = mu;
    *var = q / (double)d->M;
}

/* y with per-channel mean and invstd given (training: batch statistics; inference: running). */
static void ref_normalise(const double *x, const dims *d, const double *mean, const double *invstd,
                          const double *gamma, const double *beta, double *y)
{
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t c = 0; c < d->C; c++)
            for (int64_t k = 0; k < d->S; k++)
                y[at(d, n, c, k)] = (x[at(d, n, c, k)] - mean[c]) * invstd[c] * gamma[c] + beta[c];
}

static void ref_forward_train(const double *x, const dims *d, const double *gamma,
                              const double *beta, double eps, double *y, double *mean,
                              double *invstd, double *var)
{
    for (int64_t c = 0; c < d->C; c++) {
        ref_stats(x, d, c, &mean[c], &var[c]);
        invstd[c] = 1.0 / sqrt(var[c] + eps);
    }
    ref_normalise(x, d, mean, invstd, gamma, beta, y);
}

static void ref_backward(const double *dy, const double *x, const dims *d, const double *gamma,
                         const double *mean, const double *invstd, double *dx, double *dgamma,
                         double *dbeta)
{
    for (int64_t c = 0; c < d->C; c++) {
        double sdy = 0, sdyx = 0;
        for (int64_t n = 0; n < d->N; n++)
            for (int64_t k = 0; k < d->S; k++) {
                int64_t i = at(d, n, c, k);
                sdy += dy[i];
                sdyx += dy[i] * (x[i] - mean[c]) * invstd[c];
            }
        dgamma[c] = sdyx;
        dbeta[c] = sdy;
        for (int64_t n = 0; n < d->N; n++)
            for (int64_t k = 0; k < d->S; k++) {
                int64_t i = at(d, n, c, k);
                double xhat = (x[i] - mean[c]) * invstd[c];
                dx[i] = gamma[c] * invstd[c] * (dy[i] - sdy / d->M - xhat * sdyx / d->M);
            }
    }
}

/* L = sum w * y(x, gamma, beta): its gradients against central differences. */
static void fd_check_one(const dims *d, uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    const int64_t n = d->N * d->C * d->S;
    const double eps = 1e-5, h = 1e-6;
    double *x = nn_doubles(n), *w = nn_doubles(n);
    double *y = nn_doubles(n), *dx = nn_doubles(n);
    double g[8] = {0}, b[8] = {0}, mean[8], invstd[8], var[8], dg[8], db[8];
    for (int64_t i = 0; i < n; i++) {
        x[i] = 1.5 * test_rng_normal(&r) + 0.5;
        w[i] = test_rng_normal(&r);
    }
    for (int64_t c = 0; c < d->C; c++) {
        g[c] = 1 + 0.5 * test_rng_normal(&r);
        b[c] = test_rng_normal(&r);
    }
    ref_forward_train(x, d, g, b, eps, y, mean, invstd, var);
    ref_backward(w, x, d, g, mean, invstd, dx, dg, db);
    /* loss at a perturbed point */
#define LOSS(out)                                                                              \
    do {                                                                                       \
        ref_forward_train(x, d, g, b, eps, y, mean, invstd, var);                              \
        out = 0;                                                                               \
        for (int64_t t = 0; t < n; t++) out += w[t] * y[t];                                    \
    } while (0)
    double lp, lm;
    for (int64_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        LOSS(lp);
        x[i] = keep - h;
        LOSS(lm);
        x[i] = keep;
        double fd = (lp - lm) / (2 * h);
        CHECK(fabs(fd - dx[i]) <= 1e-7 * (1 + fabs(dx[i])), "fd batchnorm dx[%lld]: fd=%.12g "
              "analytic=%.12g", (long long)i, fd, dx[i]);
    }
    for (int64_t c = 0; c < d->C; c++) {
        double keep = g[c];
        g[c] = keep + h;
        LOSS(lp);
        g[c] = keep - h;
        LOSS(lm);
        g[c] = keep;
        double fd = (lp - lm) / (2 * h);
        CHECK(fabs(fd - dg[c]) <= 1e-7 * (1 + fabs(dg[c])), "fd batchnorm dgamma[%lld]: fd=%.12g "
              "analytic=%.12g", (long long)c, fd, dg[c]);
        keep = b[c];
        b[c] = keep + h;
        LOSS(lp);
        b[c] = keep - h;
        LOSS(lm);
        b[c] = keep;
        fd = (lp - lm) / (2 * h);
        CHECK(fabs(fd - db[c]) <= 1e-7 * (1 + fabs(db[c])), "fd batchnorm dbeta[%lld]: fd=%.12g "
              "analytic=%.12g", (long long)c, fd, db[c]);
    }
#undef LOSS
    free(x);
    free(w);
    free(y);
    free(dx);
}

static void fd_check(void)
{
    dims d4 = {3, 2, 4, 12}, d2 = {5, 3, 1, 5};
    fd_check_one(&d4, 31);
    fd_check_one(&d2, 32);
}

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
} bn_case;

static const bn_case CASES[] = {
    {"2x3", 2, {2, 3}},           {"5x4", 2, {5, 4}},          {"33x17", 2, {33, 17}},
    {"2x3x4x5", 4, {2, 3, 4, 5}}, {"4x8x3x3", 4, {4, 8, 3, 3}}, {"1x2x5x5", 4, {1, 2, 5, 5}},
    {"8x16x16x16 (threaded)", 4, {8, 16, 16, 16}},
};

static dims dims_of(const bn_case *c)
{
    dims d = {c->shape[0], c->shape[1], c->ndim == 4 ? c->shape[2] * c->shape[3] : 1, 0};
    d.M = d.N * d.S;
    return d;
}

/* Every output of one format combination: fin (x, dy, gamma, beta), fout (y, dx, dgamma,
 * dbeta). */
typedef struct {
    tensor_t *y, *yi, *dx, *dg, *db;
    float rm[MAXC], rv[MAXC], sm[MAXC], si[MAXC];
} bn_outputs;

static void bn_run(const bn_case *c, const dims *d, fmt_t fout, tensor_t *tx, tensor_t *tdy,
                   tensor_t *tg, tensor_t *tb, const float *rm0, const float *rv0,
                   const float *sm_in, const float *si_in, bn_outputs *o)
{
    int64_t cs[1] = {d->C};
    o->y = nn_zeros(fout, c->ndim, c->shape);
    o->yi = nn_zeros(fout, c->ndim, c->shape);
    o->dx = nn_zeros(fout, c->ndim, c->shape);
    o->dg = nn_zeros(fout, 1, cs);
    o->db = nn_zeros(fout, 1, cs);
    memcpy(o->rm, rm0, sizeof(float) * (size_t)d->C);
    memcpy(o->rv, rv0, sizeof(float) * (size_t)d->C);
    CHECK_STATUS(tensor_batchnorm(o->y, tx, tg, tb, o->rm, o->rv, o->sm, o->si, 0.1, 1e-5, 1),
                 FX_OK);
    float rmi[MAXC], rvi[MAXC];
    memcpy(rmi, rm0, sizeof(float) * (size_t)d->C);
    memcpy(rvi, rv0, sizeof(float) * (size_t)d->C);
    CHECK_STATUS(tensor_batchnorm(o->yi, tx, tg, tb, rmi, rvi, NULL, NULL, 0.1, 1e-5, 0), FX_OK);
    CHECK(memcmp(rmi, rm0, sizeof(float) * (size_t)d->C) == 0, "inference changed running_mean");
    CHECK_STATUS(tensor_batchnorm_backward(o->dx, o->dg, o->db, tdy, tx, tg, sm_in, si_in), FX_OK);
}

static void bn_free(bn_outputs *o)
{
    tensor_free(o->y);
    tensor_free(o->yi);
    tensor_free(o->dx);
    tensor_free(o->dg);
    tensor_free(o->db);
}

static int bn_same(const bn_outputs *a, const bn_outputs *b, int64_t C)
{
    size_t cb = sizeof(float) * (size_t)C;
    return nn_same_bits(a->y, b->y) && nn_same_bits(a->yi, b->yi) && nn_same_bits(a->dx, b->dx) &&
           nn_same_bits(a->dg, b->dg) && nn_same_bits(a->db, b->db) && !memcmp(a->rm, b->rm, cb) &&
           !memcmp(a->rv, b->rv, cb) && !memcmp(a->sm, b->sm, cb) && !memcmp(a->si, b->si, cb);
}

/* A float[C] statistic against its reference: one fp32 rounding after double errors acc. */
static void check_stat(const char *what, const char *name, const float *got, const double *ref,
                       const double *acc, int64_t C)
{
    for (int64_t c = 0; c < C; c++) {
        double b = acc[c] + NN_U32 * (fabs(ref[c]) + acc[c]);
        CHECK(fabs(got[c] - ref[c]) <= b, "%s: %s[%lld] = %.9g, reference %.12g, bound %.3g", what,
              name, (long long)c, got[c], ref[c], b);
    }
}

static void run_case(const bn_case *c, fmt_t fin, fmt_t fparam, fmt_t fout, const char **bk,
                     int nbk, int threads_check)
{
    test_rng r;
    test_rng_seed(&r, 700 + (uint64_t)(c - CASES) * 17 + (uint64_t)fin * 3 + (uint64_t)fparam);
    const dims d = dims_of(c);
    const int64_t n = d.N * d.C * d.S, C = d.C;
    const double M = (double)d.M, eps = 1e-5, mom = 0.1;
    int64_t cs[1] = {C};
    double *x = nn_doubles(n), *dy = nn_doubles(n);
    double *y = nn_doubles(n), *yacc = nn_doubles(n);
    double *dx = nn_doubles(n), *dxacc = nn_doubles(n);
    double g[MAXC], b[MAXC], mean[MAXC], invstd[MAXC], var[MAXC];
    double dg[MAXC], db[MAXC], dgacc[MAXC], dbacc[MAXC];
    for (int64_t k = 0; k < n; k++) {
        int64_t ch = (k / d.S) % C;
        x[k] = 0.5 * (double)ch - 1.0 + (1.0 + 0.25 * (double)ch) * test_rng_normal(&r);
        dy[k] = 0.1 * test_rng_normal(&r);
    }
    for (int64_t k = 0; k < C; k++) {
        g[k] = 1.0 + 0.3 * test_rng_normal(&r);
        b[k] = 0.5 * test_rng_normal(&r);
    }
    tensor_t *tx = nn_tensor(fin, c->ndim, c->shape, x);
    tensor_t *tdy = nn_tensor(fin, c->ndim, c->shape, dy);
    tensor_t *tg = nn_tensor(fparam, 1, cs, g), *tb = nn_tensor(fparam, 1, cs, b);
    const double kk = 2.0 * (M + 16.0) * NN_U64;

    /* training forward */
    ref_forward_train(x, &d, g, b, eps, y, mean, invstd, var);
    double macc[MAXC], iacc[MAXC], rmref[MAXC], rvref[MAXC], rmacc[MAXC], rvacc[MAXC];
    double sabs[MAXC];
    float rm0[MAXC], rv0[MAXC];
    for (int64_t k = 0; k < C; k++) {
        sabs[k] = 0;
        rm0[k] = 0.1f * (float)k;
        rv0[k] = 1.0f + 0.05f * (float)k;
    }
    for (int64_t k = 0; k < n; k++) sabs[(k / d.S) % C] += fabs(x[k]);
    for (int64_t k = 0; k < C; k++) {
        macc[k] = kk * sabs[k] / M;
        iacc[k] = 2 * kk * invstd[k];
        rmref[k] = (1 - mom) * rm0[k] + mom * mean[k];
        rvref[k] = (1 - mom) * rv0[k] + mom * var[k] * M / (M - 1);
        rmacc[k] = mom * macc[k] + 4 * NN_U64 * fabs(rmref[k]);
        rvacc[k] = kk * rvref[k] + 4 * NN_U64 * fabs(rvref[k]);
    }
    for (int64_t k = 0; k < n; k++) {
        int64_t ch = (k / d.S) % C;
        double a = fabs(invstd[ch] * g[ch]);
        yacc[k] = kk * (fabs(x[k] - mean[ch]) * a + fabs(mean[ch]) * a + fabs(b[ch]));
    }
    /* inference with the initial running statistics */
    double *yi = nn_doubles(n), *yiacc = nn_doubles(n);
    double rmd[MAXC], risd[MAXC];
    for (int64_t k = 0; k < C; k++) {
        rmd[k] = rm0[k];
        risd[k] = 1.0 / sqrt((double)rv0[k] + eps);
    }
    ref_normalise(x, &d, rmd, risd, g, b, yi);
    for (int64_t k = 0; k < n; k++) {
        int64_t ch = (k / d.S) % C;
        double a = fabs(risd[ch] * g[ch]);
        yiacc[k] = 8 * NN_U64 * (fabs(x[k] - rmd[ch]) * a + fabs(rmd[ch]) * a + fabs(b[ch]));
    }
    /* backward, from the batch statistics rounded to fp32 as the caller would keep them */
    float sm_in[MAXC], si_in[MAXC];
    double smd[MAXC], sid[MAXC], sdy[MAXC] = {0}, sdyx[MAXC] = {0};
    for (int64_t k = 0; k < C; k++) {
        sm_in[k] = (float)mean[k];
        si_in[k] = (float)invstd[k];
        smd[k] = sm_in[k];
        sid[k] = si_in[k];
    }
    ref_backward(dy, x, &d, g, smd, sid, dx, dg, db);
    for (int64_t k = 0; k < n; k++) {
        int64_t ch = (k / d.S) % C;
        sdy[ch] += fabs(dy[k]);
        sdyx[ch] += fabs(dy[k] * (x[k] - smd[ch]) * sid[ch]);
    }
    for (int64_t k = 0; k < n; k++) {
        int64_t ch = (k / d.S) % C;
        double xh = fabs((x[k] - smd[ch]) * sid[ch]);
        dxacc[k] = kk * fabs(g[ch] * sid[ch]) * (fabs(dy[k]) + sdy[ch] / M + xh * sdyx[ch] / M);
    }
    for (int64_t k = 0; k < C; k++) {
        dgacc[k] = kk * sdyx[k];
        dbacc[k] = kk * sdy[k];
    }

    char what[200];
    bn_outputs first;
    for (int bi = 0; bi < nbk; bi++) {
        CHECK_STATUS(flexpoint_set_backend(bk[bi]), FX_OK);
        bn_outputs o;
        bn_run(c, &d, fout, tx, tdy, tg, tb, rm0, rv0, sm_in, si_in, &o);
        snprintf(what, sizeof what, "batchnorm %s x=%s params=%s out=%s %s", c->name,
                 fmt_name(fin), fmt_name(fparam), fmt_name(fout), bk[bi]);
        nn_check(what, o.y, y, yacc, n);
        check_stat(what, "save_mean", o.sm, mean, macc, C);
        check_stat(what, "save_invstd", o.si, invstd, iacc, C);
        check_stat(what, "running_mean", o.rm, rmref, rmacc, C);
        check_stat(what, "running_var", o.rv, rvref, rvacc, C);
        snprintf(what, sizeof what, "batchnorm inference %s x=%s params=%s out=%s %s", c->name,
                 fmt_name(fin), fmt_name(fparam), fmt_name(fout), bk[bi]);
        nn_check(what, o.yi, yi, yiacc, n);
        snprintf(what, sizeof what, "batchnorm_backward %s x=%s params=%s out=%s %s", c->name,
                 fmt_name(fin), fmt_name(fparam), fmt_name(fout), bk[bi]);
        nn_check(what, o.dx, dx, dxacc, n);
        nn_check(what, o.dg, dg, dgacc, C);
        nn_check(what, o.db, db, dbacc, C);
        if (bi == 0) {
            first = o;
        } else {
            CHECK(bn_same(&first, &o, C), "%s: bits differ from backend %s", what, bk[0]);
            bn_free(&o);
        }
    }
    if (threads_check) {
        bn_outputs o1, o3;
        int prev = flexpoint_set_num_threads(1);
        bn_run(c, &d, fout, tx, tdy, tg, tb, rm0, rv0, sm_in, si_in, &o1);
        flexpoint_set_num_threads(3);
        bn_run(c, &d, fout, tx, tdy, tg, tb, rm0, rv0, sm_in, si_in, &o3);
        flexpoint_set_num_threads(prev);
        CHECK(bn_same(&o1, &o3, C) && bn_same(&o1, &first, C),
              "batchnorm %s %s: results depend on the thread count", c->name, fmt_name(fout));
        bn_free(&o1);
        bn_free(&o3);
    }
    bn_free(&first);
    tensor_free(tx);
    tensor_free(tdy);
    tensor_free(tg);
    tensor_free(tb);
    free(x);
    free(dy);
    free(y);
    free(yacc);
    free(dx);
    free(dxacc);
    free(yi);
    free(yiacc);
}

/* Optional arguments: no running statistics in training, no saved statistics, no dgamma/dbeta;
 * in-place y = x. */
static void optional_args(void)
{
    int64_t sh[2] = {6, 3}, cs[1] = {3};
    test_rng r;
    test_rng_seed(&r, 3);
    double x[18], g[3] = {1, 2, 0.5}, b[3] = {0, 1, -1}, dy[18];
    for (int i = 0; i < 18; i++) {
        x[i] = test_rng_normal(&r);
        dy[i] = test_rng_normal(&r);
    }
    tensor_t *tx = nn_tensor(FMT_FP32, 2, sh, x), *tg = nn_tensor(FMT_FP32, 1, cs, g);
    tensor_t *tb = nn_tensor(FMT_FP32, 1, cs, b), *tdy = nn_tensor(FMT_FP32, 2, sh, dy);
    tensor_t *y1 = nn_zeros(FMT_FP32, 2, sh), *y2 = nn_zeros(FMT_FP32, 2, sh);
    float rm[3] = {0, 0, 0}, rv[3] = {1, 1, 1}, sm[3], si[3];
    CHECK_STATUS(tensor_batchnorm(y1, tx, tg, tb, rm, rv, sm, si, 0.1, 1e-5, 1), FX_OK);
    CHECK_STATUS(tensor_batchnorm(y2, tx, tg, tb, NULL, NULL, NULL, NULL, 0.1, 1e-5, 1), FX_OK);
    CHECK(nn_same_bits(y1, y2), "training without running/saved statistics gives another y");
    tensor_t *dx1 = nn_zeros(FMT_FP32, 2, sh), *dx2 = nn_zeros(FMT_FP32, 2, sh);
    tensor_t *dg = nn_zeros(FMT_FP32, 1, cs), *db = nn_zeros(FMT_FP32, 1, cs);
    CHECK_STATUS(tensor_batchnorm_backward(dx1, dg, db, tdy, tx, tg, sm, si), FX_OK);
    CHECK_STATUS(tensor_batchnorm_backward(dx2, NULL, NULL, tdy, tx, tg, sm, si), FX_OK);
    CHECK(nn_same_bits(dx1, dx2), "backward without dgamma/dbeta gives another dx");
    /* in place: y is x */
    CHECK_STATUS(tensor_batchnorm(tx, tx, tg, tb, NULL, NULL, NULL, NULL, 0.1, 1e-5, 1), FX_OK);
    CHECK(nn_same_bits(tx, y1), "in-place batchnorm differs");
    /* inference on an empty batch is a no-op that succeeds */
    int64_t s0[2] = {0, 3};
    tensor_t *e = nn_zeros(FMT_FP32, 2, s0), *ey = nn_zeros(FMT_DFP16, 2, s0);
    CHECK_STATUS(tensor_batchnorm(ey, e, tg, tb, rm, rv, NULL, NULL, 0.1, 1e-5, 0), FX_OK);
    tensor_free(e);
    tensor_free(ey);
    tensor_free(tx);
    tensor_free(tg);
    tensor_free(tb);
    tensor_free(tdy);
    tensor_free(y1);
    tensor_free(y2);
    tensor_free(dx1);
    tensor_free(dx2);
    tensor_free(dg);
    tensor_free(db);
}

static void bad_input(void)
{
    int64_t s[4] = {2, 3, 2, 2}, s3d[3] = {2, 3, 4}, c3[1] = {3}, c4[1] = {4}, s13[2] = {1, 3};
    int64_t s03[2] = {0, 3}, ys[4] = {2, 3, 2, 1};
    tensor_t *x = nn_zeros(FMT_FP16, 4, s), *y = nn_zeros(FMT_FP32, 4, s);
    tensor_t *x3 = nn_zeros(FMT_FP32, 3, s3d), *yb = nn_zeros(FMT_FP32, 4, ys);
    tensor_t *g = nn_zeros(FMT_FP32, 1, c3), *b = nn_zeros(FMT_DFP16, 1, c3);
    tensor_t *g4 = nn_zeros(FMT_FP32, 1, c4), *x1 = nn_zeros(FMT_FP32, 2, s13);
    tensor_t *y1 = nn_zeros(FMT_FP32, 2, s13), *x0 = nn_zeros(FMT_FP32, 2, s03);
    tensor_t *y0 = nn_zeros(FMT_FP32, 2, s03);
    float rm[4] = {1, 2, 3, 4}, rv[4] = {5, 6, 7, 8}, sm[4] = {0}, si[4] = {1, 1, 1, 1};
    float rm0[4], rv0[4];
    memcpy(rm0, rm, sizeof rm);
    memcpy(rv0, rv, sizeof rv);
    float ybefore[24], yafter[24];
    for (int i = 0; i < 24; i++) ybefore[i] = (float)i;
    CHECK_STATUS(tensor_from_f32(y, ybefore), FX_OK);
    const char *fn = "tensor_batchnorm";
    CHECK_STATUS(tensor_batchnorm(NULL, x, g, b, rm, rv, sm, si, 0.1, 1e-5, 1), FX_EINVAL);
    nn_check_message(fn);
    CHECK_STATUS(tensor_batchnorm(y, NULL, g, b, rm, rv, sm, si, 0.1, 1e-5, 1), FX_EINVAL);
    CHECK_STATUS(tensor_batchnorm(y, x, NULL, b, rm, rv, sm, si, 0.1, 1e-5, 1), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), "gamma") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_batchnorm(y, x, g, NULL, rm, rv, sm, si, 0.1, 1e-5, 1), FX_EINVAL);
    CHECK_STATUS(tensor_batchnorm(y, x3, g, b, rm, rv, sm, si, 0.1, 1e-5, 1), FX_ESHAPE);
    nn_check_message(fn);
    CHECK_STATUS(tensor_batchnorm(yb, x, g, b, rm, rv, sm, si, 0.1, 1e-5, 1), FX_ESHAPE);
    CHECK_STATUS(tensor_batchnorm(y, x, g4, b, rm, rv, sm, si, 0.1, 1e-5, 1), FX_ESHAPE);
    CHECK(strstr(flexpoint_last_error(), "C=3") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_batchnorm(y, x, g, b, rm, rv, sm, si, 0.1, -1e-5, 1), FX_EINVAL);
    CHECK_STATUS(tensor_batchnorm(y, x, g, b, rm, rv, sm, si, 0.1, NAN, 1), FX_EINVAL);
    CHECK_STATUS(tensor_batchnorm(y, x, g, b, rm, rv, sm, si, 1.5, 1e-5, 1), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), "momentum") != NULL, "message: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_batchnorm(y, x, g, b, NULL, rv, sm, si, 0.1, 1e-5, 1), FX_EINVAL);
    CHECK_STATUS(tensor_batchnorm(y, x, g, b, NULL, NULL, sm, si, 0.1, 1e-5, 0), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), "running") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_batchnorm(y1, x1, g, b, rm, rv, sm, si, 0.1, 1e-5, 1), FX_ESHAPE);
    CHECK(strstr(flexpoint_last_error(), "more than one value") != NULL, "message: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_batchnorm(y0, x0, g, b, rm, rv, sm, si, 0.1, 1e-5, 1), FX_ESHAPE);
    /* nothing written by the failing calls */
    CHECK_STATUS(tensor_to_f32(y, yafter), FX_OK);
    CHECK(memcmp(ybefore, yafter, sizeof ybefore) == 0, "y changed by a failing call");
    CHECK(memcmp(rm, rm0, sizeof rm) == 0 && memcmp(rv, rv0, sizeof rv) == 0,
          "running statistics changed by a failing call");
    CHECK(sm[0] == 0 && si[0] == 1, "saved statistics changed by a failing call");

    const char *fb = "tensor_batchnorm_backward";
    tensor_t *dx = nn_zeros(FMT_FP32, 4, s), *dg = nn_zeros(FMT_FP32, 1, c3);
    tensor_t *dg4 = nn_zeros(FMT_FP32, 1, c4);
    CHECK_STATUS(tensor_batchnorm_backward(NULL, dg, NULL, x, x, g, sm, si), FX_EINVAL);
    nn_check_message(fb);
    CHECK_STATUS(tensor_batchnorm_backward(dx, dg, NULL, NULL, x, g, sm, si), FX_EINVAL);
    CHECK_STATUS(tensor_batchnorm_backward(dx, dg, NULL, x, x, g, NULL, si), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), "save_mean") != NULL, "message: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_batchnorm_backward(dx, dg, NULL, x, x, g, sm, NULL), FX_EINVAL);
    CHECK_STATUS(tensor_batchnorm_backward(dx, dg4, NULL, x, x, g, sm, si), FX_ESHAPE);
    nn_check_message(fb);
    CHECK_STATUS(tensor_batchnorm_backward(dx, NULL, dg4, x, x, g, sm, si), FX_ESHAPE);
    CHECK_STATUS(tensor_batchnorm_backward(dx, dg, NULL, yb, x, g, sm, si), FX_ESHAPE);
    CHECK_STATUS(tensor_batchnorm_backward(yb, dg, NULL, x, x, g, sm, si), FX_ESHAPE);
    CHECK_STATUS(tensor_batchnorm_backward(dx, dg, NULL, x, x, g4, sm, si), FX_ESHAPE);
    CHECK_STATUS(tensor_batchnorm_backward(y1, NULL, NULL, x1, x1, g, sm, si), FX_ESHAPE);
    CHECK_STATUS(tensor_batchnorm_backward(y0, NULL, NULL, x0, x0, g, sm, si), FX_ESHAPE);
    tensor_t *all[] = {x, y, x3, yb, g, b, g4, x1, y1, x0, y0, dx, dg, dg4};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tensor_free(all[i]);
}

/* The inline round-to-odd of the ops' stages equals the core's definition, bit for bit. */
static void stage_rounding(void)
{
    test_rng r;
    test_rng_seed(&r, 99);
    int bad = 0;
    for (int i = 0; i < 400000; i++) {
        double d;
        uint64_t u = test_rng_u64(&r);
        switch (i % 4) {
        case 0: memcpy(&d, &u, sizeof d); break; /* any bit pattern: every exponent, NaN, Inf */
        case 1: d = ldexp(test_rng_normal(&r), (int)(u % 300) - 160); break; /* fp32 range edges */
        case 2: { /* a float, or a float plus a half or a tiny part of its ulp */
            float f = (float)ldexp(test_rng_normal(&r), (int)(u % 280) - 150);
            double ulp = ldexp(1.0, ilogb(f == 0 ? 1e-45f : f) - 23);
            d = (double)f + (double)((int)(u >> 60) - 8) * ulp / 16.0;
            break;
        }
        default: d = (u & 1 ? -1.0 : 1.0) * ldexp(1.0 + (double)(u >> 40) * 0x1.0p-24, 128); break;
        }
        float a = nn_f64_to_f32_odd(d), b = fx_f64_to_f32_round_odd(d);
        uint32_t ua, ub;
        memcpy(&ua, &a, 4);
        memcpy(&ub, &b, 4);
        if (ua != ub && !(isnan(a) && isnan(b)) && bad++ < 3)
            CHECK(0, "round-to-odd of %a: inline %a, core %a", d, (double)a, (double)b);
    }
    CHECK(bad == 0, "%d round-to-odd mismatches", bad);
}

/* fx_batchnorm_relu against tensor_batchnorm then tensor_relu into y's format: the same bits
 * and statistics, for fp32, fp16 and bf16 outputs from inputs of the same format or another,
 * training and inference, inputs with NaN, Inf and huge values in some channels, a whole output
 * and a view (the stage route), at 1 and 2 threads; declined (nothing written) for a
 * shared-exponent output and with the switch off. */
static void bn_relu(void)
{
    test_rng r;
    test_rng_seed(&r, 4242);
    const int64_t shape[4] = {6, 5, 9, 11}, C = 5, n = 6 * 5 * 9 * 11;
    static const fmt_t outs[3] = {FMT_FP32, FMT_FP16, FMT_BF16};
    double *xv = nn_doubles(n), gv[5], bv[5];
    for (int64_t i = 0; i < n; i++) xv[i] = 3.0 * test_rng_normal(&r) + 0.5;
    xv[7] = NAN;                       /* channel 0 */
    xv[2 * 99 + 5] = INFINITY;         /* channel 2 */
    for (int64_t i = 0; i < 99; i++) xv[3 * 99 + i] *= 1e30; /* channel 3 of image 0: huge */
    for (int c = 0; c < 5; c++) {
        gv[c] = c == 4 ? -1.5 : 0.5 + 0.25 * c; /* a negative gamma flips signs */
        bv[c] = 0.1 * (c - 2);
    }
    const int64_t cs[1] = {C};
    int checked = 0;
    for (int oi = 0; oi < 3; oi++)
        for (int xi = 0; xi < 2; xi++)
            for (int training = 0; training <= 1; training++)
                for (int view = 0; view <= 1; view++)
                    for (int threads = 1; threads <= 2; threads++) {
                        const fmt_t fy = outs[oi], fx = xi ? FMT_FP32 : fy;
                        const int prev = flexpoint_set_num_threads(threads);
                        tensor_t *x = nn_tensor(fx, 4, shape, xv);
                        tensor_t *g = nn_tensor(FMT_FP32, 1, cs, gv), *b = nn_tensor(FMT_FP32, 1, cs, bv);
                        const int64_t wide[4] = {6, 5, 9, 22};
                        tensor_t *base = view ? nn_zeros(fy, 4, wide) : NULL;
                        tensor_t *y = view ? tensor_view_slice(base, 3, 0, 22, 2) : nn_zeros(fy, 4, shape);
                        tensor_t *u = nn_zeros(fy, 4, shape), *want = nn_zeros(fy, 4, shape);
                        float rm[2][5], rv[2][5], sm[2][5], si[2][5];
                        for (int k = 0; k < 2; k++)
                            for (int c = 0; c < 5; c++) {
                                rm[k][c] = 0.1f * (float)c;
                                rv[k][c] = 1.0f + 0.5f * (float)c;
                            }
                        CHECK_STATUS(tensor_batchnorm(u, x, g, b, rm[0], rv[0], sm[0], si[0], 0.1,
                                                      1e-5, training), FX_OK);
                        CHECK_STATUS(tensor_relu(want, u), FX_OK);
                        CHECK_STATUS(fx_batchnorm_relu(y, x, g, b, rm[1], rv[1], sm[1], si[1],
                                                       0.1, 1e-5, training), FX_OK);
                        tensor_t *yc = nn_zeros(fy, 4, shape);
                        CHECK_STATUS(tensor_copy(yc, y), FX_OK);
                        CHECK(nn_same_bits(yc, want), "bn+relu %s from %s training %d view %d, %d "
                              "threads: bits differ from batchnorm then relu", fmt_name(fy),
                              fmt_name(fx), training, view, threads);
                        CHECK(memcmp(rm[0], rm[1], sizeof rm[0]) == 0 &&
                                  memcmp(rv[0], rv[1], sizeof rv[0]) == 0 &&
                                  (!training || (memcmp(sm[0], sm[1], sizeof sm[0]) == 0 &&
                                                 memcmp(si[0], si[1], sizeof si[0]) == 0)),
                              "bn+relu %s training %d: statistics differ", fmt_name(fy), training);
                        checked++;
                        flexpoint_set_num_threads(prev);
                        tensor_free(yc);
                        tensor_free(y);
                        tensor_free(base);
                        tensor_free(u);
                        tensor_free(want);
                        tensor_free(x);
                        tensor_free(g);
                        tensor_free(b);
                    }
    CHECK(checked == 48, "%d bn+relu combinations checked", checked);
    /* declined, nothing written */
    tensor_t *x = nn_tensor(FMT_FP32, 4, shape, xv), *g = nn_tensor(FMT_FP32, 1, cs, gv);
    tensor_t *b = nn_tensor(FMT_FP32, 1, cs, bv);
    tensor_t *ys = nn_zeros(FMT_DFP16, 4, shape), *yf = nn_zeros(FMT_BF16, 4, shape);
    float rm[5] = {0}, rv[5] = {1, 1, 1, 1, 1};
    CHECK(fx_batchnorm_relu(ys, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1) == FX_BN_RELU_NOT_TAKEN,
          "bn+relu took a DFP16 output");
    fx_bn_relu_set_enabled(0);
    CHECK(fx_batchnorm_relu(yf, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1) == FX_BN_RELU_NOT_TAKEN,
          "bn+relu ran with its switch off");
    fx_bn_relu_set_enabled(1);
    double got[6 * 5 * 9 * 11];
    nn_read(yf, got);
    int64_t nz = 0;
    for (int64_t i = 0; i < n; i++) nz += got[i] != 0.0;
    CHECK(nz == 0 && rm[0] == 0.0f, "a declined bn+relu wrote its output or statistics");
    /* bad input gets tensor_batchnorm's status */
    CHECK_STATUS(fx_batchnorm_relu(yf, x, g, b, rm, rv, NULL, NULL, 2.0, 1e-5, 1), FX_EINVAL);
    tensor_free(x);
    tensor_free(g);
    tensor_free(b);
    tensor_free(ys);
    tensor_free(yf);
    free(xv);
}

int main(void)
{
    stage_rounding();
    bn_relu();
    fd_check();
    const char *bk[8];
    int nbk = nn_backends(bk, 8);
    const int ncases = (int)(sizeof CASES / sizeof *CASES);
    for (int ci = 0; ci < ncases; ci++) {
        int big = CASES[ci].shape[0] >= 8;
        for (int k = 0; k < FMT_COUNT; k++) {
            fmt_t f = NN_FORMATS[k];
            run_case(&CASES[ci], f, f, f, bk, nbk, big);
            if (big) continue;
            /* parameters in another format; outputs in another format */
            run_case(&CASES[ci], f, f == FMT_FP32 ? FMT_DFP16 : FMT_FP32, f, bk, nbk, 0);
            run_case(&CASES[ci], f, f, fmt_is_shared_exponent(f) ? FMT_BF16 : FMT_FLEX16_5, bk,
                     nbk, 0);
        }
    }
    printf("batchnorm: %d cases x %d formats (+ mixed) on %d backends\n", ncases, FMT_COUNT, nbk);
    optional_args();
    bad_input();
    return test_finish("test_nn_batchnorm");
}
