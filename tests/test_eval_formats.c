/* Evaluating a trained model in another format: fx_checkpoint_config and
 * fx_trainer_copy_weights.
 *
 * - A checkpoint's configuration reads back as it was written (device reset to the host), and
 *   a trainer built from it loads the checkpoint and evaluates to exactly the accuracy and loss
 *   of the trainer that wrote it.
 * - Copying weights into each format: the values are the source's fp32 weights, exactly where
 *   the destination keeps master weights or computes in fp32, and within half a step of the
 *   format's grid otherwise (bf16: 2^-9 relative; fp16: 2^-11 relative or its subnormal step;
 *   the shared-exponent formats: half of one step of the tensor's grid, which must not
 *   saturate). Batch-norm running statistics come across bit for bit (ResNet-20).
 * - The accuracy of each format's evaluation is close to fp32's on the learnable patch data.
 * - fx_trainer_evaluate_as: in the trainer's own format it is fx_trainer_evaluate exactly; in
 *   every other format and under a policy it equals, bit for bit, a trainer of that format
 *   given the weights by fx_trainer_copy_weights, and the source trainer is unchanged (weights,
 *   step, its own evaluation), for built-in names and model definitions alike. Unknown formats,
 *   presets, policies and classes are refused.
 * - Refusals: NULL, dst == src, another model, a device-less check of corrupt, truncated and
 *   missing checkpoints, and fx_trainer_load of another model's checkpoint; each leaves its
 *   output (the trainer: weights and step) unchanged. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_model.h"
#include "flexpoint_train.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const NAME = "test_eval_formats";
static const int FORMATS[] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5, FMT_DFP16};

static float *params_of(const fx_trainer *t, int64_t *n)
{
    *n = fx_trainer_param_count(t);
    float *p = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *p);
    if (p && fx_trainer_get_params(t, p) != FX_OK) {
        free(p);
        p = NULL;
    }
    return p;
}

/* The working weights of every parameter against the fp32 values src (parameter order). The
 * trainer's registry lists each parameter and then its gradient, before the activations
 * (from "input" on). */
static void check_working_weights(fx_trainer *t, const float *src, const char *what)
{
    int64_t off = 0;
    int checked = 0;
    for (int i = 0; i + 1 < fx_trainer_tensor_count(t); i += 2) {
        const char *nm = fx_trainer_tensor_name(t, i);
        if (strcmp(nm, "input") == 0) break;
        tensor_t *w = fx_trainer_tensor(t, i);
        int64_t n = tensor_numel(w);
        float *v = malloc((size_t)n * sizeof *v);
        CHECK(v && tensor_to_f32(w, v) == FX_OK, "%s: read %s", what, nm);
        if (!v) return;
        int wfmt = tensor_fmt(w);
        for (int64_t k = 0; k < n; k++) {
            double x = src[off + k], e = fabs((double)v[k] - x), bound;
            if (wfmt == FMT_FP32) bound = 0;
            else if (wfmt == FMT_BF16) bound = ldexp(fabs(x), -8);
            else if (wfmt == FMT_FP16) bound = fmax(ldexp(fabs(x), -11), ldexp(1, -25));
            else bound = ldexp(0.5, tensor_exp(w)); /* half a step of the tensor's grid */
            if (e > bound) {
                CHECK(0, "%s: %s[%lld] = %.9g from %.9g (error %g > bound %g, format %s)", what,
                      nm, (long long)k, (double)v[k], x, e, bound, fmt_name((fmt_t)wfmt));
                break;
            }
        }
        off += n;
        checked++;
        free(v);
    }
    CHECK(checked > 0, "%s: no weight tensor was checked", what);
}

static fx_trainer *make(const char *model, int fmt, int master, const fx_dataset *tr,
                        const fx_dataset *te)
{
    fx_train_config c;
    test_train_config(&c, model, fmt, 7);
    c.master_weights = master;
    c.batch_size = 32;
    fx_trainer *t = fx_trainer_new(&c, tr, te);
    CHECK(t != NULL, "fx_trainer_new(%s, %s): %s", model, fmt_name((fmt_t)fmt),
          flexpoint_last_error());
    return t;
}

