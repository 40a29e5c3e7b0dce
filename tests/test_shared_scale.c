/* tensor_scale of FLEX16_5 / DFP16 tensors without an int64 stage (src/core/shared_scale.c)
 * against the dispatcher's staged route (the route switched off).
 *
 * On every backend at 1 and 2 threads: sequences of scales into FLEX16_5, DFP16 and fp32
 * outputs from FLEX16_5 and DFP16 inputs, sizes from 0 to above the parallel threshold,
 * scalars positive, negative, tiny, huge, 0 and powers of two, with jumps of the input's scale
 * (a FLEX16_5 overflow that the write recomputes, a DFP16 exponent that moves, an Autoflex
 * state's history): after every write the same mantissas (or fp32 bits), exponent, statistics
 * and trace record, and the route must be taken (its counter moves). Inputs it must not take
 * (in place, a strided view, an fp16 output) still give the dispatcher's results.
 *
 * The levels' scaled widening (fx_cvt_table.scaled_i16_f32, which the attention's softmax rows
 * use) on every int16 mantissa at multipliers positive, negative, zero and of 30 bits, and
 * exponents that make results subnormal, zero or infinite: the bits of fx_shared_scale_f32
 * (its +0 for a zero mantissa times a negative multiplier included), at lengths that end
 * inside a vector. */
#include "flexpoint.h"
#include "core/backend.h"
#include "core/shared_scale.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* normal values; with spike, the last one 12 sigma out (the maximum sits at the end) */
static void fill(tensor_t *t, double scale, uint64_t seed, int spike)
{
    test_rng r;
    test_rng_seed(&r, seed);
    const int64_t n = tensor_numel(t);
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(scale * test_rng_normal(&r));
    if (spike && n > 0) v[n - 1] = (float)(-12.0 * scale);
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    free(v);
}

static void check_sequence(fmt_t fo, fmt_t fa, int64_t n, double s)
{
    const int64_t shape[2] = {1, n};
    tensor_t *a = tensor_new(fa, 2, shape);
    tensor_t *fast = tensor_new(fo, 2, shape), *ref = tensor_new(fo, 2, shape);
    if (fo != FMT_FP32) {
        tensor_trace_enable(fast, 1);
        tensor_trace_enable(ref, 1);
    }
    char what[120];
    snprintf(what, sizeof what, "fmt %d = %g * fmt %d [%lld]", (int)fo, s, (int)fa, (long long)n);
    static const double scales[] = {1.0, 1.0, 1.0, 300.0, 300.0, 1e-4, 1.0, 3e4};
    for (int step = 0; step < (int)(sizeof scales / sizeof scales[0]); step++) {
        fill(a, scales[step], 1000u + (uint64_t)step, step == 2 || step == 6);
        const int64_t before = fx_shared_scale_taken();
        CHECK_STATUS(tensor_scale(fast, a, s), FX_OK);
        CHECK(fx_shared_scale_taken() == before + 1, "%s, write %d: not taken", what, step);
        fx_shared_scale_set_enabled(0);
        CHECK_STATUS(tensor_scale(ref, a, s), FX_OK);
        fx_shared_scale_set_enabled(1);
        if (!test_same_writes(fast, ref, what, step)) break;
    }
    tensor_free(a);
    tensor_free(fast);
    tensor_free(ref);
}

