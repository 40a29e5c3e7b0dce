/* Portable fp32 GEMM framework: packing, cache blocking and threading around a per-ISA
 * micro-kernel (see f32_kernels.h for the summation order and error bound).
 *
 * Loop nest (BLIS order, with A on the broadcast side and B on the vector side):
 *   for each block of mc rows of A                        packed A block: mc x kc, L2/L3
 *     for each depth block of kc                          (in order: the k chain continues)
 *       pack the A block (threads split its micro-panels)
 *       for each task = (column block of B, group of A micro-panels), split over threads
 *         pack the B column block (kc x nc, per thread, L2)
 *         for each A micro-panel (mr x kc, stays in L1)
 *           for each B micro-panel (kc x nr, streamed from L2)
 *             micro-kernel on one mr x nr tile of C
 * Packing reads any element strides, so transposed or sliced operands cost nothing extra.
 * A narrow C is computed as C^T = B^T A^T (see fx_f32_gemm), with the same bits.
 */
#include "f32_kernels.h"
#include "../core/h16_bias.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* 64-byte aligned scratch (cache lines; full AVX-512 vectors), from the scratch cache: the
 * packed panels of B are megabytes, faulted in page by page on every call when fresh. */
static float *alloc_floats(int64_t n)
{
    size_t bytes = (size_t)round_up(n > 0 ? n : 1, 16) * sizeof(float);
    return (float *)fx_scratch_aligned_alloc(bytes);
}

static inline void pack_rows(float *restrict dst, const float *restrict src, int64_t s0,
                             int64_t kb, int64_t mr)
{
    for (int64_t k = 0; k < kb; k++)
        for (int64_t r = 0; r < mr; r++) dst[k * mr + r] = src[r * s0 + k];
}

/* Element idx of a 16-bit operand, widened by the scalar definitions (exact). */
static inline float load16(fmt_t fmt, const uint16_t *base, int64_t idx)
{
    return fmt == FMT_FP16 ? fx_fp16_to_f32(base[idx]) : fx_bf16_to_f32(base[idx]);
}

static fx_f32_pack16_fn pack16_hook(const fx_f32_gemm_params *p, fmt_t fmt)
{
    return fmt == FMT_FP16 ? p->pack_rows_fp16 : p->pack_rows_bf16;
}

static fx_f32_widen16_fn widen16_hook(const fx_f32_gemm_params *p, fmt_t fmt)
{
    return fmt == FMT_FP16 ? p->widen_fp16 : p->widen_bf16;
}

/* pack_a_panel for a 16-bit A. */
static void pack_a_panel16(const fx_f32_gemm_params *p, float *dst, const fx_operand *A,
                           int64_t i0, int64_t mrows, int64_t k0, int64_t kb, int64_t mr)
{
    const int64_t s0 = A->strides[0], s1 = A->strides[1];
    const uint16_t *base = (const uint16_t *)A->data + i0 * s0 + k0 * s1;
    const fx_f32_pack16_fn hook = pack16_hook(p, A->fmt);
    if (s1 == 1 && mrows == mr && hook) {
        hook(dst, base, s0, kb, mr);
        return;
    }
    const fx_f32_widen16_fn widen = widen16_hook(p, A->fmt);
    const int64_t wide = (mr + 7) / 8 * 8; /* mr rounded up to whole 8-value vectors */
    if (s0 == 1 && mrows == mr && widen && kb > 0 && s1 >= wide && wide <= 2 * mr) {
        /* a transposed A (a convolution's input gradient takes its output gradient so): the mr
         * values of each k are contiguous, widened as whole vectors. Reading `wide` values from
         * k's column stays before column k + 1 (s1 >= wide), and the values beyond mr land in
         * k + 1's slots, which the next call writes; the last k takes exactly mr. Element by
         * element this took 4-5 % of an fp16 CNN training step on an AVX2 EPYC. */
        for (int64_t k = 0; k + 1 < kb; k++) widen(base + k * s1, dst + k * mr, wide);
        widen(base + (kb - 1) * s1, dst + (kb - 1) * mr, mr);
        return;
    }
    for (int64_t k = 0; k < kb; k++)
        for (int64_t r = 0; r < mr; r++)
            dst[k * mr + r] = r < mrows ? load16(A->fmt, base, r * s0 + k * s1) : 0.0f;
}

