/* Checkpoints: everything a resumed run needs to continue bit for bit.
 *
 * File layout: "FLEXCKPT" | u32 version | u32 reserved | u64 payload length | u32 CRC-32 of the
 * payload | payload. The payload is the configuration, the loop position, the loss scaler, the
 * epoch accumulators, then every parameter (working copy, gradient, master, momentum), batch
 * norm statistics and every training tensor's full state (data, exponent, Autoflex history),
 * in the model's fixed order. Files are written to a temporary name and renamed, so a crash
 * never leaves a half-written checkpoint under the real name.
 *
 * A trainer on a CUDA device saves and restores through host copies (its device tensors and
 * buffers are copied out, serialised, and copied back), so the file is the same as a host
 * trainer's: a checkpoint written on the host resumes on a device and vice versa. The
 * configuration's device field is recorded but not compared. */
#define _POSIX_C_SOURCE 200809L
#include "trainer.h"
#include "../core/tensor_io.h"
#include "placement.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FX_CKPT_MAGIC "FLEXCKPT"
#define FX_CKPT_VERSION 1u

typedef struct fx_ckpt_pos {
    int32_t epoch, scaling, epoch_reported, reserved;
    int64_t step_in_epoch, global_step, steps_per_epoch;
    int64_t correct, seen, skipped, nonfinite;
    double loss_sum, seconds;
} fx_ckpt_pos;

static void fx_put_floats(fx_buf *b, const float *p, int64_t n)
{
    uint8_t have = p != NULL;
    fx_buf_put(b, &have, 1);
    if (p) fx_buf_put(b, p, (size_t)n * sizeof(float));
}

static int fx_get_floats(fx_reader *r, float *p, int64_t n, const char *what)
{
    uint8_t have = 0;
    fx_reader_get(r, &have, 1);
    if (r->failed || have != (p != NULL))
        return FX_FAIL(FX_ECORRUPT, "%s: master/optimiser buffer presence differs", what);
    if (p) fx_reader_get(r, p, (size_t)n * sizeof(float));
    return r->failed ? FX_FAIL(FX_ECORRUPT, "%s: truncated", what) : FX_OK;
}

/* Visit every tensor of the training state in a fixed order. */
typedef int (*fx_tensor_visit)(void *ctx, tensor_t *t, const char *what);

static int fx_visit_tensors(fx_trainer *t, fx_tensor_visit fn, void *ctx)
{
    int rc = FX_OK;
    for (int i = 0; i < t->nreg && !rc; i++) rc = fn(ctx, t->reg[i].t, t->reg[i].name);
    return rc;
}

/* A host copy of a device tensor, for (de)serialising through it. */
static tensor_t *fx_host_copy(const tensor_t *x)
{
    tensor_t *h = tensor_to_host(x);
    if (!h && !flexpoint_last_status()) FX_FAIL(FX_EDEVICE, "cannot copy a tensor to the host");
    return h;
}

static int fx_put_tensor(void *ctx, tensor_t *x, const char *what)
{
    (void)what;
    if (tensor_device(x) < 0) return fx_tensor_state_put(ctx, x);
    tensor_t *h = fx_host_copy(x);
    if (!h) return flexpoint_last_status();
    int rc = fx_tensor_state_put(ctx, h);
    tensor_free(h);
    return rc;
}

static int fx_get_tensor(void *ctx, tensor_t *x, const char *what)
{
    if (tensor_device(x) < 0) return fx_tensor_state_get(ctx, x, what);
    /* restored into a host copy (same format and shape), then copied back with its state */
    tensor_t *h = fx_host_copy(x);
    if (!h) return flexpoint_last_status();
    int rc = fx_tensor_state_get(ctx, h, what);
    if (!rc) rc = tensor_copy_to_device(x, h);
    tensor_free(h);
    return rc;
}

/* Master / momentum buffers live where the model does; `tmp` is a host array of at least n
 * floats (unused on the host). */
static int fx_put_placed(fx_buf *b, const fx_model *m, const float *p, int64_t n, float *tmp)
{
    if (!p || m->device < 0) {
        fx_put_floats(b, p, n);
        return FX_OK;
    }
    int rc = fx_place_download(m, tmp, p, n);
    if (!rc) fx_put_floats(b, tmp, n);
    return rc;
}

static int fx_get_placed(fx_reader *r, const fx_model *m, float *p, int64_t n, float *tmp,
                         const char *what)
{
    if (!p || m->device < 0) return fx_get_floats(r, p, n, what);
    int rc = fx_get_floats(r, tmp, n, what);
    return rc ? rc : fx_place_upload(m, p, tmp, n);
}

/* A host array for the largest parameter buffer when the model is on a device (else NULL). */
static int fx_param_scratch(const fx_model *m, float **tmp)
{
    *tmp = NULL;
    if (m->device < 0) return FX_OK;
    int64_t n = 1;
    for (int i = 0; i < m->nparams; i++) n = m->params[i].n > n ? m->params[i].n : n;
    *tmp = malloc((size_t)n * sizeof(float));
    return *tmp ? FX_OK : FX_FAIL(FX_ENOMEM, "out of memory (%lld floats)", (long long)n);
}

