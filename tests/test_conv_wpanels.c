/* The fp32 GEMM's weight-gradient panels built straight from the padded input
 * (src/nn/conv_panels.h, fx_backend.conv.wpanels_f32: AVX2's 6-row and AVX-512's 12-row
 * panels), on each CPU level:
 *   - tensor_conv2d_backward_weight in fp32, fp16 and bf16 gives the same bits with the panels
 *     on and off (the patch matrix, packed by the GEMM), each at 1 and 2 threads, on shapes
 *     with last panels of 1 to 5 taps (AVX2) and 1 to 11 (AVX-512; K = 25, 8, 27, 10, 5, 7,
 *     11, 14, 16, 45, 18 ...), vertical stride 2, dilations and paddings that differ between the axes, 1x1, 1x5, 3x1, 3x3 and 5x5 kernels, rows of 8 to
 *     28 pixels (blocks of 8 pixels that continue on the next row, or in the next image),
 *     chunks whose pixels are not a multiple of 8, a short last chunk, groups of several chunks
 *     (conv2d.c sums chunks in fixed groups) and one image, where both threads work inside the
 *     GEMM;
 *   - the panels were built exactly where the level has them and the shape fits (sw = 1,
 *     OW >= 8, O >= 16), and never otherwise (OW 7, sw 2, O 8);
 *   - the fp32 results are within the summation bound of an fp64 reference: with n = N*OH*OW
 *     products per weight, summed by FMAs in chunks whose sums are then added, every value
 *     takes at most 2n roundings of 2^-24, so |dw - dw64| <= 2n 2^-24 sum |x dy|. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "nn/conv_panels.h"
#include "fp32/conv_f32_direct.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    int64_t N, C, H, W, O, KH, KW;
    int sh, sw, ph, pw, dh, dw;
} shape;

static const shape shapes[] = {
    {2, 3, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1},     /* K = 27: a last panel of 3 taps; OW 8 */
    {21, 16, 16, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1}, /* stage-1 channels: 11 chunks, the last short */
    {1, 32, 32, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1},  /* one image: both threads inside the GEMM */
    {2, 4, 9, 18, 16, 3, 3, 1, 1, 0, 0, 1, 1},    /* no padding: OW 16 */
    {2, 5, 12, 16, 17, 3, 3, 2, 1, 1, 1, 1, 1},   /* vertical stride 2; O 17 */
    {2, 4, 16, 16, 16, 3, 3, 1, 1, 2, 1, 2, 1},   /* dilation and padding 2 down, 1 across */
    {2, 4, 16, 20, 16, 3, 3, 1, 1, 1, 2, 1, 2},   /* ... and 1 down, 2 across */
    {3, 8, 8, 24, 16, 1, 1, 1, 1, 0, 0, 1, 1},    /* 1x1, K = 8 (2 taps in the last panel) */
    {2, 2, 10, 16, 16, 1, 5, 1, 1, 0, 2, 1, 1},   /* 1x5, K = 10: a last panel of 4 taps */
    {2, 3, 10, 16, 16, 3, 1, 1, 1, 1, 0, 1, 1},   /* 3x1, K = 9: a last panel of 3 taps */
    {2, 1, 6, 16, 16, 1, 5, 1, 1, 0, 2, 1, 1},    /* 1x5, K = 5: one panel of 5 taps */
    {2, 3, 10, 16, 16, 5, 5, 1, 1, 2, 2, 1, 1},   /* 5x5, K = 75: a last panel of 3 taps */
    {1, 2, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1},     /* OW 9: blocks across rows, Pc 81 */
    {2, 3, 5, 10, 16, 3, 3, 2, 1, 1, 1, 1, 1},    /* OW 10, vertical stride 2 */
    /* the CNN's conv2 input: OW 14, K = 800, 18 chunks of 3 images (the last of one) in 16
     * groups, blocks that continue in the next image */
    {52, 32, 14, 14, 16, 5, 5, 1, 1, 2, 2, 1, 1},
    {3, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2, 1, 1},   /* the CNN's conv1: OW 28, K = 25 */
    {2, 7, 6, 16, 16, 1, 1, 1, 1, 0, 0, 1, 1},    /* 1x1, K = 7 (AVX-512: 7 taps) */
    {2, 11, 6, 16, 32, 1, 1, 1, 1, 0, 0, 1, 1},   /* 1x1, K = 11 (AVX-512: 11 taps) */
    {2, 2, 6, 16, 16, 1, 7, 1, 1, 0, 3, 1, 1},    /* 1x7, K = 14 (AVX-512: 2 taps) */
    {2, 16, 6, 12, 48, 1, 1, 1, 1, 0, 0, 1, 1},   /* 1x1, K = 16 (AVX-512: 4 taps), O 48 */
    {2, 4, 7, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1},     /* OW 7: not built */
    {2, 4, 16, 32, 16, 3, 3, 1, 2, 1, 1, 1, 1},   /* horizontal stride 2: not built */
    {2, 4, 16, 16, 8, 3, 3, 1, 1, 1, 1, 1, 1},    /* O 8: not built */
};

static int64_t out_h(const shape *s)
{
    return (s->H + 2 * s->ph - s->dh * (s->KH - 1) - 1) / s->sh + 1;
}

static int64_t out_w(const shape *s)
{
    return (s->W + 2 * s->pw - s->dw * (s->KW - 1) - 1) / s->sw + 1;
}

static tensor_t *random_tensor(fmt_t f, const int64_t *s, double scale, test_rng *r)
{
    tensor_t *t = tensor_new(f, 4, s);
    if (!t) return NULL;
    test_fill_normal(t, scale, r);
    return t;
}

