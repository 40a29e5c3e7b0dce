/* tensor_relu_backward: fp64 reference and finite differences, every format and backend,
 * bit-identity across backends and thread counts, bad input.
 *
 * Bounds: the op is a selection, so acc = 0; when dx has dy's format the result must be
 * exact (float formats: the same values; DFP16: exact exponent; FLEX16_5: exact whenever its
 * exponent is not coarser than dy's), otherwise nn_bound's one output rounding.
 */
#include "flexpoint_nn.h"
#include "nn_misc_util.h"
#include "nn/nn_ops.h" /* fx_nn_relu_backward_set_one_pass */

/* fp64 references, written independently of the library */
static double ref_relu(double x) { return x > 0 ? x : 0; }
static double ref_relu_backward(double dy, double x) { return x > 0 ? dy : 0; }

/* Central differences of L(x) = sum w_i relu(x_i) against the backward reference. */
static void fd_check(void)
{
    test_rng r;
    test_rng_seed(&r, 11);
    const double h = 1e-6;
    int checked = 0;
    for (int i = 0; i < 200; i++) {
        double x = test_rng_normal(&r), w = test_rng_normal(&r);
        if (fabs(x) < 4 * h) continue; /* the kink: no derivative */
        double fd = (w * ref_relu(x + h) - w * ref_relu(x - h)) / (2 * h);
        double an = ref_relu_backward(w, x);
        CHECK(fabs(fd - an) <= 1e-8 * (1 + fabs(an)), "fd relu: x=%g fd=%.12g analytic=%.12g",
              x, fd, an);
        checked++;
    }
    CHECK(checked > 150, "only %d finite-difference points", checked);
}

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
    int sliced; /* inputs are every second element of a twice-as-wide storage */
} relu_case;

static const relu_case CASES[] = {
    {"1", 1, {1}, 0},           {"17", 1, {17}, 0},          {"64x65", 2, {64, 65}, 0},
    {"3x4x5x6", 4, {3, 4, 5, 6}, 0}, {"sliced 6x10", 2, {6, 10}, 1},
    {"70000 (threaded)", 1, {70000}, 0},
};

/* An input: x values drawn into the format (exact zeros every 7th element); for a sliced case
 * a view of every second column. *base is what to free besides the view. */
static tensor_t *make_input(fmt_t f, const relu_case *c, double *vals, test_rng *r, double scale,
                            tensor_t **base)
{
    int64_t n = nn_numel(c->ndim, c->shape);
    if (!c->sliced) {
        for (int64_t i = 0; i < n; i++) vals[i] = i % 7 == 3 ? 0.0 : scale * test_rng_normal(r);
        *base = NULL;
        return nn_tensor(f, c->ndim, c->shape, vals);
    }
    int64_t ws[4];
    memcpy(ws, c->shape, sizeof ws);
    ws[c->ndim - 1] *= 2;
    int64_t wn = n * 2;
    double *wv = nn_doubles(wn);
    for (int64_t i = 0; i < wn; i++) wv[i] = i % 7 == 3 ? 0.0 : scale * test_rng_normal(r);
    *base = nn_tensor(f, c->ndim, ws, wv);
    free(wv);
    tensor_t *v = tensor_view_slice(*base, c->ndim - 1, 1, ws[c->ndim - 1], 2);
    nn_read(v, vals);
    return v;
}

