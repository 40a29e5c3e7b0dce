/* Batch norm's FLEX16_5/DFP16 outputs rounded in registers (bn_kernels.h: normalize_i16 and
 * backward_i16, where a level has them) against their definition: the portable kernel's row
 * rounded to odd fp32, then fx_flex_quant_f32_scalar at the same exponent, nearest-even. Every
 * mantissa and every statistic of the rounding (saturations, underflows, the largest |input|
 * to the bit, the largest |mantissa|) must agree, over:
 * - rows of 1 to 1027 values (every tail length of the 8-value vectors), several rows into
 *   one record, and no output stored (statistics only);
 * - source exponents from fp32's subnormals (2^-149) to 2^20 (the gradient's apart from x's),
 *   and output exponents from FX_BN_Q16_EXP_MIN to FX_BN_Q16_EXP_MAX;
 * - coefficients of every size the route takes, so that both of its kernels run: the folded
 *   one (every coefficient 0 or in [2^-100, 2^200]) and the unfolded one (some below 2^-100),
 *   rows of both in one record, and folded rows at the ends of the exponent ranges;
 * - values on exact ties (k + 1/2 at the output's exponent), on both sides of the saturation
 *   bound 32767.5, far beyond it, below the underflow bound 1/2, zeros of t (x at the mean,
 *   b = 0), results in fp32's subnormals, and beyond FLT_MAX (the record's statistics then
 *   decline);
 * - declines: non-mantissa sources, an exponent past either end, coefficients NaN, Inf or
 *   above 2^200.
 * At the ops, forward and backward passes with the route on and off give the same bits, and
 * the route is taken where it applies (nearest rounding) and not under stochastic rounding. */
#include "nn/bn_kernels.h"
#include "nn/bn_direct.h"
#include "nn/nn_stage.h"
#include "flex/flex_kernels.h"
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAXS = 1100, MAXROWS = 3 };

