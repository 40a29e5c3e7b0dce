/* AVX2 packing for the exact int16 GEMM's 6 x 16 register tile (see gemm_i16.h for the layouts
 * and for what the segment norms are for). The portable loops in gemm_i16.c define the
 * results; these produce the same bytes and the same exact sums of squares with vector
 * instructions. Without them the norm test cost more than the fast kernel saved (the scalar
 * norms took a fifth of a flex16_5 CNN epoch), so AVX2 machines ran every convolution tile on
 * the two-multiply split kernel. */
#include "gemm_i16.h"
#include "core/transpose_avx2.h"

#include <immintrin.h>
#include <string.h>

#define FX_PACK_MR 6
#define FX_PACK_NR 16 /* two halves of 8 columns, one ymm of pairs each */
#define FX_PACK_HALF 8

_Static_assert(FX_GEMM_I16_SEG == 8, "one segment is one 8-pair (16-value) row vector");

/* The largest of eight exact sums of squares over one segment: v[t] (t < ks) holds pair t of
 * eight vectors, one per 32-bit lane (an A row or a B column; missing ones are zeros, whose sum
 * 0 cannot win). vpmaddwd(x, x) gives lo^2 + hi^2 per lane, at most 2 * 2^30 = 2^31, exact when
 * read as unsigned; the even and odd 32-bit lanes are split into uint64 lanes (one and, one
 * shift) and added by a tree, so no long chain of dependent adds forms. */
static inline int64_t fx_seg_sq_max(const __m256i v[8], int ks)
{
    const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFFll);
    __m256i ev[8], od[8];
    for (int t = 0; t < 8; t++) {
        const __m256i q = t < ks ? _mm256_madd_epi16(v[t], v[t]) : _mm256_setzero_si256();
        ev[t] = _mm256_and_si256(q, lo32);  /* vectors 0, 2, 4, 6 */
        od[t] = _mm256_srli_epi64(q, 32);   /* vectors 1, 3, 5, 7 */
    }
    for (int w = 4; w >= 1; w /= 2)
        for (int t = 0; t < w; t++) {
            ev[t] = _mm256_add_epi64(ev[t], ev[t + w]);
            od[t] = _mm256_add_epi64(od[t], od[t + w]);
        }
    /* the sums are below 2^35: a signed compare orders them */
    __m256i m = _mm256_blendv_epi8(ev[0], od[0], _mm256_cmpgt_epi64(od[0], ev[0]));
    __m256i x = _mm256_permute4x64_epi64(m, 0x4E);
    m = _mm256_blendv_epi8(m, x, _mm256_cmpgt_epi64(x, m));
    x = _mm256_shuffle_epi32(m, 0x4E);
    m = _mm256_blendv_epi8(m, x, _mm256_cmpgt_epi64(x, m));
    return _mm_cvtsi128_si64(_mm256_castsi256_si128(m));
}

/* Pairs of `rows` (<= 8) int16 vectors of kc contiguous values each (vector i at src + i *
 * stride) as int32 words out[p*ostride + i] = (v_i[2p], v_i[2p+1]), ostride = rows or, for
 * rows = 8, any larger stride: A panels (rows = 6) and the halves of B panels of a B whose
 * columns are contiguous (rows = 8 columns, ostride 16, or 32 for AVX-512), with sq[s] = the
 * largest vector's sum of squares over segment s. Eight pairs (one norm segment) of all vectors at
 * a time through an 8 x 8 register transpose (missing vectors are zeros). A block shorter than 16
 * values is copied into a zeroed buffer first, so that an odd kc leaves the last pair's high half
 * 0 and nothing beyond a vector is read. With rows = 6 each pair's 8-word store spills two words
 * into the next pair's slots, which that pair's store then overwrites; the last pair stores only
 * its own words. Whole segments (all but possibly the last) take a
 * branch-free path: a sixth of an AVX2 flex16_5 CNN step went to this packing. ahead: the
 * vectors this many further are prefetched (fx_prefetch_at): three A
 * micro-panels, or one B panel of columns. */
