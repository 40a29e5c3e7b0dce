/* The training loop: seeded batch order and augmentation, forward, loss, backward, loss
 * scaling, optimiser step, evaluation and the tensor registry. */
#define _POSIX_C_SOURCE 200809L
#include "trainer.h"
#include "placement.h"
#include "flexpoint_gpu.h"
#include "../dist/distributed.h"
#include "../nn/softmax_ce.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Upper bound of fx_train_config.threads (as the CLI's --threads). */
#define FX_TRAIN_MAX_THREADS 1024

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

void fx_train_config_default(fx_train_config *cfg)
{
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->model, sizeof cfg->model, "cnn");
    cfg->fmt = FMT_FP32;
    cfg->master_weights = 1;
    cfg->loss_scaling = -1;
    snprintf(cfg->autoflex, sizeof cfg->autoflex, "robust");
    cfg->grad_window_lo = -44;
    cfg->act_window_lo = -31;
    cfg->weight_window_lo = -31;
    cfg->batch_size = 128;
    cfg->lr = 0.02;
    cfg->momentum = 0.9;
    cfg->weight_decay = 0.0;
    cfg->lr_schedule = FX_LR_CONSTANT;
    cfg->epochs = 5;
    cfg->seed = 0;
    cfg->device = -1;
    cfg->optimizer = FX_OPT_SGD;
    cfg->adam_beta1 = 0.9;
    cfg->adam_beta2 = 0.999;
    cfg->adam_eps = 1e-8;
    cfg->clip_norm = 0.0;
    /* the scaler's own defaults (fx_loss_scaler_init), so that a default run is unchanged */
    fx_loss_scaler d;
    fx_loss_scaler_init(&d, 1);
    cfg->loss_scale_init = d.scale;
    cfg->loss_scale_growth = d.growth_factor;
    cfg->loss_scale_backoff = d.backoff_factor;
    cfg->loss_scale_interval = d.growth_interval;
    cfg->loss_scale_min = 0.0;
}

static double fx_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Configuration errors are reported as fx_trainer_new's, the function the caller called. */
#define CFG_FAIL(code, ...) fx_error((code), "fx_trainer_new", __VA_ARGS__)

/* A char[N] field is read only up to its size: an unterminated one is refused rather than read
 * past its end. */
static int fx_validate_terminated(const char *field, const char *v, size_t size)
{
    if (!memchr(v, '\0', size))
        return CFG_FAIL(FX_EINVAL, "%s is not NUL-terminated within its %zu bytes ('%.*s...')",
                        field, size, (int)size, v);
    return FX_OK;
}

static int fx_validate_flag(const char *field, int v, int lo, int hi)
{
    if (v < lo || v > hi) return CFG_FAIL(FX_EINVAL, "%s=%d is outside [%d, %d]", field, v, lo, hi);
    return FX_OK;
}

/* The optimiser and loss-scaler fields. */
static int fx_validate_recipe(const fx_train_config *c)
{
    if (c->optimizer < FX_OPT_SGD || c->optimizer > FX_OPT_ADAMW)
        return CFG_FAIL(FX_EINVAL, "optimizer=%d is unknown (%d sgd, %d adam, %d adamw)",
                        c->optimizer, FX_OPT_SGD, FX_OPT_ADAM, FX_OPT_ADAMW);
    if (!(c->adam_beta1 >= 0 && c->adam_beta1 < 1))
        return CFG_FAIL(FX_EINVAL, "adam_beta1=%g is outside [0, 1)", c->adam_beta1);
    if (!(c->adam_beta2 >= 0 && c->adam_beta2 < 1))
        return CFG_FAIL(FX_EINVAL, "adam_beta2=%g is outside [0, 1)", c->adam_beta2);
    if (!(c->adam_eps > 0) || !isfinite(c->adam_eps))
        return CFG_FAIL(FX_EINVAL, "adam_eps=%g must be finite and > 0", c->adam_eps);
    if (!(c->clip_norm >= 0) || !isfinite(c->clip_norm))
        return CFG_FAIL(FX_EINVAL, "clip_norm=%g must be finite and >= 0 (0: off)", c->clip_norm);
    if (!(c->loss_scale_init > 0) || !(c->loss_scale_init <= FLT_MAX))
        return CFG_FAIL(FX_EINVAL, "loss_scale_init=%g must be > 0 and representable in fp32",
                        c->loss_scale_init);
    if (!(c->loss_scale_growth > 1) || !isfinite(c->loss_scale_growth))
        return CFG_FAIL(FX_EINVAL, "loss_scale_growth=%g must be finite and > 1",
                        c->loss_scale_growth);
    if (!(c->loss_scale_backoff > 0 && c->loss_scale_backoff < 1))
        return CFG_FAIL(FX_EINVAL, "loss_scale_backoff=%g is outside (0, 1)",
                        c->loss_scale_backoff);
    if (c->loss_scale_interval < 1)
        return CFG_FAIL(FX_EINVAL, "loss_scale_interval=%lld must be >= 1",
                        (long long)c->loss_scale_interval);
    if (!(c->loss_scale_min >= 0 && c->loss_scale_min <= c->loss_scale_init))
        return CFG_FAIL(FX_EINVAL, "loss_scale_min=%g is outside [0, loss_scale_init=%g]",
                        c->loss_scale_min, c->loss_scale_init);
    return FX_OK;
}

/* Every field of the configuration, before anything is allocated (trainer.h). */
int fx_train_config_validate(const fx_train_config *c)
{
    int rc = fx_validate_terminated("model", c->model, sizeof c->model);
    if (rc) return rc;
    if ((rc = fx_model_parse(c->model, NULL, "fx_trainer_new"))) return rc;
    if (!fx_fmt_valid(c->fmt)) return CFG_FAIL(FX_EFORMAT, "fmt=%d is not a format", c->fmt);
    if ((rc = fx_validate_flag("master_weights", c->master_weights, 0, 1)) ||
        (rc = fx_validate_flag("loss_scaling", c->loss_scaling, -1, 2)) ||
        (rc = fx_validate_flag("stochastic_rounding", c->stochastic_rounding, 0, 1)))
        return rc;
    if ((rc = fx_validate_terminated("autoflex", c->autoflex, sizeof c->autoflex))) return rc;
    fx_autoflex_config af;
    if (fx_autoflex_preset(c->autoflex, &af) != FX_OK)
        return CFG_FAIL(FX_ENAME, "autoflex='%s': unknown preset (known: published, truemax, "
                       "exact_init, robust, fixed)", c->autoflex);
    const char *wnames[3] = {"grad_window_lo", "act_window_lo", "weight_window_lo"};
    const int windows[3] = {c->grad_window_lo, c->act_window_lo, c->weight_window_lo};
    for (int i = 0; i < 3; i++)
        if (windows[i] < -128 || windows[i] > 96)
            return CFG_FAIL(FX_ERANGE, "%s=%d: the flex16_5 window start is outside [-128, 96]",
                           wnames[i], windows[i]);
    if (c->batch_size < 1 || c->batch_size > 65536)
        return CFG_FAIL(FX_EINVAL, "batch_size=%d is outside [1, 65536]", c->batch_size);
    if (!(c->lr > 0) || !isfinite(c->lr)) return CFG_FAIL(FX_EINVAL, "lr=%g must be > 0", c->lr);
    if (!(c->momentum >= 0 && c->momentum < 1))
        return CFG_FAIL(FX_EINVAL, "momentum=%g is outside [0, 1)", c->momentum);
    if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
        return CFG_FAIL(FX_EINVAL, "weight_decay=%g must be >= 0", c->weight_decay);
    if (c->lr_schedule < FX_LR_CONSTANT || c->lr_schedule > FX_LR_STEP)
        return CFG_FAIL(FX_EINVAL, "lr_schedule=%d is unknown (%d constant, %d cosine, %d step)",
                       c->lr_schedule, FX_LR_CONSTANT, FX_LR_COSINE, FX_LR_STEP);
    if (c->epochs < 1) return CFG_FAIL(FX_EINVAL, "epochs=%d must be >= 1", c->epochs);
    if ((rc = fx_validate_flag("augment", c->augment, 0, 1)) ||
        (rc = fx_validate_flag("threads", c->threads, 0, FX_TRAIN_MAX_THREADS)))
        return rc;
    if (c->device < -1)
        return CFG_FAIL(FX_EINVAL, "device=%d: use -1 for the host or a CUDA ordinal >= 0",
                       c->device);
    if ((rc = fx_validate_recipe(c))) return rc;
    if ((rc = fx_validate_terminated("policy", c->policy, sizeof c->policy))) return rc;
    fx_policy scratch;
    return fx_policy_parse(c->policy, c->fmt, &scratch, "fx_trainer_new");
}

