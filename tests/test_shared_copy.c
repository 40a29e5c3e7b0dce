/* tensor_copy and tensor_relu of FLEX16_5 / DFP16 host tensors through an int16 stage (ops.c,
 * fx_int16_unary) against the dispatcher's int64 stage (the route switched off).
 *
 * On every backend at 1 and 2 threads: sequences of copies and ReLUs into FLEX16_5, DFP16,
 * fp32, fp16 and bf16 outputs from FLEX16_5 and DFP16 inputs, from contiguous tensors and from
 * the strided head views of the transformer ([B, T, H, D] transposed to [B, H, T, D]), into
 * whole tensors and into a reshaped view, sizes from 0 to above the parallel threshold, with
 * jumps of the input's scale (a FLEX16_5 overflow the write recomputes, a DFP16 exponent that
 * moves): after every write the same stored bits, exponent, statistics and trace record, and
 * every copy counted as taken. A copy in place (out = a) gives the dispatcher's result too.
 *
 * tensor_copy of fp16 and bf16 tensors into their own format on bit patterns (ops.c,
 * fx_half_select, switched off by the same hook): every one of the 65,536 patterns (NaN
 * payloads, signaling NaNs, -0, subnormals, Inf) as a [4, 16, 32, 32] tensor read whole, through
 * its transposed head view, and into a reshaped view of the output, on every backend at one and
 * two threads: the dispatcher's bits (its fp32 round trip turns every NaN into the canonical
 * quiet NaN of its sign); a head view goes in one pass straight into the output (counted), and
 * its ReLU equals the ReLU of its contiguous copy. */
#include "flexpoint.h"
#include "core/ops_internal.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static void fill(tensor_t *t, double scale, uint64_t seed)
{
    test_rng r;
    test_rng_seed(&r, seed);
    const int64_t n = tensor_numel(t);
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v) exit(2);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(scale * test_rng_normal(&r));
    if (n > 2) v[n / 2] = (float)(-9.0 * scale); /* the maximum inside, not at an end */
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    free(v);
}

/* [B, T, H, D] source; heads: read it through its [B, H, T, D] transposed view */
static void check_sequence(fmt_t fo, fmt_t fa, const int64_t *s4, int heads, int relu,
                           int into_view)
{
    tensor_t *a = tensor_new(fa, 4, s4);
    tensor_t *src = heads ? tensor_view_transpose(a, 1, 2) : a;
    const int64_t *ss = tensor_shape(src);
    const int64_t o4[4] = {ss[0], ss[1], ss[2], ss[3]};
    const int64_t o3[3] = {ss[0], ss[1], ss[2] * ss[3]};
    tensor_t *fast = into_view ? tensor_new(fo, 3, o3) : tensor_new(fo, 4, o4);
    tensor_t *ref = into_view ? tensor_new(fo, 3, o3) : tensor_new(fo, 4, o4);
    tensor_t *fv = into_view ? tensor_view_reshape(fast, 4, o4) : fast;
    tensor_t *rv = into_view ? tensor_view_reshape(ref, 4, o4) : ref;
    CHECK(a && src && fast && ref && fv && rv, "tensors");
    if (fmt_is_shared_exponent(fo)) {
        tensor_trace_enable(fast, 1);
        tensor_trace_enable(ref, 1);
    }
    char what[160];
    snprintf(what, sizeof what, "%s %s <- %s [%lld,%lld,%lld,%lld]%s%s", relu ? "relu" : "copy",
             fmt_name(fo), fmt_name(fa), (long long)s4[0], (long long)s4[1], (long long)s4[2],
             (long long)s4[3], heads ? " heads" : "", into_view ? " into a view" : "");
    static const double scales[] = {1.0, 1.0, 1.0, 300.0, 300.0, 1e-4, 1.0, 3e4};
    for (int step = 0; step < (int)(sizeof scales / sizeof scales[0]); step++) {
        fill(a, scales[step], 500u + (uint64_t)step);
        const int64_t before = fx_int16_copy_taken();
        CHECK_STATUS(relu ? tensor_relu(fv, src) : tensor_copy(fv, src), FX_OK);
        if (!relu)
            CHECK(fx_int16_copy_taken() == before + 1, "%s, write %d: not taken", what, step);
        fx_int16_unary_set_enabled(0);
        CHECK_STATUS(relu ? tensor_relu(rv, src) : tensor_copy(rv, src), FX_OK);
        fx_int16_unary_set_enabled(1);
        if (!test_same_writes(fast, ref, what, step)) break;
    }
    if (into_view) {
        tensor_free(fv);
        tensor_free(rv);
    }
    if (heads) tensor_free(src);
    tensor_free(a);
    tensor_free(fast);
    tensor_free(ref);
}

