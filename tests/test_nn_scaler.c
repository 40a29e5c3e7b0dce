/* Dynamic loss scaler: the schedule step by step against scripts of Inf and clean steps, the
 * fused unscale-and-check on every format and backend, state save/restore, bad input.
 *
 * Reference behaviour: torch.cuda.amp.GradScaler (its _amp_update_scale_ kernel): on Inf/NaN
 * the fp32 scale is multiplied by backoff_factor, the growth tracker resets and the step is
 * skipped; on a clean step the tracker is incremented and, when it reaches growth_interval,
 * the scale grows by growth_factor (kept if fp32(scale * growth) is Inf) and the tracker
 * resets. The hand-written script below is worked out from these rules by hand; the long
 * scripts use ref_update, an independent model of the same rules in fp32 arithmetic. */
#include "flexpoint_nn.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- reference model ------------------------------------------------------------------------ */

typedef struct {
    float scale;
    long tracker;
    long skipped;
} ref_scaler;

static int ref_update(ref_scaler *r, int inf, double growth, double backoff, long interval)
{
    if (inf) {
        r->scale = (float)((double)r->scale * backoff);
        r->tracker = 0;
        r->skipped++;
        return 0;
    }
    if (r->tracker + 1 == interval) {
        float grown = (float)((double)r->scale * growth);
        if (isfinite(grown)) r->scale = grown;
        r->tracker = 0;
    } else {
        r->tracker++;
    }
    return 1;
}

/* --- gradients with and without non-finite values, in every format -------------------------- */

/* A [rows, cols] gradient of format f written from fp32 values; `poison` (if not 0) replaces
 * element `at`: NAN or INFINITY, or a large finite value for fp16 (overflows to Inf). */
static tensor_t *make_grad(fmt_t f, int64_t rows, int64_t cols, test_rng *rng, float poison,
                           int64_t at)
{
    int64_t shape[2] = {rows, cols};
    tensor_t *t = tensor_new(f, 2, shape);
    int64_t n = rows * cols;
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(1000.0 * test_rng_normal(rng));
    if (poison != 0.0f) v[at] = poison;
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    free(v);
    return t;
}

/* Unscale one gradient with scaler s; returns found_inf and checks out == read(g) * inv. */
static int unscale_one(const fx_loss_scaler *s, const tensor_t *g, const char *what)
{
    int64_t n = tensor_numel(g);
    float *out = malloc((size_t)n * sizeof *out), *raw = malloc((size_t)n * sizeof *raw);
    int found = -1;
    const tensor_t *gs[1] = {g};
    float *outs[1] = {out};
    CHECK_STATUS(fx_loss_scaler_unscale(s, gs, 1, outs, &found), FX_OK);
    CHECK_STATUS(tensor_to_f32(g, raw), FX_OK);
    float inv = s->enabled ? (float)(1.0 / s->scale) : 1.0f;
    int64_t bad = 0, any_nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        float want = raw[i] * inv;
        if (!(memcmp(&want, &out[i], sizeof want) == 0 || (isnan(want) && isnan(out[i])))) bad++;
        any_nonfinite += !isfinite(out[i]);
    }
    CHECK(bad == 0, "%s: %lld unscaled values differ from grad * fp32(1/scale)", what,
          (long long)bad);
    /* a non-finite output always means found_inf (the converse can come from the count) */
    if (any_nonfinite) CHECK(found == 1, "%s: non-finite output but found_inf=%d", what, found);
    free(out);
    free(raw);
    return found;
}

/* --- tests ------------------------------------------------------------------------------------ */

static void test_defaults(void)
{
    fx_loss_scaler s;
    fx_loss_scaler_init(&s, 1);
    CHECK(s.scale == 65536.0 && s.growth_factor == 2.0 && s.backoff_factor == 0.5 &&
              s.growth_interval == 2000 && s.good_steps == 0 && s.skipped_steps == 0 &&
              s.enabled == 1,
          "defaults: scale %g growth %g backoff %g interval %lld", s.scale, s.growth_factor,
          s.backoff_factor, (long long)s.growth_interval);
    fx_loss_scaler_init(&s, 0);
    CHECK(s.scale == 1.0 && s.enabled == 0, "disabled: scale %g enabled %d", s.scale, s.enabled);
    fx_loss_scaler_init(NULL, 1); /* must not crash */
}

/* The hand-worked script: growth_interval 3. Events come from real gradients: 'I' steps use a
 * gradient whose non-finite value is of a different kind and format each time. */
