/* Training configurations an adversary wrote, and runs that fail numerically without a word.
 *
 * - Every field of fx_train_config out of range (each bound, NaN and Inf for the doubles) is
 *   refused by fx_trainer_new with the documented status and a message naming the field and
 *   its value; unterminated model/autoflex fields are refused, not read past; the bounds
 *   themselves are accepted. Under ASan a refused configuration must leak nothing.
 * - The trainer's getters set a message for a NULL trainer.
 * - augment works on images of any size (it used to be skipped above 4096 pixels).
 * - fx_trainer_health: a healthy run has no saturation and no zeroed writes; a gradient window
 *   far too low saturates, one far too high zeroes the gradients; fp16 without loss scaling
 *   and a learning rate that blows the weights up reports non-finite weights; the counts
 *   cover one epoch and restart after a load. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

/* fx_trainer_new refuses c with status `want` and a message holding `frag`. */
static void refused(const fx_train_config *c, const fx_dataset *tr, int want, const char *frag,
                    const char *what)
{
    flexpoint_clear_error();
    fx_trainer *t = fx_trainer_new(c, tr, NULL);
    CHECK(t == NULL, "%s: accepted", what);
    CHECK(flexpoint_last_status() == want, "%s: status %s, wanted %s ('%s')", what,
          flexpoint_status_str(flexpoint_last_status()), flexpoint_status_str(want),
          flexpoint_last_error());
    CHECK(strstr(flexpoint_last_error(), frag) != NULL &&
              strstr(flexpoint_last_error(), "fx_trainer_new") != NULL,
          "%s: message '%s' lacks '%s'", what, flexpoint_last_error(), frag);
    fx_trainer_free(t);
}

static void accepted(const fx_train_config *c, const fx_dataset *tr, const char *what)
{
    fx_trainer *t = fx_trainer_new(c, tr, NULL);
    CHECK(t != NULL, "%s: refused: %s", what, flexpoint_last_error());
    fx_trainer_free(t);
}

