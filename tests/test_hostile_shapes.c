/* Hostile sizes, dimensions, starts, steps and flags against the constructors, the views and
 * the training ops' flag arguments. Built with -fsanitize=address,undefined and
 * -fno-sanitize-recover=all in CI, so an overflow in any size, stride or offset computation
 * aborts the program rather than passing unnoticed.
 *
 * Every refused call must return the documented status (NULL for constructors and views), set
 * the same status as flexpoint_last_status(), and leave a message that names the function and
 * the offending value; the message is cleared before each call, so a stale one cannot pass.
 * Valid edge cases (empty tensors beside huge sizes, empty and one-element slices, huge steps)
 * must succeed with the right shape, strides and values.
 *
 * The rule for sizes (include/flexpoint.h): a shape is refused with FX_EINVAL for ndim outside
 * [1, FX_MAX_DIMS], a NULL shape or a negative size (in any position, whatever else the shape
 * holds), and with FX_ENOMEM when its non-zero sizes multiply, in bytes, beyond int64 (its
 * strides and offsets would overflow; a zero size elsewhere does not save it); tensor_new
 * also refuses more than 2^46 elements (FX_ENOMEM), tensor_view_reshape another element count
 * (FX_ESHAPE). The expectations below are computed independently, in 128-bit arithmetic.
 * No case asks the library to allocate more than a few bytes: a shape without a zero size that
 * the rule accepts is never passed with huge sizes. */
#include "flexpoint.h"
#include "flexpoint_gpu.h"
#include "flexpoint_nn.h"
#include "testutil.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define H40 ((int64_t)1 << 40)
#define NUMEL_LIMIT ((int64_t)1 << 46)

static int have_device;

/* The message after a refused call: non-empty, naming func and (when given) needle. */
static void check_message(const char *what, const char *func, const char *needle)
{
    const char *m = flexpoint_last_error();
    CHECK(m[0] != '\0', "%s: empty message", what);
    CHECK(strstr(m, func) != NULL, "%s: message '%s' does not name %s", what, m, func);
    if (needle)
        CHECK(strstr(m, needle) != NULL, "%s: message '%s' does not mention '%s'", what, m,
              needle);
}

static void expect_null(tensor_t *got, int want, const char *func, const char *needle,
                        const char *what)
{
    CHECK(got == NULL, "%s: succeeded, want %s", what, flexpoint_status_str(want));
    CHECK(flexpoint_last_status() == want, "%s: status %s, want %s (%s)", what,
          flexpoint_status_str(flexpoint_last_status()), flexpoint_status_str(want),
          flexpoint_last_error());
    if (!got) check_message(what, func, needle);
    tensor_free(got);
}

static void expect_status(int got, int want, const char *func, const char *needle,
                          const char *what)
{
    CHECK(got == want, "%s: returned %d (%s), want %s (%s)", what, got,
          flexpoint_status_str(got), flexpoint_status_str(want), flexpoint_last_error());
    CHECK(flexpoint_last_status() == want, "%s: last status %s, want %s", what,
          flexpoint_status_str(flexpoint_last_status()), flexpoint_status_str(want));
    check_message(what, func, needle);
}

/* Clear the message, evaluate the call, then check it (the clear must come first). */
#define REFUSED_PTR(call, want, func, needle, ...)                                          \
    do {                                                                                    \
        char what_[320];                                                                    \
        snprintf(what_, sizeof what_, __VA_ARGS__);                                         \
        flexpoint_clear_error();                                                            \
        tensor_t *got_ = (call);                                                            \
        expect_null(got_, (want), (func), (needle), what_);                                 \
    } while (0)
#define REFUSED_INT(call, want, func, needle, ...)                                          \
    do {                                                                                    \
        char what_[320];                                                                    \
        snprintf(what_, sizeof what_, __VA_ARGS__);                                         \
        flexpoint_clear_error();                                                            \
        int got_ = (call);                                                                  \
        expect_status(got_, (want), (func), (needle), what_);                               \
    } while (0)

static const char *dims_str(int nd, const int64_t *s, char *buf, size_t n)
{
    size_t u = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < nd && u < n; i++)
        u += (size_t)snprintf(buf + u, n - u, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (u < n) snprintf(buf + u, n - u, "]");
    return buf;
}

/* What the rule above says about a shape whose sizes are all >= 0. */
enum { REF_OK, REF_SIZE_OVERFLOW, REF_TOO_MANY, REF_WOULD_ALLOCATE };
static int ref_verdict(int nd, const int64_t *s, size_t es)
{
    unsigned __int128 bytes = es, elems = 1;
    bool zero = false;
    for (int i = 0; i < nd; i++) {
        if (s[i] == 0) {
            zero = true;
            continue;
        }
        bytes *= (uint64_t)s[i]; /* < 2^63 * 2^63: no 128-bit wrap */
        if (bytes > (unsigned __int128)INT64_MAX) return REF_SIZE_OVERFLOW;
        elems *= (uint64_t)s[i];
    }
    if (zero) return REF_OK;
    if (elems > (unsigned __int128)NUMEL_LIMIT) return REF_TOO_MANY;
    return elems > 4096 ? REF_WOULD_ALLOCATE : REF_OK;
}

/* A valid empty (or small) tensor: shape kept, row-major strides with a size 0 stepping as a
 * size 1, contiguous, and every whole-tensor access works. */