typedef struct {
    char ev;           /* 'C' clean, 'I' Inf/NaN */
    fmt_t fmt;         /* gradient format of this step */
    float poison;      /* what makes it non-finite */
    int apply;         /* expected decision */
    double scale;      /* expected scale after the update */
    long good;         /* expected good_steps after */
} script_step;

static const script_step SCRIPT[] = {
    {'C', FMT_FP32, 0, 1, 65536, 1},
    {'C', FMT_FP16, 0, 1, 65536, 2},
    {'C', FMT_BF16, 0, 1, 131072, 0},              /* 3 clean: x2 */
    {'I', FMT_FLEX16_5, NAN, 0, 65536, 0},          /* NaN in flex: only the count shows it */
    {'C', FMT_DFP16, 0, 1, 65536, 1},
    {'I', FMT_FP32, INFINITY, 0, 32768, 0},
    {'I', FMT_FP16, 1.0e6f, 0, 16384, 0},           /* fp16 overflow -> Inf */
    {'C', FMT_FLEX16_5, 0, 1, 16384, 1},
    {'C', FMT_FP32, 0, 1, 16384, 2},
    {'C', FMT_FP16, 0, 1, 32768, 0},
    {'C', FMT_BF16, 0, 1, 32768, 1},
    {'C', FMT_DFP16, 0, 1, 32768, 2},
    {'C', FMT_FP32, 0, 1, 65536, 0},
    {'I', FMT_DFP16, -INFINITY, 0, 32768, 0},       /* -Inf in dfp: saturates, counted */
    {'I', FMT_BF16, NAN, 0, 16384, 0},
    {'C', FMT_FLEX16_5, 0, 1, 16384, 1},
};
#define SCRIPT_LEN ((int)(sizeof SCRIPT / sizeof SCRIPT[0]))

static void run_script_from(fx_loss_scaler *s, int first, test_rng *rng, double *scales,
                            int *applies, const char *tag)
{
    for (int k = first; k < SCRIPT_LEN; k++) {
        const script_step *st = &SCRIPT[k];
        tensor_t *g = make_grad(st->fmt, 7, 9, rng, st->poison, 5 + k);
        char what[96];
        snprintf(what, sizeof what, "%s step %d (%s, %c)", tag, k + 1, fmt_name(st->fmt), st->ev);
        int found = unscale_one(s, g, what);
        CHECK(found == (st->ev == 'I'), "%s: found_inf=%d", what, found);
        int apply = fx_loss_scaler_update(s, found);
        CHECK(apply == st->apply, "%s: apply=%d, want %d", what, apply, st->apply);
        CHECK(s->scale == st->scale, "%s: scale=%g, want %g", what, s->scale, st->scale);
        CHECK(s->good_steps == st->good, "%s: good_steps=%lld, want %ld", what,
              (long long)s->good_steps, st->good);
        scales[k] = s->scale;
        applies[k] = apply;
        tensor_free(g);
    }
}

static void test_script(void)
{
    fx_loss_scaler s;
    fx_loss_scaler_init(&s, 1);
    s.growth_interval = 3;
    test_rng rng;
    test_rng_seed(&rng, 11);
    double scales[SCRIPT_LEN], scales2[SCRIPT_LEN];
    int applies[SCRIPT_LEN], applies2[SCRIPT_LEN];
    run_script_from(&s, 0, &rng, scales, applies, "script");
    long skipped = 0;
    for (int k = 0; k < SCRIPT_LEN; k++) skipped += SCRIPT[k].ev == 'I';
    CHECK(s.skipped_steps == skipped, "skipped_steps=%lld, want %ld", (long long)s.skipped_steps,
          skipped);

    /* save after step 7, run to the end, restore and replay: identical decisions and state */
    const int cut = 7;
    fx_loss_scaler a;
    fx_loss_scaler_init(&a, 1);
    a.growth_interval = 3;
    test_rng_seed(&rng, 11);
    double tmp_s[SCRIPT_LEN];
    int tmp_a[SCRIPT_LEN];
    /* run the first `cut` steps only */
    for (int k = 0; k < cut; k++) {
        tensor_t *g = make_grad(SCRIPT[k].fmt, 7, 9, &rng, SCRIPT[k].poison, 5 + k);
        int found = unscale_one(&a, g, "prefix");
        tmp_a[k] = fx_loss_scaler_update(&a, found);
        tmp_s[k] = a.scale;
        tensor_free(g);
    }
    fx_loss_scaler saved = a; /* saving is a struct copy */
    test_rng rng_saved = rng;
    run_script_from(&a, cut, &rng, scales2, applies2, "continued");
    fx_loss_scaler end1 = a;
    a = saved;
    fx_loss_scaler_update(&a, 1); /* disturb, then restore again */
    a = saved;
    rng = rng_saved;
    run_script_from(&a, cut, &rng, scales2, applies2, "restored");
    CHECK(a.scale == end1.scale && a.good_steps == end1.good_steps &&
              a.skipped_steps == end1.skipped_steps && a.enabled == end1.enabled,
          "restored run ends in scale %g good %lld skipped %lld, first run %g %lld %lld",
          a.scale, (long long)a.good_steps, (long long)a.skipped_steps, end1.scale,
          (long long)end1.good_steps, (long long)end1.skipped_steps);
    for (int k = 0; k < cut; k++)
        CHECK(tmp_s[k] == scales[k] && tmp_a[k] == applies[k], "prefix step %d differs", k + 1);
    CHECK(end1.scale == s.scale && end1.skipped_steps == s.skipped_steps,
          "split run ends at scale %g, whole run at %g", end1.scale, s.scale);
}

