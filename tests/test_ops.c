/* Every op x format x CPU backend against an fp64 reference written here, from one case list.
 *
 * Inputs are first rounded into the format (written, then read back), so only the op's own
 * error is measured. Error bound, per element (derived, not tuned):
 *   |y - r| <= acc + out_round
 *   acc: float compute: elementwise ops 2*u32*|r| (one fp32 rounding, plus the round-to-odd
 *        step when the result is narrowed); sums and dot products gamma_n * sum|terms| with
 *        gamma_n = n*u32/(1 - n*u32) (fp32 accumulation of n terms, any order).
 *        integer compute: 0 (products and sums are exact by construction).
 *   out_round: fp32 u32*|r|; fp16 u16*|r| + 2^-25 (subnormal half step); bf16 u_bf*|r| +
 *        2^-134; flex16_5/dfp16 2^(e_out - 1) (one rounding to the output exponent).
 * The normwise error max|y-r| / max|r| is printed per case as well.
 */
#include "flexpoint.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U32 0x1.0p-24
#define U16 0x1.0p-11
#define UBF 0x1.0p-8

typedef enum { K_ADD, K_SUB, K_MUL, K_SCALE, K_RELU, K_COPY, K_SUM, K_MATMUL } kind_t;

typedef struct {
    const char *name;
    kind_t kind;
    int ndim_a;
    int64_t sa[4];
    int ndim_b;
    int64_t sb[4];
    int axis;        /* K_SUM */
    int view;        /* 0 none, 1 transpose a, 2 transpose b, 3 slice step 2 of a and b */
} op_case;

/* One case list: tile edges (1, 15/16/17, 31/32/33, 63/64/65), primes, broadcasting, views. */
static const op_case CASES[] = {
    {"add 1", K_ADD, 1, {1}, 1, {1}, 0, 0},
    {"add 17", K_ADD, 1, {17}, 1, {17}, 0, 0},
    {"add 64x65", K_ADD, 2, {64, 65}, 2, {64, 65}, 0, 0},
    {"add bias 13x31+31", K_ADD, 2, {13, 31}, 1, {31}, 0, 0},
    {"add 2x3x4 + 3x1", K_ADD, 3, {2, 3, 4}, 2, {3, 1}, 0, 0},
    {"add sliced 9x14", K_ADD, 2, {9, 14}, 2, {9, 14}, 0, 3},
    {"sub 33", K_SUB, 1, {33}, 1, {33}, 0, 0},
    {"sub 5x1 - 1x7", K_SUB, 2, {5, 1}, 2, {1, 7}, 0, 0},
    {"mul 15x16", K_MUL, 2, {15, 16}, 2, {15, 16}, 0, 0},
    {"mul transposed 11x7", K_MUL, 2, {11, 7}, 2, {11, 7}, 0, 1},
    {"scale 101", K_SCALE, 1, {101}, 0, {0}, 0, 0},
    {"relu 63", K_RELU, 1, {63}, 0, {0}, 0, 0},
    {"relu sliced 6x10", K_RELU, 2, {6, 10}, 0, {0}, 0, 3},
    {"copy 3x5x7", K_COPY, 3, {3, 5, 7}, 0, {0}, 0, 0},
    {"sum all 1000", K_SUM, 1, {1000}, 0, {0}, FX_AXIS_ALL, 0},
    {"sum axis0 5x7x3", K_SUM, 3, {5, 7, 3}, 0, {0}, 0, 0},
    {"sum axis1 5x7x3", K_SUM, 3, {5, 7, 3}, 0, {0}, 1, 0},
    {"sum axis-1 5x7x3", K_SUM, 3, {5, 7, 3}, 0, {0}, -1, 0},
    {"matmul 1x1x1", K_MATMUL, 2, {1, 1}, 2, {1, 1}, 0, 0},
    {"matmul 7x13x5", K_MATMUL, 2, {7, 13}, 2, {13, 5}, 0, 0},
    {"matmul 16x16x16", K_MATMUL, 2, {16, 16}, 2, {16, 16}, 0, 0},
    {"matmul 17x31x33", K_MATMUL, 2, {17, 31}, 2, {31, 33}, 0, 0},
    {"matmul 65x97x129", K_MATMUL, 2, {65, 97}, 2, {97, 129}, 0, 0},
    {"matmul 1x300x1", K_MATMUL, 2, {1, 300}, 2, {300, 1}, 0, 0},
    {"matmul 200x3x2", K_MATMUL, 2, {200, 3}, 2, {3, 2}, 0, 0},
    {"matmul aT 19x23x29", K_MATMUL, 2, {19, 23}, 2, {23, 29}, 0, 1},
    {"matmul bT 19x23x29", K_MATMUL, 2, {19, 23}, 2, {23, 29}, 0, 2},
    {"matmul sliced 12x20x8", K_MATMUL, 2, {12, 20}, 2, {20, 8}, 0, 3},
};