static void check_valid_tensor(tensor_t *t, fmt_t fmt, int nd, const int64_t *s,
                               const char *what)
{
    CHECK(t != NULL, "%s: refused (%s)", what, flexpoint_last_error());
    if (!t) return;
    CHECK(tensor_ndim(t) == nd && tensor_fmt(t) == fmt, "%s: ndim/fmt", what);
    int64_t n = 1, stride = 1;
    for (int i = nd - 1; i >= 0; i--) {
        CHECK(tensor_shape(t)[i] == s[i], "%s: shape[%d]=%lld", what, i,
              (long long)tensor_shape(t)[i]);
        CHECK(tensor_strides(t)[i] == stride, "%s: strides[%d]=%lld, want %lld", what, i,
              (long long)tensor_strides(t)[i], (long long)stride);
        stride *= s[i] > 0 ? s[i] : 1;
    }
    for (int i = 0; i < nd; i++) n = s[i] == 0 ? 0 : n * s[i];
    CHECK(tensor_numel(t) == n, "%s: numel %lld, want %lld", what, (long long)tensor_numel(t),
          (long long)n);
    CHECK(tensor_is_contiguous(t) == 1, "%s: not contiguous", what);
    if (tensor_device(t) < 0) {
        float buf[4096];
        uint32_t raw[4096]; /* room for 4-byte elements */
        CHECK(tensor_data(t) != NULL, "%s: no data pointer", what);
        CHECK(tensor_to_f32(t, buf) == FX_OK, "%s: to_f32: %s", what, flexpoint_last_error());
        CHECK(tensor_from_f32(t, buf) == FX_OK, "%s: from_f32: %s", what,
              flexpoint_last_error());
        CHECK(tensor_get_raw(t, raw) == FX_OK, "%s: get_raw", what);
    }
}

/* tensor_new (and tensor_new_device) on one shape, checked against ref_verdict. */
static void new_case(fmt_t fmt, int nd, const int64_t *s)
{
    char d[256], what[320];
    dims_str(nd, s, d, sizeof d);
    const int v = ref_verdict(nd, s, fmt_elem_size(fmt));
    if (v == REF_WOULD_ALLOCATE) return;
    snprintf(what, sizeof what, "tensor_new(%s, %s)", fmt_name(fmt), d);
    if (v == REF_OK) {
        flexpoint_clear_error();
        tensor_t *t = tensor_new(fmt, nd, s);
        check_valid_tensor(t, fmt, nd, s, what);
        tensor_free(t);
    } else {
        REFUSED_PTR(tensor_new(fmt, nd, s), FX_ENOMEM, "tensor_new",
                    v == REF_SIZE_OVERFLOW ? "size overflows" : "overflow", "%s", what);
        CHECK(strstr(flexpoint_last_error(), d) != NULL, "%s: message '%s' lacks the sizes",
              what, flexpoint_last_error());
    }
    /* the device constructor validates the same way; without a device it says so */
    flexpoint_clear_error();
    tensor_t *t = tensor_new_device(fmt, nd, s);
    if (!have_device) {
        expect_null(t, FX_EDEVICE, "tensor_new_device", NULL, what);
    } else if (v == REF_OK) {
        check_valid_tensor(t, fmt, nd, s, what);
        CHECK(t == NULL || tensor_device(t) >= 0, "%s: not on the device", what);
        tensor_free(t);
    } else {
        expect_null(t, FX_ENOMEM, "tensor_new_device", "overflow", what);
    }
}

