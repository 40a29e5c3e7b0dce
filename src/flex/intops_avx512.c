/* AVX-512 integer kernels of the shared-exponent formats: the exact int16 GEMM micro-kernels.
 * Two variants share each body: vpdpwssd (AVX512_VNNI, installed only when the CPU has it) and
 * vpmaddwd + vpaddd (AVX-512BW). With VNNI the wrap kernel (vpdpwssd + vpdpbusd) replaces the
 * split kernel on every tile the fast kernel does not take. Exactness: see gemm_i16.h (fast
 * kernel: norm-bounded int32 chains folded into Lo/Hi words; split kernel: split B, int32
 * chains of at most 255 pair steps, widened to int64 at the end of every K block; wrap
 * kernel: sums mod 2^32 plus a high-byte estimate folded to floor(S / 2^16) per chunk). */
#include "gemm_i16.h"

#include <immintrin.h>

#define FX_MR FX_FLEX_MR_AVX512 /* rows of the register tile (6) */
#define FX_NR FX_FLEX_NR_AVX512 /* columns (32): two zmm of 16 int32 lanes */
#define FX_NR16 FX_FLEX_NR_NARROW_AVX512 /* the narrow tile's columns (16): one zmm */

#define FX_ALWAYS_INLINE inline __attribute__((always_inline))

/* acc += a0*b0 + a1*b1 per int32 lane (mod 2^32). The accumulation is written as inline asm:
 * GCC 12 does not tie the _mm512_dpwssd_epi32 accumulator to its register inside these loops
 * and copies every accumulator twice per step (measured: 46 register moves per 24 vpdpwssd),
 * which halves the throughput of a port-bound kernel. */
static FX_ALWAYS_INLINE __m512i fx_dot_pairs(__m512i acc, __m512i a, __m512i b, const int vnni)
{
    if (!vnni) {
        const __m512i prod = _mm512_madd_epi16(a, b);
        __asm__("vpaddd %1, %0, %0" : "+v"(acc) : "v"(prod));
        return acc;
    }
    __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* The epilogue of a K block after the first adds the tile's int64 outputs, often not in L1
 * (rows ldc apart): fetch them while the multiplies run. */
static FX_ALWAYS_INLINE void fx_prefetch_cols(const int64_t *c, int64_t ldc, int m, int ncols,
                                             int accumulate)
{
    if (!accumulate) return;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < ncols; j += 8) _mm_prefetch((const char *)(c + i * ldc + j), _MM_HINT_T0);
}

static FX_ALWAYS_INLINE void fx_prefetch_c(const int64_t *c, int64_t ldc, int m, int accumulate)
{
    fx_prefetch_cols(c, ldc, m, FX_NR, accumulate);
}

/* *amax = max(*amax, the largest unsigned lane of mx) (amax NULL: nothing to report) */
static FX_ALWAYS_INLINE void fx_amax_finish(__m512i mx, uint64_t *amax)
{
    if (!amax) return;
    const uint64_t m = (uint64_t)_mm512_reduce_max_epu64(mx);
    *amax = m > *amax ? m : *amax;
}

/* C[0..m, 0..n] (row stride ldc) = (accumulate ? C : 0) + the tile's int64 values rebuilt from
 * two spilled int32 words per output: hs * 2^8 + ls (split kernel: 256 Sh + Sl, both signed),
 * or hs * 2^16 + (ls mod 2^16) (wrap kernel: 2^16 G + the low 16 bits of L). Only the valid
 * part is read and written. amax (NULL: none) is raised to max |value written|: vpabsq maps
 * INT64_MIN to itself, which read unsigned is its magnitude 2^63, so the unsigned maximum of the
 * masked lanes is exact. */
