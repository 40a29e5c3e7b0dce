/* tensor_scale of a FLEX16_5 / DFP16 tensor into a FLEX16_5, DFP16 or fp32 tensor without an
 * int64 stage (shared_scale.c): the dispatcher's bits, exponent, statistics and trace. */
#ifndef FX_CORE_SHARED_SCALE_H
#define FX_CORE_SHARED_SCALE_H

#include "backend.h"

#define FX_SHARED_SCALE_NOT_TAKEN (-1)

/* out = s * a (shapes already validated, s finite, none NULL): the write's status when done,
 * or FX_SHARED_SCALE_NOT_TAKEN (nothing written, no state changed) where the tensors are not
 * of a form handled here. */
int fx_shared_scale(tensor_t *out, const tensor_t *a, double s);

/* Test hook: 0 sends every scale through the dispatcher (to compare the two routes). */
void fx_shared_scale_set_enabled(int on);
/* Test hook: how many scales this file has done since the process started. */
int64_t fx_shared_scale_taken(void);

#endif