static void constructors(void)
{
    const int64_t ones[FX_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 1, 1};
    const int bad_nd[] = {0, -1, INT_MIN, FX_MAX_DIMS + 1, INT_MAX};
    for (int f = 0; f < FMT_COUNT; f++) {
        const fmt_t fmt = (fmt_t)f;
        for (size_t i = 0; i < sizeof bad_nd / sizeof *bad_nd; i++) {
            char needle[32];
            snprintf(needle, sizeof needle, "ndim=%d", bad_nd[i]);
            REFUSED_PTR(tensor_new(fmt, bad_nd[i], ones), FX_EINVAL, "tensor_new", needle,
                        "tensor_new(%s, ndim %d)", fmt_name(fmt), bad_nd[i]);
            REFUSED_PTR(tensor_new(fmt, bad_nd[i], NULL), FX_EINVAL, "tensor_new", needle,
                        "tensor_new(%s, ndim %d, NULL)", fmt_name(fmt), bad_nd[i]);
        }
        for (int nd = 1; nd <= FX_MAX_DIMS; nd++)
            REFUSED_PTR(tensor_new(fmt, nd, NULL), FX_EINVAL, "tensor_new", "shape is NULL",
                        "tensor_new(%s, %d, NULL)", fmt_name(fmt), nd);
        /* a negative size anywhere, beside zeros and huge sizes anywhere: always FX_EINVAL */
        const int64_t negs[] = {-1, INT64_MIN, -H40};
        const int64_t others[] = {1, 0, H40, INT64_MAX};
        for (int nd = 1; nd <= FX_MAX_DIMS; nd++)
            for (int q = 0; q < nd; q++)
                for (size_t ni = 0; ni < sizeof negs / sizeof *negs; ni++)
                    for (size_t oi = 0; oi < sizeof others / sizeof *others; oi++)
                        for (int z = -1; z < nd; z++) {
                            if (z == q) continue;
                            int64_t s[FX_MAX_DIMS];
                            for (int i = 0; i < nd; i++) s[i] = others[oi];
                            if (z >= 0) s[z] = 0;
                            s[q] = negs[ni];
                            char needle[64], d[256];
                            snprintf(needle, sizeof needle, "shape[%d]=%lld", q,
                                     (long long)negs[ni]);
                            REFUSED_PTR(tensor_new(fmt, nd, s), FX_EINVAL, "tensor_new",
                                        needle, "tensor_new(%s, %s)", fmt_name(fmt),
                                        dims_str(nd, s, d, sizeof d));
                        }
        /* huge sizes in every position with a zero in every position (or none) */
        const int64_t bigs[] = {H40, INT64_MAX, (int64_t)1 << 31, (int64_t)1 << 62, 3};
        for (int nd = 1; nd <= FX_MAX_DIMS; nd++)
            for (size_t bi = 0; bi < sizeof bigs / sizeof *bigs; bi++)
                for (int z = -1; z < nd; z++) {
                    int64_t s[FX_MAX_DIMS];
                    for (int i = 0; i < nd; i++) s[i] = bigs[bi];
                    if (z >= 0) s[z] = 0;
                    new_case(fmt, nd, s);
                    /* one huge size among ones, the zero elsewhere */
                    for (int h = 0; h < nd; h++) {
                        for (int i = 0; i < nd; i++) s[i] = 1;
                        if (z >= 0) s[z] = 0;
                        if (h != z) s[h] = bigs[bi];
                        new_case(fmt, nd, s);
                    }
                }
        /* the byte limit exactly: (INT64_MAX / es) non-zero elements fit, one more does not */
        const int64_t edge = INT64_MAX / (int64_t)fmt_elem_size(fmt);
        int64_t s2[2] = {0, edge};
        new_case(fmt, 2, s2);
        s2[1] = edge + 1;
        new_case(fmt, 2, s2);
        int64_t s3[3] = {edge, 1, 0};
        new_case(fmt, 3, s3);
        s3[0] = edge + 1;
        new_case(fmt, 3, s3);
        /* past the element limit (2^46 + 2^23 elements): refused before any allocation */
        int64_t s4[2] = {((int64_t)1 << 23) + 1, (int64_t)1 << 23};
        new_case(fmt, 2, s4);
        /* 2^46 elements pass the element limit but not the byte limit of the allocator, which
         * refuses them without asking the system */
        s4[0] = (int64_t)1 << 23;
        REFUSED_PTR(tensor_new(fmt, 2, s4), FX_ENOMEM, "tensor_new", "cannot allocate",
                    "tensor_new(%s, [2^23, 2^23])", fmt_name(fmt));
    }
    /* a zero first does not make the strides of the huge sizes after it fit */
    int64_t zero_first[3] = {0, H40, H40};
    REFUSED_PTR(tensor_new(FMT_FP32, 3, zero_first), FX_ENOMEM, "tensor_new", "size overflows",
                "tensor_new(fp32, [0, 2^40, 2^40])");
    CHECK(strstr(flexpoint_last_error(), "[0, 1099511627776, 1099511627776]") != NULL,
          "the message names the sizes: %s", flexpoint_last_error());
    REFUSED_PTR(tensor_new((fmt_t)FMT_COUNT, 1, ones), FX_EFORMAT, "tensor_new", "format",
                "tensor_new(bad format)");
    REFUSED_PTR(tensor_new((fmt_t)-1, 1, ones), FX_EFORMAT, "tensor_new", "format",
                "tensor_new(format -1)");
}

/* Whole-tensor ops on an empty tensor beside a huge size do nothing and succeed. */
static void empty_ops(void)
{
    int64_t s[2] = {0, H40}, r[1] = {0};
    tensor_t *a = tensor_new(FMT_FP16, 2, s), *b = tensor_new(FMT_FP32, 2, s);
    tensor_t *o = tensor_new(FMT_BF16, 2, s), *red = tensor_new(FMT_FP32, 1, r);
    CHECK(a && b && o && red, "empty tensors beside 2^40: %s", flexpoint_last_error());
    if (a && b && o && red) {
        CHECK(tensor_add(o, a, b) == FX_OK, "add of empty tensors: %s", flexpoint_last_error());
        CHECK(tensor_mul(o, a, b) == FX_OK, "mul of empty tensors: %s", flexpoint_last_error());
        CHECK(tensor_copy(b, a) == FX_OK, "copy of empty tensors: %s", flexpoint_last_error());
        CHECK(tensor_sum(red, a, 1) == FX_OK, "sum over the 2^40 axis: %s",
              flexpoint_last_error());
        tensor_t *bt = tensor_view_transpose(b, 0, 1);
        CHECK(bt && tensor_add(o, a, bt) != FX_OK, "mismatched shapes still refused");
        tensor_free(bt);
    }
    tensor_free(a);
    tensor_free(b);
    tensor_free(o);
    tensor_free(red);
}

