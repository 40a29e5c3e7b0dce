/* Batch norm's kernels (src/nn/bn_kernels.h): every level's kernels against the portable ones,
 * bit for bit, on the intermediate doubles (means, variances, gradient sums), not only on the
 * rounded outputs that test_nn_batchnorm compares (a change of summation order moves the last
 * bits of a double but seldom its fp32 rounding). Shapes with and without row tails (S mod 4),
 * channel counts with and without a remainder group (C mod 4), one row per channel, and data
 * with large means, signed zeros, subnormals, and Inf and NaN in one channel; outputs rounded
 * to nearest and to odd, also on values that reach every case of the rounding. Every
 * comparison is of bits, NaN payloads and signs of zero included. The kernels also read int16
 * mantissas and bf16 patterns in place (fx_bn_src): on those, the level's and the portable
 * kernels must give what the portable ones give on the fp32 copy, and the statistics they keep
 * for the write must be those of the write's own scan of the outputs. At the ops, the in-place
 * route must give every bit the route through fp32 copies gives, on every backend (this part
 * runs on every CPU; the kernel comparisons need a level with its own kernels). */
#include "nn/bn_kernels.h"
#include "nn/bn_direct.h"
#include "flexpoint.h"
#include "flexpoint_nn.h"
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

static fx_bn_src f32_src(const float *p)
{
    fx_bn_src s = {p, FX_BN_F32, 1.0};
    return s;
}

/* The write path's scan of n fp32 values (fx_flex_maxabs_f32_scalar's rule), to check the
 * statistics the kernels keep. */
static fx_bn_max scan(const float *q, int64_t n)
{
    fx_bn_max m = {0.0f, 0};
    for (int64_t i = 0; i < n; i++) {
        const float a = fabsf(q[i]);
        if (!isfinite(a))
            m.nonfinite++;
        else if (a > m.max)
            m.max = a;
    }
    return m;
}

static int same_max(fx_bn_max a, fx_bn_max b)
{
    return memcmp(&a.max, &b.max, sizeof a.max) == 0 && a.nonfinite == b.nonfinite;
}

/* What a level's normalize_half or backward_half must write for the fp32 row q (normalize's
 * or backward's, rounded to odd): the ReLU (relu set: x > 0 or NaN kept, else +0) and then the
 * half format's scalar definition. */
static void half_ref(const float *q, int64_t n, int half, int relu, uint16_t *out)
{
    for (int64_t i = 0; i < n; i++) {
        const float v = relu && !(q[i] > 0.0f || q[i] != q[i]) ? 0.0f : q[i];
        out[i] = half == FX_BN_OUT_BF16 ? fx_f32_to_bf16(v) : fx_f32_to_fp16(v);
    }
}

/* Whether a level's half-output kernels must take a source: every one but mantissas outside
 * the exact range (fx_bn_i16_exact), which they may decline. */
static int half_takes(const fx_bn_src *s) { return s->kind != FX_BN_I16 || fx_bn_i16_exact(s); }

/* One half-output call's result: taken, its S values half_ref's and the guard after them
 * untouched; or, only where a source may be declined, declined with nothing written. */
static void check_half_call(int taken, int must, const uint16_t *want, const uint16_t *got,
                            int64_t S, const char *what, const char *kernel, const char *hn,
                            int relu)
{
    int64_t touched = 0;
    for (int64_t i = 0; !taken && i <= S; i++) touched += got[i] != 0xA5A5;
    CHECK(taken || (!must && touched == 0), "%s: %s to %s, relu %d, S=%lld: declined a source "
          "it must take, or wrote while declining", what, kernel, hn, relu, (long long)S);
    CHECK(!taken || (memcmp(want, got, sizeof(uint16_t) * (size_t)S) == 0 && got[S] == 0xA5A5),
          "%s: %s to %s, relu %d, S=%lld: bits differ from the fp32 row's", what, kernel, hn,
          relu, (long long)S);
}

/* A level's half-output kernels (where it has them) against half_ref of the portable fp32
 * rows, for both half formats and, forward, with and without the ReLU: the same bits, and
 * nothing written past the row (a guard element after it). nx and ng are the sources as the
 * level reads them, xf and gf the portable kernels' (fp32 copies, or the same sources). */
