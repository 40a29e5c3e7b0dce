/* The exact int16 forward convolution on AMX-INT8 tiles (src/flex/conv_i16_amx.c):
 *   - the kernel on a chunk gives the exact int64 sums (written out here in scalar int64) and
 *     their largest |value|, bit for bit, at 1 and 2 threads, on full-range int16 data (-32768
 *     and 32767 included, where a byte split or an int32 sum that wrapped would show) and on
 *     small data;
 *   - shapes: ResNet-20's 16-, 32- and 64-channel 3x3 layers (kernel rows of 48, 96 and 192
 *     bytes: pieces of 48, 48 and 64), stride 2, the CNN's 5x5 (160 bytes: pieces of 40), 48
 *     output channels, rows that are not whole 16-pixel blocks (OW 10, 7), and the span blocks
 *     (16 consecutive positions of the padded grid across output rows) taken exactly where
 *     they save blocks: 8 x 8, OW 10 and 7, but not 14 x 14 or 32 x 32;
 *   - the weight gradient's kernel (src/flex/conv_i16_wgrad_amx.c) gives the exact int64 sums,
 *     written and added, on full-range and small data, over several blocks of images;
 *   - the forward kernel with its sums rounded in its epilogue (fx_i16_fwd_amx_round) gives the
 *     mantissas and per-image statistics of quant_i64_t on the exact sums, at shifts across the
 *     fast route's range, declining exactly where a sum is above the saturation bound;
 *   - through tensor_conv2d, its input gradient and its weight gradient in FLEX16_5 and DFP16,
 *     the kernels run and the results are the bits of the same ops with the AMX kernels off,
 *     and over a run of calls (steady guesses) the forward pass rounds in the kernel and gives
 *     the bits it gives with that switched off.
 * Skips where the CPU or the OS gives no AMX-INT8. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "flex/conv_i16.h"
#include "flex/flex_kernels.h"
#include "flex/gemm_i16.h"
#include "nn/im2col.h"
#include "nn/nn_ops.h"
#include "nn/conv_dgrad_phases.h"
#include "testutil.h"
#include "dgrad_round_check.h"

#include <stdlib.h>
#include <string.h>

static int16_t draw(test_rng *r, int full)
{
    if (full == 2) return -32768; /* every product 2^30: the largest sums, 16384 K HH */
    if (full) {
        const uint64_t u = test_rng_u64(r);
        if (u % 16 == 0) return (int16_t)(u % 32 == 0 ? -32768 : 32767);
        return (int16_t)(uint16_t)(u >> 16);
    }
    return (int16_t)test_rng_range(r, -300, 300);
}

/* Whether the rounding kernel should take every image's sums at shift sh: a shift on the fast
 * route and no image with a sum above its bound. */
static int round_fits(const uint64_t *imax, int64_t N, int sh)
{
    int fits = fx_q64_fast_ok(sh);
    for (int64_t n = 0; n < N && n < 8 && fits; n++) fits = imax[n] <= fx_q64_fast_bound(sh);
    return fits;
}

/* got's mantissas and statistics against quant_i64_t's on the exact sums at shift sh: the
 * count of differing mantissas, and in *stats whether every image's statistics are equal. */
static long round_compare(const int64_t *want, const int16_t *got, const fx_qstats *gp,
                          int64_t N, int64_t P, int64_t O, int sh, int16_t *ref,
                          fx_qstats *rp, int *stats)
{
    const fx_backend *be = fx_backend_get(FX_BACKEND_AVX512);
    for (int64_t n = 0; n < N; n++)
        be->cvt.quant_i64_t(want + n * P * O, ref + n * O * P, P, O, sh, &rp[n]);
    long bad = 0;
    for (int64_t i = 0; i < N * O * P; i++) bad += got[i] != ref[i];
    *stats = 1;
    for (int64_t n = 0; n < N; n++)
        *stats = *stats && gp[n].saturated == rp[n].saturated &&
                 gp[n].nonfinite == rp[n].nonfinite && gp[n].underflow == rp[n].underflow &&
                 gp[n].max_abs_in == rp[n].max_abs_in && gp[n].max_abs_out == rp[n].max_abs_out;
    return bad;
}

