/* Convolution against a peer: flexpoint's convolution in every format against oneDNN's fp32
 * convolution (forward, backward data, backward weights), in one process, alternating.
 *   ./build/release/bench/bench_conv_peer [repetitions] [threads ...]     (default: 7 1 2)
 *
 * Shapes: the trainer's batch of 128 and
 *   - the Fashion-MNIST CNN's two convolutions (5x5, padding 2, stride 1; model.c fx_build_cnn);
 *   - every distinct convolution of ResNet-20 (model.c fx_build_resnet) on 32x32 inputs: conv0
 *     (3 input channels, CIFAR-10; Fashion-MNIST padded with --pad 2 has 1), the 3x3 convolutions
 *     at 16, 32 and 64 channels, the two stride-2 3x3 convolutions that open stages 2 and 3, and
 *     the two 1x1 stride-2 projection shortcuts ("down"). The count column says how often the
 *     model runs each shape per step; the weighted totals use it.
 *
 * What is timed (all operands fp32 NCHW / OIHW in memory on oneDNN's side, tensors already in
 * the format on ours, as the trainer holds them):
 *   - ours: one public call, tensor_conv2d / tensor_conv2d_backward_input /
 *     tensor_conv2d_backward_weight, which includes every packing, conversion and rounding
 *     (and for FLEX16_5 and DFP16 the output exponent) it does;
 *   - oneDNN: its primitives are created once with format_tag::any (its own layout choice) and
 *     algorithm convolution_direct, outside the timing, like our library's one-time setup. Each
 *     timed pass then runs the reorders of its inputs from plain NCHW/OIHW into the chosen
 *     layouts, the primitive, and the reorder of its output back to plain layout: a caller
 *     that holds plain tensors, as ours do, pays all of it. Weights are reordered in every
 *     pass, inputs are not shared between passes. The "prim" column is the primitive alone,
 *     oneDNN's best case (a framework that keeps everything in blocked layouts).
 * Ratios are ours / oneDNN (with reorders): below 1 is faster than oneDNN.
 * Direct, not convolution_auto: auto lets oneDNN 2.6 take Winograd (jit_wino_4x3) for the 3x3
 * stride-1 shapes, fewer multiplications at a different rounding, while ours (and PyTorch's
 * oneDNN path) computes the direct sum. BENCH_DNNL_ALG=auto times auto instead.
 *
 * Operands: ReLU-like activations, small weights and small gradients, standard-normal values
 * scaled (BENCH_DATA=normal, the default: the shape of training's tensors, on which the integer
 * formats' exact GEMM takes its fast kernel where training does) or uniform ones
 * (BENCH_DATA=uniform: mantissas large enough that most tiles take the any-data kernel).
 *
 * Times are wall clock, or with BENCH_CLOCK=cpu the process's CPU time (all threads), which a
 * shared machine's other jobs do not inflate; at several threads it also counts the OpenMP
 * runtime's spinning at barriers, ours and oneDNN's alike.
 *
 * Each repetition runs, per pass, the five formats and oneDNN one after the other, so slow
 * phases of this shared VM fall on all of them; one untimed repetition warms up; each cell is
 * the median of the repetitions. Threads: flexpoint_set_num_threads and omp_set_num_threads
 * (Debian's oneDNN uses the OpenMP runtime, libgomp, the same one as ours), set before the
 * oneDNN primitives of that thread count are created.
 *
 * Correctness, once per shape at the first thread count: oneDNN's fp32 results against ours in
 * fp32 on the same data; the largest difference over the largest magnitude of oneDNN's result
 * must stay below 1e-4 (fp32 rounding of sums up to 25,088 terms stays near 1e-6; a wrong
 * shape, padding or layout gives differences of order 1). A mismatch exits with status 1.
 *
 * Without oneDNN at configure time (dnnl.h and libdnnl) the program times our formats only and
 * says that the peer is missing. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "flexpoint.h"
#include "flexpoint_nn.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

#ifdef FX_BENCH_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

enum { NFMT = 5, NPASS = 3, MAXREPS = 101 };
static const fmt_t fmts[NFMT] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5, FMT_DFP16};
static const char *pass_name[NPASS] = {"fwd", "bwd data", "bwd weights"};

typedef struct layer {
    const char *model, *name;
    int64_t C, H, O, k, stride, pad;
    int count; /* times the model runs this shape per step */
} layer;

