/* Exact int16 x int16 -> int64 GEMM on AMX-INT8 tiles: the "amx" kernel of the integer
 * MATMUL (gemm_i16.h, FX_GEMM_I16_KERNEL_AMX).
 *
 * Why: one AMX-INT8 tile product (tdpb[su][su]d) multiplies a 16 x 64 byte tile by a 64 x 16
 * one into 16 x 16 int32 sums, 16,384 products per instruction, where vpdpwssd makes 32 int16
 * products. Four byte products make one int16 product, and on the Xeons that have AMX the tile
 * unit still yields several times vpdpwssd's int16 rate (measured by fx_amx_int8_rate; the
 * choice between the routes is measured too, src/core/kernel_choice.h).
 *
 * Arithmetic, exact for every int16 input (-32768 included). Each value is split into its
 * signed high byte and unsigned low byte,
 *     a = 256 ah + al,   ah = a >> 8 in [-128, 127] (arithmetic shift),   al = a & 255 in [0, 255],
 * so that   a b = 65536 ah bh + 256 (ah bl + al bh) + al bl.   Four int32 accumulator tiles
 * take, over a chunk of at most FX_AMX_I16_CHUNK_K values of k:
 *     HH = sum ah bh   (tdpbssd: signed x signed),       |term| <= 2^14
 *     HL = sum ah bl   (tdpbsud: signed x unsigned),     |term| <= 128 * 255
 *     LH = sum al bh   (tdpbusd: unsigned x signed),     |term| <= 255 * 128
 *     LL = sum al bl   (tdpbuud: unsigned x unsigned),   0 <= term <= 255^2
 * With 32,768 values per chunk, LL <= 32,768 * 65,025 = 2,130,739,200 < 2^31 and the others are
 * smaller: no int32 sum ever wraps. The K blocks below are shorter than such a chunk; after
 * each, 65536 HH + 256 (HL + LH) + LL is formed in int64 (exact) and added to the output. (HL
 * and LH could share a tile, but then every step's two products into it would wait for each
 * other: a tile product's latency is several times its issue interval, so the fourth
 * accumulator is what keeps the tile unit busy.) Every step is exact, so the int64 results
 * equal the mathematical sums and the other integer kernels' bits, whatever the blocking and
 * thread count.
 *
 * Layout: byte tiles of 1 KiB made from the plain int16 operands.
 *   A, 16 rows x 64 k values: a high plane then a low plane, row r's byte kk =
 *     plane(A[16 q + r][64 t + kk]) for tile t of row panel q;
 *   B, 16 quads x 16 columns (the layout the tile products read: four consecutive k values of
 *     one column in one 32-bit word), byte [u][4 j + e] = plane(B[64 t + 4 u + e][16 s + j])
 *     for tile t of column panel s.
 *   The tiles of one panel and K block follow each other, 2 KiB apart.
 *   Rows beyond M, columns beyond N and k beyond K are zero (they add nothing).
 * One output block of 16 x 16 takes all eight tiles: four accumulators (tmm0-3), A's two
 * planes (tmm4-5) and B's two planes (tmm6-7); four tile products per 64 values of k.
 *
 * Blocking, two schedules; each packs one operand whole per K block (FX_AMX_I16_KB_TILES
 * tiles of k) and streams the other a panel at a time through a thread's L1-sized buffer, so
 * the larger operand is the streamed one and is read from memory once:
 *   - rows streamed (M >= N, and every product whose A rows come on demand, a_rows): B packed
 *     whole, its column panels in chunks of FX_AMX_I16_B_CHUNK_BYTES; for each chunk the
 *     threads share the row panels of A, each packing a panel's tiles of the K block into its
 *     own buffer (gathering the rows first where a convolution supplies them, a_rows) and
 *     computing that panel's blocks of the chunk;
 *   - columns streamed (N > M): A packed whole, its row panels in chunks of
 *     FX_AMX_I16_A_CHUNK_BYTES; for each chunk the threads share the column panels of B, each
 *     packing one and computing its blocks down the chunk. A row-major B's panel is four
 *     rows' 32-byte runs per quad, one two-source byte permute per plane.
 * Both write C row by row. (Computing a wide product transposed, C^T = B^T A^T, would stream
 * the right operand too, but its packing transposes every tile and its writes go down the
 * columns of C: 64 x 25088 x 800 took 34 ms that way, against 11 ms for the transposed shape.)
 *
 * Compiled with -mamx-tile -mamx-int8 and the AVX-512 flags; its entry runs only where
 * fx_amx_int8_usable said yes (src/core/backend.c installs it). */
#include "../core/amx_tiles.h"
#include "../core/backend.h"
#include "../core/prefetch.h"
#include "flex_kernels.h"
#include "gemm_i16.h"
#include "quant_q64_avx512.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

enum { KT = 64, TILE_BYTES = 1024, PAIR_BYTES = 2 * TILE_BYTES };

/* k values per exact int32 chunk (see above) */
#define FX_AMX_I16_CHUNK_K 32768
#define FX_AMX_I16_CHUNK_TILES (FX_AMX_I16_CHUNK_K / KT)

/* k tiles (64 values each) per K block: A's panel of one K block (64 KiB) stays in L1/L2
 * while a chunk of B's column panels passes, and a panel of B per K block is as small, so that
 * a chunk holds many; a K block is one exact int32 chunk (FX_AMX_I16_CHUNK_TILES) or less */
#define FX_AMX_I16_KB_TILES 32
_Static_assert(FX_AMX_I16_KB_TILES <= FX_AMX_I16_CHUNK_TILES, "a K block is one int32 chunk");
_Static_assert(FX_GEMM_I16_AMX_ROUND_MAX_K <= FX_AMX_I16_KB_TILES * KT,
               "a product rounded in registers is one K block");

/* Packed B per column chunk, in bytes (fx_flex_matmul_amx): the row panels of A meet one chunk
 * of B at a time, which stays in L2 (2 MiB a core on the Xeons with AMX) while they pass. At
 * 1024^3 on one thread of the Xeon reporting model 167, a 1 MiB chunk took 6.1-6.6 ms against
 * 8.3-8.7 without chunks, 6.4-7.0 with 512 KiB and 7.0-7.5 with 256 KiB (every chunk packs A
 * again); products whose B fits are not cut. */
#ifndef FX_AMX_I16_B_CHUNK_BYTES
#define FX_AMX_I16_B_CHUNK_BYTES ((int64_t)1 << 20)
#endif

/* Packed A per row chunk where the columns stream (N > M): the same reasoning with the
 * operands' roles exchanged */
#ifndef FX_AMX_I16_A_CHUNK_BYTES
#define FX_AMX_I16_A_CHUNK_BYTES ((int64_t)1 << 20)
#endif

