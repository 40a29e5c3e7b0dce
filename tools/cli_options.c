/* flexpoint-train's argument parser (cli_options.h). Every value is checked here, before any
 * file is touched: a value that cannot be honoured exactly (a path that does not fit, a preset
 * on a format that has none, a name listed twice) is a usage error, never silently adjusted. */
#include "cli_options.h"

#include "flexpoint.h"
#include "flexpoint_train.h"

#include <errno.h>
#include <sys/stat.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char fx_cli_usage_text[] =
"usage: flexpoint-train [options]\n"
"Train one network in several number formats from identical starting points and compare.\n"
"\n"
"  --model NAME          mlp | cnn | resnet20 | transformer, or a family member\n"
"                        (default cnn; with text data transformer):\n"
"                        mlp<W>x<D> (D hidden layers of width W; mlp = mlp256x2),\n"
"                        cnn<C1>-<C2>-<F> (cnn = cnn32-64-128), resnet<6n+2>[x<K>]\n"
"                        (depth 6n+2, channels 16K/32K/64K; e.g. resnet110, resnet56x2),\n"
"                        gpt<L>x<D>h<H>c<T> (text: L blocks of width D, H heads, context\n"
"                        T; transformer = gpt4x128h4c128),\n"
"                        or a model file: a path ending in .txt or naming an existing\n"
"                        file (docs/models.md; e.g. examples/models/cnn.txt); not with\n"
"                        --eval or --distributed\n"
"  --data NAME           fashion-mnist | cifar10 | synthetic | fortunes | text:PATH\n"
"                        (default fashion-mnist); fortunes and text:PATH (a text file or a\n"
"                        folder of them) are character-level text for a sequence model,\n"
"                        cut into windows of the model's context, the last 10% held out\n"
"  --data-dir DIR        dataset directory (fashion-mnist default: $FLEXPOINT_FASHION_MNIST_DIR\n"
"                        or /usr/share/datasets/fashion-mnist; cifar10: required; fortunes:\n"
"                        /usr/share/games/fortunes; not with synthetic or text:PATH)\n"
"  --formats LIST        comma list of distinct fp32,fp16,bf16,flex16_5,dfp16; flex16_5 (only)\n"
"                        may name an Autoflex preset as flex16_5:PRESET (default all five)\n"
"  --autoflex PRESET     default preset for flex16_5 runs: published | truemax | exact_init |\n"
"                        robust | fixed                              (default robust)\n"
"  --epochs N            epochs, 1..100000                             (default 5)\n"
"  --batch N             batch size, 1..65536                          (default 128)\n"
"  --lr X                learning rate                                 (default 0.02)\n"
"  --momentum X          SGD momentum, [0, 1)                          (default 0.9)\n"
"  --weight-decay X      L2 weight decay                               (default 0)\n"
"  --schedule NAME       constant | cosine | step                      (default constant)\n"
"  --no-master           keep weights only in the format (no fp32 master copy)\n"
"  --loss-scaling MODE   auto (dynamic for fp16 only) | on (dynamic) | static | off\n"
"                                                                      (default auto)\n"
"  --loss-scale-init X   initial (or static) scale                     (default 65536)\n"
"  --loss-scale-growth X dynamic: factor after clean steps, > 1        (default 2)\n"
"  --loss-scale-backoff X dynamic: factor on Inf/NaN, (0, 1)          (default 0.5)\n"
"  --loss-scale-interval N dynamic: clean steps before growing        (default 2000)\n"
"  --loss-scale-min X    dynamic: the scale's floor                    (default 0)\n"
"  --optimizer NAME      sgd | adam | adamw                            (default sgd)\n"
"  --adam-betas B1,B2    Adam/AdamW moment decays                      (default 0.9,0.999)\n"
"  --adam-eps X          Adam/AdamW epsilon                            (default 1e-8)\n"
"  --clip-norm X         clip gradients to this global L2 norm; 0 off  (default 0)\n"
"  --stochastic-rounding round weight writes stochastically\n"
"  --augment             random crop (pad 4) and horizontal flip\n"
"  --pad N               zero-pad images by N pixels per side, 0..64 (e.g. 2: 28x28 -> 32x32)\n"
"  --train-subset N      use the first N training images (text: windows) (default all)\n"
"  --test-subset N       use the first N test images (text: windows)   (default all)\n"
"  --eval-every N        also evaluate on the test set every N training steps and write\n"
"                        curve.csv (a learning curve)                  (default off)\n"
"  --synthetic-n N       synthetic training set size (test: N/5)       (default 10000)\n"
"  --seed N              seed of weights, batch order, augmentation    (default 0)\n"
"  --threads N           threads, 1..1024 (default: all cores)\n"
"  --device DEV          cpu | cuda | cuda:N: train on the host or on CUDA device N (cuda is\n"
"                        cuda:0); batches are prepared on the host       (default cpu)\n"
"  --out DIR             write CSV results here                        (default results)\n"
"  --trace LIST          comma list of at most 16 tensors whose per-write Autoflex trace is\n"
"                        saved, e.g. conv1.out,conv2.w.grad (flex16_5/dfp16 runs; an unknown\n"
"                        name is an error; default: a few)\n"
"  --checkpoint-dir DIR  save a checkpoint per run after every epoch\n"
"  --resume              continue runs from their checkpoints in --checkpoint-dir\n"
"  --export-weights      write each run's fp32 weights to weights_<run>.fxw in --out\n"
"  --policy RULES        format policy on top of each run's format, e.g. \"bn*=fp32; fc2=fp16;\n"
"                        grads=bf16\" or a preset O0 | O1 | O2 | O3 | edges-fp32 (docs/\n"
"                        training.md); at most 127 bytes\n"
"  --policy-file FILE    the same, read from FILE (rules on lines or separated by ';';\n"
"                        '#' starts a comment)\n"
"  --profile             time each layer's forward and backward pass and the phases of a\n"
"                        step; print them and write profile_<run>.csv in --out (a run's\n"
"                        first step, its buffers' first touch, is left out where more follow)\n"
"  --eval FILE           evaluate a checkpoint (any format) or a weights file on the test set\n"
"                        in each of --formats and write eval.csv; a checkpoint gives the\n"
"                        model and recipe (the data options must be those of its training\n"
"                        run), a weights file needs --model; a model file's checkpoint\n"
"                        or weights take the file (--model FILE)\n"
"  --distributed         one rank of an MPI job (mpirun -np N flexpoint-train ...): each\n"
"                        global batch is split over the N ranks (--batch a multiple of N);\n"
"                        rank 0 writes the results; host only (docs/distributed.md)\n"
"  --quiet               no progress output (warnings and errors are still printed)\n"
"  --help                this text\n"
"\n"
"Paths (--out, --data-dir, --checkpoint-dir, --eval) may be up to 3839 bytes long.\n"
"Outputs in --out: epochs.csv (one row per run and epoch: run, model, epoch, train_loss,\n"
"train_accuracy, test_loss, test_accuracy, seconds, images_per_second, loss_scale,\n"
"skipped_steps, nonfinite_losses, then for each of weights, activations and gradients\n"
"<class>_written, <class>_saturated, <class>_underflow, <class>_zeroed_writes (elements\n"
"written, saturated, rounded to 0, and writes that kept no nonzero value; flex16_5 and\n"
"dfp16 runs, empty in the float formats), nonfinite_weights and casts), steps.csv (run,\n"
"step, epoch, loss, loss_scale every 10 steps), run.json (what the folder was made from),\n"
"trace_<run>_<tensor>.csv and with --eval-every curve.csv (run, step, epoch, test_loss,\n"
"test_accuracy, and test_bits_per_char with text). With text data, accuracies are per\n"
"token, test_loss is the held-out loss per token (nats), images_per_second counts tokens per\n"
"second, epochs.csv ends with test_bits_per_char (test_loss / ln 2), and samples.txt holds\n"
"200 bytes each run's model writes after the prompt \"The \" (temperature 0.8, seeded by\n"
"--seed).\n"
"A warning goes to stderr after an epoch in which one tensor saturated more than 1% of the\n"
"elements written to it, or had more than 1% of its writes zeroed, or when weights are NaN\n"
"or Inf.\n"
"Exit status: 0 success, 1 a run or a file failed, 2 a usage error.\n";

