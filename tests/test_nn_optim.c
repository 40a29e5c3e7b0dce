/* Optimiser steps (fx_sgd_step, fx_adam_step) on every format and CPU backend against fp64
 * reference updates written here, stochastic rounding (unbiased, reproducible), bad input.
 *
 * References (PyTorch semantics, in double from the stored fp32 state of the previous step):
 *   SGD:  d = g*grad_scale + wd*p;  buf' = momentum*buf + d;  p' = p - lr*buf'
 *   Adam: d as above; m' = b1*m + (1-b1)*d; v' = b2*v + (1-b2)*d^2;
 *         p' = p - lr/(1-b1^t) * m' / (sqrt(v')/sqrt(1-b2^t) + eps)
 * Bounds (u = 2^-24, ulp(x) = the fp32 spacing at |x|; derived, not tuned):
 *   optimiser state (buf', m', v'): one fp32 rounding of the exact value: <= ulp/2 (checked
 *     as <= ulp, plus 2^-50 of the sum of |terms| for the double arithmetic).
 *   master p': the final rounding (ulp/2) plus the effect of using the fp32-rounded state in
 *     the update: SGD lr*ulp(buf')/2; Adam |p - p'| * (u + u/2) (m' and sqrt(v') relative
 *     errors); checked as ulp(p') + lr*ulp(buf') (SGD), ulp(p') + 4u*|p - p'| (Adam).
 *   working copy w against the master: exactly the format's rounding of the master, checked
 *     as |w - master| <= half the format's step at the master (fp16: 2^(max(E,-14)-11),
 *     bf16: 2^(max(E,-126)-8), DFP16/FLEX16_5: 2^(e-1) at the tensor's exponent e, or an
 *     element saturated at 32767*2^e); DFP16's e must be the exact exponent of max|master|.
 *   no master: w' within half a format step (+ the fp32 bound above) of the reference from w.
 * Results must also be bit-identical across backends (every format: the update is scalar C
 * and the conversions are bit-exact on every backend by definition).
 */
#include "flexpoint_nn.h"
#include "nn/stochastic_round.h"
#include "flex/flex_math.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U32 0x1.0p-24

static double ulp32(double x)
{
    x = fabs(x);
    if (x < 0x1.0p-126) return 0x1.0p-149;
    int e;
    frexp(x, &e); /* x in [2^(e-1), 2^e) */
    return ldexp(1.0, e - 1 - 23);
}

/* Spacing of the fp16/bf16 grid at |x| (the binade of x; subnormal spacing below). */
static double float_step(fmt_t f, double x)
{
    x = fabs(x);
    int e = x > 0 ? ilogb(x) : -1000;
    if (f == FMT_FP16) return ldexp(1.0, (e > -14 ? e : -14) - 10);
    if (f == FMT_BF16) return ldexp(1.0, (e > -126 ? e : -126) - 7);
    return 0.0;
}

/* Exact DFP16 exponent of a maximum M (docs/formats.md), written independently of the library. */
static int exact_exp(double M)
{
    if (M == 0) return 0;
    int e = ilogb(M) - 14;
    if (nearbyint(ldexp(M, -e)) > 32767) e++; /* default rounding mode: ties to even */
    return e;
}

/* ---------------------------------------------------------------------------------------- */

typedef struct {
    fmt_t fmt;
    int64_t rows, cols;
    int64_t n;
    tensor_t *w;
    float *master, *buf, *m, *v;
    test_rng rng;
} problem;

static void problem_init(problem *P, fmt_t f, int64_t rows, int64_t cols, uint64_t seed)
{
    memset(P, 0, sizeof *P);
    P->fmt = f;
    P->rows = rows;
    P->cols = cols;
    P->n = rows * cols;
    int64_t shape[2] = {rows, cols};
    P->w = tensor_new(f, 2, shape);
    P->master = calloc((size_t)P->n, sizeof(float));
    P->buf = calloc((size_t)P->n, sizeof(float));
    P->m = calloc((size_t)P->n, sizeof(float));
    P->v = calloc((size_t)P->n, sizeof(float));
    test_rng_seed(&P->rng, seed);
    for (int64_t i = 0; i < P->n; i++) P->master[i] = (float)(0.5 * test_rng_normal(&P->rng));
    CHECK_STATUS(tensor_from_f32(P->w, P->master), FX_OK);
    CHECK_STATUS(tensor_to_f32(P->w, P->master), FX_OK); /* master starts from w's values */
}

static void problem_free(problem *P)
{
    tensor_free(P->w);
    free(P->master);
    free(P->buf);
    free(P->m);
    free(P->v);
}

/* A gradient for step k: format varies with k, k == 0 is a transposed view; values ~1000
 * (as if loss-scaled by 1024; grad_scale 1/1024 undoes it). gvals receives what it holds. */
static tensor_t *make_grad(problem *P, int k, float *gvals, tensor_t **owner)
{
    fmt_t gf = (fmt_t)((P->fmt + k) % FMT_COUNT);
    float *tmp = malloc((size_t)P->n * sizeof *tmp);
    for (int64_t i = 0; i < P->n; i++) tmp[i] = (float)(1024.0 * test_rng_normal(&P->rng));
    tensor_t *g;
    *owner = NULL;
    if (k == 0) {
        int64_t ts[2] = {P->cols, P->rows};
        tensor_t *base = tensor_new(gf, 2, ts);
        g = tensor_view_transpose(base, 0, 1);
        *owner = base;
        /* fill the base (so the exponent fits), then the logical values through the view */
        CHECK_STATUS(tensor_from_f32(base, tmp), FX_OK);
        CHECK_STATUS(tensor_from_f32(g, tmp), FX_OK);
    } else {
        int64_t shape[2] = {P->rows, P->cols};
        g = tensor_new(gf, 2, shape);
        CHECK_STATUS(tensor_from_f32(g, tmp), FX_OK);
    }
    CHECK_STATUS(tensor_to_f32(g, gvals), FX_OK);
    free(tmp);
    return g;
}

