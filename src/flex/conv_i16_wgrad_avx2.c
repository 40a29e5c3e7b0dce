/* The exact int16 weight gradient of a convolution without a patch matrix on AVX2 (the strides
 * conv_i16_wgrad_avx512.c takes, the same way):
 * vpmaddwd + vpaddd in place of AVX512_VNNI's vpdpwssd, otherwise the design of
 * conv_i16_wgrad_avx512.c (its comment says how the chains stay exact; conv_i16_wgrad.h holds
 * what the two share).
 *
 * Why on AVX2: the GEMM route writes the chunk's patch matrix (each input value once per tap)
 * and packs it again, and on a Zen 1 EPYC, where vpmaddwd issues at the fp32 FMA's multiply
 * rate, that overhead is what separates the integer formats from fp32 (docs/performance.md).
 *
 * Register tile: MR (1..6) rows r = (c, kh, kw) of dW^T by 16 output channels, two ymm of
 * int32 lanes per row: per pixel pair along an output row, one broadcast per row of its two
 * input values (one unaligned 32-bit load from the padded chunk or its column runs) and two
 * vectors of dy's pair
 * words. The C KH KW rows are cut into tiles of near-equal heights, so no lane sums a row that
 * is not there. The pair step and the fold are those of the forward kernel (conv_i16_avx2.h). */
#include "conv_i16.h"
#include "conv_i16_avx2.h"
#include "conv_i16_direct.h"
#include "conv_i16_wgrad.h"
#include "gemm_i16.h" /* fx_ceil_sqrt */
#include "../nn/im2col.h"

#include <immintrin.h>

#define WG_MR_MAX 6

/* One tile: MR rows (offsets roff into a padded image of ximg values, whose output row oy
 * starts oy ystep values in) by 16 channels of dyt (already offset to the tile's first
 * channel), the chain over all nbc images' pixel pairs, a fold after output row s = n OH + oy
 * where fold[s]; the first ncols sums of each row stored at out (row i at out + i ldo) or
 * added to what is there (add). */
static inline __attribute__((always_inline)) void
wtile(const int MR, int32_t *restrict hib, const int16_t *xp, int64_t ximg, const int64_t *roff,
      const uint32_t *dyt, int64_t dimg, int64_t opad, int64_t OH, int64_t OW, int64_t ystep,
      int64_t nbc, const uint8_t *fold, int64_t *out, int64_t ldo, int ncols, int add)
{
    int32_t (*hi)[2][8] = (int32_t (*)[2][8])hib; /* in the caller's frame: see itile */
    FX_I16_AVX2_TILE_ACCS;
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < 2; v++) _mm256_store_si256((__m256i *)hi[r][v], _mm256_setzero_si256());
    const int64_t npair = OW / 2;
    for (int64_t n = 0; n < nbc; n++) {
        for (int64_t oy = 0; oy < OH; oy++) {
            const int16_t *xr = xp + n * ximg + oy * ystep;
            const uint32_t *dr = dyt + n * dimg + oy * npair * opad;
            const uint8_t fs = fold[n * OH + oy];
#define FX_STEP(r, a0, a1)                                                                         \
    if (MR > r) FX_MADD_ROW(a0, a1, b0, b1, xr + roff[r] + 2 * j);
/* pixel pair j of the row: dy's two vectors, then every kernel row's step */
#define FX_PAIR                                                                                    \
    const __m256i b0 = _mm256_load_si256((const __m256i *)(dr + j * opad));                       \
    const __m256i b1 = _mm256_load_si256((const __m256i *)(dr + j * opad + 8));                   \
    FX_I16_AVX2_ROWS(FX_STEP)
            if (__builtin_expect(fs == FX_I16_FOLD_PAIRS, 0)) {
                /* a row too large for a chain: one pixel pair per chain */
                for (int64_t j = 0; j < npair; j++) {
                    FX_PAIR
                    FX_I16_AVX2_FOLD_ALL(MR, hi);
                }
                continue;
            }
            for (int64_t j = 0; j < npair; j++) {
                FX_PAIR
            }
#undef FX_PAIR
#undef FX_STEP
            if (fs) FX_I16_AVX2_FOLD_ALL(MR, hi);
        }
    }
