/* bf16 x bf16 GEMM on AMX tiles (AMX-TILE, AMX-BF16: tdpbf16ps), the "amx" route of the bf16
 * MATMUL (src/core/backend.h).
 *
 * Why: one tdpbf16ps multiplies a 16 x 32 bf16 tile by a 32 x 16 one into 16 x 16 fp32 sums,
 * 16,384 operations per instruction. On the Xeons that have it, it runs at several times the
 * 512-bit FMA rate (measured by fx_amx_bf16_rate; oneDNN's and PyTorch's bf16 use it), where
 * vdpbf16ps runs at half the FMA rate.
 *
 * Arithmetic, per output: one chain over the pairs p of K (an odd K padded with a zero), in
 * order, each pair adding its two products to the fp32 sum as the instruction defines it
 * (Intel SDM: the even element's product, then the odd one's, rounded to nearest even), with
 * subnormal inputs read as zero and subnormal results flushed to zero. Each output is computed
 * by one thread over the whole K, so the bits depend neither on the thread count nor on the
 * blocking; they differ from the widen and dpbf16 routes' (other orders), as those differ from
 * each other. The error bound is the fp32 GEMM's on data without subnormals.
 *
 * Layout: tiles of 1 KiB, packed once per call.
 *   A, 16 rows x 32 k values (row-major, 64 bytes a row): read straight from A where A has unit
 *     k stride and the tile lies inside it (the tile load takes A's row stride), else packed:
 *     apk tile (q, t) at (q * nkt + t) * 512 bf16, rows of A beyond M and k beyond K zero;
 *   B, 16 pairs x 16 columns (pair words, the VNNI layout tdpbf16ps reads): bpk tile (s, t)
 *     at (s * nkt + t) * 512 bf16, element [pp][j][e] = B[32 t + 2 pp + e][16 s + j].
 * The register tile is 32 x 32 outputs: four accumulators (tmm0-3), two A tiles (tmm4-5) and
 * two B tiles (tmm6-7) per 32 values of k. Row and column panels are padded to even counts.
 * A product wider than tall streams B instead of packing it whole: each thread packs a group
 * of column panels into its own buffer (same tile layout, panel s at (s - s0) * nkt tiles)
 * and runs every row panel pair against it (amx_matmul_cols).
 *
 * A convolution may hand A as rows on demand (fx_op_call.a_rows) instead of a patch matrix:
 * each thread then gathers the 32 rows of one pair of row panels into a buffer the tile loads
 * read directly (its row stride) and runs every column panel against them, so nothing of the
 * patch matrix's size is written. Each output is still one chain over the whole K, so the bits
 * are those of the patch matrix.
 *
 * Linux gives a process the AMX state only after it asks (src/core/amx_tiles.h);
 * fx_amx_bf16_usable asks once and reports whether it may run. This file is compiled with
 * -mamx-tile -mamx-bf16 and its kernels run only where fx_amx_bf16_usable said yes. */
#include "../core/amx_tiles.h"
#include "../core/backend.h"
#include "../core/h16_bias.h"
#include "../core/prefetch.h"
#include "../core/transpose_avx512.h"
#include "../fp32/f32_kernels.h"
#include "bf16_gemm.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

enum { TILE_ELEMS = 512 }; /* bf16 per packed tile: 16 rows of 64 bytes */

int fx_amx_bf16_usable(const fx_cpu_features *cpu)
{
    return cpu->amx_bf16 && fx_amx_tile_state_granted();
}

/* Whether tile (q, t) of A is read straight from A (its 16 rows and 32 k values inside A, k
 * contiguous): tdpbf16ps's tile load takes the row stride, so such tiles need no packing; the
 * others (the M and K tails, or A without unit k stride) are packed. */
static int a_tile_direct(int64_t sak, int64_t M, int64_t K, int64_t q, int64_t t)
{
    return sak == 1 && q * 16 + 16 <= M && t * 32 + 32 <= K;
}

