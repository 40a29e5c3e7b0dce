/* The model-definition API (include/flexpoint_model.h).
 *
 * - The built-ins written with the public calls here (not with fx_model_def_builtin) train to
 *   the bits of the built-in names: losses of every step, the parameters after them and the
 *   tensor names, for mlp, cnn and resnet20 in fp32 and flex16_5 (cnn also dfp16 and under the
 *   edges-fp32 policy, which inserts casts); and so do examples/models/{mlp,cnn,resnet20}.txt.
 * - Shape and name errors are refused when the layer is added, with the layer named, and the
 *   definition is unchanged.
 * - Identity: a checkpoint of one definition loads into a trainer of an equal definition and
 *   is refused (FX_ECORRUPT) by one of another network with the same parameter shapes and by a
 *   built-in trainer; a configuration holding an identity is refused by fx_trainer_new.
 * - The other layer kinds (avgpool, tanh, gelu, sigmoid, silu, flatten, dropout, batch norm of
 *   features) train: the loss falls on an easy problem, two trainers agree bit for bit, and a
 *   run resumed from a checkpoint draws the dropout masks of an uninterrupted one. */
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

static const char *const NAME = "test_model_api";

#define OK(expr) CHECK_STATUS((expr), FX_OK)

/* ------------------------------------------------------------------ hand-written built-ins */

static fx_model_def *hand_mlp(int C, int H, int W)
{
    fx_model_def *d = NULL;
    int64_t s[3] = {C, H, W};
    OK(fx_model_def_new("mlp", 3, s, &d));
    if (!d) return NULL;
    OK(fx_model_def_linear(d, "fc1", NULL, 256));
    OK(fx_model_def_activation(d, "relu", "relu1", NULL));
    OK(fx_model_def_linear(d, "fc2", "relu1", 256));
    OK(fx_model_def_activation(d, "relu", "relu2", ""));
    OK(fx_model_def_linear(d, "fc3", NULL, 10));
    return d;
}

static fx_model_def *hand_cnn(int C, int H, int W)
{
    fx_model_def *d = NULL;
    int64_t s[3] = {C, H, W};
    OK(fx_model_def_new("cnn", 3, s, &d));
    if (!d) return NULL;
    OK(fx_model_def_conv2d(d, "conv1", "input", 32, 5, 1, 2, 1));
    OK(fx_model_def_activation(d, "relu", "relu1", NULL));
    OK(fx_model_def_pool2d(d, "maxpool2d", "pool1", NULL, 2, 2, 0));
    OK(fx_model_def_conv2d(d, "conv2", NULL, 64, 5, 1, 2, 1));
    OK(fx_model_def_activation(d, "relu", "relu2", NULL));
    OK(fx_model_def_pool2d(d, "maxpool2d", "pool2", NULL, 2, 2, 0));
    OK(fx_model_def_linear(d, "fc1", NULL, 128));
    OK(fx_model_def_activation(d, "relu", "relu3", NULL));
    OK(fx_model_def_linear(d, "fc2", NULL, 10));
    return d;
}

