/* The weight gradient of a bf16 convolution on bf16 pairs with vdpbf16ps, straight from the
 * padded input chunk: no patch matrix, no packing (src/nn/conv2d.c calls it per chunk where
 * bf16_wgrad_direct is set, the dpbf16 route).
 *
 * dW^T[r][o] = sum over the chunk's pixels q of x(r, q) dy[o][q], r = (c KH + kh) KW + kw, the
 * product the GEMM route computes as patches x dy^T on the pair GEMM. Here a register tile of
 * MR rows r and 16 NV output channels runs the whole chunk's chain in registers: per pair of
 * pixels (q, q + 1) along a row (OW even), one broadcast per row r of the two input values at
 * its tap, which sit side by side in the padded chunk (a single unaligned 32-bit load), and NV
 * vectors of the pair words of dy for 16 channels each, from a pixel-pair-major copy of dy
 * (dyt). The pairs are the GEMM's pairs (the chunk's pixel order, q = (n - n0) P + oh OW + ow)
 * and each output is the same chain over them (src/fp32/f32_kernels.h, pair mode), so the bits
 * are the GEMM route's: vdpbf16ps where conditions (i) and (ii) hold for the chunk's values,
 * the FMA chain otherwise; the chain starts from zero and never leaves the registers, so
 * condition (iii) holds by construction.
 *
 * At a stride of 2 (ResNet's downsampling 3 x 3 layers) the pair (q, q + 1) of a row reads input
 * columns two apart; the kernel reads them from a copy of the padded chunk whose rows hold
 * their even columns, then their odd ones (fx_cols_by_2_avx512), where they sit side by side
 * again. The pairs and their order stay the GEMM route's, so do the bits.
 *
 * Why: on the CNN's conv2 (batch 128, one thread, Zen 4) the GEMM route spent about a third of
 * the weight gradient outside vdpbf16ps, writing the patch matrix (40 MB a step) and packing
 * it again into 6-row panels. */
#include "bf16_gemm.h"
#include "bf16_round_avx512bf16.h"
#include "bf16_store_avx512bf16.h"
#include "../core/pair_copy_avx512.h"
#include "../core/transpose_avx512.h"
#include "../fp32/f32_kernels.h"
#include "../nn/im2col.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#define FX_WG_MAX_MR 12

/* acc += the pair products of a (one broadcast pair word) and b (16 pair words), odd element
 * first: vdpbf16ps, or the same two FMAs on the widened halves (where the proof failed). */
static inline __attribute__((always_inline)) __m512 pair_step(__m512 acc, __m512i a, __m512i b,
                                                              const int dot)
{
    if (dot) return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    const __m512 ao = _mm512_castsi512_ps(_mm512_and_si512(a, hi));
    const __m512 ae = _mm512_castsi512_ps(_mm512_slli_epi32(a, 16));
    const __m512 bo = _mm512_castsi512_ps(_mm512_and_si512(b, hi));
    const __m512 be = _mm512_castsi512_ps(_mm512_slli_epi32(b, 16));
    return _mm512_fmadd_ps(ae, be, _mm512_fmadd_ps(ao, bo, acc));
}

/* The first `rows` rows of a tile's accumulators, NV vectors each (the last masked by last). */
static inline __attribute__((always_inline)) void store_rows(const int MR, const int NV,
                                                             __m512 acc[][4], float *out,
                                                             int64_t ldo, int rows,
                                                             __mmask16 last)
{
    for (int r = 0; r < MR && r < rows; r++)
        for (int v = 0; v < NV; v++)
            _mm512_mask_storeu_ps(out + r * ldo + 16 * v, v + 1 < NV ? (__mmask16)0xFFFF : last,
                                  acc[r][v]);
}

/* One tile: MR rows (offsets roff into a padded image, or its copy in column runs), NV vectors
 * of 16 channels from dyt (already offset to the tile's first channel), the chain over all nbc
 * images' pixel pairs; output row oy starts oy ystep values into the image. dot: vdpbf16ps;
 * else the same chain in FMAs on the widened halves, odd first. */
