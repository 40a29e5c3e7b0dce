/* The exact int16 convolutions without a patch matrix. The forward pass
 * (src/flex/conv_i16_avx512.c, AVX512_VNNI): y[p][o] = sum over the taps (kh, kw) and channels
 * c of x(c, p + tap) w[o][c][t], the same exact int64 sums as the patch GEMM
 * (src/flex/gemm_i16.h), so the same bits; only the time differs. src/nn/conv2d.c calls it per
 * chunk through fx_backend.conv.i16_fwd, and takes the patch GEMM for a chunk whose data it
 * declines (a segment too large for an int32 chain). */
#ifndef FX_FLEX_CONV_I16_H
#define FX_FLEX_CONV_I16_H

#include <stdint.h>

struct fx_conv_geom;
struct fx_qstats;

/* Whether the kernel takes a geometry: stride and dilation 1, at least 8 input and 16 output
 * channels, at most FX_I16_FWD_MAX_TAPS taps, at most FX_I16_FWD_MAX_SEGS segments (8 channels
 * at one tap; the fold schedule lives on the stack), and C KH KW <= 2^16 */
#define FX_I16_FWD_MAX_TAPS 64
#define FX_I16_FWD_MAX_SEGS 1024
int fx_i16_fwd_direct_fits(const struct fx_conv_geom *g);

/* The weights (OIHW int16 mantissas) as pair words per tap, then the norm of each segment's
 * weights per block of 16 output channels: fx_i16_fwd_direct_weights_numel(g) 32-bit words at
 * wq, 64-byte aligned. Done once per convolution, for all its chunks. */
int64_t fx_i16_fwd_direct_weights_numel(const struct fx_conv_geom *g);
void fx_i16_fwd_direct_pack_weights(const struct fx_conv_geom *g, const int16_t *w, uint32_t *wq);

/* One chunk (AVX512_VNNI, src/flex/conv_i16_avx512.c): xp, its input unpadded (nbc images of
 * C x H x W int16; the kernel's pair copy pads, which spares a pass over the chunk: the separate
 * fx_conv_pad took 5 % of ResNet-20's 16-channel forward pass); wq from the packing above;
 * scratch: fx_i16_fwd_direct_scratch(g, nbc) words; y: the chunk's [nbc OH OW][O] exact sums;
 * *ymax: their largest |value| (ymax NULL: not wanted, and a kernel may skip finding it, as the
 * AVX2 one does). Up to nthreads OpenMP threads split the output rows. Returns 1
 * when done; 0 when a segment's bound (Cauchy-Schwarz on its norms) exceeds an int32 chain,
 * found before y is written: the caller computes the chunk another way. */
int64_t fx_i16_fwd_direct_scratch(const struct fx_conv_geom *g, int64_t nb);
int fx_i16_fwd_direct(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                      const uint32_t *wq, uint32_t *scratch, int64_t *y, int nthreads,
                      uint64_t *ymax);
/* The same on AVX2 (src/flex/conv_i16_fwd_avx2.c: vpmaddwd + vpaddd), the same sums and the
 * same contract (there the separate pad took 7 % of that pass on the AVX2 EPYC), except that a
 * segment whose bound alone exceeds an int32 chain takes a fold after each of its pairs
 * (fx_i16_fold_schedule), exact for x and w in [-32767, 32767], which every FLEX16_5/DFP16
 * mantissa is (the writes clamp to it, tensor_set_raw and the loaders reject -32768); it
 * declines only chunks with many such segments (fx_i16_fwd_admit_any). */
int fx_i16_fwd_direct_avx2(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                           const uint32_t *wq, uint32_t *scratch, int64_t *y, int nthreads,
                           uint64_t *ymax);