static int same_double(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static int same_stats(const fx_qstats *a, const fx_qstats *b)
{
    return a->saturated == b->saturated && a->nonfinite == b->nonfinite &&
           a->underflow == b->underflow && same_double(a->max_abs_in, b->max_abs_in) &&
           a->max_abs_out == b->max_abs_out;
}

/* one row's coefficients: normalize (mu, a, b) or backward (mu, is, k, mdy, mdyx) */
typedef struct row_coefs {
    double c[5];
} row_coefs;

/* rows of S values from x (and g), one coefficient set each, rounded at e by the definition
 * (want, sw) and by the level's kernel (got, sg); returns the kernel's answer (0: declined).
 * *whole: whether the record's statistics came back (fx_bn_q16_stats). */
static int run_rows(const fx_bn_kernels *k, int bwd, const fx_bn_src *x, const fx_bn_src *g,
                    int64_t S, int nrows, const row_coefs *rc, int e, int store, int16_t *want,
                    fx_qstats *sw, int16_t *got, fx_qstats *sg, int *whole)
{
    static float row[MAXS * MAXROWS];
    fx_qstats_init(sw);
    fx_bn_q16 acc;
    memset(&acc, 0, sizeof acc);
    int took = 1;
    for (int r = 0; r < nrows; r++) {
        const double *c = rc[r].c;
        const int64_t off = r * S;
        if (bwd) {
            fx_bn_kernels_portable.backward(x, g, off, row, S, c[0], c[1], c[2], c[3], c[4], 1,
                                            NULL);
            took = took && k->backward_i16(x, g, off, store ? got + off : NULL, S, c[0], c[1],
                                           c[2], c[3], c[4], e, &acc);
        } else {
            fx_bn_kernels_portable.normalize(x, off, row, S, c[0], c[1], c[2], 1, NULL);
            took = took &&
                   k->normalize_i16(x, off, store ? got + off : NULL, S, c[0], c[1], c[2], e, &acc);
        }
        fx_qstats st;
        fx_flex_quant_f32_scalar(row, want + off, S, e, NULL, off, &st);
        fx_qstats_merge(sw, &st);
    }
    *whole = took && fx_bn_q16_stats(&acc, sg);
    return took;
}

static void check_rows(const fx_bn_kernels *k, const char *level, int bwd, const fx_bn_src *x,
                       const fx_bn_src *g, int64_t S, int nrows, const row_coefs *rc, int e,
                       int expect_whole, const char *what)
{
    static int16_t want[MAXS * MAXROWS], got[MAXS * MAXROWS];
    /* the statistics come back where every |t| is within fp32's range (-1: find out) */
    double max_t = 0.0;
    for (int r = 0; r < nrows; r++)
        for (int64_t i = r * S; i < (r + 1) * S; i++) {
            const double *c = rc[r].c;
            const double xhat = (fx_bn_at(x, i) - c[0]) * c[1];
            const double t = bwd ? c[2] * (fx_bn_at(g, i) - c[3] - xhat * c[4]) : xhat + c[2];
            max_t = fabs(t) > max_t ? fabs(t) : max_t;
        }
    if (expect_whole < 0) expect_whole = max_t <= FLT_MAX;
    CHECK(expect_whole == (max_t <= FLT_MAX), "%s %s: the case's largest |t| %a is not as meant",
          level, what, max_t);
    for (int store = 1; store >= 0; store--) {
        fx_qstats sw, sg;
        memset(got, 0x5a, sizeof got);
        int whole;
        const int took =
            run_rows(k, bwd, x, g, S, nrows, rc, e, store, want, &sw, got, &sg, &whole);
        CHECK(took, "%s %s %s: declined (S %lld, e %d)", level, bwd ? "backward" : "normalize",
              what, (long long)S, e);
        CHECK(whole == expect_whole, "%s %s %s: statistics %s (S %lld, e %d)", level,
              bwd ? "backward" : "normalize", what, whole ? "returned" : "declined",
              (long long)S, e);
        if (!took || !whole) continue;
        int64_t bad = -1;
        for (int64_t i = 0; store && i < S * nrows && bad < 0; i++)
            if (want[i] != got[i]) bad = i;
        CHECK(bad < 0, "%s %s %s (S %lld, e %d): mantissa %lld is %d, the definition %d", level,
              bwd ? "backward" : "normalize", what, (long long)S, e, (long long)bad,
              bad < 0 ? 0 : got[bad], bad < 0 ? 0 : want[bad]);
        CHECK(same_stats(&sw, &sg),
              "%s %s %s (S %lld, e %d, store %d): statistics sat %lld/%lld uf %lld/%lld "
              "max_in %a/%a max_out %d/%d nonfinite %lld/%lld",
              level, bwd ? "backward" : "normalize", what, (long long)S, e, store,
              (long long)sg.saturated, (long long)sw.saturated, (long long)sg.underflow,
              (long long)sw.underflow, sg.max_abs_in, sw.max_abs_in, sg.max_abs_out,
              sw.max_abs_out, (long long)sg.nonfinite, (long long)sw.nonfinite);
    }
}

/* random mantissas (and a few zeros and extremes) into m */
static void fill_mantissas(test_rng *r, int16_t *m, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const int64_t pick = test_rng_range(r, 0, 19);
        m[i] = pick == 0   ? 0
               : pick == 1 ? 32767
               : pick == 2 ? -32767
               : pick < 10 ? (int16_t)test_rng_range(r, -300, 300)
                           : (int16_t)test_rng_range(r, -32767, 32767);
    }
}

/* Random data and coefficients scaled so that the outputs spread over [-2^17, 2^17] units of
 * 2^e (saturations both ways, ties now and then, small values that underflow). */
