/* The one-pass add/sub, relu and relu gradient of FLEX16_5 / DFP16 tensors
 * (src/core/shared_binary.c).
 *
 * 1. Kernels: every backend's sum2_maxabs / sum2_quant against the definition (the aligned sums
 *    widened to int64, then the scalar quant_i64): mantissas and every statistic, for all
 *    shifts from -34 to 40, both shifted operands, a broadcast or advancing b, add and sub,
 *    with and without a gate,
 *    lengths around the 16-lane vectors, and the extreme mantissas +-32767 and -32768; and a
 *    bias plane at a's exponent (the AVX-512 level's int16 route) through every remainder
 *    of b around its tie, with a at the extremes and where the sum is 0. A level's
 *    sum2_quant_gated (both outputs of an add and its ReLU, or of a gradient sum and its gate,
 *    in one pass) on the same cases against sum2_quant followed by the gated rounding.
 * 2. The op: on every backend, sequences of tensor_add / tensor_sub into FLEX16_5 (Autoflex,
 *    with a jump that overflows and recomputes) and DFP16 outputs, same-shape, per-channel and
 *    per-column operands, exponent gaps 0 to 15, compared with the dispatcher's int64-stage
 *    route (the fast path switched off): the same mantissas, exponent, statistics and trace
 *    record after every write; relu and relu_backward likewise against their int16-stage
 *    route. The writes must take the rounding at a guessed exponent (its counter moves): the
 *    sequences' scale jumps make the guess wrong now and then, so both the reused rounding and
 *    the rounding again are compared. The path must actually be taken (its counter moves), and the
 *    cases it must not take (gaps above 15, in place, a partial view, a transposed operand)
 *    still give the dispatcher's results. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "core/shared_binary.h"
#include "flex/flex_kernels.h"
#include "flex/flex_math.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int16_t rand_mant(test_rng *r)
{
    switch (test_rng_range(r, 0, 7)) {
    case 0: return 32767;
    case 1: return -32767;
    case 2: return -32768;
    case 3: return 0;
    case 4: return (int16_t)test_rng_range(r, -3, 3);
    default: return (int16_t)test_rng_range(r, -32768, 32767);
    }
}

enum { NMAX = 1100 };

static int same_stats(const fx_qstats *x, const fx_qstats *y)
{
    return x->saturated == y->saturated && x->underflow == y->underflow &&
           x->nonfinite == y->nonfinite && x->max_abs_in == y->max_abs_in &&
           x->max_abs_out == y->max_abs_out;
}

/* be's sum2_quant against the definition on n <= NMAX values: mantissas (nothing written past
 * n either) and statistics; *want_st receives the definition's statistics. */
static int quant_matches(const fx_backend *be, const fx_sum2 *p, int64_t n, int shift,
                         fx_qstats *want_st)
{
    int16_t got[NMAX], want[NMAX];
    fx_qstats sg;
    memset(got, 0x55, sizeof got);
    memset(want, 0x55, sizeof want);
    be->cvt.sum2_quant(p, n, got, shift, &sg);
    fx_flex_sum2_quant_scalar(p, n, want, shift, want_st);
    return memcmp(got, want, sizeof got) == 0 && same_stats(&sg, want_st);
}

/* be's sum2_quant_gated (where it has one) against its definition, sum2_quant's and then the
 * plain gated rounding at shift 0 of those mantissas (by gate, or by their own signs): both
 * outputs (nothing written past n) and both statistics. 1 where the level has none. */
static int gated_matches(const fx_backend *be, const fx_sum2 *p, int64_t n, int shift,
                         const int16_t *gate)
{
    if (!be->cvt.sum2_quant_gated) return 1;
    static const int16_t zero = 0;
    int16_t got[NMAX], want[NMAX], ggot[NMAX], gwant[NMAX];
    fx_qstats sg, sw, gg, gw;
    memset(got, 0x55, sizeof got);
    memset(want, 0x55, sizeof want);
    memset(ggot, 0x55, sizeof ggot);
    memset(gwant, 0x55, sizeof gwant);
    be->cvt.sum2_quant_gated(p, n, got, shift, &sg, gate, ggot, &gg);
    fx_flex_sum2_quant_scalar(p, n, want, shift, &sw);
    const fx_sum2 q = {want, &zero, 0, 0, 0, 0, gate ? gate : want};
    fx_flex_sum2_quant_scalar(&q, n, gwant, 0, &gw);
    return memcmp(got, want, sizeof got) == 0 && same_stats(&sg, &sw) &&
           memcmp(ggot, gwant, sizeof ggot) == 0 && same_stats(&gg, &gw);
}