/* Long scripts with the default growth interval 2000 (and a short one), against ref_update. */
static void test_long_scripts(void)
{
    const long intervals[2] = {2000, 37};
    for (int c = 0; c < 2; c++) {
        fx_loss_scaler s;
        fx_loss_scaler_init(&s, 1);
        s.growth_interval = intervals[c];
        ref_scaler r = {65536.0f, 0, 0};
        test_rng rng;
        test_rng_seed(&rng, 100 + (uint64_t)c);
        long grows = 0, mismatches = 0;
        const long steps = 30000;
        /* Inf probability per step: about one per 1.5 intervals, with a burst (5 percent
         * for 100 steps) every 5000 steps, so that both growth and repeated backoff happen */
        for (long k = 0; k < steps; k++) {
            double p = k % 5000 < 100 ? 0.05 : 1.0 / (1.5 * (double)intervals[c]);
            int inf = test_rng_uniform(&rng) < p;
            double before = s.scale;
            int want = ref_update(&r, inf, 2.0, 0.5, intervals[c]);
            int got = fx_loss_scaler_update(&s, inf);
            if (got != want || s.scale != (double)r.scale || s.good_steps != r.tracker ||
                s.skipped_steps != r.skipped) {
                if (++mismatches <= 5)
                    CHECK(0, "interval %ld step %ld: got (%d, %g, %lld), reference (%d, %g, %ld)",
                          intervals[c], k, got, s.scale, (long long)s.good_steps, want,
                          (double)r.scale, r.tracker);
            }
            grows += s.scale > before;
        }
        CHECK(mismatches == 0, "interval %ld: %ld mismatching steps", intervals[c], mismatches);
        CHECK(grows > 2, "interval %ld: the script grew the scale only %ld times (too few to "
              "test growth)", intervals[c], grows);
        printf("interval %ld: %ld steps, %lld skipped, %ld growths, final scale %g\n",
               intervals[c], steps, (long long)s.skipped_steps, grows, s.scale);
    }

    /* exactly 2000 clean steps double the default scale; 1999 do not */
    fx_loss_scaler s;
    fx_loss_scaler_init(&s, 1);
    for (int k = 0; k < 1999; k++) fx_loss_scaler_update(&s, 0);
    CHECK(s.scale == 65536.0 && s.good_steps == 1999, "after 1999 clean steps: %g, %lld",
          s.scale, (long long)s.good_steps);
    fx_loss_scaler_update(&s, 0);
    CHECK(s.scale == 131072.0 && s.good_steps == 0, "after 2000 clean steps: %g, %lld", s.scale,
          (long long)s.good_steps);
    /* an Inf at step 1999 restarts the count */
    for (int k = 0; k < 1999; k++) fx_loss_scaler_update(&s, 0);
    CHECK(fx_loss_scaler_update(&s, 1) == 0 && s.scale == 65536.0 && s.good_steps == 0,
          "Inf after 1999 clean steps: scale %g good %lld", s.scale, (long long)s.good_steps);
    for (int k = 0; k < 1999; k++) fx_loss_scaler_update(&s, 0);
    CHECK(s.scale == 65536.0, "only 1999 clean steps since the Inf: scale %g", s.scale);
}

