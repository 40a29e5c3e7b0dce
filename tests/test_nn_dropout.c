/* tensor_dropout / tensor_dropout_backward: fp64 reference and finite differences, every
 * format and backend, the mask (rate, reproducibility, forward == backward), bit-identity
 * across backends and thread counts, bad input.
 *
 * Reference: y_i = x_i / (1 - p) where the element is kept, 0 where dropped; element i is
 * dropped when the generator's uniform draw u(seed, step, i) is below p (the documented key).
 * Bounds (acc, before the output rounding of nn_bound):
 *   float compute: 2^-52 |r| (the factor 1/(1-p) rounded to double, then one double product);
 *   integer compute: 2^-30 |r| (the factor as a 31-bit mantissa, relative error <= 2^-30;
 *   the product is exact). p = 0 and p = 1/2 must be exact (factors 1 and 2).
 */
#include "flexpoint_nn.h"
#include "nn_misc_util.h"

#include "flex/flex_math.h" /* fx_rng_unit: the generator the mask is defined by */

static int ref_kept(double p, uint64_t seed, uint64_t step, int64_t i)
{
    return !(fx_rng_unit(seed, step, (uint64_t)i) < p);
}

static double ref_dropout(double x, double p, int kept) { return kept ? x / (1.0 - p) : 0.0; }

/* L(x) = sum w_i dropout(x)_i: its gradient is dropout_backward(w). */
static void fd_check(void)
{
    test_rng r;
    test_rng_seed(&r, 5);
    const double p = 0.3, h = 1e-6;
    for (int64_t i = 0; i < 300; i++) {
        double x = test_rng_normal(&r), w = test_rng_normal(&r);
        int k = ref_kept(p, 42, 7, i);
        double fd = (w * ref_dropout(x + h, p, k) - w * ref_dropout(x - h, p, k)) / (2 * h);
        double an = ref_dropout(w, p, k); /* backward: the same mask applied to w */
        CHECK(fabs(fd - an) <= 1e-8 * (1 + fabs(an)), "fd dropout [%lld]: fd=%.12g an=%.12g",
              (long long)i, fd, an);
    }
}

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
    double p;
    uint64_t seed, step;
} drop_case;

static const drop_case CASES[] = {
    {"1 p=0.5", 1, {1}, 0.5, 1, 0},
    {"33 p=0", 1, {33}, 0.0, 2, 1},
    {"16x17 p=0.1", 2, {16, 17}, 0.1, 3, 2},
    {"2x3x4x5 p=0.5", 4, {2, 3, 4, 5}, 0.5, 4, 3},
    {"257 p=0.9", 1, {257}, 0.9, 5, 1000},
    {"64x65 p=0.37", 2, {64, 65}, 0.37, 0xdeadbeefULL, 123456789ULL},
    {"70000 p=0.3 (threaded)", 1, {70000}, 0.3, 6, 9},
};

