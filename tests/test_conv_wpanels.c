/* The fp32 GEMM's weight-gradient panels built straight from the padded input
 * (src/nn/conv_panels.h, fx_backend.conv.wpanels_f32: AVX2), on each CPU level:
 *   - tensor_conv2d_backward_weight in fp32, fp16 and bf16 gives the same bits with the panels
 *     on and off (the patch matrix, packed by the GEMM), at 1 and 2 threads, on shapes with a
 *     partial last panel of taps (K = 27, 8), vertical stride 2, dilation 2, 1x1 and 5x5
 *     kernels, several chunks of images, output rows of 8, 16 and 24 pixels and rows of 9,
 *     10, 14 and 28 (blocks of 8 pixels that continue on the next row, or in the next image,
 *     and chunks whose pixels are not a multiple of 8);
 *   - the panels were built exactly where the level has them and the shape fits (sw = 1 and
 *     OW >= 8), and never otherwise (OW 7, sw 2);
 *   - the fp32 results are within the summation bound of an fp64 reference: with n = N*OH*OW
 *     products per weight, summed by FMAs in chunks whose sums are then added, every value
 *     takes at most 2n roundings of 2^-24, so |dw - dw64| <= 2n 2^-24 sum |x dy|. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "nn/conv_panels.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    int64_t N, C, H, W, O, K;
    int sh, sw, pad, dil;
} shape;

static const shape shapes[] = {
    {2, 3, 8, 8, 5, 3, 1, 1, 1, 1},     /* K = 27: the last panel has 3 of 6 taps; OW 8 */
    {20, 16, 16, 16, 16, 3, 1, 1, 1, 1}, /* ResNet-20's stage-1 channels, several chunks */
    {2, 4, 9, 18, 7, 3, 1, 1, 0, 1},    /* no padding: OW 16 */
    {2, 5, 12, 16, 6, 3, 2, 1, 1, 1},   /* vertical stride 2 */
    {2, 4, 16, 16, 9, 3, 1, 1, 2, 2},   /* dilation 2 */
    {3, 8, 8, 24, 12, 1, 1, 1, 0, 1},   /* 1x1, K = 8; OW 24 */
    {2, 3, 10, 16, 8, 5, 1, 1, 2, 1},   /* 5x5 */
    {3, 2, 9, 9, 4, 3, 1, 1, 1, 1},     /* OW 9: blocks across rows and images; Pc 243 */
    {2, 3, 5, 10, 5, 3, 2, 1, 1, 1},    /* OW 10, vertical stride 2 */
    {20, 32, 14, 14, 64, 5, 1, 1, 2, 1}, /* the CNN's conv2: OW 14, K = 800, several chunks */
    {3, 1, 28, 28, 32, 5, 1, 1, 2, 1},  /* the CNN's conv1: OW 28, K = 25 */
    {2, 4, 7, 7, 6, 3, 1, 1, 1, 1},     /* OW 7: not built */
    {2, 4, 16, 32, 6, 3, 1, 2, 1, 1},   /* horizontal stride 2: not built */
};

static int64_t out_h(const shape *s)
{
    return (s->H + 2 * s->pad - s->dil * (s->K - 1) - 1) / s->sh + 1;
}

static int64_t out_w(const shape *s)
{
    return (s->W + 2 * s->pad - s->dil * (s->K - 1) - 1) / s->sw + 1;
}

static tensor_t *random_tensor(fmt_t f, const int64_t *s, double scale, test_rng *r)
{
    tensor_t *t = tensor_new(f, 4, s);
    if (!t) return NULL;
    const int64_t n = tensor_numel(t);
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(scale * test_rng_normal(r));
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    free(v);
    return t;
}

/* dw with the panels on (route = 1) or off, as raw storage */
static void *run(const shape *s, fmt_t f, const tensor_t *x, const tensor_t *dy, int route,
                 int threads, int64_t *nw)
{
    const int64_t ws[4] = {s->O, s->C, s->K, s->K};
    tensor_t *dw = tensor_new(f, 4, ws);
    fx_conv_wpanels_set_enabled(route);
    flexpoint_set_num_threads(threads);
    const long long before = fx_conv_wpanels_chunks();
    CHECK_STATUS(tensor_conv2d_backward_weight(dw, x, dy, s->sh, s->sw, s->pad, s->pad, s->dil,
                                               s->dil),
                 FX_OK);
    const fx_conv_geom g = {s->N, s->C, s->H, s->W, s->O, s->K, s->K, out_h(s), out_w(s),
                            s->sh, s->sw, s->pad, s->pad, s->dil, s->dil};
    const int expect = route && fx_backend_active()->conv.wpanels_f32 != NULL &&
                       fx_conv_wpanels_f32_fit(&g);
    CHECK((fx_conv_wpanels_chunks() > before) == expect,
          "%s %s N%lld C%lld %lldx%lld k%lld sh%d sw%d: the panels %s",
          fx_backend_active()->name, fmt_name(f), (long long)s->N, (long long)s->C,
          (long long)s->H, (long long)s->W, (long long)s->K, s->sh, s->sw,
          expect ? "were not built" : "were built");
    *nw = tensor_numel(dw);
    const size_t esz = f == FMT_FP32 ? 4 : 2;
    void *raw = malloc(esz * (size_t)*nw);
    CHECK_STATUS(tensor_get_raw(dw, raw), FX_OK);
    tensor_free(dw);
    return raw;
}