/* w must be the format's rounding of target[] (half a step, or saturated for flex). slack:
 * extra absolute error allowed per element (for the no-master path). */
static long check_rounding_of(const tensor_t *w, const double *target, const double *slack,
                              int64_t n, const char *what)
{
    fmt_t f = tensor_fmt(w);
    float *wv = malloc((size_t)n * sizeof *wv);
    CHECK_STATUS(tensor_to_f32(w, wv), FX_OK);
    long bad = 0;
    int e = fmt_is_shared_exponent(f) ? tensor_exp(w) : 0;
    if (f == FMT_DFP16) {
        double M = 0;
        for (int64_t i = 0; i < n; i++) M = fmax(M, fabs(target[i]));
        /* the library takes the exponent from the fp32 values it writes; with slack the
         * target is the fp64 reference, whose maximum may cross a power of two */
        int want = exact_exp(M);
        int ok = e == want || (slack && abs(e - want) <= 1);
        CHECK(ok, "%s: DFP16 exponent %d, exact exponent of max %.9g is %d", what, e, M, want);
    }
    for (int64_t i = 0; i < n; i++) {
        double t = target[i], y = wv[i], tol;
        if (f == FMT_FP32) {
            tol = 0;
        } else if (f == FMT_FP16 || f == FMT_BF16) {
            tol = 0.5 * float_step(f, fabs(t) * (1 + 0x1.0p-20));
        } else {
            double top = 32767.0 * ldexp(1.0, e);
            if (fabs(t) > top && fabs(y) == top && signbit(y) == signbit(t)) continue;
            tol = ldexp(1.0, e - 1);
        }
        if (slack) tol += slack[i];
        if (!(fabs(y - t) <= tol)) {
            if (++bad <= 3)
                CHECK(0, "%s: element %lld: w=%.9g, target %.9g, |diff| %.3g > %.3g", what,
                      (long long)i, y, t, fabs(y - t), tol);
        }
    }
    free(wv);
    return bad;
}

enum { OPT_SGD = 0, OPT_ADAM = 1 };

/* One step with the fp64 reference. use_master: 1 master path, 0 in place. */
static void step_and_check(problem *P, int opt, int use_master, int k, const char *tag)
{
    const double lr_sgd = 0.05, mom = 0.9, wd = 1e-3, gs = 1.0 / 1024.0;
    const double lr_adam = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd_adam = 1e-2;
    int64_t n = P->n;
    float *gv = malloc((size_t)n * sizeof *gv), *p0 = malloc((size_t)n * sizeof *p0);
    tensor_t *owner;
    tensor_t *g = make_grad(P, k, gv, &owner);
    /* the weights the step starts from */
    if (use_master) memcpy(p0, P->master, (size_t)n * sizeof *p0);
    else CHECK_STATUS(tensor_to_f32(P->w, p0), FX_OK);

    double *pref = malloc((size_t)n * sizeof *pref), *ptol = malloc((size_t)n * sizeof *ptol);
    double *sref = malloc((size_t)n * 2 * sizeof *sref), *stol = malloc((size_t)n * 2 * sizeof *stol);
    const uint64_t t = (uint64_t)k + 1;
    for (int64_t i = 0; i < n; i++) {
        double p = p0[i];
        if (opt == OPT_SGD) {
            double d = (double)gv[i] * gs + wd * p;
            double b = mom * P->buf[i] + d;
            double pn = p - lr_sgd * b;
            sref[i] = b;
            stol[i] = ulp32(b) + 0x1.0p-50 * (fabs(mom * P->buf[i]) + fabs(d));
            pref[i] = pn;
            ptol[i] = ulp32(pn) + lr_sgd * ulp32(b) + 0x1.0p-50 * (fabs(p) + fabs(lr_sgd * b));
        } else {
            double d = (double)gv[i] * gs + wd_adam * p;
            double mm = b1 * P->m[i] + (1 - b1) * d;
            double vv = b2 * P->v[i] + (1 - b2) * d * d;
            double bc1 = 1 - pow(b1, (double)t), bc2 = 1 - pow(b2, (double)t);
            double pn = p - lr_adam / bc1 * mm / (sqrt(vv) / sqrt(bc2) + eps);
            sref[i] = mm;
            stol[i] = ulp32(mm) + 0x1.0p-50 * (fabs(b1 * P->m[i]) + fabs(d));
            sref[n + i] = vv;
            stol[n + i] = ulp32(vv) + 0x1.0p-50 * (b2 * P->v[i] + d * d);
            pref[i] = pn;
            ptol[i] = ulp32(pn) + 4 * U32 * fabs(p - pn) + 0x1.0p-50 * fabs(p);
        }
    }

    float *master = use_master ? P->master : NULL;
    if (opt == OPT_SGD)
        CHECK_STATUS(fx_sgd_step(P->w, g, master, P->buf, lr_sgd, mom, wd, gs, 0, 0, t), FX_OK);
    else
        CHECK_STATUS(fx_adam_step(P->w, g, master, P->m, P->v, lr_adam, b1, b2, eps, wd_adam,
                                  gs, 0, 0, t), FX_OK);

    char what[160];
    long bad = 0;
    int nstate = opt == OPT_SGD ? 1 : 2;
    for (int s = 0; s < nstate; s++) {
        const float *st = opt == OPT_SGD ? P->buf : (s == 0 ? P->m : P->v);
        for (int64_t i = 0; i < n; i++) {
            if (!(fabs((double)st[i] - sref[s * n + i]) <= stol[s * n + i]) && ++bad <= 3)
                CHECK(0, "%s step %d: state %d element %lld: %.9g vs reference %.9g", tag, k,
                      s, (long long)i, st[i], sref[s * n + i]);
        }
    }
    CHECK(bad == 0, "%s step %d: %ld optimiser-state elements out of bound", tag, k, bad);
    if (use_master) {
        bad = 0;
        double *mv = malloc((size_t)n * sizeof *mv);
        for (int64_t i = 0; i < n; i++) {
            mv[i] = P->master[i];
            if (!(fabs(mv[i] - pref[i]) <= ptol[i]) && ++bad <= 3)
                CHECK(0, "%s step %d: master element %lld: %.9g vs reference %.12g", tag, k,
                      (long long)i, mv[i], pref[i]);
        }
        CHECK(bad == 0, "%s step %d: %ld master elements out of bound", tag, k, bad);
        snprintf(what, sizeof what, "%s step %d: w vs master", tag, k);
        CHECK(check_rounding_of(P->w, mv, NULL, n, what) == 0, "%s", what);
        free(mv);
    } else {
        snprintf(what, sizeof what, "%s step %d: in-place w vs reference", tag, k);
        CHECK(check_rounding_of(P->w, pref, ptol, n, what) == 0, "%s", what);
    }
    free(pref);
    free(ptol);
    free(sref);
    free(stol);
    free(gv);
    free(p0);
    tensor_free(g);
    tensor_free(owner);
}