#define INT_CASE(field, value, status, frag)                                                  \
    do {                                                                                      \
        fx_train_config c_;                                                                   \
        test_train_config(&c_, "mlp", FMT_FLEX16_5, 1);                                       \
        c_.field = (value);                                                                   \
        refused(&c_, tr, status, frag, #field "=" #value);                                    \
    } while (0)

#define OK_CASE(field, value)                                                                 \
    do {                                                                                      \
        fx_train_config c_;                                                                   \
        test_train_config(&c_, "mlp", FMT_FLEX16_5, 1);                                       \
        c_.field = (value);                                                                   \
        accepted(&c_, tr, #field "=" #value);                                                 \
    } while (0)

static void config_fields(const fx_dataset *tr)
{
    INT_CASE(fmt, 42, FX_EFORMAT, "fmt=42");
    INT_CASE(fmt, -1, FX_EFORMAT, "fmt=-1");
    INT_CASE(master_weights, 2, FX_EINVAL, "master_weights=2");
    INT_CASE(master_weights, -1, FX_EINVAL, "master_weights=-1");
    INT_CASE(loss_scaling, 3, FX_EINVAL, "loss_scaling=3");
    INT_CASE(loss_scaling, -2, FX_EINVAL, "loss_scaling=-2");
    INT_CASE(stochastic_rounding, 2, FX_EINVAL, "stochastic_rounding=2");
    INT_CASE(stochastic_rounding, -1, FX_EINVAL, "stochastic_rounding=-1");
    INT_CASE(grad_window_lo, -129, FX_ERANGE, "grad_window_lo=-129");
    INT_CASE(grad_window_lo, 97, FX_ERANGE, "grad_window_lo=97");
    INT_CASE(act_window_lo, -129, FX_ERANGE, "act_window_lo=-129");
    INT_CASE(act_window_lo, 97, FX_ERANGE, "act_window_lo=97");
    INT_CASE(weight_window_lo, -2147483647 - 1, FX_ERANGE, "weight_window_lo=-2147483648");
    INT_CASE(weight_window_lo, 97, FX_ERANGE, "weight_window_lo=97");
    INT_CASE(batch_size, 0, FX_EINVAL, "batch_size=0");
    INT_CASE(batch_size, 65537, FX_EINVAL, "batch_size=65537");
    INT_CASE(lr, 0.0, FX_EINVAL, "lr=0");
    INT_CASE(lr, -1.0, FX_EINVAL, "lr=-1");
    INT_CASE(lr, NAN, FX_EINVAL, "lr=nan");
    INT_CASE(lr, INFINITY, FX_EINVAL, "lr=inf");
    INT_CASE(momentum, -0.5, FX_EINVAL, "momentum=-0.5");
    INT_CASE(momentum, 1.0, FX_EINVAL, "momentum=1");
    INT_CASE(momentum, NAN, FX_EINVAL, "momentum=nan");
    INT_CASE(weight_decay, -1e-9, FX_EINVAL, "weight_decay=-1e-09");
    INT_CASE(weight_decay, NAN, FX_EINVAL, "weight_decay=nan");
    INT_CASE(weight_decay, INFINITY, FX_EINVAL, "weight_decay=inf");
    INT_CASE(lr_schedule, -1, FX_EINVAL, "lr_schedule=-1");
    INT_CASE(lr_schedule, 3, FX_EINVAL, "lr_schedule=3");
    INT_CASE(epochs, 0, FX_EINVAL, "epochs=0");
    INT_CASE(epochs, -5, FX_EINVAL, "epochs=-5");
    INT_CASE(augment, 2, FX_EINVAL, "augment=2");
    INT_CASE(augment, -1, FX_EINVAL, "augment=-1");
    INT_CASE(threads, -1, FX_EINVAL, "threads=-1");
    INT_CASE(threads, 1025, FX_EINVAL, "threads=1025");
    INT_CASE(device, -2, FX_EINVAL, "device=-2");

    /* names: unknown, and unterminated within the field (the bytes after model[16] are fmt's,
     * so reading on would find no NUL where it should stop; it must not read at all) */
    fx_train_config c;
    test_train_config(&c, "mlp", FMT_FLEX16_5, 1);
    snprintf(c.model, sizeof c.model, "vgg");
    refused(&c, tr, FX_ENAME, "model='vgg'", "model vgg");
    test_train_config(&c, "mlp", FMT_FLEX16_5, 1);
    memset(c.model, 'm', sizeof c.model);
    refused(&c, tr, FX_EINVAL, "model is not NUL-terminated", "unterminated model");
    test_train_config(&c, "mlp", FMT_FLEX16_5, 1);
    snprintf(c.autoflex, sizeof c.autoflex, "magic");
    refused(&c, tr, FX_ENAME, "autoflex='magic'", "autoflex magic");
    test_train_config(&c, "mlp", FMT_FP32, 1); /* checked in every format */
    memset(c.autoflex, 'r', sizeof c.autoflex);
    refused(&c, tr, FX_EINVAL, "autoflex is not NUL-terminated", "unterminated autoflex");
    CHECK(fx_trainer_new(NULL, tr, NULL) == NULL && flexpoint_last_status() == FX_EINVAL &&
              strstr(flexpoint_last_error(), "cfg"),
          "NULL cfg: '%s'", flexpoint_last_error());

    /* the bounds themselves, and the full range of the seed */
    OK_CASE(grad_window_lo, -128);
    OK_CASE(act_window_lo, 96);
    OK_CASE(loss_scaling, 1);
    OK_CASE(loss_scaling, 2);
    OK_CASE(stochastic_rounding, 1);
    OK_CASE(momentum, 0.0);
    OK_CASE(lr_schedule, FX_LR_STEP);
    OK_CASE(seed, UINT64_MAX);
    OK_CASE(threads, 1024);
    flexpoint_set_num_threads(2); /* threads is process-wide */
    test_train_config(&c, "resnet20", FMT_DFP16, 1);
    accepted(&c, tr, "resnet20");
}

/* NULL trainers and bad indices: a status and a message, never a silent value. */
static void null_getters(const fx_dataset *tr)
{
    struct {
        const char *what;
        long long got;
    } cases[6];
    int n = 0;
    flexpoint_clear_error();
    cases[n].what = "fx_trainer_global_step";
    cases[n++].got = fx_trainer_global_step(NULL);
    CHECK(strstr(flexpoint_last_error(), "NULL"), "global_step: '%s'", flexpoint_last_error());
    flexpoint_clear_error();
    cases[n].what = "fx_trainer_param_count";
    cases[n++].got = fx_trainer_param_count(NULL);
    CHECK(strstr(flexpoint_last_error(), "NULL"), "param_count: '%s'", flexpoint_last_error());
    flexpoint_clear_error();
    cases[n].what = "fx_trainer_epoch_index";
    cases[n++].got = fx_trainer_epoch_index(NULL);
    CHECK(strstr(flexpoint_last_error(), "NULL"), "epoch_index: '%s'", flexpoint_last_error());
    flexpoint_clear_error();
    cases[n].what = "fx_trainer_tensor_count";
    cases[n++].got = fx_trainer_tensor_count(NULL);
    CHECK(strstr(flexpoint_last_error(), "NULL"), "tensor_count: '%s'", flexpoint_last_error());
    for (int i = 0; i < n; i++)
        CHECK(cases[i].got == FX_EINVAL, "%s(NULL) = %lld", cases[i].what, cases[i].got);
    flexpoint_clear_error();
    CHECK(fx_trainer_loss_scaler(NULL) == NULL && flexpoint_last_status() == FX_EINVAL,
          "loss_scaler(NULL): status %d", flexpoint_last_status());
    flexpoint_clear_error();
    CHECK(fx_trainer_tensor_name(NULL, 0) == NULL && flexpoint_last_status() == FX_EINVAL,
          "tensor_name(NULL): status %d", flexpoint_last_status());
    fx_train_health h;
    flexpoint_clear_error();
    CHECK_STATUS(fx_trainer_health(NULL, &h), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), "trainer"), "health(NULL): '%s'", flexpoint_last_error());

    fx_train_config c;
    test_train_config(&c, "mlp", FMT_FP32, 1);
    fx_trainer *t = fx_trainer_new(&c, tr, NULL);
    CHECK(t != NULL, "trainer: %s", flexpoint_last_error());
    if (!t) return;
    flexpoint_clear_error();
    CHECK(fx_trainer_tensor_name(t, 100000) == NULL && flexpoint_last_status() == FX_EINVAL &&
              strstr(flexpoint_last_error(), "100000"),
          "tensor_name(t, 100000): '%s'", flexpoint_last_error());
    flexpoint_clear_error();
    CHECK(fx_trainer_tensor(t, -1) == NULL && strstr(flexpoint_last_error(), "-1"),
          "tensor(t, -1): '%s'", flexpoint_last_error());
    CHECK_STATUS(fx_trainer_health(t, NULL), FX_EINVAL);
    fx_trainer_free(t);
}

