/**
 * @file
 * @brief flexpoint training ops: convolution, pooling, activations, loss, normalisation, dropout,
 * optimiser steps and loss scaling, forward and backward, for every format.
 *
 * Conventions are those of flexpoint.h (status codes, thread-local messages, ownership: the
 * caller owns every tensor and buffer; ops write into caller-provided outputs and leave them
 * untouched on failure). Layout is NCHW; weights are [O, C, KH, KW].
 *
 * Per-format rules (docs/formats.md): convolution, pooling, ReLU and dropout masks are integer-only
 * for FLEX16_5/DFP16 inputs (convolution is im2col + the format's exact GEMM, so it is
 * bit-identical on every backend); softmax/cross-entropy, batch-norm statistics and the
 * optimisers compute in fp32 (the inputs are dequantised, the outputs written once).
 */
#ifndef FLEXPOINT_NN_H
#define FLEXPOINT_NN_H

#include "flexpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- convolution (2-D, NCHW) ------------------------------------------------------------- */

/** @brief 2-D convolution: y[N,O,OH,OW] = conv(x[N,C,H,W], w[O,C,KH,KW]).
 *
 *  Stride (sh, sw) >= 1, zero padding (ph, pw) >= 0 and dilation (dil_h, dil_w) >= 1;
 *  OH = (H + 2ph - dil_h(KH-1) - 1)/sh + 1, likewise OW. No bias (add it with tensor_add() and
 *  a [O,1,1] tensor).
 *  @param[out] y     Output [N,O,OH,OW], any format.
 *  @param[in]  x     Input [N,C,H,W].
 *  @param[in]  w     Weights [O,C,KH,KW].
 *  @param[in]  sh    Vertical stride, >= 1.
 *  @param[in]  sw    Horizontal stride, >= 1.
 *  @param[in]  ph    Vertical zero padding, >= 0.
 *  @param[in]  pw    Horizontal zero padding, >= 0.
 *  @param[in]  dil_h Vertical dilation, >= 1.
 *  @param[in]  dil_w Horizontal dilation, >= 1.
 *  @return FX_OK; FX_EINVAL (NULL tensor, bad stride, padding or dilation, host and device
 *          tensors mixed); FX_ESHAPE (shapes that do not fit, an empty batch, a zero channel
 *          or kernel size, a kernel larger than the padded input); FX_EUNSUPPORTED (integer
 *          compute whose sums exceed 2^32 products); FX_ENOMEM; FX_EDEVICE. */
FX_API int tensor_conv2d(tensor_t *y, const tensor_t *x, const tensor_t *w, int sh, int sw,
                         int ph, int pw, int dil_h, int dil_w);
/** @brief Fused convolution, bias and ReLU: y = relu(conv(x, w) + bias).
 *
 *  The bits are those of the unfused sequence tensor_conv2d into a
 *  tensor of y's format, tensor_add of bias, tensor_relu, in one write: for a float y (FP32,
 *  FP16, BF16) on the host under float compute (x not FLEX16_5/DFP16) the bias and the ReLU are
 *  applied to each chunk of the GEMM's results while they are in cache (no extra passes over y);
 *  elsewhere (device tensors, y a partial view, integer compute, a shared-exponent bias) the
 *  three ops run in sequence through a temporary. bias: NULL (no bias) or shape [O, 1, 1], any
 *  format; relu: 0 or 1. FX_EUNSUPPORTED for a FLEX16_5/DFP16 y: its three writes would each
 *  need their own Autoflex state, so call the three ops. FX_ESHAPE for a bias of another shape;
 *  otherwise as tensor_conv2d.
 *  @param[out] y     Output [N,O,OH,OW], any format but FLEX16_5/DFP16.
 *  @param[in]  x     Input [N,C,H,W].
 *  @param[in]  w     Weights [O,C,KH,KW].
 *  @param[in]  bias  NULL (no bias) or shape [O, 1, 1], any format.
 *  @param[in]  relu  1 applies the ReLU, 0 does not.
 *  @param[in]  sh    Vertical stride, >= 1.
 *  @param[in]  sw    Horizontal stride, >= 1.
 *  @param[in]  ph    Vertical zero padding, >= 0.
 *  @param[in]  pw    Horizontal zero padding, >= 0.
 *  @param[in]  dil_h Vertical dilation, >= 1.
 *  @param[in]  dil_w Horizontal dilation, >= 1.
 *  @return As tensor_conv2d(), and FX_EINVAL for a relu other than 0 or 1, FX_EUNSUPPORTED
 *          for a FLEX16_5/DFP16 y, FX_ESHAPE for a bias of another shape. */
FX_API int tensor_conv2d_bias_relu(tensor_t *y, const tensor_t *x, const tensor_t *w,
                                   const tensor_t *bias, int relu, int sh, int sw, int ph, int pw,
                                   int dil_h, int dil_w);
/** @brief Gradient of the convolution with respect to its input: dx[N,C,H,W], given dy and w.
 *  @param[out] dx    Input gradient [N,C,H,W], any format.
 *  @param[in]  dy    Output gradient [N,O,OH,OW].
 *  @param[in]  w     Weights [O,C,KH,KW].
 *  @param[in]  sh    Vertical stride, >= 1.
 *  @param[in]  sw    Horizontal stride, >= 1.
 *  @param[in]  ph    Vertical zero padding, >= 0.
 *  @param[in]  pw    Horizontal zero padding, >= 0.
 *  @param[in]  dil_h Vertical dilation, >= 1.
 *  @param[in]  dil_w Horizontal dilation, >= 1.
 *  @return As tensor_conv2d(). */
