/* 2-D convolution on a CUDA device: the entry point fx_cuda_backend (gpu_backend.c) runs when
 * all tensors of tensor_conv2d / tensor_conv2d_backward_input / tensor_conv2d_backward_weight
 * live on one device, and the kernel launchers behind it (src/gpu/gpu_conv.cu). Built from
 * gpu_conv.c + gpu_conv.cu, with CUDA only. */
#ifndef FX_GPU_GPU_CONV_H
#define FX_GPU_GPU_CONV_H

#include "gpu_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "../nn/im2col.h" /* fx_conv_geom */

/* The three ops. The tensors are named as in flexpoint_nn.h:
 *   FX_GCONV_FORWARD:         out = y  [N,O,OH,OW], a = x  [N,C,H,W] (first input), b = w
 *   FX_GCONV_BACKWARD_INPUT:  out = dx [N,C,H,W],   a = dy [N,O,OH,OW] (first input), b = w
 *   FX_GCONV_BACKWARD_WEIGHT: out = dw [O,C,KH,KW], a = x  [N,C,H,W] (first input), b = dy */
enum { FX_GCONV_FORWARD = 0, FX_GCONV_BACKWARD_INPUT = 1, FX_GCONV_BACKWARD_WEIGHT = 2 };

/* Run op `kind` on the device of `out`. The caller (conv2d.c) has validated everything that
 * does not need the device: shapes against g, all three tensors on that one device, and the
 * integer path's limit of 2^32 products per sum. Semantics are the CPU's (conv2d.c): first
 * input FLEX16_5/DFP16 -> exact int64 sums and one rounding in the write; otherwise fp32
 * compute and one rounding. FX_EDEVICE for a failed CUDA call or allocation (message set),
 * FX_EUNSUPPORTED for sizes one launch cannot take; out is unchanged on failure unless a
 * CUDA call failed during its write. */
int fx_gpu_conv2d(int kind, tensor_t *out, const tensor_t *a, const tensor_t *b,
                  const fx_conv_geom *g, const char *func);

/* Largest patch matrix of one batch chunk, in elements (default FX_GPU_CONV_CHUNK_ELEMS). For
 * tests, to force many chunks on small problems: elems > 0 sets it, elems <= 0 restores the
 * default; returns the previous value. Not synchronised with ops running on other threads. */
#define FX_GPU_CONV_CHUNK_ELEMS ((int64_t)1 << 24)
int64_t fx_gpu_conv_chunk_elems(int64_t elems);

/* ---- kernel launchers (gpu_conv.cu) -----------------------------------------------------------
 * Layouts as in src/nn/im2col.h: P = OH*OW pixels per sample, a chunk is the samples
 * [n0, n0 + nb) with Pc = nb*P pixel columns, CKK = C*KH*KW weight positions
 * r = (c*KH + kh)*KW + kw, pixel q = (n - n0)*P + oh*OW + ow. int_compute selects the element
 * types: int16 mantissas / int64 sums, or fp32 values / fp32 sums. Views are read with any
 * strides. st (may be NULL) receives the statistics of the values a kernel writes (int64:
 * largest |v|; fp32: largest finite |v| and NaN/Inf count), reduced in its epilogue. Status as
 * in gpu_kernels.h. */

/* col[r*Pc + q] = the tap r of pixel q of x (a 4-D view [N,C,H,W]); taps in the padding are 0.
 * raw: x's 16-bit elements copied as they are (int16 mantissas of FLEX16_5/DFP16, or fp16/bf16
 * bits; a tap in the padding is 0, which is +0.0 in both) into 16-bit col; else x widened to
 * fp32 exactly as the CPU widens it, into float col. */
int fx_gk_conv_im2col(const fx_dview *x, int raw, const fx_conv_geom *g, int64_t n0,
                      int64_t nb, void *col, const char *func);

/* chunk[(o*nb + n)*P + p] = t[n0 + n][o][p] for a 4-D view t [N, O, OH, OW] (P = OH*OW): the
 * channel-major [O, Pc] matrix of the chunk (raw: 16-bit elements as they are; else widened
 * fp32). */
int fx_gk_conv_gather(const fx_dview *t, int raw, int64_t n0, int64_t nb, void *chunk,
                      const char *func);

/* The inverse order into an NCHW stage: stage[((n0 + n)*O + o)*P + p] = chunk[(o*nb + n)*P + p]
 * (int64 or fp32 values, moved unchanged). */
int fx_gk_conv_scatter(const void *chunk, int int_compute, int64_t O, int64_t P, int64_t n0,
                       int64_t nb, void *stage, fx_dstage_stats *st, const char *func);

/* The adjoint of im2col into an NCHW stage [N,C,H,W]: for each input element of the chunk's
 * samples, the sum over its taps (kh, kw) of col[r*Pc + q] (the pixels q that read it), added
 * in increasing (kh, kw) order; elements no pixel reads are 0. int64 (exact) or fp32. */
int fx_gk_conv_col2im(const void *col, int int_compute, const fx_conv_geom *g, int64_t n0,
                      int64_t nb, void *stage, fx_dstage_stats *st, const char *func);

/* acc[i] += part[i] for i < n (int64: exact; fp32: one rounding); st: of the new acc values. */
int fx_gk_conv_accumulate(void *acc, const void *part, int int_compute, int64_t n,
                          fx_dstage_stats *st, const char *func);

#ifdef __cplusplus
}
#endif
#endif
