/* Format policies (fx_train_config.policy).
 *
 * - A policy that gives every tensor format F ("default=F", or every class named) trains bit for
 *   bit like the run's format F without a policy, and inserts no cast.
 * - Casts sit exactly where formats change, counted for mixed policies: the MLP with fc2 in
 *   fp32, the CNN with its linear layers in fp32, O1 (GEMM operands 16-bit, the rest fp32),
 *   edges-fp32 and O2 on ResNet-8 (batch norm fp32: its ReLUs convert, so no cast, until a
 *   ReLU read by two convolutions is made fp32); the tensors have the formats the rules give;
 *   each mixed run trains (finite, falling loss).
 * - The casts' time (fx_trainer_cast_seconds) is measured exactly when there are casts.
 * - O1 with fp16 turns dynamic loss scaling on (a tensor is fp16); O3 needs master_weights = 0.
 * - Refusals name the problem: an unknown format, preset or malformed item, a pattern that
 *   matches no layer, a preset after a rule, an empty item, an unterminated field.
 * - A checkpoint of one policy does not load into a trainer of another. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAME = "test_policy";

static fx_train_config config(const char *model, int fmt, const char *policy)
{
    fx_train_config c;
    test_train_config(&c, model, fmt, 5);
    c.batch_size = 16;
    snprintf(c.policy, sizeof c.policy, "%s", policy);
    return c;
}

static fx_trainer *make(const fx_train_config *c, const fx_dataset *tr)
{
    fx_trainer *t = fx_trainer_new(c, tr, NULL);
    CHECK(t != NULL, "fx_trainer_new(%s, '%s'): %s", c->model, c->policy,
          flexpoint_last_error());
    return t;
}

static int tensor_fmt_of(fx_trainer *t, const char *name)
{
    int i = fx_trainer_tensor_find(t, name);
    return i < 0 ? -100 : (int)tensor_fmt(fx_trainer_tensor(t, i));
}

static void same_as_run_format(const fx_dataset *tr)
{
    const int fmts[] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5, FMT_DFP16};
    for (int k = 0; k < 5; k++) {
        char p1[64], p2[128];
        snprintf(p1, sizeof p1, "default=%s", fmt_name((fmt_t)fmts[k]));
        snprintf(p2, sizeof p2, "weights=%s; biases=%s; acts=%s; grads=%s",
                 fmt_name((fmt_t)fmts[k]), fmt_name((fmt_t)fmts[k]), fmt_name((fmt_t)fmts[k]),
                 fmt_name((fmt_t)fmts[k]));
        const char *pols[2] = {p1, p2};
        for (int v = 0; v < 2; v++) {
            /* the run's format differs from the policy's, so only the policy can make them
             * equal (fp16 runs: the policy on an fp32 run) */
            int other = fmts[k] == FMT_FP16 ? FMT_FP32 : FMT_FP16;
            fx_train_config a = config("cnn", fmts[k], ""), b = config("cnn", other, pols[v]);
            fx_trainer *ta = make(&a, tr), *tb = make(&b, tr);
            if (!ta || !tb) goto next;
            CHECK(fx_trainer_cast_count(tb) == 0, "'%s': %d casts", pols[v],
                  fx_trainer_cast_count(tb));
            for (int s = 0; s < 3; s++) {
                float la = -1, lb = -2;
                CHECK_STATUS(fx_trainer_step(ta, &la), FX_OK);
                CHECK_STATUS(fx_trainer_step(tb, &lb), FX_OK);
                CHECK(memcmp(&la, &lb, sizeof la) == 0, "'%s': step %d loss %.9g vs %.9g",
                      pols[v], s, (double)lb, (double)la);
            }
            int64_t n = fx_trainer_param_count(ta);
            float *pa = malloc((size_t)n * sizeof *pa), *pb = malloc((size_t)n * sizeof *pb);
            if (pa && pb) {
                CHECK_STATUS(fx_trainer_get_params(ta, pa), FX_OK);
                CHECK_STATUS(fx_trainer_get_params(tb, pb), FX_OK);
                CHECK(memcmp(pa, pb, (size_t)n * sizeof *pa) == 0,
                      "'%s': the weights differ from a %s run", pols[v],
                      fmt_name((fmt_t)fmts[k]));
            }
            free(pa);
            free(pb);
        next:
            fx_trainer_free(ta);
            fx_trainer_free(tb);
        }
    }
}

