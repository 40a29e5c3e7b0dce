/* tensor_softmax, tensor_log_softmax and their backward passes along any axis: the fp64
 * references against central finite differences, the library's fp32 backward against finite
 * differences of its own forward, every format x backend against the references, bit-identity
 * across backends and thread counts, special values, bad input.
 *
 * References (fp64, written here, on the values as stored): per row m = max x, S = sum
 * exp(x - m); softmax exp(x - m)/S, log-softmax (x - m) - log S; backward y (dy - sum dy y) and
 * dy - exp(y) sum dy. Bounds: the op computes in fp32 from exact inputs (u = u32 = 2^-24, L the
 * row length, dm = max_k |x_k - m| of the row). d = x - m is rounded once (relative error u, so
 * exp(d) picks up |d| u); each expf/logf is within 1 ulp (2u); the fp32 sum of L positive terms
 * adds at most (L - 1) u relative; the division one more u. So with K = (2L + 16 + 2 dm) u,
 * which covers these with a factor of about 2, then the output rounding of nn_bound:
 *   softmax:           K |ref|
 *   log-softmax:       K (|x - m| + |log S| + |ref| + 1)   (S's relative error is an absolute
 *                                                           error of log S)
 *   softmax grad:      (2L + 16) u |y| (|dy| + sum |dy y|)   (fp32 sum of L products, 2 more
 *   log-softmax grad:  (2L + 16) u (|dy| + exp(y) sum |dy|)   roundings, expf within 2u)
 */
#include "flexpoint_nn.h"
#include "nn_misc_util.h"

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
    int axis;
    double scale;
} sm_case;

static const sm_case CASES[] = {
    {"[1,1] ax-1", 2, {1, 1}, -1, 1.0},
    {"[4,10] ax1", 2, {4, 10}, 1, 3.0},
    {"[4,10] ax0", 2, {4, 10}, 0, 3.0},
    {"[2,3,5] ax1", 3, {2, 3, 5}, 1, 2.0},
    {"[2,2,3,7] ax-1", 4, {2, 2, 3, 7}, -1, 4.0},
    {"[3,1000] ax-1", 2, {3, 1000}, -1, 2.0},
    {"[64,520] ax-1 (threaded)", 2, {64, 520}, -1, 3.0},
    {"[40,30,30] ax1 (threaded)", 3, {40, 30, 30}, 1, 3.0},
};

static void geom(int ndim, const int64_t *shape, int axis, int64_t *outer, int64_t *len,
                 int64_t *inner)
{
    int ax = axis < 0 ? axis + ndim : axis;
    *outer = *inner = 1;
    for (int d = 0; d < ax; d++) *outer *= shape[d];
    *len = shape[ax];
    for (int d = ax + 1; d < ndim; d++) *inner *= shape[d];
}

/* y = softmax / log-softmax of x along the geometry; acc (may be NULL) receives the bounds */
static void ref_forward(const double *x, double *y, double *acc, int64_t outer, int64_t len,
                        int64_t inner, int logsm)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *xr = x + o * len * inner + i;
            double *yr = y + o * len * inner + i;
            double m = -INFINITY, s = 0, dm = 0;
            for (int64_t k = 0; k < len; k++) m = xr[k * inner] > m ? xr[k * inner] : m;
            for (int64_t k = 0; k < len; k++) s += exp(xr[k * inner] - m);
            for (int64_t k = 0; k < len; k++) dm = fmax(dm, fabs(xr[k * inner] - m));
            const double kk = (2.0 * (double)len + 16.0 + 2.0 * dm) * NN_U32;
            for (int64_t k = 0; k < len; k++) {
                double d = xr[k * inner] - m;
                yr[k * inner] = logsm ? d - log(s) : exp(d) / s;
                if (acc)
                    acc[o * len * inner + i + k * inner] =
                        logsm ? kk * (fabs(d) + fabs(log(s)) + fabs(yr[k * inner]) + 1.0)
                              : kk * fabs(yr[k * inner]);
            }
        }
}

