/* Checkpoints: everything a resumed run needs to continue bit for bit. The format is in
 * checkpoint.h.
 *
 * Loading trusts nothing in the file: the header is checked against the file's real size
 * before anything is allocated, and every field of the payload is parsed and range-checked
 * (into temporaries, tensors into scratch tensors) before the trainer changes; only a file
 * that passes all of it is applied. A checksum only shows that the bytes are the ones
 * written, not that they mean something a trainer can be in, hence the field checks.
 *
 * Saving writes the file under a temporary name in the target's folder, syncs it, renames it
 * over the target and syncs the folder, so that after a crash or power loss the target holds
 * the old checkpoint or the new one, complete. A process killed while saving leaves its
 * temporary behind; later saves into the folder remove those whose process is gone.
 *
 * A trainer on a CUDA device saves and restores through host copies (its device tensors and
 * buffers are copied out, serialised, and copied back), so the file is the same as a host
 * trainer's: a checkpoint written on the host resumes on a device and vice versa. The
 * configuration's device field is recorded but not compared. */
#define _POSIX_C_SOURCE 200809L
#include "checkpoint.h"
#include "../core/file_atomic.h"
#include "../dist/distributed.h"
#include "placement.h"
#include "../data/data_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define LOAD_FUNC "fx_trainer_load"
#define SAVE_FUNC "fx_trainer_save"
#define LOAD_FAIL(code, ...) fx_error((code), LOAD_FUNC, __VA_ARGS__)
#define SAVE_FAIL(code, ...) fx_error((code), SAVE_FUNC, __VA_ARGS__)

/* ---- Encoding ---------------------------------------------------------------------------- */

static void fx_map_mark(fx_ckpt_map *map, size_t off)
{
    if (!map) return;
    if (map->n == map->cap) {
        int cap = map->cap ? 2 * map->cap : 64;
        size_t *m = realloc(map->marks, (size_t)cap * sizeof *m);
        if (!m) return; /* the map is a fuzzing aid: a missing mark only narrows it */
        map->marks = m;
        map->cap = cap;
    }
    map->marks[map->n++] = off;
}

static void fx_put_floats(fx_buf *b, const float *p, int64_t n)
{
    uint8_t have = p != NULL;
    fx_buf_put(b, &have, 1);
    if (p) fx_buf_put(b, p, (size_t)n * sizeof(float));
}

static int64_t fx_first_nonfinite(const float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(p[i])) return i;
    return -1;
}

/* What a save refuses: a value the loader would refuse (fx_check_floats' FINITE rule). */
static int fx_refuse_nonfinite(const float *p, int64_t n, const char *name, const char *owner,
                               const char *what)
{
    int64_t bad = fx_first_nonfinite(p, n);
    if (bad < 0) return FX_OK;
    return SAVE_FAIL(FX_ERANGE, "%s: %s: %s %lld is %g; a checkpoint of non-finite values "
                     "would not load, so nothing was written", name, owner, what,
                     (long long)bad, (double)p[bad]);
}

/* Master / momentum buffers live where the model does; `tmp` is a host array of at least n
 * floats (unused on the host). `check`: refuse non-finite values. */
static int fx_put_placed(fx_buf *b, const fx_model *m, const float *p, int64_t n, float *tmp,
                         int check, const char *name, const char *owner, const char *what)
{
    const float *host = p;
    if (p && m->device >= 0) {
        int rc = fx_place_download(m, tmp, p, n);
        if (rc) return rc;
        host = tmp;
    }
    if (host && check) {
        int rc = fx_refuse_nonfinite(host, n, name, owner, what);
        if (rc) return rc;
    }
    fx_put_floats(b, host, n);
    return FX_OK;
}

/* A host array for the largest parameter buffer, when one is needed (else NULL). */
static int fx_param_scratch(const fx_model *m, int need, float **tmp)
{
    *tmp = NULL;
    if (!need) return FX_OK;
    int64_t n = 1;
    for (int i = 0; i < m->nparams; i++) n = m->params[i].n > n ? m->params[i].n : n;
    *tmp = malloc((size_t)n * sizeof(float));
    return *tmp ? FX_OK : FX_FAIL(FX_ENOMEM, "out of memory (%lld floats)", (long long)n);
}

/* A host copy of a device tensor, for (de)serialising through it. */
static tensor_t *fx_host_copy(const tensor_t *x)
{
    tensor_t *h = tensor_to_host(x);
    if (!h && !flexpoint_last_status()) FX_FAIL(FX_EDEVICE, "cannot copy a tensor to the host");
    return h;
}

static int fx_put_tensor(fx_buf *b, tensor_t *x)
{
    if (tensor_device(x) < 0) return fx_tensor_state_put(b, x);
    tensor_t *h = fx_host_copy(x);
    if (!h) return flexpoint_last_status();
    int rc = fx_tensor_state_put(b, h);
    tensor_free(h);
    return rc;
}

