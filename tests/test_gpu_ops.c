/* Ops on device tensors against the CPU scalar backend (include/flexpoint_gpu.h).
 *
 * Every op runs twice on the same inputs: on host tensors with the "scalar" backend (the
 * definitions) and on device copies of them. Then:
 *   - FLEX16_5 / DFP16 outputs: the raw int16 mantissas, the exponent and every write statistic
 *     (saturated, nonfinite, underflow, clamped, true_max, stored_max, writes, overflows) are
 *     identical, for every op, including Autoflex sequences, stochastic rounding and float
 *     inputs to integer ops;
 *   - fp32/fp16/bf16 outputs of conversions and elementwise ops: identical bits;
 *   - fp32-accumulated sums and matmuls (cuBLAS for matmul): within gamma_n * sum|terms| of an
 *     fp64 reference, plus the output format's rounding.
 * Transfers must round-trip bits and exponent state; misuse gives the documented statuses.
 *
 * Without a CUDA device the test skips (77). FX_GPU_TEST_ON_HOST=1 runs the same comparisons
 * with host tensors standing in for device tensors, under the best CPU backend, which checks the
 * test's own logic and bounds on a machine without a GPU. */
#include "core/internal.h" /* host stand-ins copy the exponent state as tensor_to_host does */
#include "gpu/gpu_kernels.h" /* the device integer GEMM scheme switch */
#include "flexpoint_nn.h"
#include "testutil.h"
#include "gpu_testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *g_alt_backend = "scalar";

static const fmt_t ALL[5] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5, FMT_DFP16};

static int is_int(fmt_t f) { return fmt_is_shared_exponent(f); }

/* ---- host/device helpers ------------------------------------------------------------------ */


/* Run op on host under the scalar backend, on device (or the stand-in under the best CPU
 * backend). */
#define RUN_BOTH(rc_h, rc_d, host_call, dev_call)                                               \
    do {                                                                                        \
        flexpoint_set_backend("scalar");                                                        \
        rc_h = (host_call);                                                                     \
        flexpoint_set_backend(g_alt_backend);                                                   \
        rc_d = (dev_call);                                                                      \
        flexpoint_set_backend("scalar");                                                        \
    } while (0)

/* A few IEEE special values at the start of v (n >= 10). */
static void add_specials(float *v, int64_t n)
{
    if (n < 10) return;
    v[0] = NAN;
    v[1] = INFINITY;
    v[2] = -INFINITY;
    v[3] = -0.0f;
    v[4] = 1e-40f;     /* fp32 subnormal */
    v[5] = 65519.0f;   /* rounds to fp16 max */
    v[6] = 65520.0f;   /* fp16 overflow */
    v[7] = 3.0e38f;    /* bf16 carry to Inf territory */
    v[8] = 2.9802322e-8f; /* fp16 subnormal tie region */
    v[9] = -1e-45f;    /* smallest fp32 subnormal */
}

static tensor_t *host_tensor(fmt_t f, int ndim, const int64_t *shape, const float *v)
{
    tensor_t *t = tensor_new(f, ndim, shape);
    CHECK(t != NULL, "tensor_new: %s", flexpoint_last_error());
    if (t) CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    return t;
}


/* |device - ref| <= bound[i] elementwise, values read as fp32. */
static void check_bound(const tensor_t *d, const double *ref, const double *bound,
                        const char *what)
{
    tensor_t *b = gpu_test_to_host(d);
    if (!b) return;
    int64_t n = tensor_numel(b);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    tensor_to_f32(b, v);
    int64_t worst = -1;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)v[i] - ref[i]) <= bound[i])) {
            worst = i;
            break;
        }
    CHECK(worst < 0, "%s (%s): element %lld = %.9g, reference %.9g, bound %.3g", what,
          fmt_name(tensor_fmt(b)), (long long)(worst < 0 ? 0 : worst),
          worst < 0 ? 0.0 : v[worst], worst < 0 ? 0.0 : ref[worst],
          worst < 0 ? 0.0 : bound[worst]);
    free(v);
    tensor_free(b);
}

/* Unit roundoff of a float format and half its smallest subnormal step (absolute). */
static double fmt_u(fmt_t f)
{
    return f == FMT_FP16 ? 0x1p-11 : f == FMT_BF16 ? 0x1p-8 : 0x1p-24;
}
static double fmt_tiny(fmt_t f)
{
    return f == FMT_FP16 ? 0x1p-25 : f == FMT_BF16 ? 0x1p-134 : 0x1p-150;
}

static double gamma_n(int64_t n)
{
    double nu = (double)n * 0x1p-24;
    return nu / (1.0 - nu);
}

/* ---- conversions --------------------------------------------------------------------------- */

static void test_copy_all_formats(test_rng *r)
{
    const int64_t shape[2] = {3, 257};
    const int64_t n = 3 * 257;
    float *v = malloc(n * sizeof *v);
    for (int a = 0; a < 5; a++)
        for (int o = 0; o < 5; o++) {
            tensor_t *oh = tensor_new(ALL[o], 2, shape), *od = gpu_test_new_dev(ALL[o], 2, shape);
            /* three writes, so that Autoflex history and counters take part */
            for (int w = 0; w < 3 && oh && od; w++) {
                gpu_test_fill(v, n, r, 6 + 4 * w);
                add_specials(v, n);
                tensor_t *ah = host_tensor(ALL[a], 2, shape, v), *ad = gpu_test_to_dev(ah);
                int rh, rd;
                RUN_BOTH(rh, rd, tensor_copy(oh, ah), tensor_copy(od, ad));
                CHECK(rh == FX_OK && rd == FX_OK, "copy %s->%s: %d %d", fmt_name(ALL[a]),
                      fmt_name(ALL[o]), rh, rd);
                char what[96];
                snprintf(what, sizeof what, "copy %s -> %s write %d", fmt_name(ALL[a]),
                         fmt_name(ALL[o]), w);
                gpu_test_check_same(oh, od, what);
                tensor_free(ah);
                tensor_free(ad);
            }
            tensor_free(oh);
            tensor_free(od);
        }
    free(v);
}