static inline __attribute__((always_inline)) void
wg_tile(const int MR, const int NV, const int dot, const uint16_t *xp, int64_t ximg,
        const int64_t *roff, const uint32_t *dyt, int64_t dimg, int64_t opad, int64_t OH,
        int64_t OW, int64_t ystep, int64_t nbc, float *out, int64_t ldo, int rows,
        __mmask16 last)
{
    __m512 acc[FX_WG_MAX_MR][4];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
    const int64_t npair = OW / 2;
    for (int64_t n = 0; n < nbc; n++) {
        for (int64_t oy = 0; oy < OH; oy++) {
            const uint16_t *xr = xp + n * ximg + oy * ystep;
            const uint32_t *dr = dyt + n * dimg + oy * npair * opad;
            for (int64_t j = 0; j < npair; j++) {
                __m512i b[4];
                for (int v = 0; v < NV; v++)
                    b[v] = _mm512_loadu_si512((const void *)(dr + j * opad + 16 * v));
                for (int r = 0; r < MR; r++) {
                    uint32_t word;
                    memcpy(&word, xr + roff[r] + 2 * j, sizeof word);
                    const __m512i a = _mm512_set1_epi32((int)word);
                    for (int v = 0; v < NV; v++) acc[r][v] = pair_step(acc[r][v], a, b[v], dot);
                }
            }
        }
    }
    store_rows(MR, NV, acc, out, ldo, rows, last);
}

/* The tile shapes, as separate functions so that each is compiled with constant MR and NV
 * (every accumulator in a register): 6 x 64, 8 x 48, 12 x 32 and 12 x 16 channels. */
#define WG_TILE_FN(MR, NV, DOT)                                                                  \
    static void wg_tile_##MR##x##NV##_##DOT(const uint16_t *xp, int64_t ximg, const int64_t *roff, \
                                            const uint32_t *dyt, int64_t dimg, int64_t opad,     \
                                            int64_t OH, int64_t OW, int64_t ystep, int64_t nbc,   \
                                            float *out, int64_t ldo, int rows, __mmask16 last)    \
    {                                                                                            \
        wg_tile(MR, NV, DOT, xp, ximg, roff, dyt, dimg, opad, OH, OW, ystep, nbc, out, ldo,      \
                rows, last);                                                                     \
    }
WG_TILE_FN(6, 4, 1)
WG_TILE_FN(8, 3, 1)
WG_TILE_FN(12, 2, 1)
WG_TILE_FN(12, 1, 1)
WG_TILE_FN(6, 4, 0)
WG_TILE_FN(8, 3, 0)
WG_TILE_FN(12, 2, 0)
WG_TILE_FN(12, 1, 0)

typedef void (*wg_tile_fn)(const uint16_t *, int64_t, const int64_t *, const uint32_t *, int64_t,
                           int64_t, int64_t, int64_t, int64_t, int64_t, float *, int64_t, int,
                           __mmask16);

static atomic_int direct_enabled = 1;
static atomic_llong direct_calls; /* test hook: chunks done here */

long long fx_bf16_wgrad_direct_calls(void)
{
    return atomic_load_explicit(&direct_calls, memory_order_relaxed);
}

void fx_bf16_wgrad_direct_set_enabled(int on)
{
    atomic_store_explicit(&direct_enabled, on != 0, memory_order_relaxed);
}

int fx_bf16_wgrad_direct_enabled(void)
{
    return atomic_load_explicit(&direct_enabled, memory_order_relaxed);
}

/* A stride of 2 only where the taps reach every input pixel (KH >= sh, KW >= sw), as the integer
 * kernel's (conv_i16_wgrad.c): a 1 x 1 projection at stride 2 reads a quarter of the pixels
 * that the copy would move. */
int fx_bf16_wgrad_direct_fits(const struct fx_conv_geom *g)
{
    return g->sh >= 1 && g->sh <= 2 && g->sw >= 1 && g->sw <= 2 && g->KH >= g->sh &&
           g->KW >= g->sw && g->dh == 1 && g->dw == 1 && g->OW % 2 == 0 && g->OW >= 2 &&
           g->O >= 1;
}

/* Words of the padded chunk's copy in column runs (stride 2 across; 0 at stride 1) */
static int64_t wg_copy_words(const struct fx_conv_geom *g, int64_t nb)
{
    if (g->sw == 1) return 0;
    const int64_t Hp = g->H + 2 * g->ph, Wd = (g->W + 2 * g->pw + 1) / 2 * 2;
    return (nb * g->C * Hp * Wd + 1) / 2;
}

int64_t fx_bf16_wgrad_direct_scratch(const struct fx_conv_geom *g, int64_t nb)
{
    const int64_t opad = (g->O + 15) / 16 * 16;
    /* words: dy's pair words, 16 spare for their alignment, the copy */
    return nb * (g->OH * g->OW / 2) * opad + 16 + wg_copy_words(g, nb);
}

