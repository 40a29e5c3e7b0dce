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
 * is cut into segments of one tap and 8 channels. By Cauchy-Schwarz a segment's partial
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
#include "quant_q64_avx512.h"
#include "../core/pair_copy_avx512.h"
#include "../core/prefetch.h"
#include "../core/transpose_avx2.h"
#include "../nn/im2col.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#define SEG_PAIRS FX_I16_SEG_PAIRS

/* The rounding epilogue's state (fx_i16_fwd_direct_round): the image's fast-route roundings
 * at one shift (f) or two (f2), and the int32 route's where both shifts allow it (r16; 0:
 * never), the planes of the block's first output channel in the image's NCHW mantissas (yq,
 * yq2; P pixels a plane) and the block's channel count; the image's largest |sum| so far and
 * underflow counts, which each tile updates with its own. */
typedef struct itile_rd {
    fx_q64_fast f, f2;
    fx_round16 k, k2;
    int r16; /* both shifts on the int32 route */
    int16_t *yq, *yq2;
    int64_t P;
    int ncols;
    uint64_t *max_in; /* the image's largest |sum| so far */
    int64_t *nuf, *nuf2;
} itile_rd;

/* Up to 8 pixels of 16 channels of mantissas (r[i]: pixel i) into the first ncols channels'
 * planes at dst (channel c at dst + c P), the first nrows pixels of each. Each plane's line two
 * lines ahead is fetched first, as quant_i64_t does (FX_Q_T_STORE_AHEAD: sixteen short runs
 * into an output written once per op, more streams than a hardware prefetcher follows). */
static inline __attribute__((always_inline)) void store_planes8(const __m256i r[8], int nrows,
                                                                int ncols, int16_t *dst,
                                                                int64_t P)
{
    __m256i c[8];
    fx_transpose8x16_epi16(r, c);
    const __mmask8 m = (__mmask8)((1u << nrows) - 1u);
    for (int j = 0; j < 16 && j < ncols; j++) fx_prefetch_at(dst + j * P, FX_Q_T_STORE_AHEAD);
    for (int j = 0; j < 8 && j < ncols; j++) {
        _mm_mask_storeu_epi16(dst + j * P, m, _mm256_castsi256_si128(c[j]));
        if (j + 8 < ncols)
            _mm_mask_storeu_epi16(dst + (j + 8) * P, m, _mm256_extracti128_si256(c[j], 1));
    }
}

/* One tile: MR pixels of an output row (xb: the first one's top-left tap in the copy, ld words
 * per pixel) by 16 NV output channels (wb: their packed weights), the chain over the nseg
 * segments (segment i: SEG_PAIRS pairs at xb + xoff[i], weights at wb + i SEG_PAIRS opad), a
 * fold after segment i where fold[i]; rows of the MR are stored, int64, the last vector's
 * lanes under mask last. Returns the largest |sum| stored. ROUND (1: one rounding, 2: two)
 * rounds the first `rows` pixels' sums instead, into rd's planes at pixel px0, and stores
 * nothing at out. It rounds every lane: a lane past the layer's last output channel has
 * packed weights of zero (fx_i16_fwd_direct_pack_weights pads them), so its sum is 0, which
 * rounds to 0, counts as no underflow and is never the largest |sum|; its mantissas are not
 * stored (rd->ncols). */
