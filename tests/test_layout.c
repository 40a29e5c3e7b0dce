/* The layout transforms around the convolution GEMMs: the backends' matrix transposes
 * (fx_cvt_table.transpose16/32/64) and fx_chunk_scatter_t (pixel-major chunk -> NCHW), against
 * plain index loops written here, on every available backend, for odd and tile-sized shapes.
 * Guard words around every destination catch writes outside it (ASan checks the portable loops'
 * reads; the AVX-512 transposes read with masked loads, which it does not see, so their source
 * bounds rest on the masks). Also: a convolution written into a whole tensor (rounded in the
 * GEMM's pixel-major order, then transposed) equals the same convolution written into a strided view (transposed
 * first, then written as a stage): bits, exponent and statistics, for every format. */
#include "testutil.h"

#include "core/backend.h"
#include "flexpoint_nn.h"
#include "nn/im2col.h"

#include <stdlib.h>
#include <string.h>

#define GUARD 16
#define GUARD_WORD 0xA5A5A5A5A5A5A5A5ull

static void fill(uint64_t *p, int64_t n, test_rng *r)
{
    for (int64_t i = 0; i < n; i++) p[i] = test_rng_u64(r);
}

static void check_transpose(const char *be_name, int bits, void (*tr)(const void *, void *, int64_t, int64_t),
                            int64_t rows, int64_t cols, test_rng *r)
{
    const size_t esz = (size_t)bits / 8;
    const int64_t n = rows * cols;
    unsigned char *src = malloc((size_t)n * esz);
    unsigned char *dst = malloc((size_t)(n + 2 * GUARD) * esz);
    uint64_t *tmp = malloc((size_t)n * sizeof *tmp);
    fill(tmp, n, r);
    for (int64_t i = 0; i < n; i++) memcpy(src + i * esz, &tmp[i], esz);
    memset(dst, 0xA5, (size_t)(n + 2 * GUARD) * esz);
    tr(src, dst + GUARD * esz, rows, cols);
    int64_t bad = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            bad += memcmp(dst + (GUARD + j * rows + i) * esz, src + (i * cols + j) * esz, esz) != 0;
    int guards_ok = 1;
    for (int64_t g = 0; g < GUARD * (int64_t)esz; g++)
        guards_ok &= dst[g] == 0xA5 && dst[(GUARD + n) * esz + g] == 0xA5;
    CHECK(bad == 0, "%s transpose%d %lldx%lld: %lld elements wrong", be_name, bits,
          (long long)rows, (long long)cols, (long long)bad);
    CHECK(guards_ok, "%s transpose%d %lldx%lld: wrote outside the destination", be_name, bits,
          (long long)rows, (long long)cols);
    free(src);
    free(dst);
    free(tmp);
}

/* scatter_t: nchw[((n0 + n)*O + o)*P + p] = pix[(n*P + p)*O + o] */
static void check_scatter(const char *be_name, size_t esz, int64_t n0, int64_t nb, int64_t O,
                          int64_t P, test_rng *r)
{
    const int64_t N = n0 + nb + 1, total = N * O * P, npix = nb * P * O;
    unsigned char *pix = malloc((size_t)npix * esz), *out = malloc((size_t)total * esz);
    unsigned char *want = malloc((size_t)total * esz);
    uint64_t v;
    for (int64_t i = 0; i < npix; i++) {
        v = test_rng_u64(r);
        memcpy(pix + i * esz, &v, esz);
    }
    memset(out, 0x5A, (size_t)total * esz);
    memset(want, 0x5A, (size_t)total * esz);
    for (int64_t n = 0; n < nb; n++)
        for (int64_t p = 0; p < P; p++)
            for (int64_t o = 0; o < O; o++)
                memcpy(want + (((n0 + n) * O + o) * P + p) * esz, pix + ((n * P + p) * O + o) * esz, esz);
    fx_chunk_scatter_t(pix, n0, nb, O, P, out, esz);
    CHECK(memcmp(out, want, (size_t)total * esz) == 0,
          "%s scatter_t esz %zu n0 %lld nb %lld O %lld P %lld: differs", be_name, esz,
          (long long)n0, (long long)nb, (long long)O, (long long)P);
    free(pix);
    free(out);
    free(want);
}

