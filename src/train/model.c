/* Model builders (the MLP, CNN and ResNet families) and the layer list's forward and backward.
 * Every GEMM/conv operand (weights, activations, gradients) is in the run's format; batch
 * norm parameters and statistics are fp32 (docs/experiments.md). */
#define _POSIX_C_SOURCE 200809L
#include "model.h"
#include "placement.h"
#include "flexpoint_gpu.h"
#include "../nn/pool_own.h"
#include "../nn/nn_ops.h" /* fx_conv2d_shared_bias_relu */
#include "../core/shared_binary.h" /* fx_shared_add_relu */
#include "../core/half_binary.h"   /* fx_half_add_relu, fx_half_gated_add */
#include "../core/dispatch.h"      /* fx_matmul_bias */
#include "../dist/distributed.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- building ---------------- */

static int fx_add_param(fx_model *m, const char *name, fmt_t fmt, fmt_t gfmt, int ndim,
                        const int64_t *shape, int fan_in, int decay)
{
    if (m->nparams == m->pcap) {
        int cap = m->pcap ? 2 * m->pcap : 32;
        fx_param *p = realloc(m->params, (size_t)cap * sizeof *p);
        if (!p) return FX_FAIL(FX_ENOMEM, "out of memory");
        m->params = p;
        m->pcap = cap;
    }
    fx_param *p = &m->params[m->nparams];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    /* counted at once, so that fx_model_free releases whatever part was allocated */
    m->nparams++;
    p->w = fx_place_tensor(m, fmt, ndim, shape, m->cfg.weight_window_lo);
    p->g = fx_place_tensor(m, gfmt, ndim, shape, m->cfg.grad_window_lo);
    if (!p->w || !p->g) return flexpoint_last_status() ? flexpoint_last_status() : FX_ENOMEM;
    p->n = tensor_numel(p->w);
    p->fan_in = fan_in;
    p->decay = decay;
    int rc = fx_place_zeros(m, (void **)&p->mom, p->n, sizeof(float));
    if (!rc && m->cfg.optimizer != FX_OPT_SGD)
        rc = fx_place_zeros(m, (void **)&p->var, p->n, sizeof(float));
    if (!rc) rc = fx_place_zeros(m, (void **)&p->unscaled, p->n, sizeof(float));
    if (rc) return rc;
    return m->nparams - 1;
}

/* The formats of a new layer's tensors from the policy (the run's format without one). */
static void fx_layer_formats(fx_model *m, fx_layer *l)
{
    const int run = m->cfg.fmt,
              compute = l->kind == FX_L_CONV || l->kind == FX_L_LINEAR ||
                        l->kind == FX_L_TLINEAR || l->kind == FX_L_ATTN || l->kind == FX_L_EMBED;
    const int first = compute && !m->seen_compute, last = m->adding_last;
    fx_policy *p = &m->policy;
    l->fw = fx_policy_format(p, l->name, (int)l->kind, first, last, FX_PC_WEIGHTS, run);
    l->fb = fx_policy_format(p, l->name, (int)l->kind, first, last, FX_PC_BIASES, run);
    l->fa = fx_policy_format(p, l->name, (int)l->kind, first, last, FX_PC_ACTS, run);
    l->fdx = fx_policy_format(p, l->name, (int)l->kind, first, last, FX_PC_DACTS, run);
    l->fdw = fx_policy_format(p, l->name, (int)l->kind, first, last, FX_PC_DWEIGHTS, run);
    if (compute) m->seen_compute = 1;
}

/* The format of layer idx's output (idx < 0: the network input). */
static int fx_out_fmt(const fx_model *m, int idx)
{
    return idx < 0 ? m->in_fmt : m->layers[idx].fa;
}

static fx_layer *fx_add_layer(fx_model *m, fx_layer_kind kind, const char *name, int in0, int in1)
{
    if (m->nlayers == m->cap) {
        int cap = m->cap ? 2 * m->cap : 32;
        fx_layer *l = realloc(m->layers, (size_t)cap * sizeof *l);
        if (!l) return NULL;
        m->layers = l;
        m->cap = cap;
    }
    fx_layer *l = &m->layers[m->nlayers++];
    memset(l, 0, sizeof *l);
    l->kind = kind;
    snprintf(l->name, sizeof l->name, "%s", name);
    fx_layer_formats(m, l);
    l->in[0] = in0;
    l->in[1] = in1;
    l->nin = in1 == -2 ? 1 : 2;
    l->w = l->b = -1;
    return l;
}

static const int64_t *fx_in_shape(const fx_model *m, int idx, int *ndim)
{
    if (idx < 0) {
        *ndim = m->in_ndim;
        return m->in_shape;
    }
    *ndim = m->layers[idx].ndim;
    return m->layers[idx].shape;
}

/* A copy of the input shape: adding a layer may move the layer array. */
static void fx_in_shape_copy(const fx_model *m, int idx, int *ndim,
                             int64_t out[FX_LAYER_MAX_DIMS])
{
    memcpy(out, fx_in_shape(m, idx, ndim), FX_LAYER_MAX_DIMS * sizeof(int64_t));
}

#define LAST(m) ((m)->nlayers - 1)

/* The input of a conv/linear layer `name` in its weights' format: `in` itself, or a cast layer
 * "<name>.cast" inserted after it when a policy gave in's output another format (a write into
 * the new format, choosing its exponent; its backward writes the gradient back into in's
 * format). The network input takes the format of the first layer that reads it. */
static int fx_cast_input(fx_model *m, const char *name, fx_layer_kind kind, int in)
{
    const int first = !m->seen_compute;
    const int fw = fx_policy_format(&m->policy, name, (int)kind, first, m->adding_last,
                                    FX_PC_WEIGHTS, m->cfg.fmt);
    if (in < 0 && m->in_fmt < 0) m->in_fmt = fw;
    const int from = fx_out_fmt(m, in);
    if (from == fw) return in;
    char cn[48];
    snprintf(cn, sizeof cn, "%s.cast", name);
    if (strlen(cn) >= sizeof m->layers[0].name)
        return FX_FAIL(FX_ENAME, "layer name '%s.cast' is too long", name);
    int nd;
    int64_t is[FX_LAYER_MAX_DIMS];
    fx_in_shape_copy(m, in, &nd, is);
    fx_layer *l = fx_add_layer(m, FX_L_CAST, cn, in, -2);
    if (!l) return FX_FAIL(FX_ENOMEM, "out of memory");
    l->ndim = nd;
    memcpy(l->shape, is, sizeof l->shape);
    l->fa = fw;
    l->fdx = from;
    m->ncasts++;
    return LAST(m);
}

static int fx_conv(fx_model *m, const char *name, int in, int out_ch, int k, int stride, int pad,
                   int bias)
{
    in = fx_cast_input(m, name, FX_L_CONV, in);
    if (in < -1) return in;
    int nd;
    int64_t is[FX_LAYER_MAX_DIMS];
    fx_in_shape_copy(m, in, &nd, is);
    fx_layer *l = fx_add_layer(m, FX_L_CONV, name, in, -2);
    if (!l) return FX_FAIL(FX_ENOMEM, "out of memory");
    l->k = k;
    l->stride = stride;
    l->pad = pad;
    l->ndim = 4;
    l->shape[0] = is[0];
    l->shape[1] = out_ch;
    l->shape[2] = (is[2] + 2 * pad - k) / stride + 1;
    l->shape[3] = (is[3] + 2 * pad - k) / stride + 1;
    char pn[48];
    int64_t ws[4] = {out_ch, is[1], k, k};
    int fan_in = (int)(is[1] * k * k);
    snprintf(pn, sizeof pn, "%s.w", name);
    int li = LAST(m);
    int w = fx_add_param(m, pn, (fmt_t)m->layers[li].fw, (fmt_t)m->layers[li].fdw, 4, ws,
                         fan_in, 1);
    if (w < 0) return w;
    m->layers[li].w = w;
    if (bias) {
        int64_t bs[3] = {out_ch, 1, 1};
        snprintf(pn, sizeof pn, "%s.b", name);
        int b = fx_add_param(m, pn, (fmt_t)m->layers[li].fb, (fmt_t)m->layers[li].fdw, 3, bs,
                             fan_in, 0);
        if (b < 0) return b;
        m->layers[li].b = b;
    }
    return li;
}

static int fx_linear(fx_model *m, const char *name, int in, int out_f)
{
    in = fx_cast_input(m, name, FX_L_LINEAR, in);
    if (in < -1) return in;
    int nd;
    int64_t is[FX_LAYER_MAX_DIMS];
    fx_in_shape_copy(m, in, &nd, is);
    int64_t in_f = 1;
    for (int d = 1; d < nd; d++) in_f *= is[d];
    fx_layer *l = fx_add_layer(m, FX_L_LINEAR, name, in, -2);
    if (!l) return FX_FAIL(FX_ENOMEM, "out of memory");
    l->ndim = 2;
    l->shape[0] = is[0];
    l->shape[1] = out_f;
    int li = LAST(m);
    char pn[48];
    int64_t ws[2] = {out_f, in_f}, bs[1] = {out_f};
    snprintf(pn, sizeof pn, "%s.w", name);
    int w = fx_add_param(m, pn, (fmt_t)m->layers[li].fw, (fmt_t)m->layers[li].fdw, 2, ws,
                         (int)in_f, 1);
    if (w < 0) return w;
    snprintf(pn, sizeof pn, "%s.b", name);
    int b = fx_add_param(m, pn, (fmt_t)m->layers[li].fb, (fmt_t)m->layers[li].fdw, 1, bs,
                         (int)in_f, 0);
    if (b < 0) return b;
    m->layers[li].w = w;
    m->layers[li].b = b;
    return li;
}

