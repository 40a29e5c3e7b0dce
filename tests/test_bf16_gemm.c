/* The bf16 pair GEMM (AVX512_BF16 vdpbf16ps, src/bf16/bf16_gemm.h): every bf16 x bf16 product
 * and convolution on that path must give the bits of the pair-chain definition in
 * src/fp32/f32_kernels.h, computed here in scalar fmaf:
 *     per pair p: acc = fma(a[2p+1], b[2p+1], acc); acc = fma(a[2p], b[2p], acc)
 * with vdpbf16ps (driver's choice) and with the exact FMA kernel everywhere, at 1 and 2 threads,
 * for odd K, K beyond one depth block, edge tiles and transposed views. Data where vdpbf16ps
 * would flush (subnormal inputs, products below 2^-126, a chain continuing from a subnormal
 * partial sum) must still give the definition's bits: that checks the driver's and kernel's
 * guards; the exponent keys behind that choice against their definition. Skips on CPUs
 * without AVX512_BF16, where bf16 products take the widening route
 * (checked against fp64 by test_ops). */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "bf16/bf16_gemm.h"
#include "core/backend.h"
#include "nn/nn_ops.h" /* fx_conv_subsample_set_enabled */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>

/* The definition: a[k*sa], b[k*sb] for k < K. */
static float pair_chain(const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb, int64_t K)
{
    float acc = 0.0f;
    for (int64_t k = 0; k < K; k += 2) {
        const float ao = k + 1 < K ? fx_bf16_to_f32(a[(k + 1) * sa]) : 0.0f;
        const float bo = k + 1 < K ? fx_bf16_to_f32(b[(k + 1) * sb]) : 0.0f;
        acc = fmaf(ao, bo, acc);
        acc = fmaf(fx_bf16_to_f32(a[k * sa]), fx_bf16_to_f32(b[k * sb]), acc);
    }
    return acc;
}

/* Data kinds. */
enum { DATA_NORMAL, DATA_TINY, DATA_SUBNORMAL, DATA_CARRY, DATA_MIXED };

/* A bf16 value for position k of a chain of length K. */
static uint16_t draw(test_rng *r, int kind, int64_t k)
{
    const uint16_t sign = (uint16_t)(test_rng_u64(r) & 1) << 15, man = (uint16_t)(test_rng_u64(r) & 127);
    int e;
    switch (kind) {
    case DATA_TINY: e = (int)test_rng_range(r, 50, 70); break;          /* products ~2^-140 */
    case DATA_SUBNORMAL: /* one in eight a subnormal */
        if (test_rng_u64(r) % 8 == 0) return (uint16_t)(sign | (man ? man : 1));
        e = (int)test_rng_range(r, 110, 135);
        break;
    case DATA_CARRY: /* the first 600 k tiny (subnormal partial sums), then zeros: the next
                      * depth blocks pass the driver's test but continue from subnormals */
        if (k >= 600) return 0;
        e = (int)test_rng_range(r, 60, 66);
        break;
    case DATA_MIXED: e = (int)test_rng_range(r, 1, 200); break;
    default: e = (int)test_rng_range(r, 115, 133); break;
    }
    if (test_rng_u64(r) % 16 == 0) return 0; /* some exact zeros */
    return (uint16_t)(sign | e << 7 | man);
}

static tensor_t *new2d(fmt_t f, int64_t r, int64_t c)
{
    const int64_t sh[2] = {r, c};
    return tensor_new(f, 2, sh);
}

/* C = A x B through tensor_matmul, A [M,K] (transA: stored [K,M] and viewed transposed),
 * B [K,N] (transB likewise), compared bit for bit with the definition. */
static void check_matmul(int64_t M, int64_t N, int64_t K, int transA, int transB, int kind,
                         uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    uint16_t *a = malloc(sizeof(uint16_t) * (size_t)(M * K));
    uint16_t *b = malloc(sizeof(uint16_t) * (size_t)(K * N));
    float *c = malloc(sizeof(float) * (size_t)(M * N));
    /* logical A[i][k] at a[i*K + k] (or a[k*M + i] when stored transposed); B likewise */
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) a[transA ? k * M + i : i * K + k] = draw(&r, kind, k);
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) b[transB ? j * K + k : k * N + j] = draw(&r, kind, k);
    tensor_t *ta = transA ? new2d(FMT_BF16, K, M) : new2d(FMT_BF16, M, K);
    tensor_t *tb = transB ? new2d(FMT_BF16, N, K) : new2d(FMT_BF16, K, N);
    tensor_t *tc = new2d(FMT_FP32, M, N);
    CHECK_STATUS(tensor_set_raw(ta, a), FX_OK);
    CHECK_STATUS(tensor_set_raw(tb, b), FX_OK);
    tensor_t *va = transA ? tensor_view_transpose(ta, 0, 1) : ta;
    tensor_t *vb = transB ? tensor_view_transpose(tb, 0, 1) : tb;
    for (int threads = 1; threads <= 2; threads++)
        for (int dot = 0; dot <= 1; dot++) {
            flexpoint_set_num_threads(threads);
            fx_bf16_dot_set_enabled(dot);
            CHECK_STATUS(tensor_matmul(tc, va, vb), FX_OK);
            CHECK_STATUS(tensor_to_f32(tc, c), FX_OK);
            long bad = 0;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    const float want = transA ? pair_chain(a + i, M, transB ? b + j * K : b + j,
                                                           transB ? 1 : N, K)
                                              : pair_chain(a + i * K, 1, transB ? b + j * K : b + j,
                                                           transB ? 1 : N, K);
                    if (test_f32_bits(want) != test_f32_bits(c[i * N + j]) && bad++ < 3)
                        fprintf(stderr, "  [%lld,%lld]: %a, want %a\n", (long long)i, (long long)j,
                                (double)c[i * N + j], (double)want);
                }
            CHECK(bad == 0, "%lldx%lldx%lld transA %d transB %d data %d, %d threads, dot %d: %ld "
                  "outputs differ from the pair-chain definition",
                  (long long)M, (long long)N, (long long)K, transA, transB, kind, threads, dot, bad);
        }
    fx_bf16_dot_set_enabled(1);
    if (va != ta) tensor_free(va);
    if (vb != tb) tensor_free(vb);
    tensor_free(ta);
    tensor_free(tb);
    tensor_free(tc);
    free(a);
    free(b);
    free(c);
}

