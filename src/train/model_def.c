/* Model definitions (include/flexpoint_model.h): layers added by kind with their names and
 * inputs, each checked against its input's per-sample shape when it is added, and the
 * built-in networks written with the same calls (fx_model_def_builtin), so that the one path
 * from a definition to a trainer's model (fx_model_build_def, model.c) builds them all. */
#define _POSIX_C_SOURCE 200809L
#include "model_def.h"
#include "model.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FX_DEF_MAX_SIZE (INT64_C(1) << 24)     /* one dimension, or a layer's width */
#define FX_DEF_MAX_ELEMS (INT64_C(0x7fffffff)) /* one sample's values at any layer */
#define FX_DEF_MAX_WEIGHTS (INT64_C(1) << 34)  /* one layer's weights */
#define FX_DEF_MAX_GEOM 64                     /* kernel and stride */

static const char *const fx_unary_fns[] = {"tanh", "sigmoid", "gelu", "gelu_tanh", "silu"};
#define FX_N_UNARY ((int)(sizeof fx_unary_fns / sizeof fx_unary_fns[0]))

const char *fx_def_kind_name(const fx_def_layer *l)
{
    switch (l->kind) {
    case FX_DK_LINEAR: return "linear";
    case FX_DK_CONV: return "conv2d";
    case FX_DK_BN: return "batchnorm";
    case FX_DK_RELU: return "relu";
    case FX_DK_UNARY: return l->fn;
    case FX_DK_MAXPOOL: return "maxpool2d";
    case FX_DK_AVGPOOL: return "avgpool2d";
    case FX_DK_GAP: return "global_avgpool";
    case FX_DK_ADD: return "add";
    case FX_DK_FLATTEN: return "flatten";
    case FX_DK_DROPOUT: return "dropout";
    case FX_DK_EMBED: return "embedding";
    case FX_DK_LN: return "layernorm";
    case FX_DK_ATTN: return "attention";
    case FX_DK_TLINEAR: return "token_linear";
    }
    return "?";
}

/* 1 for a name of 1..31 bytes of letters, digits, '_', '-', '.' (no spaces, commas, '=' or
 * '#', which the model file uses, and no '*', which format policies use as a wildcard). */
static int fx_def_name_ok(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (n + 1 >= FX_MODEL_LAYER_NAME_MAX) return 0;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return 0;
    }
    return n > 0;
}

/* "(1, 28, 28)" */
static const char *fx_def_shape_str(char *buf, size_t cap, int ndim, const int64_t *s)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "(");
    for (int i = 0; i < ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, i ? ", " : "", s[i]);
    if (o < cap) snprintf(buf + o, cap - o, ")");
    return buf;
}

int fx_model_def_new(const char *name, int ndim, const int64_t *shape, fx_model_def **out)
{
    if (out) *out = NULL;
    if (!name || !shape || !out) return FX_FAIL(FX_EINVAL, "NULL argument");
    if (!fx_def_name_ok(name))
        return FX_FAIL(FX_ENAME, "model name '%.64s': use 1 to %d letters, digits, '_', '-' or "
                       "'.'", name, FX_MODEL_LAYER_NAME_MAX - 1);
    if (ndim < 1 || ndim > FX_MODEL_MAX_RANK)
        return FX_FAIL(FX_EINVAL, "input rank %d is outside [1, %d]", ndim, FX_MODEL_MAX_RANK);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1 || shape[i] > FX_DEF_MAX_SIZE)
            return FX_FAIL(FX_ESHAPE, "input size %" PRId64 " (dimension %d) is outside [1, "
                           "2^24]", shape[i], i);
        numel *= shape[i];
        if (numel > FX_DEF_MAX_ELEMS)
            return FX_FAIL(FX_ESHAPE, "the input has more than 2^31 - 1 values per sample");
    }
    fx_model_def *d = calloc(1, sizeof *d);
    if (!d) return FX_FAIL(FX_ENOMEM, "out of memory");
    snprintf(d->name, sizeof d->name, "%s", name);
    d->in_ndim = ndim;
    memcpy(d->in_shape, shape, (size_t)ndim * sizeof *shape);
    *out = d;
    return FX_OK;
}

void fx_model_def_free(fx_model_def *d)
{
    if (!d) return;
    free(d->layers);
    free(d);
}