static double ulp_rel(fmt_t f)
{
    switch (f) {
    case FMT_FP32: return U32;
    case FMT_FP16: return U16;
    case FMT_BF16: return UBF;
    default: return 0.0;
    }
}

static double abs_floor(fmt_t f)
{
    return f == FMT_FP16 ? 0x1.0p-25 : (f == FMT_BF16 ? 0x1.0p-134 : (f == FMT_FP32 ? 0x1.0p-150 : 0));
}

/* An input tensor of logical shape `shape` in format f, possibly a view, filled from x
 * (logical row-major). Returns the tensor to use; *owner is what to free as well. */
static tensor_t *make_input(fmt_t f, int ndim, const int64_t *shape, int view, double *x,
                            tensor_t **owner)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    float *buf = malloc((size_t)(n ? n : 1) * 2 * sizeof(float));
    for (int64_t i = 0; i < n; i++) buf[i] = (float)x[i];
    tensor_t *t = NULL, *base = NULL;
    if (view == 1 && ndim == 2) { /* storage [s1, s0], transposed view [s0, s1] */
        int64_t ts[2] = {shape[1], shape[0]};
        base = tensor_new(f, 2, ts);
        t = tensor_view_transpose(base, 0, 1);
    } else if (view == 3) { /* storage twice as wide, take every second element of the last dim */
        int64_t ws[4];
        memcpy(ws, shape, sizeof(int64_t) * (size_t)ndim);
        ws[ndim - 1] *= 2;
        base = tensor_new(f, ndim, ws);
        t = tensor_view_slice(base, ndim - 1, 1, ws[ndim - 1], 2);
    } else {
        base = tensor_new(f, ndim, shape);
        t = base;
    }
    if (t != base) {
        /* fill the whole base first so that the view's elements share the base's exponent */
        int64_t bn = tensor_numel(base);
        float *bb = malloc((size_t)bn * sizeof(float));
        for (int64_t i = 0; i < bn; i++) bb[i] = (float)x[i % (n ? n : 1)];
        CHECK_STATUS(tensor_from_f32(base, bb), FX_OK);
        free(bb);
        /* then write the logical values through the view at that exponent */
        CHECK_STATUS(tensor_from_f32(t, buf), FX_OK);
    } else {
        CHECK_STATUS(tensor_from_f32(t, buf), FX_OK);
    }
    /* read back the values as rounded into the format */
    CHECK_STATUS(tensor_to_f32(t, buf), FX_OK);
    for (int64_t i = 0; i < n; i++) x[i] = buf[i];
    free(buf);
    *owner = (t != base) ? base : NULL;
    return t;
}

static void fill(test_rng *r, double *x, int64_t n, double scale)
{
    for (int64_t i = 0; i < n; i++) x[i] = scale * test_rng_normal(r);
}

/* fp64 reference: r (value) and s (sum of |terms|, for the accumulation bound). */
static int64_t reference(const op_case *c, const double *a, const double *b, double scal,
                         int64_t *oshape, int *ondim, double *r, double *s, int64_t *nterms)
{
    int64_t na = 1;
    for (int d = 0; d < c->ndim_a; d++) na *= c->sa[d];
    *nterms = 1;
    if (c->kind == K_MATMUL) {
        int64_t M = c->sa[0], K = c->sa[1], N = c->sb[1];
        *ondim = 2;
        oshape[0] = M;
        oshape[1] = N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0, sa = 0;
                for (int64_t k = 0; k < K; k++) {
                    acc += a[i * K + k] * b[k * N + j];
                    sa += fabs(a[i * K + k] * b[k * N + j]);
                }
                r[i * N + j] = acc;
                s[i * N + j] = sa;
            }
        *nterms = K;
        return M * N;
    }
    if (c->kind == K_SUM) {
        int64_t outer = 1, len, inner = 1;
        if (c->axis == FX_AXIS_ALL) {
            len = na;
            *ondim = 1;
            oshape[0] = 1;
        } else {
            int ax = c->axis < 0 ? c->axis + c->ndim_a : c->axis;
            for (int d = 0; d < ax; d++) outer *= c->sa[d];
            len = c->sa[ax];
            for (int d = ax + 1; d < c->ndim_a; d++) inner *= c->sa[d];
            *ondim = 0;
            for (int d = 0; d < c->ndim_a; d++)
                if (d != ax) oshape[(*ondim)++] = c->sa[d];
        }
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                double acc = 0, sa = 0;
                for (int64_t k = 0; k < len; k++) {
                    acc += a[(o * len + k) * inner + i];
                    sa += fabs(a[(o * len + k) * inner + i]);
                }
                r[o * inner + i] = acc;
                s[o * inner + i] = sa;
            }
        *nterms = len;
        return outer * inner;
    }
    /* elementwise, with broadcasting for binary ops */
    int nd = c->ndim_a;
    if (c->ndim_b > nd) nd = c->ndim_b;
    *ondim = nd;
    int binary = c->kind == K_ADD || c->kind == K_SUB || c->kind == K_MUL;
    for (int d = 0; d < nd; d++) {
        int da = d - (nd - c->ndim_a), db = d - (nd - c->ndim_b);
        int64_t x = da >= 0 ? c->sa[da] : 1, y = (binary && db >= 0) ? c->sb[db] : 1;
        oshape[d] = x > y ? x : y;
    }
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= oshape[d];
    for (int64_t i = 0; i < n; i++) {
        /* unravel i, then index a and b with broadcasting */
        int64_t rem = i, ia = 0, ib = 0, stra = 1, strb = 1;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t id = rem % oshape[d];
            rem /= oshape[d];
            int da = d - (nd - c->ndim_a), db = d - (nd - c->ndim_b);
            if (da >= 0) {
                if (c->sa[da] != 1) ia += id * stra;
                stra *= c->sa[da];
            }
            if (binary && db >= 0) {
                if (c->sb[db] != 1) ib += id * strb;
                strb *= c->sb[db];
            }
        }
        double va = a[ia], vb = binary ? b[ib] : 0;
        double v = 0;
        switch (c->kind) {
        case K_ADD: v = va + vb; break;
        case K_SUB: v = va - vb; break;
        case K_MUL: v = va * vb; break;
        case K_SCALE: v = va * scal; break;
        case K_RELU: v = va > 0 ? va : 0; break;
        default: v = va; break;
        }
        r[i] = v;
        s[i] = fabs(v);
    }
    return n;
}

