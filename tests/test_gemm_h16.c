/* Float products into fp16 and bf16 outputs converted inside the GEMM (fx_op_call.out_h16:
 * each block of fp32 results rounded into the output while it is in cache) against the fp32
 * stage and the write's conversion of it (fx_gemm_h16_set_enabled(0)): the same bits.
 *
 * Covered: every backend the CPU runs, and on AVX-512 every bf16 route it can run (widen,
 * dpbf16, amx); bf16 x bf16 into bf16, fp16 x fp16 into fp16, fp32 x fp32 into bf16 (the fp32
 * GEMM); shapes with partial tiles in both dimensions, a depth of one, depths beyond one of the
 * fp32 GEMM's depth blocks (whose tiles are converted from C after the last block), products
 * wider than tall (the AMX kernel's streamed B), a narrow product (computed transposed, which
 * keeps the stage), a transposed operand; one and two threads; NaN and values beyond fp16's
 * range among the results. The conversion must have been taken, and not for a strided output
 * (a transposed view of the output keeps the stage). Batched products (tensor_bmm) into fp16/bf16
 * outputs, converted in the GEMM into a 16-bit staging, against their fp32 stage too. A bias
 * added in the same conversion (fx_matmul_bias) against tensor_matmul and tensor_add. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/dispatch.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static tensor_t *filled(fmt_t f, int64_t r, int64_t c, test_rng *g, int specials)
{
    const int64_t shape[2] = {r, c};
    tensor_t *t = tensor_new(f, 2, shape);
    CHECK(t != NULL, "tensor_new: %s", flexpoint_last_error());
    float *v = malloc(sizeof(float) * (size_t)(r * c));
    for (int64_t i = 0; i < r * c; i++) v[i] = (float)test_rng_normal(g);
    /* a NaN, and values whose products leave fp16's range (65504) */
    if (specials && r * c > 9) {
        v[3] = NAN;
        v[r * c - 2] = 900.0f;
        v[r * c - 5] = -700.0f;
    }
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    free(v);
    return t;
}

/* out = a b (a transposed first where ta), with the conversion in the GEMM on or off; the
 * output's raw 16-bit elements into raw */
static void product(fmt_t fin, fmt_t fout, int64_t M, int64_t N, int64_t K, int ta, int on,
                    uint64_t seed, uint16_t *raw)
{
    test_rng g;
    test_rng_seed(&g, seed);
    tensor_t *a = ta ? filled(fin, K, M, &g, 1) : filled(fin, M, K, &g, 1);
    tensor_t *b = filled(fin, K, N, &g, 0);
    const int64_t os[2] = {M, N};
    tensor_t *out = tensor_new(fout, 2, os);
    tensor_t *av = ta ? tensor_view_transpose(a, 0, 1) : a;
    fx_gemm_h16_set_enabled(on);
    CHECK_STATUS(tensor_matmul(out, av, b), FX_OK);
    fx_gemm_h16_set_enabled(1);
    CHECK_STATUS(tensor_get_raw(out, raw), FX_OK);
    if (ta) tensor_free(av);
    tensor_free(a);
    tensor_free(b);
    tensor_free(out);
}

static int cases, taken_cases;

static void compare(fmt_t fin, fmt_t fout, int64_t M, int64_t N, int64_t K, int ta,
                    const char *where)
{
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)(M * N));
    uint16_t *y = malloc(sizeof(uint16_t) * (size_t)(M * N));
    const uint64_t seed = (uint64_t)(M * 1000003 + N * 1009 + K);
    const int64_t before = fx_gemm_h16_runs();
    product(fin, fout, M, N, K, ta, 1, seed, x);
    const int64_t taken = fx_gemm_h16_runs() - before;
    product(fin, fout, M, N, K, ta, 0, seed, y);
    CHECK(memcmp(x, y, sizeof(uint16_t) * (size_t)(M * N)) == 0,
          "%s: %s x %s -> %s, %lld x %lld x %lld%s: the GEMM's conversion differs from the "
          "stage's", where, fmt_name(fin), fmt_name(fin), fmt_name(fout), (long long)M,
          (long long)N, (long long)K, ta ? " (A transposed)" : "");
    cases++;
    taken_cases += taken > 0;
    free(x);
    free(y);
}

