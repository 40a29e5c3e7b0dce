/* The trainer object shared by trainer.c (loop) and checkpoint.c (save/resume). */
#ifndef FX_TRAIN_TRAINER_H
#define FX_TRAIN_TRAINER_H

#include "model.h"
#include "../core/profile_counters.h"

typedef struct fx_named_tensor {
    char name[64];
    tensor_t *t;
    int cls;            /* FX_TENSOR_WEIGHTS, _ACTIVATIONS or _GRADIENTS */
    const int *stale;   /* NULL, or the layer's flag set while a fused route leaves t unwritten */
    /* this epoch's writes, elements written, saturated and underflowed, and writes that
     * stored only zeros from nonzero inputs (fx_trainer_health fills them from the storage's
     * write tally: per step, its last write) */
    int64_t writes, written, saturated, underflow, zeroed;
} fx_named_tensor;

struct fx_trainer {
    fx_train_config cfg;
    fx_model m;
    fx_model_def *def;         /* fx_trainer_new_model: a copy of the definition (else NULL) */
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
    /* predictions per sample: T for a sequence model (one per position), else 1; seen_rows
     * counts the predictions of the epoch (the denominator of its accuracy) */
    int64_t rows, seen_rows;
    /* Write statistics of the current epoch (fx_trainer_health) are tallied by the registered
     * tensors' storages (fx_write_tally), per step the last write's, when a write's statistics
     * are known: a device's writes are waited for at an epoch's end and by
     * fx_trainer_health, not at every step. Not part of checkpoints: health_step is the global
     * step the counts reach, so a trainer whose position was changed by fx_trainer_load
     * starts counting afresh. */
    int64_t health_steps, health_step;
    float *aug_tmp;            /* one image plane, for augmentation */
    /* fx_trainer_profile_enable: phase times of the steps since profiling started (the layer
     * times are in m.prof_fwd / m.prof_bwd); not part of checkpoints */
    int profiling;
    fx_train_profile prof;
    /* the profile's split (fx_trainer_profile_split): the sink attached to the stepping thread
     * during a profiled step, its totals when the current phase began, the phases' and the
     * layers' splits ([nlayers] each) and the layers' times when the current phase began */
    fx_prof_sink prof_sink;
    uint64_t prof_mark[FX_PROF_NCAT];
    fx_train_profile_split prof_split;
    fx_time_split *prof_split_fwd, *prof_split_bwd;
    double *prof_layer0;
    /* registry of tensors by name */
    fx_named_tensor *reg;
    int nreg;
    /* Data parallelism (fx_trainer_new_distributed; NULL, 0, 1 without): the group, this
     * rank, the rank count and this rank's part of each batch (cfg.batch_size without a
     * group); row_loss holds one batch's per-sample losses, gathered from every rank; traffic
     * counts the bytes of the training steps. */
    struct fx_comm *comm;
    int rank, nranks;
    int64_t local_batch;
    double *row_loss;
    fx_dist_traffic traffic;
};

/* A trainer of like's model under cfg (cfg->model aside): fx_trainer_new_model with like's
 * definition when it was built from one, else fx_trainer_new (e.g. a temporary trainer of the
 * same network in another format). */
fx_trainer *fx_trainer_new_like(const fx_trainer *like, const fx_train_config *cfg,
                                const fx_dataset *train, const fx_dataset *test);

/* Every field of a configuration in its documented range: FX_OK, or the status with a message
 * reported as fx_trainer_new's that names the field and its value. */
int fx_train_config_validate(const fx_train_config *c);

/* Set every parameter of a host trainer from fp32 values in parameter order: the master
 * weights where kept, and one write into each working tensor in its format (transfer.c). */
int fx_trainer_set_params(fx_trainer *t, const float *vals);

/* Batch order of epoch e (a pure function of the seed and e). */
void fx_trainer_make_perm(fx_trainer *t, int epoch);

/* Make the trainer's CUDA device current on the calling thread (new device tensors and
 * buffers go to the thread's current device); FX_OK at once on the host. */
int fx_trainer_use_device(const fx_trainer *t);

#endif
