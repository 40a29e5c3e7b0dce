/*
 * flexpoint training ops: convolution, pooling, activations, loss, normalisation, dropout,
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

/** y[N,O,OH,OW] = conv(x[N,C,H,W], w[O,C,KH,KW]) with stride (sh, sw) >= 1, zero padding
 *  (ph, pw) >= 0 and dilation (dil_h, dil_w) >= 1; OH = (H + 2ph - dil_h(KH-1) - 1)/sh + 1, likewise
 *  OW. No bias (add it with tensor_add and a [O,1,1] tensor). FX_ESHAPE on shape mismatch,
 *  FX_EINVAL on bad parameters. */
FX_API int tensor_conv2d(tensor_t *y, const tensor_t *x, const tensor_t *w, int sh, int sw,
                         int ph, int pw, int dil_h, int dil_w);
/** y = relu(conv(x, w) + bias), with the bits of the unfused sequence tensor_conv2d into a
 *  tensor of y's format, tensor_add of bias, tensor_relu, in one write: for a float y (FP32,
 *  FP16, BF16) on the host under float compute (x not FLEX16_5/DFP16) the bias and the ReLU are
 *  applied to each chunk of the GEMM's results while they are in cache (no extra passes over y);
 *  elsewhere (device tensors, y a partial view, integer compute, a shared-exponent bias) the
 *  three ops run in sequence through a temporary. bias: NULL (no bias) or shape [O, 1, 1], any
 *  format; relu: 0 or 1. FX_EUNSUPPORTED for a FLEX16_5/DFP16 y: its three writes would each
 *  need their own Autoflex state, so call the three ops. FX_ESHAPE for a bias of another shape;
 *  otherwise as tensor_conv2d. */
FX_API int tensor_conv2d_bias_relu(tensor_t *y, const tensor_t *x, const tensor_t *w,
                                   const tensor_t *bias, int relu, int sh, int sw, int ph, int pw,
                                   int dil_h, int dil_w);
/** dx[N,C,H,W] = gradient of the convolution with respect to x, given dy and w. */
FX_API int tensor_conv2d_backward_input(tensor_t *dx, const tensor_t *dy, const tensor_t *w,
                                        int sh, int sw, int ph, int pw, int dil_h, int dil_w);
/** dw[O,C,KH,KW] = gradient with respect to the weights, given x and dy (summed over N). */
FX_API int tensor_conv2d_backward_weight(tensor_t *dw, const tensor_t *x, const tensor_t *dy,
                                         int sh, int sw, int ph, int pw, int dil_h, int dil_w);

/* --- pooling -------------------------------------------------------------------------------- */

/** Max pooling with window (kh, kw), stride (sh, sw), padding (ph, pw) (padding never wins;
 *  padding may be at most half the window, as in PyTorch, else FX_EINVAL; N = 0 gives
 *  FX_ESHAPE). argmax (may be NULL) receives, per output element, the flat index into x of the
 *  maximum, for the backward pass; it must hold numel(y) int32 values (FX_EUNSUPPORTED when
 *  numel(x) >= 2^31 and argmax is requested). Integer formats compare mantissas exactly. */
FX_API int tensor_maxpool2d(tensor_t *y, int32_t *argmax, const tensor_t *x, int kh, int kw,
                            int sh, int sw, int ph, int pw);
/** dx = scatter-add of dy at argmax (dx is overwritten, zeros elsewhere). Each index must lie
 *  in its own (n, c) plane of dx, as the forward pass produces (FX_ERANGE otherwise). */
FX_API int tensor_maxpool2d_backward(tensor_t *dx, const tensor_t *dy, const int32_t *argmax);
/** Average pooling; padded positions count in the divisor (count_include_pad). Integer
 *  formats: exact int64 sums, and the division is folded into the single rounding of the write
 *  (correctly rounded average, see src/nn/pool.c). */
FX_API int tensor_avgpool2d(tensor_t *y, const tensor_t *x, int kh, int kw, int sh, int sw,
                            int ph, int pw);
FX_API int tensor_avgpool2d_backward(tensor_t *dx, const tensor_t *dy, int kh, int kw, int sh,
                                     int sw, int ph, int pw);
/** Global average pooling: x[N,C,H,W] -> y[N,C] (or [N,C,1,1]). */
FX_API int tensor_global_avgpool(tensor_t *y, const tensor_t *x);
FX_API int tensor_global_avgpool_backward(tensor_t *dx, const tensor_t *dy);

/* --- activations ------------------------------------------------------------------------- */

/** dx = dy where x > 0, else 0 (same shapes). */
FX_API int tensor_relu_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x);

/* --- loss ---------------------------------------------------------------------------------- */

/** Softmax cross-entropy of logits[N,K] against int32 labels[N] in [0, K). *loss receives the
 *  mean loss (fp32 math, log-sum-exp stabilised). If dlogits (same shape) is not NULL it
 *  receives grad_scale * (softmax - onehot) / N, written once in its format (grad_scale is
 *  the loss scale; 1 for none). FX_ERANGE names the first out-of-range label; FX_ESHAPE for
 *  N = 0 or mismatched shapes. */
FX_API int tensor_softmax_cross_entropy(float *loss, tensor_t *dlogits, const tensor_t *logits,
                                        const int32_t *labels, double grad_scale);

