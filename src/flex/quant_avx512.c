/* AVX-512 shared-exponent conversions: the bits and statistics of quant_scalar.c.
 *
 * quant_f32, nearest-even, e in [-128, 127]: q = scalef(x, -e) = x * 2^-e in fp32 is exact
 * unless it overflows (|q| >= 2^128: saturates either way) or falls below 2^-126 (then
 * |q| < 1/2 and it rounds to 0 either way). q is clamped to [-32768, 32768] so that huge
 * values and +-Inf convert without the "integer indefinite", rounded with an embedded
 * round-to-nearest-even (independent of MXCSR), and |r| > 32767 counts as saturated for
 * finite inputs. NaN lanes are zeroed afterwards. Padding lanes of a masked tail load as 0.0,
 * which adds nothing to any statistic. */
#include "flex_kernels.h"
#include "quant_q64_avx512.h"
#include "../core/lanes_avx512.h"
#include "../core/prefetch.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

static inline int64_t fx_popcnt16(__mmask16 k) { return __builtin_popcount((unsigned)k); }

static inline __mmask16 fx_tail16(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* The statistics' counters of quant_f32 as int32 lanes, flushed into int64 every
 * FX_QF32_FLUSH elements so that no lane can overflow. */
#define FX_QF32_FLUSH ((int64_t)1 << 28)

typedef struct fx_qf32_k {
    __m512 neg_e, inf, lim, nlim, zero;
    __m512i mmax, mmin, minus1;
} fx_qf32_k;

typedef struct fx_qf32_acc {
    __m512 max_in;
    __m512i max_out, nsat, nnf, nuf;
} fx_qf32_acc;

/* One vector of 16 values (dead lanes load as 0.0 and count nowhere): their mantissas as int32
 * lanes, the statistics into acc. Counts go into vector lanes (a masked subtract of -1): with a
 * popcount per mask, three mask moves, popcounts and adds per vector on the scalar ports bound
 * the loop (batch norm's rounding from L1 on the Zen 5: 0.16 ns an element that way, 0.13 this
 * way, with the paired store below). */
static inline __attribute__((always_inline)) __m512i
fx_qf32_step(const fx_qf32_k *k, fx_qf32_acc *acc, __m512 x, __mmask16 live)
{
    const __m512 ax = _mm512_abs_ps(x);
    const __mmask16 fin = _mm512_cmp_ps_mask(ax, k->inf, _CMP_LT_OQ); /* false for NaN, Inf */
    const __mmask16 num = _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q);       /* false for NaN */
    acc->max_in = _mm512_mask_max_ps(acc->max_in, fin, acc->max_in, ax);
    acc->nnf = _mm512_mask_sub_epi32(acc->nnf, (__mmask16)(live & ~fin), acc->nnf, k->minus1);
    __m512 q = _mm512_scalef_round_ps(x, k->neg_e, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_min_ps(_mm512_max_ps(q, k->nlim), k->lim);
    const __m512i rq = _mm512_cvt_roundps_epi32(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    acc->nsat = _mm512_mask_sub_epi32(
        acc->nsat, _mm512_mask_cmpgt_epi32_mask(fin, _mm512_abs_epi32(rq), k->mmax), acc->nsat,
        k->minus1);
    const __m512i m =
        _mm512_maskz_mov_epi32(num, _mm512_max_epi32(_mm512_min_epi32(rq, k->mmax), k->mmin));
    const __mmask16 nonzero_x = _mm512_mask_cmp_ps_mask(fin, x, k->zero, _CMP_NEQ_OQ);
    acc->nuf = _mm512_mask_sub_epi32(
        acc->nuf, _mm512_mask_cmpeq_epi32_mask(nonzero_x, m, _mm512_setzero_si512()), acc->nuf,
        k->minus1);
    acc->max_out = _mm512_max_epi32(acc->max_out, _mm512_abs_epi32(m));
    return m;
}

/* The sum of 16 int32 lanes, widened (the counts of quant_f32 and sum2_quant). */
static inline int64_t fx_sum_lanes32(__m512i v)
{
    return _mm512_reduce_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(v))) +
           _mm512_reduce_add_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1)));
}

/* The route of a call whose values are all finite and below the saturation bound L = 32767.5
 * 2^e (the smallest |x| that rounds past 32767: its tie goes to the even 32768), as quant_i64's
 * fast route: the same rounding (scalef, then the conversion to nearest even), the underflows
 * from the mantissas, the largest |m| the largest |x| rounded once at the end (the rounding is
 * monotone), no saturation and nothing non-finite to count. One compare per vector against L
 * (false for NaN too) says whether that holds; where it does not, the call returns 0 and runs
 * again on the general route, which rewrites dst. Exponents in [-126, 110], where L is a normal
 * fp32 number. 10 vector operations per 16 values against 20: batch norm's direct routes round
 * every forward and backward output this way (the rounding, not the L1 buffer it reads, bound
 * them). */
typedef struct fx_qf32_fast {
    __m512 neg_e, lim, max_in;
    __mmask16 bad;
    int64_t nuf;
} fx_qf32_fast;

/* One vector of the short route (dead lanes load as 0.0 and count nowhere): its mantissas as
 * int32 lanes, with |x| into max_in, the lanes at or past the bound (or NaN) into bad and the
 * underflows into nuf. */
