/* The public API's contract: names, constructors, views, and every bad-input path giving the
 * documented status and a message that names the problem, without crashing or writing. */
#include "flexpoint.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int msg_has(const char *needle)
{
    return strstr(flexpoint_last_error(), needle) != NULL;
}

static void names(void)
{
    const char *want[] = {"fp32", "fp16", "bf16", "flex16_5", "dfp16"};
    for (int f = 0; f < FMT_COUNT; f++) {
        CHECK(strcmp(fmt_name((fmt_t)f), want[f]) == 0, "fmt_name(%d)=%s", f, fmt_name((fmt_t)f));
        CHECK(fmt_from_name(want[f]) == f, "fmt_from_name(%s)", want[f]);
    }
    CHECK(fmt_from_name("flex16+5") == FMT_FLEX16_5, "flex16+5 alias");
    CHECK(fmt_name((fmt_t)99) == NULL, "unknown fmt name");
    CHECK(fmt_name((fmt_t)-1) == NULL, "negative fmt name");
    CHECK_STATUS(fmt_from_name("fp8"), FX_EFORMAT);
    CHECK(msg_has("fp8"), "message names the format: %s", flexpoint_last_error());
    CHECK_STATUS(fmt_from_name(NULL), FX_EINVAL);
    CHECK(fmt_elem_size(FMT_FP32) == 4 && fmt_elem_size(FMT_BF16) == 2, "elem sizes");
    CHECK(fmt_is_shared_exponent(FMT_DFP16) && !fmt_is_shared_exponent(FMT_FP16), "families");
    CHECK(strcmp(flexpoint_status_str(FX_ESHAPE), "FX_ESHAPE") == 0, "status str");
    CHECK(strcmp(flexpoint_status_str(12345), "FX_UNKNOWN") == 0, "unknown status str");
    CHECK(flexpoint_backend_name(99) == NULL, "bad backend index");
    CHECK_STATUS(flexpoint_set_backend("quantum"), FX_ENAME);
    CHECK_STATUS(flexpoint_set_backend(NULL), FX_EINVAL);
    CHECK_STATUS(flexpoint_set_backend("scalar"), FX_OK);
    CHECK(strcmp(flexpoint_backend(), "scalar") == 0, "backend in use");
    CHECK(flexpoint_cpu_features() != NULL, "features string");
}

static void constructors(void)
{
    int64_t good[2] = {3, 4}, neg[2] = {3, -1}, huge[3] = {1 << 20, 1 << 20, 1 << 20};
    tensor_t *t = tensor_new(FMT_FP16, 2, good);
    CHECK(t && tensor_numel(t) == 12 && tensor_ndim(t) == 2 && tensor_fmt(t) == FMT_FP16,
          "basic tensor");
    CHECK(tensor_shape(t)[0] == 3 && tensor_shape(t)[1] == 4, "shape");
    CHECK(tensor_strides(t)[0] == 4 && tensor_strides(t)[1] == 1, "strides");
    CHECK(tensor_is_contiguous(t) == 1, "contiguous");
    tensor_free(t);

    CHECK(tensor_new((fmt_t)7, 2, good) == NULL && msg_has("format 7"), "bad fmt: %s",
          flexpoint_last_error());
    CHECK(tensor_new(FMT_FP32, 0, good) == NULL && msg_has("ndim=0"), "ndim 0: %s",
          flexpoint_last_error());
    CHECK(tensor_new(FMT_FP32, FX_MAX_DIMS + 1, good) == NULL, "ndim too large");
    CHECK(tensor_new(FMT_FP32, 2, NULL) == NULL && msg_has("shape is NULL"), "NULL shape");
    CHECK(flexpoint_last_status() == FX_EINVAL, "last status %d", flexpoint_last_status());
    flexpoint_clear_error();
    CHECK(flexpoint_last_status() == FX_OK && flexpoint_last_error()[0] == '\0', "cleared");
    CHECK(tensor_new(FMT_FP32, 2, neg) == NULL && msg_has("shape[1]=-1"), "negative: %s",
          flexpoint_last_error());
    CHECK(tensor_new(FMT_FP32, 3, huge) == NULL && msg_has("overflow"), "overflow: %s",
          flexpoint_last_error());
    CHECK(flexpoint_last_status() == FX_ENOMEM, "overflow status %d", flexpoint_last_status());

    int64_t empty[2] = {0, 5};
    tensor_t *e = tensor_new(FMT_DFP16, 2, empty);
    CHECK(e && tensor_numel(e) == 0, "empty tensor");
    float dummy = 0;
    CHECK_STATUS(tensor_from_f32(e, &dummy), FX_OK);
    tensor_free(e);

    CHECK(tensor_numel(NULL) == -1, "numel NULL");
    CHECK_STATUS(tensor_ndim(NULL), FX_EINVAL);
    CHECK(tensor_shape(NULL) == NULL, "shape NULL");
    CHECK_STATUS(tensor_from_f32(NULL, &dummy), FX_EINVAL);
    tensor_free(NULL); /* no-op */
}

