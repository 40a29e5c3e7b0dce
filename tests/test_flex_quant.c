/* Shared-exponent conversions (FLEX16_5 / DFP16): quant_f32, dequant, quant_i64, maxabs_f32.
 *  (a) every int16 mantissa dequantises exactly and quantises back, for edge exponents;
 *  (b) the scalar definition equals an independent reference (integer arithmetic on the float
 *      bits) for millions of inputs: random bit patterns, values near saturation, ties, for
 *      every exponent in [-128, 127], mantissas and every statistic;
 *  (c) every backend is bit-identical to the scalar definition, statistics included, for
 *      lengths 0..100, unaligned pointers and dst == NULL trials, never writing past n;
 *  (d) stochastic rounding: follows its definition, unbiased, reproducible, chunk-invariant;
 *  (e) NaN/Inf handling and counts. quant_i64 and maxabs_f32 get the same treatment, and a
 *      level's transposed quant_i64 (quant_i64_t) equals quant_i64 then a transpose. */
#include "flex/flex_kernels.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAME = "test_flex_quant";

/* ---- backends ----------------------------------------------------------------------------- */

static const fx_backend *g_be[FX_BACKEND_COUNT];
static int g_nbe;

static void collect_backends(void)
{
    for (int i = 0; i < FX_BACKEND_COUNT; i++) {
        const fx_backend *b = fx_backend_get(i);
        if (b && b->available) g_be[g_nbe++] = b;
    }
}

/* ---- helpers ------------------------------------------------------------------------------ */

static float f_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static int stats_equal(const fx_qstats *x, const fx_qstats *y)
{
    return x->saturated == y->saturated && x->nonfinite == y->nonfinite &&
           x->underflow == y->underflow && x->max_abs_in == y->max_abs_in &&
           x->max_abs_out == y->max_abs_out;
}

static void stats_garbage(fx_qstats *s)
{
    s->saturated = s->nonfinite = s->underflow = -77;
    s->max_abs_in = -1.0;
    s->max_abs_out = -5;
}

#define STATS_FMT "sat %lld nonfin %lld under %lld in %.17g out %d"
#define STATS_ARGS(s) (long long)(s).saturated, (long long)(s).nonfinite, \
                      (long long)(s).underflow, (s).max_abs_in, (int)(s).max_abs_out

/* ---- independent reference for fp32 -> int16 at exponent e, nearest-even -----------------
 * Works on the float's bits: |x| = sig * 2^p with an integer sig < 2^24, so
 * q = sig * 2^(p - e) is split into integer and remainder with integer shifts. */
typedef struct ref_acc {
    int64_t saturated, nonfinite, underflow;
    double max_in;
    int32_t max_out;
} ref_acc;

static int32_t ref_quant_one(float x, int e, ref_acc *acc)
{
    const uint32_t u = bits_of(x);
    const int neg = (int)(u >> 31);
    const int bexp = (int)((u >> 23) & 0xFF);
    const uint32_t frac = u & 0x7FFFFF;
    int32_t m;
    if (bexp == 0xFF) {
        acc->nonfinite++;
        m = frac ? 0 : (neg ? -32767 : 32767);
    } else {
        const uint64_t sig = bexp ? (frac | 0x800000u) : frac;
        const int p = bexp ? bexp - 150 : -149;
        const double mag_real = ldexp((double)sig, p);
        if (mag_real > acc->max_in) acc->max_in = mag_real;
        const int sh = p - e; /* q = sig * 2^sh */
        uint64_t mag;         /* rounded |q|, or anything > 32767 when it saturates */
        if (sig == 0) {
            mag = 0;
        } else if (sh >= 0) {
            mag = sh > 20 ? UINT64_MAX : sig << sh;
        } else if (-sh > 40) {
            mag = 0; /* sig < 2^24: q < 2^-16 */
        } else {
            const int s = -sh;
            const uint64_t whole = sig >> s, rem = sig - (whole << s), unit = (uint64_t)1 << s;
            /* compare 2*rem with the unit instead of rem with a half */
            if (2 * rem > unit || (2 * rem == unit && (whole % 2 == 1)))
                mag = whole + 1;
            else
                mag = whole;
        }
        if (mag > 32767) {
            acc->saturated++;
            mag = 32767;
        }
        m = neg ? -(int32_t)mag : (int32_t)mag;
        if (m == 0 && sig != 0) acc->underflow++;
    }
    const int32_t am = m < 0 ? -m : m;
    if (am > acc->max_out) acc->max_out = am;
    return m;
}

static void ref_quant(const float *x, int32_t *m, int64_t n, int e, fx_qstats *st)
{
    ref_acc acc = {0, 0, 0, 0.0, 0};
    for (int64_t i = 0; i < n; i++) m[i] = ref_quant_one(x[i], e, &acc);
    st->saturated = acc.saturated;
    st->nonfinite = acc.nonfinite;
    st->underflow = acc.underflow;
    st->max_abs_in = acc.max_in;
    st->max_abs_out = acc.max_out;
}

/* ---- input generators --------------------------------------------------------------------- */

