/* The host implementations of the whole ops (src/core/op_table.h), one per op, each defined
 * next to its public function in src/nn/. Every CPU level installs them
 * (fx_nn_install_host_ops): they run on host tensors and reach the level's kernels through
 * fx_backend_active(). The public functions have validated the arguments and the dispatcher
 * has checked the placement, so these start from the op's work. */
#ifndef FX_NN_NN_OPS_H
#define FX_NN_NN_OPS_H

#include "../core/backend.h"
#include "../core/op_table.h"

int fx_nn_conv2d_host(const fx_op_args *a);
int fx_nn_conv2d_bias_relu_host(const fx_op_args *a);
int fx_nn_conv2d_backward_input_host(const fx_op_args *a);
int fx_nn_conv2d_backward_weight_host(const fx_op_args *a);
int fx_nn_maxpool2d_host(const fx_op_args *a);
int fx_nn_maxpool2d_backward_host(const fx_op_args *a);
int fx_nn_avgpool2d_host(const fx_op_args *a);
int fx_nn_avgpool2d_backward_host(const fx_op_args *a);
int fx_nn_global_avgpool_host(const fx_op_args *a);
int fx_nn_global_avgpool_backward_host(const fx_op_args *a);
int fx_nn_relu_backward_host(const fx_op_args *a);
int fx_nn_dropout_host(const fx_op_args *a);
int fx_nn_softmax_ce_host(const fx_op_args *a);
int fx_nn_mean_host(const fx_op_args *a);
int fx_nn_batchnorm_host(const fx_op_args *a);
int fx_nn_batchnorm_backward_host(const fx_op_args *a);
int fx_nn_sgd_step_host(const fx_op_args *a);
int fx_nn_adam_step_host(const fx_op_args *a); /* ADAM_STEP and ADAMW_STEP */
int fx_nn_unscale_host(const fx_op_args *a);
int fx_nn_clip_grad_norm_host(const fx_op_args *a);
int fx_nn_softmax_host(const fx_op_args *a);          /* SOFTMAX and LOG_SOFTMAX */
int fx_nn_softmax_backward_host(const fx_op_args *a); /* and LOG_SOFTMAX_BACKWARD */
int fx_nn_layernorm_host(const fx_op_args *a);
int fx_nn_layernorm_backward_host(const fx_op_args *a);
int fx_nn_bmm_host(const fx_op_args *a);
int fx_nn_bmm_backward_host(const fx_op_args *a);
int fx_nn_causal_mask_host(const fx_op_args *a);
int fx_nn_masked_fill_host(const fx_op_args *a);
int fx_nn_embedding_host(const fx_op_args *a);
int fx_nn_embedding_backward_host(const fx_op_args *a);

/* The fallback of FX_OP_CONV2D_BIAS_RELU: tensor_conv2d, tensor_add, tensor_relu in turn,
 * each sent on by the dispatcher (so it runs wherever those run). */
int fx_nn_conv2d_bias_relu_unfused(const fx_op_args *a);

/* Install every host implementation above in b->run (the scalar level; the vector levels
 * inherit them as copies of it). */
void fx_nn_install_host_ops(fx_backend *b);

#endif
