/* The int64 -> int16 rounding's fast route on AVX-512 (see below), shared by quant_avx512.c,
 * which rounds stages, and the kernels that round a product's sums while they are still in
 * registers (fx_op_call.out_i16: gemm_i16_amx.c, intops_avx512.c's register tiles,
 * conv_i16_avx512.c's tiles), with the int32 routes of those epilogues (at the end). Include
 * only from files compiled with the AVX-512 flags. */
#ifndef FX_QUANT_Q64_AVX512_H
#define FX_QUANT_Q64_AVX512_H

#include "flex_kernels.h"
#include "../core/lanes_avx512.h"

#include <immintrin.h>
#include <stdint.h>

/* The right shifts 1 <= s <= 47 (every training write's) take a shorter route to the same bits
 * and statistics when no sum saturates, all from |v|, since rounding to nearest even is odd
 * and monotone:
 * - the rounding is floor((v + 2^(s-1) - 1 + b) / 2^s) with b bit s of v (the lowest bit of
 *   floor(v / 2^s)): a remainder above half carries, below it does not, and exactly half
 *   carries only onto an odd quotient (ties to even);
 * - a lane underflows iff 0 < |v| <= 2^(s-1), counted from a mask with a scalar popcount (the
 *   vector ports are what bound this loop);
 * - the largest |q| is the largest |v| rounded, once at the end;
 * - nothing saturates iff the largest |v| is at most T = 32767 2^s + 2^(s-1) - 1 (T < 2^63
 *   needs s <= 47; below it v + 2^(s-1) cannot overflow either). A call whose maximum is above
 *   T runs again on the general route, which training writes need only now and then (a write
 *   that saturates is rare, and recomputed).
 * 8 vector operations per 8 sums against 24: the rounding, not reading the sums, bounded this
 * loop (a convolution's sums are rounded while they are in cache). */
typedef struct fx_q64_fast {
    __m512i half_m1, half, one, bit_s;
    __m128i cnt;
    int s;
} fx_q64_fast;

static inline fx_q64_fast fx_q64_fast_setup(int s)
{
    fx_q64_fast k;
    const int64_t half = (int64_t)1 << (s - 1);
    k.half_m1 = _mm512_set1_epi64(half - 1);
    k.half = _mm512_set1_epi64(half);
    k.one = _mm512_set1_epi64(1);
    k.bit_s = _mm512_set1_epi64((int64_t)1 << s);
    k.cnt = _mm_cvtsi32_si128(s);
    k.s = s;
    return k;
}

/* One vector (dead lanes load as 0, which counts nowhere): the rounded lanes (valid where
 * |v| <= T), with the maximum of |v| in *max_in and the underflows added to *nuf. */
static inline __m512i fx_q64_fast_round(const fx_q64_fast *k, __m512i v, __m512i *max_in,
                                        int64_t *nuf)
{
    const __m512i a = _mm512_abs_epi64(v); /* INT64_MIN stays 2^63, read unsigned */
    *max_in = _mm512_max_epu64(*max_in, a);
    const __mmask8 uf = _mm512_cmplt_epu64_mask(_mm512_sub_epi64(a, k->one), k->half);
    *nuf += __builtin_popcount((unsigned)uf);
    const __mmask8 odd = _mm512_test_epi64_mask(v, k->bit_s);
    const __m512i t = _mm512_add_epi64(v, k->half_m1);
    return _mm512_sra_epi64(_mm512_mask_add_epi64(t, odd, t, k->one), k->cnt);
}

/* Sixteen rounded lanes (two vectors of 8 in [-32767, 32767]) as int16, in order. */
static inline __m256i fx_q64_pack16(__m512i q0, __m512i q1)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi64_epi16(q0)),
                                   _mm512_cvtepi64_epi16(q1), 1);
}

/* Sixteen sums (v0, then v1) rounded on the fast route into dst's lanes under m, as
 * fx_q64_fast_round counts them (lanes outside m must hold 0). A whole vector takes a plain
 * store (fx_store_w16): on the Zen 5 the masked one, even under a full mask, made an
 * 800 x 64 x 25088 product's rounding from columns of tiles 15 % slower. */
static inline void fx_q64_fast_store16(const fx_q64_fast *k, __m512i v0, __m512i v1,
                                       int16_t *dst, __mmask16 m, __m512i *max_in, int64_t *nuf)
{
    const __m512i q0 = fx_q64_fast_round(k, v0, max_in, nuf);
    fx_store_w16(dst, m, fx_q64_pack16(q0, fx_q64_fast_round(k, v1, max_in, nuf)));
}