/* ---- elementwise ---------------------------------------------------------------------------- */

static void test_binary_ops(test_rng *r)
{
    const int64_t sa[2] = {5, 67}, sb_row[1] = {67}, sb_col[2] = {5, 1};
    float va[5 * 67], vb[67];
    for (int ia = 0; ia < 5; ia++)
        for (int ib = 0; ib < 5; ib++)
            for (int variant = 0; variant < 2; variant++) {
                fmt_t fa = ALL[ia], fb = ALL[ib];
                fmt_t fo = variant ? ALL[(ia + ib) % 5] : fa;
                gpu_test_fill(va, 5 * 67, r, 8);
                gpu_test_fill(vb, 67, r, 8);
                int bnd = variant ? 2 : 1;
                const int64_t *sb = variant ? sb_col : sb_row;
                tensor_t *ah = host_tensor(fa, 2, sa, va), *bh = host_tensor(fb, bnd, sb, vb);
                tensor_t *ad = gpu_test_to_dev(ah), *bd = gpu_test_to_dev(bh);
                for (int op = 0; op < 3; op++) {
                    tensor_t *oh = tensor_new(fo, 2, sa), *od = gpu_test_new_dev(fo, 2, sa);
                    int rh, rd;
                    if (op == 0)
                        RUN_BOTH(rh, rd, tensor_add(oh, ah, bh), tensor_add(od, ad, bd));
                    else if (op == 1)
                        RUN_BOTH(rh, rd, tensor_sub(oh, ah, bh), tensor_sub(od, ad, bd));
                    else
                        RUN_BOTH(rh, rd, tensor_mul(oh, ah, bh), tensor_mul(od, ad, bd));
                    CHECK(rh == FX_OK && rd == FX_OK, "op %d: %d %d (%s)", op, rh, rd,
                          flexpoint_last_error());
                    char what[128];
                    snprintf(what, sizeof what, "%s %s x %s%s -> %s",
                             op == 0 ? "add" : op == 1 ? "sub" : "mul", fmt_name(fa), fmt_name(fb),
                             variant ? "[5,1]" : "[67]", fmt_name(fo));
                    gpu_test_check_same(oh, od, what);
                    tensor_free(oh);
                    tensor_free(od);
                }
                tensor_free(ah);
                tensor_free(bh);
                tensor_free(ad);
                tensor_free(bd);
            }
}

/* add/sub whose exponents are more than FX_ALIGN_SPAN apart, with the larger one all zero
 * (the special case of the integer add), and in place. */
static void test_addsub_far_exponents(test_rng *r)
{
    const int64_t s[1] = {40};
    float big[40] = {0}, tiny[40];
    gpu_test_fill(tiny, 40, r, 2);
    for (int i = 0; i < 40; i++) tiny[i] *= 1e-25f;
    tensor_t *zh = tensor_new(FMT_DFP16, 1, s);
    tensor_set_exp(zh, 20); /* all zero at a large exponent */
    tensor_t *th = host_tensor(FMT_DFP16, 1, s, tiny);
    tensor_t *zd = gpu_test_to_dev(zh), *td = gpu_test_to_dev(th);
    for (int order = 0; order < 2; order++)
        for (int op = 0; op < 2; op++) {
            tensor_t *oh = tensor_new(FMT_DFP16, 1, s), *od = gpu_test_new_dev(FMT_DFP16, 1, s);
            const tensor_t *a_h = order ? th : zh, *b_h = order ? zh : th;
            const tensor_t *a_d = order ? td : zd, *b_d = order ? zd : td;
            int rh, rd;
            if (op == 0) RUN_BOTH(rh, rd, tensor_add(oh, a_h, b_h), tensor_add(od, a_d, b_d));
            else RUN_BOTH(rh, rd, tensor_sub(oh, a_h, b_h), tensor_sub(od, a_d, b_d));
            CHECK(rh == FX_OK && rd == FX_OK, "far add/sub: %d %d", rh, rd);
            gpu_test_check_same(oh, od, op ? "sub, far exponents" : "add, far exponents");
            tensor_free(oh);
            tensor_free(od);
        }
    /* nonzero big operand, far exponents: the jammed path */
    for (int i = 0; i < 40; i++) big[i] = (float)(i % 7) - 3.0f;
    tensor_t *bh = host_tensor(FMT_DFP16, 1, s, big), *bd = gpu_test_to_dev(bh);
    int rh, rd;
    RUN_BOTH(rh, rd, tensor_add(bh, bh, th), tensor_add(bd, bd, td)); /* in place */
    CHECK(rh == FX_OK && rd == FX_OK, "in-place add: %d %d", rh, rd);
    gpu_test_check_same(bh, bd, "in-place add, far exponents");
    tensor_free(bh);
    tensor_free(bd);
    tensor_free(zh);
    tensor_free(th);
    tensor_free(zd);
    tensor_free(td);
}

