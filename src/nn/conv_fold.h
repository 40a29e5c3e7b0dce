/* A convolution with few input channels seen as one with more: the kernel's columns folded into
 * the channels. For stride and dilation 1,
 *   y[o][oh][ow] = sum over c, kh, kw of x(c, oh - ph + kh, ow - pw + kw) w[o][c][kh][kw]
 * is the convolution of the folded input xf(c KW + kw, ih, ow) = x(c, ih, ow - pw + kw)
 * (0 outside x) with the folded weights wf[o][c KW + kw][kh][0] = w[o][c][kh][kw]: C KW channels
 * (zero channels up to FX_CONV_FOLD_MIN_C), a KH x 1 kernel, padding (ph, 0) and width OW. The
 * two have the same products, so exact integer sums are equal bit for bit. The folded form lets
 * a layer with one input channel (the CNN's first, 5 x 5) take the direct integer kernel, which
 * wants whole segments of 8 channels (src/flex/conv_i16.h), instead of a patch GEMM of depth 25.
 */
#ifndef FX_NN_CONV_FOLD_H
#define FX_NN_CONV_FOLD_H

#include "im2col.h"

#define FX_CONV_FOLD_MIN_C 8
/* the folded input is C' / C times wider in channels than x: at most this many channels */
#define FX_CONV_FOLD_MAX_C 64

/* The folded geometry of g into *f; 0 (f untouched) where g is not stride and dilation 1, has
 * KW = 1, or would fold into more than FX_CONV_FOLD_MAX_C channels. */
int fx_conv_fold_geom(const fx_conv_geom *g, fx_conv_geom *f);

/* The folded chunk [n0, n0 + nb) of x (g's NCHW int16 mantissas), padded as fx_conv_pad pads it
 * for the folded geometry f: xpf[n][c'][ih + ph][ow], fx_conv_padded_numel(f, nb) values (the
 * caller's slack beyond them is left alone). */
void fx_conv_fold_pad_i16(const fx_conv_geom *g, const fx_conv_geom *f, const int16_t *x,
                          int64_t n0, int64_t nb, int16_t *xpf);

/* The folded weights of w (g's OIHW int16 mantissas): wf[o][c'][kh], O f->C KH values. */
void fx_conv_fold_weights_i16(const fx_conv_geom *g, const fx_conv_geom *f, const int16_t *w,
                              int16_t *wf);

#endif
