/* GEMM throughput of every flexpoint format against the peers, in the same process and
 * alternating: oneDNN sgemm and bf16 GEMM, OpenBLAS sgemm (peers are loaded with dlopen, so the
 * benchmark builds without them and reports "n/a" when absent). OpenBLAS picks its kernels by
 * CPU unless OPENBLAS_CORETYPE says otherwise, so the header prints the core it chose and the
 * variable's value, and the usage line unsets it (and OPENBLAS_L2_SIZE) for a like-for-like run:
 *
 *   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ./build/release/bench/bench_gemm [threads...]
 *
 * Thread counts default to "1 2". Our numbers go through the public tensor_matmul (validation,
 * the kernel, and the one write into the output tensor in the same format), which is what users
 * call. Each figure is the median of BENCH_REPS timed repetitions after a warm-up (six for
 * the integer formats, whose large products take their training route once the output's
 * exponent guess has held for a few writes); GFLOP/s
 * counts 2*M*N*K (GOP/s for the integer formats). Times are wall clock, or with BENCH_CLOCK=cpu
 * the process's CPU time (all its threads): on a shared machine where other processes take
 * the cores, time spent descheduled then does not count, which puts the GEMMs on the footing
 * of the instruction limits (measured in CPU time). Meaningful at one thread; with more, an
 * idle thread's spinning counts too.
 *
 * Shapes: square 256, 1024, 2048; the small CNN's layers and ResNet-20's as GEMMs at batch 128
 * (listed in run_table). Operands, per shape (BENCH_DATA="uniform normal", the default, or one
 * of them):
 *   uniform  full-range values m / 2^15, m uniform in [-32767, 32767]: the integer formats get
 *            m as mantissas (set_full_range), the norm test fails and every tile takes an
 *            any-data kernel (split or wrap: the fast-tile row shows 0 %);
 *   normal   standard-normal values, the shape of training tensors: the integer GEMM's fast
 *            kernel (one pair product per pair) takes the tiles its norms allow.
 * Printed per shape and operands: GFLOP/s, the ratio of each of our formats to each peer, the
 * share of the instruction limit, measured at start-up by flexpoint_instruction_limits (a
 * dependency-free loop of 512-bit FMA, of vpdpwssd (vpmaddwd without VNNI) and, where the CPU
 * has AVX512_BF16, of vdpbf16ps; 256-bit FMA and vpmaddwd on CPUs without AVX-512; one thread,
 * scaled by the thread count in the tables): fp32 and fp16 against the FMA
 * limit, bf16 (ours and oneDNN's) against the vdpbf16ps limit where the CPU has it (our bf16 x
 * bf16 GEMM runs on it there) and the FMA limit otherwise, the integer formats against the
 * int16 pair-product limit. For the integer formats the fraction of (tile, K block) steps the
 * fast kernel took follows, and on uniform operands the share of the any-data kernels' own
 * ceiling (see anydata_ceiling). Last, for the integer formats, the traffic bound: the rate at
 * which a product would run if it took no longer than reading its int16 operands once and
 * writing its int16 output once, timed in the same run right after the GEMMs' repetitions
 * (touch_operands), and each format's share of the lower of that bound and the limit. With few rows or
 * few values of K per output one thread's memory traffic, not the multiplies, bounds a GEMM:
 * 16 x 131072 x 144 reads 38 MB of B for 0.6 GOP.
 * BENCH_I16_A_PACKED=1 packs every A micro-panel of the integer GEMM (the route before its fast
 * kernels read a row-major A in place), BENCH_I16_PACK_RUNS=0 packs its B a call per panel,
 * BENCH_I16_COLUMNS=0 keeps two or more threads on row blocks and BENCH_I16_FAST4=0 runs its
 * partial tiles of four rows or fewer on the six-row loop: each an earlier route, to compare
 * with the default in alternating runs. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "core/backend.h"
#include "flex/gemm_i16.h"

#include <math.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t,
                             const float *, int64_t, float, float *, int64_t);
typedef int (*dnnl_bf16_fn)(char, char, int64_t, int64_t, int64_t, float, const uint16_t *,
                            int64_t, const uint16_t *, int64_t, float, float *, int64_t);
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                               const float *, int, float, float *, int);
typedef void (*set_threads_fn)(int);
typedef const char *(*get_core_fn)(void);

#define FX_INT_WARMUPS 6 /* > FX_GUESS_STEADY_WRITES (src/core/dispatch.h) */