static void random_rows(const fx_bn_kernels *k, const char *level, test_rng *r)
{
    static int16_t xm[MAXS * MAXROWS], gm[MAXS * MAXROWS];
    static const int64_t lens[] = {1, 3, 7, 8, 9, 15, 16, 17, 64, 100, 1027};
    static const int xexps[] = {-149, -130, -40, -15, 0, 20};
    static const int oexps[] = {FX_BN_Q16_EXP_MIN, -100, -30, -12, 0, 9, 40, FX_BN_Q16_EXP_MAX};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (size_t xi = 0; xi < sizeof xexps / sizeof *xexps; xi++)
            for (size_t oi = 0; oi < sizeof oexps / sizeof *oexps; oi++) {
                const int64_t S = lens[li];
                const int nrows = li % 2 ? MAXROWS : 1;
                const int ex = xexps[xi], e = oexps[oi];
                /* the gradient at its own exponent, as dy's differs from x's in training */
                const int eg = ex - 9 >= -149 ? ex - 9 : ex + 5;
                /* a or k would pass 2^200: declined (see declines) */
                if (e - ex > 190 || e - eg > 190) continue;
                fill_mantissas(r, xm, S * nrows);
                fill_mantissas(r, gm, S * nrows);
                const fx_bn_src x = {xm, FX_BN_I16, ldexp(1.0, ex)};
                const fx_bn_src g = {gm, FX_BN_I16, ldexp(1.0, eg)};
                row_coefs rc[MAXROWS];
                for (int j = 0; j < nrows; j++) {
                    /* |x| up to 2^(ex+15); a scales that to about 2^(e+17) */
                    const double a = ldexp(0.5 + test_rng_uniform(r), e + 2 - ex) *
                                     (test_rng_uniform(r) < 0.5 ? -1.0 : 1.0);
                    const double mu = ldexp(test_rng_uniform(r) - 0.5, ex + 10);
                    const double b = ldexp(floor(test_rng_uniform(r) * 64.0) - 32.0, e - 1);
                    rc[j] = (row_coefs){{mu, a, b, 0.0, 0.0}};
                }
                check_rows(k, level, 0, &x, NULL, S, nrows, rc, e, -1, "random");
                for (int j = 0; j < nrows; j++) {
                    const double is = ldexp(0.5 + test_rng_uniform(r), -ex - 14);
                    const double kk = ldexp(0.5 + test_rng_uniform(r), e + 3 - eg);
                    rc[j] = (row_coefs){{ldexp(test_rng_uniform(r) - 0.5, ex + 12), is, kk,
                                         ldexp(test_rng_uniform(r) - 0.5, eg + 6),
                                         ldexp(test_rng_uniform(r) - 0.5, eg + 14)}};
                }
                check_rows(k, level, 1, &x, &g, S, nrows, rc, e, -1, "random");
            }
}

/* Values placed on the rounding's edges: t = m 2^(e-1) (a = 1, mu = 0) puts every odd m on a
 * tie; with a = 2 and b = 2^(e-1) the outputs are m + 1/2, so m = 32767 is 32767.5 (saturates)
 * and 32766 is 32766.5 (does not); tiny a gives underflows; x at the mean with b = 0 gives
 * zeros of t; an output exponent near fp32's subnormals puts the values there. */
