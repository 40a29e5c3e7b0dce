/* Kernels chosen per CPU (src/core/backend.c, src/bf16/bf16_route.c): the bf16 x bf16 GEMM
 * routes "widen" (bf16 -> fp32 while packing, fp32 FMAs) and "dpbf16" (vdpbf16ps on pairs).
 *  - the per-microarchitecture table from recorded cpuid features: Emerald Rapids (Intel
 *    family 6 model 207) gets widen; Zen 4 and Zen 5 (AMD families 25 and 26) get dpbf16; a
 *    CPU not in the table gets -1 (measured instead: tests/test_kernel_choice.c);
 *  - flexpoint_set_kernel's statuses for bad input, and that nothing changes then;
 *  - every route this machine can run, forced, on matmuls (transposed views, edge tiles, odd
 *    K, K across depth blocks, 1 and 2 threads) and convolutions, against an fp64 reference:
 *    fp32 output within |c - ref| <= 1.01 (K + 2) 2^-24 sum_k |a_k b_k| (K fp32 roundings, no
 *    flushing on this data), bf16 output within that plus 2^-8 |ref| (one rounding to bf16);
 *  - each route's bits do not depend on the thread count, and flexpoint_kernel_name names the
 *    route in use.
 * And the int16 GEMM's kernels (flex16_5 and dfp16: "auto", "split", "wrap", "fast"):
 *  - every kernel this machine runs, forced with flexpoint_set_kernel on every SIMD level, gives
 *    the exact int64 sums of an int64 reference (the level's MATMUL kernel called directly, on
 *    full-range and Gaussian-like mantissas, edge tiles, K across depth blocks, 1 and 2
 *    threads), and the tile counters show the forced kernel ran (no fast tiles under split or
 *    wrap, fast tiles under fast on small data); flex16_5 matmuls and convolutions through the
 *    public API give the scalar backend's output bits;
 *  - FLEXPOINT_KERNEL_I16_GEMM in a child process of this program: "split" is taken and
 *    reported as chosen by the variable, an unknown value and (without AVX512_VNNI) "wrap" are
 *    refused with a message naming the variable and the kernels, and auto stays.
 * And flexpoint_instruction_limits: plausible, measured once, the same in its report line. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "bf16/bf16_gemm.h" /* fx_amx_bf16_usable */
#include "flex/gemm_i16.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fx_cpu_features recorded(const char *vendor, int family, int model)
{
    fx_cpu_features f;
    memset(&f, 0, sizeof f);
    f.sse2 = f.avx = f.avx2 = f.fma = f.f16c = 1;
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512vnni = f.avx512bf16 = 1;
    snprintf(f.vendor, sizeof f.vendor, "%s", vendor);
    f.family = family;
    f.model = model;
    return f;
}

static void check_table(void)
{
    const char *why = NULL;
    fx_cpu_features emr = recorded("GenuineIntel", 6, 207);
    CHECK(fx_bf16_gemm_route_preferred(&emr, &why) == FX_BF16_GEMM_WIDEN,
          "Emerald Rapids should take the widening route");
    CHECK(why && strstr(why, "Emerald Rapids"), "entry's justification: %s", why ? why : "(null)");
    fx_cpu_features zen4 = recorded("AuthenticAMD", 25, 17); /* Genoa */
    CHECK(fx_bf16_gemm_route_preferred(&zen4, NULL) == FX_BF16_GEMM_DPBF16, "Zen 4: dpbf16");
    zen4.model = 97; /* Raphael */
    CHECK(fx_bf16_gemm_route_preferred(&zen4, NULL) == FX_BF16_GEMM_DPBF16, "Zen 4 desktop: dpbf16");
    fx_cpu_features zen5 = recorded("AuthenticAMD", 26, 2); /* Turin */
    CHECK(fx_bf16_gemm_route_preferred(&zen5, &why) == FX_BF16_GEMM_DPBF16, "Zen 5: dpbf16");
    CHECK(why && strstr(why, "Zen 5"), "Zen 5 entry's justification: %s", why ? why : "(null)");
    /* not in the table: -1, the backend measures (tests/test_kernel_choice.c) */
    fx_cpu_features other = recorded("GenuineIntel", 6, 106); /* Ice Lake */
    CHECK(fx_bf16_gemm_route_preferred(&other, &why) == -1, "Ice Lake is not in the table");
    CHECK(why && strstr(why, "not in the table"), "unlisted CPU's reason: %s", why ? why : "(null)");
    fx_cpu_features masked = recorded("GenuineIntel", 6, 167); /* a hypervisor's model number */
    CHECK(fx_bf16_gemm_route_preferred(&masked, NULL) == -1, "model 167 is not in the table");
    fx_cpu_features amd_intel_model = recorded("AuthenticAMD", 6, 207); /* vendor is part of the key */
    CHECK(fx_bf16_gemm_route_preferred(&amd_intel_model, NULL) == -1, "vendor key");
    CHECK(strcmp(fx_bf16_gemm_route_name(FX_BF16_GEMM_WIDEN), "widen") == 0, "name");
    CHECK(strcmp(fx_bf16_gemm_route_name(FX_BF16_GEMM_DPBF16), "dpbf16") == 0, "name");
    CHECK(fx_bf16_gemm_route_name(7) == NULL, "bad route has no name");
    CHECK(fx_bf16_gemm_route_parse("dpbf16") == FX_BF16_GEMM_DPBF16, "parse");
    CHECK(fx_bf16_gemm_route_parse("DPBF16") == -1 && fx_bf16_gemm_route_parse(NULL) == -1,
          "unknown names");
}