static inline __attribute__((always_inline)) __m512i fx_qf32_fast_step(fx_qf32_fast *k,
                                                                        __m512 x, __mmask16 live)
{
    const __m512 ax = _mm512_abs_ps(x);
    k->bad |= _mm512_mask_cmp_ps_mask(live, ax, k->lim, _CMP_NLT_UQ);
    k->max_in = _mm512_max_ps(k->max_in, ax);
    const __m512i m = _mm512_cvt_roundps_epi32(
        _mm512_scalef_round_ps(x, k->neg_e, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    k->nuf += __builtin_popcount((unsigned)_mm512_mask_cmpeq_epi32_mask(
        _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NEQ_OQ), m, _mm512_setzero_si512()));
    return m;
}

static int fx_quant_f32_fast(const float *src, int16_t *dst, int64_t n, int e, fx_qstats *st)
{
    fx_qf32_fast k = {_mm512_set1_ps((float)-e), _mm512_set1_ps(ldexpf(32767.5f, e)),
                      _mm512_setzero_ps(), 0, 0};
    const __m512i order = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0); /* as below */
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch((const char *)(src + i + FX_Q_PREFETCH), _MM_HINT_T0);
        _mm_prefetch((const char *)(src + i + FX_Q_PREFETCH + 16), _MM_HINT_T0);
        const __m512i m0 = fx_qf32_fast_step(&k, _mm512_loadu_ps(src + i), 0xFFFF);
        const __m512i m1 = fx_qf32_fast_step(&k, _mm512_loadu_ps(src + i + 16), 0xFFFF);
        if (dst)
            _mm512_storeu_si512((void *)(dst + i),
                                _mm512_permutexvar_epi64(order, _mm512_packs_epi32(m0, m1)));
    }
    for (; i < n; i += 16) {
        const __mmask16 live = fx_tail16(n - i);
        const __m512i m = fx_qf32_fast_step(&k, _mm512_maskz_loadu_ps(live, src + i), live);
        if (dst) _mm512_mask_cvtepi32_storeu_epi16(dst + i, live, m);
    }
    if (k.bad) return 0;
    /* the largest |m|: the largest |x| rounded by the vector steps' own scalef and conversion
     * in one lane (the bits of the definition, which the vectors reproduce; a call of the
     * scalar definition here was about 0.6 % of a flex16_5 ResNet-20 step, batch norm calling
     * this once per row) */
    const float mx = _mm512_reduce_max_ps(k.max_in);
    const __m128 mq = _mm_scalef_round_ss(_mm_set_ss(mx), _mm_set_ss((float)-e),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    st->saturated = 0;
    st->nonfinite = 0;
    st->underflow = k.nuf;
    st->max_abs_in = (double)mx;
    st->max_abs_out = _mm_cvt_roundss_si32(mq, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return 1;
}

void fx_flex_quant_f32_avx512(const float *src, int16_t *dst, int64_t n, int e,
                              const fx_rounding *r, int64_t index0, fx_qstats *st)
{
    if ((r != NULL && r->mode == FX_ROUND_STOCHASTIC) || e < FX_DFP_EXP_MIN || e > FX_DFP_EXP_MAX) {
        fx_flex_quant_f32_scalar(src, dst, n, e, r, index0, st);
        return;
    }
    if (e >= -126 && e <= 110 && fx_quant_f32_fast(src, dst, n, e, st)) return;
    fx_qf32_k k;
    k.neg_e = _mm512_set1_ps((float)-e);
    k.inf = _mm512_set1_ps(__builtin_inff());
    k.lim = _mm512_set1_ps(32768.0f);
    k.nlim = _mm512_set1_ps(-32768.0f);
    k.zero = _mm512_setzero_ps();
    k.mmax = _mm512_set1_epi32(FX_MANT_MAX);
    k.mmin = _mm512_set1_epi32(-FX_MANT_MAX);
    k.minus1 = _mm512_set1_epi32(-1);
    const __m512i izero = _mm512_setzero_si512();
    /* 64-bit lanes 0, 2, 4, 6, 1, 3, 5, 7: vpackssdw interleaves its two sources per 128-bit
     * lane (values are in [-32767, 32767] already, so it does not saturate) */
    const __m512i order = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0);
    fx_qf32_acc acc = {k.zero, izero, izero, izero, izero};
    int64_t saturated = 0, nonfinite = 0, underflow = 0;
    for (int64_t b0 = 0; b0 < n; b0 += FX_QF32_FLUSH) {
        const int64_t b1 = n - b0 < FX_QF32_FLUSH ? n : b0 + FX_QF32_FLUSH;
        int64_t i = b0;
        /* two vectors a step, their mantissas packed into one store (a masked vpmovdw to
         * memory a vector ran slower) */
        for (; i + 32 <= b1; i += 32) {
            _mm_prefetch((const char *)(src + i + FX_Q_PREFETCH), _MM_HINT_T0);
            _mm_prefetch((const char *)(src + i + FX_Q_PREFETCH + 16), _MM_HINT_T0);
            const __m512i m0 = fx_qf32_step(&k, &acc, _mm512_loadu_ps(src + i), 0xFFFF);
            const __m512i m1 = fx_qf32_step(&k, &acc, _mm512_loadu_ps(src + i + 16), 0xFFFF);
            if (dst)
                _mm512_storeu_si512((void *)(dst + i),
                                    _mm512_permutexvar_epi64(order, _mm512_packs_epi32(m0, m1)));
        }
        for (; i < b1; i += 16) {
            const __mmask16 live = fx_tail16(b1 - i);
            const __m512i m = fx_qf32_step(&k, &acc, _mm512_maskz_loadu_ps(live, src + i), live);
            if (dst) _mm512_mask_cvtepi32_storeu_epi16(dst + i, live, m);
        }
        saturated += fx_sum_lanes32(acc.nsat);
        nonfinite += fx_sum_lanes32(acc.nnf);
        underflow += fx_sum_lanes32(acc.nuf);
        acc.nsat = acc.nnf = acc.nuf = izero;
    }
    st->saturated = saturated;
    st->nonfinite = nonfinite;
    st->underflow = underflow;
    st->max_abs_in = (double)_mm512_reduce_max_ps(acc.max_in);
    st->max_abs_out = _mm512_reduce_max_epi32(acc.max_out);
}

/* fx_flex_scaled_f32_scalar on 16 lanes, as the AVX2 version computes it (a negative c as
 * (-m)(-c), so that m = 0 gives +0). */
void fx_flex_scaled_f32_avx512(const int16_t *src, float *dst, int64_t n, int64_t c, double p2)
{
    if (c == 0) { /* every integer product is 0: +0 (a negative m times 0.0 would be -0) */
        memset(dst, 0, (size_t)(n > 0 ? n : 0) * sizeof *dst);
        return;
    }
    const __m512d cd = _mm512_set1_pd((double)(c < 0 ? -c : c)), pd = _mm512_set1_pd(p2);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i m = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        if (c < 0) m = _mm512_sub_epi32(_mm512_setzero_si512(), m);
        const __m512d lo = _mm512_mul_pd(_mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(m)), cd), pd);
        const __m512d hi = _mm512_mul_pd(_mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(m, 1)), cd), pd);
        _mm512_storeu_ps(dst + i, _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)),
                                                     _mm512_cvtpd_ps(hi), 1));
    }
    fx_flex_scaled_f32_scalar(src + i, dst + i, n - i, c, p2);
}

/* m * 2^e: the int16 -> fp32 conversion is exact and scalef rounds once, so the result is the
 * exactly representable value, or +-Inf above the fp32 range (see fx_flex_dequant_scalar). */
