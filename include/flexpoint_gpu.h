/**
 * @file
 * @brief flexpoint GPU (CUDA) device API: device selection, tensors whose elements live in device
 * memory, and transfers between host and device.
 *
 * Conventions (in addition to those of flexpoint.h)
 * -------------------------------------------------
 * - A device tensor is an ordinary tensor_t: the same shape, strides, views, format, shared
 *   exponent, Autoflex state and statistics. Only its elements live in device memory; the
 *   shared-exponent state stays on the host, so tensor_exp, tensor_stat, Autoflex and traces
 *   work on it as on a host tensor. Views of a device tensor are device tensors.
 * - Ops (tensor_add, tensor_sub, tensor_mul, tensor_scale, tensor_relu, tensor_copy,
 *   tensor_sum, tensor_matmul) run on the device when all their tensors live on the same
 *   device, with the same semantics as on the CPU: FLEX16_5/DFP16 results are bit-identical to
 *   the CPU (exact integer sums, one rounding, the same exponent choice and statistics);
 *   fp32/fp16/bf16 elementwise ops and conversions are bit-identical too; fp32-accumulated sums
 *   and matmuls (cuBLAS) differ from the CPU only by the order of summation.
 * - Mixing host and device tensors (or two devices) in one op fails with FX_EINVAL and a
 *   message naming the operands and where each lives. Move data explicitly with the functions
 *   below.
 * - Functions that hand element data to the host (tensor_to_f32, tensor_from_f32,
 *   tensor_get_raw, tensor_set_raw, tensor_data, checkpoint save/load) fail on a device tensor
 *   with FX_EINVAL and a message. tensor_set_exp / tensor_set_exp_window rescale the mantissas
 *   on the device, with the host's rounding (bit-identical).
 * - The training ops of flexpoint_nn.h other than convolution (pooling and their gradients,
 *   tensor_relu_backward, tensor_softmax_cross_entropy, tensor_batchnorm(+_backward),
 *   tensor_dropout(+_backward), tensor_mean, fx_sgd_step, fx_adam_step,
 *   fx_loss_scaler_unscale) run on the device when all their tensors live on one device, with
 *   the CPU's semantics: FLEX16_5/DFP16 bit-identical (mantissas, exponent, statistics); the
 *   float formats repeat the CPU's per-element IEEE operations, so they are bit-identical too,
 *   except tensor_mean's fp32 sums (tensor_sum's order) and softmax cross-entropy (the device's
 *   exp/log, within a few fp32 ulps). Their raw pointer arguments follow one rule:
 *     * buffers with one entry per tensor element live in DEVICE memory of the tensors' device:
 *       the argmax of tensor_maxpool2d(+_backward), master / momentum_buf of fx_sgd_step,
 *       master / m / v of fx_adam_step, out[i] of fx_loss_scaler_unscale. Allocate them with
 *       flexpoint_gpu_malloc (zero-filled, as the optimisers need at start) and move their
 *       contents with flexpoint_gpu_memcpy_to_device / _to_host (e.g. to fill a master copy
 *       from tensor_to_f32 of a host tensor, or to checkpoint it);
 *     * small per-row, per-channel and scalar arrays stay in HOST memory: the labels and *loss
 *       of tensor_softmax_cross_entropy, running_mean / running_var / save_mean / save_invstd
 *       of batch norm, *found_inf of the loss scaler.
 *   A pointer in the wrong place (host memory where device memory is needed, memory of another
 *   device, device memory where host memory is needed) fails with FX_EINVAL naming the
 *   argument, checked before any work; managed memory is accepted in both places. Sizes cannot
 *   be checked: as on the host, the caller provides the documented number of elements.
 * - Status codes: FX_EDEVICE when the library was built without CUDA, when no CUDA device is
 *   present at run time, or when a CUDA/cuBLAS call fails (the message carries the CUDA error
 *   text). Nothing here aborts or crashes without a device; cuBLAS is initialised lazily, on
 *   the first float matmul on the device.
 * - Ops on device tensors are asynchronous: an op returns once its work is queued on the
 *   device's (legacy default) stream, and later ops, copies to the host and tensor_free are
 *   ordered after it, so results read through this API are always complete. Float-format ops
 *   do not wait at all. Nor does a shared-exponent write after the tensor's first (every
 *   Autoflex preset, and DFP16): its exponent rule runs on the device (the history's
 *   prediction; "robust"'s recompute of a saturated write; DFP16's exact exponent), later ops
 *   read an exponent the device chose from device memory, its statistics are copied back
 *   asynchronously, and its exponent, Autoflex history, statistics and trace are completed
 *   when the tensor is next written or its state is read (tensor_exp, tensor_stat, traces,
 *   Autoflex calls, checkpoints, host copies), which then waits only for that copy, typically
 *   one training step old. The results are those of the host, bit for bit. A FLEX16_5 first
 *   write (it measures its own data), a write into a partial view and, with
 *   FLEXPOINT_GPU_DEFER=0 in the environment, every write read their statistics back at once,
 *   which waits for the op (same results). flexpoint_gpu_host_waits counts the waits.
 *   A fault inside a kernel is therefore reported by a later call (with FLEXPOINT_GPU_SYNC=1
 *   in the environment every op waits and reports its own faults). An op that fails with
 *   FX_EDEVICE may have changed its output's elements (a FLEX16_5 output is rounded at its
 *   predicted exponent before the statistics are read back); its exponent state is left as it
 *   was. If collecting a deferred write's statistics fails (FX_EDEVICE from the call that
 *   needed them), that write's statistics and Autoflex observation are lost; its exponent
 *   stays. Call flexpoint_gpu_synchronize before reading managed memory that an op writes, on
 *   the host.
 * - Threads: the device in use is per host thread (as in the CUDA runtime). A device tensor
 *   remembers its device; ops switch to that device for their work.
 */