static void ref_backward(const double *g, const double *y, double *dx, double *acc, int64_t outer,
                         int64_t len, int64_t inner, int logsm)
{
    const double kk = (2.0 * (double)len + 16.0) * NN_U32;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const int64_t b = o * len * inner + i;
            double s = 0, sa = 0;
            for (int64_t k = 0; k < len; k++) {
                double t = logsm ? g[b + k * inner] : g[b + k * inner] * y[b + k * inner];
                s += t;
                sa += fabs(t);
            }
            for (int64_t k = 0; k < len; k++) {
                const int64_t j = b + k * inner;
                dx[j] = logsm ? g[j] - exp(y[j]) * s : y[j] * (g[j] - s);
                if (acc)
                    acc[j] = logsm ? kk * (fabs(g[j]) + exp(y[j]) * sa)
                                   : kk * fabs(y[j]) * (fabs(g[j]) + sa);
            }
        }
}

/* The references' gradients against central differences of L = sum w_k y_k. */
static void fd_reference(void)
{
    test_rng r;
    test_rng_seed(&r, 7);
    const int64_t outer = 2, len = 5, inner = 3, n = outer * len * inner;
    double x[30], w[30], y[30], yp[30], ym[30], dx[30];
    for (int i = 0; i < n; i++) {
        x[i] = 2 * test_rng_normal(&r);
        w[i] = test_rng_normal(&r);
    }
    for (int logsm = 0; logsm < 2; logsm++) {
        ref_forward(x, y, NULL, outer, len, inner, logsm);
        ref_backward(w, y, dx, NULL, outer, len, inner, logsm);
        const double h = 1e-6;
        for (int i = 0; i < n; i++) {
            double keep = x[i], lp = 0, lm = 0;
            x[i] = keep + h;
            ref_forward(x, yp, NULL, outer, len, inner, logsm);
            x[i] = keep - h;
            ref_forward(x, ym, NULL, outer, len, inner, logsm);
            x[i] = keep;
            for (int j = 0; j < n; j++) {
                lp += w[j] * yp[j];
                lm += w[j] * ym[j];
            }
            double fd = (lp - lm) / (2 * h);
            CHECK(fabs(fd - dx[i]) <= 1e-7 * (1 + fabs(dx[i])),
                  "fd %s reference [%d]: fd=%.12g analytic=%.12g",
                  logsm ? "log_softmax" : "softmax", i, fd, dx[i]);
        }
    }
}

/* The library's fp32 backward against central differences of its fp32 forward. */
static void fd_library(void)
{
    test_rng r;
    test_rng_seed(&r, 8);
    int64_t sh[3] = {2, 6, 3};
    const int n = 36;
    double x[36], w[36], dxv[36];
    float xf[36], yf[36];
    for (int i = 0; i < n; i++) {
        x[i] = 2 * test_rng_normal(&r);
        w[i] = test_rng_normal(&r);
    }
    for (int logsm = 0; logsm < 2; logsm++) {
        tensor_t *tx = nn_tensor(FMT_FP32, 3, sh, x), *ty = nn_zeros(FMT_FP32, 3, sh);
        tensor_t *tw = nn_tensor(FMT_FP32, 3, sh, w), *tdx = nn_zeros(FMT_FP32, 3, sh);
        int (*fwd)(tensor_t *, const tensor_t *, int) = logsm ? tensor_log_softmax : tensor_softmax;
        CHECK_STATUS(fwd(ty, tx, 1), FX_OK);
        CHECK_STATUS(
            (logsm ? tensor_log_softmax_backward : tensor_softmax_backward)(tdx, tw, ty, 1),
            FX_OK);
        nn_read(tdx, dxv);
        const double h = 1e-2;
        double gmax = 0;
        for (int i = 0; i < n; i++) gmax = fmax(gmax, fabs(dxv[i]));
        for (int i = 0; i < n; i++) {
            double lp = 0, lm = 0;
            for (int j = 0; j < n; j++) xf[j] = (float)x[j];
            xf[i] = (float)(x[i] + h);
            CHECK_STATUS(tensor_from_f32(tx, xf), FX_OK);
            CHECK_STATUS(fwd(ty, tx, 1), FX_OK);
            CHECK_STATUS(tensor_to_f32(ty, yf), FX_OK);
            for (int j = 0; j < n; j++) lp += w[j] * yf[j];
            xf[i] = (float)(x[i] - h);
            CHECK_STATUS(tensor_from_f32(tx, xf), FX_OK);
            CHECK_STATUS(fwd(ty, tx, 1), FX_OK);
            CHECK_STATUS(tensor_to_f32(ty, yf), FX_OK);
            for (int j = 0; j < n; j++) lm += w[j] * yf[j];
            double fd = (lp - lm) / (2 * h);
            CHECK(fabs(fd - dxv[i]) <= 2e-3 * gmax + 1e-4, "fd %s library [%d]: fd=%.8g got=%.8g",
                  logsm ? "log_softmax" : "softmax", i, fd, dxv[i]);
        }
        tensor_free(tx);
        tensor_free(ty);
        tensor_free(tw);
        tensor_free(tdx);
    }
}

