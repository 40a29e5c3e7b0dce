/* fp32 compute kernels (src/fp32), called directly through every available backend's table,
 * against references computed here in fp64.
 *
 * Bounds (u = 2^-24, gamma_n = n u / (1 - n u)):
 *   COPY                 bit-equal to the input (NaN payloads included).
 *   ADD, SUB, MUL, SCALE bit-equal to (float)((double)a op (double)b): one correctly rounded
 *                        fp32 operation (double rounding via fp64 is exact for + - *, since
 *                        53 >= 2*24 + 2). NaN where the fp64 result is NaN; Inf propagates.
 *   RELU                 x > 0 or NaN: the same bits; otherwise +0 (bits 0).
 *   SUM                  |y - r| <= gamma_D * sum|x| per output, D = 18 + ceil(log2 n): the
 *                        kernels' documented depth is <= max(18, 11 + ceil(log2 n)) on every
 *                        level. A plain running sum breaks this on the 2^20-element cases.
 *   MATMUL               |y - r| <= (gamma_K + gamma_K(fp64)) * (|A||B|) per output: the
 *                        recursive dot product bound, plus the fp64 reference's own error.
 *                        Normwise, max|y - r| / max|r| <= 4 K u is checked as well.
 * SUM and MATMUL results with 1 and 2 threads must be bit-identical.
 * Every matmul shape runs with row-major, transposed, sliced (step 2) and padded operands, and
 * with 1 and 2 threads, whose results must be bit-identical (each output is one k-ordered chain).
 * The two FMA levels (avx2, avx512) must also agree bit for bit with each other.
 * Outputs carry guard elements after out_numel that must stay untouched.
 */
#include "testutil.h"

#include "core/backend.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U 0x1p-24
#define U64 0x1p-53
#define GUARD 67
static const uint32_t GUARD_BITS = 0x7fa5a5a5u; /* a NaN pattern no kernel produces */

static double gamma_u(double n, double u) { return n * u / (1.0 - n * u); }

static uint32_t bits_of(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static float float_of(uint32_t b)
{
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

static int ceil_log2(int64_t n)
{
    int l = 0;
    while (((int64_t)1 << l) < n) l++;
    return l;
}

/* Output buffer with GUARD sentinel elements after n. */
static float *out_alloc(int64_t n)
{
    float *y = malloc(sizeof(float) * (size_t)(n + GUARD));
    for (int64_t i = 0; i < n + GUARD; i++) y[i] = float_of(GUARD_BITS);
    return y;
}

static int guard_intact(const float *y, int64_t n)
{
    for (int64_t i = n; i < n + GUARD; i++)
        if (bits_of(y[i]) != GUARD_BITS) return 0;
    return 1;
}

static fx_op_call call_new(fx_op op, float *out, int64_t out_numel, int nthreads)
{
    fx_op_call c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.out_f32 = out;
    c.out_numel = out_numel;
    c.out_ndim = 1;
    c.out_shape[0] = out_numel;
    c.nthreads = nthreads;
    return c;
}

static void set_operand(fx_operand *o, const float *data, int ndim, const int64_t *shape,
                        const int64_t *strides)
{
    memset(o, 0, sizeof *o);
    o->data = data;
    o->fmt = FMT_FP32;
    o->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        o->shape[d] = shape[d];
        o->strides[d] = strides[d];
    }
}

static void set_contig(fx_operand *o, const float *data, int64_t n)
{
    const int64_t one = 1;
    set_operand(o, data, 1, &n, &one);
}

/* Values that stress elementwise rounding: wide exponent range, subnormals, specials. */
static float special_value(test_rng *r)
{
    static const uint32_t specials[] = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
        0x7f812345u, /* signalling NaN with payload */
        0x00000001u, 0x807fffffu, 0x00800000u, 0x7f7fffffu, 0xff7fffffu, 0x3f800000u,
        0x3f800001u, 0x33800000u, 0x4b800000u,
    };
    const uint64_t k = test_rng_u64(r) % 4;
    if (k == 0) return float_of(specials[test_rng_u64(r) % (sizeof specials / sizeof specials[0])]);
    if (k == 1) return float_of((uint32_t)test_rng_u64(r)); /* any bit pattern */
    return (float)ldexp(test_rng_normal(r), (int)test_rng_range(r, -30, 30));
}