/* 16 bf16 of each of rows r0 and r1 interleaved into 16 pair words, in column order (unpack
 * works per 128-bit lane: columns 0-3 | 8-11 and 4-7 | 12-15, put back in order) */
static inline __m512i pair_words16(__m256i r0, __m256i r1)
{
    const __m256i lo = _mm256_unpacklo_epi16(r0, r1), hi = _mm256_unpackhi_epi16(r0, r1);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_permute2x128_si256(lo, hi, 0x20)),
                              _mm256_permute2x128_si256(lo, hi, 0x31), 1);
}

/* Tile t of row panel q of an A with contiguous rows of k (sam == 1: a transposed operand, as
 * the weight gradient's dy^T and the attention's P^T), whole (16 rows inside M, 32 k values
 * inside K). Why not element by element: each of its 512 values lies a row of A from the
 * next, and that gather took a tenth of a bf16 transformer step. Here the 16 pairs of k rows
 * (16 values each, contiguous) interleave into pair words, word j of pair row pp holding row
 * j's k values 2 pp and 2 pp + 1, and a 16 x 16 transpose of those words gives each row its
 * 32 k values in order. */
static void pack_a_tile_colmajor(uint16_t *d, const uint16_t *a, int64_t sak, int64_t q, int64_t t)
{
    const uint16_t *base = a + q * 16 + t * 32 * sak;
    __m512 w[16];
    for (int pp = 0; pp < 16; pp++) {
        const __m256i r0 = _mm256_loadu_si256((const void *)(base + 2 * pp * sak));
        const __m256i r1 = _mm256_loadu_si256((const void *)(base + (2 * pp + 1) * sak));
        w[pp] = _mm512_castsi512_ps(pair_words16(r0, r1));
    }
    fx_transpose16x16_ps(w);
    for (int r = 0; r < 16; r++) _mm512_storeu_ps((void *)(d + r * 32), w[r]);
}

/* Tile t of row panel q of A into d (nothing where the tile is read from A itself). */
static void pack_a_tile(uint16_t *d, const uint16_t *a, int64_t sam, int64_t sak, int64_t M,
                        int64_t K, int64_t q, int64_t t)
{
    if (a_tile_direct(sak, M, K, q, t)) return;
    if (sam == 1 && sak != 1 && q * 16 + 16 <= M && t * 32 + 32 <= K) {
        pack_a_tile_colmajor(d, a, sak, q, t);
        return;
    }
    for (int r = 0; r < 16; r++) {
        const int64_t i = q * 16 + r;
        uint16_t *dr = d + r * 32;
        const int64_t k0 = t * 32, n = i < M ? (K - k0 < 32 ? K - k0 : 32) : 0;
        if (n > 0 && sak == 1) {
            memcpy(dr, a + i * sam + k0, (size_t)n * sizeof *dr);
        } else {
            for (int64_t kk = 0; kk < n; kk++) dr[kk] = a[i * sam + (k0 + kk) * sak];
        }
        for (int64_t kk = n; kk < 32; kk++) dr[kk] = 0;
    }
}

/* Every packed tile (q, t) of A, at apk + (q nkt + t) tiles, shared among the threads of the
 * calling team (an orphaned loop; alone outside a parallel region). A transposed A goes k tile
 * by k tile across all the row panels, so that each k row is read whole, one sweep the
 * prefetchers follow, where a panel at a time read 32 bytes of every row over the whole K and
 * came back for the rest later (the weight gradient's dy^T: a fifth of a product's time). Any
 * other A goes panel by panel, so that the tiles it needs packed (a row-major A's K tail) are
 * spread over the threads. */
static void pack_a_all(uint16_t *apk, const uint16_t *a, int64_t sam, int64_t sak, int64_t M,
                       int64_t K, int64_t mq, int64_t nkt)
{
    const int by_k = sam == 1 && sak != 1;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (int64_t i = 0; i < (by_k ? nkt : mq); i++) {
        if (by_k)
            for (int64_t q = 0; q < mq; q++)
                pack_a_tile(apk + (q * nkt + i) * TILE_ELEMS, a, sam, sak, M, K, q, i);
        else
            for (int64_t t = 0; t < nkt; t++)
                pack_a_tile(apk + (i * nkt + t) * TILE_ELEMS, a, sam, sak, M, K, i, t);
    }
}

