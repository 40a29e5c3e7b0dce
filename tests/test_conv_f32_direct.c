/* The fp32 forward convolution without patch rows or panels (src/fp32/conv_f32_direct.h), on
 * each CPU level that has it (fx_backend.conv.f32_fwd: AVX2 and AVX-512):
 *   - tensor_conv2d and tensor_conv2d_bias_relu in fp32, fp16 and bf16 give the same bits with
 *     the route on and off (the panels and the GEMM), at 1 and 2 threads, on shapes with
 *     partial blocks of 16 output channels, every tile width (AVX2: 1..6 pixels; AVX-512: 1..12
 *     at 32 channels, 1..16 at 16 or fewer), strides 1 to 3, dilation 2, 1x1 and 2x2 kernels,
 *     one input channel and several images;
 *   - the route ran where the level has it, and not on a level without it;
 *   - its fp32 results are within the fp32 dot-product bound of an fp64 reference:
 *     |y - y64| <= K 2^-24 sum |x w| (each of the K FMAs of a chain rounds once);
 *   - the output written chunk by chunk (fx_conv_y_chunks_made), with and without the bias and
 *     ReLU, gives the same bits in place (y the tensor x, over several chunks) as into a
 *     tensor of its own. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "fp32/conv_f32_direct.h"
#include "nn/nn_ops.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static long fp_route_runs; /* fp32 and fp16 calls that took the route */

typedef struct shape {
    int64_t N, C, H, W, O, K;
    int stride, pad, dil;
} shape;

static const shape shapes[] = {
    {2, 3, 9, 11, 5, 3, 1, 1, 1},   /* O < 16: one partial block; OW 11: tiles 6 + 5 */
    {3, 16, 12, 12, 16, 3, 1, 1, 1}, /* ResNet-20's stage-1 channels */
    {2, 8, 13, 10, 20, 5, 2, 2, 1},  /* stride 2, a full and a partial block */
    {2, 4, 11, 11, 32, 3, 1, 2, 2},  /* dilation 2 */
    {2, 16, 8, 8, 24, 1, 2, 0, 1},   /* 1x1 stride 2 (a shortcut), OW 4 */
    {1, 1, 28, 28, 32, 5, 1, 2, 1},  /* the CNN's conv1 */
    {2, 32, 7, 7, 64, 5, 1, 2, 1},   /* the CNN's conv2 channels; OW 7: tiles 4 + 3 */
    {2, 5, 6, 17, 7, 2, 1, 0, 1},    /* 2x2; OW 16: tiles 6 + 5 + 5 */
    {1, 2, 4, 4, 3, 3, 3, 1, 1},     /* stride 3: OW 2 */
    {2, 3, 5, 5, 17, 3, 1, 1, 1},    /* OW 5, O 17 */
    {1, 3, 6, 32, 16, 3, 1, 1, 1},   /* OW 32 at 16 channels: AVX-512 tiles 16 + 16 */
    {1, 2, 4, 31, 40, 3, 1, 1, 1},   /* OW 31, O 40: AVX-512 tiles 11 + 10 + 10 at 32 channels,
                                        16 + 15 at the last 8 */
    {1, 2, 3, 12, 48, 1, 1, 0, 1},   /* OW 12: one AVX-512 tile of 12 at 32, then 12 at 16 */
    {1, 2, 3, 9, 33, 3, 1, 1, 1},    /* OW 9, O 33: a block of 32, then one channel */
    {1, 1, 3, 15, 16, 3, 1, 1, 1},   /* OW 15: one tile of 15 at 16 channels */
    {1, 1, 3, 13, 8, 3, 1, 1, 1},    /* OW 13, 14: single tiles at 16 or fewer */
    {1, 1, 3, 14, 8, 3, 1, 1, 1},
    {1, 2, 3, 7, 64, 3, 1, 1, 1},    /* OW 7 at 2 blocks of 32 */
    {1, 2, 3, 10, 32, 3, 1, 1, 1},   /* OW 8 .. 10 at 32 channels */
    {1, 2, 3, 8, 32, 3, 1, 1, 1},
    /* dilation 16 of a 3-wide kernel: past the fp32 panels' reach, so bf16 on the pair and
     * AMX routes keeps its own GEMM while fp32 and fp16 take the route */
    {1, 2, 34, 34, 16, 3, 1, 1, 16},
};

