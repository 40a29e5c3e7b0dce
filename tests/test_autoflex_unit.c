/* Autoflex alone (src/autoflex), driven by hand with a fake writer: the golden trace of
 * docs/autoflex.md for the published preset, the improved presets, scripted data sequences, window
 * edges and configuration validation. The fake writer quantises like docs/formats.md (round half to
 * even of x * 2^-e in double, saturation at 32767, NaN -> 0, Inf -> +-32767), so these tests do
 * not depend on any backend. */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include "autoflex/autoflex.h"
#include "core/internal.h" /* fx_af_config_validate: the check that sets the error message */
#include "flexpoint.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAXN 8

/* ---- fake writer --------------------------------------------------------------------------- */

typedef struct fake_data {
    const float *x;
    int n;
    int trials;        /* trial() calls, to see how the probe proceeds */
    int trial_e[64];   /* the exponents tried */
} fake_data;

static void fake_quant(const float *x, int n, int e, int16_t *dst, fx_qstats *st)
{
    fx_qstats_init(st);
    for (int i = 0; i < n; i++) {
        double v = x[i];
        int32_t m;
        if (isnan(v)) {
            st->nonfinite++;
            m = 0;
        } else if (isinf(v)) {
            st->nonfinite++;
            m = v > 0 ? FX_MANT_MAX : -FX_MANT_MAX; /* stored, so it counts in max_abs_out */
        } else {
            if (fabs(v) > st->max_abs_in) st->max_abs_in = fabs(v);
            double q = rint(ldexp(v, -e)); /* default rounding mode: half to even */
            if (q > FX_MANT_MAX) {
                st->saturated++;
                m = FX_MANT_MAX;
            } else if (q < -FX_MANT_MAX) {
                st->saturated++;
                m = -FX_MANT_MAX;
            } else {
                m = (int32_t)q;
            }
            if (m == 0 && v != 0.0) st->underflow++;
        }
        int32_t a = m < 0 ? -m : m;
        if (a > st->max_abs_out) st->max_abs_out = a;
        if (dst) dst[i] = (int16_t)m;
    }
}

static void fake_trial(void *ctx, int e, fx_qstats *st)
{
    fake_data *d = ctx;
    if (d->trials < 64) d->trial_e[d->trials] = e;
    d->trials++;
    fake_quant(d->x, d->n, e, NULL, st);
}

