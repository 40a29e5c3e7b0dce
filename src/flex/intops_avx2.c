/* AVX2 integer kernels of the shared-exponent formats: the exact int16 GEMM micro-kernels with
 * vpmaddwd + vpaddd. Exactness: see gemm_i16.h (fast kernel: norm-bounded int32 chains folded
 * into 2^16 H + s, fold (b); split kernel: split B, int32 chains of at most 255 pair steps,
 * widened to int64 at the end of every K block). */
#include "gemm_i16.h"
#include "quant_r4_avx2.h"

#include <immintrin.h>
#include <string.h>

#define FX_MR 6  /* rows of the register tile */
#define FX_NR 16 /* columns: two halves of one ymm of 8 int32 lanes each */
#define FX_HALF 8

/* Lanes j < n of the two int64 quarters of an 8-column half row (all ones where valid). */
static inline void fx_row_masks(int n, __m256i *k0, __m256i *k1)
{
    const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
    *k0 = _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), lane);
    *k1 = _mm256_cmpgt_epi64(_mm256_set1_epi64x(n - 4), lane);
}

/* The range of the int64 values a kernel writes on a last K block: signed maximum and minimum
 * per lane (AVX2 has no 64-bit max, min or abs). Both start at 0, which cannot change the
 * result max |v| >= 0, so lanes outside the tile may be cleared to 0 instead of skipped. */
typedef struct fx_range64 {
    __m256i hi, lo;
} fx_range64;

static inline void fx_range64_add(fx_range64 *r, __m256i t)
{
    r->hi = _mm256_blendv_epi8(r->hi, t, _mm256_cmpgt_epi64(t, r->hi));
    r->lo = _mm256_blendv_epi8(r->lo, t, _mm256_cmpgt_epi64(r->lo, t));
}

/* *amax = max(*amax, max |v| over the range's lanes); |INT64_MIN| = 2^63 is representable. */
static inline void fx_range64_finish(const fx_range64 *r, uint64_t *amax)
{
    int64_t hi[4] __attribute__((aligned(32))), lo[4] __attribute__((aligned(32)));
    _mm256_store_si256((void *)hi, r->hi);
    _mm256_store_si256((void *)lo, r->lo);
    uint64_t m = *amax;
    for (int q = 0; q < 4; q++) {
        const uint64_t p = (uint64_t)hi[q], n = 0u - (uint64_t)lo[q]; /* hi >= 0 >= lo */
        m = p > m ? p : m;
        m = n > m ? n : m;
    }
    *amax = m;
}

/* C half row (accumulate ? C : 0) + t, for the int64 quarters t0 (columns 0..3) and t1 (4..7)
 * of its first n (1..8) columns; when track is set, r takes the values written. (r is always a
 * kernel's local range, never NULL: with a pointer that may be NULL GCC kept the range in
 * memory, a load and store per update.) */
static inline void fx_store_row(int64_t *ci, __m256i t0, __m256i t1, __m256i k0, __m256i k1,
                                int n, int accumulate, int track, fx_range64 *r)
{
    long long *d0 = (long long *)ci, *d1 = (long long *)(ci + 4);
    if (n == FX_HALF) { /* a whole half: plain moves (masked stores are microcoded on AMD) */
        if (accumulate) {
            t0 = _mm256_add_epi64(t0, _mm256_loadu_si256((const void *)d0));
            t1 = _mm256_add_epi64(t1, _mm256_loadu_si256((const void *)d1));
        }
        _mm256_storeu_si256((void *)d0, t0);
        _mm256_storeu_si256((void *)d1, t1);
        if (track) {
            fx_range64_add(r, t0);
            fx_range64_add(r, t1);
        }
        return;
    }
    if (accumulate) t0 = _mm256_add_epi64(t0, _mm256_maskload_epi64(d0, k0));
    _mm256_maskstore_epi64(d0, k0, t0);
    if (track) fx_range64_add(r, _mm256_and_si256(t0, k0)); /* columns beyond n count as 0 */
    if (n <= 4) return;
    if (accumulate) t1 = _mm256_add_epi64(t1, _mm256_maskload_epi64(d1, k1));
    _mm256_maskstore_epi64(d1, k1, t1);
    if (track) fx_range64_add(r, _mm256_and_si256(t1, k1));
}