int fx_model_def_copy(const fx_model_def *d, fx_model_def **out)
{
    fx_model_def *c = malloc(sizeof *c);
    if (!c) return FX_FAIL(FX_ENOMEM, "out of memory");
    *c = *d;
    c->layers = NULL;
    c->cap = d->n;
    if (d->n) {
        c->layers = malloc((size_t)d->n * sizeof *c->layers);
        if (!c->layers) {
            free(c);
            return FX_FAIL(FX_ENOMEM, "out of memory");
        }
        memcpy(c->layers, d->layers, (size_t)d->n * sizeof *c->layers);
    }
    *out = c;
    return FX_OK;
}

int fx_model_def_find(const fx_model_def *d, const char *name)
{
    if (!strcmp(name, "input")) return -1;
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->layers[i].name, name)) return i;
    return -2;
}

static void fx_def_in_shape(const fx_model_def *d, int idx, int *ndim, const int64_t **s)
{
    *ndim = idx < 0 ? d->in_ndim : d->layers[idx].ndim;
    *s = idx < 0 ? d->in_shape : d->layers[idx].shape;
}

/* The output size of a window of k, stride s and padding p over n, or -1 when empty. */
static int64_t fx_def_window_out(int64_t n, int k, int s, int p)
{
    int64_t span = n + 2 * (int64_t)p - k;
    return span < 0 ? -1 : span / s + 1;
}

#define DEF_FAIL(code, ...) fx_error((code), func, __VA_ARGS__)