void fx_flex_dequant_avx512(const int16_t *src, float *dst, int64_t n, int e)
{
    if (e < FX_DFP_EXP_MIN || e > FX_DFP_EXP_MAX) {
        fx_flex_dequant_scalar(src, dst, n, e);
        return;
    }
    const __m512 ev = _mm512_set1_ps((float)e);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 live = fx_tail16(n - i);
        const __m256i m = _mm256_maskz_loadu_epi16(live, src + i);
        const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(m));
        _mm512_mask_storeu_ps(dst + i, live,
                              _mm512_scalef_round_ps(f, ev, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
}

/* fx_requant on 8 lanes: shift >= 1 is the rounding right shift of fx_rshift_rne (floor by an
 * arithmetic shift, then +1 when the remainder is above half, or equal to it with an odd
 * quotient); shift <= 0 is a left shift that saturates when |v| > 32767 >> -shift. */
/* One vector of fx_flex_quant_i64_avx512: the requantised lanes (clamped to +-32767), with the
 * lanes that saturated and underflowed in *sat, *uf. Constants as set up by the caller. */
typedef struct fx_q64_consts {
    __m512i zero, one, mmax, mmin, rmask, half, thr;
    __m128i cnt;
    int right, s;
} fx_q64_consts;

static inline __m512i fx_q64_step(const fx_q64_consts *k, __m512i v, __mmask8 live,
                                  __mmask8 *sat, __mmask8 *uf)
{
    __m512i q;
    if (k->right) {
        if (k->s >= 64) {
            q = k->zero; /* |v| / 2^s <= 1/2, and a tie rounds to the even value 0 */
        } else {
            q = _mm512_sra_epi64(v, k->cnt);
            const __m512i rem = _mm512_and_si512(v, k->rmask);
            const __mmask8 up = _mm512_cmpgt_epu64_mask(rem, k->half) |
                                (_mm512_cmpeq_epu64_mask(rem, k->half) &
                                 _mm512_test_epi64_mask(q, k->one));
            q = _mm512_mask_add_epi64(q, up, q, k->one);
        }
        *sat = _mm512_mask_cmpgt_epi64_mask(live, _mm512_abs_epi64(q), k->mmax);
        q = _mm512_max_epi64(_mm512_min_epi64(q, k->mmax), k->mmin);
    } else {
        *sat = _mm512_mask_cmpgt_epu64_mask(live, _mm512_abs_epi64(v), k->thr);
        q = _mm512_sll_epi64(v, k->cnt); /* valid wherever it is kept */
        const __mmask8 neg = _mm512_cmplt_epi64_mask(v, k->zero);
        q = _mm512_mask_mov_epi64(q, *sat & ~neg, k->mmax);
        q = _mm512_mask_mov_epi64(q, *sat & neg, k->mmin);
    }
    *uf = _mm512_mask_cmpeq_epi64_mask(live, q, k->zero) & _mm512_cmpneq_epi64_mask(v, k->zero);
    return q;
}

/* The constants of fx_q64_step for one shift. */
static inline fx_q64_consts fx_q64_setup(int shift)
{
    fx_q64_consts k;
    k.zero = _mm512_setzero_si512();
    k.one = _mm512_set1_epi64(1);
    k.mmax = _mm512_set1_epi64(FX_MANT_MAX);
    k.mmin = _mm512_set1_epi64(-FX_MANT_MAX);
    k.right = shift >= 1;
    k.s = shift >= 64 ? 64 : (k.right ? shift : (shift < -64 ? 64 : -shift));
    k.cnt = _mm_cvtsi32_si128(k.s);
    /* right shift: remainder mask and half; left shift: largest |v| that does not saturate */
    const uint64_t maskv = k.right && k.s < 64 ? (((uint64_t)1 << k.s) - 1) : 0;
    k.rmask = _mm512_set1_epi64((long long)maskv);
    k.half = _mm512_set1_epi64(k.right && k.s < 64 ? (long long)((uint64_t)1 << (k.s - 1)) : 0);
    k.thr = _mm512_set1_epi64(!k.right && k.s < 16 ? (FX_MANT_MAX >> k.s) : 0);
    return k;
}

/* quant_i64's statistics in vector lanes: counts kept by subtracting -1 per counted lane
 * (rather than a popcount per vector), maxima of |v| (unsigned: INT64_MIN is 2^63) and |q|. */
typedef struct fx_q64_acc {
    __m512i max_in, max_out, nsat, nuf;
} fx_q64_acc;

/* One vector: fx_q64_step on v (lanes outside live count nowhere and round to 0), with its
 * statistics added to *a; returns the rounded lanes. */
static inline __m512i fx_q64_round(const fx_q64_consts *k, fx_q64_acc *a, __m512i v,
                                   __mmask8 live)
{
    const __m512i minus1 = _mm512_set1_epi64(-1);
    a->max_in = _mm512_max_epu64(a->max_in, _mm512_abs_epi64(v));
    __mmask8 sat, uf;
    const __m512i q = fx_q64_step(k, v, live, &sat, &uf);
    a->nsat = _mm512_mask_sub_epi64(a->nsat, sat, a->nsat, minus1);
    a->nuf = _mm512_mask_sub_epi64(a->nuf, uf, a->nuf, minus1);
    a->max_out = _mm512_max_epi64(a->max_out, _mm512_abs_epi64(q));
    return q;
}

static inline void fx_q64_stats(fx_qstats *st, const fx_q64_acc *a)
{
    st->saturated = _mm512_reduce_add_epi64(a->nsat);
    st->nonfinite = 0;
    st->underflow = _mm512_reduce_add_epi64(a->nuf);
    st->max_abs_in = (double)_mm512_reduce_max_epu64(a->max_in);
    st->max_abs_out = (int32_t)_mm512_reduce_max_epi64(a->max_out);
}

/* Sixteen rounded lanes (two vectors of 8 in [-32767, 32767]) stored as int16 with one 256-bit
 * store. */
static inline void fx_store16_q64(int16_t *dst, __m512i q0, __m512i q1)
{
    _mm256_storeu_si256((__m256i *)dst, fx_q64_pack16(q0, q1));
}

/* The statistics of a fast-route call, or 0 where its maximum is above T (then nothing it
 * computed may be kept). */
static int fx_q64_fast_stats(fx_qstats *st, const fx_q64_fast *k, __m512i max_in, int64_t nuf)
{
    const uint64_t mx = _mm512_reduce_max_epu64(max_in);
    if (mx > fx_q64_fast_bound(k->s)) return 0;
    fx_q64_fast_stats_of(st, mx, nuf, k->s);
    return 1;
}

/* Where quant_i64's values come from: stored int64 values v, or (v NULL) the products m[i] c
 * of int16 mantissas and a scalar made in registers (scale_quant): eight products a step,
 * each mantissa sign-extended, then vpmuldq (the low 32 bits of each lane, signed: m and c
 * both fit), exact. */
typedef struct fx_q64_src {
    const int64_t *v;
    const int16_t *m;
    __m512i cv; /* c in every 64-bit lane */
} fx_q64_src;

static inline __attribute__((always_inline)) __m512i fx_q64_src_load(const fx_q64_src *s,
                                                                     int64_t i, __mmask8 live)
{
    if (!s->v)
        return _mm512_mul_epi32(_mm512_cvtepi16_epi64(_mm_maskz_loadu_epi16(live, s->m + i)),
                                s->cv);
    if (live == 0xFF) {
        _mm_prefetch((const char *)(s->v + i + FX_Q_PREFETCH), _MM_HINT_T0);
        return _mm512_loadu_si512((const void *)(s->v + i));
    }
    return _mm512_maskz_loadu_epi64(live, s->v + i);
}

/* quant_i64 of the source's values on the fast route: 0 where it does not hold (dst is then
 * written again). */
static inline __attribute__((always_inline)) int fx_q64_run_fast(const fx_q64_src *s,
                                                                 int16_t *dst, int64_t n,
                                                                 int shift, fx_qstats *st)
{
    const fx_q64_fast f = fx_q64_fast_setup(shift);
    __m512i max_in = _mm512_setzero_si512();
    int64_t nuf = 0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i q0 = fx_q64_fast_round(&f, fx_q64_src_load(s, i, 0xFF), &max_in, &nuf);
        const __m512i q1 = fx_q64_fast_round(&f, fx_q64_src_load(s, i + 8, 0xFF), &max_in, &nuf);
        if (dst) fx_store16_q64(dst + i, q0, q1);
    }
    for (; i < n; i += 8) {
        const __mmask8 live = n - i >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - i)) - 1);
        const __m512i q = fx_q64_fast_round(&f, fx_q64_src_load(s, i, live), &max_in, &nuf);
        if (dst) _mm512_mask_cvtepi64_storeu_epi16(dst + i, live, q);
    }
    return fx_q64_fast_stats(st, &f, max_in, nuf);
}