/* The tensors a checkpoint holds: the trainer's named tensors in the registry's order, then
 * per layer the shared-exponent tensors of fx_model_state_tensors (a sequence model's
 * attention intermediates and embedding rows, whose Autoflex state a resumed run needs; a
 * float tensor keeps none, and an image model has no such tensor, so its checkpoints are
 * unchanged). fx_state_count gives how many come after the registry; fx_state_tensor(t, i)
 * the i-th of all, and its name in label when label is not NULL. */
static int fx_state_count(const fx_trainer *t)
{
    tensor_t *x[FX_LAYER_MAX_STATE];
    int n = 0;
    for (int i = 0; i < t->m.nlayers; i++) {
        const int k = fx_model_state_tensors(&t->m, i, x);
        for (int j = 0; j < k; j++) n += fmt_is_shared_exponent(x[j]->fmt);
    }
    return n;
}

static tensor_t *fx_state_tensor(const fx_trainer *t, int i, char *label, size_t cap)
{
    if (i < t->nreg) {
        if (label) snprintf(label, cap, "%s", t->reg[i].name);
        return t->reg[i].t;
    }
    i -= t->nreg;
    tensor_t *x[FX_LAYER_MAX_STATE];
    for (int l = 0; l < t->m.nlayers; l++) {
        const int k = fx_model_state_tensors(&t->m, l, x);
        for (int j = 0, s = 0; j < k; j++) {
            if (!fmt_is_shared_exponent(x[j]->fmt)) continue;
            if (i-- == 0) {
                if (label) snprintf(label, cap, "%s (intermediate %d)", t->m.layers[l].name, s);
                return x[j];
            }
            s++;
        }
    }
    return NULL;
}

/* Append the payload of t's state. `check` (a save) refuses non-finite master weights and
 * momentum, and non-finite working weights where there are no master weights; a snapshot
 * taken for rolling back a load does not check. */
static int fx_serialize(fx_trainer *t, fx_buf *b, fx_ckpt_map *map, int check, const char *name)
{
    fx_map_mark(map, b->len);
    fx_buf_put(b, &t->cfg, sizeof t->cfg);
    fx_ckpt_pos pos = {t->epoch, t->scaling, t->epoch_reported, 0, t->step_in_epoch, t->global_step,
                       t->steps_per_epoch, t->correct, t->seen, t->skipped, t->nonfinite,
                       t->loss_sum, t->seconds};
    fx_map_mark(map, b->len);
    fx_buf_put(b, &pos, sizeof pos);
    fx_map_mark(map, b->len);
    fx_buf_put(b, &t->scaler, sizeof t->scaler);
    fx_model *m = &t->m;
    int need = m->device >= 0;
    for (int i = 0; i < m->nparams; i++) need |= check && !m->params[i].master;
    float *tmp;
    int rc = fx_param_scratch(m, need, &tmp);
    for (int i = 0; i < m->nparams && !rc; i++) {
        fx_param *p = &m->params[i];
        fx_map_mark(map, b->len);
        rc = fx_put_placed(b, m, p->master, p->n, tmp, check, name, p->name, "master weight");
        fx_map_mark(map, b->len);
        if (!rc) rc = fx_put_placed(b, m, p->mom, p->n, tmp, check, name, p->name, "momentum");
        fx_map_mark(map, b->len);
        if (!rc)
            rc = fx_put_placed(b, m, p->var, p->n, tmp, check, name, p->name, "second moment");
        if (!rc && check && !p->master) {
            rc = fx_place_read_f32(m, p->w, NULL, tmp);
            if (!rc) rc = fx_refuse_nonfinite(tmp, p->n, name, p->name, "weight");
        }
    }
    free(tmp);
    if (rc) return rc;
    for (int i = 0; i < m->nlayers; i++) {
        fx_layer *l = &m->layers[i];
        if (l->kind != FX_L_BN) continue;
        fx_map_mark(map, b->len);
        fx_put_floats(b, l->run_mean, l->channels);
        fx_map_mark(map, b->len);
        fx_put_floats(b, l->run_var, l->channels);
        fx_put_floats(b, l->save_mean, l->channels);
        fx_put_floats(b, l->save_invstd, l->channels);
    }
    const int nstate = fx_state_count(t);
    for (int i = 0; i < t->nreg + nstate && !rc; i++) {
        tensor_t *x = fx_state_tensor(t, i, NULL, 0);
        fx_map_mark(map, b->len);
        rc = fx_put_tensor(b, x);
        if (!rc && map && fmt_is_shared_exponent(x->fmt)) {
            /* the exponent state ends a shared-exponent tensor's record (tensor_io.c) */
            const size_t tail = 4 * sizeof(int32_t) + 2 * sizeof(uint64_t) + sizeof(fx_af_state) +
                                sizeof(fx_write_info) + 4 * sizeof(int64_t);
            for (size_t k = 0; k < tail && tail <= b->len; k += 128)
                fx_map_mark(map, b->len - tail + k);
        }
    }
    if (!rc && b->failed) rc = FX_FAIL(FX_ENOMEM, "out of memory while serialising");
    return rc;
}

