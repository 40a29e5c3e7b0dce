/* The exact int16 forward convolution on vpdpwssd without a patch matrix (AVX512_VNNI).
 *
 * Why: the patch GEMM route spends a third to a half of an integer convolution outside
 * vpdpwssd, building patch panels (each input value copied once per tap) and packing; the CNN's
 * conv2 ran its forward pass at about 61 % and its input gradient (a forward pass of dy) at 48 %
 * of the vpdpwssd limit on the Zen 4, against 80 % for the bf16 direct kernel beside it.
 *
 * Layout, as the bf16 direct kernel's (src/bf16/bf16_conv_avx512bf16.c): a channel-pair-last
 * copy of each chunk, padded while it is made, the weights as pair words per tap, and a register tile of MR
 * pixels of one output row by 16 NV output channels. Per tap and channel pair, one broadcast
 * of the pixel's pair word per row and NV vpdpwssd. The pairs of a pixel are padded with zeros
 * to whole segments, so that a segment is a fixed, unrolled run of SEG_PAIRS pairs.
 *
 * Exactness. vpdpwssd adds two int16 products into an int32 lane without saturation, so a
 * lane is exact while every partial sum stays inside int32. The chain over (tap, channel pair)
 * is cut into segments of one tap and SEG_CH channels. By Cauchy-Schwarz a segment's partial
 * sums are bounded by nX nW, nX = ceil(sqrt(sum of x^2 over its channels)) at the tile's pixel
 * and nW the same over the weights of the tile's output channel. Here nX is bounded per padded
 * input row (the largest over the row's pixels: a tile's pixels at one tap lie in one padded
 * row) and nW per block of 16 output channels. Consecutive segments whose bounds sum to at
 * most 2^31 - 2^16 form a chain; between chains each lane is folded as the GEMM's fast kernel
 * folds (src/flex/gemm_i16.h): hi += s >> 16, s &= 0xFFFF, so a chain starts from a lane in
 * [0, 2^16) and ends inside int32, and the sum is 2^16 hi + s at the end, exact in int64. hi
 * holds at most C KH KW 2^30 / 2^16 < 2^31 for C KH KW <= 2^16. A chunk where one segment
 * alone may exceed the bound is declined (returns 0) and takes the GEMM, whose split and wrap
 * kernels handle any data (in a CNN epoch on Fashion-MNIST, 22 of about 36,000 chunks). The
 * sums are the exact ones, so the bits are those of every other integer route.
 *
 * Segments of 8 channels rather than the GEMM's 16: training data near the exact exponent's
 * full scale has 16-channel bounds beyond 2^31 (those chunks would all go to the GEMM), and
 * finer segments pack the chains more closely. */
#include "conv_i16.h"
#include "conv_i16_avx512.h"
#include "gemm_i16.h" /* fx_ceil_sqrt */
#include "../core/pair_copy_avx512.h"
#include "../nn/im2col.h"

#include <immintrin.h>
#include <string.h>

#define SEG_PAIRS FX_I16_SEG_PAIRS
#define SEG_CH FX_I16_SEG_CH

/* sq[s][i]: the sum of squares of pixel i's channels [SEG_CH s, SEG_CH (s + 1)) from one
 * image's pair planes; vpmaddwd gives a pair's x0^2 + x1^2 <= 2^31, exact as an unsigned lane */
static void pixel_sums_of_squares(const uint32_t *planes, int64_t Cp, int64_t G, int64_t HW,
                                  uint64_t *sq)
{
    for (int64_t s = 0; s < G; s++)
        for (int64_t p0 = 0; p0 < HW; p0 += 16) {
            const int np = HW - p0 < 16 ? (int)(HW - p0) : 16;
            const __mmask16 pm = (__mmask16)((1u << np) - 1);
            __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
            for (int64_t cp = SEG_PAIRS * s; cp < SEG_PAIRS * (s + 1) && cp < Cp; cp++) {
                const __m512i v = _mm512_maskz_loadu_epi32(pm, planes + cp * HW + p0);
                const __m512i q = _mm512_madd_epi16(v, v);
                lo = _mm512_add_epi64(lo, _mm512_cvtepu32_epi64(_mm512_castsi512_si256(q)));
                hi = _mm512_add_epi64(hi, _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(q, 1)));
            }
            _mm512_mask_storeu_epi64(sq + s * HW + p0, (__mmask8)pm, lo);
            _mm512_mask_storeu_epi64(sq + s * HW + p0 + 8, (__mmask8)(pm >> 8), hi);
        }
}