/* quant_i64 of the source's values: the fast route where it holds, else the general one.
 * Counts are kept in vector lanes (fx_q64_acc), and full iterations handle 16 values with one
 * 256-bit store: the scalar mask-to-count chain and the masked narrowing stores were what bound
 * this loop. */
static inline __attribute__((always_inline)) void fx_q64_run(const fx_q64_src *s, int16_t *dst,
                                                             int64_t n, int shift, fx_qstats *st)
{
    if (fx_q64_fast_ok(shift) && fx_q64_run_fast(s, dst, n, shift, st)) return;
    const fx_q64_consts k = fx_q64_setup(shift);
    fx_q64_acc acc = {k.zero, k.zero, k.zero, k.zero};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i q0 = fx_q64_round(&k, &acc, fx_q64_src_load(s, i, 0xFF), 0xFF);
        const __m512i q1 = fx_q64_round(&k, &acc, fx_q64_src_load(s, i + 8, 0xFF), 0xFF);
        if (dst) fx_store16_q64(dst + i, q0, q1);
    }
    for (; i < n; i += 8) {
        const __mmask8 live = n - i >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - i)) - 1);
        const __m512i q = fx_q64_round(&k, &acc, fx_q64_src_load(s, i, live), live);
        if (dst) _mm512_mask_cvtepi64_storeu_epi16(dst + i, live, q);
    }
    fx_q64_stats(st, &acc);
}

void fx_flex_quant_i64_avx512(const int64_t *src, int16_t *dst, int64_t n, int shift,
                              fx_qstats *st)
{
    const fx_q64_src s = {src, NULL, _mm512_setzero_si512()};
    fx_q64_run(&s, dst, n, shift, st);
}

/* backend.h scale_quant: quant_i64 of the products m[i] c, each made in its register. The
 * same rounding and statistics as quant_i64 on the stored products (so the same bits); the
 * products' store and load between the two took as long as the rounding in a FLEX16_5
 * tensor_scale of attention's [128, 4, 128, 128] score gradient. */
void fx_flex_scale_quant_avx512(const int16_t *m, int32_t c, int64_t n, int16_t *dst, int shift,
                                fx_qstats *st)
{
    const fx_q64_src s = {NULL, m, _mm512_set1_epi64(c)};
    fx_q64_run(&s, dst, n, shift, st);
}

/* 32 rows x 8 columns of int16 results stored transposed: z[i] holds rows i, i + 8, i + 16
 * and i + 24 in its four 128-bit lanes (eight results each), and three rounds of in-lane
 * unpacks (16-, 32-, 64-bit) turn them into eight vectors of one column's 32 consecutive rows
 * each, one 64-byte store apiece. */