int fx_ckpt_encode(fx_trainer *t, fx_buf *out, fx_ckpt_map *map, const char *name)
{
    if (!t || !out) return SAVE_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "output");
    if (!name) name = "checkpoint";
    uint8_t header[FX_CKPT_HEADER_BYTES] = {0};
    fx_buf_put(out, header, sizeof header);
    for (int off = 0; off < FX_CKPT_HEADER_BYTES; off += 4) fx_map_mark(map, (size_t)off);
    int rc = fx_serialize(t, out, map, 1, name);
    if (rc) return rc;
    if (out->failed) return SAVE_FAIL(FX_ENOMEM, "out of memory while serialising");
    uint32_t version = FX_CKPT_VERSION, reserved = 0;
    uint64_t len = out->len - FX_CKPT_HEADER_BYTES;
    uint32_t crc = fx_crc32(out->data + FX_CKPT_HEADER_BYTES, (size_t)len);
    memcpy(out->data, FX_CKPT_MAGIC, 8);
    memcpy(out->data + FX_CKPT_OFF_VERSION, &version, 4);
    memcpy(out->data + FX_CKPT_OFF_RESERVED, &reserved, 4);
    memcpy(out->data + FX_CKPT_OFF_LENGTH, &len, 8);
    memcpy(out->data + FX_CKPT_OFF_CRC, &crc, 4);
    return FX_OK;
}

/* ---- Validation -------------------------------------------------------------------------- */

/* Magic, version, reserved field and length of a file of file_len bytes whose first
 * min(file_len, FX_CKPT_HEADER_BYTES) bytes are in hdr; the version into *version_out where
 * not NULL. The length field is compared with the file's real size, never used to size
 * anything. */
static int fx_check_header(const uint8_t *hdr, uint64_t file_len, const char *name,
                           const char *func, uint32_t *version_out)
{
    if (file_len < FX_CKPT_HEADER_BYTES)
        return fx_error(FX_ECORRUPT, func, "%s: truncated header: %llu bytes (not a flexpoint "
                         "checkpoint?)", name, (unsigned long long)file_len);
    if (memcmp(hdr, FX_CKPT_MAGIC, 8) != 0)
        return fx_error(FX_ECORRUPT, func, "%s: bad magic (not a flexpoint checkpoint)", name);
    uint32_t version, reserved;
    uint64_t len;
    memcpy(&version, hdr + FX_CKPT_OFF_VERSION, 4);
    memcpy(&reserved, hdr + FX_CKPT_OFF_RESERVED, 4);
    memcpy(&len, hdr + FX_CKPT_OFF_LENGTH, 8);
    if (version < FX_CKPT_VERSION_NO_ATTN || version > FX_CKPT_VERSION)
        return fx_error(FX_ECORRUPT, func, "%s: version %u, this library reads version %u (and "
                         "%u to %u for a model without attention layers)", name, version,
                         FX_CKPT_VERSION, FX_CKPT_VERSION_NO_ATTN, FX_CKPT_VERSION - 1);
    if (reserved != 0)
        return fx_error(FX_ECORRUPT, func, "%s: reserved header field is %u, must be 0", name,
                         reserved);
    uint64_t have = file_len - FX_CKPT_HEADER_BYTES;
    if (len != have)
        return fx_error(FX_ECORRUPT, func, "%s: payload is %s than its header says (header: %llu "
                         "bytes, file: %llu bytes after the header)", name,
                         have < len ? "shorter" : "longer", (unsigned long long)len,
                         (unsigned long long)have);
    if (version_out) *version_out = version;
    return FX_OK;
}

/* The position, the accumulators and the loss scaler: every field in the range the training
 * loop keeps it in (trainer.c): global_step = epoch * steps_per_epoch + step_in_epoch,
 * seen = step_in_epoch * batch, the counters within the steps taken, a scaler that
 * fx_loss_scaler_update accepts and that is on exactly when loss scaling is. */
