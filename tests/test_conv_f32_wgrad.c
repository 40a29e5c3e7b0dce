/* The fp32 weight gradient without patch panels or packing (src/fp32/conv_f32_direct.h,
 * fx_backend.conv.f32_wgrad), on each CPU level that has it (AVX-512):
 *   - tensor_conv2d_backward_weight in fp32, fp16 and bf16 gives the same bits with the route
 *     on and off (the panels or the patch matrix, and the GEMM), at 1 and 2 threads, on shapes
 *     with partial blocks of 16 output channels, every tile height (1..12 rows of C KH KW),
 *     strides 1 to 3, dilation 2, 1x1, 2x2, 3x3 and 5x5 kernels, one input channel, several
 *     images and batches of several chunks (whose sums are added in groups);
 *   - the same with Inf and NaN in x and dy;
 *   - the route ran where the level has it (fp32 and fp16; bf16 only where its GEMM is the
 *     widened fp32 one; on the level's range of output channels), and not with the switch
 *     off or outside that range;
 *   - its fp32 results are within the bound of the chains and the chunk sums against an fp64
 *     reference: |dw - dw64| <= N OH OW 2^-24 sum |x dy|. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "fp32/conv_f32_direct.h"
#include "testutil.h"
#include "conv_case_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const conv_case shapes[] = {
    {4, 16, 12, 12, 16, 3, 1, 1, 1},  /* ResNet-20's stage-1 channels: 144 rows, 12 tiles */
    {2, 32, 9, 9, 32, 3, 1, 1, 1},    /* 288 rows, one block of 32 */
    {2, 64, 8, 8, 64, 3, 1, 1, 1},    /* 64 output channels: declined on AVX-512 */
    {2, 5, 9, 11, 20, 3, 1, 1, 1},    /* 45 rows: tiles 12 + 11 + 11 + 11; O 20: 16 + 4 */
    {1, 3, 7, 13, 32, 5, 1, 2, 1},    /* 5x5, one block of 32 */
    {2, 7, 11, 10, 17, 3, 2, 1, 1},   /* stride 2 */
    {1, 4, 11, 14, 18, 3, 3, 1, 1},   /* stride 3 */
    {2, 6, 12, 13, 16, 3, 2, 2, 2},   /* stride 2, dilation 2 */
    {2, 16, 16, 16, 32, 1, 2, 0, 1},  /* a 1x1 projection */
    {1, 9, 6, 17, 24, 2, 1, 1, 1},    /* 2x2 */
    {1, 1, 28, 28, 32, 5, 1, 2, 1},   /* the CNN's conv1: one input channel, 25 rows */
    {2, 32, 14, 14, 64, 5, 1, 2, 1},  /* the CNN's conv2 (declined on AVX-512) */
    {1, 11, 5, 5, 12, 1, 1, 0, 1},    /* O 12: below the vector width, declined */
    {64, 16, 32, 32, 16, 3, 1, 1, 1}, /* many chunks, summed in groups */
};

/* dw with the route on or off, as raw storage; *ran: the route did a chunk */
static void *run(const conv_case *sh, fmt_t f, const tensor_t *x, const tensor_t *dy, int route,
                 int threads, int *ran, int64_t *nw)
{
    const int64_t ws[4] = {sh->O, sh->C, sh->K, sh->K};
    tensor_t *dw = tensor_new(f, 4, ws);
    fx_f32_wgrad_direct_set_enabled(route);
    flexpoint_set_num_threads(threads);
    const long long calls = fx_f32_wgrad_direct_calls();
    CHECK_STATUS(tensor_conv2d_backward_weight(dw, x, dy, sh->stride, sh->stride, sh->pad,
                                               sh->pad, sh->dil, sh->dil),
                 FX_OK);
    *ran = fx_f32_wgrad_direct_calls() > calls;
    *nw = tensor_numel(dw);
    const size_t esz = f == FMT_FP32 ? 4 : 2;
    void *raw = malloc(esz * (size_t)*nw);
    CHECK_STATUS(tensor_get_raw(dw, raw), FX_OK);
    tensor_free(dw);
    return raw;
}

static int expected(const conv_case *sh, fmt_t f)
{
    const fx_backend *be = fx_backend_active();
    const int bf16_widens =
        be->kernels[FX_OP_MATMUL][FMT_BF16] == be->kernels[FX_OP_MATMUL][FMT_FP32];
    /* bf16 on a pair or AMX route keeps its own kernels */
    return be->conv.f32_wgrad && sh->O >= be->conv.f32_wgrad_min_o &&
           (!be->conv.f32_wgrad_max_o || sh->O <= be->conv.f32_wgrad_max_o) &&
           (f != FMT_BF16 || bf16_widens);
}

