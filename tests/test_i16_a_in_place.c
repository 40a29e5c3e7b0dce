/* The exact int16 GEMM's fast kernels reading A where it lies (fx_gemm_i16_kernel.fast_rows
 * and fast_round_rows, src/flex/gemm_i16.c) against the same products with every A micro-panel
 * packed (fx_gemm_i16_a_in_place_set_enabled(0)).
 *
 * The driver's own products (int64 sums), on every SIMD level, with the fast kernel taking the
 * norm test on every tile: the sums against the exact reference both ways, the same counts of
 * fast and any-data units and of int32 chains both ways (so the norms taken from the rows are
 * the packing's, to the unit: every value 11585 puts each segment's bound 88,048 below the
 * chain limit, so a norm one too large would halve the chains), for
 *  - Gaussian mantissas (fast tiles), Gaussian with a few full-range rows and columns (tiles of
 *    both kinds in one product: the any-data tiles pack their panel on demand), every value
 *    11585, and full-range mantissas (no fast tile);
 *  - rows that are not whole panels of six (the last one is packed), columns that are not
 *    whole tiles, depths of one pair, one block, and several blocks in one group, one and two
 *    threads;
 *  - the products the route leaves alone: an odd depth, more than 32 columns, a transposed A;
 * and the route counted where it applies and not where it does not.
 * Then FLEX16_5 and DFP16 tensors (tensor_matmul and tensor_bmm, the attention's shapes), whose
 * tiles round their own sums (fast_round_rows): the same bits and exponent both ways. */
#include "flexpoint.h"
#include "core/backend.h"
#include "core/shared_matmul.h"
#include "flex/flex_kernels.h"
#include "flex/gemm_i16.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

enum { GAUSS, MIXED, EDGE, FULL, KINDS };
static const char *const KIND_NAMES[KINDS] = {"gaussian", "gaussian with full-range rows",
                                              "every value 11585", "full-range"};

static int16_t clamp16(double v)
{
    return (int16_t)(v > 32767 ? 32767 : v < -32767 ? -32767 : v);
}

/* x (rows x cols, row stride ld) of the kind; MIXED makes every every_row-th row (A) or
 * every every_col-th column (B) full range, so that the tiles that meet both fail the norm
 * test and the rest pass */
static void fill(int16_t *x, int64_t rows, int64_t cols, int64_t ld, int kind, int every_row,
                 int every_col, test_rng *r)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            int16_t v;
            const int wide = (every_row && i % every_row == every_row - 1) ||
                             (every_col && j % every_col == every_col - 1);
            if (kind == EDGE) v = 11585;
            else if (kind == FULL || (kind == MIXED && wide))
                v = (int16_t)test_rng_range(r, -32767, 32767);
            else v = clamp16(2500.0 * test_rng_normal(r));
            x[i * ld + j] = v;
        }
}

typedef struct {
    flexpoint_gemm_i16_stats_t s;
    int64_t in_place;
} run_counts;

/* one product of the driver, A transposed (read through strides) or not, the route on or off:
 * the sums checked against want, the counts' increase into *d */