/* The output shape of l from its input(s); FX_ESHAPE / FX_ERANGE with a message naming l. */
static int fx_def_shape(const fx_model_def *d, fx_def_layer *l, const char *func)
{
    int nd;
    const int64_t *s;
    fx_def_in_shape(d, l->in[0], &nd, &s);
    const char *kn = fx_def_kind_name(l);
    const char *in_name = l->in[0] < 0 ? "input" : d->layers[l->in[0]].name;
    char sb[96], sb2[96];
    int64_t numel = 1;
    for (int i = 0; i < nd; i++) numel *= s[i];
    l->ndim = nd;
    memcpy(l->shape, s, sizeof l->shape);
    const int spatial = l->kind == FX_DK_CONV || l->kind == FX_DK_MAXPOOL ||
                        l->kind == FX_DK_AVGPOOL || l->kind == FX_DK_GAP;
    if (spatial && nd != 3)
        return DEF_FAIL(FX_ESHAPE, "layer '%s' (%s): its input '%s' is %s; %s takes (C, H, W)",
                        l->name, kn, in_name, fx_def_shape_str(sb, sizeof sb, nd, s), kn);
    if (l->kind == FX_DK_CONV || l->kind == FX_DK_MAXPOOL || l->kind == FX_DK_AVGPOOL) {
        const int conv = l->kind == FX_DK_CONV;
        const int pad_max = conv ? l->k - 1 : l->k / 2;
        if (l->k < 1 || l->k > FX_DEF_MAX_GEOM || l->stride < 1 || l->stride > FX_DEF_MAX_GEOM)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (%s): kernel %d and stride %d must be in "
                            "[1, %d]", l->name, kn, l->k, l->stride, FX_DEF_MAX_GEOM);
        if (l->pad < 0 || l->pad > pad_max)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (%s): pad %d is outside [0, %d] for kernel "
                            "%d", l->name, kn, l->pad, pad_max, l->k);
        if (conv && (l->out < 1 || l->out > 65536))
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (conv2d): out %" PRId64 " channels is "
                            "outside [1, 65536]", l->name, l->out);
        int64_t oh = fx_def_window_out(s[1], l->k, l->stride, l->pad);
        int64_t ow = fx_def_window_out(s[2], l->k, l->stride, l->pad);
        if (oh < 1 || ow < 1)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (%s): kernel %d with pad %d does not fit its "
                            "input '%s' %s (the output would be empty)", l->name, kn, l->k,
                            l->pad, in_name, fx_def_shape_str(sb, sizeof sb, nd, s));
        l->shape[0] = conv ? l->out : s[0];
        l->shape[1] = oh;
        l->shape[2] = ow;
        if (conv && l->out * s[0] * l->k * l->k > FX_DEF_MAX_WEIGHTS)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (conv2d): more than 2^34 weights", l->name);
        if (conv && s[0] * l->k * l->k > INT32_MAX)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (conv2d): a fan-in above 2^31 - 1", l->name);
    }
    switch (l->kind) {
    case FX_DK_LINEAR:
        if (l->out < 1 || l->out > FX_DEF_MAX_SIZE)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (linear): out %" PRId64 " is outside "
                            "[1, 2^24]", l->name, l->out);
        if (numel > INT32_MAX || numel * l->out > FX_DEF_MAX_WEIGHTS)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (linear): %" PRId64 " inputs x %" PRId64
                            " outputs is too many weights (at most 2^34, fan-in below 2^31)",
                            l->name, numel, l->out);
        l->ndim = 1;
        memset(l->shape, 0, sizeof l->shape);
        l->shape[0] = l->out;
        break;
    case FX_DK_BN:
        if (nd != 3 && nd != 1)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (batchnorm): its input '%s' is %s; batch "
                            "norm takes (C, H, W) or (F)", l->name, in_name,
                            fx_def_shape_str(sb, sizeof sb, nd, s));
        break;
    case FX_DK_GAP:
        l->ndim = 1;
        memset(l->shape, 0, sizeof l->shape);
        l->shape[0] = s[0];
        break;
    case FX_DK_FLATTEN:
        l->ndim = 1;
        memset(l->shape, 0, sizeof l->shape);
        l->shape[0] = numel;
        break;
    case FX_DK_DROPOUT:
        if (!(l->p >= 0 && l->p < 1))
            return DEF_FAIL(FX_ERANGE, "layer '%s' (dropout): p = %g is outside [0, 1)",
                            l->name, l->p);
        break;
    case FX_DK_EMBED:
        if (l->in[0] != -1 || nd != 1)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (embedding): it reads the network input of "
                            "(T) token numbers; its input '%s' is %s", l->name, in_name,
                            fx_def_shape_str(sb, sizeof sb, nd, s));
        if (l->vocab < 1 || l->vocab > 65536 || l->out < 1 || l->out > 65536)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (embedding): vocab %" PRId64 " and dim %"
                            PRId64 " must be in [1, 65536]", l->name, l->vocab, l->out);
        l->ndim = 2;
        l->shape[1] = l->out;
        break;
    case FX_DK_LN:
        if (s[nd - 1] > 65536)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (layernorm): its last dimension %" PRId64
                            " is above 65536", l->name, s[nd - 1]);
        break;
    case FX_DK_ATTN:
        if (nd != 2)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (attention): its input '%s' is %s; attention "
                            "takes (T, D)", l->name, in_name,
                            fx_def_shape_str(sb, sizeof sb, nd, s));
        if (l->heads < 1 || s[1] % l->heads != 0 || s[1] > 65536)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (attention): %d heads do not divide the "
                            "width %" PRId64 " of its input '%s' (at most 65536)", l->name,
                            l->heads, s[1], in_name);
        break;
    case FX_DK_TLINEAR:
        if (nd != 2)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (token_linear): its input '%s' is %s; "
                            "token_linear takes (T, F)", l->name, in_name,
                            fx_def_shape_str(sb, sizeof sb, nd, s));
        if (l->out < 1 || l->out > 65536 || s[1] > 65536)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (token_linear): out %" PRId64 " and its "
                            "input width %" PRId64 " must be in [1, 65536]", l->name, l->out,
                            s[1]);
        l->shape[1] = l->out;
        break;
    case FX_DK_ADD: {
        int nd2;
        const int64_t *s2;
        fx_def_in_shape(d, l->in[1], &nd2, &s2);
        int same = nd == nd2;
        for (int i = 0; same && i < nd; i++) same = s[i] == s2[i];
        if (!same)
            return DEF_FAIL(FX_ESHAPE, "layer '%s' (add): its inputs differ in shape: '%s' is "
                            "%s, '%s' is %s", l->name, in_name,
                            fx_def_shape_str(sb, sizeof sb, nd, s),
                            l->in[1] < 0 ? "input" : d->layers[l->in[1]].name,
                            fx_def_shape_str(sb2, sizeof sb2, nd2, s2));
        break;
    }
    default: break;
    }
    int64_t on = 1;
    for (int i = 0; i < l->ndim; i++) on *= l->shape[i];
    if (on > FX_DEF_MAX_ELEMS)
        return DEF_FAIL(FX_ESHAPE, "layer '%s' (%s): its output %s has more than 2^31 - 1 "
                        "values per sample", l->name, kn,
                        fx_def_shape_str(sb, sizeof sb, l->ndim, l->shape));
    return FX_OK;
}

/* Check and append layer l (kind and options filled) reading in0 (and in1 for add). The
 * definition is unchanged on failure. */