static int fx_simple(fx_model *m, fx_layer_kind kind, const char *name, int in)
{
    int nd;
    int64_t is[FX_LAYER_MAX_DIMS];
    fx_in_shape_copy(m, in, &nd, is);
    fx_layer *l = fx_add_layer(m, kind, name, in, -2);
    if (!l) return FX_FAIL(FX_ENOMEM, "out of memory");
    /* the input's shape; fx_build_def_layer then sets the definition's (pooling, flatten) */
    l->ndim = nd;
    memcpy(l->shape, is, sizeof l->shape);
    return LAST(m);
}

static int fx_bn(fx_model *m, const char *name, int in)
{
    int li = fx_simple(m, FX_L_BN, name, in);
    if (li < 0) return li;
    int64_t C = m->layers[li].shape[1];
    char pn[48];
    int64_t s[1] = {C};
    snprintf(pn, sizeof pn, "%s.gamma", name);
    int g = fx_add_param(m, pn, FMT_FP32, FMT_FP32, 1, s, 0, 0);
    if (g < 0) return g;
    snprintf(pn, sizeof pn, "%s.beta", name);
    int b = fx_add_param(m, pn, FMT_FP32, FMT_FP32, 1, s, 0, 0);
    if (b < 0) return b;
    fx_layer *l = &m->layers[li];
    l->w = g;
    l->b = b;
    l->channels = C;
    l->run_mean = calloc((size_t)C, sizeof(float));
    l->run_var = malloc((size_t)C * sizeof(float));
    l->save_mean = calloc((size_t)C, sizeof(float));
    l->save_invstd = calloc((size_t)C, sizeof(float));
    if (!l->run_mean || !l->run_var || !l->save_mean || !l->save_invstd)
        return FX_FAIL(FX_ENOMEM, "out of memory");
    for (int64_t c = 0; c < C; c++) l->run_var[c] = 1.0f;
    return li;
}

static int fx_add(fx_model *m, const char *name, int a, int b)
{
    int nd;
    int64_t is[FX_LAYER_MAX_DIMS];
    fx_in_shape_copy(m, a, &nd, is);
    fx_layer *l = fx_add_layer(m, FX_L_ADD, name, a, b);
    if (!l) return FX_FAIL(FX_ENOMEM, "out of memory");
    l->ndim = nd;
    memcpy(l->shape, is, sizeof l->shape);
    return LAST(m);
}

/* Sequence-model layers. Parameters in a fixed order per layer; fan_in keys the initial
 * bound (1/sqrt(fan_in)); layer-norm parameters are fp32 (named .gamma/.beta: 1 and 0). */
static int fx_param_of(fx_model *m, int li, const char *name, const char *suffix, int ndim,
                       const int64_t *shape, int fan_in, int decay)
{
    char pn[48];
    snprintf(pn, sizeof pn, "%s.%s", name, suffix);
    return fx_add_param(m, pn, (fmt_t)m->layers[li].fw, (fmt_t)m->layers[li].fdw, ndim, shape,
                        fan_in, decay);
}

static int fx_embed(fx_model *m, const char *name, int64_t vocab, int64_t dim)
{
    if (m->in_fmt < 0) m->in_fmt = m->cfg.fmt; /* the token numbers are not read as values */
    fx_layer *l = fx_add_layer(m, FX_L_EMBED, name, -1, -2);
    if (!l) return FX_FAIL(FX_ENOMEM, "out of memory");
    const int li = LAST(m);
    const int64_t T = m->in_shape[1], ts[2] = {vocab, dim}, ps[2] = {T, dim};
    l->shape[0] = m->in_shape[0]; /* the batch; fx_build_def_layer sets the rest */
    int w = fx_param_of(m, li, name, "tok", 2, ts, (int)dim, 0);
    if (w < 0) return w;
    int b = fx_param_of(m, li, name, "pos", 2, ps, (int)dim, 0);
    if (b < 0) return b;
    m->layers[li].w = w;
    m->layers[li].b = b;
    return li;
}

static int fx_ln(fx_model *m, const char *name, int in)
{
    int li = fx_simple(m, FX_L_LN, name, in);
    if (li < 0) return li;
    fx_layer *l = &m->layers[li];
    int64_t s[1] = {l->shape[l->ndim - 1]};
    char pn[48];
    snprintf(pn, sizeof pn, "%s.gamma", name);
    int g = fx_add_param(m, pn, FMT_FP32, FMT_FP32, 1, s, 0, 0);
    if (g < 0) return g;
    snprintf(pn, sizeof pn, "%s.beta", name);
    int b = fx_add_param(m, pn, FMT_FP32, FMT_FP32, 1, s, 0, 0);
    if (b < 0) return b;
    m->layers[li].w = g;
    m->layers[li].b = b;
    m->layers[li].channels = s[0];
    return li;
}

/* A GEMM layer whose output has its input's shape (attention, per-token linear before its
 * width is set): the policy's cast in front of it, then the layer. */
static int fx_gemm_same_shape(fx_model *m, fx_layer_kind kind, const char *name, int in)
{
    in = fx_cast_input(m, name, kind, in);
    return in < -1 ? in : fx_simple(m, kind, name, in);
}

static int fx_attn(fx_model *m, const char *name, int in, int heads)
{
    int li = fx_gemm_same_shape(m, FX_L_ATTN, name, in);
    if (li < 0) return li;
    const int64_t D = m->layers[li].shape[2], ws[2] = {D, D};
    static const char *const names[4] = {"wq", "wk", "wv", "wo"};
    for (int j = 0; j < 4; j++) {
        int w = fx_param_of(m, li, name, names[j], 2, ws, (int)D, 1);
        if (w < 0) return w;
        if (j == 0) m->layers[li].w = w;
    }
    m->layers[li].heads = heads;
    return li;
}

static int fx_tlinear(fx_model *m, const char *name, int in, int64_t out_f)
{
    int li = fx_gemm_same_shape(m, FX_L_TLINEAR, name, in);
    if (li < 0) return li;
    const int64_t F = m->layers[li].shape[2], ws[2] = {out_f, F}, bs[1] = {out_f};
    int w = fx_param_of(m, li, name, "w", 2, ws, (int)F, 1);
    if (w < 0) return w;
    fx_layer *l = &m->layers[li];
    l->w = w;
    char pn[48];
    snprintf(pn, sizeof pn, "%s.b", name);
    int b = fx_add_param(m, pn, (fmt_t)m->layers[li].fb, (fmt_t)m->layers[li].fdw, 1, bs,
                         (int)F, 0);
    if (b < 0) return b;
    m->layers[li].b = b;
    return li;
}

/* Layer i of definition d, reading the model layers that map[] gives for d's layers (a
 * policy's casts make the model's indices differ from the definition's). Parameters are added
 * in the definition's order, which keys their initial values (fx_init_params). */
static int fx_build_def_layer(fx_model *m, const fx_model_def *d, int i, const int *map)
{
    const fx_def_layer *dl = &d->layers[i];
    const int in0 = dl->in[0] < 0 ? -1 : map[dl->in[0]];
    int li;
    switch (dl->kind) {
    case FX_DK_LINEAR: li = fx_linear(m, dl->name, in0, (int)dl->out); break;
    case FX_DK_CONV:
        li = fx_conv(m, dl->name, in0, (int)dl->out, dl->k, dl->stride, dl->pad, dl->bias);
        break;
    case FX_DK_BN: li = fx_bn(m, dl->name, in0); break;
    case FX_DK_RELU: li = fx_simple(m, FX_L_RELU, dl->name, in0); break;
    case FX_DK_UNARY: li = fx_simple(m, FX_L_UNARY, dl->name, in0); break;
    case FX_DK_MAXPOOL: li = fx_simple(m, FX_L_MAXPOOL, dl->name, in0); break;
    case FX_DK_AVGPOOL: li = fx_simple(m, FX_L_AVGPOOL, dl->name, in0); break;
    case FX_DK_GAP: li = fx_simple(m, FX_L_GAP, dl->name, in0); break;
    case FX_DK_ADD: li = fx_add(m, dl->name, in0, dl->in[1] < 0 ? -1 : map[dl->in[1]]); break;
    case FX_DK_FLATTEN: li = fx_simple(m, FX_L_FLATTEN, dl->name, in0); break;
    case FX_DK_DROPOUT: li = fx_simple(m, FX_L_DROPOUT, dl->name, in0); break;
    case FX_DK_EMBED: li = fx_embed(m, dl->name, dl->vocab, dl->out); break;
    case FX_DK_LN: li = fx_ln(m, dl->name, in0); break;
    case FX_DK_ATTN: li = fx_attn(m, dl->name, in0, dl->heads); break;
    case FX_DK_TLINEAR: li = fx_tlinear(m, dl->name, in0, dl->out); break;
    default: return FX_FAIL(FX_EINVAL, "layer '%s': unknown kind %d", dl->name, (int)dl->kind);
    }
    if (li < 0) return li;
    fx_layer *l = &m->layers[li];
    if (dl->kind == FX_DK_MAXPOOL || dl->kind == FX_DK_AVGPOOL) {
        l->k = dl->k;
        l->stride = dl->stride;
        l->pad = dl->pad;
    }
    if (dl->kind == FX_DK_UNARY) snprintf(l->fn, sizeof l->fn, "%s", dl->fn);
    if (dl->kind == FX_DK_DROPOUT) l->p = dl->p;
    if (dl->kind == FX_DK_FLATTEN) {
        /* a view of its input: the input's format, whatever a policy says of activations */
        l->fa = fx_out_fmt(m, l->in[0]);
    }
    /* the definition's shape, which was checked when the layer was added */
    l->ndim = dl->ndim + 1;
    memset(l->shape + 1, 0, (FX_LAYER_MAX_DIMS - 1) * sizeof l->shape[0]);
    memcpy(l->shape + 1, dl->shape, (size_t)dl->ndim * sizeof dl->shape[0]);
    return li;
}

