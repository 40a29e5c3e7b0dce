/* Portable definition of the implicit-GEMM A panels (conv_panels.h). */
#include "conv_panels.h"
#include "../core/backend.h" /* the scalar fp16/bf16 definitions */
#include "../fp32/f32_kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

int64_t fx_conv_panels_numel(const fx_conv_geom *g, int64_t nb, int mr)
{
    const int64_t Pc = nb * g->OH * g->OW, K = g->C * g->KH * g->KW;
    return (Pc + mr - 1) / mr * mr * ((K + 1) / 2);
}

/* Offset in xp of pixel m's tap 0, and of tap k relative to it. */
static int64_t fx_pixel_base(const fx_conv_geom *g, int64_t m)
{
    const int64_t P = g->OH * g->OW, n = m / P, p = m % P, oh = p / g->OW, ow = p % g->OW;
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;
    return (n * g->C * Hp + oh * g->sh) * Wp + ow * g->sw;
}

static int64_t fx_tap_offset(const fx_conv_geom *g, int64_t k)
{
    const int64_t KK = g->KH * g->KW, c = k / KK, kh = (k % KK) / g->KW, kw = k % g->KW;
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;
    return (c * Hp + kh * g->dh) * Wp + kw * g->dw;
}

void fx_conv_panel_i16(const fx_conv_geom *g, const int16_t *xp, int64_t nb, int mr, int64_t q,
                       int32_t *ap)
{
    const int64_t Pc = nb * g->OH * g->OW, K = g->C * g->KH * g->KW, kp = (K + 1) / 2;
    int32_t *dst = ap + q * kp * mr;
    for (int i = 0; i < mr; i++) {
        const int64_t m = q * mr + i;
        if (m >= Pc) {
            for (int64_t p = 0; p < kp; p++) dst[p * mr + i] = 0;
            continue;
        }
        const int16_t *base = xp + fx_pixel_base(g, m);
        for (int64_t p = 0; p < kp; p++) {
            const uint32_t lo = (uint16_t)base[fx_tap_offset(g, 2 * p)];
            const uint32_t hi = 2 * p + 1 < K ? (uint16_t)base[fx_tap_offset(g, 2 * p + 1)] : 0u;
            dst[p * mr + i] = (int32_t)(lo | (hi << 16));
        }
    }
}

void fx_conv_panels_i16(const fx_conv_geom *g, const int16_t *xp, int64_t nb, int mr,
                        int32_t *ap)
{
    const int64_t Pc = nb * g->OH * g->OW;
    for (int64_t q = 0; q * mr < Pc; q++) fx_conv_panel_i16(g, xp, nb, mr, q, ap);
}

void fx_conv_patch_taps(const fx_conv_geom *g, const void *src, const int64_t *goff, int64_t k0,
                        int64_t kc, size_t esz, void *dst)
{
    const int64_t KW = g->KW, dw = g->dw, e = (int64_t)esz;
    const int64_t run = KW * e; /* bytes of one kernel row's taps when dw = 1 */
    /* a fixed-size memcpy is one or two unaligned vector moves on any x86-64 */
    const int mv = dw != 1 ? 0 : run <= 16 ? 16 : run <= 32 ? 32 : 0;
    const char *s = src;
    char *d = dst;
    if (mv) {
        /* tap gi*KW of the block's first kernel row lies less than `run` bytes before d; the
         * last move ends less than 32 bytes past tap k0 + kc - 1 */
        const int64_t gfirst = k0 / KW, glast = (k0 + kc - 1) / KW;
        for (int64_t gi = gfirst; gi <= glast; gi++) {
            char *to = d + (gi * KW - k0) * e;
            if (mv == 16)
                memcpy(to, s + goff[gi] * e, 16);
            else
                memcpy(to, s + goff[gi] * e, 32);
        }
        return;
    }
    for (int64_t t = 0; t < kc; t++) {
        const int64_t k = k0 + t;
        memcpy(d + t * e, s + (goff[k / KW] + (k % KW) * dw) * e, esz);
    }
}