static inline __attribute__((always_inline)) uint64_t
itile(const int MR, const int NV, const int64_t LD, int32_t *restrict hib, const uint32_t *xb,
      int64_t ld_any, const int64_t *xoff,
      int64_t nseg, const uint32_t *wb, int64_t opad, const uint8_t *fold, int64_t *out,
      int64_t ldo, int rows, __mmask16 last, const int ROUND, const itile_rd *rd, int64_t px0)
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
    if (!ROUND) return fx_i16_store_rows(MR, NV, acc, hi, out, ldo, rows, last, 0);
    /* local statistics (the mantissa stores could alias *rd's), added at the end */
    const fx_q64_fast f = rd->f, f2 = rd->f2;
    const fx_round16 k = rd->k, k2 = rd->k2;
    const int r16 = rd->r16;
    __m512i mx = _mm512_setzero_si512(); /* the second rounding takes the same sums' maximum */
    int64_t nuf = 0, nuf2 = 0;
    /* int32 route: the underflow counts per lane, and the range of h */
    __m512i uf = _mm512_setzero_si512(), uf2 = uf;
    __m512i hmax = _mm512_set1_epi32(INT32_MIN), hmin = _mm512_set1_epi32(INT32_MAX);
    for (int v = 0; v < NV; v++) {
        /* pixel r's sixteen mantissas in q[r] (q2[r] at the second shift); pixels past the
         * row's end are no outputs, and are not stored */
        __m256i q[FX_I16_MAX_ROWS], q2[FX_I16_MAX_ROWS];
        for (int r = 0; r < MR && r < rows; r++) {
            if (r16) {
                const __m512i h = _mm512_add_epi32(_mm512_load_si512((const void *)hi[r][v]),
                                                   _mm512_srai_epi32(acc[r][v], 16));
                const __m512i l = _mm512_and_si512(acc[r][v], _mm512_set1_epi32(0xFFFF));
                const __mmask16 nz = _mm512_test_epi32_mask(_mm512_or_si512(h, l),
                                                            _mm512_or_si512(h, l));
                hmax = _mm512_max_epi32(hmax, h);
                hmin = _mm512_min_epi32(hmin, h);
                q[r] = _mm512_cvtepi32_epi16(fx_round16_lanes(&k, h, l, nz, &uf));
                if (ROUND == 2)
                    q2[r] = _mm512_cvtepi32_epi16(fx_round16_lanes(&k2, h, l, nz, &uf2));
                continue;
            }
            __m512i s[2];
            fx_i16_sums_of(acc[r][v], hi[r][v], s);
            q[r] = fx_q64_pack16(fx_q64_fast_round(&f, s[0], &mx, &nuf),
                                 fx_q64_fast_round(&f, s[1], &mx, &nuf));
            if (ROUND == 2)
                q2[r] = fx_q64_pack16(fx_q64_fast_round(&f2, s[0], &mx, &nuf2),
                                      fx_q64_fast_round(&f2, s[1], &mx, &nuf2));
        }
        for (int r = rows; r < FX_I16_MAX_ROWS && r < (MR + 7) / 8 * 8; r++)
            q[r] = q2[r] = _mm256_setzero_si256();
        const int nc = rd->ncols - 16 * v;
        const int64_t at = 16 * v * rd->P + px0;
        for (int p0 = 0; p0 < MR && p0 < rows; p0 += 8) { /* eight pixels at a time */
            const int nr = rows - p0 < 8 ? rows - p0 : 8;
            store_planes8(q + p0, nr, nc, rd->yq + at + p0, rd->P);
            if (ROUND == 2) store_planes8(q2 + p0, nr, nc, rd->yq2 + at + p0, rd->P);
        }
    }
    uint64_t tmax = _mm512_reduce_max_epu64(mx);
    if (r16) {
        nuf = _mm512_reduce_add_epi32(uf);
        if (ROUND == 2) nuf2 = _mm512_reduce_add_epi32(uf2);
        /* the exact largest |sum| only where the tile's bound passes the image's so far */
        const int64_t hx = _mm512_reduce_max_epi32(hmax), hn = _mm512_reduce_min_epi32(hmin);
        const int64_t above = 65536 * (hx + 1) - 1, below = -65536 * hn;
        if ((uint64_t)(above > below ? above : below) > *rd->max_in)
            tmax = fx_i16_store_rows(MR, NV, acc, hi, NULL, 0, rows, 0xFFFF, FX_I16_MAX_ONLY);
    }
    if (tmax > *rd->max_in) *rd->max_in = tmax;
    *rd->nuf += nuf;
    if (ROUND == 2) *rd->nuf2 += nuf2;
    return 0;
}