/* fx_i16_fwd_amx_round's contract on the register-tile kernels, xp unpadded as for
 * fx_i16_fwd_direct: the chunk's sums rounded in the tiles' epilogue at `shift` (and at shift2
 * into yq2 and part2 where yq2 is not NULL) into NCHW mantissas with each image's statistics,
 * quant_i64's bits, instead of stored. One thread. 0 where the kernel declines the chunk's
 * data, and for shifts off the fast route.
 * - fx_i16_fwd_direct_avx2_round (conv_i16_fwd_avx2.c): declines (fx_i16_fwd_admit_any) as
 *   fx_i16_fwd_direct_avx2 does; 0 also for shifts outside [1, 32] (the AVX2 rounding's fast
 *   route), for rows of more than 256 pixels and for more than FX_I16_ROUND_MAX_K products an
 *   output (where it was not faster than storing the sums).
 * - fx_i16_fwd_direct_round (conv_i16_avx512.c, AVX512_VNNI): declines as fx_i16_fwd_direct
 *   does; shifts 1-47 (fx_q64_fast_ok).
 * The switch (0: every caller takes the int64 sums), and the calls and those with a rounding
 * done whole (fx_i16_fwd_round_count, either kernel), for tests. */
#define FX_I16_ROUND_MAX_K 576
/* The statistics of an epilogue rounding (the register-tile kernels' or the AMX kernel's) that
 * saturated somewhere in the chunk, which the caller never keeps (conv2d.c runs the op again if the
 * write picks its exponent): the true largest |sum|, which the write's exponent comes from, and at
 * least one saturated value. */
void fx_i16_round_stats_broken(struct fx_qstats *st, uint64_t max_in);
/* What the epilogue roundings share, image by image: the roundings (FX_I16_ROUND_*) still
 * whole after an image whose largest |sum| is max_in (a rounding whose shift's
 * fx_q64_fast_bound it passes saturates somewhere, and is dropped); a rounding's statistics,
 * quant_i64's fast-route ones where whole, else a broken one's; and, once a chunk's first
 * `done` images are rounded, every image's statistics marked broken for a rounding left
 * unmade. */
int fx_i16_round_still_whole(int whole, uint64_t max_in, int shift, int two, int shift2);
void fx_i16_round_stats(struct fx_qstats *st, int whole, uint64_t max_in, int64_t nuf,
                        int shift);
void fx_i16_round_mark_broken_images(int whole, int two, int64_t done, struct fx_qstats *part,
                                     struct fx_qstats *part2);
int fx_i16_fwd_direct_avx2_round(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                                 const uint32_t *wq, uint32_t *scratch, int shift, int16_t *yq,
                                 struct fx_qstats *part, int shift2, int16_t *yq2,
                                 struct fx_qstats *part2);
int fx_i16_fwd_direct_round(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                            const uint32_t *wq, uint32_t *scratch, int shift, int16_t *yq,
                            struct fx_qstats *part, int shift2, int16_t *yq2,
                            struct fx_qstats *part2);
void fx_i16_fwd_round_count(int whole);
void fx_i16_fwd_direct_round_set_enabled(int on);
/* Test switch: 0 keeps the epilogue on int64 lanes (conv_i16_fwd_avx2.c: a pixel whose sums fit
 * int32, at shifts up to 18, is rounded in int32 lanes with the same bits and statistics); the
 * pixels it took and the tiles whose check missed, counted */
void fx_i16_fwd_direct_round32_set_enabled(int on);
long long fx_i16_fwd_direct_round32_pixels(void);
long long fx_i16_fwd_direct_round32_misses(void);
int fx_i16_fwd_direct_round_enabled(void);
long long fx_i16_fwd_direct_round_calls(void);
long long fx_i16_fwd_direct_round_whole(void);
/* Test switch of fx_i16_fwd_direct_round's int32 route for shifts 16-46 (0: every tile on
 * int64 lanes; conv_i16_avx512.c: the same bits), and the chunks it rounded. */
void fx_i16_fwd_direct_round16_set_enabled(int on);
long long fx_i16_fwd_direct_round16_chunks(void);

/* The same contract on AMX-INT8 tiles (src/flex/conv_i16_amx.c, where the AMX integer GEMM is
 * installed), xp the chunk unpadded as there, except that it never declines:
 * tiles read in place from byte planes of a channel-last copy, the exact sums (the same bits).
 * For geometries where fx_i16_fwd_amx_fits: C and O multiples of 16, dilation 1, any stride,
 * at most FX_I16_FWD_MAX_TAPS taps and FX_I16_AMX_FWD_MAX_K values per output (its int32
 * accumulators never wrap). Weights packed once per convolution into its byte tiles
 * (fx_i16_fwd_amx_weights_numel 32-bit words, 64-byte aligned); scratch:
 * fx_i16_fwd_amx_scratch(g, nbc) words. fx_i16_fwd_amx_calls counts its chunks. */
