/* Batch norm's kernels (src/nn/bn_kernels.h): every level's kernels against the portable ones,
 * bit for bit, on the intermediate doubles (means, variances, gradient sums), not only on the
 * rounded outputs that test_nn_batchnorm compares (a change of summation order moves the last
 * bits of a double but seldom its fp32 rounding). Shapes with and without row tails (S mod 4),
 * channel counts with and without a remainder group (C mod 4), one row per channel, and data
 * with large means, signed zeros, subnormals, and Inf and NaN in one channel; outputs rounded
 * to nearest and to odd, also on values that reach every case of the rounding. Every
 * comparison is of bits, NaN payloads and signs of zero included. Skips when the CPU runs no
 * level with its own kernels. */
#include "nn/bn_kernels.h"
#include "core/backend.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* bit for bit, NaN payloads and signs of zero included */
static int same_double(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static int same_floats(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, sizeof *a * (size_t)n) == 0;
}

/* a value of a data kind: 0 normal, 1 normal around a large mean, 2 specials sprinkled in
 * (Inf and NaN only where nonfinite is set: in one channel, so that the others stay finite) */
static float value(test_rng *r, int kind, int nonfinite)
{
    const double g = test_rng_normal(r);
    if (kind == 1) return (float)(1e4 + g);
    if (kind == 2) {
        const uint64_t u = test_rng_u64(r) % 64;
        if (u == 0) return -0.0f;
        if (u == 1) return 0.0f;
        if (u == 2) return 1e-41f;  /* subnormal */
        if (u == 3) return 3.0e38f; /* squares overflow fp32, not double */
        if (u == 4 && nonfinite) return INFINITY;
        if (u == 5 && nonfinite) return NAN;
    }
    return (float)g;
}

/* The element-wise kernels' rounding on values chosen to reach every case of the round to
 * odd (and to nearest): exact, inexact, rounded away or not, overflow to FLT_MAX or Inf,
 * subnormal and zero results of both signs, Inf and NaN, with row lengths that leave tails. */
static void rounding_edges(const fx_bn_kernels *k, const char *level)
{
    static const float xs[] = {0.0f,     -0.0f,   1.0f,   -1.0f,    3.0f,      1e-45f,  -1e-45f,
                               1e-38f,   FLT_MAX, -FLT_MAX, INFINITY, -INFINITY, NAN,    0.1f,
                               -0.3f,    65504.f, 1e20f,  -7e-30f, 2.5f,      -2.5f,   1.5e-40f};
    static const double scales[] = {1.0, 1.0 + 0x1p-30, -1.0 - 0x1p-29, 1e30, -1e30, 1e-30, 0.0};
    static const double shifts[] = {0.0, -0.0, 0.25, -1e-40, 1e39};
    const int64_t n = (int64_t)(sizeof xs / sizeof *xs);
    float q0[sizeof xs / sizeof *xs], q1[sizeof xs / sizeof *xs];
    for (size_t ai = 0; ai < sizeof scales / sizeof *scales; ai++)
        for (size_t bi = 0; bi < sizeof shifts / sizeof *shifts; bi++)
            for (int odd = 0; odd < 2; odd++)
                for (int64_t len = n - 4; len <= n; len++) {
                    const double a = scales[ai], b = shifts[bi];
                    memset(q0, 0, sizeof q0);
                    memset(q1, 0, sizeof q1);
                    k->normalize(xs, q1, len, 0.0, a, b, odd);
                    fx_bn_kernels_portable.normalize(xs, q0, len, 0.0, a, b, odd);
                    CHECK(same_floats(q0, q1, len), "%s normalize edges a=%g b=%g odd %d len %lld",
                          level, a, b, odd, (long long)len);
                    k->backward(xs, xs + 1, q1, len - 1, 0.5, a, b + 1.0, 0.125, a, odd);
                    fx_bn_kernels_portable.backward(xs, xs + 1, q0, len - 1, 0.5, a, b + 1.0,
                                                    0.125, a, odd);
                    CHECK(same_floats(q0, q1, len - 1),
                          "%s backward edges a=%g b=%g odd %d len %lld", level, a, b, odd,
                          (long long)len);
                }
}