static void check_kernels(const fx_backend *be, test_rng *r)
{
    int16_t a[NMAX], b[NMAX], g[NMAX], g2[NMAX];
    const int64_t lens[] = {0, 1, 15, 16, 17, 31, 33, 64, 1000, 1100};
    long bad = 0, cases = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const int64_t n = lens[li];
        for (int64_t i = 0; i < NMAX; i++) {
            a[i] = rand_mant(r);
            b[i] = rand_mant(r);
            g[i] = rand_mant(r);
            g2[i] = rand_mant(r);
        }
        for (int gap = 0; gap <= 15; gap += (gap < 3 ? 1 : 4)) {
            for (int side = 0; side < 4; side++) /* 2, 3: gated by g */
                for (int b_inc = 0; b_inc <= 1; b_inc++)
                    for (int neg = 0; neg <= 1; neg++) {
                        const fx_sum2 p = {a, b, b_inc, side & 1 ? gap : 0, side & 1 ? 0 : gap,
                                           neg, side >= 2 ? g : NULL};
                        CHECK(be->cvt.sum2_maxabs(&p, n) == fx_flex_sum2_maxabs_scalar(&p, n),
                              "%s maxabs n %lld gap %d", be->name, (long long)n, gap);
                        for (int shift = -34; shift <= 40; shift++) {
                            fx_qstats sw, st;
                            cases++;
                            if (!quant_matches(be, &p, n, shift, &sw) && bad++ < 5)
                                fprintf(stderr, "%s n %lld gap %d side %d b_inc %d neg %d shift %d\n",
                                        be->name, (long long)n, gap, side, b_inc, neg, shift);
                            for (int gk = 0; gk < 2; gk++)
                                if (!gated_matches(be, &p, n, shift, gk ? g2 : NULL) &&
                                    bad++ < 5)
                                    fprintf(stderr,
                                            "%s gated %d n %lld gap %d side %d b_inc %d neg %d "
                                            "shift %d\n",
                                            be->name, gk, (long long)n, gap, side, b_inc, neg,
                                            shift);
                            /* a statistics-only trial gives the same statistics */
                            be->cvt.sum2_quant(&p, n, NULL, shift, &st);
                            CHECK(same_stats(&st, &sw), "%s trial statistics, shift %d", be->name,
                                  shift);
                        }
                    }
        }
    }
    /* plain int16 values (b = 0, no shift of a: the int16-stage quantiser of the write path),
     * which the AVX-512 level computes in 16-bit lanes */
    static const int16_t zero = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const int64_t n = lens[li];
        for (int64_t i = 0; i < NMAX; i++) {
            a[i] = rand_mant(r);
            g[i] = rand_mant(r);
        }
        for (int neg = 0; neg <= 3; neg++) { /* 2, 3: gated by g, and by a itself (ReLU) */
            const fx_sum2 p = {a, &zero, 0, 0, 0, neg & 1, neg == 2 ? g : neg == 3 ? a : NULL};
            for (int shift = -18; shift <= 20; shift++) {
                fx_qstats sw;
                cases++;
                if (!quant_matches(be, &p, n, shift, &sw) && bad++ < 5)
                    fprintf(stderr, "%s plain n %lld shift %d\n", be->name, (long long)n, shift);
                for (int gk = 0; gk < 2; gk++)
                    if (!gated_matches(be, &p, n, shift, gk ? g2 : NULL) && bad++ < 5)
                        fprintf(stderr, "%s gated %d plain n %lld shift %d\n", be->name, gk,
                                (long long)n, shift);
            }
        }
    }
    /* a bias plane at a's exponent (one b, sb = 0, shift = sa), which the AVX-512 level
     * computes as a saturating int16 add: every remainder class of b around the tie at each
     * shift, with a at the extremes, around -floor(b / 2^s) (underflow and v = 0) and of both
     * parities (the ties' rounding to even) */
    for (int sh = 0; sh <= 15; sh++) {
        int32_t bs[40];
        int nb = 0;
        const int32_t extremes[6] = {32767, -32767, -32768, 0, 1, -1};
        for (int i = 0; i < 6; i++) bs[nb++] = extremes[i];
        for (int k = -2; k <= 1; k++)
            for (int d = -1; d <= 1; d++) {
                const int32_t v = k * (1 << sh) + (sh ? 1 << (sh - 1) : 0) + d;
                if (v >= -32768 && v <= 32767) bs[nb++] = v;
            }
        for (int bi = 0; bi < nb; bi++) {
            const int16_t bv = (int16_t)bs[bi];
            const int32_t bf = bs[bi] >> sh;
            int64_t n = 0;
            for (int v = -40; v <= 40; v++) a[n++] = (int16_t)v;
            const int16_t ext[5] = {32767, 32766, -32767, -32766, -32768};
            for (int i = 0; i < 5; i++) a[n++] = ext[i];
            for (int d = -2; d <= 2; d++) a[n++] = (int16_t)(-bf + d);
            while (n < 300) a[n++] = rand_mant(r);
            const int64_t lens2[3] = {n, 33, 7};
            for (int li = 0; li < 3; li++) {
                const fx_sum2 p = {a, &bv, 0, sh, 0, 0, NULL};
                fx_qstats sw, st;
                cases++;
                if (!quant_matches(be, &p, lens2[li], sh, &sw) && bad++ < 5)
                    fprintf(stderr, "%s bias plane n %lld shift %d b %d\n", be->name,
                            (long long)lens2[li], sh, bv);
                for (int gk = 0; gk < 2; gk++)
                    if (!gated_matches(be, &p, lens2[li], sh, gk ? g2 : NULL) && bad++ < 5)
                        fprintf(stderr, "%s gated %d bias plane n %lld shift %d b %d\n",
                                be->name, gk, (long long)lens2[li], sh, bv);
                be->cvt.sum2_quant(&p, lens2[li], NULL, sh, &st);
                CHECK(same_stats(&st, &sw), "%s bias plane trial statistics, shift %d b %d",
                      be->name, sh, bv);
            }
        }
    }
    /* the largest sums that do not saturate and the smallest that do (T = 32767 2^s +
     * 2^(s-1) - 1, and T + 1, whose tie rounds to the even 32768), of both signs, at each right
     * shift with a aligned by s: where the AVX-512 level's fast route hands over to the
     * general one */
    for (int sh = 1; sh <= 15; sh++) {
        const int32_t h = 1 << (sh - 1);
        int16_t av[8] = {32767, -32767, 32767, -32767, 32767, -32767, 1, -1};
        int16_t bv[8] = {(int16_t)(h - 1), (int16_t)-(h - 1), (int16_t)h, (int16_t)-h,
                         (int16_t)(h - 2), (int16_t)(1 - h), (int16_t)(h - 1), (int16_t)-h};
        for (int li = 1; li <= 8; li++)
            for (int neg = 0; neg <= 1; neg++) {
                if (neg)
                    for (int i = 0; i < 8; i++) bv[i] = (int16_t)-bv[i];
                const fx_sum2 p = {av, bv, 1, sh, 0, neg, NULL};
                fx_qstats sw;
                cases++;
                if (!quant_matches(be, &p, li, sh, &sw) && bad++ < 5)
                    fprintf(stderr, "%s saturation bound n %d shift %d neg %d\n", be->name, li,
                            sh, neg);
                for (int gk = 0; gk < 2; gk++)
                    if (!gated_matches(be, &p, li, sh, gk ? g2 : NULL) && bad++ < 5)
                        fprintf(stderr, "%s gated %d saturation bound n %d shift %d neg %d\n",
                                be->name, gk, li, sh, neg);
                if (neg)
                    for (int i = 0; i < 8; i++) bv[i] = (int16_t)-bv[i];
            }
    }
    /* the gated outputs where the largest values are negative (gated away): their maximum is
     * then not the sum's, on each route (the bias plane, the fast and the general one) */
    for (int64_t i = 0; i < NMAX; i++) {
        a[i] = (int16_t)test_rng_range(r, -32767, 200);
        b[i] = (int16_t)test_rng_range(r, -3000, 20);
        g2[i] = (int16_t)test_rng_range(r, -1, 1);
    }
    const fx_sum2 routes[3] = {{a, b, 0, 3, 0, 0, NULL}, {a, b, 1, 1, 0, 0, NULL},
                               {a, b, 1, 0, 2, 1, NULL}};
    const int shifts[3] = {3, 2, 0};
    for (int k = 0; k < 3; k++)
        for (int gk = 0; gk < 2; gk++) {
            cases++;
            if (!gated_matches(be, &routes[k], 999, shifts[k], gk ? g2 : NULL) && bad++ < 5)
                fprintf(stderr, "%s gated %d, negative maxima, route %d\n", be->name, gk, k);
        }
    CHECK(bad == 0, "%s: %ld of %ld sum2_quant cases differ from the definition", be->name, bad,
          cases);
    /* the definition itself, on one hand-checked case: (3 << 2) - (-5) = 17 at shift 1 -> 8
     * (8.5 ties to even), and 32767 << 15 at shift -1 saturates */
    const int16_t x[2] = {3, 32767}, y[2] = {-5, 0};
    const fx_sum2 q = {x, y, 1, 2, 0, 1, NULL};
    int16_t o[2];
    fx_qstats s;
    fx_flex_sum2_quant_scalar(&q, 1, o, 1, &s);
    CHECK(o[0] == 8 && s.max_abs_in == 17.0 && s.saturated == 0, "17 >> 1 gave %d", o[0]);
    const fx_sum2 q2 = {x + 1, y + 1, 1, 15, 0, 0, NULL};
    fx_flex_sum2_quant_scalar(&q2, 1, o, -1, &s);
    CHECK(o[0] == 32767 && s.saturated == 1, "saturation gave %d (%lld)", o[0],
          (long long)s.saturated);
    /* gated: kept where the gate is > 0 only (0 and negative gates zero the value) */
    const int16_t xs[3] = {5, 6, 7}, gs[3] = {1, 0, -1}, zero1 = 0;
    const fx_sum2 q3 = {xs, &zero1, 0, 0, 0, 0, gs};
    int16_t o3[3];
    fx_flex_sum2_quant_scalar(&q3, 3, o3, 0, &s);
    CHECK(o3[0] == 5 && o3[1] == 0 && o3[2] == 0 && s.max_abs_in == 5.0, "gate gave %d %d %d",
          o3[0], o3[1], o3[2]);
}

