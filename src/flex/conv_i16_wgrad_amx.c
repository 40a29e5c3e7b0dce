/* The exact int16 weight gradient of one convolution chunk on AMX-INT8 tiles read in place:
 * conv.i16_wgrad_amx of the AVX-512 level where the AMX integer GEMM is installed
 * (src/cpu/avx512.c), taken by src/nn/conv2d.c while fx_gemm_i16_amx_on() and
 * fx_i16_wgrad_amx_fits.
 *
 * Why: the AMX GEMM route makes its A tiles (the transposed patch matrix: a row per weight, a
 * column per pixel) with a masked load per run of pixels, and its K tiles stop at each output
 * row's end; ResNet-20's 16-channel layers' weight gradients took as long as their forward
 * passes on vpdpwssd. Here, per image and per kernel column kw, the rows of the padded input
 * are made shifted by kw and cut to OW values (the byte planes Xkw[c][ih][ow] = xpad(c, ih,
 * ow + kw)), so that for a tap (kh, kw) the values every output pixel meets are one
 * contiguous run per channel, Xkw[c][kh OW + p] for p < P, across output rows. The copies are
 * made straight from the unpadded chunk, the padding written as zeros in the same pass, so no
 * padded copy of the chunk goes out to memory and is read back. A tiles are 64 of them for 16
 * channels, rows a channel's copy apart; dy's values, four consecutive pixels per 32-bit word
 * of each output channel (dyq[q][o] = plane(dy[o][4q .. 4q + 3]), zeros past P), give the B
 * tiles. Every tile product then takes a whole 64 values of k.
 *
 * Arithmetic (as the AMX GEMM's, src/flex/gemm_i16_amx.c): each value split into its signed
 * high and unsigned low byte; four int32 tiles take HH, HL, LH and LL over a block of images
 * (at most FX_I16_AMX_WGRAD_MAX_P pixels with the images' tails, so no sum wraps), then 65536 HH
 * + 256 (HL + LH) + LL is added in int64 to the chunk's sums. The tile products past P read whatever follows a run
 * (another channel's copy, or the buffer's slack) against dy's zero words: they add nothing.
 * Exact sums, so the bits are the other kernels'.
 *
 * Stride 2 (both axes) the same way, the stride folded into the copies: per kernel column kw
 * and row phase rh, Xkw,rh[c][a][ow] = xpad(c, 2 a + rh, 2 ow + kw), so that tap (kh, kw)
 * meets the run Xkw,(kh mod 2)[c][(kh div 2) OW + p]. Before, a stride-2 weight gradient took
 * the patch rows and the AMX GEMM (ResNet-20's 16 -> 32 opener: 1.5 ms at two threads, where
 * the stride-1 32 -> 32 layer, twice its products, took 1.0).
 *
 * Tiles: tmm0-3 the accumulators of one output tile (16 channels c of one tap, 16 output
 * channels), tmm4-5 its A tiles (high, low), tmm6-7 its B tiles. */
#include "../core/amx_tiles.h"
#include "../core/lanes_avx512.h" /* fx_zero_bytes */
#include "../core/pair_copy_avx512.h"
#include "../core/prefetch.h"
#include "../nn/im2col.h"
#include "amx_i16_sums.h"
#include "conv_i16.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

enum { TILE_BYTES = 1024 };

/* The copies read x's and dy's images in order, a line at a time with work between the
 * loads; each load prefetches the line this many bytes on (into the next image at an image's
 * end: the chunk's images are consecutive). */
#define FX_WGRAD_AHEAD 2048

static atomic_llong amx_wgrad_calls;

long long fx_i16_wgrad_amx_calls(void)
{
    return atomic_load_explicit(&amx_wgrad_calls, memory_order_relaxed);
}

int fx_i16_wgrad_amx_fits(const struct fx_conv_geom *g)
{
    return ((g->sh == 1 && g->sw == 1) || (g->sh == 2 && g->sw == 2)) && g->dh == 1 &&
           g->dw == 1 && g->C >= 16 && g->C % 16 == 0 &&
           g->O >= 16 && g->O % 16 == 0 && g->OH * g->OW <= FX_I16_AMX_WGRAD_MAX_P &&
           g->KH * g->KW <= FX_I16_FWD_MAX_TAPS;
}

