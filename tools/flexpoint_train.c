/* flexpoint-train: train the same network on the same data in several number formats, side by
 * side from identical starting points, and print a comparison table. A thin layer over
 * include/flexpoint_train.h. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_gpu.h"
#include "flexpoint_train.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_RUNS 16

typedef struct run_spec {
    char label[40];
    int fmt;
    char autoflex[16];
} run_spec;

typedef struct options {
    char model[16], data[32], data_dir[1024], out[1024], ckpt_dir[1024], traces[512];
    run_spec runs[MAX_RUNS];
    int nruns;
    int epochs, batch, master, loss_scaling, stochastic, schedule, augment, pad, threads, resume;
    int device; /* -1: the host; else a CUDA ordinal */
    double lr, momentum, wd;
    int64_t train_subset, test_subset, synthetic_n;
    uint64_t seed;
    int quiet;
} options;

static void usage(FILE *f)
{
    fprintf(f,
"usage: flexpoint-train [options]\n"
"Train one network in several number formats from identical starting points and compare.\n"
"\n"
"  --model NAME          mlp | cnn | resnet20                          (default cnn)\n"
"  --data NAME           fashion-mnist | cifar10 | synthetic          (default fashion-mnist)\n"
"  --data-dir DIR        dataset directory (fashion-mnist default: $FLEXPOINT_FASHION_MNIST_DIR\n"
"                        or /usr/share/datasets/fashion-mnist; cifar10: required)\n"
"  --formats LIST        comma list of fp32,fp16,bf16,flex16_5,dfp16; flex16_5 may name an\n"
"                        Autoflex preset as flex16_5:PRESET       (default all five)\n"
"  --autoflex PRESET     default preset for flex16_5 runs: published | truemax | exact_init |\n"
"                        robust | fixed                              (default robust)\n"
"  --epochs N            epochs                                        (default 5)\n"
"  --batch N             batch size                                    (default 128)\n"
"  --lr X                learning rate                                 (default 0.02)\n"
"  --momentum X          SGD momentum                                  (default 0.9)\n"
"  --weight-decay X      L2 weight decay                               (default 0)\n"
"  --schedule NAME       constant | cosine | step                      (default constant)\n"
"  --no-master           keep weights only in the format (no fp32 master copy)\n"
"  --loss-scaling MODE   auto (fp16 only) | on | off                   (default auto)\n"
"  --stochastic-rounding round weight writes stochastically (with --no-master)\n"
"  --augment             random crop (pad 4) and horizontal flip\n"
"  --pad N               zero-pad images by N pixels per side (e.g. 2: 28x28 -> 32x32)\n"
"  --train-subset N      use the first N training images               (default all)\n"
"  --test-subset N       use the first N test images                   (default all)\n"
"  --synthetic-n N       synthetic training set size (test: N/5)       (default 10000)\n"
"  --seed N              seed of weights, batch order, augmentation    (default 0)\n"
"  --threads N           threads (default: all cores)\n"
"  --device DEV          cpu | cuda | cuda:N: train on the host or on CUDA device N (cuda is\n"
"                        cuda:0); batches are prepared on the host       (default cpu)\n"
"  --out DIR             write CSV results here                        (default results)\n"
"  --trace LIST          comma list of tensors whose per-write Autoflex trace is saved, e.g.\n"
"                        conv1.out,conv1.w.grad (flex16_5/dfp16 runs; default: a few)\n"
"  --checkpoint-dir DIR  save a checkpoint per run after every epoch\n"
"  --resume              continue runs from their checkpoints in --checkpoint-dir\n"
"  --quiet               no progress output\n"
"  --help                this text\n");
}

