/* The exact int16 forward convolution without a patch matrix on AVX2: vpmaddwd + vpaddd in
 * place of AVX512_VNNI's vpdpwssd, otherwise the design of conv_i16_avx512.c (its comment says
 * why and how the chains stay exact; conv_i16_direct.h holds what the two share).
 *
 * Why on AVX2: the patch GEMM route gathers every patch row, packs it in pairs and takes its
 * norms before the kernel sees it, and a convolution's GEMM has few columns (the CNN's conv2:
 * 64, its input gradient: 32), so that work is shared by few tiles. On a Zen 1 EPYC, where
 * vpmaddwd runs on one pipe at the fp32 FMA's multiply rate, it made the integer formats' conv2
 * input gradient slower than fp32's (docs/performance.md).
 *
 * Register tile: MR (1..6) pixels of one output row by 16 output channels, two ymm of int32
 * lanes per pixel: 12 accumulators, 2 weight vectors, the broadcast and the product fill the 16
 * ymm registers at MR = 6, and each broadcast feeds two multiplies, as in the GEMM's 6 x 16
 * fast kernel. An output row of OW pixels is cut into ceil(OW / 6) tiles of near-equal widths
 * (the CNN's 14: 5 + 5 + 4), so no lane computes a pixel that is not there. */
#include "conv_i16.h"
#include "conv_i16_avx2.h"
#include "conv_i16_direct.h"
#include "../nn/im2col.h"

#include <immintrin.h>

#define MR_MAX 6

/* One tile: MR pixels of an output row (xb: the first one's top-left tap in the copy, ld words
 * per pixel) by 16 output channels (wb: their packed weights, opad words per pair), the chain
 * over the nseg segments (segment i: SEG_PAIRS pairs at xb + xoff[i], weights at wb + i
 * SEG_PAIRS opad), a fold after segment i where fold[i]; the sums 2^16 hi + acc of its first
 * ncols channels stored as int64 at out (row r at out + r ldo). Returns the largest |sum|
 * where want_max, else 0. */
static inline __attribute__((always_inline)) uint64_t
itile(const int MR, const int64_t LD, int32_t *restrict hib, const uint32_t *xb, int64_t ld_any,
      const int64_t *xoff, int64_t nseg, const uint32_t *wb, int64_t opad, const uint8_t *fold,
      int64_t *out, int64_t ldo, int ncols, int want_max)
{
    /* hi in the caller's frame, touched at folds only */
    int32_t (*hi)[2][8] = (int32_t (*)[2][8])hib;
    FX_I16_AVX2_TILE_ACCS;
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < 2; v++) _mm256_store_si256((__m256i *)hi[r][v], _mm256_setzero_si256());
    const int64_t ld = LD > 0 ? LD : ld_any; /* constant offsets where LD is known */
    for (int64_t i = 0; i < nseg; i++) {
        const uint32_t *xs = xb + xoff[i];
        const uint32_t *ws = wb + i * FX_I16_SEG_PAIRS * opad;
#pragma GCC unroll 4
        for (int j = 0; j < FX_I16_SEG_PAIRS; j++) {
            const __m256i b0 = _mm256_load_si256((const __m256i *)(ws + j * opad));
            const __m256i b1 = _mm256_load_si256((const __m256i *)(ws + j * opad + 8));
#define FX_STEP(r, a0, a1)                                                                         \
    if (MR > r) {                                                                                  \
        if (LD > 0)                                                                                \
            FX_MADD_ROW(a0, a1, b0, b1, xs + r * LD + j);                                          \
        else                                                                                       \
            FX_MADD_ROW(a0, a1, b0, b1, xs + r * ld + j);                                          \
    }
            FX_I16_AVX2_ROWS(FX_STEP)
#undef FX_STEP
        }
        if (fold[i]) FX_I16_AVX2_FOLD_ALL(MR, hi);
    }
    __m256i mx = _mm256_setzero_si256();
    __m256i *const mxp = want_max ? &mx : NULL;
#define FX_STORE(r, a0, a1)                                                                        \
    if (MR > r) fx_i16_store_row_avx2(a0, a1, hi[r][0], out + r * ldo, ncols, 0, mxp);
    FX_I16_AVX2_ROWS(FX_STORE)
#undef FX_STORE
    return fx_i16_hmax_epu64_avx2(mx);
}

typedef uint64_t (*itile_fn)(const uint32_t *, int64_t, const int64_t *, int64_t,
                             const uint32_t *, int64_t, const uint8_t *, int64_t *, int64_t, int,
                             int);

#define ITILE_FN(MR, LD)                                                                          \
    static uint64_t itile_##MR##_##LD(const uint32_t *xb, int64_t ld, const int64_t *xoff,        \
                                      int64_t nseg, const uint32_t *wb, int64_t opad,             \
                                      const uint8_t *fold, int64_t *out, int64_t ldo, int ncols,  \
                                      int want_max)                                               \
    {                                                                                             \
        int32_t hib[MR_MAX * 2 * 8] __attribute__((aligned(32)));                                 \
        return itile(MR, LD, hib, xb, ld, xoff, nseg, wb, opad, fold, out, ldo, ncols, want_max); \
    }
