/* Writes whose statistics arrive later (src/core/dispatch.h, "writes whose statistics arrive
 * later"): the GPU launches a FLEX16_5 write at the Autoflex prediction without waiting for its
 * statistics, and completes the bookkeeping (history, statistics, counters, trace) when the
 * storage is next written or read. The protocol is the core's, so this test drives it on the
 * host (fx_store_defer_host_writes) and checks that everything a user can observe is identical,
 * byte for byte, to writing with the statistics at once:
 *   - op sequences under every Autoflex preset and both roundings, with data that saturates,
 *     vanishes and holds NaN/Inf, read after every write or only at the end, with a preset
 *     switch, a trace restart and an exponent change in the middle;
 *   - training runs (MLP and CNN, two presets), including a checkpoint saved with a write
 *     pending and resumed.
 * It also checks that the launched path is taken exactly where it applies: FLEX16_5 writes after
 * the first (every preset: KEEP presets and unmanaged tensors at the history's exponent,
 * "robust" with its recompute rule applied by the backend) and every whole DFP16 write (its
 * exact exponent); the settle then decides each write again with the core's rules and must
 * agree with the backend. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"
#include "core/dispatch.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- an append-only log of everything observable -------------------------------------------- */

typedef struct obs_log {
    unsigned char *p;
    size_t n, cap;
} obs_log;

static void log_put(obs_log *l, const void *v, size_t n)
{
    if (l->n + n > l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 4096;
        while (cap < l->n + n) cap *= 2;
        unsigned char *q = realloc(l->p, cap);
        if (!q) abort(); /* a test helper: running out of memory is not a result */
        l->p = q;
        l->cap = cap;
    }
    memcpy(l->p + l->n, v, n);
    l->n += n;
}

static void log_tensor(obs_log *l, const tensor_t *t)
{
    static const char *const stats[] = {"saturated", "true_max", "nonfinite", "underflow",
                                        "clamped", "overflows", "clamped_total",
                                        "nonfinite_total", "writes", "exp", "stored_max"};
    for (size_t i = 0; i < sizeof stats / sizeof *stats; i++) {
        double v = -1.0;
        CHECK_STATUS(tensor_stat(t, stats[i], &v), FX_OK);
        log_put(l, &v, sizeof v);
    }
    int64_t n = tensor_numel(t);
    int16_t *raw = malloc((size_t)n * sizeof *raw);
    CHECK_STATUS(tensor_get_raw(t, raw), FX_OK);
    log_put(l, raw, (size_t)n * sizeof *raw);
    free(raw);
    int64_t len = tensor_trace_len(t);
    log_put(l, &len, sizeof len);
    for (int64_t i = 0; i < len; i++) {
        fx_trace_record r;
        memset(&r, 0, sizeof r);
        CHECK_STATUS(tensor_trace_get(t, i, &r), FX_OK);
        log_put(l, &r, sizeof r);
    }
    fx_autoflex_config c;
    memset(&c, 0, sizeof c);
    if (tensor_fmt(t) == FMT_FLEX16_5) {
        CHECK_STATUS(tensor_get_autoflex_config(t, &c), FX_OK);
        log_put(l, &c, sizeof c);
    }
}

static int logs_equal(const obs_log *a, const obs_log *b, const char *what)
{
    if (a->n != b->n) {
        CHECK(0, "%s: %zu observed bytes deferred vs %zu at once", what, b->n, a->n);
        return 0;
    }
    for (size_t i = 0; i < a->n; i++)
        if (a->p[i] != b->p[i]) {
            CHECK(0, "%s: the observations first differ at byte %zu of %zu", what, i, a->n);
            return 0;
        }
    return 1;
}

static int pending_active(const tensor_t *t)
{
    return t->st->pending && t->st->pending->active;
}

/* ---- op sequences ------------------------------------------------------------------------- */

enum { SEQ_STEPS = 40, ROWS = 8, COLS = 12, NSEQ = 8 };

/* Data of step s: Gaussian values whose scale drifts, jumps by 2^12 at step 13 (a saturating
 * write under the published algorithm), vanishes at step 20 and holds NaN/Inf at step 27. */
static void step_data(test_rng *r, int s, float *x, int64_t n)
{
    double scale = ldexp(1.0, (s % 7) - 3);
    if (s == 13) scale *= 4096.0;
    for (int64_t i = 0; i < n; i++) x[i] = (float)(scale * test_rng_normal(r));
    if (s == 20)
        for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
    if (s == 27) {
        x[3] = NAN;
        x[5] = INFINITY;
        x[7] = -INFINITY;
    }
}

typedef struct seq_opts {
    const char *preset;
    int rounding;
    int read_every_step; /* 0: observe only at the end (the next write settles) */
} seq_opts;

/* Runs the sequence and returns its observation log; *deferred counts the writes that were
 * still pending right after they returned. */
