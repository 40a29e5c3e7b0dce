/* tensor_layernorm and tensor_layernorm_backward: the fp64 reference gradients against central
 * finite differences, the library's fp32 backward against finite differences of its forward,
 * every format x backend against the references, bit-identity across backends and thread
 * counts, special values, bad input.
 *
 * References (fp64, two-pass, on the values as stored): mean, biased variance, rstd =
 * 1/sqrt(var + eps), y = xhat gamma + beta; dx = rstd (g - mean g - xhat mean(g xhat)) with
 * g = dy gamma; dgamma = sum dy xhat; dbeta = sum dy. Bounds: the op computes in fp32 from
 * exact inputs (u = u32 = 2^-24). The fp32 mean is off by at most (D + 1) u max|x|; x - mean is
 * rounded once; the fp32 sum of squares has relative error (D + 2) u and 1/sqrtf adds about
 * 2u, half of which survives the square root; so each xhat has an absolute error of at most
 * T rstd (max|x| + |mean|) plus T |xhat|, T = (2D + 32) u, about twice the sum of those terms.
 * The per-element bounds are accumulated in ref_layernorm from that xhat error and T times the
 * magnitudes of each sum; dgamma/dbeta get (2R + 32) u64 of their absolute sums, then the fp32
 * rounding; every tensor output then gets the output rounding of nn_bound.
 */
#include "flexpoint_nn.h"
#include "nn_misc_util.h"

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[3];
    double scale, offset, eps;
    int affine;
} ln_case;

static const ln_case CASES[] = {
    {"[1,1]", 2, {1, 1}, 1.0, 0.0, 1e-5, 1},
    {"[4,16]", 2, {4, 16}, 2.0, 0.5, 1e-5, 1},
    {"[3,5,7] no affine", 3, {3, 5, 7}, 3.0, -1.0, 1e-3, 0},
    {"[2,3,64]", 3, {2, 3, 64}, 0.5, 4.0, 1e-5, 1},
    {"[256,130] (threaded)", 2, {256, 130}, 2.0, 1.0, 1e-5, 1},
};

/* forward and backward references; acc_y / acc_dx / acc_p the bounds */
static void ref_layernorm(const double *x, const double *dy, const double *gamma,
                          const double *beta, int64_t R, int64_t D, double eps, double *y,
                          double *dx, double *dg, double *db, double *acc_y, double *acc_dx,
                          double *acc_p)
{
    const double T = (2.0 * (double)D + 32.0) * NN_U32;
    for (int64_t k = 0; k < D; k++) dg[k] = db[k] = acc_p[k] = acc_p[D + k] = 0;
    for (int64_t r = 0; r < R; r++) {
        const double *xr = x + r * D, *gr = dy + r * D;
        double s = 0, q = 0, xm = 0;
        for (int64_t k = 0; k < D; k++) s += xr[k];
        const double mu = s / (double)D;
        for (int64_t k = 0; k < D; k++) {
            q += (xr[k] - mu) * (xr[k] - mu);
            xm = fmax(xm, fabs(xr[k]));
        }
        const double is = 1.0 / sqrt(q / (double)D + eps);
        const double ex = T * is * (xm + fabs(mu)); /* error of each xhat, absolute */
        double a = 0, b = 0, aa = 0, ba = 0;
        for (int64_t k = 0; k < D; k++) {
            const double xh = (xr[k] - mu) * is, g = gr[k] * gamma[k];
            a += g;
            b += g * xh;
            aa += fabs(g);
            ba += fabs(g * xh);
        }
        a /= (double)D;
        b /= (double)D;
        aa /= (double)D;
        ba /= (double)D;
        for (int64_t k = 0; k < D; k++) {
            const double xh = (xr[k] - mu) * is, g = gr[k] * gamma[k];
            y[r * D + k] = xh * gamma[k] + beta[k];
            acc_y[r * D + k] = (ex + T * fabs(xh)) * fabs(gamma[k]) + 4 * NN_U32 * fabs(beta[k]);
            dx[r * D + k] = is * (g - a - xh * b);
            acc_dx[r * D + k] =
                T * is * (fabs(g) + aa + fabs(xh) * ba) +
                is * (ex * ba + (fabs(xh) + ex) * ex * aa);
            dg[k] += gr[k] * xh;
            db[k] += gr[k];
            acc_p[k] += fabs(gr[k]) * (fabs(xh) + ex);
            acc_p[D + k] += fabs(gr[k]);
        }
    }
    const double TR = (2.0 * (double)R + 32.0) * NN_U32; /* fp32 sums over R rows */
    for (int64_t k = 0; k < D; k++) {
        acc_p[k] *= 1 + TR;
        acc_p[D + k] *= TR;
    }
}

