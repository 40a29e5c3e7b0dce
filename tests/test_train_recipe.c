/* The trainer's recipe: optimiser (SGD, Adam, AdamW), gradient clipping by the global norm and
 * the loss scaler's parameters (fx_train_config).
 *
 * - Defaults: SGD, Adam's usual constants, no clipping, and the scaler of fx_loss_scaler_init.
 * - Every new field out of range (each bound, NaN and Inf) is refused with a message naming it.
 * - Adam and AdamW give the same bits without weight decay and differ with it; Adam learns the
 *   patch data; an Adam run resumed from a checkpoint equals the uninterrupted run bit for bit;
 *   an Adam checkpoint does not load into an SGD trainer, and a negative second moment in a
 *   checkpoint is refused.
 * - Clipping: one SGD step without momentum moves the fp32 master weights by at most
 *   lr * clip_norm (and by something), with and without loss scaling; a clip above the norm
 *   changes no bit.
 * - Loss scaler: the initial scale, growth factor and interval are used; a static scale never
 *   changes; the dynamic scale never backs off below its floor. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_nn.h"
#include "flexpoint_train.h"
#include "testutil.h"
#include "train/checkpoint.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAME = "test_train_recipe";
static char dir[] = "/tmp/fx_train_recipe_XXXXXX";

static fx_train_config config(const char *model, int fmt)
{
    fx_train_config c;
    test_train_config(&c, model, fmt, 9);
    c.batch_size = 16;
    return c;
}

static fx_trainer *make(const fx_train_config *c, const fx_dataset *tr)
{
    fx_trainer *t = fx_trainer_new(c, tr, tr);
    CHECK(t != NULL, "fx_trainer_new: %s", flexpoint_last_error());
    return t;
}

static float *params_of(const fx_trainer *t, int64_t *n)
{
    *n = fx_trainer_param_count(t);
    float *p = malloc((size_t)*n * sizeof *p);
    if (p) CHECK_STATUS(fx_trainer_get_params(t, p), FX_OK);
    return p;
}

static int same_params(const fx_trainer *a, const fx_trainer *b)
{
    int64_t na = 0, nb = 0;
    float *pa = params_of(a, &na), *pb = params_of(b, &nb);
    int same = pa && pb && na == nb && memcmp(pa, pb, (size_t)na * sizeof *pa) == 0;
    free(pa);
    free(pb);
    return same;
}

static void steps(fx_trainer *t, int n)
{
    for (int s = 0; s < n && t; s++) CHECK_STATUS(fx_trainer_step(t, NULL), FX_OK);
}

static void defaults(void)
{
    fx_train_config c;
    fx_train_config_default(&c);
    fx_loss_scaler s;
    fx_loss_scaler_init(&s, 1);
    CHECK(c.optimizer == FX_OPT_SGD && c.adam_beta1 == 0.9 && c.adam_beta2 == 0.999 &&
              c.adam_eps == 1e-8 && c.clip_norm == 0.0,
          "optimiser defaults");
    CHECK(c.loss_scale_init == s.scale && c.loss_scale_growth == s.growth_factor &&
              c.loss_scale_backoff == s.backoff_factor &&
              c.loss_scale_interval == s.growth_interval && c.loss_scale_min == 0.0,
          "loss-scaler defaults differ from fx_loss_scaler_init");
}

static void refused(const fx_train_config *c, const fx_dataset *tr, const char *frag)
{
    flexpoint_clear_error();
    fx_trainer *t = fx_trainer_new(c, tr, NULL);
    CHECK(t == NULL && flexpoint_last_status() == FX_EINVAL, "%s: accepted or wrong status %d",
          frag, flexpoint_last_status());
    CHECK(strstr(flexpoint_last_error(), frag) != NULL, "%s: message '%s'", frag,
          flexpoint_last_error());
    fx_trainer_free(t);
}

#define BAD(field, value, frag)                                                                \
    do {                                                                                       \
        fx_train_config c_ = config("mlp", FMT_FP32);                                          \
        c_.field = (value);                                                                    \
        refused(&c_, tr, frag);                                                                \
    } while (0)

static void validation(const fx_dataset *tr)
{
    BAD(optimizer, 3, "optimizer=3");
    BAD(optimizer, -1, "optimizer=-1");
    BAD(adam_beta1, 1.0, "adam_beta1=1");
    BAD(adam_beta1, -0.1, "adam_beta1=-0.1");
    BAD(adam_beta1, NAN, "adam_beta1=nan");
    BAD(adam_beta2, 1.0, "adam_beta2=1");
    BAD(adam_eps, 0.0, "adam_eps=0");
    BAD(adam_eps, INFINITY, "adam_eps=inf");
    BAD(clip_norm, -1.0, "clip_norm=-1");
    BAD(clip_norm, NAN, "clip_norm=nan");
    BAD(clip_norm, INFINITY, "clip_norm=inf");
    BAD(loss_scale_init, 0.0, "loss_scale_init=0");
    BAD(loss_scale_init, 1e39, "loss_scale_init=1e+39");
    BAD(loss_scale_init, NAN, "loss_scale_init=nan");
    BAD(loss_scale_growth, 1.0, "loss_scale_growth=1");
    BAD(loss_scale_growth, INFINITY, "loss_scale_growth=inf");
    BAD(loss_scale_backoff, 1.0, "loss_scale_backoff=1");
    BAD(loss_scale_backoff, 0.0, "loss_scale_backoff=0");
    BAD(loss_scale_interval, 0, "loss_scale_interval=0");
    BAD(loss_scale_min, -1.0, "loss_scale_min=-1");
    BAD(loss_scale_min, 1e6, "loss_scale_min=1e+06");
    BAD(loss_scale_min, NAN, "loss_scale_min=nan");
    /* the bounds themselves */
    fx_train_config c = config("mlp", FMT_FP32);
    c.adam_beta1 = 0.0;
    c.loss_scale_min = c.loss_scale_init;
    c.loss_scale_init = FLT_MAX;
    c.loss_scale_min = FLT_MAX;
    c.loss_scale_interval = 1;
    fx_trainer *t = fx_trainer_new(&c, tr, NULL);
    CHECK(t != NULL, "bounds refused: %s", flexpoint_last_error());
    fx_trainer_free(t);
}