static void check_half(const fx_bn_kernels *k, const char *what, const fx_bn_src *nx,
                       const fx_bn_src *ng, const fx_bn_src *xf, const fx_bn_src *gf,
                       int64_t o, int64_t S, double mu, double a, double b, double is,
                       double kk, double mdy, double mdyx)
{
    if (!k->normalize_half || !k->backward_half) return;
    float *q = malloc(sizeof(float) * (size_t)(S + 1));
    uint16_t *want = malloc(sizeof(uint16_t) * (size_t)(S + 1));
    uint16_t *got = malloc(sizeof(uint16_t) * (size_t)(S + 1));
    if (!q || !want || !got) {
        CHECK(0, "out of memory");
        goto done;
    }
    for (int half = FX_BN_OUT_FP16; half <= FX_BN_OUT_BF16; half++) {
        const char *hn = half == FX_BN_OUT_BF16 ? "bf16" : "fp16";
        fx_bn_kernels_portable.normalize(xf, o, q, S, mu, a, b, 1, NULL);
        for (int relu = 0; relu < 2; relu++) {
            half_ref(q, S, half, relu, want);
            for (int64_t i = 0; i <= S; i++) got[i] = 0xA5A5;
            const int taken = k->normalize_half(nx, o, got, S, 1, S, mu, a, b, half, relu);
            check_half_call(taken, half_takes(nx), want, got, S, what, "normalize_half", hn,
                            relu);
        }
        fx_bn_kernels_portable.backward(xf, gf, o, q, S, mu, is, kk, mdy, mdyx, 1, NULL);
        half_ref(q, S, half, 0, want);
        for (int64_t i = 0; i <= S; i++) got[i] = 0xA5A5;
        const int taken = k->backward_half(nx, ng, o, got, S, 1, S, mu, is, kk, mdy, mdyx, half);
        check_half_call(taken, half_takes(nx) && half_takes(ng), want, got, S, what,
                        "backward_half", hn, 0);
    }
done:
    free(q);
    free(want);
    free(got);
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
                               -0.3f,    65504.f, 1e20f,  -7e-30f, 2.5f,      -2.5f,   1.5e-40f,
                               FLT_MIN,  -FLT_MIN,
                               /* between 2^-127 and 2^-126: bf16 subnormals, whose step is
                                * twice that of 8 bits at 2^-127 (0x1.fep-127 rounds to
                                * FLT_MIN in bf16) */
                               0x1.fep-127f, 0x1.8p-127f, -0x1.02p-127f,
                               /* half-way between two bf16 numbers, the lower one even:
                                * a tie, to it, unless bits far below (scale 1 + 2^-40)
                                * push it up */
                               0x1.01p+0f, -0x1.05p+3f};
    /* 1 - 2^-30 takes FLT_MIN just below 2^-126, where a cut to 24 bits rounds up to FLT_MIN
     * in the conversion but the round to odd gives the largest subnormal */
    static const double scales[] = {1.0,  1.0 + 0x1p-30, -1.0 - 0x1p-29, 1.0 - 0x1p-30,
                                    1e30, -1e30,         1e-30,          0.0,
                                    1.0 + 0x1p-40};
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
                    const fx_bn_src x0 = f32_src(xs), x1 = f32_src(xs + 1);
                    fx_bn_max m0 = {0.0f, 0}, m1 = {0.0f, 0};
                    k->normalize(&x0, 0, q1, len, 0.0, a, b, odd, &m1);
                    fx_bn_kernels_portable.normalize(&x0, 0, q0, len, 0.0, a, b, odd, &m0);
                    CHECK(same_floats(q0, q1, len), "%s normalize edges a=%g b=%g odd %d len %lld",
                          level, a, b, odd, (long long)len);
                    CHECK(same_max(m0, m1) && same_max(m0, scan(q0, len)),
                          "%s normalize edges a=%g b=%g odd %d len %lld: statistics %a/%lld "
                          "%a/%lld", level, a, b, odd, (long long)len, m0.max,
                          (long long)m0.nonfinite, m1.max, (long long)m1.nonfinite);
                    m0 = m1 = (fx_bn_max){0.0f, 0};
                    k->backward(&x0, &x1, 0, q1, len - 1, 0.5, a, b + 1.0, 0.125, a, odd, &m1);
                    fx_bn_kernels_portable.backward(&x0, &x1, 0, q0, len - 1, 0.5, a, b + 1.0,
                                                    0.125, a, odd, &m0);
                    CHECK(same_floats(q0, q1, len - 1),
                          "%s backward edges a=%g b=%g odd %d len %lld", level, a, b, odd,
                          (long long)len);
                    CHECK(same_max(m0, m1) && same_max(m0, scan(q0, len - 1)),
                          "%s backward edges a=%g b=%g odd %d len %lld: statistics", level, a, b,
                          odd, (long long)len);
                    if (odd) {
                        char what[96];
                        snprintf(what, sizeof what, "%s edges a=%g b=%g len %lld", level, a, b,
                                 (long long)len);
                        check_half(k, what, &x0, &x1, &x0, &x1, 0, len - 1, 0.5, a, b, a,
                                   b + 1.0, 0.125, a);
                    }
                }
    /* Each value alone, in rows of nine copies (through vector loops of four and of eight
     * lanes, and one tail): a row above holds zeros and NaN, so a level that takes a fast route
     * only where every result of a row or vector is ordinary never reaches it with the values
     * next to its edges. */
    for (int64_t i = 0; i < n; i++) {
        float row[9];
        for (int j = 0; j < 9; j++) row[j] = xs[i];
        for (size_t ai = 0; ai < sizeof scales / sizeof *scales; ai++)
            for (size_t bi = 0; bi < sizeof shifts / sizeof *shifts; bi++)
                for (int odd = 0; odd < 2; odd++) {
                    const double a = scales[ai], b = shifts[bi];
                    float r0[9], r1[9];
                    const fx_bn_src x0 = f32_src(row);
                    fx_bn_max m0 = {0.0f, 0}, m1 = {0.0f, 0};
                    k->normalize(&x0, 0, r1, 9, 0.0, a, b, odd, &m1);
                    fx_bn_kernels_portable.normalize(&x0, 0, r0, 9, 0.0, a, b, odd, &m0);
                    CHECK(same_floats(r0, r1, 9) && same_max(m0, m1),
                          "%s normalize of %a alone, a=%a b=%g odd %d: %a against %a", level,
                          (double)xs[i], a, b, odd, (double)r1[0], (double)r0[0]);
                    m0 = m1 = (fx_bn_max){0.0f, 0};
                    k->backward(&x0, &x0, 0, r1, 9, 0.0, 1.0, a, 0.0, 0.0, odd, &m1);
                    fx_bn_kernels_portable.backward(&x0, &x0, 0, r0, 9, 0.0, 1.0, a, 0.0, 0.0,
                                                    odd, &m0);
                    CHECK(same_floats(r0, r1, 9) && same_max(m0, m1),
                          "%s backward of %a alone, k=%a odd %d: %a against %a", level,
                          (double)xs[i], a, odd, (double)r1[0], (double)r0[0]);
                    if (odd) {
                        char what[96];
                        snprintf(what, sizeof what, "%s %a alone, a=%a b=%g", level,
                                 (double)xs[i], a, b);
                        check_half(k, what, &x0, &x0, &x0, &x0, 0, 9, 0.0, a, b, 1.0, a, 0.0,
                                   0.0);
                    }
                }
    }
}

/* The data of one source kind and its fp32 copy (what nn_in_f32 would hold). */
typedef struct kind_data {
    fx_bn_src src;
    float *copy;
    void *raw;
} kind_data;

/* Mantissas are dequantised as fx_flex_dequant_scalar does; the exponents include ones whose
 * values leave fp32's normal range (subnormal results, overflow to Inf), where that rounding
 * matters. bf16 patterns are the high halves of the fp32 values, NaN and Inf included. */
static int make_kind(kind_data *k, int kind, const float *v, int64_t n, int exp, test_rng *r)
{
    k->copy = malloc(sizeof(float) * (size_t)n);
    k->raw = kind == FX_BN_F32 ? NULL : malloc(sizeof(int16_t) * (size_t)n);
    if (!k->copy || (kind != FX_BN_F32 && !k->raw)) return 0;
    k->src.kind = kind;
    k->src.scale = ldexp(1.0, exp);
    if (kind == FX_BN_F32) {
        memcpy(k->copy, v, sizeof(float) * (size_t)n);
        k->src.p = k->copy;
        return 1;
    }
    k->src.p = k->raw;
    for (int64_t i = 0; i < n; i++) {
        if (kind == FX_BN_I16) {
            int16_t *m = k->raw;
            const double big = isfinite(v[i]) && fabsf(v[i]) > 1e3f ? 20000.0 : 0.0;
            const double g = test_rng_normal(r) * 6000.0 + big;
            m[i] = (int16_t)(g > 32767 ? 32767 : g < -32767 ? -32767 : g);
            k->copy[i] = (float)((double)m[i] * k->src.scale);
        } else if (kind == FX_BN_FP16) {
            /* the value rounded to fp16 (overflow to Inf, small values to subnormals or 0),
             * a signalling NaN where it is NaN (one pattern: which of two different NaNs a
             * sum keeps is the compiler's choice of operand order, in every kind) and fp16
             * subnormals of both signs sprinkled in; the copy is fx_fp16_to_f32's */
            uint16_t *h = k->raw;
            h[i] = isnan(v[i]) ? 0x7C01u
                   : i % 53 == 7 ? (i % 2 ? 0x0001u : 0x83FFu)
                                 : fx_f32_to_fp16(v[i]);
            k->copy[i] = fx_fp16_to_f32(h[i]);
        } else {
            uint16_t *h = k->raw;
            uint32_t bits;
            memcpy(&bits, &v[i], sizeof bits);
            h[i] = (uint16_t)(bits >> 16);
            bits = (uint32_t)h[i] << 16;
            memcpy(&k->copy[i], &bits, sizeof bits);
        }
    }
    return 1;
}

static void free_kind(kind_data *k)
{
    free(k->copy);
    free(k->raw);
}

static const char *kind_name(int kind)
{
    return kind == FX_BN_I16    ? "int16"
           : kind == FX_BN_BF16 ? "bf16"
           : kind == FX_BN_FP16 ? "fp16"
                                : "fp32";
}

/* Level kernel k on sources of kinds kx and kg against the portable kernels on the fp32
 * copies: the same doubles and floats, and the statistics of the outputs. */