/* A transposed view of the output is not a whole row-major output: the stage stays. */
static void strided_output_keeps_stage(void)
{
    test_rng g;
    test_rng_seed(&g, 5);
    tensor_t *a = filled(FMT_BF16, 40, 24, &g, 0), *b = filled(FMT_BF16, 24, 56, &g, 0);
    const int64_t ts[2] = {56, 40};
    tensor_t *outT = tensor_new(FMT_BF16, 2, ts), *ref = tensor_new(FMT_BF16, 2, ts);
    tensor_t *view = tensor_view_transpose(outT, 0, 1);
    const int64_t before = fx_gemm_h16_runs();
    CHECK_STATUS(tensor_matmul(view, a, b), FX_OK);
    CHECK(fx_gemm_h16_runs() == before, "a strided output took the GEMM's conversion");
    tensor_t *bt = tensor_view_transpose(b, 0, 1), *at = tensor_view_transpose(a, 0, 1);
    fx_gemm_h16_set_enabled(0);
    CHECK_STATUS(tensor_matmul(ref, bt, at), FX_OK); /* (a b)^T = b^T a^T: the same chains */
    fx_gemm_h16_set_enabled(1);
    uint16_t x[56 * 40], y[56 * 40];
    CHECK_STATUS(tensor_get_raw(outT, x), FX_OK);
    CHECK_STATUS(tensor_get_raw(ref, y), FX_OK);
    CHECK(memcmp(x, y, sizeof x) == 0, "the strided output's values differ from b^T a^T");
    tensor_free(view);
    tensor_free(bt);
    tensor_free(at);
    tensor_free(a);
    tensor_free(b);
    tensor_free(outT);
    tensor_free(ref);
}

/* tensor_bmm into an fp16/bf16 output converts each item in the GEMM into a 16-bit staging
 * that is copied into the output: the bits of the fp32 stage and its write, for batches of
 * partial tiles, a depth of more than one block, transposed operands and fp32 inputs. */
static void bmm_compare(fmt_t fin, fmt_t fout, int64_t B, int64_t M, int64_t N, int64_t K,
                        int tb, const char *where)
{
    test_rng g;
    test_rng_seed(&g, (uint64_t)(B * 7 + M * 11 + N * 13 + K));
    const int64_t sa[3] = {B, M, K}, sb[3] = {B, tb ? N : K, tb ? K : N}, so[3] = {B, M, N};
    tensor_t *a = tensor_new(fin, 3, sa), *b = tensor_new(fin, 3, sb);
    tensor_t *x = tensor_new(fout, 3, so), *y = tensor_new(fout, 3, so);
    float *v = malloc(sizeof(float) * (size_t)(B * (M > N ? M : N) * K));
    for (int64_t i = 0; i < B * M * K; i++) v[i] = (float)test_rng_normal(&g);
    CHECK_STATUS(tensor_from_f32(a, v), FX_OK);
    for (int64_t i = 0; i < B * N * K; i++) v[i] = (float)test_rng_normal(&g);
    CHECK_STATUS(tensor_from_f32(b, v), FX_OK);
    CHECK_STATUS(tensor_bmm(x, a, b, 0, tb), FX_OK);
    fx_gemm_h16_set_enabled(0);
    CHECK_STATUS(tensor_bmm(y, a, b, 0, tb), FX_OK);
    fx_gemm_h16_set_enabled(1);
    uint16_t *rx = malloc(sizeof(uint16_t) * (size_t)(B * M * N));
    uint16_t *ry = malloc(sizeof(uint16_t) * (size_t)(B * M * N));
    CHECK_STATUS(tensor_get_raw(x, rx), FX_OK);
    CHECK_STATUS(tensor_get_raw(y, ry), FX_OK);
    CHECK(memcmp(rx, ry, sizeof(uint16_t) * (size_t)(B * M * N)) == 0,
          "%s: bmm %s -> %s, %lld x [%lld x %lld x %lld]%s: the 16-bit staging differs from "
          "the fp32 stage", where, fmt_name(fin), fmt_name(fout), (long long)B, (long long)M,
          (long long)N, (long long)K, tb ? " (b transposed)" : "");
    free(v);
    free(rx);
    free(ry);
    tensor_free(a);
    tensor_free(b);
    tensor_free(x);
    tensor_free(y);
}

