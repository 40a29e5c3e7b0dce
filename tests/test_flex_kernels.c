/* Integer-only kernels of the shared-exponent formats (COPY, ADD, SUB, MUL, SCALE, RELU, SUM,
 * MATMUL). Every kernel installed in any available backend (both int16 format slots), plus
 * each SIMD matmul variant by name, must
 *   - equal an independent exact reference written here (__int128 loops), output ints and
 *     exponent: matmul up to K = 8192 with operands full of +-32767 (the worst case for int32
 *     accumulators), random, sparse, odd shapes around the tile sizes, transposed and strided
 *     operand views; add/sub with exponent gaps beyond the exact alignment span are checked
 *     through the final rounding (fx_requant) to every nearby output exponent;
 *   - give the same bits with 1 and 2 threads;
 *   - matmul, on every SIMD level, in every GEMM mode (the norm test choosing per tile with and
 *     without the size gates, and the split kernel forced): Gaussian-like data must take the fast kernel, full-range data the
 *     split kernel, data with large and small K stretches both; values built so that chain sums
 *     land just below 2^31 (the exact limit of the norm test) and just past a segment's limit;
 *   - never write outside the output stage. */
#include "flex/flex_kernels.h"
#include "flex/gemm_i16.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static const char *const NAME = "test_flex_kernels";

/* ---- kernels under test ------------------------------------------------------------------- */

typedef struct named_kernel {
    char name[48];
    fx_kernel k;
} named_kernel;

#define MAXK 16
static named_kernel g_k[FX_OP_STAGE_COUNT][MAXK];
static int g_nk[FX_OP_STAGE_COUNT];

static void add_kernel(fx_op op, const char *name, fx_kernel k)
{
    if (!k) return;
    for (int i = 0; i < g_nk[op]; i++)
        if (g_k[op][i].k == k) return; /* the same function in another slot or level */
    named_kernel *nk = &g_k[op][g_nk[op]++];
    snprintf(nk->name, sizeof nk->name, "%s", name);
    nk->k = k;
}

static void collect_kernels(void)
{
    const fx_cpu_features *cpu = fx_cpu();
    for (int i = 0; i < FX_BACKEND_COUNT; i++) {
        const fx_backend *b = fx_backend_get(i);
        if (!b || !b->available) continue;
        for (int op = 0; op < FX_OP_STAGE_COUNT; op++) {
            char nm[48];
            snprintf(nm, sizeof nm, "%s/flex16_5", b->name);
            add_kernel((fx_op)op, nm, b->kernels[op][FMT_FLEX16_5]);
            snprintf(nm, sizeof nm, "%s/dfp16", b->name);
            add_kernel((fx_op)op, nm, b->kernels[op][FMT_DFP16]);
        }
        if (i == FX_BACKEND_AVX2) add_kernel(FX_OP_MATMUL, "matmul_avx2", fx_flex_matmul_avx2);
        if (i == FX_BACKEND_AVX512) {
            add_kernel(FX_OP_MATMUL, "matmul_avx512bw", fx_flex_matmul_avx512bw);
            if (cpu->avx512vnni)
                add_kernel(FX_OP_MATMUL, "matmul_avx512vnni", fx_flex_matmul_avx512vnni);
        }
    }
    /* The integer-compute ops must have an integer kernel in every format slot of the scalar
     * backend. The element-wise math ops (FX_OP_UNARY*) compute in fp32 on decoded values
     * (docs/math.md) and must have none: an integer kernel there would bypass that rule. */
    for (int op = 0; op < FX_OP_STAGE_COUNT; op++) {
        if (op == FX_OP_UNARY || op == FX_OP_UNARY_BACKWARD)
            CHECK(g_nk[op] == 0, "op %d (element-wise math) has no integer kernel", op);
        else
            CHECK(g_nk[op] >= 1 && g_k[op][0].k != NULL, "op %d has a scalar integer kernel", op);
    }
}

/* ---- calls -------------------------------------------------------------------------------- */

static fx_operand operand(const int16_t *data, int exp, int64_t d0, int64_t d1, int64_t s0,
                          int64_t s1)
{
    fx_operand o;
    memset(&o, 0, sizeof o);
    o.data = data;
    o.fmt = FMT_DFP16;
    o.exp = exp;
    o.ndim = 2;
    o.shape[0] = d0;
    o.shape[1] = d1;
    o.strides[0] = s0;
    o.strides[1] = s1;
    return o;
}

static fx_operand operand1(const int16_t *data, int exp, int64_t n)
{
    fx_operand o = operand(data, exp, n, 1, 1, 1);
    o.ndim = 1;
    return o;
}

#define GUARD 24
#define SENTINEL ((int64_t)0x5EED5EED5EED5EEDLL)
#define EXP_SENTINEL (-999999)

/* Run k on *c into a fresh guarded stage; returns the stage (caller frees) or NULL. */
static int64_t *run_kernel(const named_kernel *k, fx_op_call *c, int nthreads, int *exp)
{
    int64_t *buf = malloc((size_t)(c->out_numel + 2 * GUARD) * sizeof *buf);
    for (int64_t i = 0; i < c->out_numel + 2 * GUARD; i++) buf[i] = SENTINEL;
    *exp = EXP_SENTINEL;
    c->out_i64 = buf + GUARD;
    c->out_exp = exp;
    c->nthreads = nthreads;
    const int rc = k->k(c);
    CHECK(rc == FX_OK, "%s returned %d", k->name, rc);
    int guard_ok = 1;
    for (int i = 0; i < GUARD; i++)
        guard_ok &= buf[i] == SENTINEL && buf[GUARD + c->out_numel + i] == SENTINEL;
    CHECK(guard_ok, "%s wrote outside its output stage", k->name);
    CHECK(*exp != EXP_SENTINEL, "%s did not set the exponent", k->name);
    memmove(buf, buf + GUARD, (size_t)c->out_numel * sizeof *buf);
    return buf;
}

/* An FX_OP_MATMUL call on row-major A [M, K] and B [K, N] at exponent 0 (the output stage
 * is set by run_kernel). */
static fx_op_call rowmajor_matmul_call(const int16_t *A, const int16_t *B, int64_t M, int64_t K,
                                       int64_t N)
{
    fx_op_call c;
    memset(&c, 0, sizeof c);
    c.op = FX_OP_MATMUL;
    c.nin = 2;
    c.in[0] = operand(A, 0, M, K, K, 1);
    c.in[1] = operand(B, 0, K, N, N, 1);
    c.out_ndim = 2;
    c.out_shape[0] = M;
    c.out_shape[1] = N;
    c.out_numel = M * N;
    return c;
}

/* A register-tile GEMM (gemm_i16.c) rather than the scalar definition. The level's own matmul
 * is listed under its level's name (avx2/flex16_5), the other AVX-512 variants as matmul_*. */
static int is_simd_gemm(const named_kernel *k) { return strncmp(k->name, "scalar", 6) != 0; }

static int64_t first_mismatch(const int64_t *x, const int64_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (x[i] != y[i]) return i;
    return -1;
}