/* One input likely to sit on a decision boundary for exponent e. */
static float gen_input(test_rng *r, int e)
{
    const int kind = (int)test_rng_range(r, 0, 9);
    const float sign = (test_rng_u64(r) & 1) ? -1.0f : 1.0f;
    switch (kind) {
    case 0: /* any bit pattern (NaN, Inf, subnormal, huge, tiny) */
        return f_from_bits((uint32_t)test_rng_u64(r));
    case 1: /* near the saturation point, with 8 fraction bits: 32765 .. 32770 */
        return sign * ldexpf((float)test_rng_range(r, 32765 * 256, 32770 * 256), e - 8);
    case 2: /* exact ties k + 1/2 across the range and beyond */
        return sign * ldexpf((float)(2 * test_rng_range(r, 0, 40000) + 1), e - 1);
    case 3: /* ties and near-ties just below and above 32767.5 */
        return sign * nextafterf(ldexpf(65535.0f, e - 1),
                                 (test_rng_u64(r) & 1) ? INFINITY : 0.0f);
    case 4: /* random magnitude within 2^-30 .. 2^20 units of 2^e */
        return sign * (float)ldexp(1.0 + test_rng_uniform(r), e + (int)test_rng_range(r, -30, 20));
    case 5: /* small integers and halves, and their float neighbours */
    {
        float v = ldexpf((float)test_rng_range(r, 0, 8), e - 1);
        int step = (int)test_rng_range(r, -1, 1);
        if (step) v = nextafterf(v, step > 0 ? INFINITY : 0.0f);
        return sign * v;
    }
    case 6: /* random 24-bit significands around 1..2^15 units */
        return sign * ldexpf((float)test_rng_range(r, 1, (1 << 24) - 1), e - (int)test_rng_range(r, 9, 40));
    case 7: /* subnormals */
        return sign * f_from_bits((uint32_t)test_rng_range(r, 1, 0x7FFFFF));
    case 8: /* the largest floats */
        return sign * f_from_bits(0x7F7FFFFFu - (uint32_t)test_rng_range(r, 0, 1000));
    default: /* values under one unit: underflow candidates */
        return sign * ldexpf((float)test_rng_uniform(r), e);
    }
}

/* ---- (a) every int16 through dequant and back -------------------------------------------- */

static void test_exhaustive_int16(void)
{
    static const int exps[] = {-128, -127, -31, -14, -1, 0, 1, 100, 112, 113, 126, 127};
    const int64_t n = 2 * 32767 + 1;
    int16_t *m = malloc((size_t)n * sizeof *m), *back = malloc((size_t)n * sizeof *back);
    float *f = malloc((size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++) m[i] = (int16_t)(i - 32767);

    for (int b = 0; b < g_nbe; b++) {
        for (size_t k = 0; k < sizeof exps / sizeof exps[0]; k++) {
            const int e = exps[k];
            g_be[b]->cvt.dequant(m, f, n, e);
            int64_t bad = 0, infinite = 0;
            double maxfin = 0.0;
            for (int64_t i = 0; i < n; i++) {
                const double want = ldexp((double)m[i], e);
                if (fabs(want) <= FLT_MAX) {
                    if ((double)f[i] != want) bad++;
                    if (fabs(want) > maxfin) maxfin = fabs(want);
                } else {
                    infinite++;
                    if (!(isinf(f[i]) && (f[i] > 0) == (m[i] > 0))) bad++;
                }
            }
            CHECK(bad == 0, "%s dequant e=%d: %lld values not exact", g_be[b]->name, e, (long long)bad);

            fx_rounding rne = {FX_ROUND_NEAREST_EVEN, 0, 0};
            fx_qstats st;
            g_be[b]->cvt.quant_f32(f, back, n, e, &rne, 0, &st);
            bad = 0;
            for (int64_t i = 0; i < n; i++) {
                const int32_t want = isinf(f[i]) ? (m[i] > 0 ? 32767 : -32767) : m[i];
                if (back[i] != want) bad++;
            }
            CHECK(bad == 0, "%s roundtrip e=%d: %lld mantissas changed", g_be[b]->name, e, (long long)bad);
            CHECK(st.saturated == 0 && st.underflow == 0 && st.nonfinite == infinite &&
                      st.max_abs_out == 32767 && st.max_abs_in == maxfin,
                  "%s roundtrip e=%d stats: " STATS_FMT " (want nonfinite %lld, in %.17g)",
                  g_be[b]->name, e, STATS_ARGS(st), (long long)infinite, maxfin);
        }
    }
    free(m);
    free(back);
    free(f);
}

/* ---- (b) scalar definition vs independent reference, every exponent ---------------------- */

static void check_against_reference(const float *x, int64_t n, int e, const char *what)
{
    int32_t *want = malloc((size_t)n * sizeof *want);
    int16_t *got = malloc((size_t)n * sizeof *got);
    fx_qstats ws, gs;
    ref_quant(x, want, n, e, &ws);
    fx_rounding rne = {FX_ROUND_NEAREST_EVEN, 0, 0};
    stats_garbage(&gs);
    fx_flex_quant_f32_scalar(x, got, n, e, &rne, 0, &gs);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            if (first < 0) first = i;
            bad++;
        }
    CHECK(bad == 0, "%s e=%d: %lld mantissas differ from the reference (first x=%a: got %d want %d)",
          what, e, (long long)bad, first >= 0 ? (double)x[first] : 0.0,
          first >= 0 ? got[first] : 0, first >= 0 ? want[first] : 0);
    CHECK(stats_equal(&gs, &ws), "%s e=%d stats: got " STATS_FMT ", want " STATS_FMT, what, e,
          STATS_ARGS(gs), STATS_ARGS(ws));

    /* every backend on the same data: bit-identical, statistics included */
    for (int b = 0; b < g_nbe; b++) {
        fx_qstats bs;
        int16_t *bm = malloc((size_t)n * sizeof *bm);
        stats_garbage(&bs);
        g_be[b]->cvt.quant_f32(x, bm, n, e, &rne, 0, &bs);
        CHECK(memcmp(bm, got, (size_t)n * sizeof *bm) == 0 && stats_equal(&bs, &gs),
              "%s %s e=%d differs from scalar: " STATS_FMT, g_be[b]->name, what, e, STATS_ARGS(bs));
        free(bm);
    }
    free(want);
    free(got);
}