static void run_case(const sm_case *c, fmt_t f, const char **bk, int nbk, int threads_check)
{
    test_rng r;
    test_rng_seed(&r, 900 + (uint64_t)(c - CASES) * 13 + (uint64_t)f);
    int64_t outer, len, inner;
    geom(c->ndim, c->shape, c->axis, &outer, &len, &inner);
    const int64_t n = nn_numel(c->ndim, c->shape);
    double *x = nn_doubles(n), *y = nn_doubles(n), *g = nn_doubles(n), *ref = nn_doubles(n);
    double *acc = nn_doubles(n);
    for (int64_t i = 0; i < n; i++) {
        x[i] = c->scale * test_rng_normal(&r);
        g[i] = test_rng_normal(&r);
    }
    tensor_t *tx = nn_tensor(f, c->ndim, c->shape, x);
    tensor_t *tg = nn_tensor(f, c->ndim, c->shape, g);
    char what[240];
    for (int logsm = 0; logsm < 2; logsm++) {
        const char *op = logsm ? "log_softmax" : "softmax";
        /* forward */
        ref_forward(x, ref, acc, outer, len, inner, logsm);
        tensor_t *first = NULL;
        for (int b = 0; b < nbk; b++) {
            CHECK_STATUS(flexpoint_set_backend(bk[b]), FX_OK);
            tensor_t *ty = nn_zeros(f, c->ndim, c->shape);
            snprintf(what, sizeof what, "%s %s %s %s", op, c->name, fmt_name(f), bk[b]);
            int rc = (logsm ? tensor_log_softmax : tensor_softmax)(ty, tx, c->axis);
            CHECK(rc == FX_OK, "%s: status %d: %s", what, rc, flexpoint_last_error());
            nn_check(what, ty, ref, acc, n);
            if (!first) first = ty;
            else {
                CHECK(nn_same_bits(first, ty), "%s: bits differ from backend %s", what, bk[0]);
                tensor_free(ty);
            }
        }
        if (threads_check) {
            int prev = flexpoint_set_num_threads(1);
            tensor_t *t1 = nn_zeros(f, c->ndim, c->shape), *t3 = nn_zeros(f, c->ndim, c->shape);
            CHECK_STATUS((logsm ? tensor_log_softmax : tensor_softmax)(t1, tx, c->axis), FX_OK);
            flexpoint_set_num_threads(3);
            CHECK_STATUS((logsm ? tensor_log_softmax : tensor_softmax)(t3, tx, c->axis), FX_OK);
            flexpoint_set_num_threads(prev);
            CHECK(nn_same_bits(t1, t3) && nn_same_bits(t1, first),
                  "%s %s %s: results depend on the thread count", op, c->name, fmt_name(f));
            tensor_free(t1);
            tensor_free(t3);
        }
        /* backward, from the forward output as stored */
        nn_read(first, y);
        ref_backward(g, y, ref, acc, outer, len, inner, logsm);
        tensor_t *dfirst = NULL;
        for (int b = 0; b < nbk; b++) {
            CHECK_STATUS(flexpoint_set_backend(bk[b]), FX_OK);
            tensor_t *dx = nn_zeros(f, c->ndim, c->shape);
            snprintf(what, sizeof what, "%s_backward %s %s %s", op, c->name, fmt_name(f), bk[b]);
            int rc = (logsm ? tensor_log_softmax_backward : tensor_softmax_backward)(dx, tg, first,
                                                                                     c->axis);
            CHECK(rc == FX_OK, "%s: status %d: %s", what, rc, flexpoint_last_error());
            nn_check(what, dx, ref, acc, n);
            if (!dfirst) dfirst = dx;
            else {
                CHECK(nn_same_bits(dfirst, dx), "%s: bits differ from backend %s", what, bk[0]);
                tensor_free(dx);
            }
        }
        if (threads_check) {
            int prev = flexpoint_set_num_threads(1);
            tensor_t *t1 = nn_zeros(f, c->ndim, c->shape), *t3 = nn_zeros(f, c->ndim, c->shape);
            CHECK_STATUS((logsm ? tensor_log_softmax_backward : tensor_softmax_backward)(
                             t1, tg, first, c->axis), FX_OK);
            flexpoint_set_num_threads(3);
            CHECK_STATUS((logsm ? tensor_log_softmax_backward : tensor_softmax_backward)(
                             t3, tg, first, c->axis), FX_OK);
            flexpoint_set_num_threads(prev);
            CHECK(nn_same_bits(t1, t3) && nn_same_bits(t1, dfirst),
                  "%s_backward %s %s: results depend on the thread count", op, c->name,
                  fmt_name(f));
            tensor_free(t1);
            tensor_free(t3);
        }
        tensor_free(first);
        tensor_free(dfirst);
    }
    tensor_free(tx);
    tensor_free(tg);
    free(x);
    free(y);
    free(g);
    free(ref);
    free(acc);
}

