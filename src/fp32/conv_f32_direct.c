/* The portable parts of the direct fp32 forward convolution (conv_f32_direct.h): the weights'
 * packing and the route's switch and counter. */
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