FX_API int tensor_conv2d_backward_input(tensor_t *dx, const tensor_t *dy, const tensor_t *w,
                                        int sh, int sw, int ph, int pw, int dil_h, int dil_w);
/** @brief Gradient of the convolution with respect to the weights: dw[O,C,KH,KW], given x and
 *  dy (summed over N).
 *  @param[out] dw    Weight gradient [O,C,KH,KW], any format.
 *  @param[in]  x     The forward input [N,C,H,W].
 *  @param[in]  dy    Output gradient [N,O,OH,OW].
 *  @param[in]  sh    Vertical stride, >= 1.
 *  @param[in]  sw    Horizontal stride, >= 1.
 *  @param[in]  ph    Vertical zero padding, >= 0.
 *  @param[in]  pw    Horizontal zero padding, >= 0.
 *  @param[in]  dil_h Vertical dilation, >= 1.
 *  @param[in]  dil_w Horizontal dilation, >= 1.
 *  @return As tensor_conv2d(). */
FX_API int tensor_conv2d_backward_weight(tensor_t *dw, const tensor_t *x, const tensor_t *dy,
                                         int sh, int sw, int ph, int pw, int dil_h, int dil_w);

/* --- pooling -------------------------------------------------------------------------------- */

/** @brief 2-D max pooling (NCHW).
 *
 *  Window (kh, kw), stride (sh, sw), padding (ph, pw) (padding never wins;
 *  padding may be at most half the window, as in PyTorch, else FX_EINVAL; N = 0 gives
 *  FX_ESHAPE). argmax (may be NULL) receives, per output element, the flat index into x of the
 *  maximum, for the backward pass; it must hold numel(y) int32 values (FX_EUNSUPPORTED when
 *  numel(x) >= 2^31 and argmax is requested). Integer formats compare mantissas exactly.
 *  @param[out] y      Output [N,C,OH,OW], any format.
 *  @param[out] argmax NULL, or numel(y) int32 values: the flat index into x of each maximum.
 *  @param[in]  x      Input [N,C,H,W].
 *  @param[in]  kh Window height, >= 1.
 *  @param[in]  kw Window width, >= 1.
 *  @param[in]  sh Vertical stride, >= 1.
 *  @param[in]  sw Horizontal stride, >= 1.
 *  @param[in]  ph Vertical padding, >= 0 and at most half the window.
 *  @param[in]  pw Horizontal padding, likewise.
 *  @return FX_OK; FX_EINVAL (NULL tensor, bad window, stride or padding, tensors in different
 *          places); FX_ESHAPE (shapes, N = 0 or no channels, a window that does not fit);
 *          FX_EUNSUPPORTED (numel(x) >= 2^31 with argmax); FX_ENOMEM; FX_EDEVICE. */
FX_API int tensor_maxpool2d(tensor_t *y, int32_t *argmax, const tensor_t *x, int kh, int kw,
                            int sh, int sw, int ph, int pw);
/** @brief Gradient of max pooling: dx = scatter-add of dy at argmax (dx is overwritten, zeros
 *  elsewhere).
 *  @param[out] dx     Input gradient [N,C,H,W], any format.
 *  @param[in]  dy     Output gradient [N,C,OH,OW].
 *  @param[in]  argmax The forward pass's indices (numel(dy) values). Each index must lie in
 *                     its own (n, c) plane of dx, as the forward pass produces.
 *  @return FX_OK; FX_EINVAL (NULL argument); FX_ESHAPE (batch or channels differ, N = 0 or no
 *          channels); FX_ERANGE (an index outside its plane); FX_EUNSUPPORTED (numel(dx)
 *          >= 2^31); FX_ENOMEM; FX_EDEVICE. */
FX_API int tensor_maxpool2d_backward(tensor_t *dx, const tensor_t *dy, const int32_t *argmax);
/** @brief 2-D average pooling; padded positions count in the divisor (count_include_pad).
 *
 *  Integer formats: exact int64 sums, and the division is folded into the single rounding of
 *  the write (correctly rounded average, see src/nn/pool.c).
 *  @param[out] y  Output [N,C,OH,OW], any format.
 *  @param[in]  x  Input [N,C,H,W].
 *  @param[in]  kh Window height, >= 1.
 *  @param[in]  kw Window width, >= 1.
 *  @param[in]  sh Vertical stride, >= 1.
 *  @param[in]  sw Horizontal stride, >= 1.
 *  @param[in]  ph Vertical padding, >= 0 and at most half the window.
 *  @param[in]  pw Horizontal padding, likewise.
 *  @return FX_OK; FX_EINVAL (NULL tensor, bad parameters, tensors in different places);
 *          FX_ESHAPE; FX_EUNSUPPORTED (a window of more than 2^40 elements); FX_ENOMEM;
 *          FX_EDEVICE. */
FX_API int tensor_avgpool2d(tensor_t *y, const tensor_t *x, int kh, int kw, int sh, int sw,
                            int ph, int pw);
/** @brief Gradient of tensor_avgpool2d() with respect to its input.
 *  @param[out] dx Input gradient [N,C,H,W], any format.
 *  @param[in]  dy Output gradient [N,C,OH,OW].
 *  @param[in]  kh Window height, >= 1.
 *  @param[in]  kw Window width, >= 1.
 *  @param[in]  sh Vertical stride, >= 1.
 *  @param[in]  sw Horizontal stride, >= 1.
 *  @param[in]  ph Vertical padding, >= 0 and at most half the window.
 *  @param[in]  pw Horizontal padding, likewise.
 *  @return As tensor_avgpool2d(). */
FX_API int tensor_avgpool2d_backward(tensor_t *dx, const tensor_t *dy, int kh, int kw, int sh,
                                     int sw, int ph, int pw);