/* pack_b_block for a 16-bit B. */
static void pack_b_block16(const fx_f32_gemm_params *p, float *dst, const fx_operand *B,
                           int64_t k0, int64_t kb, int64_t n0, int64_t nw, int64_t nr)
{
    const int64_t s0 = B->strides[0], s1 = B->strides[1];
    const uint16_t *base = (const uint16_t *)B->data + k0 * s0 + n0 * s1;
    const int64_t npanels = (nw + nr - 1) / nr, full = nw / nr;
    const fx_f32_pack16_fn hook = pack16_hook(p, B->fmt);
    const fx_f32_widen16_fn widen = widen16_hook(p, B->fmt);
    if (s1 == 1 && widen) { /* row-major: each panel row is nr contiguous values */
        for (int64_t k = 0; k < kb; k++)
            for (int64_t jp = 0; jp < full; jp++)
                widen(base + k * s0 + jp * nr, dst + jp * nr * kb + k * nr, nr);
    } else if (s0 == 1 && hook) { /* column-major: each panel is a transpose */
        for (int64_t jp = 0; jp < full; jp++) hook(dst + jp * nr * kb, base + jp * nr * s1, s1, kb, nr);
    } else {
        for (int64_t jp = 0; jp < full; jp++)
            for (int64_t k = 0; k < kb; k++)
                for (int64_t j = 0; j < nr; j++)
                    dst[jp * nr * kb + k * nr + j] = load16(B->fmt, base, k * s0 + (jp * nr + j) * s1);
    }
    if (full < npanels) { /* the last, partial panel */
        const int64_t ncols = nw - full * nr;
        float *d = dst + full * nr * kb;
        const uint16_t *pb = base + full * nr * s1;
        if (widen && (s1 == 1 || s0 == 1)) {
            /* the level's vector widening (the same floats as load16) along the unit stride:
             * element by element, fp16's portable definition made a convolution's weight
             * gradient with few patch columns (ResNet-20's first layer, 27) 5x slower than
             * fp32's on AVX-512 */
            for (int64_t k = 0; k < kb; k++)
                for (int64_t j = ncols; j < nr; j++) d[k * nr + j] = 0.0f;
            if (s1 == 1) {
                for (int64_t k = 0; k < kb; k++) widen(pb + k * s0, d + k * nr, ncols);
            } else {
                float tmp[256];
                for (int64_t k0c = 0; k0c < kb; k0c += 256) {
                    const int64_t n = kb - k0c < 256 ? kb - k0c : 256;
                    for (int64_t j = 0; j < ncols; j++) {
                        widen(pb + j * s1 + k0c, tmp, n);
                        for (int64_t k = 0; k < n; k++) d[(k0c + k) * nr + j] = tmp[k];
                    }
                }
            }
        } else {
            for (int64_t k = 0; k < kb; k++)
                for (int64_t j = 0; j < nr; j++)
                    d[k * nr + j] = j < ncols ? load16(B->fmt, pb, k * s0 + j * s1) : 0.0f;
        }
    }
}

/* One A micro-panel: dst[k*mr + r] = A[i0 + r][k0 + k], rows >= mrows zero. The loop order
 * follows the operand's unit stride, so that reads are sequential for both A and A^T. */
static void pack_a_panel(const fx_f32_gemm_params *p, float *dst, const fx_operand *A, int64_t i0,
                         int64_t mrows, int64_t k0, int64_t kb, int64_t mr)
{
    if (A->fmt != FMT_FP32) {
        pack_a_panel16(p, dst, A, i0, mrows, k0, kb, mr);
        return;
    }
    const int64_t s0 = A->strides[0], s1 = A->strides[1];
    const float *base = (const float *)A->data + i0 * s0 + k0 * s1;
    if (s1 == 1 && mrows == mr && p->pack_rows) {
        p->pack_rows(dst, base, s0, kb, mr);
    } else if (s1 == 1 && mrows == mr) {
        /* k outer: mr sequential read streams, one sequential write stream. A constant mr
         * lets the compiler unroll the rows. */
        switch (mr) {
        case 4: pack_rows(dst, base, s0, kb, 4); break;
        case 6: pack_rows(dst, base, s0, kb, 6); break;
        case 12: pack_rows(dst, base, s0, kb, 12); break;
        default: pack_rows(dst, base, s0, kb, mr); break;
        }
    } else if (s1 == 1) {
        for (int64_t r = 0; r < mrows; r++) {
            const float *row = base + r * s0;
            for (int64_t k = 0; k < kb; k++) dst[k * mr + r] = row[k];
        }
    } else {
        for (int64_t k = 0; k < kb; k++) {
            const float *col = base + k * s1;
            for (int64_t r = 0; r < mrows; r++) dst[k * mr + r] = col[r * s0];
        }
    }
    if (mrows < mr)
        for (int64_t k = 0; k < kb; k++)
            for (int64_t r = mrows; r < mr; r++) dst[k * mr + r] = 0.0f;
}