/* Pixels of one image rounded up to whole tiles of k */
static int64_t p64(const struct fx_conv_geom *g) { return (g->OH * g->OW + 63) / 64 * 64; }

/* Grid copies (stride 1): k runs over the positions v = oh Wp + ow of the padded grid (Wp the
 * padded width, ow < Wp) rather than over the output pixels, dy being zero at the KW - 1
 * positions past each row's end. The input a tap (kh, kw) meets at position v is then
 * xpad(c, v + kh Wp + kw) for every tap, so one padded copy of each channel serves all KW
 * kernel columns, where the shifted copies write KW of them; the price is the positions past
 * the rows' ends, which the tile products take too. Why: on ResNet-20's 16-channel layers the
 * shifted copies took more of this kernel's time than its tile products. Taken where the
 * positions, in whole tiles of 64, are at most an eighth more than the pixels (32 x 32: 1,088
 * against 1,024; the CNN's 14 x 14 conv2: 256 against 256); narrower rows (16 x 16: 320
 * against 256) keep the shifted copies. */
static int64_t grid_q64(const struct fx_conv_geom *g)
{
    const int64_t Wp = g->W + 2 * g->pw;
    return ((g->OH - 1) * Wp + g->OW + 63) / 64 * 64;
}

static int grid_mode(const struct fx_conv_geom *g)
{
    const int64_t Wp = g->W + 2 * g->pw, Hp = g->H + 2 * g->ph;
    return g->sh == 1 && g->sw == 1 && g->OW == Wp - g->KW + 1 && g->OH == Hp - g->KH + 1 &&
           8 * grid_q64(g) <= 9 * p64(g);
}

/* k values of one image: grid positions or pixels, in whole tiles of 64 */
static int64_t k_per_image(const struct fx_conv_geom *g)
{
    return grid_mode(g) ? grid_q64(g) : p64(g);
}

/* Bytes of one channel's grid copy in one plane: the padded image, and the slack a last tile
 * of k reads past it (at most 63 positions) */
static int64_t grid_plane(const struct fx_conv_geom *g)
{
    return (g->H + 2 * g->ph) * (g->W + 2 * g->pw) + 64;
}

/* Lanes [first, end) of 32 (none where end <= first) */
static inline __mmask32 lane_run(int64_t first, int64_t end)
{
    if (end <= first) return 0;
    const uint64_t upto = end >= 32 ? 0xFFFFFFFFull : (1ull << end) - 1;
    return (__mmask32)(upto & ~((1ull << first) - 1));
}

/* Rows of one copy of x: the padded rows (stride 1), or those of one row phase (stride 2) */
static int64_t copy_rows(const struct fx_conv_geom *g)
{
    return (g->H + 2 * g->ph + g->sh - 1) / g->sh;
}

/* Bytes of one image's copies: the shifted byte planes of x (KW x sh phases x 2 planes x C x
 * rows x OW) and dy's words (2 planes x P64 x O) */
static int64_t image_bytes(const struct fx_conv_geom *g)
{
    if (grid_mode(g)) return 2 * g->C * grid_plane(g) + 2 * grid_q64(g) * g->O;
    return g->KW * g->sh * 2 * g->C * copy_rows(g) * g->OW + 2 * p64(g) * g->O;
}

/* 32 values of an image row at columns col, col + 2, ..., col + 62 (zero outside [0, W)) */
static inline __m512i load_even32(const int16_t *row, int64_t col, int64_t W)
{
    static const int16_t ix[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20,
                                   22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42,
                                   44, 46, 48, 50, 52, 54, 56, 58, 60, 62};
    __m512i v[2];
    for (int h = 0; h < 2; h++) { /* columns col + 32 h + j, j < 32 */
        const int64_t c0 = col + 32 * h;
        const int64_t first = c0 < 0 ? -c0 : 0, end = W - c0 < 32 ? W - c0 : 32;
        const __mmask32 m = lane_run(first, end);
        v[h] = m ? _mm512_maskz_loadu_epi16(m, (const void *)((uintptr_t)row + 2 * c0))
                 : _mm512_setzero_si512();
    }
    return _mm512_permutex2var_epi16(v[0], _mm512_loadu_si512((const void *)ix), v[1]);
}