static obs_log run_sequence(const seq_opts *o, int defer, int *deferred)
{
    fx_store_defer_host_writes(defer);
    obs_log l = {NULL, 0, 0};
    *deferred = 0;
    const int64_t sa[2] = {ROWS, COLS}, sw[2] = {COLS, ROWS}, sy[2] = {ROWS, ROWS};
    tensor_t *a = tensor_new(FMT_FLEX16_5, 2, sa), *w = tensor_new(FMT_FLEX16_5, 2, sw);
    tensor_t *y = tensor_new(FMT_FLEX16_5, 2, sy), *z = tensor_new(FMT_FLEX16_5, 2, sy);
    tensor_t *rl = tensor_new(FMT_FLEX16_5, 2, sy), *sc = tensor_new(FMT_FLEX16_5, 2, sy);
    tensor_t *d = tensor_new(FMT_DFP16, 2, sy); /* exact exponents: every write launches */
    tensor_t *df = tensor_new(FMT_DFP16, 2, sa); /* fp32 stages: all-zero and NaN/Inf writes */
    tensor_t *all[NSEQ] = {a, w, y, z, rl, sc, d, df};
    for (int i = 0; i < NSEQ; i++) {
        if (tensor_fmt(all[i]) == FMT_FLEX16_5)
            CHECK_STATUS(tensor_set_autoflex(all[i], o->preset), FX_OK);
        CHECK_STATUS(tensor_set_rounding(all[i], o->rounding, 99 + (uint64_t)i), FX_OK);
        CHECK_STATUS(tensor_trace_enable(all[i], 1), FX_OK);
    }
    test_rng r;
    test_rng_seed(&r, 5);
    float xa[ROWS * COLS], xw[COLS * ROWS];
    for (int s = 0; s < SEQ_STEPS; s++) {
        step_data(&r, s, xa, ROWS * COLS);
        step_data(&r, s + 3, xw, COLS * ROWS);
        CHECK_STATUS(tensor_from_f32(a, xa), FX_OK);
        *deferred += pending_active(a);
        CHECK_STATUS(tensor_from_f32(w, xw), FX_OK);
        CHECK_STATUS(tensor_from_f32(df, xa), FX_OK);
        *deferred += pending_active(df);
        CHECK_STATUS(tensor_matmul(y, a, w), FX_OK);
        *deferred += pending_active(y);
        CHECK_STATUS(tensor_add(z, y, z), FX_OK); /* reads z while z's last write may pend */
        CHECK_STATUS(tensor_relu(rl, z), FX_OK);
        CHECK_STATUS(tensor_scale(sc, rl, 0.375), FX_OK);
        CHECK_STATUS(tensor_sub(d, y, d), FX_OK); /* reads d while its last write may pend */
        *deferred += pending_active(d);
        if (s == 17) CHECK_STATUS(tensor_trace_enable(z, 1), FX_OK); /* restart z's trace */
        if (s == 23) CHECK_STATUS(tensor_set_autoflex(y, "truemax"), FX_OK);
        if (s == 31) CHECK_STATUS(tensor_set_exp(sc, tensor_exp(sc) - 1), FX_OK);
        if (o->read_every_step)
            for (int i = 0; i < NSEQ; i++) log_tensor(&l, all[i]);
    }
    for (int i = 0; i < NSEQ; i++) log_tensor(&l, all[i]);
    for (int i = 0; i < NSEQ; i++) tensor_free(all[i]);
    fx_store_defer_host_writes(0);
    return l;
}

static void sequences(void)
{
    static const char *const presets[] = {"published", "truemax", "exact_init", "fixed",
                                          "robust"};
    for (size_t p = 0; p < sizeof presets / sizeof *presets; p++)
        for (int rnd = 0; rnd < 2; rnd++)
            for (int every = 0; every < 2; every++) {
                seq_opts o = {presets[p], rnd, every};
                int d0 = 0, d1 = 0;
                obs_log at_once = run_sequence(&o, 0, &d0);
                obs_log deferred = run_sequence(&o, 1, &d1);
                char what[96];
                snprintf(what, sizeof what, "sequence %s, rounding %d, read %s", presets[p],
                         rnd, every ? "every step" : "at the end");
                logs_equal(&at_once, &deferred, what);
                CHECK(d0 == 0, "%s: %d writes pending without deferral", what, d0);
                /* a and y are written 40 times each. Every write is launched except a first
                 * write of a managed configuration (it measures its own data); y switches to
                 * "truemax" at step 23, so its write at step 24 is a first one again. The
                 * DFP16 tensors d and df launch all their 40 writes each. */
                const int fixed = strcmp(presets[p], "fixed") == 0;
                const int want = (fixed ? 2 * SEQ_STEPS - 1 : 2 * (SEQ_STEPS - 1) - 1) +
                                 2 * SEQ_STEPS;
                CHECK(d1 == want, "%s: %d writes deferred, want %d", what, d1, want);
                free(at_once.p);
                free(deferred.p);
            }
}

/* ---- training ------------------------------------------------------------------------------ */