/* Runs every optimiser x path x format on one backend; raw results go to `raw` (per config)
 * for the cross-backend comparison. */
#define NCONF (2 * 2 * FMT_COUNT)
typedef struct {
    int64_t n;
    uint32_t *bits; /* w raw (2 or 4 bytes per element, widened) */
    int exp;
    float *master;
} conf_result;

static void run_backend(const char *bn, conf_result *res)
{
    for (int opt = 0; opt < 2; opt++)
        for (int use_master = 1; use_master >= 0; use_master--)
            for (int f = 0; f < FMT_COUNT; f++) {
                problem P;
                problem_init(&P, (fmt_t)f, 23, 41, 1000 + (uint64_t)f);
                char tag[96];
                snprintf(tag, sizeof tag, "%s %s %s %s", bn, opt == OPT_SGD ? "sgd" : "adam",
                         use_master ? "master" : "in-place", fmt_name((fmt_t)f));
                for (int k = 0; k < 6; k++) step_and_check(&P, opt, use_master, k, tag);
                conf_result *r = &res[(opt * 2 + use_master) * FMT_COUNT + f];
                r->n = P.n;
                r->bits = malloc((size_t)P.n * sizeof *r->bits);
                if (f == FMT_FP32) {
                    float *tmp = malloc((size_t)P.n * sizeof *tmp);
                    tensor_get_raw(P.w, tmp);
                    memcpy(r->bits, tmp, (size_t)P.n * 4);
                    free(tmp);
                } else {
                    uint16_t *tmp = malloc((size_t)P.n * sizeof *tmp);
                    tensor_get_raw(P.w, tmp);
                    for (int64_t i = 0; i < P.n; i++) r->bits[i] = tmp[i];
                    free(tmp);
                }
                r->exp = fmt_is_shared_exponent((fmt_t)f) ? tensor_exp(P.w) : 0;
                r->master = malloc((size_t)P.n * sizeof(float));
                memcpy(r->master, P.master, (size_t)P.n * sizeof(float));
                problem_free(&P);
            }
}

static void test_reference_all_backends(void)
{
    conf_result first[NCONF];
    int have_first = 0;
    const char *first_name = NULL;
    for (int b = 0; b < flexpoint_backend_count(); b++) {
        const char *bn = flexpoint_backend_name(b);
        if (!flexpoint_backend_available(b)) {
            printf("backend %s: not available on this CPU, skipped\n", bn);
            continue;
        }
        CHECK_STATUS(flexpoint_set_backend(bn), FX_OK);
        conf_result res[NCONF];
        run_backend(bn, res);
        if (!have_first) {
            memcpy(first, res, sizeof res);
            have_first = 1;
            first_name = bn;
            continue;
        }
        for (int c = 0; c < NCONF; c++) {
            int same = res[c].exp == first[c].exp &&
                       memcmp(res[c].bits, first[c].bits, (size_t)res[c].n * 4) == 0 &&
                       memcmp(res[c].master, first[c].master, (size_t)res[c].n * 4) == 0;
            CHECK(same, "config %d (opt %d, master %d, %s): %s differs from %s", c,
                  c / (2 * FMT_COUNT), (c / FMT_COUNT) % 2, fmt_name((fmt_t)(c % FMT_COUNT)),
                  bn, first_name);
            free(res[c].bits);
            free(res[c].master);
        }
    }
    if (have_first)
        for (int c = 0; c < NCONF; c++) {
            free(first[c].bits);
            free(first[c].master);
        }
    flexpoint_set_backend(flexpoint_backend_name(flexpoint_backend_count() - 1));
}