void fx_bf16_wgrad_direct(const struct fx_conv_geom *g, const uint16_t *xp, const uint16_t *dy,
                          int64_t nbc, uint32_t *scratch, float *dwt)
{
    const int64_t O = g->O, P = g->OH * g->OW, opad = (O + 15) / 16 * 16;
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, ximg = g->C * Hp * Wp;
    const int64_t CKK = g->C * g->KH * g->KW, sw = g->sw;
    /* the rows the tiles read: at stride 1 the padded chunk, at stride 2 across its copy in
     * column runs, wq values each (ld a row, plane a channel, cimg an image) */
    const int64_t wq = (Wp + sw - 1) / sw, ld = sw * wq, plane = Hp * ld, cimg = g->C * plane;
    atomic_fetch_add_explicit(&direct_calls, 1, memory_order_relaxed);
    uint32_t *dyt = scratch + ((16 - ((uintptr_t)scratch / 4) % 16) % 16); /* 64-byte aligned */
    fx_pair_rows_transpose_avx512(dy, nbc, O, P, opad, dyt);
    const uint16_t *xs = xp;
    if (sw == 2) {
        uint16_t *copy = (uint16_t *)(void *)(dyt + nbc * (P / 2) * opad);
        fx_cols_by_2_avx512(xp, nbc * g->C * Hp, Wp, copy);
        xs = copy;
    }
    /* conditions (i) and (ii) for the whole chunk: the smallest exponent keys of the nonzero
     * values (the border's zeros do not count; at a stride a padded row or column that no tap
     * reads may count too, which can only turn vdpbf16ps off, and both chains give the same
     * bits) */
    const uint32_t kx = fx_bf16_minkey_avx512(xp, nbc * ximg);
    const uint32_t kd = fx_bf16_minkey_avx512(dy, nbc * O * P);
    const int dot = fx_bf16_dot_enabled() && kx + kd >= FX_BF16_DOT_MIN_KEYSUM;
    for (int64_t o0 = 0; o0 < O; o0 += 64) {
        const int64_t ow = O - o0 < 64 ? O - o0 : 64;
        const int nv = (int)((ow + 15) / 16);
        const int mr = nv == 4 ? 6 : nv == 3 ? 8 : 12;
        const wg_tile_fn fn = dot ? (nv == 4   ? wg_tile_6x4_1
                                     : nv == 3 ? wg_tile_8x3_1
                                     : nv == 2 ? wg_tile_12x2_1
                                               : wg_tile_12x1_1)
                                  : (nv == 4   ? wg_tile_6x4_0
                                     : nv == 3 ? wg_tile_8x3_0
                                     : nv == 2 ? wg_tile_12x2_0
                                               : wg_tile_12x1_0);
        const int tail = (int)(ow - 16 * (nv - 1));
        const __mmask16 last = (__mmask16)(tail >= 16 ? 0xFFFF : (1u << tail) - 1);
        for (int64_t r0 = 0; r0 < CKK; r0 += mr) {
            const int rows = CKK - r0 < mr ? (int)(CKK - r0) : mr;
            int64_t roff[FX_WG_MAX_MR];
            for (int i = 0; i < mr; i++) {
                const int64_t r = r0 + (i < rows ? i : 0); /* spare rows repeat the first */
                const int64_t kw = r % g->KW, kh = r / g->KW % g->KH, c = r / (g->KW * g->KH);
                roff[i] = c * plane + kh * ld + kw % sw * wq + kw / sw;
            }
            fn(xs, cimg, roff, dyt + o0, (P / 2) * opad, opad, g->OH, g->OW, g->sh * ld, nbc,
               dwt + r0 * O + o0, O, rows, last);
        }
    }
}

/* ---- forward ---------------------------------------------------------------------------------
 * y[n][o][oh][ow] on bf16 pairs of input channels, straight from a channel-pair-last copy of
 * the padded chunk: per output, one chain over the taps (kh, kw) in order and, within each tap,
 * the channel pairs (2cp, 2cp + 1) in order, the odd channel first (vdpbf16ps; an odd C pairs
 * its last channel with a zero). That is this route's own order: the GEMM routes chain over the
 * patch matrix's k = (c KH + kh) KW + kw instead, so the bits differ from theirs, as the bf16
 * routes' bits differ from each other (docs/architecture.md). A register tile is MR consecutive
 * output pixels of one row (MR = 7 or 8, or 14 or 16 for 16 channels) by 16 NV channels; row r
 * broadcasts the word of its pixel's tap from the copy (rows sw Cp words apart: any stride
 * takes the same tiles), so nothing is gathered or packed per tile. */

#define FX_FWD_MAX_MR 16
#define FX_FWD_MAX_TAPS 64 /* kernels up to 8 x 8 */

/* xq[n][ih][iw][cp] = (x[n][2cp][ih][iw], x[n][2cp + 1][ih][iw]) over the padded image (zero
 * words in the padding), the second 0 past C: each image paired, padded and transposed to
 * pixel-major order in one pass (fx_pair_nhwc_padded_avx512). Padding while pairing spares the
 * chunk a padded copy, one more pass over it (about a tenth of ResNet-20's 16-channel forward
 * pass). */
