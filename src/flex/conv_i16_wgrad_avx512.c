/* The exact int16 weight gradient of a convolution on vpdpwssd without a patch matrix
 * (AVX512_VNNI), at stride 1 and at strides whose taps reach every input pixel.
 *
 * dW^T[r][o] = sum over the chunk's pixels q of x(r, q) dy[o][q], r = (c KH + kh) KW + kw: the
 * product the GEMM route computes as patches x dy^T. As in the bf16 direct weight gradient
 * (src/bf16/bf16_conv_avx512bf16.c), a register tile of MR rows r and 16 NV output channels
 * runs the chain over the chunk's pixel pairs (q, q + 1) along each output row (OW even): per
 * pair, one broadcast per row r of the two input values at its tap, side by side in the padded
 * chunk (at a horizontal stride s, in a copy of it whose rows hold their columns in s runs of
 * every s-th one: fx_i16_cols_by_stride_portable), one unaligned 32-bit load, and NV vectors of
 * the pair words of dy from a pixel-pair-major copy of it.
 *
 * Exactness (conv_i16_avx512.h): the chain's segments are the output rows (n, oh). The
 * products of row r = (c, kh, kw) in segment (n, oh) pair x[n][c][sh oh + kh][kw + sw q] for
 * q < OW with dy[n][o][oh][0 .. OW); by Cauchy-Schwarz their partial sums are bounded by the
 * norm of the whole padded input row (n, c, sh oh + kh) times the norm of dy's row (n, o, oh).
 * A tile takes the largest of each over its rows and channels, and folds between chains of
 * segments whose bounds sum to at most FX_I16_CHAIN_LIMIT. hi holds at most
 * nbc OH OW 2^30 / 2^16 < 2^31 for at most 2^16 pixels per chunk. A chunk where one segment alone may leave int32, or with more
 * pixels, is declined (returns 0) and takes the GEMM. The sums are exact, so the bits are
 * those of every other integer route.
 *
 * Why: the GEMM route writes the chunk's patch matrix (each input value once per tap) and packs
 * it again; on the CNN's conv2 (batch 128, one thread, Zen 4) the integer weight gradient ran
 * at about 55 % of the vpdpwssd limit that way. */
#include "conv_i16.h"
#include "conv_i16_avx512.h"
#include "conv_i16_wgrad.h"
#include "gemm_i16.h" /* fx_ceil_sqrt */
#include "../core/lanes_avx512.h"
#include "../core/pair_copy_avx512.h"
#include "../nn/im2col.h"

#include <immintrin.h>
#include <string.h>

#define WG_MAX_MR 12

/* The sums of squares of one row's values in [j, j + 32) under mask m, as 8 uint64 lanes:
 * vpmaddwd gives x0^2 + x1^2 <= 2^31 per 32-bit lane, exact read unsigned */
static inline __attribute__((always_inline)) __m512i row_squares(const int16_t *row, __mmask32 m)
{
    const __m512i v = fx_load_w32(row, m);
    const __m512i q = _mm512_madd_epi16(v, v);
    return _mm512_add_epi64(_mm512_and_si512(q, _mm512_set1_epi64(0xFFFFFFFF)),
                            _mm512_srli_epi64(q, 32));
}

/* Row k's sum of squares as lane parts u[k], k < 8, for rows of len values from p, ld apart. */
static inline __attribute__((always_inline)) void rows8_squares(const int16_t *p, int64_t len,
                                                                int64_t ld, __m512i u[8])
{
    if (len <= 32) { /* one load a row, its mask made once (ResNet-20's dy rows, 8 to 32 values) */
        const __mmask32 m = (__mmask32)(len == 32 ? ~0u : (1u << len) - 1);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) u[k] = row_squares(p + k * ld, m);
        return;
    }
    if (len <= 64) { /* two loads a row (33 to 64 values) */
        const __mmask32 m = (__mmask32)(len == 64 ? ~0u : (1u << (len - 32)) - 1);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            u[k] = _mm512_add_epi64(row_squares(p + k * ld, ~(__mmask32)0),
                                    row_squares(p + k * ld + 32, m));
        return;
    }
    /* unrolled, so that u stays in registers: as a loop, GCC kept u in memory and every row's
     * sum waited on a store and a load of it (a fifth of ResNet-20's 16-channel weight gradient
     * on the Zen 5 went to this function, a tenth unrolled) */
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const int16_t *row = p + k * ld;
        u[k] = _mm512_setzero_si512();
        for (int64_t j = 0; j < len; j += 32) {
            const int nj = len - j < 32 ? (int)(len - j) : 32;
            u[k] = _mm512_add_epi64(
                u[k], row_squares(row + j, (__mmask32)(nj == 32 ? ~0u : (1u << nj) - 1)));
        }
    }
}