static int fx_def_push(fx_model_def *d, fx_def_layer *l, const char *name, const char *in0,
                       const char *in1, const char *func)
{
    if (!d) return DEF_FAIL(FX_EINVAL, "the definition is NULL");
    if (!name) return DEF_FAIL(FX_EINVAL, "the layer name is NULL");
    if (!fx_def_name_ok(name) || !strcmp(name, "input"))
        return DEF_FAIL(FX_ENAME, "layer name '%.64s': use 1 to %d letters, digits, '_', '-' or "
                        "'.' (\"input\" names the network input)", name,
                        FX_MODEL_LAYER_NAME_MAX - 1);
    snprintf(l->name, sizeof l->name, "%s", name);
    if (fx_model_def_find(d, name) >= 0)
        return DEF_FAIL(FX_ENAME, "layer '%s': the name is taken by an earlier layer", name);
    if (d->n >= FX_MODEL_MAX_LAYERS)
        return DEF_FAIL(FX_ERANGE, "layer '%s': a definition has at most %d layers", name,
                        FX_MODEL_MAX_LAYERS);
    const char *ins[2] = {in0, in1};
    l->nin = l->kind == FX_DK_ADD ? 2 : 1;
    l->in[1] = -1;
    for (int j = 0; j < l->nin; j++) {
        if (!ins[j] || !ins[j][0]) {
            if (j == 1) return DEF_FAIL(FX_EINVAL, "layer '%s' (add): no second input", name);
            l->in[j] = d->n - 1; /* the last layer added, or the network input */
            continue;
        }
        l->in[j] = fx_model_def_find(d, ins[j]);
        if (l->in[j] < -1)
            return DEF_FAIL(FX_ENAME, "layer '%s': unknown input '%.64s' (not \"input\" nor an "
                            "earlier layer)", name, ins[j]);
    }
    for (int j = 0; j < l->nin; j++) {
        int k = l->in[j];
        int uses = k >= 0 ? d->layers[k].consumers + (j == 1 && l->in[0] == k) : 0;
        if (k >= 0 && uses >= 2)
            return DEF_FAIL(FX_ESHAPE, "layer '%s': its input '%s' already feeds two layers "
                            "(a layer's output feeds at most two)", name, d->layers[k].name);
    }
    int rc = fx_def_shape(d, l, func);
    if (rc) return rc;
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 16;
        fx_def_layer *g = realloc(d->layers, (size_t)cap * sizeof *g);
        if (!g) return DEF_FAIL(FX_ENOMEM, "out of memory");
        d->layers = g;
        d->cap = cap;
    }
    for (int j = 0; j < l->nin; j++)
        if (l->in[j] >= 0) d->layers[l->in[j]].consumers++;
    l->consumers = 0;
    d->layers[d->n++] = *l;
    return FX_OK;
}

static fx_def_layer fx_def_blank(fx_def_kind kind)
{
    fx_def_layer l;
    memset(&l, 0, sizeof l);
    l.kind = kind;
    return l;
}

int fx_model_def_linear(fx_model_def *d, const char *name, const char *input,
                        int64_t out_features)
{
    fx_def_layer l = fx_def_blank(FX_DK_LINEAR);
    l.out = out_features;
    return fx_def_push(d, &l, name, input, NULL, __func__);
}

int fx_model_def_conv2d(fx_model_def *d, const char *name, const char *input,
                        int64_t out_channels, int kernel, int stride, int pad, int bias)
{
    if (bias != 0 && bias != 1)
        return FX_FAIL(FX_EINVAL, "layer '%.64s' (conv2d): bias %d must be 0 or 1",
                       name ? name : "?", bias);
    fx_def_layer l = fx_def_blank(FX_DK_CONV);
    l.out = out_channels;
    l.k = kernel;
    l.stride = stride;
    l.pad = pad;
    l.bias = bias;
    return fx_def_push(d, &l, name, input, NULL, __func__);
}

int fx_model_def_batchnorm(fx_model_def *d, const char *name, const char *input)
{
    fx_def_layer l = fx_def_blank(FX_DK_BN);
    return fx_def_push(d, &l, name, input, NULL, __func__);
}