/* y = conv(x, w) into a whole tensor and into a slice view of a larger one (the stage route). */
static void check_conv_routes(fmt_t f, const char *fname, test_rng *r)
{
    const int64_t xs[4] = {5, 3, 9, 8}, ws[4] = {6, 3, 3, 3}, ys[4] = {5, 6, 9, 8};
    const int64_t big[4] = {7, 6, 9, 8}, nx = 5 * 3 * 9 * 8, nw = 6 * 3 * 3 * 3, ny = 5 * 6 * 9 * 8;
    float *vx = malloc(nx * sizeof *vx), *vw = malloc(nw * sizeof *vw);
    tensor_t *x = tensor_new(f, 4, xs), *w = tensor_new(f, 4, ws), *y = tensor_new(f, 4, ys);
    tensor_t *yb = tensor_new(f, 4, big);
    tensor_t *yv = tensor_view_slice(yb, 0, 1, 6, 1);
    unsigned char *a = malloc(ny * sizeof(float)), *b = malloc(ny * sizeof(float));
    for (int rep = 0; rep < 4; rep++) { /* several writes: Autoflex history */
        const double scale = rep == 2 ? 1e3 : 1.0;
        for (int64_t i = 0; i < nx; i++) vx[i] = (float)(scale * (test_rng_uniform(r) - 0.3));
        for (int64_t i = 0; i < nw; i++) vw[i] = (float)(test_rng_uniform(r) - 0.5);
        CHECK_STATUS(tensor_from_f32(x, vx), FX_OK);
        CHECK_STATUS(tensor_from_f32(w, vw), FX_OK);
        CHECK_STATUS(tensor_conv2d(y, x, w, 1, 1, 1, 1, 1, 1), FX_OK);
        /* a view shares its storage's exponent, which the write keeps: give yb the exponent
         * the whole tensor chose, so that both routes quantise at the same one */
        if (fmt_is_shared_exponent(f)) CHECK_STATUS(tensor_set_exp(yb, tensor_exp(y)), FX_OK);
        CHECK_STATUS(tensor_conv2d(yv, x, w, 1, 1, 1, 1, 1, 1), FX_OK);
        if (fmt_is_shared_exponent(f)) {
            CHECK(tensor_exp(yv) == tensor_exp(y), "%s: exponents %d vs %d", fname,
                  tensor_exp(yv), tensor_exp(y));
            double s1 = -1, s2 = -2;
            tensor_stat(y, "saturated", &s1);
            tensor_stat(yb, "saturated", &s2);
            CHECK(s1 == s2, "%s write %d: saturated %g vs %g", fname, rep, s1, s2);
        }
        /* same exponent: equal values are equal mantissas; fp32 values are exact widenings */
        CHECK_STATUS(tensor_to_f32(y, (float *)a), FX_OK);
        CHECK_STATUS(tensor_to_f32(yv, (float *)b), FX_OK);
        CHECK(memcmp(a, b, ny * sizeof(float)) == 0,
              "%s conv write %d: direct and view routes differ", fname, rep);
    }
    tensor_free(x);
    tensor_free(w);
    tensor_free(y);
    tensor_free(yv);
    tensor_free(yb);
    free(vx);
    free(vw);
    free(a);
    free(b);
}

int main(void)
{
    test_rng r;
    test_rng_seed(&r, 5);
    static const int64_t sizes[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 196, 785};
    const int ns = (int)(sizeof sizes / sizeof *sizes);
    int tested = 0;
    for (int b = 0; b < FX_BACKEND_COUNT; b++) {
        const fx_backend *be = fx_backend_get(b);
        if (!flexpoint_backend_available(b)) {
            printf("backend %s: not available on this CPU, skipped\n", flexpoint_backend_name(b));
            continue;
        }
        for (int i = 0; i < ns; i++)
            for (int j = 0; j < ns; j++) {
                if (sizes[i] * sizes[j] > 60000) continue;
                if (be->cvt.transpose16) check_transpose(be->name, 16, be->cvt.transpose16, sizes[i], sizes[j], &r);
                if (be->cvt.transpose32) check_transpose(be->name, 32, be->cvt.transpose32, sizes[i], sizes[j], &r);
                if (be->cvt.transpose64) check_transpose(be->name, 64, be->cvt.transpose64, sizes[i], sizes[j], &r);
            }
        tested += be->cvt.transpose32 != NULL && be->cvt.transpose16 != NULL;
        CHECK_STATUS(flexpoint_set_backend(be->name), FX_OK);
        static const int64_t shapes[][4] = {{0, 1, 32, 784}, {3, 2, 64, 196}, {1, 3, 10, 7},
                                            {0, 2, 17, 33}, {2, 1, 1, 1}};
        for (int k = 0; k < 5; k++)
            for (size_t esz = 2; esz <= 8; esz *= 2)
                check_scatter(be->name, esz, shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3], &r);
    }
    const fmt_t fmts[] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5, FMT_DFP16};
    const char *names[] = {"fp32", "fp16", "bf16", "flex16_5", "dfp16"};
    for (int b = 0; b < FX_BACKEND_COUNT; b++) {
        if (!flexpoint_backend_available(b)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(b)), FX_OK);
        for (int i = 0; i < 5; i++) check_conv_routes(fmts[i], names[i], &r);
    }
    /* on a CPU with AVX-512 the vector transposes must have been exercised */
    if (flexpoint_backend_available(FX_BACKEND_AVX512))
        CHECK(tested >= 1, "no backend registered a transpose kernel");
    flexpoint_set_backend("scalar");
    return test_finish("test_layout");
}