static void check_bad_input(void)
{
    const int before = fx_bf16_gemm_route();
    CHECK_STATUS(flexpoint_set_kernel(NULL, FMT_BF16, "widen"), FX_EINVAL);
    CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_BF16, NULL), FX_EINVAL);
    CHECK_STATUS(flexpoint_set_kernel("matmul", (fmt_t)99, "widen"), FX_EINVAL);
    CHECK_STATUS(flexpoint_set_kernel("conv", FMT_BF16, "widen"), FX_ENAME);
    CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_BF16, "fast"), FX_ENAME);
    CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_FP32, "dpbf16"), FX_ENAME);
    CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_FP32, flexpoint_kernel_name("matmul", FMT_FP32)),
                 FX_OK);
    if (!fx_cpu()->avx512bf16 || !flexpoint_backend_available(FX_BACKEND_AVX512))
        CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_BF16, "dpbf16"), FX_EUNSUPPORTED);
    CHECK(fx_bf16_gemm_route() == before, "a refused setting changed the route");
    CHECK(flexpoint_kernel_name("conv", FMT_BF16) == NULL, "unknown op");
    CHECK(flexpoint_kernel_name("matmul", (fmt_t)-1) == NULL, "unknown format");
    CHECK(flexpoint_kernel_name("matmul", FMT_DFP16) != NULL, "integer format kernel name");
    const char *rep = flexpoint_kernel_report();
    CHECK(rep && strstr(rep, "matmul/bf16="), "report: %s", rep ? rep : "(null)");
    CHECK(strstr(flexpoint_cpu_model(), "family") != NULL, "cpu model: %s", flexpoint_cpu_model());
}

static uint16_t draw(test_rng *r) { return fx_f32_to_bf16((float)test_rng_normal(r)); }

static tensor_t *new2d(fmt_t f, int64_t r, int64_t c)
{
    const int64_t sh[2] = {r, c};
    return tensor_new(f, 2, sh);
}

/* fp64 dot product and its bound for fp32 accumulation */
static void ref_dot(const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb, int64_t K,
                    double *val, double *bound)
{
    double s = 0, m = 0;
    for (int64_t k = 0; k < K; k++) {
        const double p = (double)fx_bf16_to_f32(a[k * sa]) * (double)fx_bf16_to_f32(b[k * sb]);
        s += p;
        m += fabs(p);
    }
    *val = s;
    *bound = 1.01 * (double)(K + 2) * ldexp(1.0, -24) * m;
}