/* Ask for the tile's C lines (m rows of n int64) before the K loop: the int64 stage is far
 * larger than the caches, so without this every row's store (and load, when accumulating)
 * missed and stalled at the end of the kernel; the chain loop is long enough to hide the
 * latency. (perf, 1024^3 flex16_5: 29 % of the fast kernel's samples sat on two C stores.) */
static inline void fx_prefetch_c(const int64_t *c, int64_t ldc, int m, int n)
{
    for (int i = 0; i < m; i++) {
        const char *row = (const char *)(c + i * ldc), *end = (const char *)(c + i * ldc + n);
        for (const char *p = row; p < end; p += 64) __builtin_prefetch(p, 1, 3);
        __builtin_prefetch(end - 1, 1, 3);
    }
}

/* Columns of half h of a tile with n valid columns (0: the half is empty). */
static inline int fx_half_cols(int n, int h)
{
    const int left = n - FX_HALF * h;
    return left <= 0 ? 0 : left < FX_HALF ? left : FX_HALF;
}

/* Split kernel, one half (8 columns) of the 16-column split panel at a time: 6 rows x {hi, lo}
 * = 12 ymm accumulators, 2 for B, 1 broadcast, 1 product, all 16 ymm. The split panel of pair
 * p holds the 16 high parts at bp + 64p and the 16 low parts at bp + 64p + 32 (gemm_i16.h), so
 * half h reads 16 int16 at + 16h of each. */
static void fx_ukr_avx2(int64_t kp, const int32_t *ap0, const int16_t *bp0, int64_t *c,
                        int64_t ldc, int m, int n, int accumulate, uint64_t *amax)
{
    fx_range64 range = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    fx_prefetch_c(c, ldc, m, n);
    for (int half = 0; half < 2; half++) {
        const int nh = fx_half_cols(n, half);
        if (nh == 0) break;
        const int32_t *ap = ap0;
        const int16_t *bp = bp0 + 2 * FX_HALF * half;
        __m256i h[FX_MR], l[FX_MR];
#pragma GCC unroll 6
        for (int i = 0; i < FX_MR; i++) h[i] = l[i] = _mm256_setzero_si256();

        /* four pairs per iteration: each pair's pointer updates and branch cost the front end,
         * as the fast kernel's loop below says (here plain C does: GCC 12 keeps these
         * accumulators in registers when it unrolls); uniform 1024^3 tensor_matmul products,
         * which take only this kernel, ran in 0.94-0.96 of the time of one pair an iteration */
#pragma GCC unroll 4
        for (int64_t p = 0; p < kp; p++) {
            const __m256i bh = _mm256_load_si256((const void *)bp);
            const __m256i bl = _mm256_load_si256((const void *)(bp + 2 * FX_NR));
            bp += 4 * FX_NR;
#pragma GCC unroll 6
            for (int i = 0; i < FX_MR; i++) {
                const __m256i ai = _mm256_set1_epi32(ap[i]);
                h[i] = _mm256_add_epi32(h[i], _mm256_madd_epi16(ai, bh));
                l[i] = _mm256_add_epi32(l[i], _mm256_madd_epi16(ai, bl));
            }
            ap += FX_MR;
        }

        /* through memory: indexing h[i] with the run-time i < m below would make GCC keep
         * the accumulators on the stack inside the loop above */
        int32_t hs[FX_MR][FX_HALF] __attribute__((aligned(32)));
        int32_t ls[FX_MR][FX_HALF] __attribute__((aligned(32)));
#pragma GCC unroll 6
        for (int i = 0; i < FX_MR; i++) {
            _mm256_store_si256((void *)hs[i], h[i]);
            _mm256_store_si256((void *)ls[i], l[i]);
        }
        __m256i k0, k1;
        fx_row_masks(nh, &k0, &k1);
        for (int i = 0; i < m; i++) {
            __m256i t[2];
            for (int q = 0; q < 2; q++) {
                const __m256i sh = _mm256_cvtepi32_epi64(_mm_load_si128((const void *)&hs[i][4 * q]));
                const __m256i sl = _mm256_cvtepi32_epi64(_mm_load_si128((const void *)&ls[i][4 * q]));
                t[q] = _mm256_add_epi64(_mm256_slli_epi64(sh, 8), sl); /* 256*Sh + Sl */
            }
            fx_store_row(c + i * ldc + FX_HALF * half, t[0], t[1], k0, k1, nh, accumulate,
                         amax != NULL, &range);
        }
    }
    if (amax) fx_range64_finish(&range, amax);
}