/** @brief Global average pooling: x[N,C,H,W] -> y[N,C] (or [N,C,1,1]).
 *  @param[out] y Output [N,C] or [N,C,1,1], any format.
 *  @param[in]  x Input [N,C,H,W].
 *  @return FX_OK; FX_EINVAL (NULL, tensors in different places); FX_ESHAPE (shapes, an empty
 *          x); FX_EUNSUPPORTED (more than 2^40 elements per plane); FX_ENOMEM; FX_EDEVICE. */
FX_API int tensor_global_avgpool(tensor_t *y, const tensor_t *x);
/** @brief Gradient of tensor_global_avgpool() with respect to its input.
 *  @param[out] dx Input gradient [N,C,H,W], any format.
 *  @param[in]  dy Output gradient [N,C] or [N,C,1,1].
 *  @return As tensor_global_avgpool(). */
FX_API int tensor_global_avgpool_backward(tensor_t *dx, const tensor_t *dy);

/* --- activations ------------------------------------------------------------------------- */

/** @brief Gradient of ReLU: dx = dy where x > 0, else 0 (same shapes).
 *  @param[out] dx Input gradient, any format.
 *  @param[in]  dy Output gradient.
 *  @param[in]  x  The forward input.
 *  @return FX_OK; FX_EINVAL (NULL, tensors in different places); FX_ESHAPE; FX_ENOMEM;
 *          FX_EDEVICE. */
FX_API int tensor_relu_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x);

/* --- loss ---------------------------------------------------------------------------------- */

/** @brief Softmax cross-entropy loss and its gradient.
 *
 *  Softmax cross-entropy of logits[N,K] against int32 labels[N] in [0, K). *loss receives the
 *  mean loss (fp32 math, log-sum-exp stabilised). If dlogits (same shape) is not NULL it
 *  receives grad_scale * (softmax - onehot) / N, written once in its format (grad_scale is
 *  the loss scale; 1 for none). FX_ERANGE names the first out-of-range label; FX_ESHAPE for
 *  N = 0 or mismatched shapes.
 *  @param[out] loss       The mean loss.
 *  @param[out] dlogits    NULL, or the gradient with logits' shape, any format.
 *  @param[in]  logits     Logits [N,K].
 *  @param[in]  labels     N labels in [0, K).
 *  @param[in]  grad_scale Factor of the gradient (the loss scale; 1 for none), finite.
 *  @return FX_OK; FX_EINVAL (loss, logits or labels NULL, grad_scale not finite, tensors or
 *          buffers in the wrong places); FX_ESHAPE (logits not 2-D, N = 0, K = 0, dlogits of
 *          another shape); FX_ERANGE (a label out of range); FX_ENOMEM; FX_EDEVICE. */
FX_API int tensor_softmax_cross_entropy(float *loss, tensor_t *dlogits, const tensor_t *logits,
                                        const int32_t *labels, double grad_scale);

/* --- batch normalisation (per channel of NCHW, or per feature of [N,F]) --------------------- */

/** @brief Batch normalisation, per channel of NCHW or per feature of [N,F].
 *
 *  training 1: normalise with the batch statistics, update running_mean/running_var
 *  (float[C], momentum as in PyTorch: r = (1-m) r + m batch, unbiased variance) and store
 *  save_mean/save_invstd (float[C], may be NULL when not training) for the backward pass.
 *  training 0: normalise with the running statistics. gamma, beta: [C] tensors of any
 *  format. Statistics and normalisation run in fp32 (accumulated in double); y is written once
 *  in its format. Needs N*H*W >= 2 in training (FX_ESHAPE).
 *  @param[out]    y            Output with x's shape, any format.
 *  @param[in]     x            Input [N,C,H,W] or [N,F].
 *  @param[in]     gamma        Scale, [C].
 *  @param[in]     beta         Shift, [C].
 *  @param[in,out] running_mean float[C] running mean (updated in training, read in inference).
 *  @param[in,out] running_var  float[C] running variance (likewise).
 *  @param[out]    save_mean    float[C] batch mean for the backward pass; may be NULL when not
 *                              training.
 *  @param[out]    save_invstd  float[C] batch 1/std for the backward pass; likewise.
 *  @param[in]     momentum     Momentum of the running statistics, in [0, 1].
 *  @param[in]     eps          Added to the variance, finite and >= 0.
 *  @param[in]     training     1: training mode; 0: inference.
 *  @return FX_OK; FX_EINVAL (NULL tensor, bad training, momentum or eps, missing running
 *          statistics, tensors or buffers in the wrong places); FX_ESHAPE (shapes, too few
 *          values per channel in training); FX_ENOMEM; FX_EDEVICE. */
FX_API int tensor_batchnorm(tensor_t *y, const tensor_t *x, const tensor_t *gamma,
                            const tensor_t *beta, float *running_mean, float *running_var,
                            float *save_mean, float *save_invstd, double momentum, double eps,
                            int training);
/** @brief Gradients of training-mode batch norm: dx, dgamma, dbeta (dgamma/dbeta may be NULL).
 *  @param[out] dx          Input gradient with x's shape, any format.
 *  @param[out] dgamma      NULL, or the gradient of gamma, [C].
 *  @param[out] dbeta       NULL, or the gradient of beta, [C].
 *  @param[in]  dy          Output gradient with x's shape.
 *  @param[in]  x           The forward input.
 *  @param[in]  gamma       The forward scale, [C].
 *  @param[in]  save_mean   float[C] from the forward pass.
 *  @param[in]  save_invstd float[C] from the forward pass.
 *  @return FX_OK; FX_EINVAL (a required argument NULL, tensors or buffers in the wrong
 *          places); FX_ESHAPE; FX_ENOMEM; FX_EDEVICE. */