/* The direct forward route's definition (fx_bf16_fwd_direct, any stride): per output a pair
 * chain over the taps (kh, kw) in order and, within each, the channel pairs (2cp, 2cp + 1), the
 * odd channel first; an odd C pairs its last channel with zero; taps outside x read 0. */
static float direct_chain(const uint16_t *x, const uint16_t *w, int64_t C, int64_t H, int64_t W,
                          int64_t KH, int64_t KW, int pad, int stride, int64_t n, int64_t o,
                          int64_t oh, int64_t ow)
{
    float acc = 0.0f;
    for (int64_t kh = 0; kh < KH; kh++)
        for (int64_t kw = 0; kw < KW; kw++) {
            const int64_t ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
            const int in = ih >= 0 && ih < H && iw >= 0 && iw < W;
            for (int64_t c = 0; c < C; c += 2) {
                float xv[2] = {0.0f, 0.0f}, wv[2] = {0.0f, 0.0f};
                for (int t = 0; t < 2 && c + t < C; t++) {
                    xv[t] = in ? fx_bf16_to_f32(x[((n * C + c + t) * H + ih) * W + iw]) : 0.0f;
                    wv[t] = fx_bf16_to_f32(w[((o * C + c + t) * KH + kh) * KW + kw]);
                }
                acc = fmaf(xv[1], wv[1], acc);
                acc = fmaf(xv[0], wv[0], acc);
            }
        }
    return acc;
}

/* Whether the direct forward route takes a convolution (fx_bf16_fwd_direct_fits) */
static int direct_fwd(int64_t C, int64_t O, int64_t KH, int64_t KW, int stride)
{
    return C >= 8 && O >= 16 && KH * KW <= 64 && KH >= stride && KW >= stride;
}

/* A bf16 convolution against its route's definition: the direct kernel's tap-major chain where
 * it runs (and it must have run there), else the implicit-GEMM panel route's chain over each
 * output's patch, tap order k = (c*KH + kh)*KW + kw; with vdpbf16ps and with the FMA chain, at
 * 1 and 2 threads, on data of the given kind (flushing data: the kernels' guards). */
static void check_conv(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH,
                       int64_t KW, int pad, int stride, int kind, uint64_t seed)
{
    const int direct = direct_fwd(C, O, KH, KW, stride);
    const int64_t OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
    const int64_t xs[4] = {N, C, H, W}, ws[4] = {O, C, KH, KW}, ys[4] = {N, O, OH, OW};
    const int64_t nx = N * C * H * W, nw = O * C * KH * KW, ny = N * O * OH * OW, K = C * KH * KW;
    test_rng r;
    test_rng_seed(&r, seed);
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)nx), *w = malloc(sizeof(uint16_t) * (size_t)nw);
    uint16_t *pa = malloc(sizeof(uint16_t) * (size_t)K);
    float *y = malloc(sizeof(float) * (size_t)ny);
    for (int64_t i = 0; i < nx; i++) x[i] = draw(&r, kind, 0);
    for (int64_t i = 0; i < nw; i++) w[i] = draw(&r, kind, 0);
    tensor_t *tx = tensor_new(FMT_BF16, 4, xs), *tw = tensor_new(FMT_BF16, 4, ws);
    tensor_t *ty = tensor_new(FMT_FP32, 4, ys);
    tensor_t *tyb = tensor_new(FMT_BF16, 4, ys), *tref = tensor_new(FMT_BF16, 4, ys);
    tensor_t *tyh = tensor_new(FMT_FP16, 4, ys), *trefh = tensor_new(FMT_FP16, 4, ys);
    uint16_t *yb = malloc(sizeof(uint16_t) * (size_t)ny), *yr = malloc(sizeof(uint16_t) * (size_t)ny);
    CHECK_STATUS(tensor_set_raw(tx, x), FX_OK);
    CHECK_STATUS(tensor_set_raw(tw, w), FX_OK);
    /* the strided route itself: a strided 1x1 kernel would run as the stride-1 convolution of
     * its copied pixels (test_conv_subsample) */
    fx_conv_subsample_set_enabled(0);
    for (int threads = 1; threads <= 2; threads++)
        for (int dot = 0; dot <= 1; dot++) {
            flexpoint_set_num_threads(threads);
            fx_bf16_dot_set_enabled(dot);
            const long long calls = fx_bf16_fwd_direct_calls();
            CHECK_STATUS(tensor_conv2d(ty, tx, tw, stride, stride, pad, pad, 1, 1), FX_OK);
            CHECK_STATUS(tensor_to_f32(ty, y), FX_OK);
            CHECK((fx_bf16_fwd_direct_calls() > calls) == direct,
                  "conv C%lld O%lld k%lldx%lld stride %d: the direct route %s", (long long)C,
                  (long long)O, (long long)KH, (long long)KW, stride,
                  direct ? "did not run" : "ran outside its geometries");
            long bad = 0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        for (int64_t c = 0; c < C; c++)
                            for (int64_t kh = 0; kh < KH; kh++)
                                for (int64_t kw = 0; kw < KW; kw++) {
                                    const int64_t ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                                    const int in = ih >= 0 && ih < H && iw >= 0 && iw < W;
                                    pa[(c * KH + kh) * KW + kw] =
                                        in ? x[((n * C + c) * H + ih) * W + iw] : 0;
                                }
                        for (int64_t o = 0; o < O; o++) {
                            const float want = direct ? direct_chain(x, w, C, H, W, KH, KW, pad, stride, n, o, oh, ow)
                                                      : pair_chain(pa, 1, w + o * K, 1, K);
                            const float got = y[((n * O + o) * OH + oh) * OW + ow];
                            bad += test_f32_bits(want) != test_f32_bits(got);
                        }
                    }
            CHECK(bad == 0, "conv N%lld C%lld %lldx%lld O%lld k%lldx%lld pad %d stride %d data "
                  "%d, %d threads, dot %d: %ld outputs differ from the %s definition",
                  (long long)N, (long long)C, (long long)H, (long long)W, (long long)O,
                  (long long)KH, (long long)KW, pad, stride, kind, threads, dot, bad,
                  direct ? "direct route's" : "pair-chain");
            /* a bf16 or fp16 y (which the direct route writes chunk by chunk, bf16 from the
             * tiles' registers) holds the same sums rounded as any write of them */
            for (int h = 0; h < 2; h++) {
                tensor_t *th = h ? tyh : tyb, *tr = h ? trefh : tref;
                CHECK_STATUS(tensor_conv2d(th, tx, tw, stride, stride, pad, pad, 1, 1), FX_OK);
                CHECK_STATUS(tensor_from_f32(tr, y), FX_OK);
                CHECK_STATUS(tensor_get_raw(th, yb), FX_OK);
                CHECK_STATUS(tensor_get_raw(tr, yr), FX_OK);
                bad = 0;
                for (int64_t i = 0; i < ny; i++) bad += yb[i] != yr[i];
                CHECK(bad == 0, "conv N%lld C%lld O%lld k%lldx%lld stride %d data %d, %d threads, "
                      "dot %d: %ld %s outputs differ from the fp32 outputs rounded",
                      (long long)N, (long long)C, (long long)O, (long long)KH, (long long)KW,
                      stride, kind, threads, dot, bad, h ? "fp16" : "bf16");
            }
        }
    fx_bf16_dot_set_enabled(1);
    fx_conv_subsample_set_enabled(1);
    tensor_free(tx);
    tensor_free(tw);
    tensor_free(ty);
    tensor_free(tyb);
    tensor_free(tref);
    tensor_free(tyh);
    tensor_free(trefh);
    free(x);
    free(w);
    free(pa);
    free(y);
    free(yb);
    free(yr);
}