/* Where the columns stream, a thread packs a group of consecutive column panels of B (at most
 * FX_AMX_I16_B_GROUP_BYTES, and at most FX_AMX_I16_B_GROUP_MAX panels) and computes them row
 * panel by row panel, so that each block row writes the group's width of C in one run rather
 * than 16 values a row down a strip of C. The packing reads runs of 32 bytes per panel a whole
 * row of B apart: with K >= 2048 (64 KiB panels) a 256 KiB group read 128-byte runs, which on a
 * B that comes from memory left the CNN's conv2 weight-gradient shape (64 x 800 x 25088) at
 * 226-233 GOP/s against 264-277 with 512 KiB (bench_gemm, one thread, Xeon model 167); half of
 * the smallest L2 here (Zen 4's 1 MiB), per thread. */
#define FX_AMX_I16_B_GROUP_BYTES ((int64_t)512 << 10)
#define FX_AMX_I16_B_GROUP_MAX 16

/* A group's rows of a row-major B are short runs (16 panels: 512 bytes) a whole row of B
 * apart, too short for the hardware prefetchers to follow from memory, so the packing asks for
 * the rows this many quads of k ahead itself */
#ifndef FX_AMX_I16_B_PREFETCH_QUADS
#define FX_AMX_I16_B_PREFETCH_QUADS 4
#endif

int fx_amx_int8_usable(const fx_cpu_features *cpu)
{
    return cpu->amx_int8 && fx_amx_tile_state_granted();
}

typedef struct {
    const int16_t *a, *b;
    int64_t sam, sak, sbk, sbn;
    int64_t M, K, N, nkt;
    int64_t *out;
    int64_t ldo; /* the output's row stride */
    /* A's rows on demand (fx_op_call.a_rows: a convolution's patch rows) instead of a */
    void (*a_rows)(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int16_t *dst,
                   int64_t ld);
    const void *a_rows_ctx;
    int64_t rows_ld; /* row stride of a thread's staging rows for a_rows */
    /* or A's packed tiles on demand (fx_op_call.a_tiles), which the source writes itself */
    void (*a_tiles)(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int8_t *ap);
    const void *a_tiles_ctx;
    /* B packed beforehand (fx_gemm_i16_amx_pack_b), or NULL */
    const int8_t *b_pre;
    /* or, instead of out, the sums rounded in registers (fx_op_call.out_i16): into out16
     * (row stride ldo), at the shift of rq; the product is then one K block */
    int16_t *out16;
    fx_q64_fast rq;
    /* K <= FX_AMX_I16_SHORT_K: the product is half a tile of k (amx_i16_configure) */
    int short_k;
} amx_i16_job;

/* Products of at most this many values of k (a 5 x 5 or 3 x 3 x 3 patch, a head of 32) load
 * half tiles: A's 16 rows of 32 bytes and B's first 8 quads, so that the packing writes, and
 * the tile loads read, half of B's panel (the rest would be zeros). */
#define FX_AMX_I16_SHORT_K (KT / 2)

/* The calling thread's tile shapes for job j: all 16 x 64 bytes, or with a short K, the A
 * planes (tmm4-5) 16 rows of 32 bytes and the B planes (tmm6-7) 8 quads of 64 bytes. The
 * packed layouts stay those of whole tiles; the half that a short load skips is never read. */
static void amx_i16_configure(const amx_i16_job *j)
{
    if (!j->short_k) {
        fx_amx_tiles_configure();
        return;
    }
    const unsigned char rows[8] = {16, 16, 16, 16, 16, 16, 8, 8};
    const unsigned short colsb[8] = {64, 64, 64, 64, 32, 32, 64, 64};
    fx_amx_tiles_configure_shapes(rows, colsb);
}

/* quads of k that the tile loads of job j read from each B tile */
static inline int amx_b_quads(const amx_i16_job *j) { return j->short_k ? 8 : 16; }

/* masks of the first n (0..64) of 64 int16 lanes, as two 32-lane halves */
static inline void lane_masks(int64_t n, __mmask32 *m0, __mmask32 *m1)
{
    *m0 = n >= 32 ? 0xffffffffu : (__mmask32)((1u << n) - 1u);
    *m1 = n >= 64 ? 0xffffffffu : n > 32 ? (__mmask32)((1u << (n - 32)) - 1u) : 0;
}

/* the high bytes (arithmetic >> 8) and low bytes of 32 int16 lanes */
static inline __m256i hi_bytes(__m512i v) { return _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)); }
static inline __m256i lo_bytes(__m512i v) { return _mm512_cvtepi16_epi8(v); }

/* r[i] word j <- r[j] word i: a 16 x 16 transpose of 32-bit words in registers (unpacks of
 * words and pairs, then two rounds of 128-bit lane shuffles) */
static inline void transpose16_epi32(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    }
}

/* The 16 rows of one row panel of A: a0 = its first row's element k = 0, strides sam and
 * sak, rows (1..16) of them inside A (the rest pack as zeros), K values each. */
typedef struct {
    const int16_t *a0;
    int64_t sam, sak, K;
    int rows;
} amx_a_panel;

/* Tile t of a row panel of A with contiguous columns (sam == 1: a transposed operand), whole
 * tiles only: each quad of k rows gives 4 x 16 values, permuted into the 16 rows' 4-byte words
 * of word column u of the tile. */
static void pack_a_tile_colmajor(const amx_a_panel *p, int64_t t, int8_t *hi, int8_t *lo)
{
    /* byte 4 r + e of the result = byte 16 e + r of the four rows' bytes */
    _Alignas(64) static const uint8_t perm[64] = {
        0,  16, 32, 48, 1,  17, 33, 49, 2,  18, 34, 50, 3,  19, 35, 51, 4,  20, 36, 52, 5,  21,
        37, 53, 6,  22, 38, 54, 7,  23, 39, 55, 8,  24, 40, 56, 9,  25, 41, 57, 10, 26, 42, 58,
        11, 27, 43, 59, 12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63};
    const __m512i idx = _mm512_load_si512((const void *)perm);
    __m512i hw[16], lw[16]; /* [u]: word r = row r's four k values of quad u */
    const int16_t *base = p->a0 + (t * KT) * p->sak;
    for (int u = 0; u < 16; u++) {
        const int16_t *r = base + 4 * u * p->sak;
        __m256i w[4];
        for (int e = 0; e < 4; e++) w[e] = _mm256_loadu_si256((const void *)(r + e * p->sak));
        const __m512i h01 = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm256_cvtepi16_epi8(_mm256_srai_epi16(w[0], 8))),
                _mm256_cvtepi16_epi8(_mm256_srai_epi16(w[1], 8)), 1)),
            _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm256_cvtepi16_epi8(_mm256_srai_epi16(w[2], 8))),
                _mm256_cvtepi16_epi8(_mm256_srai_epi16(w[3], 8)), 1),
            1);
        const __m512i l01 = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm256_cvtepi16_epi8(w[0])), _mm256_cvtepi16_epi8(w[1]), 1)),
            _mm256_inserti128_si256(_mm256_castsi128_si256(_mm256_cvtepi16_epi8(w[2])),
                                    _mm256_cvtepi16_epi8(w[3]), 1),
            1);
        hw[u] = _mm512_permutexvar_epi8(idx, h01);
        lw[u] = _mm512_permutexvar_epi8(idx, l01);
    }
    /* tile row r = word r of every quad */
    transpose16_epi32(hw);
    transpose16_epi32(lw);
    for (int r = 0; r < 16; r++) {
        _mm512_storeu_si512((void *)(hi + r * 64), hw[r]);
        _mm512_storeu_si512((void *)(lo + r * 64), lw[r]);
    }
}