/* A column block of B as consecutive micro-panels: panel jp holds
 * dst[jp*nr*kb + k*nr + j] = B[k0 + k][n0 + jp*nr + j], columns past the block zero.
 * Row-major B is read one whole block row at a time (long sequential reads); otherwise one
 * column at a time, which is sequential for a transposed B. */
static void pack_b_block(const fx_f32_gemm_params *p, float *dst, const fx_operand *B, int64_t k0,
                         int64_t kb, int64_t n0, int64_t nw, int64_t nr)
{
    if (B->fmt != FMT_FP32) {
        pack_b_block16(p, dst, B, k0, kb, n0, nw, nr);
        return;
    }
    const int64_t s0 = B->strides[0], s1 = B->strides[1];
    const float *base = (const float *)B->data + k0 * s0 + n0 * s1;
    const int64_t npanels = (nw + nr - 1) / nr, full = nw / nr;
    if (s1 == 1) {
        for (int64_t k = 0; k < kb; k++) {
            const float *row = base + k * s0;
            for (int64_t jp = 0; jp < full; jp++) {
                float *d = dst + jp * nr * kb + k * nr;
                const float *s = row + jp * nr;
                for (int64_t j = 0; j < nr; j++) d[j] = s[j];
            }
        }
    } else if (s0 == 1 && p->pack_rows) { /* column-major: each panel is a transpose */
        for (int64_t jp = 0; jp < full; jp++)
            p->pack_rows(dst + jp * nr * kb, base + jp * nr * s1, s1, kb, nr);
    } else {
        for (int64_t j = 0; j < full * nr; j++) {
            const float *col = base + j * s1;
            float *d = dst + (j / nr) * nr * kb + j % nr;
            for (int64_t k = 0; k < kb; k++) d[k * nr] = col[k * s0];
        }
    }
    if (full < npanels) { /* the last, partial panel */
        const int64_t ncols = nw - full * nr;
        float *d = dst + full * nr * kb;
        for (int64_t k = 0; k < kb; k++)
            for (int64_t j = 0; j < nr; j++)
                d[k * nr + j] = j < ncols ? base[k * s0 + (full * nr + j) * s1] : 0.0f;
    }
}

/* ---- bf16 pair mode (f32_kernels.h) -------------------------------------------------------- */

static uint32_t minkey_scalar(const uint16_t *x, int64_t n)
{
    uint32_t m = 0x7FFF;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t mag = x[i] & 0x7FFFu;
        const uint32_t key = mag ? mag >> 7 : 0x7FFFu;
        m = key < m ? key : m;
    }
    return m;
}

static uint32_t pair_minkey(const fx_bf16_pair_kernels *pk, const void *x, int64_t n16)
{
    return (pk->minkey ? pk->minkey : minkey_scalar)((const uint16_t *)x, n16);
}

/* Whether vdpbf16ps gives the chain's exact bits for an A panel and B block with these keys:
 * conditions (i) and (ii) of f32_kernels.h. */
static int pair_dot_exact(uint32_t ka, uint32_t kb)
{
    return ka >= 1 && kb >= 1 && ka + kb >= FX_BF16_DOT_MIN_KEYSUM;
}

/* One A micro-panel of pair words: dst[p*mr + r] = A[i0+r][k0+2p] | A[i0+r][k0+2p+1] << 16,
 * an odd kb's last high half and rows >= mrows zero. */