/* out[i] = ceil(sqrt(sum of the squares of row i)), rows of len <= 2^10 values ld apart. Eight
 * rows at a time: their lane sums reduced together by three rounds of pairwise interleaves, and
 * one vector square root. */
void fx_i16_row_norms(const int16_t *p, int64_t rows, int64_t len, int64_t ld, uint32_t *out)
{
    int64_t i = 0;
    for (; i + 8 <= rows; i += 8) {
        __m512i u[8];
        rows8_squares(p + i * ld, len, ld, u);
        /* u[k] lane l: a part of row k. Round 1: t[k] holds rows 2k, 2k+1 in alternate lanes */
        __m512i t[4], w[2];
        for (int k = 0; k < 4; k++)
            t[k] = _mm512_add_epi64(_mm512_unpacklo_epi64(u[2 * k], u[2 * k + 1]),
                                    _mm512_unpackhi_epi64(u[2 * k], u[2 * k + 1]));
        /* round 2: 128-bit lanes 0, 2 of both against lanes 1, 3, added: w[k]'s 128-bit lanes
         * hold rows (4k, 4k + 1) twice, then (4k + 2, 4k + 3) twice */
        for (int k = 0; k < 2; k++)
            w[k] = _mm512_add_epi64(_mm512_shuffle_i64x2(t[2 * k], t[2 * k + 1], 0x88),
                                    _mm512_shuffle_i64x2(t[2 * k], t[2 * k + 1], 0xDD));
        /* round 3 likewise: lane k holds row k */
        const __m512i sums = _mm512_add_epi64(_mm512_shuffle_i64x2(w[0], w[1], 0x88),
                                              _mm512_shuffle_i64x2(w[0], w[1], 0xDD));
        _mm256_storeu_si256((__m256i *)(void *)(out + i), fx_i16_ceil_sqrt8(sums));
    }
    for (; i < rows; i++) {
        const int16_t *row = p + i * ld;
        __m512i u = _mm512_setzero_si512();
        for (int64_t j = 0; j < len; j += 32) {
            const int nj = len - j < 32 ? (int)(len - j) : 32;
            const __mmask32 m = (__mmask32)(nj == 32 ? ~0u : (1u << nj) - 1);
            u = _mm512_add_epi64(u, row_squares(row + j, m));
        }
        const uint64_t sq = (uint64_t)_mm512_reduce_add_epi64(u);
        out[i] = (uint32_t)fx_ceil_sqrt((int64_t)sq); /* sq <= 2^40 */
    }
}

/* One tile: MR rows (offsets roff into a padded image of ximg values, whose output row oy
 * starts oy ystep values in), NV vectors of 16 channels from dyt (already offset to the tile's
 * first channel), the chain over all nbc images' pixel pairs, a fold after output row
 * s = n OH + oy where fold[s]. */
static inline __attribute__((always_inline)) void
wtile(const int MR, const int NV, int32_t *restrict hib, const int16_t *xp, int64_t ximg,
      const int64_t *roff, const uint32_t *dyt, int64_t dimg, int64_t opad, int64_t OH,
      int64_t OW, int64_t ystep, int64_t nbc, const uint8_t *fold, int64_t *out, int64_t ldo,
      int rows, __mmask16 last, int add)
{
    __m512i acc[WG_MAX_MR][4];
    int32_t (*hi)[4][16] = (int32_t (*)[4][16])hib; /* in the caller's frame: see itile */
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            acc[r][v] = _mm512_setzero_si512();
            _mm512_store_si512((void *)hi[r][v], _mm512_setzero_si512());
        }
    const int64_t npair = OW / 2;
    for (int64_t n = 0; n < nbc; n++) {
        for (int64_t oy = 0; oy < OH; oy++) {
            const int16_t *xr = xp + n * ximg + oy * ystep;
            const uint32_t *dr = dyt + n * dimg + oy * npair * opad;
            for (int64_t j = 0; j < npair; j++) {
                __m512i b[4];
                for (int v = 0; v < NV; v++)
                    b[v] = _mm512_loadu_si512((const void *)(dr + j * opad + 16 * v));
                for (int r = 0; r < MR; r++) {
                    uint32_t word;
                    memcpy(&word, xr + roff[r] + 2 * j, sizeof word);
                    const __m512i a = _mm512_set1_epi32((int)word);
                    for (int v = 0; v < NV; v++)
                        acc[r][v] = _mm512_dpwssd_epi32(acc[r][v], a, b[v]);
                }
            }
            if (fold[n * OH + oy]) fx_i16_fold(MR, NV, acc, hi);
        }
    }
    (void)fx_i16_store_rows(MR, NV, acc, hi, out, ldo, rows, last, add);
}