/* The tiles of a row panel of A (all nkt of them) into ap. */
static void pack_a_panel(const amx_a_panel *p, int64_t nkt, int8_t *ap)
{
    for (int64_t t = 0; t < nkt; t++) {
        if (p->sam == 1 && p->sak != 1 && p->rows == 16 && t * KT + KT <= p->K) {
            pack_a_tile_colmajor(p, t, ap + t * PAIR_BYTES, ap + t * PAIR_BYTES + TILE_BYTES);
            continue;
        }
        int8_t *hi = ap + t * PAIR_BYTES, *lo = hi + TILE_BYTES;
        const int64_t k0 = t * KT, n = p->K - k0 < KT ? p->K - k0 : KT;
        for (int r = 0; r < 16; r++) {
            if (r >= p->rows) {
                memset(hi + r * KT, 0, KT);
                memset(lo + r * KT, 0, KT);
            } else if (p->sak == 1) {
                const int16_t *src = p->a0 + r * p->sam + k0;
                __mmask32 m0, m1;
                lane_masks(n, &m0, &m1);
                const __m512i v0 = _mm512_maskz_loadu_epi16(m0, src);
                const __m512i v1 = _mm512_maskz_loadu_epi16(m1, src + 32);
                _mm256_storeu_si256((void *)(hi + r * KT), hi_bytes(v0));
                _mm256_storeu_si256((void *)(hi + r * KT + 32), hi_bytes(v1));
                _mm256_storeu_si256((void *)(lo + r * KT), lo_bytes(v0));
                _mm256_storeu_si256((void *)(lo + r * KT + 32), lo_bytes(v1));
            } else {
                for (int64_t kk = 0; kk < KT; kk++) {
                    const int16_t v = kk < n ? p->a0[r * p->sam + (k0 + kk) * p->sak] : 0;
                    hi[r * KT + kk] = (int8_t)(v >> 8);
                    lo[r * KT + kk] = (int8_t)(uint8_t)(v & 255);
                }
            }
        }
    }
}

/* Tiles t0 .. t1 - 1 of row panel q of A, packed into ap from its start; where A comes from
 * a_rows, the 16 rows' values of those tiles are first gathered into the thread's staging rows
 * (FX_A_ROWS_SLACK elements of room on both sides of each), and where a_tiles supplies the
 * packed tiles themselves, it writes them. */
static void pack_a_rows(const amx_i16_job *j, int64_t q, int64_t t0, int64_t t1, int16_t *stage,
                        int8_t *ap)
{
    const int rows = j->M - q * 16 < 16 ? (int)(j->M - q * 16) : 16;
    const int64_t k0 = t0 * KT, kn = (j->K < t1 * KT ? j->K : t1 * KT) - k0;
    if (j->a_tiles) {
        j->a_tiles(j->a_tiles_ctx, q * 16, rows, k0, kn, ap);
        return;
    }
    amx_a_panel p = {NULL, j->sam, j->sak, kn, rows};
    if (j->a_rows) {
        j->a_rows(j->a_rows_ctx, q * 16, rows, k0, kn, stage + FX_A_ROWS_SLACK, j->rows_ld);
        p.a0 = stage + FX_A_ROWS_SLACK;
        p.sam = j->rows_ld;
        p.sak = 1;
    } else {
        p.a0 = j->a + q * 16 * j->sam + k0 * j->sak;
    }
    pack_a_panel(&p, t1 - t0, ap);
}

/* Tile t of column panel s of B, element by element (any strides, any tail). */
static void pack_b_tile_any(const amx_i16_job *j, int64_t s, int64_t t, int8_t *hi, int8_t *lo)
{
    for (int u = 0; u < 16; u++)
        for (int jj = 0; jj < 16; jj++)
            for (int e = 0; e < 4; e++) {
                const int64_t k = t * KT + 4 * u + e, col = s * 16 + jj;
                const int16_t v = k < j->K && col < j->N ? j->b[k * j->sbk + col * j->sbn] : 0;
                hi[u * 64 + 4 * jj + e] = (int8_t)(v >> 8);
                lo[u * 64 + 4 * jj + e] = (int8_t)(uint8_t)(v & 255);
            }
}

/* Byte permutes of two row pairs of 16 int16 values, X = (rows 0, 1) and Y = (rows 2, 3) of a
 * quad, into a plane's 64-byte tile row: byte 4 j + e = the high (odd) or low (even) byte of
 * row e's value j. An int16's high byte is its arithmetic >> 8 truncated, so the planes are
 * those of the header. */
static inline __m512i quad_plane_idx(int high)
{
    _Alignas(64) uint8_t idx[64];
    for (int jj = 0; jj < 16; jj++)
        for (int e = 0; e < 4; e++) idx[4 * jj + e] = (uint8_t)(32 * e + 2 * jj + high);
    return _mm512_load_si512((const void *)idx);
}

/* Quad u of tile t of a whole column panel s of a row-major B: four rows' 32-byte runs, one
 * two-source byte permute per plane (rows beyond K, the last tile's tail, read as zeros). */
static inline void pack_b_quad_rowmajor(const amx_i16_job *j, int64_t s, int64_t t, int u,
                                        __m512i idx_hi, __m512i idx_lo, int8_t *hi, int8_t *lo)
{
    const int64_t k = t * KT + 4 * u;
    const int16_t *base = j->b + k * j->sbk + s * 16;
    __m256i r[4];
    for (int e = 0; e < 4; e++)
        r[e] = k + e < j->K ? _mm256_loadu_si256((const void *)(base + e * j->sbk))
                            : _mm256_setzero_si256();
    const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(r[0]), r[1], 1);
    const __m512i y = _mm512_inserti64x4(_mm512_castsi256_si512(r[2]), r[3], 1);
    _mm512_storeu_si512((void *)(hi + u * 64), _mm512_permutex2var_epi8(x, idx_hi, y));
    _mm512_storeu_si512((void *)(lo + u * 64), _mm512_permutex2var_epi8(x, idx_lo, y));
}

/* Tile t of column panel s of B into hi and lo. Whole column panels of a row-major B take
 * four rows' 32-byte runs per quad and one two-source byte permute per plane (rows beyond K,
 * the last tile's tail, read as zeros); of a B with contiguous columns (a convolution's
 * weights, a transposed gradient), each column's 64 k values give 16 words that go down the
 * tile's word column (a transpose); anything else goes element by element. */
