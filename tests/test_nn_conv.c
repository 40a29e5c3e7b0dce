/* 2-D convolution, forward and both gradients, for every format and every CPU backend, against
 * fp64 references written here with direct loops.
 *
 * 1. A hand-worked example anchors the definition (stride, padding, the sign of the taps).
 * 2. The fp64 gradient references are checked against central finite differences of the fp64
 *    forward reference (small shapes, every geometry feature).
 * 3. Every case x format x backend: inputs are written into the format and read back, so the
 *    references see the rounded inputs and only the op's own error is measured. Bound per
 *    element (derived, not tuned), as tests/test_ops.c:
 *      |y - r| <= acc + out_round
 *      acc: integer formats 0 (exact int64 sums); float formats gamma_n * sum|terms|,
 *           gamma_n = n u32 / (1 - n u32), n = C*KH*KW (forward), O + KH*KW (input gradient:
 *           a GEMM chain of O terms, then col2im adds at most KH*KW partial sums),
 *           N*OH*OW (weight gradient).
 *      out_round: fp32 u32 |r|; fp16 u16 (|r| + acc) + 2^-25; bf16 u_bf (|r| + acc) + 2^-134;
 *           flex16_5/dfp16 2^(e_out - 1), half a step of the output's exponent.
 *    Integer formats: outputs are also bit-identical (mantissas and exponent) on every backend
 *    and with 1 and 2 threads, and nothing saturates. Float formats: bit-identical with 1 and
 *    2 threads on one backend (the batch chunking does not depend on the thread count).
 *    Cases with N = 1 run the threads inside a single chunk instead of across chunks.
 * 4. Mixed formats follow the compute rule; bad arguments give the documented status and a
 *    message, and leave the output untouched.
 */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "testutil.h"
#include "core/dispatch.h" /* fx_write_shared_peek_exp: is the in-cache rounding taken? */
#include "nn/nn_ops.h"     /* fx_conv_early_rounding_reused */
#include "core/profile_counters.h" /* fx_prof_attach: where a profile counts a run again */

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define U32 0x1.0p-24
#define U16 0x1.0p-11
#define UBF 0x1.0p-8

typedef struct {
    const char *name;
    int64_t N, C, H, W, O, KH, KW;
    int sh, sw, ph, pw, dh, dw;
    int views; /* 1: inputs and outputs are strided views (slice / transpose) */
} conv_case;

static const conv_case CASES[] = {
    {"3x3 pad 1", 2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 0},
    {"3x3 stride 2 pad 1", 2, 4, 9, 10, 5, 3, 3, 2, 2, 1, 1, 1, 1, 0},
    {"3x3 pad 2 dilation 2", 2, 3, 11, 9, 3, 3, 3, 1, 1, 2, 2, 2, 2, 0},
    {"1x1", 3, 16, 5, 7, 8, 1, 1, 1, 1, 0, 0, 1, 1, 0},
    {"1x1 stride 2 (shortcut)", 2, 16, 8, 8, 32, 1, 1, 2, 2, 0, 0, 1, 1, 0},
    /* integer compute runs a strided 1x1 kernel on the pixels it reads (conv2d.c,
     * conv_subsample_fits): uneven strides, a dilation that moves nothing, views */
    {"1x1 stride (3,2) dilation 2, views", 2, 5, 10, 9, 6, 1, 1, 3, 2, 0, 0, 2, 1, 1},
    {"2x5 stride (1,2) pad (1,2) dil (2,1)", 2, 3, 10, 12, 4, 2, 5, 1, 2, 1, 2, 2, 1, 0},
    {"4x3 stride (3,1) no pad", 3, 2, 13, 6, 3, 4, 3, 3, 1, 0, 0, 1, 1, 0},
    {"views 3x2 stride 2 pad 1", 2, 3, 7, 9, 4, 3, 2, 2, 1, 1, 1, 1, 1, 1},
    /* one sample: a single chunk, so the threads work inside it (im2col, GEMM, col2im) */
    {"N=1 3x3 pad 1, threads inside the chunk", 1, 16, 16, 16, 64, 3, 3, 1, 1, 1, 1, 1, 1, 0},
    {"N=1 3x3 stride 2 dilation 2, views", 1, 16, 17, 15, 64, 3, 3, 2, 2, 2, 1, 2, 2, 1},
    {"small CNN conv1 [8,1,28,28] 5x5 pad 2", 8, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2, 1, 1, 0},
    {"small CNN conv2 [8,32,14,14] 5x5 pad 2", 8, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2, 1, 1, 0},
    {"ResNet-20 3x3 16ch 32x32", 2, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0},
    {"ResNet-20 3x3 stride 2 16->32", 2, 16, 32, 32, 32, 3, 3, 2, 2, 1, 1, 1, 1, 0},
    {"ResNet-20 3x3 64ch 8x8", 4, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1, 1, 1, 0},
    /* C >= 16, stride 1 (the 16-channel cases above too): the integer input gradient runs as
     * a forward convolution on the SIMD levels (conv2d.c: from 16 input channels on AVX2 and
     * AVX-512) and through col2im on the scalar one, which these cases compare bit for bit;
     * here with dilation, uneven padding and strided views */
    {"C=32 3x2 pad (2,1) dilation (2,1), views", 2, 32, 9, 10, 8, 3, 2, 1, 1, 2, 1, 2, 1, 1},
    /* the integer weight gradient's rows on demand (stride 1 across): 16 pixels, fewer than
     * the AMX kernel takes (conv2d.c), so the register-tile driver reads them; and stride 2
     * down with 1 across, whose tiles skip rows of the input */
    {"N=1 4x4 3x3 pad 1, 16 -> 16", 1, 16, 4, 4, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0},
    {"3x3 stride (2,1) pad 1, 16 -> 16", 2, 16, 9, 12, 16, 3, 3, 2, 1, 1, 1, 1, 1, 0},
    /* 2,500 values per patch: two K blocks of the AMX kernel (32 tiles of 64, then 8), whose
     * weights the forward packs once for all chunks, and 20 outputs (a part column panel) */
    {"5x5 100 -> 20, two AMX K blocks", 2, 100, 6, 5, 20, 5, 5, 1, 1, 2, 2, 1, 1, 0},
};

typedef struct {
    int64_t N, C, H, W, O, KH, KW, OH, OW;
    int sh, sw, ph, pw, dh, dw;
} geom;

static geom geom_of(const conv_case *c)
{
    geom g = {c->N, c->C, c->H, c->W, c->O, c->KH, c->KW, 0, 0,
              c->sh, c->sw, c->ph, c->pw, c->dh, c->dw};
    g.OH = (g.H + 2 * g.ph - g.dh * (g.KH - 1) - 1) / g.sh + 1;
    g.OW = (g.W + 2 * g.pw - g.dw * (g.KW - 1) - 1) / g.sw + 1;
    return g;
}

/* ---- fp64 references (direct loops) ------------------------------------------------------- */

/* x zero-padded by (ph, pw): the taps of every output pixel then exist, and the loops below
 * are the definition without bounds tests. */
static double *padded(const geom *g, const double *x, int64_t *Hp, int64_t *Wp)
{
    *Hp = g->H + 2 * g->ph;
    *Wp = g->W + 2 * g->pw;
    double *xp = calloc((size_t)(g->N * g->C * *Hp * *Wp), sizeof(double));
    for (int64_t p = 0; p < g->N * g->C; p++)
        for (int64_t ih = 0; ih < g->H; ih++)
            for (int64_t iw = 0; iw < g->W; iw++)
                xp[(p * *Hp + ih + g->ph) * *Wp + iw + g->pw] = x[(p * g->H + ih) * g->W + iw];
    return xp;
}

/* y[n,o,oh,ow] = sum_{c,kh,kw} w[o,c,kh,kw] x[n,c,oh*sh-ph+kh*dh,ow*sw-pw+kw*dw]; s = sum of
 * |terms|. */