/* Every layer of d, the last one as the classifier (a policy's "last layer"). */
static int fx_build_def_layers(fx_model *m, const fx_model_def *d)
{
    int *map = malloc((size_t)d->n * sizeof *map);
    if (!map) return FX_FAIL(FX_ENOMEM, "out of memory");
    int rc = FX_OK;
    for (int i = 0; i < d->n && rc >= 0; i++) {
        m->adding_last = i == d->n - 1; /* the classifier: edges-fp32's last layer */
        rc = fx_build_def_layer(m, d, i, map);
        if (rc >= 0) map[i] = rc;
    }
    m->adding_last = 0;
    free(map);
    return rc < 0 ? rc : FX_OK;
}

int fx_model_flex_setup(const fx_train_config *cfg, tensor_t *t, int window_lo)
{
    if (tensor_fmt(t) != FMT_FLEX16_5) return FX_OK;
    /* t is new (fx_place_host_tensor): zeros, placed without reading them */
    int rc = fx_tensor_set_window_fresh(t, window_lo);
    if (!rc) rc = tensor_set_autoflex(t, cfg->autoflex);
    return rc;
}

/* A device parameter receives the weights the host run starts from: written in the run
 * format on a host tensor with the same window and preset, then copied with its exponent
 * state; the fp32 master copy is uploaded as drawn. */
static int fx_init_param_on_device(fx_model *m, fx_param *p, const float *v, int with_master)
{
    int rc = FX_OK;
    if (with_master) {
        rc = fx_place_zeros(m, (void **)&p->master, p->n, sizeof(float));
        if (!rc) rc = fx_place_upload(m, p->master, v, p->n);
        if (rc) return rc;
    }
    tensor_t *h = fx_place_host_tensor(&m->cfg, tensor_fmt(p->w), tensor_ndim(p->w),
                                       tensor_shape(p->w), m->cfg.weight_window_lo);
    if (!h) return flexpoint_last_status() ? flexpoint_last_status() : FX_ENOMEM;
    rc = tensor_from_f32(h, v);
    if (!rc) rc = tensor_copy_to_device(p->w, h);
    tensor_free(h);
    return rc;
}

/* Initial weights: PyTorch's defaults (uniform in +-1/sqrt(fan_in) for conv and linear
 * weights and biases; batch norm gamma 1, beta 0), drawn in fp32 from the seed with a
 * counter-based generator keyed by the parameter's index, then written in the run format.
 * Drawn on the host for every placement, so a device run starts from the host run's point. */
static int fx_init_params(fx_model *m)
{
    for (int i = 0; i < m->nparams; i++) {
        fx_param *p = &m->params[i];
        float *v = malloc((size_t)p->n * sizeof(float));
        if (!v) return FX_FAIL(FX_ENOMEM, "out of memory");
        bool is_gamma = strstr(p->name, ".gamma") != NULL, is_beta = strstr(p->name, ".beta");
        double bound = p->fan_in > 0 ? 1.0 / sqrt((double)p->fan_in) : 0.0;
        for (int64_t j = 0; j < p->n; j++) {
            double u = fx_rng_unit(m->cfg.seed, 0x1000 + (uint64_t)i, (uint64_t)j);
            v[j] = is_gamma ? 1.0f : (is_beta ? 0.0f : (float)((2.0 * u - 1.0) * bound));
        }
        int with_master = m->cfg.master_weights && tensor_fmt(p->w) != FMT_FP32;
        if (m->device >= 0) {
            int rc = fx_init_param_on_device(m, p, v, with_master);
            free(v);
            if (rc) return rc;
            continue;
        }
        if (with_master) p->master = v;
        int rc = tensor_from_f32(p->w, v);
        if (p->master != v) free(v);
        if (rc) return rc;
    }
    return FX_OK;
}

/* FLEXPOINT_NO_FUSION=1: every fusion below off (to compare) */
static int fx_fusion_off(void)
{
    const char *off = getenv("FLEXPOINT_NO_FUSION");
    return off && off[0] == '1';
}

/* Fuse each convolution whose only consumer is the ReLU right after it, for the float
 * formats: the same bits (tensor_conv2d_bias_relu), two passes over the activation fewer. The
 * shared-exponent formats keep three writes, each with its own Autoflex state (fusing them
 * would change the results), but a convolution's or linear layer's bias add and the ReLU
 * after it make their two writes in one pass (shared_relu: fx_shared_add_relu, the same
 * bits), and so do a residual add and the ReLU after it (a ResNet block's end: one pass over
 * the block's output fewer), and a batch norm and the ReLU after it (fx_batchnorm_shared_relu:
 * the ReLU made from each piece of the normalised rows while it is in cache). The float
 * formats' batch norms and fp16/bf16 residual adds write their ReLU too, and a ReLU with two
 * consumers makes its gradient from theirs in one pass (sum_gated), all with the separate
 * ops' bits. */
static void fx_fuse_conv_relu(fx_model *m)
{
    if (fx_fusion_off()) return;
    for (int i = 0; i + 1 < m->nlayers; i++) {
        fx_layer *c = &m->layers[i], *r = &m->layers[i + 1];
        /* the fused op writes the ReLU's output from the convolution's operands: both outputs
         * in one float format, and the ReLU's gradient in the convolution's */
        if (c->kind == FX_L_CONV && r->kind == FX_L_RELU && r->in[0] == i && c->consumers == 1 &&
            !fmt_is_shared_exponent((fmt_t)c->fa) && c->fa == r->fa && c->fdx == r->fdx)
            c->fused_relu = r->fused_relu = 1;
        /* an fp16/bf16 residual add and its ReLU likewise (fx_half_add_relu); the add keeps its
         * own output for the route that does not take the pair */
        if (c->kind == FX_L_ADD && r->kind == FX_L_RELU && r->in[0] == i && c->consumers == 1 &&
            (c->fa == FMT_FP16 || c->fa == FMT_BF16) && c->fa == r->fa)
            c->fused_relu = r->fused_relu = 1;
        if (c->kind == FX_L_RELU && c->consumers == 2 &&
            (c->fa == FMT_FP16 || c->fa == FMT_BF16 || fmt_is_shared_exponent((fmt_t)c->fa)))
            c->sum_gated = 1;
        /* a float batch norm writes the ReLU after it (fx_batchnorm_relu, the same bits); its
         * own output, never written then, stays for the route that does not take the pair */
        if (c->kind == FX_L_BN && r->kind == FX_L_RELU && r->in[0] == i && c->consumers == 1 &&
            !fmt_is_shared_exponent((fmt_t)c->fa) && c->fa == r->fa)
            c->fused_relu = r->fused_relu = 1;
        if ((((c->kind == FX_L_CONV || c->kind == FX_L_LINEAR) && c->b >= 0) ||
             c->kind == FX_L_ADD || c->kind == FX_L_BN) &&
            r->kind == FX_L_RELU && r->in[0] == i && fmt_is_shared_exponent((fmt_t)c->fa) &&
            fmt_is_shared_exponent((fmt_t)r->fa))
            c->shared_relu = r->shared_relu = 1;
    }
}

/* A ReLU whose only consumer is a max pool with non-overlapping windows right after it, on the
 * host (fx_layer.relu_first; a device keeps the two ops, which no GPU here has run otherwise):
 * the pool's backward applies the ReLU's gate on the pooled values and
 * scatters into the ReLU's input gradient; in FLEX16_5/DFP16 (2x2 windows, one process) both
 * writes made from the pooled values (fx_pool_relu_backward_shared). Both layers' gradients
 * in one format, the same as the ReLU's output, so that no conversion enters between the gate
 * and the scatter. */
static int64_t relu_pool_made; /* test hook: pool backwards that gated first */

int64_t fx_model_relu_pool_made(void) { return __atomic_load_n(&relu_pool_made, __ATOMIC_RELAXED); }

static void fx_fuse_relu_pool(fx_model *m)
{
    if (fx_fusion_off()) return;
    for (int i = 0; i + 1 < m->nlayers; i++) {
        fx_layer *r = &m->layers[i], *p = &m->layers[i + 1];
        const int shared = fmt_is_shared_exponent((fmt_t)r->fa);
        if (r->kind == FX_L_RELU && p->kind == FX_L_MAXPOOL && p->in[0] == i && r->in[0] >= 0 &&
            r->consumers == 1 && !r->sum_gated && p->k == p->stride && p->pad == 0 &&
            r->fa == p->fa && r->fdx == p->fdx && r->fa == r->fdx && m->device < 0 &&
            (!shared || (p->k == 2 && !m->comm)))
            p->relu_first = r->pool_gated = 1;
    }
}

/* The configuration's policy in m->policy, refused as fx_trainer_new's when it cannot apply. */
static int fx_model_policy(fx_model *m, const fx_train_config *cfg)
{
    int rc = fx_policy_parse(cfg->policy, cfg->fmt, &m->policy, "fx_trainer_new");
    if (rc) return rc;
    if (m->policy.no_master && cfg->master_weights)
        return fx_error(FX_EINVAL, "fx_trainer_new", "policy '%s': O3 is pure 16-bit training "
                        "without master weights; set master_weights = 0 (--no-master)",
                        cfg->policy);
    return FX_OK;
}

static void fx_model_reset(fx_model *m, const fx_train_config *cfg, int classes)
{
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->device = cfg->device < 0 ? -1 : cfg->device; /* before any allocation: frees follow it */
    m->classes = classes;
    m->nranks = 1;
}

int fx_model_build(fx_model *m, const fx_train_config *cfg, int C, int H, int W, int classes)
{
    fx_model_reset(m, cfg, classes);
    /* the policy first, as its errors come before the network's */
    int rc = fx_model_policy(m, cfg);
    if (rc) return rc;
    fx_model_def *d = NULL;
    if ((rc = fx_model_def_builtin(cfg->model, C, H, W, classes, &d))) return rc;
    rc = fx_model_build_def(m, cfg, d, C, H, W, classes);
    fx_model_def_free(d);
    return rc;
}

/* Whether d fits images of C x H x W and `classes` classes, and every layer but the last feeds
 * a later one (the backward pass reaches every layer from the loss). */