/* A sequence of writes out = a op b (b of shape bshape), through this file and through the
 * dispatcher, into two outputs with the same history. */
static void check_sequence(fmt_t fo, fmt_t fa, fmt_t fb, int ndim, const int64_t *shape,
                           int bnd, const int64_t *bshape, int expect_taken, test_rng *r)
{
    tensor_t *a = tensor_new(fa, ndim, shape), *b = tensor_new(fb, bnd, bshape);
    tensor_t *fast = tensor_new(fo, ndim, shape), *ref = tensor_new(fo, ndim, shape);
    tensor_trace_enable(fast, 1);
    tensor_trace_enable(ref, 1);
    char what[160];
    snprintf(what, sizeof what, "fmt %d = fmt %d op fmt %d, %d-d, b %d-d", (int)fo, (int)fa,
             (int)fb, ndim, bnd);
    /* scales: steady, a jump of 2^7 (FLEX16_5 overflows and recomputes), and exponent gaps
     * between a and b from 0 to beyond 15 */
    const double sa[] = {1.0, 1.1, 0.9, 128.0, 100.0, 1.0, 1.0, 3e4, 1.0, 1.0};
    const double sb[] = {1.0, 0.5, 1e-3, 1.0, 4e-5, 7.0, 3e-4, 1.0, 1e-7, 1.0};
    const int64_t fused0 = fx_shared_binary_fused();
    int taken_any = 0;
    for (int step = 0; step < 10; step++) {
        test_fill_normal(a, sa[step], r);
        test_fill_normal(b, sb[step], r);
        const fx_op op = step % 3 == 2 ? FX_OP_SUB : FX_OP_ADD;
        const int64_t before = fx_shared_binary_taken();
        CHECK_STATUS(op == FX_OP_ADD ? tensor_add(fast, a, b) : tensor_sub(fast, a, b), FX_OK);
        const int gap = abs(tensor_exp(a) - tensor_exp(b));
        const int taken = fx_shared_binary_taken() > before;
        CHECK(taken == (expect_taken && gap <= 15), "%s, write %d (gap %d): taken %d", what, step,
              gap, taken);
        taken_any |= taken;
        fx_shared_binary_set_enabled(0);
        CHECK_STATUS(op == FX_OP_ADD ? tensor_add(ref, a, b) : tensor_sub(ref, a, b), FX_OK);
        fx_shared_binary_set_enabled(1);
        if (!test_same_writes(fast, ref, what, step)) break;
    }
    /* the writes taken here are rounded first at a guessed exponent (FLEX16_5 after its first
     * write, DFP16 always), which the scale jumps above make wrong now and then */
    const int64_t fused = fx_shared_binary_fused() - fused0;
    CHECK(taken_any ? fused > 0 : fused == 0, "%s: %lld one-pass writes", what, (long long)fused);
    tensor_free(a);
    tensor_free(b);
    tensor_free(fast);
    tensor_free(ref);
}

