/* Elementwise training ops of the small CNN, per format: the conv bias add (per-channel), ReLU,
 * 2x2 max pooling and the gradients of both, at the CNN's two activation shapes (batch 128);
 * then ResNet-20's block ends (bench_residual) at its three stages' shapes.
 *   ./build/release/bench/bench_ew [threads] [repetitions] [formats]
 * Prints the best wall time (ms) of the repetitions per op. For FLEX16_5 and DFP16 it also
 * times the dispatcher's int64/int16-stage route (the one-pass add/sub/ReLU of
 * src/core/shared_binary.c switched off), alternating with the default route in the same
 * process, so the two columns see the same machine phase. Inputs are Gaussian; the times do not
 * depend on the values beyond the exponent choices. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/half_binary.h"
#include "core/shared_binary.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

enum { OP_ADD, OP_RELU, OP_RELU_BWD, OP_POOL, OP_POOL_BWD, NOPS };
static const char *const op_names[NOPS] = {"bias add", "relu", "relu grad", "maxpool",
                                           "maxpool grad"};

static double now_s(void) { return bench_clock_s(CLOCK_MONOTONIC); }

static int fill_gauss(tensor_t *t, double scale, unsigned *seed)
{
    const int64_t n = tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return FX_ENOMEM;
    for (int64_t i = 0; i < n; i += 2) {
        *seed = *seed * 1664525u + 1013904223u;
        const double u1 = ((*seed >> 8) + 1.0) / 16777217.0;
        *seed = *seed * 1664525u + 1013904223u;
        const double u2 = (*seed >> 8) / 16777216.0, r = sqrt(-2.0 * log(u1));
        v[i] = (float)(scale * r * cos(6.283185307179586 * u2));
        if (i + 1 < n) v[i + 1] = (float)(scale * r * sin(6.283185307179586 * u2));
    }
    const int rc = tensor_from_f32(t, v);
    free(v);
    return rc;
}

typedef struct layer_bufs {
    tensor_t *x, *bias, *y, *r, *p, *dp, *dr, *dx;
    int32_t *argmax;
} layer_bufs;

static int run_op(int op, void *ctx)
{
    layer_bufs *b = ctx;
    switch (op) {
    case OP_ADD: return tensor_add(b->y, b->x, b->bias);
    case OP_RELU: return tensor_relu(b->r, b->y);
    case OP_RELU_BWD: return tensor_relu_backward(b->dx, b->dr, b->y);
    case OP_POOL: return tensor_maxpool2d(b->p, b->argmax, b->r, 2, 2, 2, 2, 0, 0);
    default: return tensor_maxpool2d_backward(b->dr, b->dp, b->argmax);
    }
}

static void free_bufs(layer_bufs *b)
{
    tensor_t *ts[8] = {b->x, b->bias, b->y, b->r, b->p, b->dp, b->dr, b->dx};
    for (int i = 0; i < 8; i++) tensor_free(ts[i]);
    free(b->argmax);
}

/* BENCH_COLD=1: every timed op starts with its operands out of the caches, as in training,
 * where each activation was written a layer or more before (a 64 MB buffer written between) */
static int cold;
static void bench_evict_caches(void)
{
    static char *junk;
    static unsigned char fill;
    enum { JUNK = 64 << 20 };
    if (!junk) junk = malloc(JUNK);
    if (junk) memset(junk, fill++, JUNK);
}

enum { MAX_OPS = 8 };

/* The best time of each of nops ops (run(op, ctx)) over reps rounds, after `warm` untimed ones.
 * With alternate, the rounds alternate route(1) (best[0]) and route(0) (best[1]) in this
 * process, so that both see the same machine phase; route(1) is left on. With cold_ops each op
 * starts with its operands out of the caches. Returns the first failing op's status. */