#define ITILE_FN(MR, NV, LD)                                                                     \
    static uint64_t itile_##MR##x##NV##_##LD(const uint32_t *xb, int64_t ld, const int64_t *xoff, \
                                             int64_t nseg, const uint32_t *wb, int64_t opad,    \
                                             const uint8_t *fold, int64_t *out, int64_t ldo,    \
                                             int rows, __mmask16 last)                          \
    {                                                                                            \
        int32_t hib[FX_I16_MAX_ROWS * 4 * 16] __attribute__((aligned(64)));                     \
        return itile(MR, NV, LD, hib, xb, ld, xoff, nseg, wb, opad, fold, out, ldo, rows, last,  \
                     0, NULL, 0);                                                                \
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

/* the rounding tiles, one and two roundings (R), the same shapes and pixel strides */
typedef void (*iround_fn)(const uint32_t *, int64_t, const int64_t *, int64_t, const uint32_t *,
                          int64_t, const uint8_t *, int, const itile_rd *, int64_t);
#define IROUND_FN(MR, NV, LD, R)                                                                  \
    static void iround_##R##_##MR##x##NV##_##LD(const uint32_t *xb, int64_t ld,                   \
                                                const int64_t *xoff, int64_t nseg,                \
                                                const uint32_t *wb, int64_t opad,                 \
                                                const uint8_t *fold, int rows,                    \
                                                const itile_rd *rd, int64_t px0)                  \
    {                                                                                             \
        int32_t hib[FX_I16_MAX_ROWS * 4 * 16] __attribute__((aligned(64)));                      \
        itile(MR, NV, LD, hib, xb, ld, xoff, nseg, wb, opad, fold, NULL, 0, rows, 0xFFFF, R, rd,  \
              px0);                                                                               \
    }
#define IROUND_FNS(LD, R)                                                                         \
    IROUND_FN(7, 2, LD, R) IROUND_FN(8, 2, LD, R) IROUND_FN(14, 1, LD, R)                         \
    IROUND_FN(16, 1, LD, R) IROUND_FN(9, 1, LD, R)