const char *fx_cli_usage(void) { return fx_cli_usage_text; }

/* Set msg and return FX_CLI_USAGE. */
static int fx_cli_fail(char *msg, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fx_cli_fail(char *msg, size_t n, const char *fmt, ...)
{
    if (msg && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, n, fmt, ap);
        va_end(ap);
    }
    return FX_CLI_USAGE;
}

/* Values are quoted in messages up to this many bytes (a message stays one short line). */
#define Q 200

static int fx_cli_int(const char *opt, const char *v, long long lo, long long hi, long long *out,
                      char *msg, size_t n)
{
    /* strtoll also skips leading blanks and takes a '+': only plain decimals */
    int ok = v[0] == '-' || (v[0] >= '0' && v[0] <= '9');
    long long x = 0;
    if (ok) {
        char *end;
        errno = 0;
        x = strtoll(v, &end, 10);
        ok = !errno && end != v && !*end && x >= lo && x <= hi;
    }
    if (!ok)
        return fx_cli_fail(msg, n, "%s: '%.*s' is not an integer in [%lld, %lld]", opt, Q, v,
                           lo, hi);
    *out = x;
    return FX_CLI_OK;
}

static int fx_cli_double(const char *opt, const char *v, double lo, double *out, char *msg,
                         size_t n)
{
    char *end;
    /* strtod also skips leading blanks and reads "inf", "nan" and hex: only plain decimals */
    int plain = v[0] == '-' || v[0] == '+' || v[0] == '.' || (v[0] >= '0' && v[0] <= '9');
    for (const char *p = v; plain && *p; p++)
        plain = strchr("0123456789+-.eE", *p) != NULL;
    double x = plain ? strtod(v, &end) : 0;
    if (!plain || end == v || *end || !isfinite(x) || x < lo)
        return fx_cli_fail(msg, n, "%s: '%.*s' is not a number >= %g", opt, Q, v, lo);
    *out = x;
    return FX_CLI_OK;
}

