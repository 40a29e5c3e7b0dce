/* Where a training step goes, per format: an image model (the CNN by default) on Fashion-MNIST
 * trained with profiling on (fx_trainer_profile_enable) in every format, alternating step by
 * step in one process, so that a shared machine's slow phases fall on every format alike.
 *   ./build/release/bench/bench_profile [steps] [threads ...]      (default: 200 1 2)
 * Environment: FLEXPOINT_FASHION_MNIST_DIR (default /usr/share/datasets/fashion-mnist),
 * BENCH_FORMATS (default "fp32 fp16 bf16 flex16_5 dfp16"), BENCH_MODEL (cnn, the default, or
 * any image model of the trainer; resnet* models train on the images padded by 2 to 32x32, as
 * `flexpoint-train --pad 2` and bench_train_pairs).
 *
 * Per thread count and format: the trainer's recipe defaults (batch 128, SGD with momentum,
 * fp16 with dynamic loss scaling), steps on the seeded batch order after 5 untimed ones, then
 *   - ms a step: the profile's wall time per step, and the process CPU time per step (all
 *     threads; the other jobs of a shared machine do not inflate it), with its ratio to fp32's;
 *   - the step's shares spent on conversions, rounding and Autoflex bookkeeping
 *     (fx_trainer_profile_split), and the share of everything else (kernels, packing, the
 *     phases' other work);
 *   - per layer, forward plus backward ms a step and the same split as shares of the step. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

enum { MAXF = 5, WARMUP = 5 };

static double cpu_s(void) { return bench_clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static double split_sum(const fx_time_split *s)
{
    return s->conversion_s + s->rounding_s + s->autoflex_s;
}

int main(int argc, char **argv)
{
    const int steps = argc > 1 ? atoi(argv[1]) : 200;
    int threads[8] = {1, 2}, nthreads = 2;
    if (argc > 2) {
        nthreads = 0;
        for (int i = 2; i < argc && nthreads < 8; i++) threads[nthreads++] = atoi(argv[i]);
    }
    int bad = steps < 1;
    for (int i = 0; i < nthreads; i++) bad |= threads[i] < 1;
    if (bad) {
        fprintf(stderr, "usage: bench_profile [steps >= 1] [threads >= 1 ...]\n");
        return 2;
    }
    int fmts[MAXF], nf = 0;
    char list[256];
    snprintf(list, sizeof list, "%s",
             getenv("BENCH_FORMATS") ? getenv("BENCH_FORMATS") : "fp32 fp16 bf16 flex16_5 dfp16");
    for (char *tok = strtok(list, " ,"); tok && nf < MAXF; tok = strtok(NULL, " ,")) {
        const int f = fmt_from_name(tok);
        if (f < 0) {
            fprintf(stderr, "bench_profile: unknown format '%s'\n", tok);
            return 2;
        }
        fmts[nf++] = f;
    }
    const char *model = getenv("BENCH_MODEL") ? getenv("BENCH_MODEL") : "cnn";
    if (fx_model_check(model) != FX_OK || !strncmp(model, "transformer", 11) ||
        !strncmp(model, "gpt", 3)) {
        fprintf(stderr, "bench_profile: BENCH_MODEL='%s': want an image model's name (%s)\n",
                model, fx_model_check(model) != FX_OK ? flexpoint_last_error() : "a text model");
        return 2;
    }
    const char *dir = getenv("FLEXPOINT_FASHION_MNIST_DIR");
    if (!dir) dir = "/usr/share/datasets/fashion-mnist";
    fx_dataset *raw = fx_dataset_fashion_mnist(dir, 1), *train = raw;
    if (raw && !strncmp(model, "resnet", 6)) train = fx_dataset_pad(raw, 2);
    if (!train) {
        fprintf(stderr, "bench_profile: %s\n", flexpoint_last_error());
        return 1;
    }
    printf("bench_profile: %s on Fashion-MNIST, batch 128, %d profiled steps after %d; "
           "flexpoint %s, backend %s, CPU %s\n", model, steps, WARMUP, flexpoint_version(),
           flexpoint_backend(), flexpoint_cpu_model());
    for (int ti = 0; ti < nthreads; ti++) {
        fx_trainer *t[MAXF] = {NULL};
        double cpu[MAXF] = {0};
        for (int f = 0; f < nf; f++) {
            fx_train_config c;
            fx_train_config_default(&c);
            snprintf(c.model, sizeof c.model, "%s", model);
            c.fmt = fmts[f];
            c.threads = threads[ti];
            t[f] = fx_trainer_new(&c, train, NULL);
            if (!t[f]) {
                fprintf(stderr, "bench_profile: %s: %s\n", fmt_name((fmt_t)fmts[f]),
                        flexpoint_last_error());
                return 1;
            }
        }
        for (int s = 0; s < WARMUP + steps; s++)
            for (int f = 0; f < nf; f++) {
                if (s == WARMUP && fx_trainer_profile_enable(t[f], 1)) return 1;
                flexpoint_set_num_threads(threads[ti]);
                const double c0 = cpu_s();
                if (fx_trainer_step(t[f], NULL)) {
                    fprintf(stderr, "bench_profile: %s step %d: %s\n", fmt_name((fmt_t)fmts[f]),
                            s, flexpoint_last_error());
                    return 1;
                }
                if (s >= WARMUP) cpu[f] += cpu_s() - c0;
            }
        printf("\n== %d thread(s) ==\n%-9s %9s %9s %9s %8s %8s %8s %8s\n", threads[ti], "format",
               "wall ms", "cpu ms", "cpu/fp32", "conv", "round", "autoflex", "other");
        double cpu_fp32 = 0;
        for (int f = 0; f < nf; f++)
            if (fmts[f] == FMT_FP32) cpu_fp32 = cpu[f];
        for (int f = 0; f < nf; f++) {
            fx_train_profile p;
            fx_train_profile_split sp;
            if (fx_trainer_profile(t[f], &p) || fx_trainer_profile_split(t[f], &sp)) return 1;
            const double tot = p.total_s;
            char ratio[16] = "-";
            if (cpu_fp32 > 0) snprintf(ratio, sizeof ratio, "%.2f", cpu[f] / cpu_fp32);
            printf("%-9s %9.1f %9.1f %9s %7.1f%% %7.1f%% %7.1f%% %7.1f%%\n",
                   fmt_name((fmt_t)fmts[f]), 1e3 * tot / (double)p.steps,
                   1e3 * cpu[f] / (double)p.steps, ratio, 100 * sp.total.conversion_s / tot,
                   100 * sp.total.rounding_s / tot, 100 * sp.total.autoflex_s / tot,
                   100 * (1 - split_sum(&sp.total) / tot));
        }
        printf("per layer: forward + backward ms a step (wall) | conversions, rounding, Autoflex "
               "as %% of the step\n%-8s", "layer");
        for (int f = 0; f < nf; f++) printf(" | %-24s", fmt_name((fmt_t)fmts[f]));
        printf("\n");
        for (int i = 0; i < fx_trainer_layer_count(t[0]); i++) {
            fx_layer_profile lp;
            if (fx_trainer_layer_profile(t[0], i, &lp)) return 1;
            printf("%-8s", lp.name);
            for (int f = 0; f < nf; f++) {
                fx_train_profile p;
                fx_time_split a, b;
                if (fx_trainer_profile(t[f], &p) || fx_trainer_layer_profile(t[f], i, &lp) ||
                    fx_trainer_layer_profile_split(t[f], i, &a, &b))
                    return 1;
                const double tot = p.total_s;
                printf(" | %6.1f %5.1f %5.1f %5.1f", 1e3 * (lp.forward_s + lp.backward_s) /
                       (double)p.steps, 100 * (a.conversion_s + b.conversion_s) / tot,
                       100 * (a.rounding_s + b.rounding_s) / tot,
                       100 * (a.autoflex_s + b.autoflex_s) / tot);
            }
            printf("\n");
        }
        printf("%-8s", "phases");
        for (int f = 0; f < nf; f++) {
            fx_train_profile p;
            fx_train_profile_split sp;
            if (fx_trainer_profile(t[f], &p) || fx_trainer_profile_split(t[f], &sp)) return 1;
            const double tot = p.total_s, rest = tot - p.forward_s - p.backward_s;
            const fx_time_split *x[3] = {&sp.data, &sp.loss, &sp.update};
            double cv = 0, rd = 0, af = 0;
            for (int k = 0; k < 3; k++) {
                cv += x[k]->conversion_s;
                rd += x[k]->rounding_s;
                af += x[k]->autoflex_s;
            }
            printf(" | %6.1f %5.1f %5.1f %5.1f", 1e3 * rest / (double)p.steps, 100 * cv / tot,
                   100 * rd / tot, 100 * af / tot);
        }
        printf("   (data, loss, update and the rest)\n");
        for (int f = 0; f < nf; f++) fx_trainer_free(t[f]);
    }
    if (train != raw) fx_dataset_free(train);
    fx_dataset_free(raw);
    return 0;
}