/* A bf16 convolution in place (y the very tensor x, C = O, the output as large as the input)
 * on the direct route gives the bits of the same convolution into another tensor, over several
 * chunks and at 1 and 2 threads: no chunk may read an input another has overwritten. */
static void check_conv_in_place(int64_t N, int64_t C, int64_t H, int64_t K, uint64_t seed)
{
    const int64_t xs[4] = {N, C, H, H}, ws[4] = {C, C, K, K}, nx = N * C * H * H;
    test_rng r;
    test_rng_seed(&r, seed);
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)nx), *want = malloc(sizeof(uint16_t) * (size_t)nx);
    uint16_t *got = malloc(sizeof(uint16_t) * (size_t)nx), *w = malloc(sizeof(uint16_t) * (size_t)(C * C * K * K));
    for (int64_t i = 0; i < nx; i++) x[i] = draw(&r, DATA_NORMAL, 0);
    for (int64_t i = 0; i < C * C * K * K; i++) w[i] = draw(&r, DATA_NORMAL, 0);
    tensor_t *tx = tensor_new(FMT_BF16, 4, xs), *tw = tensor_new(FMT_BF16, 4, ws);
    tensor_t *ty = tensor_new(FMT_BF16, 4, xs);
    CHECK_STATUS(tensor_set_raw(tw, w), FX_OK);
    for (int threads = 1; threads <= 2; threads++) {
        flexpoint_set_num_threads(threads);
        CHECK_STATUS(tensor_set_raw(tx, x), FX_OK);
        const long long calls = fx_bf16_fwd_direct_calls();
        CHECK_STATUS(tensor_conv2d(ty, tx, tw, 1, 1, K / 2, K / 2, 1, 1), FX_OK);
        CHECK_STATUS(tensor_conv2d(tx, tx, tw, 1, 1, K / 2, K / 2, 1, 1), FX_OK);
        CHECK(fx_bf16_fwd_direct_calls() > calls, "in-place conv C%lld k%lld: the direct route "
              "did not run", (long long)C, (long long)K);
        CHECK_STATUS(tensor_get_raw(ty, want), FX_OK);
        CHECK_STATUS(tensor_get_raw(tx, got), FX_OK);
        long bad = 0;
        for (int64_t i = 0; i < nx; i++) bad += want[i] != got[i];
        CHECK(bad == 0, "in-place conv N%lld C%lld %lldx%lld k%lld, %d threads: %ld of %lld "
              "outputs differ from the same convolution into another tensor", (long long)N,
              (long long)C, (long long)H, (long long)H, (long long)K, threads, bad, (long long)nx);
    }
    tensor_free(tx);
    tensor_free(tw);
    tensor_free(ty);
    free(x);
    free(w);
    free(want);
    free(got);
}