static void reshapes(void)
{
    int64_t s46[2] = {4, 6};
    tensor_t *t = tensor_new(FMT_FP32, 2, s46);
    int64_t se[2] = {0, H40};
    tensor_t *e = tensor_new(FMT_FP16, 2, se);
    CHECK(t && e, "reshape sources");
    if (!t || !e) return;
    const int64_t ones[FX_MAX_DIMS] = {24, 1, 1, 1, 1, 1, 1, 1};
    const int64_t zeros[FX_MAX_DIMS] = {0, 1, 1, 1, 1, 1, 1, 1};

    REFUSED_PTR(tensor_view_reshape(NULL, 1, ones), FX_EINVAL, "tensor_view_reshape",
                "NULL", "reshape(NULL)");
    const int bad_nd[] = {0, -1, INT_MIN, FX_MAX_DIMS + 1, INT_MAX};
    for (size_t i = 0; i < sizeof bad_nd / sizeof *bad_nd; i++) {
        char needle[32];
        snprintf(needle, sizeof needle, "ndim=%d", bad_nd[i]);
        REFUSED_PTR(tensor_view_reshape(t, bad_nd[i], ones), FX_EINVAL, "tensor_view_reshape",
                    needle, "reshape(t, ndim %d)", bad_nd[i]);
        REFUSED_PTR(tensor_view_reshape(e, bad_nd[i], zeros), FX_EINVAL,
                    "tensor_view_reshape", needle, "reshape(e, ndim %d)", bad_nd[i]);
    }
    for (int nd = 1; nd <= FX_MAX_DIMS; nd++)
        REFUSED_PTR(tensor_view_reshape(t, nd, NULL), FX_EINVAL, "tensor_view_reshape",
                    "shape is NULL", "reshape(t, %d, NULL)", nd);

    /* every position of a negative, a zero and a huge size, from a full and an empty tensor */
    const int64_t vals[] = {-1, INT64_MIN, H40, INT64_MAX, (int64_t)1 << 31};
    for (int nd = 1; nd <= FX_MAX_DIMS; nd++)
        for (size_t vi = 0; vi < sizeof vals / sizeof *vals; vi++)
            for (int z = -1; z < nd; z++)
                for (int p = 0; p < nd; p++) {
                    if (p == z) continue;
                    int64_t s[FX_MAX_DIMS];
                    for (int i = 0; i < nd; i++) s[i] = vals[vi] < 0 ? H40 : vals[vi];
                    if (z >= 0) s[z] = 0;
                    s[p] = vals[vi];
                    char d[256], needle[64];
                    dims_str(nd, s, d, sizeof d);
                    for (int src = 0; src < 2; src++) {
                        const tensor_t *from = src ? e : t;
                        const int64_t have = src ? 0 : 24;
                        if (vals[vi] < 0) {
                            snprintf(needle, sizeof needle, "shape[%d]=%lld", p,
                                     (long long)vals[vi]);
                            REFUSED_PTR(tensor_view_reshape(from, nd, s), FX_EINVAL,
                                        "tensor_view_reshape", needle, "reshape(%s, %s)",
                                        src ? "e" : "t", d);
                            continue;
                        }
                        const int v = ref_verdict(nd, s, fmt_elem_size(tensor_fmt(from)));
                        int64_t n = -1; /* the element count where it fits */
                        if (v == REF_OK) {
                            n = 1;
                            for (int i = 0; i < nd; i++) n = s[i] == 0 ? 0 : n * s[i];
                        }
                        if (v == REF_SIZE_OVERFLOW) {
                            REFUSED_PTR(tensor_view_reshape(from, nd, s), FX_ENOMEM,
                                        "tensor_view_reshape", "size overflows",
                                        "reshape(%s, %s)", src ? "e" : "t", d);
                        } else if (v != REF_OK || n != have) {
                            REFUSED_PTR(tensor_view_reshape(from, nd, s), FX_ESHAPE,
                                        "tensor_view_reshape", "elements", "reshape(%s, %s)",
                                        src ? "e" : "t", d);
                        } else {
                            char what[320];
                            snprintf(what, sizeof what, "reshape(%s, %s)", src ? "e" : "t", d);
                            flexpoint_clear_error();
                            tensor_t *r = tensor_view_reshape(from, nd, s);
                            check_valid_tensor(r, tensor_fmt(from), nd, s, what);
                            tensor_free(r);
                        }
                    }
                }
    int64_t zero_first[3] = {0, H40, H40};
    REFUSED_PTR(tensor_view_reshape(e, 3, zero_first), FX_ENOMEM, "tensor_view_reshape",
                "[0, 1099511627776, 1099511627776]", "reshape(e, [0, 2^40, 2^40])");
    int64_t s25[2] = {5, 5};
    REFUSED_PTR(tensor_view_reshape(t, 2, s25), FX_ESHAPE, "tensor_view_reshape", "25",
                "reshape(t, [5, 5])");
    tensor_t *tr = tensor_view_transpose(t, 0, 1);
    int64_t s24[1] = {24};
    REFUSED_PTR(tensor_view_reshape(tr, 1, s24), FX_EINVAL, "tensor_view_reshape",
                "not contiguous", "reshape(transposed, [24])");
    tensor_free(tr);

    /* Empty views stacked without end (slice at the end, reshape, again) keep their offset:
     * nothing accumulates towards an overflow. */
    tensor_t *v = tensor_view_reshape(e, 2, se);
    void *base = tensor_data(e);
    for (int k = 0; k < 200 && v; k++) {
        int64_t sw[2] = {H40, 0};
        tensor_t *s1 = tensor_view_slice(v, 1, H40, H40, 1);
        tensor_t *r1 = s1 ? tensor_view_reshape(s1, 2, sw) : NULL;
        tensor_t *s2 = r1 ? tensor_view_slice(r1, 0, H40 - 1, H40, INT64_MAX) : NULL;
        tensor_free(v);
        v = s2 ? tensor_view_reshape(s2, 2, se) : NULL;
        tensor_free(s1);
        tensor_free(r1);
        tensor_free(s2);
    }
    CHECK(v != NULL && tensor_data(v) == base, "stacked empty views: %s",
          flexpoint_last_error());
    tensor_free(v);
    tensor_free(t);
    tensor_free(e);
}

