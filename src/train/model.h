/* Models as a list of layers (darknet style: each layer has forward and backward), with
 * explicit input links so residual blocks are plain "add" layers. */
#ifndef FX_TRAIN_MODEL_H
#define FX_TRAIN_MODEL_H

#include "flexpoint_train.h"
#include "model_def.h"
#include "policy.h"
#include "../core/internal.h"

#define FX_CTX_TRAIN 0
#define FX_CTX_EVAL 1

typedef struct fx_param {
    char name[48];
    tensor_t *w, *g;  /* working copy and gradient (run format; fp32 for batch-norm) */
    /* raw fp32 buffers where the model lives (host, or device memory: placement.h) */
    float *master;    /* fp32 master weights, or NULL */
    float *mom;       /* momentum buffer (SGD), first moment (Adam, AdamW) */
    float *var;       /* second moment (Adam, AdamW), or NULL */
    float *unscaled;  /* loss-scaler output buffer */
    int64_t n;
    int decay;        /* weight decay applies */
    int fan_in;
} fx_param;

typedef enum {
    FX_L_CONV,
    FX_L_LINEAR,
    FX_L_RELU,
    FX_L_MAXPOOL,
    FX_L_GAP,
    FX_L_BN,
    FX_L_ADD,
    FX_L_CAST, /* out = in in another format (a write), inserted where a policy changes format */
    FX_L_AVGPOOL,
    FX_L_UNARY,   /* tensor_unary: tanh, sigmoid, gelu, gelu_tanh, silu (fn) */
    FX_L_FLATTEN, /* out is a [B, F] view of the input (no op of its own) */
    FX_L_DROPOUT, /* training: tensor_dropout keyed by the seed, the layer and m->step */
    FX_L_EMBED,   /* token + position embedding of m->tokens */
    FX_L_LN,      /* layer norm over the last axis, fp32 gamma/beta */
    FX_L_ATTN,    /* multi-head causal self-attention (params w .. w+3: wq, wk, wv, wo) */
    FX_L_TLINEAR  /* linear per position of [B, T, F] */
} fx_layer_kind;

/* Attention tensors per context (fx_layer.att) and of the backward pass (fx_layer.gatt). Each
 * is written by one op only: a shared-exponent tensor that two different ops wrote in turn would
 * see its exponent jump at every write (fx_attn_backward). */
enum { FX_AT_Q, FX_AT_K, FX_AT_V, FX_AT_S, FX_AT_P, FX_AT_O, FX_AT_OC, FX_AT_N };
/* FX_AG_DSS: the gradient of the scores before their scale, the softmax gradient times the
 * scale (tensor_attention_softmax_backward) */
enum { FX_AG_DOC, FX_AG_DO, FX_AG_DP, FX_AG_DV4, FX_AG_DSS, FX_AG_DQ4, FX_AG_DK4, FX_AG_DQ,
       FX_AG_DK, FX_AG_DV, FX_AG_XA, FX_AG_XB, FX_AG_XS, FX_AG_XC, FX_AG_N };

/* Per-sample rank plus the batch dimension. */
#define FX_LAYER_MAX_DIMS (FX_MODEL_MAX_RANK + 1)