IROUND_FNS(4, 1)
IROUND_FNS(8, 1)
IROUND_FNS(16, 1)
IROUND_FNS(32, 1)
IROUND_FNS(0, 1)
IROUND_FNS(4, 2)
IROUND_FNS(8, 2)
IROUND_FNS(16, 2)
IROUND_FNS(32, 2)
IROUND_FNS(0, 2)
#define IROUND_ROW(LD, R)                                                                         \
    {iround_##R##_7x2_##LD, iround_##R##_8x2_##LD, iround_##R##_14x1_##LD,                        \
     iround_##R##_16x1_##LD, iround_##R##_9x1_##LD}
/* [one or two roundings][LD as tile_fns][shape as tile_fns] */
static const iround_fn round_fns[2][5][5] = {
    {IROUND_ROW(4, 1), IROUND_ROW(8, 1), IROUND_ROW(16, 1), IROUND_ROW(32, 1), IROUND_ROW(0, 1)},
    {IROUND_ROW(4, 2), IROUND_ROW(8, 2), IROUND_ROW(16, 2), IROUND_ROW(32, 2), IROUND_ROW(0, 2)}};

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

/* rn[ih G + s]: the saturating row maxima of fx_pair_nhwc_padded_avx512 made the row norms
 * ceil(sqrt(...)), eight at a time; a saturated maximum (a pixel's eight channels near full
 * scale, rare) summed again exactly from the copy xq (Hp rows of Wp pixels of Cpp words) */
static void squares_to_norms(const uint32_t *xq, int64_t Hp, int64_t Wp, int64_t Cpp, int64_t G,
                             uint32_t *rn)
{
    const int64_t n = Hp * G;
    for (int64_t i0 = 0; i0 < n; i0 += 8) {
        const int m = n - i0 < 8 ? (int)(n - i0) : 8;
        uint64_t sq[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int j = 0; j < m; j++) {
            const int64_t i = i0 + j;
            sq[j] = rn[i] == (uint32_t)INT32_MAX
                        ? (uint64_t)fx_i16_copy_row_squares_max(xq + i / G * Wp * Cpp, Wp, Cpp,
                                                                i % G)
                        : rn[i];
        }
        uint32_t out[8];
        _mm256_storeu_si256((__m256i *)(void *)out,
                            fx_i16_ceil_sqrt8(_mm512_loadu_si512((const void *)sq)));
        for (int j = 0; j < m; j++) rn[i0 + j] = out[j];
    }
}

void fx_i16_fwd_copy_image_avx512(const struct fx_conv_geom *g, const int16_t *img, uint32_t *xq,
                                  uint32_t *rn)
{
    const int64_t Cpp = fx_i16_pairs(g->C);
    fx_pair_nhwc_padded_avx512((const uint16_t *)(const void *)img, g->C, g->H, g->W, g->ph,
                               g->pw, Cpp, xq, (int32_t *)(void *)rn);
    squares_to_norms(xq, g->H + 2 * g->ph, g->W + 2 * g->pw, Cpp, fx_i16_groups(g->C), rn);
}

/* A chunk made ready for the tiles: its channel-pair-last copy xq, padded, and each padded
 * row's segment norms rn ([n][ih][s]) (fwd_chunk_copy); then a kernel's taps over it: its
 * packed weights' segment norms, the segments' tap offsets and the outputs computed
 * (fwd_chunk_weights; fwd_chunk_setup does both for a convolution's own geometry). The
 * outputs are rows oy0 .. oy0 + OH - 1 and columns ox0 .. ox0 + OW - 1 of the correlation
 * over the copy (oy0 = ox0 = 0 but for the phases of a strided input gradient, which read one
 * copy padded for the widest of them: fx_i16_dgrad_s2_round). */
typedef struct fwd_chunk {
    int64_t O, Cpp, G, opad, Hp, Wp, HW, OH, OW, P, KK, KW, nseg, sh, sw, ld, oy0, ox0;
    int ldi;                  /* tile_fns' index of the pixel stride ld */
    const uint32_t *wn;       /* the weights' segment norms per block of 16 output channels */
    uint32_t *xq, *rn;
    int64_t nrn;              /* padded rows with norms: nbc Hp */
    int64_t xoff[FX_I16_FWD_MAX_SEGS]; /* word offsets of the segments from a pixel's tap 0 */
} fwd_chunk;

/* The copy and the norms, while an image's planes are in cache */
static void fwd_chunk_copy(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                           uint32_t *scratch, fwd_chunk *k)
{
    const int64_t C = g->C, Cpp = fx_i16_pairs(C), G = fx_i16_groups(C);
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, HW = Hp * Wp;
    k->Cpp = Cpp, k->G = G, k->Hp = Hp, k->Wp = Wp, k->HW = HW, k->sh = g->sh, k->sw = g->sw;
    k->ld = g->sw * Cpp; /* words from one of a tile's pixels to the next */
    k->ldi = k->ld == 4 ? 0 : k->ld == 8 ? 1 : k->ld == 16 ? 2 : k->ld == 32 ? 3 : 4;
    k->nrn = nbc * Hp;
    uint32_t *xq = scratch + ((16 - ((uintptr_t)scratch / 4) % 16) % 16);
    const int64_t slack = (FX_I16_MAX_ROWS * g->sw + g->KW) * Cpp;
    uint32_t *rn = xq + nbc * HW * Cpp + slack; /* [n][ih][s] */
    k->xq = xq, k->rn = rn;
    for (int64_t n = 0; n < nbc; n++)
        fx_i16_fwd_copy_image_avx512(g, xp + n * C * g->H * g->W, xq + n * HW * Cpp,
                                     rn + n * Hp * G);
    memset(xq + nbc * HW * Cpp, 0, sizeof(uint32_t) * (size_t)slack);
}

/* The taps of a kernel of geometry g (its input the copy's; wq its packed weights) computing
 * outputs from (oy0, ox0) on; 0 where a segment alone may leave int32 (data near full scale:
 * the GEMM's any-data kernels take the chunk) */
static int fwd_chunk_weights(fwd_chunk *k, const struct fx_conv_geom *g, const uint32_t *wq,
                             int64_t oy0, int64_t ox0)
{
    const int64_t KK = g->KH * g->KW;
    k->O = g->O, k->opad = (g->O + 15) / 16 * 16;
    k->OH = g->OH, k->OW = g->OW, k->P = g->OH * g->OW, k->oy0 = oy0, k->ox0 = ox0;
    k->KK = KK, k->KW = g->KW, k->nseg = KK * k->G;
    k->wn = wq + KK * k->Cpp * k->opad;
    if (!fx_i16_fwd_admit(k->rn, k->nrn, k->wn, k->opad / 16 * KK, k->G)) return 0;
    fx_i16_fwd_offsets(g, k->xoff);
    return 1;
}

static int fwd_chunk_setup(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                           const uint32_t *wq, uint32_t *scratch, fwd_chunk *k)
{
    fwd_chunk_copy(g, xp, nbc, scratch, k);
    return fwd_chunk_weights(k, g, wq, 0, 0);
}

/* A block of up to 32 output channels from o0: its tile (NV vectors of channels by MR pixels,
 * shape: tile_fns' index), the last vector's lanes, and the weight norms its chains are cut
 * by, the larger of its two vectors' */
typedef struct fwd_block {
    int ncols, nv, mr, shape;
    __mmask16 last;
    uint32_t wm[FX_I16_FWD_MAX_SEGS];
} fwd_block;

static void fwd_block_setup(const fwd_chunk *k, int64_t o0, fwd_block *b)
{
    const int64_t ow = k->O - o0 < 32 ? k->O - o0 : 32;
    b->ncols = (int)ow;
    b->nv = ow > 16 ? 2 : 1; /* never past opad */
    b->mr = b->nv == 2 ? (k->OW % 7 == 0 && k->OW % 8 != 0 ? 7 : 8) : tile_rows_1(k->OW);
    b->shape = b->nv == 2 ? (b->mr == 7 ? 0 : 1) : b->mr == 14 ? 2 : b->mr == 16 ? 3 : 4;
    const int64_t tail = ow - 16 * (b->nv - 1);
    b->last = (__mmask16)(tail >= 16 ? 0xFFFF : (1u << tail) - 1);
    const uint32_t *wn0 = k->wn + (o0 / 16) * k->nseg, *wn1 = wn0 + k->nseg;
    for (int64_t i = 0; i < k->nseg; i++)
        b->wm[i] = b->nv == 2 && wn1[i] > wn0[i] ? wn1[i] : wn0[i];
}

/* The fold schedules of output rows r0 .. r0 + 7 of the chunk (rows n OH + oh; lanes from
 * rend on repeat row rend - 1) */
static void fwd_schedules(const fwd_chunk *k, const fwd_block *b, int64_t r0, int64_t rend,
                          uint8_t *fold)
{
    int32_t base[8];
    for (int j = 0; j < 8; j++) {
        const int64_t row = r0 + j < rend ? r0 + j : rend - 1;
        base[j] = (int32_t)(((row / k->OH) * k->Hp + (row % k->OH + k->oy0) * k->sh) * k->G);
    }
    fx_i16_fold_schedules8_avx512(k->rn, base, b->wm, k->KK, k->KW, k->G, fold);
}

/* the copy's first tap of pixel (n, oh, ow0) */
static const uint32_t *fwd_tile_x(const fwd_chunk *k, int64_t n, int64_t oh, int64_t ow0)
{
    return k->xq + (n * k->HW + (oh + k->oy0) * k->sh * k->Wp + (ow0 + k->ox0) * k->sw) * k->Cpp;
}

int fx_i16_fwd_direct(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                      const uint32_t *wq, uint32_t *scratch, int64_t *y, int nthreads,
                      uint64_t *ymax)
{
    fwd_chunk k;
    if (!fwd_chunk_setup(g, xp, nbc, wq, scratch, &k)) return 0;
    const int64_t O = k.O, OH = k.OH, OW = k.OW, P = k.P, nseg = k.nseg;
    uint64_t mx = 0;
    for (int64_t o0 = 0; o0 < O; o0 += 32) {
        fwd_block b;
        fwd_block_setup(&k, o0, &b);
        const itile_fn fn = tile_fns[k.ldi][b.shape];
        const int mr = b.mr;
        (void)nthreads;
        const int64_t nrows = nbc * OH;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1) \
    reduction(max : mx)
#endif
        for (int64_t r0 = 0; r0 < nrows; r0 += 8) { /* eight output rows' fold schedules */
            uint8_t fold[8 * FX_I16_FWD_MAX_SEGS];
            fwd_schedules(&k, &b, r0, nrows, fold);
            for (int64_t row = r0; row < r0 + 8 && row < nrows; row++) {
                const int64_t n = row / OH, oh = row % OH;
                const uint8_t *rfold = fold + (row - r0) * nseg;
                for (int64_t ow0 = 0; ow0 < OW; ow0 += mr) {
                    const int rows = OW - ow0 < mr ? (int)(OW - ow0) : mr;
                    const uint64_t m = fn(fwd_tile_x(&k, n, oh, ow0), k.ld, k.xoff, nseg, wq + o0,
                                          k.opad, rfold, y + (n * P + oh * OW + ow0) * O + o0, O,
                                          rows, b.last);
                    mx = m > mx ? m : mx;
                }
            }
        }
    }
    if (ymax) *ymax = mx;
    return 1;
}

