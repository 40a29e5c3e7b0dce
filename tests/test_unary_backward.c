/* Element-wise backward passes in the 16-bit formats, and saturation of element-wise results
 * in FLEX16_5.
 *
 * Values of tensor_unary_backward, tensor_clamp_backward and tensor_pow_scalar_backward in
 * fp16, bf16, FLEX16_5 and DFP16 against an fp64 reference dy * f'(x) (analytic derivatives,
 * written without cancellation), on every backend. The inputs x and dy are first rounded into
 * the format and the reference is taken on the stored values, so only the op's own error is
 * measured. The bound per element is derived, not tuned:
 *   core  = 16 u32 |dy| m(x) + 2^-146 |dy|: the fp32 backward's own error, the tolerance
 *           test_unary holds it to against finite differences (docs/math.md; m(x) = |f'(x)|,
 *           or the sum of the magnitudes of its terms for silu, gelu and gelu_tanh, whose
 *           derivatives cross zero; the absolute term covers the subnormal tails);
 *   fp16, bf16: core + half a 16-bit ulp at |r| + core (one rounding of the fp32 result;
 *           below the smallest normal the ulp is the subnormal step). A result beyond the
 *           largest finite value must be Inf, and Inf is accepted only where |r| + core reaches
 *           the overflow threshold (65520 for fp16);
 *   FLEX16_5, DFP16: core + 2^(e - 1), half a step of the output exponent e; elements beyond
 *           the output's range (32767 steps) are left to the saturation checks below.
 * fp16 and bf16 run over every finite 16-bit pattern (65,536 each) as x with random dy, and
 * their results must also be the same bits on every backend; the integer formats over 4,096
 * samples per function. Skipped points: outside the domain (x <= 0 for log, sqrt, rsqrt; x = 0
 * for reciprocal; x < 0 for pow with a non-integer p, where the results are NaN, checked by
 * test_unary), and x where |f'(x)| itself exceeds 2^127, since the kernel forms f'(x) in fp32
 * before multiplying by dy (there it overflows to Inf where dy * f'(x) might not).
 *
 * Saturation: exp and square of values beyond FLEX16_5's exponent window saturate, and the
 * write counts them (tensor_stat "saturated", "clamped", "overflows"), stores +-32767, and
 * keeps the true maximum; DFP16, whose exponent range is wide, does not saturate on the same
 * values.
 */
#include "unary_common.h"

/* fp64 f'(x) and the magnitude its tolerance scales with */
static double d64(int fn, double x, const double *p, double *mag)
{
    double d;
    switch (fn) {
    case FX_UN_EXP: d = exp(x); break;
    case FX_UN_LOG: d = 1 / x; break;
    case FX_UN_SQRT: d = 0.5 / sqrt(x); break;
    case FX_UN_RSQRT: d = -0.5 / (x * sqrt(x)); break;
    case FX_UN_RECIPROCAL: d = -1 / (x * x); break;
    case FX_UN_TANH: {
        const double c = cosh(x);
        d = 1 / (c * c);
        break;
    }
    case FX_UN_SIGMOID: d = sigmoid64(x) * sigmoid64(-x); break;
    case FX_UN_GELU:
        d = Phi64(x) + x * phi64(x);
        *mag = Phi64(x) + fabs(x) * phi64(x);
        return d;
    case FX_UN_GELU_TANH: {
        const double u = gt_arg(x), S = sigmoid64(u), T = sigmoid64(-u);
        const double du = 2 * sqrt(2 / PI) * (1 + 3 * 0.044715 * x * x);
        d = S + x * S * T * du;
        *mag = S + fabs(x) * S * T * du;
        return d;
    }
    case FX_UN_SILU: {
        const double s = sigmoid64(x), t = sigmoid64(-x);
        d = s + x * s * t;
        *mag = s + fabs(x) * s * t;
        return d;
    }
    case FX_UN_SQUARE: d = 2 * x; break;
    case FX_UN_ABS: d = x > 0 ? 1 : (x < 0 ? -1 : 0); break;
    case FX_UN_CLAMP: d = x >= p[0] && x <= p[1] ? 1 : 0; break;
    case FX_UN_POW: d = p[0] == 0 ? 0 : (p[0] == 1 ? 1 : p[0] * pow(x, p[0] - 1)); break;
    default: d = NAN;
    }
    *mag = fabs(d);
    return d;
}