/* The int32 routes of the integer kernels' epilogues, which round sums still in registers.
 *
 * Sums of any size, shifts 16 <= s <= 46 (the convolutions' writes in training: ResNet-20's
 * and the CNN's round at 16-19). The int64 route widens each sum v = 2^16 hi + acc (acc an
 * int32 lane, hi its folded high words) and rounds it in eight int64 lanes; on ResNet-20's
 * 16-channel layers that took a quarter of the convolution tile's samples. Here v is split
 * as v = 2^16 h + l, h = hi + (acc >> 16) (floor(v / 2^16), int32 for every sum: |v| < 2^46)
 * and l = acc & 0xFFFF, and quant_i64's fast rounding floor((v + 2^(s-1) - 1 + b) / 2^s)
 * (b bit s of v, which is bit t = s - 16 of h) is, in sixteen int32 lanes:
 * - for t >= 1: (h + 2^(t-1) - c) >> t, c = 1 where l = 0 and b = 0 (the low half moves the
 *   floor only when it contributes -1);
 * - for t = 0: h + 1 where l + b > 2^15, else h.
 * A lane underflows where it rounds to 0 from a nonzero v (h or l nonzero). The largest |v|
 * must be exact (it is the write's statistic): a tile's sums are at most
 * max(2^16 (hmax + 1) - 1, -2^16 hmin) in magnitude, so only a tile whose bound passes the
 * largest |v| so far (a few tiles of a product) widens its sums to find its own exactly. The same mantissas and statistics
 * as the int64 route. */
#define FX_R16_MIN_SHIFT 16
#define FX_R16_MAX_SHIFT 46
typedef struct fx_round16 {
    __m512i half_t, bit_t; /* 2^(t-1) (0 for t = 0), 2^t */
    __m128i cnt;           /* t */
    int t0;                /* t = 0 */
} fx_round16;

static inline fx_round16 fx_round16_setup(int s)
{
    fx_round16 k;
    if (s < FX_R16_MIN_SHIFT || s > FX_R16_MAX_SHIFT)
        s = FX_R16_MIN_SHIFT; /* constants no call reads */
    const int t = s - 16;
    k.half_t = _mm512_set1_epi32(t ? 1 << (t - 1) : 0);
    k.bit_t = _mm512_set1_epi32(1 << t);
    k.cnt = _mm_cvtsi32_si128(t);
    k.t0 = t == 0;
    return k;
}

/* sixteen sums 2^16 h + l (nz: the lanes where the sum is nonzero) rounded at k's shift;
 * underflows counted in the lanes of *uf */
static inline __attribute__((always_inline)) __m512i
fx_round16_lanes(const fx_round16 *k, __m512i h, __m512i l, __mmask16 nz, __m512i *uf)
{
    const __m512i one = _mm512_set1_epi32(1);
    __m512i q;
    if (k->t0) {
        const __m512i lb = _mm512_add_epi32(l, _mm512_and_si512(h, one));
        q = _mm512_mask_add_epi32(h, _mm512_cmpgt_epi32_mask(lb, _mm512_set1_epi32(1 << 15)),
                                  h, one);
    } else {
        const __mmask16 c = _kandn_mask16(_mm512_test_epi32_mask(h, k->bit_t),
                                          _mm512_testn_epi32_mask(l, l));
        const __m512i x = _mm512_add_epi32(h, k->half_t);
        q = _mm512_sra_epi32(_mm512_mask_sub_epi32(x, c, x, one), k->cnt);
    }
    *uf = _mm512_mask_add_epi32(*uf, _mm512_mask_testn_epi32_mask(nz, q, q), *uf, one);
    return q;
}

/* Sums in int32 lanes, shifts 1 <= s <= 30: quant_i64's fast rounding of v in one int32 lane,
 * floor((v + 2^(s-1) - 1 + b) / 2^s), b bit s of v, as fx_q64_fast_round does in int64, for
 * every v with |v| + 2^(s-1) < 2^31 (the aligned sums of fx_flex_sum2_quant, and a GEMM tile's
 * sums that do not saturate at s <= 16: |v| <= fx_q64_fast_bound(s) <= 2^31 - 2^15 - 1); a
 * lane beyond holds no kept value (its maximum says so). Lanes under live only: the largest
 * |v| in *max_in (as uint32: |-2^31| reads 2^31), underflows (0 < |v| <= 2^(s-1)) added to
 * *nuf by a scalar popcount (the vector ports are what bound these loops). */
#define FX_R32_MAX_SHIFT 30
typedef struct fx_round32 {
    __m512i half, half_m1, bit_s; /* 2^(s-1), 2^(s-1) - 1, 2^s */
    __m128i cnt;                  /* s */
} fx_round32;

static inline fx_round32 fx_round32_setup(int s)
{
    fx_round32 k;
    if (s < 1 || s > FX_R32_MAX_SHIFT) s = 1; /* constants no call reads */
    k.half = _mm512_set1_epi32(1 << (s - 1));
    k.half_m1 = _mm512_set1_epi32((1 << (s - 1)) - 1);
    k.bit_s = _mm512_set1_epi32(1 << s);
    k.cnt = _mm_cvtsi32_si128(s);
    return k;
}

static inline __attribute__((always_inline)) __m512i
fx_round32_lanes(const fx_round32 *k, __m512i v, __mmask16 live, __m512i *max_in, int64_t *nuf)
{
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i a = _mm512_abs_epi32(v);
    *max_in = _mm512_mask_max_epu32(*max_in, live, *max_in, a);
    *nuf += __builtin_popcount(
        (unsigned)_mm512_mask_cmplt_epu32_mask(live, _mm512_sub_epi32(a, one), k->half));
    const __m512i t = _mm512_add_epi32(v, k->half_m1);
    return _mm512_sra_epi32(_mm512_mask_add_epi32(t, _mm512_test_epi32_mask(v, k->bit_s), t, one),
                            k->cnt);
}

#endif
