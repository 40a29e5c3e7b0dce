/* AVX-512 integer kernels of the shared-exponent formats: the exact int16 GEMM micro-kernels.
 * Two variants share each body: vpdpwssd (AVX512_VNNI, installed only when the CPU has it) and
 * vpmaddwd + vpaddd (AVX-512BW). With VNNI the wrap kernel (vpdpwssd + vpdpbusd) replaces the
 * split kernel on every tile the fast kernel does not take. Exactness: see gemm_i16.h (fast
 * kernel: norm-bounded int32 chains folded into 2^16 h + s, fold (b); split kernel: split B,
 * int32 chains of at most 255 pair steps, widened to int64 at the end of every K block; wrap
 * kernel: sums mod 2^32 plus a high-byte estimate folded to floor(S / 2^16) per chunk). */
#include "gemm_i16.h"
#include "quant_q64_avx512.h"
#include "../core/lanes_avx512.h"

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
            s = fx_store_add_q8(ci + j, k, s, accumulate);
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

/* Pieces shared by the two fast K loops below. The fold's mask, 0xFFFF per lane, in zmm28: */
#define FX_ASM_MASK                                                                                \
    "vpternlogd $0xff, %%zmm28, %%zmm28, %%zmm28\n\t"                                             \
    "vpsrld $16, %%zmm28, %%zmm28\n\t"
/* the next chain: len = min(chain, left); left -= len; flags of len (len <= 0 when kp <= 0 or
 * chain <= 0: zero sums) */
#define FX_ASM_NEXT_CHAIN                                                                          \
    "mov %[chain], %[len]\n\t"                                                                    \
    "cmp %[left], %[len]\n\t"                                                                     \
    "cmovg %[left], %[len]\n\t"                                                                   \
    "sub %[len], %[left]\n\t"                                                                     \
    "test %[len], %[len]\n\t"
/* operands (ap, bp, left, len, chain, h, s by these names) and every register either loop
 * touches */
#define FX_ASM_CLOBBERS                                                                            \
    "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",      \
      "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18",     \
      "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28"
#define FX_ASM_OPERANDS                                                                            \
    : [a] "+r"(ap), [b] "+r"(bp), [left] "+r"(left), [len] "=&r"(len)                              \
    : [chain] "r"(chain), [h] "r"(h), [s] "r"(s)                                                   \
    : FX_ASM_CLOBBERS
/* the same with A's rows read in place: rows 0-2 from a, rows 3-5 from a3 = a + 3 rs */
#define FX_ASM_OPERANDS_ROWS                                                                       \
    : [a] "+r"(a), [a3] "+r"(a3), [b] "+r"(bp), [left] "+r"(left), [len] "=&r"(len)                \
    : [chain] "r"(chain), [h] "r"(h), [s] "r"(s), [rs] "r"(rs)                                     \
    : FX_ASM_CLOBBERS

/* The fast kernel's K loop, in asm: s[2i + v] (row i, columns 16 v .. 16 v + 15) and h[2i + v]
 * receive the 6 x 32 tile's sums over kp pairs, T = 2^16 h + s exactly, with a fold (b) of
 * gemm_i16.h between chains of `chain` pairs (none when kp <= chain: then h = 0). One step of
 * the loop: 2 B vectors (32 columns, pair p), 6 broadcasts of the rows' pair words and 12
 * multiply-adds into the accumulators zmm0..zmm11; the h words live in zmm16..zmm27 and the
 * fold's mask in zmm28, so a fold is 3 register operations per accumulator and nothing touches
 * memory until the K block ends.
 * Why asm: compiled from intrinsics (fold (a): Lo/Hi words per chain, 36 vectors that do not
 * fit the 32 registers), GCC 12 kept Lo/Hi on the stack and copied the accumulators and the
 * spilled words between stack slots around every chain end (about 60 moves per fold, seen in
 * the disassembly); training's chains are 8-24 pairs, so those copies were a large share of a
 * chain's 12 multiply-adds per pair. */
#define FX_ROW_VNNI(at, r0, r1)                                                                    \
    "vpbroadcastd " at ", %%zmm14\n\t"                                                       \
    "vpdpwssd %%zmm12, %%zmm14, %%zmm" #r0 "\n\t"                                                  \
    "vpdpwssd %%zmm13, %%zmm14, %%zmm" #r1 "\n\t"
#define FX_ROW_BW(at, r0, r1)                                                                      \
    "vpbroadcastd " at ", %%zmm14\n\t"                                                       \
    "vpmaddwd %%zmm12, %%zmm14, %%zmm15\n\t"                                                       \
    "vpaddd %%zmm15, %%zmm" #r0 ", %%zmm" #r0 "\n\t"                                               \
    "vpmaddwd %%zmm13, %%zmm14, %%zmm14\n\t"                                                       \
    "vpaddd %%zmm14, %%zmm" #r1 ", %%zmm" #r1 "\n\t"
/* the six rows' pair words of one step: packed (ap, 6 words a pair), or read in place (each
 * row's word at a + i rs, a3 + (i - 3) rs) */
