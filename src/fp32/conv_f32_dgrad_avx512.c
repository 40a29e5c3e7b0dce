/* The fp32 input gradient of a convolution on AVX-512 without a patch matrix or col2im
 * (conv_f32_direct.h says why its bits are the GEMM and col2im route's, and walks the tiles).
 *
 * Register tile: MR pixels of one dx row (of one column phase at stride > 1) by NV vectors of
 * 16 input channels. Per tap t, in
 * col2im's (kh, kw) order, one FMA chain per tile value over dy's O channels from +0 (the GEMM's
 * chain for that patch-matrix entry), each step the NV weight vectors of (o, t) and, for each
 * pixel, dy at the tap's position broadcast from the padded chunk; then the chains are added to
 * the tile's sums (col2im's addition). NV = 2 takes up to 6 pixels (12 sums and 12 chains in
 * registers), NV = 1 (the last 16 or fewer channels: ResNet-20's 16-channel stage) up to 12.
 */
#include "conv_f32_direct.h"
#include "../nn/im2col.h"

#include <immintrin.h>

#define DMR_MAX_2 6  /* pixels per tile at 32 channels */
#define DMR_MAX_1 12 /* pixels per tile at 16 channels */

#define FX_PRAGMA(x) _Pragma(#x)
#define FX_UNROLL(n) FX_PRAGMA(GCC unroll n)

/* One tile: MR pixels (d: the image's padded dy, plane floats between channels; tap t of
 * pixel r at d + off[t] + r) by NV x 16 input channels (w0, w1: the blocks' packed weights, O
 * x 16 per tap); taps with live[t] == 0 add nothing (conv_f32_direct.h). Channel j of pixel r
 * is stored at out + r ldo + j where the masks m0 (first 16) and m1 (next 16) have bit j. */
static inline __attribute__((always_inline)) void
dtile(const int MR, const int NV, const float *d, int64_t plane, const int64_t *off,
      const unsigned char *live, int64_t KK, int64_t O, const float *w0, const float *w1,
      float *out, int64_t ldo, __mmask16 m0, __mmask16 m1)
{
    __m512 sum[DMR_MAX_1][2];
    FX_UNROLL(12)
    for (int r = 0; r < MR; r++) sum[r][0] = sum[r][1] = _mm512_setzero_ps();
    for (int64_t t = 0; t < KK; t++) {
        if (!live[t]) continue;
        __m512 ch[DMR_MAX_1][2];
        FX_UNROLL(12)
        for (int r = 0; r < MR; r++) ch[r][0] = ch[r][1] = _mm512_setzero_ps();
        const float *dt = d + off[t];
        const float *wa = w0 + t * O * 16, *wb = w1 + t * O * 16;
        for (int64_t o = 0; o < O; o++, dt += plane) {
            const __m512 b0 = _mm512_load_ps(wa + 16 * o);
            const __m512 b1 = NV > 1 ? _mm512_load_ps(wb + 16 * o) : b0;
            FX_UNROLL(12)
            for (int r = 0; r < MR; r++) {
                const __m512 a = _mm512_set1_ps(dt[r]);
                ch[r][0] = _mm512_fmadd_ps(a, b0, ch[r][0]);
                if (NV > 1) ch[r][1] = _mm512_fmadd_ps(a, b1, ch[r][1]);
            }
        }
        FX_UNROLL(12)
        for (int r = 0; r < MR; r++) {
            sum[r][0] = _mm512_add_ps(sum[r][0], ch[r][0]);
            if (NV > 1) sum[r][1] = _mm512_add_ps(sum[r][1], ch[r][1]);
        }
    }
    FX_UNROLL(12)
    for (int r = 0; r < MR; r++) {
        _mm512_mask_storeu_ps(out + r * ldo, m0, sum[r][0]);
        if (NV > 1) _mm512_mask_storeu_ps(out + r * ldo + 16, m1, sum[r][1]);
    }
}

static __mmask16 lanes(int n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }

#define DTILE_FN(NV, MR)                                                                          \
    static void dtile_##NV##_##MR(const float *d, int64_t plane, const int64_t *off,             \
                                  const unsigned char *live, int64_t KK, int64_t O,               \
                                  const float *w0, const float *w1, float *out, int64_t ldo,      \
                                  int n0, int n1)                                                 \
    {                                                                                             \
        dtile(MR, NV, d, plane, off, live, KK, O, w0, w1, out, ldo, lanes(n0), lanes(n1));        \
    }
DTILE_FN(2, 1) DTILE_FN(2, 2) DTILE_FN(2, 3) DTILE_FN(2, 4) DTILE_FN(2, 5) DTILE_FN(2, 6)
DTILE_FN(1, 1) DTILE_FN(1, 2) DTILE_FN(1, 3) DTILE_FN(1, 4) DTILE_FN(1, 5) DTILE_FN(1, 6)
DTILE_FN(1, 7) DTILE_FN(1, 8) DTILE_FN(1, 9) DTILE_FN(1, 10) DTILE_FN(1, 11) DTILE_FN(1, 12)

static const fx_f32_dgrad_tile_fn dtiles_2[DMR_MAX_2] = {dtile_2_1, dtile_2_2, dtile_2_3,
                                                         dtile_2_4, dtile_2_5, dtile_2_6};
static const fx_f32_dgrad_tile_fn dtiles_1[DMR_MAX_1] = {
    dtile_1_1, dtile_1_2, dtile_1_3, dtile_1_4,  dtile_1_5,  dtile_1_6,
    dtile_1_7, dtile_1_8, dtile_1_9, dtile_1_10, dtile_1_11, dtile_1_12};

static const fx_f32_dgrad_level level = {16, {DMR_MAX_1, DMR_MAX_2}, {dtiles_1, dtiles_2}};

void fx_f32_dgrad_direct_avx512(const struct fx_conv_geom *g, const float *dyp, int64_t nbc,
                                const float *wq, float *dx, int nthreads)
{
    fx_f32_dgrad_direct_run(&level, g, dyp, nbc, wq, dx, nthreads);
}