static int fx_check_position(const fx_trainer *t, const fx_ckpt_pos *p, const fx_loss_scaler *s,
                             const char *name)
{
    const int64_t spe = t->steps_per_epoch, batch = t->cfg.batch_size;
    if (p->reserved != 0)
        return LOAD_FAIL(FX_ECORRUPT, "%s: reserved position field is %d, must be 0", name,
                         p->reserved);
    if (p->steps_per_epoch != spe)
        return LOAD_FAIL(FX_ECORRUPT, "%s: written for %lld steps per epoch; this data has %lld",
                         name, (long long)p->steps_per_epoch, (long long)spe);
    if (p->epoch < 0 || p->epoch == INT32_MAX)
        return LOAD_FAIL(FX_ECORRUPT, "%s: epoch %d is outside [0, %d)", name, p->epoch,
                         INT32_MAX);
    if (p->step_in_epoch < 0 || p->step_in_epoch > spe)
        return LOAD_FAIL(FX_ECORRUPT, "%s: step_in_epoch %lld is outside [0, %lld]", name,
                         (long long)p->step_in_epoch, (long long)spe);
    /* epoch < 2^31 and spe <= images <= 2^62 / batch... bound the product before forming it */
    if ((int64_t)p->epoch > (INT64_MAX - p->step_in_epoch) / spe ||
        p->global_step != (int64_t)p->epoch * spe + p->step_in_epoch)
        return LOAD_FAIL(FX_ECORRUPT, "%s: global_step %lld does not match epoch %d, step %lld "
                         "of %lld", name, (long long)p->global_step, p->epoch,
                         (long long)p->step_in_epoch, (long long)spe);
    if (p->epoch_reported != 0 && p->epoch_reported != 1)
        return LOAD_FAIL(FX_ECORRUPT, "%s: epoch_reported %d is not 0 or 1", name,
                         p->epoch_reported);
    if (p->epoch_reported && p->step_in_epoch != spe)
        return LOAD_FAIL(FX_ECORRUPT, "%s: epoch_reported 1 at step %lld of %lld", name,
                         (long long)p->step_in_epoch, (long long)spe);
    if (p->scaling != 0 && p->scaling != 1)
        return LOAD_FAIL(FX_ECORRUPT, "%s: loss scaling mode %d is unknown (0 off, 1 on)", name,
                         p->scaling);
    if (p->seen != p->step_in_epoch * batch)
        return LOAD_FAIL(FX_ECORRUPT, "%s: seen %lld is not step_in_epoch %lld x batch %lld",
                         name, (long long)p->seen, (long long)p->step_in_epoch, (long long)batch);
    /* correct counts predictions: t->rows per sample (the positions of a sequence model) */
    if (p->correct < 0 || p->correct > p->seen * t->rows)
        return LOAD_FAIL(FX_ECORRUPT, "%s: correct %lld is outside [0, seen x rows = %lld]",
                         name, (long long)p->correct, (long long)(p->seen * t->rows));
    if (p->skipped < 0 || p->skipped > p->step_in_epoch)
        return LOAD_FAIL(FX_ECORRUPT, "%s: skipped %lld is outside [0, step_in_epoch = %lld]",
                         name, (long long)p->skipped, (long long)p->step_in_epoch);
    if (p->nonfinite < 0 || p->nonfinite > p->step_in_epoch)
        return LOAD_FAIL(FX_ECORRUPT, "%s: nonfinite %lld is outside [0, step_in_epoch = %lld]",
                         name, (long long)p->nonfinite, (long long)p->step_in_epoch);
    if (!isfinite(p->loss_sum))
        return LOAD_FAIL(FX_ECORRUPT, "%s: loss_sum %g is not finite", name, p->loss_sum);
    if (!(p->seconds >= 0) || !isfinite(p->seconds))
        return LOAD_FAIL(FX_ECORRUPT, "%s: seconds %g is not a finite time >= 0", name,
                         p->seconds);

    if (s->enabled != p->scaling)
        return LOAD_FAIL(FX_ECORRUPT, "%s: loss scaler enabled %d but loss scaling mode %d",
                         name, s->enabled, p->scaling);
    if (!(s->scale > 0) || !(s->scale <= FLT_MAX))
        return LOAD_FAIL(FX_ECORRUPT, "%s: loss scale %g is not a positive finite fp32 value",
                         name, s->scale);
    if (!(s->growth_factor > 1) || !isfinite(s->growth_factor))
        return LOAD_FAIL(FX_ECORRUPT, "%s: loss scaler growth_factor %g is not finite and > 1",
                         name, s->growth_factor);
    if (!(s->backoff_factor > 0 && s->backoff_factor < 1))
        return LOAD_FAIL(FX_ECORRUPT, "%s: loss scaler backoff_factor %g is outside (0, 1)",
                         name, s->backoff_factor);
    if (s->growth_interval < 1)
        return LOAD_FAIL(FX_ECORRUPT, "%s: loss scaler growth_interval %lld is not >= 1", name,
                         (long long)s->growth_interval);
    if (s->good_steps < 0 || s->good_steps >= s->growth_interval)
        return LOAD_FAIL(FX_ECORRUPT, "%s: loss scaler good_steps %lld is outside [0, "
                         "growth_interval = %lld)", name, (long long)s->good_steps,
                         (long long)s->growth_interval);
    if (s->skipped_steps < 0 || s->skipped_steps > p->global_step)
        return LOAD_FAIL(FX_ECORRUPT, "%s: loss scaler skipped_steps %lld is outside [0, "
                         "global_step = %lld]", name, (long long)s->skipped_steps,
                         (long long)p->global_step);
    return FX_OK;
}

enum { FX_ANY, FX_FINITE, FX_NONNEG, FX_FINITE_NONNEG };

/* A float buffer: its presence byte (0 or 1, and as the trainer has the buffer), then n
 * floats obeying `rule` (FX_NONNEG: no negative value; NaN is allowed, as a forward pass that
 * overflowed leaves it in batch-norm statistics). Only advances r. */