#define FX_ROWS(ROW)                                                                               \
    ROW("(%[a])", 0, 1) ROW("4(%[a])", 2, 3) ROW("8(%[a])", 4, 5) ROW("12(%[a])", 6, 7)            \
        ROW("16(%[a])", 8, 9) ROW("20(%[a])", 10, 11)
#define FX_ROWS_AT(ROW)                                                                            \
    ROW("(%[a])", 0, 1) ROW("(%[a],%[rs],1)", 2, 3) ROW("(%[a],%[rs],2)", 4, 5)                    \
        ROW("(%[a3])", 6, 7) ROW("(%[a3],%[rs],1)", 8, 9) ROW("(%[a3],%[rs],2)", 10, 11)
/* h[r] (zmm r+16) += s[r] >> 16 (arithmetic); s[r] &= 0xFFFF (zmm28 holds the mask) */
#define FX_FOLD(r, hr)                                                                             \
    "vpsrad $16, %%zmm" #r ", %%zmm15\n\t"                                                         \
    "vpaddd %%zmm15, %%zmm" #hr ", %%zmm" #hr "\n\t"                                               \
    "vpandd %%zmm28, %%zmm" #r ", %%zmm" #r "\n\t"
#define FX_ZERO(r, hr)                                                                             \
    "vpxord %%zmm" #r ", %%zmm" #r ", %%zmm" #r "\n\t"                                             \
    "vpxord %%zmm" #hr ", %%zmm" #hr ", %%zmm" #hr "\n\t"
#define FX_STORE(r, hr, o)                                                                         \
    "vmovdqa64 %%zmm" #r ", " #o "(%[s])\n\t"                                                      \
    "vmovdqa64 %%zmm" #hr ", " #o "(%[h])\n\t"
#define FX_R12(op)                                                                                 \
    op(0, 16) op(1, 17) op(2, 18) op(3, 19) op(4, 20) op(5, 21) op(6, 22) op(7, 23) op(8, 24)      \
        op(9, 25) op(10, 26) op(11, 27)
#define FX_R12O(op)                                                                                \
    op(0, 16, 0) op(1, 17, 64) op(2, 18, 128) op(3, 19, 192) op(4, 20, 256) op(5, 21, 320)         \
        op(6, 22, 384) op(7, 23, 448) op(8, 24, 512) op(9, 25, 576) op(10, 26, 640)                \
            op(11, 27, 704)
/* the first four rows' accumulators only (the 4 x 32 tile: a micro-panel's last rows) */
#define FX_ROWS4(ROW)                                                                              \
    ROW("(%[a])", 0, 1) ROW("4(%[a])", 2, 3) ROW("8(%[a])", 4, 5) ROW("12(%[a])", 6, 7)
#define FX_R8(op) op(0, 16) op(1, 17) op(2, 18) op(3, 19) op(4, 20) op(5, 21) op(6, 22) op(7, 23)
#define FX_R8O(op)                                                                                 \
    op(0, 16, 0) op(1, 17, 64) op(2, 18, 128) op(3, 19, 192) op(4, 20, 256) op(5, 21, 320)         \
        op(6, 22, 384) op(7, 23, 448)

_Static_assert(FX_MR == 6 && FX_NR == 32, "the asm loop is written for the 6 x 32 tile");

/* the loop's text for one step's rows (STEP_ROWS: FX_ROWS or FX_ROWS_AT of a multiply-add row
 * macro, or FX_ROWS4 with R = FX_R8 and RO = FX_R8O) and the A pointers' advance per pair: the
 * same code for both instruction sets */
#define FX_FAST_CHAINS_TEXT(STEP_ROWS, ADVANCE_A)                                                  \
    FX_FAST_CHAINS_TEXT_R(STEP_ROWS, ADVANCE_A, FX_R12, FX_R12O)
#define FX_FAST_CHAINS_TEXT_R(STEP_ROWS, ADVANCE_A, R, RO)                                         \
    R(FX_ZERO)                                                                                     \
    FX_ASM_MASK "jmp 2f\n"                                                                        \
    "3:\n\t" /* a fold between two chains */                                                      \
    R(FX_FOLD)                                                                                     \
    "2:\n\t" FX_ASM_NEXT_CHAIN                                                                    \
    "jle 4f\n"                                                                                     \
    "1:\n\t"                                                                                       \
    "vmovdqa64 (%[b]), %%zmm12\n\t"                                                                \
    "vmovdqa64 64(%[b]), %%zmm13\n\t" STEP_ROWS ADVANCE_A                                          \
    "add $128, %[b]\n\t"                                                                           \
    "dec %[len]\n\t"                                                                               \
    "jnz 1b\n\t"                                                                                   \
    "test %[left], %[left]\n\t"                                                                    \
    "jnz 3b\n"                                                                                     \
    "4:\n\t" RO(FX_STORE)
#define FX_FAST_CHAINS(ROW)                                                                        \
    __asm__ volatile(FX_FAST_CHAINS_TEXT(FX_ROWS(ROW), "add $24, %[a]\n\t") FX_ASM_OPERANDS)