/* One case in one (dy format, x format, dx format) combination on every backend. */
static void run_case(const relu_case *c, fmt_t fdy, fmt_t fx, fmt_t fdx, const char **bk,
                     int nbk, int threads_check)
{
    test_rng r;
    test_rng_seed(&r, 100 + (uint64_t)(c - CASES) * 7 + (uint64_t)fdy * 3 + (uint64_t)fx);
    int64_t n = nn_numel(c->ndim, c->shape);
    double *x = nn_doubles(n), *dy = nn_doubles(n);
    double *ref = nn_doubles(n), *got = nn_doubles(n);
    tensor_t *xb, *dyb;
    tensor_t *tx = make_input(fx, c, x, &r, 1.0, &xb);
    tensor_t *tdy = make_input(fdy, c, dy, &r, 0.01, &dyb);
    for (int64_t i = 0; i < n; i++) ref[i] = ref_relu_backward(dy[i], x[i]);

    char what[160];
    tensor_t *first = NULL;
    for (int b = 0; b < nbk; b++) {
        CHECK_STATUS(flexpoint_set_backend(bk[b]), FX_OK);
        tensor_t *dx = nn_zeros(fdx, c->ndim, c->shape);
        snprintf(what, sizeof what, "relu_backward %s dy=%s x=%s dx=%s %s", c->name,
                 fmt_name(fdy), fmt_name(fx), fmt_name(fdx), bk[b]);
        CHECK_STATUS(tensor_relu_backward(dx, tdy, tx), FX_OK);
        nn_check(what, dx, ref, NULL, n);
        /* exactness of the selection */
        int exact = fdx == fdy && (fdx != FMT_FLEX16_5 || tensor_exp(dx) <= tensor_exp(tdy));
        if (exact) {
            nn_read(dx, got);
            int64_t diff = 0;
            for (int64_t i = 0; i < n; i++) diff += got[i] != ref[i];
            CHECK(diff == 0, "%s: %lld elements not exact", what, (long long)diff);
        }
        if (!first) {
            first = dx;
        } else {
            CHECK(nn_same_bits(first, dx), "%s: bits differ from backend %s", what, bk[0]);
            tensor_free(dx);
        }
    }
    if (threads_check) {
        int prev = flexpoint_set_num_threads(1);
        tensor_t *d1 = nn_zeros(fdx, c->ndim, c->shape), *d3 = nn_zeros(fdx, c->ndim, c->shape);
        CHECK_STATUS(tensor_relu_backward(d1, tdy, tx), FX_OK);
        flexpoint_set_num_threads(3);
        CHECK_STATUS(tensor_relu_backward(d3, tdy, tx), FX_OK);
        CHECK(nn_same_bits(d1, d3) && nn_same_bits(d1, first),
              "relu_backward %s %s: results depend on the thread count", c->name, fmt_name(fdx));
        flexpoint_set_num_threads(prev);
        tensor_free(d1);
        tensor_free(d3);
    }
    tensor_free(first);
    tensor_free(tx);
    tensor_free(tdy);
    tensor_free(xb);
    tensor_free(dyb);
    free(x);
    free(dy);
    free(ref);
    free(got);
}

/* In place: dx may be dy itself. */
static void in_place(void)
{
    int64_t sh[1] = {9};
    for (int k = 0; k < FMT_COUNT; k++) {
        fmt_t f = NN_FORMATS[k];
        double xv[9] = {-1, 2, 0, 3, -4, 5, 0.5, -0.25, 1};
        double gv[9] = {1, -2, 3, -4, 5, -6, 7, -8, 9};
        tensor_t *x = nn_tensor(f, 1, sh, xv), *g = nn_tensor(f, 1, sh, gv);
        CHECK_STATUS(tensor_relu_backward(g, g, x), FX_OK);
        double got[9];
        nn_read(g, got);
        for (int i = 0; i < 9; i++)
            CHECK(got[i] == (xv[i] > 0 ? gv[i] : 0), "in-place %s [%d]: %g", fmt_name(f), i,
                  got[i]);
        tensor_free(x);
        tensor_free(g);
    }
}

static void bad_input(void)
{
    int64_t s4[1] = {4}, s5[1] = {5};
    tensor_t *a = nn_zeros(FMT_DFP16, 1, s4), *b = nn_zeros(FMT_FP32, 1, s4);
    tensor_t *c = nn_zeros(FMT_FP32, 1, s5);
    double v[4] = {1, -2, 3, -4};
    tensor_t *x = nn_tensor(FMT_FP32, 1, s4, v);
    CHECK_STATUS(tensor_relu_backward(NULL, a, x), FX_EINVAL);
    nn_check_message("tensor_relu_backward");
    CHECK_STATUS(tensor_relu_backward(b, NULL, x), FX_EINVAL);
    CHECK_STATUS(tensor_relu_backward(b, a, NULL), FX_EINVAL);
    CHECK_STATUS(tensor_relu_backward(b, a, c), FX_ESHAPE);
    nn_check_message("tensor_relu_backward");
    CHECK(strstr(flexpoint_last_error(), "[5]") != NULL, "message lacks the shape: %s",
          flexpoint_last_error());
    /* a failing call leaves dx untouched */
    float before[5] = {7, 7, 7, 7, 7}, after[5];
    CHECK_STATUS(tensor_from_f32(c, before), FX_OK);
    CHECK_STATUS(tensor_relu_backward(c, a, x), FX_ESHAPE);
    CHECK_STATUS(tensor_to_f32(c, after), FX_OK);
    CHECK(memcmp(before, after, sizeof before) == 0, "dx changed by a failing call");
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
    tensor_free(x);
}