static void transposes(void)
{
    int64_t s[2] = {4, 6};
    tensor_t *t = tensor_new(FMT_BF16, 2, s);
    REFUSED_PTR(tensor_view_transpose(NULL, 0, 1), FX_EINVAL, "tensor_view_transpose", "NULL",
                "transpose(NULL)");
    const int bad[] = {INT_MIN, INT_MIN + 1, -3, 2, 3, INT_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char needle[32];
        snprintf(needle, sizeof needle, "d0=%d", bad[i]);
        REFUSED_PTR(tensor_view_transpose(t, bad[i], 0), FX_EINVAL, "tensor_view_transpose",
                    needle, "transpose(t, %d, 0)", bad[i]);
        snprintf(needle, sizeof needle, "d1=%d", bad[i]);
        REFUSED_PTR(tensor_view_transpose(t, 1, bad[i]), FX_EINVAL, "tensor_view_transpose",
                    needle, "transpose(t, 1, %d)", bad[i]);
    }
    tensor_t *v = tensor_view_transpose(t, -1, -2);
    CHECK(v && tensor_shape(v)[0] == 6 && tensor_strides(v)[0] == 1, "transpose(-1, -2)");
    tensor_free(v);
    tensor_free(t);

    /* an 8-D empty tensor with huge sizes: every pair of dimensions swaps */
    int64_t s8[FX_MAX_DIMS] = {3, 1 << 20, 0, 1 << 20, 2, 1, 1 << 10, 5};
    tensor_t *e = tensor_new(FMT_FP32, FX_MAX_DIMS, s8);
    CHECK(e != NULL, "8-D empty tensor: %s", flexpoint_last_error());
    for (int a = -FX_MAX_DIMS; e && a < FX_MAX_DIMS; a++)
        for (int b = -FX_MAX_DIMS; b < FX_MAX_DIMS; b++) {
            tensor_t *w = tensor_view_transpose(e, a, b);
            const int ia = a < 0 ? a + FX_MAX_DIMS : a, ib = b < 0 ? b + FX_MAX_DIMS : b;
            CHECK(w && tensor_shape(w)[ia] == s8[ib] && tensor_shape(w)[ib] == s8[ia] &&
                      tensor_numel(w) == 0,
                  "transpose(e, %d, %d)", a, b);
            tensor_free(w);
        }
    tensor_free(e);
}

/* Number of indices start, start + step, ... below stop, computed without overflow. */
static int64_t ref_count(int64_t start, int64_t stop, int64_t step)
{
    if (stop <= start) return 0;
    int64_t n = 1, i = start;
    while (stop - i > step) { /* the next index, i + step, is below stop */
        i += step;
        n++;
    }
    return n;
}