static int fx_model_def_fits(const fx_model_def *d, int C, int H, int W, int classes)
{
    const char *f = "fx_trainer_new";
    if (d->n == 0) return fx_error(FX_ESHAPE, f, "model '%s' has no layer", d->name);
    int64_t numel = 1;
    for (int i = 0; i < d->in_ndim; i++) numel *= d->in_shape[i];
    if (numel != (int64_t)C * H * W)
        return fx_error(FX_ESHAPE, f, "model '%s' takes inputs of %lld values; the images are "
                        "%dx%dx%d (%lld values)", d->name, (long long)numel, C, H, W,
                        (long long)C * H * W);
    const fx_def_layer *last = &d->layers[d->n - 1];
    if (d->layers[0].kind == FX_DK_EMBED) {
        /* a sequence model: one prediction per position */
        const int64_t T = d->in_shape[0];
        if (d->layers[0].vocab < classes)
            return fx_error(FX_ESHAPE, f, "model '%s': embedding '%s' has %lld rows; the "
                            "dataset has %d tokens", d->name, d->layers[0].name,
                            (long long)d->layers[0].vocab, classes);
        if (last->ndim != 2 || last->shape[0] != T || last->shape[1] != classes)
            return fx_error(FX_ESHAPE, f, "model '%s': its last layer '%s' must give (%lld, %d) "
                            "(a prediction over the %d tokens at each position)", d->name,
                            last->name, (long long)T, classes, classes);
    } else if (last->ndim != 1 || last->shape[0] != classes)
        return fx_error(FX_ESHAPE, f, "model '%s': its last layer '%s' gives %lld value%s of "
                        "rank %d per sample; the loss needs one per class (%d)", d->name,
                        last->name, (long long)last->shape[0], last->shape[0] == 1 ? "" : "s",
                        last->ndim, classes);
    for (int i = 0; i + 1 < d->n; i++)
        if (d->layers[i].consumers == 0)
            return fx_error(FX_ESHAPE, f, "model '%s': layer '%s' feeds no later layer (only "
                            "the last layer may be unused: it gives the logits)", d->name,
                            d->layers[i].name);
    return FX_OK;
}

int fx_model_build_def(fx_model *m, const fx_train_config *cfg, const fx_model_def *def, int C,
                       int H, int W, int classes)
{
    fx_model_reset(m, cfg, classes);
    int rc = fx_model_def_fits(def, C, H, W, classes);
    if (rc) return rc;
    m->in_ndim = def->in_ndim + 1;
    m->in_shape[0] = cfg->batch_size;
    memcpy(m->in_shape + 1, def->in_shape, (size_t)def->in_ndim * sizeof def->in_shape[0]);
    m->in_fmt = -1;
    if (def->layers[0].kind == FX_DK_EMBED) {
        const int64_t T = def->in_shape[0], n = (int64_t)cfg->batch_size * T;
        m->seq = (int)T;
        m->pos_idx = malloc((size_t)n * sizeof *m->pos_idx);
        if (!m->pos_idx) return FX_FAIL(FX_ENOMEM, "out of memory");
        for (int64_t i = 0; i < n; i++) m->pos_idx[i] = (int32_t)(i % T);
    }
    if ((rc = fx_model_policy(m, cfg))) return rc;
    if ((rc = fx_build_def_layers(m, def)) < 0) return rc;
    if (m->in_fmt < 0) m->in_fmt = cfg->fmt;
    char model_name[FX_MODEL_LAYER_NAME_MAX];
    snprintf(model_name, sizeof model_name, "%s", def->name);
    if ((rc = fx_policy_unmatched(&m->policy, model_name, "fx_trainer_new"))) return rc;
    for (int i = 0; i < m->nlayers; i++)
        for (int j = 0; j < m->layers[i].nin; j++)
            if (m->layers[i].in[j] >= 0) m->layers[m->layers[i].in[j]].consumers++;
    fx_fuse_conv_relu(m);
    fx_fuse_relu_pool(m);
    return fx_init_params(m);
}

/* Keep t's host block in m's parked list, if it can be taken and the list can grow */
static void fx_park_block(fx_model *m, tensor_t *t)
{
    if (m->nparked == m->parked_cap) {
        const int cap = m->parked_cap ? 2 * m->parked_cap : 64;
        void **p = realloc(m->parked, (size_t)cap * sizeof *p);
        if (p) m->parked = p;
        size_t *b = p ? realloc(m->parked_bytes, (size_t)cap * sizeof *b) : NULL;
        if (b) m->parked_bytes = b;
        if (!p || !b) return;
        m->parked_cap = cap;
    }
    size_t bytes;
    void *block = fx_tensor_detach_block(t, &bytes);
    if (!block) return;
    m->parked[m->nparked] = block;
    m->parked_bytes[m->nparked++] = bytes;
}

static void fx_free_t(fx_model *m, tensor_t **t)
{
    if (m->parking && *t) fx_park_block(m, *t);
    tensor_free(*t);
    *t = NULL;
}

/* A parked block of exactly t's size, zero-filled, as the storage of t (just created) */
static void fx_unpark_block(fx_model *m, tensor_t *t, int64_t numel, fmt_t fmt)
{
    const size_t bytes = (size_t)(numel ? numel : 1) * fmt_elem_size(fmt);
    for (int i = m->nparked - 1; i >= 0; i--)
        if (m->parked_bytes[i] == bytes) {
            memset(m->parked[i], 0, bytes);
            if (!fx_tensor_attach_block(t, m->parked[i], bytes)) return;
            m->parked[i] = m->parked[m->nparked - 1];
            m->parked_bytes[i] = m->parked_bytes[--m->nparked];
            return;
        }
}

static void fx_release_parked(fx_model *m)
{
    for (int i = 0; i < m->nparked; i++) free(m->parked[i]);
    free(m->parked);
    free(m->parked_bytes);
    m->parked = NULL;
    m->parked_bytes = NULL;
    m->nparked = m->parked_cap = 0;
}

void fx_model_free_ctx(fx_model *m, int ctx)
{
    fx_free_t(m, &m->input[ctx]);
    fx_free_t(m, &m->stage[ctx]);
    free(m->tokens[ctx]);
    m->tokens[ctx] = NULL;
    for (int i = 0; i < m->nlayers; i++) {
        fx_layer *l = &m->layers[i];
        fx_free_t(m, &l->out[ctx]);
        if (l->kind == FX_L_ATTN) l->tmp[ctx] = NULL; /* att[ctx][FX_AT_S], freed below */
        fx_free_t(m, &l->tmp[ctx]);
        for (int j = 0; j < FX_AT_N; j++) fx_free_t(m, &l->att[ctx][j]);
        if (ctx == FX_CTX_TRAIN)
            for (int j = 0; j < FX_AG_N; j++) fx_free_t(m, &l->gatt[j]);
        if (ctx == FX_CTX_TRAIN) {
            for (int j = 0; j < 2; j++) {
                if (l->dx_owned[j]) tensor_free(l->dx[j]);
                l->dx[j] = NULL;
                l->dx_owned[j] = 0;
            }
            fx_free_t(m, &l->dy_sum);
            fx_free_t(m, &l->gated);
            fx_place_release(m, l->argmax);
            l->argmax = NULL;
        }
    }
}

void fx_model_park_ctx(fx_model *m, int ctx)
{
    m->parking = m->device < 0;
    fx_model_free_ctx(m, ctx);
    m->parking = 0;
}