/* --- stochastic rounding onto fp16/bf16 (fx_sr_round) ------------------------------------- */

static float sr_neighbour(fmt_t f, float x, int up)
{
    double ax = fabs((double)x), s = float_step(f, ax);
    double lo = floor(ax / s) * s, r = up && lo != ax ? lo + s : lo;
    double limit = f == FMT_FP16 ? 65536.0 : 0x1.0p128;
    float rf = r >= limit ? INFINITY : (float)r;
    return signbit(x) ? -rf : rf;
}

static void test_sr_unit(void)
{
    const fmt_t fs[2] = {FMT_FP16, FMT_BF16};
    for (int q = 0; q < 2; q++) {
        fmt_t f = fs[q];
        const char *fn = fmt_name(f);
        /* values on the grid, zeros, Inf, NaN: unchanged for any bits */
        const float on_grid[] = {1.0f, -3.5f, 0.0f, -0.0f, INFINITY, -INFINITY,
                                 f == FMT_FP16 ? 65504.0f : 0x1.fep127f,
                                 f == FMT_FP16 ? 5 * 0x1.0p-24f : 5 * 0x1.0p-133f,
                                 f == FMT_FP16 ? 0x1.0p-14f : 0x1.0p-126f};
        const uint64_t bits_set[3] = {0, 1ULL << 63, UINT64_MAX};
        for (size_t i = 0; i < sizeof on_grid / sizeof *on_grid; i++)
            for (int b = 0; b < 3; b++) {
                float y = fx_sr_round(f, on_grid[i], bits_set[b]);
                CHECK(memcmp(&y, &on_grid[i], 4) == 0, "%s: on-grid %a changed to %a", fn,
                      on_grid[i], y);
            }
        float nn = fx_sr_round(f, NAN, 0);
        CHECK(isnan(nn), "%s: NaN gives %g", fn, nn);

        /* bits 0 always rounds the magnitude up, bits 2^64-1 never does */
        test_rng rng;
        test_rng_seed(&rng, 42 + (uint64_t)q);
        long bad = 0;
        for (int i = 0; i < 20000; i++) {
            /* log-uniform magnitudes from far below the smallest subnormal to past the max */
            double lg = f == FMT_FP16 ? -40 + 58 * test_rng_uniform(&rng)
                                      : -149 + 277 * test_rng_uniform(&rng);
            float x = (float)ldexp(1.0 + test_rng_uniform(&rng), (int)floor(lg));
            if (!isfinite(x) || x == 0) continue;
            if (test_rng_u64(&rng) & 1) x = -x;
            float up = fx_sr_round(f, x, 0), down = fx_sr_round(f, x, UINT64_MAX);
            float wu = sr_neighbour(f, x, 1), wd = sr_neighbour(f, x, 0);
            if (memcmp(&up, &wu, 4) || memcmp(&down, &wd, 4)) {
                if (++bad <= 3)
                    CHECK(0, "%s: x=%a: up %a (want %a), down %a (want %a)", fn, x, up, wu,
                          down, wd);
            }
            float neg = fx_sr_round(f, -x, 12345);
            float pos = fx_sr_round(f, x, 12345);
            if (!(neg == -pos && signbit(neg) != signbit(pos)) && ++bad <= 3)
                CHECK(0, "%s: x=%a: sign not symmetric (%a, %a)", fn, x, pos, neg);
        }
        CHECK(bad == 0, "%s: %ld neighbour/sign errors", fn, bad);

        /* tiny negative values round to -0 or to minus the smallest subnormal */
        float tiny = f == FMT_FP16 ? -0x1.0p-30f : -0x1.0p-140f;
        float z = fx_sr_round(f, tiny, UINT64_MAX);
        CHECK(z == 0 && signbit(z), "%s: %a rounds down to %a, want -0", fn, tiny, z);

        /* unbiasedness: mean over many seeds, tolerance 5 standard errors of the mean:
         * each draw is lo or lo + s with P(up) = p, variance p(1-p)s^2 */
        const float probes[] = {1.0f + 0.3f * 0x1.0p-10f, 1000.7f, -3.14159265f,
                                f == FMT_FP16 ? 65520.0f : 0x1.ff4p127f, /* overflow half */
                                f == FMT_FP16 ? 3.3e-7f : 3.3e-39f,       /* target subnormal */
                                f == FMT_FP16 ? 0x1.8p-26f : 0x1.8p-135f, /* below min subn. */
                                f == FMT_FP16 ? 0x1.3p-31f : 0x1.3p-146f}; /* far below */
        const int N = 1 << 16;
        for (size_t i = 0; i < sizeof probes / sizeof *probes; i++) {
            float x = probes[i];
            float lo = sr_neighbour(f, x, 0), hi = sr_neighbour(f, x, 1);
            double s = float_step(f, x);
            double p = (fabs((double)x) - fabs((double)lo)) / s;
            long ups = 0, other = 0;
            double sum = 0;
            for (int j = 0; j < N; j++) {
                float y = fx_sr_round(f, x, fx_rng_u64(77, (uint64_t)j, 3));
                if (y == hi) ups++;
                else if (y != lo) other++;
                if (isfinite(y)) sum += y;
            }
            double se = sqrt(p * (1 - p) / N);
            double frac = (double)ups / N;
            CHECK(other == 0, "%s x=%a: %ld draws are neither neighbour", fn, x, other);
            CHECK(fabs(frac - p) <= 5 * se + 1e-12, "%s x=%a: P(up)=%.5f, want %.5f (se %.2g)",
                  fn, x, frac, p, se);
            if (isfinite(hi)) {
                double mean = sum / N;
                CHECK(fabs(mean - x) <= 5 * se * s,
                      "%s x=%a: mean %.9g, want %.9g (tolerance %.3g)", fn, x, mean, (double)x,
                      5 * se * s);
            }
        }

        /* reproducible: same (seed, counter) -> same bits; another counter -> different */
        float a[512], b2[512], c[512];
        for (int i = 0; i < 512; i++) a[i] = b2[i] = c[i] = 1.0f + (float)i * 0x1.0p-16f;
        fx_sr_round_array(f, a, 512, 9, 4);
        fx_sr_round_array(f, b2, 512, 9, 4);
        fx_sr_round_array(f, c, 512, 9, 5);
        CHECK(memcmp(a, b2, sizeof a) == 0, "%s: same seed and counter differ", fn);
        CHECK(memcmp(a, c, sizeof a) != 0, "%s: another counter gives the same rounding", fn);
    }
}

