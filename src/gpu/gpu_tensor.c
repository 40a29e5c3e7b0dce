/* The public device API (include/flexpoint_gpu.h) of the CUDA build: device selection, device
 * tensors, host <-> device transfers, and the core's memory hooks (src/core/device_backend.h). */
#include "../core/dispatch.h"
#include "gpu.h"
#include "gpu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FX_OK when a device exists, else FX_EDEVICE with a message. */
static int fx_need_device(const char *func)
{
    if (fx_gr_device_count() > 0) return FX_OK;
    return fx_error(FX_EDEVICE, func, "no CUDA device is available (no GPU, no driver, or "
                    "CUDA_VISIBLE_DEVICES hides them)");
}

int fx_cuda_set_device(int ordinal, const char *func)
{
    int rc = fx_need_device(func);
    if (rc) return rc;
    int n = fx_gr_device_count();
    if (ordinal < 0 || ordinal >= n)
        return fx_error(FX_EINVAL, func, "device ordinal %d is outside [0, %d)", ordinal, n);
    return fx_gr_set_device(ordinal, func);
}

/* The current device, or a negative status with a message naming func (the public entry
 * point the caller asked for, so that a refusal names the function the user called). */
int fx_cuda_current_device(const char *func)
{
    int rc = fx_need_device(func);
    if (rc) return rc;
    int d = 0;
    rc = fx_gr_get_device(&d, func);
    return rc ? rc : d;
}

int fx_cuda_synchronize(const char *func)
{
    int rc = fx_need_device(func);
    return rc ? rc : fx_gr_sync(func);
}

const char *fx_cuda_device_name(const char *func)
{
    static _Thread_local char name[256];
    int d = fx_cuda_current_device(func);
    if (d < 0) return NULL;
    if (fx_gr_device_name(d, name, sizeof name, func)) return NULL;
    return name;
}

/* ---- memory hooks of the core ---------------------------------------------------------------- */

int fx_cuda_alloc_zero(int device, size_t bytes, void **p, const char *func)
{
    *p = NULL;
    int prev = 0;
    int rc = fx_gr_get_device(&prev, func);
    if (!rc && prev != device) rc = fx_gr_set_device(device, func);
    if (rc) return rc;
    rc = fx_gr_malloc(bytes, p, func);
    if (!rc) rc = fx_gr_memset0(*p, bytes, func);
    if (rc && *p) {
        fx_gr_free(*p);
        *p = NULL;
    }
    if (prev != device) fx_gr_set_device(prev, func);
    return rc;
}

void fx_cuda_free(int device, void *p)
{
    /* freed with its own device current; the caller's current device is kept */
    int prev = device;
    if (fx_gr_get_device(&prev, "tensor_free") == FX_OK && prev != device)
        fx_gr_set_device(device, "tensor_free");
    fx_gr_free(p);
    if (prev != device) fx_gr_set_device(prev, "tensor_free");
}

/* ---- transfers ----------------------------------------------------------------------------- */