/* ---- the sums rounded in the epilogue (fx_i16_fwd_direct_round) --------------------------
 * Why: fx_i16_fwd_direct stores every output's int64 sum (four times the mantissa's bytes),
 * and the caller's rounding (quant_i64_t) reads them back and stores the mantissas transposed
 * into NCHW order; in a ResNet-20 flex16_5 step on the Zen 5 that pass alone took 5 % of the
 * samples. Here each tile's sums are rounded while they are in registers, on quant_i64's fast
 * route (quant_q64_avx512.h: the same mantissas and statistics), and its pixels go into the
 * channels' planes by 8 x 8 transposes of int16, as the AVX2 and AMX kernels' epilogues do. */
static atomic_int round16_on = 1;
static atomic_llong round16_chunks;
void fx_i16_fwd_direct_round16_set_enabled(int on) { atomic_store(&round16_on, on != 0); }
long long fx_i16_fwd_direct_round16_chunks(void) { return atomic_load(&round16_chunks); }

/* A rounding state for shift (and shift2 with two), its statistics into *max_in, *nuf, *nuf2 */
static itile_rd round_state(int shift, int two, int shift2, uint64_t *max_in, int64_t *nuf,
                            int64_t *nuf2)
{
    const int r16 = atomic_load_explicit(&round16_on, memory_order_relaxed) &&
                    shift >= FX_R16_MIN_SHIFT && shift <= FX_R16_MAX_SHIFT &&
                    (!two || (shift2 >= FX_R16_MIN_SHIFT && shift2 <= FX_R16_MAX_SHIFT));
    const itile_rd rd = {.f = fx_q64_fast_setup(shift),
                         .f2 = fx_q64_fast_setup(two ? shift2 : shift),
                         .k = fx_round16_setup(shift),
                         .k2 = fx_round16_setup(two ? shift2 : shift),
                         .r16 = r16,
                         .max_in = max_in,
                         .nuf = nuf,
                         .nuf2 = nuf2};
    if (r16) atomic_fetch_add_explicit(&round16_chunks, 1, memory_order_relaxed);
    return rd;
}

