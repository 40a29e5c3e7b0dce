/* The int16 GEMM's output maximum (fx_op_call.out_imax, src/core/backend.h): every route of the
 * tile GEMM that finishes output values (the fast, split and wrap micro-kernels, forced in turn
 * with flexpoint_set_kernel on every SIMD level this machine runs) reports max |out| in
 * passing, and the write path trusts it instead of scanning the stage. Checked here, for each
 * level, forced kernel, data kind and thread count (1 and 2):
 *  - the int64 stage equals an int64 reference (the sums stay exact);
 *  - *out_imax_known is 1 and *out_imax equals a direct scan max |out[i]| of the stage, on
 *    shapes with edge tiles, K below, at and across the K blocking (FX_GEMM_I16_KC = 384, so
 *    K = 385, 800 and 1100 end on a partial K block; K = 1 and odd K leave half pairs), with A
 *    given as a matrix, as a transposed view and as rows on demand (fx_op_call.a_rows);
 *  - data: Gaussian-like mantissas (one-chain fast tiles), large Gaussian ones (fast tiles of
 *    several chains), constant operands at the fast kernel's chain limit (just below it: folds
 *    whose chains reach 2^31 - 32; just above it: no fast tile), full-range uniform ones (the
 *    any-data kernel), and the extremes -32768
 *    and 32767 with one sign pattern per product (every sum of magnitude K 2^30, the largest
 *    any route produces for its K: all negative, all positive, and mixed), where a maximum
 *    taken over the wrong lanes, rows, K block or sign would show;
 *  - the tile counters: forced split or wrap runs no fast tile, forced fast runs some on the
 *    Gaussian data (so each kernel's own maximum was checked);
 *  - a kernel that does not report (the scalar loop that the levels hand small products to
 *    does not) leaves *out_imax alone, and through the public API a flex16_5 matmul gives the
 *    scalar backend's output bits and exponent under every forced kernel. */
#include "flexpoint.h"
#include "core/backend.h"
#include "flex/gemm_i16.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { DATA_GAUSS, DATA_GAUSS_LARGE, DATA_FULL, DATA_EXTREME, DATA_CHAIN_EDGE, DATA_KINDS };
static const char *const data_names[DATA_KINDS] = {"gaussian", "large gaussian", "full-range",
                                                   "extreme", "chain edge"};

/* DATA_CHAIN_EDGE: constant operands A = x, B = y, for which Cauchy-Schwarz is tight: a full
 * norm segment (16 values) has nA nB = 16 x y, exactly its sum. Pattern 0: x y = 2^27 - 4097,
 * so 16 x y = FX_GEMM_I16_CHAIN_MAX - 16: fast chains of one segment, each starting from the
 * largest remainder a fold leaves (16 x y mod 2^16 = 65520 after the first), whose partial sums
 * reach 2^31 - 32. Pattern 1: x y = 2^27 - 2, 16 x y = 2^31 - 32, above FX_GEMM_I16_CHAIN_MAX:
 * no fast tile may run (a chain limit of 2^31 - 1 would take the fast kernel and its second
 * chain would wrap). */
static const int16_t chain_edge[2][2] = {{31351, 4281}, {24573, 5462}};
_Static_assert(31351 * 4281 == (1 << 27) - 4097 && 24573 * 5462 == (1 << 27) - 2,
               "chain-edge operands");

/* One mantissa of the given kind; for DATA_EXTREME, pattern picks the signs (0: A = -32768 and
 * B = 32767, every sum negative; 1: both -32768, every sum positive; 2: random signs). */
static int16_t value(test_rng *r, int kind, int pattern, int is_b)
{
    double v;
    switch (kind) {
    case DATA_GAUSS:
        v = 3000.0 * test_rng_normal(r);
        break;
    case DATA_GAUSS_LARGE:
        v = 9000.0 * test_rng_normal(r);
        break;
    case DATA_FULL:
        return (int16_t)test_rng_range(r, -32768, 32767);
    case DATA_CHAIN_EDGE:
        return chain_edge[pattern][is_b];
    default:
        if (pattern == 0) return is_b ? 32767 : -32768;
        if (pattern == 1) return -32768;
        return test_rng_u64(r) & 1 ? 32767 : -32768;
    }
    v = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
    return (int16_t)lrint(v);
}