static void edge_rows(const fx_bn_kernels *k, const char *level)
{
    static int16_t xm[MAXS], gm[MAXS];
    enum { S = 203 };
    static const int oexps[] = {FX_BN_Q16_EXP_MIN, -135, -126, -20, 0, 17, 100};
    for (int i = 0; i < S; i++) {
        xm[i] = (int16_t)(i < 100 ? i - 50 : 32767 - (i - 100) % 5 - 5 * (i % 2));
        gm[i] = (int16_t)(i % 2 ? -xm[i] : xm[i]);
    }
    xm[7] = 32767;
    xm[8] = -32767;
    xm[9] = 32766;
    xm[10] = -32766;
    xm[201] = 3; /* a zero of t in the row's tail too (the zeros-of-t case) */
    for (size_t oi = 0; oi < sizeof oexps / sizeof *oexps; oi++) {
        const int e = oexps[oi];
        const fx_bn_src x = {xm, FX_BN_I16, ldexp(1.0, e - 1 > -149 ? e - 1 : -149)};
        const double unit = ldexp(1.0, e - 1) / x.scale; /* t = m 2^(e-1) at a = unit */
        const row_coefs ties = {{0.0, unit, 0.0, 0.0, 0.0}};
        check_rows(k, level, 0, &x, NULL, S, 1, &ties, e, 1, "ties");
        const row_coefs sat = {{0.0, 2.0 * unit, ldexp(1.0, e - 1), 0.0, 0.0}};
        check_rows(k, level, 0, &x, NULL, S, 1, &sat, e, 1, "saturation bound");
        const row_coefs nsat = {{0.0, -2.0 * unit, -ldexp(1.0, e - 1), 0.0, 0.0}};
        check_rows(k, level, 0, &x, NULL, S, 1, &nsat, e, 1, "negative saturation bound");
        const row_coefs far = {{0.0, ldexp(unit, 40), 0.0, 0.0, 0.0}};
        check_rows(k, level, 0, &x, NULL, S, 1, &far, e, e + 54 < 128, "far beyond");
        const row_coefs tiny = {{0.0, ldexp(unit, -16), 0.0, 0.0, 0.0}};
        check_rows(k, level, 0, &x, NULL, S, 1, &tiny, e, 1, "underflow");
        const row_coefs zeros = {{3.0 * x.scale, unit, 0.0, 0.0, 0.0}}; /* x = 3 gives t = 0 */
        check_rows(k, level, 0, &x, NULL, S, 1, &zeros, e, 1, "zeros of t");
        /* backward: k (g - mdy - xhat mdyx) with mdyx = 0 is k (g - mdy): ties as above */
        const row_coefs bties = {{0.0, 1.0, unit, 0.0, 0.0}};
        const fx_bn_src g = {gm, FX_BN_I16, x.scale};
        check_rows(k, level, 1, &x, &g, S, 1, &bties, e, 1, "ties");
        const row_coefs bsat = {{0.0, 1.0, 2.0 * unit, -ldexp(1.0, e - 2) / unit, 0.0}};
        check_rows(k, level, 1, &x, &g, S, 1, &bsat, e, 1, "saturation bound");
        const row_coefs bmix = {{1.5 * x.scale, 1.0 / x.scale, unit, 0.0, 0.5 * x.scale}};
        check_rows(k, level, 1, &x, &g, S, 1, &bmix, e, 1, "mixed");
    }
    /* the top exponent: mantissas m 2^126 with |m| <= 3 stay within FLT_MAX, and 3 2^126 is
     * 1.5 units of 2^127, a tie (to 2) */
    static int16_t top[S];
    for (int i = 0; i < S; i++) top[i] = (int16_t)(i % 7 - 3);
    const fx_bn_src xtop = {top, FX_BN_I16, 0x1p112};
    const row_coefs at_top = {{0.0, 0x1p14, 0.0, 0.0, 0.0}};
    check_rows(k, level, 0, &xtop, NULL, S, 1, &at_top, FX_BN_Q16_EXP_MAX, 1, "top exponent");
    const fx_bn_src gtop = {top, FX_BN_I16, 0x1p112};
    const row_coefs bat_top = {{0.0, 1.0, 0x1p14, 0.0, 0.0}};
    check_rows(k, level, 1, &xtop, &gtop, S, 1, &bat_top, FX_BN_Q16_EXP_MAX, 1, "top exponent");
    /* beyond FLT_MAX (x would be FLT_MAX): the row is taken, its statistics decline */
    const fx_bn_src big = {xm, FX_BN_I16, 0x1p100};
    const row_coefs over = {{0.0, 0x1p60, 0.0, 0.0, 0.0}};
    check_rows(k, level, 0, &big, NULL, S, 1, &over, 0, 0, "beyond FLT_MAX");
}

/* The folded kernels' bounds (batchnorm_avx2.c: q16_fold_ok): one record whose rows straddle
 * the threshold (a coefficient at 2^-100, folded, and just below it, unfolded), and folded rows
 * at the ends of the exponent ranges, with x at the mean but for a few units (cancellation) and
 * coefficients near 2^200. */