/* A's six rows read in place (row stride rs bytes): each advances one pair word a step */
#define FX_FAST_CHAINS_ROWS(ROW)                                                                   \
    __asm__ volatile(FX_FAST_CHAINS_TEXT(FX_ROWS_AT(ROW), "add $4, %[a]\n\tadd $4, %[a3]\n\t")   \
                         FX_ASM_OPERANDS_ROWS)

/* A packed micro-panel's chain function: LOOP (six rows or four) with ROW's instruction set */
#define FX_FAST_CHAINS_FN(NAME, LOOP, ROW)                                                         \
    static void NAME(int64_t kp, int64_t chain, const int32_t *ap, const int16_t *bp,             \
                     __m512i s[2 * FX_MR], __m512i h[2 * FX_MR])                                  \
    {                                                                                              \
        int64_t left = kp, len;                                                                    \
        LOOP(ROW);                                                                                 \
    }
FX_FAST_CHAINS_FN(fx_fast_chains_vnni, FX_FAST_CHAINS, FX_ROW_VNNI)
FX_FAST_CHAINS_FN(fx_fast_chains_bw, FX_FAST_CHAINS, FX_ROW_BW)

/* Test and benchmark switch (fx_gemm_i16_set_fast4): 0 runs partial tiles of four rows or fewer
 * on the six-row loop, as before the 4 x 32 one; the same sums. */
static _Atomic int g_fast4 = 1;

void fx_gemm_i16_set_fast4(int on) { g_fast4 = on != 0; }

/* The same for a micro-panel's last rows when they are four or fewer (M = 16: 6 + 6 + 4): the
 * four rows' accumulators only, s and h [0, 8) stored, a third fewer multiply-adds than the
 * six rows' tile, whose last two rows would multiply the panel's zero padding */
#define FX_FAST_CHAINS4(ROW)                                                                       \
    __asm__ volatile(FX_FAST_CHAINS_TEXT_R(FX_ROWS4(ROW), "add $24, %[a]\n\t", FX_R8, FX_R8O)     \
                         FX_ASM_OPERANDS)

FX_FAST_CHAINS_FN(fx_fast_chains4_vnni, FX_FAST_CHAINS4, FX_ROW_VNNI)
FX_FAST_CHAINS_FN(fx_fast_chains4_bw, FX_FAST_CHAINS4, FX_ROW_BW)

/* The same chains with A's six rows read in place: row i's pair p is the int32 word at
 * a + i lda + 2 p (lda int16 units between rows; the rows hold 2 kp values each). */
static void fx_fast_chains_rows_vnni(int64_t kp, int64_t chain, const int16_t *a, int64_t lda,
                                     const int16_t *bp, __m512i s[2 * FX_MR],
                                     __m512i h[2 * FX_MR])
{
    int64_t left = kp, len;
    const int64_t rs = 2 * lda;
    const int16_t *a3 = a + 3 * lda;
    FX_FAST_CHAINS_ROWS(FX_ROW_VNNI);
}

static void fx_fast_chains_rows_bw(int64_t kp, int64_t chain, const int16_t *a, int64_t lda,
                                   const int16_t *bp, __m512i s[2 * FX_MR], __m512i h[2 * FX_MR])
{
    int64_t left = kp, len;
    const int64_t rs = 2 * lda;
    const int16_t *a3 = a + 3 * lda;
    FX_FAST_CHAINS_ROWS(FX_ROW_BW);
}

/* The fast chains of one tile of m valid rows from a packed A micro-panel (arows NULL; four
 * rows or fewer take the 4 x 32 loop, whose sums are rows [0, 4) of s and h) or from six rows
 * read in place (arows, lda); vnni picks the instruction set. */
static FX_ALWAYS_INLINE void fx_fast_chains(int64_t kp, int64_t chain, const int32_t *ap,
                                            const int16_t *arows, int64_t lda, const int16_t *bp,
                                            int m, __m512i *s, __m512i *h, const int vnni)
{
    if (arows && vnni)
        fx_fast_chains_rows_vnni(kp, chain, arows, lda, bp, s, h);
    else if (arows)
        fx_fast_chains_rows_bw(kp, chain, arows, lda, bp, s, h);
    else if (m <= 4 && g_fast4)
        (vnni ? fx_fast_chains4_vnni : fx_fast_chains4_bw)(kp, chain, ap, bp, s, h);
    else if (vnni)
        fx_fast_chains_vnni(kp, chain, ap, bp, s, h);
    else
        fx_fast_chains_bw(kp, chain, ap, bp, s, h);
}

/* Eight of a fast tile's sums T = 2^16 h + s (half 0: lanes 0-7 of sv and hv, 1: lanes 8-15)
 * in int64 lanes; h = 0 when one_chain */
static FX_ALWAYS_INLINE __m512i fx_fast_sums8(__m512i sv, __m512i hv, int half, int one_chain)
{
    const __m512i t = _mm512_cvtepi32_epi64(half ? _mm512_extracti64x4_epi64(sv, 1)
                                                 : _mm512_castsi512_si256(sv));
    if (one_chain) return t;
    const __m256i h8 = half ? _mm512_extracti64x4_epi64(hv, 1) : _mm512_castsi512_si256(hv);
    return _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(h8), 16), t);
}