/* Tile t of column panel s of B, element by element (any strides, any tail). */
static void pack_b_tile_any(uint16_t *d, const uint16_t *b, int64_t sbk, int64_t sbn, int64_t K,
                            int64_t N, int64_t s, int64_t t)
{
    for (int pp = 0; pp < 16; pp++)
        for (int e = 0; e < 2; e++) {
            const int64_t k = t * 32 + 2 * pp + e;
            for (int j = 0; j < 16; j++) {
                const int64_t col = s * 16 + j;
                d[pp * 32 + 2 * j + e] = k < K && col < N ? b[k * sbk + col * sbn] : 0;
            }
        }
}

/* Rows r0 and r1 of 16 values interleaved into the 16 pair words of pair row pp at d + 32 pp */
static inline void pack_b_pair_words(uint16_t *d, __m256i r0, __m256i r1, int pp)
{
    _mm512_storeu_si512((void *)(d + pp * 32), pair_words16(r0, r1));
}

/* Pair row pp of a whole tile of a row-major B whose column panel starts at r (the tile's row
 * 0): rows 2 pp and 2 pp + 1 interleaved into the 16 pair words at d + 32 pp. */
static inline void pack_b_pair_row(uint16_t *d, const uint16_t *r, int64_t sbk, int pp)
{
    const __m256i r0 = _mm256_loadu_si256((const void *)(r + 2 * pp * sbk));
    const __m256i r1 = _mm256_loadu_si256((const void *)(r + (2 * pp + 1) * sbk));
    pack_b_pair_words(d, r0, r1, pp);
}

/* pack_b_pair_row in the last tile of k, of which only rows 0 .. rows - 1 lie in B (the
 * others pack as zeros) */
static inline void pack_b_pair_row_tail(uint16_t *d, const uint16_t *r, int64_t sbk, int pp,
                                        int64_t rows)
{
    const __m256i z = _mm256_setzero_si256();
    const __m256i r0 = 2 * pp < rows ? _mm256_loadu_si256((const void *)(r + 2 * pp * sbk)) : z;
    const __m256i r1 =
        2 * pp + 1 < rows ? _mm256_loadu_si256((const void *)(r + (2 * pp + 1) * sbk)) : z;
    pack_b_pair_words(d, r0, r1, pp);
}

/* Column panel s of B (16 columns), all nkt tiles, in pair words. Whole tiles of a row-major
 * B interleave two rows of 16 values per pair row; of a column-major B (a convolution's
 * weights), whose pairs are adjacent in memory, they transpose 16 x 16 32-bit words. */
static void pack_b_panel(uint16_t *dst, const uint16_t *b, int64_t sbk, int64_t sbn, int64_t K,
                         int64_t N, int64_t s, int64_t nkt)
{
    const int full_cols = s * 16 + 16 <= N;
    for (int64_t t = 0; t < nkt; t++) {
        uint16_t *d = dst + t * TILE_ELEMS;
        const int64_t k0 = t * 32;
        if (!full_cols || k0 + 32 > K || (sbn != 1 && sbk != 1)) {
            pack_b_tile_any(d, b, sbk, sbn, K, N, s, t);
        } else if (sbn == 1) {
            for (int pp = 0; pp < 16; pp++) pack_b_pair_row(d, b + k0 * sbk + s * 16, sbk, pp);
        } else { /* sbk == 1: column j's pair pp is the 32-bit word pp of b + col * sbn + k0 */
            __m512 w[16];
            for (int j = 0; j < 16; j++) w[j] = _mm512_loadu_ps((const void *)(b + (s * 16 + j) * sbn + k0));
            fx_transpose16x16_ps(w);
            for (int pp = 0; pp < 16; pp++) _mm512_storeu_ps((void *)(d + pp * 32), w[pp]);
        }
    }
}