static void slices(void)
{
    int64_t s[2] = {4, 6};
    tensor_t *t = tensor_new(FMT_FP32, 2, s);
    float x[24], y[24];
    for (int i = 0; i < 24; i++) x[i] = (float)i;
    CHECK(t && tensor_from_f32(t, x) == FX_OK, "slice source");
    if (!t) return;

    REFUSED_PTR(tensor_view_slice(NULL, 0, 0, 1, 1), FX_EINVAL, "tensor_view_slice", "NULL",
                "slice(NULL)");
    const int bad_dim[] = {INT_MIN, INT_MIN + 1, -3, 2, INT_MAX};
    for (size_t i = 0; i < sizeof bad_dim / sizeof *bad_dim; i++) {
        char needle[32];
        snprintf(needle, sizeof needle, "dim=%d", bad_dim[i]);
        REFUSED_PTR(tensor_view_slice(t, bad_dim[i], 0, 1, 1), FX_EINVAL, "tensor_view_slice",
                    needle, "slice(t, dim %d)", bad_dim[i]);
    }
    const int64_t bad_step[] = {0, -1, INT64_MIN, -H40};
    for (size_t i = 0; i < sizeof bad_step / sizeof *bad_step; i++) {
        char needle[48];
        snprintf(needle, sizeof needle, "step=%lld", (long long)bad_step[i]);
        REFUSED_PTR(tensor_view_slice(t, 1, 0, 6, bad_step[i]), FX_EINVAL, "tensor_view_slice",
                    needle, "slice(t, step %lld)", (long long)bad_step[i]);
    }
    const int64_t bad_range[][2] = {{-1, 6},        {INT64_MIN, 0},          {0, 7},
                                    {0, INT64_MAX}, {5, 4},                  {7, 7},
                                    {INT64_MAX, INT64_MAX}, {INT64_MIN, INT64_MAX},
                                    {6, INT64_MIN}, {-H40, H40}};
    for (size_t i = 0; i < sizeof bad_range / sizeof *bad_range; i++)
        for (int st = 0; st < 2; st++) {
            const int64_t step = st ? INT64_MAX : 1;
            char needle[64];
            snprintf(needle, sizeof needle, "slice [%lld, %lld)", (long long)bad_range[i][0],
                     (long long)bad_range[i][1]);
            REFUSED_PTR(tensor_view_slice(t, -1, bad_range[i][0], bad_range[i][1], step),
                        FX_EINVAL, "tensor_view_slice", needle, "slice(t, %lld, %lld, %lld)",
                        (long long)bad_range[i][0], (long long)bad_range[i][1],
                        (long long)step);
        }

    /* valid: every start/stop pair with small and huge steps, values read back */
    const int64_t steps[] = {1, 2, 5, 6, 7, H40, (int64_t)1 << 62, INT64_MAX - 1, INT64_MAX};
    for (int64_t start = 0; start <= 6; start++)
        for (int64_t stop = start; stop <= 6; stop++)
            for (size_t si = 0; si < sizeof steps / sizeof *steps; si++) {
                const int64_t step = steps[si], n = ref_count(start, stop, step);
                tensor_t *v = tensor_view_slice(t, 1, start, stop, step);
                CHECK(v && tensor_shape(v)[0] == 4 && tensor_shape(v)[1] == n,
                      "slice(t, 1, %lld, %lld, %lld): %s", (long long)start, (long long)stop,
                      (long long)step, flexpoint_last_error());
                if (v && n > 1)
                    CHECK(tensor_strides(v)[1] == step, "slice stride %lld, want %lld",
                          (long long)tensor_strides(v)[1], (long long)step);
                if (v && tensor_to_f32(v, y) == FX_OK)
                    for (int r = 0; r < 4; r++)
                        for (int64_t j = 0; j < n; j++)
                            CHECK(y[r * n + j] == x[r * 6 + start + j * step],
                                  "slice(t, 1, %lld, %lld, %lld)[%d][%lld]", (long long)start,
                                  (long long)stop, (long long)step, r, (long long)j);
                tensor_free(v);
            }
    /* a huge step on an already stepped view: its stride would overflow; one element left */
    tensor_t *s1 = tensor_view_slice(t, 1, 1, 6, 2); /* columns 1, 3, 5 */
    tensor_t *s2 = s1 ? tensor_view_slice(s1, 1, 1, 3, INT64_MAX) : NULL; /* column 3 */
    tensor_t *s3 = s2 ? tensor_view_slice(s2, 0, 0, 4, INT64_MAX / 2) : NULL; /* row 0 */
    CHECK(s3 && tensor_numel(s3) == 1, "stacked huge steps: %s", flexpoint_last_error());
    if (s3 && tensor_to_f32(s3, y) == FX_OK) CHECK(y[0] == 3.0f, "stacked slices read %g", y[0]);
    if (s2 && tensor_to_f32(s2, y) == FX_OK)
        for (int r = 0; r < 4; r++) CHECK(y[r] == x[r * 6 + 3], "column 3 row %d", r);
    float w4[4] = {-1, -2, -3, -4};
    CHECK(s2 && tensor_from_f32(s2, w4) == FX_OK && tensor_to_f32(t, y) == FX_OK &&
              y[3] == -1 && y[9] == -2 && y[15] == -3 && y[21] == -4 && y[2] == 2 && y[4] == 4,
          "writing through the stepped view");
    tensor_free(s1);
    tensor_free(s2);
    tensor_free(s3);

    /* empty tensors with huge sizes: slices anywhere, including at the end, stay empty views
     * of the same storage */
    int64_t se[3] = {0, (int64_t)1 << 30, (int64_t)1 << 31};
    tensor_t *e = tensor_new(FMT_FP16, 3, se);
    CHECK(e != NULL, "fp16 [0, 2^30, 2^31]: %s", flexpoint_last_error());
    if (e) {
        void *base = tensor_data(e);
        const int64_t cuts[][4] = {
            {1, 0, (int64_t)1 << 30, H40},        {1, ((int64_t)1 << 30) - 1, (int64_t)1 << 30, 1},
            {2, ((int64_t)1 << 31) - 1, (int64_t)1 << 31, INT64_MAX},
            {2, (int64_t)1 << 31, (int64_t)1 << 31, 1}, {2, 0, (int64_t)1 << 31, 3},
            {0, 0, 0, INT64_MAX},                 {-1, 5, 5, 1},
            {1, 0, (int64_t)1 << 30, INT64_MAX}};
        for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
            tensor_t *v = tensor_view_slice(e, (int)cuts[i][0], cuts[i][1], cuts[i][2], cuts[i][3]);
            CHECK(v && tensor_numel(v) == 0 && tensor_data(v) == base &&
                      tensor_is_contiguous(v) == 1,
                  "empty slice %zu: %s", i, flexpoint_last_error());
            tensor_t *tv = v ? tensor_view_transpose(v, 0, 2) : NULL;
            CHECK(tv && tensor_numel(tv) == 0, "transposed empty slice %zu", i);
            tensor_free(tv);
            tensor_free(v);
        }
        tensor_free(e);
    }
    /* an empty slice of a full tensor at every position, every step */
    for (int64_t k = 0; k <= 6; k++)
        for (size_t si = 0; si < sizeof steps / sizeof *steps; si++) {
            tensor_t *v = tensor_view_slice(t, 1, k, k, steps[si]);
            CHECK(v && tensor_numel(v) == 0 && tensor_shape(v)[1] == 0 &&
                      tensor_to_f32(v, y) == FX_OK,
                  "empty slice at %lld step %lld", (long long)k, (long long)steps[si]);
            tensor_free(v);
        }
    /* an 8-D tensor with a zero in every position: every dimension sliced at both ends */
    for (int z = 0; z < FX_MAX_DIMS; z++) {
        int64_t s8[FX_MAX_DIMS];
        for (int i = 0; i < FX_MAX_DIMS; i++) s8[i] = i == z ? 0 : (int64_t)1 << 7;
        tensor_t *e8 = tensor_new(FMT_BF16, FX_MAX_DIMS, s8);
        CHECK(e8 != NULL, "8-D with a zero at %d: %s", z, flexpoint_last_error());
        for (int d = 0; e8 && d < FX_MAX_DIMS; d++)
            for (int end = 0; end < 2; end++) {
                const int64_t a = end ? s8[d] : 0;
                tensor_t *v = tensor_view_slice(e8, d, a, s8[d], INT64_MAX);
                CHECK(v && tensor_numel(v) == 0 && tensor_shape(v)[d] == (end ? 0 : s8[d] > 0),
                      "8-D zero at %d, slice dim %d end %d", z, d, end);
                tensor_free(v);
            }
        tensor_free(e8);
    }
    tensor_free(t);
}

