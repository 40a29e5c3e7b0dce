/* The exact int16 input gradient of a strided convolution as stride-1 convolutions, one per
 * phase, on the level's direct forward kernel (src/flex/conv_i16.h).
 *
 * With stride s (dilation 1), an input element at padded row hh = h + ph receives products
 * only from the kernel rows kh = s j + r, r = hh mod s, and from the output rows oh = hh div s
 * - j. So the rows of one phase r form the stride-1 "full" correlation
 *   dx_r[a] = sum over j of dy[a - j] w[s j + r],      a = hh div s,
 * a convolution of dy padded by J - 1 with the J = ceil((KH - r) / s) kernel rows s j + r in
 * reverse order; columns likewise, and the channel axes swapped as for a stride-1 input
 * gradient. Each dx element is then the sum of exactly the products the col2im route adds, and
 * integer sums are exact, so the bits are the same. For ResNet-20's stride-2 layers the four
 * phases of a 3 x 3 kernel are 2 x 2, 2 x 1, 1 x 2 and 1 x 1 convolutions; a 1 x 1 kernel has
 * one phase and leaves the other three zero. The col2im route instead adds a C KH KW x P int64
 * patch product into dx, beyond the cache (1.4-2.6x oneDNN's time on the AVX2 EPYC). */
#ifndef FX_NN_CONV_DGRAD_PHASES_H
#define FX_NN_CONV_DGRAD_PHASES_H

#include "im2col.h"

struct fx_backend;

/* Whether the route takes g's input gradient on backend be: stride above 1 in either axis (at
 * most 4), dilation 1, a direct forward kernel, fewer than 64 channels in dy (from there the
 * col2im route's GEMM is deep enough to win) unless the kernel is 1 x 1 (one phase with taps),
 * the phases run on AMX, or the level rounds stride-2 chunks in its register tiles' epilogue
 * (fx_i16_dgrad_s2_round, fx_i16_dgrad_s2_round_avx2; stride 2, even H and W), and every
 * phase's convolution within the kernel's limits (at least 8 of dy's channels, 16 of dx's). */
int fx_conv_dgrad_phases_fit(const fx_conv_geom *g, const struct fx_backend *be);
/* Whether the route takes g only for chunks rounded in an epilogue (dy of 64 channels or more,
 * a kernel other than 1 x 1, off AMX): without a sink (no exponent to guess) the caller takes
 * col2im instead (src/nn/conv2d.c; the route would run on int64 sums, the slower there). */
int fx_conv_dgrad_phases_needs_rounding(const fx_conv_geom *g, const struct fx_backend *be);

/* The rounding a caller's chunk() makes (below), for the route to make it itself where it
 * can: each chunk's sums rounded as quant_i64 rounds them at right shift `shift` into out
 * (dx's NCHW order from sample 0) with the chunk's statistics in part[ch], and with out2 (not
 * NULL) at shift2 into out2 and part2[ch]. */
typedef struct fx_dgrad_round {
    int shift, shift2;
    int16_t *out, *out2;
    struct fx_qstats *part, *part2;
    /* set (to 1) where a chunk's rounding at shift (broken[0]) or shift2 (broken[1]) saturated
     * in the epilogue and was left unmade, the other kept: that rounding must not be kept
     * (its part[ch] holds only the largest |sum|, with a saturation) */
    int *broken;
} fx_dgrad_round;

/* What a caller does with each chunk of dx's sums while they are in cache: chunk(ctx, sums,
 * n0, nbc, ch) gets samples [n0, n0 + nbc) (nbc C H W int64, NCHW) of chunk ch (ch < N), on
 * the thread that made them, and returns their largest |value|. With keep_stage 0 the sums
 * live only in a per-thread buffer (dx is then NULL and receives nothing). round: NULL, or
 * what chunk() does when it only rounds; then, without a stage, at stride 2, a chunk may be
 * rounded in the kernels' epilogue instead (fx_i16_dgrad_amx_s2_round on AMX,
 * fx_i16_dgrad_s2_round and fx_i16_dgrad_s2_round_avx2 on the register tiles: the same
 * mantissas and statistics) and chunk() is not called for it. */
typedef struct fx_dgrad_sink {
    uint64_t (*chunk)(void *ctx, const int64_t *sums, int64_t n0, int64_t nbc, int64_t ch);
    void *ctx;
    int keep_stage;
    const fx_dgrad_round *round;
} fx_dgrad_sink;

/* dx[N, C, H, W] (int64, exact sums at the exponent of dy's times w's) of dy[N, O, OH, OW] and
 * w[O, C, KH, KW] (int16 mantissas), and *imax, their largest |value|; threads as
 * flexpoint_num_threads. sink: NULL, or as above. Returns 1 when done, 0
 * when the kernel declined a chunk's data (one segment alone could leave int32: dx is then
 * partly written, the sink has seen some chunks, and the caller takes another route), or a
 * negative status with the error set (allocation). */
int fx_conv_dgrad_phases_i16(const fx_conv_geom *g, const struct fx_backend *be, const int16_t *dy,
                             const int16_t *w, int64_t *dx, uint64_t *imax,
                             const fx_dgrad_sink *sink, const char *func);

/* dx's row of W pixels from their sums src[w] (C int64 each, NULL: zeros): channel c at
 * drow[c HW + w]; row: W C int64 of scratch (conv_dgrad_gather_avx2.c) */
void fx_conv_dgrad_gather_rows_avx2(const int64_t *const *src, int64_t W, int64_t C,
                                    int64_t *row, int64_t *drow, int64_t HW);

/* Test hooks: 0 turns the route off (the col2im route then runs); runs counted, the chunks
 * rounded in an epilogue (fx_i16_fwd_amx_round_set_enabled turns AMX's off,
 * fx_i16_fwd_direct_round_set_enabled the register tiles'), and of those asked for two
 * roundings, the ones with both whole and the ones with one broken */
void fx_conv_dgrad_phases_set_enabled(int on);
int64_t fx_conv_dgrad_phases_runs(void);
int64_t fx_conv_dgrad_phases_rounded(void);
int64_t fx_conv_dgrad_phases_rounded2(void);
int64_t fx_conv_dgrad_phases_rounded_partial(void);

#endif