#ifndef FLEXPOINT_GPU_H
#define FLEXPOINT_GPU_H

#include "flexpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* flexpoint_gpu_device_count() (number of CUDA devices visible, 0 without CUDA or without a
 * device) is declared in flexpoint.h. */

/** @brief Whether this build of the library contains the CUDA backend.
 *  @return 1 if it does, else 0. */
FX_API int flexpoint_gpu_built(void);

/** @brief Select the CUDA device used by this thread for new device tensors.
 *  @param[in] ordinal Device ordinal, 0 <= ordinal < flexpoint_gpu_device_count().
 *  @retval FX_OK
 *  @retval FX_EINVAL a bad ordinal.
 *  @retval FX_EDEVICE without CUDA or when no device exists. */
FX_API int flexpoint_gpu_set_device(int ordinal);

/** @brief The CUDA device in use by this thread.
 *  @return Its ordinal (>= 0), or FX_EDEVICE (no CUDA, no device). */
FX_API int flexpoint_gpu_device(void);

/** @brief Name of the device in use by this thread.
 *  @return The name ("NVIDIA H100 80GB HBM3", ...), in a thread-local buffer owned by the
 *          library and valid until the next call from the same thread; NULL (with FX_EDEVICE
 *          set) without a device. */
FX_API const char *flexpoint_gpu_device_name(void);

/** @brief Wait until all work queued on the device in use by this thread has finished.
 *  @retval FX_OK
 *  @retval FX_EDEVICE no CUDA, no device, or a kernel failed (the message carries CUDA's
 *          text). */
FX_API int flexpoint_gpu_synchronize(void);

/** @brief New zero-filled, contiguous tensor in the memory of the device in use, with the
 *  same initial exponent state as tensor_new().
 *  @param[in] fmt   Format.
 *  @param[in] ndim  Number of dimensions, 1 <= ndim <= FX_MAX_DIMS.
 *  @param[in] shape `ndim` sizes, each >= 0.
 *  @return The tensor, which the caller owns and frees with tensor_free() (it releases the
 *          device memory with the last view). NULL on failure: FX_EDEVICE (no CUDA, no device,
 *          out of device memory), FX_EINVAL / FX_EFORMAT (bad arguments, as tensor_new()). */
FX_API tensor_t *tensor_new_device(fmt_t fmt, int ndim, const int64_t *shape);