/* C rows of the fast kernels' tiles (accumulate ? C : 0) + T, T = 2^16 h + s in int64 (h = 0
 * when one_chain), for vecs vectors of 16 columns per row (s[vecs i + v], h likewise) and the
 * valid m x n part; mx (amax NULL: none) as in fx_store_tile. */
static FX_ALWAYS_INLINE void fx_fast_store(const __m512i *s, const __m512i *h, const int vecs,
                                           int one_chain, int64_t *c, int64_t ldc, int m, int n,
                                           int accumulate, uint64_t *amax)
{
    __m512i mx = _mm512_setzero_si512();
    for (int i = 0; i < m; i++) {
        int64_t *ci = c + i * ldc;
        for (int v = 0; v < vecs && 16 * v < n; v++) {
            const __m512i hv = h[vecs * i + v], sv = s[vecs * i + v];
            for (int half = 0; half < 2; half++) {
                const int j = 16 * v + 8 * half;
                if (j >= n) break;
                const __mmask8 k = n - j >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - j)) - 1);
                const __m512i t =
                    fx_store_add_q8(ci + j, k, fx_fast_sums8(sv, hv, half, one_chain), accumulate);
                if (amax) mx = _mm512_mask_max_epu64(mx, k, mx, _mm512_abs_epi64(t));
            }
        }
    }
    fx_amax_finish(mx, amax);
}

/* Fast kernel: plain B, one multiply-add per pair (gemm_i16.h, kernel 1, fold (b)). */
static FX_ALWAYS_INLINE void fx_fast_body(int64_t kp, int64_t chain, const int32_t *ap,
                                          const int16_t *arows, int64_t lda, const int16_t *bp,
                                          int64_t *c, int64_t ldc, int m, int n, int accumulate,
                                          uint64_t *amax, const int vnni)
{
    __m512i s[2 * FX_MR], h[2 * FX_MR];
    fx_prefetch_c(c, ldc, m, accumulate);
    fx_fast_chains(kp, chain, ap, arows, lda, bp, m, s, h, vnni);
    fx_fast_store(s, h, 2, kp <= chain, c, ldc, m, n, accumulate, amax);
}

/* The narrow tile's fast K loop (6 x 16, the 6 x 16 packing's plain B panel: one zmm of 16
 * columns per pair): as FX_FAST_CHAINS, with two sets of accumulators, zmm0..5 for even pair
 * steps and zmm6..11 for odd ones, so that 12 multiply-adds are in flight as in the wide tile
 * (6 chains of 4-cycle latency would leave Zen 5's two VNNI pipes a quarter idle). Each set
 * holds a partial sum over a subset of the chain's pairs, bounded like the whole chain (the
 * norm bound covers the sum of |products|), and the even set also carries the chain's starting
 * remainder, so both stay exact and so does their sum at the fold: s = even + odd, h += s >>
 * 16, even = s & 0xFFFF, odd = 0. h lives in zmm16..21. */
#define FX_ROW16_VNNI(o, r, q)                                                                     \
    "vpbroadcastd " #o "(%[a]), %%zmm14\n\t"                                                       \
    "vpdpwssd %%zmm" #q ", %%zmm14, %%zmm" #r "\n\t"
#define FX_ROW16_BW(o, r, q)                                                                       \
    "vpbroadcastd " #o "(%[a]), %%zmm14\n\t"                                                       \
    "vpmaddwd %%zmm" #q ", %%zmm14, %%zmm14\n\t"                                                   \
    "vpaddd %%zmm14, %%zmm" #r ", %%zmm" #r "\n\t"
/* one pair step into the even (registers 0..5; A at offsets 0..20) or the odd set (6..11;
 * A at 24..44, the next pair), B in zmm q */
#define FX_STEP16_EVEN(ROW, q)                                                                     \
    ROW(0, 0, q) ROW(4, 1, q) ROW(8, 2, q) ROW(12, 3, q) ROW(16, 4, q) ROW(20, 5, q)
#define FX_STEP16_ODD(ROW, q)                                                                      \
    ROW(24, 6, q) ROW(28, 7, q) ROW(32, 8, q) ROW(36, 9, q) ROW(40, 10, q) ROW(44, 11, q)
#define FX_FOLD16(r, ro, hr)                                                                       \
    "vpaddd %%zmm" #ro ", %%zmm" #r ", %%zmm" #r "\n\t"                                            \
    "vpxord %%zmm" #ro ", %%zmm" #ro ", %%zmm" #ro "\n\t"                                          \
    "vpsrad $16, %%zmm" #r ", %%zmm15\n\t"                                                         \
    "vpaddd %%zmm15, %%zmm" #hr ", %%zmm" #hr "\n\t"                                               \
    "vpandd %%zmm28, %%zmm" #r ", %%zmm" #r "\n\t"
#define FX_R6(op) op(0, 6, 16) op(1, 7, 17) op(2, 8, 18) op(3, 9, 19) op(4, 10, 20) op(5, 11, 21)
#define FX_ZERO16(r, ro, hr)                                                                       \
    "vpxord %%zmm" #r ", %%zmm" #r ", %%zmm" #r "\n\t"                                             \
    "vpxord %%zmm" #ro ", %%zmm" #ro ", %%zmm" #ro "\n\t"                                          \
    "vpxord %%zmm" #hr ", %%zmm" #hr ", %%zmm" #hr "\n\t"