typedef struct fx_layer {
    fx_layer_kind kind;
    char name[48];
    int in[2];   /* producing layer index, -1 for the network input */
    int nin;
    int ndim;    /* output rank */
    int64_t shape[FX_LAYER_MAX_DIMS]; /* output shape (batch first) */
    /* parameters (indices into the model's params, -1 if none) */
    int w, b;
    int k, stride, pad; /* conv / pool geometry */
    char fn[16];        /* FX_L_UNARY: the function */
    double p;           /* FX_L_DROPOUT: the drop probability */
    int heads;          /* FX_L_ATTN */
    /* FX_L_ATTN: the forward's intermediates per context and the backward's temporaries;
     * FX_L_EMBED: att[ctx][0] holds the position rows */
    tensor_t *att[2][FX_AT_N];
    tensor_t *gatt[FX_AG_N];
    /* batch norm (host memory on every placement, as the batch-norm ops want) */
    float *run_mean, *run_var, *save_mean, *save_invstd;
    int64_t channels;
    /* per context: output, pre-bias temporary, maxpool argmax */
    tensor_t *out[2], *tmp[2];
    int32_t *argmax; /* where the model lives (placement.h) */
    /* training only: gradient w.r.t. each input, and the summed gradient of this layer's
     * output when two consumers feed it */
    tensor_t *dx[2];
    int dx_owned[2];
    tensor_t *dy_sum;
    int consumers;
    /* a layer and the ReLU after it fused (float formats): on the CONV layer, its forward writes
     * relu(conv + b) into the next (RELU) layer's output with tensor_conv2d_bias_relu; a BN
     * layer likewise with fx_batchnorm_relu, and an fp16/bf16 ADD layer with
     * fx_half_add_relu; on that RELU layer, the forward is already done and the backward masks
     * by its own output (x > 0 exactly where relu(x) > 0). The conv layer has no output of its
     * own; the BN's and ADD's exist for the route that does not take the pair, and are not
     * written otherwise. */
    int fused_relu;
    /* add + ReLU in one pass (shared-exponent formats): on a CONV or LINEAR layer with a
     * bias, its forward writes its output u = conv + b, and on an ADD layer u = x0 + x1, and
     * the next (RELU) layer's output relu(u) with fx_shared_add_relu, the same two writes
     * tensor_add and tensor_relu make (each with its own Autoflex state) in one pass over the
     * data; a BN layer likewise its u and relu(u) with fx_batchnorm_shared_relu; on that RELU
     * layer, the forward is already done. Both outputs exist and are
     * written (the ReLU's gradient may still be made with its sum, sum_gated), except a BN's u
     * whose only reader is the ReLU, which that call may leave unwritten where relu(u)'s signs
     * are u's (out_stale; fx_relu_gate then gates by relu(u)). */
    int shared_relu;
    /* on a RELU layer whose output feeds two layers: its input gradient is made from their
     * two gradients in one pass (fp16/bf16: fx_half_gated_add, without dy_sum;
     * FLEX16_5/DFP16: fx_shared_add_gated, which also writes dy_sum) */
    int sum_gated;
    /* set where the last training step's fused route left out[FX_CTX_TRAIN] (fused_relu on a
     * BN or ADD layer) or dy_sum (sum_gated in fp16/bf16) unwritten: no values, statistics or
     * trace of the step, so that fx_trainer_tensor refuses them rather than hand out what they
     * were allocated with; cleared by a step that writes them */
    int out_stale, dy_sum_stale;
    /* a ReLU and the max pool right after it (non-overlapping windows, the ReLU's only
     * consumer, the host): on the MAXPOOL layer (relu_first), the backward gates its output
     * gradient by its own output (the pooled ReLU outputs) into gated, a tensor of the pooled
     * shape, and scatters that straight into the ReLU layer's dx (FLEX16_5/DFP16, no gated:
     * fx_pool_relu_backward_shared, the two writes from the pooled values); on the RELU layer
     * (pool_gated), the backward is then done. Each window's gradient goes to its argmax only,
     * whose ReLU output is the window's pooled value, so the gate there is the same and the
     * other positions get the +0 the unpooling wrote: the same bits, with the ReLU's mask
     * applied to a quarter of the values and one pass over the full-size gradient fewer.
     * dx_stale: set where that left the pool's own dx unwritten (fx_trainer_tensor refuses it
     * then, as out_stale) */
    int relu_first, pool_gated, dx_stale;
    tensor_t *gated;
    /* formats (fx_train_config.policy; the run's format without one): weights, biases, output,
     * gradients w.r.t. the inputs, weight and bias gradients */
    int fw, fb, fa, fdx, fdw;
} fx_layer;

