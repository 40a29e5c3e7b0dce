/* Helpers shared by the tests of ReLU backward, softmax cross-entropy, batch norm, dropout and
 * mean (tests/test_nn_{activation,softmax_ce,batchnorm,dropout,mean}.c).
 *
 * Error bounds, per element, as in tests/test_ops.c (derived, not tuned):
 *   |y - r| <= acc + out_round
 *   acc: the op's own error before the final rounding (given by each test);
 *   out_round: fp32 u32*(|r| + acc); fp16 u16*(|r| + acc) + 2^-25 (half the subnormal step);
 *              bf16 u_bf*(|r| + acc) + 2^-134; flex16_5/dfp16 2^(e_out - 1) (one rounding to
 *              the output's exponent, no saturation allowed).
 * The ops round double -> fp32 with round-to-odd before a 16-bit rounding, so that rounding is
 * the only one and the 16-bit bound needs no extra fp32 term.
 */
#ifndef NN_MISC_UTIL_H
#define NN_MISC_UTIL_H

#include "flexpoint.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NN_U32 0x1.0p-24
#define NN_U16 0x1.0p-11
#define NN_UBF 0x1.0p-8
#define NN_U64 0x1.0p-53

static const fmt_t NN_FORMATS[FMT_COUNT] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5,
                                            FMT_DFP16};

static inline double nn_ulp(fmt_t f)
{
    return f == FMT_FP32 ? NN_U32 : f == FMT_FP16 ? NN_U16 : f == FMT_BF16 ? NN_UBF : 0.0;
}

static inline double nn_abs_floor(fmt_t f)
{
    return f == FMT_FP16 ? 0x1.0p-25 : f == FMT_BF16 ? 0x1.0p-134 : f == FMT_FP32 ? 0x1.0p-150 : 0;
}

static inline int64_t nn_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

/* Zero-filled, so that no path can read an indeterminate value. */
static inline void *nn_xmalloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static inline double *nn_doubles(int64_t n) { return nn_xmalloc(sizeof(double) * (size_t)n); }

/* Values of t as doubles (exact: every format widens exactly into fp32 here). */
static inline void nn_read(const tensor_t *t, double *out)
{
    int64_t n = tensor_numel(t);
    float *f = nn_xmalloc(sizeof(float) * (size_t)n);
    CHECK_STATUS(tensor_to_f32(t, f), FX_OK);
    for (int64_t i = 0; i < n; i++) out[i] = f[i];
    free(f);
}

/* A new tensor in format f holding vals (rounded into the format); vals receives the values
 * as stored, so that references see exactly what the op reads. */
static inline tensor_t *nn_tensor(fmt_t f, int ndim, const int64_t *shape, double *vals)
{
    tensor_t *t = tensor_new(f, ndim, shape);
    if (!t) {
        fprintf(stderr, "tensor_new: %s\n", flexpoint_last_error());
        exit(2);
    }
    int64_t n = nn_numel(ndim, shape);
    float *buf = nn_xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) buf[i] = (float)vals[i];
    CHECK_STATUS(tensor_from_f32(t, buf), FX_OK);
    free(buf);
    nn_read(t, vals);
    return t;
}

/* t filled with N(0, scale^2) values from seed's stream; with specials (and more than 7
 * elements) +Inf, -Inf and NaN at elements 1, n/2 and n-3. */
static inline void nn_fill_normal(tensor_t *t, double scale, uint64_t seed, int specials)
{
    test_rng r;
    test_rng_seed(&r, seed);
    const int64_t n = tensor_numel(t);
    float *v = nn_xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = (float)(scale * test_rng_normal(&r));
    if (specials && n > 7) {
        v[1] = INFINITY;
        v[n / 2] = -INFINITY;
        v[n - 3] = NAN;
    }
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    free(v);
}

static inline tensor_t *nn_zeros(fmt_t f, int ndim, const int64_t *shape)
{
    tensor_t *t = tensor_new(f, ndim, shape);
    if (!t) {
        fprintf(stderr, "tensor_new: %s\n", flexpoint_last_error());
        exit(2);
    }
    return t;
}

/* Bound on |y - r| for an output tensor `out` (already written) given the op's own error
 * `acc` before the final rounding. */
static inline double nn_bound(const tensor_t *out, double r, double acc)
{
    fmt_t f = tensor_fmt(out);
    if (fmt_is_shared_exponent(f)) return acc + ldexp(1.0, tensor_exp(out) - 1);
    return acc + nn_ulp(f) * (fabs(r) + acc) + nn_abs_floor(f);
}

/* Check out against the reference ref (n values) with per-element op errors acc (NULL: 0).
 * Returns the normwise error max|y - r| / max|r|. Shared-exponent outputs must not saturate. */
static inline double nn_check(const char *what, const tensor_t *out, const double *ref,
                              const double *acc, int64_t n)
{
    double *y = nn_doubles(n);
    nn_read(out, y);
    double maxerr = 0, maxr = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs(y[i] - ref[i]);
        double b = nn_bound(out, ref[i], acc ? acc[i] : 0.0);
        if (!(err <= b * (1 + 1e-12)) && bad++ < 3)
            CHECK(0, "%s: element %lld y=%.10g ref=%.10g err=%.3g bound=%.3g", what,
                  (long long)i, y[i], ref[i], err, b);
        if (err > maxerr) maxerr = err;
        if (fabs(ref[i]) > maxr) maxr = fabs(ref[i]);
    }
    CHECK(bad == 0, "%s: %d of %lld elements outside the bound", what, bad, (long long)n);
    if (fmt_is_shared_exponent(tensor_fmt(out))) {
        double sat = -1;
        CHECK_STATUS(tensor_stat(out, "saturated", &sat), FX_OK);
        CHECK(sat == 0, "%s: %g elements saturated", what, sat);
    }
    free(y);
    return maxr > 0 ? maxerr / maxr : maxerr;
}

/* 1 if a and b hold the same bits (and the same exponent for shared-exponent formats). */
static inline int nn_same_bits(const tensor_t *a, const tensor_t *b)
{
    if (tensor_fmt(a) != tensor_fmt(b) || tensor_numel(a) != tensor_numel(b)) return 0;
    int64_t n = tensor_numel(a);
    size_t bytes = (size_t)n * fmt_elem_size(tensor_fmt(a));
    void *ra = nn_xmalloc(bytes), *rb = nn_xmalloc(bytes);
    CHECK_STATUS(tensor_get_raw(a, ra), FX_OK);
    CHECK_STATUS(tensor_get_raw(b, rb), FX_OK);
    int same = memcmp(ra, rb, bytes) == 0;
    if (fmt_is_shared_exponent(tensor_fmt(a))) same = same && tensor_exp(a) == tensor_exp(b);
    free(ra);
    free(rb);
    return same;
}

/* Names of the CPU backends this machine can run (the others are printed as skipped). */
static inline int nn_backends(const char **names, int max)
{
    int k = 0;
    for (int i = 0; i < flexpoint_backend_count() && k < max; i++) {
        if (!flexpoint_backend_available(i)) {
            printf("backend %s: skipped, the CPU lacks it (features: %s)\n",
                   flexpoint_backend_name(i), flexpoint_cpu_features());
            continue;
        }
        names[k++] = flexpoint_backend_name(i);
    }
    return k;
}

/* The last failure must carry a message naming the function. */
static inline void nn_check_message(const char *func)
{
    const char *msg = flexpoint_last_error();
    CHECK(strstr(msg, func) != NULL, "message \"%s\" does not name %s", msg, func);
}

#endif