void fx_trainer_make_perm(fx_trainer *t, int epoch)
{
    int64_t n = fx_dataset_len(t->train);
    for (int64_t i = 0; i < n; i++) t->perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates with counter-based draws */
        uint64_t r = fx_rng_u64(t->cfg.seed ^ 0x5eedba7c4ULL, (uint64_t)epoch, (uint64_t)i);
        int64_t j = (int64_t)(r % (uint64_t)(i + 1));
        int64_t tmp = t->perm[i];
        t->perm[i] = t->perm[j];
        t->perm[j] = tmp;
    }
}

static int fx_reg_add(fx_trainer *t, const char *name, const char *suffix, tensor_t *x, int cls,
                      int *cap)
{
    if (!x) return FX_OK;
    if (t->nreg == *cap) {
        int c = *cap ? 2 * *cap : 64;
        fx_named_tensor *grown = realloc(t->reg, (size_t)c * sizeof *grown);
        if (!grown) return FX_FAIL(FX_ENOMEM, "out of memory");
        t->reg = grown;
        *cap = c;
    }
    fx_named_tensor *r = &t->reg[t->nreg++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s%s", name, suffix);
    r->t = x;
    r->cls = cls;
    return FX_OK;
}

static int fx_build_registry(fx_trainer *t)
{
    int cap = 0, rc = FX_OK;
    fx_model *m = &t->m;
    for (int i = 0; i < m->nparams && !rc; i++) {
        rc = fx_reg_add(t, m->params[i].name, "", m->params[i].w, FX_TENSOR_WEIGHTS, &cap);
        if (!rc)
            rc = fx_reg_add(t, m->params[i].name, ".grad", m->params[i].g, FX_TENSOR_GRADIENTS,
                            &cap);
    }
    /* with a device, the batch is written (and traced) in the host staging tensor */
    tensor_t *input = m->stage[FX_CTX_TRAIN] ? m->stage[FX_CTX_TRAIN] : m->input[FX_CTX_TRAIN];
    const int A = FX_TENSOR_ACTIVATIONS, G = FX_TENSOR_GRADIENTS;
    if (!rc) rc = fx_reg_add(t, "input", "", input, A, &cap);
    for (int i = 0; i < m->nlayers && !rc; i++) {
        fx_layer *l = &m->layers[i];
        /* a flatten layer's output is a view of its input's, which is registered already */
        if (l->kind != FX_L_FLATTEN) {
            rc = fx_reg_add(t, l->name, ".out", l->out[FX_CTX_TRAIN], A, &cap);
            if (!rc && l->out[FX_CTX_TRAIN]) t->reg[t->nreg - 1].stale = &l->out_stale;
        }
        if (!rc) rc = fx_reg_add(t, l->name, ".pre", l->tmp[FX_CTX_TRAIN], A, &cap);
        if (!rc && l->dx_owned[0]) {
            rc = fx_reg_add(t, l->name, ".dx", l->dx[0], G, &cap);
            if (!rc) t->reg[t->nreg - 1].stale = &l->dx_stale;
        }
        if (!rc && l->dy_sum) {
            rc = fx_reg_add(t, l->name, ".dy", l->dy_sum, G, &cap);
            if (!rc) t->reg[t->nreg - 1].stale = &l->dy_sum_stale;
        }
    }
    if (!rc) rc = fx_reg_add(t, "loss", ".dlogits", t->dlogits, G, &cap);
    return rc;
}

/* fx_trainer_new, and with comm one rank's part of a distributed trainer: the model holds
 * batch_size / ranks samples of each batch. Calls no collective. */
static fx_trainer *fx_trainer_create(const fx_train_config *cfg, const fx_dataset *train,
                                     const fx_dataset *test, fx_comm *comm,
                                     const fx_model_def *def)
{
    if (!cfg || !train) {
        CFG_FAIL(FX_EINVAL, "%s is NULL", !cfg ? "cfg" : "train");
        return NULL;
    }
    if (fx_train_config_validate(cfg)) return NULL;
    fx_model_spec spec;
    if (!def && fx_model_parse(cfg->model, &spec, "fx_trainer_new") == FX_OK &&
        spec.kind == FX_MODEL_DEF) {
        /* a configuration read from the checkpoint of a definition's trainer */
        CFG_FAIL(FX_ENAME, "model='%.16s' is a model definition's identity: build the trainer "
                 "with fx_trainer_new_model and that definition", cfg->model);
        return NULL;
    }
    int C = fx_dataset_channels(train), H = fx_dataset_height(train), W = fx_dataset_width(train);
    int classes = fx_dataset_classes(train);
    if (C < 1 || C > 4) {
        CFG_FAIL(FX_EUNSUPPORTED, "datasets with %d channels are not supported (1..4)", C);
        return NULL;
    }
    if (test && (fx_dataset_channels(test) != C || fx_dataset_height(test) != H ||
                 fx_dataset_width(test) != W || fx_dataset_classes(test) != classes)) {
        CFG_FAIL(FX_ESHAPE, "test set shape %dx%dx%d/%d classes differs from training set "
                "%dx%dx%d/%d", fx_dataset_channels(test), fx_dataset_height(test),
                fx_dataset_width(test), fx_dataset_classes(test), C, H, W, classes);
        return NULL;
    }
    int64_t n = fx_dataset_len(train);
    if (n < cfg->batch_size) {
        CFG_FAIL(FX_ESHAPE, "the training set has %lld images, fewer than one batch of %d",
                (long long)n, cfg->batch_size);
        return NULL;
    }
    /* before any allocation: no device means a clean failure with nothing to undo */
    if (fx_place_select(cfg->device, "fx_trainer_new")) return NULL;
    fx_trainer *t = calloc(1, sizeof *t);
    if (!t) {
        CFG_FAIL(FX_ENOMEM, "out of memory");
        return NULL;
    }
    t->cfg = *cfg;
    t->m.device = -1; /* until fx_model_build: nothing is placed yet */
    if (def && fx_model_def_copy(def, &t->def)) {
        free(t);
        return NULL;
    }
    t->train = train;
    t->test = test;
    t->C = C;
    t->H = H;
    t->W = W;
    t->classes = classes;
    t->steps_per_epoch = n / cfg->batch_size;
    t->comm = comm;
    t->rank = comm ? fx_comm_rank(comm) : 0;
    t->nranks = comm ? fx_comm_size(comm) : 1;
    t->local_batch = cfg->batch_size / t->nranks; /* a multiple: checked by the caller */
    if (cfg->threads > 0) flexpoint_set_num_threads(cfg->threads);
    int rc = fx_dataset_channel_stats(train, t->mean, t->stdv);
    for (int c = 0; c < C && !rc; c++)
        if (!(t->stdv[c] > 0)) t->stdv[c] = 1.0;
    fx_train_config local = *cfg; /* the model holds this rank's part of each batch */
    local.batch_size = (int)t->local_batch;
    if (!rc)
        rc = def ? fx_model_build_def(&t->m, &local, def, C, H, W, classes)
                 : fx_model_build(&t->m, &local, C, H, W, classes);
    for (int i = 0; i < t->m.nlayers && !rc && comm; i++)
        if (t->m.layers[i].kind == FX_L_BN)
            rc = CFG_FAIL(FX_EUNSUPPORTED, "model '%s' has batch normalisation (%s), whose "
                         "statistics would be those of one rank's part of the batch: "
                         "distributed training takes models without it (mlp, cnn)",
                         cfg->model, t->m.layers[i].name);
    const int text = fx_dataset_seq_len(train) > 0;
    if (!rc && (t->m.seq > 0) != text)
        rc = CFG_FAIL(FX_ESHAPE, "model '%s' %s, but the training set %s", cfg->model,
                      t->m.seq > 0 ? "is a sequence model (it embeds tokens)"
                                   : "is not a sequence model",
                      text ? "holds text windows (fx_dataset_text)" : "holds images");
    if (!rc && text && t->m.seq != fx_dataset_seq_len(train))
        rc = CFG_FAIL(FX_ESHAPE, "the model's context is %d tokens, the dataset's %d", t->m.seq,
                      fx_dataset_seq_len(train));
    if (!rc && text && test && fx_dataset_seq_len(test) != t->m.seq)
        rc = CFG_FAIL(FX_ESHAPE, "the test set's context (%d) differs from the model's (%d)",
                      fx_dataset_seq_len(test), t->m.seq);
    if (!rc && text && (comm || t->m.device >= 0))
        rc = CFG_FAIL(FX_EUNSUPPORTED, "sequence models train on the host in one process");
    if (!rc && text) { /* token numbers are neither normalised nor augmented */
        for (int c = 0; c < 4; c++) {
            t->mean[c] = 0.0;
            t->stdv[c] = 1.0;
        }
        if (cfg->augment) rc = CFG_FAIL(FX_EINVAL, "augment=1: text windows are not images");
    }
    t->rows = text ? t->m.seq : 1;
    if (!rc) fx_model_set_comm(&t->m, comm);
    if (!rc) rc = fx_model_alloc_ctx(&t->m, FX_CTX_TRAIN);
    int64_t B = t->local_batch, img = (int64_t)C * H * W;
    /* a batch's per-sample losses from every rank, then this rank's own */
    if (comm) t->row_loss = malloc((size_t)(cfg->batch_size + B) * sizeof *t->row_loss);
    t->perm = malloc((size_t)n * sizeof *t->perm);
    t->xbuf = malloc((size_t)(B * img) * sizeof(float));
    t->ybuf = malloc((size_t)(B * t->rows) * sizeof(int32_t));
    t->logits_buf = malloc((size_t)(B * t->rows * classes) * sizeof(float));
    if (cfg->augment) t->aug_tmp = malloc((size_t)H * (size_t)W * sizeof(float));
    int64_t ls[3] = {B, classes, 0};
    if (t->rows > 1) { /* [B, T, classes] */
        ls[1] = t->rows;
        ls[2] = classes;
    }
    if (!rc) {
        const fx_layer *last = &t->m.layers[t->m.nlayers - 1];
        t->dlogits = fx_place_tensor(&t->m, (fmt_t)last->fdx, t->rows > 1 ? 3 : 2, ls,
                                     cfg->grad_window_lo);
        if (!t->dlogits) rc = flexpoint_last_status() ? flexpoint_last_status() : FX_ENOMEM;
        else if (comm) fx_tensor_set_dist(t->dlogits, t->m.dist, FX_DIST_ROWS);
    }
    if (!rc && t->m.device >= 0) {
        t->logits_host = tensor_new((fmt_t)t->m.layers[t->m.nlayers - 1].fa, 2, ls);
        if (!t->logits_host) rc = flexpoint_last_status() ? flexpoint_last_status() : FX_ENOMEM;
    }
    if (!rc && (!t->perm || !t->xbuf || !t->ybuf || !t->logits_buf ||
                (cfg->augment && !t->aug_tmp) || (comm && !t->row_loss)))
        rc = CFG_FAIL(FX_ENOMEM, "out of memory");
    /* auto: dynamic scaling when any tensor of the model is fp16 */
    t->scaling = cfg->loss_scaling < 0 ? fx_model_uses(&t->m, FMT_FP16) : cfg->loss_scaling != 0;
    fx_loss_scaler_init(&t->scaler, t->scaling);
    if (t->scaling) {
        t->scaler.scale = cfg->loss_scale_init;
        t->scaler.growth_factor = cfg->loss_scale_growth;
        t->scaler.backoff_factor = cfg->loss_scale_backoff;
        t->scaler.growth_interval = cfg->loss_scale_interval;
    }
    if (!rc) rc = fx_build_registry(t);
    if (rc) {
        fx_trainer_free(t);
        return NULL;
    }
    fx_trainer_make_perm(t, 0);
    return t;
}

fx_trainer *fx_trainer_new(const fx_train_config *cfg, const fx_dataset *train,
                           const fx_dataset *test)
{
    return fx_trainer_create(cfg, train, test, NULL, NULL);
}

fx_trainer *fx_trainer_new_model(const fx_train_config *cfg, const fx_model_def *def,
                                 const fx_dataset *train, const fx_dataset *test)
{
    if (!cfg || !def) {
        CFG_FAIL(FX_EINVAL, "%s is NULL", !cfg ? "cfg" : "def");
        return NULL;
    }
    /* the identity in place of a name: checkpoints and weight copies compare this field */
    fx_train_config local = *cfg;
    if (fx_model_def_identity(def, local.model)) return NULL;
    return fx_trainer_create(&local, train, test, NULL, def);
}

fx_trainer *fx_trainer_new_like(const fx_trainer *like, const fx_train_config *cfg,
                                const fx_dataset *train, const fx_dataset *test)
{
    return like && like->def ? fx_trainer_new_model(cfg, like->def, train, test)
                             : fx_trainer_new(cfg, train, test);
}

/* FNV-1a over the fields that decide what a run computes (not threads, which each rank may
 * choose), field by field: a struct's padding is not data. */
static uint64_t fx_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}
#define FX_HASH_FIELD(h, c, f) ((h) = fx_fnv((h), &(c)->f, sizeof (c)->f))
static uint64_t fx_config_hash(const fx_train_config *c)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    h = fx_fnv(h, c->model, strnlen(c->model, sizeof c->model));
    h = fx_fnv(h, c->autoflex, strnlen(c->autoflex, sizeof c->autoflex));
    h = fx_fnv(h, c->policy, strnlen(c->policy, sizeof c->policy));
    FX_HASH_FIELD(h, c, fmt);
    FX_HASH_FIELD(h, c, master_weights);
    FX_HASH_FIELD(h, c, loss_scaling);
    FX_HASH_FIELD(h, c, stochastic_rounding);
    FX_HASH_FIELD(h, c, grad_window_lo);
    FX_HASH_FIELD(h, c, act_window_lo);
    FX_HASH_FIELD(h, c, weight_window_lo);
    FX_HASH_FIELD(h, c, batch_size);
    FX_HASH_FIELD(h, c, lr);
    FX_HASH_FIELD(h, c, momentum);
    FX_HASH_FIELD(h, c, weight_decay);
    FX_HASH_FIELD(h, c, lr_schedule);
    FX_HASH_FIELD(h, c, epochs);
    FX_HASH_FIELD(h, c, augment);
    FX_HASH_FIELD(h, c, seed);
    FX_HASH_FIELD(h, c, device);
    FX_HASH_FIELD(h, c, optimizer);
    FX_HASH_FIELD(h, c, adam_beta1);
    FX_HASH_FIELD(h, c, adam_beta2);
    FX_HASH_FIELD(h, c, adam_eps);
    FX_HASH_FIELD(h, c, clip_norm);
    FX_HASH_FIELD(h, c, loss_scale_init);
    FX_HASH_FIELD(h, c, loss_scale_growth);
    FX_HASH_FIELD(h, c, loss_scale_backoff);
    FX_HASH_FIELD(h, c, loss_scale_interval);
    FX_HASH_FIELD(h, c, loss_scale_min);
    return h;
}

