/* GOP/s of the exact int16 GEMM (the FLEX16_5 / DFP16 matmul kernel) of every available
 * backend, called directly through the backend table, row-major operands. Each SIMD case runs
 * three times in the same process, alternating repetitions: "split" forces the split kernel on
 * every tile (the kernel before the norm-bounded fast path), "wrap" the wrap kernel (where the
 * level has it, AVX512_VNNI, and K qualifies; see FX_GEMM_I16_WRAP_MIN_KP), "auto" lets the
 * norm test choose (on products above the level's size gates, fx_gemm_i16_kernel; below
 * them auto is the wrap or split kernel, as in training, and the fast-tile fraction prints 0);
 * the ratios split/wrap and split/auto of the median CPU times are printed, with the fraction
 * of (tile, K block) steps that took the fast kernel. A fourth run, "packed", is auto with
 * every A micro-panel packed (the route before the fast kernels read a row-major A in place,
 * which they do on AVX-512 for products of at most 128 columns); its ratio to auto is printed
 * last (above 1: reading A in place was faster).
 *
 * usage: bench_gemm_i16 [size ...]        square sizes (default 256 1024 2048), or shapes
 *                                         MxNxK (M x K times K x N), and then the small
 *                                         CNN's GEMM shapes at batch 128
 * env:   BENCH_BACKENDS="avx2 avx512"     only these backends (default: all available)
 *        BENCH_THREADS="1 2"              thread counts (default: 1 2)
 *        BENCH_DATA="gauss gauss-hi full" data kinds (default: all three)
 *        BENCH_SECONDS=0.6                time budget per measurement (at least 3 reps)
 *        BENCH_NO_CNN=1                   skip the CNN shapes
 *        BENCH_I16_ROUND=1                time tensor_matmul of FLEX16_5 tensors holding the
 *                                         same mantissas instead of the kernel's int64 sums:
 *                                         the rounded route training takes, whose tiles round
 *                                         their own sums (the output's exponent guess steady
 *                                         after the warm-up)
 * Data: "gauss" = N(0,1) quantised at its exact exponent (the maximum lands near 2^14.2),
 *       "gauss-hi" = N(0,1.6^2) likewise (maximum near 2^14.9: the hardest typical case),
 *       "full" = uniform in [-32767, 32767] (always the split kernel: the norms are too large).
 * GOP = 2 M N K (one multiply and one add per term). Times are medians after one warm-up run:
 * wall clock, and CPU time (the calling thread's CLOCK_THREAD_CPUTIME_ID with 1 thread, the
 * process's CPU time of all threads with 2), so GOP/cpu-s is the rate per busy core on a
 * shared machine, where wall time includes time spent descheduled.
 */
#define _POSIX_C_SOURCE 200112L /* clock_gettime */

#include "flexpoint.h"
#include "core/backend.h"
#include "flex/gemm_i16.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

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

/* ---- data ----------------------------------------------------------------------------------- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ULL;
static double uniform01(void)
{
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((double)(g_rng >> 11) + 0.5) / 9007199254740992.0;
}

/* n values: kind 0/1 Gaussian (sigma 1 / 1.6) quantised at the exact exponent (the smallest e
 * with max|x| 2^-e <= 32767, round to nearest), kind 2 uniform full range. */
static void fill(int16_t *x, int64_t n, int kind)
{
    if (kind == 2) {
        for (int64_t i = 0; i < n; i++) x[i] = (int16_t)(uniform01() * 65535.0 - 32767.5);
        return;
    }
    const double sigma = kind == 0 ? 1.0 : 1.6;
    double *g = malloc((size_t)n * sizeof *g), mx = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double u = uniform01(), v = uniform01();
        g[i] = sigma * sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
        mx = fabs(g[i]) > mx ? fabs(g[i]) : mx;
    }
    int e = -40;
    while (ldexp(mx, -e) > 32767.0) e++;
    for (int64_t i = 0; i < n; i++) {
        double q = nearbyint(ldexp(g[i], -e));
        x[i] = (int16_t)(q > 32767 ? 32767 : q < -32767 ? -32767 : q);
    }
    free(g);
}

