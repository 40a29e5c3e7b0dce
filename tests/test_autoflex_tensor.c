/* Autoflex through the public API: the golden trace of docs/autoflex.md written with
 * tensor_from_f32 into a FLEX16_5 tensor, the per-write statistics and trace, the CSV file, the
 * presets and the error cases of the Autoflex and trace functions. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, setenv */

#include "flexpoint.h"
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GOLDEN_T 30
static const float golden_base[4] = {1.0f, -0.5f, 0.25f, 0.1f};

static float golden_scale(int t) { return (t >= 6 && t <= 9) ? 100.0f : 1.0f; }

static void golden_data(int t, float *x)
{
    for (int i = 0; i < 4; i++) x[i] = golden_scale(t) * golden_base[i];
}

/* docs/autoflex.md, "Golden trace for the published preset". */
static int published_exp(int t)
{
    if (t <= 6) return -14;
    if (t == 7) return -12;
    if (t == 8) return -10;
    if (t == 9) return -8;
    if (t <= 25) return -7;
    return -14;
}
static int published_sat(int t)
{
    if (t == 6 || t == 7) return 4;
    if (t == 8) return 2;
    return 0;
}
/* True-max statistic (derivation in test_autoflex_unit.c): one bad write at t=6, then -7 while
 * a 100 is among the last 16 maxima (t=7..25). */
static int truemax_exp(int t)
{
    if (t <= 6) return -14;
    if (t <= 25) return -7;
    return -14;
}

static tensor_t *new_flex4(const char *preset)
{
    int64_t shape[1] = {4};
    tensor_t *t = tensor_new(FMT_FLEX16_5, 1, shape);
    CHECK(t != NULL, "tensor_new: %s", flexpoint_last_error());
    if (t && preset) CHECK_STATUS(tensor_set_autoflex(t, preset), FX_OK);
    return t;
}

static double stat_of(const tensor_t *t, const char *name)
{
    double v = -12345.0;
    CHECK_STATUS(tensor_stat(t, name, &v), FX_OK);
    return v;
}

