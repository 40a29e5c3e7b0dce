/* Built when CUDA is off: the training ops of flexpoint_nn.h have no device implementation.
 * No device tensor can exist in such a build, so these are reached only through a tensor
 * whose storage claims device memory; each reports FX_EDEVICE with a message, touching
 * nothing. */
#include "gpu_nn.h"

#define FX_NN_NO_CUDA "this build of flexpoint has no CUDA backend (built with " \
                      "FLEXPOINT_CUDA=OFF or without nvcc), so no op runs on a device"

static int fx_gnn_none(const char *func)
{
    return fx_error(FX_EDEVICE, func, FX_NN_NO_CUDA);
}

int fx_gnn_host_ptr(const void *p, const char *name, const char *func)
{
    /* without CUDA every pointer is host memory */
    (void)p;
    (void)name;
    (void)func;
    return FX_OK;
}

int fx_gnn_maxpool2d(tensor_t *y, int32_t *argmax, const tensor_t *x, const fx_pool_geom *g,
                     const char *func)
{
    (void)y, (void)argmax, (void)x, (void)g;
    return fx_gnn_none(func);
}

int fx_gnn_maxpool2d_backward(tensor_t *dx, const tensor_t *dy, const int32_t *argmax,
                              int own_indices, const char *func)
{
    (void)dx, (void)dy, (void)argmax, (void)own_indices;
    return fx_gnn_none(func);
}

int fx_gnn_avgpool2d(tensor_t *y, const tensor_t *x, const fx_pool_geom *g, const char *func)
{
    (void)y, (void)x, (void)g;
    return fx_gnn_none(func);
}

int fx_gnn_avgpool2d_backward(tensor_t *dx, const tensor_t *dy, const fx_pool_geom *g,
                              const char *func)
{
    (void)dx, (void)dy, (void)g;
    return fx_gnn_none(func);
}

int fx_gnn_global_avgpool(tensor_t *y, const tensor_t *x, int64_t planes, int64_t HW,
                          const char *func)
{
    (void)y, (void)x, (void)planes, (void)HW;
    return fx_gnn_none(func);
}

int fx_gnn_global_avgpool_backward(tensor_t *dx, const tensor_t *dy, int64_t planes, int64_t HW,
                                   const char *func)
{
    (void)dx, (void)dy, (void)planes, (void)HW;
    return fx_gnn_none(func);
}

int fx_gnn_relu_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x, const char *func)
{
    (void)dx, (void)dy, (void)x;
    return fx_gnn_none(func);
}

int fx_gnn_dropout(tensor_t *y, const tensor_t *x, uint64_t thr, double factor, int64_t ms,
                   int k2, uint64_t seed, uint64_t step, const char *func)
{
    (void)y, (void)x, (void)thr, (void)factor, (void)ms, (void)k2, (void)seed, (void)step;
    return fx_gnn_none(func);
}

int fx_gnn_softmax_ce(float *loss, tensor_t *dlogits, const tensor_t *logits,
                      const int32_t *labels, double grad_scale, const char *func)
{
    (void)loss, (void)dlogits, (void)logits, (void)labels, (void)grad_scale;
    return fx_gnn_none(func);
}

int fx_gnn_mean(tensor_t *out, const tensor_t *a, int64_t outer, int64_t len, int64_t inner,
                const char *func)
{
    (void)out, (void)a, (void)outer, (void)len, (void)inner;
    return fx_gnn_none(func);
}

int fx_gnn_batchnorm(tensor_t *y, const tensor_t *x, const tensor_t *gamma, const tensor_t *beta,
                     float *running_mean, float *running_var, float *save_mean,
                     float *save_invstd, double momentum, double eps, int training,
                     const fx_bn_dims *d, const char *func)
{
    (void)y, (void)x, (void)gamma, (void)beta, (void)running_mean, (void)running_var;
    (void)save_mean, (void)save_invstd, (void)momentum, (void)eps, (void)training, (void)d;
    return fx_gnn_none(func);
}

int fx_gnn_batchnorm_backward(tensor_t *dx, tensor_t *dgamma, tensor_t *dbeta, const tensor_t *dy,
                              const tensor_t *x, const tensor_t *gamma, const float *save_mean,
                              const float *save_invstd, const fx_bn_dims *d, const char *func)
{
    (void)dx, (void)dgamma, (void)dbeta, (void)dy, (void)x, (void)gamma, (void)save_mean;
    (void)save_invstd, (void)d;
    return fx_gnn_none(func);
}

int fx_gnn_sgd_step(tensor_t *w, const tensor_t *grad, float *master, float *momentum_buf,
                    double lr, double momentum, double weight_decay, double grad_scale,
                    int stochastic, uint64_t seed, uint64_t step, const char *func)
{
    (void)w, (void)grad, (void)master, (void)momentum_buf, (void)lr, (void)momentum;
    (void)weight_decay, (void)grad_scale, (void)stochastic, (void)seed, (void)step;
    return fx_gnn_none(func);
}

int fx_gnn_adam_step(tensor_t *w, const tensor_t *grad, float *master, float *m, float *v,
                     double lr, double beta1, double beta2, double eps, double weight_decay,
                     double grad_scale, double bc1, double sqrt_bc2, int stochastic,
                     uint64_t seed, uint64_t step, const char *func)
{
    (void)w, (void)grad, (void)master, (void)m, (void)v, (void)lr, (void)beta1, (void)beta2;
    (void)eps, (void)weight_decay, (void)grad_scale, (void)bc1, (void)sqrt_bc2;
    (void)stochastic, (void)seed, (void)step;
    return fx_gnn_none(func);
}

int fx_gnn_unscale(float inv, const tensor_t *const *grads, int n, float *const *out,
                   int *found_inf, const char *func)
{
    (void)inv, (void)grads, (void)n, (void)out, (void)found_inf;
    return fx_gnn_none(func);
}
