/* The AMX route's direct bf16 forward convolution (src/bf16/bf16_conv_amx.c), through
 * tensor_conv2d and its backward:
 *   - bit for bit the AMX GEMM (fx_bf16_matmul_amx, through tensor_matmul) on the tap-major
 *     patch matrix whose taps each fill whole tiles of 32 values (k = t C2 + c, C2 = C rounded
 *     up to 32, zero channels past C), which is the order the kernel documents, at 1 and 2
 *     threads. (Without the zero channels, the 16-channel layers' bits differ from that GEMM's:
 *     how tdpbf16ps sums within a tile depends on the tile's K);
 *   - within the fp32 chain's bound of an fp64 reference: |y - ref| <= 1.01 K 2^-24 sum |x w|
 *     over each output's K products (normal data: nothing flushes);
 *   - into a bf16 y (rounded from the tiles) as the fp32 outputs rounded;
 *   - in place (y the tensor x), as into another tensor;
 *   - the input gradient of a stride-1 layer (a forward convolution of dy on the kernel) within
 *     the same bound of its fp64 reference;
 *   - the input gradient of a stride-2 layer by phases (fx_bf16_dgrad_s2_amx), each phase bit
 *     for bit the AMX GEMM on its tap-major patch matrix of dy, rounded to bf16, at 1 and 2
 *     threads, and within the fp32 chain's bound of fp64;
 *   - the weight gradient's kernel (src/bf16/bf16_wgrad_amx.c) on a chunk bit for bit against
 *     the AMX GEMM on the matrices it documents, and through the op within the fp32 chain's
 *     bound of fp64 and the same at 1 and 2 threads, at stride 1 and at strides 2 and 3 (rows
 *     regrouped by column phase).
 * Shapes: ResNet-20's 16- and 32-channel 3x3 layers, stride 2, 64 channels (two channel
 * blocks), odd C and O, output rows that are not whole 16-pixel blocks (OW 10, 8, 7: span
 * blocks across rows, conv_tile_blocks.h, taken exactly where they save blocks), 5x5.
 * Skips where the CPU or the OS gives no AMX-BF16 (the route cannot be installed). */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "bf16/bf16_gemm.h"
#include "core/backend.h"
#include "nn/im2col.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint16_t draw(test_rng *r)
{
    return fx_f32_to_bf16((float)test_rng_normal(r));
}

static tensor_t *new4(fmt_t f, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const int64_t sh[4] = {a, b, c, d};
    return tensor_new(f, 4, sh);
}

/* x at (n, c, ih, iw) of the unpadded input, 0 outside it or past C */
static uint16_t xat(const uint16_t *x, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c,
                    int64_t ih, int64_t iw)
{
    if (c >= C || ih < 0 || ih >= H || iw < 0 || iw >= W) return 0;
    return x[((n * C + c) * H + ih) * W + iw];
}