/* relu and relu_backward of FLEX16_5/DFP16 tensors (fx_shared_gated) against the int16-stage
 * route, over a sequence of writes (a jump overflows and recomputes a FLEX16_5 output). */
static void check_gated(fmt_t fo, fmt_t fx, const int64_t *shape, test_rng *r)
{
    tensor_t *x = tensor_new(fx, 4, shape), *dy = tensor_new(fx, 4, shape);
    tensor_t *y1 = tensor_new(fo, 4, shape), *y2 = tensor_new(fo, 4, shape);
    tensor_t *d1 = tensor_new(fo, 4, shape), *d2 = tensor_new(fo, 4, shape);
    tensor_trace_enable(y1, 1);
    tensor_trace_enable(y2, 1);
    tensor_trace_enable(d1, 1);
    tensor_trace_enable(d2, 1);
    const double sx[] = {1.0, 1.2, 300.0, 1.0, 0.01, 1.0};
    const int64_t fused0 = fx_shared_binary_fused();
    for (int step = 0; step < 6; step++) {
        test_fill_normal(x, sx[step], r);
        test_fill_normal(dy, 1e-3 * sx[5 - step], r);
        const int64_t before = fx_shared_binary_taken();
        CHECK_STATUS(tensor_relu(y1, x), FX_OK);
        CHECK_STATUS(tensor_relu_backward(d1, dy, x), FX_OK);
        CHECK(fx_shared_binary_taken() == before + 2, "relu and its gradient were not taken");
        fx_shared_binary_set_enabled(0);
        CHECK_STATUS(tensor_relu(y2, x), FX_OK);
        CHECK_STATUS(tensor_relu_backward(d2, dy, x), FX_OK);
        fx_shared_binary_set_enabled(1);
        if (!test_same_writes(y1, y2, "relu", step) ||
            !test_same_writes(d1, d2, "relu_backward", step))
            break;
    }
    const int64_t fused = fx_shared_binary_fused() - fused0;
    CHECK(fused > 0, "relu into fmt %d: %lld one-pass writes", (int)fo, (long long)fused);
    tensor_free(x);
    tensor_free(dy);
    tensor_free(y1);
    tensor_free(y2);
    tensor_free(d1);
    tensor_free(d2);
}

/* A DFP16 ReLU gradient's early rounding guesses its input's exponent: over steps whose dy
 * scales move the exponent every time, the write keeps that rounding wherever dy's largest
 * value passes the gate, and rounds again (one miss) where it is gated away and the rest is
 * small enough to lower the exponent; every result equals the int16-stage route's. */
