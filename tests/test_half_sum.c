/* SUM kernels that read fp16 and bf16 storage (kernels[FX_OP_SUM][FMT_FP16 / FMT_BF16]), called
 * directly through every available backend that has them (the AVX2 and AVX-512 levels), and
 * through tensor_sum and tensor_mean on the active backend.
 *
 * What must hold:
 *   - bit-equal to the same level's fp32 SUM kernel on the widened input (the dispatcher's
 *     fallback), Inf and signed zeros included, at 1 and 2 threads: the kernels only move the
 *     widening into their loads. A NaN result must be NaN where that kernel's is; which NaN
 *     (Inf - Inf's default NaN or an input's) is not compared: where two meet in an addition,
 *     the compiler's choice of operand order for the commutative vaddps picks it, in each
 *     instance of the code alike;
 *   - |y - r| <= (gamma_D + gamma_len(fp64)) * sum|x| per output against an fp64 reference,
 *     D = 18 + ceil(log2 len) (test_fp32_kernels.c's bound for the fp32 trees);
 *   - nothing written past out_numel;
 *   - tensor_sum and tensor_mean of fp16/bf16 tensors equal those of their fp32 copies.
 * Shapes cover every tail of the contiguous leaf (n mod 32), the column chunks' partial vectors
 * (inner mod 64), the strided tree (len > 16) and the threaded whole-array tree (len >= 2^18).
 * Values: normal, uniform, nearly constant; and a set with subnormals, signed zeros, Inf and
 * quiet and signalling NaNs. */
#include "testutil.h"

#include "core/backend.h"
#include "bf16/bf16_scalar.h"
#include "fp16/fp16_scalar.h"
#include "flexpoint.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U 0x1p-24
#define U64 0x1p-53
#define GUARD 67
static const uint32_t GUARD_BITS = 0x7fa5a5a5u;

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

static double gamma_u(double n, double u) { return n * u / (1.0 - n * u); }

static int ceil_log2(int64_t n)
{
    int l = 0;
    while (((int64_t)1 << l) < n) l++;
    return l;
}

static uint16_t half_of(fmt_t f, float x)
{
    return f == FMT_FP16 ? fx_fp16_from_bits(bits_of(x)) : fx_bf16_from_bits(bits_of(x));
}

static float widen(fmt_t f, uint16_t h)
{
    return float_of(f == FMT_FP16 ? fx_fp16_to_bits(h) : fx_bf16_to_bits(h));
}

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

static int run_sum(fx_kernel k, const void *in, fmt_t f, int64_t outer, int64_t len,
                   int64_t inner, int nthreads, float *y)
{
    fx_op_call c;
    memset(&c, 0, sizeof c);
    c.op = FX_OP_SUM;
    c.nin = 1;
    c.in[0].fmt = f;
    c.in[0].data = in;
    c.in[0].ndim = 1;
    c.in[0].shape[0] = outer * len * inner;
    c.in[0].strides[0] = 1;
    c.out_f32 = y;
    c.out_numel = outer * inner;
    c.out_ndim = 1;
    c.out_shape[0] = outer * inner;
    c.red_outer = outer;
    c.red_len = len;
    c.red_inner = inner;
    c.nthreads = nthreads;
    return k(&c);
}

/* data: 0 normal, 1 uniform [0, 1), 2 nearly constant, 3 special values mixed in */
static float sample(int data, test_rng *rng)
{
    if (data == 1) return (float)test_rng_uniform(rng);
    if (data == 2) return (float)(1.1 * (1.0 + 1e-3 * test_rng_uniform(rng)));
    const double x = test_rng_normal(rng);
    if (data == 3) {
        static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                           0x7fc00000u, 0xffc12000u, 0x7f812000u, 0x00012000u,
                                           0x80340000u, 0x33800000u};
        const uint64_t r = test_rng_u64(rng) % 64;
        if (r < sizeof special / sizeof special[0]) return float_of(special[r]);
        return (float)(x * 1e-6); /* fp16 subnormals */
    }
    return (float)x;
}

