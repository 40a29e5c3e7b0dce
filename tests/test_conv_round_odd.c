/* The sums of a DFP16 convolution of long sums kept rounded to odd (src/nn/conv2d.c,
 * fx_backend.conv.i16_round_odd_keep; src/flex/round_odd.c):
 *   - every level's cvt.round_odd_i64 against fx_rshift_jam, the definition, value by value
 *     (random magnitudes at every shift 1..62, the neighbours of the powers of two and of the
 *     int32 limits), with its report of a value that leaves int32;
 *   - the property the route stands on: the nearest-even rounding of the kept value at 2^j,
 *     j >= 2, is that of the exact sum at 2^(k + j) (fx_requant, with its saturations);
 *   - at each level that keeps them (AVX2, AVX-512 with its AMX kernels turned off: those
 *     round in their epilogue and keep no sums), a DFP16 convolution of 800 products a sum
 *     written again and again with
 *     inputs scaled to move its exponent by one and by more, against the same writes with the
 *     route turned off (the int64 stage and the runs again): the same mantissas, exponent,
 *     statistics and trace at every write (test_same_writes), the rounding taken from the kept
 *     sums where the exponent moved by one or rose further, and the op run again where it fell
 *     by four. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "core/internal.h"
#include "flex/flex_kernels.h"
#include "flex/flex_math.h"
#include "flex/gemm_i16.h"
#include "nn/nn_ops.h"
#include "testutil.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void check_kernel(const char *level, int (*fn)(const int64_t *, int32_t *, int64_t, int),
                         test_rng *r)
{
    enum { N = 203 }; /* whole vectors and a tail */
    int64_t v[N];
    int32_t got[N];
    long bad = 0, fits_wrong = 0;
    for (int k = 1; k <= 62; k++)
        for (int round = 0; round < 6; round++) {
            for (int i = 0; i < N; i++) {
                const int bits = (int)test_rng_range(r, 0, 62);
                int64_t m = (int64_t)(test_rng_u64(r) >> (63 - bits));
                if (i % 7 == 0) /* 2^x - 1, 2^x, 2^x + 1 around the shift */
                    m = ((int64_t)1 << ((k + i % 5) % 62)) + (i % 3) - 1;
                if (i % 11 == 0) m = ((int64_t)INT32_MAX << (k < 31 ? k : 31)) + (i % 3) - 1;
                v[i] = (test_rng_u64(r) & 1) ? -m : m;
            }
            if (round == 0) v[0] = 0;
            int want_fits = 1;
            for (int i = 0; i < N; i++) {
                const int64_t q = fx_rshift_jam(v[i], k);
                want_fits &= q >= INT32_MIN && q <= INT32_MAX;
            }
            const int fits = fn(v, got, N, k);
            fits_wrong += fits != want_fits;
            for (int i = 0; i < N && want_fits; i++) bad += got[i] != (int32_t)fx_rshift_jam(v[i], k);
        }
    CHECK(bad == 0 && fits_wrong == 0,
          "%s round_odd_i64: %ld values differ from fx_rshift_jam, %ld calls misreported int32",
          level, bad, fits_wrong);
}

/* RNE(jam(v, k), j) == RNE(v, k + j) for j >= 2, saturations counted alike */
static void check_property(test_rng *r)
{
    long bad = 0, tried = 0;
    for (int t = 0; t < 200000; t++) {
        const int k = (int)test_rng_range(r, 1, 40), j = (int)test_rng_range(r, 2, 20);
        const int bits = (int)test_rng_range(r, 0, 62 - 1);
        int64_t v = (int64_t)(test_rng_u64(r) >> (63 - bits));
        if (test_rng_u64(r) & 1) v = -v;
        int64_t s1 = 0, s2 = 0;
        const int32_t a = fx_requant(fx_rshift_jam(v, k), j, &s1);
        const int32_t b = fx_requant(v, k + j, &s2);
        bad += a != b || s1 != s2;
        tried++;
    }
    CHECK(bad == 0, "round to odd then to nearest even: %ld of %ld differ from one rounding", bad,
          tried);
}

/* x's values times 2^p (exact in DFP16: its exponent moves) */
static void scaled(tensor_t *dst, const float *x, int64_t n, float s)
{
    float *t = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) t[i] = x[i] * s;
    CHECK_STATUS(tensor_from_f32(dst, t), FX_OK);
    free(t);
}