#define FX_STORE(r, a0, a1)                                                                        \
    if (MR > r) fx_i16_store_row_avx2(a0, a1, hi[r][0], out + r * ldo, ncols, add, NULL);
    FX_I16_AVX2_ROWS(FX_STORE)
#undef FX_STORE
}

typedef void (*wtile_fn)(const int16_t *, int64_t, const int64_t *, const uint32_t *, int64_t,
                         int64_t, int64_t, int64_t, int64_t, int64_t, const uint8_t *, int64_t *,
                         int64_t, int, int);

#define WTILE_FN(MR)                                                                              \
    static void wtile_##MR(const int16_t *xp, int64_t ximg, const int64_t *roff,                  \
                           const uint32_t *dyt, int64_t dimg, int64_t opad, int64_t OH,           \
                           int64_t OW, int64_t ystep, int64_t nbc, const uint8_t *fold,           \
                           int64_t *out, int64_t ldo, int ncols, int add)                         \
    {                                                                                             \
        int32_t hib[WG_MR_MAX * 2 * 8] __attribute__((aligned(32)));                              \
        wtile(MR, hib, xp, ximg, roff, dyt, dimg, opad, OH, OW, ystep, nbc, fold, out, ldo, ncols, \
              add);                                                                               \
    }
WTILE_FN(1)
WTILE_FN(2)
WTILE_FN(3)
WTILE_FN(4)
WTILE_FN(5)
WTILE_FN(6)
static const wtile_fn wtile_fns[WG_MR_MAX] = {wtile_1, wtile_2, wtile_3,
                                              wtile_4, wtile_5, wtile_6};

/* out[i] = ceil(sqrt(sum of the squares of row i)), rows of len <= 2^10 values ld apart, as
 * fx_i16_row_norms_portable: 16 values a step, each pair's squares (at most 2^31, one unsigned
 * 32-bit lane of vpmaddwd) added into 64-bit lanes. The portable loop was 3 % of a ResNet-20
 * training step in flex16_5 on the Zen 3. Four rows at a time end in one vector square root
 * with fx_ceil_sqrt's truncation and correction (the same values): one scalar root per row
 * was half of this function's perf samples in a dfp16 ResNet-20 epoch, a chain of the root,
 * its conversion and the compare per row. */
static inline __m256i row_squares(const int16_t *row, int64_t len)
{
    const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFFll);
    __m256i acc = _mm256_setzero_si256();
    for (int64_t j = 0; j + 16 <= len; j += 16) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(row + j));
        const __m256i sq = _mm256_madd_epi16(v, v);
        acc = _mm256_add_epi64(acc, _mm256_and_si256(sq, lo32));
        acc = _mm256_add_epi64(acc, _mm256_srli_epi64(sq, 32));
    }
    return acc;
}

static inline int64_t row_tail_squares(const int16_t *row, int64_t len)
{
    int64_t sq = 0;
    for (int64_t j = len / 16 * 16; j < len; j++) sq += (int64_t)row[j] * row[j];
    return sq;
}

