/**
 * @file
 * @brief flexpoint training API: build a model, train it in one number format, evaluate, read
 * metrics and Autoflex statistics, save and resume checkpoints. The command-line tool
 * flexpoint-train and the Python binding are thin layers over these functions.
 *
 * Conventions are those of flexpoint.h. A trainer owns its model, optimiser state and
 * buffers; it borrows the datasets (they must outlive it).
 *
 * Devices (fx_train_config.device >= 0, flexpoint_gpu.h): the model's parameters, gradients,
 * activations and op buffers (maxpool argmax, fp32 master weights, momentum, loss-scaler
 * outputs) live in the memory of that CUDA device, and every op runs there. Initial weights
 * are drawn on the host exactly as for a host run, then copied, so both start from the same
 * point. Each batch is assembled and normalised on the host as for a host run, written in the
 * run format into a host staging tensor (registered as "input", so its statistics and trace
 * are those of the host run) and copied to the device; logits are copied back for accuracy
 * and the evaluation loss. Batch-norm running statistics stay on the host. The other named
 * tensors of fx_trainer_tensor are device tensors: their exponent state, Autoflex history,
 * statistics and traces live on the host and read as usual (tensor_exp, tensor_stat,
 * tensor_trace_*), their elements need tensor_to_host. Checkpoints go through host copies
 * and have the host format: a host checkpoint resumes on a device and vice versa. Calls on a
 * device trainer make its device current on the calling thread. How close a device run
 * stays to the host run is the ops' guarantee (flexpoint_gpu.h): flex16_5/dfp16 GEMMs and
 * convolutions are exact, the float formats' matmuls and fp32 sums differ in summation
 * order, softmax cross-entropy in the device's exp/log.
 */
#ifndef FLEXPOINT_TRAIN_H
#define FLEXPOINT_TRAIN_H

#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Learning-rate schedules (fx_train_config::lr_schedule). */
enum {
    FX_LR_CONSTANT = 0, /**< constant learning rate (the default) */
    FX_LR_COSINE = 1,   /**< cosine decay from lr to 0 over the planned epochs */
    FX_LR_STEP = 2      /**< lr, then lr/10 from half and lr/100 from three quarters of the
                             planned steps */
};

/** @brief Optimisers of the trainer (fx_train_config.optimizer). */
enum {
    FX_OPT_SGD = 0,  /**< SGD with momentum and L2 weight decay (fx_sgd_step; the default) */
    FX_OPT_ADAM = 1, /**< Adam, weight decay added to the gradient (fx_adam_step) */
    FX_OPT_ADAMW = 2 /**< AdamW, decoupled weight decay (fx_adamw_step) */
};

/** @brief Loss-scaling modes (fx_train_config.loss_scaling). */
enum {
    FX_LOSS_SCALING_AUTO = -1,   /**< dynamic for fp16 runs, off otherwise (the default) */
    FX_LOSS_SCALING_OFF = 0,     /**< no scaling */
    FX_LOSS_SCALING_DYNAMIC = 1, /**< grow after clean steps, back off and skip on Inf/NaN */
    FX_LOSS_SCALING_STATIC = 2   /**< a fixed scale (loss_scale_init); steps whose gradients
                                      hold Inf/NaN are skipped, the scale never changes */
};

/** @brief Training configuration. Passed by pointer; fill it with fx_train_config_default()
 *  first. Checkpoints store it; fx_trainer_load() compares model, format, batch size, master
 *  weights, seed and optimiser. */
typedef struct fx_train_config {
    char model[16];          /**< a model name (fx_model_check()): "mlp", "cnn", "resnet20",
                                  "transformer" or a member of their families, NUL-terminated
                                  within the field */
    int fmt;                 /**< fmt_t of the weights, activations and gradients of every
                                  GEMM and conv */
    int master_weights;      /**< 1: fp32 master weights (default); 0: update in the format.
                                  Other values: FX_EINVAL */
    int loss_scaling;        /**< FX_LOSS_SCALING_AUTO (-1, the default: dynamic for fp16
                                  only), _OFF (0), _DYNAMIC (1) or _STATIC (2). Other values:
                                  FX_EINVAL */
    int stochastic_rounding; /**< 1: stochastic rounding of weight writes; 0 (default) */
    char autoflex[16];       /**< Autoflex preset of flex16_5 tensors (default "robust"),
                                  NUL-terminated within the field; checked in every format */
    int grad_window_lo;      /**< flex16_5 window start for gradient tensors (default -44) */
    int act_window_lo;       /**< ... for activations (default -31) */
    int weight_window_lo;    /**< ... for weights (default -31) */
    int batch_size;          /**< default 128 */
    double lr;               /**< default 0.02 */
    double momentum;         /**< default 0.9 */
    double weight_decay;     /**< default 0 */
    int lr_schedule;         /**< FX_LR_CONSTANT (default), FX_LR_COSINE, FX_LR_STEP */
    int epochs;              /**< planned epochs (for the schedule); default 5 */
    int augment;             /**< 1: random crop (pad 4) + horizontal flip (CIFAR); default 0.
                                  Other values: FX_EINVAL */
    uint64_t seed;           /**< initial weights, batch order, augmentation */
    int threads;             /**< 0: library default; else 1..1024 threads (a process-wide
                                  setting, flexpoint_set_num_threads) */
    int device;              /**< -1: host (default); >= 0: CUDA device ordinal to train on.
                                  fx_trainer_new fails with FX_EDEVICE and a message when the
                                  library has no CUDA backend or the device does not exist */
    int optimizer;           /**< FX_OPT_SGD (default), FX_OPT_ADAM or FX_OPT_ADAMW; momentum
                                  applies to SGD only */
    double adam_beta1;       /**< Adam/AdamW first-moment decay, [0, 1) (default 0.9) */
    double adam_beta2;       /**< second-moment decay, [0, 1) (default 0.999) */
    double adam_eps;         /**< > 0 (default 1e-8) */
    double clip_norm;        /**< > 0: scale the gradients so that their global L2 norm is at
                                  most this before each step (fx_clip_grad_norm); 0: off
                                  (default) */
    double loss_scale_init;  /**< initial (or static) loss scale, finite, > 0 and
                                  representable in fp32 (default 65536) */
    double loss_scale_growth;   /**< dynamic: factor after growth_interval clean steps, > 1
                                     (default 2) */
    double loss_scale_backoff;  /**< dynamic: factor on Inf/NaN, in (0, 1) (default 0.5) */
    int64_t loss_scale_interval;/**< dynamic: clean steps before growing, >= 1 (default
                                     2000) */
    double loss_scale_min;   /**< dynamic: the scale never backs off below this, >= 0 and <=
                                  loss_scale_init (default 0: no floor) */
    char policy[128];        /**< format policy (docs/training.md, "Format policies"): "" (the
                                  default) puts every tensor in fmt; else rules such as
                                  "bn*=fp32; fc2=fp16; grads=bf16" or a preset ("O0", "O1",
                                  "O2", "O3", "edges-fp32", optionally ":FORMAT") on top of fmt.
                                  NUL-terminated within the field. Errors: FX_ENAME (unknown
                                  preset or class, a pattern that matches no layer),
                                  FX_EFORMAT, FX_EINVAL */
} fx_train_config;

