/* Element-wise math (tensor_unary, tensor_unary_backward, tensor_clamp, tensor_pow_scalar) and
 * the public scalar conversions.
 *
 * What is checked, and against what:
 *   - fp16 and bf16, exhaustively: every one of the 65,536 patterns through every function on
 *     every backend; the result must be within 1 ulp of the correctly rounded exact value
 *     (the fp64 reference rounded once by fx_f64_to_fp16 / fx_f64_to_bf16; ulps counted on
 *     the ordered bit patterns, so the largest finite value and Inf are 1 apart, and +-0 are
 *     one point), NaN exactly where the reference is NaN, and the same bits on every backend.
 *   - fp32: a sweep over the whole bit-pattern range (every 4099th pattern in Release, about
 *     1.05 million, every 65537th under sanitizers), then all 65,536 fp16 and all 65,536 bf16
 *     patterns widened, every core (erf and erfc included) at every ISA level the CPU runs:
 *     the levels agree bit for bit, and the error against the fp64 reference is within the
 *     bound stated in src/fp32/f32_math.h (bound_f32 in unary_common.h, in ulps of the exact
 *     result on the fp32 grid). test_slow_unary_f32 sweeps 2^24 patterns a core (every 256th
 *     of the 2^32) plus the same 2 x 65,536.
 *   - FLEX16_5 and DFP16: the stored mantissas, exponent and write statistics are the same on
 *     every backend at 1 and 2 threads (forward and backward); values within half a step of
 *     the output exponent plus the fp32 bound of the reference.
 *   - Backward: dy * f'(x) on fp32 tensors against fp64 central differences of the reference
 *     f, within 16 fp32 ulps of the derivative's magnitude (the sum of the magnitudes of its
 *     terms, for silu, gelu and gelu_tanh, whose derivatives cross zero) plus 2^-146 |dy|
 *     (8 units of the smallest subnormal: the tails are subnormal).
 *   - Special values (IEEE results, signed zeros, limits), NaN/Inf from the math counted by
 *     shared-exponent writes, and bad arguments.
 *   - Scalar conversions: every 16-bit pattern, and binary64 inputs on both sides of every
 *     half-way point, where rounding through fp32 to nearest would round twice and differ.
 */
#include "unary_common.h"

#if defined(__SANITIZE_ADDRESS__)
#define FX_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define FX_SANITIZED 1
#endif
#endif
#ifndef FX_SANITIZED
#define FX_SANITIZED 0
#endif

/* The fp64 central difference of f at x (step h = 2^-17 max(1, |x|)). tanh and sigmoid beyond
 * |x| = 1 are differenced as f - lim f, written without cancellation (tanh x - 1 =
 * -2 / (e^2x + 1), ...), because f itself is 1 to within the step there. */
static double fd_f(int fn, double x, const double *p, double c)
{
    if (fn == FX_UN_TANH && fabs(c) > 1)
        return c > 0 ? -2 / (exp(2 * x) + 1) : 2 / (exp(-2 * x) + 1);
    if (fn == FX_UN_SIGMOID && c > 1) return -exp(-x) / (1 + exp(-x));
    return ref_f(fn, x, p);
}

static double central_difference(int fn, double x, const double *p)
{
    const double h = 0x1p-17 * fmax(1.0, fabs(x));
    return (fd_f(fn, x + h, p, x) - fd_f(fn, x - h, p, x)) / (2 * h);
}

/* the magnitude the gradient's tolerance scales with: |f'(x)|, or the sum of the magnitudes of
 * its terms where it crosses zero */
static double ref_mag(int fn, double x, const double *p)
{
    switch (fn) {
    case FX_UN_SILU: {
        const double s = sigmoid64(x);
        return s + fabs(x) * s * (1 - s);
    }
    case FX_UN_GELU: return Phi64(x) + fabs(x) * phi64(x);
    case FX_UN_GELU_TANH: {
        const double S = sigmoid64(gt_arg(x));
        return S + fabs(x) * 2 * S * (1 - S) * sqrt(2 / PI) * (1 + 3 * 0.044715 * x * x);
    }
    case FX_UN_CLAMP:
    case FX_UN_ABS: return 1;
    default: return fabs(central_difference(fn, x, p));
    }
}

/* run a function (fn, with parameters p) through the public API */
static int api_forward(tensor_t *out, const tensor_t *a, int fn, const double *p)
{
    if (fn == FX_UN_CLAMP) return tensor_clamp(out, a, p[0], p[1]);
    if (fn == FX_UN_POW) return tensor_pow_scalar(out, a, p[0]);
    return tensor_unary(out, a, tensor_unary_name(fn));
}

static int api_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x, int fn,
                        const double *p)
{
    if (fn == FX_UN_CLAMP) return tensor_clamp_backward(dx, dy, x, p[0], p[1]);
    if (fn == FX_UN_POW) return tensor_pow_scalar_backward(dx, dy, x, p[0]);
    return tensor_unary_backward(dx, dy, x, tensor_unary_name(fn));
}

/* The public cases: the 12 named functions, clamp, and pow at several exponents (the exact
 * shortcuts, integers with both parities, non-integers of both signs). */
typedef struct {
    int fn;
    double p[2];
} fcase;
static const fcase CASES[] = {
    {FX_UN_EXP, {0, 0}},        {FX_UN_LOG, {0, 0}},          {FX_UN_SQRT, {0, 0}},
    {FX_UN_RSQRT, {0, 0}},      {FX_UN_RECIPROCAL, {0, 0}},   {FX_UN_TANH, {0, 0}},
    {FX_UN_SIGMOID, {0, 0}},    {FX_UN_GELU, {0, 0}},         {FX_UN_GELU_TANH, {0, 0}},
    {FX_UN_SILU, {0, 0}},       {FX_UN_SQUARE, {0, 0}},       {FX_UN_ABS, {0, 0}},
    {FX_UN_CLAMP, {-1.5, 2.25}}, {FX_UN_CLAMP, {-INFINITY, 0.1}}, {FX_UN_POW, {2.5, 0}},
    {FX_UN_POW, {-1.7, 0}},     {FX_UN_POW, {3, 0}},          {FX_UN_POW, {-2, 0}},
    {FX_UN_POW, {0.5, 0}},      {FX_UN_POW, {2, 0}},          {FX_UN_POW, {-1, 0}},
    {FX_UN_POW, {1, 0}},        {FX_UN_POW, {0, 0}},          {FX_UN_POW, {0.3333333333333333, 0}},
};
#define NCASES ((int)(sizeof CASES / sizeof *CASES))

