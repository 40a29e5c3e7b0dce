/* The exact int16 forward convolution on AMX-INT8 tiles without patch rows: conv.i16_fwd_amx of
 * the AVX-512 level where the AMX integer GEMM is installed (src/cpu/avx512.c), taken by
 * src/nn/conv2d.c while fx_gemm_i16_amx_on() and fx_i16_fwd_amx_fits.
 *
 * The chunk comes unpadded (conv.i16_fwd_unpadded's contract): each image is transposed
 * channel-last and split into padded byte planes here, with no padded NCHW copy.
 *
 * Why: the AMX GEMM route gathers each tile's patch rows from byte planes of the chunk, and
 * narrower layers (ResNet-20's 16 channels) ran on vpdpwssd; a bf16 convolution whose tiles are
 * read in place ran several times faster than either (bf16_conv_amx.c). Here, in a
 * channel-last copy of the padded chunk split into byte planes, one kernel row (kh) of one
 * output pixel is KW C consecutive bytes per plane, so 16 pixels of one output row give 16
 * tile rows sw C bytes apart, which tileloadd reads in place; a kernel row longer than 64
 * bytes is cut into equal pieces of kc bytes (a multiple of 4, at most 64). The weights are
 * packed once per convolution into B tiles of the same pieces: kc / 4 quads of k by 16 output
 * channels, per plane.
 *
 * Arithmetic (as the AMX GEMM's, src/flex/gemm_i16_amx.c): each value is split into its signed
 * high byte and unsigned low byte, a = 256 ah + al, and four int32 tiles take HH = sum ah bh
 * (tdpbssd), HL = sum ah bl (tdpbsud), LH = sum al bh (tdpbusd) and LL = sum al bl (tdpbuud)
 * over all C KH KW values of an output (at most FX_I16_AMX_FWD_MAX_K, so LL < 2^31 and nothing
 * wraps); then 65536 HH + 256 (HL + LH) + LL in int64 is the exact sum. Exact sums are the
 * other integer kernels' sums, so the bits are theirs; only the time differs.
 *
 * Tiles: tmm0-3 the four accumulators of one block of 16 pixels (within one output row; a
 * row's last block computes past its end into rows that are not stored) by 16 output
 * channels, tmm4-5 the block's A tiles (high, low) and tmm6-7 the B tiles of one piece. Threads
 * split the blocks; each output is one thread's. */
#include "../core/amx_tiles.h"
#include "../nn/conv_panels.h"
#include "../nn/conv_tile_blocks.h"
#include "../core/lanes_avx512.h"
#include "../core/layout_kernels.h"
#include "../core/prefetch.h"
#include "../nn/im2col.h"
#include "amx_i16_sums.h"
#include "conv_i16.h"
#include "flex_kernels.h"
#include "quant_q64_avx512.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

enum { TILE_BYTES = 1024 };

static atomic_llong amx_fwd_calls;

long long fx_i16_fwd_amx_calls(void)
{
    return atomic_load_explicit(&amx_fwd_calls, memory_order_relaxed);
}

/* The piece of a kernel row a tile product takes: the largest multiple of 4 that divides
 * KW C and is at most 64 (C is a multiple of 16, so 16 always does). */
static int64_t piece_bytes(const struct fx_conv_geom *g)
{
    const int64_t L = g->KW * g->C;
    for (int64_t kc = 64; kc > 4; kc -= 4)
        if (L % kc == 0) return kc;
    return 4;
}

int fx_i16_fwd_amx_fits(const struct fx_conv_geom *g)
{
    return g->C >= 16 && g->C % 16 == 0 && g->O >= 16 && g->O % 16 == 0 && g->dh == 1 &&
           g->dw == 1 && g->sh >= 1 && g->sw >= 1 && g->KH * g->KW <= FX_I16_FWD_MAX_TAPS &&
           g->C * g->KH * g->KW <= FX_I16_AMX_FWD_MAX_K;
}

int64_t fx_i16_fwd_amx_weights_numel(const struct fx_conv_geom *g)
{
    const int64_t npc = g->KW * g->C / piece_bytes(g);
    return g->KH * npc * (g->O / 16) * 2 * TILE_BYTES / 4;
}

void fx_i16_fwd_amx_pack_weights(const struct fx_conv_geom *g, const int16_t *w, uint32_t *wq32)
{
    int8_t *wq = (int8_t *)(void *)wq32;
    const int64_t C = g->C, KH = g->KH, KW = g->KW, kc = piece_bytes(g), npc = KW * C / kc;
    const int64_t nob = g->O / 16;
    memset(wq, 0, 4 * (size_t)fx_i16_fwd_amx_weights_numel(g));
    for (int64_t kh = 0; kh < KH; kh++)
        for (int64_t j = 0; j < npc; j++)
            for (int64_t ob = 0; ob < nob; ob++) {
                int8_t *th = wq + ((kh * npc + j) * nob + ob) * 2 * TILE_BYTES, *tl = th + TILE_BYTES;
                for (int64_t u = 0; u < kc / 4; u++)
                    for (int64_t oo = 0; oo < 16; oo++)
                        for (int64_t e = 0; e < 4; e++) {
                            /* byte kk of the kernel row's piece: tap kw = kk / C, channel c */
                            const int64_t kk = j * kc + 4 * u + e, kw = kk / C, c = kk % C;
                            const int16_t v = w[(((ob * 16 + oo) * C + c) * KH + kh) * KW + kw];
                            th[u * 64 + 4 * oo + e] = (int8_t)(v >> 8);
                            tl[u * 64 + 4 * oo + e] = (int8_t)(uint8_t)(v & 255);
                        }
            }
}