#define ITILE_FNS(LD)                                                                             \
    ITILE_FN(1, LD) ITILE_FN(2, LD) ITILE_FN(3, LD) ITILE_FN(4, LD) ITILE_FN(5, LD) ITILE_FN(6, LD)
/* the pixel strides of 8 channels (a layer folded into 8, src/nn/conv_fold.h), 16, 32 and 64
 * (ResNet-20's and the CNN's layers), and any */
ITILE_FNS(4)
ITILE_FNS(8)
ITILE_FNS(16)
ITILE_FNS(32)
ITILE_FNS(0)
#define ITILE_ROW(LD)                                                                             \
    {itile_1_##LD, itile_2_##LD, itile_3_##LD, itile_4_##LD, itile_5_##LD, itile_6_##LD}
static const itile_fn tile_fns[5][MR_MAX] = {ITILE_ROW(4), ITILE_ROW(8), ITILE_ROW(16),
                                             ITILE_ROW(32), ITILE_ROW(0)};

int fx_i16_fwd_direct_avx2(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                           const uint32_t *wq, uint32_t *scratch, int64_t *y, int nthreads,
                           uint64_t *ymax)
{
    const int64_t C = g->C, O = g->O, Cpp = fx_i16_pairs(C), G = fx_i16_groups(C);
    const int64_t opad = (O + 15) / 16 * 16;
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, HW = Hp * Wp;
    const int64_t OH = g->OH, OW = g->OW, P = OH * OW, KK = g->KH * g->KW, nseg = KK * G;
    const uint32_t *wn = wq + KK * Cpp * opad;
    /* scratch (fx_i16_fwd_direct_scratch, sized for the AVX-512 layout, which holds this one):
     * the copy, 32-byte aligned (a tile covers only pixels that are there, so nothing is read
     * past it), one image's pair planes, the norms, one image's sums of squares */
    uint32_t *xq = scratch + ((8 - ((uintptr_t)scratch / 4) % 8) % 8);
    uint32_t *planes = xq + nbc * HW * Cpp;
    uint32_t *rn = planes + Cpp * HW; /* [n][ih][s] */
    uint32_t *sqw = rn + nbc * Hp * G;
    uint64_t *sq = (uint64_t *)(void *)(sqw + ((uintptr_t)sqw / 4) % 2);
    for (int64_t n = 0; n < nbc; n++)
        fx_i16_fwd_copy_image_avx2(g, xp + n * C * g->H * g->W, xq + n * HW * Cpp,
                                   rn + n * Hp * G, planes, sq);
    if (!fx_i16_fwd_admit(rn, nbc * Hp, wn, opad / 16 * KK, G)) return 0;
    int64_t xoff[FX_I16_FWD_MAX_SEGS];
    fx_i16_fwd_offsets(g, xoff);
    const int64_t sh = g->sh, sw = g->sw, ld = sw * Cpp; /* words between a tile's pixels */
    const int ldi = ld == 4 ? 0 : ld == 8 ? 1 : ld == 16 ? 2 : ld == 32 ? 3 : 4;
    /* an output row in ntile tiles of near-equal widths, the wider ones first */
    const int64_t ntile = (OW + MR_MAX - 1) / MR_MAX, wide = OW % ntile, base = OW / ntile;
    uint64_t mx = 0;
    (void)nthreads; /* without OpenMP */
    for (int64_t o0 = 0; o0 < O; o0 += 16) {
        const int ncols = O - o0 < 16 ? (int)(O - o0) : 16;
        const uint32_t *wm = wn + (o0 / 16) * nseg; /* this block's weight norms */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1) \
    reduction(max : mx)
#endif
        for (int64_t row = 0; row < nbc * OH; row++) {
            const int64_t n = row / OH, oh = row % OH;
            uint8_t fold[FX_I16_FWD_MAX_SEGS];
            fx_i16_fold_schedule(rn + (n * Hp + oh * sh) * G, wm, KK, g->KW, G, fold);
            int64_t ow0 = 0;
            for (int64_t t = 0; t < ntile; t++) {
                const int w = (int)(base + (t < wide));
                const uint64_t m = tile_fns[ldi][w - 1](
                    xq + (n * HW + oh * sh * Wp + ow0 * sw) * Cpp, ld, xoff, nseg, wq + o0, opad, fold,
                    y + (n * P + oh * OW + ow0) * O + o0, O, ncols, ymax != NULL);
                mx = m > mx ? m : mx;
                ow0 += w;
            }
        }
    }
    if (ymax) *ymax = mx;
    return 1;
}