static double finite_max(const float *x, int n)
{
    double m = 0.0;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* A flex tensor reduced to what Autoflex sees: exponent, window, mantissas. */
typedef struct fake_tensor {
    fx_af_state af;
    int e, lo, hi;
    int n;
    int16_t m[MAXN];
} fake_tensor;

typedef struct write_info {
    int e, clamped, overflow, recomputed, trials;
    int trial_e[64];
    fx_qstats st; /* of the kept result */
    double true_max;
} write_info;

static void fake_init(fake_tensor *t, const char *preset, int n, int lo, int hi)
{
    fx_autoflex_config cfg;
    CHECK(fx_af_preset(preset, &cfg) == FX_OK, "preset %s", preset);
    fx_af_reset(&t->af, &cfg);
    t->lo = lo;
    t->hi = hi;
    t->e = fx_clamp_exp(cfg.init_exp, lo, hi, NULL);
    t->n = n;
    memset(t->m, 0, sizeof t->m);
}

static void fake_init_cfg(fake_tensor *t, const fx_autoflex_config *cfg, int n, int lo, int hi)
{
    fx_af_reset(&t->af, cfg);
    t->lo = lo;
    t->hi = hi;
    t->e = fx_clamp_exp(cfg->init_exp, lo, hi, NULL);
    t->n = n;
    memset(t->m, 0, sizeof t->m);
}

/* One managed write, in the order the core's write path uses. */
static void fake_write(fake_tensor *t, const float *x, write_info *wi)
{
    fake_data d = {x, t->n, 0, {0}};
    double tm = finite_max(x, t->n);
    fx_af_writer w = {&d, fake_trial, tm};
    int clamped = -1;
    int e = fx_af_predict(&t->af, t->e, t->lo, t->hi, &w, &clamped);
    fx_qstats st;
    fake_quant(x, t->n, e, t->m, &st);
    int overflow = st.saturated > 0, recomputed = 0, redo = 0;
    if (fx_af_wants_recompute(&t->af, e, &st, tm, t->lo, t->hi, &redo)) {
        e = redo;
        fake_quant(x, t->n, e, t->m, &st);
        recomputed = 1;
    }
    fx_af_observe(&t->af, e, &st, tm, overflow);
    t->e = e;
    wi->e = e;
    wi->clamped = clamped;
    wi->overflow = overflow;
    wi->recomputed = recomputed;
    wi->trials = d.trials;
    memcpy(wi->trial_e, d.trial_e, sizeof d.trial_e);
    wi->st = st;
    wi->true_max = tm;
}

static double deq(const fake_tensor *t, int i) { return ldexp((double)t->m[i], t->e); }

/* ---- the golden data of docs/autoflex.md -------------------------------------------------------- */

#define GOLDEN_T 30
static const float golden_base[4] = {1.0f, -0.5f, 0.25f, 0.1f};

static float golden_scale(int t) { return (t >= 6 && t <= 9) ? 100.0f : 1.0f; }

static void golden_data(int t, float *x)
{
    for (int i = 0; i < 4; i++) x[i] = golden_scale(t) * golden_base[i];
}

static void run_golden(const char *preset, write_info *wi)
{
    fake_tensor t;
    fake_init(&t, preset, 4, -31, 0);
    for (int k = 0; k < GOLDEN_T; k++) {
        float x[4];
        golden_data(k, x);
        fake_write(&t, x, &wi[k]);
    }
}

/* The table of docs/autoflex.md, "Golden trace for the published preset". */
static int golden_published_exp(int t)
{
    if (t <= 6) return -14;
    if (t == 7) return -12;
    if (t == 8) return -10;
    if (t == 9) return -8;
    if (t <= 25) return -7;
    return -14;
}
static int golden_published_sat(int t)
{
    if (t == 6 || t == 7) return 4;
    if (t == 8) return 2;
    return 0;
}

static void test_golden_published(void)
{
    fake_tensor t;
    fake_init(&t, "published", 4, -31, 0);
    CHECK(t.e == -8, "a new tensor starts at -8, got %d", t.e);
    for (int k = 0; k < GOLDEN_T; k++) {
        float x[4];
        write_info wi;
        golden_data(k, x);
        fake_write(&t, x, &wi);
        CHECK(wi.e == golden_published_exp(k), "t=%d: exponent %d, want %d", k, wi.e,
              golden_published_exp(k));
        CHECK(wi.st.saturated == golden_published_sat(k), "t=%d: saturated %lld, want %d", k,
              (long long)wi.st.saturated, golden_published_sat(k));
        CHECK(wi.clamped == 0, "t=%d: nothing leaves [-31, 0]", k);
        CHECK(wi.recomputed == 0, "t=%d: published never recomputes", k);
        if (k == 0) CHECK(wi.trials == 1, "probe from -8 stops after one try, took %d", wi.trials);
        else CHECK(wi.trials == 0, "t=%d: only the first write probes, took %d", k, wi.trials);
        if (k == 8) {
            const double want[4] = {32767.0 / 1024, -32767.0 / 1024, 25.0, 10.0};
            for (int i = 0; i < 4; i++)
                CHECK(deq(&t, i) == want[i], "t=8 [%d]: %.9g, want %.9g", i, deq(&t, i), want[i]);
            CHECK(fabs(deq(&t, 0) - 31.999) < 1e-3, "t=8 reads 31.999");
        }
        if (k == 9) {
            const double want[4] = {100.0, -50.0, 25.0, 10.0};
            for (int i = 0; i < 4; i++)
                CHECK(deq(&t, i) == want[i], "t=9 [%d]: %.9g, want %.9g", i, deq(&t, i), want[i]);
        }
        if (k >= 10 && k <= 25) {
            CHECK(deq(&t, 3) == 0.1015625, "t=%d: last element %.9g, want 0.1015625", k,
                  deq(&t, 3));
            CHECK(deq(&t, 0) == 1.0 && deq(&t, 1) == -0.5 && deq(&t, 2) == 0.25,
                  "t=%d: powers of two are exact", k);
        }
    }
}

/* True-max statistic on the golden data, derived by hand:
 * t=0..5 at -14 (H = six 1s). t=6 at -14 saturates all 4; 100 is pushed and H is kept.
 * t=7: H = {1 x6, 100}: mean 106/7, population std 34.64, M = 100 + 3*34.64 + 100*2^-14 = 203.9,
 *      floor(log2 M) = 7, e = -7 (100 * 2^7 = 12800 fits).
 * While a 100 is among the last 16 entries, M >= 100 + 3*std >= 128 (std >= 23.96 with one 100
 * and fifteen 1s), so e = -7. The last 100 (pushed at t=9) leaves H with the push at t=25.
 * t=26..29: H = sixteen 1s: M = 1 + 100*2^-7 = 1.78, e = -14. */
static int golden_truemax_exp(int t)
{
    if (t <= 6) return -14;
    if (t <= 25) return -7;
    return -14;
}

static void test_golden_truemax(void)
{
    write_info wi[GOLDEN_T];
    run_golden("truemax", wi);
    for (int k = 0; k < GOLDEN_T; k++) {
        CHECK(wi[k].e == golden_truemax_exp(k), "truemax t=%d: exponent %d, want %d", k, wi[k].e,
              golden_truemax_exp(k));
        CHECK(wi[k].st.saturated == (k == 6 ? 4 : 0), "truemax t=%d: saturated %lld", k,
              (long long)wi[k].st.saturated);
    }
    /* the first exponent after the bad write is exactly right for the new data */
    CHECK(wi[7].e == fx_exact_exp_f64(100.0) + 1, "t=7 one step above exact(100) = %d",
          fx_exact_exp_f64(100.0));
}

static void test_golden_exact_init(void)
{
    write_info pub[GOLDEN_T], ex[GOLDEN_T];
    run_golden("published", pub);
    run_golden("exact_init", ex);
    /* exact(1.0) = -14 is where the probe lands too, so the whole trace is the published one */
    CHECK(ex[0].trials == 0, "exact init does not probe");
    for (int k = 0; k < GOLDEN_T; k++)
        CHECK(ex[k].e == pub[k].e && ex[k].st.saturated == pub[k].st.saturated,
              "exact_init t=%d: e %d sat %lld vs published e %d sat %lld", k, ex[k].e,
              (long long)ex[k].st.saturated, pub[k].e, (long long)pub[k].st.saturated);

    /* Where the two differ: max 255/256. The probe at -8 sees g = 1 + 255 = 256, bitlen 9, and
     * moves to -14 (16320 < 2^14 would have allowed -15). Exact: 255/256 * 2^15 = 32640 fits. */
    const float x[2] = {255.0f / 256.0f, 0.5f};
    fake_tensor a, b;
    write_info wa, wb;
    fake_init(&a, "published", 2, -31, 0);
    fake_init(&b, "exact_init", 2, -31, 0);
    fake_write(&a, x, &wa);
    fake_write(&b, x, &wb);
    CHECK(wa.e == -14, "probe lands at -14, got %d", wa.e);
    CHECK(wb.e == -15 && wb.e == fx_exact_exp_f64(255.0 / 256.0), "exact lands at -15, got %d",
          wb.e);
    CHECK(b.m[0] == 32640 && wb.st.saturated == 0, "exact init uses the full 15 bits: %d", b.m[0]);
}

static void test_golden_robust(void)
{
    write_info wi[GOLDEN_T];
    run_golden("robust", wi);
    for (int k = 0; k < GOLDEN_T; k++) {
        CHECK(wi[k].st.saturated == 0, "robust t=%d keeps %lld saturated values", k,
              (long long)wi[k].st.saturated);
        CHECK(wi[k].overflow == (k == 6), "robust t=%d: overflow %d", k, wi[k].overflow);
        CHECK(wi[k].recomputed == (k == 6), "robust t=%d: recomputed %d", k, wi[k].recomputed);
        CHECK(wi[k].trials == 0, "robust never probes");
    }
    CHECK(wi[6].e == fx_exact_exp_f64(100.0) && wi[6].e == -8, "t=6 redone at -8, got %d",
          wi[6].e);
    /* After the redo the history holds the true 100, so the rest follows the truemax trace. */
    for (int k = 7; k < GOLDEN_T; k++)
        CHECK(wi[k].e == golden_truemax_exp(k), "robust t=%d: exponent %d, want %d", k, wi[k].e,
              golden_truemax_exp(k));

    /* Published statistic with recompute: the kept result is exact, so it is pushed without
     * clearing the history, and the trace after t=6 equals the true-max one. */
    fx_autoflex_config cfg;
    fx_af_preset("published", &cfg);
    cfg.overflow_mode = FX_AF_OVERFLOW_RECOMPUTE;
    CHECK(fx_af_config_validate(&cfg) == FX_OK, "published + recompute is valid");
    fake_tensor t;
    fake_init_cfg(&t, &cfg, 4, -31, 0);
    for (int k = 0; k < GOLDEN_T; k++) {
        float x[4];
        write_info w;
        golden_data(k, x);
        fake_write(&t, x, &w);
        int want = k == 6 ? -8 : golden_truemax_exp(k);
        CHECK(w.e == want && w.st.saturated == 0, "published+recompute t=%d: e %d sat %lld", k,
              w.e, (long long)w.st.saturated);
    }
}

static void test_fixed(void)
{
    fake_tensor t;
    fake_init(&t, "fixed", 4, -31, 0);
    for (int k = 0; k < GOLDEN_T + 10; k++) {
        float x[4];
        golden_data(k, x);
        if (k >= GOLDEN_T) /* a spike far beyond -8's range */
            for (int i = 0; i < 4; i++) x[i] *= 1000.0f;
        write_info wi;
        fake_write(&t, x, &wi);
        CHECK(wi.e == -8 && wi.trials == 0 && wi.clamped == 0 && wi.recomputed == 0,
              "fixed t=%d: e %d trials %d", k, wi.e, wi.trials);
        if (k >= GOLDEN_T) CHECK(wi.st.saturated > 0, "fixed t=%d: the spike saturates", k);
    }
    CHECK(t.af.hist_n == 0 && t.af.initialized == 0, "an unmanaged state is never changed");
}

/* ---- scripted sequences -------------------------------------------------------------------- */

static void scaled(float s, float *x)
{
    for (int i = 0; i < 4; i++) x[i] = s * golden_base[i];
}

static void test_slow_growth(void)
{
    /* 5% growth per write over 150 writes (1 -> 1500): the beta*std margin covers the growth,
     * so nothing saturates, the exponent only rises, and at most 3 bits are left unused. */
    const char *presets[] = {"published", "truemax"};
    for (int p = 0; p < 2; p++) {
        fake_tensor t;
        fake_init(&t, presets[p], 4, -31, 0);
        int prev = -1000;
        double s = 1.0;
        for (int k = 0; k < 150; k++, s *= 1.05) {
            float x[4];
            write_info wi;
            scaled((float)s, x);
            fake_write(&t, x, &wi);
            CHECK(wi.st.saturated == 0, "%s growth t=%d saturated", presets[p], k);
            CHECK(wi.e >= prev, "%s growth t=%d: exponent fell %d -> %d", presets[p], k, prev,
                  wi.e);
            CHECK(wi.st.max_abs_out >= (1 << 12), "%s growth t=%d: max mantissa %d", presets[p],
                  k, (int)wi.st.max_abs_out);
            prev = wi.e;
        }
        CHECK(prev == fx_exact_exp_f64(s / 1.05) || prev == fx_exact_exp_f64(s / 1.05) + 1,
              "%s growth ends near the exact exponent: %d", presets[p], prev);
    }
}

static void test_spikes(void)
{
    /* A single 1000x spike at t=20: published saturates only there, then steps up by 2
     * (the pushed 2*32767*2^e plus gamma*2^e is just above 2^(e+16)). */
    fake_tensor t;
    fake_init(&t, "published", 4, -31, 0);
    int e_spike = 0;
    for (int k = 0; k < 40; k++) {
        float x[4];
        write_info wi;
        scaled(k == 20 ? 1000.0f : 1.0f, x);
        fake_write(&t, x, &wi);
        CHECK((wi.st.saturated > 0) == (k == 20), "spike t=%d: saturated %lld", k,
              (long long)wi.st.saturated);
        if (k == 20) e_spike = wi.e;
        if (k == 21) CHECK(wi.e == e_spike + 2, "after the spike e = %d, want %d", wi.e, e_spike + 2);
        /* the guess (about 4) keeps M >= 4 while it is in H: pushed at t=20, gone after t=36 */
        if (k > 21 && k <= 36) CHECK(wi.e >= e_spike + 2, "t=%d: the guess stays in H", k);
        if (k == 37) CHECK(wi.e == e_spike, "t=%d: back once the guess left H: %d", k, wi.e);
    }

    /* A sustained 1000x jump: one saturated write per +2 step until 32767 * 2^e >= 1000
     * ("a 1000x jump costs about 5 saturated writes"). */
    int e0 = -14, want_sat = 0;
    for (int e = e0; ldexp(32767.0, e) < 1000.0; e += 2) want_sat++;
    CHECK(want_sat == 5, "derived %d saturated writes", want_sat);
    const char *presets[] = {"published", "truemax", "robust"};
    for (int p = 0; p < 3; p++) {
        fake_init(&t, presets[p], 4, -31, 0);
        int nsat = 0, prev_e = 0, prev_sat = 0;
        for (int k = 0; k < 60; k++) {
            float x[4];
            write_info wi;
            scaled(k >= 20 ? 1000.0f : 1.0f, x);
            fake_write(&t, x, &wi);
            if (k == 19) CHECK(wi.e == e0, "%s: steady at %d before the jump", presets[p], wi.e);
            if (p == 0 && prev_sat) CHECK(wi.e == prev_e + 2, "published t=%d: +2 after overflow", k);
            if (k > 25) CHECK(wi.st.saturated == 0, "%s t=%d: fits again", presets[p], k);
            nsat += wi.st.saturated > 0;
            prev_sat = wi.st.saturated > 0;
            prev_e = wi.e;
        }
        int want = p == 0 ? want_sat : (p == 1 ? 1 : 0);
        CHECK(nsat == want, "%s: %d saturated writes, want %d", presets[p], nsat, want);
    }
}

static void test_slow_decay(void)
{
    /* A step down from 100 to 1 at t=20: the exponent stays up while a 100 is in the 16-entry
     * window (t=20..35) and drops at t=36. */
    fake_tensor t;
    fake_init(&t, "published", 4, -31, 0);
    int e19 = 0, e35 = 0;
    for (int k = 0; k < 45; k++) {
        float x[4];
        write_info wi;
        scaled(k < 20 ? 100.0f : 1.0f, x);
        fake_write(&t, x, &wi);
        if (k == 19) e19 = wi.e;
        if (k >= 20 && k <= 35) CHECK(wi.e >= e19, "decay t=%d: e %d dropped below %d early", k,
                                      wi.e, e19);
        if (k == 35) e35 = wi.e;
        if (k == 36) {
            int want = fx_clamp_exp(fx_exact_exp_f64(1.0 + 100.0 * ldexp(1.0, e35)), -31, 0, NULL);
            CHECK(wi.e == want && want < e19, "decay t=36: e %d, want %d", wi.e, want);
        }
    }
    CHECK(e19 == -8, "100 lives at -8, got %d", e19);

    /* Geometric decay 0.9 per write: the exponent never falls below the exact exponent of the
     * largest maximum still in the window, and ends lower than it started. */
    fake_init(&t, "published", 4, -31, 0);
    double maxima[200];
    int first = 0, last = 0;
    double s = 1000.0;
    for (int k = 0; k < 120; k++, s *= 0.9) {
        float x[4];
        write_info wi;
        scaled((float)s, x);
        maxima[k] = finite_max(x, 4);
        fake_write(&t, x, &wi);
        CHECK(wi.st.saturated == 0, "decay t=%d saturated", k);
        if (k >= 1) {
            double mx = 0;
            for (int j = k - 16 < 0 ? 0 : k - 16; j < k; j++) mx = maxima[j] > mx ? maxima[j] : mx;
            int floor_e = fx_clamp_exp(fx_exact_exp_f64(mx), -31, 0, NULL);
            CHECK(wi.e >= floor_e, "decay t=%d: e %d below the window max's %d", k, wi.e, floor_e);
        }
        if (k == 0) first = wi.e;
        last = wi.e;
    }
    CHECK(last < first, "decay: the exponent shrinks (%d -> %d)", first, last);
}

static void test_all_zeros(void)
{
    const float z[4] = {0, 0, 0, 0};
    fake_tensor t;
    write_info wi;
    /* probe: g = 1 moves e down 14 per try into the window edge; the tries run out -> e = 0 */
    fake_init(&t, "published", 4, -31, 0);
    fake_write(&t, z, &wi);
    CHECK(wi.trials == 10 && wi.e == 0, "zeros: %d tries, e %d", wi.trials, wi.e);
    CHECK(wi.trial_e[0] == -8 && wi.trial_e[1] == -22 && wi.trial_e[2] == -31 &&
              wi.trial_e[9] == -31,
          "zeros tried %d %d %d .. %d", wi.trial_e[0], wi.trial_e[1], wi.trial_e[2],
          wi.trial_e[9]);
    CHECK(wi.clamped == 1, "the probe steps hit the window edge");
    /* Later writes: M = gamma * 2^e, so e moves by exact(gamma) per write until the edge. */
    int step = fx_exact_exp_f64(100.0);
    for (int k = 1; k < 8; k++) {
        int prev = t.e, c = 0;
        int want = fx_clamp_exp(prev + step, -31, 0, &c);
        fake_write(&t, z, &wi);
        CHECK(wi.e == want && wi.clamped == c, "zeros t=%d: e %d clamped %d, want %d %d", k, wi.e,
              wi.clamped, want, c);
        CHECK(wi.e >= -31 && wi.e <= 0, "zeros stay in the window");
    }
    /* a window that excludes 0: the fallback 0 is clamped into it */
    fake_init(&t, "published", 4, -60, -29);
    fake_write(&t, z, &wi);
    CHECK(wi.e == -29 && wi.clamped == 1, "zeros in [-60, -29]: e %d", wi.e);
    /* exact init keeps the exponent */
    fake_init(&t, "exact_init", 4, -31, 0);
    fake_write(&t, z, &wi);
    CHECK(wi.e == -8 && wi.trials == 0 && wi.clamped == 0, "zeros exact init: e %d", wi.e);
    /* probe_tries = 1 with tiny data: not enough significant bits, so the fallback is taken */
    fx_autoflex_config cfg;
    fx_af_preset("published", &cfg);
    cfg.probe_tries = 1;
    fake_init_cfg(&t, &cfg, 4, -31, 0);
    const float tiny[4] = {1e-3f, 0, 0, 0};
    fake_write(&t, tiny, &wi);
    CHECK(wi.trials == 1 && wi.e == 0, "one try, g = 1: fallback 0, got %d", wi.e);
}

static void test_nan_data(void)
{
    /* NaN inputs store 0 and do not count in the maxima: the exponents equal those of the same
     * data with 0 in place of NaN. */
    const char *presets[] = {"published", "truemax", "robust"};
    for (int p = 0; p < 3; p++) {
        fake_tensor a, b;
        fake_init(&a, presets[p], 4, -31, 0);
        fake_init(&b, presets[p], 4, -31, 0);
        for (int k = 0; k < GOLDEN_T; k++) {
            float x[4], y[4];
            golden_data(k, x);
            golden_data(k, y);
            x[1] = NAN;
            y[1] = 0.0f;
            if (k % 3 == 0) {
                x[3] = NAN;
                y[3] = 0.0f;
            }
            write_info wa, wb;
            fake_write(&a, x, &wa);
            fake_write(&b, y, &wb);
            CHECK(wa.e == wb.e, "%s t=%d: NaN data e %d vs %d", presets[p], k, wa.e, wb.e);
            CHECK(wa.st.nonfinite == (k % 3 == 0 ? 2 : 1), "%s t=%d: nonfinite counted",
                  presets[p], k);
            CHECK(a.m[1] == 0, "NaN stores 0");
            CHECK(wa.true_max == golden_scale(k), "true max of the finite values");
        }
    }
    /* the golden exponents survive a NaN in the second element */
    fake_tensor t;
    fake_init(&t, "published", 4, -31, 0);
    for (int k = 0; k < GOLDEN_T; k++) {
        float x[4];
        write_info wi;
        golden_data(k, x);
        x[1] = NAN;
        fake_write(&t, x, &wi);
        CHECK(wi.e == golden_published_exp(k), "NaN golden t=%d: e %d", k, wi.e);
    }
}

static void test_window_edges(void)
{
    const char *presets[] = {"published", "truemax", "exact_init", "robust"};
    for (int p = 0; p < 4; p++) {
        /* far above the window: every wanted exponent is clamped to 0 */
        fake_tensor t;
        fake_init(&t, presets[p], 4, -31, 0);
        for (int k = 0; k < 12; k++) {
            float x[4];
            write_info wi;
            scaled(1e12f, x);
            fake_write(&t, x, &wi);
            CHECK(wi.e >= -31 && wi.e <= 0, "%s huge t=%d: e %d outside", presets[p], k, wi.e);
            if (k >= 1) CHECK(wi.e == 0 && wi.clamped == 1, "%s huge t=%d: e %d clamped %d",
                              presets[p], k, wi.e, wi.clamped);
            CHECK(wi.st.saturated > 0, "%s huge t=%d saturates at the top", presets[p], k);
            CHECK(wi.recomputed == 0, "recompute at the top edge would change nothing");
        }
        /* far below: clamped to -31 (after the published probe's fallback has settled) */
        fake_init(&t, presets[p], 4, -31, 0);
        int low_reached = 0;
        for (int k = 0; k < 12; k++) {
            float x[4];
            write_info wi;
            scaled(1e-12f, x);
            fake_write(&t, x, &wi);
            CHECK(wi.e >= -31 && wi.e <= 0, "%s tiny t=%d: e %d outside", presets[p], k, wi.e);
            if (wi.e == -31) {
                low_reached = 1;
                CHECK(wi.clamped == 1, "%s tiny t=%d: clamped at -31", presets[p], k);
                CHECK(wi.st.underflow == 4, "%s tiny t=%d: all 4 underflow", presets[p], k);
            }
        }
        CHECK(low_reached && t.e == -31, "%s tiny: ends at -31, got %d", presets[p], t.e);
    }
    /* Inside the window nothing is flagged, and the flag is reset by every predict. */
    fake_tensor t;
    fake_init(&t, "truemax", 4, -31, 0);
    write_info wi;
    float x[4];
    scaled(1e12f, x);
    fake_write(&t, x, &wi);
    CHECK(wi.clamped == 1, "huge first write clamped");
    scaled(1.0f, x);
    for (int k = 0; k < 20; k++) fake_write(&t, x, &wi);
    CHECK(wi.clamped == 0 && wi.e == -14, "back inside: clamped %d e %d", wi.clamped, wi.e);
    /* a shifted window: 1e6 needs e = 5 (2^19 <= 1e6 < 2^20) */
    fake_init(&t, "exact_init", 4, -20, 11);
    scaled(1e6f, x);
    fake_write(&t, x, &wi);
    CHECK(wi.e == 5 && wi.clamped == 0 && wi.st.saturated == 0, "window [-20, 11]: e %d", wi.e);
}

/* ---- history, recompute and predict details ------------------------------------------------ */

static fx_qstats stats_of(int32_t max_abs_out, int64_t saturated)
{
    fx_qstats st;
    fx_qstats_init(&st);
    st.max_abs_out = max_abs_out;
    st.saturated = saturated;
    return st;
}

static void test_history_ring(void)
{
    /* beta = gamma = 0, alpha = 1: the prediction is exact(max(H)), which shows what H holds */
    fx_autoflex_config cfg;
    fx_af_preset("published", &cfg);
    cfg.beta = 0.0;
    cfg.gamma = 0.0;
    for (int L = 1; L <= 3; L++) {
        cfg.history_len = L;
        fx_af_state s;
        fx_af_reset(&s, &cfg);
        s.initialized = 1; /* skip the first-write initialisation */
        /* the same mantissa at e = 0 and e = -14: maxima 16000 and 16000 / 16384 */
        fx_qstats m16000 = stats_of(16000, 0);
        fx_af_observe(&s, 0, &m16000, 16000.0, 0);
        for (int k = 0; k < 3; k++) fx_af_observe(&s, -14, &m16000, 16000.0 / 16384, 0);
        CHECK(s.hist_n == L, "L=%d: %d entries", L, s.hist_n);
        int c;
        int e = fx_af_predict(&s, -14, -128, 127, NULL, &c);
        /* the 16000 left after 3 more pushes when L <= 3 */
        CHECK(e == fx_exact_exp_f64(16000.0 / 16384), "L=%d: predicted %d", L, e);
    }
    cfg.history_len = 4;
    fx_af_state s;
    fx_af_reset(&s, &cfg);
    s.initialized = 1;
    fx_qstats m16000 = stats_of(16000, 0);
    fx_af_observe(&s, 0, &m16000, 16000.0, 0);
    for (int k = 0; k < 3; k++) fx_af_observe(&s, -14, &m16000, 16000.0 / 16384, 0);
    CHECK(fx_af_predict(&s, -14, -128, 127, NULL, NULL) == fx_exact_exp_f64(16000.0),
          "L=4 still remembers 16000");

    /* published: a saturated write clears H and pushes 2 * 32767 * 2^e */
    fx_af_preset("published", &cfg);
    fx_af_reset(&s, &cfg);
    s.initialized = 1;
    for (int k = 0; k < 5; k++) fx_af_observe(&s, -14, &m16000, 1.0, 0);
    fx_qstats sat = stats_of(32767, 3);
    fx_af_observe(&s, -14, &sat, 50.0, 1);
    CHECK(s.hist_n == 1 && s.hist[0] == ldexp(2.0 * 32767, -14), "overflow clears H: n=%d %g",
          s.hist_n, s.hist[0]);
    /* truemax: the true maximum is pushed and H is kept */
    fx_af_preset("truemax", &cfg);
    fx_af_reset(&s, &cfg);
    s.initialized = 1;
    for (int k = 0; k < 5; k++) fx_af_observe(&s, -14, &m16000, 1.0, 0);
    fx_af_observe(&s, -14, &sat, 50.0, 1);
    CHECK(s.hist_n == 6 && s.hist[5] == 50.0, "truemax keeps H: n=%d last %g", s.hist_n,
          s.hist[5]);
    /* predict by hand: M = 50 + 3 * std + 100 * 2^-14 */
    double mean = (5.0 + 50.0) / 6, var = 0;
    for (int k = 0; k < 6; k++) var += (s.hist[k] - mean) * (s.hist[k] - mean);
    double M = 50.0 + 3.0 * sqrt(var / 6) + 100.0 * ldexp(1.0, -14);
    CHECK(fx_af_predict(&s, -14, -31, 0, NULL, NULL) == fx_exact_exp_f64(M), "predict = exact(M)");
    /* alpha scales M */
    cfg.alpha = 4.0;
    s.cfg.alpha = 4.0;
    CHECK(fx_af_predict(&s, -14, -31, 0, NULL, NULL) == fx_exact_exp_f64(M) + 2, "alpha = 4: +2");
    /* population std, not the sample std: H = {0, 0.62}, beta = 1, gamma = 0 gives
     * M = 0.62 + 0.31 = 0.93 (e = -15); the sample std would give 1.058 (e = -14) */
    fx_af_preset("truemax", &cfg);
    cfg.beta = 1.0;
    cfg.gamma = 0.0;
    fx_af_reset(&s, &cfg);
    s.initialized = 1;
    fx_af_observe(&s, -14, &m16000, 0.0, 0);
    fx_af_observe(&s, -14, &m16000, 0.62, 0);
    CHECK(fx_af_predict(&s, -14, -31, 0, NULL, NULL) == fx_exact_exp_f64(0.93) &&
              fx_exact_exp_f64(0.93) == -15,
          "population std");
    /* reset clears everything */
    fx_af_reset(&s, &cfg);
    CHECK(s.hist_n == 0 && s.initialized == 0 && s.cfg.beta == 1.0 && s.cfg.gamma == 0.0,
          "reset clears the history and takes the configuration");
}

static void test_recompute_rule(void)
{
    fx_autoflex_config cfg;
    fx_af_state s;
    fx_qstats sat = stats_of(32767, 2), fine = stats_of(20000, 0);
    int redo = 12345;
    fx_af_preset("published", &cfg);
    fx_af_reset(&s, &cfg);
    CHECK(!fx_af_wants_recompute(&s, -14, &sat, 100.0, -31, 0, &redo), "KEEP never recomputes");
    fx_af_preset("robust", &cfg);
    fx_af_reset(&s, &cfg);
    CHECK(!fx_af_wants_recompute(&s, -14, &fine, 1.0, -31, 0, &redo), "no saturation, no redo");
    CHECK(fx_af_wants_recompute(&s, -14, &sat, 100.0, -31, 0, &redo) && redo == -8,
          "saturated at -14 with max 100: redo at -8, got %d", redo);
    CHECK(!fx_af_wants_recompute(&s, 0, &sat, 1e12, -31, 0, &redo), "at the top: no redo");
    CHECK(fx_af_wants_recompute(&s, -10, &sat, 1e12, -31, 0, &redo) && redo == 0,
          "redo clamped to the top: %d", redo);
    fx_af_preset("fixed", &cfg);
    cfg.overflow_mode = FX_AF_OVERFLOW_RECOMPUTE;
    fx_af_reset(&s, &cfg);
    CHECK(!fx_af_wants_recompute(&s, -14, &sat, 100.0, -31, 0, &redo),
          "an unmanaged exponent is never changed");
}

static void test_probe_steps(void)
{
    fake_tensor t;
    write_info wi;
    float x[4];
    /* 1000 from -8: saturates (+7 -> -1), then g = 2001 moves to -5 and stops */
    fake_init(&t, "published", 4, -31, 0);
    scaled(1000.0f, x);
    fake_write(&t, x, &wi);
    CHECK(wi.trials == 2 && wi.e == -5 && wi.e == fx_exact_exp_f64(1000.0),
          "probe 1000: %d tries, e %d", wi.trials, wi.e);
    CHECK(wi.trial_e[0] == -8 && wi.trial_e[1] == -1, "tried %d, %d", wi.trial_e[0],
          wi.trial_e[1]);
    /* 1e5 in the window [-20, 11]: saturates twice (-8, -1), then m = 1562 at 6 -> 2 */
    fake_init(&t, "published", 4, -20, 11);
    scaled(1e5f, x);
    fake_write(&t, x, &wi);
    CHECK(wi.trials == 3 && wi.trial_e[0] == -8 && wi.trial_e[1] == -1 && wi.trial_e[2] == 6 &&
              wi.e == 2 && wi.e == fx_exact_exp_f64(1e5),
          "probe 1e5: %d tries (%d %d %d), e %d", wi.trials, wi.trial_e[0], wi.trial_e[1],
          wi.trial_e[2], wi.e);
    /* saturating against the top of the window: +7 is clamped, the tries run out, e = 0 */
    fake_init(&t, "published", 4, -31, 0);
    scaled(1e9f, x);
    fake_write(&t, x, &wi);
    CHECK(wi.trials == 10 && wi.trial_e[1] == -1 && wi.trial_e[2] == 0 && wi.trial_e[9] == 0 &&
              wi.e == 0 && wi.clamped == 1,
          "probe 1e9: %d tries, e %d", wi.trials, wi.e);
    /* 0.01 from -8: g = 4 (too few bits: go on) -> -20, g = 10487 -> -21, stop */
    fake_init(&t, "published", 4, -31, 0);
    scaled(0.01f, x);
    fake_write(&t, x, &wi);
    CHECK(wi.trials == 2 && wi.e == -21, "probe 0.01: %d tries, e %d", wi.trials, wi.e);
    /* already in [2^14, 2^15): stop at once without moving */
    fx_autoflex_config cfg;
    fx_af_preset("published", &cfg);
    cfg.init_exp = -14;
    fake_init_cfg(&t, &cfg, 4, -31, 0);
    scaled(1.0f, x);
    fake_write(&t, x, &wi);
    CHECK(wi.trials == 1 && wi.e == -14, "probe at the right exponent: %d tries e %d", wi.trials,
          wi.e);
    /* 0.0601... from -8: m = 15, g = 16 has fewer than 5 significant bits, so the jump to -18
     * is not trusted; the second try (g = 15771, bitlen 14) refines it to -19 */
    fake_init(&t, "published", 4, -31, 0);
    scaled(15.4f / 256.0f, x);
    fake_write(&t, x, &wi);
    CHECK(wi.trials == 2 && wi.e == -19 && wi.e == fx_exact_exp_f64(15.4 / 256.0),
          "probe 15.4/256: %d tries, e %d", wi.trials, wi.e);
    /* reset re-initialises from the current exponent */
    fx_af_reset(&t.af, &cfg);
    t.e = -20;
    scaled(1.0f, x);
    fake_write(&t, x, &wi);
    CHECK(wi.trials == 2 && wi.e == -14, "probe after reset from -20: %d tries e %d", wi.trials,
          wi.e);
}

/* ---- configuration ------------------------------------------------------------------------- */

static void expect_invalid(const fx_autoflex_config *cfg, const char *field)
{
    flexpoint_clear_error();
    CHECK_STATUS(fx_af_config_validate(cfg), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), field) != NULL, "message names %s: '%s'", field,
          flexpoint_last_error());
}