int64_t fx_i16_fwd_amx_scratch(const struct fx_conv_geom *g, int64_t nb)
{
    /* 32-bit words: one image channel-last (H W C int16), then the chunk's two padded byte
     * planes (nb padded images each, with the slack a last block's spare rows read: 16 sw + KW
     * pixels), and spare words for alignment */
    const int64_t n = fx_conv_padded_numel(g, nb), slack = (16 * g->sw + g->KW) * g->C;
    return (2 * g->H * g->W * g->C + 2 * (n + slack) + 256) / 4 + 1;
}

/* The chunk's input as the tiles read it: each image transposed channel-last and split into
 * the byte planes' padded rows, the padding zeroed (one pass over the chunk's values each, no
 * padded NCHW copy); the planes 64-byte aligned, their slack zero. *hi and *lo: the planes. */
static void amx_fwd_planes(const struct fx_conv_geom *g, const int16_t *x, int64_t nbc,
                           uint32_t *scratch, int8_t **hi_out, int8_t **lo_out)
{
    const int64_t C = g->C, H = g->H, W = g->W, ph = g->ph, pw = g->pw;
    const int64_t Wp = W + 2 * pw, HWp = (H + 2 * ph) * Wp;
    const int64_t n = fx_conv_padded_numel(g, nbc), slack = (16 * g->sw + g->KW) * C;
    int16_t *xq = (int16_t *)(void *)scratch;
    xq += (32 - ((uintptr_t)xq / 2) % 32) % 32;
    int8_t *hi = (int8_t *)(void *)(xq + H * W * C);
    hi += (64 - (uintptr_t)hi % 64) % 64;
    int8_t *lo = hi + n + slack;
    /* the next image's lines, a share per row of this one's planes: its channel planes are
     * C short streams that the transpose would otherwise wait on line by line */
    const int64_t image_lines = (C * H * W * 2 + 63) / 64, per_row = (image_lines + H - 1) / H;
    for (int64_t i = 0; i < nbc; i++) {
        fx_transpose16_avx512(x + i * C * H * W, xq, C, H * W);
        int8_t *ih8 = hi + i * HWp * C, *il8 = lo + i * HWp * C;
        fx_zero_bytes(ih8, (ph * Wp + pw) * C);
        fx_zero_bytes(il8, (ph * Wp + pw) * C);
        for (int64_t r = 0; r < H; r++) {
            if (i + 1 < nbc)
                for (int64_t l = r * per_row; l < (r + 1) * per_row && l < image_lines; l++)
                    fx_prefetch_at(x + (i + 1) * C * H * W, 64 * l);
            const int64_t at = ((ph + r) * Wp + pw) * C;
            fx_conv_byte_planes_avx512(xq + r * W * C, W * C, ih8 + at, il8 + at);
            /* this row's right padding and the next row's left (or the bottom rows) */
            const int64_t gap = r + 1 < H ? 2 * pw * C : (pw + ph * Wp) * C;
            fx_zero_bytes(ih8 + at + W * C, gap);
            fx_zero_bytes(il8 + at + W * C, gap);
        }
    }
    memset(hi + n, 0, (size_t)slack);
    memset(lo + n, 0, (size_t)slack);
    *hi_out = hi;
    *lo_out = lo;
}

/* The tile shapes: tmm0-3 16 x 16 int32, tmm4-5 16 rows of kc bytes, tmm6-7 kc / 4 rows */
static void amx_fwd_configure(int64_t kc)
{
    const unsigned char rows[8] = {16, 16, 16, 16, 16, 16, (unsigned char)(kc / 4),
                                   (unsigned char)(kc / 4)};
    const unsigned short colsb[8] = {64, 64, 64, 64, (unsigned short)kc, (unsigned short)kc, 64, 64};
    fx_amx_tiles_configure_shapes(rows, colsb);
}

/* Row blocks or span blocks (conv_tile_blocks.h): span blocks for a whole stride-1 output
 * where they make fewer blocks (ResNet-20's 8 x 8 layers), never for a window of one (the
 * strided input gradient's phases) */
static atomic_llong amx_span_calls;

long long fx_i16_fwd_amx_span_calls(void)
{
    return atomic_load_explicit(&amx_span_calls, memory_order_relaxed);
}

static int amx_span_blocks(const struct fx_conv_geom *g, int64_t oy0, int64_t ox0)
{
    return oy0 == 0 && ox0 == 0 && fx_tile_span_blocks(g);
}