static void run_driver(fx_kernel k, int16_t *A, int ta, int16_t *B, int64_t M,
                       int64_t K, int64_t N, const int64_t *want, int threads, int on,
                       run_counts *d, const char *what)
{
    int64_t *got = malloc(sizeof(int64_t) * (size_t)(M * N));
    fx_op_call c;
    int exp = 0;
    test_i16_matmul_call(&c, A, 0, B, 0, M, K, N, got, &exp, threads);
    if (ta) { /* A holds A^T row-major: read [M, K] through strides (1, M) */
        c.in[0].strides[0] = 1;
        c.in[0].strides[1] = M;
    }
    fx_gemm_i16_a_in_place_set_enabled(on);
    flexpoint_gemm_i16_stats_t s0, s1;
    CHECK_STATUS(flexpoint_gemm_i16_stats(&s0), FX_OK);
    const int64_t t0 = fx_gemm_i16_a_in_place_tiles();
    CHECK_STATUS(k(&c), FX_OK);
    d->in_place = fx_gemm_i16_a_in_place_tiles() - t0;
    CHECK_STATUS(flexpoint_gemm_i16_stats(&s1), FX_OK);
    fx_gemm_i16_a_in_place_set_enabled(1);
    d->s.fast_tiles = s1.fast_tiles - s0.fast_tiles;
    d->s.anydata_tiles = s1.anydata_tiles - s0.anydata_tiles;
    d->s.fast_chains = s1.fast_chains - s0.fast_chains;
    int64_t bad = -1;
    for (int64_t i = 0; i < M * N && bad < 0; i++)
        if (got[i] != want[i]) bad = i;
    CHECK(bad < 0, "%s, A %s: sum %lld is %lld, want %lld", what, on ? "in place" : "packed",
          (long long)bad, bad < 0 ? 0LL : (long long)got[bad], bad < 0 ? 0LL : (long long)want[bad]);
    free(got);
}

static void driver_case(const char *name, fx_kernel k, int64_t M, int64_t N, int64_t K, int ta,
                        int kind, int threads, int expect, test_rng *r)
{
    int16_t *A = malloc(sizeof(int16_t) * (size_t)(M * K));
    int16_t *At = malloc(sizeof(int16_t) * (size_t)(M * K));
    int16_t *B = malloc(sizeof(int16_t) * (size_t)(K * N));
    int64_t *want = malloc(sizeof(int64_t) * (size_t)(M * N));
    fill(A, M, K, K, kind, 7, 0, r);
    fill(B, K, N, N, kind, 0, 13, r);
    for (int64_t i = 0; i < M; i++)
        for (int64_t p = 0; p < K; p++) At[p * M + i] = A[i * K + p];
    test_ref_matmul_i16(A, B, M, K, N, want);
    char what[160];
    snprintf(what, sizeof what, "%s: %lld x %lld x %lld%s, %s, %d thread(s)", name,
             (long long)M, (long long)N, (long long)K, ta ? ", A transposed" : "",
             KIND_NAMES[kind], threads);
    run_counts on, off;
    run_driver(k, ta ? At : A, ta, B, M, K, N, want, threads, 1, &on, what);
    run_driver(k, ta ? At : A, ta, B, M, K, N, want, threads, 0, &off, what);
    CHECK(on.s.fast_tiles == off.s.fast_tiles && on.s.anydata_tiles == off.s.anydata_tiles &&
              on.s.fast_chains == off.s.fast_chains,
          "%s: A in place took %lld fast units (%lld chains) and %lld any-data ones, packed "
          "%lld (%lld) and %lld: the norms differ",
          what, (long long)on.s.fast_tiles, (long long)on.s.fast_chains,
          (long long)on.s.anydata_tiles, (long long)off.s.fast_tiles,
          (long long)off.s.fast_chains, (long long)off.s.anydata_tiles);
    CHECK(off.in_place == 0, "%s: the route ran while switched off", what);
    /* where the route applies, the fast units of whole panels read in place (full-range data
     * has none, but for one pair, whose two products always pass the norm test) */
    const int want_some = expect && on.s.fast_tiles > 0;
    CHECK(want_some ? on.in_place > 0 && on.in_place <= on.s.fast_tiles : on.in_place == 0,
          "%s: %lld units read A in place of %lld fast ones, expected %s", what,
          (long long)on.in_place, (long long)on.s.fast_tiles, want_some ? "some" : "none");
    if (kind == MIXED && K > 2)
        CHECK(on.s.fast_tiles > 0 && on.s.anydata_tiles > 0,
              "%s: %lld fast and %lld any-data units, wanted both", what,
              (long long)on.s.fast_tiles, (long long)on.s.anydata_tiles);
    free(A), free(At), free(B), free(want);
}