static void run_case(const op_case *c, fmt_t f, const char *backend, double *worst)
{
    test_rng rng;
    test_rng_seed(&rng, 1234 + (uint64_t)(c - CASES) * 31 + (uint64_t)f);
    int64_t na = 1, nb = 1;
    for (int d = 0; d < c->ndim_a; d++) na *= c->sa[d];
    for (int d = 0; d < c->ndim_b; d++) nb *= c->sb[d];
    double *a = malloc(sizeof(double) * (size_t)na);
    double *b = malloc(sizeof(double) * (size_t)(nb ? nb : 1));
    fill(&rng, a, na, 1.0);
    fill(&rng, b, nb, 1.0);
    tensor_t *ownA = NULL, *ownB = NULL, *tb = NULL;
    int va = (c->view == 1 || c->view == 3) ? c->view : 0;
    int vb = (c->view == 2) ? 1 : (c->view == 3 ? 3 : 0);
    tensor_t *ta = make_input(f, c->ndim_a, c->sa, va, a, &ownA);
    if (c->ndim_b) tb = make_input(f, c->ndim_b, c->sb, vb, b, &ownB);
    double scal = 0.7109375; /* a short dyadic: exact in every scalar representation */

    int64_t oshape[4];
    int ondim;
    int64_t maxn = na * (nb ? nb : 1) + 8;
    double *r = malloc(sizeof(double) * (size_t)maxn), *s = malloc(sizeof(double) * (size_t)maxn);
    int64_t nterms;
    int64_t n = reference(c, a, b, scal, oshape, &ondim, r, s, &nterms);
    tensor_t *out = tensor_new(f, ondim, oshape);
    int rc = FX_EINVAL;
    switch (c->kind) {
    case K_ADD: rc = tensor_add(out, ta, tb); break;
    case K_SUB: rc = tensor_sub(out, ta, tb); break;
    case K_MUL: rc = tensor_mul(out, ta, tb); break;
    case K_SCALE: rc = tensor_scale(out, ta, scal); break;
    case K_RELU: rc = tensor_relu(out, ta); break;
    case K_COPY: rc = tensor_copy(out, ta); break;
    case K_SUM: rc = tensor_sum(out, ta, c->axis); break;
    case K_MATMUL: rc = tensor_matmul(out, ta, tb); break;
    }
    CHECK(rc == FX_OK, "%s %s %s: status %d: %s", c->name, fmt_name(f), backend, rc,
          flexpoint_last_error());
    float *y = malloc(sizeof(float) * (size_t)n);
    CHECK_STATUS(tensor_to_f32(out, y), FX_OK);

    int integer = fmt_is_shared_exponent(f);
    double uo = ulp_rel(f), fl = abs_floor(f);
    double step = integer ? ldexp(1.0, tensor_exp(out) - 1) : 0.0;
    double gamma = nterms * U32 / (1.0 - nterms * U32);
    double maxerr = 0, maxr = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)y[i] - r[i]);
        double acc = integer ? 0.0
                             : ((c->kind == K_SUM || c->kind == K_MATMUL) ? gamma * s[i]
                                                                          : 2 * U32 * fabs(r[i]));
        double bound = acc + (integer ? step : uo * (fabs(r[i]) + acc) + fl);
        if (err > bound * (1 + 1e-12) && bad++ < 3)
            CHECK(0, "%s %s %s: element %lld y=%.9g ref=%.9g err=%.3g bound=%.3g", c->name,
                  fmt_name(f), backend, (long long)i, y[i], r[i], err, bound);
        if (err > maxerr) maxerr = err;
        if (fabs(r[i]) > maxr) maxr = fabs(r[i]);
    }
    CHECK(bad == 0, "%s %s %s: %d elements outside the bound", c->name, fmt_name(f), backend, bad);
    if (integer) {
        double sat = -1;
        CHECK_STATUS(tensor_stat(out, "saturated", &sat), FX_OK);
        CHECK(sat == 0, "%s %s %s: %g saturated", c->name, fmt_name(f), backend, sat);
    }
    double nw = maxr > 0 ? maxerr / maxr : maxerr;
    if (nw > *worst) *worst = nw;
    free(y);
    free(r);
    free(s);
    free(a);
    free(b);
    tensor_free(out);
    tensor_free(ta);
    tensor_free(tb);
    tensor_free(ownA);
    tensor_free(ownB);
}

