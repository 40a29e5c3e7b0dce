/* The public device API (include/flexpoint_gpu.h), defined once for every build on top of the
 * device backend struct (device_backend.h): with CUDA the calls go to fx_cuda_backend, without
 * it they report FX_EDEVICE with FX_NO_DEVICE_BACKEND (and the queries answer "no device"). */
#include "device_backend.h"
#include "internal.h"

#include <stdio.h>

#ifdef FX_HAVE_CUDA
extern const fx_device_backend fx_cuda_backend; /* src/gpu/gpu_backend.c */
#endif

const fx_device_backend *fx_device_backend_get(void)
{
#ifdef FX_HAVE_CUDA
    return &fx_cuda_backend;
#else
    return NULL;
#endif
}

/* The backend, or NULL with FX_EDEVICE set naming func (and `what`, when not NULL). */
static const fx_device_backend *need_backend(const char *func, const char *what)
{
    const fx_device_backend *d = fx_device_backend_get();
    if (!d) {
        if (what) fx_error(FX_EDEVICE, func, "%s: " FX_NO_DEVICE_BACKEND, what);
        else fx_error(FX_EDEVICE, func, FX_NO_DEVICE_BACKEND);
    }
    return d;
}

int fx_device_alloc_zero(int device, size_t bytes, void **p, const char *func)
{
    *p = NULL;
    const fx_device_backend *d = fx_device_backend_get();
    if (!d)
        return fx_error(FX_EDEVICE, func, "cannot allocate on device %d: " FX_NO_DEVICE_BACKEND,
                        device);
    return d->alloc_zero(device, bytes, p, func);
}

void fx_device_free(int device, void *p)
{
    const fx_device_backend *d = fx_device_backend_get();
    if (d) d->free(device, p);
}

int fx_device_rescale(int device, void *data, int64_t numel, int from, int to,
                      int64_t *saturated, const char *func)
{
    *saturated = 0;
    const fx_device_backend *d = fx_device_backend_get();
    if (!d)
        return fx_error(FX_EDEVICE, func, "cannot rescale the mantissas on CUDA device %d: "
                        FX_NO_DEVICE_BACKEND, device);
    return d->rescale(device, data, numel, from, to, saturated, func);
}

int flexpoint_gpu_built(void) { return fx_device_backend_get() != NULL; }

int flexpoint_gpu_device_count(void)
{
    const fx_device_backend *d = fx_device_backend_get();
    return d ? d->device_count() : 0;
}

int flexpoint_gpu_set_device(int ordinal)
{
    char what[64];
    snprintf(what, sizeof what, "cannot select device %d", ordinal);
    const fx_device_backend *d = need_backend(__func__, what);
    return d ? d->set_device(ordinal, __func__) : FX_EDEVICE;
}

int flexpoint_gpu_device(void)
{
    const fx_device_backend *d = need_backend(__func__, NULL);
    return d ? d->current_device(__func__) : FX_EDEVICE;
}

int flexpoint_gpu_synchronize(void)
{
    const fx_device_backend *d = need_backend(__func__, NULL);
    return d ? d->synchronize(__func__) : FX_EDEVICE;
}

const char *flexpoint_gpu_device_name(void)
{
    const fx_device_backend *d = need_backend(__func__, NULL);
    return d ? d->device_name(__func__) : NULL;
}

tensor_t *tensor_new_device(fmt_t fmt, int ndim, const int64_t *shape)
{
    const fx_device_backend *d = need_backend(__func__, NULL);
    return d ? d->tensor_new(fmt, ndim, shape, __func__) : NULL;
}

tensor_t *tensor_to_device(const tensor_t *t)
{
    const fx_device_backend *d = need_backend(__func__, NULL);
    return d ? d->tensor_to_device(t, __func__) : NULL;
}

tensor_t *tensor_to_host(const tensor_t *t)
{
    if (!t) { /* no device tensor can exist without a backend, but NULL is named first */
        FX_FAIL(FX_EINVAL, "tensor is NULL");
        return NULL;
    }
    const fx_device_backend *d = need_backend(__func__, NULL);
    return d ? d->tensor_to_host(t, __func__) : NULL;
}

int tensor_copy_to_device(tensor_t *dst, const tensor_t *src)
{
    const fx_device_backend *d = need_backend(__func__, NULL);
    return d ? d->copy_to_device(dst, src, __func__) : FX_EDEVICE;
}

int tensor_copy_to_host(tensor_t *dst, const tensor_t *src)
{
    const fx_device_backend *d = need_backend(__func__, NULL);
    return d ? d->copy_to_host(dst, src, __func__) : FX_EDEVICE;
}

int flexpoint_gpu_malloc(void **p, size_t bytes)
{
    if (p) *p = NULL;
    if (!p || bytes == 0) return FX_FAIL(FX_EINVAL, "%s", !p ? "p is NULL" : "bytes is 0");
    char what[64];
    snprintf(what, sizeof what, "cannot allocate %zu bytes", bytes);
    const fx_device_backend *d = need_backend(__func__, what);
    return d ? d->malloc(p, bytes, __func__) : FX_EDEVICE;
}

int flexpoint_gpu_free(void *p)
{
    const fx_device_backend *d = fx_device_backend_get();
    if (!d) /* nothing can have come from flexpoint_gpu_malloc in such a build */
        return p ? FX_FAIL(FX_EDEVICE, FX_NO_DEVICE_BACKEND) : FX_OK;
    return d->free_user(p, __func__);
}

int flexpoint_gpu_release_cache(void)
{
    const fx_device_backend *d = fx_device_backend_get();
    return d ? d->release_cache() : FX_OK; /* nothing is cached without a device */
}

long long flexpoint_gpu_host_waits(void)
{
    const fx_device_backend *d = fx_device_backend_get();
    return d ? d->host_waits() : 0;
}

int flexpoint_gpu_memcpy_to_device(void *dst, const void *src, size_t bytes)
{
    const fx_device_backend *d = fx_device_backend_get();
    if (d) return d->memcpy_to_device(dst, src, bytes, __func__);
    return bytes == 0 ? FX_OK : FX_FAIL(FX_EDEVICE, FX_NO_DEVICE_BACKEND);
}

int flexpoint_gpu_memcpy_to_host(void *dst, const void *src, size_t bytes)
{
    const fx_device_backend *d = fx_device_backend_get();
    if (d) return d->memcpy_to_host(dst, src, bytes, __func__);
    return bytes == 0 ? FX_OK : FX_FAIL(FX_EDEVICE, FX_NO_DEVICE_BACKEND);
}