/* ---- matmul ------------------------------------------------------------------------------- */

enum { DATA_RANDOM, DATA_MAX, DATA_MAX_OPPOSITE, DATA_SIGNS, DATA_SPARSE, DATA_SMALL, DATA_MIN16,
       DATA_KINDS, /* the kinds above rotate through the shape sweep; those below are explicit */
       DATA_GAUSS = DATA_KINDS, DATA_GAUSS_HI, DATA_EDGE_FAST, DATA_EDGE_FAST_NEG, DATA_EDGE_SPLIT,
       DATA_BURSTS, DATA_WRAP_LOW, DATA_FULL_FIRST, DATA_HOT_LINES };
static const char *const data_names[] = {
    "random", "all+32767", "a=+32767,b=-32767", "+-32767", "sparse", "small", "all-32768",
    "gaussian-like, max ~2^14.5", "gaussian-like, max ~32767", "all 11585 (fast limit)",
    "11585 x -11585", "all 11586 (split limit)", "gaussian with +-32767 bursts",
    "all -32513 (wrap kernel's lowest error)",
    "full range in the first K block, gaussian after",
    "gaussian with rows i%6==4 and columns j%16==13 at +32767"};

/* Approximately Gaussian (sum of four uniforms) scaled so that 4 standard deviations reach
 * `peak`: the shape of data quantised at its exact exponent. */
static int16_t gauss_like(test_rng *r, int peak)
{
    int64_t s = 0;
    for (int i = 0; i < 4; i++) s += test_rng_range(r, -8192, 8192);
    /* sd of s = 8192 sqrt(4/3) = 9459: 4 sd (37837) map to peak */
    const int64_t v = s * peak / 37837;
    return (int16_t)(v > 32767 ? 32767 : v < -32767 ? -32767 : v);
}

static int16_t gen_value(test_rng *r, int kind, int is_b)
{
    switch (kind) {
    case DATA_GAUSS: return gauss_like(r, 23000);
    case DATA_GAUSS_HI: return gauss_like(r, 32767);
    /* 16 products of 11585^2 sum to 2147395600 = 2^31 - 88047: the largest segment bound that
     * passes (chains of one segment whose sum is within 0.005 % of the int32 limit) */
    case DATA_EDGE_FAST: return 11585;
    case DATA_EDGE_FAST_NEG: return is_b ? -11585 : 11585;
    case DATA_EDGE_SPLIT: return 11586; /* 16 * 11586^2 > 2^31 - 1: every tile must split */
    case DATA_BURSTS: return gauss_like(r, 3000); /* + the full-range stretches of gen_at */
    case DATA_FULL_FIRST: return gauss_like(r, 3000); /* after gen_at's first K group */
    /* the wrap kernel's extreme high-byte errors (gemm_i16.h): a = b = 32767 (DATA_MAX) gives
     * the largest positive one, a = b = -32513 the largest negative one; a whole chunk of them
     * lands within 0.8 % of the int32 range */
    case DATA_WRAP_LOW: return -32513;
    case DATA_MAX: return 32767;
    case DATA_MAX_OPPOSITE: return is_b ? -32767 : 32767;
    case DATA_SIGNS: return (test_rng_u64(r) & 1) ? 32767 : -32767;
    case DATA_SPARSE: return test_rng_range(r, 0, 9) ? 0 : (int16_t)test_rng_range(r, -32767, 32767);
    case DATA_SMALL: return (int16_t)test_rng_range(r, -3, 3);
    case DATA_MIN16: return -32768; /* outside the format; the exactness proof still covers it */
    default: return (int16_t)test_rng_range(r, -32767, 32767);
    }
}

enum { LAYOUT_ROWMAJOR, LAYOUT_TRANSPOSED, LAYOUT_STRIDED, LAYOUTS };
static const char *const layout_names[] = {"row-major", "transposed", "strided"};

/* A logical [R, C] matrix stored in a larger buffer according to the layout; unused storage
 * holds junk so that reading a wrong element shows. */
typedef struct view16 {
    int16_t *store;
    const int16_t *base;
    int64_t s0, s1;
} view16;

static view16 make_view(const int16_t *logical, int64_t R, int64_t C, int layout, test_rng *r)
{
    view16 v;
    int64_t rows, cols, off;
    switch (layout) {
    case LAYOUT_TRANSPOSED: /* storage [C, R]: a transposed view */
        rows = C; cols = R; v.s0 = 1; v.s1 = R; off = 0;
        break;
    case LAYOUT_STRIDED: /* every 2nd row and 3rd column of [2R+1, 3C+2], offset (1, 2) */
        rows = 2 * R + 1; cols = 3 * C + 2; v.s0 = 2 * cols; v.s1 = 3; off = cols + 2;
        break;
    default:
        rows = R; cols = C; v.s0 = C; v.s1 = 1; off = 0;
        break;
    }
    const int64_t total = rows * cols + 1;
    v.store = malloc((size_t)total * sizeof *v.store);
    for (int64_t i = 0; i < total; i++) v.store[i] = (int16_t)test_rng_range(r, -32767, 32767);
    int16_t *b = v.store + off;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) b[i * v.s0 + j * v.s1] = logical[i * C + j];
    v.base = b;
    return v;
}

static void ref_matmul(const int16_t *A, const int16_t *B, int64_t M, int64_t K, int64_t N,
                       int64_t *C)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            __int128 s = 0;
            for (int64_t k = 0; k < K; k++) s += (__int128)A[i * K + k] * B[k * N + j];
            C[i * N + j] = (int64_t)s; /* |s| <= 8192 * 2^30: fits */
        }
}

/* DATA_BURSTS puts full-range values in the second K block of the GEMM (k in [384, 768)) of
 * A and B: its tiles must split while those of the other K blocks go fast. DATA_HOT_LINES
 * (line = the row of A or column of B the value lies in) sets one row of every 6 and one
 * column of every 16 to +32767 among small values, late in their tiles (row 4 of an AVX2/AVX-512
 * tile's 6, column 13: in the second half of AVX2's 16-column tile, the first of AVX-512's 32):
 * a tile holding both must split, so a norm that misses one row or column of its tile lets the
 * fast kernel wrap. */
static int16_t gen_at(test_rng *r, int kind, int is_b, int64_t k, int64_t line)
{
    if ((kind == DATA_BURSTS && k >= 384 && k < 768) ||
        (kind == DATA_FULL_FIRST && k < FX_GEMM_I16_KG * FX_GEMM_I16_KC))
        return (int16_t)test_rng_range(r, -32767, 32767);
    if (kind == DATA_HOT_LINES)
        return line % (is_b ? 16 : 6) == (is_b ? 13 : 4) ? 32767 : gauss_like(r, 3000);
    return gen_value(r, kind, is_b);
}

/* What the norm test must choose for the data (checked through the tile counters, on the SIMD
 * GEMM only: small products run the scalar kernel and count nothing). */
