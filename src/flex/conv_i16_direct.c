/* The parts of the exact int16 direct forward convolution that do not depend on the vector
 * level (conv_i16_direct.h): which geometries it takes, the weights' packing and norms, the
 * scratch size, the fold schedule, the chunk's admission, and the portable copy of an image. */
#include "conv_i16.h"
#include "conv_i16_direct.h"
#include "gemm_i16.h" /* fx_ceil_sqrt */
#include "flex_kernels.h" /* fx_q64_fast_* */
#include "flex_math.h"
#include "../core/backend.h"
#include "../nn/im2col.h"

#include <stdatomic.h>

fx_i16_fwd_kernel fx_i16_fwd_kernel_of(const struct fx_backend *be, int amx)
{
    if (amx)
        return (fx_i16_fwd_kernel){fx_i16_fwd_amx_weights_numel, fx_i16_fwd_amx_pack_weights,
                                   fx_i16_fwd_amx_scratch, be->conv.i16_fwd_amx, 1};
    return (fx_i16_fwd_kernel){fx_i16_fwd_direct_weights_numel, fx_i16_fwd_direct_pack_weights,
                               fx_i16_fwd_direct_scratch, be->conv.i16_fwd,
                               be->conv.i16_fwd_unpadded};
}

int fx_i16_fwd_direct_fits(const struct fx_conv_geom *g)
{
    const int64_t KK = g->KH * g->KW;
    /* any stride whose taps reach every input pixel (KH >= sh, KW >= sw): a tile's pixels
     * step sw pixels through the copy, and its taps still lie in one padded row each (the
     * norms' unit); a 1x1 projection at stride 2 stays on the patch panels, which hold a
     * quarter of the input where the copy holds all of it (as for bf16,
     * src/bf16/bf16_conv_avx512bf16.c) */
    return g->sh >= 1 && g->sw >= 1 && g->KH >= g->sh && g->KW >= g->sw && g->dh == 1 &&
           g->dw == 1 && g->C >= 8 && g->O >= 16 &&
           KK <= FX_I16_FWD_MAX_TAPS && KK * fx_i16_groups(g->C) <= FX_I16_FWD_MAX_SEGS &&
           g->C * KK <= ((int64_t)1 << 16);
}

int64_t fx_i16_fwd_direct_weights_numel(const struct fx_conv_geom *g)
{
    const int64_t KK = g->KH * g->KW, opad = (g->O + 15) / 16 * 16;
    return KK * fx_i16_pairs(g->C) * opad + opad / 16 * KK * fx_i16_groups(g->C);
}

void fx_i16_fwd_direct_pack_weights(const struct fx_conv_geom *g, const int16_t *w, uint32_t *wq)
{
    const int64_t C = g->C, O = g->O, KK = g->KH * g->KW;
    const int64_t Cpp = fx_i16_pairs(C), G = fx_i16_groups(C);
    const int64_t opad = (O + 15) / 16 * 16;
    /* wq[(t Cpp + cp) opad + o] = (w[o][2cp][t], w[o][2cp + 1][t]), zero past C and O */
    for (int64_t t = 0; t < KK; t++)
        for (int64_t cp = 0; cp < Cpp; cp++) {
            uint32_t *dst = wq + (t * Cpp + cp) * opad;
            for (int64_t o = 0; o < opad; o++) {
                const uint32_t e =
                    o < O && 2 * cp < C ? (uint16_t)w[(o * C + 2 * cp) * KK + t] : 0u;
                const uint32_t d =
                    o < O && 2 * cp + 1 < C ? (uint16_t)w[(o * C + 2 * cp + 1) * KK + t] : 0u;
                dst[o] = e | d << 16;
            }
        }
    /* wn[(ob KK + t) G + s]: the largest norm over block ob's output channels of their weights
     * at tap t and channels [SEG_CH s, SEG_CH (s + 1)) */
    uint32_t *wn = wq + KK * Cpp * opad;
    for (int64_t ob = 0; ob < opad / 16; ob++)
        for (int64_t t = 0; t < KK; t++)
            for (int64_t s = 0; s < G; s++) {
                int64_t mx = 0;
                for (int64_t o = 16 * ob; o < 16 * ob + 16 && o < O; o++) {
                    int64_t sq = 0;
                    for (int64_t c = FX_I16_SEG_CH * s; c < FX_I16_SEG_CH * (s + 1) && c < C; c++) {
                        const int64_t v = w[(o * C + c) * KK + t];
                        sq += v * v;
                    }
                    mx = sq > mx ? sq : mx;
                }
                wn[(ob * KK + t) * G + s] = (uint32_t)fx_ceil_sqrt(mx); /* <= 2^17 */
            }
}