int fx_i16_fwd_amx_tiles_full(const struct fx_conv_geom *g) { return fx_tile_blocks_full(g); }

/* Where a block's outputs go (fx_tile_block_rows), and for a span block the lanes that gather
 * its stored rows into consecutive pixels of the output */
typedef struct amx_block {
    fx_tile_rows r;
    int span;
    __m256i gather;
} amx_block;

/* the offset of block b's first tap in the byte planes */
static inline int64_t amx_fwd_block_base(const struct fx_conv_geom *g, int64_t oy0, int64_t ox0,
                                         int span, int64_t b)
{
    int64_t im;
    const int64_t v = fx_tile_block_origin(g, oy0, ox0, span, b, &im);
    return (im * (g->H + 2 * g->ph) * (g->W + 2 * g->pw) + v) * g->C;
}

static inline void amx_fwd_block_where(const struct fx_conv_geom *g, int span, int64_t b,
                                       amx_block *k)
{
    fx_tile_block_rows(g, span, b, &k->r);
    k->span = span;
    k->gather = _mm256_loadu_si256((const void *)k->r.rows);
}

/* tmm0-3 = the sums of block b's 16 pixels by output channels ob * 16 .. + 15, left in the
 * tiles */
static inline void amx_fwd_block_tiles(const struct fx_conv_geom *g, int64_t oy0, int64_t ox0,
                                       int span, const int8_t *hi, const int8_t *lo,
                                       const int8_t *wb, int64_t b, int64_t ob)
{
    const int64_t C = g->C, KH = g->KH, Wp = g->W + 2 * g->pw;
    const int64_t kc = piece_bytes(g), npc = g->KW * C / kc, nob = g->O / 16;
    const int64_t base = amx_fwd_block_base(g, oy0, ox0, span, b);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t kh = 0; kh < KH; kh++)
        for (int64_t j = 0; j < npc; j++) {
            const int64_t off = base + kh * Wp * C + j * kc;
            const int8_t *tb = wb + ((kh * npc + j) * nob + ob) * 2 * TILE_BYTES;
            fx_amx_i16_step(hi + off, lo + off, g->sw * C, tb, tb + TILE_BYTES, 64);
        }
}

/* tmm0-3 = the sums of block b's 16 pixels by output channels ob * 16 .. + 15, stored into acc;
 * *k set as amx_fwd_block_where sets it */
static inline void amx_fwd_block_at(const struct fx_conv_geom *g, int span, const int8_t *hi,
                                    const int8_t *lo, const int8_t *wb, int64_t b, int64_t ob,
                                    int32_t acc[4][256], amx_block *k)
{
    amx_fwd_block_where(g, span, b, k);
    amx_fwd_block_tiles(g, 0, 0, span, hi, lo, wb, b, ob);
    fx_amx_i16_store(acc);
}

int fx_i16_fwd_amx(const struct fx_conv_geom *g, const int16_t *x, int64_t nbc,
                   const uint32_t *wq, uint32_t *scratch, int64_t *y, int nthreads,
                   uint64_t *ymax)
{
    atomic_fetch_add_explicit(&amx_fwd_calls, 1, memory_order_relaxed);
    const int64_t O = g->O, OW = g->OW, P = g->OH * OW;
    int8_t *hi, *lo;
    amx_fwd_planes(g, x, nbc, scratch, &hi, &lo);
    const int span = amx_span_blocks(g, 0, 0);
    if (span) atomic_fetch_add_explicit(&amx_span_calls, 1, memory_order_relaxed);
    const int64_t nob = O / 16, nblocks = nbc * fx_tile_blocks_per_image(g, span);
    const int8_t *wb = (const int8_t *)(const void *)wq;
    const int64_t kc = piece_bytes(g);
    uint64_t gmax = 0;
    (void)nthreads;
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
#endif
    {
        amx_fwd_configure(kc);
        int32_t acc[4][256] __attribute__((aligned(64)));
        __m512i vmax = _mm512_setzero_si512();
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t b = 0; b < nblocks; b++)
            for (int64_t ob = 0; ob < nob; ob++) {
                amx_block k;
                amx_fwd_block_at(g, span, hi, lo, wb, b, ob, acc, &k);
                /* 65536 HH + 256 (HL + LH) + LL per output, in int64; the t-th stored row is
                 * output pixel q0 + t */
                int64_t *yb = y + (k.r.im * P + k.r.q0) * O + ob * 16;
                for (int r = 0, t = 0; r < 16; r++) {
                    if (!(k.r.stored >> r & 1)) continue;
                    for (int h = 0; h < 2; h++) {
                        const __m512i s = fx_amx_i16_sums8((const int32_t(*)[256])acc, 16 * r + 8 * h);
                        _mm512_storeu_si512((void *)(yb + t * O + 8 * h), s);
                        vmax = _mm512_max_epu64(vmax, _mm512_abs_epi64(s));
                    }
                    t++;
                }
            }
        _tile_release();
        const uint64_t m = _mm512_reduce_max_epu64(vmax);
#ifdef _OPENMP
#pragma omp critical(fx_i16_fwd_amx_max)
#endif
        if (m > gmax) gmax = m;
    }
    if (ymax) *ymax = gmax;
    return 1;
}