enum { EXPECT_ANY, EXPECT_FAST, EXPECT_SPLIT, EXPECT_FAST_EVEN_AUTO /* above the size gates */ };

static void check_matmul_expect(int64_t M, int64_t K, int64_t N, int kind, int layout,
                                int check_threads, int expect, test_rng *r)
{
    int16_t *A = malloc((size_t)(M * K + 1) * sizeof *A), *B = malloc((size_t)(K * N + 1) * sizeof *B);
    for (int64_t i = 0; i < M * K; i++) A[i] = gen_at(r, kind, 0, i % (K ? K : 1), i / (K ? K : 1));
    for (int64_t i = 0; i < K * N; i++) B[i] = gen_at(r, kind, 1, i / (N ? N : 1), i % (N ? N : 1));
    int64_t *want = malloc((size_t)(M * N + 1) * sizeof *want);
    ref_matmul(A, B, M, K, N, want);
    view16 va = make_view(A, M, K, layout, r), vb = make_view(B, K, N, layout, r);
    const int ea = (int)test_rng_range(r, -128, 127), eb = (int)test_rng_range(r, -128, 127);

    fx_op_call c;
    memset(&c, 0, sizeof c);
    c.op = FX_OP_MATMUL;
    c.nin = 2;
    c.in[0] = operand(va.base, ea, M, K, va.s0, va.s1);
    c.in[1] = operand(vb.base, eb, K, N, vb.s0, vb.s1);
    c.out_ndim = 2;
    c.out_shape[0] = M;
    c.out_shape[1] = N;
    c.out_numel = M * N;

    static const char *const mode_names[] = {"auto", "split-only", "norm-always"};
    for (int ki = 0; ki < g_nk[FX_OP_MATMUL]; ki++)
        for (int mode = FX_GEMM_I16_AUTO; mode <= FX_GEMM_I16_NORM_ALWAYS; mode++) {
            const named_kernel *k = &g_k[FX_OP_MATMUL][ki];
            int exp;
            int64_t fast, split;
            fx_gemm_i16_set_mode(mode);
            fx_gemm_i16_reset_tile_counts();
            int64_t *got = run_kernel(k, &c, 1, &exp);
            fx_gemm_i16_tile_counts(&fast, &split);
            const int64_t bad = first_mismatch(got, want, M * N);
            CHECK(bad < 0 && exp == ea + eb,
                  "%s (%s) M=%lld K=%lld N=%lld %s %s: exp %d (want %d), first bad [%lld]: %lld vs %lld",
                  k->name, mode_names[mode], (long long)M, (long long)K, (long long)N,
                  data_names[kind], layout_names[layout], exp, ea + eb, (long long)bad,
                  bad >= 0 ? (long long)got[bad] : 0LL, bad >= 0 ? (long long)want[bad] : 0LL);
            if (fast + split > 0) {
                if (mode == FX_GEMM_I16_SPLIT_ONLY)
                    CHECK(fast == 0, "%s split-only mode ran %lld fast tiles", k->name,
                          (long long)fast);
                else if (mode == FX_GEMM_I16_AUTO && expect != EXPECT_FAST_EVEN_AUTO)
                    ; /* the size gates decide; the bits were checked above */
                else if (expect == EXPECT_FAST || expect == EXPECT_FAST_EVEN_AUTO)
                    CHECK(split == 0, "%s M=%lld K=%lld N=%lld %s: %lld of %lld tiles split, "
                          "want all fast", k->name, (long long)M, (long long)K, (long long)N,
                          data_names[kind], (long long)split, (long long)(fast + split));
                else if (expect == EXPECT_SPLIT)
                    CHECK(fast == 0, "%s M=%lld K=%lld N=%lld %s: %lld fast tiles, want none",
                          k->name, (long long)M, (long long)K, (long long)N, data_names[kind],
                          (long long)fast);
            }
            if (check_threads) {
                int exp2;
                int64_t *got2 = run_kernel(k, &c, 2, &exp2);
                CHECK(first_mismatch(got2, got, M * N) < 0 && exp2 == exp,
                      "%s (%s) M=%lld K=%lld N=%lld: 2 threads differ from 1", k->name,
                      mode_names[mode], (long long)M, (long long)K, (long long)N);
                free(got2);
            }
            free(got);
        }
    fx_gemm_i16_set_mode(FX_GEMM_I16_AUTO);
    free(va.store);
    free(vb.store);
    free(A);
    free(B);
    free(want);
}

static void check_matmul(int64_t M, int64_t K, int64_t N, int kind, int layout, int check_threads,
                         test_rng *r)
{
    check_matmul_expect(M, K, N, kind, layout, check_threads, EXPECT_ANY, r);
}

/* Two threads over slices of the columns (fx_gemm_i16_columns) against one thread and against
 * two over row blocks, on every SIMD kernel: the int64 stage with its reported largest |sum|,
 * and the rounding route (out_i16 at a shift, with the largest |sum| and the count of sums
 * rounded to zero), whose slices round into rows of the whole product's width. Shapes: the
 * convolutions' few rows over many columns, slices of unequal panel counts and a partial last
 * panel (N = 1030), several row blocks per slice (M = 150), full-range data (the any-data
 * kernels). */
