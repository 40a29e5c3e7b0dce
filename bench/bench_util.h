/* Helpers every benchmark program shares: a clock reading in seconds, the median of a
 * sample, the formats a program was asked for, the instruction limits, and the convolution
 * benchmarks' operand values and tensors. Header-only (each bench/bench_*.c is its own
 * program); include it after <time.h>'s feature macros are set (_POSIX_C_SOURCE or
 * _GNU_SOURCE at the top of the program). */
#ifndef FX_BENCH_UTIL_H
#define FX_BENCH_UTIL_H

#include "flexpoint.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <dirent.h>
#include <unistd.h>
#endif

static inline double bench_clock_read_s(clockid_t id)
{
    struct timespec t;
    if (clock_gettime(id, &t) != 0) return 0.0;
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* All threads' CPU seconds, every running thread's time up to the reading. The kernel adds
 * another thread's time to CLOCK_PROCESS_CPUTIME_ID only as it accounts it, at that thread's
 * scheduler ticks: a two-thread pass of a few milliseconds read 1x or 3x its wall time by
 * turns that way (a best-of-N then took the 1x, as if one thread had done the work). A
 * thread's own CPU clock includes its time up to the reading, so on Linux this sums the clocks
 * of the threads in /proc/self/task (the clock id of thread tid is the kernel's
 * ~tid << 3 | 6, as glibc's pthread_getcpuclockid makes it), the caller's own read last, so
 * that the listing's cost falls outside an interval read start to end. The caller must be the
 * main thread (every benchmark times from main). Elsewhere, or without /proc, the process
 * clock. */
static inline double bench_process_cpu_s(void)
{
#ifdef __linux__
    DIR *d = opendir("/proc/self/task");
    if (d) {
        double others = 0.0;
        const long self = (long)getpid(); /* the main thread's id, the caller's */
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char *end;
            const long tid = strtol(e->d_name, &end, 10);
            if (tid <= 0 || *end != '\0' || tid == self) continue;
            const clockid_t id = (clockid_t)((~(unsigned long)tid << 3) | 6u);
            others += bench_clock_read_s(id); /* 0 for a thread gone since the listing */
        }
        closedir(d);
        return others + bench_clock_read_s(CLOCK_THREAD_CPUTIME_ID);
    }
#endif
    return bench_clock_read_s(CLOCK_PROCESS_CPUTIME_ID);
}

/* Seconds on clock id: CLOCK_MONOTONIC (wall), CLOCK_THREAD_CPUTIME_ID (the caller's CPU time)
 * or CLOCK_PROCESS_CPUTIME_ID (all threads' CPU time, which a shared machine's other jobs do not
 * inflate; read by bench_process_cpu_s). */
static inline double bench_clock_s(clockid_t id)
{
    if (id == CLOCK_PROCESS_CPUTIME_ID) return bench_process_cpu_s();
    return bench_clock_read_s(id);
}

/* A timed span's wall and CPU time (cpu: CLOCK_PROCESS_CPUTIME_ID or CLOCK_THREAD_CPUTIME_ID),
 * the CPU clock read outside the wall interval at both ends, so that the process clock's
 * listing of threads costs the wall time nothing */
typedef struct bench_span {
    clockid_t cpu;
    double c0, w0;
} bench_span;

static inline bench_span bench_span_begin(clockid_t cpu)
{
    bench_span s;
    s.cpu = cpu;
    s.c0 = bench_clock_s(cpu);
    s.w0 = bench_clock_s(CLOCK_MONOTONIC);
    return s;
}

static inline void bench_span_end(const bench_span *s, double *wall, double *cpu)
{
    *wall = bench_clock_s(CLOCK_MONOTONIC) - s->w0;
    *cpu = bench_clock_s(s->cpu) - s->c0;
}

/* qsort order of doubles, ascending */
static inline int bench_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n-1], n >= 1 (sorts v). */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The formats a program was asked for: list (comma-separated names, NULL: none asked) into
 * wanted[f] = 1. Returns 1 where some format was named, 0 for no list, -1 (with a message naming
 * prog and the word) for an unknown name. */
static inline int bench_formats_wanted(const char *list, int wanted[FMT_COUNT], const char *prog)
{
    for (int f = 0; f < FMT_COUNT; f++) wanted[f] = 0;
    if (!list) return 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    int any = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        const int f = fmt_from_name(tok);
        if (f < 0) {
            fprintf(stderr, "%s: unknown format '%s'\n", prog, tok);
            return -1;
        }
        wanted[f] = any = 1;
    }
    return any;
}

/* The library's instruction limits per thread (flexpoint_instruction_limits: the numbers
 * flexpoint-info and fx.kernel_info() give in this process), printed in one line; bf16's is
 * vdpbf16ps's where the CPU has it, else the FMA's (bf16 then widens to fp32). */
static inline void bench_instruction_limits(double *fma, double *i16, double *bf16)
{
    *fma = *i16 = *bf16 = 0;
    flexpoint_instruction_limits(fma, i16, bf16);
    printf("instruction limits per thread (measured): %s\n",
           flexpoint_instruction_limits_report());
    if (*bf16 <= 0) *bf16 = *fma;
}

/* The operands' shape for the convolution benchmarks, from BENCH_DATA: 1 for "normal" (the
 * default: standard-normal values, the shape of training's activations, weights and gradients,
 * on which the integer formats' exact GEMM takes its fast kernel where training does), 0 for
 * "uniform" (uniform values, whose int16 mantissas are large enough that most tiles take the
 * any-data kernel), -1 (with a message) for anything else. */
static inline int bench_data_normal(void)
{
    const char *d = getenv("BENCH_DATA");
    if (!d || strcmp(d, "normal") == 0) return 1;
    if (strcmp(d, "uniform") == 0) return 0;
    fprintf(stderr, "BENCH_DATA=%s: expected normal or uniform\n", d);
    return -1;
}

/* One operand value: scale times a standard normal (Box-Muller on two draws of a 32-bit LCG)
 * or a uniform value in [-1, 1) (one draw: the values the benchmarks used before BENCH_DATA);
 * relu != 0 clears negative values (ReLU-like activations). */
static inline float bench_value(unsigned *seed, float scale, int relu, int normal)
{
    *seed = *seed * 1664525u + 1013904223u;
    const unsigned d1 = *seed >> 8;
    double v = (double)d1 / 16777216.0 * 2.0 - 1.0;
    if (normal) {
        *seed = *seed * 1664525u + 1013904223u;
        const double u1 = ((double)d1 + 0.5) / 16777216.0; /* (0, 1): log(u1) is finite */
        const double u2 = (double)(*seed >> 8) / 16777216.0;
        v = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    }
    return scale * (float)(relu && v < 0 ? 0.0 : v);
}

/* A new 4-d tensor of format f and shape, holding bench_value(seed, scale, relu, normal)
 * values rounded into f; NULL where it cannot be made (flexpoint_last_error says why). */
static inline tensor_t *bench_tensor4(fmt_t f, const int64_t *shape, float scale, int relu,
                                      int normal, unsigned *seed)
{
    tensor_t *t = tensor_new(f, 4, shape);
    if (!t) return NULL;
    const int64_t n = tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) {
        tensor_free(t);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) v[i] = bench_value(seed, scale, relu, normal);
    const int rc = tensor_from_f32(t, v);
    free(v);
    if (rc) {
        tensor_free(t);
        return NULL;
    }
    return t;
}

#endif