static void pack_a_pairs(const fx_f32_gemm_params *p, uint32_t *dst, const fx_operand *A,
                         int64_t i0, int64_t mrows, int64_t k0, int64_t kb, int64_t mr)
{
    const int64_t s0 = A->strides[0], s1 = A->strides[1], kp = kb / 2;
    const uint16_t *base = (const uint16_t *)A->data + i0 * s0 + k0 * s1;
    if (s1 == 1 && mrows == mr && s0 % 2 == 0 && ((uintptr_t)base & 3) == 0 && p->pack_rows &&
        kp > 0) {
        /* each row's pairs are whole aligned words: a 32-bit transpose */
        p->pack_rows((float *)(void *)dst, (const float *)(const void *)base, s0 / 2, kp, mr);
    } else if (s0 == 1 && mrows == mr && mr <= 8 && p->pairs->pack_a_cols && kp > 0) {
        p->pairs->pack_a_cols(dst, base, s1, kp, (int)mr);
    } else {
        for (int64_t q = 0; q < kp; q++)
            for (int64_t r = 0; r < mr; r++)
                dst[q * mr + r] = r < mrows ? (uint32_t)base[r * s0 + 2 * q * s1] |
                                                  (uint32_t)base[r * s0 + (2 * q + 1) * s1] << 16
                                            : 0u;
    }
    if (kb & 1)
        for (int64_t r = 0; r < mr; r++)
            dst[kp * mr + r] = r < mrows ? (uint32_t)base[r * s0 + (kb - 1) * s1] : 0u;
}

/* A column block of B as micro-panels of pair words: panel jp holds
 * dst[jp*nr*kq + p*nr + j] = B[k0+2p][n0+jp*nr+j] | B[k0+2p+1][...] << 16 (kq = ceil(kb/2)),
 * an odd kb's last high half and columns past the block zero. */
static void pack_b_pairs(const fx_f32_gemm_params *p, uint32_t *dst, const fx_operand *B,
                         int64_t k0, int64_t kb, int64_t n0, int64_t nw, int64_t nr)
{
    const int64_t s0 = B->strides[0], s1 = B->strides[1];
    const uint16_t *base = (const uint16_t *)B->data + k0 * s0 + n0 * s1;
    const int64_t kp = kb / 2, kq = (kb + 1) / 2, full = nw / nr, npanels = (nw + nr - 1) / nr;
    const fx_bf16_pair_kernels *pk = p->pairs;
    int64_t done = 0; /* full panels packed by a fast route */
    if (s1 == 1 && pk->interleave) {
        /* row-major: two rows make one row of pair words; each row pair is read whole, across
         * the panels (panel by panel down the rows, a wide B's rows pages apart defeated the
         * hardware prefetchers: bf16 16 x 131072 x 144 spent 4x its kernel's time here) */
        for (int64_t q = 0; q < kp; q++)
            for (int64_t jp = 0; jp < full; jp++)
                pk->interleave((uint16_t *)(void *)(dst + jp * nr * kq + q * nr),
                               base + 2 * q * s0 + jp * nr, base + (2 * q + 1) * s0 + jp * nr, nr);
        done = full;
    } else if (s0 == 1 && s1 % 2 == 0 && ((uintptr_t)base & 3) == 0 && p->pack_rows && kp > 0) {
        /* column-major: each column's pairs are whole aligned words, a 32-bit transpose */
        for (int64_t jp = 0; jp < full; jp++)
            p->pack_rows((float *)(void *)(dst + jp * nr * kq),
                           (const float *)(const void *)(base + jp * nr * s1), s1 / 2, kp, nr);
        done = full;
    }
    for (int64_t jp = 0; jp < npanels; jp++) {
        uint32_t *d = dst + jp * nr * kq;
        const int64_t ncols = jp < full ? nr : nw - full * nr;
        for (int64_t q = jp < done ? kp : 0; q < kq; q++)
            for (int64_t j = 0; j < nr; j++) {
                const int64_t col = (jp * nr + j) * s1;
                const uint32_t lo = j < ncols ? base[2 * q * s0 + col] : 0u;
                const uint32_t hi = j < ncols && 2 * q + 1 < kb ? base[(2 * q + 1) * s0 + col] : 0u;
                d[q * nr + j] = lo | hi << 16;
            }
    }
}

/* One tile's kernel call in either mode. ku: depth in the packed units (k, or pairs). */
static void run_kernel(const fx_f32_gemm_params *p, int pm, int dot, int64_t ku, const void *ap,
                       const void *bp, float *c, int64_t ldc, int accumulate)
{
    if (!pm)
        p->kernel(ku, (const float *)ap, (const float *)bp, c, ldc, accumulate);
    else
        (dot ? p->pairs->dot : p->pairs->exact)(ku, (const uint32_t *)ap, (const uint32_t *)bp, c,
                                                ldc, accumulate);
}