static void ref_forward(const geom *g, const double *x, const double *w, double *y, double *s)
{
    int64_t Hp, Wp;
    double *xp = padded(g, x, &Hp, &Wp);
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t o = 0; o < g->O; o++)
            for (int64_t oh = 0; oh < g->OH; oh++)
                for (int64_t ow = 0; ow < g->OW; ow++) {
                    double acc = 0, sa = 0;
                    for (int64_t c = 0; c < g->C; c++)
                        for (int64_t kh = 0; kh < g->KH; kh++) {
                            const double *wr = w + ((o * g->C + c) * g->KH + kh) * g->KW;
                            const double *xr = xp + ((n * g->C + c) * Hp + oh * g->sh +
                                                     kh * g->dh) * Wp + ow * g->sw;
                            for (int64_t kw = 0; kw < g->KW; kw++) {
                                double t = wr[kw] * xr[kw * g->dw];
                                acc += t;
                                sa += fabs(t);
                            }
                        }
                    int64_t i = ((n * g->O + o) * g->OH + oh) * g->OW + ow;
                    y[i] = acc;
                    if (s) s[i] = sa;
                }
    free(xp);
}

/* dx = the forward's transpose applied to dy: every tap sends w * dy back to its input
 * (padding positions collect terms too, and are dropped). */
static void ref_backward_input(const geom *g, const double *dy, const double *w, double *dx,
                               double *s)
{
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, np = g->N * g->C * Hp * Wp;
    double *dxp = calloc((size_t)np, sizeof(double)), *sp = calloc((size_t)np, sizeof(double));
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t o = 0; o < g->O; o++)
            for (int64_t oh = 0; oh < g->OH; oh++)
                for (int64_t ow = 0; ow < g->OW; ow++) {
                    double d = dy[((n * g->O + o) * g->OH + oh) * g->OW + ow];
                    for (int64_t c = 0; c < g->C; c++)
                        for (int64_t kh = 0; kh < g->KH; kh++) {
                            const double *wr = w + ((o * g->C + c) * g->KH + kh) * g->KW;
                            int64_t at = ((n * g->C + c) * Hp + oh * g->sh + kh * g->dh) * Wp +
                                         ow * g->sw;
                            for (int64_t kw = 0; kw < g->KW; kw++) {
                                double t = wr[kw] * d;
                                dxp[at + kw * g->dw] += t;
                                sp[at + kw * g->dw] += fabs(t);
                            }
                        }
                }
    for (int64_t p = 0; p < g->N * g->C; p++)
        for (int64_t ih = 0; ih < g->H; ih++)
            for (int64_t iw = 0; iw < g->W; iw++) {
                int64_t at = (p * Hp + ih + g->ph) * Wp + iw + g->pw;
                dx[(p * g->H + ih) * g->W + iw] = dxp[at];
                if (s) s[(p * g->H + ih) * g->W + iw] = sp[at];
            }
    free(dxp);
    free(sp);
}

/* dw[o,c,kh,kw] = sum over n, oh, ow of dy[n,o,oh,ow] x[n,c,oh*sh-ph+kh*dh,ow*sw-pw+kw*dw]. */
static void ref_backward_weight(const geom *g, const double *x, const double *dy, double *dw,
                                double *s)
{
    int64_t Hp, Wp;
    double *xp = padded(g, x, &Hp, &Wp);
    for (int64_t o = 0; o < g->O; o++)
        for (int64_t c = 0; c < g->C; c++)
            for (int64_t kh = 0; kh < g->KH; kh++)
                for (int64_t kw = 0; kw < g->KW; kw++) {
                    double acc = 0, sa = 0;
                    for (int64_t n = 0; n < g->N; n++)
                        for (int64_t oh = 0; oh < g->OH; oh++) {
                            const double *dr = dy + ((n * g->O + o) * g->OH + oh) * g->OW;
                            const double *xr = xp + ((n * g->C + c) * Hp + oh * g->sh +
                                                     kh * g->dh) * Wp + kw * g->dw;
                            for (int64_t ow = 0; ow < g->OW; ow++) {
                                double t = dr[ow] * xr[ow * g->sw];
                                acc += t;
                                sa += fabs(t);
                            }
                        }
                    int64_t i = ((o * g->C + c) * g->KH + kh) * g->KW + kw;
                    dw[i] = acc;
                    if (s) s[i] = sa;
                }
    free(xp);
}

/* ---- 1. a hand-worked example --------------------------------------------------------------- */