/* One tile: MR pixels of an output row (xb: the first one's top-left tap in the copy, ld words
 * per pixel) by 16 NV output channels (wb: their packed weights), the chain over the nseg
 * segments (segment i: SEG_PAIRS pairs at xb + xoff[i], weights at wb + i SEG_PAIRS opad), a
 * fold after segment i where fold[i]; rows of the MR are stored, int64, the last vector's
 * lanes under mask last. Returns the largest |sum| stored. */
static inline __attribute__((always_inline)) uint64_t
itile(const int MR, const int NV, const int64_t LD, int32_t *restrict hib, const uint32_t *xb,
      int64_t ld_any, const int64_t *xoff,
      int64_t nseg, const uint32_t *wb, int64_t opad, const uint8_t *fold, int64_t *out,
      int64_t ldo, int rows, __mmask16 last)
{
    /* hi lives in the caller's frame (touched at folds only), so that the chain keeps its
     * accumulators, the weight vectors and the broadcast in registers: with hi in registers
     * too, a 7 x 2 tile spilled its weight vectors inside the chain, and with hi a local array
     * fenced off from the registers, GCC kept the accumulators in memory between segments
     * (the kernel alone on CNN conv2's forward pass, batch 128, normal data, one thread on the
     * Zen 4: 14.8 ms that way, 12.8 this way) */
    __m512i acc[FX_I16_MAX_ROWS][4]; /* NV <= 2 used */
    int32_t (*hi)[4][16] = (int32_t (*)[4][16])hib;
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            acc[r][v] = _mm512_setzero_si512();
            _mm512_store_si512((void *)hi[r][v], _mm512_setzero_si512());
        }
    /* a compile-time pixel stride where there is one (LD > 0): the rows' broadcasts then take
     * constant offsets instead of a register each */
    const int64_t ld = LD > 0 ? LD : ld_any;
    /* the chains as loops of their own, each followed by its fold: with the fold under a
     * branch inside one loop over the segments, GCC 12 kept each accumulator of the 16 x 1
     * tile in two registers and moved it between them around every vpdpwssd, and spilled some
     * (ResNet-20's 16-channel forward pass took 6.2-6.6 ms that way, 4.8-5.1 ms this way with
     * the unpadded copy, one thread on the Emerald Rapids) */
    for (int64_t i0 = 0; i0 < nseg;) {
        int64_t i1 = i0;
        while (i1 < nseg - 1 && !fold[i1]) i1++; /* the chain: segments i0 .. i1 */
        for (int64_t i = i0; i <= i1; i++) {
            const uint32_t *xs = xb + xoff[i];
            const uint32_t *ws = wb + i * SEG_PAIRS * opad;
            for (int j = 0; j < SEG_PAIRS; j++) {
                __m512i b[2];
                for (int v = 0; v < NV; v++)
                    b[v] = _mm512_load_si512((const void *)(ws + j * opad + 16 * v));
                for (int r = 0; r < MR; r++) {
                    /* the pixel's pair word (the pair product is symmetric in its operands) */
                    const __m512i a = _mm512_set1_epi32((int)xs[r * ld + j]);
                    for (int v = 0; v < NV; v++)
                        acc[r][v] = _mm512_dpwssd_epi32(acc[r][v], b[v], a);
                }
            }
        }
        if (fold[i1]) fx_i16_fold(MR, NV, acc, hi); /* as the single loop folded */
        i0 = i1 + 1;
    }
    return fx_i16_store_rows(MR, NV, acc, hi, out, ldo, rows, last, 0);
}

