/* AVX-512 packing for the exact int16 GEMM's 6 x 32 register tile (see gemm_i16.h for the
 * layouts and for what the segment norms are for). The portable loops in gemm_i16.c define
 * the results; these produce the same bytes and the same exact sums of squares, only with
 * vector instructions: packing with norms used to cost more than the fast kernel saved on the
 * CNN's narrow products (N = 64), which therefore always took the two-multiply split kernel. */
#include "gemm_i16.h"
#include "core/lanes_avx512.h"
#include "core/transpose_avx512.h"

#include <immintrin.h>

#define FX_PACK_MR 6
#define FX_PACK_NR 32

_Static_assert(FX_GEMM_I16_SEG == 8, "segments are taken as halves of 16-pair blocks");
_Static_assert(FX_PACK_MR <= 8, "row norms use the 8 int64 lanes of one register");

/* Exact sums of squares of pairs: vpmaddwd(x, x) gives lo^2 + hi^2 per 32-bit lane, at most
 * 2 * 2^30 = 2^31, which is exact when read as unsigned; lanes are then widened to uint64. */
static inline __m512i fx_sq_pairs_lo8(__m512i x)
{
    const __m512i q = _mm512_madd_epi16(x, x);
    return _mm512_cvtepu32_epi64(_mm512_castsi512_si256(q));
}

static inline __m512i fx_sq_pairs_hi8(__m512i x)
{
    const __m512i q = _mm512_madd_epi16(x, x);
    return _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(q, 1));
}

/* A: ap[p*6 + i] = (A[i][2p], A[i][2p+1]) as one int32; 16 pairs of all rows at a time go
 * through a register transpose (rows 6..15 are zeros). Masked loads stop at the row's last
 * value, so an odd kc leaves the last pair's high half 0, as the portable loop does. */
static void fx_pack_a_6(const int16_t *a, int64_t sam, int64_t kc, int32_t *ap, int64_t *sq)
{
    const int64_t kp = (kc + 1) / 2;
    const __mmask16 rows = (__mmask16)((1u << FX_PACK_MR) - 1);
    for (int64_t k0 = 0; k0 < kp; k0 += 16) {
        const int64_t left = kc - 2 * k0; /* int16 values left in each row */
        const __mmask32 m = left >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << left) - 1);
        const int ks = kp - k0 < 16 ? (int)(kp - k0) : 16;
        __m512 v[16];
        for (int i = 0; i < FX_PACK_MR; i++)
            fx_prefetch_at(a + i * sam + 2 * k0, FX_GEMM_I16_PACK_A_PREFETCH_ROWS * sam * 2);
        for (int i = 0; i < 16; i++)
            v[i] = i < FX_PACK_MR ? _mm512_castsi512_ps(fx_load_w32(a + i * sam + 2 * k0, m))
                                  : _mm512_setzero_ps();
        fx_transpose16x16_ps(v); /* v[t]: pair k0 + t of every row, row i in lane i */
        /* whole-vector stores overlap: lanes 6..15 of store t land where stores t + 1 and
         * t + 2 write next; the last two are masked, so nothing past the block's end is
         * touched (masked stores on every vector cost time on the Zen 5) */
        int ts = 0;
        for (; ts + 2 < ks; ts++)
            _mm512_storeu_si512((void *)(ap + (k0 + ts) * FX_PACK_MR), _mm512_castps_si512(v[ts]));
        for (; ts < ks; ts++)
            _mm512_mask_storeu_epi32(ap + (k0 + ts) * FX_PACK_MR, rows, _mm512_castps_si512(v[ts]));
        if (!sq) continue;
        for (int t0 = 0; t0 < ks; t0 += FX_GEMM_I16_SEG) {
            __m512i acc = _mm512_setzero_si512(); /* lane i: row i's sum of squares */
            for (int t = t0; t < t0 + FX_GEMM_I16_SEG && t < ks; t++)
                acc = _mm512_add_epi64(acc, fx_sq_pairs_lo8(_mm512_castps_si512(v[t])));
            sq[(k0 + t0) / FX_GEMM_I16_SEG] =
                (int64_t)_mm512_mask_reduce_max_epu64((__mmask8)rows, acc);
        }
    }
}