static int fx_serialize(fx_trainer *t, fx_buf *b)
{
    fx_buf_put(b, &t->cfg, sizeof t->cfg);
    fx_ckpt_pos pos = {t->epoch, t->scaling, t->epoch_reported, 0, t->step_in_epoch, t->global_step,
                       t->steps_per_epoch, t->correct, t->seen, t->skipped, t->nonfinite,
                       t->loss_sum, t->seconds};
    fx_buf_put(b, &pos, sizeof pos);
    fx_buf_put(b, &t->scaler, sizeof t->scaler);
    float *tmp;
    int rc = fx_param_scratch(&t->m, &tmp);
    for (int i = 0; i < t->m.nparams && !rc; i++) {
        fx_param *p = &t->m.params[i];
        rc = fx_put_placed(b, &t->m, p->master, p->n, tmp);
        if (!rc) rc = fx_put_placed(b, &t->m, p->mom, p->n, tmp);
    }
    free(tmp);
    if (rc) return rc;
    for (int i = 0; i < t->m.nlayers; i++) {
        fx_layer *l = &t->m.layers[i];
        if (l->kind != FX_L_BN) continue;
        fx_put_floats(b, l->run_mean, l->channels);
        fx_put_floats(b, l->run_var, l->channels);
        fx_put_floats(b, l->save_mean, l->channels);
        fx_put_floats(b, l->save_invstd, l->channels);
    }
    rc = fx_visit_tensors(t, fx_put_tensor, b);
    if (!rc && b->failed) rc = FX_FAIL(FX_ENOMEM, "out of memory while serialising");
    return rc;
}

static int fx_deserialize(fx_trainer *t, fx_reader *r, const char *path)
{
    fx_train_config cfg;
    fx_reader_get(r, &cfg, sizeof cfg);
    if (r->failed) return FX_FAIL(FX_ECORRUPT, "%s: truncated configuration", path);
    if (strncmp(cfg.model, t->cfg.model, sizeof cfg.model) != 0 || cfg.fmt != t->cfg.fmt ||
        cfg.batch_size != t->cfg.batch_size || cfg.master_weights != t->cfg.master_weights ||
        cfg.seed != t->cfg.seed)
        return FX_FAIL(FX_ECORRUPT, "%s: written for model %.16s, format %s, batch %d, seed %llu, "
                       "master %d; this trainer is %.16s, %s, %d, %llu, %d", path, cfg.model,
                       fmt_name((fmt_t)cfg.fmt) ? fmt_name((fmt_t)cfg.fmt) : "?", cfg.batch_size,
                       (unsigned long long)cfg.seed, cfg.master_weights, t->cfg.model,
                       fmt_name((fmt_t)t->cfg.fmt), t->cfg.batch_size,
                       (unsigned long long)t->cfg.seed, t->cfg.master_weights);
    fx_ckpt_pos pos;
    fx_reader_get(r, &pos, sizeof pos);
    fx_loss_scaler sc;
    fx_reader_get(r, &sc, sizeof sc);
    if (r->failed) return FX_FAIL(FX_ECORRUPT, "%s: truncated header", path);
    if (pos.steps_per_epoch != t->steps_per_epoch || pos.step_in_epoch < 0 ||
        pos.step_in_epoch > pos.steps_per_epoch || pos.epoch < 0)
        return FX_FAIL(FX_ECORRUPT, "%s: position (epoch %d, step %lld of %lld) does not fit "
                       "this data (%lld steps per epoch)", path, pos.epoch,
                       (long long)pos.step_in_epoch, (long long)pos.steps_per_epoch,
                       (long long)t->steps_per_epoch);
    float *tmp;
    int rc = fx_param_scratch(&t->m, &tmp);
    for (int i = 0; i < t->m.nparams && !rc; i++) {
        fx_param *p = &t->m.params[i];
        rc = fx_get_placed(r, &t->m, p->master, p->n, tmp, p->name);
        if (!rc) rc = fx_get_placed(r, &t->m, p->mom, p->n, tmp, p->name);
    }
    free(tmp);
    for (int i = 0; i < t->m.nlayers && !rc; i++) {
        fx_layer *l = &t->m.layers[i];
        if (l->kind != FX_L_BN) continue;
        rc = fx_get_floats(r, l->run_mean, l->channels, l->name);
        if (!rc) rc = fx_get_floats(r, l->run_var, l->channels, l->name);
        if (!rc) rc = fx_get_floats(r, l->save_mean, l->channels, l->name);
        if (!rc) rc = fx_get_floats(r, l->save_invstd, l->channels, l->name);
    }
    if (!rc) rc = fx_visit_tensors(t, fx_get_tensor, r);
    if (!rc && r->left != 0)
        rc = FX_FAIL(FX_ECORRUPT, "%s: %zu unexpected bytes after the state", path, r->left);
    if (rc) return rc;
    t->epoch = pos.epoch;
    t->scaling = pos.scaling;
    t->epoch_reported = pos.epoch_reported != 0;
    t->step_in_epoch = pos.step_in_epoch;
    t->global_step = pos.global_step;
    t->correct = pos.correct;
    t->seen = pos.seen;
    t->skipped = pos.skipped;
    t->nonfinite = pos.nonfinite;
    t->loss_sum = pos.loss_sum;
    t->seconds = pos.seconds;
    t->scaler = sc;
    fx_trainer_make_perm(t, t->epoch);
    return FX_OK;
}

