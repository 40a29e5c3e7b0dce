/* Max pool (with argmax), average pool (count_include_pad) and global average pool, forward
 * and backward, for every format and every CPU backend, against fp64 references written here.
 *
 * 1. The fp64 backward references are checked against central finite differences of the
 *    fp64 forward references (max pool on inputs with distinct values, so that the argmax
 *    cannot move under the perturbation).
 * 2. Every case x format x backend: inputs are written into the format and read back, so the
 *    references see the rounded inputs. Bound per element (derived, not tuned):
 *      |y - r| <= acc + out_round
 *      acc: integer formats 0 (the sums are exact and the division is rounded once, see 3);
 *           float formats gamma_n * s with gamma_n = n u32 / (1 - n u32), s = sum|terms|
 *           (divided by the count for the averages), n = terms + 1 (fp32 sum, then one
 *           division); max pool forward: 0 (a selection).
 *      out_round: fp32 u32 |r|; fp16 u16 (|r| + acc) + 2^-25; bf16 u_bf (|r| + acc) + 2^-134;
 *           flex16_5/dfp16 2^(e_out - 1).
 *    The argmax equals the reference's (the first maximum in scan order) exactly. Integer
 *    formats: outputs and argmax are bit-identical on every backend and with 1 and 2 threads.
 * 3. Integer averages are correctly rounded: with a fixed output exponent (coarser, equal and
 *    finer than the input's) the mantissas equal the exact quotient rounded half to even,
 *    computed here with integers (ties included).
 * 4. Every pair of input and output formats; bad arguments give the documented status and a
 *    message naming the values, and leave the output untouched.
 */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "testutil.h"
#include "nn/pool_own.h" /* fx_pool_unpool_planes */
#include "core/internal.h" /* fx_tensor_set_disposable */
#include "core/backend.h"  /* fx_backend_active */

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define U32 0x1.0p-24
#define U16 0x1.0p-11
#define UBF 0x1.0p-8

typedef struct {
    const char *name;
    int64_t N, C, H, W;
    int kh, kw, sh, sw, ph, pw;
    int view; /* 1: x, dy and the outputs are strided views */
} pool_case;

static const pool_case CASES[] = {
    {"2x2 stride 2 (CNN pool 1) [8,32,28,28]", 8, 32, 28, 28, 2, 2, 2, 2, 0, 0, 0},
    {"2x2 stride 2 (CNN pool 2) [8,64,14,14]", 8, 64, 14, 14, 2, 2, 2, 2, 0, 0, 0},
    {"3x3 stride 2 pad 1 (overlapping)", 2, 3, 9, 10, 3, 3, 2, 2, 1, 1, 0},
    {"3x3 stride 1 pad 1 (heavy overlap)", 2, 2, 7, 7, 3, 3, 1, 1, 1, 1, 0},
    {"2x3 stride (1,2) pad (1,1)", 2, 3, 8, 9, 2, 3, 1, 2, 1, 1, 0},
    {"1x1 stride 1", 2, 3, 4, 5, 1, 1, 1, 1, 0, 0, 0},
    {"whole image 5x5", 3, 4, 5, 5, 5, 5, 1, 1, 0, 0, 0},
    {"3x3 stride 3, 10x11 (floor)", 2, 2, 10, 11, 3, 3, 3, 3, 0, 0, 0},
    {"views 2x2 stride 2", 2, 3, 6, 8, 2, 2, 2, 2, 0, 0, 1},
    {"2x2 stride 2, 7x9 (floor: last row and column unused)", 2, 3, 7, 9, 2, 2, 2, 2, 0, 0, 0},
    {"2x2 stride 2, planes of 5,293 values (fp16/bf16: row pairs)", 1, 2, 67, 79, 2, 2, 2, 2, 0, 0, 0},
};

typedef struct {
    const char *name;
    int64_t N, C, H, W;
    int y4d;  /* y as [N,C,1,1] instead of [N,C] */
    int view; /* x and dx as strided views */
} global_case;

static const global_case GCASES[] = {
    {"global 8x8 (ResNet-20 head, count 64)", 4, 64, 8, 8, 0, 0},
    {"global 7x6 (count 42)", 3, 5, 7, 6, 1, 0},
    {"global 1x1", 2, 3, 1, 1, 0, 0},
    {"global views 5x3 (count 15)", 2, 4, 5, 3, 1, 1},
};

typedef struct {
    int64_t N, C, H, W, OH, OW;
    int kh, kw, sh, sw, ph, pw;
} geom;

static geom geom_of(const pool_case *c)
{
    geom g = {c->N, c->C, c->H, c->W, 0, 0, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw};
    g.OH = (g.H + 2 * g.ph - g.kh) / g.sh + 1;
    g.OW = (g.W + 2 * g.pw - g.kw) / g.sw + 1;
    return g;
}

/* ---- fp64 references (direct loops) ------------------------------------------------------- */

/* Visit the input positions of window (oh, ow) that lie inside x, in scan order. */
#define FOR_WINDOW(g, oh, ow, ih, iw)                                                          \
    for (int64_t ih = (oh) * (g)->sh - (g)->ph; ih < (oh) * (g)->sh - (g)->ph + (g)->kh; ih++) \
        if (ih >= 0 && ih < (g)->H)                                                            \
            for (int64_t iw = (ow) * (g)->sw - (g)->pw;                                        \
                 iw < (ow) * (g)->sw - (g)->pw + (g)->kw; iw++)                                \
                if (iw >= 0 && iw < (g)->W)

/* y = the first maximum of each window in scan order; am = its flat index into x. */
static void ref_maxpool(const geom *g, const double *x, double *y, int32_t *am)
{
    for (int64_t p = 0; p < g->N * g->C; p++)
        for (int64_t oh = 0; oh < g->OH; oh++)
            for (int64_t ow = 0; ow < g->OW; ow++) {
                double best = -INFINITY;
                int64_t at = -1;
                FOR_WINDOW(g, oh, ow, ih, iw)
                {
                    int64_t i = (p * g->H + ih) * g->W + iw;
                    if (at < 0 || x[i] > best) {
                        best = x[i];
                        at = i;
                    }
                }
                y[(p * g->OH + oh) * g->OW + ow] = best;
                am[(p * g->OH + oh) * g->OW + ow] = (int32_t)at;
            }
}

/* dx[am[i]] += dy[i]; s: sum of |terms|; n: number of terms per element. */
static void ref_maxpool_backward(const geom *g, const double *dy, const int32_t *am, double *dx,
                                 double *s, double *n)
{
    int64_t nx = g->N * g->C * g->H * g->W, ny = g->N * g->C * g->OH * g->OW;
    for (int64_t i = 0; i < nx; i++) dx[i] = s[i] = n[i] = 0;
    for (int64_t i = 0; i < ny; i++) {
        dx[am[i]] += dy[i];
        s[am[i]] += fabs(dy[i]);
        n[am[i]] += 1;
    }
}

/* y = (sum of the window's inputs inside x) / (kh*kw); s = sum|x| / (kh*kw). */
static void ref_avgpool(const geom *g, const double *x, double *y, double *s)
{
    double cnt = (double)g->kh * g->kw;
    for (int64_t p = 0; p < g->N * g->C; p++)
        for (int64_t oh = 0; oh < g->OH; oh++)
            for (int64_t ow = 0; ow < g->OW; ow++) {
                double acc = 0, sa = 0;
                FOR_WINDOW(g, oh, ow, ih, iw)
                {
                    acc += x[(p * g->H + ih) * g->W + iw];
                    sa += fabs(x[(p * g->H + ih) * g->W + iw]);
                }
                y[(p * g->OH + oh) * g->OW + ow] = acc / cnt;
                s[(p * g->OH + oh) * g->OW + ow] = sa / cnt;
            }
}

/* Every window sends dy / (kh*kw) to each of its inputs inside x. */
static void ref_avgpool_backward(const geom *g, const double *dy, double *dx, double *s,
                                 double *n)
{
    double cnt = (double)g->kh * g->kw;
    int64_t nx = g->N * g->C * g->H * g->W;
    for (int64_t i = 0; i < nx; i++) dx[i] = s[i] = n[i] = 0;
    for (int64_t p = 0; p < g->N * g->C; p++)
        for (int64_t oh = 0; oh < g->OH; oh++)
            for (int64_t ow = 0; ow < g->OW; ow++) {
                double d = dy[(p * g->OH + oh) * g->OW + ow];
                FOR_WINDOW(g, oh, ow, ih, iw)
                {
                    int64_t i = (p * g->H + ih) * g->W + iw;
                    dx[i] += d / cnt;
                    s[i] += fabs(d) / cnt;
                    n[i] += 1;
                }
            }
}

static void ref_global(int64_t planes, int64_t hw, const double *x, double *y, double *s)
{
    for (int64_t p = 0; p < planes; p++) {
        double acc = 0, sa = 0;
        for (int64_t i = 0; i < hw; i++) {
            acc += x[p * hw + i];
            sa += fabs(x[p * hw + i]);
        }
        y[p] = acc / (double)hw;
        s[p] = sa / (double)hw;
    }
}

static void ref_global_backward(int64_t planes, int64_t hw, const double *dy, double *dx,
                                double *s)
{
    for (int64_t p = 0; p < planes; p++)
        for (int64_t i = 0; i < hw; i++) {
            dx[p * hw + i] = dy[p] / (double)hw;
            s[p * hw + i] = fabs(dy[p]) / (double)hw;
        }
}

/* ---- 1. backward references against finite differences ----------------------------------- */