static fx_trainer *trainer(const char *model, fmt_t fmt, const char *preset,
                           const fx_dataset *tr, const fx_dataset *te)
{
    fx_train_config c;
    test_train_config(&c, model, fmt, 3);
    snprintf(c.autoflex, sizeof c.autoflex, "%s", preset);
    fx_trainer *t = fx_trainer_new(&c, tr, te);
    CHECK(t != NULL, "trainer %s/%s: %s", model, preset, flexpoint_last_error());
    if (t)
        for (int i = 0; i < fx_trainer_tensor_count(t); i++) {
            tensor_t *x = fx_trainer_tensor(t, i);
            if (fmt_is_shared_exponent(tensor_fmt(x))) tensor_trace_enable(x, 1);
        }
    return t;
}

/* Everything observable about a trainer: its parameters, and every shared-exponent tensor's
 * state and trace. Returns the number of tensors with a write pending before the reads. */
static int log_trainer(obs_log *l, fx_trainer *t)
{
    int pending = 0;
    /* (a tensor the last step's fused ops left unwritten is refused: NULL, in both modes) */
    for (int i = 0; i < fx_trainer_tensor_count(t); i++)
        if (fx_trainer_tensor(t, i)) pending += pending_active(fx_trainer_tensor(t, i));
    int64_t n = fx_trainer_param_count(t);
    float *p = malloc((size_t)n * sizeof *p);
    CHECK_STATUS(fx_trainer_get_params(t, p), FX_OK);
    log_put(l, p, (size_t)n * sizeof *p);
    free(p);
    for (int i = 0; i < fx_trainer_tensor_count(t); i++) {
        tensor_t *x = fx_trainer_tensor(t, i);
        const int refused = x == NULL; /* which tensors were refused is observed too */
        log_put(l, &refused, sizeof refused);
        if (x && fmt_is_shared_exponent(tensor_fmt(x))) log_tensor(l, x);
    }
    return pending;
}

/* 7 steps, a checkpoint (with writes pending when deferred), 9 more steps in a fresh trainer
 * resumed from it; the observations of both halves. */
static obs_log run_training(const char *model, fmt_t fmt, const char *preset, int defer,
                            const fx_dataset *tr, const fx_dataset *te, int *pending)
{
    fx_store_defer_host_writes(defer);
    obs_log l = {NULL, 0, 0};
    *pending = 0;
    char path[256];
    snprintf(path, sizeof path, "/tmp/fx_deferred_%ld.ckpt", (long)getpid());
    fx_trainer *t = trainer(model, fmt, preset, tr, te);
    if (!t) {
        fx_store_defer_host_writes(0);
        return l;
    }
    float loss;
    for (int s = 0; s < 7; s++) {
        CHECK_STATUS(fx_trainer_step(t, &loss), FX_OK);
        log_put(&l, &loss, sizeof loss);
    }
    CHECK_STATUS(fx_trainer_save(t, path), FX_OK);
    *pending += log_trainer(&l, t);
    fx_trainer_free(t);
    fx_trainer *u = trainer(model, fmt, preset, tr, te);
    if (u) {
        CHECK_STATUS(fx_trainer_load(u, path), FX_OK);
        for (int s = 0; s < 9; s++) {
            CHECK_STATUS(fx_trainer_step(u, &loss), FX_OK);
            log_put(&l, &loss, sizeof loss);
        }
        *pending += log_trainer(&l, u);
        fx_trainer_free(u);
    }
    unlink(path);
    fx_store_defer_host_writes(0);
    return l;
}

static void training(void)
{
    fx_dataset *tr = test_patch_dataset(320, 21), *te = test_patch_dataset(64, 22);
    CHECK(tr && te, "synthetic data: %s", flexpoint_last_error());
    if (!tr || !te) return;
    static const char *const models[] = {"mlp", "cnn"};
    /* FLEX16_5 under two KEEP presets and "robust" (recompute); DFP16 (its preset is unused) */
    static const struct {
        fmt_t fmt;
        const char *preset;
    } runs[] = {{FMT_FLEX16_5, "published"}, {FMT_FLEX16_5, "truemax"},
                {FMT_FLEX16_5, "robust"}, {FMT_DFP16, "robust"}};
    for (int m = 0; m < 2; m++)
        for (size_t p = 0; p < sizeof runs / sizeof *runs; p++) {
            int p0 = 0, p1 = 0;
            obs_log at_once = run_training(models[m], runs[p].fmt, runs[p].preset, 0, tr, te, &p0);
            obs_log deferred = run_training(models[m], runs[p].fmt, runs[p].preset, 1, tr, te, &p1);
            char what[64];
            snprintf(what, sizeof what, "training %s/%s/%s", models[m], fmt_name(runs[p].fmt),
                     runs[p].preset);
            CHECK(at_once.n > 0, "%s: nothing observed", what);
            logs_equal(&at_once, &deferred, what);
            CHECK(p0 == 0, "%s: %d tensors pending without deferral", what, p0);
            CHECK(p1 > 0, "%s: no write was deferred", what);
            free(at_once.p);
            free(deferred.p);
        }
    fx_dataset_free(tr);
    fx_dataset_free(te);
}

int main(void)
{
    sequences();
    training();
    return test_finish("test_deferred_write");
}