/* The route at the active level (named `level`) */
static void check_route(test_rng *r, const char *level, int disposable)
{
    enum { NB = 4, C = 32, HW = 8, O = 16, K = 5 }; /* 800 products a sum */
    const int64_t xs[4] = {NB, C, HW, HW}, ws[4] = {O, C, K, K}, ys[4] = {NB, O, HW, HW};
    const int64_t nx = NB * C * HW * HW, nw = O * C * K * K;
    float *xv = malloc(sizeof(float) * (size_t)nx), *wv = malloc(sizeof(float) * (size_t)nw);
    for (int64_t i = 0; i < nx; i++) xv[i] = (float)test_rng_normal(r);
    for (int64_t i = 0; i < nw; i++) wv[i] = (float)(0.05 * test_rng_normal(r));
    tensor_t *w = tensor_new(FMT_DFP16, 4, ws), *x = tensor_new(FMT_DFP16, 4, xs);
    tensor_t *y = tensor_new(FMT_DFP16, 4, ys), *twin = tensor_new(FMT_DFP16, 4, ys);
    CHECK_STATUS(tensor_from_f32(w, wv), FX_OK);
    if (disposable) {
        fx_tensor_set_disposable(y);
        fx_tensor_set_disposable(twin);
    }
    /* the input's scale per write: five at each, so that the guesses hold again before the
     * next move (up one, down one, up ten, down four) */
    static const float scale[] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1,
                                  1024, 1024, 1024, 1024, 1024, 64, 64};
    enum { NW = sizeof scale / sizeof *scale };
    int64_t taken = 0, redone_on = 0, redone_off = 0;
    for (int wi = 0; wi < NW; wi++) {
        scaled(x, xv, nx, scale[wi]);
        const int64_t t0 = fx_conv_round_odd_taken(), r0 = fx_conv_stage_redone();
        CHECK_STATUS(tensor_conv2d(y, x, w, 1, 1, K / 2, K / 2, 1, 1), FX_OK);
        taken += fx_conv_round_odd_taken() - t0;
        redone_on += fx_conv_stage_redone() - r0;
        fx_conv_round_odd_set_enabled(0);
        const int64_t r1 = fx_conv_stage_redone();
        CHECK_STATUS(tensor_conv2d(twin, x, w, 1, 1, K / 2, K / 2, 1, 1), FX_OK);
        redone_off += fx_conv_stage_redone() - r1;
        fx_conv_round_odd_set_enabled(1);
        char what[96];
        snprintf(what, sizeof what, "%s dfp16 long sums%s", level,
                 disposable ? ", disposable" : "");
        test_same_writes(y, twin, what, wi);
    }
    /* the moves by one and the rise by ten took the kept sums where the route off ran the op
     * again; the fall by four, below the kept sums, ran again with it on too (the first write,
     * with no exponent to guess, takes the stage either way) */
    CHECK(taken == 3 && redone_on == 1 && redone_off == 4,
          "%s dfp16 long sums (disposable %d): %lld writes rounded from the kept sums, the "
          "op run again %lld times (%lld without them)", level, disposable, (long long)taken,
          (long long)redone_on, (long long)redone_off);
    tensor_free(w);
    tensor_free(x);
    tensor_free(y);
    tensor_free(twin);
    free(xv);
    free(wv);
}

int main(void)
{
    test_rng r;
    test_rng_seed(&r, 20261206);
    check_kernel("portable", fx_flex_round_odd_i64_scalar, &r);
    for (int id = 0; id < FX_BACKEND_COUNT; id++) {
        const fx_backend *be = fx_backend_get(id);
        if (be && be->available && be->cvt.round_odd_i64)
            check_kernel(be->name, be->cvt.round_odd_i64, &r);
    }
    check_property(&r);
    /* the register tiles, not AMX (where a CPU has it), whatever the measured choice */
    const int forced = fx_gemm_i16_forced_kernel(), amx_auto = fx_gemm_i16_amx_auto();
    CHECK_STATUS(fx_gemm_i16_force_kernel(FX_GEMM_I16_KERNEL_AUTO), FX_OK);
    fx_gemm_i16_set_amx_auto(0);
    int levels = 0;
    for (int id = 0; id < FX_BACKEND_COUNT; id++) {
        const fx_backend *be = fx_backend_get(id);
        if (!be || !be->available || !be->conv.i16_round_odd_keep) continue;
        CHECK_STATUS(flexpoint_set_backend(be->name), FX_OK);
        check_route(&r, be->name, 0);
        check_route(&r, be->name, 1);
        levels++;
    }
    fx_gemm_i16_set_amx_auto(amx_auto);
    CHECK_STATUS(fx_gemm_i16_force_kernel(forced), FX_OK);
    if (!levels)
        return test_skip("test_conv_round_odd", "this CPU has no level that keeps the sums");
    return test_finish("test_conv_round_odd");
}
