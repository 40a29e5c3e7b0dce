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
#include "conv_i16_direct.h"
#include "../nn/im2col.h"

#include <immintrin.h>
#include <string.h>

#define MR_MAX 6

/* |v| for int64 lanes (two's complement; AVX2 has no vpabsq) and the lane-wise unsigned max
 * of values below 2^63 (a signed compare orders them) */
static inline __m256i abs_epi64(__m256i v)
{
    const __m256i sgn = _mm256_cmpgt_epi64(_mm256_setzero_si256(), v);
    return _mm256_sub_epi64(_mm256_xor_si256(v, sgn), sgn);
}
static inline __m256i max_epi64(__m256i a, __m256i b)
{
    return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(b, a));
}

/* acc0 += pairs(x[off] broadcast) . w0 and acc1 likewise with w1, x[off] being the 32-bit word
 * at byte offset off from x. Why asm: from intrinsics, GCC 12 computed a whole segment's
 * products first and spilled them (200 stack accesses in the 6-pixel tile); as one opaque step
 * per pixel, the 12 accumulators and both weight vectors stay in registers and the broadcast
 * and the product take the two registers left (ymm14, ymm15). */
#define FX_MADD_ROW(acc0, acc1, w0, w1, x, off)                                                    \
    __asm__ volatile("vpbroadcastd %c[o](%[xp]), %%ymm15\n\t"                                      \
                     "vpmaddwd %[b0], %%ymm15, %%ymm14\n\t"                                        \
                     "vpaddd %%ymm14, %[a0], %[a0]\n\t"                                            \
                     "vpmaddwd %[b1], %%ymm15, %%ymm15\n\t"                                        \
                     "vpaddd %%ymm15, %[a1], %[a1]"                                                 \
                     : [a0] "+x"(acc0), [a1] "+x"(acc1)                                             \
                     : [b0] "x"(w0), [b1] "x"(w1), [xp] "r"(x), [o] "i"(off)                         \
                     : "xmm14", "xmm15")

/* The fold of one pixel's two accumulators (conv_i16_direct.h): hi[0..15] += acc >> 16
 * (arithmetic), acc &= 0xFFFF; in asm for the same reason, so that the accumulators never
 * leave their registers between segments. */
#define FX_FOLD_ROW(acc0, acc1, h)                                                                 \
    __asm__ volatile("vpcmpeqd %%ymm15, %%ymm15, %%ymm15\n\t"                                      \
                     "vpsrld $16, %%ymm15, %%ymm15\n\t"                                            \
                     "vpsrad $16, %[a0], %%ymm14\n\t"                                              \
                     "vpaddd (%[hp]), %%ymm14, %%ymm14\n\t"                                        \
                     "vmovdqa %%ymm14, (%[hp])\n\t"                                                \
                     "vpand %%ymm15, %[a0], %[a0]\n\t"                                             \
                     "vpsrad $16, %[a1], %%ymm14\n\t"                                              \
                     "vpaddd 32(%[hp]), %%ymm14, %%ymm14\n\t"                                      \
                     "vmovdqa %%ymm14, 32(%[hp])\n\t"                                              \
                     "vpand %%ymm15, %[a1], %[a1]"                                                  \
                     : [a0] "+x"(acc0), [a1] "+x"(acc1)                                             \
                     : [hp] "r"(h)                                                                  \
                     : "xmm14", "xmm15", "memory")

/* One tile: MR pixels of an output row (xb: the first one's top-left tap in the copy, ld words
 * per pixel) by 16 output channels (wb: their packed weights, opad words per pair), the chain
 * over the nseg segments (segment i: SEG_PAIRS pairs at xb + xoff[i], weights at wb + i
 * SEG_PAIRS opad), a fold after segment i where fold[i]; the sums 2^16 hi + acc of its first
 * ncols channels stored as int64 at out (row r at out + r ldo). Returns the largest |sum|. */
static inline __attribute__((always_inline)) uint64_t
itile(const int MR, const int64_t LD, int32_t *restrict hib, const uint32_t *xb, int64_t ld_any,
      const int64_t *xoff, int64_t nseg, const uint32_t *wb, int64_t opad, const uint8_t *fold,
      int64_t *out, int64_t ldo, int ncols)
{
    /* hi in the caller's frame, touched at folds only. The accumulators are named variables,
     * not an array: GCC kept an array of them in memory between segments (a load and a store
     * of each per segment) */
    int32_t (*hi)[2][8] = (int32_t (*)[2][8])hib;
    __m256i c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_si256();
#define FX_ROWS(X) X(0, c00, c01) X(1, c10, c11) X(2, c20, c21) X(3, c30, c31) X(4, c40, c41) \
    X(5, c50, c51)
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
            FX_MADD_ROW(a0, a1, b0, b1, xs, (r * LD + j) * 4);                                     \
        else                                                                                       \
            FX_MADD_ROW(a0, a1, b0, b1, xs + r * ld, j * 4);                                       \
    }
            FX_ROWS(FX_STEP)
#undef FX_STEP
        }
        if (fold[i]) {
#define FX_FOLD(r, a0, a1)                                                                         \
    if (MR > r) FX_FOLD_ROW(a0, a1, hi[r][0]);
            FX_ROWS(FX_FOLD)
#undef FX_FOLD
        }
    }
    __m256i acc[MR_MAX][2];