/* The one-pass fp16/bf16 route against the mask route (the same tensors, both on the active
 * backend) bit for bit, over every 16-bit pattern of dy, each against three x patterns (all
 * 2^16 patterns in three rotations: zeros of both signs, subnormals, Inf, NaN, and both signs
 * of every value meet every dy), at 1 and 2 threads. */
static void one_pass_bits(void)
{
    const int64_t n = 3 * 65536, sh[1] = {n};
    uint16_t *gx = malloc(sizeof(uint16_t) * (size_t)n), *gy = malloc(sizeof(uint16_t) * (size_t)n);
    uint16_t *a = malloc(sizeof(uint16_t) * (size_t)n), *b = malloc(sizeof(uint16_t) * (size_t)n);
    static const int64_t rot[3] = {0, 1, 32768 + 7};
    for (int64_t i = 0; i < n; i++) {
        gy[i] = (uint16_t)(i & 0xFFFF);
        gx[i] = (uint16_t)((i + rot[i / 65536]) & 0xFFFF);
    }
    static const fmt_t fmts[2] = {FMT_BF16, FMT_FP16};
    for (int f = 0; f < 2; f++)
        for (int threads = 1; threads <= 2; threads++) {
            const int prev = flexpoint_set_num_threads(threads);
            tensor_t *x = tensor_new(fmts[f], 1, sh), *dy = tensor_new(fmts[f], 1, sh);
            tensor_t *d1 = tensor_new(fmts[f], 1, sh), *d0 = tensor_new(fmts[f], 1, sh);
            CHECK_STATUS(tensor_set_raw(x, gx), FX_OK);
            CHECK_STATUS(tensor_set_raw(dy, gy), FX_OK);
            fx_nn_relu_backward_set_one_pass(1);
            CHECK_STATUS(tensor_relu_backward(d1, dy, x), FX_OK);
            fx_nn_relu_backward_set_one_pass(0);
            CHECK_STATUS(tensor_relu_backward(d0, dy, x), FX_OK);
            fx_nn_relu_backward_set_one_pass(1);
            CHECK_STATUS(tensor_get_raw(d1, a), FX_OK);
            CHECK_STATUS(tensor_get_raw(d0, b), FX_OK);
            int64_t bad = 0, kept = 0;
            for (int64_t i = 0; i < n; i++) {
                bad += a[i] != b[i];
                kept += a[i] != 0;
            }
            CHECK(bad == 0, "relu_backward %s one pass, %d threads: %lld of %lld patterns "
                  "differ from the mask route", fmt_name(fmts[f]), threads, (long long)bad,
                  (long long)n);
            /* about half the x patterns are positive, and most dy patterns are nonzero */
            CHECK(kept > n / 3 && kept < 2 * n / 3, "relu_backward %s: %lld of %lld kept",
                  fmt_name(fmts[f]), (long long)kept, (long long)n);
            flexpoint_set_num_threads(prev);
            tensor_free(x);
            tensor_free(dy);
            tensor_free(d1);
            tensor_free(d0);
        }
    free(gx);
    free(gy);
    free(a);
    free(b);
}

int main(void)
{
    one_pass_bits();
    fd_check();
    const char *bk[8];
    int nbk = nn_backends(bk, 8);
    const int ncases = (int)(sizeof CASES / sizeof *CASES);
    for (int ci = 0; ci < ncases; ci++) {
        int big = CASES[ci].shape[0] >= 70000;
        for (int k = 0; k < FMT_COUNT; k++) {
            fmt_t f = NN_FORMATS[k];
            run_case(&CASES[ci], f, f, f, bk, nbk, big);
            if (big) continue;
            /* mixed formats: x of another family, dx of another format */
            fmt_t other = fmt_is_shared_exponent(f) ? FMT_FP16 : FMT_DFP16;
            run_case(&CASES[ci], f, other, f, bk, nbk, 0);
            run_case(&CASES[ci], f, f, f == FMT_FP32 ? FMT_BF16 : FMT_FP32, bk, nbk, 0);
        }
    }
    printf("relu_backward: %d cases x %d formats (+ mixed) on %d backends\n", ncases, FMT_COUNT,
           nbk);
    in_place();
    bad_input();
    return test_finish("test_nn_activation");
}
