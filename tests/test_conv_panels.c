/* Implicit-GEMM A panels of the integer convolution (src/nn/conv_panels.h).
 *
 * For convolution geometries covering odd and even kernel widths, 1x1 to 10-wide kernels,
 * strides, dilations, one input channel, outputs narrower than a 6-row panel (panels that span
 * output rows and samples) and a partial last panel, with random int16 inputs over the whole
 * range:
 *   - the portable panels equal the im2row patch matrix packed as gemm_i16.h defines;
 *   - each vector builder the CPU runs (fx_backend.conv.panels_i16: AVX-512BW) writes the
 *     same int32 values, or declines exactly the geometries fx_conv_panels_fit rejects;
 *   - the exact GEMM fed with the panels gives the same int64 sums as the GEMM fed with the
 *     patch matrix, for the split kernel and for the norm-checked fast kernel;
 *   - the patch rows on demand (fx_conv_rows_i16, the AVX2 level's implicit GEMM) equal the
 *     im2row rows for every kind of block the GEMM asks for (K blocks starting inside a
 *     kernel row, short blocks, partial tiles) and write nothing beyond the slack the GEMM
 *     allows; every register-tile kernel fed with them gives the patch matrix's sums, and the
 *     fast kernel on rows with one hot row per tile (where a wrong norm lets an int32 chain
 *     wrap) matches an exact reference;
 *   - the weight gradient's rows on demand (the transposed patch matrix) and its AMX tiles
 *     from byte planes of the padded chunk equal im2col's rows, nothing written outside;
 *   - kernels that cannot take panels refuse them with FX_EUNSUPPORTED;
 *   - the fp32 GEMM's panels from fp32, fp16 and bf16 inputs (any bit patterns, widened
 *     exactly) likewise, for the AVX2 (6-row) and AVX-512 (12-row) tiles, and each level's
 *     fp32 GEMM from them gives the same bits.
 * The convolution's own results are checked against fp64 and across backends in
 * test_nn_conv. */
#include "core/backend.h"
#include "flex/flex_kernels.h"
#include "bf16/bf16_gemm.h"
#include "flex/gemm_i16.h"
#include "nn/conv_panels.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

typedef struct geo_case {
    int64_t C, H, W, KH, KW, sh, sw, ph, pw, dh, dw, nb;
} geo_case;

static const geo_case g_cases[] = {
    {32, 14, 14, 5, 5, 1, 1, 2, 2, 1, 1, 3}, /* the CNN's second conv */
    {1, 28, 28, 5, 5, 1, 1, 2, 2, 1, 1, 2},  /* its first: one channel, K = 25 odd */
    {3, 9, 7, 3, 3, 2, 2, 1, 1, 1, 1, 2},    /* stride 2 */
    {3, 9, 8, 3, 3, 2, 1, 1, 1, 1, 1, 2},    /* stride 2 down, 1 across */
    {4, 11, 13, 3, 3, 1, 1, 2, 2, 2, 2, 1},  /* dilation 2 */
    {2, 6, 5, 2, 4, 1, 1, 0, 1, 1, 1, 3},    /* even KW */
    {5, 8, 8, 1, 1, 1, 1, 0, 0, 1, 1, 2},    /* 1x1 */
    {3, 20, 20, 7, 7, 1, 3, 3, 3, 1, 1, 1},  /* KW 7 (three vectors per group pair), sw 3 */
    {2, 12, 30, 3, 10, 1, 1, 1, 1, 1, 1, 1}, /* KW 10, the widest the builder takes */
    {2, 10, 40, 3, 11, 1, 1, 0, 0, 1, 1, 1}, /* KW 11: declined */
    {2, 5, 40, 2, 3, 1, 1, 0, 0, 1, 16, 1},  /* (KW-1) dw = 32: declined */
    {2, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 4},    /* OW 3: every panel spans rows and samples */
    {1, 4, 4, 3, 3, 1, 1, 0, 0, 1, 1, 5},    /* P = 4 < 6 */
    {64, 14, 14, 5, 5, 1, 1, 2, 2, 1, 1, 1}, /* the flipped-kernel input gradient of conv2 */
    {17, 6, 6, 5, 5, 1, 1, 2, 2, 1, 1, 2},   /* K = 425: a last K block of 41 values (21
                                                pairs: the wrap kernel's half quad) */
};

static fx_conv_geom geom_of(const geo_case *c)
{
    fx_conv_geom g = {.N = c->nb, .C = c->C, .H = c->H, .W = c->W, .O = 1, .KH = c->KH,
                      .KW = c->KW, .sh = c->sh, .sw = c->sw, .ph = c->ph, .pw = c->pw,
                      .dh = c->dh, .dw = c->dw};
    g.OH = (c->H + 2 * c->ph - c->dh * (c->KH - 1) - 1) / c->sh + 1;
    g.OW = (c->W + 2 * c->pw - c->dw * (c->KW - 1) - 1) / c->sw + 1;
    return g;
}

static fx_operand op2d(const int16_t *data, int64_t rows, int64_t cols, int64_t s0, int64_t s1)
{
    fx_operand o;
    memset(&o, 0, sizeof o);
    o.data = data;
    o.fmt = FMT_FLEX16_5;
    o.ndim = 2;
    o.shape[0] = rows;
    o.shape[1] = cols;
    o.strides[0] = s0;
    o.strides[1] = s1;
    return o;
}

typedef void (*rows_fn)(const void *, int64_t, int, int64_t, int64_t, int16_t *, int64_t);

/* An integer MATMUL call of a x b into out with the optional A sources (panels, rows on
 * demand); nthreads 2 with rows on demand (the GEMM's threads call the source at once). */
