/* The device integer GEMM (src/gpu/gpu_gemm_i16.cu) at kernel level, and the device caching
 * allocator it relies on for its buffers. The GEMM: both schemes (IMAD on
 * the CUDA cores, the int8 tensor-core split) against host int64 sums, every element bit for
 * bit, and the epilogue's statistic (largest |sum|) exactly.
 *
 * The split is where exactness could quietly fail, so the cases aim at its edges:
 *   - mantissas at the ends of the int16 range (-32768, 32767, 32640..32767, whose high byte
 *     would be 128 without the +128 offset), random full-range data, and constant matrices whose
 *     sums reach the int32 bound of a K chunk (every product 2^30, every int8 product 2^14);
 *   - K not a multiple of 16 (zero padding), M and N not multiples of 16 (padded rows), 1 x 1;
 *   - K across chunks: the chunk shrunk to 16 and 48 so the loop runs, and at the default
 *     chunk K = 40000 of -32768s (two chunks, each at its int32 extreme);
 *   - transposed operand views (the split reads along whichever dimension has unit stride).
 * FX_GPU_TEST_REDUCED=1 keeps the shapes up to 100 x 300 x 37 and one chunk-crossing case (K
 * shrunk to 16 and 48), so that compute-sanitizer's racecheck, which runs every shared-memory
 * access through its checker, finishes: every kernel and tail path still runs.
 * Skips (77) without a device or without CUDA in the build. */
#include "gpu/gpu_kernels.h"
#include "flexpoint_gpu.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#ifndef FX_HAVE_CUDA
int main(void)
{
    return test_skip("test_gpu_gemm", "this build has no CUDA backend");
}
#else

enum { FILL_RANDOM, FILL_EDGES, FILL_MIN, FILL_MAX };

static int16_t draw(test_rng *r, int fill)
{
    switch (fill) {
    case FILL_MIN: return INT16_MIN;
    case FILL_MAX: return INT16_MAX;
    case FILL_EDGES: {
        static const int16_t edges[] = {INT16_MIN, INT16_MIN + 1, -32640, -129, -128, -1, 0, 1,
                                        127, 128, 255, 256, 32639, 32640, 32700, INT16_MAX};
        return edges[test_rng_u64(r) % (sizeof edges / sizeof edges[0])];
    }
    default: return (int16_t)(test_rng_u64(r) & 0xFFFF);
    }
}

/* A logical [R, C] int16 operand stored row-major, or (trans) as the transpose [C, R] viewed
 * with swapped strides. host[] holds the logical row-major values. */
typedef struct {
    int16_t *host, *dev;
    fx_dview v;
} operand;

static int make_operand(operand *o, int64_t R, int64_t C, int trans, int fill, test_rng *r)
{
    memset(o, 0, sizeof *o);
    o->host = malloc((size_t)(R * C) * sizeof *o->host);
    int16_t *stored = malloc((size_t)(R * C) * sizeof *stored);
    if (!o->host || !stored) {
        free(stored);
        CHECK(0, "host allocation of %lld elements", (long long)(R * C));
        return 1;
    }
    for (int64_t i = 0; i < R * C; i++) o->host[i] = draw(r, fill);
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) stored[trans ? j * R + i : i * C + j] = o->host[i * C + j];
    int rc = fx_gr_malloc((size_t)(R * C) * sizeof *stored, (void **)&o->dev, "test_gpu_gemm");
    if (!rc)
        rc = fx_gr_memcpy(o->dev, stored, (size_t)(R * C) * sizeof *stored, FX_GR_H2D,
                          "test_gpu_gemm");
    free(stored);
    CHECK_STATUS(rc, FX_OK);
    o->v.base = o->dev;
    o->v.fmt = FMT_DFP16;
    o->v.ndim = 2;
    o->v.shape[0] = R;
    o->v.shape[1] = C;
    o->v.strides[0] = trans ? 1 : C;
    o->v.strides[1] = trans ? R : 1;
    o->v.contiguous = !trans;
    return rc;
}

static void free_operand(operand *o)
{
    free(o->host);
    fx_gr_free(o->dev);
}

static const char *path_name(int path)
{
    return path == FX_GK_I16_IMAD ? "imad" : path == FX_GK_I16_TC ? "tensor-core split" : "auto";
}

/* One product under every scheme (and, for the split, the given chunks), checked against the
 * host's exact sums. */