static void fold_bounds(const fx_bn_kernels *k, const char *level, test_rng *r)
{
    static int16_t xm[MAXS * MAXROWS], gm[MAXS * MAXROWS];
    enum { S = 67 };
    fill_mantissas(r, xm, S * MAXROWS);
    fill_mantissas(r, gm, S * MAXROWS);
    /* x up to 2^35; a near 2^-100 puts t near 2^-65: e = -80 spreads it over the grid */
    const fx_bn_src x = {xm, FX_BN_I16, 0x1p20}, g = {gm, FX_BN_I16, 0x1p20};
    const double below = nextafter(0x1p-100, 0.0);
    const row_coefs straddle[MAXROWS] = {{{0.0, 0x1p-100, 0x1p-81, 0.0, 0.0}},
                                         {{0.0, below, 0x1p-81, 0.0, 0.0}},
                                         {{0x1p-100, 0x1.8p-100, -0x1p-82, 0.0, 0.0}}};
    check_rows(k, level, 0, &x, NULL, S, MAXROWS, straddle, -80, 1, "fold threshold");
    const row_coefs bstraddle[MAXROWS] = {{{0.0, 0x1p-100, 0x1p-100, 0x1p-60, 0x1p-100}},
                                          {{0.0, 1.0, below, 0x1p-60, 0.0}},
                                          {{0x1p-100, 0x1p-99, 0x1.8p-100, 0.0, below}}};
    check_rows(k, level, 1, &x, &g, S, MAXROWS, bstraddle, -80, 1, "fold threshold");
    /* the smallest mantissa weight at the largest output exponent (everything underflows,
     * counted) and the largest at the smallest (everything saturates), x near the mean */
    for (int i = 0; i < S; i++) xm[i] = (int16_t)(3 + i % 5 - 2);
    const fx_bn_src xs = {xm, FX_BN_I16, 0x1p-149}, gs = {gm, FX_BN_I16, 0x1p-149};
    const row_coefs small = {{3.0 * 0x1p-149 + 0x1p-152, 0x1p200, 0x1p-100, 0.0, 0.0}};
    check_rows(k, level, 0, &xs, NULL, S, 1, &small, FX_BN_Q16_EXP_MAX, 1, "2^-149 at e 127");
    const row_coefs bsmall = {{3.0 * 0x1p-149, 0x1p100, 0x1p200, 0x1p-140, 0x1p-100}};
    check_rows(k, level, 1, &xs, &gs, S, 1, &bsmall, FX_BN_Q16_EXP_MAX, 1, "2^-149 at e 127");
    const fx_bn_src xl = {xm, FX_BN_I16, 0x1p112}, gl = {gm, FX_BN_I16, 0x1p100};
    const row_coefs large = {{3.0 * 0x1p112 + 0x1p80, 0x1p-100, -0x1p-20, 0.0, 0.0}};
    check_rows(k, level, 0, &xl, NULL, S, 1, &large, FX_BN_Q16_EXP_MIN, -1, "2^112 at e -140");
    const row_coefs blarge = {{3.0 * 0x1p112, 0x1p-112, 0x1p-100, 0x1p110, 0x1p-100}};
    check_rows(k, level, 1, &xl, &gl, S, 1, &blarge, FX_BN_Q16_EXP_MIN, -1, "2^112 at e -140");
}

/* Training's regime, which random_rows (outputs spread to +-2^17 units, most of them saturated
 * or tiny) seldom reaches: normal mantissas, outputs over about +-2^14.5 units of 2^e as a DFP16
 * write's exponent puts them, in records of three long rows; then rows in which every other
 * value lies on a tie, with the largest |t| on a tie or one unit from the second largest. */