static void adam(const fx_dataset *tr)
{
    fx_train_config a = config("mlp", FMT_FLEX16_5), w = a;
    a.optimizer = FX_OPT_ADAM;
    a.lr = 1e-3;
    w.optimizer = FX_OPT_ADAMW;
    w.lr = 1e-3;
    fx_trainer *ta = make(&a, tr), *tw = make(&w, tr);
    steps(ta, 5);
    steps(tw, 5);
    if (ta && tw) CHECK(same_params(ta, tw), "Adam and AdamW differ without weight decay");
    fx_trainer_free(ta);
    fx_trainer_free(tw);
    a.weight_decay = w.weight_decay = 0.1;
    ta = make(&a, tr);
    tw = make(&w, tr);
    steps(ta, 3);
    steps(tw, 3);
    if (ta && tw) CHECK(!same_params(ta, tw), "Adam and AdamW agree with weight decay 0.1");
    fx_trainer_free(ta);
    fx_trainer_free(tw);

    /* learns */
    fx_train_config l = config("mlp", FMT_FP32);
    l.optimizer = FX_OPT_ADAMW;
    l.lr = 3e-3;
    fx_trainer *t = make(&l, tr);
    steps(t, 60);
    double acc = 0;
    if (t) CHECK_STATUS(fx_trainer_evaluate(t, tr, &acc, NULL), FX_OK);
    CHECK(acc > 0.6, "AdamW reached only %.3f on the patch data", acc);
    fx_trainer_free(t);

    /* resume bit for bit */
    char path[512];
    snprintf(path, sizeof path, "%s/adam.ckpt", dir);
    fx_trainer *u = make(&a, tr), *v = make(&a, tr), *r = make(&a, tr);
    if (u && v && r) {
        steps(u, 6);
        steps(v, 3);
        CHECK_STATUS(fx_trainer_save(v, path), FX_OK);
        CHECK_STATUS(fx_trainer_load(r, path), FX_OK);
        steps(r, 3);
        CHECK(same_params(u, r), "an Adam run resumed at step 3 differs from the uninterrupted");
    }
    fx_trainer_free(u);
    fx_trainer_free(v);
    fx_trainer_free(r);
    /* into an SGD trainer: refused, naming the optimiser */
    fx_train_config sg = a;
    sg.optimizer = FX_OPT_SGD;
    fx_trainer *s = make(&sg, tr);
    if (s) {
        CHECK_STATUS(fx_trainer_load(s, path), FX_ECORRUPT);
        CHECK(strstr(flexpoint_last_error(), "optimizer 1") != NULL, "message '%s'",
              flexpoint_last_error());
    }
    fx_trainer_free(s);
    /* a negative second moment (the checksum recomputed, so the field check is reached) */
    FILE *f = fopen(path, "rb");
    fx_trainer *q = make(&a, tr);
    if (f && q) {
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *b = malloc((size_t)len);
        CHECK(b && fread(b, 1, (size_t)len, f) == (size_t)len, "read %s", path);
        int64_t n0 = fx_trainer_tensor_count(q) > 0
                         ? tensor_numel(fx_trainer_tensor(q, 0))
                         : 0;
        /* payload: config, position, scaler, then parameter 0: master (presence + n0 floats),
         * momentum (the same), second moment (presence, then its first float) */
        size_t off = FX_CKPT_HEADER_BYTES + FX_CKPT_PAYLOAD_SCALER + sizeof(fx_loss_scaler) +
                     2 * (1 + (size_t)n0 * 4) + 1;
        float neg = -2.0f;
        if (b && off + 4 <= (size_t)len) {
            memcpy(b + off, &neg, 4);
            uint32_t crc = fx_crc32(b + FX_CKPT_HEADER_BYTES, (size_t)len - FX_CKPT_HEADER_BYTES);
            memcpy(b + FX_CKPT_OFF_CRC, &crc, 4);
            char bad[512];
            snprintf(bad, sizeof bad, "%s/neg.ckpt", dir);
            FILE *g = fopen(bad, "wb");
            CHECK(g && fwrite(b, 1, (size_t)len, g) == (size_t)len, "write %s", bad);
            if (g) fclose(g);
            int64_t before = fx_trainer_global_step(q);
            CHECK_STATUS(fx_trainer_load(q, bad), FX_ECORRUPT);
            CHECK(strstr(flexpoint_last_error(), "second moment 0 is -2") != NULL,
                  "message '%s'", flexpoint_last_error());
            CHECK(fx_trainer_global_step(q) == before, "a refused load moved the trainer");
        }
        free(b);
    }
    if (f) fclose(f);
    fx_trainer_free(q);
}

