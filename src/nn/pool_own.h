/* Internal entry points of the pooling ops (src/nn/pool.c) for the library's own callers. */
#ifndef FX_NN_POOL_OWN_H
#define FX_NN_POOL_OWN_H

#include "flexpoint.h"
#include "../core/internal_export.h" /* FX_INTERNAL: src/train calls it */

#include <stdint.h>

/* tensor_maxpool2d_backward for an argmax buffer that only the library's own
 * tensor_maxpool2d has written (the trainer's: it is allocated, filled and read by
 * src/train/model.c alone). On a device the indices then need no validation, which would wait
 * for the device; on the host they are validated as always. Same statuses otherwise. */
FX_INTERNAL int fx_maxpool2d_backward_own(tensor_t *dx, const tensor_t *dy, const int32_t *argmax);

/* The gradient of a ReLU through the max pool after it, for FLEX16_5/DFP16 tensors, as
 * tensor_maxpool2d_backward(a, dy, argmax) then tensor_relu_backward(dx, a, gate) make it:
 * dx's mantissas, and both writes' exponents, statistics, traces and Autoflex states, the
 * same; a's mantissas are not stored (the caller marks a unwritten). For 2x2 windows of stride
 * 2 (each input in at most one window) on whole contiguous host tensors of one storage each
 * (dx: the ReLU's input shape; gate: the ReLU's gate, its input or output; argmax: the pool's
 * own). pool_relu_shared.c says how. FX_POOL_RELU_NOT_TAKEN, with nothing written, where it
 * does not apply (another layout, an index outside its plane, no memory): the caller then
 * runs the two ops, which report any error. Else the writes' status. */
#define FX_POOL_RELU_NOT_TAKEN 1 /* positive: no status is mistaken for it */
FX_INTERNAL int fx_pool_relu_backward_shared(tensor_t *dx, tensor_t *a, const tensor_t *dy,
                                             const int32_t *argmax, const tensor_t *gate,
                                             const char *func);

/* Test hook: how many planes of max-pool gradients the level's 2x2 vector scatter
 * (fx_cvt_table.maxunpool2x2_u16) has written since the process started. */
int64_t fx_pool_unpool_planes(void);

#endif