/* ---- elementwise ------------------------------------------------------------------------ */

static void check_elementwise(const fx_backend *b, int64_t n, int nthreads, test_rng *rng)
{
    /* inputs start one float past an allocation to exercise unaligned vector loads */
    float *abuf = malloc(sizeof(float) * (size_t)(n + 1)), *bbuf = malloc(sizeof(float) * (size_t)(n + 1));
    float *a = abuf + 1, *bb = bbuf + 1;
    for (int64_t i = 0; i < n; i++) {
        a[i] = special_value(rng);
        bb[i] = special_value(rng);
    }
    const fx_op binops[] = {FX_OP_ADD, FX_OP_SUB, FX_OP_MUL};
    for (int k = 0; k < 3; k++) {
        const fx_op op = binops[k];
        float *y = out_alloc(n);
        fx_op_call c = call_new(op, y, n, nthreads);
        c.nin = 2;
        set_contig(&c.in[0], a, n);
        set_contig(&c.in[1], bb, n);
        CHECK_STATUS(b->kernels[op][FMT_FP32](&c), FX_OK);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++) {
            const double x = a[i], z = bb[i];
            const float ref = (float)(op == FX_OP_ADD ? x + z : op == FX_OP_SUB ? x - z : x * z);
            const int ok = isnan(ref) ? isnan(y[i]) : bits_of(y[i]) == bits_of(ref);
            if (!ok && bad++ == 0) first = i;
        }
        CHECK(bad == 0, "%s op %d n=%lld threads=%d: %lld mismatches, first at %lld: %a op %a = %a",
              b->name, (int)op, (long long)n, nthreads, (long long)bad, (long long)first,
              first >= 0 ? a[first] : 0.0, first >= 0 ? bb[first] : 0.0,
              first >= 0 ? y[first] : 0.0);
        CHECK(guard_intact(y, n), "%s op %d n=%lld: wrote past out_numel", b->name, (int)op,
              (long long)n);
        free(y);
    }

    const float scalars[] = {2.5f, -0.1f, 0.0f, 1e-30f, 3e38f, -1.0f};
    for (size_t s = 0; s < sizeof scalars / sizeof scalars[0]; s++) {
        float *y = out_alloc(n);
        fx_op_call c = call_new(FX_OP_SCALE, y, n, nthreads);
        c.nin = 1;
        c.scalar_f32 = scalars[s];
        set_contig(&c.in[0], a, n);
        CHECK_STATUS(b->kernels[FX_OP_SCALE][FMT_FP32](&c), FX_OK);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            const float ref = (float)((double)a[i] * (double)scalars[s]);
            bad += !(isnan(ref) ? isnan(y[i]) : bits_of(y[i]) == bits_of(ref));
        }
        CHECK(bad == 0, "%s scale by %g n=%lld: %lld mismatches", b->name, (double)scalars[s],
              (long long)n, (long long)bad);
        CHECK(guard_intact(y, n), "%s scale n=%lld: wrote past out_numel", b->name, (long long)n);
        free(y);
    }

    {
        float *y = out_alloc(n);
        fx_op_call c = call_new(FX_OP_RELU, y, n, nthreads);
        c.nin = 1;
        set_contig(&c.in[0], a, n);
        CHECK_STATUS(b->kernels[FX_OP_RELU][FMT_FP32](&c), FX_OK);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            const uint32_t want = (a[i] > 0.0f || isnan(a[i])) ? bits_of(a[i]) : 0u;
            bad += bits_of(y[i]) != want;
        }
        CHECK(bad == 0, "%s relu n=%lld: %lld mismatches", b->name, (long long)n, (long long)bad);
        CHECK(guard_intact(y, n), "%s relu n=%lld: wrote past out_numel", b->name, (long long)n);
        free(y);
    }
    {
        float *y = out_alloc(n);
        fx_op_call c = call_new(FX_OP_COPY, y, n, nthreads);
        c.nin = 1;
        set_contig(&c.in[0], a, n);
        CHECK_STATUS(b->kernels[FX_OP_COPY][FMT_FP32](&c), FX_OK);
        CHECK(n == 0 || memcmp(y, a, sizeof(float) * (size_t)n) == 0, "%s copy n=%lld: bits differ",
              b->name, (long long)n);
        CHECK(guard_intact(y, n), "%s copy n=%lld: wrote past out_numel", b->name, (long long)n);
        free(y);
    }
    free(abuf);
    free(bbuf);
}