/* The fast kernel's K loop, in asm: s[2i + half] (row i, columns 8 half .. 8 half + 7) and
 * h[2i + half] receive the 6 x 16 tile's sums over kp pairs, T = 2^16 h + s exactly, with a fold
 * (b) of gemm_i16.h between chains of `chain` pairs (none when kp <= chain: then h = 0).
 * One step (pair p): 2 B vectors (16 columns), 6 broadcasts of the rows' pair words, 12
 * vpmaddwd and 12 vpaddd into the 12 accumulators ymm0..ymm11: all 16 ymm registers, and each
 * broadcast feeds two multiplies (a 6 x 8 tile spends one per multiply; the 16-column tile
 * measured ~20 % faster on a Zen 3, which issues two vpmaddwd per cycle).
 * A chain runs its len % 4 first steps one at a time, then the rest four steps per loop
 * iteration: the pointer increments and the branch of every step cost the Zen 3's front end
 * about a tenth of the loop's rate (the loop alone on L1-resident panels, a throwaway program,
 * 41 alternations: 3.19-3.22 vpmaddwd per ns one step per iteration, 3.55-3.64 four).
 * Why asm: compiled from intrinsics, GCC 12 kept the accumulators in an array it spilled and
 * reloaded around every chain end (about 100 cycles per fold for 50 operations), so a tile of
 * 40-pair chains (Gaussian data at the exact exponent) ran at 2.7-2.9 vpmaddwd per ns against
 * 4.1 with one chain; this loop keeps them in registers throughout and folds in 50 operations:
 * 4.4-4.5 per ns with 40-pair chains on a Zen 3 VM whose vpmaddwd limit measured 6.4 (one pair
 * per iteration then; the four-pair numbers above are from a slower VM of the same model). */
/* row i of step u of an iteration: its pair word at a + 4 (6u + i), the two B vectors of the
 * step in ymm12 and ymm13 (the displacements are assembler expressions) */
#define FX_ROW(u, i, r0, r1)                                                                       \
    "vpbroadcastd 24*" #u "+4*" #i "(%[a]), %%ymm14\n\t"                                         \
    "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n\t"                                                       \
    "vpaddd %%ymm15, %%ymm" #r0 ", %%ymm" #r0 "\n\t"                                               \
    "vpmaddwd %%ymm13, %%ymm14, %%ymm14\n\t"                                                       \
    "vpaddd %%ymm14, %%ymm" #r1 ", %%ymm" #r1 "\n\t"
#define FX_STEP(u)                                                                                 \
    "vmovdqa 64*" #u "(%[b]), %%ymm12\n\t"                                                         \
    "vmovdqa 64*" #u "+32(%[b]), %%ymm13\n\t" FX_ROW(u, 0, 0, 1) FX_ROW(u, 1, 2, 3)               \
        FX_ROW(u, 2, 4, 5) FX_ROW(u, 3, 6, 7) FX_ROW(u, 4, 8, 9) FX_ROW(u, 5, 10, 11)
/* h[r] += s[r] >> 16 (arithmetic); s[r] &= 0xFFFF (ymm15 holds the mask) */
#define FX_FOLD(r, o)                                                                              \
    "vpsrad $16, %%ymm" #r ", %%ymm14\n\t"                                                         \
    "vpaddd " #o "(%[h]), %%ymm14, %%ymm14\n\t"                                                    \
    "vmovdqa %%ymm14, " #o "(%[h])\n\t"                                                            \
    "vpand %%ymm15, %%ymm" #r ", %%ymm" #r "\n\t"
#define FX_STORE(r, o) "vmovdqa %%ymm" #r ", " #o "(%[s])\n\t"
#define FX_CLEAR_H(r, o) "vmovdqa %%ymm0, " #o "(%[h])\n\t" /* (ymm0 is zero then) */
#define FX_ZERO(r) "vpxor %%xmm" #r ", %%xmm" #r ", %%xmm" #r "\n\t"
#define FX_R12(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11)
#define FX_R12O(op)                                                                                \
    op(0, 0) op(1, 32) op(2, 64) op(3, 96) op(4, 128) op(5, 160) op(6, 192) op(7, 224) op(8, 256)  \
        op(9, 288) op(10, 320) op(11, 352)

