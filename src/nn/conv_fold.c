/* Folding a convolution's kernel columns into its channels (conv_fold.h). */
#include "conv_fold.h"

#include <string.h>

int fx_conv_fold_geom(const fx_conv_geom *g, fx_conv_geom *f)
{
    if (g->sh != 1 || g->sw != 1 || g->dh != 1 || g->dw != 1 || g->KW < 2) return 0;
    int64_t C = g->C * g->KW;
    if (C > FX_CONV_FOLD_MAX_C) return 0;
    if (C < FX_CONV_FOLD_MIN_C) C = FX_CONV_FOLD_MIN_C;
    *f = *g;
    f->C = C;
    f->W = g->OW;
    f->KW = 1;
    f->pw = 0;
    return 1;
}

void fx_conv_fold_pad_i16(const fx_conv_geom *g, const fx_conv_geom *f, const int16_t *x,
                          int64_t n0, int64_t nb, int16_t *xpf)
{
    const int64_t Hp = f->H + 2 * f->ph, OW = f->W, W = g->W, CK = g->C * g->KW;
    for (int64_t n = 0; n < nb; n++)
        for (int64_t cf = 0; cf < f->C; cf++) {
            int16_t *plane = xpf + (n * f->C + cf) * Hp * OW;
            if (cf >= CK) { /* channels past C KW: zeros, as the folded weights there */
                memset(plane, 0, (size_t)(Hp * OW) * sizeof *plane);
                continue;
            }
            /* xf(cf, ih, ow) = x(c, ih, ow + shift) */
            const int64_t c = cf / g->KW, shift = cf % g->KW - g->pw;
            /* the output columns [lo, hi) whose source column lies inside x (none: lo = hi) */
            const int64_t lo = shift >= 0 ? 0 : -shift < OW ? -shift : OW;
            const int64_t hi = W - shift < lo ? lo : W - shift < OW ? W - shift : OW;
            memset(plane, 0, (size_t)(f->ph * OW) * sizeof *plane);
            for (int64_t ih = 0; ih < f->H; ih++) {
                int16_t *d = plane + (ih + f->ph) * OW;
                const int16_t *s = x + (((n0 + n) * g->C + c) * g->H + ih) * W;
                memset(d, 0, (size_t)lo * sizeof *d);
                if (hi > lo) memcpy(d + lo, s + lo + shift, (size_t)(hi - lo) * sizeof *d);
                memset(d + hi, 0, (size_t)(OW - hi) * sizeof *d);
            }
            memset(plane + (f->ph + f->H) * OW, 0, (size_t)(f->ph * OW) * sizeof *plane);
        }
}

void fx_conv_fold_weights_i16(const fx_conv_geom *g, const fx_conv_geom *f, const int16_t *w,
                              int16_t *wf)
{
    const int64_t KH = g->KH, KW = g->KW, CK = g->C * KW;
    for (int64_t o = 0; o < g->O; o++)
        for (int64_t cf = 0; cf < f->C; cf++)
            for (int64_t kh = 0; kh < KH; kh++)
                wf[(o * f->C + cf) * KH + kh] =
                    cf < CK ? w[((o * g->C + cf / KW) * KH + kh) * KW + cf % KW] : 0;
}