/* bits of the last fp32-output matmul of each route, for the thread-count check */
static void check_matmul(const char *route, int64_t M, int64_t N, int64_t K, int transA,
                         int transB, uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    uint16_t *a = malloc(sizeof(uint16_t) * (size_t)(M * K));
    uint16_t *b = malloc(sizeof(uint16_t) * (size_t)(K * N));
    float *c = malloc(sizeof(float) * (size_t)(M * N)), *c1 = malloc(sizeof(float) * (size_t)(M * N));
    for (int64_t i = 0; i < M * K; i++) a[i] = draw(&r);
    for (int64_t i = 0; i < K * N; i++) b[i] = draw(&r);
    tensor_t *ta = transA ? new2d(FMT_BF16, K, M) : new2d(FMT_BF16, M, K);
    tensor_t *tb = transB ? new2d(FMT_BF16, N, K) : new2d(FMT_BF16, K, N);
    tensor_t *tc = new2d(FMT_FP32, M, N), *th = new2d(FMT_BF16, M, N);
    CHECK_STATUS(tensor_set_raw(ta, a), FX_OK);
    CHECK_STATUS(tensor_set_raw(tb, b), FX_OK);
    tensor_t *va = transA ? tensor_view_transpose(ta, 0, 1) : ta;
    tensor_t *vb = transB ? tensor_view_transpose(tb, 0, 1) : tb;
    const int64_t asi = transA ? 1 : K, ask = transA ? M : 1; /* A[i][k] = a[i*asi + k*ask] */
    const int64_t bsj = transB ? K : 1, bsk = transB ? 1 : N;
    for (int threads = 1; threads <= 2; threads++) {
        flexpoint_set_num_threads(threads);
        for (int half = 0; half <= 1; half++) {
            CHECK_STATUS(tensor_matmul(half ? th : tc, va, vb), FX_OK);
            CHECK_STATUS(tensor_to_f32(half ? th : tc, c), FX_OK);
            long bad = 0;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double v, bound;
                    ref_dot(a + i * asi, ask, b + j * bsj, bsk, K, &v, &bound);
                    if (half) bound += ldexp(fabs(v) + bound, -8);
                    const double got = c[i * N + j];
                    if (!(fabs(got - v) <= bound) && bad++ < 3)
                        fprintf(stderr, "  [%lld,%lld]: %.9g, fp64 %.9g, bound %.3g\n",
                                (long long)i, (long long)j, got, v, bound);
                }
            CHECK(bad == 0, "%s: %lldx%lldx%lld transA %d transB %d, %s output, %d threads: %ld "
                  "outputs beyond the bound", route, (long long)M, (long long)N, (long long)K,
                  transA, transB, half ? "bf16" : "fp32", threads, bad);
            if (!half && threads == 1) memcpy(c1, c, sizeof(float) * (size_t)(M * N));
            if (!half && threads == 2)
                CHECK(memcmp(c1, c, sizeof(float) * (size_t)(M * N)) == 0,
                      "%s: bits depend on the thread count", route);
        }
    }
    /* the transposed product B^T A^T (a wide product's is tall: the AMX route then runs its
     * other schedule) gives the transposed bits: each output is the same chain of the same
     * products, whichever operand streams */
    {
        tensor_t *tat = tensor_view_transpose(va, 0, 1), *tbt = tensor_view_transpose(vb, 0, 1);
        tensor_t *tct = new2d(FMT_FP32, N, M);
        float *ct = malloc(sizeof(float) * (size_t)(M * N));
        CHECK_STATUS(tensor_matmul(tct, tbt, tat), FX_OK);
        CHECK_STATUS(tensor_to_f32(tct, ct), FX_OK);
        long diff = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) diff += memcmp(&ct[j * M + i], &c1[i * N + j], 4) != 0;
        CHECK(diff == 0, "%s: %lldx%lldx%lld transA %d transB %d: B^T A^T differs from (A B)^T "
              "in %ld outputs", route, (long long)M, (long long)N, (long long)K, transA, transB,
              diff);
        tensor_free(tat);
        tensor_free(tbt);
        tensor_free(tct);
        free(ct);
    }
    if (va != ta) tensor_free(va);
    if (vb != tb) tensor_free(vb);
    tensor_free(ta);
    tensor_free(tb);
    tensor_free(tc);
    tensor_free(th);
    free(a);
    free(b);
    free(c);
    free(c1);
}