int64_t fx_bf16_amx_b_numel(int64_t K, int64_t N)
{
    return (N + 31) / 32 * 2 * ((K + 31) / 32) * TILE_ELEMS;
}

#ifndef FX_BF16_AMX_B_PREFETCH_ROWS
#define FX_BF16_AMX_B_PREFETCH_ROWS 16
#endif

/* Column panels s0 .. s1 - 1 of B, all nkt tiles each, panel s at dst + (s - s0) nkt tiles.
 * For a row-major B the whole tiles of whole panels are packed along B's rows (each pair row's
 * runs of all the panels in turn), so that a row is read in one sweep the prefetchers follow
 * rather than 32 bytes of it per panel; the rest as pack_b_panel. */
static void pack_b_group(uint16_t *dst, const uint16_t *b, int64_t sbk, int64_t sbn, int64_t K,
                         int64_t N, int64_t s0, int64_t s1, int64_t nkt)
{
    const int64_t sw = sbn == 1 ? (N / 16 < s1 ? N / 16 : s1) : s0; /* whole panels: s0 .. sw */
    const int64_t tw = K / 32;                                       /* whole tiles: 0 .. tw */
    /* what the hardware prefetchers miss in these runs of 32 bytes a panel, a row of B apart
     * (the int16 packer's reasoning, src/flex/gemm_i16_amx.c): the rows
     * FX_BF16_AMX_B_PREFETCH_ROWS below, or where B has one tile of k, the same rows of the
     * next group, which the thread packs next where B streams */
    const int shallow = K <= 32;
    const int64_t ns_all = (N + 15) / 16, g = s1 - s0, ld = sbk * (int64_t)sizeof(uint16_t);
    const int64_t rows_ahead = shallow ? 0 : FX_BF16_AMX_B_PREFETCH_ROWS;
    const int64_t ahead = shallow ? g * 16 * (int64_t)sizeof(uint16_t) : rows_ahead * ld;
    for (int64_t t = 0; t < nkt && sw > s0; t++)
        for (int pp = 0; pp < 16; pp++) {
            const int64_t k = t * 32 + 2 * pp;
            for (int64_t s = s0; s < sw; s++) {
                uint16_t *d = dst + ((s - s0) * nkt + t) * TILE_ELEMS;
                const uint16_t *r = b + t * 32 * sbk + s * 16;
                /* each 64-byte line once; offsets in bytes from B's start, rows past K and
                 * panels past the last left alone */
                if (!((s - s0) & 1) && (!shallow || s + g < ns_all))
                    fx_prefetch_rows(b, k, 2, ld, s * 16 * (int64_t)sizeof(uint16_t), ahead,
                                     rows_ahead, K);
                if (t < tw)
                    pack_b_pair_row(d, r, sbk, pp);
                else /* the K tail: rows from K on pack as zeros */
                    pack_b_pair_row_tail(d, r, sbk, pp, K - t * 32);
            }
        }
    for (int64_t s = sw > s0 ? sw : s0; s < s1; s++)
        pack_b_panel(dst + (s - s0) * nkt * TILE_ELEMS, b, sbk, sbn, K, N, s, nkt);
}

/* Where B streams (below), a thread packs a group of consecutive column panel pairs of B
 * (at most FX_BF16_AMX_B_GROUP_BYTES, at most FX_BF16_AMX_B_GROUP_PAIRS pairs) and runs every
 * row panel pair against them: a product wider than tall reads its large B from memory once,
 * along its rows, and writes C a group's width at a time. Panels over the whole K longer than
 * one group (K > 4096) keep B packed whole. Measured at one thread on the Xeon reporting
 * model 167, 64 x 25088 x 800: 37 ms with B packed whole panel by panel, 26 ms packed whole
 * along its rows, 8.2 ms streamed. */
#define FX_BF16_AMX_B_GROUP_BYTES ((int64_t)256 << 10)
#define FX_BF16_AMX_B_GROUP_PAIRS 8