static void test_reference_all_exponents(void)
{
    test_rng r;
    test_rng_seed(&r, 12345);
    const int64_t n = 12000; /* x 256 exponents = 3M inputs */
    float *x = malloc((size_t)n * sizeof *x);
    for (int e = FX_DFP_EXP_MIN; e <= FX_DFP_EXP_MAX; e++) {
        for (int64_t i = 0; i < n; i++) x[i] = gen_input(&r, e);
        check_against_reference(x, n, e, "random");
    }
    /* 1M raw bit patterns at a few exponents (mostly far outside the representable window) */
    const int64_t nb = 1 << 18;
    float *xb = malloc((size_t)nb * sizeof *xb);
    static const int be[] = {-128, -14, 0, 127};
    for (size_t k = 0; k < sizeof be / sizeof be[0]; k++) {
        for (int64_t i = 0; i < nb; i++) xb[i] = f_from_bits((uint32_t)test_rng_u64(&r));
        check_against_reference(xb, nb, be[k], "bit patterns");
    }
    free(xb);
    free(x);
}

/* Hand-picked edge values (in units of 2^e) with their expected mantissas. Entries that are
 * not exactly representable as a float at this exponent are left out. */
static void test_edge_values(void)
{
    static const int exps[] = {-128, -127, -31, -14, 0, 5, 100, 127};
    static const struct { double units; int32_t m; } c[] = {
        {0.0, 0}, {0.25, 0}, {0.5, 0}, {0.75, 1}, {1.5, 2}, {2.5, 2}, {3.5, 4}, {-0.5, 0},
        {-1.5, -2}, {-2.5, -2}, {32766.5, 32766}, {-32766.5, -32766}, {32767.0, 32767},
        {32767.25, 32767}, {32767.5, 32767}, {-32767.5, -32767}, {32768.0, 32767},
        {-65536.0, -32767}, {1e9, 32767},
    };
    const int nc = (int)(sizeof c / sizeof c[0]);
    for (size_t k = 0; k < sizeof exps / sizeof exps[0]; k++) {
        const int e = exps[k];
        float x[32];
        int32_t want[32];
        int n = 0;
        for (int i = 0; i < nc; i++) {
            const double v = ldexp(c[i].units, e);
            const float f = (float)v;
            if (!isfinite(f) || (double)f != v) continue;
            x[n] = f;
            want[n++] = c[i].m;
        }
        x[n] = -0.0f;
        want[n++] = 0;
        x[n] = f_from_bits(1); /* 2^-149: below half a unit for every e >= -128 */
        want[n++] = 0;
        CHECK(n >= 8, "e=%d: only %d edge values representable", e, n);
        for (int b = 0; b < g_nbe; b++) {
            int16_t got[32];
            fx_rounding rne = {FX_ROUND_NEAREST_EVEN, 0, 0};
            fx_qstats st;
            g_be[b]->cvt.quant_f32(x, got, n, e, &rne, 0, &st);
            for (int i = 0; i < n; i++)
                CHECK(got[i] == want[i], "%s e=%d x=%a: got %d want %d", g_be[b]->name, e,
                      (double)x[i], got[i], want[i]);
        }
        check_against_reference(x, n, e, "edge values");
    }
}

/* ---- (c) every backend vs scalar: lengths, alignment, trials, guards ---------------------- */

