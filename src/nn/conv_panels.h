/* Implicit-GEMM packing for the integer convolution: the exact int16 GEMM's A micro-panels
 * built straight from the zero-padded input, instead of writing the patch matrix (im2row) and
 * then packing it.
 *
 * Why: with the patch matrix in between, every int16 tap is stored twice and loaded twice, and
 * im2row moves C*KH runs of KW taps per pixel one by one (10 % of a flex16_5 CNN epoch, plus
 * 7 % for packing). Here, for a panel of mr output pixels, every tap of one kernel row is a
 * fixed offset from a per-pixel base, so two kernel rows (KW pairs of K when KW is odd, as
 * pairs then straddle rows) become one two-source word permute of two 32-element loads.
 *
 * Layout (gemm_i16.h, "A micro-panel" over the whole K): the chunk's Pc pixels are cut into
 * panels of mr rows; panel q occupies ap[q*kp*mr .. (q+1)*kp*mr) int32 with kp = ceil(K/2),
 * K = C*KH*KW, and ap[q*kp*mr + p*mr + i] = (A[q*mr+i][2p], A[q*mr+i][2p+1]) as low/high
 * halves, A[m][k] being the tap k = (c*KH + kh)*KW + kw of pixel m (im2col.h); rows past Pc
 * and the odd K's last high half are 0. The values are the im2row values, so the GEMM's exact
 * sums, and every result, are unchanged bit for bit.
 *
 * The padded chunk xp must hold FX_CONV_PANEL_SLACK initialised elements past its end (the
 * vector loads read up to 31 elements past the last tap they use). */
#ifndef FX_NN_CONV_PANELS_H
#define FX_NN_CONV_PANELS_H

#include "im2col.h"

#include <stdlib.h>

#define FX_CONV_PANEL_SLACK 32

/* Whether the AVX-512 builder handles g for tile height mr (otherwise im2row + packing). */
static inline int fx_conv_panels_fit(const fx_conv_geom *g, int mr)
{
    return mr == 6 && g->KW >= 1 && g->KW <= 10 && (g->KW - 1) * g->dw <= 31;
}

/* Elements (int32) of the panels of a chunk of nb samples for register-tile height mr. */
int64_t fx_conv_panels_numel(const fx_conv_geom *g, int64_t nb, int mr);

/* Portable definition: every panel of the chunk, element by element. */
void fx_conv_panels_i16(const fx_conv_geom *g, const int16_t *xp, int64_t nb, int mr,
                        int32_t *ap);

/* One panel q (the portable loop; the vector builder uses it for irregular panels). */
void fx_conv_panel_i16(const fx_conv_geom *g, const int16_t *xp, int64_t nb, int mr, int64_t q,
                       int32_t *ap);

/* AVX-512BW builder for mr = 6 within fx_conv_panels_fit (conv_panels_avx512.c): the same
 * int32 values, two kernel rows gathered by one word permute. Returns 0 (nothing written) for
 * a geometry outside what it handles, or when out of memory. Reached through
 * fx_backend.conv.panels_i16, set only on CPUs that run it. */
int fx_conv_panels_i16_avx512(const fx_conv_geom *g, const int16_t *xp, int64_t nb, int mr,
                              int32_t *ap);

/* ---- patch rows on demand (fx_op_call.a_rows) --------------------------------------------------
 * For integer GEMMs that gather A rows themselves (fx_backend.gemm.i16_row_source): the rows
 * of the patch matrix (the im2row values, so the same exact sums) for one register tile and
 * one K block at a time, into the GEMM's L1 buffer, where its own packing (with the segment
 * norms) takes them. Nothing of the size of the patch matrix is written. Each kernel row is
 * one 16- or 32-byte move when dw = 1 and KW <= 16 (overrunning into the next run's slots and
 * the buffer's slack, which fx_op_call.a_rows allows; fx_conv_patch_taps); other geometries
 * go tap by tap. The padded chunk xp must hold FX_CONV_PANEL_SLACK initialised elements past
 * its end. */