fx_trainer *fx_trainer_new_distributed(const fx_train_config *cfg, const fx_dataset *train,
                                       const fx_dataset *test, fx_comm *comm)
{
    if (!comm) return fx_trainer_new(cfg, train, test);
    const int size = fx_comm_size(comm), rank = fx_comm_rank(comm);
    int rc = FX_OK;
    fx_trainer *t = NULL;
    /* local checks first, then one agreement: every rank reaches it, whatever failed */
    if (!cfg || !train)
        rc = FX_FAIL(FX_EINVAL, "%s is NULL", !cfg ? "cfg" : "train");
    else if (cfg->device >= 0)
        rc = FX_FAIL(FX_EUNSUPPORTED, "distributed training runs on the host (device=%d)",
                     cfg->device);
    else if (cfg->batch_size >= 1 && cfg->batch_size % size != 0)
        rc = FX_FAIL(FX_EINVAL, "batch_size=%d is not a multiple of the %d ranks: each rank "
                     "takes an equal part of every batch", cfg->batch_size, size);
    if (!rc) {
        t = fx_trainer_create(cfg, train, test, comm, NULL);
        if (!t) rc = flexpoint_last_status() ? flexpoint_last_status() : FX_ENOMEM;
    }
    /* the same run everywhere: rank 0's configuration is the reference */
    const uint64_t h = cfg ? fx_config_hash(cfg) : 0;
    int parts[2] = {(int)(uint32_t)(h & 0xffffffffu), (int)(uint32_t)(h >> 32)};
    int agreed = fx_comm_bcast_int(comm, &parts[0], 0);
    if (!agreed) agreed = fx_comm_bcast_int(comm, &parts[1], 0);
    if (agreed && !rc) rc = agreed;
    if (!rc && ((uint32_t)parts[0] != (uint32_t)(h & 0xffffffffu) ||
                (uint32_t)parts[1] != (uint32_t)(h >> 32)))
        rc = FX_FAIL(FX_EINVAL, "rank %d's training configuration differs from rank 0's "
                     "(every rank must train the same run)", rank);
    int all = fx_comm_agree(comm, rc, NULL);
    if (all) {
        fx_trainer_free(t);
        return NULL;
    }
    return t;
}