/* a_rows source over a row-major M x K matrix (fx_op_call.a_rows) */
typedef struct rows_ctx {
    const int16_t *a;
    int64_t K;
} rows_ctx;

static void rows_of(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int16_t *dst,
                    int64_t ld)
{
    const rows_ctx *rc = ctx;
    for (int r = 0; r < m; r++) memcpy(dst + r * ld, rc->a + (i0 + r) * rc->K + k0, (size_t)kc * 2);
}

enum { A_MATRIX, A_TRANSPOSED, A_ROWS, A_SOURCES };

/* One product through level be's MATMUL kernel; returns the fast tiles it ran (-1: mismatch,
 * reported). */
static int64_t check_product(const fx_backend *be, const char *kname, int64_t M, int64_t K,
                             int64_t N, int kind, int pattern, int source, int threads,
                             uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    int16_t *A = malloc(sizeof(int16_t) * (size_t)(M * K));
    int16_t *At = malloc(sizeof(int16_t) * (size_t)(M * K));
    int16_t *B = malloc(sizeof(int16_t) * (size_t)(K * N));
    int64_t *want = malloc(sizeof(int64_t) * (size_t)(M * N));
    int64_t *got = malloc(sizeof(int64_t) * (size_t)(M * N));
    for (int64_t i = 0; i < M * K; i++) A[i] = value(&r, kind, pattern, 0);
    for (int64_t i = 0; i < K * N; i++) B[i] = value(&r, kind, pattern, 1);
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) At[k * M + i] = A[i * K + k];
    test_ref_matmul_i16(A, B, M, K, N, want);
    for (int64_t i = 0; i < M * N; i++) got[i] = 0x5A5A5A5A5A5A5A5ALL; /* stale stage values */

    fx_op_call c;
    memset(&c, 0, sizeof c);
    c.op = FX_OP_MATMUL;
    c.nin = 2;
    const fx_operand oa = {A, FMT_FLEX16_5, -3, 2, {M, K}, {K, 1}};
    const fx_operand oat = {At, FMT_FLEX16_5, -3, 2, {M, K}, {1, M}}; /* a transposed view */
    const fx_operand ob = {B, FMT_FLEX16_5, 5, 2, {K, N}, {N, 1}};
    c.in[0] = source == A_TRANSPOSED ? oat : oa;
    c.in[1] = ob;
    rows_ctx rc = {A, K};
    if (source == A_ROWS) {
        c.a_rows = rows_of;
        c.a_rows_ctx = &rc;
    }
    c.out_ndim = 2;
    c.out_shape[0] = M;
    c.out_shape[1] = N;
    c.out_numel = M * N;
    c.out_i64 = got;
    int exp = 0, known = 0;
    uint64_t imax = 0xDEADBEEFull;
    c.out_exp = &exp;
    c.out_imax = &imax;
    c.out_imax_known = &known;
    c.nthreads = threads;
    int64_t fast = 0, split = 0;
    fx_gemm_i16_reset_tile_counts();
    CHECK_STATUS(be->kernels[FX_OP_MATMUL][FMT_FLEX16_5](&c), FX_OK);
    fx_gemm_i16_tile_counts(&fast, &split);

    int64_t bad = -1;
    uint64_t scan = 0;
    for (int64_t i = 0; i < M * N; i++) {
        if (got[i] != want[i] && bad < 0) bad = i;
        const uint64_t m = got[i] < 0 ? 0u - (uint64_t)got[i] : (uint64_t)got[i];
        scan = m > scan ? m : scan;
    }
    static const char *const sources[A_SOURCES] = {"A matrix", "A transposed", "A rows"};
    CHECK(bad < 0 && exp == 2, "%s %s: %lldx%lldx%lld %s/%d, %s, %d threads: exp %d, first bad "
          "[%lld] %lld vs %lld", be->name, kname, (long long)M, (long long)K, (long long)N,
          data_names[kind], pattern, sources[source], threads, exp, (long long)bad,
          bad >= 0 ? (long long)got[bad] : 0LL, bad >= 0 ? (long long)want[bad] : 0LL);
    const int tiled = fast + split > 0;
    CHECK(known || !tiled, "%s %s: %lldx%lldx%lld %s/%d, %s, %d threads: out_imax_known %d "
          "with %lld tiles", be->name, kname, (long long)M, (long long)K, (long long)N,
          data_names[kind], pattern, sources[source], threads, known, (long long)(fast + split));
    if (known)
        CHECK(imax == scan, "%s %s: %lldx%lldx%lld %s/%d, %s, %d threads: out_imax %llu, scan "
              "%llu (%lld fast, %lld other tiles)", be->name, kname, (long long)M, (long long)K,
              (long long)N, data_names[kind], pattern, sources[source], threads,
              (unsigned long long)imax, (unsigned long long)scan, (long long)fast,
              (long long)split);
    else
        CHECK(imax == 0xDEADBEEFull, "%s %s: out_imax written without out_imax_known", be->name,
              kname);
    free(A);
    free(At);
    free(B);
    free(want);
    free(got);
    return bad < 0 ? fast : -1;
}

