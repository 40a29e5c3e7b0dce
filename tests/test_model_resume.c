/* A sequence model resumed from a checkpoint continues bit for bit: a gpt1x16h2c8 trainer
 * saved in the middle of its first epoch and loaded into a fresh trainer ends its second
 * epoch with the parameters, training loss and per-token accuracy of a run that was never
 * interrupted, in flex16_5 (the history-based `published` preset and `robust`), dfp16 and
 * fp32. This needs the Autoflex state of the attention layers' intermediates in the checkpoint
 * (they are not among the trainer's named tensors, apart from the scores) and the epoch's
 * count of predictions (one per position) restored with it. Also: the attention scores are
 * the trainer tensor "<layer>.pre" and can be traced.
 */
#define _POSIX_C_SOURCE 200809L

#include "flexpoint_train.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NAME "test_model_resume"

enum { CTX = 8, BATCH = 4, WINDOWS = 40 }; /* 10 steps per epoch */

static void config(fx_train_config *cfg, fmt_t fmt, const char *preset)
{
    fx_train_config_default(cfg);
    snprintf(cfg->model, sizeof cfg->model, "gpt1x16h2c8");
    cfg->fmt = fmt;
    if (preset) snprintf(cfg->autoflex, sizeof cfg->autoflex, "%s", preset);
    cfg->batch_size = BATCH;
    cfg->epochs = 2;
    cfg->optimizer = FX_OPT_ADAMW;
    cfg->lr = 3e-3;
    cfg->clip_norm = 1.0;
    cfg->seed = 4;
}

static float *params_of(fx_trainer *t, int64_t *n)
{
    *n = fx_trainer_param_count(t);
    float *p = malloc((size_t)*n * sizeof *p);
    if (p && fx_trainer_get_params(t, p) != FX_OK) {
        free(p);
        p = NULL;
    }
    return p;
}

static void resume_case(const fx_dataset *tr, const fx_dataset *va, fmt_t fmt,
                        const char *preset, const char *ckpt)
{
    char what[48];
    snprintf(what, sizeof what, "%s%s%s", fmt_name(fmt), preset ? ":" : "", preset ? preset : "");
    fx_train_config cfg;
    config(&cfg, fmt, preset);
    /* uninterrupted: two epochs */
    fx_trainer *a = fx_trainer_new(&cfg, tr, va);
    CHECK(a != NULL, "%s: %s", what, flexpoint_last_error());
    if (!a) return;
    fx_epoch_metrics ma1, ma2, mb2;
    CHECK_STATUS(fx_trainer_epoch(a, &ma1), FX_OK);
    CHECK_STATUS(fx_trainer_epoch(a, &ma2), FX_OK);
    /* interrupted after 3 steps of the first epoch */
    fx_trainer *b = fx_trainer_new(&cfg, tr, va);
    for (int s = 0; s < 3 && b; s++) CHECK_STATUS(fx_trainer_step(b, NULL), FX_OK);
    CHECK_STATUS(fx_trainer_save(b, ckpt), FX_OK);
    fx_trainer_free(b);
    fx_trainer *c = fx_trainer_new(&cfg, tr, va);
    CHECK(c != NULL, "%s: %s", what, flexpoint_last_error());
    if (!c) {
        fx_trainer_free(a);
        return;
    }
    CHECK_STATUS(fx_trainer_load(c, ckpt), FX_OK);
    fx_epoch_metrics mc1;
    CHECK_STATUS(fx_trainer_epoch(c, &mc1), FX_OK);
    CHECK_STATUS(fx_trainer_epoch(c, &mb2), FX_OK);
    /* the first epoch's accuracy counts every position of the 10 steps, 3 of them before the
     * checkpoint: the same as the uninterrupted epoch's */
    CHECK(mc1.train_accuracy == ma1.train_accuracy && mc1.train_loss == ma1.train_loss,
          "%s: resumed first epoch: accuracy %.9g, loss %.9g; uninterrupted %.9g, %.9g", what,
          mc1.train_accuracy, mc1.train_loss, ma1.train_accuracy, ma1.train_loss);
    CHECK(ma1.train_accuracy > 0 && ma1.train_accuracy <= 1, "%s: accuracy %g", what,
          ma1.train_accuracy);
    CHECK(mb2.train_loss == ma2.train_loss && mb2.train_accuracy == ma2.train_accuracy &&
              mb2.test_loss == ma2.test_loss,
          "%s: second epoch after resuming: loss %.9g, accuracy %.9g, test loss %.9g; "
          "uninterrupted %.9g, %.9g, %.9g", what, mb2.train_loss, mb2.train_accuracy,
          mb2.test_loss, ma2.train_loss, ma2.train_accuracy, ma2.test_loss);
    int64_t na = 0, nc = 0;
    float *pa = params_of(a, &na), *pc = params_of(c, &nc);
    CHECK(pa && pc && na == nc && memcmp(pa, pc, (size_t)na * sizeof *pa) == 0,
          "%s: parameters after resuming differ from the uninterrupted run's", what);
    free(pa);
    free(pc);
    fx_trainer_free(a);
    fx_trainer_free(c);
}

