/* Selection ops (relu, max-pooling and their gradients) keep their outputs in 16 bits:
 * shared-exponent formats stage int16 mantissas instead of int64 values (fx_write_i16,
 * fx_par_quant_i16), and fp16/bf16 into the same format work on bit patterns instead of an fp32
 * copy (src/core/half_bits.h, fx_write_half_bits). The claim is that nothing observable
 * changes, so everything is compared with the wide route on the same values:
 *   - fx_par_quant_i16 against the backend's quant_i64 on the widened values, exhaustively:
 *     every int16 value (-32768 included, which saturates) at every shift from -20 to 70,
 *     on every available backend, mantissas and all statistics;
 *   - fx_write_i16 against fx_write_i64 into tensors of every format, over sequences of
 *     writes (Autoflex history, DFP16 exact exponents, float outputs), bits, exponent and
 *     every statistic;
 *   - relu, relu_backward, 2x2 max-pool and its gradient on fp16/bf16, on every one of the 65536
 *     bit patterns (NaNs, infinities, signed zeros, subnormals), against the same op written
 *     into an fp32 tensor and then rounded to the format: bits and argmax indices. */
#include "testutil.h"

#include "core/backend.h"
#include "core/compose.h"
#include "core/dispatch.h"
#include "flexpoint_nn.h"

#include <stdlib.h>
#include <string.h>

#define NVALS 65536

static void check_quant_equal(const char *backend, int shift, const int16_t *vals, int64_t n)
{
    const fx_backend *be = fx_backend_active();
    int64_t *wide = malloc((size_t)n * sizeof *wide);
    int16_t *got = malloc((size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++) wide[i] = vals[i];
    fx_qstats sw, sg;
    be->cvt.quant_i64(wide, want, n, shift, &sw);
    fx_par_quant_i16(be, vals, got, n, shift, &sg);
    CHECK(memcmp(got, want, (size_t)n * sizeof *got) == 0, "%s shift %d: mantissas differ",
          backend, shift);
    CHECK(sg.saturated == sw.saturated && sg.underflow == sw.underflow &&
              sg.nonfinite == sw.nonfinite && sg.max_abs_in == sw.max_abs_in &&
              sg.max_abs_out == sw.max_abs_out,
          "%s shift %d: stats (sat %lld/%lld uf %lld/%lld in %g/%g out %d/%d)", backend, shift,
          (long long)sg.saturated, (long long)sw.saturated, (long long)sg.underflow,
          (long long)sw.underflow, sg.max_abs_in, sw.max_abs_in, sg.max_abs_out, sw.max_abs_out);
    /* statistics-only trials (dst NULL) report the same */
    fx_qstats st;
    fx_par_quant_i16(be, vals, NULL, n, shift, &st);
    CHECK(st.saturated == sw.saturated && st.underflow == sw.underflow &&
              st.max_abs_out == sw.max_abs_out,
          "%s shift %d: statistics-only trial differs", backend, shift);
    free(wide);
    free(got);
    free(want);
}

static void test_quant_exhaustive(void)
{
    /* every int16 value, three times over in a shuffled order: 196608 values cross the
     * parallel driver's chunking (2^16) with a partial chunk at the end */
    const int64_t n = 3 * NVALS + 1000;
    int16_t *vals = malloc((size_t)n * sizeof *vals);
    for (int64_t i = 0; i < n; i++) vals[i] = (int16_t)(i % NVALS - 32768);
    test_rng r;
    test_rng_seed(&r, 7);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(test_rng_u64(&r) % (uint64_t)(i + 1));
        int16_t t = vals[i];
        vals[i] = vals[j];
        vals[j] = t;
    }
    /* without -32768, shift 0 takes the copy path; with it, the general one */
    int16_t *sym = malloc((size_t)n * sizeof *sym);
    for (int64_t i = 0; i < n; i++) sym[i] = vals[i] == INT16_MIN ? 0 : vals[i];
    for (int b = 0; b < flexpoint_backend_count(); b++) {
        if (!flexpoint_backend_available(b)) continue;
        const char *name = flexpoint_backend_name(b);
        CHECK_STATUS(flexpoint_set_backend(name), FX_OK);
        for (int shift = -20; shift <= 70; shift++) {
            check_quant_equal(name, shift, vals, n);
            check_quant_equal(name, shift, sym, n);
        }
        check_quant_equal(name, 0, sym, 5); /* short, below one vector */
    }
    flexpoint_set_backend("scalar");
    free(vals);
    free(sym);
}