int fx_trainer_traffic(const fx_trainer *t, fx_dist_traffic *tr)
{
    if (!t || !tr) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "tr");
    *tr = t->traffic;
    return FX_OK;
}

void fx_trainer_free(fx_trainer *t)
{
    if (!t) return;
    fx_model_free(&t->m);
    fx_model_def_free(t->def);
    tensor_free(t->dlogits);
    tensor_free(t->logits_host);
    free(t->perm);
    free(t->xbuf);
    free(t->ybuf);
    free(t->logits_buf);
    free(t->aug_tmp);
    free(t->row_loss);
    free(t->reg);
    fx_prof_sink_free(&t->prof_sink);
    free(t->prof_split_fwd);
    free(t->prof_split_bwd);
    free(t->prof_layer0);
    free(t);
}

/* Random crop (zero padding 4) and horizontal flip, keyed by (seed, epoch, image index), so
 * every format sees the same augmented images. */
static void fx_augment(const fx_trainer *t, float *img, int64_t index)
{
    int C = t->C, H = t->H, W = t->W, pad = 4;
    uint64_t r = fx_rng_u64(t->cfg.seed ^ 0xa7a7a7a7ULL, (uint64_t)t->epoch, (uint64_t)index);
    int dy = (int)(r % (2 * pad + 1)) - pad, dx = (int)((r >> 8) % (2 * pad + 1)) - pad;
    int flip = (int)((r >> 16) & 1);
    float *tmp = t->aug_tmp; /* H * W floats, allocated by fx_trainer_new */
    for (int c = 0; c < C; c++) {
        float *p = img + (int64_t)c * H * W;
        memcpy(tmp, p, sizeof(float) * (size_t)H * (size_t)W);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int sy = y + dy, sx0 = flip ? W - 1 - x : x, sx = sx0 + dx;
                p[y * W + x] = (sy < 0 || sy >= H || sx < 0 || sx >= W) ? 0.0f : tmp[sy * W + sx];
            }
    }
}

static void fx_normalize(const fx_trainer *t, float *x, int64_t n_img)
{
    int64_t hw = (int64_t)t->H * t->W;
    for (int64_t i = 0; i < n_img; i++)
        for (int c = 0; c < t->C; c++) {
            float *p = x + (i * t->C + c) * hw;
            float mu = (float)t->mean[c], inv = (float)(1.0 / t->stdv[c]);
            for (int64_t k = 0; k < hw; k++) p[k] = (p[k] - mu) * inv;
        }
}

static double fx_lr_at(const fx_trainer *t)
{
    const fx_train_config *c = &t->cfg;
    double total = (double)c->epochs * (double)t->steps_per_epoch;
    double pos = (double)t->global_step;
    switch (c->lr_schedule) {
    case FX_LR_COSINE: return pos >= total ? 0.0 : c->lr * 0.5 * (1.0 + cos(M_PI * pos / total));
    case FX_LR_STEP: return c->lr * (pos >= 0.75 * total ? 0.01 : (pos >= 0.5 * total ? 0.1 : 1.0));
    default: return c->lr;
    }
}

static int64_t fx_count_correct(const float *logits, const int32_t *y, int64_t n, int k)
{
    int64_t correct = 0;
    for (int64_t i = 0; i < n; i++) {
        int best = 0;
        for (int j = 1; j < k; j++)
            if (logits[i * k + j] > logits[i * k + best]) best = j;
        correct += best == y[i];
    }
    return correct;
}

/* Complete the writes of the registered shared-exponent tensors (a device's launched writes
 * wait here for their statistics), so that their tallies are whole. */
static int fx_health_settle(fx_trainer *t)
{
    for (int i = 0; i < t->nreg; i++) {
        fx_storage *st = t->reg[i].t->st;
        if (!fmt_is_shared_exponent(st->fmt)) continue;
        int rc = fx_storage_settle(st, __func__);
        if (rc) return rc;
    }
    return FX_OK;
}

/* The health counters cover the steps from now on: the writes still pending are completed
 * (they belong to the steps before) and the tallies emptied. */
static int fx_health_reset(fx_trainer *t)
{
    int rc = fx_health_settle(t);
    if (rc) return rc;
    for (int i = 0; i < t->nreg; i++) {
        fx_storage *st = t->reg[i].t->st;
        memset(&st->tally, 0, sizeof st->tally);
    }
    t->health_steps = 0;
    t->health_step = t->global_step;
    return FX_OK;
}

/* Right before a step's first write: the step's writes are tallied in period global_step + 1
 * of each registered tensor (fx_write_tally: per step the last write's statistics), when their
 * statistics are known, so that a device's writes are never waited for here. A trainer moved
 * by fx_trainer_load counts afresh: its tensors' statistics are then the loaded ones. */
static int fx_health_begin(fx_trainer *t)
{
    if (t->health_step != t->global_step) {
        int rc = fx_health_reset(t);
        if (rc) return rc;
    }
    for (int i = 0; i < t->nreg; i++) t->reg[i].t->st->tally_period = t->global_step + 1;
    return FX_OK;
}

/* After a step (or a failed one): writes outside steps are not tallied. */
static void fx_health_stop(fx_trainer *t)
{
    for (int i = 0; i < t->nreg; i++) t->reg[i].t->st->tally_period = 0;
}

static void fx_health_end(fx_trainer *t)
{
    fx_health_stop(t);
    t->health_steps++;
    t->health_step = t->global_step + 1; /* the caller counts the step next */
}

/* This epoch's counts per registered tensor, complete (fx_trainer_health). */
static int fx_health_collect(fx_trainer *t)
{
    int rc = t->health_step != t->global_step ? fx_health_reset(t) : fx_health_settle(t);
    if (rc) return rc;
    for (int i = 0; i < t->nreg; i++) {
        fx_named_tensor *r = &t->reg[i];
        const fx_storage *st = r->t->st;
        fx_storage_tally_sum(st, &r->writes, &r->saturated, &r->underflow, &r->zeroed);
        /* a batch tensor of a distributed trainer: the write covered every rank's rows */
        r->written = r->writes * tensor_numel(r->t) * (st->dist_mode == FX_DIST_ROWS ? t->nranks : 1);
    }
    return FX_OK;
}

static int fx_begin_epoch_if_needed(fx_trainer *t)
{
    if (t->step_in_epoch < t->steps_per_epoch) return FX_OK;
    int rc = fx_health_reset(t); /* the last step belongs to the epoch that ends */
    if (rc) return rc;
    t->epoch++;
    t->step_in_epoch = 0;
    t->epoch_reported = 0;
    t->loss_sum = t->seconds = 0;
    t->correct = t->seen = t->seen_rows = t->skipped = t->nonfinite = 0;
    fx_trainer_make_perm(t, t->epoch);
    return FX_OK;
}

int fx_trainer_use_device(const fx_trainer *t)
{
    return t->m.device < 0 ? FX_OK : flexpoint_gpu_set_device(t->m.device);
}

/* Scale the gradients (which carry the loss scale) so that the true gradients' global L2 norm
 * is at most cfg.clip_norm. */
static int fx_trainer_clip(fx_trainer *t, double scale)
{
    fx_model *m = &t->m;
    tensor_t **g = malloc((size_t)(m->nparams > 0 ? m->nparams : 1) * sizeof *g);
    if (!g) return FX_FAIL(FX_ENOMEM, "out of memory");
    for (int i = 0; i < m->nparams; i++) g[i] = m->params[i].g;
    double total = 0;
    int rc = fx_clip_grad_norm(g, m->nparams, t->cfg.clip_norm * scale, &total);
    free(g);
    return rc;
}