/* resnet20, with the generic call for some layers (the model file's form) */
static fx_model_def *hand_resnet20(void)
{
    fx_model_def *d = NULL;
    int64_t s[3] = {3, 32, 32};
    OK(fx_model_def_new("resnet20", 3, s, &d));
    if (!d) return NULL;
    OK(fx_model_def_layer(d, "conv2d", "conv0", "out=16 kernel=3 pad=1 bias=0"));
    OK(fx_model_def_batchnorm(d, "bn0", NULL));
    OK(fx_model_def_layer(d, "relu", "relu0", NULL));
    char in[32] = "relu0", n[32], bn2[32], sc[32], opt[96];
    const int ch[3] = {16, 32, 64};
    for (int st = 0; st < 3; st++)
        for (int b = 0; b < 3; b++) {
            const int stride = st > 0 && b == 0 ? 2 : 1;
            snprintf(n, sizeof n, "s%db%d.conv1", st + 1, b + 1);
            OK(fx_model_def_conv2d(d, n, in, ch[st], 3, stride, 1, 0));
            snprintf(n, sizeof n, "s%db%d.bn1", st + 1, b + 1);
            OK(fx_model_def_batchnorm(d, n, NULL));
            snprintf(n, sizeof n, "s%db%d.relu1", st + 1, b + 1);
            OK(fx_model_def_activation(d, "relu", n, NULL));
            snprintf(n, sizeof n, "s%db%d.conv2", st + 1, b + 1);
            OK(fx_model_def_conv2d(d, n, NULL, ch[st], 3, 1, 1, 0));
            snprintf(bn2, sizeof bn2, "s%db%d.bn2", st + 1, b + 1);
            OK(fx_model_def_batchnorm(d, bn2, NULL));
            snprintf(sc, sizeof sc, "%s", in);
            if (stride == 2) {
                snprintf(n, sizeof n, "s%db%d.down", st + 1, b + 1);
                snprintf(opt, sizeof opt, "out=%d kernel=1 stride=2 bias=0 in=%s", ch[st], in);
                OK(fx_model_def_layer(d, "conv2d", n, opt));
                snprintf(sc, sizeof sc, "s%db%d.downbn", st + 1, b + 1);
                OK(fx_model_def_batchnorm(d, sc, NULL));
            }
            snprintf(n, sizeof n, "s%db%d.add", st + 1, b + 1);
            OK(fx_model_def_add(d, n, bn2, sc));
            snprintf(in, sizeof in, "s%db%d.relu", st + 1, b + 1);
            OK(fx_model_def_activation(d, "relu", in, NULL));
        }
    OK(fx_model_def_global_avgpool(d, "gap", NULL));
    OK(fx_model_def_linear(d, "fc", NULL, 10));
    return d;
}

/* ------------------------------------------------------------------ bit-for-bit ----------- */

static fx_trainer *by_name(const char *model, int fmt, const char *policy, const fx_dataset *tr)
{
    fx_train_config c;
    test_train_config(&c, model, fmt, 11);
    c.batch_size = 16;
    if (policy) snprintf(c.policy, sizeof c.policy, "%s", policy);
    fx_trainer *t = fx_trainer_new(&c, tr, NULL);
    CHECK(t != NULL, "fx_trainer_new(%s): %s", model, flexpoint_last_error());
    return t;
}

static fx_trainer *by_def(const fx_model_def *d, int fmt, const char *policy,
                          const fx_dataset *tr)
{
    fx_train_config c;
    test_train_config(&c, "ignored", fmt, 11);
    c.batch_size = 16;
    if (policy) snprintf(c.policy, sizeof c.policy, "%s", policy);
    fx_trainer *t = fx_trainer_new_model(&c, d, tr, NULL);
    CHECK(t != NULL, "fx_trainer_new_model: %s", flexpoint_last_error());
    return t;
}

/* a and b train to the same bits for `steps` steps. */
static void same_bits(fx_trainer *a, fx_trainer *b, int steps, const char *what)
{
    if (!a || !b) return;
    CHECK(fx_trainer_tensor_count(a) == fx_trainer_tensor_count(b), "%s: tensor counts %d, %d",
          what, fx_trainer_tensor_count(a), fx_trainer_tensor_count(b));
    for (int i = 0; i < fx_trainer_tensor_count(a) && i < fx_trainer_tensor_count(b); i++)
        CHECK(strcmp(fx_trainer_tensor_name(a, i), fx_trainer_tensor_name(b, i)) == 0,
              "%s: tensor %d is %s and %s", what, i, fx_trainer_tensor_name(a, i),
              fx_trainer_tensor_name(b, i));
    CHECK(fx_trainer_cast_count(a) == fx_trainer_cast_count(b), "%s: casts", what);
    for (int s = 0; s < steps; s++) {
        float la = -1, lb = -2;
        OK(fx_trainer_step(a, &la));
        OK(fx_trainer_step(b, &lb));
        CHECK(test_f32_bits(la) == test_f32_bits(lb), "%s: step %d loss %.9g and %.9g", what, s,
              (double)la, (double)lb);
    }
    int64_t n = fx_trainer_param_count(a);
    CHECK(n > 0 && n == fx_trainer_param_count(b), "%s: parameter counts", what);
    float *pa = malloc((size_t)n * sizeof *pa), *pb = malloc((size_t)n * sizeof *pb);
    if (pa && pb && n == fx_trainer_param_count(b)) {
        OK(fx_trainer_get_params(a, pa));
        OK(fx_trainer_get_params(b, pb));
        CHECK(memcmp(pa, pb, (size_t)n * sizeof *pa) == 0, "%s: parameters differ after %d "
              "steps", what, steps);
    }
    free(pa);
    free(pb);
}