/* at the end: even += odd; stored */
#define FX_STORE16(r, ro, hr)                                                                      \
    "vpaddd %%zmm" #ro ", %%zmm" #r ", %%zmm" #r "\n\t"                                            \
    "vmovdqa64 %%zmm" #r ", 64*" #r "(%[s])\n\t"                                                   \
    "vmovdqa64 %%zmm" #hr ", 64*" #r "(%[h])\n\t"

#define FX_FAST16_CHAINS(ROW)                                                                      \
    __asm__ volatile(FX_R6(FX_ZERO16)                                                              \
                     FX_ASM_MASK "jmp 2f\n"                                                       \
                     "3:\n\t" /* a fold between two chains */                                      \
                     FX_R6(FX_FOLD16)                                                              \
                     "2:\n\t" FX_ASM_NEXT_CHAIN                                                   \
                     "jle 4f\n\t"                                                                  \
                     "test $1, %[len]\n\t" /* an odd chain: its first pair alone */                \
                     "jz 5f\n\t"                                                                   \
                     "vmovdqa64 (%[b]), %%zmm12\n\t" FX_STEP16_EVEN(ROW, 12)                      \
                     "add $24, %[a]\n\t"                                                           \
                     "add $64, %[b]\n\t"                                                           \
                     "sub $1, %[len]\n\t"                                                          \
                     "jz 6f\n"                                                                     \
                     "5:\n\t"                                                                      \
                     "vmovdqa64 (%[b]), %%zmm12\n\t"                                               \
                     "vmovdqa64 64(%[b]), %%zmm13\n\t" FX_STEP16_EVEN(ROW, 12)                    \
                         FX_STEP16_ODD(ROW, 13)                                                 \
                     "add $48, %[a]\n\t"                                                           \
                     "add $128, %[b]\n\t"                                                          \
                     "sub $2, %[len]\n\t"                                                          \
                     "jnz 5b\n"                                                                    \
                     "6:\n\t"                                                                      \
                     "test %[left], %[left]\n\t"                                                   \
                     "jnz 3b\n"                                                                    \
                     "4:\n\t" FX_R6(FX_STORE16)                                                    \
                     FX_ASM_OPERANDS)

static void fx_fast16_chains_vnni(int64_t kp, int64_t chain, const int32_t *ap,
                                  const int16_t *bp, __m512i s[FX_MR], __m512i h[FX_MR])
{
    int64_t left = kp, len;
    FX_FAST16_CHAINS(FX_ROW16_VNNI);
}

static void fx_fast16_chains_bw(int64_t kp, int64_t chain, const int32_t *ap, const int16_t *bp,
                                __m512i s[FX_MR], __m512i h[FX_MR])
{
    int64_t left = kp, len;
    FX_FAST16_CHAINS(FX_ROW16_BW);
}