void fx_bf16_pair_nhwc(const struct fx_conv_geom *g, const uint16_t *x, int64_t nbc, uint32_t *xq)
{
    const int64_t C = g->C, Cp = (C + 1) / 2, HWp = (g->H + 2 * g->ph) * (g->W + 2 * g->pw);
    for (int64_t n = 0; n < nbc; n++)
        fx_pair_nhwc_padded_avx512(x + n * C * g->H * g->W, C, g->H, g->W, g->ph, g->pw, Cp,
                                   xq + n * HWp * Cp, NULL);
}

int64_t fx_bf16_fwd_direct_weights_numel(const struct fx_conv_geom *g)
{
    return g->KH * g->KW * ((g->C + 1) / 2) * ((g->O + 15) / 16 * 16);
}

uint32_t fx_bf16_fwd_direct_pack_weights(const struct fx_conv_geom *g, const uint16_t *w,
                                         uint32_t *wq)
{
    const int64_t C = g->C, O = g->O, KK = g->KH * g->KW, Cp = (C + 1) / 2;
    const int64_t opad = (O + 15) / 16 * 16;
    for (int64_t t = 0; t < KK; t++)
        for (int64_t cp = 0; cp < Cp; cp++) {
            uint32_t *dst = wq + (t * Cp + cp) * opad;
            for (int64_t o = 0; o < opad; o++) {
                const uint32_t e = o < O ? w[(o * C + 2 * cp) * KK + t] : 0u;
                const uint32_t d = o < O && 2 * cp + 1 < C ? w[(o * C + 2 * cp + 1) * KK + t] : 0u;
                dst[o] = e | d << 16;
            }
        }
    /* the weights' half of conditions (i) and (ii), once for every chunk */
    return fx_bf16_minkey_avx512((const uint16_t *)(const void *)wq, 2 * KK * Cp * opad);
}

/* One forward tile; BF: its sums go to a bf16 y (fx_bf16_store_rows: ob, ldb, nout), else to the
 * pixel-major fp32 stage (out, ldo, last) */
static inline __attribute__((always_inline)) void
fwd_tile(const int MR, const int NV, const int dot, const int BF, const uint32_t *xb, int64_t Cp,
         int64_t rs, const int64_t *toff, int64_t ntaps, const uint32_t *wb, int64_t opad,
         float *out, int64_t ldo, int rows, __mmask16 last, uint16_t *ob, int64_t ldb, int nout)
{
    __m512 acc[FX_FWD_MAX_MR][4]; /* NV <= 2 used */
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
    for (int64_t t = 0; t < ntaps; t++) {
        const uint32_t *xt = xb + toff[t];
        const uint32_t *wt = wb + t * Cp * opad;
        for (int64_t cp = 0; cp < Cp; cp++) {
            __m512i b[2];
            for (int v = 0; v < NV; v++)
                b[v] = _mm512_load_si512((const void *)(wt + cp * opad + 16 * v));
            for (int r = 0; r < MR; r++) {
                const __m512i a = _mm512_set1_epi32((int)xt[r * rs + cp]);
                for (int v = 0; v < NV; v++) acc[r][v] = pair_step(acc[r][v], a, b[v], dot);
            }
        }
    }
    if (BF)
        fx_bf16_store_rows(MR, NV, acc, ob, ldb, rows, nout);
    else
        store_rows(MR, NV, acc, out, ldo, rows, last);
}

#define FWD_TILE_FN(MR, NV, DOT, BF)                                                             \
    static void fwd_tile_##MR##x##NV##_##DOT##_##BF(                                             \
        const uint32_t *xb, int64_t Cp, int64_t rs, const int64_t *toff, int64_t ntaps,         \
        const uint32_t *wb, int64_t opad, float *out, int64_t ldo, int rows, __mmask16 last,     \
        uint16_t *ob, int64_t ldb, int nout)                                                     \
    {                                                                                            \
        fwd_tile(MR, NV, DOT, BF, xb, Cp, rs, toff, ntaps, wb, opad, out, ldo, rows, last, ob,   \
                 ldb, nout);                                                                     \
    }
#define FWD_TILE_FNS(BF)                                                                         \
    FWD_TILE_FN(7, 2, 1, BF)                                                                     \
    FWD_TILE_FN(8, 2, 1, BF)                                                                     \
    FWD_TILE_FN(14, 1, 1, BF)                                                                    \
    FWD_TILE_FN(16, 1, 1, BF)                                                                    \
    FWD_TILE_FN(7, 2, 0, BF)                                                                     \
    FWD_TILE_FN(8, 2, 0, BF)                                                                     \
    FWD_TILE_FN(14, 1, 0, BF)                                                                    \
    FWD_TILE_FN(16, 1, 0, BF)
