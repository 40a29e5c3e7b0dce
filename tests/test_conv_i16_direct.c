/* The exact int16 convolutions without a patch matrix (src/flex/conv_i16.h). The
 * forward pass (fx_i16_fwd_direct):
 *   - the kernel alone gives the exact int64 sums of a scalar reference and their largest
 *     |value|, at 1 and 2 threads, for the CNN's and ResNet-20's shapes, odd C (a partial
 *     segment and an odd last pair), O with partial vectors, partial last tiles and every tile
 *     width; on small, normal and mixed data (rows of large values beside small ones, so the
 *     rows' fold schedules differ and a large row's segments each meet their bound), and on
 *     data where every segment's bound is met exactly (equal values: Cauchy-Schwarz is tight),
 *     near the int32 limit, with both signs, or only in some rows, channels and output
 *     channels, where a missing or late fold makes a chain wrap;
 *   - it declines a chunk where one segment alone may leave int32 (full-scale data), and
 *     tensor_conv2d then still gives the GEMM's bits; the AVX2 kernel instead takes it with a
 *     fold after each pair of such segments, and gives the exact sums, also where they lie
 *     between chains that reach the bound (DATA_FULL_MIX) and at stride 2;
 *   - tensor_conv2d (DFP16 and FLEX16_5) and the input gradient give the same mantissas and
 *     exponents with the route on and off (the GEMM), and the route ran where it fits.
 * The weight gradient (fx_i16_wgrad_direct) likewise: the kernel against exact sums (stored,
 * and added to the sums already there) on every tile width (6 x 64, 8 x 48, 12 x 32, 12 x 16
 * channels, partial vectors and partial row tiles), one input channel, several images, and data
 * whose rows' products come close to their bound (equal values, both signs; or only in the
 * lower half of the odd channels, where a schedule taken from other rows or channels misses
 * them), where a missing fold wraps; the decline (the AVX2 kernel instead folds after each
 * pixel pair of a row too large for a chain, exactly, also beside rows whose chains reach the
 * bound); the tiles' shared fold schedules cover each tile's channels; at strides 2 and 3 and in one axis where the level's kernel takes them (both: a copy
 * with each padded row's columns in runs of every s-th one; rows of odd length and of two copy
 * steps); and tensor_conv2d_backward_weight bit for bit with the route on and off, also
 * at strides 2 and 3 (the route counted where it takes the stride, not for a 1x1 projection or
 * an odd OW).
 * The AVX2 kernel's copy of an image (pair words and row norms, padding added) equals the
 * portable copy's on every channel count, width and padding shape.
 * Both run for each level the CPU runs that has the kernels (AVX-512 with VNNI: vpdpwssd; AVX2:
 * vpmaddwd + vpaddd). Skips on CPUs without AVX2, where convolutions take the patch GEMM. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "flex/conv_i16.h"
#include "flex/conv_i16_direct.h"
#include "flex/conv_i16_wgrad.h"
#include "nn/im2col.h"
#include "nn/conv_dgrad_phases.h"
#include "flex/gemm_i16.h" /* fx_gemm_i16_amx_on */
#include "bf16/bf16_gemm.h" /* fx_bf16_pair_nhwc */
#include "nn/nn_ops.h"     /* fx_conv_early_rounding_reused, fx_conv_stage_redone */
#include "core/dispatch.h" /* fx_write_shared_guess_steady */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* DATA_SKEW: near the bound only in the lower half of some input channels (the odd ones; in
 * the forward pass the second 8 of every 16) and, in the forward pass, only for the second 16 of
 * every 32 output channels, so that a schedule taken from other rows, channels or output
 * channels misses them */
enum {
    DATA_SMALL,
    DATA_NORMAL,
    DATA_MIXED,
    DATA_TIGHT_POS,
    DATA_TIGHT_NEG,
    DATA_SKEW,
    DATA_FULL,
    DATA_CORNER, /* the strided input gradient's own case (check_strided_dgrad) */
    DATA_FULL_MIX, /* the kernels alone: one input row at full scale (+32767; in the
                      forward pass only every third group of 8 channels of it), the rest and
                      the weights (dy) near the bound: segments (rows) too large for a chain
                      right after chains that reach the bound (forward: two segments of
                      TIGHT - 1, whose rounded-up norms, 32765, still let two share a chain;
                      TIGHT's, 32768, do not), all of one sign, so that a missing fold before,
                      inside or after them wraps; few enough to be taken */
    DATA_FULL_ROW /* the ops: input row 3 at full scale (+-32767), the rest normal (3000), the
                     weights larger (10000), dy normal (4000, check_ops): a few segments (and
                     weight-gradient rows) too large for a chain */
};

/* sqrt((2^31 - 2^16) / 16) rounded down: a segment of 8 equal values a times 8 equal values a
 * sums to 8 a^2, its own bound, so two segments make a chain of 16 a^2 = 2147395600, just
 * inside 2^31 - 2^16, and a third must start a new one */
#define TIGHT 11585

static int16_t draw(test_rng *r, int kind, int is_w, int64_t row)
{
    switch (kind) {
    case DATA_SMALL:
        return (int16_t)test_rng_range(r, -300, 300);
    case DATA_NORMAL: {
        double v = test_rng_normal(r) * 4000.0;
        v = v > 32767 ? 32767 : v < -32767 ? -32767 : v;
        return (int16_t)v;
    }
    case DATA_MIXED: /* every third input row large and of one sign, as the weights: there a
                        segment's sum is its bound, 9.6e8, so a chain holds two; a schedule
                        taken from the wrong rows wraps */
        return (int16_t)(is_w ? 6000 : row % 3 == 0 ? 20000 : test_rng_range(r, -100, 100));
    case DATA_TIGHT_POS:
        return TIGHT;
    case DATA_TIGHT_NEG:
        return (int16_t)(is_w ? TIGHT : -TIGHT);
    case DATA_FULL_ROW: {
        if (!is_w && row == 3) return (int16_t)(test_rng_range(r, 0, 1) ? 32767 : -32767);
        double v = test_rng_normal(r) * (is_w ? 10000.0 : 3000.0);
        v = v > 32767 ? 32767 : v < -32767 ? -32767 : v;
        return (int16_t)v;
    }
    default:
        return (int16_t)(test_rng_range(r, 0, 1) ? 32767 : -32767);
    }
}

/* the forward kernel under test: the one of the backend being checked (AVX-512 or AVX2) */
typedef int (*fwd_kernel)(const fx_conv_geom *, const int16_t *, int64_t, const uint32_t *,
                          uint32_t *, int64_t *, int, uint64_t *);
static fwd_kernel g_fwd;
static int g_fwd_unpadded; /* the level's kernel takes the chunk unpadded (i16_fwd_unpadded) */
/* the weight gradient kernel under test, and the row norms its level takes */
typedef int (*wgrad_kernel)(const fx_conv_geom *, const int16_t *, const int16_t *, int64_t,
                            uint32_t *, int64_t *, int);
static wgrad_kernel g_wgrad;
static void (*g_row_norms)(const int16_t *, int64_t, int64_t, int64_t, uint32_t *);
static const char *g_level = "";

/* the kernel against the exact sums at stride st; returns whether it took the chunk */
static int check_kernel_strided(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                                int64_t KH, int64_t KW, int64_t pad, int64_t st, int kind,
                                uint64_t seed)
{
    const fx_conv_geom g = {.N = N, .C = C, .H = H, .W = W, .O = O, .KH = KH, .KW = KW,
                            .OH = (H + 2 * pad - KH) / st + 1, .OW = (W + 2 * pad - KW) / st + 1,
                            .sh = st, .sw = st, .ph = pad, .pw = pad, .dh = 1, .dw = 1};
    CHECK(fx_i16_fwd_direct_fits(&g), "C%lld O%lld %lldx%lld: the geometry should fit",
          (long long)C, (long long)O, (long long)KH, (long long)KW);
    const int64_t Hp = H + 2 * pad, Wp = W + 2 * pad, KK = KH * KW, P = g.OH * g.OW;
    test_rng r;
    test_rng_seed(&r, seed);
    int16_t *xp = calloc((size_t)(N * C * Hp * Wp), sizeof(int16_t));
    int16_t *xu = malloc(sizeof(int16_t) * (size_t)(N * C * H * W)); /* the same, unpadded */
    int16_t *w = malloc(sizeof(int16_t) * (size_t)(O * C * KK));
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t x = 0; x < W; x++)
                    xu[((n * C + c) * H + h) * W + x] =
                        xp[((n * C + c) * Hp + h + pad) * Wp + x + pad] =
                            kind == DATA_SKEW ? (int16_t)(c / 8 % 2 && h >= H / 2 ? TIGHT : 1)
                            : kind == DATA_FULL_MIX
                                ? (int16_t)(c / 8 % 3 == 2 && h == H / 2 ? 32767 : TIGHT - 1)
                                : draw(&r, kind, 0, h);
    for (int64_t i = 0; i < O * C * KK; i++)
        w[i] = kind == DATA_SKEW ? (int16_t)(i / (C * KK) / 16 % 2 ? TIGHT : 1)
               : kind == DATA_FULL_MIX ? (int16_t)(TIGHT - 1)
                                       : draw(&r, kind, 1, 0);
    int64_t *want = malloc(sizeof(int64_t) * (size_t)(N * P * O));
    uint64_t want_max = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow = 0; ow < g.OW; ow++)
                for (int64_t o = 0; o < O; o++) {
                    int64_t s = 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t kh = 0; kh < KH; kh++)
                            for (int64_t kw = 0; kw < KW; kw++)
                                s += (int64_t)xp[((n * C + c) * Hp + oh * st + kh) * Wp +
                                                 ow * st + kw] *
                                     w[((o * C + c) * KH + kh) * KW + kw];
                    want[(n * P + oh * g.OW + ow) * O + o] = s;
                    const uint64_t a = (uint64_t)(s < 0 ? -s : s);
                    want_max = a > want_max ? a : want_max;
                }
    const int64_t nwq = fx_i16_fwd_direct_weights_numel(&g) + 16;
    uint32_t *wq_raw = malloc(sizeof(uint32_t) * (size_t)nwq);
    uint32_t *wq = wq_raw + ((16 - ((uintptr_t)wq_raw / 4) % 16) % 16);
    fx_i16_fwd_direct_pack_weights(&g, w, wq);
    uint32_t *scratch = malloc(sizeof(uint32_t) * (size_t)fx_i16_fwd_direct_scratch(&g, N));
    int64_t *got = malloc(sizeof(int64_t) * (size_t)(N * P * O));
    int took = 0;
    for (int threads = 1; threads <= 2; threads++) {
        memset(got, 0x5A, sizeof(int64_t) * (size_t)(N * P * O));
        uint64_t got_max = 0;
        took = g_fwd(&g, g_fwd_unpadded ? xu : xp, N, wq, scratch, got, threads, &got_max);
        if (!took) { /* declined before writing */
            long touched = 0;
            for (int64_t i = 0; i < N * P * O; i++) touched += got[i] != 0x5A5A5A5A5A5A5A5All;
            CHECK(touched == 0, "a declined forward chunk wrote %ld sums", touched);
            break;
        }
        long bad = 0;
        for (int64_t i = 0; i < N * P * O; i++) bad += got[i] != want[i];
        CHECK(bad == 0 && got_max == want_max,
              "%s direct int16 conv N%lld C%lld %lldx%lld O%lld k%lldx%lld pad %lld stride %lld "
              "data %d, %d threads: %ld of %lld sums differ, max %llu (want %llu)",
              g_level, (long long)N, (long long)C, (long long)H, (long long)W, (long long)O,
              (long long)KH, (long long)KW, (long long)pad, (long long)st, kind, threads, bad,
              (long long)(N * P * O), (unsigned long long)got_max,
              (unsigned long long)want_max);
    }
    free(xp);
    free(xu);
    free(w);
    free(want);
    free(wq_raw);
    free(scratch);
    free(got);
    return took;
}