/* --- stochastic rounding through fx_sgd_step ------------------------------------------------- */

/* n weights all 1.0; an update of +0.3 * 2^-14 (a fraction of every format's step there):
 * round-to-nearest never moves them, stochastic rounding moves them on average by the
 * update. */
static void sr_step(fmt_t f, int use_master, uint64_t seed, uint64_t step, int stochastic,
                    int64_t n, float *out, int *exp_out)
{
    int64_t shape[1] = {n};
    tensor_t *w = tensor_new(f, 1, shape), *g = tensor_new(FMT_FP32, 1, shape);
    float *ones = malloc((size_t)n * sizeof *ones), *gv = malloc((size_t)n * sizeof *gv);
    float *buf = calloc((size_t)n, sizeof *buf);
    for (int64_t i = 0; i < n; i++) {
        ones[i] = 1.0f;
        gv[i] = -0.3f * 0x1.0p-14f; /* with lr 1: w += 0.3 * 2^-14 (exact in fp32) */
    }
    tensor_from_f32(w, ones);
    tensor_from_f32(g, gv);
    CHECK_STATUS(fx_sgd_step(w, g, use_master ? ones : NULL, buf, 1.0, 0.0, 0.0, 1.0,
                             stochastic, seed, step), FX_OK);
    if (use_master) CHECK(ones[0] == 1.0f + gv[0] * -1.0f, "master %a after the step", ones[0]);
    tensor_to_f32(w, out);
    *exp_out = fmt_is_shared_exponent(f) ? tensor_exp(w) : 0;
    tensor_free(w);
    tensor_free(g);
    free(ones);
    free(gv);
    free(buf);
}

static double fmt_step_at_one(fmt_t f, int e)
{
    if (f == FMT_FP16 || f == FMT_BF16) return float_step(f, 1.0);
    if (f == FMT_FP32) return 0x1.0p-23;
    return ldexp(1.0, e);
}

static void test_sr_through_sgd(void)
{
    const int64_t n = 4096;
    const int S = 8; /* seeds */
    /* the new master value 1 + 0.3 * 2^-14, rounded to fp32 (exactly what sr_step's update
     * gives: 1 - lr * g in double, then one rounding to fp32) */
    const float xf = 1.0f + 0.3f * 0x1.0p-14f;
    const double x = xf;
    float *out = malloc((size_t)n * sizeof *out), *out2 = malloc((size_t)n * sizeof *out2);
    for (int f = 0; f < FMT_COUNT; f++) {
        const char *fn = fmt_name((fmt_t)f);
        for (int use_master = 0; use_master < 2; use_master++) {
            int e = 0;
            /* nearest-even: stagnation (fp32 holds the update exactly) */
            sr_step((fmt_t)f, use_master, 1, 1, 0, n, out, &e);
            double s = fmt_step_at_one((fmt_t)f, e);
            double frac = (x - 1.0) / s - floor((x - 1.0) / s);
            double lo = 1.0 + floor((x - 1.0) / s) * s;
            if (f == FMT_FP32) {
                CHECK(out[0] == xf, "fp32 holds the update: %a", out[0]);
            } else {
                int all_lo = 1;
                for (int64_t i = 0; i < n; i++) all_lo &= out[i] == (float)(frac < 0.5 ? lo : lo + s);
                CHECK(all_lo, "%s master %d: round-to-nearest gives %a at [0]", fn, use_master,
                      out[0]);
            }
            /* stochastic: mean over n elements x S seeds */
            double sum = 0;
            long other = 0;
            for (int sd = 0; sd < S; sd++) {
                int e2 = 0;
                sr_step((fmt_t)f, use_master, 100 + (uint64_t)sd, 7, 1, n, out, &e2);
                if (fmt_is_shared_exponent((fmt_t)f))
                    CHECK(e2 == e, "%s: exponent %d with stochastic rounding, %d without", fn,
                          e2, e);
                for (int64_t i = 0; i < n; i++) {
                    sum += out[i];
                    if (f != FMT_FP32 && out[i] != (float)lo && out[i] != (float)(lo + s))
                        other++;
                }
            }
            double mean = sum / ((double)n * S);
            double se = sqrt(frac * (1 - frac) / ((double)n * S)) * s;
            CHECK(other == 0, "%s master %d: %ld values are neither neighbour", fn, use_master,
                  other);
            if (f == FMT_FP32)
                CHECK(mean == x, "fp32 ignores stochastic: mean %.12g", mean);
            else
                CHECK(fabs(mean - x) <= 5 * se && frac > 0,
                      "%s master %d: mean %.10g, exact %.10g, tolerance %.3g (step %a, p %.3f)",
                      fn, use_master, mean, x, 5 * se, s, frac);
            printf("stochastic %-8s master %d: step %a, P(up) %.4f, |mean - exact| %.3g "
                   "(tolerance %.3g)\n", fn, use_master, s, frac, fabs(mean - x), 5 * se);
            /* reproducible, and keyed by the step */
            sr_step((fmt_t)f, use_master, 100, 7, 1, n, out, &e);
            sr_step((fmt_t)f, use_master, 100, 7, 1, n, out2, &e);
            CHECK(memcmp(out, out2, (size_t)n * 4) == 0, "%s: same seed and step differ", fn);
            sr_step((fmt_t)f, use_master, 100, 8, 1, n, out2, &e);
            if (f != FMT_FP32)
                CHECK(memcmp(out, out2, (size_t)n * 4) != 0, "%s: step 8 repeats step 7", fn);
        }
    }
    free(out);
    free(out2);
}

