/* The bias add of a product into an fp16/bf16 output, done where the product's kernel converts
 * its results (fx_op_call.out_h16_bias): out = narrow(widen(narrow(sum)) + bias), the rounded
 * product widened back, the bias added in fp32 under the ADD NaN rule and the result narrowed
 * again. These are the operations of the separate pass, tensor_add of the product and a [N]
 * bias (half_binary.c's per-row route), on values still in L1, so the bits are that pass's.
 * Why: the transformer's linear layers added their bias in a pass of its own over the
 * [16384, 512] output, written and read back whole (docs/performance.md). */
#ifndef FX_CORE_H16_BIAS_H
#define FX_CORE_H16_BIAS_H

#include "../fp32/f32_kernels.h" /* fx_f32_nan_first */

#include <stdint.h>

/* Rows of a block of the output format (row r at h + r * ld, h holding the rounded product):
 * h[r * ld + k] += bias[k] for k < n, widen and narrow the format's conversions. The block is
 * widened, added and narrowed in three passes of rows * ld values (the columns from n to ld
 * too, whose values the caller does not use): per row, the calls cost more than the
 * arithmetic (a bias added row by row made the transformer's [16384, 128] x [128, 512] bf16
 * product with its bias slower than the product and a separate add). */
static inline void fx_h16_add_bias(uint16_t *h, int64_t rows, int64_t ld, int64_t n,
                                   const float *bias,
                                   void (*widen)(const uint16_t *, float *, int64_t),
                                   void (*narrow)(const float *, uint16_t *, int64_t))
{
    enum { FX_H16_BIAS_BLOCK = 1024 };
    float t[FX_H16_BIAS_BLOCK];
    if (rows * ld > FX_H16_BIAS_BLOCK || n > ld) { /* row by row, in pieces */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < n; i += FX_H16_BIAS_BLOCK) {
                const int64_t len = n - i < FX_H16_BIAS_BLOCK ? n - i : FX_H16_BIAS_BLOCK;
                uint16_t *p = h + r * ld + i;
                widen(p, t, len);
                for (int64_t k = 0; k < len; k++)
                    t[k] = fx_f32_nan_first(t[k], t[k] + bias[i + k]);
                narrow(t, p, len);
            }
        return;
    }
    widen(h, t, rows * ld);
    for (int64_t r = 0; r < rows; r++) {
        float *tr = t + r * ld;
        for (int64_t k = 0; k < n; k++) tr[k] = fx_f32_nan_first(tr[k], tr[k] + bias[k]);
    }
    narrow(t, h, rows * ld);
}

#endif
