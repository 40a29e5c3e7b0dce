/* Kernel launchers of the training ops on the device (src/gpu/gpu_nn.cu), callable from C
 * (src/gpu/gpu_nn.c) behind extern "C". Like gpu_kernels.h they know device memory, views and
 * stages, not tensors: gpu_nn.c turns tensors into views, runs these, and writes the stages
 * through the device write path.
 *
 * Conventions: views (fx_dview) may be strided; stages and buffers are contiguous device
 * memory in the row-major order of the op's output; `st` (may be NULL) receives the stage's
 * statistics, reduced in the kernel's epilogue (int64 stages: largest |v|; fp32 stages: largest
 * finite |x| and the NaN/Inf count), as the write path needs them for shared-exponent outputs.
 * Every launcher returns FX_OK or FX_EDEVICE (launch failure, message naming func); n == 0
 * launches nothing.
 *
 * Float arithmetic: each step is the CPU's step, one IEEE operation at a time (the _rn
 * intrinsics, so that nvcc cannot contract a multiply and an add into an FMA), and NaN results
 * follow the x86 rule the CPU produces (an input NaN propagates quieted, an invalid operation
 * gives the default NaN with the sign bit set), including through float <-> double
 * conversions. A stage value for an output of format fmt is rounded from double as the CPU's
 * nn_stage_f32: to nearest for FP32, to odd otherwise. */
#ifndef FX_GPU_NN_KERNELS_H
#define FX_GPU_NN_KERNELS_H

#include "gpu_kernels.h"
#include "gpu_nn_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where memory p lives: FX_OK with *where = -1 (host memory, pageable or pinned), the device
 * ordinal (device memory), or FX_GNN_MANAGED (managed memory, usable from both sides). */
#define FX_GNN_MANAGED (-2)
int fx_gnr_pointer_where(const void *p, int *where, const char *func);

/* ---- pooling ------------------------------------------------------------------------------ */

/* Max pool, one thread per output (pool.c's general loop: window rows then columns, strict
 * comparison so the first maximum wins; fp32: a NaN beats a number). ic: int16 mantissas into an
 * int64 stage, else widened values into an fp32 stage. idx (may be NULL): flat index into x. */
int fx_gnk_maxpool(const fx_dview *x, int ic, const fx_pool_geom *g, void *stage, int32_t *idx,
                   fx_dstage_stats *st, const char *func);

/* first_bad (zeroed by the caller) receives n - i for the smallest i whose argmax[i] lies
 * outside the plane i / P, i.e. [plane * HW, plane * HW + HW); stays 0 when all are valid. */
int fx_gnk_argmax_check(const int32_t *argmax, int64_t n, int64_t P, int64_t HW,
                        unsigned long long *first_bad, const char *func);

/* Max pool backward: one thread per (n, c) plane adds dy's P values at argmax into the zeroed
 * stage (planes * HW values), in order (the CPU's order, so fp32 sums are the same), then
 * reduces the plane's statistics. */
int fx_gnk_maxpool_backward(const fx_dview *dy, int ic, const int32_t *argmax, int64_t planes,
                            int64_t P, int64_t HW, void *stage, fx_dstage_stats *st,
                            const char *func);

/* Average pool (count_include_pad), one thread per output: int64 window sums (ic), or fp32 sums
 * in window order divided by KH * KW in fp32. Global average pooling is the window H x W. */
int fx_gnk_avgpool(const fx_dview *x, int ic, const fx_pool_geom *g, void *stage,
                   fx_dstage_stats *st, const char *func);

/* Average pool backward, one thread per input element: the gradients of the windows that hold
 * it, in the CPU's order (window rows, then columns), summed exactly (ic) or in fp32 from +0
 * and then divided by KH * KW in fp32. */
int fx_gnk_avgpool_backward(const fx_dview *dy, int ic, const fx_pool_geom *g, void *stage,
                            fx_dstage_stats *st, const char *func);

/* Global average pool backward: element i of planes * HW receives dy[i / HW], as its int16
 * mantissa (ic) or divided by HW in fp32. */
int fx_gnk_gap_backward(const fx_dview *dy, int ic, int64_t planes, int64_t HW, void *stage,
                        fx_dstage_stats *st, const char *func);

/* v[i] <- fx_div_odd_signed(v[i], count, k) in place (the exact average, pool.c). */
int fx_gnk_div_odd(int64_t *v, int64_t n, uint64_t count, int k, fx_dstage_stats *st,
                   const char *func);

/* ---- element-wise ------------------------------------------------------------------------- */

/* ReLU backward: keep dy[i] where x[i] > 0 (x read in its own format: mantissa > 0, fp32 > 0,
 * fp16/bf16 bits positive and not NaN). ic: dy's mantissas into an int64 stage; else dy widened
 * into an fp32 stage (+0 where dropped). */
int fx_gnk_relu_backward(const fx_dview *dy, int ic, const fx_dview *x, int64_t n, void *stage,
                         fx_dstage_stats *st, const char *func);

/* Dropout: element i dropped iff (fx_rng_u64(seed, step, i) >> 11) < thr. ic: int64 stage
 * x * (dropped ? 0 : ms); else fp32 stage of (double)x * (dropped ? 0 : factor) for out_fmt. */
int fx_gnk_dropout(const fx_dview *x, int ic, int64_t n, uint64_t seed, uint64_t step,
                   uint64_t thr, int64_t ms, double factor, int out_fmt, void *stage,
                   fx_dstage_stats *st, const char *func);

