/* One-pass add/sub/mul of fp16 or bf16 tensors for same-shape and per-channel operands
 * (half_binary.c); the same bits as the dispatcher's widen / fp32 kernel / narrow route. */
#ifndef FX_CORE_HALF_BINARY_H
#define FX_CORE_HALF_BINARY_H

#include "backend.h"

#define FX_HALF_BINARY_NOT_TAKEN (-1)

/* FX_OK when done (shapes already validated by the caller), FX_HALF_BINARY_NOT_TAKEN when the
 * operands are not of a form handled here (nothing written). */
int fx_half_binary(fx_op op, tensor_t *out, const tensor_t *a, const tensor_t *b);

#endif
