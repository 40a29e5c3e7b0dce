/* The AMX route's bf16 weight gradient of one convolution chunk (AMX-TILE, AMX-BF16:
 * tdpbf16ps), installed as the AVX-512 level's conv.bf16_wgrad on the "amx" route of the bf16
 * MATMUL (src/cpu/avx512.c).
 *
 * Why: on the AMX route the weight gradient otherwise writes the chunk's patch matrix (im2col,
 * C KH KW values per pixel) and multiplies it by dy on the GEMM; for ResNet-20's 16-channel
 * layers that took about three times the forward pass. Here the tiles come from the chunk's
 * padded input in place: dW^T[(c, t)][o] = sum over pixels p of x[c][p + tap t] dy[o][p], so for
 * one tap and 16 channels, the values of up to 32 consecutive pixels of one output row are, per
 * channel, 32 consecutive values of the padded input row shifted by the tap: rows of an A tile
 * a channel plane apart, which tileloadd reads in place. B is dy as pixel-pair words per output
 * channel (dyq[j][o] = (dy[o][2j], dy[o][2j + 1]), one 16 x 16 word transpose per image), rows
 * of 16 channels' words: B tiles in place too.
 *
 * Arithmetic, per weight: over the chunk's pixels in order (images, output rows, then blocks of
 * kp = min(16, OW / 2) pixel pairs along the row), one tdpbf16ps tile product per block adding
 * to the fp32 sum as the instruction sums (subnormal inputs read as zero, subnormal results
 * flushed, rounded to nearest even). The chunk's dW^T is then added into its group's sum as on
 * every float route (conv2d.c: fixed groups, fixed order), so the bits depend neither on the
 * thread count nor on the chunking within a group; they are this route's own, not the AMX
 * GEMM's over the patch matrix (which runs its K blocks across row ends). The bound is the fp32
 * chain's.
 *
 * Tiles: tmm0-3 accumulate four (tap, channel block) tiles of 16 channels x 16 output channels
 * for one output-channel block; tmm4-5 take their A tiles in turn (16 channels x 2 kp pixels),
 * tmm6 the block's B tile (kp pixel pairs x 16 output channels). For geometries where
 * fx_bf16_wgrad_amx_fits: dilation 1, strides up to 4 (a strided chunk's padded rows first
 * regrouped by column phase, so that a tile row is still consecutive values; not 1 x 1 kernels
 * at a stride), C and O multiples of 16, OW even and at most 32 or a multiple of 32 (the
 * tiles' K then divides each row). Compiled with the AMX flags (the *_amx.c rule of
 * CMakeLists.txt); runs only where the AMX route is installed. */
#include "../core/amx_tiles.h"
#include "../core/pair_copy_avx512.h"
#include "bf16_gemm.h"
#include "../nn/im2col.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

enum { GROUP_TILES = 4, MAX_STRIDE = 4 };

static atomic_llong amx_wgrad_calls;

long long fx_bf16_wgrad_amx_calls(void)
{
    return atomic_load_explicit(&amx_wgrad_calls, memory_order_relaxed);
}

int fx_bf16_wgrad_amx_fits(const struct fx_conv_geom *g)
{
    /* a strided 1 x 1 kernel (ResNet-20's projections) keeps the GEMM over the pixels it reads:
     * here its one or two tiles a group of four would leave the rest idle, and its rows'
     * regrouping copies every input pixel for a quarter of them (16 -> 32 at 32 x 32, batch
     * 128, one thread on the Xeon reporting model 167: 1.15-1.20 ms against 0.85-0.92) */
    const int strided = g->sh > 1 || g->sw > 1;
    return g->sh <= MAX_STRIDE && g->sw <= MAX_STRIDE && (!strided || g->KH * g->KW > 1) &&
           g->dh == 1 && g->dw == 1 && g->C >= 16 && g->C % 16 == 0 && g->O >= 16 &&
           g->O % 16 == 0 && g->OW % 2 == 0 && (g->OW <= 32 || g->OW % 32 == 0);
}

/* a strided chunk's padded rows with their columns regrouped by phase: sw runs of wh values,
 * run r holding columns r, r + sw, ... (zeros past the row) */
static int64_t phase_run(const struct fx_conv_geom *g)
{
    return (g->W + 2 * g->pw + g->sw - 1) / g->sw;
}

int64_t fx_bf16_wgrad_amx_scratch(const struct fx_conv_geom *g, int64_t nb)
{
    /* dy's pair words of the chunk (O words per pixel pair); at a stride, the regrouped copy
     * of the padded chunk (C Hp sw wh bf16 values an image); 32 spare words for alignment */
    const int64_t regrouped =
        g->sw > 1 ? (nb * g->C * (g->H + 2 * g->ph) * g->sw * phase_run(g) + 1) / 2 : 0;
    return nb * (g->OH * g->OW / 2) * g->O + regrouped + 32;
}

