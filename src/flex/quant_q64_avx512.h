/* The int64 -> int16 rounding's fast route on AVX-512 (see below), shared by quant_avx512.c,
 * which rounds stages, and gemm_i16_amx.c, which rounds a product's sums while they are still
 * in registers (fx_op_call.out_i16). Include only from files compiled with the AVX-512 flags. */
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

#endif