static void check_fwd(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH,
                      int64_t KW, int pad, int stride, uint64_t seed)
{
    const int64_t OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
    /* each tap's channels fill whole tiles of 32 values: C2 = 2 Cp rounded up to 32 */
    const int64_t KK = KH * KW, C2 = ((C + 1) / 2 * 2 + 31) / 32 * 32, K = KK * C2, P = OH * OW;
    const int64_t nx = N * C * H * W, nw = O * C * KK, ny = N * O * P;
    test_rng r;
    test_rng_seed(&r, seed);
    uint16_t *x = malloc(2 * (size_t)nx), *w = malloc(2 * (size_t)nw);
    for (int64_t i = 0; i < nx; i++) x[i] = draw(&r);
    for (int64_t i = 0; i < nw; i++) w[i] = draw(&r);
    /* the tap-major patch matrix [N P, K] and weights [K, O] */
    uint16_t *a = calloc((size_t)(N * P * K), 2), *b = calloc((size_t)(K * O), 2);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++)
                for (int64_t t = 0; t < KK; t++)
                    for (int64_t c = 0; c < C2; c++)
                        a[((n * OH + oh) * OW + ow) * K + t * C2 + c] =
                            xat(x, C, H, W, n, c, oh * stride - pad + t / KW, ow * stride - pad + t % KW);
    for (int64_t t = 0; t < KK; t++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t o = 0; o < O; o++) b[(t * C2 + c) * O + o] = w[(o * C + c) * KK + t];
    tensor_t *tx = new4(FMT_BF16, N, C, H, W), *tw = new4(FMT_BF16, O, C, KH, KW);
    tensor_t *ty = new4(FMT_FP32, N, O, OH, OW), *tyb = new4(FMT_BF16, N, O, OH, OW);
    tensor_t *tref = new4(FMT_BF16, N, O, OH, OW);
    const int64_t as[2] = {N * P, K}, bs[2] = {K, O}, cs[2] = {N * P, O};
    tensor_t *ta = tensor_new(FMT_BF16, 2, as), *tb = tensor_new(FMT_BF16, 2, bs);
    tensor_t *tc = tensor_new(FMT_FP32, 2, cs);
    CHECK_STATUS(tensor_set_raw(tx, x), FX_OK);
    CHECK_STATUS(tensor_set_raw(tw, w), FX_OK);
    CHECK_STATUS(tensor_set_raw(ta, a), FX_OK);
    CHECK_STATUS(tensor_set_raw(tb, b), FX_OK);
    float *y = malloc(4 * (size_t)ny), *c = malloc(4 * (size_t)ny);
    uint16_t *yb = malloc(2 * (size_t)ny), *yr = malloc(2 * (size_t)ny);
    const fx_conv_geom g = {.N = N, .C = C, .H = H, .W = W, .O = O, .KH = KH, .KW = KW,
                            .sh = stride, .sw = stride, .ph = pad, .pw = pad, .dh = 1, .dw = 1,
                            .OH = OH, .OW = OW};
    CHECK(fx_bf16_fwd_amx_fits(&g), "C%lld O%lld k%lldx%lld stride %d: expected to fit the AMX "
          "kernel", (long long)C, (long long)O, (long long)KH, (long long)KW, stride);
    /* span blocks (16 positions of the padded grid across output rows) exactly where they make
     * fewer blocks than whole rows: stride 1, rows under 16 pixels or not whole blocks */
    const int span = stride == 1 && (OH - 1) * (W + 2 * pad) + OW + 15 < 16 * OH * ((OW + 15) / 16);
    for (int threads = 1; threads <= 2; threads++) {
        flexpoint_set_num_threads(threads);
        const long long calls = fx_bf16_fwd_amx_calls(), spans = fx_bf16_fwd_amx_span_calls();
        CHECK_STATUS(tensor_conv2d(ty, tx, tw, stride, stride, pad, pad, 1, 1), FX_OK);
        CHECK(fx_bf16_fwd_amx_calls() > calls, "C%lld O%lld: the AMX direct kernel did not run",
              (long long)C, (long long)O);
        CHECK((fx_bf16_fwd_amx_span_calls() > spans) == span, "C%lld %lldx%lld: span blocks %s",
              (long long)C, (long long)H, (long long)W, span ? "not taken" : "taken");
        CHECK_STATUS(tensor_to_f32(ty, y), FX_OK);
        CHECK_STATUS(tensor_matmul(tc, ta, tb), FX_OK);
        CHECK_STATUS(tensor_to_f32(tc, c), FX_OK);
        long bad = 0, over = 0;
        double worst = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t o = 0; o < O; o++)
                for (int64_t p = 0; p < P; p++) {
                    const float got = y[(n * O + o) * P + p], gemm = c[(n * P + p) * O + o];
                    bad += test_f32_bits(got) != test_f32_bits(gemm);
                    double ref = 0, mag = 0;
                    for (int64_t k = 0; k < K; k++) {
                        const double pr = (double)fx_bf16_to_f32(a[(n * P + p) * K + k]) *
                                          (double)fx_bf16_to_f32(b[k * O + o]);
                        ref += pr;
                        mag += fabs(pr);
                    }
                    const double err = fabs((double)got - ref),
                                 bound = 1.01 * (double)(KK * C) * ldexp(mag, -24);
                    over += err > bound;
                    if (mag > 0 && err / mag > worst) worst = err / mag;
                }
        CHECK(bad == 0, "conv N%lld C%lld %lldx%lld O%lld k%lldx%lld pad %d stride %d, %d "
              "thread(s): %ld outputs differ from the AMX GEMM on the tap-major patch matrix",
              (long long)N, (long long)C, (long long)H, (long long)W, (long long)O, (long long)KH,
              (long long)KW, pad, stride, threads, bad);
        CHECK(over == 0, "conv C%lld O%lld k%lldx%lld stride %d: %ld outputs beyond the fp32 "
              "chain's bound of the fp64 reference (worst |err| / sum |x w| %.3g)", (long long)C,
              (long long)O, (long long)KH, (long long)KW, stride, over, worst);
        /* a bf16 y, rounded from the tiles, holds the fp32 outputs rounded */
        CHECK_STATUS(tensor_conv2d(tyb, tx, tw, stride, stride, pad, pad, 1, 1), FX_OK);
        CHECK_STATUS(tensor_from_f32(tref, y), FX_OK);
        CHECK_STATUS(tensor_get_raw(tyb, yb), FX_OK);
        CHECK_STATUS(tensor_get_raw(tref, yr), FX_OK);
        bad = 0;
        for (int64_t i = 0; i < ny; i++) bad += yb[i] != yr[i];
        CHECK(bad == 0, "conv C%lld O%lld stride %d, %d thread(s): %ld bf16 outputs differ from "
              "the fp32 outputs rounded", (long long)C, (long long)O, stride, threads, bad);
        /* in place: C = O and the same output size (stride 1, same padding) */
        if (C == O && OH == H && OW == W) {
            tensor_t *tin = new4(FMT_BF16, N, C, H, W);
            CHECK_STATUS(tensor_set_raw(tin, x), FX_OK);
            CHECK_STATUS(tensor_conv2d(tin, tin, tw, stride, stride, pad, pad, 1, 1), FX_OK);
            CHECK_STATUS(tensor_get_raw(tin, yb), FX_OK);
            bad = 0;
            for (int64_t i = 0; i < ny; i++) bad += yb[i] != yr[i];
            CHECK(bad == 0, "conv C%lld in place, %d thread(s): %ld outputs differ", (long long)C,
                  threads, bad);
            tensor_free(tin);
        }
    }
    tensor_free(tx);
    tensor_free(tw);
    tensor_free(ty);
    tensor_free(tyb);
    tensor_free(tref);
    tensor_free(ta);
    tensor_free(tb);
    tensor_free(tc);
    free(x);
    free(w);
    free(a);
    free(b);
    free(y);
    free(c);
    free(yb);
    free(yr);
}