static void compare_kinds(const fx_bn_kernels *k, const char *level, const fx_bn_dims *d,
                          int data, const kind_data *X, const kind_data *G)
{
    const fx_bn_kernels *p = &fx_bn_kernels_portable;
    const fx_bn_src xf = f32_src(X->copy), gf = f32_src(G->copy);
    float *q0 = malloc(sizeof(float) * (size_t)(d->S + 1));
    float *q1 = malloc(sizeof(float) * (size_t)(d->S + 1));
    if (!q0 || !q1) {
        CHECK(0, "out of memory");
        free(q0);
        free(q1);
        return;
    }
    const char *nx = kind_name(X->src.kind), *ng = kind_name(G->src.kind);
    for (int64_t c0 = 0; c0 < d->C; c0 += FX_BN_GROUP) {
        const int nc = (int)(d->C - c0 < FX_BN_GROUP ? d->C - c0 : FX_BN_GROUP);
        double m0[FX_BN_GROUP], v0[FX_BN_GROUP], m1[FX_BN_GROUP], v1[FX_BN_GROUP];
        double m2[FX_BN_GROUP], v2[FX_BN_GROUP];
        p->stats(&xf, d, c0, nc, m0, v0);
        k->stats(&X->src, d, c0, nc, m1, v1);
        p->stats(&X->src, d, c0, nc, m2, v2);
        double is[FX_BN_GROUP], a0[FX_BN_GROUP], b0[FX_BN_GROUP], a1[FX_BN_GROUP], b1[FX_BN_GROUP];
        double a2[FX_BN_GROUP], b2[FX_BN_GROUP];
        for (int j = 0; j < nc; j++) {
            CHECK(same_double(m0[j], m1[j]) && same_double(v0[j], v1[j]) &&
                      same_double(m0[j], m2[j]) && same_double(v0[j], v2[j]),
                  "%s stats of %s, N=%lld C=%lld S=%lld data %d channel %lld: mean %a/%a/%a "
                  "var %a/%a/%a", level, nx, (long long)d->N, (long long)d->C, (long long)d->S,
                  data, (long long)(c0 + j), m0[j], m1[j], m2[j], v0[j], v1[j], v2[j]);
            is[j] = 1.0 / sqrt(v0[j] + 1e-5);
        }
        /* the variance pass alone, given stats' mean: stats' variance */
        double v3[FX_BN_GROUP], v4[FX_BN_GROUP];
        k->var(&X->src, d, c0, nc, m0, v3);
        p->var(&X->src, d, c0, nc, m0, v4);
        for (int j = 0; j < nc; j++)
            CHECK(same_double(v0[j], v3[j]) && same_double(v0[j], v4[j]),
                  "%s var of %s, N=%lld C=%lld S=%lld data %d channel %lld: %a/%a/%a", level, nx,
                  (long long)d->N, (long long)d->C, (long long)d->S, data, (long long)(c0 + j),
                  v0[j], v3[j], v4[j]);
        /* mantissas: the integer pass's sum and extremes, and the mean from that sum */
        if (X->src.kind == FX_BN_I16) {
            int64_t s1[FX_BN_GROUP], s2[FX_BN_GROUP];
            int16_t l1[FX_BN_GROUP], h1[FX_BN_GROUP], l2[FX_BN_GROUP], h2[FX_BN_GROUP];
            k->sum_range_i16(X->raw, d, c0, nc, s1, l1, h1);
            p->sum_range_i16(X->raw, d, c0, nc, s2, l2, h2);
            for (int j = 0; j < nc; j++) {
                int64_t want = 0;
                int16_t wl = INT16_MAX, wh = INT16_MIN;
                for (int64_t nn = 0; nn < d->N; nn++)
                    for (int64_t si = 0; si < d->S; si++) {
                        const int16_t v = ((const int16_t *)X->raw)[(nn * d->C + c0 + j) * d->S + si];
                        want += v;
                        wl = v < wl ? v : wl;
                        wh = v > wh ? v : wh;
                    }
                CHECK(s1[j] == want && s2[j] == want && l1[j] == wl && l2[j] == wl &&
                          h1[j] == wh && h2[j] == wh,
                      "%s sum_range_i16, N=%lld C=%lld S=%lld channel %lld: sum %lld/%lld/%lld "
                      "lo %d/%d/%d hi %d/%d/%d", level, (long long)d->N, (long long)d->C,
                      (long long)d->S, (long long)(c0 + j), (long long)want, (long long)s1[j],
                      (long long)s2[j], wl, l1[j], l2[j], wh, h1[j], h2[j]);
                if (fx_bn_int_mean_ok(&X->src, d))
                    CHECK(same_double(fx_bn_int_mean(s1[j], X->src.scale, d), m0[j]),
                          "%s integer mean, scale %a, channel %lld: %a against stats' %a", level,
                          X->src.scale, (long long)(c0 + j),
                          fx_bn_int_mean(s1[j], X->src.scale, d), m0[j]);
            }
        }
        p->grad_sums(&xf, &gf, d, c0, nc, m0, is, a0, b0);
        k->grad_sums(&X->src, &G->src, d, c0, nc, m0, is, a1, b1);
        p->grad_sums(&X->src, &G->src, d, c0, nc, m0, is, a2, b2);
        for (int j = 0; j < nc; j++)
            CHECK(same_double(a0[j], a1[j]) && same_double(b0[j], b1[j]) &&
                      same_double(a0[j], a2[j]) && same_double(b0[j], b2[j]),
                  "%s grad_sums of %s and %s, N=%lld C=%lld S=%lld data %d channel %lld: "
                  "%a/%a/%a %a/%a/%a", level, nx, ng, (long long)d->N, (long long)d->C,
                  (long long)d->S, data, (long long)(c0 + j), a0[j], a1[j], a2[j], b0[j], b1[j],
                  b2[j]);
        /* the element-wise kernels on every row of the group's first channel */
        for (int64_t nn = 0; nn < d->N; nn++)
            for (int odd = 0; odd < 2; odd++) {
                const int64_t o = (nn * d->C + c0) * d->S;
                fx_bn_max s0 = {0.0f, 0}, s1 = {0.0f, 0};
                p->normalize(&xf, o, q0, d->S, m0[0], is[0] * 1.5, 0.25, odd, &s0);
                k->normalize(&X->src, o, q1, d->S, m0[0], is[0] * 1.5, 0.25, odd, &s1);
                CHECK(same_floats(q0, q1, d->S) && same_max(s0, s1) &&
                          same_max(s0, scan(q0, d->S)),
                      "%s normalize of %s, S=%lld data %d odd %d", level, nx, (long long)d->S,
                      data, odd);
                s0 = s1 = (fx_bn_max){0.0f, 0};
                p->backward(&xf, &gf, o, q0, d->S, m0[0], is[0], 0.7, a0[0] / 3, b0[0] / 3, odd,
                            &s0);
                k->backward(&X->src, &G->src, o, q1, d->S, m0[0], is[0], 0.7, a0[0] / 3,
                            b0[0] / 3, odd, &s1);
                CHECK(same_floats(q0, q1, d->S) && same_max(s0, s1) &&
                          same_max(s0, scan(q0, d->S)),
                      "%s backward of %s and %s, S=%lld data %d odd %d", level, nx, ng,
                      (long long)d->S, data, odd);
                /* without a record the outputs are the same */
                k->normalize(&X->src, o, q1, d->S, m0[0], is[0] * 1.5, 0.25, odd, NULL);
                p->normalize(&xf, o, q0, d->S, m0[0], is[0] * 1.5, 0.25, odd, NULL);
                CHECK(same_floats(q0, q1, d->S), "%s normalize of %s without statistics", level,
                      nx);
                k->backward(&X->src, &G->src, o, q1, d->S, m0[0], is[0], 0.7, a0[0] / 3,
                            b0[0] / 3, odd, NULL);
                p->backward(&xf, &gf, o, q0, d->S, m0[0], is[0], 0.7, a0[0] / 3, b0[0] / 3, odd,
                            NULL);
                CHECK(same_floats(q0, q1, d->S), "%s backward of %s and %s without statistics",
                      level, nx, ng);
                if (odd) {
                    char what[128];
                    snprintf(what, sizeof what, "%s %s and %s, N=%lld C=%lld data %d row %lld",
                             level, nx, ng, (long long)d->N, (long long)d->C, data, (long long)nn);
                    check_half(k, what, &X->src, &G->src, &xf, &gf, o, d->S, m0[0],
                               is[0] * 1.5, 0.25, is[0], 0.7, a0[0] / 3, b0[0] / 3);
                }
            }
    }
    free(q0);
    free(q1);
}