static void test_config_validation(void)
{
    const char *names[] = {"published", "fixed", "truemax", "exact_init", "robust"};
    fx_autoflex_config cfg, pub;
    for (int i = 0; i < 5; i++) {
        CHECK_STATUS(fx_af_preset(names[i], &cfg), FX_OK);
        CHECK_STATUS(fx_af_config_validate(&cfg), FX_OK);
        CHECK_STATUS(fx_autoflex_preset(names[i], &cfg), FX_OK);
    }
    CHECK_STATUS(fx_af_preset("published", &pub), FX_OK);
    CHECK(pub.managed == 1 && pub.history_len == 16 && pub.beta == 3.0 && pub.gamma == 100.0 &&
              pub.alpha == 1.0 && pub.init_mode == FX_AF_INIT_PROBE &&
              pub.stat_mode == FX_AF_STAT_SATURATED_MAX &&
              pub.overflow_mode == FX_AF_OVERFLOW_KEEP && pub.init_exp == -8 &&
              pub.probe_tries == 10,
          "published constants");
    fx_af_preset("robust", &cfg);
    CHECK(cfg.stat_mode == FX_AF_STAT_TRUE_MAX && cfg.init_mode == FX_AF_INIT_EXACT &&
              cfg.overflow_mode == FX_AF_OVERFLOW_RECOMPUTE && cfg.history_len == 16,
          "robust fields");
    CHECK_STATUS(fx_af_preset("nope", &cfg), FX_ENAME);
    CHECK_STATUS(fx_autoflex_preset("nope", &cfg), FX_ENAME);
    CHECK(strstr(flexpoint_last_error(), "nope") != NULL, "message names the preset");
    CHECK_STATUS(fx_autoflex_preset(NULL, &cfg), FX_EINVAL);
    CHECK_STATUS(fx_autoflex_preset("published", NULL), FX_EINVAL);
    CHECK_STATUS(fx_af_config_validate(NULL), FX_EINVAL);

#define BAD(field, stmt)                                                                       \
    do {                                                                                       \
        cfg = pub;                                                                             \
        stmt;                                                                                  \
        expect_invalid(&cfg, field);                                                           \
    } while (0)
    BAD("managed", cfg.managed = 2);
    BAD("history_len", cfg.history_len = 0);
    BAD("history_len", cfg.history_len = FX_AF_MAX_HISTORY + 1);
    BAD("beta", cfg.beta = -1.0);
    BAD("beta", cfg.beta = NAN);
    BAD("beta", cfg.beta = INFINITY);
    BAD("gamma", cfg.gamma = -0.5);
    BAD("gamma", cfg.gamma = NAN);
    BAD("alpha", cfg.alpha = 0.0);
    BAD("alpha", cfg.alpha = -2.0);
    BAD("alpha", cfg.alpha = INFINITY);
    BAD("alpha", cfg.alpha = NAN);
    BAD("init_mode", cfg.init_mode = 2);
    BAD("stat_mode", cfg.stat_mode = -1);
    BAD("overflow_mode", cfg.overflow_mode = 7);
    BAD("probe_tries", cfg.probe_tries = 0);
    BAD("probe_tries", cfg.probe_tries = 65);
    BAD("init_exp", cfg.init_exp = -129);
    BAD("init_exp", cfg.init_exp = 128);
#undef BAD
    /* the edges are valid */
    cfg = pub;
    cfg.history_len = FX_AF_MAX_HISTORY;
    cfg.beta = 0.0;
    cfg.gamma = 0.0;
    cfg.probe_tries = 64;
    cfg.init_exp = -128;
    CHECK_STATUS(fx_af_config_validate(&cfg), FX_OK);
    cfg.history_len = 1;
    cfg.probe_tries = 1;
    cfg.init_exp = 127;
    CHECK_STATUS(fx_af_config_validate(&cfg), FX_OK);
}