#define FX_I16_AMX_FWD_MAX_K 32768
int fx_i16_fwd_amx_fits(const struct fx_conv_geom *g);
int64_t fx_i16_fwd_amx_weights_numel(const struct fx_conv_geom *g);
void fx_i16_fwd_amx_pack_weights(const struct fx_conv_geom *g, const int16_t *w, uint32_t *wq);
int64_t fx_i16_fwd_amx_scratch(const struct fx_conv_geom *g, int64_t nb);
int fx_i16_fwd_amx(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                   const uint32_t *wq, uint32_t *scratch, int64_t *y, int nthreads,
                   uint64_t *ymax);
long long fx_i16_fwd_amx_calls(void);
/* chunks of either forward kernel (plain or rounding) computed in span blocks: 16 consecutive
 * positions of the padded grid a tile, across output rows (conv_i16_amx.c says when) */
long long fx_i16_fwd_amx_span_calls(void);
/* Whether at least three quarters of the tile rows the kernel computes for g are outputs it
 * stores (rows of 12 pixels or more in row blocks; ResNet-20's 8 x 8 layers in span blocks,
 * 64 of 80); narrower layers are faster on the AMX GEMM's gathered patch rows. */
int fx_i16_fwd_amx_tiles_full(const struct fx_conv_geom *g);
/* fx_i16_fwd_amx with its sums rounded in its epilogue, while they are in registers, instead of
 * stored: at `shift` places (fx_q64_fast_ok shifts) on quant_i64's fast route, the chunk's
 * mantissas go straight into yq in NCHW order (its first image's), and part[i] gets image i's
 * statistics, those quant_i64_t gives its [P, O] sums (src/flex/quant_avx512.c; the same
 * bits). With yq2 (not NULL), the same sums are also rounded at shift2 into yq2 and part2, as
 * a DFP16 output whose exponent moved lately is (conv2d.c: the write then picks one of the
 * two). One thread. Returns the roundings done whole: FX_I16_ROUND_FIRST (yq, part) and
 * FX_I16_ROUND_SECOND (yq2, part2). A rounding is not whole where a sum of the chunk is above
 * its shift's fx_q64_fast_bound (a saturating write, which the general rounding counts): its
 * mantissas are not to be kept, and its statistics hold only the largest |sum|
 * (max_abs_in, exact) and saturated > 0. 0: a shift off the fast route, or no rounding whole,
 * and then the caller computes the chunk's sums and rounds them. The switch (0: every caller
 * takes the int64 sums; for tests and A/B timings), the count of chunks with a rounding done,
 * and of those asked for two, the ones with both whole and the ones with one broken. */
#define FX_I16_ROUND_FIRST 1
#define FX_I16_ROUND_SECOND 2
/* For a chunk whose roundings came back as `whole` (0: none, and the chunk takes the int64
 * route), broken[0] and, with two, broken[1] set to 1 where that rounding was left unmade:
 * of two, one that saturated (the other, which a DFP16 write whose scale moved up or down
 * picks, is whole). Race-free from several threads. */
static inline void fx_i16_round_mark_broken(int whole, int two, int broken[2])
{
    if (!whole) return;
    if (!(whole & FX_I16_ROUND_FIRST)) __atomic_store_n(&broken[0], 1, __ATOMIC_RELAXED);
    if (two && !(whole & FX_I16_ROUND_SECOND)) __atomic_store_n(&broken[1], 1, __ATOMIC_RELAXED);
}
struct fx_qstats;
int fx_i16_fwd_amx_round(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                         const uint32_t *wq, uint32_t *scratch, int shift, int16_t *yq,
                         struct fx_qstats *part, int shift2, int16_t *yq2,
                         struct fx_qstats *part2);
/* The input gradient of a stride-2 convolution (src/nn/conv_dgrad_phases.c) on one chunk of
 * dy, rounded as fx_i16_fwd_amx_round rounds: dy's byte planes made once (planes: dy's
 * geometry, padded for every phase), phase k = rh * 2 + rw (wq[k] NULL: no taps) computing
 * the window of its outputs that dx takes (phase[k]: its taps, OH x OW = H/2 x W/2 of dx, from
 * output (oy0[k], ox0[k]) of its correlation over the planes), and the four windows
 * interleaved into dx's rows. */