/* Fast kernel of the narrow tile (n <= 16). */
static FX_ALWAYS_INLINE void fx_fast16_body(int64_t kp, int64_t chain, const int32_t *ap,
                                            const int16_t *bp, int64_t *c, int64_t ldc, int m,
                                            int n, int accumulate, uint64_t *amax, const int vnni)
{
    __m512i s[FX_MR], h[FX_MR];
    fx_prefetch_cols(c, ldc, m, FX_NR16, accumulate);
    if (vnni)
        fx_fast16_chains_vnni(kp, chain, ap, bp, s, h);
    else
        fx_fast16_chains_bw(kp, chain, ap, bp, s, h);
    fx_fast_store(s, h, 1, kp <= chain, c, ldc, m, n, accumulate, amax);
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

static void fx_wrap_avx512vnni(int nb, const fx_gemm_i16_wrap_block *blk, int64_t *c,
                               int64_t ldc, int m, int n, int accumulate, uint64_t *amax)
{
    _Static_assert(FX_MR == 6 && FX_NR == 32, "the wrap kernel is written out for 6 x 32");
    fx_prefetch_c(c, ldc, m, accumulate);
    FX_WRAP_ROWS(FX_WRAP_DECL)

    for (int ib = 0; ib < nb; ib++) {
        const int64_t kp = blk[ib].kp;
        const int32_t *ap = blk[ib].ap, *ahi = blk[ib].ahi;
        const int16_t *bw = blk[ib].bw;
        /* quads; the last is half when kp is odd */
        const int64_t nq = (kp + 1) / 2, nfull = kp / 2;
        for (int64_t q0 = 0; q0 < nq; q0 += FX_GEMM_I16_WRAP_CHUNK_QUADS) {
            const int64_t q1 = q0 + FX_GEMM_I16_WRAP_CHUNK_QUADS < nq
                                   ? q0 + FX_GEMM_I16_WRAP_CHUNK_QUADS
                                   : nq;
            /* chunk-local pointers indexed by q: with the pointers advanced inside the loop
             * GCC kept them on the stack, a store-to-load round trip on every step */
            const int16_t *bq =
                bw + q0 * 6 * FX_NR + (q0 / FX_GEMM_I16_WRAP_CHUNK_QUADS + 1) * 2 * FX_NR;
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
    fx_fast_body(kp, chain, ap, NULL, 0, bp, c, ldc, m, n, accumulate, amax, 1);
}

static void fx_fast_avx512bw(int64_t kp, int64_t chain, const int32_t *ap, const int16_t *bp,
                             int64_t *c, int64_t ldc, int m, int n, int accumulate, uint64_t *amax)
{
    fx_fast_body(kp, chain, ap, NULL, 0, bp, c, ldc, m, n, accumulate, amax, 0);
}

/* fx_gemm_i16_fast_rows_ukr: the fast kernels with A's six rows read in place */
static void fx_fast_rows_avx512vnni(int64_t kp, int64_t chain, const int16_t *a, int64_t lda,
                                    const int16_t *bp, int64_t *c, int64_t ldc, int n,
                                    int accumulate, uint64_t *amax)
{
    fx_fast_body(kp, chain, NULL, a, lda, bp, c, ldc, FX_MR, n, accumulate, amax, 1);
}

static void fx_fast_rows_avx512bw(int64_t kp, int64_t chain, const int16_t *a, int64_t lda,
                                  const int16_t *bp, int64_t *c, int64_t ldc, int n,
                                  int accumulate, uint64_t *amax)
{
    fx_fast_body(kp, chain, NULL, a, lda, bp, c, ldc, FX_MR, n, accumulate, amax, 0);
}

/* The largest |T| of a fast tile's sums, T = 2^16 h + s, exactly in int64 (the rows and
 * columns beyond the valid part hold zero sums: their A rows and B columns are packed as 0). */
static uint64_t fx_fast_tile_max(const __m512i *s, const __m512i *h, int m)
{
    __m512i mx = _mm512_setzero_si512();
    for (int r = 0; r < 2 * m; r++)
        for (int half = 0; half < 2; half++)
            mx = _mm512_max_epu64(mx, _mm512_abs_epi64(fx_fast_sums8(s[r], h[r], half, 0)));
    return _mm512_reduce_max_epu64(mx);
}

/* A row of the tile's 32 rounded lanes (q0: columns 0-15, q1: 16-31) stored as mantissas,
 * the columns under cols (a whole row by a plain store: masked stores on the Zen 5 were what
 * fx_q64_fast_store16 says, and here made products of K = 64 up to a third slower) */
static FX_ALWAYS_INLINE void fx_store_row32(int16_t *dst, __mmask32 cols, __m512i q0, __m512i q1)
{
    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(q0)),
                                         _mm512_cvtepi32_epi16(q1), 1);
    fx_store_w32(dst, cols, w);
}

/* Fast kernel rounding its tile (fx_gemm_i16_fast_round_ukr): the chains as fx_fast_body's,
 * then each row's 32 sums rounded in int32 lanes and stored as one vector of mantissas.
 * Shifts up to 16 round T itself (fx_round32_lanes), exact where |T| < 2^31, which every
 * sum that does not saturate at such a shift is: h + (s >> 16) in [-2^15, 2^15) says so per
 * lane, and a tile with a lane outside takes its exact maximum from fx_fast_tile_max (its
 * values are not kept). Shifts 17-46 round T = 2^16 h' + l (fx_round16_lanes) with the
 * bound on the maximum that the convolution tiles use. */
static FX_ALWAYS_INLINE void fx_fast_round_body(int64_t kp, int64_t chain, const int32_t *ap,
                                                const int16_t *arows, int64_t lda,
                                                const int16_t *bp, int16_t *dst, int64_t ldd,
                                                int m, int n, int shift, uint64_t *amax,
                                                int64_t *nuf, const int vnni)
{
    __m512i s[2 * FX_MR], h[2 * FX_MR];
    fx_fast_chains(kp, chain, ap, arows, lda, bp, m, s, h, vnni);
    const int one_chain = kp <= chain; /* then h = 0 and s = T */
    const __mmask32 cols = n >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << n) - 1u);
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    uint64_t tmax;
    int64_t nuf_t = 0;
    if (shift <= 16) { /* (every sum that does not saturate there fits int32) */
        const fx_round32 k = fx_round32_setup(shift);
        const __m512i lim = _mm512_set1_epi32(1 << 15);
        __m512i mx = _mm512_setzero_si512();
        __mmask16 wide = 0; /* lanes whose |T| may pass 2^31 */
        for (int i = 0; i < m; i++) {
            __m512i q[2];
            for (int v = 0; v < 2; v++) {
                __m512i t = s[2 * i + v];
                if (!one_chain) {
                    const __m512i hh = _mm512_add_epi32(h[2 * i + v], _mm512_srai_epi32(t, 16));
                    /* hh + 2^15 outside [0, 2^16) */
                    wide |= _mm512_cmpge_epu32_mask(_mm512_add_epi32(hh, lim),
                                                    _mm512_add_epi32(lim, lim));
                    t = _mm512_add_epi32(_mm512_slli_epi32(h[2 * i + v], 16), t);
                }
                q[v] = fx_round32_lanes(&k, t, 0xFFFF, &mx, &nuf_t);
            }
            fx_store_row32(dst + i * ldd, cols, q[0], q[1]);
        }
        tmax = wide ? fx_fast_tile_max(s, h, m) : _mm512_reduce_max_epu32(mx);
    } else {
        const fx_round16 k = fx_round16_setup(shift);
        __m512i uf = _mm512_setzero_si512();
        __m512i hmax = _mm512_set1_epi32(INT32_MIN), hmin = _mm512_set1_epi32(INT32_MAX);
        for (int i = 0; i < m; i++) {
            __m512i q[2];
            for (int v = 0; v < 2; v++) {
                const __m512i sv = s[2 * i + v];
                const __m512i hh = one_chain ? _mm512_srai_epi32(sv, 16)
                                             : _mm512_add_epi32(h[2 * i + v],
                                                                _mm512_srai_epi32(sv, 16));
                const __m512i l = _mm512_and_si512(sv, lo16);
                const __m512i o = _mm512_or_si512(hh, l);
                hmax = _mm512_max_epi32(hmax, hh);
                hmin = _mm512_min_epi32(hmin, hh);
                q[v] = fx_round16_lanes(&k, hh, l, _mm512_test_epi32_mask(o, o), &uf);
            }
            fx_store_row32(dst + i * ldd, cols, q[0], q[1]);
        }
        /* |T| <= max(2^16 (hmax + 1) - 1, -2^16 hmin): the exact maximum only where that
         * passes *amax */
        const int64_t hx = _mm512_reduce_max_epi32(hmax), hn = _mm512_reduce_min_epi32(hmin);
        const int64_t above = 65536 * (hx + 1) - 1, below = -65536 * hn;
        const uint64_t bound = (uint64_t)(above > below ? above : below);
        tmax = amax && bound > *amax ? fx_fast_tile_max(s, h, m) : 0;
        nuf_t = _mm512_reduce_add_epi32(uf);
    }
    if (amax && tmax > *amax) *amax = tmax;
    *nuf += nuf_t;
}

