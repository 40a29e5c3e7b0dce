/* The host implementations of the whole ops (src/core/op_table.h), one per op, each defined
 * next to its public function in src/nn/. Every CPU level installs them
 * (fx_nn_install_host_ops): they run on host tensors and reach the level's kernels through
 * fx_backend_active(). The public functions have validated the arguments and the dispatcher
 * has checked the placement, so these start from the op's work. */
#ifndef FX_NN_NN_OPS_H
#define FX_NN_NN_OPS_H

#include "../core/backend.h"
#include "../core/op_table.h"
#include "../core/internal_export.h"

/* int fx_nn_<op>_host(const fx_op_args *a), one per line of FX_WHOLE_OPS (op_table.h) */
#define FX_NN_HOST_DECL(id, name, host) int host(const fx_op_args *a);
FX_WHOLE_OPS(FX_NN_HOST_DECL)
#undef FX_NN_HOST_DECL

/* The fallback of FX_OP_CONV2D_BIAS_RELU: tensor_conv2d, tensor_add, tensor_relu in turn,
 * each sent on by the dispatcher (so it runs wherever those run). */
int fx_nn_conv2d_bias_relu_unfused(const fx_op_args *a);

/* The trainer's convolution followed by its bias add and a ReLU in shared-exponent formats
 * (src/train/model.c, shared_relu): t = conv(x, w) as tensor_conv2d writes it, and where that
 * write keeps the exponent guessed before the op (fx_write_shared_guess_exp), also u = t + bias
 * and y = relu(u) as fx_shared_add_relu writes them, made from each chunk of t's rounding while
 * it is in cache (fx_add_relu_begin, shared_binary.h); *done says whether u and y were
 * written. The bits, exponents, statistics and trace records of all three writes are those of
 * the unfused ops. Where u and y were made, t's values are not stored (its write, exponent
 * and statistics are): the trainer reads t only to make u, as the float formats' fused layers
 * never write their convolution's output. On failure u and y may hold partial values of this
 * call (a training step that fails leaves its activations partial anyway). Returns
 * tensor_conv2d's status, or the writes' of u and y. */
FX_INTERNAL int fx_conv2d_shared_bias_relu(tensor_t *t, tensor_t *u, tensor_t *y,
                                           const tensor_t *x, const tensor_t *w,
                                           const tensor_t *bias, int sh, int sw, int ph, int pw,
                                           int *done);

/* relu(tensor_batchnorm(...)) into y in one pass, for a float y (fp32, fp16, bf16) on the host:
 * the values tensor_batchnorm then tensor_relu on y's format give, bit for bit, without the
 * normalised tensor written and read back (a batch norm and the ReLU after it, in training).
 * The arguments, checks and status codes of tensor_batchnorm; FX_BN_RELU_NOT_TAKEN, with
 * nothing written, for a shared-exponent y, tensors on a device, a distributed y, or with
 * fx_bn_relu_set_enabled(0) (the test switch). */
#define FX_BN_RELU_NOT_TAKEN 1 /* positive: no status is mistaken for it */
FX_INTERNAL int fx_batchnorm_relu(tensor_t *y, const tensor_t *x, const tensor_t *gamma,
                                  const tensor_t *beta, float *running_mean, float *running_var,
                                  float *save_mean, float *save_invstd, double momentum,
                                  double eps, int training);
/* y = tensor_batchnorm(...) and relu_y = relu(y) on the host, for FLEX16_5/DFP16 y and relu_y:
 * the two writes tensor_batchnorm then tensor_relu make (the same bits, exponents, statistics
 * and trace records), relu_y made from each piece of y while it is in cache where batch norm
 * takes its direct route (bn_direct.h), instead of a pass of its own over y. The arguments,
 * checks and status codes of tensor_batchnorm and tensor_relu; FX_BN_RELU_NOT_TAKEN, with
 * nothing written, for other formats, tensors on a device, a distributed y or relu_y, a relu_y
 * that shares storage with y, x, gamma or beta, or with fx_bn_relu_set_enabled(0). On failure
 * y and relu_y may hold partial values (a failed training step leaves its activations partial
 * anyway). y_written: NULL, or y's values may be left unwritten where relu_y's signs are y's
 * (bn_direct.h: y's write is made all the same, only its mantissas are not stored; a trainer
 * whose only reader of y is the ReLU's gradient then gates it by relu_y), *y_written saying
 * whether they were written; a y whose trace is on (tensor_trace_enable) is always written. */