/* Every column panel of B packed into bpk (panel s at s * nkt tiles), in groups of at most
 * FX_BF16_AMX_B_GROUP_PAIRS panel pairs shared among the threads of the calling team (an
 * orphaned loop; alone outside a parallel region), and smaller groups where there would be
 * fewer groups than threads. */
static void pack_b_whole(uint16_t *bpk, const uint16_t *b, int64_t sbk, int64_t sbn, int64_t K,
                         int64_t N, int64_t ns, int64_t nkt)
{
    int team = 1;
#ifdef _OPENMP
    team = omp_get_num_threads();
#endif
    int64_t gsz = 2 * FX_BF16_AMX_B_GROUP_PAIRS;
    while (gsz > 2 && (ns + gsz - 1) / gsz < team) gsz -= 2;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (int64_t s = 0; s < ns; s += gsz)
        pack_b_group(bpk + s * nkt * TILE_ELEMS, b, sbk, sbn, K, N, s, ns - s < gsz ? ns : s + gsz,
                     nkt);
}

void fx_bf16_amx_pack_b(const uint16_t *b, int64_t sbk, int64_t sbn, int64_t K, int64_t N,
                        uint16_t *bpk)
{
    pack_b_whole(bpk, b, sbk, sbn, K, N, (N + 31) / 32 * 2, (K + 31) / 32);
}

/* Where tile (q, t) of A is read from: A itself or its packed copy (64 bytes between rows);
 * or, for rows on demand, the gathered rows of panels q0 and q0 + 1 (rows != NULL: row r of
 * them at rows + r * ld + FX_A_ROWS_SLACK, ld bf16 apart). */
typedef struct {
    const uint16_t *a, *apk, *rows;
    int64_t sam, sak, M, K, nkt, q0, ld;
} amx_a_src;

static inline const uint16_t *a_tile(const amx_a_src *as, int64_t q, int64_t t, long *stride)
{
    if (as->rows) {
        *stride = (long)(as->ld * (int64_t)sizeof(uint16_t));
        return as->rows + (q - as->q0) * 16 * as->ld + FX_A_ROWS_SLACK + t * 32;
    }
    if (a_tile_direct(as->sak, as->M, as->K, q, t)) {
        *stride = (long)(as->sam * (int64_t)sizeof(uint16_t));
        return as->a + q * 16 * as->sam + t * 32;
    }
    *stride = 64;
    return as->apk + (q * as->nkt + t) * TILE_ELEMS;
}

/* Rows 16 q ... 16 q + 31 from rows on demand into rows (32 rows of ld bf16, row r's values at
 * rows + r * ld + FX_A_ROWS_SLACK, room for the source's slack on both sides), with k from K
 * to the last tile's end and the rows beyond M zero, as the tile loads read them. */
static void gather_a_rows_pair(uint16_t *rows, const fx_op_call *c, int64_t ld, int64_t M,
                               int64_t K, int64_t q, int64_t nkt)
{
    const int64_t i0 = q * 16, kend = nkt * 32;
    const int m = (int)(M - i0 < 32 ? M - i0 : 32);
    c->a_rows(c->a_rows_ctx, i0, m, 0, K, (int16_t *)(void *)(rows + FX_A_ROWS_SLACK), ld);
    for (int r = 0; r < 32; r++) {
        uint16_t *row = rows + r * ld + FX_A_ROWS_SLACK;
        const int64_t from = r < m ? K : 0; /* the source may have written its slack there */
        memset(row + from, 0, (size_t)(kend - from) * sizeof *row);
    }
}

/* Where a block's results go: fp32 rows of out, ldo apart, or (h16 set: fx_op_call.out_h16)
 * the same rows of h16, converted by cvt. */
typedef struct amx_out {
    float *f32;
    uint16_t *h16;
    void (*cvt)(const float *src, uint16_t *dst, int64_t n);
    int64_t ldo;
    const float *bias; /* fx_op_call.out_h16_bias: NULL, or added per column (h16_bias.h) */
    void (*widen)(const uint16_t *src, float *dst, int64_t n);
} amx_out;