/* The kernel with its sums rounded in its epilogue (fx_i16_fwd_amx_round) against the exact
 * sums want ([P, O] per image) rounded per image by the level's quant_i64_t: the same NCHW
 * mantissas and per-image statistics, at shifts across the fast route's range and on both
 * sides of an image's saturation bound; declined (returns 0) exactly where a sum of an image
 * is above that bound and for shifts off the route. Then rounded at two shifts at once (each
 * shift paired with another from the list, higher and lower): each rounding reported whole
 * exactly where that shift alone would be taken, and then those of quant_i64_t; one that is
 * not whole keeps the largest |sum| and counts a saturation; declined where neither is. */
static void check_round(const fx_conv_geom *g, const int16_t *x, const uint32_t *wq,
                        uint32_t *scr, const int64_t *want)
{
    const int64_t N = g->N, O = g->O, P = g->OH * g->OW;
    const size_t ny = (size_t)(N * O * P);
    int16_t *got = malloc(2 * ny), *got2 = malloc(2 * ny), *ref = malloc(2 * ny);
    fx_qstats *gp = malloc(sizeof *gp * (size_t)N), *gp2 = malloc(sizeof *gp2 * (size_t)N),
              *rp = malloc(sizeof *rp * (size_t)N);
    uint64_t imax[8] = {0};
    for (int64_t n = 0; n < N && n < 8; n++)
        for (int64_t i = 0; i < P * O; i++) {
            const int64_t v = want[n * P * O + i];
            const uint64_t a = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
            imax[n] = a > imax[n] ? a : imax[n];
        }
    /* the shift at which the first image's sums just fit, and one below it; the same for
     * every image's (below it, the image that breaks a rounding may be a later one, whose
     * earlier images must then report the break too) */
    int fit = 1, fit_all = 1;
    while (fit < 47 && imax[0] > fx_q64_fast_bound(fit)) fit++;
    while (fit_all < 47 && !round_fits(imax, N, fit_all)) fit_all++;
    const int shifts[12] = {0,   1,  3,  9,  17, 33, 47, 48, fit, fit > 1 ? fit - 1 : 2,
                            fit_all, fit_all > 1 ? fit_all - 1 : 2};
    for (int k = 0; k < 12; k++) {
        const int sh = shifts[k];
        memset(got, 0x5A, 2 * ny);
        const int done = fx_i16_fwd_amx_round(g, x, N, wq, scr, sh, got, gp, 0, NULL, NULL);
        const int fits = round_fits(imax, N, sh) ? FX_I16_ROUND_FIRST : 0;
        CHECK(done == fits, "C%lld O%lld OW%lld shift %d: the rounding kernel %s",
              (long long)g->C, (long long)O, (long long)g->OW, sh,
              done ? "took sums above the bound" : "declined sums within it");
        if (!done || !fits) continue;
        int stats;
        const long bad = round_compare(want, got, gp, N, P, O, sh, ref, rp, &stats);
        CHECK(bad == 0 && stats, "C%lld O%lld OW%lld stride %lld shift %d: %ld mantissas "
              "differ from quant_i64_t's, statistics %s", (long long)g->C, (long long)O,
              (long long)g->OW, (long long)g->sw, sh, bad, stats ? "equal" : "differ");
    }
    for (int k = 0; k < 12; k++)
        for (int d = 1; d <= 11; d += 10) { /* the next shift in the list and the one before */
            const int sh = shifts[k], sh2 = shifts[(k + d) % 12];
            memset(got, 0x5A, 2 * ny);
            memset(got2, 0xA5, 2 * ny);
            const int done = fx_i16_fwd_amx_round(g, x, N, wq, scr, sh, got, gp, sh2, got2, gp2);
            /* both shifts on the route: each rounding whole where its shift fits; else none */
            const int on_route = fx_q64_fast_ok(sh) && fx_q64_fast_ok(sh2);
            const int fits = on_route ? (round_fits(imax, N, sh) ? FX_I16_ROUND_FIRST : 0) |
                                            (round_fits(imax, N, sh2) ? FX_I16_ROUND_SECOND : 0)
                                      : 0;
            CHECK(done == fits, "C%lld O%lld OW%lld shifts %d and %d: the rounding kernel "
                  "reported %d whole, want %d", (long long)g->C, (long long)O, (long long)g->OW,
                  sh, sh2, done, fits);
            if (done != fits || !done) continue;
            /* a rounding not whole: every image's largest |sum| (where the write's exponent
             * comes from), with a saturation counted, so that nobody takes it for whole */
            for (int k2 = 0; k2 < 2; k2++) {
                if (done & (k2 ? FX_I16_ROUND_SECOND : FX_I16_ROUND_FIRST)) continue;
                const fx_qstats *q = k2 ? gp2 : gp;
                int keep_max = 1;
                for (int64_t n = 0; n < N && n < 8; n++)
                    keep_max = keep_max && q[n].max_abs_in == (double)imax[n] &&
                               q[n].saturated > 0;
                CHECK(keep_max, "C%lld shifts %d and %d: the broken rounding's statistics lost "
                      "the largest |sum| or its saturation", (long long)g->C, sh, sh2);
            }
            int stats = 1, stats2 = 1;
            const long bad = done & FX_I16_ROUND_FIRST
                                 ? round_compare(want, got, gp, N, P, O, sh, ref, rp, &stats)
                                 : 0;
            const long bad2 = done & FX_I16_ROUND_SECOND
                                  ? round_compare(want, got2, gp2, N, P, O, sh2, ref, rp, &stats2)
                                  : 0;
            CHECK(bad == 0 && stats && bad2 == 0 && stats2,
                  "C%lld O%lld OW%lld stride %lld shifts %d and %d: %ld and %ld mantissas "
                  "differ from quant_i64_t's, statistics %s and %s", (long long)g->C,
                  (long long)O, (long long)g->OW, (long long)g->sw, sh, sh2, bad, bad2,
                  stats ? "equal" : "differ", stats2 ? "equal" : "differ");
        }
    free(got);
    free(got2);
    free(ref);
    free(gp);
    free(gp2);
    free(rp);
}

