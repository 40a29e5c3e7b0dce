/* The training API: every format learns a small synthetic problem; runs are bit-identical
 * when repeated; a run resumed from a checkpoint equals the uninterrupted run bit for bit;
 * corrupt checkpoints are refused and leave the trainer unchanged; bad configurations fail
 * with messages; asking for a device the library cannot use fails cleanly (FX_EDEVICE). */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_gpu.h"
#include "flexpoint_train.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static fx_trainer *make(const char *model, int fmt, const fx_dataset *tr, const fx_dataset *te)
{
    fx_train_config c;
    test_train_config(&c, model, fmt, 7);
    fx_trainer *t = fx_trainer_new(&c, tr, te);
    CHECK(t != NULL, "trainer %s/%s: %s", model, fmt_name((fmt_t)fmt), flexpoint_last_error());
    return t;
}

static int params_equal(const fx_trainer *a, const fx_trainer *b)
{
    int64_t n = fx_trainer_param_count(a);
    if (n != fx_trainer_param_count(b)) return 0;
    float *pa = malloc((size_t)n * sizeof(float)), *pb = malloc((size_t)n * sizeof(float));
    fx_trainer_get_params(a, pa);
    fx_trainer_get_params(b, pb);
    int eq = memcmp(pa, pb, (size_t)n * sizeof(float)) == 0;
    free(pa);
    free(pb);
    return eq;
}

/* Every format learns: the loss falls and test accuracy clears chance by a wide margin. */
static void learns(const fx_dataset *tr, const fx_dataset *te)
{
    for (int f = 0; f < FMT_COUNT; f++) {
        fx_trainer *t = make("mlp", f, tr, te);
        if (!t) continue;
        float first = 0, loss = 0;
        CHECK_STATUS(fx_trainer_step(t, &first), FX_OK);
        fx_epoch_metrics m;
        CHECK_STATUS(fx_trainer_epoch(t, &m), FX_OK);
        CHECK_STATUS(fx_trainer_epoch(t, &m), FX_OK);
        CHECK_STATUS(fx_trainer_step(t, &loss), FX_OK);
        /* 10 classes: chance is 0.10; the patch classes are separable, so 0.8 is a margin a
         * broken format cannot reach */
        CHECK(m.test_accuracy > 0.8, "%s: test accuracy %.3f after 2 epochs",
              fmt_name((fmt_t)f), m.test_accuracy);
        CHECK(isfinite(m.train_loss) && m.nonfinite_losses == 0, "%s: non-finite loss",
              fmt_name((fmt_t)f));
        CHECK(loss < 0.5f * first, "%s: loss %.4f -> %.4f did not halve", fmt_name((fmt_t)f),
              first, loss);
        printf("%-8s first loss %.4f, after 2 epochs %.4f, test accuracy %.4f\n",
               fmt_name((fmt_t)f), first, loss, m.test_accuracy);
        fx_trainer_free(t);
    }
}

/* Same seed, same bits; and resuming from a checkpoint reproduces the uninterrupted run. */
static void determinism_and_resume(const char *model, int fmt, const fx_dataset *tr,
                                   const fx_dataset *te)
{
    fx_trainer *a = make(model, fmt, tr, te), *b = make(model, fmt, tr, te);
    if (!a || !b) return;
    CHECK(params_equal(a, b), "%s/%s: initial weights differ", model, fmt_name((fmt_t)fmt));
    for (int s = 0; s < 7; s++) {
        CHECK_STATUS(fx_trainer_step(a, NULL), FX_OK);
        CHECK_STATUS(fx_trainer_step(b, NULL), FX_OK);
    }
    CHECK(params_equal(a, b), "%s/%s: repeated runs differ", model, fmt_name((fmt_t)fmt));

    char path[512];
    snprintf(path, sizeof path, "%s/%s_%s.ckpt", tmpdir, model, fmt_name((fmt_t)fmt));
    CHECK_STATUS(fx_trainer_save(a, path), FX_OK);
    for (int s = 0; s < 9; s++) CHECK_STATUS(fx_trainer_step(a, NULL), FX_OK);
    fx_trainer *c = make(model, fmt, tr, te);
    CHECK_STATUS(fx_trainer_load(c, path), FX_OK);
    CHECK(fx_trainer_global_step(c) == 7, "resumed at step %lld", (long long)fx_trainer_global_step(c));
    for (int s = 0; s < 9; s++) CHECK_STATUS(fx_trainer_step(c, NULL), FX_OK);
    CHECK(params_equal(a, c), "%s/%s: resumed run differs from the uninterrupted one", model,
          fmt_name((fmt_t)fmt));
    /* every tensor's exponent matches too */
    for (int i = 0; i < fx_trainer_tensor_count(a); i++) {
        tensor_t *x = fx_trainer_tensor(a, i), *y = fx_trainer_tensor(c, i);
        if (fmt_is_shared_exponent(tensor_fmt(x)))
            CHECK(tensor_exp(x) == tensor_exp(y), "%s exponent %d vs %d",
                  fx_trainer_tensor_name(a, i), tensor_exp(x), tensor_exp(y));
    }
    fx_trainer_free(a);
    fx_trainer_free(b);
    fx_trainer_free(c);
}