/* "cpu" -> -1, "cuda" -> 0, "cuda:N" -> N. */
static int fx_cli_device(const char *v, int *out, char *msg, size_t n)
{
    if (!strcmp(v, "cpu")) {
        *out = -1;
        return FX_CLI_OK;
    }
    if (!strcmp(v, "cuda")) {
        *out = 0;
        return FX_CLI_OK;
    }
    if (!strncmp(v, "cuda:", 5) && v[5] >= '0' && v[5] <= '9') {
        char *end;
        errno = 0;
        long x = strtol(v + 5, &end, 10);
        if (!errno && !*end && x <= 1023) {
            *out = (int)x;
            return FX_CLI_OK;
        }
    }
    return fx_cli_fail(msg, n, "--device: '%.*s' is not cpu, cuda or cuda:N (N a device number, "
                       "0..1023)", Q, v);
}

/* Whether a built-in model name is a sequence model (the transformer family), which trains on
 * text; model files are known only once read (the trainer then names a mismatch). */
static int fx_cli_sequence_name(const char *model)
{
    return !strcmp(model, "transformer") || !strncmp(model, "gpt", 3);
}

/* A path option: non-empty and short enough to be kept whole. */
/* Whether a --model value names a model file rather than a built-in network: not a built-in
 * name, and a path ending in .txt, holding a '/', or naming an existing file (so that a file
 * named like a built-in, e.g. ./cnn, never hides it). */
static int fx_cli_is_model_file(const char *v)
{
    if (fx_model_check(v) == FX_OK) return 0;
    flexpoint_clear_error();
    size_t len = strlen(v);
    struct stat st;
    return (len > 4 && !strcmp(v + len - 4, ".txt")) || strchr(v, '/') ||
           stat(v, &st) == 0;
}

/* The label of a model file in outputs (epochs.csv, progress): its base name without ".txt",
 * letters, digits, '_', '-' and '.' only, at most cap - 1 bytes. */