#define ITILE_FN(MR, NV, LD)                                                                     \
    static uint64_t itile_##MR##x##NV##_##LD(const uint32_t *xb, int64_t ld, const int64_t *xoff, \
                                             int64_t nseg, const uint32_t *wb, int64_t opad,    \
                                             const uint8_t *fold, int64_t *out, int64_t ldo,    \
                                             int rows, __mmask16 last)                          \
    {                                                                                            \
        int32_t hib[FX_I16_MAX_ROWS * 4 * 16] __attribute__((aligned(64)));                     \
        return itile(MR, NV, LD, hib, xb, ld, xoff, nseg, wb, opad, fold, out, ldo, rows, last); \
    }
#define ITILE_FNS(LD)                                                                            \
    ITILE_FN(7, 2, LD) ITILE_FN(8, 2, LD) ITILE_FN(14, 1, LD) ITILE_FN(16, 1, LD) ITILE_FN(9, 1, LD)
/* the pixel strides of 8 (a layer folded into 8 channels, src/nn/conv_fold.h), 16, 32 and 64
 * channels (ResNet-20's and the CNN's layers, and their stride-2 layers' 16 and 32 channels at
 * every other pixel), and any */
ITILE_FNS(4)
ITILE_FNS(8)
ITILE_FNS(16)
ITILE_FNS(32)
ITILE_FNS(0)

typedef uint64_t (*itile_fn)(const uint32_t *, int64_t, const int64_t *, int64_t,
                             const uint32_t *, int64_t, const uint8_t *, int64_t *, int64_t, int,
                             __mmask16);

/* [LD 4, 8, 16, 32, any][7x2, 8x2, 14x1, 16x1, 9x1] */
static const itile_fn tile_fns[5][5] = {
    {itile_7x2_4, itile_8x2_4, itile_14x1_4, itile_16x1_4, itile_9x1_4},
    {itile_7x2_8, itile_8x2_8, itile_14x1_8, itile_16x1_8, itile_9x1_8},
    {itile_7x2_16, itile_8x2_16, itile_14x1_16, itile_16x1_16, itile_9x1_16},
    {itile_7x2_32, itile_8x2_32, itile_14x1_32, itile_16x1_32, itile_9x1_32},
    {itile_7x2_0, itile_8x2_0, itile_14x1_0, itile_16x1_0, itile_9x1_0}};

/* A tile computes all its MR pixels whatever the row has left, so the width is the one of
 * 16, 14 and 9 pixels (one vector of channels) that computes the fewest: a row of 17 (the
 * full-padded phases of a stride-2 3 x 3 input gradient, conv_dgrad_phases.c) as 9 + 8
 * rather than 16 + 1, where the second tile cost as much as the first. */
static int tile_rows_1(int64_t OW)
{
    static const int cand[3] = {16, 14, 9};
    int best = 16;
    int64_t best_px = (OW + 15) / 16 * 16;
    for (int i = 1; i < 3; i++) {
        const int64_t px = (OW + cand[i] - 1) / cand[i] * cand[i];
        if (px < best_px) best = cand[i], best_px = px;
    }
    return best;
}

/* fx_i16_fold_schedule for eight output rows at once, one per 64-bit lane: lane j's row has
 * its first padded row's norms at rn + base[j] (words); fold[j nseg + i] as
 * fx_i16_fold_schedule writes fold[i] for that row. Why: the greedy cut is a chain of
 * dependent adds and compares per row (about 1.5 % of a one-thread ResNet-20 step as a scalar
 * loop); in lanes, eight rows' chains run in the time of one. */
