/* flexpoint-train: train the same network on the same data in several number formats, side by
 * side from identical starting points, and print a comparison table. A thin layer over
 * include/flexpoint_train.h. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_gpu.h"
#include "flexpoint_model.h"
#include "flexpoint_train.h"
#include "cli_options.h"
#include "eval_checkpoint.h"
#include "run_record.h"

#include <errno.h>
#include <fcntl.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef fx_cli_options options;
typedef fx_cli_run run_spec;

/* --distributed: the job's communicator and this process's rank (NULL and 0 otherwise). Rank
 * 0 writes every file and prints the progress and the summary; the other ranks train their
 * part of each batch and write nothing. */
static fx_comm *g_comm;
static int g_rank;
/* --model FILE: the definition read from it (NULL for a built-in name) */
static fx_model_def *g_def;
/* text data: the model's context T (tokens per window), 0 for images */
static int g_context;

/* A trainer of the run's model: the model file's definition, or cfg->model. */
static fx_trainer *new_trainer(const fx_train_config *cfg, const fx_dataset *train,
                               const fx_dataset *test)
{
    return g_def ? fx_trainer_new_model(cfg, g_def, train, test)
                 : fx_trainer_new(cfg, train, test);
}

/* "rank N: " in a distributed job's messages, else "". */
static const char *rank_tag(void)
{
    static char tag[32];
    if (!g_comm) return "";
    snprintf(tag, sizeof tag, "rank %d: ", g_rank);
    return tag;
}

/* A rank's failure in the middle of training, where its peers wait in a collective that it
 * will never reach: end the whole job (its message is already printed). */
static void abort_job(void)
{
    if (g_comm) {
        fprintf(stderr, "flexpoint-train: rank %d failed during training; ending every rank\n",
                g_rank);
        fx_comm_abort(g_comm, 1);
    }
}

/* Fail early, with the reason, when the requested device cannot be used. */
static int check_device(const options *o)
{
    if (o->device < 0) return 0;
    if (!flexpoint_gpu_built()) {
        fprintf(stderr, "flexpoint-train: --device cuda:%d: this build of flexpoint has no CUDA "
                        "backend (rebuild with nvcc installed), use --device cpu\n", o->device);
        return -1;
    }
    int count = flexpoint_gpu_device_count();
    if (o->device >= count) {
        if (count == 0)
            fprintf(stderr, "flexpoint-train: --device cuda:%d: no CUDA device is visible on "
                            "this machine, use --device cpu\n", o->device);
        else
            fprintf(stderr, "flexpoint-train: --device cuda:%d: there is no CUDA device %d "
                            "(%d visible: 0..%d)\n", o->device, o->device, count, count - 1);
        return -1;
    }
    if (flexpoint_gpu_set_device(o->device) != FX_OK) {
        fprintf(stderr, "flexpoint-train: --device cuda:%d: %s\n", o->device,
                flexpoint_last_error());
        return -1;
    }
    return 0;
}

/* Text data: the context T of the model (tokens per window), from a model file's input
 * shape (T) or from a built-in name (gpt<L>x<D>h<H>c<T>; "transformer" is gpt4x128h4c128, as
 * fx_model_check documents). 0 with a message for a model file that is no sequence model. */
static int model_context(const options *o)
{
    if (g_def) {
        int nd = 0;
        int64_t sh[FX_MODEL_MAX_RANK];
        if (fx_model_def_shape(g_def, "input", &nd, sh) == FX_OK && nd == 1 && sh[0] >= 1 &&
            sh[0] <= FX_DATA_MAX_CONTEXT)
            return (int)sh[0];
        fprintf(stderr, "flexpoint-train: --model %s: text data needs a sequence model, whose "
                        "input is one window of T tokens (input shape=T, T in [1, %d]) and "
                        "whose first layer is an embedding (docs/models.md)\n", o->model_file,
                FX_DATA_MAX_CONTEXT);
        return 0;
    }
    if (!strcmp(o->model, "transformer")) return 128;
    const char *c = strrchr(o->model, 'c'); /* the parser has checked the name */
    return c ? atoi(c + 1) : 0;
}

/* The data sets, subset and padded as asked. On failure both are NULL and nothing is held. */
static int load_data(const options *o, fx_dataset **train, fx_dataset **test)
{
    const char *dir = o->data_dir[0] ? o->data_dir : NULL;
    fx_dataset *parts[2] = {NULL, NULL};
    if (o->text[0]) {
        /* the last 10% held out: fortunes' tail is a few hundred kB, thousands of windows */
        if (fx_dataset_text(o->text, g_context, 0.1, &parts[0], &parts[1]) != FX_OK)
            parts[0] = parts[1] = NULL;
    } else if (!strcmp(o->data, "fashion-mnist")) {
        parts[0] = fx_dataset_fashion_mnist(dir, 1);
        parts[1] = parts[0] ? fx_dataset_fashion_mnist(dir, 0) : NULL;
    } else if (!strcmp(o->data, "cifar10")) {
        parts[0] = fx_dataset_cifar10(dir, 1);
        parts[1] = parts[0] ? fx_dataset_cifar10(dir, 0) : NULL;
    } else {
        /* one generator call, so train and test share the class templates */
        int64_t ntest = o->synthetic_n / 5 > 0 ? o->synthetic_n / 5 : 1;
        fx_dataset *all = fx_dataset_synthetic(o->synthetic_n + ntest, 3, 32, 32, 10, o->seed + 1);
        parts[0] = all ? fx_dataset_subset(all, 0, o->synthetic_n) : NULL;
        parts[1] = parts[0] ? fx_dataset_subset(all, o->synthetic_n, ntest) : NULL;
        fx_dataset_free(all);
    }
    int ok = parts[0] && parts[1];
    int64_t subset[2] = {o->train_subset, o->test_subset};
    for (int i = 0; i < 2 && ok; i++) {
        fx_dataset *d = parts[i];
        if (subset[i] > 0 && subset[i] < fx_dataset_len(d)) {
            fx_dataset *s = fx_dataset_subset(d, 0, subset[i]);
            fx_dataset_free(d);
            d = s;
        }
        if (d && o->pad > 0) {
            fx_dataset *p = fx_dataset_pad(d, o->pad);
            fx_dataset_free(d);
            d = p;
        }
        parts[i] = d;
        ok = d != NULL;
    }
    if (!ok) {
        fprintf(stderr, "flexpoint-train: %s\n", flexpoint_last_error());
        fx_dataset_free(parts[0]);
        fx_dataset_free(parts[1]);
        parts[0] = parts[1] = NULL;
    }
    *train = parts[0];
    *test = parts[1];
    return ok ? 0 : -1;
}

/* "dir/name" into dst, or -1 with a message when it does not fit (the parser's path limit
 * leaves room for every name the tool appends, so this is a guard, not a limit). */
static int join_path(char *dst, size_t n, const char *dir, const char *name)
{
    int len = snprintf(dst, n, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= n) {
        fprintf(stderr, "flexpoint-train: the path %s/%s is too long\n", dir, name);
        return -1;
    }
    return 0;
}

