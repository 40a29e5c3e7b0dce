/* The transformer's element-wise and normalising ops, forward and backward, per format, at the
 * shapes of `--model transformer` (batch 128, context 128, width 128, 4 heads):
 *   layernorm  [16384, 128]           tensor_layernorm / tensor_layernorm_backward
 *   gelu       [16384, 512]           tensor_unary / tensor_unary_backward ("gelu")
 *   softmax    [65536, 128] (rows)    tensor_softmax / tensor_softmax_backward (last axis)
 *   qk         [128, 4, 128, 32] x [128, 4, 128, 32]^T   tensor_bmm (scores) / its backward
 *   attn_sm    [128, 4, 128, 128]     tensor_attention_softmax (scale, causal mask) /
 *                                     tensor_attention_softmax_backward
 *   pv         [128, 4, 128, 128] x [128, 4, 128, 32]    tensor_bmm / its backward
 *   scale      [128, 4, 128, 128]     tensor_scale by 1/sqrt(32), of x / of dy
 *   ./build/release/bench/bench_tfm [threads] [repetitions] [formats]
 * Prints the best wall time (ms) of the repetitions per pass, and fp32's time over each
 * format's in the same process. Inputs are standard-normal activations and gradients of 0.01;
 * BENCH_OPS="layernorm gelu" times only the ops named. The trainer runs these ops inside larger
 * layers (the attention's softmax is fused with its mask and scale); `flexpoint-train
 * --profile` shows those layers in a training step. */
#include "flexpoint.h"
#include "flexpoint_nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

enum { OP_LAYERNORM, OP_GELU, OP_SOFTMAX, OP_QK, OP_ATTN_SM, OP_PV, OP_SCALE, OP_COUNT };
static const char *const OP_NAMES[OP_COUNT] = {"layernorm", "gelu", "softmax", "qk", "attn_sm",
                                               "pv", "scale"};
/* the shape of x (and y, dy, dx); the products' second operand is [128, 4, 128, 32] */
static const int64_t OP_SHAPES[OP_COUNT][4] = {{1, 1, 16384, 128}, {1, 1, 16384, 512},
                                               {128, 4, 128, 128}, {128, 4, 128, 32},
                                               {128, 4, 128, 128}, {128, 4, 128, 128},
                                               {128, 4, 128, 128}};
static const int64_t HEAD_SHAPE[4] = {128, 4, 128, 32};
static const double SCORE_SCALE = 0.17677669529663687; /* 1 / sqrt(32): the heads' width */

/* The operands of one op: x (and for the products their second operand w), dy, y, dx, and
 * the products' second gradient dw. */
typedef struct {
    tensor_t *x, *w, *dy, *y, *dx, *dw;
} op_tensors;

/* one forward and one backward call of op; FX_OK or the failing call's status */
static int run_op(int op, const op_tensors *t, const float *gamma, const float *beta, float *dg,
                  float *db, double tm[2])
{
    int rc = FX_OK;
    const double t0 = bench_clock_s(CLOCK_MONOTONIC);
    switch (op) {
    case OP_LAYERNORM: rc = tensor_layernorm(t->y, t->x, gamma, beta, 1e-5, NULL, NULL); break;
    case OP_GELU: rc = tensor_unary(t->y, t->x, "gelu"); break;
    case OP_SOFTMAX: rc = tensor_softmax(t->y, t->x, -1); break;
    case OP_QK: rc = tensor_bmm(t->y, t->x, t->w, 0, 1); break;
    case OP_ATTN_SM: rc = tensor_attention_softmax(t->y, t->x, SCORE_SCALE, 1); break;
    case OP_SCALE: rc = tensor_scale(t->y, t->x, SCORE_SCALE); break;
    default: rc = tensor_bmm(t->y, t->x, t->w, 0, 0); break;
    }
    const double t1 = bench_clock_s(CLOCK_MONOTONIC);
    if (!rc) switch (op) {
        case OP_LAYERNORM:
            rc = tensor_layernorm_backward(t->dx, dg, db, t->dy, t->x, gamma, 1e-5);
            break;
        case OP_GELU: rc = tensor_unary_backward(t->dx, t->dy, t->x, "gelu"); break;
        case OP_SOFTMAX: rc = tensor_softmax_backward(t->dx, t->dy, t->y, -1); break;
        case OP_ATTN_SM:
            rc = tensor_attention_softmax_backward(t->dx, t->dy, t->y, SCORE_SCALE);
            break;
        case OP_QK: rc = tensor_bmm_backward(t->dx, t->dw, t->dy, t->x, t->w, 0, 1); break;
        case OP_SCALE: rc = tensor_scale(t->dx, t->dy, SCORE_SCALE); break;
        default: rc = tensor_bmm_backward(t->dx, t->dw, t->dy, t->x, t->w, 0, 0); break;
        }
    tm[0] = t1 - t0;
    tm[1] = bench_clock_s(CLOCK_MONOTONIC) - t1;
    return rc;
}