/* Exponents of the mantissa sources: ordinary, fp32-subnormal results, overflow to Inf, the
 * ends of the range fx_bn_src allows, and both sides of the SIMD levels' exact-source range
 * (up to 112, where the integer mean and one-conversion widening apply, and 113 beyond it). */
static const int mant_exps[] = {-16, -140, 116, FX_BN_I16_EXP_MIN + 10, FX_BN_I16_EXP_MAX,
                                FX_BN_I16_EXP_MIN, 112, 113};

static void compare(const fx_bn_kernels *k, const char *level, const fx_bn_dims *d, int data,
                    test_rng *r)
{
    const int64_t n = d->N * d->C * d->S;
    float *x = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
    if (!x || !g) {
        CHECK(0, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        const int channel = (int)(i / d->S % d->C);
        x[i] = value(r, data, channel == d->C - 1);
        g[i] = 1e-3f * (float)test_rng_normal(r);
    }
    /* every pair of kinds (the AVX2 kernels have a loop per pair) */
    static const int pairs[][2] = {{FX_BN_F32, FX_BN_F32},  {FX_BN_I16, FX_BN_I16},
                                   {FX_BN_BF16, FX_BN_BF16}, {FX_BN_I16, FX_BN_F32},
                                   {FX_BN_F32, FX_BN_I16},  {FX_BN_BF16, FX_BN_F32},
                                   {FX_BN_F32, FX_BN_BF16}, {FX_BN_I16, FX_BN_BF16},
                                   {FX_BN_BF16, FX_BN_I16}, {FX_BN_FP16, FX_BN_FP16},
                                   {FX_BN_FP16, FX_BN_F32}, {FX_BN_F32, FX_BN_FP16},
                                   {FX_BN_FP16, FX_BN_BF16}, {FX_BN_BF16, FX_BN_FP16},
                                   {FX_BN_I16, FX_BN_FP16},  {FX_BN_FP16, FX_BN_I16}};
    for (size_t pi = 0; pi < sizeof pairs / sizeof *pairs; pi++) {
        const int uses_i16 = pairs[pi][0] == FX_BN_I16 || pairs[pi][1] == FX_BN_I16;
        const int nexp = uses_i16 ? (int)(sizeof mant_exps / sizeof *mant_exps) : 1;
        for (int ei = 0; ei < nexp; ei++) {
            kind_data X = {{0}, NULL, NULL}, G = {{0}, NULL, NULL};
            /* dy's exponent 10 below x's, inside the range fx_bn_src allows */
            const int eg = mant_exps[ei] - 10 < FX_BN_I16_EXP_MIN ? FX_BN_I16_EXP_MIN
                                                                  : mant_exps[ei] - 10;
            if (make_kind(&X, pairs[pi][0], x, n, mant_exps[ei], r) &&
                make_kind(&G, pairs[pi][1], g, n, eg, r))
                compare_kinds(k, level, d, data, &X, &G);
            else
                CHECK(0, "out of memory");
            free_kind(&X);
            free_kind(&G);
        }
    }
done:
    free(x);
    free(g);
}

/* The integer pass on channels long enough that its int32 lanes must be widened on the way
 * (more than 2^15 pairs of extreme mantissas per lane): 2^21 values per channel, mostly
 * -32768 (an int32 lane would pass -2^31 after 2^15 such pairs), in rows with and without a
 * tail. */
static void sum_range_long(const fx_bn_kernels *k, const char *level)
{
    static const fx_bn_dims dims[2] = {{1, 2, 1 << 21, 1 << 21}, {3, 2, 699051, 3 * 699051}};
    for (int di = 0; di < 2; di++) {
        const fx_bn_dims *d = &dims[di];
        const int64_t n = d->N * d->C * d->S;
        int16_t *m = malloc(sizeof(int16_t) * (size_t)n);
        if (!m) {
            CHECK(0, "out of memory");
            return;
        }
        for (int64_t i = 0; i < n; i++)
            m[i] = (int16_t)(i % 1009 == 1 ? INT16_MAX : i % 7 == 3 ? 12 - i % 5 : INT16_MIN);
        int64_t sum[2];
        int16_t lo[2], hi[2];
        k->sum_range_i16(m, d, 0, 2, sum, lo, hi);
        for (int j = 0; j < 2; j++) {
            int64_t want = 0;
            for (int64_t r = 0; r < d->N; r++)
                for (int64_t i = 0; i < d->S; i++) want += m[(r * d->C + j) * d->S + i];
            CHECK(sum[j] == want && lo[j] == INT16_MIN && hi[j] == INT16_MAX,
                  "%s sum_range_i16 on %lld values a channel, channel %d: sum %lld (want %lld), "
                  "lo %d hi %d", level, (long long)d->M, j, (long long)sum[j], (long long)want,
                  lo[j], hi[j]);
        }
        free(m);
    }
}

/* ---- the ops: inputs read in place against an fp32 copy ----------------------------------
 * tensor_batchnorm and its backward with the in-place sources and the kept statistics
 * (fx_bn_set_in_place(1), the default) against the route through fp32 copies and the write's
 * own scan (0): the same bits in y, dx, dgamma, dbeta, the same exponents and write statistics,
 * and the same batch and running statistics, for every format, with two Autoflex writes in a
 * row (the second one predicted from the first), on every backend, with one and two threads
 * (C = 8 channels: two groups of four, or eight of one, split over the threads). */
typedef struct op_result {
    int16_t *raw[4]; /* y, dx, dgamma and dbeta as stored (16-bit formats) */
    float *f[4];     /* the same read back as fp32 */
    float save[4][8];
    double stat[4][5];
    int exp[4];
} op_result;

static const char *const stat_names[5] = {"true_max", "nonfinite", "saturated", "underflow",
                                          "stored_max"};

static void run_op(fmt_t f, int in_place, int nonfinite, int threads, op_result *res)
{
    enum { N = 6, C = 8, H = 5, W = 7 };
    const int64_t xs[4] = {N, C, H, W}, cs[1] = {C}, n = (int64_t)N * C * H * W;
    fx_bn_set_in_place(in_place);
    flexpoint_set_num_threads(threads);
    tensor_t *x = tensor_new(f, 4, xs), *dy = tensor_new(f, 4, xs), *y = tensor_new(f, 4, xs);
    tensor_t *dx = tensor_new(f, 4, xs), *gm = tensor_new(FMT_FP32, 1, cs);
    tensor_t *bt = tensor_new(FMT_FP32, 1, cs), *dg = tensor_new(f, 1, cs);
    tensor_t *db = tensor_new(f, 1, cs);
    float *v = malloc(sizeof(float) * (size_t)n);
    CHECK(x && dy && y && dx && gm && bt && dg && db && v, "allocation");
    if (!(x && dy && y && dx && gm && bt && dg && db && v)) goto done;
    test_rng r;
    test_rng_seed(&r, 99);
    float gamma[C], beta[C], rm[C] = {0}, rv[C];
    for (int c = 0; c < C; c++) {
        gamma[c] = 0.5f + 0.1f * (float)c;
        beta[c] = -0.2f + 0.05f * (float)c;
        rv[c] = 1.0f;
    }
    CHECK_STATUS(tensor_from_f32(gm, gamma), FX_OK);
    CHECK_STATUS(tensor_from_f32(bt, beta), FX_OK);
    for (int rep = 0; rep < 2; rep++) { /* the second write into y and dx is predicted */
        for (int64_t i = 0; i < n; i++) v[i] = (float)(3.0 * test_rng_normal(&r) + (i % 5));
        if (nonfinite && rep == 1) v[7] = INFINITY; /* float formats only: y gets NaN/Inf */
        CHECK_STATUS(tensor_from_f32(x, v), FX_OK);
        for (int64_t i = 0; i < n; i++) v[i] = (float)(0.01 * test_rng_normal(&r));
        CHECK_STATUS(tensor_from_f32(dy, v), FX_OK);
        CHECK_STATUS(tensor_batchnorm(y, x, gm, bt, rm, rv, res->save[0], res->save[1], 0.1,
                                      1e-5, 1),
                     FX_OK);
        CHECK_STATUS(tensor_batchnorm_backward(dx, dg, db, dy, x, gm, res->save[0],
                                               res->save[1]),
                     FX_OK);
    }
    memcpy(res->save[2], rm, sizeof rm);
    memcpy(res->save[3], rv, sizeof rv);
    tensor_t *outs[4] = {y, dx, dg, db};
    for (int i = 0; i < 4; i++) {
        const int64_t m = tensor_numel(outs[i]);
        res->f[i] = malloc(sizeof(float) * (size_t)m);
        res->raw[i] = f == FMT_FP32 ? NULL : malloc(sizeof(int16_t) * (size_t)m);
        if (res->f[i]) CHECK_STATUS(tensor_to_f32(outs[i], res->f[i]), FX_OK);
        if (res->raw[i]) CHECK_STATUS(tensor_get_raw(outs[i], res->raw[i]), FX_OK);
        res->exp[i] = 0;
        for (int k = 0; k < 5; k++) res->stat[i][k] = 0.0;
        if (fmt_is_shared_exponent(f)) {
            CHECK_STATUS(tensor_get_exp(outs[i], &res->exp[i]), FX_OK);
            for (int k = 0; k < 5; k++)
                CHECK_STATUS(tensor_stat(outs[i], stat_names[k], &res->stat[i][k]), FX_OK);
        }
    }
done:
    fx_bn_set_in_place(1);
    free(v);
    tensor_free(x);
    tensor_free(dy);
    tensor_free(y);
    tensor_free(dx);
    tensor_free(gm);
    tensor_free(bt);
    tensor_free(dg);
    tensor_free(db);
}

static void free_result(op_result *r)
{
    for (int i = 0; i < 4; i++) {
        free(r->raw[i]);
        free(r->f[i]);
    }
}

/* An output that is an input itself (y = x forward, dx = dy backward) gets the bits of the
 * same op into a tensor of its own, for the 16-bit float formats, whose outputs are written
 * plane by plane from a buffer, and fp32 and DFP16, at one and two threads. (Not FLEX16_5:
 * there the output's exponent comes from the output tensor's own Autoflex history, which an
 * input tensor does not share with a new one.) */
static void ops_aliased(void)
{
    enum { N = 5, C = 8, H = 6, W = 6 };
    const int64_t xs[4] = {N, C, H, W}, cs[1] = {C}, n = (int64_t)N * C * H * W;
    float *v = malloc(sizeof(float) * (size_t)n), *d = malloc(sizeof(float) * (size_t)n);
    float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
    float gamma[C], beta[C], save[2][C], save2[2][C];
    for (int c = 0; c < C; c++) {
        gamma[c] = 0.7f + 0.1f * (float)c;
        beta[c] = 0.1f * (float)c - 0.3f;
    }
    test_rng r;
    test_rng_seed(&r, 7);
    for (int64_t i = 0; i < n; i++) {
        v[i] = (float)(2.0 * test_rng_normal(&r) + 0.5);
        d[i] = (float)(0.1 * test_rng_normal(&r));
    }
    tensor_t *gm = tensor_new(FMT_FP32, 1, cs), *bt = tensor_new(FMT_FP32, 1, cs);
    CHECK_STATUS(tensor_from_f32(gm, gamma), FX_OK);
    CHECK_STATUS(tensor_from_f32(bt, beta), FX_OK);
    for (int f = 0; f < FMT_COUNT; f++)
        for (int threads = 1; threads <= 2 && f != FMT_FLEX16_5; threads++) {
            flexpoint_set_num_threads(threads);
            tensor_t *x = tensor_new((fmt_t)f, 4, xs), *y = tensor_new((fmt_t)f, 4, xs);
            tensor_t *dy = tensor_new((fmt_t)f, 4, xs), *dx = tensor_new((fmt_t)f, 4, xs);
            CHECK_STATUS(tensor_from_f32(x, v), FX_OK);
            CHECK_STATUS(tensor_from_f32(dy, d), FX_OK);
            /* backward first, while x still holds the input */
            CHECK_STATUS(tensor_batchnorm(y, x, gm, bt, NULL, NULL, save[0], save[1], 0.1, 1e-5,
                                          1),
                         FX_OK);
            CHECK_STATUS(tensor_batchnorm_backward(dx, NULL, NULL, dy, x, gm, save[0], save[1]),
                         FX_OK);
            CHECK_STATUS(tensor_to_f32(dx, want), FX_OK);
            CHECK_STATUS(tensor_batchnorm_backward(dy, NULL, NULL, dy, x, gm, save[0], save[1]),
                         FX_OK);
            CHECK_STATUS(tensor_to_f32(dy, got), FX_OK);
            CHECK(memcmp(want, got, sizeof(float) * (size_t)n) == 0,
                  "%s, %d thread(s): batch-norm dx into dy itself differs", fmt_name((fmt_t)f),
                  threads);
            CHECK_STATUS(tensor_to_f32(y, want), FX_OK);
            CHECK_STATUS(tensor_batchnorm(x, x, gm, bt, NULL, NULL, save2[0], save2[1], 0.1,
                                          1e-5, 1),
                         FX_OK);
            CHECK_STATUS(tensor_to_f32(x, got), FX_OK);
            CHECK(memcmp(want, got, sizeof(float) * (size_t)n) == 0 &&
                      memcmp(save, save2, sizeof save) == 0,
                  "%s, %d thread(s): batch norm into x itself differs", fmt_name((fmt_t)f),
                  threads);
            tensor_free(x);
            tensor_free(y);
            tensor_free(dy);
            tensor_free(dx);
        }
    tensor_free(gm);
    tensor_free(bt);
    free(v);
    free(d);
    free(want);
    free(got);
}

static void ops_in_place(void)
{
    static const char *const out_names[4] = {"y", "dx", "dgamma", "dbeta"};
    const int64_t m[4] = {6 * 8 * 5 * 7, 6 * 8 * 5 * 7, 8, 8};
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        const char *bn = flexpoint_backend_name(bi);
        CHECK_STATUS(flexpoint_set_backend(bn), FX_OK);
        for (int f = 0; f < FMT_COUNT; f++)
            for (int nonfinite = 0; nonfinite < 2; nonfinite++)
                for (int threads = 1; threads <= 2; threads++) {
                    if (nonfinite && fmt_is_shared_exponent((fmt_t)f)) continue;
                    op_result a, b;
                    memset(&a, 0, sizeof a);
                    memset(&b, 0, sizeof b);
                    run_op((fmt_t)f, 1, nonfinite, threads, &a);
                    run_op((fmt_t)f, 0, nonfinite, threads, &b);
                    for (int i = 0; i < 4; i++) {
                        const int ok =
                            a.f[i] && b.f[i] &&
                            memcmp(a.f[i], b.f[i], sizeof(float) * (size_t)m[i]) == 0 &&
                            (!a.raw[i] ||
                             memcmp(a.raw[i], b.raw[i], sizeof(int16_t) * (size_t)m[i]) == 0) &&
                            a.exp[i] == b.exp[i] &&
                            memcmp(a.stat[i], b.stat[i], sizeof a.stat[i]) == 0;
                        CHECK(ok, "%s %s%s, %d thread(s): %s differs between the in-place "
                              "route and the fp32 copies (exponent %d/%d, true_max %g/%g)", bn,
                              fmt_name((fmt_t)f), nonfinite ? " with Inf" : "", threads,
                              out_names[i], a.exp[i], b.exp[i], a.stat[i][0], b.stat[i][0]);
                    }
                    CHECK(memcmp(a.save, b.save, sizeof a.save) == 0,
                          "%s %s, %d thread(s): batch or running statistics differ", bn,
                          fmt_name((fmt_t)f), threads);
                    free_result(&a);
                    free_result(&b);
                }
    }
    flexpoint_set_num_threads(0);
}