static tensor_t *random_tensor(fmt_t f, const int64_t *s, double scale, int relu, test_rng *r)
{
    tensor_t *t = tensor_new(f, 4, s);
    if (!t) return NULL;
    const int64_t n = tensor_numel(t);
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        const double x = scale * test_rng_normal(r);
        v[i] = (float)(relu && x < 0 ? 0.0 : x);
    }
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    free(v);
    return t;
}

/* y with the route on (route = 1) or off, as raw storage; bias_relu selects the fused op */
static void *run(const shape *sh, fmt_t f, const tensor_t *x, const tensor_t *w,
                 const tensor_t *b, int route, int threads, int bias_relu, int64_t *ny)
{
    const int64_t OH = (sh->H + 2 * sh->pad - sh->dil * (sh->K - 1) - 1) / sh->stride + 1;
    const int64_t OW = (sh->W + 2 * sh->pad - sh->dil * (sh->K - 1) - 1) / sh->stride + 1;
    const int64_t ys[4] = {sh->N, sh->O, OH, OW};
    tensor_t *y = tensor_new(f, 4, ys);
    fx_f32_fwd_direct_set_enabled(route);
    flexpoint_set_num_threads(threads);
    const long long calls = fx_f32_fwd_direct_calls();
    if (bias_relu)
        CHECK_STATUS(tensor_conv2d_bias_relu(y, x, w, b, 1, sh->stride, sh->stride, sh->pad,
                                             sh->pad, sh->dil, sh->dil),
                     FX_OK);
    else
        CHECK_STATUS(tensor_conv2d(y, x, w, sh->stride, sh->stride, sh->pad, sh->pad, sh->dil,
                                   sh->dil),
                     FX_OK);
    const int has = fx_backend_active()->conv.f32_fwd != NULL;
    /* bf16 takes its own kernels where the level has them (AVX512_BF16 or AMX, where they fit),
     * so there the route may or may not run; with it off it never does */
    const int own_bf16 = f == FMT_BF16 && fx_backend_active()->conv.bf16_fwd_fits;
    const int ran = fx_f32_fwd_direct_calls() > calls;
    CHECK(own_bf16 && route ? 1 : ran == (route && has),
          "%s %s C%lld O%lld k%lld: the direct route %s", fx_backend_active()->name, fmt_name(f),
          (long long)sh->C, (long long)sh->O, (long long)sh->K, ran ? "ran" : "did not run");
    if (f != FMT_BF16) fp_route_runs += ran;
    *ny = tensor_numel(y);
    const size_t esz = f == FMT_FP32 ? 4 : 2;
    void *raw = malloc(esz * (size_t)*ny);
    CHECK_STATUS(tensor_get_raw(y, raw), FX_OK);
    tensor_free(y);
    return raw;
}