static inline void fx_pack_pairs(const int16_t *src, int64_t stride, int64_t kc, int rows,
                                 int64_t ostride, int32_t *out, int64_t *sq, int ahead)
{
    const int64_t kp = (kc + 1) / 2;
    const int64_t kfull = kc / 16 * 8; /* pairs in whole segments of 16 values per vector */
    int64_t k0 = 0;
    for (; k0 < kfull; k0 += FX_GEMM_I16_SEG) {
        __m256i v[8];
        for (int i = 0; ahead && i < rows; i++)
            fx_prefetch_at(src + i * stride + 2 * k0, ahead * stride * 2);
        for (int i = 0; i < 8; i++)
            v[i] = i < rows ? _mm256_loadu_si256((const __m256i *)(src + i * stride + 2 * k0))
                            : _mm256_setzero_si256();
        fx_transpose8x8_epi32(v);
        int32_t *dst = out + k0 * ostride;
        for (int t = 0; t < 7; t++) _mm256_storeu_si256((__m256i *)(dst + t * ostride), v[t]);
        if (rows == 8 || k0 + 8 < kp) {
            _mm256_storeu_si256((__m256i *)(dst + 7 * ostride), v[7]);
        } else { /* rows == 6, the panel's last pair */
            _mm_storeu_si128((__m128i *)(dst + 7 * ostride), _mm256_castsi256_si128(v[7]));
            _mm_storel_epi64((__m128i *)(dst + 7 * ostride + 4), _mm256_extracti128_si256(v[7], 1));
        }
        if (sq) sq[k0 / FX_GEMM_I16_SEG] = fx_seg_sq_max(v, 8);
    }
    for (; k0 < kp; k0 += FX_GEMM_I16_SEG) { /* the last, short segment */
        const int64_t left = kc - 2 * k0; /* int16 values left in each vector */
        const int ks = kp - k0 < FX_GEMM_I16_SEG ? (int)(kp - k0) : FX_GEMM_I16_SEG;
        __m256i v[8];
        for (int i = 0; i < 8; i++) {
            if (i >= rows) { /* no pointer is formed for a missing vector */
                v[i] = _mm256_setzero_si256();
                continue;
            }
            int16_t tmp[16] = {0};
            memcpy(tmp, src + i * stride + 2 * k0, (size_t)left * sizeof *tmp);
            v[i] = _mm256_loadu_si256((const __m256i *)tmp);
        }
        fx_transpose8x8_epi32(v); /* v[t]: pair k0 + t of every vector, vector i in lane i */
        for (int t = 0; t < ks; t++) {
            int32_t *dst = out + (k0 + t) * ostride;
            if (rows == 8 || k0 + t + 1 < kp) {
                _mm256_storeu_si256((__m256i *)dst, v[t]);
            } else { /* rows == 6 */
                _mm_storeu_si128((__m128i *)dst, _mm256_castsi256_si128(v[t]));
                _mm_storel_epi64((__m128i *)(dst + 4), _mm256_extracti128_si256(v[t], 1));
            }
        }
        if (sq) sq[k0 / FX_GEMM_I16_SEG] = fx_seg_sq_max(v, ks);
    }
}

/* A: ap[p*6 + i] = (A[i][2p], A[i][2p+1]) as one int32. */
static void fx_pack_a_6(const int16_t *a, int64_t sam, int64_t kc, int32_t *ap, int64_t *sq)
{
    fx_pack_pairs(a, sam, kc, FX_PACK_MR, FX_PACK_MR, ap, sq, FX_GEMM_I16_PACK_A_PREFETCH_ROWS);
}

/* The largest of two halves' segment sums of squares, into sq. */
static inline void fx_sq_max(int64_t *sq, const int64_t *sq1, int64_t kc)
{
    const int64_t nseg = ((kc + 1) / 2 + FX_GEMM_I16_SEG - 1) / FX_GEMM_I16_SEG;
    for (int64_t s = 0; s < nseg; s++) sq[s] = sq1[s] > sq[s] ? sq1[s] : sq[s];
}

/* B with contiguous columns (B[k][j] at b + j * sbn + k): the plain layout's pair p of column
 * j, bp[p*32 + 2j + t] = B[2p + t][j], is word p of column j, so each half of 8 columns is A's
 * packing with the columns for rows, at a word stride of 16. */
static void fx_pack_bt_16(const int16_t *b, int64_t sbn, int64_t kc, int16_t *bp, int64_t *sq)
{
    int32_t *out = (int32_t *)(void *)bp;
    int64_t sq1[FX_GEMM_I16_KC / 2 / FX_GEMM_I16_SEG + 1];
    fx_pack_pairs(b, sbn, kc, FX_PACK_HALF, FX_PACK_NR, out, sq, FX_PACK_NR);
    fx_pack_pairs(b + FX_PACK_HALF * sbn, sbn, kc, FX_PACK_HALF, FX_PACK_NR, out + FX_PACK_HALF,
                  sq ? sq1 : NULL, FX_PACK_NR);
    if (sq) fx_sq_max(sq, sq1, kc);
}

