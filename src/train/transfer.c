/* Weights from one trainer into another of the same model in another format
 * (fx_trainer_copy_weights): the step that evaluating a checkpoint in any format needs. The
 * values travel as fp32, the reference every format converts from, so converting a model
 * between formats is exactly one write per tensor in the target format. */
#include "trainer.h"
#include "placement.h"

#include <stdlib.h>
#include <string.h>

static int fx_bn_count(const fx_model *m)
{
    int n = 0;
    for (int i = 0; i < m->nlayers; i++) n += m->layers[i].kind == FX_L_BN;
    return n;
}

/* The k-th batch-norm layer of m. */
static const fx_layer *fx_bn_layer(const fx_model *m, int k)
{
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].kind == FX_L_BN && k-- == 0) return &m->layers[i];
    return NULL;
}

/* The first difference between the models of a and b that would make a copy meaningless
 * (FX_ESHAPE with a message), or FX_OK. */
static int fx_same_model(const fx_trainer *a, const fx_trainer *b)
{
    if (strncmp(a->cfg.model, b->cfg.model, sizeof a->cfg.model) != 0)
        return FX_FAIL(FX_ESHAPE, "the model differs: '%.16s' into '%.16s'", b->cfg.model,
                       a->cfg.model);
    if (a->C != b->C || a->H != b->H || a->W != b->W || a->classes != b->classes)
        return FX_FAIL(FX_ESHAPE, "the data differs: %dx%dx%d images, %d classes into %dx%dx%d, "
                       "%d classes", b->C, b->H, b->W, b->classes, a->C, a->H, a->W,
                       a->classes);
    const fx_model *ma = &a->m, *mb = &b->m;
    /* parameters and batch-norm layers must correspond one to one; cast layers (format
     * policies) hold neither, so models under different policies still match */
    if (ma->nparams != mb->nparams || fx_bn_count(ma) != fx_bn_count(mb))
        return FX_FAIL(FX_ESHAPE, "the networks differ: %d parameters and %d batch-norm layers "
                       "into %d and %d", mb->nparams, fx_bn_count(mb), ma->nparams,
                       fx_bn_count(ma));
    for (int i = 0; i < ma->nparams; i++) {
        const fx_param *pa = &ma->params[i], *pb = &mb->params[i];
        int same = strcmp(pa->name, pb->name) == 0 && pa->n == pb->n &&
                   tensor_ndim(pa->w) == tensor_ndim(pb->w);
        for (int d = 0; same && d < tensor_ndim(pa->w); d++)
            same = tensor_shape(pa->w)[d] == tensor_shape(pb->w)[d];
        if (!same)
            return FX_FAIL(FX_ESHAPE, "parameter %d differs: %s (%lld values) into %s (%lld "
                           "values)", i, pb->name, (long long)pb->n, pa->name, (long long)pa->n);
    }
    for (int k = 0; k < fx_bn_count(ma); k++) {
        const fx_layer *la = fx_bn_layer(ma, k), *lb = fx_bn_layer(mb, k);
        if (strcmp(la->name, lb->name) != 0 || la->channels != lb->channels)
            return FX_FAIL(FX_ESHAPE, "batch-norm layer %d differs: %s into %s", k, lb->name,
                           la->name);
    }
    return FX_OK;
}

int fx_trainer_copy_weights(fx_trainer *dst, const fx_trainer *src)
{
    if (!dst || !src) return FX_FAIL(FX_EINVAL, "%s is NULL", !dst ? "dst" : "src");
    if (dst == src) return FX_FAIL(FX_EINVAL, "dst and src are the same trainer");
    if (dst->m.device >= 0)
        return FX_FAIL(FX_EUNSUPPORTED, "dst lives on CUDA device %d; give the weights to a "
                       "host trainer", dst->m.device);
    int rc = fx_same_model(dst, src);
    if (rc) return rc;
    int64_t n = 0;
    for (int i = 0; i < src->m.nparams; i++) n += src->m.params[i].n;
    float *vals = malloc((size_t)(n > 0 ? n : 1) * sizeof *vals);
    if (!vals) return FX_FAIL(FX_ENOMEM, "cannot allocate %lld weights", (long long)n);
    /* everything that can fail happens before dst changes: the read of src (a device copy) */
    rc = fx_trainer_get_params(src, vals);
    if (rc) {
        free(vals);
        return rc;
    }
    rc = fx_trainer_set_params(dst, vals);
    for (int k = 0; k < fx_bn_count(&dst->m) && !rc; k++) {
        fx_layer *ld = (fx_layer *)fx_bn_layer(&dst->m, k);
        const fx_layer *ls = fx_bn_layer(&src->m, k);
        size_t bytes = (size_t)ld->channels * sizeof(float);
        if (ld->run_mean && ls->run_mean) memcpy(ld->run_mean, ls->run_mean, bytes);
        if (ld->run_var && ls->run_var) memcpy(ld->run_var, ls->run_var, bytes);
    }
    free(vals);
    return rc;
}

int fx_trainer_set_params(fx_trainer *t, const float *vals)
{
    const float *v = vals;
    int rc = FX_OK;
    for (int i = 0; i < t->m.nparams && !rc; i++) {
        fx_param *p = &t->m.params[i];
        if (p->master) memcpy(p->master, v, (size_t)p->n * sizeof *v);
        /* a host write of floats into a tensor of the right size does not fail; a failure
         * here would be a library bug, reported as it is */
        rc = tensor_from_f32(p->w, v);
        v += p->n;
    }
    return rc;
}