static void gemm_case(test_rng *r, int64_t M, int64_t K, int64_t N, int at, int bt, int fill,
                      const int64_t *chunks, int nchunks)
{
    operand a, b;
    if (make_operand(&a, M, K, at, fill, r) | make_operand(&b, K, N, bt, fill, r)) {
        free_operand(&a);
        free_operand(&b);
        return;
    }
    int64_t *ref = malloc((size_t)(M * N) * sizeof *ref), *got = malloc((size_t)(M * N) * sizeof *got);
    unsigned long long ref_max = 0;
    for (int64_t i = 0; i < M && ref; i++)
        for (int64_t j = 0; j < N; j++) {
            int64_t s = 0;
            for (int64_t k = 0; k < K; k++) s += (int64_t)a.host[i * K + k] * b.host[k * N + j];
            ref[i * N + j] = s;
            const unsigned long long m = s < 0 ? 0ULL - (unsigned long long)s : (unsigned long long)s;
            if (m > ref_max) ref_max = m;
        }
    int64_t *dout = NULL;
    fx_dstage_stats *dst = NULL;
    int rc = fx_gr_malloc((size_t)(M * N) * sizeof *dout, (void **)&dout, "test_gpu_gemm");
    if (!rc) rc = fx_gr_malloc(sizeof *dst, (void **)&dst, "test_gpu_gemm");
    CHECK(ref && got && rc == FX_OK, "allocations for %lldx%lldx%lld", (long long)M,
          (long long)K, (long long)N);

    const int paths[3] = {FX_GK_I16_IMAD, FX_GK_I16_TC, FX_GK_I16_AUTO};
    for (int p = 0; p < 3 && ref && got && !rc; p++)
        for (int c = 0; c < (paths[p] == FX_GK_I16_TC ? nchunks : 1); c++) {
            fx_gk_matmul_i16_set_path(paths[p]);
            fx_gk_matmul_i16_set_chunk(paths[p] == FX_GK_I16_TC ? chunks[c] : 0);
            fx_dstage_stats st;
            memset(&st, 0, sizeof st);
            int e = fx_gr_memcpy(dst, &st, sizeof st, FX_GR_H2D, "test_gpu_gemm");
            /* poison the output: every element must be written */
            for (int64_t i = 0; i < M * N; i++) got[i] = INT64_MIN + 12345;
            if (!e) e = fx_gr_memcpy(dout, got, (size_t)(M * N) * sizeof *got, FX_GR_H2D, "t");
            if (!e) e = fx_gk_matmul_i16(&a.v, &b.v, dout, dst, "test_gpu_gemm");
            if (!e) e = fx_gr_sync("test_gpu_gemm");
            if (!e) e = fx_gr_memcpy(got, dout, (size_t)(M * N) * sizeof *got, FX_GR_D2H, "t");
            if (!e) e = fx_gr_memcpy(&st, dst, sizeof st, FX_GR_D2H, "test_gpu_gemm");
            CHECK(e == FX_OK, "%lldx%lldx%lld %s: status %d (%s)", (long long)M, (long long)K,
                  (long long)N, path_name(paths[p]), e, flexpoint_last_error());
            if (e) continue;
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < M * N; i++)
                if (got[i] != ref[i] && bad++ == 0) first = i;
            CHECK(bad == 0, "%lldx%lldx%lld (a%s b%s, fill %d) %s chunk %lld: %lld of %lld sums "
                  "differ, first [%lld] = %lld, expected %lld", (long long)M, (long long)K,
                  (long long)N, at ? "^T" : "", bt ? "^T" : "", fill, path_name(paths[p]),
                  (long long)chunks[c], (long long)bad, (long long)(M * N), (long long)first,
                  first >= 0 ? (long long)got[first] : 0LL, first >= 0 ? (long long)ref[first] : 0LL);
            CHECK(st.imax == ref_max, "%lldx%lldx%lld %s: statistic max %llu, expected %llu",
                  (long long)M, (long long)K, (long long)N, path_name(paths[p]), st.imax, ref_max);
        }
    fx_gk_matmul_i16_set_path(FX_GK_I16_AUTO);
    fx_gk_matmul_i16_set_chunk(0);
    fx_gr_free(dout);
    fx_gr_free(dst);
    free(ref);
    free(got);
    free_operand(&a);
    free_operand(&b);
}

