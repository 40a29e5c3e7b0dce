/* The fp32 input gradient without a patch matrix or col2im
 * (src/fp32/conv_f32_direct.h, fx_backend.conv.f32_dgrad), on each CPU level that has it:
 *   - tensor_conv2d_backward_input in fp32, fp16 and bf16 gives the same bits with the route on
 *     and off (the GEMM and col2im; for bf16 on the AMX route, which the kernel serves at
 *     strides above 1, the widening route's: the fp32 GEMM and col2im of the widened values,
 *     rounded once), at 1 and 2 threads, on shapes with partial blocks of 16
 *     input channels, every tile width (1..6 pixels at 32 channels, 1..12 at 16 or fewer),
 *     strides 1 to 3 (ResNet-20's openers and projections among them), padding from 0 to
 *     beyond the kernel, dilation 2, 1x1, 2x2, 3x3 and 5x5 kernels, one output channel, and
 *     several images;
 *   - the same with Inf and NaN in dy (the taps that read dy's padding must not turn them into
 *     anything col2im would not), and with an Inf weight, which the route declines;
 *   - the route ran where the level has it (fp32 and fp16; bf16 where its GEMM is the widened
 *     fp32 one, or on the AMX route at a stride other than the stride-2 shapes its phases take;
 *     on the level's shapes), and not where it declines: an Inf weight, fewer input channels,
 *     the switch off;
 *   - its fp32 results are within the bound of the GEMM chain and col2im's additions against an
 *     fp64 reference: |dx - dx64| <= (O + KH KW) 2^-24 sum |dy w|. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "fp32/conv_f32_direct.h"
#include "nn/im2col.h" /* fx_conv_geom */
#include "testutil.h"
#include "conv_case_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const conv_case shapes[] = {
    {2, 16, 12, 12, 16, 3, 1, 1, 1}, /* ResNet-20's stage-1 channels; W 12: one tile of 12 */
    {2, 32, 9, 9, 32, 3, 1, 1, 1},   /* two blocks of 16 in one tile pair; W 9: tiles 5 + 4 */
    {2, 64, 8, 8, 64, 3, 1, 1, 1},   /* ResNet-20's stage 3: two channel blocks of 32 */
    {2, 5, 9, 11, 3, 3, 1, 1, 1},    /* C 5: declined */
    {1, 20, 7, 13, 7, 5, 1, 2, 1},   /* 5x5, C 20: a block of 32 with 4 live lanes */
    {1, 33, 6, 17, 9, 3, 1, 0, 1},   /* no padding (dx wider than dy), C 33: 32 + 1 */
    {1, 17, 10, 23, 4, 3, 1, 2, 1},  /* padding 2 = (K-1) d: dy wider than dx */
    {2, 8, 11, 11, 6, 3, 1, 2, 2},   /* dilation 2 */
    {1, 40, 5, 6, 1, 1, 1, 0, 1},    /* 1x1, one output channel; W 6: one tile of 6 */
    {1, 3, 6, 17, 5, 2, 1, 1, 1},    /* 2x2, padding 1 */
    {1, 16, 3, 32, 8, 3, 1, 1, 1},   /* W 32 at 16 channels: 11 + 11 + 10 */
    {1, 48, 4, 7, 5, 3, 1, 1, 1},    /* W 7 at 32 then 16 channels */
    {1, 1, 28, 28, 32, 5, 1, 2, 1},  /* the CNN's conv1 (one input channel: declined) */
    {1, 8, 5, 9, 12, 3, 1, 1, 1},    /* 8 input channels: AVX2's one vector, declined on AVX-512 */
    {2, 32, 14, 14, 64, 5, 1, 2, 1}, /* the CNN's conv2 */
    {2, 16, 9, 9, 8, 3, 2, 1, 1},    /* stride 2, odd H and W */
    {2, 16, 32, 32, 32, 3, 2, 1, 1}, /* ResNet-20's 16 -> 32 opener */
    {2, 32, 16, 16, 64, 3, 2, 1, 1}, /* its 32 -> 64 opener */
    {2, 16, 32, 32, 32, 1, 2, 0, 1}, /* its projections: only even pixels get taps */
    {1, 32, 16, 16, 64, 1, 2, 0, 1},
    {1, 17, 11, 14, 5, 3, 3, 1, 1},  /* stride 3 */
    {1, 16, 12, 13, 6, 3, 2, 2, 2},  /* stride 2, dilation 2 */
    {1, 24, 7, 9, 4, 5, 2, 0, 1},    /* stride 2 without padding: the last rows get no taps */
    {1, 16, 6, 7, 5, 1, 1, 1, 1},    /* padding beyond the kernel (dx smaller than dy) */
    {1, 16, 9, 10, 7, 2, 2, 1, 1},   /* 2x2 stride 2 */
};