static clockid_t g_clock = CLOCK_MONOTONIC; /* BENCH_CLOCK=cpu: CLOCK_PROCESS_CPUTIME_ID */

static double now(void) { return bench_clock_s(g_clock); }

typedef struct peer {
    set_threads_fn omp_threads;
    dnnl_sgemm_fn dnnl_sgemm;
    dnnl_bf16_fn dnnl_bf16;
    cblas_sgemm_fn cblas_sgemm;
    set_threads_fn oblas_threads;
    get_core_fn oblas_core;
} peer;

enum { P_OURS_FP32, P_OURS_FP16, P_OURS_BF16, P_OURS_FLEX, P_OURS_DFP, P_DNNL_S, P_DNNL_BF16,
       P_OBLAS_S, P_COUNT };
static const char *NAMES[P_COUNT] = {"fp32", "fp16", "bf16", "flex16_5", "dfp16",
                                     "onednn-sgemm", "onednn-bf16", "openblas-sgemm"};

/* One table (every shape) at one thread count. fma_peak, int_peak, bf16_peak: per-thread limits in
 * GFLOP/s and GOP/s (0: unknown). */
static int run_table(const peer *p, int threads, int reps, double fma_peak, double int_peak,
                     double bf16_peak);

int main(int argc, char **argv)
{
    int reps = getenv("BENCH_REPS") ? atoi(getenv("BENCH_REPS")) : 5;
    if (getenv("BENCH_I16_A_PACKED") && atoi(getenv("BENCH_I16_A_PACKED")))
        fx_gemm_i16_a_in_place_set_enabled(0);
    if (getenv("BENCH_I16_PACK_RUNS") && !atoi(getenv("BENCH_I16_PACK_RUNS")))
        fx_gemm_i16_set_pack_runs(0);
    if (getenv("BENCH_I16_COLUMNS") && !atoi(getenv("BENCH_I16_COLUMNS")))
        fx_gemm_i16_set_column_threads(0);
    if (getenv("BENCH_I16_FAST4") && !atoi(getenv("BENCH_I16_FAST4")))
        fx_gemm_i16_set_fast4(0); /* partial tiles of at most four rows on the six-row loop */
    int tlist[8] = {1, 2}, nt = 2;
    if (argc > 1) {
        nt = 0;
        for (int i = 1; i < argc && nt < 8; i++) tlist[nt++] = atoi(argv[i]);
    }
    for (int i = 0; i < nt; i++)
        if (tlist[i] < 1) reps = 0;
    if (reps < 1) {
        fprintf(stderr, "usage: bench_gemm [threads ...]   (default 1 2; BENCH_REPS=n, "
                        "BENCH_QUICK=1 for the square sizes only,\n"
                        "       BENCH_SHAPES=\"1024x1024x1024 r20\" shapes whose label has a word, "
                        "BENCH_DATA=uniform|normal)\n");
        return 2;
    }
    if (getenv("BENCH_CLOCK") && strcmp(getenv("BENCH_CLOCK"), "cpu") == 0)
        g_clock = CLOCK_PROCESS_CPUTIME_ID;
    peer p = {0};
    void *hd = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (hd) {
        p.dnnl_sgemm = (dnnl_sgemm_fn)dlsym(hd, "dnnl_sgemm");
        p.dnnl_bf16 = (dnnl_bf16_fn)dlsym(hd, "dnnl_gemm_bf16bf16f32");
    }
    /* OpenBLAS's worker threads spin after each call (for 2^28 cycles by default), holding the
     * second core while the next kernel in the rotation, our fp32 GEMM, starts: on the Zen 4,
     * 2048^3 at two threads right after one thread, fp32 152-197 GFLOP/s in four runs with the
     * default, 190-208 with a timeout of 2^4 cycles, OpenBLAS's own sgemm 182-191 either way.
     * Read when OpenBLAS starts, so set before it loads; a caller's own setting is kept. */
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
    void *ho = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (ho) {
        p.cblas_sgemm = (cblas_sgemm_fn)dlsym(ho, "cblas_sgemm");
        p.oblas_threads = (set_threads_fn)dlsym(ho, "openblas_set_num_threads");
        p.oblas_core = (get_core_fn)dlsym(ho, "openblas_get_corename");
    }
    /* oneDNN's OpenMP runtime is the one libflexpoint already loaded */
    p.omp_threads = (set_threads_fn)dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    printf("bench_gemm: backend %s, CPU features: %s\n", flexpoint_backend(),
           flexpoint_cpu_features());
    printf("CPU %s, kernels: %s\n", flexpoint_cpu_model(), flexpoint_kernel_report());
    printf("peers: oneDNN %s, OpenBLAS %s (core %s, OPENBLAS_CORETYPE=%s, "
           "OPENBLAS_THREAD_TIMEOUT=%s)\n",
           p.dnnl_sgemm ? "yes" : "not found", p.cblas_sgemm ? "yes" : "not found",
           p.oblas_core ? p.oblas_core() : "-",
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)",
           getenv("OPENBLAS_THREAD_TIMEOUT"));
    double fma_peak, int_peak, bf16_peak;
    bench_instruction_limits(&fma_peak, &int_peak, &bf16_peak);
    printf("times: %s\n", g_clock == CLOCK_MONOTONIC ? "wall clock" : "process CPU time (BENCH_CLOCK=cpu)");
    for (int i = 0; i < nt; i++)
        if (run_table(&p, tlist[i], reps, fma_peak, int_peak, bf16_peak)) return 1;
    return 0;
}