static bool fx_same_shape(const tensor_t *a, const tensor_t *b)
{
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* Checks shared by both copy directions. */
static int fx_check_copy(const tensor_t *dst, const tensor_t *src, int to_device,
                         const char *func)
{
    if (!dst || !src) return fx_error(FX_EINVAL, func, "%s is NULL", !dst ? "dst" : "src");
    if (fx_on_device(src) == to_device || fx_on_device(dst) != to_device)
        return fx_error(FX_EINVAL, func, "needs %s (dst on %s, src on %s)",
                        to_device ? "a host src and a device dst" : "a device src and a host dst",
                        fx_on_device(dst) ? "a device" : "the host",
                        fx_on_device(src) ? "a device" : "the host");
    if (dst->fmt != src->fmt)
        return fx_error(FX_EFORMAT, func, "dst is %s but src is %s (use tensor_copy to convert "
                        "on one side)", fmt_name(dst->fmt), fmt_name(src->fmt));
    if (!fx_same_shape(dst, src)) {
        char b1[160], b2[160];
        return fx_error(FX_ESHAPE, func, "dst.shape=%s != src.shape=%s",
                        fx_shape_str(dst, b1, sizeof b1), fx_shape_str(src, b2, sizeof b2));
    }
    if (fmt_is_shared_exponent(dst->fmt) && !fx_tensor_covers_storage(dst))
        return fx_error(FX_EINVAL, func, "a %s dst must span its whole storage: the exponent "
                        "it receives is shared by all of it", fmt_name(dst->fmt));
    if (to_device && !fx_tensor_is_contiguous(dst))
        return fx_error(FX_EUNSUPPORTED, func, "a strided device dst is not supported; copy "
                        "into a contiguous device tensor and use tensor_copy on the device");
    return FX_OK;
}

static int fx_h2d(tensor_t *dst, const tensor_t *src, const char *func)
{
    const int64_t n = fx_numel_of(src->ndim, src->shape);
    const size_t bytes = (size_t)n * fmt_elem_size(src->fmt);
    const void *host = fx_tensor_base(src);
    void *tmp = NULL;
    if (!fx_tensor_is_contiguous(src)) {
        tmp = fx_alloc_array(n, fmt_elem_size(src->fmt));
        if (!tmp) return fx_error(FX_ENOMEM, func, "cannot allocate %lld elements",
                                  (long long)n);
        fx_strided_copy(src, tmp, 0);
        host = tmp;
    }
    /* settled before anything is copied, so that a failure leaves dst as it was (the state copy
     * below would settle them too, after the elements) */
    int rc = fx_storage_settle(src->st, func);
    if (!rc) rc = fx_storage_settle(dst->st, func);
    if (!rc) rc = fx_gr_memcpy(fx_tensor_base(dst), host, bytes, FX_GR_H2D, func);
    free(tmp);
    if (!rc) rc = fx_storage_copy_exp_state(dst->st, src->st, func);
    return rc;
}

static int fx_d2h(tensor_t *dst, const tensor_t *src, const char *func)
{
    const int64_t n = fx_numel_of(src->ndim, src->shape);
    const size_t bytes = (size_t)n * fmt_elem_size(src->fmt);
    const void *dev = fx_tensor_base(src);
    void *dtmp = NULL, *htmp = NULL;
    int rc = fx_storage_settle(src->st, func); /* before anything is copied, as in fx_h2d */
    if (!rc) rc = fx_storage_settle(dst->st, func);
    if (!rc && !fx_tensor_is_contiguous(src)) { /* gather on the device first */
        fx_dview v = fx_gpu_view_of(src);
        rc = fx_gr_malloc(bytes, &dtmp, func);
        if (!rc) rc = fx_gk_gather(&v, n, dtmp, func);
        dev = dtmp;
    }
    void *host = fx_tensor_base(dst);
    if (!rc && !fx_tensor_is_contiguous(dst)) {
        htmp = fx_alloc_array(n, fmt_elem_size(src->fmt));
        if (!htmp) rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld elements", (long long)n);
        host = htmp;
    }
    if (!rc) rc = fx_gr_memcpy(host, dev, bytes, FX_GR_D2H, func);
    if (!rc && htmp) fx_strided_copy(dst, htmp, 1);
    fx_gr_free(dtmp);
    free(htmp);
    if (!rc) rc = fx_storage_copy_exp_state(dst->st, src->st, func);
    return rc;
}

/* Device of an op on tensor t: its own. The caller's current device is kept. */
static int fx_enter(int device, int *prev, const char *func)
{
    int rc = fx_gr_get_device(prev, func);
    if (!rc && *prev != device) rc = fx_gr_set_device(device, func);
    return rc;
}

static void fx_leave(int device, int prev)
{
    if (prev != device) fx_gr_set_device(prev, "fx_leave");
}

int fx_cuda_rescale(int device, void *data, int64_t numel, int from, int to, int64_t *saturated,
                   const char *func)
{
    *saturated = 0;
    int prev = device;
    int rc = fx_enter(device, &prev, func);
    if (rc) { /* name the device: the runtime's text may not */
        char why[256];
        snprintf(why, sizeof why, "%s", flexpoint_last_error());
        return fx_error(rc, func, "cannot rescale the mantissas on CUDA device %d (%s)", device,
                        why);
    }
    unsigned long long *dsat = NULL, hsat = 0;
    rc = fx_gr_malloc(sizeof *dsat, (void **)&dsat, func);
    if (!rc) rc = fx_gr_memset0(dsat, sizeof *dsat, func);
    if (!rc) rc = fx_gk_rescale_i16(data, numel, to - from, dsat, func);
    /* the copy waits for the kernel and reports its failure; once it has succeeded the
     * mantissas are rescaled, so nothing after it may fail the call */
    if (!rc) rc = fx_gr_memcpy(&hsat, dsat, sizeof hsat, FX_GR_D2H, func);
    fx_gr_free(dsat);
    fx_leave(device, prev);
    if (!rc) *saturated = (int64_t)hsat;
    return rc;
}

tensor_t *fx_cuda_tensor_new(fmt_t fmt, int ndim, const int64_t *shape, const char *func)
{
    int d = fx_cuda_current_device(func);
    if (d < 0) return NULL;
    return fx_tensor_create(fmt, ndim, shape, d, func);
}

tensor_t *fx_cuda_tensor_to_device(const tensor_t *t, const char *func)
{
    if (!t) {
        fx_error(FX_EINVAL, func, "tensor is NULL");
        return NULL;
    }
    if (fx_on_device(t)) {
        fx_error(FX_EINVAL, func, "the tensor already lives on CUDA device %d", t->st->device);
        return NULL;
    }
    int d = fx_cuda_current_device(func);
    if (d < 0) return NULL;
    tensor_t *out = fx_tensor_create(t->fmt, t->ndim, t->shape, d, func);
    if (!out) return NULL;
    if (fx_h2d(out, t, func) != FX_OK) {
        tensor_free(out);
        return NULL;
    }
    return out;
}

tensor_t *fx_cuda_tensor_to_host(const tensor_t *t, const char *func)
{
    if (!t) {
        fx_error(FX_EINVAL, func, "tensor is NULL");
        return NULL;
    }
    if (!fx_on_device(t)) {
        fx_error(FX_EINVAL, func, "the tensor already lives on the host");
        return NULL;
    }
    tensor_t *out = fx_tensor_create(t->fmt, t->ndim, t->shape, -1, func);
    if (!out) return NULL;
    int prev = 0;
    int rc = fx_enter(t->st->device, &prev, func);
    if (!rc) {
        rc = fx_d2h(out, t, func);
        fx_leave(t->st->device, prev);
    }
    if (rc) {
        tensor_free(out);
        return NULL;
    }
    return out;
}

int fx_cuda_copy_to_device(tensor_t *dst, const tensor_t *src, const char *func)
{
    int rc = fx_check_copy(dst, src, 1, func);
    if (rc) return rc;
    int prev = 0;
    rc = fx_enter(dst->st->device, &prev, func);
    if (rc) return rc;
    rc = fx_h2d(dst, src, func);
    fx_leave(dst->st->device, prev);
    return rc;
}

int fx_cuda_copy_to_host(tensor_t *dst, const tensor_t *src, const char *func)
{
    int rc = fx_check_copy(dst, src, 0, func);
    if (rc) return rc;
    int prev = 0;
    rc = fx_enter(src->st->device, &prev, func);
    if (rc) return rc;
    rc = fx_d2h(dst, src, func);
    fx_leave(src->st->device, prev);
    return rc;
}