_Static_assert(FX_GEMM_I16_ROUND_MAX_SHIFT == FX_R16_MAX_SHIFT,
              "the tiles' rounding takes the int32 route's shifts");

static void fx_fast_round_avx512vnni(int64_t kp, int64_t chain, const int32_t *ap,
                                     const int16_t *bp, int16_t *dst, int64_t ldd, int m, int n,
                                     int shift, uint64_t *amax, int64_t *nuf)
{
    fx_fast_round_body(kp, chain, ap, NULL, 0, bp, dst, ldd, m, n, shift, amax, nuf, 1);
}

static void fx_fast_round_avx512bw(int64_t kp, int64_t chain, const int32_t *ap,
                                   const int16_t *bp, int16_t *dst, int64_t ldd, int m, int n,
                                   int shift, uint64_t *amax, int64_t *nuf)
{
    fx_fast_round_body(kp, chain, ap, NULL, 0, bp, dst, ldd, m, n, shift, amax, nuf, 0);
}

/* fx_gemm_i16_fast_round_rows_ukr: the rounding fast kernels with A's rows read in place */
static void fx_fast_round_rows_avx512vnni(int64_t kp, int64_t chain, const int16_t *a,
                                          int64_t lda, const int16_t *bp, int16_t *dst,
                                          int64_t ldd, int n, int shift, uint64_t *amax,
                                          int64_t *nuf)
{
    fx_fast_round_body(kp, chain, NULL, a, lda, bp, dst, ldd, FX_MR, n, shift, amax, nuf, 1);
}

static void fx_fast_round_rows_avx512bw(int64_t kp, int64_t chain, const int16_t *a,
                                        int64_t lda, const int16_t *bp, int16_t *dst,
                                        int64_t ldd, int n, int shift, uint64_t *amax,
                                        int64_t *nuf)
{
    fx_fast_round_body(kp, chain, NULL, a, lda, bp, dst, ldd, FX_MR, n, shift, amax, nuf, 0);
}

static void fx_fast16_avx512vnni(int64_t kp, int64_t chain, const int32_t *ap,
                                 const int16_t *bp, int64_t *c, int64_t ldc, int m, int n,
                                 int accumulate, uint64_t *amax)
{
    fx_fast16_body(kp, chain, ap, bp, c, ldc, m, n, accumulate, amax, 1);
}