static int run_gemm_any(fx_kernel k, fx_operand a, const int32_t *panels, rows_fn rows,
                        const void *rows_ctx, fx_operand b, int64_t *out)
{
    fx_op_call c;
    memset(&c, 0, sizeof c);
    int e = 0;
    c.op = FX_OP_MATMUL;
    c.nin = 2;
    c.in[0] = a;
    c.in[1] = b;
    c.out_ndim = 2;
    c.out_shape[0] = a.shape[0];
    c.out_shape[1] = b.shape[1];
    c.out_numel = a.shape[0] * b.shape[1];
    c.out_i64 = out;
    c.out_exp = &e;
    c.nthreads = rows ? 2 : 1;
    c.a_panels = panels;
    c.a_panels_mr = panels ? 6 : 0;
    c.a_rows = rows;
    c.a_rows_ctx = rows_ctx;
    return k(&c);
}

static int run_gemm(fx_kernel k, fx_operand a, const int32_t *panels, fx_operand b, int64_t *out)
{
    return run_gemm_any(k, a, panels, NULL, NULL, b, out);
}

static int run_gemm_rows(fx_kernel k, fx_operand a, rows_fn fn, const void *ctx, fx_operand b,
                         int64_t *out)
{
    return run_gemm_any(k, a, NULL, fn, ctx, b, out);
}

/* fx_conv_rows_i16 against the patch matrix for blocks (i0, m, k0, kc) such as the GEMM asks
 * for, and nothing written beyond each row's slack; from the padded NCHW chunk xp (taps in
 * im2row's order, colT) and, nhwc, from its channel-last copy (taps in the order
 * (kh*KW + kw)*C + c, colT permuted to match, and nothing written outside the window at all). */
static void check_conv_rows_order(const fx_conv_geom *g, int64_t nb, const int16_t *xp,
                                  const int16_t *colT, int64_t Pc, int nhwc)
{
    const int64_t K = g->C * g->KH * g->KW, gap = 8, sentinel = 0x5A5A;
    int64_t *goff = malloc((size_t)(g->C * g->KH) * sizeof *goff);
    fx_group_offsets_fill(g, goff);
    int16_t *xq = NULL, *want = (int16_t *)colT;
    if (nhwc) {
        xq = malloc((size_t)fx_conv_padded_numel(g, nb) * 2);
        fx_conv_nhwc(g, xp, nb, xq);
        want = malloc((size_t)(Pc * K) * 2);
        for (int64_t i = 0; i < Pc; i++)
            for (int64_t c = 0; c < g->C; c++)
                for (int64_t kh = 0; kh < g->KH; kh++)
                    for (int64_t kw = 0; kw < g->KW; kw++)
                        want[i * K + (kh * g->KW + kw) * g->C + c] =
                            colT[i * K + (c * g->KH + kh) * g->KW + kw];
    }
    const fx_conv_rows cr = {g, nhwc ? xq : xp, goff, nhwc};
    const int64_t k0s[5] = {0, 1, g->KW - 1 < K ? g->KW - 1 : 0, FX_GEMM_I16_KC < K ? FX_GEMM_I16_KC : 0, K - 1};
    const int64_t i0s[3] = {0, Pc > 5 ? 5 : 0, Pc > 3 ? Pc - 3 : 0};
    const int64_t slack = nhwc ? 0 : FX_A_ROWS_SLACK;
    int64_t bad = 0, spill = 0;
    for (int ki = 0; ki < 5; ki++)
        for (int kj = 0; kj < 4; kj++)
            for (int ii = 0; ii < 3; ii++) {
                const int64_t k0 = k0s[ki];
                const int64_t want_kc = kj == 0 ? 1 : kj == 1 ? 7 : kj == 2 ? FX_GEMM_I16_KC : K;
                const int64_t kc = want_kc < K - k0 ? want_kc : K - k0, i0 = i0s[ii];
                const int m = (int)(Pc - i0 < 6 ? Pc - i0 : 6);
                const int64_t ld = kc + 2 * FX_A_ROWS_SLACK + gap, n = 6 * ld + gap;
                int16_t *buf = malloc((size_t)n * 2);
                for (int64_t i = 0; i < n; i++) buf[i] = (int16_t)sentinel;
                int16_t *dst = buf + gap + FX_A_ROWS_SLACK;
                fx_conv_rows_i16(&cr, i0, m, k0, kc, dst, ld);
                for (int r = 0; r < m; r++)
                    for (int64_t t = 0; t < kc; t++) bad += dst[r * ld + t] != want[(i0 + r) * K + k0 + t];
                /* outside [r*ld - slack, r*ld + kc + slack) of every row: untouched */
                for (int64_t i = 0; i < n; i++) {
                    const int64_t off = i - (gap + FX_A_ROWS_SLACK), r = (off + FX_A_ROWS_SLACK) / ld;
                    const int64_t in_row = off + FX_A_ROWS_SLACK - r * ld; /* 0 .. ld-1 */
                    const int allowed = off >= -FX_A_ROWS_SLACK && r < m &&
                                        in_row >= FX_A_ROWS_SLACK - slack &&
                                        in_row < FX_A_ROWS_SLACK + kc + slack;
                    spill += !allowed && buf[i] != (int16_t)sentinel;
                }
                free(buf);
            }
    /* the AMX kernel's tiles straight from byte planes of the channel-last chunk (AVX-512BW:
     * they run wherever that level does, the AMX kernel aside): every tile of row windows such
     * as that kernel asks for (k0 a multiple of 64, a K block or what is left of K), the
     * planes' bytes of the permuted patch rows, zeros past the rows and values */
    if (nhwc && fx_backend_get(FX_BACKEND_AVX512)->available) {
        const int64_t pn = fx_conv_padded_numel(g, nb);
        int8_t *planes = malloc((size_t)(2 * (pn + 2 * FX_CONV_TILES_SLACK)));
        int8_t *ph = planes + FX_CONV_TILES_SLACK, *pl = ph + pn + 2 * FX_CONV_TILES_SLACK;
        fx_conv_byte_planes_avx512(xq, pn, ph, pl);
        const fx_conv_tiles ct = {g, ph, pl};
        const int64_t tk0s[3] = {0, K > 64 ? 64 : 0, K > 128 ? (K - 1) / 64 * 64 : 0};
        int64_t tbad = 0;
        for (int ki = 0; ki < 3; ki++)
            for (int ii = 0; ii < 3; ii++) {
                const int64_t k0 = tk0s[ki], kc = K - k0 < 2048 ? K - k0 : 2048, i0 = i0s[ii];
                const int m = (int)(Pc - i0 < 16 ? Pc - i0 : 16);
                const int64_t nt = (kc + 63) / 64;
                int8_t *ap = malloc((size_t)(nt * 2048));
                memset(ap, 0x5A, (size_t)(nt * 2048));
                fx_conv_tiles_i16_avx512(&ct, i0, m, k0, kc, ap);
                for (int64_t t = 0; t < nt; t++)
                    for (int r = 0; r < 16; r++)
                        for (int b = 0; b < 64; b++) {
                            const int64_t k = k0 + t * 64 + b;
                            const int16_t v = r < m && k < k0 + kc ? want[(i0 + r) * K + k] : 0;
                            tbad += ap[t * 2048 + r * 64 + b] != (int8_t)(v >> 8);
                            tbad += ap[t * 2048 + 1024 + r * 64 + b] != (int8_t)(uint8_t)(v & 255);
                        }
                free(ap);
            }
        CHECK(tbad == 0, "C%lld KW%lld dw%lld: %lld AMX tile bytes differ from the patch rows",
              (long long)g->C, (long long)g->KW, (long long)g->dw, (long long)tbad);
        free(planes);
    }
    CHECK(bad == 0, "C%lld KW%lld dw%lld %s: %lld row-source values differ from im2row",
          (long long)g->C, (long long)g->KW, (long long)g->dw, nhwc ? "nhwc" : "nchw",
          (long long)bad);
    CHECK(spill == 0, "C%lld KW%lld %s: %lld elements written beyond the rows' slack",
          (long long)g->C, (long long)g->KW, nhwc ? "nhwc" : "nchw", (long long)spill);
    if (nhwc) {
        free(xq);
        free(want);
    }
    free(goff);
}

