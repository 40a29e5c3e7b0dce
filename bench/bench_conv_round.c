/* The AMX integer forward convolution's two epilogues against each other: its int64 sums
 * stored and then rounded by quant_i64_t, or rounded in the kernel while they are in registers
 * (fx_i16_fwd_amx_round, src/flex/conv_i16_amx.c). The same bits either way; this measures
 * what the second saves.
 *   ./build/release/bench/bench_conv_round [repetitions] [threads]     (default: 60 2)
 *
 * Shapes: the trainer's batch of 128 and the forward passes that take the AMX kernel (rows of
 * at least 12 output pixels, 16 channels each way and more): ResNet-20's 16- and 32-channel
 * 3 x 3 layers, its 16 -> 32 stride-2 layer, and the Fashion-MNIST CNN's conv2 (5 x 5 over 32
 * channels: 800 products a sum, past the int32 shortcut's 504). ReLU-like inputs and small
 * weights (standard-normal values scaled, bench_value), FLEX16_5 and DFP16 outputs, and DFP16
 * outputs whose exponent hovers ("dfp16 hov": the input alternates between two scales 2.5x
 * apart, so every write moves and is rounded at two exponents, conv2d.c's second rounding).
 *
 * The same for the stride-2 input gradients ("dx" rows), which the switch also governs: by
 * phases with int64 sums gathered and rounded, or rounded in the kernel's epilogue
 * (fx_i16_dgrad_amx_s2_round); their "rounded" column counts chunks of that route.
 *
 * Each repetition calls tensor_conv2d once with the rounding kernel off and once on, one after
 * the other, into outputs of their own whose exponent guesses are steady (or hover) after the
 * untimed warm-up calls; cells are the median wall time of the repetitions, and the ratio
 * on / off. The count of chunks the kernel rounded (of those, at two exponents) shows that the
 * route ran. Skips where the CPU has no AMX-INT8 this process may use. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "flex/conv_i16.h"
#include "nn/conv_dgrad_phases.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "bench_util.h"

typedef struct {
    const char *name;
    int64_t C, H, O, K, stride, pad;
    int dgrad; /* 1: the input gradient (tensor_conv2d_backward_input) instead of the forward */
} shape;

static const shape SHAPES[] = {
    {"resnet20 16->16 32x32 3x3", 16, 32, 16, 3, 1, 1, 0},
    {"resnet20 32->32 16x16 3x3", 32, 16, 32, 3, 1, 1, 0},
    {"resnet20 16->32 s2 3x3", 16, 32, 32, 3, 2, 1, 0},
    {"cnn conv2 32->64 14x14 5x5", 32, 14, 64, 5, 1, 2, 0},
    {"dx resnet20 16->32 s2 3x3", 16, 32, 32, 3, 2, 1, 1},
    {"dx resnet20 16->32 s2 1x1", 16, 32, 32, 1, 2, 0, 1},
    {"dx resnet20 32->64 s2 3x3", 32, 16, 64, 3, 2, 1, 1},
    {"dx resnet20 32->64 s2 1x1", 32, 16, 64, 1, 2, 0, 1},
};

/* One timed call: the forward pass of x into y, or the input gradient of dy (x's role) into
 * dx (y's) */