static const pool_case FD_CASES[] = {
    {"fd 3x3 stride 2 pad 1", 2, 2, 7, 8, 3, 3, 2, 2, 1, 1, 0},
    {"fd 2x3 stride (1,2) pad (1,1)", 1, 2, 5, 7, 2, 3, 1, 2, 1, 1, 0},
    {"fd 2x2 stride 2", 1, 3, 6, 6, 2, 2, 2, 2, 0, 0, 0},
};

static void fd_check(void)
{
    const double h = 1e-3;
    for (size_t ci = 0; ci < sizeof FD_CASES / sizeof *FD_CASES; ci++) {
        const pool_case *c = &FD_CASES[ci];
        geom g = geom_of(c);
        int64_t nx = g.N * g.C * g.H * g.W, ny = g.N * g.C * g.OH * g.OW;
        double *x = malloc(sizeof(double) * (size_t)nx), *gy = malloc(sizeof(double) * (size_t)ny);
        double *y = malloc(sizeof(double) * (size_t)ny), *s = malloc(sizeof(double) * (size_t)ny);
        double *dmax = malloc(sizeof(double) * (size_t)nx);
        double *davg = malloc(sizeof(double) * (size_t)nx);
        double *t1 = malloc(sizeof(double) * (size_t)nx), *t2 = malloc(sizeof(double) * (size_t)nx);
        int32_t *am = malloc(sizeof(int32_t) * (size_t)ny);
        int32_t *am2 = malloc(sizeof(int32_t) * (size_t)ny);
        test_rng r;
        test_rng_seed(&r, 99 + ci);
        /* distinct values 1/8 apart (a shuffled ramp): the perturbation never moves a max */
        for (int64_t i = 0; i < nx; i++) x[i] = (double)i / 8.0 - (double)nx / 16.0;
        for (int64_t i = nx - 1; i > 0; i--) {
            int64_t j = test_rng_range(&r, 0, i);
            double t = x[i];
            x[i] = x[j];
            x[j] = t;
        }
        for (int64_t i = 0; i < ny; i++) gy[i] = test_rng_normal(&r);
        ref_maxpool(&g, x, y, am);
        ref_maxpool_backward(&g, gy, am, dmax, t1, t2);
        ref_avgpool_backward(&g, gy, davg, t1, t2);
        double worst = 0;
        for (int64_t i = 0; i < nx; i++) {
            double keep = x[i], lp[2] = {0, 0}, lm[2] = {0, 0};
            x[i] = keep + h;
            ref_maxpool(&g, x, y, am2);
            for (int64_t k = 0; k < ny; k++) lp[0] += gy[k] * y[k];
            ref_avgpool(&g, x, y, s);
            for (int64_t k = 0; k < ny; k++) lp[1] += gy[k] * y[k];
            x[i] = keep - h;
            ref_maxpool(&g, x, y, am2);
            for (int64_t k = 0; k < ny; k++) lm[0] += gy[k] * y[k];
            ref_avgpool(&g, x, y, s);
            for (int64_t k = 0; k < ny; k++) lm[1] += gy[k] * y[k];
            x[i] = keep;
            double fmax = (lp[0] - lm[0]) / (2 * h), favg = (lp[1] - lm[1]) / (2 * h);
            double e1 = fabs(fmax - dmax[i]), e2 = fabs(favg - davg[i]);
            if (e1 > worst) worst = e1;
            if (e2 > worst) worst = e2;
            CHECK(e1 <= 1e-8 * (1 + fabs(dmax[i])), "FD %s max: dx[%lld] ref %.12g fd %.12g",
                  c->name, (long long)i, dmax[i], fmax);
            CHECK(e2 <= 1e-8 * (1 + fabs(davg[i])), "FD %s avg: dx[%lld] ref %.12g fd %.12g",
                  c->name, (long long)i, davg[i], favg);
        }
        printf("finite differences %-32s: max |fd - ref| %.3g\n", c->name, worst);
        free(x);
        free(gy);
        free(y);
        free(s);
        free(dmax);
        free(davg);
        free(t1);
        free(t2);
        free(am);
        free(am2);
    }
    /* global average pool: planes of 3x4 */
    {
        int64_t planes = 6, hw = 12;
        double x[72], gy[6], y[6], s[72], dx[72];
        test_rng r;
        test_rng_seed(&r, 7);
        for (int i = 0; i < 72; i++) x[i] = test_rng_normal(&r);
        for (int i = 0; i < 6; i++) gy[i] = test_rng_normal(&r);
        ref_global_backward(planes, hw, gy, dx, s);
        for (int i = 0; i < 72; i++) {
            double keep = x[i], lp = 0, lm = 0;
            x[i] = keep + h;
            ref_global(planes, hw, x, y, s);
            for (int k = 0; k < 6; k++) lp += gy[k] * y[k];
            x[i] = keep - h;
            ref_global(planes, hw, x, y, s);
            for (int k = 0; k < 6; k++) lm += gy[k] * y[k];
            x[i] = keep;
            double fd = (lp - lm) / (2 * h);
            CHECK(fabs(fd - dx[i]) <= 1e-8 * (1 + fabs(dx[i])),
                  "FD global: dx[%d] ref %.12g fd %.12g", i, dx[i], fd);
        }
        printf("finite differences %-32s: checked\n", "global average pool");
    }
}

/* ---- 2. every case x format x backend ------------------------------------------------------ */

static double ulp_rel(fmt_t f)
{
    return f == FMT_FP32 ? U32 : (f == FMT_FP16 ? U16 : (f == FMT_BF16 ? UBF : 0.0));
}

static double abs_floor(fmt_t f)
{
    if (f == FMT_FP16) return 0x1.0p-25;
    if (f == FMT_BF16) return 0x1.0p-134;
    return f == FMT_FP32 ? 0x1.0p-150 : 0.0;
}

static double gamma_n(double n) { return n * U32 / (1.0 - n * U32); }

/* A tensor of logical shape `shape` (ndim 2 or 4): plain, or (view) every second element of a
 * twice-as-wide storage. *owner: the base to free as well. */
static tensor_t *new_tensor(fmt_t f, int ndim, const int64_t *shape, int view, tensor_t **owner)
{
    int64_t st[4];
    memcpy(st, shape, sizeof(int64_t) * (size_t)ndim);
    *owner = NULL;
    if (!view) return tensor_new(f, ndim, st);
    st[ndim - 1] *= 2;
    *owner = tensor_new(f, ndim, st);
    return tensor_view_slice(*owner, ndim - 1, 0, st[ndim - 1], 2);
}

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

/* Input filled from v; v receives the values as rounded into f. For views, the whole base is
 * written first (the view's elements share its exponent). */
static tensor_t *make_input(fmt_t f, int ndim, const int64_t *shape, int view, double *v,
                            tensor_t **owner)
{
    tensor_t *t = new_tensor(f, ndim, shape, view, owner);
    int64_t n = numel_of(ndim, shape);
    float *buf = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) buf[i] = (float)v[i];
    if (*owner) {
        int64_t bn = tensor_numel(*owner);
        float *bb = malloc(sizeof(float) * (size_t)bn);
        for (int64_t i = 0; i < bn; i++) bb[i] = buf[i % n];
        CHECK_STATUS(tensor_from_f32(*owner, bb), FX_OK);
        free(bb);
    }
    CHECK_STATUS(tensor_from_f32(t, buf), FX_OK);
    CHECK_STATUS(tensor_to_f32(t, buf), FX_OK);
    for (int64_t i = 0; i < n; i++) v[i] = buf[i];
    free(buf);
    return t;
}

/* Output; for views the base is first written with values of magnitude mag, so that a shared
 * exponent (kept by a partial write) suits the result. */
static tensor_t *make_output(fmt_t f, int ndim, const int64_t *shape, int view, double mag,
                             tensor_t **owner)
{
    tensor_t *t = new_tensor(f, ndim, shape, view, owner);
    if (*owner) {
        int64_t bn = tensor_numel(*owner);
        float *bb = malloc(sizeof(float) * (size_t)bn);
        for (int64_t i = 0; i < bn; i++) bb[i] = (float)(mag * (i % 3 - 1));
        CHECK_STATUS(tensor_from_f32(*owner, bb), FX_OK);
        free(bb);
    }
    return t;
}

typedef enum { P_MAX, P_MAX_BWD, P_AVG, P_AVG_BWD, P_GLOBAL, P_GLOBAL_BWD, P_COUNT } pool_op;
static const char *const OP_NAMES[P_COUNT] = {"max", "max backward", "avg", "avg backward",
                                              "global avg", "global avg backward"};

/* Reference of one op: values r, sum of |terms| s (already divided for averages), terms n. */
typedef struct {
    int64_t count;
    double *r, *s, *n;
    double nconst; /* used when n is NULL */
    double maxabs;
} ref_t;

/* Compare an output with its reference under the bound; integer outputs are also compared bit
 * for bit with the first run (*first_raw, *first_exp). */