int fx_model_def_activation(fx_model_def *d, const char *fn, const char *name,
                            const char *input)
{
    if (!fn) return FX_FAIL(FX_EINVAL, "the activation is NULL");
    fx_def_layer l = fx_def_blank(FX_DK_RELU);
    if (strcmp(fn, "relu")) {
        int i = 0;
        while (i < FX_N_UNARY && strcmp(fn, fx_unary_fns[i])) i++;
        if (i == FX_N_UNARY)
            return FX_FAIL(FX_ENAME, "layer '%.64s': unknown activation '%.32s' (relu, tanh, "
                           "sigmoid, gelu, gelu_tanh, silu)", name ? name : "?", fn);
        l.kind = FX_DK_UNARY;
        snprintf(l.fn, sizeof l.fn, "%s", fx_unary_fns[i]);
    }
    return fx_def_push(d, &l, name, input, NULL, __func__);
}

int fx_model_def_pool2d(fx_model_def *d, const char *kind, const char *name, const char *input,
                        int kernel, int stride, int pad)
{
    if (!kind) return FX_FAIL(FX_EINVAL, "the pooling kind is NULL");
    fx_def_layer l = fx_def_blank(FX_DK_MAXPOOL);
    if (!strcmp(kind, "avgpool2d")) l.kind = FX_DK_AVGPOOL;
    else if (strcmp(kind, "maxpool2d"))
        return FX_FAIL(FX_ENAME, "layer '%.64s': unknown pooling '%.32s' (maxpool2d, avgpool2d)",
                       name ? name : "?", kind);
    l.k = kernel;
    l.stride = stride;
    l.pad = pad;
    return fx_def_push(d, &l, name, input, NULL, __func__);
}

int fx_model_def_global_avgpool(fx_model_def *d, const char *name, const char *input)
{
    fx_def_layer l = fx_def_blank(FX_DK_GAP);
    return fx_def_push(d, &l, name, input, NULL, __func__);
}

int fx_model_def_add(fx_model_def *d, const char *name, const char *a, const char *b)
{
    if (!b || !b[0])
        return FX_FAIL(FX_EINVAL, "layer '%.64s' (add): the second input is not named",
                       name ? name : "?");
    fx_def_layer l = fx_def_blank(FX_DK_ADD);
    return fx_def_push(d, &l, name, a, b, __func__);
}

int fx_model_def_flatten(fx_model_def *d, const char *name, const char *input)
{
    fx_def_layer l = fx_def_blank(FX_DK_FLATTEN);
    return fx_def_push(d, &l, name, input, NULL, __func__);
}

int fx_model_def_dropout(fx_model_def *d, const char *name, const char *input, double p)
{
    fx_def_layer l = fx_def_blank(FX_DK_DROPOUT);
    l.p = p;
    return fx_def_push(d, &l, name, input, NULL, __func__);
}

int fx_model_def_embedding(fx_model_def *d, const char *name, const char *input,
                           int64_t vocab, int64_t dim)
{
    fx_def_layer l = fx_def_blank(FX_DK_EMBED);
    l.vocab = vocab;
    l.out = dim;
    return fx_def_push(d, &l, name, input, NULL, __func__);
}

int fx_model_def_layernorm(fx_model_def *d, const char *name, const char *input)
{
    fx_def_layer l = fx_def_blank(FX_DK_LN);
    return fx_def_push(d, &l, name, input, NULL, __func__);
}

int fx_model_def_attention(fx_model_def *d, const char *name, const char *input, int heads)
{
    fx_def_layer l = fx_def_blank(FX_DK_ATTN);
    l.heads = heads;
    return fx_def_push(d, &l, name, input, NULL, __func__);
}

int fx_model_def_token_linear(fx_model_def *d, const char *name, const char *input,
                              int64_t out_features)
{
    fx_def_layer l = fx_def_blank(FX_DK_TLINEAR);
    l.out = out_features;
    return fx_def_push(d, &l, name, input, NULL, __func__);
}

int fx_model_def_layer_count(const fx_model_def *d)
{
    if (!d) return FX_FAIL(FX_EINVAL, "the definition is NULL");
    return d->n;
}

int fx_model_def_shape(const fx_model_def *d, const char *layer, int *ndim,
                       int64_t shape[FX_MODEL_MAX_RANK])
{
    if (!d || !ndim || !shape) return FX_FAIL(FX_EINVAL, "NULL argument");
    int idx = d->n - 1;
    if (!layer && d->n == 0) return FX_FAIL(FX_ESTATE, "the definition has no layer yet");
    if (layer && (idx = fx_model_def_find(d, layer)) < -1)
        return FX_FAIL(FX_ENAME, "no layer named '%.64s'", layer);
    int nd;
    const int64_t *s;
    fx_def_in_shape(d, idx, &nd, &s);
    memset(shape, 0, FX_MODEL_MAX_RANK * sizeof *shape);
    memcpy(shape, s, (size_t)nd * sizeof *s);
    *ndim = nd;
    return FX_OK;
}

