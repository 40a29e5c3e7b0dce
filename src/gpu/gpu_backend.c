/* The CUDA backend as the core sees it: one fx_device_backend (src/core/device_backend.h) whose
 * entries are the host-side functions of src/gpu/. The whole ops' entries unpack the op's
 * arguments (src/core/op_table.h) into the device implementations (gpu_nn.c, gpu_conv.c),
 * which follow the CPU code of the same op.
 *
 * What it computes: the stage ops copy, add, sub, mul, scale, relu, sum and matmul; the whole
 * ops convolution (forward and both gradients), pooling, ReLU backward, dropout, softmax
 * cross-entropy, mean, batch norm, SGD, Adam and loss-scale unscaling. Not the element-wise
 * math (tensor_unary), AdamW, gradient clipping, nor the fused convolution with bias and ReLU,
 * which the dispatcher runs as its unfused fallback of three device ops. The dispatcher reports
 * the others as FX_EUNSUPPORTED naming this backend. */
#include "../core/device_backend.h"
#include "gpu.h"
#include "gpu_conv.h"
#include "gpu_kernels.h"
#include "gpu_nn.h"

extern const fx_device_backend fx_cuda_backend;

static int cuda_supports_op(int op, fmt_t fmt)
{
    (void)fmt; /* every format: the kernels widen or quantise their inputs as the CPU does */
    if (op >= 0 && op < FX_OP_STAGE_COUNT) return fx_gpu_stage_op_supported(op);
    return op >= FX_OP_STAGE_COUNT && op < FX_OP_COUNT && fx_cuda_backend.run[op] != NULL;
}

static int cuda_conv(const fx_op_args *a)
{
    const int kind = a->op == FX_OP_CONV2D                  ? FX_GCONV_FORWARD
                     : a->op == FX_OP_CONV2D_BACKWARD_INPUT ? FX_GCONV_BACKWARD_INPUT
                                                            : FX_GCONV_BACKWARD_WEIGHT;
    return fx_gpu_conv2d(kind, a->u.conv.out, a->u.conv.a, a->u.conv.b, a->u.conv.g, a->func);
}

static int cuda_maxpool(const fx_op_args *a)
{
    return fx_gnn_maxpool2d(a->u.pool.out, a->u.pool.argmax, a->u.pool.in, a->u.pool.g,
                            a->func);
}

static int cuda_maxpool_backward(const fx_op_args *a)
{
    return fx_gnn_maxpool2d_backward(a->u.pool.out, a->u.pool.in, a->u.pool.argmax_in,
                                     a->u.pool.own_indices, a->func);
}

static int cuda_avgpool(const fx_op_args *a)
{
    return fx_gnn_avgpool2d(a->u.pool.out, a->u.pool.in, a->u.pool.g, a->func);
}

static int cuda_avgpool_backward(const fx_op_args *a)
{
    return fx_gnn_avgpool2d_backward(a->u.pool.out, a->u.pool.in, a->u.pool.g, a->func);
}

static int cuda_global_avgpool(const fx_op_args *a)
{
    return fx_gnn_global_avgpool(a->u.pool.out, a->u.pool.in, a->u.pool.planes, a->u.pool.HW,
                                 a->func);
}

static int cuda_global_avgpool_backward(const fx_op_args *a)
{
    return fx_gnn_global_avgpool_backward(a->u.pool.out, a->u.pool.in, a->u.pool.planes,
                                          a->u.pool.HW, a->func);
}

static int cuda_relu_backward(const fx_op_args *a)
{
    return fx_gnn_relu_backward(a->u.relu_bwd.dx, a->u.relu_bwd.dy, a->u.relu_bwd.x, a->func);
}

static int cuda_dropout(const fx_op_args *a)
{
    return fx_gnn_dropout(a->u.dropout.y, a->u.dropout.x, a->u.dropout.thr, a->u.dropout.factor,
                          a->u.dropout.ms, a->u.dropout.k2, a->u.dropout.seed, a->u.dropout.step,
                          a->func);
}

static int cuda_softmax_ce(const fx_op_args *a)
{
    return fx_gnn_softmax_ce(a->u.ce.loss, a->u.ce.dlogits, a->u.ce.logits, a->u.ce.labels,
                             a->u.ce.grad_scale, a->func);
}

static int cuda_mean(const fx_op_args *a)
{
    return fx_gnn_mean(a->u.mean.out, a->u.mean.a, a->u.mean.outer, a->u.mean.len,
                       a->u.mean.inner, a->func);
}

static int cuda_batchnorm(const fx_op_args *a)
{
    return fx_gnn_batchnorm(a->u.bn.y, a->u.bn.x, a->u.bn.gamma, a->u.bn.beta,
                            a->u.bn.running_mean, a->u.bn.running_var, a->u.bn.save_mean,
                            a->u.bn.save_invstd, a->u.bn.momentum, a->u.bn.eps, a->u.bn.training,
                            a->u.bn.d, a->func);
}