/* 1 when x is a point the value check covers (see the top comment) */
static int in_domain(int fn, double x, const double *p)
{
    if (!isfinite(x)) return 0;
    if ((fn == FX_UN_LOG || fn == FX_UN_SQRT || fn == FX_UN_RSQRT) && x <= 0) return 0;
    if (fn == FX_UN_RECIPROCAL && x == 0) return 0;
    if (fn == FX_UN_POW && x < 0 && p[0] != floor(p[0])) return 0;
    double mag = 0;
    const double d = d64(fn, x, p, &mag);
    return isfinite(d) && fabs(d) < 0x1p127;
}

static double core_bound(double dy, double mag) { return 16 * U32 * fabs(dy) * mag + 0x1p-146 * fabs(dy); }

/* one ulp of a 16-bit format at magnitude v (the subnormal step below the normal range) */
static double ulp16(double v, fmt_t f)
{
    const int mant = f == FMT_FP16 ? 10 : 7, emin = f == FMT_FP16 ? -14 : -126;
    int e = emin;
    if (v > 0) {
        frexp(v, &e);
        e -= 1;
        if (e < emin) e = emin;
    }
    return ldexp(1.0, e - mant);
}

/* The public cases, as in test_unary.c: 12 named functions, clamp, pow at several exponents. */
typedef struct {
    int fn;
    double p[2];
} bcase;
static const bcase CASES[] = {
    {FX_UN_EXP, {0, 0}},        {FX_UN_LOG, {0, 0}},          {FX_UN_SQRT, {0, 0}},
    {FX_UN_RSQRT, {0, 0}},      {FX_UN_RECIPROCAL, {0, 0}},   {FX_UN_TANH, {0, 0}},
    {FX_UN_SIGMOID, {0, 0}},    {FX_UN_GELU, {0, 0}},         {FX_UN_GELU_TANH, {0, 0}},
    {FX_UN_SILU, {0, 0}},       {FX_UN_SQUARE, {0, 0}},       {FX_UN_ABS, {0, 0}},
    {FX_UN_CLAMP, {-1.5, 2.25}}, {FX_UN_POW, {2.5, 0}},       {FX_UN_POW, {-1.7, 0}},
    {FX_UN_POW, {3, 0}},        {FX_UN_POW, {-2, 0}},         {FX_UN_POW, {0.5, 0}},
    {FX_UN_POW, {0, 0}},        {FX_UN_POW, {1, 0}},          {FX_UN_POW, {0.3333333333333333, 0}},
};
#define NCASES ((int)(sizeof CASES / sizeof *CASES))

static int backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x, const bcase *c)
{
    if (c->fn == FX_UN_CLAMP) return tensor_clamp_backward(dx, dy, x, c->p[0], c->p[1]);
    if (c->fn == FX_UN_POW) return tensor_pow_scalar_backward(dx, dy, x, c->p[0]);
    return tensor_unary_backward(dx, dy, x, tensor_unary_name(c->fn));
}

/* the check of one 16-bit result g against r = dy f'(x); returns the error in units of the
 * bound (0 when within it in the overflow cases), or a huge value */
static double half_err(uint16_t g, fmt_t f, double r, double core)
{
    const double gv = decode16(g, f);
    const double thr = f == FMT_FP16 ? 65520.0 : 0x1.ffp127; /* rounds to Inf from here */
    if (is_nan16(g, f)) return 1e30;
    if (isinf(gv)) return (gv > 0) == (r > 0) && fabs(r) + core >= thr ? 0 : 1e30;
    if (fabs(r) - core >= thr) return 1e30; /* must have overflowed */
    const double bound = core + 0.5 * ulp16(fabs(r) + core, f);
    return fabs(gv - r) / bound;
}

/* ---- fp16 and bf16: every pattern as x --------------------------------------------------- */