static int fx_check_floats(fx_reader *r, int present, int64_t n, int rule, const char *name,
                           const char *owner, const char *what)
{
    uint8_t have = 0;
    fx_reader_get(r, &have, 1);
    if (r->failed) return LOAD_FAIL(FX_ECORRUPT, "%s: %s %s: truncated", name, owner, what);
    if (have > 1)
        return LOAD_FAIL(FX_ECORRUPT, "%s: %s %s: presence byte %u is not 0 or 1", name, owner,
                         what, have);
    if (have != present)
        return LOAD_FAIL(FX_ECORRUPT, "%s: %s %s: master/optimiser buffer presence differs "
                         "(file %u, trainer %d)", name, owner, what, have, present);
    if (!present) return FX_OK;
    if ((uint64_t)n > r->left / sizeof(float))
        return LOAD_FAIL(FX_ECORRUPT, "%s: %s %s: truncated", name, owner, what);
    for (int64_t i = 0; i < n && rule != FX_ANY; i++) {
        float v;
        memcpy(&v, r->p + (size_t)i * sizeof v, sizeof v);
        int bad = rule == FX_FINITE ? !isfinite(v)
                  : rule == FX_NONNEG ? v < 0
                                      : !isfinite(v) || v < 0;
        if (bad)
            return LOAD_FAIL(FX_ECORRUPT, "%s: %s %s %lld is %g (must be %s)", name, owner, what,
                             (long long)i, (double)v,
                             rule == FX_FINITE   ? "finite"
                             : rule == FX_NONNEG ? ">= 0"
                                                 : "finite and >= 0");
    }
    r->p += (size_t)n * sizeof(float);
    r->left -= (size_t)n * sizeof(float);
    return FX_OK;
}

/* The parts of a restored shared-exponent state that fx_tensor_state_get leaves unchecked:
 * counters, the last write's statistics and the Autoflex history the next exponent is
 * predicted from (what history_push can store: a maximum in [0, DBL_MAX]). */
static int fx_check_exponent_state(const tensor_t *s, const char *what)
{
    const fx_storage *st = s->st;
    const int64_t counts[] = {st->writes, st->overflows, st->clamped_total, st->nonfinite_total,
                              st->last.saturated, st->last.nonfinite, st->last.underflow};
    static const char *const count_names[] = {"writes", "overflows", "clamped_total",
                                              "nonfinite_total", "last saturated",
                                              "last nonfinite", "last underflow"};
    for (int i = 0; i < (int)(sizeof counts / sizeof *counts); i++)
        if (counts[i] < 0)
            return LOAD_FAIL(FX_ECORRUPT, "%s: %s %lld is negative", what, count_names[i],
                             (long long)counts[i]);
    if (st->last.clamped != 0 && st->last.clamped != 1)
        return LOAD_FAIL(FX_ECORRUPT, "%s: last clamped %d is not 0 or 1", what, st->last.clamped);
    if (!(st->last.true_max >= 0 && st->last.true_max <= DBL_MAX) ||
        !(st->last.stored_max >= 0 && st->last.stored_max <= DBL_MAX))
        return LOAD_FAIL(FX_ECORRUPT, "%s: last maxima %g, %g are not finite and >= 0", what,
                         st->last.true_max, st->last.stored_max);
    if (s->fmt != FMT_FLEX16_5) return FX_OK;
    for (int i = 0; i < st->af.hist_n; i++)
        if (!(st->af.hist[i] >= 0 && st->af.hist[i] <= DBL_MAX))
            return LOAD_FAIL(FX_ECORRUPT, "%s: Autoflex history entry %d is %g (must be finite "
                             "and >= 0)", what, i, st->af.hist[i]);
    return FX_OK;
}

/* Registered tensor i: its state restored into a scratch host tensor of the same format and
 * shape (fx_tensor_state_get validates the header and exponent window), then the rest of its
 * state, and finite values when it is a weight without master weights. Only advances r. */
static int fx_check_tensor(fx_trainer *t, fx_reader *r, int i, const char *name)
{
    char label[96], what[640];
    const tensor_t *x = fx_state_tensor(t, i, label, sizeof label);
    snprintf(what, sizeof what, "%s: %s", name, label);
    tensor_t *s = tensor_new(x->fmt, x->ndim, x->shape);
    if (!s) return flexpoint_last_status() ? flexpoint_last_status() : FX_ENOMEM;
    int rc = fx_tensor_state_get(r, s, what);
    if (!rc && fmt_is_shared_exponent(s->fmt)) rc = fx_check_exponent_state(s, what);
    for (int k = 0; k < t->m.nparams && !rc; k++) {
        const fx_param *p = &t->m.params[k];
        if (p->w != x || p->master) continue;
        float *v = malloc((size_t)tensor_numel(s) * sizeof(float));
        rc = v ? tensor_to_f32(s, v) : LOAD_FAIL(FX_ENOMEM, "out of memory");
        int64_t bad = rc ? -1 : fx_first_nonfinite(v, tensor_numel(s));
        if (bad >= 0)
            rc = LOAD_FAIL(FX_ECORRUPT, "%s: weight %lld is %g (must be finite)", what,
                           (long long)bad, (double)v[bad]);
        free(v);
    }
    tensor_free(s);
    /* tensor_state_get reports a mismatch as coming from itself: say it is a load */
    if (rc && rc != FX_ENOMEM && strncmp(flexpoint_last_error(), LOAD_FUNC, 15) != 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", flexpoint_last_error());
        const char *colon = strstr(msg, ": ");
        LOAD_FAIL(rc, "%s", colon ? colon + 2 : msg);
    }
    return rc;
}

