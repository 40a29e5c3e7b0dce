/* AVX2 shared-exponent conversions: the bits and statistics of quant_scalar.c.
 *
 * quant_f32, nearest-even, e in [-128, 127]: q = (x * 2^a) * 2^b with a + b = -e, a and b of
 * the same sign and |a|, |b| <= 64 (so both factors are normal floats). Scaling up, every step
 * is exact until it overflows, and an intermediate overflow implies the true q overflows
 * (saturated either way). Scaling down, a step is inexact only below 2^-126, where the true q
 * is below 2^-126 too and rounds to 0 either way. q is then clamped to [-32768, 32768] (huge
 * values and +-Inf convert without the "integer indefinite"), rounded with an explicit
 * round-to-nearest-even (independent of MXCSR), and |r| > 32767 counts as saturated for finite
 * inputs. NaN lanes are zeroed afterwards. Tails go through a zero-padded buffer: a 0.0 (or 0)
 * lane adds nothing to any statistic. */
#include "flex_kernels.h"
#include "quant_r4_avx2.h"
#include "../core/prefetch.h"

#include <immintrin.h>
#include <string.h>

/* 2^k as a float, for k in [-126, 127] */
static inline float fx_pow2f(int k)
{
    const uint32_t bits = (uint32_t)(127 + k) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline int fx_mask_count_ps(__m256 m) { return __builtin_popcount((unsigned)_mm256_movemask_ps(m)); }
static inline int fx_mask_count_epi32(__m256i m) { return fx_mask_count_ps(_mm256_castsi256_ps(m)); }

static float fx_hmax_ps(__m256 v)
{
    float t[8], m = 0.0f;
    _mm256_storeu_ps(t, v);
    for (int i = 0; i < 8; i++) m = t[i] > m ? t[i] : m;
    return m;
}

static int32_t fx_hmax_epi32(__m256i v)
{
    int32_t t[8], m = 0;
    _mm256_storeu_si256((__m256i *)t, v);
    for (int i = 0; i < 8; i++) m = t[i] > m ? t[i] : m;
    return m;
}

/* ---- fp32 -> int16 ------------------------------------------------------------------------ */

typedef struct fx_q8_state {
    __m256 s1, s2;     /* 2^a, 2^b */
    __m256 max_in;     /* finite |x| */
    __m256i max_out;   /* |m| */
    int64_t saturated, nonfinite, underflow;
} fx_q8_state;

static inline __m256i fx_quant8(__m256 x, fx_q8_state *q8)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 inf = _mm256_set1_ps(__builtin_inff());
    const __m256 lim = _mm256_set1_ps(32768.0f), nlim = _mm256_set1_ps(-32768.0f);
    const __m256i mmax = _mm256_set1_epi32(FX_MANT_MAX), mmin = _mm256_set1_epi32(-FX_MANT_MAX);

    const __m256 ax = _mm256_and_ps(x, absmask);
    const __m256 fin = _mm256_cmp_ps(ax, inf, _CMP_LT_OQ); /* false for NaN, Inf */
    const __m256 num = _mm256_cmp_ps(x, x, _CMP_ORD_Q);    /* false for NaN */
    q8->max_in = _mm256_max_ps(q8->max_in, _mm256_and_ps(ax, fin));
    q8->nonfinite += 8 - fx_mask_count_ps(fin);

    __m256 q = _mm256_mul_ps(_mm256_mul_ps(x, q8->s1), q8->s2);
    q = _mm256_min_ps(_mm256_max_ps(q, nlim), lim);
    q = _mm256_round_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i rq = _mm256_cvttps_epi32(q); /* exact: q is an integer in [-32768, 32768] */
    const __m256i sat = _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_abs_epi32(rq), mmax),
                                         _mm256_castps_si256(fin));
    q8->saturated += fx_mask_count_epi32(sat);
    __m256i m = _mm256_max_epi32(_mm256_min_epi32(rq, mmax), mmin);
    m = _mm256_and_si256(m, _mm256_castps_si256(num));

    const __m256 nonzero_x = _mm256_and_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_OQ), fin);
    const __m256i zero_m = _mm256_cmpeq_epi32(m, _mm256_setzero_si256());
    q8->underflow += fx_mask_count_epi32(_mm256_and_si256(zero_m, _mm256_castps_si256(nonzero_x)));
    q8->max_out = _mm256_max_epi32(q8->max_out, _mm256_abs_epi32(m));
    return m;
}


void fx_flex_quant_f32_avx2(const float *src, int16_t *dst, int64_t n, int e,
                            const fx_rounding *r, int64_t index0, fx_qstats *st)
{
    if ((r != NULL && r->mode == FX_ROUND_STOCHASTIC) || e < FX_DFP_EXP_MIN || e > FX_DFP_EXP_MAX) {
        fx_flex_quant_f32_scalar(src, dst, n, e, r, index0, st);
        return;
    }
    const int a = -e / 2, b = -e - a; /* same sign, each in [-64, 64] */
    fx_q8_state q8 = {_mm256_set1_ps(fx_pow2f(a)), _mm256_set1_ps(fx_pow2f(b)), _mm256_setzero_ps(),
                      _mm256_setzero_si256(), 0, 0, 0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)(src + i + FX_Q_PREFETCH), _MM_HINT_T0);
        const __m256i m0 = fx_quant8(_mm256_loadu_ps(src + i), &q8);
        const __m256i m1 = fx_quant8(_mm256_loadu_ps(src + i + 8), &q8);
        /* packs works per 128-bit lane: [m0 lo, m1 lo, m0 hi, m1 hi] -> reorder the quarters */
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(m0, m1), 0xD8);
        if (dst) _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
    for (; i < n; i += 8) {
        const int64_t len = n - i < 8 ? n - i : 8;
        float x[8] = {0};
        memcpy(x, src + i, (size_t)len * sizeof *x);
        int16_t m[8];
        _mm_storeu_si128((__m128i *)m, fx_pack8_epi32(fx_quant8(_mm256_loadu_ps(x), &q8)));
        if (dst) memcpy(dst + i, m, (size_t)len * sizeof *m);
    }
    st->saturated = q8.saturated;
    st->nonfinite = q8.nonfinite;
    st->underflow = q8.underflow;
    st->max_abs_in = (double)fx_hmax_ps(q8.max_in);
    st->max_abs_out = fx_hmax_epi32(q8.max_out);
}