void fx_model_free(fx_model *m)
{
    fx_model_free_ctx(m, FX_CTX_TRAIN);
    fx_model_free_ctx(m, FX_CTX_EVAL);
    fx_release_parked(m);
    for (int i = 0; i < m->nlayers; i++) {
        fx_layer *l = &m->layers[i];
        free(l->run_mean);
        free(l->run_var);
        free(l->save_mean);
        free(l->save_invstd);
    }
    for (int i = 0; i < m->nparams; i++) {
        fx_param *p = &m->params[i];
        tensor_free(p->w);
        tensor_free(p->g);
        fx_place_release(m, p->master);
        fx_place_release(m, p->mom);
        fx_place_release(m, p->var);
        fx_place_release(m, p->unscaled);
    }
    free(m->pos_idx);
    free(m->layers);
    free(m->params);
    free(m->prof_fwd);
    free(m->prof_bwd);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- contexts ---------------- */

static tensor_t *fx_new_act(fx_model *m, int fmt, int ndim, const int64_t *shape, int grad)
{
    tensor_t *t = fx_place_tensor(m, (fmt_t)fmt, ndim, shape,
                                  grad ? m->cfg.grad_window_lo : m->cfg.act_window_lo);
    if (t && m->nparked && m->device < 0) fx_unpark_block(m, t, tensor_numel(t), (fmt_t)fmt);
    /* every activation and activation gradient holds this rank's rows of the batch */
    if (t && m->dist) fx_tensor_set_dist(t, m->dist, FX_DIST_ROWS);
    /* and is written whole by the step that needs it: a step that fails is an error of the
     * training, which then needs none of its old values (ops may round into it in place) */
    if (t) fx_tensor_set_disposable(t);
    return t;
}

void fx_model_set_comm(fx_model *m, struct fx_comm *comm)
{
    m->comm = comm;
    m->dist = comm ? fx_comm_ops(comm) : NULL;
    m->nranks = comm ? fx_comm_size(comm) : 1;
}

/* Whether parameter i is a convolution's bias. */
static int fx_is_conv_bias(const fx_model *m, int i)
{
    for (int k = 0; k < m->nlayers; k++)
        if (m->layers[k].kind == FX_L_CONV && m->layers[k].b == i) return 1;
    return 0;
}

void fx_model_set_grads_summed(fx_model *m, int on)
{
    if (!m->dist) return;
    for (int i = 0; i < m->nparams; i++)
        fx_tensor_set_dist(m->params[i].g, on && !fx_is_conv_bias(m, i) ? m->dist : NULL,
                           FX_DIST_SUM);
}

static const int64_t *fx_layer_in_shape(const fx_model *m, const fx_layer *l, int j, int *nd)
{
    return fx_in_shape(m, l->in[j], nd);
}

/* The attention layer's tensors: [B, T, D] projections and [B, H, T, T] scores and
 * probabilities per context (tensor_attention_softmax scales and masks the scores without a
 * tensor of its own), and the backward's temporaries. */
static int fx_attn_alloc(fx_model *m, fx_layer *l, int ctx)
{
    const int64_t B = l->shape[0], T = l->shape[1], D = l->shape[2], H = l->heads;
    const int64_t btd[3] = {B, T, D}, bhtt[4] = {B, H, T, T}, bhtd[4] = {B, H, T, D / H};
    tensor_t **a = l->att[ctx];
    for (int j = FX_AT_Q; j <= FX_AT_V; j++) a[j] = fx_new_act(m, l->fa, 3, btd, 0);
    a[FX_AT_S] = fx_new_act(m, l->fa, 4, bhtt, 0);
    a[FX_AT_P] = fx_new_act(m, l->fa, 4, bhtt, 0);
    a[FX_AT_O] = fx_new_act(m, l->fa, 4, bhtd, 0);
    a[FX_AT_OC] = fx_new_act(m, l->fa, 3, btd, 0);
    for (int j = 0; j < FX_AT_N; j++)
        if (!a[j]) return FX_ENOMEM;
    /* the scores q k^T are the layer's ".pre" tensor of the trainer's named tensors (before the
     * scale, mask and softmax, as a linear layer's is before its bias), so that statistics,
     * --trace and checkpoints reach them; att[][FX_AT_S] owns the tensor */
    l->tmp[ctx] = a[FX_AT_S];
    if (ctx != FX_CTX_TRAIN) return FX_OK;
    tensor_t **g = l->gatt;
    /* 3: [B, T, D]; 4: [B, H, T, D/H]; 5: [B, H, T, T] */
    static const int shape_of[FX_AG_N] = {
        [FX_AG_DOC] = 3, [FX_AG_DO] = 4, [FX_AG_DP] = 5, [FX_AG_DV4] = 4, [FX_AG_DSS] = 5,
        [FX_AG_DQ4] = 4, [FX_AG_DK4] = 4, [FX_AG_DQ] = 3, [FX_AG_DK] = 3,  [FX_AG_DV] = 3,
        [FX_AG_XA] = 3,  [FX_AG_XB] = 3, [FX_AG_XS] = 3, [FX_AG_XC] = 3};
    for (int j = 0; j < FX_AG_N; j++) {
        const int k = shape_of[j];
        assert(k >= 3 && k <= 5); /* every entry given */
        g[j] = k == 3 ? fx_new_act(m, l->fdx, 3, btd, 1)
               : k == 4 ? fx_new_act(m, l->fdx, 4, bhtd, 1)
                        : fx_new_act(m, l->fdx, 4, bhtt, 1);
        if (!g[j]) return FX_ENOMEM;
    }
    return FX_OK;
}

int fx_model_has_attention(const fx_model *m)
{
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].kind == FX_L_ATTN) return 1;
    return 0;
}

int fx_model_state_tensors(const fx_model *m, int i, tensor_t **out)
{
    const fx_layer *l = &m->layers[i];
    int n = 0;
    if (l->kind == FX_L_EMBED && l->att[FX_CTX_TRAIN][0]) out[n++] = l->att[FX_CTX_TRAIN][0];
    if (l->kind != FX_L_ATTN) return n;
    for (int j = 0; j < FX_AT_N; j++)
        if (j != FX_AT_S && l->att[FX_CTX_TRAIN][j]) out[n++] = l->att[FX_CTX_TRAIN][j];
    for (int j = 0; j < FX_AG_N; j++)
        if (l->gatt[j]) out[n++] = l->gatt[j];
    return n;
}

int fx_model_alloc_ctx(fx_model *m, int ctx)
{
    m->input[ctx] = fx_new_act(m, m->in_fmt, m->in_ndim, m->in_shape, 0);
    if (!m->input[ctx]) return FX_ENOMEM;
    if (m->seq > 0) {
        m->tokens[ctx] = calloc((size_t)(m->in_shape[0] * m->seq), sizeof(int32_t));
        if (!m->tokens[ctx]) return FX_FAIL(FX_ENOMEM, "out of memory");
    }
    if (m->device >= 0) {
        m->stage[ctx] = fx_place_host_tensor(&m->cfg, (fmt_t)m->in_fmt, m->in_ndim, m->in_shape,
                                             m->cfg.act_window_lo);
        if (!m->stage[ctx]) return FX_ENOMEM;
    }
    for (int i = 0; i < m->nlayers; i++) {
        fx_layer *l = &m->layers[i];
        /* a conv fused with its ReLU writes the ReLU layer's output: it has neither an output
         * nor a pre-bias tensor of its own (none would ever be written, so none is listed) */
        const int own_out = !(l->kind == FX_L_CONV && l->fused_relu);
        if (l->kind == FX_L_FLATTEN) {
            /* a view of its input's output (which, written by an earlier layer, exists) */
            const tensor_t *x = l->in[0] < 0 ? m->input[ctx] : m->layers[l->in[0]].out[ctx];
            l->out[ctx] = x ? tensor_view_reshape(x, l->ndim, l->shape) : NULL;
            if (!l->out[ctx]) return FX_FAIL(FX_ENOMEM, "layer %s: no view", l->name);
        } else if (own_out) {
            l->out[ctx] = fx_new_act(m, l->fa, l->ndim, l->shape, 0);
            if (!l->out[ctx]) return FX_ENOMEM;
        }
        if (own_out && (l->kind == FX_L_CONV || l->kind == FX_L_LINEAR ||
                        l->kind == FX_L_TLINEAR || l->kind == FX_L_EMBED) && l->b >= 0) {
            l->tmp[ctx] = fx_new_act(m, l->fa, l->ndim, l->shape, 0);
            if (!l->tmp[ctx]) return FX_ENOMEM;
        }
        if (l->kind == FX_L_EMBED) {
            l->att[ctx][0] = fx_new_act(m, l->fa, l->ndim, l->shape, 0);
            if (!l->att[ctx][0]) return FX_ENOMEM;
        }
        if (l->kind == FX_L_ATTN) {
            int rc = fx_attn_alloc(m, l, ctx);
            if (rc) return rc;
        }
        if (ctx != FX_CTX_TRAIN) continue;
        if (l->kind == FX_L_MAXPOOL) {
            int rc = fx_place_zeros(m, (void **)&l->argmax, tensor_numel(l->out[ctx]),
                                    sizeof(int32_t));
            if (rc) return rc;
        }
        if (l->relu_first && !fmt_is_shared_exponent((fmt_t)l->fdx)) {
            l->gated = fx_new_act(m, l->fdx, l->ndim, l->shape, 1);
            if (!l->gated) return FX_ENOMEM;
        }
        for (int j = 0; j < l->nin; j++) {
            if (l->in[j] < 0) continue; /* no gradient w.r.t. the images */
            if (l->kind == FX_L_ADD) continue; /* add passes its output gradient through */
            if (l->kind == FX_L_FLATTEN) continue; /* a view of its output gradient */
            int nd;
            const int64_t *s = fx_layer_in_shape(m, l, j, &nd);
            l->dx[j] = fx_new_act(m, l->fdx, nd, s, 1);
            l->dx_owned[j] = 1;
            if (!l->dx[j]) return FX_ENOMEM;
        }
        if (l->consumers > 1) {
            l->dy_sum = fx_new_act(m, l->fdx, l->ndim, l->shape, 1);
            if (!l->dy_sum) return FX_ENOMEM;
        }
    }
    return FX_OK;
}

/* ---------------------------------------------------------------- forward ----------------- */

static const tensor_t *fx_input_of(fx_model *m, const fx_layer *l, int j, int ctx)
{
    return l->in[j] < 0 ? m->input[ctx] : m->layers[l->in[j]].out[ctx];
}

/* A [B, features] view of a batch-first tensor. */
static tensor_t *fx_flat_view(const tensor_t *t)
{
    int64_t s[2] = {tensor_shape(t)[0], 0};
    s[1] = s[0] ? tensor_numel(t) / s[0] : 0;
    return tensor_view_reshape(t, 2, s);
}

/* A layer's output u = t + b, and with shared_relu the next layer's relu(u) too (b: the
 * layer's bias, or a residual add's second input). */
static int fx_add_out(fx_layer *l, const tensor_t *t, const tensor_t *b, int ctx)
{
    if (!l->shared_relu) return tensor_add(l->out[ctx], t, b);
    int rc = fx_shared_add_relu(l->out[ctx], l[1].out[ctx], t, b);
    if (rc != FX_SHARED_BINARY_NOT_TAKEN) return rc;
    rc = tensor_add(l->out[ctx], t, b);
    return rc ? rc : tensor_relu(l[1].out[ctx], l->out[ctx]);
}

static int fx_linear_forward(fx_model *m, fx_layer *l, const tensor_t *x, int ctx)
{
    tensor_t *xf = fx_flat_view(x);
    tensor_t *wt = tensor_view_transpose(m->params[l->w].w, 0, 1);
    int rc = (!xf || !wt) ? FX_ENOMEM : tensor_matmul(l->tmp[ctx], xf, wt);
    if (!rc) rc = fx_add_out(l, l->tmp[ctx], m->params[l->b].w, ctx);
    tensor_free(xf);
    tensor_free(wt);
    return rc;
}

/* A [rows, cols] view of a contiguous tensor. */
static tensor_t *fx_rows_view(const tensor_t *t, int64_t cols)
{
    int64_t s[2] = {tensor_numel(t) / cols, cols};
    return tensor_view_reshape(t, 2, s);
}

/* The [B, H, T, D/H] view (strided) of a contiguous [B, T, D] tensor: the heads. The
 * intermediate reshape is freed at once (a view keeps the storage alive). */
static tensor_t *fx_heads_view(const tensor_t *t, int64_t H)
{
    const int64_t *s = tensor_shape(t);
    int64_t s4[4] = {s[0], s[1], H, s[2] / H};
    tensor_t *r = tensor_view_reshape(t, 4, s4);
    tensor_t *v = r ? tensor_view_transpose(r, 1, 2) : NULL;
    tensor_free(r);
    return v;
}