FWD_TILE_FNS(0)
FWD_TILE_FNS(1)

typedef void (*fwd_tile_fn)(const uint32_t *, int64_t, int64_t, const int64_t *, int64_t,
                            const uint32_t *, int64_t, float *, int64_t, int, __mmask16, uint16_t *,
                            int64_t, int);

/* [bf16 y][vdpbf16ps][shape: 7 x 2, 8 x 2, 14 x 1, 16 x 1] */
static const fwd_tile_fn fwd_tiles[2][2][4] = {
    {{fwd_tile_7x2_0_0, fwd_tile_8x2_0_0, fwd_tile_14x1_0_0, fwd_tile_16x1_0_0},
     {fwd_tile_7x2_1_0, fwd_tile_8x2_1_0, fwd_tile_14x1_1_0, fwd_tile_16x1_1_0}},
    {{fwd_tile_7x2_0_1, fwd_tile_8x2_0_1, fwd_tile_14x1_0_1, fwd_tile_16x1_0_1},
     {fwd_tile_7x2_1_1, fwd_tile_8x2_1_1, fwd_tile_14x1_1_1, fwd_tile_16x1_1_1}}};

/* The tile of a block of nchan <= 32 output channels over rows of OW pixels: nv vectors of 16
 * channels by mr pixels (7 or 8 by two vectors, 14 or 16 by one: the width that leaves no
 * partial last tile where one does), and its index in fwd_tiles' last dimension */
typedef struct fwd_shape {
    int nv, mr, shape;
} fwd_shape;

static fwd_shape fwd_shape_for(int64_t nchan, int64_t OW)
{
    fwd_shape f;
    f.nv = nchan > 16 ? 2 : 1;
    f.mr = f.nv == 2 ? (OW % 7 == 0 && OW % 8 != 0 ? 7 : 8)
                     : (OW % 14 == 0 && OW % 16 != 0 ? 14 : 16);
    f.shape = f.nv == 2 ? (f.mr == 7 ? 0 : 1) : (f.mr == 14 ? 2 : 3);
    return f;
}

static atomic_int fwd_enabled = 1;
static atomic_llong fwd_calls;

void fx_bf16_fwd_direct_set_enabled(int on)
{
    atomic_store_explicit(&fwd_enabled, on != 0, memory_order_relaxed);
}

int fx_bf16_fwd_direct_enabled(void) { return atomic_load_explicit(&fwd_enabled, memory_order_relaxed); }

long long fx_bf16_fwd_direct_calls(void) { return atomic_load_explicit(&fwd_calls, memory_order_relaxed); }

int fx_bf16_fwd_direct_fits(const struct fx_conv_geom *g)
{
    /* from 8 input channels: below, the pairs' zero halves and the taps' short chains cost
     * more than the patch panels (the CNN's first layer, C = 1, stays on the GEMM); from 16
     * output channels, one whole vector (the CNN's first-layer input gradient as a forward
     * convolution, O = 1, took 14-16 ms here against 2.3 through col2im); any stride whose
     * taps reach every input pixel (KH >= sh, KW >= sw: the patch panels ran ResNet-20's
     * 16 -> 32 stride-2 3x3 layer at about a third of the stride-1 layers' rate per product),
     * but not a 1x1 projection at stride 2, whose patches hold a quarter of the input while
     * the copy holds all of it (its forward pass took 0.6-1.05 ms here against 0.48 on the
     * panels, one thread, other formats' passes in between) */
    return g->sh >= 1 && g->sw >= 1 && g->KH >= g->sh && g->KW >= g->sw && g->dh == 1 &&
           g->dw == 1 && g->C >= 8 && g->O >= 16 && g->KH * g->KW <= FX_FWD_MAX_TAPS;
}

int64_t fx_bf16_fwd_direct_scratch(const struct fx_conv_geom *g, int64_t nb)
{
    const int64_t Cp = (g->C + 1) / 2, HW = (g->H + 2 * g->ph) * (g->W + 2 * g->pw);
    /* the copy, the tiles' overrun past its end (a last tile's spare rows and their taps), 16
     * spare words for alignment */
    return nb * HW * Cp + (FX_FWD_MAX_MR * g->sw + g->KW) * Cp + 16;
}