/* ---------------------------------------------------------------- canonical text ---------- */

typedef struct fx_text {
    char *buf;
    size_t cap, len;
} fx_text;

static void fx_text_put(fx_text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = t->len < t->cap ? t->cap - t->len : 0;
    int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) t->len += (size_t)n;
}

/* The canonical text; with_name 0 leaves out the `model` line (the identity's text). */
static void fx_def_text(const fx_model_def *d, fx_text *t, int with_name)
{
    if (with_name) fx_text_put(t, "model %s\n", d->name);
    fx_text_put(t, "input shape=");
    for (int i = 0; i < d->in_ndim; i++)
        fx_text_put(t, "%s%" PRId64, i ? "," : "", d->in_shape[i]);
    fx_text_put(t, "\n");
    for (int i = 0; i < d->n; i++) {
        const fx_def_layer *l = &d->layers[i];
        fx_text_put(t, "%s %s", fx_def_kind_name(l), l->name);
        switch (l->kind) {
        case FX_DK_LINEAR: fx_text_put(t, " out=%" PRId64, l->out); break;
        case FX_DK_CONV:
            fx_text_put(t, " out=%" PRId64 " kernel=%d stride=%d pad=%d bias=%d", l->out, l->k,
                        l->stride, l->pad, l->bias);
            break;
        case FX_DK_MAXPOOL:
        case FX_DK_AVGPOOL:
            fx_text_put(t, " kernel=%d stride=%d pad=%d", l->k, l->stride, l->pad);
            break;
        case FX_DK_DROPOUT: fx_text_put(t, " p=%.17g", l->p); break;
        case FX_DK_EMBED:
            fx_text_put(t, " vocab=%" PRId64 " dim=%" PRId64, l->vocab, l->out);
            break;
        case FX_DK_ATTN: fx_text_put(t, " heads=%d", l->heads); break;
        case FX_DK_TLINEAR: fx_text_put(t, " out=%" PRId64, l->out); break;
        default: break;
        }
        for (int j = 0; j < l->nin; j++)
            fx_text_put(t, "%s%s", j ? "," : " in=",
                        l->in[j] < 0 ? "input" : d->layers[l->in[j]].name);
        fx_text_put(t, "\n");
    }
}

int fx_model_def_to_text(const fx_model_def *d, char *buf, size_t cap, size_t *len)
{
    if (!d) return FX_FAIL(FX_EINVAL, "the definition is NULL");
    if (!buf) cap = 0;
    fx_text t = {buf, cap, 0};
    fx_def_text(d, &t, 1);
    if (len) *len = t.len;
    if (t.len >= cap)
        return FX_FAIL(FX_ERANGE, "the text needs %zu bytes, the buffer has %zu", t.len + 1,
                       cap);
    return FX_OK;
}

int fx_model_def_identity(const fx_model_def *d, char id[FX_MODEL_ID_SIZE])
{
    if (!d || !id) return FX_FAIL(FX_EINVAL, "NULL argument");
    fx_text probe = {NULL, 0, 0};
    fx_def_text(d, &probe, 0);
    char *buf = malloc(probe.len + 1);
    if (!buf) return FX_FAIL(FX_ENOMEM, "out of memory");
    fx_text t = {buf, probe.len + 1, 0};
    fx_def_text(d, &t, 0);
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (size_t i = 0; i < t.len; i++) h = (h ^ (unsigned char)buf[i]) * 0x100000001b3ULL;
    free(buf);
    /* 56 bits: "@" and 14 digits fill fx_train_config.model with its NUL */
    snprintf(id, FX_MODEL_ID_SIZE, "@%014" PRIx64, h >> 8);
    return FX_OK;
}

/* ---------------------------------------------------------------- built-ins --------------- */

/* mlp<W>x<D>: D hidden linear layers of width W with ReLU, then the classifier (fc1..fc<D+1>;
 * "mlp" is mlp256x2). */
static int fx_def_mlp(fx_model_def *d, const fx_model_spec *s, int classes)
{
    char n[32], r[32];
    for (int i = 1; i <= s->depth; i++) {
        snprintf(n, sizeof n, "fc%d", i);
        snprintf(r, sizeof r, "relu%d", i);
        int rc = fx_model_def_linear(d, n, NULL, s->width);
        if (!rc) rc = fx_model_def_activation(d, "relu", r, NULL);
        if (rc) return rc;
    }
    snprintf(n, sizeof n, "fc%d", s->depth + 1);
    return fx_model_def_linear(d, n, NULL, classes);
}

