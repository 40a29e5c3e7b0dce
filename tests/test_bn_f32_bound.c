/* Batch norm's fp32 route to fp16/bf16 outputs (src/nn/bn_f32_bound.h) on AVX-512 and AVX2:
 * every lane it accepts must hold the definition's bits, the portable kernels' fp32 row rounded
 * to odd and then to the half format (tests/test_bn_kernels.c's half_ref). The data is built to
 * put the definition's double at or near a rounding midpoint of the half format, at distances
 * from 0 to 2^-10 of the value, on both sides, with sources of fp32, bf16 and fp16 values, the
 * ReLU on and off, and specials (NaN, Inf, subnormals, values near fp32's limits) and
 * constants at the edges of the route's range. The vector steps are called directly, so that a
 * wrong acceptance cannot hide behind the double route; the kernels (normalize_half,
 * backward_half) are then compared whole, on strided rows with tails and in place. The route
 * must also accept nearly every lane of ordinary data, or it would be no route: at least 99 %
 * (AVX2 accepts eight lanes or none). Needs AVX2 with FMA and F16C (skipped elsewhere); the
 * AVX-512 part needs AVX-512 F/BW/VL/DQ. */
#include "nn/bn_kernels.h"
#include "core/backend.h"
#include "testutil.h"

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The levels' shared scalar helpers (the coefficients' checks and roundings, in double) are
 * built for the baseline target, outside both pragma regions: included first from inside the
 * AVX-512 one, their single copy was built for AVX-512, GCC vectorised their double arithmetic
 * into zmm registers, and the AVX2 steps that call them died of SIGILL on CPUs without
 * AVX-512 (an AMD EPYC, family 25 model 1). */
#include "nn/bn_f32_bound.h"

/* Only the functions between the pragmas are built for AVX-512: the rest (main among them)
 * must run on any x86-64 to report the skip. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c"))), \
                             apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
#endif
#include "nn/bn_f32_bound_avx512.h"

/* the normalize step on x[0..15]: accepted lanes, outputs in out; -1 where the constants are
 * declined */
static int norm_step(const float *x, double mu, double a, double b, int half, int relu,
                     uint16_t *out)
{
    fx_bn_f32_norm c;
    if (!fx_bn_f32_norm_init(&c, mu, a, b, half)) return -1;
    __m256i h;
    const __mmask16 ok = fx_bn_f32_normalize16(&c, _mm512_loadu_ps(x), half, relu, &h);
    _mm256_storeu_si256((__m256i *)out, h);
    return (int)ok;
}

/* the backward step likewise */
static int bwd_step(const float *x, const float *g, double mu, double is, double k, double mdy,
                    double mdyx, int half, uint16_t *out)
{
    fx_bn_f32_bwd c;
    if (!fx_bn_f32_bwd_init(&c, mu, is, k, mdy, mdyx, half)) return -1;
    __m256i h;
    const __m512 xv = _mm512_loadu_ps(x), gv = _mm512_loadu_ps(g);
    const __mmask16 ok = fx_bn_f32_backward16(&c, xv, gv, half, &h);
    _mm256_storeu_si256((__m256i *)out, h);
    return (int)ok;
}

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#include "nn/bn_f32_bound_avx2.h"

/* the AVX2 steps, eight lanes at a time, as norm_step and bwd_step give them for sixteen */
static int norm_step8(const float *x, double mu, double a, double b, int half, int relu,
                      uint16_t *out)
{
    fx_bn_f32_norm8 c;
    if (!fx_bn_f32_norm8_init(&c, mu, a, b, half)) return -1;
    int ok = 0;
    for (int v = 0; v < 2; v++) {
        __m128i h;
        const int all = fx_bn_f32_normalize8(&c, _mm256_loadu_ps(x + 8 * v), half, relu, &h);
        _mm_storeu_si128((__m128i *)(out + 8 * v), h);
        ok |= all ? 0xFF << (8 * v) : 0;
    }
    return ok;
}