void fx_bf16_fwd_direct(const struct fx_conv_geom *g, const uint16_t *x, int64_t nbc,
                        const uint32_t *wq, uint32_t wkey, uint32_t *scratch, float *y,
                        uint16_t *ybf, int nthreads)
{
    atomic_fetch_add_explicit(&fwd_calls, 1, memory_order_relaxed);
    const int64_t C = g->C, O = g->O, Cp = (C + 1) / 2, opad = (O + 15) / 16 * 16;
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, HW = Hp * Wp;
    const int64_t OH = g->OH, OW = g->OW, P = OH * OW, KK = g->KH * g->KW;
    uint32_t *xq = scratch + ((16 - ((uintptr_t)scratch / 4) % 16) % 16);
    const int64_t sh = g->sh, sw = g->sw, slack = (FX_FWD_MAX_MR * sw + g->KW) * Cp;
    fx_bf16_pair_nhwc(g, x, nbc, xq);
    memset(xq + nbc * HW * Cp, 0, sizeof(uint32_t) * (size_t)slack);
    /* the padding's zeros would not count for conditions (i) and (ii) either */
    const uint32_t kx = fx_bf16_minkey_avx512(x, nbc * C * g->H * g->W);
    const int dot = fx_bf16_dot_enabled() && kx + wkey >= FX_BF16_DOT_MIN_KEYSUM;
    int64_t taps[FX_FWD_MAX_TAPS]; /* word offsets of the taps from a pixel's top-left one */
    for (int64_t t = 0; t < KK; t++) taps[t] = ((t / g->KW) * Wp + t % g->KW) * Cp;
    for (int64_t o0 = 0; o0 < O; o0 += 32) {
        const int64_t ow = O - o0 < 32 ? O - o0 : 32;
        const fwd_shape fs = fwd_shape_for(ow, OW); /* never past opad */
        const int nv = fs.nv, mr = fs.mr;
        const fwd_tile_fn fn = fwd_tiles[ybf != NULL][dot][fs.shape];
        const int64_t tail = ow - 16 * (nv - 1);
        const __mmask16 last = (__mmask16)(tail >= 16 ? 0xFFFF : tail <= 0 ? 0 : (1u << tail) - 1);
        /* threads split the output rows (each output is one thread's chain either way) */
        (void)nthreads;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1)
#endif
        for (int64_t row = 0; row < nbc * OH; row++)
            for (int64_t n = row / OH, oh = row % OH, ow0 = 0; ow0 < OW; ow0 += mr) {
                    const int rows = OW - ow0 < mr ? (int)(OW - ow0) : mr;
                    fn(xq + (n * HW + oh * sh * Wp + ow0 * sw) * Cp, Cp, sw * Cp, taps, KK, wq + o0, opad,
                       ybf ? NULL : y + (n * P + oh * OW + ow0) * O + o0, O, rows, last,
                       ybf ? ybf + (n * O + o0) * P + oh * OW + ow0 : NULL, P, (int)ow);
                }
    }
}

/* ---- the input gradient at stride 2 by phases ------------------------------------------------
 * (bf16_gemm.h) The four phases (rh, rw) run the forward tiles above on one pair-last copy of
 * the chunk's dy, padded on each side by the most any phase reads past it, each phase with its
 * taps' weights packed as the forward kernel packs them, its outputs rounded into a quarter
 * plane per channel; the quarter planes are then interleaved into dx's rows. Why: the pair
 * GEMM's product W^T dy (patches of O values) and col2im's scatter-add took ResNet-20's
 * stride-2 3x3 input gradients at about a third of the stride-1 layers' rate per product. */

/* the phases' axes (rows r = 0, 1 and columns), and the copy's padding (pad: rows, pad_w) */
static void s2_axes(const struct fx_conv_geom *g, fx_bf16_s2_axis ah[2], fx_bf16_s2_axis aw[2],
                    int64_t *pad_h, int64_t *pad_w)
{
    *pad_h = *pad_w = 0;
    for (int r = 0; r < 2; r++) {
        fx_bf16_s2_axis_make(r, g->KH, g->ph, g->H, &ah[r]);
        fx_bf16_s2_axis_make(r, g->KW, g->pw, g->W, &aw[r]);
        /* dy rows a + d for a < n, d in [d0, d0 + taps): those outside [0, OH) are padding */
        const int64_t lo_h = -ah[r].d0, hi_h = ah[r].n + ah[r].d0 + ah[r].taps - 1 - g->OH;
        const int64_t lo_w = -aw[r].d0, hi_w = aw[r].n + aw[r].d0 + aw[r].taps - 1 - g->OW;
        *pad_h = lo_h > *pad_h ? lo_h : *pad_h;
        *pad_h = hi_h > *pad_h ? hi_h : *pad_h;
        *pad_w = lo_w > *pad_w ? lo_w : *pad_w;
        *pad_w = hi_w > *pad_w ? hi_w : *pad_w;
    }
}