/* ---- the sums rounded in the epilogue (fx_i16_fwd_amx_round) --------------------------------
 * Why: fx_i16_fwd_amx stores every output's int64 sum (8 bytes, four times the mantissa) and
 * the caller's rounding (quant_i64_t) reads them back and stores the mantissas transposed into
 * NCHW order: in a ResNet-20 flex16_5 step the int64 combination and stores were about half of
 * this kernel's samples and the rounding pass 8 % of the step's. Here each block's sums are
 * rounded where they are made, on quant_i64's fast route (quant_q64_avx512.h: the same
 * rounding and statistics), and its 16 x 16 mantissas are transposed in registers and stored
 * as 16 pixels of each of 16 channels. A DFP16 output whose exponent moved lately is rounded
 * at two exponents (conv2d.c, conv_skip_stage) from the same sums; without the second rounding
 * here, those chunks (a third of a ResNet-20 DFP16 epoch's forward passes) took the int64
 * route. */
static atomic_int amx_round_enabled = 1;
static atomic_int amx_round32_enabled = 1; /* test switch: 0 keeps the int64 epilogue */
static atomic_llong amx_round32_images;    /* test hook: images the int32 epilogue rounded */
static atomic_llong amx_round_calls;
static atomic_llong amx_round2_calls;
static atomic_llong amx_round_partial_calls;

/* The counts of chunks rounded: any, both of two whole, one of two broken */
static void amx_round_count(int whole, int two)
{
    if (whole) atomic_fetch_add_explicit(&amx_round_calls, 1, memory_order_relaxed);
    if (two && whole == (FX_I16_ROUND_FIRST | FX_I16_ROUND_SECOND))
        atomic_fetch_add_explicit(&amx_round2_calls, 1, memory_order_relaxed);
    else if (two && whole)
        atomic_fetch_add_explicit(&amx_round_partial_calls, 1, memory_order_relaxed);
}

void fx_i16_fwd_amx_round_set_enabled(int on) { atomic_store(&amx_round_enabled, on != 0); }
void fx_i16_fwd_amx_round32_set_enabled(int on) { atomic_store(&amx_round32_enabled, on != 0); }
long long fx_i16_fwd_amx_round32_images(void) { return atomic_load(&amx_round32_images); }
int fx_i16_fwd_amx_round_enabled(void) { return atomic_load(&amx_round_enabled); }
long long fx_i16_fwd_amx_round_calls(void) { return atomic_load(&amx_round_calls); }
long long fx_i16_fwd_amx_round2_calls(void) { return atomic_load(&amx_round2_calls); }
long long fx_i16_fwd_amx_round_partial_calls(void)
{
    return atomic_load(&amx_round_partial_calls);
}

/* 16 pixels (rows) x 16 channels of int16 mantissas, row i and row i + 8 in r[i]'s two halves,
 * transposed and stored as 16 pixels of each channel: channel c at dst + c * P, the block's
 * blk->r.n stored pixels (a span block's gathered by blk->gather first). The three unpack stages are fx_transpose16_avx512's, on an 8 x 32 matrix whose
 * columns 16-31 are rows 8-15's channels, so that a result holds channel j (pixels 0-7, 8-15)
 * in its lanes 0 and 2 and channel 8 + j in lanes 1 and 3. */
static inline void amx_store_t16(const __m512i r[8], int16_t *dst, int64_t P,
                                 const amx_block *blk)
{
    const int nrows = blk->r.n;
    __m512i a[8], b[8];
    for (int i = 0; i < 4; i++) {
        a[2 * i] = _mm512_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) {
        const __m512i *aa = a + 4 * h;
        b[4 * h + 0] = _mm512_unpacklo_epi32(aa[0], aa[2]);
        b[4 * h + 1] = _mm512_unpackhi_epi32(aa[0], aa[2]);
        b[4 * h + 2] = _mm512_unpacklo_epi32(aa[1], aa[3]);
        b[4 * h + 3] = _mm512_unpackhi_epi32(aa[1], aa[3]);
    }
    const __mmask16 m = nrows == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nrows) - 1u);
    /* sixteen short runs into an output written once per op, more streams than a hardware
     * prefetcher follows: each plane's line two lines ahead of the stores, as quant_i64_t
     * reads it (FX_Q_T_STORE_AHEAD; without it a ResNet-20 stage-1 forward pass in training
     * took 0.12 ms longer than the int64 route's, whose rounding prefetches so) */
    for (int c = 0; c < 16; c++) fx_prefetch_at(dst + c * P, FX_Q_T_STORE_AHEAD);
    for (int k = 0; k < 4; k++)
        for (int e = 0; e < 2; e++) {
            const int j = 2 * k + e;
            const __m512i c = e ? _mm512_unpackhi_epi64(b[k], b[4 + k])
                                : _mm512_unpacklo_epi64(b[k], b[4 + k]);
            /* lanes 0, 2, 1, 3: channel j's 16 pixels, then channel 8 + j's */
            const __m512i t = _mm512_shuffle_i64x2(c, c, _MM_SHUFFLE(3, 1, 2, 0));
            __m256i lo = _mm512_castsi512_si256(t), hi = _mm512_extracti64x4_epi64(t, 1);
            if (blk->span) {
                lo = _mm256_permutexvar_epi16(blk->gather, lo);
                hi = _mm256_permutexvar_epi16(blk->gather, hi);
            }
            _mm256_mask_storeu_epi16(dst + j * P, m, lo);
            _mm256_mask_storeu_epi16(dst + (8 + j) * P, m, hi);
        }
}

