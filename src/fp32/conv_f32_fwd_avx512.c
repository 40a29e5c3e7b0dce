/* The fp32 forward convolution on AVX-512 without patch rows or panels (conv_f32_direct.h says
 * why, and why its bits are the GEMM route's).
 *
 * Register tile: MR pixels of one output row by NV vectors of 16 output channels. Per tap k,
 * the NV weight vectors of the block and, for each pixel, its tap broadcast from the padded
 * input at the pixel's base + off[k], then NV FMAs. NV = 2 (32 channels) takes up to 12 pixels
 * (24 accumulators, the GEMM's 12 x 32 tile), NV = 1 (the last 16 or fewer channels: ResNet-20's
 * 16-channel stage) up to 16. An output row of OW pixels is cut into tiles of near-equal widths
 * (32: 11 + 11 + 10 at NV = 2, 16 + 16 at NV = 1), so no lane computes a pixel that is not there.
 * Each accumulator is one FMA chain over the K taps in order from +0, as in the GEMM's kernel
 * (f32_ukernel_tmpl.h): the same bits as the panels. */
#include "conv_f32_direct.h"
#include "../nn/im2col.h"

#include <immintrin.h>

#define MR_MAX_2 12 /* pixels per tile at 32 channels */
#define MR_MAX_1 16 /* pixels per tile at 16 channels */

#define FX_PRAGMA(x) _Pragma(#x)
#define FX_UNROLL(n) FX_PRAGMA(GCC unroll n)

/* One tile: MR pixels (x0: the first one's top-left tap, ps floats between pixels) by NV x 16
 * output channels (w0, w1: the blocks' packed weights, 16 per tap), the chains over the K taps
 * at off[k]; channel j of pixel r stored at out + r ldo + j where the masks m0 (first 16) and
 * m1 (next 16) have bit j. */
static inline __attribute__((always_inline)) void
ftile(const int MR, const int NV, const float *x0, int64_t ps, const int64_t *off, int64_t K,
      const float *w0, const float *w1, float *out, int64_t ldo, __mmask16 m0, __mmask16 m1)
{
    __m512 acc[MR_MAX_1][2];
    FX_UNROLL(16)
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const __m512 b0 = _mm512_loadu_ps(w0 + 16 * k);
        const __m512 b1 = NV > 1 ? _mm512_loadu_ps(w1 + 16 * k) : b0;
        const float *xk = x0 + off[k];
        FX_UNROLL(16)
        for (int r = 0; r < MR; r++) {
            const __m512 a = _mm512_set1_ps(xk[r * ps]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            if (NV > 1) acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    FX_UNROLL(16)
    for (int r = 0; r < MR; r++) {
        _mm512_mask_storeu_ps(out + r * ldo, m0, acc[r][0]);
        if (NV > 1) _mm512_mask_storeu_ps(out + r * ldo + 16, m1, acc[r][1]);
    }
}

typedef void (*ftile_fn)(const float *, int64_t, const int64_t *, int64_t, const float *,
                         const float *, float *, int64_t, __mmask16, __mmask16);
#define FTILE_FN(NV, MR)                                                                          \
    static void ftile_##NV##_##MR(const float *x0, int64_t ps, const int64_t *off, int64_t K,     \
                                  const float *w0, const float *w1, float *out, int64_t ldo,      \
                                  __mmask16 m0, __mmask16 m1)                                     \
    {                                                                                             \
        ftile(MR, NV, x0, ps, off, K, w0, w1, out, ldo, m0, m1);                                  \
    }
#define FTILE_FNS_12(NV)                                                                          \
    FTILE_FN(NV, 1) FTILE_FN(NV, 2) FTILE_FN(NV, 3) FTILE_FN(NV, 4) FTILE_FN(NV, 5)                \
    FTILE_FN(NV, 6) FTILE_FN(NV, 7) FTILE_FN(NV, 8) FTILE_FN(NV, 9) FTILE_FN(NV, 10)               \
    FTILE_FN(NV, 11) FTILE_FN(NV, 12)
FTILE_FNS_12(1)
FTILE_FNS_12(2)
FTILE_FN(1, 13)
FTILE_FN(1, 14)
FTILE_FN(1, 15)
FTILE_FN(1, 16)

static const ftile_fn tiles_1[MR_MAX_1] = {
    ftile_1_1, ftile_1_2,  ftile_1_3,  ftile_1_4,  ftile_1_5,  ftile_1_6,  ftile_1_7,  ftile_1_8,
    ftile_1_9, ftile_1_10, ftile_1_11, ftile_1_12, ftile_1_13, ftile_1_14, ftile_1_15, ftile_1_16};
static const ftile_fn tiles_2[MR_MAX_2] = {ftile_2_1, ftile_2_2,  ftile_2_3,  ftile_2_4,
                                           ftile_2_5, ftile_2_6,  ftile_2_7,  ftile_2_8,
                                           ftile_2_9, ftile_2_10, ftile_2_11, ftile_2_12};

static __mmask16 lanes(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }

void fx_f32_fwd_direct_avx512(const struct fx_conv_geom *g, const float *xp, int64_t nbc,
                              const float *wq, const int64_t *off, float *y, int nthreads)
{
    const int64_t C = g->C, O = g->O, K = C * g->KH * g->KW;
    const int64_t HW = (g->H + 2 * g->ph) * (g->W + 2 * g->pw), Wp = g->W + 2 * g->pw;
    const int64_t OH = g->OH, OW = g->OW, P = OH * OW;
    (void)nthreads; /* without OpenMP */
    for (int64_t o0 = 0; o0 < O; o0 += 32) {
        const int NV = O - o0 > 16 ? 2 : 1;
        const __mmask16 m0 = lanes(O - o0), m1 = NV > 1 ? lanes(O - o0 - 16) : 0;
        const float *w0 = wq + (o0 / 16) * K * 16, *w1 = NV > 1 ? w0 + K * 16 : w0;
        const ftile_fn *fns = NV > 1 ? tiles_2 : tiles_1;
        const int64_t mr_max = NV > 1 ? MR_MAX_2 : MR_MAX_1;
        /* an output row in ntile tiles of near-equal widths, the wider ones first */
        const int64_t ntile = (OW + mr_max - 1) / mr_max, wide = OW % ntile, base = OW / ntile;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1)
#endif
        for (int64_t row = 0; row < nbc * OH; row++) {
            const int64_t n = row / OH, oh = row % OH;
            const float *xrow = xp + n * C * HW + oh * g->sh * Wp;
            int64_t ow0 = 0;
            for (int64_t t = 0; t < ntile; t++) {
                const int w = (int)(base + (t < wide));
                fns[w - 1](xrow + ow0 * g->sw, g->sw, off, K, w0, w1,
                           y + (n * P + oh * OW + ow0) * O + o0, O, m0, m1);
                ow0 += w;
            }
        }
    }
    fx_f32_fwd_direct_count();
}