static amx_out amx_out_of(const fx_op_call *c, int64_t N)
{
    amx_out o = {c->out_f32, c->out_h16, c->out_h16_cvt, N, c->out_h16_bias, c->out_h16_widen};
    if (!o.h16 || !o.cvt || !c->out_h16_done || (o.bias && !o.widen)) o.h16 = NULL;
    return o;
}

/* The 32 x 32 block of row panels q, q+1 and column panels s, s+1 = their products, into ot
 * (the valid part only: rows < M, columns < N); b0: the packed tiles of panel s, panel s + 1's
 * after them. */
static void amx_block(const amx_a_src *as, const uint16_t *b0, int64_t q, int64_t s,
                      const amx_out *ot, int64_t N)
{
    float *out = ot->f32;
    const int64_t ldo = ot->ldo;
    const int64_t nkt = as->nkt, M = as->M;
    const uint16_t *b1 = b0 + nkt * TILE_ELEMS;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t t = 0; t < nkt; t++) {
        long st0, st1;
        const uint16_t *a0 = a_tile(as, q, t, &st0), *a1 = a_tile(as, q + 1, t, &st1);
        _tile_loadd(4, a0, st0);
        _tile_loadd(5, a1, st1);
        _tile_loadd(6, b0 + t * TILE_ELEMS, 64);
        _tile_loadd(7, b1 + t * TILE_ELEMS, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    const int64_t i0 = q * 16, j0 = s * 16;
    if (!ot->h16 && i0 + 32 <= M && j0 + 32 <= N) {
        float *o = out + i0 * ldo + j0;
        const long st = (long)(ldo * (int64_t)sizeof(float));
        _tile_stored(0, o, st);
        _tile_stored(1, o + 16, st);
        _tile_stored(2, o + 16 * ldo, st);
        _tile_stored(3, o + 16 * ldo + 16, st);
        return;
    }
    float buf[32 * 32];
    _tile_stored(0, buf, 128);
    _tile_stored(1, buf + 16, 128);
    _tile_stored(2, buf + 16 * 32, 128);
    _tile_stored(3, buf + 16 * 32 + 16, 128);
    const int64_t mr = M - i0 < 32 ? M - i0 : 32, nc = N - j0 < 32 ? N - j0 : 32;
    if (ot->h16) { /* the write's conversion of the sums, in L1 */
        uint16_t h[32 * 32];
        ot->cvt(buf, h, mr * 32);
        if (ot->bias) fx_h16_add_bias(h, mr, 32, nc, ot->bias + j0, ot->widen, ot->cvt);
        for (int64_t r = 0; r < mr; r++)
            memcpy(ot->h16 + (i0 + r) * ldo + j0, h + r * 32, (size_t)nc * sizeof(uint16_t));
        return;
    }
    for (int64_t r = 0; r < mr; r++)
        memcpy(out + (i0 + r) * ldo + j0, buf + r * 32, (size_t)nc * sizeof(float));
}

/* The product with A as rows on demand: B packed once, then per pair of row panels (a thread's
 * share, statically) the rows gathered, and every column panel against them. */
static int amx_matmul_rows(const fx_op_call *c, int64_t M, int64_t K, int64_t N, int64_t nkt,
                           int64_t mq, int64_t ns)
{
    const fx_operand *B = &c->in[1];
    /* B pre-packed by the caller (c->b_amx), or packed here */
    uint16_t *own = c->b_amx ? NULL : fx_scratch_aligned_alloc((size_t)(ns * nkt) * TILE_ELEMS * sizeof(uint16_t));
    if (!c->b_amx && !own) return FX_ENOMEM;
    const uint16_t *bpk = c->b_amx ? c->b_amx : own;
    const uint16_t *b = B->data;
    const int nt = c->nthreads > 1 && (double)M * (double)N * (double)K >= (double)(1 << 20)
                       ? c->nthreads
                       : 1;
    (void)nt; /* used by the OpenMP pragmas only */
    const int64_t ld = (nkt * 32 + 2 * FX_A_ROWS_SLACK + 31) / 32 * 32; /* bf16 per gathered row */
    /* fp32 results only: a thread's buffer may be missing after another thread has written */
    const amx_out ot = {c->out_f32, NULL, NULL, N, NULL, NULL};
    int failed = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : failed)
#endif
    {
        if (own) pack_b_whole(own, b, B->strides[0], B->strides[1], K, N, ns, nkt);
        uint16_t *rows = fx_scratch_aligned_alloc((size_t)(32 * ld) * sizeof(uint16_t));
        failed = !rows;
        if (!failed) fx_amx_tiles_configure();
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t qp = 0; qp < mq / 2; qp++) {
            if (failed) continue; /* this thread's buffers are missing; the call fails */
            gather_a_rows_pair(rows, c, ld, M, K, 2 * qp, nkt);
            const amx_a_src as = {NULL, NULL, rows, 0, 0, M, K, nkt, 2 * qp, ld};
            for (int64_t s = 0; s < ns; s += 2)
                amx_block(&as, bpk + s * nkt * TILE_ELEMS, 2 * qp, s, &ot, N);
        }
        if (!failed) _tile_release();
        fx_scratch_aligned_free(rows);
    }
    fx_scratch_aligned_free(own);
    return failed ? FX_ENOMEM : FX_OK;
}