static void test_golden_published(const char *dir)
{
    tensor_t *t = new_flex4("published");
    if (!t) return;
    CHECK(tensor_exp(t) == -8, "starts at -8, got %d", tensor_exp(t));
    int lo = 99, hi = 99;
    CHECK_STATUS(tensor_exp_window(t, &lo, &hi), FX_OK);
    CHECK(lo == -31 && hi == 0, "default window [%d, %d]", lo, hi);
    CHECK_STATUS(tensor_trace_enable(t, 1), FX_OK);

    for (int k = 0; k < GOLDEN_T; k++) {
        float x[4], y[4];
        golden_data(k, x);
        CHECK_STATUS(tensor_from_f32(t, x), FX_OK);
        CHECK(tensor_exp(t) == published_exp(k), "t=%d: exponent %d, want %d", k, tensor_exp(t),
              published_exp(k));
        CHECK(stat_of(t, "saturated") == published_sat(k), "t=%d: saturated %g, want %d", k,
              stat_of(t, "saturated"), published_sat(k));
        CHECK(stat_of(t, "clamped") == 0, "t=%d: nothing clamped", k);
        CHECK(stat_of(t, "true_max") == golden_scale(k), "t=%d: true max %g", k,
              stat_of(t, "true_max"));
        CHECK_STATUS(tensor_to_f32(t, y), FX_OK);
        if (k == 8) {
            const float want[4] = {32767.0f / 1024, -32767.0f / 1024, 25.0f, 10.0f};
            for (int i = 0; i < 4; i++)
                CHECK(y[i] == want[i], "t=8 [%d] = %.9g, want %.9g", i, y[i], want[i]);
        }
        if (k == 9) {
            const float want[4] = {100.0f, -50.0f, 25.0f, 10.0f};
            for (int i = 0; i < 4; i++)
                CHECK(y[i] == want[i], "t=9 [%d] = %.9g, want %.9g", i, y[i], want[i]);
        }
        if (k >= 10 && k <= 25)
            CHECK(y[3] == 0.1015625f && y[0] == 1.0f && y[1] == -0.5f && y[2] == 0.25f,
                  "t=%d: [%g %g %g %g]", k, y[0], y[1], y[2], y[3]);
    }
    CHECK(stat_of(t, "overflows") == 3, "overflows %g, want 3 (t=6, 7, 8)", stat_of(t, "overflows"));
    CHECK(stat_of(t, "writes") == GOLDEN_T, "writes %g", stat_of(t, "writes"));

    /* the trace */
    CHECK(tensor_trace_len(t) == GOLDEN_T, "trace length %lld", (long long)tensor_trace_len(t));
    for (int k = 0; k < GOLDEN_T; k++) {
        fx_trace_record r;
        memset(&r, 0xff, sizeof r);
        CHECK_STATUS(tensor_trace_get(t, k, &r), FX_OK);
        CHECK(r.write == k && r.exp == published_exp(k) && r.saturated == published_sat(k) &&
                  r.overflow == (published_sat(k) > 0) && r.recomputed == 0 && r.clamped == 0 &&
                  r.nonfinite == 0,
              "record %d: write %lld exp %d sat %lld overflow %d", k, (long long)r.write, r.exp,
              (long long)r.saturated, r.overflow);
        CHECK(r.true_max == golden_scale(k), "record %d true_max %g", k, r.true_max);
    }
    fx_trace_record r8;
    CHECK_STATUS(tensor_trace_get(t, 8, &r8), FX_OK);
    CHECK(r8.stored_max == 32767.0 / 1024, "t=8 stored max %.17g", r8.stored_max);
    fx_trace_record rbad;
    CHECK_STATUS(tensor_trace_get(t, GOLDEN_T, &rbad), FX_ERANGE);
    CHECK_STATUS(tensor_trace_get(t, -1, &rbad), FX_ERANGE);
    CHECK_STATUS(tensor_trace_get(t, 0, NULL), FX_EINVAL);

    /* the CSV file: header + one row per write, written atomically (no temporary left) */
    char path[512];
    snprintf(path, sizeof path, "%s/trace.csv", dir);
    CHECK_STATUS(tensor_trace_write_csv(t, path), FX_OK);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot read back %s", path);
    if (f) {
        char line[512];
        int lines = 0, row8_ok = 0, header_ok = 0;
        while (fgets(line, sizeof line, f)) {
            if (lines == 0)
                header_ok = strcmp(line, "write,exp,clamped,overflow,recomputed,saturated,"
                                         "nonfinite,underflow,true_max,stored_max\n") == 0;
            if (lines == 9) { /* the row of t = 8 */
                long long w, sat, nf, uf;
                int e, cl, ov, rc;
                double tm, sm;
                int got = sscanf(line, "%lld,%d,%d,%d,%d,%lld,%lld,%lld,%lf,%lf", &w, &e, &cl, &ov,
                                 &rc, &sat, &nf, &uf, &tm, &sm);
                row8_ok = got == 10 && w == 8 && e == -10 && cl == 0 && ov == 1 && rc == 0 &&
                          sat == 2 && nf == 0 && tm == 100.0 && sm == 32767.0 / 1024;
                CHECK(row8_ok, "row of t=8: '%s'", line);
            }
            lines++;
        }
        fclose(f);
        CHECK(header_ok, "CSV header");
        CHECK(lines == GOLDEN_T + 1, "CSV has %d lines, want %d", lines, GOLDEN_T + 1);
        CHECK(row8_ok, "row 8 parsed");
    }
    DIR *d = opendir(dir);
    int entries = 0;
    if (d) {
        struct dirent *ent;
        while ((ent = readdir(d)))
            if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..")) entries++;
        closedir(d);
    }
    CHECK(entries == 1, "only trace.csv in the directory, found %d entries", entries);

    /* overwriting an existing file works (rename replaces it) */
    CHECK_STATUS(tensor_trace_write_csv(t, path), FX_OK);

    /* an unwritable path: FX_EIO naming the path */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no_such_dir/trace.csv", dir);
    CHECK_STATUS(tensor_trace_write_csv(t, bad), FX_EIO);
    CHECK(strstr(flexpoint_last_error(), "no_such_dir") != NULL, "message names the path: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_trace_write_csv(t, NULL), FX_EINVAL);
    remove(path);

    /* stopping keeps the records; starting again clears them */
    CHECK_STATUS(tensor_trace_enable(t, 0), FX_OK);
    float x[4];
    golden_data(0, x);
    CHECK_STATUS(tensor_from_f32(t, x), FX_OK);
    CHECK(tensor_trace_len(t) == GOLDEN_T, "a disabled trace does not grow");
    CHECK_STATUS(tensor_trace_enable(t, 1), FX_OK);
    CHECK(tensor_trace_len(t) == 0, "enabling clears the trace");
    CHECK_STATUS(tensor_from_f32(t, x), FX_OK);
    CHECK(tensor_trace_len(t) == 1, "one record after one write");
    fx_trace_record r;
    CHECK_STATUS(tensor_trace_get(t, 0, &r), FX_OK);
    CHECK(r.write == GOLDEN_T + 1, "write index counts all writes: %lld", (long long)r.write);

    /* a view shares the storage, so it sees the same trace */
    int64_t shape2[2] = {2, 2};
    tensor_t *v = tensor_view_reshape(t, 2, shape2);
    CHECK(v != NULL, "reshape view");
    if (v) {
        CHECK(tensor_trace_len(v) == 1, "the view sees the storage's trace");
        tensor_free(v);
    }
    tensor_free(t);
}

static void test_presets_through_api(void)
{
    /* truemax: saturates only at t = 6, then -7 while a 100 is in the history */
    tensor_t *t = new_flex4("truemax");
    if (!t) return;
    CHECK_STATUS(tensor_trace_enable(t, 1), FX_OK);
    for (int k = 0; k < GOLDEN_T; k++) {
        float x[4];
        golden_data(k, x);
        CHECK_STATUS(tensor_from_f32(t, x), FX_OK);
        CHECK(tensor_exp(t) == truemax_exp(k), "truemax t=%d: exp %d, want %d", k, tensor_exp(t),
              truemax_exp(k));
        CHECK(stat_of(t, "saturated") == (k == 6 ? 4 : 0), "truemax t=%d: saturated %g", k,
              stat_of(t, "saturated"));
    }
    CHECK(stat_of(t, "overflows") == 1, "truemax: one overflow");
    tensor_free(t);

    /* robust: the overflow at t = 6 is redone at the exact exponent, nothing saturated is kept */
    t = new_flex4("robust");
    if (!t) return;
    CHECK_STATUS(tensor_trace_enable(t, 1), FX_OK);
    for (int k = 0; k < GOLDEN_T; k++) {
        float x[4], y[4];
        golden_data(k, x);
        CHECK_STATUS(tensor_from_f32(t, x), FX_OK);
        CHECK(stat_of(t, "saturated") == 0, "robust t=%d keeps saturated values", k);
        int want = k == 6 ? -8 : truemax_exp(k);
        CHECK(tensor_exp(t) == want, "robust t=%d: exp %d, want %d", k, tensor_exp(t), want);
        CHECK_STATUS(tensor_to_f32(t, y), FX_OK);
        if (k == 6) CHECK(y[0] == 100.0f && y[1] == -50.0f, "robust t=6 exact: %g %g", y[0], y[1]);
    }
    fx_trace_record r;
    CHECK_STATUS(tensor_trace_get(t, 6, &r), FX_OK);
    CHECK(r.overflow == 1 && r.recomputed == 1 && r.saturated == 0 && r.exp == -8,
          "robust record 6: overflow %d recomputed %d sat %lld exp %d", r.overflow, r.recomputed,
          (long long)r.saturated, r.exp);
    CHECK(stat_of(t, "overflows") == 1, "robust: the first attempt at t=6 counts as an overflow");
    tensor_free(t);

    /* fixed: the exponent never moves */
    t = new_flex4("fixed");
    if (!t) return;
    for (int k = 0; k < GOLDEN_T; k++) {
        float x[4];
        golden_data(k, x);
        CHECK_STATUS(tensor_from_f32(t, x), FX_OK);
        CHECK(tensor_exp(t) == -8, "fixed t=%d: exp %d", k, tensor_exp(t));
    }
    tensor_free(t);
}

static void test_config_api(void)
{
    tensor_t *t = new_flex4(NULL);
    if (!t) return;
    fx_autoflex_config cfg, got;
    CHECK_STATUS(tensor_set_autoflex(t, "no_such_preset"), FX_ENAME);
    CHECK(strstr(flexpoint_last_error(), "no_such_preset") != NULL, "message: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_set_autoflex(t, NULL), FX_EINVAL);
    CHECK_STATUS(tensor_set_autoflex(NULL, "published"), FX_EINVAL);

    /* a configuration is validated, stored and read back; the exponent is kept */
    float x[4];
    golden_data(0, x);
    CHECK_STATUS(tensor_from_f32(t, x), FX_OK);
    int e = tensor_exp(t);
    CHECK_STATUS(fx_autoflex_preset("truemax", &cfg), FX_OK);
    cfg.history_len = 5;
    cfg.beta = 1.5;
    CHECK_STATUS(tensor_set_autoflex_config(t, &cfg), FX_OK);
    CHECK(tensor_exp(t) == e, "the exponent is kept: %d vs %d", tensor_exp(t), e);
    CHECK_STATUS(tensor_get_autoflex_config(t, &got), FX_OK);
    CHECK(got.history_len == 5 && got.beta == 1.5 && got.stat_mode == FX_AF_STAT_TRUE_MAX,
          "read back the configuration");
    cfg.alpha = 0.0;
    CHECK_STATUS(tensor_set_autoflex_config(t, &cfg), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), "alpha") != NULL, "message names alpha: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_get_autoflex_config(t, &got), FX_OK);
    CHECK(got.history_len == 5 && got.alpha == 1.0, "a rejected configuration changes nothing");
    CHECK_STATUS(tensor_set_autoflex_config(t, NULL), FX_EINVAL);
    CHECK_STATUS(tensor_get_autoflex_config(t, NULL), FX_EINVAL);
    tensor_free(t);

    /* float formats have no Autoflex and no trace */
    int64_t shape[1] = {4};
    tensor_t *f = tensor_new(FMT_FP32, 1, shape);
    CHECK(f != NULL, "fp32 tensor");
    if (f) {
        CHECK_STATUS(tensor_set_autoflex(f, "published"), FX_EFORMAT);
        CHECK_STATUS(fx_autoflex_preset("published", &cfg), FX_OK);
        CHECK_STATUS(tensor_set_autoflex_config(f, &cfg), FX_EFORMAT);
        CHECK_STATUS(tensor_get_autoflex_config(f, &got), FX_EFORMAT);
        CHECK_STATUS(tensor_trace_enable(f, 1), FX_EFORMAT);
        CHECK(tensor_trace_len(f) == FX_EFORMAT, "trace_len on fp32");
        CHECK_STATUS(tensor_trace_write_csv(f, "unused.csv"), FX_EFORMAT);
        tensor_free(f);
    }
    /* DFP16 has a trace (exact exponent per write) but no Autoflex */
    tensor_t *dfp = tensor_new(FMT_DFP16, 1, shape);
    CHECK(dfp != NULL, "dfp16 tensor");
    if (dfp) {
        CHECK_STATUS(tensor_set_autoflex(dfp, "published"), FX_EFORMAT);
        CHECK_STATUS(tensor_trace_enable(dfp, 1), FX_OK);
        golden_data(6, x);
        CHECK_STATUS(tensor_from_f32(dfp, x), FX_OK);
        fx_trace_record r;
        CHECK(tensor_trace_len(dfp) == 1, "dfp16 trace length");
        CHECK_STATUS(tensor_trace_get(dfp, 0, &r), FX_OK);
        CHECK(r.exp == -8 && r.saturated == 0, "dfp16 uses the exact exponent: %d", r.exp);
        tensor_free(dfp);
    }
    CHECK(tensor_trace_len(NULL) == FX_EINVAL, "trace_len(NULL)");
    CHECK_STATUS(tensor_trace_enable(NULL, 1), FX_EINVAL);
}

static void test_env_default(void)
{
    /* FLEXPOINT_AUTOFLEX picks the preset of new tensors; an unknown name is ignored */
    fx_autoflex_config got;
    setenv("FLEXPOINT_AUTOFLEX", "exact_init", 1);
    tensor_t *t = new_flex4(NULL);
    if (t) {
        CHECK_STATUS(tensor_get_autoflex_config(t, &got), FX_OK);
        CHECK(got.init_mode == FX_AF_INIT_EXACT, "FLEXPOINT_AUTOFLEX=exact_init");
        tensor_free(t);
    }
    setenv("FLEXPOINT_AUTOFLEX", "bogus", 1);
    t = new_flex4(NULL);
    if (t) {
        CHECK_STATUS(tensor_get_autoflex_config(t, &got), FX_OK);
        CHECK(got.init_mode == FX_AF_INIT_EXACT && got.managed == 1 &&
                  got.stat_mode == FX_AF_STAT_TRUE_MAX,
              "unknown FLEXPOINT_AUTOFLEX falls back to the default (robust)");
        tensor_free(t);
    }
    unsetenv("FLEXPOINT_AUTOFLEX");
}

int main(void)
{
    char dir[] = "/tmp/fx_autoflex_XXXXXX";
    if (!mkdtemp(dir)) return test_skip("test_autoflex_tensor", "cannot create a temp dir");
    test_golden_published(dir);
    rmdir(dir);
    test_presets_through_api();
    test_config_api();
    test_env_default();
    return test_finish("test_autoflex_tensor");
}