static int parse_formats(options *o, const char *list, const char *default_preset)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    o->nruns = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->nruns == MAX_RUNS) {
            fprintf(stderr, "flexpoint-train: at most %d runs\n", MAX_RUNS);
            return -1;
        }
        run_spec *r = &o->runs[o->nruns];
        char *colon = strchr(tok, ':');
        if (colon) *colon = '\0';
        int f = fmt_from_name(tok);
        if (f < 0) {
            fprintf(stderr, "flexpoint-train: --formats: unknown format '%s' (known: fp32, fp16, "
                            "bf16, flex16_5, dfp16)\n", tok);
            return -1;
        }
        const char *preset = colon ? colon + 1 : default_preset;
        fx_autoflex_config cfg;
        if (f == FMT_FLEX16_5 && fx_autoflex_preset(preset, &cfg) != FX_OK) {
            fprintf(stderr, "flexpoint-train: unknown Autoflex preset '%s' (known: published, "
                            "truemax, exact_init, robust, fixed)\n", preset);
            return -1;
        }
        r->fmt = f;
        snprintf(r->autoflex, sizeof r->autoflex, "%s", preset);
        if (f == FMT_FLEX16_5 && colon)
            snprintf(r->label, sizeof r->label, "%s:%s", fmt_name((fmt_t)f), preset);
        else
            snprintf(r->label, sizeof r->label, "%s", fmt_name((fmt_t)f));
        o->nruns++;
    }
    if (o->nruns == 0) {
        fprintf(stderr, "flexpoint-train: --formats is empty\n");
        return -1;
    }
    return 0;
}