static void half_backward(fmt_t f)
{
    const int64_t n = 65536;
    uint16_t *xin = malloc(n * sizeof *xin), *got = malloc(n * sizeof *got),
             *first = malloc(n * sizeof *first);
    float *dyf = malloc(n * sizeof *dyf), *dyr = malloc(n * sizeof *dyr);
    for (int64_t i = 0; i < n; i++) xin[i] = (uint16_t)i;
    test_rng rng;
    test_rng_seed(&rng, 2027 + (uint64_t)f);
    for (int64_t i = 0; i < n; i++) dyf[i] = (float)test_rng_normal(&rng);
    tensor_t *x = new1(f, n), *dy = new1(f, n), *dx = new1(f, n);
    CHECK_STATUS(tensor_set_raw(x, xin), FX_OK);
    CHECK_STATUS(tensor_from_f32(dy, dyf), FX_OK);
    CHECK_STATUS(tensor_to_f32(dy, dyr), FX_OK); /* dy as stored */
    for (int ci = 0; ci < NCASES; ci++) {
        const bcase *c = &CASES[ci];
        int have_first = 0;
        for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
            if (!flexpoint_backend_available(bi)) continue;
            const char *bn = flexpoint_backend_name(bi);
            CHECK_STATUS(flexpoint_set_backend(bn), FX_OK);
            CHECK_STATUS(backward(dx, dy, x, c), FX_OK);
            CHECK_STATUS(tensor_get_raw(dx, got), FX_OK);
            int64_t checked = 0, bad = 0;
            double worst = 0, wx = 0;
            for (int64_t i = 0; i < n; i++) {
                const double xv = decode16(xin[i], f);
                if (!in_domain(c->fn, xv, c->p)) continue;
                double mag = 0;
                const double r = (double)dyr[i] * d64(c->fn, xv, c->p, &mag);
                const double e = half_err(got[i], f, r, core_bound(dyr[i], mag));
                checked++;
                if (e > worst) worst = e, wx = xv;
                if (!(e <= 1) && bad++ < 3)
                    CHECK(0, "%s %s(p=%g)' %s: x=%a dy=%a gives %a, exact %a", fmt_name(f),
                          fn_label(c->fn), c->p[0], bn, xv, dyr[i], decode16(got[i], f), r);
            }
            CHECK(bad == 0, "%s %s(p=%g)' %s: %lld of %lld gradients outside the bound",
                  fmt_name(f), fn_label(c->fn), c->p[0], bn, (long long)bad, (long long)checked);
            CHECK(checked > 1000, "%s %s: only %lld points in the domain", fmt_name(f),
                  fn_label(c->fn), (long long)checked);
            if (!have_first) {
                memcpy(first, got, n * sizeof *got);
                have_first = 1;
                printf("%s %-10s p=%-6.3g backward: %lld inputs, worst %.3f of the bound at "
                       "x=%a\n", fmt_name(f), fn_label(c->fn), c->p[0], (long long)checked,
                       worst, wx);
            } else {
                CHECK(memcmp(first, got, n * sizeof *got) == 0,
                      "%s %s(p=%g)': %s differs from the first backend", fmt_name(f),
                      fn_label(c->fn), c->p[0], bn);
            }
        }
    }
    tensor_free(x);
    tensor_free(dy);
    tensor_free(dx);
    free(xin);
    free(got);
    free(first);
    free(dyf);
    free(dyr);
}

/* ---- FLEX16_5 and DFP16 ------------------------------------------------------------------ */

static double sample(int fn, const double *p, test_rng *r)
{
    const double z = test_rng_normal(r);
    switch (fn) {
    case FX_UN_LOG: case FX_UN_SQRT: case FX_UN_RSQRT: return 0.05 + 4 * fabs(z);
    case FX_UN_RECIPROCAL: return (z < 0 ? -0.25 : 0.25) + z;
    case FX_UN_EXP: return 2 * z;
    case FX_UN_POW: return p[0] < 1 ? 0.1 + 2 * fabs(z) : 3 * z;
    default: return 3 * z;
    }
}