void fx_conv_nhwc(const fx_conv_geom *g, const int16_t *xp, int64_t nb, int16_t *xq)
{
    const int64_t plane = (g->H + 2 * g->ph) * (g->W + 2 * g->pw), per = g->C * plane;
    for (int64_t n = 0; n < nb; n++) fx_transpose_i16(xp + n * per, xq + n * per, g->C, plane);
}

void fx_conv_weights_nhwc(const fx_conv_geom *g, const int16_t *w, int16_t *wq)
{
    const int64_t C = g->C, KH = g->KH, KW = g->KW, CKK = C * KH * KW;
    for (int64_t o = 0; o < g->O; o++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t kh = 0; kh < KH; kh++)
                for (int64_t kw = 0; kw < KW; kw++)
                    wq[o * CKK + (kh * KW + kw) * C + c] = w[o * CKK + (c * KH + kh) * KW + kw];
}

/* Taps k0 .. k0 + kc - 1 (order k') of m pixels from i0 on, channel-last: per pixel, one copy
 * per run piece of the window (fx_row_walk). Writes nothing outside the window. */
static void fx_conv_rows_i16_nhwc(const fx_conv_rows *cr, int64_t i0, int m, int64_t k0,
                                  int64_t kc, int16_t *dst, int64_t ld)
{
    const fx_conv_geom *g = cr->g;
    const int64_t C = g->C, Wp = g->W + 2 * g->pw, Hp = g->H + 2 * g->ph, P = g->OH * g->OW;
    int64_t n = i0 / P, p = i0 % P, oh = p / g->OW, ow = p % g->OW;
    for (int r = 0; r < m; r++) {
        const int16_t *base = cr->xp + ((n * Hp + oh * g->sh) * Wp + ow * g->sw) * C;
        int16_t *d = dst + r * ld;
        fx_row_walk w;
        fx_row_walk_start(g, k0, &w);
        for (int64_t pos = 0; pos < kc;) {
            if (w.left == 0) fx_row_walk_next_run(g, &w);
            const int64_t len = w.left < kc - pos ? w.left : kc - pos;
            memcpy(d + pos, base + w.off, (size_t)len * sizeof *d);
            w.off += len;
            w.left -= len;
            pos += len;
        }
        if (++ow == g->OW) {
            ow = 0;
            if (++oh == g->OH) {
                oh = 0;
                n++;
            }
        }
    }
}

void fx_conv_rows_i16(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int16_t *dst,
                      int64_t ld)
{
    _Static_assert(FX_A_ROWS_SLACK * sizeof(int16_t) >= FX_CONV_TAPS_SLACK_BYTES,
                   "the GEMM's row slack holds the tap moves' overrun");
    const fx_conv_rows *cr = ctx;
    if (cr->nhwc) {
        fx_conv_rows_i16_nhwc(cr, i0, m, k0, kc, dst, ld);
        return;
    }
    for (int r = 0; r < m; r++)
        fx_conv_patch_taps(cr->g, cr->xp + fx_pixel_base(cr->g, i0 + r), cr->goff, k0, kc,
                           sizeof(int16_t), dst + r * ld);
}

void fx_conv_wrows_i16(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int16_t *dst,
                       int64_t ld)
{
    const fx_conv_wsrc *ws = ctx;
    const fx_conv_geom *g = ws->g;
    for (int r = 0; r < m; r++) {
        const int16_t *tap = ws->xp + fx_conv_wtap_offset(g, i0 + r);
        int16_t *d = dst + r * ld;
        fx_pixel_run_walk w;
        fx_pixel_run_start(g, k0, &w);
        for (int64_t pos = 0; pos < kc;) {
            if (w.left == 0) fx_pixel_run_next(g, &w);
            const int64_t len = w.left < kc - pos ? w.left : kc - pos;
            memcpy(d + pos, tap + w.off, (size_t)len * sizeof *d);
            w.off += len;
            w.left -= len;
            pos += len;
        }
    }
}

int64_t fx_conv_panels_f32_numel(const fx_conv_geom *g, int64_t nb, int mr)
{
    const int64_t Pc = nb * g->OH * g->OW, K = g->C * g->KH * g->KW;
    return (Pc + mr - 1) / mr * mr * K;
}