/* fp32 results of the route against an fp64 reference and the dot-product bound */
static void check_reference(const shape *sh, const tensor_t *x, const tensor_t *w)
{
    const int64_t OH = (sh->H + 2 * sh->pad - sh->dil * (sh->K - 1) - 1) / sh->stride + 1;
    const int64_t OW = (sh->W + 2 * sh->pad - sh->dil * (sh->K - 1) - 1) / sh->stride + 1;
    const int64_t ys[4] = {sh->N, sh->O, OH, OW}, K = sh->C * sh->K * sh->K;
    float *xv = malloc(sizeof(float) * (size_t)tensor_numel(x));
    float *wv = malloc(sizeof(float) * (size_t)tensor_numel(w));
    CHECK_STATUS(tensor_to_f32(x, xv), FX_OK);
    CHECK_STATUS(tensor_to_f32(w, wv), FX_OK);
    tensor_t *y = tensor_new(FMT_FP32, 4, ys);
    fx_f32_fwd_direct_set_enabled(1);
    CHECK_STATUS(tensor_conv2d(y, x, w, sh->stride, sh->stride, sh->pad, sh->pad, sh->dil,
                               sh->dil),
                 FX_OK);
    float *yv = malloc(sizeof(float) * (size_t)tensor_numel(y));
    CHECK_STATUS(tensor_to_f32(y, yv), FX_OK);
    long bad = 0;
    for (int64_t n = 0; n < sh->N; n++)
        for (int64_t o = 0; o < sh->O; o++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double ref = 0, mag = 0;
                    for (int64_t c = 0; c < sh->C; c++)
                        for (int64_t kh = 0; kh < sh->K; kh++)
                            for (int64_t kw = 0; kw < sh->K; kw++) {
                                const int64_t ih = oh * sh->stride - sh->pad + kh * sh->dil;
                                const int64_t iw = ow * sh->stride - sh->pad + kw * sh->dil;
                                if (ih < 0 || ih >= sh->H || iw < 0 || iw >= sh->W) continue;
                                const double p =
                                    (double)xv[((n * sh->C + c) * sh->H + ih) * sh->W + iw] *
                                    wv[((o * sh->C + c) * sh->K + kh) * sh->K + kw];
                                ref += p;
                                mag += fabs(p);
                            }
                    const double got = yv[((n * sh->O + o) * OH + oh) * OW + ow];
                    bad += fabs(got - ref) > (double)K * 0x1p-24 * mag + 1e-30;
                }
    CHECK(bad == 0, "%s fp32 C%lld O%lld k%lld: %ld outputs outside K 2^-24 sum |x w|",
          fx_backend_active()->name, (long long)sh->C, (long long)sh->O, (long long)sh->K, bad);
    tensor_free(y);
    free(xv);
    free(wv);
    free(yv);
}

/* y = conv(x, w) (+ bias, ReLU) into the tensor x itself against a tensor of its own, bit for
 * bit: each chunk reads its own images of x before it writes them */
static void check_in_place(fmt_t f, int threads, test_rng *r)
{
    const int64_t xs[4] = {6, 8, 10, 9}, ws[4] = {8, 8, 3, 3}, bs[3] = {8, 1, 1};
    tensor_t *w = random_tensor(f, ws, 0.3, 0, r), *b = tensor_new(f, 3, bs);
    float bv[8];
    for (int o = 0; o < 8; o++) bv[o] = (float)(0.1 * test_rng_normal(r));
    CHECK_STATUS(tensor_from_f32(b, bv), FX_OK);
    fx_f32_fwd_direct_set_enabled(1);
    flexpoint_set_num_threads(threads);
    const size_t esz = f == FMT_FP32 ? 4 : 2;
    for (int fused = 0; fused < 2; fused++) {
        tensor_t *x = random_tensor(f, xs, 1.0, 0, r), *y = tensor_new(f, 4, xs);
        const int64_t n = tensor_numel(x);
        const int64_t before = fx_conv_y_chunks_made();
        if (fused) {
            CHECK_STATUS(tensor_conv2d_bias_relu(y, x, w, b, 1, 1, 1, 1, 1, 1, 1), FX_OK);
            CHECK_STATUS(tensor_conv2d_bias_relu(x, x, w, b, 1, 1, 1, 1, 1, 1, 1), FX_OK);
        } else {
            CHECK_STATUS(tensor_conv2d(y, x, w, 1, 1, 1, 1, 1, 1), FX_OK);
            CHECK_STATUS(tensor_conv2d(x, x, w, 1, 1, 1, 1, 1, 1), FX_OK);
        }
        /* bf16 may take its own kernels or GEMM (the route's own order), fp32 and fp16 the
         * direct route wherever the level has it */
        CHECK(f == FMT_BF16 || fx_conv_y_chunks_made() == before + 2, "%s %s%s, %d thread(s): %lld of 2 calls "
              "wrote y chunk by chunk", fx_backend_active()->name, fmt_name(f),
              fused ? " bias+relu" : "", threads, (long long)(fx_conv_y_chunks_made() - before));
        void *a = malloc(esz * (size_t)n), *c = malloc(esz * (size_t)n);
        CHECK_STATUS(tensor_get_raw(x, a), FX_OK);
        CHECK_STATUS(tensor_get_raw(y, c), FX_OK);
        CHECK(memcmp(a, c, esz * (size_t)n) == 0,
              "%s %s%s, %d thread(s): the convolution in place differs from one into y",
              fx_backend_active()->name, fmt_name(f), fused ? " bias+relu" : "", threads);
        free(a);
        free(c);
        tensor_free(x);
        tensor_free(y);
    }
    tensor_free(w);
    tensor_free(b);
}

