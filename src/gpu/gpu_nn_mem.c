/* Device memory for the raw buffers of the training ops (include/flexpoint_gpu.h:
 * flexpoint_gpu_malloc, flexpoint_gpu_free, flexpoint_gpu_memcpy_to_device / _to_host), CUDA
 * builds. Every call works with the pointer's own device current and restores the caller's. */
#include "../core/internal.h"
#include "gpu.h"
#include "gpu_nn_kernels.h"

/* The device in use, or FX_EDEVICE when there is none. */
static int fx_mem_device(int *device, const char *func)
{
    if (fx_gr_device_count() <= 0)
        return fx_error(FX_EDEVICE, func, "no CUDA device is available (no GPU, no driver, or "
                        "CUDA_VISIBLE_DEVICES hides them)");
    return fx_gr_get_device(device, func);
}

/* Where p lives (fx_gnr_pointer_where), with a device present. */
static int fx_mem_where(const void *p, int *where, const char *func)
{
    int cur = 0;
    int rc = fx_mem_device(&cur, func);
    if (!rc) rc = fx_gnr_pointer_where(p, where, func);
    return rc;
}

/* Run with `device` current (device < 0: the current one). */
static int fx_mem_enter(int device, int *prev, const char *func)
{
    int rc = fx_gr_get_device(prev, func);
    if (!rc && device >= 0 && *prev != device) rc = fx_gr_set_device(device, func);
    return rc;
}

static void fx_mem_leave(int device, int prev)
{
    if (device >= 0 && prev != device) fx_gr_set_device(prev, "flexpoint_gpu_memory");
}

int fx_cuda_malloc(void **p, size_t bytes, const char *func)
{
    if (p) *p = NULL;
    if (!p || bytes == 0) return fx_error(FX_EINVAL, func, "%s", !p ? "p is NULL" : "bytes is 0");
    int device = 0;
    int rc = fx_mem_device(&device, func);
    if (!rc) rc = fx_gr_malloc(bytes, p, func);
    if (!rc) {
        rc = fx_gr_memset0(*p, bytes, func);
        if (rc) {
            fx_gr_free(*p);
            *p = NULL;
        }
    }
    return rc;
}

int fx_cuda_free_user(void *p, const char *func)
{
    if (!p) return FX_OK;
    int where = -1;
    int rc = fx_mem_where(p, &where, func);
    if (rc) return rc;
    if (where < 0 && where != FX_GNN_MANAGED)
        return fx_error(FX_EINVAL, func, "%p is not device memory (host memory is released with free)",
                       p);
    int prev = 0;
    rc = fx_mem_enter(where, &prev, func);
    if (rc) return rc;
    /* The block goes back to the library's cache, whose reuse is ordered only on the default
     * stream: wait first, in case the caller's own work on other streams still uses it. */
    rc = fx_gr_sync(func);
    fx_gr_free(p);
    fx_mem_leave(where, prev);
    return rc; /* a failed kernel is reported; the memory is released all the same */
}

int fx_cuda_release_cache(void)
{
    fx_gr_release_cache();
    return FX_OK;
}

/* Checks and the copy for both directions: dev is the device side, host the host side. */
static int fx_mem_copy(void *dst, const void *src, size_t bytes, int to_device, const char *func)
{
    if (bytes == 0) return FX_OK;
    if (!dst || !src) return fx_error(FX_EINVAL, func, "%s is NULL", !dst ? "dst" : "src");
    const void *dev = to_device ? (const void *)dst : src;
    const void *host = to_device ? src : (const void *)dst;
    int wd = -1, wh = -1;
    int rc = fx_mem_where(dev, &wd, func);
    if (!rc) rc = fx_gnr_pointer_where(host, &wh, func);
    if (rc) return rc;
    const char *dn = to_device ? "dst" : "src", *hn = to_device ? "src" : "dst";
    if (wd == -1)
        return fx_error(FX_EINVAL, func, "%s is host memory but must be device memory", dn);
    if (wh >= 0)
        return fx_error(FX_EINVAL, func, "%s is memory of CUDA device %d but must be host "
                        "memory", hn, wh);
    int prev = 0;
    rc = fx_mem_enter(wd, &prev, func);
    if (rc) return rc;
    rc = fx_gr_memcpy(dst, src, bytes, to_device ? FX_GR_H2D : FX_GR_D2H, func);
    fx_mem_leave(wd, prev);
    return rc;
}

int fx_cuda_memcpy_to_device(void *dst, const void *src, size_t bytes, const char *func)
{
    return fx_mem_copy(dst, src, bytes, 1, func);
}

int fx_cuda_memcpy_to_host(void *dst, const void *src, size_t bytes, const char *func)
{
    return fx_mem_copy(dst, src, bytes, 0, func);
}