/* dst [B, T, D] = the heads of src [B, H, T, D/H] side by side (one write into dst). */
static int fx_heads_merge(tensor_t *dst, const tensor_t *src)
{
    const int64_t *s = tensor_shape(src);
    int64_t s4[4] = {s[0], s[2], s[1], s[3]};
    tensor_t *d4 = tensor_view_reshape(dst, 4, s4);
    tensor_t *st = tensor_view_transpose(src, 1, 2);
    int rc = (!d4 || !st) ? FX_ENOMEM : tensor_copy(d4, st);
    tensor_free(d4);
    tensor_free(st);
    return rc;
}

/* dst [B, H, T, D/H] = src [B, T, D] split into heads (one write into dst). */
static int fx_heads_split(tensor_t *dst, const tensor_t *src)
{
    tensor_t *v = fx_heads_view(src, tensor_shape(dst)[1]);
    int rc = !v ? FX_ENOMEM : tensor_copy(dst, v);
    tensor_free(v);
    return rc;
}

/* y2 = x2 W^T over rows (x: [..., F] contiguous, y: [..., out]), + b where b is given
 * (fx_matmul_bias: b added where the product is converted) */
static int fx_rows_matmul_wt(tensor_t *y, const tensor_t *x, const tensor_t *w, const tensor_t *b)
{
    tensor_t *x2 = fx_rows_view(x, tensor_shape(w)[1]), *y2 = fx_rows_view(y, tensor_shape(w)[0]);
    tensor_t *wt = tensor_view_transpose(w, 0, 1);
    int rc = (!x2 || !y2 || !wt) ? FX_ENOMEM
             : b                 ? fx_matmul_bias(y2, x2, wt, b)
                                 : tensor_matmul(y2, x2, wt);
    tensor_free(x2);
    tensor_free(y2);
    tensor_free(wt);
    return rc;
}

/* dW = dy2^T x2 and, when dx, dx2 = dy2 W (the backward of fx_rows_matmul_wt). */
static int fx_rows_matmul_wt_backward(tensor_t *dw, tensor_t *dx, const tensor_t *dy,
                                      const tensor_t *x, const tensor_t *w)
{
    const int64_t O = tensor_shape(w)[0], F = tensor_shape(w)[1];
    tensor_t *x2 = fx_rows_view(x, F), *dy2 = fx_rows_view(dy, O);
    tensor_t *dyt = dy2 ? tensor_view_transpose(dy2, 0, 1) : NULL;
    tensor_t *dx2 = dx ? fx_rows_view(dx, F) : NULL;
    int rc = (!x2 || !dy2 || !dyt || (dx && !dx2)) ? FX_ENOMEM : tensor_matmul(dw, dyt, x2);
    if (!rc && dx2) rc = tensor_matmul(dx2, dy2, w);
    tensor_free(x2);
    tensor_free(dy2);
    tensor_free(dyt);
    tensor_free(dx2);
    return rc;
}

/* Causal self-attention forward (fx_model_def_attention()). */
static int fx_attn_forward(fx_model *m, fx_layer *l, const tensor_t *x, int ctx)
{
    tensor_t **a = l->att[ctx];
    const fx_param *p = &m->params[l->w];
    const int64_t H = l->heads, dh = l->shape[2] / H;
    int rc = FX_OK;
    for (int j = 0; j < 3 && !rc; j++) rc = fx_rows_matmul_wt(a[FX_AT_Q + j], x, p[j].w, NULL);
    tensor_t *qh = fx_heads_view(a[FX_AT_Q], H), *kh = fx_heads_view(a[FX_AT_K], H);
    tensor_t *vh = fx_heads_view(a[FX_AT_V], H);
    if (!rc && (!qh || !kh || !vh)) rc = FX_ENOMEM;
    if (!rc) rc = tensor_bmm(a[FX_AT_S], qh, kh, 0, 1);
    /* scaled, masked (-Inf in fp32: it has no shared-exponent representation) and softmax'd:
     * one op, the same bits as the three */
    if (!rc) rc = tensor_attention_softmax(a[FX_AT_P], a[FX_AT_S], 1.0 / sqrt((double)dh), 1);
    if (!rc) rc = tensor_bmm(a[FX_AT_O], a[FX_AT_P], vh, 0, 0);
    if (!rc) rc = fx_heads_merge(a[FX_AT_OC], a[FX_AT_O]);
    if (!rc) rc = fx_rows_matmul_wt(l->out[ctx], a[FX_AT_OC], p[3].w, NULL);
    tensor_free(qh);
    tensor_free(kh);
    tensor_free(vh);
    return rc;
}

/* Its backward: every gradient of the chain in the layer's gradient format. */
static int fx_attn_backward(fx_model *m, fx_layer *l, const tensor_t *x, const tensor_t *dy)
{
    tensor_t **a = l->att[FX_CTX_TRAIN], **g = l->gatt;
    fx_param *p = &m->params[l->w];
    const int64_t H = l->heads, dh = l->shape[2] / H;
    int rc = fx_rows_matmul_wt_backward(p[3].g, g[FX_AG_DOC], dy, a[FX_AT_OC], p[3].w);
    if (!rc) rc = fx_heads_split(g[FX_AG_DO], g[FX_AG_DOC]);
    tensor_t *qh = fx_heads_view(a[FX_AT_Q], H), *kh = fx_heads_view(a[FX_AT_K], H);
    tensor_t *vh = fx_heads_view(a[FX_AT_V], H);
    if (!rc && (!qh || !kh || !vh)) rc = FX_ENOMEM;
    if (!rc) rc = tensor_bmm_backward(g[FX_AG_DP], g[FX_AG_DV4], g[FX_AG_DO], a[FX_AT_P], vh, 0, 0);
    /* the gradient of the unscaled scores q k^T, rounded once (masked positions have
     * probability 0, so their gradient is 0 already) */
    if (!rc)
        rc = tensor_attention_softmax_backward(g[FX_AG_DSS], g[FX_AG_DP], a[FX_AT_P],
                                               1.0 / sqrt((double)dh));
    if (!rc) rc = tensor_bmm_backward(g[FX_AG_DQ4], g[FX_AG_DK4], g[FX_AG_DSS], qh, kh, 0, 1);
    tensor_free(qh);
    tensor_free(kh);
    tensor_free(vh);
    if (!rc) rc = fx_heads_merge(g[FX_AG_DQ], g[FX_AG_DQ4]);
    if (!rc) rc = fx_heads_merge(g[FX_AG_DK], g[FX_AG_DK4]);
    if (!rc) rc = fx_heads_merge(g[FX_AG_DV], g[FX_AG_DV4]);
    /* dx = dq Wq + dk Wk + dv Wv: three products, two sums, each into its own tensor. A tensor
     * holding dq Wq and dv Wv in turn would see its exponent jump by about 2^5 between its two
     * writes of every step: FLEX16_5's Autoflex would predict for the other product (an
     * overflow recomputed, or mantissas five bits short), and DFP16's exponent guess would miss
     * twice a step. */
    tensor_t *dx = l->dx[0];
    if (!rc) rc = fx_rows_matmul_wt_backward(p[0].g, dx ? g[FX_AG_XA] : NULL, g[FX_AG_DQ], x, p[0].w);
    if (!rc) rc = fx_rows_matmul_wt_backward(p[1].g, dx ? g[FX_AG_XB] : NULL, g[FX_AG_DK], x, p[1].w);
    if (!rc && dx) rc = tensor_add(g[FX_AG_XS], g[FX_AG_XA], g[FX_AG_XB]);
    if (!rc) rc = fx_rows_matmul_wt_backward(p[2].g, dx ? g[FX_AG_XC] : NULL, g[FX_AG_DV], x, p[2].w);
    if (!rc && dx) rc = tensor_add(dx, g[FX_AG_XS], g[FX_AG_XC]);
    return rc;
}

/* The seed of a dropout layer's masks: the run's seed and the layer's name, so that layers
 * draw independent masks and a policy's casts (which move layer indices) change none. */
static uint64_t fx_dropout_seed(const fx_model *m, const fx_layer *l)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *c = l->name; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ULL;
    return m->cfg.seed ^ h;
}