/* A bf16 convolution (fp32 output) against fp64 over each output's patch. */
static void check_conv(const char *route, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                       int64_t KH, int64_t KW, int pad, int stride, uint64_t seed)
{
    const int64_t OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
    const int64_t xs[4] = {N, C, H, W}, ws[4] = {O, C, KH, KW}, ys[4] = {N, O, OH, OW};
    const int64_t nx = N * C * H * W, nw = O * C * KH * KW, ny = N * O * OH * OW, K = C * KH * KW;
    test_rng r;
    test_rng_seed(&r, seed);
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)nx), *w = malloc(sizeof(uint16_t) * (size_t)nw);
    uint16_t *pa = malloc(sizeof(uint16_t) * (size_t)K);
    float *y = malloc(sizeof(float) * (size_t)ny);
    for (int64_t i = 0; i < nx; i++) x[i] = draw(&r);
    for (int64_t i = 0; i < nw; i++) w[i] = draw(&r);
    tensor_t *tx = tensor_new(FMT_BF16, 4, xs), *tw = tensor_new(FMT_BF16, 4, ws);
    tensor_t *ty = tensor_new(FMT_FP32, 4, ys);
    CHECK_STATUS(tensor_set_raw(tx, x), FX_OK);
    CHECK_STATUS(tensor_set_raw(tw, w), FX_OK);
    for (int threads = 1; threads <= 2; threads++) {
        flexpoint_set_num_threads(threads);
        CHECK_STATUS(tensor_conv2d(ty, tx, tw, stride, stride, pad, pad, 1, 1), FX_OK);
        CHECK_STATUS(tensor_to_f32(ty, y), FX_OK);
        long bad = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t kh = 0; kh < KH; kh++)
                            for (int64_t kw = 0; kw < KW; kw++) {
                                const int64_t ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                                const int in = ih >= 0 && ih < H && iw >= 0 && iw < W;
                                pa[(c * KH + kh) * KW + kw] = in ? x[((n * C + c) * H + ih) * W + iw] : 0;
                            }
                    for (int64_t o = 0; o < O; o++) {
                        double v, bound;
                        ref_dot(pa, 1, w + o * K, 1, K, &v, &bound);
                        bad += !(fabs((double)y[((n * O + o) * OH + oh) * OW + ow] - v) <= bound);
                    }
                }
        CHECK(bad == 0, "%s: conv N%lld C%lld %lldx%lld O%lld k%lldx%lld pad %d stride %d, %d "
              "threads: %ld outputs beyond the bound", route, (long long)N, (long long)C,
              (long long)H, (long long)W, (long long)O, (long long)KH, (long long)KW, pad, stride,
              threads, bad);
    }
    tensor_free(tx);
    tensor_free(tw);
    tensor_free(ty);
    free(x);
    free(w);
    free(pa);
    free(y);
}

static void check_route(const char *route)
{
    /* {M, N, K}; {20, 1100, 100}: wide, so the AMX route streams B in five groups of column
     * panels, the last one short, with a K tail */
    static const int64_t shapes[][3] = {{6, 32, 2},   {7, 33, 1},     {13, 70, 5},
                                        {64, 64, 64}, {37, 95, 129},  {100, 40, 1100},
                                        {50, 10, 77}, {3, 200, 31},   {20, 1100, 100}};
    uint64_t seed = 11;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            check_matmul(route, shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1, seed++);
    check_conv(route, 3, 1, 12, 12, 32, 5, 5, 2, 1, seed++);
    check_conv(route, 2, 32, 10, 10, 64, 5, 5, 2, 1, seed++);
    check_conv(route, 2, 16, 9, 9, 24, 3, 3, 1, 2, seed++);
    check_conv(route, 2, 3, 8, 8, 8, 1, 1, 0, 1, seed++);
}

/* ---- the int16 GEMM's forced kernels ------------------------------------------------------ */

static int16_t i16_value(test_rng *r, int full)
{
    if (full) return (int16_t)test_rng_range(r, -32767, 32767);
    double v = 3000.0 * test_rng_normal(r); /* Gaussian-like: the fast kernel's data */
    v = v > 32767 ? 32767 : v < -32767 ? -32767 : v;
    return (int16_t)lrint(v);
}

/* One product through the MATMUL kernel of level be against the int64 reference; returns the
 * fast tiles it ran (-1 on a mismatch, already reported). */