static void test_backends_lengths(void)
{
    test_rng r;
    test_rng_seed(&r, 777);
    enum { MAXN = 100, GUARD = 40 };
    float xbuf[MAXN + 8];
    int64_t vbuf[MAXN + 8];
    int16_t mbuf[MAXN + 8];
    static const int exps[] = {-128, -100, -31, -14, -3, 0, 7, 96, 127};
    static const int shifts[] = {-70, -64, -63, -17, -16, -15, -1, 0, 1, 2, 15, 16, 31, 62, 63, 64, 65, 100000, -100000};
    for (int64_t n = 0; n <= MAXN; n++) {
        for (int off = 0; off < 3; off++) {
            float *x = xbuf + off;
            int64_t *v = vbuf + off;
            int16_t *m = mbuf + off;
            const int e = exps[(n + off) % (sizeof exps / sizeof exps[0])];
            for (int64_t i = 0; i < n; i++) {
                x[i] = gen_input(&r, e);
                const int bitsz = (int)test_rng_range(&r, 0, 63);
                int64_t w = (int64_t)(test_rng_u64(&r) >> (63 - bitsz));
                if (test_rng_u64(&r) & 1) w = -w;
                if (test_rng_range(&r, 0, 30) == 0) w = (test_rng_u64(&r) & 1) ? INT64_MIN : INT64_MAX;
                v[i] = w;
                m[i] = (int16_t)test_rng_range(&r, -32767, 32767);
            }
            const int shift = shifts[(n * 3 + off) % (sizeof shifts / sizeof shifts[0])];
            fx_rounding rne = {FX_ROUND_NEAREST_EVEN, 0, 0};

            int16_t ref16[MAXN + GUARD];
            float reff[MAXN + GUARD];
            fx_qstats refq, refi;
            float refmax;
            int64_t refnf;
            fx_flex_quant_f32_scalar(x, ref16, n, e, &rne, 0, &refq);
            int16_t ref64[MAXN + GUARD];
            fx_flex_quant_i64_scalar(v, ref64, n, shift, &refi);
            fx_flex_dequant_scalar(m, reff, n, e);
            fx_flex_maxabs_f32_scalar(x, n, &refmax, &refnf);

            for (int b = 0; b < g_nbe; b++) {
                const fx_backend *be = g_be[b];
                int16_t out16[MAXN + GUARD + 1];
                float outf[MAXN + GUARD + 1];
                fx_qstats st, trial;
                /* odd int16 offset: the output is misaligned for any vector width */
                int16_t *o16 = out16 + 1;
                for (int i = 0; i < MAXN + GUARD; i++) o16[i] = 0x5A5A;
                stats_garbage(&st);
                be->cvt.quant_f32(x, o16, n, e, &rne, 0, &st);
                stats_garbage(&trial);
                be->cvt.quant_f32(x, NULL, n, e, &rne, 0, &trial);
                int guard_ok = 1;
                for (int i = (int)n; i < MAXN + GUARD; i++) guard_ok &= o16[i] == 0x5A5A;
                CHECK(memcmp(o16, ref16, (size_t)n * 2) == 0 && stats_equal(&st, &refq) &&
                          stats_equal(&trial, &refq) && guard_ok,
                      "%s quant_f32 n=%lld off=%d e=%d: " STATS_FMT, be->name, (long long)n, off, e,
                      STATS_ARGS(st));

                for (int i = 0; i < MAXN + GUARD; i++) o16[i] = 0x5A5A;
                stats_garbage(&st);
                be->cvt.quant_i64(v, o16, n, shift, &st);
                stats_garbage(&trial);
                be->cvt.quant_i64(v, NULL, n, shift, &trial);
                guard_ok = 1;
                for (int i = (int)n; i < MAXN + GUARD; i++) guard_ok &= o16[i] == 0x5A5A;
                CHECK(memcmp(o16, ref64, (size_t)n * 2) == 0 && stats_equal(&st, &refi) &&
                          stats_equal(&trial, &refi) && guard_ok,
                      "%s quant_i64 n=%lld off=%d shift=%d: " STATS_FMT, be->name, (long long)n,
                      off, shift, STATS_ARGS(st));

                float *of = outf + 1;
                for (int i = 0; i < MAXN + GUARD; i++) of[i] = -123.0f;
                be->cvt.dequant(m, of, n, e);
                guard_ok = 1;
                for (int i = (int)n; i < MAXN + GUARD; i++) guard_ok &= of[i] == -123.0f;
                CHECK(memcmp(of, reff, (size_t)n * sizeof *of) == 0 && guard_ok,
                      "%s dequant n=%lld off=%d e=%d", be->name, (long long)n, off, e);

                float mx = -1.0f;
                int64_t nf = -1;
                be->cvt.maxabs_f32(x, n, &mx, &nf);
                CHECK(bits_of(mx) == bits_of(refmax) && nf == refnf,
                      "%s maxabs n=%lld: %a/%lld vs %a/%lld", be->name, (long long)n, (double)mx,
                      (long long)nf, (double)refmax, (long long)refnf);
            }
        }
    }
}

/* ---- quant_i64: scalar definition vs an __int128 reference -------------------------------- */

static int32_t ref_requant(int64_t v, int shift, int *sat)
{
    __int128 q;
    if (shift >= 1) {
        if (shift >= 100) {
            q = 0; /* |v| <= 2^63: at most half a unit, a tie only at 2^63 / 2^64 -> even 0 */
        } else {
            const __int128 unit = (__int128)1 << shift;
            __int128 fl = (__int128)v / unit; /* truncates toward zero */
            __int128 rem = (__int128)v - fl * unit;
            if (rem < 0) { /* make it floor */
                fl -= 1;
                rem += unit;
            }
            q = fl;
            if (2 * rem > unit || (2 * rem == unit && (fl & 1) != 0)) q += 1;
        }
    } else {
        if (v == 0) q = 0;
        else if (-shift >= 40) q = v > 0 ? 100000 : -100000; /* certainly beyond the range */
        else q = (__int128)v * ((__int128)1 << -shift);
    }
    *sat = q > 32767 || q < -32767;
    return q > 32767 ? 32767 : q < -32767 ? -32767 : (int32_t)q;
}

static void test_quant_i64_reference(void)
{
    test_rng r;
    test_rng_seed(&r, 99);
    const int64_t n = 4096;
    int64_t *v = malloc((size_t)n * sizeof *v);
    int16_t *got = malloc((size_t)n * sizeof *got);
    for (int shift = -80; shift <= 110; shift++) {
        int64_t sat = 0, under = 0;
        uint64_t maxin = 0;
        int32_t maxout = 0;
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            const int kind = (int)test_rng_range(&r, 0, 4);
            int64_t w;
            if (kind == 0) { /* exact ties and their neighbours for this shift */
                const int s = shift >= 1 && shift <= 62 ? shift : 1;
                w = (int64_t)test_rng_range(&r, -40000, 40000) * ((int64_t)1 << s) +
                    ((int64_t)1 << (s - 1)) + test_rng_range(&r, -1, 1);
            } else if (kind == 1) { /* extremes */
                static const int64_t ex[] = {INT64_MIN, INT64_MIN + 1, INT64_MAX, -1, 1, 0};
                w = ex[test_rng_range(&r, 0, 5)];
            } else { /* random widths */
                const int bitsz = (int)test_rng_range(&r, 0, 63);
                w = (int64_t)(test_rng_u64(&r) >> (63 - bitsz));
                if (test_rng_u64(&r) & 1) w = -w;
            }
            v[i] = w;
        }
        fx_qstats st;
        stats_garbage(&st);
        fx_flex_quant_i64_scalar(v, got, n, shift, &st);
        for (int64_t i = 0; i < n; i++) {
            int s;
            const int32_t want = ref_requant(v[i], shift, &s);
            sat += s;
            if (want == 0 && v[i] != 0) under++;
            const uint64_t av = v[i] < 0 ? (uint64_t)0 - (uint64_t)v[i] : (uint64_t)v[i];
            if (av > maxin) maxin = av;
            if (abs(want) > maxout) maxout = abs(want);
            if (got[i] != want) bad++;
        }
        CHECK(bad == 0, "quant_i64 shift=%d: %lld values differ from the __int128 reference", shift,
              (long long)bad);
        CHECK(st.saturated == sat && st.underflow == under && st.nonfinite == 0 &&
                  st.max_abs_in == (double)maxin && st.max_abs_out == maxout,
              "quant_i64 shift=%d stats " STATS_FMT, shift, STATS_ARGS(st));
        for (int b = 0; b < g_nbe; b++) {
            int16_t *bm = malloc((size_t)n * sizeof *bm);
            fx_qstats bs;
            g_be[b]->cvt.quant_i64(v, bm, n, shift, &bs);
            CHECK(memcmp(bm, got, (size_t)n * 2) == 0 && stats_equal(&bs, &st),
                  "%s quant_i64 shift=%d differs from scalar", g_be[b]->name, shift);
            free(bm);
        }
    }
    free(v);
    free(got);
}

