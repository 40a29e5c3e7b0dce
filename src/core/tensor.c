/* Tensor objects: creation, storage reference counting, accessors, raw access. */
#include "internal.h"
#include "backend.h"
#include "../autoflex/trace.h"
#include "device_backend.h"
#include "dispatch.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fx_alloc_array's checks: whether n elements of sz bytes may be allocated (n 0 counting as
 * 1, so that a valid pointer is always handed out) */
static bool fx_alloc_ok(int64_t n, size_t sz)
{
    if (n < 0 || sz == 0) return false;
    if (n == 0) n = 1;
    return (uint64_t)n <= (uint64_t)(SIZE_MAX / sz) && (uint64_t)n * sz <= ((uint64_t)1 << 46);
}

void *fx_alloc_array(int64_t n, size_t sz)
{
    return fx_alloc_ok(n, sz) ? malloc((size_t)(n ? n : 1) * sz) : NULL;
}

/* The same, zero-filled by calloc: a large block arrives as untouched zero pages, faulted in
 * when first written, so a tensor whose block fx_tensor_attach_block replaces at once costs
 * no page faults. */
static void *fx_alloc_array_zero(int64_t n, size_t sz)
{
    return fx_alloc_ok(n, sz) ? calloc((size_t)(n ? n : 1), sz) : NULL;
}

int64_t fx_numel_of(int ndim, const int64_t *shape)
{
    /* a zero anywhere first: the product of the other sizes need not fit */
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) return 0;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