static FX_ALWAYS_INLINE void fx_store_tile(const int32_t hs[FX_MR][FX_NR],
                                           const int32_t ls[FX_MR][FX_NR], const int wrap,
                                           int64_t *c, int64_t ldc, int m, int n, int accumulate,
                                           uint64_t *amax)
{
    const __m512i low16 = _mm512_set1_epi64(0xFFFF);
    __m512i mx = _mm512_setzero_si512();
    for (int i = 0; i < m; i++) {
        int64_t *ci = c + i * ldc;
        for (int j = 0; j < n; j += 8) {
            const __mmask8 k = n - j >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - j)) - 1);
            const __m512i h = _mm512_cvtepi32_epi64(_mm256_load_si256((const void *)&hs[i][j]));
            const __m256i l8 = _mm256_load_si256((const void *)&ls[i][j]);
            __m512i s = wrap ? _mm512_or_si512(_mm512_slli_epi64(h, 16),
                                               _mm512_and_si512(_mm512_cvtepu32_epi64(l8), low16))
                             : _mm512_add_epi64(_mm512_slli_epi64(h, 8), _mm512_cvtepi32_epi64(l8));
            if (accumulate) s = _mm512_add_epi64(s, _mm512_maskz_loadu_epi64(k, ci + j));
            _mm512_mask_storeu_epi64(ci + j, k, s);
            if (amax) mx = _mm512_mask_max_epu64(mx, k, mx, _mm512_abs_epi64(s));
        }
    }
    fx_amax_finish(mx, amax);
}

/* The accumulators are indexed with constants only (fully unrolled loops), so they live in
 * registers: 6 rows x 2 column vectors x {hi, lo} = 24 zmm, plus 4 for B and 1 broadcast. */
static FX_ALWAYS_INLINE void fx_ukr_body(int64_t kp, const int32_t *ap, const int16_t *bp,
                                         int64_t *c, int64_t ldc, int m, int n, int accumulate,
                                         uint64_t *amax, const int vnni)
{
    __m512i h[FX_MR][2], l[FX_MR][2];
    fx_prefetch_c(c, ldc, m, accumulate);
#pragma GCC unroll 6
    for (int i = 0; i < FX_MR; i++) h[i][0] = h[i][1] = l[i][0] = l[i][1] = _mm512_setzero_si512();

    for (int64_t p = 0; p < kp; p++) {
        const __m512i bh0 = _mm512_load_si512((const void *)bp);
        const __m512i bh1 = _mm512_load_si512((const void *)(bp + 32));
        const __m512i bl0 = _mm512_load_si512((const void *)(bp + 64));
        const __m512i bl1 = _mm512_load_si512((const void *)(bp + 96));
        bp += 4 * FX_NR;
#pragma GCC unroll 6
        for (int i = 0; i < FX_MR; i++) {
            const __m512i ai = _mm512_set1_epi32(ap[i]);
            h[i][0] = fx_dot_pairs(h[i][0], ai, bh0, vnni);
            h[i][1] = fx_dot_pairs(h[i][1], ai, bh1, vnni);
            l[i][0] = fx_dot_pairs(l[i][0], ai, bl0, vnni);
            l[i][1] = fx_dot_pairs(l[i][1], ai, bl1, vnni);
        }
        ap += FX_MR;
    }

    /* Spill the int32 chains with constant indices, then widen only the valid part. */
    int32_t hs[FX_MR][FX_NR] __attribute__((aligned(64)));
    int32_t ls[FX_MR][FX_NR] __attribute__((aligned(64)));
#pragma GCC unroll 6
    for (int i = 0; i < FX_MR; i++) {
        _mm512_store_si512((void *)&hs[i][0], h[i][0]);
        _mm512_store_si512((void *)&hs[i][16], h[i][1]);
        _mm512_store_si512((void *)&ls[i][0], l[i][0]);
        _mm512_store_si512((void *)&ls[i][16], l[i][1]);
    }
    fx_store_tile((const int32_t(*)[FX_NR])hs, (const int32_t(*)[FX_NR])ls, 0, c, ldc, m, n,
                  accumulate, amax);
}

/* Split kernel for products of at most 16 columns (a 6 x 16 tile): the 6 x 32 tile would
 * multiply as many zeros as values there (ResNet-20's 16-channel convolutions and their input
 * gradients, and every output of 16 columns or fewer). B micro-panels of nr = 16 in the split
 * layout of gemm_i16.h: per pair one vector of high parts and one of low parts; 12
 * accumulators. */
