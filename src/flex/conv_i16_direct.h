/* What the exact int16 direct forward convolutions share (conv_i16_direct.c, portable; the
 * kernels: conv_i16_avx512.c on vpdpwssd, conv_i16_fwd_avx2.c on vpmaddwd + vpaddd). Both
 * read a channel-pair-last copy of each padded chunk and the weights as pair words per tap
 * (fx_i16_fwd_direct_pack_weights), and cut their int32 chains where a Cauchy-Schwarz bound of
 * the products still to come could leave int32 (conv_i16_avx512.c says how).
 *
 * A lane of int32 pair sums is exact while every partial sum stays inside int32. The kernels
 * fold each lane at a chain's end, as the GEMM's fast kernel does (src/flex/gemm_i16.h): hi +=
 * s >> 16, s &= 0xFFFF. A chain then starts from a lane in [0, 2^16), its bounds sum to at
 * most FX_I16_CHAIN_LIMIT, so it ends inside int32, and the sum is 2^16 hi + s at the end. */
#ifndef FX_FLEX_CONV_I16_DIRECT_H
#define FX_FLEX_CONV_I16_DIRECT_H

#include <stdint.h>

struct fx_conv_geom;

#define FX_I16_CHAIN_LIMIT ((int64_t)(((int64_t)1 << 31) - ((int64_t)1 << 16)))
#define FX_I16_MAX_ROWS 16 /* register tile rows, at most (the copy's overrun is sized by it) */

#define FX_I16_SEG_PAIRS 4 /* a segment: 8 channels at one tap */
#define FX_I16_SEG_CH (2 * FX_I16_SEG_PAIRS)

/* segments per tap, and pairs per pixel in the copy and per tap in the weights: whole
 * segments, zeros past C */
static inline int64_t fx_i16_groups(int64_t C)
{
    return ((C + 1) / 2 + FX_I16_SEG_PAIRS - 1) / FX_I16_SEG_PAIRS;
}
static inline int64_t fx_i16_pairs(int64_t C) { return fx_i16_groups(C) * FX_I16_SEG_PAIRS; }

/* fold[i] for the segments i = t G + s of one output row's chain: greedy chains of consecutive
 * segments whose bounds rn[kh][s] wm[i] sum to at most FX_I16_CHAIN_LIMIT, 1 where a chain
 * ends after segment i; wm: the weight norms, the largest over the tile's output channels.
 * A segment whose bound alone exceeds the limit (the AVX2 kernel admits such chunks,
 * fx_i16_fwd_admit_any; an fx_i16_fwd_admit'ed chunk has none) is FX_I16_FOLD_PAIRS: the
 * kernel folds after each of its pairs, and the segment before it ends a chain. That is exact
 * for the formats' mantissas, [-32767, 32767]: a pair's two products sum to at most
 * 2 * 32767^2 < FX_I16_CHAIN_LIMIT in magnitude (and 2 * 32767 * 32768 = FX_I16_CHAIN_LIMIT with
 * one -32768 in each pair of an operand; only -32768 in the same place of both could wrap). */
#define FX_I16_FOLD_PAIRS 2
void fx_i16_fold_schedule(const uint32_t *rn, const uint32_t *wm, int64_t KK, int64_t KW,
                          int64_t G, uint8_t *fold);

/* fx_i16_fold_schedule for four output rows at once on AVX2 (conv_i16_fwd_avx2.c; call only
 * where the AVX2 level runs), FX_I16_FOLD_PAIRS segments included: lane j's row has its first
 * padded row's norms at rn + base[j]; fold[j KK G + i] is that row's fold[i]. KK G <=
 * FX_I16_FWD_MAX_SEGS. */
void fx_i16_fold_schedules4_avx2(const uint32_t *rn, const int32_t base[4], const uint32_t *wm,
                                 int64_t KK, int64_t KW, int64_t G, uint8_t *fold);