/* ---- int16 -> fp32 ------------------------------------------------------------------------ */

/* m * 2^a * 2^b, a + b = e, |a|, |b| <= 64: the first product is exact (normal range), the
 * second rounds once, exactly like the scalar double -> float conversion of m * 2^e. */
static inline __m256 fx_dequant8(__m128i m16, __m256 s1, __m256 s2)
{
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(m16));
    return _mm256_mul_ps(_mm256_mul_ps(f, s1), s2);
}

/* fx_flex_scaled_f32_scalar on 8 lanes: (double)m * (double)c is the exact product m c (both
 * exact, the product below 2^46), as the definition's int64 product converted, then the same
 * multiplication by p2 and the same rounding to fp32. A negative c is taken as (-m)(-c), so
 * that m = 0 gives +0 as the integer product does (0 * c in double would be -0). */
void fx_flex_scaled_f32_avx2(const int16_t *src, float *dst, int64_t n, int64_t c, double p2)
{
    if (c == 0) { /* every integer product is 0: +0 (a negative m times 0.0 would be -0) */
        memset(dst, 0, (size_t)(n > 0 ? n : 0) * sizeof *dst);
        return;
    }
    const __m256d cd = _mm256_set1_pd((double)(c < 0 ? -c : c)), pd = _mm256_set1_pd(p2);
    const __m256i sign = _mm256_set1_epi32(c < 0 ? -1 : 1);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i m = _mm256_sign_epi32(
            _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(src + i))), sign);
        const __m256d lo = _mm256_mul_pd(_mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(m)), cd), pd);
        const __m256d hi = _mm256_mul_pd(_mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(m, 1)), cd), pd);
        _mm256_storeu_ps(dst + i, _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo)));
    }
    fx_flex_scaled_f32_scalar(src + i, dst + i, n - i, c, p2);
}

void fx_flex_dequant_avx2(const int16_t *src, float *dst, int64_t n, int e)
{
    if (e < FX_DFP_EXP_MIN || e > FX_DFP_EXP_MAX) {
        fx_flex_dequant_scalar(src, dst, n, e);
        return;
    }
    const int a = e / 2, b = e - a;
    const __m256 s1 = _mm256_set1_ps(fx_pow2f(a)), s2 = _mm256_set1_ps(fx_pow2f(b));
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, fx_dequant8(_mm_loadu_si128((const __m128i *)(src + i)), s1, s2));
    if (i < n) {
        const int64_t len = n - i;
        int16_t m[8] = {0};
        float f[8];
        memcpy(m, src + i, (size_t)len * sizeof *m);
        _mm256_storeu_ps(f, fx_dequant8(_mm_loadu_si128((const __m128i *)m), s1, s2));
        memcpy(dst + i, f, (size_t)len * sizeof *f);
    }
}

/* ---- int64 -> int16 ----------------------------------------------------------------------- */

typedef struct fx_r4_state {
    int right;       /* shift >= 1 */
    int zero_all;    /* shift >= 64: everything rounds to 0 */
    __m128i cnt;     /* shift count */
    __m256i rmask, half, thr;
    __m256i max_in;  /* |v| read unsigned */
    __m256i saturated, underflow; /* per-lane counts, subtracted as -1 masks (no movemask and
                                   * popcount per vector: a third of the loop's time) */
} fx_r4_state;


/* unsigned x > y for 64-bit lanes */
static inline __m256i fx_cmpgt_epu64(__m256i x, __m256i y)
{
    const __m256i bias = _mm256_set1_epi64x((long long)0x8000000000000000ULL);
    return _mm256_cmpgt_epi64(_mm256_xor_si256(x, bias), _mm256_xor_si256(y, bias));
}