/* The reference's gradients against central differences of L = sum w y. */
static void fd_reference(void)
{
    test_rng r;
    test_rng_seed(&r, 31);
    enum { R = 3, D = 5, N = R * D };
    double x[N], w[N], g[D], be[D], y[N], dx[N], dg[D], db[D], ay[N], ad[N], ap[2 * D];
    double yp[N], ym[N], t1[N], t3[D], t4[D], t5[N], t6[N], t7[2 * D];
    for (int i = 0; i < N; i++) {
        x[i] = 2 * test_rng_normal(&r);
        w[i] = test_rng_normal(&r);
    }
    for (int k = 0; k < D; k++) {
        g[k] = 1 + 0.5 * test_rng_normal(&r);
        be[k] = test_rng_normal(&r);
    }
    const double eps = 1e-3, h = 1e-6;
    ref_layernorm(x, w, g, be, R, D, eps, y, dx, dg, db, ay, ad, ap);
    for (int i = 0; i < N; i++) {
        double keep = x[i], lp = 0, lm = 0;
        x[i] = keep + h;
        ref_layernorm(x, w, g, be, R, D, eps, yp, t1, t3, t4, t5, t6, t7);
        x[i] = keep - h;
        ref_layernorm(x, w, g, be, R, D, eps, ym, t1, t3, t4, t5, t6, t7);
        x[i] = keep;
        for (int j = 0; j < N; j++) {
            lp += w[j] * yp[j];
            lm += w[j] * ym[j];
        }
        double fd = (lp - lm) / (2 * h);
        CHECK(fabs(fd - dx[i]) <= 1e-7 * (1 + fabs(dx[i])),
              "fd layernorm dx[%d]: fd=%.12g an=%.12g", i, fd, dx[i]);
    }
    for (int k = 0; k < D; k++)
        for (int which = 0; which < 2; which++) {
            double *p = which ? be : g, keep = p[k], lp = 0, lm = 0;
            p[k] = keep + h;
            ref_layernorm(x, w, g, be, R, D, eps, yp, t1, t3, t4, t5, t6, t7);
            p[k] = keep - h;
            ref_layernorm(x, w, g, be, R, D, eps, ym, t1, t3, t4, t5, t6, t7);
            p[k] = keep;
            for (int j = 0; j < N; j++) {
                lp += w[j] * yp[j];
                lm += w[j] * ym[j];
            }
            double fd = (lp - lm) / (2 * h), an = which ? db[k] : dg[k];
            CHECK(fabs(fd - an) <= 1e-7 * (1 + fabs(an)), "fd layernorm d%s[%d]: fd=%.12g an=%.12g",
                  which ? "beta" : "gamma", k, fd, an);
        }
}