typedef struct fx_conv_rows {
    const fx_conv_geom *g;
    const int16_t *xp;   /* the padded chunk (fx_conv_pad), or with nhwc its fx_conv_nhwc */
    const int64_t *goff; /* fx_group_offsets_fill(g, goff); unused with nhwc */
    int nhwc;            /* 1: xp is channel-last and the taps are in fx_conv_nhwc's order */
} fx_conv_rows;

/* ---- channel-last patch rows (integer compute) -------------------------------------------------
 * Why: in the padded NCHW chunk a patch row is C*KH runs of KW taps (10 bytes each for the
 * CNN's 5 x 5 kernels), one move per run, which dominated the integer convolutions' packing
 * (16-24 % of a flex16_5 forward or input gradient on AMX). Channel-last, the taps of one
 * kernel row of one pixel, all kw and c, are KW*C consecutive values (with dw = 1): the row is
 * KH copies of KW*C values (320-640 bytes in the CNN). The taps then come in the order
 *     k' = (kh*KW + kw)*C + c
 * instead of k = (c*KH + kh)*KW + kw, and the weights are permuted to match
 * (fx_conv_weights_nhwc); every product is the same, and integer sums are exact, so the
 * results are the same bits. Float compute keeps the NCHW order (its sums' order is part of
 * its bits).
 * fx_conv_nhwc: the padded chunk xp ([nb][C][Hp][Wp], fx_conv_pad) channel-last into xq
 * ([nb][Hp][Wp][C]), one transpose per sample.
 * fx_conv_weights_nhwc: wq[o][k'] = w[o][k] for O rows of C*KH*KW values. */
void fx_conv_nhwc(const fx_conv_geom *g, const int16_t *xp, int64_t nb, int16_t *xq);
void fx_conv_weights_nhwc(const fx_conv_geom *g, const int16_t *w, int16_t *wq);

/* A walk along one pixel's channel-last patch row (order k') from its k0-th value: the run it
 * is in (KW*C taps of one kernel row with dw = 1, else C taps of one kernel position), the
 * current value's offset from the pixel's base in the channel-last chunk, and the values left
 * in the run. Shared by the row source and the AMX tile builder, which take a row's values one
 * run piece at a time. */
typedef struct fx_row_walk {
    int64_t run, left; /* values per run; values left in the current run */
    int64_t off;       /* the current value's offset from the pixel's base */
    int64_t kh, kw;    /* the current run's kernel row and (dw > 1) column */
} fx_row_walk;

static inline void fx_row_walk_start(const fx_conv_geom *g, int64_t k0, fx_row_walk *w)
{
    const int64_t C = g->C, Wp = g->W + 2 * g->pw;
    w->run = g->dw == 1 ? g->KW * C : C;
    const int64_t j = k0 / w->run, in_run = k0 - j * w->run;
    w->kh = g->dw == 1 ? j : j / g->KW;
    w->kw = g->dw == 1 ? 0 : j % g->KW;
    w->off = (w->kh * g->dh * Wp + w->kw * g->dw) * C + in_run;
    w->left = w->run - in_run;
}

static inline void fx_row_walk_next_run(const fx_conv_geom *g, fx_row_walk *w)
{
    const int64_t C = g->C, Wp = g->W + 2 * g->pw;
    if (g->dw != 1 && ++w->kw < g->KW) {
        w->off = (w->kh * g->dh * Wp + w->kw * g->dw) * C;
    } else {
        w->kw = 0;
        w->off = ++w->kh * g->dh * Wp * C;
    }
    w->left = w->run;
}