void fx_i16_row_norms_avx2(const int16_t *p, int64_t rows, int64_t len, int64_t ld, uint32_t *out)
{
    int64_t i = 0;
    /* the sums are below len 2^30 <= 2^50: exact as doubles, by the 2^52 offset */
    const __m256i magic = _mm256_set1_epi64x(0x4330000000000000ll);
    const __m256d magic_d = _mm256_set1_pd(4503599627370496.0); /* 2^52 */
    for (; len <= ((int64_t)1 << 20) && i + 4 <= rows; i += 4) {
        const int16_t *r = p + i * ld;
        const __m256i a0 = row_squares(r, len), a1 = row_squares(r + ld, len);
        const __m256i a2 = row_squares(r + 2 * ld, len), a3 = row_squares(r + 3 * ld, len);
        /* the four rows' lane sums side by side: (a0, a1, a2, a3) */
        const __m256i t0 = _mm256_add_epi64(_mm256_unpacklo_epi64(a0, a1), _mm256_unpackhi_epi64(a0, a1));
        const __m256i t1 = _mm256_add_epi64(_mm256_unpacklo_epi64(a2, a3), _mm256_unpackhi_epi64(a2, a3));
        __m256i sq = _mm256_add_epi64(_mm256_permute2x128_si256(t0, t1, 0x20),
                                      _mm256_permute2x128_si256(t0, t1, 0x31));
        if (len % 16)
            sq = _mm256_add_epi64(sq, _mm256_set_epi64x(row_tail_squares(r + 3 * ld, len),
                                                        row_tail_squares(r + 2 * ld, len),
                                                        row_tail_squares(r + ld, len),
                                                        row_tail_squares(r, len)));
        const __m256d d = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(sq, magic)), magic_d);
        /* fx_ceil_sqrt: the root truncated, plus one where its square is below the sum */
        const __m256i rt = _mm256_cvtepi32_epi64(_mm256_cvttpd_epi32(_mm256_sqrt_pd(d)));
        const __m256i below = _mm256_cmpgt_epi64(sq, _mm256_mul_epu32(rt, rt));
        const __m256i v = _mm256_sub_epi64(rt, below);
        /* the low words of the four 64-bit lanes */
        const __m256i w = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
        _mm_storeu_si128((__m128i *)(out + i), _mm256_castsi256_si128(w));
    }
    for (; i < rows; i++) {
        const int16_t *row = p + i * ld;
        uint64_t lane[4];
        _mm256_storeu_si256((__m256i *)lane, row_squares(row, len));
        const int64_t sq = (int64_t)(lane[0] + lane[1] + lane[2] + lane[3]) + row_tail_squares(row, len);
        out[i] = (uint32_t)fx_ceil_sqrt(sq);
    }
}

/* fx_i16_wgrad_fold_schedule4_avx2. Why: the scalar greedy scan is a chain of dependent adds,
 * compares and selects per row with its stores around it (1.4 % of a one-thread dfp16
 * ResNet-20 step on the AVX2 EPYC, 0.9 % of the CNN's); four quarters scanned in the lanes of
 * one vector take about the time of one. The bounds come a block of WG_LANE_BLOCK steps at a
 * time, one step's four rows (one per quarter) side by side. */
#define WG_LANE_BLOCK 64
/* Below this many rows, the scalar scan: a few rows per lane would not pay for the setup. An
 * extra chain costs one fold of the tile's accumulators, about a tenth of one output row's
 * pair steps on ResNet-20's layers. */