/* One optimiser step of parameter i (cfg.optimizer), with the gradient divided by scale. */
static int fx_optimizer_step(fx_trainer *t, int i, double lr, double scale)
{
    fx_param *p = &t->m.params[i];
    const fx_train_config *c = &t->cfg;
    double wd = p->decay ? c->weight_decay : 0.0;
    uint64_t seed = c->seed ^ (0x9000ULL + (uint64_t)i), step = (uint64_t)t->global_step;
    if (c->optimizer == FX_OPT_SGD)
        return fx_sgd_step(p->w, p->g, p->master, p->mom, lr, c->momentum, wd, 1.0 / scale,
                           c->stochastic_rounding, seed, step);
    /* Adam's bias correction counts steps from 1 */
    int (*adam)(tensor_t *, const tensor_t *, float *, float *, float *, double, double, double,
                double, double, double, int, uint64_t, uint64_t) =
        c->optimizer == FX_OPT_ADAM ? fx_adam_step : fx_adamw_step;
    return adam(p->w, p->g, p->master, p->mom, p->var, lr, c->adam_beta1, c->adam_beta2,
                c->adam_eps, wd, 1.0 / scale, c->stochastic_rounding, seed, step + 1);
}

/* A sequence model's token numbers (the batch's images, exact small integers) into the
 * model's token buffer, and the targets of every position into ybuf. */
static int fx_trainer_tokens(fx_trainer *t, const fx_dataset *ds, const int64_t *idx, int64_t n,
                             int ctx)
{
    const int64_t T = t->rows;
    int rc = fx_dataset_batch_targets(ds, idx, n, t->ybuf);
    if (rc) return rc;
    int32_t *tok = t->m.tokens[ctx];
    for (int64_t i = 0; i < n * T; i++) tok[i] = (int32_t)t->xbuf[i];
    return FX_OK;
}

/* The softmax cross-entropy of a step: per sample, or per position of a sequence model
 * ([B, T, V] seen as [B*T, V]: the mean over every position of the batch). */
static int fx_trainer_ce(fx_trainer *t, float *loss, tensor_t *dlogits, const tensor_t *logits,
                         double scale)
{
    if (t->rows == 1)
        return tensor_softmax_cross_entropy(loss, dlogits, logits, t->ybuf, scale);
    int64_t s[2] = {tensor_numel(logits) / t->classes, t->classes};
    tensor_t *l2 = tensor_view_reshape(logits, 2, s), *d2 = tensor_view_reshape(dlogits, 2, s);
    int rc = (!l2 || !d2) ? FX_ENOMEM
                          : tensor_softmax_cross_entropy(loss, d2, l2, t->ybuf, scale);
    tensor_free(l2);
    tensor_free(d2);
    return rc;
}

/* The loss of a distributed step: this rank's rows' losses and the gradient over the whole
 * batch (divided by batch_size, not by this rank's part), then every rank's losses gathered
 * and added in batch order, as the one-process mean adds them. */
static int fx_dist_loss(fx_trainer *t, const tensor_t *logits, double scale, float *loss)
{
    const int64_t B = t->cfg.batch_size, Bl = t->local_batch;
    double *mine = t->row_loss + B;
    int rc = fx_softmax_ce_rows(mine, t->dlogits, logits, t->ybuf, scale, B);
    if (!rc)
        rc = fx_comm_allgather(t->comm, mine, t->row_loss, (size_t)Bl * sizeof *mine,
                               FX_TRAFFIC_GATHER);
    if (rc) return rc;
    double total = 0.0;
    for (int64_t i = 0; i < B; i++) total += t->row_loss[i];
    *loss = (float)(total / (double)B);
    return FX_OK;
}

/* ---- the profile's split (profile_counters.h) ------------------------------------------------ */

static void fx_split_add(fx_time_split *d, const uint64_t ns[FX_PROF_NCAT])
{
    d->conversion_s += 1e-9 * (double)ns[FX_PROF_CONVERSION];
    d->rounding_s += 1e-9 * (double)ns[FX_PROF_ROUNDING];
    d->autoflex_s += 1e-9 * (double)ns[FX_PROF_AUTOFLEX];
}

/* The sink's counts since the last mark go to phase d (and to the whole step's total). */
static void fx_prof_phase_end(fx_trainer *t, fx_time_split *d)
{
    uint64_t ns[FX_PROF_NCAT];
    for (int c = 0; c < FX_PROF_NCAT; c++) {
        ns[c] = t->prof_sink.ns[c] - t->prof_mark[c];
        t->prof_mark[c] = t->prof_sink.ns[c];
    }
    fx_split_add(d, ns);
    fx_split_add(&t->prof_split.total, ns);
}

/* Before a model pass: remember the layers' times and start logging the spans. */
static void fx_prof_layers_begin(fx_trainer *t, const double *layer_s)
{
    memcpy(t->prof_layer0, layer_s, (size_t)t->m.nlayers * sizeof *layer_s);
    t->prof_sink.nevents = 0;
    t->prof_sink.log = 1;
}

/* After a model pass that ran from clock reading p0 to p1 (the trainer's readings around the
 * call): each logged span goes to the layer that was running at its midpoint. The model times
 * the layers back to back (fx_model_forward/backward read the clock once between two layers),
 * so this pass's layer times d[i] tile the interval [T0, T0 + sum d] of the model's first
 * reading T0, which lies in [p0, p1 - sum d]; its middle is taken. The error, a few calls'
 * time, moves only spans shorter than twice that. backward: the layers ran last to first. */
static void fx_prof_layers_end(fx_trainer *t, const double *layer_s, double p0, double p1,
                               int backward, fx_time_split *dst)
{
    fx_prof_sink *s = &t->prof_sink;
    s->log = 0;
    const int n = t->m.nlayers;
    if (n < 1) return;
    double *d = t->prof_layer0, sum = 0.0;
    for (int i = 0; i < n; i++) {
        d[i] = layer_s[i] - d[i];
        sum += d[i];
    }
    double t0 = 0.5 * (p0 + (p1 - sum));
    if (t0 < p0) t0 = p0;
    int k = 0; /* position in running order */
    double end = t0 + d[backward ? n - 1 : 0];
    for (int64_t e = 0; e < s->nevents; e++) {
        const fx_prof_event *ev = &s->events[e];
        const uint64_t tot = ev->ns[0] + ev->ns[1] + ev->ns[2];
        const double mid = 1e-9 * (double)ev->start_ns + 0.5e-9 * (double)tot;
        while (mid >= end && k < n - 1) {
            k++;
            end += d[backward ? n - 1 - k : k];
        }
        fx_split_add(&dst[backward ? n - 1 - k : k], ev->ns);
    }
    s->nevents = 0;
}

static int fx_trainer_step_body(fx_trainer *t, float *loss_out);

int fx_trainer_step(fx_trainer *t, float *loss_out)
{
    if (!t) return FX_FAIL(FX_EINVAL, "trainer is NULL");
    int rc;
    if (!t->profiling) {
        rc = fx_trainer_step_body(t, loss_out);
    } else {
        /* the step's own thread counts its conversions, rounding and bookkeeping */
        fx_prof_sink *prev = fx_prof_attach(&t->prof_sink);
        memcpy(t->prof_mark, t->prof_sink.ns, sizeof t->prof_mark);
        rc = fx_trainer_step_body(t, loss_out);
        t->prof_sink.log = 0; /* a failed step may stop inside a model pass */
        fx_prof_attach(prev);
    }
    if (rc) fx_health_stop(t); /* a failed step's later writes are not the step's */
    return rc;
}