static void views(void)
{
    int64_t sh[2] = {4, 6};
    tensor_t *t = tensor_new(FMT_FP32, 2, sh);
    float x[24], y[24];
    for (int i = 0; i < 24; i++) x[i] = (float)i;
    tensor_from_f32(t, x);

    tensor_t *tr = tensor_view_transpose(t, 0, 1);
    CHECK(tr && tensor_shape(tr)[0] == 6 && tensor_is_contiguous(tr) == 0, "transpose view");
    tensor_to_f32(tr, y);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 4; j++) CHECK(y[i * 4 + j] == x[j * 6 + i], "transposed value");

    tensor_t *sl = tensor_view_slice(t, 1, 1, 6, 2); /* columns 1, 3, 5 */
    CHECK(sl && tensor_shape(sl)[1] == 3, "slice shape");
    tensor_to_f32(sl, y);
    CHECK(y[0] == 1 && y[1] == 3 && y[2] == 5 && y[3] == 7, "slice values");

    int64_t rs[3] = {2, 3, 4};
    tensor_t *re = tensor_view_reshape(t, 3, rs);
    CHECK(re && tensor_numel(re) == 24, "reshape");
    int64_t bad[2] = {5, 5};
    CHECK(tensor_view_reshape(t, 2, bad) == NULL && msg_has("25"), "reshape numel: %s",
          flexpoint_last_error());
    CHECK(tensor_view_reshape(tr, 3, rs) == NULL && msg_has("not contiguous"), "reshape view");
    CHECK(tensor_view_transpose(t, 0, 2) == NULL && msg_has("d1=2"), "transpose dim");
    CHECK(tensor_view_slice(t, 0, 3, 9, 1) == NULL, "slice past end");
    CHECK(tensor_view_slice(t, 0, 0, 2, 0) == NULL && msg_has("step=0"), "slice step 0");

    /* writing through a view changes the parent; the view keeps storage alive */
    float ones[12]; /* the slice is [4, 3]: columns 1, 3, 5 of every row */
    for (int i = 0; i < 12; i++) ones[i] = (float)(-1 - i);
    CHECK_STATUS(tensor_from_f32(sl, ones), FX_OK);
    tensor_free(t);
    tensor_free(re);
    tensor_to_f32(tr, y); /* parent freed: the views still work */
    /* tr is the transpose [6, 4]: tr[c][r] = t[r][c]; slice element (r, j) is t[r][1 + 2j] */
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < 3; j++)
            CHECK(y[(1 + 2 * j) * 4 + r] == (float)(-1 - (r * 3 + j)), "write via slice (%d, %d)",
                  r, j);
    CHECK(y[0 * 4 + 1] == 6.0f, "unsliced column 0 kept: %g", y[0 * 4 + 1]);
    tensor_free(tr);
    tensor_free(sl);
}