static int64_t amx_b_group_pairs(int64_t nkt)
{
    const int64_t pair_bytes = 2 * nkt * TILE_ELEMS * (int64_t)sizeof(uint16_t);
    const int64_t g = FX_BF16_AMX_B_GROUP_BYTES / pair_bytes;
    return g > FX_BF16_AMX_B_GROUP_PAIRS ? FX_BF16_AMX_B_GROUP_PAIRS : g;
}

/* The product with B streamed in groups of column panel pairs (N > M): A packed whole (its
 * tiles that cannot be read in place), then per group (a thread's share, statically) B's
 * panels packed and every row panel pair run against them. Each output is still one chain
 * over the whole K: the bits are those of the other schedules. */
static int amx_matmul_cols(const fx_op_call *c, int64_t M, int64_t K, int64_t N, int64_t nkt,
                           int64_t mq, int64_t ns, int64_t gp)
{
    const fx_operand *A = &c->in[0], *B = &c->in[1];
    const int64_t gtiles = 2 * gp * nkt, ng = (ns / 2 + gp - 1) / gp;
    const int nt = c->nthreads > 1 && (double)M * (double)N * (double)K >= (double)(1 << 20)
                       ? c->nthreads
                       : 1;
    uint16_t *apk = fx_scratch_aligned_alloc((size_t)(mq * nkt) * TILE_ELEMS * sizeof(uint16_t));
    uint16_t *bufs = fx_scratch_aligned_alloc((size_t)(nt * gtiles) * TILE_ELEMS * sizeof(uint16_t));
    if (!apk || !bufs) {
        fx_scratch_aligned_free(apk);
        fx_scratch_aligned_free(bufs);
        return FX_ENOMEM;
    }
    const uint16_t *a = A->data, *b = B->data;
    const amx_a_src as = {a, apk, NULL, A->strides[0], A->strides[1], M, K, nkt, 0, 0};
    const amx_out ot = amx_out_of(c, N); /* nothing below can fail */
    if (ot.h16) *c->out_h16_done = 1;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        pack_a_all(apk, a, A->strides[0], A->strides[1], M, K, mq, nkt);
        uint16_t *buf = bufs + (size_t)(tid * gtiles) * TILE_ELEMS;
        fx_amx_tiles_configure();
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t g = 0; g < ng; g++) {
            const int64_t s0 = 2 * gp * g, s1 = ns - s0 < 2 * gp ? ns : s0 + 2 * gp;
            pack_b_group(buf, b, B->strides[0], B->strides[1], K, N, s0, s1, nkt);
            for (int64_t q = 0; q < mq; q += 2)
                for (int64_t s = s0; s < s1; s += 2)
                    amx_block(&as, buf + (s - s0) * nkt * TILE_ELEMS, q, s, &ot, N);
        }
        _tile_release();
    }
    fx_scratch_aligned_free(apk);
    fx_scratch_aligned_free(bufs);
    return FX_OK;
}