int fx_bf16_dgrad_s2_fits(const struct fx_conv_geom *g)
{
    return g->sh == 2 && g->sw == 2 && g->dh == 1 && g->dw == 1 && g->KH >= 2 && g->KW >= 2 &&
           g->KH <= 2 * FX_BF16_S2_MAX_TAPS && g->KW <= 2 * FX_BF16_S2_MAX_TAPS &&
           g->H % 2 == 0 && g->W % 2 == 0 && g->H >= 2 && g->W >= 2 && g->O >= 8 && g->C >= 16;
}

/* words of phase q's packed weights (taps th x tw, dy's O channels in pairs, dx's C padded to
 * whole vectors) */
static int64_t s2_phase_words(const struct fx_conv_geom *g, const fx_bf16_s2_axis *a,
                              const fx_bf16_s2_axis *b)
{
    return a->taps * b->taps * ((g->O + 1) / 2) * ((g->C + 15) / 16 * 16);
}

int64_t fx_bf16_dgrad_s2_weights_numel(const struct fx_conv_geom *g)
{
    fx_bf16_s2_axis ah[2], aw[2];
    int64_t ph, pw, n = 0;
    s2_axes(g, ah, aw, &ph, &pw);
    for (int q = 0; q < 4; q++) n += s2_phase_words(g, &ah[q / 2], &aw[q % 2]);
    return n;
}

/* phase q's weights at wq + the words of the phases before it: for tap (i, j) and dy channel
 * pair cp, the pair words (w[2cp][c][ki][kj], w[2cp + 1][c][ki][kj]) of dx's channels c, as
 * fx_bf16_fwd_direct_pack_weights packs a forward kernel whose input channels are dy's */
uint32_t fx_bf16_dgrad_s2_pack_weights(const struct fx_conv_geom *g, const uint16_t *w,
                                       uint32_t *wq)
{
    fx_bf16_s2_axis ah[2], aw[2];
    int64_t ph, pw;
    s2_axes(g, ah, aw, &ph, &pw);
    const int64_t O = g->O, C = g->C, Op = (O + 1) / 2, cpad = (C + 15) / 16 * 16;
    const int64_t KK = g->KH * g->KW;
    uint32_t *dst = wq;
    for (int q = 0; q < 4; q++) {
        const fx_bf16_s2_axis *a = &ah[q / 2], *b = &aw[q % 2];
        for (int64_t i = 0; i < a->taps; i++)
            for (int64_t j = 0; j < b->taps; j++)
                for (int64_t op = 0; op < Op; op++, dst += cpad)
                    for (int64_t c = 0; c < cpad; c++) {
                        const int64_t t = a->k[i] * g->KW + b->k[j];
                        const uint32_t e = c < C ? w[(2 * op * C + c) * KK + t] : 0u;
                        const uint32_t d =
                            c < C && 2 * op + 1 < O ? w[((2 * op + 1) * C + c) * KK + t] : 0u;
                        dst[c] = e | d << 16;
                    }
    }
    return fx_bf16_minkey_avx512((const uint16_t *)(const void *)wq,
                                 2 * fx_bf16_dgrad_s2_weights_numel(g));
}

int64_t fx_bf16_dgrad_s2_scratch(const struct fx_conv_geom *g, int64_t nb)
{
    fx_bf16_s2_axis ah[2], aw[2];
    int64_t ph, pw;
    s2_axes(g, ah, aw, &ph, &pw);
    const int64_t Op = (g->O + 1) / 2, HWp = (g->OH + 2 * ph) * (g->OW + 2 * pw);
    /* the copy, the tiles' overrun past its end, the quarter planes (nb C H W bf16 values in
     * all), 16 spare words for alignment */
    return nb * HWp * Op + (FX_FWD_MAX_MR + g->KW) * Op + (nb * g->C * g->H * g->W + 1) / 2 + 16;
}

void fx_bf16_dgrad_s2_copy(const struct fx_conv_geom *g, const uint16_t *dy, int64_t nbc,
                           uint32_t *scratch, fx_bf16_s2_chunk *k)
{
    s2_axes(g, k->ah, k->aw, &k->ph, &k->pw);
    const int64_t O = g->O, C = g->C, Op = (O + 1) / 2;
    k->Op = Op;
    k->cpad = (C + 15) / 16 * 16;
    k->Wp = g->OW + 2 * k->pw;
    k->HWp = (g->OH + 2 * k->ph) * k->Wp;
    const int64_t HWp = k->HWp, slack = (FX_FWD_MAX_MR + g->KW) * Op;
    /* dy's copy, as the forward kernel copies an input of O channels padded by (ph, pw) */
    const struct fx_conv_geom gc = {.N = nbc, .C = O, .H = g->OH, .W = g->OW, .ph = k->ph,
                                    .pw = k->pw};
    uint32_t *xq = scratch + ((16 - ((uintptr_t)scratch / 4) % 16) % 16);
    uint16_t *quarters = (uint16_t *)(void *)(xq + nbc * HWp * Op + slack);
    fx_bf16_pair_nhwc(&gc, dy, nbc, xq);
    memset(xq + nbc * HWp * Op, 0, sizeof(uint32_t) * (size_t)slack);
    k->xq = xq;
    for (int q = 0; q < 4; q++) {
        k->q[q / 2][q % 2] = quarters;
        quarters += nbc * C * k->ah[q / 2].n * k->aw[q % 2].n;
    }
}