/** @brief Check a model name for fx_train_config.model.
 *
 *  The built-in networks and their families (docs/training.md):
 *  - `mlp` or `mlp<W>x<D>`: D hidden linear layers of width W with ReLU, then the classifier
 *    (W in [1, 65536], D in [1, 64]; `mlp` is `mlp256x2`);
 *  - `cnn` or `cnn<C1>-<C2>-<F>`: two 5x5 convolutions of C1 and C2 channels, each with ReLU
 *    and 2x2 max pooling, a hidden linear layer of width F, the classifier (channels in
 *    [1, 4096]; `cnn` is `cnn32-64-128`);
 *  - `resnet<D>` or `resnet<D>x<K>`: the CIFAR ResNet of depth D = 6n+2 (n in [1, 200]: 20, 32,
 *    56, 110, ...) with 16K, 32K and 64K channels (K in [1, 16]; `resnet20` is `resnet20x1`);
 *  - `transformer` or `gpt<L>x<D>h<H>c<T>`: a decoder-only transformer of L pre-norm blocks
 *    (L in [1, 64]) of width D (in [1, 16384]) with H attention heads (H divides D) over
 *    windows of T tokens (T in [1, 1024]), for text datasets (fx_dataset_text() with context
 *    T; the vocabulary is the dataset's classes); `transformer` is `gpt4x128h4c128`.
 *  Numbers are decimal without sign or leading zero. The name must fit the 16-byte field.
 *  @param[in] name The name.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL name, or one not NUL-terminated within 16 bytes.
 *  @retval FX_ENAME not a model name (the message names the problem). */
FX_API int fx_model_check(const char *name);

/** @brief Fill a configuration with the defaults, which match the PyTorch baseline of
 *  docs/experiments.md (batch 128, SGD lr 0.02, momentum 0.9).
 *  @param[out] cfg The configuration. */
FX_API void fx_train_config_default(fx_train_config *cfg);

/** @brief A model with its optimiser state, buffers and position in the data order (opaque).
 *  Created by fx_trainer_new(), freed with fx_trainer_free(). */
typedef struct fx_trainer fx_trainer;

/** @brief Build a model for the datasets' image shape and classes and prepare training in
 *  cfg->fmt on cfg->device.
 *
 *  Initial weights are drawn in fp32 from cfg->seed and then converted, so every format and
 *  every device starts from the same point. test may be NULL. Every field of *cfg is
 *  checked before anything is allocated; the message names the field and its value. NULL on
 *  error, with flexpoint_last_status(): FX_EINVAL (NULL cfg or train, a field out of range,
 *  model or autoflex not NUL-terminated within its char[16]), FX_EFORMAT (fmt), FX_ENAME
 *  (unknown model or Autoflex preset), FX_ERANGE (a flex16_5 window start outside
 *  [-128, 96]), FX_ESHAPE (datasets that do not fit), FX_EDEVICE
 *  (cfg->device cannot be used), FX_ENOMEM.
 *  @param[in] cfg   The configuration.
 *  @param[in] train The training set, borrowed: it must outlive the trainer.
 *  @param[in] test  NULL, or the test set evaluated after each epoch (borrowed likewise).
 *  @return The trainer, which the caller owns and frees with fx_trainer_free(); NULL on
 *          error. */
FX_API fx_trainer *fx_trainer_new(const fx_train_config *cfg, const fx_dataset *train,
                                  const fx_dataset *test);
/** @brief Free a trainer with its model, optimiser state and buffers (not the datasets).
 *  @param[in] t The trainer; NULL is a no-op. */
FX_API void fx_trainer_free(fx_trainer *t);

/** @brief A group of processes that train one model together (data parallelism over MPI;
 *  docs/distributed.md). Opaque; created by fx_comm_init() or fx_comm_from_mpi(), freed with
 *  fx_comm_free(). Every function that takes one is collective: each rank of the group calls
 *  it, in the same order. */
typedef struct fx_comm fx_comm;

/** @brief Whether the library was built with MPI (CMake option FLEXPOINT_MPI).
 *  @return 1 with MPI, else 0. */
FX_API int fx_comm_available(void);