static int check_kernel(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH,
                        int64_t KW, int64_t pad, int kind, uint64_t seed)
{
    return check_kernel_strided(N, C, H, W, O, KH, KW, pad, 1, kind, seed);
}

/* Whether the active level's forward kernel takes every chunk (the AVX2 one: a segment too
 * large for a chain gets a fold per pair) rather than declining full-scale data */
static int fwd_takes_any(void)
{
    return fx_backend_active()->conv.i16_fwd == fx_i16_fwd_direct_avx2;
}

/* the same of the weight gradient (the AVX2 one: an output row too large for a chain gets a
 * fold per pixel pair) */
static int wgrad_takes_any(void)
{
    return fx_backend_active()->conv.i16_wgrad == fx_i16_wgrad_direct_avx2;
}

/* the weight gradient kernel against the exact sums, at strides sh, sw; returns whether it
 * took the chunk */
static int check_wkernel_strided(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                                 int64_t K, int64_t pad, int64_t sh, int64_t sw, int kind,
                                 uint64_t seed)
{
    const fx_conv_geom g = {.N = N, .C = C, .H = H, .W = W, .O = O, .KH = K, .KW = K,
                            .OH = (H + 2 * pad - K) / sh + 1, .OW = (W + 2 * pad - K) / sw + 1,
                            .sh = sh, .sw = sw, .ph = pad, .pw = pad, .dh = 1, .dw = 1};
    CHECK(fx_i16_wgrad_direct_fits(&g, FX_I16_WGRAD_MAX_STRIDE),
          "wgrad C%lld O%lld stride (%lld, %lld): the geometry should fit", (long long)C,
          (long long)O, (long long)sh, (long long)sw);
    const int64_t Hp = H + 2 * pad, Wp = W + 2 * pad, KK = K * K, P = g.OH * g.OW, R = C * KK;
    test_rng r;
    test_rng_seed(&r, seed);
    /* equal values a with a row's bound sqrt(Wp OW) a^2 just inside the chain limit (0.999: the
     * norms are rounded up): a row's products sum to OW a^2, most of the bound, so two rows in
     * one chain wrap. Mixed: every third input row large, every third row of dy too. */
    double a = 0.999 * sqrt((double)((1ll << 31) - (1ll << 16)) / sqrt((double)(Wp * g.OW)));
    const int16_t tight = (int16_t)(a > 32767 ? 32767 : a);
    int16_t *xp = calloc((size_t)(N * C * Hp * Wp), sizeof(int16_t));
    int16_t *dy = malloc(sizeof(int16_t) * (size_t)(N * O * P));
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t x = 0; x < W; x++)
                    xp[((n * C + c) * Hp + h + pad) * Wp + x + pad] =
                        kind == DATA_TIGHT_POS   ? tight
                        : kind == DATA_TIGHT_NEG ? (int16_t)-tight
                        : kind == DATA_SKEW      ? (int16_t)(c % 2 && h >= H / 2 ? tight : 1)
                        : kind == DATA_FULL_MIX  ? (int16_t)(h == H / 2 ? 32767 : tight)
                                                 : draw(&r, kind, 0, h);
    for (int64_t i = 0; i < N * O * P; i++)
        /* past 64 channels (a second tile of channels) only the later ones are tight, so a
         * schedule taken from the first tile's channels wraps */
        dy[i] = kind == DATA_FULL_MIX ? tight
                : kind == DATA_TIGHT_POS || kind == DATA_TIGHT_NEG || kind == DATA_SKEW
                    ? (int16_t)(O <= 64 || i / P % O >= 64 ? tight : tight / 64)
                : kind == DATA_MIXED
                    ? (int16_t)(i / g.OW % 3 == 0 ? 2000 : test_rng_range(&r, -50, 50))
                                     : draw(&r, kind, 0, 0);
    int64_t *want = calloc((size_t)(R * O), sizeof(int64_t));
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t t = 0; t < KK; t++)
                for (int64_t o = 0; o < O; o++) {
                    int64_t s = 0;
                    for (int64_t oh = 0; oh < g.OH; oh++)
                        for (int64_t ow = 0; ow < g.OW; ow++)
                            s += (int64_t)xp[((n * C + c) * Hp + sh * oh + t / K) * Wp + sw * ow +
                                             t % K] *
                                 dy[((n * O + o) * g.OH + oh) * g.OW + ow];
                    want[(c * KK + t) * O + o] += s;
                }
    /* a canary after the scratch the kernel asked for: nothing may be written past it */
    enum { CANARY = 64 };
    const int64_t nscr = fx_i16_wgrad_direct_scratch(&g, N);
    uint32_t *scratch = malloc(sizeof(uint32_t) * (size_t)(nscr + CANARY));
    for (int i = 0; i < CANARY; i++) scratch[nscr + i] = 0xC0DEF00Du;
    int64_t *got = malloc(sizeof(int64_t) * (size_t)(R * O));
    memset(got, 0x5A, sizeof(int64_t) * (size_t)(R * O));
    const int took = g_wgrad(&g, xp, dy, N, scratch, got, 0);
    if (took) {
        /* then added to what is there: twice the sums */
        for (int pass = 1; pass <= 2; pass++) {
            long bad = 0;
            for (int64_t i = 0; i < R * O; i++) bad += got[i] != pass * want[i];
            CHECK(bad == 0, "direct int16 weight gradient N%lld C%lld %lldx%lld O%lld k%lld pad "
                  "%lld stride (%lld, %lld) data %d, %s: %ld of %lld sums differ", (long long)N,
                  (long long)C, (long long)H, (long long)W, (long long)O, (long long)K,
                  (long long)pad, (long long)sh, (long long)sw, kind,
                  pass == 1 ? "stored" : "added", bad, (long long)(R * O));
            if (pass == 1)
                CHECK(g_wgrad(&g, xp, dy, N, scratch, got, 1), "second call declined");
        }
    } else {
        long touched = 0;
        for (int64_t i = 0; i < R * O; i++) touched += got[i] != 0x5A5A5A5A5A5A5A5All;
        CHECK(touched == 0, "a declined weight gradient wrote %ld sums", touched);
    }
    int past = 0;
    for (int i = 0; i < CANARY; i++) past += scratch[nscr + i] != 0xC0DEF00Du;
    CHECK(past == 0, "weight gradient N%lld C%lld O%lld stride (%lld, %lld): %d words written "
          "past its scratch", (long long)N, (long long)C, (long long)O, (long long)sh,
          (long long)sw, past);
    free(xp);
    free(dy);
    free(want);
    free(scratch);
    free(got);
    return took;
}

static int check_wkernel(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t K,
                         int64_t pad, int kind, uint64_t seed)
{
    return check_wkernel_strided(N, C, H, W, O, K, pad, 1, 1, kind, seed);
}

/* fx_i16_row_norms against the exact ceiling of the root: every row count from 0 to 19 (blocks
 * of 8 rows and the tail), lengths 1 to 100 (one load a row up to 32, two up to 64, the loop
 * beyond) and 1024, rows side by side and rows further apart (the weight gradient takes an
 * input row's norm from its values between the padding columns), random values over the whole
 * int16 range, rows at the extremes (all -32768, all 32767), and rows whose sum of squares is
 * a perfect square, one above or one below one; the values between the rows are the largest
 * magnitude, so that a row read past its end or at the wrong stride gives a larger norm */
static void check_row_norms(uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    static const int64_t lens[] = {1, 2, 3, 7, 14, 18, 31, 32, 33, 34, 40, 64, 65, 100, 1024};
    static const int64_t gaps[] = {0, 2, 5};
    int16_t *p = malloc(sizeof(int16_t) * 20 * 1029);
    uint32_t out[20];
    long bad = 0, checked = 0;
    for (size_t gi = 0; gi < sizeof gaps / sizeof gaps[0]; gi++) {
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (int64_t rows = 0; rows < 20; rows++) {
                const int64_t len = lens[li], ld = len + gaps[gi];
                for (int64_t i = 0; i < 20 * ld; i++) p[i] = -32768;
                for (int64_t i = 0; i < rows; i++)
                    for (int64_t j = 0; j < len; j++) {
                        const int mode = (int)(i % 5);
                        p[i * ld + j] = mode == 0   ? (int16_t)test_rng_range(&r, -32768, 32767)
                                         : mode == 1 ? (int16_t)(i % 2 ? -32768 : 32767)
                                         : mode == 2 ? (int16_t)(j == 0 ? 3 : j == 1 ? 4 : 0)
                                         : mode == 3 ? (int16_t)(j == 0   ? 24
                                                                 : j == 1 ? 7
                                                                 : j == 2 ? 1
                                                                          : 0)
                                                     : (int16_t)(j == 0 ? 181 : j == 1 ? 0 : 0);
                    }
                /* mode 2: 3^2 + 4^2 = 5^2; mode 3: 24^2 + 7^2 + 1 = 25^2 + 1; mode 4: 181^2 =
                 * 32761, and with a length of at least 2 the row below gets the second value 0 */
                g_row_norms(p, rows, len, ld, out);
                for (int64_t i = 0; i < rows; i++) {
                    uint64_t sq = 0;
                    for (int64_t j = 0; j < len; j++)
                        sq += (uint64_t)((int64_t)p[i * ld + j] * p[i * ld + j]);
                    uint64_t want = (uint64_t)sqrt((double)sq);
                    while (want * want < sq) want++;
                    while (want > 0 && (want - 1) * (want - 1) >= sq) want--;
                    bad += out[i] != want;
                    checked++;
                }
            }
    }
    CHECK(bad == 0, "%s row norms: %ld of %ld differ from the exact ceiling", g_level, bad,
          checked);
    free(p);
}