static void corrupt_checkpoints(const fx_dataset *tr, const fx_dataset *te)
{
    fx_trainer *a = make("mlp", FMT_FLEX16_5, tr, te);
    if (!a) return;
    fx_trainer_step(a, NULL);
    char path[512], bad[512];
    snprintf(path, sizeof path, "%s/good.ckpt", tmpdir);
    snprintf(bad, sizeof bad, "%s/bad.ckpt", tmpdir);
    CHECK_STATUS(fx_trainer_save(a, path), FX_OK);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len);
    CHECK(fread(buf, 1, (size_t)len, f) == (size_t)len, "read back");
    fclose(f);

    fx_trainer *b = make("mlp", FMT_FLEX16_5, tr, te);
    float before = 0;
    struct {
        const char *what;
        long keep;   /* bytes written */
        long flip;   /* byte to flip, -1 none */
        const char *msg;
    } cases[] = {
        {"flipped payload byte", len, len / 2, "checksum"},
        {"truncated", len - 100, -1, "shorter"},
        {"bad magic", len, 0, "magic"},
        {"empty", 0, -1, "truncated"},
    };
    int64_t n = fx_trainer_param_count(b);
    float *p0 = malloc((size_t)n * sizeof(float)), *p1 = malloc((size_t)n * sizeof(float));
    fx_trainer_get_params(b, p0);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FILE *g = fopen(bad, "wb");
        if (cases[i].flip >= 0) buf[cases[i].flip] ^= 0x5a;
        fwrite(buf, 1, (size_t)cases[i].keep, g);
        fclose(g);
        if (cases[i].flip >= 0) buf[cases[i].flip] ^= 0x5a;
        CHECK_STATUS(fx_trainer_load(b, bad), FX_ECORRUPT);
        CHECK(strstr(flexpoint_last_error(), cases[i].msg) && strstr(flexpoint_last_error(), "bad.ckpt"),
              "%s: message '%s'", cases[i].what, flexpoint_last_error());
        fx_trainer_get_params(b, p1);
        CHECK(memcmp(p0, p1, (size_t)n * sizeof(float)) == 0, "%s: trainer changed", cases[i].what);
        CHECK(fx_trainer_global_step(b) == 0, "%s: position changed", cases[i].what);
    }
    (void)before;
    /* a checkpoint of another configuration is refused by name */
    fx_trainer *c = make("mlp", FMT_DFP16, tr, te);
    CHECK_STATUS(fx_trainer_load(c, path), FX_ECORRUPT);
    CHECK(strstr(flexpoint_last_error(), "flex16_5") != NULL, "config msg: %s", flexpoint_last_error());
    CHECK_STATUS(fx_trainer_load(c, "/nonexistent/dir/x.ckpt"), FX_EIO);
    CHECK_STATUS(fx_trainer_save(a, "/nonexistent/dir/x.ckpt"), FX_EIO);
    CHECK(strstr(flexpoint_last_error(), "/nonexistent/dir") != NULL, "save msg: %s", flexpoint_last_error());
    free(p0);
    free(p1);
    free(buf);
    fx_trainer_free(a);
    fx_trainer_free(b);
    fx_trainer_free(c);
    remove(path);
    remove(bad);
}

static void bad_configs(const fx_dataset *tr)
{
    fx_train_config c;
    fx_train_config_default(&c);
    c.batch_size = 0;
    CHECK(fx_trainer_new(&c, tr, NULL) == NULL && strstr(flexpoint_last_error(), "batch_size=0"),
          "batch 0: %s", flexpoint_last_error());
    fx_train_config_default(&c);
    snprintf(c.model, sizeof c.model, "vgg");
    CHECK(fx_trainer_new(&c, tr, NULL) == NULL && strstr(flexpoint_last_error(), "vgg"),
          "model: %s", flexpoint_last_error());
    fx_train_config_default(&c);
    c.fmt = 42;
    CHECK(fx_trainer_new(&c, tr, NULL) == NULL, "fmt 42");
    fx_train_config_default(&c);
    snprintf(c.autoflex, sizeof c.autoflex, "magic");
    CHECK(fx_trainer_new(&c, tr, NULL) == NULL, "preset");
    fx_train_config_default(&c);
    c.lr = -1;
    CHECK(fx_trainer_new(&c, tr, NULL) == NULL && strstr(flexpoint_last_error(), "lr"), "lr");
    fx_train_config_default(&c);
    c.batch_size = 100000;
    CHECK(fx_trainer_new(&c, tr, NULL) == NULL, "batch larger than data");
    CHECK(fx_trainer_new(NULL, tr, NULL) == NULL, "NULL cfg");
    CHECK_STATUS(fx_trainer_step(NULL, NULL), FX_EINVAL);
}