static int bwd_step8(const float *x, const float *g, double mu, double is, double k, double mdy,
                     double mdyx, int half, uint16_t *out)
{
    fx_bn_f32_bwd8 c;
    if (!fx_bn_f32_bwd8_init(&c, mu, is, k, mdy, mdyx, half)) return -1;
    int ok = 0;
    for (int v = 0; v < 2; v++) {
        const __m256 xv = _mm256_loadu_ps(x + 8 * v), gv = _mm256_loadu_ps(g + 8 * v);
        __m128i h;
        const int all = fx_bn_f32_backward8(&c, xv, gv, half, &h);
        _mm_storeu_si128((__m128i *)(out + 8 * v), h);
        ok |= all ? 0xFF << (8 * v) : 0;
    }
    return ok;
}

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

/* one level's steps (AVX-512: sixteen lanes, each accepted alone; AVX2: two vectors of eight,
 * each accepted whole) */
typedef struct level_steps {
    const char *name;
    int (*norm)(const float *, double, double, double, int, int, uint16_t *);
    int (*bwd)(const float *, const float *, double, double, double, double, double, int,
               uint16_t *);
} level_steps;

static const char *half_name(int half) { return half == FX_BN_OUT_BF16 ? "bf16" : "fp16"; }

/* the definition's outputs for the fp32 row q (rounded to odd): the ReLU, then the format */
static void half_ref(const float *q, int64_t n, int half, int relu, uint16_t *out)
{
    for (int64_t i = 0; i < n; i++) {
        const float v = relu && !(q[i] > 0.0f || q[i] != q[i]) ? 0.0f : q[i];
        out[i] = half == FX_BN_OUT_BF16 ? fx_f32_to_bf16(v) : fx_f32_to_fp16(v);
    }
}

static fx_bn_src f32_src(const float *p) { return (fx_bn_src){p, FX_BN_F32, 1.0}; }

/* v as a value of the source kind (bf16, fp16: their nearest), a float */
static float as_kind(float v, int kind)
{
    if (kind == FX_BN_BF16) {
        const uint32_t b = (uint32_t)fx_f32_to_bf16(v) << 16;
        float f;
        memcpy(&f, &b, sizeof f);
        return f;
    }
    if (kind == FX_BN_FP16) return fx_fp16_to_f32(fx_f32_to_fp16(v));
    return v;
}

/* The half format's rounding midpoint nearest t (finite, within the format's finite range):
 * bf16's from t's bits, fp16's between the two fp16 values around t. */
static double midpoint_near(double t, int half)
{
    const float f = (float)t;
    if (half == FX_BN_OUT_BF16) {
        uint32_t b;
        memcpy(&b, &f, sizeof b);
        b = (b & 0xFFFF0000u) | 0x8000u;
        float m;
        memcpy(&m, &b, sizeof m);
        return m;
    }
    const uint16_t h = fx_f32_to_fp16(f);
    const double v = fx_fp16_to_f32(h);
    /* the neighbour on t's side of v, away from zero or towards it */
    const uint16_t other = (uint16_t)((f >= 0) == ((double)f >= v) ? h + 1 : h - 1);
    if ((other & 0x7FFF) >= 0x7C00 || ((h & 0x7FFF) == 0 && f < v)) return v;
    return 0.5 * (v + (double)fx_fp16_to_f32(other));
}

/* distances from the midpoint, relative to it: exact ties, the far side of the bound, between */
static const double rel_steps[] = {0.0,    0x1p-60, 0x1p-40, 0x1p-30, 0x1p-26, 0x1p-24,
                                   0x1p-23, 0x1p-22, 0x1p-20, 0x1p-18, 0x1p-14, 0x1p-10};
#define NSTEPS (int)(sizeof rel_steps / sizeof *rel_steps)

typedef struct tally {
    long lanes, accepted, near_accepted, declined_rows;
} tally;