/* fx_i16_fold_schedule for eight output rows at once on AVX-512 (conv_i16_avx512.c; call only
 * where the AVX-512 level runs): lane j's row has its first padded row's norms at rn +
 * base[j]; fold[j KK G + i] is that row's fold[i]. KK G <= FX_I16_FWD_MAX_SEGS. */
void fx_i16_fold_schedules8_avx512(const uint32_t *rn, const int32_t base[8], const uint32_t *wm,
                                   int64_t KK, int64_t KW, int64_t G, uint8_t *fold);


/* Whether a chunk can be taken: no segment alone may leave int32, i.e. for every segment s
 * the largest row norm rn[i G + s] (i < nrows) times the largest weight norm wn[j G + s]
 * (j < nwrows) stays within FX_I16_CHAIN_LIMIT. Counts the call or the decline (the
 * fx_i16_fwd_direct_calls and _declined hooks). */
int fx_i16_fwd_admit(const uint32_t *rn, int64_t nrows, const uint32_t *wn, int64_t nwrows,
                     int64_t G);
/* The AVX2 kernel's admission: a chunk whose segments each fit a chain, and also one where
 * some do not, which then take a fold per pair (fx_i16_fold_schedule), unless more than one
 * (input row, segment) in FX_I16_PAIRED_MAX_SHARE may not (with the segment's largest weight
 * norm). A segment folded per pair costs about three times a plain one, and the patch GEMM
 * about 1.0-1.5 times the direct kernel on data without such segments (ResNet-20's layers,
 * DFP16-like Gaussian data, one thread on the AVX2 EPYC), so past that share the GEMM is
 * cheaper; in training they are rare (6 in 10^5 of the segments of a DFP16 ResNet-20 epoch).
 * Counts the call, the decline, and the chunks taken with such segments
 * (fx_i16_fwd_direct_paired). */
#define FX_I16_PAIRED_MAX_SHARE 16
int fx_i16_fwd_admit_any(const uint32_t *rn, int64_t nrows, const uint32_t *wn, int64_t nwrows,
                         int64_t G);

/* xoff[t G + s]: the word offset of segment s of tap t from a pixel's top-left tap in the copy */
void fx_i16_fwd_offsets(const struct fx_conv_geom *g, int64_t *xoff);

/* One padded image (C planes of Hp x Wp int16) as the kernels' copy: xq[p Cpp + cp] =
 * (x[2cp][p], x[2cp + 1][p]), zero past C, for the Hp Wp pixels p; and its rows' segment norms
 * rn[ih G + s] = ceil(sqrt(max over the row's pixels of the sum of squares of channels
 * [8s, 8s + 8))). The portable definition. */
void fx_i16_fwd_copy_image(const struct fx_conv_geom *g, const int16_t *img, uint32_t *xq,
                           uint32_t *rn);
/* The largest sum of squares of segment s's pairs over one padded row of such a copy (Wp
 * pixels of Cpp words), exactly: a row norm before its root. */
int64_t fx_i16_copy_row_squares_max(const uint32_t *row, int64_t Wp, int64_t Cpp, int64_t s);
/* The same words and norms on AVX2 (conv_i16_copy_avx2.c) from the image unpadded (C planes of
 * H x W int16; the copy pads), through the image's pair planes: planes, Cpp Hp Wp words, and
 * sq, G Hp Wp 64-bit values, are the caller's scratch. */
void fx_i16_fwd_copy_image_avx2(const struct fx_conv_geom *g, const int16_t *img, uint32_t *xq,
                                uint32_t *rn, uint32_t *planes, uint64_t *sq);
/* The same words and norms on AVX512_VNNI (conv_i16_avx512.c; call only where that level runs)
 * from the image unpadded, in one pass without scratch (fx_pair_nhwc_padded_avx512). */
void fx_i16_fwd_copy_image_avx512(const struct fx_conv_geom *g, const int16_t *img, uint32_t *xq,
                                  uint32_t *rn);

#endif