static void check_kernel(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH,
                         int64_t KW, int pad, int stride, int full, uint64_t seed)
{
    const int64_t OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
    const fx_conv_geom g = {.N = N, .C = C, .H = H, .W = W, .O = O, .KH = KH, .KW = KW,
                            .sh = stride, .sw = stride, .ph = pad, .pw = pad, .dh = 1, .dw = 1,
                            .OH = OH, .OW = OW};
    CHECK(fx_i16_fwd_amx_fits(&g), "C%lld O%lld k%lldx%lld: expected to fit", (long long)C,
          (long long)O, (long long)KH, (long long)KW);
    const int64_t nx = N * C * H * W, nw = O * C * KH * KW, ny = N * OH * OW * O;
    test_rng r;
    test_rng_seed(&r, seed);
    int16_t *x = malloc(2 * (size_t)nx), *w = malloc(2 * (size_t)nw);
    for (int64_t i = 0; i < nx; i++) x[i] = draw(&r, full);
    for (int64_t i = 0; i < nw; i++) w[i] = draw(&r, full);
    if (full == 3) { /* ties: every sum is one input, +-(25600 + l) for l < 256 (the high parts
                      * of the largest and smallest sums tie, their low bytes decide) */
        for (int64_t i = 0; i < nx; i++) {
            const int16_t v = (int16_t)(25600 + test_rng_range(&r, 0, 255));
            x[i] = (i / (C * H * W)) % 2 ? (int16_t)-v : v;
        }
        for (int64_t i = 0; i < nw; i++) w[i] = 0;
        for (int64_t o = 0; o < O; o++) w[((o * C + 0) * KH + KH / 2) * KW + KW / 2] = 1;
    }
    uint32_t *wq = aligned_alloc(64, ((size_t)fx_i16_fwd_amx_weights_numel(&g) * 4 + 63) / 64 * 64);
    fx_i16_fwd_amx_pack_weights(&g, w, wq);
    uint32_t *scr = malloc(4 * (size_t)fx_i16_fwd_amx_scratch(&g, N));
    int64_t *y = malloc(8 * (size_t)ny), *want = malloc(8 * (size_t)ny);
    uint64_t wmax = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++)
                for (int64_t o = 0; o < O; o++) {
                    int64_t s = 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t kh = 0; kh < KH; kh++)
                            for (int64_t kw = 0; kw < KW; kw++) {
                                const int64_t ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                s += (int64_t)x[((n * C + c) * H + ih) * W + iw] *
                                     w[((o * C + c) * KH + kh) * KW + kw];
                            }
                    want[((n * OH + oh) * OW + ow) * O + o] = s;
                    const uint64_t a = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
                    if (a > wmax) wmax = a;
                }
    /* span blocks (16 consecutive positions of the padded grid, across output rows) where
     * they make fewer blocks than whole rows do: stride 1, rows under 16 pixels or not whole
     * blocks */
    const int64_t Wp = W + 2 * pad;
    const int span = stride == 1 && (OH - 1) * Wp + OW + 15 < 16 * OH * ((OW + 15) / 16);
    const long long spans = fx_i16_fwd_amx_span_calls();
    for (int threads = 1; threads <= 2; threads++) {
        memset(y, 0x5A, 8 * (size_t)ny);
        uint64_t ymax = 0;
        CHECK(fx_i16_fwd_amx(&g, x, N, wq, scr, y, threads, &ymax) == 1, "the kernel declined");
        long bad = 0;
        for (int64_t i = 0; i < ny; i++) bad += y[i] != want[i];
        CHECK(bad == 0, "C%lld %lldx%lld O%lld k%lldx%lld pad %d stride %d %s data, %d "
              "thread(s): %ld sums differ from the exact ones", (long long)C, (long long)H,
              (long long)W, (long long)O, (long long)KH, (long long)KW, pad, stride,
              full == 3 ? "tied" : full == 2 ? "extreme" : full ? "full-range" : "small", threads,
              bad);
        CHECK(ymax == wmax, "C%lld O%lld: largest |sum| %llu, want %llu", (long long)C,
              (long long)O, (unsigned long long)ymax, (unsigned long long)wmax);
    }
    CHECK((fx_i16_fwd_amx_span_calls() > spans) == span, "C%lld %lldx%lld k%lld stride %d: "
          "span blocks %s", (long long)C, (long long)H, (long long)W, (long long)KH, stride,
          span ? "not taken" : "taken");
    /* both epilogues on the same sums: the int32 one where it applies (at most 480 products,
     * shifts 9-30, which the shifts check_round tries include), then the int64 one */
    const long long r32 = fx_i16_fwd_amx_round32_images();
    check_round(&g, x, wq, scr, want);
    if (C * KH * KW <= 480)
        CHECK(fx_i16_fwd_amx_round32_images() > r32, "C%lld k%lldx%lld: the int32 epilogue "
              "never ran", (long long)C, (long long)KH, (long long)KW);
    fx_i16_fwd_amx_round32_set_enabled(0);
    check_round(&g, x, wq, scr, want);
    fx_i16_fwd_amx_round32_set_enabled(1);
    free(x);
    free(w);
    free(wq);
    free(scr);
    free(y);
    free(want);
}

