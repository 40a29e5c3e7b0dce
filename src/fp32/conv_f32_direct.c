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
    for (int64_t k = 0; k < g->C * g->KH * g->KW; k++) off[k] = fx_f32_tap_offset(g, k);
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

/* ---- the input gradient ------------------------------------------------------------------- */

int fx_f32_dgrad_direct_fits(const struct fx_conv_geom *g)
{
    return g->KH * g->KW <= FX_F32_DGRAD_MAX_TAPS;
}

/* The padding before dy's first row (column) that holds every tap of every dx pixel on that
 * axis: the lowest dy index a tap reads is floor((ph - (K-1) d) / s), the highest
 * floor((H - 1 + ph) / s); the padding is the larger overhang of the two, on both sides. */
static int64_t dgrad_pad(int64_t in, int64_t out, int64_t k, int64_t p, int64_t d, int64_t s)
{
    const int64_t low = (k - 1) * d - p, before = low > 0 ? (low + s - 1) / s : 0;
    const int64_t high = (in - 1 + p) / s - (out - 1), after = high > 0 ? high : 0;
    return before > after ? before : after;
}

void fx_f32_dgrad_direct_pad_geom(const struct fx_conv_geom *g, struct fx_conv_geom *gd)
{
    *gd = (struct fx_conv_geom){.N = g->N, .C = g->O, .H = g->OH, .W = g->OW, .O = g->C,
                                .KH = g->KH, .KW = g->KW, .OH = g->H, .OW = g->W, .sh = 1,
                                .sw = 1, .ph = dgrad_pad(g->H, g->OH, g->KH, g->ph, g->dh, g->sh),
                                .pw = dgrad_pad(g->W, g->OW, g->KW, g->pw, g->dw, g->sw),
                                .dh = g->dh, .dw = g->dw};
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

/* x mod s in [0, s) for any sign of x */
static int64_t mod_pos(int64_t x, int64_t s)
{
    const int64_t r = x % s;
    return r < 0 ? r + s : r;
}

/* The tiles of dx row ih of image n for one block of NV vectors of channels from c0: per
 * column phase rx, the live taps (the row's and the phase's), then tiles of near-equal widths
 * over the phase's pixels (the wider ones first), each with its taps' dy offsets. */
static void dgrad_row(const fx_f32_dgrad_level *lv, const struct fx_conv_geom *g,
                      const fx_conv_geom *gd, const float *dimg, int64_t plane, const float *wq,
                      int64_t c0, int64_t n, int64_t ih, float *dx)
{
    const int64_t C = g->C, O = g->O, KH = g->KH, KW = g->KW, KK = KH * KW, W = g->W;
    const int64_t sw = g->sw, Wq = g->OW + 2 * gd->pw;
    const int vec = lv->vec, NV = C - c0 > vec ? 2 : 1;
    const int n0 = C - c0 < vec ? (int)(C - c0) : vec;
    const int n1 = NV > 1 ? (C - c0 - vec < vec ? (int)(C - c0 - vec) : vec) : 0;
    const float *w0 = wq + (c0 / 16) * KK * O * 16, *w1 = vec == 16 ? w0 + KK * O * 16 : w0 + 8;
    const fx_f32_dgrad_tile_fn *fns = lv->tiles[NV - 1];
    const int64_t mr_max = lv->mr_max[NV - 1];
    int64_t rowoff[FX_F32_DGRAD_MAX_TAPS]; /* per kh: the dy row's offset, or -1 */
    for (int64_t kh = 0; kh < KH; kh++) {
        const int64_t sy = ih + g->ph - kh * g->dh, oh = sy >= 0 ? sy / g->sh : -1;
        rowoff[kh] = sy >= 0 && sy % g->sh == 0 && oh < g->OH ? (oh + gd->ph) * Wq : -1;
    }
    unsigned char live[FX_F32_DGRAD_MAX_TAPS];
    int64_t off[FX_F32_DGRAD_MAX_TAPS];
    for (int64_t rx = 0; rx < sw && rx < W; rx++) {
        int any = 0;
        for (int64_t kh = 0; kh < KH; kh++)
            for (int64_t kw = 0; kw < KW; kw++) {
                const int l = rowoff[kh] >= 0 && mod_pos(rx + g->pw - kw * g->dw, sw) == 0;
                live[kh * KW + kw] = (unsigned char)l;
                any |= l;
            }
        const int64_t cnt = (W - rx + sw - 1) / sw; /* the phase's pixels */
        const int64_t ntile = (cnt + mr_max - 1) / mr_max, wide = cnt % ntile, base = cnt / ntile;
        int64_t j0 = 0;
        for (int64_t t = 0; t < ntile; t++) {
            const int w = (int)(base + (t < wide));
            const int64_t iw0 = rx + j0 * sw;
            if (any)
                for (int64_t kh = 0; kh < KH; kh++)
                    for (int64_t kw = 0; kw < KW; kw++) {
                        const int64_t k = kh * KW + kw;
                        /* a live tap's column is an exact multiple of sw; C's division of a
                         * negative one is exact too */
                        if (live[k])
                            off[k] = rowoff[kh] + (iw0 + g->pw - kw * g->dw) / sw + gd->pw;
                    }
            fns[w - 1](dimg, plane, off, live, KK, O, w0, w1,
                       dx + (n * g->H * W + ih * W + iw0) * C + c0, sw * C, n0, n1);
            j0 += w;
        }
    }
}

void fx_f32_dgrad_direct_run(const fx_f32_dgrad_level *lv, const struct fx_conv_geom *g,
                             const float *dyp, int64_t nbc, const float *wq, float *dx,
                             int nthreads)
{
    fx_conv_geom gd;
    fx_f32_dgrad_direct_pad_geom(g, &gd);
    const int64_t plane = (g->OH + 2 * gd.ph) * (g->OW + 2 * gd.pw), H = g->H;
    (void)nthreads; /* without OpenMP */
    for (int64_t c0 = 0; c0 < g->C; c0 += 2 * lv->vec) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1)
#endif
        for (int64_t row = 0; row < nbc * H; row++) {
            const int64_t n = row / H;
            dgrad_row(lv, g, &gd, dyp + n * g->O * plane, plane, wq, c0, n, row % H, dx);
        }
    }
    fx_f32_dgrad_direct_count();
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

/* ---- the weight gradient ------------------------------------------------------------------ */

int64_t fx_f32_tap_offset(const struct fx_conv_geom *g, int64_t k)
{
    const int64_t Wp = g->W + 2 * g->pw, HWp = (g->H + 2 * g->ph) * Wp;
    const int64_t kw = k % g->KW, kh = (k / g->KW) % g->KH, c = k / (g->KW * g->KH);
    return c * HWp + kh * g->dh * Wp + kw * g->dw;
}

static atomic_int wgrad_enabled = 1;
static atomic_llong wgrad_calls;

void fx_f32_wgrad_direct_set_enabled(int on)
{
    atomic_store_explicit(&wgrad_enabled, on != 0, memory_order_relaxed);
}

int fx_f32_wgrad_direct_enabled(void)
{
    return atomic_load_explicit(&wgrad_enabled, memory_order_relaxed);
}

long long fx_f32_wgrad_direct_calls(void)
{
    return atomic_load_explicit(&wgrad_calls, memory_order_relaxed);
}

void fx_f32_wgrad_direct_count(void)
{
    atomic_fetch_add_explicit(&wgrad_calls, 1, memory_order_relaxed);
}
