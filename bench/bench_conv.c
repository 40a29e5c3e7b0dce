/* Convolution benchmark: the Fashion-MNIST CNN's two layers (5x5, padding 2, batch 128), forward
 * and both gradients, in every format.
 *   ./build/release/bench/bench_conv [threads] [repetitions]
 * Prints, per layer, format and pass, the best wall time and the best process CPU time of the
 * repetitions. This VM's wall times move by tens of percent between identical runs (other
 * guests); with one thread the CPU time is the steadier measure. Inputs are ReLU-like
 * (non-negative) activations, small weights and small gradients, as in training:
 * standard-normal values scaled (BENCH_DATA=normal, the default), or uniform ones
 * (BENCH_DATA=uniform), on which the integer formats take their any-data kernel.
 * BENCH_LAYER="C,HW,O,K[,S]" times one layer of your own instead: C input channels of HW x HW,
 * O output channels, a K x K kernel at stride S (default 1), padding K / 2, batch 128; for
 * example BENCH_LAYER=64,8,64,3 is ResNet-20's 64-channel 3 x 3 convolution and
 * BENCH_LAYER=32,16,64,3,2 its stride-2 one into the last stage (BENCH_LAYER=32,16,64,1,2 the
 * 1 x 1 projection beside it), and `perf record` of such a
 * run sees one shape's kernels alone.
 * BENCH_LAYER=r20 times ResNet-20's 3 x 3 convolutions (the stem, the three stages' layers and
 * the two stride-2 layers between them) at Fashion-MNIST padded to 32 x 32.
 * Under each format's times, "share of limit": each pass's multiply-adds (2 N O C K^2 OH OW
 * operations) over its best CPU time, as a share of the instruction limit per thread the library
 * measures (flexpoint_instruction_limits), taken as bench_gemm takes it: fp32 and fp16 against
 * the FMA's, bf16 against vdpbf16ps's where the CPU has it (else the FMA's), the integer formats
 * against the int16 pair products'. In CPU time, so that it reads the same at any thread count
 * (a rate per busy core); above 100 % where a level runs the pass on AMX tiles.
 * BENCH_OUTPUTS=training marks y and dx as the trainer marks its activations and activation
 * gradients (fx_tensor_set_disposable: a failed write need not leave their old values), so
 * the integer formats round straight into them as in training; the default (library) keeps a
 * caller's tensor intact on failure, which costs those formats a copy of each output.
 * BENCH_PASSES="forward,input,weight" runs only the passes named (a profile of one pass).
 * BENCH_F32_DGRAD=off sends the float input gradients back to the GEMM and col2im (the route
 * the direct kernel of src/fp32/conv_f32_direct.h replaces, with the same bits except bf16's
 * strided ones on the AMX route), and BENCH_F32_WGRAD=off the float weight gradients back to
 * the panels and the GEMM (the same bits), so that alternated runs compare the two.
 * BENCH_I16_EPILOGUE=off keeps the integer register tiles' sums in int64 and rounds them after
 * (fx_i16_fwd_direct_round_set_enabled: forward passes and stride-2 input gradients alike, the
 * same bits), for the same comparison of their rounding epilogues. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/internal.h" /* fx_tensor_set_disposable */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"
#include "flex/conv_i16.h" /* fx_i16_fwd_direct_round_set_enabled */
#include "fp32/conv_f32_direct.h"

static int g_normal = 1; /* BENCH_DATA */

/* BENCH_OUTPUTS: 1 for "training", 0 for "library" or unset, -1 (with a message) otherwise */
static int outputs_as_training(void)
{
    const char *e = getenv("BENCH_OUTPUTS");
    if (!e || !*e || strcmp(e, "library") == 0) return 0;
    if (strcmp(e, "training") == 0) return 1;
    fprintf(stderr, "bench_conv: BENCH_OUTPUTS=%s: expected training or library\n", e);
    return -1;
}

/* BENCH_PASSES: which of the three passes run ("forward", "input", "weight", comma-separated;
 * default all), so that a profile can take one alone; 0, or -1 (with a message) when malformed */
static int passes_from_env(int run[3])
{
    static const char *const names[3] = {"forward", "input", "weight"};
    const char *e = getenv("BENCH_PASSES");
    for (int p = 0; p < 3; p++) run[p] = !e || !*e;
    if (!e || !*e) return 0;
    for (const char *s = e; *s;) {
        const char *end = strchr(s, ',');
        const size_t len = end ? (size_t)(end - s) : strlen(s);
        int found = 0;
        for (int p = 0; p < 3; p++)
            if (len == strlen(names[p]) && strncmp(s, names[p], len) == 0) run[p] = found = 1;
        if (!found) {
            fprintf(stderr, "bench_conv: BENCH_PASSES='%s': want forward, input and weight, "
                            "comma-separated\n", e);
            return -1;
        }
        s += len + (end != NULL);
    }
    return 0;
}