static void pack_b_tile(const amx_i16_job *j, int64_t s, int64_t t, __m512i idx_hi,
                        __m512i idx_lo, int8_t *hi, int8_t *lo)
{
    const int full_cols = s * 16 + 16 <= j->N;
    const int64_t k0 = t * KT;
    if (!full_cols || (j->sbn != 1 && j->sbk != 1)) {
        pack_b_tile_any(j, s, t, hi, lo);
    } else if (j->sbn == 1) {
        for (int u = 0; u < amx_b_quads(j); u++)
            pack_b_quad_rowmajor(j, s, t, u, idx_hi, idx_lo, hi, lo);
    } else { /* sbk == 1 */
        const int64_t n = j->K - k0 < KT ? j->K - k0 : KT;
        __mmask32 m0, m1;
        lane_masks(n, &m0, &m1);
        /* word u of column jj goes to word u * 16 + jj of the tile: a transpose */
        __m512i hc[16], lc[16];
        for (int jj = 0; jj < 16; jj++) {
            const int16_t *col = j->b + (s * 16 + jj) * j->sbn + k0;
            const __m512i v0 = _mm512_maskz_loadu_epi16(m0, col);
            const __m512i v1 = _mm512_maskz_loadu_epi16(m1, col + 32);
            hc[jj] = _mm512_inserti64x4(_mm512_castsi256_si512(hi_bytes(v0)), hi_bytes(v1), 1);
            lc[jj] = _mm512_inserti64x4(_mm512_castsi256_si512(lo_bytes(v0)), lo_bytes(v1), 1);
        }
        transpose16_epi32(hc);
        transpose16_epi32(lc);
        for (int u = 0; u < 16; u++) {
            _mm512_storeu_si512((void *)(hi + u * 64), hc[u]);
            _mm512_storeu_si512((void *)(lo + u * 64), lc[u]);
        }
    }
}

/* Tiles t0 .. t1 - 1 of column panel s of B, packed into bp from its start. */
static void pack_b_panel(const amx_i16_job *j, int64_t s, int64_t t0, int64_t t1, int8_t *bp)
{
    const __m512i idx_hi = quad_plane_idx(1), idx_lo = quad_plane_idx(0);
    for (int64_t t = t0; t < t1; t++) {
        int8_t *hi = bp + (t - t0) * PAIR_BYTES;
        pack_b_tile(j, s, t, idx_hi, idx_lo, hi, hi + TILE_BYTES);
    }
}

/* Column panels s0 .. s1 - 1 of B, tiles t0 .. t1 - 1 each, panel s at bp + (s - s0) panel.
 * For a row-major B with whole panels the loops run along B's rows (every quad row's runs of
 * all the panels in turn), so that each row is read in one sweep of (s1 - s0) 32 bytes, which
 * the prefetchers follow, rather than 32 bytes of it per panel. */
static void pack_b_group(const amx_i16_job *j, int64_t s0, int64_t s1, int64_t t0, int64_t t1,
                         size_t panel, int8_t *bp)
{
    if (j->sbn != 1 || s1 * 16 > j->N) {
        for (int64_t s = s0; s < s1; s++) pack_b_panel(j, s, t0, t1, bp + (s - s0) * panel);
        return;
    }
    const __m512i idx_hi = quad_plane_idx(1), idx_lo = quad_plane_idx(0);
    /* a shallow B (K <= KT): the same rows of the next group, which this thread packs next
     * in the columns' schedule (the panels past the last are not asked for); else the rows
     * some quads below. Offsets in bytes from B's start, rows past K left alone. */
    const int shallow = j->K <= KT;
    const int64_t ns = (j->N + 15) / 16, g = s1 - s0, ld = j->sbk * (int64_t)sizeof(int16_t);
    const int64_t rows_ahead = shallow ? 0 : 4 * FX_AMX_I16_B_PREFETCH_QUADS;
    const int64_t ahead = shallow ? g * 16 * (int64_t)sizeof(int16_t) : rows_ahead * ld;
    for (int64_t t = t0; t < t1; t++)
        for (int u = 0; u < amx_b_quads(j); u++) {
            const int64_t k = t * KT + 4 * u;
            for (int64_t s = s0; s < s1; s++) {
                int8_t *hi = bp + (s - s0) * panel + (t - t0) * PAIR_BYTES;
                /* each 64-byte line once: the panels' 32-byte runs pair up into lines */
                if (!((s - s0) & 1) && (!shallow || s + g < ns))
                    fx_prefetch_rows(j->b, k, 4, ld, s * 16 * (int64_t)sizeof(int16_t), ahead,
                                     rows_ahead, j->K);
                pack_b_quad_rowmajor(j, s, t, u, idx_hi, idx_lo, hi, hi + TILE_BYTES);
            }
        }
}

static inline __m512i widen8(const int32_t *v)
{
    return _mm512_cvtepi32_epi64(_mm256_load_si256((const void *)v));
}

/* 65536 hh + 256 (hl + lh) + ll for the 8 lanes at offset o of the four accumulators, in
 * int64 */
static inline __m512i combine8(const int32_t (*acc)[256], int o)
{
    const __m512i mid = _mm512_add_epi64(widen8(acc[1] + o), widen8(acc[2] + o));
    return _mm512_add_epi64(_mm512_add_epi64(_mm512_slli_epi64(widen8(acc[0] + o), 16),
                                             _mm512_slli_epi64(mid, 8)),
                            widen8(acc[3] + o));
}

/* The four int32 accumulators of one 16 x 16 output block over nt tiles of k (at most
 * FX_AMX_I16_CHUNK_TILES: one exact int32 chunk), packed in ap (A's row panel) and bp (B's
 * column panel), stored into acc. */
static inline void amx_i16_tiles(const int8_t *ap, const int8_t *bp, int64_t nt,
                                 int32_t (*acc)[256])
{
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t t = 0; t < nt; t++) {
        _tile_loadd(4, ap + t * PAIR_BYTES, 64);
        _tile_loadd(6, bp + t * PAIR_BYTES, 64);
        _tile_dpbssd(0, 4, 6); /* ah bh */
        _tile_loadd(7, bp + t * PAIR_BYTES + TILE_BYTES, 64);
        _tile_dpbsud(1, 4, 7); /* ah bl */
        _tile_loadd(5, ap + t * PAIR_BYTES + TILE_BYTES, 64);
        _tile_dpbusd(2, 5, 6); /* al bh */
        _tile_dpbuud(3, 5, 7); /* al bl */
    }
    _tile_stored(0, acc[0], 64);
    _tile_stored(1, acc[1], 64);
    _tile_stored(2, acc[2], 64);
    _tile_stored(3, acc[3], 64);
}

/* The 16 x 16 output block of row panel q (its tiles t0 .. t1 - 1 packed in ap) and column
 * panel s (the same tiles packed in bp), over those tiles: written into the valid part of the
 * int64 output (rows < M, columns < N), or added to it where add; on the last K block (imax
 * not NULL) the block's largest |value| raises *imax. */