void fx_bf16_dgrad_s2_interleave(const struct fx_conv_geom *g, const fx_bf16_s2_chunk *k,
                                 int64_t nbc, uint16_t *dx)
{
    /* each dx row from its parity's two phases, columns interleaved: a pair word per column
     * pair (W even, so both phases' rows hold W / 2 values) */
    const int64_t C = g->C, H = g->H, W = g->W, half = W / 2;
    for (int64_t pl = 0; pl < nbc * C; pl++)
        for (int64_t h = 0; h < H; h++) {
            const int rh = (int)(h % 2);
            const int64_t row = (pl * k->ah[rh].n + h / 2) * half;
            const uint16_t *e = k->q[rh][0] + row, *o = k->q[rh][1] + row;
            uint32_t *d = (uint32_t *)(void *)(dx + (pl * H + h) * W);
            int64_t b = 0;
            for (; b + 16 <= half; b += 16) {
                const __m256i ev = _mm256_loadu_si256((const __m256i *)(const void *)(e + b));
                const __m256i ov = _mm256_loadu_si256((const __m256i *)(const void *)(o + b));
                const __m512i v = _mm512_or_si512(
                    _mm512_cvtepu16_epi32(ev), _mm512_slli_epi32(_mm512_cvtepu16_epi32(ov), 16));
                _mm512_storeu_si512((void *)(d + b), v);
            }
            for (; b < half; b++) d[b] = (uint32_t)e[b] | (uint32_t)o[b] << 16;
        }
}

void fx_bf16_dgrad_s2_direct(const struct fx_conv_geom *g, const uint16_t *dy, int64_t nbc,
                             const uint32_t *wq, uint32_t wkey, uint32_t *scratch,
                             uint16_t *dx)
{
    fx_bf16_s2_chunk k;
    fx_bf16_dgrad_s2_copy(g, dy, nbc, scratch, &k);
    const int64_t C = g->C, Op = k.Op, cpad = k.cpad, Wp = k.Wp, HWp = k.HWp;
    const uint32_t *xq = k.xq;
    const uint32_t kd = fx_bf16_minkey_avx512(dy, nbc * g->O * g->OH * g->OW);
    const int dot = fx_bf16_dot_enabled() && kd + wkey >= FX_BF16_DOT_MIN_KEYSUM;
    const uint32_t *wp = wq;
    for (int q = 0; q < 4; q++) {
        const fx_bf16_s2_axis *a = &k.ah[q / 2], *b = &k.aw[q % 2];
        const int64_t nh = a->n, nw = b->n, Pq = nh * nw, ntaps = a->taps * b->taps;
        uint16_t *out = k.q[q / 2][q % 2];
        int64_t taps[FX_BF16_S2_MAX_TAPS * FX_BF16_S2_MAX_TAPS];
        for (int64_t i = 0; i < a->taps; i++)
            for (int64_t j = 0; j < b->taps; j++) taps[i * b->taps + j] = (i * Wp + j) * Op;
        for (int64_t o0 = 0; o0 < C; o0 += 32) {
            const int64_t oc = C - o0 < 32 ? C - o0 : 32;
            const fwd_shape fs = fwd_shape_for(oc, nw); /* never past cpad */
            const int mr = fs.mr;
            const fwd_tile_fn fn = fwd_tiles[1][dot][fs.shape];
            for (int64_t n = 0; n < nbc; n++)
                for (int64_t r = 0; r < nh; r++) {
                    /* output (r, b0)'s first tap reads dy (r + d0, b0 + d0) of the copy */
                    const uint32_t *xr =
                        xq + (n * HWp + (r + a->d0 + k.ph) * Wp + b->d0 + k.pw) * Op;
                    for (int64_t b0 = 0; b0 < nw; b0 += mr) {
                        const int rows = nw - b0 < mr ? (int)(nw - b0) : mr;
                        fn(xr + b0 * Op, Op, Op, taps, ntaps, wp + o0, cpad, NULL, 0, rows, 0,
                           out + (n * C + o0) * Pq + r * nw + b0, Pq, (int)oc);
                    }
                }
        }
        wp += s2_phase_words(g, a, b);
    }
    fx_bf16_dgrad_s2_interleave(g, &k, nbc, dx);
}