int64_t fx_i16_fwd_direct_scratch(const struct fx_conv_geom *g, int64_t nb)
{
    const int64_t Cpp = fx_i16_pairs(g->C), G = fx_i16_groups(g->C);
    const int64_t Hp = g->H + 2 * g->ph, HW = Hp * (g->W + 2 * g->pw);
    /* the kernels' layout: the copy, the tiles' overrun past its end (a last tile's spare rows
     * and their taps), then on AVX2 the interleaving buffer, a zero plane, the row norms and
     * one image's sums of squares (64-bit), on AVX-512 the row norms alone (its copy
     * interleaves and sums in registers); 16 spare words for alignment */
    return nb * HW * Cpp + (FX_I16_MAX_ROWS * g->sw + g->KW) * Cpp + Cpp * HW + (HW + 1) / 2 +
           nb * Hp * G + 2 * HW * G + 18;
}

static atomic_int direct_enabled = 1;
static atomic_llong direct_calls, direct_declined, direct_paired;

void fx_i16_fwd_direct_set_enabled(int on)
{
    atomic_store_explicit(&direct_enabled, on != 0, memory_order_relaxed);
}

int fx_i16_fwd_direct_enabled(void)
{
    return atomic_load_explicit(&direct_enabled, memory_order_relaxed);
}

long long fx_i16_fwd_direct_calls(void)
{
    return atomic_load_explicit(&direct_calls, memory_order_relaxed);
}

long long fx_i16_fwd_direct_declined(void)
{
    return atomic_load_explicit(&direct_declined, memory_order_relaxed);
}

long long fx_i16_fwd_direct_paired(void)
{
    return atomic_load_explicit(&direct_paired, memory_order_relaxed);
}

void fx_i16_fold_schedule(const uint32_t *rn, const uint32_t *wm, int64_t KK, int64_t KW,
                          int64_t G, uint8_t *fold)
{
    /* branch-free: where the chains are cut depends on the data (about every fifth segment on
     * training data). A segment whose bound alone exceeds the limit (never in a chunk that
     * fx_i16_fwd_admit admitted; fx_i16_fwd_admit_any admits a few) is FX_I16_FOLD_PAIRS, with
     * a fold before it; the chain after it starts afresh. */
    int64_t run = 0;
    int prev_pairs = 0;
    for (int64_t t = 0; t < KK; t++) {
        const uint32_t *r = rn + (t / KW) * G;
        for (int64_t s = 0; s < G; s++) {
            const int64_t i = t * G + s;
            const int64_t b = (int64_t)r[s] * wm[i];
            const int pairs = b > FX_I16_CHAIN_LIMIT;
            const int cut = pairs | (run + b > FX_I16_CHAIN_LIMIT);
            if (i > 0) fold[i - 1] = (uint8_t)(prev_pairs ? FX_I16_FOLD_PAIRS : cut);
            run = pairs ? 0 : (cut ? 0 : run) + b;
            prev_pairs = pairs;
        }
    }
    fold[KK * G - 1] = (uint8_t)(prev_pairs ? FX_I16_FOLD_PAIRS : 0);
}

/* The (input row, segment) pairs whose bound with the segment's largest weight norm alone
 * leaves an int32 chain: each costs a fold per pair in every tile that reads it (0: every
 * segment fits a chain of its own). */
static int64_t fwd_segments_over(const uint32_t *rn, int64_t nrows, const uint32_t *wn,
                                 int64_t nwrows, int64_t G)
{
    int64_t over = 0;
    for (int64_t s = 0; s < G; s++) {
        uint32_t wmax = 0;
        for (int64_t i = 0; i < nwrows; i++) wmax = wn[i * G + s] > wmax ? wn[i * G + s] : wmax;
        for (int64_t i = 0; i < nrows; i++) over += (int64_t)rn[i * G + s] * wmax > FX_I16_CHAIN_LIMIT;
    }
    return over;
}