static void check_out(const char *what, fmt_t fin, fmt_t fout, const char *tag, tensor_t *out,
                      const ref_t *R, int16_t **first_raw, int *first_exp, double *worst)
{
    int64_t n = R->count;
    float *y = malloc(sizeof(float) * (size_t)n);
    CHECK_STATUS(tensor_to_f32(out, y), FX_OK);
    int int_out = fmt_is_shared_exponent(fout), int_in = fmt_is_shared_exponent(fin);
    double step = int_out ? ldexp(1.0, tensor_exp(out) - 1) : 0.0;
    double uo = ulp_rel(fout), fl = abs_floor(fout), maxerr = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = R->r[i], err = fabs((double)y[i] - r);
        double terms = R->n ? R->n[i] : R->nconst;
        double acc = int_in || terms == 0 ? 0.0 : gamma_n(terms + 1) * R->s[i];
        double bound = acc + (int_out ? step : uo * (fabs(r) + acc) + fl);
        if (err > bound * (1 + 1e-12) && bad++ < 3)
            CHECK(0, "%s %s->%s %s: element %lld y=%.9g ref=%.9g err=%.3g bound=%.3g", what,
                  fmt_name(fin), fmt_name(fout), tag, (long long)i, y[i], r, err, bound);
        if (err > maxerr) maxerr = err;
    }
    CHECK(bad == 0, "%s %s->%s %s: %d elements outside the bound", what, fmt_name(fin),
          fmt_name(fout), tag, bad);
    double nw = R->maxabs > 0 ? maxerr / R->maxabs : maxerr;
    if (nw > *worst) *worst = nw;
    if (int_out) {
        double sat = -1;
        CHECK_STATUS(tensor_stat(out, "saturated", &sat), FX_OK);
        CHECK(sat == 0, "%s %s %s: %g saturated", what, fmt_name(fout), tag, sat);
        if (first_raw) {
            int16_t *raw = malloc(sizeof(int16_t) * (size_t)n);
            CHECK_STATUS(tensor_get_raw(out, raw), FX_OK);
            if (!*first_raw) {
                *first_raw = raw;
                *first_exp = tensor_exp(out);
            } else {
                CHECK(*first_exp == tensor_exp(out) &&
                          memcmp(*first_raw, raw, sizeof(int16_t) * (size_t)n) == 0,
                      "%s %s %s: not bit-identical to the first run", what, fmt_name(fout), tag);
                free(raw);
            }
        }
    }
    free(y);
}

static double max_abs(const double *v, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(v[i]) > m) m = fabs(v[i]);
    return m;
}

static void fill_normal(test_rng *r, double *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) v[i] = test_rng_normal(r);
}

typedef struct {
    int16_t *raw[P_COUNT];
    int exp[P_COUNT];
    int32_t *argmax;
} first_runs;

/* The four windowed ops of case c, input format f, output format fo, on the active backend. */
static void run_windowed(const pool_case *c, fmt_t f, fmt_t fo, const char *tag, tensor_t *tx,
                         tensor_t *tdy, const ref_t *R, const int32_t *am_ref, first_runs *fr,
                         double *worst)
{
    geom g = geom_of(c);
    int64_t xs[4] = {g.N, g.C, g.H, g.W}, ys[4] = {g.N, g.C, g.OH, g.OW};
    int64_t ny = numel_of(4, ys);
    int32_t *am = malloc(sizeof(int32_t) * (size_t)ny);
    for (int op = P_MAX; op <= P_AVG_BWD; op++) {
        int bwd = op == P_MAX_BWD || op == P_AVG_BWD;
        tensor_t *owner;
        tensor_t *out = make_output(fo, 4, bwd ? xs : ys, c->view, 1.1 * R[op].maxabs, &owner);
        int rc;
        switch (op) {
        case P_MAX:
            rc = tensor_maxpool2d(out, am, tx, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw);
            break;
        case P_MAX_BWD: rc = tensor_maxpool2d_backward(out, tdy, am_ref); break;
        case P_AVG: rc = tensor_avgpool2d(out, tx, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw); break;
        default:
            rc = tensor_avgpool2d_backward(out, tdy, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw);
            break;
        }
        char what[160];
        snprintf(what, sizeof what, "%s %s", c->name, OP_NAMES[op]);
        CHECK(rc == FX_OK, "%s %s %s: status %d: %s", what, fmt_name(f), tag, rc,
              flexpoint_last_error());
        if (rc == FX_OK) {
            int same = f == fo && fr;
            check_out(what, f, fo, tag, out, &R[op], same ? &fr->raw[op] : NULL,
                      same ? &fr->exp[op] : NULL, &worst[op]);
        }
        if (op == P_MAX && rc == FX_OK) {
            int64_t bad = 0;
            for (int64_t i = 0; i < ny; i++) bad += am[i] != am_ref[i];
            CHECK(bad == 0, "%s %s %s: %lld argmax entries differ from the reference", what,
                  fmt_name(f), tag, (long long)bad);
            if (fr && fmt_is_shared_exponent(f)) {
                if (!fr->argmax) {
                    fr->argmax = malloc(sizeof(int32_t) * (size_t)ny);
                    memcpy(fr->argmax, am, sizeof(int32_t) * (size_t)ny);
                } else {
                    CHECK(memcmp(fr->argmax, am, sizeof(int32_t) * (size_t)ny) == 0,
                          "%s %s %s: argmax not identical to the first run", what, fmt_name(f),
                          tag);
                }
            }
        }
        tensor_free(out);
        tensor_free(owner);
    }
    free(am);
}

static void ref_alloc(ref_t *R, int64_t count, int with_n)
{
    R->count = count;
    R->r = malloc(sizeof(double) * (size_t)count);
    R->s = malloc(sizeof(double) * (size_t)count);
    R->n = with_n ? malloc(sizeof(double) * (size_t)count) : NULL;
}

static void ref_release(ref_t *R)
{
    free(R->r);
    free(R->s);
    free(R->n);
}

static void run_case(const pool_case *c, fmt_t f, int *last_backend)
{
    geom g = geom_of(c);
    int64_t xs[4] = {g.N, g.C, g.H, g.W}, ys[4] = {g.N, g.C, g.OH, g.OW};
    int64_t nx = numel_of(4, xs), ny = numel_of(4, ys);
    double *x = malloc(sizeof(double) * (size_t)nx), *dy = malloc(sizeof(double) * (size_t)ny);
    test_rng rng;
    test_rng_seed(&rng, 500 + (uint64_t)(c - CASES) * 13);
    fill_normal(&rng, x, nx);
    fill_normal(&rng, dy, ny);
    tensor_t *ox, *ody;
    tensor_t *tx = make_input(f, 4, xs, c->view, x, &ox);
    tensor_t *tdy = make_input(f, 4, ys, c->view, dy, &ody);

    ref_t R[P_COUNT];
    memset(R, 0, sizeof R);
    int32_t *am_ref = malloc(sizeof(int32_t) * (size_t)ny);
    ref_alloc(&R[P_MAX], ny, 0);
    ref_alloc(&R[P_MAX_BWD], nx, 1);
    ref_alloc(&R[P_AVG], ny, 0);
    ref_alloc(&R[P_AVG_BWD], nx, 1);
    ref_maxpool(&g, x, R[P_MAX].r, am_ref);
    memset(R[P_MAX].s, 0, sizeof(double) * (size_t)ny);
    R[P_MAX].nconst = 0; /* a selection: no arithmetic */
    ref_maxpool_backward(&g, dy, am_ref, R[P_MAX_BWD].r, R[P_MAX_BWD].s, R[P_MAX_BWD].n);
    ref_avgpool(&g, x, R[P_AVG].r, R[P_AVG].s);
    R[P_AVG].nconst = (double)c->kh * c->kw;
    ref_avgpool_backward(&g, dy, R[P_AVG_BWD].r, R[P_AVG_BWD].s, R[P_AVG_BWD].n);
    for (int op = P_MAX; op <= P_AVG_BWD; op++) R[op].maxabs = max_abs(R[op].r, R[op].count);

    first_runs fr;
    memset(&fr, 0, sizeof fr);
    double worst[P_COUNT] = {0};
    int integer = fmt_is_shared_exponent(f);
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        const char *bn = flexpoint_backend_name(bi);
        CHECK_STATUS(flexpoint_set_backend(bn), FX_OK);
        for (int threads = 2; threads >= (integer && bi == *last_backend ? 1 : 2); threads--) {
            char tag[64];
            snprintf(tag, sizeof tag, "%s/%dT", bn, threads);
            flexpoint_set_num_threads(threads);
            run_windowed(c, f, f, tag, tx, tdy, R, am_ref, &fr, worst);
        }
    }
    flexpoint_set_num_threads(2);
    printf("  %-40s %-8s worst normwise: max %.3g, max bwd %.3g, avg %.3g, avg bwd %.3g\n",
           c->name, fmt_name(f), worst[0], worst[1], worst[2], worst[3]);
    for (int op = 0; op < P_COUNT; op++) {
        free(fr.raw[op]);
        ref_release(&R[op]);
    }
    free(fr.argmax);
    free(am_ref);
    tensor_free(tx);
    tensor_free(tdy);
    tensor_free(ox);
    tensor_free(ody);
    free(x);
    free(dy);
}

