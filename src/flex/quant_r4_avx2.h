/* The AVX2 int64 -> int16 rounding's fast route (quant_avx2.c's quant_i64 and quant_i64_t, and
 * the direct integer forward convolution's epilogue, conv_i16_fwd_avx2.c, which round the same
 * sums the same way): right shifts 1 <= s <= 32, nearest-even, on sums that do not saturate.
 * Include only from files compiled with the AVX2 flags. */
#ifndef FX_FLEX_QUANT_R4_AVX2_H
#define FX_FLEX_QUANT_R4_AVX2_H

#include "flex_kernels.h"

#include <immintrin.h>
#include <stdint.h>

/* |v| of int64 lanes given their sign masks (AVX2 has no vpabsq) */
static inline __m256i fx_abs_epi64(__m256i v, __m256i sgn)
{
    return _mm256_sub_epi64(_mm256_xor_si256(v, sgn), sgn);
}

/* 8 int32 lanes to 8 int16, saturating */
static inline __m128i fx_pack8_epi32(__m256i m)
{
    return _mm_packs_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
}

/* v / 2^s rounded to nearest even in int32 lanes, 1 <= s <= 31 (cnt = s, rmask = 2^s - 1,
 * half = 2^(s-1)): the floor q by the arithmetic shift, then up by one where the remainder
 * exceeds half - (q & 1), i.e. is above half, or equal to it with q odd. Six operations
 * (comparing the remainder with half and with half again for the tie took nine); nothing
 * can overflow: half - 1 >= 0 and the remainder is below 2^31. */
static inline __m256i fx_round32_ne_avx2(__m256i v, __m128i cnt, __m256i rmask, __m256i half)
{
    const __m256i q = _mm256_sra_epi32(v, cnt);
    const __m256i rem = _mm256_and_si256(v, rmask); /* v - 2^s q, in [0, 2^s) */
    const __m256i bar = _mm256_sub_epi32(half, _mm256_and_si256(q, _mm256_set1_epi32(1)));
    return _mm256_sub_epi32(q, _mm256_cmpgt_epi32(rem, bar)); /* -1 where q rounds up */
}

/* The right shifts 1 <= s <= 32 (every training write's) on sums that do not saturate, as in
 * the AVX-512 file (fx_q64_fast_round), in half the operations of fx_requant4:
 * - the rounding is floor((v + 2^(s-1) - 1 + b) / 2^s), b the lowest bit of v >> s, which the
 *   logical shift gives as well as the arithmetic one; so does the final shift, in the low 32
 *   bits that are kept (the two differ from bit 64 - s >= 32 up), for any |v| <= T =
 *   32767 2^s + 2^(s-1) - 1 (then v + 2^(s-1) cannot overflow);
 * - a lane underflows iff 0 < |v| <= 2^(s-1); the largest |q| is the largest |v| rounded;
 * - whether some |v| exceeds T (AVX2 has no unsigned compare: |v| - (T + 1) is negative
 *   exactly for |v| <= T, 2^63 included) is gathered by an AND of those differences; then the
 *   call runs again on the general route, whose bits agree wherever this one's are valid. */
typedef struct fx_r4_fast {
    __m128i cnt;
    __m256i half_m1, half_p1, one, t_p1;
    __m256i max_in;    /* signed: exact while every |v| <= T */
    __m256i all_below; /* AND of |v| - (T + 1): sign bits all set iff every |v| <= T */
    __m256i underflow;
    int s;
} fx_r4_fast;

static inline int fx_r4_fast_ok(int shift) { return shift >= 1 && shift <= 32; }

static inline fx_r4_fast fx_r4_fast_setup(int s)
{
    fx_r4_fast f;
    const int64_t half = (int64_t)1 << (s - 1);
    f.cnt = _mm_cvtsi32_si128(s);
    f.half_m1 = _mm256_set1_epi64x(half - 1);
    f.half_p1 = _mm256_set1_epi64x(half + 1);
    f.one = _mm256_set1_epi64x(1);
    f.t_p1 = _mm256_set1_epi64x((int64_t)fx_q64_fast_bound(s) + 1);
    f.max_in = _mm256_setzero_si256();
    f.all_below = _mm256_set1_epi64x(-1);
    f.underflow = _mm256_setzero_si256();
    f.s = s;
    return f;
}