/* fx_requant on 4 lanes (see fx_flex_quant_i64_avx512 for the case split). */
static inline __m256i fx_requant4(__m256i v, fx_r4_state *s4)
{
    const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi64x(1);
    const __m256i mmax = _mm256_set1_epi64x(FX_MANT_MAX), mmin = _mm256_set1_epi64x(-FX_MANT_MAX);
    const __m256i sgn = _mm256_cmpgt_epi64(zero, v);
    const __m256i av = fx_abs_epi64(v, sgn); /* INT64_MIN stays 2^63 read unsigned */
    s4->max_in = _mm256_blendv_epi8(s4->max_in, av, fx_cmpgt_epu64(av, s4->max_in));
    __m256i q, sat;
    if (s4->zero_all) {
        q = zero;
        sat = zero;
    } else if (s4->right) {
        /* arithmetic shift = logical shift of the one's complement for negative lanes */
        q = _mm256_xor_si256(_mm256_srl_epi64(_mm256_xor_si256(v, sgn), s4->cnt), sgn);
        const __m256i rem = _mm256_and_si256(v, s4->rmask); /* < 2^63: signed compare is fine */
        const __m256i odd = _mm256_cmpeq_epi64(_mm256_and_si256(q, one), one);
        const __m256i up = _mm256_or_si256(_mm256_cmpgt_epi64(rem, s4->half),
                                           _mm256_and_si256(_mm256_cmpeq_epi64(rem, s4->half), odd));
        q = _mm256_sub_epi64(q, up); /* up is -1 where the quotient rounds up */
        const __m256i hi = _mm256_cmpgt_epi64(q, mmax), lo = _mm256_cmpgt_epi64(mmin, q);
        sat = _mm256_or_si256(hi, lo);
        q = _mm256_blendv_epi8(_mm256_blendv_epi8(q, mmax, hi), mmin, lo);
    } else {
        sat = fx_cmpgt_epu64(av, s4->thr);
        q = _mm256_sll_epi64(v, s4->cnt); /* valid wherever it is kept */
        q = _mm256_blendv_epi8(q, mmax, _mm256_andnot_si256(sgn, sat));
        q = _mm256_blendv_epi8(q, mmin, _mm256_and_si256(sgn, sat));
    }
    s4->saturated = _mm256_sub_epi64(s4->saturated, sat);
    const __m256i uf = _mm256_andnot_si256(_mm256_cmpeq_epi64(v, zero), _mm256_cmpeq_epi64(q, zero));
    s4->underflow = _mm256_sub_epi64(s4->underflow, uf);
    return q;
}

/* The state of fx_requant4 for one shift. */
static inline fx_r4_state fx_r4_setup(int shift)
{
    fx_r4_state s4;
    s4.right = shift >= 1;
    s4.zero_all = shift >= 64;
    const int s = s4.zero_all ? 0 : (s4.right ? shift : (shift < -64 ? 64 : -shift));
    s4.cnt = _mm_cvtsi32_si128(s);
    s4.rmask = _mm256_set1_epi64x(s4.right && !s4.zero_all ? (long long)(((uint64_t)1 << s) - 1) : 0);
    s4.half = _mm256_set1_epi64x(s4.right && !s4.zero_all ? (long long)((uint64_t)1 << (s - 1)) : 0);
    s4.thr = _mm256_set1_epi64x(!s4.right && s < 16 ? (FX_MANT_MAX >> s) : 0);
    s4.max_in = _mm256_setzero_si256();
    s4.saturated = s4.underflow = _mm256_setzero_si256();
    return s4;
}

/* quant_i64's statistics from the state and the int32 lanes' largest |q|. */
static inline void fx_r4_stats(const fx_r4_state *s4, __m256i max_out, fx_qstats *st)
{
    uint64_t mi[4], max_in = 0;
    _mm256_storeu_si256((__m256i *)mi, s4->max_in);
    for (int k = 0; k < 4; k++) max_in = mi[k] > max_in ? mi[k] : max_in;
    int64_t sat[4], uf[4];
    _mm256_storeu_si256((__m256i *)sat, s4->saturated);
    _mm256_storeu_si256((__m256i *)uf, s4->underflow);
    st->saturated = sat[0] + sat[1] + sat[2] + sat[3];
    st->nonfinite = 0;
    st->underflow = uf[0] + uf[1] + uf[2] + uf[3];
    st->max_abs_in = (double)max_in;
    st->max_abs_out = fx_hmax_epi32(max_out);
}

/* The statistics that end a call on the general route (fast = 0: of s4 and the int32 lanes'
 * largest |q|) or the fast one (of f); 0 where the fast route did not hold. */
static inline int fx_r4_finish(const fx_r4_state *s4, __m256i max_out, const fx_r4_fast *f,
                               int fast, fx_qstats *st)
{
    if (!fast) {
        fx_r4_stats(s4, max_out, st);
        return 1;
    }
    if (!fx_r4_fast_held(f)) return 0;
    fx_r4_fast_stats(f, st);
    return 1;
}

/* quant_i64 on the general route (fast = 0) or the fast one (fast = 1: returns 0, and the
 * caller runs the general route, where some |v| exceeded T). fast is a constant in each call,
 * so each loop is compiled for one route. */
static inline __attribute__((always_inline)) int
fx_quant_i64_body(const int64_t *src, int16_t *dst, int64_t n, int shift, fx_qstats *st,
                  const int fast)
{
    fx_r4_state s4 = fx_r4_setup(fast ? 1 : shift);
    fx_r4_fast f = fx_r4_fast_setup(fast ? shift : 1);
    __m256i max_out = _mm256_setzero_si256();

    for (int64_t i = 0; i < n; i += 8) {
        _mm_prefetch((const char *)(src + i + FX_Q_PREFETCH), _MM_HINT_T0); /* a line a step */
        const int64_t len = n - i < 8 ? n - i : 8;
        __m256i v0, v1;
        if (len == 8) {
            v0 = _mm256_loadu_si256((const __m256i *)(src + i));
            v1 = _mm256_loadu_si256((const __m256i *)(src + i + 4));
        } else {
            int64_t t[8] = {0};
            memcpy(t, src + i, (size_t)len * sizeof *t);
            v0 = _mm256_loadu_si256((const __m256i *)t);
            v1 = _mm256_loadu_si256((const __m256i *)(t + 4));
        }
        const __m256i m = fast ? fx_narrow8(fx_requant4_fast(v0, &f), fx_requant4_fast(v1, &f))
                               : fx_narrow8(fx_requant4(v0, &s4), fx_requant4(v1, &s4));
        if (!fast) max_out = _mm256_max_epi32(max_out, _mm256_abs_epi32(m));
        if (dst && len == 8) {
            _mm_storeu_si128((__m128i *)(dst + i), fx_pack8_i64_order(m));
        } else if (dst) {
            int16_t m16[8];
            _mm_storeu_si128((__m128i *)m16, fx_pack8_i64_order(m));
            memcpy(dst + i, m16, (size_t)len * sizeof *m16);
        }
    }
    return fx_r4_finish(&s4, max_out, &f, fast, st);
}