/* Path buffers: a parsed path plus the longest file name appended to it. */
#define PATH_BUF (FX_CLI_PATH_MAX + 256)

/* The tensors named by --trace exist in the model and have a shared-exponent format: checked
 * once, before any output is written, on a host trainer of the first flex16_5/dfp16 run built
 * for one image (tensor names depend on the model and on whether convolutions are fused, which
 * shared-exponent formats never are, not on the data's size or the device). 0, 1 (the check
 * could not be made) or 2 (an unknown name, or a float tensor). */
static int check_traces(const options *o, const fx_dataset *train)
{
    fx_train_config cfg;
    fx_train_config_default(&cfg);
    snprintf(cfg.model, sizeof cfg.model, "%s", o->model);
    snprintf(cfg.policy, sizeof cfg.policy, "%s", o->policy);
    cfg.master_weights = o->master;
    cfg.batch_size = 1;
    /* each run's configuration is built once on one image first, so that a policy that does
     * not fit the model (a pattern matching no layer, O3 with master weights) is a usage error
     * found before anything is written */
    for (int r = 0; r < o->nruns && o->policy[0]; r++) {
        cfg.fmt = o->runs[r].fmt;
        fx_dataset *one = fx_dataset_subset(train, 0, 1);
        fx_trainer *t = one ? new_trainer(&cfg, one, NULL) : NULL;
        if (!t)
            fprintf(stderr, "flexpoint-train: --policy with %s: %s\n", o->runs[r].label,
                    flexpoint_last_error());
        fx_trainer_free(t);
        fx_dataset_free(one);
        if (!t) return 2;
    }
    const run_spec *rs = NULL;
    for (int r = 0; r < o->nruns && !rs; r++)
        if (fmt_is_shared_exponent((fmt_t)o->runs[r].fmt)) rs = &o->runs[r];
    if (!rs) return 0;
    cfg.fmt = rs->fmt;
    snprintf(cfg.autoflex, sizeof cfg.autoflex, "%s", rs->autoflex);
    fx_dataset *one = fx_dataset_subset(train, 0, 1);
    fx_trainer *t = one ? new_trainer(&cfg, one, NULL) : NULL;
    if (!t) {
        fprintf(stderr, "flexpoint-train: --trace: cannot list the tensors of a %s: %s\n",
                o->model, flexpoint_last_error());
        fx_dataset_free(one);
        return 1;
    }
    int rc = 0;
    for (int k = 0; k < o->ntraces; k++) {
        const int found = fx_trainer_tensor_find(t, o->traces[k]);
        if (found >= 0) {
            /* a float tensor named with --trace (layer norm's parameters, a policy's float
             * layers) has no shared exponent to trace: a usage error now, rather than a failed
             * run later; the default list leaves such tensors out (run_one) */
            const fmt_t f = tensor_fmt(fx_trainer_tensor(t, found));
            if (fmt_is_shared_exponent(f) || !o->traces_given) continue;
            fprintf(stderr, "flexpoint-train: --trace: '%s' is %s in a %s run of a %s; traces "
                            "exist for flex16_5 and dfp16 tensors only\n", o->traces[k],
                    fmt_name(f), rs->label, o->model);
            rc = 2;
            break;
        }
        fprintf(stderr, "flexpoint-train: --trace: a %s has no tensor named '%s'; its tensors "
                        "are:", o->model, o->traces[k]);
        for (int i = 0; i < fx_trainer_tensor_count(t); i++)
            fprintf(stderr, "%s%s", i ? ", " : " ", fx_trainer_tensor_name(t, i));
        fprintf(stderr, "\n");
        rc = 2;
        break;
    }
    fx_trainer_free(t);
    fx_dataset_free(one);
    return rc;
}

static void progress(const options *o, const char *label, int epoch, int64_t step, int64_t total,
                     float loss)
{
    if (o->quiet || !isatty(2)) return;
    int width = 30, filled = total ? (int)(width * step / total) : width;
    fprintf(stderr, "\r%-18s epoch %d [", label, epoch);
    for (int i = 0; i < width; i++) fputc(i < filled ? '#' : '.', stderr);
    fprintf(stderr, "] %lld/%lld loss %.4f ", (long long)step, (long long)total, loss);
    fflush(stderr);
}

typedef struct run_result {
    double acc, loss, test_loss, seconds, ips; /* ips: tokens per second for text */
    int epochs_done;
    int failed;
} run_result;

/* An output CSV file; a failed write ends the program with its path and reason. */
typedef struct csv_file {
    FILE *f;
    char path[PATH_BUF];
} csv_file;

static int csv_open_path(csv_file *c);

static int csv_open(csv_file *c, const char *dir, const char *name)
{
    if (join_path(c->path, sizeof c->path, dir, name)) return -1;
    return csv_open_path(c);
}

/* Open c->path for writing. */
static int csv_open_path(csv_file *c)
{
    /* O_NONBLOCK: a FIFO under the name (no reader) fails at once instead of blocking the
     * run; anything but a regular file is refused, and the flag is cleared for the writes */
    int fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0644);
    struct stat st;
    const char *why = NULL;
    if (fd < 0) {
        why = errno == ENXIO ? "not a regular file (a FIFO)" : strerror(errno);
    } else if (fstat(fd, &st) != 0) {
        why = strerror(errno);
    } else if (!S_ISREG(st.st_mode)) {
        why = "not a regular file";
    } else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 ||
               !(c->f = fdopen(fd, "w"))) {
        why = strerror(errno);
    }
    if (why) {
        if (fd >= 0) close(fd);
        c->f = NULL;
        fprintf(stderr, "flexpoint-train: cannot write %s: %s\n", c->path, why);
        return -1;
    }
    return 0;
}

/* Everything written so far has reached the file. */
static int csv_flush(csv_file *c)
{
    if (fflush(c->f) != 0 || ferror(c->f)) {
        fprintf(stderr, "flexpoint-train: cannot write %s: %s\n", c->path, strerror(errno));
        return -1;
    }
    return 0;
}

/* The output files of a rank other than 0: written to, never kept. */
static int csv_discard(csv_file *c)
{
    snprintf(c->path, sizeof c->path, "/dev/null");
    c->f = fopen(c->path, "w");
    if (!c->f) fprintf(stderr, "flexpoint-train: cannot open /dev/null: %s\n", strerror(errno));
    return c->f ? 0 : -1;
}

/* Close; -1 with a message if anything written was lost. Safe on a file never opened. */
static int csv_close(csv_file *c)
{
    if (!c->f) return 0;
    int bad = ferror(c->f);
    int err = errno;
    if (fclose(c->f) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    c->f = NULL;
    if (bad) fprintf(stderr, "flexpoint-train: cannot write %s: %s\n", c->path, strerror(err));
    return bad ? -1 : 0;
}

static void safe_name(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src);
    for (char *p = dst; *p; p++)
        if (*p == ':' || *p == '/') *p = '_';
}

static const char *const class_names[FX_TENSOR_CLASSES] = {"weights", "activations",
                                                           "gradients"};

