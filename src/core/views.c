/* Views: reshape, transpose and slice share storage and describe it with strides. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

void fx_storage_retain(fx_storage *st);

static tensor_t *fx_view_of(const tensor_t *t)
{
    tensor_t *v = malloc(sizeof *v);
    if (!v) return NULL;
    *v = *t;
    fx_storage_retain(t->st);
    return v;
}

tensor_t *tensor_view_reshape(const tensor_t *t, int ndim, const int64_t *shape)
{
    if (!t) { FX_FAIL(FX_EINVAL, "tensor is NULL"); return NULL; }
    int64_t n = 0, strides[FX_MAX_DIMS];
    if (fx_shape_layout(__func__, t->fmt, ndim, shape, &n, strides)) return NULL;
    int64_t have = fx_numel_of(t->ndim, t->shape);
    if (n != have) {
        char buf[160];
        FX_FAIL(FX_ESHAPE, "new shape has %lld elements but the tensor %s has %lld",
                (long long)n, fx_shape_str(t, buf, sizeof buf), (long long)have);
        return NULL;
    }
    if (!fx_tensor_is_contiguous(t)) {
        FX_FAIL(FX_EINVAL, "the tensor is not contiguous; copy it (tensor_copy) first");
        return NULL;
    }
    tensor_t *v = fx_view_of(t);
    if (!v) { FX_FAIL(FX_ENOMEM, "out of memory"); return NULL; }
    v->ndim = ndim;
    memcpy(v->shape, shape, (size_t)ndim * sizeof *shape);
    memcpy(v->strides, strides, (size_t)ndim * sizeof *strides);
    return v;
}

static int fx_norm_dim(const tensor_t *t, int d, const char *func, const char *what, int *out)
{
    int nd = d < 0 ? d + t->ndim : d;
    if (nd < 0 || nd >= t->ndim)
        return fx_error(FX_EINVAL, func, "%s=%d is out of range for a %d-D tensor", what, d,
                        t->ndim);
    *out = nd;
    return FX_OK;
}

tensor_t *tensor_view_transpose(const tensor_t *t, int d0, int d1)
{
    if (!t) { FX_FAIL(FX_EINVAL, "tensor is NULL"); return NULL; }
    int a = 0, b = 0;
    if (fx_norm_dim(t, d0, __func__, "d0", &a) || fx_norm_dim(t, d1, __func__, "d1", &b))
        return NULL;
    tensor_t *v = fx_view_of(t);
    if (!v) { FX_FAIL(FX_ENOMEM, "out of memory"); return NULL; }
    int64_t s = v->shape[a];
    v->shape[a] = v->shape[b];
    v->shape[b] = s;
    s = v->strides[a];
    v->strides[a] = v->strides[b];
    v->strides[b] = s;
    return v;
}

tensor_t *tensor_view_slice(const tensor_t *t, int dim, int64_t start, int64_t stop,
                            int64_t step)
{
    if (!t) { FX_FAIL(FX_EINVAL, "tensor is NULL"); return NULL; }
    int d = 0;
    if (fx_norm_dim(t, dim, __func__, "dim", &d)) return NULL;
    if (step < 1) {
        FX_FAIL(FX_EINVAL, "step=%lld must be >= 1", (long long)step);
        return NULL;
    }
    if (start < 0 || stop < start || stop > t->shape[d]) {
        FX_FAIL(FX_EINVAL, "slice [%lld, %lld) does not fit dimension %d of size %lld",
                (long long)start, (long long)stop, d, (long long)t->shape[d]);
        return NULL;
    }
    /* 0 <= start <= stop: the length cannot overflow, and neither can this count */
    const int64_t len = stop - start, n = len == 0 ? 0 : 1 + (len - 1) / step;
    int64_t shape[FX_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[d] = n;
    /* An empty view addresses nothing: its offset stays its parent's, so the offsets of empty
     * views stay inside their storage however many views are stacked. Otherwise the view
     * starts at an element of its parent, and with n >= 2 its stride times n - 1 spans parent
     * elements, so both fit; checked all the same. A dimension of one element never advances
     * the position, so where step * stride exceeds int64 it keeps the parent's stride. */
    const bool empty = fx_numel_of(t->ndim, shape) == 0;
    int64_t offset = t->offset, stride = t->strides[d], moved = 0;
    bool over = !empty && (fx_mul_overflows(start, t->strides[d], &moved) ||
                           fx_add_overflows(t->offset, moved, &offset));
    if (fx_mul_overflows(t->strides[d], step, &stride)) {
        stride = t->strides[d];
        if (n > 1) over = true;
    }
    if (over) {
        FX_FAIL(FX_ENOMEM, "size overflows: slice start=%lld step=%lld of dimension %d "
                "(stride %lld, offset %lld)", (long long)start, (long long)step, d,
                (long long)t->strides[d], (long long)t->offset);
        return NULL;
    }
    tensor_t *v = fx_view_of(t);
    if (!v) { FX_FAIL(FX_ENOMEM, "out of memory"); return NULL; }
    v->offset = offset;
    v->shape[d] = n;
    v->strides[d] = stride;
    return v;
}