static void train(fx_trainer *t, int steps)
{
    for (int s = 0; s < steps && t; s++) CHECK_STATUS(fx_trainer_step(t, NULL), FX_OK);
}

/* Train a CNN in `fmt`, save, read the configuration back, load and evaluate in every format. */
static void round_trip(int fmt, const fx_dataset *tr, const fx_dataset *te, const char *dir)
{
    fx_trainer *a = make("cnn", fmt, 1, tr, te);
    if (!a) return;
    train(a, 40);
    double acc_a = -1, loss_a = -1;
    CHECK_STATUS(fx_trainer_evaluate(a, te, &acc_a, &loss_a), FX_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.ckpt", dir, fmt_name((fmt_t)fmt));
    CHECK_STATUS(fx_trainer_save(a, path), FX_OK);

    fx_train_config c;
    memset(&c, 0x5a, sizeof c);
    CHECK_STATUS(fx_checkpoint_config(path, &c), FX_OK);
    fx_train_config want;
    test_train_config(&want, "cnn", fmt, 7);
    want.batch_size = 32;
    CHECK(strcmp(c.model, "cnn") == 0 && c.fmt == fmt && c.batch_size == 32 && c.seed == 7 &&
              c.master_weights == 1 && c.device == -1 && c.lr == want.lr &&
              c.momentum == want.momentum && strcmp(c.autoflex, want.autoflex) == 0,
          "%s: the configuration read back differs", path);

    /* the trainer the checkpoint asks for evaluates exactly like the one that wrote it */
    fx_trainer *b = fx_trainer_new(&c, tr, te);
    CHECK(b != NULL, "trainer from the stored configuration: %s", flexpoint_last_error());
    if (b) {
        CHECK_STATUS(fx_trainer_load(b, path), FX_OK);
        double acc_b = -2, loss_b = -2;
        CHECK_STATUS(fx_trainer_evaluate(b, te, &acc_b, &loss_b), FX_OK);
        CHECK(acc_b == acc_a && loss_b == loss_a, "%s: reloaded evaluation %.6f/%.9g, the "
              "trainer's %.6f/%.9g", fmt_name((fmt_t)fmt), acc_b, loss_b, acc_a, loss_a);
    }

    int64_t n = 0;
    float *src = b ? params_of(b, &n) : NULL;
    CHECK(src != NULL, "parameters of %s", path);
    double acc32 = -1;
    for (size_t f = 0; f < sizeof FORMATS / sizeof FORMATS[0] && src; f++) {
        for (int master = 0; master <= 1; master++) {
            char what[96];
            snprintf(what, sizeof what, "%s-trained into %s (master %d)",
                     fmt_name((fmt_t)fmt), fmt_name((fmt_t)FORMATS[f]), master);
            fx_trainer *d = make("cnn", FORMATS[f], master, tr, te);
            if (!d) continue;
            CHECK_STATUS(fx_trainer_copy_weights(d, b), FX_OK);
            int64_t m = 0;
            float *got = params_of(d, &m);
            CHECK(got && m == n, "%s: parameter count", what);
            /* master weights (and fp32 working weights) are the source's bits */
            if (got && m == n && (master || FORMATS[f] == FMT_FP32))
                CHECK(memcmp(got, src, (size_t)n * sizeof *src) == 0,
                      "%s: the weights are not the source's bits", what);
            free(got);
            check_working_weights(d, src, what);
            double acc = -1;
            CHECK_STATUS(fx_trainer_evaluate(d, te, &acc, NULL), FX_OK);
            if (FORMATS[f] == FMT_FP32) acc32 = acc;
            else if (acc32 >= 0)
                CHECK(fabs(acc - acc32) <= 0.05, "%s: accuracy %.4f, fp32 %.4f", what, acc,
                      acc32);
            fx_trainer_free(d);
        }
    }
    CHECK(acc32 > 0.5, "%s-trained CNN evaluated in fp32: accuracy %.4f (learnable data)",
          fmt_name((fmt_t)fmt), acc32);
    /* under a format policy (cast layers, no parameters of their own): the weights still map
     * one to one */
    if (src) {
        fx_train_config pc;
        test_train_config(&pc, "cnn", FMT_FLEX16_5, 7);
        pc.batch_size = 32;
        snprintf(pc.policy, sizeof pc.policy, "fc*=fp32; grads=bf16");
        fx_trainer *d = fx_trainer_new(&pc, tr, te);
        CHECK(d != NULL, "policy trainer: %s", flexpoint_last_error());
        if (d) {
            CHECK(fx_trainer_cast_count(d) == 2, "casts %d", fx_trainer_cast_count(d));
            CHECK_STATUS(fx_trainer_copy_weights(d, b), FX_OK);
            int64_t m = 0;
            float *got = params_of(d, &m);
            CHECK(got && m == n && memcmp(got, src, (size_t)n * sizeof *src) == 0,
                  "under a policy: the master weights are not the source's bits");
            free(got);
            double acc = -1;
            CHECK_STATUS(fx_trainer_evaluate(d, te, &acc, NULL), FX_OK);
            CHECK(fabs(acc - acc32) <= 0.05, "under a policy: accuracy %.4f, fp32 %.4f", acc,
                  acc32);
        }
        fx_trainer_free(d);
    }
    free(src);
    fx_trainer_free(b);
    fx_trainer_free(a);
}

/* ResNet-20 (batch norm): running statistics come across bit for bit. */
static void batch_norm_statistics(const fx_dataset *tr, const fx_dataset *te)
{
    fx_trainer *a = make("resnet20", FMT_FLEX16_5, 1, tr, te);
    fx_trainer *d = make("resnet20", FMT_BF16, 1, tr, te);
    if (!a || !d) goto done;
    train(a, 2);
    double acc_before = -1;
    CHECK_STATUS(fx_trainer_evaluate(d, te, &acc_before, NULL), FX_OK);
    CHECK_STATUS(fx_trainer_copy_weights(d, a), FX_OK);
    /* evaluation uses the running statistics: an fp32 trainer given the same weights and
     * statistics must evaluate as an fp32 copy of a, whichever trainer it came through */
    fx_trainer *e32a = make("resnet20", FMT_FP32, 1, tr, te);
    fx_trainer *e32d = make("resnet20", FMT_FP32, 1, tr, te);
    if (e32a && e32d) {
        CHECK_STATUS(fx_trainer_copy_weights(e32a, a), FX_OK);
        CHECK_STATUS(fx_trainer_copy_weights(e32d, d), FX_OK);
        double x = -1, y = -2, lx = -1, ly = -2;
        CHECK_STATUS(fx_trainer_evaluate(e32a, te, &x, &lx), FX_OK);
        CHECK_STATUS(fx_trainer_evaluate(e32d, te, &y, &ly), FX_OK);
        CHECK(x == y && lx == ly, "batch-norm statistics did not come across: %.6f/%.9g "
              "against %.6f/%.9g", x, lx, y, ly);
        /* and they matter: a fresh fp32 trainer (running statistics 0/1) evaluates otherwise */
        fx_trainer *fresh = make("resnet20", FMT_FP32, 1, tr, te);
        if (fresh) {
            int64_t n = 0;
            float *w = params_of(a, &n);
            double z = -3, lz = -3;
            CHECK_STATUS(fx_trainer_evaluate(fresh, te, &z, &lz), FX_OK);
            CHECK(lz != lx, "a fresh trainer evaluates like the trained one (loss %.9g)", lz);
            free(w);
            fx_trainer_free(fresh);
        }
    }
    fx_trainer_free(e32a);
    fx_trainer_free(e32d);
done:
    fx_trainer_free(a);
    fx_trainer_free(d);
}

/* fx_trainer_evaluate_as against the explicit route, in every format and under a policy. */
static void evaluate_as(const fx_dataset *tr, const fx_dataset *te)
{
    fx_trainer *src = make("cnn", FMT_FLEX16_5, 1, tr, te);
    if (!src) return;
    train(src, 20);
    int64_t n = 0, n2 = 0;
    float *before = params_of(src, &n);
    int64_t step = fx_trainer_global_step(src);
    double own_acc = -1, own_loss = -1, acc = -2, loss = -2;
    CHECK_STATUS(fx_trainer_evaluate(src, te, &own_acc, &own_loss), FX_OK);
    CHECK_STATUS(fx_trainer_evaluate_as(src, FMT_FLEX16_5, NULL, NULL, te, &acc, &loss), FX_OK);
    CHECK(acc == own_acc && loss == own_loss, "own format: %.17g/%.17g vs %.17g/%.17g", acc,
          loss, own_acc, own_loss);
    for (int k = 0; k < 5; k++) {
        for (int pol = 0; pol < 2; pol++) {
            const char *policy = pol ? "O2" : "";
            if (FORMATS[k] == FMT_FLEX16_5 && !pol) continue; /* its own: above */
            fx_train_config c;
            test_train_config(&c, "cnn", FORMATS[k], 7);
            c.batch_size = 32;
            c.master_weights = 0;
            snprintf(c.policy, sizeof c.policy, "%s", policy);
            fx_trainer *dst = fx_trainer_new(&c, tr, te);
            CHECK(dst != NULL, "%s '%s': %s", fmt_name((fmt_t)FORMATS[k]), policy,
                  flexpoint_last_error());
            double want_acc = -1, want_loss = -1;
            if (dst) {
                CHECK_STATUS(fx_trainer_copy_weights(dst, src), FX_OK);
                CHECK_STATUS(fx_trainer_evaluate(dst, te, &want_acc, &want_loss), FX_OK);
            }
            fx_trainer_free(dst);
            acc = loss = -3;
            CHECK_STATUS(fx_trainer_evaluate_as(src, FORMATS[k], "", policy, te, &acc, &loss),
                         FX_OK);
            CHECK(acc == want_acc && loss == want_loss,
                  "%s '%s': evaluate_as %.17g/%.17g, copy + evaluate %.17g/%.17g",
                  fmt_name((fmt_t)FORMATS[k]), policy, acc, loss, want_acc, want_loss);
        }
    }
    /* refusals write nothing */
    acc = loss = 7;
    CHECK_STATUS(fx_trainer_evaluate_as(NULL, FMT_FP32, NULL, NULL, te, &acc, &loss), FX_EINVAL);
    CHECK_STATUS(fx_trainer_evaluate_as(src, FMT_FP32, NULL, NULL, NULL, &acc, &loss), FX_EINVAL);
    CHECK_STATUS(fx_trainer_evaluate_as(src, FMT_COUNT, NULL, NULL, te, &acc, &loss), FX_EFORMAT);
    CHECK_STATUS(fx_trainer_evaluate_as(src, -1, NULL, NULL, te, &acc, &loss), FX_EFORMAT);
    CHECK_STATUS(fx_trainer_evaluate_as(src, FMT_FLEX16_5, "nosuch", NULL, te, &acc, &loss),
                 FX_ENAME);
    CHECK_STATUS(fx_trainer_evaluate_as(src, FMT_FP16, NULL, "O9", te, &acc, &loss), FX_ENAME);
    CHECK_STATUS(fx_trainer_evaluate_as(src, FMT_FP16, NULL, "convx*=fp32", te, &acc, &loss),
                 FX_ENAME);
    CHECK(strstr(flexpoint_last_error(), "matches no layer"), "pattern: '%s'",
          flexpoint_last_error());
    CHECK_STATUS(fx_trainer_evaluate_as(src, FMT_FP16, NULL, "acts=fp99", te, &acc, &loss),
                 FX_EFORMAT);
    CHECK(acc == 7 && loss == 7, "a refused evaluation wrote %g/%g", acc, loss);
    /* the source is unchanged: weights, position, its own evaluation */
    float *after = params_of(src, &n2);
    CHECK(before && after && n == n2 && memcmp(before, after, (size_t)n * sizeof *before) == 0,
          "evaluate_as changed the source's weights");
    CHECK(fx_trainer_global_step(src) == step, "evaluate_as moved the source's step");
    CHECK_STATUS(fx_trainer_evaluate(src, te, &acc, &loss), FX_OK);
    CHECK(acc == own_acc && loss == own_loss, "the source evaluates differently afterwards");
    free(before);
    free(after);
    fx_trainer_free(src);
}

/* fx_trainer_evaluate_as on a trainer built from a model definition: the temporary trainer is
 * built from the same definition, and the result equals a definition trainer of that format
 * given the weights. */
static void evaluate_as_definition(const fx_dataset *tr, const fx_dataset *te)
{
    fx_model_def *d = NULL;
    CHECK_STATUS(fx_model_def_builtin("cnn8-16-32", fx_dataset_channels(tr),
                                      fx_dataset_height(tr), fx_dataset_width(tr),
                                      fx_dataset_classes(tr), &d), FX_OK);
    if (!d) return;
    fx_train_config c;
    test_train_config(&c, "cnn", FMT_FP32, 7);
    c.batch_size = 32;
    fx_trainer *src = fx_trainer_new_model(&c, d, tr, te);
    c.fmt = FMT_DFP16;
    c.master_weights = 0;
    fx_trainer *dst = fx_trainer_new_model(&c, d, tr, te);
    CHECK(src && dst, "definition trainers: %s", flexpoint_last_error());
    if (src && dst) {
        train(src, 10);
        double want_acc = -1, want_loss = -1, acc = -2, loss = -2;
        CHECK_STATUS(fx_trainer_copy_weights(dst, src), FX_OK);
        CHECK_STATUS(fx_trainer_evaluate(dst, te, &want_acc, &want_loss), FX_OK);
        CHECK_STATUS(fx_trainer_evaluate_as(src, FMT_DFP16, NULL, NULL, te, &acc, &loss), FX_OK);
        CHECK(acc == want_acc && loss == want_loss,
              "definition trainer in dfp16: %.17g/%.17g, copy + evaluate %.17g/%.17g", acc, loss,
              want_acc, want_loss);
    }
    fx_trainer_free(src);
    fx_trainer_free(dst);
    fx_model_def_free(d);
}

static void refusals(const fx_dataset *tr, const fx_dataset *te, const char *dir)
{
    fx_trainer *cnn = make("cnn", FMT_FP32, 1, tr, te);
    fx_trainer *mlp = make("mlp", FMT_FP32, 1, tr, te);
    if (!cnn || !mlp) goto done;
    train(mlp, 3);
    CHECK_STATUS(fx_trainer_copy_weights(NULL, mlp), FX_EINVAL);
    CHECK_STATUS(fx_trainer_copy_weights(mlp, NULL), FX_EINVAL);
    CHECK_STATUS(fx_trainer_copy_weights(mlp, mlp), FX_EINVAL);
    int64_t n = 0;
    float *before = params_of(cnn, &n);
    CHECK_STATUS(fx_trainer_copy_weights(cnn, mlp), FX_ESHAPE);
    CHECK(strstr(flexpoint_last_error(), "mlp") && strstr(flexpoint_last_error(), "cnn"),
          "another model: message '%s' names neither", flexpoint_last_error());
    int64_t n2 = 0;
    float *after = params_of(cnn, &n2);
    CHECK(before && after && n == n2 &&
              memcmp(before, after, (size_t)n * sizeof *before) == 0,
          "a refused copy changed dst");
    free(before);
    free(after);

    /* checkpoints: missing, not a checkpoint, damaged payload, truncated */
    fx_train_config c, keep;
    memset(&c, 0x33, sizeof c);
    keep = c;
    char path[512];
    snprintf(path, sizeof path, "%s/none.ckpt", dir);
    CHECK_STATUS(fx_checkpoint_config(path, &c), FX_EIO);
    CHECK_STATUS(fx_checkpoint_config(NULL, &c), FX_EINVAL);
    CHECK_STATUS(fx_checkpoint_config(path, NULL), FX_EINVAL);
    snprintf(path, sizeof path, "%s/mlp.ckpt", dir);
    CHECK_STATUS(fx_trainer_save(mlp, path), FX_OK);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL, "open %s", path);
    if (f) {
        /* a byte of the payload's configuration: the checksum no longer matches */
        fseek(f, 40, SEEK_SET);
        int ch = fgetc(f);
        fseek(f, 40, SEEK_SET);
        fputc(ch ^ 0x10, f);
        fclose(f);
        CHECK_STATUS(fx_checkpoint_config(path, &c), FX_ECORRUPT);
        CHECK(strstr(flexpoint_last_error(), "checksum") &&
                  strstr(flexpoint_last_error(), "fx_checkpoint_config"),
              "damaged payload: '%s'", flexpoint_last_error());
        CHECK(truncate(path, 20) == 0, "truncate");
        CHECK_STATUS(fx_checkpoint_config(path, &c), FX_ECORRUPT);
        CHECK(strstr(flexpoint_last_error(), "truncated"), "truncated: '%s'",
              flexpoint_last_error());
    }
    CHECK(memcmp(&c, &keep, sizeof c) == 0, "a refused read changed cfg");
    remove(path);

    /* fx_trainer_load of another model's checkpoint: refused, naming both, and the trainer
     * keeps its weights and position */
    snprintf(path, sizeof path, "%s/mlp2.ckpt", dir);
    CHECK_STATUS(fx_trainer_save(mlp, path), FX_OK);
    train(cnn, 2);
    int64_t step = fx_trainer_global_step(cnn);
    before = params_of(cnn, &n);
    flexpoint_clear_error();
    int lrc = fx_trainer_load(cnn, path);
    CHECK(lrc != FX_OK, "a checkpoint of the MLP loaded into a CNN trainer");
    CHECK(strstr(flexpoint_last_error(), "mlp") && strstr(flexpoint_last_error(), "cnn"),
          "another model's checkpoint: message '%s' names neither model",
          flexpoint_last_error());
    after = params_of(cnn, &n2);
    CHECK(before && after && n == n2 &&
              memcmp(before, after, (size_t)n * sizeof *before) == 0,
          "a refused load changed the trainer's weights");
    CHECK(fx_trainer_global_step(cnn) == step, "a refused load moved the trainer's step");
    free(before);
    free(after);
    remove(path);
done:
    fx_trainer_free(cnn);
    fx_trainer_free(mlp);
}

int main(void)
{
    char dir[] = "/tmp/fx_eval_formats_XXXXXX";
    if (!mkdtemp(dir)) return test_skip(NAME, "no temporary folder");
    flexpoint_set_num_threads(2);
    fx_dataset *tr = test_patch_dataset(320, 1);
    fx_dataset *te = test_patch_dataset(200, 2);
    CHECK(tr && te, "data sets: %s", flexpoint_last_error());
    if (tr && te) {
        round_trip(FMT_FLEX16_5, tr, te, dir);
        round_trip(FMT_BF16, tr, te, dir);
        batch_norm_statistics(tr, te);
        evaluate_as(tr, te);
        evaluate_as_definition(tr, te);
        refusals(tr, te, dir);
    }
    fx_dataset_free(tr);
    fx_dataset_free(te);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "%s: could not remove %s\n", NAME, dir);
    return test_finish(NAME);
}