void fx_flex_quant_i64_avx2(const int64_t *src, int16_t *dst, int64_t n, int shift,
                            fx_qstats *st)
{
    if (fx_r4_fast_ok(shift) && fx_quant_i64_body(src, dst, n, shift, st, 1)) return;
    fx_quant_i64_body(src, dst, n, shift, st, 0);
}

/* One row of 8 values rounded as quant_i64's, as 8 int16 in order. */
static inline __attribute__((always_inline)) __m128i
fx_q8_row(__m256i v0, __m256i v1, fx_r4_state *s4, fx_r4_fast *f, __m256i *max_out, const int fast)
{
    const __m256i m = fast ? fx_narrow8(fx_requant4_fast(v0, f), fx_requant4_fast(v1, f))
                           : fx_narrow8(fx_requant4(v0, s4), fx_requant4(v1, s4));
    if (!fast) *max_out = _mm256_max_epi32(*max_out, _mm256_abs_epi32(m));
    return fx_pack8_i64_order(m);
}

/* Rows a, b, c, d of int16 (8 columns each) -> four vectors holding two columns of the four
 * rows each: u[0] columns 0 and 1, u[1] columns 2 and 3, u[2] 4 and 5, u[3] 6 and 7 (rows
 * a..d in the 64-bit halves' four words). */
static inline __attribute__((always_inline)) void fx_t4x8(__m128i a, __m128i b, __m128i c,
                                                          __m128i d, __m128i *u)
{
    const __m128i t0 = _mm_unpacklo_epi16(a, b), t1 = _mm_unpackhi_epi16(a, b);
    const __m128i t2 = _mm_unpacklo_epi16(c, d), t3 = _mm_unpackhi_epi16(c, d);
    u[0] = _mm_unpacklo_epi32(t0, t2);
    u[1] = _mm_unpackhi_epi32(t0, t2);
    u[2] = _mm_unpacklo_epi32(t1, t3);
    u[3] = _mm_unpackhi_epi32(t1, t3);
}

/* quant_i64 written transposed (backend.h quant_i64_t; see fx_flex_quant_i64_t_avx512 for
 * why): blocks of 8 rows x 8 columns rounded as above, the eight rows' int16 results turned
 * into eight columns by three rounds of unpacks, one 16-byte store per column. Whole blocks
 * take a branch-free path whose rows and columns are named values (with loops over arrays,
 * GCC kept them on the stack and branched per column store: 0.97 ns a value on a Zen 3,
 * against 0.53 for the untransposed rounding); tail rows and columns go through zeroed
 * buffers, which add nothing to any statistic. */
static inline __attribute__((always_inline)) int
fx_quant_i64_t_body(const int64_t *src, int16_t *dst, int64_t rows, int64_t cols, int shift,
                    fx_qstats *st, const int fast)
{
    fx_r4_state s4 = fx_r4_setup(fast ? 1 : shift);
    fx_r4_fast f = fx_r4_fast_setup(fast ? shift : 1);
    __m256i max_out = _mm256_setzero_si256();
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {
        const int64_t nr = rows - r0 < 8 ? rows - r0 : 8;
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            const int64_t nc = cols - c0 < 8 ? cols - c0 : 8;
            /* FX_Q_T_STORE_AHEAD, once per line: every fourth block of rows starts one */
            if (r0 % 32 == 0)
                for (int j = 0; j < nc; j++)
                    fx_prefetch_at(dst + (c0 + j) * rows + r0, FX_Q_T_STORE_AHEAD);
            __m128i lo[4], hi[4]; /* rows 0-3 and 4-7, two columns per vector */
            if (nr == 8 && nc == 8) {
                const int64_t *p = src + r0 * cols + c0;
#define FX_QROW(i)                                                                                 \
    fx_q8_row(_mm256_loadu_si256((const __m256i *)(p + (i) * cols)),                               \
              _mm256_loadu_si256((const __m256i *)(p + (i) * cols + 4)), &s4, &f, &max_out, fast)
                fx_t4x8(FX_QROW(0), FX_QROW(1), FX_QROW(2), FX_QROW(3), lo);
                fx_t4x8(FX_QROW(4), FX_QROW(5), FX_QROW(6), FX_QROW(7), hi);
#undef FX_QROW
                int16_t *d = dst + c0 * rows + r0;
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) { /* unrolled: lo[k] and hi[k] stay registers */
                    _mm_storeu_si128((__m128i *)(d + (2 * k) * rows), _mm_unpacklo_epi64(lo[k], hi[k]));
                    _mm_storeu_si128((__m128i *)(d + (2 * k + 1) * rows),
                                     _mm_unpackhi_epi64(lo[k], hi[k]));
                }
                continue;
            }
            __m128i w[8];
            for (int i = 0; i < 8; i++) {
                int64_t tb[8] = {0};
                if (i < nr) memcpy(tb, src + (r0 + i) * cols + c0, (size_t)nc * sizeof *tb);
                w[i] = fx_q8_row(_mm256_loadu_si256((const __m256i *)tb),
                                 _mm256_loadu_si256((const __m256i *)(tb + 4)), &s4, &f, &max_out,
                                 fast);
            }
            fx_t4x8(w[0], w[1], w[2], w[3], lo);
            fx_t4x8(w[4], w[5], w[6], w[7], hi);
            for (int j = 0; j < nc; j++) { /* column j */
                const __m128i col = j % 2 == 0 ? _mm_unpacklo_epi64(lo[j / 2], hi[j / 2])
                                               : _mm_unpackhi_epi64(lo[j / 2], hi[j / 2]);
                int16_t cb[8];
                _mm_storeu_si128((__m128i *)cb, col);
                memcpy(dst + (c0 + j) * rows + r0, cb, (size_t)nr * sizeof *cb);
            }
        }
    }
    return fx_r4_finish(&s4, max_out, &f, fast, st);
}