static void amx_i16_block(const amx_i16_job *j, const int8_t *ap, const int8_t *bp, int64_t q,
                          int64_t s, int64_t t0, int64_t t1, int add, uint64_t *imax)
{
    _Alignas(64) int32_t acc[4][256];
    const int64_t i0 = q * 16, j0 = s * 16;
    const int rows = j->M - i0 < 16 ? (int)(j->M - i0) : 16;
    const int cols = j->N - j0 < 16 ? (int)(j->N - j0) : 16;
    const __mmask8 cm0 = (__mmask8)(cols >= 8 ? 0xff : (1u << cols) - 1u);
    const __mmask8 cm1 = (__mmask8)(cols >= 16 ? 0xff : cols > 8 ? (1u << (cols - 8)) - 1u : 0);
    __m512i vmax = _mm512_setzero_si512();
    amx_i16_tiles(ap, bp, t1 - t0, acc);
    for (int r = 0; r < rows; r++) {
        int64_t *o = j->out + (i0 + r) * j->ldo + j0;
        __m512i v0 = combine8((const int32_t(*)[256])acc, r * 16);
        __m512i v1 = combine8((const int32_t(*)[256])acc, r * 16 + 8);
        if (add) {
            v0 = _mm512_add_epi64(v0, _mm512_maskz_loadu_epi64(cm0, o));
            v1 = _mm512_add_epi64(v1, _mm512_maskz_loadu_epi64(cm1, o + 8));
        }
        _mm512_mask_storeu_epi64(o, cm0, v0);
        _mm512_mask_storeu_epi64(o + 8, cm1, v1);
        /* lanes beyond the valid columns hold 0 (zero operands) */
        vmax = _mm512_max_epu64(vmax, _mm512_abs_epi64(v0));
        vmax = _mm512_max_epu64(vmax, _mm512_abs_epi64(v1));
    }
    if (imax) {
        const uint64_t m = _mm512_reduce_max_epu64(vmax);
        *imax = m > *imax ? m : *imax;
    }
}

/* Rows 0 .. rows - 1 of one block's sums (acc) rounded at rq's shift into their first cols
 * columns of dst (row stride ld): the largest |sum| raises *vmax, the underflows add to *uf.
 * Lanes beyond the valid columns hold 0: no maximum, no underflow. */
static inline void amx_round_rows(const fx_q64_fast *rq, const int32_t (*acc)[256], int rows,
                                  int cols, int16_t *dst, int64_t ld, __m512i *vmax, int64_t *uf)
{
    const __mmask16 cm = (__mmask16)(cols >= 16 ? 0xffffu : (1u << cols) - 1u);
    for (int r = 0; r < rows; r++)
        fx_q64_fast_store16(rq, combine8(acc, r * 16), combine8(acc, r * 16 + 8), dst + r * ld,
                            cm, vmax, uf);
}

/* The rounding of the sums of one or two k tiles (K <= 128) in int32 lanes, 16 at a time.
 *
 * Why: with one tile of k per block the int64 rounding above (about 20 vector operations per
 * 8 sums, against 4 tile products per block) is what bounds the K = 64 products. With K <= 128
 * every accumulator is small: HL + LH lies in [-65280 K, 64770 K] and 0 <= LL <= 65025 K, so
 *     X = 256 (HL + LH) + LL   lies in [-2139095040, 2130706560] and fits int32,
 * and   sum = 65536 HH + X = 65536 H + L
 * with H = HH + (X >> 16) (arithmetic) and L = X & 0xffff in [0, 65536): the sum split at bit
 * 16, exactly, in two int32 lanes. Rounding to nearest even at 2^s is floor((sum + 2^(s-1) - 1
 * + b) / 2^s) with b bit s of the sum (quant_q64_avx512.h), which in this split is
 *   s >= 16, s' = s - 16:  q = (H + hm + ((L + lc + b) >> 16)) >> s', b = bit s' of H,
 *                          hm = 2^(s'-1) - 1 and lc = 0xffff (s' >= 1), hm = 0 and lc = 0x7fff
 *                          (s' = 0);
 *   s < 16:                q = (H << (16 - s)) + ((L + 2^(s-1) - 1 + b) >> s), b = bit s of L.
 * A lane whose q wraps in int32 has a sum far above the bound where nothing saturates, so the
 * caller discards the values (it checks the exact maximum). A sum underflows iff it is nonzero
 * and rounds to 0. The exact largest |sum| comes from the largest and smallest sum, compared as
 * int64 keys H 2^32 + L, which order as 65536 H + L does. (K = 129 would let X wrap: the
 * deeper products keep the int64 lanes. Splitting 256 (HL + LH) and LL at bit 16 separately
 * would take any K up to the chunk into int32 lanes too, at 7 more operations per 16 sums; on
 * the Xeon reporting model 207 that measured no faster with K = 144 to 800, where the tile
 * products outweigh the rounding.) */
typedef struct {
    __m512i hm, lc, one, bit;
    __m128i sh_h, sh_l;
} amx_r32;

static inline amx_r32 amx_r32_setup(int s)
{
    amx_r32 k;
    k.one = _mm512_set1_epi32(1);
    if (s >= 16) {
        const int sp = s - 16; /* 0 .. 31: fx_q64_fast_ok's shifts are at most 47 */
        k.hm = _mm512_set1_epi32(sp >= 1 ? (int32_t)((1u << (sp - 1)) - 1u) : 0);
        k.lc = _mm512_set1_epi32(sp >= 1 ? 0xffff : 0x7fff);
        k.bit = _mm512_set1_epi32((int32_t)(1u << sp));
        k.sh_h = _mm_cvtsi32_si128(sp);
        k.sh_l = _mm_cvtsi32_si128(16);
    } else {
        k.hm = _mm512_setzero_si512();
        k.lc = _mm512_set1_epi32((1 << (s - 1)) - 1);
        k.bit = _mm512_set1_epi32(1 << s);
        k.sh_h = _mm_cvtsi32_si128(16 - s); /* H's left shift */
        k.sh_l = _mm_cvtsi32_si128(s);
    }
    return k;
}

/* 16 sums 65536 H + L rounded (see above); high is s >= 16, constant in each caller's loop */
static inline __m512i amx_r32_round(const amx_r32 *k, int high, __m512i H, __m512i L)
{
    const __mmask16 b = _mm512_test_epi32_mask(high ? H : L, k->bit);
    __m512i t = _mm512_add_epi32(L, k->lc);
    t = _mm512_mask_add_epi32(t, b, t, k->one);
    if (high)
        return _mm512_sra_epi32(_mm512_add_epi32(_mm512_add_epi32(H, k->hm), _mm512_srli_epi32(t, 16)),
                                k->sh_h);
    return _mm512_add_epi32(_mm512_sll_epi32(H, k->sh_h), _mm512_srl_epi32(t, k->sh_l));
}