FX_API int tensor_batchnorm_backward(tensor_t *dx, tensor_t *dgamma, tensor_t *dbeta,
                                     const tensor_t *dy, const tensor_t *x,
                                     const tensor_t *gamma, const float *save_mean,
                                     const float *save_invstd);

/* --- dropout ------------------------------------------------------------------------------ */

/** @brief Dropout: y = x * mask / (1 - p), mask[i] = 0 with probability p.
 *
 *  The mask is drawn from a counter-based generator keyed by (seed, step, element index):
 *  reproducible for any thread count, and the backward pass recomputes the same mask.
 *  @param[out] y    Output with x's shape, any format.
 *  @param[in]  x    Input.
 *  @param[in]  p    Drop probability, in [0, 1).
 *  @param[in]  seed Seed of the mask.
 *  @param[in]  step Step counter of the mask (the same in the backward pass).
 *  @return FX_OK; FX_EINVAL (NULL, p outside [0, 1), tensors in different places); FX_ESHAPE;
 *          FX_ENOMEM; FX_EDEVICE. */
FX_API int tensor_dropout(tensor_t *y, const tensor_t *x, double p, uint64_t seed, uint64_t step);
/** @brief Gradient of tensor_dropout(): dx = dy * mask / (1 - p), with the forward mask.
 *  @param[out] dx   Input gradient with dy's shape, any format.
 *  @param[in]  dy   Output gradient.
 *  @param[in]  p    The forward drop probability.
 *  @param[in]  seed The forward seed.
 *  @param[in]  step The forward step.
 *  @return As tensor_dropout(). */
FX_API int tensor_dropout_backward(tensor_t *dx, const tensor_t *dy, double p, uint64_t seed,
                                   uint64_t step);

/* --- reductions ---------------------------------------------------------------------------- */

/** @brief Mean of a along axis (or FX_AXIS_ALL); shapes as tensor_sum().
 *  @param[out] out  Output, any format.
 *  @param[in]  a    Input.
 *  @param[in]  axis The axis (negative counts from the end) or FX_AXIS_ALL.
 *  @return FX_OK; FX_EINVAL (NULL, bad axis); FX_ESHAPE (shapes, a mean over zero elements);
 *          FX_ENOMEM; FX_EDEVICE. */
FX_API int tensor_mean(tensor_t *out, const tensor_t *a, int axis);

/* --- optimisers ---------------------------------------------------------------------------- */

/** @brief One SGD step with momentum and weight decay.
 *
 *  PyTorch semantics: g = grad*grad_scale + wd*w; buf = momentum*buf + g; w -= lr*buf.
 *  momentum_buf: float[numel(w)], caller-owned, zero at
 *  start (may be NULL when momentum is 0). master: float[numel(w)] fp32 master weights (the
 *  caller fills it from w once), updated and then written to w once in w's format; master NULL
 *  updates w in place (its 16-bit values are read, updated in fp32 and written back).
 *  stochastic 1 rounds the write of w stochastically, with or without a master, keyed by
 *  (seed, step, element index); fp32 ignores it. w and grad must have the same shape (grad of
 *  any format). A failing step changes nothing.
 *  @param[in,out] w            Weights, any format.
 *  @param[in]     grad         Gradient with w's shape, any format.
 *  @param[in,out] master       NULL, or float[numel(w)] fp32 master weights.
 *  @param[in,out] momentum_buf float[numel(w)] momentum buffer, zero at start; NULL only when
 *                              momentum is 0.
 *  @param[in]     lr           Learning rate, finite and >= 0.
 *  @param[in]     momentum     Momentum, finite and >= 0.
 *  @param[in]     weight_decay Weight decay, finite and >= 0.
 *  @param[in]     grad_scale   Factor applied to grad (e.g. 1/loss scale), finite.
 *  @param[in]     stochastic   1 rounds the write of w stochastically, 0 does not.
 *  @param[in]     seed         Seed of the stochastic rounding.
 *  @param[in]     step         Step counter of the stochastic rounding.
 *  @return FX_OK; FX_EINVAL (NULL w or grad, a non-finite or negative hyperparameter, a
 *          stochastic other than 0 or 1, a missing momentum buffer, buffers that alias,
 *          tensors or buffers in the wrong places); FX_ESHAPE (w and grad differ in shape);
 *          FX_ENOMEM; FX_EDEVICE. */
FX_API int fx_sgd_step(tensor_t *w, const tensor_t *grad, float *master, float *momentum_buf,
                       double lr, double momentum, double weight_decay, double grad_scale,
                       int stochastic, uint64_t seed, uint64_t step);

/** @brief One Adam step (bias-corrected; weight decay added to the gradient, as
 *  torch.optim.Adam).
 *
 *  m, v: float[numel(w)] caller-owned, zero at start; step counts from 1. master as in
 *  fx_sgd_step(). A failing step changes nothing.
 *  @param[in,out] w            Weights, any format.
 *  @param[in]     grad         Gradient with w's shape, any format.
 *  @param[in,out] master       NULL, or float[numel(w)] fp32 master weights.
 *  @param[in,out] m            float[numel(w)] first moment, zero at start.
 *  @param[in,out] v            float[numel(w)] second moment, zero at start.
 *  @param[in]     lr           Learning rate, finite and >= 0.
 *  @param[in]     beta1        First-moment decay, in [0, 1).
 *  @param[in]     beta2        Second-moment decay, in [0, 1).
 *  @param[in]     eps          Added to the denominator, finite and >= 0.
 *  @param[in]     weight_decay Weight decay, finite and >= 0.
 *  @param[in]     grad_scale   Factor applied to grad (e.g. 1/loss scale), finite.
 *  @param[in]     stochastic   1 rounds the write of w stochastically, 0 does not.
 *  @param[in]     seed         Seed of the stochastic rounding.
 *  @param[in]     step         Step number, from 1 (bias correction; also keys the stochastic rounding).
 *  @return FX_OK; FX_EINVAL (NULL w, grad, m or v, a bad hyperparameter or stochastic flag,
 *          step 0, buffers that alias, tensors or buffers in the wrong places); FX_ESHAPE;
 *          FX_ENOMEM; FX_EDEVICE. */
