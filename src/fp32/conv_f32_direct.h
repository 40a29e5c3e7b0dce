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

#endif