/* fp32 limits of the scale, and non-power-of-two factors rounded to fp32. */
static void test_scale_limits(void)
{
    fx_loss_scaler s;
    fx_loss_scaler_init(&s, 1);
    s.growth_interval = 1;
    s.scale = 0x1.0p126;
    fx_loss_scaler_update(&s, 0);
    CHECK(s.scale == 0x1.0p127, "2^126 grows to %g", s.scale);
    fx_loss_scaler_update(&s, 0);
    CHECK(s.scale == 0x1.0p127 && s.good_steps == 0,
          "2^127 must not grow to Inf: scale %g good %lld", s.scale, (long long)s.good_steps);
    s.scale = FLT_TRUE_MIN;
    CHECK(fx_loss_scaler_update(&s, 1) == 0 && s.scale == FLT_TRUE_MIN,
          "backoff from the smallest subnormal keeps it (documented floor): %g", s.scale);

    fx_loss_scaler_init(&s, 1);
    s.growth_interval = 1;
    s.growth_factor = 3.0;
    s.backoff_factor = 0.3;
    s.scale = (double)0.1f;
    ref_scaler r = {0.1f, 0, 0};
    for (int k = 0; k < 40; k++) {
        int inf = (k % 3) == 1;
        ref_update(&r, inf, 3.0, 0.3, 1);
        fx_loss_scaler_update(&s, inf);
        CHECK(s.scale == (double)r.scale, "factor 3 / 0.3, step %d: %.9g vs %.9g", k, s.scale,
              (double)r.scale);
    }
}

/* Unscale: exact values on every format and backend, views, chunk edges, several gradients. */
static void test_unscale_values(void)
{
    test_rng rng;
    test_rng_seed(&rng, 3);
    for (int b = 0; b < flexpoint_backend_count(); b++) {
        const char *bn = flexpoint_backend_name(b);
        if (!flexpoint_backend_available(b)) {
            printf("backend %s: not available on this CPU, skipped\n", bn);
            continue;
        }
        CHECK_STATUS(flexpoint_set_backend(bn), FX_OK);
        for (int f = 0; f < FMT_COUNT; f++) {
            fx_loss_scaler s;
            fx_loss_scaler_init(&s, 1);
            char what[96];
            /* 10007 elements: crosses the 4096-element chunks with a ragged tail */
            tensor_t *g = make_grad((fmt_t)f, 1, 10007, &rng, 0, 0);
            snprintf(what, sizeof what, "%s %s 10007", bn, fmt_name((fmt_t)f));
            CHECK(unscale_one(&s, g, what) == 0, "%s: clean gradient found Inf", what);
            s.scale = 3.0; /* not a power of two: out == v * fp32(1/3) */
            CHECK(unscale_one(&s, g, what) == 0, "%s (scale 3): clean gradient found Inf", what);
            tensor_free(g);

            /* a NaN/Inf late in the last chunk */
            fx_loss_scaler_init(&s, 1);
            float poison = f == FMT_FP16 ? 7.0e4f : NAN;
            g = make_grad((fmt_t)f, 1, 10007, &rng, poison, 10003);
            snprintf(what, sizeof what, "%s %s poisoned at 10003", bn, fmt_name((fmt_t)f));
            CHECK(unscale_one(&s, g, what) == 1, "%s: not found", what);
            tensor_free(g);

            /* a transposed (strided) view */
            tensor_t *base = make_grad((fmt_t)f, 13, 6, &rng, 0, 0);
            tensor_t *tv = tensor_view_transpose(base, 0, 1);
            snprintf(what, sizeof what, "%s %s transposed view", bn, fmt_name((fmt_t)f));
            CHECK(unscale_one(&s, tv, what) == 0, "%s: clean gradient found Inf", what);
            tensor_free(tv);
            tensor_free(base);
        }
        /* several gradients: one bad one anywhere sets found_inf; all outputs are written */
        fx_loss_scaler s;
        fx_loss_scaler_init(&s, 1);
        tensor_t *g[3] = {make_grad(FMT_FP16, 3, 4, &rng, 0, 0),
                          make_grad(FMT_DFP16, 5, 2, &rng, 0, 0),
                          make_grad(FMT_FLEX16_5, 2, 2, &rng, NAN, 1)};
        float o0[12], o1[10], o2[4];
        float *outs[3] = {o0, o1, o2};
        const tensor_t *gs[3] = {g[0], g[1], g[2]};
        int found = -1;
        for (int i = 0; i < 4; i++) o2[i] = -1.0f;
        CHECK_STATUS(fx_loss_scaler_unscale(&s, gs, 3, outs, &found), FX_OK);
        CHECK(found == 1, "%s: three gradients, NaN in the last: found_inf=%d", bn, found);
        CHECK(o2[1] == 0.0f, "%s: the NaN of a flex gradient reads as 0, got %g", bn, o2[1]);
        CHECK_STATUS(fx_loss_scaler_unscale(&s, gs, 2, outs, &found), FX_OK);
        CHECK(found == 0, "%s: the first two are clean: found_inf=%d", bn, found);
        CHECK_STATUS(fx_loss_scaler_unscale(&s, gs, 0, outs, &found), FX_OK);
        CHECK(found == 0, "%s: no gradients: found_inf=%d", bn, found);
        for (int i = 0; i < 3; i++) tensor_free(g[i]);
    }
    flexpoint_set_backend(flexpoint_backend_name(flexpoint_backend_count() - 1));
}

