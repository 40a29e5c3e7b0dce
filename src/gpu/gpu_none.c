/* Built when CUDA is off: the library has no GPU. Every device call reports FX_EDEVICE with a
 * message saying so; nothing here can crash. */
#include "../core/internal.h"
#include "gpu.h"
#include "gpu_kernels.h"

#define FX_NO_CUDA "this build of flexpoint has no CUDA backend (built with FLEXPOINT_CUDA=OFF " \
                   "or without nvcc)"

int flexpoint_gpu_device_count(void) { return 0; }
int flexpoint_gpu_built(void) { return 0; }

int flexpoint_gpu_set_device(int ordinal)
{
    return FX_FAIL(FX_EDEVICE, "cannot select device %d: " FX_NO_CUDA, ordinal);
}

int flexpoint_gpu_device(void) { return FX_FAIL(FX_EDEVICE, FX_NO_CUDA); }

int flexpoint_gpu_synchronize(void) { return FX_FAIL(FX_EDEVICE, FX_NO_CUDA); }

const char *flexpoint_gpu_device_name(void)
{
    FX_FAIL(FX_EDEVICE, FX_NO_CUDA);
    return NULL;
}

tensor_t *tensor_new_device(fmt_t fmt, int ndim, const int64_t *shape)
{
    (void)fmt;
    (void)ndim;
    (void)shape;
    FX_FAIL(FX_EDEVICE, FX_NO_CUDA);
    return NULL;
}

tensor_t *tensor_to_device(const tensor_t *t)
{
    (void)t;
    FX_FAIL(FX_EDEVICE, FX_NO_CUDA);
    return NULL;
}

tensor_t *tensor_to_host(const tensor_t *t)
{
    /* no device tensor can exist in this build */
    if (!t) FX_FAIL(FX_EINVAL, "tensor is NULL");
    else FX_FAIL(FX_EDEVICE, FX_NO_CUDA);
    return NULL;
}

int tensor_copy_to_device(tensor_t *dst, const tensor_t *src)
{
    (void)dst;
    (void)src;
    return FX_FAIL(FX_EDEVICE, FX_NO_CUDA);
}

int tensor_copy_to_host(tensor_t *dst, const tensor_t *src)
{
    (void)dst;
    (void)src;
    return FX_FAIL(FX_EDEVICE, FX_NO_CUDA);
}

int flexpoint_gpu_malloc(void **p, size_t bytes)
{
    if (p) *p = NULL;
    if (!p || bytes == 0)
        return FX_FAIL(FX_EINVAL, "%s", !p ? "p is NULL" : "bytes is 0");
    return FX_FAIL(FX_EDEVICE, "cannot allocate %zu bytes: " FX_NO_CUDA, bytes);
}

int flexpoint_gpu_free(void *p)
{
    /* nothing can have come from flexpoint_gpu_malloc in this build */
    if (!p) return FX_OK;
    return FX_FAIL(FX_EDEVICE, FX_NO_CUDA);
}

int flexpoint_gpu_release_cache(void) { return FX_OK; /* nothing is cached without CUDA */ }

long long flexpoint_gpu_host_waits(void) { return 0; /* no device to wait for */ }

int flexpoint_gpu_memcpy_to_device(void *dst, const void *src, size_t bytes)
{
    (void)dst;
    (void)src;
    if (bytes == 0) return FX_OK;
    return FX_FAIL(FX_EDEVICE, FX_NO_CUDA);
}

int flexpoint_gpu_memcpy_to_host(void *dst, const void *src, size_t bytes)
{
    (void)dst;
    (void)src;
    if (bytes == 0) return FX_OK;
    return FX_FAIL(FX_EDEVICE, FX_NO_CUDA);
}

int fx_gpu_alloc_zero(int device, size_t bytes, void **p, const char *func)
{
    (void)bytes;
    *p = NULL;
    return fx_error(FX_EDEVICE, func, "cannot allocate on device %d: " FX_NO_CUDA, device);
}

void fx_gpu_free(int device, void *p)
{
    (void)device;
    (void)p;
}

int fx_gpu_rescale(int device, void *data, int64_t numel, int from, int to, int64_t *saturated,
                   const char *func)
{
    (void)data;
    (void)numel;
    (void)from;
    (void)to;
    *saturated = 0;
    return fx_error(FX_EDEVICE, func, "cannot rescale the mantissas on CUDA device %d: " FX_NO_CUDA,
                    device);
}

int fx_gpu_dispatch(const struct fx_op_request *rq)
{
    (void)rq;
    return FX_FAIL(FX_EDEVICE, FX_NO_CUDA);
}

/* The device integer GEMM's scheme switches (gpu_kernels.h): without CUDA there is no scheme
 * to choose, and the device tests that call them skip. */
void fx_gk_matmul_i16_set_path(int path) { (void)path; }
void fx_gk_matmul_i16_set_chunk(int64_t k) { (void)k; }