/* ---- timing --------------------------------------------------------------------------------- */

typedef struct timing {
    double wall, cpu, fast_frac;
} timing;

/* The three ways of running one product, alternated: the split kernel on every tile, the wrap
 * kernel on every tile (where the level has one and K qualifies; else the split kernel again),
 * and the norm test's choice (fast kernel where it passes, the any-data kernel elsewhere). */
enum { RUN_SPLIT, RUN_WRAP, RUN_AUTO, RUN_PACKED, RUN_KINDS };

/* BENCH_I16_ROUND: the tensors whose product is timed instead of the kernel call */
static struct {
    tensor_t *a, *b, *out;
} g_round;

static int run_once(fx_kernel k, fx_op_call *c, int how, double *wall, double *cpu)
{
    const int autos = how == RUN_AUTO || how == RUN_PACKED;
    fx_gemm_i16_set_mode(autos ? FX_GEMM_I16_AUTO : FX_GEMM_I16_SPLIT_ONLY);
    fx_gemm_i16_set_wrap(how != RUN_SPLIT);
    fx_gemm_i16_a_in_place_set_enabled(how != RUN_PACKED);
    const clockid_t cid = c->nthreads > 1 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_THREAD_CPUTIME_ID;
    const bench_span span = bench_span_begin(cid);
    const int rc = g_round.out ? tensor_matmul(g_round.out, g_round.a, g_round.b) : k(c);
    bench_span_end(&span, wall, cpu);
    return rc;
}

/* Median times of the three runs of kernel k, alternating; -1 on a kernel error. */
static int time_runs(fx_kernel k, fx_op_call *c, double budget, timing t[RUN_KINDS])
{
    double w = 0, cp;
    for (int h = 0; h < RUN_KINDS; h++)
        if (run_once(k, c, h, &w, &cp) != FX_OK) return -1;
    int reps = w > 0 ? (int)(budget / (3.0 * w)) : 40;
    reps = reps < 3 ? 3 : reps > 40 ? 40 : reps;
    double ws[RUN_KINDS][40], cs[RUN_KINDS][40];
    int64_t f0 = 0, s0 = 0, f1 = 0, s1 = 0;
    for (int r = 0; r < reps; r++)
        for (int h = 0; h < RUN_KINDS; h++) {
            if (h == RUN_AUTO) {
                fx_gemm_i16_reset_tile_counts();
                fx_gemm_i16_tile_counts(&f0, &s0);
            }
            if (run_once(k, c, h, &ws[h][r], &cs[h][r]) != FX_OK) return -1;
            if (h == RUN_AUTO) fx_gemm_i16_tile_counts(&f1, &s1);
        }
    fx_gemm_i16_set_mode(FX_GEMM_I16_AUTO);
    fx_gemm_i16_set_wrap(1);
    fx_gemm_i16_a_in_place_set_enabled(1);
    for (int h = 0; h < RUN_KINDS; h++) {
        qsort(ws[h], (size_t)reps, sizeof ws[h][0], bench_cmp_double);
        qsort(cs[h], (size_t)reps, sizeof cs[h][0], bench_cmp_double);
        t[h].wall = ws[h][reps / 2];
        t[h].cpu = cs[h][reps / 2];
        t[h].fast_frac = 0.0;
    }
    /* counts of the last auto repetition only (all repetitions take the same paths) */
    const int64_t fa = f1 - f0, sa = s1 - s0;
    t[RUN_AUTO].fast_frac = fa + sa > 0 ? (double)fa / (double)(fa + sa) : 0.0;
    return 0;
}