/* || master after one step - master before || for an SGD step without momentum. */
static double step_norm(fx_train_config c, const fx_dataset *tr)
{
    c.momentum = 0.0;
    fx_trainer *t = make(&c, tr);
    if (!t) return -1;
    int64_t n = 0, m = 0;
    float *a = params_of(t, &n);
    steps(t, 1);
    float *b = params_of(t, &m);
    double s = 0;
    for (int64_t i = 0; a && b && i < n; i++) s += ((double)b[i] - a[i]) * ((double)b[i] - a[i]);
    free(a);
    free(b);
    fx_trainer_free(t);
    return sqrt(s);
}

static void clipping(const fx_dataset *tr)
{
    for (int k = 0; k < 2; k++) {
        fx_train_config c = config("mlp", k ? FMT_FP16 : FMT_FP32);
        c.loss_scaling = k ? FX_LOSS_SCALING_STATIC : FX_LOSS_SCALING_OFF;
        c.loss_scale_init = 1024;
        double free_norm = step_norm(c, tr);
        c.clip_norm = 1e-3;
        double clipped = step_norm(c, tr);
        double bound = c.lr * c.clip_norm * (1 + 1e-3) + (k ? 1e-7 : 0);
        CHECK(clipped > 0 && clipped <= bound, "%s: a clipped step moved the weights by %g "
              "(bound %g; unclipped %g)", k ? "fp16, scale 1024" : "fp32", clipped, bound,
              free_norm);
        CHECK(free_norm > 10 * bound, "the unclipped step (%g) is too small to test clipping",
              free_norm);
    }
    /* a clip above the norm changes nothing */
    fx_train_config c = config("mlp", FMT_FLEX16_5), d = c;
    d.clip_norm = 1e30;
    fx_trainer *a = make(&c, tr), *b = make(&d, tr);
    steps(a, 3);
    steps(b, 3);
    if (a && b) CHECK(same_params(a, b), "clip_norm 1e30 changed the bits");
    fx_trainer_free(a);
    fx_trainer_free(b);
}