/* NaN, ±Inf, ±0, subnormals, values that overflow the output format. */
static void special_values(void)
{
    int64_t sh[2] = {6, 4};
    const float NaN = NAN, Inf = INFINITY;
    float x[24] = {0.5f, NaN, 1, 2,                 /* NaN row: all NaN */
                   0, Inf, 1, 2,                    /* +Inf row: all NaN */
                   -Inf, -Inf, -Inf, -Inf,          /* all -Inf: NaN */
                   1, -Inf, 1, 0,                   /* one -Inf: probability 0 */
                   0.0f, -0.0f, 0.0f, -0.0f,        /* zeros: uniform */
                   1e-45f, -1e-45f, 1e-40f, 0};     /* subnormals: uniform */
    for (int k = 0; k < FMT_COUNT; k++) {
        fmt_t f = NN_FORMATS[k];
        tensor_t *t = nn_zeros(FMT_FP32, 2, sh), *y = nn_zeros(f, 2, sh), *ly = nn_zeros(f, 2, sh);
        CHECK_STATUS(tensor_from_f32(t, x), FX_OK);
        CHECK_STATUS(tensor_softmax(y, t, -1), FX_OK);
        CHECK_STATUS(tensor_log_softmax(ly, t, -1), FX_OK);
        float p[24], lp[24];
        CHECK_STATUS(tensor_to_f32(y, p), FX_OK);
        CHECK_STATUS(tensor_to_f32(ly, lp), FX_OK);
        if (fmt_is_shared_exponent(f)) {
            double nf = -1, nl = -1;
            CHECK_STATUS(tensor_stat(y, "nonfinite", &nf), FX_OK);
            CHECK_STATUS(tensor_stat(ly, "nonfinite", &nl), FX_OK);
            /* rows 0-2 NaN; log-softmax also has the -Inf of row 3 */
            CHECK(nf == 12, "softmax specials into %s: %g non-finite, want 12", fmt_name(f), nf);
            CHECK(nl == 13, "log_softmax specials into %s: %g non-finite, want 13", fmt_name(f),
                  nl);
        } else {
            for (int i = 0; i < 12; i++) {
                CHECK(isnan(p[i]), "softmax %s: element %d = %g, want NaN", fmt_name(f), i, p[i]);
                CHECK(isnan(lp[i]), "log_softmax %s: element %d = %g, want NaN", fmt_name(f), i,
                      lp[i]);
            }
            CHECK(lp[13] == -Inf, "log_softmax %s of -Inf: %g", fmt_name(f), lp[13]);
        }
        CHECK(p[13] == 0, "softmax %s of -Inf: %g, want 0", fmt_name(f), p[13]);
        double e1 = exp(1.0), want = e1 / (2 * e1 + 1);
        CHECK(fabs(p[12] - want) <= 2e-3 * want && p[12] == p[14],
              "softmax %s row with -Inf: %g, want %g", fmt_name(f), p[12], want);
        for (int i = 16; i < 24; i++) {
            CHECK(fabs(p[i] - 0.25) <= 1e-3, "softmax %s of zeros/subnormals [%d] = %g",
                  fmt_name(f), i, p[i]);
            CHECK(fabs(lp[i] + log(4.0)) <= 1e-2, "log_softmax %s of zeros/subnormals [%d] = %g",
                  fmt_name(f), i, lp[i]);
        }
        tensor_free(t);
        tensor_free(y);
        tensor_free(ly);
    }
    /* values that overflow the output format: log_softmax of [1e30, -1e30] is [0, -2e30] */
    int64_t s2[2] = {1, 2};
    float big[2] = {1e30f, -1e30f};
    tensor_t *t = nn_zeros(FMT_FP32, 2, s2);
    CHECK_STATUS(tensor_from_f32(t, big), FX_OK);
    for (int k = 1; k < FMT_COUNT; k++) {
        fmt_t f = NN_FORMATS[k];
        tensor_t *ly = nn_zeros(f, 2, s2);
        CHECK_STATUS(tensor_log_softmax(ly, t, 1), FX_OK);
        float v[2];
        CHECK_STATUS(tensor_to_f32(ly, v), FX_OK);
        CHECK(v[0] == 0, "log_softmax overflow into %s: first %g, want 0", fmt_name(f), v[0]);
        if (f == FMT_FP16) {
            CHECK(v[1] == -Inf, "log_softmax into fp16: %g, want -Inf (IEEE overflow)", v[1]);
        } else if (f == FMT_BF16) {
            CHECK(fabs(v[1] + 2e30) <= 2e30 * NN_UBF, "log_softmax into bf16: %g", v[1]);
        } else if (f == FMT_FLEX16_5) {
            double sat = -1;
            CHECK_STATUS(tensor_stat(ly, "saturated", &sat), FX_OK);
            CHECK(sat == 1 && v[1] < 0, "log_softmax into flex16_5: %g saturated, value %g", sat,
                  v[1]);
        } else {
            CHECK(fabs(v[1] + 2e30) <= 2e30 * 0x1p-14, "log_softmax into dfp16: %g", v[1]);
        }
        tensor_free(ly);
    }
    tensor_free(t);
}