/* Images whose copies are made before the tiles run over them all: as many as keep the int32
 * sums from wrapping (FX_I16_AMX_WGRAD_MAX_P pixels) and the copies within about 1 MiB (L2),
 * at least one. Fewer blocks, fewer combinations of the accumulators into int64 (ResNet-20's
 * 8 x 8 layers: one tile product per tile and image). */
static int64_t block_images(const struct fx_conv_geom *g, int64_t nb)
{
    int64_t k = FX_I16_AMX_WGRAD_MAX_P / k_per_image(g);
    const int64_t by = ((int64_t)1 << 20) / image_bytes(g);
    if (by < k) k = by;
    if (nb < k) k = nb;
    return k > 0 ? k : 1;
}

/* Bytes of one padded input row's byte plane as copy_x_s1 makes it: the row with pw zeros
 * each side, and the slack a 32-byte window read at its last kernel column runs into */
static int64_t row_bytes(const struct fx_conv_geom *g) { return g->W + 2 * g->pw + 64; }

int64_t fx_i16_wgrad_amx_scratch(const struct fx_conv_geom *g, int64_t nb)
{
    /* bytes: a block's copies, 64 bytes of slack after x's, the staging of one image's dy
     * bytes before their transpose (2 planes x O x P64), one channel's padded rows in two
     * byte planes (copy_x_s1), alignment */
    const int64_t bytes = block_images(g, nb) * image_bytes(g) + 64 + 2 * k_per_image(g) * g->O +
                          2 * g->H * row_bytes(g) + 256;
    return bytes / 4 + 1;
}

/* n > 0 bytes of two planes' vectors vh and vl into h and l: 32 plain, fewer masked */
static inline void store_planes32(int8_t *h, int8_t *l, int64_t n, __m256i vh, __m256i vl)
{
    if (n >= 32) {
        _mm256_storeu_si256((void *)h, vh);
        _mm256_storeu_si256((void *)l, vl);
    } else {
        _mm256_mask_storeu_epi8(h, lane_run(0, n), vh);
        _mm256_mask_storeu_epi8(l, lane_run(0, n), vl);
    }
}

/* The stride-1 copies of one image's x (xi: its block slot), Xkw[c][ih][ow] = xpad(c, ih, ow +
 * kw): per channel, each input row's two byte planes are made once, with its padding, into
 * rows (H rows of row_bytes, high planes then low; their padding and slack zeroed by the
 * caller), and then each kernel column's copy of a row is a window of them kw bytes in. Before,
 * each of the KW copies loaded and split the row again, with its lane masks worked out per row
 * and column: in a ResNet-20 DFP16 step that copy was over half of this kernel's samples. The
 * windows are read after the whole channel's rows are written, not row by row: a window read
 * straight after the masked stores it overlaps waits for them to reach the cache (no store
 * forwards to a load it does not contain). */