int fx_trainer_save(const fx_trainer *tc, const char *path)
{
    if (!tc || !path) return FX_FAIL(FX_EINVAL, "%s is NULL", !tc ? "trainer" : "path");
    fx_trainer *t = (fx_trainer *)tc; /* serialising only reads */
    int rc = fx_trainer_use_device(t);
    if (rc) return rc;
    fx_buf b = {0};
    rc = fx_serialize(t, &b);
    if (rc) {
        fx_buf_free(&b);
        return rc;
    }
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp) {
        fx_buf_free(&b);
        return FX_FAIL(FX_EINVAL, "path is too long");
    }
    uint32_t version = FX_CKPT_VERSION, reserved = 0, crc = fx_crc32(b.data, b.len);
    uint64_t len = b.len;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fx_buf_free(&b);
        return FX_FAIL(FX_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    int ok = fwrite(FX_CKPT_MAGIC, 1, 8, f) == 8 && fwrite(&version, 4, 1, f) == 1 &&
             fwrite(&reserved, 4, 1, f) == 1 && fwrite(&len, 8, 1, f) == 1 &&
             fwrite(&crc, 4, 1, f) == 1 && fwrite(b.data, 1, b.len, f) == b.len;
    ok = (fflush(f) == 0) && ok;
    ok = (fclose(f) == 0) && ok;
    fx_buf_free(&b);
    if (!ok) {
        int e = errno;
        remove(tmp);
        return FX_FAIL(FX_EIO, "%s: write failed: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return FX_FAIL(FX_EIO, "%s: cannot rename to %s: %s", tmp, path, strerror(e));
    }
    return FX_OK;
}

int fx_trainer_load(fx_trainer *t, const char *path)
{
    if (!t || !path) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "path");
    int use = fx_trainer_use_device(t);
    if (use) return use;
    FILE *f = fopen(path, "rb");
    if (!f) return FX_FAIL(FX_EIO, "%s: cannot open: %s", path, strerror(errno));
    char magic[8];
    uint32_t version = 0, reserved = 0, crc = 0;
    uint64_t len = 0;
    int ok = fread(magic, 1, 8, f) == 8 && fread(&version, 4, 1, f) == 1 &&
             fread(&reserved, 4, 1, f) == 1 && fread(&len, 8, 1, f) == 1 &&
             fread(&crc, 4, 1, f) == 1;
    if (!ok) {
        fclose(f);
        return FX_FAIL(FX_ECORRUPT, "%s: truncated header (not a flexpoint checkpoint?)", path);
    }
    if (memcmp(magic, FX_CKPT_MAGIC, 8) != 0) {
        fclose(f);
        return FX_FAIL(FX_ECORRUPT, "%s: bad magic (not a flexpoint checkpoint)", path);
    }
    if (version != FX_CKPT_VERSION) {
        fclose(f);
        return FX_FAIL(FX_ECORRUPT, "%s: version %u, this library reads version %u", path,
                       version, FX_CKPT_VERSION);
    }
    if (len > ((uint64_t)1 << 40)) {
        fclose(f);
        return FX_FAIL(FX_ECORRUPT, "%s: implausible payload length %llu", path,
                       (unsigned long long)len);
    }
    uint8_t *data = malloc(len ? (size_t)len : 1);
    if (!data) {
        fclose(f);
        return FX_FAIL(FX_ENOMEM, "%s: cannot allocate %llu bytes", path, (unsigned long long)len);
    }
    size_t got = fread(data, 1, (size_t)len, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != len || extra) {
        free(data);
        return FX_FAIL(FX_ECORRUPT, "%s: payload is %s than its header says (%llu bytes)", path,
                       got != len ? "shorter" : "longer", (unsigned long long)len);
    }
    if (fx_crc32(data, (size_t)len) != crc) {
        free(data);
        return FX_FAIL(FX_ECORRUPT, "%s: checksum mismatch (file corrupted)", path);
    }
    /* Keep a snapshot so that a failure half way leaves the trainer unchanged. */
    fx_buf snap = {0};
    int rc = fx_serialize(t, &snap);
    if (!rc) {
        fx_reader r = {data, (size_t)len, 0};
        rc = fx_deserialize(t, &r, path);
        if (rc) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", flexpoint_last_error());
            fx_reader back = {snap.data, snap.len, 0};
            fx_deserialize(t, &back, "snapshot");
            fx_error(rc, "fx_trainer_load", "%s", msg);
        }
    }
    fx_buf_free(&snap);
    free(data);
    return rc;
}