static void test_matmul_column_threads(void)
{
    static const int64_t shapes[][3] = {{16, 143, 4146}, {6, 64, 1030}, {150, 100, 1500},
                                        {33, 200, 2048}};
    test_rng r;
    test_rng_seed(&r, 5150);
    CHECK(!fx_gemm_i16_column_threads(16, 143, 1000, 2) &&
              fx_gemm_i16_column_threads(16, 143, 1024, 2) &&
              !fx_gemm_i16_column_threads(16, 143, 4096, 1),
          "column slices from 512 columns a thread, on more than one thread");
    int rounded = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
        const int kind = si == 3 ? DATA_RANDOM : DATA_GAUSS;
        int16_t *A = malloc((size_t)(M * K) * sizeof *A), *B = malloc((size_t)(K * N) * sizeof *B);
        int64_t *want = malloc((size_t)(M * N) * sizeof *want);
        int16_t *q[3];
        for (int v = 0; v < 3; v++) q[v] = malloc((size_t)(M * N) * sizeof *q[v]);
        for (int64_t i = 0; i < M * K; i++) A[i] = gen_at(&r, kind, 0, i % K, i / K);
        for (int64_t i = 0; i < K * N; i++) B[i] = gen_at(&r, kind, 1, i / N, i % N);
        ref_matmul(A, B, M, K, N, want);
        uint64_t want_max = 0;
        for (int64_t i = 0; i < M * N; i++) {
            const uint64_t v = (uint64_t)(want[i] < 0 ? -want[i] : want[i]);
            want_max = v > want_max ? v : want_max;
        }
        for (int ki = 0; ki < g_nk[FX_OP_MATMUL]; ki++) {
            const named_kernel *k = &g_k[FX_OP_MATMUL][ki];
            if (!is_simd_gemm(k)) continue;
            /* the stage: one thread, two over columns, two over row blocks */
            for (int v = 0; v < 3; v++) {
                fx_op_call c = rowmajor_matmul_call(A, B, M, K, N);
                uint64_t imax = 0;
                int known = 0, exp;
                c.out_imax = &imax;
                c.out_imax_known = &known;
                fx_gemm_i16_set_column_threads(v != 2);
                int64_t *got = run_kernel(k, &c, v == 0 ? 1 : 2, &exp);
                const int64_t bad = first_mismatch(got, want, M * N);
                CHECK(bad < 0 && (!known || imax == want_max),
                      "%s %lld x %lld x %lld, %s: first bad [%lld], max %llu (want %llu)",
                      k->name, (long long)M, (long long)K, (long long)N,
                      v == 0 ? "one thread" : v == 1 ? "two over columns" : "two over rows",
                      (long long)bad, (unsigned long long)imax, (unsigned long long)want_max);
                free(got);
            }
            /* the rounding route, at a shift that leaves the largest sum 14 bits */
            int shift = 1;
            while (shift < 40 && (want_max >> shift) >= (1u << 14)) shift++;
            uint64_t imax[3] = {0, 0, 0};
            int64_t nuf[3] = {0, 0, 0};
            int ok = 1;
            for (int v = 0; v < 3 && ok; v++) {
                fx_op_call c = rowmajor_matmul_call(A, B, M, K, N);
                int known = 0, exp = 0;
                c.out_i16 = q[v];
                c.out_i16_shift = shift;
                c.out_imax = &imax[v];
                c.out_imax_known = &known;
                c.out_i16_underflow = &nuf[v];
                c.out_exp = &exp;
                c.nthreads = v == 0 ? 1 : 2;
                fx_gemm_i16_set_column_threads(v != 2);
                ok = k->k(&c) == FX_OK;
                CHECK(!ok || known, "%s: the rounding route reported no maximum", k->name);
            }
            fx_gemm_i16_set_column_threads(1);
            if (!ok) continue; /* a level that does not round this product */
            rounded++;
            for (int v = 1; v < 3; v++) {
                int64_t bad = -1;
                for (int64_t i = 0; i < M * N && bad < 0; i++)
                    if (q[v][i] != q[0][i]) bad = i;
                CHECK(bad < 0 && imax[v] == imax[0] && nuf[v] == nuf[0] &&
                          imax[0] == want_max,
                      "%s %lld x %lld x %lld rounded at %d, two threads over %s: first bad "
                      "[%lld], max %llu / %llu, zeros %lld / %lld", k->name, (long long)M,
                      (long long)K, (long long)N, shift, v == 1 ? "columns" : "rows",
                      (long long)bad, (unsigned long long)imax[v],
                      (unsigned long long)imax[0], (long long)nuf[v], (long long)nuf[0]);
            }
        }
        free(A);
        free(B);
        free(want);
        for (int v = 0; v < 3; v++) free(q[v]);
    }
    const fx_backend *b512 = fx_backend_get(FX_BACKEND_AVX512);
    CHECK(!(b512->available && fx_cpu()->avx512vnni) || rounded > 0,
          "no kernel took the rounding route (the AVX-512 VNNI kernel rounds these products)");
}

/* The norm-bounded fast kernel: both paths must be taken where the data says so, and agree with
 * the reference bit for bit (check_matmul_expect runs every kernel in all three modes; the path
 * expectations are checked in mode NORM_ALWAYS, which applies the norm test to every size). */
/* 1 while test_matmul_paths runs with the AMX kernel on: it takes the products that the tile
 * counts below are about, so those counts are the driver pass's alone */
static int g_amx_pass;

