/* flexpoint-info: the CPU, the backends it can run, the kernel chosen per op and format (and
 * what chose it), the measured instruction limits of one thread (fp32 FMA, int16 pair
 * products, bf16 pair products: flexpoint_instruction_limits), and a brief measurement of each
 * matmul kernel (a 512^3 GEMM per format at one thread, best of 5, each bf16 route and each
 * int16 kernel this CPU can run, as a share of its limit), about a second in all.
 *
 *   flexpoint-info [--no-measure]     (--no-measure: neither limits nor GEMMs)
 *
 * FLEXPOINT_CPU, FLEXPOINT_KERNEL_BF16_GEMM and FLEXPOINT_KERNEL_I16_GEMM are honoured as by
 * every program using the library, so the output shows what a run under the same environment
 * would use. */
#include "flexpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* GFLOP/s (GOP/s for the integer formats) of an n^3 matmul in fmt, best of reps; <0 on error */
static double measure(fmt_t fmt, int64_t n, int reps)
{
    const int64_t sh[2] = {n, n};
    tensor_t *a = tensor_new(fmt, 2, sh), *b = tensor_new(fmt, 2, sh), *c = tensor_new(fmt, 2, sh);
    float *v = malloc(sizeof(float) * (size_t)(n * n));
    double best = -1.0;
    if (a && b && c && v) {
        uint32_t s = 12345u;
        for (int64_t i = 0; i < n * n; i++) {
            s = s * 1664525u + 1013904223u;
            v[i] = (float)((int32_t)(s >> 8) - (1 << 23)) * (1.0f / (float)(1 << 23));
        }
        if (tensor_from_f32(a, v) == FX_OK && tensor_from_f32(b, v) == FX_OK &&
            tensor_matmul(c, a, b) == FX_OK) { /* the warm-up run */
            for (int r = 0; r < reps; r++) {
                const double t0 = now_s();
                if (tensor_matmul(c, a, b) != FX_OK) break;
                const double g = 2.0 * (double)n * (double)n * (double)n / (now_s() - t0) * 1e-9;
                if (g > best) best = g;
            }
        }
    }
    free(v);
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
    return best;
}

int main(int argc, char **argv)
{
    int do_measure = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-measure") == 0) {
            do_measure = 0;
        } else {
            fprintf(stderr, "usage: flexpoint-info [--no-measure]\n");
            return strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ? 0 : 2;
        }
    }
    printf("flexpoint %s\n", flexpoint_version());
    printf("cpu:       %s\n", flexpoint_cpu_model());
    printf("features:  %s\n", flexpoint_cpu_features());
    printf("backends: ");
    for (int i = 0; i < flexpoint_backend_count(); i++)
        printf(" %s%s", flexpoint_backend_name(i), flexpoint_backend_available(i) ? "" : "(n/a)");
    printf("\nbackend:   %s (ISA level in use)\n", flexpoint_backend());
    printf("kernels:   %s\n", flexpoint_kernel_report());
    if (!do_measure) return 0;

    double lim_fma = 0, lim_i16 = 0, lim_bf16 = 0;
    flexpoint_instruction_limits(&lim_fma, &lim_i16, &lim_bf16);
    printf("limits:    %s\n", flexpoint_instruction_limits_report());

    const int64_t n = 512;
    const int prev_threads = flexpoint_set_num_threads(1);
    printf("\nmatmul %lldx%lldx%lld, 1 thread, best of 5 (G(FL)OP/s, share of the limit; "
           "operands uniform in [-1, 1)):\n", (long long)n, (long long)n, (long long)n);
    for (int f = 0; f < FMT_COUNT; f++) {
        const fmt_t fmt = (fmt_t)f;
        const char *chosen = flexpoint_kernel_name("matmul", fmt);
        const int integer = fmt == FMT_FLEX16_5 || fmt == FMT_DFP16;
        const double lim = integer ? lim_i16 : fmt == FMT_BF16 && lim_bf16 > 0 ? lim_bf16 : lim_fma;
        if (integer && strcmp(flexpoint_backend(), "scalar") != 0) {
            /* each int16 kernel this CPU runs, then the chosen one back in place */
            char keep[32];
            snprintf(keep, sizeof keep, "%s", chosen);
            static const char *const kinds[] = {"auto", "split", "wrap", "fast"};
            for (int k = 0; k < 4; k++) {
                if (flexpoint_set_kernel("matmul", fmt, kinds[k]) != FX_OK) {
                    printf("  %-9s %-17s %8s (this CPU cannot run it)\n", fmt_name(fmt), kinds[k], "-");
                    continue;
                }
                const double g = measure(fmt, n, 5);
                printf("  %-9s %-17s %8.1f %5.0f%%%s\n", fmt_name(fmt),
                       flexpoint_kernel_name("matmul", fmt), g, lim > 0 ? 100.0 * g / lim : 0.0,
                       strcmp(flexpoint_kernel_name("matmul", fmt), keep) == 0 ? "  (chosen)" : "");
            }
            if (flexpoint_set_kernel("matmul", fmt, keep) != FX_OK) {
                fprintf(stderr, "flexpoint-info: could not restore %s\n", keep);
                return 1;
            }
            continue;
        }
        if (fmt != FMT_BF16 || strcmp(flexpoint_backend(), "avx512") != 0) {
            const double g = measure(fmt, n, 5);
            printf("  %-9s %-17s %8.1f %5.0f%%\n", fmt_name(fmt), chosen, g,
                   lim > 0 ? 100.0 * g / lim : 0.0);
            continue;
        }
        /* every bf16 route this CPU runs, then the chosen one back in place */
        char keep[32];
        snprintf(keep, sizeof keep, "%s", chosen);
        static const char *const routes[] = {"widen", "dpbf16", "amx"};
        for (int r = 0; r < 3; r++) {
            if (flexpoint_set_kernel("matmul", FMT_BF16, routes[r]) != FX_OK) {
                printf("  %-9s avx512-%-10s %8s (this CPU cannot run it)\n", "bf16", routes[r], "-");
                continue;
            }
            const double g = measure(fmt, n, 5);
            printf("  %-9s avx512-%-10s %8.1f %5.0f%%%s\n", "bf16", routes[r], g,
                   lim > 0 ? 100.0 * g / lim : 0.0,
                   strcmp(keep + 7, routes[r]) == 0 ? "  (chosen)" : "");
        }
        if (flexpoint_set_kernel("matmul", FMT_BF16, keep) != FX_OK) {
            fprintf(stderr, "flexpoint-info: could not restore %s\n", keep);
            return 1;
        }
    }
    flexpoint_set_num_threads(prev_threads);
    return 0;
}
