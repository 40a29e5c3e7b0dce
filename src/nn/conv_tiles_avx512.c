/* The AMX integer GEMM's A tiles built straight from a convolution's input (fx_op_call.a_tiles,
 * conv_panels.h "AMX tiles from byte planes").
 *
 * Why: from rows on demand, the kernel first gathers each row's int16 taps into a staging row
 * and then splits them into its byte tiles, a second pass over every value of every patch row
 * (a quarter of a flex16_5 forward or input gradient on AMX). Here the chunk's channel-last
 * input is split into its high- and low-byte planes once (fx_conv_byte_planes_avx512: every
 * input value once, where each is read KH*KW times by the patch rows), and each 64-byte tile
 * row is then made of at most a few masked byte loads, one per run of consecutive taps it
 * meets (KW*C values per kernel row with dw = 1, else C), straight into its place.
 *
 * The tiles hold the same bytes the kernel's own packing makes of the rows of a_rows (the
 * high byte of an int16 is its arithmetic >> 8, truncated), so the exact sums are the same. */
#include "conv_panels.h"

#include <immintrin.h>
#include <string.h>

enum { KT = 64, TILE_BYTES = 1024, PAIR_BYTES = 2 * TILE_BYTES };

void fx_conv_byte_planes_avx512(const int16_t *x, int64_t n, int8_t *hi, int8_t *lo)
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512i v = _mm512_loadu_si512((const void *)(x + i));
        _mm256_storeu_si256((void *)(hi + i), _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
        _mm256_storeu_si256((void *)(lo + i), _mm512_cvtepi16_epi8(v));
    }
    if (i < n) { /* the last n - i < 32 values, masked: nothing past them read or written */
        const __mmask32 m = (__mmask32)((1u << (n - i)) - 1u);
        const __m512i v = _mm512_maskz_loadu_epi16(m, x + i);
        _mm256_mask_storeu_epi8(hi + i, m, _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
        _mm256_mask_storeu_epi8(lo + i, m, _mm512_cvtepi16_epi8(v));
    }
}

/* Tile t's 16 rows (hi plane at th, lo plane TILE_BYTES after it) from the byte planes: row
 * r < m is one masked load per run and plane at rowoff[r] + roff[q], rows from m on are zero. */
static inline void tile_rows_from_runs(int8_t *th, const int8_t *hi, const int8_t *lo,
                                       const int64_t *rowoff, int m, const __mmask64 *rmask,
                                       const int64_t *roff, int nr)
{
    int8_t *tl = th + TILE_BYTES;
    for (int r = 0; r < 16; r++) {
        __m512i vh = _mm512_setzero_si512(), vl = _mm512_setzero_si512();
        if (r < m)
            for (int q = 0; q < nr; q++) {
                vh = _mm512_mask_loadu_epi8(vh, rmask[q], hi + rowoff[r] + roff[q]);
                vl = _mm512_mask_loadu_epi8(vl, rmask[q], lo + rowoff[r] + roff[q]);
            }
        _mm512_storeu_si512((void *)(th + r * KT), vh);
        _mm512_storeu_si512((void *)(tl + r * KT), vl);
    }
}

/* The runs of consecutive taps that the n (1..64) values of the walk from its position meet,
 * as a byte mask of the tile row and a source offset from the pixel's base each (the row's
 * byte pos reads plane[base + off]): the same for every row, whose pixels differ only in
 * their base. A masked load reads only its unmasked bytes, and the planes have
 * FX_CONV_TILES_SLACK bytes of room on both sides, so even the addresses below a run's start
 * that the shifted masks imply stay inside the allocation. Returns the number of runs. */
static inline int walk_runs(const fx_conv_geom *g, int64_t n, fx_row_walk *w, __mmask64 *rmask,
                            int64_t *roff)
{
    int nr = 0;
    for (int64_t pos = 0; pos < n; nr++) {
        if (w->left == 0) fx_row_walk_next_run(g, w);
        const int64_t len = w->left < n - pos ? w->left : n - pos;
        rmask[nr] = (len >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << len) - 1)) << pos;
        roff[nr] = w->off - pos;
        w->off += len;
        w->left -= len;
        pos += len;
    }
    return nr;
}

/* Per 64-value tile, the runs it meets are found once (walk_runs), and each of the 16 rows is
 * then one masked load per run and plane at its pixel's base: the walk itself is the same for
 * every row, so it is not repeated per row. */
void fx_conv_tiles_i16_avx512(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc,
                              int8_t *ap)
{
    const fx_conv_tiles *ct = ctx;
    const fx_conv_geom *g = ct->g;
    const int64_t C = g->C, Wp = g->W + 2 * g->pw, Hp = g->H + 2 * g->ph, P = g->OH * g->OW;
    const int64_t nt = (kc + KT - 1) / KT, k1 = k0 + kc;
    int64_t base[16];
    int64_t n = i0 / P, p = i0 % P, oh = p / g->OW, ow = p % g->OW;
    for (int r = 0; r < m; r++) {
        base[r] = ((n * Hp + oh * g->sh) * Wp + ow * g->sw) * C;
        if (++ow == g->OW) {
            ow = 0;
            if (++oh == g->OH) {
                oh = 0;
                n++;
            }
        }
    }
    fx_row_walk w;
    fx_row_walk_start(g, k0, &w);
    for (int64_t t = 0; t < nt; t++) {
        const int64_t kb = k0 + t * KT, len = k1 - kb < KT ? k1 - kb : KT;
        __mmask64 rmask[KT];
        int64_t roff[KT];
        const int nr = walk_runs(g, len, &w, rmask, roff);
        tile_rows_from_runs(ap + t * PAIR_BYTES, ct->hi, ct->lo, base, m, rmask, roff, nr);
    }
}

/* The weight gradient's tiles (conv_panels.h, "weight-gradient rows and tiles"): per 64-value
 * tile, the pixel runs it meets are found once, as a byte mask and a source offset each, and
 * every one of the 16 rows is then one masked load per run and plane at its tap's offset. */
void fx_conv_wtiles_i16_avx512(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc,
                               int8_t *ap)
{
    const fx_conv_wsrc *ws = ctx;
    const fx_conv_geom *g = ws->g;
    const int64_t nt = (kc + KT - 1) / KT;
    int64_t tap[16];
    for (int r = 0; r < m; r++) tap[r] = fx_conv_wtap_offset(g, i0 + r);
    fx_pixel_run_walk w;
    fx_pixel_run_start(g, k0, &w);
    for (int64_t t = 0; t < nt; t++) {
        const int64_t n = kc - t * KT < KT ? kc - t * KT : KT;
        int64_t roff[KT];
        __mmask64 rmask[KT];
        int nr = 0;
        for (int64_t pos = 0; pos < n; nr++) {
            if (w.left == 0) fx_pixel_run_next(g, &w);
            const int64_t len = w.left < n - pos ? w.left : n - pos;
            rmask[nr] = (len >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << len) - 1)) << pos;
            roff[nr] = w.off - pos; /* byte pos of the tile row reads plane[tap + off] */
            w.off += len;
            w.left -= len;
            pos += len;
        }
        tile_rows_from_runs(ap + t * PAIR_BYTES, ws->hi, ws->lo, tap, m, rmask, roff, nr);
    }
}