/* Everything in the payload, without changing t. */
static int fx_validate(fx_trainer *t, const uint8_t *payload, size_t len, const char *name)
{
    fx_reader r = {payload, len, 0};
    fx_train_config cfg;
    fx_reader_get(&r, &cfg, sizeof cfg);
    if (r.failed) return LOAD_FAIL(FX_ECORRUPT, "%s: truncated configuration", name);
    if (strncmp(cfg.model, t->cfg.model, sizeof cfg.model) != 0 || cfg.fmt != t->cfg.fmt ||
        cfg.batch_size != t->cfg.batch_size || cfg.master_weights != t->cfg.master_weights ||
        cfg.seed != t->cfg.seed || cfg.optimizer != t->cfg.optimizer ||
        strncmp(cfg.policy, t->cfg.policy, sizeof cfg.policy) != 0)
        return LOAD_FAIL(FX_ECORRUPT, "%s: written for model %.16s, format %s, batch %d, seed "
                         "%llu, master %d, optimizer %d, policy '%.128s'; this trainer is "
                         "%.16s, %s, %d, %llu, %d, %d, '%.128s'", name, cfg.model,
                         fmt_name((fmt_t)cfg.fmt) ? fmt_name((fmt_t)cfg.fmt) : "?",
                         cfg.batch_size, (unsigned long long)cfg.seed, cfg.master_weights,
                         cfg.optimizer, memchr(cfg.policy, 0, sizeof cfg.policy) ? cfg.policy
                                                                                 : "?",
                         t->cfg.model, fmt_name((fmt_t)t->cfg.fmt), t->cfg.batch_size,
                         (unsigned long long)t->cfg.seed, t->cfg.master_weights,
                         t->cfg.optimizer, t->cfg.policy);
    fx_ckpt_pos pos;
    fx_loss_scaler sc;
    fx_reader_get(&r, &pos, sizeof pos);
    fx_reader_get(&r, &sc, sizeof sc);
    if (r.failed) return LOAD_FAIL(FX_ECORRUPT, "%s: truncated position", name);
    int rc = fx_check_position(t, &pos, &sc, name);
    const fx_model *m = &t->m;
    for (int i = 0; i < m->nparams && !rc; i++) {
        const fx_param *p = &m->params[i];
        rc = fx_check_floats(&r, p->master != NULL, p->n, FX_FINITE, name, p->name,
                             "master weight");
        if (!rc)
            rc = fx_check_floats(&r, p->mom != NULL, p->n, FX_FINITE, name, p->name, "momentum");
        /* Adam's second moment is a mean of squares: finite and not negative */
        if (!rc)
            rc = fx_check_floats(&r, p->var != NULL, p->n, FX_FINITE_NONNEG, name, p->name,
                                 "second moment");
    }
    for (int i = 0; i < m->nlayers && !rc; i++) {
        const fx_layer *l = &m->layers[i];
        if (l->kind != FX_L_BN) continue;
        rc = fx_check_floats(&r, l->run_mean != NULL, l->channels, FX_ANY, name, l->name,
                             "running mean");
        if (!rc)
            rc = fx_check_floats(&r, l->run_var != NULL, l->channels, FX_NONNEG, name, l->name,
                                 "running variance");
        if (!rc)
            rc = fx_check_floats(&r, l->save_mean != NULL, l->channels, FX_ANY, name, l->name,
                                 "saved mean");
        if (!rc)
            rc = fx_check_floats(&r, l->save_invstd != NULL, l->channels, FX_ANY, name, l->name,
                                 "saved inverse std");
    }
    const int nstate = fx_state_count(t);
    for (int i = 0; i < t->nreg + nstate && !rc; i++) rc = fx_check_tensor(t, &r, i, name);
    if (!rc && r.left != 0)
        rc = LOAD_FAIL(FX_ECORRUPT, "%s: %zu unexpected bytes after the state", name, r.left);
    return rc;
}

/* ---- Applying a validated payload -------------------------------------------------------- */

static int fx_get_floats(fx_reader *r, float *p, int64_t n, const char *what)
{
    uint8_t have = 0;
    fx_reader_get(r, &have, 1);
    if (r->failed || have != (p != NULL))
        return LOAD_FAIL(FX_ECORRUPT, "%s: master/optimiser buffer presence differs", what);
    if (p) fx_reader_get(r, p, (size_t)n * sizeof(float));
    return r->failed ? LOAD_FAIL(FX_ECORRUPT, "%s: truncated", what) : FX_OK;
}