static void run_global(const global_case *c, fmt_t f, int *last_backend)
{
    int64_t xs[4] = {c->N, c->C, c->H, c->W}, ys[4] = {c->N, c->C, 1, 1};
    int yd = c->y4d ? 4 : 2;
    int64_t planes = c->N * c->C, hw = c->H * c->W, nx = planes * hw;
    double *x = malloc(sizeof(double) * (size_t)nx), *dy = malloc(sizeof(double) * (size_t)planes);
    test_rng rng;
    test_rng_seed(&rng, 900 + (uint64_t)(c - GCASES));
    fill_normal(&rng, x, nx);
    fill_normal(&rng, dy, planes);
    tensor_t *ox, *ody;
    tensor_t *tx = make_input(f, 4, xs, c->view, x, &ox);
    tensor_t *tdy = make_input(f, yd, ys, 0, dy, &ody);
    ref_t R[2];
    memset(R, 0, sizeof R);
    ref_alloc(&R[0], planes, 0);
    ref_alloc(&R[1], nx, 0);
    ref_global(planes, hw, x, R[0].r, R[0].s);
    ref_global_backward(planes, hw, dy, R[1].r, R[1].s);
    R[0].nconst = (double)hw;
    R[1].nconst = 1; /* one division */
    for (int k = 0; k < 2; k++) R[k].maxabs = max_abs(R[k].r, R[k].count);

    int16_t *raw[2] = {NULL, NULL};
    int ex[2] = {0, 0};
    double worst[2] = {0, 0};
    int integer = fmt_is_shared_exponent(f);
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        const char *bn = flexpoint_backend_name(bi);
        CHECK_STATUS(flexpoint_set_backend(bn), FX_OK);
        for (int threads = 2; threads >= (integer && bi == *last_backend ? 1 : 2); threads--) {
            char tag[64];
            snprintf(tag, sizeof tag, "%s/%dT", bn, threads);
            flexpoint_set_num_threads(threads);
            for (int k = 0; k < 2; k++) {
                tensor_t *owner;
                tensor_t *out = k == 0 ? make_output(f, yd, ys, 0, 0, &owner)
                                       : make_output(f, 4, xs, c->view, 1.1 * R[1].maxabs, &owner);
                int rc = k == 0 ? tensor_global_avgpool(out, tx)
                                : tensor_global_avgpool_backward(out, tdy);
                char what[160];
                snprintf(what, sizeof what, "%s %s", c->name, OP_NAMES[P_GLOBAL + k]);
                CHECK(rc == FX_OK, "%s %s %s: status %d: %s", what, fmt_name(f), tag, rc,
                      flexpoint_last_error());
                if (rc == FX_OK) check_out(what, f, f, tag, out, &R[k], &raw[k], &ex[k], &worst[k]);
                tensor_free(out);
                tensor_free(owner);
            }
        }
    }
    flexpoint_set_num_threads(2);
    printf("  %-40s %-8s worst normwise: fwd %.3g, bwd %.3g\n", c->name, fmt_name(f), worst[0],
           worst[1]);
    for (int k = 0; k < 2; k++) {
        free(raw[k]);
        ref_release(&R[k]);
    }
    tensor_free(tx);
    tensor_free(tdy);
    tensor_free(ox);
    tensor_free(ody);
    free(x);
    free(dy);
}

/* ---- 3. integer averages are correctly rounded -------------------------------------------- */

/* round(num / den) to nearest, ties to even, den > 0, exactly. */
static int64_t div_rne(int64_t num, int64_t den)
{
    int64_t q = num / den, r = num % den; /* C truncates toward zero */
    if (r < 0) {
        q -= 1;
        r += den;
    }
    if (2 * r > den || (2 * r == den && (q & 1))) q += 1;
    return q;
}

/* Exact expected mantissa of sum * 2^e_in / count at exponent e_out. */
static int64_t expected_mant(int64_t sum, int64_t count, int e_in, int e_out)
{
    int d = e_out - e_in;
    return d >= 0 ? div_rne(sum, count << d) : div_rne(sum * ((int64_t)1 << -d), count);
}

static tensor_t *fixed_flex(int ndim, const int64_t *shape, int e)
{
    tensor_t *t = tensor_new(FMT_FLEX16_5, ndim, shape);
    CHECK_STATUS(tensor_set_autoflex(t, "fixed"), FX_OK);
    CHECK_STATUS(tensor_set_exp(t, e), FX_OK);
    return t;
}

static void exact_rounding(void)
{
    const int e_in = -12;
    const int shifts[3] = {3, 0, -2};
    const int kernels[2][2] = {{3, 3}, {2, 2}}; /* count 9 (divisions), count 4 (exponent) */
    int64_t xs[4] = {2, 3, 9, 8};
    int64_t nx = numel_of(4, xs);
    float *xv = malloc(sizeof(float) * (size_t)nx);
    int16_t *xm = malloc(sizeof(int16_t) * (size_t)nx);
    test_rng r;
    test_rng_seed(&r, 31337);
    /* values in [-1, 1] at exponent -12: mantissas up to 4096, so even the finest output
     * exponent (-14) stays below 32767 */
    for (int64_t i = 0; i < nx; i++) xv[i] = (float)(2 * test_rng_uniform(&r) - 1);
    tensor_t *x = fixed_flex(4, xs, e_in);
    CHECK_STATUS(tensor_from_f32(x, xv), FX_OK);
    CHECK_STATUS(tensor_get_raw(x, xm), FX_OK);
    int64_t checked = 0, ties = 0;
    for (int k = 0; k < 2; k++) {
        pool_case pc = {"exact", 2, 3, 9, 8, kernels[k][0], kernels[k][1], 1, 1, 1, 1, 0};
        geom g = geom_of(&pc);
        int64_t ys[4] = {g.N, g.C, g.OH, g.OW}, ny = numel_of(4, ys);
        int64_t count = (int64_t)pc.kh * pc.kw;
        int16_t *got = malloc(sizeof(int16_t) * (size_t)(nx > ny ? nx : ny));
        int64_t *sums = malloc(sizeof(int64_t) * (size_t)nx);
        for (int si = 0; si < 3; si++) {
            int e_out = e_in + shifts[si];
            /* forward: window sums of mantissas */
            tensor_t *y = fixed_flex(4, ys, e_out);
            CHECK_STATUS(tensor_avgpool2d(y, x, pc.kh, pc.kw, 1, 1, 1, 1), FX_OK);
            CHECK_STATUS(tensor_get_raw(y, got), FX_OK);
            for (int64_t p = 0; p < g.N * g.C; p++)
                for (int64_t oh = 0; oh < g.OH; oh++)
                    for (int64_t ow = 0; ow < g.OW; ow++) {
                        int64_t sum = 0, o = (p * g.OH + oh) * g.OW + ow;
                        FOR_WINDOW(&g, oh, ow, ih, iw) sum += xm[(p * g.H + ih) * g.W + iw];
                        int64_t want = expected_mant(sum, count, e_in, e_out);
                        int d = e_out - e_in;
                        int64_t den = d >= 0 ? count << d : count;
                        int64_t num = d >= 0 ? sum : sum * ((int64_t)1 << -d);
                        ties += (2 * (num % den)) == den || (2 * (num % den)) == -den;
                        checked++;
                        CHECK(got[o] == want,
                              "avgpool %dx%d e_out %d: [%lld] %d != %lld (sum %lld)", pc.kh,
                              pc.kw, e_out, (long long)o, got[o], (long long)want,
                              (long long)sum);
                    }
            /* backward: dx = (sum of the covering windows' dy) / count, with dy = x's data */
            tensor_t *dy = fixed_flex(4, ys, e_in);
            float *dyv = malloc(sizeof(float) * (size_t)ny);
            int16_t *dym = malloc(sizeof(int16_t) * (size_t)ny);
            for (int64_t i = 0; i < ny; i++) dyv[i] = xv[i % nx];
            CHECK_STATUS(tensor_from_f32(dy, dyv), FX_OK);
            CHECK_STATUS(tensor_get_raw(dy, dym), FX_OK);
            tensor_t *dx = fixed_flex(4, xs, e_out);
            CHECK_STATUS(tensor_avgpool2d_backward(dx, dy, pc.kh, pc.kw, 1, 1, 1, 1), FX_OK);
            CHECK_STATUS(tensor_get_raw(dx, got), FX_OK);
            memset(sums, 0, sizeof(int64_t) * (size_t)nx);
            for (int64_t p = 0; p < g.N * g.C; p++)
                for (int64_t oh = 0; oh < g.OH; oh++)
                    for (int64_t ow = 0; ow < g.OW; ow++)
                        FOR_WINDOW(&g, oh, ow, ih, iw)
                            sums[(p * g.H + ih) * g.W + iw] += dym[(p * g.OH + oh) * g.OW + ow];
            for (int64_t i = 0; i < nx; i++) {
                int64_t want = expected_mant(sums[i], count, e_in, e_out);
                checked++;
                CHECK(got[i] == want, "avgpool backward %dx%d e_out %d: [%lld] %d != %lld",
                      pc.kh, pc.kw, e_out, (long long)i, got[i], (long long)want);
            }
            tensor_free(y);
            tensor_free(dy);
            tensor_free(dx);
            free(dyv);
            free(dym);
        }
        free(got);
        free(sums);
    }
    /* global average pool over 9x8 = 72 elements per plane */
    for (int si = 0; si < 3; si++) {
        int e_out = e_in + shifts[si];
        int64_t ys[2] = {2, 3};
        tensor_t *y = fixed_flex(2, ys, e_out);
        int16_t got[6];
        CHECK_STATUS(tensor_global_avgpool(y, x), FX_OK);
        CHECK_STATUS(tensor_get_raw(y, got), FX_OK);
        for (int p = 0; p < 6; p++) {
            int64_t sum = 0;
            for (int i = 0; i < 72; i++) sum += xm[p * 72 + i];
            int64_t want = expected_mant(sum, 72, e_in, e_out);
            checked++;
            CHECK(got[p] == want, "global avg e_out %d: [%d] %d != %lld", e_out, p, got[p],
                  (long long)want);
        }
        /* backward: dy / 72 broadcast */
        tensor_t *dy = fixed_flex(2, ys, e_in);
        tensor_t *dx = fixed_flex(4, xs, e_out);
        int16_t dym[6], *dxm = malloc(sizeof(int16_t) * (size_t)nx);
        CHECK_STATUS(tensor_from_f32(dy, xv), FX_OK);
        CHECK_STATUS(tensor_get_raw(dy, dym), FX_OK);
        CHECK_STATUS(tensor_global_avgpool_backward(dx, dy), FX_OK);
        CHECK_STATUS(tensor_get_raw(dx, dxm), FX_OK);
        for (int64_t i = 0; i < nx; i++) {
            checked++;
            CHECK(dxm[i] == expected_mant(dym[i / 72], 72, e_in, e_out),
                  "global avg backward e_out %d: [%lld] %d", e_out, (long long)i, dxm[i]);
        }
        free(dxm);
        tensor_free(y);
        tensor_free(dy);
        tensor_free(dx);
    }
    printf("integer averages: %lld results correctly rounded (%lld exact ties among the "
           "forward ones)\n", (long long)checked, (long long)ties);
    CHECK(ties > 0, "the data should contain rounding ties to exercise ties-to-even");
    tensor_free(x);
    free(xv);
    free(xm);
}