void fx_i16_fold_schedules8_avx512(const uint32_t *rn, const int32_t base[8], const uint32_t *wm,
                                   int64_t KK, int64_t KW, int64_t G, uint8_t *fold)
{
    const int64_t nseg = KK * G;
    uint8_t bits[FX_I16_FWD_MAX_SEGS]; /* bit j of bits[i]: row j's fold[i] */
    const __m256i vbase = _mm256_loadu_si256((const __m256i *)(const void *)base);
    const __m512i lim = _mm512_set1_epi64(FX_I16_CHAIN_LIMIT);
    __m512i run = _mm512_setzero_si512();
    /* the taps of one kernel row share their input row's norms: gathered once per row where
     * there are at most 16 segments per tap (128 channels), else per segment */
    __m512i rv[16];
    for (int64_t t = 0; t < KK; t++)
        for (int64_t s = 0; s < G; s++) {
            const int64_t i = t * G + s;
            __m512i r;
            if (G > 16 || t % KW == 0) {
                const __m256i idx =
                    _mm256_add_epi32(vbase, _mm256_set1_epi32((int)((t / KW) * G + s)));
                r = _mm512_cvtepu32_epi64(
                    _mm256_i32gather_epi32((const int *)(const void *)rn, idx, 4));
                if (G <= 16) rv[s] = r;
            } else {
                r = rv[s];
            }
            /* both factors below 2^32: vpmuludq's 64-bit product is exact */
            const __m512i b = _mm512_mul_epu32(r, _mm512_set1_epi64((int64_t)wm[i]));
            if (i == 0) { /* the first segment never cuts (each alone is within the limit) */
                run = b;
                continue;
            }
            const __m512i sum = _mm512_add_epi64(run, b);
            const __mmask8 cut = _mm512_cmpgt_epu64_mask(sum, lim);
            bits[i - 1] = (uint8_t)cut;
            run = _mm512_mask_mov_epi64(sum, cut, b);
        }
    bits[nseg - 1] = 0;
    /* bit j of bits[i] -> fold[j nseg + i], 64 segments a step */
    const __m512i one = _mm512_set1_epi8(1);
    for (int64_t i0 = 0; i0 < nseg; i0 += 64) {
        const int64_t left = nseg - i0;
        const __mmask64 m = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
        const __m512i v = _mm512_maskz_loadu_epi8(m, bits + i0);
        for (int j = 0; j < 8; j++)
            _mm512_mask_storeu_epi8(fold + j * nseg + i0, m,
                                    _mm512_and_si512(_mm512_srli_epi16(v, (unsigned)j), one));
    }
}