/* The fast route where the shift allows it (fx_quant_i64_body), else or where it did not hold
 * the general one. */
void fx_flex_quant_i64_t_avx2(const int64_t *src, int16_t *dst, int64_t rows, int64_t cols,
                              int shift, fx_qstats *st)
{
    if (fx_r4_fast_ok(shift) && fx_quant_i64_t_body(src, dst, rows, cols, shift, st, 1)) return;
    fx_quant_i64_t_body(src, dst, rows, cols, shift, st, 0);
}

/* ---- largest |v| of int64 values --------------------------------------------------------------
 * The signed maximum and minimum (one compare and blend each per vector; AVX2 has no 64-bit
 * abs or unsigned max), then the larger magnitude of the two in scalar code: |INT64_MIN| =
 * 2^63 is exact as uint64. The pass in front of an exact exponent (DFP16 writes, and products
 * whose rounding is not fused) was the baseline build's scalar loop. */
uint64_t fx_flex_maxabs_i64_avx2(const int64_t *src, int64_t n)
{
    __m256i hi0 = _mm256_setzero_si256(), lo0 = hi0, hi1 = hi0, lo1 = hi0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) { /* two vectors: independent chains */
        const __m256i v0 = _mm256_loadu_si256((const __m256i *)(src + i));
        const __m256i v1 = _mm256_loadu_si256((const __m256i *)(src + i + 4));
        hi0 = _mm256_blendv_epi8(hi0, v0, _mm256_cmpgt_epi64(v0, hi0));
        lo0 = _mm256_blendv_epi8(lo0, v0, _mm256_cmpgt_epi64(lo0, v0));
        hi1 = _mm256_blendv_epi8(hi1, v1, _mm256_cmpgt_epi64(v1, hi1));
        lo1 = _mm256_blendv_epi8(lo1, v1, _mm256_cmpgt_epi64(lo1, v1));
    }
    int64_t h[8], l[8];
    _mm256_storeu_si256((__m256i *)h, hi0);
    _mm256_storeu_si256((__m256i *)(h + 4), hi1);
    _mm256_storeu_si256((__m256i *)l, lo0);
    _mm256_storeu_si256((__m256i *)(l + 4), lo1);
    int64_t mx = 0, mn = 0; /* the lanes started at 0, which adds nothing to |v| */
    for (int j = 0; j < 8; j++) {
        mx = h[j] > mx ? h[j] : mx;
        mn = l[j] < mn ? l[j] : mn;
    }
    for (; i < n; i++) {
        mx = src[i] > mx ? src[i] : mx;
        mn = src[i] < mn ? src[i] : mn;
    }
    const uint64_t amx = (uint64_t)mx, amn = (uint64_t)0 - (uint64_t)mn;
    return amx > amn ? amx : amn;
}

/* ---- largest finite |x| -------------------------------------------------------------------- */

void fx_flex_maxabs_f32_avx2(const float *src, int64_t n, float *maxabs, int64_t *nonfinite)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 inf = _mm256_set1_ps(__builtin_inff());
    __m256 mx = _mm256_setzero_ps();
    int64_t nf = 0;
    for (int64_t i = 0; i < n; i += 8) {
        if (!(i & 15)) _mm_prefetch((const char *)(src + i + FX_Q_PREFETCH), _MM_HINT_T0);
        __m256 x;
        if (n - i >= 8) {
            x = _mm256_loadu_ps(src + i);
        } else {
            float t[8] = {0};
            memcpy(t, src + i, (size_t)(n - i) * sizeof *t);
            x = _mm256_loadu_ps(t);
        }
        const __m256 ax = _mm256_and_ps(x, absmask);
        const __m256 fin = _mm256_cmp_ps(ax, inf, _CMP_LT_OQ);
        mx = _mm256_max_ps(mx, _mm256_and_ps(ax, fin));
        nf += 8 - fx_mask_count_ps(fin);
    }
    *maxabs = fx_hmax_ps(mx);
    *nonfinite = nf;
}

/* The aligned sums widened in L1 blocks, through this level's quant_i64. */
/* ---- aligned add/sub of int16 mantissas (fx_sum2) in 8 int32 lanes ----------------------------
 * |v| <= 2^30 + 2^15 < 2^31 by the contract on the shifts, so int32 lanes hold every value
 * exactly (as in the AVX-512 version, quant_avx512.c). Whole groups of 8 only; the last n % 8
 * values go through the scalar definitions. */
static inline __m256i fx_s2_values_avx2(const fx_sum2 *p, __m128i ca, __m128i cb, __m256i bconst,
                                        int64_t i)
{
    const __m256i va = _mm256_sll_epi32(
        _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(p->a + i))), ca);
    const __m256i vb =
        p->b_inc ? _mm256_sll_epi32(
                       _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(p->b + i))), cb)
                 : bconst;
    const __m256i v = p->negate_b ? _mm256_sub_epi32(va, vb) : _mm256_add_epi32(va, vb);
    if (!p->gate) return v;
    const __m256i g = _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(p->gate + i)));
    return _mm256_and_si256(v, _mm256_cmpgt_epi32(g, _mm256_setzero_si256()));
}