static void compare_routes(const conv_case *sh, fmt_t f, const tensor_t *x, const tensor_t *dy,
                           const char *what, long *runs)
{
    int64_t nw = 0;
    int ran = 0;
    void *off = run(sh, f, x, dy, 0, 1, &ran, &nw);
    CHECK(!ran, "%s: the route ran while switched off", what);
    for (int threads = 1; threads <= 2; threads++) {
        void *on = run(sh, f, x, dy, 1, threads, &ran, &nw);
        const size_t esz = f == FMT_FP32 ? 4 : 2;
        CHECK(memcmp(on, off, esz * (size_t)nw) == 0,
              "%s %s %s N%lld C%lld %lldx%lld O%lld k%lld s%d p%d d%d, %d threads: the direct "
              "weight gradient's bits differ from the GEMM's",
              fx_backend_active()->name, fmt_name(f), what, (long long)sh->N, (long long)sh->C,
              (long long)sh->H, (long long)sh->W, (long long)sh->O, (long long)sh->K,
              sh->stride, sh->pad, sh->dil, threads);
        /* bf16 on the pair or AMX routes may take its own direct kernels: then not this one */
        const int own_bf16 = f == FMT_BF16 && fx_backend_active()->conv.bf16_wgrad;
        CHECK(own_bf16 ? !ran || expected(sh, f) : ran == expected(sh, f),
              "%s %s %s C%lld O%lld k%lld: the route %s", fx_backend_active()->name, fmt_name(f),
              what, (long long)sh->C, (long long)sh->O, (long long)sh->K,
              ran ? "ran" : "did not run");
        *runs += ran;
        free(on);
    }
    free(off);
}

static void check_reference(const conv_case *sh, const tensor_t *x, const tensor_t *dy)
{
    const int64_t OH = conv_case_out(sh->H, sh), OW = conv_case_out(sh->W, sh);
    const int64_t ws[4] = {sh->O, sh->C, sh->K, sh->K};
    float *xv = malloc(sizeof(float) * (size_t)tensor_numel(x));
    float *dyv = malloc(sizeof(float) * (size_t)tensor_numel(dy));
    CHECK_STATUS(tensor_to_f32(x, xv), FX_OK);
    CHECK_STATUS(tensor_to_f32(dy, dyv), FX_OK);
    tensor_t *dw = tensor_new(FMT_FP32, 4, ws);
    fx_f32_wgrad_direct_set_enabled(1);
    CHECK_STATUS(tensor_conv2d_backward_weight(dw, x, dy, sh->stride, sh->stride, sh->pad,
                                               sh->pad, sh->dil, sh->dil),
                 FX_OK);
    float *dwv = malloc(sizeof(float) * (size_t)tensor_numel(dw));
    CHECK_STATUS(tensor_to_f32(dw, dwv), FX_OK);
    const double bound = (double)(sh->N * OH * OW) * 0x1p-24;
    long bad = 0;
    for (int64_t o = 0; o < sh->O; o++)
        for (int64_t c = 0; c < sh->C; c++)
            for (int64_t kh = 0; kh < sh->K; kh++)
                for (int64_t kw = 0; kw < sh->K; kw++) {
                    double ref = 0, mag = 0;
                    for (int64_t n = 0; n < sh->N; n++)
                        for (int64_t oh = 0; oh < OH; oh++)
                            for (int64_t ow = 0; ow < OW; ow++) {
                                const int64_t ih = oh * sh->stride - sh->pad + kh * sh->dil;
                                const int64_t iw = ow * sh->stride - sh->pad + kw * sh->dil;
                                if (ih < 0 || ih >= sh->H || iw < 0 || iw >= sh->W) continue;
                                const double p =
                                    (double)xv[((n * sh->C + c) * sh->H + ih) * sh->W + iw] *
                                    dyv[((n * sh->O + o) * OH + oh) * OW + ow];
                                ref += p;
                                mag += fabs(p);
                            }
                    const double got = dwv[((o * sh->C + c) * sh->K + kh) * sh->K + kw];
                    bad += !(fabs(got - ref) <= bound * mag + 1e-30);
                }
    CHECK(bad == 0, "%s fp32 C%lld O%lld k%lld: %ld weights outside N OH OW 2^-24 sum |x dy|",
          fx_backend_active()->name, (long long)sh->C, (long long)sh->O, (long long)sh->K, bad);
    tensor_free(dw);
    free(xv);
    free(dyv);
    free(dwv);
}

int main(void)
{
    static const fmt_t fmts[3] = {FMT_FP32, FMT_FP16, FMT_BF16};
    test_rng r;
    test_rng_seed(&r, 20261207);
    int levels_with = 0;
    long runs = 0;
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        levels_with += fx_backend_active()->conv.f32_wgrad != NULL;
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const conv_case *sh = &shapes[si];
            const int64_t xs[4] = {sh->N, sh->C, sh->H, sh->W};
            const int64_t dys[4] = {sh->N, sh->O, conv_case_out(sh->H, sh),
                                    conv_case_out(sh->W, sh)};
            for (int fi = 0; fi < 3; fi++) {
                const fmt_t f = fmts[fi];
                tensor_t *x = conv_case_tensor(f, xs, 1.0, &r);
                tensor_t *dy = conv_case_tensor(f, dys, 0.1, &r);
                compare_routes(sh, f, x, dy, "normal", &runs);
                if (f == FMT_FP32 && sh->N * sh->C * sh->H * sh->W < 20000)
                    check_reference(sh, x, dy);
                if (si % 4 == 0) {
                    conv_case_poison(x, 0);
                    conv_case_poison(dy, 0);
                    compare_routes(sh, f, x, dy, "Inf/NaN in x and dy", &runs);
                }
                tensor_free(x);
                tensor_free(dy);
            }
        }
    }
    fx_f32_wgrad_direct_set_enabled(1);
    flexpoint_set_num_threads(1);
    CHECK(!levels_with || runs > 0, "the direct weight gradient never ran");
    if (!levels_with) return test_skip("test_conv_f32_wgrad", "no CPU level with the kernel");
    return test_finish("test_conv_f32_wgrad");
}
