/* The op table: every op of the library is one entry of fx_op.
 *
 * Two kinds of entries share the enum:
 *   - stage ops (FX_OP_COPY ... FX_OP_UNARY_BACKWARD): a CPU backend computes them with a kernel
 *     per compute format (fx_backend.kernels[op][fmt], src/core/backend.h) that writes a stage,
 *     and the dispatcher does the one write into the output (src/core/dispatch.c);
 *   - whole ops (FX_OP_CONV2D onwards): the training ops of include/flexpoint_nn.h, which read
 *     and write tensors themselves; a backend computes them with fx_backend.run[op].
 * Both lists below are X-macros: one line per op gives its enum value, its public name (the
 * descriptors of src/core/op_run.c) and, for whole ops, the host implementation every CPU level
 * installs. Which (op, format) pairs a backend computes is its supports_op answer; the
 * dispatcher asks it and falls back by rule (docs/architecture.md, "Backends and dispatch").
 */
#ifndef FX_CORE_OP_TABLE_H
#define FX_CORE_OP_TABLE_H

/* Stage ops: X(ID, public function). A CPU level computes them with a kernel per compute
 * format, fx_backend.kernels[op][fmt] (src/core/backend.h), installed by src/cpu/<level>.c. */
#define FX_STAGE_OPS(X)                                                                        \
    X(COPY, "tensor_copy")                                                                     \
    X(ADD, "tensor_add")                                                                       \
    X(SUB, "tensor_sub")                                                                       \
    X(MUL, "tensor_mul")                                                                       \
    X(SCALE, "tensor_scale")                                                                   \
    X(RELU, "tensor_relu")                                                                     \
    X(SUM, "tensor_sum")                                                                       \
    X(MATMUL, "tensor_matmul")                                                                 \
    X(UNARY, "tensor_unary")                   /* out = f(a), f = fx_op_call.unary_fn */      \
    X(UNARY_BACKWARD, "tensor_unary_backward") /* out = dy * f'(x): in[0] dy, in[1] x */

/* Whole ops: X(ID, public function, host implementation). The line declares the host
 * implementation (src/nn/nn_ops.h) and installs it in every CPU level (src/nn/nn_ops.c), so a
 * new whole op is this line, its member of fx_op_args below when it needs one, its source file
 * (the public function and the host implementation) and its test. */
