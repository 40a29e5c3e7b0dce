/* tensor_softmax_cross_entropy: the gradient reference against central finite differences of
 * the loss reference, then every format and backend against the fp64 references, bit-identity
 * across backends and thread counts, precision near p = 1, non-finite logits, bad input.
 *
 * References (fp64, written here): per row lse = m + log(sum_j exp(x_j - m)), loss = mean of
 * lse - x_label; gradient grad_scale * (exp(x_j - m) / sum - [j = label]) / N.
 * Bounds (the op computes in double from the exactly widened logits, so both it and the
 * reference carry double rounding errors only):
 *   loss: acc = 2 (K + 8) u64 * mean_rows(|m| + |x_label| + log(sum)), then fp32 rounding;
 *   gradient: acc = 2 (K + 8) u64 |g| + 2 u64 |grad_scale| / N (the reference's cancellation
 *   in p - 1), then the output rounding of nn_bound.
 */
#include "flexpoint_nn.h"
#include "nn_misc_util.h"

/* fp64 reference: returns the mean loss; g (may be NULL) receives the gradient. */
static double ref_ce(const double *x, const int32_t *lab, int64_t N, int64_t K, double gs,
                     double *g, double *loss_scale_terms)
{
    double total = 0, terms = 0;
    for (int64_t i = 0; i < N; i++) {
        const double *r = x + i * K;
        double m = r[0];
        for (int64_t j = 1; j < K; j++) m = r[j] > m ? r[j] : m;
        double s = 0;
        for (int64_t j = 0; j < K; j++) s += exp(r[j] - m);
        double lse = m + log(s);
        total += lse - r[lab[i]];
        terms += fabs(m) + fabs(r[lab[i]]) + log(s);
        if (g)
            for (int64_t j = 0; j < K; j++)
                g[i * K + j] = gs * (exp(r[j] - m) / s - (j == lab[i] ? 1.0 : 0.0)) / (double)N;
    }
    if (loss_scale_terms) *loss_scale_terms = terms / (double)N;
    return total / (double)N;
}

/* The gradient reference against central differences of grad_scale * loss. */
static void fd_check(void)
{
    test_rng r;
    test_rng_seed(&r, 21);
    const int64_t N = 3, K = 5;
    const double gs = 8.0, h = 1e-5;
    double x[15], g[15];
    int32_t lab[3] = {0, 4, 2};
    for (int i = 0; i < 15; i++) x[i] = 2.0 * test_rng_normal(&r);
    ref_ce(x, lab, N, K, gs, g, NULL);
    for (int i = 0; i < 15; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double lp = ref_ce(x, lab, N, K, gs, NULL, NULL);
        x[i] = keep - h;
        double lm = ref_ce(x, lab, N, K, gs, NULL, NULL);
        x[i] = keep;
        double fd = gs * (lp - lm) / (2 * h);
        CHECK(fabs(fd - g[i]) <= 1e-8 * gs, "fd softmax-CE [%d]: fd=%.12g analytic=%.12g", i,
              fd, g[i]);
    }
}

typedef struct {
    const char *name;
    int64_t N, K;
    double scale, grad_scale;
} ce_case;

static const ce_case CASES[] = {
    {"1x1", 1, 1, 1.0, 1.0},       {"1x10", 1, 10, 3.0, 1.0},    {"4x10", 4, 10, 3.0, 128.0},
    {"33x17", 33, 17, 2.0, 1.0},   {"128x10", 128, 10, 4.0, 1024.0},
    {"7x1000", 7, 1000, 3.0, 1.0}, {"400x100 (threaded)", 400, 100, 3.0, 1.0},
};