static void test_matmul_paths(void)
{
    test_rng r;
    test_rng_seed(&r, 4242);
    /* typical data: every tile fast (Gaussian-like, peak ~2^14.5 and ~2^15) */
    check_matmul_expect(37, 831, 130, DATA_GAUSS, LAYOUT_ROWMAJOR, 1, EXPECT_FAST, &r);
    check_matmul_expect(64, 1024, 128, DATA_GAUSS, LAYOUT_TRANSPOSED, 1, EXPECT_FAST, &r);
    check_matmul_expect(13, 1000, 161, DATA_GAUSS, LAYOUT_STRIDED, 0, EXPECT_FAST, &r);
    check_matmul_expect(150, 777, 197, DATA_GAUSS_HI, LAYOUT_ROWMAJOR, 1, EXPECT_ANY, &r);
    /* the exact limits: one segment of 16 products at 2^31 - 88047 passes (chains of one
     * segment, sums within 0.005 % of the int32 range, both signs); one more unit splits */
    check_matmul_expect(12, 1000, 128, DATA_EDGE_FAST, LAYOUT_ROWMAJOR, 1, EXPECT_FAST, &r);
    check_matmul_expect(7, 449, 129, DATA_EDGE_FAST_NEG, LAYOUT_STRIDED, 0, EXPECT_FAST, &r);
    check_matmul_expect(12, 1000, 128, DATA_EDGE_SPLIT, LAYOUT_ROWMAJOR, 0, EXPECT_SPLIT, &r);
    /* adversarial: full-range values must fall back to the split kernel everywhere */
    check_matmul_expect(30, 2048, 140, DATA_SIGNS, LAYOUT_ROWMAJOR, 1, EXPECT_SPLIT, &r);
    check_matmul_expect(13, 4099, 128, DATA_MAX, LAYOUT_TRANSPOSED, 0, EXPECT_SPLIT, &r);
    check_matmul_expect(7, 1500, 137, DATA_MIN16, LAYOUT_ROWMAJOR, 0, EXPECT_SPLIT, &r);
    check_matmul_expect(11, 1535, 67, DATA_WRAP_LOW, LAYOUT_ROWMAJOR, 0, EXPECT_SPLIT, &r);
    /* the wrap kernel's half quad (odd pair count) at the end of a K block: K blocks of
     * 384 + 133 and 384 + 5 values */
    check_matmul_expect(17, 517, 45, DATA_MAX, LAYOUT_ROWMAJOR, 0, EXPECT_SPLIT, &r);
    check_matmul_expect(9, 389, 70, DATA_RANDOM, LAYOUT_STRIDED, 1, EXPECT_ANY, &r);
    /* the wrap kernel's shortest products (K >= 63: one K block of less than one chunk of
     * 128 products, both error extremes, an odd pair count and an odd K) */
    check_matmul_expect(19, 64, 70, DATA_MAX, LAYOUT_ROWMAJOR, 1, EXPECT_SPLIT, &r);
    check_matmul_expect(13, 63, 45, DATA_MIN16, LAYOUT_STRIDED, 0, EXPECT_SPLIT, &r);
    check_matmul_expect(8, 126, 33, DATA_WRAP_LOW, LAYOUT_ROWMAJOR, 0, EXPECT_SPLIT, &r);
    check_matmul_expect(25, 98, 64, DATA_RANDOM, LAYOUT_TRANSPOSED, 1, EXPECT_ANY, &r);
    /* two row blocks (M > 144), so that two threads share the wrap kernel's tiles */
    check_matmul_expect(300, 517, 70, DATA_SIGNS, LAYOUT_ROWMAJOR, 1, EXPECT_SPLIT, &r);
    /* wider than tall (N > M): the AMX kernel streams B's column panels in groups (six groups
     * of 11 here, the last one short and its last panel partial), a partial last k tile */
    check_matmul_expect(40, 700, 1000, DATA_GAUSS, LAYOUT_ROWMAJOR, 1, EXPECT_ANY, &r);
    check_matmul_expect(20, 300, 600, DATA_RANDOM, LAYOUT_TRANSPOSED, 1, EXPECT_ANY, &r);
    /* ... with two K blocks (2,100 values: 32 + 1 tiles, the second adding to the first) and
     * A's 17 row panels in two chunks */
    check_matmul_expect(272, 2100, 300, DATA_SIGNS, LAYOUT_ROWMAJOR, 1, EXPECT_SPLIT, &r);
    /* the convolutions' shapes as GEMMs: few rows and a B of several column blocks, each
     * thread's run of panels packed one norm segment at a time (pack_b_run), the last block
     * one panel and a partial one; an odd K (the last row paired with zeros) and rows 8 KiB
     * apart */
    for (int runs = 1; runs >= 0; runs--) { /* and a call per panel (the same bytes) */
        fx_gemm_i16_set_pack_runs(runs);
        check_matmul_expect(16, 143, 4146, DATA_GAUSS, LAYOUT_ROWMAJOR, 1, EXPECT_FAST, &r);
        check_matmul_expect(40, 288, 4096, DATA_GAUSS, LAYOUT_ROWMAJOR, 1, EXPECT_FAST, &r);
    }
    fx_gemm_i16_set_pack_runs(1);
    /* partial tiles of four rows or fewer (M = 16: 6 + 6 + 4; M = 26: 6 x 4 + 2) on the fast
     * kernel's four-row loop and, switched off, on the six-row one; folds between chains
     * (DATA_GAUSS_HI) and one chain */
    for (int four = 1; four >= 0; four--) {
        fx_gemm_i16_set_fast4(four);
        check_matmul_expect(16, 1000, 96, DATA_GAUSS_HI, LAYOUT_ROWMAJOR, 1, EXPECT_ANY, &r);
        check_matmul_expect(26, 64, 70, DATA_GAUSS, LAYOUT_TRANSPOSED, 0, EXPECT_FAST, &r);
    }
    fx_gemm_i16_set_fast4(1);
    /* ... with the threads over row blocks, as before the column slices (check_threads
     * compares two threads with one) */
    fx_gemm_i16_set_column_threads(0);
    check_matmul_expect(16, 143, 4146, DATA_GAUSS, LAYOUT_ROWMAJOR, 1, EXPECT_FAST, &r);
    fx_gemm_i16_set_column_threads(1);
    /* mixed: full-range stretches of K among small values split some K blocks' tiles only */
    int64_t fast = 0, split = 0;
    check_matmul_expect(100, 1300, 140, DATA_BURSTS, LAYOUT_ROWMAJOR, 1, EXPECT_ANY, &r);
    /* one hot row and column per tile: every layout (each B packing), partial tiles */
    for (int layout = 0; layout < LAYOUTS; layout++)
        check_matmul_expect(23, 700, 61, DATA_HOT_LINES, layout, 0, EXPECT_ANY, &r);
    /* the portable packing loops (they define the packed bytes) under the SIMD kernels:
     * plain, split and wrap B panels, A panels, A high panels, odd K and partial tiles */
    fx_gemm_i16_set_portable_packing(1);
    check_matmul_expect(13, 4099, 128, DATA_MAX, LAYOUT_TRANSPOSED, 0, EXPECT_SPLIT, &r);
    check_matmul_expect(11, 1535, 67, DATA_WRAP_LOW, LAYOUT_ROWMAJOR, 0, EXPECT_SPLIT, &r);
    check_matmul_expect(37, 831, 130, DATA_GAUSS, LAYOUT_ROWMAJOR, 0, EXPECT_FAST, &r);
    check_matmul_expect(29, 901, 97, DATA_RANDOM, LAYOUT_ROWMAJOR, 1, EXPECT_ANY, &r);
    fx_gemm_i16_set_portable_packing(0);
    /* the split kernel where the wrap kernel would run (VNNI machines reach it otherwise only
     * below the wrap gate, K < 63) */
    fx_gemm_i16_set_wrap(0);
    check_matmul_expect(13, 4099, 128, DATA_MAX, LAYOUT_TRANSPOSED, 0, EXPECT_SPLIT, &r);
    check_matmul_expect(300, 517, 70, DATA_SIGNS, LAYOUT_ROWMAJOR, 1, EXPECT_SPLIT, &r);
    fx_gemm_i16_set_wrap(1);
    /* mode AUTO probes the first norm-tested group of K blocks (up to FX_GEMM_I16_KG blocks of
     * FX_GEMM_I16_KC values: four on AVX-512 with VNNI, one elsewhere): when no tile there
     * passes, the later groups skip the norms (so Gaussian blocks after full-range ones take
     * the any-data kernel); NORM_ALWAYS tests every block. K = 2688: seven blocks of 384 on
     * both SIMD levels, the first four full-range. */
    check_matmul_expect(520, 2688, 260, DATA_FULL_FIRST, LAYOUT_ROWMAJOR, 1, EXPECT_ANY, &r);
    for (int ki = 0; ki < g_nk[FX_OP_MATMUL] && !g_amx_pass; ki++) {
        if (!is_simd_gemm(&g_k[FX_OP_MATMUL][ki])) continue;
        const int64_t M = 520, K = 2688, N = 260;
        int16_t *A = malloc((size_t)(M * K) * sizeof *A), *B = malloc((size_t)(K * N) * sizeof *B);
        for (int64_t i = 0; i < M * K; i++) A[i] = gen_at(&r, DATA_FULL_FIRST, 0, i % K, i / K);
        for (int64_t i = 0; i < K * N; i++) B[i] = gen_at(&r, DATA_FULL_FIRST, 1, i / N, i % N);
        fx_op_call c = rowmajor_matmul_call(A, B, M, K, N);
        int64_t counts[2][2];
        for (int mode = 0; mode < 2; mode++) {
            int exp;
            fx_gemm_i16_set_mode(mode ? FX_GEMM_I16_NORM_ALWAYS : FX_GEMM_I16_AUTO);
            fx_gemm_i16_reset_tile_counts();
            free(run_kernel(&g_k[FX_OP_MATMUL][ki], &c, 2, &exp));
            fx_gemm_i16_tile_counts(&counts[mode][0], &counts[mode][1]);
        }
        fx_gemm_i16_set_mode(FX_GEMM_I16_AUTO);
        CHECK(counts[0][0] == 0 && counts[0][1] > 0 && counts[1][0] > 0,
              "%s: full-range first K group: auto took %lld fast tiles (want 0), norm-always %lld "
              "(want some)", g_k[FX_OP_MATMUL][ki].name, (long long)counts[0][0],
              (long long)counts[1][0]);
        free(A);
        free(B);
    }
    /* one product above the size gates, so that mode AUTO itself takes the fast kernel */
    check_matmul_expect(520, 300, 260, DATA_GAUSS, LAYOUT_ROWMAJOR, 1, EXPECT_FAST_EVEN_AUTO, &r);
    fx_gemm_i16_set_mode(FX_GEMM_I16_NORM_ALWAYS);
    /* one SIMD kernel alone, to see that this data really mixes the paths in one product */
    for (int ki = 0; ki < g_nk[FX_OP_MATMUL] && !g_amx_pass; ki++) {
        if (!is_simd_gemm(&g_k[FX_OP_MATMUL][ki])) continue;
        int16_t *A = malloc(100 * 1300 * sizeof *A), *B = malloc(1300 * 140 * sizeof *B);
        for (int64_t i = 0; i < 100 * 1300; i++) A[i] = gen_at(&r, DATA_BURSTS, 0, i % 1300, i / 1300);
        for (int64_t i = 0; i < 1300 * 140; i++) B[i] = gen_at(&r, DATA_BURSTS, 1, i / 140, i % 140);
        fx_op_call c = rowmajor_matmul_call(A, B, 100, 1300, 140);
        int exp;
        fx_gemm_i16_reset_tile_counts();
        free(run_kernel(&g_k[FX_OP_MATMUL][ki], &c, 1, &exp));
        fx_gemm_i16_tile_counts(&fast, &split);
        CHECK(fast > 0 && split > 0, "%s: bursts data took %lld fast and %lld split tiles, want both",
              g_k[FX_OP_MATMUL][ki].name, (long long)fast, (long long)split);
        free(A);
        free(B);
    }
    fx_gemm_i16_set_mode(FX_GEMM_I16_AUTO);
}