#define FX_WHOLE_OPS(X)                                                                        \
    X(CONV2D, "tensor_conv2d", fx_nn_conv2d_host)                                              \
    X(CONV2D_BIAS_RELU, "tensor_conv2d_bias_relu", fx_nn_conv2d_bias_relu_host)                \
    X(CONV2D_BACKWARD_INPUT, "tensor_conv2d_backward_input", fx_nn_conv2d_backward_input_host) \
    X(CONV2D_BACKWARD_WEIGHT, "tensor_conv2d_backward_weight",                                 \
      fx_nn_conv2d_backward_weight_host)                                                       \
    X(MAXPOOL2D, "tensor_maxpool2d", fx_nn_maxpool2d_host)                                     \
    X(MAXPOOL2D_BACKWARD, "tensor_maxpool2d_backward", fx_nn_maxpool2d_backward_host)          \
    X(AVGPOOL2D, "tensor_avgpool2d", fx_nn_avgpool2d_host)                                     \
    X(AVGPOOL2D_BACKWARD, "tensor_avgpool2d_backward", fx_nn_avgpool2d_backward_host)          \
    X(GLOBAL_AVGPOOL, "tensor_global_avgpool", fx_nn_global_avgpool_host)                      \
    X(GLOBAL_AVGPOOL_BACKWARD, "tensor_global_avgpool_backward",                               \
      fx_nn_global_avgpool_backward_host)                                                      \
    X(RELU_BACKWARD, "tensor_relu_backward", fx_nn_relu_backward_host)                         \
    X(DROPOUT, "tensor_dropout", fx_nn_dropout_host) /* and tensor_dropout_backward */         \
    X(SOFTMAX_CE, "tensor_softmax_cross_entropy", fx_nn_softmax_ce_host)                       \
    X(SOFTMAX_CE_ROWS, "fx_softmax_ce_rows", fx_nn_softmax_ce_rows_host) /* a rank's rows */ \
    X(MEAN, "tensor_mean", fx_nn_mean_host)                                                    \
    X(BATCHNORM, "tensor_batchnorm", fx_nn_batchnorm_host)                                     \
    X(BATCHNORM_BACKWARD, "tensor_batchnorm_backward", fx_nn_batchnorm_backward_host)          \
    X(SGD_STEP, "fx_sgd_step", fx_nn_sgd_step_host)                                            \
    X(ADAM_STEP, "fx_adam_step", fx_nn_adam_step_host)                                         \
    X(ADAMW_STEP, "fx_adamw_step", fx_nn_adam_step_host)                                       \
    X(UNSCALE, "fx_loss_scaler_unscale", fx_nn_unscale_host)                                   \
    X(CLIP_GRAD_NORM, "fx_clip_grad_norm", fx_nn_clip_grad_norm_host)                          \
    X(SOFTMAX, "tensor_softmax", fx_nn_softmax_host)                                           \
    X(LOG_SOFTMAX, "tensor_log_softmax", fx_nn_softmax_host)                                   \
    X(SOFTMAX_BACKWARD, "tensor_softmax_backward", fx_nn_softmax_backward_host)                \
    X(LOG_SOFTMAX_BACKWARD, "tensor_log_softmax_backward", fx_nn_softmax_backward_host)        \
    X(LAYERNORM, "tensor_layernorm", fx_nn_layernorm_host)                                     \
    X(LAYERNORM_BACKWARD, "tensor_layernorm_backward", fx_nn_layernorm_backward_host)          \
    X(BMM, "tensor_bmm", fx_nn_bmm_host)                                                       \
    X(BMM_BACKWARD, "tensor_bmm_backward", fx_nn_bmm_backward_host)                            \
    X(CAUSAL_MASK, "tensor_causal_mask", fx_nn_causal_mask_host)                               \
    X(MASKED_FILL, "tensor_masked_fill", fx_nn_masked_fill_host)                               \
    X(EMBEDDING, "tensor_embedding", fx_nn_embedding_host)                                     \
    X(EMBEDDING_BACKWARD, "tensor_embedding_backward", fx_nn_embedding_backward_host)

#define FX_OP_ENUM_STAGE(id, name) FX_OP_##id,
#define FX_OP_ENUM_WHOLE(id, name, host) FX_OP_##id,
typedef enum {
    FX_STAGE_OPS(FX_OP_ENUM_STAGE)
    FX_OP_STAGE_COUNT, /* the whole ops follow: FX_OP_CONV2D == FX_OP_STAGE_COUNT */
    FX_OP_LAST_STAGE = FX_OP_STAGE_COUNT - 1, /* so that the first whole op takes STAGE_COUNT */
    FX_WHOLE_OPS(FX_OP_ENUM_WHOLE)
    FX_OP_COUNT
} fx_op;
#undef FX_OP_ENUM_STAGE
#undef FX_OP_ENUM_WHOLE

/* The element-wise functions of FX_OP_UNARY / FX_OP_UNARY_BACKWARD (definitions: the fp32
 * cores of src/fp32/f32_math_impl.h, docs/math.md). One X(ID, "name") line per function that
 * tensor_unary accepts by name: the line gives both the enum value FX_UN_<ID> and the name
 * (src/core/ops_unary.c reads the same list), so a new function is this line, its core and
 * derivative in f32_math_impl.h (every CPU level instantiates that template), and its test. */
#define FX_UNARY_NAMED(X)                                                                      \
    X(EXP, "exp")                                                                              \
    X(LOG, "log")                                                                              \
    X(SQRT, "sqrt")                                                                            \
    X(RSQRT, "rsqrt")                                                                          \
    X(RECIPROCAL, "reciprocal")                                                                \
    X(TANH, "tanh")                                                                            \
    X(SIGMOID, "sigmoid")                                                                      \
    X(GELU, "gelu")                                                                            \
    X(GELU_TANH, "gelu_tanh")                                                                  \
    X(SILU, "silu")                                                                            \
    X(SQUARE, "square")                                                                        \
    X(ABS, "abs")