static void check_not_taken(void)
{
    const int64_t shape[2] = {30, 40}, half[2] = {30, 20};
    tensor_t *a = tensor_new(FMT_DFP16, 2, shape), *b = tensor_new(FMT_DFP16, 2, shape);
    tensor_t *h1 = tensor_new(FMT_FP16, 2, shape), *h2 = tensor_new(FMT_FP16, 2, shape);
    tensor_t *o1 = tensor_new(FMT_FLEX16_5, 2, half), *o2 = tensor_new(FMT_FLEX16_5, 2, half);
    fill(a, 2.0, 7, 0);
    CHECK_STATUS(tensor_copy(b, a), FX_OK);
    const int64_t before = fx_shared_scale_taken();
    CHECK_STATUS(tensor_scale(a, a, 0.3), FX_OK); /* in place */
    CHECK_STATUS(tensor_scale(h1, b, 0.3), FX_OK); /* fp16 output */
    tensor_t *v = tensor_view_slice(b, 1, 0, 20, 1); /* a strided view */
    CHECK(v != NULL, "slice");
    if (v) CHECK_STATUS(tensor_scale(o1, v, -1.5), FX_OK);
    CHECK(fx_shared_scale_taken() == before, "an excluded scale was taken");
    fx_shared_scale_set_enabled(0);
    CHECK_STATUS(tensor_scale(b, b, 0.3), FX_OK);
    CHECK_STATUS(tensor_scale(h2, a, 1.0), FX_OK); /* a already holds 0.3 b */
    fx_shared_scale_set_enabled(1);
    test_same_writes(a, b, "in place", 0);
    tensor_free(v);
    tensor_free(a);
    tensor_free(b);
    tensor_free(h1);
    tensor_free(h2);
    tensor_free(o1);
    tensor_free(o2);
}

static void scaled_widening(void)
{
    enum { N = 65536 + 13 };
    static int16_t m[N];
    static float got[N];
    for (int i = 0; i < N; i++) m[i] = (int16_t)(i % 65536 - 32768 + (i % 65536 == 0));
    static const int64_t cs[] = {1, -1, 0, 759250125, -759250125, (1 << 30) - 1, -(1 << 30), 3};
    static const int ks[] = {0, -30, -60, -150, -170, 90, 100, -140};
    int bad = 0, checked = 0;
    for (int bi = 0; bi < FX_BACKEND_COUNT; bi++) {
        const fx_backend *be = fx_backend_get(bi);
        if (!be || !be->available || !be->cvt.scaled_i16_f32) continue;
        for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                const double p2 = ldexp(1.0, ks[ki]);
                const int64_t n = N - (int64_t)(ci + ki) % 13;
                be->cvt.scaled_i16_f32(m, got, n, cs[ci], p2);
                for (int64_t i = 0; i < n; i++) {
                    const float want = fx_shared_scale_f32(m[i], cs[ci], p2);
                    if (memcmp(&want, &got[i], sizeof want) != 0 && bad++ < 5)
                        fprintf(stderr, "%s: m=%d c=%lld 2^%d: %a, want %a\n", be->name, m[i],
                                (long long)cs[ci], ks[ki], got[i], want);
                }
                checked++;
            }
    }
    CHECK(bad == 0, "%d scaled widenings differ from fx_shared_scale_f32", bad);
    printf("scaled widening: %d sweeps of every mantissa, fx_shared_scale_f32's bits\n", checked);
}

int main(void)
{
    scaled_widening();
    static const double scalars[] = {0.5, 0.17677669529663687, -3.7, 1e-30, 7e22, 0.0, 1.0,
                                     -0.0009765625};
    static const int64_t sizes[] = {0, 1, 4097, 70000};
    const fmt_t outs[3] = {FMT_FLEX16_5, FMT_DFP16, FMT_FP32};
    const fmt_t ins[2] = {FMT_FLEX16_5, FMT_DFP16};
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        for (int nt = 1; nt <= 2; nt++) {
            flexpoint_set_num_threads(nt);
            for (size_t si = 0; si < sizeof scalars / sizeof scalars[0]; si++)
                for (int o = 0; o < 3; o++)
                    for (int i = 0; i < 2; i++) {
                        const int64_t n = sizes[(si + (size_t)o + (size_t)i) % 4];
                        check_sequence(outs[o], ins[i], n, scalars[si]);
                    }
        }
        flexpoint_set_num_threads(2);
        check_not_taken();
    }
    flexpoint_set_num_threads(0);
    return test_finish("test_shared_scale");
}