/* The stochastic write of fx_sgd_step must not disturb the tensor's own rounding: its mode,
 * seed and stream continue as if the step had not switched them. */
static void test_sr_restores_tensor_rounding(void)
{
    for (int f = FMT_FLEX16_5; f <= FMT_DFP16; f++) {
        const char *fn = fmt_name((fmt_t)f);
        int64_t shape[1] = {1024};
        float v[1024], gv[1024], buf[1024], ra[1024], rb[1024];
        for (int i = 0; i < 1024; i++) {
            v[i] = 1.0f + (float)(i % 97) * 0x1.0p-20f; /* fractions of the step at 1.0 */
            gv[i] = 0.001f;
            buf[i] = 0;
        }
        tensor_t *a = tensor_new((fmt_t)f, 1, shape), *b = tensor_new((fmt_t)f, 1, shape);
        if (f == FMT_FLEX16_5) {
            /* a fixed exponent: a and b have different write histories, which would let
             * Autoflex choose different exponents */
            tensor_set_autoflex(a, "fixed");
            tensor_set_autoflex(b, "fixed");
            tensor_set_exp(a, -14);
            tensor_set_exp(b, -14);
        }
        tensor_t *g = tensor_new(FMT_FP32, 1, shape);
        tensor_from_f32(g, gv);
        /* nearest-even tensor: after a stochastic step, writes are nearest-even again */
        tensor_from_f32(b, v);
        CHECK_STATUS(fx_sgd_step(b, g, NULL, buf, 0.1, 0, 0, 1, 1, 5, 3), FX_OK);
        tensor_from_f32(a, v);
        tensor_from_f32(b, v);
        tensor_get_raw(a, ra);
        tensor_get_raw(b, rb);
        CHECK(memcmp(ra, rb, 2048) == 0 && tensor_exp(a) == tensor_exp(b),
              "%s: a stochastic step left the tensor's rounding changed", fn);
        /* stochastic tensor: its stream continues where it was */
        tensor_set_rounding(a, FX_ROUND_STOCHASTIC, 77);
        tensor_set_rounding(b, FX_ROUND_STOCHASTIC, 77);
        CHECK_STATUS(fx_sgd_step(b, g, NULL, buf, 0.1, 0, 0, 1, 1, 5, 3), FX_OK);
        tensor_from_f32(a, v);
        tensor_from_f32(b, v);
        tensor_get_raw(a, ra);
        tensor_get_raw(b, rb);
        CHECK(memcmp(ra, rb, 2048) == 0, "%s: the tensor's stochastic stream was disturbed", fn);
        tensor_free(a);
        tensor_free(b);
        tensor_free(g);
    }
}

/* fp16 with master and stochastic rounding: the master keeps the exact update. Across
 * backends the stochastic results are bit-identical. */
static void test_sr_backends(void)
{
    const int64_t n = 3000;
    float *ref[FMT_COUNT] = {0}, *out = malloc((size_t)n * sizeof *out);
    int ref_e[FMT_COUNT] = {0};
    for (int b = 0; b < flexpoint_backend_count(); b++) {
        if (!flexpoint_backend_available(b)) continue;
        flexpoint_set_backend(flexpoint_backend_name(b));
        for (int f = 1; f < FMT_COUNT; f++) {
            int e;
            sr_step((fmt_t)f, 0, 31, 2, 1, n, out, &e);
            if (!ref[f]) {
                ref[f] = malloc((size_t)n * sizeof *out);
                memcpy(ref[f], out, (size_t)n * sizeof *out);
                ref_e[f] = e;
            } else {
                CHECK(memcmp(ref[f], out, (size_t)n * 4) == 0 && e == ref_e[f],
                      "%s: stochastic step differs on backend %s", fmt_name((fmt_t)f),
                      flexpoint_backend_name(b));
            }
        }
    }
    for (int f = 0; f < FMT_COUNT; f++) free(ref[f]);
    free(out);
    flexpoint_set_backend(flexpoint_backend_name(flexpoint_backend_count() - 1));
}

/* --- bad input -------------------------------------------------------------------------------- */

static void check_msg(const char *what, const char *needle)
{
    const char *m = flexpoint_last_error();
    CHECK(m && strstr(m, needle) != NULL, "%s: message '%s' lacks '%s'", what, m ? m : "",
          needle);
}