static void compare(const char *name, fx_model_def *d, int fmt, const char *policy, int steps,
                    const fx_dataset *tr, const char *how)
{
    char what[128];
    snprintf(what, sizeof what, "%s (%s) in %s%s%s", name, how, fmt_name((fmt_t)fmt),
             policy ? " under " : "", policy ? policy : "");
    fx_trainer *a = by_name(name, fmt, policy, tr), *b = d ? by_def(d, fmt, policy, tr) : NULL;
    same_bits(a, b, steps, what);
    fx_trainer_free(a);
    fx_trainer_free(b);
}

static void builtins_by_hand(void)
{
    fx_dataset *patch = test_patch_dataset(96, 5);
    fx_dataset *cifar = fx_dataset_synthetic(48, 3, 32, 32, 10, 6);
    CHECK(patch && cifar, "datasets: %s", flexpoint_last_error());
    if (!patch || !cifar) goto done;
    fx_model_def *mlp = hand_mlp(1, 12, 12), *cnn = hand_cnn(1, 12, 12), *rn = hand_resnet20();
    const int fmts[2] = {FMT_FP32, FMT_FLEX16_5};
    for (int f = 0; f < 2; f++) {
        compare("mlp", mlp, fmts[f], NULL, 4, patch, "by hand");
        compare("cnn", cnn, fmts[f], NULL, 4, patch, "by hand");
        compare("resnet20", rn, fmts[f], NULL, 2, cifar, "by hand");
    }
    compare("cnn", cnn, FMT_DFP16, NULL, 4, patch, "by hand");
    compare("cnn", cnn, FMT_FLEX16_5, "edges-fp32", 3, patch, "by hand");
    compare("mlp", mlp, FMT_BF16, "edges-fp32", 3, patch, "by hand");
    /* the built-in's own definition is the hand-written one, layer for layer */
    fx_model_def *bi = NULL;
    OK(fx_model_def_builtin("resnet20", 3, 32, 32, 10, &bi));
    char ia[FX_MODEL_ID_SIZE] = "", ib[FX_MODEL_ID_SIZE] = "";
    if (bi && rn) {
        OK(fx_model_def_identity(bi, ia));
        OK(fx_model_def_identity(rn, ib));
    }
    CHECK(ia[0] == '@' && strcmp(ia, ib) == 0, "resnet20 identities '%s' and '%s'", ia, ib);
    CHECK(bi && fx_model_def_layer_count(bi) == 3 + 9 * 7 + 2 * 2 + 2,
          "resnet20 has %d layers", bi ? fx_model_def_layer_count(bi) : -1);
    fx_model_def_free(bi);
    fx_model_def_free(mlp);
    fx_model_def_free(cnn);
    fx_model_def_free(rn);
done:
    fx_dataset_free(patch);
    fx_dataset_free(cifar);
}

static fx_model_def *example(const char *file)
{
    char path[512];
    snprintf(path, sizeof path, "%s/examples/models/%s", FX_SOURCE_DIR, file);
    fx_model_def *d = NULL;
    CHECK(fx_model_def_load(path, &d) == FX_OK, "%s: %s", path, flexpoint_last_error());
    return d;
}