static int time_ops(int nops, int (*run)(int, void *), void *ctx, void (*route)(int),
                    int alternate, int reps, int warm, int cold_ops, double best[2][MAX_OPS])
{
    for (int k = 0; k < 2; k++)
        for (int op = 0; op < nops; op++) best[k][op] = INFINITY;
    int rc = FX_OK;
    for (int it = 0; it < 2 * reps + warm && !rc; it++) {
        const int other = alternate && (it & 1);
        route(!other);
        for (int op = 0; op < nops && !rc; op++) {
            if (cold_ops) bench_evict_caches();
            const double t0 = now_s();
            rc = run(op, ctx);
            const double dt = now_s() - t0;
            if (it >= warm && dt < best[other][op]) best[other][op] = dt;
        }
    }
    route(1);
    return rc;
}

/* One line of best times (ms), each op's time by the other route in parentheses where the
 * rounds alternated (named other). */
static void print_times(const char *fname, int64_t C, int64_t HW, int nops,
                        const char *const *names, int alternate, const char *other,
                        double best[2][MAX_OPS])
{
    printf("%-9s [128,%lld,%lld,%lld]", fname, (long long)C, (long long)HW, (long long)HW);
    for (int op = 0; op < nops; op++) {
        if (alternate)
            printf("  %s %.2f (%s %.2f)", names[op], best[0][op] * 1e3, other, best[1][op] * 1e3);
        else
            printf("  %s %.2f", names[op], best[0][op] * 1e3);
    }
    printf("\n");
}

static int bench_layer(fmt_t f, const char *fname, int64_t C, int64_t HW, int reps)
{
    const int64_t s[4] = {128, C, HW, HW}, sp[4] = {128, C, HW / 2, HW / 2}, sb[3] = {C, 1, 1};
    layer_bufs b = {tensor_new(f, 4, s), tensor_new(f, 3, sb), tensor_new(f, 4, s),
                    tensor_new(f, 4, s), tensor_new(f, 4, sp), tensor_new(f, 4, sp),
                    tensor_new(f, 4, s), tensor_new(f, 4, s),
                    malloc((size_t)(128 * C * HW * HW / 4) * sizeof(int32_t))};
    unsigned seed = 12345u;
    int rc = (!b.x || !b.bias || !b.y || !b.r || !b.p || !b.dp || !b.dr || !b.dx || !b.argmax)
                 ? FX_ENOMEM
                 : FX_OK;
    if (!rc) rc = fill_gauss(b.x, 1.0, &seed);
    if (!rc) rc = fill_gauss(b.bias, 0.1, &seed);
    if (!rc) rc = fill_gauss(b.dp, 1e-3, &seed);
    /* for FLEX16_5 and DFP16, alternating with the dispatcher's stage route */
    const int shared = fmt_is_shared_exponent(f);
    double best[2][MAX_OPS];
    if (!rc) rc = time_ops(NOPS, run_op, &b, fx_shared_binary_set_enabled, shared, reps, 0, 0, best);
    if (rc) {
        fprintf(stderr, "bench_ew: %s: %s\n", fname, flexpoint_last_error());
        free_bufs(&b);
        return 1;
    }
    print_times(fname, C, HW, NOPS, op_names, shared, "staged", best);
    free_bufs(&b);
    return 0;
}

/* A ResNet block's end as the trainer runs it: the residual add and its ReLU (y = relu(t + s)),
 * and backward the ReLU's gradient from the sum of its two consumers' gradients (dx = (d1 +
 * d2) where y > 0). fp16/bf16 make each in one pass without the sum (fx_half_add_relu,
 * fx_half_gated_add); FLEX16_5/DFP16 write the sum too, each with its own exponent
 * (fx_shared_add_relu, fx_shared_add_gated), and the "two passes" column makes the second
 * output of each work unit by a pass of its own instead of the level's one-pass kernel
 * (sum2_quant_gated), alternating in this process; fp32 runs the ops one by one. */
enum { RES_ADD_RELU, RES_GRAD_SUM, NRES };
static const char *const res_names[NRES] = {"residual add+relu", "relu grad of a sum"};

typedef struct res_bufs {
    tensor_t *t, *s, *u, *y, *d1, *d2, *dsum, *dx;
    fmt_t f;
} res_bufs;

