/* What the exact int16 direct weight gradients share (conv_i16_wgrad.c, portable; the kernels:
 * conv_i16_wgrad_avx512.c on vpdpwssd, conv_i16_wgrad_avx2.c on vpmaddwd + vpaddd;
 * conv_i16_wgrad_avx512.c says how the chains stay exact). */
#ifndef FX_FLEX_CONV_I16_WGRAD_H
#define FX_FLEX_CONV_I16_WGRAD_H

#include <stdint.h>

/* fold[s] for the chunk's S = nbc OH output rows s = n OH + oh of a tile over channels
 * [c_lo, c_hi]: greedy chains of rows whose bounds (the channels' largest input norm xk times
 * dy's, dm[s]) sum to at most FX_I16_CHAIN_LIMIT, 1 where a chain ends after row s. A row whose
 * bound alone exceeds the limit (fx_i16_wgrad_prepare admits such chunks only with any_data)
 * is FX_I16_FOLD_PAIRS (conv_i16_direct.h): the kernel folds after each of its pixel pairs,
 * and the row before it ends a chain. */
void fx_i16_wgrad_fold_schedule(const uint32_t *xk, const uint32_t *dm, int64_t S, int64_t c_lo,
                                int64_t c_hi, uint8_t *fold);

/* The channels [*lo, *hi] of the schedule a tile over rows [r0, r0 + rows) of the CKK rows
 * takes (KK taps a channel): the one already made (*lo >= 0) where its channels cover the
 * tile's (returns 0), else a new one over the tile's channels and those of the next `ahead`
 * rows (returns 1: the caller makes it). Why: a tile of 6 rows of 3 x 3 taps spans one or two
 * channels, so consecutive tiles asked for three schedules per two channels (the scalar scan
 * over every output row of the chunk: 9 % of ResNet-20's 64-channel weight gradient on the
 * Zen 5). A schedule over more channels bounds each of them (the largest of their norms), so
 * it is exact for every tile inside; its chains fold a little more often. */
int fx_i16_wgrad_sched_span(int64_t r0, int64_t rows, int64_t ahead, int64_t CKK, int64_t KK,
                            int64_t *lo, int64_t *hi);
/* A schedule of the same kind on AVX2 (conv_i16_wgrad_avx2.c; call only where the AVX2 level
 * runs), with the rows in four quarters, each quarter's greedy chains in one 64-bit lane: the
 * first chain of each quarter starts afresh, so the row before it ends a chain (1, or
 * FX_I16_FOLD_PAIRS for such a row), and there are at most three chains more than in
 * fx_i16_wgrad_fold_schedule's, which it returns for S < 16. Every chain's bounds still sum
 * to at most FX_I16_CHAIN_LIMIT, so the sums are the same. */
void fx_i16_wgrad_fold_schedule4_avx2(const uint32_t *xk, const uint32_t *dm, int64_t S,
                                      int64_t c_lo, int64_t c_hi, uint8_t *fold);

/* xd: each of rows rows of xp (Wp values) as s runs of Wq = ceil(Wp / s) values, run k holding
 * the columns k, s + k, 2 s + k, ... (0 past the row's end): what the kernels read at a
 * horizontal stride s, where a tile's pixel pair (2j, 2j + 1) reads the input columns
 * s (2j) + kw and s (2j + 1) + kw, which are then the adjacent values 2j + kw / s and
 * 2j + 1 + kw / s of run kw mod s: one 32-bit word, as at stride 1. fx_i16_wgrad_prepare makes
 * it, at stride 2 with the level's own copy (the same values), else with this definition. */
void fx_i16_cols_by_stride_portable(const int16_t *xp, int64_t rows, int64_t Wp, int64_t s,
                                    int16_t *xd);
/* A level's copy of fx_i16_cols_by_stride_portable at s = 2 */
typedef void (*fx_i16_cols_by_2_fn)(const int16_t *xp, int64_t rows, int64_t Wp, int16_t *xd);

/* Portable definitions the AVX2 kernel takes as they are: fx_i16_row_norms's values, and
 * dyt[n][pp][o] = (dy[o][2pp], dy[o][2pp + 1]) for pp < P / 2, zero for O <= o < opad (the
 * chunk's dy, NCHW, as pixel-pair-major words; P even) */
void fx_i16_row_norms_portable(const int16_t *p, int64_t rows, int64_t len, int64_t ld,
                               uint32_t *out);
void fx_i16_pair_rows(const int16_t *dy, int64_t nbc, int64_t O, int64_t P, int64_t opad,
                      uint32_t *dyt);

/* A chunk's scratch (fx_i16_wgrad_direct_scratch words) as both kernels lay it out, and the
 * bounds every kernel needs before its tiles: dyt (dy's pair words, 64-byte aligned, for the
 * kernel to fill), xn (the padded input rows' norms), drn (dy's rows' norms), dn (their maxima
 * per block of 16 channels, dn[ob S + s]), xk (each channel's largest input row norm per
 * output row over the kernel's rows, xk[c S + s]; S = nbc OH output rows s = n OH + oh), dm
 * (one column block's dy norms per output row, fx_i16_wgrad_dy_bounds, for the kernel), fold
 * (one tile's schedule); and the input rows the tiles read: x, the padded chunk itself at
 * stride 1, else its copy in column runs (fx_i16_cols_by_stride_portable, at the scratch's
 * start), ld values a row, plane values a channel, ximg an image, an output row ystep values
 * below the last (sh rows), and a tap's run length wq and horizontal stride sw
 * (fx_i16_wgrad_row_offset). */
typedef struct fx_i16_wgrad_bufs {
    uint32_t *dyt, *xn, *drn, *dn, *xk, *dm;
    uint8_t *fold;
    const int16_t *x;
    int64_t ld, plane, ximg, ystep, wq, sw;
} fx_i16_wgrad_bufs;

/* Offset in b->x of tap (kh, kw) of channel c from an output row's first pixel: the value a
 * tile's row r = (c, kh, kw) reads first */
static inline int64_t fx_i16_wgrad_row_offset(const fx_i16_wgrad_bufs *b, int64_t c, int64_t kh,
                                              int64_t kw)
{
    return c * b->plane + kh * b->ld + kw % b->sw * b->wq + kw / b->sw;
}

/* dm[s] for the chunk's S output rows s = the largest of dn over the nv blocks of 16 output
 * channels from block ob0 (the bound of dy's rows that a tile over those channels takes) */
void fx_i16_wgrad_dy_bounds(const uint32_t *dn, int64_t S, int64_t ob0, int64_t nv, uint32_t *dm);

/* Lays out *b in scratch, takes the norms with the level's row_norms (fx_i16_row_norms or its
 * portable definition) and decides the chunk: 0 (counted as declined) where it has more than
 * 2^16 pixels (hi's range), or where one output row's bound alone may leave int32 and not
 * any_data (the AVX2 kernel passes 1: it folds after each pair of such rows, which
 * fx_i16_wgrad_direct_paired counts, unless more than one row in FX_I16_PAIRED_MAX_SHARE is
 * one), else 1 (counted as a call), with the rows the tiles read made (at a horizontal
 * stride, the copy in column runs: with cols_by_2 at stride 2). */
struct fx_conv_geom;
int fx_i16_wgrad_prepare(const struct fx_conv_geom *g, const int16_t *xp, const int16_t *dy,
                         int64_t nbc, uint32_t *scratch,
                         void (*row_norms)(const int16_t *, int64_t, int64_t, int64_t, uint32_t *),
                         fx_i16_cols_by_2_fn cols_by_2, int any_data, fx_i16_wgrad_bufs *b);

#endif