static int fx_get_placed(fx_reader *r, const fx_model *m, float *p, int64_t n, float *tmp,
                         const char *what)
{
    if (!p || m->device < 0) return fx_get_floats(r, p, n, what);
    int rc = fx_get_floats(r, tmp, n, what);
    return rc ? rc : fx_place_upload(m, p, tmp, n);
}

static int fx_get_tensor(fx_reader *r, tensor_t *x, const char *what)
{
    if (tensor_device(x) < 0) return fx_tensor_state_get(r, x, what);
    /* restored into a host copy (same format and shape), then copied back with its state */
    tensor_t *h = fx_host_copy(x);
    if (!h) return flexpoint_last_status();
    int rc = fx_tensor_state_get(r, h, what);
    if (!rc) rc = tensor_copy_to_device(x, h);
    tensor_free(h);
    return rc;
}

/* Write a payload into t. After fx_validate only a device copy or an allocation can fail,
 * and the caller then rolls back from a snapshot. */
static int fx_apply(fx_trainer *t, fx_reader *r)
{
    fx_train_config cfg;
    fx_ckpt_pos pos;
    fx_loss_scaler sc;
    fx_reader_get(r, &cfg, sizeof cfg);
    fx_reader_get(r, &pos, sizeof pos);
    fx_reader_get(r, &sc, sizeof sc);
    if (r->failed) return LOAD_FAIL(FX_ECORRUPT, "truncated header");
    float *tmp;
    int rc = fx_param_scratch(&t->m, t->m.device >= 0, &tmp);
    for (int i = 0; i < t->m.nparams && !rc; i++) {
        fx_param *p = &t->m.params[i];
        rc = fx_get_placed(r, &t->m, p->master, p->n, tmp, p->name);
        if (!rc) rc = fx_get_placed(r, &t->m, p->mom, p->n, tmp, p->name);
        if (!rc) rc = fx_get_placed(r, &t->m, p->var, p->n, tmp, p->name);
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
    const int nstate = fx_state_count(t);
    for (int i = 0; i < t->nreg + nstate && !rc; i++) {
        char label[96];
        tensor_t *x = fx_state_tensor(t, i, label, sizeof label);
        rc = fx_get_tensor(r, x, label);
    }
    if (rc) return rc;
    t->epoch = pos.epoch;
    t->scaling = pos.scaling;
    t->epoch_reported = pos.epoch_reported;
    t->step_in_epoch = pos.step_in_epoch;
    t->global_step = pos.global_step;
    t->correct = pos.correct;
    t->seen = pos.seen;
    /* the predictions of the epoch so far (a sequence model makes one per position): every
     * step adds its batch times the trainer's rows */
    t->seen_rows = pos.seen * t->rows;
    t->skipped = pos.skipped;
    t->nonfinite = pos.nonfinite;
    t->loss_sum = pos.loss_sum;
    t->seconds = pos.seconds;
    t->scaler = sc;
    fx_trainer_make_perm(t, t->epoch);
    return FX_OK;
}

int fx_ckpt_decode(fx_trainer *t, const uint8_t *file, size_t len, const char *name)
{
    if (!t || (!file && len)) return LOAD_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "file");
    if (!name) name = "checkpoint";
    uint32_t version = 0;
    int rc = fx_check_header(file, len, name, LOAD_FUNC, &version);
    if (rc) return rc;
    if (version != FX_CKPT_VERSION && fx_model_has_attention(&t->m))
        return LOAD_FAIL(FX_ECORRUPT, "%s: version %u, whose attention layers keep another "
                         "set of backward tensors; this model has attention layers, which need "
                         "version %u", name, version, FX_CKPT_VERSION);
    const uint8_t *payload = file + FX_CKPT_HEADER_BYTES;
    size_t plen = len - FX_CKPT_HEADER_BYTES;
    uint32_t crc;
    memcpy(&crc, file + FX_CKPT_OFF_CRC, 4);
    if (fx_crc32(payload, plen) != crc)
        return LOAD_FAIL(FX_ECORRUPT, "%s: checksum mismatch (file corrupted)", name);
    rc = fx_validate(t, payload, plen, name);
    if (rc) return rc;

    /* Valid: apply. Only a device copy or an allocation can still fail; roll back then. */
    fx_buf snap = {0};
    rc = fx_serialize(t, &snap, NULL, 0, name);
    if (!rc) {
        fx_reader r = {payload, plen, 0};
        rc = fx_apply(t, &r);
        if (rc) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", flexpoint_last_error());
            fx_reader back = {snap.data, snap.len, 0};
            fx_apply(t, &back);
            LOAD_FAIL(rc, "%s: %s", name, msg);
        }
    }
    fx_buf_free(&snap);
    return rc;
}

/* ---- Files ------------------------------------------------------------------------------- */

/* The whole checkpoint file at path in *data (malloc'd, *len bytes). The header is checked
 * against the file's size before a byte is allocated for the rest, so a damaged length field
 * cannot ask for more memory than the file has. Errors are reported as coming from func. */