static void compare(const fx_bn_kernels *k, const char *level, const fx_bn_dims *d, int kind,
                    test_rng *r)
{
    const int64_t n = d->N * d->C * d->S;
    float *x = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
    float *q0 = malloc(sizeof(float) * (size_t)(d->S + 1)), *q1 = malloc(sizeof(float) * (size_t)(d->S + 1));
    if (!x || !g || !q0 || !q1) {
        CHECK(0, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        const int channel = (int)(i / d->S % d->C);
        x[i] = value(r, kind, channel == d->C - 1);
        g[i] = 1e-3f * (float)test_rng_normal(r);
    }
    const fx_bn_kernels *p = &fx_bn_kernels_portable;
    for (int64_t c0 = 0; c0 < d->C; c0 += FX_BN_GROUP) {
        const int nc = (int)(d->C - c0 < FX_BN_GROUP ? d->C - c0 : FX_BN_GROUP);
        double m0[FX_BN_GROUP], v0[FX_BN_GROUP], m1[FX_BN_GROUP], v1[FX_BN_GROUP];
        p->stats(x, d, c0, nc, m0, v0);
        k->stats(x, d, c0, nc, m1, v1);
        double is[FX_BN_GROUP], a0[FX_BN_GROUP], b0[FX_BN_GROUP], a1[FX_BN_GROUP], b1[FX_BN_GROUP];
        for (int j = 0; j < nc; j++) {
            CHECK(same_double(m0[j], m1[j]) && same_double(v0[j], v1[j]),
                  "%s stats, N=%lld C=%lld S=%lld kind %d channel %lld: mean %a/%a var %a/%a",
                  level, (long long)d->N, (long long)d->C, (long long)d->S, kind,
                  (long long)(c0 + j), m0[j], m1[j], v0[j], v1[j]);
            is[j] = 1.0 / sqrt(v0[j] + 1e-5);
        }
        p->grad_sums(x, g, d, c0, nc, m0, is, a0, b0);
        k->grad_sums(x, g, d, c0, nc, m0, is, a1, b1);
        for (int j = 0; j < nc; j++)
            CHECK(same_double(a0[j], a1[j]) && same_double(b0[j], b1[j]),
                  "%s grad_sums, N=%lld C=%lld S=%lld kind %d channel %lld: %a/%a %a/%a", level,
                  (long long)d->N, (long long)d->C, (long long)d->S, kind, (long long)(c0 + j),
                  a0[j], a1[j], b0[j], b1[j]);
        /* the element-wise kernels on every row of the group's first channel */
        for (int64_t nn = 0; nn < d->N; nn++)
            for (int odd = 0; odd < 2; odd++) {
                const float *px = x + (nn * d->C + c0) * d->S, *pg = g + (nn * d->C + c0) * d->S;
                p->normalize(px, q0, d->S, m0[0], is[0] * 1.5, 0.25, odd);
                k->normalize(px, q1, d->S, m0[0], is[0] * 1.5, 0.25, odd);
                CHECK(same_floats(q0, q1, d->S), "%s normalize, S=%lld kind %d odd %d", level,
                      (long long)d->S, kind, odd);
                p->backward(px, pg, q0, d->S, m0[0], is[0], 0.7, a0[0] / 3, b0[0] / 3, odd);
                k->backward(px, pg, q1, d->S, m0[0], is[0], 0.7, a0[0] / 3, b0[0] / 3, odd);
                CHECK(same_floats(q0, q1, d->S), "%s backward, S=%lld kind %d odd %d", level,
                      (long long)d->S, kind, odd);
            }
    }
done:
    free(x);
    free(g);
    free(q0);
    free(q1);
}

int main(void)
{
    static const fx_bn_dims shapes[] = {
        {2, 3, 5, 10},     {4, 8, 9, 36},    {3, 17, 20, 60}, {1, 4, 1, 1},
        {64, 6, 1, 64},    {8, 16, 64, 512}, {5, 7, 33, 165}, {2, 4, 1027, 2054},
    };
    int levels = 0;
    for (int b = 0; b < FX_BACKEND_COUNT; b++) {
        const fx_backend *be = fx_backend_get(b);
        if (!be || !be->available || !be->bn) continue;
        if (b > 0 && fx_backend_get(b - 1) && fx_backend_get(b - 1)->bn == be->bn) continue;
        levels++;
        rounding_edges(be->bn, be->name);
        test_rng r;
        test_rng_seed(&r, 1234 + (uint64_t)b);
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int kind = 0; kind < 3; kind++) compare(be->bn, be->name, &shapes[s], kind, &r);
    }
    if (!levels) return test_skip("test_bn_kernels", "no CPU level with its own batch-norm kernels here");
    return test_finish("test_bn_kernels");
}