/* The bf16 weight gradient straight from the padded input (fx_bf16_wgrad_direct) against the
 * GEMM route (patch matrix x dy^T on the pair GEMM): the same pairs in the same order, so every
 * bit must agree, with vdpbf16ps and with the FMA chain, at 1 and 2 threads, and on data where
 * vdpbf16ps would flush (the direct route then takes the FMA chain for the chunk), at stride 1
 * and at stride 2 (read from the copy in column runs). Where the geometry fits, the direct
 * route must have run. */
static void check_wgrad_strided(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                                int64_t KH, int64_t KW, int pad, int sh, int sw, int kind,
                                uint64_t seed)
{
    const int64_t OH = (H + 2 * pad - KH) / sh + 1, OW = (W + 2 * pad - KW) / sw + 1;
    const int64_t xs[4] = {N, C, H, W}, ws[4] = {O, C, KH, KW}, ys[4] = {N, O, OH, OW};
    const int64_t nx = N * C * H * W, nw = O * C * KH * KW, ny = N * O * OH * OW;
    test_rng r;
    test_rng_seed(&r, seed);
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)nx), *dy = malloc(sizeof(uint16_t) * (size_t)ny);
    float *want = malloc(sizeof(float) * (size_t)nw), *got = malloc(sizeof(float) * (size_t)nw);
    for (int64_t i = 0; i < nx; i++) x[i] = draw(&r, kind, i);
    for (int64_t i = 0; i < ny; i++) dy[i] = draw(&r, kind, i);
    tensor_t *tx = tensor_new(FMT_BF16, 4, xs), *tdy = tensor_new(FMT_BF16, 4, ys);
    tensor_t *tdw = tensor_new(FMT_FP32, 4, ws);
    CHECK_STATUS(tensor_set_raw(tx, x), FX_OK);
    CHECK_STATUS(tensor_set_raw(tdy, dy), FX_OK);
    const int fits = OW % 2 == 0 && KH >= sh && KW >= sw;
    /* the strided route itself, as in check_conv */
    fx_conv_subsample_set_enabled(0);
    for (int threads = 1; threads <= 2; threads++)
        for (int dot = 0; dot <= 1; dot++) {
            flexpoint_set_num_threads(threads);
            fx_bf16_dot_set_enabled(dot);
            fx_bf16_wgrad_direct_set_enabled(0);
            CHECK_STATUS(tensor_conv2d_backward_weight(tdw, tx, tdy, sh, sw, pad, pad, 1,
                                                       1),
                         FX_OK);
            CHECK_STATUS(tensor_to_f32(tdw, want), FX_OK);
            fx_bf16_wgrad_direct_set_enabled(1);
            const long long calls = fx_bf16_wgrad_direct_calls();
            CHECK_STATUS(tensor_conv2d_backward_weight(tdw, tx, tdy, sh, sw, pad, pad, 1,
                                                       1),
                         FX_OK);
            CHECK_STATUS(tensor_to_f32(tdw, got), FX_OK);
            CHECK((fx_bf16_wgrad_direct_calls() > calls) == fits,
                  "wgrad N%lld C%lld %lldx%lld O%lld k%lldx%lld pad %d stride %dx%d: direct "
                  "route %s", (long long)N, (long long)C, (long long)H, (long long)W,
                  (long long)O, (long long)KH, (long long)KW, pad, sh, sw,
                  fits ? "not taken" : "taken where it does not fit");
            long bad = 0;
            for (int64_t i = 0; i < nw; i++) bad += test_f32_bits(want[i]) != test_f32_bits(got[i]);
            CHECK(bad == 0, "wgrad N%lld C%lld %lldx%lld O%lld k%lldx%lld pad %d stride %dx%d "
                  "data %d, %d threads, dot %d: %ld of %lld weights differ from the GEMM route",
                  (long long)N, (long long)C, (long long)H, (long long)W, (long long)O,
                  (long long)KH, (long long)KW, pad, sh, sw, kind, threads, dot, bad,
                  (long long)nw);
        }
    fx_bf16_dot_set_enabled(1);
    fx_conv_subsample_set_enabled(1);
    tensor_free(tx);
    tensor_free(tdy);
    tensor_free(tdw);
    free(x);
    free(dy);
    free(want);
    free(got);
}

static void check_wgrad(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH,
                        int64_t KW, int pad, int kind, uint64_t seed)
{
    check_wgrad_strided(N, C, H, W, O, KH, KW, pad, 1, 1, kind, seed);
}

/* The bf16 input gradient where the direct forward route takes it: a forward convolution of dy
 * with the flipped, transposed kernel, so the direct route's definition on that problem (and
 * the route must have run). */