/* --- batch normalisation (per channel of NCHW, or per feature of [N,F]) --------------------- */

/** training != 0: normalise with the batch statistics, update running_mean/running_var
 *  (float[C], momentum as in PyTorch: r = (1-m) r + m batch, unbiased variance) and store
 *  save_mean/save_invstd (float[C], may be NULL when not training) for the backward pass.
 *  training == 0: normalise with the running statistics. gamma, beta: [C] tensors of any
 *  format. Statistics and normalisation run in fp32 (accumulated in double); y is written once
 *  in its format. Needs N*H*W >= 2 in training (FX_ESHAPE). */
FX_API int tensor_batchnorm(tensor_t *y, const tensor_t *x, const tensor_t *gamma,
                            const tensor_t *beta, float *running_mean, float *running_var,
                            float *save_mean, float *save_invstd, double momentum, double eps,
                            int training);
/** Gradients of training-mode batch norm: dx, dgamma, dbeta (dgamma/dbeta may be NULL). */
FX_API int tensor_batchnorm_backward(tensor_t *dx, tensor_t *dgamma, tensor_t *dbeta,
                                     const tensor_t *dy, const tensor_t *x,
                                     const tensor_t *gamma, const float *save_mean,
                                     const float *save_invstd);

/* --- dropout ------------------------------------------------------------------------------ */

/** y = x * mask / (1 - p), mask[i] = 0 with probability p, drawn from a counter-based
 *  generator keyed by (seed, step, element index): reproducible for any thread count, and the
 *  backward pass recomputes the same mask. p in [0, 1). */
FX_API int tensor_dropout(tensor_t *y, const tensor_t *x, double p, uint64_t seed, uint64_t step);
FX_API int tensor_dropout_backward(tensor_t *dx, const tensor_t *dy, double p, uint64_t seed,
                                   uint64_t step);

/* --- reductions ---------------------------------------------------------------------------- */

/** Mean of a along axis (or FX_AXIS_ALL); shapes as tensor_sum. */
FX_API int tensor_mean(tensor_t *out, const tensor_t *a, int axis);

/* --- optimisers ---------------------------------------------------------------------------- */

/** SGD with momentum and weight decay (PyTorch semantics: g = grad*grad_scale + wd*w;
 *  buf = momentum*buf + g; w -= lr*buf). momentum_buf: float[numel(w)], caller-owned, zero at
 *  start (may be NULL when momentum is 0). master: float[numel(w)] fp32 master weights (the
 *  caller fills it from w once), updated and then written to w once in w's format; master NULL
 *  updates w in place (its 16-bit values are read, updated in fp32 and written back).
 *  stochastic != 0 rounds the write of w stochastically, with or without a master, keyed by
 *  (seed, step, element index); fp32 ignores it. w and grad must have the same shape (grad of
 *  any format). A failing step changes nothing. */
FX_API int fx_sgd_step(tensor_t *w, const tensor_t *grad, float *master, float *momentum_buf,
                       double lr, double momentum, double weight_decay, double grad_scale,
                       int stochastic, uint64_t seed, uint64_t step);

/** Adam (bias-corrected; weight decay added to the gradient, as torch.optim.Adam). m, v:
 *  float[numel(w)] caller-owned, zero at start; step counts from 1. master as in fx_sgd_step. */
FX_API int fx_adam_step(tensor_t *w, const tensor_t *grad, float *master, float *m, float *v,
                        double lr, double beta1, double beta2, double eps, double weight_decay,
                        double grad_scale, int stochastic, uint64_t seed, uint64_t step);

/* --- dynamic loss scaling ------------------------------------------------------------------ */

/** Loss-scaler state. Plain data: saving and restoring it is a copy. */
typedef struct fx_loss_scaler {
    double scale;           /**< current scale (default 2^16) */
    double growth_factor;   /**< x2 */
    double backoff_factor;  /**< x0.5 */
    int64_t growth_interval;/**< 2000 clean steps */
    int64_t good_steps;     /**< clean steps since the last change */
    int64_t skipped_steps;  /**< total steps skipped */
    int enabled;            /**< 0: scale stays 1 and nothing is skipped */
} fx_loss_scaler;

/** Defaults of the standard dynamic scaler (2^16, x2 after 2000 clean steps, x0.5 on Inf/NaN). */
FX_API void fx_loss_scaler_init(fx_loss_scaler *s, int enabled);
/** Fused unscale and check: for each gradient i, out[i] (float[numel], caller-owned) receives
 *  grad / scale in fp32; *found_inf is set to 1 if any value is NaN/Inf, or if a shared-
 *  exponent gradient's last write counted non-finite inputs. */
FX_API int fx_loss_scaler_unscale(const fx_loss_scaler *s, const tensor_t *const *grads, int n,
                                  float *const *out, int *found_inf);
/** Update after a step: returns 1 if the step should be applied, 0 if it must be skipped
 *  (found_inf); adjusts the scale (kept representable in fp32: growth that would overflow is
 *  refused, as in torch). FX_EINVAL for a NULL or inconsistent scaler state. */
FX_API int fx_loss_scaler_update(fx_loss_scaler *s, int found_inf);

#ifdef __cplusplus
}
#endif
#endif
