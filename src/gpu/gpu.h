/* The boundary between the core (C) and the CUDA backend. The core calls only these; they are
 * implemented by src/gpu/gpu_*.c + *.cu when the library is built with CUDA, and by
 * src/gpu/gpu_none.c (every call reports FX_EDEVICE) when it is not. */
#ifndef FX_GPU_GPU_H
#define FX_GPU_GPU_H

#include <stddef.h>
#include <stdint.h>

struct fx_op_request;

/* Zero-filled device memory of `bytes` (> 0) on CUDA device `device`: FX_OK, or FX_EDEVICE with
 * the message set (naming func). */
int fx_gpu_alloc_zero(int device, size_t bytes, void **p, const char *func);

/* Release memory from fx_gpu_alloc_zero (NULL is a no-op). Never fails visibly. */
void fx_gpu_free(int device, void *p);

/* Run a validated op request whose tensors all live on one device (src/core/dispatch.c has
 * checked the placement). Same status codes as the host dispatcher, plus FX_EDEVICE and
 * FX_EUNSUPPORTED for what the device backend does not do. */
int fx_gpu_dispatch(const struct fx_op_request *rq);

/* Move every mantissa of a device storage (data, numel elements of int16) from exponent
 * `from` to `to` (tensor_set_exp): one rounding each, as on the host; *saturated counts the
 * mantissas that saturated. FX_OK, or FX_EDEVICE (no CUDA, no such device, a CUDA failure);
 * the caller then keeps the old exponent (a kernel that failed part-way is a device fault,
 * which every later call reports too). */
int fx_gpu_rescale(int device, void *data, int64_t numel, int from, int to, int64_t *saturated,
                   const char *func);

#endif