/* ---- (d) stochastic rounding -------------------------------------------------------------- */

static void test_stochastic(void)
{
    const int64_t n = 200000;
    float *x = malloc((size_t)n * sizeof *x);
    int16_t *m = malloc((size_t)n * sizeof *m), *m2 = malloc((size_t)n * sizeof *m2);
    const int e = -10;
    const double unit = ldexp(1.0, e);
    /* (integer part, fraction) pairs; fractions are exact in float at this exponent */
    static const struct { double whole, frac; } cases[] = {
        {3, 0.25}, {-3, 0.25}, {100, 0.5}, {-7, 0.875}, {0, 0.0009765625}, {1234, 0.1259765625},
        {32766, 0.75}, {-32767, 0.5}, {42, 0.0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const double q = cases[k].whole + cases[k].frac;
        const float xv = (float)(q * unit);
        CHECK((double)xv == q * unit, "case %zu not exact in float", k);
        for (int64_t i = 0; i < n; i++) x[i] = xv;
        fx_rounding sr = {FX_ROUND_STOCHASTIC, 0xC0FFEEULL + k, 17};
        const int64_t index0 = 1000 * (int64_t)k;
        for (int b = 0; b < g_nbe; b++) {
            fx_qstats st;
            g_be[b]->cvt.quant_f32(x, m, n, e, &sr, index0, &st);
            /* the definition, element by element */
            const double fl = floor(q), p = q - fl;
            int64_t bad = 0, sat = 0, under = 0;
            double sum = 0.0;
            for (int64_t i = 0; i < n; i++) {
                const double u = fx_rng_unit(sr.seed, sr.counter, (uint64_t)(index0 + i));
                double want = fl + (u < p ? 1.0 : 0.0);
                if (want > 32767) { want = 32767; sat++; }
                if (want < -32767) { want = -32767; sat++; }
                if (want == 0.0 && xv != 0.0f) under++;
                if (m[i] != (int32_t)want) bad++;
                sum += m[i];
            }
            CHECK(bad == 0, "%s stochastic case %zu: %lld elements differ from the definition",
                  g_be[b]->name, k, (long long)bad);
            CHECK(st.saturated == sat && st.underflow == under && st.nonfinite == 0,
                  "%s stochastic case %zu stats " STATS_FMT, g_be[b]->name, k, STATS_ARGS(st));
            /* unbiased: the mean rounding error is within 5 standard errors of 0 */
            if (fl + 1 <= 32767) {
                const double mean_err = sum / (double)n - q;
                const double sigma = sqrt(p * (1 - p) / (double)n);
                CHECK(fabs(mean_err) <= 5 * sigma + 1e-12,
                      "%s stochastic case %zu biased: mean error %g, sigma %g", g_be[b]->name, k,
                      mean_err, sigma);
            }
            /* only the two neighbours ever appear */
            int64_t outside = 0;
            for (int64_t i = 0; i < n; i++)
                if (m[i] != (int32_t)fl && m[i] != (int32_t)fl + 1 && !(fl + 1 > 32767 && m[i] == 32767))
                    outside++;
            CHECK(outside == 0, "%s stochastic case %zu: %lld values not a neighbour", g_be[b]->name,
                  k, (long long)outside);
        }
    }

    /* reproducible; differs with the counter and the seed; chunking with index0 is invisible */
    const float half = (float)(0.5 * unit) * 5.0f; /* 2.5 units: rounds to 2 or 3 */
    for (int64_t i = 0; i < n; i++) x[i] = half * (i % 2 ? 1.0f : -1.0f);
    fx_rounding sr = {FX_ROUND_STOCHASTIC, 2024, 5};
    fx_qstats st1, st2;
    fx_flex_quant_f32_scalar(x, m, n, e, &sr, 0, &st1);
    fx_flex_quant_f32_scalar(x, m2, n, e, &sr, 0, &st2);
    CHECK(memcmp(m, m2, (size_t)n * 2) == 0 && stats_equal(&st1, &st2), "stochastic not reproducible");
    fx_rounding sr2 = sr;
    sr2.counter = 6;
    fx_flex_quant_f32_scalar(x, m2, n, e, &sr2, 0, &st2);
    CHECK(memcmp(m, m2, (size_t)n * 2) != 0, "stochastic ignores the counter");
    sr2 = sr;
    sr2.seed = 2025;
    fx_flex_quant_f32_scalar(x, m2, n, e, &sr2, 0, &st2);
    CHECK(memcmp(m, m2, (size_t)n * 2) != 0, "stochastic ignores the seed");
    fx_flex_quant_f32_scalar(x, m2, n, e, &sr, 1, &st2);
    CHECK(memcmp(m, m2, (size_t)n * 2) != 0, "stochastic ignores index0");

    test_rng r;
    test_rng_seed(&r, 5);
    for (int b = 0; b < g_nbe; b++) {
        memset(m2, 0, (size_t)n * 2);
        fx_qstats merged;
        fx_qstats_init(&merged);
        for (int64_t lo = 0; lo < n;) {
            int64_t len = test_rng_range(&r, 0, 5000);
            if (len > n - lo) len = n - lo;
            fx_qstats part;
            g_be[b]->cvt.quant_f32(x + lo, m2 + lo, len, e, &sr, lo, &part);
            fx_qstats_merge(&merged, &part);
            lo += len;
        }
        CHECK(memcmp(m, m2, (size_t)n * 2) == 0 && stats_equal(&merged, &st1),
              "%s stochastic in chunks differs from one pass", g_be[b]->name);
    }
    free(x);
    free(m);
    free(m2);
}

/* ---- (e) NaN / Inf ------------------------------------------------------------------------ */

static void test_nonfinite(void)
{
    const float nan_pos = f_from_bits(0x7FC00000u), nan_neg = f_from_bits(0xFFC00000u);
    const float nan_sig = f_from_bits(0x7F800001u), nan_pay = f_from_bits(0xFFBFFFFFu);
    const int e = -3;
    float x[53];
    int nn = 0, ninf = 0;
    for (int i = 0; i < 53; i++) {
        switch (i % 7) {
        case 0: x[i] = nan_pos; nn++; break;
        case 1: x[i] = INFINITY; ninf++; break;
        case 2: x[i] = -INFINITY; ninf++; break;
        case 3: x[i] = i % 2 ? nan_sig : nan_pay; nn++; break;
        case 4: x[i] = nan_neg; nn++; break;
        case 5: x[i] = 0.625f * (float)i; break; /* 5 units per i: finite, exact */
        default: x[i] = -1.0e-30f; break;         /* underflows */
        }
    }
    double maxfin = 0.0;
    int64_t under = 0;
    for (int i = 0; i < 53; i++) {
        if (i % 7 == 5 && fabs((double)x[i]) > maxfin) maxfin = fabs((double)x[i]);
        if (i % 7 == 6) under++;
    }
    for (int b = 0; b < g_nbe; b++) {
        int16_t m[53];
        fx_rounding modes[2] = {{FX_ROUND_NEAREST_EVEN, 0, 0}, {FX_ROUND_STOCHASTIC, 1, 2}};
        for (int md = 0; md < 2; md++) {
            fx_qstats st;
            g_be[b]->cvt.quant_f32(x, m, 53, e, &modes[md], 0, &st);
            int bad = 0;
            for (int i = 0; i < 53; i++) {
                int32_t want;
                if (isnan(x[i])) want = 0;
                else if (isinf(x[i])) want = x[i] > 0 ? 32767 : -32767;
                else if (i % 7 == 6) want = 0;
                else want = (int32_t)(x[i] * 8.0f);
                bad += m[i] != want;
            }
            CHECK(bad == 0, "%s nonfinite mantissas (mode %d): %d wrong", g_be[b]->name, md, bad);
            CHECK(st.nonfinite == nn + ninf && st.saturated == 0 && st.max_abs_in == maxfin &&
                      st.underflow == under && st.max_abs_out == 32767,
                  "%s nonfinite stats (mode %d): " STATS_FMT, g_be[b]->name, md, STATS_ARGS(st));
        }
        float mx;
        int64_t nf;
        g_be[b]->cvt.maxabs_f32(x, 53, &mx, &nf);
        CHECK(nf == nn + ninf && (double)mx == maxfin, "%s maxabs nonfinite: %lld %g", g_be[b]->name,
              (long long)nf, (double)mx);
        /* only non-finite values: max 0 */
        float only[3] = {nan_pos, INFINITY, -INFINITY};
        g_be[b]->cvt.maxabs_f32(only, 3, &mx, &nf);
        CHECK(nf == 3 && mx == 0.0f, "%s maxabs of only NaN/Inf: %g %lld", g_be[b]->name,
              (double)mx, (long long)nf);
    }
}

/* quant_i64_t (a level's rounding of a rows x cols int64 matrix written transposed) against
 * the scalar quant_i64 then a transpose: every mantissa, nothing written outside the rows x cols
 * output, and the same statistics; shapes with row and column tails around the 32 x 8 blocks,
 * values of every width up to INT64_MIN/MAX, shifts across both directions. */
static void test_quant_i64_transposed(void)
{
    static const int64_t shapes[][2] = {{1, 1}, {32, 8}, {31, 7}, {33, 9}, {64, 16}, {100, 3},
                                        {5, 40}, {196, 64}, {65, 17}, {784, 32}};
    static const int shifts[] = {-70, -17, -1, 0, 1, 2, 15, 16, 24, 31, 62, 63, 64, 65};
    test_rng r;
    test_rng_seed(&r, 4242);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols, guard = 64;
        int64_t *v = malloc((size_t)n * sizeof *v);
        int16_t *want = malloc((size_t)n * 2), *lin = malloc((size_t)n * 2);
        int16_t *got = malloc((size_t)(n + 2 * guard) * 2);
        for (size_t hi = 0; hi < sizeof shifts / sizeof shifts[0]; hi++) {
            const int shift = shifts[hi];
            for (int64_t i = 0; i < n; i++) {
                const int bitsz = (int)test_rng_range(&r, 0, 63);
                int64_t w = (int64_t)(test_rng_u64(&r) >> (63 - bitsz));
                if (test_rng_u64(&r) & 1) w = -w;
                if (test_rng_range(&r, 0, 30) == 0) w = (test_rng_u64(&r) & 1) ? INT64_MIN : INT64_MAX;
                v[i] = w;
            }
            fx_qstats ref;
            fx_flex_quant_i64_scalar(v, lin, n, shift, &ref);
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < cols; j++) want[j * rows + i] = lin[i * cols + j];
            for (int b = 0; b < g_nbe; b++) {
                const fx_backend *be = g_be[b];
                if (!be->cvt.quant_i64_t) continue;
                for (int64_t i = 0; i < n + 2 * guard; i++) got[i] = 0x5A5A;
                fx_qstats st;
                stats_garbage(&st);
                be->cvt.quant_i64_t(v, got + guard, rows, cols, shift, &st);
                int64_t bad = 0, spill = 0;
                for (int64_t i = 0; i < n; i++) bad += got[guard + i] != want[i];
                for (int64_t i = 0; i < guard; i++)
                    spill += (got[i] != 0x5A5A) + (got[guard + n + i] != 0x5A5A);
                CHECK(bad == 0 && spill == 0 && stats_equal(&st, &ref),
                      "%s quant_i64_t %lldx%lld shift=%d: %lld mantissas differ, %lld written "
                      "outside; " STATS_FMT, be->name, (long long)rows, (long long)cols, shift,
                      (long long)bad, (long long)spill, STATS_ARGS(st));
            }
        }
        free(v);
        free(want);
        free(lin);
        free(got);
    }
}

