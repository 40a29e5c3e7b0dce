/* Large copies between views and contiguous buffers (fx_strided_copy, which runs the gathers
 * of large views and the contiguous copies on the threads): tensor_get_raw of strided views
 * of 2-byte and 4-byte tensors against an element-by-element gather through the view's
 * strides, at 1 and 2 threads and on both sides of the threads' size gate; the contiguous
 * copy both ways; a scatter into a strided view (tensor_set_raw) against the same indexing;
 * and the batched products that gather the attention's head views (tensor_bmm of transposed
 * head views) the same at 1 and 2 threads. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

/* The raw element i (row-major over the view's shape) of a view of a contiguous base whose
 * raw elements are base[0..): found through the view's strides and offset from base. */
static void gather_by_strides(const tensor_t *v, const void *base, ptrdiff_t offset,
                              size_t es, void *out)
{
    const int nd = tensor_ndim(v);
    const int64_t *sh = tensor_shape(v), *st = tensor_strides(v);
    const int64_t n = tensor_numel(v);
    int64_t idx[FX_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t off = offset;
        for (int d = 0; d < nd; d++) off += idx[d] * st[d];
        memcpy((char *)out + (size_t)i * es, (const char *)base + (size_t)off * es, es);
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < sh[d]) break;
            idx[d] = 0;
        }
    }
}

static void fill_raw(tensor_t *t, size_t es)
{
    const int64_t n = tensor_numel(t);
    char *buf = malloc((size_t)n * es);
    if (!buf) exit(2);
    for (int64_t i = 0; i < n; i++) {
        if (es == 2) {
            const int16_t v = (int16_t)((i * 7919) % 65535 - 32767); /* in [-32767, 32767] */
            memcpy(buf + i * 2, &v, 2);
        } else {
            const float v = (float)i * 0.25f - 1000.0f;
            memcpy(buf + i * 4, &v, 4);
        }
    }
    CHECK_STATUS(tensor_set_raw(t, buf), FX_OK);
    free(buf);
}

/* the view's offset in elements from the base tensor's first element */
static ptrdiff_t offset_of(tensor_t *view, tensor_t *base, size_t es)
{
    return ((char *)tensor_data(view) - (char *)tensor_data(base)) / (ptrdiff_t)es;
}

static void check_views(fmt_t f, const int64_t *shape4)
{
    const size_t es = f == FMT_FP32 ? 4 : 2;
    tensor_t *t = tensor_new(f, 4, shape4);
    CHECK(t != NULL, "tensor_new");
    fill_raw(t, es);
    const int64_t n = tensor_numel(t);
    char *base = malloc((size_t)n * es), *want = malloc((size_t)n * es), *got = malloc((size_t)n * es);
    if (!base || !want || !got) exit(2);
    CHECK_STATUS(tensor_get_raw(t, base), FX_OK);
    tensor_t *views[4];
    const char *names[4] = {"transpose(1,2)", "transpose(0,3)", "slice(1, step 3)",
                            "transposed slice"};
    views[0] = tensor_view_transpose(t, 1, 2);
    views[1] = tensor_view_transpose(t, 0, 3);
    views[2] = tensor_view_slice(t, 1, 1, shape4[1], 3);
    views[3] = views[2] ? tensor_view_transpose(views[2], 2, 3) : NULL;
    for (int v = 0; v < 4; v++) {
        CHECK(views[v] != NULL, "view %s", names[v]);
        if (!views[v]) continue;
        const int64_t nv = tensor_numel(views[v]);
        gather_by_strides(views[v], base, offset_of(views[v], t, es), es, want);
        for (int nt = 1; nt <= 2; nt++) {
            const int prev = flexpoint_set_num_threads(nt);
            memset(got, 0x5A, (size_t)n * es);
            CHECK_STATUS(tensor_get_raw(views[v], got), FX_OK);
            flexpoint_set_num_threads(prev);
            CHECK(memcmp(got, want, (size_t)nv * es) == 0, "%s %s (%lld elements), %d thread(s)",
                  fmt_name(f), names[v], (long long)nv, nt);
        }
    }
    /* the contiguous copy both ways (tensor_set_raw then tensor_get_raw) */
    for (int nt = 1; nt <= 2; nt++) {
        const int prev = flexpoint_set_num_threads(nt);
        tensor_t *c = tensor_new(f, 4, shape4);
        CHECK_STATUS(tensor_set_raw(c, base), FX_OK);
        memset(got, 0x5A, (size_t)n * es);
        CHECK_STATUS(tensor_get_raw(c, got), FX_OK);
        CHECK(memcmp(got, base, (size_t)n * es) == 0, "%s contiguous round trip, %d thread(s)",
              fmt_name(f), nt);
        /* a scatter into a strided view: the elements it covers take the values, in the
         * view's row-major order; the others keep theirs */
        tensor_t *sv = tensor_view_transpose(c, 1, 2);
        const int64_t nv = tensor_numel(sv);
        char *src = malloc((size_t)nv * es), *after = malloc((size_t)n * es);
        if (!src || !after) exit(2);
        for (int64_t i = 0; i < nv; i++) memcpy(src + i * (int64_t)es, base + ((i * 31) % n) * (int64_t)es, es);
        CHECK_STATUS(tensor_set_raw(sv, src), FX_OK);
        CHECK_STATUS(tensor_get_raw(sv, got), FX_OK);
        CHECK(memcmp(got, src, (size_t)nv * es) == 0, "%s scatter into a view, %d thread(s)",
              fmt_name(f), nt);
        CHECK_STATUS(tensor_get_raw(c, after), FX_OK);
        gather_by_strides(sv, after, 0, es, want);
        CHECK(memcmp(want, src, (size_t)nv * es) == 0, "%s scatter: storage order, %d thread(s)",
              fmt_name(f), nt);
        free(src);
        free(after);
        tensor_free(sv);
        tensor_free(c);
        flexpoint_set_num_threads(prev);
    }
    for (int v = 3; v >= 0; v--) tensor_free(views[v]);
    tensor_free(t);
    free(base);
    free(want);
    free(got);
}