#define WG_LANE_MIN_ROWS 16
void fx_i16_wgrad_fold_schedule4_avx2(const uint32_t *xk, const uint32_t *dm, int64_t S,
                                      int64_t c_lo, int64_t c_hi, uint8_t *fold)
{
    if (S < WG_LANE_MIN_ROWS) {
        fx_i16_wgrad_fold_schedule(xk, dm, S, c_lo, c_hi, fold);
        return;
    }
    const int64_t q = (S + 3) / 4, nch = c_hi - c_lo + 1;
    int64_t len[4]; /* lane j: rows j q .. j q + len[j] - 1 (S > 9: every lane has rows) */
    for (int j = 0; j < 4; j++) len[j] = S - j * q < q ? S - j * q : q;
    const uint32_t *xc = xk + c_lo * S;
    const __m256i lim = _mm256_set1_epi64x(FX_I16_CHAIN_LIMIT);
    /* a lane's first step, with run and over 0, starts its quarter's first chain */
    __m256i run = _mm256_setzero_si256(), over = _mm256_setzero_si256();
    for (int64_t i0 = 0; i0 < q; i0 += WG_LANE_BLOCK) {
        const int64_t n = q - i0 < WG_LANE_BLOCK ? q - i0 : WG_LANE_BLOCK, n4 = (n + 3) & ~3;
        /* bl[j][i]: lane j's bound at step i0 + i (contiguous rows: loops the compiler
         * vectorises); 0 past a short lane and up to n4, which cuts nothing */
        int64_t bl[4][WG_LANE_BLOCK] __attribute__((aligned(32)));
        for (int j = 0; j < 4; j++) {
            const int64_t r0 = j * q + i0, m = len[j] - i0 < n ? len[j] - i0 : n;
            const uint32_t *x0 = m > 0 ? xc + r0 : xc; /* a short lane may have no rows here */
            if (nch == 1) { /* (a copy into xm first became a rep movsq: a sixth of the time) */
                for (int64_t i = 0; i < m; i++) bl[j][i] = (int64_t)x0[i] * dm[r0 + i];
            } else {
                uint32_t xm[WG_LANE_BLOCK];
                for (int64_t i = 0; i < m; i++) xm[i] = x0[S + i] > x0[i] ? x0[S + i] : x0[i];
                for (int64_t c = 2; c < nch; c++)
                    for (int64_t i = 0; i < m; i++)
                        xm[i] = x0[c * S + i] > xm[i] ? x0[c * S + i] : xm[i];
                for (int64_t i = 0; i < m; i++) bl[j][i] = (int64_t)xm[i] * dm[r0 + i];
            }
            for (int64_t i = m < 0 ? 0 : m; i < n4; i++) bl[j][i] = 0;
        }
        uint8_t code[WG_LANE_BLOCK]; /* code[i]: step i0 + i - 1's (fx_i16_lanes_cut) */
        for (int64_t i4 = 0; i4 < n4; i4 += 4) {
            /* four steps of the four lanes: a 4 x 4 transpose of 64-bit words */
            const __m256i v0 = _mm256_load_si256((const __m256i *)(const void *)(bl[0] + i4));
            const __m256i v1 = _mm256_load_si256((const __m256i *)(const void *)(bl[1] + i4));
            const __m256i v2 = _mm256_load_si256((const __m256i *)(const void *)(bl[2] + i4));
            const __m256i v3 = _mm256_load_si256((const __m256i *)(const void *)(bl[3] + i4));
            const __m256i t0 = _mm256_unpacklo_epi64(v0, v1), t1 = _mm256_unpackhi_epi64(v0, v1);
            const __m256i t2 = _mm256_unpacklo_epi64(v2, v3), t3 = _mm256_unpackhi_epi64(v2, v3);
            const __m256i st[4] = {_mm256_permute2x128_si256(t0, t2, 0x20),
                                   _mm256_permute2x128_si256(t1, t3, 0x20),
                                   _mm256_permute2x128_si256(t0, t2, 0x31),
                                   _mm256_permute2x128_si256(t1, t3, 0x31)};
            for (int k = 0; k < 4 && i4 + k < n; k++)
                code[i4 + k] = fx_i16_lanes_cut(st[k], lim, &run, &over);
        }
        /* lane j's folds of steps i0 - 1 + first .. (the steps below len[j]) */
        const int64_t first = i0 == 0 ? 1 : 0;
        for (int j = 0; j < 4; j++) {
            const int64_t end = len[j] - i0 + 1 < n ? len[j] - i0 + 1 : n;
            if (end > first)
                fx_i16_lane_folds(code + first, end - first, j, fold + j * q + i0 - 1 + first);
        }
    }
    /* each quarter's last row: a chain ends there (the last row of all: as the scalar scan) */
    for (int j = 0; j < 4; j++) {
        const int64_t r = j * q + len[j] - 1;
        uint32_t x = xc[r];
        for (int64_t c = 1; c < nch; c++) x = xc[c * S + r] > x ? xc[c * S + r] : x;
        const int pairs = (int64_t)x * dm[r] > FX_I16_CHAIN_LIMIT;
        fold[r] = (uint8_t)(pairs ? FX_I16_FOLD_PAIRS : r + 1 < S);
    }
}
#undef WG_LANE_BLOCK
#undef WG_LANE_MIN_ROWS

/* fx_i16_cols_by_stride_portable's values at stride 2 (ResNet's), 32 values a step, each
 * 32-bit lane's low and high words packed apart */