/* The weight gradient's rows on demand (fx_conv_wrows_i16: row i = tap i over the chunk's
 * pixels, the transposed patch matrix) for windows that start inside an output row, cross
 * rows and samples, and end anywhere, with nothing written outside [0, kc) of each row; and
 * the AMX tiles from byte planes of the padded chunk (fx_conv_wtiles_i16_avx512) for windows
 * such as that kernel asks for, the planes' bytes of those rows with zeros past the rows and
 * values. Stride-1 geometries only (fx_conv_wsrc_fit). */
static void check_wgrad_rows(const fx_conv_geom *g, int64_t nb, const int16_t *xp,
                             const int16_t *colT, int64_t Pc)
{
    if (!fx_conv_wsrc_fit(g)) return;
    const int64_t K = g->C * g->KH * g->KW, gap = 8;
    const fx_conv_wsrc ws0 = {g, xp, NULL, NULL};
    const int64_t k0s[4] = {0, 1, g->OW + 3 < Pc ? g->OW + 3 : 0, Pc - 1};
    const int64_t i0s[3] = {0, K > 5 ? 5 : 0, K > 3 ? K - 3 : 0};
    int64_t bad = 0, spill = 0;
    for (int ki = 0; ki < 4; ki++)
        for (int kj = 0; kj < 3; kj++)
            for (int ii = 0; ii < 3; ii++) {
                const int64_t k0 = k0s[ki], want_kc = kj == 0 ? 1 : kj == 1 ? 77 : Pc;
                const int64_t kc = want_kc < Pc - k0 ? want_kc : Pc - k0, i0 = i0s[ii];
                const int m = (int)(K - i0 < 16 ? K - i0 : 16);
                const int64_t ld = kc + gap, n = m * ld + gap;
                int16_t *buf = malloc((size_t)n * 2);
                for (int64_t i = 0; i < n; i++) buf[i] = 0x5A5A;
                fx_conv_wrows_i16(&ws0, i0, m, k0, kc, buf + gap, ld);
                for (int64_t i = 0; i < n; i++) {
                    const int64_t off = i - gap, r = off / ld, t = off - r * ld;
                    if (off >= 0 && t < kc)
                        bad += buf[i] != colT[(k0 + t) * K + i0 + r];
                    else
                        spill += buf[i] != 0x5A5A;
                }
                free(buf);
            }
    CHECK(bad == 0, "C%lld KW%lld dh%lld: %lld weight-gradient row values differ from im2col",
          (long long)g->C, (long long)g->KW, (long long)g->dh, (long long)bad);
    CHECK(spill == 0, "C%lld KW%lld: %lld values written outside the weight-gradient rows",
          (long long)g->C, (long long)g->KW, (long long)spill);
    if (!fx_backend_get(FX_BACKEND_AVX512)->available) return;
    const int64_t pn = fx_conv_padded_numel(g, nb);
    int8_t *planes = malloc((size_t)(2 * (pn + 2 * FX_CONV_TILES_SLACK)));
    int8_t *ph = planes + FX_CONV_TILES_SLACK, *pl = ph + pn + 2 * FX_CONV_TILES_SLACK;
    fx_conv_byte_planes_avx512(xp, pn, ph, pl);
    const fx_conv_wsrc ws = {g, xp, ph, pl};
    const int64_t tk0s[3] = {0, Pc > 64 ? 64 : 0, Pc > 128 ? (Pc - 1) / 64 * 64 : 0};
    int64_t tbad = 0;
    for (int ki = 0; ki < 3; ki++)
        for (int ii = 0; ii < 3; ii++) {
            const int64_t k0 = tk0s[ki], kc = Pc - k0 < 2048 ? Pc - k0 : 2048, i0 = i0s[ii];
            const int m = (int)(K - i0 < 16 ? K - i0 : 16);
            const int64_t nt = (kc + 63) / 64;
            int8_t *ap = malloc((size_t)(nt * 2048));
            memset(ap, 0x5A, (size_t)(nt * 2048));
            fx_conv_wtiles_i16_avx512(&ws, i0, m, k0, kc, ap);
            for (int64_t t = 0; t < nt; t++)
                for (int r = 0; r < 16; r++)
                    for (int b = 0; b < 64; b++) {
                        const int64_t k = k0 + t * 64 + b;
                        const int16_t v = r < m && k < k0 + kc ? colT[k * K + i0 + r] : 0;
                        tbad += ap[t * 2048 + r * 64 + b] != (int8_t)(v >> 8);
                        tbad += ap[t * 2048 + 1024 + r * 64 + b] != (int8_t)(uint8_t)(v & 255);
                    }
            free(ap);
        }
    CHECK(tbad == 0, "C%lld KW%lld dh%lld: %lld weight-gradient AMX tile bytes differ",
          (long long)g->C, (long long)g->KW, (long long)g->dh, (long long)tbad);
    free(planes);
}