/* ---- the forward pass straight into a shared-exponent y (bn_direct.h) ----------------------
 * Against the stage route (fx_bn_direct_set_enabled(0)): y's mantissas, exponent and every
 * statistic of the write and of the storage (saturations, overflows, Autoflex's recomputes),
 * after each of three writes in a row (the third at 60 times the scale: a FLEX16_5 prediction
 * that overflows and is recomputed), in training and inference, rounding to nearest and
 * stochastically, with one and two threads (a second thread takes part only from 2^15 values:
 * the last case); rows longer than the route's buffer (S = 1600),
 * one value per row ([N, F]); the route counted as run, and not run where y is x (it may read x
 * again after writing y), where an output is not finite (a NaN gamma: the stage route counts
 * it) or where there is no input (an empty batch in inference). */
static const char *const all_stats[] = {"saturated", "true_max", "nonfinite", "underflow",
                                        "clamped", "overflows", "clamped_total",
                                        "nonfinite_total", "writes", "exp", "stored_max"};
enum { N_ALL_STATS = sizeof all_stats / sizeof *all_stats };

typedef struct direct_case {
    int64_t shape[4];
    int ndim, training, stochastic, nan_gamma, alias;
} direct_case;

/* three forward passes; y's mantissas and statistics after each into raw[rep] and st[rep] */
static void run_direct(fmt_t f, const direct_case *dc, int direct, int threads, int16_t **raw,
                       double st[3][N_ALL_STATS], int64_t *runs)
{
    fx_bn_direct_set_enabled(direct);
    flexpoint_set_num_threads(threads);
    const int64_t C = dc->shape[1], cs[1] = {C};
    tensor_t *x = tensor_new(f, dc->ndim, dc->shape);
    tensor_t *y = dc->alias ? x : tensor_new(f, dc->ndim, dc->shape);
    tensor_t *gm = tensor_new(FMT_FP32, 1, cs), *bt = tensor_new(FMT_FP32, 1, cs);
    const int64_t n = tensor_numel(x);
    float *v = malloc(sizeof(float) * (size_t)(n + 1)), *gamma = malloc(sizeof(float) * (size_t)C);
    float *beta = malloc(sizeof(float) * (size_t)C), *rm = calloc((size_t)C, sizeof(float));
    float *rv = malloc(sizeof(float) * (size_t)C);
    test_rng r;
    test_rng_seed(&r, 4242);
    for (int64_t c = 0; c < C; c++) {
        gamma[c] = (float)(0.5 + 0.25 * (double)(c % 5));
        beta[c] = (float)(0.1 * (double)(c % 3) - 0.1);
        rm[c] = (float)(0.3 * (double)c);
        rv[c] = (float)(1.0 + 0.5 * (double)c);
    }
    if (dc->nan_gamma) gamma[C - 1] = NAN;
    CHECK_STATUS(tensor_from_f32(gm, gamma), FX_OK);
    CHECK_STATUS(tensor_from_f32(bt, beta), FX_OK);
    if (dc->stochastic) CHECK_STATUS(tensor_set_rounding(y, FX_ROUND_STOCHASTIC, 77), FX_OK);
    const int64_t before = fx_bn_direct_runs();
    for (int rep = 0; rep < 3; rep++) {
        const double scale = rep == 2 ? 60.0 : 1.0 + rep;
        for (int64_t i = 0; i < n; i++) v[i] = (float)(scale * (test_rng_normal(&r) + 0.2));
        CHECK_STATUS(tensor_from_f32(x, v), FX_OK);
        /* inference scales the outputs by the data: its running variance stays put */
        CHECK_STATUS(tensor_batchnorm(y, x, gm, bt, rm, rv, NULL, NULL, 0.1, 1e-5, dc->training),
                     FX_OK);
        CHECK_STATUS(tensor_get_raw(y, raw[rep]), FX_OK);
        for (int k = 0; k < N_ALL_STATS; k++)
            CHECK_STATUS(tensor_stat(y, all_stats[k], &st[rep][k]), FX_OK);
    }
    *runs = fx_bn_direct_runs() - before;
    fx_bn_direct_set_enabled(1);
    flexpoint_set_num_threads(0);
    if (!dc->alias) tensor_free(y);
    tensor_free(x);
    tensor_free(gm);
    tensor_free(bt);
    free(v);
    free(gamma);
    free(beta);
    free(rm);
    free(rv);
}

