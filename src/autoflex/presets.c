/* Named Autoflex configurations. The public functions that apply them to a tensor are the
 * core's (src/core/tensor_autoflex.c). */
#include "autoflex.h"

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
