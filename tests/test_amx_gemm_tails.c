/* The AMX GEMMs' packing of a depth that is not whole tiles, through tensor_matmul:
 *   - bf16 (src/bf16/bf16_gemm_amx.c): a row-major B's last, partial tile of k (K % 32 != 0,
 *     K = 25-27 being a convolution's patch as a plain product) is packed by pair rows with
 *     the rows past K as zeros. The tiles then hold exactly what a product of depth K rounded
 *     up to 32 with zero rows and columns holds, and tdpbf16ps sums a tile's pairs the same
 *     way whatever they hold, so C must equal that padded product bit for bit;
 *   - int16 (src/flex/gemm_i16_amx.c): products with K <= 32 load half tiles (A 16 x 32
 *     bytes, B 8 quads). Their sums are exact, so a DFP16 output (exponent chosen exactly) must
 *     equal, mantissas and exponent, the product padded to K = 64 (whole tiles), and its
 *     values must be the fp64 product of the operands rounded once. These outputs are small,
 *     so they take the dispatcher's route: K = 32 on the AMX kernel's half tiles, K < 32 on
 *     the register tiles (a kernel against another); the large products rounded in registers
 *     at K = 16-32 are test_shared_matmul's.
 *   - both: operands given as transposed views (A with contiguous k rows, as a weight
 *     gradient's dy^T or the attention's P^T; B with contiguous k columns, as x W^T) are packed
 *     into the same tiles as their contiguous copies, so C must equal the product of those
 *     copies bit for bit, for whole tiles and tails alike.
 * Shapes: several depths around the tile edges, full and partial 16-column panels, widths of
 * more than one packing group (with the prefetch of the next group), tall products (B packed
 * whole), at 1 and 2 threads (products of at least 2^20 multiply-adds, which the kernels
 * split).
 * Skips where the CPU or the OS gives no AMX. */
#include "flexpoint.h"
#include "core/backend.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static tensor_t *new2d(fmt_t f, int64_t r, int64_t c)
{
    const int64_t sh[2] = {r, c};
    return tensor_new(f, 2, sh);
}

/* a [M, K] and b [K, N] from normal values, and their copies zero-padded to depth Kp */
typedef struct {
    float *a, *b, *ap, *bp;
} operands;

static operands draw_operands(int64_t M, int64_t N, int64_t K, int64_t Kp, uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    operands o = {calloc((size_t)(M * K), sizeof(float)), calloc((size_t)(K * N), sizeof(float)),
                  calloc((size_t)(M * Kp), sizeof(float)), calloc((size_t)(Kp * N), sizeof(float))};
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++)
            o.a[i * K + k] = o.ap[i * Kp + k] = (float)test_rng_normal(&r);
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) o.b[k * N + j] = o.bp[k * N + j] = (float)test_rng_normal(&r);
    return o;
}

static void free_operands(operands *o)
{
    free(o->a);
    free(o->b);
    free(o->ap);
    free(o->bp);
}

/* C = A B in format fmt (operands and output), into c (fp32 values) and raw (the stored
 * elements, fmt's element size each) */
static void product(fmt_t fmt, const float *a, const float *b, int64_t M, int64_t N, int64_t K,
                    float *c, void *raw)
{
    tensor_t *ta = new2d(fmt, M, K), *tb = new2d(fmt, K, N), *tc = new2d(fmt, M, N);
    CHECK_STATUS(tensor_from_f32(ta, a), FX_OK);
    CHECK_STATUS(tensor_from_f32(tb, b), FX_OK);
    CHECK_STATUS(tensor_matmul(tc, ta, tb), FX_OK);
    CHECK_STATUS(tensor_to_f32(tc, c), FX_OK);
    CHECK_STATUS(tensor_get_raw(tc, raw), FX_OK);
    tensor_free(ta);
    tensor_free(tb);
    tensor_free(tc);
}

/* The product at depth K against the zero-padded one at depth Kp, bit for bit; for DFP16 also
 * against fp64 (the exact sums rounded once into int16 mantissas at a power-of-two scale:
 * within half a unit of the largest |value| / 2^14) */