static inline __attribute__((always_inline)) void fx_store_t32x8(const __m512i z[8],
                                                                 int16_t *dst, int64_t rows,
                                                                 int64_t r0, int64_t c0,
                                                                 int64_t nc, __mmask32 rmask32)
{
    __m512i t[8], u[8];
    for (int i = 0; i < 4; i++) { /* row pairs, columns 0-3 and 4-7 */
        t[2 * i] = _mm512_unpacklo_epi16(z[2 * i], z[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi16(z[2 * i], z[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) { /* rows 0-3 (h = 0) and 4-7: two columns each */
        const __m512i *tt = t + 4 * h;
        u[4 * h + 0] = _mm512_unpacklo_epi32(tt[0], tt[2]); /* columns 0, 1 */
        u[4 * h + 1] = _mm512_unpackhi_epi32(tt[0], tt[2]); /* 2, 3 */
        u[4 * h + 2] = _mm512_unpacklo_epi32(tt[1], tt[3]); /* 4, 5 */
        u[4 * h + 3] = _mm512_unpackhi_epi32(tt[1], tt[3]); /* 6, 7 */
    }
    for (int j = 0; j < 4; j++) { /* columns 2j and 2j + 1, all 32 rows */
        const __m512i lo = _mm512_unpacklo_epi64(u[j], u[4 + j]);
        const __m512i hi = _mm512_unpackhi_epi64(u[j], u[4 + j]);
        if (rmask32 == 0xFFFFFFFFu && nc == 8) { /* a whole block: plain stores */
            _mm512_storeu_si512((void *)(dst + (c0 + 2 * j) * rows + r0), lo);
            _mm512_storeu_si512((void *)(dst + (c0 + 2 * j + 1) * rows + r0), hi);
            continue;
        }
        if (2 * j < nc) _mm512_mask_storeu_epi16(dst + (c0 + 2 * j) * rows + r0, rmask32, lo);
        if (2 * j + 1 < nc)
            _mm512_mask_storeu_epi16(dst + (c0 + 2 * j + 1) * rows + r0, rmask32, hi);
    }
}

/* quant_i64 written transposed (backend.h quant_i64_t). Why: a convolution's sums come pixel-
 * major ([P, O] per sample) and its output is NCHW; rounding into a pixel-major buffer and then
 * transposing it took a second pass over every mantissa (5-6 % of an integer training step).
 * Here a block of 32 rows x 8 columns is rounded as quant_i64 rounds and stored transposed
 * (fx_store_t32x8). fast: the route of fx_q64_fast_ok shifts (a constant in each call of the
 * body below, so each loop is compiled for one route). */
static inline __attribute__((always_inline)) int
fx_quant_i64_t_body(const int64_t *src, int16_t *dst, int64_t rows, int64_t cols, int shift,
                    fx_qstats *st, const int fast)
{
    const fx_q64_consts k = fx_q64_setup(fast ? 1 : shift);
    fx_q64_acc acc = {k.zero, k.zero, k.zero, k.zero};
    const fx_q64_fast f = fx_q64_fast_setup(fast ? shift : 1);
    __m512i max_in = _mm512_setzero_si512();
    int64_t nuf = 0;
    for (int64_t r0 = 0; r0 < rows; r0 += 32) {
        const int64_t nr = rows - r0 < 32 ? rows - r0 : 32;
        const __mmask32 rmask32 = nr == 32 ? 0xFFFFFFFFu : (__mmask32)((1u << nr) - 1u);
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            const int64_t nc = cols - c0 < 8 ? cols - c0 : 8;
            const __mmask8 cm = (__mmask8)((1u << nc) - 1u);
            /* z[i]: rows i, i + 8, i + 16, i + 24, narrowed in registers (an array of 32
             * narrowed rows was written to the stack by vpmovqw, a store per row) */
            __m512i z[8];
            for (int i = 0; i < 8; i++) {
                __m128i w4[4];
                for (int l = 0; l < 4; l++) {
                    const int ri = i + 8 * l;
                    const __mmask8 live = ri < nr ? cm : 0;
                    /* rows past the block's end load nothing, from a pointer in src */
                    const int64_t *row = ri < nr ? src + (r0 + ri) * cols + c0 : src;
                    const __m512i v = fx_load_q8(row, live);
                    const __m512i q = fast ? fx_q64_fast_round(&f, v, &max_in, &nuf)
                                           : fx_q64_round(&k, &acc, v, live);
                    w4[l] = _mm512_cvtepi64_epi16(q); /* dead lanes hold 0 */
                }
                z[i] = _mm512_inserti32x4(
                    _mm512_inserti32x4(
                        _mm512_inserti32x4(_mm512_castsi128_si512(w4[0]), w4[1], 1), w4[2], 2),
                    w4[3], 3);
            }
            /* a block of rows is one line of each column's plane (FX_Q_T_STORE_AHEAD) */
            for (int64_t j = 0; j < nc; j++)
                fx_prefetch_at(dst + (c0 + j) * rows + r0, FX_Q_T_STORE_AHEAD);
            fx_store_t32x8(z, dst, rows, r0, c0, nc, rmask32);
        }
    }
    if (fast) return fx_q64_fast_stats(st, &f, max_in, nuf);
    fx_q64_stats(st, &acc);
    return 1;
}

/* The fast route where the shift allows it and no sum saturates, else the general one. */
void fx_flex_quant_i64_t_avx512(const int64_t *src, int16_t *dst, int64_t rows, int64_t cols,
                                int shift, fx_qstats *st)
{
    if (fx_q64_fast_ok(shift) && fx_quant_i64_t_body(src, dst, rows, cols, shift, st, 1)) return;
    fx_quant_i64_t_body(src, dst, rows, cols, shift, st, 0);
}

void fx_flex_maxabs_f32_avx512(const float *src, int64_t n, float *maxabs, int64_t *nonfinite)
{
    const __m512 inf = _mm512_set1_ps(__builtin_inff());
    __m512 mx = _mm512_setzero_ps();
    int64_t nf = 0;
    for (int64_t i = 0; i < n; i += 16) {
        _mm_prefetch((const char *)(src + i + FX_Q_PREFETCH), _MM_HINT_T0);
        const __mmask16 live = fx_tail16(n - i);
        const __m512 ax = _mm512_abs_ps(_mm512_maskz_loadu_ps(live, src + i));
        const __mmask16 fin = _mm512_cmp_ps_mask(ax, inf, _CMP_LT_OQ);
        mx = _mm512_mask_max_ps(mx, fin, mx, ax);
        nf += fx_popcnt16((__mmask16)(live & ~fin));
    }
    *maxabs = _mm512_reduce_max_ps(mx);
    *nonfinite = nf;
}

/* Largest |v| of an int64 stage (the exact exponent of every integer-op write): vpabsq maps
 * INT64_MIN to itself, which read as unsigned is its magnitude 2^63. */
uint64_t fx_flex_maxabs_i64_avx512(const int64_t *src, int64_t n)
{
    __m512i mx = _mm512_setzero_si512();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        mx = _mm512_max_epu64(mx, _mm512_abs_epi64(_mm512_loadu_si512((const void *)(src + i))));
    if (i < n) {
        const __mmask8 m = (__mmask8)((1u << (n - i)) - 1);
        mx = _mm512_max_epu64(mx, _mm512_abs_epi64(_mm512_maskz_loadu_epi64(m, src + i)));
    }
    return _mm512_reduce_max_epu64(mx);
}

/* ---- aligned add/sub of int16 mantissas (fx_sum2) in int32 lanes ------------------------------
 * |v| <= 2^30 + 2^15 < 2^31 by the contract on the shifts, so 16 int32 lanes hold every value
 * exactly; the rounding below is fx_requant's (the int64 steps of fx_q64_step, in 32 bits).
 * Tail lanes beyond n are masked out of every statistic (with a broadcast b they would hold b). */
typedef struct fx_s2_consts {
    __m128i ca, cb;
    __m512i bconst; /* b << sb when b is broadcast */
} fx_s2_consts;

static inline fx_s2_consts fx_s2_setup(const fx_sum2 *p)
{
    fx_s2_consts k;
    k.ca = _mm_cvtsi32_si128(p->sa);
    k.cb = _mm_cvtsi32_si128(p->sb);
    k.bconst = _mm512_set1_epi32(p->b_inc ? 0 : (int32_t)p->b[0] * (1 << p->sb));
    return k;
}

static inline __attribute__((always_inline)) __m512i fx_s2_values(const fx_sum2 *p,
                                                                  const fx_s2_consts *k,
                                                                  int64_t i, __mmask16 live)
{
    const __m512i va = _mm512_sll_epi32(_mm512_cvtepi16_epi32(fx_load_w16(p->a + i, live)), k->ca);
    const __m512i vb =
        p->b_inc ? _mm512_sll_epi32(_mm512_cvtepi16_epi32(fx_load_w16(p->b + i, live)), k->cb)
                 : k->bconst;
    const __m512i v = p->negate_b ? _mm512_sub_epi32(va, vb) : _mm512_add_epi32(va, vb);
    if (!p->gate) return v;
    const __m512i g = _mm512_cvtepi16_epi32(fx_load_w16(p->gate + i, live));
    return _mm512_maskz_mov_epi32(_mm512_cmpgt_epi32_mask(g, _mm512_setzero_si512()), v);
}

uint32_t fx_flex_sum2_maxabs_avx512(const fx_sum2 *p, int64_t n)
{
    if (n <= 0) return 0;
    const fx_s2_consts k = fx_s2_setup(p);
    __m512i mx = _mm512_setzero_si512();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        mx = _mm512_max_epu32(mx, _mm512_abs_epi32(fx_s2_values(p, &k, i, 0xFFFF)));
    if (i < n) {
        const __mmask16 live = fx_tail16(n - i);
        mx = _mm512_mask_max_epu32(mx, live, mx, _mm512_abs_epi32(fx_s2_values(p, &k, i, live)));
    }
    return _mm512_reduce_max_epu32(mx);
}

/* Plain int16 values (sa = 0 and b = 0: an int16 stage), in 32 int16 lanes: a right shift of
 * an int16 cannot saturate (|q| <= 2^14), at shift 0 only -32768 does, and a left shift by t
 * saturates exactly the |v| > 32767 >> t (every nonzero v from t = 16 on) and underflows none. */
static void fx_sum2_quant_plain(const int16_t *src, const int16_t *gate, int64_t n,
                                int16_t *dst, int shift, fx_qstats *st)
{
    const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi16(1);
    const __m512i mmax = _mm512_set1_epi16(FX_MANT_MAX);
    const __m512i mmin = _mm512_set1_epi16(-FX_MANT_MAX), lowest = _mm512_set1_epi16(INT16_MIN);
    const int s = shift >= 16 ? 16 : (shift <= -16 ? -16 : shift);
    const __m128i cnt = _mm_cvtsi32_si128(s >= 0 ? s : -s);
    const __m512i thr = _mm512_set1_epi16((int16_t)(s < 0 && s > -16 ? FX_MANT_MAX >> -s : 0));
    const __m512i rmask = _mm512_set1_epi16((int16_t)(s >= 1 && s < 16 ? (1 << s) - 1 : 0));
    const __m512i half = _mm512_set1_epi16((int16_t)(s >= 1 && s < 16 ? 1 << (s - 1) : 0));
    __m512i max_in = zero, max_out = zero;
    int64_t nsat = 0, nuf = 0;
    for (int64_t i = 0; i < n; i += 32) {
        const __mmask32 live =
            n - i >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (n - i)) - 1);
        __m512i v = fx_load_w32(src + i, live); /* dead lanes: 0 */
        if (gate)
            v = _mm512_maskz_mov_epi16(_mm512_cmpgt_epi16_mask(fx_load_w32(gate + i, live), zero), v);
        __m512i q;
        if (s < 0) {
            const __mmask32 sat = _mm512_cmpgt_epu16_mask(_mm512_abs_epi16(v), thr);
            const __mmask32 neg = _mm512_cmplt_epi16_mask(v, zero);
            q = _mm512_sll_epi16(v, cnt); /* valid wherever it is kept (0 from t = 16 on) */
            q = _mm512_mask_mov_epi16(q, sat & ~neg, mmax);
            q = _mm512_mask_mov_epi16(q, sat & neg, mmin);
            nsat += __builtin_popcount((unsigned)sat);
        } else if (s == 0) {
            q = _mm512_max_epi16(v, mmin);
            nsat += __builtin_popcount((unsigned)_mm512_cmpeq_epi16_mask(v, lowest));
        } else if (s < 16) {
            q = _mm512_sra_epi16(v, cnt);
            const __m512i rem = _mm512_and_si512(v, rmask);
            const __mmask32 up = _mm512_cmpgt_epu16_mask(rem, half) |
                                 (_mm512_cmpeq_epu16_mask(rem, half) &
                                  _mm512_test_epi16_mask(q, one));
            q = _mm512_mask_add_epi16(q, up, q, one);
            nuf += __builtin_popcount(
                (unsigned)(_mm512_cmpeq_epi16_mask(q, zero) & _mm512_test_epi16_mask(v, v)));
        } else { /* |v| <= 2^15 = half of 2^16: everything rounds to 0 */
            q = zero;
            nuf += __builtin_popcount((unsigned)_mm512_test_epi16_mask(v, v));
        }
        max_in = _mm512_max_epu16(max_in, _mm512_abs_epi16(v)); /* |-32768| = 0x8000 unsigned */
        max_out = _mm512_max_epu16(max_out, _mm512_abs_epi16(q));
        if (dst) fx_store_w32(dst + i, live, q);
    }
    const __m512i in32 = _mm512_max_epu32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(max_in)),
                                          _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(max_in, 1)));
    const __m512i out32 = _mm512_max_epu32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(max_out)),
                                           _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(max_out, 1)));
    st->saturated = nsat;
    st->underflow = nuf;
    st->nonfinite = 0;
    st->max_abs_in = (double)_mm512_reduce_max_epu32(in32);
    st->max_abs_out = (int32_t)_mm512_reduce_max_epu32(out32);
}