static int fx_ckpt_read_file(const char *path, const char *func, uint8_t **data_out,
                             size_t *len_out)
{
    int fd;
    int64_t size;
    int rc = fx_file_open_regular(path, func, &fd, &size);
    if (rc) return rc;
    uint8_t hdr[FX_CKPT_HEADER_BYTES];
    size_t want = (uint64_t)size < sizeof hdr ? (size_t)size : sizeof hdr;
    ssize_t got = fx_io_read_full(fd, hdr, want);
    if (got < 0) rc = fx_error(FX_EIO, func, "%s: read error: %s", path, strerror(errno));
    else if ((size_t)got != want)
        rc = fx_error(FX_EIO, func, "%s: file shrank while being read", path);
    if (!rc) rc = fx_check_header(hdr, (uint64_t)size, path, func, NULL);
    if (!rc && (uint64_t)size > SIZE_MAX / 2)
        rc = fx_error(FX_ENOMEM, func, "%s: %lld bytes do not fit in memory", path,
                      (long long)size);
    uint8_t *data = NULL;
    if (!rc) {
        data = malloc((size_t)size);
        if (!data)
            rc = fx_error(FX_ENOMEM, func, "%s: cannot allocate %lld bytes", path,
                          (long long)size);
    }
    if (!rc) {
        memcpy(data, hdr, sizeof hdr);
        size_t rest = (size_t)size - sizeof hdr;
        got = fx_io_read_full(fd, data + sizeof hdr, rest);
        uint8_t extra;
        if (got < 0) rc = fx_error(FX_EIO, func, "%s: read error: %s", path, strerror(errno));
        else if ((size_t)got != rest || fx_io_read_full(fd, &extra, 1) != 0)
            rc = fx_error(FX_EIO, func, "%s: file changed size while being read", path);
    }
    close(fd);
    if (rc) {
        free(data);
        return rc;
    }
    *data_out = data;
    *len_out = (size_t)size;
    return FX_OK;
}

int fx_trainer_load(fx_trainer *t, const char *path)
{
    if (!t || !path) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "path");
    int rc = fx_trainer_use_device(t);
    if (rc) return rc;
    uint8_t *data = NULL;
    size_t len = 0;
    rc = fx_ckpt_read_file(path, LOAD_FUNC, &data, &len);
    if (!rc) rc = fx_ckpt_decode(t, data, len, path);
    free(data);
    /* Every rank of a distributed trainer reads the file; they go on only together. A rank
     * whose load failed is left unchanged, the others hold the file's state: the caller gets
     * a failure on every rank and does not train on. */
    if (t->comm) rc = fx_comm_agree(t->comm, rc, NULL);
    return rc;
}

int fx_checkpoint_config(const char *path, fx_train_config *cfg)
{
    if (!path || !cfg) return FX_FAIL(FX_EINVAL, "%s is NULL", !path ? "path" : "cfg");
    uint8_t *data = NULL;
    size_t len = 0;
    int rc = fx_ckpt_read_file(path, __func__, &data, &len);
    if (rc) return rc;
    const uint8_t *payload = data + FX_CKPT_HEADER_BYTES;
    size_t plen = len - FX_CKPT_HEADER_BYTES;
    uint32_t crc;
    memcpy(&crc, data + FX_CKPT_OFF_CRC, 4);
    fx_train_config c;
    if (fx_crc32(payload, plen) != crc) {
        rc = FX_FAIL(FX_ECORRUPT, "%s: checksum mismatch (file corrupted)", path);
    } else if (plen < sizeof c) {
        rc = FX_FAIL(FX_ECORRUPT, "%s: truncated configuration", path);
    } else {
        memcpy(&c, payload, sizeof c);
        if (fx_train_config_validate(&c) != FX_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", flexpoint_last_error());
            rc = FX_FAIL(FX_ECORRUPT, "%s: the stored configuration is invalid (%s)", path, msg);
        }
    }
    free(data);
    if (rc) return rc;
    c.device = -1;
    *cfg = c;
    return FX_OK;
}

int fx_trainer_save(const fx_trainer *tc, const char *path)
{
    if (!tc || !path) return FX_FAIL(FX_EINVAL, "%s is NULL", !tc ? "trainer" : "path");
    fx_trainer *t = (fx_trainer *)tc; /* serialising only reads */
    int rc = fx_trainer_use_device(t);
    if (rc) return rc;
    /* The ranks of a distributed trainer hold the same state: rank 0 writes it, and every
     * rank returns rank 0's status, after the file is in place. */
    if (!t->comm || t->rank == 0) {
        fx_buf file = {0};
        rc = fx_ckpt_encode(t, &file, NULL, path);
        if (!rc) rc = fx_write_file_atomic(path, file.data, file.len, SAVE_FUNC);
        fx_buf_free(&file);
    }
    if (t->comm) rc = fx_comm_agree(t->comm, rc, NULL);
    return rc;
}