static inline __m256i fx_requant4_fast(__m256i v, fx_r4_fast *f)
{
    const __m256i zero = _mm256_setzero_si256();
    const __m256i sgn = _mm256_cmpgt_epi64(zero, v);
    const __m256i av = fx_abs_epi64(v, sgn);
    f->max_in = _mm256_blendv_epi8(f->max_in, av, _mm256_cmpgt_epi64(av, f->max_in));
    f->all_below = _mm256_and_si256(f->all_below, _mm256_sub_epi64(av, f->t_p1));
    f->underflow = _mm256_sub_epi64(
        f->underflow, _mm256_andnot_si256(_mm256_cmpeq_epi64(av, zero), _mm256_cmpgt_epi64(f->half_p1, av)));
    const __m256i b = _mm256_and_si256(_mm256_srl_epi64(v, f->cnt), f->one);
    return _mm256_srl_epi64(_mm256_add_epi64(_mm256_add_epi64(v, f->half_m1), b), f->cnt);
}

/* Whether every |v| of a fast-route call was at most T (else it must run on the general one). */
static inline int fx_r4_fast_held(const fx_r4_fast *f)
{
    return _mm256_movemask_pd(_mm256_castsi256_pd(f->all_below)) == 0xF;
}

/* A state with f's shift and its statistics at their start, and the merge of such a state's
 * statistics into f: a caller whose state lives in memory (behind a pointer that its stores
 * may alias) rounds a batch of values with a local one in registers (a copy of the whole
 * struct compiled to rep movsq: a tenth of the convolution epilogue's time). */
static inline fx_r4_fast fx_r4_fast_fresh(const fx_r4_fast *f)
{
    fx_r4_fast l;
    l.cnt = f->cnt;
    l.half_m1 = f->half_m1;
    l.half_p1 = f->half_p1;
    l.one = f->one;
    l.t_p1 = f->t_p1;
    l.max_in = _mm256_setzero_si256();
    l.all_below = _mm256_set1_epi64x(-1);
    l.underflow = _mm256_setzero_si256();
    l.s = f->s;
    return l;
}

static inline void fx_r4_fast_merge(fx_r4_fast *f, const fx_r4_fast *l)
{
    f->max_in = _mm256_blendv_epi8(f->max_in, l->max_in, _mm256_cmpgt_epi64(l->max_in, f->max_in));
    f->all_below = _mm256_and_si256(f->all_below, l->all_below);
    f->underflow = _mm256_add_epi64(f->underflow, l->underflow);
}

/* the largest |v| a fast-route state has seen (exact for |v| < 2^63) */
static inline uint64_t fx_r4_fast_max_in(const fx_r4_fast *f)
{
    int64_t mi[4];
    _mm256_storeu_si256((__m256i *)mi, f->max_in);
    uint64_t mx = 0;
    for (int k = 0; k < 4; k++) mx = (uint64_t)mi[k] > mx ? (uint64_t)mi[k] : mx;
    return mx;
}

/* A fast-route call's statistics (every |v| <= T: nothing saturated). */
/* the values a fast-route state has rounded to zero from nonzero */
static inline int64_t fx_r4_fast_underflow(const fx_r4_fast *f)
{
    int64_t uf[4];
    _mm256_storeu_si256((__m256i *)uf, f->underflow);
    return uf[0] + uf[1] + uf[2] + uf[3];
}

static inline void fx_r4_fast_stats(const fx_r4_fast *f, fx_qstats *st)
{
    fx_q64_fast_stats_of(st, fx_r4_fast_max_in(f), fx_r4_fast_underflow(f), f->s);
}

/* Two vectors of 4 int64 lanes in [-32767, 32767], q0 = (a0..a3) and q1 = (b0..b3) -> 8 int32
 * lanes (their low halves) in the order a0 a1 b0 b1 | a2 a3 b2 b3, which fx_pack8_i64_order
 * turns into a0..a3 b0..b3. Why not the plain order: it needs lane-crossing permutes (two vpermd
 * and a vperm2i128), which Zen 1 splits into 14 uops and runs at one per 3-4 cycles each; these
 * in-lane shuffles are 2 uops each there, and one shuffle each on later cores. */
