/* The pieces of the exact int16 direct convolutions on AVX2 (conv_i16_fwd_avx2.c,
 * conv_i16_wgrad_avx2.c): the pair step and the fold of one register-tile row in asm, and the
 * store of a row's exact sums. Include only from files compiled with the AVX2 flags. */
#ifndef FX_FLEX_CONV_I16_AVX2_H
#define FX_FLEX_CONV_I16_AVX2_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

/* A 32-bit word at any byte address, as an asm memory operand (two int16 of the padded input
 * for the weight gradient) */
typedef int32_t fx_i16_word_any __attribute__((aligned(1), may_alias));

/* acc0 += pairs(*p broadcast) . w0 and acc1 likewise with w1, *p being the 32-bit word at p.
 * Why asm: from intrinsics, GCC 12 computed a whole segment's products first and spilled them
 * (200 stack accesses in the 6-pixel tile); as one opaque step per pixel, the 12 accumulators
 * and both weight vectors stay in registers and the broadcast and the product take the two
 * registers left (ymm14, ymm15). The word is a memory operand, so GCC forms its address (a
 * constant offset where the pixel stride is known) and knows the asm reads it. */
#define FX_MADD_ROW(acc0, acc1, w0, w1, p)                                                         \
    __asm__ volatile("vpbroadcastd %[xv], %%ymm15\n\t"                                             \
                     "vpmaddwd %[b0], %%ymm15, %%ymm14\n\t"                                        \
                     "vpaddd %%ymm14, %[a0], %[a0]\n\t"                                            \
                     "vpmaddwd %[b1], %%ymm15, %%ymm15\n\t"                                        \
                     "vpaddd %%ymm15, %[a1], %[a1]"                                                 \
                     : [a0] "+x"(acc0), [a1] "+x"(acc1)                                             \
                     : [b0] "x"(w0), [b1] "x"(w1),                                                  \
                       [xv] "m"(*(const fx_i16_word_any *)(const void *)(p))                        \
                     : "xmm14", "xmm15")

/* The fold of one pixel's two accumulators (conv_i16_direct.h): hi[0..15] += acc >> 16
 * (arithmetic), acc &= 0xFFFF; in asm for the same reason, so that the accumulators never
 * leave their registers between segments. */
#define FX_FOLD_ROW(acc0, acc1, h)                                                                 \
    __asm__ volatile("vpcmpeqd %%ymm15, %%ymm15, %%ymm15\n\t"                                      \
                     "vpsrld $16, %%ymm15, %%ymm15\n\t"                                            \
                     "vpsrad $16, %[a0], %%ymm14\n\t"                                              \
                     "vpaddd (%[hp]), %%ymm14, %%ymm14\n\t"                                        \
                     "vmovdqa %%ymm14, (%[hp])\n\t"                                                \
                     "vpand %%ymm15, %[a0], %[a0]\n\t"                                             \
                     "vpsrad $16, %[a1], %%ymm14\n\t"                                              \
                     "vpaddd 32(%[hp]), %%ymm14, %%ymm14\n\t"                                      \
                     "vmovdqa %%ymm14, 32(%[hp])\n\t"                                              \
                     "vpand %%ymm15, %[a1], %[a1]"                                                  \
                     : [a0] "+x"(acc0), [a1] "+x"(acc1)                                             \
                     : [hp] "r"(h)                                                                  \
                     : "xmm14", "xmm15", "memory")

/* The fold schedules' greedy scans (conv_i16_fwd_avx2.c, conv_i16_wgrad_avx2.c), four at a
 * time in the 64-bit lanes of one vector. One step, b the four scans' next bounds (each below
 * 2^63): *run, a scan's chain so far (0 before its first step), becomes b where the chain ends
 * before this step, else grows by b; *over marks the bounds beyond lim alone (folded per
 * pair; 0 before the first step). Such a bound needs no case of its own: it ends the chain
 * before it, and the one after it starts afresh. Returns the code of the step before: bit j
 * where lane j's chain ended there, bit 4 + j where that step was folded per pair (bit j is
 * then set too, so the two bits sum to its fold byte). */
static inline uint8_t fx_i16_lanes_cut(__m256i b, __m256i lim, __m256i *run, __m256i *over)
{
    const __m256i sum = _mm256_add_epi64(*run, b);
    const __m256i cut = _mm256_cmpgt_epi64(sum, lim);
    const int code = _mm256_movemask_pd(_mm256_castsi256_pd(cut)) |
                     _mm256_movemask_pd(_mm256_castsi256_pd(*over)) << 4;
    *run = _mm256_blendv_epi8(sum, b, cut);
    *over = _mm256_cmpgt_epi64(b, lim);
    return (uint8_t)code;
}

/* Lane j's fold bytes of n steps from their codes: f[i] = bit j + bit 4 + j of code[i], 32 a
 * vector step */
static inline void fx_i16_lane_folds(const uint8_t *code, int64_t n, int j, uint8_t *f)
{
    const __m256i one = _mm256_set1_epi8(1);
    const __m128i sc = _mm_cvtsi32_si128(j), sp = _mm_cvtsi32_si128(4 + j);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(code + i));
        const __m256i c = _mm256_and_si256(_mm256_srl_epi16(v, sc), one);
        const __m256i p = _mm256_and_si256(_mm256_srl_epi16(v, sp), one);
        _mm256_storeu_si256((__m256i *)(void *)(f + i), _mm256_add_epi8(c, p));
    }
    for (; i < n; i++) f[i] = (uint8_t)(((code[i] >> j) & 1) + ((code[i] >> (4 + j)) & 1));
}

