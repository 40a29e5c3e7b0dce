/* Layer norm's row kernels (src/nn/layernorm.c holds the definition and the portable kernels;
 * src/nn/layernorm_impl.h the SIMD ones, built by layernorm_avx2.c and layernorm_avx512.c).
 *
 * The definition sums each row in index order with one fp32 accumulator (its mean, its
 * variance, and the backward pass's two row sums), so one row is a chain of D dependent
 * additions: written a row at a time, the portable code waits on the adder's latency at every
 * element (about 7 cycles an element on the Zen 4, fp32 in and out). The SIMD levels run 8 or
 * 16 rows side by side, one row per lane, each lane adding its row's elements in index order:
 * the same operations on the same values, so the same bits, at a lane's cost. The element-wise
 * parts (the outputs, and dgamma/dbeta's sums over the rows in row order) vectorise along the
 * row instead. Every level computes the bits of the portable kernels; tests/test_nn_layernorm.c
 * compares them on every backend. */
#ifndef FX_NN_LN_KERNELS_H
#define FX_NN_LN_KERNELS_H

#include <stdint.h>

typedef struct fx_ln_kernels {
    /* Rows [r0, r1) of x ([rows, D], fp32, row-major): mean into st[2r] and rstd into st[2r + 1]
     * (the definition's statistics); with y, the rows' outputs (xhat gamma + beta; gamma and
     * beta may be NULL) into y, which may be x: a row's statistics are taken before any of its
     * elements is written. */
    void (*forward)(const float *x, float *y, float *st, int64_t r0, int64_t r1, int64_t D,
                    float eps, const float *gamma, const float *beta);
    /* dgamma and dbeta's partial sums for columns [k0, k1): sg[k] += dy_rk xhat_rk and
     * sg[D + k] += dy_rk for r = 0 .. R - 1 in that order (xhat from st as forward wrote it) */
    void (*param_sums)(const float *x, const float *dy, const float *st, int64_t R, int64_t D,
                       int64_t k0, int64_t k1, float *sg);
    /* Rows [r0, r1) of dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma (gamma may
     * be NULL: 1); dx may be dy (each element is read before it is written) */
    void (*backward)(const float *x, const float *dy, const float *st, float *dx, int64_t r0,
                     int64_t r1, int64_t D, const float *gamma);
} fx_ln_kernels;

extern const fx_ln_kernels fx_ln_kernels_portable;
extern const fx_ln_kernels fx_ln_kernels_avx2;
extern const fx_ln_kernels fx_ln_kernels_avx512;

/* The rows a thread takes at a time: whole groups of 16 (every level's lanes divide it), so
 * that OpenMP's split of the groups does not change which rows run side by side (not that it
 * could change the bits: a row's result never depends on its neighbours). */
#define FX_LN_ROW_GROUP 16

#endif