int main(void)
{
    static const fmt_t fmts[3] = {FMT_FP32, FMT_FP16, FMT_BF16};
    test_rng r;
    test_rng_seed(&r, 20261128);
    int levels_with = 0;
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        levels_with += fx_backend_active()->conv.f32_fwd != NULL;
        if (fx_backend_active()->conv.f32_fwd)
            for (int fi = 0; fi < 3; fi++)
                for (int threads = 1; threads <= 2; threads++)
                    check_in_place(fmts[fi], threads, &r);
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const shape *sh = &shapes[si];
            for (int fi = 0; fi < 3; fi++) {
                const fmt_t f = fmts[fi];
                const int64_t xs[4] = {sh->N, sh->C, sh->H, sh->W};
                const int64_t ws[4] = {sh->O, sh->C, sh->K, sh->K}, bs[3] = {sh->O, 1, 1};
                tensor_t *x = random_tensor(f, xs, 1.0, 1, &r);
                tensor_t *w = random_tensor(f, ws, 0.3, 0, &r);
                tensor_t *b = tensor_new(f, 3, bs);
                float bv[64];
                for (int64_t o = 0; o < sh->O; o++) bv[o] = (float)(0.1 * test_rng_normal(&r));
                CHECK_STATUS(tensor_from_f32(b, bv), FX_OK);
                for (int fused = 0; fused < 2; fused++) {
                    int64_t ny = 0;
                    void *off = run(sh, f, x, w, b, 0, 1, fused, &ny);
                    for (int threads = 1; threads <= 2; threads++) {
                        void *on = run(sh, f, x, w, b, 1, threads, fused, &ny);
                        const size_t esz = f == FMT_FP32 ? 4 : 2;
                        CHECK(memcmp(on, off, esz * (size_t)ny) == 0,
                              "%s %s%s N%lld C%lld %lldx%lld O%lld k%lld s%d p%d d%d, %d "
                              "threads: the direct route's bits differ from the panels'",
                              fx_backend_active()->name, fmt_name(f), fused ? " bias+relu" : "",
                              (long long)sh->N, (long long)sh->C, (long long)sh->H,
                              (long long)sh->W, (long long)sh->O, (long long)sh->K, sh->stride,
                              sh->pad, sh->dil, threads);
                        free(on);
                    }
                    free(off);
                }
                if (f == FMT_FP32) check_reference(sh, x, w);
                tensor_free(x);
                tensor_free(w);
                tensor_free(b);
            }
        }
    }
    fx_f32_fwd_direct_set_enabled(1);
    flexpoint_set_num_threads(1);
    CHECK(!levels_with || fp_route_runs > 0, "the direct route never ran in fp32 or fp16");
    if (!levels_with) return test_skip("test_conv_f32_direct", "no CPU level with the kernel");
    return test_finish("test_conv_f32_direct");
}
