/* Smallest training program: an MLP learns a synthetic dataset in flex16_5. It links
 * libflexpoint_train (datasets, models, the trainer), which brings libflexpoint. */
#include <flexpoint.h>
#include <flexpoint_data.h>
#include <flexpoint_train.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    fx_dataset *ds = fx_dataset_synthetic(512, 1, 8, 8, 4, 7);
    if (!ds) {
        fprintf(stderr, "fx_dataset_synthetic: %s\n", flexpoint_last_error());
        return 1;
    }
    fx_train_config cfg;
    fx_train_config_default(&cfg);
    strcpy(cfg.model, "mlp64x1");
    cfg.fmt = FMT_FLEX16_5;
    cfg.batch_size = 32;
    cfg.lr = 0.05;
    cfg.epochs = 3;
    cfg.seed = 1;
    fx_trainer *t = fx_trainer_new(&cfg, ds, NULL);
    if (!t) {
        fprintf(stderr, "fx_trainer_new: %s\n", flexpoint_last_error());
        fx_dataset_free(ds);
        return 1;
    }
    double acc0 = 0, loss0 = 0, acc = 0, loss = 0;
    int rc = fx_trainer_evaluate(t, ds, &acc0, &loss0);
    for (int e = 0; e < cfg.epochs && rc == FX_OK; e++) {
        fx_epoch_metrics m;
        rc = fx_trainer_epoch(t, &m);
    }
    if (rc == FX_OK) rc = fx_trainer_evaluate(t, ds, &acc, &loss);
    fx_trainer_free(t);
    fx_dataset_free(ds);
    if (rc != FX_OK) {
        fprintf(stderr, "training: %s\n", flexpoint_last_error());
        return 1;
    }
    printf("flex16_5 mlp64x1: loss %.4f -> %.4f, accuracy %.3f -> %.3f\n", loss0, loss, acc0, acc);
    /* three epochs on this easy problem must lower the loss */
    if (!(isfinite(loss) && loss < loss0)) {
        fprintf(stderr, "the loss did not fall\n");
        return 1;
    }
    return 0;
}
