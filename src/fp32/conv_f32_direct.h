/* The fp32 forward convolution without patch rows or panels (src/fp32/conv_f32_fwd_avx2.c,
 * src/fp32/conv_f32_fwd_avx512.c).
 *
 * The fp32 GEMM route of a convolution (src/nn/conv2d.c) multiplies the im2row matrix A, tap k =
 * (c KH + kh) KW + kw of each output pixel, by the weights as [K x O], each output one FMA chain
 * over k = 0 .. K-1 from +0 (src/fp32/f32_ukernel_tmpl.h). The direct kernel runs the same
 * chains in the same order, but broadcasts each tap straight from the zero-padded input, at a
 * fixed offset from the pixel (off[k] = c Hp Wp + kh dh Wp + kw dw), instead of first copying
 * every pixel's taps into a patch row and transposing six rows into a panel. Same products,
 * same order: the same bits as the GEMM route, and no packing. On ResNet-20's 16-channel layers,
 * where each panel serves a single 16-column tile, that packing took twice the micro-kernel's
 * time (docs/performance.md). */
#ifndef FX_FP32_CONV_F32_DIRECT_H
#define FX_FP32_CONV_F32_DIRECT_H

#include <stdint.h>

struct fx_conv_geom;

/* The weights (OIHW fp32, i.e. [O][K]) in blocks of 16 output channels, k-major:
 * wq[(ob K + k) 16 + j] = w[(16 ob + j) K + k], 0 past O; fx_f32_fwd_direct_weights_numel(g)
 * floats at wq, 32-byte aligned. Done once per convolution, for all its chunks. */
int64_t fx_f32_fwd_direct_weights_numel(const struct fx_conv_geom *g);
void fx_f32_fwd_direct_pack_weights(const struct fx_conv_geom *g, const float *w, float *wq);

/* off[k] for the K = C KH KW taps: tap k's offset from a pixel's top-left tap in the padded
 * input, in the GEMM's k order. Done once per convolution. */
void fx_f32_fwd_direct_offsets(const struct fx_conv_geom *g, int64_t *off);

/* One chunk: xp, its padded fp32 input (fx_conv_pad, nbc images); wq and off from the two
 * functions above; y: the chunk's [nbc OH OW][O] sums, the GEMM route's bits. Up to nthreads
 * OpenMP threads split the output rows. Any stride, padding and dilation. The AVX2 and AVX-512
 * kernels; the same bits. */
void fx_f32_fwd_direct_avx2(const struct fx_conv_geom *g, const float *xp, int64_t nbc,
                            const float *wq, const int64_t *off, float *y, int nthreads);

void fx_f32_fwd_direct_avx512(const struct fx_conv_geom *g, const float *xp, int64_t nbc,
                              const float *wq, const int64_t *off, float *y, int nthreads);

/* Test switch and counter: with 0 the convolutions take the GEMM route where the level has
 * the direct kernel (to compare the two bit for bit); the count of chunks the kernel did. */
void fx_f32_fwd_direct_set_enabled(int on);
int fx_f32_fwd_direct_enabled(void);
long long fx_f32_fwd_direct_calls(void);
void fx_f32_fwd_direct_count(void);

/* ---- the input gradient ------------------------------------------------------------------------
 * The float GEMM route of an input gradient (src/nn/conv2d.c) makes the patch matrix col =
 * W^T[C KH KW x O] dy[O x pixels], each entry one FMA chain over o = 0 .. O-1 from +0, and
 * col2im adds each dx value's taps into a zeroed accumulator in increasing (kh, kw) order, a
 * tap counting where its dy pixel exists (ih + ph - kh dh = oh sh with 0 <= oh < OH, and alike
 * along the row). The direct kernel computes those chains from a zero-padded copy of dy and
 * adds them to each dx value in the same order, with no patch matrix written and read back and
 * no col2im pass. A tile is a run of pixels of one dx row, all of one column phase (iw mod sw),
 * whose consecutive pixels read consecutive dy pixels: per tap, its row and its phase decide
 * whether it counts for the whole tile (live), and a live tap of a pixel near the row's ends
 * may still read the padding, as col2im leaves it out there. Its chain is then a sum of zero
 * products, +0 or -0, and adding a zero changes no sum that starts at +0 (such a sum is never
 * -0), so the bits are the route's, provided every weight is finite (Inf x 0 is NaN): the
 * caller checks that and keeps the GEMM route otherwise. fp16 and widened bf16 operands are
 * widened exactly into the padded copy and the fp32 weights, as the GEMM's packing widens
 * them. */

#define FX_F32_DGRAD_MAX_TAPS 64

/* at most FX_F32_DGRAD_MAX_TAPS taps (any stride, padding and dilation) */
int fx_f32_dgrad_direct_fits(const struct fx_conv_geom *g);