/* Lane i of the result: the sum of v[i]'s eight uint64 lanes (each sum below 2^64). Three
 * levels of pairwise adds, each on lanes brought together by one shuffle per operand: unpacks
 * of 64-bit lanes, then 128-bit blocks of two registers. */
static inline __m512i fx_sum_lanes8x8(const __m512i v[8])
{
    __m512i u[4], w[2];
    for (int i = 0; i < 4; i++) /* block b: [v2i lanes 2b + 2b+1, v2i+1 likewise] */
        u[i] = _mm512_add_epi64(_mm512_unpacklo_epi64(v[2 * i], v[2 * i + 1]),
                                _mm512_unpackhi_epi64(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 2; i++) /* blocks: [v4i, v4i+1] lanes 0-3, the same 4-7, [v4i+2, +3] .. */
        w[i] = _mm512_add_epi64(_mm512_shuffle_i64x2(u[2 * i], u[2 * i + 1], 0x88),
                                _mm512_shuffle_i64x2(u[2 * i], u[2 * i + 1], 0xDD));
    return _mm512_add_epi64(_mm512_shuffle_i64x2(w[0], w[1], 0x88),
                            _mm512_shuffle_i64x2(w[0], w[1], 0xDD));
}

/* fx_pack_a_6's sums of squares of six rows read in place, without packing them: per 16 pairs
 * (one vector of each row), each row's two segments summed across lanes, then the largest
 * row. The same exact sums: lanes past kc are loaded as 0, as that packing's transpose holds
 * them. */
static void fx_norms_rows_6(const int16_t *a, int64_t sam, int64_t kc, int64_t *sq)
{
    const int64_t kp = (kc + 1) / 2;
    const __mmask8 rows = (__mmask8)((1u << FX_PACK_MR) - 1);
    for (int64_t k0 = 0; k0 < kp; k0 += 16) {
        const int64_t left = kc - 2 * k0;
        const __mmask32 m = left >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << left) - 1);
        __m512i lo[8], hi[8]; /* row i's pairs 0-7 and 8-15, widened */
        for (int i = 0; i < 8; i++) {
            if (i >= FX_PACK_MR) {
                lo[i] = hi[i] = _mm512_setzero_si512();
                continue;
            }
            fx_prefetch_at(a + i * sam + 2 * k0, FX_GEMM_I16_PACK_A_PREFETCH_ROWS * sam * 2);
            const __m512i x = fx_load_w32(a + i * sam + 2 * k0, m);
            lo[i] = fx_sq_pairs_lo8(x);
            hi[i] = fx_sq_pairs_hi8(x);
        }
        sq[k0 / FX_GEMM_I16_SEG] = (int64_t)_mm512_mask_reduce_max_epu64(rows, fx_sum_lanes8x8(lo));
        if (kp - k0 > FX_GEMM_I16_SEG)
            sq[k0 / FX_GEMM_I16_SEG + 1] =
                (int64_t)_mm512_mask_reduce_max_epu64(rows, fx_sum_lanes8x8(hi));
    }
}

/* vpermt2w indices interleaving two rows of 32 values: output word 2j + t takes column j (+16
 * for the upper half) of row t; indices 0..31 name the first source, 32..63 the second */
static inline void fx_pair_indices(__m512i *idx_lo, __m512i *idx_hi)
{
    short lo[32], hi[32];
    for (int j = 0; j < 16; j++) {
        lo[2 * j] = (short)j;
        lo[2 * j + 1] = (short)(32 + j);
        hi[2 * j] = (short)(16 + j);
        hi[2 * j + 1] = (short)(48 + j);
    }
    *idx_lo = _mm512_loadu_si512((const void *)lo);
    *idx_hi = _mm512_loadu_si512((const void *)hi);
}