/* Augmentation on images larger than 64x64 pixels changes what is trained (it used to be
 * skipped there without a word), and stays a pure function of the seed. */
static void augment_large_images(void)
{
    fx_dataset *big = fx_dataset_synthetic(64, 1, 72, 72, 10, 5);
    CHECK(big != NULL, "72x72 data: %s", flexpoint_last_error());
    if (!big) return;
    float *p[3] = {NULL, NULL, NULL};
    int64_t n = 0;
    for (int k = 0; k < 3; k++) {
        fx_train_config c;
        test_train_config(&c, "mlp", FMT_FP32, 3);
        c.augment = k > 0;
        fx_trainer *t = fx_trainer_new(&c, big, NULL);
        CHECK(t != NULL, "augment=%d: %s", c.augment, flexpoint_last_error());
        if (!t) continue;
        CHECK_STATUS(fx_trainer_step(t, NULL), FX_OK);
        n = fx_trainer_param_count(t);
        p[k] = malloc((size_t)n * sizeof(float));
        if (p[k]) CHECK_STATUS(fx_trainer_get_params(t, p[k]), FX_OK);
        fx_trainer_free(t);
    }
    if (p[0] && p[1] && p[2]) {
        CHECK(memcmp(p[0], p[1], (size_t)n * sizeof(float)) != 0,
              "augment=1 on 72x72 images trained exactly as augment=0");
        CHECK(memcmp(p[1], p[2], (size_t)n * sizeof(float)) == 0,
              "augmented runs with one seed differ");
    }
    for (int k = 0; k < 3; k++) free(p[k]);
    fx_dataset_free(big);
}

static fx_trainer *health_trainer(const fx_dataset *tr, int fmt, int grad_window_lo)
{
    fx_train_config c;
    test_train_config(&c, "mlp", fmt, 9);
    c.grad_window_lo = grad_window_lo;
    fx_trainer *t = fx_trainer_new(&c, tr, NULL);
    CHECK(t != NULL, "%s trainer: %s", fmt_name((fmt_t)fmt), flexpoint_last_error());
    return t;
}