/* Mean from exact sums (reduce.c): shared-exponent output: v[i] <- fx_div_odd_signed(v[i],
 * len, frac) in place (int64, st: imax); float output: f32[i] = stage value of
 * fx_quotient_f64_odd(v[i], len, e) for out_fmt. Exactly one of the two modes: f32 == NULL
 * selects the first. */
int fx_gnk_mean_int(int64_t *v, int64_t n, uint64_t len, int frac, int e, float *f32,
                    int out_fmt, fx_dstage_stats *st, const char *func);
/* Mean from fp32 sums: f32[i] = stage value of (double)f32[i] / len for out_fmt, in place. */
int fx_gnk_mean_f32(float *f32, int64_t n, double len, int out_fmt, fx_dstage_stats *st,
                    const char *func);

/* ---- softmax cross-entropy ---------------------------------------------------------------- */

/* One thread per row of logits [N, K] (softmax_ce.c's row computation in double, with the
 * device's exp/log/log1p): row_loss[N] (doubles); g (may be NULL): [N, K] fp32 stage of
 * gscale * (softmax - onehot) for g_fmt. labels: device int32[N], already validated. */
int fx_gnk_softmax_ce(const fx_dview *logits, const int32_t *labels, int64_t N, int64_t K,
                      double gscale, double *row_loss, float *g, int g_fmt, fx_dstage_stats *st,
                      const char *func);

/* ---- batch norm --------------------------------------------------------------------------- */

/* Per-channel values of the forward pass, one thread per channel (batchnorm.c): training
 * (run_mean == NULL): two-pass mean and biased variance in double, four interleaved partial
 * sums per row in the CPU's order; inference: run_mean/run_var (device float[C]). Then
 * chan[c * FX_BN_FWD + ...] = {mu, invstd, a = invstd * gamma, b = beta, unbiased var}. */
enum { FX_BN_MU = 0, FX_BN_IS, FX_BN_A, FX_BN_B, FX_BN_UVAR, FX_BN_FWD };
int fx_gnk_bn_channels(const fx_dview *x, const fx_dview *gamma, const fx_dview *beta,
                       const float *run_mean, const float *run_var, int64_t N, int64_t C,
                       int64_t S, double eps, double *chan, const char *func);
/* y stage: ((double)x - mu) * a + b per element, for y_fmt. */
int fx_gnk_bn_apply(const fx_dview *x, int64_t n, int64_t C, int64_t S, const double *chan,
                    int y_fmt, float *y, fx_dstage_stats *st, const char *func);

/* Backward per channel: sums of dy and dy * xhat (CPU order), dg[c], db[c] stages (for g_fmt,
 * b_fmt; stats gst, bst) and chan[c * FX_BN_BWD + ...] = {mu, invstd, k = gamma * invstd,
 * sum dy / M, sum dy xhat / M}. save_mean, save_invstd: device float[C]. */
enum { FX_BNB_MU = 0, FX_BNB_IS, FX_BNB_K, FX_BNB_MDY, FX_BNB_MDYX, FX_BN_BWD };
int fx_gnk_bn_grad_channels(const fx_dview *x, const fx_dview *dy, const fx_dview *gamma,
                            const float *save_mean, const float *save_invstd, int64_t N,
                            int64_t C, int64_t S, float *dg, int g_fmt, fx_dstage_stats *gst,
                            float *db, int b_fmt, fx_dstage_stats *bst, double *chan,
                            const char *func);
/* dx stage: k * ((dy - mdy) - xhat * mdyx), xhat = (x - mu) * invstd, for dx_fmt. */
int fx_gnk_bn_grad_apply(const fx_dview *x, const fx_dview *dy, int64_t n, int64_t C, int64_t S,
                         const double *chan, int dx_fmt, float *dx, fx_dstage_stats *st,
                         const char *func);

/* ---- optimisers --------------------------------------------------------------------------- */

/* One SGD or Adam element each (optim.c): grad and the weights (master, or w's values when
 * master is NULL) in fp32; new weights into new_p (st: its statistics), new optimiser state
 * into the nb* buffers (the caller commits them only after w's write succeeded). */
int fx_gnk_sgd(const fx_dview *grad, const fx_dview *w, const float *master, const float *buf,
               int64_t n, double lr, double momentum, double weight_decay, double grad_scale,
               float *new_p, float *new_buf, fx_dstage_stats *st, const char *func);
int fx_gnk_adam(const fx_dview *grad, const fx_dview *w, const float *master, const float *m,
                const float *v, int64_t n, double lr_over_bc1, double beta1, double beta2,
                double eps, double sqrt_bc2, double weight_decay, double grad_scale,
                float *new_p, float *new_m, float *new_v, fx_dstage_stats *st,
                const char *func);
/* dst[i] = fx_sr_round_hd(fp16, src[i], fx_rng_u64(seed, step, i)) (dst may be src). */
int fx_gnk_sr_round(const float *src, float *dst, int64_t n, int fp16, uint64_t seed,
                    uint64_t step, const char *func);

/* ---- loss scaling ------------------------------------------------------------------------- */

/* out[i] = (fp32)g[i] * inv (one fp32 multiply); *bad |= 1 if any result is NaN/Inf. */
int fx_gnk_unscale(const fx_dview *g, int64_t n, float inv, float *out, unsigned int *bad,
                   const char *func);

#ifdef __cplusplus
}
#endif
#endif