static void check_in_place(void)
{
    const int64_t shape[2] = {70, 90};
    tensor_t *a = tensor_new(FMT_FLEX16_5, 2, shape), *b = tensor_new(FMT_FLEX16_5, 2, shape);
    fill(a, 3.0, 9);
    fx_int16_unary_set_enabled(0);
    CHECK_STATUS(tensor_copy(b, a), FX_OK);
    fx_int16_unary_set_enabled(1);
    CHECK_STATUS(tensor_copy(a, a), FX_OK);
    fx_int16_unary_set_enabled(0);
    CHECK_STATUS(tensor_copy(b, b), FX_OK);
    fx_int16_unary_set_enabled(1);
    test_same_writes(a, b, "copy in place", 0);
    tensor_free(a);
    tensor_free(b);
    /* overlapping views of one storage: [0, 2n) copied onto [n/2, n/2 + 2n) */
    const int64_t n = 40000, whole[1] = {3 * n};
    tensor_t *x = tensor_new(FMT_DFP16, 1, whole), *y = tensor_new(FMT_DFP16, 1, whole);
    fill(x, 2.0, 11);
    fx_int16_unary_set_enabled(0);
    CHECK_STATUS(tensor_copy(y, x), FX_OK);
    fx_int16_unary_set_enabled(1);
    tensor_t *xs = tensor_view_slice(x, 0, 0, 2 * n, 1), *xd = tensor_view_slice(x, 0, n / 2, n / 2 + 2 * n, 1);
    tensor_t *ys = tensor_view_slice(y, 0, 0, 2 * n, 1), *yd = tensor_view_slice(y, 0, n / 2, n / 2 + 2 * n, 1);
    CHECK(xs && xd && ys && yd, "slices");
    CHECK_STATUS(tensor_copy(xd, xs), FX_OK);
    fx_int16_unary_set_enabled(0);
    CHECK_STATUS(tensor_copy(yd, ys), FX_OK);
    fx_int16_unary_set_enabled(1);
    test_same_writes(x, y, "copy between overlapping views", 0);
    tensor_free(xs);
    tensor_free(xd);
    tensor_free(ys);
    tensor_free(yd);
    tensor_free(x);
    tensor_free(y);
}