/* A key H 2^32 + L back to its sum 65536 H + L */
static inline int64_t amx_r32_key_sum(int64_t key)
{
    const uint64_t u = (uint64_t)key;
    return (int64_t)(int32_t)(uint32_t)(u >> 32) * 65536 + (int64_t)(u & 0xffff);
}

/* amx_round_rows for the sums of K <= 128, in int32 lanes: the largest and smallest sums as
 * keys into *kmax and *kmin */
static inline void amx_round_rows32(const amx_r32 *k, int high, const int32_t (*acc)[256],
                                    int rows, int cols, int16_t *dst, int64_t ld, __m512i *kmax,
                                    __m512i *kmin, int64_t *uf)
{
    const __mmask16 cm = (__mmask16)(cols >= 16 ? 0xffffu : (1u << cols) - 1u);
    const __m512i low16 = _mm512_set1_epi32(0xffff);
    for (int r = 0; r < rows; r++) {
        const int o = r * 16;
        const __m512i mid = _mm512_add_epi32(_mm512_load_si512((const void *)(acc[1] + o)),
                                             _mm512_load_si512((const void *)(acc[2] + o)));
        const __m512i X = _mm512_add_epi32(_mm512_slli_epi32(mid, 8),
                                           _mm512_load_si512((const void *)(acc[3] + o)));
        const __m512i H =
            _mm512_add_epi32(_mm512_load_si512((const void *)(acc[0] + o)), _mm512_srai_epi32(X, 16));
        const __m512i L = _mm512_and_si512(X, low16);
        const __m512i q = amx_r32_round(k, high, H, L);
        const __m512i k0 = _mm512_unpacklo_epi32(L, H), k1 = _mm512_unpackhi_epi32(L, H);
        *kmax = _mm512_max_epi64(*kmax, _mm512_max_epi64(k0, k1));
        *kmin = _mm512_min_epi64(*kmin, _mm512_min_epi64(k0, k1));
        const __m512i nz = _mm512_or_si512(H, L);
        const __mmask16 zq = _mm512_cmpeq_epi32_mask(q, _mm512_setzero_si512());
        *uf += __builtin_popcount((unsigned)_mm512_mask_test_epi32_mask(zq, nz, nz));
        _mm256_mask_storeu_epi16(dst + r * ld, cm, _mm512_cvtepi32_epi16(q));
    }
}

/* amx_i16_blocks_rounded's loop for products of nt <= 2 k tiles (K <= 128), rounded in int32
 * lanes */
static inline void amx_i16_blocks_rounded32(const amx_i16_job *j, int high, const int8_t *ap,
                                            const int8_t *bp0, size_t panel, int64_t q,
                                            int64_t s0, int64_t s1, int64_t nt, uint64_t *imax,
                                            int64_t *nuf)
{
    _Alignas(64) int32_t acc[4][256];
    const amx_r32 rk = amx_r32_setup(j->rq.s);
    const int64_t i0 = q * 16, ld = j->ldo;
    const int rows = j->M - i0 < 16 ? (int)(j->M - i0) : 16;
    __m512i kmax = _mm512_setzero_si512(), kmin = _mm512_setzero_si512();
    int64_t uf = 0;
    for (int64_t s = s0; s < s1; s++) {
        const int cols = j->N - s * 16 < 16 ? (int)(j->N - s * 16) : 16;
        amx_i16_tiles(ap, bp0 + (size_t)(s - s0) * panel, nt, acc);
        amx_round_rows32(&rk, high, (const int32_t(*)[256])acc, rows, cols,
                         j->out16 + i0 * ld + s * 16, ld, &kmax, &kmin, &uf);
    }
    const int64_t hi = amx_r32_key_sum(_mm512_reduce_max_epi64(kmax));
    const int64_t lo = amx_r32_key_sum(_mm512_reduce_min_epi64(kmin));
    const uint64_t m = (uint64_t)(hi > -lo ? hi : -lo); /* |sum| <= 2^37 */
    *imax = m > *imax ? m : *imax;
    *nuf += uf;
}

/* The blocks of row panel q and column panels s0 .. s1 - 1 (panel s packed at bp0 + (s - s0)
 * panel) of a job that rounds in registers (out16: one K block, tiles t0 .. t1 - 1), rounded
 * into out16; their largest |sum| raises *imax and their underflows add to *nuf. (Streaming
 * whole output lines through a 16 x 32 stage, which spares the reads for ownership, measured
 * 6 % faster on an 800 x 25088 x 64 product on the Xeon reporting model 207, and 15-20 %
 * slower on 576 x 8192 x 64 and 16 x 131072 x 144, whose outputs stay in its cache.) */
static void amx_i16_blocks_rounded(const amx_i16_job *j, const int8_t *ap, const int8_t *bp0,
                                   size_t panel, int64_t q, int64_t s0, int64_t s1, int64_t t0,
                                   int64_t t1, uint64_t *imax, int64_t *nuf)
{
    if (j->K <= 2 * KT) { /* one or two k tiles: int32 lanes; two loops, one per branch */
        if (j->rq.s >= 16)
            amx_i16_blocks_rounded32(j, 1, ap, bp0, panel, q, s0, s1, t1 - t0, imax, nuf);
        else
            amx_i16_blocks_rounded32(j, 0, ap, bp0, panel, q, s0, s1, t1 - t0, imax, nuf);
        return;
    }
    _Alignas(64) int32_t acc[4][256];
    const fx_q64_fast rq = j->rq; /* in registers: the stores below may alias j */
    const int64_t i0 = q * 16, nt = t1 - t0, ld = j->ldo;
    const int rows = j->M - i0 < 16 ? (int)(j->M - i0) : 16;
    __m512i vmax = _mm512_setzero_si512();
    int64_t uf = 0;
    for (int64_t s = s0; s < s1; s++) {
        const int cols = j->N - s * 16 < 16 ? (int)(j->N - s * 16) : 16;
        amx_i16_tiles(ap, bp0 + (size_t)(s - s0) * panel, nt, acc);
        amx_round_rows(&rq, (const int32_t(*)[256])acc, rows, cols, j->out16 + i0 * ld + s * 16,
                       ld, &vmax, &uf);
    }
    const uint64_t m = _mm512_reduce_max_epu64(vmax);
    *imax = m > *imax ? m : *imax;
    *nuf += uf;
}

/* Products this kernel takes: plain operands (pre-packed or on-demand A are the register-tile
 * driver's layouts) with at least one whole block of work. */
static int amx_i16_takes(const fx_op_call *c)
{
    const int64_t M = c->in[0].shape[0], K = c->in[0].shape[1], N = c->in[1].shape[1];
    return fx_gemm_i16_amx_on() && c->a_panels == NULL && M >= 16 && N >= 16 && K >= 32;
}