/* sum2_quant_gated's second output: each rounded value kept where its gate is above 0 (the
 * gate's mantissas, or without one the value's own sign: a ReLU), else 0, at the same exponent;
 * the largest |kept| in max (uint32 lanes on the 16-lane routes, uint16 on the 32-lane one).
 * The plain route of sum2_quant at shift 0 stores exactly these values (|q| <= 32767, so
 * nothing saturates or underflows) and reports that largest |kept| as both maxima. */
typedef struct fx_s2_gated {
    const int16_t *gate; /* NULL: the values' own signs */
    int16_t *dst;
    __m512i max;
} fx_s2_gated;

static inline __attribute__((always_inline)) void fx_s2_gate16(fx_s2_gated *g, __m512i q,
                                                                int64_t i, __mmask16 live)
{
    const __m512i zero = _mm512_setzero_si512();
    const __mmask16 keep =
        g->gate ? _mm512_mask_cmpgt_epi32_mask(
                      live, _mm512_cvtepi16_epi32(fx_load_w16(g->gate + i, live)), zero)
                : _mm512_mask_cmpgt_epi32_mask(live, q, zero);
    const __m512i y = _mm512_maskz_mov_epi32(keep, q);
    g->max = _mm512_max_epu32(g->max, _mm512_abs_epi32(y));
    if (live == 0xFFFF)
        _mm256_storeu_si256((__m256i *)(void *)(g->dst + i), _mm512_cvtepi32_epi16(y));
    else
        _mm512_mask_cvtepi32_storeu_epi16(g->dst + i, live, y);
}

static inline __attribute__((always_inline)) void fx_s2_gate32(fx_s2_gated *g, __m512i q,
                                                                int64_t i, __mmask32 live)
{
    const __m512i zero = _mm512_setzero_si512();
    const __mmask32 keep = g->gate ? _mm512_mask_cmpgt_epi16_mask(
                                         live, fx_load_w32(g->gate + i, live), zero)
                                   : _mm512_mask_cmpgt_epi16_mask(live, q, zero);
    const __m512i y = _mm512_maskz_mov_epi16(keep, q);
    g->max = _mm512_max_epu16(g->max, _mm512_abs_epi16(y));
    fx_store_w32(g->dst + i, live, y);
}