static void shared_backward(fmt_t f)
{
    const int64_t n = 4096;
    float *xv = malloc(n * sizeof *xv), *gv = malloc(n * sizeof *gv), *xr = malloc(n * sizeof *xr),
          *gr = malloc(n * sizeof *gr), *dv = malloc(n * sizeof *dv);
    for (int ci = 0; ci < NCASES; ci++) {
        const bcase *c = &CASES[ci];
        test_rng rng;
        test_rng_seed(&rng, 900 + (uint64_t)ci);
        for (int64_t i = 0; i < n; i++) {
            xv[i] = (float)sample(c->fn, c->p, &rng);
            gv[i] = (float)test_rng_normal(&rng);
        }
        tensor_t *x = new1(f, n), *dy = new1(f, n);
        CHECK_STATUS(tensor_from_f32(x, xv), FX_OK);
        CHECK_STATUS(tensor_from_f32(dy, gv), FX_OK);
        CHECK_STATUS(tensor_to_f32(x, xr), FX_OK); /* the values as stored */
        CHECK_STATUS(tensor_to_f32(dy, gr), FX_OK);
        for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
            if (!flexpoint_backend_available(bi)) continue;
            const char *bn = flexpoint_backend_name(bi);
            CHECK_STATUS(flexpoint_set_backend(bn), FX_OK);
            tensor_t *dx = new1(f, n);
            CHECK_STATUS(backward(dx, dy, x, c), FX_OK);
            CHECK_STATUS(tensor_to_f32(dx, dv), FX_OK);
            const int e = tensor_exp(dx);
            const double half = ldexp(1.0, e - 1), top = 32767 * ldexp(1.0, e);
            int64_t checked = 0, bad = 0;
            double worst = 0;
            for (int64_t i = 0; i < n; i++) {
                if (!in_domain(c->fn, xr[i], c->p)) continue;
                double mag = 0;
                const double r = (double)gr[i] * d64(c->fn, xr[i], c->p, &mag);
                const double core = core_bound(gr[i], mag);
                if (fabs(r) + core >= top + half) continue; /* may saturate */
                const double err = fabs(dv[i] - r) / (core + half);
                checked++;
                if (err > worst) worst = err;
                if (!(err <= 1) && bad++ < 3)
                    CHECK(0, "%s %s(p=%g)' %s: x=%a dy=%a gives %a, exact %a (exp %d)",
                          fmt_name(f), fn_label(c->fn), c->p[0], bn, xr[i], gr[i], dv[i], r, e);
            }
            CHECK(bad == 0, "%s %s(p=%g)' %s: %lld of %lld gradients outside the bound",
                  fmt_name(f), fn_label(c->fn), c->p[0], bn, (long long)bad, (long long)checked);
            CHECK(checked > n / 2, "%s %s(p=%g)': only %lld of %lld points checked", fmt_name(f),
                  fn_label(c->fn), c->p[0], (long long)checked, (long long)n);
            if (bi == 0)
                printf("%s %-10s p=%-6.3g backward: %lld samples, worst %.3f of the bound\n",
                       fmt_name(f), fn_label(c->fn), c->p[0], (long long)checked, worst);
            tensor_free(dx);
        }
        tensor_free(x);
        tensor_free(dy);
    }
    free(xv);
    free(gv);
    free(xr);
    free(gr);
    free(dv);
}

/* ---- saturation of element-wise results in FLEX16_5 --------------------------------------- */

/* fn over xs into a new FLEX16_5 (window starting at lo; 0 keeps the default [-31, 0]) or
 * DFP16 tensor; checks the saturation statistics against the values the reference exceeds. */