/* The input gradient of a stride-1 layer (dy's O channels as the kernel's input channels)
 * against its fp64 reference, with the fp32 chain's bound over its O KH KW products. */
static void check_dx(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KS, int pad,
                     uint64_t seed)
{
    const int64_t OH = H + 2 * pad - KS + 1, OW = W + 2 * pad - KS + 1, KK = KS * KS;
    const int64_t nw = O * C * KK, ndy = N * O * OH * OW, ndx = N * C * H * W;
    test_rng r;
    test_rng_seed(&r, seed);
    uint16_t *w = malloc(2 * (size_t)nw), *dy = malloc(2 * (size_t)ndy);
    for (int64_t i = 0; i < nw; i++) w[i] = draw(&r);
    for (int64_t i = 0; i < ndy; i++) dy[i] = draw(&r);
    tensor_t *tw = new4(FMT_BF16, O, C, KS, KS), *tdy = new4(FMT_BF16, N, O, OH, OW);
    tensor_t *tdx = new4(FMT_FP32, N, C, H, W);
    CHECK_STATUS(tensor_set_raw(tw, w), FX_OK);
    CHECK_STATUS(tensor_set_raw(tdy, dy), FX_OK);
    float *dx = malloc(4 * (size_t)ndx);
    const long long calls = fx_bf16_fwd_amx_calls();
    CHECK_STATUS(tensor_conv2d_backward_input(tdx, tdy, tw, 1, 1, pad, pad, 1, 1), FX_OK);
    CHECK(fx_bf16_fwd_amx_calls() > calls, "dx C%lld O%lld: the AMX direct kernel did not run",
          (long long)C, (long long)O);
    CHECK_STATUS(tensor_to_f32(tdx, dx), FX_OK);
    long over = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t ih = 0; ih < H; ih++)
                for (int64_t iw = 0; iw < W; iw++) {
                    double ref = 0, mag = 0;
                    for (int64_t o = 0; o < O; o++)
                        for (int64_t kh = 0; kh < KS; kh++)
                            for (int64_t kw = 0; kw < KS; kw++) {
                                const int64_t oh = ih + pad - kh, ow = iw + pad - kw;
                                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                                const double pr =
                                    (double)fx_bf16_to_f32(dy[((n * O + o) * OH + oh) * OW + ow]) *
                                    (double)fx_bf16_to_f32(w[((o * C + c) * KS + kh) * KS + kw]);
                                ref += pr;
                                mag += fabs(pr);
                            }
                    const double got = dx[((n * C + c) * H + ih) * W + iw];
                    over += fabs(got - ref) > 1.01 * (double)(O * KK + 1) * ldexp(mag, -24);
                }
    CHECK(over == 0, "dx C%lld O%lld k%lld: %ld inputs' gradients beyond the bound", (long long)C,
          (long long)O, (long long)KS, over);
    tensor_free(tw);
    tensor_free(tdy);
    tensor_free(tdx);
    free(w);
    free(dy);
    free(dx);
}