static void copy_x_s1(const struct fx_conv_geom *g, const int16_t *xn, int8_t *xi, int64_t plane,
                      int8_t *rows)
{
    const int64_t C = g->C, H = g->H, W = g->W, ph = g->ph, pw = g->pw, OW = g->OW;
    const int64_t KW = g->KW, Hc = copy_rows(g), rb = row_bytes(g);
    const __mmask32 tail_w = lane_run(0, W % 32);
    int8_t *rowh = rows, *rowl = rows + H * rb;
    for (int64_t c = 0; c < C; c++) {
        /* inline rather than fx_conv_byte_planes_avx512: a call per row of 8 or 16 values made
         * the 64-channel 8 x 8 layer's copies 8 % slower */
        for (int64_t r = 0; r < H; r++) {
            const int16_t *row = xn + (c * H + r) * W;
            for (int64_t w0 = 0; w0 < W; w0 += 32) {
                fx_prefetch_at(row + w0, FX_WGRAD_AHEAD);
                const __mmask32 m = W - w0 >= 32 ? (__mmask32)0xFFFFFFFFu : tail_w;
                const __m512i v = _mm512_maskz_loadu_epi16(m, row + w0);
                _mm256_mask_storeu_epi8(rowh + r * rb + pw + w0, m,
                                        _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
                _mm256_mask_storeu_epi8(rowl + r * rb + pw + w0, m, _mm512_cvtepi16_epi8(v));
            }
        }
        for (int64_t ih = 0; ih < Hc; ih++) {
            const int64_t r = ih - ph;
            int8_t *h0 = xi + (c * Hc + ih) * OW; /* kw's copy: h0 + 2 kw plane */
            for (int64_t kw = 0; kw < KW; kw++) {
                int8_t *h = h0 + 2 * kw * plane, *l = h + plane;
                if (r < 0 || r >= H) {
                    fx_zero_bytes(h, OW);
                    fx_zero_bytes(l, OW);
                    continue;
                }
                const int8_t *sh = rowh + r * rb + kw, *sl = rowl + r * rb + kw;
                for (int64_t ow = 0; ow < OW; ow += 32)
                    store_planes32(h + ow, l + ow, OW - ow,
                                   _mm256_loadu_si256((const void *)(sh + ow)),
                                   _mm256_loadu_si256((const void *)(sl + ow)));
            }
        }
    }
}

/* The stride-2 copies of one image's x (xi: its block slot), Xkw,rh[c][a][ow] = xpad(c, 2 a +
 * rh, 2 ow + kw), padded here (a masked load reads only the lanes inside the image) */
static void copy_x_s2(const struct fx_conv_geom *g, const int16_t *xn, int8_t *xi, int64_t plane)
{
    const int64_t C = g->C, H = g->H, W = g->W, ph = g->ph, pw = g->pw, OW = g->OW;
    const int64_t KW = g->KW, Hc = copy_rows(g);
    for (int64_t c = 0; c < C; c++)
        for (int64_t ih = 0; ih < 2 * Hc; ih++) {
            const int64_t r = ih - ph, rh = ih % 2, a = ih / 2;
            for (int64_t kw = 0; kw < KW; kw++) {
                int8_t *h = xi + ((kw * 2 + rh) * 2) * plane + (c * Hc + a) * OW;
                int8_t *l = h + plane;
                if (r < 0 || r >= H) {
                    fx_zero_bytes(h, OW);
                    fx_zero_bytes(l, OW);
                    continue;
                }
                const int16_t *row = xn + (c * H + r) * W;
                for (int64_t ow = 0; ow < OW; ow += 32) {
                    /* lane j reads column 2 (ow + j) + kw - pw */
                    const __m512i v = load_even32(row, 2 * ow + kw - pw, W);
                    store_planes32(h + ow, l + ow, OW - ow,
                                   _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)),
                                   _mm512_cvtepi16_epi8(v));
                }
            }
        }
}

/* The grid copy of one image's x (xi: its block slot): per plane and channel, the padded
 * image's Hp x Wp bytes (zeros outside the image) and the 64 bytes of slack after them, zero
 * (grid_plane bytes a channel, the low plane cplane bytes after the high one) */