/* ---- 4. format pairs and bad arguments ------------------------------------------------------ */

static void format_pairs(void)
{
    const pool_case c = {"pairs 3x3 stride 2 pad 1", 2, 3, 7, 8, 3, 3, 2, 2, 1, 1, 0};
    geom g = geom_of(&c);
    int64_t xs[4] = {g.N, g.C, g.H, g.W}, ys[4] = {g.N, g.C, g.OH, g.OW};
    int64_t nx = numel_of(4, xs), ny = numel_of(4, ys);
    for (int fi = 0; fi < FMT_COUNT; fi++) {
        double *x = malloc(sizeof(double) * (size_t)nx), *dy = malloc(sizeof(double) * (size_t)ny);
        test_rng r;
        test_rng_seed(&r, 4000 + (uint64_t)fi);
        fill_normal(&r, x, nx);
        fill_normal(&r, dy, ny);
        tensor_t *ox, *ody;
        tensor_t *tx = make_input((fmt_t)fi, 4, xs, 0, x, &ox);
        tensor_t *tdy = make_input((fmt_t)fi, 4, ys, 0, dy, &ody);
        ref_t R[P_COUNT];
        memset(R, 0, sizeof R);
        int32_t *am_ref = malloc(sizeof(int32_t) * (size_t)ny);
        ref_alloc(&R[P_MAX], ny, 0);
        ref_alloc(&R[P_MAX_BWD], nx, 1);
        ref_alloc(&R[P_AVG], ny, 0);
        ref_alloc(&R[P_AVG_BWD], nx, 1);
        ref_maxpool(&g, x, R[P_MAX].r, am_ref);
        memset(R[P_MAX].s, 0, sizeof(double) * (size_t)ny);
        ref_maxpool_backward(&g, dy, am_ref, R[P_MAX_BWD].r, R[P_MAX_BWD].s, R[P_MAX_BWD].n);
        ref_avgpool(&g, x, R[P_AVG].r, R[P_AVG].s);
        R[P_AVG].nconst = 9;
        ref_avgpool_backward(&g, dy, R[P_AVG_BWD].r, R[P_AVG_BWD].s, R[P_AVG_BWD].n);
        for (int op = P_MAX; op <= P_AVG_BWD; op++) R[op].maxabs = max_abs(R[op].r, R[op].count);
        double worst[P_COUNT] = {0};
        for (int fo = 0; fo < FMT_COUNT; fo++)
            run_windowed(&c, (fmt_t)fi, (fmt_t)fo, "pairs", tx, tdy, R, am_ref, NULL, worst);
        for (int op = 0; op < P_COUNT; op++) ref_release(&R[op]);
        free(am_ref);
        free(x);
        free(dy);
        tensor_free(tx);
        tensor_free(tdy);
        tensor_free(ox);
        tensor_free(ody);
    }
}

/* Status and a message naming the function and `needle`; out (if given) unchanged. */
static void expect_fail(int rc, int want, const char *func, const char *needle, tensor_t *out,
                        const float *before, const char *what)
{
    const char *msg = flexpoint_last_error();
    CHECK(rc == want, "%s: status %s, want %s (%s)", what, flexpoint_status_str(rc),
          flexpoint_status_str(want), msg);
    CHECK(strstr(msg, func) != NULL && strstr(msg, needle) != NULL,
          "%s: message \"%s\" should name %s and \"%s\"", what, msg, func, needle);
    if (out) {
        int64_t n = tensor_numel(out);
        float *now = malloc(sizeof(float) * (size_t)n);
        tensor_to_f32(out, now);
        CHECK(memcmp(now, before, sizeof(float) * (size_t)n) == 0, "%s: output was modified", what);
        free(now);
    }
}

static void bad_arguments(void)
{
    int64_t xs[4] = {2, 3, 8, 8}, ys[4] = {2, 3, 4, 4}, x3[3] = {3, 8, 8}, x0[4] = {0, 3, 8, 8};
    int64_t y0[4] = {0, 3, 4, 4}, ybad[4] = {2, 3, 4, 5}, dyb[4] = {1, 3, 4, 4};
    int64_t g2[2] = {2, 3}, g2b[2] = {2, 4}, g4b[4] = {2, 3, 1, 2};
    tensor_t *x = tensor_new(FMT_FP32, 4, xs), *y = tensor_new(FMT_DFP16, 4, ys);
    tensor_t *xt = tensor_new(FMT_FP32, 3, x3), *xz = tensor_new(FMT_FP32, 4, x0);
    tensor_t *yz = tensor_new(FMT_FP32, 4, y0), *yb = tensor_new(FMT_FP32, 4, ybad);
    tensor_t *dyb1 = tensor_new(FMT_FP32, 4, dyb), *dx = tensor_new(FMT_DFP16, 4, xs);
    tensor_t *gy = tensor_new(FMT_FP32, 2, g2), *gyb = tensor_new(FMT_FP32, 2, g2b);
    tensor_t *gy4b = tensor_new(FMT_FP32, 4, g4b);
    float yv[96], before[96], dxv[384], dxbefore[384];
    for (int i = 0; i < 96; i++) yv[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < 384; i++) dxv[i] = (float)(i % 7) - 3.0f;
    tensor_from_f32(y, yv);
    tensor_to_f32(y, before);
    tensor_from_f32(dx, dxv);
    tensor_to_f32(dx, dxbefore);
    int32_t am[96];
    const char *M = "tensor_maxpool2d", *A = "tensor_avgpool2d";

    expect_fail(tensor_maxpool2d(NULL, am, x, 2, 2, 2, 2, 0, 0), FX_EINVAL, M, "y is NULL", NULL,
                NULL, "max NULL y");
    expect_fail(tensor_maxpool2d(y, am, NULL, 2, 2, 2, 2, 0, 0), FX_EINVAL, M, "x is NULL", y,
                before, "max NULL x");
    expect_fail(tensor_maxpool2d(y, am, x, 0, 2, 2, 2, 0, 0), FX_EINVAL, M, "kernel (0, 2)", y,
                before, "max kernel 0");
    expect_fail(tensor_maxpool2d(y, am, x, 2, 2, 2, 0, 0, 0), FX_EINVAL, M, "stride (2, 0)", y,
                before, "max stride 0");
    expect_fail(tensor_maxpool2d(y, am, x, 2, 2, 2, 2, -1, 0), FX_EINVAL, M, "padding (-1, 0)",
                y, before, "max negative padding");
    expect_fail(tensor_maxpool2d(y, am, x, 3, 3, 2, 2, 2, 1), FX_EINVAL, M, "at most half", y,
                before, "max padding > kernel/2");
    expect_fail(tensor_maxpool2d(y, am, xt, 2, 2, 2, 2, 0, 0), FX_ESHAPE, M, "[3, 8, 8]", y,
                before, "max 3-D x");
    expect_fail(tensor_maxpool2d(yb, am, x, 2, 2, 2, 2, 0, 0), FX_ESHAPE, M, "[2, 3, 4, 4]",
                NULL, NULL, "max wrong y shape");
    expect_fail(tensor_maxpool2d(y, am, x, 9, 2, 1, 2, 0, 0), FX_ESHAPE, M, "does not fit", y,
                before, "max window taller than x");
    expect_fail(tensor_maxpool2d(yz, am, xz, 2, 2, 2, 2, 0, 0), FX_ESHAPE, M, "empty batch",
                NULL, NULL, "max zero batch");

    const char *MB = "tensor_maxpool2d_backward";
    for (int i = 0; i < 96; i++) am[i] = (int32_t)((i / 16) * 64 + (i % 16)); /* valid */
    expect_fail(tensor_maxpool2d_backward(dx, y, NULL), FX_EINVAL, MB, "argmax is NULL", dx,
                dxbefore, "max backward NULL argmax");
    expect_fail(tensor_maxpool2d_backward(dx, dyb1, am), FX_ESHAPE, MB, "[1, 3, 4, 4]", dx,
                dxbefore, "max backward batch mismatch");
    am[17] = 5; /* element 17 is in plane 1 ([64, 128)) */
    expect_fail(tensor_maxpool2d_backward(dx, y, am), FX_ERANGE, MB, "argmax[17]=5", dx,
                dxbefore, "max backward argmax outside its plane");
    am[17] = 64 + 1;
    am[95] = 384; /* past the end */
    expect_fail(tensor_maxpool2d_backward(dx, y, am), FX_ERANGE, MB, "argmax[95]=384", dx,
                dxbefore, "max backward argmax past the end");
    for (int fi = 0; fi < 3; fi++) {
        /* a check large enough for two threads: bad indices in planes 200 and 5, the message
         * must name the first one (plane 5's), whichever thread sees its own first; in the
         * formats of the three routes (the int16 and fp16/bf16 stages check each index as they
         * scatter it, fp32 in a pass of its own first) */
        const fmt_t bf = fi == 0 ? FMT_FLEX16_5 : fi == 1 ? FMT_BF16 : FMT_FP32;
        const int64_t bx[4] = {4, 64, 32, 32}, by[4] = {4, 64, 16, 16};
        const int64_t nyb = 4 * 64 * 16 * 16;
        tensor_t *bdx = tensor_new(bf, 4, bx), *bdy = tensor_new(bf, 4, by);
        int32_t *bam = malloc((size_t)nyb * sizeof *bam);
        float *bbefore = calloc((size_t)(4 * 64 * 32 * 32), sizeof(float));
        for (int64_t i = 0; i < nyb; i++) bam[i] = (int32_t)((i / 256) * 1024 + (i % 256) * 2);
        bam[200 * 256 + 7] = 0;  /* plane 200 pointing into plane 0 */
        bam[5 * 256 + 9] = 9999; /* plane 5 pointing into plane 9 */
        CHECK_STATUS(tensor_from_f32(bdx, bbefore), FX_OK);
        const int prev = flexpoint_set_num_threads(2);
        expect_fail(tensor_maxpool2d_backward(bdx, bdy, bam), FX_ERANGE, MB, "argmax[1289]=9999",
                    bdx, bbefore, "max backward first bad index, two threads");
        flexpoint_set_num_threads(prev);
        free(bam);
        free(bbefore);
        tensor_free(bdx);
        tensor_free(bdy);
    }

    expect_fail(tensor_avgpool2d(y, x, 2, 2, 2, 2, 2, 0), FX_EINVAL, A, "padding (2, 0)", y,
                before, "avg padding > kernel/2");
    expect_fail(tensor_avgpool2d(yb, x, 2, 2, 2, 2, 0, 0), FX_ESHAPE, A, "y.shape=[2, 3, 4, 5]",
                NULL, NULL, "avg wrong y shape");
    const char *AB = "tensor_avgpool2d_backward";
    expect_fail(tensor_avgpool2d_backward(dx, yb, 2, 2, 2, 2, 0, 0), FX_ESHAPE, AB,
                "dy.shape=[2, 3, 4, 5]", dx, dxbefore, "avg backward wrong dy shape");
    expect_fail(tensor_avgpool2d_backward(dx, y, 2, 2, 0, 2, 0, 0), FX_EINVAL, AB, "stride (0, 2)",
                dx, dxbefore, "avg backward stride 0");
    expect_fail(tensor_avgpool2d_backward(dx, NULL, 2, 2, 2, 2, 0, 0), FX_EINVAL, AB,
                "dy is NULL", dx, dxbefore, "avg backward NULL dy");

    const char *G = "tensor_global_avgpool", *GB = "tensor_global_avgpool_backward";
    expect_fail(tensor_global_avgpool(gyb, x), FX_ESHAPE, G, "[2, 3] or [2, 3, 1, 1]", NULL, NULL,
                "global wrong channels");
    expect_fail(tensor_global_avgpool(gy4b, x), FX_ESHAPE, G, "y.shape=[2, 3, 1, 2]", NULL, NULL,
                "global wrong 4-D y");
    expect_fail(tensor_global_avgpool(gy, xt), FX_ESHAPE, G, "[3, 8, 8]", NULL, NULL,
                "global 3-D x");
    expect_fail(tensor_global_avgpool(gy, NULL), FX_EINVAL, G, "x is NULL", NULL, NULL,
                "global NULL x");
    expect_fail(tensor_global_avgpool_backward(dx, gyb), FX_ESHAPE, GB, "dy.shape=[2, 4]", dx,
                dxbefore, "global backward wrong dy");
    expect_fail(tensor_global_avgpool_backward(xz, yz), FX_ESHAPE, GB, "[0, 3, 1, 1]", NULL, NULL,
                "global backward dy shape for an empty batch");

    tensor_t *all[] = {x, y, xt, xz, yz, yb, dyb1, dx, gy, gyb, gy4b};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tensor_free(all[i]);
}