static void hand_example(void)
{
    /* x = 1..9 in a 3x3 image, w = [[1, 0], [0, -1]]: y = x[i][j] - x[i+1][j+1].
     * stride 1, no padding: every window gives -4.
     * stride 2, padding 1: windows start at (-1,-1), (-1,1), (1,-1), (1,1), giving
     * 0 - x[0][0] = -1, 0 - x[0][2] = -3, 0 - x[2][0] = -7, x[1][1] - x[2][2] = -4. */
    float xv[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, wv[4] = {1, 0, 0, -1};
    const float want1[4] = {-4, -4, -4, -4}, want2[4] = {-1, -3, -7, -4};
    int64_t xs[4] = {1, 1, 3, 3}, ws[4] = {1, 1, 2, 2}, ys[4] = {1, 1, 2, 2};
    for (int f = 0; f < FMT_COUNT; f++) {
        tensor_t *x = tensor_new((fmt_t)f, 4, xs), *w = tensor_new((fmt_t)f, 4, ws);
        tensor_t *y = tensor_new((fmt_t)f, 4, ys);
        tensor_from_f32(x, xv);
        tensor_from_f32(w, wv);
        float got[4];
        CHECK_STATUS(tensor_conv2d(y, x, w, 1, 1, 0, 0, 1, 1), FX_OK);
        tensor_to_f32(y, got);
        for (int i = 0; i < 4; i++)
            CHECK(got[i] == want1[i], "hand example stride 1 %s [%d]: %g != %g",
                  fmt_name((fmt_t)f), i, got[i], want1[i]);
        CHECK_STATUS(tensor_conv2d(y, x, w, 2, 2, 1, 1, 1, 1), FX_OK);
        tensor_to_f32(y, got);
        for (int i = 0; i < 4; i++)
            CHECK(got[i] == want2[i], "hand example stride 2 pad 1 %s [%d]: %g != %g",
                  fmt_name((fmt_t)f), i, got[i], want2[i]);
        tensor_free(x);
        tensor_free(w);
        tensor_free(y);
    }
}

/* ---- 2. gradient references against finite differences ----------------------------------- */

static double loss_of(const geom *g, const double *x, const double *w, const double *gy,
                      double *ybuf)
{
    ref_forward(g, x, w, ybuf, NULL);
    double l = 0;
    for (int64_t i = 0; i < g->N * g->O * g->OH * g->OW; i++) l += gy[i] * ybuf[i];
    return l;
}

/* Small geometries for the finite-difference check (every element is perturbed), covering
 * stride, padding, dilation, non-square kernels and 1x1. */
static const conv_case FD_CASES[] = {
    {"fd 3x3 pad 1", 2, 2, 5, 6, 3, 3, 3, 1, 1, 1, 1, 1, 1, 0},
    {"fd 3x3 stride 2 pad 2 dilation 2", 1, 2, 9, 8, 2, 3, 3, 2, 2, 2, 2, 2, 2, 0},
    {"fd 2x4 stride (2,1) pad (0,2) dil (1,2)", 2, 3, 6, 7, 2, 2, 4, 2, 1, 0, 2, 1, 2, 0},
    {"fd 1x1 stride 2", 2, 3, 5, 5, 2, 1, 1, 2, 2, 0, 0, 1, 1, 0},
    {"fd 5x5 pad 2 (CNN)", 1, 2, 6, 6, 2, 5, 5, 1, 1, 2, 2, 1, 1, 0},
};

static void fd_check_case(const conv_case *c)
{
    geom g = geom_of(c);
    int64_t nx = g.N * g.C * g.H * g.W, nw = g.O * g.C * g.KH * g.KW, ny = g.N * g.O * g.OH * g.OW;
    double *x = malloc(sizeof(double) * (size_t)nx), *w = malloc(sizeof(double) * (size_t)nw);
    double *gy = malloc(sizeof(double) * (size_t)ny), *yb = malloc(sizeof(double) * (size_t)ny);
    double *dx = malloc(sizeof(double) * (size_t)nx), *dw = malloc(sizeof(double) * (size_t)nw);
    test_rng r;
    test_rng_seed(&r, 77 + (uint64_t)(c - FD_CASES));
    for (int64_t i = 0; i < nx; i++) x[i] = test_rng_normal(&r);
    for (int64_t i = 0; i < nw; i++) w[i] = test_rng_normal(&r);
    for (int64_t i = 0; i < ny; i++) gy[i] = test_rng_normal(&r);
    ref_backward_input(&g, gy, w, dx, NULL);
    ref_backward_weight(&g, x, gy, dw, NULL);
    const double h = 1e-3;
    double worst = 0;
    for (int64_t i = 0; i < nx; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double lp = loss_of(&g, x, w, gy, yb);
        x[i] = keep - h;
        double lm = loss_of(&g, x, w, gy, yb);
        x[i] = keep;
        double fd = (lp - lm) / (2 * h), err = fabs(fd - dx[i]);
        if (err > worst) worst = err;
        CHECK(err <= 1e-7 * (1 + fabs(dx[i])), "FD %s: dx[%lld] ref %.12g vs fd %.12g", c->name,
              (long long)i, dx[i], fd);
    }
    for (int64_t i = 0; i < nw; i++) {
        double keep = w[i];
        w[i] = keep + h;
        double lp = loss_of(&g, x, w, gy, yb);
        w[i] = keep - h;
        double lm = loss_of(&g, x, w, gy, yb);
        w[i] = keep;
        double fd = (lp - lm) / (2 * h), err = fabs(fd - dw[i]);
        if (err > worst) worst = err;
        CHECK(err <= 1e-7 * (1 + fabs(dw[i])), "FD %s: dw[%lld] ref %.12g vs fd %.12g", c->name,
              (long long)i, dw[i], fd);
    }
    printf("finite differences %-40s: max |fd - ref| %.3g\n", c->name, worst);
    free(x);
    free(w);
    free(gy);
    free(yb);
    free(dx);
    free(dw);
}

/* ---- 3. every case x format x backend ------------------------------------------------------ */

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

/* A 4-D tensor of logical shape `shape` in format f: plain (view 0), every second element of
 * a twice-as-wide storage (view 1), or the transpose of a [.., W, H] storage (view 2). The base
 * to free as well is returned in *owner. */
static tensor_t *new_4d(fmt_t f, const int64_t *shape, int view, tensor_t **owner)
{
    int64_t st[4] = {shape[0], shape[1], shape[2], shape[3]};
    *owner = NULL;
    if (view == 0) return tensor_new(f, 4, st);
    if (view == 1) {
        st[3] *= 2;
        *owner = tensor_new(f, 4, st);
        return tensor_view_slice(*owner, 3, 1, st[3], 2);
    }
    st[2] = shape[3];
    st[3] = shape[2];
    *owner = tensor_new(f, 4, st);
    return tensor_view_transpose(*owner, 2, 3);
}

/* Input tensor filled from v (fp64, logical order); v receives the values as rounded into f. */
static tensor_t *make_input(fmt_t f, const int64_t *shape, int view, double *v, tensor_t **owner)
{
    tensor_t *t = new_4d(f, shape, view, owner);
    int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    float *buf = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) buf[i] = (float)v[i];
    if (*owner) { /* the view shares the base's exponent: write the whole base first */
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

/* Output tensor; for views the base storage is first written with values of the expected
 * magnitude, so that a shared exponent (kept by a partial write) suits the result. */
static tensor_t *make_output(fmt_t f, const int64_t *shape, int view, double mag, tensor_t **owner)
{
    tensor_t *t = new_4d(f, shape, view, owner);
    if (*owner) {
        int64_t bn = tensor_numel(*owner);
        float *bb = malloc(sizeof(float) * (size_t)bn);
        for (int64_t i = 0; i < bn; i++) bb[i] = (float)(mag * (i % 3 - 1));
        CHECK_STATUS(tensor_from_f32(*owner, bb), FX_OK);
        free(bb);
    }
    return t;
}

typedef enum { OP_FWD = 0, OP_BWD_IN = 1, OP_BWD_W = 2, OP_COUNT = 3 } conv_op;
static const char *const OP_NAMES[OP_COUNT] = {"forward", "grad input", "grad weight"};

/* Reference results of one case in one format (on that format's rounded inputs). */
typedef struct {
    int64_t n[OP_COUNT];
    int64_t shape[OP_COUNT][4];
    double *r[OP_COUNT], *s[OP_COUNT];
    double nterms[OP_COUNT];
    double maxabs[OP_COUNT];
} refs;

/* Raw bits of the first run of each op, to compare later runs with: integer formats across
 * every backend and thread count; float formats across thread counts on one backend. */
typedef struct {
    int exp[OP_COUNT];
    void *raw[OP_COUNT];
} first_bits;

static void first_bits_clear(first_bits *fb)
{
    for (int op = 0; op < OP_COUNT; op++) free(fb->raw[op]);
    memset(fb, 0, sizeof *fb);
}

static void check_output(const conv_case *c, conv_op op, fmt_t f, const char *tag, tensor_t *out,
                         const refs *R, first_bits *fb, double *worst)
{
    int64_t n = R->n[op];
    float *y = malloc(sizeof(float) * (size_t)n);
    CHECK_STATUS(tensor_to_f32(out, y), FX_OK);
    int integer = fmt_is_shared_exponent(f);
    double step = integer ? ldexp(1.0, tensor_exp(out) - 1) : 0.0;
    double nt = R->nterms[op], gamma = nt * U32 / (1.0 - nt * U32);
    double uo = ulp_rel(f), fl = abs_floor(f), maxerr = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = R->r[op][i], err = fabs((double)y[i] - r);
        double acc = integer ? 0.0 : gamma * R->s[op][i];
        double bound = acc + (integer ? step : uo * (fabs(r) + acc) + fl);
        if (err > bound * (1 + 1e-12) && bad++ < 3)
            CHECK(0, "%s %s %s %s: element %lld y=%.9g ref=%.9g err=%.3g bound=%.3g", c->name,
                  OP_NAMES[op], fmt_name(f), tag, (long long)i, y[i], r, err, bound);
        if (err > maxerr) maxerr = err;
    }
    CHECK(bad == 0, "%s %s %s %s: %d elements outside the bound", c->name, OP_NAMES[op],
          fmt_name(f), tag, bad);
    double nw = R->maxabs[op] > 0 ? maxerr / R->maxabs[op] : maxerr;
    if (nw > *worst) *worst = nw;
    if (integer) {
        double sat = -1;
        CHECK_STATUS(tensor_stat(out, "saturated", &sat), FX_OK);
        CHECK(sat == 0, "%s %s %s %s: %g saturated", c->name, OP_NAMES[op], fmt_name(f), tag, sat);
    }
    const size_t bytes = (size_t)n * (f == FMT_FP32 ? 4 : 2);
    void *raw = malloc(bytes);
    CHECK_STATUS(tensor_get_raw(out, raw), FX_OK);
    const int e = integer ? tensor_exp(out) : 0;
    if (!fb->raw[op]) {
        fb->raw[op] = raw;
        fb->exp[op] = e;
    } else {
        CHECK(fb->exp[op] == e && memcmp(fb->raw[op], raw, bytes) == 0,
              "%s %s %s %s: not bit-identical to the first run (exp %d vs %d)", c->name,
              OP_NAMES[op], fmt_name(f), tag, e, fb->exp[op]);
        free(raw);
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

/* Run the three ops of case c in format f on the active backend and check them. */
static void run_ops(const conv_case *c, fmt_t f, const char *tag, tensor_t *tx, tensor_t *tw,
                    tensor_t *tdy, const refs *R, first_bits *fb, double *worst)
{
    const int ov = c->views ? 2 : 0; /* outputs as transposed views */
    for (int op = 0; op < OP_COUNT; op++) {
        tensor_t *owner, *out = make_output(f, R->shape[op], ov, 1.1 * R->maxabs[op], &owner);
        int rc;
        if (op == OP_FWD)
            rc = tensor_conv2d(out, tx, tw, c->sh, c->sw, c->ph, c->pw, c->dh, c->dw);
        else if (op == OP_BWD_IN)
            rc = tensor_conv2d_backward_input(out, tdy, tw, c->sh, c->sw, c->ph, c->pw, c->dh,
                                              c->dw);
        else
            rc = tensor_conv2d_backward_weight(out, tx, tdy, c->sh, c->sw, c->ph, c->pw, c->dh,
                                               c->dw);
        CHECK(rc == FX_OK, "%s %s %s %s: status %d: %s", c->name, OP_NAMES[op], fmt_name(f), tag,
              rc, flexpoint_last_error());
        if (rc == FX_OK) check_output(c, (conv_op)op, f, tag, out, R, fb, &worst[op]);
        tensor_free(out);
        tensor_free(owner);
    }
}

static void fill_normal(test_rng *r, double *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) v[i] = test_rng_normal(r);
}

static void refs_free(refs *R)
{
    for (int op = 0; op < OP_COUNT; op++) {
        free(R->r[op]);
        free(R->s[op]);
    }
    memset(R, 0, sizeof *R);
}

static int same_values(const double *a, const double *b, int64_t n)
{
    return memcmp(a, b, sizeof(double) * (size_t)n) == 0;
}

/* One case in every format. The source data are the same for all formats; when a format
 * rounds them exactly as the previous one did (flex16_5 and dfp16 usually agree), the
 * references are reused. */
static void run_case(const conv_case *c)
{
    geom g = geom_of(c);
    int64_t xs[4] = {g.N, g.C, g.H, g.W}, wsh[4] = {g.O, g.C, g.KH, g.KW};
    int64_t ysh[4] = {g.N, g.O, g.OH, g.OW};
    int64_t nx = g.N * g.C * g.H * g.W, nw = g.O * g.C * g.KH * g.KW, ny = g.N * g.O * g.OH * g.OW;
    double *src = malloc(sizeof(double) * (size_t)(nx + nw + ny));
    double *cur = malloc(sizeof(double) * (size_t)(nx + nw + ny));
    double *prev = calloc((size_t)(nx + nw + ny), sizeof(double));
    test_rng rng;
    test_rng_seed(&rng, 1000 + (uint64_t)(c - CASES) * 17);
    fill_normal(&rng, src, nx + nw + ny);
    refs R;
    memset(&R, 0, sizeof R);
    int nbackends = flexpoint_backend_count(), last_backend = 0;
    for (int bi = 0; bi < nbackends; bi++)
        if (flexpoint_backend_available(bi)) last_backend = bi;

    for (int fi = 0; fi < FMT_COUNT; fi++) {
        fmt_t f = (fmt_t)fi;
        memcpy(cur, src, sizeof(double) * (size_t)(nx + nw + ny));
        double *x = cur, *w = cur + nx, *dy = cur + nx + nw;
        tensor_t *ox, *ow, *ody;
        /* views: x every second column of a wider storage, w and dy transposed storages */
        tensor_t *tx = make_input(f, xs, c->views ? 1 : 0, x, &ox);
        tensor_t *tw = make_input(f, wsh, c->views ? 2 : 0, w, &ow);
        tensor_t *tdy = make_input(f, ysh, c->views ? 2 : 0, dy, &ody);

        if (!R.r[0] || !same_values(cur, prev, nx + nw + ny)) {
            refs_free(&R);
            const int64_t *shapes[OP_COUNT] = {ysh, xs, wsh};
            const int64_t counts[OP_COUNT] = {ny, nx, nw};
            for (int op = 0; op < OP_COUNT; op++) {
                R.n[op] = counts[op];
                memcpy(R.shape[op], shapes[op], sizeof R.shape[op]);
                R.r[op] = malloc(sizeof(double) * (size_t)counts[op]);
                R.s[op] = malloc(sizeof(double) * (size_t)counts[op]);
            }
            ref_forward(&g, x, w, R.r[OP_FWD], R.s[OP_FWD]);
            ref_backward_input(&g, dy, w, R.r[OP_BWD_IN], R.s[OP_BWD_IN]);
            ref_backward_weight(&g, x, dy, R.r[OP_BWD_W], R.s[OP_BWD_W]);
            R.nterms[OP_FWD] = (double)(g.C * g.KH * g.KW);
            R.nterms[OP_BWD_IN] = (double)(g.O + g.KH * g.KW);
            R.nterms[OP_BWD_W] = (double)(g.N * g.OH * g.OW);
            for (int op = 0; op < OP_COUNT; op++) R.maxabs[op] = max_abs(R.r[op], R.n[op]);
            memcpy(prev, cur, sizeof(double) * (size_t)(nx + nw + ny));
        }

        /* every backend on 2 threads, the last one once more on 1 thread; the bits of
         * integer formats must agree everywhere, those of float formats across threads */
        first_bits fb;
        memset(&fb, 0, sizeof fb);
        double worst[OP_COUNT] = {0, 0, 0};
        int integer = fmt_is_shared_exponent(f);
        for (int bi = 0; bi < nbackends; bi++) {
            if (!flexpoint_backend_available(bi)) continue;
            const char *bn = flexpoint_backend_name(bi);
            CHECK_STATUS(flexpoint_set_backend(bn), FX_OK);
            if (!integer) first_bits_clear(&fb);
            int min_threads = bi == last_backend ? 1 : 2;
            for (int threads = 2; threads >= min_threads; threads--) {
                char tag[64];
                snprintf(tag, sizeof tag, "%s/%dT", bn, threads);
                flexpoint_set_num_threads(threads);
                run_ops(c, f, tag, tx, tw, tdy, &R, &fb, worst);
            }
        }
        flexpoint_set_num_threads(2);
        printf("  %-40s %-8s worst normwise error: fwd %.3g, grad input %.3g, grad weight %.3g\n",
               c->name, fmt_name(f), worst[0], worst[1], worst[2]);
        first_bits_clear(&fb);
        tensor_free(tx);
        tensor_free(tw);
        tensor_free(tdy);
        tensor_free(ox);
        tensor_free(ow);
        tensor_free(ody);
    }
    refs_free(&R);
    free(src);
    free(cur);
    free(prev);
}

/* ---- 4. mixed formats and bad arguments ----------------------------------------------------- */

/* Read all of t as raw 16-bit patterns (or the fp32 bits) for an exact comparison. */
static int same_bits(const tensor_t *a, const tensor_t *b)
{
    int64_t n = tensor_numel(a);
    size_t esz = tensor_fmt(a) == FMT_FP32 ? 4 : 2;
    void *ra = malloc(esz * (size_t)n), *rb = malloc(esz * (size_t)n);
    tensor_get_raw(a, ra);
    tensor_get_raw(b, rb);
    int same = memcmp(ra, rb, esz * (size_t)n) == 0;
    if (same && fmt_is_shared_exponent(tensor_fmt(a))) same = tensor_exp(a) == tensor_exp(b);
    free(ra);
    free(rb);
    return same;
}

static void mixed_formats(void)
{
    int64_t xs[4] = {2, 3, 6, 5}, ws[4] = {4, 3, 3, 3}, ys[4] = {2, 4, 6, 5};
    float xv[180], wv[108], dyv[240];
    test_rng r;
    test_rng_seed(&r, 4242);
    for (int i = 0; i < 180; i++) xv[i] = (float)test_rng_normal(&r);
    for (int i = 0; i < 108; i++) wv[i] = (float)test_rng_normal(&r);
    for (int i = 0; i < 240; i++) dyv[i] = (float)test_rng_normal(&r);

    /* Integer first input with a float second input: the float input is quantised at its
     * exact exponent, i.e. exactly as a DFP16 tensor written from the same values. */
    tensor_t *xf = tensor_new(FMT_FLEX16_5, 4, xs), *w32 = tensor_new(FMT_FP32, 4, ws);
    tensor_t *wd = tensor_new(FMT_DFP16, 4, ws), *dyf = tensor_new(FMT_FLEX16_5, 4, ys);
    tensor_t *dy32 = tensor_new(FMT_FP32, 4, ys), *dyd = tensor_new(FMT_DFP16, 4, ys);
    tensor_from_f32(xf, xv);
    tensor_from_f32(w32, wv);
    tensor_from_f32(wd, wv);
    tensor_from_f32(dyf, dyv);
    tensor_from_f32(dy32, dyv);
    tensor_from_f32(dyd, dyv);
    tensor_t *y1 = tensor_new(FMT_DFP16, 4, ys), *y2 = tensor_new(FMT_DFP16, 4, ys);
    CHECK_STATUS(tensor_conv2d(y1, xf, w32, 1, 1, 1, 1, 1, 1), FX_OK);
    CHECK_STATUS(tensor_conv2d(y2, xf, wd, 1, 1, 1, 1, 1, 1), FX_OK);
    CHECK(same_bits(y1, y2), "mixed flex16_5 x fp32 forward differs from flex16_5 x dfp16");
    tensor_t *dx1 = tensor_new(FMT_DFP16, 4, xs), *dx2 = tensor_new(FMT_DFP16, 4, xs);
    CHECK_STATUS(tensor_conv2d_backward_input(dx1, dyf, w32, 1, 1, 1, 1, 1, 1), FX_OK);
    CHECK_STATUS(tensor_conv2d_backward_input(dx2, dyf, wd, 1, 1, 1, 1, 1, 1), FX_OK);
    CHECK(same_bits(dx1, dx2), "mixed grad input: fp32 w differs from dfp16 w");
    tensor_t *dw1 = tensor_new(FMT_DFP16, 4, ws), *dw2 = tensor_new(FMT_DFP16, 4, ws);
    CHECK_STATUS(tensor_conv2d_backward_weight(dw1, xf, dy32, 1, 1, 1, 1, 1, 1), FX_OK);
    CHECK_STATUS(tensor_conv2d_backward_weight(dw2, xf, dyd, 1, 1, 1, 1, 1, 1), FX_OK);
    CHECK(same_bits(dw1, dw2), "mixed grad weight: fp32 dy differs from dfp16 dy");

    /* Float first input with a bf16 / shared-exponent second input: fp32 compute on the
     * second input's exact fp32 values, i.e. as if it were an fp32 tensor of those values. */
    tensor_t *x32 = tensor_new(FMT_FP32, 4, xs), *wb = tensor_new(FMT_BF16, 4, ws);
    tensor_t *wbv = tensor_new(FMT_FP32, 4, ws);
    tensor_from_f32(x32, xv);
    tensor_from_f32(wb, wv);
    float wround[108];
    tensor_to_f32(wb, wround);
    tensor_from_f32(wbv, wround);
    tensor_t *z1 = tensor_new(FMT_FP32, 4, ys), *z2 = tensor_new(FMT_FP32, 4, ys);
    CHECK_STATUS(tensor_conv2d(z1, x32, wb, 1, 1, 1, 1, 1, 1), FX_OK);
    CHECK_STATUS(tensor_conv2d(z2, x32, wbv, 1, 1, 1, 1, 1, 1), FX_OK);
    CHECK(same_bits(z1, z2), "mixed fp32 x bf16 forward differs from fp32 x fp32(bf16 values)");
    float wdv[108];
    tensor_to_f32(wd, wdv);
    tensor_from_f32(wbv, wdv);
    CHECK_STATUS(tensor_conv2d(z1, x32, wd, 1, 1, 1, 1, 1, 1), FX_OK);
    CHECK_STATUS(tensor_conv2d(z2, x32, wbv, 1, 1, 1, 1, 1, 1), FX_OK);
    CHECK(same_bits(z1, z2), "mixed fp32 x dfp16 forward differs from fp32 x fp32(dfp16 values)");

    tensor_t *all[] = {xf, w32, wd, dyf, dy32, dyd, y1, y2, dx1,
                       dx2, dw1, dw2, x32, wb, wbv, z1, z2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tensor_free(all[i]);
}

/* Status and a message naming the function and `needle`; y unchanged. */
static void expect_fail(int rc, int want, const char *func, const char *needle, tensor_t *y,
                        const float *y_before, const char *what)
{
    const char *msg = flexpoint_last_error();
    CHECK(rc == want, "%s: status %s, want %s (%s)", what, flexpoint_status_str(rc),
          flexpoint_status_str(want), msg);
    CHECK(strstr(msg, func) != NULL && strstr(msg, needle) != NULL,
          "%s: message \"%s\" should name %s and \"%s\"", what, msg, func, needle);
    if (y) {
        int64_t n = tensor_numel(y);
        float *now = malloc(sizeof(float) * (size_t)n);
        tensor_to_f32(y, now);
        CHECK(memcmp(now, y_before, sizeof(float) * (size_t)n) == 0, "%s: output was modified",
              what);
        free(now);
    }
}

static void bad_arguments(void)
{
    int64_t xs[4] = {2, 3, 8, 8}, ws[4] = {4, 3, 3, 3}, ys[4] = {2, 4, 8, 8};
    int64_t x3[3] = {3, 8, 8}, wbad[4] = {4, 2, 3, 3}, ybad[4] = {2, 4, 7, 8};
    int64_t wbig[4] = {4, 3, 11, 3}, ys_big[4] = {2, 4, 0, 8}, x0[4] = {0, 3, 8, 8};
    int64_t y0[4] = {0, 4, 8, 8};
    tensor_t *x = tensor_new(FMT_FP32, 4, xs), *w = tensor_new(FMT_FP32, 4, ws);
    tensor_t *y = tensor_new(FMT_DFP16, 4, ys), *xt = tensor_new(FMT_FP32, 3, x3);
    tensor_t *wc = tensor_new(FMT_FP32, 4, wbad), *yb = tensor_new(FMT_FP32, 4, ybad);
    tensor_t *wk = tensor_new(FMT_FP32, 4, wbig), *yk = tensor_new(FMT_FP32, 4, ys_big);
    tensor_t *xz = tensor_new(FMT_FP32, 4, x0), *yz = tensor_new(FMT_FP32, 4, y0);
    int64_t ny = tensor_numel(y);
    float *yv = malloc(sizeof(float) * (size_t)ny), *before = malloc(sizeof(float) * (size_t)ny);
    for (int64_t i = 0; i < ny; i++) yv[i] = (float)(i % 7) - 3.0f;
    tensor_from_f32(y, yv);
    tensor_to_f32(y, before);
    const char *F = "tensor_conv2d";

    expect_fail(tensor_conv2d(NULL, x, w, 1, 1, 1, 1, 1, 1), FX_EINVAL, F, "y is NULL", NULL,
                NULL, "NULL y");
    expect_fail(tensor_conv2d(y, NULL, w, 1, 1, 1, 1, 1, 1), FX_EINVAL, F, "x is NULL", y, before,
                "NULL x");
    expect_fail(tensor_conv2d(y, x, NULL, 1, 1, 1, 1, 1, 1), FX_EINVAL, F, "w is NULL", y, before,
                "NULL w");
    expect_fail(tensor_conv2d(y, x, w, 0, 1, 1, 1, 1, 1), FX_EINVAL, F, "stride (0, 1)", y,
                before, "stride 0");
    expect_fail(tensor_conv2d(y, x, w, 1, -2, 1, 1, 1, 1), FX_EINVAL, F, "stride (1, -2)", y,
                before, "negative stride");
    expect_fail(tensor_conv2d(y, x, w, 1, 1, -1, 1, 1, 1), FX_EINVAL, F, "padding (-1, 1)", y,
                before, "negative padding");
    expect_fail(tensor_conv2d(y, x, w, 1, 1, 1, 1, 1, 0), FX_EINVAL, F, "dilation (1, 0)", y,
                before, "dilation 0");
    expect_fail(tensor_conv2d(y, xt, w, 1, 1, 1, 1, 1, 1), FX_ESHAPE, F, "[3, 8, 8]", y, before,
                "3-D x");
    expect_fail(tensor_conv2d(y, x, wc, 1, 1, 1, 1, 1, 1), FX_ESHAPE, F, "channel mismatch", y,
                before, "channel mismatch");
    expect_fail(tensor_conv2d(yb, x, w, 1, 1, 1, 1, 1, 1), FX_ESHAPE, F, "[2, 4, 8, 8]", NULL,
                NULL, "wrong output shape");
    expect_fail(tensor_conv2d(y, x, w, 2, 2, 1, 1, 1, 1), FX_ESHAPE, F, "[2, 4, 4, 4]", y, before,
                "output shape of stride 2");
    expect_fail(tensor_conv2d(yk, x, wk, 1, 1, 1, 1, 1, 1), FX_ESHAPE, F, "does not fit", NULL,
                NULL, "kernel 11 on 8+2");
    expect_fail(tensor_conv2d(y, x, w, 1, 1, 0, 0, 1, 5), FX_ESHAPE, F, "does not fit", y, before,
                "dilated kernel too wide");
    expect_fail(tensor_conv2d(yz, xz, w, 1, 1, 1, 1, 1, 1), FX_ESHAPE, F, "empty batch", NULL,
                NULL, "zero batch");

    const char *FI = "tensor_conv2d_backward_input";
    tensor_t *dx = tensor_new(FMT_FP32, 4, xs);
    expect_fail(tensor_conv2d_backward_input(dx, NULL, w, 1, 1, 1, 1, 1, 1), FX_EINVAL, FI,
                "dy is NULL", NULL, NULL, "grad input NULL dy");
    expect_fail(tensor_conv2d_backward_input(dx, yb, w, 1, 1, 1, 1, 1, 1), FX_ESHAPE, FI,
                "dy.shape=[2, 4, 7, 8]", NULL, NULL, "grad input wrong dy shape");
    expect_fail(tensor_conv2d_backward_input(dx, y, wc, 1, 1, 1, 1, 1, 1), FX_ESHAPE, FI,
                "channel mismatch", NULL, NULL, "grad input channel mismatch");
    expect_fail(tensor_conv2d_backward_input(dx, y, w, 1, 1, 1, 1, 0, 1), FX_EINVAL, FI,
                "dilation (0, 1)", NULL, NULL, "grad input dilation 0");
    const char *FW = "tensor_conv2d_backward_weight";
    tensor_t *dwt = tensor_new(FMT_FP32, 4, ws);
    expect_fail(tensor_conv2d_backward_weight(NULL, x, y, 1, 1, 1, 1, 1, 1), FX_EINVAL, FW,
                "dw is NULL", NULL, NULL, "grad weight NULL dw");
    expect_fail(tensor_conv2d_backward_weight(wc, x, y, 1, 1, 1, 1, 1, 1), FX_ESHAPE, FW,
                "channel mismatch", NULL, NULL, "grad weight channel mismatch");
    expect_fail(tensor_conv2d_backward_weight(dwt, x, y, 1, 1, 1, 1, 2, 2), FX_ESHAPE, FW,
                "[2, 4, 6, 6]", NULL, NULL, "grad weight dy shape with dilation 2");
    expect_fail(tensor_conv2d_backward_weight(dwt, x, y, 1, 1, 3, 1, 1, 1), FX_ESHAPE, FW,
                "padding (3, 1)", NULL, NULL, "grad weight dy shape with padding 3");

    tensor_t *all[] = {x, w, y, xt, wc, yb, wk, yk, xz, yz, dx, dwt};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tensor_free(all[i]);
    free(yv);
    free(before);
}

/* ---- 5. repeated writes of a FLEX16_5 output --------------------------------------------------
 * From its second write on, the exponent of a FLEX16_5 output is predicted before the op, and
 * the forward convolution rounds each batch chunk while its sums are in cache (conv2d.c). Each
 * write is checked against the exact integer sum rounded (ties to even, saturating) at the
 * exponent the write reports: steady writes, an overflow that the robust preset recomputes at
 * another exponent, and one that the published preset keeps saturated. */

/* s * 2^-shift rounded to nearest even, saturated to [-32767, 32767] (counted in *sat). */
static int64_t ref_requant(int64_t s, int shift, int64_t *sat)
{
    int64_t q;
    if (shift >= 1) {
        const int64_t d = (int64_t)1 << shift, fl = s >= 0 ? s / d : -((-s + d - 1) / d);
        const int64_t r = s - fl * d, half = d / 2; /* 0 <= r < d */
        q = fl + (r > half || (r == half && (fl & 1)));
    } else {
        const double v = ldexp((double)s, -shift);
        q = fabs(v) > 32767 ? (v > 0 ? 32768 : -32768) : (int64_t)v;
    }
    if (q > 32767 || q < -32767) {
        ++*sat;
        return q > 0 ? 32767 : -32767;
    }
    return q;
}

/* Exact integer forward convolution of the mantissas (stride 1, no dilation). */
static void ref_forward_int(const geom *g, const int16_t *x, const int16_t *w, int64_t *y)
{
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t o = 0; o < g->O; o++)
            for (int64_t oh = 0; oh < g->OH; oh++)
                for (int64_t ow = 0; ow < g->OW; ow++) {
                    int64_t acc = 0;
                    for (int64_t c = 0; c < g->C; c++)
                        for (int64_t kh = 0; kh < g->KH; kh++)
                            for (int64_t kw = 0; kw < g->KW; kw++) {
                                const int64_t ih = oh - g->ph + kh, iw = ow - g->pw + kw;
                                if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) continue;
                                acc += (int64_t)x[((n * g->C + c) * g->H + ih) * g->W + iw] *
                                       w[((o * g->C + c) * g->KH + kh) * g->KW + kw];
                            }
                    y[((n * g->O + o) * g->OH + oh) * g->OW + ow] = acc;
                }
}

/* One write y = conv(x, w); checks y's mantissas and the trace record of that write. */
static void flex_write_check(const char *what, tensor_t *y, const tensor_t *x, const tensor_t *w,
                             const geom *g, int64_t write, int want_overflow, int want_recompute)
{
    const int64_t nx = g->N * g->C * g->H * g->W, nw = g->O * g->C * g->KH * g->KW;
    const int64_t ny = g->N * g->O * g->OH * g->OW;
    int16_t *xm = malloc(sizeof(int16_t) * (size_t)nx), *wm = malloc(sizeof(int16_t) * (size_t)nw);
    int16_t *ym = malloc(sizeof(int16_t) * (size_t)ny);
    int64_t *sum = malloc(sizeof(int64_t) * (size_t)ny);
    /* from the second write on, the exponent is known before the op: the fused path runs */
    int peek_e = 0;
    const int peeked = fx_write_shared_peek_exp(y, &peek_e);
    CHECK(peeked == (write > 0), "%s, write %lld: exponent known before the op: %d", what,
          (long long)write, peeked);
    const int64_t redone0 = fx_conv_stage_redone(), staged0 = fx_conv_redone_staged();
    CHECK_STATUS(tensor_conv2d(y, x, w, 1, 1, (int)g->ph, (int)g->pw, 1, 1), FX_OK);
    /* the first run keeps only each chunk's sums; a recomputed overflow runs the op again
     * with a whole stage, and nothing else does */
    const int64_t redone = fx_conv_stage_redone() - redone0;
    const int64_t staged = fx_conv_redone_staged() - staged0;
    CHECK(redone == (peeked && want_recompute) && staged == redone,
          "%s, write %lld: run again %lld times, %lld with a stage (recomputed: %d)", what,
          (long long)write, (long long)redone, (long long)staged, want_recompute);
    CHECK_STATUS(tensor_get_raw(x, xm), FX_OK);
    CHECK_STATUS(tensor_get_raw(w, wm), FX_OK);
    CHECK_STATUS(tensor_get_raw(y, ym), FX_OK);
    ref_forward_int(g, xm, wm, sum);
    const int e = tensor_exp(y), shift = e - (tensor_exp(x) + tensor_exp(w));
    int64_t sat = 0, bad = 0;
    for (int64_t i = 0; i < ny; i++) {
        const int64_t want = ref_requant(sum[i], shift, &sat);
        if (ym[i] != want && bad++ < 3)
            CHECK(0, "%s, write %lld: element %lld is %d, the exact sum rounded at 2^%d is %lld",
                  what, (long long)write, (long long)i, ym[i], e, (long long)want);
    }
    CHECK(bad == 0, "%s, write %lld: %lld elements differ", what, (long long)write,
          (long long)bad);
    fx_trace_record rec;
    CHECK_STATUS(tensor_trace_get(y, write, &rec), FX_OK);
    CHECK(rec.exp == e && rec.saturated == sat && rec.overflow == want_overflow &&
              rec.recomputed == want_recompute,
          "%s, write %lld: trace exp %d (tensor %d), saturated %lld (reference %lld), overflow "
          "%d (want %d), recomputed %d (want %d)", what, (long long)write, rec.exp, e,
          (long long)rec.saturated, (long long)sat, rec.overflow, want_overflow,
          rec.recomputed, want_recompute);
    /* the largest exact |sum| in real units: the conv's own maximum pass or, on the fused
     * path, the rounding pass's statistics (conv2d.c); either must give it exactly */
    uint64_t smax = 0;
    for (int64_t i = 0; i < ny; i++) {
        const uint64_t a = sum[i] < 0 ? (uint64_t)0 - (uint64_t)sum[i] : (uint64_t)sum[i];
        smax = a > smax ? a : smax;
    }
    const double want_max = ldexp((double)smax, tensor_exp(x) + tensor_exp(w));
    CHECK(rec.true_max == want_max, "%s, write %lld: trace true max %.17g, the exact sums' %.17g",
          what, (long long)write, rec.true_max, want_max);
    CHECK(!peeked || rec.recomputed || rec.exp == peek_e,
          "%s, write %lld: written at 2^%d, predicted 2^%d before the op", what,
          (long long)write, rec.exp, peek_e);
    free(xm);
    free(wm);
    free(ym);
    free(sum);
}

static void flex_repeated_writes_case(int64_t N, int64_t HW, int threads)
{
    /* 5x5 kernels (the vector panels), 40 output channels (a partial column tile); N = 1: one
     * chunk whose rounding uses the threads inside it; N = 17 at 6x6: chunks of 2 samples and a
     * last chunk of 1 (conv2d.c's chunking); small enough for the sanitizer build */
    const geom g = {.N = N, .C = 16, .H = HW, .W = HW, .O = 40, .KH = 5, .KW = 5, .ph = 2,
                    .pw = 2, .OH = HW, .OW = HW};
    const int64_t xs[4] = {g.N, g.C, g.H, g.W}, ws[4] = {g.O, g.C, g.KH, g.KW};
    const int64_t ys[4] = {g.N, g.O, g.OH, g.OW};
    const int64_t nx = g.N * g.C * g.H * g.W, nw = g.O * g.C * g.KH * g.KW;
    float *xv = malloc(sizeof(float) * (size_t)nx), *wv = malloc(sizeof(float) * (size_t)nw);
    test_rng r;
    test_rng_seed(&r, 5150);
    for (int64_t i = 0; i < nx; i++) xv[i] = (float)test_rng_normal(&r);
    for (int64_t i = 0; i < nw; i++) wv[i] = (float)test_rng_normal(&r);
    tensor_t *x = tensor_new(FMT_FLEX16_5, 4, xs), *w = tensor_new(FMT_FLEX16_5, 4, ws);
    tensor_t *xbig = tensor_new(FMT_FLEX16_5, 4, xs);
    CHECK_STATUS(tensor_from_f32(x, xv), FX_OK);
    CHECK_STATUS(tensor_from_f32(w, wv), FX_OK);
    for (int64_t i = 0; i < nx; i++) xv[i] *= 64.0f; /* outputs 64x larger: an overflow */
    CHECK_STATUS(tensor_from_f32(xbig, xv), FX_OK);
    const char *presets[2] = {"robust", "published"};
    flexpoint_set_num_threads(threads);
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        for (int pi = 0; pi < 2; pi++) {
            const int robust = pi == 0;
            char what[128];
            snprintf(what, sizeof what, "repeated flex16_5 writes, N=%lld %lldx%lld, %d thread(s), "
                     "%s, %s", (long long)N, (long long)HW, (long long)HW, threads,
                     flexpoint_backend_name(bi), presets[pi]);
            tensor_t *y = tensor_new(FMT_FLEX16_5, 4, ys);
            CHECK_STATUS(tensor_set_autoflex(y, presets[pi]), FX_OK);
            CHECK_STATUS(tensor_trace_enable(y, 1), FX_OK);
            flex_write_check(what, y, x, w, &g, 0, 0, 0);    /* first write: initialisation */
            flex_write_check(what, y, x, w, &g, 1, 0, 0);    /* predicted exponent */
            flex_write_check(what, y, xbig, w, &g, 2, 1, robust); /* overflow */
            flex_write_check(what, y, x, w, &g, 3, 0, 0);
            tensor_free(y);
        }
    }
    tensor_free(x);
    tensor_free(w);
    tensor_free(xbig);
    free(xv);
    free(wv);
    flexpoint_set_num_threads(2);
}