/* dx with the route on or off, as raw storage; *ran: the route did a chunk */
static void *run(const conv_case *sh, fmt_t f, const tensor_t *dy, const tensor_t *w, int route,
                 int threads, int *ran, int64_t *nx)
{
    const int64_t xs[4] = {sh->N, sh->C, sh->H, sh->W};
    tensor_t *dx = tensor_new(f, 4, xs);
    fx_f32_dgrad_direct_set_enabled(route);
    flexpoint_set_num_threads(threads);
    const long long calls = fx_f32_dgrad_direct_calls();
    CHECK_STATUS(tensor_conv2d_backward_input(dx, dy, w, sh->stride, sh->stride, sh->pad,
                                              sh->pad, sh->dil, sh->dil),
                 FX_OK);
    *ran = fx_f32_dgrad_direct_calls() > calls;
    *nx = tensor_numel(dx);
    const size_t esz = f == FMT_FP32 ? 4 : 2;
    void *raw = malloc(esz * (size_t)*nx);
    CHECK_STATUS(tensor_get_raw(dx, raw), FX_OK);
    tensor_free(dx);
    return raw;
}

/* where the route should run: the level has it, the format computes in fp32 lanes of the
 * route's GEMM (bf16 only where that GEMM widens), on the level's shapes, finite weights */
static int expected(const conv_case *sh, fmt_t f, int finite_w)
{
    const fx_backend *be = fx_backend_active();
    const int bf16_widens =
        be->kernels[FX_OP_MATMUL][FMT_BF16] == be->kernels[FX_OP_MATMUL][FMT_FP32];
    const int shape_ok = sh->C >= be->conv.f32_dgrad_min_c &&
                         (!be->conv.f32_dgrad_max_o || sh->O <= be->conv.f32_dgrad_max_o) &&
                         sh->K * sh->K >= be->conv.f32_dgrad_min_taps;
    const int amx_strided = be->gemm.bf16_plain_min_k > 0 && sh->stride > 1;
    /* a bf16 dx the level's stride-2 phases take (conv.bf16_dgrad_s2) does not come here */
    const fx_conv_geom g = {.N = sh->N, .C = sh->C, .H = sh->H, .W = sh->W, .O = sh->O,
                            .KH = sh->K, .KW = sh->K, .sh = sh->stride, .sw = sh->stride,
                            .ph = sh->pad, .pw = sh->pad, .dh = sh->dil, .dw = sh->dil,
                            .OH = conv_case_out(sh->H, sh), .OW = conv_case_out(sh->W, sh)};
    const int phased = f == FMT_BF16 && be->conv.bf16_dgrad_s2 && be->conv.bf16_dgrad_s2_fits(&g);
    return be->conv.f32_dgrad && finite_w && shape_ok && !phased &&
           (f != FMT_BF16 || bf16_widens || amx_strided);
}

/* bf16 where the level's own route is not the widened one (AMX): the route's bits are the
 * widening route's, the fp32 GEMM and col2im on the widened values rounded once to bf16 */