/* The ceiling of the integer GEMM's any-data kernels as a share of the pair-product limit.
 * The limit counts one pair-product instruction (vpmaddwd / vpdpwssd) per pair of k values;
 * on full-range operands the fast kernel's norm test fails and each tile takes
 *   split: B split into high and low bytes, two pair-product instructions per pair -> 1/2;
 *   wrap (AVX512_VNNI, K blocks of at least FX_GEMM_I16_WRAP_MIN_KP pairs): one vpdpwssd per
 *         pair plus one vpdpbusd per two pairs for the high bytes -> 1 / 1.5.
 * So a uniform-operand GEMM at 100 % of this ceiling spends every cycle on the multiplies its
 * kernel cannot avoid. */
static double anydata_ceiling(int64_t K)
{
    const fx_backend *be = fx_backend_active();
    const int wrap = be->gemm.i16_b_layout == FX_GEMM_I16_B_WRAP && fx_gemm_i16_wrap_pays(K);
    return wrap ? 1.0 / 1.5 : 0.5;
}

/* Deterministic operands: uniform m / 2^15 with integer m in [-32767, 32767] (a multiplicative
 * sequence; the integer formats get exactly these m as mantissas at exponent -15, see
 * set_full_range) or standard normal (Box-Muller on a 64-bit LCG). */
static void fill(float *v, int64_t n, int normal, uint64_t seed, int64_t mult)
{
    if (!normal) {
        for (int64_t i = 0; i < n; i++)
            v[i] = (float)((i * mult % 65535) - 32767) * (1.0f / 32768.0f);
        return;
    }
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i += 2) {
        double u[2];
        for (int t = 0; t < 2; t++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            u[t] = ((double)(s >> 11) + 0.5) * (1.0 / 9007199254740992.0); /* (0, 1) */
        }
        const double r = sqrt(-2.0 * log(u[0])), t = 6.283185307179586 * u[1];
        v[i] = (float)(r * cos(t));
        if (i + 1 < n) v[i + 1] = (float)(r * sin(t));
    }
}

static int run_shape(const peer *pp, int threads, int reps, double fma_peak, double int_peak,
                     double bf16_peak, const int64_t *shape, int normal);

/* Folded so that the reads in touch_operands are not optimised away */
static volatile uint64_t g_touch_sink;

/* The xor of n int16 values read as 64-bit words (a multiple of 4 of them), on threads. */
static uint64_t xor_words(const int16_t *v, int64_t n, int threads)
{
    uint64_t x = 0;
    (void)threads;
#ifdef _OPENMP
#pragma omp parallel for reduction(^ : x) num_threads(threads) schedule(static)
#endif
    for (int64_t i = 0; i < n / 4; i++) {
        uint64_t w;
        memcpy(&w, v + 4 * i, 8);
        x ^= w;
    }
    return x;
}