static const layer layers[] = {
    {"cnn", "conv1 1->32 28x28 5x5", 1, 28, 32, 5, 1, 2, 1},
    {"cnn", "conv2 32->64 14x14 5x5", 32, 14, 64, 5, 1, 2, 1},
    {"resnet20", "conv0 3->16 32x32 3x3", 3, 32, 16, 3, 1, 1, 1},
    {"resnet20", "s1 16->16 32x32 3x3", 16, 32, 16, 3, 1, 1, 6},
    {"resnet20", "s2b1.conv1 16->32 s2 3x3", 16, 32, 32, 3, 2, 1, 1},
    {"resnet20", "s2b1.down 16->32 s2 1x1", 16, 32, 32, 1, 2, 0, 1},
    {"resnet20", "s2 32->32 16x16 3x3", 32, 16, 32, 3, 1, 1, 5},
    {"resnet20", "s3b1.conv1 32->64 s2 3x3", 32, 16, 64, 3, 2, 1, 1},
    {"resnet20", "s3b1.down 32->64 s2 1x1", 32, 16, 64, 1, 2, 0, 1},
    {"resnet20", "s3 64->64 8x8 3x3", 64, 8, 64, 3, 1, 1, 5},
};
enum { NLAYER = sizeof layers / sizeof layers[0], BATCH = 128 };

static clockid_t g_clock = CLOCK_MONOTONIC; /* BENCH_CLOCK=cpu: CLOCK_PROCESS_CPUTIME_ID */

static double now_s(void) { return bench_clock_s(g_clock); }

/* ReLU-like activations (relu != 0), small weights or small gradients, as in training, in
 * the shape BENCH_DATA asks for (bench_data_normal). */
static int g_normal = 1;

static float *random_floats(int64_t n, float scale, int relu, unsigned *seed)
{
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return NULL;
    for (int64_t i = 0; i < n; i++) v[i] = bench_value(seed, scale, relu, g_normal);
    return v;
}

static tensor_t *tensor_of(fmt_t f, const int64_t *shape, const float *v)
{
    tensor_t *t = tensor_new(f, 4, shape);
    if (t && v && tensor_from_f32(t, v)) {
        tensor_free(t);
        return NULL;
    }
    return t;
}

/* One layer's operands in one format. */
typedef struct ours {
    tensor_t *x, *w, *dy, *y, *dx, *dw;
} ours;

static int ours_run(const ours *o, const layer *L, int pass)
{
    const int s = (int)L->stride, p = (int)L->pad;
    return pass == 0   ? tensor_conv2d(o->y, o->x, o->w, s, s, p, p, 1, 1)
           : pass == 1 ? tensor_conv2d_backward_input(o->dx, o->dy, o->w, s, s, p, p, 1, 1)
                       : tensor_conv2d_backward_weight(o->dw, o->x, o->dy, s, s, p, p, 1, 1);
}

#ifdef FX_BENCH_DNNL
/* One primitive argument: the caller's plain buffer, and where the layout oneDNN chose differs,
 * a buffer in that layout and the reorder between the two. */
typedef struct darg {
    int arg;
    dnnl_memory_t user, mem;
    dnnl_primitive_t reorder;
} darg;

/* One pass: up to two inputs and one output. */
typedef struct dpass {
    dnnl_primitive_t prim;
    darg in[2], out;
    dnnl_memory_t scratch;
} dpass;