_Static_assert(FX_MR == 6 && FX_NR == 16, "the asm loop is written for the 6 x 16 tile");

static void fx_fast_chains_avx2(int64_t kp, int64_t chain, const int32_t *ap, const int16_t *bp,
                                __m256i s[2 * FX_MR], __m256i h[2 * FX_MR])
{
    int64_t left = kp, len, rem;
    __asm__ volatile(FX_R12(FX_ZERO) FX_R12O(FX_CLEAR_H)
                     "jmp 2f\n"
                     "3:\n\t" /* a fold between two chains */
                     "vpcmpeqd %%ymm15, %%ymm15, %%ymm15\n\t"
                     "vpsrld $16, %%ymm15, %%ymm15\n\t" FX_R12O(FX_FOLD)
                     "2:\n\t" /* len = min(chain, left); left -= len */
                     "mov %[chain], %[len]\n\t"
                     "cmp %[left], %[len]\n\t"
                     "cmovg %[left], %[len]\n\t"
                     "sub %[len], %[left]\n\t"
                     "test %[len], %[len]\n\t" /* kp <= 0 (or chain <= 0): zero sums */
                     "jle 4f\n\t"
                     "mov %[len], %[rem]\n\t"
                     "and $3, %[rem]\n\t"
                     "jz 5f\n"
                     "6:\n\t" /* the chain's len % 4 first steps, one at a time */
                     FX_STEP(0)
                     "add $24, %[a]\n\t"
                     "add $64, %[b]\n\t"
                     "dec %[rem]\n\t"
                     "jnz 6b\n"
                     "5:\n\t"
                     "shr $2, %[len]\n\t"
                     "jz 7f\n"
                     "1:\n\t" /* four steps */
                     FX_STEP(0) FX_STEP(1) FX_STEP(2) FX_STEP(3)
                     "add $96, %[a]\n\t"
                     "add $256, %[b]\n\t"
                     "dec %[len]\n\t"
                     "jnz 1b\n"
                     "7:\n\t"
                     "test %[left], %[left]\n\t"
                     "jnz 3b\n"
                     "4:\n\t" FX_R12O(FX_STORE)
                     : [a] "+r"(ap), [b] "+r"(bp), [left] "+r"(left), [len] "=&r"(len), [rem] "=&r"(rem)
                     : [chain] "r"(chain), [h] "r"(h), [s] "r"(s)
                     : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
                       "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14",
                       "xmm15");
}

/* Four of a fast tile's sums T = 2^16 h + s (q 0: lanes 0-3 of sv and hv, 1: lanes 4-7) in
 * int64 lanes; h = 0 when one_chain */
static inline __m256i fx_fast_sums4(__m256i sv, __m256i hv, int q, int one_chain)
{
    const __m256i t =
        _mm256_cvtepi32_epi64(q ? _mm256_extracti128_si256(sv, 1) : _mm256_castsi256_si128(sv));
    if (one_chain) return t;
    const __m128i hq = q ? _mm256_extracti128_si256(hv, 1) : _mm256_castsi256_si128(hv);
    return _mm256_add_epi64(_mm256_slli_epi64(_mm256_cvtepi32_epi64(hq), 16), t);
}

/* Fast kernel: plain B, one vpmaddwd + vpaddd per pair, row and half. Between chains the 12
 * accumulators are folded into the h words (fold (b) of gemm_i16.h). A K block that is one
 * chain needs no fold: its sum is s. */