static void check_gated_guess(test_rng *r)
{
    const int64_t shape[4] = {2, 3, 9, 11}, n = 2 * 3 * 9 * 11;
    tensor_t *x = tensor_new(FMT_DFP16, 4, shape), *dy = tensor_new(FMT_DFP16, 4, shape);
    tensor_t *d1 = tensor_new(FMT_DFP16, 4, shape), *d2 = tensor_new(FMT_DFP16, 4, shape);
    float *xv = malloc((size_t)n * sizeof *xv), *dv = malloc((size_t)n * sizeof *dv);
    for (int step = 0; step < 8; step++) {
        const int gated_away = step == 5;
        const int64_t top = (int64_t)test_rng_range(r, 0, (uint64_t)n - 1);
        for (int64_t i = 0; i < n; i++) {
            xv[i] = (float)test_rng_normal(r);
            /* |dy| below 1/4 of the top value, which sits at `top` (scales 2^(3 step)) */
            dv[i] = (float)((0.2 * test_rng_uniform(r) - 0.1) * ldexp(1.0, 3 * step));
        }
        dv[top] = (float)ldexp(1.0, 3 * step);
        xv[top] = gated_away ? -1.0f : 1.0f;
        CHECK_STATUS(tensor_from_f32(x, xv), FX_OK);
        CHECK_STATUS(tensor_from_f32(dy, dv), FX_OK);
        const int64_t missed0 = fx_shared_binary_missed();
        CHECK_STATUS(tensor_relu_backward(d1, dy, x), FX_OK);
        const int64_t missed = fx_shared_binary_missed() - missed0;
        fx_shared_binary_set_enabled(0);
        CHECK_STATUS(tensor_relu_backward(d2, dy, x), FX_OK);
        fx_shared_binary_set_enabled(1);
        CHECK(step == 0 || missed == gated_away,
              "dfp16 relu_backward step %d (largest dy gated away: %d): rounded again %lld "
              "times; exponents dy %d, dx %d", step, gated_away, (long long)missed,
              tensor_exp(dy), tensor_exp(d1));
        if (!test_same_writes(d1, d2, "relu_backward (input's exponent guessed)", step)) break;
    }
    free(xv);
    free(dv);
    tensor_free(x);
    tensor_free(dy);
    tensor_free(d1);
    tensor_free(d2);
}

/* u = t + bias and y = relu(u) in one pass (fx_shared_add_relu) against tensor_add and then
 * tensor_relu into twin outputs with the same history: the same mantissas, exponents,
 * statistics and trace records of both writes, over scales that make u's and y's guesses
 * wrong now and then (a jump overflows and recomputes a FLEX16_5 output; a bias that
 * dominates, or a t whose positive part is small, moves relu's exponent below u's), with the
 * per-channel bias of a convolution, the per-column one of a linear layer, or a whole second
 * tensor (a ResNet block's residual add, which the trainer fuses with its ReLU too). */
static void check_add_relu(fmt_t fu, fmt_t fy, int ndim, const int64_t *shape, int bnd,
                           const int64_t *bshape, test_rng *r)
{
    tensor_t *t = tensor_new(FMT_FLEX16_5, ndim, shape), *b = tensor_new(FMT_DFP16, bnd, bshape);
    tensor_t *u1 = tensor_new(fu, ndim, shape), *u2 = tensor_new(fu, ndim, shape);
    tensor_t *y1 = tensor_new(fy, ndim, shape), *y2 = tensor_new(fy, ndim, shape);
    tensor_t *all[4] = {u1, u2, y1, y2};
    for (int i = 0; i < 4; i++) tensor_trace_enable(all[i], 1);
    const double st[] = {1.0, 1.0, 1.0, 200.0, 1.0, 1.0, 1e-3, 1.0, 1.0};
    const double sb[] = {0.1, 0.1, 0.1, 0.1, 3.0, 1e-4, 1.0, 0.1, 0.1};
    int reused = 0;
    for (int step = 0; step < 9; step++) {
        test_fill_normal(t, st[step], r);
        test_fill_normal(b, sb[step], r);
        if (step == 4) { /* mostly negative t: relu's maximum falls below u's */
            float *v = malloc((size_t)tensor_numel(t) * sizeof *v);
            CHECK_STATUS(tensor_to_f32(t, v), FX_OK);
            for (int64_t i = 0; i < tensor_numel(t); i++) v[i] = v[i] > 0 ? 0.01f * v[i] : v[i];
            CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
            free(v);
        }
        const int64_t taken0 = fx_shared_binary_taken(), fused0 = fx_shared_binary_fused();
        int rc = fx_shared_add_relu(u1, y1, t, b);
        /* declined: before a FLEX16_5 output's first write (its exponent is guessed only from
         * then on), and where t and b are more than 15 binades apart (tensor_add's own route
         * declines those); the trainer then makes the two writes op by op */
        const int gap = abs(tensor_exp(t) - tensor_exp(b));
        const int may_decline = gap > 15 || (step == 0 && (fu == FMT_FLEX16_5 || fy == FMT_FLEX16_5));
        CHECK(rc == FX_OK || (may_decline && rc == FX_SHARED_BINARY_NOT_TAKEN),
              "add+relu step %d (gap %d): status %d", step, gap, rc);
        CHECK(gap <= 15 || rc == FX_SHARED_BINARY_NOT_TAKEN, "add+relu step %d: gap %d taken",
              step, gap);
        if (rc == FX_SHARED_BINARY_NOT_TAKEN) {
            CHECK(fx_shared_binary_taken() == taken0, "a declined add+relu took an op");
            CHECK_STATUS(tensor_add(u1, t, b), FX_OK);
            CHECK_STATUS(tensor_relu(y1, u1), FX_OK);
        } else if (rc != FX_OK) {
            break;
        } else {
            CHECK(fx_shared_binary_taken() - taken0 == 2, "add+relu step %d: %lld ops taken here",
                  step, (long long)(fx_shared_binary_taken() - taken0));
        }
        reused += fx_shared_binary_fused() - fused0 == 2;
        CHECK_STATUS(tensor_add(u2, t, b), FX_OK);
        CHECK_STATUS(tensor_relu(y2, u2), FX_OK);
        if (!test_same_writes(u1, u2, "add+relu: u", step) ||
            !test_same_writes(y1, y2, "add+relu: y", step))
            break;
    }
    CHECK(reused > 0, "add+relu into fmt %d/%d: no step reused both early roundings", (int)fu,
          (int)fy);
    tensor_free(t);
    tensor_free(b);
    for (int i = 0; i < 4; i++) tensor_free(all[i]);
}