static void test_unary_ops(test_rng *r)
{
    const int64_t s[2] = {9, 31};
    float v[9 * 31];
    const double scales[5] = {0.0, 1.5, -3.25e-3, 0.1, 12345.678};
    for (int ia = 0; ia < 5; ia++)
        for (int io = 0; io < 5; io++) {
            gpu_test_fill(v, 9 * 31, r, 10);
            tensor_t *ah = host_tensor(ALL[ia], 2, s, v), *ad = gpu_test_to_dev(ah);
            tensor_t *oh = tensor_new(ALL[io], 2, s), *od = gpu_test_new_dev(ALL[io], 2, s);
            for (int k = 0; k < 6; k++) {
                int rh, rd;
                char what[96];
                if (k < 5) {
                    RUN_BOTH(rh, rd, tensor_scale(oh, ah, scales[k]),
                             tensor_scale(od, ad, scales[k]));
                    snprintf(what, sizeof what, "scale %g %s -> %s", scales[k],
                             fmt_name(ALL[ia]), fmt_name(ALL[io]));
                } else {
                    RUN_BOTH(rh, rd, tensor_relu(oh, ah), tensor_relu(od, ad));
                    snprintf(what, sizeof what, "relu %s -> %s", fmt_name(ALL[ia]),
                             fmt_name(ALL[io]));
                }
                CHECK(rh == FX_OK && rd == FX_OK, "%s: %d %d", what, rh, rd);
                gpu_test_check_same(oh, od, what);
            }
            tensor_free(ah);
            tensor_free(ad);
            tensor_free(oh);
            tensor_free(od);
        }
}

/* ---- reductions ------------------------------------------------------------------------------ */

static void test_sum(test_rng *r)
{
    const int64_t s[3] = {6, 301, 5};
    const int64_t n = 6 * 301 * 5;
    float *v = malloc(n * sizeof *v);
    double *av = malloc(n * sizeof *av);
    struct { int axis; int ndim; int64_t shape[3]; } cases[4] = {
        {FX_AXIS_ALL, 1, {1}}, {0, 2, {301, 5}}, {1, 3, {6, 1, 5}}, {-1, 2, {6, 301}}};
    for (int ia = 0; ia < 5; ia++)
        for (int c = 0; c < 4; c++)
            for (int oo = 0; oo < 2; oo++) {
                fmt_t fa = ALL[ia], fo = oo ? FMT_FP32 : fa;
                gpu_test_fill(v, n, r, 3);
                tensor_t *ah = host_tensor(fa, 3, s, v), *ad = gpu_test_to_dev(ah);
                tensor_t *oh = tensor_new(fo, cases[c].ndim, cases[c].shape);
                tensor_t *od = gpu_test_new_dev(fo, cases[c].ndim, cases[c].shape);
                int rh, rd;
                const int ax = cases[c].axis;
                RUN_BOTH(rh, rd, tensor_sum(oh, ah, ax), tensor_sum(od, ad, ax));
                CHECK(rh == FX_OK && rd == FX_OK, "sum: %d %d (%s)", rh, rd,
                      flexpoint_last_error());
                char what[96];
                snprintf(what, sizeof what, "sum axis %d %s -> %s", cases[c].axis, fmt_name(fa),
                         fmt_name(fo));
                if (is_int(fa)) {
                    gpu_test_check_same(oh, od, what); /* exact sums, one rounding */
                } else {
                    /* fp32 accumulation in some order: within gamma_len * sum|x| of fp64 */
                    float *fv = malloc(n * sizeof *fv);
                    tensor_to_f32(ah, fv);
                    for (int64_t i = 0; i < n; i++) av[i] = fv[i];
                    free(fv);
                    int64_t outer = 1, len = n, inner = 1;
                    if (cases[c].axis == 0) { outer = 1; len = 6; inner = 301 * 5; }
                    if (cases[c].axis == 1) { outer = 6; len = 301; inner = 5; }
                    if (cases[c].axis == -1) { outer = 6 * 301; len = 5; inner = 1; }
                    int64_t no = outer * inner;
                    double *ref = malloc(no * sizeof *ref), *bound = malloc(no * sizeof *bound);
                    for (int64_t o = 0; o < outer; o++)
                        for (int64_t i = 0; i < inner; i++) {
                            double sum = 0, mag = 0;
                            for (int64_t k = 0; k < len; k++) {
                                double x = av[(o * len + k) * inner + i];
                                sum += x;
                                mag += fabs(x);
                            }
                            ref[o * inner + i] = sum;
                            double e32 = gamma_n(len) * mag;
                            bound[o * inner + i] =
                                e32 + fmt_u(fo) * (fabs(sum) + e32) + fmt_tiny(fo);
                        }
                    check_bound(od, ref, bound, what);
                    free(ref);
                    free(bound);
                }
                tensor_free(ah);
                tensor_free(ad);
                tensor_free(oh);
                tensor_free(od);
            }
    free(v);
    free(av);
}

/* ---- matmul ------------------------------------------------------------------------------ */