static int cuda_batchnorm_backward(const fx_op_args *a)
{
    return fx_gnn_batchnorm_backward(a->u.bn_bwd.dx, a->u.bn_bwd.dgamma, a->u.bn_bwd.dbeta,
                                     a->u.bn_bwd.dy, a->u.bn_bwd.x, a->u.bn_bwd.gamma,
                                     a->u.bn_bwd.save_mean, a->u.bn_bwd.save_invstd,
                                     a->u.bn_bwd.d, a->func);
}

/* The optimiser steps return at once for an empty w, as on the host. */
static int cuda_sgd_step(const fx_op_args *a)
{
    const tensor_t *w = a->u.optim.w;
    if (fx_numel_of(w->ndim, w->shape) == 0) return FX_OK;
    return fx_gnn_sgd_step(a->u.optim.w, a->u.optim.grad, a->u.optim.master, a->u.optim.buf1,
                           a->u.optim.lr, a->u.optim.momentum, a->u.optim.weight_decay,
                           a->u.optim.grad_scale, a->u.optim.stochastic, a->u.optim.seed,
                           a->u.optim.step, a->func);
}

static int cuda_adam_step(const fx_op_args *a)
{
    const tensor_t *w = a->u.optim.w;
    if (fx_numel_of(w->ndim, w->shape) == 0) return FX_OK;
    return fx_gnn_adam_step(a->u.optim.w, a->u.optim.grad, a->u.optim.master, a->u.optim.buf1,
                            a->u.optim.buf2, a->u.optim.lr, a->u.optim.beta1, a->u.optim.beta2,
                            a->u.optim.eps, a->u.optim.weight_decay, a->u.optim.grad_scale,
                            a->u.optim.bc1, a->u.optim.sqrt_bc2, a->u.optim.stochastic,
                            a->u.optim.seed, a->u.optim.step, a->func);
}

static int cuda_unscale(const fx_op_args *a)
{
    return fx_gnn_unscale(a->u.unscale.inv, a->tlist, a->tlist_n, a->u.unscale.out,
                          a->u.unscale.found_inf, a->func);
}

static void cuda_set_i16_gemm(int path, int64_t chunk)
{
    fx_gk_matmul_i16_set_path(path);
    fx_gk_matmul_i16_set_chunk(chunk);
}

static int cuda_device_count(void) { return fx_gr_device_count(); }

const fx_device_backend fx_cuda_backend = {
    .name = "cuda",
    .supports_op = cuda_supports_op,
    .dispatch = fx_gpu_dispatch,
    .run =
        {
            [FX_OP_CONV2D] = cuda_conv,
            [FX_OP_CONV2D_BACKWARD_INPUT] = cuda_conv,
            [FX_OP_CONV2D_BACKWARD_WEIGHT] = cuda_conv,
            [FX_OP_MAXPOOL2D] = cuda_maxpool,
            [FX_OP_MAXPOOL2D_BACKWARD] = cuda_maxpool_backward,
            [FX_OP_AVGPOOL2D] = cuda_avgpool,
            [FX_OP_AVGPOOL2D_BACKWARD] = cuda_avgpool_backward,
            [FX_OP_GLOBAL_AVGPOOL] = cuda_global_avgpool,
            [FX_OP_GLOBAL_AVGPOOL_BACKWARD] = cuda_global_avgpool_backward,
            [FX_OP_RELU_BACKWARD] = cuda_relu_backward,
            [FX_OP_DROPOUT] = cuda_dropout,
            [FX_OP_SOFTMAX_CE] = cuda_softmax_ce,
            [FX_OP_MEAN] = cuda_mean,
            [FX_OP_BATCHNORM] = cuda_batchnorm,
            [FX_OP_BATCHNORM_BACKWARD] = cuda_batchnorm_backward,
            [FX_OP_SGD_STEP] = cuda_sgd_step,
            [FX_OP_ADAM_STEP] = cuda_adam_step,
            [FX_OP_UNSCALE] = cuda_unscale,
        },
    .host_readable = fx_gnn_host_ptr,
    .alloc_zero = fx_cuda_alloc_zero,
    .free = fx_cuda_free,
    .rescale = fx_cuda_rescale,
    .device_count = cuda_device_count,
    .set_device = fx_cuda_set_device,
    .current_device = fx_cuda_current_device,
    .synchronize = fx_cuda_synchronize,
    .device_name = fx_cuda_device_name,
    .tensor_new = fx_cuda_tensor_new,
    .tensor_to_device = fx_cuda_tensor_to_device,
    .tensor_to_host = fx_cuda_tensor_to_host,
    .copy_to_device = fx_cuda_copy_to_device,
    .copy_to_host = fx_cuda_copy_to_host,
    .malloc = fx_cuda_malloc,
    .free_user = fx_cuda_free_user,
    .release_cache = fx_cuda_release_cache,
    .host_waits = fx_gr_host_waits,
    .memcpy_to_device = fx_cuda_memcpy_to_device,
    .memcpy_to_host = fx_cuda_memcpy_to_host,
    .set_i16_gemm = cuda_set_i16_gemm,
    .set_conv_chunk = fx_gpu_conv_chunk_elems,
};