/* The same for the AVX-512 level's 32-column plain panel (word stride 32, four quarters of 8
 * columns; AVX2 code, which that level's CPUs run): a convolution's weights reach the GEMM as
 * such a B, and the portable loop that packed them was a third of the driver's time in an
 * AVX-512 flex16_5 CNN step. */
void fx_gemm_i16_pack_bt_32(const int16_t *b, int64_t sbn, int64_t kc, int16_t *bp, int64_t *sq)
{
    int32_t *out = (int32_t *)(void *)bp;
    int64_t sq1[FX_GEMM_I16_KC / 2 / FX_GEMM_I16_SEG + 1];
    for (int q = 0; q < 4; q++) {
        fx_pack_pairs(b + q * FX_PACK_HALF * sbn, sbn, kc, FX_PACK_HALF, 4 * FX_PACK_HALF,
                      out + q * FX_PACK_HALF, sq ? (q ? sq1 : sq) : NULL, 4 * FX_PACK_HALF);
        if (sq && q) fx_sq_max(sq, sq1, kc);
    }
}

/* Rows 2p and 2p+1 of 8 columns interleaved by one word unpack pair: (B[2p][j], B[2p+1][j]). */
static inline __m256i fx_pair_rows(__m128i r0, __m128i r1)
{
    return _mm256_set_m128i(_mm_unpackhi_epi16(r0, r1), _mm_unpacklo_epi16(r0, r1));
}

/* Six contiguous int16 (12 bytes, nothing read past them) in the low six words */
static inline __m128i fx_load6_epi16(const int16_t *p)
{
    int32_t last;
    memcpy(&last, p + 4, sizeof last);
    return _mm_insert_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p), last, 2);
}

/* A with contiguous columns: ap[p*6 + i] = (A[i][2p], A[i][2p+1]) with A[i][k] = a[i + k sak],
 * the six values of source rows 2p and 2p + 1 interleaved as B's rows are (fx_pair_rows). Each
 * pair's 8-word store spills two words into the next pair's slots, which that pair then
 * overwrites; the last pair stores only its own six. Why: the portable loop took a quarter of
 * the transformer's MLP weight gradient (128 x 512 x 16384 with A = dy^T) and half as much time
 * as the kernel in its attention products' backward passes (Zen 4, flex16_5). */
void fx_gemm_i16_pack_at_6(const int16_t *a, int64_t sak, int64_t kc, int32_t *ap)
{
    const int64_t kp = (kc + 1) / 2;
    for (int64_t p = 0; p < kp; p++) {
        const int16_t *r0 = a + 2 * p * sak;
        const __m128i x0 = fx_load6_epi16(r0);
        const __m128i x1 = 2 * p + 1 < kc ? fx_load6_epi16(r0 + sak) : _mm_setzero_si128();
        const __m256i w = fx_pair_rows(x0, x1);
        int32_t *dst = ap + p * FX_PACK_MR;
        if (p + 1 < kp) {
            _mm256_storeu_si256((__m256i *)(void *)dst, w);
        } else {
            _mm_storeu_si128((__m128i *)(void *)dst, _mm256_castsi256_si128(w));
            _mm_storel_epi64((__m128i *)(void *)(dst + 4), _mm256_extracti128_si256(w, 1));
        }
    }
}

/* B: bp[p*32 + 2j + t] = B[2p + t][j] for the 16 columns j. An odd kc pairs the last row with
 * zeros. */
