/* GFLOP/s of the fp32 matmul kernel of every available backend, called directly through the
 * backend table (no tensor or dispatch overhead), row-major operands.
 *
 * usage: bench_gemm_f32 [shape ...]       n (an n^3 product) or MxNxK; default 256 1024 2048
 * env:   BENCH_BACKENDS="avx2 avx512"     only these backends (default: all available)
 *        BENCH_THREADS="1 2"              thread counts (default: 1 2)
 *        BENCH_SECONDS=1.0                time budget per measurement (at least 3 reps)
 * Prints the median of the repetitions after one warm-up run, as wall-clock GFLOP/s and as
 * GFLOP per CPU second of all threads (the rate per busy core; useful on a shared machine,
 * where wall time includes time spent descheduled).
 */
#define _POSIX_C_SOURCE 200112L /* clock_gettime */

#include "core/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

static double now_s(void) { return bench_clock_s(CLOCK_MONOTONIC); }

static int listed(const char *env, const char *word)
{
    const char *list = getenv(env);
    if (!list || !*list) return 1;
    const size_t n = strlen(word);
    for (const char *p = strstr(list, word); p; p = strstr(p + 1, word))
        if ((p == list || p[-1] == ' ' || p[-1] == ',') && (p[n] == '\0' || p[n] == ' ' || p[n] == ','))
            return 1;
    return 0;
}

/* Median wall seconds of one M x N x K product (and in *cpu the median CPU seconds of all
 * threads); -1 on a kernel error. */
static double time_matmul(fx_kernel k, int64_t M, int64_t N, int64_t K, const float *a,
                          const float *b, float *y, int nthreads, double budget, double *cpu)
{
    fx_op_call c;
    memset(&c, 0, sizeof c);
    c.op = FX_OP_MATMUL;
    c.nin = 2;
    for (int i = 0; i < 2; i++) {
        c.in[i].data = i == 0 ? a : b;
        c.in[i].fmt = FMT_FP32;
        c.in[i].ndim = 2;
        c.in[i].shape[0] = i == 0 ? M : K;
        c.in[i].shape[1] = i == 0 ? K : N;
        c.in[i].strides[0] = c.in[i].shape[1];
        c.in[i].strides[1] = 1;
    }
    c.out_ndim = 2;
    c.out_shape[0] = M;
    c.out_shape[1] = N;
    c.out_numel = M * N;
    c.out_f32 = y;
    c.nthreads = nthreads;

    const double t0 = now_s();
    if (k(&c) != FX_OK) return -1.0;
    const double warm = now_s() - t0;
    int reps = warm > 0 ? (int)(budget / warm) : 50;
    if (reps < 3) reps = 3;
    if (reps > 50) reps = 50;
    double t[50], tc[50];
    for (int r = 0; r < reps; r++) {
        /* CPU time of the whole process too: on a shared machine, wall time includes the
         * time our threads were descheduled, CPU time does not */
        const bench_span span = bench_span_begin(CLOCK_PROCESS_CPUTIME_ID);
        if (k(&c) != FX_OK) return -1.0;
        bench_span_end(&span, &t[r], &tc[r]);
    }
    qsort(t, (size_t)reps, sizeof t[0], bench_cmp_double);
    qsort(tc, (size_t)reps, sizeof tc[0], bench_cmp_double);
    *cpu = tc[reps / 2];
    return t[reps / 2];
}

/* "n" or "MxNxK" into *M, *N, *K; 0 when malformed or when an operand would pass 2^31 values */
static int parse_shape(const char *s, int64_t *M, int64_t *N, int64_t *K)
{
    long long m, n, k;
    char end;
    if (sscanf(s, "%lldx%lldx%lld%c", &m, &n, &k, &end) == 3) {
        /* M x N x K */
    } else if (sscanf(s, "%lld%c", &m, &end) == 1) {
        n = k = m;
    } else {
        return 0;
    }
    const long long lim = 1LL << 31;
    if (m < 1 || n < 1 || k < 1 || m > lim || n > lim || k > lim || m * k > lim ||
        k * n > lim || m * n > lim)
        return 0;
    *M = m, *N = n, *K = k;
    return 1;
}

