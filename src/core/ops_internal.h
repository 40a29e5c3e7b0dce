/* The request an op wrapper fills after validation; fx_dispatch executes it. */
#ifndef FX_CORE_OPS_INTERNAL_H
#define FX_CORE_OPS_INTERNAL_H

#include "backend.h"

typedef struct fx_op_request {
    fx_op op;
    const char *func; /* public function name, for messages */
    tensor_t *out;
    int nin;
    const tensor_t *in[FX_MAX_INPUTS];
    int broadcast;  /* inputs are broadcast to out's shape (elementwise binary ops) */
    int strided_ok; /* the kernel reads any strides (no gather needed) */
    double scalar;
    int64_t red_outer, red_len, red_inner;
    int unary_fn;      /* FX_OP_UNARY(_BACKWARD): an fx_unary_fn (backend.h) */
    double unary_p[2]; /*   and its parameters */
    /* MATMUL into an fp16/bf16 host output (fx_matmul_bias): out = tensor_add(product, bias),
     * bias [N] of out's format on the host; NULL: none */
    const tensor_t *epi_bias;
} fx_op_request;

/* tensor_matmul's shape checks for func: FX_OK or FX_ESHAPE with a message naming the shapes */
int fx_matmul_shape_check(const tensor_t *out, const tensor_t *a, const tensor_t *b,
                        const char *func);

int fx_dispatch(const fx_op_request *rq);

/* The reduction geometry of tensor_sum / tensor_mean: out[o*inner + i] reduces
 * a[(o*len + k)*inner + i] over k. Validates axis and out's shape (the axis removed, or kept
 * as size 1; FX_AXIS_ALL needs a 1-element out), with messages naming func. */
int fx_reduce_geometry(const tensor_t *out, const tensor_t *a, int axis, int64_t *outer,
                       int64_t *len, int64_t *inner, const char *func);

/* Test hooks of the int16 route of tensor_copy and tensor_relu from a FLEX16_5/DFP16 host
 * tensor (ops.c): switch it off (the dispatcher's int64 stage then writes, as before the
 * route existed), and count the copies it took. */
void fx_int16_unary_set_enabled(int on);
int64_t fx_int16_copy_taken(void);
/* the copies between fp16 (or bf16) tensors made on bit patterns (the same hook switches them
 * off) */
int64_t fx_half_copy_taken(void);
/* the fp16/bf16 copies and ReLUs of a view read run by run straight into the output or its
 * staging (one pass, fx_strided_gather_with) */
int64_t fx_half_select_gathered_runs(void);

#endif
