/* End-to-end training speed as paired ratios: one trainer per format and thread count, all
 * stepping in turn (a round = one step of each), so that a shared machine's slow phases fall on
 * every configuration alike. Profiling stays off: this is the speed a training run sees.
 *   ./build/release/bench/bench_train_pairs [rounds] [threads ...]     (default: 40 1 2)
 * Environment: BENCH_MODEL (cnn, the default, or any trainer model; resnet* models train on
 * Fashion-MNIST padded by 2 to 32x32, as `flexpoint-train --pad 2`; transformer and
 * gpt<L>x<D>h<H>c<T> on the fortunes' text in windows of their context, as `flexpoint-train
 * --data fortunes`), BENCH_FORMATS (default
 * "fp32 fp16 bf16 flex16_5 dfp16"), FLEXPOINT_FASHION_MNIST_DIR.
 *
 * Every trainer uses the trainer's recipe defaults (batch 128, SGD with momentum, fp16 with
 * dynamic loss scaling) and runs 3 untimed steps first; each round starts at the next format.
 * Reported per configuration:
 *   - ms a step: the median over the rounds of the step's wall time;
 *   - vs fp32: the median over the rounds of (this step / fp32's step at the same thread
 *     count in the same round): a paired ratio, which the machine's drifts cancel out of;
 *   - speedup: the median over the rounds of (the step at the first thread count / the step
 *     at this one), the same format in the same round;
 *   - mean ms and sum / fp32: the mean step, and the sum of this configuration's steps over
 *     the sum of fp32's at the same thread count in the same rounds. An epoch's time is such a
 *     sum, so this ratio counts what the medians leave out: the occasional step that runs an
 *     op again (a DFP16 convolution whose exponent moved past its guesses) or pays for a
 *     slow moment of the machine.
 * BENCH_CSV=FILE also writes every timed step (round, format, threads, ms) to FILE.
 * An epoch of 60,000 images is 469 such steps plus the test pass, which is not timed here. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

enum { MAXF = 5, MAXT = 4, WARMUP = 3 };

int main(int argc, char **argv)
{
    const int rounds = argc > 1 ? atoi(argv[1]) : 40;
    int threads[MAXT] = {1, 2}, nt = 2;
    if (argc > 2) {
        nt = 0;
        for (int i = 2; i < argc && nt < MAXT; i++) threads[nt++] = atoi(argv[i]);
    }
    int bad = rounds < 1 || argc - 2 > MAXT;
    for (int i = 0; i < nt; i++) bad |= threads[i] < 1;
    if (bad) {
        fprintf(stderr, "usage: bench_train_pairs [rounds >= 1] [threads >= 1 ...] (at most %d)\n",
                MAXT);
        return 2;
    }
    const char *model = getenv("BENCH_MODEL") ? getenv("BENCH_MODEL") : "cnn";
    int fmts[MAXF], nf = 0, fp32_index = -1;
    char list[256];
    snprintf(list, sizeof list, "%s",
             getenv("BENCH_FORMATS") ? getenv("BENCH_FORMATS") : "fp32 fp16 bf16 flex16_5 dfp16");
    for (char *tok = strtok(list, " ,"); tok; tok = strtok(NULL, " ,")) {
        const int f = fmt_from_name(tok);
        if (f < 0 || nf == MAXF) {
            fprintf(stderr, "bench_train_pairs: %s '%s'\n",
                    f < 0 ? "unknown format" : "more than 5 formats at", tok);
            return 2;
        }
        if (f == FMT_FP32) fp32_index = nf;
        fmts[nf++] = f;
    }
    const char *dir = getenv("FLEXPOINT_FASHION_MNIST_DIR");
    if (!dir) dir = "/usr/share/datasets/fashion-mnist";
    const int text = !strncmp(model, "transformer", 11) || !strncmp(model, "gpt", 3);
    fx_dataset *raw = NULL, *train = NULL;
    if (text) { /* the fortunes' windows of the model's context (gpt<L>x<D>h<H>c<T>; 128) */
        const char *c = strrchr(model, 'c');
        const int T = !strncmp(model, "gpt", 3) && c ? atoi(c + 1) : 128;
        fx_dataset *val = NULL;
        if (fx_dataset_text(FX_DATA_FORTUNES_DIR, T, 0.1, &raw, &val) == FX_OK) train = raw;
        fx_dataset_free(val);
    } else {
        raw = train = fx_dataset_fashion_mnist(dir, 1);
        if (raw && !strncmp(model, "resnet", 6)) train = fx_dataset_pad(raw, 2);
    }
    if (!train) {
        fprintf(stderr, "bench_train_pairs: %s\n", flexpoint_last_error());
        return 1;
    }
    fx_trainer *t[MAXF][MAXT] = {{NULL}};
    double *ms = calloc((size_t)(nf * nt * rounds), sizeof *ms);
    double *tmp = calloc((size_t)rounds, sizeof *tmp);
    if (!ms || !tmp) {
        fprintf(stderr, "bench_train_pairs: out of memory\n");
        return 1;
    }