/* ---- AMX tiles from byte planes (fx_op_call.a_tiles, src/nn/conv_tiles_avx512.c) --------------
 * The channel-last chunk split into its high-byte plane (v >> 8) and low-byte plane (v & 255),
 * each [nb][Hp][Wp][C] bytes with FX_CONV_TILES_SLACK bytes of room before and after (the
 * masked loads of a tile row may address, without reading, up to 63 bytes before a run);
 * fx_conv_tiles_i16_avx512 writes the AMX kernel's packed tiles of rows i0 .. i0 + m - 1 and
 * values k0 .. k0 + kc - 1 (order k') from them. Reached through fx_backend.conv.tiles_i16 and
 * .byte_planes_i16, set only where the AMX integer kernel is installed. */
#define FX_CONV_TILES_SLACK 64
typedef struct fx_conv_tiles {
    const fx_conv_geom *g;
    const int8_t *hi, *lo;
} fx_conv_tiles;
void fx_conv_byte_planes_avx512(const int16_t *x, int64_t n, int8_t *hi, int8_t *lo);
void fx_conv_tiles_i16_avx512(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc,
                              int8_t *ap);

void fx_conv_rows_i16(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int16_t *dst,
                      int64_t ld);

/* ---- weight-gradient rows and tiles (stride sw = 1) --------------------------------------------
 * The weight gradient of a chunk is dW^T[K, O] = A[K, Pc] x dY^T[Pc, O] with A the transposed
 * patch matrix: row i is tap i = (c*KH + kh)*KW + kw, its values that tap of every pixel of
 * the chunk in order (the im2col matrix). With sw = 1 the pixels of one output row read OW
 * consecutive values of one row of the padded NCHW chunk, so a row of A is runs of (at most)
 * OW values, at an offset that is the tap's (fx_conv_wtap_offset) plus the run's, and the runs
 * are the same for every tap.
 * Why: writing that matrix (im2col) and then packing it for the AMX kernel moved every value
 * twice more than the product needs (a third of a flex16_5 weight gradient on AMX). Here the
 * rows come on demand (fx_conv_wrows_i16, the portable source every integer GEMM can take)
 * or, on the AMX kernel, its packed tiles straight from byte planes of the padded chunk
 * (fx_conv_wtiles_i16_avx512: per 64-value tile, one masked byte load per run and plane).
 * The values are im2col's, so the exact sums, and the result, are the same bits.
 * xp: the padded chunk [nb][C][Hp][Wp] (fx_conv_pad); hi, lo: its byte planes with
 * FX_CONV_TILES_SLACK bytes of room on both sides, or NULL where no tiles are made. */
typedef struct fx_conv_wsrc {
    const fx_conv_geom *g;
    const int16_t *xp;
    const int8_t *hi, *lo;
} fx_conv_wsrc;

/* Whether the weight gradient of g can take its A rows from fx_conv_wsrc. */
static inline int fx_conv_wsrc_fit(const fx_conv_geom *g) { return g->sw == 1; }

/* Offset of tap i's first value (pixel 0) in the padded chunk. */
static inline int64_t fx_conv_wtap_offset(const fx_conv_geom *g, int64_t i)
{
    const int64_t Wp = g->W + 2 * g->pw, Hp = g->H + 2 * g->ph;
    const int64_t kw = i % g->KW, kh = i / g->KW % g->KH, c = i / (g->KW * g->KH);
    return (c * Hp + kh * g->dh) * Wp + kw * g->dw;
}

/* A walk along the chunk's pixels from the k0-th: the current pixel's offset from the tap's
 * first value, and the pixels left in its output row. */
typedef struct fx_pixel_run_walk {
    int64_t n, oh, off, left;
} fx_pixel_run_walk;

static inline void fx_pixel_run_set(const fx_conv_geom *g, fx_pixel_run_walk *w, int64_t ow)
{
    const int64_t Wp = g->W + 2 * g->pw, Hp = g->H + 2 * g->ph;
    w->off = (w->n * g->C * Hp + w->oh * g->sh) * Wp + ow;
    w->left = g->OW - ow;
}