/* The weight gradient's kernel on a chunk: dW^T[(c KH + kh) KW + kw][o] the exact int64 sums,
 * written (add 0) and then added to (add 1: twice the sums) */
static void check_wgrad_kernel(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KS,
                               int pad, int stride, int full, uint64_t seed)
{
    const int64_t OH = (H + 2 * pad - KS) / stride + 1, OW = (W + 2 * pad - KS) / stride + 1;
    const int64_t KK = KS * KS, P = OH * OW;
    const fx_conv_geom g = {.N = N, .C = C, .H = H, .W = W, .O = O, .KH = KS, .KW = KS,
                            .sh = stride, .sw = stride, .ph = pad, .pw = pad, .dh = 1, .dw = 1,
                            .OH = OH, .OW = OW};
    CHECK(fx_i16_wgrad_amx_fits(&g), "wgrad C%lld O%lld: expected to fit", (long long)C,
          (long long)O);
    const int64_t nx = N * C * H * W, ndy = N * O * P, nw = C * KK * O;
    test_rng r;
    test_rng_seed(&r, seed);
    int16_t *x = malloc(2 * (size_t)nx), *dy = malloc(2 * (size_t)ndy);
    for (int64_t i = 0; i < nx; i++) x[i] = draw(&r, full);
    for (int64_t i = 0; i < ndy; i++) dy[i] = draw(&r, full);
    uint32_t *scr = malloc(4 * (size_t)fx_i16_wgrad_amx_scratch(&g, N));
    int64_t *dwt = malloc(8 * (size_t)nw), *want = calloc((size_t)nw, 8);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t t = 0; t < KK; t++)
                for (int64_t o = 0; o < O; o++) {
                    int64_t s = 0;
                    for (int64_t oh = 0; oh < OH; oh++)
                        for (int64_t ow = 0; ow < OW; ow++) {
                            const int64_t ih = oh * stride - pad + t / KS;
                            const int64_t iw = ow * stride - pad + t % KS;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                            s += (int64_t)x[((n * C + c) * H + ih) * W + iw] *
                                 dy[((n * O + o) * OH + oh) * OW + ow];
                        }
                    want[(c * KK + t) * O + o] += s;
                }
    memset(dwt, 0x5A, 8 * (size_t)nw);
    CHECK(fx_i16_wgrad_amx(&g, x, dy, N, scr, dwt, 0) == 1, "the weight gradient declined");
    long bad = 0;
    for (int64_t i = 0; i < nw; i++) bad += dwt[i] != want[i];
    CHECK(bad == 0, "wgrad C%lld %lldx%lld O%lld k%lld stride %d %s data, %lld images: %ld sums "
          "differ from the exact ones", (long long)C, (long long)H, (long long)W, (long long)O,
          (long long)KS, stride, full ? "full-range" : "small", (long long)N, bad);
    CHECK(fx_i16_wgrad_amx(&g, x, dy, N, scr, dwt, 1) == 1, "the weight gradient declined");
    bad = 0;
    for (int64_t i = 0; i < nw; i++) bad += dwt[i] != 2 * want[i];
    CHECK(bad == 0, "wgrad C%lld O%lld, add: %ld sums are not twice the exact ones", (long long)C,
          (long long)O, bad);
    free(x);
    free(dy);
    free(scr);
    free(dwt);
    free(want);
}