/* A mixed policy: its cast count, a few tensors' formats, and that it trains. */
static void mixed(const fx_dataset *tr, const char *model, int fmt, int master,
                  const char *policy, int want_casts, const char *name1, int fmt1,
                  const char *name2, int fmt2)
{
    fx_train_config c = config(model, fmt, policy);
    c.master_weights = master;
    fx_trainer *t = make(&c, tr);
    if (!t) return;
    CHECK(fx_trainer_cast_count(t) == want_casts, "%s '%s': %d casts, want %d", model, policy,
          fx_trainer_cast_count(t), want_casts);
    CHECK(tensor_fmt_of(t, name1) == fmt1, "%s '%s': %s is %d, want %s", model, policy, name1,
          tensor_fmt_of(t, name1), fmt_name((fmt_t)fmt1));
    CHECK(tensor_fmt_of(t, name2) == fmt2, "%s '%s': %s is %d, want %s", model, policy, name2,
          tensor_fmt_of(t, name2), fmt_name((fmt_t)fmt2));
    float first = 0, last = 0;
    for (int s = 0; s < 12; s++) {
        float l = 0;
        CHECK_STATUS(fx_trainer_step(t, &l), FX_OK);
        if (s == 0) first = l;
        last = l;
    }
    CHECK(isfinite(last) && last < first, "%s '%s': loss %.4f -> %.4f", model, policy,
          (double)first, (double)last);
    /* the casts' time is measured on the host whenever there are casts, and only then */
    double cs = fx_trainer_cast_seconds(t);
    CHECK(want_casts > 0 ? cs > 0 : cs == 0, "%s '%s': %d casts took %g s", model, policy,
          want_casts, cs);
    fx_trainer_free(t);
}

static void refused(const fx_dataset *tr, const char *model, const char *policy, int master,
                    int want, const char *frag)
{
    fx_train_config c = config(model, FMT_FLEX16_5, policy);
    c.master_weights = master;
    flexpoint_clear_error();
    fx_trainer *t = fx_trainer_new(&c, tr, NULL);
    CHECK(t == NULL && flexpoint_last_status() == want, "'%s': status %d, want %d", policy,
          flexpoint_last_status(), want);
    CHECK(strstr(flexpoint_last_error(), frag) != NULL, "'%s': message '%s' lacks '%s'", policy,
          flexpoint_last_error(), frag);
    fx_trainer_free(t);
}