FX_API int fx_adam_step(tensor_t *w, const tensor_t *grad, float *master, float *m, float *v,
                        double lr, double beta1, double beta2, double eps, double weight_decay,
                        double grad_scale, int stochastic, uint64_t seed, uint64_t step);

/* --- dynamic loss scaling ------------------------------------------------------------------ */

/** @brief Loss-scaler state. Plain data: saving and restoring it is a copy. */
typedef struct fx_loss_scaler {
    double scale;           /**< current scale (default 2^16) */
    double growth_factor;   /**< x2 */
    double backoff_factor;  /**< x0.5 */
    int64_t growth_interval;/**< 2000 clean steps */
    int64_t good_steps;     /**< clean steps since the last change */
    int64_t skipped_steps;  /**< total steps skipped */
    int enabled;            /**< 1, or 0: scale stays 1 and nothing is skipped */
} fx_loss_scaler;

/** @brief Initialise a scaler with the defaults of the standard dynamic scaler (2^16, x2 after
 *  2000 clean steps, x0.5 on Inf/NaN).
 *  @param[out] s       The scaler; NULL is a no-op.
 *  @param[in]  enabled Nonzero enables it; 0 gives a scaler whose scale stays 1. */
FX_API void fx_loss_scaler_init(fx_loss_scaler *s, int enabled);
/** @brief Fused unscale and check of gradients.
 *
 *  For each gradient i, out[i] (float[numel], caller-owned) receives grad / scale in fp32;
 *  *found_inf is set to 1 if any value is NaN/Inf, or if a shared-exponent gradient's last
 *  write counted non-finite inputs.
 *  @param[in]  s         The scaler.
 *  @param[in]  grads     n gradients, any formats, all in one place.
 *  @param[in]  n         Number of gradients, >= 0.
 *  @param[out] out       n buffers of numel(grads[i]) floats.
 *  @param[out] found_inf 1 if a non-finite value was found, else 0.
 *  @return FX_OK; FX_EINVAL (NULL or inconsistent scaler, NULL found_inf, grads or out,
 *          n < 0, tensors or buffers in the wrong places); FX_ENOMEM; FX_EDEVICE. */
FX_API int fx_loss_scaler_unscale(const fx_loss_scaler *s, const tensor_t *const *grads, int n,
                                  float *const *out, int *found_inf);
/** @brief Update the scaler after a step and adjust the scale (kept representable in fp32:
 *  growth that would overflow is refused, as in torch).
 *  @param[in,out] s         The scaler.
 *  @param[in]     found_inf The unscale's result: 1 if the step found Inf/NaN, else 0.
 *  @retval 1 the step should be applied.
 *  @retval 0 the step must be skipped (found_inf).
 *  @retval FX_EINVAL a NULL or inconsistent scaler state, or a bad found_inf. */
FX_API int fx_loss_scaler_update(fx_loss_scaler *s, int found_inf);

/* --- transformer ops (docs/transformer_ops.md) --------------------------------------------- */
/**
 * @name Transformer ops
 * Softmax and log-softmax along an axis, layer norm, batched matmul with transposes, causal
 * and general masks, embedding lookup and its gradient, AdamW and gradient clipping by the
 * global norm. Definitions, per-format arithmetic, error bounds, special values and status
 * codes: docs/transformer_ops.md. Host tensors only: a device tensor gives FX_EUNSUPPORTED.
 * Like every op, these write into caller-provided outputs of any format and leave them
 * untouched on failure.
 */
/** @{ */

/** @brief Softmax along one axis: y = exp(x - max) / sum(exp(x - max)).
 *
 *  Every format computes in fp32 on its exactly widened or dequantised values, by the
 *  library's own arithmetic (docs/transformer_ops.md): per row the maximum is subtracted, the
 *  exponential is fx_expf_def (a fixed sequence of fp32 operations, within 1.02 ulp of exp),
 *  the sum of the exponentials runs in 16 interleaved fp32 partial sums (element k into sum k
 *  mod 16, in index order) added by a fixed tree, and y = e * (1 / sum); log-softmax takes
 *  logf once a row. The AVX2 and AVX-512 kernels perform these operations lane by lane, so
 *  the bits are the same on every backend and thread count. Each result is rounded once into
 *  y's format; a FLEX16_5/DFP16 y is one write (Autoflex / exact exponent). The backward
 *  passes accumulate sum_axis(dy * y) or sum_axis(dy) the same way. A NaN or +Inf in a row,
 *  or a row of only -Inf, makes the row NaN (counted as non-finite by a shared-exponent y;
 *  stored as one quiet NaN by a float y); a -Inf element gets 0.
 *  @param[out] y    Output with x's shape, any format (may be x itself).
 *  @param[in]  x    Input, any format.
 *  @param[in]  axis The axis, in [-ndim, ndim) (negative counts from the end).
 *  @return FX_OK; FX_EINVAL (NULL tensor, axis out of range); FX_ESHAPE (y's shape differs);
 *          FX_EUNSUPPORTED (device tensors); FX_ENOMEM. */