static void bad_input(void)
{
    int64_t s34[2] = {3, 4}, s43[2] = {4, 3}, s0[2] = {0, 4};
    tensor_t *x = nn_zeros(FMT_FP32, 2, s34), *y = nn_zeros(FMT_DFP16, 2, s34);
    tensor_t *y43 = nn_zeros(FMT_FP32, 2, s43), *e0 = nn_zeros(FMT_FP16, 2, s0);
    tensor_t *e0y = nn_zeros(FMT_FP16, 2, s0);
    float before[12], after[12];
    for (int i = 0; i < 12; i++) before[i] = (float)i;
    CHECK_STATUS(tensor_from_f32(y, before), FX_OK);
    CHECK_STATUS(tensor_from_f32(x, before), FX_OK);
    CHECK_STATUS(tensor_to_f32(y, before), FX_OK);
    CHECK_STATUS(tensor_softmax(y, x, 2), FX_EINVAL);
    nn_check_message("tensor_softmax");
    CHECK(strstr(flexpoint_last_error(), "axis=2") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_log_softmax(y, x, -3), FX_EINVAL);
    nn_check_message("tensor_log_softmax");
    CHECK_STATUS(tensor_softmax(y43, x, 1), FX_ESHAPE);
    CHECK(strstr(flexpoint_last_error(), "[4, 3]") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_softmax(NULL, x, 1), FX_EINVAL);
    CHECK_STATUS(tensor_softmax(y, NULL, 1), FX_EINVAL);
    CHECK_STATUS(tensor_softmax_backward(y, x, y43, 1), FX_ESHAPE);
    nn_check_message("tensor_softmax_backward");
    CHECK_STATUS(tensor_softmax_backward(y43, x, x, 1), FX_ESHAPE);
    CHECK_STATUS(tensor_log_softmax_backward(y, x, x, 5), FX_EINVAL);
    nn_check_message("tensor_log_softmax_backward");
    CHECK_STATUS(tensor_log_softmax_backward(y, NULL, x, 1), FX_EINVAL);
    CHECK_STATUS(tensor_to_f32(y, after), FX_OK);
    CHECK(memcmp(before, after, sizeof before) == 0, "y changed by a failing call");
    double w = -1;
    CHECK_STATUS(tensor_stat(y, "writes", &w), FX_OK);
    CHECK(w == 1, "failing calls wrote into y: %g writes", w);
    /* empty tensors: nothing to do */
    CHECK_STATUS(tensor_softmax(e0y, e0, 1), FX_OK);
    CHECK_STATUS(tensor_log_softmax_backward(e0y, e0, e0, 0), FX_OK);
    tensor_free(x);
    tensor_free(y);
    tensor_free(y43);
    tensor_free(e0);
    tensor_free(e0y);
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
    printf("softmax / log_softmax: %d cases x %d formats on %d backends\n", ncases, FMT_COUNT, nbk);
    special_values();
    bad_input();
    return test_finish("test_nn_softmax_axis");
}