/* NaN and Inf propagate through add/sub/mul/scale in every lane position of a vector. */
static void check_nonfinite_propagation(const fx_backend *b)
{
    enum { N = 37 };
    float a[N], z[N];
    for (int pos = 0; pos < N; pos++) {
        for (int i = 0; i < N; i++) a[i] = z[i] = 1.5f;
        a[pos] = NAN;
        z[(pos + 5) % N] = INFINITY;
        const fx_op ops[] = {FX_OP_ADD, FX_OP_SUB, FX_OP_MUL, FX_OP_SCALE};
        for (int k = 0; k < 4; k++) {
            float y[N];
            fx_op_call c = call_new(ops[k], y, N, 1);
            c.nin = ops[k] == FX_OP_SCALE ? 1 : 2;
            c.scalar_f32 = 3.0f;
            set_contig(&c.in[0], a, N);
            set_contig(&c.in[1], z, N);
            CHECK_STATUS(b->kernels[ops[k]][FMT_FP32](&c), FX_OK);
            CHECK(isnan(y[pos]), "%s op %d: NaN at %d lost (%g)", b->name, (int)ops[k], pos,
                  (double)y[pos]);
            if (ops[k] != FX_OP_SCALE && (pos + 5) % N != pos) {
                const float want = ops[k] == FX_OP_SUB ? -INFINITY : INFINITY;
                CHECK(y[(pos + 5) % N] == want, "%s op %d: Inf at %d gave %g", b->name,
                      (int)ops[k], (pos + 5) % N, (double)y[(pos + 5) % N]);
            }
        }
    }
}

/* Two NaN operands: the result is the first one, quieted, on every backend and lane (the
 * scalar backend's a op b on x86; the SIMD kernels must not let the compiler's operand order
 * decide). One NaN: that NaN, quieted. */
static void check_nan_first(const fx_backend *b)
{
    enum { N = 37 };
    const uint32_t an[4] = {0xFFC00001u, 0x7F800003u, 0x7FC12345u, 0xFFA00000u};
    const uint32_t bn[4] = {0x7FC00000u, 0xFFC00002u, 0xFF800005u, 0x3F800000u};
    float a[N], z[N];
    for (int i = 0; i < N; i++) {
        uint32_t ua = an[i % 4], ub = bn[(i / 4) % 4];
        memcpy(&a[i], &ua, 4);
        memcpy(&z[i], &ub, 4);
    }
    const fx_op ops[] = {FX_OP_ADD, FX_OP_SUB, FX_OP_MUL};
    for (int k = 0; k < 3; k++) {
        float y[N];
        fx_op_call c = call_new(ops[k], y, N, 1);
        c.nin = 2;
        set_contig(&c.in[0], a, N);
        set_contig(&c.in[1], z, N);
        CHECK_STATUS(b->kernels[ops[k]][FMT_FP32](&c), FX_OK);
        for (int i = 0; i < N; i++) {
            const uint32_t want = an[i % 4] | 0x00400000u;
            CHECK(bits_of(y[i]) == want, "%s op %d lane %d: %08x, want the first NaN %08x",
                  b->name, (int)ops[k], i, bits_of(y[i]), want);
        }
        /* only the second operand NaN: it survives, quieted */
        float one[N], y2[N];
        for (int i = 0; i < N; i++) one[i] = 2.0f;
        fx_op_call c2 = call_new(ops[k], y2, N, 1);
        c2.nin = 2;
        set_contig(&c2.in[0], one, N);
        set_contig(&c2.in[1], z, N);
        CHECK_STATUS(b->kernels[ops[k]][FMT_FP32](&c2), FX_OK);
        for (int i = 0; i < N; i++) {
            const uint32_t zb = bn[(i / 4) % 4];
            if ((zb & 0x7FFFFFFFu) <= 0x7F800000u) continue;
            CHECK(bits_of(y2[i]) == (zb | 0x00400000u), "%s op %d lane %d: %08x from b's NaN "
                  "%08x", b->name, (int)ops[k], i, bits_of(y2[i]), zb);
        }
    }
}