/* Write the same values through both routes into two tensors of format f, and compare. */
static void test_write_pair(fmt_t f, const char *fname)
{
    const int64_t shape[2] = {37, 129}, n = 37 * 129;
    tensor_t *a = tensor_new(f, 2, shape), *b = tensor_new(f, 2, shape);
    int16_t *v16 = malloc((size_t)n * sizeof *v16);
    int64_t *v64 = malloc((size_t)n * sizeof *v64);
    uint16_t *ra = malloc((size_t)n * 4), *rb = malloc((size_t)n * 4);
    test_rng r;
    test_rng_seed(&r, 11);
    /* a sequence of writes whose scale moves up and down, so that Autoflex predicts, overflows
     * and recomputes; exponents of the staged values vary too */
    const int amp_bits[] = {14, 15, 9, 15, 3, 12, 15, 15, 6, 0};
    const int exps[] = {-10, -10, -3, -20, 4, -10, -12, -12, -9, -10};
    for (int w = 0; w < 10; w++) {
        const int32_t amp = (int32_t)1 << amp_bits[w];
        for (int64_t i = 0; i < n; i++) {
            int32_t x = (int32_t)(test_rng_u64(&r) % (uint64_t)(2 * amp + 1)) - amp;
            if (x > 32767) x = 32767;
            if (x < -32768) x = -32768;
            if (i % 97 == 0) x = 0;
            v16[i] = (int16_t)x;
            v64[i] = x;
        }
        if (w == 6) v16[5] = INT16_MIN, v64[5] = INT16_MIN; /* saturates on a plain copy */
        CHECK_STATUS(fx_write_i16(a, v16, exps[w], "test"), FX_OK);
        CHECK_STATUS(fx_write_i64(b, v64, exps[w], "test"), FX_OK);
        CHECK_STATUS(tensor_get_raw(a, ra), FX_OK);
        CHECK_STATUS(tensor_get_raw(b, rb), FX_OK);
        const size_t bytes = (size_t)n * (f == FMT_FP32 ? 4 : 2);
        CHECK(memcmp(ra, rb, bytes) == 0, "%s write %d: stored bits differ", fname, w);
        if (fmt_is_shared_exponent(f)) {
            CHECK(tensor_exp(a) == tensor_exp(b), "%s write %d: exponent %d vs %d", fname, w,
                  tensor_exp(a), tensor_exp(b));
            static const char *stats[] = {"saturated", "true_max", "underflow", "clamped",
                                          "overflows", "writes"};
            for (size_t k = 0; k < sizeof stats / sizeof *stats; k++) {
                double sa = -1, sb = -2;
                tensor_stat(a, stats[k], &sa);
                tensor_stat(b, stats[k], &sb);
                CHECK(sa == sb, "%s write %d: %s %g vs %g", fname, w, stats[k], sa, sb);
            }
        }
        /* the _max variant with the true maximum gives the same */
        uint64_t mx = fx_maxabs_i16(v16, n);
        uint64_t want = 0;
        for (int64_t i = 0; i < n; i++) {
            uint64_t m = v64[i] < 0 ? (uint64_t)(-v64[i]) : (uint64_t)v64[i];
            want = m > want ? m : want;
        }
        CHECK(mx == want, "%s: fx_maxabs_i16 %llu, want %llu", fname, (unsigned long long)mx,
              (unsigned long long)want);
    }
    tensor_t *c = tensor_new(f, 2, shape), *d = tensor_new(f, 2, shape);
    uint64_t mx = fx_maxabs_i16(v16, n);
    CHECK_STATUS(fx_write_i16_max(c, v16, -7, mx, "test"), FX_OK);
    CHECK_STATUS(fx_write_i64(d, v64, -7, "test"), FX_OK);
    CHECK_STATUS(tensor_get_raw(c, ra), FX_OK);
    CHECK_STATUS(tensor_get_raw(d, rb), FX_OK);
    CHECK(memcmp(ra, rb, (size_t)n * (f == FMT_FP32 ? 4 : 2)) == 0,
          "%s: fx_write_i16_max differs from fx_write_i64", fname);
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
    tensor_free(d);
    free(v16);
    free(v64);
    free(ra);
    free(rb);
}