/* p advanced by i elements (the tail's view for the scalar definitions) */
static inline fx_sum2 fx_s2_from(const fx_sum2 *p, int64_t i)
{
    const fx_sum2 q = {p->a + i, p->b + i * p->b_inc, p->b_inc, p->sa, p->sb, p->negate_b,
                       p->gate ? p->gate + i : NULL};
    return q;
}

uint32_t fx_flex_sum2_maxabs_avx2(const fx_sum2 *p, int64_t n)
{
    const __m128i ca = _mm_cvtsi32_si128(p->sa), cb = _mm_cvtsi32_si128(p->sb);
    const __m256i bconst = _mm256_set1_epi32(p->b_inc ? 0 : (int32_t)p->b[0] * (1 << p->sb));
    __m256i mx = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        mx = _mm256_max_epu32(mx, _mm256_abs_epi32(fx_s2_values_avx2(p, ca, cb, bconst, i)));
    uint32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, mx);
    uint32_t m = 0;
    for (int j = 0; j < 8; j++) m = lanes[j] > m ? lanes[j] : m;
    if (i < n) {
        const fx_sum2 q = fx_s2_from(p, i);
        const uint32_t t = fx_flex_sum2_maxabs_scalar(&q, n - i);
        m = t > m ? t : m;
    }
    return m;
}

/* ---- aligned sums rounded to int16 in int32 lanes ---------------------------------------------
 * The aligned sums fit int32 lanes (above), so they are rounded there, with the native 32-bit
 * shifts, instead of being widened to int64 and going through quant_i64, which has to emulate
 * the 64-bit arithmetic shift on AVX2 (the widen + quant_i64 pair took 8 % of an AVX2 flex16_5
 * CNN epoch). The same bits and statistics as quant_i64 of the widened values (quant_scalar.c),
 * as in fx_flex_sum2_quant_avx512. */
typedef struct fx_s2q_avx2 {
    int right, gone; /* shift >= 1; shift >= 32 (|v| < 2^31 <= half: everything rounds to 0) */
    __m128i cnt;
    __m256i rmask, half, thr;
    __m256i max_in, max_out, nsat, nuf; /* per-lane maxima and counts (subtracted -1 masks) */
} fx_s2q_avx2;

static inline __m256i fx_s2q_step_avx2(__m256i v, fx_s2q_avx2 *c)
{
    const __m256i zero = _mm256_setzero_si256();
    const __m256i mmax = _mm256_set1_epi32(FX_MANT_MAX), mmin = _mm256_set1_epi32(-FX_MANT_MAX);
    const __m256i av = _mm256_abs_epi32(v); /* |v| < 2^31: exact */
    __m256i q, sat;
    if (c->right) {
        q = c->gone ? zero : fx_round32_ne_avx2(v, c->cnt, c->rmask, c->half);
        sat = _mm256_cmpgt_epi32(_mm256_abs_epi32(q), mmax);
        q = _mm256_max_epi32(_mm256_min_epi32(q, mmax), mmin);
    } else {
        sat = _mm256_cmpgt_epi32(av, c->thr);
        q = _mm256_sll_epi32(v, c->cnt); /* valid wherever it is kept */
        const __m256i neg = _mm256_cmpgt_epi32(zero, v);
        q = _mm256_blendv_epi8(q, mmax, _mm256_andnot_si256(neg, sat));
        q = _mm256_blendv_epi8(q, mmin, _mm256_and_si256(neg, sat));
    }
    const __m256i uf = _mm256_andnot_si256(_mm256_cmpeq_epi32(v, zero), _mm256_cmpeq_epi32(q, zero));
    c->nsat = _mm256_sub_epi32(c->nsat, sat);
    c->nuf = _mm256_sub_epi32(c->nuf, uf);
    c->max_in = _mm256_max_epu32(c->max_in, av);
    c->max_out = _mm256_max_epi32(c->max_out, _mm256_abs_epi32(q));
    return q;
}

static int64_t fx_sum_lanes_epi32(__m256i v)
{
    int32_t t[8];
    _mm256_storeu_si256((__m256i *)t, v);
    int64_t s = 0;
    for (int i = 0; i < 8; i++) s += t[i];
    return s;
}

/* Plain int16 values (sa = 0 and b = 0: a ReLU, a ReLU's gradient, an int16 stage) in 16
 * int16 lanes, as fx_sum2_quant_plain of quant_avx512.c, which explains the arithmetic. AVX2
 * has no unsigned 16-bit compare: |v| (up to 0x8000) is compared with the saturation bound
 * after flipping both sign bits. The mask counts take two movemask bits per lane. In the CNN's
 * training at this level the int32 route for these values was 5 % of a flex16_5 step. */