/* the admission of a chunk with `over` such pairs of nrows * G, at most `allowed` */
static int fwd_admit_over(int64_t over, int64_t allowed)
{
    if (over > allowed) {
        atomic_fetch_add_explicit(&direct_declined, 1, memory_order_relaxed);
        return 0;
    }
    if (over) atomic_fetch_add_explicit(&direct_paired, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&direct_calls, 1, memory_order_relaxed);
    return 1;
}

int fx_i16_fwd_admit(const uint32_t *rn, int64_t nrows, const uint32_t *wn, int64_t nwrows,
                     int64_t G)
{
    return fwd_admit_over(fwd_segments_over(rn, nrows, wn, nwrows, G), 0);
}

int fx_i16_fwd_admit_any(const uint32_t *rn, int64_t nrows, const uint32_t *wn, int64_t nwrows,
                         int64_t G)
{
    return fwd_admit_over(fwd_segments_over(rn, nrows, wn, nwrows, G),
                          nrows * G / FX_I16_PAIRED_MAX_SHARE);
}

void fx_i16_fwd_offsets(const struct fx_conv_geom *g, int64_t *xoff)
{
    const int64_t G = fx_i16_groups(g->C), Cpp = fx_i16_pairs(g->C), Wp = g->W + 2 * g->pw;
    for (int64_t t = 0; t < g->KH * g->KW; t++)
        for (int64_t s = 0; s < G; s++)
            xoff[t * G + s] = ((t / g->KW) * Wp + t % g->KW) * Cpp + s * FX_I16_SEG_PAIRS;
}

void fx_i16_fwd_copy_image(const struct fx_conv_geom *g, const int16_t *img, uint32_t *xq,
                           uint32_t *rn)
{
    const int64_t C = g->C, Cp = (C + 1) / 2, Cpp = fx_i16_pairs(C), G = fx_i16_groups(C);
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, HW = Hp * Wp;
    const uint16_t *x = (const uint16_t *)(const void *)img;
    /* channel pair by channel pair: each reads two planes in order and writes one word per
     * pixel, Cpp words apart */
    for (int64_t cp = 0; cp < Cp; cp++) {
        const uint16_t *e = x + 2 * cp * HW, *d = 2 * cp + 1 < C ? e + HW : NULL;
        for (int64_t p = 0; p < HW; p++)
            xq[p * Cpp + cp] = (uint32_t)e[p] | (d ? (uint32_t)d[p] << 16 : 0u);
    }
    for (int64_t cp = Cp; cp < Cpp; cp++)
        for (int64_t p = 0; p < HW; p++) xq[p * Cpp + cp] = 0;
    for (int64_t ih = 0; ih < Hp; ih++)
        for (int64_t s = 0; s < G; s++)
            rn[ih * G + s] = (uint32_t)fx_ceil_sqrt(fx_i16_copy_row_squares_max(xq + ih * Wp * Cpp,
                                                                                Wp, Cpp, s));
}

int64_t fx_i16_copy_row_squares_max(const uint32_t *row, int64_t Wp, int64_t Cpp, int64_t s)
{
    /* a pair word's x0^2 + x1^2 <= 2^31 and a segment's four at most 2^33: int64 sums */
    int64_t m = 0;
    for (int64_t iw = 0; iw < Wp; iw++) {
        const uint32_t *q = row + iw * Cpp + s * FX_I16_SEG_PAIRS;
        int64_t sq = 0;
        for (int j = 0; j < FX_I16_SEG_PAIRS; j++) {
            const int64_t lo = (int16_t)(q[j] & 0xFFFF), hi = (int16_t)(q[j] >> 16);
            sq += lo * lo + hi * hi;
        }
        m = sq > m ? sq : m;
    }
    return m;
}

static atomic_int round_enabled = 1;
static atomic_llong round_calls, round_whole;

void fx_i16_fwd_direct_round_set_enabled(int on) { atomic_store(&round_enabled, on != 0); }
int fx_i16_fwd_direct_round_enabled(void) { return atomic_load(&round_enabled); }
long long fx_i16_fwd_direct_round_calls(void) { return atomic_load(&round_calls); }
long long fx_i16_fwd_direct_round_whole(void) { return atomic_load(&round_whole); }