/* The tile shapes, each compiled with constant MR and NV: 6 x 64, 8 x 48, 12 x 32 and 12 x 16
 * channels (24 accumulators or fewer, the weight vectors and the broadcast in registers) */
#define WTILE_FN(MR, NV)                                                                         \
    static void wtile_##MR##x##NV(const int16_t *xp, int64_t ximg, const int64_t *roff,         \
                                  const uint32_t *dyt, int64_t dimg, int64_t opad, int64_t OH,  \
                                  int64_t OW, int64_t ystep, int64_t nbc, const uint8_t *fold,  \
                                  int64_t *out, int64_t ldo, int rows, __mmask16 last,          \
                                  int add)                                                      \
    {                                                                                            \
        int32_t hib[WG_MAX_MR * 4 * 16] __attribute__((aligned(64)));                           \
        wtile(MR, NV, hib, xp, ximg, roff, dyt, dimg, opad, OH, OW, ystep, nbc, fold, out, ldo,  \
              rows, last, add);                                                                  \
    }
WTILE_FN(6, 4)
WTILE_FN(8, 3)
WTILE_FN(12, 2)
WTILE_FN(12, 1)

typedef void (*wtile_fn)(const int16_t *, int64_t, const int64_t *, const uint32_t *, int64_t,
                         int64_t, int64_t, int64_t, int64_t, int64_t, const uint8_t *, int64_t *,
                         int64_t, int, __mmask16, int);

/* fx_i16_cols_by_stride_portable's values at stride 2 (ResNet's): the copy that bf16's direct
 * weight gradient shares (pair_copy_avx512.h) */
static void cols_by_2(const int16_t *xp, int64_t rows, int64_t Wp, int16_t *xd)
{
    fx_cols_by_2_avx512((const uint16_t *)(const void *)xp, rows, Wp, (uint16_t *)(void *)xd);
}

int fx_i16_wgrad_direct(const struct fx_conv_geom *g, const int16_t *xp, const int16_t *dy,
                        int64_t nbc, uint32_t *scratch, int64_t *dwt, int add)
{
    const int64_t C = g->C, O = g->O, OH = g->OH, OW = g->OW, P = OH * OW;
    const int64_t opad = (O + 15) / 16 * 16;
    const int64_t KH = g->KH, KW = g->KW, KK = KH * KW, CKK = C * KK;
    fx_i16_wgrad_bufs b;
    if (!fx_i16_wgrad_prepare(g, xp, dy, nbc, scratch, fx_i16_row_norms, cols_by_2, 0, &b))
        return 0;
    uint32_t *dyt = b.dyt, *dn = b.dn, *xk = b.xk, *dm = b.dm;
    uint8_t *fold = b.fold;
    fx_pair_rows_transpose_avx512((const uint16_t *)(const void *)dy, nbc, O, P, opad, dyt);
    for (int64_t o0 = 0; o0 < O; o0 += 64) {
        const int64_t ow = O - o0 < 64 ? O - o0 : 64;
        const int nv = (int)((ow + 15) / 16);
        const int mr = nv == 4 ? 6 : nv == 3 ? 8 : 12;
        const wtile_fn fn = nv == 4   ? wtile_6x4
                            : nv == 3 ? wtile_8x3
                            : nv == 2 ? wtile_12x2
                                      : wtile_12x1;
        const int tail = (int)(ow - 16 * (nv - 1));
        const __mmask16 last = (__mmask16)(tail >= 16 ? 0xFFFF : (1u << tail) - 1);
        /* dm[s]: the largest of dy's row norms over this block's channels, per output row */
        fx_i16_wgrad_dy_bounds(dn, nbc * OH, o0 / 16, nv, dm);
        int64_t sched_lo = -1, sched_hi = -1; /* the channels of the schedule in fold */
        for (int64_t r0 = 0; r0 < CKK; r0 += mr) {
            const int rows = CKK - r0 < mr ? (int)(CKK - r0) : mr;
            int64_t roff[WG_MAX_MR];
            for (int i = 0; i < mr; i++) {
                const int64_t r = r0 + (i < rows ? i : 0); /* spare rows repeat the first */
                const int64_t kw = r % KW, kh = r / KW % KH, c = r / KK;
                roff[i] = fx_i16_wgrad_row_offset(&b, c, kh, kw);
            }
            /* the tile's chains: a schedule shared with the next tile */
            if (fx_i16_wgrad_sched_span(r0, rows, mr, CKK, KK, &sched_lo, &sched_hi))
                fx_i16_wgrad_fold_schedule(xk, dm, nbc * OH, sched_lo, sched_hi, fold);
            fn(b.x, b.ximg, roff, dyt + o0, (P / 2) * opad, opad, OH, OW, b.ystep, nbc, fold,
               dwt + r0 * O + o0, O, rows, last, add);
        }
    }
    return 1;
}