static tensor_t *int_tensor(fmt_t f, const int64_t *shape, int kind, int is_w, int e,
                            test_rng *r)
{
    tensor_t *t = tensor_new(f, 4, shape);
    const int64_t n = tensor_numel(t);
    int16_t *v = malloc(sizeof(int16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = draw(r, kind, is_w, i / shape[3] % shape[2]);
    CHECK_STATUS(tensor_set_exp(t, e), FX_OK);
    CHECK_STATUS(tensor_set_raw(t, v), FX_OK);
    free(v);
    return t;
}

/* tensor_conv2d and the input gradient with the route on and off: the same mantissas and
 * exponent (the route's sums are the exact ones); the route ran (or declined) as expected */
static void check_ops(fmt_t f, int64_t N, int64_t C, int64_t H, int64_t O, int64_t K,
                      int64_t pad, int kind, int expect_direct, uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    const int64_t OHW = H + 2 * pad - K + 1;
    const int64_t xs[4] = {N, C, H, H}, ws[4] = {O, C, K, K}, ys[4] = {N, O, OHW, OHW};
    tensor_t *x = int_tensor(f, xs, kind, 0, -14, &r), *w = int_tensor(f, ws, kind, 1, -15, &r);
    /* the weights' kind (mixed is 6000); normal beside a full-scale row, whose weight gradient
     * rows then stay within a chain except those that reach the row */
    tensor_t *dy = int_tensor(f, ys, kind == DATA_FULL_ROW ? DATA_NORMAL : kind, 1, -12, &r);
    const int64_t ny = N * O * OHW * OHW, nx = N * C * H * H;
    int16_t *y_ref = malloc(sizeof(int16_t) * (size_t)ny);
    int16_t *y_got = malloc(sizeof(int16_t) * (size_t)ny);
    int16_t *dx_ref = malloc(sizeof(int16_t) * (size_t)nx);
    int16_t *dx_got = malloc(sizeof(int16_t) * (size_t)nx);
    const int64_t nw = O * C * K * K;
    int16_t *dw_ref = malloc(sizeof(int16_t) * (size_t)nw);
    int16_t *dw_got = malloc(sizeof(int16_t) * (size_t)nw);
    int ey_ref = 0, edx_ref = 0, edw_ref = 0;
    /* pass 0 runs the GEMM the process chose (the AMX kernel where it was measured in or
     * forced: a cross-kernel comparison on such a CPU); the route's passes run with the AMX
     * kernel off, which would otherwise take these products ahead of the route */
    const int forced_prev = fx_gemm_i16_forced_kernel();
    const int amx_auto_prev = fx_gemm_i16_amx_auto();
    for (int pass = 0; pass < 3; pass++) {
        /* pass 0: the GEMM; 1 and 2: the route at 1 and 2 threads */
        fx_i16_fwd_direct_set_enabled(pass > 0);
        fx_i16_wgrad_direct_set_enabled(pass > 0);
        if (pass == 1) {
            fx_gemm_i16_force_kernel(FX_GEMM_I16_KERNEL_AUTO);
            fx_gemm_i16_set_amx_auto(0);
        }
        flexpoint_set_num_threads(pass == 2 ? 2 : 1);
        tensor_t *y = tensor_new(FMT_DFP16, 4, ys), *dx = tensor_new(FMT_DFP16, 4, xs);
        tensor_t *dw = tensor_new(FMT_DFP16, 4, ws);
        const long long calls = fx_i16_fwd_direct_calls(), declined = fx_i16_fwd_direct_declined();
        const long long paired = fx_i16_fwd_direct_paired();
        const long long wcalls = fx_i16_wgrad_direct_calls();
        const long long wdeclined = fx_i16_wgrad_direct_declined();
        const long long wpaired = fx_i16_wgrad_direct_paired();
        CHECK_STATUS(tensor_conv2d(y, x, w, 1, 1, (int)pad, (int)pad, 1, 1), FX_OK);
        CHECK_STATUS(tensor_conv2d_backward_input(dx, dy, w, 1, 1, (int)pad, (int)pad, 1, 1),
                     FX_OK);
        CHECK_STATUS(tensor_conv2d_backward_weight(dw, x, dy, 1, 1, (int)pad, (int)pad, 1, 1),
                     FX_OK);
        const int wfits = OHW % 2 == 0 && fx_backend_active()->conv.i16_wgrad != NULL;
        if (pass > 0) {
            /* a full-scale row: taken with folds per pair by the AVX2 kernel, declined by the
             * others */
            const int row = kind == DATA_FULL_ROW;
            const int expect_w = expect_direct && wfits && (!row || wgrad_takes_any());
            CHECK((fx_i16_wgrad_direct_calls() > wcalls) == expect_w,
                  "%s weight gradient C%lld O%lld data %d: the direct route %s", fmt_name(f),
                  (long long)C, (long long)O, kind, expect_w ? "did not run" : "ran");
            if (kind == DATA_FULL && fx_backend_active()->conv.i16_wgrad)
                CHECK(fx_i16_wgrad_direct_declined() > wdeclined,
                      "full-scale data: the direct weight gradient did not decline");
            if (row && expect_w)
                CHECK(fx_i16_wgrad_direct_paired() > wpaired &&
                          fx_i16_wgrad_direct_declined() == wdeclined,
                      "a full-scale row: the AVX2 weight gradient did not take it with folds "
                      "per pair");
        }
        if (pass > 0 && kind != DATA_FULL_ROW) {
            CHECK((fx_i16_fwd_direct_calls() > calls) == expect_direct,
                  "%s conv C%lld O%lld data %d: the direct route %s", fmt_name(f), (long long)C,
                  (long long)O, kind, expect_direct ? "did not run" : "ran");
            if (kind == DATA_FULL)
                CHECK(fx_i16_fwd_direct_declined() > declined,
                      "full-scale data: the direct route did not decline");
        }
        if (pass > 0 && kind == DATA_FULL_ROW) {
            /* the forward pass meets the full-scale row; the input gradient (a forward pass of
             * dy, which has none) may run on the same kernel, so the calls do not tell */
            if (fwd_takes_any())
                CHECK(fx_i16_fwd_direct_paired() > paired &&
                          fx_i16_fwd_direct_declined() == declined,
                      "a full-scale row: the AVX2 kernel did not take it with folds per pair");
            else
                CHECK(fx_i16_fwd_direct_declined() > declined,
                      "a full-scale row: the direct route did not decline");
        }
        CHECK_STATUS(tensor_get_raw(y, pass ? y_got : y_ref), FX_OK);
        CHECK_STATUS(tensor_get_raw(dx, pass ? dx_got : dx_ref), FX_OK);
        CHECK_STATUS(tensor_get_raw(dw, pass ? dw_got : dw_ref), FX_OK);
        if (pass == 0) {
            ey_ref = tensor_exp(y);
            edx_ref = tensor_exp(dx);
            edw_ref = tensor_exp(dw);
        } else {
            long badw = 0;
            for (int64_t i = 0; i < nw; i++) badw += dw_got[i] != dw_ref[i];
            CHECK(badw == 0 && tensor_exp(dw) == edw_ref,
                  "%s weight gradient N%lld C%lld O%lld k%lld data %d pass %d: %ld values "
                  "differ, exp %d (GEMM %d)", fmt_name(f), (long long)N, (long long)C,
                  (long long)O, (long long)K, kind, pass, badw, tensor_exp(dw), edw_ref);
            long bad = 0, badx = 0;
            for (int64_t i = 0; i < ny; i++) bad += y_got[i] != y_ref[i];
            for (int64_t i = 0; i < nx; i++) badx += dx_got[i] != dx_ref[i];
            CHECK(bad == 0 && tensor_exp(y) == ey_ref,
                  "%s conv N%lld C%lld O%lld k%lld data %d pass %d: %ld outputs differ, exp %d "
                  "(GEMM %d)", fmt_name(f), (long long)N, (long long)C, (long long)O, (long long)K,
                  kind, pass, bad, tensor_exp(y), ey_ref);
            CHECK(badx == 0 && tensor_exp(dx) == edx_ref,
                  "%s input gradient N%lld C%lld O%lld k%lld data %d pass %d: %ld values differ, "
                  "exp %d (GEMM %d)", fmt_name(f), (long long)N, (long long)C, (long long)O,
                  (long long)K, kind, pass, badx, tensor_exp(dx), edx_ref);
        }
        tensor_free(y);
        tensor_free(dx);
        tensor_free(dw);
    }
    fx_i16_fwd_direct_set_enabled(1);
    fx_i16_wgrad_direct_set_enabled(1);
    fx_gemm_i16_force_kernel(forced_prev);
    fx_gemm_i16_set_amx_auto(amx_auto_prev);
    flexpoint_set_num_threads(1);
    tensor_free(x);
    tensor_free(w);
    tensor_free(dy);
    free(y_ref);
    free(y_got);
    free(dx_ref);
    free(dx_got);
    free(dw_ref);
    free(dw_got);
}

/* The strided input gradient by phases against the col2im route (phases off): the same
 * mantissas and exponent at 1 and 2 threads; the route ran where it fits and the data allows,
 * and not otherwise (declined on full-scale data, or a phase the kernel cannot take) */
static void check_strided_dgrad(fmt_t f, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                                int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph,
                                int64_t pw, int kind, int expect_route, uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    const int64_t OH = (H + 2 * ph - KH) / sh + 1, OW = (W + 2 * pw - KW) / sw + 1;
    const int64_t xs[4] = {N, C, H, W}, ws[4] = {O, C, KH, KW}, ys[4] = {N, O, OH, OW};
    const int corner = kind == DATA_CORNER;
    if (corner) kind = DATA_SMALL;
    tensor_t *w = int_tensor(f, ws, kind, 1, -15, &r), *dy = int_tensor(f, ys, kind, 1, -12, &r);
    const int64_t nx = N * C * H * W;
    if (corner) {
        /* one large dy value at the first pixel and one large weight at tap (0, 0): their
         * product lands in x's padding (row and column -1), while every dx element takes at
         * most 1000: the route's maximum must be that of dx, not of its phases' outputs */
        const int64_t nw = O * C * KH * KW, ny = N * O * OH * OW;
        int16_t *wv = calloc((size_t)nw, sizeof(int16_t)), *dv = calloc((size_t)ny, sizeof(int16_t));
        for (int64_t c = 0; c < C; c++) {
            wv[c * KH * KW] = 1000;
            wv[c * KH * KW + KW + 1] = 1;
        }
        dv[0] = 1000;
        CHECK_STATUS(tensor_set_raw(w, wv), FX_OK);
        CHECK_STATUS(tensor_set_raw(dy, dv), FX_OK);
        free(wv);
        free(dv);
    }
    int16_t *ref = malloc(sizeof(int16_t) * (size_t)nx), *got = malloc(sizeof(int16_t) * (size_t)nx);
    int e_ref = 0;
    for (int pass = 0; pass < 3; pass++) {
        /* pass 0: col2im; 1 and 2: the phases at 1 and 2 threads */
        fx_conv_dgrad_phases_set_enabled(pass > 0);
        flexpoint_set_num_threads(pass == 2 ? 2 : 1);
        tensor_t *dx = tensor_new(FMT_DFP16, 4, xs);
        const int64_t runs = fx_conv_dgrad_phases_runs();
        CHECK_STATUS(tensor_conv2d_backward_input(dx, dy, w, (int)sh, (int)sw, (int)ph, (int)pw,
                                                  1, 1),
                     FX_OK);
        CHECK_STATUS(tensor_get_raw(dx, pass ? got : ref), FX_OK);
        if (pass == 0) {
            e_ref = tensor_exp(dx);
        } else {
            long bad = 0;
            for (int64_t i = 0; i < nx; i++) bad += got[i] != ref[i];
            CHECK(bad == 0 && tensor_exp(dx) == e_ref,
                  "%s strided input gradient N%lld C%lld %lldx%lld O%lld k%lldx%lld s%lldx%lld "
                  "p%lldx%lld data %d, %d threads: %ld of %lld values differ, exp %d (col2im %d)",
                  fmt_name(f), (long long)N, (long long)C, (long long)H, (long long)W,
                  (long long)O, (long long)KH, (long long)KW, (long long)sh, (long long)sw,
                  (long long)ph, (long long)pw, kind, pass, bad, (long long)nx, tensor_exp(dx),
                  e_ref);
            CHECK((fx_conv_dgrad_phases_runs() > runs) == expect_route,
                  "strided input gradient C%lld O%lld k%lldx%lld s%lldx%lld data %d: the phases "
                  "%s", (long long)C, (long long)O, (long long)KH, (long long)KW, (long long)sh,
                  (long long)sw, kind, expect_route ? "did not run" : "ran");
        }
        tensor_free(dx);
    }
    fx_conv_dgrad_phases_set_enabled(1);
    flexpoint_set_num_threads(1);
    tensor_free(w);
    tensor_free(dy);
    free(ref);
    free(got);
}

/* Writes into one dx by phases, each against the same write into a twin dx by col2im (phases
 * off) that has seen the same writes: the same mantissas and exponent every time (a write's
 * exponent depends only on the sums, and FLEX16_5's Autoflex state only on the writes before).
 * Five writes at one scale, a jump of 2^6 and back, one more, and a jump of 2^12: the phases
 * round each chunk at the guessed exponent while in cache; once the guesses are steady they
 * keep no stage, and a DFP16 miss then runs the op again (guessing the exact exponent the
 * write asked for, so again without a stage). A DFP16 dx whose exponent moved lately is also
 * rounded at the exponent it left, which the way back finds; the jump of 2^12 after it,
 * neither, runs the op again, without a stage. FLEX16_5's jumps saturate at the predicted
 * exponent and are recomputed (its write asks twice: a second run with a stage). */
static void check_strided_sequence(fmt_t f, int64_t N, int threads, uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    flexpoint_set_num_threads(threads);
    const int64_t ws[4] = {32, 16, 3, 3}, ys[4] = {N, 32, 8, 8}, xs[4] = {N, 16, 16, 16};
    const int64_t nw = 32 * 16 * 9, ny = N * 32 * 64, nx = N * 16 * 256;
    float *wv = malloc(sizeof(float) * (size_t)nw), *yv = malloc(sizeof(float) * (size_t)ny);
    for (int64_t i = 0; i < nw; i++) wv[i] = (float)test_rng_normal(&r);
    for (int64_t i = 0; i < ny; i++) yv[i] = (float)test_rng_normal(&r);
    tensor_t *w = tensor_new(f, 4, ws), *dy = tensor_new(f, 4, ys), *dybig = tensor_new(f, 4, ys);
    tensor_t *dyhuge = tensor_new(f, 4, ys);
    CHECK_STATUS(tensor_from_f32(w, wv), FX_OK);
    CHECK_STATUS(tensor_from_f32(dy, yv), FX_OK);
    for (int64_t i = 0; i < ny; i++) yv[i] *= 64.0f;
    CHECK_STATUS(tensor_from_f32(dybig, yv), FX_OK);
    for (int64_t i = 0; i < ny; i++) yv[i] *= 64.0f;
    CHECK_STATUS(tensor_from_f32(dyhuge, yv), FX_OK);
    enum { NWRITES = 9, JUMP = 5 };
    const tensor_t *in[NWRITES] = {dy, dy, dy, dy, dy, dybig, dy, dy, dyhuge};
    /* DFP16, per write: the early rounding reused, found at the second exponent, the op run
     * again (never with a stage) */
    const int want_reused[NWRITES] = {-1, 1, 1, 1, 1, 1, 1, 1, 1};
    const int want_alt[NWRITES] = {-1, 0, 0, 0, 0, 0, 1, 0, 0};
    const int want_redone[NWRITES] = {-1, 0, 0, 0, 0, 1, 0, 0, 1};
    tensor_t *dx = tensor_new(f, 4, xs), *twin = tensor_new(f, 4, xs);
    int16_t *a = malloc(sizeof(int16_t) * (size_t)nx), *b = malloc(sizeof(int16_t) * (size_t)nx);
    int64_t jump_redone = 0, jump_staged = 0;
    for (int wi = 0; wi < NWRITES; wi++) {
        const int steady = fx_write_shared_guess_steady(dx);
        const int64_t runs0 = fx_conv_dgrad_phases_runs(), reused0 = fx_conv_early_rounding_reused();
        const int64_t redone0 = fx_conv_stage_redone(), staged0 = fx_conv_redone_staged();
        const int64_t alt0 = fx_conv_alt_rounding_reused();
        fx_conv_dgrad_phases_set_enabled(1);
        CHECK_STATUS(tensor_conv2d_backward_input(dx, in[wi], w, 2, 2, 1, 1, 1, 1), FX_OK);
        const int64_t runs = fx_conv_dgrad_phases_runs() - runs0;
        const int64_t reused = fx_conv_early_rounding_reused() - reused0;
        const int64_t redone = fx_conv_stage_redone() - redone0;
        const int64_t staged = fx_conv_redone_staged() - staged0;
        const int64_t alt = fx_conv_alt_rounding_reused() - alt0;
        fx_conv_dgrad_phases_set_enabled(0);
        CHECK_STATUS(tensor_conv2d_backward_input(twin, in[wi], w, 2, 2, 1, 1, 1, 1), FX_OK);
        fx_conv_dgrad_phases_set_enabled(1);
        CHECK_STATUS(tensor_get_raw(dx, a), FX_OK);
        CHECK_STATUS(tensor_get_raw(twin, b), FX_OK);
        long bad = 0;
        for (int64_t i = 0; i < nx; i++) bad += a[i] != b[i];
        CHECK(bad == 0 && tensor_exp(dx) == tensor_exp(twin),
              "%s %s strided write %d: %ld values differ from col2im's, exp %d (col2im %d)",
              g_level, fmt_name(f), wi, bad, tensor_exp(dx), tensor_exp(twin));
        CHECK(runs == 1 + redone, "%s %s strided write %d: the phases ran %lld times, %lld again",
              g_level, fmt_name(f), wi, (long long)runs, (long long)redone);
        if (wi == JUMP) {
            jump_redone = redone;
            jump_staged = staged;
        }
        if (f != FMT_DFP16) {
            /* from the second write on, Autoflex's prediction is the guess, and at one scale
             * the write keeps it */
            CHECK(wi < 1 || wi > 4 || (reused == 1 && redone == 0),
                  "%s flex16_5 strided write %d: the early rounding reused %lld times, the op "
                  "run again %lld times", g_level, wi, (long long)reused, (long long)redone);
            continue;
        }
        CHECK((wi != 4 && wi != JUMP) || steady, "%s dfp16 strided write %d: guesses not steady",
              g_level, wi);
        CHECK(wi == 0 || (reused == want_reused[wi] && alt == want_alt[wi] &&
                          redone == want_redone[wi] && staged == 0),
              "%s dfp16 strided write %d (steady %d): the early rounding reused %lld times "
              "(%lld at the second exponent), the op run again %lld times, %lld with a stage",
              g_level, wi, steady, (long long)reused, (long long)alt, (long long)redone,
              (long long)staged);
    }
    if (f == FMT_FLEX16_5)
        CHECK(jump_redone >= 1 && jump_staged == jump_redone,
              "%s flex16_5 strided jump: run again %lld times, %lld with a stage (want a "
              "recompute from a stage)", g_level, (long long)jump_redone, (long long)jump_staged);
    flexpoint_set_num_threads(1);
    tensor_free(dx);
    tensor_free(twin);
    tensor_free(w);
    tensor_free(dy);
    tensor_free(dybig);
    tensor_free(dyhuge);
    free(a);
    free(b);
    free(wv);
    free(yv);
}

static void check_strided(uint64_t *seedp)
{
    uint64_t seed = *seedp;
    /* N, C, H, W, O, KH, KW, sh, sw, ph, pw, whether the phases fit: ResNet-20's stride-2
     * layers and projections (3 x 3 into four phases of 2 x 2 down to 1 x 1; 1 x 1 into one
     * phase and three of zeros), odd sizes (rows and columns no product reaches), 5 x 5, 2 x 2
     * and 4 x 4 kernels, stride 3 (a kernel narrower than the stride: phases without taps),
     * strides in one axis only, padding up to a whole kernel, a batch of several chunks; and
     * shapes the route leaves to col2im (dy with 4 channels or dx with 8, which a phase cannot
     * take; dy with 64, where col2im's GEMM is deep enough: ResNet-20's stage-3 3 x 3
     * opener, except on the AMX kernel, or where the level rounds stride-2 chunks in its
     * register tiles' epilogue and dx's exponent can be guessed (a DFP16 dx, as here, always
     * can: its current one); its 1 x 1 projection, one phase with taps, takes the phases) */
    static const int64_t shapes[][12] = {
        {2, 16, 32, 32, 32, 3, 3, 2, 2, 1, 1, 1}, {2, 16, 32, 32, 32, 1, 1, 2, 2, 0, 0, 1},
        {2, 32, 16, 16, 48, 3, 3, 2, 2, 1, 1, 1}, {2, 32, 16, 16, 48, 1, 1, 2, 2, 0, 0, 1},
        {2, 16, 9, 11, 24, 3, 3, 2, 2, 1, 1, 1},  {2, 20, 13, 10, 16, 5, 5, 2, 2, 2, 2, 1},
        {2, 16, 10, 10, 16, 2, 2, 2, 2, 0, 0, 1}, {2, 16, 12, 12, 16, 4, 4, 2, 2, 1, 1, 1},
        {2, 17, 14, 14, 9, 3, 3, 3, 3, 1, 1, 1},  {2, 16, 12, 12, 8, 1, 1, 3, 3, 0, 0, 1},
        {2, 16, 10, 12, 16, 3, 3, 2, 1, 1, 1, 1}, {2, 16, 11, 9, 16, 3, 3, 1, 2, 1, 1, 1},
        {2, 16, 8, 8, 16, 3, 3, 2, 2, 3, 3, 1},   {20, 16, 12, 12, 32, 3, 3, 2, 2, 1, 1, 1},
        {2, 16, 12, 12, 4, 3, 3, 2, 2, 1, 1, 0},  {2, 8, 12, 12, 32, 3, 3, 2, 2, 1, 1, 0},
        {2, 32, 16, 16, 64, 3, 3, 2, 2, 1, 1, 0}, {2, 32, 16, 16, 64, 1, 1, 2, 2, 0, 0, 1}};
    static const fmt_t fmts[2] = {FMT_FLEX16_5, FMT_DFP16};
    /* where the phases run on the AMX kernel (src/nn/conv_dgrad_phases.c), or the level has
     * the stride-2 epilogue route (at stride 2 with even H and W), they also take dy with 64
     * channels, which they then compute faster than col2im */
    const fx_backend *be = fx_backend_active();
    const int amx_phases = be->conv.i16_fwd_amx && fx_gemm_i16_amx_on();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int kind = DATA_SMALL; kind <= DATA_MIXED; kind++) {
            const int64_t *c = shapes[s];
            const int s2_epilogue = be->conv.i16_dgrad_s2_round && c[7] == 2 && c[8] == 2 &&
                                    c[2] % 2 == 0 && c[3] % 2 == 0;
            const int expect = (int)c[11] || ((amx_phases || s2_epilogue) && c[4] == 64);
            check_strided_dgrad(fmts[(s + (size_t)kind) % 2], c[0], c[1], c[2], c[3], c[4], c[5],
                                c[6], c[7], c[8], c[9], c[10], kind, expect, seed++);
        }
    /* the largest phase output falls into the padding (FLEX16_5: its write's maximum too) */
    check_strided_dgrad(FMT_DFP16, 1, 16, 8, 8, 8, 3, 3, 2, 2, 1, 1, DATA_CORNER, 1, seed++);
    check_strided_dgrad(FMT_FLEX16_5, 1, 16, 8, 8, 8, 3, 3, 2, 2, 1, 1, DATA_CORNER, 1, seed++);
    /* full scale: the vpdpwssd and vpmaddwd kernels decline and col2im takes the op; the AMX
     * kernel, where the phases run on it (any data: it never declines), takes it */
    check_strided_dgrad(FMT_DFP16, 2, 16, 12, 12, 32, 3, 3, 2, 2, 1, 1, DATA_FULL, amx_phases,
                        seed++);
    /* one thread and one chunk per sample; two threads and a batch of several chunks, whose
     * sums each thread gathers into its own chunk buffer */
    for (int f = 0; f < 2; f++) {
        check_strided_sequence(fmts[f], 2, 1, seed++);
        check_strided_sequence(fmts[f], 24, 2, seed++);
    }
    *seedp = seed;
}

/* The forward kernel of the active backend: the kernel alone, then the ops with the route on
 * and off. */
static void check_forward(uint64_t *seedp)
{
    uint64_t seed = *seedp;
    /* shapes: the CNN's conv2 and its input gradient (7-pixel tiles, 2 vectors), ResNet-20's
     * 3x3 layers (16-pixel tiles of one vector; 8-pixel tiles of 2), odd C (partial segment,
     * odd last pair), O with a partial vector (20, 33, 40, 70), partial last tiles (OW 10, 11),
     * rows of 40 and 35 pixels (the AVX-512 pair copy's 32-value vectors and a masked rest,
     * padded on both sides or not at all), rows of 17 and 8 (the AVX-512 9-pixel tile: 9 + 8,
     * and one tile with a spare row) */
    static const int64_t shapes[][7] = {
        /* N, C, H, W, O, K, pad */
        {2, 32, 14, 14, 64, 5, 2}, {2, 64, 14, 14, 32, 5, 2}, {2, 16, 16, 16, 16, 3, 1},
        {2, 32, 8, 8, 32, 3, 1},   {2, 64, 8, 8, 64, 3, 1},   {3, 9, 10, 10, 40, 3, 1},
        {2, 12, 7, 11, 20, 3, 0},  {2, 17, 9, 9, 33, 3, 1},   {2, 40, 6, 6, 70, 1, 0},
        {1, 8, 12, 12, 16, 5, 2},  {1, 16, 5, 40, 16, 3, 1},  {1, 9, 4, 35, 16, 3, 0},
        {2, 16, 17, 17, 16, 3, 1}, {2, 16, 8, 8, 16, 3, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int kind = DATA_SMALL; kind <= DATA_SKEW; kind++) {
            const int64_t *c = shapes[s];
            const int took =
                check_kernel(c[0], c[1], c[2], c[3], c[4], c[5], c[5], c[6], kind, seed++);
            CHECK(took, "data %d, shape %zu: the kernel declined data it can take", kind, s);
        }
    /* rectangular kernels */
    CHECK(check_kernel(2, 12, 7, 11, 20, 3, 5, 1, DATA_NORMAL, seed++), "3x5 kernel declined");
    /* strided: ResNet-20's stride-2 3x3 layers (16 -> 32 channels: a pixel stride of 16 words;
     * 32 -> 64: 32 words), a 2x2 kernel at stride 2, 64 channels at stride 2 (the any-stride
     * tiles), stride 3 with a 5x5 kernel, tiles with spare rows, near-limit data (a 1x1
     * projection at stride 2 does not fit: it stays on the GEMM) */
    static const int64_t strided[][8] = {
        /* N, C, H, W, O, K, pad, stride */
        {2, 16, 16, 16, 32, 3, 1, 2}, {2, 32, 8, 8, 64, 3, 1, 2}, {3, 16, 16, 16, 32, 2, 0, 2},
        {2, 64, 10, 10, 64, 3, 1, 2}, {2, 12, 17, 17, 20, 5, 2, 3}, {2, 9, 11, 13, 40, 3, 1, 2}};
    for (size_t s = 0; s < sizeof strided / sizeof strided[0]; s++)
        for (int kind = DATA_SMALL; kind <= DATA_SKEW; kind++) {
            const int64_t *c = strided[s];
            CHECK(check_kernel_strided(c[0], c[1], c[2], c[3], c[4], c[5], c[5], c[6], c[7], kind,
                                       seed++),
                  "data %d, strided shape %zu: the kernel declined data it can take", kind, s);
        }
    /* full scale: one segment alone may wrap, so the chunk is declined (the AVX2 kernel too:
     * every segment would take a fold per pair, more than FX_I16_PAIRED_MAX_SHARE allows) */
    CHECK(!check_kernel(2, 32, 8, 8, 32, 3, 3, 1, DATA_FULL, seed++),
          "full-scale data: the kernel took a chunk that may wrap");
    /* one full-scale row: the AVX2 kernel takes it with a fold after each of its segments'
     * pairs, and its sums are exact (check_kernel compares), also where those segments sit
     * right after chains that reach the bound; the others decline it */
    {
        const long long paired = fx_i16_fwd_direct_paired();
        const int any = fwd_takes_any();
        CHECK(check_kernel(2, 32, 8, 8, 64, 3, 3, 1, DATA_FULL_MIX, seed++) == any,
              "a full-scale row: the kernel %s", any ? "declined" : "took it");
        CHECK(check_kernel(2, 23, 9, 9, 33, 3, 3, 1, DATA_FULL_MIX, seed++) == any,
              "a full-scale row, odd C and O: the kernel %s", any ? "declined" : "took it");
        CHECK(check_kernel_strided(2, 32, 12, 12, 64, 3, 3, 1, 2, DATA_FULL_MIX, seed++) == any,
              "a full-scale row, stride 2: the kernel %s", any ? "declined" : "took it");
        CHECK(any ? fx_i16_fwd_direct_paired() - paired >= 3 : fx_i16_fwd_direct_paired() == paired,
              "a full-scale row: %lld chunks counted as taken with folds per pair",
              fx_i16_fwd_direct_paired() - paired);
    }
    static const fmt_t fmts[2] = {FMT_FLEX16_5, FMT_DFP16};
    for (int f = 0; f < 2; f++) {
        check_ops(fmts[f], 3, 32, 14, 64, 5, 2, DATA_NORMAL, 1, seed++);
        check_ops(fmts[f], 2, 16, 16, 16, 3, 1, DATA_MIXED, 1, seed++);
    }
    check_ops(FMT_DFP16, 2, 17, 9, 33, 3, 1, DATA_SMALL, 1, seed++); /* odd OW: GEMM dW */
    check_ops(FMT_DFP16, 3, 8, 10, 48, 3, 1, DATA_NORMAL, 1, seed++);
    check_ops(FMT_DFP16, 2, 32, 8, 32, 3, 1, DATA_FULL, 0, seed++);
    /* a full-scale input row among 64 (the AVX2 kernels take it with folds per pair) */
    for (int f = 0; f < 2; f++) check_ops(fmts[f], 2, 16, 64, 16, 3, 1, DATA_FULL_ROW, 1, seed++);
    /* a batch whose weight gradient the direct route cuts into chunks of several samples (its
     * own working set sizes them, conv2d.c: 40 samples in chunks of 3 here) */
    check_ops(FMT_DFP16, 40, 8, 10, 16, 3, 1, DATA_NORMAL, 1, seed++);
    /* fewer than 8 input channels: the forward pass folded (conv_fold.h), the CNN's first
     * layer (one channel, 5 x 5, into 8 channels with 3 of zeros), ResNet-20's (3 channels,
     * 3 x 3: 9 channels, a partial segment), no padding (columns dropped at both ends), and
     * on full-scale data the fold declined into the GEMM */
    for (int f = 0; f < 2; f++) {
        check_ops(fmts[f], 3, 1, 28, 32, 5, 2, DATA_NORMAL, 1, seed++);
        check_ops(fmts[f], 2, 3, 12, 16, 3, 1, DATA_MIXED, 1, seed++);
    }
    check_ops(FMT_DFP16, 2, 2, 11, 24, 3, 0, DATA_NORMAL, 1, seed++);
    check_ops(FMT_FLEX16_5, 2, 1, 9, 16, 2, 1, DATA_TIGHT_POS, 1, seed++);
    check_ops(FMT_DFP16, 2, 1, 12, 32, 5, 2, DATA_FULL, 0, seed++);
    *seedp = seed;
}

/* The levels' copies of an unpadded image (fx_i16_fwd_copy_image_avx2 through its pair planes,
 * fx_i16_fwd_copy_image_avx512 in one pass) against the portable copy of the padded one: the
 * same pair words and row norms, nothing written past either buffer or the AVX2 scratch. Where
 * the CPU has AVX512_BF16, bf16's copy (fx_bf16_pair_nhwc: Cp words a pixel, the same pass without
 * norms) against the portable copy's first Cp words. Channel counts with odd pairs, partial and
 * several segments; widths below, at and across the vectors' 8 and 16 pixels; paddings on one
 * side only; data at full scale, -32768 everywhere (a pair's squares 2^31, a segment's 2^33),
 * values whose segment sums straddle the AVX-512 sums' saturation at 2^31 - 1 (the exact
 * re-sum), and small values. */
static void check_copy(int avx512, uint64_t seed)
{
    static const int64_t cs[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 70};
    static const int64_t hw[][2] = {{1, 1}, {3, 5}, {7, 7}, {8, 8}, {14, 14}, {15, 17},
                                    {16, 16}, {32, 32}, {5, 40}};
    static const int64_t pads[][2] = {{0, 0}, {1, 1}, {2, 0}, {0, 3}, {2, 2}};
    enum { GUARD = 64 };
    const uint32_t canary = 0xA5A5A5A5u;
    test_rng r;
    test_rng_seed(&r, seed);
    long bad_words = 0, bad_norms = 0, bad_bf16 = 0, overruns = 0, cases = 0, saturating = 0;
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
        for (size_t hi = 0; hi < sizeof hw / sizeof hw[0]; hi++)
            for (size_t pi = 0; pi < sizeof pads / sizeof pads[0]; pi++)
                for (int kind = 0; kind < 4; kind++) {
                    const int64_t C = cs[ci], H = hw[hi][0], W = hw[hi][1];
                    const int64_t ph = pads[pi][0], pw = pads[pi][1];
                    const fx_conv_geom g = {.N = 1, .C = C, .H = H, .W = W, .O = 16, .KH = 1,
                                            .KW = 1, .OH = H + 2 * ph, .OW = W + 2 * pw,
                                            .sh = 1, .sw = 1, .ph = ph, .pw = pw, .dh = 1,
                                            .dw = 1};
                    const int64_t Hp = H + 2 * ph, Wp = W + 2 * pw, HW = Hp * Wp;
                    const int64_t Cp = (C + 1) / 2, Cpp = fx_i16_pairs(C), G = fx_i16_groups(C);
                    int16_t *xu = malloc(sizeof(int16_t) * (size_t)(C * H * W));
                    int16_t *xp = calloc((size_t)(C * HW), sizeof(int16_t));
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t h = 0; h < H; h++)
                            for (int64_t x = 0; x < W; x++)
                                xu[(c * H + h) * W + x] = xp[(c * Hp + h + ph) * Wp + x + pw] =
                                    kind == 0   ? (int16_t)test_rng_range(&r, -32768, 32767)
                                    : kind == 1 ? (int16_t)-32768
                                    : kind == 2 ? (int16_t)((test_rng_range(&r, 0, 1) ? 1 : -1) *
                                                            test_rng_range(&r, 16000, 16800))
                                                : (int16_t)test_rng_range(&r, -300, 300);
                    uint32_t *want = malloc(sizeof(uint32_t) * (size_t)(HW * Cpp));
                    uint32_t *want_rn = malloc(sizeof(uint32_t) * (size_t)(Hp * G));
                    fx_i16_fwd_copy_image(&g, xp, want, want_rn);
                    const int64_t nq = HW * Cpp + GUARD, nr = Hp * G + GUARD;
                    const int64_t npl = Cpp * HW + GUARD, nsq = G * HW + GUARD / 2;
                    uint32_t *got = malloc(sizeof(uint32_t) * (size_t)nq);
                    uint32_t *got_rn = malloc(sizeof(uint32_t) * (size_t)nr);
                    uint32_t *planes = malloc(sizeof(uint32_t) * (size_t)npl);
                    uint64_t *sq = malloc(sizeof(uint64_t) * (size_t)nsq);
                    for (int64_t i = 0; i < nq; i++) got[i] = canary;
                    for (int64_t i = 0; i < nr; i++) got_rn[i] = canary;
                    for (int64_t i = 0; i < npl; i++) planes[i] = canary;
                    for (int64_t i = 0; i < nsq; i++) sq[i] = canary;
                    if (avx512)
                        fx_i16_fwd_copy_image_avx512(&g, xu, got, got_rn);
                    else
                        fx_i16_fwd_copy_image_avx2(&g, xu, got, got_rn, planes, sq);
                    for (int64_t i = 0; i < HW * Cpp; i++) bad_words += got[i] != want[i];
                    for (int64_t i = 0; i < Hp * G; i++) {
                        bad_norms += got_rn[i] != want_rn[i];
                        saturating += (int64_t)want_rn[i] * want_rn[i] >= ((int64_t)1 << 31);
                    }
                    for (int64_t i = HW * Cpp; i < nq; i++) overruns += got[i] != canary;
                    for (int64_t i = Hp * G; i < nr; i++) overruns += got_rn[i] != canary;
                    for (int64_t i = Cpp * HW; i < npl; i++) overruns += planes[i] != canary;
                    for (int64_t i = G * HW; i < nsq; i++) overruns += sq[i] != canary;
                    if (avx512 && fx_cpu()->avx512bf16) { /* bf16's layout: Cp words a pixel */
                        for (int64_t i = 0; i < nq; i++) got[i] = canary;
                        fx_bf16_pair_nhwc(&g, (const uint16_t *)(const void *)xu, 1, got);
                        for (int64_t p = 0; p < HW; p++)
                            for (int64_t cp = 0; cp < Cp; cp++)
                                bad_bf16 += got[p * Cp + cp] != want[p * Cpp + cp];
                        for (int64_t i = HW * Cp; i < nq; i++) overruns += got[i] != canary;
                    }
                    cases++;
                    free(xu);
                    free(xp);
                    free(want);
                    free(want_rn);
                    free(got);
                    free(got_rn);
                    free(planes);
                    free(sq);
                }
    CHECK(bad_words == 0 && bad_norms == 0 && bad_bf16 == 0 && overruns == 0,
          "%s copy of %ld images: %ld pair words and %ld row norms differ from the portable "
          "copy, %ld in bf16's words, %ld words written past the buffers",
          avx512 ? "AVX-512" : "AVX2", cases, bad_words, bad_norms, bad_bf16, overruns);
    CHECK(saturating > 0, "no row norm reached the saturating sums' range (the data should)");
}

/* tensor_conv2d_backward_weight at a stride with the direct route on and off (the patch GEMM):
 * the same mantissas and exponent, at 1 and 2 threads, in FLEX16_5 and DFP16; the route ran
 * where the level's kernel takes the stride and the taps reach every input pixel (not for a
 * 1 x 1 projection, nor an odd OW). The projection's own route, the stride-1 weight gradient
 * of its copied pixels, is switched off here: test_conv_subsample checks it. */
static void check_wgrad_ops_strided(uint64_t *seedp)
{
    fx_conv_subsample_set_enabled(0);
    /* N, C, H, O, K, pad, stride */
    static const int64_t shapes[][7] = {{4, 16, 32, 32, 3, 1, 2}, {3, 32, 16, 64, 3, 1, 2},
                                        {2, 16, 16, 32, 1, 0, 2}, {2, 8, 13, 16, 3, 1, 2},
                                        {2, 8, 18, 16, 3, 0, 3}};
    static const fmt_t fmts[2] = {FMT_FLEX16_5, FMT_DFP16};
    const fx_backend *be = fx_backend_active();
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t *c = shapes[i];
        const int64_t N = c[0], C = c[1], H = c[2], O = c[3], K = c[4], pad = c[5], st = c[6];
        const int64_t OHW = (H + 2 * pad - K) / st + 1, nw = O * C * K * K;
        const fx_conv_geom g = {.N = N, .C = C, .H = H, .W = H, .O = O, .KH = K, .KW = K,
                                .OH = OHW, .OW = OHW, .sh = st, .sw = st, .ph = pad, .pw = pad,
                                .dh = 1, .dw = 1};
        const int expect =
            be->conv.i16_wgrad && fx_i16_wgrad_direct_fits(&g, be->conv.i16_wgrad_max_stride);
        const fmt_t f = fmts[i % 2];
        test_rng r;
        test_rng_seed(&r, (*seedp)++);
        const int64_t xs[4] = {N, C, H, H}, ws[4] = {O, C, K, K}, ys[4] = {N, O, OHW, OHW};
        tensor_t *x = int_tensor(f, xs, DATA_NORMAL, 0, -14, &r);
        tensor_t *dy = int_tensor(f, ys, DATA_NORMAL, 1, -12, &r);
        int16_t *ref = malloc(sizeof(int16_t) * (size_t)nw);
        int16_t *got = malloc(sizeof(int16_t) * (size_t)nw);
        int eref = 0;
        /* pass 0 runs the GEMM the process chose; the route's passes run with the AMX kernel
         * off, whose tiles would otherwise take these products first (as in check_ops) */
        const int forced_prev = fx_gemm_i16_forced_kernel();
        const int amx_auto_prev = fx_gemm_i16_amx_auto();
        for (int pass = 0; pass < 3; pass++) { /* the GEMM, then the route at 1 and 2 threads */
            fx_i16_wgrad_direct_set_enabled(pass > 0);
            if (pass == 1) {
                fx_gemm_i16_force_kernel(FX_GEMM_I16_KERNEL_AUTO);
                fx_gemm_i16_set_amx_auto(0);
            }
            flexpoint_set_num_threads(pass == 2 ? 2 : 1);
            tensor_t *dw = tensor_new(FMT_DFP16, 4, ws);
            const long long calls = fx_i16_wgrad_direct_calls();
            CHECK_STATUS(tensor_conv2d_backward_weight(dw, x, dy, (int)st, (int)st, (int)pad,
                                                       (int)pad, 1, 1),
                         FX_OK);
            if (pass > 0)
                CHECK((fx_i16_wgrad_direct_calls() > calls) == expect,
                      "%s: strided weight gradient C%lld O%lld k%lld stride %lld: the direct "
                      "route %s", g_level, (long long)C, (long long)O, (long long)K,
                      (long long)st, expect ? "did not run" : "ran");
            CHECK_STATUS(tensor_get_raw(dw, pass ? got : ref), FX_OK);
            if (pass == 0) {
                eref = tensor_exp(dw);
            } else {
                long bad = 0;
                for (int64_t k = 0; k < nw; k++) bad += got[k] != ref[k];
                CHECK(bad == 0 && tensor_exp(dw) == eref,
                      "%s: %s strided weight gradient C%lld O%lld k%lld stride %lld pass %d: %ld "
                      "values differ, exp %d (GEMM %d)", g_level, fmt_name(f), (long long)C,
                      (long long)O, (long long)K, (long long)st, pass, bad, tensor_exp(dw), eref);
            }
            tensor_free(dw);
        }
        fx_i16_wgrad_direct_set_enabled(1);
        fx_gemm_i16_force_kernel(forced_prev);
        fx_gemm_i16_set_amx_auto(amx_auto_prev);
        flexpoint_set_num_threads(1);
        free(ref);
        free(got);
        tensor_free(x);
        tensor_free(dy);
    }
    fx_conv_subsample_set_enabled(1);
}