/* The ops with the kernel (AMX on) against the same ops with every AMX kernel off */
static void check_ops(fmt_t f, int64_t N, int64_t C, int64_t H, int64_t O, int stride,
                      uint64_t seed)
{
    const int64_t OH = (H + 2 - 3) / stride + 1;
    tensor_t *x = test_new4(f, N, C, H, H), *w = test_new4(f, O, C, 3, 3), *dy = test_new4(f, N, O, OH, OH);
    tensor_t *y[2] = {test_new4(f, N, O, OH, OH), test_new4(f, N, O, OH, OH)};
    tensor_t *dx[2] = {test_new4(f, N, C, H, H), test_new4(f, N, C, H, H)};
    tensor_t *dw[2] = {test_new4(f, O, C, 3, 3), test_new4(f, O, C, 3, 3)};
    test_rng r;
    test_rng_seed(&r, seed);
    const int64_t nx = N * C * H * H, nw = O * C * 9, ndy = N * O * OH * OH;
    float *buf = malloc(4 * (size_t)(nx + nw + ndy));
    for (int64_t i = 0; i < nx + nw + ndy; i++) buf[i] = (float)test_rng_normal(&r);
    CHECK_STATUS(tensor_from_f32(x, buf), FX_OK);
    CHECK_STATUS(tensor_from_f32(w, buf + nx), FX_OK);
    CHECK_STATUS(tensor_from_f32(dy, buf + nx + nw), FX_OK);
    for (int pass = 0; pass < 2; pass++) {
        CHECK_STATUS(fx_gemm_i16_force_kernel(pass ? FX_GEMM_I16_KERNEL_AMX
                                                   : FX_GEMM_I16_KERNEL_FAST),
                     FX_OK);
        const long long calls = fx_i16_fwd_amx_calls();
        CHECK_STATUS(tensor_conv2d(y[pass], x, w, stride, stride, 1, 1, 1, 1), FX_OK);
        if (stride == 1) {
            CHECK_STATUS(tensor_conv2d_backward_input(dx[pass], dy, w, 1, 1, 1, 1, 1, 1), FX_OK);
            const long long wcalls = fx_i16_wgrad_amx_calls();
            CHECK_STATUS(tensor_conv2d_backward_weight(dw[pass], x, dy, 1, 1, 1, 1, 1, 1), FX_OK);
            CHECK((fx_i16_wgrad_amx_calls() > wcalls) == pass, "%s C%lld: the AMX weight "
                  "gradient %s", fmt_name(f), (long long)C, pass ? "did not run" : "ran with AMX off");
        }
        CHECK((fx_i16_fwd_amx_calls() > calls) == pass, "%s C%lld: the AMX kernel %s",
              fmt_name(f), (long long)C, pass ? "did not run" : "ran with AMX off");
    }
    CHECK_STATUS(fx_gemm_i16_force_kernel(FX_GEMM_I16_KERNEL_AUTO), FX_OK);
    const int64_t n[3] = {N * O * OH * OH, nx, nw};
    for (int k = 0; k < (stride == 1 ? 3 : 1); k++) {
        tensor_t *const *t = k == 2 ? dw : k ? dx : y;
        int16_t *a = malloc(2 * (size_t)n[k]), *b = malloc(2 * (size_t)n[k]);
        CHECK_STATUS(tensor_get_raw(t[0], a), FX_OK);
        CHECK_STATUS(tensor_get_raw(t[1], b), FX_OK);
        CHECK(memcmp(a, b, 2 * (size_t)n[k]) == 0 &&
                  tensor_exp(t[0]) == tensor_exp(t[1]),
              "%s C%lld O%lld stride %d: %s differs with the AMX kernel", fmt_name(f),
              (long long)C, (long long)O, stride, k == 2 ? "dw" : k ? "dx" : "y");
        free(a);
        free(b);
    }
    tensor_free(x);
    tensor_free(w);
    tensor_free(dy);
    for (int k = 0; k < 2; k++) {
        tensor_free(y[k]);
        tensor_free(dx[k]);
        tensor_free(dw[k]);
    }
    free(buf);
}

