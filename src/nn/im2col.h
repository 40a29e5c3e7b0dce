/* Layout transforms that turn a 2-D convolution into GEMMs (src/nn/conv2d.c).
 *
 * Geometry: x[N,C,H,W], w[O,C,KH,KW], y[N,O,OH,OW], all contiguous row-major here.
 *   ih = oh*sh - ph + kh*dh,  iw = ow*sw - pw + kw*dw  (positions outside x read as 0).
 * A "chunk" is the samples [n0, n0 + nb). Its patch matrix col has one row per weight position
 * r = (c*KH + kh)*KW + kw (CKK = C*KH*KW rows) and one column per output pixel
 * q = (n - n0)*P + oh*OW + ow (P = OH*OW, Pc = nb*P columns), row-major: col[r*Pc + q].
 * A chunk of an NCHW tensor with O channels in "channel-major" order is t[o*Pc + q].
 *
 * The tap r of pixel q is xp[n][c][oh*sh + kh*dh][ow*sw + kw*dw] in the zero-padded input xp.
 * Nothing here rounds: int16 mantissas are copied as they are (padding is 0 at any exponent),
 * and col2im adds in the caller's accumulator type (int64: exact; fp32: for every element the
 * terms arrive in increasing r, whatever the thread count).
 */
#ifndef FX_NN_IM2COL_H
#define FX_NN_IM2COL_H

#include <stddef.h>
#include <stdint.h>

typedef struct fx_conv_geom {
    int64_t N, C, H, W;       /* input */
    int64_t O, KH, KW;        /* weights */
    int64_t OH, OW;           /* output */
    int64_t sh, sw, ph, pw, dh, dw;
} fx_conv_geom;

/* Zero-padded copy of the chunk's input: xp[n][c][ih + ph][iw + pw] = x[n0 + n][c][ih][iw],
 * of shape [nb][C][H + 2ph][W + 2pw], zeros in the border; elements of esz bytes (2 or 4).
 * Every tap of every output pixel then lies inside xp, so the transforms below copy and add without
 * bounds checks. fx_conv_unpad is the reverse (the border is dropped).
 * The im2col buffers xp must hold FX_CONV_PAD_SLACK elements beyond fx_conv_padded_numel
 * (initialised): runs are copied in whole blocks and may read that far past the last one. */
#define FX_CONV_PAD_SLACK 16
int64_t fx_conv_padded_numel(const fx_conv_geom *g, int64_t nb);
void fx_conv_pad(const fx_conv_geom *g, const void *x, int64_t n0, int64_t nb, void *xp,
                 size_t esz);
void fx_conv_unpad(const fx_conv_geom *g, const void *xp, int64_t n0, int64_t nb, void *x,
                   size_t esz);
/* fx_conv_pad of fp16 or bf16 values (bits) into floats, each row widened by widen (a level's
 * fp16_to_f32 or bf16_to_f32, exact) as it is copied: no 16-bit padded copy in between. */
typedef void (*fx_widen_row_fn)(const uint16_t *src, float *dst, int64_t n);
void fx_conv_pad_widen(const fx_conv_geom *g, const uint16_t *x, int64_t n0, int64_t nb,
                       float *xp, fx_widen_row_fn widen);

/* dst[j*rows + i] = src[i*cols + j] for 16-bit elements, with the active level's kernel. */
void fx_transpose_i16(const int16_t *src, int16_t *dst, int64_t rows, int64_t cols);

/* col[r*Pc + q] = the tap r of pixel q, from the padded chunk xp. Threads (up to nthreads)
 * split the rows r. */
void fx_im2col_i16(const fx_conv_geom *g, const int16_t *xp, int64_t nb, int16_t *col,
                   int nthreads);
void fx_im2col_f32(const fx_conv_geom *g, const float *xp, int64_t nb, float *col, int nthreads);

/* Pixel-major im2col: colT[q*CKK + r] = col[r*Pc + q], written directly (each pixel's patch
 * is one contiguous row). Threads split the output rows. */
void fx_im2row_i16(const fx_conv_geom *g, const int16_t *xp, int64_t nb, int16_t *colT,
                   int nthreads);
void fx_im2row_f32(const fx_conv_geom *g, const float *xp, int64_t nb, float *colT,
                   int nthreads);

/* The adjoint of im2col: dxp[tap r of pixel q] += col[r*Pc + q], into a padded chunk
 * accumulator (zeroed by the caller; its border collects the padding's gradient, which is
 * dropped by fx_conv_unpad). Threads split the channels c, each owning its planes. */
void fx_col2im_i64(const fx_conv_geom *g, const int64_t *col, int64_t nb, int64_t *dxp,
                   int nthreads);
void fx_col2im_f32(const fx_conv_geom *g, const float *col, int64_t nb, float *dxp,
                   int nthreads);

/* Between NCHW [N][O][P] and a chunk, elements of esz bytes (2, 4 or 8):
 *   gather:    chunk[o*nb*P + n*P + p] = nchw[((n0 + n)*O + o)*P + p]    (channel-major, runs)
 *   scatter_t: nchw[((n0 + n)*O + o)*P + p] = pix[(n*P + p)*O + o]       (pixel-major, tiled
 *                                                                          transposes) */
void fx_chunk_gather(const void *nchw, int64_t n0, int64_t nb, int64_t O, int64_t P, void *chunk,
                     size_t esz);
void fx_chunk_scatter_t(const void *pix, int64_t n0, int64_t nb, int64_t O, int64_t P,
                        void *nchw, size_t esz);
/* the reverse of fx_chunk_scatter_t: pix[(n P + p) O + o] = nchw[((n0 + n) O + o) P + p] */
void fx_chunk_gather_t(const void *nchw, int64_t n0, int64_t nb, int64_t O, int64_t P, void *pix,
                       size_t esz);
/* fx_chunk_scatter_t of a whole batch's stage (n0 = 0) on nthreads threads, one image each */
void fx_chunk_scatter_t_par(const void *pix, int64_t nb, int64_t O, int64_t P, void *nchw,
                            size_t esz, int nthreads);

#endif