static void *widened_bf16(const conv_case *sh, const tensor_t *dy, const tensor_t *w, int64_t *nx)
{
    const int64_t xs[4] = {sh->N, sh->C, sh->H, sh->W};
    const int64_t dys[4] = {sh->N, sh->O, conv_case_out(sh->H, sh), conv_case_out(sh->W, sh)};
    const int64_t ws[4] = {sh->O, sh->C, sh->K, sh->K};
    tensor_t *dy32 = tensor_new(FMT_FP32, 4, dys), *w32 = tensor_new(FMT_FP32, 4, ws);
    tensor_t *dx32 = tensor_new(FMT_FP32, 4, xs), *dx = tensor_new(FMT_BF16, 4, xs);
    float *v = malloc(sizeof(float) * (size_t)tensor_numel(dy));
    CHECK_STATUS(tensor_to_f32(dy, v), FX_OK);
    CHECK_STATUS(tensor_from_f32(dy32, v), FX_OK);
    free(v);
    v = malloc(sizeof(float) * (size_t)tensor_numel(w));
    CHECK_STATUS(tensor_to_f32(w, v), FX_OK);
    CHECK_STATUS(tensor_from_f32(w32, v), FX_OK);
    free(v);
    fx_f32_dgrad_direct_set_enabled(0);
    CHECK_STATUS(tensor_conv2d_backward_input(dx32, dy32, w32, sh->stride, sh->stride, sh->pad,
                                              sh->pad, sh->dil, sh->dil),
                 FX_OK);
    *nx = tensor_numel(dx);
    v = malloc(sizeof(float) * (size_t)*nx);
    CHECK_STATUS(tensor_to_f32(dx32, v), FX_OK);
    CHECK_STATUS(tensor_from_f32(dx, v), FX_OK);
    free(v);
    void *raw = malloc(2 * (size_t)*nx);
    CHECK_STATUS(tensor_get_raw(dx, raw), FX_OK);
    tensor_free(dy32);
    tensor_free(w32);
    tensor_free(dx32);
    tensor_free(dx);
    return raw;
}

static void compare_routes(const conv_case *sh, fmt_t f, const tensor_t *dy, const tensor_t *w,
                           int finite_w, const char *what, long *runs)
{
    int64_t nx = 0;
    int ran = 0;
    void *off = run(sh, f, dy, w, 0, 1, &ran, &nx);
    CHECK(!ran, "%s: the route ran while switched off", what);
    const fx_backend *be = fx_backend_active();
    if (f == FMT_BF16 && expected(sh, f, finite_w) &&
        be->kernels[FX_OP_MATMUL][FMT_BF16] != be->kernels[FX_OP_MATMUL][FMT_FP32]) {
        free(off);
        off = widened_bf16(sh, dy, w, &nx);
    }
    for (int threads = 1; threads <= 2; threads++) {
        void *on = run(sh, f, dy, w, 1, threads, &ran, &nx);
        const size_t esz = f == FMT_FP32 ? 4 : 2;
        CHECK(memcmp(on, off, esz * (size_t)nx) == 0,
              "%s %s %s N%lld C%lld %lldx%lld O%lld k%lld s%d p%d d%d, %d threads: the direct "
              "input gradient's bits differ from the GEMM and col2im's",
              fx_backend_active()->name, fmt_name(f), what, (long long)sh->N, (long long)sh->C,
              (long long)sh->H, (long long)sh->W, (long long)sh->O, (long long)sh->K,
              sh->stride, sh->pad, sh->dil, threads);
        CHECK(ran == expected(sh, f, finite_w), "%s %s %s C%lld k%lld s%d: the route %s",
              fx_backend_active()->name, fmt_name(f), what, (long long)sh->C, (long long)sh->K,
              sh->stride, ran ? "ran" : "did not run");
        *runs += ran;
        free(on);
    }
    free(off);
}

/* fp32 results against an fp64 reference and the bound of one chain of O FMAs and at most
 * KH KW additions */