static void run_case(const ce_case *c, fmt_t fin, fmt_t fout, const char **bk, int nbk,
                     int threads_check)
{
    test_rng r;
    test_rng_seed(&r, 500 + (uint64_t)(c - CASES) * 11 + (uint64_t)fin);
    const int64_t N = c->N, K = c->K, n = N * K;
    int64_t sh[2] = {N, K};
    double *x = nn_doubles(n), *g = nn_doubles(n);
    double *acc = nn_doubles(n);
    int32_t *lab = nn_xmalloc(sizeof(int32_t) * (size_t)N);
    for (int64_t i = 0; i < n; i++) x[i] = c->scale * test_rng_normal(&r);
    for (int64_t i = 0; i < N; i++) lab[i] = (int32_t)test_rng_range(&r, 0, K - 1);
    tensor_t *tx = nn_tensor(fin, 2, sh, x);
    double terms;
    double lref = ref_ce(x, lab, N, K, c->grad_scale, g, &terms);
    const double kk = 2.0 * (double)(K + 8) * NN_U64;
    for (int64_t i = 0; i < n; i++) acc[i] = kk * fabs(g[i]) + 2 * NN_U64 * fabs(c->grad_scale) / N;
    const double lacc = kk * terms;

    char what[200];
    tensor_t *first = NULL;
    float first_loss = 0;
    for (int b = 0; b < nbk; b++) {
        CHECK_STATUS(flexpoint_set_backend(bk[b]), FX_OK);
        tensor_t *d = nn_zeros(fout, 2, sh);
        snprintf(what, sizeof what, "softmax_ce %s in=%s dlogits=%s %s", c->name, fmt_name(fin),
                 fmt_name(fout), bk[b]);
        float loss = -1, loss2 = -2;
        int rc = tensor_softmax_cross_entropy(&loss, d, tx, lab, c->grad_scale);
        CHECK(rc == FX_OK, "%s: status %d: %s", what, rc, flexpoint_last_error());
        double lerr = fabs((double)loss - lref), lb = lacc + NN_U32 * (fabs(lref) + lacc);
        CHECK(lerr <= lb, "%s: loss %.9g, reference %.12g, error %.3g > bound %.3g", what, loss,
              lref, lerr, lb);
        nn_check(what, d, g, acc, n);
        /* without a gradient: the same loss */
        CHECK_STATUS(tensor_softmax_cross_entropy(&loss2, NULL, tx, lab, c->grad_scale), FX_OK);
        CHECK(loss2 == loss, "%s: loss without gradient %.9g != %.9g", what, loss2, loss);
        if (!first) {
            first = d;
            first_loss = loss;
        } else {
            CHECK(nn_same_bits(first, d) && loss == first_loss, "%s: bits differ from backend %s",
                  what, bk[0]);
            tensor_free(d);
        }
    }
    if (threads_check) {
        int prev = flexpoint_set_num_threads(1);
        tensor_t *d1 = nn_zeros(fout, 2, sh), *d3 = nn_zeros(fout, 2, sh);
        float l1, l3;
        CHECK_STATUS(tensor_softmax_cross_entropy(&l1, d1, tx, lab, c->grad_scale), FX_OK);
        flexpoint_set_num_threads(3);
        CHECK_STATUS(tensor_softmax_cross_entropy(&l3, d3, tx, lab, c->grad_scale), FX_OK);
        flexpoint_set_num_threads(prev);
        CHECK(nn_same_bits(d1, d3) && nn_same_bits(d1, first) && l1 == l3 && l1 == first_loss,
              "softmax_ce %s %s: results depend on the thread count", c->name, fmt_name(fout));
        tensor_free(d1);
        tensor_free(d3);
    }
    tensor_free(first);
    tensor_free(tx);
    free(x);
    free(g);
    free(acc);
    free(lab);
}

/* A confident row: p_label = 1 / (1 + 2 e^-40). Loss log1p(2 e^-40) ~ 8.5e-18 and the label's
 * gradient -(1 - p_label) must keep full fp32 precision (a naive 1 - p would give 0). */
