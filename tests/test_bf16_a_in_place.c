/* bf16 products whose A the vdpbf16ps kernel reads where it lies (fx_bf16_pair_kernels.dot_rows
 * and dot_rows_bf16, src/fp32/f32_gemm.c) against the same products with every A panel packed
 * (fx_f32_gemm_a_in_place_set_enabled(0)): the same bits, into fp32 (tensor_matmul of bf16
 * operands into an fp32 output) and into bf16 (rounded in the kernel), batched (tensor_bmm, the
 * attention's products: scores q k^T and the weighted values p v) and not.
 *
 * Covered, on the avx512 backend's dpbf16 route where the CPU has AVX512_BF16 (elsewhere the
 * test says so and checks that the route is never taken):
 * - rows that are not whole panels of six (the last panel is packed), columns that are not
 *   whole tiles of 32 (their panel is packed on demand for the scratch tile), one and two
 *   threads;
 * - data whose exponents keep some panels off vdpbf16ps (a tiny row: the exact chain, from a
 *   panel packed on demand), NaN (one with a payload, which the rounding must drop) and Inf
 *   among the operands;
 * - the products the route leaves alone: an odd depth, a depth of more than one block, a
 *   transposed A, a bias added in the conversion;
 * and that the route ran where it applies and not where it does not. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "fp32/f32_kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void fill(tensor_t *t, test_rng *g, int specials)
{
    const int64_t n = tensor_numel(t);
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = (float)test_rng_normal(g);
    if (specials && n > 40) {
        v[5] = NAN;
        v[17] = INFINITY;
        /* a row of tiny values (exponents far below the rest): its panel's key keeps it off
         * vdpbf16ps, which flushes products below fp32's normal range */
        for (int64_t i = 24; i < 40 && i < n; i++) v[i] = 1e-30f * (float)(i - 31);
    }
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    free(v);
    if (specials && n > 40) {
        /* a NaN with a payload, which vdpbf16ps carries into its sums and vcvtneps2bf16
         * would keep, where the definition's rounding drops it */
        uint16_t *raw = malloc(sizeof(uint16_t) * (size_t)n);
        CHECK_STATUS(tensor_get_raw(t, raw), FX_OK);
        raw[41] = 0x7FA5;
        CHECK_STATUS(tensor_set_raw(t, raw), FX_OK);
        free(raw);
    }
}

/* raw bytes of out = a b (2-D) or bmm(a, b^T if tb) (3-D), with the route on or off */
static void run(fmt_t fout, int batched, int64_t B, int64_t M, int64_t N, int64_t K, int ta,
                int tb, int on, int specials, uint64_t seed, void *raw, int64_t *tiles)
{
    test_rng g;
    test_rng_seed(&g, seed);
    tensor_t *a, *b, *out;
    if (batched) {
        const int64_t sa[3] = {B, M, K}, sb[3] = {B, tb ? N : K, tb ? K : N}, so[3] = {B, M, N};
        a = tensor_new(FMT_BF16, 3, sa);
        b = tensor_new(FMT_BF16, 3, sb);
        out = tensor_new(fout, 3, so);
    } else {
        const int64_t sa[2] = {ta ? K : M, ta ? M : K}, sb[2] = {K, N}, so[2] = {M, N};
        a = tensor_new(FMT_BF16, 2, sa);
        b = tensor_new(FMT_BF16, 2, sb);
        out = tensor_new(fout, 2, so);
    }
    fill(a, &g, specials);
    fill(b, &g, 0);
    fx_f32_gemm_a_in_place_set_enabled(on);
    const int64_t t0 = fx_f32_gemm_a_in_place_tiles();
    if (batched) {
        CHECK_STATUS(tensor_bmm(out, a, b, 0, tb), FX_OK);
    } else {
        tensor_t *av = ta ? tensor_view_transpose(a, 0, 1) : a;
        CHECK_STATUS(tensor_matmul(out, av, b), FX_OK);
        if (ta) tensor_free(av);
    }
    *tiles = fx_f32_gemm_a_in_place_tiles() - t0;
    fx_f32_gemm_a_in_place_set_enabled(1);
    CHECK_STATUS(tensor_get_raw(out, raw), FX_OK);
    tensor_free(a);
    tensor_free(b);
    tensor_free(out);
}

