/* The fp32 input gradient of a convolution on AVX2 without a patch matrix or col2im
 * (conv_f32_direct.h says why its bits are the GEMM and col2im route's, and walks the tiles);
 * the AVX-512 kernel (conv_f32_dgrad_avx512.c) in eight lanes and sixteen registers.
 *
 * Register tile: MR pixels of one dx row (of one column phase at stride > 1) by NV vectors of 8
 * input channels. Per tap t, in
 * col2im's (kh, kw) order, one FMA chain per tile value over dy's O channels from +0 (the GEMM's
 * chain for that patch-matrix entry), each step the NV weight vectors of (o, t) and, for each
 * pixel, dy at the tap's position broadcast from the padded chunk; then the chains are added to
 * the tile's sums (col2im's addition). NV = 2 takes up to 3 pixels (6 sums and 6 chains in
 * registers), NV = 1 (the last 8 or fewer channels) up to 6.
 */
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

/* One tile: MR pixels (d: the image's padded dy, plane floats between channels; tap t of
 * pixel r at d + off[t] + r) by NV x 8 input channels (w0: the block of 16's packed weights, O
 * x 16 per tap; w1 = w0 + 8, its upper half); taps with live[t] == 0 add nothing
 * (conv_f32_direct.h). Channel j of pixel r is stored at out + r ldo + j for the first n0 (of
 * the first 8) and n1 (of the next 8) channels. */
static inline __attribute__((always_inline)) void
dtile(const int MR, const int NV, const float *d, int64_t plane, const int64_t *off,
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
        const float *dt = d + off[t];
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

#define DTILE_FN(NV, MR)                                                                          \
    static void dtile_##NV##_##MR(const float *d, int64_t plane, const int64_t *off,             \
                                  const unsigned char *live, int64_t KK, int64_t O,               \
                                  const float *w0, const float *w1, float *out, int64_t ldo,      \
                                  int n0, int n1)                                                 \
    {                                                                                             \
        dtile(MR, NV, d, plane, off, live, KK, O, w0, w1, out, ldo, n0, n1);                      \
    }
DTILE_FN(2, 1) DTILE_FN(2, 2) DTILE_FN(2, 3)
DTILE_FN(1, 1) DTILE_FN(1, 2) DTILE_FN(1, 3) DTILE_FN(1, 4) DTILE_FN(1, 5) DTILE_FN(1, 6)

static const fx_f32_dgrad_tile_fn dtiles_2[DMR_MAX_2] = {dtile_2_1, dtile_2_2, dtile_2_3};
static const fx_f32_dgrad_tile_fn dtiles_1[DMR_MAX_1] = {dtile_1_1, dtile_1_2, dtile_1_3,
                                                         dtile_1_4, dtile_1_5, dtile_1_6};

static const fx_f32_dgrad_level level = {8, {DMR_MAX_1, DMR_MAX_2}, {dtiles_1, dtiles_2}};

void fx_f32_dgrad_direct_avx2(const struct fx_conv_geom *g, const float *dyp, int64_t nbc,
                              const float *wq, float *dx, int nthreads)
{
    fx_f32_dgrad_direct_run(&level, g, dyp, nbc, wq, dx, nthreads);
}