static void confident(void)
{
    int64_t sh[2] = {1, 3};
    double x[3] = {0, -40, -40};
    int32_t lab[1] = {0};
    tensor_t *t = nn_tensor(FMT_FP32, 2, sh, x), *d = nn_zeros(FMT_FP32, 2, sh);
    float loss;
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d, t, lab, 1.0), FX_OK);
    double e = exp(-40.0), want = log1p(2 * e);
    CHECK(fabs(loss - want) <= NN_U32 * want, "confident loss %.9g, want %.9g", loss, want);
    float got[3];
    CHECK_STATUS(tensor_to_f32(d, got), FX_OK);
    double gl = -2 * e / (1 + 2 * e), go = e / (1 + 2 * e);
    CHECK(fabs(got[0] - gl) <= NN_U32 * fabs(gl), "confident grad[label] %.9g, want %.9g", got[0],
          gl);
    CHECK(fabs(got[1] - go) <= NN_U32 * go, "confident grad[other] %.9g, want %.9g", got[1], go);
    /* a very unlikely label: p_label ~ e^-800 underflows in double; the loss stays finite */
    double y[3] = {0, -800, 5};
    int32_t lab1[1] = {1};
    tensor_t *u = nn_tensor(FMT_FP32, 2, sh, y);
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d, u, lab1, 1.0), FX_OK);
    double want1 = 5 + log1p(exp(-5.0)) + 800;
    CHECK(fabs(loss - want1) <= 2 * NN_U32 * want1, "unlikely label loss %.9g, want %.9g", loss,
          want1);
    tensor_free(t);
    tensor_free(u);
    tensor_free(d);
}

/* NaN/Inf logits are data: the loss becomes NaN/Inf, the gradient row NaN, and a
 * shared-exponent dlogits counts the NaNs as non-finite. */
static void nonfinite(void)
{
    int64_t sh[2] = {3, 4};
    int32_t lab[3] = {1, 2, 0};
    for (int k = 0; k < FMT_COUNT; k++) {
        fmt_t f = NN_FORMATS[k];
        float x[12] = {0.5f, 1, -1, 2, 0, NAN, 1, 1, 3, -2, 0.25f, 1};
        tensor_t *t = nn_zeros(FMT_FP32, 2, sh), *d = nn_zeros(f, 2, sh);
        CHECK_STATUS(tensor_from_f32(t, x), FX_OK);
        float loss = 0, g[12];
        CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d, t, lab, 1.0), FX_OK);
        CHECK(isnan(loss), "NaN logit, dlogits %s: loss %g", fmt_name(f), loss);
        CHECK_STATUS(tensor_to_f32(d, g), FX_OK);
        if (fmt_is_shared_exponent(f)) {
            double nf = -1;
            CHECK_STATUS(tensor_stat(d, "nonfinite", &nf), FX_OK);
            CHECK(nf == 4, "NaN row, dlogits %s: %g non-finite counted, want 4", fmt_name(f), nf);
        } else {
            int nans = 0;
            for (int i = 0; i < 12; i++) nans += isnan(g[i]) != 0;
            CHECK(nans == 4, "NaN row, dlogits %s: %d NaN gradients, want 4", fmt_name(f), nans);
        }
        /* the other rows are unaffected: they sum to 0 (softmax minus one-hot) */
        double s0 = (double)g[0] + g[1] + g[2] + g[3];
        CHECK(fabs(s0) < 1e-2, "row 0 of dlogits %s sums to %g", fmt_name(f), s0);
        x[5] = INFINITY;
        CHECK_STATUS(tensor_from_f32(t, x), FX_OK);
        CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d, t, lab, 1.0), FX_OK);
        CHECK(isnan(loss), "+Inf logit, dlogits %s: loss %g", fmt_name(f), loss);
        x[5] = 1;
        x[6] = -INFINITY; /* row 1's label */
        x[8] = -INFINITY; /* row 2's label is 0: Inf loss too */
        x[2] = -INFINITY; /* row 0, not the label: probability 0 */
        CHECK_STATUS(tensor_from_f32(t, x), FX_OK);
        CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d, t, lab, 1.0), FX_OK);
        CHECK(isinf(loss) && loss > 0, "-Inf label logit, dlogits %s: loss %g", fmt_name(f), loss);
        x[6] = 1;
        x[8] = 3;
        CHECK_STATUS(tensor_from_f32(t, x), FX_OK);
        CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d, t, lab, 1.0), FX_OK);
        CHECK(isfinite(loss), "-Inf non-label logit, dlogits %s: loss %g", fmt_name(f), loss);
        CHECK_STATUS(tensor_to_f32(d, g), FX_OK);
        CHECK(g[2] == 0, "-Inf logit, dlogits %s: gradient %g, want 0", fmt_name(f), g[2]);
        tensor_free(t);
        tensor_free(d);
    }
}

