/* libFuzzer harness for flexpoint-train's argument parser (tools/cli_options.c).
 * An input is the arguments after the program name, separated by NUL bytes ("--epochs\0003"
 * is two arguments); each argument gets its own allocation of its exact size, so that reading
 * past one is an ASan report. Properties, besides memory errors, UB and leaks:
 * - the status is FX_CLI_OK, FX_CLI_HELP or FX_CLI_USAGE;
 * - a usage error has a non-empty, terminated message; success and help leave it empty;
 * - a success gives options inside the ranges cli_options.h documents (every string
 *   terminated, paths non-empty where required, runs and traced names distinct, ...);
 * - the result is a pure function of argv: a second parse gives the same bytes, and a message
 *   buffer of any size gets a prefix of the same message, never a byte past its end.
 * Build and run: tools/fuzz_check.sh (tests/fuzz/README.md). */
/* fuzz-sources: tools/cli_options.c */
/* fuzz-options: -max_len=8192 */
#define _POSIX_C_SOURCE 200809L
#include "cli_options.h"

#include "flexpoint.h"
#include "flexpoint_train.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void broken(const char *what, const char *msg)
{
    fprintf(stderr, "fuzz_cli: broken property: %s (message \"%s\")\n", what, msg);
    abort();
}

static int terminated(const char *s, size_t cap) { return memchr(s, '\0', cap) != NULL; }

static int is_one_of(const char *s, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (!strcmp(s, names[i])) return 1;
    return 0;
}

