/* flexpoint-train --eval FILE: the source is the checkpoint's own trainer (its configuration
 * read from the file, then loaded), or an fp32 trainer of --model (a built-in name or a model
 * file) holding a weights file's weights (fx_trainer_import_weights); for each format of --formats a trainer of the same
 * model in that format receives its weights (fx_trainer_evaluate_as: fp32 values, one write
 * each) and is evaluated with fp32 images in and fp32 logits out. The format the checkpoint was
 * trained in is evaluated by the loaded trainer itself, so its row is exactly what the training
 * run reported. */
#define _POSIX_C_SOURCE 200809L
#include "eval_checkpoint.h"

#include "flexpoint.h"
#include "flexpoint_model.h"
#include "flexpoint_train.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

/* Run r evaluated with fx_trainer_evaluate_as: the checkpoint's own format, preset and policy
 * by its loaded trainer, exactly; any other by a trainer of that format holding its weights.
 * Without --policy, the row of the checkpoint's own format and preset takes the training run's
 * policy, so that row is what training reported; the other rows have no policy. */
static int eval_run(const fx_cli_run *r, const char *policy, const fx_train_config *src_cfg,
                    fx_trainer *src, const fx_dataset *test, eval_row *row)
{
    int own_format = r->fmt == src_cfg->fmt &&
                     (r->fmt != FMT_FLEX16_5 || strcmp(r->autoflex, src_cfg->autoflex) == 0);
    const char *p = policy[0] ? policy : own_format ? src_cfg->policy : "";
    double t0 = now_s();
    int rc = fx_trainer_evaluate_as(src, r->fmt, r->autoflex, p, test, &row->acc, &row->loss);
    row->seconds = now_s() - t0;
    if (rc) fprintf(stderr, "flexpoint-train: --eval %s: %s\n", r->label, flexpoint_last_error());
    row->ok = rc == FX_OK;
    return rc ? -1 : 0;
}

/* 1 when path starts with the weights file's magic, 0 otherwise (a checkpoint, or anything
 * that fx_checkpoint_config will then name). Opened without blocking, as the library opens. */
static int is_weights_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    char magic[8] = {0};
    int yes = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
              read(fd, magic, sizeof magic) == (ssize_t)sizeof magic &&
              memcmp(magic, "FXWEIGHT", 8) == 0;
    close(fd);
    return yes;
}

/* The source trainer: the checkpoint loaded into the trainer its configuration describes, or
 * an fp32 trainer of --model holding the weights file's weights. A model file (def) builds
 * the trainer in both cases: a checkpoint of a model file records only the definition's
 * identity, which fx_trainer_load compares with def's. NULL after a message. */
static fx_trainer *load_source(const fx_cli_options *o, const fx_model_def *def,
                               const fx_dataset *train, const fx_dataset *test,
                               fx_train_config *cfg, int *weights)
{
    *weights = is_weights_file(o->eval);
    if (*weights) {
        if (!o->model_given) {
            fprintf(stderr, "flexpoint-train: --eval %s: a weights file holds no model name; "
                            "give --model\n", o->eval);
            return NULL;
        }
        fx_train_config_default(cfg);
        snprintf(cfg->model, sizeof cfg->model, "%s", o->model);
        cfg->fmt = FMT_FP32;
    } else {
        if (o->model_given && !def) {
            fprintf(stderr, "flexpoint-train: --eval %s: --model NAME is for weights files; a "
                            "checkpoint names its model (a model file's checkpoint takes "
                            "--model FILE)\n", o->eval);
            return NULL;
        }
        if (fx_checkpoint_config(o->eval, cfg) != FX_OK) {
            fprintf(stderr, "flexpoint-train: --eval: %s\n", flexpoint_last_error());
            return NULL;
        }
        if (cfg->model[0] == '@' && !def) {
            fprintf(stderr, "flexpoint-train: --eval %s: the checkpoint is of a model file's "
                            "network (%.16s); give that file with --model\n", o->eval,
                    cfg->model);
            return NULL;
        }
    }
    if (o->threads > 0) cfg->threads = o->threads;
    fx_trainer *src = def ? fx_trainer_new_model(cfg, def, train, test)
                          : fx_trainer_new(cfg, train, test);
    int rc = !src ? -1
             : *weights ? fx_trainer_import_weights(src, o->eval)
                        : fx_trainer_load(src, o->eval);
    if (rc) {
        fprintf(stderr, "flexpoint-train: --eval: %s%s\n", flexpoint_last_error(),
                src && !*weights ? " (the data options must be those of the training run)" : "");
        fx_trainer_free(src);
        return NULL;
    }
    return src;
}

int fx_cli_eval(const fx_cli_options *o, const fx_model_def *def, const fx_dataset *train,
                const fx_dataset *test, FILE *csv)
{
    fx_train_config cfg;
    int weights = 0;
    fx_trainer *src = load_source(o, def, train, test, &cfg, &weights);
    if (!src) return 1;
    /* a model file's run is named by the file's label (its model name), not the identity */
    if (def) snprintf(cfg.model, sizeof cfg.model, "%s", o->model);
    /* a weights file says nothing of the format it was trained in: every format, fp32
     * included, is then evaluated from its fp32 values */
    char trained[40];
    if (weights) snprintf(trained, sizeof trained, "unknown (a weights file)");
    else
        snprintf(trained, sizeof trained, "%s%s%s", fmt_name((fmt_t)cfg.fmt),
                 cfg.fmt == FMT_FLEX16_5 ? ":" : "", cfg.fmt == FMT_FLEX16_5 ? cfg.autoflex : "");
    if (!weights && cfg.policy[0] && !o->quiet)
        fprintf(stderr, "flexpoint-train: %s was trained under the policy '%s'; %s\n", o->eval,
                cfg.policy, o->policy[0] ? "every row takes --policy instead"
                                         : "its own format's row takes it too");
    if (weights) cfg.fmt = -1;
    if (!o->quiet)
        fprintf(stderr, "flexpoint-train: evaluating %s (%s, trained in %s, epoch %d) on %s "
                        "(%lld test images)\n", o->eval, cfg.model, trained,
                fx_trainer_epoch_index(src), fx_dataset_source(test),
                (long long)fx_dataset_len(test));
    eval_row rows[FX_CLI_MAX_RUNS];
    int failures = 0;
    fprintf(csv, "checkpoint,model,trained_format,format,test_accuracy,test_loss,seconds\n");
    for (int r = 0; r < o->nruns; r++) {
        memset(&rows[r], 0, sizeof rows[r]);
        if (eval_run(&o->runs[r], o->policy, &cfg, src, test, &rows[r])) {
            failures++;
            continue;
        }
        fprintf(csv, "%s,%s,%s,%s,%.6f,%.6f,%.3f\n", o->eval, cfg.model,
                weights ? "" : trained, o->runs[r].label, rows[r].acc, rows[r].loss, rows[r].seconds);
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
    printf("(%s: %s, trained in %s; CSV in %s/eval.csv)\n", o->eval, cfg.model, trained,
           o->out);
    return failures ? 1 : 0;
}