/* A run of forward passes into the same output, data changing scale between calls (steady
 * guesses, a guess that misses, steady again, then a scale that hovers between two exponents):
 * with the rounding in the kernel (fx_i16_fwd_amx_round) and with it switched off, the same
 * mantissas and exponent after every call, and the kernel's rounding taken; for DFP16 also
 * its rounding at two exponents, with the write picking the second (the exponent y left), and
 * the op run again exactly as often as without it. */
static void check_round_ops(fmt_t f, int64_t N, int64_t C, int64_t H, int64_t O, int stride,
                            uint64_t seed)
{
    const int64_t OH = (H + 2 - 3) / stride + 1, nx = N * C * H * H, nw = O * C * 9;
    const int64_t ny = N * O * OH * OH;
    tensor_t *x = test_new4(f, N, C, H, H), *w = test_new4(f, O, C, 3, 3);
    tensor_t *y[2] = {test_new4(f, N, O, OH, OH), test_new4(f, N, O, OH, OH)};
    test_rng r;
    test_rng_seed(&r, seed);
    float *buf = malloc(4 * (size_t)(nx + nw));
    for (int64_t i = 0; i < nw; i++) buf[i] = (float)(0.1 * test_rng_normal(&r));
    CHECK_STATUS(tensor_from_f32(w, buf), FX_OK);
    int16_t *a = malloc(2 * (size_t)ny), *b = malloc(2 * (size_t)ny);
    static const double scale[14] = {1, 1, 1, 1, 9, 9, 9, 9, 1, 2.5, 1, 2.5, 1, 2.5};
    const long long before = fx_i16_fwd_amx_round_calls();
    const long long before2 = fx_i16_fwd_amx_round2_calls();
    const long long partial0 = fx_i16_fwd_amx_round_partial_calls();
    int64_t alt_taken = 0;      /* writes that picked the second rounding, kernel's rounding on */
    int64_t redone[2] = {0, 0}; /* ops run again, with the kernel's rounding and without */
    for (int call = 0; call < 14; call++) {
        for (int64_t i = 0; i < nx; i++) buf[i] = (float)(scale[call] * test_rng_normal(&r));
        CHECK_STATUS(tensor_from_f32(x, buf), FX_OK);
        for (int k = 0; k < 2; k++) {
            fx_i16_fwd_amx_round_set_enabled(k == 0);
            const int64_t redone0 = fx_conv_stage_redone(), alt0 = fx_conv_alt_rounding_reused();
            CHECK_STATUS(tensor_conv2d(y[k], x, w, stride, stride, 1, 1, 1, 1), FX_OK);
            redone[k] += fx_conv_stage_redone() - redone0;
            if (k == 0) alt_taken += fx_conv_alt_rounding_reused() - alt0;
        }
        fx_i16_fwd_amx_round_set_enabled(1);
        CHECK_STATUS(tensor_get_raw(y[0], a), FX_OK);
        CHECK_STATUS(tensor_get_raw(y[1], b), FX_OK);
        CHECK(memcmp(a, b, 2 * (size_t)ny) == 0 && tensor_exp(y[0]) == tensor_exp(y[1]),
              "%s C%lld stride %d call %d: y rounded in the kernel differs", fmt_name(f),
              (long long)C, stride, call);
        /* and the write's statistics, which come from the kernel's per-image ones */
        static const char *const stat[4] = {"underflow", "saturated", "true_max", "stored_max"};
        for (int k = 0; k < 4; k++) {
            double sa = -1, sb = -2;
            CHECK_STATUS(tensor_stat(y[0], stat[k], &sa), FX_OK);
            CHECK_STATUS(tensor_stat(y[1], stat[k], &sb), FX_OK);
            CHECK(sa == sb, "%s C%lld stride %d call %d: %s %g in the kernel, %g without",
                  fmt_name(f), (long long)C, stride, call, stat[k], sa, sb);
        }
    }
    CHECK(fx_i16_fwd_amx_round_calls() > before, "%s C%lld stride %d: the kernel never rounded",
          fmt_name(f), (long long)C, stride);
    /* a rounding left unmade (it saturated) still reports the largest |sum|, so the write's
     * exponent, and whether the op runs again, are those of the int64 route */
    CHECK(redone[0] == redone[1], "%s C%lld stride %d: run again %lld times with the kernel's "
          "rounding, %lld without", fmt_name(f), (long long)C, stride, (long long)redone[0],
          (long long)redone[1]);
    if (f == FMT_DFP16) {
        /* hovering: moving down, both roundings whole; moving up, the guess broken */
        CHECK(fx_i16_fwd_amx_round2_calls() > before2 &&
                  fx_i16_fwd_amx_round_partial_calls() > partial0,
              "DFP16 C%lld stride %d: the kernel rounded at two exponents %lld times, with one "
              "broken %lld times", (long long)C, stride,
              fx_i16_fwd_amx_round2_calls() - before2,
              fx_i16_fwd_amx_round_partial_calls() - partial0);
        CHECK(alt_taken > 0, "DFP16 C%lld stride %d: no write picked the kernel's second rounding",
              (long long)C, stride);
    }
    tensor_free(x);
    tensor_free(w);
    tensor_free(y[0]);
    tensor_free(y[1]);
    free(buf);
    free(a);
    free(b);
}