/* Warnings for what the loss does not show (fx_trainer_health, FX_HEALTH_WARN_FRACTION). */
static void warn_health(const fx_trainer *t, const run_spec *rs, int epoch,
                        const fx_train_health *h)
{
    for (int c = 0; c < FX_TENSOR_CLASSES && h->measured; c++) {
        if (h->worst_saturated_fraction[c] > FX_HEALTH_WARN_FRACTION)
            fprintf(stderr, "flexpoint-train: warning: %s epoch %d: %s saturated: %lld of %lld "
                            "elements written (%s: %.1f%% of its elements)\n", rs->label, epoch,
                    class_names[c], (long long)h->saturated[c], (long long)h->written[c],
                    fx_trainer_tensor_name(t, h->worst_saturated[c]),
                    100.0 * h->worst_saturated_fraction[c]);
        if (h->worst_zeroed_fraction[c] > FX_HEALTH_WARN_FRACTION)
            fprintf(stderr, "flexpoint-train: warning: %s epoch %d: %s underflowed: %lld of %lld "
                            "writes kept no nonzero value, %lld of %lld elements rounded to 0 "
                            "(%s: %.1f%% of its writes zeroed)\n", rs->label, epoch,
                    class_names[c], (long long)h->zeroed[c], (long long)h->writes[c],
                    (long long)h->underflow[c], (long long)h->written[c],
                    fx_trainer_tensor_name(t, h->worst_zeroed[c]),
                    100.0 * h->worst_zeroed_fraction[c]);
    }
    if (h->nonfinite_weights > 0)
        fprintf(stderr, "flexpoint-train: warning: %s epoch %d: %lld of %lld weights are NaN or "
                        "Inf\n", rs->label, epoch, (long long)h->nonfinite_weights,
                (long long)h->params);
}

/* The columns epochs.csv appends for fx_train_health (empty counts where not measured). */
static void health_columns(FILE *f, const fx_train_health *h)
{
    for (int c = 0; c < FX_TENSOR_CLASSES; c++) {
        if (h->measured)
            fprintf(f, ",%lld,%lld,%lld,%lld", (long long)h->written[c],
                    (long long)h->saturated[c], (long long)h->underflow[c],
                    (long long)h->zeroed[c]);
        else
            fputs(",,,,", f);
    }
    fprintf(f, ",%lld", (long long)h->nonfinite_weights);
}

/* acc += b - a, field by field (the int16 GEMM's counts over one step) */
static void gemm_stats_add(flexpoint_gemm_i16_stats_t *acc, const flexpoint_gemm_i16_stats_t *a,
                           const flexpoint_gemm_i16_stats_t *b)
{
    acc->fast_tiles += b->fast_tiles - a->fast_tiles;
    acc->anydata_tiles += b->anydata_tiles - a->anydata_tiles;
    acc->fast_pairs += b->fast_pairs - a->fast_pairs;
    acc->anydata_pairs += b->anydata_pairs - a->anydata_pairs;
    acc->fast_chains += b->fast_chains - a->fast_chains;
}

/* --profile of an integer run: where its int16 GEMM work went over the training steps (gs:
 * their counts, flexpoint_gemm_i16_stats_t): the units on the fast kernel and on the any-data
 * kernels per step, the any-data share of units and of pairs, and the fast units' pairs per
 * int32 chain. Printed (unless quiet) and written to path as one CSV row. Nothing for a run
 * without such products. 0, or -1 after a message. */
static int write_gemm_profile(const run_spec *rs, const char *path,
                              const flexpoint_gemm_i16_stats_t *gs, int64_t steps, int quiet)
{
    const int64_t units = gs->fast_tiles + gs->anydata_tiles;
    const int64_t pairs = gs->fast_pairs + gs->anydata_pairs;
    if (units <= 0 || steps <= 0) return 0;
    const double any_units = (double)gs->anydata_tiles / (double)units;
    const double any_pairs = pairs > 0 ? (double)gs->anydata_pairs / (double)pairs : 0;
    const double chain = gs->fast_chains > 0 ? (double)gs->fast_pairs / (double)gs->fast_chains
                                             : 0;
    csv_file c = {NULL, ""};
    snprintf(c.path, sizeof c.path, "%s", path);
    if (csv_open_path(&c)) return -1;
    fprintf(c.f, "run,steps,fast_units_per_step,anydata_units_per_step,anydata_unit_share,"
                 "anydata_pair_share,fast_pairs_per_chain\n%s,%lld,%.1f,%.1f,%.4f,%.4f,%.2f\n",
            rs->label, (long long)steps, (double)gs->fast_tiles / (double)steps,
            (double)gs->anydata_tiles / (double)steps, any_units, any_pairs, chain);
    if (!quiet)
        printf("int16 GEMM: %.0f tile x K-block units a step, %.1f%% of them (%.1f%% of their "
               "pairs) on an any-data kernel; the fast ones ran %.1f pairs between folds\n",
               (double)units / (double)steps, 100 * any_units, 100 * any_pairs, chain);
    return csv_close(&c);
}

/* --profile: the run's phase and per-layer times and their split into conversions, rounding
 * and Autoflex bookkeeping (as shares of the step), printed (unless quiet) and written to path
 * as CSV (one row per layer, then one per phase and one for the whole step); warm_left_out: the
 * run's first step was left out. 0, or -1 after a message. */