/** @brief A communicator over every process of the job (MPI_COMM_WORLD, duplicated), starting
 *  MPI when the program has not (fx_comm_free() then finalises it).
 *  @param[in,out] argc NULL, or main's argc (handed to MPI_Init_thread).
 *  @param[in,out] argv NULL, or main's argv.
 *  @param[out]    out  Receives the communicator.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL out.
 *  @retval FX_EUNSUPPORTED the library was built without MPI (the message says how to build
 *          it with MPI).
 *  @retval FX_EIO MPI could not be started.
 *  @retval FX_ENOMEM */
FX_API int fx_comm_init(int *argc, char ***argv, fx_comm **out);

/** @brief A communicator over the processes of an MPI communicator of the program's own
 *  (duplicated, so the library's messages never mix with the program's). MPI must be
 *  initialised, with at least MPI_THREAD_FUNNELED.
 *  @param[in]  mpi_comm A pointer to an MPI_Comm.
 *  @param[out] out      Receives the communicator.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL argument, or MPI is not initialised.
 *  @retval FX_EUNSUPPORTED the library was built without MPI.
 *  @retval FX_EIO the communicator cannot be duplicated.
 *  @retval FX_ENOMEM */
FX_API int fx_comm_from_mpi(const void *mpi_comm, fx_comm **out);

/** @brief This process's rank in the group.
 *  @param[in] c The communicator.
 *  @return The rank, 0-based; FX_EINVAL (message set) for a NULL c. */
FX_API int fx_comm_rank(const fx_comm *c);
/** @brief Number of processes in the group.
 *  @param[in] c The communicator.
 *  @return The count; FX_EINVAL (message set) for a NULL c. */
FX_API int fx_comm_size(const fx_comm *c);

/** @brief Collective agreement on success: every rank passes its own status and all receive
 *  the same answer, so that no rank goes on alone into a collective that another rank will
 *  never reach (e.g. after one rank failed to load its data).
 *  @param[in]  c            The communicator.
 *  @param[in]  local_status This rank's status (FX_OK or a negative FX_E* code).
 *  @param[out] failed_rank  NULL, or receives the lowest failing rank (-1 when none failed).
 *  @return FX_OK when every rank passed FX_OK; else the lowest failing rank's status (on the
 *          other ranks with a message naming that rank); FX_EINVAL for a NULL c; FX_EIO when
 *          the agreement itself fails. */
FX_API int fx_comm_agree(fx_comm *c, int local_status, int *failed_rank);

/** @brief End every process of the group at once (MPI_Abort with exit code `code`): what a
 *  program does when one rank fails in the middle of training, where its peers would otherwise
 *  wait for it forever. Never called by the library itself.
 *  @param[in] c    The communicator (NULL: nothing happens).
 *  @param[in] code The exit status of the processes. */
FX_API void fx_comm_abort(fx_comm *c, int code);

/** @brief Free a communicator; finalises MPI when fx_comm_init() started it. Collective.
 *  @param[in] c The communicator; NULL is a no-op. */
FX_API void fx_comm_free(fx_comm *c);

/** @brief Bytes a rank hands to MPI during training steps (fx_trainer_traffic()): the
 *  payload of its collectives, not the transport's own overhead. */
typedef struct fx_dist_traffic {
    int64_t steps;            /**< training steps counted */
    int64_t gradient_bytes;   /**< parameter gradients: int64 partial sums (flex16_5, dfp16
                                   and any integer-compute gradient) or fp32 partial sums */
    int64_t statistics_bytes; /**< shared-exponent writes of batch tensors: the maximum, the
                                   statistics of each quantisation (8 x 8 bytes each) */
    int64_t gather_bytes;     /**< rows gathered: per-sample losses and conv bias row sums */
    int64_t control_bytes;    /**< accuracy counts and the loss scaler's found-inf flag */
} fx_dist_traffic;

/** @brief fx_trainer_new() for one rank of a group that trains one model together.
 *
 *  Every rank builds the same trainer from the same configuration and datasets (each rank
 *  loads them itself). Each global batch of cfg->batch_size images, in the one-process order,
 *  is split into comm-size consecutive parts of batch_size / size images, one per rank; the
 *  gradients are summed over the ranks before each write, and batch tensors choose their
 *  shared exponent from every rank's values, so that every rank holds the same weights after
 *  each step. What this keeps bit-identical to a one-process run (flex16_5 and dfp16: every
 *  weight, loss and metric, at any rank count; fp32, fp16 and bf16: the same bits at the same
 *  rank count) is in docs/distributed.md. Collective: every rank gets a trainer, or every
 *  rank gets NULL (a rank whose own checks passed reports which rank failed).
 *  fx_trainer_save() then writes from rank 0 only and returns rank 0's status on every rank;
 *  fx_trainer_load() reads on every rank and fails on every rank when one fails.
 *  @param[in] cfg   The configuration, the same on every rank (checked: FX_EINVAL otherwise).
 *  @param[in] train The training set, borrowed.
 *  @param[in] test  NULL, or the test set, borrowed.
 *  @param[in] comm  The group; NULL: fx_trainer_new().
 *  @return The trainer, or NULL with flexpoint_last_status(): fx_trainer_new()'s errors, and
 *          FX_EINVAL (batch_size not a multiple of the rank count, or ranks whose
 *          configurations differ), FX_EUNSUPPORTED (a CUDA device, or a model with batch
 *          normalisation, whose statistics would be those of a rank's part of the batch). */
FX_API fx_trainer *fx_trainer_new_distributed(const fx_train_config *cfg,
                                              const fx_dataset *train, const fx_dataset *test,
                                              fx_comm *comm);