/* fp32 results with the panels against an fp64 reference and the summation bound */
static void check_reference(const shape *s, const tensor_t *x, const tensor_t *dy)
{
    const int64_t OH = out_h(s), OW = out_w(s), terms = s->N * OH * OW;
    float *xv = malloc(sizeof(float) * (size_t)tensor_numel(x));
    float *gv = malloc(sizeof(float) * (size_t)tensor_numel(dy));
    CHECK_STATUS(tensor_to_f32(x, xv), FX_OK);
    CHECK_STATUS(tensor_to_f32(dy, gv), FX_OK);
    const int64_t ws[4] = {s->O, s->C, s->K, s->K};
    tensor_t *dw = tensor_new(FMT_FP32, 4, ws);
    fx_conv_wpanels_set_enabled(1);
    flexpoint_set_num_threads(1);
    CHECK_STATUS(tensor_conv2d_backward_weight(dw, x, dy, s->sh, s->sw, s->pad, s->pad, s->dil,
                                               s->dil),
                 FX_OK);
    float *wv = malloc(sizeof(float) * (size_t)tensor_numel(dw));
    CHECK_STATUS(tensor_to_f32(dw, wv), FX_OK);
    long bad = 0;
    for (int64_t o = 0; o < s->O; o++)
        for (int64_t c = 0; c < s->C; c++)
            for (int64_t kh = 0; kh < s->K; kh++)
                for (int64_t kw = 0; kw < s->K; kw++) {
                    double ref = 0, mag = 0;
                    for (int64_t n = 0; n < s->N; n++)
                        for (int64_t oh = 0; oh < OH; oh++)
                            for (int64_t ow = 0; ow < OW; ow++) {
                                const int64_t ih = oh * s->sh - s->pad + kh * s->dil;
                                const int64_t iw = ow * s->sw - s->pad + kw * s->dil;
                                if (ih < 0 || ih >= s->H || iw < 0 || iw >= s->W) continue;
                                const double p =
                                    (double)xv[((n * s->C + c) * s->H + ih) * s->W + iw] *
                                    gv[((n * s->O + o) * OH + oh) * OW + ow];
                                ref += p;
                                mag += fabs(p);
                            }
                    const double got = wv[((o * s->C + c) * s->K + kh) * s->K + kw];
                    bad += fabs(got - ref) > 2.0 * (double)terms * 0x1p-24 * mag + 1e-30;
                }
    CHECK(bad == 0, "%s fp32 N%lld C%lld O%lld k%lld: %ld weights outside 2n 2^-24 sum |x dy|",
          fx_backend_active()->name, (long long)s->N, (long long)s->C, (long long)s->O,
          (long long)s->K, bad);
    tensor_free(dw);
    free(xv);
    free(gv);
    free(wv);
}

int main(void)
{
    static const fmt_t fmts[3] = {FMT_FP32, FMT_FP16, FMT_BF16};
    test_rng r;
    test_rng_seed(&r, 20261201);
    int levels_with = 0;
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        levels_with += fx_backend_active()->conv.wpanels_f32 != NULL;
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const shape *s = &shapes[si];
            for (int fi = 0; fi < 3; fi++) {
                const fmt_t f = fmts[fi];
                const int64_t xs[4] = {s->N, s->C, s->H, s->W};
                const int64_t ys[4] = {s->N, s->O, out_h(s), out_w(s)};
                tensor_t *x = random_tensor(f, xs, 1.0, &r);
                tensor_t *dy = random_tensor(f, ys, 0.1, &r);
                int64_t nw = 0;
                void *off = run(s, f, x, dy, 0, 1, &nw);
                for (int threads = 1; threads <= 2; threads++) {
                    void *on = run(s, f, x, dy, 1, threads, &nw);
                    const size_t esz = f == FMT_FP32 ? 4 : 2;
                    CHECK(memcmp(on, off, esz * (size_t)nw) == 0,
                          "%s %s N%lld C%lld %lldx%lld O%lld k%lld sh%d sw%d p%d d%d, %d "
                          "threads: the panels' bits differ from the patch matrix's",
                          fx_backend_active()->name, fmt_name(f), (long long)s->N,
                          (long long)s->C, (long long)s->H, (long long)s->W, (long long)s->O,
                          (long long)s->K, s->sh, s->sw, s->pad, s->dil, threads);
                    free(on);
                }
                free(off);
                if (f == FMT_FP32) check_reference(s, x, dy);
                tensor_free(x);
                tensor_free(dy);
            }
        }
    }
    fx_conv_wpanels_set_enabled(1);
    flexpoint_set_num_threads(1);
    if (!levels_with) return test_skip("test_conv_wpanels", "no CPU level with the panels");
    return test_finish("test_conv_wpanels");
}