static void check_tail(fmt_t fmt, int64_t M, int64_t N, int64_t K, int64_t Kp, uint64_t seed)
{
    operands o = draw_operands(M, N, K, Kp, seed);
    const size_t esz = fmt == FMT_FP32 ? 4 : 2;
    float *c = malloc(sizeof(float) * (size_t)(M * N)), *cp = malloc(sizeof(float) * (size_t)(M * N));
    unsigned char *raw = malloc(esz * (size_t)(M * N)), *rawp = malloc(esz * (size_t)(M * N));
    for (int threads = 1; threads <= 2; threads++) {
        (void)flexpoint_set_num_threads(threads);
        CHECK(flexpoint_num_threads() == threads, "cannot run on %d threads", threads);
        product(fmt, o.a, o.b, M, N, K, c, raw);
        product(fmt, o.ap, o.bp, M, N, Kp, cp, rawp);
        CHECK(memcmp(raw, rawp, esz * (size_t)(M * N)) == 0 &&
                  memcmp(c, cp, sizeof(float) * (size_t)(M * N)) == 0,
              "%s %lldx%lldx%lld, %d threads: differs from the product padded to K = %lld",
              fmt_name(fmt), (long long)M, (long long)N, (long long)K, threads, (long long)Kp);
        if (fmt != FMT_DFP16) continue;
        /* the operands as stored (DFP16 rounds them on the way in) */
        tensor_t *ta = new2d(fmt, M, K), *tb = new2d(fmt, K, N);
        float *qa = malloc(sizeof(float) * (size_t)(M * K)), *qb = malloc(sizeof(float) * (size_t)(K * N));
        CHECK_STATUS(tensor_from_f32(ta, o.a), FX_OK);
        CHECK_STATUS(tensor_from_f32(tb, o.b), FX_OK);
        CHECK_STATUS(tensor_to_f32(ta, qa), FX_OK);
        CHECK_STATUS(tensor_to_f32(tb, qb), FX_OK);
        double big = 0;
        double *ref = malloc(sizeof(double) * (size_t)(M * N));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += (double)qa[i * K + k] * (double)qb[k * N + j];
                ref[i * N + j] = s;
                big = fabs(s) > big ? fabs(s) : big;
            }
        /* the exact exponent leaves the largest |value| at least 16383.75 units (16384 where
         * the rounding reached 32768 and the exponent went up one): half a unit is at most
         * big / 32767.5 (fp64 sums of fewer than 2^20 products of 16-bit mantissas are
         * exact) */
        const double bound = big / 32767.5 * (1.0 + 1e-9);
        long bad = 0;
        for (int64_t i = 0; i < M * N; i++) bad += fabs((double)c[i] - ref[i]) > bound;
        CHECK(bad == 0, "dfp16 %lldx%lldx%lld, %d threads: %ld values beyond %g of fp64",
              (long long)M, (long long)N, (long long)K, threads, bad, bound);
        free(ref);
        free(qa);
        free(qb);
        tensor_free(ta);
        tensor_free(tb);
    }
    free(c);
    free(cp);
    free(raw);
    free(rawp);
    free_operands(&o);
}

/* A [M, K] x B [K, N] with A and B stored as given (transA: A stored [K, M] and viewed
 * transposed; transB likewise), its stored elements into raw */
static void product_views(fmt_t fmt, const float *a, const float *b, int64_t M, int64_t N,
                          int64_t K, int transA, int transB, void *raw)
{
    float *as = malloc(sizeof(float) * (size_t)(M * K)), *bs = malloc(sizeof(float) * (size_t)(K * N));
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) as[transA ? k * M + i : i * K + k] = a[i * K + k];
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) bs[transB ? j * K + k : k * N + j] = b[k * N + j];
    tensor_t *ta = transA ? new2d(fmt, K, M) : new2d(fmt, M, K);
    tensor_t *tb = transB ? new2d(fmt, N, K) : new2d(fmt, K, N), *tc = new2d(fmt, M, N);
    CHECK_STATUS(tensor_from_f32(ta, as), FX_OK);
    CHECK_STATUS(tensor_from_f32(tb, bs), FX_OK);
    tensor_t *va = transA ? tensor_view_transpose(ta, 0, 1) : ta;
    tensor_t *vb = transB ? tensor_view_transpose(tb, 0, 1) : tb;
    CHECK(va && vb, "cannot view the operands transposed");
    CHECK_STATUS(tensor_matmul(tc, va, vb), FX_OK);
    CHECK_STATUS(tensor_get_raw(tc, raw), FX_OK);
    if (transA) tensor_free(va);
    if (transB) tensor_free(vb);
    tensor_free(ta);
    tensor_free(tb);
    tensor_free(tc);
    free(as);
    free(bs);
}