typedef struct fx_model {
    fx_layer *layers;
    int nlayers, cap;
    fx_param *params;
    int nparams, pcap;
    int in_ndim;
    int64_t in_shape[FX_LAYER_MAX_DIMS]; /* [B, C, H, W], or [B, per-sample shape] */
    tensor_t *input[2];
    /* With a device: host tensors the batches are written into before being copied to
     * input[ctx] (same format, window and Autoflex state; NULL on the host) */
    tensor_t *stage[2];
    int classes;
    int device; /* -1: host memory; else the CUDA device holding every tensor and buffer */
    /* fx_trainer_profile_enable: seconds per layer of the training context's forward and
     * backward passes (NULL while profiling is off) */
    double *prof_fwd, *prof_bwd;
    /* the parsed policy, the input's format, casts inserted, and builder state: whether a
     * compute layer was added yet and whether the next layer is the classifier */
    fx_policy policy;
    int in_fmt;
    int ncasts;
    /* seconds spent in the cast layers of training steps (forward and backward), timed on the
     * host always (two clock reads per cast), on a device only while profiling (timing there
     * waits for the device) */
    double cast_seconds;
    int seen_compute, adding_last;
    fx_train_config cfg;
    /* Data parallelism (fx_trainer_new_distributed): the group, its write-path collectives
     * and its size; NULL, NULL, 1 for one process. cfg.batch_size is then this rank's part. */
    struct fx_comm *comm;
    const fx_dist_ops *dist;
    int nranks;
    /* the trainer's global step, set before each training forward pass: dropout masks are
     * keyed by it, so a resumed run draws the masks of an uninterrupted one */
    int64_t step;
    /* Sequence models (an embedding reads the input): T tokens per sample, the batch's token
     * numbers per context (B*T, written by the trainer) and each row's position (t of row
     * b*T + t); seq = 0 otherwise */
    int seq;
    int32_t *tokens[2];
    int32_t *pos_idx;
    /* Host blocks of a context's tensors kept after fx_model_park_ctx, handed to the tensors
     * of the next fx_model_alloc_ctx of the same sizes (zero-filled again): the evaluation
     * context is built and freed at every evaluation, and its fresh pages had cost a
     * transformer 0.4 s of page faults each time. Released by fx_model_free. */
    void **parked;
    size_t *parked_bytes;
    int nparked, parked_cap;
    int parking; /* set while fx_model_park_ctx frees */
} fx_model;

/* The network a model name describes (model_names.c has the grammar). */
enum { FX_MODEL_MLP, FX_MODEL_CNN, FX_MODEL_RESNET, FX_MODEL_GPT,
       FX_MODEL_DEF /* "@" and 14 hex digits: a definition's identity (fx_model_def_identity) */ };
#define FX_MODEL_NAME_MAX 16 /* sizeof(fx_train_config.model) */
#define FX_MODEL_MAX_WIDTH 65536
#define FX_MODEL_MAX_MLP_DEPTH 64
#define FX_MODEL_MAX_CHANNELS 4096
#define FX_MODEL_MAX_BLOCKS 200
#define FX_MODEL_MAX_WIDEN 16
#define FX_MODEL_MAX_GPT_LAYERS 64
#define FX_MODEL_MAX_GPT_WIDTH 16384
#define FX_MODEL_MAX_CONTEXT FX_DATA_MAX_CONTEXT /* a text dataset's longest window */
typedef struct fx_model_spec {
    int kind;   /* FX_MODEL_* */
    int width;  /* mlp: hidden width; cnn: hidden linear width; gpt: model width D */
    int depth;  /* mlp: hidden layers; resnet: 6 * blocks + 2; gpt: transformer blocks */
    int c1, c2; /* cnn: channels of the two convolutions */
    int blocks; /* resnet: basic blocks per stage */
    int widen;  /* resnet: channels 16K, 32K, 64K */
    int heads;  /* gpt: attention heads, dividing width */
    int context; /* gpt: tokens per sample */
} fx_model_spec;