static void run_case(const drop_case *c, fmt_t fin, fmt_t fout, int backward, const char **bk,
                     int nbk, int threads_check)
{
    test_rng r;
    test_rng_seed(&r, 300 + (uint64_t)(c - CASES) * 5 + (uint64_t)fin);
    int64_t n = nn_numel(c->ndim, c->shape);
    double *x = nn_doubles(n), *ref = nn_doubles(n);
    double *acc = nn_doubles(n), *got = nn_doubles(n);
    for (int64_t i = 0; i < n; i++) x[i] = test_rng_normal(&r);
    tensor_t *tx = nn_tensor(fin, c->ndim, c->shape, x);
    const int integer = fmt_is_shared_exponent(fin);
    for (int64_t i = 0; i < n; i++) {
        ref[i] = ref_dropout(x[i], c->p, ref_kept(c->p, c->seed, c->step, i));
        acc[i] = (integer ? 0x1.0p-30 : 0x1.0p-52) * fabs(ref[i]);
    }
    char what[200];
    tensor_t *first = NULL;
    for (int b = 0; b < nbk; b++) {
        CHECK_STATUS(flexpoint_set_backend(bk[b]), FX_OK);
        tensor_t *y = nn_zeros(fout, c->ndim, c->shape);
        snprintf(what, sizeof what, "dropout%s %s in=%s out=%s %s", backward ? "_backward" : "",
                 c->name, fmt_name(fin), fmt_name(fout), bk[b]);
        int rc = backward ? tensor_dropout_backward(y, tx, c->p, c->seed, c->step)
                          : tensor_dropout(y, tx, c->p, c->seed, c->step);
        CHECK(rc == FX_OK, "%s: status %d: %s", what, rc, flexpoint_last_error());
        nn_check(what, y, ref, acc, n);
        /* factors 1 and 2 are exact: so is the result when the output can hold it */
        int exact = (c->p == 0.0 || c->p == 0.5) && fout == fin &&
                    (fout != FMT_FLEX16_5 || tensor_exp(y) <= tensor_exp(tx) + (c->p == 0.5));
        if (exact) {
            nn_read(y, got);
            int64_t diff = 0;
            for (int64_t i = 0; i < n; i++) diff += got[i] != ref[i];
            CHECK(diff == 0, "%s: %lld elements not exact", what, (long long)diff);
        }
        if (!first) {
            first = y;
        } else {
            CHECK(nn_same_bits(first, y), "%s: bits differ from backend %s", what, bk[0]);
            tensor_free(y);
        }
    }
    if (threads_check) {
        int prev = flexpoint_set_num_threads(1);
        tensor_t *y1 = nn_zeros(fout, c->ndim, c->shape), *y3 = nn_zeros(fout, c->ndim, c->shape);
        CHECK_STATUS(tensor_dropout(y1, tx, c->p, c->seed, c->step), FX_OK);
        flexpoint_set_num_threads(3);
        CHECK_STATUS(tensor_dropout(y3, tx, c->p, c->seed, c->step), FX_OK);
        flexpoint_set_num_threads(prev);
        CHECK(nn_same_bits(y1, y3), "dropout %s %s: results depend on the thread count",
              c->name, fmt_name(fout));
        if (!backward)
            CHECK(nn_same_bits(y1, first), "dropout %s %s: threads differ from the default",
                  c->name, fmt_name(fout));
        tensor_free(y1);
        tensor_free(y3);
    }
    tensor_free(first);
    tensor_free(tx);
    free(x);
    free(ref);
    free(acc);
    free(got);
}

/* The mask: rate, zero pattern shared by forward and backward, dependence on seed and step. */
static void mask_properties(void)
{
    const int64_t n = 100000;
    const double p = 0.3;
    int64_t sh[1] = {n};
    double *v = nn_doubles(n);
    for (int64_t i = 0; i < n; i++) v[i] = 1.0 + (double)(i % 5); /* never zero */
    tensor_t *x = nn_tensor(FMT_FP32, 1, sh, v);
    tensor_t *y = nn_zeros(FMT_FP32, 1, sh), *dx = nn_zeros(FMT_DFP16, 1, sh);
    tensor_t *y2 = nn_zeros(FMT_FP32, 1, sh), *y3 = nn_zeros(FMT_FP32, 1, sh);
    CHECK_STATUS(tensor_dropout(y, x, p, 77, 5), FX_OK);
    CHECK_STATUS(tensor_dropout_backward(dx, x, p, 77, 5), FX_OK);
    CHECK_STATUS(tensor_dropout(y2, x, p, 77, 6), FX_OK);
    CHECK_STATUS(tensor_dropout(y3, x, p, 78, 5), FX_OK);
    double *a = nn_doubles(n), *b = nn_doubles(n);
    double *c = nn_doubles(n), *d = nn_doubles(n);
    nn_read(y, a);
    nn_read(dx, b);
    nn_read(y2, c);
    nn_read(y3, d);
    int64_t dropped = 0, mism = 0, diff_step = 0, diff_seed = 0;
    for (int64_t i = 0; i < n; i++) {
        dropped += a[i] == 0;
        mism += (a[i] == 0) != (b[i] == 0);
        diff_step += (a[i] == 0) != (c[i] == 0);
        diff_seed += (a[i] == 0) != (d[i] == 0);
    }
    /* binomial(n, p): 5 standard deviations */
    double sd = sqrt(n * p * (1 - p));
    CHECK(fabs((double)dropped - n * p) < 5 * sd, "dropped %lld of %lld, expected %.0f +- %.0f",
          (long long)dropped, (long long)n, n * p, 5 * sd);
    CHECK(mism == 0, "forward and backward masks differ in %lld elements", (long long)mism);
    /* independent masks differ with probability 2p(1-p) per element */
    double want = 2 * p * (1 - p) * n, sd2 = sqrt(n * 2 * p * (1 - p) * (1 - 2 * p * (1 - p)));
    CHECK(fabs((double)diff_step - want) < 5 * sd2, "step change: %lld differences, expected %.0f",
          (long long)diff_step, want);
    CHECK(fabs((double)diff_seed - want) < 5 * sd2, "seed change: %lld differences, expected %.0f",
          (long long)diff_seed, want);
    free(a);
    free(b);
    free(c);
    free(d);
    free(v);
    tensor_free(x);
    tensor_free(y);
    tensor_free(dx);
    tensor_free(y2);
    tensor_free(y3);
}