/* One step's accepted lanes against the reference; near: lanes that lie within 2^-30 of a
 * midpoint (relative) whose two sides round differently, which no bound of the route allows it
 * to accept */
static void check_step(int ok, const uint16_t *got, const uint16_t *want, unsigned near,
                       const char *what, int half, int relu, tally *t)
{
    if (ok < 0) {
        t->declined_rows++;
        return;
    }
    for (int j = 0; j < 16; j++) {
        t->lanes++;
        if (!(ok >> j & 1)) continue;
        t->accepted++;
        t->near_accepted += (near >> j) & 1;
        CHECK(got[j] == want[j], "%s to %s, relu %d, lane %d: accepted 0x%04x, the definition "
              "gives 0x%04x", what, half_name(half), relu, j, got[j], want[j]);
    }
    CHECK(!(ok & (int)near), "%s to %s, relu %d: accepted a lane within 2^-30 of a midpoint "
          "(lanes 0x%04x)", what, half_name(half), relu, (unsigned)ok & near);
}

/* ordinary and targeted rows through the normalize step */
static void normalize_steps(const level_steps *L, test_rng *r, int kind, tally *typical,
                            tally *targeted)
{
    for (int row = 0; row < 6000; row++) {
        const int half = row & 1 ? FX_BN_OUT_BF16 : FX_BN_OUT_FP16, relu = (row >> 1) & 1;
        const double scale = ldexp(1.0, (int)test_rng_range(r, -8, 8));
        float x[16], q[16];
        for (int j = 0; j < 16; j++)
            x[j] = as_kind((float)(scale * (test_rng_normal(r) + 0.3)), kind);
        const double mu = scale * 0.3 * (1.0 + 0.1 * test_rng_normal(r));
        const double a = (0.5 + 1.5 * test_rng_uniform(r)) / scale;
        double b = 0.5 * test_rng_normal(r);
        unsigned near = 0;
        const int target = row % 3 != 0;
        if (target) { /* one lane to a distance from a midpoint, through b */
            const int j = (int)test_rng_range(r, 0, 15);
            const double t = ((double)x[j] - mu) * a + b;
            const double m = midpoint_near(t, half);
            const double step = rel_steps[test_rng_range(r, 0, NSTEPS - 1)];
            const double want = m + (test_rng_u64(r) & 1 ? step : -step) * fabs(m);
            b += want - t;
            const double t2 = ((double)x[j] - mu) * a + b;
            /* (under a ReLU both sides of a negative midpoint give +0, so any verdict holds) */
            if (fabs(t2 - m) <= 0x1p-30 * fabs(m) && !(relu && m < 0)) near |= 1u << j;
        }
        const fx_bn_src s = f32_src(x);
        fx_bn_kernels_portable.normalize(&s, 0, q, 16, mu, a, b, 1, NULL);
        uint16_t want[16], got[16];
        half_ref(q, 16, half, relu, want);
        const int ok = L->norm(x, mu, a, b, half, relu, got);
        check_step(ok, got, want, near, "normalize", half, relu, target ? targeted : typical);
    }
}