static void forward_direct(void)
{
    static const direct_case cases[] = {
        {{4, 3, 40, 40}, 4, 1, 0, 0, 0}, {{6, 8, 5, 7}, 4, 1, 0, 0, 0},
        {{64, 5, 0, 0}, 2, 1, 0, 0, 0},  {{6, 8, 5, 7}, 4, 0, 0, 0, 0},
        {{4, 3, 40, 40}, 4, 1, 1, 0, 0}, {{6, 8, 5, 7}, 4, 1, 0, 1, 0},
        {{6, 8, 5, 7}, 4, 1, 0, 0, 1},   {{0, 4, 8, 8}, 4, 0, 0, 0, 0},
        {{8, 4, 32, 40}, 4, 1, 1, 0, 0}}; /* 40,960 values: two threads take it */
    static const fmt_t fmts[2] = {FMT_FLEX16_5, FMT_DFP16};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int fi = 0; fi < 2; fi++)
            for (int threads = 1; threads <= 2; threads++) {
                const direct_case *dc = &cases[ci];
                int64_t n = 1;
                for (int d = 0; d < dc->ndim; d++) n *= dc->shape[d];
                int16_t *raw[2][3];
                double st[2][3][N_ALL_STATS];
                int64_t runs[2];
                for (int k = 0; k < 2; k++)
                    for (int rep = 0; rep < 3; rep++)
                        raw[k][rep] = malloc(sizeof(int16_t) * (size_t)(n + 1));
                run_direct(fmts[fi], dc, 1, threads, raw[0], st[0], &runs[0]);
                run_direct(fmts[fi], dc, 0, threads, raw[1], st[1], &runs[1]);
                const int expect = !dc->nan_gamma && !dc->alias && n > 0;
                CHECK(runs[0] == (expect ? 3 : 0) && runs[1] == 0,
                      "%s case %zu: the direct route ran %lld times (expected %d)",
                      fmt_name(fmts[fi]), ci, (long long)runs[0], expect ? 3 : 0);
                for (int rep = 0; rep < 3; rep++) {
                    long bad = 0;
                    for (int64_t i = 0; i < n; i++) bad += raw[0][rep][i] != raw[1][rep][i];
                    int badstat = -1;
                    for (int k = 0; k < N_ALL_STATS && badstat < 0; k++)
                        if (!same_double(st[0][rep][k], st[1][rep][k])) badstat = k;
                    CHECK(bad == 0 && badstat < 0,
                          "%s case %zu, %d thread(s), write %d: %ld mantissas differ from the "
                          "stage route; statistic %s %g against %g", fmt_name(fmts[fi]), ci,
                          threads, rep, bad, badstat < 0 ? "-" : all_stats[badstat],
                          badstat < 0 ? 0.0 : st[0][rep][badstat],
                          badstat < 0 ? 0.0 : st[1][rep][badstat]);
                }
                for (int k = 0; k < 2; k++)
                    for (int rep = 0; rep < 3; rep++) free(raw[k][rep]);
            }
}