/* The library's fp32 backward (dx, dgamma, dbeta) against differences of its fp32 forward. */
static void fd_library(void)
{
    test_rng r;
    test_rng_seed(&r, 32);
    enum { R = 3, D = 6, N = R * D };
    int64_t sh[2] = {R, D};
    double x[N], w[N], dxv[N];
    float xf[N], yf[N], g[D], be[D], dg[D], db[D];
    for (int i = 0; i < N; i++) {
        x[i] = 2 * test_rng_normal(&r);
        w[i] = test_rng_normal(&r);
    }
    for (int k = 0; k < D; k++) {
        g[k] = (float)(1 + 0.5 * test_rng_normal(&r));
        be[k] = (float)test_rng_normal(&r);
    }
    const double eps = 1e-5, h = 1e-2;
    tensor_t *tx = nn_tensor(FMT_FP32, 2, sh, x), *ty = nn_zeros(FMT_FP32, 2, sh);
    tensor_t *tw = nn_tensor(FMT_FP32, 2, sh, w), *tdx = nn_zeros(FMT_FP32, 2, sh);
    CHECK_STATUS(tensor_layernorm_backward(tdx, dg, db, tw, tx, g, eps), FX_OK);
    nn_read(tdx, dxv);
#define LOSS(acc)                                                                              \
    do {                                                                                       \
        CHECK_STATUS(tensor_from_f32(tx, xf), FX_OK);                                          \
        CHECK_STATUS(tensor_layernorm(ty, tx, g, be, eps, NULL, NULL), FX_OK);                 \
        CHECK_STATUS(tensor_to_f32(ty, yf), FX_OK);                                            \
        acc = 0;                                                                               \
        for (int j = 0; j < N; j++) acc += w[j] * yf[j];                                       \
    } while (0)
    for (int j = 0; j < N; j++) xf[j] = (float)x[j];
    for (int i = 0; i < N; i++) {
        double lp, lm;
        xf[i] = (float)(x[i] + h);
        LOSS(lp);
        xf[i] = (float)(x[i] - h);
        LOSS(lm);
        xf[i] = (float)x[i];
        double fd = (lp - lm) / (2 * h);
        CHECK(fabs(fd - dxv[i]) <= 2e-3 * (1 + fabs(dxv[i])), "fd layernorm library dx[%d]: "
              "fd=%.8g got=%.8g", i, fd, dxv[i]);
    }
    for (int k = 0; k < D; k++)
        for (int which = 0; which < 2; which++) {
            float *p = which ? be : g, keep = p[k];
            double lp, lm;
            p[k] = (float)(keep + h);
            LOSS(lp);
            p[k] = (float)(keep - h);
            LOSS(lm);
            p[k] = keep;
            double fd = (lp - lm) / (2 * h), an = which ? db[k] : dg[k];
            CHECK(fabs(fd - an) <= 2e-3 * (1 + fabs(an)), "fd layernorm library d%s[%d]: fd=%.8g "
                  "got=%.8g", which ? "beta" : "gamma", k, fd, an);
        }
#undef LOSS
    tensor_free(tx);
    tensor_free(ty);
    tensor_free(tw);
    tensor_free(tdx);
}