/* One pair of rows (r0, r1) of a 32-column panel interleaved into dst (64 words), and with
 * norms its columns' sums of squares added to acc: lane j of lo/hi is column j / 16 + j, four
 * uint64 accumulators of 8 columns. (acc is never NULL: a pointer that might be kept the
 * accumulators in memory, and the run packer 10 % slower.) */
static inline __attribute__((always_inline)) void
fx_pack_pair_32(__m512i r0, __m512i r1, __m512i idx_lo, __m512i idx_hi, int16_t *dst,
                __m512i acc[4], int norms)
{
    const __m512i lo = _mm512_permutex2var_epi16(r0, idx_lo, r1);
    const __m512i hi = _mm512_permutex2var_epi16(r0, idx_hi, r1);
    _mm512_storeu_si512((void *)dst, lo);
    _mm512_storeu_si512((void *)(dst + 32), hi);
    if (!norms) return;
    acc[0] = _mm512_add_epi64(acc[0], fx_sq_pairs_lo8(lo));
    acc[1] = _mm512_add_epi64(acc[1], fx_sq_pairs_hi8(lo));
    acc[2] = _mm512_add_epi64(acc[2], fx_sq_pairs_lo8(hi));
    acc[3] = _mm512_add_epi64(acc[3], fx_sq_pairs_hi8(hi));
}

/* a segment's largest column sum of squares, and its accumulators cleared for the next */
static inline int64_t fx_pack_segment_max(__m512i acc[4])
{
    const __m512i mx = _mm512_max_epu64(_mm512_max_epu64(acc[0], acc[1]),
                                        _mm512_max_epu64(acc[2], acc[3]));
    acc[0] = acc[1] = acc[2] = acc[3] = _mm512_setzero_si512();
    return (int64_t)_mm512_reduce_max_epu64(mx);
}

/* B: bp[p*64 + 2j + t] = B[2p + t][j] for the 32 columns j: two rows interleaved by one
 * two-source word permute per 32 outputs. An odd kc pairs the last row with zeros. */
static void fx_pack_b_32(const int16_t *b, int64_t sbk, int64_t kc, int16_t *bp, int64_t *sq)
{
    const int64_t kp = (kc + 1) / 2;
    __m512i idx_lo, idx_hi;
    fx_pair_indices(&idx_lo, &idx_hi);
    __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                      _mm512_setzero_si512()};
    for (int64_t p = 0; p < kp; p++) {
        fx_prefetch_at(b + 2 * p * sbk, FX_GEMM_I16_PACK_PREFETCH_BYTES);
        if (2 * p + 1 < kc) fx_prefetch_at(b + (2 * p + 1) * sbk, FX_GEMM_I16_PACK_PREFETCH_BYTES);
        const __m512i r0 = _mm512_loadu_si512((const void *)(b + 2 * p * sbk));
        const __m512i r1 = 2 * p + 1 < kc ? _mm512_loadu_si512((const void *)(b + (2 * p + 1) * sbk))
                                          : _mm512_setzero_si512();
        fx_pack_pair_32(r0, r1, idx_lo, idx_hi, bp + p * 2 * FX_PACK_NR, acc, sq != NULL);
        if (sq && ((p + 1) % FX_GEMM_I16_SEG == 0 || p + 1 == kp))
            sq[p / FX_GEMM_I16_SEG] = fx_pack_segment_max(acc);
    }
}

/* fx_pack_b_32 over a run of npan panels of one norm segment (kc <= 16 rows) in one call,
 * the rows' addresses and the permutes' indices made once: a call per panel, with its own
 * setup and loop over the pairs, cost up to 8 % of the convolutions' shapes as GEMMs (M =
 * 16-64, where the packing is a large share of a product: each B panel meets few tiles). The
 * same bytes and sums of squares as fx_pack_b_32 on each panel. */