/* Image n's outputs of k (its taps' packed weights wq) rounded by rd into yq (and yq2 with
 * two): the image's NCHW mantissas, k's P pixels a plane */
static void round_image(const fwd_chunk *k, const uint32_t *wq, int64_t n, int two,
                        itile_rd *rd, int16_t *yq, int16_t *yq2)
{
    const int64_t O = k->O, OH = k->OH, OW = k->OW, P = k->P, nseg = k->nseg;
    rd->P = P;
    for (int64_t o0 = 0; o0 < O; o0 += 32) {
        fwd_block b;
        fwd_block_setup(k, o0, &b);
        const iround_fn fn = round_fns[two][k->ldi][b.shape];
        rd->yq = yq + o0 * P;
        rd->yq2 = two ? yq2 + o0 * P : NULL;
        rd->ncols = b.ncols;
        for (int64_t oh0 = 0; oh0 < OH; oh0 += 8) {
            uint8_t fold[8 * FX_I16_FWD_MAX_SEGS];
            fwd_schedules(k, &b, n * OH + oh0, (n + 1) * OH, fold);
            for (int64_t oh = oh0; oh < oh0 + 8 && oh < OH; oh++)
                for (int64_t ow0 = 0; ow0 < OW; ow0 += b.mr) {
                    const int rows = OW - ow0 < b.mr ? (int)(OW - ow0) : b.mr;
                    fn(fwd_tile_x(k, n, oh, ow0), k->ld, k->xoff, nseg, wq + o0, k->opad,
                       fold + (oh - oh0) * nseg, rows, rd, oh * OW + ow0);
                }
        }
    }
}