/* ---- the backward pass rounded at a guessed exponent (bn_direct.h) ------------------------
 * Against the stage route (fx_bn_backward_direct_set_enabled(0)): dx's mantissas, exponent and
 * every statistic of its writes, after each of four backward passes in a row (the third at 60
 * times the scale of dy: a FLEX16_5 prediction that overflows and is recomputed, a DFP16
 * exponent that moves; the fourth back at the old scale), rounding to nearest and
 * stochastically, with one and two threads (the last case is large enough for two to take
 * part), rows longer than the route's buffer and one value
 * per row; the route counted as run where dx's exponent can be guessed (every write of a DFP16
 * dx, every one but the first of a FLEX16_5 dx) and as rounding again where the guess missed,
 * and not run where dx is dy. dgamma and dbeta are compared too. */
typedef struct bwd_case {
    int64_t shape[4];
    int ndim, stochastic, alias;
} bwd_case;

enum { BWD_REPS = 4 };

static void run_backward(fmt_t f, const bwd_case *bc, int direct, int threads, int16_t **raw,
                         double st[BWD_REPS][N_ALL_STATS], float *dgb, int64_t *runs,
                         int64_t *missed)
{
    fx_bn_backward_direct_set_enabled(direct);
    flexpoint_set_num_threads(threads);
    const int64_t C = bc->shape[1], cs[1] = {C};
    tensor_t *x = tensor_new(f, bc->ndim, bc->shape), *dy = tensor_new(f, bc->ndim, bc->shape);
    tensor_t *dx = bc->alias ? dy : tensor_new(f, bc->ndim, bc->shape);
    tensor_t *gm = tensor_new(FMT_FP32, 1, cs), *dg = tensor_new(FMT_FP32, 1, cs);
    tensor_t *db = tensor_new(FMT_FP32, 1, cs);
    const int64_t n = tensor_numel(x);
    float *v = malloc(sizeof(float) * (size_t)(n + 1)), *gamma = malloc(sizeof(float) * (size_t)C);
    float *sm = malloc(sizeof(float) * (size_t)C), *si = malloc(sizeof(float) * (size_t)C);
    test_rng r;
    test_rng_seed(&r, 777);
    for (int64_t c = 0; c < C; c++) {
        gamma[c] = (float)(0.5 + 0.25 * (double)(c % 5));
        sm[c] = (float)(0.1 * (double)c);
        si[c] = (float)(1.0 / (1.0 + 0.5 * (double)c));
    }
    CHECK_STATUS(tensor_from_f32(gm, gamma), FX_OK);
    if (bc->stochastic) CHECK_STATUS(tensor_set_rounding(dx, FX_ROUND_STOCHASTIC, 91), FX_OK);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(test_rng_normal(&r) + 0.3);
    CHECK_STATUS(tensor_from_f32(x, v), FX_OK);
    const int64_t runs0 = fx_bn_backward_direct_runs(), miss0 = fx_bn_backward_direct_missed();
    for (int rep = 0; rep < BWD_REPS; rep++) {
        const double scale = rep == 2 ? 60.0 : 1.0 + 0.25 * rep;
        for (int64_t i = 0; i < n; i++) v[i] = (float)(1e-3 * scale * test_rng_normal(&r));
        CHECK_STATUS(tensor_from_f32(dy, v), FX_OK);
        CHECK_STATUS(tensor_batchnorm_backward(dx, dg, db, dy, x, gm, sm, si), FX_OK);
        CHECK_STATUS(tensor_get_raw(dx, raw[rep]), FX_OK);
        for (int k = 0; k < N_ALL_STATS; k++)
            CHECK_STATUS(tensor_stat(dx, all_stats[k], &st[rep][k]), FX_OK);
        CHECK_STATUS(tensor_to_f32(dg, dgb + 2 * C * rep), FX_OK);
        CHECK_STATUS(tensor_to_f32(db, dgb + 2 * C * rep + C), FX_OK);
    }
    *runs = fx_bn_backward_direct_runs() - runs0;
    *missed = fx_bn_backward_direct_missed() - miss0;
    fx_bn_backward_direct_set_enabled(1);
    flexpoint_set_num_threads(0);
    if (!bc->alias) tensor_free(dx);
    tensor_free(x);
    tensor_free(dy);
    tensor_free(gm);
    tensor_free(dg);
    tensor_free(db);
    free(v);
    free(gamma);
    free(sm);
    free(si);
}