static void scaler(const fx_dataset *tr)
{
    fx_train_config c = config("mlp", FMT_FP16);
    c.loss_scale_init = 1024;
    c.loss_scale_growth = 4;
    c.loss_scale_interval = 2;
    fx_trainer *t = make(&c, tr);
    steps(t, 2);
    if (t) {
        const fx_loss_scaler *s = fx_trainer_loss_scaler(t);
        CHECK(s->skipped_steps == 0 && s->scale == 4096.0,
              "dynamic: scale %g after 2 clean steps (skipped %lld), want 4096", s->scale,
              (long long)s->skipped_steps);
    }
    fx_trainer_free(t);

    c = config("mlp", FMT_FP16);
    c.loss_scaling = FX_LOSS_SCALING_STATIC;
    c.loss_scale_init = 512;
    t = make(&c, tr);
    steps(t, 5);
    if (t) CHECK(fx_trainer_loss_scaler(t)->scale == 512.0, "static: scale %g, want 512",
                 fx_trainer_loss_scaler(t)->scale);
    fx_trainer_free(t);
    /* a static scale that overflows fp16 skips every step and keeps its value */
    c.loss_scale_init = 0x1p40;
    t = make(&c, tr);
    steps(t, 3);
    if (t) {
        const fx_loss_scaler *s = fx_trainer_loss_scaler(t);
        CHECK(s->scale == 0x1p40 && s->skipped_steps == 3,
              "static 2^40: scale %g, skipped %lld; want 2^40 and 3", s->scale,
              (long long)s->skipped_steps);
    }
    fx_trainer_free(t);

    c = config("mlp", FMT_FP16);
    c.loss_scaling = FX_LOSS_SCALING_DYNAMIC;
    c.loss_scale_init = 0x1p40;
    c.loss_scale_min = 0x1p37;
    t = make(&c, tr);
    steps(t, 6);
    if (t) {
        const fx_loss_scaler *s = fx_trainer_loss_scaler(t);
        CHECK(s->scale == 0x1p37 && s->skipped_steps >= 4,
              "floor: scale %g (want 2^37), skipped %lld", s->scale,
              (long long)s->skipped_steps);
    }
    fx_trainer_free(t);
}

int main(void)
{
    if (!mkdtemp(dir)) return test_skip(NAME, "no temporary folder");
    flexpoint_set_num_threads(2);
    fx_dataset *tr = test_patch_dataset(160, 3);
    CHECK(tr != NULL, "data: %s", flexpoint_last_error());
    defaults();
    if (tr) {
        validation(tr);
        adam(tr);
        clipping(tr);
        scaler(tr);
    }
    fx_dataset_free(tr);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "%s: could not remove %s\n", NAME, dir);
    return test_finish(NAME);
}
