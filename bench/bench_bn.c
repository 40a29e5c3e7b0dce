/* Batch norm in training mode, forward and backward, per format, at ResNet-20's three
 * activation shapes (batch 128: 16 channels of 32 x 32, 32 of 16 x 16, 64 of 8 x 8).
 *   ./build/release/bench/bench_bn [threads] [repetitions] [formats]
 * Prints the best wall time (ms) of the repetitions per pass, and fp32's time over each
 * format's in the same process. Inputs are standard-normal activations and small gradients,
 * gamma 1 and beta 0; the time depends on the values only through the exponents the
 * shared-exponent writes pick. BENCH_LAYER="C,HW" times one shape of your own instead: C
 * channels of HW x HW, batch 128. A batch norm followed by a ReLU (the trainer fuses the two)
 * is not timed here; `flexpoint-train --profile` shows those layers in a training step. */
#include "flexpoint.h"
#include "flexpoint_nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

typedef struct bn_shape {
    int64_t C, HW;
} bn_shape;

/* BENCH_LAYER="C,HW" into *s: 0 when unset, 1 when read, -1 (with a message) when malformed */
static int shape_from_env(bn_shape *s)
{
    const char *e = getenv("BENCH_LAYER");
    if (!e || !*e) return 0;
    long long c, hw;
    char end;
    if (sscanf(e, "%lld,%lld%c", &c, &hw, &end) != 2 || c < 1 || hw < 1 || c > 4096 ||
        hw > 4096) {
        fprintf(stderr, "bench_bn: BENCH_LAYER='%s': want C,HW (positive, at most 4096)\n", e);
        return -1;
    }
    *s = (bn_shape){c, hw};
    return 1;
}

/* the best forward and backward times (seconds) of format f at shape s; 0, or 1 with a message */
static int time_format(fmt_t f, const bn_shape *s, int reps, unsigned *seed, double best[2])
{
    const int64_t xs[4] = {128, s->C, s->HW, s->HW}, cs[1] = {s->C};
    tensor_t *x = bench_tensor4(f, xs, 1.0f, 0, 1, seed);
    tensor_t *dy = bench_tensor4(f, xs, 0.01f, 0, 1, seed);
    tensor_t *y = tensor_new(f, 4, xs), *dx = tensor_new(f, 4, xs);
    tensor_t *g = tensor_new(FMT_FP32, 1, cs), *b = tensor_new(FMT_FP32, 1, cs);
    tensor_t *dg = tensor_new(FMT_FP32, 1, cs), *db = tensor_new(FMT_FP32, 1, cs);
    float *buf = calloc((size_t)(6 * s->C), sizeof(float));
    int rc = !x || !dy || !y || !dx || !g || !b || !dg || !db || !buf;
    if (rc) fprintf(stderr, "bench_bn: out of memory\n");
    float *ones = buf, *zeros = buf + s->C, *rmean = buf + 2 * s->C, *rvar = buf + 3 * s->C;
    float *smean = buf + 4 * s->C, *sinv = buf + 5 * s->C;
    if (!rc) {
        for (int64_t c = 0; c < s->C; c++) ones[c] = 1.0f, rvar[c] = 1.0f;
        rc = tensor_from_f32(g, ones) || tensor_from_f32(b, zeros);
    }
    best[0] = best[1] = 1e30;
    for (int r = 0; r < reps && !rc; r++) {
        const double t0 = bench_clock_s(CLOCK_MONOTONIC);
        rc = tensor_batchnorm(y, x, g, b, rmean, rvar, smean, sinv, 0.1, 1e-5, 1);
        const double t1 = bench_clock_s(CLOCK_MONOTONIC);
        if (!rc) rc = tensor_batchnorm_backward(dx, dg, db, dy, x, g, smean, sinv);
        const double t2 = bench_clock_s(CLOCK_MONOTONIC);
        if (rc) fprintf(stderr, "bench_bn: %s\n", flexpoint_last_error());
        if (t1 - t0 < best[0]) best[0] = t1 - t0;
        if (t2 - t1 < best[1]) best[1] = t2 - t1;
    }
    tensor_free(x), tensor_free(dy), tensor_free(y), tensor_free(dx);
    tensor_free(g), tensor_free(b), tensor_free(dg), tensor_free(db);
    free(buf);
    return rc != 0;
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 1, reps = argc > 2 ? atoi(argv[2]) : 15;
    int wanted[FMT_COUNT];
    const int any = bench_formats_wanted(argc > 3 ? argv[3] : NULL, wanted, "bench_bn");
    if (any < 0) return 2;
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_bn [threads >= 1] [repetitions >= 1] [formats]\n");
        return 2;
    }
    flexpoint_set_num_threads(threads);
    bn_shape shapes[3] = {{16, 32}, {32, 16}, {64, 8}};
    const int own = shape_from_env(&shapes[0]);
    if (own < 0) return 2;
    const int nshapes = own ? 1 : 3;
    static const fmt_t fmts[5] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5, FMT_DFP16};
    printf("bench_bn: batch 128, %d thread(s), best of %d; wall ms, and fp32's time over the "
           "format's\n", threads, reps);
    printf("%-16s %-9s %10s %10s %12s %12s\n", "shape", "format", "forward", "backward",
           "fp32/fwd", "fp32/bwd");
    unsigned seed = 12345;
    for (int si = 0; si < nshapes; si++) {
        char name[64];
        snprintf(name, sizeof name, "%lld x %lldx%lld", (long long)shapes[si].C,
                 (long long)shapes[si].HW, (long long)shapes[si].HW);
        double ref[2] = {0, 0};
        for (int fi = 0; fi < 5; fi++) {
            const fmt_t f = fmts[fi];
            /* fp32 runs whenever a ratio is wanted */
            if (any && !wanted[f] && f != FMT_FP32) continue;
            double best[2];
            if (time_format(f, &shapes[si], reps, &seed, best)) return 1;
            if (f == FMT_FP32) {
                ref[0] = best[0], ref[1] = best[1];
                if (any && !wanted[f]) continue;
            }
            printf("%-16s %-9s %10.3f %10.3f %11.2fx %11.2fx\n", name, fmt_name(f),
                   1e3 * best[0], 1e3 * best[1], ref[0] / best[0], ref[1] / best[1]);
        }
    }
    return 0;
}
