/* One-pass add/sub/mul of fp16 or bf16 tensors for same-shape and per-channel operands
 * (half_binary.c); the same bits as the dispatcher's widen / fp32 kernel / narrow route. */
#ifndef FX_CORE_HALF_BINARY_H
#define FX_CORE_HALF_BINARY_H

#include "backend.h"
#include "internal_export.h"

/* positive, so that no status (FX_OK or a negative error) is mistaken for it */
#define FX_HALF_BINARY_NOT_TAKEN 1

/* what a same-shape add does with each rounded sum before it is stored (fx_half_add_fn): nothing,
 * tensor_relu's rule, or tensor_relu_backward's selection by a gate (the ReLU's input) */
enum { FX_HALF_ADD_PLAIN = 0, FX_HALF_ADD_RELU = 1, FX_HALF_ADD_GATE = 2 };

/* the AVX2 and AVX-512 levels' fx_half_add_fn (half_binary_avx2.c, half_binary_avx512.c) */
void fx_half_add_avx2(fmt_t f, int kind, const uint16_t *a, const uint16_t *b,
                      const uint16_t *gate, uint16_t *out, int64_t n);
void fx_half_add_avx512(fmt_t f, int kind, const uint16_t *a, const uint16_t *b,
                        const uint16_t *gate, uint16_t *out, int64_t n);

/* A level's fx_half_add_fn from its row loop, which every level names add_rows(a, b, gate, out,
 * n, BF, KIND) with BF (bf16, else fp16) and KIND constants: one dispatch for every level. */
#define FX_HALF_ADD_KINDS_(BF)                                                                 \
    if (kind == FX_HALF_ADD_RELU)                                                              \
        add_rows(a, b, gate, out, n, (BF), FX_HALF_ADD_RELU);                                  \
    else if (kind == FX_HALF_ADD_GATE)                                                         \
        add_rows(a, b, gate, out, n, (BF), FX_HALF_ADD_GATE);                                  \
    else                                                                                       \
        add_rows(a, b, gate, out, n, (BF), FX_HALF_ADD_PLAIN);
#define FX_HALF_ADD_ENTRY(NAME)                                                                \
    void NAME(fmt_t f, int kind, const uint16_t *a, const uint16_t *b, const uint16_t *gate,  \
              uint16_t *out, int64_t n)                                                       \
    {                                                                                          \
        if (f == FMT_BF16) {                                                                   \
            FX_HALF_ADD_KINDS_(1)                                                              \
        } else {                                                                               \
            FX_HALF_ADD_KINDS_(0)                                                              \
        }                                                                                      \
    }

/* FX_OK when done (shapes already validated by the caller), FX_HALF_BINARY_NOT_TAKEN when the
 * operands are not of a form handled here (nothing written). */
int fx_half_binary(fx_op op, tensor_t *out, const tensor_t *a, const tensor_t *b);

/* out = relu(a + b) in the same pass (tensor_add then tensor_relu on out's format: the same
 * bits, without a + b written and read back), out neither a's nor b's storage: a residual add
 * and the ReLU after it. FX_OK, or FX_HALF_BINARY_NOT_TAKEN (nothing written). */
FX_INTERNAL int fx_half_add_relu(tensor_t *out, const tensor_t *a, const tensor_t *b);

/* out = (a + b) where gate > 0, else +0, in the same pass (tensor_add into a tensor of out's
 * format, then tensor_relu_backward with gate as the ReLU's input: the same bits), for
 * same-shape a, b and gate of out's format, gate contiguous and out none of a, b or gate: the
 * gradient of a ReLU whose output feeds two layers. FX_OK, or FX_HALF_BINARY_NOT_TAKEN. */
FX_INTERNAL int fx_half_gated_add(tensor_t *out, const tensor_t *a, const tensor_t *b,
                                  const tensor_t *gate);

/* Test hooks: the calls of the two above that were made here, and of fx_half_gated_add's */
FX_INTERNAL int64_t fx_half_fused_made(void);
FX_INTERNAL int64_t fx_half_gated_made(void);

#endif