/* a[M,K] x b[K,N]; b is stored transposed ([N,K]) and passed as a view when btrans. */
static void matmul_case(test_rng *r, fmt_t fa, fmt_t fb, fmt_t fo, int64_t M, int64_t K,
                        int64_t N, int btrans, int kspan, int near_max)
{
    const int64_t sa[2] = {M, K}, sb[2] = {btrans ? N : K, btrans ? K : N}, so[2] = {M, N};
    float *va = malloc(M * K * sizeof *va), *vb = malloc(K * N * sizeof *vb);
    gpu_test_fill(va, M * K, r, kspan);
    gpu_test_fill(vb, K * N, r, kspan);
    if (near_max) { /* mantissas near +-32767 everywhere: int64 accumulation is needed */
        for (int64_t i = 0; i < M * K; i++)
            va[i] = (i % 3 ? 1.0f : -1.0f) * (1.0f - (float)(i % 5) * 1e-5f);
        for (int64_t i = 0; i < K * N; i++)
            vb[i] = (i % 3 ? 1.0f : -1.0f) * (1.0f - (float)(i % 7) * 1e-5f);
    }
    tensor_t *ah = host_tensor(fa, 2, sa, va), *bh0 = host_tensor(fb, 2, sb, vb);
    tensor_t *ad = gpu_test_to_dev(ah), *bd0 = gpu_test_to_dev(bh0);
    tensor_t *bh = btrans ? tensor_view_transpose(bh0, 0, 1) : bh0;
    tensor_t *bd = btrans ? tensor_view_transpose(bd0, 0, 1) : bd0;
    tensor_t *oh = tensor_new(fo, 2, so), *od = gpu_test_new_dev(fo, 2, so);
    int rh, rd;
    RUN_BOTH(rh, rd, tensor_matmul(oh, ah, bh), tensor_matmul(od, ad, bd));
    char what[128];
    snprintf(what, sizeof what, "matmul %s[%lld,%lld] x %s[%lld,%lld]%s -> %s", fmt_name(fa),
             (long long)M, (long long)K, fmt_name(fb), (long long)K, (long long)N,
             btrans ? " (transposed view)" : "", fmt_name(fo));
    CHECK(rh == FX_OK && rd == FX_OK, "%s: %d %d (%s)", what, rh, rd, flexpoint_last_error());
    if (is_int(fa)) {
        gpu_test_check_same(oh, od, what);
    } else {
        /* fp32 products and accumulation: within gamma_K * sum|a||b| of fp64 (inputs as
         * stored), plus the output's rounding (one quantum for shared-exponent outputs) */
        float *fa32 = malloc(M * K * sizeof *fa32), *fb32 = malloc(K * N * sizeof *fb32);
        tensor_to_f32(ah, fa32);
        tensor_to_f32(bh, fb32);
        double *ref = malloc(M * N * sizeof *ref), *bound = malloc(M * N * sizeof *bound);
        double quantum = 0;
        if (is_int(fo)) {
            tensor_t *b = gpu_test_to_host(od);
            quantum = b ? ldexp(1.0, tensor_exp(b)) : 0;
            tensor_free(b);
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    double p = (double)fa32[i * K + k] * fb32[k * N + j];
                    s += p;
                    mag += fabs(p);
                }
                double e32 = gamma_n(K + 1) * mag;
                ref[i * N + j] = s;
                bound[i * N + j] = is_int(fo) ? e32 + quantum
                                              : e32 + fmt_u(fo) * (fabs(s) + e32) + fmt_tiny(fo);
            }
        check_bound(od, ref, bound, what);
        free(fa32);
        free(fb32);
        free(ref);
        free(bound);
    }
    if (btrans) {
        tensor_free(bh);
        tensor_free(bd);
    }
    tensor_free(ah);
    tensor_free(bh0);
    tensor_free(ad);
    tensor_free(bd0);
    tensor_free(oh);
    tensor_free(od);
    free(va);
    free(vb);
}

static void test_matmul(test_rng *r)
{
    const int64_t dims[4][3] = {{1, 1, 1}, {7, 13, 5}, {65, 70, 129}, {130, 257, 66}};
    const fmt_t int_out[4] = {FMT_FLEX16_5, FMT_DFP16, FMT_FP32, FMT_BF16};
    for (int d = 0; d < 4; d++)
        for (int bt = 0; bt < 2; bt++) {
            const int64_t M = dims[d][0], K = dims[d][1], N = dims[d][2];
            /* both device integer GEMM schemes (these sizes alone would all take IMAD) */
            for (int path = FX_GK_I16_IMAD; path <= FX_GK_I16_TC; path++) {
                gpu_test_set_i16_gemm(path);
                for (int fa = 0; fa < 2; fa++)
                    for (int fb = 0; fb < 2; fb++)
                        for (int o = 0; o < 4; o++)
                            matmul_case(r, fa ? FMT_DFP16 : FMT_FLEX16_5,
                                        fb ? FMT_DFP16 : FMT_FLEX16_5, int_out[o], M, K, N, bt,
                                        6, 0);
            }
            gpu_test_set_i16_gemm(FX_GK_I16_AUTO);
            /* a float operand of an integer matmul: quantised at its exact exponent */
            matmul_case(r, FMT_DFP16, FMT_FP32, FMT_DFP16, M, K, N, bt, 6, 0);
            matmul_case(r, FMT_FLEX16_5, FMT_BF16, FMT_FP32, M, K, N, bt, 6, 0);
            /* float formats through cuBLAS */
            const fmt_t ff[3] = {FMT_FP32, FMT_FP16, FMT_BF16};
            for (int f = 0; f < 3; f++) {
                matmul_case(r, ff[f], ff[f], ff[f], M, K, N, bt, 3, 0);
                matmul_case(r, ff[f], ff[f], FMT_FP32, M, K, N, bt, 3, 0);
            }
            matmul_case(r, FMT_FP16, FMT_FP32, FMT_FP32, M, K, N, bt, 3, 0);    /* mixed */
            matmul_case(r, FMT_FP32, FMT_DFP16, FMT_FP32, M, K, N, bt, 3, 0);   /* dequantised */
            matmul_case(r, FMT_BF16, FMT_BF16, FMT_DFP16, M, K, N, bt, 3, 0);   /* stats pass */
        }
    /* int64 accumulation: 3000 products of magnitude ~2^30, under both schemes */
    for (int path = FX_GK_I16_IMAD; path <= FX_GK_I16_TC; path++) {
        gpu_test_set_i16_gemm(path);
        matmul_case(r, FMT_DFP16, FMT_DFP16, FMT_DFP16, 33, 3000, 17, 0, 0, 1);
        matmul_case(r, FMT_FLEX16_5, FMT_DFP16, FMT_FP32, 17, 3000, 33, 1, 0, 1);
    }
    gpu_test_set_i16_gemm(FX_GK_I16_AUTO);
}

/* ---- write-path state: Autoflex, stochastic rounding, partial views ------------------------- */