static void run_case(const ln_case *c, fmt_t f, const char **bk, int nbk, int threads_check)
{
    test_rng r;
    test_rng_seed(&r, 1300 + (uint64_t)(c - CASES) * 17 + (uint64_t)f);
    const int64_t n = nn_numel(c->ndim, c->shape), D = c->shape[c->ndim - 1], R = n / D;
    double *x = nn_doubles(n), *g = nn_doubles(n), *y = nn_doubles(n), *dx = nn_doubles(n);
    double *ay = nn_doubles(n), *ad = nn_doubles(n), *gam = nn_doubles(D), *bet = nn_doubles(D);
    double *dg = nn_doubles(D), *db = nn_doubles(D), *ap = nn_doubles(2 * D);
    float *gf = nn_xmalloc(sizeof(float) * (size_t)D), *bf = nn_xmalloc(sizeof(float) * (size_t)D);
    const size_t fr = sizeof(float) * (size_t)R, fd = sizeof(float) * (size_t)D;
    float *mean = nn_xmalloc(fr), *rstd = nn_xmalloc(fr);
    float *dgf = nn_xmalloc(fd), *dbf = nn_xmalloc(fd);
    float *dg0 = nn_xmalloc(fd), *db0 = nn_xmalloc(fd);
    for (int64_t i = 0; i < n; i++) {
        x[i] = c->offset + c->scale * test_rng_normal(&r);
        g[i] = test_rng_normal(&r);
    }
    for (int64_t k = 0; k < D; k++) {
        gf[k] = c->affine ? (float)(1 + 0.3 * test_rng_normal(&r)) : 1.0f;
        bf[k] = c->affine ? (float)(0.5 * test_rng_normal(&r)) : 0.0f;
        gam[k] = gf[k];
        bet[k] = bf[k];
    }
    tensor_t *tx = nn_tensor(f, c->ndim, c->shape, x), *tg = nn_tensor(f, c->ndim, c->shape, g);
    ref_layernorm(x, g, gam, bet, R, D, c->eps, y, dx, dg, db, ay, ad, ap);
    const float *G = c->affine ? gf : NULL, *B = c->affine ? bf : NULL;
    char what[200];
    tensor_t *fy = NULL, *fdx = NULL;
    for (int b = 0; b < nbk; b++) {
        CHECK_STATUS(flexpoint_set_backend(bk[b]), FX_OK);
        tensor_t *ty = nn_zeros(f, c->ndim, c->shape), *tdx = nn_zeros(f, c->ndim, c->shape);
        snprintf(what, sizeof what, "layernorm %s %s %s", c->name, fmt_name(f), bk[b]);
        CHECK_STATUS(tensor_layernorm(ty, tx, G, B, c->eps, mean, rstd), FX_OK);
        nn_check(what, ty, y, ay, n);
        snprintf(what, sizeof what, "layernorm_backward %s %s %s", c->name, fmt_name(f), bk[b]);
        CHECK_STATUS(tensor_layernorm_backward(tdx, dgf, dbf, tg, tx, G, c->eps), FX_OK);
        nn_check(what, tdx, dx, ad, n);
        for (int64_t k = 0; k < D; k++) {
            CHECK(fabs(dgf[k] - dg[k]) <= ap[k] + NN_U32 * (fabs(dg[k]) + ap[k]) + 1e-300,
                  "%s: dgamma[%lld] %.9g ref %.12g", what, (long long)k, dgf[k], dg[k]);
            CHECK(fabs(dbf[k] - db[k]) <= ap[D + k] + NN_U32 * (fabs(db[k]) + ap[D + k]) + 1e-300,
                  "%s: dbeta[%lld] %.9g ref %.12g", what, (long long)k, dbf[k], db[k]);
        }
        for (int64_t i = 0; i < R; i++) {
            /* fp32 sum of D terms in order: (D - 1) u of sum |x|, then the division */
            double s = 0, sa = 0;
            for (int64_t k = 0; k < D; k++) {
                s += x[i * D + k];
                sa += fabs(x[i * D + k]);
            }
            CHECK(fabs(mean[i] - s / (double)D) <= (double)(D + 1) * NN_U32 * sa / (double)D,
                  "%s: mean[%lld] %g", what, (long long)i, mean[i]);
            CHECK(rstd[i] > 0, "%s: rstd[%lld] %g", what, (long long)i, rstd[i]);
        }
        if (!fy) {
            fy = ty;
            fdx = tdx;
            memcpy(dg0, dgf, sizeof(float) * (size_t)D);
            memcpy(db0, dbf, sizeof(float) * (size_t)D);
        } else {
            CHECK(nn_same_bits(fy, ty) && nn_same_bits(fdx, tdx), "%s: bits differ from backend %s",
                  what, bk[0]);
            CHECK(memcmp(dg0, dgf, sizeof(float) * (size_t)D) == 0 &&
                  memcmp(db0, dbf, sizeof(float) * (size_t)D) == 0,
                  "%s: dgamma/dbeta differ from backend %s", what, bk[0]);
            tensor_free(ty);
            tensor_free(tdx);
        }
    }
    if (threads_check) {
        int prev = flexpoint_set_num_threads(1);
        tensor_t *a1 = nn_zeros(f, c->ndim, c->shape), *a3 = nn_zeros(f, c->ndim, c->shape);
        tensor_t *d1 = nn_zeros(f, c->ndim, c->shape), *d3 = nn_zeros(f, c->ndim, c->shape);
        CHECK_STATUS(tensor_layernorm(a1, tx, G, B, c->eps, NULL, NULL), FX_OK);
        float *dg1 = nn_xmalloc(sizeof(float) * (size_t)D), *db1 = nn_xmalloc(sizeof(float) * (size_t)D);
        CHECK_STATUS(tensor_layernorm_backward(d1, dg1, db1, tg, tx, G, c->eps), FX_OK);
        flexpoint_set_num_threads(3);
        CHECK_STATUS(tensor_layernorm(a3, tx, G, B, c->eps, NULL, NULL), FX_OK);
        CHECK_STATUS(tensor_layernorm_backward(d3, dgf, dbf, tg, tx, G, c->eps), FX_OK);
        flexpoint_set_num_threads(prev);
        CHECK(nn_same_bits(a1, a3) && nn_same_bits(a1, fy) && nn_same_bits(d1, d3) &&
              nn_same_bits(d1, fdx) && memcmp(dg0, dgf, sizeof(float) * (size_t)D) == 0 &&
                  memcmp(dg1, dgf, sizeof(float) * (size_t)D) == 0 &&
                  memcmp(db1, dbf, sizeof(float) * (size_t)D) == 0,
              "layernorm %s %s: results depend on the thread count", c->name, fmt_name(f));
        free(dg1);
        free(db1);
        tensor_free(a1);
        tensor_free(a3);
        tensor_free(d1);
        tensor_free(d3);
    }
    tensor_free(fy);
    tensor_free(fdx);
    tensor_free(tx);
    tensor_free(tg);
    free(x); free(g); free(y); free(dx); free(ay); free(ad); free(gam); free(bet);
    free(dg); free(db); free(ap); free(gf); free(bf); free(mean); free(rstd); free(dgf);
    free(dbf); free(dg0); free(db0);
}

