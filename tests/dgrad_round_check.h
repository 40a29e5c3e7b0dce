/* The stride-2 input gradient rounded in a kernel's epilogue against the int64 phases, at the
 * op (tests/test_conv_i16_amx.c for AMX, tests/test_conv_i16_round.c for the AVX512_VNNI
 * register tiles). */
#ifndef DGRAD_ROUND_CHECK_H
#define DGRAD_ROUND_CHECK_H

#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "nn/conv_dgrad_phases.h" /* fx_conv_dgrad_phases_rounded */
#include "nn/nn_ops.h"            /* fx_conv_stage_redone */
#include "testutil.h"

#include <stdlib.h>

static tensor_t *test_new4(fmt_t f, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const int64_t sh[4] = {a, b, c, d};
    return tensor_new(f, 4, sh);
}

/* The stride-2 input gradient rounded in a kernel's epilogue (fx_i16_dgrad_amx_s2_round on AMX,
 * fx_i16_dgrad_s2_round on the AVX512_VNNI register tiles; set_enabled: the switch of that
 * epilogue), taken by phases once dx's guesses are steady: a run of writes into one dx (steady, a
 * jump up and back, then a scale hovering between two exponents, where DFP16 rounds at both)
 * against the same writes into a twin dx with the epilogue switched off (the int64 phases): the
 * same mantissas, exponent and write statistics after every write; the epilogue taken where the
 * shape allows (both strides 2, even H and W) and not otherwise; for DFP16 the hovering writes
 * rounded there at two exponents, a rounding that saturates left out (a scale moving up), and run
 * again no more often than without the epilogue (only where the write picks neither). */
static void check_dgrad_round_ops(void (*set_enabled)(int), fmt_t f, int64_t N, int64_t C,
                                  int64_t H, int64_t W, int64_t O, int64_t K, int64_t pad,
                                  int expect, uint64_t seed)
{
    const int64_t OH = (H + 2 * pad - K) / 2 + 1, OW = (W + 2 * pad - K) / 2 + 1;
    const int64_t nx = N * C * H * W, nw = O * C * K * K, ny = N * O * OH * OW;
    tensor_t *w = test_new4(f, O, C, K, K), *dy = test_new4(f, N, O, OH, OW);
    tensor_t *dx[2] = {test_new4(f, N, C, H, W), test_new4(f, N, C, H, W)};
    test_rng r;
    test_rng_seed(&r, seed);
    float *buf = malloc(4 * (size_t)(ny > nw ? ny : nw));
    for (int64_t i = 0; i < nw; i++) buf[i] = (float)(0.1 * test_rng_normal(&r));
    CHECK_STATUS(tensor_from_f32(w, buf), FX_OK);
    int16_t *a = malloc(2 * (size_t)nx), *b = malloc(2 * (size_t)nx);
    static const double scale[12] = {1, 1, 1, 1, 1, 1, 64, 1, 2.5, 1, 2.5, 1};
    const int64_t before = fx_conv_dgrad_phases_rounded();
    const int64_t before2 = fx_conv_dgrad_phases_rounded2();
    const int64_t partial0 = fx_conv_dgrad_phases_rounded_partial();
    int64_t hover_redone[2] = {0, 0};
    for (int call = 0; call < 12; call++) {
        for (int64_t i = 0; i < ny; i++) buf[i] = (float)(scale[call] * test_rng_normal(&r));
        CHECK_STATUS(tensor_from_f32(dy, buf), FX_OK);
        for (int k = 0; k < 2; k++) {
            set_enabled(k == 0);
            const int64_t redone0 = fx_conv_stage_redone();
            CHECK_STATUS(tensor_conv2d_backward_input(dx[k], dy, w, 2, 2, (int)pad, (int)pad, 1,
                                                      1),
                         FX_OK);
            if (call >= 8) hover_redone[k] += fx_conv_stage_redone() - redone0;
        }
        set_enabled(1);
        CHECK_STATUS(tensor_get_raw(dx[0], a), FX_OK);
        CHECK_STATUS(tensor_get_raw(dx[1], b), FX_OK);
        long bad = 0;
        for (int64_t i = 0; i < nx; i++) bad += a[i] != b[i];
        CHECK(bad == 0 && tensor_exp(dx[0]) == tensor_exp(dx[1]),
              "%s dx C%lld %lldx%lld O%lld k%lld p%lld write %d: %ld values differ from the "
              "int64 phases', exp %d (%d)", fmt_name(f), (long long)C, (long long)H,
              (long long)W, (long long)O, (long long)K, (long long)pad, call, bad,
              tensor_exp(dx[0]), tensor_exp(dx[1]));
        static const char *const stat[4] = {"underflow", "saturated", "true_max", "stored_max"};
        for (int k = 0; k < 4; k++) {
            double sa = -1, sb = -2;
            CHECK_STATUS(tensor_stat(dx[0], stat[k], &sa), FX_OK);
            CHECK_STATUS(tensor_stat(dx[1], stat[k], &sb), FX_OK);
            CHECK(sa == sb, "%s dx C%lld k%lld write %d: %s %g in the epilogue, %g without",
                  fmt_name(f), (long long)C, (long long)K, call, stat[k], sa, sb);
        }
    }
    const int64_t taken = fx_conv_dgrad_phases_rounded() - before;
    if (f == FMT_DFP16 && expect)
        CHECK(fx_conv_dgrad_phases_rounded2() > before2 &&
                  fx_conv_dgrad_phases_rounded_partial() > partial0 &&
                  hover_redone[0] == hover_redone[1],
              "dfp16 dx C%lld k%lld p%lld: rounded at two exponents %lld times (%lld with one "
              "broken), hovering writes run again %lld times (%lld without the epilogue)",
              (long long)C, (long long)K, (long long)pad,
              (long long)(fx_conv_dgrad_phases_rounded2() - before2),
              (long long)(fx_conv_dgrad_phases_rounded_partial() - partial0),
              (long long)hover_redone[0], (long long)hover_redone[1]);
    CHECK((taken > 0) == expect, "%s dx C%lld %lldx%lld O%lld k%lld p%lld: the epilogue %s",
          fmt_name(f), (long long)C, (long long)H, (long long)W, (long long)O, (long long)K,
          (long long)pad, expect ? "never ran" : "ran where it must not");
    tensor_free(w);
    tensor_free(dy);
    tensor_free(dx[0]);
    tensor_free(dx[1]);
    free(buf);
    free(a);
    free(b);
}