static void check_half_sum(const fx_backend *b, fmt_t f, int64_t outer, int64_t len,
                           int64_t inner, int data, test_rng *rng)
{
    const int64_t n_in = outer * len * inner, n_out = outer * inner;
    uint16_t *h = malloc(sizeof *h * (size_t)(n_in > 0 ? n_in : 1));
    float *w = malloc(sizeof *w * (size_t)(n_in > 0 ? n_in : 1));
    for (int64_t i = 0; i < n_in; i++) {
        h[i] = half_of(f, sample(data, rng));
        w[i] = widen(f, h[i]);
    }
    if (data == 3 && n_in > 2) { /* signalling NaNs (the conversion above makes quiet ones) */
        h[n_in / 2] = f == FMT_FP16 ? 0x7d01 : 0x7f81;
        h[n_in - 1] = f == FMT_FP16 ? 0xfc80 : 0xff85;
        w[n_in / 2] = widen(f, h[n_in / 2]);
        w[n_in - 1] = widen(f, h[n_in - 1]);
    }
    double *ref = calloc((size_t)n_out + 1, sizeof *ref), *mag = calloc((size_t)n_out + 1, sizeof *mag);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < len; k++)
            for (int64_t i = 0; i < inner; i++) {
                const double x = w[(o * len + k) * inner + i];
                ref[o * inner + i] += x;
                mag[o * inner + i] += fabs(x);
            }
    const int depth = 18 + ceil_log2(len);
    const double tol = gamma_u(depth, U) + gamma_u((double)len, U64);
    const char *fn = fmt_name(f);
    for (int nt = 1; nt <= 2; nt++) {
        float *y = out_alloc(n_out), *yw = out_alloc(n_out);
        CHECK_STATUS(run_sum(b->kernels[FX_OP_SUM][f], h, f, outer, len, inner, nt, y), FX_OK);
        CHECK_STATUS(run_sum(b->kernels[FX_OP_SUM][FMT_FP32], w, FMT_FP32, outer, len, inner, nt,
                             yw),
                     FX_OK);
        int64_t differ = 0;
        for (int64_t j = 0; j < n_out; j++)
            differ += isnan(y[j]) ? !isnan(yw[j]) : bits_of(y[j]) != bits_of(yw[j]);
        CHECK(differ == 0,
              "%s %s sum (%lld,%lld,%lld) data %d threads %d: %lld outputs differ from the fp32 "
              "kernel's on the widened input", b->name, fn, (long long)outer, (long long)len,
              (long long)inner, data, nt, (long long)differ);
        CHECK(guard_intact(y, n_out), "%s %s sum: wrote past out_numel", b->name, fn);
        int64_t bad = 0;
        for (int64_t j = 0; j < n_out; j++) {
            if (isnan(ref[j]) || isinf(ref[j])) {
                /* non-finite: the same class as the reference */
                if (isnan(ref[j]) ? !isnan(y[j]) : (y[j] != (float)ref[j])) bad++;
                continue;
            }
            if (!(fabs((double)y[j] - ref[j]) <= tol * mag[j])) bad++;
        }
        CHECK(bad == 0, "%s %s sum (%lld,%lld,%lld) data %d threads %d: %lld outputs beyond "
              "gamma_%d of the fp64 sum", b->name, fn, (long long)outer, (long long)len,
              (long long)inner, data, nt, (long long)bad, depth);
        free(y);
        free(yw);
    }
    free(h);
    free(w);
    free(ref);
    free(mag);
}