int fx_i16_fwd_direct_round(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                            const uint32_t *wq, uint32_t *scratch, int shift, int16_t *yq,
                            fx_qstats *part, int shift2, int16_t *yq2, fx_qstats *part2)
{
    const int two = yq2 != NULL;
    if (!fx_q64_fast_ok(shift) || (two && !fx_q64_fast_ok(shift2)) || nbc <= 0) return 0;
    fwd_chunk k;
    if (!fwd_chunk_setup(g, xp, nbc, wq, scratch, &k)) return 0;
    const int64_t OP = k.O * k.P;
    uint64_t max_in;
    int64_t nuf, nuf2;
    itile_rd rd = round_state(shift, two, shift2, &max_in, &nuf, &nuf2);
    /* the roundings still whole: a sum above a rounding's bound drops that one (a saturating
     * write, which the general rounding counts), and the chunk is given back once none is */
    int whole = two ? FX_I16_ROUND_FIRST | FX_I16_ROUND_SECOND : FX_I16_ROUND_FIRST;
    int64_t done = 0;
    for (; done < nbc && whole; done++) { /* an image at a time: its statistics complete */
        max_in = 0, nuf = 0, nuf2 = 0;
        round_image(&k, wq, done, two, &rd, yq + done * OP, two ? yq2 + done * OP : NULL);
        /* every sum is below 2^47 (C KH KW <= 2^16 products of int16): max_in is exact */
        whole = fx_i16_round_still_whole(whole, max_in, shift, two, shift2);
        fx_i16_round_stats(&part[done], whole & FX_I16_ROUND_FIRST, max_in, nuf, shift);
        if (two)
            fx_i16_round_stats(&part2[done], whole & FX_I16_ROUND_SECOND, max_in, nuf2, shift2);
    }
    /* a rounding broken at some image: every image's statistics say so */
    fx_i16_round_mark_broken_images(whole, two, done, part, part2);
    fx_i16_fwd_round_count(whole);
    return whole;
}

/* ---- the stride-2 input gradient by phases, rounded in the epilogue ---------------------------
 * Why: by phases (src/nn/conv_dgrad_phases.c) each phase's convolution of dy made its own copy
 * of dy and its norms, stored its int64 sums (the full correlation's rows of 17 where dx takes
 * 16: a 9-pixel tile beside a 8-pixel one), which were gathered into dx's order as int64 and
 * rounded in a pass of their own: in ResNet-20's 16 -> 32 stride-2 input gradient the kernel
 * took about a third of the time. Here, as on AMX (fx_i16_dgrad_amx_s2_round), dy is copied
 * once, padded for the widest phase; each phase computes only the window of its outputs that
 * dx takes, rounded in the tiles' epilogue into a quarter-size plane; and the phases' planes are
 * interleaved into dx's rows. */
static inline __m512i interleave_idx(void)
{
    /* lane 2i: e[i], lane 2i + 1: o[i] (o in the second operand, lanes 32..) */
    int16_t ix[32];
    for (int i = 0; i < 16; i++) {
        ix[2 * i] = (int16_t)i;
        ix[2 * i + 1] = (int16_t)(32 + i);
    }
    return _mm512_loadu_si512((const void *)ix);
}

