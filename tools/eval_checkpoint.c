/* flexpoint-train --eval CKPT: the checkpoint's own trainer (its configuration read from the
 * file, then loaded) is the source; for each format of --formats a trainer of the same model in
 * that format receives its weights (fx_trainer_copy_weights: fp32 values, one write each) and
 * is evaluated with fp32 images in and fp32 logits out. The format the checkpoint was trained in
 * is evaluated by the loaded trainer itself, so its row is exactly what the training run
 * reported. */
#include "eval_checkpoint.h"

#include "flexpoint.h"
#include "flexpoint_train.h"

#include <string.h>
#include <time.h>

typedef struct eval_row {
    double acc, loss, seconds;
    int ok;
} eval_row;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The trainer that evaluates run r: the source itself when r is its own format and preset. */
static int eval_run(const fx_cli_run *r, const fx_train_config *src_cfg, fx_trainer *src,
                    const fx_dataset *train, const fx_dataset *test, eval_row *row)
{
    int own = r->fmt == src_cfg->fmt &&
              (r->fmt != FMT_FLEX16_5 || strcmp(r->autoflex, src_cfg->autoflex) == 0);
    fx_trainer *t = src;
    if (!own) {
        fx_train_config c = *src_cfg;
        c.fmt = r->fmt;
        snprintf(c.autoflex, sizeof c.autoflex, "%s", r->autoflex);
        /* loss scaling and master weights do not act in an evaluation; "auto" keeps a
         * configuration valid for every format */
        c.loss_scaling = -1;
        t = fx_trainer_new(&c, train, test);
        if (!t || fx_trainer_copy_weights(t, src) != FX_OK) {
            fprintf(stderr, "flexpoint-train: --eval %s: %s\n", r->label, flexpoint_last_error());
            fx_trainer_free(t);
            return -1;
        }
    }
    double t0 = now_s();
    int rc = fx_trainer_evaluate(t, test, &row->acc, &row->loss);
    row->seconds = now_s() - t0;
    if (rc) fprintf(stderr, "flexpoint-train: --eval %s: %s\n", r->label, flexpoint_last_error());
    if (t != src) fx_trainer_free(t);
    row->ok = rc == FX_OK;
    return rc ? -1 : 0;
}

int fx_cli_eval(const fx_cli_options *o, const fx_dataset *train, const fx_dataset *test,
                FILE *csv)
{
    fx_train_config cfg;
    if (fx_checkpoint_config(o->eval, &cfg) != FX_OK) {
        fprintf(stderr, "flexpoint-train: --eval: %s\n", flexpoint_last_error());
        return 1;
    }
    if (o->threads > 0) cfg.threads = o->threads;
    fx_trainer *src = fx_trainer_new(&cfg, train, test);
    if (!src || fx_trainer_load(src, o->eval) != FX_OK) {
        fprintf(stderr, "flexpoint-train: --eval: %s%s\n", flexpoint_last_error(),
                src ? " (the data options must be those of the training run)" : "");
        fx_trainer_free(src);
        return 1;
    }
    const char *trained = fmt_name((fmt_t)cfg.fmt);
    if (!o->quiet)
        fprintf(stderr, "flexpoint-train: evaluating %s (%s, trained in %s%s%s, epoch %d) on %s "
                        "(%lld test images)\n", o->eval, cfg.model, trained,
                cfg.fmt == FMT_FLEX16_5 ? ":" : "", cfg.fmt == FMT_FLEX16_5 ? cfg.autoflex : "",
                fx_trainer_epoch_index(src), fx_dataset_source(test),
                (long long)fx_dataset_len(test));
    eval_row rows[FX_CLI_MAX_RUNS];
    int failures = 0;
    fprintf(csv, "checkpoint,model,trained_format,format,test_accuracy,test_loss,seconds\n");
    for (int r = 0; r < o->nruns; r++) {
        memset(&rows[r], 0, sizeof rows[r]);
        if (eval_run(&o->runs[r], &cfg, src, train, test, &rows[r])) {
            failures++;
            continue;
        }
        fprintf(csv, "%s,%s,%s%s%s,%s,%.6f,%.6f,%.3f\n", o->eval, cfg.model, trained,
                cfg.fmt == FMT_FLEX16_5 ? ":" : "", cfg.fmt == FMT_FLEX16_5 ? cfg.autoflex : "",
                o->runs[r].label, rows[r].acc, rows[r].loss, rows[r].seconds);
    }
    fx_trainer_free(src);
    int ref = -1;
    for (int r = 0; r < o->nruns; r++)
        if (o->runs[r].fmt == FMT_FP32 && rows[r].ok) ref = r;
    printf("\n%-20s %10s %12s %10s\n", "format", "test acc", "gap to fp32", "test loss");
    for (int r = 0; r < o->nruns; r++) {
        if (!rows[r].ok) {
            printf("%-20s %10s\n", o->runs[r].label, "failed");
            continue;
        }
        char gap[32] = "-";
        if (ref >= 0) snprintf(gap, sizeof gap, "%+.2f pts", 100.0 * (rows[r].acc - rows[ref].acc));
        printf("%-20s %10.4f %12s %10.4f\n", o->runs[r].label, rows[r].acc, gap, rows[r].loss);
    }
    printf("(a %s-trained %s; CSV in %s/eval.csv)\n", trained, cfg.model, o->out);
    return failures ? 1 : 0;
}