FX_API int tensor_softmax(tensor_t *y, const tensor_t *x, int axis);
/** @brief Log-softmax along one axis: y = (x - max) - log(sum(exp(x - max))).
 *  @param[out] y    Output with x's shape, any format (may be x itself).
 *  @param[in]  x    Input, any format.
 *  @param[in]  axis The axis, in [-ndim, ndim).
 *  @return As tensor_softmax(). */
FX_API int tensor_log_softmax(tensor_t *y, const tensor_t *x, int axis);
/** @brief Gradient of tensor_softmax(): dx = y * (dy - sum_axis(dy * y)).
 *  @param[out] dx   Input gradient with y's shape, any format.
 *  @param[in]  dy   Gradient of the loss with respect to y.
 *  @param[in]  y    The forward output (softmax values), same shape as dy.
 *  @param[in]  axis The forward axis.
 *  @return FX_OK; FX_EINVAL (NULL tensor, axis out of range); FX_ESHAPE (dx, dy and y differ
 *          in shape); FX_EUNSUPPORTED (device tensors); FX_ENOMEM. */
FX_API int tensor_softmax_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *y,
                                   int axis);
/** @brief Gradient of tensor_log_softmax(): dx = dy - exp(y) * sum_axis(dy).
 *  @param[out] dx   Input gradient with y's shape, any format.
 *  @param[in]  dy   Gradient of the loss with respect to y.
 *  @param[in]  y    The forward output (log-probabilities), same shape as dy.
 *  @param[in]  axis The forward axis.
 *  @return As tensor_softmax_backward(). */
FX_API int tensor_log_softmax_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *y,
                                       int axis);

/** @brief Layer normalisation over the last axis (PyTorch's LayerNorm with
 *  normalized_shape = [D]).
 *
 *  Per row of D values: y = (x - mean) / sqrt(var + eps) * gamma + beta, with the biased
 *  variance. Statistics two-pass in fp32 (the sum of x, then the sum of (x - mean)^2, each
 *  accumulated in fp32 in index order), eps rounded to fp32, rstd = 1/sqrtf(var + eps); the
 *  per-element arithmetic is fp32 on exactly widened or dequantised values, and y is written
 *  once in its format. The affine parameters, mean and rstd are fp32 arrays.
 *  @param[out] y     Output with x's shape, any format (may be x itself).
 *  @param[in]  x     Input [..., D], any format, D >= 1.
 *  @param[in]  gamma NULL (scale 1), or D floats, caller-owned.
 *  @param[in]  beta  NULL (shift 0), or D floats, caller-owned.
 *  @param[in]  eps   Added to the variance, finite and >= 0.
 *  @param[out] mean  NULL, or numel(x)/D floats receiving each row's mean (written only on
 *                    success).
 *  @param[out] rstd  NULL, or numel(x)/D floats receiving each row's 1/sqrt(var + eps).
 *  @return FX_OK; FX_EINVAL (NULL tensor, bad eps); FX_ESHAPE (y's shape differs, D = 0);
 *          FX_EUNSUPPORTED (device tensors); FX_ENOMEM. */
FX_API int tensor_layernorm(tensor_t *y, const tensor_t *x, const float *gamma,
                            const float *beta, double eps, float *mean, float *rstd);
/** @brief Gradients of tensor_layernorm(): dx, and the fp32 gradients of gamma and beta.
 *
 *  The statistics are recomputed from x with the forward's code; the row sums of g and
 *  g * xhat (g = dy * gamma) are accumulated in fp32 in index order. dgamma and dbeta are
 *  overwritten (not accumulated), summed over the rows in fp32 in row order (the columns
 *  split among the threads, each column summed in that order).
 *  @param[out] dx     Input gradient with x's shape, any format.
 *  @param[out] dgamma NULL, or D floats: sum over rows of dy * xhat.
 *  @param[out] dbeta  NULL, or D floats: sum over rows of dy.
 *  @param[in]  dy     Output gradient with x's shape.
 *  @param[in]  x      The forward input [..., D].
 *  @param[in]  gamma  The forward scale (NULL: 1), D floats.
 *  @param[in]  eps    The forward eps.
 *  @return FX_OK; FX_EINVAL (NULL tensor, bad eps, dgamma and dbeta the same buffer);
 *          FX_ESHAPE (shapes differ, D = 0); FX_EUNSUPPORTED (device tensors); FX_ENOMEM. */
FX_API int tensor_layernorm_backward(tensor_t *dx, float *dgamma, float *dbeta,
                                     const tensor_t *dy, const tensor_t *x, const float *gamma,
                                     double eps);

/** @brief Batched matrix product with transposes: out = op(a) x op(b) per batch.
 *
 *  a, b and out have the same number (>= 2) of axes and equal leading (batch) axes; op(t) is t
 *  or, when its flag is 1, t transposed over its last two axes (free: strides). With op(a)
 *  [..., M, K] and op(b) [..., K, N], out is [..., M, N] (attention scores: q x k^T with
 *  trans_b = 1; values: p x v). A FLEX16_5/DFP16 a computes on integers: the exact int64 sum
 *  of the int16 products (a float b quantised at its exact exponent), written once, so the
 *  bits are the same on every backend and thread count (and equal tensor_matmul()'s for one
 *  batch). Otherwise the fp32 GEMM on widened values, rounded once into out's format.
 *  @param[out] out     Output [..., M, N], any format.
 *  @param[in]  a       Left operand [..., M, K] ([..., K, M] with trans_a).
 *  @param[in]  b       Right operand [..., K, N] ([..., N, K] with trans_b).
 *  @param[in]  trans_a 1 uses a transposed, 0 as it is.
 *  @param[in]  trans_b 1 uses b transposed, 0 as it is.
 *  @return FX_OK; FX_EINVAL (NULL tensor, a flag other than 0 or 1); FX_ESHAPE (axis counts,
 *          batch axes, inner sizes or out's shape do not fit); FX_EUNSUPPORTED (device
 *          tensors); FX_ENOMEM. */