#define FX_KEEP(r, a0, a1)                                                                         \
    acc[r][0] = a0;                                                                                \
    acc[r][1] = a1;
    FX_ROWS(FX_KEEP)
#undef FX_KEEP
#undef FX_ROWS
    __m256i mx = _mm256_setzero_si256();
    for (int r = 0; r < MR; r++) {
        int64_t row[16] __attribute__((aligned(32)));
        for (int v = 0; v < 2; v++) {
            const __m256i hv = _mm256_load_si256((const __m256i *)hi[r][v]);
            for (int q = 0; q < 2; q++) {
                const __m128i a32 = q ? _mm256_extracti128_si256(acc[r][v], 1)
                                      : _mm256_castsi256_si128(acc[r][v]);
                const __m128i h32 =
                    q ? _mm256_extracti128_si256(hv, 1) : _mm256_castsi256_si128(hv);
                const __m256i sum = _mm256_add_epi64(
                    _mm256_slli_epi64(_mm256_cvtepi32_epi64(h32), 16), _mm256_cvtepi32_epi64(a32));
                _mm256_store_si256((__m256i *)(row + 8 * v + 4 * q), sum);
                /* lanes past ncols are sums of zero weights: 0, which adds nothing to the max */
                mx = max_epi64(mx, abs_epi64(sum));
            }
        }
        if (ncols == 16)
            for (int q = 0; q < 4; q++)
                _mm256_storeu_si256((__m256i *)(out + r * ldo + 4 * q),
                                    _mm256_load_si256((const __m256i *)(row + 4 * q)));
        else
            memcpy(out + r * ldo, row, sizeof(int64_t) * (size_t)ncols);
    }
    int64_t m[4];
    _mm256_storeu_si256((__m256i *)m, mx);
    uint64_t best = 0;
    for (int q = 0; q < 4; q++) best = (uint64_t)m[q] > best ? (uint64_t)m[q] : best;
    return best;
}

typedef uint64_t (*itile_fn)(const uint32_t *, int64_t, const int64_t *, int64_t,
                             const uint32_t *, int64_t, const uint8_t *, int64_t *, int64_t, int);

#define ITILE_FN(MR, LD)                                                                          \
    static uint64_t itile_##MR##_##LD(const uint32_t *xb, int64_t ld, const int64_t *xoff,        \
                                      int64_t nseg, const uint32_t *wb, int64_t opad,             \
                                      const uint8_t *fold, int64_t *out, int64_t ldo, int ncols)  \
    {                                                                                             \
        int32_t hib[MR_MAX * 2 * 8] __attribute__((aligned(32)));                                 \
        return itile(MR, LD, hib, xb, ld, xoff, nseg, wb, opad, fold, out, ldo, ncols);           \
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
    /* scratch (fx_i16_fwd_direct_scratch): the copy, 32-byte aligned, then the norms (a tile
     * covers only pixels that are there, so nothing is read past the copy) */
    uint32_t *xq = scratch + ((8 - ((uintptr_t)scratch / 4) % 8) % 8);
    uint32_t *rn = xq + nbc * HW * Cpp + (FX_I16_MAX_ROWS + g->KW) * Cpp; /* [n][ih][s] */
    for (int64_t n = 0; n < nbc; n++)
        fx_i16_fwd_copy_image(g, xp + n * C * HW, xq + n * HW * Cpp, rn + n * Hp * G);
    if (!fx_i16_fwd_admit(rn, nbc * Hp, wn, opad / 16 * KK, G)) return 0;
    int64_t xoff[FX_I16_FWD_MAX_SEGS];
    fx_i16_fwd_offsets(g, xoff);
    const int ldi = Cpp == 4 ? 0 : Cpp == 8 ? 1 : Cpp == 16 ? 2 : Cpp == 32 ? 3 : 4;
    /* an output row in ntile tiles of near-equal widths, the wider ones first */
    const int64_t ntile = (OW + MR_MAX - 1) / MR_MAX, wide = OW % ntile, base = OW / ntile;
    uint64_t mx = 0;
    for (int64_t o0 = 0; o0 < O; o0 += 16) {
        const int ncols = O - o0 < 16 ? (int)(O - o0) : 16;
        const uint32_t *wm = wn + (o0 / 16) * nseg; /* this block's weight norms */
        (void)nthreads;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1) \
    reduction(max : mx)
#endif
        for (int64_t row = 0; row < nbc * OH; row++) {
            const int64_t n = row / OH, oh = row % OH;
            uint8_t fold[FX_I16_FWD_MAX_SEGS];
            fx_i16_fold_schedule(rn + (n * Hp + oh) * G, wm, KK, g->KW, G, fold);
            int64_t ow0 = 0;
            for (int64_t t = 0; t < ntile; t++) {
                const int w = (int)(base + (t < wide));
                const uint64_t m = tile_fns[ldi][w - 1](
                    xq + (n * HW + oh * Wp + ow0) * Cpp, Cpp, xoff, nseg, wq + o0, opad, fold,
                    y + (n * P + oh * OW + ow0) * O + o0, O, ncols);
                mx = m > mx ? m : mx;
                ow0 += w;
            }
        }
    }
    *ymax = mx;
    return 1;
}