/* The caching allocator behind every device allocation (src/gpu/gpu_alloc.cu). */
static void test_alloc_cache(void)
{
    void *p1 = NULL, *p2 = NULL, *p3 = NULL;
    CHECK_STATUS(fx_gr_malloc(1000, &p1, "test_gpu_gemm"), FX_OK);
    fx_gr_free(p1);
    CHECK_STATUS(fx_gr_malloc(900, &p2, "test_gpu_gemm"), FX_OK); /* same size class */
    CHECK(p2 == p1, "a freed block of the same size class was not reused (%p, %p)", p1, p2);
    unsigned char in[900], out[900];
    for (int i = 0; i < 900; i++) in[i] = (unsigned char)(i * 7 + 1);
    CHECK_STATUS(fx_gr_memcpy(p2, in, sizeof in, FX_GR_H2D, "test_gpu_gemm"), FX_OK);
    CHECK_STATUS(fx_gr_memcpy(out, p2, sizeof out, FX_GR_D2H, "test_gpu_gemm"), FX_OK);
    CHECK(memcmp(in, out, sizeof in) == 0, "a reused block does not hold what was written");
    fx_gr_free(p2);
    fx_gr_free(p2); /* a second free must not put the block in the cache twice */
    CHECK_STATUS(fx_gr_malloc(1000, &p1, "test_gpu_gemm"), FX_OK);
    CHECK_STATUS(fx_gr_malloc(1000, &p3, "test_gpu_gemm"), FX_OK);
    CHECK(p1 != p3, "one cached block was handed out twice");
    fx_gr_free(p1);
    fx_gr_free(p3);
    CHECK_STATUS(flexpoint_gpu_synchronize(), FX_OK);
    CHECK_STATUS(flexpoint_gpu_release_cache(), FX_OK);
    void *big = NULL;
    flexpoint_clear_error();
    CHECK_STATUS(fx_gr_malloc((size_t)1 << 50, &big, "test_gpu_gemm"), FX_EDEVICE);
    CHECK(big == NULL && strstr(flexpoint_last_error(), "cudaMalloc") != NULL,
          "an impossible allocation: pointer %p, message '%s'", big, flexpoint_last_error());
    /* the allocator still works after the failure */
    CHECK_STATUS(fx_gr_malloc(4096, &p1, "test_gpu_gemm"), FX_OK);
    fx_gr_free(p1);
}

int main(void)
{
    if (flexpoint_gpu_device_count() <= 0)
        return test_skip("test_gpu_gemm", "no CUDA device");
    printf("test_gpu_gemm: device %d (%s)\n", flexpoint_gpu_device(), flexpoint_gpu_device_name());
    test_alloc_cache();
    test_rng r;
    test_rng_seed(&r, 20261123);
    const int64_t small_chunks[3] = {FX_GK_I16_TC_CHUNK, 16, 48};
    const int64_t dims[][3] = {{1, 1, 1},    {3, 7, 5},      {16, 16, 16},  {17, 33, 15},
                               {64, 64, 64}, {100, 300, 37}, {129, 1000, 257}};
    const char *reduced_env = getenv("FX_GPU_TEST_REDUCED");
    const int reduced = reduced_env && reduced_env[0] == '1';
    /* the reduced list drops 129 x 1000 x 257 and the products at the default chunk size */
    const int nd = (int)(sizeof dims / sizeof dims[0]) - (reduced ? 1 : 0);
    if (reduced) printf("test_gpu_gemm: reduced case list (FX_GPU_TEST_REDUCED=1)\n");
    for (int d = 0; d < nd; d++)
        for (int t = 0; t < 4; t++)
            for (int fill = FILL_RANDOM; fill <= FILL_EDGES; fill++)
                gemm_case(&r, dims[d][0], dims[d][1], dims[d][2], t & 1, t >> 1, fill,
                          small_chunks, 3);
    if (reduced) return test_finish("test_gpu_gemm");
    /* the int32 extremes of one chunk: constant -32768 (every int8 product 2^14) and 32767 */
    const int64_t one_chunk[1] = {FX_GK_I16_TC_CHUNK};
    gemm_case(&r, 16, FX_GK_I16_TC_CHUNK, 16, 0, 0, FILL_MIN, one_chunk, 1);
    gemm_case(&r, 5, FX_GK_I16_TC_CHUNK, 3, 1, 0, FILL_MAX, one_chunk, 1);
    /* two chunks at the default size, both at the extreme */
    gemm_case(&r, 9, 40000, 18, 0, 1, FILL_MIN, one_chunk, 1);
    gemm_case(&r, 20, 40000, 7, 0, 0, FILL_EDGES, one_chunk, 1);
    /* a size the automatic choice sends to the split */
    gemm_case(&r, 400, 600, 300, 0, 0, FILL_RANDOM, one_chunk, 1);
    return test_finish("test_gpu_gemm");
}
#endif