/* The levels' own size gates (fx_gemm_i16_kernel): mode AUTO takes the norm test on the CNN's
 * narrow products (N = 32, M = 128) on both SIMD levels; on short K blocks (conv1's 25 values,
 * 13 pairs; 3 pairs) on AVX-512 but not on AVX2, whose gate is 16 pairs. Exact either way. */
static void test_matmul_level_gates(void)
{
    test_rng r;
    test_rng_seed(&r, 1618);
    static const struct { int64_t M, K, N; int want_fast_avx2, want_fast_avx512; } cases[] = {
        {128, 300, 32, 1, 1}, /* the dense layers' batch of 128, a narrow output */
        {2000, 25, 32, 0, 1}, /* 13 pairs: below the AVX2 K gate */
        {700, 5, 64, 0, 1},   /* 3 pairs, one short segment */
    };
    for (int ki = 0; ki < g_nk[FX_OP_MATMUL]; ki++) {
        const named_kernel *k = &g_k[FX_OP_MATMUL][ki];
        const int avx2 = strstr(k->name, "avx2") != NULL; /* avx2/flex16_5 or matmul_avx2 */
        if (!avx2 && !strstr(k->name, "avx512")) continue;
        for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
            const int64_t M = cases[t].M, K = cases[t].K, N = cases[t].N;
            const int want_fast = avx2 ? cases[t].want_fast_avx2 : cases[t].want_fast_avx512;
            int16_t *A = malloc((size_t)(M * K) * sizeof *A), *B = malloc((size_t)(K * N) * sizeof *B);
            for (int64_t i = 0; i < M * K; i++) A[i] = gen_at(&r, DATA_GAUSS, 0, i % K, i / K);
            for (int64_t i = 0; i < K * N; i++) B[i] = gen_at(&r, DATA_GAUSS, 1, i / N, i % N);
            int64_t *want = malloc((size_t)(M * N) * sizeof *want);
            ref_matmul(A, B, M, K, N, want);
            fx_op_call c = rowmajor_matmul_call(A, B, M, K, N);
            int exp;
            int64_t fast, split;
            fx_gemm_i16_set_mode(FX_GEMM_I16_AUTO);
            fx_gemm_i16_reset_tile_counts();
            int64_t *got = run_kernel(k, &c, 1, &exp);
            fx_gemm_i16_tile_counts(&fast, &split);
            CHECK(first_mismatch(got, want, M * N) < 0, "%s auto %lldx%lldx%lld: not exact",
                  k->name, (long long)M, (long long)K, (long long)N);
            if (want_fast)
                CHECK(fast > 0 && split == 0, "%s auto %lldx%lldx%lld Gaussian: %lld fast, %lld "
                      "split tiles, want all fast", k->name, (long long)M, (long long)K,
                      (long long)N, (long long)fast, (long long)split);
            else
                CHECK(fast == 0 && split > 0, "%s auto %lldx%lldx%lld: %lld fast tiles below the "
                      "K gate, want none", k->name, (long long)M, (long long)K, (long long)N,
                      (long long)fast);
            free(got);
            free(want);
            free(A);
            free(B);
        }
    }
}

static void test_matmul(void)
{
    test_rng r;
    test_rng_seed(&r, 2718);
    int idx = 0;

    /* odd shapes around the register tiles (AVX-512 6 x 32; AVX2 6 x 16 in two halves of 8,
     * each stored in two quarters of 4: N = 12 and 20 end a tile on a quarter, 9 and 17 one
     * column into a half) and the K blocks (384) */
    static const int64_t Ms[] = {1, 2, 5, 6, 7, 13};
    static const int64_t Ns[] = {1, 7, 8, 9, 12, 16, 17, 20, 31, 33, 65};
    static const int64_t Ks[] = {1, 2, 3, 17, 255, 256, 383, 384, 385, 1000};
    for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++)
        for (size_t b = 0; b < sizeof Ns / sizeof Ns[0]; b++)
            for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k++, idx++)
                check_matmul(Ms[a], Ks[k], Ns[b], idx % DATA_KINDS, idx % LAYOUTS, 0, &r);

    /* worst case for int32 accumulators: K up to 8192 of +-32767 (and -32768) */
    static const int worst[] = {DATA_MAX, DATA_MAX_OPPOSITE, DATA_SIGNS, DATA_MIN16};
    for (size_t w = 0; w < sizeof worst / sizeof worst[0]; w++) {
        check_matmul(7, 8192, 37, worst[w], (int)w % LAYOUTS, 0, &r);
        check_matmul(13, 4099, 64, worst[w], LAYOUT_ROWMAJOR, 0, &r);
    }
    check_matmul(1, 8192, 1, DATA_MAX, LAYOUT_ROWMAJOR, 0, &r);

    /* blocks beyond one row block / column block, every layout; threads 1 vs 2 */
    for (int layout = 0; layout < LAYOUTS; layout++) {
        check_matmul(150, 300, 2050, DATA_RANDOM, layout, 1, &r);
        check_matmul(301, 520, 97, layout == 1 ? DATA_SPARSE : DATA_SIGNS, layout, 1, &r);
    }
    check_matmul(64, 2048, 64, DATA_MAX, LAYOUT_TRANSPOSED, 1, &r);

    /* degenerate shapes */
    check_matmul(0, 5, 3, DATA_RANDOM, LAYOUT_ROWMAJOR, 0, &r);
    check_matmul(4, 5, 0, DATA_RANDOM, LAYOUT_ROWMAJOR, 0, &r);
    check_matmul(40, 0, 50, DATA_RANDOM, LAYOUT_ROWMAJOR, 1, &r); /* K = 0: zeros */
}