/* the same for the backward step, targeted through mdy */
static void backward_steps(const level_steps *L, test_rng *r, int kind, tally *typical,
                           tally *targeted)
{
    for (int row = 0; row < 6000; row++) {
        const int half = row & 1 ? FX_BN_OUT_BF16 : FX_BN_OUT_FP16;
        const double sx = ldexp(1.0, (int)test_rng_range(r, -6, 6));
        const double sg = ldexp(1.0, (int)test_rng_range(r, -14, -2));
        float x[16], g[16], q[16];
        for (int j = 0; j < 16; j++) {
            x[j] = as_kind((float)(sx * test_rng_normal(r)), kind);
            g[j] = as_kind((float)(sg * test_rng_normal(r)), kind);
        }
        const double mu = sx * 0.1 * test_rng_normal(r), is = (0.8 + 0.4 * test_rng_uniform(r)) / sx;
        const double k = 0.5 + test_rng_uniform(r);
        double mdy = sg * 0.05 * test_rng_normal(r);
        const double mdyx = sg * 0.2 * test_rng_normal(r);
        unsigned near = 0;
        const int target = row % 3 != 0;
        if (target) {
            const int j = (int)test_rng_range(r, 0, 15);
            const double h = ((double)x[j] - mu) * is;
            const double t = k * (((double)g[j] - mdy) - h * mdyx);
            const double m = midpoint_near(t, half);
            const double step = rel_steps[test_rng_range(r, 0, NSTEPS - 1)];
            const double want = m + (test_rng_u64(r) & 1 ? step : -step) * fabs(m);
            mdy += (t - want) / k;
            const double t2 = k * (((double)g[j] - mdy) - h * mdyx);
            if (fabs(t2 - m) <= 0x1p-30 * fabs(m)) near |= 1u << j;
        }
        const fx_bn_src xs = f32_src(x), gs = f32_src(g);
        fx_bn_kernels_portable.backward(&xs, &gs, 0, q, 16, mu, is, k, mdy, mdyx, 1, NULL);
        uint16_t want[16], got[16];
        half_ref(q, 16, half, 0, want);
        const int ok = L->bwd(x, g, mu, is, k, mdy, mdyx, half, got);
        check_step(ok, got, want, near, "backward", half, 0, target ? targeted : typical);
    }
}

/* specials among ordinary values, and constants at and past the edges of the route's range */
static void special_steps(const level_steps *L, test_rng *r)
{
    const float specials[] = {NAN, -NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 0x1p127f,
                              0x1p-149f, -0x1p-149f, 0x1p-126f, 0.0f, -0.0f, 65504.0f, 65520.0f,
                              0x1p-24f, 0x1p-25f};
    const double consts[] = {0.0, -0.0, 1.0, -3.0, 0x1p-60, 0x1p-61, 0x1p60, 0x1p61, 1e-30,
                             1e30, 0x1p-130, NAN, INFINITY};
    const int nc = (int)(sizeof consts / sizeof *consts);
    tally t = {0};
    for (int row = 0; row < 4000; row++) {
        const int half = row & 1 ? FX_BN_OUT_BF16 : FX_BN_OUT_FP16, relu = (row >> 1) & 1;
        float x[16], g[16], q[16];
        for (int j = 0; j < 16; j++) {
            x[j] = test_rng_u64(r) & 3 ? (float)test_rng_normal(r)
                                       : specials[test_rng_range(r, 0, 15)];
            g[j] = test_rng_u64(r) & 3 ? (float)(0.01 * test_rng_normal(r))
                                       : specials[test_rng_range(r, 0, 15)];
        }
        double c[5];
        for (int i = 0; i < 5; i++)
            c[i] = test_rng_u64(r) & 1 ? consts[test_rng_range(r, 0, nc - 1)]
                                       : 0.5 + test_rng_uniform(r);
        const fx_bn_src xs = f32_src(x), gs = f32_src(g);
        uint16_t want[16], got[16];
        fx_bn_kernels_portable.normalize(&xs, 0, q, 16, c[0], c[1], c[2], 1, NULL);
        half_ref(q, 16, half, relu, want);
        check_step(L->norm(x, c[0], c[1], c[2], half, relu, got), got, want, 0,
                   "normalize (specials)", half, relu, &t);
        fx_bn_kernels_portable.backward(&xs, &gs, 0, q, 16, c[0], c[1], c[2], c[3], c[4], 1,
                                        NULL);
        half_ref(q, 16, half, 0, want);
        check_step(L->bwd(x, g, c[0], c[1], c[2], c[3], c[4], half, got), got, want, 0,
                   "backward (specials)", half, 0, &t);
    }
    CHECK(t.accepted > 0 && t.declined_rows > 0, "specials: %ld lanes accepted, %ld rows "
          "declined; both should occur", t.accepted, t.declined_rows);
}