FX_API int tensor_bmm(tensor_t *out, const tensor_t *a, const tensor_t *b, int trans_a,
                      int trans_b);
/** @brief Gradients of tensor_bmm(): da and db given dout (either may be NULL).
 *
 *  Each is one tensor_bmm() with the transposes swapped (da = dout op(b)^T, transposed back
 *  when trans_a; db = op(a)^T dout, likewise), so it has tensor_bmm()'s arithmetic. Every
 *  shape is checked before anything is written; da is written before db.
 *  @param[out] da      NULL, or the gradient of a, with a's shape, any format.
 *  @param[out] db      NULL, or the gradient of b, with b's shape, any format.
 *  @param[in]  dout    Gradient of the loss with respect to out, [..., M, N].
 *  @param[in]  a       The forward a.
 *  @param[in]  b       The forward b.
 *  @param[in]  trans_a The forward trans_a.
 *  @param[in]  trans_b The forward trans_b.
 *  @return As tensor_bmm(), and FX_EINVAL when da and db share storage. */
FX_API int tensor_bmm_backward(tensor_t *da, tensor_t *db, const tensor_t *dout,
                               const tensor_t *a, const tensor_t *b, int trans_a, int trans_b);

/** @brief Causal mask over the last two axes: y = x, with fill where column > row.
 *
 *  x is [..., Sq, Sk]; element (i, j) of each matrix is replaced by fill when j > i (top-left
 *  aligned, as torch.tril). Kept elements are copied exactly; fill is rounded once into y's
 *  format. -Inf (the usual fill before a softmax) has no FLEX16_5/DFP16 representation: such a
 *  y stores -32767 and counts it as non-finite, so mask shared-exponent scores into a float y.
 *  The gradient is the same op with fill 0: tensor_causal_mask(dx, dy, 0.0).
 *  @param[out] y    Output with x's shape, any format (may be x itself).
 *  @param[in]  x    Input [..., Sq, Sk], at least 2-D.
 *  @param[in]  fill The value of masked elements, not NaN (-INFINITY allowed).
 *  @return FX_OK; FX_EINVAL (NULL tensor, fill NaN); FX_ESHAPE (x not at least 2-D, y's shape
 *          differs); FX_EUNSUPPORTED (device tensors); FX_ENOMEM. */
FX_API int tensor_causal_mask(tensor_t *y, const tensor_t *x, double fill);
/** @brief Attention's probabilities: y = softmax along the last axis of scale * x, with the
 *  elements above the diagonal of each [Sq, Sk] matrix at -Inf first when causal.
 *
 *  By definition the same bits and the same write as tensor_scale() into an fp32 tensor,
 *  tensor_causal_mask() with -INFINITY (when causal) and tensor_softmax() along the last axis.
 *  For a contiguous x (not sharing y's storage) it makes each row in cache and never writes
 *  the scaled scores out (three passes over [B, H, T, T] fp32 scores fewer in a transformer's
 *  attention); other inputs run those three ops on an fp32 temporary. The
 *  gradient with respect to x: tensor_attention_softmax_backward() (masked elements have
 *  probability 0 and get gradient 0).
 *  @param[out] y      Output with x's shape, any format (may be x itself: then the
 *                     temporary route).
 *  @param[in]  x      Scores [..., Sq, Sk], any format.
 *  @param[in]  scale  The factor, finite (1/sqrt(d) for heads of width d).
 *  @param[in]  causal 1: element (i, j) of each matrix is masked when j > i (top-left aligned,
 *                     as tensor_causal_mask()); 0: nothing is masked.
 *  @return FX_OK; FX_EINVAL (NULL tensor, scale not finite, causal not 0 or 1); FX_ESHAPE (x
 *          not at least 2-D, y's shape differs); FX_EUNSUPPORTED (device tensors); FX_ENOMEM. */
FX_API int tensor_attention_softmax(tensor_t *y, const tensor_t *x, double scale, int causal);
/** @brief The gradient of tensor_attention_softmax() with respect to its scores x:
 *  dx = scale * y * (dy - sum(dy * y)) along the last axis, from the forward's output y.
 *
 *  By definition the same bits and the same write as tensor_softmax_backward() along the last
 *  axis into an fp32 tensor, then tensor_scale() by scale into dx: one rounding into dx's
 *  format (the two ops into a 16-bit or shared-exponent temporary round twice). For
 *  contiguous dy and y it makes each row in cache and never writes the unscaled gradient out;
 *  other inputs run the two ops on an fp32 temporary. The masked elements of a causal forward
 *  have y = 0 and get 0 (NaN where dy is NaN or infinite there, as in the two ops).
 *  @param[out] dx    Output with y's shape, any format (may be dy or y: then it is written
 *                    after every row is read).
 *  @param[in]  dy    Gradient of y, y's shape, any format.
 *  @param[in]  y     The forward's probabilities [..., Sq, Sk], any format.
 *  @param[in]  scale The forward's factor, finite.
 *  @return FX_OK; FX_EINVAL (NULL tensor, scale not finite); FX_ESHAPE (y not at least 2-D, dy
 *          or dx of another shape); FX_EUNSUPPORTED (device tensors); FX_ENOMEM. */
FX_API int tensor_attention_softmax_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *y,
                                             double scale);