/* cnn<C1>-<C2>-<F>: two 5x5 convolutions (padding 2) each with ReLU and 2x2 max pooling, a
 * hidden linear layer of width F, the classifier ("cnn" is cnn32-64-128). */
static int fx_def_cnn(fx_model_def *d, const fx_model_spec *s, int classes)
{
    int rc = fx_model_def_conv2d(d, "conv1", NULL, s->c1, 5, 1, 2, 1);
    if (!rc) rc = fx_model_def_activation(d, "relu", "relu1", NULL);
    if (!rc) rc = fx_model_def_pool2d(d, "maxpool2d", "pool1", NULL, 2, 2, 0);
    if (!rc) rc = fx_model_def_conv2d(d, "conv2", NULL, s->c2, 5, 1, 2, 1);
    if (!rc) rc = fx_model_def_activation(d, "relu", "relu2", NULL);
    if (!rc) rc = fx_model_def_pool2d(d, "maxpool2d", "pool2", NULL, 2, 2, 0);
    if (!rc) rc = fx_model_def_linear(d, "fc1", NULL, s->width);
    if (!rc) rc = fx_model_def_activation(d, "relu", "relu3", NULL);
    if (!rc) rc = fx_model_def_linear(d, "fc2", NULL, classes);
    return rc;
}

/* CIFAR ResNet (He et al. 2016) of depth 6n+2: 3 stages x n basic blocks, 16K/32K/64K channels;
 * the downsampling shortcut is a 1x1 convolution with batch norm (option B). resnet20 is n = 3,
 * K = 1; the Flexpoint paper trained resnet110 (n = 18). */
static int fx_def_resnet(fx_model_def *d, const fx_model_spec *sp, int classes)
{
    const int64_t K = sp->widen, ch[3] = {16 * K, 32 * K, 64 * K};
    int rc = fx_model_def_conv2d(d, "conv0", NULL, ch[0], 3, 1, 1, 0);
    if (!rc) rc = fx_model_def_batchnorm(d, "bn0", NULL);
    if (!rc) rc = fx_model_def_activation(d, "relu", "relu0", NULL);
    char in[32] = "relu0", n[32], main_path[32], shortcut[32];
    for (int s = 0; s < 3 && !rc; s++)
        for (int b = 0; b < sp->blocks && !rc; b++) {
            const int stride = (s > 0 && b == 0) ? 2 : 1;
#define BLK(suffix) (snprintf(n, sizeof n, "s%db%d.%s", s + 1, b + 1, suffix), n)
            rc = fx_model_def_conv2d(d, BLK("conv1"), in, ch[s], 3, stride, 1, 0);
            if (!rc) rc = fx_model_def_batchnorm(d, BLK("bn1"), NULL);
            if (!rc) rc = fx_model_def_activation(d, "relu", BLK("relu1"), NULL);
            if (!rc) rc = fx_model_def_conv2d(d, BLK("conv2"), NULL, ch[s], 3, 1, 1, 0);
            if (!rc) rc = fx_model_def_batchnorm(d, BLK("bn2"), NULL);
            snprintf(main_path, sizeof main_path, "%s", n);
            snprintf(shortcut, sizeof shortcut, "%s", in);
            if (!rc && stride != 1) {
                rc = fx_model_def_conv2d(d, BLK("down"), in, ch[s], 1, stride, 0, 0);
                if (!rc) rc = fx_model_def_batchnorm(d, BLK("downbn"), NULL);
                snprintf(shortcut, sizeof shortcut, "%s", n);
            }
            if (!rc) rc = fx_model_def_add(d, BLK("add"), main_path, shortcut);
            if (!rc) rc = fx_model_def_activation(d, "relu", BLK("relu"), NULL);
            snprintf(in, sizeof in, "%s", n);
#undef BLK
        }
    if (!rc) rc = fx_model_def_global_avgpool(d, "gap", NULL);
    if (!rc) rc = fx_model_def_linear(d, "fc", NULL, classes);
    return rc;
}