typedef struct fx_i16_dgrad_s2 {
    const struct fx_conv_geom *planes;
    const struct fx_conv_geom *phase[4]; /* NULL with wq[k] */
    const uint32_t *wq[4];
    int64_t oy0[4], ox0[4];
    int64_t dx_C, dx_H, dx_W, dx_ph, dx_pw;
} fx_i16_dgrad_s2;
/* Scratch words per thread for the epilogue routes below, chunks of nb images of dy: the
 * kernel's own scratch for the planes' geometry (kernel_scratch: fx_i16_fwd_amx_scratch or
 * fx_i16_fwd_direct_scratch) and the quarter-size windows (dx_chw: C H W of dx; two: two
 * roundings), aligned; and the windows of a chunk of nbc images in it, q[k] (q2[k] with two)
 * for phase k, NULL for a phase without taps. */
int64_t fx_i16_dgrad_s2_scratch(int64_t kernel_scratch, int64_t nb, int64_t dx_chw, int two);
void fx_i16_dgrad_s2_windows(uint32_t *scratch, int64_t kernel_scratch, const fx_i16_dgrad_s2 *d,
                             int64_t nbc, int two, int16_t *q[4], int16_t *q2[4]);
/* dx's chunk (nbc images, NCHW) rounded at shift into dx with the chunk's statistics in
 * *part, and with dx2 not NULL at shift2 into dx2 and *part2: the mantissas and statistics
 * quant_i64 gives the chunk's exact sums. Returns the roundings done whole, as
 * fx_i16_fwd_amx_round (one not whole leaves its dx unwritten, and its statistics the largest
 * |sum| and a saturation); 0: a shift off the fast route, or neither whole. One thread; AMX
 * tiles configured and released here. */
int fx_i16_dgrad_amx_s2_round(const fx_i16_dgrad_s2 *d, const int16_t *dy, int64_t nbc,
                              uint32_t *scratch, int shift, int16_t *dx, struct fx_qstats *part,
                              int shift2, int16_t *dx2, struct fx_qstats *part2);
/* The same contract on the AVX512_VNNI register tiles (conv_i16_avx512.c), with d's wq packed
 * by fx_i16_fwd_direct_pack_weights, except that it declines (0) a chunk whose data
 * fx_i16_fwd_direct would (a segment too large for an int32 chain). */
int fx_i16_dgrad_s2_round(const fx_i16_dgrad_s2 *d, const int16_t *dy, int64_t nbc,
                          uint32_t *scratch, int shift, int16_t *dx, struct fx_qstats *part,
                          int shift2, int16_t *dx2, struct fx_qstats *part2);
/* The same contract on the AVX2 register tiles (conv_i16_fwd_avx2.c), with d's wq packed by
 * fx_i16_fwd_direct_pack_weights: it declines (0) a chunk whose data fx_i16_fwd_direct_avx2
 * would (fx_i16_fwd_admit_any), shifts outside [1, 32], windows of more than 256 pixels a row
 * and phases of more than FX_I16_ROUND_MAX_K products a sum. */
int fx_i16_dgrad_s2_round_avx2(const fx_i16_dgrad_s2 *d, const int16_t *dy, int64_t nbc,
                               uint32_t *scratch, int shift, int16_t *dx,
                               struct fx_qstats *part, int shift2, int16_t *dx2,
                               struct fx_qstats *part2);
/* How every stride-2 epilogue route ends a chunk (conv_i16_direct.c): with the roundings still
 * whole (0: none, and 0 is returned), each one's statistics (from the chunk's largest |sum| and
 * underflow counts in *sums) into part / part2 and its phases' windows q / q2 interleaved into
 * dx / dx2 by the level's interleave (two: the second rounding was asked for). Returns whole.
 * An interleave makes dx's chunk [nbc, C, H, W] from the windows q[rh * 2 + rw] ([nbc, C,
 * H/2, W/2] each; NULL: a phase without taps, zeros): row h from the phases of rh = (h + ph)
 * mod 2, window row h / 2; even columns from the phase of rw = pw mod 2, odd ones from the
 * other (fx_i16_dgrad_s2_interleave_avx512, and conv_i16_fwd_avx2.c's own). */