int fx_bf16_matmul_amx(const fx_op_call *c)
{
    const fx_operand *A = &c->in[0], *B = &c->in[1];
    /* pre-packed panels or other formats are not this route's: the widening GEMM takes them
     * (rows on demand come only with bf16 operands: src/nn/conv2d.c checks bf16_row_source) */
    if (c->a_rows && (c->a_panels || A->fmt != FMT_BF16 || B->fmt != FMT_BF16))
        return FX_EUNSUPPORTED;
    if (c->a_panels || A->fmt != FMT_BF16 || B->fmt != FMT_BF16) return fx_f32_matmul_avx512(c);
    const int64_t M = A->shape[0], K = A->shape[1], N = B->shape[1];
    float *out = c->out_f32;
    if (M == 0 || N == 0) return FX_OK;
    if (K == 0) {
        memset(out, 0, (size_t)(M * N) * sizeof *out);
        return FX_OK;
    }
    const int64_t nkt = (K + 31) / 32;
    const int64_t mq = (M + 31) / 32 * 2, ns = (N + 31) / 32 * 2; /* panels, even counts */
    if (c->a_rows) return amx_matmul_rows(c, M, K, N, nkt, mq, ns);
    if (N > M && amx_b_group_pairs(nkt) >= 1)
        return amx_matmul_cols(c, M, K, N, nkt, mq, ns, amx_b_group_pairs(nkt));
    uint16_t *apk = fx_scratch_aligned_alloc((size_t)(mq * nkt) * TILE_ELEMS * sizeof(uint16_t));
    uint16_t *bpk = fx_scratch_aligned_alloc((size_t)(ns * nkt) * TILE_ELEMS * sizeof(uint16_t));
    if (!apk || !bpk) {
        fx_scratch_aligned_free(apk);
        fx_scratch_aligned_free(bpk);
        return FX_ENOMEM;
    }
    const uint16_t *a = A->data, *b = B->data;
    const int nt = c->nthreads > 1 && (double)M * (double)N * (double)K >= (double)(1 << 20)
                       ? c->nthreads
                       : 1;
    (void)nt; /* used by the OpenMP pragmas only */
    const int64_t nblocks = (mq / 2) * (ns / 2);
    const amx_a_src as = {a, apk, NULL, A->strides[0], A->strides[1], M, K, nkt, 0, 0};
    const amx_out ot = amx_out_of(c, N); /* nothing below can fail */
    if (ot.h16) *c->out_h16_done = 1;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        pack_a_all(apk, a, A->strides[0], A->strides[1], M, K, mq, nkt);
        pack_b_whole(bpk, b, B->strides[0], B->strides[1], K, N, ns, nkt);
        fx_amx_tiles_configure();
        /* blocks row by row: a thread's consecutive blocks share their A panels */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t blk = 0; blk < nblocks; blk++) {
            const int64_t s = 2 * (blk % (ns / 2));
            amx_block(&as, bpk + s * nkt * TILE_ELEMS, 2 * (blk / (ns / 2)), s, &ot, N);
        }
        _tile_release();
    }
    fx_scratch_aligned_free(apk);
    fx_scratch_aligned_free(bpk);
    return FX_OK;
}

/* iters iterations of four independent tdpbf16ps (fx_amx_rate's loop) */
static void amx_bf16_rate_loop(long iters)
{
    for (long i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 6);
        _tile_dpbf16ps(2, 4, 6);
        _tile_dpbf16ps(3, 4, 6);
    }
}

/* tdpbf16ps per second of this thread's CPU time, as operations (2 per product, 16,384 per
 * instruction) */
double fx_amx_bf16_rate(long iters, int reps)
{
    return fx_amx_rate(amx_bf16_rate_loop, iters, reps, 4.0 * 16384.0);
}
