/* The CUDA backend's host-side entry points. The core never calls them by name: gpu_backend.c
 * gathers them into fx_cuda_backend (src/core/device_backend.h, whose contracts they follow),
 * and the core reaches the device only through that struct. Each takes `func`, the public
 * function the user called, for its messages. */
#ifndef FX_GPU_GPU_H
#define FX_GPU_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "../core/internal.h"

struct fx_op_request;

/* storage (gpu_tensor.c) */
int fx_cuda_alloc_zero(int device, size_t bytes, void **p, const char *func);
void fx_cuda_free(int device, void *p);
int fx_cuda_rescale(int device, void *data, int64_t numel, int from, int to, int64_t *saturated,
                    const char *func);

/* stage ops on one device (gpu_dispatch.c): which it computes, and the dispatcher */
int fx_gpu_stage_op_supported(int op);
int fx_gpu_dispatch(const struct fx_op_request *rq);

/* the runtime of include/flexpoint_gpu.h (gpu_tensor.c, gpu_nn_mem.c) */
int fx_cuda_set_device(int ordinal, const char *func);
int fx_cuda_current_device(const char *func);
int fx_cuda_synchronize(const char *func);
const char *fx_cuda_device_name(const char *func);
tensor_t *fx_cuda_tensor_new(fmt_t fmt, int ndim, const int64_t *shape, const char *func);
tensor_t *fx_cuda_tensor_to_device(const tensor_t *t, const char *func);
tensor_t *fx_cuda_tensor_to_host(const tensor_t *t, const char *func);
int fx_cuda_copy_to_device(tensor_t *dst, const tensor_t *src, const char *func);
int fx_cuda_copy_to_host(tensor_t *dst, const tensor_t *src, const char *func);
int fx_cuda_malloc(void **p, size_t bytes, const char *func);
int fx_cuda_free_user(void *p, const char *func);
int fx_cuda_release_cache(void);
int fx_cuda_memcpy_to_device(void *dst, const void *src, size_t bytes, const char *func);
int fx_cuda_memcpy_to_host(void *dst, const void *src, size_t bytes, const char *func);

#endif