/* fx_matmul_bias (the bias added where the GEMM converts) against tensor_matmul into a
 * temporary and tensor_add of the bias: the same bits, the bias holding a NaN, an Inf and values
 * that push sums past fp16's range; the product's NaN input reaches the output as well. */
static int bias_cases, bias_taken;

static void bias_compare(fmt_t f, int64_t M, int64_t N, int64_t K, const char *where)
{
    test_rng g;
    test_rng_seed(&g, (uint64_t)(M * 7919 + N * 31 + K));
    tensor_t *a = filled(f, M, K, &g, 1), *b = filled(f, K, N, &g, 0);
    const int64_t os[2] = {M, N}, bs[1] = {N};
    tensor_t *bias = tensor_new(f, 1, bs);
    float *bv = malloc(sizeof(float) * (size_t)N);
    for (int64_t j = 0; j < N; j++) bv[j] = (float)(3.0 * test_rng_normal(&g));
    if (N > 3) {
        bv[1] = NAN;
        bv[2] = INFINITY;
        bv[N - 1] = 65000.0f;
    }
    CHECK_STATUS(tensor_from_f32(bias, bv), FX_OK);
    tensor_t *out = tensor_new(f, 2, os), *tmp = tensor_new(f, 2, os), *ref = tensor_new(f, 2, os);
    const int64_t before = fx_gemm_h16_bias_runs();
    CHECK_STATUS(fx_matmul_bias(out, a, b, bias), FX_OK);
    bias_taken += fx_gemm_h16_bias_runs() > before;
    bias_cases++;
    CHECK_STATUS(tensor_matmul(tmp, a, b), FX_OK);
    CHECK_STATUS(tensor_add(ref, tmp, bias), FX_OK);
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)(M * N));
    uint16_t *y = malloc(sizeof(uint16_t) * (size_t)(M * N));
    CHECK_STATUS(tensor_get_raw(out, x), FX_OK);
    CHECK_STATUS(tensor_get_raw(ref, y), FX_OK);
    CHECK(memcmp(x, y, sizeof(uint16_t) * (size_t)(M * N)) == 0,
          "%s: %s %lld x %lld x %lld: fx_matmul_bias differs from tensor_matmul + tensor_add",
          where, fmt_name(f), (long long)M, (long long)N, (long long)K);
    /* the conversion in the GEMM off: the dispatcher's separate add, the same bits */
    fx_gemm_h16_set_enabled(0);
    CHECK_STATUS(fx_matmul_bias(out, a, b, bias), FX_OK);
    fx_gemm_h16_set_enabled(1);
    CHECK_STATUS(tensor_get_raw(out, x), FX_OK);
    CHECK(memcmp(x, y, sizeof(uint16_t) * (size_t)(M * N)) == 0,
          "%s: %s %lld x %lld x %lld: fx_matmul_bias without the GEMM's conversion differs",
          where, fmt_name(f), (long long)M, (long long)N, (long long)K);
    free(x);
    free(y);
    free(bv);
    tensor_free(a);
    tensor_free(b);
    tensor_free(bias);
    tensor_free(out);
    tensor_free(tmp);
    tensor_free(ref);
}

/* A bias of the wrong shape: FX_ESHAPE, naming it, and the output untouched. */
static void bias_bad_shape(void)
{
    test_rng g;
    test_rng_seed(&g, 9);
    tensor_t *a = filled(FMT_BF16, 8, 4, &g, 0), *b = filled(FMT_BF16, 4, 6, &g, 0);
    const int64_t os[2] = {8, 6}, bs[1] = {5};
    tensor_t *out = filled(FMT_BF16, 8, 6, &g, 0), *bias = tensor_new(FMT_BF16, 1, bs);
    uint16_t x0[48], x1[48];
    CHECK_STATUS(tensor_get_raw(out, x0), FX_OK);
    CHECK_STATUS(fx_matmul_bias(out, a, b, bias), FX_ESHAPE);
    CHECK(strstr(flexpoint_last_error(), "bias") != NULL, "message '%s' does not name the bias",
          flexpoint_last_error());
    CHECK_STATUS(fx_matmul_bias(out, a, b, NULL), FX_EINVAL);
    CHECK_STATUS(tensor_get_raw(out, x1), FX_OK);
    CHECK(memcmp(x0, x1, sizeof x0) == 0, "a refused fx_matmul_bias wrote into out");
    (void)os;
    tensor_free(a);
    tensor_free(b);
    tensor_free(out);
    tensor_free(bias);
}