static FX_ALWAYS_INLINE void fx_ukr16_body(int64_t kp, const int32_t *ap, const int16_t *bp,
                                           int64_t *c, int64_t ldc, int m, int n, int accumulate,
                                           uint64_t *amax, const int vnni)
{
    __m512i h[FX_MR], l[FX_MR];
    fx_prefetch_cols(c, ldc, m, FX_NR16, accumulate);
#pragma GCC unroll 6
    for (int i = 0; i < FX_MR; i++) h[i] = l[i] = _mm512_setzero_si512();

    for (int64_t p = 0; p < kp; p++) {
        const __m512i bh = _mm512_load_si512((const void *)bp);
        const __m512i bl = _mm512_load_si512((const void *)(bp + 2 * FX_NR16));
        bp += 4 * FX_NR16;
#pragma GCC unroll 6
        for (int i = 0; i < FX_MR; i++) {
            const __m512i ai = _mm512_set1_epi32(ap[i]);
            h[i] = fx_dot_pairs(h[i], ai, bh, vnni);
            l[i] = fx_dot_pairs(l[i], ai, bl, vnni);
        }
        ap += FX_MR;
    }

    /* spilled into the 32-column tile's arrays, whose first 16 columns fx_store_tile reads
     * (n <= 16) */
    int32_t hs[FX_MR][FX_NR] __attribute__((aligned(64)));
    int32_t ls[FX_MR][FX_NR] __attribute__((aligned(64)));
#pragma GCC unroll 6
    for (int i = 0; i < FX_MR; i++) {
        _mm512_store_si512((void *)&hs[i][0], h[i]);
        _mm512_store_si512((void *)&ls[i][0], l[i]);
    }
    fx_store_tile((const int32_t(*)[FX_NR])hs, (const int32_t(*)[FX_NR])ls, 0, c, ldc, m, n,
                  accumulate, amax);
}

/* Fast kernel: plain B, one multiply per pair; 12 int32 chain accumulators in registers, the
 * Lo/Hi words of the tile in memory (L1), updated once per chain: 3 vector operations per
 * accumulator per chain instead of one extra multiply per pair. The accumulators are named
 * variables (not an array): with an array inside the variable-length chain loop GCC inserts a
 * register copy per accumulator and pair step, which costs as much as the multiplies. */
#define FX_FAST_ROW(i, S0, S1)                                                                 \
    do {                                                                                       \
        const __m512i ai_ = _mm512_set1_epi32(arow[i]);                                        \
        S0 = fx_dot_pairs(S0, ai_, b0, vnni);                                                  \
        S1 = fx_dot_pairs(S1, ai_, b1, vnni);                                                  \
    } while (0)

/* Lo += d (mod 2^32), Hi += floor(d / 2^16) for the chain sums d of row i (the first chain
 * stores instead of adding). */
#define FX_FAST_FLUSH(i, S0, S1)                                                               \
    do {                                                                                       \
        __m512i *pl_ = (__m512i *)&lo[i][0], *ph_ = (__m512i *)&hi[i][0];                      \
        if (p0 == 0) {                                                                         \
            pl_[0] = S0;                                                                       \
            pl_[1] = S1;                                                                       \
            ph_[0] = _mm512_srai_epi32(S0, 16);                                                \
            ph_[1] = _mm512_srai_epi32(S1, 16);                                                \
        } else {                                                                               \
            pl_[0] = _mm512_add_epi32(pl_[0], S0);                                             \
            pl_[1] = _mm512_add_epi32(pl_[1], S1);                                             \
            ph_[0] = _mm512_add_epi32(ph_[0], _mm512_srai_epi32(S0, 16));                      \
            ph_[1] = _mm512_add_epi32(ph_[1], _mm512_srai_epi32(S1, 16));                      \
        }                                                                                      \
    } while (0)