/* The right shifts training writes use (1..47), on sums that mostly do not saturate, as an
 * exponent chosen from the data leaves them: quant_i64 and quant_i64_t of every backend against
 * the scalar definition, bits and statistics. Values: exact ties and their neighbours, random
 * widths below the saturation bound T = 32767 2^s + 2^(s-1) - 1, +-T itself, zeros; in a
 * second round one value of +-(T + 1) (the smallest that saturates) or an int64 extreme at a
 * random place, so that both a call with nothing saturated and one with a single saturated
 * sum anywhere in the vector body or tail are checked. */
static void test_quant_i64_bounded(void)
{
    static const int64_t shapes[][2] = {{1, 1}, {31, 7}, {33, 9}, {100, 3}, {784, 32}};
    test_rng r;
    test_rng_seed(&r, 4711);
    for (int shift = 1; shift <= 47; shift++) {
        const int64_t half = (int64_t)1 << (shift - 1);
        const int64_t t = ((int64_t)32767 << shift) + half - 1;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
            int64_t *v = malloc((size_t)n * sizeof *v);
            int16_t *lin = malloc((size_t)n * 2), *want = malloc((size_t)n * 2);
            int16_t *got = malloc((size_t)n * 2);
            for (int round = 0; round < 2; round++) {
                for (int64_t i = 0; i < n; i++) {
                    const int kind = (int)test_rng_range(&r, 0, 5);
                    int64_t w;
                    if (kind == 0) /* ties and neighbours */
                        w = (int64_t)test_rng_range(&r, -32767, 32766) * ((int64_t)1 << shift) + half +
                            test_rng_range(&r, -1, 1);
                    else if (kind == 1) /* the bound and around it, below saturation */
                        w = t - test_rng_range(&r, 0, 2);
                    else if (kind == 2) /* small: underflows and zeros */
                        w = (int64_t)test_rng_range(&r, 0, 2 * (uint64_t)half + 1);
                    else { /* random widths up to T */
                        const int bitsz = (int)test_rng_range(&r, 0, shift + 15);
                        w = (int64_t)(test_rng_u64(&r) >> (64 - bitsz - 1));
                        if (w > t) w = t;
                    }
                    v[i] = (test_rng_u64(&r) & 1) ? -w : w;
                }
                if (round == 1) {
                    static const int64_t big[] = {INT64_MIN, INT64_MAX};
                    const int64_t at = (int64_t)test_rng_range(&r, 0, (uint64_t)n - 1);
                    const int pick = (int)test_rng_range(&r, 0, 3);
                    v[at] = pick == 0 ? t + 1 : pick == 1 ? -(t + 1) : big[pick - 2];
                }
                fx_qstats ref;
                fx_flex_quant_i64_scalar(v, lin, n, shift, &ref);
                CHECK(ref.saturated == round, "bounded shift=%d: %lld saturated in the reference",
                      shift, (long long)ref.saturated);
                for (int64_t i = 0; i < rows; i++)
                    for (int64_t j = 0; j < cols; j++) want[j * rows + i] = lin[i * cols + j];
                for (int b = 0; b < g_nbe; b++) {
                    const fx_backend *be = g_be[b];
                    fx_qstats st;
                    stats_garbage(&st);
                    be->cvt.quant_i64(v, got, n, shift, &st);
                    CHECK(memcmp(got, lin, (size_t)n * 2) == 0 && stats_equal(&st, &ref),
                          "%s quant_i64 bounded n=%lld shift=%d round %d: " STATS_FMT, be->name,
                          (long long)n, shift, round, STATS_ARGS(st));
                    if (!be->cvt.quant_i64_t) continue;
                    stats_garbage(&st);
                    be->cvt.quant_i64_t(v, got, rows, cols, shift, &st);
                    CHECK(memcmp(got, want, (size_t)n * 2) == 0 && stats_equal(&st, &ref),
                          "%s quant_i64_t bounded %lldx%lld shift=%d round %d: " STATS_FMT,
                          be->name, (long long)rows, (long long)cols, shift, round,
                          STATS_ARGS(st));
                }
            }
            free(v);
            free(lin);
            free(want);
            free(got);
        }
    }
}

