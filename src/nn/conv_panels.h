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

/* AVX-512BW builder for mr = 6, KW <= 10 (conv_panels_avx512.c): the same int32 values.
 * Returns 0 if the geometry is outside what it handles (nothing written). */
int fx_conv_panels_i16_avx512(const fx_conv_geom *g, const int16_t *xp, int64_t nb, int mr,
                              int32_t *ap);

/* ---- fp32 GEMM panels (fp32, fp16 and bf16 inputs) -------------------------------------------
 * The fp32 GEMM's A micro-panels over the whole K (src/fp32/f32_gemm.c): panel q at
 * ap + q*K*mr, ap[q*K*mr + k*mr + i] = A[q*mr+i][k] widened exactly to fp32 (the same values
 * the GEMM's packing makes of the im2row matrix, so the same products in the same order: the
 * same bits), rows past Pc 0. fmt is the input's storage format (FP32, FP16 or BF16). */
static inline int fx_conv_panels_f32_fit(const fx_conv_geom *g, int mr)
{
    return mr == 12 && g->KW >= 1 && (g->KW - 1) * g->dw <= 31;
}
int64_t fx_conv_panels_f32_numel(const fx_conv_geom *g, int64_t nb, int mr);
void fx_conv_panels_f32(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb, int mr,
                        float *ap);
/* AVX-512 builder for mr = 12; 0 (nothing written) outside fx_conv_panels_f32_fit. */
int fx_conv_panels_f32_avx512(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb,
                              int mr, float *ap);

#endif