static void driver_cases(const char *name, fx_kernel k, int can, test_rng *r)
{
    for (int threads = 1; threads <= 2; threads++)
        for (int kind = 0; kind < KINDS; kind++) {
            driver_case(name, k, 37, 29, 32, 0, kind, threads, can, r);   /* partial panels */
            driver_case(name, k, 60, 32, 128, 0, kind, threads, can, r);  /* whole tiles */
            driver_case(name, k, 130, 17, 384, 0, kind, threads, can, r); /* one whole block */
            driver_case(name, k, 96, 32, 1000, 0, kind, threads, can, r); /* three blocks */
            driver_case(name, k, 31, 30, 2, 0, kind, threads, can, r);    /* one pair */
            /* left alone: odd depth, more than 32 columns, a transposed A */
            driver_case(name, k, 37, 29, 33, 0, kind, threads, 0, r);
            driver_case(name, k, 60, 33, 128, 0, kind, threads, 0, r);
            driver_case(name, k, 70, 30, 48, 1, kind, threads, 0, r);
        }
}

/* raw mantissas and exponent of out = a b (2-D) or bmm(a, b^T if tb) (3-D) of fmt tensors,
 * written three times (the exponent guesses of the later writes are steady), the route on or
 * off; the rounding tiles' count over the writes into *rounded */
static void tensor_run(fmt_t fmt, int64_t B, int64_t M, int64_t N, int64_t K, int tb, int on,
                       uint64_t seed, int16_t *raw, int *exp, int64_t *rounded,
                       int64_t *in_place)
{
    test_rng g;
    test_rng_seed(&g, seed);
    const int batched = B > 0;
    const int64_t sa[3] = {B, M, K}, sb[3] = {B, tb ? N : K, tb ? K : N}, so[3] = {B, M, N};
    tensor_t *a = tensor_new(fmt, batched ? 3 : 2, sa + !batched);
    tensor_t *b = tensor_new(fmt, batched ? 3 : 2, sb + !batched);
    tensor_t *out = tensor_new(fmt, batched ? 3 : 2, so + !batched);
    test_fill_normal(a, 1.0, &g);
    test_fill_normal(b, 1.0, &g);
    fx_gemm_i16_a_in_place_set_enabled(on);
    const int64_t r0 = fx_gemm_i16_rounded_tiles(), t0 = fx_gemm_i16_a_in_place_tiles();
    for (int w = 0; w < 3; w++)
        CHECK_STATUS(batched ? tensor_bmm(out, a, b, 0, tb) : tensor_matmul(out, a, b), FX_OK);
    *rounded = fx_gemm_i16_rounded_tiles() - r0;
    *in_place = fx_gemm_i16_a_in_place_tiles() - t0;
    fx_gemm_i16_a_in_place_set_enabled(1);
    CHECK_STATUS(tensor_get_raw(out, raw), FX_OK);
    *exp = tensor_exp(out);
    tensor_free(a);
    tensor_free(b);
    tensor_free(out);
}