static void copy_x_grid(const struct fx_conv_geom *g, const int16_t *xn, int8_t *xi,
                        int64_t cplane)
{
    const int64_t C = g->C, H = g->H, W = g->W, ph = g->ph, pw = g->pw, Wp = W + 2 * pw;
    const int64_t gp = grid_plane(g);
    memset(xi, 0, 2 * (size_t)cplane);
    const __mmask32 tail_w = lane_run(0, W % 32);
    for (int64_t c = 0; c < C; c++)
        for (int64_t r = 0; r < H; r++) {
            const int16_t *row = xn + (c * H + r) * W;
            int8_t *h = xi + c * gp + (r + ph) * Wp + pw, *l = h + cplane;
            for (int64_t w0 = 0; w0 < W; w0 += 32) {
                fx_prefetch_at(row + w0, FX_WGRAD_AHEAD);
                const __mmask32 m = W - w0 >= 32 ? (__mmask32)0xFFFFFFFFu : tail_w;
                const __m512i v = _mm512_maskz_loadu_epi16(m, row + w0);
                _mm256_mask_storeu_epi8(h + w0, m, _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
                _mm256_mask_storeu_epi8(l + w0, m, _mm512_cvtepi16_epi8(v));
            }
        }
}

/* One image's dy as the staging tq [pl][O][K] of its bytes at the k positions (pixels, or grid
 * positions with zeros past each row's end), zeros up to K */
static void stage_dy(const struct fx_conv_geom *g, const int16_t *dn, int8_t *tq, int64_t K,
                     int grid)
{
    const int64_t O = g->O, OW = g->OW, P = g->OH * OW, Wp = g->W + 2 * g->pw;
    if (grid) {
        memset(tq, 0, 2 * (size_t)(O * K));
        const __mmask32 tail = lane_run(0, OW % 32);
        for (int64_t o = 0; o < O; o++) {
            int8_t *th = tq + o * K, *tl = tq + (O + o) * K;
            for (int64_t oh = 0; oh < g->OH; oh++) {
                const int16_t *row = dn + o * P + oh * OW;
                for (int64_t w0 = 0; w0 < OW; w0 += 32) {
                    fx_prefetch_at(row + w0, FX_WGRAD_AHEAD);
                    const __mmask32 m = OW - w0 >= 32 ? (__mmask32)0xFFFFFFFFu : tail;
                    const __m512i v = _mm512_maskz_loadu_epi16(m, row + w0);
                    _mm256_mask_storeu_epi8(th + oh * Wp + w0, m,
                                            _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
                    _mm256_mask_storeu_epi8(tl + oh * Wp + w0, m, _mm512_cvtepi16_epi8(v));
                }
            }
        }
        return;
    }
    for (int64_t o = 0; o < O; o++) {
        int8_t *th = tq + o * K, *tl = tq + (O + o) * K;
        for (int64_t p0 = 0; p0 < K; p0 += 32) {
            fx_prefetch_at(dn + o * P + p0, FX_WGRAD_AHEAD);
            const int64_t left = P - p0;
            const __mmask32 m =
                (__mmask32)(left >= 32 ? 0xFFFFFFFFu : left <= 0 ? 0u : (1u << left) - 1u);
            const __m512i v = _mm512_maskz_loadu_epi16(m, dn + o * P + p0);
            _mm256_store_si256((void *)(th + p0), _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
            _mm256_store_si256((void *)(tl + p0), _mm512_cvtepi16_epi8(v));
        }
    }
}

int fx_i16_wgrad_amx(const struct fx_conv_geom *g, const int16_t *x, const int16_t *dy,
                     int64_t nbc, uint32_t *scratch, int64_t *dwt, int add)
{
    atomic_fetch_add_explicit(&amx_wgrad_calls, 1, memory_order_relaxed);
    const int64_t C = g->C, O = g->O, KH = g->KH, KW = g->KW, KK = KH * KW;
    const int64_t H = g->H, W = g->W, OH = g->OH, OW = g->OW;
    const int64_t S = g->sh, Hc = copy_rows(g); /* stride; rows of a copy */
    const int64_t P = OH * OW, grid = grid_mode(g), P64 = k_per_image(g);
    const int64_t nbi = block_images(g, nbc);
    /* per block: xs[(((i KW + kw) S + rh) 2 + pl) plane + (c Hc + a) OW + ow] for image i of
     * the block (padded row S a + rh; with grid copies xs[(i 2 + pl) plane + c gp + ih Wp +
     * iw]), then 64 bytes of slack; dq[(i 2 + pl) P64 O + 4 (q O + o)] (P64: the k values of an
     * image); tq one image's staging [pl][O][P64] */
    const int64_t Wp = W + 2 * g->pw, gp = grid_plane(g);
    const int64_t plane = grid ? C * gp : C * Hc * OW;
    const int64_t ximg = grid ? 2 * plane : KW * S * 2 * plane, dimg = 2 * P64 * O;
    int8_t *xs = (int8_t *)(void *)scratch;
    xs += (64 - (uintptr_t)xs % 64) % 64;
    int8_t *dq = xs + nbi * ximg + 64;
    dq += (64 - (uintptr_t)dq % 64) % 64;
    int8_t *tq = dq + nbi * dimg;
    /* copy_x_s1's padded row planes: their padding and slack zero, each row's bytes written
     * in place for each channel */
    int8_t *xrows = tq + 2 * P64 * O;
    if (S == 1 && !grid) memset(xrows, 0, 2 * (size_t)(H * row_bytes(g)));
    memset(xs + nbi * ximg, 0, 64);
    if (!add) memset(dwt, 0, sizeof(int64_t) * (size_t)(C * KK * O));
    const unsigned char rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    const unsigned short colsb[8] = {64, 64, 64, 64, 64, 64, 64, 64};
    fx_amx_tiles_configure_shapes(rows, colsb);
    int32_t acc[4][256] __attribute__((aligned(64)));
    for (int64_t n0 = 0; n0 < nbc; n0 += nbi) {
        const int64_t ni = nbc - n0 < nbi ? nbc - n0 : nbi;
        for (int64_t i = 0; i < ni; i++) {
            /* x's shifted copies, padded: Xkw,rh[c][a][ow] = x(c, S a + rh - ph, S ow + kw -
             * pw), zero outside the image */
            const int16_t *xn = x + (n0 + i) * C * H * W;
            if (grid)
                copy_x_grid(g, xn, xs + i * ximg, plane);
            else if (S == 1)
                copy_x_s1(g, xn, xs + i * ximg, plane, xrows);
            else
                copy_x_s2(g, xn, xs + i * ximg, plane);
            /* dy's words: each output channel's bytes at the k positions, four a word (zeros
             * past P, and with grid copies past each row's end) into tq, then [O][P64 / 4] ->
             * [P64 / 4][O] per plane */
            stage_dy(g, dy + (n0 + i) * O * P, tq, P64, (int)grid);
            for (int pl = 0; pl < 2; pl++)
                fx_pair_planes_transpose_avx512((const uint32_t *)(const void *)(tq + pl * O * P64), O,
                                                P64 / 4, O,
                                                (uint32_t *)(void *)(dq + i * dimg + pl * P64 * O));
        }
        for (int64_t t = 0; t < KK; t++) {
            const int64_t kh = t / KW, kw = t % KW;
            for (int64_t cb = 0; cb < C / 16; cb++)
                for (int64_t ob = 0; ob < O / 16; ob++) {
                    _tile_zero(0);
                    _tile_zero(1);
                    _tile_zero(2);
                    _tile_zero(3);
                    /* A's rows: 16 channels, a channel's copy apart */
                    const int64_t a_off = grid ? cb * 16 * gp + kh * Wp + kw
                                               : ((kw * S + kh % S) * 2) * plane +
                                                     (cb * 16 * Hc + kh / S) * OW;
                    const int64_t a_stride = grid ? gp : Hc * OW;
                    for (int64_t i = 0; i < ni; i++) {
                        const int8_t *ah = xs + i * ximg + a_off;
                        const int8_t *bh = dq + i * dimg + 4 * ob * 16;
                        for (int64_t k0 = 0; k0 < P64; k0 += 64) {
                            fx_amx_i16_step(ah + k0, ah + plane + k0, a_stride, bh + k0 * O,
                                            bh + (P64 + k0) * O, 4 * O);
                        }
                    }
                    fx_amx_i16_store(acc);
                    /* row c of the tile: dW^T row (cb 16 + c) KK + t */
                    int64_t *d = dwt + (cb * 16 * KK + t) * O + ob * 16;
                    for (int r = 0; r < 16; r++)
                        for (int h = 0; h < 2; h++) {
                            const __m512i s = fx_amx_i16_sums8((const int32_t(*)[256])acc, 16 * r + 8 * h);
                            int64_t *dp = d + r * KK * O + 8 * h;
                            _mm512_storeu_si512((void *)dp,
                                                _mm512_add_epi64(_mm512_loadu_si512((const void *)dp), s));
                        }
                }
        }
    }
    _tile_release();
    return 1;
}