/* ---- training ops: flags are 0 or 1 ---------------------------------------------------- */

static const int BAD_FLAGS[] = {2, -1, INT_MIN, INT_MAX, 256};
#define NBAD ((int)(sizeof BAD_FLAGS / sizeof *BAD_FLAGS))

static void conv_flags(void)
{
    int64_t sx[4] = {1, 1, 3, 3}, sw[4] = {1, 1, 1, 1}, sb[3] = {1, 1, 1};
    tensor_t *x = tensor_new(FMT_FP32, 4, sx), *w = tensor_new(FMT_FP32, 4, sw);
    tensor_t *y = tensor_new(FMT_FP32, 4, sx), *b = tensor_new(FMT_FP32, 3, sb);
    float xv[9] = {-4, -3, -2, -1, 0, 1, 2, 3, 4}, wv = 1, bv = 0.5f, out[9];
    CHECK(x && w && y && b && tensor_from_f32(x, xv) == FX_OK && tensor_from_f32(w, &wv) == 0 &&
              tensor_from_f32(b, &bv) == FX_OK,
          "conv operands");
    for (int i = 0; i < NBAD; i++) {
        char needle[32];
        snprintf(needle, sizeof needle, "relu=%d", BAD_FLAGS[i]);
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            float sentinel[9];
            for (int k = 0; k < 9; k++) sentinel[k] = 7.0f;
            tensor_from_f32(y, sentinel);
            REFUSED_INT(tensor_conv2d_bias_relu(y, x, w, with_bias ? b : NULL, BAD_FLAGS[i], 1,
                                                1, 0, 0, 1, 1),
                        FX_EINVAL, "tensor_conv2d_bias_relu", needle, "conv relu=%d bias=%d",
                        BAD_FLAGS[i], with_bias);
            tensor_to_f32(y, out);
            for (int k = 0; k < 9; k++) CHECK(out[k] == 7.0f, "y written on failure");
        }
    }
    for (int relu = 0; relu < 2; relu++) {
        CHECK(tensor_conv2d_bias_relu(y, x, w, b, relu, 1, 1, 0, 0, 1, 1) == FX_OK,
              "conv relu=%d: %s", relu, flexpoint_last_error());
        tensor_to_f32(y, out);
        for (int k = 0; k < 9; k++) {
            const float want = relu && xv[k] + 0.5f < 0 ? 0.0f : xv[k] + 0.5f;
            CHECK(out[k] == want, "conv relu=%d y[%d]=%g, want %g", relu, k, out[k], want);
        }
    }
    tensor_free(x);
    tensor_free(w);
    tensor_free(y);
    tensor_free(b);
}

static void batchnorm_flags(void)
{
    int64_t sx[2] = {4, 2}, sc[1] = {2};
    tensor_t *x = tensor_new(FMT_FP32, 2, sx), *y = tensor_new(FMT_FP32, 2, sx);
    tensor_t *g = tensor_new(FMT_FP32, 1, sc), *b = tensor_new(FMT_FP32, 1, sc);
    float xv[8] = {1, 2, 3, 4, 5, 6, 7, 9}, gv[2] = {1, 1}, bv[2] = {0, 0};
    CHECK(x && y && g && b && tensor_from_f32(x, xv) == FX_OK && tensor_from_f32(g, gv) == 0 &&
              tensor_from_f32(b, bv) == FX_OK,
          "batchnorm operands");
    float rm[2] = {0.25f, 0.5f}, rv[2] = {1, 2}, sm[2] = {9, 9}, si[2] = {9, 9};
    for (int i = 0; i < NBAD; i++) {
        char needle[32];
        snprintf(needle, sizeof needle, "training=%d", BAD_FLAGS[i]);
        REFUSED_INT(tensor_batchnorm(y, x, g, b, rm, rv, sm, si, 0.1, 1e-5, BAD_FLAGS[i]),
                    FX_EINVAL, "tensor_batchnorm", needle, "batchnorm training=%d",
                    BAD_FLAGS[i]);
        CHECK(rm[0] == 0.25f && rm[1] == 0.5f && rv[0] == 1 && rv[1] == 2 && sm[0] == 9,
              "running statistics changed on failure");
    }
    CHECK(tensor_batchnorm(y, x, g, b, rm, rv, sm, si, 0.1, 1e-5, 1) == FX_OK && rm[0] != 0.25f,
          "batchnorm training=1: %s", flexpoint_last_error());
    CHECK(tensor_batchnorm(y, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 0) == FX_OK,
          "batchnorm training=0: %s", flexpoint_last_error());
    tensor_free(x);
    tensor_free(y);
    tensor_free(g);
    tensor_free(b);
}