static int write_profile(const fx_trainer *t, const run_spec *rs, const char *path, int quiet,
                         int warm_left_out)
{
    fx_train_profile p;
    fx_train_profile_split sp;
    if (fx_trainer_profile(t, &p) != FX_OK || p.steps == 0) return 0;
    if (fx_trainer_profile_split(t, &sp) != FX_OK) return 0;
    csv_file c = {NULL, ""};
    snprintf(c.path, sizeof c.path, "%s", path);
    if (csv_open_path(&c)) return -1;
    const double per = 1e3 / (double)p.steps, tot = p.total_s > 0 ? p.total_s : 1;
    fprintf(c.f, "row,kind,forward_ms_per_step,backward_ms_per_step,share_of_step,"
                 "conversion_ms_per_step,rounding_ms_per_step,autoflex_ms_per_step,"
                 "conversion_share,rounding_share,autoflex_share\n");
    if (!quiet)
        printf("\nprofile of %s: %lld steps%s, %.2f ms a step; conversions, rounding and "
               "Autoflex as shares of the step\n%-16s %-10s %10s %10s %7s %7s %7s %7s\n",
               rs->label, (long long)p.steps, warm_left_out ? " after a first one left out" : "",
               per * p.total_s, "layer", "kind", "fwd ms",
               "bwd ms", "share", "conv", "round", "autoflex");
    for (int i = 0; i < fx_trainer_layer_count(t); i++) {
        fx_layer_profile lp;
        fx_time_split f, b;
        if (fx_trainer_layer_profile(t, i, &lp) != FX_OK ||
            fx_trainer_layer_profile_split(t, i, &f, &b) != FX_OK)
            break;
        double share = (lp.forward_s + lp.backward_s) / tot;
        const double cv = f.conversion_s + b.conversion_s, rd = f.rounding_s + b.rounding_s,
                     af = f.autoflex_s + b.autoflex_s;
        fprintf(c.f, "%s,%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", lp.name, lp.kind,
                per * lp.forward_s, per * lp.backward_s, share, per * cv, per * rd, per * af,
                cv / tot, rd / tot, af / tot);
        if (!quiet)
            printf("%-16s %-10s %10.3f %10.3f %6.1f%% %6.1f%% %6.1f%% %6.1f%%\n", lp.name,
                   lp.kind, per * lp.forward_s, per * lp.backward_s, 100 * share, 100 * cv / tot,
                   100 * rd / tot, 100 * af / tot);
    }
    double cast_s = 0;
    for (int i = 0; i < fx_trainer_layer_count(t); i++) {
        fx_layer_profile lp;
        if (fx_trainer_layer_profile(t, i, &lp) == FX_OK && !strcmp(lp.kind, "cast"))
            cast_s += lp.forward_s + lp.backward_s;
    }
    if (!quiet && fx_trainer_cast_count(t) > 0)
        printf("%d casts: %.3f ms a step, %.1f%% of the step\n", fx_trainer_cast_count(t),
               per * cast_s, 100 * cast_s / tot);
    const char *phases[] = {"data", "loss", "update", "other", "step"};
    double other = p.total_s - p.data_s - p.forward_s - p.loss_s - p.backward_s - p.update_s;
    const double secs[] = {p.data_s, p.loss_s, p.update_s, other > 0 ? other : 0, p.total_s};
    const fx_time_split none = {0, 0, 0};
    const fx_time_split *spl[] = {&sp.data, &sp.loss, &sp.update, &none, &sp.total};
    for (int k = 0; k < 5; k++) {
        const fx_time_split *x = spl[k];
        fprintf(c.f, "%s,phase,%.4f,,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", phases[k],
                per * secs[k], secs[k] / tot, per * x->conversion_s, per * x->rounding_s,
                per * x->autoflex_s, x->conversion_s / tot, x->rounding_s / tot,
                x->autoflex_s / tot);
        if (!quiet)
            printf("%-16s %-10s %10.3f %10s %6.1f%% %6.1f%% %6.1f%% %6.1f%%\n", phases[k],
                   "phase", per * secs[k], "", 100 * secs[k] / tot, 100 * x->conversion_s / tot,
                   100 * x->rounding_s / tot, 100 * x->autoflex_s / tot);
    }
    return csv_close(&c);
}

/* Text data: the bytes the run's model writes after a fixed prompt, one at a time from its
 * logits (fx_trainer_predict on t, a trainer of batch 1 holding the run's weights in its
 * format, so that each byte costs one window's forward pass, not a batch's) at temperature
 * 0.8, drawn from a generator seeded with --seed, so that a run's sample is reproducible. The window is
 * the last T tokens; a prompt shorter than T fills its first positions (the causal mask makes
 * the rest irrelevant to the position read). out receives the prompt and SAMPLE_LEN bytes.
 * 0, or -1 after a message. */
#define SAMPLE_PROMPT "The "
#define SAMPLE_LEN 200
static int sample_text(const options *o, const run_spec *rs, fx_trainer *t,
                       const fx_dataset *train, char *out, size_t cap)
{
    uint8_t vocab[256];
    const int V = fx_dataset_vocab(train, vocab), T = g_context;
    int tok_of[256];
    for (int b = 0; b < 256; b++) tok_of[b] = -1;
    for (int i = 0; i < V; i++) tok_of[vocab[i]] = i;
    int32_t seq[sizeof SAMPLE_PROMPT + SAMPLE_LEN];
    int len = 0;
    for (const char *p = SAMPLE_PROMPT; *p; p++) /* bytes the text lacks are left out */
        if (tok_of[(uint8_t)*p] >= 0) seq[len++] = tok_of[(uint8_t)*p];
    if (len == 0) seq[len++] = 0;
    const int prompt = len;
    float *x = calloc((size_t)T, sizeof *x), *z = malloc((size_t)T * V * sizeof *z);
    int rc = 0;
    if (!x || !z) {
        fprintf(stderr, "flexpoint-train: %s: sampling text: out of memory\n", rs->label);
        rc = -1;
    }
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ULL + 0x2545f4914f6cdd1dULL;
    while (!rc && len < prompt + SAMPLE_LEN) {
        const int start = len > T ? len - T : 0, n = len - start;
        for (int i = 0; i < T; i++) x[i] = i < n ? (float)seq[start + i] : 0.0f;
        if (fx_trainer_predict(t, x, 1, z) != FX_OK) {
            fprintf(stderr, "flexpoint-train: %s: sampling text: %s\n", rs->label,
                    flexpoint_last_error());
            rc = -1;
            break;
        }
        const float *row = z + (size_t)(n - 1) * V;
        double mx = row[0], sum = 0, p[256];
        for (int j = 1; j < V; j++) mx = row[j] > mx ? row[j] : mx;
        for (int j = 0; j < V; j++) sum += p[j] = exp(((double)row[j] - mx) / 0.8);
        rng ^= rng >> 12; /* xorshift64* */
        rng ^= rng << 25;
        rng ^= rng >> 27;
        double u = (double)((rng * 0x2545f4914f6cdd1dULL) >> 11) * 0x1.0p-53 * sum;
        int pick = V - 1;
        for (int j = 0; j < V; j++)
            if ((u -= p[j]) < 0) {
                pick = j;
                break;
            }
        seq[len++] = pick;
    }
    size_t k = 0;
    for (int i = 0; i < len && k + 1 < cap; i++) out[k++] = (char)vocab[seq[i]];
    out[k] = '\0';
    free(x);
    free(z);
    return rc;
}

/* text data: samples.txt in --out, which each run appends its sample to (NULL for images) */
static csv_file *g_samples;
/* --eval-every: curve.csv in --out (rank 0; NULL otherwise) */
static csv_file *g_curve;

/* --eval-every: the held-out loss after global step g, a row of curve.csv. Every rank
 * evaluates (a distributed evaluation is collective); rank 0 writes. Evaluation has tensors of
 * its own, so the training that follows is the same as without it. */
static int curve_point(const run_spec *rs, fx_trainer *t, const fx_dataset *test, int epoch,
                       int64_t g)
{
    double acc = 0, loss = 0;
    int rc = fx_trainer_evaluate(t, test, &acc, &loss);
    if (rc || !g_curve) return rc;
    fprintf(g_curve->f, "%s,%lld,%d,%.6f,%.6f", rs->label, (long long)g, epoch, loss, acc);
    if (g_context) fprintf(g_curve->f, ",%.6f", loss / log(2.0));
    fputc('\n', g_curve->f);
    return FX_OK;
}

/* One run. 0, or -1 after its message is printed; *fatal is set when an output file failed
 * (no later run could write its results either). */
