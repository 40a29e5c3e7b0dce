/* The fp32 input gradient of a stride-1 convolution on AVX2 without a patch matrix or col2im
 * (conv_f32_direct.h says why its bits are the GEMM and col2im route's); the AVX-512 kernel
 * (conv_f32_dgrad_avx512.c) in eight lanes and sixteen registers.
 *
 * Register tile: MR pixels of one dx row by NV vectors of 8 input channels. Per tap t, in
 * col2im's (kh, kw) order, one FMA chain per tile value over dy's O channels from +0 (the GEMM's
 * chain for that patch-matrix entry), each step the NV weight vectors of (o, t) and, for each
 * pixel, dy at the tap's position broadcast from the padded chunk; then the chains are added to
 * the tile's sums (col2im's addition). NV = 2 takes up to 3 pixels (6 sums and 6 chains in
 * registers), NV = 1 (the last 8 or fewer channels) up to 6.
 * A dx row is cut into tiles of near-equal widths, as the forward kernel's output rows. */
#include "conv_f32_direct.h"
#include "../nn/im2col.h"

#include <immintrin.h>

#define DMR_MAX_2 3 /* pixels per tile at 16 channels */
#define DMR_MAX_1 6 /* pixels per tile at 8 channels */

#define FX_PRAGMA(x) _Pragma(#x)
#define FX_UNROLL(n) FX_PRAGMA(GCC unroll n)

/* the first n (1..8) lanes of v at p */
static inline __attribute__((always_inline)) void store8(float *p, __m256 v, int n)
{
    if (n == 8) {
        _mm256_storeu_ps(p, v);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    for (int j = 0; j < n; j++) p[j] = tmp[j];
}

/* One tile: MR pixels (d0: the first one's position in the padded dy of channel 0, plane
 * floats between channels) by NV x 8 input channels (w0: the block of 16's packed weights, O x
 * 16 per tap; w1 = w0 + 8, its upper half); live[t] == 0 skips tap t (its dy row is padding
 * for the whole dx row, so its chains are zeros: skipping them adds nothing). Channel j of
 * pixel r is stored at out + r ldo + j for the first n0 (of the first 8) and n1 (of the next 8)
 * channels. */
static inline __attribute__((always_inline)) void
dtile(const int MR, const int NV, const float *d0, int64_t plane, const int64_t *toff,
      const unsigned char *live, int64_t KK, int64_t O, const float *w0, const float *w1,
      float *out, int64_t ldo, int n0, int n1)
{
    __m256 sum[DMR_MAX_1][2];
    FX_UNROLL(6)
    for (int r = 0; r < MR; r++) sum[r][0] = sum[r][1] = _mm256_setzero_ps();
    for (int64_t t = 0; t < KK; t++) {
        if (!live[t]) continue;
        __m256 ch[DMR_MAX_1][2];
        FX_UNROLL(6)
        for (int r = 0; r < MR; r++) ch[r][0] = ch[r][1] = _mm256_setzero_ps();
        const float *dt = d0 + toff[t];
        const float *wa = w0 + t * O * 16, *wb = w1 + t * O * 16;
        for (int64_t o = 0; o < O; o++, dt += plane) {
            const __m256 b0 = _mm256_load_ps(wa + 16 * o);
            const __m256 b1 = NV > 1 ? _mm256_load_ps(wb + 16 * o) : b0;
            FX_UNROLL(6)
            for (int r = 0; r < MR; r++) {
                const __m256 a = _mm256_broadcast_ss(dt + r);
                ch[r][0] = _mm256_fmadd_ps(a, b0, ch[r][0]);
                if (NV > 1) ch[r][1] = _mm256_fmadd_ps(a, b1, ch[r][1]);
            }
        }
        FX_UNROLL(6)
        for (int r = 0; r < MR; r++) {
            sum[r][0] = _mm256_add_ps(sum[r][0], ch[r][0]);
            if (NV > 1) sum[r][1] = _mm256_add_ps(sum[r][1], ch[r][1]);
        }
    }
    FX_UNROLL(6)
    for (int r = 0; r < MR; r++) {
        store8(out + r * ldo, sum[r][0], n0);
        if (NV > 1) store8(out + r * ldo + 8, sum[r][1], n1);
    }
}

typedef void (*dtile_fn)(const float *, int64_t, const int64_t *, const unsigned char *, int64_t,
                         int64_t, const float *, const float *, float *, int64_t, int, int);
#define DTILE_FN(NV, MR)                                                                          \
    static void dtile_##NV##_##MR(const float *d0, int64_t plane, const int64_t *toff,           \
                                  const unsigned char *live, int64_t KK, int64_t O,               \
                                  const float *w0, const float *w1, float *out, int64_t ldo,      \
                                  int n0, int n1)                                                 \
    {                                                                                             \
        dtile(MR, NV, d0, plane, toff, live, KK, O, w0, w1, out, ldo, n0, n1);                    \
    }
DTILE_FN(2, 1) DTILE_FN(2, 2) DTILE_FN(2, 3)
DTILE_FN(1, 1) DTILE_FN(1, 2) DTILE_FN(1, 3) DTILE_FN(1, 4) DTILE_FN(1, 5) DTILE_FN(1, 6)

static const dtile_fn dtiles_2[DMR_MAX_2] = {dtile_2_1, dtile_2_2, dtile_2_3};
static const dtile_fn dtiles_1[DMR_MAX_1] = {dtile_1_1, dtile_1_2, dtile_1_3,
                                             dtile_1_4, dtile_1_5, dtile_1_6};

static int lanes8(int64_t n) { return n >= 8 ? 8 : (int)n; }

void fx_f32_dgrad_direct_avx2(const struct fx_conv_geom *g, const float *dyp, int64_t nbc,
                              const float *wq, const int64_t *toff, float *dx,
                              int nthreads)
{
    const int64_t C = g->C, O = g->O, KH = g->KH, KW = g->KW, KK = KH * KW;
    const int64_t H = g->H, W = g->W, P = H * W;
    const int64_t Wq = fx_f32_dgrad_direct_padded_w(g);
    const int64_t plane = fx_f32_dgrad_direct_padded_h(g) * Wq;
    (void)nthreads; /* without OpenMP */
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
        const int NV = C - c0 > 8 ? 2 : 1;
        const int m0 = lanes8(C - c0), m1 = NV > 1 ? lanes8(C - c0 - 8) : 0;
        const float *w0 = wq + (c0 / 16) * KK * O * 16, *w1 = w0 + 8;
        const dtile_fn *fns = NV > 1 ? dtiles_2 : dtiles_1;
        const int64_t mr_max = NV > 1 ? DMR_MAX_2 : DMR_MAX_1;
        /* a dx row in ntile tiles of near-equal widths, the wider ones first */
        const int64_t ntile = (W + mr_max - 1) / mr_max, wide = W % ntile, base = W / ntile;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1)
#endif
        for (int64_t row = 0; row < nbc * H; row++) {
            const int64_t n = row / H, ih = row % H;
            unsigned char live[FX_F32_DGRAD_MAX_TAPS];
            fx_f32_dgrad_direct_live_taps(g, ih, live);
            const float *drow = dyp + n * O * plane + ih * Wq;
            int64_t iw0 = 0;
            for (int64_t t = 0; t < ntile; t++) {
                const int w = (int)(base + (t < wide));
                fns[w - 1](drow + iw0, plane, toff, live, KK, O, w0, w1,
                           dx + (n * P + ih * W + iw0) * C + c0, C, m0, m1);
                iw0 += w;
            }
        }
    }
    fx_f32_dgrad_direct_count();
}
