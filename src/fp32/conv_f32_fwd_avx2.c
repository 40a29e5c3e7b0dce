/* The fp32 forward convolution on AVX2 without patch rows or panels (conv_f32_direct.h says
 * why, and why its bits are the GEMM route's).
 *
 * Register tile: MR (1..6) pixels of one output row by 16 output channels, the GEMM's 6 x 16
 * micro-kernel: 12 accumulators, 2 weight vectors and the broadcast. Per tap k, the two weight
 * vectors of the block and, for each pixel, its tap broadcast from the padded input at the
 * pixel's base + off[k], then two FMAs. An output row of OW pixels is cut into ceil(OW / 6)
 * tiles of near-equal widths (the CNN's 14: 5 + 5 + 4), so no lane computes a pixel that is not
 * there. The accumulators are named values, not an array, so that GCC keeps all twelve in
 * registers. */
#include "conv_f32_direct.h"
#include "../nn/im2col.h"

#include <immintrin.h>

#define MR_MAX 6

#define FX_F32_ROWS(X)                                                                            \
    X(0, c00, c01) X(1, c10, c11) X(2, c20, c21) X(3, c30, c31) X(4, c40, c41) X(5, c50, c51)

/* One tile: MR pixels (x0: the first one's top-left tap, ps floats between pixels) by 16
 * output channels (wb: the block's packed weights, 16 per tap), the chains over the K taps
 * at off[k]; the first ncols channels stored at out (pixel r at out + r ldo). */
static inline __attribute__((always_inline)) void
ftile(const int MR, const float *x0, int64_t ps, const int64_t *off, int64_t K, const float *wb,
      float *out, int64_t ldo, int ncols)
{
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
    const float *x1 = x0 + ps, *x2 = x0 + 2 * ps, *x3 = x0 + 3 * ps, *x4 = x0 + 4 * ps;
    const float *x5 = x0 + 5 * ps;
    for (int64_t k = 0; k < K; k++) {
        const __m256 b0 = _mm256_load_ps(wb + 16 * k), b1 = _mm256_load_ps(wb + 16 * k + 8);
        const int64_t o = off[k];
#define FX_STEP(r, a0, a1)                                                                         \
    if (MR > r) {                                                                                  \
        const __m256 ar = _mm256_broadcast_ss(x##r + o);                                           \
        a0 = _mm256_fmadd_ps(ar, b0, a0);                                                          \
        a1 = _mm256_fmadd_ps(ar, b1, a1);                                                          \
    }
        FX_F32_ROWS(FX_STEP)
#undef FX_STEP
    }
#define FX_STORE(r, a0, a1)                                                                        \
    if (MR > r) {                                                                                  \
        float *d = out + r * ldo;                                                                  \
        if (ncols == 16) {                                                                         \
            _mm256_storeu_ps(d, a0);                                                               \
            _mm256_storeu_ps(d + 8, a1);                                                           \
        } else {                                                                                   \
            float t[16];                                                                           \
            _mm256_storeu_ps(t, a0);                                                               \
            _mm256_storeu_ps(t + 8, a1);                                                           \
            for (int j = 0; j < ncols; j++) d[j] = t[j];                                           \
        }                                                                                          \
    }
    FX_F32_ROWS(FX_STORE)
#undef FX_STORE
}

typedef void (*ftile_fn)(const float *, int64_t, const int64_t *, int64_t, const float *,
                         float *, int64_t, int);
#define FTILE_FN(MR)                                                                              \
    static void ftile_##MR(const float *x0, int64_t ps, const int64_t *off, int64_t K,            \
                           const float *wb, float *out, int64_t ldo, int ncols)                   \
    {                                                                                             \
        ftile(MR, x0, ps, off, K, wb, out, ldo, ncols);                                           \
    }
FTILE_FN(1)
FTILE_FN(2)
FTILE_FN(3)
FTILE_FN(4)
FTILE_FN(5)
FTILE_FN(6)
static const ftile_fn tile_fns[MR_MAX] = {ftile_1, ftile_2, ftile_3, ftile_4, ftile_5, ftile_6};

void fx_f32_fwd_direct_avx2(const struct fx_conv_geom *g, const float *xp, int64_t nbc,
                            const float *wq, const int64_t *off, float *y, int nthreads)
{
    const int64_t C = g->C, O = g->O, K = C * g->KH * g->KW;
    const int64_t HW = (g->H + 2 * g->ph) * (g->W + 2 * g->pw), Wp = g->W + 2 * g->pw;
    const int64_t OH = g->OH, OW = g->OW, P = OH * OW;
    /* an output row in ntile tiles of near-equal widths, the wider ones first */
    const int64_t ntile = (OW + MR_MAX - 1) / MR_MAX, wide = OW % ntile, base = OW / ntile;
    (void)nthreads; /* without OpenMP */
    for (int64_t o0 = 0; o0 < O; o0 += 16) {
        const int ncols = O - o0 < 16 ? (int)(O - o0) : 16;
        const float *wb = wq + (o0 / 16) * K * 16;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1)
#endif
        for (int64_t row = 0; row < nbc * OH; row++) {
            const int64_t n = row / OH, oh = row % OH;
            const float *xrow = xp + n * C * HW + oh * g->sh * Wp;
            int64_t ow0 = 0;
            for (int64_t t = 0; t < ntile; t++) {
                const int w = (int)(base + (t < wide));
                tile_fns[w - 1](xrow + ow0 * g->sw, g->sw, off, K, wb,
                                y + (n * P + oh * OW + ow0) * O + o0, O, ncols);
                ow0 += w;
            }
        }
    }
    fx_f32_fwd_direct_count();
}