static double now_s(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC); /* C11; only used to print the test's duration */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* NaN and ties in 2x2 windows (the CNN's pooling, which has its own loop): a NaN anywhere in a
 * window wins and its index is reported; among equal maxima the first in scan order wins. */
static void nan_and_ties_2x2(void)
{
    /* windows: (1 3 / 2 3) -> 3 at 1, the first of the ties; (3 0 / NaN 5) -> NaN at 6;
     * (-1 -1 / -1 -1) -> -1 at 8; (4 4 / 4 NaN) -> NaN at 15 */
    const float v[16] = {1, 3, 3, 0, 2, 3, NAN, 5, -1, -1, 4, 4, -1, -1, 4, NAN};
    int64_t sx[4] = {1, 1, 4, 4}, sy[4] = {1, 1, 2, 2};
    tensor_t *x = tensor_new(FMT_FP32, 4, sx), *y = tensor_new(FMT_FP32, 4, sy);
    CHECK(x && y, "allocation");
    if (!x || !y) return;
    CHECK_STATUS(tensor_from_f32(x, v), FX_OK);
    int32_t am[4] = {0};
    CHECK_STATUS(tensor_maxpool2d(y, am, x, 2, 2, 2, 2, 0, 0), FX_OK);
    float out[4];
    CHECK_STATUS(tensor_to_f32(y, out), FX_OK);
    CHECK(out[0] == 3.0f && am[0] == 1, "ties: got %g at %d, want 3 at 1", out[0], am[0]);
    CHECK(isnan(out[1]) && am[1] == 6, "NaN window: got %g at %d, want NaN at 6", out[1], am[1]);
    CHECK(out[2] == -1.0f && am[2] == 8, "equal window: got %g at %d, want -1 at 8", out[2],
          am[2]);
    CHECK(isnan(out[3]) && am[3] == 15, "late NaN: got %g at %d, want NaN at 15", out[3], am[3]);
    tensor_free(x);
    tensor_free(y);
}

/* fp16/bf16 patterns widened exactly (the comparisons' values) */
static float half_value(fmt_t f, uint16_t h)
{
    if (f == FMT_BF16) {
        const uint32_t u = (uint32_t)h << 16;
        float x;
        memcpy(&x, &u, sizeof x);
        return x;
    }
    const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    const double mag = e == 0    ? ldexp(m, -24)
                       : e == 31 ? (m ? NAN : INFINITY)
                                 : ldexp(1024 + m, e - 25);
    return (float)((h & 0x8000) ? -mag : mag);
}

enum { NAN_TIES_MAX_OW = 21 }; /* the widest rows of the 2x2 rule's tests below */

/* The 2x2 rule on fp16/bf16 planes, whose pooling reads the 16-bit patterns (AVX2's
 * fx_maxpool2x2_half_avx2) or widens them (the portable route): 8-window steps and row tails
 * (8 rows of 2 OW values, and one more where OW is odd: 4 x OW windows) of patterns with ties, signed zeros, infinities, subnormals
 * and quiet and signalling NaNs of both signs with payloads. The output is the winning pattern,
 * and a NaN the format's quiet NaN with its sign (what the fp32 route's narrowing gives). */
static void half_nan_and_ties_2x2(const char *bn, fmt_t f, int OW)
{
    enum { H = 8, OH = 4, MAXW = 2 * NAN_TIES_MAX_OW + 1 };
    const int W = 2 * OW + (OW & 1); /* an odd width leaves its last column out */
    const uint16_t bf[] = {0x4000, 0x4000, 0x8000, 0x0000, 0x7F80, 0xFF80, 0x0001, 0x8001,
                           0x7FC1, 0xFF81, 0x7F85, 0x3F80, 0xBF80, 0x4040, 0xC000, 0x0080};
    const uint16_t hf[] = {0x4000, 0x4000, 0x8000, 0x0000, 0x7C00, 0xFC00, 0x0001, 0x8001,
                           0x7E01, 0xFC81, 0x7C05, 0x3C00, 0xBC00, 0x4200, 0xC000, 0x0400};
    const uint16_t *pat = f == FMT_BF16 ? bf : hf;
    const uint16_t qnan = f == FMT_BF16 ? 0x7FC0 : 0x7E00;
    uint16_t v[H * MAXW];
    for (int i = 0; i < H * W; i++) v[i] = pat[(i * 7 + i / W * 3) % 16];
    int64_t sx[4] = {1, 1, H, W}, sy[4] = {1, 1, OH, OW};
    tensor_t *x = tensor_new(f, 4, sx), *y = tensor_new(f, 4, sy);
    CHECK(x && y, "allocation");
    if (x && y) {
        CHECK_STATUS(tensor_set_raw(x, v), FX_OK);
        int32_t am[OH * NAN_TIES_MAX_OW];
        uint16_t out[OH * NAN_TIES_MAX_OW];
        CHECK_STATUS(tensor_maxpool2d(y, am, x, 2, 2, 2, 2, 0, 0), FX_OK);
        CHECK_STATUS(tensor_get_raw(y, out), FX_OK);
        int bad = 0;
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                const int at0 = 2 * oh * W + 2 * ow, cand[4] = {at0, at0 + 1, at0 + W, at0 + W + 1};
                int best = cand[0];
                for (int k = 1; k < 4; k++) {
                    const float c = half_value(f, v[cand[k]]), b = half_value(f, v[best]);
                    if (c > b || (isnan(c) && !isnan(b))) best = cand[k];
                }
                const uint16_t w = isnan(half_value(f, v[best]))
                                       ? (uint16_t)((v[best] & 0x8000) | qnan)
                                       : v[best];
                bad += am[oh * OW + ow] != best || out[oh * OW + ow] != w;
            }
        CHECK(bad == 0, "%s %s, %d windows a row: %d of %d differ from the rule (NaN, ties, "
              "signed zeros)", bn, fmt_name(f), OW, bad, OH * OW);
    }
    tensor_free(x);
    tensor_free(y);
}

/* The same rules on every backend, through the SIMD kernels' whole steps and their row tails: a
 * plane of 6 rows of 2 OW values, and one more where OW is odd (3 x OW windows; at OW = 21 two
 * full 8-window steps and a tail of 5 per row on AVX2, one 16-window step and a tail on
 * AVX-512) full of ties, signed zeros and NaNs in every
 * candidate position, against the portable rule computed here. Int16 formats: the same plane
 * with its NaNs replaced, bit for bit against the same rule on the mantissas. */
