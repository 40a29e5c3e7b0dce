/* The host whole-op table (nn_ops.h): the one list of what a CPU level computes beyond the
 * stage kernels. */
#include "nn_ops.h"

void fx_nn_install_host_ops(fx_backend *b)
{
    b->run[FX_OP_CONV2D] = fx_nn_conv2d_host;
    b->run[FX_OP_CONV2D_BIAS_RELU] = fx_nn_conv2d_bias_relu_host;
    b->run[FX_OP_CONV2D_BACKWARD_INPUT] = fx_nn_conv2d_backward_input_host;
    b->run[FX_OP_CONV2D_BACKWARD_WEIGHT] = fx_nn_conv2d_backward_weight_host;
    b->run[FX_OP_MAXPOOL2D] = fx_nn_maxpool2d_host;
    b->run[FX_OP_MAXPOOL2D_BACKWARD] = fx_nn_maxpool2d_backward_host;
    b->run[FX_OP_AVGPOOL2D] = fx_nn_avgpool2d_host;
    b->run[FX_OP_AVGPOOL2D_BACKWARD] = fx_nn_avgpool2d_backward_host;
    b->run[FX_OP_GLOBAL_AVGPOOL] = fx_nn_global_avgpool_host;
    b->run[FX_OP_GLOBAL_AVGPOOL_BACKWARD] = fx_nn_global_avgpool_backward_host;
    b->run[FX_OP_RELU_BACKWARD] = fx_nn_relu_backward_host;
    b->run[FX_OP_DROPOUT] = fx_nn_dropout_host;
    b->run[FX_OP_SOFTMAX_CE] = fx_nn_softmax_ce_host;
    b->run[FX_OP_MEAN] = fx_nn_mean_host;
    b->run[FX_OP_BATCHNORM] = fx_nn_batchnorm_host;
    b->run[FX_OP_BATCHNORM_BACKWARD] = fx_nn_batchnorm_backward_host;
    b->run[FX_OP_SGD_STEP] = fx_nn_sgd_step_host;
    b->run[FX_OP_ADAM_STEP] = fx_nn_adam_step_host;
    b->run[FX_OP_ADAMW_STEP] = fx_nn_adam_step_host;
    b->run[FX_OP_UNSCALE] = fx_nn_unscale_host;
    b->run[FX_OP_CLIP_GRAD_NORM] = fx_nn_clip_grad_norm_host;
    b->run[FX_OP_SOFTMAX] = fx_nn_softmax_host;
    b->run[FX_OP_LOG_SOFTMAX] = fx_nn_softmax_host;
    b->run[FX_OP_SOFTMAX_BACKWARD] = fx_nn_softmax_backward_host;
    b->run[FX_OP_LOG_SOFTMAX_BACKWARD] = fx_nn_softmax_backward_host;
    b->run[FX_OP_LAYERNORM] = fx_nn_layernorm_host;
    b->run[FX_OP_LAYERNORM_BACKWARD] = fx_nn_layernorm_backward_host;
    b->run[FX_OP_BMM] = fx_nn_bmm_host;
    b->run[FX_OP_BMM_BACKWARD] = fx_nn_bmm_backward_host;
    b->run[FX_OP_CAUSAL_MASK] = fx_nn_causal_mask_host;
    b->run[FX_OP_MASKED_FILL] = fx_nn_masked_fill_host;
    b->run[FX_OP_EMBEDDING] = fx_nn_embedding_host;
    b->run[FX_OP_EMBEDDING_BACKWARD] = fx_nn_embedding_backward_host;
}