/* The weight gradient kernel of the active backend and the row norms it takes. */
static void check_weight_gradient(uint64_t *seedp)
{
    uint64_t seed = *seedp;
    /* weight gradients: the CNN's two layers, ResNet-20's 3x3 shapes, every tile width (O 16,
     * 20, 32, 33, 48, 64, 70), partial row tiles (C KK not a multiple of the tile's rows) */
    static const int64_t wshapes[][7] = {
        /* N, C, H, W, O, K, pad */
        {3, 1, 28, 28, 32, 5, 2},  {3, 32, 14, 14, 64, 5, 2}, {2, 16, 16, 16, 16, 3, 1},
        {2, 64, 8, 8, 64, 3, 1},   {2, 8, 10, 10, 48, 3, 1},  {2, 6, 12, 12, 20, 3, 0},
        {2, 5, 10, 10, 70, 3, 1},  {2, 7, 12, 12, 33, 3, 1},  {2, 3, 9, 9, 16, 2, 0},
        /* padded rows of 34 values (ResNet-20's first stage) and of 44 (two vectors a row in
         * the row norms, the second partial) */
        {1, 4, 32, 32, 16, 3, 1},  {1, 3, 11, 40, 16, 3, 2}};
    for (size_t s = 0; s < sizeof wshapes / sizeof wshapes[0]; s++)
        for (int kind = DATA_SMALL; kind <= DATA_SKEW; kind++) {
            const int64_t *c = wshapes[s];
            CHECK(check_wkernel(c[0], c[1], c[2], c[3], c[4], c[5], c[6], kind, seed++),
                  "weight gradient, data %d, shape %zu: declined data it can take", kind, s);
        }
    check_row_norms(seed++);
    /* strided, on a level whose kernel takes strides (both: a copy with each row's columns in
     * runs of every s-th one): ResNet-20's stride-2 3 x 3 layers (16 -> 32 at 32 x 32 and
     * 32 -> 64 at 16 x 16), a 2 x 2 kernel at stride 2, padded rows of odd length (13: the
     * last run one value short), of 73 (two steps of the stride-2 copy, the second partial)
     * and of 64 (every mask whole), stride 3 (scalar copy), 5 x 5 at stride 3, 4 x 4 at
     * stride 4 (the largest), strides (2, 3), and strides in one axis only */
    if (fx_backend_active()->conv.i16_wgrad_max_stride >= 3) {
        static const int64_t sshapes[][9] = {
            /* N, C, H, W, O, K, pad, sh, sw */
            {2, 16, 32, 32, 32, 3, 1, 2, 2}, {2, 32, 16, 16, 64, 3, 1, 2, 2},
            {2, 8, 12, 12, 16, 2, 0, 2, 2},  {2, 5, 9, 11, 20, 3, 1, 2, 2},
            {1, 4, 6, 71, 16, 3, 1, 2, 2},   {2, 6, 18, 18, 33, 3, 0, 3, 3},
            {2, 4, 17, 17, 16, 5, 2, 3, 3},  {2, 8, 12, 12, 16, 3, 1, 2, 1},
            {2, 8, 12, 11, 16, 3, 1, 1, 2},  {2, 4, 16, 16, 16, 4, 0, 4, 4},
            {2, 6, 13, 17, 16, 3, 1, 2, 3},  {1, 4, 4, 64, 16, 2, 0, 2, 2}};
        for (size_t i = 0; i < sizeof sshapes / sizeof sshapes[0]; i++)
            for (int kind = DATA_SMALL; kind <= DATA_SKEW; kind++) {
                const int64_t *c = sshapes[i];
                CHECK(check_wkernel_strided(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8],
                                            kind, seed++),
                      "strided weight gradient, data %d, shape %zu: declined data it can take",
                      kind, i);
            }
        CHECK(!check_wkernel_strided(2, 8, 12, 12, 16, 3, 1, 2, 2, DATA_FULL, seed++),
              "full-scale data at stride 2: the weight gradient took a chunk that may wrap");
    }
    check_wgrad_ops_strided(&seed);
    /* full scale: a row's bound alone may wrap, so the chunk is declined (by the AVX2 kernel
     * too: every row would take a fold per pixel pair) */
    CHECK(!check_wkernel(2, 8, 8, 8, 16, 3, 1, DATA_FULL, seed++),
          "full-scale data: the weight gradient took a chunk that may wrap");
    /* one full-scale input row (DATA_FULL_MIX): the AVX2 kernel takes it with a fold after each
     * pixel pair of the output rows it reaches, exactly (check_wkernel compares), also where
     * they follow and precede rows whose chains reach the bound; the others decline it. 64
     * rows an image: the 3 rows reached stay within FX_I16_PAIRED_MAX_SHARE. */
    {
        const long long paired = fx_i16_wgrad_direct_paired();
        const int any = wgrad_takes_any();
        CHECK(check_wkernel(2, 8, 64, 8, 16, 3, 1, DATA_FULL_MIX, seed++) == any,
              "a full-scale row: the weight gradient %s", any ? "declined" : "took it");
        CHECK(check_wkernel(2, 7, 64, 12, 33, 3, 1, DATA_FULL_MIX, seed++) == any,
              "a full-scale row, odd C and O: the weight gradient %s",
              any ? "declined" : "took it");
        CHECK(any ? fx_i16_wgrad_direct_paired() - paired >= 2
                  : fx_i16_wgrad_direct_paired() == paired,
              "a full-scale row: %lld weight-gradient chunks counted as taken with folds per "
              "pair", fx_i16_wgrad_direct_paired() - paired);
    }
    *seedp = seed;
}