static inline __m256i fx_narrow8(__m256i q0, __m256i q1)
{
    return _mm256_unpacklo_epi64(_mm256_shuffle_epi32(q0, 0x08), _mm256_shuffle_epi32(q1, 0x08));
}

/* fx_narrow8's lanes as 8 int16 in the order a0..a3 b0..b3: the saturating pack gives the
 * int16 pairs (a0 a1)(b0 b1)(a2 a3)(b2 b3), and one dword shuffle puts them in order. */
static inline __m128i fx_pack8_i64_order(__m256i m)
{
    return _mm_shuffle_epi32(fx_pack8_epi32(m), 0xD8);
}

/* The int32 route of the integer kernels' epilogues (conv_i16_fwd_avx2.c's tiles,
 * intops_avx2.c's GEMM tiles), for sums that fit int32 lanes, as a convolution pixel's
 * T = 2^16 hi + acc does unless a large output or many folds push it beyond: there the
 * rounding needs none of the int64 emulation of fx_requant4_fast (AVX2 has no 64-bit
 * arithmetic shift or compare of magnitudes): 8 sums a vector instead of 4 and about half the
 * operations per pixel (the widening to int64 and the four int64 roundings took a fifth of a
 * ResNet-20 stage-1 tile's perf samples, the pair loop two thirds). Its state gathers
 * fx_r4_fast's statistics in int32 lanes (the convolution merges it into one at the end of the
 * tile): the same mantissas (both round to nearest even) and the same statistics as the int64
 * route of the same sums. */
typedef struct fx_round32_avx2 {
    __m128i cnt;                 /* s, 1 <= s <= 31 */
    __m256i rmask, half, tmax;   /* 2^s - 1; 2^(s-1); min(B, 2^32 - 1), B = fx_q64_fast_bound(s) */
    __m256i max_in, under;       /* max |v| (unsigned); counts (subtracted -1 masks) */
} fx_round32_avx2;

static inline fx_round32_avx2 fx_round32_avx2_setup(int s)
{
    fx_round32_avx2 c;
    c.cnt = _mm_cvtsi32_si128(s);
    c.rmask = _mm256_set1_epi32((int32_t)(((uint32_t)1 << s) - 1));
    c.half = _mm256_set1_epi32((int32_t)((uint32_t)1 << (s - 1)));
    const uint64_t t = fx_q64_fast_bound(s);
    c.tmax = _mm256_set1_epi32((int32_t)(uint32_t)(t > UINT32_MAX ? UINT32_MAX : t));
    c.max_in = c.under = _mm256_setzero_si256();
    return c;
}

/* the 8 int32 sums v rounded to nearest even at 2^-s (no overflow: the remainder decides),
 * their statistics into c: the largest |v| per lane, and the underflows, nonzero v rounded to
 * 0 (0 < |v| <= 2^(s-1)). Whether every |v| stayed within the fast bound B is the per-lane
 * maximum's to say (fx_round32_avx2_below), not a mask kept step by step. Forced inline: GCC
 * kept it out of line in the convolution's epilogue, a call per 8 sums with c's state in
 * memory (the CNN's conv1 forward pass on AVX2, 25 products an output, took 0.90-0.91x the
 * time inlined) */
static inline __attribute__((always_inline)) __m256i fx_round32_avx2_step(__m256i v,
                                                                         fx_round32_avx2 *c)
{
    const __m256i zero = _mm256_setzero_si256();
    c->max_in = _mm256_max_epu32(c->max_in, _mm256_abs_epi32(v)); /* INT32_MIN: 2^31 */
    const __m256i q = fx_round32_ne_avx2(v, c->cnt, c->rmask, c->half);
    c->under = _mm256_sub_epi32(
        c->under, _mm256_andnot_si256(_mm256_cmpeq_epi32(v, zero), _mm256_cmpeq_epi32(q, zero)));
    return q;
}

/* all ones in the lanes whose every |v| so far stayed within the fast bound B (max_in <= tmax,
 * unsigned), zero in the others */
static inline __m256i fx_round32_avx2_below(const fx_round32_avx2 *c)
{
    return _mm256_cmpeq_epi32(_mm256_max_epu32(c->max_in, c->tmax), c->tmax);
}

#endif