static void fx_s2_gated_stats(fx_qstats *st, uint32_t max)
{
    st->saturated = 0;
    st->nonfinite = 0;
    st->underflow = 0;
    st->max_abs_in = (double)max;
    st->max_abs_out = (int32_t)max;
}

/* The bias add's usual case in 32 int16 lanes: one b for the whole call (a conv's bias plane),
 * b at an exponent not above a's (sb = 0), nothing negated or gated, and the output at a's
 * exponent (shift = sa = s, 0..15). Then v = a 2^s + b, and fx_requant(v, s) = a + c with
 * c = floor(b / 2^s), plus 1 where the remainder r of b is above half, or equal to it with
 * a + floor(b / 2^s) odd (ties to even): a 2^s adds nothing below bit s. So q is a saturating
 * int16 add, and the statistics follow without the int32 values: q saturates where a + c
 * leaves [-32767, 32767]; q underflows where it is 0 while v is not, and v = 0 only if r = 0
 * (then q = 0 is v = 0); and |v| is largest at the largest or smallest a (v grows with a). In
 * the CNN's training this is nine in ten bias adds, at a third of the int32 route's time. */
static inline __attribute__((always_inline)) void
fx_sum2_quant_bias16(const int16_t *a, int32_t b, int s, int64_t n, int16_t *dst, fx_qstats *st,
                     fx_s2_gated *g)
{
    const int32_t bf = b >> s, rem = b - bf * (1 << s), half = s ? 1 << (s - 1) : 0;
    const int tie = s > 0 && rem == half;
    const __m512i c0 = _mm512_set1_epi16((int16_t)(bf + (s > 0 && rem > half)));
    const __m512i bfv = _mm512_set1_epi16((int16_t)bf), one = _mm512_set1_epi16(1);
    const __m512i mmax = _mm512_set1_epi16(FX_MANT_MAX), mmin = _mm512_set1_epi16(-FX_MANT_MAX);
    const __m512i zero = _mm512_setzero_si512();
    __m512i amax = _mm512_set1_epi16(INT16_MIN), amin = _mm512_set1_epi16(INT16_MAX);
    __m512i qmax = zero;
    int64_t nsat = 0, nuf = 0;
    for (int64_t i = 0; i < n; i += 32) {
        const __mmask32 live =
            n - i >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (n - i)) - 1);
        const __m512i va = fx_load_w32(a + i, live);
        const __m512i c =
            tie ? _mm512_add_epi16(c0, _mm512_and_si512(_mm512_add_epi16(va, bfv), one)) : c0;
        /* a + c leaves the range where a > 32767 - c or a < -32767 - c (the bounds saturate
         * harmlessly: a side that cannot be left gets a bound no int16 passes) */
        const __mmask32 sat =
            (_mm512_cmpgt_epi16_mask(va, _mm512_subs_epi16(mmax, c)) |
             _mm512_cmplt_epi16_mask(va, _mm512_subs_epi16(mmin, c))) & live;
        const __m512i q = _mm512_max_epi16(_mm512_min_epi16(_mm512_adds_epi16(va, c), mmax), mmin);
        if (rem != 0) nuf += __builtin_popcount((unsigned)_mm512_mask_cmpeq_epi16_mask(live, q, zero));
        nsat += __builtin_popcount((unsigned)sat);
        amax = _mm512_mask_max_epi16(amax, live, amax, va);
        amin = _mm512_mask_min_epi16(amin, live, amin, va);
        qmax = _mm512_mask_max_epi16(qmax, live, qmax, _mm512_abs_epi16(q));
        if (dst) fx_store_w32(dst + i, live, q);
        if (g) fx_s2_gate32(g, q, i, live);
    }
    fx_qstats_init(st);
    if (n <= 0) return;
    int16_t hi[32], lo[32], qm[32];
    _mm512_storeu_si512((void *)hi, amax);
    _mm512_storeu_si512((void *)lo, amin);
    _mm512_storeu_si512((void *)qm, qmax);
    fx_bias16_stats(hi, lo, qm, 32, s, b, nsat, nuf, st);
}

typedef struct fx_s2q_consts {
    __m512i zero, one, mmax, mmin, minus1, rmask, half, thr;
    __m128i cnt;
    int right, gone;
} fx_s2q_consts;

typedef struct fx_s2q_acc {
    __m512i max_in, max_out, nsat, nuf;
} fx_s2q_acc;

/* One vector of fx_flex_sum2_quant_avx512 (lanes outside live count nowhere). */
static inline __attribute__((always_inline)) void
fx_s2q_step(const fx_sum2 *p, const fx_s2_consts *k, const fx_s2q_consts *c, fx_s2q_acc *acc,
            int64_t i, __mmask16 live, int16_t *dst, fx_s2_gated *g)
{
    const __m512i v = fx_s2_values(p, k, i, live);
    const __m512i av = _mm512_abs_epi32(v);
    __m512i q;
    __mmask16 sat;
    if (c->right) {
        if (c->gone) {
            q = c->zero;
        } else {
            q = _mm512_sra_epi32(v, c->cnt);
            const __m512i rem = _mm512_and_si512(v, c->rmask);
            const __mmask16 up = _mm512_cmpgt_epu32_mask(rem, c->half) |
                                 (_mm512_cmpeq_epu32_mask(rem, c->half) &
                                  _mm512_test_epi32_mask(q, c->one));
            q = _mm512_mask_add_epi32(q, up, q, c->one);
        }
        sat = _mm512_mask_cmpgt_epi32_mask(live, _mm512_abs_epi32(q), c->mmax);
        q = _mm512_max_epi32(_mm512_min_epi32(q, c->mmax), c->mmin);
    } else {
        sat = _mm512_mask_cmpgt_epu32_mask(live, av, c->thr);
        q = _mm512_sll_epi32(v, c->cnt); /* valid wherever it is kept */
        const __mmask16 neg = _mm512_cmplt_epi32_mask(v, c->zero);
        q = _mm512_mask_mov_epi32(q, sat & ~neg, c->mmax);
        q = _mm512_mask_mov_epi32(q, sat & neg, c->mmin);
    }
    const __mmask16 uf =
        _mm512_mask_cmpeq_epi32_mask(live, q, c->zero) & _mm512_cmpneq_epi32_mask(v, c->zero);
    acc->nsat = _mm512_mask_sub_epi32(acc->nsat, sat, acc->nsat, c->minus1);
    acc->nuf = _mm512_mask_sub_epi32(acc->nuf, uf, acc->nuf, c->minus1);
    acc->max_in = _mm512_mask_max_epu32(acc->max_in, live, acc->max_in, av);
    acc->max_out = _mm512_mask_max_epi32(acc->max_out, live, acc->max_out, _mm512_abs_epi32(q));
    if (dst && live == 0xFFFF) /* the narrowing in a register, then a plain store */
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm512_cvtepi32_epi16(q));
    else if (dst)
        _mm512_mask_cvtepi32_storeu_epi16(dst + i, live, q);
    if (g) fx_s2_gate16(g, q, i, live);
}