int main(void)
{
    flexpoint_set_num_threads(2);
    fx_dataset *tr = test_patch_dataset(160, 6);
    CHECK(tr != NULL, "data: %s", flexpoint_last_error());
    if (!tr) return test_finish(NAME);
    same_as_run_format(tr);

    /* fc2 (and its gradients) fp32 in a flex16_5 MLP: one cast, before fc2 */
    mixed(tr, "mlp", FMT_FLEX16_5, 1, "fc2=fp32", 1, "fc2.w", FMT_FP32, "fc1.w", FMT_FLEX16_5);
    /* the CNN's linear layers fp32: casts before fc1 and fc2 */
    mixed(tr, "cnn", FMT_DFP16, 1, "fc*=fp32", 2, "fc1.cast.out", FMT_FP32, "conv2.w",
          FMT_DFP16);
    /* class rules: gradients bf16 everywhere, activations of the pools fp32 */
    mixed(tr, "cnn", FMT_FLEX16_5, 1, "grads=bf16; pool*.acts=fp32", 2, "conv2.w.grad", FMT_BF16,
          "pool1.out", FMT_FP32);
    /* O1: conv/linear in fp16 (the input too), everything else fp32: casts before conv2, fc1,
     * fc2 */
    mixed(tr, "cnn", FMT_FP32, 1, "O1:fp16", 3, "conv1.w", FMT_FP16, "relu1.out", FMT_FP32);
    {
        fx_train_config c = config("cnn", FMT_FP32, "O1:fp16");
        fx_trainer *t = make(&c, tr);
        if (t) CHECK(fx_trainer_loss_scaler(t)->enabled == 1, "O1:fp16 without loss scaling");
        fx_trainer_free(t);
    }
    /* edges-fp32 on the MLP: fc1 and fc3 fp32, fc2 dfp16; one cast, before fc3 */
    mixed(tr, "mlp", FMT_DFP16, 1, "edges-fp32", 1, "fc1.w", FMT_FP32, "fc2.w", FMT_DFP16);
    /* O2 on ResNet-8: batch norm fp32. Every convolution reads a ReLU's bf16 output, and every
     * ReLU writes bf16 from its fp32 batch-norm input, so no cast layer is needed; except the
     * downsampling shortcut s2b1.down, which reads s1b1.relu (bf16) too */
    mixed(tr, "resnet8", FMT_BF16, 1, "O2", 0, "bn0.out", FMT_FP32, "relu0.out", FMT_BF16);
    mixed(tr, "resnet8", FMT_BF16, 1, "O2", 0, "s1b1.bn2.out", FMT_FP32, "s2b1.conv1.w",
          FMT_BF16);
    /* batch norm's output in fp32 read directly by a convolution: the shortcut's 1x1 conv of
     * s2b1 reads s1b1.relu; make that ReLU fp32 and the shortcut gets a cast */
    mixed(tr, "resnet8", FMT_BF16, 1, "O2; s1b1.relu=fp32", 2, "s2b1.down.cast.out", FMT_BF16,
          "s1b1.relu.out", FMT_FP32);
    /* O3: no master weights */
    refused(tr, "mlp", "O3", 1, FX_EINVAL, "O3 is pure 16-bit training without master weights");
    mixed(tr, "mlp", FMT_FLEX16_5, 0, "O3", 0, "fc1.w", FMT_FLEX16_5, "relu1.out",
          FMT_FLEX16_5);

    CHECK(fx_trainer_cast_seconds(NULL) == -1.0 && flexpoint_last_status() == FX_EINVAL,
          "fx_trainer_cast_seconds(NULL)");
    refused(tr, "mlp", "bn*=fp8", 1, FX_EFORMAT, "unknown format 'fp8'");
    refused(tr, "mlp", "O5", 1, FX_ENAME, "'O5' is neither a preset");
    refused(tr, "mlp", "conv*=fp16", 1, FX_ENAME, "rule 'conv*=fp16' matches no layer");
    refused(tr, "mlp", "fc1=fp16; O2", 1, FX_ENAME, "the preset 'O2' must come first");
    refused(tr, "mlp", "default=fp32;;fc1=fp16", 1, FX_EINVAL, "item 2 is empty");
    refused(tr, "mlp", "fc1.dbiases=fp16", 1, FX_ENAME, "rule 'fc1.dbiases=fp16' matches no");
    /* a misspelt class reads as a layer pattern: the message says it is no class either */
    refused(tr, "mlp", "fc1.dbiases=fp16", 1, FX_ENAME, "'dbiases' is not a tensor class");
    refused(tr, "mlp", "activations=fp16", 1, FX_ENAME,
            "'activations' is not a tensor class (weights, biases, acts, dacts, dweights, grads");
    refused(tr, "mlp", "conv*=fp16", 1, FX_ENAME, "matches no layer of mlp");
    {
        fx_train_config c = config("mlp", FMT_FP32, "");
        memset(c.policy, 'x', sizeof c.policy);
        flexpoint_clear_error();
        fx_trainer *t = fx_trainer_new(&c, tr, NULL);
        CHECK(t == NULL && flexpoint_last_status() == FX_EINVAL &&
                  strstr(flexpoint_last_error(), "policy is not NUL-terminated"),
              "unterminated policy: '%s'", flexpoint_last_error());
        fx_trainer_free(t);
    }

    /* checkpoints compare policies */
    {
        char dir[] = "/tmp/fx_policy_XXXXXX";
        if (mkdtemp(dir)) {
            char path[512];
            snprintf(path, sizeof path, "%s/p.ckpt", dir);
            fx_train_config a = config("mlp", FMT_FLEX16_5, "fc2=fp32"),
                            b = config("mlp", FMT_FLEX16_5, "fc1=fp32");
            fx_trainer *ta = make(&a, tr), *tb = make(&b, tr);
            if (ta && tb) {
                CHECK_STATUS(fx_trainer_step(ta, NULL), FX_OK);
                CHECK_STATUS(fx_trainer_save(ta, path), FX_OK);
                CHECK_STATUS(fx_trainer_load(tb, path), FX_ECORRUPT);
                CHECK(strstr(flexpoint_last_error(), "policy 'fc2=fp32'") != NULL,
                      "message '%s'", flexpoint_last_error());
            }
            fx_trainer_free(ta);
            fx_trainer_free(tb);
            remove(path);
            remove(dir);
        }
    }
    fx_dataset_free(tr);
    return test_finish(NAME);
}