/* The input gradient of a stride-2 layer by phases on AMX tiles (fx_bf16_dgrad_s2_amx) into a
 * bf16 dx: for each phase (rh, rw), bit for bit the AMX GEMM on the phase's tap-major patch
 * matrix of dy (the phase's taps, fx_bf16_s2_axis, row-major, each filling whole 32-value tiles
 * of dy's channels, zeros past O) with the kernel's taps, rounded to bf16; that GEMM within the
 * fp32 chain's bound of its fp64 reference; the same bits at 1 and 2 threads; the kernel run
 * (or not, where fx_bf16_dgrad_s2_amx_fits says no). */
static void check_dx_s2(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KS,
                        int pad, int poison, uint64_t seed)
{
    const int64_t OH = (H + 2 * pad - KS) / 2 + 1, OW = (W + 2 * pad - KS) / 2 + 1;
    const int64_t KK = KS * KS, nw = O * C * KK, ndy = N * O * OH * OW, ndx = N * C * H * W;
    const int64_t O2 = ((O + 1) / 2 * 2 + 31) / 32 * 32;
    test_rng r;
    test_rng_seed(&r, seed);
    uint16_t *w = malloc(2 * (size_t)nw), *dy = malloc(2 * (size_t)ndy);
    for (int64_t i = 0; i < nw; i++) w[i] = draw(&r);
    for (int64_t i = 0; i < ndy; i++) dy[i] = draw(&r);
    if (poison) { /* Inf, -Inf and NaN in dy: the values they reach as the GEMM makes them */
        dy[0] = 0x7F80;
        dy[ndy / 2] = 0xFF80;
        dy[ndy - 1] = 0x7FC0;
    }
    tensor_t *tw = new4(FMT_BF16, O, C, KS, KS), *tdy = new4(FMT_BF16, N, O, OH, OW);
    tensor_t *tdx = new4(FMT_BF16, N, C, H, W);
    CHECK_STATUS(tensor_set_raw(tw, w), FX_OK);
    CHECK_STATUS(tensor_set_raw(tdy, dy), FX_OK);
    const fx_conv_geom g = {.N = N, .C = C, .H = H, .W = W, .O = O, .KH = KS, .KW = KS, .sh = 2,
                            .sw = 2, .ph = pad, .pw = pad, .dh = 1, .dw = 1, .OH = OH, .OW = OW};
    const int fits = fx_bf16_dgrad_s2_amx_fits(&g);
    uint16_t *got[2] = {malloc(2 * (size_t)ndx), malloc(2 * (size_t)ndx)};
    for (int threads = 1; threads <= 2; threads++) {
        flexpoint_set_num_threads(threads);
        const long long calls = fx_bf16_dgrad_s2_amx_calls();
        CHECK_STATUS(tensor_conv2d_backward_input(tdx, tdy, tw, 2, 2, pad, pad, 1, 1), FX_OK);
        CHECK((fx_bf16_dgrad_s2_amx_calls() > calls) == fits,
              "dx s2 C%lld O%lld %lldx%lld k%lld: the AMX phases %s", (long long)C, (long long)O,
              (long long)H, (long long)W, (long long)KS, fits ? "did not run" : "ran");
        CHECK_STATUS(tensor_get_raw(tdx, got[threads - 1]), FX_OK);
    }
    long bad = 0;
    for (int64_t i = 0; i < ndx; i++) bad += got[0][i] != got[1][i];
    CHECK(bad == 0, "dx s2 C%lld O%lld: %ld values differ between 1 and 2 threads", (long long)C,
          (long long)O, bad);
    flexpoint_set_num_threads(1);
    for (int q = 0; fits && q < 4; q++) {
        fx_bf16_s2_axis ah, aw;
        fx_bf16_s2_axis_make(q / 2, KS, pad, H, &ah);
        fx_bf16_s2_axis_make(q % 2, KS, pad, W, &aw);
        const int64_t T = ah.taps * aw.taps, K = T * O2, M = N * ah.n * aw.n;
        if (T == 0) { /* a phase no tap reaches (a 1 x 1 kernel's): zeros */
            long nonzero = 0;
            for (int64_t m = 0; m < M; m++) {
                const int64_t n = m / (ah.n * aw.n), h = 2 * (m / aw.n % ah.n) + q / 2;
                const int64_t x = 2 * (m % aw.n) + q % 2;
                for (int64_t c = 0; c < C; c++)
                    nonzero += got[0][((n * C + c) * H + h) * W + x] != 0;
            }
            CHECK(nonzero == 0, "dx s2 k%lld phase %d without taps: %ld values not zero",
                  (long long)KS, q, nonzero);
            continue;
        }
        uint16_t *a = calloc((size_t)(M * K), 2), *b = calloc((size_t)(K * C), 2);
        for (int64_t m = 0; m < M; m++) {
            const int64_t n = m / (ah.n * aw.n), y = m / aw.n % ah.n, x = m % aw.n;
            for (int64_t t = 0; t < T; t++)
                for (int64_t o = 0; o < O; o++) {
                    const int64_t oh = y + ah.d0 + t / aw.taps, ow = x + aw.d0 + t % aw.taps;
                    if (oh >= 0 && oh < OH && ow >= 0 && ow < OW)
                        a[m * K + t * O2 + o] = dy[((n * O + o) * OH + oh) * OW + ow];
                }
        }
        for (int64_t t = 0; t < T; t++)
            for (int64_t o = 0; o < O; o++)
                for (int64_t c = 0; c < C; c++)
                    b[(t * O2 + o) * C + c] =
                        w[((o * C + c) * KS + ah.k[t / aw.taps]) * KS + aw.k[t % aw.taps]];
        const int64_t as[2] = {M, K}, bs[2] = {K, C}, cs[2] = {M, C};
        tensor_t *ta = tensor_new(FMT_BF16, 2, as), *tb = tensor_new(FMT_BF16, 2, bs);
        tensor_t *tc = tensor_new(FMT_FP32, 2, cs), *tcb = tensor_new(FMT_BF16, 2, cs);
        CHECK_STATUS(tensor_set_raw(ta, a), FX_OK);
        CHECK_STATUS(tensor_set_raw(tb, b), FX_OK);
        CHECK_STATUS(tensor_matmul(tc, ta, tb), FX_OK);
        float *c32 = malloc(4 * (size_t)(M * C));
        uint16_t *cb = malloc(2 * (size_t)(M * C));
        CHECK_STATUS(tensor_to_f32(tc, c32), FX_OK);
        CHECK_STATUS(tensor_from_f32(tcb, c32), FX_OK);
        CHECK_STATUS(tensor_get_raw(tcb, cb), FX_OK);
        long diff = 0, over = 0;
        for (int64_t m = 0; m < M; m++) {
            const int64_t n = m / (ah.n * aw.n), h = 2 * (m / aw.n % ah.n) + q / 2;
            const int64_t x = 2 * (m % aw.n) + q % 2;
            for (int64_t c = 0; c < C; c++) {
                diff += got[0][((n * C + c) * H + h) * W + x] != cb[m * C + c];
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    const double pr = (double)fx_bf16_to_f32(a[m * K + k]) *
                                      (double)fx_bf16_to_f32(b[k * C + c]);
                    ref += pr;
                    mag += fabs(pr);
                }
                if (isfinite(ref)) /* the bound for finite sums; the others by their bits */
                    over += fabs((double)c32[m * C + c] - ref) >
                            1.01 * (double)(T * O) * ldexp(mag, -24);
            }
        }
        CHECK(diff == 0, "dx s2 N%lld C%lld %lldx%lld O%lld k%lld pad %d, phase %d: %ld values "
              "differ from the AMX GEMM on the phase's tap-major patch matrix, rounded",
              (long long)N, (long long)C, (long long)H, (long long)W, (long long)O, (long long)KS,
              pad, q, diff);
        CHECK(over == 0, "dx s2 C%lld O%lld phase %d: %ld sums beyond the fp32 chain's bound",
              (long long)C, (long long)O, q, over);
        tensor_free(ta);
        tensor_free(tb);
        tensor_free(tc);
        tensor_free(tcb);
        free(a);
        free(b);
        free(c32);
        free(cb);
    }
    tensor_free(tw);
    tensor_free(tdy);
    tensor_free(tdx);
    free(w);
    free(dy);
    free(got[0]);
    free(got[1]);
}