static int run_one(const options *o, const run_spec *rs, const fx_dataset *train,
                   const fx_dataset *test, csv_file *epochs_csv, csv_file *steps_csv,
                   csv_file *traffic_csv, run_result *res, int *fatal)
{
    memset(res, 0, sizeof *res);
    fx_train_config cfg;
    fx_train_config_default(&cfg);
    snprintf(cfg.model, sizeof cfg.model, "%s", o->model);
    cfg.fmt = rs->fmt;
    cfg.master_weights = o->master;
    cfg.loss_scaling = o->loss_scaling;
    cfg.stochastic_rounding = o->stochastic;
    snprintf(cfg.autoflex, sizeof cfg.autoflex, "%s", rs->autoflex);
    cfg.batch_size = o->batch;
    cfg.lr = o->lr;
    cfg.momentum = o->momentum;
    cfg.weight_decay = o->wd;
    cfg.lr_schedule = o->schedule;
    cfg.epochs = o->epochs;
    cfg.augment = o->augment;
    cfg.seed = o->seed;
    cfg.threads = o->threads;
    cfg.device = o->device;
    cfg.optimizer = o->optimizer;
    cfg.adam_beta1 = o->adam_beta1;
    cfg.adam_beta2 = o->adam_beta2;
    cfg.adam_eps = o->adam_eps;
    cfg.clip_norm = o->clip_norm;
    cfg.loss_scale_init = o->ls_init;
    cfg.loss_scale_growth = o->ls_growth;
    cfg.loss_scale_backoff = o->ls_backoff;
    cfg.loss_scale_interval = o->ls_interval;
    cfg.loss_scale_min = o->ls_min;
    snprintf(cfg.policy, sizeof cfg.policy, "%s", o->policy);
    /* with --distributed a collective: every rank gets a trainer, or none does */
    fx_trainer *t = g_def ? new_trainer(&cfg, train, test)
                          : fx_trainer_new_distributed(&cfg, train, test, g_comm);
    if (!t) {
        fprintf(stderr, "flexpoint-train: %s%s: %s\n", rank_tag(), rs->label,
                flexpoint_last_error());
        return -1;
    }
    char safe[64], path[PATH_BUF] = "", file[128];
    safe_name(safe, sizeof safe, rs->label);
    int rc = 0;
    if (o->profile && fx_trainer_profile_enable(t, 1) != FX_OK) {
        fprintf(stderr, "flexpoint-train: %s: %s\n", rs->label, flexpoint_last_error());
        fx_trainer_free(t);
        return -1;
    }
    /* per-write traces of chosen tensors (shared-exponent formats; names checked up front) */
    int traced[FX_CLI_MAX_TRACES], ntraced = 0;
    if (fmt_is_shared_exponent((fmt_t)rs->fmt))
        for (int k = 0; k < o->ntraces && !rc; k++) {
            int i = fx_trainer_tensor_find(t, o->traces[k]);
            /* a policy may put a default-traced tensor in a float format: leave it out (a
             * tensor named with --trace is still an error) */
            if (i >= 0 && !o->traces_given &&
                !fmt_is_shared_exponent(tensor_fmt(fx_trainer_tensor(t, i))))
                continue;
            if (i < 0 || tensor_trace_enable(fx_trainer_tensor(t, i), 1) != FX_OK) {
                fprintf(stderr, "flexpoint-train: %s: --trace %s: %s\n", rs->label,
                        o->traces[k], flexpoint_last_error());
                rc = -1;
            } else {
                traced[ntraced++] = i;
            }
        }
    if (!rc && o->ckpt_dir[0]) {
        snprintf(file, sizeof file, "%s.ckpt", safe);
        if (join_path(path, sizeof path, o->ckpt_dir, file)) rc = -1;
    }
    int resume = !rc && o->resume && access(path, R_OK) == 0;
    if (!rc && o->resume && g_comm) {
        /* every rank loads, or none: a checkpoint that only some ranks see (a folder that is
         * not shared between nodes) would leave the others waiting in the load */
        int first = -1;
        const int all = fx_comm_agree(g_comm, resume ? FX_OK : FX_EIO, &first) == FX_OK;
        const int none = fx_comm_agree(g_comm, resume ? FX_EIO : FX_OK, NULL) == FX_OK;
        if (!all && !none) {
            fprintf(stderr, "flexpoint-train: %s%s: cannot resume: the checkpoint (%s here) "
                            "is readable on some ranks but not on rank %d (--checkpoint-dir "
                            "must be shared)\n", rank_tag(), rs->label, path, first);
            rc = -1;
        }
        resume = all;
    }
    if (!rc && resume) {
        if (fx_trainer_load(t, path) != FX_OK) { /* every rank fails together */
            fprintf(stderr, "flexpoint-train: %s%s: cannot resume: %s\n", rank_tag(), rs->label,
                    flexpoint_last_error());
            rc = -1;
        } else if (!o->quiet) {
            fprintf(stderr, "%s: resumed from %s at epoch %d\n", rs->label, path,
                    fx_trainer_epoch_index(t));
        }
    }
    int status = 0; /* a library failure, reported below with its message */
    double cast_s0 = fx_trainer_cast_seconds(t); /* the casts' time before this epoch */
    flexpoint_gemm_i16_stats_t gemm_steps = {0, 0, 0, 0, 0}; /* --profile: the steps' share */
    int warmed = 0; /* --profile: the run's first step done (and left out) */
    for (int e = fx_trainer_epoch_index(t); e < o->epochs && !rc && !status; e++) {
        /* step by step, for the progress bar and the sampled loss-scale / loss log */
        fx_epoch_metrics mt;
        int64_t total = fx_dataset_len(train) / o->batch;
        for (int64_t s = 0; s < total && !status; s++) {
            float loss = 0;
            if (fx_trainer_epoch_index(t) > e) break;
            flexpoint_gemm_i16_stats_t g0, g1;
            if (o->profile) flexpoint_gemm_i16_stats(&g0);
            status = fx_trainer_step(t, &loss);
            if (o->profile) {
                flexpoint_gemm_i16_stats(&g1);
                gemm_stats_add(&gemm_steps, &g0, &g1);
            }
            /* --profile leaves out the run's first step where more follow: it alone touches
             * every buffer for the first time (page faults, two threads contending for the
             * page tables), which made a short run's profile of ResNet-20 show its ReLU
             * gradients slower at two threads than at one, and belongs to no later step */
            if (o->profile && !status && !warmed && (s + 1 < total || e + 1 < o->epochs)) {
                warmed = 1;
                status = fx_trainer_profile_enable(t, 1);
                memset(&gemm_steps, 0, sizeof gemm_steps);
            }
            int64_t g = fx_trainer_global_step(t);
            if (!status && (g % 10 == 0 || s + 1 == total))
                fprintf(steps_csv->f, "%s,%lld,%d,%.6g,%.6g\n", rs->label, (long long)g, e + 1,
                        loss, fx_trainer_loss_scaler(t)->scale);
            if (!status && o->eval_every && g % o->eval_every == 0)
                status = curve_point(rs, t, test, e + 1, g);
            if (!status && (s % 5 == 0 || s + 1 == total))
                progress(o, rs->label, e + 1, s + 1, total, loss);
        }
        fx_train_health h;
        if (!status) status = fx_trainer_epoch(t, &mt);
        if (!status) status = fx_trainer_health(t, &h);
        if (status) break;
        if (!o->quiet) {
            if (isatty(2)) fprintf(stderr, "\r%-70s\r", "");
            if (g_context)
                fprintf(stderr, "%-18s epoch %d/%d  loss %.4f  val loss %.4f  %.3f bits/char  "
                                "%.1f s  %.0f tokens/s%s\n", rs->label, mt.epoch, o->epochs,
                        mt.train_loss, mt.test_loss, mt.test_loss / log(2.0), mt.seconds,
                        mt.images_per_second * g_context,
                        mt.skipped_steps ? "  (steps skipped by the loss scaler)" : "");
            else
                fprintf(stderr, "%-18s epoch %d/%d  loss %.4f  train acc %.4f  test acc %.4f  "
                                "%.1f s  %.0f img/s%s\n", rs->label, mt.epoch, o->epochs,
                        mt.train_loss, mt.train_accuracy, mt.test_accuracy, mt.seconds,
                        mt.images_per_second,
                        mt.skipped_steps ? "  (steps skipped by the loss scaler)" : "");
        }
        /* text: images_per_second holds tokens per second (windows x T) */
        const double ips = mt.images_per_second * (g_context ? g_context : 1);
        if (g_rank == 0) warn_health(t, rs, mt.epoch, &h);
        fprintf(epochs_csv->f, "%s,%s,%d,%.6f,%.6f,%.6f,%.6f,%.3f,%.1f,%.6g,%lld,%lld", rs->label,
                o->model, mt.epoch, mt.train_loss, mt.train_accuracy, mt.test_loss,
                mt.test_accuracy, mt.seconds, ips, mt.loss_scale,
                (long long)mt.skipped_steps, (long long)mt.nonfinite_losses);
        health_columns(epochs_csv->f, &h);
        double cast_s = fx_trainer_cast_seconds(t);
        fprintf(epochs_csv->f, ",%d,%.3f", fx_trainer_cast_count(t), cast_s - cast_s0);
        /* text: the held-out loss in bits per character (a token is a byte) */
        if (g_context) fprintf(epochs_csv->f, ",%.6f", mt.test_loss / log(2.0));
        fputc('\n', epochs_csv->f);
        if (!o->quiet && fx_trainer_cast_count(t) > 0)
            fprintf(stderr, "%-18s %d casts: %.3f s, %.1f%% of the epoch's training\n",
                    rs->label, fx_trainer_cast_count(t), cast_s - cast_s0,
                    mt.seconds > 0 ? 100.0 * (cast_s - cast_s0) / mt.seconds : 0.0);
        cast_s0 = cast_s;
        if (csv_flush(epochs_csv) || csv_flush(steps_csv) || (g_curve && csv_flush(g_curve))) {
            *fatal = 1;
            rc = -1;
            break;
        }
        res->acc = mt.test_accuracy;
        res->loss = mt.train_loss;
        res->seconds += mt.seconds;
        res->test_loss = mt.test_loss;
        res->ips = ips;
        res->epochs_done++;
        /* distributed: rank 0 writes, every rank returns its status */
        if (o->ckpt_dir[0] && fx_trainer_save(t, path) != FX_OK) {
            fprintf(stderr, "flexpoint-train: %s%s: %s\n", rank_tag(), rs->label,
                    flexpoint_last_error());
            rc = -1;
        }
    }
    if (status) {
        fprintf(stderr, "flexpoint-train: %s%s: %s\n", rank_tag(), rs->label,
                flexpoint_last_error());
        abort_job();
        rc = -1;
    }
    if (*fatal) abort_job(); /* rank 0's results cannot be written: the peers cannot know */
    fx_dist_traffic tr;
    if (g_comm && !rc && fx_trainer_traffic(t, &tr) == FX_OK && tr.steps > 0) {
        /* bytes per step this rank handed to MPI (the same on every rank: the split is even) */
        const double st = (double)tr.steps;
        const int64_t total =
            tr.gradient_bytes + tr.statistics_bytes + tr.gather_bytes + tr.control_bytes;
        fprintf(traffic_csv->f, "%s,%d,%lld,%.0f,%.0f,%.0f,%.0f,%.0f\n", rs->label,
                fx_comm_size(g_comm), (long long)tr.steps, tr.gradient_bytes / st,
                tr.statistics_bytes / st, tr.gather_bytes / st, tr.control_bytes / st,
                total / st);
        if (!o->quiet)
            fprintf(stderr, "%-18s %d ranks: %.0f bytes per rank per step (gradients %.0f, "
                            "exponent statistics %.0f, gathered rows %.0f, control %.0f)\n",
                    rs->label, fx_comm_size(g_comm), total / st, tr.gradient_bytes / st,
                    tr.statistics_bytes / st, tr.gather_bytes / st, tr.control_bytes / st);
        if (csv_flush(traffic_csv)) *fatal = 1;
    }
    for (int k = 0; k < ntraced && !*fatal && g_rank == 0; k++) {
        snprintf(file, sizeof file, "trace_%s_%s.csv", safe, fx_trainer_tensor_name(t, traced[k]));
        if (join_path(path, sizeof path, o->out, file) ||
            tensor_trace_write_csv(fx_trainer_tensor(t, traced[k]), path) != FX_OK) {
            fprintf(stderr, "flexpoint-train: %s: %s\n", rs->label, flexpoint_last_error());
            rc = -1;
        }
    }
    if (o->profile && !status && !*fatal && g_rank == 0) {
        snprintf(file, sizeof file, "profile_%s.csv", safe);
        if (join_path(path, sizeof path, o->out, file) ||
            write_profile(t, rs, path, o->quiet, warmed))
            rc = -1;
        fx_train_profile pr;
        snprintf(file, sizeof file, "gemm_i16_%s.csv", safe);
        if (!rc && fx_trainer_profile(t, &pr) == FX_OK &&
            (join_path(path, sizeof path, o->out, file) ||
             write_gemm_profile(rs, path, &gemm_steps, pr.steps, o->quiet)))
            rc = -1;
    }
    if (g_samples && !status && !*fatal && !rc && res->epochs_done > 0) {
        char text[sizeof SAMPLE_PROMPT + SAMPLE_LEN + 1];
        fx_train_config one = cfg;
        one.batch_size = 1;
        fx_trainer *s1 = new_trainer(&one, train, NULL);
        if (!s1 || fx_trainer_copy_weights(s1, t) != FX_OK) {
            fprintf(stderr, "flexpoint-train: %s: sampling text: %s\n", rs->label,
                    flexpoint_last_error());
            rc = -1;
        } else if (sample_text(o, rs, s1, train, text, sizeof text)) {
            rc = -1;
        } else {
            fprintf(g_samples->f, "== %s (%s, epoch %d, val loss %.4f) ==\n%s\n\n", rs->label,
                    o->model, res->epochs_done, res->test_loss, text);
            if (csv_flush(g_samples)) *fatal = 1;
            if (!o->quiet) printf("--- %s: %s\n", rs->label, text);
        }
        fx_trainer_free(s1);
    }
    if (o->export_weights && !status && !*fatal && g_rank == 0) {
        snprintf(file, sizeof file, "weights_%s.fxw", safe);
        if (join_path(path, sizeof path, o->out, file) ||
            fx_trainer_export_weights(t, path) != FX_OK) {
            fprintf(stderr, "flexpoint-train: %s: %s\n", rs->label, flexpoint_last_error());
            rc = -1;
        }
    }
    fx_trainer_free(t);
    return rc;
}