static int run_call(const shape *s, tensor_t *out, const tensor_t *in, const tensor_t *w)
{
    const int st = (int)s->stride, pd = (int)s->pad;
    return s->dgrad ? tensor_conv2d_backward_input(out, in, w, st, st, pd, pd, 1, 1)
                    : tensor_conv2d(out, in, w, st, st, pd, pd, 1, 1);
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 60;
    const int threads = argc > 2 ? atoi(argv[2]) : 2;
    const fx_backend *be = fx_backend_active();
    if (reps < 1 || threads < 1) {
        fprintf(stderr, "usage: bench_conv_round [repetitions >= 1] [threads >= 1]\n");
        return 2;
    }
    if (!be->conv.i16_fwd_amx_round) {
        printf("bench_conv_round: no AMX-INT8 on this CPU (backend %s): nothing to compare\n",
               flexpoint_backend());
        return 0;
    }
    flexpoint_set_num_threads(threads);
    printf("backend %s, %d threads, batch 128, %d repetitions (median ms a call)\n",
           flexpoint_backend(), threads, reps);
    printf("%-28s %-9s %10s %10s %7s %8s %8s\n", "shape", "format", "int64", "in kernel",
           "ratio", "rounded", "twice");
    static const fmt_t fmts[3] = {FMT_FLEX16_5, FMT_DFP16, FMT_DFP16};
    double *t[2] = {malloc(sizeof(double) * (size_t)reps), malloc(sizeof(double) * (size_t)reps)};
    if (!t[0] || !t[1]) return 2;
    for (size_t si = 0; si < sizeof SHAPES / sizeof *SHAPES; si++)
        for (int fi = 0; fi < 3; fi++) {
            const shape *s = &SHAPES[si];
            const fmt_t f = fmts[fi];
            const int hover = fi == 2;
            const int64_t OH = (s->H + 2 * s->pad - s->K) / s->stride + 1;
            const int64_t xs[4] = {128, s->C, s->H, s->H}, ws[4] = {s->O, s->C, s->K, s->K};
            const int64_t ys[4] = {128, s->O, OH, OH};
            /* the input gradient's input is dy (y's shape, small values), its output dx */
            const int64_t *ins = s->dgrad ? ys : xs, *outs = s->dgrad ? xs : ys;
            const float scale = s->dgrad ? 0.01f : 1.0f;
            const int relu = !s->dgrad;
            unsigned seed = 7 + (unsigned)si;
            unsigned seed2 = seed;
            tensor_t *x = bench_tensor4(f, ins, scale, relu, 1, &seed);
            /* the second input: the same values 2.5x larger (hovering), else x again */
            tensor_t *x2 = hover ? bench_tensor4(f, ins, 2.5f * scale, relu, 1, &seed2) : x;
            tensor_t *w = bench_tensor4(f, ws, 0.1f, 0, 1, &seed);
            tensor_t *y[2] = {tensor_new(f, 4, outs), tensor_new(f, 4, outs)};
            if (!x || !x2 || !w || !y[0] || !y[1]) {
                fprintf(stderr, "bench_conv_round: %s\n", flexpoint_last_error());
                return 2;
            }
            for (int warm = 0; warm < 4; warm++)
                for (int m = 0; m < 2; m++) {
                    fx_i16_fwd_amx_round_set_enabled(m);
                    run_call(s, y[m], warm % 2 ? x2 : x, w);
                }
            const long long before = fx_i16_fwd_amx_round_calls() + fx_conv_dgrad_phases_rounded();
            const long long before2 = fx_i16_fwd_amx_round2_calls() + fx_conv_dgrad_phases_rounded2();
            for (int r = 0; r < reps; r++)
                for (int m = 0; m < 2; m++) {
                    fx_i16_fwd_amx_round_set_enabled(m);
                    const double t0 = bench_clock_s(CLOCK_MONOTONIC);
                    const int rc = run_call(s, y[m], r % 2 ? x2 : x, w);
                    t[m][r] = bench_clock_s(CLOCK_MONOTONIC) - t0;
                    if (rc) {
                        fprintf(stderr, "bench_conv_round: %s\n", flexpoint_last_error());
                        return 2;
                    }
                }
            fx_i16_fwd_amx_round_set_enabled(1);
            const double off = bench_median(t[0], reps), on = bench_median(t[1], reps);
            printf("%-28s %-9s %10.3f %10.3f %7.2f %8lld %8lld\n", s->name,
                   hover ? "dfp16 hov" : fmt_name(f), 1e3 * off, 1e3 * on, on / off,
                   fx_i16_fwd_amx_round_calls() + fx_conv_dgrad_phases_rounded() - before,
                   fx_i16_fwd_amx_round2_calls() + fx_conv_dgrad_phases_rounded2() - before2);
            if (x2 != x) tensor_free(x2);
            tensor_free(x);
            tensor_free(w);
            tensor_free(y[0]);
            tensor_free(y[1]);
        }
    free(t[0]);
    free(t[1]);
    return 0;
}