/* The weight gradient: the kernel on one chunk (nb images) bit for bit against the AMX GEMM on
 * the matrices it documents (rows (c, t) of x shifted by tap t, each output row's pixels in
 * blocks of 2 kp filling whole 32-value tiles, zeros after); then through
 * tensor_conv2d_backward_weight (chunks summed in fixed groups) within the fp32 chain's bound
 * of fp64, and the same bits at 1 and 2 threads. */
static void check_wgrad(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KS, int pad,
                        int stride, uint64_t seed)
{
    const int64_t OH = (H + 2 * pad - KS) / stride + 1, OW = (W + 2 * pad - KS) / stride + 1;
    const int64_t KK = KS * KS, P = OH * OW;
    const int64_t nx = N * C * H * W, ndy = N * O * P, nw = O * C * KK;
    const fx_conv_geom g = {.N = N, .C = C, .H = H, .W = W, .O = O, .KH = KS, .KW = KS,
                            .sh = stride, .sw = stride, .ph = pad, .pw = pad, .dh = 1, .dw = 1,
                            .OH = OH, .OW = OW};
    CHECK(fx_bf16_wgrad_amx_fits(&g), "wgrad C%lld O%lld OW%lld: expected to fit", (long long)C,
          (long long)O, (long long)OW);
    test_rng r;
    test_rng_seed(&r, seed);
    uint16_t *x = malloc(2 * (size_t)nx), *dy = malloc(2 * (size_t)ndy);
    for (int64_t i = 0; i < nx; i++) x[i] = draw(&r);
    for (int64_t i = 0; i < ndy; i++) dy[i] = draw(&r);
    /* the kernel on all N images as one chunk */
    const int64_t xpn = fx_conv_padded_numel(&g, N) + FX_CONV_PAD_SLACK;
    uint16_t *xp = calloc((size_t)xpn, 2);
    fx_conv_pad(&g, x, 0, N, xp, sizeof(uint16_t));
    uint32_t *scr = malloc(4 * (size_t)fx_bf16_wgrad_amx_scratch(&g, N));
    float *dwt = malloc(4 * (size_t)nw);
    fx_bf16_wgrad_amx(&g, xp, dy, N, scr, dwt);
    /* the GEMM: A [C KK, K2], B [K2, O]; pixel slot s of row block b holds pixel 2 kp b + s */
    const int64_t kp = OW / 2 < 16 ? OW / 2 : 16, blocks = N * OH * (OW / (2 * kp)), K2 = 32 * blocks;
    uint16_t *a = calloc((size_t)(C * KK * K2), 2), *b = calloc((size_t)(K2 * O), 2);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                const int64_t blk = (n * OH + oh) * (OW / (2 * kp)) + ow / (2 * kp);
                const int64_t k = 32 * blk + ow % (2 * kp);
                for (int64_t o = 0; o < O; o++) b[k * O + o] = dy[((n * O + o) * OH + oh) * OW + ow];
                for (int64_t c = 0; c < C; c++)
                    for (int64_t t = 0; t < KK; t++)
                        a[(c * KK + t) * K2 + k] =
                            xat(x, C, H, W, n, c, oh * stride - pad + t / KS,
                                ow * stride - pad + t % KS);
            }
    const int64_t as[2] = {C * KK, K2}, bs[2] = {K2, O}, cs[2] = {C * KK, O};
    tensor_t *ta = tensor_new(FMT_BF16, 2, as), *tb = tensor_new(FMT_BF16, 2, bs);
    tensor_t *tc = tensor_new(FMT_FP32, 2, cs);
    CHECK_STATUS(tensor_set_raw(ta, a), FX_OK);
    CHECK_STATUS(tensor_set_raw(tb, b), FX_OK);
    CHECK_STATUS(tensor_matmul(tc, ta, tb), FX_OK);
    float *c = malloc(4 * (size_t)nw);
    CHECK_STATUS(tensor_to_f32(tc, c), FX_OK);
    long bad = 0;
    for (int64_t i = 0; i < nw; i++) bad += test_f32_bits(c[i]) != test_f32_bits(dwt[i]);
    CHECK(bad == 0, "wgrad kernel C%lld O%lld %lldx%lld k%lld stride %d: %ld weights differ from "
          "the AMX GEMM on the documented matrices", (long long)C, (long long)O, (long long)H,
          (long long)W, (long long)KS, stride, bad);
    /* through the op, against fp64, and at 1 and 2 threads */
    tensor_t *tx = new4(FMT_BF16, N, C, H, W), *tdy = new4(FMT_BF16, N, O, OH, OW);
    tensor_t *tdw = new4(FMT_FP32, O, C, KS, KS);
    CHECK_STATUS(tensor_set_raw(tx, x), FX_OK);
    CHECK_STATUS(tensor_set_raw(tdy, dy), FX_OK);
    float *dw1 = malloc(4 * (size_t)nw), *dw2 = malloc(4 * (size_t)nw);
    for (int threads = 1; threads <= 2; threads++) {
        flexpoint_set_num_threads(threads);
        const long long calls = fx_bf16_wgrad_amx_calls();
        CHECK_STATUS(tensor_conv2d_backward_weight(tdw, tx, tdy, stride, stride, pad, pad, 1, 1),
                     FX_OK);
        CHECK(fx_bf16_wgrad_amx_calls() > calls, "wgrad C%lld O%lld: the AMX kernel did not run",
              (long long)C, (long long)O);
        CHECK_STATUS(tensor_to_f32(tdw, threads == 1 ? dw1 : dw2), FX_OK);
    }
    CHECK(memcmp(dw1, dw2, 4 * (size_t)nw) == 0, "wgrad C%lld O%lld: 1 and 2 threads differ",
          (long long)C, (long long)O);
    long over = 0;
    for (int64_t o = 0; o < O; o++)
        for (int64_t ci = 0; ci < C; ci++)
            for (int64_t t = 0; t < KK; t++) {
                double ref = 0, mag = 0;
                for (int64_t n = 0; n < N; n++)
                    for (int64_t oh = 0; oh < OH; oh++)
                        for (int64_t ow = 0; ow < OW; ow++) {
                            const double pr =
                                (double)fx_bf16_to_f32(dy[((n * O + o) * OH + oh) * OW + ow]) *
                                (double)fx_bf16_to_f32(xat(x, C, H, W, n, ci,
                                                           oh * stride - pad + t / KS,
                                                           ow * stride - pad + t % KS));
                            ref += pr;
                            mag += fabs(pr);
                        }
                const double got = dw1[(o * C + ci) * KK + t];
                over += fabs(got - ref) > 1.01 * (double)(N * P + 64) * ldexp(mag, -24);
            }
    CHECK(over == 0, "wgrad C%lld O%lld: %ld weights beyond the bound", (long long)C, (long long)O,
          over);
    tensor_free(ta);
    tensor_free(tb);
    tensor_free(tc);
    tensor_free(tx);
    tensor_free(tdy);
    tensor_free(tdw);
    free(x);
    free(dy);
    free(xp);
    free(scr);
    free(dwt);
    free(a);
    free(b);
    free(c);
    free(dw1);
    free(dw2);
}