/* ---- sum -------------------------------------------------------------------------------- */

static void check_sum(const fx_backend *b, int64_t outer, int64_t len, int64_t inner, int data,
                      test_rng *rng)
{
    const int64_t n_in = outer * len * inner, n_out = outer * inner;
    float *a = malloc(sizeof(float) * (size_t)(n_in > 0 ? n_in : 1));
    /* data: 0 normal; 1 uniform [0, 1); 2 nearly constant 1.1, where a running sum drifts
     * systematically (each addition to a large partial sum rounds the same way) */
    for (int64_t i = 0; i < n_in; i++)
        a[i] = data == 0   ? (float)test_rng_normal(rng)
               : data == 1 ? (float)test_rng_uniform(rng)
                           : (float)(1.1 * (1.0 + 1e-3 * test_rng_uniform(rng)));
    double *ref = calloc((size_t)n_out + 1, sizeof(double)), *abs_ref = calloc((size_t)n_out + 1, sizeof(double));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < len; k++)
            for (int64_t i = 0; i < inner; i++) {
                const double x = a[(o * len + k) * inner + i];
                ref[o * inner + i] += x;
                abs_ref[o * inner + i] += fabs(x);
            }
    const int depth = 18 + ceil_log2(len);
    /* the fp64 reference is itself a running sum: allow its gamma_len as well */
    const double tol = gamma_u(depth, U) + gamma_u((double)len, U64);

    float *y1 = NULL;
    for (int nthreads = 1; nthreads <= 2; nthreads++) {
        float *y = out_alloc(n_out);
        fx_op_call c = call_new(FX_OP_SUM, y, n_out, nthreads);
        c.nin = 1;
        set_contig(&c.in[0], a, n_in);
        c.red_outer = outer;
        c.red_len = len;
        c.red_inner = inner;
        CHECK_STATUS(b->kernels[FX_OP_SUM][FMT_FP32](&c), FX_OK);
        double worst = 0.0;
        int64_t bad = 0;
        for (int64_t j = 0; j < n_out; j++) {
            const double err = fabs((double)y[j] - ref[j]);
            if (!(err <= tol * abs_ref[j])) bad++;
            if (abs_ref[j] > 0 && err / (abs_ref[j] * U) > worst) worst = err / (abs_ref[j] * U);
        }
        CHECK(bad == 0, "%s sum (%lld,%lld,%lld) threads=%d: %lld outputs beyond gamma_%d; worst "
              "%.2f u*sum|x|", b->name, (long long)outer, (long long)len, (long long)inner,
              nthreads, (long long)bad, depth, worst);
        CHECK(guard_intact(y, n_out), "%s sum: wrote past out_numel", b->name);
        if (len >= 100000 && nthreads == 1)
            printf("  %s sum (%lld,%lld,%lld): worst error %.2f u*sum|x| (bound %d u)\n", b->name,
                   (long long)outer, (long long)len, (long long)inner, worst, depth);
        if (nthreads == 1) {
            y1 = y;
        } else {
            CHECK(memcmp(y1, y, sizeof(float) * (size_t)n_out) == 0,
                  "%s sum (%lld,%lld,%lld): 1 and 2 threads differ", b->name, (long long)outer,
                  (long long)len, (long long)inner);
            free(y);
        }
    }
    free(y1);
    free(a);
    free(ref);
    free(abs_ref);
}