/** @brief Bytes this rank handed to MPI in the training steps since the trainer was built
 *  (evaluation excluded); all zero for a trainer without a communicator.
 *  @param[in]  t  The trainer.
 *  @param[out] tr Filled.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL t or tr. */
FX_API int fx_trainer_traffic(const fx_trainer *t, fx_dist_traffic *tr);

/** @brief Metrics of one epoch (or of an evaluation). */
typedef struct fx_epoch_metrics {
    int epoch;               /**< 1-based epoch just finished */
    double train_loss;       /**< mean training loss over the epoch's steps */
    double train_accuracy;   /**< accuracy on the training batches as they were trained */
    double test_loss;        /**< -1 when there is no test set */
    double test_accuracy;    /**< -1 when there is no test set */
    double seconds;          /**< training time of the epoch (evaluation excluded) */
    double images_per_second; /**< training images per second of the epoch's training time */
    int64_t steps;           /**< optimiser steps in the epoch */
    int64_t skipped_steps;   /**< steps skipped by the loss scaler */
    int64_t nonfinite_losses;/**< steps whose loss was NaN/Inf */
    double loss_scale;       /**< loss scale at the end of the epoch (1 when off) */
} fx_epoch_metrics;

/** @brief One optimiser step on the next batch (batches follow the seeded order; an epoch
 *  drops the last partial batch).
 *  @param[in,out] t    The trainer.
 *  @param[out]    loss Receives the batch loss; may be NULL.
 *  @return FX_OK; FX_EINVAL for a NULL t; otherwise the status of the op that failed (e.g.
 *          FX_ENOMEM, FX_EDEVICE). */
FX_API int fx_trainer_step(fx_trainer *t, float *loss);
/** @brief Train the rest of the current epoch, then evaluate on the test set.
 *  @param[in,out] t The trainer.
 *  @param[out]    m The epoch's metrics.
 *  @return FX_OK; FX_EINVAL for a NULL t or m; otherwise as fx_trainer_step() and
 *          fx_trainer_evaluate(). */
FX_API int fx_trainer_epoch(fx_trainer *t, fx_epoch_metrics *m);
/** @brief Evaluate on a dataset (inference mode).
 *
 *  Every call starts from evaluation tensors in their initial state (zeros, fresh Autoflex
 *  and exponent state), so its result does not depend on earlier calls. On the host, the
 *  trainer keeps those tensors' memory from one call to the next (the pages stay mapped;
 *  as much again as one batch's activations) until it is freed; fx_trainer_predict() shares it.
 *  @param[in,out] t        The trainer.
 *  @param[in]     ds       A dataset with the training set's image shape and classes.
 *  @param[out]    accuracy Accuracy in [0, 1]; may be NULL.
 *  @param[out]    loss     Mean loss; may be NULL.
 *  @return FX_OK; FX_EINVAL for a NULL t or ds; FX_ESHAPE for a dataset of another shape;
 *          otherwise the status of the op that failed (e.g. FX_ENOMEM, FX_EDEVICE). */
FX_API int fx_trainer_evaluate(fx_trainer *t, const fx_dataset *ds, double *accuracy,
                               double *loss);
/** @brief Evaluate the trainer's weights in another format or format policy, with fp32 images in
 *  and fp32 logits out: a post-training "what if this model ran in format F" question.
 *
 *  When fmt, autoflex and policy are the trainer's own, this is fx_trainer_evaluate(t, ...)
 *  exactly (the accuracy a training run reports). Otherwise a temporary host trainer of the same
 *  model in fmt under policy receives t's weights and batch-norm statistics as
 *  fx_trainer_copy_weights() gives them (fp32 values, one write each, so a shared-exponent
 *  format chooses its exponents and records Autoflex statistics), is evaluated, and is freed.
 *  Master weights and loss scaling play no part. t's weights, optimiser state and position are
 *  unchanged either way.
 *  @param[in,out] t        The trainer (host or device; its evaluation state is used when fmt
 *                          and policy are its own).
 *  @param[in]     fmt      The format to evaluate in (FMT_*).
 *  @param[in]     autoflex An Autoflex preset for flex16_5 tensors; NULL or "" for the
 *                          trainer's own when fmt is its format, else the default ("robust").
 *  @param[in]     policy   A format policy (fx_train_config.policy syntax) on top of fmt; NULL
 *                          or "" for none.
 *  @param[in]     ds       A dataset with the training set's image shape and classes.
 *  @param[out]    accuracy Accuracy in [0, 1]; may be NULL.
 *  @param[out]    loss     Mean loss; may be NULL.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL t or ds, or a policy fx_trainer_new() refuses as invalid.
 *  @retval FX_EFORMAT an unknown fmt, or an unknown format in the policy.
 *  @retval FX_ENAME an unknown Autoflex preset, policy preset or class, a policy rule that
 *          matches no layer, or a preset or policy too long for fx_train_config.
 *  @retval FX_ESHAPE a dataset of another shape.
 *  @retval FX_EUNSUPPORTED another format or policy asked of a distributed trainer.
 *  @return otherwise the status of the op that failed (e.g. FX_ENOMEM, FX_EDEVICE). */
FX_API int fx_trainer_evaluate_as(fx_trainer *t, int fmt, const char *autoflex,
                                  const char *policy, const fx_dataset *ds, double *accuracy,
                                  double *loss);