static int fx_layer_forward(fx_model *m, fx_layer *l, int ctx)
{
    const tensor_t *x = fx_input_of(m, l, 0, ctx);
    int training = ctx == FX_CTX_TRAIN;
    switch (l->kind) {
    case FX_L_CONV: {
        if (l->fused_relu)
            return tensor_conv2d_bias_relu(l[1].out[ctx], x, m->params[l->w].w,
                                           l->b >= 0 ? m->params[l->b].w : NULL, 1, l->stride,
                                           l->stride, l->pad, l->pad, 1, 1);
        tensor_t *dst = l->b >= 0 ? l->tmp[ctx] : l->out[ctx];
        int done = 0, rc;
        if (l->shared_relu) /* the bias add and the ReLU made from the rounding of each chunk */
            rc = fx_conv2d_shared_bias_relu(dst, l->out[ctx], l[1].out[ctx], x, m->params[l->w].w,
                                            m->params[l->b].w, l->stride, l->stride, l->pad,
                                            l->pad, &done);
        else
            rc = tensor_conv2d(dst, x, m->params[l->w].w, l->stride, l->stride, l->pad, l->pad,
                               1, 1);
        if (!rc && l->b >= 0 && !done) rc = fx_add_out(l, dst, m->params[l->b].w, ctx);
        return rc;
    }
    case FX_L_LINEAR: return fx_linear_forward(m, l, x, ctx);
    case FX_L_RELU: /* or written by the layer before it */
        return l->fused_relu || l->shared_relu ? FX_OK : tensor_relu(l->out[ctx], x);
    case FX_L_MAXPOOL:
        return tensor_maxpool2d(l->out[ctx], training ? l->argmax : NULL, x, l->k, l->k,
                                l->stride, l->stride, l->pad, l->pad);
    case FX_L_AVGPOOL:
        return tensor_avgpool2d(l->out[ctx], x, l->k, l->k, l->stride, l->stride, l->pad,
                                l->pad);
    case FX_L_UNARY: return tensor_unary(l->out[ctx], x, l->fn);
    case FX_L_FLATTEN: return FX_OK; /* its output is a view of x */
    case FX_L_DROPOUT:
        return training ? tensor_dropout(l->out[ctx], x, l->p, fx_dropout_seed(m, l), m->step)
                        : tensor_copy(l->out[ctx], x);
    case FX_L_GAP: return tensor_global_avgpool(l->out[ctx], x);
    case FX_L_BN: {
        if (l->fused_relu) {
            const int rc = fx_batchnorm_relu(l[1].out[ctx], x, m->params[l->w].w,
                                             m->params[l->b].w, l->run_mean, l->run_var,
                                             training ? l->save_mean : NULL,
                                             training ? l->save_invstd : NULL, 0.1, 1e-5, training);
            if (rc != FX_BN_RELU_NOT_TAKEN) {
                if (training) l->out_stale = 1;
                return rc;
            }
        }
        if (l->shared_relu) {
            /* where the ReLU is the batch norm's only reader, its output need not be stored
             * when the ReLU's signs are its own (fx_relu_gate then gates by the ReLU's output):
             * one write of the activation fewer */
            int y_written = 1;
            const int rc = fx_batchnorm_shared_relu(
                l->out[ctx], l[1].out[ctx], x, m->params[l->w].w, m->params[l->b].w, l->run_mean,
                l->run_var, training ? l->save_mean : NULL, training ? l->save_invstd : NULL, 0.1,
                1e-5, training, training && l->consumers == 1 ? &y_written : NULL);
            if (rc != FX_BN_RELU_NOT_TAKEN) {
                if (training && !y_written) l->out_stale = 1;
                return rc;
            }
        }
        int rc = tensor_batchnorm(l->out[ctx], x, m->params[l->w].w, m->params[l->b].w,
                                  l->run_mean, l->run_var, training ? l->save_mean : NULL,
                                  training ? l->save_invstd : NULL, 0.1, 1e-5, training);
        if (!rc && (l->fused_relu || l->shared_relu)) rc = tensor_relu(l[1].out[ctx], l->out[ctx]);
        return rc;
    }
    case FX_L_ADD: {
        const tensor_t *b = fx_input_of(m, l, 1, ctx);
        if (!l->fused_relu) return fx_add_out(l, x, b, ctx);
        int rc = fx_half_add_relu(l[1].out[ctx], x, b);
        if (rc != FX_HALF_BINARY_NOT_TAKEN) {
            if (training) l->out_stale = 1;
            return rc;
        }
        rc = tensor_add(l->out[ctx], x, b);
        return rc ? rc : tensor_relu(l[1].out[ctx], l->out[ctx]);
    }
    case FX_L_CAST: return tensor_copy(l->out[ctx], x);
    case FX_L_EMBED: {
        const int64_t n = l->shape[0] * l->shape[1];
        int rc = tensor_embedding(l->tmp[ctx], m->params[l->w].w, m->tokens[ctx], n);
        if (!rc) rc = tensor_embedding(l->att[ctx][0], m->params[l->b].w, m->pos_idx, n);
        if (!rc) rc = tensor_add(l->out[ctx], l->tmp[ctx], l->att[ctx][0]);
        return rc;
    }
    case FX_L_LN:
        return tensor_layernorm(l->out[ctx], x, fx_tensor_base(m->params[l->w].w),
                                fx_tensor_base(m->params[l->b].w), 1e-5, NULL, NULL);
    case FX_L_ATTN: return fx_attn_forward(m, l, x, ctx);
    case FX_L_TLINEAR: {
        /* fp16/bf16 outputs: the bias added where the product is converted (the same bits as
         * the product into tmp and the add; these formats keep no state between writes) */
        const fmt_t fo = tensor_fmt(l->out[ctx]);
        if (fo == FMT_FP16 || fo == FMT_BF16)
            return fx_rows_matmul_wt(l->out[ctx], x, m->params[l->w].w, m->params[l->b].w);
        int rc = fx_rows_matmul_wt(l->tmp[ctx], x, m->params[l->w].w, NULL);
        tensor_t *t2 = fx_rows_view(l->tmp[ctx], l->shape[2]);
        tensor_t *o2 = fx_rows_view(l->out[ctx], l->shape[2]);
        if (!rc) rc = (!t2 || !o2) ? FX_ENOMEM : tensor_add(o2, t2, m->params[l->b].w);
        tensor_free(t2);
        tensor_free(o2);
        return rc;
    }
    }
    return FX_FAIL(FX_EINVAL, "unknown layer kind %d", (int)l->kind);
}

int fx_model_uses(const fx_model *m, int f)
{
    if (m->in_fmt == f) return 1;
    for (int i = 0; i < m->nlayers; i++) {
        const fx_layer *l = &m->layers[i];
        const int has_params = l->kind == FX_L_CONV || l->kind == FX_L_LINEAR ||
                               l->kind == FX_L_TLINEAR || l->kind == FX_L_ATTN ||
                               l->kind == FX_L_EMBED;
        if (l->fa == f || l->fdx == f ||
            (has_params && (l->fw == f || l->fb == f || l->fdw == f)))
            return 1;
    }
    return 0;
}

