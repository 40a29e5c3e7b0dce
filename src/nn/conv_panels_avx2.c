/* AVX2 builder of the fp32 GEMM's implicit-GEMM A panels (conv_panels.h) for the 6-row AVX2
 * tile, from fp32, fp16 or bf16 input.
 *
 * AVX2 has no two-source permute, so the AVX-512 gather does not carry over. Instead, per
 * panel of 6 output pixels, each pixel's K taps are copied into a patch row
 * (fx_conv_patch_taps: one or two vector moves per kernel row) and the GEMM's own transposing
 * pack (fx_f32_pack_rows_avx2, which widens fp16/bf16 exactly) turns the six rows into the
 * panel. That is im2row followed by packing, but one panel at a time: the patch rows stay in
 * L1 instead of a patch matrix of the whole chunk going out to memory and back. Every pixel
 * takes this path, panels that span samples and the chunk's partial last panel (its missing
 * rows are zeros) included. The values are the im2row values widened as the GEMM's packing
 * widens them, so every product is unchanged bit for bit.
 *
 * (The integer GEMM on AVX2 needs no panels: it gathers the same patch rows itself, one
 * register tile and K block at a time, through fx_conv_rows_i16.) */
#include "conv_panels.h"
#include "../core/backend.h"
#include "../fp32/f32_kernels.h"

#include <stdlib.h>
#include <string.h>

#define FX_PANEL_ROWS 6
_Static_assert(FX_PANEL_ROWS == FX_F32_MR_AVX2, "the panels are the AVX2 fp32 GEMM's A panels");

int fx_conv_panels_f32_avx2(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb, int mr,
                            float *ap)
{
    if (mr != FX_PANEL_ROWS || !fx_conv_panels_f32_fit(g, mr) ||
        (fmt != FMT_FP32 && fmt != FMT_FP16 && fmt != FMT_BF16))
        return 0;
    const size_t esz = fmt == FMT_FP32 ? sizeof(float) : sizeof(uint16_t);
    const int64_t K = g->C * g->KH * g->KW, Pc = nb * g->OH * g->OW;
    /* patch row stride: K values and the last move's overrun, in whole 64-byte lines */
    const int64_t ld_bytes = (K * (int64_t)esz + FX_CONV_TAPS_SLACK_BYTES + 63) / 64 * 64;
    int64_t *goff = fx_group_offsets(g);
    char *rows = aligned_alloc(64, (size_t)(FX_PANEL_ROWS * ld_bytes));
    if (!goff || !rows) {
        free(goff);
        free(rows);
        return 0;
    }
    const char *x = xp;
    fx_pixel_cursor cur = fx_cursor_start(g);
    for (int64_t q = 0; q * FX_PANEL_ROWS < Pc; q++) {
        int64_t base[FX_PANEL_ROWS];
        const int64_t left = Pc - q * FX_PANEL_ROWS;
        const int valid = left < FX_PANEL_ROWS ? (int)left : FX_PANEL_ROWS;
        fx_cursor_next(&cur, valid, base);
        for (int r = 0; r < FX_PANEL_ROWS; r++) {
            char *row = rows + r * ld_bytes;
            if (r < valid)
                fx_conv_patch_taps(g, x + base[r] * (int64_t)esz, goff, 0, K, esz, row);
            else
                memset(row, 0, (size_t)K * esz);
        }
        fx_f32_pack_rows_avx2(ap + q * K * FX_PANEL_ROWS, rows, fmt, ld_bytes / (int64_t)esz, K,
                              FX_PANEL_ROWS);
    }
    free(goff);
    free(rows);
    return 1;
}

/* The weight gradient's panels (conv_panels.h): per panel of 6 taps, one 8 x 8 transposing
 * block per 8 pixels, read straight from the padded chunk. */
int fx_conv_wpanels_f32_avx2(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb, int mr,
                             float *ap)
{
    return mr == FX_PANEL_ROWS &&
           fx_conv_wpanels_f32_build(g, xp, fmt, nb, mr, fx_f32_pack_blocks_avx2, ap);
}