static int64_t check_i16_product(const fx_backend *be, const char *kname, int64_t M, int64_t K,
                                 int64_t N, int full, int threads, uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    int16_t *A = malloc(sizeof(int16_t) * (size_t)(M * K)), *B = malloc(sizeof(int16_t) * (size_t)(K * N));
    int64_t *want = malloc(sizeof(int64_t) * (size_t)(M * N)), *got = malloc(sizeof(int64_t) * (size_t)(M * N));
    for (int64_t i = 0; i < M * K; i++) A[i] = i16_value(&r, full);
    for (int64_t i = 0; i < K * N; i++) B[i] = i16_value(&r, full);
    test_ref_matmul_i16(A, B, M, K, N, want);
    fx_op_call c;
    int exp = 0;
    test_i16_matmul_call(&c, A, -3, B, 5, M, K, N, got, &exp, threads);
    int64_t fast = 0, split = 0;
    fx_gemm_i16_reset_tile_counts();
    CHECK_STATUS(be->kernels[FX_OP_MATMUL][FMT_FLEX16_5](&c), FX_OK);
    fx_gemm_i16_tile_counts(&fast, &split);
    int64_t bad = -1;
    for (int64_t i = 0; i < M * N && bad < 0; i++)
        if (got[i] != want[i]) bad = i;
    CHECK(bad < 0 && exp == 2, "%s %s: %lldx%lldx%lld %s, %d threads: exp %d, first bad [%lld] "
          "%lld vs %lld", be->name, kname, (long long)M, (long long)K, (long long)N,
          full ? "full-range" : "gaussian", threads, exp, (long long)bad,
          bad >= 0 ? (long long)got[bad] : 0LL, bad >= 0 ? (long long)want[bad] : 0LL);
    /* the AMX kernel (where the level has it and it is on) takes every product here, which
     * then runs no tile of the register-tile driver; everything else runs the driver */
    const int amx = be->gemm.i16_amx && fx_gemm_i16_amx_on() && M >= 16 && N >= 16 && K >= 32;
    CHECK(amx ? fast + split == 0 : fast + split > 0,
          "%s %s: %lldx%lldx%lld ran %lld tiles of the tile GEMM (AMX kernel: %d)", be->name,
          kname, (long long)M, (long long)K, (long long)N, (long long)(fast + split), amx);
    free(A);
    free(B);
    free(want);
    free(got);
    return bad < 0 ? fast : -1;
}

/* flex16_5 matmul and convolution output bits through the public API (current backend). */
static void i16_api_bits(uint16_t *mm, uint16_t *cv, int *exps)
{
    test_rng r;
    test_rng_seed(&r, 77);
    const int64_t sa[2] = {70, 300}, sb[2] = {300, 90}, sc[2] = {70, 90};
    /* 32 input channels: 288 values per patch, enough for the AMX kernel's convolutions; 242
     * output pixels, not a whole number of its 16-row panels */
    const int64_t xs[4] = {2, 32, 11, 11}, ws[4] = {24, 32, 3, 3}, ys[4] = {2, 24, 11, 11};
    float *v = malloc(sizeof(float) * 70 * 300), *w = malloc(sizeof(float) * 300 * 90);
    for (int i = 0; i < 70 * 300; i++) v[i] = (float)test_rng_normal(&r);
    for (int i = 0; i < 300 * 90; i++) w[i] = (float)test_rng_normal(&r);
    tensor_t *a = tensor_new(FMT_FLEX16_5, 2, sa), *b = tensor_new(FMT_FLEX16_5, 2, sb);
    tensor_t *c = tensor_new(FMT_FLEX16_5, 2, sc);
    tensor_t *x = tensor_new(FMT_FLEX16_5, 4, xs), *k = tensor_new(FMT_FLEX16_5, 4, ws);
    tensor_t *y = tensor_new(FMT_FLEX16_5, 4, ys);
    CHECK_STATUS(tensor_from_f32(a, v), FX_OK);
    CHECK_STATUS(tensor_from_f32(b, w), FX_OK);
    CHECK_STATUS(tensor_matmul(c, a, b), FX_OK);
    CHECK_STATUS(tensor_get_raw(c, mm), FX_OK);
    CHECK_STATUS(tensor_get_exp(c, &exps[0]), FX_OK);
    CHECK_STATUS(tensor_from_f32(x, v), FX_OK); /* 7744 of the values */
    CHECK_STATUS(tensor_from_f32(k, w), FX_OK); /* 6912 */
    CHECK_STATUS(tensor_conv2d(y, x, k, 1, 1, 1, 1, 1, 1), FX_OK);
    CHECK_STATUS(tensor_get_raw(y, cv), FX_OK);
    CHECK_STATUS(tensor_get_exp(y, &exps[1]), FX_OK);
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
    tensor_free(x);
    tensor_free(k);
    tensor_free(y);
    free(v);
    free(w);
}