/* the best forward and backward times (seconds) of op in format f; 0, or 1 with a message */
static int time_op(int op, fmt_t f, int reps, unsigned *seed, double best[2])
{
    const int64_t *s = OP_SHAPES[op], D = s[3];
    const int prod = op == OP_QK || op == OP_PV;
    /* the scores' shape: qk's output and gradient, pv's and the softmaxes' input */
    const int64_t *ys = op == OP_QK ? OP_SHAPES[OP_ATTN_SM] : (op == OP_PV ? HEAD_SHAPE : s);
    op_tensors t = {bench_tensor4(f, s, 1.0f, op == OP_PV, 1, seed),
                    prod ? bench_tensor4(f, HEAD_SHAPE, 1.0f, 0, 1, seed) : NULL,
                    bench_tensor4(f, ys, 0.01f, 0, 1, seed), tensor_new(f, 4, ys),
                    tensor_new(f, 4, s), prod ? tensor_new(f, 4, HEAD_SHAPE) : NULL};
    float *buf = malloc((size_t)(4 * D) * sizeof(float));
    int rc = !t.x || !t.dy || !t.y || !t.dx || !buf || (prod && (!t.w || !t.dw));
    if (rc) fprintf(stderr, "bench_tfm: out of memory\n");
    for (int64_t k = 0; !rc && k < D; k++) {
        buf[k] = 1.0f + 0.001f * (float)k; /* gamma */
        buf[D + k] = 0.01f;                /* beta */
    }
    best[0] = best[1] = 1e30;
    for (int r = 0; r < reps && !rc; r++) {
        double tm[2];
        rc = run_op(op, &t, buf, buf + D, buf + 2 * D, buf + 3 * D, tm);
        if (rc) fprintf(stderr, "bench_tfm: %s: %s\n", OP_NAMES[op], flexpoint_last_error());
        if (tm[0] < best[0]) best[0] = tm[0];
        if (tm[1] < best[1]) best[1] = tm[1];
    }
    tensor_free(t.x), tensor_free(t.w), tensor_free(t.dy), tensor_free(t.y);
    tensor_free(t.dx), tensor_free(t.dw);
    free(buf);
    return rc != 0;
}

/* BENCH_OPS: the ops to time (all when unset); -1 with a message for an unknown name */
static int ops_wanted(int want[OP_COUNT])
{
    const char *e = getenv("BENCH_OPS");
    for (int o = 0; o < OP_COUNT; o++) want[o] = !e || !*e;
    if (!e || !*e) return 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", e);
    for (char *tok = strtok(buf, " ,"); tok; tok = strtok(NULL, " ,")) {
        int found = 0;
        for (int o = 0; o < OP_COUNT; o++)
            if (strcmp(tok, OP_NAMES[o]) == 0) want[o] = found = 1;
        if (!found) {
            fprintf(stderr,
                    "bench_tfm: BENCH_OPS names '%s' (known: layernorm gelu softmax qk attn_sm "
                    "pv scale)\n",
                    tok);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 15;
    int wanted[FMT_COUNT], ops[OP_COUNT];
    const int any = bench_formats_wanted(argc > 3 ? argv[3] : NULL, wanted, "bench_tfm");
    if (any < 0 || ops_wanted(ops) < 0) return 2;
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_tfm [threads >= 1] [repetitions >= 1] [formats]\n");
        return 2;
    }
    flexpoint_set_num_threads(threads);
    static const fmt_t fmts[5] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5, FMT_DFP16};
    printf("bench_tfm: %d thread(s), best of %d; wall ms, and fp32's time over the format's\n",
           threads, reps);
    printf("%-22s %-9s %10s %10s %12s %12s\n", "op [shape]", "format", "forward", "backward",
           "fp32/fwd", "fp32/bwd");
    unsigned seed = 12345;
    for (int op = 0; op < OP_COUNT; op++) {
        if (!ops[op]) continue;
        const int64_t *s = OP_SHAPES[op];
        char name[64];
        snprintf(name, sizeof name, "%s [%lld, %lld]", OP_NAMES[op],
                 (long long)(s[0] * s[1] * s[2]), (long long)s[3]);
        double ref[2] = {0, 0};
        for (int fi = 0; fi < 5; fi++) {
            const fmt_t f = fmts[fi];
            if (any && !wanted[f] && f != FMT_FP32) continue; /* fp32 runs for the ratios */
            double best[2];
            if (time_op(op, f, reps, &seed, best)) return 1;
            if (f == FMT_FP32) {
                ref[0] = best[0], ref[1] = best[1];
                if (any && !wanted[f]) continue;
            }
            printf("%-22s %-9s %10.3f %10.3f %11.2fx %11.2fx\n", name, fmt_name(f),
                   1e3 * best[0], 1e3 * best[1], ref[0] / best[0], ref[1] / best[1]);
        }
    }
    return 0;
}