/* ---- elementwise ops ---------------------------------------------------------------------- */

static void fill16(int16_t *x, int64_t n, test_rng *r, int zeros_pct)
{
    for (int64_t i = 0; i < n; i++) {
        const int kind = (int)test_rng_range(r, 0, 99);
        if (kind < zeros_pct) x[i] = 0;
        else if (kind < zeros_pct + 5) x[i] = (test_rng_u64(r) & 1) ? 32767 : -32767;
        else x[i] = (int16_t)test_rng_range(r, -32767, 32767);
    }
}

static fx_op_call unary_call(fx_op op, const int16_t *a, int ea, int64_t n)
{
    fx_op_call c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.nin = 1;
    c.in[0] = operand1(a, ea, n);
    c.out_ndim = 1;
    c.out_shape[0] = n;
    c.out_numel = n;
    return c;
}

static void test_unary_ops(void)
{
    test_rng r;
    test_rng_seed(&r, 31);
    static const int64_t sizes[] = {0, 1, 7, 64, 1001, 300000};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int64_t n = sizes[si];
        int16_t *a = malloc((size_t)(n + 1) * sizeof *a);
        fill16(a, n, &r, 10);
        const int ea = (int)test_rng_range(&r, -128, 127);
        int64_t *want = malloc((size_t)(n + 1) * sizeof *want);

        /* COPY and RELU */
        static const fx_op copy_relu[] = {FX_OP_COPY, FX_OP_RELU};
        for (int oi = 0; oi < 2; oi++) {
            const fx_op op = copy_relu[oi];
            for (int64_t i = 0; i < n; i++) want[i] = op == FX_OP_RELU && a[i] < 0 ? 0 : a[i];
            fx_op_call c = unary_call((fx_op)op, a, ea, n);
            for (int ki = 0; ki < g_nk[op]; ki++) {
                int exp;
                int64_t *got = run_kernel(&g_k[op][ki], &c, 1 + (int)(si % 2), &exp);
                CHECK(first_mismatch(got, want, n) < 0 && exp == ea, "%s op %d n=%lld",
                      g_k[op][ki].name, (int)op, (long long)n);
                free(got);
            }
        }

        /* SCALE by m * 2^k with |m| < 2^31 */
        static const int64_t mants[] = {0, 1, -1, 3, 2147483647, -2147483647, 1073741824, -12345};
        for (size_t mi = 0; mi < sizeof mants / sizeof mants[0]; mi++) {
            fx_op_call c = unary_call(FX_OP_SCALE, a, ea, n);
            c.scalar_mant = mants[mi];
            c.scalar_exp = (int)test_rng_range(&r, -200, 200);
            for (int64_t i = 0; i < n; i++) want[i] = (int64_t)((__int128)a[i] * mants[mi]);
            for (int ki = 0; ki < g_nk[FX_OP_SCALE]; ki++) {
                int exp;
                int64_t *got = run_kernel(&g_k[FX_OP_SCALE][ki], &c, 1, &exp);
                CHECK(first_mismatch(got, want, n) < 0 && exp == ea + c.scalar_exp,
                      "%s scale by %lld n=%lld", g_k[FX_OP_SCALE][ki].name, (long long)mants[mi],
                      (long long)n);
                free(got);
            }
        }
        free(a);
        free(want);
    }
}

static void test_mul(void)
{
    test_rng r;
    test_rng_seed(&r, 32);
    static const int64_t sizes[] = {0, 1, 9, 4096, 300000};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int64_t n = sizes[si];
        int16_t *a = malloc((size_t)(n + 1) * 2), *b = malloc((size_t)(n + 1) * 2);
        fill16(a, n, &r, 10);
        fill16(b, n, &r, 10);
        int64_t *want = malloc((size_t)(n + 1) * sizeof *want);
        for (int64_t i = 0; i < n; i++) want[i] = (int64_t)((__int128)a[i] * b[i]);
        fx_op_call c = unary_call(FX_OP_MUL, a, -128, n);
        c.nin = 2;
        c.in[1] = operand1(b, -7, n);
        for (int ki = 0; ki < g_nk[FX_OP_MUL]; ki++)
            for (int nt = 1; nt <= 2; nt++) {
                int exp;
                int64_t *got = run_kernel(&g_k[FX_OP_MUL][ki], &c, nt, &exp);
                CHECK(first_mismatch(got, want, n) < 0 && exp == -135, "%s mul n=%lld threads %d",
                      g_k[FX_OP_MUL][ki].name, (long long)n, nt);
                free(got);
            }
        free(a);
        free(b);
        free(want);
    }
}

static void test_sum(void)
{
    test_rng r;
    test_rng_seed(&r, 33);
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {1, 0, 5}, {3, 0, 1}, {1, 1000, 1}, {7, 13, 1}, {1, 17, 33}, {5, 9, 11},
        {64, 4096, 1}, {2, 70000, 3}, {300, 7, 257}, {1, 100000, 1}, {1000, 300, 1},
        /* one outer item of many rows, split over the threads: a linear layer's bias gradient,
         * a partial block of 64 columns, and (index 14: every value 32767) sums of more rows
         * than int32 lanes could hold without moving them into int64; then outer items of
         * their own with more rows than one flush */
        {1, 16384, 128}, {1, 4099, 77}, {1, 70000, 17}, {3, 20000, 40},
    };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t outer = shapes[si][0], len = shapes[si][1], inner = shapes[si][2];
        const int64_t n = outer * len * inner, no = outer * inner;
        int16_t *a = malloc((size_t)(n + 1) * 2);
        fill16(a, n, &r, si % 2 ? 50 : 0);
        if (si % 3 == 2)
            for (int64_t i = 0; i < n; i++) a[i] = 32767; /* the largest possible sums */
        int64_t *want = malloc((size_t)(no + 1) * sizeof *want);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                __int128 s = 0;
                for (int64_t k = 0; k < len; k++) s += a[(o * len + k) * inner + i];
                want[o * inner + i] = (int64_t)s;
            }
        fx_op_call c = unary_call(FX_OP_SUM, a, 42, n);
        c.out_shape[0] = no;
        c.out_numel = no;
        c.red_outer = outer;
        c.red_len = len;
        c.red_inner = inner;
        for (int ki = 0; ki < g_nk[FX_OP_SUM]; ki++)
            for (int nt = 1; nt <= 2; nt++) {
                int exp;
                int64_t *got = run_kernel(&g_k[FX_OP_SUM][ki], &c, nt, &exp);
                CHECK(first_mismatch(got, want, no) < 0 && exp == 42,
                      "%s sum (%lld, %lld, %lld) threads %d", g_k[FX_OP_SUM][ki].name,
                      (long long)outer, (long long)len, (long long)inner, nt);
                free(got);
            }
        free(a);
        free(want);
    }
}