/* A tile that the kernel cannot write in place (partial at the right edge of C, at the bottom
 * edge where the level has no kernel for those rows (fx_f32_gemm_params.kernel_rows), or C with
 * a non-unit column stride): run the full kernel on a scratch tile, then copy the valid part.
 * The kernel's arithmetic per element is the same as for a full tile. */
static void scratch_tile(const fx_f32_gemm_params *p, int pm, int dot, int64_t ku, const void *ap,
                         const void *bp, float *ct, int64_t rs, int64_t cs, int64_t mrows,
                         int64_t ncols, int accumulate)
{
    _Alignas(64) float tile[FX_F32_GEMM_MAX_MR * FX_F32_GEMM_MAX_NR];
    const int64_t nr = p->nr;
    memset(tile, 0, sizeof(float) * (size_t)(p->mr * nr));
    if (accumulate)
        for (int64_t r = 0; r < mrows; r++)
            for (int64_t j = 0; j < ncols; j++) tile[r * nr + j] = ct[r * rs + j * cs];
    run_kernel(p, pm, dot, ku, ap, bp, tile, nr, accumulate);
    for (int64_t r = 0; r < mrows; r++)
        for (int64_t j = 0; j < ncols; j++) ct[r * rs + j * cs] = tile[r * nr + j];
}

/* An fp16/bf16 output taken from the tiles (fx_op_call.out_h16): rows of h16 N apart, cvt the
 * write's conversion. */
typedef struct gemm_h16 {
    uint16_t *h16;
    void (*cvt)(const float *src, uint16_t *dst, int64_t n);
    const float *bias; /* fx_op_call.out_h16_bias: NULL, or added per column (h16_bias.h) */
    void (*widen)(const uint16_t *src, float *dst, int64_t n);
} gemm_h16;

/* The tile's mrows x ncols results (rows ldt apart in t) converted into h16 at (i0, j0): one
 * conversion call for the tile where its rows are whole (ncols == ldt: the tile buffer of a
 * full-width tile), a copy per row after it; else a call per row, which reads nothing beyond
 * the tile's own values (C's rows run on into other tiles and past C's end). */
static void tile_to_h16(const gemm_h16 *h, const float *t, int64_t ldt, int64_t mrows,
                        int64_t ncols, int64_t i0, int64_t j0, int64_t N)
{
    uint16_t buf[FX_F32_TILE_MAX];
    if (ncols == ldt && ldt * mrows <= FX_F32_TILE_MAX) {
        h->cvt(t, buf, ldt * mrows);
        if (h->bias) fx_h16_add_bias(buf, mrows, ldt, ncols, h->bias + j0, h->widen, h->cvt);
        for (int64_t r = 0; r < mrows; r++)
            memcpy(h->h16 + (i0 + r) * N + j0, buf + r * ldt, (size_t)ncols * sizeof(uint16_t));
        return;
    }
    for (int64_t r = 0; r < mrows; r++) {
        uint16_t *dst = h->h16 + (i0 + r) * N + j0;
        h->cvt(t + r * ldt, dst, ncols);
        if (h->bias) fx_h16_add_bias(dst, 1, ncols, ncols, h->bias + j0, h->widen, h->cvt);
    }
}

/* the words of one A panel packed on demand where A is read in place (a_in_place_ok) */
#define FX_PAIR_PANEL_WORDS (FX_F32_GEMM_MAX_MR * 256)

static _Atomic int g_a_in_place = 1;
static _Atomic int64_t g_a_in_place_tiles;

void fx_f32_gemm_a_in_place_set_enabled(int on) { g_a_in_place = on != 0; }
int64_t fx_f32_gemm_a_in_place_tiles(void) { return g_a_in_place_tiles; }

/* Pair mode's A read in place (fx_bf16_pair_kernels.dot_rows): the level has it, the tiles
 * choose between dot and exact (force_exact packs), A is row-major with an even depth in one
 * block (so that every word is a whole pair of its row and no chain continues), and the switch
 * is on. Why: on attention's products, 512 items of 128 x 128 x 32, the 16 x 16 transposes
 * that packed A's six-row panels took about a fifth of the time (perf, Zen 4, one thread). */
static int a_in_place_ok(const fx_f32_gemm_params *p, int pm, const void *apan,
                         const fx_operand *A, int64_t K)
{
    return pm && !apan && p->pairs->dot_rows && !p->force_exact && K <= p->kc && K % 2 == 0 &&
           A->strides[1] == 1 && p->mr * (p->kc / 2) <= FX_PAIR_PANEL_WORDS && g_a_in_place;
}