/* ---- the int32 epilogue ---------------------------------------------------------------------
 * Why: the int64 epilogue widens each sum (65536 HH + 256 (HL + LH) + LL) into int64 lanes,
 * rounds eight at a time and narrows two vectors into sixteen int16; its vector operations,
 * not the tiles, bound the forward kernel on ResNet-20's 16- and 32-channel layers. For sums of
 * at most FX_AMX_ROUND32_MAX_K products and shifts 9 <= s <= 30 (every training write's) the
 * same rounding runs in sixteen int32 lanes. With a = 256 HH + HL + LH (int32,
 * amx_i16_sums.h) the sum is v = 256 a + LL, LL >= 0, and with ah = a + (LL >> 8) and
 * l = LL & 255 it is v = 256 ah + l, 0 <= l < 256, so ah = floor(v / 256) and bit s of v is bit
 * t = s - 8 of ah. quant_i64's fast rounding floor((v + 2^(s-1) - 1 + b) / 2^s) (b bit s of v)
 * is then (ah + 2^(t-1) - c) >> t with c = 1 where l = 0 and b = 0 (the sum's low byte moves
 * the floor only when it is -1), exactly; a lane underflows iff it rounds to 0 from a nonzero
 * v (|v| <= 2^(s-1)); and the largest |v| is the larger of the largest v and minus the
 * smallest, each kept per lane as the pair (ah, l) in lexicographic order and formed in int64
 * once an image. |ah| <= 4259838 K and 2^(t-1) <= 2^21 keep every lane within int32 for
 * K <= 480. The same mantissas and statistics as the int64 epilogue (tests/test_conv_i16_amx.c
 * runs both on the same sums). */
#define FX_AMX_ROUND32_MAX_K 480

static int amx_round32_ok(const struct fx_conv_geom *g, int s)
{
    return g->C * g->KH * g->KW <= FX_AMX_ROUND32_MAX_K && s >= 9 && s <= 30 &&
           atomic_load_explicit(&amx_round32_enabled, memory_order_relaxed);
}

typedef struct amx_r32 {
    __m512i half, bit; /* 2^(t-1), 2^t */
    __m128i cnt;       /* t */
} amx_r32;

/* (a shift outside 9-30 gives constants that no call reads) */
static amx_r32 amx_r32_setup(int s)
{
    amx_r32 k;
    if (s < 9 || s > 30) s = 9;
    k.half = _mm512_set1_epi32(1 << (s - 9));
    k.bit = _mm512_set1_epi32(1 << (s - 8));
    k.cnt = _mm_cvtsi32_si128(s - 8);
    return k;
}

/* sixteen sums v = 256 ah + l rounded at the shift k was made for, as int16; underflows
 * (rounded to 0 from nonzero v; nz: the lanes where v is nonzero) added to *nuf */
static inline __attribute__((always_inline)) __m256i amx_r32_round(const amx_r32 *k,
                                                                    __m512i ah, __mmask16 lz,
                                                                    __mmask16 nz, int64_t *nuf)
{
    const __mmask16 c = _kandn_mask16(_mm512_test_epi32_mask(ah, k->bit), lz);
    __m512i x = _mm512_add_epi32(ah, k->half);
    x = _mm512_mask_sub_epi32(x, c, x, _mm512_set1_epi32(1));
    const __m512i q = _mm512_sra_epi32(x, k->cnt);
    *nuf += __builtin_popcount((unsigned)_mm512_mask_testn_epi32_mask(nz, q, q));
    return _mm512_cvtepi32_epi16(q);
}

/* The largest |v| of lanes whose largest v is 256 ma + ml and smallest 256 na + nl (each
 * taken with a v = 0, which leaves the largest |v| as it is) */
static uint64_t amx_r32_maxabs(__m512i ma, __m512i ml, __m512i na, __m512i nl)
{
    int32_t a[16], b[16], c[16], d[16];
    _mm512_storeu_si512((void *)a, ma);
    _mm512_storeu_si512((void *)b, ml);
    _mm512_storeu_si512((void *)c, na);
    _mm512_storeu_si512((void *)d, nl);
    uint64_t mx = 0;
    for (int i = 0; i < 16; i++) {
        const int64_t hi = 256 * (int64_t)a[i] + b[i], lo = 256 * (int64_t)c[i] + d[i];
        const uint64_t m = (uint64_t)(hi > -lo ? hi : -lo);
        mx = m > mx ? m : mx;
    }
    return mx;
}

