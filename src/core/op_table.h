/* The op table: every op of the library is one entry of fx_op.
 *
 * Two kinds of entries share the enum:
 *   - stage ops (FX_OP_COPY ... FX_OP_UNARY_BACKWARD): a CPU backend computes them with a kernel
 *     per compute format (fx_backend.kernels[op][fmt], src/core/backend.h) that writes a stage,
 *     and the dispatcher does the one write into the output (src/core/dispatch.c);
 *   - whole ops (FX_OP_CONV2D onwards): the training ops of include/flexpoint_nn.h, which read
 *     and write tensors themselves; a backend computes them with fx_backend.run[op].
 * Which (op, format) pairs a backend computes is its supports_op answer; the dispatcher asks it
 * and falls back by rule (docs/architecture.md, "Op table and dispatch").
 */
#ifndef FX_CORE_OP_TABLE_H
#define FX_CORE_OP_TABLE_H

typedef enum {
    FX_OP_COPY = 0, /* out = a */
    FX_OP_ADD,
    FX_OP_SUB,
    FX_OP_MUL,
    FX_OP_SCALE,
    FX_OP_RELU,
    FX_OP_SUM,
    FX_OP_MATMUL,
    FX_OP_UNARY,          /* out = f(a), f = fx_op_call.unary_fn (element-wise math, f32_math.h) */
    FX_OP_UNARY_BACKWARD, /* out = dy * f'(x): in[0] = dy, in[1] = x */
    FX_OP_COUNT
} fx_op;

/* The element-wise functions of FX_OP_UNARY / FX_OP_UNARY_BACKWARD (names and definitions:
 * src/core/ops_unary.c, docs/math.md). FX_UN_ERF and FX_UN_ERFC are the cores gelu is built
 * on, reachable by the kernels' test entry points only. */
typedef enum {
    FX_UN_EXP = 0,
    FX_UN_LOG,
    FX_UN_SQRT,
    FX_UN_RSQRT,
    FX_UN_RECIPROCAL,
    FX_UN_TANH,
    FX_UN_SIGMOID,
    FX_UN_GELU,
    FX_UN_GELU_TANH,
    FX_UN_SILU,
    FX_UN_SQUARE,
    FX_UN_ABS,
    FX_UN_CLAMP, /* unary_p = {lo, hi} */
    FX_UN_POW,   /* unary_p = {p} */
    FX_UN_ERF,
    FX_UN_ERFC,
    FX_UN_COUNT
} fx_unary_fn;

#endif
