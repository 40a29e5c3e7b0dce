/* The AMX route's direct bf16 forward convolution (AMX-TILE, AMX-BF16: tdpbf16ps), installed as
 * the AVX-512 level's conv.bf16_fwd on the "amx" route of the bf16 MATMUL (src/cpu/avx512.c).
 *
 * Why: on the AMX route a convolution otherwise hands its GEMM the patch rows on demand, and
 * gathering them (a short copy per kernel row and pixel) took more of a bf16 ResNet-20 step than
 * the tile products themselves; the 16-channel layers' passes ran at a fraction of the AMX
 * rate. Here nothing is gathered: the chunk is copied once into the channel-pair-last layout of
 * the dpbf16 route's direct kernel (fx_bf16_pair_nhwc, bf16_conv_avx512bf16.c), where the 16
 * consecutive output pixels of one row at one tap are 16 rows of channel-pair words a fixed
 * stride apart, which is exactly an A tile that tileloadd reads in place; the weights packed by
 * fx_bf16_fwd_direct_pack_weights are, per tap and channel pair, rows of 16-channel pair words,
 * exactly B tiles. A tile product is then 16 pixels x 16 channels x (up to) 32 channels' values.
 *
 * Arithmetic, per output: over the taps (kh, kw) in order and, within each, the channel pairs
 * (2cp, 2cp + 1) in blocks of 16 pairs, one tdpbf16ps tile product per (tap, block) adding to
 * the fp32 sum as the instruction sums (subnormal inputs read as zero, subnormal results
 * flushed, rounded to nearest even); an odd C pairs its last channel with zero. Those are the
 * bits of the AMX GEMM (fx_bf16_matmul_amx) on a tap-major patch matrix in which each tap's
 * channels fill whole tiles of 32 values (zero channels past C where C < 32; checked by
 * tests/test_bf16_amx_conv.c: without the zeros a 16-channel layer's bits differ, as the
 * instruction's sum within a tile depends on the tile's K). That is another order than the
 * AMX GEMM's over the usual patch matrix (k = (c KH + kh) KW + kw), so a layer that takes this
 * kernel has these bits, not that GEMM's; the bound is the fp32 chain's. Each output is one
 * thread's, so the bits do not depend on the thread count.
 *
 * Tiles: tmm0-3 accumulate four blocks of 16 pixels (each within one output row, a row's last
 * block computing past its end and storing only its pixels; or, for a whole stride-1 output
 * with rows under 16 pixels, span blocks of 16 consecutive positions across rows,
 * conv_tile_blocks.h) by 16 output channels; tmm4-5 take
 * the blocks' A tiles in turn and tmm6 the tap's B tile, kb = min(Cp, 16) channel pairs each
 * (a tile's K is kb pairs: a 16-channel layer's tiles are half tiles rather than zero-padded
 * ones). Channel pairs beyond 16 come in blocks of 16, so Cp must be at most 16 or a multiple
 * of 16 (fx_bf16_fwd_amx_fits). This file is compiled with the AMX flags (the *_amx.c rule of
 * CMakeLists.txt) and runs only where the AMX route is installed, which asked the OS for the
 * tile state. */
#include "../core/amx_tiles.h"
#include "bf16_gemm.h"
#include "bf16_store_avx512bf16.h"
#include "../nn/conv_tile_blocks.h"
#include "../nn/im2col.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

enum { AMX_BLOCKS = 4, AMX_MAX_TAPS = 64 };

static atomic_llong amx_fwd_calls;

static atomic_llong amx_span_calls;

long long fx_bf16_fwd_amx_calls(void)
{
    return atomic_load_explicit(&amx_fwd_calls, memory_order_relaxed);
}

long long fx_bf16_fwd_amx_span_calls(void)
{
    return atomic_load_explicit(&amx_span_calls, memory_order_relaxed);
}

int fx_bf16_fwd_amx_fits(const struct fx_conv_geom *g)
{
    const int64_t Cp = (g->C + 1) / 2;
    /* the dpbf16 kernel's copy and weights (fx_bf16_fwd_direct_fits: strides the taps cover,
     * dilation 1, at most 64 taps), from 16 channels each way: below, a tile product's K is a
     * few pairs and the copy's setup outweighs them (the stem, C = 3, stays on the GEMM) */
    return fx_bf16_fwd_direct_fits(g) && g->C >= 16 && g->O >= 16 &&
           (Cp <= 16 || Cp % 16 == 0) && g->KH * g->KW <= AMX_MAX_TAPS;
}