static const char *worst_name(fx_trainer *t, int i)
{
    const char *s = i >= 0 ? fx_trainer_tensor_name(t, i) : NULL;
    return s ? s : "(none)";
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

static void health(const fx_dataset *tr)
{
    const int spe = 10; /* 320 images in batches of 32 */
    fx_epoch_metrics m;
    fx_train_health h;

    /* healthy flex16_5 and dfp16: counts kept, nothing to warn about */
    for (int f = FMT_FLEX16_5; f <= FMT_DFP16; f++) {
        fmt_t fmt = f == FMT_FLEX16_5 ? FMT_FLEX16_5 : FMT_DFP16;
        fx_trainer *t = health_trainer(tr, fmt, -44);
        if (!t) return;
        for (int e = 0; e < 2; e++) CHECK_STATUS(fx_trainer_epoch(t, &m), FX_OK);
        CHECK_STATUS(fx_trainer_health(t, &h), FX_OK);
        const char *fn = fmt_name(fmt);
        CHECK(h.measured == 1 && h.steps == spe, "%s: measured %d steps %lld", fn, h.measured,
              (long long)h.steps);
        /* an MLP's parameters are all in the format and written once per step */
        CHECK(h.written[FX_TENSOR_WEIGHTS] == spe * fx_trainer_param_count(t) &&
                  h.params == fx_trainer_param_count(t),
              "%s: %lld weight elements written, %lld params", fn,
              (long long)h.written[FX_TENSOR_WEIGHTS], (long long)h.params);
        for (int k = 0; k < FX_TENSOR_CLASSES; k++) {
            CHECK(h.written[k] > 0 && h.writes[k] >= spe, "%s class %d: %lld written", fn, k,
                  (long long)h.written[k]);
            CHECK(h.saturated[k] == 0 && h.worst_saturated[k] == -1 &&
                      h.worst_saturated_fraction[k] == 0,
                  "%s class %d: %lld saturated (%s)", fn, k, (long long)h.saturated[k],
                  worst_name(t, h.worst_saturated[k]));
            CHECK(h.zeroed[k] == 0 && h.worst_zeroed_fraction[k] <= FX_HEALTH_WARN_FRACTION,
                  "%s class %d: %lld zeroed writes (%s)", fn, k, (long long)h.zeroed[k],
                  worst_name(t, h.worst_zeroed[k]));
            CHECK(h.underflow[k] < h.written[k] / 100, "%s class %d: %lld of %lld underflowed",
                  fn, k, (long long)h.underflow[k], (long long)h.written[k]);
        }
        CHECK(h.nonfinite_weights == 0, "%s: %lld non-finite weights", fn,
              (long long)h.nonfinite_weights);
        /* the counts restart with the next epoch */
        CHECK_STATUS(fx_trainer_step(t, NULL), FX_OK);
        CHECK_STATUS(fx_trainer_health(t, &h), FX_OK);
        CHECK(h.steps == 1 && h.written[FX_TENSOR_WEIGHTS] == fx_trainer_param_count(t),
              "%s: after one step of epoch 3: %lld steps, %lld weight elements", fn,
              (long long)h.steps, (long long)h.written[FX_TENSOR_WEIGHTS]);
        /* a load moves the position: the counts start afresh */
        char path[512];
        snprintf(path, sizeof path, "%s/h.ckpt", tmpdir);
        CHECK_STATUS(fx_trainer_save(t, path), FX_OK);
        fx_trainer *u = health_trainer(tr, fmt, -44);
        if (u) {
            for (int s = 0; s < 3; s++) CHECK_STATUS(fx_trainer_step(u, NULL), FX_OK);
            CHECK_STATUS(fx_trainer_load(u, path), FX_OK);
            CHECK_STATUS(fx_trainer_health(u, &h), FX_OK);
            CHECK(h.steps == 0 && h.written[FX_TENSOR_GRADIENTS] == 0,
                  "%s: after a load: %lld steps", fn, (long long)h.steps);
            CHECK_STATUS(fx_trainer_step(u, NULL), FX_OK);
            CHECK_STATUS(fx_trainer_health(u, &h), FX_OK);
            CHECK(h.steps == 1, "%s: one step after a load: %lld steps", fn, (long long)h.steps);
        }
        fx_trainer_free(u);
        remove(path);
        fx_trainer_free(t);
    }

    /* the float formats keep no write statistics */
    fx_trainer *t = health_trainer(tr, FMT_BF16, -44);
    if (!t) return;
    CHECK_STATUS(fx_trainer_epoch(t, &m), FX_OK);
    CHECK_STATUS(fx_trainer_health(t, &h), FX_OK);
    CHECK(h.measured == 0 && h.written[0] == 0 && h.written[2] == 0 && h.steps == spe &&
              h.nonfinite_weights == 0,
          "bf16: measured %d written %lld", h.measured, (long long)h.written[0]);
    fx_trainer_free(t);

    /* gradients whose window lies far below their values: every write into the first
     * gradient tensors saturates and the loss stays at log(10) */
    t = health_trainer(tr, FMT_FLEX16_5, -128);
    if (!t) return;
    CHECK_STATUS(fx_trainer_epoch(t, &m), FX_OK);
    CHECK_STATUS(fx_trainer_health(t, &h), FX_OK);
    const int G = FX_TENSOR_GRADIENTS;
    CHECK(h.saturated[G] > 0 && h.worst_saturated_fraction[G] > 0.5 &&
              h.worst_saturated_fraction[G] <= 1.0,
          "window -128: %lld gradient elements saturated, worst %s %.3f",
          (long long)h.saturated[G], worst_name(t, h.worst_saturated[G]),
          h.worst_saturated_fraction[G]);
    const char *w = worst_name(t, h.worst_saturated[G]);
    CHECK(ends_with(w, ".grad") || ends_with(w, ".dx") || ends_with(w, ".dlogits"),
          "window -128: the worst saturated gradient is '%s'", w);
    CHECK(h.saturated[FX_TENSOR_WEIGHTS] == 0 && h.saturated[FX_TENSOR_ACTIVATIONS] == 0,
          "window -128: weights/activations saturated %lld/%lld",
          (long long)h.saturated[FX_TENSOR_WEIGHTS], (long long)h.saturated[FX_TENSOR_ACTIVATIONS]);
    fx_trainer_free(t);

    /* gradients whose window lies far above their values: the loss gradient rounds to 0 in
     * every write, and everything computed from it is 0 (no underflow of its own) */
    t = health_trainer(tr, FMT_FLEX16_5, 20);
    if (!t) return;
    CHECK_STATUS(fx_trainer_epoch(t, &m), FX_OK);
    CHECK_STATUS(fx_trainer_health(t, &h), FX_OK);
    CHECK(h.zeroed[G] >= spe && h.worst_zeroed_fraction[G] == 1.0 &&
              !strcmp(worst_name(t, h.worst_zeroed[G]), "loss.dlogits"),
          "window 20: %lld zeroed gradient writes, worst %s %.3f", (long long)h.zeroed[G],
          worst_name(t, h.worst_zeroed[G]), h.worst_zeroed_fraction[G]);
    CHECK(h.underflow[G] > 0, "window 20: no gradient underflow counted");
    fx_trainer_free(t);

    /* fp16 without loss scaling and a learning rate that blows the weights up: the weights
     * become NaN/Inf, which the health reports and a save refuses */
    fx_train_config c;
    test_train_config(&c, "mlp", FMT_FP16, 9);
    c.loss_scaling = 0;
    c.lr = 1000;
    t = fx_trainer_new(&c, tr, NULL);
    CHECK(t != NULL, "fp16 trainer: %s", flexpoint_last_error());
    if (!t) return;
    CHECK_STATUS(fx_trainer_epoch(t, &m), FX_OK);
    CHECK_STATUS(fx_trainer_health(t, &h), FX_OK);
    CHECK(h.nonfinite_weights > 0 && h.nonfinite_weights <= h.params &&
              h.params == fx_trainer_param_count(t),
          "fp16, lr 1000: %lld of %lld weights non-finite", (long long)h.nonfinite_weights,
          (long long)h.params);
    char path[512];
    snprintf(path, sizeof path, "%s/nan.ckpt", tmpdir);
    CHECK_STATUS(fx_trainer_save(t, path), FX_ERANGE);
    CHECK(access(path, F_OK) != 0, "a checkpoint of NaN weights was written");
    fx_trainer_free(t);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fx_test_hostile_train_XXXXXX");
    if (!mkdtemp(tmpdir)) return test_skip("test_hostile_train", "no temporary directory");
    flexpoint_set_num_threads(2);
    fx_dataset *tr = test_patch_dataset(320, 21);
    CHECK(tr != NULL, "synthetic data: %s", flexpoint_last_error());
    if (!tr) return test_finish("test_hostile_train");
    config_fields(tr);
    null_getters(tr);
    augment_large_images();
    health(tr);
    fx_dataset_free(tr);
    rmdir(tmpdir);
    return test_finish("test_hostile_train");
}