int main(int argc, char **argv)
{
    const char *defaults[3] = {"256", "1024", "2048"};
    const int nshapes = argc > 1 ? argc - 1 : 3;
    int64_t(*mnk)[3] = malloc(sizeof *mnk * (size_t)nshapes);
    if (!mnk) {
        fprintf(stderr, "bench_gemm_f32: out of memory\n");
        return 1;
    }
    for (int s = 0; s < nshapes; s++) { /* every shape checked before any is timed */
        const char *arg = argc > 1 ? argv[s + 1] : defaults[s];
        if (!parse_shape(arg, &mnk[s][0], &mnk[s][1], &mnk[s][2])) {
            fprintf(stderr, "bench_gemm_f32: shape '%s': want n or MxNxK (positive, each "
                    "operand at most 2^31 values)\n", arg);
            free(mnk);
            return 2;
        }
    }
    const char *bs = getenv("BENCH_SECONDS");
    const double budget = bs ? atof(bs) : 1.0;
    int threads[2] = {1, 2}, nthreads_list = 0;
    for (int t = 1; t <= 2; t++) {
        char w[4];
        snprintf(w, sizeof w, "%d", t);
        if (listed("BENCH_THREADS", w)) threads[nthreads_list++] = t;
    }

    printf("GFLOP/s = 2MNK / median wall time; GFLOP/cpu-s = 2MNK / median CPU time of all threads\n"
           "(the rate per busy core: on a shared machine it leaves out time spent descheduled)\n");
    printf("%-8s %7s %18s %11s %9s %13s\n", "backend", "threads", "M x N x K", "median ms",
               "GFLOP/s", "GFLOP/cpu-s");
    for (int s = 0; s < nshapes; s++) {
        const int64_t M = mnk[s][0], N = mnk[s][1], K = mnk[s][2];
        char name[64];
        snprintf(name, sizeof name, "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
        float *a = malloc(sizeof(float) * (size_t)(M * K));
        float *b = malloc(sizeof(float) * (size_t)(K * N));
        float *y = malloc(sizeof(float) * (size_t)(M * N));
        if (!a || !b || !y) {
            fprintf(stderr, "out of memory for %s\n", name);
            return 1;
        }
        uint64_t x = 12345;
        for (int64_t i = 0; i < M * K; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            a[i] = (float)((double)(x >> 40) / (double)(1 << 24) - 0.5);
        }
        for (int64_t i = 0; i < K * N; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            b[i] = (float)((double)((x >> 16) & 0xffffff) / (double)(1 << 24) - 0.5);
        }
        const double gflop = 2.0 * (double)M * (double)N * (double)K * 1e-9;
        for (int bi = 0; bi < FX_BACKEND_COUNT; bi++) {
            const fx_backend *be = fx_backend_get(bi);
            if (!be || !be->available || !listed("BENCH_BACKENDS", be->name)) continue;
            const fx_kernel k = be->kernels[FX_OP_MATMUL][FMT_FP32];
            for (int ti = 0; ti < nthreads_list; ti++) {
                double cpu = 0.0;
                const double sec = time_matmul(k, M, N, K, a, b, y, threads[ti], budget, &cpu);
                if (sec < 0) {
                    printf("%-8s %7d %18s   kernel error\n", be->name, threads[ti], name);
                    continue;
                }
                printf("%-8s %7d %18s %11.3f %9.1f %13.1f\n", be->name, threads[ti], name,
                       sec * 1e3, gflop / sec, gflop / cpu);
                fflush(stdout);
            }
        }
        free(a);
        free(b);
        free(y);
    }
    free(mnk);
    return 0;
}