static inline __attribute__((always_inline)) void
fx_pack_b_16_panel(const int16_t *b, int64_t sbk, int64_t kc, int16_t *bp, int64_t *sq)
{
    const int64_t kp = (kc + 1) / 2;
    __m256i seg0[FX_GEMM_I16_SEG], seg1[FX_GEMM_I16_SEG]; /* the segment's pairs, lane j: column
                                                             j (seg0) and 8 + j (seg1) */
    for (int64_t p = 0; p < kp; p++) {
        const int16_t *r0 = b + 2 * p * sbk;
        __m128i r1a = _mm_setzero_si128(), r1b = r1a; /* the last row of an odd kc: zeros */
        fx_prefetch_at(r0, FX_GEMM_I16_PACK_PREFETCH_BYTES);
        if (2 * p + 1 < kc) { /* no pointer is formed beyond the block */
            fx_prefetch_at(r0 + sbk, FX_GEMM_I16_PACK_PREFETCH_BYTES);
            r1a = _mm_loadu_si128((const __m128i *)(r0 + sbk));
            r1b = _mm_loadu_si128((const __m128i *)(r0 + sbk + FX_PACK_HALF));
        }
        const __m256i x0 = fx_pair_rows(_mm_loadu_si128((const __m128i *)r0), r1a);
        const __m256i x1 = fx_pair_rows(_mm_loadu_si128((const __m128i *)(r0 + FX_PACK_HALF)), r1b);
        _mm256_storeu_si256((__m256i *)(bp + p * 2 * FX_PACK_NR), x0);
        _mm256_storeu_si256((__m256i *)(bp + p * 2 * FX_PACK_NR + 2 * FX_PACK_HALF), x1);
        if (!sq) continue;
        const int t = (int)(p % FX_GEMM_I16_SEG);
        seg0[t] = x0;
        seg1[t] = x1;
        if (t + 1 == FX_GEMM_I16_SEG || p + 1 == kp) {
            const int64_t m0 = fx_seg_sq_max(seg0, t + 1), m1 = fx_seg_sq_max(seg1, t + 1);
            sq[p / FX_GEMM_I16_SEG] = m0 > m1 ? m0 : m1;
        }
    }
}

static void fx_pack_b_16(const int16_t *b, int64_t sbk, int64_t kc, int16_t *bp, int64_t *sq)
{
    fx_pack_b_16_panel(b, sbk, kc, bp, sq);
}

static void fx_pack_b_16_run(const int16_t *b, int64_t sbk, int64_t kc, int64_t npan, int16_t *bp,
                             int64_t pstride, int64_t *sq)
{
    for (int64_t j = 0; j < npan; j++)
        fx_pack_b_16_panel(b + j * FX_PACK_NR, sbk, kc, bp + j * pstride, sq ? sq + j : NULL);
}

/* Split layout: b = 256 bh + bl with bl = ((b + 128) mod 256) - 128 and bh = (b - bl) / 256,
 * on 16-bit lanes without overflow: bl = ((b & 255) ^ 128) - 128, and bh = (b >> 8) + 1 exactly
 * when (b & 255) >= 128, i.e. bh = (b >> 8) + (((b & 255) + 128) >> 8) (up to 127 + 1 = 128).
 * Pair p: 16 high parts at bs + 64p, 16 low parts at bs + 64p + 32. */
static void fx_split_panel_16(const int16_t *bp, int64_t kp, int16_t *bs)
{
    const __m256i lo8 = _mm256_set1_epi16(255), half = _mm256_set1_epi16(128);
    for (int64_t p = 0; p < kp; p++)
        for (int h = 0; h < 2; h++) {
            const __m256i x =
                _mm256_loadu_si256((const __m256i *)(bp + p * 2 * FX_PACK_NR + 2 * FX_PACK_HALF * h));
            const __m256i low = _mm256_and_si256(x, lo8);
            const __m256i bl = _mm256_sub_epi16(_mm256_xor_si256(low, half), half);
            const __m256i bh = _mm256_add_epi16(_mm256_srai_epi16(x, 8),
                                                _mm256_srli_epi16(_mm256_add_epi16(low, half), 8));
            int16_t *dst = bs + p * 4 * FX_PACK_NR + 2 * FX_PACK_HALF * h;
            _mm256_storeu_si256((__m256i *)dst, bh);
            _mm256_storeu_si256((__m256i *)(dst + 2 * FX_PACK_NR), bl);
        }
}

/* na[s] = the ceiling square root of the largest of the 6 rows' exact sums of squares over
 * whole segment s of a packed A micro-panel (kp pairs, a short last segment left to the
 * caller; one int32 word of two int16 per row and pair: word p * 6 + i). A convolution's pre-packed panels take their norms here (fx_panel_norms): the portable loop was
 * a third of an AVX-512 flex16_5 CNN step once the fast kernel ran on those products.
 * Per whole segment (8 pairs, 48 words, 6 ymm): vpmaddwd of a vector with itself gives
 * lo^2 + hi^2 per word, exact as uint32 (at most 2^31), widened to uint64 before any sum.
 * Words w and w + 24 belong to the same row (24 = lcm(6, 8)), so vectors v and v + 3 add lane
 * by lane; the 24 sums left are rows 0-3 (lanes of A), 4, 5, 0, 1 (B1) and 2-5 (B2), put
 * together with one cross-lane permute. */