/* ---- add / sub ---------------------------------------------------------------------------- */

/* x * 2^-s rounded to nearest even and saturated to [-32767, 32767]: the correct result of
 * writing the exact value x (an integer at some exponent) at an exponent s higher. */
static int32_t ref_round128(__int128 x, int s)
{
    __int128 q;
    if (s <= 0) {
        q = x;
        for (int i = 0; i < -s && q != 0 && q < 1000000 && q > -1000000; i++) q *= 2;
    } else if (s >= 126) {
        q = 0; /* |x| < 2^120 in this test */
    } else {
        const __int128 unit = (__int128)1 << s;
        __int128 fl = x / unit, rem = x - fl * unit;
        if (rem < 0) {
            fl -= 1;
            rem += unit;
        }
        q = fl;
        if (2 * rem > unit || (2 * rem == unit && (fl & 1) != 0)) q += 1;
    }
    return q > 32767 ? 32767 : q < -32767 ? -32767 : (int32_t)q;
}

static void check_addsub(fx_op op, const int16_t *a, int ea, const int16_t *b, int eb, int64_t n,
                         int nthreads)
{
    const int emin = ea < eb ? ea : eb, emax = ea < eb ? eb : ea, gap = emax - emin;
    const int16_t *big = ea >= eb ? a : b;
    int big_all_zero = 1;
    for (int64_t i = 0; i < n; i++) big_all_zero &= big[i] == 0;
    fx_op_call c = unary_call(op, a, ea, n);
    c.nin = 2;
    c.in[1] = operand1(b, eb, n);
    for (int ki = 0; ki < g_nk[op]; ki++) {
        const named_kernel *k = &g_k[op][ki];
        int eo;
        int64_t *got = run_kernel(k, &c, nthreads, &eo);
        int64_t bad = 0;
        if (gap <= FX_ALIGN_SPAN) {
            /* exact at the smaller exponent */
            CHECK(eo == emin, "%s ea=%d eb=%d: exponent %d, want %d", k->name, ea, eb, eo, emin);
            for (int64_t i = 0; i < n; i++) {
                const __int128 x = (__int128)a[i] * ((__int128)1 << (ea - emin));
                const __int128 y = (__int128)b[i] * ((__int128)1 << (eb - emin));
                bad += (__int128)got[i] != (op == FX_OP_ADD ? x + y : x - y);
            }
            CHECK(bad == 0, "%s ea=%d eb=%d: %lld inexact sums", k->name, ea, eb, (long long)bad);
        } else {
            /* beyond the span the stage may be jammed: check what matters, the one rounding
             * to each output exponent near the values, against the exact value */
            CHECK(eo >= emin && eo <= emax, "%s ea=%d eb=%d: exponent %d outside [%d, %d]",
                  k->name, ea, eb, eo, emin, emax);
            for (int eout = emin - 4; eout <= emax + 18; eout++) {
                for (int64_t i = 0; i < n; i++) {
                    const __int128 x = (__int128)a[i] * ((__int128)1 << (ea - emin));
                    const __int128 y = (__int128)b[i] * ((__int128)1 << (eb - emin));
                    const int32_t want = ref_round128(op == FX_OP_ADD ? x + y : x - y, eout - emin);
                    int64_t sat = 0;
                    const int32_t have = fx_requant(got[i], eout - eo, &sat);
                    /* guaranteed: output exponents >= eo + 2 (round to odd), any output
                     * exponent when the larger-exponent element is nonzero (it saturates
                     * either way), and everything when that whole operand is zero */
                    const int guaranteed = eout >= eo + 2 || big[i] != 0 || big_all_zero;
                    if (guaranteed && have != want) bad++;
                }
            }
            CHECK(bad == 0, "%s ea=%d eb=%d: %lld wrong roundings", k->name, ea, eb, (long long)bad);
        }
        free(got);
    }
}

static void test_addsub(void)
{
    test_rng r;
    test_rng_seed(&r, 34);
    enum { N = 97 };
    int16_t a[N], b[N], zeros[N];
    memset(zeros, 0, sizeof zeros);
    for (int op = FX_OP_ADD; op <= FX_OP_SUB; op++) {
        for (int gap = 0; gap <= 100; gap++) {
            for (int rep = 0; rep < 3; rep++) {
                const int emin = (int)test_rng_range(&r, -128, 127 - gap);
                const int swap = rep % 2;
                const int ea = swap ? emin + gap : emin, eb = swap ? emin : emin + gap;
                fill16(a, N, &r, 20);
                fill16(b, N, &r, 20);
                check_addsub((fx_op)op, a, ea, b, eb, N, 1);
            }
            /* the larger-exponent operand all zero: the result is the other one */
            const int emin = (int)test_rng_range(&r, -128, 127 - gap);
            fill16(b, N, &r, 10);
            check_addsub((fx_op)op, zeros, emin + gap, b, emin, N, 1);
            check_addsub((fx_op)op, b, emin, zeros, emin + gap, N, 1);
        }
        /* large arrays (the kernels may use threads above FX_FLEX_PAR_MIN_ELEMS) */
        const int64_t n = 300000;
        int16_t *x = malloc((size_t)n * 2), *y = malloc((size_t)n * 2);
        fill16(x, n, &r, 5);
        fill16(y, n, &r, 5);
        check_addsub((fx_op)op, x, -20, y, -3, n, 2);
        check_addsub((fx_op)op, x, 90, y, 30, 20000, 2);
        free(x);
        free(y);
    }
}

int main(void)
{
    collect_kernels();
    printf("%s: matmul kernels:", NAME);
    for (int i = 0; i < g_nk[FX_OP_MATMUL]; i++) printf(" %s", g_k[FX_OP_MATMUL][i].name);
    printf("\n");
    test_unary_ops();
    test_mul();
    test_sum();
    test_addsub();
    test_matmul();
    /* the register-tile driver's paths, with its tile counts, on every level; then once more
     * with the AMX kernel where the AVX-512 level has it (measured in or not: forced here), whose
     * sums must be the same bits on the same data, 1 and 2 threads */
    fx_gemm_i16_force_kernel(FX_GEMM_I16_KERNEL_AUTO);
    fx_gemm_i16_set_amx_auto(0);
    test_matmul_paths();
    if (fx_backend_get(FX_BACKEND_AVX512)->available &&
        fx_backend_get(FX_BACKEND_AVX512)->gemm.i16_amx) {
        fx_gemm_i16_set_amx_auto(1);
        g_amx_pass = 1;
        test_matmul_paths();
        g_amx_pass = 0;
        fx_gemm_i16_set_amx_auto(0); /* the gates below are the register-tile driver's */
    }
    test_matmul_level_gates();
    test_matmul_column_threads();
    return test_finish(NAME);
}