static void bad_input(void)
{
    int64_t s34[2] = {3, 4}, s33[2] = {3, 3}, s04[2] = {0, 4}, s30[2] = {3, 0}, s12[1] = {12};
    tensor_t *x = nn_zeros(FMT_BF16, 2, s34), *d = nn_zeros(FMT_FP32, 2, s34);
    tensor_t *d33 = nn_zeros(FMT_FP32, 2, s33), *x0 = nn_zeros(FMT_FP32, 2, s04);
    tensor_t *xk0 = nn_zeros(FMT_FP32, 2, s30), *x1 = nn_zeros(FMT_FP32, 1, s12);
    int32_t lab[3] = {0, 3, 1}, badlab[3] = {0, 1, 4}, neglab[3] = {-1, 0, 0};
    float loss = 123.0f;
    float before[12], after[12];
    for (int i = 0; i < 12; i++) before[i] = (float)i;
    CHECK_STATUS(tensor_from_f32(d, before), FX_OK);
    const char *fn = "tensor_softmax_cross_entropy";
    CHECK_STATUS(tensor_softmax_cross_entropy(NULL, d, x, lab, 1), FX_EINVAL);
    nn_check_message(fn);
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d, NULL, lab, 1), FX_EINVAL);
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d, x, NULL, 1), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), "labels") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d, x, badlab, 1), FX_ERANGE);
    CHECK(strstr(flexpoint_last_error(), "labels[2]=4") != NULL, "message: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d, x, neglab, 1), FX_ERANGE);
    CHECK(strstr(flexpoint_last_error(), "labels[0]=-1") != NULL, "message: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d, x0, lab, 1), FX_ESHAPE);
    nn_check_message(fn);
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, NULL, xk0, lab, 1), FX_ESHAPE);
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, NULL, x1, lab, 1), FX_ESHAPE);
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d33, x, lab, 1), FX_ESHAPE);
    CHECK(strstr(flexpoint_last_error(), "[3, 3]") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d, x, lab, NAN), FX_EINVAL);
    CHECK_STATUS(tensor_softmax_cross_entropy(&loss, d, x, lab, INFINITY), FX_EINVAL);
    /* nothing written by the failing calls */
    CHECK(loss == 123.0f, "loss written by a failing call: %g", loss);
    CHECK_STATUS(tensor_to_f32(d, after), FX_OK);
    CHECK(memcmp(before, after, sizeof before) == 0, "dlogits changed by a failing call");
    tensor_free(x);
    tensor_free(d);
    tensor_free(d33);
    tensor_free(x0);
    tensor_free(xk0);
    tensor_free(x1);
}

int main(void)
{
    fd_check();
    const char *bk[8];
    int nbk = nn_backends(bk, 8);
    const int ncases = (int)(sizeof CASES / sizeof *CASES);
    for (int ci = 0; ci < ncases; ci++) {
        int big = CASES[ci].N >= 400;
        for (int k = 0; k < FMT_COUNT; k++) {
            fmt_t f = NN_FORMATS[k];
            run_case(&CASES[ci], f, f, bk, nbk, big);
            if (big) continue;
            run_case(&CASES[ci], f, fmt_is_shared_exponent(f) ? FMT_FP16 : FMT_FLEX16_5, bk,
                     nbk, 0);
        }
    }
    printf("softmax_cross_entropy: %d cases x %d formats (+ mixed) on %d backends\n", ncases,
           FMT_COUNT, nbk);
    confident();
    nonfinite();
    bad_input();
    return test_finish("test_nn_softmax_ce");
}