/* The non-finite signal of the integer formats is the count of the *last* write. */
static void test_integer_nonfinite_count(void)
{
    for (int f = FMT_FLEX16_5; f <= FMT_DFP16; f++) {
        int64_t shape[1] = {8};
        tensor_t *g = tensor_new((fmt_t)f, 1, shape);
        float v[8] = {1, -2, 3, NAN, 5, -6, 7, 0.5f};
        CHECK_STATUS(tensor_from_f32(g, v), FX_OK);
        double nf = -1;
        CHECK_STATUS(tensor_stat(g, "nonfinite", &nf), FX_OK);
        CHECK(nf == 1, "%s: nonfinite count %g", fmt_name((fmt_t)f), nf);
        fx_loss_scaler s;
        fx_loss_scaler_init(&s, 1);
        float out[8];
        float *outs[1] = {out};
        const tensor_t *gs[1] = {g};
        int found = -1;
        CHECK_STATUS(fx_loss_scaler_unscale(&s, gs, 1, outs, &found), FX_OK);
        int all_finite = 1;
        for (int i = 0; i < 8; i++) all_finite &= isfinite(out[i]) != 0;
        CHECK(found == 1 && all_finite, "%s: NaN input: found_inf=%d with finite values %d",
              fmt_name((fmt_t)f), found, all_finite);
        v[3] = 4;
        CHECK_STATUS(tensor_from_f32(g, v), FX_OK);
        CHECK_STATUS(fx_loss_scaler_unscale(&s, gs, 1, outs, &found), FX_OK);
        CHECK(found == 0, "%s: a clean rewrite clears the signal: found_inf=%d",
              fmt_name((fmt_t)f), found);
        tensor_free(g);
    }
}

/* Unscaling by a scale below 1 can overflow a finite gradient: that is reported too. */
static void test_unscale_overflow(void)
{
    fx_loss_scaler s;
    fx_loss_scaler_init(&s, 1);
    s.scale = 0x1.0p-10;
    int64_t shape[1] = {3};
    tensor_t *g = tensor_new(FMT_FP32, 1, shape);
    float v[3] = {1.0f, 0x1.0p120f, -2.0f};
    CHECK_STATUS(tensor_from_f32(g, v), FX_OK);
    CHECK(unscale_one(&s, g, "fp32 2^120 / 2^-10") == 1, "overflow on unscale not reported");
    tensor_free(g);
}

static void test_disabled(void)
{
    fx_loss_scaler s;
    fx_loss_scaler_init(&s, 0);
    test_rng rng;
    test_rng_seed(&rng, 5);
    tensor_t *g = make_grad(FMT_BF16, 4, 4, &rng, INFINITY, 2);
    CHECK(unscale_one(&s, g, "disabled bf16 Inf") == 1, "disabled: found_inf still reported");
    for (int k = 0; k < 5000; k++) {
        int apply = fx_loss_scaler_update(&s, k % 2);
        if (apply != 1) {
            CHECK(0, "disabled scaler skipped step %d", k);
            break;
        }
    }
    CHECK(s.scale == 1.0 && s.skipped_steps == 0 && s.good_steps == 0,
          "disabled: scale %g skipped %lld good %lld", s.scale, (long long)s.skipped_steps,
          (long long)s.good_steps);
    tensor_free(g);
}

static void check_msg(const char *what, const char *needle)
{
    const char *m = flexpoint_last_error();
    CHECK(m && strstr(m, needle) != NULL, "%s: message '%s' lacks '%s'", what, m ? m : "",
          needle);
}