/* Column panels of B per group (FX_AMX_I16_B_GROUP_BYTES) for panels of `panel` bytes */
static int64_t amx_b_group(size_t panel)
{
    const int64_t g = FX_AMX_I16_B_GROUP_BYTES / (int64_t)panel;
    return g < 1 ? 1 : g > FX_AMX_I16_B_GROUP_MAX ? FX_AMX_I16_B_GROUP_MAX : g;
}

/* Rows streamed: B packed whole per K block, row panels of A packed by the threads in turn
 * (see the header). */
static int amx_rows_streamed(amx_i16_job *j, int nt, int64_t kbt, uint64_t *imax_out,
                             int64_t *nuf_out)
{
    const int64_t mq = (j->M + 15) / 16, ns = (j->N + 15) / 16;
    const size_t panel = (size_t)kbt * PAIR_BYTES;
    /* B packed beforehand: every K block's panels, one block after another */
    int8_t *bpk = j->b_pre ? NULL : fx_scratch_aligned_alloc((size_t)ns * panel);
    int8_t *apk = fx_scratch_aligned_alloc((size_t)nt * panel);
    /* rows on demand (unless their source writes the tiles itself): 16 staging rows per thread
     * with the slack a_rows may write into */
    const int staged = j->a_rows && !j->a_tiles;
    j->rows_ld = staged ? (kbt * KT + 2 * FX_A_ROWS_SLACK + 31) / 32 * 32 : 0;
    const size_t stage_n = (size_t)(16 * j->rows_ld);
    int16_t *stages = staged ? malloc((size_t)nt * stage_n * sizeof(int16_t)) : NULL;
    if ((!bpk && !j->b_pre) || !apk || (staged && !stages)) {
        fx_scratch_aligned_free(bpk);
        fx_scratch_aligned_free(apk);
        free(stages);
        return FX_ENOMEM;
    }
    const int64_t nsb_fit = FX_AMX_I16_B_CHUNK_BYTES / (int64_t)panel;
    const int64_t nsb = nsb_fit < 1 ? 1 : nsb_fit;
    const int64_t G = amx_b_group(panel), ng = (ns + G - 1) / G;
    uint64_t imax = 0;
    int64_t nuf = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(max : imax) reduction(+ : nuf)
#endif
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        int8_t *ap = apk + (size_t)tid * panel;
        int16_t *stage = stages ? stages + (size_t)tid * stage_n : NULL;
        amx_i16_configure(j);
        /* K blocks in order (each adds to the one before; the barrier of every loop below keeps
         * them in order), and in each, column panels in chunks whose packed B stays in L2
         * across the row panels; each chunk packs the row panels of A again */
        for (int64_t t0 = 0; t0 < j->nkt; t0 += kbt) {
            const int64_t t1 = j->nkt - t0 < kbt ? j->nkt : t0 + kbt;
            uint64_t *last = t1 == j->nkt ? &imax : NULL;
            const int8_t *bk = j->b_pre ? j->b_pre + (size_t)(t0 / kbt * ns) * panel : bpk;
            if (!j->b_pre) {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
                for (int64_t g = 0; g < ng; g++) {
                    const int64_t s0 = g * G, s1 = ns - s0 < G ? ns : s0 + G;
                    pack_b_group(j, s0, s1, t0, t1, panel, bpk + s0 * panel);
                }
            }
            if (mq >= nt) {
                for (int64_t s0 = 0; s0 < ns; s0 += nsb) {
                    const int64_t s1 = ns - s0 < nsb ? ns : s0 + nsb;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
                    for (int64_t q = 0; q < mq; q++) {
                        pack_a_rows(j, q, t0, t1, stage, ap);
                        if (j->out16)
                            amx_i16_blocks_rounded(j, ap, bk + s0 * panel, panel, q, s0, s1, t0,
                                                   t1, &imax, &nuf);
                        else
                            for (int64_t s = s0; s < s1; s++)
                                amx_i16_block(j, ap, bk + s * panel, q, s, t0, t1, t0 > 0, last);
                    }
                }
            } else { /* fewer row panels than threads: the threads share a row's blocks */
                for (int64_t q = 0; q < mq; q++) {
                    pack_a_rows(j, q, t0, t1, stage, ap);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
                    for (int64_t s = 0; s < ns; s++) {
                        if (j->out16)
                            amx_i16_blocks_rounded(j, ap, bk + s * panel, panel, q, s, s + 1, t0,
                                                   t1, &imax, &nuf);
                        else
                            amx_i16_block(j, ap, bk + s * panel, q, s, t0, t1, t0 > 0, last);
                    }
                }
            }
        }
        _tile_release();
    }
    fx_scratch_aligned_free(bpk);
    fx_scratch_aligned_free(apk);
    free(stages);
    *imax_out = imax;
    *nuf_out = nuf;
    return FX_OK;
}

/* Columns streamed (N > M, no rows on demand): A packed whole per K block in chunks of row
 * panels, groups of column panels of B packed by the threads in turn (see the header). */
static int amx_cols_streamed(amx_i16_job *j, int nt, int64_t kbt, uint64_t *imax_out,
                             int64_t *nuf_out)
{
    const int64_t mq = (j->M + 15) / 16, ns = (j->N + 15) / 16;
    const size_t panel = (size_t)kbt * PAIR_BYTES;
    const int64_t mqc_fit = FX_AMX_I16_A_CHUNK_BYTES / (int64_t)panel;
    const int64_t mqc = mqc_fit < 1 ? 1 : mqc_fit < mq ? mqc_fit : mq;
    /* column panels per group: a block row writes the group's width of C in one run. The
     * groups are shared out by a static schedule, so their number is made a multiple of the
     * threads where the panels allow (7 groups on two threads kept one idle for a seventh of
     * the product); the sums are exact in any grouping. */
    const int64_t G0 = amx_b_group(panel), ng0 = (ns + G0 - 1) / G0;
    const int64_t ng_even = (ng0 + nt - 1) / nt * nt;
    const int64_t G = (ns + ng_even - 1) / ng_even, ng = (ns + G - 1) / G;
    int8_t *apk = fx_scratch_aligned_alloc((size_t)mqc * panel);
    int8_t *bpk = fx_scratch_aligned_alloc((size_t)(nt * G) * panel);
    if (!apk || !bpk) {
        fx_scratch_aligned_free(apk);
        fx_scratch_aligned_free(bpk);
        return FX_ENOMEM;
    }
    uint64_t imax = 0;
    int64_t nuf = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(max : imax) reduction(+ : nuf)
#endif
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        int8_t *bp = bpk + (size_t)(tid * G) * panel;
        amx_i16_configure(j);
        for (int64_t t0 = 0; t0 < j->nkt; t0 += kbt) {
            const int64_t t1 = j->nkt - t0 < kbt ? j->nkt : t0 + kbt;
            uint64_t *last = t1 == j->nkt ? &imax : NULL;
            for (int64_t q0 = 0; q0 < mq; q0 += mqc) {
                const int64_t q1 = mq - q0 < mqc ? mq : q0 + mqc;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
                for (int64_t q = q0; q < q1; q++)
                    pack_a_rows(j, q, t0, t1, NULL, apk + (q - q0) * panel);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
                for (int64_t g = 0; g < ng; g++) {
                    const int64_t s0 = g * G, s1 = ns - s0 < G ? ns : s0 + G;
                    pack_b_group(j, s0, s1, t0, t1, panel, bp);
                    for (int64_t q = q0; q < q1; q++) {
                        const int8_t *ap = apk + (q - q0) * panel;
                        if (j->out16)
                            amx_i16_blocks_rounded(j, ap, bp, panel, q, s0, s1, t0, t1, &imax,
                                                   &nuf);
                        else
                            for (int64_t s = s0; s < s1; s++)
                                amx_i16_block(j, ap, bp + (s - s0) * panel, q, s, t0, t1, t0 > 0,
                                              last);
                    }
                }
            }
        }
        _tile_release();
    }
    fx_scratch_aligned_free(apk);
    fx_scratch_aligned_free(bpk);
    *imax_out = imax;
    *nuf_out = nuf;
    return FX_OK;
}

