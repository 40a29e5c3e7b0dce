/* Model definitions (include/flexpoint_model.h): the layer graph with per-sample shapes, as
 * built by the public API and the model-file parser, before fx_model_build_def (model.c) turns
 * it into the trainer's fx_model. */
#ifndef FX_TRAIN_MODEL_DEF_H
#define FX_TRAIN_MODEL_DEF_H

#include "flexpoint_model.h"

#include <stdint.h>

/* Layer kinds of a definition. The names (fx_def_kind_name) are the model file's. */
typedef enum {
    FX_DK_LINEAR,
    FX_DK_CONV,
    FX_DK_BN,
    FX_DK_RELU,
    FX_DK_UNARY, /* tanh, sigmoid, gelu, gelu_tanh, silu: fn holds the name */
    FX_DK_MAXPOOL,
    FX_DK_AVGPOOL,
    FX_DK_GAP,
    FX_DK_ADD,
    FX_DK_FLATTEN,
    FX_DK_DROPOUT,
    FX_DK_EMBED,  /* token + learned position embedding of (T) token numbers: (T, out) */
    FX_DK_LN,     /* layer norm over the last dimension */
    FX_DK_ATTN,   /* multi-head causal self-attention over (T, D), `heads` heads */
    FX_DK_TLINEAR /* linear per position: (T, F) -> (T, out) */
} fx_def_kind;

typedef struct fx_def_layer {
    fx_def_kind kind;
    char name[FX_MODEL_LAYER_NAME_MAX];
    char fn[16];          /* FX_DK_UNARY: the tensor_unary function */
    int in[2];            /* producing layer's index, -1 for the network input */
    int nin;
    int64_t out;          /* linear: features; conv: channels */
    int k, stride, pad;   /* conv / pool geometry */
    int bias;             /* conv: 1 with a bias */
    double p;             /* dropout probability */
    int64_t vocab;        /* embedding: table rows */
    int heads;            /* attention: heads */
    int ndim;             /* per-sample output shape */
    int64_t shape[FX_MODEL_MAX_RANK];
    int consumers;        /* later layers that read this one */
} fx_def_layer;

struct fx_model_def {
    char name[FX_MODEL_LAYER_NAME_MAX];
    int in_ndim;
    int64_t in_shape[FX_MODEL_MAX_RANK];
    fx_def_layer *layers;
    int n, cap;
};

/* The model-file name of a layer's kind ("conv2d", "gelu", ...). */
const char *fx_def_kind_name(const fx_def_layer *l);

/* A deep copy of d in *out (FX_ENOMEM). */
int fx_model_def_copy(const fx_model_def *d, fx_model_def **out);

/* The index of the layer named `name` (-1 for "input"), or -2 when there is none. */
int fx_model_def_find(const fx_model_def *d, const char *name);

#endif