double fx_model_clock(const fx_model *m)
{
    if (m->device >= 0) flexpoint_gpu_synchronize();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether a training step times layer l for m->cast_seconds outside profiling: a cast, on
 * the host. */
static int fx_time_cast(const fx_model *m, const fx_layer *l)
{
    return l->kind == FX_L_CAST && m->device < 0;
}

int fx_model_forward(fx_model *m, int ctx, tensor_t **logits)
{
    const int prof = m->prof_fwd && ctx == FX_CTX_TRAIN;
    double t0 = prof ? fx_model_clock(m) : 0;
    for (int i = 0; i < m->nlayers; i++) {
        const int cast = ctx == FX_CTX_TRAIN && (prof ? m->layers[i].kind == FX_L_CAST
                                                      : fx_time_cast(m, &m->layers[i]));
        if (cast && !prof) t0 = fx_model_clock(m);
        if (ctx == FX_CTX_TRAIN) m->layers[i].out_stale = 0; /* set again by a fused route */
        int rc = fx_layer_forward(m, &m->layers[i], ctx);
        if (rc) return rc;
        if (prof || cast) {
            double t1 = fx_model_clock(m);
            if (prof) m->prof_fwd[i] += t1 - t0;
            if (cast) m->cast_seconds += t1 - t0;
            t0 = t1;
        }
    }
    *logits = m->layers[m->nlayers - 1].out[ctx];
    return FX_OK;
}

/* ---------------------------------------------------------------- backward ---------------- */

/* Sum over all axes but axis 1 of a [N, C, H, W] gradient: the conv bias gradient [C,1,1]. */
static int fx_bias_grad_nchw(const fx_model *m, const tensor_t *dy, tensor_t *db)
{
    const int64_t *s = tensor_shape(dy);
    int64_t s3[3] = {s[0], s[1], s[2] * s[3]}, s2[2] = {s[0], s[1]}, s1[1] = {s[1]};
    tensor_t *v = tensor_view_reshape(dy, 3, s3);
    /* partial sums kept in fp32: one rounding */
    tensor_t *t = fx_place_tensor(m, FMT_FP32, 2, s2, 0);
    tensor_t *dbv = tensor_view_reshape(db, 1, s1);
    int rc = (!v || !t || !dbv) ? FX_ENOMEM : tensor_sum(t, v, 2);
    tensor_t *all = NULL;
    if (!rc && m->comm) {
        /* The sum over samples adds fp32 values, which no split into per-rank partial sums
         * reproduces bit for bit. So every rank gathers every sample's row (rank r holds
         * samples r*B/R...), in batch order, and sums them as one process does: the same
         * bits at any rank count, for a few bytes per sample and channel. */
        int64_t sa[2] = {s[0] * m->nranks, s[1]};
        all = tensor_new(FMT_FP32, 2, sa);
        rc = !all ? FX_ENOMEM
                  : fx_comm_allgather(m->comm, fx_tensor_base(t), fx_tensor_base(all),
                                      (size_t)(s[0] * s[1]) * sizeof(float), FX_TRAFFIC_GATHER);
    }
    if (!rc) rc = tensor_sum(dbv, all ? all : t, 0);
    tensor_free(all);
    tensor_free(v);
    tensor_free(t);
    tensor_free(dbv);
    return rc;
}

/* What a ReLU layer's gradient is gated by: its input, or where the layer before it was fused
 * with it and did not write that input (the conv's, batch norm's or add's output, fused_relu
 * or this step's out_stale), its own output (relu(x) > 0 exactly where x > 0; for a
 * FLEX16_5/DFP16 batch norm that left its output unwritten, fx_batchnorm_shared_relu saw to it
 * that relu(x)'s mantissas are above 0 exactly where x's are). */
static const tensor_t *fx_relu_gate(fx_model *m, const fx_layer *l, int ctx)
{
    const int unwritten = l->in[0] >= 0 && m->layers[l->in[0]].out_stale && ctx == FX_CTX_TRAIN;
    return l->fused_relu || unwritten ? l->out[ctx] : fx_input_of(m, l, 0, ctx);
}

static int fx_layer_backward(fx_model *m, fx_layer *l, const tensor_t *dy)
{
    int ctx = FX_CTX_TRAIN;
    const tensor_t *x = fx_input_of(m, l, 0, ctx);
    tensor_t *dx = l->dx[0];
    switch (l->kind) {
    case FX_L_CONV: {
        fx_param *w = &m->params[l->w];
        int rc = tensor_conv2d_backward_weight(w->g, x, dy, l->stride, l->stride, l->pad, l->pad,
                                               1, 1);
        if (!rc && l->b >= 0) rc = fx_bias_grad_nchw(m, dy, m->params[l->b].g);
        if (!rc && dx)
            rc = tensor_conv2d_backward_input(dx, dy, w->w, l->stride, l->stride, l->pad, l->pad,
                                              1, 1);
        return rc;
    }
    case FX_L_LINEAR: {
        fx_param *w = &m->params[l->w];
        tensor_t *xf = fx_flat_view(x), *dyt = tensor_view_transpose(dy, 0, 1);
        tensor_t *dxf = dx ? fx_flat_view(dx) : NULL;
        int rc = (!xf || !dyt || (dx && !dxf)) ? FX_ENOMEM : tensor_matmul(w->g, dyt, xf);
        if (!rc) rc = tensor_sum(m->params[l->b].g, dy, 0);
        if (!rc && dxf) rc = tensor_matmul(dxf, dy, w->w);
        tensor_free(xf);
        tensor_free(dyt);
        tensor_free(dxf);
        return rc;
    }
    case FX_L_RELU: /* with pool_gated, the pool after it made dx */
        return dx && !l->pool_gated ? tensor_relu_backward(dx, dy, fx_relu_gate(m, l, ctx))
                                    : FX_OK;
    case FX_L_MAXPOOL: /* its argmax is written by the forward pass above and nothing else */
        if (dx && l->relu_first) { /* the ReLU's gate on the pooled values, then the scatter */
            fx_layer *r = &m->layers[l->in[0]];
            int rc;
            if (l->gated) {
                rc = tensor_relu_backward(l->gated, dy, l->out[ctx]);
                if (!rc) rc = fx_maxpool2d_backward_own(r->dx[0], l->gated, l->argmax);
            } else {
                rc = fx_pool_relu_backward_shared(r->dx[0], dx, dy, l->argmax,
                                                  fx_relu_gate(m, r, ctx), "tensor_relu_backward");
                if (rc == FX_POOL_RELU_NOT_TAKEN) { /* the two ops, which the ReLU skips */
                    rc = fx_maxpool2d_backward_own(dx, dy, l->argmax);
                    if (!rc) rc = tensor_relu_backward(r->dx[0], dx, fx_relu_gate(m, r, ctx));
                    return rc;
                }
            }
            if (!rc) {
                l->dx_stale = 1;
                __atomic_fetch_add(&relu_pool_made, 1, __ATOMIC_RELAXED);
            }
            return rc;
        }
        return dx ? fx_maxpool2d_backward_own(dx, dy, l->argmax) : FX_OK;
    case FX_L_GAP: return dx ? tensor_global_avgpool_backward(dx, dy) : FX_OK;
    case FX_L_AVGPOOL:
        return dx ? tensor_avgpool2d_backward(dx, dy, l->k, l->k, l->stride, l->stride, l->pad,
                                              l->pad)
                  : FX_OK;
    case FX_L_UNARY: return dx ? tensor_unary_backward(dx, dy, x, l->fn) : FX_OK;
    case FX_L_DROPOUT:
        return dx ? tensor_dropout_backward(dx, dy, l->p, fx_dropout_seed(m, l), m->step)
                  : FX_OK;
    case FX_L_FLATTEN: {
        /* the gradient w.r.t. the input is dy in the input's shape: a view, made anew each
         * step as dy may be another tensor (an add passes its own dy through) */
        if (l->in[0] < 0) return FX_OK;
        int nd;
        const int64_t *s = fx_layer_in_shape(m, l, 0, &nd);
        if (l->dx_owned[0]) tensor_free(l->dx[0]);
        l->dx[0] = tensor_view_reshape(dy, nd, s);
        l->dx_owned[0] = l->dx[0] != NULL;
        return l->dx[0] ? FX_OK : FX_FAIL(FX_ENOMEM, "layer %s: no view", l->name);
    }
    case FX_L_BN:
        return tensor_batchnorm_backward(dx, m->params[l->w].g, m->params[l->b].g, dy, x,
                                         m->params[l->w].w, l->save_mean, l->save_invstd);
    case FX_L_CAST: return dx ? tensor_copy(dx, dy) : FX_OK;
    case FX_L_EMBED: {
        const int64_t n = l->shape[0] * l->shape[1];
        int rc = tensor_embedding_backward(m->params[l->w].g, dy, m->tokens[ctx], n);
        if (!rc) rc = tensor_embedding_backward(m->params[l->b].g, dy, m->pos_idx, n);
        return rc;
    }
    case FX_L_LN: {
        /* no gradient is kept for the network input (token numbers): a layer norm reading it
         * has no dx to write */
        if (!dx)
            return FX_FAIL(FX_EUNSUPPORTED, "layer %s: a layer norm of the network input "
                           "cannot be trained", l->name);
        return tensor_layernorm_backward(dx, fx_tensor_base(m->params[l->w].g),
                                         fx_tensor_base(m->params[l->b].g), dy, x,
                                         fx_tensor_base(m->params[l->w].w), 1e-5);
    }
    case FX_L_ATTN: return fx_attn_backward(m, l, x, dy);
    case FX_L_TLINEAR: {
        int rc = fx_rows_matmul_wt_backward(m->params[l->w].g, dx, dy, x, m->params[l->w].w);
        tensor_t *dy2 = fx_rows_view(dy, l->shape[2]);
        if (!rc) rc = !dy2 ? FX_ENOMEM : tensor_sum(m->params[l->b].g, dy2, 0);
        tensor_free(dy2);
        return rc;
    }
    case FX_L_ADD:
        /* the gradient of a sum reaches both inputs unchanged */
        l->dx[0] = (tensor_t *)dy;
        l->dx[1] = (tensor_t *)dy;
        return FX_OK;
    }
    return FX_FAIL(FX_EINVAL, "unknown layer kind %d", (int)l->kind);
}

/* The gradients w.r.t. layer i's output that its consumers wrote (at most two, in layer
 * order, the order their sum takes): their count, into found[]. */
static int fx_consumer_grads(const fx_model *m, int i, const tensor_t *found[2])
{
    int nf = 0;
    found[0] = found[1] = NULL;
    for (int k = i + 1; k < m->nlayers && nf < 2; k++)
        for (int j = 0; j < m->layers[k].nin; j++)
            if (m->layers[k].in[j] == i && nf < 2) found[nf++] = m->layers[k].dx[j];
    return nf;
}

/* Gradient of layer i's output: from its single consumer, or the sum over two consumers. */
static int fx_output_grad(fx_model *m, int i, const tensor_t *dlogits, const tensor_t **dy)
{
    if (i == m->nlayers - 1) {
        *dy = dlogits;
        return FX_OK;
    }
    const tensor_t *found[2];
    const int nf = fx_consumer_grads(m, i, found);
    if (nf == 1) {
        *dy = found[0];
        return FX_OK;
    }
    if (nf != 2 || !found[0] || !found[1])
        return FX_FAIL(FX_ESTATE, "layer %s: missing output gradient", m->layers[i].name);
    fx_layer *l = &m->layers[i];
    int rc = tensor_add(l->dy_sum, found[0], found[1]);
    *dy = l->dy_sum;
    return rc;
}

/* A ReLU layer whose output feeds two layers: its input gradient made from the two output
 * gradients in one pass, gated as fx_layer_backward gates it (fx_relu_gate). fp16/bf16:
 * without the sum (fx_half_gated_add: the sum into dy_sum and the ReLU's backward give these
 * bits); FLEX16_5/DFP16: the sum's write into dy_sum and the gradient's, both kept
 * (fx_shared_add_gated). Returns FX_HALF_BINARY_NOT_TAKEN where the pair is not of that form,
 * with nothing written. */
static int fx_relu_backward_of_sum(fx_model *m, int i)
{
    fx_layer *l = &m->layers[i];
    if (!l->sum_gated || !l->dx[0] || i == m->nlayers - 1) return FX_HALF_BINARY_NOT_TAKEN;
    const tensor_t *found[2];
    if (fx_consumer_grads(m, i, found) != 2 || !found[0] || !found[1])
        return FX_HALF_BINARY_NOT_TAKEN;
    const tensor_t *gate = fx_relu_gate(m, l, FX_CTX_TRAIN);
    /* shared-exponent formats: the sum's write and the gradient's, each with its own Autoflex
     * state, in one pass (fx_shared_add_gated) */
    if (fmt_is_shared_exponent((fmt_t)l->fa)) {
        const int rc = fx_shared_add_gated(l->dy_sum, l->dx[0], found[0], found[1], gate);
        return rc == FX_SHARED_BINARY_NOT_TAKEN ? FX_HALF_BINARY_NOT_TAKEN : rc;
    }
    const int rc = fx_half_gated_add(l->dx[0], found[0], found[1], gate);
    if (rc != FX_HALF_BINARY_NOT_TAKEN) l->dy_sum_stale = 1; /* the sum is never stored */
    return rc;
}

int fx_model_backward(fx_model *m, const tensor_t *dlogits)
{
    const int prof = m->prof_bwd != NULL;
    double t0 = prof ? fx_model_clock(m) : 0;
    for (int i = m->nlayers - 1; i >= 0; i--) {
        const int cast = prof ? m->layers[i].kind == FX_L_CAST : fx_time_cast(m, &m->layers[i]);
        const tensor_t *dy = NULL;
        m->layers[i].dy_sum_stale = 0; /* set again where the fused route leaves it */
        m->layers[i].dx_stale = 0;
        int rc = fx_relu_backward_of_sum(m, i);
        if (rc == FX_HALF_BINARY_NOT_TAKEN) {
            rc = fx_output_grad(m, i, dlogits, &dy);
            if (cast && !prof) t0 = fx_model_clock(m);
            if (!rc) rc = fx_layer_backward(m, &m->layers[i], dy);
        }
        if (rc) return rc;
        if (prof || cast) {
            double t1 = fx_model_clock(m);
            if (prof) m->prof_bwd[i] += t1 - t0;
            if (cast) m->cast_seconds += t1 - t0;
            t0 = t1;
        }
    }
    return FX_OK;
}