static int run_res(int op, void *ctx)
{
    res_bufs *b = ctx;
    const int shared = fmt_is_shared_exponent(b->f);
    int rc;
    if (op == RES_ADD_RELU) {
        rc = shared ? fx_shared_add_relu(b->u, b->y, b->t, b->s)
                    : fx_half_add_relu(b->y, b->t, b->s);
        if (rc == FX_SHARED_BINARY_NOT_TAKEN) { /* (the two "not taken" codes are both 1) */
            rc = tensor_add(b->u, b->t, b->s);
            if (!rc) rc = tensor_relu(b->y, b->u);
        }
        return rc;
    }
    rc = shared ? fx_shared_add_gated(b->dsum, b->dx, b->d1, b->d2, b->y)
                : fx_half_gated_add(b->dx, b->d1, b->d2, b->y);
    if (rc == FX_SHARED_BINARY_NOT_TAKEN) {
        rc = tensor_add(b->dsum, b->d1, b->d2);
        if (!rc) rc = tensor_relu_backward(b->dx, b->dsum, b->y);
    }
    return rc;
}

static int bench_residual(fmt_t f, const char *fname, int64_t C, int64_t HW, int reps)
{
    const int64_t s[4] = {128, C, HW, HW};
    res_bufs b = {.f = f};
    tensor_t **all[8] = {&b.t, &b.s, &b.u, &b.y, &b.d1, &b.d2, &b.dsum, &b.dx};
    int rc = FX_OK;
    for (int i = 0; i < 8; i++)
        if (!(*all[i] = tensor_new(f, 4, s))) rc = FX_ENOMEM;
    unsigned seed = 777u;
    if (!rc) rc = fill_gauss(b.t, 1.0, &seed);
    if (!rc) rc = fill_gauss(b.s, 0.7, &seed);
    if (!rc) rc = fill_gauss(b.d1, 1e-3, &seed);
    if (!rc) rc = fill_gauss(b.d2, 2e-3, &seed);
    /* for FLEX16_5 and DFP16, alternating with two passes a unit; two untimed rounds first: a
     * FLEX16_5 output's exponent is guessed from its second write */
    const int shared = fmt_is_shared_exponent(f);
    double best[2][MAX_OPS];
    if (!rc)
        rc = time_ops(NRES, run_res, &b, fx_shared_binary_set_gated_kernel, shared, reps, 2,
                      cold, best);
    if (rc) fprintf(stderr, "bench_ew: %s residual: %s\n", fname, flexpoint_last_error());
    else print_times(fname, C, HW, NRES, res_names, shared, "two passes", best);
    for (int i = 0; i < 8; i++) tensor_free(*all[i]);
    return rc ? 1 : 0;
}

/* 1 if the comma-separated list holds name as a whole item */
static int has_item(const char *list, const char *name)
{
    const size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    const int reps = argc > 2 ? atoi(argv[2]) : 7;
    const char *formats = argc > 3 ? argv[3] : "fp32,bf16,flex16_5,dfp16";
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_ew [threads >= 1] [repetitions >= 1] [formats]\n");
        return 2;
    }
    flexpoint_set_num_threads(threads);
    const char *cold_env = getenv("BENCH_COLD");
    cold = cold_env && cold_env[0] == '1';
    printf("bench_ew: batch 128, %d thread(s), best of %d, wall ms; \"staged\": the dispatcher's "
           "stage route, alternating in this process\n", threads, reps);
    static const struct { const char *name; fmt_t f; } all[] = {
        {"fp32", FMT_FP32}, {"fp16", FMT_FP16}, {"bf16", FMT_BF16},
        {"flex16_5", FMT_FLEX16_5}, {"dfp16", FMT_DFP16}};
    int rc = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (!has_item(formats, all[i].name)) continue;
        rc |= bench_layer(all[i].f, all[i].name, 32, 28, reps);
        rc |= bench_layer(all[i].f, all[i].name, 64, 14, reps);
    }
    printf("ResNet-20's block ends (see bench_residual)\n");
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (!has_item(formats, all[i].name)) continue;
        rc |= bench_residual(all[i].f, all[i].name, 16, 32, reps);
        rc |= bench_residual(all[i].f, all[i].name, 32, 16, reps);
        rc |= bench_residual(all[i].f, all[i].name, 64, 8, reps);
    }
    return rc;
}