/* The smallest key of rows [i0, i0 + mr) of a row-major A over depth [k0, k0 + kb): the key
 * of their packed panel (the same values, and the panel's padding is zeros, which no key
 * counts). */
static uint32_t rows_minkey(const fx_bf16_pair_kernels *pk, const fx_operand *A, int64_t i0,
                            int64_t mr, int64_t k0, int64_t kb)
{
    if (A->strides[0] == kb) /* the rows follow one another: one call over all of them */
        return pair_minkey(pk, (const uint16_t *)A->data + i0 * kb + k0, mr * kb);
    uint32_t m = 0x7FFFu;
    for (int64_t r = 0; r < mr; r++) {
        const uint32_t k =
            pair_minkey(pk, (const uint16_t *)A->data + (i0 + r) * A->strides[0] + k0, kb);
        m = k < m ? k : m;
    }
    return m;
}

/* C[i*rs + j*cs] = sum_k A[i][k] B[k][j] for an M x N x K product (K >= 1). pm: pair mode
 * (f32_kernels.h); packed buffers are then counted in pair words, which take the place of
 * floats one for one (ku = ceil(kb / 2) words per row instead of kb floats). With h (NULL:
 * none) each tile's final values go to h's fp16/bf16 output instead (tile_to_h16), and C only
 * accumulates a depth of more than one block. */