static void fx_fast_avx2(int64_t kp, int64_t chain, const int32_t *ap, const int16_t *bp,
                         int64_t *c, int64_t ldc, int m, int n, int accumulate, uint64_t *amax)
{
    __m256i s[2 * FX_MR], h[2 * FX_MR];
    fx_prefetch_c(c, ldc, m, n);
    fx_fast_chains_avx2(kp, chain, ap, bp, s, h);
    const int one_chain = kp <= chain; /* no fold ran: h = 0, every lane holds its exact sum */
    const int n0 = fx_half_cols(n, 0), n1 = fx_half_cols(n, 1);
    __m256i k00, k01, k10, k11;
    fx_row_masks(n0, &k00, &k01);
    fx_row_masks(n1, &k10, &k11);
    fx_range64 range = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    /* the values written are the int32 sums themselves (one chain, nothing accumulated): their
     * range is taken on the int32 vectors, 6 operations per row instead of 16 on the int64
     * quarters */
    const int range32 = amax && one_chain && !accumulate;
    /* T = 2^16 h + s (gemm_i16.h, fold (b)); with one chain T = s */
    for (int i = 0; i < m; i++)
        for (int half = 0; half < 2; half++) {
            const int nh = half ? n1 : n0;
            if (nh == 0) break;
            const __m256i hv = h[2 * i + half], sv = s[2 * i + half];
            __m256i t[2];
            for (int q = 0; q < 2; q++) t[q] = fx_fast_sums4(sv, hv, q, one_chain);
            fx_store_row(c + i * ldc + FX_HALF * half, t[0], t[1], half ? k10 : k00,
                         half ? k11 : k01, nh, accumulate, amax && !range32, &range);
        }
    if (range32) {
        /* lanes j >= n count as 0 (cleared by the column masks); rows i >= m are skipped */
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i c0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n0), lane);
        const __m256i c1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n1), lane);
        __m256i hi = _mm256_setzero_si256(), lo = hi;
        for (int i = 0; i < m; i++) {
            const __m256i s0 = _mm256_and_si256(s[2 * i], c0);
            const __m256i s1 = _mm256_and_si256(s[2 * i + 1], c1);
            hi = _mm256_max_epi32(hi, _mm256_max_epi32(s0, s1));
            lo = _mm256_min_epi32(lo, _mm256_min_epi32(s0, s1));
        }
        /* the tile's int32 maximum and minimum in every lane, widened for fx_range64_finish */
        hi = _mm256_max_epi32(hi, _mm256_shuffle_epi32(hi, 0x4E));
        lo = _mm256_min_epi32(lo, _mm256_shuffle_epi32(lo, 0x4E));
        hi = _mm256_max_epi32(hi, _mm256_shuffle_epi32(hi, 0xB1));
        lo = _mm256_min_epi32(lo, _mm256_shuffle_epi32(lo, 0xB1));
        range.hi = _mm256_cvtepi32_epi64(_mm_max_epi32(_mm256_castsi256_si128(hi),
                                                       _mm256_extracti128_si256(hi, 1)));
        range.lo = _mm256_cvtepi32_epi64(_mm_min_epi32(_mm256_castsi256_si128(lo),
                                                       _mm256_extracti128_si256(lo, 1)));
    }
    if (amax) fx_range64_finish(&range, amax);
}

/* Fast kernel rounding its tile (fx_gemm_i16_fast_round_ukr): the chains as fx_fast_avx2's,
 * then each row's 16 sums T = 2^16 h + s rounded in int32 lanes as quant_i64's fast route
 * rounds them (floor((T + 2^(sh-1) - 1 + b) / 2^sh), b bit sh of T) and stored as mantissas.
 * Shifts up to 16 round T itself (fx_round32_avx2_step), exact where |T| < 2^31, which every sum
 * that does not saturate at such a shift is: h + (s >> 16) in [-2^15, 2^15) says so per lane,
 * and a tile with a lane outside takes its maximum from the int64 sums (its values are not
 * kept). Shifts 17-46 round from h' = h + (s >> 16) and l = s & 0xFFFF:
 * (h' + 2^(t-1) - c) >> t, t = sh - 16, c = 1 where l = 0 and bit t of h' is 0 (the low half
 * moves the floor only when it contributes -1), and the exact maximum only where the tile's
 * bound on |T|, max(2^16 (max h' + 1) - 1, -2^16 min h'), passes *amax. */