static void nan_and_ties_2x2_every_backend(int OW)
{
    enum { H = 6, OH = 3, MAXW = 2 * NAN_TIES_MAX_OW + 1 };
    const int W = 2 * OW + (OW & 1); /* an odd width leaves its last column out */
    float v[H * MAXW];
    for (int i = 0; i < H * W; i++) {
        const int r = (i * 7 + i / W) % 11;
        v[i] = r < 3 ? 2.0f : r == 3 ? -0.0f : r == 4 ? 0.0f : r == 5 ? NAN : (float)(r % 4) - 1.5f;
    }
    /* the rule: candidates in scan order; one wins when greater, or NaN over a non-NaN */
    float want[OH * NAN_TIES_MAX_OW];
    int32_t want_at[OH * NAN_TIES_MAX_OW];
    for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
            const int at0 = 2 * oh * W + 2 * ow, cand[4] = {at0, at0 + 1, at0 + W, at0 + W + 1};
            int best = cand[0];
            for (int k = 1; k < 4; k++) {
                const float c = v[cand[k]], b = v[best];
                if (c > b || (isnan(c) && !isnan(b))) best = cand[k];
            }
            want[oh * OW + ow] = v[best];
            want_at[oh * OW + ow] = best;
        }
    int64_t sx[4] = {1, 1, H, W}, sy[4] = {1, 1, OH, OW};
    char before[32];
    snprintf(before, sizeof before, "%s", flexpoint_backend());
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        const char *bn = flexpoint_backend_name(bi);
        CHECK_STATUS(flexpoint_set_backend(bn), FX_OK);
        tensor_t *x = tensor_new(FMT_FP32, 4, sx), *y = tensor_new(FMT_FP32, 4, sy);
        CHECK(x && y, "allocation");
        if (!x || !y) break;
        CHECK_STATUS(tensor_from_f32(x, v), FX_OK);
        int32_t am[OH * NAN_TIES_MAX_OW];
        float out[OH * NAN_TIES_MAX_OW];
        CHECK_STATUS(tensor_maxpool2d(y, am, x, 2, 2, 2, 2, 0, 0), FX_OK);
        CHECK_STATUS(tensor_to_f32(y, out), FX_OK);
        int bad = 0;
        for (int o = 0; o < OH * OW; o++)
            bad += am[o] != want_at[o] ||
                   (isnan(want[o]) ? !isnan(out[o])
                                   : memcmp(&out[o], &want[o], sizeof out[o]) != 0);
        CHECK(bad == 0, "%s fp32, %d windows a row: %d of %d differ from the rule (NaN, ties, "
              "signed zeros)", bn, OW, bad, OH * OW);
        tensor_free(x);
        tensor_free(y);

        /* int16 mantissas: 2v (ties stay ties), NaN -> 3 (a tie with 1.5 * 2), -0 and 0 one
         * value */
        int16_t m[H * MAXW];
        for (int i = 0; i < H * W; i++) m[i] = isnan(v[i]) ? 3 : (int16_t)(2.0f * v[i]);
        tensor_t *xi = fixed_flex(4, sx, 0), *yi = fixed_flex(4, sy, 0);
        CHECK(xi && yi, "allocation");
        if (!xi || !yi) break;
        CHECK_STATUS(tensor_set_raw(xi, m), FX_OK);
        CHECK_STATUS(tensor_maxpool2d(yi, am, xi, 2, 2, 2, 2, 0, 0), FX_OK);
        int16_t mo[OH * NAN_TIES_MAX_OW];
        CHECK_STATUS(tensor_get_raw(yi, mo), FX_OK);
        bad = 0;
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                const int at0 = 2 * oh * W + 2 * ow, cand[4] = {at0, at0 + 1, at0 + W, at0 + W + 1};
                int best = cand[0];
                for (int k = 1; k < 4; k++)
                    if (m[cand[k]] > m[best]) best = cand[k];
                bad += am[oh * OW + ow] != best || mo[oh * OW + ow] != m[best];
            }
        CHECK(bad == 0, "%s int16, %d windows a row: %d of %d differ from the rule", bn, OW, bad,
              OH * OW);
        tensor_free(xi);
        tensor_free(yi);
        half_nan_and_ties_2x2(bn, FMT_BF16, OW);
        half_nan_and_ties_2x2(bn, FMT_FP16, OW);
    }
    CHECK_STATUS(flexpoint_set_backend(before), FX_OK);
}

/* The max-pool gradient's 2x2 vector scatter (fx_cvt_table.maxunpool2x2_u16) against the
 * scalar backend's scatter, bit for bit, in the three 16-bit routes' formats: odd heights and
 * widths (a last row and column no block covers), dy with the extremes of each format (fp16
 * and bf16: -0, NaN of both signs and payloads, infinities, subnormals; int16: +-32767), and a
 * plane one of whose indices leaves its block (legal inside the plane: that plane takes the
 * scalar scatter). On a level that has the kernel, it must have written planes. */
static void unpool_2x2_case(const int64_t xs[4], const int64_t ys[4])
{
    const int64_t nx = xs[0] * xs[1] * xs[2] * xs[3], ny = ys[0] * ys[1] * ys[2] * ys[3];
    const int64_t nplanes = xs[0] * xs[1], P = ys[2] * ys[3], HW = xs[2] * xs[3];
    const fmt_t fmts[3] = {FMT_DFP16, FMT_FP16, FMT_BF16};
    char before[64];
    snprintf(before, sizeof before, "%s", flexpoint_backend());
    test_rng r;
    test_rng_seed(&r, 4242);
    float *xv = malloc(sizeof(float) * (size_t)nx);
    for (int64_t i = 0; i < nx; i++) xv[i] = (float)test_rng_normal(&r);
    for (int fi = 0; fi < 3; fi++) {
        const fmt_t f = fmts[fi];
        uint16_t *dyb = malloc(sizeof(uint16_t) * (size_t)ny);
        const uint16_t specials_half[8] = {0x8000, 0x7E01, 0xFC02, 0x7C00, 0xFC00, 0x0001,
                                           0x8003, 0x3C00};
        const uint16_t specials_bf[8] = {0x8000, 0x7FC1, 0xFF82, 0x7F80, 0xFF80, 0x0001,
                                         0x8003, 0x3F80};
        for (int64_t i = 0; i < ny; i++) {
            const uint32_t u = (uint32_t)test_rng_u64(&r);
            if (f == FMT_DFP16) /* one largest |value|, in a block the vector steps take */
                dyb[i] = (uint16_t)(i == 1 ? (uint16_t)-32767 : u % 32001 - 16000);
            else
                dyb[i] = i % 3 == 0 ? (f == FMT_FP16 ? specials_half : specials_bf)[u % 8]
                                    : (uint16_t)(u & 0xFFFF);
        }
        uint16_t *want = NULL;
        for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
            if (!flexpoint_backend_available(bi)) continue;
            CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
            tensor_t *x = tensor_new(f, 4, xs), *y = tensor_new(f, 4, ys);
            tensor_t *dy = tensor_new(f, 4, ys), *dx = tensor_new(f, 4, xs);
            int32_t *am = malloc(sizeof(int32_t) * (size_t)ny);
            CHECK_STATUS(tensor_from_f32(x, xv), FX_OK);
            CHECK_STATUS(tensor_maxpool2d(y, am, x, 2, 2, 2, 2, 0, 0), FX_OK);
            CHECK_STATUS(tensor_set_raw(dy, dyb), FX_OK);
            am[2 * P + 3] = (int32_t)(2 * HW + HW - 1); /* plane 2's output 3: its plane's last
                                                       * cell, off its block */
            const int64_t planes0 = fx_pool_unpool_planes();
            CHECK_STATUS(tensor_maxpool2d_backward(dx, dy, am), FX_OK);
            const int64_t planes = fx_pool_unpool_planes() - planes0;
            const char *be = flexpoint_backend_name(bi);
            CHECK(strcmp(be, "scalar") == 0 ? planes == 0 : planes == nplanes - 1,
                  "%s %s: %lld planes by the vector scatter (%lld can be)", fmt_name(f), be,
                  (long long)planes, (long long)(nplanes - 1));
            uint16_t *got = malloc(sizeof(uint16_t) * (size_t)nx);
            CHECK_STATUS(tensor_get_raw(dx, got), FX_OK);
            /* the exact exponent follows the largest |value|, which the kernel reports */
            CHECK(f != FMT_DFP16 || tensor_exp(dx) == tensor_exp(dy), "%s: dx at 2^%d, dy at 2^%d",
                  flexpoint_backend_name(bi), tensor_exp(dx), tensor_exp(dy));
            if (f != FMT_DFP16) {
                /* a disposable fp16/bf16 dx is its own stage: the same bits, over old values */
                tensor_t *ddx = tensor_new(f, 4, xs);
                uint16_t *junk = malloc(sizeof(uint16_t) * (size_t)nx);
                for (int64_t i = 0; i < nx; i++) junk[i] = (uint16_t)(0xA5A5u ^ (uint32_t)i);
                CHECK_STATUS(tensor_set_raw(ddx, junk), FX_OK);
                fx_tensor_set_disposable(ddx);
                CHECK_STATUS(tensor_maxpool2d_backward(ddx, dy, am), FX_OK);
                CHECK_STATUS(tensor_get_raw(ddx, junk), FX_OK);
                int64_t bad = 0;
                for (int64_t i = 0; i < nx; i++) bad += junk[i] != got[i];
                CHECK(bad == 0, "%s %s: %lld gradient bits of a disposable dx differ",
                      fmt_name(f), be, (long long)bad);
                free(junk);
                tensor_free(ddx);
            }
            if (!want) {
                want = got; /* the first available backend: scalar */
            } else {
                int64_t bad = 0;
                for (int64_t i = 0; i < nx; i++) bad += got[i] != want[i];
                CHECK(bad == 0, "%s %s: %lld of %lld gradient bits differ from scalar's",
                      fmt_name(f), be, (long long)bad, (long long)nx);
                free(got);
            }
            free(am);
            tensor_free(x);
            tensor_free(y);
            tensor_free(dy);
            tensor_free(dx);
        }
        free(want);
        free(dyb);
    }
    free(xv);
    CHECK_STATUS(flexpoint_set_backend(before), FX_OK);
}