void fx_gemm_i16_norms_a_6(const int32_t *ap, int64_t kp, int32_t *na)
{
    for (int64_t p0 = 0, s = 0; p0 + FX_GEMM_I16_SEG <= kp; p0 += FX_GEMM_I16_SEG, s++) {
        const __m256i *v = (const __m256i *)(ap + p0 * 6);
        __m256i q[6]; /* q[k]: uint64 sums of words 4k..4k+3 and 24+4k..24+4k+3 */
        for (int t = 0; t < 3; t++) {
            const __m256i x = _mm256_loadu_si256(v + t), y = _mm256_loadu_si256(v + t + 3);
            const __m256i x2 = _mm256_madd_epi16(x, x), y2 = _mm256_madd_epi16(y, y);
            q[2 * t] = _mm256_add_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(x2)),
                                        _mm256_cvtepu32_epi64(_mm256_castsi256_si128(y2)));
            q[2 * t + 1] =
                _mm256_add_epi64(_mm256_cvtepu32_epi64(_mm256_extracti128_si256(x2, 1)),
                                 _mm256_cvtepu32_epi64(_mm256_extracti128_si256(y2, 1)));
        }
        /* words 0-3 + 12-15: rows 0-3; 4-7 + 16-19: rows 4, 5, 0, 1; 8-11 + 20-23: rows 2-5 */
        const __m256i a = _mm256_add_epi64(q[0], q[3]), b1 = _mm256_add_epi64(q[1], q[4]),
                      b2 = _mm256_add_epi64(q[2], q[5]);
        const __m256i r03 = _mm256_add_epi64(a, _mm256_permute2x128_si256(b1, b2, 0x21));
        const __m128i r45 =
            _mm_add_epi64(_mm256_castsi256_si128(b1), _mm256_extracti128_si256(b2, 1));
        int64_t r[6];
        _mm256_storeu_si256((__m256i *)r, r03);
        _mm_storeu_si128((__m128i *)(r + 4), r45);
        int64_t mx = r[0];
        for (int i = 1; i < 6; i++) mx = r[i] > mx ? r[i] : mx;
        na[s] = (int32_t)fx_ceil_sqrt(mx);
    }
}

/* The largest na[s] nb[s], s < n: four exact 64-bit products a step (vpmuludq of the
 * zero-extended norms; each at most 2^17 + 1, so a product stays below 2^35 and compares as
 * signed). The driver tests the chain of every tile and K block; as a scalar loop of
 * multiplies and compare-moves that test took 2-5 % of a 1024^3 product on a Zen 5 (timed by
 * running it three more times per tile). */
int64_t fx_gemm_i16_norm_prod_max(const int32_t *na, const int32_t *nb, int64_t n)
{
    __m256i m = _mm256_setzero_si256();
    int64_t s = 0;
    for (; s + 4 <= n; s += 4) {
        const __m256i a = _mm256_cvtepu32_epi64(_mm_loadu_si128((const __m128i *)(na + s)));
        const __m256i b = _mm256_cvtepu32_epi64(_mm_loadu_si128((const __m128i *)(nb + s)));
        const __m256i p = _mm256_mul_epu32(a, b);
        m = _mm256_blendv_epi8(m, p, _mm256_cmpgt_epi64(p, m));
    }
    int64_t l[4];
    _mm256_storeu_si256((__m256i *)l, m);
    int64_t t = l[0] > l[1] ? l[0] : l[1];
    t = l[2] > t ? l[2] : t;
    t = l[3] > t ? l[3] : t;
    for (; s < n; s++) {
        const int64_t x = (int64_t)na[s] * nb[s];
        t = x > t ? x : t;
    }
    return t;
}

const fx_gemm_i16_pack fx_gemm_i16_pack_avx2_6x16 = {.pack_a = fx_pack_a_6,
                                                     .pack_b = fx_pack_b_16,
                                                     .pack_b_run = fx_pack_b_16_run,
                                                     .pack_bt = fx_pack_bt_16,
                                                     .pack_at = fx_gemm_i16_pack_at_6,
                                                     .split_panel = fx_split_panel_16,
                                                     .norms_a = fx_gemm_i16_norms_a_6,
                                                     .norm_prod_max = fx_gemm_i16_norm_prod_max};
