/* The fp32 weight gradient of one chunk on AVX-512 without patch panels or packing
 * (conv_f32_direct.h says why its bits are the GEMM route's).
 *
 * Register tile: MR rows of the transposed gradient dW^T (taps (c, kh, kw) in the GEMM's k
 * order) by NV vectors of 16 output channels. Per pixel of the chunk, in the GEMM's order
 * (image, output row, output column), the NV vectors of dy at that pixel (the transposed chunk
 * dy^T, masked past O) and, for each row, its tap of the pixel broadcast from the padded input,
 * then MR x NV FMAs: each sum one FMA chain over the chunk's pixels from +0, the GEMM's chain
 * for that output, with no panel built and no operand packed. NV = 2 takes up to 12 rows (24
 * sums, the GEMM's 12 x 32 tile), NV = 1 (the last 16 or fewer channels) up to 12 as well. */
#include "conv_f32_direct.h"
#include "../nn/im2col.h"

#include <immintrin.h>

#define WMR_MAX 12 /* rows per tile */

#define FX_PRAGMA(x) _Pragma(#x)
#define FX_UNROLL(n) FX_PRAGMA(GCC unroll n)

static __mmask16 lanes(int64_t n)
{
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* One tile: rows at xp + roff[r] (the padded chunk, image 0's tap of pixel (0, 0)), the
 * chunk's nbc images of OH x OW pixels, dy^T rows of ldy floats from dq (at the tile's first
 * output channel), the first m0 / m1 lanes of each vector; sums stored at out + r ldo. */
static inline __attribute__((always_inline)) void
wtile(const int MR, const int NV, const float *xp, const int64_t *roff,
      const struct fx_conv_geom *g, int64_t nbc, int64_t img, int64_t Wp, const float *dq,
      int64_t ldy, __mmask16 m0, __mmask16 m1, float *out, int64_t ldo)
{
    __m512 acc[WMR_MAX][2];
    FX_UNROLL(12)
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const float *rp[WMR_MAX];
    FX_UNROLL(12)
    for (int r = 0; r < MR; r++) rp[r] = xp + roff[r];
    const int64_t OH = g->OH, OW = g->OW, sw = g->sw, rowstep = g->sh * Wp;
    for (int64_t n = 0; n < nbc; n++)
        for (int64_t oh = 0; oh < OH; oh++) {
            const int64_t base = n * img + oh * rowstep;
            for (int64_t ow = 0; ow < OW; ow++, dq += ldy) {
                const int64_t j = base + ow * sw;
                const __m512 b0 = _mm512_maskz_loadu_ps(m0, dq);
                const __m512 b1 = NV > 1 ? _mm512_maskz_loadu_ps(m1, dq + 16) : b0;
                FX_UNROLL(12)
                for (int r = 0; r < MR; r++) {
                    const __m512 a = _mm512_set1_ps(rp[r][j]);
                    acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
                    if (NV > 1) acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
                }
            }
        }
    FX_UNROLL(12)
    for (int r = 0; r < MR; r++) {
        _mm512_mask_storeu_ps(out + r * ldo, m0, acc[r][0]);
        if (NV > 1) _mm512_mask_storeu_ps(out + r * ldo + 16, m1, acc[r][1]);
    }
}

typedef void (*wtile_fn)(const float *, const int64_t *, const struct fx_conv_geom *, int64_t,
                         int64_t, int64_t, const float *, int64_t, __mmask16, __mmask16, float *,
                         int64_t);
#define WTILE_FN(NV, MR)                                                                          \
    static void wtile_##NV##_##MR(const float *xp, const int64_t *roff,                           \
                                  const struct fx_conv_geom *g, int64_t nbc, int64_t img,         \
                                  int64_t Wp, const float *dq, int64_t ldy, __mmask16 m0,         \
                                  __mmask16 m1, float *out, int64_t ldo)                          \
    {                                                                                             \
        wtile(MR, NV, xp, roff, g, nbc, img, Wp, dq, ldy, m0, m1, out, ldo);                      \
    }
#define WTILE_FNS(NV)                                                                             \
    WTILE_FN(NV, 1) WTILE_FN(NV, 2) WTILE_FN(NV, 3) WTILE_FN(NV, 4) WTILE_FN(NV, 5)                \
    WTILE_FN(NV, 6) WTILE_FN(NV, 7) WTILE_FN(NV, 8) WTILE_FN(NV, 9) WTILE_FN(NV, 10)               \
    WTILE_FN(NV, 11) WTILE_FN(NV, 12)
WTILE_FNS(1)
WTILE_FNS(2)

static const wtile_fn wtiles_1[WMR_MAX] = {wtile_1_1, wtile_1_2,  wtile_1_3,  wtile_1_4,
                                           wtile_1_5, wtile_1_6,  wtile_1_7,  wtile_1_8,
                                           wtile_1_9, wtile_1_10, wtile_1_11, wtile_1_12};
static const wtile_fn wtiles_2[WMR_MAX] = {wtile_2_1, wtile_2_2,  wtile_2_3,  wtile_2_4,
                                           wtile_2_5, wtile_2_6,  wtile_2_7,  wtile_2_8,
                                           wtile_2_9, wtile_2_10, wtile_2_11, wtile_2_12};

void fx_f32_wgrad_direct_avx512(const struct fx_conv_geom *g, const float *xp, int64_t nbc,
                                const float *dyt, float *dwt, int nthreads)
{
    const int64_t O = g->O, K = g->C * g->KH * g->KW;
    const int64_t Wp = g->W + 2 * g->pw, img = g->C * (g->H + 2 * g->ph) * Wp;
    /* rows in tiles of near-equal heights, the taller ones first */
    const int64_t ntile = (K + WMR_MAX - 1) / WMR_MAX, tall = K % ntile, base = K / ntile;
    const int64_t nob = (O + 31) / 32, nunits = ntile * nob;
    (void)nthreads; /* without OpenMP */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1)
#endif
    for (int64_t u = 0; u < nunits; u++) {
        const int64_t t = u / nob, o0 = (u % nob) * 32;
        const int64_t k0 = t * base + (t < tall ? t : tall);
        const int mr = (int)(base + (t < tall));
        int64_t roff[WMR_MAX];
        for (int r = 0; r < mr; r++) roff[r] = fx_f32_tap_offset(g, k0 + r);
        const int NV = O - o0 > 16 ? 2 : 1;
        const __mmask16 m0 = lanes(O - o0), m1 = NV > 1 ? lanes(O - o0 - 16) : 0;
        const wtile_fn *fns = NV > 1 ? wtiles_2 : wtiles_1;
        fns[mr - 1](xp, roff, g, nbc, img, Wp, dyt + o0, O, m0, m1, dwt + k0 * O + o0, O);
    }
    fx_f32_wgrad_direct_count();
}