static void test_autoflex_sequences(test_rng *r)
{
    const char *presets[3] = {"published", "robust", "truemax"};
    const int64_t s[2] = {16, 40};
    float v[16 * 40];
    for (int p = 0; p < 3; p++) {
        tensor_t *oh = tensor_new(FMT_FLEX16_5, 2, s), *od = gpu_test_new_dev(FMT_FLEX16_5, 2, s);
        CHECK_STATUS(tensor_set_autoflex(oh, presets[p]), FX_OK);
        CHECK_STATUS(tensor_set_autoflex(od, presets[p]), FX_OK);
        gpu_test_fill(v, 16 * 40, r, 2);
        tensor_t *ah = host_tensor(FMT_FP32, 2, s, v), *ad = gpu_test_to_dev(ah);
        /* growing, then shrinking magnitudes: overflows, recomputes, clamps */
        const double scale[8] = {1e-3, 1e-2, 0.5, 8, 300, 0.01, 1e-6, 2};
        for (int w = 0; w < 8; w++) {
            int rh, rd;
            RUN_BOTH(rh, rd, tensor_scale(oh, ah, scale[w]), tensor_scale(od, ad, scale[w]));
            CHECK(rh == FX_OK && rd == FX_OK, "autoflex write: %d %d", rh, rd);
            char what[96];
            snprintf(what, sizeof what, "autoflex %s write %d (x%g)", presets[p], w, scale[w]);
            gpu_test_check_same(oh, od, what);
        }
        tensor_free(ah);
        tensor_free(ad);
        tensor_free(oh);
        tensor_free(od);
    }
}

/* Launched writes (flexpoint_gpu.h): after a tensor's first write, FLEX16_5 writes under every
 * preset and every DFP16 write are rounded without the host waiting for the device: "published"
 * at the history's exponent, "robust" with its recompute of a saturated write decided on the
 * device, DFP16 at its exact exponent chosen on the device, whose later readers (relu, add,
 * matmul) take that exponent from device memory. Everything ends bit-identical to the host,
 * state and traces included (read after many pending writes); at step 5 the input jumps by
 * 2^12 (in place, itself a launched write), so the product saturates its predicted exponent
 * and "robust" recomputes it, and at step 6 it jumps back. Each step ends with
 * flexpoint_gpu_synchronize, so that a settle finds the previous step's statistics arrived
 * however far the device lagged; the waits counted are those inside the three writes of each
 * step. They are only checked on a real device, and not with FLEXPOINT_GPU_SYNC=1 (every op
 * waits) or FLEXPOINT_GPU_DEFER=0 (launching off). */
/* Whether host-wait counts mean what the launched-write checks assume: a real device, ops that
 * do not each wait (FLEXPOINT_GPU_SYNC=1) and launching on (not FLEXPOINT_GPU_DEFER=0). */
static int wait_counts_checkable(void)
{
    const char *sync_env = getenv("FLEXPOINT_GPU_SYNC"), *defer_env = getenv("FLEXPOINT_GPU_DEFER");
    return !gpu_test_on_host && !(sync_env && sync_env[0] == '1') &&
           !(defer_env && defer_env[0] == '0');
}