static int check_i16_kernels(void)
{
    enum { MM = 70 * 90, CV = 2 * 24 * 11 * 11 };
    static uint16_t mm_ref[MM], cv_ref[CV], mm[MM], cv[CV];
    CHECK_STATUS(flexpoint_set_backend("scalar"), FX_OK);
    int exps_ref[2], exps[2];
    i16_api_bits(mm_ref, cv_ref, exps_ref);
    /* products: edge tiles, one and several K blocks (FX_GEMM_I16_KC = 384), K below and above
     * the wrap kernel's gate, a product above the default fast-kernel size gates */
    /* the last two for the AMX kernel's blocking: a B of 1.1 MB in two column chunks; and a
     * product it runs transposed (more columns than rows), in two K blocks */
    static const int64_t shapes[][3] = {{7, 33, 19},    {13, 200, 70},   {20, 1100, 37},
                                        {6, 129, 64},   {520, 256, 140}, {24, 250, 2200},
                                        {40, 2100, 320}};
    int checked = 0;
    for (int lvl = FX_BACKEND_AVX2; lvl < FX_BACKEND_COUNT; lvl++) {
        if (!flexpoint_backend_available(lvl)) continue;
        const fx_backend *be = fx_backend_get(lvl);
        CHECK_STATUS(flexpoint_set_backend(be->name), FX_OK);
        for (int kk = 0; kk < FX_GEMM_I16_KERNELS; kk++) {
            const char *kname = fx_gemm_i16_kernel_name(kk);
            const int st = flexpoint_set_kernel("matmul", FMT_DFP16, kname);
            const int has_amx = fx_backend_get(FX_BACKEND_AVX512)->gemm.i16_amx;
            if ((kk == FX_GEMM_I16_KERNEL_WRAP && !fx_cpu()->avx512vnni) ||
                (kk == FX_GEMM_I16_KERNEL_AMX && !has_amx)) {
                CHECK_STATUS(st, FX_EUNSUPPORTED);
                continue;
            }
            CHECK_STATUS(st, FX_OK);
            char want[32];
            snprintf(want, sizeof want, "%s-i16%s%s", be->name, kk ? "-" : "", kk ? kname : "");
            if (lvl == FX_BACKEND_AVX2 && kk == FX_GEMM_I16_KERNEL_WRAP)
                snprintf(want, sizeof want, "avx2-i16-split"); /* no wrap kernel on AVX2 */
            if (lvl == FX_BACKEND_AVX2 && kk == FX_GEMM_I16_KERNEL_AMX)
                snprintf(want, sizeof want, "avx2-i16"); /* AMX is the AVX-512 level's */
            if (lvl == FX_BACKEND_AVX512 && kk == FX_GEMM_I16_KERNEL_AUTO && fx_gemm_i16_amx_on())
                snprintf(want, sizeof want, "avx512-i16-amx"); /* auto measured AMX in */
            CHECK(strcmp(flexpoint_kernel_name("matmul", FMT_FLEX16_5), want) == 0 &&
                  strcmp(flexpoint_kernel_name("matmul", FMT_DFP16), want) == 0,
                  "forced %s on %s: names %s / %s", kname, be->name,
                  flexpoint_kernel_name("matmul", FMT_FLEX16_5),
                  flexpoint_kernel_name("matmul", FMT_DFP16));
            const char *rep = flexpoint_kernel_report();
            CHECK(strstr(rep, "chosen by flexpoint_set_kernel)") != NULL, "report: %s", rep);
            uint64_t seed = 1000u * (uint64_t)(lvl * 8 + kk);
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                for (int full = 0; full <= 1; full++)
                    for (int threads = 1; threads <= 2; threads++) {
                        const int64_t fast =
                            check_i16_product(be, kname, shapes[s][0], shapes[s][1],
                                              shapes[s][2], full, threads, seed++);
                        if (fast < 0) continue;
                        if (kk == FX_GEMM_I16_KERNEL_SPLIT || kk == FX_GEMM_I16_KERNEL_WRAP || full)
                            CHECK(fast == 0, "%s forced %s: %lld fast tiles", be->name, kname,
                                  (long long)fast);
                        else if (kk == FX_GEMM_I16_KERNEL_FAST)
                            CHECK(fast > 0, "%s forced fast: no fast tile on Gaussian data, "
                                  "%lldx%lldx%lld", be->name, (long long)shapes[s][0],
                                  (long long)shapes[s][1], (long long)shapes[s][2]);
                    }
            i16_api_bits(mm, cv, exps);
            CHECK(memcmp(mm, mm_ref, sizeof mm) == 0 && exps[0] == exps_ref[0],
                  "%s forced %s: matmul bits differ from the scalar backend's", be->name, kname);
            CHECK(memcmp(cv, cv_ref, sizeof cv) == 0 && exps[1] == exps_ref[1],
                  "%s forced %s: conv2d bits differ from the scalar backend's", be->name, kname);
            checked++;
        }
    }
    CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_FLEX16_5, "avx2-i16"), FX_OK); /* = auto */
    CHECK(fx_gemm_i16_forced_kernel() == FX_GEMM_I16_KERNEL_AUTO, "avx2-i16 is auto");
    CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_FLEX16_5, "splitt"), FX_ENAME);
    CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_DFP16, "avx2-i16-"), FX_ENAME);
    CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_DFP16, "avx512-i16x"), FX_ENAME);
    CHECK(fx_gemm_i16_forced_kernel() == FX_GEMM_I16_KERNEL_AUTO, "a refused name changed it");
    return checked;
}