static void special_values(void)
{
    int64_t sh[2] = {4, 4};
    const float NaN = NAN, Inf = INFINITY;
    float x[16] = {1, NaN, 2, 3,                 /* NaN row */
                   1, Inf, 2, 3,                 /* Inf row */
                   -0.0f, 0.0f, -0.0f, 0.0f,     /* zeros: var 0 -> y = 0 (eps > 0) */
                   1e-40f, -1e-40f, 1e-40f, -1e-40f}; /* subnormals: normalised to +-1 */
    for (int k = 0; k < FMT_COUNT; k++) {
        fmt_t f = NN_FORMATS[k];
        tensor_t *t = nn_zeros(FMT_FP32, 2, sh), *y = nn_zeros(f, 2, sh);
        CHECK_STATUS(tensor_from_f32(t, x), FX_OK);
        CHECK_STATUS(tensor_layernorm(y, t, NULL, NULL, 1e-5, NULL, NULL), FX_OK);
        float v[16];
        CHECK_STATUS(tensor_to_f32(y, v), FX_OK);
        if (fmt_is_shared_exponent(f)) {
            double nf = -1;
            CHECK_STATUS(tensor_stat(y, "nonfinite", &nf), FX_OK);
            CHECK(nf == 8, "layernorm specials into %s: %g non-finite, want 8", fmt_name(f), nf);
        } else {
            for (int i = 0; i < 8; i++)
                CHECK(isnan(v[i]), "layernorm %s: element %d = %g, want NaN", fmt_name(f), i, v[i]);
        }
        for (int i = 8; i < 12; i++)
            CHECK(v[i] == 0, "layernorm %s of zeros: %g", fmt_name(f), v[i]);
        /* subnormals: var = 1e-80 << eps, so y = x / sqrt(eps) ~ +-3.2e-38 */
        for (int i = 12; i < 16; i++) {
            double want = (i % 2 ? -1e-40 : 1e-40) / sqrt(1e-5 + 1e-80);
            if (f == FMT_FP16 || f == FMT_FLEX16_5) continue; /* below their range: 0 / tiny */
            /* DFP16's smallest exponent is -128: a step of 2^-128 ~ 2.9e-39 here */
            const double tol = f == FMT_DFP16 ? 0x1p-129 : 1e-2 * fabs(want);
            CHECK(fabs(v[i] - want) <= tol, "layernorm %s of subnormals: %g want %g",
                  fmt_name(f), v[i], want);
        }
        tensor_free(t);
        tensor_free(y);
    }
    /* eps = 0 on a constant row: rstd = Inf and NaN outputs, as PyTorch */
    int64_t s1[2] = {1, 3};
    float c3[3] = {2, 2, 2}, v3[3], m1, r1;
    tensor_t *t = nn_zeros(FMT_FP32, 2, s1), *y = nn_zeros(FMT_FP32, 2, s1);
    CHECK_STATUS(tensor_from_f32(t, c3), FX_OK);
    CHECK_STATUS(tensor_layernorm(y, t, NULL, NULL, 0.0, &m1, &r1), FX_OK);
    CHECK_STATUS(tensor_to_f32(y, v3), FX_OK);
    CHECK(isnan(v3[0]) && m1 == 2 && isinf(r1), "constant row eps 0: y %g mean %g rstd %g", v3[0],
          m1, r1);
    /* outputs that overflow the format: gamma 1e6 into fp16 gives +-Inf, FLEX16_5 saturates */
    float big[3] = {1, 2, 3}, gam[3] = {1e6f, 1e6f, 1e6f};
    CHECK_STATUS(tensor_from_f32(t, big), FX_OK);
    tensor_t *yh = nn_zeros(FMT_FP16, 2, s1), *yf = nn_zeros(FMT_FLEX16_5, 2, s1);
    CHECK_STATUS(tensor_layernorm(yh, t, gam, NULL, 0.0, NULL, NULL), FX_OK);
    CHECK_STATUS(tensor_to_f32(yh, v3), FX_OK);
    CHECK(v3[0] == -Inf && v3[1] == 0 && v3[2] == Inf, "fp16 overflow: %g %g %g", v3[0], v3[1],
          v3[2]);
    CHECK_STATUS(tensor_layernorm(yf, t, gam, NULL, 0.0, NULL, NULL), FX_OK);
    double sat = -1;
    CHECK_STATUS(tensor_stat(yf, "saturated", &sat), FX_OK);
    CHECK(sat == 2, "flex16_5 overflow: %g saturated, want 2", sat);
    tensor_free(t);
    tensor_free(y);
    tensor_free(yh);
    tensor_free(yf);
}