static void check_conv_rows(const fx_conv_geom *g, int64_t nb, const int16_t *xp,
                            const int16_t *colT, int64_t Pc)
{
    check_conv_rows_order(g, nb, xp, colT, Pc, 0);
    check_conv_rows_order(g, nb, xp, colT, Pc, 1);
}

/* The bf16 AMX GEMM with A as the convolution's rows on demand against the same GEMM from the
 * patch matrix, bit for bit (each output is one chain over K either way); bf16 inputs in
 * [-2, -1] and [1, 2]. */
static void check_bf16_amx_rows(const fx_conv_geom *g, int64_t nb, const int64_t *g_off,
                                test_rng *rng)
{
    const int64_t K = g->C * g->KH * g->KW, Pc = nb * g->OH * g->OW, N = 40;
    const int64_t xn = g->N * g->C * g->H * g->W;
    const int64_t xpn = fx_conv_padded_numel(g, nb) + FX_CONV_PANEL_SLACK;
    int16_t *x = malloc((size_t)xn * 2), *xp = calloc((size_t)xpn, 2);
    int16_t *col = malloc((size_t)(Pc * K + FX_CONV_PAD_SLACK) * 2), *w = malloc((size_t)(K * N) * 2);
    float *o0 = malloc((size_t)(Pc * N) * 4), *o1 = malloc((size_t)(Pc * N) * 4);
    for (int64_t i = 0; i < xn; i++)
        x[i] = (int16_t)(uint16_t)(0x3F80u | (test_rng_u64(rng) & 0x807Fu));
    for (int64_t i = 0; i < K * N; i++)
        w[i] = (int16_t)(uint16_t)(0x3F80u | (test_rng_u64(rng) & 0x807Fu));
    fx_conv_pad(g, x, 0, nb, xp, sizeof(int16_t));
    fx_im2row_i16(g, xp, nb, col, 1);
    fx_operand A = op2d(col, Pc, K, K, 1), B = op2d(w, K, N, N, 1);
    A.fmt = B.fmt = FMT_BF16;
    const fx_conv_rows cr = {g, xp, g_off, 0};
    for (int nt = 1; nt <= 2; nt++) {
        fx_op_call c;
        memset(&c, 0, sizeof c);
        c.op = FX_OP_MATMUL;
        c.nin = 2;
        c.in[0] = A;
        c.in[1] = B;
        c.out_ndim = 2;
        c.out_shape[0] = Pc;
        c.out_shape[1] = N;
        c.out_numel = Pc * N;
        c.out_f32 = o0;
        c.nthreads = nt;
        memset(o0, 0, (size_t)(Pc * N) * 4);
        CHECK_STATUS(fx_bf16_matmul_amx(&c), FX_OK);
        c.in[0].data = NULL;
        c.a_rows = fx_conv_rows_i16;
        c.a_rows_ctx = &cr;
        c.out_f32 = o1;
        memset(o1, 0xFF, (size_t)(Pc * N) * 4);
        CHECK_STATUS(fx_bf16_matmul_amx(&c), FX_OK);
        CHECK(memcmp(o0, o1, (size_t)(Pc * N) * 4) == 0,
              "C%lld KW%lld, %d thread(s): bf16 AMX GEMM from rows on demand differs from the "
              "patch matrix's", (long long)g->C, (long long)g->KW, nt);
        /* B packed once beforehand (a convolution's weights for all its chunks) */
        uint16_t *bp = aligned_alloc(64, ((size_t)fx_bf16_amx_b_numel(K, N) * 2 + 63) / 64 * 64);
        fx_bf16_amx_pack_b((const uint16_t *)w, N, 1, K, N, bp);
        c.b_amx = bp;
        memset(o1, 0xFF, (size_t)(Pc * N) * 4);
        CHECK_STATUS(fx_bf16_matmul_amx(&c), FX_OK);
        CHECK(memcmp(o0, o1, (size_t)(Pc * N) * 4) == 0,
              "C%lld KW%lld, %d thread(s): bf16 AMX GEMM with B packed beforehand differs",
              (long long)g->C, (long long)g->KW, nt);
        c.b_amx = NULL;
        free(bp);
        c.in[1].fmt = FMT_FP32;
        CHECK(fx_bf16_matmul_amx(&c) == FX_EUNSUPPORTED,
              "rows on demand with a non-bf16 B are refused");
    }
    free(x);
    free(xp);
    free(col);
    free(w);
    free(o0);
    free(o1);
}