/* an fx_i16_s2_interleave_fn (conv_i16.h): one vpermt2w per 32 values of a dx row */
void fx_i16_dgrad_s2_interleave_avx512(int16_t *const q[4], int64_t nbc, int64_t C, int64_t H,
                                       int64_t W, int64_t ph, int64_t pw, int16_t *dx)
{
    const int64_t hw = H / 2, ww = W / 2;
    const __m512i idx = interleave_idx();
    for (int64_t n = 0; n < nbc; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++) {
                const int64_t rh = (h + ph) & 1, win = ((n * C + c) * hw + (h >> 1)) * ww;
                const int16_t *ev = q[rh * 2 + (pw & 1)], *od = q[rh * 2 + ((pw + 1) & 1)];
                int16_t *row = dx + ((n * C + c) * H + h) * W;
                for (int64_t i = 0; i < ww; i += 16) {
                    const int64_t m = ww - i < 16 ? ww - i : 16;
                    const __mmask16 k = (__mmask16)((1u << m) - 1u);
                    const __m256i e = ev ? _mm256_maskz_loadu_epi16(k, ev + win + i)
                                         : _mm256_setzero_si256();
                    const __m256i o = od ? _mm256_maskz_loadu_epi16(k, od + win + i)
                                         : _mm256_setzero_si256();
                    const __m512i r = _mm512_permutex2var_epi16(_mm512_castsi256_si512(e), idx,
                                                                _mm512_castsi256_si512(o));
                    const __mmask32 k2 = m == 16 ? (__mmask32)0xFFFFFFFFu
                                                 : (__mmask32)((1u << (2 * m)) - 1u);
                    _mm512_mask_storeu_epi16(row + 2 * i, k2, r);
                }
            }
}

int fx_i16_dgrad_s2_round(const fx_i16_dgrad_s2 *d, const int16_t *dy, int64_t nbc,
                          uint32_t *scratch, int shift, int16_t *dx, fx_qstats *part,
                          int shift2, int16_t *dx2, fx_qstats *part2)
{
    const int two = dx2 != NULL;
    if (!fx_q64_fast_ok(shift) || (two && !fx_q64_fast_ok(shift2)) || nbc <= 0) return 0;
    fwd_chunk k;
    fwd_chunk_copy(d->planes, dy, nbc, scratch, &k);
    int16_t *q[4], *q2[4];
    fx_i16_dgrad_s2_windows(scratch, fx_i16_fwd_direct_scratch(d->planes, nbc), d, nbc, two, q,
                            q2);
    uint64_t max_in = 0;
    int64_t nuf = 0, nuf2 = 0;
    itile_rd rd = round_state(shift, two, shift2, &max_in, &nuf, &nuf2);
    int whole = two ? FX_I16_ROUND_FIRST | FX_I16_ROUND_SECOND : FX_I16_ROUND_FIRST;
    for (int k4 = 0; k4 < 4 && whole; k4++) {
        if (!d->wq[k4]) continue;
        /* data the kernel declines (a segment too large for a chain): the caller's int64
         * phases decline it too, and col2im takes the op */
        if (!fwd_chunk_weights(&k, d->phase[k4], d->wq[k4], d->oy0[k4], d->ox0[k4])) return 0;
        const int64_t OP = k.O * k.P;
        for (int64_t n = 0; n < nbc; n++)
            round_image(&k, d->wq[k4], n, two, &rd, q[k4] + n * OP, two ? q2[k4] + n * OP : NULL);
        whole = fx_i16_round_still_whole(whole, max_in, shift, two, shift2);
    }
    const fx_i16_round_sums sums = {max_in, nuf, nuf2, shift, shift2};
    return fx_i16_dgrad_s2_finish(d, whole, two, &sums, q, q2, nbc, part, part2, dx, dx2,
                                  fx_i16_dgrad_s2_interleave_avx512);
}