static void test_bad_input(void)
{
    int64_t s34[2] = {3, 4}, s43[2] = {4, 3};
    tensor_t *w = tensor_new(FMT_DFP16, 2, s34), *g = tensor_new(FMT_FP32, 2, s34);
    tensor_t *g_bad = tensor_new(FMT_FP32, 2, s43);
    float init[12], master[12], buf[12], m[12], v[12];
    for (int i = 0; i < 12; i++) {
        init[i] = (float)i - 5.5f;
        master[i] = init[i];
        buf[i] = 0.25f * (float)i;
        m[i] = 0.5f;
        v[i] = 0.125f;
    }
    tensor_from_f32(w, init);
    tensor_from_f32(g, init);
    int16_t raw0[12], raw1[12];
    tensor_get_raw(w, raw0);
    int e0 = tensor_exp(w);
    float master0[12], buf0[12], m0[12], v0[12];
    memcpy(master0, master, sizeof master);
    memcpy(buf0, buf, sizeof buf);
    memcpy(m0, m, sizeof m);
    memcpy(v0, v, sizeof v);

    CHECK_STATUS(fx_sgd_step(w, g_bad, master, buf, 0.1, 0.9, 0, 1, 0, 0, 1), FX_ESHAPE);
    check_msg("sgd shape", "w.shape=[3, 4] != grad.shape=[4, 3]");
    CHECK_STATUS(fx_adam_step(w, g_bad, master, m, v, 0.1, 0.9, 0.99, 1e-8, 0, 1, 0, 0, 1),
                 FX_ESHAPE);
    check_msg("adam shape", "fx_adam_step");
    CHECK_STATUS(fx_sgd_step(NULL, g, master, buf, 0.1, 0.9, 0, 1, 0, 0, 1), FX_EINVAL);
    check_msg("w NULL", "w is NULL");
    CHECK_STATUS(fx_sgd_step(w, NULL, master, buf, 0.1, 0.9, 0, 1, 0, 0, 1), FX_EINVAL);
    check_msg("grad NULL", "grad is NULL");
    CHECK_STATUS(fx_sgd_step(w, g, master, NULL, 0.1, 0.9, 0, 1, 0, 0, 1), FX_EINVAL);
    check_msg("momentum_buf NULL", "momentum_buf is NULL");
    CHECK_STATUS(fx_sgd_step(w, g, master, buf, NAN, 0.9, 0, 1, 0, 0, 1), FX_EINVAL);
    check_msg("lr NaN", "fx_sgd_step: lr=nan");
    CHECK_STATUS(fx_sgd_step(w, g, master, buf, INFINITY, 0.9, 0, 1, 0, 0, 1), FX_EINVAL);
    check_msg("lr Inf", "lr=inf");
    CHECK_STATUS(fx_sgd_step(w, g, master, buf, -0.1, 0.9, 0, 1, 0, 0, 1), FX_EINVAL);
    check_msg("lr negative", "lr=-0.1");
    CHECK_STATUS(fx_sgd_step(w, g, master, buf, 0.1, NAN, 0, 1, 0, 0, 1), FX_EINVAL);
    check_msg("momentum NaN", "momentum=nan");
    CHECK_STATUS(fx_sgd_step(w, g, master, buf, 0.1, 0.9, -1, 1, 0, 0, 1), FX_EINVAL);
    check_msg("wd negative", "weight_decay=-1");
    CHECK_STATUS(fx_sgd_step(w, g, master, buf, 0.1, 0.9, 0, INFINITY, 0, 0, 1), FX_EINVAL);
    check_msg("grad_scale Inf", "grad_scale=inf");
    CHECK_STATUS(fx_sgd_step(w, g, buf, buf, 0.1, 0.9, 0, 1, 0, 0, 1), FX_EINVAL);
    check_msg("master == momentum_buf", "same buffer");

    CHECK_STATUS(fx_adam_step(w, g, master, NULL, v, 0.1, 0.9, 0.99, 1e-8, 0, 1, 0, 0, 1),
                 FX_EINVAL);
    check_msg("m NULL", "m is NULL");
    CHECK_STATUS(fx_adam_step(w, g, master, m, v, NAN, 0.9, 0.99, 1e-8, 0, 1, 0, 0, 1),
                 FX_EINVAL);
    check_msg("adam lr NaN", "fx_adam_step: lr=nan");
    CHECK_STATUS(fx_adam_step(w, g, master, m, v, 0.1, 1.0, 0.99, 1e-8, 0, 1, 0, 0, 1),
                 FX_EINVAL);
    check_msg("beta1 1", "beta1=1");
    CHECK_STATUS(fx_adam_step(w, g, master, m, v, 0.1, 0.9, -0.5, 1e-8, 0, 1, 0, 0, 1),
                 FX_EINVAL);
    check_msg("beta2 -0.5", "beta2=-0.5");
    CHECK_STATUS(fx_adam_step(w, g, master, m, v, 0.1, 0.9, 0.99, NAN, 0, 1, 0, 0, 1),
                 FX_EINVAL);
    check_msg("eps NaN", "eps=nan");
    CHECK_STATUS(fx_adam_step(w, g, master, m, v, 0.1, 0.9, 0.99, 1e-8, 0, 1, 0, 0, 0),
                 FX_EINVAL);
    check_msg("step 0", "step=0");
    CHECK_STATUS(fx_adam_step(w, g, master, m, m, 0.1, 0.9, 0.99, 1e-8, 0, 1, 0, 0, 1),
                 FX_EINVAL);
    check_msg("m == v", "same buffer");

    /* nothing changed by any failing call */
    tensor_get_raw(w, raw1);
    CHECK(memcmp(raw0, raw1, sizeof raw0) == 0 && tensor_exp(w) == e0,
          "a failing step changed w");
    CHECK(memcmp(master, master0, sizeof master) == 0 && memcmp(buf, buf0, sizeof buf) == 0 &&
              memcmp(m, m0, sizeof m) == 0 && memcmp(v, v0, sizeof v) == 0,
          "a failing step changed a buffer");

    /* momentum 0 needs no buffer; an empty tensor is a no-op */
    CHECK_STATUS(fx_sgd_step(w, g, master, NULL, 0.1, 0.0, 0, 1, 0, 0, 1), FX_OK);
    CHECK(fabsf(master[0] - (init[0] - 0.1f * init[0])) <= 1e-6f, "momentum 0: master %g",
          master[0]);
    int64_t s0[1] = {0};
    tensor_t *we = tensor_new(FMT_FP16, 1, s0), *ge = tensor_new(FMT_BF16, 1, s0);
    CHECK_STATUS(fx_sgd_step(we, ge, NULL, NULL, 0.1, 0, 0, 1, 1, 0, 1), FX_OK);
    CHECK_STATUS(fx_adam_step(we, ge, NULL, m, v, 0.1, 0.9, 0.99, 1e-8, 0, 1, 0, 0, 1), FX_OK);
    tensor_free(we);
    tensor_free(ge);
    tensor_free(w);
    tensor_free(g);
    tensor_free(g_bad);
}