static int nbackends(void) { return flexpoint_backend_count(); }

/* ---- fp16 / bf16, every pattern ---------------------------------------------------------- */

static void half_exhaustive(fmt_t f)
{
    const int64_t n = 65536;
    uint16_t *in = malloc(n * sizeof *in), *got = malloc(n * sizeof *got),
             *first = malloc(n * sizeof *first);
    for (int64_t i = 0; i < n; i++) in[i] = (uint16_t)i;
    tensor_t *a = new1(f, n), *out = new1(f, n);
    CHECK_STATUS(tensor_set_raw(a, in), FX_OK);
    for (int ci = 0; ci < NCASES; ci++) {
        const fcase *c = &CASES[ci];
        int have_first = 0;
        for (int bi = 0; bi < nbackends(); bi++) {
            if (!flexpoint_backend_available(bi)) continue;
            const char *bn = flexpoint_backend_name(bi);
            CHECK_STATUS(flexpoint_set_backend(bn), FX_OK);
            CHECK_STATUS(api_forward(out, a, c->fn, c->p), FX_OK);
            CHECK_STATUS(tensor_get_raw(out, got), FX_OK);
            int bad = 0, worst = 0;
            for (int64_t i = 0; i < n; i++) {
                const double r = ref_f(c->fn, decode16(in[i], f), c->p);
                const uint16_t want = f == FMT_FP16 ? fx_f64_to_fp16(r) : fx_f64_to_bf16(r);
                int d;
                if (is_nan16(want, f) || is_nan16(got[i], f))
                    d = is_nan16(want, f) && is_nan16(got[i], f) ? 0 : 1000;
                else
                    d = abs(ord16(got[i]) - ord16(want));
                if (d > worst) worst = d;
                if (d > 1 && bad++ < 3)
                    CHECK(0, "%s %s(p=%g) %s: x=%a gives 0x%04x, the correctly rounded value is "
                          "0x%04x", fmt_name(f), fn_label(c->fn), c->p[0], bn,
                          decode16(in[i], f), got[i], want);
            }
            CHECK(bad == 0, "%s %s %s: %d of 65536 inputs more than 1 ulp off", fmt_name(f),
                  fn_label(c->fn), bn, bad);
            if (!have_first) {
                memcpy(first, got, n * sizeof *got);
                have_first = 1;
            } else {
                CHECK(memcmp(first, got, n * sizeof *got) == 0, "%s %s: %s differs from the "
                      "first backend", fmt_name(f), fn_label(c->fn), bn);
            }
            (void)worst;
        }
    }
    tensor_free(a);
    tensor_free(out);
    free(in);
    free(got);
    free(first);
    printf("%s: %d functions, all 65536 patterns, every backend: within 1 ulp\n", fmt_name(f),
           NCASES);
}

/* ---- special values -------------------------------------------------------------------- */

static uint32_t bits(float x) { return test_f32_bits(x); }