/** @brief The logits of the trainer's model for n samples (inference mode, as
 *  fx_trainer_evaluate() runs it): e.g. to sample text from a sequence model.
 *
 *  Each sample is C x H x W floats as fx_dataset_batch() gives them: raw pixels, which are
 *  normalised as in training, or, for a sequence model, T token numbers (whole numbers in
 *  [0, classes)). Samples run in batches of the configured batch size; the weights, optimiser
 *  state and position are unchanged.
 *  @param[in,out] t      A one-process trainer (host or device).
 *  @param[in]     inputs n samples, sample-major; read only.
 *  @param[in]     n      Samples, >= 1.
 *  @param[out]    logits Receives n x classes floats, or for a sequence model n x T x classes
 *                        (one row of logits per position; the caller owns the buffer).
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL argument or n < 1.
 *  @retval FX_ERANGE a sequence model's input that is not a token number in [0, classes).
 *  @retval FX_EUNSUPPORTED a distributed trainer.
 *  @return otherwise the status of the op that failed (e.g. FX_ENOMEM, FX_EDEVICE). */
FX_API int fx_trainer_predict(fx_trainer *t, const float *inputs, int64_t n, float *logits);

/** @brief Optimiser steps taken so far.
 *  @param[in] t The trainer.
 *  @return The count; FX_EINVAL (message set) for a NULL t. */
FX_API int64_t fx_trainer_global_step(const fx_trainer *t);
/** @brief The current epoch, 0-based (once every step of an epoch is taken, the next one).
 *  @param[in] t The trainer.
 *  @return The epoch; FX_EINVAL (message set) for a NULL t. */
FX_API int fx_trainer_epoch_index(const fx_trainer *t);
/** @brief The trainer's loss-scaler state.
 *  @param[in] t The trainer.
 *  @return A pointer owned by the trainer, valid until it is freed; NULL (message set) for a
 *          NULL t. */
FX_API const fx_loss_scaler *fx_trainer_loss_scaler(const fx_trainer *t);

/** @brief Number of the trainer's named tensors.
 *
 *  The trainer's tensors (weights "<layer>.w", gradients "<layer>.w.grad", activations
 *  "<layer>.out", pre-bias outputs "<layer>.pre", input gradients "<layer>.dx"), for
 *  statistics and traces. The tensors stay owned by the trainer. In fp32/fp16/bf16 runs a
 *  convolution followed by its ReLU is one fused op (tensor_conv2d_bias_relu) writing the
 *  ReLU's output, so that convolution has no "<layer>.out" / ".pre" of its own; likewise a
 *  batch norm or an fp16/bf16 residual add followed by its ReLU writes only the ReLU's output,
 *  and an fp16/bf16 ReLU whose output feeds two layers makes its input gradient without
 *  storing the sum of theirs; in every format a max pool (non-overlapping windows; 2 x 2 in
 *  FLEX16_5/DFP16) right after a ReLU applies the ReLU's gate to its own output gradient and
 *  scatters it into the ReLU's "<relu>.dx", leaving the values of its own "<pool>.dx"
 *  unwritten (in FLEX16_5/DFP16 its write, exponent, statistics and trace are made): those
 *  "<layer>.out", "<relu>.dy" and "<pool>.dx" stay listed (a
 *  checkpoint's layout does not depend on the format) but fx_trainer_tensor() refuses them
 *  with FX_ESTATE after a step that left them unwritten (set FLEXPOINT_NO_FUSION=1 to keep
 *  them all). In FLEX16_5/DFP16 runs a convolution with a bias and a ReLU writes its
 *  "<layer>.pre" (exponent, statistics, trace) without storing its values where the bias add
 *  and ReLU come from its chunks (docs/training.md).
 *  @param[in] t The trainer.
 *  @return The count; FX_EINVAL for a NULL t. */
FX_API int fx_trainer_tensor_count(const fx_trainer *t);
/** @brief Name of one of the trainer's tensors (see fx_trainer_tensor_count()).
 *  @param[in] t The trainer.
 *  @param[in] i Tensor index, 0 <= i < fx_trainer_tensor_count().
 *  @return The name, owned by the trainer; NULL (FX_EINVAL set) for a NULL t or a bad i. */
FX_API const char *fx_trainer_tensor_name(const fx_trainer *t, int i);
/** @brief One of the trainer's tensors, for statistics and traces.
 *  @param[in] t The trainer.
 *  @param[in] i Tensor index, 0 <= i < fx_trainer_tensor_count().
 *  @return The tensor, owned by the trainer (do not free it); NULL (FX_EINVAL set) for a NULL
 *          t or a bad i; NULL (FX_ESTATE set, naming the tensor) for a tensor that the last
 *          training step's fused ops left unwritten (see fx_trainer_tensor_count()). */
FX_API tensor_t *fx_trainer_tensor(fx_trainer *t, int i);
/** @brief Index of a tensor by name.
 *  @param[in] t    The trainer.
 *  @param[in] name The tensor's name.
 *  @return The index (>= 0); FX_EINVAL for a NULL t or name; FX_ENAME when no tensor has the
 *          name. */
FX_API int fx_trainer_tensor_find(const fx_trainer *t, const char *name);

/** @brief Number of parameters (weights) of the model.
 *  @param[in] t The trainer.
 *  @return The count; FX_EINVAL with a message for NULL t. */
FX_API int64_t fx_trainer_param_count(const fx_trainer *t);
/** @brief Copy all fp32 master weights (or the dequantised working weights when there are
 *  none).
 *  @param[in]  t   The trainer.
 *  @param[out] dst fx_trainer_param_count() floats, in tensor order; host memory, also for a
 *                  device trainer.
 *  @return FX_OK; FX_EINVAL for a NULL t or dst; FX_ENOMEM or FX_EDEVICE when the weights
 *          cannot be read. */
FX_API int fx_trainer_get_params(const fx_trainer *t, float *dst);

/** @brief Classes of the trainer's tensors, for fx_train_health: weights ("<layer>.w", "<layer>.b"),
 *  activations ("input", "<layer>.out", "<layer>.pre") and gradients ("<layer>.w.grad",
 *  "<layer>.dx", "<layer>.dy", "loss.dlogits"). */