/* dw with the panels on (route = 1) or off, as raw storage */
static void *run(const shape *s, fmt_t f, const tensor_t *x, const tensor_t *dy, int route,
                 int threads, int64_t *nw)
{
    const int64_t ws[4] = {s->O, s->C, s->KH, s->KW};
    tensor_t *dw = tensor_new(f, 4, ws);
    fx_conv_wpanels_set_enabled(route);
    flexpoint_set_num_threads(threads);
    const long long before = fx_conv_wpanels_chunks();
    CHECK_STATUS(tensor_conv2d_backward_weight(dw, x, dy, s->sh, s->sw, s->ph, s->pw, s->dh,
                                               s->dw),
                 FX_OK);
    const fx_conv_geom g = {s->N, s->C, s->H, s->W, s->O, s->KH, s->KW, out_h(s), out_w(s),
                            s->sh, s->sw, s->ph, s->pw, s->dh, s->dw};
    /* bf16 takes them only where its GEMM is the fp32 one, widened (not on the AVX512_BF16
     * pair or AMX routes, whose sums have orders of their own) */
    const fx_backend *be = fx_backend_active();
    const int fmt_ok = f != FMT_BF16 ||
                       be->kernels[FX_OP_MATMUL][FMT_BF16] == be->kernels[FX_OP_MATMUL][FMT_FP32];
    const int expect = route && be->conv.wpanels_f32 != NULL && fmt_ok &&
                       fx_conv_wpanels_f32_fit(&g);
    CHECK((fx_conv_wpanels_chunks() > before) == expect,
          "%s %s N%lld C%lld %lldx%lld O%lld k%lldx%lld sh%d sw%d: the panels %s",
          fx_backend_active()->name, fmt_name(f), (long long)s->N, (long long)s->C,
          (long long)s->H, (long long)s->W, (long long)s->O, (long long)s->KH, (long long)s->KW,
          s->sh, s->sw, expect ? "were not built" : "were built");
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
    const int64_t ws[4] = {s->O, s->C, s->KH, s->KW};
    tensor_t *dw = tensor_new(FMT_FP32, 4, ws);
    fx_conv_wpanels_set_enabled(1);
    flexpoint_set_num_threads(1);
    CHECK_STATUS(tensor_conv2d_backward_weight(dw, x, dy, s->sh, s->sw, s->ph, s->pw, s->dh,
                                               s->dw),
                 FX_OK);
    float *wv = malloc(sizeof(float) * (size_t)tensor_numel(dw));
    CHECK_STATUS(tensor_to_f32(dw, wv), FX_OK);
    long bad = 0;
    for (int64_t o = 0; o < s->O; o++)
        for (int64_t c = 0; c < s->C; c++)
            for (int64_t kh = 0; kh < s->KH; kh++)
                for (int64_t kw = 0; kw < s->KW; kw++) {
                    double ref = 0, mag = 0;
                    for (int64_t n = 0; n < s->N; n++)
                        for (int64_t oh = 0; oh < OH; oh++)
                            for (int64_t ow = 0; ow < OW; ow++) {
                                const int64_t ih = oh * s->sh - s->ph + kh * s->dh;
                                const int64_t iw = ow * s->sw - s->pw + kw * s->dw;
                                if (ih < 0 || ih >= s->H || iw < 0 || iw >= s->W) continue;
                                const double p =
                                    (double)xv[((n * s->C + c) * s->H + ih) * s->W + iw] *
                                    gv[((n * s->O + o) * OH + oh) * OW + ow];
                                ref += p;
                                mag += fabs(p);
                            }
                    const double got = wv[((o * s->C + c) * s->KH + kh) * s->KW + kw];
                    bad += fabs(got - ref) > 2.0 * (double)terms * 0x1p-24 * mag + 1e-30;
                }
    CHECK(bad == 0, "%s fp32 N%lld C%lld O%lld k%lldx%lld: %ld weights outside 2n 2^-24 sum |x dy|",
          fx_backend_active()->name, (long long)s->N, (long long)s->C, (long long)s->O,
          (long long)s->KH, (long long)s->KW, bad);
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
    /* the direct weight gradient takes the float shapes it fits ahead of the panels
     * (test_conv_f32_wgrad checks it against them): off here, so that the panels are tested on
     * every shape they take when it declines */
    fx_f32_wgrad_direct_set_enabled(0);
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
                const size_t esz = f == FMT_FP32 ? 4 : 2;
                void *ref = run(s, f, x, dy, 0, 1, &nw);
                for (int threads = 1; threads <= 2; threads++)
                    for (int route = 0; route <= 1; route++) {
                        if (threads == 1 && route == 0) continue; /* ref itself */
                        void *got = run(s, f, x, dy, route, threads, &nw);
                        CHECK(memcmp(got, ref, esz * (size_t)nw) == 0,
                              "%s %s N%lld C%lld %lldx%lld O%lld k%lldx%lld sh%d sw%d p%d,%d "
                              "d%d,%d, panels %s, %d threads: the bits differ from the patch "
                              "matrix's at 1 thread",
                              fx_backend_active()->name, fmt_name(f), (long long)s->N,
                              (long long)s->C, (long long)s->H, (long long)s->W,
                              (long long)s->O, (long long)s->KH, (long long)s->KW, s->sh, s->sw,
                              s->ph, s->pw, s->dh, s->dw, route ? "on" : "off", threads);
                        free(got);
                    }
                free(ref);
                if (f == FMT_FP32) check_reference(s, x, dy);
                tensor_free(x);
                tensor_free(dy);
            }
        }
    }
    fx_conv_wpanels_set_enabled(1);
    flexpoint_set_num_threads(1);
    fx_f32_wgrad_direct_set_enabled(1);
    if (!levels_with) return test_skip("test_conv_wpanels", "no CPU level with the panels");
    return test_finish("test_conv_wpanels");
}
