/* Softmax's own arithmetic (src/nn/softmax_def.h) and the backends' kernels for it:
 *
 * 1. fx_expf_def against exp in double over every FX_EXPF_STRIDE-th fp32 bit pattern in
 *    [-110, 89] (default 1009; FX_EXPF_STRIDE=1 runs all 2.24e9 of them) and around the
 *    boundaries: within 1.02 ulp where the result is a normal number (the exhaustive run
 *    measured 1.0103), within 1 unit of the smallest subnormal below that, exactly +Inf where
 *    exp overflows fp32 and 0 where it is below half the smallest subnormal; exp(0) is exactly
 *    1 (a softmax row's maximum), NaN stays NaN.
 * 2. Every backend's exp_f32 gives the definition's bits on the same values, in calls of
 *    every length from 0 to 40 (the tails) and in place.
 * 3. Every backend's softmax_row_f32 and softmax_backward_row_f32 give the definition's bits
 *    and statistics on rows of many lengths, with NaN, +-Inf and signed zeros planted, also in
 *    place (y = x, dx = g); the definition's statistics are those of the results it stores.
 * 4. The definition's sums: 16 interleaved partial sums and the tree, on a hand-checked row.
 * Whole-op checks (formats, bounds, backends and thread counts, finite differences) are in
 * test_nn_softmax_axis.c. */
#include "core/backend.h"
#include "nn/softmax_def.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits_of(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static float float_of(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* error of got against exp(x) in units of the last place of the correctly rounded result
 * (normal results) or of the smallest subnormal (below 2^-126) */
static double exp_err_units(float x, float got, int *normal)
{
    const double ref = exp((double)x);
    *normal = ref >= 0x1p-126;
    if (!*normal) return fabs((double)got - ref) / 0x1p-149;
    int e;
    frexp(ref, &e);
    return fabs((double)got - ref) / ldexp(1.0, e - 24);
}

/* values to check: the sweep plus boundaries and specials */
static float *sample_values(int64_t stride, int64_t *count)
{
    int64_t cap = 4096 + (int64_t)(0x100000000LL / stride) + 1, n = 0;
    float *v = malloc((size_t)cap * sizeof *v);
    if (!v) exit(2);
    for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += (uint64_t)stride) {
        const float x = float_of((uint32_t)b);
        if (x >= -110.0f && x <= 89.0f && n < cap) v[n++] = x;
    }
    const float edges[] = {0.0f,       -0.0f,       88.72283935546875f, 88.7228317f, 88.7228470f,
                           -87.336548f, -103.27893f, -103.97208f,       -104.0f,     -110.0f,
                           -110.5f,     89.0f,       89.5f,             1e-45f,      -1e-45f,
                           1e-7f,       -1e-7f,      0.34657359f,       -0.34657359f, 1.0f,
                           -1.0f,       INFINITY,    -INFINITY,         1e30f,       -1e30f,
                           3.4028235e38f, -3.4028235e38f};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) v[n++] = edges[i];
    /* every neighbour of the clamp bounds and of the overflow / underflow thresholds */
    const float around[] = {88.72283935546875f, -103.97208f, -87.336548f, -110.0f, 89.0f};
    for (size_t i = 0; i < sizeof around / sizeof *around; i++)
        for (int d = -40; d <= 40; d++) v[n++] = float_of(bits_of(around[i]) + (uint32_t)d);
    *count = n;
    return v;
}