/* A source of kind `kind` holding the float values v (exact in that kind) */
static void fill_src(int kind, const float *v, int64_t n, void *buf, fx_bn_src *s)
{
    for (int64_t i = 0; i < n; i++) {
        if (kind == FX_BN_BF16) ((uint16_t *)buf)[i] = fx_f32_to_bf16(v[i]);
        else if (kind == FX_BN_FP16) ((uint16_t *)buf)[i] = fx_f32_to_fp16(v[i]);
        else ((float *)buf)[i] = v[i];
    }
    *s = (fx_bn_src){buf, kind, 1.0};
}

static int half_of_kind(int kind)
{
    return kind == FX_BN_BF16 ? FX_BN_OUT_BF16 : kind == FX_BN_FP16 ? FX_BN_OUT_FP16 : 0;
}

/* The kernels whole, on 1 to 3 rows of 1 to 70 values a stride apart (gaps of 0 to 5 values
 * between them, which must stay untouched, as must a guard after the last row), one lane of
 * each row moved next to a midpoint (through b or mdy), against the reference; and where the
 * output format is the source's, in place (out over x, and backward also over g). */
static void kernels_whole(test_rng *r, const fx_bn_kernels *k)
{
    enum { SMAX = 70, RMAX = 3, NMAX = RMAX * (SMAX + 5) + 1 };
    static float x[NMAX], g[NMAX], q[NMAX], xb[NMAX], gb[NMAX];
    static uint16_t want[NMAX], got[NMAX];
    for (int kind_i = 0; kind_i < 3; kind_i++) {
        const int kind = kind_i == 0 ? FX_BN_F32 : kind_i == 1 ? FX_BN_BF16 : FX_BN_FP16;
        for (int row = 0; row < 1500; row++) {
            const int64_t S = 1 + test_rng_range(r, 0, SMAX - 1), rows = 1 + row % RMAX;
            const int64_t stride = S + test_rng_range(r, 0, 5), n = (rows - 1) * stride + S;
            const int half = row & 1 ? FX_BN_OUT_BF16 : FX_BN_OUT_FP16, relu = (row >> 1) & 1;
            const int in_place = half == half_of_kind(kind) && row % 5 == 0;
            for (int64_t i = 0; i < n; i++) {
                x[i] = as_kind((float)(test_rng_normal(r) + 0.2), kind);
                g[i] = as_kind((float)(0.01 * test_rng_normal(r)), kind);
            }
            const double mu = 0.2, a = 1.0 + 0.5 * test_rng_uniform(r), is = 0.9, kk = 1.1;
            double b = 0.1 * test_rng_normal(r), mdy = 0.001 * test_rng_normal(r);
            const double mdyx = 0.003 * test_rng_normal(r);
            const int64_t j = test_rng_range(r, 0, S - 1);
            const double step = rel_steps[test_rng_range(r, 0, NSTEPS - 1)];
            const double sign = test_rng_u64(r) & 1 ? 1.0 : -1.0;
            const double t = ((double)x[j] - mu) * a + b, m = midpoint_near(t, half);
            b += m + sign * step * fabs(m) - t;
            const double tb = kk * (((double)g[j] - mdy) - ((double)x[j] - mu) * is * mdyx);
            const double mb = midpoint_near(tb, half);
            mdy += (tb - (mb + sign * step * fabs(mb))) / kk;
            const fx_bn_src xf = f32_src(x), gf = f32_src(g);
            for (int pass = 0; pass < 2; pass++) { /* normalize_half, then backward_half */
                fx_bn_src xs, gs;
                fill_src(kind, x, n, xb, &xs);
                fill_src(kind, g, n, gb, &gs);
                for (int64_t i = 0; i <= n; i++) got[i] = (uint16_t)(0xA5A5 + i);
                uint16_t *out = got;
                if (in_place) { /* x's values (g's, backward) in the output, read from there */
                    memcpy(got, pass ? gb : xb, sizeof(uint16_t) * (size_t)n);
                    if (pass) gs.p = got;
                    else xs.p = got;
                }
                memcpy(want, got, sizeof(uint16_t) * (size_t)(n + 1));
                for (int64_t rr = 0; rr < rows; rr++) {
                    const int64_t o = rr * stride;
                    if (pass)
                        fx_bn_kernels_portable.backward(&xf, &gf, o, q + o, S, mu, is, kk, mdy,
                                                        mdyx, 1, NULL);
                    else
                        fx_bn_kernels_portable.normalize(&xf, o, q + o, S, mu, a, b, 1, NULL);
                    half_ref(q + o, S, half, pass ? 0 : relu, want + o);
                }
                const int taken =
                    pass ? k->backward_half(&xs, &gs, 0, out, S, rows, stride, mu, is, kk, mdy,
                                            mdyx, half)
                         : k->normalize_half(&xs, 0, out, S, rows, stride, mu, a, b, half, relu);
                CHECK(taken && memcmp(got, want, sizeof(uint16_t) * (size_t)(n + 1)) == 0,
                      "%s, source kind %d to %s, relu %d, %lld rows of %lld, stride %lld%s: "
                      "bits differ from the definition's, or outside the rows",
                      pass ? "backward_half" : "normalize_half", kind, half_name(half),
                      pass ? 0 : relu, (long long)rows, (long long)S, (long long)stride,
                      in_place ? ", in place" : "");
            }
        }
    }
}