static void check_dx(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH,
                     int64_t KW, int pad, uint64_t seed)
{
    const int64_t OH = H + 2 * pad - KH + 1, OW = W + 2 * pad - KW + 1;
    const int64_t ws[4] = {O, C, KH, KW}, ys[4] = {N, O, OH, OW}, xs[4] = {N, C, H, W};
    const int64_t nw = O * C * KH * KW, ny = N * O * OH * OW, nx = N * C * H * W;
    test_rng r;
    test_rng_seed(&r, seed);
    uint16_t *dy = malloc(sizeof(uint16_t) * (size_t)ny), *w = malloc(sizeof(uint16_t) * (size_t)nw);
    uint16_t *wf = malloc(sizeof(uint16_t) * (size_t)nw);
    float *dx = malloc(sizeof(float) * (size_t)nx);
    for (int64_t i = 0; i < ny; i++) dy[i] = draw(&r, DATA_NORMAL, 0);
    for (int64_t i = 0; i < nw; i++) w[i] = draw(&r, DATA_NORMAL, 0);
    for (int64_t o = 0; o < O; o++) /* wf[c][o][kh][kw] = w[o][c][KH-1-kh][KW-1-kw] */
        for (int64_t c = 0; c < C; c++)
            for (int64_t kh = 0; kh < KH; kh++)
                for (int64_t kw = 0; kw < KW; kw++)
                    wf[((c * O + o) * KH + kh) * KW + kw] = w[((o * C + c) * KH + KH - 1 - kh) * KW + KW - 1 - kw];
    tensor_t *tw = tensor_new(FMT_BF16, 4, ws), *tdy = tensor_new(FMT_BF16, 4, ys);
    tensor_t *tdx = tensor_new(FMT_FP32, 4, xs);
    CHECK_STATUS(tensor_set_raw(tw, w), FX_OK);
    CHECK_STATUS(tensor_set_raw(tdy, dy), FX_OK);
    for (int threads = 1; threads <= 2; threads++) {
        flexpoint_set_num_threads(threads);
        const long long calls = fx_bf16_fwd_direct_calls();
        CHECK_STATUS(tensor_conv2d_backward_input(tdx, tdy, tw, 1, 1, pad, pad, 1, 1), FX_OK);
        CHECK(fx_bf16_fwd_direct_calls() > calls, "dx C%lld O%lld: the direct route did not run",
              (long long)C, (long long)O);
        CHECK_STATUS(tensor_to_f32(tdx, dx), FX_OK);
        long bad = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t ih = 0; ih < H; ih++)
                    for (int64_t iw = 0; iw < W; iw++) {
                        const float want = direct_chain(dy, wf, O, OH, OW, KH, KW, (int)(KH - 1 - pad),
                                                        1, n, c, ih, iw);
                        bad += test_f32_bits(want) != test_f32_bits(dx[((n * C + c) * H + ih) * W + iw]);
                    }
        CHECK(bad == 0, "dx N%lld C%lld %lldx%lld O%lld k%lldx%lld pad %d, %d threads: %ld of "
              "%lld values differ from the direct route's definition", (long long)N, (long long)C,
              (long long)H, (long long)W, (long long)O, (long long)KH, (long long)KW, pad, threads,
              bad, (long long)nx);
    }
    tensor_free(tw);
    tensor_free(tdy);
    tensor_free(tdx);
    free(dy);
    free(w);
    free(wf);
    free(dx);
}

/* The bf16 input gradient at stride 2 by phases (fx_bf16_dgrad_s2_direct, the dpbf16 route):
 * each dx value its phase's chain (fx_bf16_s2_axis: the kernel taps of its row and column
 * parity in order of rising dy offset, within each tap dy's channel pairs, odd first) rounded
 * once to bf16, with vdpbf16ps and with the FMA chain, at 1 and 2 threads, on data of the given
 * kind; the route must have run where it fits and nowhere else, nor with its switch off (the
 * col2im route's values against fp64: test_nn_conv). */