typedef struct fx_i16_round_sums {
    uint64_t max_in;
    int64_t nuf, nuf2;
    int shift, shift2;
} fx_i16_round_sums;
typedef void (*fx_i16_s2_interleave_fn)(int16_t *const q[4], int64_t nbc, int64_t C, int64_t H,
                                        int64_t W, int64_t ph, int64_t pw, int16_t *dx);
void fx_i16_dgrad_s2_interleave_avx512(int16_t *const q[4], int64_t nbc, int64_t C, int64_t H,
                                       int64_t W, int64_t ph, int64_t pw, int16_t *dx);
int fx_i16_dgrad_s2_finish(const fx_i16_dgrad_s2 *d, int whole, int two,
                           const fx_i16_round_sums *sums, int16_t *const q[4],
                           int16_t *const q2[4], int64_t nbc, struct fx_qstats *part,
                           struct fx_qstats *part2, int16_t *dx, int16_t *dx2,
                           fx_i16_s2_interleave_fn interleave);
void fx_i16_fwd_amx_round_set_enabled(int on);
int fx_i16_fwd_amx_round_enabled(void);
/* Test switch: 0 keeps both AMX epilogues (fx_i16_fwd_amx_round, fx_i16_dgrad_amx_s2_round) on
 * their int64 lanes (conv_i16_amx.c: the int32
 * epilogue, for sums of at most 480 products at shifts 9-30, gives the same bits) */
void fx_i16_fwd_amx_round32_set_enabled(int on);
long long fx_i16_fwd_amx_round32_images(void); /* images it rounded (test hook) */
long long fx_i16_fwd_amx_round_calls(void);
long long fx_i16_fwd_amx_round2_calls(void);
long long fx_i16_fwd_amx_round_partial_calls(void);
/* The weight gradient likewise (src/flex/conv_i16_wgrad_amx.c): fx_i16_wgrad_direct's contract
 * (dwt[r O + o] written or, with add, added to) except that x is the chunk unpadded, its nbc
 * images [C, H, W] one after another; never declining; tiles read in
 * place from shifted byte-plane copies of x and dy's four-pixel words, the exact sums. For
 * geometries where fx_i16_wgrad_amx_fits: stride and dilation 1, C and O multiples of 16, at
 * most FX_I16_AMX_WGRAD_MAX_P pixels an image (its int32 sums never wrap). */
#define FX_I16_AMX_WGRAD_MAX_P 32768
int fx_i16_wgrad_amx_fits(const struct fx_conv_geom *g);
int64_t fx_i16_wgrad_amx_scratch(const struct fx_conv_geom *g, int64_t nb);
int fx_i16_wgrad_amx(const struct fx_conv_geom *g, const int16_t *x, const int16_t *dy,
                     int64_t nbc, uint32_t *scratch, int64_t *dwt, int add);
long long fx_i16_wgrad_amx_calls(void);

/* A forward kernel's entry points (the AMX one, or the level's conv.i16_fwd with the
 * vpdpwssd/vpmaddwd packing), so that a caller chooses once and then packs, sizes and runs
 * through them: src/nn/conv2d.c's forward pass and the strided input gradient's phases. */
struct fx_backend;
typedef struct fx_i16_fwd_kernel {
    int64_t (*weights_numel)(const struct fx_conv_geom *g);
    void (*pack_weights)(const struct fx_conv_geom *g, const int16_t *w, uint32_t *wq);
    int64_t (*scratch)(const struct fx_conv_geom *g, int64_t nb);
    int (*run)(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc, const uint32_t *wq,
               uint32_t *scratch, int64_t *y, int nthreads, uint64_t *ymax);
    int unpadded; /* run takes the chunk unpadded */
} fx_i16_fwd_kernel;
/* be's AMX kernel (amx: be->conv.i16_fwd_amx) or its register-tile one (conv.i16_fwd) */
fx_i16_fwd_kernel fx_i16_fwd_kernel_of(const struct fx_backend *be, int amx);