enum {
    FX_TENSOR_WEIGHTS = 0,     /**< weights */
    FX_TENSOR_ACTIVATIONS = 1, /**< activations */
    FX_TENSOR_GRADIENTS = 2    /**< gradients */
};
/** @brief Number of tensor classes (FX_TENSOR_*): the length of fx_train_health's per-class
 *  arrays. */
#define FX_TENSOR_CLASSES 3

/** @brief Threshold of the health warnings that flexpoint-train prints after each epoch, 1%:
 *  - saturation: one tensor of a class had more than this fraction of the elements written to
 *    it in the epoch saturated (worst_saturated_fraction);
 *  - underflow: one tensor of a class had more than this fraction of its writes zeroed, every
 *    nonzero value rounded to 0 (worst_zeroed_fraction).
 *  Healthy flex16_5 and dfp16 runs have neither (Autoflex keeps saturation at 0), whereas a
 *  window that does not fit the data, e.g. grad_window_lo far too low or too high, shows 100%
 *  in the tensor where it starts. Underflowed elements alone are no sign of trouble: the
 *  small entries of a tensor round to 0 by design (in the loss gradient of a well-fit model
 *  about half of them), so their counts are reported but not judged. */
#define FX_HEALTH_WARN_FRACTION 0.01

/** @brief Numeric health of the current epoch: what the format did to the values it stored, which
 *  the loss alone does not show (a run whose gradients all saturate can sit at a constant
 *  loss). Filled by fx_trainer_health. */
typedef struct fx_train_health {
    int measured;        /**< 1 when the counts below are kept: flex16_5 and dfp16 runs (the
                              float formats' writes keep no statistics; counts are then 0) */
    int64_t steps;       /**< optimiser steps the counts cover */
    /** Per class (FX_TENSOR_*), summed over the last write of each tensor in each step (a
     *  tensor is written once per step; a step skipped by the loss scaler writes no weights):
     *  writes, elements written, elements that saturated, nonzero finite inputs that rounded
     *  to 0, and zeroed writes: writes whose every nonzero input rounded to 0. */
    int64_t writes[FX_TENSOR_CLASSES];
    int64_t written[FX_TENSOR_CLASSES];     /**< see writes */
    int64_t saturated[FX_TENSOR_CLASSES];   /**< see writes */
    int64_t underflow[FX_TENSOR_CLASSES];   /**< see writes */
    int64_t zeroed[FX_TENSOR_CLASSES];      /**< see writes */
    /** Per class: the tensor (an index for fx_trainer_tensor_name) with the largest fraction
     *  of its written elements saturated, and that fraction; -1 and 0 when none saturated.
     *  A single tensor that saturates throughout can hide in a class total, as the tensors
     *  computed from it then hold tiny or zero values, which are no events of their own. */
    int worst_saturated[FX_TENSOR_CLASSES];
    double worst_saturated_fraction[FX_TENSOR_CLASSES]; /**< see worst_saturated */
    /** The same for the fraction of a tensor's writes that were zeroed. */
    int worst_zeroed[FX_TENSOR_CLASSES];
    double worst_zeroed_fraction[FX_TENSOR_CLASSES];    /**< see worst_zeroed */
    int64_t params;            /**< weights checked (fx_trainer_param_count) */
    int64_t nonfinite_weights; /**< weights that are NaN or Inf now, in the fp32 master copy
                                    or in the working copy; counted in every format */
} fx_train_health;

/**
 * @brief Read the numeric health of the current epoch: saturation and underflow per tensor
 *        class, and the weights that are no longer finite.
 *
 * The counts cover the steps of the current epoch: they restart at the first step of each
 * epoch, so right after fx_trainer_epoch they are those of the epoch just reported. They are
 * not saved in checkpoints; after fx_trainer_load they cover the steps taken since. Per step
 * and tensor they count the step's last write. Each write is counted when its statistics are
 * known (a device trainer's steps never wait for them); the end of an epoch and this call
 * complete the writes still pending, which on a device waits for them, and this call copies
 * the weights to the host.
 * Compare worst_saturated_fraction and worst_zeroed_fraction with FX_HEALTH_WARN_FRACTION to
 * decide whether to warn.
 *
 * @param[in,out] t The trainer (its last step's statistics are counted).
 * @param[out]    h Receives the counts; caller-owned. Zeroed on failure.
 * @return FX_OK; FX_EINVAL for a NULL t or h; FX_ENOMEM; FX_EDEVICE when a device trainer's
 *         weights or write statistics cannot be read (message set in every case).
 */
FX_API int fx_trainer_health(fx_trainer *t, fx_train_health *h);

/** @brief Save a checkpoint.
 *
 *  Saves everything needed to resume bit for bit (weights, optimiser and loss-scaler state,
 *  every tensor's exponent and Autoflex history, the position in the data order). Written
 *  atomically and durably: a temporary file, fsync, rename, fsync of the folder; stale
 *  temporaries of killed saves in that folder are removed. FX_EIO names the path on failure;
 *  FX_ERANGE (nothing written) when a master weight or momentum value is NaN/Inf
 *  (docs/robustness.md).
 *  @param[in] t    The trainer.
 *  @param[in] path File to write.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL t or path.
 *  @retval FX_EIO the file cannot be written (the message names the path).
 *  @retval FX_ERANGE a master weight or momentum value is NaN/Inf (nothing written).
 *  @retval FX_ENOMEM
 *  @retval FX_EDEVICE a device trainer's state cannot be copied to the host. */