#define MS(f, k, r) ms[((f) * nt + (k)) * rounds + (r)]
    for (int f = 0; f < nf; f++)
        for (int k = 0; k < nt; k++) {
            fx_train_config c;
            fx_train_config_default(&c);
            snprintf(c.model, sizeof c.model, "%s", model);
            c.fmt = fmts[f];
            c.threads = threads[k];
            t[f][k] = fx_trainer_new(&c, train, NULL);
            if (!t[f][k]) {
                fprintf(stderr, "bench_train_pairs: %s: %s\n", fmt_name((fmt_t)fmts[f]),
                        flexpoint_last_error());
                return 1;
            }
        }
    printf("bench_train_pairs: %s on %s, batch 128, %d rounds after %d; flexpoint %s, "
           "backend %s, CPU %s\n", model, text ? "fortunes" : "Fashion-MNIST", rounds, WARMUP,
           flexpoint_version(),
           flexpoint_backend(), flexpoint_cpu_model());
    /* each round starts at another format, so that no format always runs first after the
     * thread count changes */
    for (int r = -WARMUP; r < rounds; r++)
        for (int k = 0; k < nt; k++)
            for (int fi = 0; fi < nf; fi++) {
                const int f = (fi + (r + WARMUP)) % nf;
                flexpoint_set_num_threads(threads[k]);
                const double t0 = bench_clock_s(CLOCK_MONOTONIC);
                if (fx_trainer_step(t[f][k], NULL)) {
                    fprintf(stderr, "bench_train_pairs: %s, %d threads: %s\n",
                            fmt_name((fmt_t)fmts[f]), threads[k], flexpoint_last_error());
                    return 1;
                }
                if (r >= 0) MS(f, k, r) = 1e3 * (bench_clock_s(CLOCK_MONOTONIC) - t0);
            }
    printf("%-9s %7s %10s %8s %9s %8s %11s\n", "format", "threads", "ms a step", "vs fp32",
           "speedup", "mean ms", "sum / fp32");
    for (int k = 0; k < nt; k++)
        for (int f = 0; f < nf; f++) {
            for (int r = 0; r < rounds; r++) tmp[r] = MS(f, k, r);
            const double med = bench_median(tmp, rounds);
            char vs[16] = "-", up[16] = "-";
            if (fp32_index >= 0) {
                for (int r = 0; r < rounds; r++) tmp[r] = MS(f, k, r) / MS(fp32_index, k, r);
                snprintf(vs, sizeof vs, "%.3f", bench_median(tmp, rounds));
            }
            if (k > 0) {
                for (int r = 0; r < rounds; r++) tmp[r] = MS(f, 0, r) / MS(f, k, r);
                snprintf(up, sizeof up, "%.2fx", bench_median(tmp, rounds));
            }
            double sum = 0.0, sum32 = 0.0;
            for (int r = 0; r < rounds; r++) {
                sum += MS(f, k, r);
                if (fp32_index >= 0) sum32 += MS(fp32_index, k, r);
            }
            char of_sum[16] = "-";
            if (fp32_index >= 0 && sum32 > 0.0) snprintf(of_sum, sizeof of_sum, "%.3f", sum / sum32);
            printf("%-9s %7d %10.1f %8s %9s %8.1f %11s\n", fmt_name((fmt_t)fmts[f]), threads[k],
                   med, vs, up, sum / rounds, of_sum);
        }
    const char *csv = getenv("BENCH_CSV");
    FILE *fc = csv ? fopen(csv, "w") : NULL;
    if (csv && !fc) fprintf(stderr, "bench_train_pairs: cannot write %s\n", csv);
    if (fc) {
        fprintf(fc, "round,format,threads,ms\n");
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < nt; k++)
                for (int f = 0; f < nf; f++)
                    fprintf(fc, "%d,%s,%d,%.3f\n", r, fmt_name((fmt_t)fmts[f]), threads[k],
                            MS(f, k, r));
        fclose(fc);
    }
#undef MS
    for (int f = 0; f < nf; f++)
        for (int k = 0; k < nt; k++) fx_trainer_free(t[f][k]);
    if (train != raw) fx_dataset_free(train);
    fx_dataset_free(raw);
    free(ms);
    free(tmp);
    return 0;
}