/* The attention scores are a named tensor, traced like the others in flex16_5. */
static void scores_traced(const fx_dataset *tr)
{
    fx_train_config cfg;
    config(&cfg, FMT_FLEX16_5, NULL);
    fx_trainer *t = fx_trainer_new(&cfg, tr, NULL);
    CHECK(t != NULL, "%s", flexpoint_last_error());
    if (!t) return;
    const int i = fx_trainer_tensor_find(t, "b1.attn.pre");
    CHECK(i >= 0, "no tensor b1.attn.pre: %s", flexpoint_last_error());
    if (i >= 0) {
        tensor_t *s = fx_trainer_tensor(t, i);
        /* [batch, heads, T, T] */
        CHECK(tensor_ndim(s) == 4 && tensor_shape(s)[0] == BATCH && tensor_shape(s)[1] == 2 &&
                  tensor_shape(s)[2] == CTX && tensor_shape(s)[3] == CTX,
              "b1.attn.pre is not [%d, 2, %d, %d]", BATCH, CTX, CTX);
        CHECK_STATUS(tensor_trace_enable(s, 1), FX_OK);
        for (int k = 0; k < 2; k++) CHECK_STATUS(fx_trainer_step(t, NULL), FX_OK);
        /* one write per training step (evaluation has tensors of its own) */
        CHECK(tensor_trace_len(s) == 2, "b1.attn.pre: %lld trace records after 2 steps",
              (long long)tensor_trace_len(s));
    }
    fx_trainer_free(t);
}

int main(void)
{
    char path[] = "/tmp/fx_resume_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return test_skip(NAME, "no temporary file");
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(path);
        return test_skip(NAME, "cannot write the temporary corpus");
    }
    for (int i = 0; i < 40; i++) fputs("the cat sat on the mat. a dog ran. ", f);
    fclose(f);
    char ckpt[64];
    snprintf(ckpt, sizeof ckpt, "%s.ckpt", path);
    fx_dataset *all = NULL, *va = NULL;
    CHECK_STATUS(fx_dataset_text(path, CTX, 0.1, &all, &va), FX_OK);
    fx_dataset *tr = all ? fx_dataset_subset(all, 0, WINDOWS) : NULL;
    CHECK(tr != NULL, "%s", flexpoint_last_error());
    if (tr && va) {
        resume_case(tr, va, FMT_FLEX16_5, "published", ckpt);
        resume_case(tr, va, FMT_FLEX16_5, "robust", ckpt);
        resume_case(tr, va, FMT_DFP16, NULL, ckpt);
        resume_case(tr, va, FMT_FP32, NULL, ckpt);
        scores_traced(tr);
    }
    fx_dataset_free(tr);
    fx_dataset_free(all);
    fx_dataset_free(va);
    unlink(ckpt);
    unlink(path);
    return test_finish(NAME);
}