/* ---- one image's blocks, either epilogue ---------------------------------------------------- */

/* What an image's epilogue keeps across its pixels, all zero at the start: the int64 one the
 * largest |v| per lane (max_in, and max_in2 beside the second rounding), the int32 one the
 * largest and smallest (ah, l) per lane (starting at v = 0, which changes no largest |v|) */
typedef struct amx_round_state {
    __m512i max_in, max_in2;
    __m512i ma, ml, na, nl;
} amx_round_state;

/* The roundings an image's epilogue makes: at f's shift (q64 for the int64 lanes, r32 for the
 * int32 ones) into yq, counting underflows in *nuf, and with two also at the second shift */
typedef struct amx_round_at {
    const fx_q64_fast *q64, *q64_2;
    const amx_r32 *r32, *r32_2;
    int16_t *yq, *yq2;
    int64_t *nuf, *nuf2;
} amx_round_at;

/* pixel q / 16 of the block in acc, its sixteen channels rounded (int64 lanes) */
static inline __attribute__((always_inline)) void amx_pixel64(const int32_t acc[4][256], int q,
                                                              int small_k,
                                                              const amx_round_at *at,
                                                              amx_round_state *st, const int two,
                                                              __m256i *half, __m256i *half2)
{
    __m512i s[2];
    if (small_k) {
        fx_amx_i16_sums16_small(acc, q, &s[0], &s[1]);
    } else {
        s[0] = fx_amx_i16_sums8(acc, q);
        s[1] = fx_amx_i16_sums8(acc, q + 8);
    }
    *half = fx_q64_pack16(fx_q64_fast_round(at->q64, s[0], &st->max_in, at->nuf),
                          fx_q64_fast_round(at->q64, s[1], &st->max_in, at->nuf));
    if (two)
        *half2 = fx_q64_pack16(fx_q64_fast_round(at->q64_2, s[0], &st->max_in2, at->nuf2),
                               fx_q64_fast_round(at->q64_2, s[1], &st->max_in2, at->nuf2));
}

/* the same on the int32 epilogue */
static inline __attribute__((always_inline)) void amx_pixel32(const int32_t acc[4][256], int q,
                                                              const amx_round_at *at,
                                                              amx_round_state *st, const int two,
                                                              __m256i *half, __m256i *half2)
{
    const __m512i lowbyte = _mm512_set1_epi32(255);
    const __m512i hh = _mm512_load_si512((const void *)(acc[0] + q));
    const __m512i hl = _mm512_load_si512((const void *)(acc[1] + q));
    const __m512i lh = _mm512_load_si512((const void *)(acc[2] + q));
    const __m512i ll = _mm512_load_si512((const void *)(acc[3] + q));
    const __m512i a = _mm512_add_epi32(_mm512_slli_epi32(hh, 8), _mm512_add_epi32(hl, lh));
    const __m512i ah = _mm512_add_epi32(a, _mm512_srli_epi32(ll, 8));
    const __m512i l = _mm512_and_si512(ll, lowbyte);
    const __mmask16 lz = _mm512_testn_epi32_mask(l, l);
    const __m512i ahl = _mm512_or_si512(ah, l);
    const __mmask16 nz = _mm512_test_epi32_mask(ahl, ahl);
    const __mmask16 gt = _mm512_cmpgt_epi32_mask(ah, st->ma);
    const __mmask16 eq = _mm512_cmpeq_epi32_mask(ah, st->ma);
    st->ml = _mm512_mask_mov_epi32(st->ml, gt, l);
    st->ml = _mm512_mask_max_epi32(st->ml, eq, st->ml, l);
    st->ma = _mm512_max_epi32(st->ma, ah);
    const __mmask16 lt = _mm512_cmplt_epi32_mask(ah, st->na);
    const __mmask16 eq2 = _mm512_cmpeq_epi32_mask(ah, st->na);
    st->nl = _mm512_mask_mov_epi32(st->nl, lt, l);
    st->nl = _mm512_mask_min_epi32(st->nl, eq2, st->nl, l);
    st->na = _mm512_min_epi32(st->na, ah);
    *half = amx_r32_round(at->r32, ah, lz, nz, at->nuf);
    if (two) *half2 = amx_r32_round(at->r32_2, ah, lz, nz, at->nuf2);
}

/* One image's blocks rounded at one exponent (two: also at the second, from the same sums,
 * into yq2 with its own underflow count), on int32 lanes (w32, amx_round32_ok for every shift)
 * or int64 ones, the mantissas stored; the image's largest |sum| in *mx. `two` and `w32` are
 * constants at each call, so each variant is compiled without the others' work. */