/* flex16_5 matmul output bits and exponent through the public API (the current backend); the
 * operands' scale puts the output's exact exponent in play. */
static void api_bits(uint16_t *out, int *exp)
{
    test_rng r;
    test_rng_seed(&r, 5);
    const int64_t sa[2] = {37, 420}, sb[2] = {420, 45}, sc[2] = {37, 45};
    float *v = malloc(sizeof(float) * 37 * 420), *w = malloc(sizeof(float) * 420 * 45);
    for (int i = 0; i < 37 * 420; i++) v[i] = (float)(test_rng_normal(&r) * 0.3);
    for (int i = 0; i < 420 * 45; i++) w[i] = (float)(-fabs(test_rng_normal(&r)) * 7.0);
    tensor_t *a = tensor_new(FMT_FLEX16_5, 2, sa), *b = tensor_new(FMT_FLEX16_5, 2, sb);
    tensor_t *c = tensor_new(FMT_FLEX16_5, 2, sc);
    CHECK_STATUS(tensor_from_f32(a, v), FX_OK);
    CHECK_STATUS(tensor_from_f32(b, w), FX_OK);
    CHECK_STATUS(tensor_matmul(c, a, b), FX_OK);
    CHECK_STATUS(tensor_get_raw(c, out), FX_OK);
    CHECK_STATUS(tensor_get_exp(c, exp), FX_OK);
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
    free(v);
    free(w);
}