static void check_sum_nonfinite(const fx_backend *b)
{
    enum { LEN = 300 };
    float a[2 * LEN];
    for (int i = 0; i < 2 * LEN; i++) a[i] = 0.25f;
    a[123] = NAN;
    a[LEN + 299] = INFINITY;
    float y[2];
    fx_op_call c = call_new(FX_OP_SUM, y, 2, 1);
    c.nin = 1;
    set_contig(&c.in[0], a, 2 * LEN);
    c.red_outer = 2;
    c.red_len = LEN;
    c.red_inner = 1;
    CHECK_STATUS(b->kernels[FX_OP_SUM][FMT_FP32](&c), FX_OK);
    CHECK(isnan(y[0]) && y[1] == INFINITY, "%s sum: NaN/Inf not propagated (%g, %g)", b->name,
          (double)y[0], (double)y[1]);
}

/* ---- matmul ------------------------------------------------------------------------------ */

typedef enum { LAYOUT_ROW, LAYOUT_TRANS, LAYOUT_SLICED, LAYOUT_PADDED_TRANS, LAYOUT_COUNT } layout_t;
static const char *const layout_names[] = {"row-major", "transposed", "sliced step 2",
                                           "padded+transposed"};

/* Lay out the logical rows x cols matrix m (row-major) in a new buffer with the layout's
 * strides; returns the buffer and sets *s0, *s1 (element strides of the view). */
static float *lay_out(const float *m, int64_t rows, int64_t cols, layout_t layout, int64_t *s0,
                      int64_t *s1)
{
    int64_t size;
    switch (layout) {
    case LAYOUT_TRANS: /* storage [cols, rows], viewed transposed */
        *s0 = 1, *s1 = rows, size = rows * cols;
        break;
    case LAYOUT_SLICED: /* storage [rows, 2*cols + 1], every other column */
        *s0 = 2 * cols + 1, *s1 = 2, size = rows * (2 * cols + 1);
        break;
    case LAYOUT_PADDED_TRANS: /* storage [cols, rows + 3], viewed transposed */
        *s0 = 1, *s1 = rows + 3, size = cols * (rows + 3);
        break;
    default:
        *s0 = cols, *s1 = 1, size = rows * cols;
        break;
    }
    float *buf = malloc(sizeof(float) * (size_t)(size > 0 ? size : 1));
    for (int64_t i = 0; i < size; i++) buf[i] = NAN; /* padding must never be read */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++) buf[r * *s0 + q * *s1] = m[r * cols + q];
    return buf;
}

typedef struct mm_case {
    int64_t m, k, n;
} mm_case;