/* K tiles per K block for a product of depth K (both schedules and the pre-packed B) */
static int64_t amx_kb_tiles(int64_t K)
{
    const int64_t nkt = (K + KT - 1) / KT;
    return nkt < FX_AMX_I16_KB_TILES ? nkt : FX_AMX_I16_KB_TILES;
}

int64_t fx_gemm_i16_amx_b_bytes(int64_t K, int64_t N)
{
    const int64_t nkt = (K + KT - 1) / KT, kbt = amx_kb_tiles(K);
    return (nkt + kbt - 1) / kbt * ((N + 15) / 16) * kbt * PAIR_BYTES;
}

/* The layout amx_rows_streamed reads: K block b's column panels s at
 * bpk + (b ns + s) kbt PAIR_BYTES, tiles as pack_b_group writes them. */
void fx_gemm_i16_amx_pack_b(const int16_t *b, int64_t sbk, int64_t sbn, int64_t K, int64_t N,
                            int8_t *bpk)
{
    const amx_i16_job j = {.b = b, .sbk = sbk, .sbn = sbn, .K = K, .N = N, .nkt = (K + KT - 1) / KT};
    const int64_t kbt = amx_kb_tiles(K), ns = (N + 15) / 16;
    const size_t panel = (size_t)kbt * PAIR_BYTES;
    for (int64_t t0 = 0; t0 < j.nkt; t0 += kbt) {
        const int64_t t1 = j.nkt - t0 < kbt ? j.nkt : t0 + kbt;
        pack_b_group(&j, 0, ns, t0, t1, panel, bpk + (size_t)(t0 / kbt * ns) * panel);
    }
}

int fx_flex_matmul_amx(const fx_op_call *c)
{
    const fx_operand *A = &c->in[0], *B = &c->in[1];
    const int64_t M = A->shape[0], K = A->shape[1], N = B->shape[1];
    if (c->out_i16) {
        /* the caller asked fx_flex_matmul_amx_rounds first. The shape alone is checked where
         * the vpdpwssd kernel cannot round the product, not fx_gemm_i16_amx_on(): a kernel
         * forced on another thread since that question must not fail a product the caller has
         * already committed to; anything else is a library bug, which must not reach the
         * kernels that write out_i64, NULL here */
        const int amx_shape = !c->a_panels && fx_gemm_i16_amx_round_shape(M, K, N);
        const int vnni = fx_flex_matmul_avx512vnni_rounds(M, K, N);
        if (vnni && !(amx_shape && fx_gemm_i16_amx_on())) return fx_flex_matmul_avx512vnni(c);
        if (!amx_shape || !fx_q64_fast_ok(c->out_i16_shift) || !c->out_imax ||
            !c->out_i16_underflow)
            return fx_error(FX_EUNSUPPORTED, "matmul", "the AMX kernel cannot round a %lld x %lld x "
                            "%lld product at shift %d in registers", (long long)M, (long long)K,
                            (long long)N, c->out_i16_shift);
    } else if (!amx_i16_takes(c)) {
        return fx_flex_matmul_avx512vnni(c);
    }
    *c->out_exp = A->exp + B->exp;
    amx_i16_job j = {.a = A->data,
                     .b = B->data,
                     .sam = A->strides[0],
                     .sak = A->strides[1],
                     .sbk = B->strides[0],
                     .sbn = B->strides[1],
                     .M = M,
                     .K = K,
                     .N = N,
                     .nkt = (K + KT - 1) / KT,
                     .out = c->out_i64,
                     .ldo = N,
                     .a_rows = c->a_rows,
                     .a_rows_ctx = c->a_rows_ctx,
                     .a_tiles = c->a_rows ? c->a_tiles : NULL,
                     .a_tiles_ctx = c->a_tiles_ctx,
                     .out16 = c->out_i16,
                     .short_k = K <= FX_AMX_I16_SHORT_K};
    if (j.out16) j.rq = fx_q64_fast_setup(c->out_i16_shift);
    const int nt = c->nthreads > 1 && (double)M * (double)N * (double)K >= (double)(1 << 20)
                       ? c->nthreads
                       : 1;
    const int64_t kbt = amx_kb_tiles(K);
    uint64_t imax = 0;
    int64_t nuf = 0;
    /* the larger operand streams: it is read from memory once, a panel at a time */
    const int cols = N > M && !c->a_rows;
    j.b_pre = cols ? NULL : c->b_amx_i16; /* the columns' schedule packs B's panels itself */
    const int rc = cols ? amx_cols_streamed(&j, nt, kbt, &imax, &nuf)
                        : amx_rows_streamed(&j, nt, kbt, &imax, &nuf);
    if (rc) return rc;
    if (j.out16) {
        *c->out_imax = imax;
        if (c->out_imax_known) *c->out_imax_known = 1;
        *c->out_i16_underflow += nuf;
        return FX_OK;
    }
    if (c->out_imax && c->out_imax_known) {
        *c->out_imax = imax;
        *c->out_imax_known = 1;
    }
    return FX_OK;
}

int fx_flex_matmul_amx_rounds(int64_t M, int64_t K, int64_t N)
{
    return fx_gemm_i16_amx_rounds(M, K, N) || fx_flex_matmul_avx512vnni_rounds(M, K, N);
}

/* iters iterations of four independent tdpbssd (fx_amx_rate's loop) */
static void amx_int8_rate_loop(long iters)
{
    for (long i = 0; i < iters; i++) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 6);
        _tile_dpbssd(2, 4, 6);
        _tile_dpbssd(3, 4, 6);
    }
}

/* AMX-INT8 tile products per second of this thread's CPU time, as operations (2 per byte
 * product, 32,768 per instruction) */
double fx_amx_int8_rate(long iters, int reps)
{
    return fx_amx_rate(amx_int8_rate_loop, iters, reps, 4.0 * 32768.0);
}