/* The mask multiplies, as in PyTorch: NaN stays NaN even where dropped (float compute). */
static void nan_propagates(void)
{
    int64_t sh[1] = {64};
    float nanv[64], out[64];
    for (int i = 0; i < 64; i++) nanv[i] = NAN;
    tensor_t *x = nn_zeros(FMT_FP32, 1, sh), *y = nn_zeros(FMT_FP16, 1, sh);
    CHECK_STATUS(tensor_from_f32(x, nanv), FX_OK);
    CHECK_STATUS(tensor_dropout(y, x, 0.5, 1, 1), FX_OK);
    CHECK_STATUS(tensor_to_f32(y, out), FX_OK);
    int nans = 0;
    for (int i = 0; i < 64; i++) nans += isnan(out[i]) != 0;
    CHECK(nans == 64, "dropout of NaN: %d of 64 NaN", nans);
    tensor_free(x);
    tensor_free(y);
}

static void bad_input(void)
{
    int64_t s4[1] = {4}, s5[1] = {5};
    tensor_t *a = nn_zeros(FMT_FLEX16_5, 1, s4), *b = nn_zeros(FMT_BF16, 1, s5);
    tensor_t *c = nn_zeros(FMT_FP32, 1, s4);
    CHECK_STATUS(tensor_dropout(NULL, a, 0.5, 1, 1), FX_EINVAL);
    nn_check_message("tensor_dropout");
    CHECK_STATUS(tensor_dropout(c, NULL, 0.5, 1, 1), FX_EINVAL);
    CHECK_STATUS(tensor_dropout_backward(NULL, a, 0.5, 1, 1), FX_EINVAL);
    nn_check_message("tensor_dropout_backward");
    CHECK(strstr(flexpoint_last_error(), "dx") != NULL, "message lacks dx: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_dropout(b, a, 0.5, 1, 1), FX_ESHAPE);
    nn_check_message("tensor_dropout");
    CHECK_STATUS(tensor_dropout_backward(b, a, 0.5, 1, 1), FX_ESHAPE);
    const double badp[4] = {-0.1, 1.0, 2.0, NAN};
    for (int i = 0; i < 4; i++) {
        CHECK_STATUS(tensor_dropout(c, a, badp[i], 1, 1), FX_EINVAL);
        CHECK(strstr(flexpoint_last_error(), "p=") != NULL, "message lacks p: %s",
              flexpoint_last_error());
        CHECK_STATUS(tensor_dropout_backward(c, a, badp[i], 1, 1), FX_EINVAL);
    }
    /* untouched on failure */
    float before[4] = {3, 3, 3, 3}, after[4];
    CHECK_STATUS(tensor_from_f32(c, before), FX_OK);
    CHECK_STATUS(tensor_dropout(c, a, 1.0, 1, 1), FX_EINVAL);
    CHECK_STATUS(tensor_to_f32(c, after), FX_OK);
    CHECK(memcmp(before, after, sizeof before) == 0, "y changed by a failing call");
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
}

int main(void)
{
    fd_check();
    const char *bk[8];
    int nbk = nn_backends(bk, 8);
    const int ncases = (int)(sizeof CASES / sizeof *CASES);
    for (int ci = 0; ci < ncases; ci++) {
        int big = CASES[ci].shape[0] >= 70000;
        for (int k = 0; k < FMT_COUNT; k++) {
            fmt_t f = NN_FORMATS[k];
            run_case(&CASES[ci], f, f, 0, bk, nbk, big);
            run_case(&CASES[ci], f, f, 1, bk, nbk, big);
            if (big) continue;
            run_case(&CASES[ci], f, fmt_is_shared_exponent(f) ? FMT_FP32 : FMT_DFP16, 0, bk,
                     nbk, 0);
        }
    }
    printf("dropout: %d cases x %d formats (+ mixed, + backward) on %d backends\n", ncases,
           FMT_COUNT, nbk);
    mask_properties();
    nan_propagates();
    bad_input();
    return test_finish("test_nn_dropout");
}