static void flex_repeated_writes(void)
{
    flex_repeated_writes_case(2, 10, 2);
    flex_repeated_writes_case(1, 10, 2);
    flex_repeated_writes_case(17, 6, 1);
}

/* ---- 6. repeated writes of a DFP16 output -----------------------------------------------------
 * The forward convolution rounds each chunk at a guess of the exponent, the output's current
 * one, while its sums are in cache, and the write reuses that rounding when its exact choice
 * is the guess (conv2d.c, fx_write_shared_guess_exp); after a recent move it also rounds at
 * the exponent the output left (fx_write_shared_alt_exp). Writes whose guess is right (the
 * same scale again) and wrong (the first write, a jump of 2^6, back, and a jump of 2^12) must
 * each be the exact sums rounded at the reported exponent, with the exact maximum in the
 * trace, and equal bit for bit to the same write into a fresh tensor (whose guess, its initial
 * exponent, is almost always wrong). The writes that repeat the previous scale must have found
 * their rounding done; the jump while steady runs the op again without a stage (a DFP16 write
 * asks for the exact exponent of the sums, which the second run guesses); the way back finds
 * its rounding at the second exponent; the jump of 2^12 after it, neither guessed exponent,
 * runs the op again, without a stage either. A profiled step counts each run again as
 * exponent bookkeeping (profile_counters.h), a span of that category alone. */