static void bad_input(void)
{
    int64_t s34[2] = {3, 4}, s43[2] = {4, 3}, s30[2] = {3, 0};
    tensor_t *x = nn_zeros(FMT_FP32, 2, s34), *y = nn_zeros(FMT_BF16, 2, s34);
    tensor_t *y43 = nn_zeros(FMT_FP32, 2, s43), *x0 = nn_zeros(FMT_FP32, 2, s30);
    float before[12], after[12], m[3] = {7, 7, 7}, dg[4] = {9, 9, 9, 9};
    for (int i = 0; i < 12; i++) before[i] = (float)i;
    CHECK_STATUS(tensor_from_f32(y, before), FX_OK);
    CHECK_STATUS(tensor_from_f32(x, before), FX_OK);
    CHECK_STATUS(tensor_to_f32(y, before), FX_OK);
    CHECK_STATUS(tensor_layernorm(y43, x, NULL, NULL, 1e-5, m, NULL), FX_ESHAPE);
    nn_check_message("tensor_layernorm");
    CHECK_STATUS(tensor_layernorm(y, x, NULL, NULL, -1, m, NULL), FX_EINVAL);
    CHECK_STATUS(tensor_layernorm(y, x, NULL, NULL, NAN, m, NULL), FX_EINVAL);
    CHECK_STATUS(tensor_layernorm(y, x0, NULL, NULL, 1e-5, m, NULL), FX_ESHAPE);
    CHECK_STATUS(tensor_layernorm(NULL, x, NULL, NULL, 1e-5, m, NULL), FX_EINVAL);
    CHECK_STATUS(tensor_layernorm_backward(y, dg, NULL, y43, x, NULL, 1e-5), FX_ESHAPE);
    nn_check_message("tensor_layernorm_backward");
    CHECK_STATUS(tensor_layernorm_backward(y, dg, dg, x, x, NULL, 1e-5), FX_EINVAL);
    CHECK_STATUS(tensor_layernorm_backward(y, dg, NULL, x, NULL, NULL, 1e-5), FX_EINVAL);
    CHECK_STATUS(tensor_layernorm_backward(y, dg, NULL, x, x, NULL, INFINITY), FX_EINVAL);
    CHECK_STATUS(tensor_to_f32(y, after), FX_OK);
    CHECK(memcmp(before, after, sizeof before) == 0, "y changed by a failing call");
    CHECK(m[0] == 7 && dg[0] == 9, "buffers changed by a failing call");
    tensor_free(x);
    tensor_free(y);
    tensor_free(y43);
    tensor_free(x0);
}

/* The library's fp32 layer norm against the definition written out a row at a time (fp32, one
 * accumulator per sum, index order; dgamma, dbeta in row order), bit for bit, on every backend
 * at one and two threads: the AVX-512 kernels run 16 rows side by side (the AVX2 ones 8) and
 * sum dgamma/dbeta in blocks of 64 columns (32), so row counts and widths that are not
 * multiples of those are the cases to get right. */