int main(void)
{
    const fx_backend *be = fx_backend_get(FX_BACKEND_AVX512);
    if (!be || !be->available || !fx_cpu()->amx_bf16)
        return test_skip("test_bf16_amx_conv", "this CPU has no AMX-BF16");
    CHECK_STATUS(flexpoint_set_backend("avx512"), FX_OK);
    if (flexpoint_set_kernel("matmul", FMT_BF16, "amx") != FX_OK)
        return test_skip("test_bf16_amx_conv", "the OS does not let this process use AMX tiles");
    CHECK(be->conv.bf16_fwd == fx_bf16_fwd_amx, "the AMX route did not install its direct kernel");
    uint64_t seed = 11;
    check_fwd(2, 16, 32, 32, 16, 3, 3, 1, 1, seed++); /* ResNet-20's stage 1 */
    check_fwd(2, 32, 16, 16, 32, 3, 3, 1, 1, seed++); /* stage 2 */
    check_fwd(2, 16, 32, 32, 32, 3, 3, 1, 2, seed++); /* stage 2's first, stride 2 */
    check_fwd(2, 64, 8, 8, 64, 3, 3, 1, 1, seed++);   /* two channel blocks, 8-pixel rows */
    check_fwd(3, 17, 10, 10, 20, 3, 3, 1, 1, seed++); /* odd C, O past one block, OW 10 */
    check_fwd(2, 32, 14, 14, 64, 5, 5, 2, 1, seed++); /* the CNN's conv2 */
    check_fwd(2, 20, 9, 9, 16, 3, 3, 0, 1, seed++);   /* no padding, OW 7 */
    check_fwd(1, 16, 40, 40, 16, 3, 3, 1, 1, seed++); /* 40-pixel rows: a half block each */
    check_dx(2, 16, 16, 16, 16, 3, 1, seed++);
    check_dx(2, 32, 8, 8, 64, 3, 1, seed++);
    check_dx_s2(2, 16, 32, 32, 32, 3, 1, 0, seed++); /* ResNet-20's 16 -> 32: 16-pixel rows */
    check_dx_s2(3, 32, 16, 16, 64, 3, 1, 0, seed++); /* 32 -> 64: 8-pixel tiles, 2 pair blocks */
    check_dx_s2(2, 20, 12, 12, 17, 3, 1, 0, seed++); /* odd O, dx's channels past a block */
    check_dx_s2(2, 16, 12, 12, 16, 2, 0, 0, seed++); /* 2 x 2, no padding */
    check_dx_s2(2, 16, 12, 12, 16, 4, 1, 0, seed++); /* 4 x 4 */
    check_dx_s2(2, 16, 14, 14, 16, 5, 2, 0, seed++); /* 5 x 5, 7-pixel windows */
    check_dx_s2(2, 16, 8, 64, 16, 3, 1, 0, seed++);  /* 32-pixel windows: 2 tiles a row */
    check_dx_s2(2, 16, 8, 40, 16, 3, 1, 0, seed++);  /* 20-pixel windows: not taken */
    check_dx_s2(2, 16, 12, 12, 8, 3, 1, 0, seed++);  /* 8 channels in dy: not taken */
    check_dx_s2(2, 16, 32, 32, 32, 1, 0, 0, seed++); /* ResNet-20's projections: 1 phase */
    check_dx_s2(3, 32, 16, 16, 64, 1, 0, 0, seed++);
    check_dx_s2(2, 16, 32, 32, 32, 3, 1, 1, seed++); /* Inf, -Inf and NaN in dy */
    check_dx_s2(2, 32, 16, 16, 64, 1, 0, 1, seed++);
    check_wgrad(2, 16, 32, 32, 16, 3, 1, 1, seed++); /* stage 1: whole 32-pixel rows */
    check_wgrad(3, 32, 16, 16, 32, 3, 1, 1, seed++); /* stage 2: 16-pixel tiles, two blocks */
    check_wgrad(2, 64, 8, 8, 48, 3, 1, 1, seed++);   /* 8-pixel tiles, 4 channel blocks, O 48 */
    check_wgrad(2, 32, 14, 14, 64, 5, 2, 1, seed++); /* the CNN's conv2: 14-pixel tiles */
    check_wgrad(1, 16, 64, 64, 16, 3, 1, 1, seed++); /* rows of two 32-pixel blocks */
    check_wgrad(2, 16, 10, 10, 32, 3, 0, 1, seed++); /* no padding, OW 8 */
    /* at stride 2, on rows regrouped by column phase: ResNet-20's 16 -> 32 and 32 -> 64 layers,
     * an odd padded width (a shorter last run), stride 3 */
    check_wgrad(2, 16, 32, 32, 32, 3, 1, 2, seed++);
    check_wgrad(3, 32, 16, 16, 64, 3, 1, 2, seed++);
    check_wgrad(2, 16, 15, 15, 16, 3, 1, 2, seed++);
    check_wgrad(2, 16, 23, 23, 16, 5, 2, 3, seed++);
    /* a geometry outside it stays off the kernel: 8 channels, a strided 1x1 projection */
    const fx_conv_geom narrow = {.N = 1, .C = 8, .H = 8, .W = 8, .O = 16, .KH = 3, .KW = 3,
                                 .sh = 1, .sw = 1, .ph = 1, .pw = 1, .dh = 1, .dw = 1, .OH = 8,
                                 .OW = 8};
    const fx_conv_geom proj = {.N = 1, .C = 16, .H = 8, .W = 8, .O = 32, .KH = 1, .KW = 1,
                               .sh = 2, .sw = 2, .dh = 1, .dw = 1, .OH = 4, .OW = 4};
    const fx_conv_geom wide = {.N = 1, .C = 48, .H = 8, .W = 8, .O = 32, .KH = 3, .KW = 3,
                               .sh = 1, .sw = 1, .ph = 1, .pw = 1, .dh = 1, .dw = 1, .OH = 8,
                               .OW = 8};
    CHECK(!fx_bf16_fwd_amx_fits(&narrow), "8 input channels must stay on the GEMM");
    CHECK(!fx_bf16_fwd_amx_fits(&proj), "a strided 1x1 projection must stay on the GEMM");
    const fx_conv_geom odd = {.N = 1, .C = 16, .H = 9, .W = 9, .O = 16, .KH = 3, .KW = 3,
                              .sh = 1, .sw = 1, .ph = 1, .pw = 1, .dh = 1, .dw = 1, .OH = 9, .OW = 9};
    CHECK(!fx_bf16_wgrad_amx_fits(&odd), "an odd OW must stay off the AMX weight gradient");
    const fx_conv_geom dil = {.N = 1, .C = 16, .H = 8, .W = 8, .O = 16, .KH = 3, .KW = 3,
                              .sh = 1, .sw = 1, .ph = 2, .pw = 2, .dh = 2, .dw = 2, .OH = 8,
                              .OW = 8};
    CHECK(!fx_bf16_wgrad_amx_fits(&dil), "a dilated layer must stay off the AMX weight gradient");
    CHECK(!fx_bf16_wgrad_amx_fits(&proj), "a strided 1x1 projection must stay off the AMX "
                                         "weight gradient");
    CHECK(fx_bf16_wgrad_amx_fits(&wide), "48 channels fit the AMX weight gradient");
    CHECK(!fx_bf16_fwd_amx_fits(&wide), "24 channel pairs (neither <= 16 nor a multiple) must "
                                        "stay on the GEMM");
    return test_finish("test_bf16_amx_conv");
}