#define FX_UN_ENUM_ENTRY(id, name) FX_UN_##id,
typedef enum {
    FX_UNARY_NAMED(FX_UN_ENUM_ENTRY)
    /* reached through their own entry points, not by name */
    FX_UN_CLAMP, /* tensor_clamp: unary_p = {lo, hi} */
    FX_UN_POW,   /* tensor_pow: unary_p = {p} */
    /* the cores gelu is built on, reachable by the kernels' test entry points only */
    FX_UN_ERF,
    FX_UN_ERFC,
    FX_UN_COUNT
} fx_unary_fn;
#undef FX_UN_ENUM_ENTRY

/* ---- whole ops ------------------------------------------------------------------------------ */

#include <stdint.h>

struct tensor;
struct fx_conv_geom; /* src/nn/im2col.h */
struct fx_pool_geom; /* src/gpu/gpu_nn_math.h */
struct fx_bn_dims;   /* src/gpu/gpu_nn.h */

#define FX_OP_MAX_TENSORS 6

/* One call of a whole op: what its public function validated and derived, for whichever backend
 * runs it. The public function fills op, func, the tensors it touches (t/tn, for the placement
 * rule; tlist for a variable number, as the loss scaler's gradients) and the op's member of u. */
typedef struct fx_op_args {
    int op;           /* an fx_op */
    const char *func; /* the public function, for messages */
    int nt;
    const struct tensor *t[FX_OP_MAX_TENSORS]; /* NULL entries are optional tensors not given */
    const char *tn[FX_OP_MAX_TENSORS];
    const struct tensor *const *tlist; /* tlist[0..tlist_n), named tlist_name[i] */
    int tlist_n;
    const char *tlist_name;
    union {
        struct { /* CONV2D, CONV2D_BIAS_RELU, CONV2D_BACKWARD_INPUT, CONV2D_BACKWARD_WEIGHT */
            struct tensor *out;           /* y, dx or dw */
            const struct tensor *a, *b;   /* (x, w), (dy, w) or (x, dy) */
            const struct fx_conv_geom *g; /* validated geometry (strides, paddings too) */
            const struct tensor *bias;    /* CONV2D_BIAS_RELU: [O,1,1] or NULL */
            int relu;                     /* CONV2D_BIAS_RELU */
        } conv;
        struct { /* MAXPOOL2D, AVGPOOL2D, their backwards, GLOBAL_AVGPOOL and its backward */
            struct tensor *out;           /* y or dx */
            const struct tensor *in;      /* x or dy */
            int32_t *argmax;              /* MAXPOOL2D: optional output indices */
            const int32_t *argmax_in;     /* MAXPOOL2D_BACKWARD */
            int own_indices;              /* MAXPOOL2D_BACKWARD: indices the library wrote */
            const struct fx_pool_geom *g; /* not for the global pools */
            int64_t planes, HW;           /* global pools */
        } pool;
        struct { /* RELU_BACKWARD */
            struct tensor *dx;
            const struct tensor *dy, *x;
        } relu_bwd;
        struct { /* DROPOUT: y = x * keep / (1 - p), with the mask of (seed, step) */
            struct tensor *y;
            const struct tensor *x;
            uint64_t thr;   /* element i dropped when its hash < thr */
            double factor;  /* 1 / (1 - p) */
            int64_t ms;     /* factor = ms * 2^(k2 - 30), for integer compute */
            int k2;
            uint64_t seed, step;
        } dropout;
        struct { /* SOFTMAX_CE, SOFTMAX_CE_ROWS (row_loss and n_div: src/nn/softmax_ce.h) */
            float *loss;
            double *row_loss;
            int64_t n_div;
            struct tensor *dlogits;
            const struct tensor *logits;
            const int32_t *labels;
            double grad_scale;
        } ce;
        struct { /* MEAN: out[o, i] = mean_k a[(o * len + k) * inner + i] */
            struct tensor *out;
            const struct tensor *a;
            int64_t outer, len, inner;
        } mean;
        struct { /* BATCHNORM */
            struct tensor *y;
            const struct tensor *x, *gamma, *beta;
            float *running_mean, *running_var, *save_mean, *save_invstd;
            double momentum, eps;
            int training;
            const struct fx_bn_dims *d;
            int relu; /* host, float y only (fx_batchnorm_relu): y = relu(the output) */
            struct tensor *relu_y; /* host, FLEX16_5/DFP16 (fx_batchnorm_shared_relu): also
                                    * relu_y = relu(y) (NULL: none) */
            int *y_written; /* with relu_y: NULL, or y may be left unwritten (bn_direct.h) */
        } bn;
        struct { /* BATCHNORM_BACKWARD */
            struct tensor *dx, *dgamma, *dbeta;
            const struct tensor *dy, *x, *gamma;
            const float *save_mean, *save_invstd;
            const struct fx_bn_dims *d;
        } bn_bwd;
        struct { /* SGD_STEP, ADAM_STEP, ADAMW_STEP */
            struct tensor *w;
            const struct tensor *grad;
            float *master, *buf1, *buf2; /* SGD: momentum buffer; Adam: m, v */
            double lr, momentum, beta1, beta2, eps, weight_decay, grad_scale;
            double bc1, sqrt_bc2; /* Adam's bias corrections at this step */
            int stochastic;
            uint64_t seed, step;
        } optim;
        struct { /* UNSCALE: out[i] = grads[i] * inv, *found_inf */
            float inv;
            float *const *out;
            int *found_inf;
        } unscale;
        struct { /* CLIP_GRAD_NORM: the gradients are tlist */
            double max_norm;
            double *total_norm;
        } clip;
        struct { /* the transformer ops, SOFTMAX ... EMBEDDING_BACKWARD (flexpoint_nn.h order) */
            struct tensor *out, *out2;  /* y, dx, out, da, dtable; db                      */
            const struct tensor *in[3]; /* the inputs in the public function's order       */
            const float *fin[2];        /* layer norm: gamma, beta                         */
            float *fout[2];             /* layer norm: mean, rstd; dgamma, dbeta           */
            const int32_t *indices;     /* embedding: host memory                          */
            int64_t n;                  /* embedding: the index count                      */
            int64_t R, D;               /* layer norm rows and width; embedding V and D    */
            int axis, ta, tb;           /* softmax axis; bmm transposes                    */
            double value;               /* layer norm eps; the masks' fill                 */
            const void *geom;           /* bmm dims or the mask's strides (op-private)     */
        } tfm;
    } u;
} fx_op_args;