static void check_dx_s2(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH,
                        int64_t KW, int pad, int kind, uint64_t seed)
{
    const int64_t OH = (H + 2 * pad - KH) / 2 + 1, OW = (W + 2 * pad - KW) / 2 + 1;
    const int64_t ws[4] = {O, C, KH, KW}, ys[4] = {N, O, OH, OW}, xs[4] = {N, C, H, W};
    const int64_t nw = O * C * KH * KW, ny = N * O * OH * OW, nx = N * C * H * W;
    const int fits = fx_backend_active()->conv.bf16_dgrad_s2 != NULL && H % 2 == 0 &&
                     W % 2 == 0 && O >= 8 && C >= 16;
    test_rng r;
    test_rng_seed(&r, seed);
    uint16_t *dy = malloc(sizeof(uint16_t) * (size_t)ny), *w = malloc(sizeof(uint16_t) * (size_t)nw);
    uint16_t *got = malloc(sizeof(uint16_t) * (size_t)nx), *want = malloc(sizeof(uint16_t) * (size_t)nx);
    float *ref = malloc(sizeof(float) * (size_t)nx);
    for (int64_t i = 0; i < ny; i++) dy[i] = draw(&r, kind, i);
    for (int64_t i = 0; i < nw; i++) w[i] = draw(&r, kind, i);
    tensor_t *tw = tensor_new(FMT_BF16, 4, ws), *tdy = tensor_new(FMT_BF16, 4, ys);
    tensor_t *tdx = tensor_new(FMT_BF16, 4, xs), *tref = tensor_new(FMT_BF16, 4, xs);
    /* and into a view (channels 1 .. C of C + 2), which the route writes through a buffer */
    const int64_t vs[4] = {N, C + 2, H, W};
    tensor_t *tvbase = tensor_new(FMT_BF16, 4, vs);
    tensor_t *tview = tvbase ? tensor_view_slice(tvbase, 1, 1, C + 1, 1) : NULL;
    CHECK(tview != NULL, "dx by phases: tensor_view_slice failed");
    CHECK_STATUS(tensor_set_raw(tw, w), FX_OK);
    CHECK_STATUS(tensor_set_raw(tdy, dy), FX_OK);
    /* the definition: each phase's chain in fp32, rounded by a write of the fp32 values */
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t x = 0; x < W; x++) {
                    fx_bf16_s2_axis ah, aw;
                    fx_bf16_s2_axis_make(h % 2, KH, pad, H, &ah);
                    fx_bf16_s2_axis_make(x % 2, KW, pad, W, &aw);
                    float acc = 0.0f;
                    for (int64_t i = 0; i < ah.taps; i++)
                        for (int64_t j = 0; j < aw.taps; j++) {
                            const int64_t oh = h / 2 + ah.d0 + i, ow = x / 2 + aw.d0 + j;
                            const int in = oh >= 0 && oh < OH && ow >= 0 && ow < OW;
                            for (int64_t o = 0; o < O; o += 2) {
                                float dv[2] = {0.0f, 0.0f}, wv[2] = {0.0f, 0.0f};
                                for (int t = 0; t < 2 && o + t < O; t++) {
                                    dv[t] = in ? fx_bf16_to_f32(dy[((n * O + o + t) * OH + oh) * OW + ow])
                                               : 0.0f;
                                    wv[t] = fx_bf16_to_f32(
                                        w[((o + t) * C + c) * KH * KW + ah.k[i] * KW + aw.k[j]]);
                                }
                                acc = fmaf(dv[1], wv[1], acc);
                                acc = fmaf(dv[0], wv[0], acc);
                            }
                        }
                    ref[((n * C + c) * H + h) * W + x] = acc;
                }
    CHECK_STATUS(tensor_from_f32(tref, ref), FX_OK);
    CHECK_STATUS(tensor_get_raw(tref, want), FX_OK);
    for (int threads = 1; threads <= 2; threads++)
        for (int dot = 0; dot <= 1; dot++) {
            flexpoint_set_num_threads(threads);
            fx_bf16_dot_set_enabled(dot);
            const int64_t runs = fx_conv_bf16_phased();
            CHECK_STATUS(tensor_conv2d_backward_input(tdx, tdy, tw, 2, 2, pad, pad, 1, 1), FX_OK);
            CHECK((fx_conv_bf16_phased() > runs) == fits,
                  "dx by phases N%lld C%lld %lldx%lld O%lld k%lldx%lld pad %d: the route %s",
                  (long long)N, (long long)C, (long long)H, (long long)W, (long long)O,
                  (long long)KH, (long long)KW, pad,
                  fits ? "did not run" : "ran where it does not fit");
            if (!fits) continue;
            for (int v = 0; v < 2 && tview; v++) { /* dx whole, then the view */
                if (v) CHECK_STATUS(tensor_conv2d_backward_input(tview, tdy, tw, 2, 2, pad, pad, 1, 1),
                                    FX_OK);
                CHECK_STATUS(tensor_get_raw(v ? tview : tdx, got), FX_OK);
                long bad = 0;
                for (int64_t i = 0; i < nx; i++) bad += got[i] != want[i];
                CHECK(bad == 0, "dx by phases N%lld C%lld %lldx%lld O%lld k%lldx%lld pad %d data "
                      "%d, %d threads, dot %d%s: %ld of %lld values differ from the phases' "
                      "definition", (long long)N, (long long)C, (long long)H, (long long)W,
                      (long long)O, (long long)KH, (long long)KW, pad, kind, threads, dot,
                      v ? ", into a view" : "", bad, (long long)nx);
            }
        }
    fx_bf16_dot_set_enabled(1);
    /* switched off: the col2im route */
    fx_conv_bf16_phases_set_enabled(0);
    const int64_t runs = fx_conv_bf16_phased();
    CHECK_STATUS(tensor_conv2d_backward_input(tdx, tdy, tw, 2, 2, pad, pad, 1, 1), FX_OK);
    CHECK(fx_conv_bf16_phased() == runs, "dx by phases ran with its switch off");
    fx_conv_bf16_phases_set_enabled(1);
    tensor_free(tw);
    tensor_free(tdy);
    tensor_free(tdx);
    tensor_free(tref);
    tensor_free(tview);
    tensor_free(tvbase);
    free(dy);
    free(w);
    free(got);
    free(want);
    free(ref);
}

/* The driver's exponent test at its boundary: with biased exponents fa + fb = 141 (one below
 * FX_BF16_DOT_MIN_KEYSUM) two products can cancel to 2^-127, a subnormal that vdpbf16ps would
 * flush: 129*129 - 130*128 = 1 in units of 2^-127. At fa + fb = 142 the same data gives 2^-126,
 * a normal number, on either kernel. */
static void check_keysum_boundary(void)
{
    for (int fb = 71; fb <= 72; fb++) {
        const int fa = 70;
        const int64_t M = 18, N = 64, K = 2;
        uint16_t a[18 * 2], b[2 * 64];
        for (int64_t i = 0; i < M; i++) {
            a[i * K] = (uint16_t)(fa << 7 | 1);     /* 129 * 2^(fa-134) */
            a[i * K + 1] = (uint16_t)(fa << 7 | 2); /* 130 * 2^(fa-134) */
        }
        for (int64_t j = 0; j < N; j++) {
            b[j] = (uint16_t)(fb << 7 | 1);                 /* 129 * 2^(fb-134) */
            b[N + j] = (uint16_t)(0x8000 | fb << 7 | 0);    /* -128 * 2^(fb-134) */
        }
        tensor_t *ta = new2d(FMT_BF16, M, K), *tb = new2d(FMT_BF16, K, N), *tc = new2d(FMT_FP32, M, N);
        float c[18 * 64];
        CHECK_STATUS(tensor_set_raw(ta, a), FX_OK);
        CHECK_STATUS(tensor_set_raw(tb, b), FX_OK);
        CHECK_STATUS(tensor_matmul(tc, ta, tb), FX_OK);
        CHECK_STATUS(tensor_to_f32(tc, c), FX_OK);
        const float want = ldexpf(1.0f, -268 + fa + fb); /* 2^-127 or 2^-126 */
        CHECK(test_f32_bits(pair_chain(a, 1, b, N, K)) == test_f32_bits(want), "definition %a, want %a",
              (double)pair_chain(a, 1, b, N, K), (double)want);
        long bad = 0;
        for (int64_t i = 0; i < M * N; i++) bad += test_f32_bits(c[i]) != test_f32_bits(want);
        CHECK(bad == 0, "fa + fb = %d: %ld outputs are not %a (flushed?)", fa + fb, bad, (double)want);
        tensor_free(ta);
        tensor_free(tb);
        tensor_free(tc);
    }
}

