/* flexpoint_gemm_i16_stats: the exact int16 GEMM's counts of fast and any-data units (tile x
 * K block), the pairs they ran, and the fast units' int32 chains, on every SIMD level. One K
 * block (K = 256, 128 pairs) so that each unit runs all 128 pairs, the fast kernel forced to
 * take the norm test on every tile (no AMX, no size gates), and data whose norms decide the
 * route exactly:
 *  - small values (|v| <= 300): every unit fast, in one chain;
 *  - every value 11585: a segment's bound 46340^2 = 2^31 - 88,048 just passes, so every unit is
 *    fast with chains of one segment (8 pairs), 16 chains per unit;
 *  - full-range values: no segment passes, every unit on an any-data kernel.
 * The products are checked against the exact sums too, and a NULL argument is refused.
 * Skips (77) on a CPU with neither AVX2 nor AVX-512. */
#include "flexpoint.h"
#include "core/backend.h"
#include "flex/gemm_i16.h"
#include "testutil.h"

#include <stdlib.h>

enum { M = 64, K = 256, N = 64, PAIRS = K / 2 };
enum { SMALL, EDGE, FULL, KINDS };

static int16_t value_of(test_rng *r, int kind)
{
    switch (kind) {
    case SMALL: return (int16_t)test_rng_range(r, -300, 300);
    case EDGE: return 11585;
    default: return (int16_t)test_rng_range(r, -32767, 32767);
    }
}

/* Run one product of the kind on backend be; the counts' increase into d. */
static void run_kind(const fx_backend *be, int kind, test_rng *r, flexpoint_gemm_i16_stats_t *d)
{
    int16_t *A = malloc(sizeof(int16_t) * M * K), *B = malloc(sizeof(int16_t) * K * N);
    int64_t *got = malloc(sizeof(int64_t) * M * N), *want = malloc(sizeof(int64_t) * M * N);
    if (!A || !B || !got || !want) {
        CHECK(0, "allocation");
        free(A), free(B), free(got), free(want);
        return;
    }
    for (int i = 0; i < M * K; i++) A[i] = value_of(r, kind);
    for (int i = 0; i < K * N; i++) B[i] = value_of(r, kind);
    test_ref_matmul_i16(A, B, M, K, N, want);
    fx_op_call c;
    int exp = 0;
    test_i16_matmul_call(&c, A, 0, B, 0, M, K, N, got, &exp, 2);
    flexpoint_gemm_i16_stats_t s0, s1;
    CHECK_STATUS(flexpoint_gemm_i16_stats(&s0), FX_OK);
    CHECK_STATUS(be->kernels[FX_OP_MATMUL][FMT_FLEX16_5](&c), FX_OK);
    CHECK_STATUS(flexpoint_gemm_i16_stats(&s1), FX_OK);
    int bad = 0;
    for (int i = 0; i < M * N && !bad; i++)
        if (got[i] != want[i]) {
            CHECK(0, "%s kind %d: output %d is %lld, want %lld", be->name, kind, i,
                  (long long)got[i], (long long)want[i]);
            bad = 1;
        }
    d->fast_tiles = s1.fast_tiles - s0.fast_tiles;
    d->anydata_tiles = s1.anydata_tiles - s0.anydata_tiles;
    d->fast_pairs = s1.fast_pairs - s0.fast_pairs;
    d->anydata_pairs = s1.anydata_pairs - s0.anydata_pairs;
    d->fast_chains = s1.fast_chains - s0.fast_chains;
    free(A), free(B), free(got), free(want);
}

int main(void)
{
    test_rng r;
    test_rng_seed(&r, 20261127);
    CHECK_STATUS(flexpoint_gemm_i16_stats(NULL), FX_EINVAL);
    int levels = 0;
    for (int lvl = FX_BACKEND_AVX2; lvl < FX_BACKEND_COUNT; lvl++) {
        if (!flexpoint_backend_available(lvl)) continue;
        const fx_backend *be = fx_backend_get(lvl);
        CHECK_STATUS(flexpoint_set_backend(be->name), FX_OK);
        CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_FLEX16_5, "fast"), FX_OK);
        levels++;
        for (int kind = 0; kind < KINDS; kind++) {
            flexpoint_gemm_i16_stats_t d;
            run_kind(be, kind, &r, &d);
            const int64_t units = d.fast_tiles + d.anydata_tiles;
            CHECK(units > 0, "%s kind %d: no units counted", be->name, kind);
            CHECK(d.fast_pairs == d.fast_tiles * PAIRS && d.anydata_pairs == d.anydata_tiles * PAIRS,
                  "%s kind %d: pairs %lld / %lld for %lld / %lld units of %d pairs", be->name,
                  kind, (long long)d.fast_pairs, (long long)d.anydata_pairs,
                  (long long)d.fast_tiles, (long long)d.anydata_tiles, PAIRS);
            if (kind == FULL)
                CHECK(d.fast_tiles == 0 && d.fast_chains == 0,
                      "%s full-range data: %lld fast units, %lld chains", be->name,
                      (long long)d.fast_tiles, (long long)d.fast_chains);
            else
                CHECK(d.anydata_tiles == 0 &&
                          d.fast_chains == d.fast_tiles * (kind == SMALL ? 1 : PAIRS / 8),
                      "%s kind %d: %lld any-data units, %lld chains over %lld fast units",
                      be->name, kind, (long long)d.anydata_tiles, (long long)d.fast_chains,
                      (long long)d.fast_tiles);
        }
        CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_FLEX16_5, "auto"), FX_OK);
    }
    if (levels == 0) return test_skip("test_gemm_i16_stats", "no AVX2 or AVX-512 on this CPU");
    return test_finish("test_gemm_i16_stats");
}