static void check_case(const geo_case *cs, test_rng *rng, int avx512, int avx2)
{
    const fx_conv_geom g = geom_of(cs);
    const int64_t nb = cs->nb, K = g.C * g.KH * g.KW, kp = (K + 1) / 2;
    const int64_t Pc = nb * g.OH * g.OW, npan = (Pc + 5) / 6;
    const int64_t xn = g.N * g.C * g.H * g.W;
    const int64_t xpn = fx_conv_padded_numel(&g, nb) + FX_CONV_PANEL_SLACK;
    int16_t *x = malloc((size_t)xn * 2), *xp = calloc((size_t)xpn, 2);
    int16_t *colT = malloc((size_t)(Pc * K + FX_CONV_PAD_SLACK) * 2);
    const int64_t pn = fx_conv_panels_numel(&g, nb, 6);
    int32_t *ref = malloc((size_t)pn * 4), *port = malloc((size_t)pn * 4);
    int32_t *vec = malloc((size_t)pn * 4);
    CHECK(pn == npan * 6 * kp, "panel size %lld", (long long)pn);
    for (int64_t i = 0; i < xn; i++) x[i] = (int16_t)(test_rng_u64(rng) & 0xFFFF);
    fx_conv_pad(&g, x, 0, nb, xp, sizeof(int16_t));
    fx_im2row_i16(&g, xp, nb, colT, 1);
    for (int64_t q = 0; q < npan; q++)
        for (int64_t p = 0; p < kp; p++)
            for (int i = 0; i < 6; i++) {
                const int64_t m = q * 6 + i;
                uint32_t lo = 0, hi = 0;
                if (m < Pc) {
                    lo = (uint16_t)colT[m * K + 2 * p];
                    hi = 2 * p + 1 < K ? (uint16_t)colT[m * K + 2 * p + 1] : 0u;
                }
                ref[(q * kp + p) * 6 + i] = (int32_t)(lo | (hi << 16));
            }
    memset(port, 0x5A, (size_t)pn * 4); /* every element must be written */
    fx_conv_panels_i16(&g, xp, nb, 6, port);
    int64_t bad = 0;
    for (int64_t i = 0; i < pn; i++) bad += port[i] != ref[i];
    CHECK(bad == 0, "C%lld KW%lld: %lld portable panel values differ from im2row", (long long)g.C,
          (long long)g.KW, (long long)bad);
    check_conv_rows(&g, nb, xp, colT, Pc);
    check_wgrad_rows(&g, nb, xp, colT, Pc);
    for (int bi = FX_BACKEND_AVX2; bi < FX_BACKEND_COUNT; bi++) {
        const fx_backend *be = fx_backend_get(bi);
        if (!be->available || !be->conv.panels_i16) continue;
        memset(vec, 0x5A, (size_t)pn * 4);
        const int took = be->conv.panels_i16(&g, xp, nb, 6, vec);
        CHECK(took == fx_conv_panels_fit(&g, 6), "%s KW %lld dw %lld: builder took %d", be->name,
              (long long)g.KW, (long long)g.dw, took);
        if (took) {
            bad = 0;
            for (int64_t i = 0; i < pn; i++) bad += vec[i] != ref[i];
            CHECK(bad == 0, "%s C%lld KW%lld sw%lld dw%lld: %lld panel values differ", be->name,
                  (long long)g.C, (long long)g.KW, (long long)g.sw, (long long)g.dw,
                  (long long)bad);
        }
        CHECK(be->conv.panels_i16(&g, xp, nb, 8, vec) == 0, "%s: mr 8 is declined", be->name);
    }

    /* the GEMM from panels against the GEMM from the patch matrix, N = 40 (a column tail) */
    const int64_t N = 40;
    int16_t *w = malloc((size_t)(K * N) * 2);
    int64_t *c0 = malloc((size_t)(Pc * N) * 8), *c1 = malloc((size_t)(Pc * N) * 8);
    for (int64_t i = 0; i < K * N; i++) w[i] = (int16_t)(test_rng_u64(rng) & 0xFFFF);
    const fx_operand A = op2d(colT, Pc, K, K, 1), B = op2d(w, K, N, N, 1);
    const fx_operand Ashape = op2d(NULL, Pc, K, K, 1);
    fx_kernel kers[2] = {fx_flex_matmul_avx512bw, fx_flex_matmul_avx512vnni};
    const int nk = !avx512 ? 0 : (fx_cpu()->avx512vnni ? 2 : 1);
    for (int ki = 0; ki < nk; ki++)
        for (int mode = 0; mode < 2; mode++) {
            fx_gemm_i16_set_mode(mode ? FX_GEMM_I16_NORM_ALWAYS : FX_GEMM_I16_AUTO);
            CHECK_STATUS(run_gemm(kers[ki], A, NULL, B, c0), FX_OK);
            CHECK_STATUS(run_gemm(kers[ki], Ashape, ref, B, c1), FX_OK);
            CHECK(memcmp(c0, c1, (size_t)(Pc * N) * 8) == 0,
                  "C%lld KW%lld kernel %d mode %d: GEMM from panels differs", (long long)g.C,
                  (long long)g.KW, ki, mode);
        }
    /* outputs of at most 16 columns take the AVX-512 narrow tile (6 x 16): from plain operands
     * and from A panels, against the exact sums; forcing wrap keeps the wrap kernel */
    for (int nn = 0; nn < 2 && nk; nn++) {
        const int64_t Nn = nn ? 16 : 9;
        int16_t *wn = malloc((size_t)(K * Nn) * 2);
        int64_t *want = malloc((size_t)(Pc * Nn) * 8), *got = malloc((size_t)(Pc * Nn) * 8);
        for (int64_t i = 0; i < K * Nn; i++) wn[i] = (int16_t)(test_rng_u64(rng) & 0xFFFF);
        for (int64_t i = 0; i < Pc; i++)
            for (int64_t j = 0; j < Nn; j++) {
                int64_t acc = 0;
                for (int64_t k = 0; k < K; k++) acc += (int64_t)colT[i * K + k] * wn[k * Nn + j];
                want[i * Nn + j] = acc;
            }
        const fx_operand Bn = op2d(wn, K, Nn, Nn, 1);
        CHECK(fx_gemm_i16_narrow(Nn) && !fx_gemm_i16_narrow(Nn + 17) && !fx_gemm_i16_narrow(0),
              "N = %lld takes the narrow tile, N = %lld and 0 do not", (long long)Nn,
              (long long)(Nn + 17));
        for (int ki = 0; ki < nk; ki++)
            for (int mode = 0; mode < 2; mode++) {
                fx_gemm_i16_set_mode(mode ? FX_GEMM_I16_NORM_ALWAYS : FX_GEMM_I16_AUTO);
                memset(got, 0, (size_t)(Pc * Nn) * 8);
                CHECK_STATUS(run_gemm(kers[ki], A, NULL, Bn, got), FX_OK);
                CHECK(memcmp(got, want, (size_t)(Pc * Nn) * 8) == 0,
                      "C%lld KW%lld N %lld kernel %d mode %d: narrow GEMM differs from the exact "
                      "sums", (long long)g.C, (long long)g.KW, (long long)Nn, ki, mode);
                memset(got, 0, (size_t)(Pc * Nn) * 8);
                CHECK_STATUS(run_gemm(kers[ki], Ashape, ref, Bn, got), FX_OK);
                CHECK(memcmp(got, want, (size_t)(Pc * Nn) * 8) == 0,
                      "C%lld KW%lld N %lld kernel %d mode %d: narrow GEMM from panels differs",
                      (long long)g.C, (long long)g.KW, (long long)Nn, ki, mode);
            }
        fx_gemm_i16_set_mode(FX_GEMM_I16_AUTO);
        if (nk == 2) { /* forced wrap: the 6 x 32 wrap kernel, not the narrow tile */
            CHECK_STATUS(fx_gemm_i16_force_kernel(FX_GEMM_I16_KERNEL_WRAP), FX_OK);
            CHECK(!fx_gemm_i16_narrow(Nn), "forcing wrap turns the narrow tile off");
            memset(got, 0, (size_t)(Pc * Nn) * 8);
            CHECK_STATUS(run_gemm(kers[1], A, NULL, Bn, got), FX_OK);
            CHECK(memcmp(got, want, (size_t)(Pc * Nn) * 8) == 0,
                  "C%lld KW%lld N %lld: forced wrap GEMM differs", (long long)g.C,
                  (long long)g.KW, (long long)Nn);
            CHECK_STATUS(fx_gemm_i16_force_kernel(FX_GEMM_I16_KERNEL_AUTO), FX_OK);
        }
        free(wn);
        free(want);
        free(got);
    }
    /* every register-tile kernel from the convolution's rows on demand */
    int64_t *g_off = malloc((size_t)(g.C * g.KH) * sizeof *g_off);
    fx_group_offsets_fill(&g, g_off);
    const fx_conv_rows cr = {&g, xp, g_off, 0};
    fx_kernel rk[3] = {avx2 ? fx_flex_matmul_avx2 : NULL, avx512 ? fx_flex_matmul_avx512bw : NULL,
                       avx512 && fx_cpu()->avx512vnni ? fx_flex_matmul_avx512vnni : NULL};
    for (int ki = 0; ki < 3; ki++)
        for (int mode = 0; rk[ki] && mode < 2; mode++) {
            fx_gemm_i16_set_mode(mode ? FX_GEMM_I16_NORM_ALWAYS : FX_GEMM_I16_AUTO);
            CHECK_STATUS(run_gemm(rk[ki], A, NULL, B, c0), FX_OK);
            memset(c1, 0, (size_t)(Pc * N) * 8);
            CHECK_STATUS(run_gemm_rows(rk[ki], Ashape, fx_conv_rows_i16, &cr, B, c1), FX_OK);
            CHECK(memcmp(c0, c1, (size_t)(Pc * N) * 8) == 0,
                  "C%lld KW%lld kernel %d mode %d: GEMM from rows on demand differs",
                  (long long)g.C, (long long)g.KW, ki, mode);
        }
    fx_gemm_i16_set_mode(FX_GEMM_I16_AUTO);
    CHECK(run_gemm_rows(fx_flex_matmul_scalar, Ashape, fx_conv_rows_i16, &cr, B, c1) ==
              FX_EUNSUPPORTED, "the scalar kernel refuses rows on demand");
    if (avx2) /* one source of A: panels and rows together are refused */
        CHECK(run_gemm_any(fx_flex_matmul_avx2, Ashape, ref, fx_conv_rows_i16, &cr, B, c1) ==
                  FX_EUNSUPPORTED,
              "panels and rows on demand together are refused");
    if (avx512 && fx_amx_bf16_usable(fx_cpu())) check_bf16_amx_rows(&g, nb, g_off, rng);
    free(g_off);
    CHECK(run_gemm(fx_flex_matmul_scalar, Ashape, ref, B, c1) == FX_EUNSUPPORTED,
          "the scalar kernel refuses panels");
    free(w);
    free(c0);
    free(c1);
    free(x);
    free(xp);
    free(colT);
    free(ref);
    free(port);
    free(vec);
}