static void test_bad_input(void)
{
    fx_loss_scaler s;
    fx_loss_scaler_init(&s, 1);
    int64_t shape[1] = {4};
    tensor_t *g = tensor_new(FMT_FP32, 1, shape);
    float out[4];
    float *outs[1] = {out}, *null_outs[1] = {NULL};
    const tensor_t *gs[1] = {g}, *null_gs[1] = {NULL};
    int found = 0;

    CHECK(fx_loss_scaler_update(NULL, 0) < 0, "update(NULL) must fail");
    check_msg("update(NULL)", "fx_loss_scaler_update");
    CHECK_STATUS(fx_loss_scaler_unscale(NULL, gs, 1, outs, &found), FX_EINVAL);
    check_msg("unscale(NULL scaler)", "scaler is NULL");
    CHECK_STATUS(fx_loss_scaler_unscale(&s, gs, -1, outs, &found), FX_EINVAL);
    check_msg("n = -1", "n=-1");
    CHECK_STATUS(fx_loss_scaler_unscale(&s, NULL, 1, outs, &found), FX_EINVAL);
    check_msg("grads NULL", "grads is NULL");
    CHECK_STATUS(fx_loss_scaler_unscale(&s, null_gs, 1, outs, &found), FX_EINVAL);
    check_msg("grads[0] NULL", "grads[0]");
    CHECK_STATUS(fx_loss_scaler_unscale(&s, gs, 1, null_outs, &found), FX_EINVAL);
    check_msg("out[0] NULL", "out[0]");
    CHECK_STATUS(fx_loss_scaler_unscale(&s, gs, 1, outs, NULL), FX_EINVAL);
    check_msg("found_inf NULL", "found_inf");

    /* corrupted state: rejected, and update leaves it alone */
    fx_loss_scaler bad = s;
    bad.growth_interval = 0;
    CHECK(fx_loss_scaler_update(&bad, 0) == FX_EINVAL && bad.good_steps == 0,
          "growth_interval 0 must be rejected");
    check_msg("growth_interval 0", "growth_interval=0");
    bad = s;
    bad.scale = NAN;
    CHECK(fx_loss_scaler_update(&bad, 1) == FX_EINVAL && bad.skipped_steps == 0,
          "scale NaN must be rejected");
    check_msg("scale NaN", "scale=nan");
    CHECK_STATUS(fx_loss_scaler_unscale(&bad, gs, 1, outs, &found), FX_EINVAL);
    bad = s;
    bad.backoff_factor = 1.5;
    CHECK(fx_loss_scaler_update(&bad, 1) == FX_EINVAL, "backoff 1.5 must be rejected");
    check_msg("backoff 1.5", "backoff_factor=1.5");
    bad = s;
    bad.good_steps = 2000;
    CHECK(fx_loss_scaler_update(&bad, 0) == FX_EINVAL, "good_steps == interval rejected");
    check_msg("good_steps", "good_steps=2000");
    tensor_free(g);
}

/* Large gradients are unscaled in parallel chunks: the same values and decision for any
 * thread count. */
static void test_unscale_threads(void)
{
    test_rng rng;
    for (int f = 0; f < FMT_COUNT; f++) {
        for (int poisoned = 0; poisoned < 2; poisoned++) {
            test_rng_seed(&rng, 21);
            float poison = poisoned ? (f == FMT_FP16 ? 1.0e5f : NAN) : 0.0f;
            tensor_t *g = make_grad((fmt_t)f, 1, 200003, &rng, poison, 150001);
            fx_loss_scaler s;
            fx_loss_scaler_init(&s, 1);
            char what[64];
            int found[2];
            for (int t = 0; t < 2; t++) {
                int prev = flexpoint_set_num_threads(t ? 4 : 1);
                snprintf(what, sizeof what, "%s 200003, %d threads", fmt_name((fmt_t)f),
                         t ? 4 : 1);
                found[t] = unscale_one(&s, g, what);
                flexpoint_set_num_threads(prev);
            }
            CHECK(found[0] == poisoned && found[1] == poisoned,
                  "%s poisoned %d: found_inf %d (1 thread) and %d (4 threads)",
                  fmt_name((fmt_t)f), poisoned, found[0], found[1]);
            tensor_free(g);
        }
    }
}

int main(void)
{
    test_defaults();
    test_script();
    test_long_scripts();
    test_scale_limits();
    test_unscale_values();
    test_unscale_threads();
    test_integer_nonfinite_count();
    test_unscale_overflow();
    test_disabled();
    test_bad_input();
    return test_finish("test_nn_scaler");
}