static void example_files(void)
{
    fx_dataset *mnist = fx_dataset_synthetic(64, 1, 28, 28, 10, 8);
    fx_dataset *cifar = fx_dataset_synthetic(48, 3, 32, 32, 10, 9);
    CHECK(mnist && cifar, "datasets: %s", flexpoint_last_error());
    fx_model_def *mlp = example("mlp.txt"), *cnn = example("cnn.txt");
    fx_model_def *rn = example("resnet20.txt");
    if (mnist && cifar) {
        compare("mlp", mlp, FMT_FLEX16_5, NULL, 3, mnist, "examples/models/mlp.txt");
        compare("cnn", cnn, FMT_FP32, NULL, 3, mnist, "examples/models/cnn.txt");
        compare("cnn", cnn, FMT_FLEX16_5, NULL, 3, mnist, "examples/models/cnn.txt");
        compare("resnet20", rn, FMT_FP32, NULL, 2, cifar, "examples/models/resnet20.txt");
        compare("resnet20", rn, FMT_FLEX16_5, NULL, 2, cifar, "examples/models/resnet20.txt");
    }
    fx_model_def_free(mlp);
    fx_model_def_free(cnn);
    fx_model_def_free(rn);
    fx_dataset_free(mnist);
    fx_dataset_free(cifar);
}

/* ------------------------------------------------------------------ refusals -------------- */