/* Elements whose bits differ; with nan_any, two NaNs of the same sign count as equal: the
 * vector widening of fp16 (vcvtph2ps, as in the GEMM's own packing, src/fp32/f32_avx512.c)
 * quiets signalling NaNs, which the scalar definition keeps. */
static int64_t same_floats(const float *a, const float *b, int64_t n, int nan_any)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, &a[i], 4);
        memcpy(&y, &b[i], 4);
        if (x == y) continue;
        if (nan_any && a[i] != a[i] && b[i] != b[i] && (x >> 31) == (y >> 31)) continue;
        bad++;
    }
    return bad;
}

/* fp32 GEMM panels of height mr from fp32, fp16 and bf16 inputs: portable and each vector
 * builder whose level's fp32 tile has that height (AVX2: 6, AVX-512: 12) against the im2row
 * matrix widened by the scalar definitions, and that level's fp32 GEMM from panels against
 * its GEMM from the im2row matrix, bit for bit. */
static void check_case_f32(const geo_case *cs, test_rng *rng, int64_t mr)
{
    static const fmt_t fmts[3] = {FMT_FP32, FMT_FP16, FMT_BF16};
    const fx_conv_geom g = geom_of(cs);
    const int64_t nb = cs->nb, K = g.C * g.KH * g.KW, Pc = nb * g.OH * g.OW;
    const int64_t npan = (Pc + mr - 1) / mr, xn = g.N * g.C * g.H * g.W;
    const int64_t xpn = fx_conv_padded_numel(&g, nb) + FX_CONV_PANEL_SLACK;
    const int64_t pn = fx_conv_panels_f32_numel(&g, nb, (int)mr);
    CHECK(pn == npan * mr * K, "fp32 panel size %lld", (long long)pn);
    float *x = malloc((size_t)xn * 4), *xp = calloc((size_t)xpn, 4);
    float *colT = malloc((size_t)(Pc * K + FX_CONV_PAD_SLACK) * 4);
    float *ref = malloc((size_t)pn * 4), *port = malloc((size_t)pn * 4), *vec = malloc((size_t)pn * 4);
    const int64_t N = 40;
    float *w = malloc((size_t)(K * N) * 4), *c0 = malloc((size_t)(Pc * N) * 4), *c1 = malloc((size_t)(Pc * N) * 4);
    for (int64_t i = 0; i < K * N; i++) w[i] = (float)test_rng_normal(rng);
    for (int f = 0; f < 3; f++) {
        const fmt_t fmt = fmts[f];
        const size_t esz = fmt == FMT_FP32 ? 4 : 2;
        /* inputs: random bit patterns of the format (NaN and Inf included: bits are moved) */
        for (int64_t i = 0; i < xn; i++) {
            const uint64_t r = test_rng_u64(rng);
            if (esz == 4) {
                const uint32_t b32 = (uint32_t)r;
                memcpy(&x[i], &b32, 4);
            } else {
                ((uint16_t *)x)[i] = (uint16_t)r;
            }
        }
        memset(xp, 0, (size_t)xpn * 4);
        fx_conv_pad(&g, x, 0, nb, xp, esz);
        if (esz == 4)
            fx_im2row_f32(&g, xp, nb, colT, 1);
        else
            fx_im2row_i16(&g, (const int16_t *)xp, nb, (int16_t *)colT, 1);
        for (int64_t q = 0; q < npan; q++)
            for (int64_t k = 0; k < K; k++)
                for (int i = 0; i < mr; i++) {
                    const int64_t m = q * mr + i;
                    float v = 0.0f;
                    if (m < Pc && esz == 4) v = colT[m * K + k];
                    if (m < Pc && esz == 2) {
                        const uint16_t h = ((const uint16_t *)colT)[m * K + k];
                        v = fmt == FMT_FP16 ? fx_fp16_to_f32(h) : fx_bf16_to_f32(h);
                    }
                    ref[(q * K + k) * mr + i] = v;
                }
        memset(port, 0x5A, (size_t)pn * 4);
        fx_conv_panels_f32(&g, xp, fmt, nb, (int)mr, port);
        CHECK(memcmp(port, ref, (size_t)pn * 4) == 0, "fmt %d C%lld KW%lld: portable fp32 panels differ",
              (int)fmt, (long long)g.C, (long long)g.KW);
        for (int bi = FX_BACKEND_AVX2; bi < FX_BACKEND_COUNT; bi++) {
            const fx_backend *be = fx_backend_get(bi);
            if (!be->available || !be->conv.panels_f32) continue;
            if (be->gemm.f32_panel_mr != mr) { /* another level's tile height is declined */
                CHECK(be->conv.panels_f32(&g, xp, fmt, nb, (int)mr, vec) == 0,
                      "%s: fp32 mr %lld is declined", be->name, (long long)mr);
                continue;
            }
            memset(vec, 0x5A, (size_t)pn * 4);
            const int took = be->conv.panels_f32(&g, xp, fmt, nb, (int)mr, vec);
            CHECK(took == fx_conv_panels_f32_fit(&g, (int)mr), "%s: fp32 builder took %d", be->name,
                  took);
            if (took)
                CHECK(same_floats(vec, ref, pn, fmt == FMT_FP16) == 0,
                      "%s fmt %d C%lld KW%lld sw%lld dw%lld: fp32 panels differ", be->name,
                      (int)fmt, (long long)g.C, (long long)g.KW, (long long)g.sw,
                      (long long)g.dw);
        }
        if (fmt != FMT_FP32) continue;
        /* the fp32 GEMM on finite values: from panels and from the patch matrix, same bits */
        for (int64_t i = 0; i < pn; i++)
            if (!(ref[i] == ref[i]) || ref[i] > 1e30f || ref[i] < -1e30f) ref[i] = 1.0f;
        for (int64_t m = 0; m < Pc; m++)
            for (int64_t k = 0; k < K; k++) colT[m * K + k] = ref[((m / mr) * K + k) * mr + m % mr];
        for (int bi = FX_BACKEND_AVX2; bi < FX_BACKEND_COUNT; bi++) {
            const fx_backend *be = fx_backend_get(bi);
            if (!be->available || be->gemm.f32_panel_mr != mr) continue;
            fx_operand A, B;
            memset(&A, 0, sizeof A);
            A.data = colT, A.fmt = FMT_FP32, A.ndim = 2, A.shape[0] = Pc, A.shape[1] = K;
            A.strides[0] = K, A.strides[1] = 1;
            B = A;
            B.data = w, B.shape[0] = K, B.shape[1] = N, B.strides[0] = N;
            fx_op_call c;
            memset(&c, 0, sizeof c);
            int e = 0;
            c.op = FX_OP_MATMUL, c.nin = 2, c.in[0] = A, c.in[1] = B, c.out_ndim = 2;
            c.out_shape[0] = Pc, c.out_shape[1] = N, c.out_numel = Pc * N, c.out_exp = &e;
            c.nthreads = 1, c.out_f32 = c0;
            CHECK_STATUS(be->kernels[FX_OP_MATMUL][FMT_FP32](&c), FX_OK);
            c.in[0].data = NULL, c.a_panels = ref, c.a_panels_mr = (int)mr, c.out_f32 = c1;
            CHECK_STATUS(be->kernels[FX_OP_MATMUL][FMT_FP32](&c), FX_OK);
            CHECK(memcmp(c0, c1, (size_t)(Pc * N) * 4) == 0,
                  "%s C%lld KW%lld: fp32 GEMM from panels differs", be->name, (long long)g.C,
                  (long long)g.KW);
            c.a_panels_mr = mr == 6 ? 12 : 6;
            CHECK(be->kernels[FX_OP_MATMUL][FMT_FP32](&c) == FX_EUNSUPPORTED,
                  "%s: wrong mr refused", be->name);
        }
    }
    free(x), free(xp), free(colT), free(ref), free(port), free(vec), free(w), free(c0), free(c1);
}