char *fx_dims_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, n, "[");
    for (int i = 0; shape && i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

char *fx_shape_str(const tensor_t *t, char *buf, size_t n)
{
    return fx_dims_str(t ? t->ndim : 0, t ? t->shape : NULL, buf, n);
}

int fx_shape_layout(const char *func, fmt_t fmt, int ndim, const int64_t *shape, int64_t *numel,
                    int64_t *strides)
{
    if (ndim < 1 || ndim > FX_MAX_DIMS)
        return fx_error(FX_EINVAL, func, "ndim=%d is outside [1, %d]", ndim, FX_MAX_DIMS);
    if (!shape) return fx_error(FX_EINVAL, func, "shape is NULL");
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return fx_error(FX_EINVAL, func, "shape[%d]=%lld is negative", i,
                            (long long)shape[i]);
    /* Row-major strides treat a size-0 dimension as size 1, so they (and every offset a view
     * can reach) stay below the product of the non-zero sizes: that product, in bytes, must
     * fit int64 even when the element count is 0. */
    int64_t s = 1, st[FX_MAX_DIMS];
    bool over = false;
    for (int i = ndim - 1; i >= 0; i--) {
        st[i] = s;
        if (!over) over = fx_mul_overflows(s, shape[i] > 0 ? shape[i] : 1, &s);
    }
    if (!over) over = fx_mul_overflows(s, (int64_t)fmt_elem_size(fmt), &s);
    if (over) {
        char b[200];
        return fx_error(FX_ENOMEM, func, "size overflows: the non-zero sizes of shape %s (%s) "
                        "multiply beyond int64 bytes, so its strides or offsets would overflow",
                        fx_dims_str(ndim, shape, b, sizeof b), fmt_name(fmt));
    }
    *numel = fx_numel_of(ndim, shape);
    if (strides) memcpy(strides, st, (size_t)ndim * sizeof *st);
    return FX_OK;
}

tensor_t *fx_tensor_create(fmt_t fmt, int ndim, const int64_t *shape, int device,
                           const char *func)
{
    if (!fx_fmt_valid((int)fmt)) {
        fx_error(FX_EFORMAT, func, "format %d is not a known format (0..%d)", (int)fmt,
                 FMT_COUNT - 1);
        return NULL;
    }
    int64_t numel = 0, strides[FX_MAX_DIMS];
    if (fx_shape_layout(func, fmt, ndim, shape, &numel, strides) != FX_OK) return NULL;
    if (numel > FX_NUMEL_MAX) {
        char b[200];
        fx_error(FX_ENOMEM, func, "shape %s has %lld elements: the element count overflows the "
                 "limit 2^46", fx_dims_str(ndim, shape, b, sizeof b), (long long)numel);
        return NULL;
    }
    tensor_t *t = calloc(1, sizeof *t);
    fx_storage *st = calloc(1, sizeof *st);
    void *data = NULL;
    if (t && st && device >= 0) {
        /* device memory: fx_device_alloc_zero sets its own message (no CUDA, no device, OOM) */
        size_t bytes = (size_t)(numel ? numel : 1) * fmt_elem_size(fmt);
        if (fx_device_alloc_zero(device, bytes, &data, func) != FX_OK) {
            free(t);
            free(st);
            return NULL;
        }
    } else if (t && st) {
        data = fx_alloc_array_zero(numel, fmt_elem_size(fmt));
    }
    if (!t || !st || !data) {
        free(t);
        free(st);
        free(data);
        fx_error(FX_ENOMEM, func, "cannot allocate %lld elements of %s", (long long)numel,
                 fmt_name(fmt));
        return NULL;
    }
    st->on_device = device >= 0;
    st->device = device >= 0 ? device : 0;
    st->data = data;
    st->numel = numel;
    st->refcount = 1;
    st->fmt = fmt;
    if (fmt == FMT_FLEX16_5) {
        fx_autoflex_config cfg;
        fx_af_default_config(&cfg);
        fx_af_reset(&st->af, &cfg);
        st->win_lo = -31;
        st->win_hi = 0;
        st->exp = fx_clamp_exp(cfg.init_exp, st->win_lo, st->win_hi, NULL);
    } else if (fmt == FMT_DFP16) {
        st->win_lo = FX_DFP_EXP_MIN;
        st->win_hi = FX_DFP_EXP_MAX;
        st->exp = 0;
    }
    t->fmt = fmt;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    t->offset = 0;
    t->st = st;
    return t;
}

tensor_t *tensor_new(fmt_t fmt, int ndim, const int64_t *shape)
{
    return fx_tensor_create(fmt, ndim, shape, -1, __func__);
}

int tensor_device(const tensor_t *t)
{
    if (!t) return FX_FAIL(FX_EINVAL, "tensor is NULL");
    return t->st->on_device ? t->st->device : -1;
}

int fx_need_host(const tensor_t *t, const char *what, int code, const char *hint,
                 const char *func)
{
    if (!t->st->on_device) return FX_OK;
    return fx_error(code, func, "%s lives on CUDA device %d; %s", what, t->st->device, hint);
}

static void fx_storage_release(fx_storage *st)
{
    if (__atomic_sub_fetch(&st->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
        if (st->pending) st->pending->ops->destroy(st->pending);
        fx_trace_free(&st->trace);
        if (st->on_device)
            fx_device_free(st->device, st->data);
        else
            free(st->data);
        free(st);
    }
}

void fx_storage_retain(fx_storage *st) { __atomic_add_fetch(&st->refcount, 1, __ATOMIC_RELAXED); }

/* The bytes of a host storage's block (fx_alloc_array's one element for an empty tensor) */
static size_t fx_storage_bytes(const fx_storage *st)
{
    return (size_t)(st->numel ? st->numel : 1) * fmt_elem_size(st->fmt);
}

void *fx_tensor_detach_block(tensor_t *t, size_t *bytes)
{
    fx_storage *st = t ? t->st : NULL;
    /* a host storage's pending write (fx_store_defer_host_writes) has written its values and
     * waits only for its statistics, which a tensor about to be freed never settles */
    if (!st || st->on_device || __atomic_load_n(&st->refcount, __ATOMIC_ACQUIRE) != 1)
        return NULL;
    void *p = st->data;
    *bytes = fx_storage_bytes(st);
    st->data = NULL;
    return p;
}

int fx_tensor_attach_block(tensor_t *t, void *block, size_t bytes)
{
    fx_storage *st = t ? t->st : NULL;
    if (!st || !block || st->on_device || st->pending || st->writes ||
        __atomic_load_n(&st->refcount, __ATOMIC_ACQUIRE) != 1 ||
        bytes != fx_storage_bytes(st))
        return 0;
    free(st->data);
    st->data = block;
    return 1;
}

void tensor_free(tensor_t *t)
{
    if (!t) return;
    fx_storage_release(t->st);
    free(t);
}

int64_t tensor_numel(const tensor_t *t)
{
    if (!t) return FX_FAIL(-1, "tensor is NULL");
    return fx_numel_of(t->ndim, t->shape);
}

int tensor_ndim(const tensor_t *t) { return t ? t->ndim : FX_FAIL(FX_EINVAL, "tensor is NULL"); }

const int64_t *tensor_shape(const tensor_t *t)
{
    if (!t) { FX_FAIL(FX_EINVAL, "tensor is NULL"); return NULL; }
    return t->shape;
}

const int64_t *tensor_strides(const tensor_t *t)
{
    if (!t) { FX_FAIL(FX_EINVAL, "tensor is NULL"); return NULL; }
    return t->strides;
}

fmt_t tensor_fmt(const tensor_t *t)
{
    if (!t) return (fmt_t)FX_FAIL(FX_EINVAL, "tensor is NULL");
    return t->fmt;
}

bool fx_tensor_is_contiguous(const tensor_t *t)
{
    /* an empty view holds no element to be out of place, whatever its strides */
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) return true;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

int tensor_is_contiguous(const tensor_t *t)
{
    if (!t) return FX_FAIL(FX_EINVAL, "tensor is NULL");
    return fx_tensor_is_contiguous(t) ? 1 : 0;
}

bool fx_tensor_covers_storage(const tensor_t *t)
{
    return t->offset == 0 && fx_tensor_is_contiguous(t) &&
           fx_numel_of(t->ndim, t->shape) == t->st->numel;
}

void *fx_tensor_base(const tensor_t *t)
{
    return (char *)t->st->data + (size_t)t->offset * fmt_elem_size(t->fmt);
}

void *tensor_data(tensor_t *t)
{
    if (!t) { FX_FAIL(FX_EINVAL, "tensor is NULL"); return NULL; }
    if (fx_need_host(t, "the tensor", FX_EINVAL,
                     "its device memory is not addressable from the host (tensor_to_host, "
                     "flexpoint_gpu.h)", __func__))
        return NULL;
    return fx_tensor_base(t);
}

/* One run of n elements of size es at element stride `stride` in the view, to or from
 * consecutive elements of buf. Typed loops for the element sizes of the formats (a memcpy call
 * per 2- or 4-byte element cost more than the copy); a stride-0 run read from a broadcast view
 * is a fill, a unit-stride run one memcpy. */
#define FX_RUN_COPY(T)                                                                         \
    do {                                                                                       \
        T *v = (T *)view;                                                                      \
        T *c = (T *)buf;                                                                       \
        if (to_view) {                                                                         \
            for (int64_t i = 0; i < n; i++) memcpy(&v[i * stride], &c[i], sizeof(T));          \
        } else if (stride == 0) {                                                              \
            T x;                                                                               \
            memcpy(&x, v, sizeof(T));                                                          \
            for (int64_t i = 0; i < n; i++) memcpy(&c[i], &x, sizeof(T));                      \
        } else {                                                                               \
            for (int64_t i = 0; i < n; i++) memcpy(&c[i], &v[i * stride], sizeof(T));          \
        }                                                                                      \
    } while (0)

static void fx_copy_run(char *view, char *buf, int64_t n, int64_t stride, size_t es, int to_view)
{
    if (stride == 1) {
        if (to_view) memmove(view, buf, (size_t)n * es);
        else memmove(buf, view, (size_t)n * es);
        return;
    }
    switch (es) {
    case 2: FX_RUN_COPY(uint16_t); break;
    case 4: FX_RUN_COPY(uint32_t); break;
    default:
        for (int64_t i = 0; i < n; i++) {
            char *p = view + (size_t)(i * stride) * es;
            if (to_view) memcpy(p, buf + (size_t)i * es, es);
            else memcpy(buf + (size_t)i * es, p, es);
        }
    }
}
#undef FX_RUN_COPY

/* Threads for copying n elements of es bytes: one below 2^17 elements (the threads' start-up
 * costs more), else the library's count. */
static int fx_copy_threads(int64_t n)
{
    return n >= ((int64_t)1 << 17) ? flexpoint_num_threads() : 1;
}

static void fx_strided_walk(const tensor_t *t, void *buf, int to_view, fx_gather_run_fn fn,
                            const void *ctx);

/* Visit every element of a view in row-major order, copying elem_size bytes between the view
 * and a contiguous buffer. to_view selects the direction. Adjacent dimensions that step
 * through memory as one (stride[d] == shape[d+1] * stride[d+1], e.g. the trailing stride-0
 * dimensions of a per-channel broadcast) are merged first, so runs are as long as possible.
 * Large copies run on the threads (the attention's head views are gathered this way before
 * every batched product): a contiguous one in equal slices when the two ranges do not
 * overlap, a strided gather (to_view 0) run by run; a scatter into a view stays on one
 * thread, as a view with stride-0 dimensions would have threads write one element. */
void fx_strided_copy(const tensor_t *t, void *buf, int to_view)
{
    fx_strided_walk(t, buf, to_view, NULL, NULL);
}

void fx_strided_gather_with(const tensor_t *t, void *buf, fx_gather_run_fn fn, const void *ctx)
{
    fx_strided_walk(t, buf, 0, fn, ctx);
}

/* fx_strided_copy, or with fn (a gather only) each run mapped by fn instead of copied. */
static void fx_strided_walk(const tensor_t *t, void *buf, int to_view, fx_gather_run_fn fn,
                            const void *ctx)
{
    size_t es = fmt_elem_size(t->fmt);
    int64_t n = fx_numel_of(t->ndim, t->shape);
    if (n == 0) return;
    char *base = fx_tensor_base(t);
    if (fx_tensor_is_contiguous(t) && !fn) {
        char *dst = to_view ? base : (char *)buf;
        const char *src = to_view ? (const char *)buf : base;
        const size_t bytes = (size_t)n * es;
        const uintptr_t d = (uintptr_t)dst, o = (uintptr_t)src;
        if (d + bytes <= o || o + bytes <= d)
            fx_par_memcpy(dst, src, bytes);
        else
            memmove(dst, src, bytes);
        return;
    }
    int64_t shape[FX_MAX_DIMS], strides[FX_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 1) continue; /* a unit dimension never moves the position */
        if (nd > 0 && strides[nd - 1] == t->shape[d] * t->strides[d]) {
            shape[nd - 1] *= t->shape[d];
            strides[nd - 1] = t->strides[d];
        } else {
            shape[nd] = t->shape[d];
            strides[nd] = t->strides[d];
            nd++;
        }
    }
    if (nd == 0) { /* a single element */
        shape[0] = 1;
        strides[0] = 1;
        nd = 1;
    }
    const int64_t inner = shape[nd - 1], inner_stride = strides[nd - 1], runs = n / inner;
    const int nt = fx_copy_threads(n);
    (void)nt;
    if (!to_view && nt > 1 && runs > 1) {
        char *b = buf;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
        for (int64_t r = 0; r < runs; r++) {
            int64_t off = 0, rest = r; /* run r's position: its index over the outer dimensions */
            for (int d = nd - 2; d >= 0; d--) {
                off += (rest % shape[d]) * strides[d];
                rest /= shape[d];
            }
            if (fn)
                fn(ctx, base + (size_t)off * es, inner_stride, b + (size_t)(r * inner) * es, inner);
            else
                fx_copy_run(base + (size_t)off * es, b + (size_t)(r * inner) * es, inner,
                            inner_stride, es, 0);
        }
        return;
    }
    int64_t idx[FX_MAX_DIMS] = {0};
    char *b = buf;
    for (int64_t done = 0; done < n; done += inner) {
        int64_t off = 0;
        for (int d = 0; d < nd - 1; d++) off += idx[d] * strides[d];
        if (fn) fn(ctx, base + (size_t)off * es, inner_stride, b, inner);
        else fx_copy_run(base + (size_t)off * es, b, inner, inner_stride, es, to_view);
        b += (size_t)inner * es;
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
}

int tensor_get_raw(const tensor_t *t, void *dst)
{
    if (!t || !dst) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "tensor" : "dst");
    int rc = fx_need_host(t, "the tensor", FX_EINVAL,
                          "copy it to the host first (tensor_to_host, flexpoint_gpu.h)", __func__);
    if (rc) return rc;
    fx_strided_copy(t, dst, 0);
    return FX_OK;
}

int tensor_set_raw(tensor_t *t, const void *src)
{
    if (!t || !src) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "tensor" : "src");
    int rc = fx_need_host(t, "the tensor", FX_EINVAL,
                          "write a host tensor and copy it (tensor_copy_to_device, "
                          "flexpoint_gpu.h)", __func__);
    if (rc) return rc;
    int64_t n = fx_numel_of(t->ndim, t->shape);
    if (fmt_is_shared_exponent(t->fmt)) {
        const int16_t *m = src;
        for (int64_t i = 0; i < n; i++) {
            int16_t v;
            memcpy(&v, m + i, sizeof v);
            if (v < -FX_MANT_MAX)
                return FX_FAIL(FX_ERANGE, "element %lld is %d; %s mantissas lie in "
                               "[-32767, 32767]", (long long)i, v, fmt_name(t->fmt));
        }
    }
    fx_strided_copy(t, (void *)src, 1);
    return FX_OK;
}

int fx_storage_copy_exp_state(fx_storage *d, fx_storage *s, const char *func)
{
    if (!fmt_is_shared_exponent(s->fmt)) return FX_OK;
    int rc = fx_storage_settle(s, func);
    if (!rc) rc = fx_storage_settle(d, func);
    if (rc) return rc;
    d->exp = s->exp;
    d->win_lo = s->win_lo;
    d->win_hi = s->win_hi;
    d->rounding = s->rounding;
    d->seed = s->seed;
    d->write_counter = s->write_counter;
    d->af = s->af;
    d->last = s->last;
    d->writes = s->writes;
    d->overflows = s->overflows;
    d->clamped_total = s->clamped_total;
    d->nonfinite_total = s->nonfinite_total;
    return FX_OK;
}