static void test_default_config(void)
{
    fx_autoflex_config cfg;
    unsetenv("FLEXPOINT_AUTOFLEX");
    fx_af_default_config(&cfg);
    CHECK(cfg.managed == 1 && cfg.stat_mode == FX_AF_STAT_TRUE_MAX &&
              cfg.init_mode == FX_AF_INIT_EXACT && cfg.overflow_mode == FX_AF_OVERFLOW_RECOMPUTE,
          "default is robust");
    setenv("FLEXPOINT_AUTOFLEX", "published", 1);
    fx_af_default_config(&cfg);
    CHECK(cfg.overflow_mode == FX_AF_OVERFLOW_KEEP && cfg.init_mode == FX_AF_INIT_PROBE,
          "FLEXPOINT_AUTOFLEX=published");
    setenv("FLEXPOINT_AUTOFLEX", "fixed", 1);
    fx_af_default_config(&cfg);
    CHECK(cfg.managed == 0, "FLEXPOINT_AUTOFLEX=fixed");
    setenv("FLEXPOINT_AUTOFLEX", "no_such_preset", 1);
    fx_af_default_config(&cfg);
    CHECK(cfg.managed == 1 && cfg.overflow_mode == FX_AF_OVERFLOW_RECOMPUTE &&
              cfg.stat_mode == FX_AF_STAT_TRUE_MAX,
          "an unknown name is ignored (the default, robust, is used)");
    unsetenv("FLEXPOINT_AUTOFLEX");
}

int main(void)
{
    test_golden_published();
    test_golden_truemax();
    test_golden_exact_init();
    test_golden_robust();
    test_fixed();
    test_slow_growth();
    test_spikes();
    test_slow_decay();
    test_all_zeros();
    test_nan_data();
    test_window_edges();
    test_history_ring();
    test_recompute_rule();
    test_probe_steps();
    test_config_validation();
    test_default_config();
    return test_finish("test_autoflex_unit");
}