/* The AVX-512 level's fold schedules of eight rows at once against the scalar definition,
 * on norms whose products sit near the chain limit (cuts every few segments), rows anywhere
 * in the norm table (repeated ones too, as the last group of a chunk repeats its last row),
 * with the norms gathered once per kernel row (up to 16 segments a tap) and per segment (20). */
static void check_fold_schedules8(uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    static const int64_t shapes[][3] = {{9, 3, 2}, {9, 3, 4}, {9, 3, 8}, {25, 5, 4}, {1, 1, 2},
                                        {4, 2, 2}, {2, 1, 1}, {49, 7, 3}, {9, 3, 20}};
    int64_t cuts = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int64_t KK = shapes[k][0], KW = shapes[k][1], G = shapes[k][2], nseg = KK * G;
        const int64_t KH = KK / KW, nrn = (KH + 40) * G;
        uint32_t *rn = malloc(sizeof(uint32_t) * (size_t)nrn);
        uint32_t *wm = malloc(sizeof(uint32_t) * (size_t)nseg);
        uint8_t *fold = malloc((size_t)(8 * nseg));
        uint8_t *want = malloc((size_t)nseg);
        for (int trial = 0; trial < 50; trial++) {
            /* products rn wm of 2^28 .. 2^31 - 2^16 (each alone within the limit, as admitted) */
            for (int64_t i = 0; i < nrn; i++) rn[i] = (uint32_t)test_rng_range(&r, 16384, 46340);
            for (int64_t i = 0; i < nseg; i++) wm[i] = (uint32_t)test_rng_range(&r, 16384, 46340);
            int32_t base[8];
            for (int j = 0; j < 8; j++)
                base[j] = (int32_t)(test_rng_range(&r, 0, 40) * G);
            if (trial % 5 == 0) base[7] = base[6]; /* a repeated last row */
            fx_i16_fold_schedules8_avx512(rn, base, wm, KK, KW, G, fold);
            for (int j = 0; j < 8; j++) {
                fx_i16_fold_schedule(rn + base[j], wm, KK, KW, G, want);
                int64_t bad = -1;
                for (int64_t i = 0; i < nseg && bad < 0; i++) {
                    if (fold[j * nseg + i] != want[i]) bad = i;
                    cuts += want[i];
                }
                CHECK(bad < 0, "fold schedules of 8 rows (KK %lld, KW %lld, G %lld), lane %d: "
                      "segment %lld is %d, the scalar schedule says %d", (long long)KK,
                      (long long)KW, (long long)G, j, (long long)bad,
                      bad < 0 ? 0 : fold[j * nseg + bad], bad < 0 ? 0 : want[bad]);
            }
        }
        free(rn);
        free(wm);
        free(fold);
        free(want);
    }
    CHECK(cuts > 1000, "the fold-schedule data cut chains %lld times, want many", (long long)cuts);
}