static void training_rows(const fx_bn_kernels *k, const char *level, test_rng *r)
{
    static int16_t xm[MAXS * MAXROWS], gm[MAXS * MAXROWS];
    enum { S = 1027 };
    for (int rep = 0; rep < 40; rep++) {
        const int ex = -20 + rep % 7, eg = ex - 12, e = ex + (rep % 3) - 1;
        const double sx = 2000.0 + 500.0 * (rep % 5);
        for (int64_t i = 0; i < S * MAXROWS; i++) {
            const double vx = sx * test_rng_normal(r), vg = 3000.0 * test_rng_normal(r);
            xm[i] = (int16_t)(fabs(vx) < 32767.0 ? vx : 0.0);
            gm[i] = (int16_t)(fabs(vg) < 32767.0 ? vg : 0.0);
        }
        const fx_bn_src x = {xm, FX_BN_I16, ldexp(1.0, ex)};
        const fx_bn_src g = {gm, FX_BN_I16, ldexp(1.0, eg)};
        row_coefs rc[MAXROWS];
        for (int j = 0; j < MAXROWS; j++) {
            /* xhat of about +-4 standard deviations, gamma about 1, beta small */
            const double mu = ldexp(sx * (test_rng_uniform(r) - 0.5) * 0.2, ex);
            const double is = 1.0 / ldexp(sx, ex);
            const double gamma = 0.5 + test_rng_uniform(r);
            const double a = gamma * is * ldexp(1.0, 12 + rep % 2);
            const double b = ldexp(test_rng_uniform(r) - 0.5, e + 10);
            rc[j] = (row_coefs){{mu, a, b, 0.0, 0.0}};
        }
        check_rows(k, level, 0, &x, NULL, S, MAXROWS, rc, e, 1, "training");
        for (int j = 0; j < MAXROWS; j++) {
            const double is = 1.0 / ldexp(sx, ex);
            const double kk = ldexp(0.5 + test_rng_uniform(r), e + 2 - eg);
            rc[j] = (row_coefs){{ldexp(sx * 0.01 * (test_rng_uniform(r) - 0.5), ex), is, kk,
                                 ldexp(300.0 * (test_rng_uniform(r) - 0.5), eg),
                                 ldexp(900.0 * (test_rng_uniform(r) - 0.5), eg)}};
        }
        check_rows(k, level, 1, &x, &g, S, MAXROWS, rc, e, 1, "training");
    }
    /* ties: with a = unit and mu = b = 0, t 2^-e = m / 2, a tie at every odd m; the largest
     * |m| placed on an odd value (its vector goes to double) or on an even one beside an odd
     * one a unit smaller (the two vectors' bounds overlap) */
    for (int rep = 0; rep < 8; rep++) {
        const int e = -10 + rep, ex = e - 1;
        for (int64_t i = 0; i < S; i++) {
            const int64_t v = test_rng_range(r, -20000, 20000);
            xm[i] = (int16_t)(i % 2 ? v | 1 : v & ~(int64_t)1);
            gm[i] = xm[i];
        }
        const int64_t at = test_rng_range(r, 0, S - 1), at2 = test_rng_range(r, 0, S - 1);
        xm[at] = (int16_t)(rep % 2 ? 30001 : -30000);
        xm[at2] = (int16_t)(rep % 2 ? -29999 : 29999);
        for (int64_t i = 0; i < S; i++) gm[i] = xm[i];
        const fx_bn_src x = {xm, FX_BN_I16, ldexp(1.0, ex)}, g = {gm, FX_BN_I16, ldexp(1.0, ex)};
        const row_coefs ties = {{0.0, 1.0, 0.0, 0.0, 0.0}};
        check_rows(k, level, 0, &x, NULL, S, 1, &ties, e, 1, "training ties");
        /* backward with k = 1, mdy = mdyx = 0: t = g, the same ties */
        const row_coefs bties = {{0.0, 1.0, 1.0, 0.0, 0.0}};
        check_rows(k, level, 1, &x, &g, S, 1, &bties, e, 1, "training ties");
    }
}