/* --policy-file: rules on lines (or separated by ';'), '#' to the end of a line a comment;
 * joined with "; " into o->policy. A usage error (exit 2) when the file cannot be read, is not
 * a regular file, or its rules do not fit the library's 127 bytes. */
static int read_policy_file(options *o)
{
    int fd = open(o->policy_file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    char buf[4096];
    ssize_t n = -1;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = read(fd, buf, sizeof buf - 1);
    int was_regular = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (fd >= 0) close(fd);
    if (n < 0 || (size_t)n == sizeof buf - 1) {
        fprintf(stderr, "flexpoint-train: --policy-file %s: %s\n", o->policy_file,
                fd < 0 ? strerror(errno)
                : !was_regular ? "not a regular file"
                : n < 0        ? strerror(errno)
                               : "longer than 4 KB");
        return -1;
    }
    buf[n] = '\0';
    char out[sizeof o->policy] = "";
    size_t used = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        while (*line == ' ' || *line == '\t' || *line == '\r') line++;
        size_t len = strlen(line);
        while (len && (line[len - 1] == ' ' || line[len - 1] == '\t' || line[len - 1] == '\r' ||
                       line[len - 1] == ';'))
            line[--len] = '\0';
        if (!len) continue;
        int w = snprintf(out + used, sizeof out - used, "%s%s", used ? "; " : "", line);
        if (w < 0 || (size_t)w >= sizeof out - used) {
            fprintf(stderr, "flexpoint-train: --policy-file %s: the rules are longer than %zu "
                            "bytes\n", o->policy_file, sizeof out - 1);
            return -1;
        }
        used += (size_t)w;
    }
    if (!used) {
        fprintf(stderr, "flexpoint-train: --policy-file %s: no rule in the file\n",
                o->policy_file);
        return -1;
    }
    memcpy(o->policy, out, sizeof out);
    return 0;
}