static void fx_fast_round_avx2(int64_t kp, int64_t chain, const int32_t *ap, const int16_t *bp,
                               int16_t *dst, int64_t ldd, int m, int n, int shift,
                               uint64_t *amax, int64_t *nuf)
{
    __m256i s[2 * FX_MR], h[2 * FX_MR];
    fx_fast_chains_avx2(kp, chain, ap, bp, s, h);
    const int one_chain = kp <= chain; /* then h = 0 and s = T */
    const __m256i zero = _mm256_setzero_si256(), ones = _mm256_set1_epi32(-1);
    const __m256i lo16 = _mm256_set1_epi32(0xFFFF), top = _mm256_set1_epi32(1 << 15);
    const int r32 = shift <= 16, t = r32 ? 1 : shift - 16;
    fx_round32_avx2 k32 = fx_round32_avx2_setup(r32 ? shift : 1); /* shifts up to 16 */
    /* shifts 17-46: (h' + 2^(t-1) - c) >> t */
    const __m128i cnt = _mm_cvtsi32_si128(t);
    const __m256i half_t = _mm256_set1_epi32(1 << (t - 1)), bit_t = _mm256_set1_epi32(1 << t);
    __m256i uf = zero, wide = zero;
    __m256i hmax = _mm256_set1_epi32(INT32_MIN), hmin = _mm256_set1_epi32(INT32_MAX);
    for (int i = 0; i < m; i++) {
        __m256i q[2];
        for (int v = 0; v < 2; v++) {
            const __m256i sv = s[2 * i + v];
            const __m256i hh = one_chain ? _mm256_srai_epi32(sv, 16)
                                         : _mm256_add_epi32(h[2 * i + v],
                                                            _mm256_srai_epi32(sv, 16));
            if (r32) {
                __m256i T = sv;
                if (!one_chain) { /* hh + 2^15 outside [0, 2^16): |T| may pass 2^31 */
                    wide = _mm256_or_si256(wide,
                                           _mm256_srli_epi32(_mm256_add_epi32(hh, top), 16));
                    T = _mm256_add_epi32(_mm256_slli_epi32(h[2 * i + v], 16), sv);
                }
                q[v] = fx_round32_avx2_step(T, &k32);
                continue;
            }
            const __m256i l = _mm256_and_si256(sv, lo16);
            hmax = _mm256_max_epi32(hmax, hh);
            hmin = _mm256_min_epi32(hmin, hh);
            const __m256i c =
                _mm256_and_si256(_mm256_cmpeq_epi32(l, zero),
                                 _mm256_cmpeq_epi32(_mm256_and_si256(hh, bit_t), zero));
            q[v] = _mm256_sra_epi32(_mm256_add_epi32(_mm256_add_epi32(hh, half_t), c), cnt);
            /* underflow: a nonzero sum rounded to 0 (mask lanes are -1) */
            const __m256i nz =
                _mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_or_si256(hh, l), zero), ones);
            uf = _mm256_sub_epi32(uf, _mm256_and_si256(nz, _mm256_cmpeq_epi32(q[v], zero)));
        }
        /* 16 mantissas in column order (the pack interleaves 128-bit lanes) */
        const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8);
        int16_t *di = dst + i * ldd;
        if (n == FX_NR) {
            _mm256_storeu_si256((__m256i *)(void *)di, w);
        } else {
            int16_t row[FX_NR] __attribute__((aligned(32)));
            _mm256_store_si256((__m256i *)(void *)row, w);
            memcpy(di, row, (size_t)n * sizeof *di);
        }
    }
    /* the lanes beyond m rows and n columns hold zero sums (zero-packed A rows, B columns) */
    uint64_t tmax;
    int exact;
    if (r32) {
        const __m256i mx = k32.max_in;
        uf = k32.under;
        __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
        m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0x4E));
        m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0xB1));
        tmax = (uint32_t)_mm_cvtsi128_si32(m4);
        exact = !_mm256_testz_si256(wide, wide);
    } else {
        int32_t hxs[8], hns[8];
        _mm256_storeu_si256((__m256i *)(void *)hxs, hmax);
        _mm256_storeu_si256((__m256i *)(void *)hns, hmin);
        int64_t hx = hxs[0], hn = hns[0];
        for (int k = 1; k < 8; k++) {
            hx = hxs[k] > hx ? hxs[k] : hx;
            hn = hns[k] < hn ? hns[k] : hn;
        }
        const int64_t above = 65536 * (hx + 1) - 1, below = -65536 * hn;
        const uint64_t bound = (uint64_t)(above > below ? above : below);
        tmax = 0;
        exact = amax && bound > *amax;
    }
    if (exact) { /* the int64 sums' range */
        fx_range64 range = {zero, zero};
        for (int r = 0; r < 2 * m; r++)
            for (int q = 0; q < 2; q++) fx_range64_add(&range, fx_fast_sums4(s[r], h[r], q, 0));
        tmax = 0;
        fx_range64_finish(&range, &tmax);
    }
    if (amax && tmax > *amax) *amax = tmax;
    int32_t u[8];
    _mm256_storeu_si256((__m256i *)(void *)u, uf);
    *nuf += (int64_t)u[0] + u[1] + u[2] + u[3] + u[4] + u[5] + u[6] + u[7];
}