/* ---- fp16/bf16 on bit patterns ---------------------------------------------------------------- */

/* The fp32 route's bits: the fp32 result rounded into a tensor of format f. */
static void round_like(fmt_t f, const tensor_t *wide, uint16_t *bits, int64_t n)
{
    float *v = malloc((size_t)n * sizeof *v);
    tensor_t *t = tensor_new(f, wide->ndim, wide->shape);
    CHECK_STATUS(tensor_to_f32(wide, v), FX_OK);
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    CHECK_STATUS(tensor_get_raw(t, bits), FX_OK);
    tensor_free(t);
    free(v);
}

static int64_t count_diff(const uint16_t *a, const uint16_t *b, int64_t n, int64_t *first)
{
    int64_t d = 0;
    *first = -1;
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            if (*first < 0) *first = i;
            d++;
        }
    return d;
}

static void test_half_patterns(fmt_t f, const char *fname)
{
    const int64_t n = NVALS, shape4[4] = {4, 4, 64, 64}, pshape[4] = {4, 4, 32, 32};
    const int64_t np = 4 * 4 * 32 * 32;
    uint16_t *pat = malloc((size_t)n * sizeof *pat), *pat2 = malloc((size_t)n * sizeof *pat2);
    uint16_t *got = malloc((size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
    test_rng r;
    test_rng_seed(&r, 23);
    for (int64_t i = 0; i < n; i++) pat[i] = pat2[i] = (uint16_t)i;
    for (int64_t i = n - 1; i > 0; i--) { /* pat2: a shuffled copy, for the second operand */
        int64_t j = (int64_t)(test_rng_u64(&r) % (uint64_t)(i + 1));
        uint16_t t = pat2[i];
        pat2[i] = pat2[j];
        pat2[j] = t;
    }
    tensor_t *x = tensor_new(f, 4, shape4), *x2 = tensor_new(f, 4, shape4);
    tensor_t *y = tensor_new(f, 4, shape4), *y32 = tensor_new(FMT_FP32, 4, shape4);
    CHECK_STATUS(tensor_set_raw(x, pat), FX_OK);
    CHECK_STATUS(tensor_set_raw(x2, pat2), FX_OK);
    int64_t first, d;

    /* relu */
    CHECK_STATUS(tensor_relu(y, x), FX_OK);
    CHECK_STATUS(tensor_relu(y32, x), FX_OK);
    CHECK_STATUS(tensor_get_raw(y, got), FX_OK);
    round_like(f, y32, want, n);
    d = count_diff(got, want, n, &first);
    CHECK(d == 0, "%s relu: %lld patterns differ, first 0x%04x -> 0x%04x, want 0x%04x", fname,
          (long long)d, first >= 0 ? pat[first] : 0, first >= 0 ? got[first] : 0,
          first >= 0 ? want[first] : 0);

    /* relu_backward: dy every pattern, x (the mask) every pattern in another order */
    CHECK_STATUS(tensor_relu_backward(y, x, x2), FX_OK);
    CHECK_STATUS(tensor_relu_backward(y32, x, x2), FX_OK);
    CHECK_STATUS(tensor_get_raw(y, got), FX_OK);
    round_like(f, y32, want, n);
    d = count_diff(got, want, n, &first);
    CHECK(d == 0, "%s relu_backward: %lld patterns differ (first at %lld)", fname, (long long)d,
          (long long)first);

    /* 2x2 max-pool: windows over shuffled patterns (NaN against numbers, -0 against +0) */
    tensor_t *p = tensor_new(f, 4, pshape), *p32 = tensor_new(FMT_FP32, 4, pshape);
    int32_t *ia = malloc((size_t)np * sizeof *ia), *ib = malloc((size_t)np * sizeof *ib);
    CHECK_STATUS(tensor_maxpool2d(p, ia, x2, 2, 2, 2, 2, 0, 0), FX_OK);
    CHECK_STATUS(tensor_maxpool2d(p32, ib, x2, 2, 2, 2, 2, 0, 0), FX_OK);
    CHECK(memcmp(ia, ib, (size_t)np * sizeof *ia) == 0, "%s maxpool: argmax differs", fname);
    CHECK_STATUS(tensor_get_raw(p, got), FX_OK);
    round_like(f, p32, want, np);
    d = count_diff(got, want, np, &first);
    CHECK(d == 0, "%s maxpool: %lld outputs differ (first at %lld)", fname, (long long)d,
          (long long)first);

    /* its gradient: dy = a quarter of the patterns, each sent to one input (no meetings) */
    tensor_t *dy = tensor_new(f, 4, pshape);
    CHECK_STATUS(tensor_set_raw(dy, pat2 + 3 * np), FX_OK);
    CHECK_STATUS(tensor_maxpool2d_backward(y, dy, ia), FX_OK);
    CHECK_STATUS(tensor_maxpool2d_backward(y32, dy, ia), FX_OK);
    CHECK_STATUS(tensor_get_raw(y, got), FX_OK);
    round_like(f, y32, want, n);
    d = count_diff(got, want, n, &first);
    CHECK(d == 0, "%s maxpool_backward: %lld inputs differ (first at %lld)", fname, (long long)d,
          (long long)first);
    /* indices that send two gradients to one input: the summing route, same as fp32 */
    for (int64_t i = 0; i < np; i += 2) ia[i + 1] = ia[i]; /* i, i + 1: one plane (1024 each) */
    CHECK_STATUS(tensor_maxpool2d_backward(y, dy, ia), FX_OK);
    CHECK_STATUS(tensor_maxpool2d_backward(y32, dy, ia), FX_OK);
    CHECK_STATUS(tensor_get_raw(y, got), FX_OK);
    round_like(f, y32, want, n);
    d = count_diff(got, want, n, &first);
    CHECK(d == 0, "%s maxpool_backward (meeting gradients): %lld inputs differ", fname,
          (long long)d);

    tensor_free(x);
    tensor_free(x2);
    tensor_free(y);
    tensor_free(y32);
    tensor_free(p);
    tensor_free(p32);
    tensor_free(dy);
    free(ia);
    free(ib);
    free(pat);
    free(pat2);
    free(got);
    free(want);
}

int main(void)
{
    test_quant_exhaustive();
    const fmt_t fmts[] = {FMT_FLEX16_5, FMT_DFP16, FMT_FP32, FMT_FP16, FMT_BF16};
    const char *names[] = {"flex16_5", "dfp16", "fp32", "fp16", "bf16"};
    for (int b = 0; b < flexpoint_backend_count(); b++) {
        if (!flexpoint_backend_available(b)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(b)), FX_OK);
        for (int i = 0; i < 5; i++) test_write_pair(fmts[i], names[i]);
        test_half_patterns(FMT_FP16, "fp16");
        test_half_patterns(FMT_BF16, "bf16");
    }
    return test_finish("test_select_stages");
}
