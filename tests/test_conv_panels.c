/* Implicit-GEMM A panels of the integer convolution (src/nn/conv_panels.h).
 *
 * For convolution geometries covering odd and even kernel widths, 1x1 to 10-wide kernels,
 * strides, dilations, one input channel, outputs narrower than a 6-row panel (panels that span
 * output rows and samples) and a partial last panel, with random int16 inputs over the whole
 * range:
 *   - the portable panels equal the im2row patch matrix packed as gemm_i16.h defines;
 *   - the AVX-512 builder (where the CPU has it) writes the same int32 values, or declines
 *     exactly the geometries fx_conv_panels_fit rejects;
 *   - the exact GEMM fed with the panels gives the same int64 sums as the GEMM fed with the
 *     patch matrix, for the split kernel and for the norm-checked fast kernel;
 *   - kernels that cannot take panels refuse them with FX_EUNSUPPORTED.
 * The convolution's own results are checked against fp64 and across backends in
 * test_nn_conv. */
#include "core/backend.h"
#include "flex/flex_kernels.h"
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

static int run_gemm(fx_kernel k, fx_operand a, const int32_t *panels, fx_operand b,
                    int64_t *out)
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
    c.nthreads = 1;
    c.a_panels = panels;
    c.a_panels_mr = panels ? 6 : 0;
    return k(&c);
}

static void check_case(const geo_case *cs, test_rng *rng, int avx512)
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
    if (avx512) {
        memset(vec, 0x5A, (size_t)pn * 4);
        const int took = fx_conv_panels_i16_avx512(&g, xp, nb, 6, vec);
        CHECK(took == fx_conv_panels_fit(&g, 6), "KW %lld dw %lld: builder took %d",
              (long long)g.KW, (long long)g.dw, took);
        if (took) {
            bad = 0;
            for (int64_t i = 0; i < pn; i++) bad += vec[i] != ref[i];
            CHECK(bad == 0, "C%lld KW%lld sw%lld dw%lld: %lld AVX-512 panel values differ",
                  (long long)g.C, (long long)g.KW, (long long)g.sw, (long long)g.dw,
                  (long long)bad);
        }
        CHECK(fx_conv_panels_i16_avx512(&g, xp, nb, 8, vec) == 0, "mr 8 is declined");
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
    fx_gemm_i16_set_mode(FX_GEMM_I16_AUTO);
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

int main(void)
{
    const fx_cpu_features *cpu = fx_cpu();
    const int avx512 = cpu->avx512f && cpu->avx512bw && cpu->avx512vl;
    if (!avx512) printf("test_conv_panels: no AVX-512BW here; portable panels only\n");
    test_rng rng;
    test_rng_seed(&rng, 20261122);
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) check_case(&g_cases[i], &rng, avx512);
    return test_finish("test_conv_panels");
}