static void test_deferred_waits(test_rng *r)
{
    const int64_t s[2] = {48, 48};
    float v[48 * 48];
    static const struct {
        fmt_t fmt;
        const char *preset; /* NULL: DFP16 */
    } cfg[3] = {{FMT_FLEX16_5, "published"}, {FMT_FLEX16_5, "robust"}, {FMT_DFP16, NULL}};
    for (int p = 0; p < 3; p++) {
        const char *name = cfg[p].preset ? cfg[p].preset : "dfp16";
        gpu_test_fill(v, 48 * 48, r, 2);
        tensor_t *ah = host_tensor(FMT_FLEX16_5, 2, s, v), *ad = gpu_test_to_dev(ah);
        tensor_t *h[3], *d[3];
        for (int i = 0; i < 3; i++) {
            h[i] = tensor_new(cfg[p].fmt, 2, s);
            d[i] = gpu_test_new_dev(cfg[p].fmt, 2, s);
            if (cfg[p].preset) {
                CHECK_STATUS(tensor_set_autoflex(h[i], cfg[p].preset), FX_OK);
                CHECK_STATUS(tensor_set_autoflex(d[i], cfg[p].preset), FX_OK);
            }
            CHECK_STATUS(tensor_trace_enable(h[i], 1), FX_OK);
            CHECK_STATUS(tensor_trace_enable(d[i], 1), FX_OK);
        }
        long long waits = 0;
        const int warm = 2, steps = 12;
        int rh, rd;
        for (int it = 0; it < warm + steps; it++) {
            if (it == warm + 5 || it == warm + 6) {
                const double f = it == warm + 5 ? 4096.0 : 1.0 / 4096.0;
                RUN_BOTH(rh, rd, tensor_scale(ah, ah, f), tensor_scale(ad, ad, f));
                CHECK(rh == FX_OK && rd == FX_OK, "input jump: %d %d", rh, rd);
            }
            const long long w0 = flexpoint_gpu_host_waits();
            RUN_BOTH(rh, rd, tensor_matmul(h[0], ah, ah), tensor_matmul(d[0], ad, ad));
            CHECK(rh == FX_OK && rd == FX_OK, "launched matmul: %d %d", rh, rd);
            RUN_BOTH(rh, rd, tensor_relu(h[1], h[0]), tensor_relu(d[1], d[0]));
            CHECK(rh == FX_OK && rd == FX_OK, "launched relu: %d %d", rh, rd);
            RUN_BOTH(rh, rd, tensor_add(h[2], h[1], h[2]), tensor_add(d[2], d[1], d[2]));
            CHECK(rh == FX_OK && rd == FX_OK, "launched add: %d %d", rh, rd);
            if (it >= warm) waits += flexpoint_gpu_host_waits() - w0;
            if (!gpu_test_on_host) CHECK_STATUS(flexpoint_gpu_synchronize(), FX_OK);
        }
        if (wait_counts_checkable()) {
            CHECK(waits == 0, "%s: %lld host waits in %d steps of 3 writes", name, waits, steps);
            printf("test_gpu_ops: %s: %lld host waits in %d steps of 3 writes\n", name, waits,
                   steps);
        }
        if (p == 1) { /* the jump made "robust" recompute the product, on the device too */
            int64_t rec_h = 0, rec_d = 0;
            for (int64_t k = 0; k < tensor_trace_len(h[0]); k++) {
                fx_trace_record th, td;
                memset(&td, 0, sizeof td);
                CHECK_STATUS(tensor_trace_get(h[0], k, &th), FX_OK);
                if (k < tensor_trace_len(d[0])) CHECK_STATUS(tensor_trace_get(d[0], k, &td), FX_OK);
                rec_h += th.recomputed;
                rec_d += td.recomputed;
            }
            CHECK(rec_h >= 1 && rec_d == rec_h, "robust: %lld recomputed writes on the host, "
                  "%lld on the device (want >= 1, equal)", (long long)rec_h, (long long)rec_d);
        }
        for (int i = 0; i < 3; i++) {
            char what[64];
            snprintf(what, sizeof what, "launched %s output %d", name, i);
            CHECK(tensor_trace_len(h[i]) == warm + steps &&
                      tensor_trace_len(d[i]) == warm + steps,
                  "%s: trace lengths %lld / %lld", what, (long long)tensor_trace_len(h[i]),
                  (long long)tensor_trace_len(d[i]));
            for (int64_t k = 0; k < tensor_trace_len(h[i]) && k < tensor_trace_len(d[i]); k++) {
                fx_trace_record th, td;
                CHECK_STATUS(tensor_trace_get(h[i], k, &th), FX_OK);
                CHECK_STATUS(tensor_trace_get(d[i], k, &td), FX_OK);
                CHECK(memcmp(&th, &td, sizeof th) == 0, "%s: trace record %lld differs", what,
                      (long long)k);
            }
            gpu_test_check_same(h[i], d[i], what);
            tensor_free(h[i]);
            tensor_free(d[i]);
        }
        gpu_test_check_same(ah, ad, "launched-write input");
        tensor_free(ah);
        tensor_free(ad);
    }

    /* A float matmul into a deferred FLEX16_5 output skips the statistics pass after cuBLAS:
     * the write's true maximum then comes from its rounding kernel, and must be the maximum of
     * the same product written to fp32 (cuBLAS's order, so compared within 1e-6, not bits). */
    gpu_test_fill(v, 48 * 48, r, 2);
    tensor_t *fh = host_tensor(FMT_FP32, 2, s, v), *fd = gpu_test_to_dev(fh);
    tensor_t *yf = gpu_test_new_dev(FMT_FP32, 2, s), *yq = gpu_test_new_dev(FMT_FLEX16_5, 2, s);
    if (fh && fd && yf && yq) {
        CHECK_STATUS(tensor_set_autoflex(yq, "published"), FX_OK);
        CHECK_STATUS(tensor_trace_enable(yq, 1), FX_OK);
        /* the second and third writes are deferred: no wait of their own (one sync between,
         * so that the third's settle finds the second's statistics arrived) */
        CHECK_STATUS(tensor_matmul(yq, fd, fd), FX_OK);
        if (!gpu_test_on_host) CHECK_STATUS(flexpoint_gpu_synchronize(), FX_OK);
        const long long w0 = flexpoint_gpu_host_waits();
        CHECK_STATUS(tensor_matmul(yq, fd, fd), FX_OK);
        if (!gpu_test_on_host) CHECK_STATUS(flexpoint_gpu_synchronize(), FX_OK);
        CHECK_STATUS(tensor_matmul(yq, fd, fd), FX_OK);
        const long long dw = flexpoint_gpu_host_waits() - w0 - (gpu_test_on_host ? 0 : 1);
        if (wait_counts_checkable())
            CHECK(dw == 0, "deferred float matmuls waited %lld times", dw);
        CHECK_STATUS(tensor_matmul(yf, fd, fd), FX_OK);
        tensor_t *yh = gpu_test_to_host(yf);
        float *y = malloc(48 * 48 * sizeof *y);
        fx_trace_record rec;
        memset(&rec, 0, sizeof rec);
        CHECK_STATUS(tensor_trace_get(yq, 2, &rec), FX_OK);
        if (yh && y && tensor_to_f32(yh, y) == FX_OK) {
            double mx = 0.0;
            for (int i = 0; i < 48 * 48; i++) mx = fmax(mx, fabs((double)y[i]));
            CHECK(mx > 0.0 && fabs(rec.true_max - mx) <= 1e-6 * mx,
                  "deferred float matmul: true_max %.9g, fp32 product's maximum %.9g",
                  rec.true_max, mx);
        }
        free(y);
        tensor_free(yh);
    }
    tensor_free(fh);
    tensor_free(fd);
    tensor_free(yf);
    tensor_free(yq);
}

/* tensor_set_exp / tensor_set_exp_window on device tensors rescale the mantissas on the
 * device, bit-identical to the host: down (rounding, ties included), up (saturating, counted),
 * and a window that moves the exponent. */