/* The AVX2 level's fold schedules of four rows at once against the scalar definition, as
 * check_fold_schedules8, and with segments whose bound alone leaves a chain (folded per pair,
 * FX_I16_FOLD_PAIRS), alone, adjacent, first and last, which the AVX2 kernel admits. */
static void check_fold_schedules4(uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    static const int64_t shapes[][3] = {{9, 3, 2}, {9, 3, 4}, {9, 3, 8}, {25, 5, 4}, {1, 1, 2},
                                        {4, 2, 2}, {2, 1, 1}, {49, 7, 3}, {9, 3, 20},
                                        {5, 1, 1}, {25, 5, 8}};
    int64_t cuts = 0, paired = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int64_t KK = shapes[k][0], KW = shapes[k][1], G = shapes[k][2], nseg = KK * G;
        const int64_t KH = KK / KW, nrn = (KH + 40) * G;
        uint32_t *rn = malloc(sizeof(uint32_t) * (size_t)nrn);
        uint32_t *wm = malloc(sizeof(uint32_t) * (size_t)nseg);
        uint8_t *fold = malloc((size_t)(4 * nseg));
        uint8_t *want = malloc((size_t)nseg);
        for (int trial = 0; trial < 60; trial++) {
            /* products rn wm of 2^28 .. 2^31 - 2^16; in two trials of three some norms up to
             * 92682 (the largest of 8 int16), whose products may leave the limit alone */
            const int big = trial % 3 != 0;
            for (int64_t i = 0; i < nrn; i++)
                rn[i] = (uint32_t)(big && test_rng_range(&r, 0, 8) == 0
                                       ? test_rng_range(&r, 46341, 92682)
                                       : test_rng_range(&r, 16384, 46340));
            for (int64_t i = 0; i < nseg; i++)
                wm[i] = (uint32_t)(big && test_rng_range(&r, 0, 8) == 0
                                       ? test_rng_range(&r, 46341, 92682)
                                       : test_rng_range(&r, 16384, 46340));
            if (trial % 6 == 1) wm[0] = wm[nseg - 1] = 92682; /* first and last segments */
            int32_t base[4];
            for (int j = 0; j < 4; j++)
                base[j] = (int32_t)(test_rng_range(&r, 0, 40) * G);
            if (trial % 5 == 0) base[3] = base[2]; /* a repeated last row */
            fx_i16_fold_schedules4_avx2(rn, base, wm, KK, KW, G, fold);
            for (int j = 0; j < 4; j++) {
                fx_i16_fold_schedule(rn + base[j], wm, KK, KW, G, want);
                int64_t bad = -1;
                for (int64_t i = 0; i < nseg && bad < 0; i++) {
                    if (fold[j * nseg + i] != want[i]) bad = i;
                    cuts += want[i] == 1;
                    paired += want[i] == FX_I16_FOLD_PAIRS;
                }
                CHECK(bad < 0, "fold schedules of 4 rows (KK %lld, KW %lld, G %lld), lane %d: "
                      "segment %lld is %d, the scalar schedule says %d", (long long)KK,
                      (long long)KW, (long long)G, j, (long long)bad,
                      bad < 0 ? 0 : fold[j * nseg + bad], bad < 0 ? 0 : want[bad]);
            }
        }
        free(rn);
        free(wm);
        free(fold);
        free(want);
    }
    CHECK(cuts > 1000, "the fold-schedule data cut chains %lld times, want many", (long long)cuts);
    CHECK(paired > 100, "the fold-schedule data had %lld segments folded per pair, want many",
          (long long)paired);
}