static void fx_fast16_avx512bw(int64_t kp, int64_t chain, const int32_t *ap, const int16_t *bp,
                               int64_t *c, int64_t ldc, int m, int n, int accumulate,
                               uint64_t *amax)
{
    fx_fast16_body(kp, chain, ap, bp, c, ldc, m, n, accumulate, amax, 0);
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

/* fx_gemm_i16_kernel.round: a column of tiles' sums (at most 32 per row) rounded on
 * quant_i64's fast route, 16 per store; the maximum is the kernels' (amax), so the one the
 * route keeps is dropped. */
static void fx_round_block_avx512(const int64_t *src, int64_t lds, int16_t *dst, int64_t ldd,
                                  int rows, int cols, int shift, int64_t *nuf)
{
    const fx_q64_fast f = fx_q64_fast_setup(shift);
    __m512i max_in = _mm512_setzero_si512();
    int64_t uf = 0;
    for (int i = 0; i < rows; i++) {
        const int64_t *si = src + i * lds;
        int16_t *di = dst + i * ldd;
        int j = 0;
        for (; j + 16 <= cols; j += 16)
            fx_q64_fast_store16(&f, _mm512_loadu_si512((const void *)(si + j)),
                                _mm512_loadu_si512((const void *)(si + j + 8)), di + j, 0xFFFF,
                                &max_in, &uf);
        if (j < cols) { /* the ragged edge: masked lanes load as 0 */
            const __mmask16 m = (__mmask16)((1u << (cols - j)) - 1u);
            fx_q64_fast_store16(&f, _mm512_maskz_loadu_epi64((__mmask8)m, si + j),
                                _mm512_maskz_loadu_epi64((__mmask8)(m >> 8), si + j + 8),
                                di + j, m, &max_in, &uf);
        }
    }
    *nuf += uf;
}

static int fx_small_matmul(const fx_op_call *c)
{
    /* pre-packed panels and on-demand rows (a convolution's A) exist only for the
     * register-tile kernels, and so does a rounding (out_i16) */
    return c->a_panels == NULL && c->a_rows == NULL && c->out_i16 == NULL &&
           c->in[0].shape[0] * c->in[0].shape[1] * c->in[1].shape[1] <
               FX_FLEX_MATMUL_SIMD_MIN_MACS;
}

/* K blocks in groups (gemm_i16.c): measured on the Zen 5; the avx512bw kernels, which spend
 * two instructions per pair, keep one block at a time, as the AVX2 level, whose code ran 1-4 %
 * slower in groups there (gemm_i16.h) */
static const fx_gemm_i16_kernel fx_k_vnni = {.mr = FX_MR, .nr = FX_NR, .ukr = fx_ukr_avx512vnni,
                                             .fast = fx_fast_avx512vnni,
                                             .fast_round = fx_fast_round_avx512vnni,
                                             .fast_rows = fx_fast_rows_avx512vnni,
                                             .fast_round_rows = fx_fast_round_rows_avx512vnni,
                                             .pack = &fx_gemm_i16_pack_avx512_6x32,
                                             .wrap = fx_wrap_avx512vnni,
                                             .k_group = FX_GEMM_I16_KG,
                                             .round = fx_round_block_avx512};
static const fx_gemm_i16_kernel fx_k16_vnni = {.mr = FX_MR, .nr = FX_NR16,
                                               .ukr = fx_ukr16_avx512vnni,
                                               .fast = fx_fast16_avx512vnni,
                                               .pack = &fx_gemm_i16_pack_avx2_6x16,
                                               .k_group = FX_GEMM_I16_KG,
                                               .round = fx_round_block_avx512};
static const fx_gemm_i16_kernel fx_k_bw = {.mr = FX_MR, .nr = FX_NR, .ukr = fx_ukr_avx512bw,
                                           .fast = fx_fast_avx512bw,
                                           .fast_round = fx_fast_round_avx512bw,
                                           .fast_rows = fx_fast_rows_avx512bw,
                                           .fast_round_rows = fx_fast_round_rows_avx512bw,
                                           .pack = &fx_gemm_i16_pack_avx512_6x32,
                                           .round = fx_round_block_avx512};
static const fx_gemm_i16_kernel fx_k16_bw = {.mr = FX_MR, .nr = FX_NR16,
                                             .ukr = fx_ukr16_avx512bw,
                                             .fast = fx_fast16_avx512bw,
                                             .pack = &fx_gemm_i16_pack_avx2_6x16,
                                             .round = fx_round_block_avx512};

/* The kernel a product takes on this level: for at most 16 columns (fx_gemm_i16_narrow) the
 * 6 x 16 tile, with the AVX2 level's 6 x 16 packing (its B layout is the same). */
static const fx_gemm_i16_kernel *fx_kernel_for(int64_t N, int vnni)
{
    if (fx_gemm_i16_narrow(N)) return vnni ? &fx_k16_vnni : &fx_k16_bw;
    return vnni ? &fx_k_vnni : &fx_k_bw;
}

int fx_flex_matmul_avx512vnni(const fx_op_call *c)
{
    if (fx_small_matmul(c)) return fx_flex_matmul_scalar(c);
    return fx_gemm_i16(c, fx_kernel_for(c->in[1].shape[1], 1));
}

int fx_flex_matmul_avx512bw(const fx_op_call *c)
{
    if (fx_small_matmul(c)) return fx_flex_matmul_scalar(c);
    return fx_gemm_i16(c, fx_kernel_for(c->in[1].shape[1], 0));
}

/* A rounding goes to the register tiles whatever the size (fx_small_matmul) */
int fx_flex_matmul_avx512vnni_rounds(int64_t M, int64_t K, int64_t N)
{
    (void)M;
    return fx_gemm_i16_rounds(fx_kernel_for(N, 1), K);
}

int fx_flex_matmul_avx512bw_rounds(int64_t M, int64_t K, int64_t N)
{
    (void)M;
    return fx_gemm_i16_rounds(fx_kernel_for(N, 0), K);
}