static const mm_case mm_cases[] = {
    {1, 1, 1}, {7, 13, 5}, {17, 31, 33}, {64, 64, 64}, {65, 97, 129}, {200, 1, 300}, {1, 500, 1},
    /* micro-tile edges of the levels (4x8, 6x16, 12x32): tile-1, tile, tile+1 */
    {3, 5, 7}, {4, 8, 8}, {5, 9, 9}, {5, 7, 15}, {6, 16, 16}, {7, 3, 17}, {11, 17, 31},
    {12, 16, 32}, {13, 9, 33}, {23, 2, 63}, {24, 4, 64}, {25, 6, 65},
    /* depth blocks (kc = 256, 384): the k chain continues across blocks */
    {12, 255, 32}, {12, 256, 32}, {12, 257, 32}, {13, 383, 33}, {12, 384, 32}, {25, 385, 65},
    {6, 769, 16},
    /* a last row panel of 2, 4 or 8 rows (AVX2: 20 = 3 x 6 + 2, 16 = 2 x 6 + 4; AVX-512:
     * 20 = 12 + 8, 16 = 12 + 4, 32 = 2 x 12 + 8), whole column panels and C written in rows:
     * the levels' partial panel kernels (fx_f32_gemm_params.kernel_rows) */
    {20, 37, 64}, {16, 29, 96}, {32, 45, 64}, {4, 33, 64}, {8, 19, 32}, {2, 21, 48},
    /* ... over more than one depth block (the later blocks accumulate into C) */
    {20, 800, 64}, {16, 400, 32},
    /* row blocks (mc = 256, 1200) and column blocks (nc = 512) */
    {257, 3, 9}, {1201, 20, 40}, {7, 20, 513}, {30, 40, 1030},
    /* large enough for two threads: column split, and a tall thin product (row-group split) */
    {130, 520, 260}, {2000, 64, 20}, {40, 100, 1030},
    /* narrow C (few columns, many rows): kernels may compute C^T = B^T A^T instead */
    {128, 30, 10}, {300, 50, 3}, {97, 40, 1}, {500, 700, 10}, {3000, 100, 10},
    /* empty */
    {3, 0, 4}, {0, 5, 3}, {4, 6, 0},
};

static void check_matmul_case(const fx_backend *b, const mm_case *mc, test_rng *rng)
{
    const int64_t M = mc->m, K = mc->k, N = mc->n;
    float *A = malloc(sizeof(float) * (size_t)(M * K + 1));
    float *B = malloc(sizeof(float) * (size_t)(K * N + 1));
    for (int64_t i = 0; i < M * K; i++) A[i] = (float)test_rng_normal(rng);
    for (int64_t i = 0; i < K * N; i++) B[i] = (float)test_rng_normal(rng);
    double *ref = calloc((size_t)(M * N + 1), sizeof(double));
    double *abs_ref = calloc((size_t)(M * N + 1), sizeof(double));
    double max_ref = 0.0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0.0, sa = 0.0;
            for (int64_t k = 0; k < K; k++) {
                const double p = (double)A[i * K + k] * (double)B[k * N + j]; /* exact */
                s += p;
                sa += fabs(p);
            }
            ref[i * N + j] = s;
            abs_ref[i * N + j] = sa;
            if (fabs(s) > max_ref) max_ref = fabs(s);
        }
    const double tol = gamma_u((double)K, U) + gamma_u((double)K, U64);

    for (int la = 0; la < LAYOUT_COUNT; la++) {
        const int lb = (la + 1) % LAYOUT_COUNT; /* every pairing of the two operands' layouts */
        int64_t as0, as1, bs0, bs1;
        float *Ab = lay_out(A, M, K, (layout_t)la, &as0, &as1);
        float *Bb = lay_out(B, K, N, (layout_t)lb, &bs0, &bs1);
        float *y1 = NULL;
        for (int nthreads = 1; nthreads <= 2; nthreads++) {
            float *y = out_alloc(M * N);
            fx_op_call c = call_new(FX_OP_MATMUL, y, M * N, nthreads);
            c.nin = 2;
            c.out_ndim = 2;
            c.out_shape[0] = M;
            c.out_shape[1] = N;
            const int64_t ashape[2] = {M, K}, astr[2] = {as0, as1};
            const int64_t bshape[2] = {K, N}, bstr[2] = {bs0, bs1};
            set_operand(&c.in[0], Ab, 2, ashape, astr);
            set_operand(&c.in[1], Bb, 2, bshape, bstr);
            CHECK_STATUS(b->kernels[FX_OP_MATMUL][FMT_FP32](&c), FX_OK);
            int64_t bad = 0;
            double worst_norm = 0.0;
            for (int64_t j = 0; j < M * N; j++) {
                const double err = fabs((double)y[j] - ref[j]);
                if (!(err <= tol * abs_ref[j])) bad++;
                if (max_ref > 0 && err / max_ref > worst_norm) worst_norm = err / max_ref;
            }
            CHECK(bad == 0, "%s matmul %lldx%lldx%lld A %s B %s threads=%d: %lld outputs beyond "
                  "gamma_K|A||B| (normwise %.2f u)", b->name, (long long)M, (long long)K,
                  (long long)N, layout_names[la], layout_names[lb], nthreads, (long long)bad,
                  worst_norm / U);
            CHECK(worst_norm <= (double)(K > 0 ? K : 1) * U * 4.0 || max_ref == 0.0,
                  "%s matmul %lldx%lldx%lld: normwise error %.2f u above 4K u", b->name,
                  (long long)M, (long long)K, (long long)N, worst_norm / U);
            CHECK(guard_intact(y, M * N), "%s matmul %lldx%lldx%lld: wrote past out_numel",
                  b->name, (long long)M, (long long)K, (long long)N);
            if (nthreads == 1) {
                y1 = y;
            } else {
                CHECK(M * N == 0 || memcmp(y1, y, sizeof(float) * (size_t)(M * N)) == 0,
                      "%s matmul %lldx%lldx%lld: 1 and 2 threads differ", b->name, (long long)M,
                      (long long)K, (long long)N);
                free(y);
            }
        }
        free(y1);
        free(Ab);
        free(Bb);
    }
    free(A);
    free(B);
    free(ref);
    free(abs_ref);
}