void fx_i16_fwd_round_count(int whole)
{
    atomic_fetch_add_explicit(&round_calls, 1, memory_order_relaxed);
    if (whole) atomic_fetch_add_explicit(&round_whole, 1, memory_order_relaxed);
}

void fx_i16_round_stats_broken(fx_qstats *st, uint64_t max_in)
{
    st->saturated = 1;
    st->nonfinite = 0;
    st->underflow = 0;
    st->max_abs_in = (double)max_in;
    st->max_abs_out = FX_MANT_MAX;
}

int fx_i16_round_still_whole(int whole, uint64_t max_in, int shift, int two, int shift2)
{
    if (max_in > fx_q64_fast_bound(shift)) whole &= ~FX_I16_ROUND_FIRST;
    if (two && max_in > fx_q64_fast_bound(shift2)) whole &= ~FX_I16_ROUND_SECOND;
    return whole;
}

void fx_i16_round_stats(fx_qstats *st, int whole, uint64_t max_in, int64_t nuf, int shift)
{
    if (whole)
        fx_q64_fast_stats_of(st, max_in, nuf, shift);
    else
        fx_i16_round_stats_broken(st, max_in);
}

void fx_i16_round_mark_broken_images(int whole, int two, int64_t done, fx_qstats *part,
                                     fx_qstats *part2)
{
    for (int64_t j = 0; j < done; j++) {
        if (!(whole & FX_I16_ROUND_FIRST))
            fx_i16_round_stats_broken(&part[j], (uint64_t)part[j].max_abs_in);
        if (two && !(whole & FX_I16_ROUND_SECOND))
            fx_i16_round_stats_broken(&part2[j], (uint64_t)part2[j].max_abs_in);
    }
}

int fx_i16_dgrad_s2_finish(const fx_i16_dgrad_s2 *d, int whole, int two,
                           const fx_i16_round_sums *sums, int16_t *const q[4],
                           int16_t *const q2[4], int64_t nbc, fx_qstats *part,
                           fx_qstats *part2, int16_t *dx, int16_t *dx2,
                           fx_i16_s2_interleave_fn interleave)
{
    if (!whole) return 0;
    fx_i16_round_stats(part, whole & FX_I16_ROUND_FIRST, sums->max_in, sums->nuf, sums->shift);
    if (whole & FX_I16_ROUND_FIRST)
        interleave(q, nbc, d->dx_C, d->dx_H, d->dx_W, d->dx_ph, d->dx_pw, dx);
    if (!two) return whole;
    fx_i16_round_stats(part2, whole & FX_I16_ROUND_SECOND, sums->max_in, sums->nuf2,
                       sums->shift2);
    if (whole & FX_I16_ROUND_SECOND)
        interleave(q2, nbc, d->dx_C, d->dx_H, d->dx_W, d->dx_ph, d->dx_pw, dx2);
    return whole;
}

int64_t fx_i16_dgrad_s2_scratch(int64_t kernel_scratch, int64_t nb, int64_t dx_chw, int two)
{
    /* four quarter-size windows of int16 (two sets with two roundings), 64 words of alignment */
    return kernel_scratch + (two ? 2 : 1) * nb * dx_chw / 2 + 64;
}

void fx_i16_dgrad_s2_windows(uint32_t *scratch, int64_t kernel_scratch, const fx_i16_dgrad_s2 *d,
                             int64_t nbc, int two, int16_t *q[4], int16_t *q2[4])
{
    const int64_t quarter = nbc * d->dx_C * d->dx_H * d->dx_W / 4;
    int16_t *win = (int16_t *)(void *)(scratch + kernel_scratch);
    win += (32 - ((uintptr_t)win / 2) % 32) % 32; /* 64-byte aligned */
    int64_t live = 0;
    for (int k = 0; k < 4; k++) {
        q[k] = q2[k] = NULL;
        if (!d->wq[k]) continue;
        q[k] = win + (two ? 2 : 1) * live * quarter;
        if (two) q2[k] = q[k] + quarter;
        live++;
    }
}