/* The AVX2 weight gradient's schedules in four lanes (fx_i16_wgrad_fold_schedule4_avx2) are
 * not the scalar scan's bytes: each quarter of the rows starts a chain. Checked for what makes
 * the sums exact: a row is FX_I16_FOLD_PAIRS exactly where its bound alone leaves a chain, the
 * row before such a row ends a chain, every other chain's bounds sum to at most
 * FX_I16_CHAIN_LIMIT; and the last row's byte and the chain count against the scalar scan (at
 * most three chains more). Below 16 rows the bytes are the scalar scan's. */
static void check_wgrad_schedules4(uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    static const int64_t sizes[] = {9, 15, 16, 17, 40, 128, 255, 257, 1000, 4099};
    int64_t cuts = 0, paired = 0, edges_paired = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int64_t S = sizes[k], C = 3;
        const size_t nS = (size_t)sizes[k];
        uint32_t *xk = malloc(sizeof(uint32_t) * nS * (size_t)C);
        uint32_t *dm = malloc(sizeof(uint32_t) * nS);
        uint8_t *fold = malloc(nS), *want = malloc(nS);
        int64_t *bound = malloc(sizeof(int64_t) * nS);
        for (int trial = 0; trial < 12; trial++) {
            const int big = trial % 3 != 0; /* rows whose bound alone leaves a chain */
            for (int64_t i = 0; i < C * S; i++)
                xk[i] = (uint32_t)(big && test_rng_range(&r, 0, 16) == 0
                                       ? test_rng_range(&r, 46341, 92682)
                                       : test_rng_range(&r, 8192, 46340));
            for (int64_t i = 0; i < S; i++) dm[i] = (uint32_t)test_rng_range(&r, 8192, 46340);
            if (trial % 4 == 1) {
                /* rows folded per pair first and last, on both sides of each quarter's edge
                 * (q = ceil(S / 4)) and of the 64-step blocks, in every channel */
                const int64_t q = (S + 3) / 4;
                const int64_t edge[] = {0, S - 1, q - 1, q, 2 * q - 1, 2 * q, 3 * q - 1, 3 * q,
                                        63, 64, q + 63, q + 64};
                for (size_t e = 0; e < sizeof edge / sizeof edge[0]; e++) {
                    if (edge[e] >= S) continue;
                    dm[edge[e]] = 92682;
                    for (int64_t c = 0; c < C; c++) xk[c * S + edge[e]] = 92682;
                }
            }
            const int64_t c_lo = trial % C, c_hi = c_lo + (trial / C) % (C - c_lo);
            for (size_t i = 0; i < nS; i++) fold[i] = 7; /* any byte left unwritten shows */
            fx_i16_wgrad_fold_schedule4_avx2(xk, dm, S, c_lo, c_hi, fold);
            fx_i16_wgrad_fold_schedule(xk, dm, S, c_lo, c_hi, want);
            int64_t run = 0, bad = -1, n_lane = 0, n_want = 0;
            for (int64_t i = 0; i < S; i++) {
                uint32_t x = 0;
                for (int64_t c = c_lo; c <= c_hi; c++) x = xk[c * S + i] > x ? xk[c * S + i] : x;
                bound[i] = (int64_t)x * dm[i];
            }
            for (int64_t i = 0; i < S && bad < 0; i++) {
                const int pairs = bound[i] > FX_I16_CHAIN_LIMIT;
                if (fold[i] > FX_I16_FOLD_PAIRS || (fold[i] == FX_I16_FOLD_PAIRS) != pairs ||
                    (pairs && i > 0 && fold[i - 1] == 0))
                    bad = i;
                run = pairs ? 0 : run + bound[i];
                if (run > FX_I16_CHAIN_LIMIT) bad = i;
                if (fold[i]) run = 0;
                n_lane += fold[i] != 0;
                n_want += want[i] != 0;
                paired += pairs;
                edges_paired += pairs && S >= 16 && (i % ((S + 3) / 4) == 0 ||
                                                     i % ((S + 3) / 4) == (S + 3) / 4 - 1);
            }
            cuts += n_lane;
            CHECK(bad < 0, "weight-gradient schedule in lanes, %lld rows, channels %lld-%lld: "
                  "row %lld (fold %d, bound %lld) breaks a chain's limit or its pairs",
                  (long long)S, (long long)c_lo, (long long)c_hi, (long long)bad,
                  bad < 0 ? 0 : fold[bad], bad < 0 ? 0LL : (long long)bound[bad]);
            CHECK(fold[S - 1] == want[S - 1], "weight-gradient schedule in lanes, %lld rows: "
                  "last row %d, the scalar scan %d", (long long)S, fold[S - 1], want[S - 1]);
            CHECK(n_lane >= n_want && n_lane <= n_want + 3,
                  "weight-gradient schedule in lanes, %lld rows: %lld chain ends, the scalar "
                  "scan %lld (at most 3 more)", (long long)S, (long long)n_lane,
                  (long long)n_want);
            if (S < 16)
                CHECK(memcmp(fold, want, (size_t)S) == 0,
                      "weight-gradient schedule of %lld rows: not the scalar scan's",
                      (long long)S);
        }
        free(xk);
        free(dm);
        free(fold);
        free(want);
        free(bound);
    }
    CHECK(cuts > 2000, "the weight-gradient schedules ended %lld chains, want many",
          (long long)cuts);
    CHECK(paired > 100, "the weight-gradient schedules had %lld rows folded per pair, want many",
          (long long)paired);
    CHECK(edges_paired > 50, "the weight-gradient schedules had %lld rows folded per pair at a "
          "quarter's first or last row, want many", (long long)edges_paired);
}