/* one product with the route on and off: the same bytes; the route taken as expected */
static void compare(fmt_t fout, int batched, int64_t B, int64_t M, int64_t N, int64_t K, int ta,
                    int tb, int specials, int expect, const char *where)
{
    const int64_t n = B * M * N;
    const size_t bytes = (size_t)n * (fout == FMT_FP32 ? 4 : 2);
    void *on = malloc(bytes), *off = malloc(bytes);
    int64_t t_on = 0, t_off = 0;
    const uint64_t seed = (uint64_t)(B * 131 + M * 17 + N * 7 + K + 1000 * specials);
    run(fout, batched, B, M, N, K, ta, tb, 1, specials, seed, on, &t_on);
    run(fout, batched, B, M, N, K, ta, tb, 0, specials, seed, off, &t_off);
    CHECK(memcmp(on, off, bytes) == 0,
          "%s: %s%lld x %lld x %lld into %s%s%s%s: A read in place gives other bits than A packed",
          where, batched ? "batched " : "", (long long)M, (long long)N, (long long)K,
          fmt_name(fout), ta ? ", A transposed" : "", tb ? ", b transposed" : "",
          specials ? ", tiny rows and NaN/Inf" : "");
    CHECK(t_off == 0, "%s: the route ran while switched off", where);
    CHECK(expect ? t_on > 0 : t_on == 0, "%s: %lld x %lld x %lld: %lld tiles read A in place, "
          "expected %s", where, (long long)M, (long long)N, (long long)K, (long long)t_on,
          expect ? "some" : "none");
    free(on);
    free(off);
}

static void all_cases(int can, const char *where)
{
    for (int threads = 1; threads <= 2; threads++) {
        flexpoint_set_num_threads(threads);
        for (int f = 0; f < 2; f++) {
            const fmt_t fout = f ? FMT_BF16 : FMT_FP32;
            for (int sp = 0; sp < 2; sp++) {
                compare(fout, 0, 1, 37, 45, 32, 0, 0, sp, can, where);   /* partial panels */
                compare(fout, 0, 1, 60, 64, 128, 0, 0, sp, can, where);  /* whole tiles */
                compare(fout, 0, 1, 130, 70, 512, 0, 0, sp, can, where); /* a whole block */
                compare(fout, 0, 1, 13, 300, 2, 0, 0, sp, can, where);   /* depth 2 */
                /* attention: scores q k^T (K = 32) and p v (K = 128, N = 32) */
                compare(fout, 1, 8, 128, 128, 32, 0, 1, sp, can, where);
                compare(fout, 1, 8, 128, 32, 128, 0, 0, sp, can, where);
                compare(fout, 1, 3, 20, 45, 16, 0, 0, sp, can, where);
                /* left alone: odd depth, two depth blocks, a transposed A */
                compare(fout, 0, 1, 37, 45, 33, 0, 0, sp, 0, where);
                compare(fout, 0, 1, 30, 64, 800, 0, 0, sp, 0, where);
                compare(fout, 0, 1, 30, 64, 514, 0, 0, sp, 0, where); /* one pair past */
                compare(fout, 0, 1, 70, 90, 48, 1, 0, sp, 0, where);
            }
        }
    }
    flexpoint_set_num_threads(0);
}

int main(void)
{
    char keep[32];
    snprintf(keep, sizeof keep, "%s", flexpoint_backend());
    int ran = 0;
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        const char *name = flexpoint_backend_name(bi);
        CHECK_STATUS(flexpoint_set_backend(name), FX_OK);
        if (!strcmp(name, "avx512")) {
            char chosen[64];
            snprintf(chosen, sizeof chosen, "%s", flexpoint_kernel_name("matmul", FMT_BF16));
            if (flexpoint_set_kernel("matmul", FMT_BF16, "dpbf16") == FX_OK) {
                all_cases(1, "avx512, bf16 route dpbf16");
                ran = 1;
            }
            /* the other routes have no pair kernels: never in place */
            if (flexpoint_set_kernel("matmul", FMT_BF16, "widen") == FX_OK)
                all_cases(0, "avx512, bf16 route widen");
            CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_BF16, chosen), FX_OK);
        } else {
            all_cases(0, name);
        }
    }
    CHECK_STATUS(flexpoint_set_backend(keep), FX_OK);
    if (!ran) printf("test_bf16_a_in_place: this CPU has no AVX512_BF16; the route was checked "
                     "to stay off\n");
    return test_finish("test_bf16_a_in_place");
}