FX_API int fx_trainer_save(const fx_trainer *t, const char *path);
/** @brief Restore a checkpoint written by a trainer with the same configuration and data
 *  shapes.
 *
 *  Checks magic, version, size, checksum and the range of every field (docs/robustness.md):
 *  FX_ECORRUPT (message names the file, the field and the value) and the trainer unchanged on
 *  any mismatch. FX_EIO at once for a path that is not a regular file (FIFO, folder, ...).
 *  @param[in,out] t    The trainer.
 *  @param[in]     path The checkpoint.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL t or path.
 *  @retval FX_EIO the file cannot be read, or is not a regular file.
 *  @retval FX_ECORRUPT the contents do not fit (the trainer is unchanged).
 *  @retval FX_ENOMEM
 *  @retval FX_EDEVICE the state cannot be copied to a device trainer. */
FX_API int fx_trainer_load(fx_trainer *t, const char *path);

/** @brief Read the training configuration a checkpoint was written with, so that a program can
 *  build the trainer that fx_trainer_load() will accept (model, format, batch size, master
 *  weights, seed and the rest of the recipe).
 *
 *  The header (magic, version, length against the file's size) and the checksum are verified,
 *  and the stored configuration must pass the checks of fx_trainer_new(). Nothing else of the
 *  file is read into memory beyond the file itself. The device field is set to -1 (the host):
 *  where a checkpoint was trained says nothing about where it is evaluated.
 *  @param[in]  path The checkpoint.
 *  @param[out] cfg  Filled on success; unchanged on failure.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL path or cfg.
 *  @retval FX_EIO the file cannot be read, or is not a regular file.
 *  @retval FX_ECORRUPT a bad header or checksum, or a stored configuration out of range (the
 *          message names the file and the field).
 *  @retval FX_ENOMEM */
FX_API int fx_checkpoint_config(const char *path, fx_train_config *cfg);

/** @brief Give dst the trained weights of src, converted into dst's format: what evaluating a
 *  model in another format needs.
 *
 *  Each parameter's fp32 value (src's master weights, or its working weights decoded when it
 *  has none) goes into dst's master weights, when dst keeps them, and is written once into
 *  dst's working weights in dst's format (for flex16_5 and DFP16 a write like any other: the
 *  exponent is chosen, by dst's Autoflex state or exactly, and counted in the statistics).
 *  Batch-norm running means and variances are copied as they are (fp32 in every format).
 *  dst's momentum, loss scaler and position in the data order are left as they were, so dst
 *  can also go on training from these weights.
 *
 *  The two trainers must hold the same model for the same image shape and number of classes;
 *  format, master weights, Autoflex preset and the rest of the recipe may differ.
 *  fx_trainer_evaluate(dst, ...) then evaluates src's model in dst's format, with fp32
 *  images in and fp32 logits out.
 *  @param[in,out] dst Receives the weights (a host trainer).
 *  @param[in]     src Gives them (host or device).
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL trainer, or dst == src.
 *  @retval FX_ESHAPE another model, image shape or class count (the message names the first
 *          difference); dst is unchanged.
 *  @retval FX_EUNSUPPORTED dst lives on a CUDA device; dst is unchanged.
 *  @retval FX_ENOMEM dst is unchanged.
 *  @retval FX_EDEVICE src's weights cannot be copied from its device; dst is unchanged. */
FX_API int fx_trainer_copy_weights(fx_trainer *dst, const fx_trainer *src);

/** @brief Write the model's fp32 weights, with their names and shapes, to a weights file.
 *
 *  The file holds each parameter under its trainer name (conv1.w, fc2.b, bn0.gamma, ...; the
 *  master weights, or the decoded working weights without them) and each batch-norm layer's
 *  running mean and variance, and nothing of the optimiser or the format (docs/training.md
 *  gives the layout; python/flexpoint/weights.py reads and writes it from NumPy). It is
 *  written atomically and durably, as checkpoints are.
 *  @param[in] t    The trainer (host or device).
 *  @param[in] path The file to write.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL t or path.
 *  @retval FX_ERANGE a value is NaN or infinite (nothing written; the message names it).
 *  @retval FX_EIO the file cannot be written.
 *  @retval FX_ENOMEM
 *  @retval FX_EDEVICE a device trainer's weights cannot be copied to the host. */
FX_API int fx_trainer_export_weights(const fx_trainer *t, const char *path);

/** @brief Set the model's weights from a weights file (fx_trainer_export_weights() or
 *  python/flexpoint/weights.py), e.g. of a model trained elsewhere.
 *
 *  The file must name every parameter and batch-norm statistic of the model exactly once, with
 *  its shape, and nothing else; values must be finite and variances not negative. Everything
 *  is checked before the trainer changes. Then each parameter is written as by
 *  fx_trainer_copy_weights() (master weights where kept, one write into the working weights in
 *  the trainer's format) and the statistics are copied; momentum, loss scaler and position
 *  are left as they were.
 *  @param[in,out] t    A host trainer.
 *  @param[in]     path The weights file (plain or gzip-compressed).
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL t or path.
 *  @retval FX_EIO the file cannot be read, or is not a regular file.
 *  @retval FX_ECORRUPT bad magic, version, checksum, lengths or a repeated name (the trainer
 *          is unchanged).
 *  @retval FX_ESHAPE a name the model lacks, or another shape (the trainer is unchanged).
 *  @retval FX_ERANGE a non-finite value or a negative variance (the trainer is unchanged).
 *  @retval FX_EUNSUPPORTED t lives on a CUDA device.
 *  @retval FX_ENOMEM */
FX_API int fx_trainer_import_weights(fx_trainer *t, const char *path);

/** @brief Number of casts the model builder inserted where the format policy changes format
 *  between a layer's input and its weights (each a layer "<layer>.cast": a write into the new
 *  format forward, and back into the old one backward). 0 without a policy.
 *  @param[in] t The trainer.
 *  @return The count, or FX_EINVAL for a NULL t. */