/* u = a + b and y = u gated by g's signs in one pass (fx_shared_add_gated: the gradient of a
 * ReLU whose output feeds two layers) against tensor_add and then tensor_relu_backward into
 * twin outputs with the same history: the same mantissas, exponents, statistics and trace
 * records of both writes, over scales that make the guesses miss now and then (a jump
 * overflows a FLEX16_5 output; a gate that drops the largest values moves y's exponent below
 * u's). Declined (nothing written) where the gate is y or u. */
static void check_add_gated(fmt_t fu, fmt_t fy, fmt_t fg, const int64_t *shape, test_rng *r)
{
    tensor_t *a = tensor_new(FMT_FLEX16_5, 4, shape), *b = tensor_new(FMT_DFP16, 4, shape);
    tensor_t *g = tensor_new(fg, 4, shape);
    tensor_t *u1 = tensor_new(fu, 4, shape), *u2 = tensor_new(fu, 4, shape);
    tensor_t *y1 = tensor_new(fy, 4, shape), *y2 = tensor_new(fy, 4, shape);
    tensor_t *all[4] = {u1, u2, y1, y2};
    for (int i = 0; i < 4; i++) tensor_trace_enable(all[i], 1);
    const double sa[] = {1.0, 1.0, 1.0, 300.0, 1.0, 1.0, 1e-3, 1.0, 1.0};
    const double sb[] = {0.5, 0.5, 0.5, 0.5, 2.0, 1e-4, 1.0, 0.5, 0.5};
    int reused = 0, taken = 0;
    for (int step = 0; step < 9; step++) {
        test_fill_normal(a, sa[step], r);
        test_fill_normal(b, sb[step], r);
        test_fill_normal(g, 1.0, r);
        if (step == 7) { /* the gate drops every value of u above a small bound */
            float *uv = malloc((size_t)tensor_numel(a) * sizeof *uv);
            float *gv = malloc((size_t)tensor_numel(a) * sizeof *gv);
            CHECK_STATUS(tensor_to_f32(a, uv), FX_OK);
            for (int64_t i = 0; i < tensor_numel(a); i++) gv[i] = fabsf(uv[i]) > 0.3f ? -1.0f : 1.0f;
            CHECK_STATUS(tensor_from_f32(g, gv), FX_OK);
            free(uv);
            free(gv);
        }
        const int64_t fused0 = fx_shared_binary_fused(), made0 = fx_shared_add_gated_made();
        int rc = fx_shared_add_gated(u1, y1, a, b, g);
        const int gap = abs(tensor_exp(a) - tensor_exp(b));
        const int may_decline = gap > 15 || (step == 0 && (fu == FMT_FLEX16_5 || fy == FMT_FLEX16_5));
        CHECK(rc == FX_OK || (may_decline && rc == FX_SHARED_BINARY_NOT_TAKEN),
              "add+gate step %d (gap %d): status %d", step, gap, rc);
        if (rc == FX_SHARED_BINARY_NOT_TAKEN) {
            CHECK_STATUS(tensor_add(u1, a, b), FX_OK);
            CHECK_STATUS(tensor_relu_backward(y1, u1, g), FX_OK);
        } else if (rc != FX_OK) {
            break;
        } else {
            taken++;
            CHECK(fx_shared_add_gated_made() - made0 == 1, "add+gate step %d: not counted", step);
        }
        reused += fx_shared_binary_fused() - fused0 == 2;
        CHECK_STATUS(tensor_add(u2, a, b), FX_OK);
        CHECK_STATUS(tensor_relu_backward(y2, u2, g), FX_OK);
        if (!test_same_writes(u1, u2, "add+gate: u", step) ||
            !test_same_writes(y1, y2, "add+gate: y", step))
            break;
    }
    CHECK(taken >= 7 && reused > 0, "add+gate into fmt %d/%d: %d steps taken, %d reused both "
          "early roundings", (int)fu, (int)fy, taken, reused);
    /* declined where the gate is y or u, nothing written */
    const int16_t *yd = tensor_data(y1);
    const int16_t y0 = yd[0];
    const int e0 = tensor_exp(y1);
    const int64_t len0 = tensor_trace_len(y1);
    CHECK(fx_shared_add_gated(u1, y1, a, b, y1) == FX_SHARED_BINARY_NOT_TAKEN, "gate = y taken");
    CHECK(fx_shared_add_gated(u1, y1, a, b, u1) == FX_SHARED_BINARY_NOT_TAKEN, "gate = u taken");
    CHECK(yd[0] == y0 && tensor_exp(y1) == e0 && tensor_trace_len(y1) == len0,
          "a declined add+gate touched y");
    tensor_free(a);
    tensor_free(b);
    tensor_free(g);
    for (int i = 0; i < 4; i++) tensor_free(all[i]);
}