static void definition_bits(void)
{
    const char *bk[8];
    const int nbk = nn_backends(bk, 8);
    const int64_t shapes[][2] = {{37, 130}, {16, 64}, {5, 1}, {300, 77}, {17, 200}, {9, 7},
                                 {40, 128}};
    test_rng rng;
    test_rng_seed(&rng, 77);
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const int64_t R = shapes[si][0], D = shapes[si][1], n = R * D;
        float *x = malloc((size_t)n * sizeof *x), *dy = malloc((size_t)n * sizeof *dy);
        float *y = malloc((size_t)n * sizeof *y), *dx = malloc((size_t)n * sizeof *dx);
        float *yr = malloc((size_t)n * sizeof *yr), *dxr = malloc((size_t)n * sizeof *dxr);
        float *gm = malloc((size_t)D * sizeof *gm), *bt = malloc((size_t)D * sizeof *bt);
        float *dg = malloc((size_t)D * sizeof *dg), *db = malloc((size_t)D * sizeof *db);
        float *dgr = calloc((size_t)D, sizeof *dgr), *dbr = calloc((size_t)D, sizeof *dbr);
        float *mean = malloc((size_t)R * sizeof *mean), *rstd = malloc((size_t)R * sizeof *rstd);
        float *mr = malloc((size_t)R * sizeof *mr), *rr = malloc((size_t)R * sizeof *rr);
        for (int64_t i = 0; i < n; i++) {
            x[i] = (float)(3 * test_rng_normal(&rng) + 1);
            dy[i] = (float)test_rng_normal(&rng);
        }
        for (int64_t k = 0; k < D; k++) {
            gm[k] = (float)(1 + 0.3 * test_rng_normal(&rng));
            bt[k] = (float)(0.1 * test_rng_normal(&rng));
        }
        const float eps = (float)1e-5;
        for (int64_t r = 0; r < R; r++) {
            const float *xr = x + r * D, *gr = dy + r * D;
            float s = 0.0f, q = 0.0f, a = 0.0f, b = 0.0f;
            for (int64_t k = 0; k < D; k++) s += xr[k];
            const float mu = s / (float)D;
            for (int64_t k = 0; k < D; k++) q += (xr[k] - mu) * (xr[k] - mu);
            const float is = 1.0f / sqrtf(q / (float)D + eps);
            mr[r] = mu;
            rr[r] = is;
            for (int64_t k = 0; k < D; k++) {
                float v = (xr[k] - mu) * is;
                v *= gm[k];
                v += bt[k];
                yr[r * D + k] = v;
            }
            for (int64_t k = 0; k < D; k++) {
                const float g = gr[k] * gm[k];
                a += g;
                b += g * ((xr[k] - mu) * is);
            }
            a /= (float)D;
            b /= (float)D;
            for (int64_t k = 0; k < D; k++) {
                const float xh = (xr[k] - mu) * is;
                dxr[r * D + k] = is * (gr[k] * gm[k] - a - xh * b);
                dgr[k] += gr[k] * xh;
                dbr[k] += gr[k];
            }
        }
        int64_t sh[2] = {R, D};
        tensor_t *tx = tensor_new(FMT_FP32, 2, sh), *ty = tensor_new(FMT_FP32, 2, sh);
        tensor_t *tg = tensor_new(FMT_FP32, 2, sh), *tdx = tensor_new(FMT_FP32, 2, sh);
        CHECK_STATUS(tensor_from_f32(tx, x), FX_OK);
        CHECK_STATUS(tensor_from_f32(tg, dy), FX_OK);
        for (int bi = 0; bi < 2 * nbk; bi++) {
            const int threads = 1 + bi % 2;
            CHECK_STATUS(flexpoint_set_backend(bk[bi / 2]), FX_OK);
            const int prev = flexpoint_set_num_threads(threads);
            CHECK_STATUS(tensor_layernorm(ty, tx, gm, bt, 1e-5, mean, rstd), FX_OK);
            CHECK_STATUS(tensor_layernorm_backward(tdx, dg, db, tg, tx, gm, 1e-5), FX_OK);
            flexpoint_set_num_threads(prev);
            CHECK_STATUS(tensor_to_f32(ty, y), FX_OK);
            CHECK_STATUS(tensor_to_f32(tdx, dx), FX_OK);
            CHECK(memcmp(y, yr, (size_t)n * sizeof *y) == 0 &&
                      memcmp(mean, mr, (size_t)R * sizeof *mean) == 0 &&
                      memcmp(rstd, rr, (size_t)R * sizeof *rstd) == 0,
                  "layer norm [%lld, %lld] on %s at %d threads: y, mean or rstd differs from "
                  "the definition", (long long)R, (long long)D, bk[bi / 2], threads);
            CHECK(memcmp(dx, dxr, (size_t)n * sizeof *dx) == 0 &&
                      memcmp(dg, dgr, (size_t)D * sizeof *dg) == 0 &&
                      memcmp(db, dbr, (size_t)D * sizeof *db) == 0,
                  "layer norm backward [%lld, %lld] on %s at %d threads: dx, dgamma or dbeta "
                  "differs from the definition", (long long)R, (long long)D, bk[bi / 2], threads);
        }
        tensor_free(tx);
        tensor_free(ty);
        tensor_free(tg);
        tensor_free(tdx);
        float *all[] = {x, dy, y, dx, yr, dxr, gm, bt, dg, db, dgr, dbr, mean, rstd, mr, rr};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    }
}