static int fx_trainer_step_body(fx_trainer *t, float *loss_out)
{
    int rc = fx_trainer_use_device(t);
    if (rc) return rc;
    if ((rc = fx_begin_epoch_if_needed(t))) return rc;
    double t0 = fx_now();
    /* profiling: phase boundaries on the model's clock (which waits for a device) */
    const int prof = t->profiling;
    double p0 = prof ? fx_model_clock(&t->m) : 0, p1 = 0;
    /* a distributed rank takes its consecutive part of the one-process batch */
    int64_t B = t->cfg.batch_size, Bl = t->local_batch, img = (int64_t)t->C * t->H * t->W;
    const int64_t *idx = t->perm + t->step_in_epoch * B + (int64_t)t->rank * Bl;
    int64_t bytes0[FX_TRAFFIC_KINDS];
    if (t->comm) fx_comm_bytes(t->comm, bytes0);
    rc = fx_dataset_batch(t->train, idx, Bl, t->xbuf, t->ybuf);
    if (!rc && t->rows > 1) rc = fx_trainer_tokens(t, t->train, idx, Bl, FX_CTX_TRAIN);
    if (rc) return rc;
    if (t->cfg.augment)
        for (int64_t i = 0; i < Bl; i++) fx_augment(t, t->xbuf + i * img, idx[i]);
    if (t->rows == 1) fx_normalize(t, t->xbuf, Bl);
    fx_model *m = &t->m;
    /* after the host's preparation of the batch, which a device's last writes overlap */
    if ((rc = fx_health_begin(t))) return rc;
    rc = fx_place_write_input(m, FX_CTX_TRAIN, t->xbuf);
    if (prof) {
        p1 = fx_model_clock(m);
        t->prof.data_s += p1 - p0;
        fx_prof_phase_end(t, &t->prof_split.data);
        fx_prof_layers_begin(t, m->prof_fwd);
        p0 = p1;
    }
    tensor_t *logits = NULL;
    m->step = t->global_step; /* dropout masks */
    if (!rc) rc = fx_model_forward(m, FX_CTX_TRAIN, &logits);
    if (prof) {
        p1 = fx_model_clock(m);
        t->prof.forward_s += p1 - p0;
        fx_prof_phase_end(t, &t->prof_split.forward);
        fx_prof_layers_end(t, m->prof_fwd, p0, p1, 0, t->prof_split_fwd);
        p0 = p1;
    }
    float loss = 0;
    double scale = t->scaling ? t->scaler.scale : 1.0;
    if (!rc)
        rc = t->comm ? fx_dist_loss(t, logits, scale, &loss)
                     : fx_trainer_ce(t, &loss, t->dlogits, logits, scale);
    if (!rc) rc = fx_place_read_f32(m, logits, t->logits_host, t->logits_buf);
    if (prof) {
        p1 = fx_model_clock(m);
        t->prof.loss_s += p1 - p0;
        fx_prof_phase_end(t, &t->prof_split.loss);
        fx_prof_layers_begin(t, m->prof_bwd);
        p0 = p1;
    }
    if (!rc) {
        fx_model_set_grads_summed(m, 1); /* the gradients' writes sum over the ranks */
        rc = fx_model_backward(m, t->dlogits);
        fx_model_set_grads_summed(m, 0);
    }
    if (rc) return rc;
    if (prof) {
        p1 = fx_model_clock(m);
        t->prof.backward_s += p1 - p0;
        fx_prof_phase_end(t, &t->prof_split.backward);
        fx_prof_layers_end(t, m->prof_bwd, p0, p1, 1, t->prof_split_bwd);
        p0 = p1;
    }

    int apply = 1;
    if (t->scaling) {
        const tensor_t *grads[512];
        float *outs[512];
        int n = m->nparams < 512 ? m->nparams : 512, found_inf = 0;
        for (int i = 0; i < n; i++) {
            grads[i] = m->params[i].g;
            outs[i] = m->params[i].unscaled;
        }
        rc = fx_loss_scaler_unscale(&t->scaler, grads, n, outs, &found_inf);
        /* the gradients are the same on every rank, and so is the flag; agreeing on it costs
         * 4 bytes and keeps the ranks' decisions together whatever a backend does */
        if (!rc && t->comm) rc = fx_comm_max_int(t->comm, &found_inf, 1, FX_TRAFFIC_CONTROL);
        if (rc) return rc;
        if (t->cfg.loss_scaling == FX_LOSS_SCALING_STATIC) {
            /* a fixed scale: skip the step, never change the scale */
            apply = !found_inf;
            t->scaler.skipped_steps += found_inf;
        } else {
            apply = fx_loss_scaler_update(&t->scaler, found_inf);
            if (apply < 0) return apply;
            if (t->scaler.scale < t->cfg.loss_scale_min) t->scaler.scale = t->cfg.loss_scale_min;
        }
    }
    if (apply && t->cfg.clip_norm > 0) rc = fx_trainer_clip(t, scale);
    if (rc) return rc;
    if (apply) {
        double lr = fx_lr_at(t);
        for (int i = 0; i < m->nparams && !rc; i++) rc = fx_optimizer_step(t, i, lr, scale);
        if (rc) return rc;
    } else {
        t->skipped++;
    }
    if (prof) {
        p1 = fx_model_clock(m);
        t->prof.update_s += p1 - p0;
        t->prof.total_s += p1 - t0;
        t->prof.steps++;
        fx_prof_phase_end(t, &t->prof_split.update);
    }
    fx_health_end(t);
    if (!isfinite(loss)) t->nonfinite++;
    else t->loss_sum += loss;
    int64_t correct = fx_count_correct(t->logits_buf, t->ybuf, Bl * t->rows, t->classes);
    if (t->comm) {
        if ((rc = fx_comm_sum_i64(t->comm, &correct, 1, FX_TRAFFIC_CONTROL))) return rc;
        int64_t bytes1[FX_TRAFFIC_KINDS];
        fx_comm_bytes(t->comm, bytes1);
        t->traffic.steps++;
        t->traffic.gradient_bytes += bytes1[FX_TRAFFIC_GRADIENT] - bytes0[FX_TRAFFIC_GRADIENT];
        t->traffic.statistics_bytes +=
            bytes1[FX_TRAFFIC_STATISTICS] - bytes0[FX_TRAFFIC_STATISTICS];
        t->traffic.gather_bytes += bytes1[FX_TRAFFIC_GATHER] - bytes0[FX_TRAFFIC_GATHER];
        t->traffic.control_bytes += bytes1[FX_TRAFFIC_CONTROL] - bytes0[FX_TRAFFIC_CONTROL];
    }
    t->correct += correct;
    t->seen += B;
    t->seen_rows += B * t->rows;
    t->step_in_epoch++;
    t->global_step++;
    t->seconds += fx_now() - t0;
    if (loss_out) *loss_out = loss;
    return FX_OK;
}

