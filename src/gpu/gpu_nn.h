/* The training ops of include/flexpoint_nn.h on device tensors: the boundary between src/nn
 * (which validates shapes and parameters and then hands device calls over) and the CUDA side.
 *
 * Implemented by src/gpu/gpu_nn.c (+ gpu_nn.cu kernels), built with CUDA only, and reached
 * through fx_cuda_backend (gpu_backend.c), whose whole-op entries unpack the op's arguments.
 *
 * Contract of every fx_gnn_* entry point: the public function (src/nn/...) has run its own
 * validation (NULL tensors, shapes, parameters) and the dispatcher (src/core/op_run.c) found
 * every tensor on one device. The entry point then validates what only it can (the raw pointers: device memory
 * of that device, or host memory, include/flexpoint_gpu.h), before any device work, and
 * returns the host op's status codes plus FX_EDEVICE for CUDA failures. Results follow the
 * CPU code of the same op (see gpu_nn.c for each op's correspondence).
 */
#ifndef FX_GPU_NN_H
#define FX_GPU_NN_H

#include "../core/internal.h"
#include "gpu_kernels.h"
#include "gpu_nn_math.h"

#include <stdio.h>

/* Host memory check for the raw pointers that stay on the host while the tensors live on a
 * device (labels of softmax_ce.c, read on the host during validation): FX_OK for host or
 * managed memory, else FX_EINVAL naming `name`. */
int fx_gnn_host_ptr(const void *p, const char *name, const char *func);

/* *defers = 1 when the next write into out will not wait for its statistics (a deferred
 * FLEX16_5 write, gpu_dispatch.c): its stage then needs no statistics, so a pass that would only
 * compute them can be skipped. Completes out's previous write first: FX_OK, or the status of
 * collecting that write's statistics (FX_EDEVICE), which the op must return. */
int fx_gpu_write_defers(tensor_t *out, int *defers, const char *func);

/* The device write path for composite ops, defined in gpu_dispatch.c next to the write path it
 * wraps (CUDA builds only): one write of a device stage into out (int64 values at exponent
 * exp: fx_dexp_view / fx_dexp_views of the inputs' views, gpu_internal.h, so that exponents
 * the device chose stay on the device); stats: the stage's device statistics, needed when
 * out has a shared exponent. */
int fx_gpu_write_stage(tensor_t *out, int kind, int64_t n, float *f32, int64_t *i64,
                       fx_dexp exp, const fx_dstage_stats *stats, const char *func);

/* ---- pooling (pool.c validated g; argmax: device int32[numel(y)], may be NULL) ------------ */
int fx_gnn_maxpool2d(tensor_t *y, int32_t *argmax, const tensor_t *x, const fx_pool_geom *g,
                     const char *func);
/* dx, dy 4-D with equal N, C (validated); argmax: device int32[numel(dy)], checked on the
 * device to lie in its own (n, c) plane (FX_ERANGE, nothing written), which costs a wait for
 * the device; own_indices != 0 skips that check for indices the library's own forward pass
 * wrote into a buffer nothing else writes (the trainer's, fx_maxpool2d_backward_own). */
int fx_gnn_maxpool2d_backward(tensor_t *dx, const tensor_t *dy, const int32_t *argmax,
                              int own_indices, const char *func);
int fx_gnn_avgpool2d(tensor_t *y, const tensor_t *x, const fx_pool_geom *g, const char *func);
int fx_gnn_avgpool2d_backward(tensor_t *dx, const tensor_t *dy, const fx_pool_geom *g,
                              const char *func);
/* planes = N*C, HW = H*W of the 4-D side (validated). */
int fx_gnn_global_avgpool(tensor_t *y, const tensor_t *x, int64_t planes, int64_t HW,
                          const char *func);
int fx_gnn_global_avgpool_backward(tensor_t *dx, const tensor_t *dy, int64_t planes, int64_t HW,
                                   const char *func);

/* ---- element-wise and per-row ops ------------------------------------------------------- */
int fx_gnn_relu_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x, const char *func);
/* Validated: shapes, p in [0, 1). dropout.c computes the mask threshold thr, the fp32 factor
 * 1/(1-p) and its 31-bit mantissa ms * 2^(k2 - 30) for the integer path. */
int fx_gnn_dropout(tensor_t *y, const tensor_t *x, uint64_t thr, double factor, int64_t ms,
                   int k2, uint64_t seed, uint64_t step, const char *func);
/* loss, labels: host memory (labels validated by the caller: N values in [0, K)). */
int fx_gnn_softmax_ce(float *loss, tensor_t *dlogits, const tensor_t *logits,
                      const int32_t *labels, double grad_scale, const char *func);
/* Geometry from fx_reduce_geometry, len > 0 or nothing to write. */
int fx_gnn_mean(tensor_t *out, const tensor_t *a, int64_t outer, int64_t len, int64_t inner,
                const char *func);

/* ---- batch norm (validated; per-channel float arrays are host memory) ------------------- */
int fx_gnn_batchnorm(tensor_t *y, const tensor_t *x, const tensor_t *gamma, const tensor_t *beta,
                     float *running_mean, float *running_var, float *save_mean,
                     float *save_invstd, double momentum, double eps, int training,
                     const fx_bn_dims *d, const char *func);
int fx_gnn_batchnorm_backward(tensor_t *dx, tensor_t *dgamma, tensor_t *dbeta, const tensor_t *dy,
                              const tensor_t *x, const tensor_t *gamma, const float *save_mean,
                              const float *save_invstd, const fx_bn_dims *d, const char *func);

/* ---- optimisers and loss scaling (buffers: device float[numel], validated here) ---------- */
int fx_gnn_sgd_step(tensor_t *w, const tensor_t *grad, float *master, float *momentum_buf,
                    double lr, double momentum, double weight_decay, double grad_scale,
                    int stochastic, uint64_t seed, uint64_t step, const char *func);
/* bc1 = 1 - beta1^step, sqrt_bc2 = sqrt(1 - beta2^step), computed by optim.c. */
int fx_gnn_adam_step(tensor_t *w, const tensor_t *grad, float *master, float *m, float *v,
                     double lr, double beta1, double beta2, double eps, double weight_decay,
                     double grad_scale, double bc1, double sqrt_bc2, int stochastic,
                     uint64_t seed, uint64_t step, const char *func);
/* grads[0..n) all on one device (checked by the caller); out[i]: device float[numel]. */
int fx_gnn_unscale(float inv, const tensor_t *const *grads, int n, float *const *out,
                   int *found_inf, const char *func);

#endif