/* Parse a model name into *spec (spec may be NULL: only check). FX_ENAME with a message naming
 * the name, the problem and the grammar, reported as coming from func. */
int fx_model_parse(const char *name, fx_model_spec *spec, const char *func);

/* Build the architecture named in cfg->model for inputs [B,C,H,W] (its definition from
 * fx_model_def_builtin, then fx_model_build_def). */
int fx_model_build(fx_model *m, const fx_train_config *cfg, int C, int H, int W, int classes);
/* Build the network of a definition whose input holds C*H*W values and whose last layer gives
 * (classes); allocates tensors in cfg->fmt where cfg->device says (the caller has checked and
 * selected the device with fx_place_select) and draws the initial weights from cfg->seed on the
 * host, keyed by the parameters' order. Errors are reported as fx_trainer_new's. */
int fx_model_build_def(fx_model *m, const fx_train_config *cfg, const fx_model_def *def, int C,
                       int H, int W, int classes);
void fx_model_free(fx_model *m);

/* The training context's tensors of layer i that the trainer's named tensors (out, tmp as
 * ".pre", dx, dy_sum) leave out: an attention layer's intermediates but its scores (its
 * ".pre") and its backward temporaries, an embedding's position rows. Their Autoflex state
 * carries from step to step, so a checkpoint keeps it. Writes at most FX_LAYER_MAX_STATE
 * tensors to out and returns their count. */
#define FX_LAYER_MAX_STATE (FX_AT_N + FX_AG_N)
int fx_model_state_tensors(const fx_model *m, int i, tensor_t **out);

/* Whether m has an attention layer (whose state tensors checkpoint version 3 added to). */
int fx_model_has_attention(const fx_model *m);

/* Allocate / free the tensors of a context (train: also gradients). */
int fx_model_alloc_ctx(fx_model *m, int ctx);
void fx_model_free_ctx(fx_model *m, int ctx);
/* fx_model_free_ctx, keeping the host blocks of the context's tensors for the next
 * fx_model_alloc_ctx (a tensor whose block cannot be taken, or when the list cannot grow, is
 * freed as usual). The next context's tensors are zero-filled as new ones. */
void fx_model_park_ctx(fx_model *m, int ctx);

/* Make m one rank's part of a distributed model over comm (before fx_model_alloc_ctx): its
 * batch tensors then choose their exponents with every rank's rows (FX_DIST_ROWS). */
void fx_model_set_comm(fx_model *m, struct fx_comm *comm);
/* Between fx_model_set_grads_summed(m, 1) and (m, 0) the parameter gradients' writes are
 * summed over the ranks (FX_DIST_SUM): the backward pass. Conv biases are not: their
 * per-sample sums are gathered and summed as in one process (fx_bias_grad_nchw). */
void fx_model_set_grads_summed(fx_model *m, int on);

/* Forward from m->input[ctx]; returns the logits tensor in *logits. */
int fx_model_forward(fx_model *m, int ctx, tensor_t **logits);
/* Backward from dlogits (train context); fills every parameter gradient. */
int fx_model_backward(fx_model *m, const tensor_t *dlogits);

/* 1 when any tensor of the model (parameters, gradients, activations) is in format f. */
int fx_model_uses(const fx_model *m, int f);

/* A monotonic clock in seconds, after waiting for the model's device when it has one (so that a
 * device's asynchronous work is charged to the layer that launched it). */
double fx_model_clock(const fx_model *m);

/* Set a new FLEX16_5 tensor's window and preset per the config (no-op for other formats); t
 * must hold only zeros, as tensor_new leaves it (fx_tensor_set_window_fresh). */
int fx_model_flex_setup(const fx_train_config *cfg, tensor_t *t, int window_lo);

/* Test hook: how many max-pool backwards applied the ReLU before them on the pooled values
 * (fx_layer.relu_first) since the process started. */
int64_t fx_model_relu_pool_made(void);

#endif