/* One output block: 16 pixels (rows of the tile) by 16 channels (`nout` real) of fp32 sums in
 * buf (row r: pixel r's channels), its k->n stored rows k->rows[] as consecutive output pixels,
 * to a bf16 y (ybf, channel-major) or the pixel-major fp32 stage (y, row stride O). */
static void store_block(const float *buf, const fx_tile_rows *k, int nout, uint16_t *ybf,
                        int64_t P, float *y, int64_t O)
{
    if (ybf) {
        __m512 acc[16][4];
        for (int r = 0; r < 16; r++)
            acc[r][0] = r < k->n ? _mm512_load_ps(buf + 16 * k->rows[r]) : _mm512_setzero_ps();
        fx_bf16_store_rows(16, 1, acc, ybf, P, k->n, nout);
        return;
    }
    const __mmask16 cm = (__mmask16)(nout >= 16 ? 0xFFFF : (1u << nout) - 1u);
    for (int r = 0; r < k->n; r++)
        _mm512_mask_storeu_ps(y + r * O, cm, _mm512_load_ps(buf + 16 * k->rows[r]));
}

/* One group's sums: four blocks (A tiles at base[i], rows a_stride bytes apart) against one
 * block of 16 output channels (B tiles from wq, rows b_stride bytes apart: tap t's channel pairs
 * at wq + (t Cp + pair) opad), over the ntaps taps (word offsets taps[t] from a block's first
 * pixel) and, within each, ncb blocks of 16 channel pairs, one tdpbf16ps per (tap, block) and
 * block of pixels; the four 16 x 16 fp32 tiles stored into buf. The tile shapes are the
 * caller's configuration. */
static inline void group_products(const uint32_t *const base[AMX_BLOCKS], const int64_t *taps,
                                  int64_t ntaps, int64_t Cp, int64_t ncb, const uint32_t *wq,
                                  int64_t opad, int64_t a_stride, int64_t b_stride,
                                  float buf[AMX_BLOCKS][256])
{
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t t = 0; t < ntaps; t++)
        for (int64_t cb = 0; cb < ncb; cb++) {
            const int64_t koff = taps[t] + cb * 16;
            _tile_loadd(6, wq + (t * Cp + cb * 16) * opad, b_stride);
            _tile_loadd(4, base[0] + koff, a_stride);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(5, base[1] + koff, a_stride);
            _tile_dpbf16ps(1, 5, 6);
            _tile_loadd(4, base[2] + koff, a_stride);
            _tile_dpbf16ps(2, 4, 6);
            _tile_loadd(5, base[3] + koff, a_stride);
            _tile_dpbf16ps(3, 5, 6);
        }
    _tile_stored(0, buf[0], 64);
    _tile_stored(1, buf[1], 64);
    _tile_stored(2, buf[2], 64);
    _tile_stored(3, buf[3], 64);
}