/* fx_shared_add_relu declines (nothing written, no state changed) where one of the two ops
 * would not be taken here; then the two ops run as usual. */
static void check_add_relu_declined(test_rng *r)
{
    const int64_t s[4] = {2, 3, 5, 7}, c[3] = {3, 1, 1};
    tensor_t *t = tensor_new(FMT_FLEX16_5, 4, s), *b = tensor_new(FMT_FLEX16_5, 3, c);
    tensor_t *u = tensor_new(FMT_DFP16, 4, s), *y = tensor_new(FMT_DFP16, 4, s);
    tensor_t *f = tensor_new(FMT_FP32, 4, s);
    test_fill_normal(t, 1.0, r);
    test_fill_normal(b, 0.1, r);
    test_fill_normal(y, 5.0, r);
    const int16_t *yd = tensor_data(y);
    const int16_t y0 = yd[0];
    const int e0 = tensor_exp(y);
    /* y in t's storage, u in y's, and a float y */
    CHECK(fx_shared_add_relu(u, t, t, b) == FX_SHARED_BINARY_NOT_TAKEN, "y = t was taken");
    CHECK(fx_shared_add_relu(u, u, t, b) == FX_SHARED_BINARY_NOT_TAKEN, "y = u was taken");
    CHECK(fx_shared_add_relu(u, f, t, b) == FX_SHARED_BINARY_NOT_TAKEN, "fp32 y was taken");
    CHECK(yd[0] == y0 && tensor_exp(y) == e0 && tensor_trace_len(y) == 0,
          "a declined add+relu touched y");
    tensor_free(t);
    tensor_free(b);
    tensor_free(u);
    tensor_free(y);
    tensor_free(f);
}

static void check_not_taken(test_rng *r)
{
    /* in place: out = a + b, both routes through the dispatcher */
    const int64_t s[2] = {40, 70}, st[2] = {70, 40};
    tensor_t *a1 = tensor_new(FMT_FLEX16_5, 2, s), *a2 = tensor_new(FMT_FLEX16_5, 2, s);
    tensor_t *b = tensor_new(FMT_FLEX16_5, 2, s);
    test_fill_normal(a1, 1.0, r);
    test_fill_normal(b, 0.3, r);
    CHECK_STATUS(tensor_copy(a2, a1), FX_OK);
    const int64_t before = fx_shared_binary_taken();
    CHECK_STATUS(tensor_add(a1, a1, b), FX_OK);
    CHECK(fx_shared_binary_taken() == before, "in-place add was taken");
    fx_shared_binary_set_enabled(0);
    CHECK_STATUS(tensor_add(a2, a2, b), FX_OK);
    fx_shared_binary_set_enabled(1);
    test_same_writes(a1, a2, "in place", 0);
    /* a transposed operand */
    tensor_t *t = tensor_new(FMT_DFP16, 2, st), *o1 = tensor_new(FMT_DFP16, 2, s);
    tensor_t *o2 = tensor_new(FMT_DFP16, 2, s);
    test_fill_normal(t, 2.0, r);
    tensor_t *tv = tensor_view_transpose(t, 0, 1);
    CHECK_STATUS(tensor_sub(o1, tv, b), FX_OK);
    CHECK(fx_shared_binary_taken() == before, "transposed operand was taken");
    fx_shared_binary_set_enabled(0);
    CHECK_STATUS(tensor_sub(o2, tv, b), FX_OK);
    fx_shared_binary_set_enabled(1);
    test_same_writes(o1, o2, "transposed a", 0);
    /* a partial view of the output keeps the storage's exponent */
    const int64_t half[2] = {20, 70};
    tensor_t *ah = tensor_new(FMT_FLEX16_5, 2, half), *bh = tensor_new(FMT_FLEX16_5, 2, half);
    test_fill_normal(ah, 1.0, r);
    test_fill_normal(bh, 1.0, r);
    tensor_t *v1 = tensor_view_slice(o1, 0, 0, 20, 1), *v2 = tensor_view_slice(o2, 0, 0, 20, 1);
    if (v1 && v2) {
        CHECK_STATUS(tensor_add(v1, ah, bh), FX_OK);
        CHECK(fx_shared_binary_taken() == before, "partial output view was taken");
        fx_shared_binary_set_enabled(0);
        CHECK_STATUS(tensor_add(v2, ah, bh), FX_OK);
        fx_shared_binary_set_enabled(1);
        test_same_writes(o1, o2, "partial view", 0);
    }
    tensor_free(v1);
    tensor_free(v2);
    tensor_free(ah);
    tensor_free(bh);
    tensor_free(tv);
    tensor_free(t);
    tensor_free(o1);
    tensor_free(o2);
    tensor_free(a1);
    tensor_free(a2);
    tensor_free(b);
}