/* (c) for maxabs_i64: every backend that has the kernel against |v| computed here, for lengths
 * 0..100 at unaligned offsets, with INT64_MIN (|v| = 2^63), INT64_MAX, all-negative and
 * all-positive runs; the maximum placed in the vector body and in the tail in turn. */
static void test_maxabs_i64(void)
{
    test_rng r;
    test_rng_seed(&r, 64);
    int64_t buf[128];
    for (int b = 0; b < g_nbe; b++) {
        const fx_backend *be = g_be[b];
        if (!be->cvt.maxabs_i64) continue;
        long bad = 0;
        for (int64_t n = 0; n <= 100; n++)
            for (int kind = 0; kind < 5; kind++)
                for (int off = 0; off < 3; off++) {
                    int64_t *v = buf + off;
                    for (int64_t i = 0; i < n; i++) {
                        const int64_t x = (int64_t)test_rng_u64(&r) >> (int)test_rng_range(&r, 0, 62);
                        v[i] = kind == 1 ? -(x < 0 ? -(x + 1) : x) - 1 /* all negative */
                               : kind == 2 ? (x < 0 ? -(x + 1) : x)     /* all >= 0 */
                                           : x;
                    }
                    if (n > 0 && kind == 3) v[test_rng_range(&r, 0, n - 1)] = INT64_MIN;
                    if (n > 0 && kind == 4) v[test_rng_range(&r, 0, n - 1)] = INT64_MAX;
                    uint64_t want = 0;
                    for (int64_t i = 0; i < n; i++) {
                        const uint64_t a = v[i] < 0 ? (uint64_t)0 - (uint64_t)v[i] : (uint64_t)v[i];
                        want = a > want ? a : want;
                    }
                    const uint64_t got = be->cvt.maxabs_i64(v, n);
                    if (got != want && bad++ < 5)
                        fprintf(stderr, "%s maxabs_i64 n %lld kind %d: %llu, want %llu\n",
                                be->name, (long long)n, kind, (unsigned long long)got,
                                (unsigned long long)want);
                }
        CHECK(bad == 0, "%s maxabs_i64: %ld wrong maxima", be->name, bad);
    }
}