/* Seconds to read a and b (na, nb int16 values) once and write nc int16 values into c, on
 * `threads` threads: the least traffic of an int16 product, a pass the compiler vectorises
 * with the build's baseline flags (the GEMMs' stores are plain stores too, so a written line
 * is read for ownership first, as here). */
static double touch_operands(const int16_t *a, int64_t na, const int16_t *b, int64_t nb,
                             int16_t *c, int64_t nc, int threads)
{
    const double t0 = now();
    const uint64_t x = xor_words(a, na, threads) ^ xor_words(b, nb, threads);
    const int16_t v = (int16_t)(x & 0x7fff);
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
    for (int64_t i = 0; i < nc; i++) c[i] = (int16_t)(v + (int16_t)(i & 7));
    const double t = now() - t0;
    g_touch_sink ^= x;
    return t;
}

/* An integer-format tensor holding the uniform values v exactly: mantissas v * 2^15, all of
 * int16's range, at exponent -15. Converting from fp32 would let the format choose its own
 * exponent, whose headroom halves the mantissas: then the fast kernel's norm test passes on
 * short chains and the any-data kernels would not be measured. */
static int set_full_range(tensor_t *t, const float *v, int64_t n)
{
    int16_t *m = malloc(sizeof(int16_t) * (size_t)n);
    if (!m) return FX_ENOMEM;
    for (int64_t i = 0; i < n; i++) m[i] = (int16_t)(v[i] * 32768.0f);
    int st = tensor_fmt(t) == FMT_FLEX16_5 ? tensor_set_exp_window(t, -20) : FX_OK;
    if (st == FX_OK) st = tensor_set_exp(t, -15);
    if (st == FX_OK) st = tensor_set_raw(t, m);
    free(m);
    return st;
}