static void bench_shape(const char *label, int64_t M, int64_t K, int64_t N, int kind,
                        double budget, const int *threads, int nthr)
{
    int16_t *a = malloc((size_t)(M * K) * sizeof *a), *b = malloc((size_t)(K * N) * sizeof *b);
    int64_t *y = malloc((size_t)(M * N) * sizeof *y);
    if (!a || !b || !y) {
        fprintf(stderr, "out of memory for %s\n", label);
        exit(1);
    }
    fill(a, M * K, kind);
    fill(b, K * N, kind);
    int exp;
    fx_op_call c;
    memset(&c, 0, sizeof c);
    c.op = FX_OP_MATMUL;
    c.nin = 2;
    const int64_t sh[2][2] = {{M, K}, {K, N}};
    for (int i = 0; i < 2; i++) {
        c.in[i].data = i == 0 ? (const void *)a : (const void *)b;
        c.in[i].fmt = FMT_DFP16;
        c.in[i].ndim = 2;
        c.in[i].shape[0] = sh[i][0];
        c.in[i].shape[1] = sh[i][1];
        c.in[i].strides[0] = sh[i][1];
        c.in[i].strides[1] = 1;
    }
    c.out_ndim = 2;
    c.out_shape[0] = M;
    c.out_shape[1] = N;
    c.out_numel = M * N;
    c.out_i64 = y;
    c.out_exp = &exp;
    static const char *const kinds[] = {"gauss", "gauss-hi", "full"};
    const double gop = 2.0 * (double)M * (double)N * (double)K * 1e-9;
    if (getenv("BENCH_I16_ROUND") && atoi(getenv("BENCH_I16_ROUND"))) {
        const int64_t sa[2] = {M, K}, sb[2] = {K, N}, so[2] = {M, N};
        g_round.a = tensor_new(FMT_FLEX16_5, 2, sa);
        g_round.b = tensor_new(FMT_FLEX16_5, 2, sb);
        g_round.out = tensor_new(FMT_FLEX16_5, 2, so);
        /* the mantissas at exponent -15 (FLEX16_5's window moved to hold it) */
        if (!g_round.a || !g_round.b || !g_round.out || tensor_set_exp_window(g_round.a, -20) ||
            tensor_set_exp_window(g_round.b, -20) || tensor_set_exp(g_round.a, -15) ||
            tensor_set_exp(g_round.b, -15) || tensor_set_raw(g_round.a, a) ||
            tensor_set_raw(g_round.b, b)) {
            fprintf(stderr, "cannot make the tensors of %s: %s\n", label, flexpoint_last_error());
            exit(1);
        }
    }

    for (int bi = 0; bi < FX_BACKEND_COUNT; bi++) {
        const fx_backend *be = fx_backend_get(bi);
        if (!be || !be->available || !listed("BENCH_BACKENDS", be->name)) continue;
        const fx_kernel k = be->kernels[FX_OP_MATMUL][FMT_DFP16];
        if (!k) continue;
        if (g_round.out && flexpoint_set_backend(be->name) != FX_OK) continue;
        const int has_wrap =
            fx_gemm_i16_b_layout_for(be->gemm.i16_b_layout, K) == FX_GEMM_I16_B_WRAP;
        for (int ti = 0; ti < nthr; ti++) {
            c.nthreads = threads[ti];
            if (g_round.out) flexpoint_set_num_threads(threads[ti]);
            timing t[RUN_KINDS];
            if (time_runs(k, &c, budget, t) < 0) {
                printf("%-8s %-20s kernel error\n", be->name, label);
                continue;
            }
            printf("%-8s %-9s %-22s %2d  %7.1f %7.1f", be->name, kinds[kind], label, threads[ti],
                   gop / t[RUN_SPLIT].wall, gop / t[RUN_SPLIT].cpu);
            if (has_wrap)
                printf("  %7.1f %7.1f", gop / t[RUN_WRAP].wall, gop / t[RUN_WRAP].cpu);
            else
                printf("  %7s %7s", "-", "-");
            printf("  %7.1f %7.1f   %5.2f %5.2f  %5.3f   %7.1f  %5.2f\n", gop / t[RUN_AUTO].wall,
                   gop / t[RUN_AUTO].cpu, has_wrap ? t[RUN_SPLIT].cpu / t[RUN_WRAP].cpu : 1.0,
                   t[RUN_SPLIT].cpu / t[RUN_AUTO].cpu, t[RUN_AUTO].fast_frac,
                   gop / t[RUN_PACKED].cpu, t[RUN_PACKED].cpu / t[RUN_AUTO].cpu);
            fflush(stdout);
        }
    }
    tensor_free(g_round.a);
    tensor_free(g_round.b);
    tensor_free(g_round.out);
    g_round.a = g_round.b = g_round.out = NULL;
    free(a);
    free(b);
    free(y);
}