static void check_half_copies(fmt_t f)
{
    const int64_t s4[4] = {4, 16, 32, 32}; /* 65,536 elements: every pattern once */
    tensor_t *a = tensor_new(f, 4, s4);
    uint16_t *pat = malloc(sizeof(uint16_t) * 65536), *x = malloc(sizeof(uint16_t) * 65536);
    uint16_t *y = malloc(sizeof(uint16_t) * 65536);
    for (int i = 0; i < 65536; i++) pat[i] = (uint16_t)(i * 40503u); /* odd: a permutation */
    CHECK_STATUS(tensor_set_raw(a, pat), FX_OK);
    for (int heads = 0; heads <= 1; heads++)
        for (int into_view = 0; into_view <= 1; into_view++) {
            tensor_t *src = heads ? tensor_view_transpose(a, 1, 2) : a;
            const int64_t *ss = tensor_shape(src);
            const int64_t o4[4] = {ss[0], ss[1], ss[2], ss[3]}, o3[3] = {ss[0], ss[1], ss[2] * ss[3]};
            tensor_t *fast = into_view ? tensor_new(f, 3, o3) : tensor_new(f, 4, o4);
            tensor_t *ref = into_view ? tensor_new(f, 3, o3) : tensor_new(f, 4, o4);
            tensor_t *fv = into_view ? tensor_view_reshape(fast, 4, o4) : fast;
            tensor_t *rv = into_view ? tensor_view_reshape(ref, 4, o4) : ref;
            const int64_t before = fx_half_copy_taken();
            const int64_t gathered = fx_half_select_gathered_runs();
            CHECK_STATUS(tensor_copy(fv, src), FX_OK);
            CHECK(fx_half_copy_taken() == before + 1, "copy %s: the bit-pattern route was not "
                  "taken", fmt_name(f));
            /* a view is read run by run straight into a contiguous output */
            CHECK(fx_half_select_gathered_runs() == gathered + (heads ? 1 : 0),
                  "copy %s%s%s: %lld one-pass gathers", fmt_name(f), heads ? " heads" : "",
                  into_view ? " into a view" : "",
                  (long long)(fx_half_select_gathered_runs() - gathered));
            fx_int16_unary_set_enabled(0);
            CHECK_STATUS(tensor_copy(rv, src), FX_OK);
            fx_int16_unary_set_enabled(1);
            CHECK(fx_half_copy_taken() == before + 1, "copy %s: the bit-pattern route was taken "
                  "while switched off", fmt_name(f));
            CHECK_STATUS(tensor_get_raw(fast, x), FX_OK);
            CHECK_STATUS(tensor_get_raw(ref, y), FX_OK);
            int bad = 0;
            for (int i = 0; i < 65536; i++) bad += x[i] != y[i];
            CHECK(bad == 0, "copy %s%s%s: %d of 65536 patterns differ from the fp32 route",
                  fmt_name(f), heads ? " heads" : "", into_view ? " into a view" : "", bad);
            if (heads) { /* ReLU of the view: as ReLU of its contiguous copy (two passes) */
                tensor_t *copy = tensor_new(f, 4, o4), *r1 = tensor_new(f, 4, o4);
                tensor_t *r2 = tensor_new(f, 4, o4);
                CHECK_STATUS(tensor_copy(copy, src), FX_OK);
                CHECK_STATUS(tensor_relu(r1, src), FX_OK);
                CHECK_STATUS(tensor_relu(r2, copy), FX_OK);
                CHECK_STATUS(tensor_get_raw(r1, x), FX_OK);
                CHECK_STATUS(tensor_get_raw(r2, y), FX_OK);
                bad = 0;
                for (int i = 0; i < 65536; i++) bad += x[i] != y[i];
                CHECK(bad == 0, "relu %s heads: %d of 65536 patterns differ from the relu of a "
                      "contiguous copy", fmt_name(f), bad);
                tensor_free(copy);
                tensor_free(r1);
                tensor_free(r2);
            }
            if (into_view) {
                tensor_free(fv);
                tensor_free(rv);
            }
            if (heads) tensor_free(src);
            tensor_free(fast);
            tensor_free(ref);
        }
    tensor_free(a);
    free(pat);
    free(x);
    free(y);
}

int main(void)
{
    const int64_t small[4] = {2, 3, 2, 4}, big[4] = {4, 64, 4, 32}, empty[4] = {0, 3, 2, 4};
    const fmt_t outs[5] = {FMT_FLEX16_5, FMT_DFP16, FMT_FP32, FMT_FP16, FMT_BF16};
    const fmt_t ins[2] = {FMT_FLEX16_5, FMT_DFP16};
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        for (int nt = 1; nt <= 2; nt++) {
            flexpoint_set_num_threads(nt);
            for (int i = 0; i < 2; i++)
                for (int o = 0; o < 5; o++)
                    for (int relu = 0; relu <= 1; relu++) {
                        check_sequence(outs[o], ins[i], small, 0, relu, 0);
                        check_sequence(outs[o], ins[i], big, 1, relu, o == 0);
                        check_sequence(outs[o], ins[i], big, 0, relu, 0);
                    }
            check_sequence(FMT_FLEX16_5, FMT_DFP16, empty, 1, 0, 0);
            check_half_copies(FMT_FP16);
            check_half_copies(FMT_BF16);
        }
    }
    flexpoint_set_num_threads(0);
    check_in_place();
    return test_finish("test_shared_copy");
}