void fx_bf16_wgrad_amx(const struct fx_conv_geom *g, const uint16_t *xp, const uint16_t *dy,
                       int64_t nbc, uint32_t *scratch, float *dwt)
{
    atomic_fetch_add_explicit(&amx_wgrad_calls, 1, memory_order_relaxed);
    const int64_t C = g->C, O = g->O, KK = g->KH * g->KW, OH = g->OH, OW = g->OW;
    const int64_t P = OH * OW, Hp = g->H + 2 * g->ph, sw = g->sw;
    uint32_t *dyq = scratch + ((16 - ((uintptr_t)scratch / 4) % 16) % 16);
    for (int64_t n = 0; n < nbc; n++)
        fx_pair_planes_transpose_avx512((const uint32_t *)(const void *)(dy + n * O * P), O, P / 2,
                                        O, dyq + n * (P / 2) * O);
    /* At a stride the pixels of an output row read every sw-th column, which a tile row cannot:
     * the rows are regrouped so that tap kw's columns for consecutive pixels are consecutive
     * values (run kw mod sw, from kw / sw on); the products and their order stay the same. */
    const int64_t wh = sw > 1 ? phase_run(g) : g->W + 2 * g->pw, Wr = sw * wh, HWr = Hp * Wr;
    if (sw > 1) {
        const int64_t Wp = g->W + 2 * g->pw;
        uint16_t *xr = (uint16_t *)(void *)(dyq + nbc * (P / 2) * O + 16);
        for (int64_t row = 0; row < nbc * g->C * Hp; row++) {
            const uint16_t *src = xp + row * Wp;
            uint16_t *dst = xr + row * Wr;
            for (int64_t r = 0; r < sw; r++)
                for (int64_t i = 0; i < wh; i++)
                    dst[r * wh + i] = i * sw + r < Wp ? src[i * sw + r] : 0;
        }
        xp = xr;
    }
    const int kp = OW / 2 < 16 ? (int)(OW / 2) : 16; /* pixel pairs per tile product */
    const unsigned char rows[8] = {16, 16, 16, 16, 16, 16, (unsigned char)kp, 0};
    const unsigned short colsb[8] = {64, 64, 64, 64, (unsigned short)(4 * kp),
                                     (unsigned short)(4 * kp), 64, 0};
    fx_amx_tiles_configure_shapes(rows, colsb);
    const int64_t ncb = C / 16, ntiles = KK * ncb; /* (tap, channel block) tiles per o block */
    const int64_t a_stride = HWr * 2, b_stride = O * 4; /* bytes between tile rows */
    for (int64_t o0 = 0; o0 < O; o0 += 16)
        for (int64_t q0 = 0; q0 < ntiles; q0 += GROUP_TILES) {
            /* the group's tiles (t, cb); a group past the last tile repeats it, stores nothing */
            int64_t aoff[GROUP_TILES], dst[GROUP_TILES];
            int real[GROUP_TILES];
            for (int i = 0; i < GROUP_TILES; i++) {
                const int64_t q = q0 + i < ntiles ? q0 + i : ntiles - 1;
                const int64_t t = q / ncb, cb = q % ncb;
                const int64_t kw = t % g->KW;
                aoff[i] = cb * 16 * HWr + (t / g->KW) * Wr + kw % sw * wh + kw / sw;
                dst[i] = (cb * 16 * KK + t) * O + o0; /* row c of the tile: + c KK O */
                real[i] = q0 + i < ntiles;
            }
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int64_t n = 0; n < nbc; n++)
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow0 = 0; ow0 < OW; ow0 += 2 * kp) {
                        const uint16_t *xb = xp + n * C * HWr + oh * g->sh * Wr + ow0;
                        _tile_loadd(6, dyq + (n * P + oh * OW + ow0) / 2 * O + o0, b_stride);
                        _tile_loadd(4, xb + aoff[0], a_stride);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_loadd(5, xb + aoff[1], a_stride);
                        _tile_dpbf16ps(1, 5, 6);
                        _tile_loadd(4, xb + aoff[2], a_stride);
                        _tile_dpbf16ps(2, 4, 6);
                        _tile_loadd(5, xb + aoff[3], a_stride);
                        _tile_dpbf16ps(3, 5, 6);
                    }
            const int64_t ld = KK * O * 4; /* bytes between a tile's channels in dW^T */
            if (real[0]) _tile_stored(0, dwt + dst[0], ld);
            if (real[1]) _tile_stored(1, dwt + dst[1], ld);
            if (real[2]) _tile_stored(2, dwt + dst[2], ld);
            if (real[3]) _tile_stored(3, dwt + dst[3], ld);
        }
    _tile_release();
}