int main(void)
{
    const fx_backend *be = fx_backend_get(FX_BACKEND_AVX512);
    if (!be || !be->available || !be->conv.i16_fwd_amx)
        return test_skip("test_conv_i16_amx", "no AMX-INT8 this process may use");
    CHECK_STATUS(flexpoint_set_backend("avx512"), FX_OK);
    uint64_t seed = 5;
    /* small, full-range and extreme data (every value -32768: the largest accumulators, where
     * a rounding epilogue's int32 shortcut, fx_amx_i16_sums16_small, would wrap past its
     * bound of 504 products: 432 products below it, 576 and 800 above) */
    /* ... and sums whose largest and smallest values tie in all but their low byte, where
     * the int32 epilogue's largest |sum| is decided */
    check_kernel(2, 16, 32, 32, 16, 3, 3, 1, 1, 3, seed++);
    check_kernel(2, 32, 16, 16, 32, 3, 3, 1, 1, 3, seed++);
    for (int full = 0; full <= 2; full++) {
        check_kernel(2, 16, 32, 32, 16, 3, 3, 1, 1, full, seed++); /* stage 1: pieces of 48 */
        check_kernel(2, 32, 16, 16, 32, 3, 3, 1, 1, full, seed++); /* stage 2: 2 x 48 */
        check_kernel(2, 64, 8, 8, 64, 3, 3, 1, 1, full, seed++);   /* stage 3: 3 x 64 */
        check_kernel(2, 16, 16, 16, 32, 3, 3, 1, 2, full, seed++); /* stride 2 */
        check_kernel(2, 32, 14, 14, 64, 5, 5, 2, 1, full, seed++); /* 5x5: 4 x 40 */
        check_kernel(3, 16, 10, 10, 48, 3, 3, 1, 1, full, seed++); /* OW 10, O 48 */
        check_kernel(2, 48, 9, 9, 16, 3, 3, 0, 1, full, seed++);   /* no padding, OW 7 */
        check_kernel(1, 16, 12, 12, 16, 1, 1, 0, 2, full, seed++); /* 1x1 at stride 2 */
    }
    for (int full = 0; full <= 1; full++) {
        check_wgrad_kernel(3, 16, 32, 32, 16, 3, 1, 1, full, seed++); /* stage 1 */
        check_wgrad_kernel(4, 32, 16, 16, 48, 3, 1, 1, full, seed++); /* stage 2, O 48 */
        check_wgrad_kernel(5, 64, 8, 8, 64, 3, 1, 1, full, seed++);   /* stage 3: P 64 */
        check_wgrad_kernel(3, 32, 14, 14, 64, 5, 2, 1, full, seed++); /* the CNN's conv2: P 196 */
        check_wgrad_kernel(2, 16, 9, 11, 16, 3, 0, 1, full, seed++);  /* no padding, 7 x 9 */
        /* rows of 70 pixels, padded by 2 (the kernel pads them): three runs of 32 lanes a
         * shifted row, the image's edges inside the first and the last */
        check_wgrad_kernel(2, 16, 6, 70, 16, 5, 2, 1, full, seed++);
        check_wgrad_kernel(2, 16, 5, 33, 32, 1, 0, 1, full, seed++);  /* 1 x 1: one tap */
        /* copies of two images a block (about 450 KiB each): three blocks */
        check_wgrad_kernel(5, 64, 32, 32, 16, 3, 1, 1, full, seed++);
        /* stride 2: ResNet-20's openers and projections, odd sizes (a last row phase with
         * fewer rows, columns past the image), 5 x 5 and 4 x 4 kernels, rows of 70 pixels (two
         * runs of 32 lanes a row phase, each from 64 columns), padding past the kernel's half */
        check_wgrad_kernel(3, 16, 32, 32, 32, 3, 1, 2, full, seed++);
        check_wgrad_kernel(3, 16, 32, 32, 32, 1, 0, 2, full, seed++);
        check_wgrad_kernel(4, 32, 16, 16, 64, 3, 1, 2, full, seed++);
        check_wgrad_kernel(4, 32, 16, 16, 64, 1, 0, 2, full, seed++);
        check_wgrad_kernel(2, 16, 9, 11, 16, 3, 1, 2, full, seed++);
        check_wgrad_kernel(2, 16, 13, 12, 32, 5, 2, 2, full, seed++);
        check_wgrad_kernel(2, 16, 12, 12, 16, 4, 1, 2, full, seed++);
        check_wgrad_kernel(2, 16, 6, 70, 16, 3, 1, 2, full, seed++);
        check_wgrad_kernel(2, 16, 8, 8, 16, 3, 3, 2, full, seed++);
    }
    const fx_conv_geom narrow = {.N = 1, .C = 8, .H = 8, .W = 8, .O = 16, .KH = 3, .KW = 3,
                                 .sh = 1, .sw = 1, .ph = 1, .pw = 1, .dh = 1, .dw = 1, .OH = 8,
                                 .OW = 8};
    CHECK(!fx_i16_fwd_amx_fits(&narrow), "8 channels must stay on the other kernels");
    for (int threads = 1; threads <= 2; threads++) {
        flexpoint_set_num_threads(threads);
        /* (forward passes into rows of 12 pixels or more take the kernel: conv2d.c) */
        check_ops(FMT_FLEX16_5, 4, 16, 16, 16, 1, seed++);
        check_ops(FMT_DFP16, 3, 32, 12, 32, 1, seed++);
        check_ops(FMT_FLEX16_5, 4, 16, 32, 32, 2, seed++);
        check_round_ops(FMT_FLEX16_5, 4, 16, 16, 16, 1, seed++);
        check_round_ops(FMT_DFP16, 3, 32, 12, 32, 1, seed++);
        check_round_ops(FMT_DFP16, 4, 16, 32, 32, 2, seed++);
        check_dgrad_round_shapes(fx_i16_fwd_amx_round_set_enabled, &seed);
    }
    return test_finish("test_conv_i16_amx");
}