#define DNNL_TRY(call)                                                                     \
    do {                                                                                   \
        const dnnl_status_t st_ = (call);                                                  \
        if (st_ != dnnl_success) {                                                         \
            fprintf(stderr, "bench_conv_peer: %s failed (status %d)\n", #call, (int)st_); \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

static int darg_init(darg *a, int arg, const_dnnl_primitive_desc_t pd, dnnl_query_t what,
                     const dnnl_memory_desc_t *plain, float *buf, int is_output,
                     dnnl_engine_t eng)
{
    a->arg = arg;
    a->reorder = NULL;
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, 0);
    DNNL_TRY(dnnl_memory_create(&a->user, plain, eng, buf));
    if (dnnl_memory_desc_equal(md, plain)) {
        a->mem = a->user;
        return 0;
    }
    DNNL_TRY(dnnl_memory_create(&a->mem, md, eng, DNNL_MEMORY_ALLOCATE));
    dnnl_primitive_desc_t rpd;
    DNNL_TRY(is_output ? dnnl_reorder_primitive_desc_create(&rpd, md, eng, plain, eng, NULL)
                       : dnnl_reorder_primitive_desc_create(&rpd, plain, eng, md, eng, NULL));
    DNNL_TRY(dnnl_primitive_create(&a->reorder, rpd));
    dnnl_primitive_desc_destroy(rpd);
    return 0;
}

static void darg_free(darg *a)
{
    if (a->mem != a->user) dnnl_memory_destroy(a->mem);
    dnnl_memory_destroy(a->user);
    if (a->reorder) dnnl_primitive_destroy(a->reorder);
}

static int reorder(const darg *a, int to_user, dnnl_stream_t s)
{
    if (!a->reorder) return 0;
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, to_user ? a->mem : a->user},
                               {DNNL_ARG_TO, to_user ? a->user : a->mem}};
    DNNL_TRY(dnnl_primitive_execute(a->reorder, s, 2, args));
    return 0;
}

/* Runs one pass; *prim_s gets the primitive's own time. */
static int dpass_run(const dpass *d, dnnl_stream_t s, double *prim_s)
{
    for (int i = 0; i < 2; i++)
        if (reorder(&d->in[i], 0, s)) return 1;
    DNNL_TRY(dnnl_stream_wait(s));
    dnnl_exec_arg_t args[4] = {{d->in[0].arg, d->in[0].mem},
                               {d->in[1].arg, d->in[1].mem},
                               {d->out.arg, d->out.mem},
                               {DNNL_ARG_SCRATCHPAD, d->scratch}};
    const double t0 = now_s();
    DNNL_TRY(dnnl_primitive_execute(d->prim, s, d->scratch ? 4 : 3, args));
    DNNL_TRY(dnnl_stream_wait(s));
    *prim_s = now_s() - t0;
    if (reorder(&d->out, 1, s)) return 1;
    DNNL_TRY(dnnl_stream_wait(s));
    return 0;
}

static int dpass_finish(dpass *d, dnnl_primitive_desc_t pd, dnnl_engine_t eng)
{
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    d->scratch = NULL;
    if (smd && dnnl_memory_desc_get_size(smd) > 0)
        DNNL_TRY(dnnl_memory_create(&d->scratch, smd, eng, DNNL_MEMORY_ALLOCATE));
    DNNL_TRY(dnnl_primitive_create(&d->prim, pd));
    return 0;
}

static void dpass_free(dpass *d)
{
    darg_free(&d->in[0]);
    darg_free(&d->in[1]);
    darg_free(&d->out);
    if (d->scratch) dnnl_memory_destroy(d->scratch);
    dnnl_primitive_destroy(d->prim);
}

static dnnl_alg_kind_t conv_alg;

static const char *impl_name(const_dnnl_primitive_desc_t pd)
{
    const char *s = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s)
        return "?";
    return s;
}