static void test_set_exp(test_rng *r)
{
    const int64_t s[2] = {33, 65};
    float v[33 * 65];
    for (int f = 3; f < 5; f++) {
        gpu_test_fill(v, 33 * 65, r, 6);
        v[0] = 0.0f;
        tensor_t *h = host_tensor(ALL[f], 2, s, v), *d = gpu_test_to_dev(h);
        if (!h || !d) {
            tensor_free(h);
            tensor_free(d);
            continue;
        }
        const int e0 = tensor_exp(h);
        int lo = 0, hi = 0;
        CHECK_STATUS(tensor_exp_window(h, &lo, &hi), FX_OK);
        int moves[4] = {e0 + 3, e0 - 6, e0 - 1, e0 + 17};
        for (int k = 0; k < 4; k++) moves[k] = moves[k] < lo ? lo : moves[k] > hi ? hi : moves[k];
        for (int k = 0; k < 4; k++) {
            int rh, rd;
            RUN_BOTH(rh, rd, tensor_set_exp(h, moves[k]), tensor_set_exp(d, moves[k]));
            CHECK(rh == FX_OK && rd == FX_OK, "%s set_exp(%d): %d %d", fmt_name(ALL[f]),
                  moves[k], rh, rd);
            char what[64];
            snprintf(what, sizeof what, "%s set_exp(%d)", fmt_name(ALL[f]), moves[k]);
            gpu_test_check_same(h, d, what);
        }
        if (ALL[f] == FMT_FLEX16_5) {
            const int wlo = tensor_exp(h) + 2; /* the exponent must move up to wlo */
            int rh, rd;
            RUN_BOTH(rh, rd, tensor_set_exp_window(h, wlo), tensor_set_exp_window(d, wlo));
            CHECK(rh == FX_OK && rd == FX_OK, "set_exp_window(%d): %d %d", wlo, rh, rd);
            CHECK(tensor_exp(d) == wlo, "window start %d, exponent %d", wlo, tensor_exp(d));
            gpu_test_check_same(h, d, "flex16_5 set_exp_window");
        }
        tensor_free(h);
        tensor_free(d);
    }
}

static void test_stochastic_rounding(test_rng *r)
{
    const int64_t s[1] = {5000};
    float *v = malloc(5000 * sizeof *v);
    for (int f = 3; f < 5; f++) {
        tensor_t *oh = tensor_new(ALL[f], 1, s), *od = gpu_test_new_dev(ALL[f], 1, s);
        CHECK_STATUS(tensor_set_rounding(oh, FX_ROUND_STOCHASTIC, 0xfeedULL), FX_OK);
        CHECK_STATUS(tensor_set_rounding(od, FX_ROUND_STOCHASTIC, 0xfeedULL), FX_OK);
        for (int w = 0; w < 3; w++) {
            gpu_test_fill(v, 5000, r, 5);
            tensor_t *ah = host_tensor(FMT_FP32, 1, s, v), *ad = gpu_test_to_dev(ah);
            int rh, rd;
            RUN_BOTH(rh, rd, tensor_copy(oh, ah), tensor_copy(od, ad));
            CHECK(rh == FX_OK && rd == FX_OK, "stochastic copy: %d %d", rh, rd);
            gpu_test_check_same(oh, od, ALL[f] == FMT_DFP16 ? "stochastic dfp16" : "stochastic flex16_5");
            tensor_free(ah);
            tensor_free(ad);
        }
        tensor_free(oh);
        tensor_free(od);
    }
    free(v);
}

/* A write into a row slice of a shared-exponent tensor keeps the storage's exponent. */
static void test_partial_view_output(test_rng *r)
{
    const int64_t s[2] = {6, 50}, rs[2] = {2, 50};
    float v[6 * 50], w[2 * 50];
    gpu_test_fill(v, 300, r, 3);
    gpu_test_fill(w, 100, r, 6);
    for (int f = 3; f < 5; f++) {
        tensor_t *oh = host_tensor(ALL[f], 2, s, v), *od = gpu_test_to_dev(oh);
        tensor_t *ah = host_tensor(FMT_FP32, 2, rs, w), *ad = gpu_test_to_dev(ah);
        tensor_t *vh = tensor_view_slice(oh, 0, 1, 5, 2), *vd = tensor_view_slice(od, 0, 1, 5, 2);
        int rh, rd;
        RUN_BOTH(rh, rd, tensor_copy(vh, ah), tensor_copy(vd, ad));
        CHECK(rh == FX_OK && rd == FX_OK, "copy into a slice: %d %d", rh, rd);
        gpu_test_check_same(oh, od, "write into a strided row slice");
        tensor_free(vh);
        tensor_free(vd);
        tensor_free(ah);
        tensor_free(ad);
        tensor_free(oh);
        tensor_free(od);
    }
}

/* ---- transfers and misuse (device only) --------------------------------------------------- */

