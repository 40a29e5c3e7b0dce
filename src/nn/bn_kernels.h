/* The batch-norm kernels of a level (src/nn/batchnorm.c defines the portable ones, which are the
 * definition; src/nn/batchnorm_avx2.c the AVX2 ones, which give the same bits).
 *
 * Every sum runs in the portable order: per channel, four partial sums in double over
 * interleaved elements of each row (element s of a row goes to partial s mod 4; a row's last
 * S mod 4 elements to partial 0), rows in order, combined as (p0 + p1) + (p2 + p3). A SIMD
 * level keeps the four partials in the four lanes of one vector, so its sums are the same
 * bits; it gains its speed from running the chains of up to FX_BN_GROUP channels side by side
 * (the order within each channel does not change). Products and sums are never contracted
 * into fused multiply-adds. */
#ifndef FX_BN_KERNELS_H
#define FX_BN_KERNELS_H

#include "../gpu/gpu_nn_math.h" /* fx_bn_dims */

#include <stdint.h>

#define FX_BN_GROUP 4 /* channels a stats or grad_sums call takes at most */

typedef struct fx_bn_kernels {
    /* mean[j] and biased variance var[j] of channel c0 + j, j < nc (1 <= nc <= FX_BN_GROUP),
     * two-pass: the mean, then the mean of (x - mean)^2 */
    void (*stats)(const float *x, const fx_bn_dims *d, int64_t c0, int nc, double *mean,
                  double *var);
    /* sdy[j] = sum dy and sdyx[j] = sum dy * ((x - mu[j]) * is[j]) over channel c0 + j */
    void (*grad_sums)(const float *x, const float *dy, const fx_bn_dims *d, int64_t c0, int nc,
                      const double *mu, const double *is, double *sdy, double *sdyx);
    /* q[s] = ((double)p[s] - mu) * a + b for s < S, rounded to fp32 to nearest, or to odd
     * when odd is set (nn_round_f32) */
    void (*normalize)(const float *p, float *q, int64_t S, double mu, double a, double b,
                      int odd);
    /* q[s] = k * ((double)g[s] - mdy - xhat * mdyx), xhat = ((double)x[s] - mu) * is, rounded
     * as normalize's */
    void (*backward)(const float *x, const float *g, float *q, int64_t S, double mu, double is,
                     double k, double mdy, double mdyx, int odd);
} fx_bn_kernels;

extern const fx_bn_kernels fx_bn_kernels_portable;
extern const fx_bn_kernels fx_bn_kernels_avx2;

#endif