static void fx_pack_b_32_run(const int16_t *b, int64_t sbk, int64_t kc, int64_t npan, int16_t *bp,
                             int64_t pstride, int64_t *sq)
{
    const int kp = (int)((kc + 1) / 2);
    __m512i idx_lo, idx_hi;
    fx_pair_indices(&idx_lo, &idx_hi);
    const int16_t *rows[2 * FX_GEMM_I16_SEG]; /* NULL: the zero row pairing an odd kc's last */
    for (int r = 0; r < 2 * kp; r++) rows[r] = r < kc ? b + r * sbk : NULL;
    for (int64_t j = 0; j < npan; j++) {
        __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                          _mm512_setzero_si512()};
        for (int p = 0; p < kp; p++) {
            const int16_t *q0 = rows[2 * p] + j * FX_PACK_NR, *q1 = rows[2 * p + 1];
            fx_prefetch_at(q0, FX_GEMM_I16_PACK_PREFETCH_BYTES);
            const __m512i r0 = _mm512_loadu_si512((const void *)q0);
            __m512i r1 = _mm512_setzero_si512();
            if (q1) {
                fx_prefetch_at(q1 + j * FX_PACK_NR, FX_GEMM_I16_PACK_PREFETCH_BYTES);
                r1 = _mm512_loadu_si512((const void *)(q1 + j * FX_PACK_NR));
            }
            fx_pack_pair_32(r0, r1, idx_lo, idx_hi, bp + j * pstride + p * 2 * FX_PACK_NR, acc,
                            sq != NULL);
        }
        if (sq) sq[j] = fx_pack_segment_max(acc);
    }
}

/* Split layout: b = 256 bh + bl with bl = ((b + 128) mod 256) - 128 and bh = (b - bl) / 256,
 * on 16-bit lanes without overflow: bl = ((b & 255) ^ 128) - 128, and bh = (b >> 8) + 1 exactly
 * when (b & 255) >= 128, i.e. bh = (b >> 8) + (((b & 255) + 128) >> 8) (up to 127 + 1 = 128). */
static void fx_split_panel_32(const int16_t *bp, int64_t kp, int16_t *bs)
{
    const __m512i lo8 = _mm512_set1_epi16(255), half = _mm512_set1_epi16(128);
    for (int64_t p = 0; p < kp; p++)
        for (int v = 0; v < 2; v++) {
            const __m512i x = _mm512_loadu_si512((const void *)(bp + p * 2 * FX_PACK_NR + 32 * v));
            const __m512i low = _mm512_and_si512(x, lo8);
            const __m512i bl = _mm512_sub_epi16(_mm512_xor_si512(low, half), half);
            const __m512i bh = _mm512_add_epi16(_mm512_srai_epi16(x, 8),
                                                _mm512_srli_epi16(_mm512_add_epi16(low, half), 8));
            _mm512_storeu_si512((void *)(bs + p * 4 * FX_PACK_NR + 32 * v), bh);
            _mm512_storeu_si512((void *)(bs + p * 4 * FX_PACK_NR + 2 * FX_PACK_NR + 32 * v), bl);
        }
}

/* Bytes 1 and 3 of each int32 lane of x moved to bytes 0 and 2, bytes 1 and 3 of y kept: the
 * high bytes of two pairs' words, merged by one bit-select (vpternlogd). */
static inline __m512i fx_high_bytes_of_pairs(__m512i x, __m512i y)
{
    return _mm512_ternarylogic_epi32(_mm512_set1_epi32(0x00FF00FF), _mm512_srli_epi32(x, 8), y,
                                     0xCA); /* mask ? (x >> 8) : y, bit by bit */
}

/* Wrap layout (gemm_i16.h) from a plain panel: a column's high bytes are those of its int32
 * lanes in the two pairs' vectors; the chunk's column sums of those signed bytes come from
 * vpdpbusd with all-ones unsigned bytes (exact: at most 128 terms of magnitude <= 128). */