static void saturation_case(fmt_t f, const char *fn, const float *xs, int n, int lo)
{
    tensor_t *x = new1(FMT_FP32, n), *y = new1(f, n);
    CHECK_STATUS(tensor_from_f32(x, xs), FX_OK);
    int wlo = 0, whi = 0;
    if (f == FMT_FLEX16_5) {
        if (lo) CHECK_STATUS(tensor_set_exp_window(y, lo), FX_OK);
        CHECK_STATUS(tensor_exp_window(y, &wlo, &whi), FX_OK);
    }
    CHECK_STATUS(tensor_unary(y, x, fn), FX_OK);
    const int id = strcmp(fn, "exp") == 0 ? FX_UN_EXP : FX_UN_SQUARE;
    /* the largest value the window holds, and the count beyond it (the write rounds to
     * nearest, so a value saturates from 32767.5 steps of the top exponent) */
    const double step_hi = ldexp(1.0, whi);
    int want = 0;
    double tmax = 0;
    for (int i = 0; i < n; i++) {
        const double r = ref_f(id, xs[i], NULL);
        if (fabs(r) > tmax) tmax = fabs(r);
        want += f == FMT_FLEX16_5 && fabs(r) >= 32767.5 * step_hi;
    }
    double sat = -1, clamped = -1, overflows = -1, tm = -1, smax = -1;
    CHECK_STATUS(tensor_stat(y, "saturated", &sat), FX_OK);
    CHECK_STATUS(tensor_stat(y, "clamped", &clamped), FX_OK);
    CHECK_STATUS(tensor_stat(y, "overflows", &overflows), FX_OK);
    CHECK_STATUS(tensor_stat(y, "true_max", &tm), FX_OK);
    CHECK_STATUS(tensor_stat(y, "stored_max", &smax), FX_OK);
    CHECK(sat == want, "%s %s (window [%d, %d]): saturated %g, want %d", fmt_name(f), fn, wlo,
          whi, sat, want);
    /* true_max is the largest fp32 result before saturation: within the fp32 bound */
    CHECK(fabs(tm - tmax) <= 2 * U32 * tmax, "%s %s: true_max %.9g, exact %.9g", fmt_name(f),
          fn, tm, tmax);
    if (f == FMT_FLEX16_5) {
        CHECK(want > 0 && want < n, "the case must saturate some elements and not all (%d)",
              want);
        CHECK(tensor_exp(y) == whi && clamped == 1, "%s %s: exp %d (window top %d), clamped %g",
              fmt_name(f), fn, tensor_exp(y), whi, clamped);
        CHECK(overflows == 1, "%s %s: overflows %g", fmt_name(f), fn, overflows);
        CHECK(smax == 32767 * step_hi, "%s %s: stored_max %g, want 32767 * 2^%d", fmt_name(f),
              fn, smax, whi);
        int16_t *m = malloc((size_t)n * sizeof *m);
        CHECK_STATUS(tensor_get_raw(y, m), FX_OK);
        int at_limit = 0;
        for (int i = 0; i < n; i++) {
            const double r = ref_f(id, xs[i], NULL);
            if (fabs(r) >= 32767.5 * step_hi) {
                at_limit++;
                CHECK(m[i] == (r > 0 ? 32767 : -32767), "%s %s(%g): mantissa %d, want +-32767",
                      fmt_name(f), fn, xs[i], m[i]);
            } else {
                CHECK(fabs(m[i] * step_hi - r) <= step_hi / 2 + 2 * U32 * fabs(r),
                      "%s %s(%g): %g, exact %g", fmt_name(f), fn, xs[i], m[i] * step_hi, r);
            }
        }
        CHECK(at_limit == want, "saturated elements %d", at_limit);
        free(m);
    } else {
        CHECK(clamped == 0 && overflows == 0, "%s %s: clamped %g, overflows %g", fmt_name(f), fn,
              clamped, overflows);
    }
    if (f == FMT_FLEX16_5)
        printf("%s %s, window [%d, %d]: %g of %d saturated, true_max %.6g\n", fmt_name(f), fn,
               wlo, whi, sat, n, tm);
    else
        printf("%s %s: exponent %d, %g of %d saturated, true_max %.6g\n", fmt_name(f), fn,
               tensor_exp(y), sat, n, tm);
    tensor_free(x);
    tensor_free(y);
}

static void saturation(void)
{
    /* exp: e^x >= 32767.5 from x = 10.3972 (window top 0); 10.39 and 10.40 sit either side */
    const float ex[10] = {0.0f, 1.0f, 5.0f, 10.0f, 10.39f, 10.40f, 10.5f, 11.0f, 12.0f, -3.0f};
    /* square: 181^2 = 32761 fits, 182^2 = 33124 does not; negative x squares positive */
    const float sq[8] = {-200.0f, 190.0f, 181.0f, 182.0f, 100.0f, -181.0f, 0.5f, -182.5f};
    /* a window lower down, [-40, -9]: 32767 * 2^-9 = 63.998, so e^x saturates from 4.1589 */
    const float ex2[6] = {4.15f, 4.17f, 1.0f, -2.0f, 6.0f, 3.0f};
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        saturation_case(FMT_FLEX16_5, "exp", ex, 10, 0);
        saturation_case(FMT_FLEX16_5, "square", sq, 8, 0);
        saturation_case(FMT_FLEX16_5, "exp", ex2, 6, -40);
        saturation_case(FMT_DFP16, "exp", ex, 10, 0);
        saturation_case(FMT_DFP16, "square", sq, 8, 0);
    }
}

int main(void)
{
    half_backward(FMT_FP16);
    half_backward(FMT_BF16);
    shared_backward(FMT_FLEX16_5);
    shared_backward(FMT_DFP16);
    saturation();
    return test_finish("test_unary_backward");
}