static void declines(const fx_bn_kernels *k, const char *level)
{
    int16_t m[16] = {1, 2, 3};
    float f[16] = {1.0f};
    int16_t out[16];
    fx_bn_q16 acc;
    memset(&acc, 0, sizeof acc);
    const fx_bn_src xi = {m, FX_BN_I16, 1.0}, xf = {f, FX_BN_F32, 1.0};
    const fx_bn_src xbig = {m, FX_BN_I16, 0x1p113}; /* not an exact mantissa source */
    CHECK(!k->normalize_i16(&xf, 0, out, 16, 0.0, 1.0, 0.0, 0, &acc), "%s: fp32 source taken",
          level);
    CHECK(!k->normalize_i16(&xbig, 0, out, 16, 0.0, 1.0, 0.0, 0, &acc),
          "%s: mantissas at 2^113 taken", level);
    CHECK(!k->normalize_i16(&xi, 0, out, 16, 0.0, 1.0, 0.0, FX_BN_Q16_EXP_MIN - 1, &acc),
          "%s: exponent below the least taken", level);
    CHECK(!k->normalize_i16(&xi, 0, out, 16, 0.0, 1.0, 0.0, FX_BN_Q16_EXP_MAX + 1, &acc),
          "%s: exponent above the largest taken", level);
    const double bad[] = {NAN, INFINITY, -INFINITY, 0x1p201};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(!k->normalize_i16(&xi, 0, out, 16, bad[i], 1.0, 0.0, 0, &acc) &&
                  !k->normalize_i16(&xi, 0, out, 16, 0.0, bad[i], 0.0, 0, &acc) &&
                  !k->normalize_i16(&xi, 0, out, 16, 0.0, 1.0, bad[i], 0, &acc),
              "%s: normalize coefficient %g taken", level, bad[i]);
        for (int c = 0; c < 5; c++) {
            double v[5] = {0.0, 1.0, 1.0, 0.0, 0.0};
            v[c] = bad[i];
            CHECK(!k->backward_i16(&xi, &xi, 0, out, 16, v[0], v[1], v[2], v[3], v[4], 0, &acc),
                  "%s: backward coefficient %d = %g taken", level, c, bad[i]);
        }
    }
    CHECK(!k->backward_i16(&xi, &xf, 0, out, 16, 0.0, 1.0, 1.0, 0.0, 0.0, 0, &acc),
          "%s: backward with an fp32 gradient taken", level);
    CHECK(k->normalize_i16(&xi, 0, out, 16, 0.0, 0x1p200, 0.0, 0, &acc),
          "%s: coefficient 2^200 declined", level);
}

/* ---- the ops with the route on and off ------------------------------------------------------ */
static void op_pass(fmt_t f, int stochastic, int on, int16_t *y, int16_t *dx, double *st,
                    int64_t *pieces)
{
    fx_bn_q16_set_enabled(on);
    const int64_t shape[4] = {6, 5, 9, 11}, cs[1] = {5};
    const int64_t n = 6 * 5 * 9 * 11;
    tensor_t *x = tensor_new(f, 4, shape), *yt = tensor_new(f, 4, shape);
    tensor_t *dy = tensor_new(f, 4, shape), *dxt = tensor_new(f, 4, shape);
    tensor_t *gm = tensor_new(FMT_FP32, 1, cs), *bt = tensor_new(FMT_FP32, 1, cs);
    tensor_t *dg = tensor_new(FMT_FP32, 1, cs), *db = tensor_new(FMT_FP32, 1, cs);
    float *v = malloc(sizeof(float) * (size_t)n);
    const float gamma[5] = {0.5f, 1.0f, 1.5f, -0.75f, 2.0f};
    const float beta[5] = {0.0f, 0.1f, -0.2f, 0.3f, 0.0f};
    float sm[5], si[5];
    CHECK_STATUS(tensor_from_f32(gm, gamma), FX_OK);
    CHECK_STATUS(tensor_from_f32(bt, beta), FX_OK);
    if (stochastic) {
        CHECK_STATUS(tensor_set_rounding(yt, FX_ROUND_STOCHASTIC, 5), FX_OK);
        CHECK_STATUS(tensor_set_rounding(dxt, FX_ROUND_STOCHASTIC, 6), FX_OK);
    }
    test_rng r;
    test_rng_seed(&r, 99);
    const int64_t p0 = fx_bn_q16_pieces();
    for (int rep = 0; rep < 3; rep++) {
        for (int64_t i = 0; i < n; i++) v[i] = (float)((1.0 + 20.0 * rep) * test_rng_normal(&r));
        CHECK_STATUS(tensor_from_f32(x, v), FX_OK);
        for (int64_t i = 0; i < n; i++) v[i] = (float)(1e-3 * test_rng_normal(&r));
        CHECK_STATUS(tensor_from_f32(dy, v), FX_OK);
        CHECK_STATUS(tensor_batchnorm(yt, x, gm, bt, NULL, NULL, sm, si, 0.1, 1e-5, 1), FX_OK);
        CHECK_STATUS(tensor_batchnorm_backward(dxt, dg, db, dy, x, gm, sm, si), FX_OK);
        CHECK_STATUS(tensor_get_raw(yt, y + rep * n), FX_OK);
        CHECK_STATUS(tensor_get_raw(dxt, dx + rep * n), FX_OK);
        CHECK_STATUS(tensor_stat(yt, "exp", &st[4 * rep]), FX_OK);
        CHECK_STATUS(tensor_stat(yt, "saturated", &st[4 * rep + 1]), FX_OK);
        CHECK_STATUS(tensor_stat(dxt, "exp", &st[4 * rep + 2]), FX_OK);
        CHECK_STATUS(tensor_stat(dxt, "underflow", &st[4 * rep + 3]), FX_OK);
    }
    *pieces = fx_bn_q16_pieces() - p0;
    fx_bn_q16_set_enabled(1);
    tensor_free(x);
    tensor_free(yt);
    tensor_free(dy);
    tensor_free(dxt);
    tensor_free(gm);
    tensor_free(bt);
    tensor_free(dg);
    tensor_free(db);
    free(v);
}