static void all_shapes(const char *where)
{
    /* {13, 300, 800}: a depth of three blocks whose last row panel ends C (a conversion that
     * read a whole tile width of C's rows ran past C's end there) */
    static const int64_t shapes[][3] = {{1, 1, 1},     {37, 45, 5},   {130, 70, 400},
                                        {20, 645, 33}, {300, 40, 64}, {64, 6, 128},
                                        {129, 257, 129}, {13, 300, 800}};
    for (int threads = 1; threads <= 2; threads++) {
        flexpoint_set_num_threads(threads);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
            compare(FMT_BF16, FMT_BF16, M, N, K, 0, where);
            compare(FMT_FP16, FMT_FP16, M, N, K, 0, where);
            compare(FMT_FP32, FMT_BF16, M, N, K, 0, where);
        }
        compare(FMT_BF16, FMT_BF16, 70, 90, 48, 1, where);
        compare(FMT_FP16, FMT_FP16, 70, 90, 400, 1, where);
        bmm_compare(FMT_BF16, FMT_BF16, 8, 37, 45, 32, 1, where);
        bmm_compare(FMT_FP16, FMT_FP16, 3, 20, 70, 400, 0, where);
        bmm_compare(FMT_FP32, FMT_BF16, 5, 33, 17, 9, 1, where);
        for (int f = 0; f < 2; f++) {
            const fmt_t hf = f ? FMT_BF16 : FMT_FP16;
            bias_compare(hf, 37, 45, 5, where);
            bias_compare(hf, 130, 70, 400, where);
            bias_compare(hf, 300, 512, 128, where); /* the transformer's fc, fewer rows */
            /* bf16 on dpbf16: the tiles that read A in place and round with the bias, and a
             * partial column tile beside them that goes through the L1 tile */
            bias_compare(hf, 60, 100, 64, where);
            bias_compare(hf, 1, 1, 1, where);
        }
    }
    flexpoint_set_num_threads(0);
}

int main(void)
{
    char keep[32];
    snprintf(keep, sizeof keep, "%s", flexpoint_backend());
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        const char *name = flexpoint_backend_name(bi);
        CHECK_STATUS(flexpoint_set_backend(name), FX_OK);
        if (!strcmp(name, "avx512")) {
            char chosen[64]; /* the route in use, set again afterwards */
            snprintf(chosen, sizeof chosen, "%s", flexpoint_kernel_name("matmul", FMT_BF16));
            static const char *const routes[] = {"widen", "dpbf16", "amx"};
            for (int r = 0; r < 3; r++) {
                if (flexpoint_set_kernel("matmul", FMT_BF16, routes[r]) != FX_OK) continue;
                char where[64];
                snprintf(where, sizeof where, "avx512, bf16 route %s", routes[r]);
                all_shapes(where);
            }
            CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_BF16, chosen), FX_OK);
        } else {
            all_shapes(name);
        }
    }
    CHECK_STATUS(flexpoint_set_backend(keep), FX_OK);
    strided_output_keeps_stage();
    bias_bad_shape();
    CHECK(bias_taken > bias_cases / 2, "the bias was added in the GEMM in only %d of %d products",
          bias_taken, bias_cases);
    CHECK(taken_cases > cases / 2, "the GEMM's conversion was taken in only %d of %d products",
          taken_cases, cases);
    printf("test_gemm_h16: %d products into fp16/bf16, %d of them converted in the GEMM, the "
           "stage's bits\n", cases, taken_cases);
    return test_finish("test_gemm_h16");
}