/* The three passes of one layer on the caller's fp32 buffers (plain layouts). */
static int dnnl_layer_init(dpass d[NPASS], const layer *L, int64_t OH, dnnl_engine_t eng,
                           float *x, float *w, float *dy, float *y, float *dx, float *dw,
                           int print_impl)
{
    const dnnl_dims_t xs = {BATCH, L->C, L->H, L->H}, ws = {L->O, L->C, L->k, L->k},
                      ys = {BATCH, L->O, OH, OH};
    const dnnl_dims_t strides = {L->stride, L->stride}, pad = {L->pad, L->pad};
    /* oneDNN's right padding: what the output size needs beyond the left padding */
    const int64_t pr = (OH - 1) * L->stride + L->k - L->H - L->pad;
    const dnnl_dims_t padr = {pr, pr};
    dnnl_memory_desc_t xp, wp, yp, xa, wa, ya;
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&xp, 4, xs, dnnl_f32, dnnl_nchw));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&wp, 4, ws, dnnl_f32, dnnl_oihw));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&yp, 4, ys, dnnl_f32, dnnl_nchw));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&xa, 4, xs, dnnl_f32, dnnl_format_tag_any));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&wa, 4, ws, dnnl_f32, dnnl_format_tag_any));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&ya, 4, ys, dnnl_f32, dnnl_format_tag_any));

    dnnl_convolution_desc_t fd, bd, bw;
    dnnl_primitive_desc_t fpd, bpd, wpd;
    DNNL_TRY(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, conv_alg,
                                                &xa, &wa, NULL, &ya, strides, pad, padr));
    DNNL_TRY(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
    DNNL_TRY(dnnl_convolution_backward_data_desc_init(&bd, conv_alg, &xa, &wa, &ya,
                                                      strides, pad, padr));
    DNNL_TRY(dnnl_primitive_desc_create(&bpd, &bd, NULL, eng, fpd));
    DNNL_TRY(dnnl_convolution_backward_weights_desc_init(&bw, conv_alg, &xa, &wa,
                                                         NULL, &ya, strides, pad, padr));
    DNNL_TRY(dnnl_primitive_desc_create(&wpd, &bw, NULL, eng, fpd));

    if (darg_init(&d[0].in[0], DNNL_ARG_SRC, fpd, dnnl_query_src_md, &xp, x, 0, eng) ||
        darg_init(&d[0].in[1], DNNL_ARG_WEIGHTS, fpd, dnnl_query_weights_md, &wp, w, 0, eng) ||
        darg_init(&d[0].out, DNNL_ARG_DST, fpd, dnnl_query_dst_md, &yp, y, 1, eng) ||
        dpass_finish(&d[0], fpd, eng))
        return 1;
    if (darg_init(&d[1].in[0], DNNL_ARG_DIFF_DST, bpd, dnnl_query_diff_dst_md, &yp, dy, 0, eng) ||
        darg_init(&d[1].in[1], DNNL_ARG_WEIGHTS, bpd, dnnl_query_weights_md, &wp, w, 0, eng) ||
        darg_init(&d[1].out, DNNL_ARG_DIFF_SRC, bpd, dnnl_query_diff_src_md, &xp, dx, 1, eng) ||
        dpass_finish(&d[1], bpd, eng))
        return 1;
    if (darg_init(&d[2].in[0], DNNL_ARG_SRC, wpd, dnnl_query_src_md, &xp, x, 0, eng) ||
        darg_init(&d[2].in[1], DNNL_ARG_DIFF_DST, wpd, dnnl_query_diff_dst_md, &yp, dy, 0, eng) ||
        darg_init(&d[2].out, DNNL_ARG_DIFF_WEIGHTS, wpd, dnnl_query_diff_weights_md, &wp, dw, 1,
                  eng) ||
        dpass_finish(&d[2], wpd, eng))
        return 1;
    if (print_impl)
        printf("%-26s oneDNN implementations: %s / %s / %s\n", L->name, impl_name(fpd),
               impl_name(bpd), impl_name(wpd));
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_desc_destroy(bpd);
    dnnl_primitive_desc_destroy(wpd);
    return 0;
}

static const char *dnnl_isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}
#endif

/* Largest |a - b| over the largest |b|. */
static double rel_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 7;
    int threads[8] = {1, 2}, nthreads = 2;
    if (argc > 2) {
        nthreads = 0;
        for (int i = 2; i < argc && nthreads < 8; i++) threads[nthreads++] = atoi(argv[i]);
    }
    int bad = reps < 1 || reps > MAXREPS;
    for (int i = 0; i < nthreads; i++) bad |= threads[i] < 1;
    if (bad) {
        fprintf(stderr, "usage: bench_conv_peer [repetitions 1..%d] [threads >= 1 ...]\n",
                MAXREPS);
        return 2;
    }
    if (getenv("BENCH_CLOCK") && strcmp(getenv("BENCH_CLOCK"), "cpu") == 0)
        g_clock = CLOCK_PROCESS_CPUTIME_ID;
    g_normal = bench_data_normal();
    if (g_normal < 0) return 2;
    /* the OpenMP runtime's setting, for oneDNN; looked up so that a build without OpenMP runs */
    void (*omp_threads)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");

    printf("bench_conv_peer: batch %d, median of %d after one warm-up; flexpoint %s, backend %s, "
           "CPU %s\n", BATCH, reps, flexpoint_version(), flexpoint_backend(),
           flexpoint_cpu_model());
    printf("times: %s; operands: %s (BENCH_DATA)\n",
           g_clock == CLOCK_MONOTONIC ? "wall clock" : "process CPU time (BENCH_CLOCK=cpu)",
           g_normal ? "normal" : "uniform");