int main(void)
{
    test_rng r;
    test_rng_seed(&r, 2026);
    for (int i = 0; i < FX_BACKEND_COUNT; i++) {
        const fx_backend *be = fx_backend_get(i);
        if (be && be->available) check_kernels(be, &r);
    }
    const int64_t nchw[4] = {3, 5, 9, 11}, big[4] = {4, 8, 40, 40}, c3[3] = {5, 1, 1};
    const int64_t big_c[3] = {8, 1, 1}, rows[2] = {37, 23}, cols[1] = {23}, one[4] = {1, 1, 1, 16385};
    const int64_t mid_s[4] = {2, 3, 2, 4}, mid_b[3] = {3, 1, 1};
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        for (int nt = 1; nt <= 2; nt++) {
            flexpoint_set_num_threads(nt);
            const fmt_t fo[2] = {FMT_FLEX16_5, FMT_DFP16};
            for (int k = 0; k < 2; k++) {
                check_sequence(fo[k], FMT_FLEX16_5, FMT_FLEX16_5, 4, nchw, 4, nchw, 1, &r);
                check_sequence(fo[k], FMT_FLEX16_5, FMT_DFP16, 4, nchw, 3, c3, 1, &r);
                check_sequence(fo[k], FMT_DFP16, FMT_FLEX16_5, 4, big, 3, big_c, 1, &r);
                check_sequence(fo[k], FMT_DFP16, FMT_DFP16, 2, rows, 1, cols, 1, &r);
                check_sequence(fo[k], FMT_FLEX16_5, FMT_FLEX16_5, 4, one, 4, one, 1, &r);
                /* planes of 8 values: a broadcast this file leaves to the dispatcher */
                check_sequence(fo[k], FMT_FLEX16_5, FMT_FLEX16_5, 4, mid_s, 3, mid_b, 0, &r);
            }
        }
        /* above the parallel thresholds (2^16 and 2 x 2^16 elements): the threads' maxima and
         * statistics are merged */
        const int64_t large[4] = {2, 16, 70, 70}, large_c[3] = {16, 1, 1};
        check_sequence(FMT_FLEX16_5, FMT_FLEX16_5, FMT_FLEX16_5, 4, large, 3, large_c, 1, &r);
        check_gated(FMT_FLEX16_5, FMT_FLEX16_5, large, &r);
        check_gated(FMT_FLEX16_5, FMT_FLEX16_5, nchw, &r);
        check_gated(FMT_FLEX16_5, FMT_FLEX16_5, big, &r);
        check_gated(FMT_DFP16, FMT_FLEX16_5, nchw, &r);
        check_gated(FMT_FLEX16_5, FMT_DFP16, big, &r);
        check_gated_guess(&r);
        check_not_taken(&r);
        const int64_t conv_s[4] = {4, 8, 20, 20}, conv_b[3] = {8, 1, 1};
        const int64_t lin_s[2] = {64, 40}, lin_b[1] = {40};
        /* nt 1 and 2 with the level's one-pass kernel for both outputs (sum2_quant_gated,
         * where it has one: it must then make units), nt 3: two passes a unit */
        for (int nt = 1; nt <= 3; nt++) {
            fx_shared_binary_set_gated_kernel(nt < 3);
            flexpoint_set_num_threads(nt < 3 ? nt : 1);
            const int64_t units0 = fx_shared_binary_gated_units();
            check_add_relu(FMT_FLEX16_5, FMT_FLEX16_5, 4, conv_s, 3, conv_b, &r);
            check_add_relu(FMT_DFP16, FMT_DFP16, 4, conv_s, 3, conv_b, &r);
            check_add_relu(FMT_FLEX16_5, FMT_DFP16, 2, lin_s, 1, lin_b, &r);
            check_add_relu(FMT_DFP16, FMT_FLEX16_5, 4, large, 3, large_c, &r);
            check_add_relu(FMT_FLEX16_5, FMT_FLEX16_5, 4, conv_s, 4, conv_s, &r);
            check_add_relu(FMT_DFP16, FMT_DFP16, 4, large, 4, large, &r);
            check_add_gated(FMT_FLEX16_5, FMT_FLEX16_5, FMT_FLEX16_5, conv_s, &r);
            check_add_gated(FMT_DFP16, FMT_DFP16, FMT_FLEX16_5, large, &r);
            check_add_gated(FMT_FLEX16_5, FMT_DFP16, FMT_DFP16, conv_s, &r);
            const int64_t units = fx_shared_binary_gated_units() - units0;
            const int has = fx_backend_active()->cvt.sum2_quant_gated != NULL;
            CHECK(nt < 3 && has ? units > 0 : units == 0,
                  "%s, nt %d: sum2_quant_gated made %lld units", flexpoint_backend_name(bi), nt,
                  (long long)units);
        }
        fx_shared_binary_set_gated_kernel(1);
        check_add_relu_declined(&r);
    }
    flexpoint_set_num_threads(0);
    return test_finish("test_shared_binary");
}