typedef int (*fx_op_fn)(const fx_op_args *a);

/* What the dispatcher knows of an op (src/core/op_run.c). */
typedef struct fx_op_info {
    const char *name; /* its public function */
    /* Where a backend lacks the op: a composite of other table ops that computes it (NULL: the
     * dispatcher reports FX_EUNSUPPORTED naming the backend and the op). */
    fx_op_fn fallback;
} fx_op_info;

const fx_op_info *fx_op_info_of(int op); /* NULL for an unknown op */

/* The placement rule, for both dispatchers: *device -1 when every tensor of a (t[0..nt) and
 * tlist, NULL entries skipped) lives on the host, the ordinal of the one device all live on
 * otherwise; FX_EINVAL naming the first tensor and one that lives elsewhere, and where each
 * lives. Only func, nt, t, tn and tlist* of a are read. */
int fx_op_placement(const fx_op_args *a, int *device);

/* Run a whole op: the placement rule over a's tensors picks the backend (the active CPU level
 * for host tensors, the device backend for tensors on one device; mixed places: FX_EINVAL
 * naming two of them), its supports_op answer decides between run[op] and the op's fallback.
 * Returns the op's status. */
int fx_op_run(const fx_op_args *a);

/* Whether the backend that runs a (by the placement rule) lets the host read p directly
 * (FX_OK), or FX_EINVAL naming `name` (device backends: p must be host memory, as the labels of
 * a device softmax cross-entropy). For validation that must read p before the op runs. */
int fx_op_host_readable(const fx_op_args *a, const void *p, const char *name);

#endif