/* |v| for int64 lanes (two's complement; AVX2 has no vpabsq) and the lane-wise unsigned max
 * of values below 2^63 (a signed compare orders them) */
static inline __m256i fx_abs_epi64_avx2(__m256i v)
{
    const __m256i sgn = _mm256_cmpgt_epi64(_mm256_setzero_si256(), v);
    return _mm256_sub_epi64(_mm256_xor_si256(v, sgn), sgn);
}
static inline __m256i fx_max_epi64_avx2(__m256i a, __m256i b)
{
    return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(b, a));
}

/* A register tile's accumulators, two per row for rows 0-5, as named variables: GCC kept an
 * array of them in memory between a chain's segments (a load and a store of each per segment).
 * FX_I16_AVX2_ROWS(X) expands X(row, acc0, acc1) for each row; a tile of MR rows guards its
 * uses with MR > row, and the unused ones vanish. */
#define FX_I16_AVX2_TILE_ACCS                                                                      \
    __m256i c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;                            \
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_si256()
#define FX_I16_AVX2_ROWS(X)                                                                        \
    X(0, c00, c01) X(1, c10, c11) X(2, c20, c21) X(3, c30, c31) X(4, c40, c41) X(5, c50, c51)
/* the fold of the tile's first MR rows, row r's hi words at hi[r][0] (16 int32) */
#define FX_I16_AVX2_FOLD_ONE(r, a0, a1)                                                            \
    if (MR_ > r) FX_FOLD_ROW(a0, a1, hi_[r][0]);
#define FX_I16_AVX2_FOLD_ALL(MR, hi)                                                               \
    do {                                                                                           \
        const int MR_ = (MR);                                                                      \
        int32_t(*hi_)[2][8] = (hi);                                                                \
        FX_I16_AVX2_ROWS(FX_I16_AVX2_FOLD_ONE)                                                     \
    } while (0)

/* Channels 4k .. 4k + 3 of one tile row's sums 2^16 hi + acc (hi: 16 int32, 32-byte aligned;
 * acc0 its channels 0-7, acc1 8-15) as int64 */
static inline __m256i fx_i16_row_sum4_avx2(__m256i acc0, __m256i acc1, const int32_t *hi, int k)
{
    const __m256i a = k < 2 ? acc0 : acc1;
    const __m128i a32 = k & 1 ? _mm256_extracti128_si256(a, 1) : _mm256_castsi256_si128(a);
    const __m128i h32 = _mm_load_si128((const __m128i *)(hi + 4 * k));
    return _mm256_add_epi64(_mm256_slli_epi64(_mm256_cvtepi32_epi64(h32), 16),
                            _mm256_cvtepi32_epi64(a32));
}

/* The whole row as four vectors of int64: s[0] channels 0-3, s[1] 4-7, s[2] 8-11, s[3] 12-15 */
static inline void fx_i16_row_sums_avx2(__m256i acc0, __m256i acc1, const int32_t *hi,
                                        __m256i s[4])
{
    for (int k = 0; k < 4; k++) s[k] = fx_i16_row_sum4_avx2(acc0, acc1, hi, k);
}

/* One tile row's sums 2^16 hi + acc (hi: 16 int32, acc0 its channels 0-7, acc1 8-15) as int64:
 * the first ncols written to out, or added to what is there (add); where mx is not NULL, *mx
 * raised to their |values| lane by lane (lanes past ncols hold sums of zero weights: 0). Each
 * vector goes from its register to out, a partial one by a masked store: wherever the sums
 * passed through an array on the stack, GCC copied them out with a call to memmove (a whole
 * row staged: 1.3 % of ResNet-20's stage-1 forward pass; the four stores of a whole row
 * merged into one 128-byte memmove where mx was NULL: 1.3-2.6 % of an AVX2 CNN epoch in
 * flex16_5 and dfp16, whose conv2 keeps its int64 sums). */
static inline void fx_i16_store_row_avx2(__m256i acc0, __m256i acc1, const int32_t *hi,
                                         int64_t *out, int ncols, int add, __m256i *mx)
{
    for (int k = 0; k < 4; k++) {
        const __m256i s = fx_i16_row_sum4_avx2(acc0, acc1, hi, k);
        if (mx) *mx = fx_max_epi64_avx2(*mx, fx_abs_epi64_avx2(s));
        const int left = ncols - 4 * k;
        long long *p = (long long *)(out + 4 * k);
        if (left >= 4) {
            const __m256i o = add ? _mm256_add_epi64(_mm256_loadu_si256((const __m256i *)p), s) : s;
            _mm256_storeu_si256((__m256i *)p, o);
        } else if (left > 0) {
            const __m256i m =
                _mm256_cmpgt_epi64(_mm256_set1_epi64x(left), _mm256_setr_epi64x(0, 1, 2, 3));
            const __m256i o = add ? _mm256_add_epi64(_mm256_maskload_epi64(p, m), s) : s;
            _mm256_maskstore_epi64(p, m, o);
        }
    }
}

/* the largest of four uint64 lanes below 2^63 */
static inline uint64_t fx_i16_hmax_epu64_avx2(__m256i mx)
{
    int64_t m[4];
    _mm256_storeu_si256((__m256i *)m, mx);
    uint64_t best = 0;
    for (int q = 0; q < 4; q++) best = (uint64_t)m[q] > best ? (uint64_t)m[q] : best;
    return best;
}

#endif