static void optimiser_flags(void)
{
    int64_t s[1] = {3};
    tensor_t *w = tensor_new(FMT_BF16, 1, s), *g = tensor_new(FMT_FP32, 1, s);
    float wv[3] = {1, 2, 3}, gv[3] = {0.5f, -0.5f, 0.25f}, got[3];
    float mom[3] = {0}, m[3] = {0}, v[3] = {0};
    CHECK(w && g && tensor_from_f32(w, wv) == FX_OK && tensor_from_f32(g, gv) == FX_OK,
          "optimiser operands");
    for (int i = 0; i < NBAD; i++) {
        char needle[32];
        snprintf(needle, sizeof needle, "stochastic=%d", BAD_FLAGS[i]);
        REFUSED_INT(fx_sgd_step(w, g, NULL, mom, 0.1, 0.9, 0, 1, BAD_FLAGS[i], 1, 1), FX_EINVAL,
                    "fx_sgd_step", needle, "sgd stochastic=%d", BAD_FLAGS[i]);
        REFUSED_INT(fx_adam_step(w, g, NULL, m, v, 0.1, 0.9, 0.99, 1e-8, 0, 1, BAD_FLAGS[i], 1,
                                 1),
                    FX_EINVAL, "fx_adam_step", needle, "adam stochastic=%d", BAD_FLAGS[i]);
        tensor_to_f32(w, got);
        CHECK(got[0] == 1 && got[1] == 2 && got[2] == 3 && mom[0] == 0 && m[0] == 0 && v[0] == 0,
              "state changed on failure");
    }
    for (int st = 0; st < 2; st++) {
        CHECK(fx_sgd_step(w, g, NULL, mom, 0.1, 0.9, 0, 1, st, 1, 1) == FX_OK,
              "sgd stochastic=%d: %s", st, flexpoint_last_error());
        CHECK(fx_adam_step(w, g, NULL, m, v, 0.1, 0.9, 0.99, 1e-8, 0, 1, st, 1, 1) == FX_OK,
              "adam stochastic=%d: %s", st, flexpoint_last_error());
    }
    tensor_to_f32(w, got);
    CHECK(got[0] < 1 && got[1] > 2, "the steps moved w: %g %g", got[0], got[1]);
    tensor_free(w);
    tensor_free(g);
}

static void scaler_flags(void)
{
    fx_loss_scaler s;
    fx_loss_scaler_init(&s, 1);
    for (int i = 0; i < NBAD; i++) {
        char needle[32];
        snprintf(needle, sizeof needle, "found_inf=%d", BAD_FLAGS[i]);
        REFUSED_INT(fx_loss_scaler_update(&s, BAD_FLAGS[i]), FX_EINVAL, "fx_loss_scaler_update",
                    needle, "update found_inf=%d", BAD_FLAGS[i]);
        CHECK(s.scale == 65536.0 && s.good_steps == 0 && s.skipped_steps == 0 && s.enabled == 1,
              "scaler changed on failure");
    }
    CHECK(fx_loss_scaler_update(&s, 1) == 0 && s.scale == 32768.0, "found_inf=1 backs off");
    CHECK(fx_loss_scaler_update(&s, 0) == 1 && s.good_steps == 1, "found_inf=0 applies");

    /* a public field holding another value than 0 or 1 */
    int64_t sh[1] = {2};
    tensor_t *gr = tensor_new(FMT_FP32, 1, sh);
    float out[2];
    float *outs[1] = {out};
    const tensor_t *grads[1] = {gr};
    int found = -5;
    for (int i = 0; i < NBAD; i++) {
        fx_loss_scaler bad = s;
        bad.enabled = BAD_FLAGS[i];
        char needle[32];
        snprintf(needle, sizeof needle, "enabled=%d", BAD_FLAGS[i]);
        REFUSED_INT(fx_loss_scaler_update(&bad, 0), FX_EINVAL, "fx_loss_scaler_update", needle,
                    "update enabled=%d", BAD_FLAGS[i]);
        REFUSED_INT(fx_loss_scaler_unscale(&bad, grads, 1, outs, &found), FX_EINVAL,
                    "fx_loss_scaler_unscale", needle, "unscale enabled=%d", BAD_FLAGS[i]);
    }
    for (int en = 0; en < 2; en++) {
        fx_loss_scaler_init(&s, en);
        CHECK(fx_loss_scaler_unscale(&s, grads, 1, outs, &found) == FX_OK && found == 0,
              "unscale enabled=%d: %s", en, flexpoint_last_error());
        CHECK(fx_loss_scaler_update(&s, 0) == 1, "update enabled=%d", en);
    }
    tensor_free(gr);
}

int main(void)
{
    have_device = flexpoint_gpu_device() >= 0;
    flexpoint_clear_error();
    constructors();
    empty_ops();
    reshapes();
    transposes();
    slices();
    conv_flags();
    batchnorm_flags();
    optimiser_flags();
    scaler_flags();
    return test_finish("test_hostile_shapes");
}