/* fx_gemm_i16_kernel.round: a column of tiles' sums (16 per row) rounded on the fast route
 * of quant_r4_avx2.h, eight per 128-bit store, for the shifts it takes (1 to 32), and one by one
 * by the portable rounding for the others (33 to 47: an exponent far above sums of at most 384
 * products, at which they round to 0 or nearly); the maximum is the kernels' (amax). */
static void fx_round_block_avx2(const int64_t *src, int64_t lds, int16_t *dst, int64_t ldd,
                                int rows, int cols, int shift, int64_t *nuf)
{
    const int fast = fx_r4_fast_ok(shift);
    fx_r4_fast f = fx_r4_fast_setup(fast ? shift : 1);
    int64_t uf = 0;
    for (int i = 0; i < rows; i++) {
        const int64_t *si = src + i * lds;
        int16_t *di = dst + i * ldd;
        int j = 0;
        for (; fast && j + 8 <= cols; j += 8) {
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)(const void *)(si + j));
            const __m256i v1 = _mm256_loadu_si256((const __m256i *)(const void *)(si + j + 4));
            _mm_storeu_si128((__m128i *)(void *)(di + j),
                             fx_pack8_i64_order(fx_narrow8(fx_requant4_fast(v0, &f),
                                                           fx_requant4_fast(v1, &f))));
        }
        for (; j < cols; j++) {
            const int64_t q = fx_rshift_rne(si[j], shift);
            uf += si[j] != 0 && q == 0;
            di[j] = (int16_t)(q > FX_MANT_MAX ? FX_MANT_MAX : q < -FX_MANT_MAX ? -FX_MANT_MAX : q);
        }
    }
    int64_t lanes[4];
    _mm256_storeu_si256((__m256i *)(void *)lanes, f.underflow);
    *nuf += uf + lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

/* Gates: the norm test on every product whose K block has at least 16 pairs. On AVX2 the
 * alternative is the split kernel (two vpmaddwd per pair), so with the SIMD packing the norms
 * pay even on the CNN's narrow products (N = 32, 64; M = 128 for the dense layers), unlike on
 * AVX-512 where the wrap kernel needs only 1.5. Measured on a Zen 3 EPYC (2 vCPUs) with
 * flexpoint-train flex16_5 CNN epochs on 6400 images, two configurations at once on the two
 * cores, four pairs with the cores swapped in turn, mean s/epoch: 12.0 against 12.9 with M >=
 * 256 and N >= 32, and 13.0 against 14.3 with gates of 512 rows, 256 columns and 64 pairs.
 * Below 16 pairs (conv1's 13-pair forward) the norms cost what the fast kernel saves:
 * bench_gemm_i16's conv1 forward 0.97-1.01x the split kernel's time, whole epochs 11.5 against
 * 11.6 s (within noise). */
static const fx_gemm_i16_kernel fx_k_avx2 = {.mr = FX_MR, .nr = FX_NR, .ukr = fx_ukr_avx2,
                                             .fast = fx_fast_avx2,
                                             .fast_round = fx_fast_round_avx2,
                                             .pack = &fx_gemm_i16_pack_avx2_6x16,
                                             .fast_min_m = 1, .fast_min_n = 1,
                                             .fast_min_kp = 16, .equal_k_blocks = 1,
                                             .round = fx_round_block_avx2};

int fx_flex_matmul_avx2(const fx_op_call *c)
{
    const int64_t M = c->in[0].shape[0], K = c->in[0].shape[1], N = c->in[1].shape[1];
    /* a rounding (out_i16) only on the register tiles */
    if (!c->a_panels && !c->a_rows && !c->out_i16 && M * N * K < FX_FLEX_MATMUL_SIMD_MIN_MACS)
        return fx_flex_matmul_scalar(c);
    return fx_gemm_i16(c, &fx_k_avx2);
}

/* One K block at a time (no k_group): products of K <= FX_GEMM_I16_KC round from the
 * column's buffer (fx_gemm_i16_rounds), whatever their size. */
int fx_flex_matmul_avx2_rounds(int64_t M, int64_t K, int64_t N)
{
    (void)M;
    (void)N;
    return fx_gemm_i16_rounds(&fx_k_avx2, K);
}