FX_API int fx_trainer_cast_count(const fx_trainer *t);

/** @brief Seconds the training steps of this trainer have spent in its casts (forward and
 *  backward), since it was created: with fx_trainer_cast_count(), what a policy's casts cost.
 *  On the host every cast of every step is timed (two clock reads each); with a CUDA device
 *  only while profiling is on (fx_trainer_profile_enable()), since timing there waits for the
 *  device. Not part of checkpoints. 0 without casts.
 *  @param[in] t The trainer.
 *  @return The seconds, or -1.0 for a NULL t (flexpoint_last_status() is then FX_EINVAL). */
FX_API double fx_trainer_cast_seconds(const fx_trainer *t);

/** @brief Where the time of training steps goes (fx_trainer_profile()). Seconds summed over
 *  the steps measured since profiling was enabled. With a CUDA device each phase waits for the
 *  device before its clock is read, so that asynchronous work is charged to the phase that
 *  launched it (which makes a profiled device run slower). */
typedef struct fx_train_profile {
    int64_t steps;     /**< steps measured */
    double data_s;     /**< batch preparation: loading, augmentation, normalisation, input write */
    double forward_s;  /**< the layers' forward passes (the sum over fx_layer_profile) */
    double loss_s;     /**< softmax cross-entropy and reading the logits */
    double backward_s; /**< the layers' backward passes */
    double update_s;   /**< loss-scaler check, clipping and the optimiser steps */
    double total_s;    /**< whole steps (the phases above plus bookkeeping) */
} fx_train_profile;

/** @brief One layer's share of the measured steps (fx_trainer_layer_profile()). */
typedef struct fx_layer_profile {
    const char *name;  /**< the layer's name, owned by the trainer */
    const char *kind;  /**< "conv", "linear", "relu", "maxpool", "gap", "batchnorm" or "add" */
    double forward_s;  /**< seconds in its forward pass */
    double backward_s; /**< seconds in its backward pass (weight and input gradients) */
} fx_layer_profile;

/** @brief Start (on = 1) or stop (on = 0) timing the phases and layers of training steps.
 *  Starting resets every count. Profiling changes no result; evaluation is not timed.
 *  @param[in,out] t  The trainer.
 *  @param[in]     on 1 or 0.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL t, or on not 0 or 1.
 *  @retval FX_ENOMEM */
FX_API int fx_trainer_profile_enable(fx_trainer *t, int on);

/** @brief The phase times of the steps measured so far (all zero when profiling never ran).
 *  @param[in]  t The trainer.
 *  @param[out] p Filled.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL t or p. */
FX_API int fx_trainer_profile(const fx_trainer *t, fx_train_profile *p);

/** @brief Number of layers of the trainer's model (for fx_trainer_layer_profile()).
 *  @param[in] t The trainer.
 *  @return The count, or FX_EINVAL for a NULL t. */
FX_API int fx_trainer_layer_count(const fx_trainer *t);

/** @brief Layer i's name, kind and measured forward and backward seconds.
 *  @param[in]  t  The trainer.
 *  @param[in]  i  0 <= i < fx_trainer_layer_count().
 *  @param[out] lp Filled; its strings are owned by the trainer.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL t or lp, or i out of range. */
FX_API int fx_trainer_layer_profile(const fx_trainer *t, int i, fx_layer_profile *lp);

/** @brief Seconds of profiled steps spent outside the kernels (fx_trainer_profile_split()).
 *  Conversions: operands widened or quantised into the format an op computes in. Rounding:
 *  results rounded or quantised into the output's format. Autoflex: the exponent bookkeeping
 *  of the shared-exponent formats (FLEX16_5's trials, history and statistics, DFP16's exact
 *  exponent, and the maximum scans both decide from). Work fused into a kernel (the
 *  convolutions' packing and their own rounding of fp16 and bf16 outputs) is the kernel's
 *  time, not counted here. Only the stepping thread's own time counts: in a parallel region,
 *  its share stands for the region's wall time. */
typedef struct fx_time_split {
    double conversion_s; /**< conversions of operands */
    double rounding_s;   /**< rounding of results */
    double autoflex_s;   /**< shared-exponent bookkeeping */
} fx_time_split;

/** @brief fx_time_split per phase of the measured steps (the phases of fx_train_profile). */
typedef struct fx_train_profile_split {
    fx_time_split data;     /**< batch preparation */
    fx_time_split forward;  /**< the layers' forward passes */
    fx_time_split loss;     /**< the loss and reading the logits */
    fx_time_split backward; /**< the layers' backward passes */
    fx_time_split update;   /**< loss-scaler check, clipping and the optimiser steps */
    fx_time_split total;    /**< whole steps: the sum of the phases */
} fx_train_profile_split;

/** @brief The split of the steps measured so far (all zero when profiling never ran).
 *  @param[in]  t The trainer.
 *  @param[out] p Filled.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL t or p. */
FX_API int fx_trainer_profile_split(const fx_trainer *t, fx_train_profile_split *p);

/** @brief Layer i's split, forward and backward: each counted span goes to the layer running
 *  at its midpoint. Summed over the layers: the forward and backward phases' splits.
 *  @param[in]  t        The trainer.
 *  @param[in]  i        0 <= i < fx_trainer_layer_count().
 *  @param[out] forward  Filled.
 *  @param[out] backward Filled.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL t, forward or backward, or i out of range. */
FX_API int fx_trainer_layer_profile_split(const fx_trainer *t, int i, fx_time_split *forward,
                                          fx_time_split *backward);

#ifdef __cplusplus
}
#endif
#endif