/* The padded dy planes: [nb][O][H'][W'], the geometry whose fx_conv_pad / fx_conv_pad_widen
 * (src/nn/im2col.h) builds them from dy (C = O, H = OH, W = OW, a padding that holds every tap
 * of every dx pixel). */
void fx_f32_dgrad_direct_pad_geom(const struct fx_conv_geom *g, struct fx_conv_geom *gd);

/* The weights (OIHW fp32) in blocks of 16 input channels, tap-major, then o:
 * wq[((cb KK + t) O + o) 16 + j] = w[o][16 cb + j][kh][kw], t = kh KW + kw, 0 past C;
 * fx_f32_dgrad_direct_weights_numel(g) floats at wq, 64-byte aligned. */
int64_t fx_f32_dgrad_direct_weights_numel(const struct fx_conv_geom *g);
void fx_f32_dgrad_direct_pack_weights(const struct fx_conv_geom *g, const float *w, float *wq);

/* A level's register tile of MR pixels by NV vectors of input channels: d, the image's padded
 * dy (plane floats between channels); tap t of pixel r at d + off[t] + r, counted where
 * live[t]; w0 and w1, the two vectors' packed weights at tap 0 and o = 0 (O x 16 floats a
 * tap); channel j of pixel r stored at out + r ldo + j for the first n0 channels of the first
 * vector and n1 of the second. */
typedef void (*fx_f32_dgrad_tile_fn)(const float *d, int64_t plane, const int64_t *off,
                                     const unsigned char *live, int64_t KK, int64_t O,
                                     const float *w0, const float *w1, float *out, int64_t ldo,
                                     int n0, int n1);
typedef struct fx_f32_dgrad_level {
    int vec;                             /* lanes per vector: 16 or 8 */
    int mr_max[2];                       /* the widest tile at NV = 1 and 2 */
    const fx_f32_dgrad_tile_fn *tiles[2]; /* tiles[NV - 1][MR - 1] */
} fx_f32_dgrad_level;

/* One chunk on a level's tiles: dyp, its padded dy (nbc images); wq from the functions above;
 * dx: the chunk's [nbc H W][C] sums, the GEMM and col2im route's bits. Up to nthreads OpenMP
 * threads split the dx rows. */
void fx_f32_dgrad_direct_run(const fx_f32_dgrad_level *lv, const struct fx_conv_geom *g,
                             const float *dyp, int64_t nbc, const float *wq, float *dx,
                             int nthreads);
/* the AVX2 and AVX-512 levels (fx_backend.conv.f32_dgrad); the same bits */
void fx_f32_dgrad_direct_avx2(const struct fx_conv_geom *g, const float *dyp, int64_t nbc,
                              const float *wq, float *dx, int nthreads);
void fx_f32_dgrad_direct_avx512(const struct fx_conv_geom *g, const float *dyp, int64_t nbc,
                                const float *wq, float *dx, int nthreads);

/* Test switch and counter, as for the forward kernel: with 0 the input gradients take the
 * GEMM and col2im; the count of chunks the kernel did. */
void fx_f32_dgrad_direct_set_enabled(int on);
int fx_f32_dgrad_direct_enabled(void);
long long fx_f32_dgrad_direct_calls(void);
void fx_f32_dgrad_direct_count(void);

/* ---- the weight gradient -------------------------------------------------------------------
 * The float GEMM route of a weight gradient (src/nn/conv2d.c) makes each chunk's dW^T =
 * col[C KH KW x pixels] dy^T[pixels x O], each entry one FMA chain over the chunk's pixels in
 * order (image, output row, output column) from +0, the patch matrix's rows as panels built
 * from the padded chunk; the chunks are then added in fixed groups. The direct kernel runs the
 * same chains with each tap broadcast straight from the padded chunk and dy read from its
 * transposed chunk, so its bits are the route's without the panels and the packing of dy.
 * fp16 and widened bf16 operands are widened exactly first, as the GEMM's packing widens them. */

/* tap k = (c KH + kh) KW + kw's offset in the padded chunk: c Hp Wp + kh dh Wp + kw dw */
int64_t fx_f32_tap_offset(const struct fx_conv_geom *g, int64_t k);

/* One chunk: xp, its padded input (fx_conv_pad, nbc images, fp32); dyt, its dy transposed to
 * [nbc OH OW][O] (fx_chunk_gather_t); dwt: the chunk's [C KH KW][O] sums, the GEMM route's
 * bits. Up to nthreads OpenMP threads split the tiles. AVX-512. */
void fx_f32_wgrad_direct_avx512(const struct fx_conv_geom *g, const float *xp, int64_t nbc,
                                const float *dyt, float *dwt, int nthreads);

/* Test switch and counter: with 0 the weight gradients take the GEMM; the count of chunks the
 * kernel did. */
void fx_f32_wgrad_direct_set_enabled(int on);
int fx_f32_wgrad_direct_enabled(void);
long long fx_f32_wgrad_direct_calls(void);
void fx_f32_wgrad_direct_count(void);

#endif