static inline __attribute__((always_inline)) void amx_round_image(
    const struct fx_conv_geom *g, int64_t oy0, int64_t ox0, const int8_t *hi, const int8_t *lo,
    const int8_t *wb, int64_t i, int32_t acc[2][4][256], const amx_round_at *at, const int two,
    const int w32, uint64_t *mx)
{
    const int64_t O = g->O, OW = g->OW, P = g->OH * OW;
    const int span = amx_span_blocks(g, oy0, ox0);
    const int64_t nob = O / 16, per_image = fx_tile_blocks_per_image(g, span);
    const int small_k = g->C * g->KH * g->KW <= FX_AMX_I16_SUMS32_MAX_K;
    const __m512i zero = _mm512_setzero_si512();
    amx_round_state st = {zero, zero, zero, zero, zero, zero};
    /* Software-pipelined: block j + 1's tile products are issued before block j's epilogue,
     * which reads the sums stored in the other half of acc, so that the tiles' work overlaps
     * the vector work instead of waiting on it (the tiles are not renamed: the order in the
     * program is the order on the tile unit) */
    const int64_t first = i * per_image * nob, nj = per_image * nob;
    amx_fwd_block_tiles(g, oy0, ox0, span, hi, lo, wb, first / nob, first % nob);
    fx_amx_i16_store(acc[0]);
    amx_block k; /* block kb's layout, made once for its nob channel blocks */
    int64_t kb = first / nob;
    amx_fwd_block_where(g, span, kb, &k);
    for (int64_t j = 0; j < nj; j++) {
        const int64_t b = (first + j) / nob, ob = (first + j) % nob;
        if (j + 1 < nj)
            amx_fwd_block_tiles(g, oy0, ox0, span, hi, lo, wb, (first + j + 1) / nob,
                                (first + j + 1) % nob);
        if (b != kb) {
            amx_fwd_block_where(g, span, b, &k);
            kb = b;
        }
        const int32_t(*cur)[256] = (const int32_t(*)[256])acc[j & 1];
        __m512i r[8], r2[8];
        for (int p = 0; p < 8; p++) {
            __m256i half[2], half2[2];
            for (int u = 0; u < 2; u++) { /* pixel p, then pixel p + 8 */
                const int px = p + 8 * u;
                if (!(k.r.stored >> px & 1)) /* not stored (past a row's end): 0 counts nowhere */
                    half[u] = half2[u] = _mm256_setzero_si256();
                else if (w32)
                    amx_pixel32(cur, 16 * px, at, &st, two, &half[u], &half2[u]);
                else
                    amx_pixel64(cur, 16 * px, small_k, at, &st, two, &half[u], &half2[u]);
            }
            r[p] = _mm512_inserti64x4(_mm512_castsi256_si512(half[0]), half[1], 1);
            if (two) r2[p] = _mm512_inserti64x4(_mm512_castsi256_si512(half2[0]), half2[1], 1);
        }
        const int64_t pos = (k.r.im * O + ob * 16) * P + k.r.q0;
        amx_store_t16(r, at->yq + pos, P, &k);
        if (two) amx_store_t16(r2, at->yq2 + pos, P, &k);
        if (j + 1 < nj) fx_amx_i16_store(acc[(j + 1) & 1]);
    }
    *mx = w32 ? amx_r32_maxabs(st.ma, st.ml, st.na, st.nl) : _mm512_reduce_max_epu64(st.max_in);
}


/* amx_round_image with the rounding at one or two exponents, on int32 or int64 lanes, chosen
 * here, each variant compiled on its own */
static void amx_round_image_any(const struct fx_conv_geom *g, int64_t oy0, int64_t ox0,
                                const int8_t *hi, const int8_t *lo, const int8_t *wb, int64_t i,
                                int32_t acc[2][4][256], const fx_q64_fast *f, int16_t *yq,
                                int64_t *nuf, int two, const fx_q64_fast *f2, int16_t *yq2,
                                int64_t *nuf2, uint64_t *mx)
{
    const amx_r32 k = amx_r32_setup(f->s), k2 = amx_r32_setup(f2->s);
    const amx_round_at at = {f, f2, &k, &k2, yq, yq2, nuf, nuf2};
    if (amx_round32_ok(g, f->s) && (!two || amx_round32_ok(g, f2->s))) {
        atomic_fetch_add_explicit(&amx_round32_images, 1, memory_order_relaxed);
        if (two)
            amx_round_image(g, oy0, ox0, hi, lo, wb, i, acc, &at, 1, 1, mx);
        else
            amx_round_image(g, oy0, ox0, hi, lo, wb, i, acc, &at, 0, 1, mx);
    } else if (two) {
        amx_round_image(g, oy0, ox0, hi, lo, wb, i, acc, &at, 1, 0, mx);
    } else {
        amx_round_image(g, oy0, ox0, hi, lo, wb, i, acc, &at, 0, 0, mx);
    }
}