static void fx_sum2_quant_plain_avx2(const int16_t *src, const int16_t *gate, int64_t n,
                                     int16_t *dst, int shift, fx_qstats *st)
{
    const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi16(1);
    const __m256i mmax = _mm256_set1_epi16(FX_MANT_MAX), mmin = _mm256_set1_epi16(-FX_MANT_MAX);
    const __m256i lowest = _mm256_set1_epi16(INT16_MIN), ones = _mm256_cmpeq_epi16(zero, zero);
    const int s = shift >= 16 ? 16 : (shift <= -16 ? -16 : shift);
    const __m128i cnt = _mm_cvtsi32_si128(s >= 0 ? s : -s);
    const __m256i thr_flipped = _mm256_xor_si256(
        _mm256_set1_epi16((int16_t)(s < 0 && s > -16 ? FX_MANT_MAX >> -s : 0)), lowest);
    const __m256i rmask = _mm256_set1_epi16((int16_t)(s >= 1 && s < 16 ? (1 << s) - 1 : 0));
    const __m256i half = _mm256_set1_epi16((int16_t)(s >= 1 && s < 16 ? 1 << (s - 1) : 0));
    __m256i max_in = zero, max_out = zero;
    int64_t sat_bits = 0, uf_bits = 0; /* two per lane */
    const int64_t whole = n / 16 * 16;
    for (int64_t i = 0; i < whole; i += 16) {
        __m256i v = _mm256_loadu_si256((const void *)(src + i));
        if (gate)
            v = _mm256_and_si256(
                v, _mm256_cmpgt_epi16(_mm256_loadu_si256((const void *)(gate + i)), zero));
        const __m256i av = _mm256_abs_epi16(v); /* |-32768| = 0x8000 unsigned */
        __m256i q;
        if (s < 0) {
            const __m256i sat = _mm256_cmpgt_epi16(_mm256_xor_si256(av, lowest), thr_flipped);
            const __m256i neg = _mm256_cmpgt_epi16(zero, v);
            q = _mm256_sll_epi16(v, cnt); /* valid wherever it is kept (0 from t = 16 on) */
            q = _mm256_blendv_epi8(q, mmax, _mm256_andnot_si256(neg, sat));
            q = _mm256_blendv_epi8(q, mmin, _mm256_and_si256(neg, sat));
            sat_bits += __builtin_popcount((unsigned)_mm256_movemask_epi8(sat));
        } else if (s == 0) {
            q = _mm256_max_epi16(v, mmin);
            sat_bits += __builtin_popcount(
                (unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi16(v, lowest)));
        } else if (s < 16) {
            q = _mm256_sra_epi16(v, cnt);
            const __m256i rem = _mm256_and_si256(v, rmask); /* 0 .. 2^s - 1: signed compares */
            const __m256i up = _mm256_or_si256(
                _mm256_cmpgt_epi16(rem, half),
                _mm256_and_si256(_mm256_cmpeq_epi16(rem, half),
                                 _mm256_cmpeq_epi16(_mm256_and_si256(q, one), one)));
            q = _mm256_sub_epi16(q, up); /* up is -1 where the quotient rounds up (to even) */
            uf_bits += __builtin_popcount((unsigned)_mm256_movemask_epi8(
                _mm256_andnot_si256(_mm256_cmpeq_epi16(v, zero), _mm256_cmpeq_epi16(q, zero))));
        } else { /* |v| <= 2^15 = half of 2^16: everything rounds to 0 */
            q = zero;
            uf_bits += __builtin_popcount((unsigned)_mm256_movemask_epi8(
                _mm256_andnot_si256(_mm256_cmpeq_epi16(v, zero), ones)));
        }
        max_in = _mm256_max_epu16(max_in, av);
        max_out = _mm256_max_epu16(max_out, _mm256_abs_epi16(q));
        if (dst) _mm256_storeu_si256((__m256i *)(dst + i), q);
    }
    fx_qstats_init(st);
    if (whole > 0) {
        uint16_t in[16], out[16];
        _mm256_storeu_si256((__m256i *)in, max_in);
        _mm256_storeu_si256((__m256i *)out, max_out);
        uint32_t mi = 0, mo = 0;
        for (int j = 0; j < 16; j++) {
            mi = in[j] > mi ? in[j] : mi;
            mo = out[j] > mo ? out[j] : mo;
        }
        st->saturated = sat_bits / 2;
        st->underflow = uf_bits / 2;
        st->max_abs_in = (double)mi;
        st->max_abs_out = (int32_t)mo;
    }
    if (whole < n) { /* the last n % 16 values: the scalar definition */
        static const int16_t zero16 = 0;
        const fx_sum2 q = {src + whole, &zero16, 0, 0, 0, 0, gate ? gate + whole : NULL};
        fx_qstats part;
        fx_flex_sum2_quant_scalar(&q, n - whole, dst ? dst + whole : NULL, shift, &part);
        fx_qstats_merge(st, &part);
    }
}

/* The bias add's usual case in 16 int16 lanes (one b, sb = 0, no negation or gate, shift =
 * sa): a saturating int16 add, as in fx_sum2_quant_bias16 of quant_avx512.c, which explains
 * the arithmetic; the last n % 16 values take the scalar definition. */