static void check_definition(const float *v, int64_t n)
{
    double worst = 0, worst_sub = 0;
    float wx = 0;
    long bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const float x = v[i], got = fx_expf_def(x);
        if (isnan(x)) continue;
        const double ref = exp((double)x);
        if (ref > 3.4028234663852886e38) {
            if (!(isinf(got) && got > 0) && bad++ < 5)
                fprintf(stderr, "exp(%a) = %a, want +Inf\n", x, got);
            continue;
        }
        if (ref < 0x1p-150) {
            if (got != 0.0f && bad++ < 5) fprintf(stderr, "exp(%a) = %a, want 0\n", x, got);
            continue;
        }
        int normal;
        const double err = exp_err_units(x, got, &normal);
        if (normal && err > worst) {
            worst = err;
            wx = x;
        }
        if (!normal && err > worst_sub) worst_sub = err;
    }
    CHECK(bad == 0, "%ld special results wrong", bad);
    CHECK(worst <= 1.02, "fx_expf_def: %.4f ulp at %a", worst, wx);
    CHECK(worst_sub <= 1.0, "fx_expf_def subnormal results: %.4f units of 2^-149", worst_sub);
    CHECK(bits_of(fx_expf_def(0.0f)) == bits_of(1.0f) && bits_of(fx_expf_def(-0.0f)) == bits_of(1.0f),
          "exp(+-0) is not exactly 1");
    CHECK(isnan(fx_expf_def(NAN)) && fx_expf_def(-INFINITY) == 0.0f &&
              fx_expf_def(INFINITY) == INFINITY,
          "exp of NaN / -Inf / +Inf");
    printf("fx_expf_def: %lld values, worst %.4f ulp (normal results) at %a, %.4f units of "
           "2^-149 (subnormal)\n", (long long)n, worst, wx, worst_sub);
}

static void check_exp_kernel(const fx_backend *be, const float *v, int64_t n)
{
    float *got = malloc((size_t)(n + 64) * sizeof *got), *inplace = malloc((size_t)(n + 64) * 4);
    if (!got || !inplace) exit(2);
    int64_t off = 0, len = 0, differ = 0;
    while (off < n) { /* calls of length 0, 1, ..., 40, 0, ... */
        const int64_t l = len < n - off ? len : n - off;
        got[off + l] = 12345.0f; /* nothing written past the call */
        be->cvt.exp_f32(v + off, got + off, l);
        CHECK(got[off + l] == 12345.0f || off + l == n, "%s exp_f32 wrote past %lld values",
              be->name, (long long)l);
        off += l;
        len = len == 40 ? 0 : len + 1;
    }
    for (int64_t i = 0; i < n; i++) differ += bits_of(got[i]) != bits_of(fx_expf_def(v[i]));
    memcpy(inplace, v, (size_t)n * sizeof *v);
    be->cvt.exp_f32(inplace, inplace, n);
    CHECK(memcmp(inplace, got, (size_t)n * sizeof *v) == 0, "%s exp_f32 in place differs",
          be->name);
    CHECK(differ == 0, "%s exp_f32: %lld of %lld values differ from fx_expf_def", be->name,
          (long long)differ, (long long)n);
    free(got);
    free(inplace);
}

static float row_value(test_rng *r, int specials)
{
    if (specials) {
        switch (test_rng_range(r, 0, 30)) {
        case 0: return NAN;
        case 1: return INFINITY;
        case 2: return -INFINITY;
        case 3: return 0.0f;
        case 4: return -0.0f;
        default: break;
        }
    }
    return (float)(test_rng_normal(r) * 4.0);
}

enum { ROWMAX = 1100 };