int fx_i16_fwd_amx_round(const struct fx_conv_geom *g, const int16_t *x, int64_t nbc,
                         const uint32_t *wq, uint32_t *scratch, int shift, int16_t *yq,
                         fx_qstats *part, int shift2, int16_t *yq2, fx_qstats *part2)
{
    const int two = yq2 != NULL;
    if (!fx_q64_fast_ok(shift) || (two && !fx_q64_fast_ok(shift2)) || nbc <= 0) return 0;
    atomic_fetch_add_explicit(&amx_fwd_calls, 1, memory_order_relaxed);
    if (amx_span_blocks(g, 0, 0)) atomic_fetch_add_explicit(&amx_span_calls, 1, memory_order_relaxed);
    int8_t *hi, *lo;
    amx_fwd_planes(g, x, nbc, scratch, &hi, &lo);
    const int8_t *wb = (const int8_t *)(const void *)wq;
    const fx_q64_fast f = fx_q64_fast_setup(shift), f2 = fx_q64_fast_setup(two ? shift2 : shift);
    amx_fwd_configure(piece_bytes(g));
    /* two blocks' sums: amx_round_image computes one while it rounds the other */
    int32_t acc[2][4][256] __attribute__((aligned(64)));
    /* the roundings still whole: a sum above a rounding's bound drops that one (a saturating
     * write, which the general rounding counts), and the chunk is declined once none is left */
    int whole = two ? FX_I16_ROUND_FIRST | FX_I16_ROUND_SECOND : FX_I16_ROUND_FIRST;
    /* one image at a time, so that its statistics are complete when its blocks are */
    int64_t done = 0;
    for (; done < nbc && whole; done++) {
        int64_t nuf = 0, nuf2 = 0;
        uint64_t mx;
        amx_round_image_any(g, 0, 0, hi, lo, wb, done, acc, &f, yq, &nuf, two, &f2, yq2, &nuf2,
                            &mx);
        whole = fx_i16_round_still_whole(whole, mx, shift, two, shift2);
        fx_i16_round_stats(&part[done], whole & FX_I16_ROUND_FIRST, mx, nuf, shift);
        if (two) fx_i16_round_stats(&part2[done], whole & FX_I16_ROUND_SECOND, mx, nuf2, shift2);
    }
    /* a rounding broken at some image: every image's statistics say so */
    fx_i16_round_mark_broken_images(whole, two, done, part, part2);
    _tile_release();
    amx_round_count(whole, two);
    return whole;
}

/* ---- the stride-2 input gradient by phases, rounded in the epilogue ---------------------------
 * Why: by phases (src/nn/conv_dgrad_phases.c) each phase's convolution of dy stored its int64
 * sums, which were gathered into dx's order as int64 (zeros included: three quarters of a 1 x 1
 * projection's dx) and rounded in a pass of their own; each phase also made its own byte planes
 * of dy, and computed the full correlation's 17-wide rows where dx takes 16 of them. Here the
 * planes are made once, padded for the widest phase; each phase computes only the window of
 * its outputs that dx takes, rounded in the epilogue into a quarter-size int16 plane; and the
 * phases' planes are interleaved into dx's rows. */
int fx_i16_dgrad_amx_s2_round(const fx_i16_dgrad_s2 *d, const int16_t *dy, int64_t nbc,
                              uint32_t *scratch, int shift, int16_t *dx, fx_qstats *part,
                              int shift2, int16_t *dx2, fx_qstats *part2)
{
    const int two = dx2 != NULL;
    if (!fx_q64_fast_ok(shift) || (two && !fx_q64_fast_ok(shift2)) || nbc <= 0) return 0;
    int8_t *hi, *lo;
    amx_fwd_planes(d->planes, dy, nbc, scratch, &hi, &lo);
    int16_t *q[4], *q2[4];
    fx_i16_dgrad_s2_windows(scratch, fx_i16_fwd_amx_scratch(d->planes, nbc), d, nbc, two, q, q2);
    const fx_q64_fast f = fx_q64_fast_setup(shift), f2 = fx_q64_fast_setup(two ? shift2 : shift);
    /* two blocks' sums: amx_round_image computes one while it rounds the other */
    int32_t acc[2][4][256] __attribute__((aligned(64)));
    int whole = two ? FX_I16_ROUND_FIRST | FX_I16_ROUND_SECOND : FX_I16_ROUND_FIRST;
    uint64_t mx = 0;
    int64_t nuf = 0, nuf2 = 0;
    for (int k = 0; k < 4 && whole; k++) {
        if (!d->wq[k]) continue;
        amx_fwd_configure(piece_bytes(d->phase[k]));
        const int8_t *wb = (const int8_t *)(const void *)d->wq[k];
        for (int64_t i = 0; i < nbc; i++) {
            uint64_t m;
            amx_round_image_any(d->phase[k], d->oy0[k], d->ox0[k], hi, lo, wb, i, acc, &f, q[k],
                                &nuf, two, &f2, q2[k], &nuf2, &m);
            mx = m > mx ? m : mx;
        }
        whole = fx_i16_round_still_whole(whole, mx, shift, two, shift2);
    }
    _tile_release();
    const fx_i16_round_sums sums = {mx, nuf, nuf2, shift, shift2};
    return fx_i16_dgrad_s2_finish(d, whole, two, &sums, q, q2, nbc, part, part2, dx, dx2,
                                  fx_i16_dgrad_s2_interleave_avx512);
}