/* A device the library cannot use fails at creation with FX_EDEVICE and a message, before
 * anything is allocated (this suite runs under ASan: a leak would fail it). Without CUDA in
 * the build or without a GPU every ordinal is such a device; with GPUs, the first ordinal past
 * the last one is. test_train_device covers training on a device that exists. */
static void unusable_device(const fx_dataset *tr)
{
    fx_train_config c;
    fx_train_config_default(&c);
    CHECK(c.device == -1, "default device %d, wanted -1 (the host)", c.device);
    int missing = flexpoint_gpu_device_count();
    const int ordinals[2] = {missing, missing + 7};
    for (int i = 0; i < 2; i++) {
        fx_train_config_default(&c);
        snprintf(c.model, sizeof c.model, "cnn");
        c.batch_size = 32;
        c.device = ordinals[i];
        flexpoint_clear_error();
        fx_trainer *t = fx_trainer_new(&c, tr, NULL);
        CHECK(t == NULL, "device %d: a trainer on a device that cannot be used", ordinals[i]);
        CHECK(flexpoint_last_status() == FX_EDEVICE, "device %d: status %d, wanted FX_EDEVICE",
              ordinals[i], flexpoint_last_status());
        char want[32];
        snprintf(want, sizeof want, "device=%d", ordinals[i]);
        CHECK(strstr(flexpoint_last_error(), want) && strstr(flexpoint_last_error(), "CUDA") &&
                  strstr(flexpoint_last_error(), "fx_trainer_new"),
              "device %d: message '%s'", ordinals[i], flexpoint_last_error());
        fx_trainer_free(t);
    }
    fx_train_config_default(&c);
    c.device = -2;
    flexpoint_clear_error();
    CHECK(fx_trainer_new(&c, tr, NULL) == NULL && flexpoint_last_status() == FX_EINVAL &&
              strstr(flexpoint_last_error(), "device=-2"),
          "device -2: status %d, '%s'", flexpoint_last_status(), flexpoint_last_error());
    /* the host, named explicitly, is the default */
    fx_train_config_default(&c);
    c.batch_size = 32;
    c.device = -1;
    fx_trainer *h = fx_trainer_new(&c, tr, NULL);
    CHECK(h != NULL, "device -1: %s", flexpoint_last_error());
    if (h) {
        int i = fx_trainer_tensor_find(h, "conv1.w");
        CHECK(i >= 0 && tensor_device(fx_trainer_tensor(h, i)) == -1, "host trainer's weights "
              "are not on the host");
    }
    fx_trainer_free(h);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fx_test_train_XXXXXX");
    if (!mkdtemp(tmpdir)) return test_skip("test_train", "cannot create a temporary directory");
    flexpoint_set_num_threads(2);
    /* small synthetic 1x12x12 images, 10 classes */
    fx_dataset *tr = test_patch_dataset(1280, 11), *te = test_patch_dataset(320, 12);
    CHECK(tr && te, "synthetic data: %s", flexpoint_last_error());
    if (!tr || !te) return test_finish("test_train");
    learns(tr, te);
    /* 320 images = 10 steps per epoch, so 7 + 9 steps cross an epoch boundary */
    fx_dataset *small = fx_dataset_subset(tr, 0, 320), *small_te = fx_dataset_subset(te, 0, 64);
    for (int f = 0; f < FMT_COUNT; f++) determinism_and_resume("mlp", f, small, small_te);
    determinism_and_resume("cnn", FMT_FLEX16_5, small, small_te);
    determinism_and_resume("cnn", FMT_FP16, small, small_te);
    determinism_and_resume("resnet20", FMT_DFP16, small, small_te);
    corrupt_checkpoints(small, small_te);
    fx_dataset_free(small);
    fx_dataset_free(small_te);
    bad_configs(tr);
    unusable_device(tr);
    fx_dataset_free(tr);
    fx_dataset_free(te);
    rmdir(tmpdir);
    return test_finish("test_train");
}