static FX_ALWAYS_INLINE void fx_fast_body(int64_t kp, int64_t chain, const int32_t *ap,
                                          const int16_t *bp, int64_t *c, int64_t ldc, int m,
                                          int n, int accumulate, uint64_t *amax, const int vnni)
{
    _Static_assert(FX_MR == 6 && FX_NR == 32, "the fast kernel is written out for 6 x 32");
    __m512i lo[FX_MR][2], hi[FX_MR][2]; /* 32 int32 words per row each */

    fx_prefetch_c(c, ldc, m, accumulate);
    for (int64_t p0 = 0; p0 < kp; p0 += chain) {
        const int64_t len = kp - p0 < chain ? kp - p0 : chain;
        __m512i s00 = _mm512_setzero_si512(), s01 = s00, s10 = s00, s11 = s00, s20 = s00,
                s21 = s00, s30 = s00, s31 = s00, s40 = s00, s41 = s00, s50 = s00, s51 = s00;
        /* chain-local pointers indexed by p: with bp itself advanced inside the loop GCC kept
         * it on the stack, a store-to-load round trip on every pair step */
        const int16_t *bq = bp + p0 * 2 * FX_NR;
        const int32_t *aq = ap + p0 * FX_MR;
        for (int64_t p = 0; p < len; p++) {
            const __m512i b0 = _mm512_load_si512((const void *)(bq + p * 2 * FX_NR));
            const __m512i b1 = _mm512_load_si512((const void *)(bq + p * 2 * FX_NR + 32));
            const int32_t *arow = aq + p * FX_MR; /* FX_FAST_ROW reads arow */
            FX_FAST_ROW(0, s00, s01);
            FX_FAST_ROW(1, s10, s11);
            FX_FAST_ROW(2, s20, s21);
            FX_FAST_ROW(3, s30, s31);
            FX_FAST_ROW(4, s40, s41);
            FX_FAST_ROW(5, s50, s51);
        }
        FX_FAST_FLUSH(0, s00, s01);
        FX_FAST_FLUSH(1, s10, s11);
        FX_FAST_FLUSH(2, s20, s21);
        FX_FAST_FLUSH(3, s30, s31);
        FX_FAST_FLUSH(4, s40, s41);
        FX_FAST_FLUSH(5, s50, s51);
    }

    /* T = 2^16 Hi + (uint32)(Lo - 2^16 Hi), exactly (gemm_i16.h); kp >= 1, so lo, hi are set;
     * mx: max |T| written, as in fx_store_tile */
    __m512i mx = _mm512_setzero_si512();
    for (int i = 0; i < m; i++) {
        int64_t *ci = c + i * ldc;
        for (int v = 0; v < 2 && 16 * v < n; v++) {
            const __m512i h = hi[i][v];
            const __m512i r = _mm512_sub_epi32(lo[i][v], _mm512_slli_epi32(h, 16));
            for (int half = 0; half < 2; half++) {
                const int j = 16 * v + 8 * half;
                if (j >= n) break;
                const __mmask8 k = n - j >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - j)) - 1);
                const __m256i h8 = half ? _mm512_extracti64x4_epi64(h, 1) : _mm512_castsi512_si256(h);
                const __m256i r8 = half ? _mm512_extracti64x4_epi64(r, 1) : _mm512_castsi512_si256(r);
                __m512i t = _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(h8), 16),
                                             _mm512_cvtepu32_epi64(r8));
                if (accumulate) t = _mm512_add_epi64(t, _mm512_maskz_loadu_epi64(k, ci + j));
                _mm512_mask_storeu_epi64(ci + j, k, t);
                if (amax) mx = _mm512_mask_max_epu64(mx, k, mx, _mm512_abs_epi64(t));
            }
        }
    }
    fx_amax_finish(mx, amax);
}

/* acc += the products of 4 unsigned bytes of au by 4 signed bytes of bs per int32 lane (the
 * wrap kernel's high bytes; inline asm for the reason given at fx_dot_pairs). */
static FX_ALWAYS_INLINE __m512i fx_dot_quads(__m512i acc, __m512i au, __m512i bs)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(au), "v"(bs));
    return acc;
}

/* Wrap kernel (gemm_i16.h, kernel 3): Lrv the plain sums mod 2^32 and Grv the high estimate,
 * folded to floor(S / 2^16) after every chunk, for row r and column vector v: 24 accumulators,
 * 2 B vectors and one broadcast in registers. The accumulators are named variables, not an
 * array: with an array inside the chunk and quad loops GCC 12 kept half of them on the stack
 * and copied the rest on every step (seen in the disassembly), as in the fast kernel. */
#define FX_WRAP_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define FX_WRAP_DECL(r)                                                                        \
    __m512i L##r##0 = _mm512_setzero_si512(), L##r##1 = L##r##0, G##r##0 = L##r##0,            \
            G##r##1 = L##r##0;
#define FX_WRAP_CORR(r)                                                                        \
    G##r##0 = _mm512_sub_epi32(G##r##0, c0);                                                   \
    G##r##1 = _mm512_sub_epi32(G##r##1, c1);
#define FX_WRAP_HIGH(r)                                                                        \
    {                                                                                          \
        const __m512i a_ = _mm512_set1_epi32(aq[r]);                                           \
        G##r##0 = fx_dot_quads(G##r##0, a_, b0);                                               \
        G##r##1 = fx_dot_quads(G##r##1, a_, b1);                                               \
    }