static void check_row_kernels(const fx_backend *be, test_rng *r)
{
    static const int64_t lens[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 64, 100,
                                   127, 128, 129, 520, 1000, 1100};
    static float x[ROWMAX], g[ROWMAX], yw[ROWMAX], yg[ROWMAX], dw[ROWMAX], dg[ROWMAX];
    long differ = 0, cases = 0;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        const int64_t len = lens[li];
        for (int variant = 0; variant < 6; variant++) {
            const int logsm = variant & 1, specials = variant >= 2, zeros = variant >= 4;
            for (int64_t k = 0; k < len; k++) {
                x[k] = zeros ? (test_rng_range(r, 0, 1) ? 0.0f : -0.0f) : row_value(r, specials);
                g[k] = row_value(r, specials && variant == 3);
            }
            /* forward: into another array, then in place */
            float mw = 0.5f, mg = 0.5f;
            int64_t bw = 3, bg = 3;
            fx_softmax_row_def(x, yw, 1, len, logsm, &mw, &bw);
            /* the statistics describe the stored results (softmax takes them without a pass) */
            float seen = 0.5f;
            int64_t seen_bad = 3;
            for (int64_t k = 0; k < len; k++) {
                if (isfinite(yw[k])) seen = fabsf(yw[k]) > seen ? fabsf(yw[k]) : seen;
                else seen_bad++;
            }
            CHECK(bits_of(seen) == bits_of(mw) && seen_bad == bw,
                  "definition's statistics: len %lld variant %d: max %a / %a, bad %lld / %lld",
                  (long long)len, variant, mw, seen, (long long)bw, (long long)seen_bad);
            be->cvt.softmax_row_f32(x, yg, len, logsm, &mg, &bg);
            int same = memcmp(yw, yg, (size_t)len * sizeof *x) == 0 && bits_of(mw) == bits_of(mg) &&
                       bw == bg;
            float xi[ROWMAX];
            memcpy(xi, x, (size_t)len * sizeof *x);
            float mi = 0.5f;
            int64_t bi = 3;
            be->cvt.softmax_row_f32(xi, xi, len, logsm, &mi, &bi);
            same &= memcmp(xi, yw, (size_t)len * sizeof *x) == 0 && bits_of(mi) == bits_of(mw) &&
                    bi == bw;
            /* backward from the forward's output */
            fx_softmax_backward_row_def(g, yw, dw, 1, len, logsm);
            be->cvt.softmax_backward_row_f32(g, yw, dg, len, logsm);
            same &= memcmp(dw, dg, (size_t)len * sizeof *x) == 0;
            float gi[ROWMAX];
            memcpy(gi, g, (size_t)len * sizeof *g);
            be->cvt.softmax_backward_row_f32(gi, yw, gi, len, logsm);
            same &= memcmp(gi, dw, (size_t)len * sizeof *x) == 0;
            cases++;
            if (!same && differ++ < 5)
                fprintf(stderr, "%s softmax rows: len %lld variant %d differ\n", be->name,
                        (long long)len, variant);
        }
    }
    CHECK(differ == 0, "%s: %ld of %ld softmax row cases differ from the definition", be->name,
          differ, cases);
}

/* The sums' order, by hand: 2^24 and sixteen 1s. Element 16 goes to partial sum 0 with
 * element 0, where 2^24 + 1 rounds back to 2^24 (a tie, to even); the tree then adds sum 8 (1:
 * lost the same way), sums 4..7 (2 each), 2..3 (4), 1 (8): 2^24 + 14 exactly. A sequential
 * fp32 sum would lose every 1 and give 2^24. */
static void check_sum_order(void)
{
    float p[16] = {0};
    for (int k = 0; k < 17; k++) p[k & 15] += k == 0 ? 0x1p24f : 1.0f;
    const float s = fx_sum16_tree(p);
    CHECK(s == 0x1p24f + 14.0f, "tree sum %a, want 2^24 + 14", s);
}

int main(void)
{
    const char *env = getenv("FX_EXPF_STRIDE");
    int64_t stride = env ? atoll(env) : 1009;
    if (stride < 1) stride = 1;
    int64_t n = 0;
    float *v = sample_values(stride, &n);
    check_definition(v, n);
    check_sum_order();
    test_rng r;
    test_rng_seed(&r, 7001);
    int kernels = 0;
    for (int i = 0; i < FX_BACKEND_COUNT; i++) {
        const fx_backend *be = fx_backend_get(i);
        if (!be || !be->available) continue;
        if (be->cvt.exp_f32) check_exp_kernel(be, v, n);
        if (be->cvt.softmax_row_f32 && be->cvt.softmax_backward_row_f32) {
            check_row_kernels(be, &r);
            kernels++;
        }
        CHECK(!be->cvt.exp_f32 == !be->cvt.softmax_row_f32,
              "%s: exp_f32 and softmax_row_f32 not registered together", be->name);
    }
    printf("softmax row kernels checked on %d backend(s)\n", kernels);
    free(v);
    return test_finish("test_nn_expf");
}
