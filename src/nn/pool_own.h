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

/* Test hook: how many planes of max-pool gradients the level's 2x2 vector scatter
 * (fx_cvt_table.maxunpool2x2_u16) has written since the process started. */
int64_t fx_pool_unpool_planes(void);

#endif