int fx_trainer_evaluate(fx_trainer *t, const fx_dataset *ds, double *accuracy, double *loss)
{
    if (!t || !ds) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "dataset");
    if (fx_dataset_channels(ds) != t->C || fx_dataset_height(ds) != t->H ||
        fx_dataset_width(ds) != t->W || fx_dataset_classes(ds) != t->classes)
        return FX_FAIL(FX_ESHAPE, "dataset shape differs from the training set's");
    fx_model *m = &t->m;
    int rc = fx_trainer_use_device(t);
    if (rc) return rc;
    rc = fx_model_alloc_ctx(m, FX_CTX_EVAL);
    /* A distributed rank evaluates its part (rows r0 .. r0 + Bl) of each one-process batch,
     * so that batch tensors see the same batches as in one process. */
    int64_t B = t->cfg.batch_size, Bl = t->local_batch, r0 = (int64_t)t->rank * Bl;
    int64_t n = fx_dataset_len(ds), img = (int64_t)t->C * t->H * t->W;
    int64_t *idx = malloc((size_t)B * sizeof *idx);
    if (!rc && !idx) rc = FX_FAIL(FX_ENOMEM, "out of memory");
    int64_t correct = 0;
    double loss_sum = 0;
    for (int64_t s = 0; s < n && !rc; s += B) {
        int64_t cnt = n - s < B ? n - s : B;
        for (int64_t i = 0; i < B; i++) idx[i] = s + (i < cnt ? i : 0);
        int64_t mine = cnt - r0 < 0 ? 0 : (cnt - r0 > Bl ? Bl : cnt - r0); /* real rows here */
        rc = fx_dataset_batch(ds, idx + r0, Bl, t->xbuf, t->ybuf);
        if (!rc && t->rows > 1) rc = fx_trainer_tokens(t, ds, idx + r0, Bl, FX_CTX_EVAL);
        if (rc) break;
        /* a short last batch is padded with zeros; its extra rows are ignored */
        memset(t->xbuf + mine * img, 0, sizeof(float) * (size_t)((Bl - mine) * img));
        if (t->rows == 1) fx_normalize(t, t->xbuf, mine);
        tensor_t *logits;
        rc = fx_place_write_input(m, FX_CTX_EVAL, t->xbuf);
        if (!rc) rc = fx_model_forward(m, FX_CTX_EVAL, &logits);
        if (!rc) rc = fx_place_read_f32(m, logits, t->logits_host, t->logits_buf);
        if (rc) break;
        correct += fx_count_correct(t->logits_buf, t->ybuf, mine * t->rows, t->classes);
        double *rows = t->comm ? t->row_loss + B : NULL;
        /* a sequence model: the mean over the positions of each window */
        for (int64_t i = 0; i < mine && t->rows > 1; i++) {
            double ls = 0;
            for (int64_t r = i * t->rows; r < (i + 1) * t->rows; r++) {
                const float *z = t->logits_buf + r * t->classes;
                double mx = z[0], se = 0;
                for (int j = 1; j < t->classes; j++) mx = z[j] > mx ? z[j] : mx;
                for (int j = 0; j < t->classes; j++) se += exp((double)z[j] - mx);
                ls += mx + log(se) - (double)z[t->ybuf[r]];
            }
            loss_sum += ls / (double)t->rows;
        }
        for (int64_t i = 0; i < mine && t->rows == 1; i++) { /* log-softmax in double */
            const float *z = t->logits_buf + i * t->classes;
            double mx = z[0], se = 0;
            for (int j = 1; j < t->classes; j++) mx = z[j] > mx ? z[j] : mx;
            for (int j = 0; j < t->classes; j++) se += exp((double)z[j] - mx);
            double l = mx + log(se) - (double)z[t->ybuf[i]];
            if (rows) rows[i] = l;
            else loss_sum += l;
        }
        if (rows) { /* every rank's losses, added in batch order as in one process */
            for (int64_t i = mine; i < Bl; i++) rows[i] = 0.0; /* padding: never added */
            rc = fx_comm_allgather(t->comm, rows, t->row_loss, (size_t)Bl * sizeof *rows,
                                   FX_TRAFFIC_GATHER);
            for (int64_t i = 0; i < cnt && !rc; i++) loss_sum += t->row_loss[i];
        }
    }
    free(idx);
    fx_model_park_ctx(m, FX_CTX_EVAL);
    if (!rc && t->comm) rc = fx_comm_sum_i64(t->comm, &correct, 1, FX_TRAFFIC_CONTROL);
    if (rc) return rc;
    if (accuracy) *accuracy = n ? (double)correct / ((double)n * (double)t->rows) : 0.0;
    if (loss) *loss = n ? loss_sum / (double)n : 0.0;
    return FX_OK;
}

int fx_trainer_predict(fx_trainer *t, const float *inputs, int64_t n, float *logits)
{
    if (!t || !inputs || !logits)
        return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : !inputs ? "inputs" : "logits");
    if (n < 1) return FX_FAIL(FX_EINVAL, "n=%lld: predict at least one sample", (long long)n);
    if (t->comm)
        return FX_FAIL(FX_EUNSUPPORTED, "a distributed trainer's ranks hold parts of a batch: "
                       "predict with a one-process trainer (fx_trainer_copy_weights)");
    const int64_t img = (int64_t)t->C * t->H * t->W, B = t->local_batch;
    /* token numbers index the embedding: refused before anything runs */
    for (int64_t i = 0; i < n * img && t->rows > 1; i++)
        if (!(inputs[i] >= 0 && inputs[i] < (float)t->classes) ||
            inputs[i] != (float)(int32_t)inputs[i])
            return FX_FAIL(FX_ERANGE, "inputs[%lld]=%g is not a token number in [0, %d)",
                           (long long)i, (double)inputs[i], t->classes);
    fx_model *m = &t->m;
    int rc = fx_trainer_use_device(t);
    if (!rc) rc = fx_model_alloc_ctx(m, FX_CTX_EVAL);
    const int64_t per = t->rows * (int64_t)t->classes; /* logits of one sample */
    for (int64_t s = 0; s < n && !rc; s += B) {
        const int64_t cnt = n - s < B ? n - s : B;
        memcpy(t->xbuf, inputs + s * img, sizeof(float) * (size_t)(cnt * img));
        /* a short last batch is padded with zeros (token 0 for text); its rows are dropped */
        memset(t->xbuf + cnt * img, 0, sizeof(float) * (size_t)((B - cnt) * img));
        if (t->rows == 1) fx_normalize(t, t->xbuf, cnt);
        for (int64_t i = 0; i < B * t->rows && t->rows > 1; i++)
            m->tokens[FX_CTX_EVAL][i] = (int32_t)t->xbuf[i];
        tensor_t *out;
        rc = fx_place_write_input(m, FX_CTX_EVAL, t->xbuf);
        if (!rc) rc = fx_model_forward(m, FX_CTX_EVAL, &out);
        if (!rc) rc = fx_place_read_f32(m, out, t->logits_host, t->logits_buf);
        if (!rc) memcpy(logits + s * per, t->logits_buf, sizeof(float) * (size_t)(cnt * per));
    }
    fx_model_park_ctx(m, FX_CTX_EVAL);
    return rc;
}

int fx_trainer_epoch(fx_trainer *t, fx_epoch_metrics *mt)
{
    if (!t || !mt) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "metrics");
    /* an epoch whose steps were all taken by fx_trainer_step is reported, not retrained */
    if (t->epoch_reported) {
        int rc = fx_begin_epoch_if_needed(t);
        if (rc) return rc;
    }
    while (t->step_in_epoch < t->steps_per_epoch) {
        int rc = fx_trainer_step(t, NULL);
        if (rc) return rc;
    }
    memset(mt, 0, sizeof *mt);
    t->epoch_reported = 1;
    mt->epoch = t->epoch + 1;
    int64_t good = t->steps_per_epoch - t->nonfinite;
    mt->train_loss = good > 0 ? t->loss_sum / (double)good : NAN;
    mt->train_accuracy = t->seen_rows ? (double)t->correct / (double)t->seen_rows : 0.0;
    mt->seconds = t->seconds;
    mt->images_per_second = t->seconds > 0 ? (double)t->seen / t->seconds : 0.0;
    mt->steps = t->steps_per_epoch;
    mt->skipped_steps = t->skipped;
    mt->nonfinite_losses = t->nonfinite;
    mt->loss_scale = t->scaling ? t->scaler.scale : 1.0;
    mt->test_loss = mt->test_accuracy = -1;
    if (t->test) return fx_trainer_evaluate(t, t->test, &mt->test_accuracy, &mt->test_loss);
    return FX_OK;
}

int64_t fx_trainer_global_step(const fx_trainer *t)
{
    return t ? t->global_step : FX_FAIL(FX_EINVAL, "trainer is NULL");
}

int fx_trainer_epoch_index(const fx_trainer *t)
{
    if (!t) return FX_FAIL(FX_EINVAL, "trainer is NULL");
    return t->step_in_epoch >= t->steps_per_epoch ? t->epoch + 1 : t->epoch;
}

const fx_loss_scaler *fx_trainer_loss_scaler(const fx_trainer *t)
{
    if (!t) FX_FAIL(FX_EINVAL, "trainer is NULL");
    return t ? &t->scaler : NULL;
}

int fx_trainer_tensor_count(const fx_trainer *t)
{
    return t ? t->nreg : FX_FAIL(FX_EINVAL, "trainer is NULL");
}

const char *fx_trainer_tensor_name(const fx_trainer *t, int i)
{
    if (!t) FX_FAIL(FX_EINVAL, "trainer is NULL");
    else if (i < 0 || i >= t->nreg)
        FX_FAIL(FX_EINVAL, "tensor index %d is outside [0, %d)", i, t->nreg);
    return (t && i >= 0 && i < t->nreg) ? t->reg[i].name : NULL;
}

tensor_t *fx_trainer_tensor(fx_trainer *t, int i)
{
    if (!t || i < 0 || i >= t->nreg) {
        if (!t) FX_FAIL(FX_EINVAL, "trainer is NULL");
        else FX_FAIL(FX_EINVAL, "tensor index %d is outside [0, %d)", i, t->nreg);
        return NULL;
    }
    const fx_named_tensor *r = &t->reg[i];
    if (r->stale && *r->stale) {
        FX_FAIL(FX_ESTATE, "tensor '%s' holds nothing of the last training step: a fused op "
                "made the next layer's values without writing it; set FLEXPOINT_NO_FUSION=1 "
                "to keep it", r->name);
        return NULL;
    }
    return r->t;
}