/* The backward pass reads a contiguous x and dy in place, a group of rows at a time, and
 * copies them whole to fp32 otherwise (here: x a column slice of a wider tensor whose other
 * columns are zero, so that it holds the same stored values): both routes must give the same
 * bits of dx, dgamma and dbeta, on every backend, at one and two threads. */
static void in_place_matches_copies(void)
{
    const char *bk[8];
    const int nbk = nn_backends(bk, 8);
    const int64_t shapes[][2] = {{300, 77}, {40, 128}, {17, 200}, {1000, 64}, {5, 2048}};
    const fmt_t fmts[] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5, FMT_DFP16};
    test_rng rng;
    test_rng_seed(&rng, 4711);
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (size_t fi = 0; fi < sizeof fmts / sizeof *fmts; fi++) {
            const fmt_t f = fmts[fi];
            const int64_t R = shapes[si][0], D = shapes[si][1], n = R * D;
            const int64_t sh[2] = {R, D}, wide[2] = {R, 2 * D};
            double *x = nn_doubles(n), *g = nn_doubles(n), *xw = nn_doubles(2 * n);
            float *gm = nn_xmalloc(sizeof(float) * (size_t)D);
            float *dg[2], *db[2];
            for (int k = 0; k < 2; k++) {
                dg[k] = nn_xmalloc(sizeof(float) * (size_t)D);
                db[k] = nn_xmalloc(sizeof(float) * (size_t)D);
            }
            for (int64_t i = 0; i < n; i++) {
                x[i] = 2 * test_rng_normal(&rng) - 0.5;
                g[i] = 0.01 * test_rng_normal(&rng);
            }
            for (int64_t k = 0; k < D; k++) gm[k] = (float)(1 + 0.2 * test_rng_normal(&rng));
            for (int64_t r = 0; r < R; r++)
                for (int64_t k = 0; k < D; k++) {
                    xw[r * 2 * D + k] = x[r * D + k];
                    xw[r * 2 * D + D + k] = 0.0;
                }
            tensor_t *tx = nn_tensor(f, 2, sh, x), *tg = nn_tensor(f, 2, sh, g);
            tensor_t *txw = nn_tensor(f, 2, wide, xw);
            tensor_t *xs = tensor_view_slice(txw, 1, 0, D, 1);
            CHECK(xs != NULL, "slice: %s", flexpoint_last_error());
            for (int bi = 0; xs && bi < 2 * nbk; bi++) {
                const int threads = 1 + bi % 2;
                CHECK_STATUS(flexpoint_set_backend(bk[bi / 2]), FX_OK);
                const int prev = flexpoint_set_num_threads(threads);
                tensor_t *d0 = nn_zeros(f, 2, sh), *d1 = nn_zeros(f, 2, sh);
                CHECK_STATUS(tensor_layernorm_backward(d0, dg[0], db[0], tg, tx, gm, 1e-5), FX_OK);
                CHECK_STATUS(tensor_layernorm_backward(d1, dg[1], db[1], tg, xs, gm, 1e-5), FX_OK);
                flexpoint_set_num_threads(prev);
                CHECK(nn_same_bits(d0, d1) &&
                          memcmp(dg[0], dg[1], sizeof(float) * (size_t)D) == 0 &&
                          memcmp(db[0], db[1], sizeof(float) * (size_t)D) == 0,
                      "layer norm backward [%lld, %lld] %s on %s at %d threads: x read in "
                      "place and x copied give different bits", (long long)R, (long long)D,
                      fmt_name(f), bk[bi / 2], threads);
                tensor_free(d0);
                tensor_free(d1);
            }
            tensor_free(xs);
            tensor_free(txw);
            tensor_free(tx);
            tensor_free(tg);
            free(x);
            free(g);
            free(xw);
            free(gm);
            for (int k = 0; k < 2; k++) {
                free(dg[k]);
                free(db[k]);
            }
        }
}

int main(void)
{
    fd_reference();
    fd_library();
    const char *bk[8];
    int nbk = nn_backends(bk, 8);
    const int ncases = (int)(sizeof CASES / sizeof *CASES);
    for (int ci = 0; ci < ncases; ci++)
        for (int k = 0; k < FMT_COUNT; k++)
            run_case(&CASES[ci], NN_FORMATS[k], bk, nbk,
                     strstr(CASES[ci].name, "threaded") != NULL);
    printf("layernorm: %d cases x %d formats on %d backends\n", ncases, FMT_COUNT, nbk);
    special_values();
    definition_bits();
    in_place_matches_copies();
    bad_input();
    return test_finish("test_nn_layernorm");
}