static inline void fx_pixel_run_start(const fx_conv_geom *g, int64_t k0, fx_pixel_run_walk *w)
{
    const int64_t P = g->OH * g->OW, p = k0 % P;
    w->n = k0 / P;
    w->oh = p / g->OW;
    fx_pixel_run_set(g, w, p % g->OW);
}

static inline void fx_pixel_run_next(const fx_conv_geom *g, fx_pixel_run_walk *w)
{
    if (++w->oh == g->OH) {
        w->oh = 0;
        w->n++;
    }
    fx_pixel_run_set(g, w, 0);
}

void fx_conv_wrows_i16(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int16_t *dst,
                       int64_t ld);
void fx_conv_wtiles_i16_avx512(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc,
                               int8_t *ap);

/* Taps k0 .. k0 + kc - 1 of one output pixel (src: the pixel's base in the padded input, goff:
 * fx_group_offsets_fill) into dst[0 .. kc), elements of esz bytes (2 or 4). It may write
 * anything to the FX_CONV_TAPS_SLACK_BYTES bytes on either side of dst[0 .. kc), and reads
 * at most 15 bytes past the last tap of a kernel row (within the padded chunk's slack). */
#define FX_CONV_TAPS_SLACK_BYTES 32
void fx_conv_patch_taps(const fx_conv_geom *g, const void *src, const int64_t *goff, int64_t k0,
                        int64_t kc, size_t esz, void *dst);

/* ---- fp32 GEMM panels (fp32, fp16 and bf16 inputs) -------------------------------------------
 * The fp32 GEMM's A micro-panels over the whole K (src/fp32/f32_gemm.c): panel q at
 * ap + q*K*mr, ap[q*K*mr + k*mr + i] = A[q*mr+i][k] widened exactly to fp32 (the same values
 * the GEMM's packing makes of the im2row matrix, so the same products in the same order: the
 * same bits), rows past Pc 0. fmt is the input's storage format (FP32, FP16 or BF16). */
static inline int fx_conv_panels_f32_fit(const fx_conv_geom *g, int mr)
{
    return (mr == 12 || mr == 6) && g->KW >= 1 && (g->KW - 1) * g->dw <= 31;
}
int64_t fx_conv_panels_f32_numel(const fx_conv_geom *g, int64_t nb, int mr);
void fx_conv_panels_f32(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb, int mr,
                        float *ap);
/* AVX-512 builder for mr = 12 (the AVX-512 fp32 tile), AVX2 builder for mr = 6 (the AVX2
 * tile); 0 (nothing written) for another mr, outside fx_conv_panels_f32_fit, or when out of
 * memory. Reached through fx_backend.conv.panels_f32. */
int fx_conv_panels_f32_avx512(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb,
                              int mr, float *ap);
int fx_conv_panels_f32_avx2(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb, int mr,
                            float *ap);

/* ---- fp32 GEMM panels of the weight gradient (fp32, fp16 and bf16 inputs) ----------------------
 * The weight gradient's product is dW^T = A B with A = the patch matrix [K, Pc] (row k: tap
 * k = (c*KH + kh)*KW + kw, column m: pixel m of the chunk, im2col.h) and B = dy^T. Its A
 * micro-panels over the whole depth Pc, ap[q*Pc*mr + m*mr + i] = A[q*mr + i][m] widened exactly
 * to fp32, rows past K 0, are the values the GEMM's packing makes of the patch matrix: the same
 * products in the same order, the same bits. Built straight from the padded chunk, they spare
 * the patch matrix's write and read and the packing's transposes from it (the fp32 weight
 * gradient of ResNet-20's stage-1 layers spent a fifth of its time in im2col and a fifth in
 * that packing on a Zen 3).
 * With sw = 1, a tap's values for consecutive pixels of one output row are consecutive in the
 * padded input, and with OW >= 8 a block of 8 pixels spans at most two rows: 8 x 8 blocks then
 * go through registers, a block that continues on the next row as two loads blended.
 * From 16 output channels (the AVX2 tile's 16 columns): with fewer, the GEMM would rather
 * compute the transposed product, which pre-packed A panels rule out, and would run every
 * tile as a partial one through a scratch tile. */