static void cols_by_2_avx2(const int16_t *xp, int64_t rows, int64_t Wp, int16_t *xd)
{
    const int64_t Wq = (Wp + 1) / 2, Wd = 2 * Wq;
    const __m256i low = _mm256_set1_epi32(0xFFFF);
    for (int64_t r = 0; r < rows; r++) {
        const int16_t *src = xp + r * Wp;
        int16_t *de = xd + r * Wd, *dodd = de + Wq;
        int64_t j = 0;
        for (; j + 32 <= Wp; j += 32) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(src + j));
            const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(src + j + 16));
            /* words as unsigned values in 32-bit lanes: packus keeps each bit pattern; the pack
             * interleaves the 128-bit halves, which the permute puts back in order */
            const __m256i e =
                _mm256_packus_epi32(_mm256_and_si256(a, low), _mm256_and_si256(b, low));
            const __m256i o =
                _mm256_packus_epi32(_mm256_srli_epi32(a, 16), _mm256_srli_epi32(b, 16));
            _mm256_storeu_si256((__m256i *)(void *)(de + j / 2),
                                _mm256_permute4x64_epi64(e, 0xD8));
            _mm256_storeu_si256((__m256i *)(void *)(dodd + j / 2),
                                _mm256_permute4x64_epi64(o, 0xD8));
        }
        for (; j < Wp; j++) (j % 2 ? dodd : de)[j / 2] = src[j];
        if (Wp % 2) dodd[Wq - 1] = 0;
    }
}

int fx_i16_wgrad_direct_avx2(const struct fx_conv_geom *g, const int16_t *xp, const int16_t *dy,
                             int64_t nbc, uint32_t *scratch, int64_t *dwt, int add)
{
    const int64_t C = g->C, O = g->O, OH = g->OH, OW = g->OW, P = OH * OW;
    const int64_t opad = (O + 15) / 16 * 16;
    const int64_t KH = g->KH, KW = g->KW, KK = KH * KW, CKK = C * KK;
    fx_i16_wgrad_bufs b;
    /* any data: an output row too large for a chain of its own gets a fold per pair */
    if (!fx_i16_wgrad_prepare(g, xp, dy, nbc, scratch, fx_i16_row_norms_avx2, cols_by_2_avx2, 1,
                              &b))
        return 0;
    uint32_t *dyt = b.dyt, *dn = b.dn, *xk = b.xk, *dm = b.dm;
    uint8_t *fold = b.fold;
    fx_i16_pair_rows(dy, nbc, O, P, opad, dyt);
    /* the rows in ntile tiles of near-equal heights, the taller ones first */
    const int64_t ntile = (CKK + WG_MR_MAX - 1) / WG_MR_MAX, tall = CKK % ntile;
    const int64_t base = CKK / ntile;
    for (int64_t o0 = 0; o0 < O; o0 += 16) {
        const int ncols = O - o0 < 16 ? (int)(O - o0) : 16;
        /* dm[s]: dy's row norms' largest over this block's channels, per output row */
        fx_i16_wgrad_dy_bounds(dn, nbc * OH, o0 / 16, 1, dm);
        int64_t sched_lo = -1, sched_hi = -1; /* the channels of the schedule in fold */
        int64_t r0 = 0;
        for (int64_t t = 0; t < ntile; t++) {
            const int rows = (int)(base + (t < tall));
            int64_t roff[WG_MR_MAX];
            for (int i = 0; i < rows; i++) {
                const int64_t r = r0 + i, kw = r % KW, kh = r / KW % KH, c = r / KK;
                roff[i] = fx_i16_wgrad_row_offset(&b, c, kh, kw);
            }
            /* the tile's chains: a schedule shared with the next tile */
            if (fx_i16_wgrad_sched_span(r0, rows, base + 1, CKK, KK, &sched_lo, &sched_hi))
                fx_i16_wgrad_fold_schedule4_avx2(xk, dm, nbc * OH, sched_lo, sched_hi, fold);
            wtile_fns[rows - 1](b.x, b.ximg, roff, dyt + o0, (P / 2) * opad, opad, OH, OW,
                                b.ystep, nbc, fold, dwt + r0 * O + o0, O, ncols, add);
            r0 += rows;
        }
    }
    return 1;
}
