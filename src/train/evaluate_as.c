/* fx_trainer_evaluate_as: a trainer's weights evaluated in another format or policy, through a
 * temporary host trainer of the same model that receives them as fx_trainer_copy_weights
 * gives them (fp32 values, one write each). The trainer's own configuration is evaluated by the
 * trainer itself, so that row is exactly what fx_trainer_evaluate reports. */
#include "trainer.h"

#include <stdio.h>
#include <string.h>

int fx_trainer_evaluate_as(fx_trainer *t, int fmt, const char *autoflex, const char *policy,
                           const fx_dataset *ds, double *accuracy, double *loss)
{
    if (!t || !ds) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "dataset");
    if (fmt < 0 || fmt >= FMT_COUNT)
        return FX_FAIL(FX_EFORMAT, "unknown format %d", fmt);
    if (!policy) policy = "";
    fx_train_config defaults;
    fx_train_config_default(&defaults);
    /* no preset named: the trainer's own for its format, else the default configuration's */
    if (!autoflex || !autoflex[0])
        autoflex = fmt == t->cfg.fmt ? t->cfg.autoflex : defaults.autoflex;
    if (strlen(policy) >= sizeof t->cfg.policy)
        return FX_FAIL(FX_ENAME, "policy is longer than %zu bytes", sizeof t->cfg.policy - 1);
    if (strlen(autoflex) >= sizeof t->cfg.autoflex)
        return FX_FAIL(FX_ENAME, "Autoflex preset '%.32s...' is longer than %zu bytes", autoflex,
                       sizeof t->cfg.autoflex - 1);
    int own = fmt == t->cfg.fmt && strcmp(policy, t->cfg.policy) == 0 &&
              (fmt != FMT_FLEX16_5 || strcmp(autoflex, t->cfg.autoflex) == 0);
    if (own) return fx_trainer_evaluate(t, ds, accuracy, loss);
    if (t->comm)
        return FX_FAIL(FX_EUNSUPPORTED, "a distributed trainer evaluates in its own format "
                       "only; evaluate its checkpoint in one process");
    fx_train_config c = t->cfg;
    c.fmt = fmt;
    snprintf(c.autoflex, sizeof c.autoflex, "%s", autoflex);
    snprintf(c.policy, sizeof c.policy, "%s", policy);
    c.device = -1;
    /* Master weights and loss scaling do not act in an evaluation; without them every format
     * and policy (O3 included) is a valid configuration. */
    c.master_weights = 0;
    c.loss_scaling = -1;
    fx_trainer *e = fx_trainer_new_like(t, &c, t->train, t->test);
    if (!e) return flexpoint_last_status();
    int rc = fx_trainer_copy_weights(e, t);
    if (!rc) rc = fx_trainer_evaluate(e, ds, accuracy, loss);
    fx_trainer_free(e);
    return rc;
}
