/* The output blocks of the AMX convolutions that read their A tiles in place (the int16
 * forward kernel, src/flex/conv_i16_amx.c, and the bf16 one, src/bf16/bf16_conv_amx.c): 16
 * output pixels a block, the M rows of a tile.
 *
 * A row block holds 16 pixels of one output row (a row's last block computes past its end into
 * pixels that are not stored). A span block holds 16 consecutive positions of the padded
 * input's grid, v = oh Wp + ow with ow < Wp (Wp the padded width): at stride 1 the input a tap
 * (kh, kw) meets at position v is v + kh Wp + kw pixels into the image's padded plane, so the
 * tile rows stay one pixel apart across output rows, and the positions whose ow is OW or more
 * (the KW - 1 columns past each row's end) are computed and dropped. The stored positions of a
 * span block are consecutive pixels of the output (a row's end is followed by the next row's
 * start).
 *
 * Why: on ResNet-20's 8 x 8 layers a row block stored 8 of its 16 pixels, so half of every
 * tile product was thrown away; span blocks keep 64 of every 80 (an image takes 5 blocks, not
 * 8). They are taken where they make fewer blocks than rows do, for a whole stride-1 output
 * (not a window of one: the strided input gradient's phases keep row blocks). The last span
 * block of a chunk reads at most 15 positions past the last image's padded plane (its last
 * stored position, (OH - 1) Wp + OW - 1, is within 15 of the block's end), which the kernels'
 * slack of 16 + KW pixels covers. */
#ifndef FX_NN_CONV_TILE_BLOCKS_H
#define FX_NN_CONV_TILE_BLOCKS_H

#include "im2col.h" /* fx_conv_geom */

#include <stdint.h>
#include <string.h>

/* Whether g's whole output takes span blocks */
static inline int fx_tile_span_blocks(const fx_conv_geom *g)
{
    const int64_t Wp = g->W + 2 * g->pw, Hp = g->H + 2 * g->ph;
    if (g->sh != 1 || g->sw != 1 || g->dh != 1 || g->dw != 1 || g->OW != Wp - g->KW + 1 ||
        g->OH != Hp - g->KH + 1)
        return 0;
    const int64_t spans = ((g->OH - 1) * Wp + g->OW + 15) / 16;
    return spans < g->OH * ((g->OW + 15) / 16);
}

/* Blocks of one image, in span blocks or row blocks */
static inline int64_t fx_tile_blocks_per_image(const fx_conv_geom *g, int span)
{
    const int64_t Wp = g->W + 2 * g->pw;
    return span ? ((g->OH - 1) * Wp + g->OW + 15) / 16 : g->OH * ((g->OW + 15) / 16);
}

/* Whether at least three quarters of the tile rows g's blocks compute are stored outputs */
static inline int fx_tile_blocks_full(const fx_conv_geom *g)
{
    return 4 * g->OH * g->OW >= 3 * 16 * fx_tile_blocks_per_image(g, fx_tile_span_blocks(g));
}

/* Block b of a chunk (row blocks or span blocks): its image, and the position in that image's
 * padded plane, in pixels, of its first row's first tap (for row blocks of a window of the
 * output, (oy0, ox0) its first output: the strided input gradient's phases) */
static inline int64_t fx_tile_block_origin(const fx_conv_geom *g, int64_t oy0, int64_t ox0,
                                           int span, int64_t b, int64_t *im)
{
    const int64_t Wp = g->W + 2 * g->pw;
    if (span) {
        const int64_t per = fx_tile_blocks_per_image(g, 1);
        *im = b / per;
        return (b % per) * 16;
    }
    const int64_t nblk = (g->OW + 15) / 16, row = b / nblk, ow0 = (b % nblk) * 16;
    *im = row / g->OH;
    return (row % g->OH + oy0) * g->sh * Wp + (ow0 + ox0) * g->sw;
}

/* Block b's stored outputs: its image, the tile rows that are outputs (bit p: row p), their
 * count, the first one's output pixel (oh OW + ow; 0 when none), and in rows[t] the tile row of
 * the t-th, whose pixels are consecutive in the output (row blocks: rows in order) */
typedef struct fx_tile_rows {
    int64_t im, q0;
    uint32_t stored;
    int n;
    int16_t rows[16];
} fx_tile_rows;

static inline void fx_tile_block_rows(const fx_conv_geom *g, int span, int64_t b,
                                      fx_tile_rows *s)
{
    static const int16_t in_order[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    if (!span) { /* the first min(16, OW - ow0) rows, in order: no walk (kernels ask per block) */
        const int64_t nblk = (g->OW + 15) / 16, row = b / nblk, ow0 = (b % nblk) * 16;
        s->im = row / g->OH;
        s->n = g->OW - ow0 < 16 ? (int)(g->OW - ow0) : 16;
        s->stored = s->n == 16 ? 0xFFFFu : (1u << s->n) - 1u;
        s->q0 = (row % g->OH) * g->OW + ow0;
        memcpy(s->rows, in_order, sizeof in_order);
        return;
    }
    const int64_t Wp = g->W + 2 * g->pw, per = fx_tile_blocks_per_image(g, 1);
    const int64_t v0 = 16 * (b % per);
    int64_t oh = v0 / Wp, ow = v0 % Wp;
    s->im = b / per;
    s->stored = 0;
    s->n = 0;
    s->q0 = -1;
    for (int p = 0; p < 16; p++) {
        s->rows[p] = 0;
        if (ow < g->OW && oh < g->OH) {
            if (s->q0 < 0) s->q0 = oh * g->OW + ow;
            s->stored |= 1u << p;
            s->rows[s->n++] = (int16_t)p;
        }
        if (++ow == Wp) ow = 0, oh++;
    }
    if (s->q0 < 0) s->q0 = 0;
}

#endif