/* ---- (c') calls whose values all round within range but one ------------------------------
 * The AVX-512 level rounds a call whose values are all finite and below 32767.5 2^e on a
 * shorter route, and runs it again on the general one when one is not: in-range data with one
 * value that is (NaN, +-Inf, the saturating tie +-32767.5 2^e and beyond) or that sits right at
 * a bound without crossing it (just below the tie, an underflowing tie at 2^(e-1), -0, the
 * smallest subnormal), at positions in the first 32-value step, at its end, in the 16-value
 * tail; every backend against the scalar definition, mantissas and statistics, with and
 * without an output. */
static void test_one_outlier(void)
{
    static const int exps[] = {-128, -127, -126, -100, -14, 0, 7, 96, 110, 111, 127};
    static const int64_t lens[] = {1, 16, 33, 70};
    static const int pos[] = {0, 15, 31, 32, 47, 69};
    test_rng r;
    test_rng_seed(&r, 4242);
    float x[70];
    for (size_t k = 0; k < sizeof exps / sizeof exps[0]; k++) {
        const int e = exps[k];
        const float tie = ldexpf(32767.5f, e), half = ldexpf(0.5f, e);
        const float outliers[] = {NAN, INFINITY, -INFINITY, tie, -tie, nextafterf(tie, INFINITY),
                                  nextafterf(tie, 0.0f), -nextafterf(tie, 0.0f), half,
                                  nextafterf(half, INFINITY), -0.0f, f_from_bits(1)};
        for (size_t o = 0; o < sizeof outliers / sizeof outliers[0]; o++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
                for (size_t pi = 0; pi < sizeof pos / sizeof pos[0]; pi++) {
                    const int64_t n = lens[li];
                    if (pos[pi] >= n) continue;
                    for (int64_t i = 0; i < n; i++) /* |x| below 30000 units of 2^e */
                        x[i] = (float)ldexp(test_rng_uniform(&r) * 60000.0 - 30000.0, e);
                    x[pos[pi]] = outliers[o];
                    fx_rounding rne = {FX_ROUND_NEAREST_EVEN, 0, 0};
                    int16_t want[70], got[70];
                    fx_qstats ws, gs, ts;
                    fx_flex_quant_f32_scalar(x, want, n, e, &rne, 0, &ws);
                    for (int b = 1; b < g_nbe; b++) {
                        memset(got, 0x5A, sizeof got);
                        stats_garbage(&gs);
                        stats_garbage(&ts);
                        g_be[b]->cvt.quant_f32(x, got, n, e, &rne, 0, &gs);
                        g_be[b]->cvt.quant_f32(x, NULL, n, e, &rne, 0, &ts);
                        CHECK(memcmp(got, want, (size_t)n * 2) == 0 && stats_equal(&gs, &ws) &&
                                  stats_equal(&ts, &ws),
                              "%s quant_f32 e=%d n=%lld outlier %a at %d: " STATS_FMT,
                              g_be[b]->name, e, (long long)n, (double)outliers[o], pos[pi],
                              STATS_ARGS(gs));
                    }
                }
    }
}

int main(void)
{
    collect_backends();
    CHECK(g_nbe >= 1 && strcmp(g_be[0]->name, "scalar") == 0, "the scalar backend is available");
    printf("%s: backends:", NAME);
    for (int b = 0; b < g_nbe; b++) printf(" %s", g_be[b]->name);
    printf("\n");
    test_exhaustive_int16();
    test_reference_all_exponents();
    test_edge_values();
    test_backends_lengths();
    test_one_outlier();
    test_quant_i64_reference();
    test_quant_i64_transposed();
    test_quant_i64_bounded();
    test_maxabs_i64();
    test_stochastic();
    test_nonfinite();
    return test_finish(NAME);
}