/* The exponent keys (fx_bf16_minkey: the smallest biased exponent field of the nonzero values,
 * 0x7FFF when none) against their definition, over every length up to 100 (whole and partial
 * vectors) and values of every class: zeros of both signs, subnormals, normals, Inf, NaN. */
static void check_minkey(void)
{
    test_rng r;
    test_rng_seed(&r, 4242);
    uint16_t x[100];
    for (int trial = 0; trial < 400; trial++) {
        const int64_t n = trial % 101;
        const int zeros_only = trial % 7 == 0;
        for (int64_t i = 0; i < n; i++) {
            const int64_t pick = test_rng_range(&r, 0, 9);
            const uint16_t sign = test_rng_range(&r, 0, 1) ? 0x8000u : 0u;
            x[i] = zeros_only || pick == 0 ? sign
                   : pick == 1            ? (uint16_t)(sign | test_rng_range(&r, 1, 0x7F))
                   : pick == 2            ? (uint16_t)(sign | 0x7F80u)
                   : pick == 3            ? (uint16_t)(sign | test_rng_range(&r, 0x7F81, 0x7FFF))
                                          : (uint16_t)(sign | test_rng_range(&r, 0x80, 0x7F7F));
        }
        uint32_t want = 0x7FFF;
        for (int64_t i = 0; i < n; i++) {
            const uint32_t mag = x[i] & 0x7FFFu;
            if (mag && (mag >> 7) < want) want = mag >> 7;
        }
        const uint32_t got = fx_bf16_minkey_avx512(x, n);
        CHECK(got == want, "minkey of %lld values (trial %d): %u, the definition %u", (long long)n,
              trial, got, want);
    }
}

