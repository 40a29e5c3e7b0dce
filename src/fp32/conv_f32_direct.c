/* The portable parts of the direct fp32 forward convolution and input gradient
 * (conv_f32_direct.h): the weights' packing, the offsets, and the routes' switches and
 * counters. */
#include "conv_f32_direct.h"
#include "../nn/im2col.h"

#include <stdatomic.h>

int64_t fx_f32_fwd_direct_weights_numel(const struct fx_conv_geom *g)
{
    return (g->O + 15) / 16 * 16 * g->C * g->KH * g->KW;
}

void fx_f32_fwd_direct_pack_weights(const struct fx_conv_geom *g, const float *w, float *wq)
{
    const int64_t K = g->C * g->KH * g->KW, nblk = (g->O + 15) / 16;
    for (int64_t ob = 0; ob < nblk; ob++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < 16; j++) {
                const int64_t o = 16 * ob + j;
                wq[(ob * K + k) * 16 + j] = o < g->O ? w[o * K + k] : 0.0f;
            }
}

void fx_f32_fwd_direct_offsets(const struct fx_conv_geom *g, int64_t *off)
{
    const int64_t Wp = g->W + 2 * g->pw, HW = (g->H + 2 * g->ph) * Wp;
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t kh = 0; kh < g->KH; kh++)
            for (int64_t kw = 0; kw < g->KW; kw++)
                off[(c * g->KH + kh) * g->KW + kw] = c * HW + kh * g->dh * Wp + kw * g->dw;
}

static atomic_int direct_enabled = 1;
static atomic_llong direct_calls;

void fx_f32_fwd_direct_set_enabled(int on)
{
    atomic_store_explicit(&direct_enabled, on != 0, memory_order_relaxed);
}

int fx_f32_fwd_direct_enabled(void)
{
    return atomic_load_explicit(&direct_enabled, memory_order_relaxed);
}

long long fx_f32_fwd_direct_calls(void)
{
    return atomic_load_explicit(&direct_calls, memory_order_relaxed);
}

void fx_f32_fwd_direct_count(void)
{
    atomic_fetch_add_explicit(&direct_calls, 1, memory_order_relaxed);
}

/* ---- the input gradient at stride 1 ---------------------------------------------------------- */

int fx_f32_dgrad_direct_fits(const struct fx_conv_geom *g)
{
    return g->sh == 1 && g->sw == 1 && (g->KH - 1) * g->dh >= g->ph &&
           (g->KW - 1) * g->dw >= g->pw && g->KH * g->KW <= FX_F32_DGRAD_MAX_TAPS;
}

int64_t fx_f32_dgrad_direct_padded_h(const struct fx_conv_geom *g)
{
    return g->OH + 2 * ((g->KH - 1) * g->dh - g->ph);
}

int64_t fx_f32_dgrad_direct_padded_w(const struct fx_conv_geom *g)
{
    return g->OW + 2 * ((g->KW - 1) * g->dw - g->pw);
}

void fx_f32_dgrad_direct_pad_geom(const struct fx_conv_geom *g, struct fx_conv_geom *gd)
{
    *gd = (struct fx_conv_geom){.N = g->N, .C = g->O, .H = g->OH, .W = g->OW, .O = g->C,
                                .KH = g->KH, .KW = g->KW, .OH = g->H, .OW = g->W, .sh = 1,
                                .sw = 1, .ph = (g->KH - 1) * g->dh - g->ph,
                                .pw = (g->KW - 1) * g->dw - g->pw, .dh = g->dh, .dw = g->dw};
}

int64_t fx_f32_dgrad_direct_weights_numel(const struct fx_conv_geom *g)
{
    return (g->C + 15) / 16 * 16 * g->KH * g->KW * g->O;
}

void fx_f32_dgrad_direct_pack_weights(const struct fx_conv_geom *g, const float *w, float *wq)
{
    const int64_t C = g->C, O = g->O, KK = g->KH * g->KW, nblk = (C + 15) / 16;
    for (int64_t cb = 0; cb < nblk; cb++)
        for (int64_t t = 0; t < KK; t++)
            for (int64_t o = 0; o < O; o++)
                for (int64_t j = 0; j < 16; j++) {
                    const int64_t c = 16 * cb + j;
                    wq[((cb * KK + t) * O + o) * 16 + j] = c < C ? w[(o * C + c) * KK + t] : 0.0f;
                }
}

void fx_f32_dgrad_direct_offsets(const struct fx_conv_geom *g, int64_t *toff)
{
    const int64_t Wq = fx_f32_dgrad_direct_padded_w(g);
    for (int64_t kh = 0; kh < g->KH; kh++)
        for (int64_t kw = 0; kw < g->KW; kw++)
            toff[kh * g->KW + kw] = (g->KH - 1 - kh) * g->dh * Wq + (g->KW - 1 - kw) * g->dw;
}

void fx_f32_dgrad_direct_live_taps(const struct fx_conv_geom *g, int64_t ih, unsigned char *live)
{
    for (int64_t kh = 0; kh < g->KH; kh++) {
        const int64_t oh = ih + g->ph - kh * g->dh;
        for (int64_t kw = 0; kw < g->KW; kw++) live[kh * g->KW + kw] = oh >= 0 && oh < g->OH;
    }
}

static atomic_int dgrad_enabled = 1;
static atomic_llong dgrad_calls;

void fx_f32_dgrad_direct_set_enabled(int on)
{
    atomic_store_explicit(&dgrad_enabled, on != 0, memory_order_relaxed);
}

int fx_f32_dgrad_direct_enabled(void)
{
    return atomic_load_explicit(&dgrad_enabled, memory_order_relaxed);
}

long long fx_f32_dgrad_direct_calls(void)
{
    return atomic_load_explicit(&dgrad_calls, memory_order_relaxed);
}

void fx_f32_dgrad_direct_count(void)
{
    atomic_fetch_add_explicit(&dgrad_calls, 1, memory_order_relaxed);
}