/* ResNet-20's stride-2 input gradients (3 x 3 and 1 x 1, 16 -> 32 and 32 -> 64), 5 x 5, 4 x 4
 * and 2 x 2 kernels, padding past the kernel's half, windows of 20 columns (a masked second
 * run), a batch of several chunks a thread, and odd sizes (the int64 phases), for both integer
 * formats; *seed advances by one a call */
static void check_dgrad_round_shapes(void (*set_enabled)(int), uint64_t *seed)
{
    /* N, C, H, W, O (dy's channels), K, pad, whether the epilogue takes it; the last: dy of 24
     * channels, a segment's spare pairs */
    static const int64_t shapes[][8] = {
        {4, 16, 32, 32, 32, 3, 1, 1}, {4, 16, 32, 32, 32, 1, 0, 1}, {3, 32, 16, 16, 64, 3, 1, 1},
        {3, 32, 16, 16, 64, 1, 0, 1}, {2, 16, 12, 12, 16, 5, 2, 1}, {2, 16, 12, 12, 16, 4, 1, 1},
        {2, 16, 10, 10, 16, 2, 0, 1}, {2, 16, 8, 8, 16, 3, 3, 1},   {2, 16, 8, 40, 32, 3, 1, 1},
        {40, 16, 8, 8, 32, 3, 1, 1},  {2, 16, 9, 11, 32, 3, 1, 0},  {2, 16, 12, 12, 24, 3, 1, 1}};
    for (int fi = 0; fi < 2; fi++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const int64_t *c = shapes[i];
            check_dgrad_round_ops(set_enabled, fi ? FMT_DFP16 : FMT_FLEX16_5, c[0], c[1], c[2],
                                  c[3], c[4], c[5], c[6], (int)c[7], (*seed)++);
        }
}

#endif