void fx_bf16_fwd_amx(const struct fx_conv_geom *g, const uint16_t *x, int64_t nbc,
                     const uint32_t *wq, uint32_t wkey, uint32_t *scratch, float *y, uint16_t *ybf,
                     int nthreads)
{
    (void)wkey; /* tdpbf16ps's flushing is this route's arithmetic: no data test */
    atomic_fetch_add_explicit(&amx_fwd_calls, 1, memory_order_relaxed);
    const int64_t C = g->C, O = g->O, Cp = (C + 1) / 2, opad = (O + 15) / 16 * 16;
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, HW = Hp * Wp;
    const int64_t P = g->OH * g->OW, KK = g->KH * g->KW, sw = g->sw;
    /* the copy as the dpbf16 kernel lays it out (within fx_bf16_fwd_direct_scratch words): the
     * pair-last chunk and its slack (a last block's spare rows and their taps read it) */
    uint32_t *xq = scratch + ((16 - ((uintptr_t)scratch / 4) % 16) % 16);
    const int64_t slack = (16 * sw + g->KW) * Cp;
    fx_bf16_pair_nhwc(g, x, nbc, xq);
    memset(xq + nbc * HW * Cp, 0, sizeof(uint32_t) * (size_t)slack);
    int64_t taps[AMX_MAX_TAPS]; /* word offsets of the taps from a pixel's top-left one */
    for (int64_t t = 0; t < KK; t++) taps[t] = ((t / g->KW) * Wp + t % g->KW) * Cp;
    const int kb = Cp < 16 ? (int)Cp : 16; /* channel pairs per tile product */
    const int64_t ncb = (Cp + 15) / 16;
    const int span = fx_tile_span_blocks(g);
    if (span) atomic_fetch_add_explicit(&amx_span_calls, 1, memory_order_relaxed);
    const int64_t nblocks = nbc * fx_tile_blocks_per_image(g, span);
    const int64_t ngroups = (nblocks + AMX_BLOCKS - 1) / AMX_BLOCKS;
    const int64_t a_stride = sw * Cp * 4, b_stride = opad * 4; /* bytes between tile rows */
    const unsigned char rows[8] = {16, 16, 16, 16, 16, 16, (unsigned char)kb, 0};
    const unsigned short colsb[8] = {64, 64, 64, 64, (unsigned short)(4 * kb),
                                     (unsigned short)(4 * kb), 64, 0};
    (void)nthreads;
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
#endif
    {
        fx_amx_tiles_configure_shapes(rows, colsb);
        float buf[AMX_BLOCKS][256] __attribute__((aligned(64)));
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t grp = 0; grp < ngroups; grp++) {
            /* the group's blocks: first pixel's word in the copy and stored outputs (a group
             * past the last block repeats it and stores nothing) */
            const uint32_t *base[AMX_BLOCKS];
            fx_tile_rows out[AMX_BLOCKS];
            for (int i = 0; i < AMX_BLOCKS; i++) {
                const int real = grp * AMX_BLOCKS + i < nblocks;
                const int64_t b = real ? grp * AMX_BLOCKS + i : nblocks - 1;
                int64_t n;
                const int64_t v = fx_tile_block_origin(g, 0, 0, span, b, &n);
                base[i] = xq + (n * HW + v) * Cp;
                fx_tile_block_rows(g, span, b, &out[i]);
                if (!real) out[i].n = 0;
            }
            for (int64_t o0 = 0; o0 < O; o0 += 16) {
                group_products(base, taps, KK, Cp, ncb, wq + o0, opad, a_stride, b_stride, buf);
                const int nout = O - o0 < 16 ? (int)(O - o0) : 16;
                for (int i = 0; i < AMX_BLOCKS; i++) {
                    const fx_tile_rows *r = &out[i];
                    if (r->n > 0)
                        store_block(buf[i], r, nout, ybf ? ybf + (r->im * O + o0) * P + r->q0 : NULL,
                                    P, ybf ? NULL : y + (r->im * P + r->q0) * O + o0, O);
                }
            }
        }
        _tile_release();
    }
}

/* ---- the input gradient at stride 2 by phases ------------------------------------------------
 * (bf16_gemm.h) The dpbf16 route's phases (fx_bf16_dgrad_s2_direct: one pair-last copy of dy
 * padded for the widest phase, each phase a stride-1 correlation of it computing only the
 * window dx takes, rounded into quarter planes that are then interleaved into dx's rows) on the
 * forward kernel's tiles: an A tile is R consecutive window pixels of one row (R = the window's
 * width up to 16: ResNet-20's 16 x 16 windows whole, its 8 x 8 ones in 8-row tiles, none reading
 * past its row), a B tile one tap's block of dy's channel pairs for 16 of dx's channels. Why:
 * the AMX route had taken these gradients on the fp32 direct kernel on widened values, 2.2-2.5
 * times the integer formats' AMX time on ResNet-20's stride-2 layers. */

static atomic_llong amx_s2_calls;

long long fx_bf16_dgrad_s2_amx_calls(void)
{
    return atomic_load_explicit(&amx_s2_calls, memory_order_relaxed);
}

int fx_bf16_dgrad_s2_amx_fits(const struct fx_conv_geom *g)
{
    /* fx_bf16_dgrad_s2_fits's geometry, 1 x 1 kernels too (ResNet-20's projections: one
     * phase with taps, the others' planes zero) */
    const int64_t Op = (g->O + 1) / 2, nw = g->W / 2;
    return g->sh == 2 && g->sw == 2 && g->dh == 1 && g->dw == 1 &&
           g->KH <= 2 * FX_BF16_S2_MAX_TAPS && g->KW <= 2 * FX_BF16_S2_MAX_TAPS &&
           g->H % 2 == 0 && g->W % 2 == 0 && g->H >= 2 && g->W >= 2 && g->C >= 16 &&
           g->O >= 16 && (Op <= 16 || Op % 16 == 0) && (nw <= 16 || nw % 16 == 0);
}