/** @brief Where t's elements live. Works in every build.
 *  @param[in] t The tensor.
 *  @return -1 for host memory, else the CUDA device ordinal; FX_EINVAL for NULL. */
FX_API int tensor_device(const tensor_t *t);

/** @brief New device tensor (on the device in use) holding a copy of a host tensor.
 *
 *  The copy has the same format and shape, contiguous, bit-identical elements (any view
 *  strides are gathered), and a copy of the shared-exponent state of t's storage (exponent, window, rounding mode and seed, write
 *  counter, Autoflex state and statistics; not the write trace). Copying moves no values
 *  through a write: nothing is rounded, no statistic changes. NULL on failure (FX_EINVAL if t
 *  is NULL or already on a device, FX_EDEVICE). The caller frees it with tensor_free.
 *  @param[in] t The host tensor.
 *  @return The device tensor, which the caller owns and frees with tensor_free(); NULL on
 *          failure (FX_EINVAL, FX_EDEVICE). */
FX_API tensor_t *tensor_to_device(const tensor_t *t);

/** @brief New host tensor holding a copy of device tensor t (the mirror of
 *  tensor_to_device()).
 *  @param[in] t The device tensor.
 *  @return The host tensor, which the caller owns and frees with tensor_free(); NULL on
 *          failure (FX_EINVAL if t is NULL or on the host, FX_EDEVICE). */
FX_API tensor_t *tensor_to_host(const tensor_t *t);

/** @brief Copy elements and shared-exponent state between existing host and device tensors.
 *
 *  Copies the elements and the shared-exponent state (as tensor_to_device) of host tensor src
 *  into the existing device tensor dst, or of device tensor src into host tensor dst
 *  (tensor_copy_to_host). dst and src need the same format (FX_EFORMAT) and shape (FX_ESHAPE).
 *  For FLEX16_5/DFP16 dst must span its whole storage, because the exponent it receives is
 *  shared by all of the storage (FX_EINVAL otherwise); a device dst must be contiguous
 *  (FX_EUNSUPPORTED otherwise). FX_EINVAL for NULL or tensors in the wrong places. On failure
 *  dst is unchanged, except after a failed CUDA copy (FX_EDEVICE), when its elements are
 *  undefined.
 *  @param[out] dst The device tensor.
 *  @param[in]  src The host tensor.
 *  @retval FX_OK
 *  @retval FX_EINVAL NULL, tensors in the wrong places, or a FLEX16_5/DFP16 dst that does not
 *          span its storage.
 *  @retval FX_EFORMAT dst and src differ in format.
 *  @retval FX_ESHAPE dst and src differ in shape.
 *  @retval FX_EUNSUPPORTED a device dst that is not contiguous.
 *  @retval FX_EDEVICE a CUDA copy failed (dst's elements are then undefined), or no CUDA. */
FX_API int tensor_copy_to_device(tensor_t *dst, const tensor_t *src);
/** @brief The mirror of tensor_copy_to_device(): from device tensor src into host tensor dst.
 *  @param[out] dst The host tensor.
 *  @param[in]  src The device tensor.
 *  @return As tensor_copy_to_device(). */
FX_API int tensor_copy_to_host(tensor_t *dst, const tensor_t *src);

/* --- device memory for the raw buffers of flexpoint_nn.h ops (see the rule above) ---------- */

/** @brief Allocate zero-filled memory on the CUDA device in use by this thread.
 *  @param[out] p     Receives the device pointer, or NULL on failure. The caller owns the
 *                    memory and releases it with flexpoint_gpu_free().
 *  @param[in]  bytes Size, > 0.
 *  @retval FX_OK
 *  @retval FX_EINVAL p is NULL or bytes is 0.
 *  @retval FX_EDEVICE no CUDA, no device, or the device is out of memory (message set). */
FX_API int flexpoint_gpu_malloc(void **p, size_t bytes);