/* FLEXPOINT_KERNEL_I16_GEMM=value in a child run of this program ("--i16-child" prints the
 * flex16_5 kernel name and the report); its stdout and stderr into out. */
static void run_child(const char *self, const char *value, char *out, size_t n)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "FLEXPOINT_KERNEL_I16_GEMM='%s' '%s' --i16-child 2>&1", value, self);
    CHECK(test_run_capture(cmd, out, n) == 0, "child with FLEXPOINT_KERNEL_I16_GEMM=%s failed: %s",
          value, out);
}

static void check_i16_env(const char *self)
{
    char out[4096];
    run_child(self, "split", out, sizeof out);
    CHECK(strstr(out, "i16-split") && strstr(out, "chosen by FLEXPOINT_KERNEL_I16_GEMM)") &&
          !strstr(out, "flexpoint: FLEXPOINT_KERNEL_I16_GEMM"), "split: %s", out);
    run_child(self, "bogus", out, sizeof out);
    CHECK(strstr(out, "flexpoint: FLEXPOINT_KERNEL_I16_GEMM=bogus is not an int16 GEMM kernel "
                      "(auto, split, wrap, fast, amx); using auto") != NULL, "bogus: %s", out);
    CHECK(strstr(out, "chosen by default)") &&
              (!strstr(out, "i16-") || (strstr(flexpoint_kernel_name("matmul", FMT_FLEX16_5), "-amx") &&
                                        strstr(out, "avx512-i16-amx"))),
          "bogus kept auto: %s", out);
    if (!fx_cpu()->avx512vnni || !flexpoint_backend_available(FX_BACKEND_AVX512)) {
        run_child(self, "wrap", out, sizeof out);
        CHECK(strstr(out, "FLEXPOINT_KERNEL_I16_GEMM=wrap needs AVX-512 with AVX512_VNNI") &&
              strstr(out, "chosen by default)"), "wrap without VNNI: %s", out);
    }
}

/* flexpoint_instruction_limits: plausible per-thread rates where the CPU has the instruction,
 * 0 where it has not, measured once (a second call gives the same numbers), NULL pointers
 * allowed, and the report line prints the same numbers. */