static void dfp16_repeated_writes(void)
{
    const geom g = {.N = 5, .C = 16, .H = 7, .W = 7, .O = 40, .KH = 5, .KW = 5, .ph = 2,
                    .pw = 2, .OH = 7, .OW = 7};
    const int64_t xs[4] = {g.N, g.C, g.H, g.W}, ws[4] = {g.O, g.C, g.KH, g.KW};
    const int64_t ys[4] = {g.N, g.O, g.OH, g.OW};
    const int64_t nx = g.N * g.C * g.H * g.W, nw = g.O * g.C * g.KH * g.KW;
    const int64_t ny = g.N * g.O * g.OH * g.OW;
    float *xv = malloc(sizeof(float) * (size_t)nx), *wv = malloc(sizeof(float) * (size_t)nw);
    test_rng r;
    test_rng_seed(&r, 6160);
    for (int64_t i = 0; i < nx; i++) xv[i] = (float)test_rng_normal(&r);
    for (int64_t i = 0; i < nw; i++) wv[i] = (float)test_rng_normal(&r);
    tensor_t *x = tensor_new(FMT_DFP16, 4, xs), *w = tensor_new(FMT_DFP16, 4, ws);
    tensor_t *xbig = tensor_new(FMT_DFP16, 4, xs), *xhuge = tensor_new(FMT_DFP16, 4, xs);
    CHECK_STATUS(tensor_from_f32(x, xv), FX_OK);
    CHECK_STATUS(tensor_from_f32(w, wv), FX_OK);
    for (int64_t i = 0; i < nx; i++) xv[i] *= 64.0f;
    CHECK_STATUS(tensor_from_f32(xbig, xv), FX_OK);
    for (int64_t i = 0; i < nx; i++) xv[i] *= 64.0f;
    CHECK_STATUS(tensor_from_f32(xhuge, xv), FX_OK);
    int16_t *xm = malloc(sizeof(int16_t) * (size_t)nx), *wm = malloc(sizeof(int16_t) * (size_t)nw);
    int16_t *ym = malloc(sizeof(int16_t) * (size_t)ny), *fm = malloc(sizeof(int16_t) * (size_t)ny);
    int64_t *sum = malloc(sizeof(int64_t) * (size_t)ny);
    CHECK_STATUS(tensor_get_raw(w, wm), FX_OK);
    /* write 0 (its guess, the initial exponent, may be wrong), four at one scale (then the
     * guesses are steady), a jump of 2^6 and back (a miss while steady, then one after a
     * miss, at the exponent the output left), one more at the first scale, and a jump of
     * 2^12 while not steady; per write, whether the early rounding is reused, found at the
     * second exponent, and the op run again (never with a stage) */
    enum { NWRITES = 9, JUMP = 5 };
    const tensor_t *inputs[NWRITES] = {x, x, x, x, x, xbig, x, x, xhuge};
    const int want_reused[NWRITES] = {-1, 1, 1, 1, 1, 1, 1, 1, 1};
    const int want_alt[NWRITES] = {-1, 0, 0, 0, 0, 0, 1, 0, 0};
    const int want_redone[NWRITES] = {-1, 0, 0, 0, 0, 1, 0, 0, 1};
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        tensor_t *y = tensor_new(FMT_DFP16, 4, ys);
        CHECK_STATUS(tensor_trace_enable(y, 1), FX_OK);
        for (int wi = 0; wi < NWRITES; wi++) {
            const tensor_t *xi = inputs[wi];
            const int steady = fx_write_shared_guess_steady(y);
            /* a first write guessed the initial exponent: right or wrong, it is no miss */
            CHECK((wi != 1 && wi != JUMP) || steady, "dfp16 write %d on %s: guesses not steady",
                  wi, flexpoint_backend_name(bi));
            CHECK(!(wi == JUMP + 1 || wi == JUMP + 2) || !steady,
                  "dfp16 write %d on %s: steady right after a miss", wi,
                  flexpoint_backend_name(bi));
            const int64_t reused0 = fx_conv_early_rounding_reused();
            const int64_t alt0 = fx_conv_alt_rounding_reused();
            const int64_t redone0 = fx_conv_stage_redone(), staged0 = fx_conv_redone_staged();
            fx_prof_sink sink = {.log = 1};
            fx_prof_sink *prev = fx_prof_attach(&sink);
            CHECK_STATUS(tensor_conv2d(y, xi, w, 1, 1, 2, 2, 1, 1), FX_OK);
            fx_prof_attach(prev);
            const int64_t reused = fx_conv_early_rounding_reused() - reused0;
            const int64_t redone = fx_conv_stage_redone() - redone0;
            const int64_t staged = fx_conv_redone_staged() - staged0;
            const int64_t alt = fx_conv_alt_rounding_reused() - alt0;
            CHECK(wi == 0 || (reused == want_reused[wi] && alt == want_alt[wi] &&
                              redone == want_redone[wi] && staged == 0),
                  "dfp16 write %d on %s (steady %d): the early rounding was reused %lld times "
                  "(%lld at the second exponent), the op run again %lld times, %lld with a "
                  "stage", wi, flexpoint_backend_name(bi), steady, (long long)reused,
                  (long long)alt, (long long)redone, (long long)staged);
            /* a profiled write counts its run again, whole, as exponent bookkeeping: one span
             * of that category alone (without deferred host writes, whose settling is another
             * such span, none in a write that did not run again) */
            int64_t bookkeeping_only = 0;
            for (int64_t i = 0; i < sink.nevents; i++)
                bookkeeping_only += sink.events[i].ns[FX_PROF_AUTOFLEX] > 0 &&
                                    sink.events[i].ns[FX_PROF_ROUNDING] == 0 &&
                                    sink.events[i].ns[FX_PROF_CONVERSION] == 0;
            CHECK(wi == 0 || sink.dropped > 0 ||
                      (redone ? bookkeeping_only >= 1
                              : bookkeeping_only == 0 || getenv("FLEXPOINT_TEST_DEFER_HOST")),
                  "dfp16 write %d on %s: run again %lld times, %lld profile spans of exponent "
                  "bookkeeping alone", wi, flexpoint_backend_name(bi), (long long)redone,
                  (long long)bookkeeping_only);
            fx_prof_sink_free(&sink);
            tensor_t *fresh = tensor_new(FMT_DFP16, 4, ys);
            CHECK_STATUS(tensor_conv2d(fresh, xi, w, 1, 1, 2, 2, 1, 1), FX_OK);
            CHECK_STATUS(tensor_get_raw(xi, xm), FX_OK);
            CHECK_STATUS(tensor_get_raw(y, ym), FX_OK);
            CHECK_STATUS(tensor_get_raw(fresh, fm), FX_OK);
            ref_forward_int(&g, xm, wm, sum);
            const int e = tensor_exp(y), shift = e - (tensor_exp(xi) + tensor_exp(w));
            int64_t sat = 0, bad = 0, mmax = 0;
            uint64_t smax = 0;
            for (int64_t i = 0; i < ny; i++) {
                bad += ym[i] != ref_requant(sum[i], shift, &sat);
                const uint64_t a = sum[i] < 0 ? (uint64_t)0 - (uint64_t)sum[i] : (uint64_t)sum[i];
                smax = a > smax ? a : smax;
                mmax = abs(ym[i]) > mmax ? abs(ym[i]) : mmax;
            }
            fx_trace_record rec;
            CHECK_STATUS(tensor_trace_get(y, wi, &rec), FX_OK);
            CHECK(bad == 0 && sat == 0 && mmax >= 16384,
                  "dfp16 write %d on %s: %lld elements differ from the exact sums rounded at 2^%d, "
                  "%lld saturated, largest mantissa %lld", wi, flexpoint_backend_name(bi),
                  (long long)bad, e, (long long)sat, (long long)mmax);
            CHECK(rec.exp == e && rec.true_max == ldexp((double)smax, tensor_exp(xi) + tensor_exp(w)),
                  "dfp16 write %d on %s: trace exp %d (tensor %d), true max %.17g", wi,
                  flexpoint_backend_name(bi), rec.exp, e, rec.true_max);
            CHECK(tensor_exp(fresh) == e && memcmp(ym, fm, sizeof(int16_t) * (size_t)ny) == 0,
                  "dfp16 write %d on %s: differs from the same write into a fresh tensor", wi,
                  flexpoint_backend_name(bi));
            tensor_free(fresh);
        }
        tensor_free(y);
    }
    tensor_free(x);
    tensor_free(w);
    tensor_free(xbig);
    tensor_free(xhuge);
    free(xv);
    free(wv);
    free(xm);
    free(wm);
    free(ym);
    free(fm);
    free(sum);
}

static double now_s(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC); /* C11; only used to print the test's duration */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void)
{
    double t0 = now_s();
    flexpoint_set_num_threads(2);
    for (int bi = 0; bi < flexpoint_backend_count(); bi++)
        if (!flexpoint_backend_available(bi))
            printf("backend %s: skipped, the CPU lacks it (features: %s)\n",
                   flexpoint_backend_name(bi), flexpoint_cpu_features());
    hand_example();
    for (size_t ci = 0; ci < sizeof FD_CASES / sizeof *FD_CASES; ci++)
        fd_check_case(&FD_CASES[ci]);
    for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++) run_case(&CASES[ci]);
    mixed_formats();
    flex_repeated_writes();
    dfp16_repeated_writes();
    bad_arguments();
    printf("test_nn_conv: %.1f s\n", now_s() - t0);
    return test_finish("test_nn_conv");
}