void fx_bf16_dgrad_s2_amx(const struct fx_conv_geom *g, const uint16_t *dy, int64_t nbc,
                          const uint32_t *wq, uint32_t wkey, uint32_t *scratch, uint16_t *dx)
{
    (void)wkey; /* tdpbf16ps's flushing is this route's arithmetic: no data test */
    atomic_fetch_add_explicit(&amx_s2_calls, 1, memory_order_relaxed);
    fx_bf16_s2_chunk k;
    fx_bf16_dgrad_s2_copy(g, dy, nbc, scratch, &k);
    const int64_t C = g->C, Op = k.Op, cpad = k.cpad, Wp = k.Wp, HWp = k.HWp;
    const int kb = Op < 16 ? (int)Op : 16; /* dy's channel pairs per tile product */
    const int64_t ncb = (Op + 15) / 16;
    /* every phase's window is W / 2 wide: R pixels a tile, whole tiles a row */
    const int64_t nw = g->W / 2, R = nw < 16 ? nw : 16, per_row = nw / R;
    const unsigned char rows[8] = {(unsigned char)R, (unsigned char)R, (unsigned char)R,
                                   (unsigned char)R, (unsigned char)R, (unsigned char)R,
                                   (unsigned char)kb, 0};
    const unsigned short colsb[8] = {64, 64, 64, 64, (unsigned short)(4 * kb),
                                     (unsigned short)(4 * kb), 64, 0};
    const int64_t a_stride = Op * 4, b_stride = cpad * 4; /* bytes between tile rows */
    fx_amx_tiles_configure_shapes(rows, colsb);
    float buf[AMX_BLOCKS][256] __attribute__((aligned(64)));
    const uint32_t *wp = wq;
    for (int q = 0; q < 4; q++) {
        const fx_bf16_s2_axis *a = &k.ah[q / 2], *b = &k.aw[q % 2];
        const int64_t nh = a->n, Pq = nh * nw, ntaps = a->taps * b->taps;
        uint16_t *out = k.q[q / 2][q % 2];
        if (ntaps == 0) { /* no kernel tap reaches these dx values (a 1 x 1 kernel's phases) */
            memset(out, 0, sizeof(uint16_t) * (size_t)(nbc * C * Pq));
            continue;
        }
        int64_t taps[FX_BF16_S2_MAX_TAPS * FX_BF16_S2_MAX_TAPS];
        for (int64_t i = 0; i < a->taps; i++)
            for (int64_t j = 0; j < b->taps; j++) taps[i * b->taps + j] = (i * Wp + j) * Op;
        /* blocks (n, r, c0): window row r of image n from column c0 R; output (r, c)'s first
         * tap reads dy (r + d0, c + d0) of the copy */
        const int64_t nblocks = nbc * nh * per_row;
        for (int64_t b0 = 0; b0 < nblocks; b0 += AMX_BLOCKS) {
            const uint32_t *base[AMX_BLOCKS];
            int64_t at[AMX_BLOCKS]; /* the block's first output in the quarter plane's image */
            int64_t img[AMX_BLOCKS];
            int live[AMX_BLOCKS];
            for (int i = 0; i < AMX_BLOCKS; i++) {
                live[i] = b0 + i < nblocks;
                const int64_t blk = live[i] ? b0 + i : nblocks - 1;
                const int64_t n = blk / (nh * per_row), r = blk / per_row % nh;
                const int64_t c0 = blk % per_row * R;
                img[i] = n;
                at[i] = r * nw + c0;
                base[i] = k.xq + (n * HWp + (r + a->d0 + k.ph) * Wp + c0 + b->d0 + k.pw) * Op;
            }
            for (int64_t o0 = 0; o0 < C; o0 += 16) {
                group_products(base, taps, ntaps, Op, ncb, wp + o0, cpad, a_stride, b_stride, buf);
                const int nout = C - o0 < 16 ? (int)(C - o0) : 16;
                for (int i = 0; i < AMX_BLOCKS; i++) {
                    if (!live[i]) continue;
                    __m512 acc[16][4];
                    for (int r = 0; r < 16; r++)
                        acc[r][0] = r < R ? _mm512_load_ps(buf[i] + 16 * r) : _mm512_setzero_ps();
                    fx_bf16_store_rows(16, 1, acc, out + (img[i] * C + o0) * Pq + at[i], Pq,
                                       (int)R, nout);
                }
            }
        }
        wp += ntaps * Op * cpad; /* the phase's packed words (fx_bf16_dgrad_s2_pack_weights) */
    }
    _tile_release();
    fx_bf16_dgrad_s2_interleave(g, &k, nbc, dx);
}