/* mkdir -p: every missing component of dir is created, so "--out results/presets" works in a
 * fresh checkout. A component that exists but is not a directory is reported by name. */
static int make_dir(const char *dir)
{
    char path[FX_CLI_PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) {
        fprintf(stderr, "flexpoint-train: cannot create '%s': path empty or too long\n", dir);
        return -1;
    }
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        char saved = path[i];
        path[i] = '\0';
        struct stat st;
        if (mkdir(path, 0755) != 0) {
            int err = errno;
            if (err != EEXIST || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
                fprintf(stderr, "flexpoint-train: cannot create %s: %s\n", path,
                        err == EEXIST ? "exists and is not a directory" : strerror(err));
                return -1;
            }
        }
        path[i] = saved;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static options o; /* some 20 KB of paths: not on the stack */
    char msg[FX_CLI_MSG_MAX];
    int st = fx_cli_parse(argc, argv, &o, msg, sizeof msg);
    if (st == FX_CLI_HELP) {
        fputs(fx_cli_usage(), stdout);
        return 0;
    }
    if (st != FX_CLI_OK) {
        fprintf(stderr, "flexpoint-train: %s\n", msg);
        return 2;
    }
    if (o.policy_file[0] && read_policy_file(&o)) return 2;
    if (o.model_file[0] && fx_model_def_load(o.model_file, &g_def) != FX_OK) {
        fprintf(stderr, "flexpoint-train: --model: %s\n", flexpoint_last_error());
        return 1;
    }
    if (o.text[0] && (g_context = model_context(&o)) == 0) {
        fx_model_def_free(g_def);
        return 1;
    }
    if (check_device(&o)) return 1; /* before loading data or creating directories */
    if (o.distributed) {
        if (fx_comm_init(&argc, &argv, &g_comm) != FX_OK) {
            fprintf(stderr, "flexpoint-train: --distributed: %s\n", flexpoint_last_error());
            return 1;
        }
        g_rank = fx_comm_rank(g_comm);
        if (g_rank != 0) o.quiet = 1; /* one progress report: rank 0's */
    }
#ifdef __GLIBC__
    /* Training allocates and frees the same large scratch buffers every step. Keep them in the
     * heap instead of fresh mmap()s, which would page-fault them in again each time. */
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
    mallopt(M_TRIM_THRESHOLD, 512 * 1024 * 1024);
#endif
    if (o.threads > 0) flexpoint_set_num_threads(o.threads);
    fx_dataset *train = NULL, *test = NULL;
    csv_file ec = {NULL, ""}, sc = {NULL, ""}, dc = {NULL, ""}, xc = {NULL, ""},
             cc = {NULL, ""};
    run_result res[FX_CLI_MAX_RUNS];
    int status = 1, failures = 0, fatal = 0, failed_rank = -1;
    int loaded = load_data(&o, &train, &test) == 0;
    /* every rank loads the data itself; all go on, or all stop with the failing rank named */
    if (g_comm && fx_comm_agree(g_comm, loaded ? FX_OK : FX_EIO, &failed_rank) != FX_OK) {
        if (loaded)
            fprintf(stderr, "flexpoint-train: rank %d: stopping: rank %d could not load the "
                            "data\n", g_rank, failed_rank);
        else
            fprintf(stderr, "flexpoint-train: rank %d: could not load the data; stopping every "
                            "rank\n", g_rank);
        goto done;
    }
    if (!loaded) goto done;
    if (o.eval[0]) {
        if (make_dir(o.out) || csv_open(&ec, o.out, "eval.csv")) goto done;
        status = fx_cli_eval(&o, g_def, train, test, ec.f);
        if (csv_close(&ec) != 0) status = 1;
        goto done;
    }
    /* an unknown --trace name is a usage error, found before anything is written */
    int tc = check_traces(&o, train);
    if (tc) {
        status = tc;
        goto done;
    }
    /* rank 0 makes the folders (the others read the checkpoints there on --resume) */
    int made = g_rank != 0 || !(make_dir(o.out) || (o.ckpt_dir[0] && make_dir(o.ckpt_dir)));
    if (g_comm && fx_comm_agree(g_comm, made ? FX_OK : FX_EIO, NULL) != FX_OK) goto done;
    if (!made) goto done;
    if (!o.quiet) {
        char where[192] = "";
        if (o.device >= 0) {
            const char *name = flexpoint_gpu_device_name();
            snprintf(where, sizeof where, ", device cuda:%d (%s)", o.device, name ? name : "?");
        }
        if (g_comm)
            snprintf(where + strlen(where), sizeof where - strlen(where),
                     ", %d ranks x %d images of each batch", fx_comm_size(g_comm),
                     o.batch / fx_comm_size(g_comm));
        if (g_context)
            fprintf(stderr, "flexpoint-train: %s on %s (%lld train / %lld held-out windows of "
                            "%d tokens, vocabulary %d), %d epochs, batch %d, lr %g, backend %s, "
                            "%d threads\n", o.model, o.text, (long long)fx_dataset_len(train),
                    (long long)fx_dataset_len(test), g_context, fx_dataset_classes(train),
                    o.epochs, o.batch, o.lr, flexpoint_backend(), flexpoint_num_threads());
        else
            fprintf(stderr, "flexpoint-train: %s on %s (%lld train / %lld test images, "
                            "%dx%dx%d), %d epochs, batch %d, lr %g, backend %s, %d threads%s\n",
                    o.model, fx_dataset_source(train), (long long)fx_dataset_len(train),
                    (long long)fx_dataset_len(test), fx_dataset_channels(train),
                    fx_dataset_height(train), fx_dataset_width(train), o.epochs, o.batch, o.lr,
                    flexpoint_backend(), flexpoint_num_threads(), where);
        if (o.policy[0]) fprintf(stderr, "flexpoint-train: format policy '%s'\n", o.policy);
    }
    if (g_rank == 0) {
        /* run.json first: a folder whose runs fail still says what was asked of it */
        csv_file rj = {NULL, ""};
        int bad = csv_open(&rj, o.out, "run.json");
        if (!bad) fx_run_record_write(rj.f, &o, argc, argv, train, test,
                                      g_comm ? fx_comm_size(g_comm) : 1);
        bad |= csv_close(&rj);
        bad |= csv_open(&ec, o.out, "epochs.csv") || csv_open(&sc, o.out, "steps.csv") ||
               (g_comm && csv_open(&dc, o.out, "distributed.csv")) ||
               (g_context && csv_open(&xc, o.out, "samples.txt")) ||
               (o.eval_every && csv_open(&cc, o.out, "curve.csv"));
        if (xc.f) g_samples = &xc;
        if (cc.f) g_curve = &cc;
        if (g_comm && fx_comm_agree(g_comm, bad ? FX_EIO : FX_OK, NULL) != FX_OK) goto done;
        if (bad) goto done;
    } else {
        int bad = csv_discard(&ec) || csv_discard(&sc) || csv_discard(&dc);
        if (fx_comm_agree(g_comm, bad ? FX_EIO : FX_OK, NULL) != FX_OK) goto done;
    }
    /* columns: documented in --help (cli_options.c); new ones are appended at the end */
    fprintf(ec.f, "run,model,epoch,train_loss,train_accuracy,test_loss,test_accuracy,seconds,"
                  "images_per_second,loss_scale,skipped_steps,nonfinite_losses");
    for (int c = 0; c < FX_TENSOR_CLASSES; c++)
        fprintf(ec.f, ",%s_written,%s_saturated,%s_underflow,%s_zeroed_writes", class_names[c],
                class_names[c], class_names[c], class_names[c]);
    fprintf(ec.f, ",nonfinite_weights,casts,cast_seconds%s\n",
            g_context ? ",test_bits_per_char" : "");
    fprintf(sc.f, "run,step,epoch,loss,loss_scale\n");
    if (cc.f)
        fprintf(cc.f, "run,step,epoch,test_loss,test_accuracy%s\n",
                g_context ? ",test_bits_per_char" : "");
    if (dc.f)
        fprintf(dc.f, "run,ranks,steps,gradient_bytes_per_step,statistics_bytes_per_step,"
                      "gather_bytes_per_step,control_bytes_per_step,total_bytes_per_step\n");
    if (csv_flush(&ec) || csv_flush(&sc) || (dc.f && csv_flush(&dc)) || (cc.f && csv_flush(&cc)))
        goto done;
    for (int r = 0; r < o.nruns; r++) {
        if (fatal) {
            res[r].failed = 1;
            res[r].epochs_done = 0;
            continue;
        }
        res[r].failed =
            run_one(&o, &o.runs[r], train, test, &ec, &sc, &dc, &res[r], &fatal) != 0;
        failures += res[r].failed;
    }
    fatal |= csv_close(&ec) != 0;
    fatal |= csv_close(&sc) != 0;
    fatal |= csv_close(&dc) != 0;
    fatal |= csv_close(&xc) != 0;
    fatal |= csv_close(&cc) != 0;
    g_curve = NULL;
    if (g_rank != 0) { /* the summary is rank 0's */
        status = failures || fatal ? 1 : 0;
        goto done;
    }
    /* summary: accuracy, gap to fp32, time ratio */
    int ref = -1;
    for (int r = 0; r < o.nruns; r++)
        if (o.runs[r].fmt == FMT_FP32 && !res[r].failed) ref = r;
    if (g_context)
        printf("\n%-20s %10s %10s %12s %12s %12s %10s\n", "format", "val loss", "bits/char",
               "gap to fp32", "s/epoch", "tokens/s", "time ratio");
    else
        printf("\n%-20s %10s %12s %12s %12s %10s\n", "format", "test acc", "gap to fp32",
               "s/epoch", "images/s", "time ratio");
    for (int r = 0; r < o.nruns; r++) {
        if (res[r].failed || res[r].epochs_done == 0) {
            printf("%-20s %10s\n", o.runs[r].label, "failed");
            continue;
        }
        double spe = res[r].seconds / res[r].epochs_done;
        char gap[32] = "-", ratio[32] = "-";
        if (ref >= 0 && res[ref].epochs_done) {
            if (g_context) /* bits per character above fp32's */
                snprintf(gap, sizeof gap, "%+.4f", (res[r].test_loss - res[ref].test_loss) /
                                                       log(2.0));
            else
                snprintf(gap, sizeof gap, "%+.2f pts", 100.0 * (res[r].acc - res[ref].acc));
            snprintf(ratio, sizeof ratio, "%.2fx", spe / (res[ref].seconds / res[ref].epochs_done));
        }
        if (g_context)
            printf("%-20s %10.4f %10.4f %12s %12.1f %12.0f %10s\n", o.runs[r].label,
                   res[r].test_loss, res[r].test_loss / log(2.0), gap, spe, res[r].ips, ratio);
        else
            printf("%-20s %10.4f %12s %12.1f %12.0f %10s\n", o.runs[r].label, res[r].acc, gap,
                   spe, res[r].ips, ratio);
    }
    printf("(time ratio: seconds per epoch relative to fp32; CSV in %s/)\n", o.out);
    status = failures || fatal ? 1 : 0;
done:
    csv_close(&ec);
    csv_close(&sc);
    csv_close(&dc);
    csv_close(&xc);
    csv_close(&cc);
    fx_dataset_free(train);
    fx_dataset_free(test);
    fx_comm_free(g_comm); /* collective: every rank arrives here, or the job was aborted */
    fx_model_def_free(g_def);
    return status;
}