#ifdef FX_BENCH_DNNL
    const dnnl_version_t *ver = dnnl_version();
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    const char *alg = getenv("BENCH_DNNL_ALG");
    conv_alg = alg && strcmp(alg, "auto") == 0 ? dnnl_convolution_auto : dnnl_convolution_direct;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&strm, eng, dnnl_stream_default_flags) != dnnl_success) {
        fprintf(stderr, "bench_conv_peer: cannot create a oneDNN CPU engine\n");
        return 1;
    }
    printf("peer: oneDNN %d.%d.%d fp32 convolution (%s), ISA %s, threading runtime %s\n",
           ver->major, ver->minor, ver->patch,
           conv_alg == dnnl_convolution_auto ? "convolution_auto" : "convolution_direct", dnnl_isa_name(dnnl_get_effective_cpu_isa()),
           ver->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
           : ver->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                                                  : "other");
    const int have_peer = 1;
#else
    printf("peer: oneDNN was not found when this program was configured (dnnl.h, libdnnl); "
           "timing flexpoint only\n");
    const int have_peer = 0;
#endif
    if (!omp_threads) printf("note: no OpenMP runtime loaded; thread counts are flexpoint's only\n");

    static double t[NPASS][NFMT + 2][MAXREPS]; /* formats, oneDNN, oneDNN primitive */
    double total[2][NFMT + 2];                    /* per model: count-weighted sum of medians */
    unsigned seed = 12345;
    int checked[NLAYER] = {0};
    for (int ti = 0; ti < nthreads; ti++) {
        flexpoint_set_num_threads(threads[ti]);
        if (omp_threads) omp_threads(threads[ti]);
        memset(total, 0, sizeof total);
        printf("\n== %d thread(s); ms per pass%s ==\n", threads[ti],
               have_peer ? " (ratio ours/oneDNN; <1 is faster)" : "");
        printf("%-26s %3s %-11s", "layer", "n", "pass");
        for (int f = 0; f < NFMT; f++) printf(" %16s", fmt_name(fmts[f]));
        if (have_peer) printf(" %9s %9s", "oneDNN", "prim");
        printf("\n");
        for (int li = 0; li < NLAYER; li++) {
            const layer *L = &layers[li];
            const int64_t OH = (L->H + 2 * L->pad - L->k) / L->stride + 1;
            const int64_t xs[4] = {BATCH, L->C, L->H, L->H}, ws[4] = {L->O, L->C, L->k, L->k},
                          ys[4] = {BATCH, L->O, OH, OH};
            const int64_t nx = BATCH * L->C * L->H * L->H, nw = L->O * L->C * L->k * L->k,
                          ny = BATCH * L->O * OH * OH;
            float *x = random_floats(nx, 1.0f, 1, &seed), *w = random_floats(nw, 0.1f, 0, &seed),
                  *dy = random_floats(ny, 0.01f, 0, &seed);
            float *y = calloc((size_t)ny, sizeof *y), *dx = calloc((size_t)nx, sizeof *dx),
                  *dw = calloc((size_t)nw, sizeof *dw);
            ours o[NFMT];
            int oom = !x || !w || !dy || !y || !dx || !dw;
            for (int f = 0; f < NFMT; f++) {
                o[f].x = tensor_of(fmts[f], xs, x), o[f].w = tensor_of(fmts[f], ws, w);
                o[f].dy = tensor_of(fmts[f], ys, dy), o[f].y = tensor_of(fmts[f], ys, NULL);
                o[f].dx = tensor_of(fmts[f], xs, NULL), o[f].dw = tensor_of(fmts[f], ws, NULL);
                oom |= !o[f].x || !o[f].w || !o[f].dy || !o[f].y || !o[f].dx || !o[f].dw;
            }
            if (oom) {
                fprintf(stderr, "bench_conv_peer: out of memory\n");
                return 1;
            }
#ifdef FX_BENCH_DNNL
            dpass d[NPASS];
            memset(d, 0, sizeof d);
            if (dnnl_layer_init(d, L, OH, eng, x, w, dy, y, dx, dw, !checked[li])) return 1;
#endif
            for (int r = -1; r < reps; r++)
                for (int pass = 0; pass < NPASS; pass++) {
                    for (int f = 0; f < NFMT; f++) {
                        const double t0 = now_s();
                        if (ours_run(&o[f], L, pass)) {
                            fprintf(stderr, "bench_conv_peer: %s %s %s: %s\n", L->name,
                                    fmt_name(fmts[f]), pass_name[pass], flexpoint_last_error());
                            return 1;
                        }
                        if (r >= 0) t[pass][f][r] = now_s() - t0;
                    }
#ifdef FX_BENCH_DNNL
                    double prim;
                    const double t0 = now_s();
                    if (dpass_run(&d[pass], strm, &prim)) return 1;
                    if (r >= 0) t[pass][NFMT][r] = now_s() - t0, t[pass][NFMT + 1][r] = prim;
#endif
                }
            if (have_peer && !checked[li]) {
                /* the last runs left oneDNN's results in y, dx, dw (plain layouts) */
                const tensor_t *mine[NPASS] = {o[0].y, o[0].dx, o[0].dw};
                const float *theirs[NPASS] = {y, dx, dw};
                const int64_t n[NPASS] = {ny, nx, nw};
                printf("%-26s check fp32 vs oneDNN, max|diff|/max|oneDNN|:", L->name);
                for (int pass = 0; pass < NPASS; pass++) {
                    float *v = malloc((size_t)n[pass] * sizeof *v);
                    if (!v || tensor_to_f32(mine[pass], v)) {
                        fprintf(stderr, "bench_conv_peer: cannot read a result back\n");
                        return 1;
                    }
                    const double e = rel_diff(v, theirs[pass], n[pass]);
                    free(v);
                    printf(" %s %.1e", pass_name[pass], e);
                    if (!(e < 1e-4)) {
                        printf("\nbench_conv_peer: MISMATCH in %s %s: the shapes, padding or "
                               "layouts differ\n", L->name, pass_name[pass]);
                        return 1;
                    }
                }
                printf("\n");
                checked[li] = 1;
            }
            const int model = strcmp(L->model, "cnn") != 0;
            for (int pass = 0; pass < NPASS; pass++) {
                double med[NFMT + 2];
                for (int c = 0; c < NFMT + 2 * have_peer; c++) {
                    med[c] = bench_median(t[pass][c], reps);
                    total[model][c] += L->count * med[c];
                }
                printf("%-26s %3d %-11s", L->name, L->count, pass_name[pass]);
                for (int f = 0; f < NFMT; f++)
                    if (have_peer)
                        printf(" %8.2f (%5.2f)", 1e3 * med[f], med[f] / med[NFMT]);
                    else
                        printf(" %16.2f", 1e3 * med[f]);
                if (have_peer) printf(" %9.2f %9.2f", 1e3 * med[NFMT], 1e3 * med[NFMT + 1]);
                printf("\n");
            }
#ifdef FX_BENCH_DNNL
            for (int pass = 0; pass < NPASS; pass++) dpass_free(&d[pass]);
#endif
            for (int f = 0; f < NFMT; f++)
                tensor_free(o[f].x), tensor_free(o[f].w), tensor_free(o[f].dy),
                    tensor_free(o[f].y), tensor_free(o[f].dx), tensor_free(o[f].dw);
            free(x), free(w), free(dy), free(y), free(dx), free(dw);
        }
        /* per model: every convolution of one step, all three passes, each shape times its count */
        for (int m = 0; m < 2; m++) {
            printf("%-26s %3s %-11s", m ? "resnet20 all convs" : "cnn all convs", "", "3 passes");
            for (int f = 0; f < NFMT; f++)
                if (have_peer)
                    printf(" %8.2f (%5.2f)", 1e3 * total[m][f], total[m][f] / total[m][NFMT]);
                else
                    printf(" %16.2f", 1e3 * total[m][f]);
            if (have_peer) printf(" %9.2f %9.2f", 1e3 * total[m][NFMT], 1e3 * total[m][NFMT + 1]);
            printf("\n");
        }
    }
#ifdef FX_BENCH_DNNL
    dnnl_stream_destroy(strm);
    dnnl_engine_destroy(eng);
#endif
    return 0;
}