/* the attention's batched products of head views, the same bits at 1 and 2 threads */
static void check_head_bmm(void)
{
    const int64_t B = 4, T = 128, H = 4, dh = 32, shape[3] = {B, T, H * dh};
    const int64_t s4[4] = {B, T, H, dh}, out_shape[4] = {B, H, T, T};
    test_rng r;
    test_rng_seed(&r, 51);
    float *x = malloc(sizeof(float) * (size_t)(B * T * H * dh));
    if (!x) exit(2);
    for (int64_t i = 0; i < B * T * H * dh; i++) x[i] = (float)test_rng_normal(&r);
    const fmt_t fs[2] = {FMT_FLEX16_5, FMT_FP32};
    for (int k = 0; k < 2; k++) {
        tensor_t *q = tensor_new(fs[k], 3, shape);
        CHECK_STATUS(tensor_from_f32(q, x), FX_OK);
        tensor_t *q4 = tensor_view_reshape(q, 4, s4), *qh = tensor_view_transpose(q4, 1, 2);
        tensor_t *o1 = tensor_new(fs[k], 4, out_shape), *o2 = tensor_new(fs[k], 4, out_shape);
        int prev = flexpoint_set_num_threads(1);
        CHECK_STATUS(tensor_bmm(o1, qh, qh, 0, 1), FX_OK);
        flexpoint_set_num_threads(2);
        CHECK_STATUS(tensor_bmm(o2, qh, qh, 0, 1), FX_OK);
        flexpoint_set_num_threads(prev);
        const int64_t n = B * H * T * T;
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        if (!a || !b) exit(2);
        CHECK_STATUS(tensor_to_f32(o1, a), FX_OK);
        CHECK_STATUS(tensor_to_f32(o2, b), FX_OK);
        CHECK(memcmp(a, b, sizeof(float) * (size_t)n) == 0, "%s head bmm differs by threads",
              fmt_name(fs[k]));
        /* one entry against its definition: q[b, t, h, :] . q[b, u, h, :] */
        const int64_t bb = 3, hh = 2, t = 17, u = 101;
        double ref = 0, mag = 0;
        float *qv = malloc(sizeof(float) * (size_t)(B * T * H * dh));
        if (!qv) exit(2);
        CHECK_STATUS(tensor_to_f32(q, qv), FX_OK);
        for (int64_t d = 0; d < dh; d++) {
            const double p = (double)qv[((bb * T + t) * H + hh) * dh + d] *
                             qv[((bb * T + u) * H + hh) * dh + d];
            ref += p;
            mag += p < 0 ? -p : p;
        }
        const double got = a[((bb * H + hh) * T + t) * T + u];
        CHECK(got - ref <= 0x1p-8 * mag + 1e-6 && ref - got <= 0x1p-8 * mag + 1e-6,
              "%s head bmm entry %g, want %g", fmt_name(fs[k]), got, ref);
        free(qv);
        free(a);
        free(b);
        tensor_free(o1);
        tensor_free(o2);
        tensor_free(qh);
        tensor_free(q4);
        tensor_free(q);
    }
    free(x);
}

int main(void)
{
    /* above the threads' gate (2^17 elements) and below it */
    const int64_t big[4] = {16, 81, 4, 32}, small[4] = {3, 7, 5, 4};
    const fmt_t fs[3] = {FMT_FP32, FMT_BF16, FMT_FLEX16_5};
    for (int k = 0; k < 3; k++) {
        check_views(fs[k], big);
        check_views(fs[k], small);
    }
    check_head_bmm();
    return test_finish("test_strided_copy");
}