/* every check of one level */
static void run_level(const level_steps *L, const fx_bn_kernels *k, test_rng *r)
{
    for (int kind_i = 0; kind_i < 3; kind_i++) {
        const int kind = kind_i == 0 ? FX_BN_F32 : kind_i == 1 ? FX_BN_BF16 : FX_BN_FP16;
        tally typical = {0}, targeted = {0};
        normalize_steps(L, r, kind, &typical, &targeted);
        backward_steps(L, r, kind, &typical, &targeted);
        CHECK(typical.declined_rows == 0 && targeted.declined_rows == 0,
              "%s, source kind %d: ordinary constants declined (%ld, %ld rows)", L->name, kind,
              typical.declined_rows, targeted.declined_rows);
        CHECK(typical.accepted >= 0.99 * (double)typical.lanes,
              "%s, source kind %d: the route accepted %ld of %ld ordinary lanes (want >= 99 %%)",
              L->name, kind, typical.accepted, typical.lanes);
        CHECK(targeted.accepted < targeted.lanes, "%s, source kind %d: no targeted lane refused",
              L->name, kind);
        printf("%s, source kind %d: %ld of %ld ordinary lanes accepted, %ld of %ld with one lane "
               "placed near a midpoint\n",
               L->name, kind, typical.accepted, typical.lanes, targeted.accepted, targeted.lanes);
    }
    special_steps(L, r);
    kernels_whole(r, k);
}

int main(void)
{
    const fx_cpu_features *c = fx_cpu();
    const int avx2 = c->avx2 && c->fma && c->f16c;
    const int avx512 = avx2 && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq;
    if (!avx2) return test_skip("test_bn_f32_bound", "the CPU has no AVX2 with FMA and F16C");
    test_rng r;
    test_rng_seed(&r, 20261205);
    const level_steps l2 = {"avx2", norm_step8, bwd_step8}, l512 = {"avx512", norm_step, bwd_step};
    run_level(&l2, &fx_bn_kernels_avx2, &r);
    if (avx512) run_level(&l512, &fx_bn_kernels_avx512, &r);
    else printf("test_bn_f32_bound: no AVX-512 here; the AVX2 steps only\n");
    return test_finish("test_bn_f32_bound");
}