/* Test and benchmark hooks, process-wide: 0 sends every chunk to the patch GEMM; counters of
 * the chunks computed here and of those declined */
void fx_i16_fwd_direct_set_enabled(int on);
int fx_i16_fwd_direct_enabled(void);
long long fx_i16_fwd_direct_calls(void);
long long fx_i16_fwd_direct_declined(void);
/* chunks the AVX2 kernel took with a fold after each pair of some segment (fx_i16_fold_schedule),
 * where the AVX-512 one would decline */
long long fx_i16_fwd_direct_paired(void);

/* the largest stride the direct weight-gradient kernels take (fx_i16_wgrad_direct_fits) */
#define FX_I16_WGRAD_MAX_STRIDE 4

/* The exact int16 weight gradient of one chunk without a patch matrix
 * (src/flex/conv_i16_wgrad_avx512.c, AVX512_VNNI): dwt[r * O + o] = sum over the chunk's
 * pixels q of x(r, q) dy[o][q], r = (c KH + kh) KW + kw, the exact int64 sums of the GEMM
 * route's patches x dy^T. xp: the chunk's padded input (fx_conv_pad, nbc images); dy: the
 * chunk's output gradient (NCHW); scratch: fx_i16_wgrad_direct_scratch(g, nbc) words; add: the
 * sums are added to dwt's values instead of replacing them (a group's later chunks). For
 * geometries where fx_i16_wgrad_direct_fits(g, FX_I16_WGRAD_MAX_STRIDE) (dilation 1, OW even,
 * padded rows of at most 1024 values; a horizontal stride s reads a copy of the padded rows
 * with their columns in s runs of every s-th one, so that a tile's pixel pairs stay adjacent
 * words). Returns 1 when done; 0 when the chunk's data may leave an int32 chain (or it has
 * more than 2^16 pixels), with dwt untouched: the caller computes it another way. */
/* Whether the direct weight gradient takes g, for a kernel that takes strides up to
 * max_stride (fx_conv_kernels.i16_wgrad_max_stride; 0 or 1: stride 1 only) */
int fx_i16_wgrad_direct_fits(const struct fx_conv_geom *g, int max_stride);
int64_t fx_i16_wgrad_direct_scratch(const struct fx_conv_geom *g, int64_t nb);
int fx_i16_wgrad_direct(const struct fx_conv_geom *g, const int16_t *xp, const int16_t *dy,
                        int64_t nbc, uint32_t *scratch, int64_t *dwt, int add);
/* The same on AVX2 (src/flex/conv_i16_wgrad_avx2.c: vpmaddwd + vpaddd), the same contract and
 * the same sums and the same strides, except that an output row whose bound alone exceeds an
 * int32 chain takes a fold after each pixel pair (exact for mantissas in [-32767, 32767], as
 * fx_i16_fwd_direct_avx2's segments); it declines only chunks of more than 2^16 pixels and
 * chunks with many such rows (fx_i16_wgrad_prepare). */
int fx_i16_wgrad_direct_avx2(const struct fx_conv_geom *g, const int16_t *xp, const int16_t *dy,
                             int64_t nbc, uint32_t *scratch, int64_t *dwt, int add);
/* out[i] = ceil(sqrt(sum over j < len of p[i ld + j]^2)) for i < rows, len <= 1024 and
 * len <= ld (rows ld values apart): the row norms the weight gradient's bounds take (exported
 * for the tests) */
void fx_i16_row_norms(const int16_t *p, int64_t rows, int64_t len, int64_t ld, uint32_t *out);
/* The same on AVX2 (conv_i16_wgrad_avx2.c) */
void fx_i16_row_norms_avx2(const int16_t *p, int64_t rows, int64_t len, int64_t ld, uint32_t *out);
void fx_i16_wgrad_direct_set_enabled(int on);
int fx_i16_wgrad_direct_enabled(void);
long long fx_i16_wgrad_direct_calls(void);
long long fx_i16_wgrad_direct_declined(void);
/* chunks the AVX2 weight gradient took with a fold after each pixel pair of some output row
 * (fx_i16_wgrad_fold_schedule), where the AVX-512 one would decline */
long long fx_i16_wgrad_direct_paired(void);

#endif