/* fx_i16_wgrad_sched_span over a weight gradient's tiles: every tile's channels inside the
 * schedule it takes, each schedule over its first tile's channels and those of the next
 * `ahead` rows at most, and one schedule per two channels for ResNet-20's 64-channel layer
 * (tiles of 6 rows of 3 x 3 taps; three, one per tile, before the schedules were shared). */
static void check_sched_span(void)
{
    static const struct {
        int64_t C, KK, mr;
    } cases[] = {{64, 9, 6}, {32, 9, 12}, {16, 9, 12}, {5, 25, 12}, {3, 1, 12}, {7, 9, 8}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int64_t CKK = cases[i].C * cases[i].KK, KK = cases[i].KK, mr = cases[i].mr;
        int64_t lo = -1, hi = -1, made = 0;
        for (int64_t r0 = 0; r0 < CKK; r0 += mr) {
            const int64_t rows = CKK - r0 < mr ? CKK - r0 : mr;
            if (fx_i16_wgrad_sched_span(r0, rows, mr, CKK, KK, &lo, &hi)) {
                made++;
                const int64_t end = r0 + rows + mr < CKK ? r0 + rows + mr : CKK;
                CHECK(lo == r0 / KK && hi == (end - 1) / KK,
                      "C%lld KK%lld: the schedule at row %lld covers channels %lld-%lld",
                      (long long)cases[i].C, (long long)KK, (long long)r0, (long long)lo,
                      (long long)hi);
            }
            CHECK(lo <= r0 / KK && hi >= (r0 + rows - 1) / KK,
                  "C%lld KK%lld: the tile at row %lld takes the schedule of channels "
                  "%lld-%lld",
                  (long long)cases[i].C, (long long)KK, (long long)r0, (long long)lo,
                  (long long)hi);
        }
        if (i == 0) CHECK(made == 32, "64 channels of 3 x 3 taps: %lld schedules", (long long)made);
    }
}

int main(void)
{
    /* every level this CPU runs that has the direct forward kernel: AVX-512 with VNNI
     * (vpdpwssd, and there the weight gradient too) and AVX2 (vpmaddwd + vpaddd) */
    static const struct {
        int id;
        const char *name;
    } levels[] = {{FX_BACKEND_AVX512, "avx512"}, {FX_BACKEND_AVX2, "avx2"}};
    uint64_t seed = 1;
    int ran = 0;
    const fx_backend *avx2 = fx_backend_get(FX_BACKEND_AVX2);
    if (avx2 && avx2->available) check_copy(0, seed++);
    if (avx2 && avx2->available) check_fold_schedules4(seed++);
    if (avx2 && avx2->available) check_wgrad_schedules4(seed++);
    const fx_backend *avx512 = fx_backend_get(FX_BACKEND_AVX512);
    if (avx512 && avx512->available && avx512->conv.i16_fwd) {
        check_fold_schedules8(seed++);
        check_copy(1, seed++);
    }
    check_sched_span();
    /* the portable row norms, the definition the levels' follow */
    g_row_norms = fx_i16_row_norms_portable;
    g_level = "portable";
    check_row_norms(seed++);
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        const fx_backend *be = fx_backend_get(levels[l].id);
        if (!be || !be->available || !be->conv.i16_fwd) continue;
        CHECK_STATUS(flexpoint_set_backend(levels[l].name), FX_OK);
        g_fwd = be->conv.i16_fwd;
        g_fwd_unpadded = be->conv.i16_fwd_unpadded;
        g_wgrad = be->conv.i16_wgrad;
        g_row_norms = levels[l].id == FX_BACKEND_AVX512 ? fx_i16_row_norms : fx_i16_row_norms_avx2;
        g_level = levels[l].name;
        check_forward(&seed);
        check_strided(&seed);
        if (be->conv.i16_wgrad) check_weight_gradient(&seed);
        ran++;
    }
    if (!ran)
        return test_skip("test_conv_i16_direct", "this CPU has no AVX2 (integer convolutions "
                                                 "take the portable patch GEMM)");
    return test_finish("test_conv_i16_direct");
}