static void fx_sum2_quant_bias16_avx2(const fx_sum2 *p, int64_t n, int16_t *dst, fx_qstats *st)
{
    const int s = p->sa;
    const int32_t b = p->b[0], bf = b >> s, rem = b - bf * (1 << s), half = s ? 1 << (s - 1) : 0;
    const int tie = s > 0 && rem == half;
    const __m256i c0 = _mm256_set1_epi16((int16_t)(bf + (s > 0 && rem > half)));
    const __m256i bfv = _mm256_set1_epi16((int16_t)bf), one = _mm256_set1_epi16(1);
    const __m256i mmax = _mm256_set1_epi16(FX_MANT_MAX), mmin = _mm256_set1_epi16(-FX_MANT_MAX);
    const __m256i zero = _mm256_setzero_si256();
    __m256i amax = _mm256_set1_epi16(INT16_MIN), amin = _mm256_set1_epi16(INT16_MAX);
    __m256i qmax = zero;
    int64_t nsat = 0, nuf = 0;
    const int64_t whole = n / 16 * 16;
    for (int64_t i = 0; i < whole; i += 16) {
        const __m256i va = _mm256_loadu_si256((const void *)(p->a + i));
        const __m256i c =
            tie ? _mm256_add_epi16(c0, _mm256_and_si256(_mm256_add_epi16(va, bfv), one)) : c0;
        const __m256i sat = _mm256_or_si256(_mm256_cmpgt_epi16(va, _mm256_subs_epi16(mmax, c)),
                                            _mm256_cmpgt_epi16(_mm256_subs_epi16(mmin, c), va));
        const __m256i q =
            _mm256_max_epi16(_mm256_min_epi16(_mm256_adds_epi16(va, c), mmax), mmin);
        /* two mask bits per int16 lane */
        if (rem != 0)
            nuf += __builtin_popcount((unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi16(q, zero))) / 2;
        nsat += __builtin_popcount((unsigned)_mm256_movemask_epi8(sat)) / 2;
        amax = _mm256_max_epi16(amax, va);
        amin = _mm256_min_epi16(amin, va);
        qmax = _mm256_max_epi16(qmax, _mm256_abs_epi16(q));
        if (dst) _mm256_storeu_si256((__m256i *)(dst + i), q);
    }
    fx_qstats_init(st);
    if (whole > 0) {
        int16_t hi[16], lo[16], qm[16];
        _mm256_storeu_si256((__m256i *)hi, amax);
        _mm256_storeu_si256((__m256i *)lo, amin);
        _mm256_storeu_si256((__m256i *)qm, qmax);
        fx_bias16_stats(hi, lo, qm, 16, s, b, nsat, nuf, st);
    }
    if (whole < n) {
        const fx_sum2 q = fx_s2_from(p, whole);
        fx_qstats part;
        fx_flex_sum2_quant_scalar(&q, n - whole, dst ? dst + whole : NULL, s, &part);
        fx_qstats_merge(st, &part);
    }
}

void fx_flex_sum2_quant_avx2(const fx_sum2 *p, int64_t n, int16_t *dst, int shift,
                             fx_qstats *st)
{
    if (p->sa == 0 && p->b_inc == 0 && p->b[0] == 0) {
        fx_sum2_quant_plain_avx2(p->a, p->gate, n, dst, shift, st);
        return;
    }
    if (!p->gate && !p->b_inc && !p->negate_b && p->sb == 0 && shift == p->sa) {
        fx_sum2_quant_bias16_avx2(p, n, dst, st);
        return;
    }
    const fx_shift32 sh = fx_shift32_of(shift);
    fx_s2q_avx2 c;
    c.right = sh.right;
    c.gone = sh.gone;
    c.cnt = _mm_cvtsi32_si128(sh.s);
    c.rmask = _mm256_set1_epi32(sh.rmask);
    c.half = _mm256_set1_epi32(sh.half);
    c.thr = _mm256_set1_epi32(sh.thr);
    c.max_in = c.max_out = _mm256_setzero_si256();
    const __m128i ca = _mm_cvtsi32_si128(p->sa), cb = _mm_cvtsi32_si128(p->sb);
    const __m256i bconst = _mm256_set1_epi32(p->b_inc ? 0 : (int32_t)p->b[0] * (1 << p->sb));
    fx_qstats_init(st);
    /* the per-lane int32 counts are added up every 2^30 values, before they could wrap */
    const int64_t block = (int64_t)1 << 30, whole = n / 8 * 8;
    for (int64_t lo = 0; lo < whole; lo += block) {
        const int64_t hi = whole - lo < block ? whole : lo + block;
        c.nsat = c.nuf = _mm256_setzero_si256();
        for (int64_t i = lo; i < hi; i += 8) {
            const __m256i q = fx_s2q_step_avx2(fx_s2_values_avx2(p, ca, cb, bconst, i), &c);
            if (dst) _mm_storeu_si128((__m128i *)(dst + i), fx_pack8_epi32(q));
        }
        st->saturated += fx_sum_lanes_epi32(c.nsat);
        st->underflow += fx_sum_lanes_epi32(c.nuf);
    }
    st->max_abs_in = (double)fx_hmax_epi32(c.max_in); /* every |v| < 2^31: a signed max */
    st->max_abs_out = fx_hmax_epi32(c.max_out);
    if (whole < n) { /* the last n % 8 values: the scalar definition */
        const fx_sum2 q = fx_s2_from(p, whole);
        fx_qstats part;
        fx_flex_sum2_quant_scalar(&q, n - whole, dst ? dst + whole : NULL, shift, &part);
        fx_qstats_merge(st, &part);
    }
}

/* backend.h scale_quant: the products m[i] c made four a step (vpmuldq on sign-extended lanes,
 * exact) into a buffer in L1, a block at a time, and rounded by quant_i64; the statistics of
 * the blocks merge exactly, so the mantissas and statistics are quant_i64's on all the
 * products at once. */
void fx_flex_scale_quant_avx2(const int16_t *m, int32_t c, int64_t n, int16_t *dst, int shift,
                              fx_qstats *st)
{
    enum { BLOCK = 512 };
    int64_t v[BLOCK];
    const __m256i cv = _mm256_set1_epi64x(c);
    fx_qstats_init(st);
    for (int64_t lo = 0; lo < n; lo += BLOCK) {
        const int64_t len = n - lo < BLOCK ? n - lo : BLOCK;
        const int16_t *mb = m + lo;
        int64_t i = 0;
        for (; i + 4 <= len; i += 4) {
            const __m128i x4 = _mm_loadl_epi64((const __m128i *)(const void *)(mb + i));
            _mm256_storeu_si256((__m256i *)(void *)(v + i),
                                _mm256_mul_epi32(_mm256_cvtepi16_epi64(x4), cv));
        }
        for (; i < len; i++) v[i] = (int64_t)mb[i] * c;
        fx_qstats part;
        fx_flex_quant_i64_avx2(v, dst ? dst + lo : NULL, len, shift, &part);
        fx_qstats_merge(st, &part);
    }
}