FX_INTERNAL int fx_batchnorm_shared_relu(tensor_t *y, tensor_t *relu_y, const tensor_t *x,
                                         const tensor_t *gamma, const tensor_t *beta,
                                         float *running_mean, float *running_var,
                                         float *save_mean, float *save_invstd, double momentum,
                                         double eps, int training, int *y_written);
FX_INTERNAL void fx_bn_relu_set_enabled(int on);
FX_INTERNAL int64_t fx_bn_relu_made(void); /* test hook: the calls made */

/* Test hook: the fp16/bf16 batched products (bmm.c) whose items were converted straight into
 * a disposable output, with no 16-bit staging of their own. */
int64_t fx_nn_bmm_h16_direct_runs(void);

/* Test hook: 0 sends an fp16/bf16 ReLU gradient whose three tensors share one format through
 * the general route (a mask pass, then the masked copy) instead of its one pass (activation.c);
 * the bits are the same. */
void fx_nn_relu_backward_set_one_pass(int on);

/* Test hook: how many writes of a forward convolution's output (or of an input gradient by
 * phases) found their rounding already done, at the exponent guessed before the op (conv2d.c,
 * fx_write_shared_guess_exp). */
int64_t fx_conv_early_rounding_reused(void);
/* Of those, how many found it at the second exponent that a DFP16 output whose exponent moved
 * lately is also rounded at (conv2d.c, fx_write_shared_alt_exp). */
int64_t fx_conv_alt_rounding_reused(void);
/* Test hooks: how many writes of a DFP16 convolution output of long sums took their rounding
 * from its sums kept rounded to odd (conv2d.c, fx_backend.conv.i16_round_odd_keep) instead of
 * running the op again; and a switch (on by default) that turns that route off, so that tests
 * compare it with the stage and the runs again. */
int64_t fx_conv_round_odd_taken(void);
void fx_conv_round_odd_set_enabled(int on);
/* Test hook: how many integer convolutions (forward, or input gradient by phases) put their
 * early rounding into their output itself, a disposable one (fx_storage.disposable), instead
 * of a buffer copied in after the write. */
int64_t fx_conv_in_place_made(void);
/* Test hook: how many forward convolutions into a whole float output (fp32, fp16, bf16) from a
 * direct kernel wrote it chunk by chunk, each chunk's epilogue, conversion and transpose done
 * while its sums were in cache, instead of through a stage of the whole batch. */
int64_t fx_conv_y_chunks_made(void);

/* Test hooks: how many forward convolutions (and input gradients by phases) ran again after a
 * first run that kept only each chunk's sums found the write picking another exponent than its
 * guess, and how many of those
 * runs kept a whole int64 stage (a FLEX16_5 recompute; a DFP16 write's exact exponent needs
 * none) (conv2d.c). */
int64_t fx_conv_stage_redone(void);
int64_t fx_conv_redone_staged(void);

/* Test hooks: 0 keeps a strided 1x1 convolution without padding on its own route instead of the
 * stride-1 convolution of the pixels it reads (conv2d.c; the same bits): the forward pass under
 * integer or bf16 compute and the weight gradient under bf16 compute, counted; whether the
 * active backend's bf16 compute takes that route (not the AMX route). */
void fx_conv_subsample_set_enabled(int on);
int64_t fx_conv_subsampled(void);
int fx_conv_subsample_takes_bf16(void);

/* Test hooks: 0 keeps a stride-2 bf16 input gradient on the pair GEMM and col2im instead of its
 * phases on the direct forward tiles (conv2d.c, conv_backward_input_bf16_s2; other bits: each
 * route has its own order of the sums); the phased ops counted. */
void fx_conv_bf16_phases_set_enabled(int on);
int64_t fx_conv_bf16_phased(void);

/* Install every host implementation of FX_WHOLE_OPS in b->run (the scalar level; the vector
 * levels inherit them as copies of it). */
void fx_nn_install_host_ops(fx_backend *b);

#endif