static void ops_on_off(void)
{
    enum { N = 6 * 5 * 9 * 11 };
    static int16_t y[2][3 * N], dx[2][3 * N];
    const fx_backend *be = fx_backend_active();
    const int has = be && be->bn && be->bn->normalize_i16;
    static const fmt_t fmts[2] = {FMT_FLEX16_5, FMT_DFP16};
    for (int fi = 0; fi < 2; fi++)
        for (int sr = 0; sr < 2; sr++) {
            double st[2][12];
            int64_t pieces[2];
            op_pass(fmts[fi], sr, 1, y[0], dx[0], st[0], &pieces[0]);
            op_pass(fmts[fi], sr, 0, y[1], dx[1], st[1], &pieces[1]);
            CHECK(memcmp(y[0], y[1], sizeof y[0]) == 0 && memcmp(dx[0], dx[1], sizeof dx[0]) == 0,
                  "%s %s, %s: y or dx differ with the registers route off", be->name,
                  fmt_name(fmts[fi]), sr ? "stochastic" : "nearest");
            CHECK(memcmp(st[0], st[1], sizeof st[0]) == 0, "%s %s, %s: statistics differ",
                  be->name, fmt_name(fmts[fi]), sr ? "stochastic" : "nearest");
            CHECK(pieces[1] == 0, "%s: the route ran while switched off", be->name);
            CHECK(sr || !has ? pieces[0] == 0 : pieces[0] > 0,
                  "%s %s, %s: the registers route rounded %lld pieces", be->name,
                  fmt_name(fmts[fi]), sr ? "stochastic" : "nearest", (long long)pieces[0]);
        }
}

int main(void)
{
    int levels = 0;
    for (int b = 0; b < FX_BACKEND_COUNT; b++) {
        const fx_backend *be = fx_backend_get(b);
        if (!be || !be->available || !be->bn || !be->bn->normalize_i16) continue;
        if (b > 0 && fx_backend_get(b - 1) && fx_backend_get(b - 1)->bn == be->bn) continue;
        levels++;
        test_rng r;
        test_rng_seed(&r, 31 + (uint64_t)b);
        declines(be->bn, be->name);
        edge_rows(be->bn, be->name);
        fold_bounds(be->bn, be->name, &r);
        random_rows(be->bn, be->name, &r);
        training_rows(be->bn, be->name, &r);
    }
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) { /* the ops on every backend */
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        ops_on_off();
    }
    if (!levels) printf("test_bn_i16_out: no CPU level with registers-rounded outputs here\n");
    return test_finish("test_bn_i16_out");
}