/* A NaN in A poisons exactly its row of C; an Inf in B its column (finite A, no 0*Inf). */
static void check_matmul_nonfinite(const fx_backend *b)
{
    enum { M = 14, K = 20, N = 35 };
    float A[M * K], B[K * N], y[M * N];
    for (int i = 0; i < M * K; i++) A[i] = 0.5f + (float)(i % 7);
    for (int i = 0; i < K * N; i++) B[i] = 1.0f + (float)(i % 5);
    A[3 * K + 11] = NAN;
    B[7 * N + 33] = INFINITY;
    fx_op_call c = call_new(FX_OP_MATMUL, y, M * N, 1);
    c.nin = 2;
    const int64_t ashape[2] = {M, K}, astr[2] = {K, 1}, bshape[2] = {K, N}, bstr[2] = {N, 1};
    set_operand(&c.in[0], A, 2, ashape, astr);
    set_operand(&c.in[1], B, 2, bshape, bstr);
    CHECK_STATUS(b->kernels[FX_OP_MATMUL][FMT_FP32](&c), FX_OK);
    int64_t bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const float v = y[i * N + j];
            if (i == 3) bad += !isnan(v);
            else if (j == 33) bad += v != INFINITY;
            else bad += !isfinite(v);
        }
    CHECK(bad == 0, "%s matmul: %lld outputs with wrong NaN/Inf propagation", b->name,
          (long long)bad);
}

/* The FMA levels (avx2, avx512) compute each output as the same chain of fused multiply-adds
 * over k, so they must agree bit for bit (f32_kernels.h); the scalar level rounds products
 * separately and is only held to the bound. */
static void check_matmul_fma_levels_agree(void)
{
    const mm_case cases[] = {{65, 97, 129}, {25, 385, 65}, {300, 50, 3}, {130, 520, 260}};
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++) {
        const int64_t M = cases[s].m, K = cases[s].k, N = cases[s].n;
        test_rng rng;
        test_rng_seed(&rng, 77 + s);
        float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
        for (int64_t i = 0; i < M * K; i++) A[i] = (float)test_rng_normal(&rng);
        for (int64_t i = 0; i < K * N; i++) B[i] = (float)test_rng_normal(&rng);
        int64_t as0, as1;
        float *At = lay_out(A, M, K, LAYOUT_TRANS, &as0, &as1);
        float *first = NULL;
        const char *first_name = NULL;
        for (int bi = FX_BACKEND_AVX2; bi < FX_BACKEND_COUNT; bi++) {
            const fx_backend *b = fx_backend_get(bi);
            if (!b || !b->available || !b->kernels[FX_OP_MATMUL][FMT_FP32]) continue;
            float *y = out_alloc(M * N);
            fx_op_call c = call_new(FX_OP_MATMUL, y, M * N, 2);
            c.nin = 2;
            const int64_t ashape[2] = {M, K}, astr[2] = {as0, as1};
            const int64_t bshape[2] = {K, N}, bstr[2] = {N, 1};
            set_operand(&c.in[0], At, 2, ashape, astr);
            set_operand(&c.in[1], B, 2, bshape, bstr);
            CHECK_STATUS(b->kernels[FX_OP_MATMUL][FMT_FP32](&c), FX_OK);
            if (!first) {
                first = y;
                first_name = b->name;
                continue;
            }
            CHECK(memcmp(first, y, sizeof(float) * (size_t)(M * N)) == 0,
                  "matmul %lldx%lldx%lld: %s and %s differ", (long long)M, (long long)K,
                  (long long)N, first_name, b->name);
            free(y);
        }
        free(first);
        free(At);
        free(A);
        free(B);
    }
}