#define FX_CONV_WPANELS_MIN_O 16
static inline int fx_conv_wpanels_f32_fit(const fx_conv_geom *g)
{
    return g->sw == 1 && g->OW >= 8 && g->O >= FX_CONV_WPANELS_MIN_O;
}
int64_t fx_conv_wpanels_f32_numel(const fx_conv_geom *g, int64_t nb, int mr);
/* AVX2 builder for mr = 6 and AVX-512 builder for mr = 12 (fx_backend.conv.wpanels_f32): 1,
 * or 0 (nothing written) for another mr, outside fx_conv_wpanels_f32_fit, another format, or
 * when out of memory. */
int fx_conv_wpanels_f32_avx2(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb, int mr,
                             float *ap);
int fx_conv_wpanels_f32_avx512(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb,
                               int mr, float *ap);
/* What both builders share: the chunk's 8-pixel blocks and each panel's tap offsets, handed
 * panel by panel to the level's block packer `pack` (mr rows; fx_f32_pack_blocks_fn); 1, or 0
 * (nothing written) outside fx_conv_wpanels_f32_fit, another format, or when out of memory. */
struct fx_f32_block;
int fx_conv_wpanels_f32_build(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb, int mr,
                              void (*pack)(float *dst, const void *src, int fmt,
                                           const int64_t *row_off, int rows,
                                           const struct fx_f32_block *blk, int64_t ncols),
                              float *ap);
/* Test hooks: 0 sends every weight gradient to the patch matrix; chunks built, counted. */
void fx_conv_wpanels_set_enabled(int on);
int fx_conv_wpanels_enabled(void);
long long fx_conv_wpanels_chunks(void);
void fx_conv_wpanels_count(void);

/* ---- shared by the vector builders ------------------------------------------------------------ */

/* Output pixels in order, as (sample, row, column) counters: the padded-input offsets of the
 * next `rows` pixels, without a division per pixel. */
typedef struct fx_pixel_cursor {
    const fx_conv_geom *g;
    int64_t n, oh, ow, nstep, hstep;
} fx_pixel_cursor;

static inline fx_pixel_cursor fx_cursor_start(const fx_conv_geom *g)
{
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;
    return (fx_pixel_cursor){g, 0, 0, 0, g->C * Hp * Wp, g->sh * Wp};
}

static inline void fx_cursor_next(fx_pixel_cursor *c, int rows, int64_t *base)
{
    for (int r = 0; r < rows; r++) {
        base[r] = c->n * c->nstep + c->oh * c->hstep + c->ow * c->g->sw;
        if (++c->ow == c->g->OW) {
            c->ow = 0;
            if (++c->oh == c->g->OH) {
                c->oh = 0;
                c->n++;
            }
        }
    }
}

/* Offset of each kernel row ("group" gi = c*KH + kh) in the padded input, relative to a
 * pixel's base, into goff[C*KH]; fx_group_offsets mallocs the array (the caller frees it) and
 * returns NULL when out of memory (the vector builders then decline, leaving the work to the
 * portable one). */
static inline void fx_group_offsets_fill(const fx_conv_geom *g, int64_t *goff)
{
    const int64_t G = g->C * g->KH, Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;
    for (int64_t gi = 0; gi < G; gi++) goff[gi] = ((gi / g->KH) * Hp + (gi % g->KH) * g->dh) * Wp;
}

static inline int64_t *fx_group_offsets(const fx_conv_geom *g)
{
    int64_t *goff = malloc((size_t)(g->C * g->KH) * sizeof *goff);
    if (goff) fx_group_offsets_fill(g, goff);
    return goff;
}

#endif