/* A rows source over a plain row-major matrix that also fills both slacks of every row with
 * 32767, which the GEMM must neither pack nor count in its norms. */
typedef struct mat_rows {
    const int16_t *a;
    int64_t K;
} mat_rows;

static void mat_rows_fn(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int16_t *dst,
                        int64_t ld)
{
    const mat_rows *mr = ctx;
    for (int r = 0; r < m; r++) {
        int16_t *row = dst + r * ld;
        for (int64_t t = -FX_A_ROWS_SLACK; t < kc + FX_A_ROWS_SLACK; t++)
            row[t] = t < 0 || t >= kc ? 32767 : mr->a[(i0 + r) * mr->K + k0 + t];
    }
}

/* The GEMM's norm test on rows taken on demand (fx_op_call.a_rows), on every level that takes
 * them: each 6-row tile has one hot row (32767 over one norm segment, a different row and
 * segment per tile) among small values, and B one hot column, so the hot products wrap an
 * int32 chain: a norm that misses the hot row sends its tile to the fast kernel and the sums
 * come out wrong. */
static void check_rows_norms(test_rng *rng)
{
    const int64_t M = 58, K = 203 + 2 * FX_GEMM_I16_KC, N = 40, ntile = (M + 5) / 6;
    const int64_t nseg = (K / 2 + FX_GEMM_I16_SEG - 1) / FX_GEMM_I16_SEG;
    int16_t *a = malloc((size_t)(M * K) * 2), *b = malloc((size_t)(K * N) * 2);
    int64_t *want = malloc((size_t)(M * N) * 8), *got = malloc((size_t)(M * N) * 8);
    for (int64_t i = 0; i < M * K; i++) a[i] = (int16_t)((int64_t)(test_rng_u64(rng) % 129) - 64);
    for (int64_t i = 0; i < K * N; i++) b[i] = (int16_t)((int64_t)(test_rng_u64(rng) % 129) - 64);
    for (int64_t q = 0; q < ntile; q++) { /* hot row q % 6 of tile q, over segment 5q % nseg */
        const int64_t m = q * 6 + q % 6, k0 = (5 * q % nseg) * 2 * FX_GEMM_I16_SEG;
        for (int64_t k = k0; m < M && k < K && k < k0 + 2 * FX_GEMM_I16_SEG; k++) a[m * K + k] = 32767;
    }
    for (int64_t k = 0; k < K; k++) b[k * N + 17] = 32767;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            int64_t sum = 0;
            for (int64_t k = 0; k < K; k++) sum += (int64_t)a[i * K + k] * b[k * N + j];
            want[i * N + j] = sum;
        }
    const mat_rows src = {a, K};
    const fx_operand Ashape = op2d(NULL, M, K, K, 1), B = op2d(b, K, N, N, 1);
    for (int bi = FX_BACKEND_AVX2; bi < FX_BACKEND_COUNT; bi++) {
        const fx_backend *be = fx_backend_get(bi);
        if (!be->available || !be->gemm.i16_row_source) continue;
        fx_gemm_i16_set_mode(FX_GEMM_I16_NORM_ALWAYS);
        fx_gemm_i16_reset_tile_counts();
        memset(got, 0, (size_t)(M * N) * 8);
        CHECK_STATUS(run_gemm_rows(be->kernels[FX_OP_MATMUL][FMT_FLEX16_5], Ashape, mat_rows_fn,
                                   &src, B, got), FX_OK);
        int64_t fast = 0, split = 0;
        fx_gemm_i16_tile_counts(&fast, &split);
        fx_gemm_i16_set_mode(FX_GEMM_I16_AUTO);
        CHECK(memcmp(got, want, (size_t)(M * N) * 8) == 0, "%s: GEMM from rows with hot rows differs",
              be->name);
        CHECK(fast > 0 && split > 0, "%s: both kernels ran (fast %lld, split %lld tiles)", be->name,
              (long long)fast, (long long)split);
    }
    free(a), free(b), free(want), free(got);
}

int main(void)
{
    const fx_cpu_features *cpu = fx_cpu();
    const int avx512 = cpu->avx512f && cpu->avx512bw && cpu->avx512vl;
    const int avx2 = fx_backend_get(FX_BACKEND_AVX2)->available;
    if (!avx512) printf("test_conv_panels: no AVX-512BW here; its builders are not run\n");
    if (!avx2) printf("test_conv_panels: no AVX2 here; portable panels only\n");
    test_rng rng;
    test_rng_seed(&rng, 20261122);
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
        check_case(&g_cases[i], &rng, avx512, avx2);
        check_case_f32(&g_cases[i], &rng, 6);
        check_case_f32(&g_cases[i], &rng, 12);
    }
    check_rows_norms(&rng);
    return test_finish("test_conv_panels");
}