static int parse_int(const char *opt, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi) {
        fprintf(stderr, "flexpoint-train: %s: '%s' is not an integer in [%ld, %ld]\n", opt, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_double(const char *opt, const char *v, double lo, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (*end || !isfinite(x) || x < lo) {
        fprintf(stderr, "flexpoint-train: %s: '%s' is not a number >= %g\n", opt, v, lo);
        return -1;
    }
    *out = x;
    return 0;
}

/* "cpu" -> -1, "cuda" -> 0, "cuda:N" -> N. */
static int parse_device(const char *v, int *out)
{
    if (!strcmp(v, "cpu")) {
        *out = -1;
        return 0;
    }
    if (!strcmp(v, "cuda")) {
        *out = 0;
        return 0;
    }
    if (!strncmp(v, "cuda:", 5) && v[5] >= '0' && v[5] <= '9') {
        char *end;
        errno = 0;
        long x = strtol(v + 5, &end, 10);
        if (!errno && !*end && x <= 1023) {
            *out = (int)x;
            return 0;
        }
    }
    fprintf(stderr, "flexpoint-train: --device: '%s' is not cpu, cuda or cuda:N (N a device "
                    "number, 0..1023)\n", v);
    return -1;
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

static int parse_args(int argc, char **argv, options *o)
{
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
    const char *formats = "fp32,fp16,bf16,flex16_5,dfp16";
    const char *preset = "robust";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
#define NEEDV()                                                                              \
    do {                                                                                     \
        if (!v) {                                                                            \
            fprintf(stderr, "flexpoint-train: %s needs a value (see --help)\n", a);          \
            return -1;                                                                       \
        }                                                                                    \
        i++;                                                                                 \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--model")) {
            NEEDV();
            if (strcmp(v, "mlp") && strcmp(v, "cnn") && strcmp(v, "resnet20")) {
                fprintf(stderr, "flexpoint-train: --model: unknown model '%s' (mlp, cnn, resnet20)\n", v);
                return -1;
            }
            snprintf(o->model, sizeof o->model, "%s", v);
        } else if (!strcmp(a, "--data")) {
            NEEDV();
            if (strcmp(v, "fashion-mnist") && strcmp(v, "cifar10") && strcmp(v, "synthetic")) {
                fprintf(stderr, "flexpoint-train: --data: unknown data set '%s' (fashion-mnist, "
                                "cifar10, synthetic)\n", v);
                return -1;
            }
            snprintf(o->data, sizeof o->data, "%s", v);
        } else if (!strcmp(a, "--data-dir")) {
            NEEDV();
            snprintf(o->data_dir, sizeof o->data_dir, "%s", v);
        } else if (!strcmp(a, "--formats")) {
            NEEDV();
            formats = v;
        } else if (!strcmp(a, "--autoflex")) {
            NEEDV();
            preset = v;
        } else if (!strcmp(a, "--epochs")) {
            NEEDV();
            if (parse_int(a, v, 1, 100000, &x)) return -1;
            o->epochs = (int)x;
        } else if (!strcmp(a, "--batch")) {
            NEEDV();
            if (parse_int(a, v, 1, 65536, &x)) return -1;
            o->batch = (int)x;
        } else if (!strcmp(a, "--lr")) {
            NEEDV();
            if (parse_double(a, v, 1e-12, &o->lr)) return -1;
        } else if (!strcmp(a, "--momentum")) {
            NEEDV();
            if (parse_double(a, v, 0, &o->momentum) || o->momentum >= 1) {
                fprintf(stderr, "flexpoint-train: --momentum must be in [0, 1)\n");
                return -1;
            }
        } else if (!strcmp(a, "--weight-decay")) {
            NEEDV();
            if (parse_double(a, v, 0, &o->wd)) return -1;
        } else if (!strcmp(a, "--schedule")) {
            NEEDV();
            if (!strcmp(v, "constant")) o->schedule = FX_LR_CONSTANT;
            else if (!strcmp(v, "cosine")) o->schedule = FX_LR_COSINE;
            else if (!strcmp(v, "step")) o->schedule = FX_LR_STEP;
            else {
                fprintf(stderr, "flexpoint-train: --schedule: unknown '%s' (constant, cosine, step)\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--no-master")) {
            o->master = 0;
        } else if (!strcmp(a, "--loss-scaling")) {
            NEEDV();
            if (!strcmp(v, "auto")) o->loss_scaling = -1;
            else if (!strcmp(v, "on")) o->loss_scaling = 1;
            else if (!strcmp(v, "off")) o->loss_scaling = 0;
            else {
                fprintf(stderr, "flexpoint-train: --loss-scaling: '%s' is not auto, on or off\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--stochastic-rounding")) {
            o->stochastic = 1;
        } else if (!strcmp(a, "--augment")) {
            o->augment = 1;
        } else if (!strcmp(a, "--pad")) {
            NEEDV();
            if (parse_int(a, v, 0, 64, &x)) return -1;
            o->pad = (int)x;
        } else if (!strcmp(a, "--train-subset")) {
            NEEDV();
            if (parse_int(a, v, 1, 1L << 40, &x)) return -1;
            o->train_subset = x;
        } else if (!strcmp(a, "--test-subset")) {
            NEEDV();
            if (parse_int(a, v, 1, 1L << 40, &x)) return -1;
            o->test_subset = x;
        } else if (!strcmp(a, "--synthetic-n")) {
            NEEDV();
            if (parse_int(a, v, 10, 1L << 30, &x)) return -1;
            o->synthetic_n = x;
        } else if (!strcmp(a, "--seed")) {
            NEEDV();
            if (parse_int(a, v, 0, 0x7fffffffL, &x)) return -1;
            o->seed = (uint64_t)x;
        } else if (!strcmp(a, "--threads")) {
            NEEDV();
            if (parse_int(a, v, 1, 1024, &x)) return -1;
            o->threads = (int)x;
        } else if (!strcmp(a, "--device")) {
            NEEDV();
            if (parse_device(v, &o->device)) return -1;
        } else if (!strcmp(a, "--out")) {
            NEEDV();
            snprintf(o->out, sizeof o->out, "%s", v);
        } else if (!strcmp(a, "--trace")) {
            NEEDV();
            snprintf(o->traces, sizeof o->traces, "%s", v);
        } else if (!strcmp(a, "--checkpoint-dir")) {
            NEEDV();
            snprintf(o->ckpt_dir, sizeof o->ckpt_dir, "%s", v);
        } else if (!strcmp(a, "--resume")) {
            o->resume = 1;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
        } else {
            fprintf(stderr, "flexpoint-train: unknown option '%s' (see --help)\n", a);
            return -1;
        }
    }
    if (o->resume && !o->ckpt_dir[0]) {
        fprintf(stderr, "flexpoint-train: --resume needs --checkpoint-dir\n");
        return -1;
    }
    if (!strcmp(o->data, "cifar10") && !o->data_dir[0]) {
        fprintf(stderr, "flexpoint-train: --data cifar10 needs --data-dir (the directory with "
                        "data_batch_1.bin ... test_batch.bin)\n");
        return -1;
    }
    if (!o->traces[0])
        snprintf(o->traces, sizeof o->traces, "%s",
                 !strcmp(o->model, "mlp") ? "fc1.out,fc1.w.grad,fc2.w" : !strcmp(o->model, "cnn")
                     ? "conv1.out,conv2.w.grad,fc1.w,loss.dlogits"
                     : "conv0.out,s3b3.conv2.w.grad,fc.w,loss.dlogits");
    return parse_formats(o, formats, preset);
}

static int load_data(const options *o, fx_dataset **train, fx_dataset **test)
{
    const char *dir = o->data_dir[0] ? o->data_dir : NULL;
    if (!strcmp(o->data, "fashion-mnist")) {
        *train = fx_dataset_fashion_mnist(dir, 1);
        *test = *train ? fx_dataset_fashion_mnist(dir, 0) : NULL;
    } else if (!strcmp(o->data, "cifar10")) {
        *train = fx_dataset_cifar10(dir, 1);
        *test = *train ? fx_dataset_cifar10(dir, 0) : NULL;
    } else {
        /* one generator call, so train and test share the class templates */
        int64_t ntest = o->synthetic_n / 5 > 0 ? o->synthetic_n / 5 : 1;
        fx_dataset *all = fx_dataset_synthetic(o->synthetic_n + ntest, 3, 32, 32, 10, o->seed + 1);
        *train = all ? fx_dataset_subset(all, 0, o->synthetic_n) : NULL;
        *test = all ? fx_dataset_subset(all, o->synthetic_n, ntest) : NULL;
        fx_dataset_free(all);
    }
    if (!*train || !*test) {
        fprintf(stderr, "flexpoint-train: %s\n", flexpoint_last_error());
        return -1;
    }
    fx_dataset *parts[2] = {*train, *test};
    int64_t subset[2] = {o->train_subset, o->test_subset};
    for (int i = 0; i < 2; i++) {
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
        if (!d) {
            fprintf(stderr, "flexpoint-train: %s\n", flexpoint_last_error());
            return -1;
        }
        parts[i] = d;
    }
    *train = parts[0];
    *test = parts[1];
    return 0;
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
    double acc, loss, seconds, ips;
    int epochs_done;
    int failed;
} run_result;

static void safe_name(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src);
    for (char *p = dst; *p; p++)
        if (*p == ':' || *p == '/') *p = '_';
}

static int run_one(const options *o, const run_spec *rs, const fx_dataset *train,
                   const fx_dataset *test, FILE *epochs_csv, FILE *steps_csv, run_result *res)
{
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
    fx_trainer *t = fx_trainer_new(&cfg, train, test);
    if (!t) {
        fprintf(stderr, "flexpoint-train: %s: %s\n", rs->label, flexpoint_last_error());
        return -1;
    }
    char safe[64], path[2048];
    safe_name(safe, sizeof safe, rs->label);
    /* per-write traces of chosen tensors (shared-exponent formats) */
    char tl[512];
    snprintf(tl, sizeof tl, "%s", o->traces);
    int traced[16], ntraced = 0;
    if (fmt_is_shared_exponent((fmt_t)rs->fmt))
        for (char *save = NULL, *tok = strtok_r(tl, ",", &save); tok && ntraced < 16;
             tok = strtok_r(NULL, ",", &save)) {
            int i = fx_trainer_tensor_find(t, tok);
            if (i < 0) {
                fprintf(stderr, "flexpoint-train: --trace: %s\n", flexpoint_last_error());
                continue;
            }
            if (tensor_trace_enable(fx_trainer_tensor(t, i), 1) == FX_OK) traced[ntraced++] = i;
        }
    if (o->ckpt_dir[0]) snprintf(path, sizeof path, "%s/%s.ckpt", o->ckpt_dir, safe);
    if (o->resume && access(path, R_OK) == 0) {
        if (fx_trainer_load(t, path) != FX_OK) {
            fprintf(stderr, "flexpoint-train: %s: cannot resume: %s\n", rs->label,
                    flexpoint_last_error());
            fx_trainer_free(t);
            return -1;
        }
        if (!o->quiet)
            fprintf(stderr, "%s: resumed from %s at epoch %d\n", rs->label, path,
                    fx_trainer_epoch_index(t));
    }
    memset(res, 0, sizeof *res);
    int rc = 0;
    for (int e = fx_trainer_epoch_index(t); e < o->epochs && !rc; e++) {
        /* step by step, for the progress bar and the sampled loss-scale / loss log */
        fx_epoch_metrics mt;
        int64_t total = fx_dataset_len(train) / o->batch;
        for (int64_t s = 0; s < total && !rc; s++) {
            float loss = 0;
            if (fx_trainer_epoch_index(t) > e) break;
            rc = fx_trainer_step(t, &loss);
            int64_t g = fx_trainer_global_step(t);
            if (!rc && (g % 10 == 0 || s + 1 == total))
                fprintf(steps_csv, "%s,%lld,%d,%.6g,%.6g\n", rs->label, (long long)g, e + 1,
                        loss, fx_trainer_loss_scaler(t)->scale);
            if (!rc && (s % 5 == 0 || s + 1 == total)) progress(o, rs->label, e + 1, s + 1, total, loss);
        }
        if (!rc) rc = fx_trainer_epoch(t, &mt);
        if (rc) break;
        if (!o->quiet) {
            if (isatty(2)) fprintf(stderr, "\r%-70s\r", "");
            fprintf(stderr, "%-18s epoch %d/%d  loss %.4f  train acc %.4f  test acc %.4f  %.1f s  "
                            "%.0f img/s%s\n", rs->label, mt.epoch, o->epochs, mt.train_loss,
                    mt.train_accuracy, mt.test_accuracy, mt.seconds, mt.images_per_second,
                    mt.skipped_steps ? "  (steps skipped by the loss scaler)" : "");
        }
        fprintf(epochs_csv, "%s,%s,%d,%.6f,%.6f,%.6f,%.6f,%.3f,%.1f,%.6g,%lld,%lld\n", rs->label,
                o->model, mt.epoch, mt.train_loss, mt.train_accuracy, mt.test_loss,
                mt.test_accuracy, mt.seconds, mt.images_per_second, mt.loss_scale,
                (long long)mt.skipped_steps, (long long)mt.nonfinite_losses);
        fflush(epochs_csv);
        fflush(steps_csv);
        res->acc = mt.test_accuracy;
        res->loss = mt.train_loss;
        res->seconds += mt.seconds;
        res->ips = mt.images_per_second;
        res->epochs_done++;
        if (o->ckpt_dir[0] && fx_trainer_save(t, path) != FX_OK) {
            fprintf(stderr, "flexpoint-train: %s\n", flexpoint_last_error());
            rc = -1;
        }
    }
    if (rc && rc != -1) fprintf(stderr, "flexpoint-train: %s: %s\n", rs->label, flexpoint_last_error());
    for (int k = 0; k < ntraced; k++) {
        char tp[2048];
        snprintf(tp, sizeof tp, "%s/trace_%s_%s.csv", o->out, safe, fx_trainer_tensor_name(t, traced[k]));
        if (tensor_trace_write_csv(fx_trainer_tensor(t, traced[k]), tp) != FX_OK)
            fprintf(stderr, "flexpoint-train: %s\n", flexpoint_last_error());
    }
    fx_trainer_free(t);
    return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    options o;
    if (parse_args(argc, argv, &o)) return 2;
    if (check_device(&o)) return 1; /* before creating directories or loading data */
#ifdef __GLIBC__
    /* Training allocates and frees the same large scratch buffers every step. Keep them in the
     * heap instead of fresh mmap()s, which would page-fault them in again each time. */
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
    mallopt(M_TRIM_THRESHOLD, 512 * 1024 * 1024);
#endif
    if (mkdir(o.out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "flexpoint-train: cannot create %s: %s\n", o.out, strerror(errno));
        return 1;
    }
    if (o.ckpt_dir[0] && mkdir(o.ckpt_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "flexpoint-train: cannot create %s: %s\n", o.ckpt_dir, strerror(errno));
        return 1;
    }
    if (o.threads > 0) flexpoint_set_num_threads(o.threads);
    fx_dataset *train, *test;
    if (load_data(&o, &train, &test)) return 1;
    if (!o.quiet) {
        char where[192] = "";
        if (o.device >= 0) {
            const char *name = flexpoint_gpu_device_name();
            snprintf(where, sizeof where, ", device cuda:%d (%s)", o.device, name ? name : "?");
        }
        fprintf(stderr, "flexpoint-train: %s on %s (%lld train / %lld test images, %dx%dx%d), "
                        "%d epochs, batch %d, lr %g, backend %s, %d threads%s\n", o.model,
                fx_dataset_source(train), (long long)fx_dataset_len(train),
                (long long)fx_dataset_len(test), fx_dataset_channels(train),
                fx_dataset_height(train), fx_dataset_width(train), o.epochs, o.batch, o.lr,
                flexpoint_backend(), flexpoint_num_threads(), where);
    }
    char p1[2048], p2[2048];
    snprintf(p1, sizeof p1, "%s/epochs.csv", o.out);
    snprintf(p2, sizeof p2, "%s/steps.csv", o.out);
    FILE *ec = fopen(p1, "w"), *sc = fopen(p2, "w");
    if (!ec || !sc) {
        fprintf(stderr, "flexpoint-train: cannot write %s: %s\n", !ec ? p1 : p2, strerror(errno));
        return 1;
    }
    fprintf(ec, "run,model,epoch,train_loss,train_accuracy,test_loss,test_accuracy,seconds,"
                "images_per_second,loss_scale,skipped_steps,nonfinite_losses\n");
    fprintf(sc, "run,step,epoch,loss,loss_scale\n");
    run_result res[MAX_RUNS];
    int failures = 0;
    for (int r = 0; r < o.nruns; r++) {
        res[r].failed = run_one(&o, &o.runs[r], train, test, ec, sc, &res[r]) != 0;
        failures += res[r].failed;
    }
    fclose(ec);
    fclose(sc);
    /* summary: accuracy, gap to fp32, time ratio */
    int ref = -1;
    for (int r = 0; r < o.nruns; r++)
        if (o.runs[r].fmt == FMT_FP32 && !res[r].failed) ref = r;
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
            snprintf(gap, sizeof gap, "%+.2f pts", 100.0 * (res[r].acc - res[ref].acc));
            snprintf(ratio, sizeof ratio, "%.2fx", spe / (res[ref].seconds / res[ref].epochs_done));
        }
        printf("%-20s %10.4f %12s %12.1f %12.0f %10s\n", o.runs[r].label, res[r].acc, gap, spe,
               res[r].ips, ratio);
    }
    printf("(time ratio: seconds per epoch relative to fp32; CSV in %s/)\n", o.out);
    fx_dataset_free(train);
    fx_dataset_free(test);
    return failures ? 1 : 0;
}