/* The documented ranges of a successful parse. */
static void check_options(const fx_cli_options *o, const char *msg)
{
    static const char *const data[] = {"fashion-mnist", "cifar10", "synthetic", "fortunes",
                                       "text", NULL};
    static const char *const presets[] = {"published", "truemax", "exact_init", "robust",
                                          "fixed", NULL};
#define NEED(cond)                                                                           \
    do {                                                                                     \
        if (!(cond)) broken(#cond, msg);                                                     \
    } while (0)
    /* a built-in name or a family member (mlp<W>x<D>, cnn<C1>-<C2>-<F>, resnet<6n+2>[x<K>]) */
    /* or a model file (--model FILE, then model holds its label) */
    NEED(terminated(o->model, sizeof o->model) &&
         (o->model_file[0] || fx_model_check(o->model) == FX_OK));
    NEED(terminated(o->data, sizeof o->data) && is_one_of(o->data, data));
    NEED(terminated(o->data_dir, sizeof o->data_dir));
    NEED(terminated(o->out, sizeof o->out) && o->out[0]);
    NEED(terminated(o->ckpt_dir, sizeof o->ckpt_dir));
    NEED(terminated(o->eval, sizeof o->eval));
    NEED(o->eval_every >= 0 && o->eval_every <= (1LL << 40));
    NEED(!o->eval[0] || !o->eval_every); /* a training option, refused with --eval */
    /* --eval takes the recipe from its file: no training option with it */
    NEED(!o->eval[0] ||
         (o->resume == 0 && !o->ckpt_dir[0] && o->device == -1 && o->export_weights == 0 &&
          o->profile == 0));
    NEED(o->model_given == 0 || o->model_given == 1);
    NEED(o->export_weights == 0 || o->export_weights == 1);
    NEED(o->profile == 0 || o->profile == 1);
    NEED(terminated(o->policy, sizeof o->policy) && terminated(o->policy_file,
                                                                sizeof o->policy_file));
    NEED(!(o->policy[0] && o->policy_file[0]));
    /* the recipe: what fx_trainer_new accepts */
    NEED(o->optimizer >= FX_OPT_SGD && o->optimizer <= FX_OPT_ADAMW);
    NEED(o->adam_beta1 >= 0 && o->adam_beta1 < 1 && o->adam_beta2 >= 0 && o->adam_beta2 < 1);
    NEED(o->adam_eps > 0 && isfinite(o->adam_eps));
    NEED(o->clip_norm >= 0 && isfinite(o->clip_norm));
    NEED(o->ls_init > 0 && o->ls_init <= 3.4028234663852886e38);
    NEED(o->ls_growth > 1 && isfinite(o->ls_growth));
    NEED(o->ls_backoff > 0 && o->ls_backoff < 1);
    NEED(o->ls_interval >= 1 && o->ls_min >= 0 && o->ls_min <= o->ls_init);
    NEED(o->loss_scaling >= -1 && o->loss_scaling <= 2);
    NEED(strcmp(o->data, "cifar10") || o->data_dir[0]);
    NEED(strcmp(o->data, "synthetic") || !o->data_dir[0]);
    /* text data (fortunes, text:PATH): the corpus named, no --data-dir with text:PATH, none
     * of the image-only or multi-process options, a sequence model; image data: no corpus */
    NEED(terminated(o->text, sizeof o->text) && terminated(o->model_file, sizeof o->model_file));
    const int text = !strcmp(o->data, "fortunes") || !strcmp(o->data, "text");
    NEED(text == (o->text[0] != 0));
    NEED(strcmp(o->data, "text") || !o->data_dir[0]);
    NEED(!text || (!o->augment && !o->pad && !o->eval[0] && !o->distributed && o->device < 0));
    NEED(o->resume == 0 || (o->resume == 1 && o->ckpt_dir[0]));
    NEED(o->nruns >= 1 && o->nruns <= FX_CLI_MAX_RUNS);
    int shared = 0;
    for (int r = 0; r < o->nruns; r++) {
        const fx_cli_run *run = &o->runs[r];
        NEED(terminated(run->label, sizeof run->label) && terminated(run->autoflex,
                                                                     sizeof run->autoflex));
        NEED(run->fmt >= 0 && run->fmt < FMT_COUNT);
        const char *fn = fmt_name((fmt_t)run->fmt);
        NEED(!strncmp(run->label, fn, strlen(fn)));
        /* a preset in the label only for flex16_5, and then the run's own */
        const char *colon = strchr(run->label, ':');
        NEED(!colon || (run->fmt == FMT_FLEX16_5 && !strcmp(colon + 1, run->autoflex)));
        NEED(is_one_of(run->autoflex, presets));
        for (int k = 0; k < r; k++) NEED(strcmp(o->runs[k].label, run->label) != 0);
        shared |= run->fmt == FMT_FLEX16_5 || run->fmt == FMT_DFP16;
    }
    NEED(o->ntraces >= 1 && o->ntraces <= FX_CLI_MAX_TRACES);
    for (int k = 0; k < o->ntraces; k++) {
        NEED(terminated(o->traces[k], FX_CLI_NAME_MAX) && o->traces[k][0]);
        NEED(!strchr(o->traces[k], ','));
        for (int j = 0; j < k; j++) NEED(strcmp(o->traces[j], o->traces[k]) != 0);
    }
    NEED(o->traces_given == 0 || (o->traces_given == 1 && shared));
    NEED(o->epochs >= 1 && o->epochs <= 100000);
    NEED(o->batch >= 1 && o->batch <= 65536);
    NEED(o->master == 0 || o->master == 1);
    NEED(o->loss_scaling >= -1 && o->loss_scaling <= 1);
    NEED(o->stochastic == 0 || o->stochastic == 1);
    NEED(o->schedule >= FX_LR_CONSTANT && o->schedule <= FX_LR_STEP);
    NEED(o->augment == 0 || o->augment == 1);
    NEED(o->pad >= 0 && o->pad <= 64);
    NEED(o->threads >= 0 && o->threads <= 1024);
    NEED(o->device >= -1 && o->device <= 1023);
    NEED(o->quiet == 0 || o->quiet == 1);
    /* --distributed: host only, training only */
    NEED(o->distributed == 0 || o->distributed == 1);
    NEED(!o->distributed || (o->device < 0 && !o->eval[0]));
    NEED(isfinite(o->lr) && o->lr >= 1e-12);
    NEED(isfinite(o->momentum) && o->momentum >= 0 && o->momentum < 1);
    NEED(isfinite(o->wd) && o->wd >= 0);
    NEED(o->train_subset >= 0 && o->train_subset <= (1LL << 40));
    NEED(o->test_subset >= 0 && o->test_subset <= (1LL << 40));
    NEED(o->synthetic_n >= 10 && o->synthetic_n <= (1LL << 30));
    NEED(o->seed <= 0x7fffffffu);
#undef NEED
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* arguments: the pieces between NUL bytes (a trailing piece without NUL counts too) */
    size_t nargs = 1;
    for (size_t i = 0; i < size; i++) nargs += data[i] == 0;
    if (size == 0) nargs = 0;
    char **argv = calloc(nargs + 2, sizeof *argv);
    if (!argv) return 0;
    int argc = 0, ok = 1;
    argv[argc++] = strdup("flexpoint-train");
    ok = argv[0] != NULL;
    for (size_t start = 0, i = 0; ok && size > 0 && i <= size; i++) {
        if (i < size && data[i] != 0) continue;
        char *a = malloc(i - start + 1);
        if (!a) {
            ok = 0;
            break;
        }
        memcpy(a, data + start, i - start);
        a[i - start] = '\0';
        argv[argc++] = a;
        start = i + 1;
    }
    if (ok) {
        static fx_cli_options o1, o2;
        char m1[FX_CLI_MSG_MAX], m2[FX_CLI_MSG_MAX];
        int rc = fx_cli_parse(argc, argv, &o1, m1, sizeof m1);
        if (rc != FX_CLI_OK && rc != FX_CLI_HELP && rc != FX_CLI_USAGE)
            broken("status outside FX_CLI_OK/HELP/USAGE", "");
        if (!terminated(m1, sizeof m1)) broken("unterminated message", "");
        if (rc == FX_CLI_USAGE && !m1[0]) broken("a usage error without a message", m1);
        if (rc != FX_CLI_USAGE && m1[0]) broken("a message without an error", m1);
        if (rc == FX_CLI_OK) check_options(&o1, m1);
        /* the same again, bytes and all */
        int rc2 = fx_cli_parse(argc, argv, &o2, m2, sizeof m2);
        if (rc2 != rc || strcmp(m1, m2) || (rc == FX_CLI_OK && memcmp(&o1, &o2, sizeof o1)))
            broken("a second parse differs", m2);
        /* a small message buffer, exactly allocated: a prefix of the message, terminated */
        size_t small = 1 + size % 24;
        char *m3 = malloc(small);
        if (m3) {
            if (fx_cli_parse(argc, argv, &o2, m3, small) != rc) broken("status depends on msg", m3);
            if (!terminated(m3, small) || strncmp(m3, m1, strlen(m3)))
                broken("a short message buffer got another message", m3);
            free(m3);
        }
        if (fx_cli_parse(argc, argv, &o2, NULL, 0) != rc) broken("status with no msg", m1);
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
    free(argv);
    return 0;
}
