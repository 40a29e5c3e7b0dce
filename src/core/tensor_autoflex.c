/* The public Autoflex functions of a tensor (tensor_set_autoflex*, tensor_get_autoflex_config,
 * fx_autoflex_preset) and the validation that reports through the library's error message.
 * They live in the core because they read the tensor, settle its pending write and set the
 * error; the presets and the algorithm they apply are src/autoflex's, which knows nothing of
 * tensors (docs/architecture.md, "Layers"). */
#include "internal.h"

int fx_af_config_validate(const fx_autoflex_config *cfg)
{
    char why[256];
    int rc = fx_af_config_check(cfg, why, sizeof why);
    /* reported under this function's name, as callers and messages have always seen it */
    if (rc != FX_OK) return fx_error(rc, __func__, "%s", why);
    return FX_OK;
}

int fx_autoflex_preset(const char *name, fx_autoflex_config *cfg)
{
    if (!name) return FX_FAIL(FX_EINVAL, "name is NULL");
    if (!cfg) return FX_FAIL(FX_EINVAL, "cfg is NULL");
    if (fx_af_preset(name, cfg) != FX_OK)
        return FX_FAIL(FX_ENAME, "unknown Autoflex preset '%s' (known: " FX_AF_PRESET_NAMES ")",
                       name);
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
        return FX_FAIL(FX_ENAME, "unknown Autoflex preset '%s' (known: " FX_AF_PRESET_NAMES ")",
                       preset);
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