static int gemm_run(const fx_f32_gemm_params *p, int pm, const fx_operand *A, const void *apan,
                    const fx_operand *B, int64_t M, int64_t N, int64_t K, float *C, int64_t rs,
                    int64_t cs, int nthreads, const gemm_h16 *h)
{
    const int64_t mr = p->mr, nr = p->nr;
    const int64_t kc = min64(p->kc, K);
    const int64_t mc = min64(p->mc, round_up(M, mr));
    const int64_t kcu = pm ? (kc + 1) / 2 : kc, Ku = pm ? (K + 1) / 2 : K;
    const int choose = pm && !p->force_exact; /* pick dot or exact per tile, from the keys */
    const int a_rows = a_in_place_ok(p, pm, apan, A, K); /* full panels read in place */
    /* and their tiles rounded to bf16 by the kernel, where that is the output's conversion */
    const int direct_bf16 = a_rows && h && p->pairs->dot_rows_bf16 &&
                            h->cvt == p->pairs->bf16_cvt;

    /* Threads split the N dimension into column blocks when there are enough columns, else
     * every column block into groups of A micro-panels (so that tall, thin products still use
     * every thread). Either way a thread owns whole tiles of C. */
    int nt = 1;
    if (nthreads > 1 && (double)M * (double)N * (double)K >= p->min_par_work) nt = nthreads;
#ifndef _OPENMP
    nt = 1; /* serial build */
#endif
    int64_t nblocks = ceil_div(N, p->nc), groups = 1;
    if (nt > 1) {
        if (nblocks >= nt)
            nblocks = round_up(nblocks, nt);
        else if (ceil_div(N, nt) >= 4 * nr)
            nblocks = nt;
        else
            groups = nt;
    }
    const int64_t ncb = round_up(ceil_div(N, nblocks), nr);
    nblocks = ceil_div(N, ncb);
    const int64_t ntasks = nblocks * groups;
    if (nt > ntasks) nt = (int)ntasks;

    /* pre-packed A needs no packing buffer; words and floats have the same size */
    float *abuf = alloc_floats(apan ? 0 : mc * kcu);
    float *bbuf = alloc_floats((int64_t)nt * kcu * ncb);
    uint32_t *akey = choose ? malloc(sizeof(uint32_t) * (size_t)ceil_div(mc, mr)) : NULL;
    if (!abuf || !bbuf || (choose && !akey)) {
        fx_scratch_aligned_free(abuf);
        fx_scratch_aligned_free(bbuf);
        free(akey);
        return FX_ENOMEM;
    }

    FX_F32_OMP(parallel num_threads(nt) if (nt > 1))
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        float *my_b = bbuf + (int64_t)tid * kcu * ncb;
        float tile[FX_F32_TILE_MAX]; /* an fp16/bf16 output's tile of a one-block depth */
        /* a_rows: a full panel packed on demand, for the tiles that cannot read it in place */
        _Alignas(64) uint32_t apk[FX_PAIR_PANEL_WORDS];
        int64_t apk_row = -1, in_place = 0;
        for (int64_t m0 = 0; m0 < M; m0 += mc) {
            const int64_t mb = min64(mc, M - m0);
            const int64_t npm = ceil_div(mb, mr);
            for (int64_t k0 = 0; k0 < K; k0 += kc) {
                const int64_t kb = min64(kc, K - k0), ku = pm ? (kb + 1) / 2 : kb;
                const int accumulate = k0 > 0;

                /* pre-packed panels (a convolution's A): panel of row m0 + ip*mr at depth k0
                 * is at apan + ((m0 / mr + ip) * Ku + k0u) * mr units (kc is even) */
                const float *ablk =
                    apan ? (const float *)apan + (m0 / mr * Ku + (pm ? k0 / 2 : k0)) * mr : abuf;
                const int64_t astep = apan ? mr * Ku : mr * ku; /* units between panels */
                FX_F32_OMP(for schedule(static))
                for (int64_t ip = 0; ip < npm; ip++) {
                    if (a_rows && min64(mr, mb - ip * mr) == mr) {
                        akey[ip] = rows_minkey(p->pairs, A, m0 + ip * mr, mr, k0, kb);
                        continue;
                    }
                    if (!apan && pm)
                        pack_a_pairs(p, (uint32_t *)(void *)(abuf + ip * mr * ku), A,
                                     m0 + ip * mr, min64(mr, mb - ip * mr), k0, kb, mr);
                    else if (!apan)
                        pack_a_panel(p, abuf + ip * mr * ku, A, m0 + ip * mr,
                                     min64(mr, mb - ip * mr), k0, kb, mr);
                    if (choose) akey[ip] = pair_minkey(p->pairs, ablk + ip * astep, 2 * mr * ku);
                }

                int64_t packed = -1; /* column block currently in my_b */
                uint32_t bkey = 0;
                FX_F32_OMP(for schedule(static))
                for (int64_t t = 0; t < ntasks; t++) {
                    const int64_t nbi = t / groups, g = t % groups;
                    const int64_t n0 = nbi * ncb, nw = min64(ncb, N - n0);
                    const int64_t npn = ceil_div(nw, nr);
                    if (packed != nbi) {
                        if (pm) {
                            pack_b_pairs(p, (uint32_t *)(void *)my_b, B, k0, kb, n0, nw, nr);
                            if (choose) bkey = pair_minkey(p->pairs, my_b, 2 * npn * nr * ku);
                        } else {
                            pack_b_block(p, my_b, B, k0, kb, n0, nw, nr);
                        }
                        packed = nbi;
                    }
                    const int64_t ip_end = npm * (g + 1) / groups;
                    for (int64_t ip = npm * g / groups; ip < ip_end; ip++) {
                        const float *ap = ablk + ip * astep;
                        const int64_t i0 = m0 + ip * mr, mrows = min64(mr, M - i0);
                        const int dot = choose && pair_dot_exact(akey[ip], bkey);
                        /* a full panel read in place: packed here for the tiles that need
                         * the panel (exact, or a partial tile on scratch) */
                        const uint16_t *arow = NULL;
                        if (a_rows && mrows == mr) {
                            arow = (const uint16_t *)A->data + i0 * A->strides[0] + k0;
                            if (!dot || N % nr || cs != 1) {
                                if (apk_row != i0)
                                    pack_a_pairs(p, apk, A, i0, mr, k0, kb, mr);
                                apk_row = i0;
                                ap = (const float *)(const void *)apk;
                            }
                        }
                        for (int64_t jp = 0; jp < npn; jp++) {
                            const float *bp = my_b + jp * nr * ku;
                            const int64_t j0 = n0 + jp * nr, ncols = min64(nr, N - j0);
                            /* an fp16/bf16 output: a one-block depth computes the tile in
                             * L1 (nothing of C is written), a longer one converts C's tile
                             * after its last block */
                            const int to_h16 = h && k0 + kb == K;
                            float *ct = to_h16 && !accumulate ? tile : C + i0 * rs + j0 * cs;
                            const int64_t trs = to_h16 && !accumulate ? nr : rs;
                            if (arow && dot && ncols == nr && cs == 1 && to_h16 &&
                                direct_bf16) {
                                p->pairs->dot_rows_bf16(ku, arow, A->strides[0],
                                                        (const uint32_t *)(const void *)bp,
                                                        h->h16 + i0 * N + j0, N,
                                                        h->bias ? h->bias + j0 : NULL);
                                in_place++;
                                continue;
                            }
                            if (arow && dot && ncols == nr && cs == 1) {
                                p->pairs->dot_rows(ku, arow, A->strides[0],
                                                   (const uint32_t *)(const void *)bp, ct, trs);
                                in_place++;
                            } else if (mrows == mr && ncols == nr && cs == 1)
                                run_kernel(p, pm, dot, ku, ap, bp, ct, trs, accumulate);
                            else if (!pm && mrows < mr && ncols == nr && cs == 1 &&
                                     p->kernel_rows && p->kernel_rows[mrows])
                                p->kernel_rows[mrows](ku, (const float *)ap, (const float *)bp, ct,
                                                      trs, accumulate);
                            else if (!pm && mrows == mr && 2 * ncols == nr && cs == 1 &&
                                     p->kernel_half)
                                p->kernel_half(ku, (const float *)ap, (const float *)bp, ct, trs,
                                               accumulate);
                            else
                                scratch_tile(p, pm, dot, ku, ap, bp, ct, trs, cs, mrows, ncols,
                                             accumulate);
                            if (to_h16) tile_to_h16(h, ct, trs, mrows, ncols, i0, j0, N);
                        }
                    }
                }
                /* the implicit barrier above keeps the next depth block's A packing from
                 * overwriting panels (and keys) that another thread is still using */
            }
        }
        if (in_place) g_a_in_place_tiles += in_place;
    }
    fx_scratch_aligned_free(abuf);
    fx_scratch_aligned_free(bbuf);
    free(akey);
    return FX_OK;
}