int main(void)
{
    int tested = 0;
    for (int bi = 0; bi < FX_BACKEND_COUNT; bi++) {
        const fx_backend *b = fx_backend_get(bi);
        CHECK(b != NULL, "backend %d missing", bi);
        if (!b) continue;
        if (!b->available) {
            printf("backend %s: not available on this CPU, skipped\n", b->name);
            continue;
        }
        int complete = 1;
        for (int op = 0; op < FX_OP_STAGE_COUNT; op++) complete &= b->kernels[op][FMT_FP32] != NULL;
        CHECK(complete, "backend %s: an FP32 kernel slot is empty", b->name);
        if (!complete) continue;
        printf("backend %s\n", b->name);
        tested++;
        test_rng rng;
        test_rng_seed(&rng, 1000 + (uint64_t)bi);

        const int64_t ew_sizes[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000,
                                    (1 << 19) + 5};
        for (size_t s = 0; s < sizeof ew_sizes / sizeof ew_sizes[0]; s++)
            for (int nt = 1; nt <= 2; nt++) check_elementwise(b, ew_sizes[s], nt, &rng);
        check_nonfinite_propagation(b);
        check_nan_first(b);

        check_sum(b, 1, 0, 1, 0, &rng);
        check_sum(b, 2, 0, 5, 0, &rng);
        check_sum(b, 1, 1, 1, 0, &rng);
        check_sum(b, 1, 7, 1, 0, &rng);
        check_sum(b, 3, 128, 1, 0, &rng);
        check_sum(b, 2, 129, 1, 0, &rng);
        check_sum(b, 1, 1000, 1, 0, &rng);
        check_sum(b, 5, 17, 3, 0, &rng);
        check_sum(b, 2, 100, 64, 0, &rng);
        check_sum(b, 3, 33, 65, 0, &rng);
        check_sum(b, 1, 16, 200, 0, &rng);
        check_sum(b, 1000, 300, 1, 0, &rng); /* enough outputs to use two threads */
        check_sum(b, 64, 50, 200, 0, &rng);
        /* long sums where a plain running sum breaks the bound (by ~2x for uniform data, by
         * orders of magnitude for nearly constant data) */
        check_sum(b, 1, (1 << 20) + 3, 1, 1, &rng);
        check_sum(b, 1, (1 << 20) + 3, 1, 2, &rng);
        for (int rep = 0; rep < 4; rep++) /* one long signed sum split over threads */
            check_sum(b, 1, 3 * (1 << 18) + 77 * rep, 1, 0, &rng);
        check_sum(b, 1, 100003, 3, 1, &rng);
        check_sum(b, 2, 100003, 3, 2, &rng);
        check_sum_nonfinite(b);

        for (size_t s = 0; s < sizeof mm_cases / sizeof mm_cases[0]; s++)
            check_matmul_case(b, &mm_cases[s], &rng);
        check_matmul_nonfinite(b);
    }
    check_matmul_fma_levels_agree();
    CHECK(tested > 0, "no backend was available");
    return test_finish("test_fp32_kernels");
}