static void test_transfers(test_rng *r)
{
    const int64_t s[2] = {7, 9};
    float v[63];
    for (int f = 0; f < 5; f++) {
        gpu_test_fill(v, 63, r, 12);
        add_specials(v, 63);
        tensor_t *h = host_tensor(ALL[f], 2, s, v);
        tensor_t *d = tensor_to_device(h);
        CHECK(d != NULL && tensor_device(d) >= 0, "to_device %s", fmt_name(ALL[f]));
        if (!d) {
            tensor_free(h);
            continue;
        }
        gpu_test_check_same(h, d, "round trip"); /* bits, exponent and statistics */
        /* a strided host view goes over as its logical contents */
        tensor_t *th = tensor_view_transpose(h, 0, 1);
        tensor_t *td = tensor_to_device(th);
        tensor_t *tb = td ? tensor_to_host(td) : NULL;
        float x[63], y[63];
        if (tb) {
            tensor_to_f32(th, x);
            tensor_to_f32(tb, y);
            CHECK(memcmp(x, y, sizeof x) == 0, "transposed view %s to device and back",
                  fmt_name(ALL[f]));
        }
        /* a strided device view comes back as its logical contents */
        tensor_t *dv = tensor_view_transpose(d, 0, 1);
        tensor_t *hv = dv ? tensor_to_host(dv) : NULL;
        if (hv) {
            tensor_to_f32(th, x);
            tensor_to_f32(hv, y);
            CHECK(memcmp(x, y, sizeof x) == 0, "transposed device view %s to host",
                  fmt_name(ALL[f]));
        }
        /* into existing tensors */
        tensor_t *h2 = tensor_new(ALL[f], 2, s);
        CHECK_STATUS(tensor_copy_to_host(h2, d), FX_OK);
        gpu_test_check_same(h2, d, "copy_to_host");
        tensor_t *d2 = tensor_new_device(ALL[f], 2, s);
        CHECK_STATUS(tensor_copy_to_device(d2, h), FX_OK);
        gpu_test_check_same(h, d2, "copy_to_device");
        /* misuse */
        const int64_t s3[2] = {9, 7};
        tensor_t *wrong_shape = tensor_new(ALL[f], 2, s3);
        CHECK_STATUS(tensor_copy_to_host(wrong_shape, d), FX_ESHAPE);
        tensor_t *wrong_fmt = tensor_new(ALL[(f + 1) % 5], 2, s);
        CHECK_STATUS(tensor_copy_to_host(wrong_fmt, d), FX_EFORMAT);
        CHECK_STATUS(tensor_copy_to_device(h2, h), FX_EINVAL); /* dst on the host */
        CHECK_STATUS(tensor_copy_to_host(h2, h), FX_EINVAL);   /* src on the host */
        flexpoint_clear_error();
        CHECK(tensor_to_device(d) == NULL && flexpoint_last_status() == FX_EINVAL,
              "tensor_to_device of a device tensor");
        CHECK(tensor_to_host(h) == NULL && flexpoint_last_status() == FX_EINVAL,
              "tensor_to_host of a host tensor");
        tensor_free(wrong_shape);
        tensor_free(wrong_fmt);
        tensor_free(h2);
        tensor_free(d2);
        tensor_free(hv);
        tensor_free(dv);
        tensor_free(tb);
        tensor_free(td);
        tensor_free(th);
        tensor_free(d);
        tensor_free(h);
    }
}

static void test_misuse(void)
{
    const int64_t s[2] = {4, 4};
    tensor_t *h = tensor_new(FMT_FP32, 2, s), *d = tensor_new_device(FMT_FP32, 2, s);
    tensor_t *q = tensor_new_device(FMT_DFP16, 2, s);
    float buf[16] = {0};
    CHECK_STATUS(tensor_add(d, d, h), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), "lives on") != NULL, "'%s'", flexpoint_last_error());
    CHECK_STATUS(tensor_matmul(h, d, d), FX_EINVAL);
    CHECK_STATUS(tensor_to_f32(d, buf), FX_EINVAL);
    CHECK_STATUS(tensor_from_f32(d, buf), FX_EINVAL);
    CHECK_STATUS(tensor_get_raw(d, buf), FX_EINVAL);
    CHECK(tensor_data(d) == NULL, "tensor_data of a device tensor");
    tensor_t *y = tensor_new_device(FMT_FP32, 2, s);
    CHECK_STATUS(tensor_relu_backward(y, d, h), FX_EINVAL); /* x on the host, the rest not */
    CHECK(strstr(flexpoint_last_error(), "lives on") != NULL, "'%s'", flexpoint_last_error());
    const int64_t zero[2] = {0, 5};
    tensor_t *e = tensor_new_device(FMT_DFP16, 2, zero), *eo = tensor_new_device(FMT_FP16, 2, zero);
    CHECK_STATUS(tensor_copy(eo, e), FX_OK); /* empty tensors: nothing to launch */
    CHECK(flexpoint_gpu_device_name() != NULL, "device name: %s", flexpoint_last_error());
    CHECK(flexpoint_gpu_device() >= 0, "current device");
    CHECK_STATUS(flexpoint_gpu_set_device(flexpoint_gpu_device_count()), FX_EINVAL);
    tensor_free(e);
    tensor_free(eo);
    tensor_free(y);
    tensor_free(q);
    tensor_free(d);
    tensor_free(h);
}

int main(void)
{
    const char *env = getenv("FX_GPU_TEST_ON_HOST");
    gpu_test_on_host = env && env[0] == '1';
    if (!gpu_test_on_host && flexpoint_gpu_device_count() <= 0)
        return test_skip("test_gpu_ops", "no CUDA device (or built without CUDA); set "
                         "FX_GPU_TEST_ON_HOST=1 to check the test itself on the CPU");
    if (gpu_test_on_host) {
        /* the stand-in side runs on the best CPU backend */
        for (int i = flexpoint_backend_count() - 1; i >= 0; i--)
            if (flexpoint_backend_available(i)) {
                g_alt_backend = flexpoint_backend_name(i);
                break;
            }
        printf("test_gpu_ops: host stand-ins, backend %s vs scalar\n", g_alt_backend);
    } else {
        printf("test_gpu_ops: device %d (%s) vs CPU scalar\n", flexpoint_gpu_device(),
               flexpoint_gpu_device_name());
    }
    test_rng r;
    test_rng_seed(&r, 20261122);
    test_copy_all_formats(&r);
    test_binary_ops(&r);
    test_addsub_far_exponents(&r);
    test_unary_ops(&r);
    test_sum(&r);
    test_matmul(&r);
    test_autoflex_sequences(&r);
    test_deferred_waits(&r);
    test_set_exp(&r);
    test_stochastic_rounding(&r);
    test_partial_view_output(&r);
    if (!gpu_test_on_host) {
        test_transfers(&r);
        test_misuse();
    }
    return test_finish("test_gpu_ops");
}