int fx_conv_wpanels_f32_build(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb, int mr,
                              fx_f32_pack_blocks_fn pack, float *ap)
{
    if (mr < 1 || mr > FX_F32_MR_AVX512 || !fx_conv_wpanels_f32_fit(g) ||
        (fmt != FMT_FP32 && fmt != FMT_FP16 && fmt != FMT_BF16))
        return 0;
    const int64_t K = g->C * g->KH * g->KW, Pc = nb * g->OH * g->OW, nblk = (Pc + 7) / 8;
    fx_f32_block *blk = malloc(sizeof *blk * (size_t)nblk);
    int64_t *goff = fx_group_offsets(g);
    int64_t off[FX_F32_MR_AVX512]; /* the widest level's panel rows */
    if (!blk || !goff) {
        free(blk);
        free(goff);
        return 0;
    }
    /* each block's pixels: a run from its first pixel's base and, where the block continues on
     * the next output row (OW >= 8: that row at most), the rest of the run from there; the
     * chunk's last block ends with its row */
    fx_pixel_cursor cur = fx_cursor_start(g);
    for (int64_t b = 0; b < nblk; b++) {
        int64_t base[8];
        const int valid = Pc - 8 * b < 8 ? (int)(Pc - 8 * b) : 8;
        fx_cursor_next(&cur, valid, base);
        int split = 1;
        while (split < valid && base[split] == base[0] + split) split++;
        blk[b].off = base[0];
        blk[b].split = split < valid ? split : 8;
        blk[b].off2 = split < valid ? base[split] - split : 0;
    }
    for (int64_t q = 0; q * mr < K; q++) {
        const int rows = K - q * mr < mr ? (int)(K - q * mr) : mr;
        for (int r = 0; r < rows; r++) { /* tap k: kernel row k / KW, column k % KW */
            const int64_t k = q * mr + r;
            off[r] = goff[k / g->KW] + k % g->KW * g->dw;
        }
        pack(ap + q * Pc * mr, xp, fmt, off, rows, blk, Pc);
    }
    free(blk);
    free(goff);
    return 1;
}

int64_t fx_conv_wpanels_f32_numel(const fx_conv_geom *g, int64_t nb, int mr)
{
    const int64_t Pc = nb * g->OH * g->OW, K = g->C * g->KH * g->KW;
    return (K + mr - 1) / mr * mr * Pc;
}

static atomic_int wpanels_enabled = 1;
static atomic_llong wpanels_chunks;

void fx_conv_wpanels_set_enabled(int on)
{
    atomic_store_explicit(&wpanels_enabled, on != 0, memory_order_relaxed);
}

int fx_conv_wpanels_enabled(void)
{
    return atomic_load_explicit(&wpanels_enabled, memory_order_relaxed);
}

long long fx_conv_wpanels_chunks(void)
{
    return atomic_load_explicit(&wpanels_chunks, memory_order_relaxed);
}

void fx_conv_wpanels_count(void)
{
    atomic_fetch_add_explicit(&wpanels_chunks, 1, memory_order_relaxed);
}

static float fx_widen_elem(const void *xp, int fmt, int64_t i)
{
    if (fmt == FMT_FP32) return ((const float *)xp)[i];
    const uint16_t h = ((const uint16_t *)xp)[i];
    return fmt == FMT_FP16 ? fx_fp16_to_f32(h) : fx_bf16_to_f32(h);
}

void fx_conv_panels_f32(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb, int mr,
                        float *ap)
{
    const int64_t Pc = nb * g->OH * g->OW, K = g->C * g->KH * g->KW;
    for (int64_t q = 0; q * mr < Pc; q++)
        for (int i = 0; i < mr; i++) {
            const int64_t m = q * mr + i;
            float *dst = ap + q * K * mr + i;
            if (m >= Pc) {
                for (int64_t k = 0; k < K; k++) dst[k * mr] = 0.0f;
                continue;
            }
            const int64_t base = fx_pixel_base(g, m);
            for (int64_t k = 0; k < K; k++)
                dst[k * mr] = fx_widen_elem(xp, fmt, base + fx_tap_offset(g, k));
        }
}