int main(void)
{
    enum { OUT = 37 * 45 };
    static uint16_t ref[OUT], bits[OUT];
    int ref_exp = 0, exp = 0;
    CHECK_STATUS(flexpoint_set_backend("scalar"), FX_OK);
    api_bits(ref, &ref_exp);

    /* M x K x N: edge tiles in both directions, K = 1, odd K, K across the K blocks (384) */
    static const int64_t shapes[][3] = {{7, 33, 19},  {13, 1, 70},  {6, 64, 16},   {37, 129, 95},
                                        {20, 385, 37}, {9, 800, 33}, {25, 1100, 41}, {2, 7, 3}};
    int levels = 0;
    /* the AMX kernel exists where the AVX-512 level installed it (AMX-INT8 the OS allows) */
    const int amx_usable = flexpoint_backend_available(FX_BACKEND_AVX512) &&
                           fx_backend_get(FX_BACKEND_AVX512)->gemm.i16_amx;
    for (int lvl = FX_BACKEND_AVX2; lvl < FX_BACKEND_COUNT; lvl++) {
        if (!flexpoint_backend_available(lvl)) continue;
        const fx_backend *be = fx_backend_get(lvl);
        CHECK_STATUS(flexpoint_set_backend(be->name), FX_OK);
        levels++;
        for (int kk = 0; kk < FX_GEMM_I16_KERNELS; kk++) {
            const char *kname = fx_gemm_i16_kernel_name(kk);
            const int st = flexpoint_set_kernel("matmul", FMT_FLEX16_5, kname);
            if (kk == FX_GEMM_I16_KERNEL_WRAP && !fx_cpu()->avx512vnni) {
                CHECK_STATUS(st, FX_EUNSUPPORTED);
                continue;
            }
            if (kk == FX_GEMM_I16_KERNEL_AMX && !amx_usable) { /* refused, naming what is missing */
                CHECK_STATUS(st, FX_EUNSUPPORTED);
                CHECK(strstr(flexpoint_last_error(), "AMX-INT8") != NULL, "'%s'",
                      flexpoint_last_error());
                continue;
            }
            CHECK_STATUS(st, FX_OK);
            uint64_t seed = 7000u * (uint64_t)(lvl * 8 + kk);
            int64_t fast_gauss = 0, fast_edge = 0, fast_narrow = 0, fast_wide = 0;
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                for (int kind = 0; kind < DATA_KINDS; kind++)
                    for (int pattern = 0;
                         pattern < (kind == DATA_EXTREME ? 3 : kind == DATA_CHAIN_EDGE ? 2 : 1);
                         pattern++)
                        for (int source = 0; source < A_SOURCES; source++) {
                            if (source == A_ROWS && !be->gemm.i16_row_source) continue;
                            for (int threads = 1; threads <= 2; threads++) {
                                const int64_t fast =
                                    check_product(be, kname, shapes[s][0], shapes[s][1],
                                                  shapes[s][2], kind, pattern, source, threads,
                                                  seed++);
                                if (fast < 0) continue;
                                if (kk == FX_GEMM_I16_KERNEL_SPLIT || kk == FX_GEMM_I16_KERNEL_WRAP)
                                    CHECK(fast == 0, "%s forced %s: %lld fast tiles", be->name,
                                          kname, (long long)fast);
                                if (kind == DATA_GAUSS || kind == DATA_GAUSS_LARGE) {
                                    fast_gauss += fast;
                                    if (shapes[s][2] <= FX_GEMM_I16_NARROW_N)
                                        fast_narrow += fast;
                                    else
                                        fast_wide += fast;
                                }
                                if (kind == DATA_CHAIN_EDGE && pattern == 0) fast_edge += fast;
                                /* every K block must hold a whole segment: a block of one
                                 * pair (K 385 cut as 384 + 1 where blocks are not equal) has
                                 * x y below the limit and may run the fast kernel exactly */
                                if (kind == DATA_CHAIN_EDGE && pattern == 1 &&
                                    shapes[s][1] >= 2 * FX_GEMM_I16_SEG &&
                                    (shapes[s][1] % FX_GEMM_I16_KC == 0 ||
                                     shapes[s][1] % FX_GEMM_I16_KC >= 2 * FX_GEMM_I16_SEG))
                                    CHECK(fast == 0, "%s %s: %lld fast tiles above the chain "
                                          "limit (K %lld)", be->name, kname, (long long)fast,
                                          (long long)shapes[s][1]);
                            }
                        }
            /* the size gates let the norm test run on every product of >= 16 pairs per K
             * block, and Gaussian data pass it: auto takes the fast kernel on both the wide
             * and the narrow tile (AVX-512's 6 x 16 tile for N <= 16) */
            if (kk == FX_GEMM_I16_KERNEL_AUTO) {
                CHECK(fast_narrow > 0, "%s auto: no fast tile on Gaussian data with N <= %d",
                      be->name, FX_GEMM_I16_NARROW_N);
                CHECK(fast_wide > 0, "%s auto: no fast tile on Gaussian data with N > %d",
                      be->name, FX_GEMM_I16_NARROW_N);
            }
            if (kk == FX_GEMM_I16_KERNEL_FAST) {
                CHECK(fast_gauss > 0, "%s forced fast: no fast tile on Gaussian data", be->name);
                CHECK(fast_edge > 0, "%s forced fast: no fast tile just below the chain limit",
                      be->name);
            }
            api_bits(bits, &exp);
            CHECK(memcmp(bits, ref, sizeof bits) == 0 && exp == ref_exp,
                  "%s forced %s: matmul bits or exponent (%d, scalar %d) differ from the scalar "
                  "backend's", be->name, kname, exp, ref_exp);
        }
        CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_FLEX16_5, "auto"), FX_OK);
    }
    if (levels == 0) return test_skip("test_gemm_imax", "no SIMD level on this CPU");
    return test_finish("test_gemm_imax");
}