int fx_trainer_tensor_find(const fx_trainer *t, const char *name)
{
    if (!t || !name) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "name");
    for (int i = 0; i < t->nreg; i++)
        if (strcmp(t->reg[i].name, name) == 0) return i;
    return FX_FAIL(FX_ENAME, "no tensor named '%.64s'", name);
}

int64_t fx_trainer_param_count(const fx_trainer *t)
{
    if (!t) return FX_FAIL(FX_EINVAL, "trainer is NULL");
    int64_t n = 0;
    for (int i = 0; i < t->m.nparams; i++) n += t->m.params[i].n;
    return n;
}

int fx_trainer_get_params(const fx_trainer *t, float *dst)
{
    if (!t || !dst) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "dst");
    int rc = fx_trainer_use_device(t);
    for (int i = 0; i < t->m.nparams && !rc; i++) {
        const fx_param *p = &t->m.params[i];
        if (p->master) rc = fx_place_download(&t->m, dst, p->master, p->n);
        else rc = fx_place_read_f32(&t->m, p->w, NULL, dst);
        dst += p->n;
    }
    return rc;
}

int fx_trainer_health(fx_trainer *t, fx_train_health *h)
{
    if (!t || !h) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "h");
    memset(h, 0, sizeof *h);
    int rc = fx_trainer_use_device(t);
    if (!rc) rc = fx_health_collect(t);
    if (rc) return rc;
    h->measured = fx_model_uses(&t->m, FMT_FLEX16_5) || fx_model_uses(&t->m, FMT_DFP16);
    for (int c = 0; c < FX_TENSOR_CLASSES; c++) h->worst_saturated[c] = h->worst_zeroed[c] = -1;
    /* collected: the counts are the current epoch's, or none after a load */
    for (int i = 0; i < t->nreg; i++) {
        const fx_named_tensor *r = &t->reg[i];
        const int c = r->cls;
        h->writes[c] += r->writes;
        h->written[c] += r->written;
        h->saturated[c] += r->saturated;
        h->underflow[c] += r->underflow;
        h->zeroed[c] += r->zeroed;
        double fs = r->written ? (double)r->saturated / (double)r->written : 0.0;
        double fz = r->writes ? (double)r->zeroed / (double)r->writes : 0.0;
        if (fs > h->worst_saturated_fraction[c]) {
            h->worst_saturated_fraction[c] = fs;
            h->worst_saturated[c] = i;
        }
        if (fz > h->worst_zeroed_fraction[c]) {
            h->worst_zeroed_fraction[c] = fz;
            h->worst_zeroed[c] = i;
        }
    }
    h->steps = t->health_steps;
    /* a weight counts once when its master copy, its working copy or both are NaN/Inf */
    int64_t most = 0;
    for (int i = 0; i < t->m.nparams; i++) most = t->m.params[i].n > most ? t->m.params[i].n : most;
    float *w = malloc((size_t)(most > 0 ? most : 1) * sizeof(float));
    float *mw = malloc((size_t)(most > 0 ? most : 1) * sizeof(float));
    if (!w || !mw) rc = FX_FAIL(FX_ENOMEM, "out of memory");
    for (int i = 0; i < t->m.nparams && !rc; i++) {
        const fx_param *p = &t->m.params[i];
        rc = fx_place_read_f32(&t->m, p->w, NULL, w);
        if (!rc && p->master) rc = fx_place_download(&t->m, mw, p->master, p->n);
        for (int64_t k = 0; k < p->n && !rc; k++)
            h->nonfinite_weights += !isfinite(w[k]) || (p->master && !isfinite(mw[k]));
        h->params += p->n;
    }
    free(w);
    free(mw);
    if (rc) memset(h, 0, sizeof *h);
    return rc;
}

int fx_trainer_profile_enable(fx_trainer *t, int on)
{
    if (!t) return FX_FAIL(FX_EINVAL, "trainer is NULL");
    if (on != 0 && on != 1) return FX_FAIL(FX_EINVAL, "on=%d must be 0 or 1", on);
    fx_model *m = &t->m;
    free(m->prof_fwd);
    free(m->prof_bwd);
    m->prof_fwd = m->prof_bwd = NULL;
    memset(&t->prof, 0, sizeof t->prof);
    fx_prof_sink_free(&t->prof_sink);
    memset(&t->prof_split, 0, sizeof t->prof_split);
    free(t->prof_split_fwd);
    free(t->prof_split_bwd);
    free(t->prof_layer0);
    t->prof_split_fwd = t->prof_split_bwd = NULL;
    t->prof_layer0 = NULL;
    t->profiling = 0;
    if (!on) return FX_OK;
    size_t n = (size_t)(m->nlayers > 0 ? m->nlayers : 1);
    m->prof_fwd = calloc(n, sizeof(double));
    m->prof_bwd = calloc(n, sizeof(double));
    t->prof_split_fwd = calloc(n, sizeof *t->prof_split_fwd);
    t->prof_split_bwd = calloc(n, sizeof *t->prof_split_bwd);
    t->prof_layer0 = calloc(n, sizeof *t->prof_layer0);
    if (!m->prof_fwd || !m->prof_bwd || !t->prof_split_fwd || !t->prof_split_bwd ||
        !t->prof_layer0) {
        free(m->prof_fwd);
        free(m->prof_bwd);
        m->prof_fwd = m->prof_bwd = NULL;
        free(t->prof_split_fwd);
        free(t->prof_split_bwd);
        free(t->prof_layer0);
        t->prof_split_fwd = t->prof_split_bwd = NULL;
        t->prof_layer0 = NULL;
        return FX_FAIL(FX_ENOMEM, "out of memory");
    }
    t->profiling = 1;
    return FX_OK;
}

int fx_trainer_profile(const fx_trainer *t, fx_train_profile *p)
{
    if (!t || !p) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "p");
    *p = t->prof;
    return FX_OK;
}

int fx_trainer_profile_split(const fx_trainer *t, fx_train_profile_split *p)
{
    if (!t || !p) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "p");
    *p = t->prof_split;
    return FX_OK;
}

int fx_trainer_layer_profile_split(const fx_trainer *t, int i, fx_time_split *forward,
                                   fx_time_split *backward)
{
    if (!t || !forward || !backward)
        return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : !forward ? "forward" : "backward");
    if (i < 0 || i >= t->m.nlayers)
        return FX_FAIL(FX_EINVAL, "layer %d is outside [0, %d)", i, t->m.nlayers);
    static const fx_time_split zero = {0, 0, 0};
    *forward = t->prof_split_fwd ? t->prof_split_fwd[i] : zero;
    *backward = t->prof_split_bwd ? t->prof_split_bwd[i] : zero;
    return FX_OK;
}

int fx_trainer_layer_count(const fx_trainer *t)
{
    if (!t) return FX_FAIL(FX_EINVAL, "trainer is NULL");
    return t->m.nlayers;
}

int fx_trainer_layer_profile(const fx_trainer *t, int i, fx_layer_profile *lp)
{
    if (!t || !lp) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "lp");
    if (i < 0 || i >= t->m.nlayers)
        return FX_FAIL(FX_EINVAL, "layer %d is outside [0, %d)", i, t->m.nlayers);
    static const char *const kinds[] = {"conv",      "linear",    "relu",      "maxpool",
                                        "gap",       "batchnorm", "add",       "cast",
                                        "avgpool",   "unary",     "flatten",   "dropout",
                                        "embedding", "layernorm", "attention", "token_linear"};
    const fx_layer *l = &t->m.layers[i];
    lp->name = l->name;
    lp->kind = l->kind == FX_L_UNARY ? l->fn /* "tanh", "gelu", ... */
               : (int)l->kind >= 0 && (size_t)l->kind < sizeof kinds / sizeof *kinds
                   ? kinds[l->kind]
                   : "?";
    lp->forward_s = t->m.prof_fwd ? t->m.prof_fwd[i] : 0.0;
    lp->backward_s = t->m.prof_bwd ? t->m.prof_bwd[i] : 0.0;
    return FX_OK;
}

int fx_trainer_cast_count(const fx_trainer *t)
{
    if (!t) return FX_FAIL(FX_EINVAL, "trainer is NULL");
    return t->m.ncasts;
}

double fx_trainer_cast_seconds(const fx_trainer *t)
{
    if (!t) {
        FX_FAIL(FX_EINVAL, "trainer is NULL");
        return -1.0;
    }
    return t->m.cast_seconds;
}