/** @brief Release memory from flexpoint_gpu_malloc().
 *
 *  The memory is released on whichever device it lives (the caller's current device is
 *  kept). It waits for the device first (the memory goes back to the library's cache, and work
 *  of the caller's on other streams may still use it). NULL is a no-op (FX_OK). FX_EINVAL for a
 *  pointer that is not device memory (nothing is released); FX_EDEVICE without CUDA, or when
 *  the wait reports a failed kernel (the memory is released all the same).
 *  @param[in] p Pointer from flexpoint_gpu_malloc(), or NULL.
 *  @retval FX_OK (also for NULL)
 *  @retval FX_EINVAL p is not device memory (nothing is released).
 *  @retval FX_EDEVICE no CUDA, or the wait reported a failed kernel. */
FX_API int flexpoint_gpu_free(void *p);

/** @brief Give the device memory that the library keeps for reuse back to CUDA, on every
 *  device.
 *
 *  Device tensors, temporaries and flexpoint_gpu_malloc buffers come from a cache: memory
 *  released by the library is kept, per device and size class, and handed out again, because
 *  cudaMalloc/cudaFree cost far more than most ops (cudaFree waits for the device). The cache
 *  holds at most FLEXPOINT_GPU_CACHE_MB megabytes per device (environment variable, read at the
 *  first allocation; default 4096; 0 disables it), and is emptied by itself when an
 *  allocation fails. It also gives back the pinned host buffers that stage uploads and, on a
 *  device with no live tensors, those that receive write statistics (made again when
 *  needed). Call this to hand the memory to another library sharing the GPU, and before
 *  cudaDeviceReset, after freeing that device's tensors (the library would otherwise keep
 *  pointers of the old context). Live allocations are untouched.
 *  @return Always FX_OK (also without CUDA, where nothing is cached). */
FX_API int flexpoint_gpu_release_cache(void);

/** @brief How many times this process has waited for a CUDA device inside the library so far.
 *
 *  Counted: every copy from device to host memory and every synchronous upload (larger than
 *  4 MiB, managed memory, or no pinned memory to stage through: it waits for the work queued
 *  before it), every synchronisation, every read of write statistics that had not yet arrived,
 *  and every upload that found its staging buffer still in use. For profiling a training step (a shared-exponent write after the tensor's first
 *  adds none; see the conventions above). Never fails.
 *  @return The count; 0 without CUDA. */
FX_API long long flexpoint_gpu_host_waits(void);

/** @brief Copy bytes from host memory to device memory.
 *
 *  Copies `bytes` from host memory src to device memory dst (flexpoint_gpu_memcpy_to_device)
 *  / from device memory src to host memory dst (flexpoint_gpu_memcpy_to_host). bytes == 0 does
 *  nothing (FX_OK). FX_EINVAL for NULL pointers with bytes > 0 or
 *  pointers in the wrong places (named in the message); FX_EDEVICE without CUDA or when the
 *  copy fails. To the host: synchronous, the data is in dst when the call returns. To the
 *  device: src may be reused when the call returns, and all work the library (or any code on
 *  the device's legacy default stream) queues afterwards sees the data; copies of up to 4 MiB
 *  from ordinary host memory are queued through pinned staging memory without waiting for
 *  the device, so code on other, non-blocking CUDA streams must synchronise the device before
 *  reading dst, and a failure of the queued copy is reported by a later call. Copies from or
 *  to managed memory, and larger ones, are synchronous.
 *  @param[out] dst   Device memory.
 *  @param[in]  src   Host memory.
 *  @param[in]  bytes Number of bytes.
 *  @retval FX_OK
 *  @retval FX_EINVAL NULL pointers with bytes > 0, or pointers in the wrong places.
 *  @retval FX_EDEVICE no CUDA, or the copy failed. */
FX_API int flexpoint_gpu_memcpy_to_device(void *dst, const void *src, size_t bytes);
/** @brief Copy bytes from device memory to host memory, synchronously (see
 *  flexpoint_gpu_memcpy_to_device()).
 *  @param[out] dst   Host memory; the data is there when the call returns.
 *  @param[in]  src   Device memory.
 *  @param[in]  bytes Number of bytes.
 *  @return As flexpoint_gpu_memcpy_to_device(). */
FX_API int flexpoint_gpu_memcpy_to_host(void *dst, const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* FLEXPOINT_GPU_H */