/* The fp32 max-pool gradient's 2x2 vector scatter (fx_cvt_table.maxunpool2x2_f32) against
 * what the portable scatter's add into a zeroed plane stores (0 + dy: -0 as +0, a signalling
 * NaN quieted with its payload; +0 elsewhere), bit for bit, on every backend: odd heights and
 * widths, dy with NaNs, infinities, signed zeros and subnormals, and a plane one of whose
 * indices leaves its block (that plane takes the portable scatter). A disposable dx, which the
 * scatter checks as it goes instead of a pass over argmax first, gives the same bits over old
 * values, and an index outside its plane fails there with FX_ERANGE as it does for a caller's
 * dx, which it leaves as it was. */
static void unpool_2x2_f32_case(const int64_t xs[4], const int64_t ys[4])
{
    const int64_t nx = xs[0] * xs[1] * xs[2] * xs[3], ny = ys[0] * ys[1] * ys[2] * ys[3];
    const int64_t nplanes = xs[0] * xs[1], P = ys[2] * ys[3], HW = xs[2] * xs[3];
    char before[64];
    snprintf(before, sizeof before, "%s", flexpoint_backend());
    test_rng r;
    test_rng_seed(&r, 777);
    float *xv = malloc(sizeof(float) * (size_t)nx), *dyv = malloc(sizeof(float) * (size_t)ny);
    uint32_t *want = calloc((size_t)nx, sizeof(uint32_t)), *got = malloc(sizeof(uint32_t) * (size_t)nx);
    for (int64_t i = 0; i < nx; i++) xv[i] = (float)test_rng_normal(&r);
    const uint32_t specials[8] = {0x80000000u, 0x7F800001u, 0xFFC00123u, 0x7F800000u,
                                  0xFF800000u, 0x00000001u, 0x80000003u, 0x3F800000u};
    for (int64_t i = 0; i < ny; i++) {
        const uint32_t u = (uint32_t)test_rng_u64(&r);
        if (i % 3 == 0)
            memcpy(&dyv[i], &specials[u % 8], sizeof(float));
        else
            dyv[i] = (float)test_rng_normal(&r);
    }
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        const char *be = flexpoint_backend_name(bi);
        CHECK_STATUS(flexpoint_set_backend(be), FX_OK);
        tensor_t *x = tensor_new(FMT_FP32, 4, xs), *y = tensor_new(FMT_FP32, 4, ys);
        tensor_t *dy = tensor_new(FMT_FP32, 4, ys), *dx = tensor_new(FMT_FP32, 4, xs);
        tensor_t *ddx = tensor_new(FMT_FP32, 4, xs);
        int32_t *am = malloc(sizeof(int32_t) * (size_t)ny);
        CHECK_STATUS(tensor_from_f32(x, xv), FX_OK);
        CHECK_STATUS(tensor_maxpool2d(y, am, x, 2, 2, 2, 2, 0, 0), FX_OK);
        CHECK_STATUS(tensor_set_raw(dy, dyv), FX_OK);
        /* plane 2's output 3 (its last where it has fewer): its plane's last cell, off its
         * block */
        am[2 * P + (P >= 4 ? 3 : P - 1)] = (int32_t)(2 * HW + HW - 1);
        if (bi == 0) { /* the rule, once: 0 + dy at each index into a zeroed plane */
            float *w = (float *)(void *)want;
            for (int64_t i = 0; i < ny; i++) w[am[i]] = 0.0f + dyv[i];
        }
        const int64_t planes0 = fx_pool_unpool_planes();
        CHECK_STATUS(tensor_maxpool2d_backward(dx, dy, am), FX_OK);
        const int64_t planes = fx_pool_unpool_planes() - planes0;
        const int vector = fx_backend_active()->cvt.maxunpool2x2_f32 != NULL;
        CHECK(vector ? planes == nplanes - 1 : planes == 0,
              "fp32 %s: %lld planes by the vector scatter (%lld can be)", be, (long long)planes,
              (long long)(vector ? nplanes - 1 : 0));
        CHECK_STATUS(tensor_get_raw(dx, got), FX_OK);
        int64_t bad = 0;
        for (int64_t i = 0; i < nx; i++) bad += got[i] != want[i];
        CHECK(bad == 0, "fp32 %s: %lld of %lld gradient bits differ from 0 + dy", be,
              (long long)bad, (long long)nx);
        /* a disposable dx: the same bits over old values */
        float *junk = malloc(sizeof(float) * (size_t)nx);
        for (int64_t i = 0; i < nx; i++) junk[i] = (float)(i % 7) - 3.5f;
        CHECK_STATUS(tensor_from_f32(ddx, junk), FX_OK);
        fx_tensor_set_disposable(ddx);
        CHECK_STATUS(tensor_maxpool2d_backward(ddx, dy, am), FX_OK);
        CHECK_STATUS(tensor_get_raw(ddx, got), FX_OK);
        bad = 0;
        for (int64_t i = 0; i < nx; i++) bad += got[i] != want[i];
        CHECK(bad == 0, "fp32 %s: %lld gradient bits of a disposable dx differ", be,
              (long long)bad);
        /* an index outside its plane, in the last plane (after planes the scatter wrote):
         * FX_ERANGE for both; the caller's dx keeps its values */
        am[(nplanes - 1) * P + P - 1] = 0;
        uint32_t *kept = malloc(sizeof(uint32_t) * (size_t)nx);
        CHECK_STATUS(tensor_get_raw(dx, kept), FX_OK);
        CHECK_STATUS(tensor_maxpool2d_backward(ddx, dy, am), FX_ERANGE);
        CHECK_STATUS(tensor_maxpool2d_backward(dx, dy, am), FX_ERANGE);
        CHECK(strstr(flexpoint_last_error(), "outside the (n, c) plane") != NULL,
              "fp32 %s: the error names the bad index: %s", be, flexpoint_last_error());
        CHECK_STATUS(tensor_get_raw(dx, got), FX_OK);
        bad = 0;
        for (int64_t i = 0; i < nx; i++) bad += got[i] != kept[i];
        CHECK(bad == 0, "fp32 %s: a failed gradient changed %lld values of dx", be,
              (long long)bad);
        free(kept);
        free(junk);
        free(am);
        tensor_free(x);
        tensor_free(y);
        tensor_free(dy);
        tensor_free(dx);
        tensor_free(ddx);
    }
    free(xv);
    free(dyv);
    free(want);
    free(got);
    CHECK_STATUS(flexpoint_set_backend(before), FX_OK);
}

static void unpool_2x2_every_backend(void)
{
    /* 5 and 17 blocks a row: inside one 8- or 16-block step, and steps with a tail */
    const int64_t xs1[4] = {3, 4, 9, 11}, ys1[4] = {3, 4, 4, 5};
    const int64_t xs2[4] = {2, 3, 17, 35}, ys2[4] = {2, 3, 8, 17};
    unpool_2x2_case(xs1, ys1);
    unpool_2x2_case(xs2, ys2);
    /* every tail of the 8-block step: rows of 2 to 9 blocks (the CNN's 7 among them), an odd
     * last row */
    for (int64_t w = 2; w <= 9; w++) {
        const int64_t xs[4] = {1, 3, 5, 2 * w}, ys[4] = {1, 3, 2, w};
        unpool_2x2_case(xs, ys);
    }
    /* fp32: the same shapes, and rows of 1 to 17 blocks (every tail of the 8- and 16-block
     * steps) with an odd last column */
    unpool_2x2_f32_case(xs1, ys1);
    unpool_2x2_f32_case(xs2, ys2);
    for (int64_t w = 1; w <= 17; w++) {
        const int64_t xs[4] = {1, 3, 4, 2 * w + 1}, ys[4] = {1, 3, 2, w};
        unpool_2x2_f32_case(xs, ys);
    }
}

int main(void)
{
    double t0 = now_s();
    flexpoint_set_num_threads(2);
    int last_backend = 0;
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (flexpoint_backend_available(bi))
            last_backend = bi;
        else
            printf("backend %s: skipped, the CPU lacks it (features: %s)\n",
                   flexpoint_backend_name(bi), flexpoint_cpu_features());
    }
    fd_check();
    for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++)
        for (int f = 0; f < FMT_COUNT; f++) run_case(&CASES[ci], (fmt_t)f, &last_backend);
    for (size_t ci = 0; ci < sizeof GCASES / sizeof *GCASES; ci++)
        for (int f = 0; f < FMT_COUNT; f++) run_global(&GCASES[ci], (fmt_t)f, &last_backend);
    nan_and_ties_2x2();
    /* rows of 1 to 17 windows (every tail of the 8- and 16-window steps), the CNN's 14, and
     * 19 and 21 (whole steps with tails of 3 and 5) */
    for (int ow = 1; ow <= 17; ow++) nan_and_ties_2x2_every_backend(ow);
    nan_and_ties_2x2_every_backend(19);
    nan_and_ties_2x2_every_backend(21);
    unpool_2x2_every_backend();
    exact_rounding();
    format_pairs();
    bad_arguments();
    printf("test_nn_pool: %.1f s\n", now_s() - t0);
    return test_finish("test_nn_pool");
}