/* Every layout of the operands against the contiguous one, bit for bit, at 1 and 2 threads */
static void check_layouts(fmt_t fmt, int64_t M, int64_t N, int64_t K, uint64_t seed)
{
    operands o = draw_operands(M, N, K, K, seed);
    const size_t bytes = 2 * (size_t)(M * N);
    unsigned char *want = malloc(bytes), *got = malloc(bytes);
    for (int threads = 1; threads <= 2; threads++) {
        (void)flexpoint_set_num_threads(threads);
        product_views(fmt, o.a, o.b, M, N, K, 0, 0, want);
        for (int layout = 1; layout < 4; layout++) {
            product_views(fmt, o.a, o.b, M, N, K, layout & 1, layout >> 1, got);
            CHECK(memcmp(want, got, bytes) == 0,
                  "%s %lldx%lldx%lld, transA %d transB %d, %d threads: differs from the product "
                  "of contiguous operands",
                  fmt_name(fmt), (long long)M, (long long)N, (long long)K, layout & 1,
                  layout >> 1, threads);
        }
    }
    free(want);
    free(got);
    free_operands(&o);
}

/* Shapes for check_layouts: whole tiles; an M tail (a partial panel); a K tail; wide (B
 * streamed in groups) and tall (B packed whole); all from 2^20 multiply-adds, split over
 * threads */
static const int64_t layout_shapes[][3] = {
    {128, 160, 96}, {45, 645, 64}, {128, 160, 70}, {1300, 40, 64}, {1300, 40, 33}, {96, 645, 128}};

int main(void)
{
    const fx_backend *be = fx_backend_get(FX_BACKEND_AVX512);
    if (!be || !be->available || (!fx_cpu()->amx_bf16 && !fx_cpu()->amx_int8))
        return test_skip("test_amx_gemm_tails", "this CPU has no AMX");
    CHECK_STATUS(flexpoint_set_backend("avx512"), FX_OK);
    int ran = 0;
    uint64_t seed = 1;
    /* width 16 x 40 + 5: whole panels, a partial one, and more than one packing group; the
     * kernels split a product over threads from 2^20 multiply-adds: 40 rows of the widest */
    static const int64_t widths[] = {48, 645, 1645};
    if (flexpoint_set_kernel("matmul", FMT_BF16, "amx") == FX_OK) {
        static const int64_t depths[] = {1, 2, 7, 25, 27, 31, 33, 45, 63, 70};
        for (size_t d = 0; d < sizeof depths / sizeof depths[0]; d++)
            for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
                const int64_t K = depths[d], Kp = (K + 31) / 32 * 32;
                /* the padded product's depth must be whole tiles; K itself a multiple of 32
                 * would test nothing */
                if (Kp == K) continue;
                check_tail(FMT_BF16, widths[w] > 1000 ? 40 : 20, widths[w], K, Kp, seed++);
            }
        /* rows streamed: B packed whole (M >= N), over two threads from 2^20 multiply-adds */
        for (size_t d = 0; d < sizeof depths / sizeof depths[0]; d++)
            if (depths[d] % 32) check_tail(FMT_BF16, 1300, 40, depths[d], (depths[d] + 31) / 32 * 32, seed++);
        for (size_t i = 0; i < sizeof layout_shapes / sizeof layout_shapes[0]; i++)
            check_layouts(FMT_BF16, layout_shapes[i][0], layout_shapes[i][1], layout_shapes[i][2],
                          seed++);
        ran = 1;
    }
    if (flexpoint_set_kernel("matmul", FMT_DFP16, "amx") == FX_OK) {
        /* the products this kernel takes start at K = 16 (rounded in registers) or 32 */
        static const int64_t depths[] = {16, 17, 25, 27, 31, 32};
        for (size_t d = 0; d < sizeof depths / sizeof depths[0]; d++)
            for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
                check_tail(FMT_DFP16, widths[w] > 1000 ? 40 : 20, widths[w], depths[d], 64, seed++);
                check_tail(FMT_DFP16, 300 + 1000 * (w == 2), 40, depths[d], 64, seed++); /* rows streamed */
            }
        for (size_t i = 0; i < sizeof layout_shapes / sizeof layout_shapes[0]; i++)
            check_layouts(FMT_DFP16, layout_shapes[i][0], layout_shapes[i][1], layout_shapes[i][2],
                          seed++);
        ran = 1;
    }
    if (!ran) return test_skip("test_amx_gemm_tails", "the OS does not let this process use AMX tiles");
    return test_finish("test_amx_gemm_tails");
}
