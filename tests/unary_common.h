/* Shared by test_unary.c and test_slow_unary_f32.c: the fp64 references of the element-wise
 * functions, the fp32 bounds they are held to (src/fp32/f32_math.h), and the sweep that checks
 * every fp32 core on every ISA level against both. */
#ifndef FX_TEST_UNARY_COMMON_H
#define FX_TEST_UNARY_COMMON_H

#include "flexpoint.h"
#include "fp32/f32_math.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U32 0x1.0p-24
#define PI 3.14159265358979323846

/* ---- fp64 references --------------------------------------------------------------------- */

static inline double sigmoid64(double x) { return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)); }
/* 2u of gelu_tanh: 2 sqrt(2/pi) (x + 0.044715 x^3) */
static inline double gt_arg(double x) { return 2 * sqrt(2 / PI) * (x + 0.044715 * x * x * x); }
static inline double phi64(double x) { return exp(-0.5 * x * x) / sqrt(2 * PI); }
static inline double Phi64(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

static inline double ref_f(int fn, double x, const double *p)
{
    switch (fn) {
    case FX_UN_EXP: return exp(x);
    case FX_UN_LOG: return log(x);
    case FX_UN_SQRT: return sqrt(x);
    case FX_UN_RSQRT: return 1 / sqrt(x);
    case FX_UN_RECIPROCAL: return 1 / x;
    case FX_UN_TANH: return tanh(x);
    case FX_UN_SIGMOID: return sigmoid64(x);
    case FX_UN_GELU: return isinf(x) ? (x > 0 ? x : -0.0) : x * Phi64(x);
    case FX_UN_GELU_TANH: return isinf(x) ? (x > 0 ? x : -0.0) : x * sigmoid64(gt_arg(x));
    case FX_UN_SILU: return isinf(x) ? (x > 0 ? x : -0.0) : x * sigmoid64(x);
    case FX_UN_SQUARE: return x * x;
    case FX_UN_ABS: return fabs(x);
    case FX_UN_CLAMP: return isnan(x) ? x : (x < p[0] ? p[0] : (x > p[1] ? p[1] : x));
    case FX_UN_POW: return pow(x, p[0]);
    case FX_UN_ERF: return erf(x);
    case FX_UN_ERFC: return erfc(x);
    }
    return NAN;
}

/* The fp32 bounds of src/fp32/f32_math.h, in ulps. */
static inline double bound_f32(int fn)
{
    switch (fn) {
    case FX_UN_EXP: case FX_UN_LOG: case FX_UN_RSQRT: return 1.0;
    case FX_UN_SQRT: case FX_UN_RECIPROCAL: case FX_UN_SQUARE: return 0.5;
    case FX_UN_ABS: case FX_UN_CLAMP: return 0.0;
    case FX_UN_TANH: return 1.5;
    case FX_UN_ERF: return 2.0;
    case FX_UN_SIGMOID: case FX_UN_ERFC: return 2.5;
    case FX_UN_SILU: case FX_UN_GELU_TANH: return 3.5;
    case FX_UN_GELU: return 4.0;
    case FX_UN_POW: return 0.5 + 0x1p-16;
    }
    return 0.0;
}

static inline const char *fn_label(int fn)
{
    static const char *const extra[] = {"clamp", "pow", "erf", "erfc"};
    return fn < FX_UN_CLAMP ? tensor_unary_name(fn) : extra[fn - FX_UN_CLAMP];
}

/* ---- helpers ------------------------------------------------------------------------------ */

static inline float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline double ulp32(double r)
{
    int e;
    if (r == 0) return 0x1p-149;
    frexp(fabs(r), &e);
    return ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 23);
}

/* error of an fp32 result in ulps of the exact value r; 0 when both are NaN, a huge value
 * when only one is; a result that overflowed is compared with the largest float */
static inline double err_ulps(float y, double r)
{
    if (isnan(r) || isnan(y)) return isnan(r) && isnan(y) ? 0 : 1e30;
    if (isinf(r) && isinf(y)) return (r > 0) == (y > 0) ? 0 : 1e30;
    if (fabs(r) >= 0x1p127 || isinf(y)) { /* Inf stands one ulp (2^104) above the largest float */
        const double R = copysign(fmin(fabs(r), 0x1p128), r);
        const double Y = isinf(y) ? copysign(0x1p128, y) : y;
        return fabs(Y - R) / 0x1p104;
    }
    return fabs((double)y - r) / ulp32(r);
}

/* ordered position of a 16-bit pattern (+0 and -0 both 0) */
static inline int ord16(uint16_t h) { return (h & 0x8000) ? -(int)(h & 0x7FFF) : (int)(h & 0x7FFF); }

static inline int is_nan16(uint16_t h, fmt_t f)
{
    return f == FMT_FP16 ? (h & 0x7C00) == 0x7C00 && (h & 0x3FF) : (h & 0x7F80) == 0x7F80 && (h & 0x7F);
}

static inline double decode16(uint16_t h, fmt_t f) { return f == FMT_FP16 ? fx_fp16_to_f32(h) : fx_bf16_to_f32(h); }

static inline tensor_t *new1(fmt_t f, int64_t n)
{
    tensor_t *t = tensor_new(f, 1, &n);
    CHECK(t != NULL, "tensor_new(%s, %lld): %s", fmt_name(f), (long long)n, flexpoint_last_error());
    return t;
}

/* ---- fp32 cores: sweep, bounds, bit identity across ISA levels ----------------------------- */

typedef int (*math_entry)(int, const double *, const float *, const float *, float *, int64_t);