static int run_table(const peer *pp, int threads, int reps, double fma_peak, double int_peak,
                     double bf16_peak)
{
    peer p = *pp;
    flexpoint_set_num_threads(threads);
    if (p.oblas_threads) p.oblas_threads(threads);
    if (p.omp_threads) p.omp_threads(threads);
    printf("\n== %d thread(s) ==\n", threads);
    /* M x N x K. Square sizes, then the layers as GEMMs at batch 128 (forward: [Cout x C*kh*kw]
     * x [C*kh*kw x B*OH*OW]; weight gradient: [Cout x B*OH*OW] x [B*OH*OW x C*kh*kw]; input
     * gradient: [C*kh*kw x Cout] x [Cout x B*OH*OW]).
     * Small CNN (Fashion-MNIST 28x28, 5x5 convolutions 1->32->64, fc 3136->128):
     *   conv1 fwd 32 x 100352 x 25; conv2 fwd 64 x 25088 x 800; conv2 weight grad
     *   64 x 800 x 25088; conv2 input grad 800 x 25088 x 64; fc1 fwd 128 x 128 x 3136.
     * ResNet-20 (CIFAR-10 32x32, 3x3 convolutions, stages of 16, 32, 64 channels at 32x32,
     * 16x16, 8x8):
     *   stem fwd 16 x 131072 x 27; stage-1 fwd 16 x 131072 x 144; stage-2 fwd
     *   32 x 32768 x 288; stage-3 fwd 64 x 8192 x 576; stage-3 weight grad 64 x 576 x 8192;
     *   stage-3 input grad 576 x 8192 x 64.
     * The transformer (`--model transformer`: batch 128, context 128, width 128, MLP 512), its
     * token-linear products over 16384 tokens: the MLP's fc 16384 x 512 x 128 and proj
     * 16384 x 128 x 512, fc's weight gradient 128 x 512 x 16384, an attention projection
     * 16384 x 128 x 128. */
    static const struct {
        const char *name;
        int64_t mnk[3];
    } shapes[] = {{"square", {256, 256, 256}},          {"square", {1024, 1024, 1024}},
                  {"square", {2048, 2048, 2048}},       {"cnn conv1 fwd", {32, 100352, 25}},
                  {"cnn conv2 fwd", {64, 25088, 800}},  {"cnn conv2 dW", {64, 800, 25088}},
                  {"cnn conv2 dX", {800, 25088, 64}},   {"cnn fc1 fwd", {128, 128, 3136}},
                  {"r20 stem fwd", {16, 131072, 27}},   {"r20 s1 fwd", {16, 131072, 144}},
                  {"r20 s2 fwd", {32, 32768, 288}},     {"r20 s3 fwd", {64, 8192, 576}},
                  {"r20 s3 dW", {64, 576, 8192}},       {"r20 s3 dX", {576, 8192, 64}},
                  {"tfm fc fwd", {16384, 512, 128}},    {"tfm proj fwd", {16384, 128, 512}},
                  {"tfm fc dW", {128, 512, 16384}},     {"tfm attn proj fwd", {16384, 128, 128}}};
    int nshapes = sizeof shapes / sizeof *shapes;
    if (getenv("BENCH_QUICK")) nshapes = 3;
    const char *only = getenv("BENCH_SHAPES"); /* e.g. "1024x1024x1024 r20": substrings */
    const char *data = getenv("BENCH_DATA");
    const int want[2] = {!data || strstr(data, "uniform") != NULL,
                         !data || strstr(data, "normal") != NULL};
    printf("\n%-28s", "M x N x K  operands");
    for (int k = 0; k < P_COUNT; k++) printf(" %14s", NAMES[k]);
    printf("   (GFLOP/s)\n");
    /* BENCH_SHAPES's words: each keeps the listed shapes whose label contains it; a word that
     * keeps none and reads MxNxK is run as a shape of its own, any other is reported (a
     * misspelt word used to leave the table silently empty) */
    char words[256] = "";
    if (only) snprintf(words, sizeof words, "%s", only);
    char *word[32];
    int nwords = 0, used[32] = {0};
    for (char *w = strtok(words, " ,"); w && nwords < 32; w = strtok(NULL, " ,")) word[nwords++] = w;
    for (int si = 0; si < nshapes; si++) {
        char label[64];
        snprintf(label, sizeof label, "%lldx%lldx%lld %s", (long long)shapes[si].mnk[0],
                 (long long)shapes[si].mnk[1], (long long)shapes[si].mnk[2], shapes[si].name);
        if (nwords) { /* keep the shapes whose label contains one of the words */
            int keep = 0;
            for (int i = 0; i < nwords; i++)
                if (strstr(label, word[i])) keep = used[i] = 1;
            if (!keep) continue;
        }
        printf("%s\n", label);
        for (int normal = 0; normal < 2; normal++)
            if (want[normal] &&
                run_shape(&p, threads, reps, fma_peak, int_peak, bf16_peak, shapes[si].mnk, normal))
                return 1;
    }
    for (int i = 0; i < nwords; i++) {
        if (used[i]) continue;
        long long m = 0, n = 0, k = 0;
        char tail = 0;
        if (sscanf(word[i], "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3 || m < 1 || n < 1 ||
            k < 1 || m * n > ((int64_t)1 << 28) || m * k > ((int64_t)1 << 28) ||
            k * n > ((int64_t)1 << 28)) {
            fprintf(stderr, "bench_gemm: BENCH_SHAPES word '%s' names no listed shape and is not "
                            "MxNxK (each side at least 1, each operand at most 2^28 values)\n",
                    word[i]);
            continue;
        }
        const int64_t mnk[3] = {m, n, k};
        printf("%lldx%lldx%lld given\n", m, n, k);
        for (int normal = 0; normal < 2; normal++)
            if (want[normal] && run_shape(&p, threads, reps, fma_peak, int_peak, bf16_peak, mnk, normal))
                return 1;
    }
    return 0;
}

static int run_shape(const peer *pp, int threads, int reps, double fma_peak, double int_peak,
                     double bf16_peak, const int64_t *shape, int normal)
{
    const peer p = *pp;
    {
        int64_t M = shape[0], N = shape[1], K = shape[2];
        float *a = malloc(sizeof(float) * (size_t)(M * K)), *b = malloc(sizeof(float) * (size_t)(K * N));
        float *c = malloc(sizeof(float) * (size_t)(M * N));
        uint16_t *a16 = malloc(2 * (size_t)(M * K)), *b16 = malloc(2 * (size_t)(K * N));
        if (!a || !b || !c || !a16 || !b16) {
            fprintf(stderr, "bench_gemm: out of memory\n");
            return 1;
        }
        fill(a, M * K, normal, 0x9E3779B97F4A7C15ull, 7919);
        fill(b, K * N, normal, 0xD1B54A32D192ED03ull, 104729);
        for (int64_t i = 0; i < M * K; i++) { uint32_t u; memcpy(&u, &a[i], 4); a16[i] = (uint16_t)(u >> 16); }
        for (int64_t i = 0; i < K * N; i++) { uint32_t u; memcpy(&u, &b[i], 4); b16[i] = (uint16_t)(u >> 16); }
        tensor_t *ta[5] = {0}, *tb[5] = {0}, *tc[5] = {0};
        int64_t sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
        for (int f = 0; f < 5; f++) {
            ta[f] = tensor_new((fmt_t)f, 2, sa);
            tb[f] = tensor_new((fmt_t)f, 2, sb);
            tc[f] = tensor_new((fmt_t)f, 2, sc);
            const int full = !normal && (f == FMT_FLEX16_5 || f == FMT_DFP16);
            if ((full ? set_full_range(ta[f], a, M * K) : tensor_from_f32(ta[f], a)) != FX_OK ||
                (full ? set_full_range(tb[f], b, K * N) : tensor_from_f32(tb[f], b)) != FX_OK) {
                fprintf(stderr, "bench_gemm: operands: %s\n", flexpoint_last_error());
                return 1;
            }
        }
        double times[P_COUNT][64], touch[64];
        int16_t *ctouch = malloc(2 * (size_t)(M * N));
        if (!ctouch) {
            fprintf(stderr, "bench_gemm: out of memory\n");
            return 1;
        }
        memset(ctouch, 0, 2 * (size_t)(M * N)); /* its pages exist before the timing */
        int64_t tiles[2][2] = {{0, 0}, {0, 0}}; /* [flex16_5, dfp16][fast, any-data] */
        int avail[P_COUNT] = {1, 1, 1, 1, 1, p.dnnl_sgemm != NULL, p.dnnl_bf16 != NULL,
                              p.cblas_sgemm != NULL};
        if (reps > 64) reps = 64;
        /* r < 0 are warm-ups: one for the float formats and the peers, FX_INT_WARMUPS for the
         * integer formats, whose products take the blocked route without a whole int64 stage
         * once the output's exponent guess has held for a few writes (shared_matmul.c), as it
         * does in training; peers alternate with ours */
        for (int r = -FX_INT_WARMUPS; r < reps; r++)
            for (int k = 0; k < P_COUNT; k++) {
                if (!avail[k] || (r < -1 && k != P_OURS_FLEX && k != P_OURS_DFP)) continue;
                double t0 = now();
                if (k <= P_OURS_DFP) {
                    fx_gemm_i16_reset_tile_counts();
                    if (tensor_matmul(tc[k], ta[k], tb[k]) != FX_OK) {
                        fprintf(stderr, "%s: %s\n", NAMES[k], flexpoint_last_error());
                        return 1;
                    }
                    if (k >= P_OURS_FLEX && r >= 0) {
                        int64_t f, s;
                        fx_gemm_i16_tile_counts(&f, &s);
                        tiles[k - P_OURS_FLEX][0] += f;
                        tiles[k - P_OURS_FLEX][1] += s;
                    }
                } else if (k == P_DNNL_S || k == P_DNNL_BF16) {
                    /* a failing call returns at once (oneDNN has no bf16 GEMM on CPUs without
                     * AVX-512, for one): drop the peer rather than time the failure */
                    const int st = k == P_DNNL_S
                                       ? p.dnnl_sgemm('N', 'N', M, N, K, 1.0f, a, K, b, N, 0.0f, c, N)
                                       : p.dnnl_bf16('N', 'N', M, N, K, 1.0f, a16, K, b16, N, 0.0f, c, N);
                    if (st != 0) {
                        static int said[P_COUNT]; /* once per run, not per shape */
                        if (!said[k]++) printf("(%s returned status %d: not timed)\n", NAMES[k], st);
                        avail[k] = 0;
                        continue;
                    }
                } else {
                    p.cblas_sgemm(101, 111, 111, (int)M, (int)N, (int)K, 1.0f, a, (int)K, b,
                                  (int)N, 0.0f, c, (int)N); /* row-major, no transposes */
                }
                if (r >= 0) times[k][r] = now() - t0;
            }
        for (int r = 0; r < reps; r++)
            touch[r] = touch_operands(tensor_data(ta[FMT_DFP16]), M * K, tensor_data(tb[FMT_DFP16]),
                                      K * N, ctouch, M * N, threads);
        printf("%-28s", normal ? "  normal" : "  uniform");
        double gf[P_COUNT] = {0};
        for (int k = 0; k < P_COUNT; k++) {
            if (!avail[k]) {
                printf(" %14s", "n/a");
                continue;
            }
            qsort(times[k], (size_t)reps, sizeof(double), bench_cmp_double);
            gf[k] = 2.0 * (double)M * (double)N * (double)K / times[k][reps / 2] * 1e-9;
            printf(" %14.1f", gf[k]);
        }
        printf("\n");
        for (int peer_k = P_DNNL_S; peer_k < P_COUNT; peer_k++) {
            if (gf[peer_k] <= 0) continue;
            char what[40];
            snprintf(what, sizeof what, "    / %s", NAMES[peer_k]);
            printf("%-28s", what);
            for (int k = 0; k <= P_OURS_DFP; k++) printf(" %13.2fx", gf[k] / gf[peer_k]);
            printf("\n");
        }
        if (fma_peak > 0) {
            printf("%-28s", "    share of limit");
            for (int k = 0; k < P_COUNT; k++) {
                const int is_int = k == P_OURS_FLEX || k == P_OURS_DFP;
                const int is_bf16 = k == P_OURS_BF16 || k == P_DNNL_BF16;
                const double lim = (is_int ? int_peak : is_bf16 ? bf16_peak : fma_peak) * threads;
                if (avail[k] && lim > 0) printf(" %13.0f%%", 100.0 * gf[k] / lim);
                else printf(" %14s", "-");
            }
            printf("\n");
        }
        /* the integer formats: fast-kernel share of the (tile, K block) steps, and on uniform
         * operands the share of the any-data kernels' ceiling */
        printf("%-28s", "    fast-kernel tiles");
        for (int k = 0; k < P_COUNT; k++) {
            const int64_t *t = k == P_OURS_FLEX ? tiles[0] : k == P_OURS_DFP ? tiles[1] : NULL;
            if (t && t[0] + t[1] > 0) printf(" %13.0f%%", 100.0 * (double)t[0] / (double)(t[0] + t[1]));
            else printf(" %14s", "-");
        }
        printf("\n");
        if (!normal && int_peak > 0) {
            const double ceil_share = anydata_ceiling(K);
            printf("%-28s", ceil_share > 0.6 ? "    share of wrap ceiling" : "    share of split ceiling");
            for (int k = 0; k < P_COUNT; k++) {
                if (k == P_OURS_FLEX || k == P_OURS_DFP)
                    printf(" %13.0f%%", 100.0 * gf[k] / (int_peak * threads * ceil_share));
                else printf(" %14s", "-");
            }
            printf("\n");
        }
        /* the integer formats' traffic bound and their share of it (or of the limit, where that
         * is lower) */
        qsort(touch, (size_t)reps, sizeof(double), bench_cmp_double);
        const double bound = 2.0 * (double)M * (double)N * (double)K / touch[reps / 2] * 1e-9;
        printf("%-28s", "    traffic bound");
        for (int k = 0; k < P_COUNT; k++) {
            if (k == P_OURS_FLEX || k == P_OURS_DFP) printf(" %14.1f", bound);
            else printf(" %14s", "-");
        }
        printf("\n%-28s", "    share of lower bound");
        for (int k = 0; k < P_COUNT; k++) {
            const double lim = int_peak * threads;
            const double low = lim > 0 && lim < bound ? lim : bound;
            if ((k == P_OURS_FLEX || k == P_OURS_DFP) && avail[k] && low > 0)
                printf(" %13.0f%%", 100.0 * gf[k] / low);
            else printf(" %14s", "-");
        }
        printf("\n");
        free(ctouch);
        for (int f = 0; f < 5; f++) {
            tensor_free(ta[f]);
            tensor_free(tb[f]);
            tensor_free(tc[f]);
        }
        free(a);
        free(b);
        free(c);
        free(a16);
        free(b16);
    }
    return 0;
}
