/* Named Autoflex configurations and the public functions that apply them to a tensor. */
#include "autoflex.h"

#include "../core/internal.h"

#include <stdlib.h>
#include <string.h>

/* The published algorithm (Koester et al. 2017 and the public simulator), docs/autoflex.md. */
static void preset_published(fx_autoflex_config *c)
{
    c->managed = 1;
    c->history_len = 16;
    c->beta = 3.0;
    c->gamma = 100.0;
    c->alpha = 1.0;
    c->init_mode = FX_AF_INIT_PROBE;
    c->stat_mode = FX_AF_STAT_SATURATED_MAX;
    c->overflow_mode = FX_AF_OVERFLOW_KEEP;
    c->init_exp = -8;
    c->probe_tries = 10;
}

/* Every preset is the published one with a few fields changed, so that the presets differ
 * only in what their names say. */
int fx_af_preset(const char *name, fx_autoflex_config *cfg)
{
    if (!name || !cfg) return FX_EINVAL;
    fx_autoflex_config c;
    memset(&c, 0, sizeof c); /* padding included: *cfg receives the struct's bytes */
    preset_published(&c);
    if (strcmp(name, "published") == 0) {
    } else if (strcmp(name, "fixed") == 0) {
        c.managed = 0;
    } else if (strcmp(name, "truemax") == 0) {
        c.stat_mode = FX_AF_STAT_TRUE_MAX;
    } else if (strcmp(name, "exact_init") == 0) {
        c.init_mode = FX_AF_INIT_EXACT;
    } else if (strcmp(name, "robust") == 0) {
        c.stat_mode = FX_AF_STAT_TRUE_MAX;
        c.init_mode = FX_AF_INIT_EXACT;
        c.overflow_mode = FX_AF_OVERFLOW_RECOMPUTE;
    } else {
        return FX_ENAME; /* quiet: the public wrapper writes the message */
    }
    *cfg = c;
    return FX_OK;
}

/* The library default, chosen by the experiments in the README ("Choosing the default
 * preset"): "robust" matched "published" in accuracy and kept no saturated values. */
#define FX_AF_DEFAULT_PRESET "robust"

void fx_af_default_config(fx_autoflex_config *cfg)
{
    const char *env = getenv("FLEXPOINT_AUTOFLEX");
    if (env && env[0] && fx_af_preset(env, cfg) == FX_OK) return;
    fx_af_preset(FX_AF_DEFAULT_PRESET, cfg);
}

int fx_autoflex_preset(const char *name, fx_autoflex_config *cfg)
{
    if (!name) return FX_FAIL(FX_EINVAL, "name is NULL");
    if (!cfg) return FX_FAIL(FX_EINVAL, "cfg is NULL");
    if (fx_af_preset(name, cfg) != FX_OK)
        return FX_FAIL(FX_ENAME, "unknown Autoflex preset '%s' (known: published, fixed, "
                       "truemax, exact_init, robust)", name);
    return FX_OK;
}

/* Autoflex belongs to the storage (all views share one exponent). */
static int check_flex(const tensor_t *t, const char *func)
{
    if (!t) return fx_error(FX_EINVAL, func, "tensor is NULL");
    if (t->st->fmt != FMT_FLEX16_5) {
        const char *name = fmt_name(t->st->fmt);
        return fx_error(FX_EFORMAT, func, "Autoflex manages flex16_5 tensors only, got %s",
                        name ? name : "an unknown format");
    }
    return FX_OK;
}

int tensor_set_autoflex_config(tensor_t *t, const fx_autoflex_config *cfg)
{
    int rc = check_flex(t, __func__);
    if (rc != FX_OK) return rc;
    rc = fx_af_config_validate(cfg);
    if (rc != FX_OK) return rc;
    /* a launched write is observed under the configuration it was written with */
    if ((rc = fx_storage_settle(t->st, __func__))) return rc;
    /* The exponent stays: a new configuration restarts the history and the initialisation
     * from the tensor's current exponent. */
    fx_af_reset(&t->st->af, cfg);
    return FX_OK;
}

int tensor_set_autoflex(tensor_t *t, const char *preset)
{
    int rc = check_flex(t, __func__);
    if (rc != FX_OK) return rc;
    if (!preset) return FX_FAIL(FX_EINVAL, "preset is NULL");
    fx_autoflex_config cfg;
    if (fx_af_preset(preset, &cfg) != FX_OK)
        return FX_FAIL(FX_ENAME, "unknown Autoflex preset '%s' (known: published, fixed, "
                       "truemax, exact_init, robust)", preset);
    if ((rc = fx_storage_settle(t->st, __func__))) return rc;
    fx_af_reset(&t->st->af, &cfg);
    return FX_OK;
}

int tensor_get_autoflex_config(const tensor_t *t, fx_autoflex_config *cfg)
{
    int rc = check_flex(t, __func__);
    if (rc != FX_OK) return rc;
    if (!cfg) return FX_FAIL(FX_EINVAL, "cfg is NULL");
    *cfg = t->st->af.cfg;
    return FX_OK;
}