static void specials(void)
{
    typedef struct {
        int fn;
        float x, want;
    } sv;
    const float inf = INFINITY;
    const sv T[] = {
        {FX_UN_EXP, -inf, 0.0f}, {FX_UN_EXP, inf, inf}, {FX_UN_EXP, 0.0f, 1.0f},
        {FX_UN_EXP, -0.0f, 1.0f}, {FX_UN_EXP, 89.0f, inf}, {FX_UN_EXP, -104.0f, 0.0f},
        {FX_UN_EXP, -103.0f, 0x1p-149f}, /* e^-103 = 1.29 * 2^-149 */
        {FX_UN_LOG, 0.0f, -inf}, {FX_UN_LOG, -0.0f, -inf}, {FX_UN_LOG, inf, inf},
        {FX_UN_LOG, 1.0f, 0.0f}, {FX_UN_LOG, -1.0f, NAN}, {FX_UN_LOG, -inf, NAN},
        {FX_UN_SQRT, -0.0f, -0.0f}, {FX_UN_SQRT, 0.0f, 0.0f}, {FX_UN_SQRT, -1.0f, NAN},
        {FX_UN_SQRT, inf, inf}, {FX_UN_SQRT, 4.0f, 2.0f},
        {FX_UN_RSQRT, 0.0f, inf}, {FX_UN_RSQRT, -0.0f, -inf}, {FX_UN_RSQRT, inf, 0.0f},
        {FX_UN_RSQRT, -1.0f, NAN}, {FX_UN_RSQRT, 4.0f, 0.5f}, {FX_UN_RSQRT, 0x1p-148f, 0x1p74f},
        {FX_UN_RECIPROCAL, 0.0f, inf}, {FX_UN_RECIPROCAL, -0.0f, -inf},
        {FX_UN_RECIPROCAL, -inf, -0.0f}, {FX_UN_RECIPROCAL, 4.0f, 0.25f},
        {FX_UN_TANH, -0.0f, -0.0f}, {FX_UN_TANH, inf, 1.0f}, {FX_UN_TANH, -inf, -1.0f},
        {FX_UN_TANH, 0x1p-149f, 0x1p-149f}, {FX_UN_TANH, -20.0f, -1.0f},
        {FX_UN_SIGMOID, inf, 1.0f}, {FX_UN_SIGMOID, -inf, 0.0f}, {FX_UN_SIGMOID, 0.0f, 0.5f},
        {FX_UN_SIGMOID, -0.0f, 0.5f},
        {FX_UN_GELU, -inf, -0.0f}, {FX_UN_GELU, inf, inf}, {FX_UN_GELU, -0.0f, -0.0f},
        {FX_UN_GELU, 0.0f, 0.0f}, {FX_UN_GELU, 30.0f, 30.0f}, {FX_UN_GELU, -30.0f, -0.0f},
        {FX_UN_GELU_TANH, -inf, -0.0f}, {FX_UN_GELU_TANH, inf, inf},
        {FX_UN_GELU_TANH, -0.0f, -0.0f}, {FX_UN_GELU_TANH, 50.0f, 50.0f},
        {FX_UN_SILU, -inf, -0.0f}, {FX_UN_SILU, inf, inf}, {FX_UN_SILU, -0.0f, -0.0f},
        {FX_UN_SILU, 3e38f, 3e38f},
        {FX_UN_SQUARE, -0.0f, 0.0f}, {FX_UN_SQUARE, 2e19f, inf}, {FX_UN_SQUARE, -inf, inf},
        {FX_UN_ABS, -0.0f, 0.0f}, {FX_UN_ABS, -inf, inf},
    };
    const int nt = (int)(sizeof T / sizeof *T);
    for (int bi = 0; bi < nbackends(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        tensor_t *a = new1(FMT_FP32, 1), *o = new1(FMT_FP32, 1);
        for (int i = 0; i < nt; i++) {
            float y = 0;
            CHECK_STATUS(tensor_from_f32(a, &T[i].x), FX_OK);
            CHECK_STATUS(tensor_unary(o, a, tensor_unary_name(T[i].fn)), FX_OK);
            CHECK_STATUS(tensor_to_f32(o, &y), FX_OK);
            const int ok = isnan(T[i].want) ? isnan(y) : bits(y) == bits(T[i].want);
            CHECK(ok, "%s(%a) = %a, want %a (%s)", fn_label(T[i].fn), T[i].x, y, T[i].want,
                  flexpoint_backend_name(bi));
        }
        /* NaN in, NaN out, for every function and its gradient */
        const float qn = NAN;
        for (int ci = 0; ci < NCASES; ci++) {
            const fcase *c = &CASES[ci];
            float y = 0, one = 1.0f;
            CHECK_STATUS(tensor_from_f32(a, &qn), FX_OK);
            CHECK_STATUS(api_forward(o, a, c->fn, c->p), FX_OK);
            CHECK_STATUS(tensor_to_f32(o, &y), FX_OK);
            const int nan_out = !(c->fn == FX_UN_POW && c->p[0] == 0.0); /* x^0 = 1 */
            CHECK(nan_out ? isnan(y) : y == 1.0f, "%s(p=%g)(NaN) = %a", fn_label(c->fn),
                  c->p[0], y);
            tensor_t *d = new1(FMT_FP32, 1);
            CHECK_STATUS(tensor_from_f32(d, &one), FX_OK);
            CHECK_STATUS(api_backward(o, d, a, c->fn, c->p), FX_OK);
            CHECK_STATUS(tensor_to_f32(o, &y), FX_OK);
            /* clamp's gradient is a mask (NaN is outside it); pow with p = 0 or 1 ignores x */
            const int nan_grad = c->fn != FX_UN_CLAMP &&
                                 !(c->fn == FX_UN_POW && (c->p[0] == 0.0 || c->p[0] == 1.0));
            CHECK(nan_grad ? isnan(y) : !isnan(y), "%s(p=%g)'(NaN) = %a", fn_label(c->fn),
                  c->p[0], y);
            tensor_free(d);
        }
        /* pow: C99's special cases */
        typedef struct {
            double p;
            float x, want;
        } pv;
        const pv P[] = {
            {3, -0.0f, -0.0f}, {3, -2.0f, -8.0f}, {2, -3.0f, 9.0f}, {-1, -0.0f, -inf},
            {-2, -0.0f, inf}, {0.5, -0.0f, 0.0f}, {0.5, -inf, inf}, {0.5, -4.0f, NAN},
            {-1.5, 0.0f, inf}, {2.5, inf, inf}, {-2.5, inf, 0.0f}, {3, -inf, -inf},
            {-3, -inf, -0.0f}, {2, -inf, inf}, {0, NAN, 1.0f}, {0, -inf, 1.0f},
            {7, 1.0f, 1.0f}, {-0.3, 1.0f, 1.0f}, {1, -5.5f, -5.5f}, {2, 3e38f, inf},
            {-1, 4.0f, 0.25f}, {0.5, 2.25f, 1.5f}, {1e6, 1.0f, 1.0f}, {2.5, -1.0f, NAN},
        };
        for (size_t i = 0; i < sizeof P / sizeof *P; i++) {
            float y = 0;
            CHECK_STATUS(tensor_from_f32(a, &P[i].x), FX_OK);
            CHECK_STATUS(tensor_pow_scalar(o, a, P[i].p), FX_OK);
            CHECK_STATUS(tensor_to_f32(o, &y), FX_OK);
            const int ok = isnan(P[i].want) ? isnan(y) : bits(y) == bits(P[i].want);
            CHECK(ok, "pow(%a, %g) = %a, want %a", P[i].x, P[i].p, y, P[i].want);
        }
        tensor_free(a);
        tensor_free(o);
    }
}

/* ---- FLEX16_5 / DFP16: bit-identical across backends and threads, within the bound -------- */

static double sample(int fn, test_rng *r)
{
    const double z = test_rng_normal(r);
    switch (fn) {
    case FX_UN_LOG: case FX_UN_SQRT: case FX_UN_RSQRT: return 0.05 + 4 * fabs(z);
    case FX_UN_RECIPROCAL: return (z < 0 ? -0.25 : 0.25) + z;
    case FX_UN_EXP: return 2 * z;
    case FX_UN_POW: return 0.1 + 2 * fabs(z);
    default: return 3 * z;
    }
}

typedef struct {
    int16_t *m;
    int exp;
    double sat, nonfin, tmax;
} snap;

static void take(tensor_t *t, int64_t n, snap *s)
{
    s->m = malloc((size_t)n * sizeof *s->m);
    CHECK_STATUS(tensor_get_raw(t, s->m), FX_OK);
    s->exp = tensor_exp(t);
    CHECK_STATUS(tensor_stat(t, "saturated", &s->sat), FX_OK);
    CHECK_STATUS(tensor_stat(t, "nonfinite", &s->nonfin), FX_OK);
    CHECK_STATUS(tensor_stat(t, "true_max", &s->tmax), FX_OK);
}

static int same(const snap *a, const snap *b, int64_t n)
{
    return a->exp == b->exp && a->sat == b->sat && a->nonfin == b->nonfin &&
           a->tmax == b->tmax && memcmp(a->m, b->m, (size_t)n * sizeof *a->m) == 0;
}

static void shared_formats(void)
{
    const int64_t n = 40000; /* above the kernels' and the write's threading thresholds */
    const fmt_t fmts[2] = {FMT_FLEX16_5, FMT_DFP16};
    float *xv = malloc(n * sizeof *xv), *gv = malloc(n * sizeof *gv), *xr = malloc(n * sizeof *xr),
          *yv = malloc(n * sizeof *yv);
    const int prev_threads = flexpoint_set_num_threads(1);
    for (int fi = 0; fi < 2; fi++) {
        const fmt_t f = fmts[fi];
        for (int ci = 0; ci < NCASES; ci++) {
            const fcase *c = &CASES[ci];
            test_rng rng;
            test_rng_seed(&rng, 7 + (uint64_t)ci);
            for (int64_t i = 0; i < n; i++) {
                xv[i] = (float)sample(c->fn, &rng);
                gv[i] = (float)test_rng_normal(&rng);
            }
            snap ref_fw = {0}, ref_bw = {0};
            int have = 0;
            for (int bi = 0; bi < nbackends(); bi++) {
                if (!flexpoint_backend_available(bi)) continue;
                CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
                for (int nt = 1; nt <= 2; nt++) {
                    flexpoint_set_num_threads(nt);
                    tensor_t *a = new1(f, n), *g = new1(f, n), *y = new1(f, n), *dx = new1(f, n);
                    CHECK_STATUS(tensor_from_f32(a, xv), FX_OK);
                    CHECK_STATUS(tensor_from_f32(g, gv), FX_OK);
                    CHECK_STATUS(api_forward(y, a, c->fn, c->p), FX_OK);
                    CHECK_STATUS(api_backward(dx, g, a, c->fn, c->p), FX_OK);
                    snap sf, sb;
                    take(y, n, &sf);
                    take(dx, n, &sb);
                    if (!have) {
                        ref_fw = sf;
                        ref_bw = sb;
                        have = 1;
                        /* values: within half a step of the output exponent plus the fp32
                         * bound (relative to the exact result of the dequantised input) */
                        CHECK_STATUS(tensor_to_f32(a, xr), FX_OK);
                        CHECK_STATUS(tensor_to_f32(y, yv), FX_OK);
                        const double half = ldexp(1.0, sf.exp - 1);
                        int bad = 0;
                        for (int64_t i = 0; i < n; i++) {
                            const double r = ref_f(c->fn, xr[i], c->p);
                            if (!isfinite(r)) continue;
                            const double tol = half * (1 + 1e-9) +
                                               (bound_f32(c->fn) + 1) * ulp32(r);
                            if (fabs(yv[i] - r) > tol && fabs(r) < 32767 * 2 * half &&
                                bad++ < 3)
                                CHECK(0, "%s %s(p=%g): x=%a y=%a exact %a (exp %d)",
                                      fmt_name(f), fn_label(c->fn), c->p[0], xr[i], yv[i], r,
                                      sf.exp);
                        }
                        CHECK(bad == 0, "%s %s: %d values outside the bound", fmt_name(f),
                              fn_label(c->fn), bad);
                    } else {
                        CHECK(same(&ref_fw, &sf, n), "%s %s(p=%g): %s at %d threads differs "
                              "from the first run (exp %d vs %d)", fmt_name(f), fn_label(c->fn),
                              c->p[0], flexpoint_backend_name(bi), nt, sf.exp, ref_fw.exp);
                        CHECK(same(&ref_bw, &sb, n), "%s %s(p=%g) backward: %s at %d threads "
                              "differs from the first run", fmt_name(f), fn_label(c->fn),
                              c->p[0], flexpoint_backend_name(bi), nt);
                        free(sf.m);
                        free(sb.m);
                    }
                    tensor_free(a);
                    tensor_free(g);
                    tensor_free(y);
                    tensor_free(dx);
                }
            }
            free(ref_fw.m);
            free(ref_bw.m);
        }
    }
    flexpoint_set_num_threads(prev_threads);
    free(xv);
    free(gv);
    free(xr);
    free(yv);
    printf("flex16_5, dfp16: %d functions, forward and backward identical on every backend at "
           "1 and 2 threads\n", NCASES);
}

/* NaN/Inf produced by the math are counted by the shared-exponent write, never a crash. */
static void shared_nonfinite(void)
{
    const fmt_t fmts[2] = {FMT_FLEX16_5, FMT_DFP16};
    const float xv[6] = {0.0f, -1.0f, 2.0f, 0.5f, -3.0f, 4.0f};
    for (int fi = 0; fi < 2; fi++) {
        tensor_t *a = new1(fmts[fi], 6), *y = new1(fmts[fi], 6);
        CHECK_STATUS(tensor_from_f32(a, xv), FX_OK);
        double nf = -1;
        /* log: -Inf at 0, NaN at -1 and -3 */
        CHECK_STATUS(tensor_unary(y, a, "log"), FX_OK);
        CHECK_STATUS(tensor_stat(y, "nonfinite", &nf), FX_OK);
        CHECK(nf == 3, "%s log: nonfinite %g, want 3", fmt_name(fmts[fi]), nf);
        int16_t m[6];
        CHECK_STATUS(tensor_get_raw(y, m), FX_OK);
        CHECK(m[0] == -32767 && m[1] == 0 && m[4] == 0, "%s log: -Inf -> %d, NaN -> %d, %d",
              fmt_name(fmts[fi]), m[0], m[1], m[4]);
        CHECK_STATUS(tensor_unary(y, a, "reciprocal"), FX_OK); /* +Inf at 0 */
        CHECK_STATUS(tensor_stat(y, "nonfinite", &nf), FX_OK);
        CHECK(nf == 1, "%s reciprocal: nonfinite %g, want 1", fmt_name(fmts[fi]), nf);
        CHECK_STATUS(tensor_unary(y, a, "tanh"), FX_OK); /* all finite */
        CHECK_STATUS(tensor_stat(y, "nonfinite", &nf), FX_OK);
        CHECK(nf == 0, "%s tanh: nonfinite %g", fmt_name(fmts[fi]), nf);
        tensor_free(a);
        tensor_free(y);
    }
}

/* Mixed formats: the math in fp32 whatever the input format, one rounding into out. */
static void mixed_formats(void)
{
    const int64_t n = 257;
    float xv[257], x32[257], yv[257];
    test_rng rng;
    test_rng_seed(&rng, 5);
    for (int64_t i = 0; i < n; i++) xv[i] = (float)(2 * test_rng_normal(&rng));
    for (int fa = 0; fa < FMT_COUNT; fa++)
        for (int fo = 0; fo < FMT_COUNT; fo++) {
            tensor_t *a = new1((fmt_t)fa, n), *o = new1((fmt_t)fo, n), *r = new1((fmt_t)fo, n);
            tensor_t *a32 = new1(FMT_FP32, n);
            CHECK_STATUS(tensor_from_f32(a, xv), FX_OK);
            CHECK_STATUS(tensor_to_f32(a, x32), FX_OK);
            CHECK_STATUS(tensor_from_f32(a32, x32), FX_OK);
            CHECK_STATUS(tensor_unary(o, a, "gelu"), FX_OK);
            /* the same values from an fp32 input: dequantising or widening is exact */
            CHECK_STATUS(tensor_unary(r, a32, "gelu"), FX_OK);
            float y2[257];
            CHECK_STATUS(tensor_to_f32(o, yv), FX_OK);
            CHECK_STATUS(tensor_to_f32(r, y2), FX_OK);
            CHECK(memcmp(yv, y2, sizeof yv) == 0, "gelu %s -> %s differs from the fp32 input's",
                  fmt_name((fmt_t)fa), fmt_name((fmt_t)fo));
            tensor_free(a);
            tensor_free(o);
            tensor_free(r);
            tensor_free(a32);
        }
}

/* Views (strided input and output) give the values of the contiguous route; empty tensors
 * are fine. */
static void views_and_empty(void)
{
    int64_t sh[2] = {6, 10}, sh2[2] = {10, 6};
    float xv[60], a1[30], a2[30];
    for (int i = 0; i < 60; i++) xv[i] = (float)(i - 30) * 0.37f;
    for (int f = 0; f < FMT_COUNT; f++) {
        tensor_t *base = tensor_new((fmt_t)f, 2, sh), *obase = tensor_new((fmt_t)f, 2, sh2);
        CHECK_STATUS(tensor_from_f32(base, xv), FX_OK);
        tensor_t *v = tensor_view_slice(base, 1, 1, 10, 2);           /* [6, 5], stride 2 */
        tensor_t *ov = tensor_view_transpose(obase, 0, 1);            /* [6, 10] */
        tensor_t *ovs = tensor_view_slice(ov, 1, 0, 5, 1);            /* [6, 5], strided */
        int64_t s30[2] = {6, 5};
        tensor_t *c = tensor_new((fmt_t)f, 2, s30), *oc = tensor_new(FMT_FP32, 2, s30);
        tensor_t *ov32 = tensor_new(FMT_FP32, 2, s30);
        CHECK_STATUS(tensor_copy(c, v), FX_OK);
        CHECK_STATUS(tensor_unary(oc, c, "silu"), FX_OK);
        CHECK_STATUS(tensor_unary(ov32, v, "silu"), FX_OK);
        CHECK_STATUS(tensor_to_f32(oc, a1), FX_OK);
        CHECK_STATUS(tensor_to_f32(ov32, a2), FX_OK);
        CHECK(memcmp(a1, a2, sizeof a1) == 0, "%s: silu of a strided view differs", fmt_name((fmt_t)f));
        /* into a strided view: the same values as the fp32 result rounded into the format
         * (a shared-exponent view keeps its storage's exponent: half a step of it) */
        CHECK_STATUS(tensor_unary(ovs, v, "silu"), FX_OK);
        CHECK_STATUS(tensor_to_f32(ovs, a2), FX_OK);
        if (fmt_is_shared_exponent((fmt_t)f)) {
            const double step = ldexp(1.0, tensor_exp(obase));
            for (int i = 0; i < 30; i++)
                CHECK(fabs(a2[i] - a1[i]) <= step / 2 || fabs(a1[i]) > 32767 * step,
                      "%s: silu into a strided view [%d]: %g vs %g", fmt_name((fmt_t)f), i,
                      a2[i], a1[i]);
        } else {
            CHECK_STATUS(tensor_unary(c, v, "silu"), FX_OK); /* contiguous, same format */
            CHECK_STATUS(tensor_to_f32(c, a1), FX_OK);
            CHECK(memcmp(a1, a2, sizeof a1) == 0, "%s: silu into a strided view differs",
                  fmt_name((fmt_t)f));
        }
        int64_t z = 0;
        tensor_t *e = tensor_new((fmt_t)f, 1, &z);
        CHECK_STATUS(tensor_unary(e, e, "gelu"), FX_OK);
        CHECK_STATUS(tensor_unary_backward(e, e, e, "gelu"), FX_OK);
        CHECK_STATUS(tensor_pow_scalar(e, e, 1.5), FX_OK);
        tensor_free(e);
        tensor_free(v);
        tensor_free(ovs);
        tensor_free(ov);
        tensor_free(base);
        tensor_free(obase);
        tensor_free(c);
        tensor_free(oc);
        tensor_free(ov32);
    }
}

/* ---- backward against fp64 central differences ------------------------------------------- */

static void backward_fd(void)
{
    const int npts = 400;
    for (int bi = 0; bi < nbackends(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        for (int ci = 0; ci < NCASES; ci++) {
            const fcase *c = &CASES[ci];
            test_rng rng;
            test_rng_seed(&rng, 31 + (uint64_t)ci);
            float xv[400], gv[400], dxv[400];
            for (int i = 0; i < npts; i++) {
                double x;
                for (;;) { /* away from kinks, poles and the edges of the domain */
                    const double z = test_rng_normal(&rng);
                    x = (i % 4 == 3) ? 12 * z : 3 * z; /* some points in the tails */
                    if (c->fn == FX_UN_LOG || c->fn == FX_UN_SQRT || c->fn == FX_UN_RSQRT ||
                        (c->fn == FX_UN_POW && c->p[0] != floor(c->p[0])))
                        x = fabs(x) + 0.01;
                    if (c->fn == FX_UN_EXP) x = fmin(x, 80.0);
                    if (c->fn == FX_UN_RECIPROCAL || c->fn == FX_UN_POW) {
                        if (fabs(x) < 0.05) continue;
                        x = fmax(fmin(x, 30.0), -30.0);
                    }
                    if (c->fn == FX_UN_ABS && fabs(x) < 1e-3) continue;
                    if (c->fn == FX_UN_CLAMP && (fabs(x - c->p[0]) < 1e-3 || fabs(x - c->p[1]) < 1e-3))
                        continue;
                    break;
                }
                xv[i] = (float)x;
                gv[i] = (float)test_rng_normal(&rng);
            }
            tensor_t *x = new1(FMT_FP32, npts), *g = new1(FMT_FP32, npts), *d = new1(FMT_FP32, npts);
            CHECK_STATUS(tensor_from_f32(x, xv), FX_OK);
            CHECK_STATUS(tensor_from_f32(g, gv), FX_OK);
            CHECK_STATUS(api_backward(d, g, x, c->fn, c->p), FX_OK);
            CHECK_STATUS(tensor_to_f32(d, dxv), FX_OK);
            int bad = 0;
            double worst = 0;
            for (int i = 0; i < npts; i++) {
                const double xd = xv[i];
                const double want = gv[i] * central_difference(c->fn, xd, c->p);
                const double scale = fabs(gv[i]) * ref_mag(c->fn, xd, c->p);
                const double tol = 16 * U32 * scale + 0x1p-146 * fabs(gv[i]);
                const double err = fabs(dxv[i] - want);
                if (scale * U32 > 0x1p-126 && err / scale > worst) worst = err / scale;
                if (!(err <= tol) && bad++ < 3)
                    CHECK(0, "%s(p=%g)' %s: x=%a dy=%a gives %a, differences %a (tol %.3g)",
                          fn_label(c->fn), c->p[0], flexpoint_backend_name(bi), xd, gv[i],
                          dxv[i], want, tol);
            }
            CHECK(bad == 0, "%s(p=%g)': %d of %d gradients outside the tolerance",
                  fn_label(c->fn), c->p[0], bad, npts);
            if (bi == 0)
                printf("backward %-10s p=%-6.3g worst %.2f ulps of the derivative's magnitude (normal range)\n",
                       fn_label(c->fn), c->p[0], worst / U32);
            tensor_free(x);
            tensor_free(g);
            tensor_free(d);
        }
    }
}

/* ---- bad arguments ------------------------------------------------------------------------ */

static void bad_input(void)
{
    int64_t s3 = 3, s4 = 4;
    tensor_t *a = tensor_new(FMT_FP32, 1, &s3), *b = tensor_new(FMT_FP32, 1, &s4);
    tensor_t *o = tensor_new(FMT_FP16, 1, &s3);
    const float xv[3] = {1, 2, 3};
    tensor_from_f32(a, xv);
    uint16_t before[3], after[3];
    CHECK_STATUS(tensor_unary(o, a, "exp"), FX_OK);
    tensor_get_raw(o, before);

    CHECK_STATUS(tensor_unary(NULL, a, "exp"), FX_EINVAL);
    CHECK_STATUS(tensor_unary(o, NULL, "exp"), FX_EINVAL);
    CHECK_STATUS(tensor_unary(o, a, NULL), FX_EINVAL);
    CHECK_STATUS(tensor_unary(o, a, "expm1"), FX_ENAME);
    CHECK(strstr(flexpoint_last_error(), "known: exp, log") != NULL, "message: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_unary(o, a, "EXP"), FX_ENAME);
    CHECK_STATUS(tensor_unary(o, a, ""), FX_ENAME);
    CHECK_STATUS(tensor_unary(o, b, "exp"), FX_ESHAPE);
    CHECK_STATUS(tensor_unary_backward(o, a, b, "exp"), FX_ESHAPE);
    CHECK_STATUS(tensor_unary_backward(o, b, b, "exp"), FX_ESHAPE);
    CHECK_STATUS(tensor_unary_backward(o, a, a, "nope"), FX_ENAME);
    CHECK_STATUS(tensor_unary_backward(NULL, a, a, "exp"), FX_EINVAL);
    CHECK_STATUS(tensor_unary_backward(o, a, NULL, "exp"), FX_EINVAL);
    CHECK_STATUS(tensor_clamp(o, a, 2.0, 1.0), FX_EINVAL);
    CHECK_STATUS(tensor_clamp(o, a, NAN, 1.0), FX_EINVAL);
    CHECK_STATUS(tensor_clamp(o, a, 0.0, NAN), FX_EINVAL);
    CHECK_STATUS(tensor_clamp(o, b, 0.0, 1.0), FX_ESHAPE);
    CHECK_STATUS(tensor_clamp(NULL, a, 0.0, 1.0), FX_EINVAL);
    CHECK_STATUS(tensor_clamp_backward(o, a, a, 1.0, -1.0), FX_EINVAL);
    CHECK_STATUS(tensor_clamp_backward(o, a, b, 0.0, 1.0), FX_ESHAPE);
    CHECK_STATUS(tensor_pow_scalar(o, a, INFINITY), FX_EINVAL);
    CHECK_STATUS(tensor_pow_scalar(o, a, NAN), FX_EINVAL);
    CHECK_STATUS(tensor_pow_scalar(o, b, 2.0), FX_ESHAPE);
    CHECK_STATUS(tensor_pow_scalar_backward(o, a, a, -INFINITY), FX_EINVAL);
    CHECK_STATUS(tensor_pow_scalar_backward(o, a, b, 2.0), FX_ESHAPE);
    tensor_get_raw(o, after);
    CHECK(memcmp(before, after, sizeof before) == 0, "a failed call wrote its output");
    /* a clamp with equal bounds is valid, and so are infinite ones */
    CHECK_STATUS(tensor_clamp(o, a, 1.0, 1.0), FX_OK);
    CHECK_STATUS(tensor_clamp(o, a, -INFINITY, INFINITY), FX_OK);

    int names = 0;
    while (tensor_unary_name(names)) names++;
    CHECK(names == 12, "tensor_unary_name lists %d names", names);
    CHECK(tensor_unary_name(-1) == NULL, "tensor_unary_name(-1)");
    for (int i = 0; i < names; i++) CHECK_STATUS(tensor_unary(o, a, tensor_unary_name(i)), FX_OK);

    /* in place */
    tensor_t *c = tensor_new(FMT_FP32, 1, &s3);
    tensor_from_f32(c, xv);
    CHECK_STATUS(tensor_unary(c, c, "square"), FX_OK);
    float got[3];
    tensor_to_f32(c, got);
    CHECK(got[0] == 1 && got[1] == 4 && got[2] == 9, "in-place square: %g %g %g", got[0],
          got[1], got[2]);
    tensor_free(a);
    tensor_free(b);
    tensor_free(o);
    tensor_free(c);
}

/* ---- scalar conversions ------------------------------------------------------------------- */

/* An independent binary64 -> fp16/bf16 rounding: scale to the target's grid, rint (ties to
 * even in the default rounding mode, exact scaling by powers of two), rebuild. */
static uint16_t ref_round16(double d, int fbits, int emin, double overflow, int bf)
{
    if (isnan(d)) return bf ? (uint16_t)(signbit(d) ? 0xFFC0 : 0x7FC0) : (uint16_t)(signbit(d) ? 0xFE00 : 0x7E00);
    const double a = fabs(d);
    uint16_t r;
    if (a >= overflow) {
        r = bf ? 0x7F80 : 0x7C00;
    } else {
        int e;
        frexp(a, &e);
        e -= 1;
        if (e < emin) e = emin;
        const double q = nearbyint(ldexp(a, fbits - e));
        const float v = (float)ldexp(q, e - fbits); /* exact */
        r = (uint16_t)((bf ? fx_f32_to_bf16(v) : fx_f32_to_fp16(v)) & 0x7FFF);
    }
    return (uint16_t)(r | (signbit(d) ? 0x8000 : 0));
}

static void conversions(void)
{
    int bad = 0, differs16 = 0, differsbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const uint16_t u = (uint16_t)h;
        const float f = fx_fp16_to_f32(u), b = fx_bf16_to_f32(u);
        /* round trips: every non-NaN pattern comes back */
        if (!isnan(f)) bad += fx_f32_to_fp16(f) != u || fx_f64_to_fp16((double)f) != u;
        else bad += (fx_f32_to_fp16(f) & 0x7FFF) != 0x7E00;
        if (!isnan(b)) bad += fx_f32_to_bf16(b) != u || fx_f64_to_bf16((double)b) != u ||
                               fx_f32_to_bf16_trunc(b) != u;
        else bad += (fx_f32_to_bf16_trunc(b) & 0x7FFF) != 0x7FC0;
        /* truncation: the top half of every fp32 with this top half (NaN: quiet NaN) */
        const uint32_t lows[6] = {0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
        for (int j = 0; j < 6; j++) {
            const float x = f32_of(((uint32_t)u << 16) | lows[j]);
            const uint16_t t = fx_f32_to_bf16_trunc(x);
            bad += isnan(x) ? (t & 0x7FFF) != 0x7FC0 || (t & 0x8000) != (u & 0x8000) : t != u;
        }
        /* binary64 on both sides of the half-way point above u, and exactly on it: the fp32
         * rounding of m +- m 2^-40 is m itself, a tie for the 16-bit rounding */
        for (int bf = 0; bf < 2; bf++) {
            const double v0 = bf ? b : f, v1 = bf ? fx_bf16_to_f32((uint16_t)(u + 1)) : fx_fp16_to_f32((uint16_t)(u + 1));
            if (!isfinite(v0) || !isfinite(v1) || (u & 0x7FFF) == (bf ? 0x7F7F : 0x7BFF)) continue;
            const double m = (v0 + v1) / 2;
            const double ds[3] = {m, m + fabs(m) * 0x1p-40, m - fabs(m) * 0x1p-40};
            for (int k = 0; k < 3; k++) {
                const uint16_t got = bf ? fx_f64_to_bf16(ds[k]) : fx_f64_to_fp16(ds[k]);
                const uint16_t want = bf ? ref_round16(ds[k], 7, -126, 0x1.ffp127, 1)
                                         : ref_round16(ds[k], 10, -14, 65520.0, 0);
                const uint16_t twice = bf ? fx_f32_to_bf16((float)ds[k]) : fx_f32_to_fp16((float)ds[k]);
                if (got != want && bad++ < 5)
                    fprintf(stderr, "%s(%a) = 0x%04x, want 0x%04x\n", bf ? "fx_f64_to_bf16" : "fx_f64_to_fp16", ds[k], got, want);
                if (twice != want) *(bf ? &differsbf : &differs16) += 1;
            }
        }
    }
    CHECK(bad == 0, "%d conversion mismatches", bad);
    /* the counterexamples exist: rounding through fp32 to nearest gets them wrong */
    CHECK(differs16 > 10000 && differsbf > 10000, "double rounding differs on %d fp16 and %d "
          "bf16 cases", differs16, differsbf);
    CHECK(fx_f64_to_fp16(1 + 0x1p-11 + 0x1p-30) == 0x3C01, "the documented example");
    CHECK(fx_f32_to_fp16((float)(1 + 0x1p-11 + 0x1p-30)) == 0x3C00, "double rounding example");
    CHECK(fx_f64_to_fp16(1e300) == 0x7C00 && fx_f64_to_fp16(-1e300) == 0xFC00 &&
          fx_f64_to_fp16(1e-300) == 0 && fx_f64_to_fp16(-1e-300) == 0x8000 &&
          fx_f64_to_bf16(1e300) == 0x7F80 && fx_f64_to_bf16(-1e-300) == 0x8000 &&
          fx_f64_to_fp16(65519.99) == 0x7BFF && fx_f64_to_fp16(65520.0) == 0x7C00 &&
          fx_f64_to_fp16(0x1p-25) == 0 && fx_f64_to_fp16(0x1p-25 + 0x1p-60) == 1,
          "binary64 edges");
    CHECK(fx_f32_to_bf16_trunc(f32_of(0x3F80FFFF)) == 0x3F80 && fx_f32_to_bf16(f32_of(0x3F80FFFF)) == 0x3F81,
          "truncation vs nearest");
    CHECK(fx_f32_to_bf16_trunc(f32_of(0x7F800001)) == 0x7FC0, "truncated NaN stays NaN");
    printf("scalar conversions: every 16-bit pattern, %d + %d half-way cases where rounding "
           "through fp32 differs\n", differs16, differsbf);
}

/* gelu and its derivative run as split maps (src/fp32/f32_math_impl.h): each block of 512
 * values is partitioned by branch, each branch computed over its dense buffer, the results
 * expanded back. Every level's whole-array call, out of place and in place (y = x forward,
 * y = dy backward), must give each element the bits of that level's call on the element
 * alone (the one-vector form, which computes both branches and selects), over lengths that
 * end inside a vector, on a block boundary and past it, with branches mixed at random and
 * NaN, Inf, zeros, subnormals and out-of-range values among them. */
static void split_map_blocks(void)
{
    math_entry e[3];
    const char *ln[3];
    const int nl = levels(e, ln);
    static const int64_t lens[] = {1, 7, 15, 16, 17, 33, 511, 512, 513, 1023, 1024, 1031, 2600};
    enum { NMAX = 2600 };
    static float x[NMAX], g[NMAX], whole[NMAX], inplace[NMAX], one[NMAX];
    const float odd[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 0x1p-140f, -0x1p-140f, 30.0f,
                         -30.0f, 0.70710677f, -0.70710677f, 0.7071068f, -0.7071068f};
    uint64_t st = 0x9E3779B97F4A7C15ull;
    int bad = 0, calls = 0;
    for (int l = 0; l < nl; l++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int64_t n = lens[li];
            for (int64_t i = 0; i < n; i++) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                const double u = (double)(st >> 11) * 0x1p-53;
                x[i] = (st >> 7) % 23 == 0 ? odd[(st >> 20) % (sizeof odd / sizeof odd[0])]
                                           : (float)((u - 0.5) * 6.0);
                g[i] = (float)(0.75 - u);
            }
            for (int back = 0; back < 2; back++) {
                const float *dy = back ? g : NULL;
                e[l](FX_UN_GELU, NULL, x, dy, whole, n);
                memcpy(inplace, back ? g : x, (size_t)n * sizeof(float));
                e[l](FX_UN_GELU, NULL, back ? x : inplace, back ? inplace : NULL, inplace, n);
                for (int64_t i = 0; i < n; i++)
                    e[l](FX_UN_GELU, NULL, x + i, back ? g + i : NULL, one + i, 1);
                calls += 2;
                for (int64_t i = 0; i < n; i++)
                    if (bits(whole[i]) != bits(one[i]) || bits(inplace[i]) != bits(one[i])) {
                        if (bad++ < 5)
                            fprintf(stderr, "%s gelu %s n=%lld [%lld] x=%a: whole %a, in place "
                                    "%a, alone %a\n", ln[l], back ? "backward" : "forward",
                                    (long long)n, (long long)i, x[i], whole[i], inplace[i],
                                    one[i]);
                    }
            }
        }
    CHECK(bad == 0, "%d gelu split-map elements differ from the one-vector form", bad);
    printf("gelu split maps: %d whole-array calls over %d levels, each element the bits of the "
           "one-vector form\n", calls, nl);
}

int main(void)
{
    conversions();
    bad_input();
    specials();
    half_exhaustive(FMT_FP16);
    half_exhaustive(FMT_BF16);
    f32_sweep(FX_SANITIZED ? 65537u : 4099u, 12345u);
    split_map_blocks();
    shared_formats();
    shared_nonfinite();
    mixed_formats();
    views_and_empty();
    backward_fd();
    return test_finish("test_unary");
}