static void op_errors(void)
{
    int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s22[2] = {2, 2}, s34[2] = {3, 4}, s4[1] = {4};
    tensor_t *a = tensor_new(FMT_FP32, 2, s23), *b = tensor_new(FMT_FP32, 2, s32);
    tensor_t *o = tensor_new(FMT_BF16, 2, s22), *w = tensor_new(FMT_FP32, 2, s34);
    tensor_t *v = tensor_new(FMT_FP32, 1, s4);
    float x[6] = {1, 2, 3, 4, 5, 6};
    tensor_from_f32(a, x);

    CHECK_STATUS(tensor_add(o, a, b), FX_ESHAPE);
    CHECK(msg_has("tensor_add") && msg_has("[2, 3]") && msg_has("[3, 2]"), "add msg: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_add(NULL, a, b), FX_EINVAL);
    CHECK(msg_has("out is NULL"), "null msg: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_mul(o, a, NULL), FX_EINVAL);
    CHECK_STATUS(tensor_matmul(o, a, w), FX_ESHAPE);
    CHECK(msg_has("a.shape[1]=3 != b.shape[0]=3") == 0 && msg_has("out.shape"), "mm msg: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_matmul(o, a, a), FX_ESHAPE);
    CHECK(msg_has("a.shape[1]=3 != b.shape[0]=2"), "mm inner msg: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_matmul(o, v, b), FX_ESHAPE);
    CHECK_STATUS(tensor_relu(o, a), FX_ESHAPE);
    CHECK_STATUS(tensor_scale(a, a, NAN), FX_EINVAL);
    CHECK_STATUS(tensor_scale(a, a, INFINITY), FX_EINVAL);
    CHECK_STATUS(tensor_sum(v, a, 5), FX_EINVAL);
    CHECK(msg_has("axis=5"), "axis msg: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_sum(v, a, FX_AXIS_ALL), FX_ESHAPE);
    CHECK_STATUS(tensor_sum(v, a, 0), FX_ESHAPE);

    /* a failing op leaves its output untouched */
    float before[4] = {9, 8, 7, 6}, after[4];
    tensor_from_f32(o, before);
    tensor_add(o, a, b);
    tensor_to_f32(o, after);
    CHECK(memcmp(before, after, sizeof before) == 0, "output untouched on error");

    /* sum along an axis with kept dimension */
    int64_t s13[2] = {1, 3};
    tensor_t *k = tensor_new(FMT_FP32, 2, s13);
    CHECK_STATUS(tensor_sum(k, a, 0), FX_OK);
    float ks[3];
    tensor_to_f32(k, ks);
    CHECK(ks[0] == 5 && ks[1] == 7 && ks[2] == 9, "keepdim sum");
    tensor_free(k);

    tensor_free(a);
    tensor_free(b);
    tensor_free(o);
    tensor_free(w);
    tensor_free(v);
}

static void shared_exponent_api(void)
{
    int64_t s[1] = {4};
    tensor_t *f = tensor_new(FMT_FLEX16_5, 1, s), *d = tensor_new(FMT_DFP16, 1, s);
    tensor_t *h = tensor_new(FMT_FP16, 1, s);
    int lo, hi;
    CHECK_STATUS(tensor_exp_window(f, &lo, &hi), FX_OK);
    CHECK(lo == -31 && hi == 0, "default flex window [%d, %d]", lo, hi);
    CHECK_STATUS(tensor_exp_window(d, &lo, &hi), FX_OK);
    CHECK(lo == -128 && hi == 127, "dfp window");
    CHECK_STATUS(tensor_set_exp(f, 1), FX_ERANGE);
    CHECK(msg_has("exponent 1") && msg_has("[-31, 0]"), "exp msg: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_set_exp(f, -10), FX_OK);
    CHECK(tensor_exp(f) == -10, "set exp");
    int ge = 99;
    CHECK_STATUS(tensor_get_exp(f, &ge), FX_OK);
    CHECK(ge == -10, "tensor_get_exp: %d", ge);
    CHECK_STATUS(tensor_get_exp(h, &ge), FX_EFORMAT);
    CHECK_STATUS(tensor_get_exp(NULL, &ge), FX_EINVAL);
    CHECK_STATUS(tensor_get_exp(f, NULL), FX_EINVAL);
    CHECK_STATUS(tensor_set_exp(d, 200), FX_ERANGE);
    CHECK_STATUS(tensor_set_exp(h, 0), FX_EFORMAT);
    CHECK_STATUS(tensor_set_exp_window(f, 100), FX_ERANGE);
    CHECK_STATUS(tensor_set_exp_window(d, -20), FX_EFORMAT);
    CHECK_STATUS(tensor_set_exp_window(f, -40), FX_OK);
    CHECK_STATUS(tensor_exp_window(f, &lo, &hi), FX_OK);
    CHECK(lo == -40 && hi == -9 && tensor_exp(f) == -10, "moved window");
    CHECK_STATUS(tensor_set_exp_window(f, 0), FX_OK);
    CHECK(tensor_exp(f) == 0, "exponent clamped into the new window");
    double v;
    CHECK_STATUS(tensor_stat(f, "bogus", &v), FX_ENAME);
    CHECK_STATUS(tensor_stat(h, "saturated", &v), FX_EFORMAT);
    CHECK_STATUS(tensor_stat(f, "saturated", NULL), FX_EINVAL);
    CHECK_STATUS(tensor_set_rounding(f, 5, 0), FX_EINVAL);
    CHECK_STATUS(tensor_set_rounding(h, FX_ROUND_STOCHASTIC, 0), FX_EFORMAT);

    /* set_exp rescales the stored values: nothing already written is lost */
    float x[4] = {1.5f, -2.0f, 0.25f, 3.0f}, y[4];
    CHECK_STATUS(tensor_from_f32(d, x), FX_OK);
    int e0 = tensor_exp(d);
    CHECK_STATUS(tensor_set_exp(d, e0 + 5), FX_OK); /* coarser grid: these values stay exact */
    tensor_to_f32(d, y);
    CHECK(memcmp(x, y, sizeof x) == 0, "values survive an exponent change");
    CHECK_STATUS(tensor_set_exp(d, e0 - 2), FX_OK); /* finer grid: 3.0 no longer fits */
    CHECK_STATUS(tensor_stat(d, "saturated", &v), FX_OK);
    CHECK(v == 3, "rescaling saturation is counted (1.5, -2, 3 overflow at 2^-15): %g", v);

    /* a rescale of a large tensor whose blocks of zeros are skipped: every value kept or
     * rounded as fx_requant does, the saturations counted, zeros still 0 */
    {
        const int64_t big[1] = {20000};
        tensor_t *z = tensor_new(FMT_DFP16, 1, big);
        int16_t *m = calloc(20000, sizeof *m), *back = calloc(20000, sizeof *back);
        CHECK(z && m && back, "alloc");
        for (int64_t i = 9000; i < 9100; i++) m[i] = (int16_t)(i - 9050); /* in block 2 */
        m[19999] = 30001;                                                   /* the last block */
        m[4095] = -3;                                                       /* block 0's end */
        CHECK_STATUS(tensor_set_raw(z, m), FX_OK);
        const int ez = tensor_exp(z);
        CHECK_STATUS(tensor_set_exp(z, ez + 1), FX_OK); /* halves: ties to even */
        CHECK_STATUS(tensor_get_raw(z, back), FX_OK);
        int bad = 0;
        for (int64_t i = 0; i < 20000; i++) {
            const int32_t q = m[i] >> 1, r = m[i] & 1; /* floor, remainder */
            const int32_t want = r && (q & 1) ? q + 1 : q;
            bad += back[i] != want;
        }
        CHECK(bad == 0, "rescale by one step: %d values wrong", bad);
        CHECK_STATUS(tensor_set_exp(z, ez), FX_OK); /* doubles: 15000 (30001 / 2) -> 30000 */
        CHECK_STATUS(tensor_stat(z, "saturated", &v), FX_OK);
        CHECK(v == 0, "no saturation expected: %g", v);
        CHECK_STATUS(tensor_set_exp(z, ez - 1), FX_OK); /* 60000: saturates, once */
        CHECK_STATUS(tensor_stat(z, "saturated", &v), FX_OK);
        CHECK(v == 1, "one saturation expected: %g", v);
        free(m);
        free(back);
        tensor_free(z);
    }

    /* raw access: -32768 is not a mantissa */
    int16_t raw[4] = {1, 2, -32768, 4}, rb[4];
    CHECK_STATUS(tensor_set_raw(d, raw), FX_ERANGE);
    CHECK(msg_has("-32768"), "raw msg: %s", flexpoint_last_error());
    raw[2] = -32767;
    CHECK_STATUS(tensor_set_raw(d, raw), FX_OK);
    CHECK_STATUS(tensor_get_raw(d, rb), FX_OK);
    CHECK(memcmp(raw, rb, sizeof raw) == 0, "raw round trip");

    /* NaN / Inf data is counted, never an error */
    float bad[4] = {NAN, INFINITY, -INFINITY, 1.0f};
    CHECK_STATUS(tensor_from_f32(d, bad), FX_OK);
    CHECK_STATUS(tensor_stat(d, "nonfinite", &v), FX_OK);
    CHECK(v == 3, "nonfinite count %g", v);
    tensor_to_f32(d, y);
    CHECK(y[0] == 0 && y[1] > 0 && y[2] < 0 && y[3] == 1.0f, "NaN->0, Inf->+-max");
    tensor_free(f);
    tensor_free(d);
    tensor_free(h);
}

int main(void)
{
    names();
    constructors();
    views();
    op_errors();
    shared_exponent_api();
    return test_finish("test_api");
}