static void tensor_case(fmt_t fmt, int64_t B, int64_t M, int64_t N, int64_t K, int tb, int can)
{
    const int64_t n = (B > 0 ? B : 1) * M * N;
    int16_t *on = malloc(sizeof(int16_t) * (size_t)n), *off = malloc(sizeof(int16_t) * (size_t)n);
    int e_on = 0, e_off = 0;
    int64_t r_on = 0, r_off = 0, t_on = 0, t_off = 0;
    const uint64_t seed = (uint64_t)(B * 131 + M * 17 + N * 7 + K);
    tensor_run(fmt, B, M, N, K, tb, 1, seed, on, &e_on, &r_on, &t_on);
    tensor_run(fmt, B, M, N, K, tb, 0, seed, off, &e_off, &r_off, &t_off);
    CHECK(memcmp(on, off, sizeof(int16_t) * (size_t)n) == 0 && e_on == e_off,
          "%s %s%lld x %lld x %lld: A read in place gives other mantissas or exponent (%d, %d) "
          "than A packed", fmt_name(fmt), B > 0 ? "batched " : "", (long long)M, (long long)N,
          (long long)K, e_on, e_off);
    CHECK(t_off == 0, "%s: the route ran while switched off", fmt_name(fmt));
    /* FLEX16_5's tiles round their own sums (DFP16's may take the int64 route instead, as
     * under FLEXPOINT_TEST_DEFER_HOST, where its exponent guesses come later); either way the
     * fast tiles read A in place */
    if (can) {
        CHECK(fmt == FMT_DFP16 || r_on > 0, "%s %lld x %lld x %lld: no tile rounded its sums",
              fmt_name(fmt), (long long)M, (long long)N, (long long)K);
        CHECK(t_on > 0, "%s %lld x %lld x %lld: no unit read A in place (%lld rounding tiles)",
              fmt_name(fmt), (long long)M, (long long)N, (long long)K, (long long)r_on);
    } else
        CHECK(t_on == 0, "%s %lld x %lld x %lld: %lld units read A in place where the route "
              "does not apply", fmt_name(fmt), (long long)M, (long long)N, (long long)K,
              (long long)t_on);
    free(on);
    free(off);
}

int main(void)
{
    test_rng r;
    test_rng_seed(&r, 20261207);
    char keep[32];
    snprintf(keep, sizeof keep, "%s", flexpoint_backend());
    int levels = 0;
    for (int lvl = FX_BACKEND_AVX2; lvl < FX_BACKEND_COUNT; lvl++) {
        if (!flexpoint_backend_available(lvl)) continue;
        const fx_backend *be = fx_backend_get(lvl);
        CHECK_STATUS(flexpoint_set_backend(be->name), FX_OK);
        levels++;
        /* the AVX-512 level has the kernels (its 6 x 32 tile); AVX2 must never take the route */
        const int can = lvl == FX_BACKEND_AVX512;
        CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_FLEX16_5, "fast"), FX_OK);
        driver_cases(be->name, be->kernels[FX_OP_MATMUL][FMT_FLEX16_5], can, &r);
        /* the AVX-512 level's kernels without VNNI (vpmaddwd + vpaddd), on a CPU that has it */
        if (lvl == FX_BACKEND_AVX512 && be->kernels[FX_OP_MATMUL][FMT_FLEX16_5] !=
                                            fx_flex_matmul_avx512bw)
            driver_cases("avx512bw", fx_flex_matmul_avx512bw, 1, &r);
        CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_FLEX16_5, "auto"), FX_OK);
        /* the tensors' route: outputs rounded in cache even when small */
        fx_shared_matmul_set_sizes(1, 0);
        for (int threads = 1; threads <= 2; threads++) {
            flexpoint_set_num_threads(threads);
            for (int f = 0; f < 2; f++) {
                const fmt_t fmt = f ? FMT_DFP16 : FMT_FLEX16_5;
                tensor_case(fmt, 0, 300, 32, 128, 0, can);
                tensor_case(fmt, 0, 97, 20, 256, 0, can);
                /* attention: p v (K = 128, N = 32), and left alone, 128 columns: q k^T */
                tensor_case(fmt, 8, 128, 32, 128, 0, can);
                tensor_case(fmt, 8, 128, 128, 32, 1, 0);
                tensor_case(fmt, 0, 50, 33, 64, 0, 0);
            }
        }
        flexpoint_set_num_threads(0);
        fx_shared_matmul_set_sizes(0, 0);
    }
    CHECK_STATUS(flexpoint_set_backend(keep), FX_OK);
    if (levels == 0) return test_skip("test_i16_a_in_place", "no AVX2 or AVX-512 on this CPU");
    return test_finish("test_i16_a_in_place");
}