static inline int levels(math_entry *e, const char **names)
{
    int n = 0;
    e[n] = fx_f32_math_scalar;
    names[n++] = "scalar";
    if (flexpoint_backend_available(1)) {
        e[n] = fx_f32_math_avx2;
        names[n++] = "avx2";
    }
    if (flexpoint_backend_available(2)) {
        e[n] = fx_f32_math_avx512;
        names[n++] = "avx512";
    }
    return n;
}

/* Every core (pow at five exponents; erf and erfc, the internal cores of gelu, included) on
 * the fp32 patterns first, first + step, ... below 2^32, then on every one of the 65,536 fp16
 * values and the 65,536 bf16 values widened to fp32 (bf16 patterns have their low 16 bits
 * zero, which no odd-offset sweep with step 256 or 4099 reaches): the ISA levels agree bit for
 * bit (forward and backward) and the forward error is within bound_f32. */
static inline void f32_sweep(uint64_t step, uint64_t first)
{
    math_entry e[3];
    const char *ln[3];
    const int nl = levels(e, ln);
    enum { B = 4096 };
    float x[B], dy[B], y[3][B];
    int cores[FX_UN_COUNT + 8][3];
    int ncores = 0;
    double pows[] = {2.5, -1.7, 0.3333333333333333, 7, -3};
    for (int fn = 0; fn < FX_UN_COUNT; fn++) {
        if (fn == FX_UN_POW) {
            for (int j = 0; j < 5; j++) cores[ncores][0] = fn, cores[ncores][1] = j, ncores++;
        } else {
            cores[ncores][0] = fn, cores[ncores][1] = -1, ncores++;
        }
    }
    test_rng rng;
    test_rng_seed(&rng, 99);
    for (int ci = 0; ci < ncores; ci++) {
        const int fn = cores[ci][0];
        double p[2] = {-1.5, 2.25};
        if (fn == FX_UN_POW) p[0] = pows[cores[ci][1]];
        double worst = 0, wx = 0, pworst[3] = {0, 0, 0};
        int64_t mism = 0, count = 0, bad = 0, pcount[3] = {0, 0, 0};
        /* pass 0: the sweep; pass 1: the 65,536 fp16 values widened; pass 2: the 65,536 bf16
         * values widened (the fp32 patterns u << 16) */
        for (int pass = 0; pass < 3; pass++) {
            uint64_t u = pass ? 0 : first;
            const uint64_t end = pass ? 65536 : ((uint64_t)1 << 32);
            while (u < end) {
                int m = 0;
                for (; m < B && u < end; m++, u += pass ? 1 : step) {
                    x[m] = pass == 0   ? f32_of((uint32_t)u)
                           : pass == 1 ? fx_fp16_to_f32((uint16_t)u)
                                       : fx_bf16_to_f32((uint16_t)u);
                    dy[m] = (float)test_rng_normal(&rng);
                }
                for (int l = 0; l < nl; l++) CHECK_STATUS(e[l](fn, p, x, NULL, y[l], m), FX_OK);
                for (int l = 1; l < nl; l++)
                    for (int i = 0; i < m; i++)
                        if (memcmp(&y[0][i], &y[l][i], 4) && mism++ < 3)
                            CHECK(0, "%s: %s gives %a, scalar %a at x=%a", fn_label(fn), ln[l],
                                  y[l][i], y[0][i], x[i]);
                for (int i = 0; i < m; i++) {
                    const double err = err_ulps(y[0][i], ref_f(fn, x[i], p));
                    count++;
                    pcount[pass]++;
                    if (err > pworst[pass]) pworst[pass] = err;
                    if (err > worst) worst = err, wx = x[i];
                    if (err > bound_f32(fn) && bad++ < 3)
                        CHECK(0, "%s(p=%g): x=%a gives %a, exact %a: %.3f ulp > %.3f",
                              fn_label(fn), p[0], x[i], y[0][i], ref_f(fn, x[i], p), err,
                              bound_f32(fn));
                }
                if (fn == FX_UN_ERF || fn == FX_UN_ERFC) continue; /* no backward */
                /* the backward arithmetic agrees across levels as well */
                for (int l = 0; l < nl; l++) CHECK_STATUS(e[l](fn, p, x, dy, y[l], m), FX_OK);
                for (int l = 1; l < nl; l++)
                    for (int i = 0; i < m; i++)
                        if (memcmp(&y[0][i], &y[l][i], 4) && mism++ < 3)
                            CHECK(0, "%s backward: %s gives %a, scalar %a at x=%a dy=%a",
                                  fn_label(fn), ln[l], y[l][i], y[0][i], x[i], dy[i]);
            }
        }
        CHECK(mism == 0, "%s: %lld results differ between ISA levels", fn_label(fn), (long long)mism);
        CHECK(bad == 0, "%s: %lld results outside %.3f ulp", fn_label(fn), (long long)bad,
              bound_f32(fn));
        CHECK(pcount[1] == 65536 && pcount[2] == 65536, "%s: %lld fp16 and %lld bf16 inputs",
              fn_label(fn), (long long)pcount[1], (long long)pcount[2]);
        printf("fp32 %-10s p=%-6.3g %lld points, max error %.4f ulp (bound %.4f) at x=%a "
               "(sweep %.4f, fp16 %.4f, bf16 %.4f), %d levels identical\n", fn_label(fn),
               fn == FX_UN_POW ? p[0] : 0.0, (long long)count, worst, bound_f32(fn), wx,
               pworst[0], pworst[1], pworst[2], nl);
    }
}

#endif