int fx_i16_fwd_direct(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                      const uint32_t *wq, uint32_t *scratch, int64_t *y, int nthreads,
                      uint64_t *ymax)
{
    const int64_t C = g->C, O = g->O, Cp = (C + 1) / 2;
    const int64_t Cpp = fx_i16_pairs(C), G = fx_i16_groups(C);
    const int64_t opad = (O + 15) / 16 * 16;
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, HW = Hp * Wp;
    const int64_t OH = g->OH, OW = g->OW, P = OH * OW, KK = g->KH * g->KW, nseg = KK * G;
    const uint32_t *wn = wq + KK * Cpp * opad;
    uint32_t *xq = scratch + ((16 - ((uintptr_t)scratch / 4) % 16) % 16);
    const int64_t sh = g->sh, sw = g->sw, slack = (FX_I16_MAX_ROWS * sw + g->KW) * Cpp;
    uint32_t *tmp = xq + nbc * HW * Cpp + slack;
    uint16_t *zeros = (uint16_t *)(void *)(tmp + Cpp * HW);
    uint32_t *rn = tmp + Cpp * HW + (HW + 1) / 2; /* [n][ih][s] */
    uint32_t *sqw = rn + nbc * Hp * G;
    uint64_t *sq = (uint64_t *)(void *)(sqw + ((uintptr_t)sqw / 4) % 2);
    if (C % 2) memset(zeros, 0, sizeof(uint16_t) * (size_t)HW);
    /* the pair planes past C stay zero for every image: the last segment's spare pairs */
    memset(tmp + Cp * HW, 0, sizeof(uint32_t) * (size_t)((Cpp - Cp) * HW));
    const uint16_t *xb16 = (const uint16_t *)(const void *)xp;
    /* the copy, and each padded row's segment norms with it, while an image's planes are in
     * cache */
    for (int64_t n = 0; n < nbc; n++) {
        fx_pair_planes_padded_avx512(xb16 + n * C * g->H * g->W, C, g->H, g->W, g->ph, g->pw,
                                     zeros, tmp);
        pixel_sums_of_squares(tmp, Cp, G, HW, sq);
        for (int64_t ih = 0; ih < Hp; ih++)
            for (int64_t s = 0; s < G; s++) {
                uint64_t m = 0;
                for (int64_t iw = 0; iw < Wp; iw++)
                    m = sq[s * HW + ih * Wp + iw] > m ? sq[s * HW + ih * Wp + iw] : m;
                rn[(n * Hp + ih) * G + s] = (uint32_t)fx_ceil_sqrt((int64_t)m);
            }
        fx_pair_planes_transpose_avx512(tmp, Cpp, HW, Cpp, xq + n * HW * Cpp);
    }
    /* a segment that alone may leave int32 (data near full scale): the GEMM's any-data
     * kernels take the chunk */
    if (!fx_i16_fwd_admit(rn, nbc * Hp, wn, opad / 16 * KK, G)) return 0;
    memset(xq + nbc * HW * Cpp, 0, sizeof(uint32_t) * (size_t)slack);
    int64_t xoff[FX_I16_FWD_MAX_SEGS]; /* word offsets of the segments from a pixel's tap 0 */
    fx_i16_fwd_offsets(g, xoff);
    uint64_t mx = 0;
    for (int64_t o0 = 0; o0 < O; o0 += 32) {
        const int64_t ow = O - o0 < 32 ? O - o0 : 32;
        const int nv = ow > 16 ? 2 : 1; /* never past opad */
        const int mr = nv == 2 ? (OW % 7 == 0 && OW % 8 != 0 ? 7 : 8) : tile_rows_1(OW);
        const int64_t ld = sw * Cpp; /* words from one of a tile's pixels to the next */
        const int ldi = ld == 4 ? 0 : ld == 8 ? 1 : ld == 16 ? 2 : ld == 32 ? 3 : 4;
        const itile_fn fn =
            tile_fns[ldi][nv == 2 ? (mr == 7 ? 0 : 1) : mr == 14 ? 2 : mr == 16 ? 3 : 4];
        const int64_t tail = ow - 16 * (nv - 1);
        const __mmask16 last = (__mmask16)(tail >= 16 ? 0xFFFF : (1u << tail) - 1);
        /* the weight norms of this block's channels, the larger of its two vectors' */
        uint32_t wm[FX_I16_FWD_MAX_SEGS];
        const uint32_t *wn0 = wn + (o0 / 16) * nseg, *wn1 = wn0 + nseg;
        for (int64_t i = 0; i < nseg; i++)
            wm[i] = nv == 2 && wn1[i] > wn0[i] ? wn1[i] : wn0[i];
        (void)nthreads;
        const int64_t nrows = nbc * OH;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1) \
    reduction(max : mx)
#endif
        for (int64_t r0 = 0; r0 < nrows; r0 += 8) { /* eight output rows' fold schedules */
            uint8_t fold[8 * FX_I16_FWD_MAX_SEGS];
            int32_t base[8];
            for (int j = 0; j < 8; j++) { /* lanes past the end repeat the last row */
                const int64_t row = r0 + j < nrows ? r0 + j : nrows - 1;
                base[j] = (int32_t)(((row / OH) * Hp + row % OH * sh) * G);
            }
            fx_i16_fold_schedules8_avx512(rn, base, wm, KK, g->KW, G, fold);
            for (int64_t row = r0; row < r0 + 8 && row < nrows; row++) {
                const int64_t n = row / OH, oh = row % OH;
                const uint8_t *rfold = fold + (row - r0) * nseg;
                for (int64_t ow0 = 0; ow0 < OW; ow0 += mr) {
                    const int rows = OW - ow0 < mr ? (int)(OW - ow0) : mr;
                    const uint64_t m = fn(xq + (n * HW + oh * sh * Wp + ow0 * sw) * Cpp, ld,
                                          xoff, nseg, wq + o0, opad, rfold,
                                          y + (n * P + oh * OW + ow0) * O + o0, O, rows, last);
                    mx = m > mx ? m : mx;
                }
            }
        }
    }
    if (ymax) *ymax = mx;
    return 1;
}