#define FX_WRAP_PAIR(r)                                                                        \
    {                                                                                          \
        const __m512i a_ = _mm512_set1_epi32(aq[r]);                                           \
        L##r##0 = fx_dot_pairs(L##r##0, a_, b0, 1);                                            \
        L##r##1 = fx_dot_pairs(L##r##1, a_, b1, 1);                                            \
    }
/* r = L - 2^16 G read as signed is S - 2^16 G exactly; G += floor(r / 2^16) */
#define FX_WRAP_FOLD1(L, G)                                                                    \
    G = _mm512_add_epi32(G, _mm512_srai_epi32(_mm512_sub_epi32(L, _mm512_slli_epi32(G, 16)), 16));
#define FX_WRAP_FOLD(r) FX_WRAP_FOLD1(L##r##0, G##r##0) FX_WRAP_FOLD1(L##r##1, G##r##1)
#define FX_WRAP_SPILL(r)                                                                       \
    _mm512_store_si512((void *)&gs[r][0], G##r##0);                                            \
    _mm512_store_si512((void *)&gs[r][16], G##r##1);                                           \
    _mm512_store_si512((void *)&ls[r][0], L##r##0);                                            \
    _mm512_store_si512((void *)&ls[r][16], L##r##1);

static void fx_wrap_avx512vnni(int64_t kp, const int32_t *ap, const int32_t *ahi,
                               const int16_t *bw, int64_t *c, int64_t ldc, int m, int n,
                               int accumulate, uint64_t *amax)
{
    _Static_assert(FX_MR == 6 && FX_NR == 32, "the wrap kernel is written out for 6 x 32");
    fx_prefetch_c(c, ldc, m, accumulate);
    FX_WRAP_ROWS(FX_WRAP_DECL)

    const int64_t nq = (kp + 1) / 2, nfull = kp / 2; /* quads; the last is half when kp is odd */
    for (int64_t q0 = 0; q0 < nq; q0 += FX_GEMM_I16_WRAP_CHUNK_QUADS) {
        const int64_t q1 = q0 + FX_GEMM_I16_WRAP_CHUNK_QUADS < nq ? q0 + FX_GEMM_I16_WRAP_CHUNK_QUADS : nq;
        /* chunk-local pointers indexed by q (see fx_fast_body) */
        const int16_t *bq = bw + q0 * 6 * FX_NR + (q0 / FX_GEMM_I16_WRAP_CHUNK_QUADS + 1) * 2 * FX_NR;
        {   /* the chunk's offset correction: G counted (ah + 128) bh */
            const __m512i c0 = _mm512_load_si512((const void *)(bq - 2 * FX_NR));
            const __m512i c1 = _mm512_load_si512((const void *)(bq - FX_NR));
            FX_WRAP_ROWS(FX_WRAP_CORR)
        }
        for (int64_t q = q0; q < q1; q++) {
            const int16_t *bb = bq + (q - q0) * 6 * FX_NR;
            __m512i b0 = _mm512_load_si512((const void *)bb);
            __m512i b1 = _mm512_load_si512((const void *)(bb + 32));
            const int32_t *aq = ahi + 2 * q * FX_MR; /* the even pair's entries */
            FX_WRAP_ROWS(FX_WRAP_HIGH)
            b0 = _mm512_load_si512((const void *)(bb + 64));
            b1 = _mm512_load_si512((const void *)(bb + 96));
            aq = ap + 2 * q * FX_MR;
            FX_WRAP_ROWS(FX_WRAP_PAIR)
            if (q == nfull) break; /* kp odd: the last quad has one pair (2q + 1 is not in A) */
            b0 = _mm512_load_si512((const void *)(bb + 128));
            b1 = _mm512_load_si512((const void *)(bb + 160));
            aq += FX_MR;
            FX_WRAP_ROWS(FX_WRAP_PAIR)
        }
        FX_WRAP_ROWS(FX_WRAP_FOLD)
    }

    /* S = 2^16 G + (L mod 2^16): spill, then widen only the valid part */
    int32_t gs[FX_MR][FX_NR] __attribute__((aligned(64)));
    int32_t ls[FX_MR][FX_NR] __attribute__((aligned(64)));
    FX_WRAP_ROWS(FX_WRAP_SPILL)
    fx_store_tile((const int32_t(*)[FX_NR])gs, (const int32_t(*)[FX_NR])ls, 1, c, ldc, m, n,
                  accumulate, amax);
}

static void fx_fast_avx512vnni(int64_t kp, int64_t chain, const int32_t *ap, const int16_t *bp,
                               int64_t *c, int64_t ldc, int m, int n, int accumulate, uint64_t *amax)
{
    fx_fast_body(kp, chain, ap, bp, c, ldc, m, n, accumulate, amax, 1);
}

static void fx_fast_avx512bw(int64_t kp, int64_t chain, const int32_t *ap, const int16_t *bp,
                             int64_t *c, int64_t ldc, int m, int n, int accumulate, uint64_t *amax)
{
    fx_fast_body(kp, chain, ap, bp, c, ldc, m, n, accumulate, amax, 0);
}

static void fx_ukr_avx512vnni(int64_t kp, const int32_t *ap, const int16_t *bp, int64_t *c,
                              int64_t ldc, int m, int n, int accumulate, uint64_t *amax)
{
    fx_ukr_body(kp, ap, bp, c, ldc, m, n, accumulate, amax, 1);
}

static void fx_ukr_avx512bw(int64_t kp, const int32_t *ap, const int16_t *bp, int64_t *c,
                            int64_t ldc, int m, int n, int accumulate, uint64_t *amax)
{
    fx_ukr_body(kp, ap, bp, c, ldc, m, n, accumulate, amax, 0);
}

static void fx_ukr16_avx512vnni(int64_t kp, const int32_t *ap, const int16_t *bp, int64_t *c,
                                int64_t ldc, int m, int n, int accumulate, uint64_t *amax)
{
    fx_ukr16_body(kp, ap, bp, c, ldc, m, n, accumulate, amax, 1);
}

static void fx_ukr16_avx512bw(int64_t kp, const int32_t *ap, const int16_t *bp, int64_t *c,
                              int64_t ldc, int m, int n, int accumulate, uint64_t *amax)
{
    fx_ukr16_body(kp, ap, bp, c, ldc, m, n, accumulate, amax, 0);
}

/* The 6 x 16 tile for a product of at most 16 columns (fx_gemm_i16_narrow), with the AVX2
 * level's 6 x 16 packing (its B layout is the same); any pre-split B must be in it. */
static int fx_take_narrow(const fx_op_call *c)
{
    const int64_t N = c->in[1].shape[1];
    return fx_gemm_i16_narrow(N) && (c->b_split == NULL || c->b_split_nr == FX_NR16);
}

static int fx_small_matmul(const fx_op_call *c)
{
    const int64_t M = c->in[0].shape[0], K = c->in[0].shape[1], N = c->in[1].shape[1];
    /* pre-packed panels and on-demand rows (a convolution's A) exist only for the
     * register-tile kernels */
    return c->a_panels == NULL && c->a_rows == NULL && c->b_split == NULL &&
           M * N * K < FX_FLEX_MATMUL_SIMD_MIN_MACS;
}

int fx_flex_matmul_avx512vnni(const fx_op_call *c)
{
    static const fx_gemm_i16_kernel k = {.mr = FX_MR, .nr = FX_NR, .ukr = fx_ukr_avx512vnni,
                                          .fast = fx_fast_avx512vnni,
                                          .pack = &fx_gemm_i16_pack_avx512_6x32,
                                          .wrap = fx_wrap_avx512vnni};
    static const fx_gemm_i16_kernel k16 = {.mr = FX_MR, .nr = FX_NR16, .ukr = fx_ukr16_avx512vnni,
                                            .pack = &fx_gemm_i16_pack_avx2_6x16};
    if (fx_small_matmul(c)) return fx_flex_matmul_scalar(c);
    return fx_gemm_i16(c, fx_take_narrow(c) ? &k16 : &k);
}

int fx_flex_matmul_avx512bw(const fx_op_call *c)
{
    static const fx_gemm_i16_kernel k = {.mr = FX_MR, .nr = FX_NR, .ukr = fx_ukr_avx512bw,
                                          .fast = fx_fast_avx512bw,
                                          .pack = &fx_gemm_i16_pack_avx512_6x32};
    static const fx_gemm_i16_kernel k16 = {.mr = FX_MR, .nr = FX_NR16, .ukr = fx_ukr16_avx512bw,
                                            .pack = &fx_gemm_i16_pack_avx2_6x16};
    if (fx_small_matmul(c)) return fx_flex_matmul_scalar(c);
    return fx_gemm_i16(c, fx_take_narrow(c) ? &k16 : &k);
}