/* a route switch: 1 for on or unset, 0 for off, -1 (with a message) otherwise */
static int route_from_env(const char *name)
{
    const char *e = getenv(name);
    if (!e || !*e || strcmp(e, "on") == 0) return 1;
    if (strcmp(e, "off") == 0) return 0;
    fprintf(stderr, "bench_conv: %s=%s: expected on or off\n", name, e);
    return -1;
}

typedef struct layer {
    const char *name;
    int64_t C, HW, O, K, S;
} layer;

/* ResNet-20's 3 x 3 convolutions on 32 x 32 inputs (--pad 2), each shape once */
static const layer r20_layers[] = {{"r20 stem 3->16 32x32", 3, 32, 16, 3, 1},
                                   {"r20 16->16 32x32", 16, 32, 16, 3, 1},
                                   {"r20 16->32 32x32 s2", 16, 32, 32, 3, 2},
                                   {"r20 32->32 16x16", 32, 16, 32, 3, 1},
                                   {"r20 32->64 16x16 s2", 32, 16, 64, 3, 2},
                                   {"r20 64->64 8x8", 64, 8, 64, 3, 1}};
#define R20_LAYERS ((int)(sizeof r20_layers / sizeof r20_layers[0]))

/* BENCH_LAYER="C,HW,O,K[,S]" into *L (name: at least 96 bytes); 0 when unset, 2 for "r20"
 * (r20_layers), -1 (with a message) when malformed */