static void backward_direct(void)
{
    static const bwd_case cases[] = {{{4, 3, 40, 40}, 4, 0, 0}, {{6, 8, 5, 7}, 4, 0, 0},
                                     {{64, 5, 0, 0}, 2, 0, 0},  {{4, 3, 40, 40}, 4, 1, 0},
                                     {{6, 8, 5, 7}, 4, 1, 0},   {{6, 8, 5, 7}, 4, 0, 1},
                                     /* 40,960 values: two threads take it */
                                     {{8, 4, 32, 40}, 4, 1, 0}};
    static const fmt_t fmts[2] = {FMT_FLEX16_5, FMT_DFP16};
    /* the deferred suite's host writes are not decided at once, so they may fail later: the
     * route, which writes dx first, stays off there (fx_write_i16_cannot_fail) */
    const char *dv = getenv("FLEXPOINT_TEST_DEFER_HOST");
    const int deferred = dv && dv[0] == '1';
    int64_t all_missed = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int fi = 0; fi < 2; fi++)
            for (int threads = 1; threads <= 2; threads++) {
                const bwd_case *bc = &cases[ci];
                int64_t n = 1;
                for (int d = 0; d < bc->ndim; d++) n *= bc->shape[d];
                const int64_t C = bc->shape[1];
                int16_t *raw[2][BWD_REPS];
                double st[2][BWD_REPS][N_ALL_STATS];
                float *dgb[2];
                int64_t runs[2], missed[2];
                for (int k = 0; k < 2; k++) {
                    for (int rep = 0; rep < BWD_REPS; rep++)
                        raw[k][rep] = malloc(sizeof(int16_t) * (size_t)n);
                    dgb[k] = malloc(sizeof(float) * (size_t)(2 * C * BWD_REPS));
                }
                run_backward(fmts[fi], bc, 1, threads, raw[0], st[0], dgb[0], &runs[0],
                             &missed[0]);
                run_backward(fmts[fi], bc, 0, threads, raw[1], st[1], dgb[1], &runs[1],
                             &missed[1]);
                const int64_t expect = bc->alias || deferred ? 0
                                       : fmts[fi] == FMT_DFP16 ? BWD_REPS
                                                               : BWD_REPS - 1;
                CHECK(runs[0] == expect && runs[1] == 0,
                      "%s backward case %zu: the direct route ran %lld times (expected %lld)",
                      fmt_name(fmts[fi]), ci, (long long)runs[0], (long long)expect);
                all_missed += missed[0];
                for (int rep = 0; rep < BWD_REPS; rep++) {
                    long bad = 0;
                    for (int64_t i = 0; i < n; i++) bad += raw[0][rep][i] != raw[1][rep][i];
                    int badstat = -1;
                    for (int k = 0; k < N_ALL_STATS && badstat < 0; k++)
                        if (!same_double(st[0][rep][k], st[1][rep][k])) badstat = k;
                    CHECK(bad == 0 && badstat < 0,
                          "%s backward case %zu, %d thread(s), write %d: %ld mantissas differ "
                          "from the stage route; statistic %s %g against %g",
                          fmt_name(fmts[fi]), ci, threads, rep, bad,
                          badstat < 0 ? "-" : all_stats[badstat],
                          badstat < 0 ? 0.0 : st[0][rep][badstat],
                          badstat < 0 ? 0.0 : st[1][rep][badstat]);
                }
                CHECK(same_floats(dgb[0], dgb[1], 2 * C * BWD_REPS),
                      "%s backward case %zu: dgamma or dbeta differ", fmt_name(fmts[fi]), ci);
                for (int k = 0; k < 2; k++) {
                    for (int rep = 0; rep < BWD_REPS; rep++) free(raw[k][rep]);
                    free(dgb[k]);
                }
            }
    /* the scale jump makes guesses miss: those writes were rounded again, and still agree */
    CHECK(deferred || all_missed > 0, "no backward write missed its guessed exponent (%lld)",
          (long long)all_missed);
}

/* An output row may be the source row itself (batchnorm.c writes into the private fp32 copy of
 * an fp16 or strided input): each output must come from its own input, read before anything
 * is written over it. Rows whose outputs are not all normal fp32 numbers (a NaN, an Inf, a
 * zero, a subnormal) at various places make a level that rounds a row twice (a fast pass, then
 * an exact one) read values it already overwrote. The level's kernels in place must give the
 * portable kernels' outputs from an untouched copy, rounded to nearest and to odd. */
static void in_place_rows(const fx_bn_kernels *k, const char *level)
{
    enum { S = 37 };
    static const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, 1e-41f};
    for (size_t si = 0; si < sizeof specials / sizeof *specials; si++)
        for (int at = 0; at < S; at += 5)
            for (int odd = 0; odd < 2; odd++) {
                float x[S], g[S], want[S], got[S];
                for (int i = 0; i < S; i++) { /* no zero among them: only x[at] is special */
                    x[i] = 0.75f * (float)i - 9.125f;
                    g[i] = 0.5f - 0.125f * (float)i;
                }
                x[at] = specials[si]; /* 0: a zero result, x being the mean (mu = 0, b = 0) */
                const fx_bn_src xs = f32_src(x), gs = f32_src(g);
                fx_bn_kernels_portable.normalize(&xs, 0, want, S, 0.0, 1.25, 0.0, odd, NULL);
                memcpy(got, x, sizeof x);
                const fx_bn_src in = f32_src(got);
                k->normalize(&in, 0, got, S, 0.0, 1.25, 0.0, odd, NULL);
                CHECK(same_floats(want, got, S), "%s normalize in place, special %zu at %d, odd "
                      "%d: outputs differ from the portable kernel's", level, si, at, odd);
                fx_bn_kernels_portable.backward(&xs, &gs, 0, want, S, 0.0, 0.5, 1.5, 0.25,
                                                0.125, odd, NULL);
                memcpy(got, x, sizeof x);
                const fx_bn_src xin = f32_src(got);
                k->backward(&xin, &gs, 0, got, S, 0.0, 0.5, 1.5, 0.25, 0.125, odd, NULL);
                CHECK(same_floats(want, got, S), "%s backward in place of x, special %zu at %d, "
                      "odd %d: outputs differ from the portable kernel's", level, si, at, odd);
            }
}

int main(void)
{
    static const fx_bn_dims shapes[] = {
        {2, 3, 5, 10},     {4, 8, 9, 36},    {3, 17, 20, 60}, {1, 4, 1, 1},
        {64, 6, 1, 64},    {8, 16, 64, 512}, {5, 7, 33, 165}, {2, 4, 1027, 2054},
        {3, 5, 6, 18},     {2, 6, 7, 14},    {3, 4, 10, 30},
    };
    int levels = 0;
    for (int b = 0; b < FX_BACKEND_COUNT; b++) {
        const fx_backend *be = fx_backend_get(b);
        if (!be || !be->available || !be->bn) continue;
        if (b > 0 && fx_backend_get(b - 1) && fx_backend_get(b - 1)->bn == be->bn) continue;
        levels++;
        rounding_edges(be->bn, be->name);
        in_place_rows(be->bn, be->name);
        sum_range_long(be->bn, be->name);
        test_rng r;
        test_rng_seed(&r, 1234 + (uint64_t)b);
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int kind = 0; kind < 3; kind++) compare(be->bn, be->name, &shapes[s], kind, &r);
    }
    sum_range_long(&fx_bn_kernels_portable, "portable");
    ops_in_place(); /* every backend, the portable kernels included */
    ops_aliased();
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) { /* the direct routes on each too */
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        forward_direct();
        backward_direct();
    }
    if (!levels) printf("test_bn_kernels: no CPU level with its own batch-norm kernels here\n");
    return test_finish("test_bn_kernels");
}