static void check_limits(void)
{
    double fma = -1, i16 = -1, bf16 = -1;
    CHECK_STATUS(flexpoint_instruction_limits(&fma, &i16, &bf16), FX_OK);
    const fx_cpu_features *c = fx_cpu();
    if (c->fma && c->avx2) {
        /* at least one 256-bit FMA per ns, fewer than ten 512-bit ones */
        CHECK(fma >= 16.0 && fma < 1600.0, "fp32 FMA limit %.1f GFLOP/s", fma);
        CHECK(i16 >= 16.0 && i16 < 3200.0, "int16 pair-product limit %.1f GOP/s", i16);
    }
    CHECK((bf16 > 0) == (c->avx512bf16 && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq),
          "bf16 limit %.1f with avx512bf16 %d", bf16, c->avx512bf16);
    double fma2 = 0, i162 = 0;
    CHECK_STATUS(flexpoint_instruction_limits(&fma2, NULL, NULL), FX_OK);
    CHECK_STATUS(flexpoint_instruction_limits(NULL, &i162, NULL), FX_OK);
    CHECK(fma2 == fma && i162 == i16, "limits measured again: %.3f %.3f vs %.3f %.3f", fma2, i162,
          fma, i16);
    char num[32];
    snprintf(num, sizeof num, "%.1f GFLOP/s", fma);
    const char *rep = flexpoint_instruction_limits_report();
    CHECK(rep && strstr(rep, num) != NULL, "limits report %s lacks %s", rep ? rep : "(null)", num);
    /* AVX2 without AVX-512: the multiply-and-add rate beside the multiplies' own, never above
     * it beyond measurement noise (it issues the same multiplies and as many adds) */
    const char *with_add = rep ? strstr(rep, " with the vpaddd") : NULL;
    if (rep && strstr(rep, "(vpmaddwd ymm)")) {
        CHECK(with_add != NULL, "limits report %s lacks the vpmaddwd + vpaddd rate", rep);
        const char *open = with_add;
        while (open > rep && *open != '(') open--;
        double both = 0;
        CHECK(sscanf(open, "(%lf", &both) == 1 && both > 0 && both <= i16 * 1.1,
              "vpmaddwd + vpaddd %.1f GOP/s against vpmaddwd alone %.1f (%s)", both, i16, rep);
    } else {
        CHECK(with_add == NULL, "limits report %s names a vpaddd rate without AVX2-only int16",
              rep ? rep : "(null)");
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--i16-child") == 0) {
        printf("kernel %s\nreport %s\n", flexpoint_kernel_name("matmul", FMT_FLEX16_5),
               flexpoint_kernel_report());
        return 0;
    }
    check_i16_env(argv[0]);
    check_limits();
    const int i16_checked = check_i16_kernels();
    CHECK(i16_checked >= 3 || !flexpoint_backend_available(FX_BACKEND_AVX2),
          "only %d int16 kernels checked", i16_checked);
    check_table();
    check_bad_input();
    int routes = 0;
    for (int be = 0; be < flexpoint_backend_count(); be++) {
        if (!flexpoint_backend_available(be)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(be)), FX_OK);
        if (be != FX_BACKEND_AVX512) {
            check_route(flexpoint_kernel_name("matmul", FMT_BF16));
            routes++;
            continue;
        }
        for (int rt = 0; rt < FX_BF16_GEMM_ROUTES; rt++) {
            const char *name = fx_bf16_gemm_route_name(rt);
            const int st = flexpoint_set_kernel("matmul", FMT_BF16, name);
            /* a route this CPU cannot run is refused, naming what it needs */
            const int runnable = rt == FX_BF16_GEMM_DPBF16 ? fx_cpu()->avx512bf16
                                 : rt == FX_BF16_GEMM_AMX  ? fx_amx_bf16_usable(fx_cpu())
                                                           : 1;
            if (!runnable) {
                CHECK_STATUS(st, FX_EUNSUPPORTED);
                CHECK(strstr(flexpoint_last_error(),
                             rt == FX_BF16_GEMM_AMX ? "AMX-BF16" : "AVX512_BF16") != NULL,
                      "'%s'", flexpoint_last_error());
                continue;
            }
            CHECK_STATUS(st, FX_OK);
            char want[32];
            snprintf(want, sizeof want, "avx512-%s", name);
            CHECK(strcmp(flexpoint_kernel_name("matmul", FMT_BF16), want) == 0, "kernel name %s, want %s",
                  flexpoint_kernel_name("matmul", FMT_BF16), want);
            check_route(want);
            routes++;
        }
    }
    fprintf(stderr, "test_kernel_select: %d bf16 matmul kernels and %d (level, int16 kernel) "
            "pairs checked (%s; %s)\n", routes, i16_checked, flexpoint_cpu_model(),
            flexpoint_cpu_features());
    CHECK(routes >= 1, "no route checked");
    return test_finish("test_kernel_select");
}