static void fx_cli_model_label(char *dst, size_t cap, const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t len = strlen(b);
    if (len > 4 && !strcmp(b + len - 4, ".txt")) len -= 4;
    size_t k = 0;
    for (size_t i = 0; i < len && k + 1 < cap; i++) {
        char c = b[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || c == '.';
        dst[k++] = ok ? c : '_';
    }
    if (k == 0) dst[k++] = 'm';
    dst[k] = '\0';
}

static int fx_cli_path(const char *opt, const char *v, char *dst, size_t cap, char *msg, size_t n)
{
    size_t len = strlen(v);
    if (len == 0) return fx_cli_fail(msg, n, "%s: the path is empty", opt);
    if (len >= cap)
        return fx_cli_fail(msg, n, "%s: the path is %zu bytes long, more than the %zu this tool "
                           "supports ('%.40s...')", opt, len, cap - 1, v);
    memcpy(dst, v, len + 1);
    return FX_CLI_OK;
}

/* The next item of a comma list: [*p, end of item). Returns its length and moves *p past it
 * and its comma; *more says whether a comma followed. */
static size_t fx_cli_item(const char **p, int *more)
{
    const char *s = *p, *c = strchr(s, ',');
    size_t len = c ? (size_t)(c - s) : strlen(s);
    *more = c != NULL;
    *p = c ? c + 1 : s + len;
    return len;
}

static int fx_cli_formats(fx_cli_options *o, const char *list, const char *default_preset,
                          char *msg, size_t n)
{
    o->nruns = 0;
    const char *p = list;
    int more = 1;
    while (more) {
        const char *item = p;
        size_t len = fx_cli_item(&p, &more);
        if (len == 0)
            return fx_cli_fail(msg, n, "--formats: empty item in '%.*s'", Q, list);
        if (o->nruns == FX_CLI_MAX_RUNS)
            return fx_cli_fail(msg, n, "--formats: at most %d runs", FX_CLI_MAX_RUNS);
        /* the longest valid item, "flex16_5:exact_init", is far shorter */
        char tok[64];
        if (len >= sizeof tok)
            return fx_cli_fail(msg, n, "--formats: unknown format '%.40s...' (known: fp32, fp16, "
                               "bf16, flex16_5, dfp16)", item);
        memcpy(tok, item, len);
        tok[len] = '\0';
        char *colon = strchr(tok, ':');
        if (colon) *colon = '\0';
        int f = fmt_from_name(tok);
        if (f < 0)
            return fx_cli_fail(msg, n, "--formats: unknown format '%s' (known: fp32, fp16, bf16, "
                               "flex16_5, dfp16)", tok);
        if (colon && f != FMT_FLEX16_5)
            return fx_cli_fail(msg, n, "--formats: '%s:%s': an Autoflex preset applies to "
                               "flex16_5 only", tok, colon + 1);
        const char *preset = colon ? colon + 1 : default_preset;
        fx_autoflex_config cfg;
        if (colon && fx_autoflex_preset(preset, &cfg) != FX_OK)
            return fx_cli_fail(msg, n, "--formats: unknown Autoflex preset '%s' (known: "
                               "published, truemax, exact_init, robust, fixed)", preset);
        fx_cli_run *r = &o->runs[o->nruns];
        r->fmt = f;
        /* a valid preset is at most "exact_init" */
        snprintf(r->autoflex, sizeof r->autoflex, "%s", preset);
        if (colon)
            snprintf(r->label, sizeof r->label, "%s:%s", fmt_name((fmt_t)f), preset);
        else
            snprintf(r->label, sizeof r->label, "%s", fmt_name((fmt_t)f));
        for (int k = 0; k < o->nruns; k++)
            if (!strcmp(o->runs[k].label, r->label))
                return fx_cli_fail(msg, n, "--formats: '%s' is listed twice (its results and "
                                   "checkpoints would overwrite each other)", r->label);
        o->nruns++;
    }
    return FX_CLI_OK;
}

static int fx_cli_traces(fx_cli_options *o, const char *list, char *msg, size_t n)
{
    o->ntraces = 0;
    const char *p = list;
    int more = 1;
    while (more) {
        const char *item = p;
        size_t len = fx_cli_item(&p, &more);
        if (len == 0) return fx_cli_fail(msg, n, "--trace: empty item in '%.*s'", Q, list);
        if (len >= FX_CLI_NAME_MAX)
            return fx_cli_fail(msg, n, "--trace: '%.40s...' is longer than any tensor name (at "
                               "most %d bytes)", item, FX_CLI_NAME_MAX - 1);
        if (o->ntraces == FX_CLI_MAX_TRACES)
            return fx_cli_fail(msg, n, "--trace: at most %d tensors", FX_CLI_MAX_TRACES);
        char *dst = o->traces[o->ntraces];
        memcpy(dst, item, len);
        dst[len] = '\0';
        for (int k = 0; k < o->ntraces; k++)
            if (!strcmp(o->traces[k], dst))
                return fx_cli_fail(msg, n, "--trace: '%s' is listed twice", dst);
        o->ntraces++;
    }
    return FX_CLI_OK;
}

/* Text data (--data fortunes or text:PATH): the corpus's path, the transformer by default,
 * and the options that have no meaning for token windows refused by name. */
static int fx_cli_text(fx_cli_options *o, char *m, size_t n)
{
    if (!strcmp(o->data, "text") && o->data_dir[0])
        return fx_cli_fail(m, n, "--data-dir: --data text:PATH names the text already (drop "
                           "--data-dir)");
    if (!strcmp(o->data, "fortunes"))
        snprintf(o->text, sizeof o->text, "%s",
                 o->data_dir[0] ? o->data_dir : FX_DATA_FORTUNES_DIR);
    if (!o->model_given) snprintf(o->model, sizeof o->model, "transformer");
    if (!o->model_file[0] && !fx_cli_sequence_name(o->model))
        return fx_cli_fail(m, n, "--model %s is an image model; text data (--data %s) needs a "
                           "sequence model: transformer, gpt<L>x<D>h<H>c<T> or a model file "
                           "whose first layer is an embedding", o->model,
                           !strcmp(o->data, "text") ? "text:PATH" : o->data);
    const char *bad = o->augment ? "--augment" : o->pad ? "--pad" : o->eval[0] ? "--eval"
                    : o->distributed ? "--distributed" : o->device >= 0 ? "--device" : NULL;
    if (bad)
        return fx_cli_fail(m, n, "%s is not taken with text data (sequence models train on the "
                           "host in one process, on token windows, not images)", bad);
    return FX_CLI_OK;
}

int fx_cli_parse(int argc, char *const argv[], fx_cli_options *o, char *msg, size_t msg_size)
{
    char *m = msg;
    size_t n = msg_size;
    if (m && n) m[0] = '\0';
    if (!o) return fx_cli_fail(m, n, "no options struct");
    memset(o, 0, sizeof *o);
    snprintf(o->model, sizeof o->model, "cnn");
    snprintf(o->data, sizeof o->data, "fashion-mnist");
    snprintf(o->out, sizeof o->out, "results");
    o->epochs = 5;
    o->batch = 128;
    o->master = 1;
    o->loss_scaling = -1;
    o->lr = 0.02;
    o->momentum = 0.9;
    o->synthetic_n = 10000;
    o->device = -1;
    {
        fx_train_config d; /* the library's recipe defaults, in one place */
        fx_train_config_default(&d);
        o->optimizer = d.optimizer;
        o->adam_beta1 = d.adam_beta1;
        o->adam_beta2 = d.adam_beta2;
        o->adam_eps = d.adam_eps;
        o->clip_norm = d.clip_norm;
        o->ls_init = d.loss_scale_init;
        o->ls_growth = d.loss_scale_growth;
        o->ls_backoff = d.loss_scale_backoff;
        o->ls_interval = d.loss_scale_interval;
        o->ls_min = d.loss_scale_min;
    }
    const char *formats = "fp32,fp16,bf16,flex16_5,dfp16";
    const char *preset = "robust";
    const char *traces = NULL;
    /* the first option given that only training uses: refused with --eval, whose checkpoint
     * fixes the model and the recipe (a silently ignored option would change a run's meaning) */
    static const char *const training_options[] = {
        "--epochs", "--batch", "--lr", "--momentum", "--weight-decay", "--schedule",
        "--no-master", "--loss-scaling", "--stochastic-rounding", "--augment", "--seed",
        "--device", "--trace", "--checkpoint-dir", "--resume", "--export-weights", "--profile",
        "--distributed", "--eval-every",
        "--optimizer", "--adam-betas", "--adam-eps", "--clip-norm", "--loss-scale-init",
        "--loss-scale-growth", "--loss-scale-backoff", "--loss-scale-interval",
        "--loss-scale-min"};
    const char *training_only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
        int rc = FX_CLI_OK;
        for (size_t k = 0; !training_only && k < sizeof training_options / sizeof *training_options;
             k++)
            if (!strcmp(a, training_options[k])) training_only = training_options[k];
#define NEEDV()                                                                              \
    do {                                                                                     \
        if (!v) return fx_cli_fail(m, n, "%.*s needs a value (see --help)", Q, a);           \
        i++;                                                                                 \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            return FX_CLI_HELP;
        } else if (!strcmp(a, "--model")) {
            NEEDV();
            o->model_given = 1;
            o->model_file[0] = '\0';
            if (fx_cli_is_model_file(v)) {
                rc = fx_cli_path(a, v, o->model_file, sizeof o->model_file, m, n);
                fx_cli_model_label(o->model, sizeof o->model, v);
            } else if (strlen(v) >= sizeof o->model) {
                return fx_cli_fail(m, n, "--model: '%.*s' is longer than %zu bytes", Q, v,
                                   sizeof o->model - 1);
            } else if (fx_model_check(v) != FX_OK) {
                return fx_cli_fail(m, n, "--model: %s, or a model file (a path ending in .txt)",
                                   flexpoint_last_error());
            } else {
                snprintf(o->model, sizeof o->model, "%s", v);
            }
        } else if (!strcmp(a, "--data")) {
            NEEDV();
            o->text[0] = '\0';
            if (!strncmp(v, "text:", 5)) {
                if (!v[5])
                    return fx_cli_fail(m, n, "--data text:PATH needs a path (a text file or a "
                                       "folder of text files)");
                rc = fx_cli_path(a, v + 5, o->text, sizeof o->text, m, n);
                snprintf(o->data, sizeof o->data, "text");
            } else if (strcmp(v, "fashion-mnist") && strcmp(v, "cifar10") &&
                       strcmp(v, "synthetic") && strcmp(v, "fortunes")) {
                return fx_cli_fail(m, n, "--data: unknown data set '%.*s' (fashion-mnist, "
                                   "cifar10, synthetic, fortunes, text:PATH)", Q, v);
            } else {
                snprintf(o->data, sizeof o->data, "%s", v);
            }
        } else if (!strcmp(a, "--data-dir")) {
            NEEDV();
            rc = fx_cli_path(a, v, o->data_dir, sizeof o->data_dir, m, n);
        } else if (!strcmp(a, "--formats")) {
            NEEDV();
            formats = v;
        } else if (!strcmp(a, "--autoflex")) {
            NEEDV();
            fx_autoflex_config cfg;
            if (fx_autoflex_preset(v, &cfg) != FX_OK)
                return fx_cli_fail(m, n, "--autoflex: unknown Autoflex preset '%.*s' (known: "
                                   "published, truemax, exact_init, robust, fixed)", Q, v);
            preset = v;
        } else if (!strcmp(a, "--epochs")) {
            NEEDV();
            if (!(rc = fx_cli_int(a, v, 1, 100000, &x, m, n))) o->epochs = (int)x;
        } else if (!strcmp(a, "--batch")) {
            NEEDV();
            if (!(rc = fx_cli_int(a, v, 1, 65536, &x, m, n))) o->batch = (int)x;
        } else if (!strcmp(a, "--lr")) {
            NEEDV();
            rc = fx_cli_double(a, v, 1e-12, &o->lr, m, n);
        } else if (!strcmp(a, "--momentum")) {
            NEEDV();
            if (fx_cli_double(a, v, 0, &o->momentum, m, n) || o->momentum >= 1)
                return fx_cli_fail(m, n, "--momentum must be in [0, 1) (got '%.*s')", Q, v);
        } else if (!strcmp(a, "--weight-decay")) {
            NEEDV();
            rc = fx_cli_double(a, v, 0, &o->wd, m, n);
        } else if (!strcmp(a, "--schedule")) {
            NEEDV();
            if (!strcmp(v, "constant")) o->schedule = FX_LR_CONSTANT;
            else if (!strcmp(v, "cosine")) o->schedule = FX_LR_COSINE;
            else if (!strcmp(v, "step")) o->schedule = FX_LR_STEP;
            else
                return fx_cli_fail(m, n, "--schedule: unknown '%.*s' (constant, cosine, step)",
                                   Q, v);
        } else if (!strcmp(a, "--no-master")) {
            o->master = 0;
        } else if (!strcmp(a, "--loss-scaling")) {
            NEEDV();
            if (!strcmp(v, "auto")) o->loss_scaling = -1;
            else if (!strcmp(v, "on") || !strcmp(v, "dynamic")) o->loss_scaling = 1;
            else if (!strcmp(v, "off")) o->loss_scaling = 0;
            else if (!strcmp(v, "static")) o->loss_scaling = 2;
            else
                return fx_cli_fail(m, n, "--loss-scaling: '%.*s' is not auto, on (dynamic), "
                                   "static or off", Q, v);
        } else if (!strcmp(a, "--optimizer")) {
            NEEDV();
            if (!strcmp(v, "sgd")) o->optimizer = FX_OPT_SGD;
            else if (!strcmp(v, "adam")) o->optimizer = FX_OPT_ADAM;
            else if (!strcmp(v, "adamw")) o->optimizer = FX_OPT_ADAMW;
            else
                return fx_cli_fail(m, n, "--optimizer: unknown '%.*s' (sgd, adam, adamw)", Q, v);
        } else if (!strcmp(a, "--adam-betas")) {
            NEEDV();
            const char *comma = strchr(v, ',');
            char b1[64];
            size_t l1 = comma ? (size_t)(comma - v) : 0;
            if (!comma || l1 == 0 || l1 >= sizeof b1)
                return fx_cli_fail(m, n, "--adam-betas: '%.*s' is not B1,B2", Q, v);
            memcpy(b1, v, l1);
            b1[l1] = '\0';
            if (fx_cli_double(a, b1, 0, &o->adam_beta1, m, n) ||
                fx_cli_double(a, comma + 1, 0, &o->adam_beta2, m, n) || o->adam_beta1 >= 1 ||
                o->adam_beta2 >= 1)
                return fx_cli_fail(m, n, "--adam-betas: each of '%.*s' must be in [0, 1)", Q, v);
        } else if (!strcmp(a, "--adam-eps")) {
            NEEDV();
            if (fx_cli_double(a, v, 0, &o->adam_eps, m, n) || !(o->adam_eps > 0))
                return fx_cli_fail(m, n, "--adam-eps must be > 0 (got '%.*s')", Q, v);
        } else if (!strcmp(a, "--clip-norm")) {
            NEEDV();
            rc = fx_cli_double(a, v, 0, &o->clip_norm, m, n);
        } else if (!strcmp(a, "--loss-scale-init")) {
            NEEDV();
            if (fx_cli_double(a, v, 0, &o->ls_init, m, n) || !(o->ls_init > 0) ||
                o->ls_init > FLT_MAX)
                return fx_cli_fail(m, n, "--loss-scale-init must be > 0 and representable in "
                                   "fp32 (got '%.*s')", Q, v);
        } else if (!strcmp(a, "--loss-scale-growth")) {
            NEEDV();
            if (fx_cli_double(a, v, 0, &o->ls_growth, m, n) || !(o->ls_growth > 1))
                return fx_cli_fail(m, n, "--loss-scale-growth must be > 1 (got '%.*s')", Q, v);
        } else if (!strcmp(a, "--loss-scale-backoff")) {
            NEEDV();
            if (fx_cli_double(a, v, 0, &o->ls_backoff, m, n) || !(o->ls_backoff > 0) ||
                o->ls_backoff >= 1)
                return fx_cli_fail(m, n, "--loss-scale-backoff must be in (0, 1) (got '%.*s')",
                                   Q, v);
        } else if (!strcmp(a, "--loss-scale-interval")) {
            NEEDV();
            if (!(rc = fx_cli_int(a, v, 1, 1LL << 40, &x, m, n))) o->ls_interval = x;
        } else if (!strcmp(a, "--loss-scale-min")) {
            NEEDV();
            rc = fx_cli_double(a, v, 0, &o->ls_min, m, n);
        } else if (!strcmp(a, "--stochastic-rounding")) {
            o->stochastic = 1;
        } else if (!strcmp(a, "--augment")) {
            o->augment = 1;
        } else if (!strcmp(a, "--pad")) {
            NEEDV();
            if (!(rc = fx_cli_int(a, v, 0, 64, &x, m, n))) o->pad = (int)x;
        } else if (!strcmp(a, "--train-subset")) {
            NEEDV();
            if (!(rc = fx_cli_int(a, v, 1, 1LL << 40, &x, m, n))) o->train_subset = x;
        } else if (!strcmp(a, "--test-subset")) {
            NEEDV();
            if (!(rc = fx_cli_int(a, v, 1, 1LL << 40, &x, m, n))) o->test_subset = x;
        } else if (!strcmp(a, "--eval-every")) {
            NEEDV();
            if (!(rc = fx_cli_int(a, v, 1, 1LL << 40, &x, m, n))) o->eval_every = x;
        } else if (!strcmp(a, "--synthetic-n")) {
            NEEDV();
            if (!(rc = fx_cli_int(a, v, 10, 1LL << 30, &x, m, n))) o->synthetic_n = x;
        } else if (!strcmp(a, "--seed")) {
            NEEDV();
            if (!(rc = fx_cli_int(a, v, 0, 0x7fffffffLL, &x, m, n))) o->seed = (uint64_t)x;
        } else if (!strcmp(a, "--threads")) {
            NEEDV();
            if (!(rc = fx_cli_int(a, v, 1, 1024, &x, m, n))) o->threads = (int)x;
        } else if (!strcmp(a, "--device")) {
            NEEDV();
            rc = fx_cli_device(v, &o->device, m, n);
        } else if (!strcmp(a, "--out")) {
            NEEDV();
            rc = fx_cli_path(a, v, o->out, sizeof o->out, m, n);
        } else if (!strcmp(a, "--trace")) {
            NEEDV();
            traces = v;
        } else if (!strcmp(a, "--checkpoint-dir")) {
            NEEDV();
            rc = fx_cli_path(a, v, o->ckpt_dir, sizeof o->ckpt_dir, m, n);
        } else if (!strcmp(a, "--resume")) {
            o->resume = 1;
        } else if (!strcmp(a, "--export-weights")) {
            o->export_weights = 1;
        } else if (!strcmp(a, "--profile")) {
            o->profile = 1;
        } else if (!strcmp(a, "--policy")) {
            NEEDV();
            if (!v[0]) return fx_cli_fail(m, n, "--policy: the policy is empty");
            if (strlen(v) >= sizeof o->policy)
                return fx_cli_fail(m, n, "--policy: longer than %zu bytes (use --policy-file "
                                   "for nothing longer either: the limit is the library's)",
                                   sizeof o->policy - 1);
            snprintf(o->policy, sizeof o->policy, "%s", v);
        } else if (!strcmp(a, "--policy-file")) {
            NEEDV();
            rc = fx_cli_path(a, v, o->policy_file, sizeof o->policy_file, m, n);
        } else if (!strcmp(a, "--eval")) {
            NEEDV();
            rc = fx_cli_path(a, v, o->eval, sizeof o->eval, m, n);
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
        } else if (!strcmp(a, "--distributed")) {
            o->distributed = 1;
        } else {
            return fx_cli_fail(m, n, "unknown option '%.*s' (see --help)", Q, a);
        }
#undef NEEDV
        if (rc) return rc;
    }
    if (o->policy[0] && o->policy_file[0])
        return fx_cli_fail(m, n, "--policy and --policy-file: give one");
    if (o->model_file[0] && o->distributed)
        return fx_cli_fail(m, n, "--model %s: a model file trains on one process; it is not "
                           "taken by --distributed yet (use a built-in model name)", o->model);
    if (o->ls_min > o->ls_init)
        return fx_cli_fail(m, n, "--loss-scale-min %g is above the initial scale %g", o->ls_min,
                           o->ls_init);
    if (o->eval[0] && training_only)
        return fx_cli_fail(m, n, "--eval: %s is a training option; an evaluation takes the "
                           "recipe from the checkpoint", training_only);
    if (o->distributed && o->device >= 0)
        return fx_cli_fail(m, n, "--distributed: distributed training runs on the host "
                           "(drop --device)");
    if (o->resume && !o->ckpt_dir[0])
        return fx_cli_fail(m, n, "--resume needs --checkpoint-dir");
    if (!strcmp(o->data, "cifar10") && !o->data_dir[0])
        return fx_cli_fail(m, n, "--data cifar10 needs --data-dir (the directory with "
                           "data_batch_1.bin ... test_batch.bin)");
    if (!strcmp(o->data, "synthetic") && o->data_dir[0])
        return fx_cli_fail(m, n, "--data-dir: the synthetic data set is generated, not read "
                           "(drop --data-dir or choose --data fashion-mnist or cifar10)");
    const int text = !strcmp(o->data, "text") || !strcmp(o->data, "fortunes");
    int rc = text ? fx_cli_text(o, m, n) : FX_CLI_OK;
    if (rc) return rc;
    if (!text && fx_cli_sequence_name(o->model))
        return fx_cli_fail(m, n, "--model %s is a sequence model (it reads token windows): "
                           "give it text data (--data fortunes or --data text:PATH)", o->model);
    if ((rc = fx_cli_formats(o, formats, preset, m, n))) return rc;
    o->traces_given = traces != NULL;
    char resnet_traces[96] = "";
    if (!strncmp(o->model, "resnet", 6)) {
        /* the last block of the last stage: s3b<n> for depth 6n+2 (s3b3 in resnet20) */
        int depth = atoi(o->model + 6);
        snprintf(resnet_traces, sizeof resnet_traces,
                 "conv0.out,s3b%d.conv2.w.grad,fc.w,loss.dlogits", (depth - 2) / 6);
    }
    if (!traces && o->model_file[0])
        traces = "loss.dlogits"; /* a model file's layers are its own: --trace names them */
    /* a transformer: the first block's attention scores (q k^T, its ".pre") and output */
    if (!traces && fx_cli_sequence_name(o->model))
        traces = "b1.attn.pre,b1.attn.out,head.w.grad,loss.dlogits";
    if (!traces)
        traces = !strncmp(o->model, "mlp", 3)   ? "fc1.out,fc1.w.grad,fc2.w"
                 : !strncmp(o->model, "cnn", 3) ? "conv1.out,conv2.w.grad,fc1.w,loss.dlogits"
                                                : resnet_traces;
    if ((rc = fx_cli_traces(o, traces, m, n))) return rc;
    if (o->traces_given) {
        int shared = 0;
        for (int r = 0; r < o->nruns; r++)
            shared |= o->runs[r].fmt == FMT_FLEX16_5 || o->runs[r].fmt == FMT_DFP16;
        if (!shared)
            return fx_cli_fail(m, n, "--trace: traces are recorded in flex16_5 and dfp16 runs "
                               "only, and --formats has neither");
    }
    return FX_CLI_OK;
}