static int layer_from_env(layer *L, char *name)
{
    const char *e = getenv("BENCH_LAYER");
    if (!e || !*e) return 0;
    if (!strcmp(e, "r20")) return 2;
    long long c, hw, o, k, st = 1;
    char end;
    const int n = sscanf(e, "%lld,%lld,%lld,%lld%c", &c, &hw, &o, &k, &end);
    const int n5 = n == 5 && end == ',' ? sscanf(e, "%lld,%lld,%lld,%lld,%lld%c", &c, &hw, &o,
                                                 &k, &st, &end)
                                        : 0;
    if ((n != 4 && n5 != 5) || c < 1 || hw < 1 || o < 1 || k < 1 || st < 1 || c > 4096 ||
        hw > 4096 || o > 4096 || k > hw || st > hw) {
        fprintf(stderr,
                "bench_conv: BENCH_LAYER='%s': want r20, C,HW,O,K or C,HW,O,K,S (positive, "
                "K <= HW, S <= HW)\n", e);
        return -1;
    }
    if (st == 1)
        snprintf(name, 96, "%lld->%lld %lldx%lld k%lld", c, o, hw, hw, k);
    else
        snprintf(name, 96, "%lld->%lld %lldx%lld k%lld s%lld", c, o, hw, hw, k, st);
    *L = (layer){name, c, hw, o, k, st};
    return 1;
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 1, reps = argc > 2 ? atoi(argv[2]) : 7;
    /* optional third argument: the formats to run, comma-separated (default: all) */
    int wanted[FMT_COUNT];
    const int any = bench_formats_wanted(argc > 3 ? argv[3] : NULL, wanted, "bench_conv");
    if (any < 0) return 2;
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_conv [threads >= 1] [repetitions >= 1] [formats]\n");
        return 2;
    }
    g_normal = bench_data_normal();
    if (g_normal < 0) return 2;
    const int training_outputs = outputs_as_training();
    if (training_outputs < 0) return 2;
    int run[3];
    if (passes_from_env(run) < 0) return 2;
    flexpoint_set_num_threads(threads);
    const int dgrad_on = route_from_env("BENCH_F32_DGRAD"), wgrad_on = route_from_env("BENCH_F32_WGRAD");
    if (dgrad_on < 0 || wgrad_on < 0) return 2;
    fx_f32_dgrad_direct_set_enabled(dgrad_on);
    fx_f32_wgrad_direct_set_enabled(wgrad_on);
    const int epilogue_on = route_from_env("BENCH_I16_EPILOGUE");
    if (epilogue_on < 0) return 2;
    fx_i16_fwd_direct_round_set_enabled(epilogue_on);
    static const layer cnn_layers[2] = {{"conv1 1->32 28x28", 1, 28, 32, 5, 1},
                                        {"conv2 32->64 14x14", 32, 14, 64, 5, 1}};
    layer own_layer;
    char own_name[96];
    const int own = layer_from_env(&own_layer, own_name);
    if (own < 0) return 2;
    const layer *layers = own == 1 ? &own_layer : own == 2 ? r20_layers : cnn_layers;
    const int nlayers = own == 1 ? 1 : own == 2 ? R20_LAYERS : 2;
    static const fmt_t fmts[5] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5, FMT_DFP16};
    printf("bench_conv: batch 128, padding K / 2, %d thread(s), best of %d, %s "
           "operands, %s outputs; wall ms (CPU ms)\n", threads, reps,
           g_normal ? "normal" : "uniform", training_outputs ? "training" : "library");
    double fma_limit, i16_limit, bf16_limit;
    bench_instruction_limits(&fma_limit, &i16_limit, &bf16_limit);
    printf("%-22s %-9s %18s %18s %18s %18s\n", "layer", "format", "forward", "grad input",
           "grad weight", "total");
    unsigned seed = 12345;
    for (int li = 0; li < nlayers; li++)
        for (int fi = 0; fi < 5; fi++) {
            const layer *L = &layers[li];
            const fmt_t f = fmts[fi];
            if (any && !wanted[f]) continue;
            const int64_t xs[4] = {128, L->C, L->HW, L->HW}, ws[4] = {L->O, L->C, L->K, L->K};
            const int pad = (int)(L->K / 2), st = (int)L->S;
            const int64_t OHW = (L->HW + 2 * pad - L->K) / st + 1;
            const int64_t ys[4] = {128, L->O, OHW, OHW};
            tensor_t *x = bench_tensor4(f, xs, 1.0f, 1, g_normal, &seed);
            tensor_t *w = bench_tensor4(f, ws, 0.1f, 0, g_normal, &seed);
            tensor_t *dy = bench_tensor4(f, ys, 0.01f, 0, g_normal, &seed);
            tensor_t *y = tensor_new(f, 4, ys), *dx = tensor_new(f, 4, xs),
                     *dw = tensor_new(f, 4, ws);
            if (!x || !w || !dy || !y || !dx || !dw) {
                fprintf(stderr, "bench_conv: out of memory\n");
                return 1;
            }
            if (training_outputs) {
                fx_tensor_set_disposable(y);
                fx_tensor_set_disposable(dx);
            }
            double wall[3] = {1e30, 1e30, 1e30}, cpu[3] = {1e30, 1e30, 1e30};
            for (int r = 0; r < reps; r++)
                for (int pass = 0; pass < 3; pass++) {
                    if (!run[pass]) continue;
                    const bench_span span = bench_span_begin(CLOCK_PROCESS_CPUTIME_ID);
                    int rc = pass == 0 ? tensor_conv2d(y, x, w, st, st, pad, pad, 1, 1)
                             : pass == 1
                                 ? tensor_conv2d_backward_input(dx, dy, w, st, st, pad, pad, 1, 1)
                                 : tensor_conv2d_backward_weight(dw, x, dy, st, st, pad, pad, 1,
                                                                 1);
                    double span_wall, span_cpu;
                    bench_span_end(&span, &span_wall, &span_cpu);
                    if (rc) {
                        fprintf(stderr, "bench_conv: %s\n", flexpoint_last_error());
                        return 1;
                    }
                    if (span_wall < wall[pass]) wall[pass] = span_wall;
                    if (span_cpu < cpu[pass]) cpu[pass] = span_cpu;
                }
            printf("%-22s %-9s", L->name, fmt_name(f));
            double wsum = 0.0, csum = 0.0;
            for (int pass = 0; pass < 3; pass++) {
                if (!run[pass]) {
                    printf("  %18s", "-");
                    continue;
                }
                printf("  %7.2f (%7.2f)", 1e3 * wall[pass], 1e3 * cpu[pass]);
                wsum += wall[pass];
                csum += cpu[pass];
            }
            printf("  %7.2f (%7.2f)\n", 1e3 * wsum, 1e3 * csum);
            /* every pass makes the same multiply-adds: N O C K^2 OH OW (in double: the product
             * of the largest settings passes int64) */
            const double ops = 2.0 * 128 * (double)L->O * (double)L->C * (double)(L->K * L->K) *
                               (double)(OHW * OHW);
            const double limit = f == FMT_FLEX16_5 || f == FMT_DFP16 ? i16_limit
                                 : f == FMT_BF16                      ? bf16_limit
                                                                      : fma_limit;
            printf("%-22s %-9s", "", "  of limit");
            for (int pass = 0; pass < 3; pass++) {
                if (run[pass] && limit > 0)
                    printf("  %17.0f%%", 100.0 * ops / cpu[pass] * 1e-9 / limit);
                else
                    printf("  %18s", "-");
            }
            if (limit > 0 && csum > 0) {
                int npass = 0;
                for (int pass = 0; pass < 3; pass++) npass += run[pass];
                printf("  %17.0f%%\n", 100.0 * npass * ops / csum * 1e-9 / limit);
            } else {
                printf("  %18s\n", "-");
            }
            tensor_free(x), tensor_free(w), tensor_free(dy), tensor_free(y), tensor_free(dx),
                tensor_free(dw);
        }
    return 0;
}