/* Results do not depend on the thread count (the parallel paths start at 2^15 elements for the
 * update and 2^17 for fp16/bf16 stochastic rounding). */
static void test_threads(void)
{
    const int64_t n = 140001;
    int64_t shape[1] = {n};
    for (int f = 0; f < FMT_COUNT; f++) {
        uint16_t *raw[2];
        float *mst[2];
        for (int t = 0; t < 2; t++) {
            int prev = flexpoint_set_num_threads(t == 0 ? 1 : 4);
            tensor_t *w = tensor_new((fmt_t)f, 1, shape), *g = tensor_new(FMT_BF16, 1, shape);
            float *v = malloc((size_t)n * sizeof *v), *m = calloc((size_t)n, sizeof *m);
            float *vv = calloc((size_t)n, sizeof *vv);
            mst[t] = malloc((size_t)n * sizeof *mst[t]);
            test_rng r;
            test_rng_seed(&r, 8);
            for (int64_t i = 0; i < n; i++) v[i] = (float)test_rng_normal(&r);
            tensor_from_f32(w, v);
            tensor_from_f32(g, v);
            tensor_to_f32(w, mst[t]);
            CHECK_STATUS(fx_adam_step(w, g, mst[t], m, vv, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1, 0,
                                      0, 1), FX_OK);
            CHECK_STATUS(fx_sgd_step(w, g, NULL, m, 0.01, 0.9, 0, 1, 1, 3, 2), FX_OK);
            raw[t] = malloc((size_t)n * 4);
            tensor_get_raw(w, raw[t]);
            flexpoint_set_num_threads(prev);
            tensor_free(w);
            tensor_free(g);
            free(v);
            free(m);
            free(vv);
        }
        size_t bytes = (size_t)n * fmt_elem_size((fmt_t)f);
        CHECK(memcmp(raw[0], raw[1], bytes) == 0 && memcmp(mst[0], mst[1], (size_t)n * 4) == 0,
              "%s: 1 and 4 threads differ", fmt_name((fmt_t)f));
        for (int t = 0; t < 2; t++) {
            free(raw[t]);
            free(mst[t]);
        }
    }
}

/* w may be a strided view: the update reads and writes it through its strides. */
static void test_weight_view(void)
{
    const fmt_t fs[3] = {FMT_FP32, FMT_FP16, FMT_BF16};
    for (int q = 0; q < 3; q++) {
        int64_t bs[2] = {41, 23}, vs[2] = {23, 41};
        tensor_t *base = tensor_new(fs[q], 2, bs), *w = tensor_view_transpose(base, 0, 1);
        tensor_t *g = tensor_new(FMT_FP32, 2, vs);
        float v[943], master[943], buf[943] = {0}, bv[943];
        double mv[943];
        test_rng r;
        test_rng_seed(&r, 12);
        for (int i = 0; i < 943; i++) v[i] = (float)test_rng_normal(&r);
        tensor_from_f32(base, v);
        tensor_from_f32(g, v);
        tensor_to_f32(w, master);
        CHECK_STATUS(fx_sgd_step(w, g, master, buf, 0.1, 0.9, 0, 1, 0, 0, 1), FX_OK);
        for (int i = 0; i < 943; i++) mv[i] = master[i];
        CHECK(check_rounding_of(w, mv, NULL, 943, "transposed w") == 0, "%s view",
              fmt_name(fs[q]));
        /* the base holds the transpose of what the view shows */
        float wv[943];
        tensor_to_f32(w, wv);
        tensor_to_f32(base, bv);
        int ok = 1;
        for (int i = 0; i < 23; i++)
            for (int j = 0; j < 41; j++) ok &= wv[i * 41 + j] == bv[j * 23 + i];
        CHECK(ok, "%s: the view's write did not land transposed in the base", fmt_name(fs[q]));
        tensor_free(w);
        tensor_free(base);
        tensor_free(g);
    }
}

int main(void)
{
    test_reference_all_backends();
    test_sr_unit();
    test_sr_through_sgd();
    test_sr_restores_tensor_rounding();
    test_sr_backends();
    test_threads();
    test_weight_view();
    test_bad_input();
    return test_finish("test_nn_optim");
}