static void fx_wrap_panel_32(const int16_t *bp, int64_t kp, int16_t *bw)
{
    const __m512i ones = _mm512_set1_epi8(1);
    const int64_t nq = (kp + 1) / 2;
    for (int64_t q0 = 0; q0 < nq; q0 += FX_GEMM_I16_WRAP_CHUNK_QUADS) {
        const int64_t q1 = q0 + FX_GEMM_I16_WRAP_CHUNK_QUADS < nq ? q0 + FX_GEMM_I16_WRAP_CHUNK_QUADS : nq;
        int16_t *corr_at = bw;
        __m512i corr[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
        bw += 2 * FX_PACK_NR;
        for (int64_t q = q0; q < q1; q++, bw += 6 * FX_PACK_NR) {
            const int has1 = 2 * q + 1 < kp;
            for (int v = 0; v < 2; v++) {
                const __m512i x0 = _mm512_loadu_si512((const void *)(bp + 2 * q * 2 * FX_PACK_NR + 32 * v));
                const __m512i x1 = has1 ? _mm512_loadu_si512(
                                              (const void *)(bp + (2 * q + 1) * 2 * FX_PACK_NR + 32 * v))
                                        : _mm512_setzero_si512();
                const __m512i hi = fx_high_bytes_of_pairs(x0, x1);
                corr[v] = _mm512_dpbusd_epi32(corr[v], ones, hi);
                _mm512_store_si512((void *)(bw + 32 * v), hi);
                _mm512_store_si512((void *)(bw + 2 * FX_PACK_NR + 32 * v), x0);
                _mm512_store_si512((void *)(bw + 4 * FX_PACK_NR + 32 * v), x1);
            }
        }
        _mm512_store_si512((void *)corr_at, _mm512_slli_epi32(corr[0], 7));
        _mm512_store_si512((void *)(corr_at + 32), _mm512_slli_epi32(corr[1], 7));
    }
}

/* A high panel (gemm_i16.h) of a 6-row micro-panel: entry d = 6p + i merges the high bytes of
 * entries d and d + 6 (pair p + 1, same row), so 16 entries take two loads and three vector
 * operations, with no shuffle. Masked loads read nothing beyond the kp pairs (the last pair
 * merges with zeros). */
static void fx_a_high_6(const int32_t *ap, int64_t kp, int32_t *ahi)
{
    const int64_t n = kp * FX_PACK_MR;
    const __m512i flip = _mm512_set1_epi32((int)0x80808080u);
    for (int64_t d = 0; d < n; d += 16) {
        const int64_t left = n - d, left1 = left - FX_PACK_MR;
        const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        const __mmask16 m1 = left1 >= 16 ? (__mmask16)0xFFFF
                                         : left1 <= 0 ? 0 : (__mmask16)((1u << left1) - 1);
        if (m1 == 0xFFFF) { /* whole vectors: plain loads and store (m is whole too) */
            const __m512i x = _mm512_loadu_si512((const void *)(ap + d));
            const __m512i y = _mm512_loadu_si512((const void *)(ap + d + FX_PACK_MR));
            _mm512_storeu_si512((void *)(ahi + d), _mm512_xor_si512(fx_high_bytes_of_pairs(x, y), flip));
            continue;
        }
        const __m512i x = _mm512_maskz_loadu_epi32(m, ap + d);
        const __m512i y = _mm512_maskz_loadu_epi32(m1, ap + d + FX_PACK_MR);
        _mm512_mask_storeu_epi32(ahi + d, m, _mm512_xor_si512(fx_high_bytes_of_pairs(x, y), flip));
    }
}

const fx_gemm_i16_pack fx_gemm_i16_pack_avx512_6x32 = {.pack_a = fx_pack_a_6,
                                                       .pack_b = fx_pack_b_32,
                                                       .pack_b_run = fx_pack_b_32_run,
                                                       .pack_bt = fx_gemm_i16_pack_bt_32,
                                                       .pack_at = fx_gemm_i16_pack_at_6,
                                                       .split_panel = fx_split_panel_32,
                                                       .wrap_panel = fx_wrap_panel_32,
                                                       .a_high = fx_a_high_6,
                                                       .norms_a = fx_gemm_i16_norms_a_6,
                                                       .norms_rows = fx_norms_rows_6,
                                                       .norm_prod_max = fx_gemm_i16_norm_prod_max};