static void check_reference(const conv_case *sh, const tensor_t *dy, const tensor_t *w)
{
    const int64_t OH = conv_case_out(sh->H, sh), OW = conv_case_out(sh->W, sh);
    const int64_t xs[4] = {sh->N, sh->C, sh->H, sh->W};
    float *dyv = malloc(sizeof(float) * (size_t)tensor_numel(dy));
    float *wv = malloc(sizeof(float) * (size_t)tensor_numel(w));
    CHECK_STATUS(tensor_to_f32(dy, dyv), FX_OK);
    CHECK_STATUS(tensor_to_f32(w, wv), FX_OK);
    tensor_t *dx = tensor_new(FMT_FP32, 4, xs);
    fx_f32_dgrad_direct_set_enabled(1);
    CHECK_STATUS(tensor_conv2d_backward_input(dx, dy, w, sh->stride, sh->stride, sh->pad, sh->pad,
                                              sh->dil, sh->dil),
                 FX_OK);
    float *dxv = malloc(sizeof(float) * (size_t)tensor_numel(dx));
    CHECK_STATUS(tensor_to_f32(dx, dxv), FX_OK);
    const double bound = (double)(sh->O + sh->K * sh->K) * 0x1p-24;
    long bad = 0;
    for (int64_t n = 0; n < sh->N; n++)
        for (int64_t c = 0; c < sh->C; c++)
            for (int64_t ih = 0; ih < sh->H; ih++)
                for (int64_t iw = 0; iw < sh->W; iw++) {
                    double ref = 0, mag = 0;
                    for (int64_t o = 0; o < sh->O; o++)
                        for (int64_t kh = 0; kh < sh->K; kh++)
                            for (int64_t kw = 0; kw < sh->K; kw++) {
                                const int64_t sy = ih + sh->pad - kh * sh->dil;
                                const int64_t sx = iw + sh->pad - kw * sh->dil;
                                if (sy < 0 || sx < 0 || sy % sh->stride || sx % sh->stride)
                                    continue;
                                const int64_t oh = sy / sh->stride, ow = sx / sh->stride;
                                if (oh >= OH || ow >= OW) continue;
                                const double p =
                                    (double)dyv[((n * sh->O + o) * OH + oh) * OW + ow] *
                                    wv[((o * sh->C + c) * sh->K + kh) * sh->K + kw];
                                ref += p;
                                mag += fabs(p);
                            }
                    const double got = dxv[((n * sh->C + c) * sh->H + ih) * sh->W + iw];
                    bad += !(fabs(got - ref) <= bound * mag + 1e-30);
                }
    CHECK(bad == 0, "%s fp32 C%lld O%lld k%lld: %ld values outside (O + KH KW) 2^-24 sum |dy w|",
          fx_backend_active()->name, (long long)sh->C, (long long)sh->O, (long long)sh->K, bad);
    tensor_free(dx);
    free(dyv);
    free(wv);
    free(dxv);
}

int main(void)
{
    static const fmt_t fmts[3] = {FMT_FP32, FMT_FP16, FMT_BF16};
    test_rng r;
    test_rng_seed(&r, 20261206);
    int levels_with = 0;
    long runs = 0;
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        levels_with += fx_backend_active()->conv.f32_dgrad != NULL;
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const conv_case *sh = &shapes[si];
            const int64_t dys[4] = {sh->N, sh->O, conv_case_out(sh->H, sh),
                                    conv_case_out(sh->W, sh)};
            const int64_t ws[4] = {sh->O, sh->C, sh->K, sh->K};
            for (int fi = 0; fi < 3; fi++) {
                const fmt_t f = fmts[fi];
                tensor_t *dy = conv_case_tensor(f, dys, 1.0, &r);
                tensor_t *w = conv_case_tensor(f, ws, 0.3, &r);
                compare_routes(sh, f, dy, w, 1, "normal", &runs);
                if (f == FMT_FP32) check_reference(sh, dy, w);
                if (si % 3 == 0) {
                    conv_case_poison(dy, 1);
                    compare_routes(sh, f, dy, w, 1, "Inf/NaN in dy", &runs);
                    /* an Inf weight: declined, so the GEMM's NaNs where it meets padding do
                     * not appear */
                    float *wv = malloc(sizeof(float) * (size_t)tensor_numel(w));
                    CHECK_STATUS(tensor_to_f32(w, wv), FX_OK);
                    wv[tensor_numel(w) / 2] = INFINITY;
                    CHECK_STATUS(tensor_from_f32(w, wv), FX_OK);
                    free(wv);
                    compare_routes(sh, f, dy, w, 0, "Inf weight", &runs);
                }
                tensor_free(dy);
                tensor_free(w);
            }
        }
    }
    fx_f32_dgrad_direct_set_enabled(1);
    flexpoint_set_num_threads(1);
    CHECK(!levels_with || runs > 0, "the direct input gradient never ran");
    if (!levels_with) return test_skip("test_conv_f32_dgrad", "no CPU level with the kernel");
    return test_finish("test_conv_f32_dgrad");
}