/* Share of a micro-tile dimension t that n actually fills. */
static double tile_use(int64_t n, int64_t t) { return (double)n / (double)round_up(n, t); }

int fx_f32_gemm(const fx_f32_gemm_params *p, const fx_op_call *c)
{
    const fx_operand *A = &c->in[0], *B = &c->in[1];
    const int64_t M = A->shape[0], K = A->shape[1], N = B->shape[1];
    float *C = c->out_f32;
    if (M <= 0 || N <= 0) return FX_OK;
    if (K <= 0) {
        memset(C, 0, sizeof(float) * (size_t)(M * N));
        return FX_OK;
    }
    /* A narrow C (N small against the kernel's vector width nr, e.g. a 10-class output layer)
     * would leave most vector lanes idle: compute C^T = B^T A^T instead, which only swaps the
     * operands' strides and writes C through a transposed tile. Each output is still the same
     * k-ordered chain of the same products (a*b = b*a exactly), so the bits do not change. */
    const void *apan = c->a_panels;
    if (apan && c->a_panels_mr != p->mr) return FX_EUNSUPPORTED;
    const int pm = p->pairs && A->fmt == FMT_BF16 && B->fmt == FMT_BF16;
    if (!pm && !p->kernel) return FX_EUNSUPPORTED;
    const double use = tile_use(N, p->nr) * tile_use(M, p->mr);
    const double use_swapped = tile_use(M, p->nr) * tile_use(N, p->mr);
    if (!apan && use_swapped > 1.25 * use) {
        fx_operand At = *B, Bt = *A; /* At = B^T [N,K], Bt = A^T [K,M] */
        At.shape[0] = N, At.shape[1] = K, At.strides[0] = B->strides[1], At.strides[1] = B->strides[0];
        Bt.shape[0] = K, Bt.shape[1] = M, Bt.strides[0] = A->strides[1], Bt.strides[1] = A->strides[0];
        return gemm_run(p, pm, &At, NULL, &Bt, N, M, K, C, 1, N, c->nthreads, NULL);
    }
    /* an fp16/bf16 output converted from the tiles (fx_op_call.out_h16): nothing fails once
     * gemm_run has its buffers, and it writes no output before it has them */
    const gemm_h16 h = {c->out_h16, c->out_h16_cvt, c->out_h16_bias, c->out_h16_widen};
    const int take_h16 = c->out_h16 && c->out_h16_cvt && c->out_h16_done &&
                         p->mr * p->nr <= FX_F32_TILE_MAX &&
                         (!c->out_h16_bias || c->out_h16_widen);
    const int rc = gemm_run(p, pm, A, apan, B, M, N, K, C, N, 1, c->nthreads,
                            take_h16 ? &h : NULL);
    if (rc == FX_OK && take_h16) *c->out_h16_done = 1;
    return rc;
}
