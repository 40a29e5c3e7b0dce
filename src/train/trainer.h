/* The trainer object shared by trainer.c (loop) and checkpoint.c (save/resume). */
#ifndef FX_TRAIN_TRAINER_H
#define FX_TRAIN_TRAINER_H

#include "model.h"

typedef struct fx_named_tensor {
    char name[64];
    tensor_t *t;
} fx_named_tensor;

struct fx_trainer {
    fx_train_config cfg;
    fx_model m;
    const fx_dataset *train, *test;
    int C, H, W, classes;
    double mean[4], stdv[4];   /* per-channel normalisation from the training set */
    int64_t steps_per_epoch;
    int epoch;                 /* 0-based index of the current epoch */
    int64_t step_in_epoch;
    int epoch_reported;        /* fx_trainer_epoch has reported the finished epoch */
    int64_t global_step;
    int64_t *perm;             /* batch order of the current epoch */
    float *xbuf;
    int32_t *ybuf;
    float *logits_buf;
    tensor_t *dlogits;
    tensor_t *logits_host;     /* with a device: host copy of the logits, for accuracy */
    fx_loss_scaler scaler;
    int scaling;
    /* accumulators of the current epoch */
    double loss_sum, seconds;
    int64_t correct, seen, skipped, nonfinite;
    /* registry of tensors by name */
    fx_named_tensor *reg;
    int nreg;
};

/* Batch order of epoch e (a pure function of the seed and e). */
void fx_trainer_make_perm(fx_trainer *t, int epoch);

/* Make the trainer's CUDA device current on the calling thread (new device tensors and
 * buffers go to the thread's current device); FX_OK at once on the host. */
int fx_trainer_use_device(const fx_trainer *t);

#endif