int main(int argc, char **argv)
{
    /* M, N, K of each shape asked for (a square size n: n, n, n) */
    int64_t sizes[16][3] = {{256, 256, 256}, {1024, 1024, 1024}, {2048, 2048, 2048}};
    int nsizes = 3;
    if (argc > 1) {
        nsizes = 0;
        for (int i = 1; i < argc && nsizes < 16; i++) {
            long long m = 0, n = 0, k = 0;
            const int got = sscanf(argv[i], "%lldx%lldx%lld", &m, &n, &k);
            if (got == 1) n = k = m;
            if ((got != 1 && got != 3) || m < 1 || n < 1 || k < 1 || m * k > ((int64_t)1 << 28) ||
                k * n > ((int64_t)1 << 28) || m * n > ((int64_t)1 << 28)) {
                fprintf(stderr, "bench_gemm_i16: '%s' is neither a size nor MxNxK (each side at "
                                "least 1, each operand at most 2^28 values)\n", argv[i]);
                return 2;
            }
            sizes[nsizes][0] = m;
            sizes[nsizes][1] = n;
            sizes[nsizes][2] = k;
            nsizes++;
        }
    }
    const char *bs = getenv("BENCH_SECONDS");
    const double budget = bs ? atof(bs) : 0.6;
    int threads[2], nthr = 0;
    for (int t = 1; t <= 2; t++) {
        char w[4];
        snprintf(w, sizeof w, "%d", t);
        if (listed("BENCH_THREADS", w)) threads[nthr++] = t;
    }
    static const char *const kinds[] = {"gauss", "gauss-hi", "full"};
    /* the small CNN (conv5x5x32 pad 2, pool, conv5x5x64 pad 2, pool, fc 128, fc 10), batch
     * 128, as im2col GEMMs: forward, and conv2's weight and input gradients */
    static const struct { const char *name; int64_t M, K, N; } cnn[] = {
        {"conv1 fwd", 128 * 784, 25, 32},   {"conv2 fwd", 128 * 196, 800, 64},
        {"conv2 dW", 800, 128 * 196, 64},   {"conv2 dX", 128 * 196, 64, 800},
        {"fc1 fwd", 128, 3136, 128},
    };
    const char *nocnn = getenv("BENCH_NO_CNN");

    printf("exact int16 GEMM; split / wrap = that kernel on every tile (wrap: AVX512_VNNI, K >= 63;"
           " '-' where it does not run),\nauto = norm test per tile (fast kernel where it passes,"
           " else wrap or split as in training), packed = auto with every A panel packed\n"
           "shapes M x N x K; GOP/s = 2MNK / median wall; cpu = 2MNK / median CPU time; ratios of CPU "
           "times\n");
    printf("backend  data      shape                  th    split     cpu     wrap     cpu     auto"
           "     cpu  s/wrap s/auto  fast tiles  packed cpu pk/auto\n");
    for (int kind = 0; kind < 3; kind++) {
        if (!listed("BENCH_DATA", kinds[kind])) continue;
        for (int s = 0; s < nsizes; s++) {
            const int64_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2];
            char label[48];
            if (m == n && n == k) snprintf(label, sizeof label, "%lld^3", (long long)m);
            else snprintf(label, sizeof label, "%lldx%lldx%lld", (long long)m, (long long)n,
                          (long long)k);
            bench_shape(label, m, k, n, kind, budget, threads, nthr);
        }
        if (nocnn && *nocnn == '1') continue;
        for (size_t i = 0; i < sizeof cnn / sizeof cnn[0]; i++) {
            char label[48];
            snprintf(label, sizeof label, "%s %lldx%lldx%lld", cnn[i].name, (long long)cnn[i].M,
                     (long long)cnn[i].N, (long long)cnn[i].K);
            bench_shape(label, cnn[i].M, cnn[i].K, cnn[i].N, kind, budget, threads, nthr);
        }
    }
    return 0;
}