/** @brief Masked fill: y = x, with fill where mask is nonzero (NaN counts as nonzero).
 *
 *  mask broadcasts to x's shape by NumPy's rules (axes aligned from the end, each equal or 1),
 *  e.g. [Sq, Sk] or [B, 1, 1, Sk] for scores [B, H, Sq, Sk]. Arithmetic as
 *  tensor_causal_mask(); the gradient is tensor_masked_fill(dx, dy, mask, 0.0).
 *  @param[out] y    Output with x's shape, any format (may be x itself).
 *  @param[in]  x    Input, any format.
 *  @param[in]  mask Mask, any format, broadcastable to x's shape.
 *  @param[in]  fill The value of masked elements, not NaN.
 *  @return FX_OK; FX_EINVAL (NULL tensor, fill NaN); FX_ESHAPE (a mask that does not broadcast,
 *          y's shape differs); FX_EUNSUPPORTED (device tensors); FX_ENOMEM. */
FX_API int tensor_masked_fill(tensor_t *y, const tensor_t *x, const tensor_t *mask,
                              double fill);

/** @brief Embedding lookup: y[i, :] = table[indices[i], :].
 *
 *  A FLEX16_5/DFP16 table is gathered as exact int16 mantissas (one write into y at the
 *  table's exponent: exact when y has the table's format and exponent range); float tables are
 *  copied as their widened values. Every index is checked before anything is written.
 *  @param[out] y         Output [..., D] holding n_indices rows of D, any format.
 *  @param[in]  table     Table [V, D], any format.
 *  @param[in]  indices   n_indices int32 row numbers in [0, V), caller-owned host memory.
 *  @param[in]  n_indices Number of indices, >= 0 (indices may be NULL when 0).
 *  @return FX_OK; FX_EINVAL (NULL tensor or indices, n_indices < 0); FX_ESHAPE (table not
 *          2-D, y's last axis not D or its rows not n_indices); FX_ERANGE (an index outside
 *          [0, V), named in the message); FX_EUNSUPPORTED (device tensors); FX_ENOMEM. */
FX_API int tensor_embedding(tensor_t *y, const tensor_t *table, const int32_t *indices,
                            int64_t n_indices);
/** @brief Gradient of tensor_embedding(): dtable = scatter-add of the rows of dy at indices.
 *
 *  dtable is overwritten (rows no index names are 0). A FLEX16_5/DFP16 dy is summed exactly in
 *  int64 (one write); float dy is summed in double in index order and rounded once.
 *  @param[out] dtable    Table gradient [V, D], any format.
 *  @param[in]  dy        Output gradient [..., D] holding n_indices rows.
 *  @param[in]  indices   The forward indices.
 *  @param[in]  n_indices Number of indices, >= 0.
 *  @return As tensor_embedding(). */
FX_API int tensor_embedding_backward(tensor_t *dtable, const tensor_t *dy,
                                     const int32_t *indices, int64_t n_indices);

/** @brief One AdamW step: Adam with decoupled weight decay (torch.optim.AdamW).
 *
 *  p <- p (1 - lr weight_decay) - lr / (1 - beta1^t) m / (sqrt(v) / sqrt(1 - beta2^t) + eps),
 *  with m and v updated from the gradient alone. Arguments, arithmetic (double, each stored
 *  quantity rounded once), master weights, stochastic rounding and failure behaviour are
 *  fx_adam_step()'s. Device tensors: FX_EUNSUPPORTED.
 *  @param[in,out] w            Weights, any format.
 *  @param[in]     grad         Gradient with w's shape, any format.
 *  @param[in,out] master       NULL, or float[numel(w)] fp32 master weights.
 *  @param[in,out] m            float[numel(w)] first moment, zero at start.
 *  @param[in,out] v            float[numel(w)] second moment, zero at start.
 *  @param[in]     lr           Learning rate, finite and >= 0.
 *  @param[in]     beta1        First-moment decay, in [0, 1).
 *  @param[in]     beta2        Second-moment decay, in [0, 1).
 *  @param[in]     eps          Added to the denominator, finite and >= 0.
 *  @param[in]     weight_decay Decoupled weight decay, finite and >= 0.
 *  @param[in]     grad_scale   Factor applied to grad (e.g. 1/loss scale), finite.
 *  @param[in]     stochastic   1 rounds the write of w stochastically, 0 does not.
 *  @param[in]     seed         Seed of the stochastic rounding.
 *  @param[in]     step         Step number, from 1.
 *  @return As fx_adam_step(), and FX_EUNSUPPORTED for device tensors. */
FX_API int fx_adamw_step(tensor_t *w, const tensor_t *grad, float *master, float *m, float *v,
                         double lr, double beta1, double beta2, double eps,
                         double weight_decay, double grad_scale, int stochastic,
                         uint64_t seed, uint64_t step);

/** @brief Clip gradients by their global L2 norm (torch.nn.utils.clip_grad_norm_).
 *
 *  total = sqrt(sum of every element squared over all n gradients); when total > max_norm,
 *  each gradient is scaled in place by max_norm / (total + 1e-6) (tensor_scale(), one write
 *  per tensor). Integer formats' squares are summed exactly; float ones in double. A total
 *  that is not finite scales nothing (it is reported, and the step should be skipped).
 *  Everything is validated before any tensor is scaled.
 *  @param[in,out] grads      n gradients, any formats, host tensors with distinct storages.
 *  @param[in]     n          Number of gradients, >= 0.
 *  @param[in]     max_norm   Largest allowed norm, finite and >= 0.
 *  @param[out]    total_norm NULL, or the norm before clipping.
 *  @return FX_OK; FX_EINVAL (n < 0, NULL grads or entry, bad max_norm, two entries sharing
 *          storage); FX_EUNSUPPORTED (device tensors); FX_ENOMEM. */
FX_API int fx_clip_grad_norm(tensor_t *const *grads, int n, double max_norm,
                             double *total_norm);
/** @} */

#ifdef __cplusplus
}
#endif
#endif