/* call failed with `status`, naming `layer` in its message, and d still has n layers. */
#define REFUSED(call, status, layer, d, n)                                                     \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        CHECK(rc_ == (status), "%s: status %d, want %d (%s)", #call, rc_, (status),           \
              flexpoint_last_error());                                                         \
        CHECK(strstr(flexpoint_last_error(), (layer)) != NULL, "%s: message '%s' names no %s", \
              #call, flexpoint_last_error(), (layer));                                         \
        CHECK(fx_model_def_layer_count(d) == (n), "%s changed the definition", #call);        \
    } while (0)

static void refusals(void)
{
    fx_model_def *d = NULL;
    int64_t img[3] = {3, 8, 8}, bad[3] = {3, 0, 8};
    CHECK_STATUS(fx_model_def_new("m", 3, bad, &d), FX_ESHAPE);
    CHECK(d == NULL, "a failed new gave a definition");
    CHECK_STATUS(fx_model_def_new("m", 5, img, &d), FX_EINVAL);
    CHECK_STATUS(fx_model_def_new("a b", 3, img, &d), FX_ENAME);
    CHECK_STATUS(fx_model_def_new("m", 3, img, NULL), FX_EINVAL);
    OK(fx_model_def_new("m", 3, img, &d));
    if (!d) return;
    OK(fx_model_def_conv2d(d, "c1", NULL, 4, 3, 1, 1, 1));
    /* names: duplicate, reserved, bad characters, too long, unknown input */
    REFUSED(fx_model_def_activation(d, "relu", "c1", NULL), FX_ENAME, "c1", d, 1);
    REFUSED(fx_model_def_activation(d, "relu", "input", NULL), FX_ENAME, "input", d, 1);
    REFUSED(fx_model_def_activation(d, "relu", "r*", NULL), FX_ENAME, "r*", d, 1);
    REFUSED(fx_model_def_activation(d, "relu", "r,1", NULL), FX_ENAME, "r,1", d, 1);
    REFUSED(fx_model_def_activation(d, "relu", "", NULL), FX_ENAME, "layer name", d, 1);
    REFUSED(fx_model_def_activation(d, "relu", "abcdefghijabcdefghijabcdefghij12", NULL),
            FX_ENAME, "abcdefghij", d, 1);
    REFUSED(fx_model_def_activation(d, "relu", "r1", "nope"), FX_ENAME, "'nope'", d, 1);
    REFUSED(fx_model_def_activation(d, "swish", "r1", NULL), FX_ENAME, "swish", d, 1);
    REFUSED(fx_model_def_layer(d, "lstm", "r1", NULL), FX_ENAME, "lstm", d, 1);
    /* shapes: channels of the input, empty outputs, geometry, flat input to conv */
    REFUSED(fx_model_def_conv2d(d, "c2", NULL, 4, 11, 1, 0, 1), FX_ESHAPE, "'c2'", d, 1);
    REFUSED(fx_model_def_conv2d(d, "c2", NULL, 4, 3, 1, 3, 1), FX_ESHAPE, "'c2'", d, 1);
    REFUSED(fx_model_def_conv2d(d, "c2", NULL, 0, 3, 1, 1, 1), FX_ESHAPE, "'c2'", d, 1);
    REFUSED(fx_model_def_conv2d(d, "c2", NULL, 4, 3, 0, 1, 1), FX_ESHAPE, "'c2'", d, 1);
    REFUSED(fx_model_def_conv2d(d, "c2", NULL, 4, 3, 1, 1, 2), FX_EINVAL, "'c2'", d, 1);
    REFUSED(fx_model_def_pool2d(d, "maxpool2d", "p", NULL, 9, 1, 0), FX_ESHAPE, "'p'", d, 1);
    REFUSED(fx_model_def_pool2d(d, "maxpool2d", "p", NULL, 2, 2, 2), FX_ESHAPE, "'p'", d, 1);
    REFUSED(fx_model_def_pool2d(d, "minpool2d", "p", NULL, 2, 2, 0), FX_ENAME, "minpool2d", d,
            1);
    REFUSED(fx_model_def_linear(d, "fc", NULL, 0), FX_ESHAPE, "'fc'", d, 1);
    REFUSED(fx_model_def_dropout(d, "dr", NULL, 1.0), FX_ERANGE, "'dr'", d, 1);
    REFUSED(fx_model_def_dropout(d, "dr", NULL, -0.1), FX_ERANGE, "'dr'", d, 1);
    OK(fx_model_def_flatten(d, "flat", NULL));
    REFUSED(fx_model_def_conv2d(d, "c2", NULL, 4, 1, 1, 0, 1), FX_ESHAPE, "'c2'", d, 2);
    REFUSED(fx_model_def_global_avgpool(d, "g", NULL), FX_ESHAPE, "'g'", d, 2);
    /* add: unequal shapes (the message gives both), and a third consumer */
    REFUSED(fx_model_def_add(d, "sum", "flat", "c1"), FX_ESHAPE, "'sum'", d, 2);
    CHECK(strstr(flexpoint_last_error(), "(256)") && strstr(flexpoint_last_error(), "(4, 8, 8)"),
          "add message gives no shapes: %s", flexpoint_last_error());
    REFUSED(fx_model_def_add(d, "sum", "c1", NULL), FX_EINVAL, "'sum'", d, 2);
    OK(fx_model_def_activation(d, "relu", "r", "c1")); /* c1 feeds flat and r */
    REFUSED(fx_model_def_activation(d, "tanh", "t", "c1"), FX_ESHAPE, "'t'", d, 3);
    /* shapes read back */
    int nd = 0;
    int64_t s[FX_MODEL_MAX_RANK];
    OK(fx_model_def_shape(d, "flat", &nd, s));
    CHECK(nd == 1 && s[0] == 256, "flat is rank %d, %lld", nd, (long long)s[0]);
    OK(fx_model_def_shape(d, NULL, &nd, s));
    CHECK(nd == 3 && s[0] == 4 && s[1] == 8 && s[2] == 8, "the output shape");
    CHECK_STATUS(fx_model_def_shape(d, "zz", &nd, s), FX_ENAME);
    /* a trainer: the images and classes must fit, every layer but the last must be used */
    fx_dataset *tr = test_patch_dataset(64, 2);
    fx_train_config c;
    test_train_config(&c, "mlp", FMT_FP32, 1);
    c.batch_size = 16;
    CHECK(tr && fx_trainer_new_model(&c, d, tr, NULL) == NULL &&
              flexpoint_last_status() == FX_ESHAPE,
          "a model of 3x8x8 inputs trained on 1x12x12 images");
    fx_model_def *e = NULL;
    int64_t flat[1] = {144};
    OK(fx_model_def_new("e", 1, flat, &e));
    if (e) {
        OK(fx_model_def_linear(e, "h", NULL, 7));
        CHECK(fx_trainer_new_model(&c, e, tr, NULL) == NULL &&
                  flexpoint_last_status() == FX_ESHAPE &&
                  strstr(flexpoint_last_error(), "'h'"),
              "a last layer of 7 values for 10 classes: %s", flexpoint_last_error());
        OK(fx_model_def_linear(e, "unused", "input", 10));
        OK(fx_model_def_linear(e, "out", "input", 10));
        CHECK(fx_trainer_new_model(&c, e, tr, NULL) == NULL &&
                  flexpoint_last_status() == FX_ESHAPE &&
                  strstr(flexpoint_last_error(), "'h'"),
              "a layer that feeds nothing: %s", flexpoint_last_error());
    }
    CHECK(fx_trainer_new_model(&c, NULL, tr, NULL) == NULL &&
              flexpoint_last_status() == FX_EINVAL,
          "a NULL definition");
    fx_model_def_free(e);
    fx_dataset_free(tr);
    fx_model_def_free(d);
    fx_model_def_free(NULL);
}

/* The canonical text of d reads back to a definition of the same identity and text. */
static void round_trip(const fx_model_def *d)
{
    size_t len = 0;
    CHECK_STATUS(fx_model_def_to_text(d, NULL, 0, &len), FX_ERANGE);
    char *txt = malloc(len + 1);
    fx_model_def *back = NULL;
    if (txt) {
        OK(fx_model_def_to_text(d, txt, len + 1, NULL));
        OK(fx_model_def_parse(txt, len, "canonical", &back));
    }
    char i1[FX_MODEL_ID_SIZE] = "x", i2[FX_MODEL_ID_SIZE] = "y";
    OK(fx_model_def_identity(d, i1));
    if (back) OK(fx_model_def_identity(back, i2));
    CHECK(strcmp(i1, i2) == 0, "identity %s after a round trip through the text, was %s", i2, i1);
    size_t len2 = 0;
    char *txt2 = malloc(len + 1);
    if (back && txt2) OK(fx_model_def_to_text(back, txt2, len + 1, &len2));
    CHECK(txt && txt2 && len2 == len && memcmp(txt, txt2, len) == 0,
          "the canonical text changed in a round trip");
    free(txt);
    free(txt2);
    fx_model_def_free(back);
}

/* ------------------------------------------------------------------ identity -------------- */

static void identity(void)
{
    fx_dataset *tr = test_patch_dataset(64, 3);
    if (!tr) return;
    int64_t s[3] = {1, 12, 12};
    fx_model_def *a = NULL, *b = NULL;
    OK(fx_model_def_new("a", 3, s, &a));
    OK(fx_model_def_new("b", 3, s, &b));
    if (!a || !b) goto done;
    /* the same parameters, another network: pooling of stride 2 against stride 3 */
    OK(fx_model_def_layer(a, "conv2d", "c", "out=4 kernel=3 pad=1"));
    OK(fx_model_def_layer(a, "relu", "r", ""));
    OK(fx_model_def_layer(a, "avgpool2d", "p", "kernel=4 stride=4"));
    OK(fx_model_def_layer(a, "linear", "fc", "out=10"));
    OK(fx_model_def_layer(b, "conv2d", "c", "out=4 kernel=3 pad=1"));
    OK(fx_model_def_layer(b, "relu", "r", ""));
    OK(fx_model_def_layer(b, "maxpool2d", "p", "kernel=4 stride=4"));
    OK(fx_model_def_layer(b, "linear", "fc", "out=10"));
    char ia[FX_MODEL_ID_SIZE], ib[FX_MODEL_ID_SIZE];
    OK(fx_model_def_identity(a, ia));
    OK(fx_model_def_identity(b, ib));
    CHECK(strcmp(ia, ib) != 0 && strlen(ia) == 15 && ia[0] == '@', "identities %s and %s", ia,
          ib);
    fx_train_config c;
    test_train_config(&c, "", FMT_FLEX16_5, 4);
    c.batch_size = 16;
    fx_trainer *ta = fx_trainer_new_model(&c, a, tr, NULL);
    fx_trainer *ta2 = fx_trainer_new_model(&c, a, tr, NULL);
    fx_trainer *tb = fx_trainer_new_model(&c, b, tr, NULL);
    snprintf(c.model, sizeof c.model, "mlp");
    fx_trainer *tm = fx_trainer_new(&c, tr, NULL);
    CHECK(ta && ta2 && tb && tm, "trainers: %s", flexpoint_last_error());
    char path[64];
    snprintf(path, sizeof path, "/tmp/fx_test_model_api_%d.ckpt", (int)getpid());
    if (ta && ta2 && tb && tm) {
        float l;
        OK(fx_trainer_step(ta, &l));
        OK(fx_trainer_save(ta, path));
        OK(fx_trainer_load(ta2, path));
        CHECK_STATUS(fx_trainer_load(tb, path), FX_ECORRUPT);
        CHECK(strstr(flexpoint_last_error(), ia) && strstr(flexpoint_last_error(), ib),
              "the refusal names neither identity: %s", flexpoint_last_error());
        CHECK_STATUS(fx_trainer_load(tm, path), FX_ECORRUPT);
        float l1 = 0, l2 = 1;
        OK(fx_trainer_step(ta, &l1));
        OK(fx_trainer_step(ta2, &l2));
        CHECK(test_f32_bits(l1) == test_f32_bits(l2), "resumed %.9g, original %.9g", (double)l2,
              (double)l1);
        /* the checkpoint's configuration names the identity, which fx_trainer_new refuses */
        fx_train_config got;
        OK(fx_checkpoint_config(path, &got));
        CHECK(strcmp(got.model, ia) == 0, "checkpoint model '%s', want %s", got.model, ia);
        CHECK(fx_trainer_new(&got, tr, NULL) == NULL && flexpoint_last_status() == FX_ENAME &&
                  strstr(flexpoint_last_error(), "fx_trainer_new_model"),
              "fx_trainer_new took an identity: %s", flexpoint_last_error());
        CHECK_STATUS(fx_model_check(ia), FX_ENAME);
    }
    unlink(path);
    fx_trainer_free(ta);
    fx_trainer_free(ta2);
    fx_trainer_free(tb);
    fx_trainer_free(tm);
done:
    fx_model_def_free(a);
    fx_model_def_free(b);
    fx_dataset_free(tr);
}

/* ------------------------------------------------------------------ other kinds ----------- */

static fx_model_def *zoo(void)
{
    fx_model_def *d = NULL;
    int64_t s[3] = {1, 12, 12};
    OK(fx_model_def_new("zoo", 3, s, &d));
    if (!d) return NULL;
    OK(fx_model_def_layer(d, "conv2d", "c1", "out=8 kernel=3 pad=1"));
    OK(fx_model_def_layer(d, "tanh", "t1", ""));
    OK(fx_model_def_layer(d, "avgpool2d", "p1", "kernel=2"));          /* (8, 6, 6) */
    OK(fx_model_def_layer(d, "conv2d", "c2", "out=8 kernel=3 pad=1 bias=0"));
    OK(fx_model_def_layer(d, "batchnorm", "bn2", ""));
    OK(fx_model_def_layer(d, "gelu", "g2", ""));
    OK(fx_model_def_layer(d, "add", "res", "in=g2,p1"));
    OK(fx_model_def_layer(d, "maxpool2d", "p2", "kernel=3 stride=2 pad=1")); /* (8, 3, 3) */
    OK(fx_model_def_layer(d, "flatten", "flat", ""));
    OK(fx_model_def_layer(d, "linear", "fc1", "out=32"));
    OK(fx_model_def_layer(d, "batchnorm", "bn3", ""));
    OK(fx_model_def_layer(d, "silu", "s3", ""));
    OK(fx_model_def_layer(d, "dropout", "drop", "p=0.25"));
    OK(fx_model_def_layer(d, "linear", "fc2", "out=16"));
    OK(fx_model_def_layer(d, "sigmoid", "sg", ""));
    OK(fx_model_def_layer(d, "linear", "fc3", "out=10"));
    return d;
}

static void other_kinds(void)
{
    fx_dataset *tr = test_patch_dataset(256, 7);
    fx_model_def *d = zoo();
    if (!tr || !d) goto done;
    const int fmts[3] = {FMT_FP32, FMT_FLEX16_5, FMT_BF16};
    char path[64];
    snprintf(path, sizeof path, "/tmp/fx_test_model_zoo_%d.ckpt", (int)getpid());
    for (int f = 0; f < 3; f++) {
        fx_train_config c;
        test_train_config(&c, "", fmts[f], 21);
        c.batch_size = 32;
        c.lr = 0.1;
        fx_trainer *a = fx_trainer_new_model(&c, d, tr, NULL);
        fx_trainer *b = fx_trainer_new_model(&c, d, tr, NULL);
        CHECK(a && b, "zoo in %s: %s", fmt_name((fmt_t)fmts[f]), flexpoint_last_error());
        if (!a || !b) {
            fx_trainer_free(a);
            fx_trainer_free(b);
            continue;
        }
        /* 3 epochs of 8 steps: the loss falls; b saves after 5 steps and resumes */
        double first = 0, last = 0;
        fx_trainer *r = NULL;
        for (int s = 0; s < 24; s++) {
            float la = 0, lb = 0;
            OK(fx_trainer_step(a, &la));
            CHECK(isfinite(la), "zoo %s: step %d loss %g", fmt_name((fmt_t)fmts[f]), s,
                  (double)la);
            if (s < 8) first += la / 8.0;
            if (s >= 16) last += la / 8.0;
            fx_trainer *bb = r ? r : b;
            OK(fx_trainer_step(bb, &lb));
            CHECK(test_f32_bits(la) == test_f32_bits(lb), "zoo %s: step %d losses %.9g, %.9g%s",
                  fmt_name((fmt_t)fmts[f]), s, (double)la, (double)lb,
                  r ? " (resumed)" : "");
            if (s == 4) {
                OK(fx_trainer_save(b, path));
                r = fx_trainer_new_model(&c, d, tr, NULL);
                CHECK(r != NULL, "zoo: %s", flexpoint_last_error());
                if (r) OK(fx_trainer_load(r, path));
            }
        }
        CHECK(last < 0.9 * first, "zoo %s: mean loss %.4f in the first epoch, %.4f in the third",
              fmt_name((fmt_t)fmts[f]), first, last);
        /* a layer profile names the kinds */
        int found = 0;
        for (int i = 0; i < fx_trainer_layer_count(a); i++) {
            fx_layer_profile lp;
            OK(fx_trainer_layer_profile(a, i, &lp));
            found += !strcmp(lp.kind, "gelu") + !strcmp(lp.kind, "dropout") +
                     !strcmp(lp.kind, "flatten") + !strcmp(lp.kind, "avgpool");
        }
        CHECK(found == 4, "layer kinds in the profile: %d of 4", found);
        CHECK(fx_trainer_tensor_find(a, "flat.out") < 0 && fx_trainer_tensor_find(a, "s3.out") >= 0,
              "registry: a flatten layer registers no output of its own");
        unlink(path);
        fx_trainer_free(a);
        fx_trainer_free(b);
        fx_trainer_free(r);
    }
done:
    fx_model_def_free(d);
    fx_dataset_free(tr);
}

int main(void)
{
    refusals();
    fx_model_def *z = zoo(), *r = NULL;
    OK(fx_model_def_builtin("resnet20", 3, 32, 32, 10, &r));
    if (z) round_trip(z);
    if (r) round_trip(r);
    fx_model_def_free(z);
    fx_model_def_free(r);
    identity();
    other_kinds();
    builtins_by_hand();
    example_files();
    return test_finish(NAME);
}