/* Mixed-format inputs: the compute rule in include/flexpoint.h. */
static void mixed_formats(void)
{
    int64_t sh[1] = {8};
    float x[8] = {1.5f, -2.25f, 3.0f, 0.125f, -7.5f, 100.0f, -0.5f, 2.0f};
    float y[8] = {0.5f, 0.25f, -1.0f, 8.0f, 1.0f, -3.0f, 0.75f, 16.0f};
    for (int fa = 0; fa < FMT_COUNT; fa++)
        for (int fb = 0; fb < FMT_COUNT; fb++) {
            tensor_t *a = tensor_new((fmt_t)fa, 1, sh), *b = tensor_new((fmt_t)fb, 1, sh);
            tensor_t *o = tensor_new(FMT_FP32, 1, sh);
            tensor_from_f32(a, x);
            tensor_from_f32(b, y);
            CHECK_STATUS(tensor_mul(o, a, b), FX_OK);
            float got[8];
            tensor_to_f32(o, got);
            /* all these values are exact in every format, and so are the products */
            for (int i = 0; i < 8; i++)
                CHECK(got[i] == x[i] * y[i], "mixed %s*%s [%d]: %g != %g", fmt_name((fmt_t)fa),
                      fmt_name((fmt_t)fb), i, got[i], x[i] * y[i]);
            tensor_free(a);
            tensor_free(b);
            tensor_free(o);
        }
}

/* In-place ops are allowed: out may be the very same tensor as an input. */
static void in_place(void)
{
    int64_t sh[2] = {4, 4};
    for (int f = 0; f < FMT_COUNT; f++) {
        tensor_t *a = tensor_new((fmt_t)f, 2, sh);
        /* the result doubles the maximum: "published" Autoflex would saturate on this first
         * jump (by design, see test_autoflex_*); "robust" recomputes at the exact exponent */
        if (f == FMT_FLEX16_5) CHECK_STATUS(tensor_set_autoflex(a, "robust"), FX_OK);
        float x[16], got[16];
        for (int i = 0; i < 16; i++) x[i] = (float)(i - 8) * 0.25f;
        tensor_from_f32(a, x);
        CHECK_STATUS(tensor_add(a, a, a), FX_OK);
        tensor_to_f32(a, got);
        for (int i = 0; i < 16; i++)
            CHECK(got[i] == 2 * x[i], "in-place add %s [%d]: %g", fmt_name((fmt_t)f), i, got[i]);
        CHECK_STATUS(tensor_matmul(a, a, a), FX_OK); /* aliasing matmul: staged, so correct */
        tensor_free(a);
    }
}

int main(void)
{
    int nb = flexpoint_backend_count();
    for (int bi = 0; bi < nb; bi++) {
        const char *bn = flexpoint_backend_name(bi);
        if (!flexpoint_backend_available(bi)) {
            printf("backend %s: skipped, the CPU lacks it (features: %s)\n", bn,
                   flexpoint_cpu_features());
            continue;
        }
        CHECK_STATUS(flexpoint_set_backend(bn), FX_OK);
        for (int f = 0; f < FMT_COUNT; f++) {
            double worst = 0;
            for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++)
                run_case(&CASES[ci], (fmt_t)f, bn, &worst);
            printf("backend %-6s %-8s: %zu cases, worst normwise error %.3g\n", bn,
                   fmt_name((fmt_t)f), sizeof CASES / sizeof *CASES, worst);
        }
        mixed_formats();
        in_place();
    }
    return test_finish("test_ops");
}