/* tensor_sum / tensor_mean of a 16-bit tensor against those of its fp32 copy: the same bits */
static void check_tensor_ops(fmt_t f, test_rng *rng)
{
    const int64_t shape[3] = {5, 300, 70};
    tensor_t *h = tensor_new(f, 3, shape), *w = tensor_new(FMT_FP32, 3, shape);
    const int64_t n = shape[0] * shape[1] * shape[2];
    float *v = malloc(sizeof *v * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = (float)test_rng_normal(rng);
    CHECK_STATUS(tensor_from_f32(h, v), FX_OK);
    CHECK_STATUS(tensor_to_f32(h, v), FX_OK); /* the widened values */
    CHECK_STATUS(tensor_from_f32(w, v), FX_OK);
    for (int axis = -1; axis < 3; axis++) {
        const int ax = axis < 0 ? FX_AXIS_ALL : axis;
        int64_t os[3];
        int od = 0;
        for (int d = 0; d < 3; d++)
            if (d != axis) os[od++] = shape[d];
        if (axis < 0) {
            od = 1;
            os[0] = 1;
        }
        for (int mean = 0; mean <= 1; mean++) {
            tensor_t *a = tensor_new(FMT_FP32, od, os), *b = tensor_new(FMT_FP32, od, os);
            CHECK_STATUS(mean ? tensor_mean(a, h, ax) : tensor_sum(a, h, ax), FX_OK);
            CHECK_STATUS(mean ? tensor_mean(b, w, ax) : tensor_sum(b, w, ax), FX_OK);
            const int64_t m = tensor_numel(a);
            float *ya = malloc(sizeof *ya * (size_t)m), *yb = malloc(sizeof *yb * (size_t)m);
            CHECK_STATUS(tensor_to_f32(a, ya), FX_OK);
            CHECK_STATUS(tensor_to_f32(b, yb), FX_OK);
            CHECK(memcmp(ya, yb, sizeof *ya * (size_t)m) == 0,
                  "tensor_%s of %s over axis %d differs from the fp32 copy's",
                  mean ? "mean" : "sum", fmt_name(f), axis);
            free(ya);
            free(yb);
            tensor_free(a);
            tensor_free(b);
        }
    }
    free(v);
    tensor_free(h);
    tensor_free(w);
}

int main(void)
{
    int tested = 0;
    test_rng rng;
    test_rng_seed(&rng, 4242);
    for (int bi = 0; bi < FX_BACKEND_COUNT; bi++) {
        const fx_backend *b = fx_backend_get(bi);
        if (!b || !b->available) continue;
        for (int fi = 0; fi < 2; fi++) {
            const fmt_t f = fi ? FMT_BF16 : FMT_FP16;
            if (!b->kernels[FX_OP_SUM][f]) continue;
            printf("backend %s: %s SUM\n", b->name, fmt_name(f));
            tested++;
            /* contiguous rows: every leaf tail, the block tree */
            for (int64_t len = 0; len <= 70; len++) check_half_sum(b, f, 2, len, 1, 0, &rng);
            check_half_sum(b, f, 3, 129, 1, 0, &rng);
            check_half_sum(b, f, 4, 196, 1, 0, &rng); /* the CNN's conv2 bias gradient rows */
            check_half_sum(b, f, 1000, 300, 1, 1, &rng);
            check_half_sum(b, f, 1, (1 << 18) + 77, 1, 2, &rng); /* threaded whole-array tree */
            check_half_sum(b, f, 1, (1 << 18) + 5, 1, 0, &rng);
            /* columns: partial vectors of the chunks, short and tree-split lengths */
            for (int64_t inner = 1; inner <= 72; inner += 7)
                check_half_sum(b, f, 2, 17, inner, 0, &rng);
            check_half_sum(b, f, 3, 33, 65, 0, &rng);
            check_half_sum(b, f, 1, 128, 200, 1, &rng);
            check_half_sum(b, f, 64, 50, 200, 0, &rng);
            /* non-finite and subnormal values */
            check_half_sum(b, f, 7, 100, 1, 3, &rng);
            check_half_sum(b, f, 3, 40, 37, 3, &rng);
        }
    }
    check_tensor_ops(FMT_FP16, &rng);
    check_tensor_ops(FMT_BF16, &rng);
    printf("backends with 16-bit SUM kernels: %d\n", tested);
    return test_finish("test_half_sum");
}