int main(void)
{
    const fx_backend *be = fx_backend_get(FX_BACKEND_AVX512);
    if (!be || !be->available || !fx_cpu()->avx512bf16)
        return test_skip("test_bf16_gemm", "this CPU has no AVX512_BF16 (bf16 products are "
                                           "widened to fp32; test_ops checks them)");
    CHECK_STATUS(flexpoint_set_backend("avx512"), FX_OK);
    /* the pair route, whichever route the CPU's table prefers (test_kernel_select checks both
     * against fp64) */
    CHECK_STATUS(flexpoint_set_kernel("matmul", FMT_BF16, "dpbf16"), FX_OK);
    CHECK(be->gemm.bf16_pair_panel_mr == FX_BF16_PAIR_MR, "dpbf16 route without pair panels");
    /* shapes: edge tiles in M and N, odd K, K across depth blocks (512), the narrow-C swap */
    static const int64_t shapes[][3] = {{6, 32, 2},    {7, 33, 1},   {13, 70, 5},  {64, 64, 64},
                                        {37, 95, 129}, {100, 40, 1100}, {200, 300, 515},
                                        {50, 10, 77},  {3, 200, 31}};
    uint64_t seed = 1;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            check_matmul(shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1, DATA_NORMAL, seed++);
    /* where vdpbf16ps would flush: the guards must give the definition's bits */
    for (int kind = DATA_TINY; kind <= DATA_MIXED; kind++) {
        check_matmul(37, 95, 129, 0, 0, kind, seed++);
        check_matmul(64, 64, 1300, 0, 1, kind, seed++);
        check_matmul(40, 70, 96, 1, 0, kind, seed++); /* a transposed A (pack_a_cols) */
    }
    check_keysum_boundary();
    check_minkey();
    /* convolutions: 5x5 (odd K) and 3x3, padding, stride, and the CNN's conv2 shape in small */
    check_conv(3, 1, 12, 12, 32, 5, 5, 2, 1, DATA_NORMAL, seed++);
    check_conv(2, 32, 10, 10, 64, 5, 5, 2, 1, DATA_NORMAL, seed++);
    check_conv(2, 16, 9, 9, 24, 3, 3, 1, 2, DATA_NORMAL, seed++);
    /* strided, on the direct route: ResNet-20's 16 -> 32 stride-2 3x3 layer in small, a 2x2
     * kernel at stride 2, 16- and 8-pixel tiles with spare rows, stride 3; and its 1x1
     * projection at stride 2, which stays on the panels */
    check_conv(2, 16, 16, 16, 32, 3, 3, 1, 2, DATA_NORMAL, seed++);
    check_conv(3, 16, 16, 16, 32, 1, 1, 0, 2, DATA_NORMAL, seed++);
    check_conv(2, 16, 12, 12, 16, 2, 2, 0, 2, DATA_NORMAL, seed++);
    check_conv(2, 32, 20, 20, 16, 3, 3, 1, 2, DATA_NORMAL, seed++);
    check_conv(2, 12, 17, 17, 20, 5, 5, 2, 3, DATA_NORMAL, seed++);
    check_conv(2, 3, 8, 8, 8, 1, 1, 0, 1, DATA_NORMAL, seed++);
    /* the direct forward route: the CNN's conv2 (7-pixel tiles), ResNet-20's 3x3 shapes (16
     * channels: 16-pixel tiles; 8 x 8 images), odd C and O with partial vectors, a partial
     * last tile (OW = 10 on 8-pixel tiles), and flushing data */
    check_conv(2, 32, 14, 14, 64, 5, 5, 2, 1, DATA_NORMAL, seed++);
    check_conv(2, 16, 32, 32, 16, 3, 3, 1, 1, DATA_NORMAL, seed++);
    check_conv(3, 64, 8, 8, 64, 3, 3, 1, 1, DATA_NORMAL, seed++);
    check_conv(2, 9, 10, 10, 40, 3, 3, 1, 1, DATA_NORMAL, seed++);
    check_conv(2, 12, 7, 11, 20, 3, 5, 0, 1, DATA_NORMAL, seed++);
    for (int kind = DATA_TINY; kind <= DATA_MIXED; kind++)
        check_conv(2, 11, 9, 9, 33, 3, 3, 1, 1, kind, seed++);
    check_conv_in_place(9, 16, 12, 1, seed++);
    check_conv_in_place(9, 16, 12, 3, seed++);
    check_dx(2, 32, 14, 14, 64, 5, 5, 2, seed++);
    check_dx(2, 16, 16, 16, 16, 3, 3, 1, seed++);
    /* input gradients at stride 2 by phases: ResNet-20's two downsampling layers, the smallest
     * channel counts the route takes (dy 8, dx 16) with dx's channels not a whole vector, an
     * odd dy channel count (a zero pair half), kernels of 2, 4 and 5 (phases of one to three
     * taps), no padding; an odd dx size and too few channels, which it leaves to col2im; and
     * data where vdpbf16ps would flush (the FMA chain for the chunk) */
    check_dx_s2(2, 16, 32, 32, 32, 3, 3, 1, DATA_NORMAL, seed++);
    check_dx_s2(3, 32, 16, 16, 64, 3, 3, 1, DATA_NORMAL, seed++);
    check_dx_s2(2, 20, 10, 10, 8, 3, 3, 1, DATA_NORMAL, seed++);
    check_dx_s2(2, 16, 8, 12, 9, 3, 3, 1, DATA_NORMAL, seed++);
    check_dx_s2(2, 16, 12, 12, 16, 2, 2, 0, DATA_NORMAL, seed++);
    check_dx_s2(2, 17, 12, 12, 16, 4, 4, 1, DATA_NORMAL, seed++);
    check_dx_s2(2, 16, 14, 14, 16, 5, 5, 2, DATA_NORMAL, seed++);
    check_dx_s2(2, 16, 12, 12, 16, 3, 3, 0, DATA_NORMAL, seed++);
    check_dx_s2(2, 16, 12, 10, 16, 3, 5, 1, DATA_NORMAL, seed++); /* KH != KW */
    check_dx_s2(20, 16, 8, 8, 16, 3, 3, 1, DATA_NORMAL, seed++);  /* two images a chunk */
    check_dx_s2(2, 16, 9, 9, 16, 3, 3, 1, DATA_NORMAL, seed++);
    check_dx_s2(2, 8, 12, 12, 16, 3, 3, 1, DATA_NORMAL, seed++);
    for (int kind = DATA_TINY; kind <= DATA_MIXED; kind++)
        check_dx_s2(2, 16, 12, 12, 16, 3, 3, 1, kind, seed++);
    /* weight gradients: the CNN's two layers (conv2 with enough images for several chunks and
     * groups), ResNet-20's 3x3 shapes, output channels of every tile width (16, 32, 48, 64 and
     * beyond, with a partial vector), and an odd OW, which the direct route leaves alone */
    check_wgrad(3, 1, 28, 28, 32, 5, 5, 2, DATA_NORMAL, seed++);
    check_wgrad(40, 32, 14, 14, 64, 5, 5, 2, DATA_NORMAL, seed++);
    check_wgrad(4, 16, 16, 16, 16, 3, 3, 1, DATA_NORMAL, seed++);
    check_wgrad(3, 64, 8, 8, 64, 3, 3, 1, DATA_NORMAL, seed++);
    check_wgrad(3, 8, 10, 10, 48, 3, 3, 1, DATA_NORMAL, seed++);
    check_wgrad(2, 6, 12, 12, 20, 3, 3, 0, DATA_NORMAL, seed++);
    check_wgrad(2, 5, 10, 10, 70, 3, 3, 1, DATA_NORMAL, seed++);
    check_wgrad(2, 5, 9, 9, 40, 3, 3, 1, DATA_NORMAL, seed++);
    for (int kind = DATA_TINY; kind <= DATA_MIXED; kind++)
        check_wgrad(3, 7, 12, 12, 33, 3, 3, 1, kind, seed++);
    /* at stride 2: ResNet-20's downsampling 3x3 layers, an odd padded width (the copy's last
     * odd column is a zero), an odd OW and a 1x1 projection, which the direct route leaves to
     * the GEMM, and data where vdpbf16ps would flush */
    check_wgrad_strided(3, 16, 32, 32, 32, 3, 3, 1, 2, 2, DATA_NORMAL, seed++);
    check_wgrad_strided(2, 32, 16, 16, 64, 3, 3, 1, 2, 2, DATA_NORMAL, seed++);
    check_wgrad_strided(2, 5, 11, 11, 20, 3, 3, 1, 2, 2, DATA_NORMAL, seed++);
    check_wgrad_strided(2, 5, 10, 10, 20, 3, 3, 1, 2, 2, DATA_NORMAL, seed++);
    check_wgrad_strided(2, 16, 16, 16, 32, 1, 1, 0, 2, 2, DATA_NORMAL, seed++);
    /* strides (1, 2) and (2, 1): the copy in column runs only across; several images a chunk */
    check_wgrad_strided(2, 8, 12, 12, 16, 3, 3, 1, 1, 2, DATA_NORMAL, seed++);
    check_wgrad_strided(2, 8, 12, 12, 16, 3, 3, 1, 2, 1, DATA_NORMAL, seed++);
    check_wgrad_strided(20, 16, 12, 12, 32, 3, 3, 1, 2, 2, DATA_NORMAL, seed++);
    for (int kind = DATA_TINY; kind <= DATA_MIXED; kind++)
        check_wgrad_strided(3, 7, 12, 12, 33, 3, 3, 1, 2, 2, kind, seed++);
    return test_finish("test_bf16_gemm");
}