/* gpt<L>x<D>h<H>c<T>: a character-level decoder-only transformer (GPT-2's pre-norm block
 * layout) over a vocabulary of `vocab` tokens: token and position embedding "emb", then L
 * blocks b<i> of
 *     b<i>.ln1 -> b<i>.attn (H causal heads) -> b<i>.res1 = b<i>.attn + the block's input
 *     b<i>.ln2 -> b<i>.fc (4D) -> b<i>.gelu -> b<i>.proj (D) -> b<i>.res2 = b<i>.proj + b<i>.res1
 * and a final layer norm "lnf" before the per-position classifier "head". The dotted names let
 * a format policy pick a kind of layer in every block ("b*.attn"). "transformer" is
 * gpt4x128h4c128. */
static int fx_def_gpt(fx_model_def *d, const fx_model_spec *sp, int vocab)
{
    int rc = fx_model_def_embedding(d, "emb", NULL, vocab, sp->width);
    char in[32] = "emb", n[32], res1[32];
    for (int b = 1; b <= sp->depth && !rc; b++) {
#define BLK(suffix) (snprintf(n, sizeof n, "b%d.%s", b, suffix), n)
        rc = fx_model_def_layernorm(d, BLK("ln1"), in);
        if (!rc) rc = fx_model_def_attention(d, BLK("attn"), NULL, sp->heads);
        if (!rc) rc = fx_model_def_add(d, BLK("res1"), NULL, in);
        snprintf(res1, sizeof res1, "%s", n);
        if (!rc) rc = fx_model_def_layernorm(d, BLK("ln2"), NULL);
        if (!rc) rc = fx_model_def_token_linear(d, BLK("fc"), NULL, 4 * (int64_t)sp->width);
        if (!rc) rc = fx_model_def_activation(d, "gelu", BLK("gelu"), NULL);
        if (!rc) rc = fx_model_def_token_linear(d, BLK("proj"), NULL, sp->width);
        if (!rc) rc = fx_model_def_add(d, BLK("res2"), NULL, res1);
        snprintf(in, sizeof in, "%s", n);
#undef BLK
    }
    if (!rc) rc = fx_model_def_layernorm(d, "lnf", NULL);
    if (!rc) rc = fx_model_def_token_linear(d, "head", NULL, vocab);
    return rc;
}

int fx_model_def_builtin(const char *name, int C, int H, int W, int classes, fx_model_def **out)
{
    if (out) *out = NULL;
    if (!name || !out) return FX_FAIL(FX_EINVAL, "NULL argument");
    fx_model_spec spec;
    int rc = fx_model_parse(name, &spec, __func__);
    if (rc) return rc;
    if (spec.kind == FX_MODEL_DEF)
        return FX_FAIL(FX_ENAME, "'%.16s' is a model definition's identity, not a built-in "
                       "name", name);
    if (C < 1 || H < 1 || W < 1 || classes < 1)
        return FX_FAIL(FX_ESHAPE, "images %dx%dx%d with %d classes: every size must be >= 1", C,
                       H, W, classes);
    if ((spec.kind == FX_MODEL_CNN || spec.kind == FX_MODEL_RESNET) && (H % 4 || W % 4))
        return FX_FAIL(FX_ESHAPE, "%.16s needs H and W divisible by 4 (got %dx%d)", name, H, W);
    /* a transformer's input is a window of token numbers: C x H x W must be its context (a
     * text dataset gives 1 x 1 x T), and the classes are the vocabulary */
    if (spec.kind == FX_MODEL_GPT && (int64_t)C * H * W != spec.context)
        return FX_FAIL(FX_ESHAPE, "%.16s reads windows of %d tokens, but the input holds %dx%dx%d "
                       "values (a text dataset's context must be the model's)", name,
                       spec.context, C, H, W);
    fx_model_def *d = NULL;
    int64_t shape[3] = {C, H, W};
    char dn[FX_MODEL_LAYER_NAME_MAX];
    snprintf(dn, sizeof dn, "%.16s", name);
    if (spec.kind == FX_MODEL_GPT) {
        shape[0] = spec.context;
        rc = fx_model_def_new(dn, 1, shape, &d);
    } else {
        rc = fx_model_def_new(dn, 3, shape, &d);
    }
    if (rc) return rc;
    if (spec.kind == FX_MODEL_MLP) rc = fx_def_mlp(d, &spec, classes);
    else if (spec.kind == FX_MODEL_GPT) rc = fx_def_gpt(d, &spec, classes);
    else if (spec.kind == FX_MODEL_CNN) rc = fx_def_cnn(d, &spec, classes);
    else rc = fx_def_resnet(d, &spec, classes);
    if (rc) {
        fx_model_def_free(d);
        return rc;
    }
    *out = d;
    return FX_OK;
}
