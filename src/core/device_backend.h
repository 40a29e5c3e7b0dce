/* A device backend: everything the core reaches on an accelerator, as one struct of entry
 * points. The core never names a device function; it asks fx_device_backend_get() and calls
 * through the struct, so a build without CUDA links no device symbol (the getter returns NULL
 * and the core reports FX_EDEVICE) and a second device backend would be a second struct, not
 * an edit of every op.
 *
 * The CUDA backend's struct is fx_cuda_backend (src/gpu/gpu_backend.c). The public device API
 * of include/flexpoint_gpu.h is defined once, in src/core/device.c, on top of this struct.
 * Every entry point takes `func`, the public function the user called, for its messages. */
#ifndef FX_CORE_DEVICE_BACKEND_H
#define FX_CORE_DEVICE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "op_table.h"

#include "flexpoint.h"

struct fx_op_request;

typedef struct fx_device_backend {
    const char *name; /* "cuda" */

    /* ---- ops ---- */
    /* Whether the backend computes (op, fmt), fmt being the format of the op's first input. */
    int (*supports_op)(int op, fmt_t fmt);
    /* Stage ops (FX_OP_COPY ... FX_OP_UNARY_BACKWARD) whose tensors all live on one device:
     * the device's own dispatcher and write path. */
    int (*dispatch)(const struct fx_op_request *rq);
    /* Whole ops; NULL where supports_op says no. */
    fx_op_fn run[FX_OP_COUNT];
    /* FX_OK when the host can read p (host or managed memory), else FX_EINVAL naming `name`. */
    int (*host_readable)(const void *p, const char *name, const char *func);

    /* ---- storage of device tensors (src/core/tensor.c, shared_exp.c) ---- */
    int (*alloc_zero)(int device, size_t bytes, void **p, const char *func);
    void (*free)(int device, void *p);
    /* Move numel int16 mantissas from exponent `from` to `to` (tensor_set_exp), one rounding
     * each; *saturated counts the saturated ones. */
    int (*rescale)(int device, void *data, int64_t numel, int from, int to, int64_t *saturated,
                   const char *func);

    /* ---- the runtime behind include/flexpoint_gpu.h (same contracts as there) ---- */
    int (*device_count)(void);
    int (*set_device)(int ordinal, const char *func);
    int (*current_device)(const char *func); /* ordinal, or a negative status */
    int (*synchronize)(const char *func);
    const char *(*device_name)(const char *func);
    tensor_t *(*tensor_new)(fmt_t fmt, int ndim, const int64_t *shape, const char *func);
    tensor_t *(*tensor_to_device)(const tensor_t *t, const char *func);
    tensor_t *(*tensor_to_host)(const tensor_t *t, const char *func);
    int (*copy_to_device)(tensor_t *dst, const tensor_t *src, const char *func);
    int (*copy_to_host)(tensor_t *dst, const tensor_t *src, const char *func);
    int (*malloc)(void **p, size_t bytes, const char *func);
    int (*free_user)(void *p, const char *func);
    int (*release_cache)(void);
    long long (*host_waits)(void);
    int (*memcpy_to_device)(void *dst, const void *src, size_t bytes, const char *func);
    int (*memcpy_to_host)(void *dst, const void *src, size_t bytes, const char *func);

    /* ---- tuning switches for tests and benchmarks (not thread-safe against running ops) ---- */
    /* the integer GEMM's scheme (src/gpu/gpu_kernels.h FX_GK_I16_*) and its K chunk (0: auto) */
    void (*set_i16_gemm)(int path, int64_t chunk);
    /* the convolution's largest patch chunk in elements (<= 0: default); returns the previous */
    int64_t (*set_conv_chunk)(int64_t elems);
} fx_device_backend;

/* The device backend of this build: &fx_cuda_backend with CUDA, NULL without. */
const fx_device_backend *fx_device_backend_get(void);

/* The storage entry points for the core, through the backend; without one, FX_EDEVICE with
 * FX_NO_DEVICE_BACKEND (fx_device_free: nothing, as no device memory can exist). */
int fx_device_alloc_zero(int device, size_t bytes, void **p, const char *func);
void fx_device_free(int device, void *p);
int fx_device_rescale(int device, void *data, int64_t numel, int from, int to,
                      int64_t *saturated, const char *func);

/* The message of every device request in a build without a device backend. */
#define FX_NO_DEVICE_BACKEND                                                                   \
    "this build of flexpoint has no CUDA backend (built with FLEXPOINT_CUDA=OFF or without nvcc)"

#endif