/* The right shifts 1 <= s <= 30 when nothing saturates, as quant_i64's fast route
 * (quant_q64_avx512.h) in int32 lanes: q = (v + 2^(s-1) - 1 + bit s of v) >> s, an underflow
 * where 0 < |v| <= 2^(s-1), the largest |q| the largest |v| rounded once at the end, and no
 * saturation iff the largest |v| is at most T = 32767 2^s + 2^(s-1) - 1. |v| <= 2^30 + 2^15 by
 * the shifts' contract, so v + 2^(s-1) stays below 2^31. Returns 0 where the maximum is above
 * T: dst is then written again by the general route. 14 vector operations per 16 values
 * against 24: in ResNet-20's training these adds (the residual sums and the gradients that
 * meet at a ReLU) run at shifts 1 and 2 nine times in ten. */
static inline __attribute__((always_inline)) int
fx_sum2_quant_fast(const fx_sum2 *p, const fx_s2_consts *k, int64_t n, int16_t *dst, int s,
                   fx_qstats *st, fx_s2_gated *g)
{
    const fx_round32 r = fx_round32_setup(s);
    __m512i max_in = _mm512_setzero_si512();
    int64_t nuf = 0;
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 live = n - i >= 16 ? (__mmask16)0xFFFF : fx_tail16(n - i);
        const __m512i q = fx_round32_lanes(&r, fx_s2_values(p, k, i, live), live, &max_in, &nuf);
        if (dst && live == 0xFFFF)
            _mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm512_cvtepi32_epi16(q));
        else if (dst)
            _mm512_mask_cvtepi32_storeu_epi16(dst + i, live, q);
        if (g) fx_s2_gate16(g, q, i, live); /* (stored again by the general route on a 0) */
    }
    const uint64_t mx = _mm512_reduce_max_epu32(max_in);
    if (mx > fx_q64_fast_bound(s)) return 0; /* quant_i64's bound, the same T */
    fx_q64_fast_stats_of(st, mx, nuf, s);
    return 1;
}

/* sum2_quant's routes other than the plain one, with sum2_quant_gated's second output where g
 * is not NULL (a constant NULL leaves the plain kernel as it was). */
static int fx_sum2_takes_bias16(const fx_sum2 *p, int shift)
{
    return !p->gate && !p->b_inc && !p->negate_b && p->sb == 0 && shift == p->sa;
}

static inline __attribute__((always_inline)) void
fx_sum2_quant_routes(const fx_sum2 *p, int64_t n, int16_t *dst, int shift, fx_qstats *st,
                     fx_s2_gated *g)
{
    if (fx_sum2_takes_bias16(p, shift)) {
        fx_sum2_quant_bias16(p->a, p->b[0], p->sa, n, dst, st, g);
        return;
    }
    if (shift >= 1 && shift <= 30) {
        const fx_s2_consts k = fx_s2_setup(p);
        if (fx_sum2_quant_fast(p, &k, n, dst, shift, st, g)) return;
        if (g) g->max = _mm512_setzero_si512(); /* the general route stores it all again */
    }
    const fx_s2_consts k = fx_s2_setup(p);
    fx_s2q_consts c;
    c.zero = _mm512_setzero_si512();
    c.one = _mm512_set1_epi32(1);
    c.mmax = _mm512_set1_epi32(FX_MANT_MAX);
    c.mmin = _mm512_set1_epi32(-FX_MANT_MAX);
    c.minus1 = _mm512_set1_epi32(-1);
    const fx_shift32 sh = fx_shift32_of(shift);
    c.right = sh.right;
    c.gone = sh.gone;
    c.cnt = _mm_cvtsi32_si128(sh.s);
    c.rmask = _mm512_set1_epi32(sh.rmask);
    c.half = _mm512_set1_epi32(sh.half);
    c.thr = _mm512_set1_epi32(sh.thr);
    fx_s2q_acc acc = {c.zero, c.zero, c.zero, c.zero};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) fx_s2q_step(p, &k, &c, &acc, i, 0xFFFF, dst, g);
    if (i < n) fx_s2q_step(p, &k, &c, &acc, i, fx_tail16(n - i), dst, g);
    /* per-lane counts are < 2^27 for any n below 2^31 elements per call */
    st->saturated = fx_sum_lanes32(acc.nsat);
    st->underflow = fx_sum_lanes32(acc.nuf);
    st->nonfinite = 0;
    st->max_abs_in = (double)_mm512_reduce_max_epu32(acc.max_in);
    st->max_abs_out = _mm512_reduce_max_epi32(acc.max_out);
}

static int fx_sum2_is_plain16(const fx_sum2 *p)
{
    return p->sa == 0 && p->b_inc == 0 && p->b[0] == 0;
}

void fx_flex_sum2_quant_avx512(const fx_sum2 *p, int64_t n, int16_t *dst, int shift,
                               fx_qstats *st)
{
    if (fx_sum2_is_plain16(p)) {
        fx_sum2_quant_plain(p->a, p->gate, n, dst, shift, st);
        return;
    }
    fx_sum2_quant_routes(p, n, dst, shift, st, NULL);
}

/* Why one pass: a residual add and its ReLU (and the gradient sum at a ReLU with two
 * consumers, gated by the ReLU's input) made their second output by a plain-route pass over
 * the first, read back from cache: 10-25 % more time for the op at one thread on ResNet-20's
 * shapes (bench_ew, docs/performance.md). */
void fx_flex_sum2_quant_gated_avx512(const fx_sum2 *p, int64_t n, int16_t *dst, int shift,
                                     fx_qstats *st, const int16_t *gate, int16_t *gdst,
                                     fx_qstats *gst)
{
    if (fx_sum2_is_plain16(p)) { /* plain values (no add sends them): two passes */
        fx_sum2_quant_plain(p->a, p->gate, n, dst, shift, st);
        fx_sum2_quant_plain(dst, gate ? gate : dst, n, gdst, 0, gst);
        return;
    }
    fx_s2_gated g = {gate, gdst, _mm512_setzero_si512()};
    if (fx_sum2_takes_bias16(p, shift)) {
        fx_sum2_quant_routes(p, n, dst, shift, st, &g); /* 32 uint16 lanes */
        const __m512i m32 =
            _mm512_max_epu32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(g.max)),
                             _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(g.max, 1)));
        fx_s2_gated_stats(gst, _mm512_reduce_max_epu32(m32));
        return;
    }
    fx_sum2_quant_routes(p, n, dst, shift, st, &g);
    fx_s2_gated_stats(gst, _mm512_reduce_max_epu32(g.max));
}
