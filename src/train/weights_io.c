/* Weights files: a model's fp32 weights with their names and shapes, and nothing else, so that a
 * model trained elsewhere (another framework, another format, another machine) can be
 * evaluated or trained on here. The layout (docs/training.md, "Weights files"):
 *
 *   "FXWEIGHT" | u32 version (1) | u32 entry count
 *   per entry: u32 name length (1..63) | name (no NUL) | u32 ndim (1..4) | i64 shape[ndim] |
 *              f32 values[product of shape]
 *   u32 CRC-32 of every byte before it
 *
 * little-endian. The entries are the parameters under their trainer names (conv1.w, fc2.b,
 * bn0.gamma, ...) and, for each batch-norm layer, <layer>.running_mean and
 * <layer>.running_var. An import must name every one of them exactly once with its shape, and
 * nothing else; everything is checked before the trainer changes. */
#include "checkpoint.h"
#include "placement.h"
#include "../data/data_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WTS_MAGIC "FXWEIGHT"
#define WTS_VERSION 1u
#define WTS_NAME_MAX 63
#define WTS_MAX_BYTES ((int64_t)1 << 36)

/* One entry of the model: where its values live. */
typedef struct wts_entry {
    char name[WTS_NAME_MAX + 1];
    int ndim;
    int64_t shape[4];
    int64_t n;
    int64_t param_off; /* offset in the flat parameter array, or -1 for a batch-norm buffer */
    float *bn_buf;     /* batch-norm running statistic (host memory), or NULL */
    int seen;
} wts_entry;

/* Every entry of t, in the order an export writes them. *out is malloc'd. */
static int wts_entries(const fx_trainer *t, wts_entry **out, int *count, const char *func)
{
    const fx_model *m = &t->m;
    int cap = m->nparams + 2 * m->nlayers;
    wts_entry *e = calloc((size_t)(cap > 0 ? cap : 1), sizeof *e);
    if (!e) return fx_error(FX_ENOMEM, func, "out of memory");
    int k = 0;
    int64_t off = 0;
    for (int i = 0; i < m->nparams; i++, k++) {
        const fx_param *p = &m->params[i];
        snprintf(e[k].name, sizeof e[k].name, "%s", p->name);
        e[k].ndim = tensor_ndim(p->w);
        memcpy(e[k].shape, tensor_shape(p->w), (size_t)e[k].ndim * sizeof(int64_t));
        e[k].n = p->n;
        e[k].param_off = off;
        off += p->n;
    }
    for (int i = 0; i < m->nlayers; i++) {
        const fx_layer *l = &m->layers[i];
        if (l->kind != FX_L_BN) continue;
        for (int s = 0; s < 2; s++, k++) {
            snprintf(e[k].name, sizeof e[k].name, "%s.%s", l->name,
                     s ? "running_var" : "running_mean");
            e[k].ndim = 1;
            e[k].shape[0] = l->channels;
            e[k].n = l->channels;
            e[k].param_off = -1;
            e[k].bn_buf = s ? l->run_var : l->run_mean;
        }
    }
    *out = e;
    *count = k;
    return FX_OK;
}

int fx_trainer_export_weights(const fx_trainer *t, const char *path)
{
    if (!t || !path) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "path");
    wts_entry *e = NULL;
    int count = 0;
    int rc = wts_entries(t, &e, &count, __func__);
    if (rc) return rc;
    int64_t np = 0;
    for (int i = 0; i < t->m.nparams; i++) np += t->m.params[i].n;
    float *vals = malloc((size_t)(np > 0 ? np : 1) * sizeof *vals);
    if (!vals) rc = FX_FAIL(FX_ENOMEM, "cannot allocate %lld weights", (long long)np);
    if (!rc) rc = fx_trainer_use_device(t);
    if (!rc) rc = fx_trainer_get_params(t, vals);
    fx_buf b = {0};
    if (!rc) {
        uint32_t version = WTS_VERSION, n = (uint32_t)count;
        fx_buf_put(&b, WTS_MAGIC, 8);
        fx_buf_put(&b, &version, 4);
        fx_buf_put(&b, &n, 4);
    }
    for (int i = 0; i < count && !rc; i++) {
        const float *v = e[i].param_off >= 0 ? vals + e[i].param_off : e[i].bn_buf;
        for (int64_t j = 0; j < e[i].n; j++)
            if (!isfinite(v[j])) {
                rc = FX_FAIL(FX_ERANGE, "%s: %s[%lld] is %g; a weights file holds finite values "
                             "only, nothing was written", path, e[i].name, (long long)j,
                             (double)v[j]);
                break;
            }
        if (rc) break;
        uint32_t len = (uint32_t)strlen(e[i].name), nd = (uint32_t)e[i].ndim;
        fx_buf_put(&b, &len, 4);
        fx_buf_put(&b, e[i].name, len);
        fx_buf_put(&b, &nd, 4);
        fx_buf_put(&b, e[i].shape, (size_t)nd * sizeof(int64_t));
        fx_buf_put(&b, v, (size_t)e[i].n * sizeof(float));
    }
    if (!rc && b.failed) rc = FX_FAIL(FX_ENOMEM, "cannot allocate the file's %zu bytes", b.len);
    if (!rc) {
        uint32_t crc = fx_crc32(b.data, b.len);
        fx_buf_put(&b, &crc, 4);
        if (b.failed) rc = FX_FAIL(FX_ENOMEM, "cannot allocate the file's bytes");
    }
    if (!rc) rc = fx_write_file_atomic(path, b.data, b.len, __func__);
    fx_buf_free(&b);
    free(vals);
    free(e);
    return rc;
}

/* 0, or -1 when the file ends before n more bytes (fx_reader zero-fills then). */
static int wts_get(fx_reader *r, void *dst, size_t n)
{
    fx_reader_get(r, dst, n);
    return r->failed ? -1 : 0;
}

#define WTS_BAD(...) fx_error(FX_ECORRUPT, "fx_trainer_import_weights", __VA_ARGS__)

/* Parse and check the whole file against the model's entries; on success the parameter values
 * are in vals (parameter order) and the batch-norm values in bn (entry order). */
static int wts_parse(const uint8_t *data, size_t len, const char *path, wts_entry *e, int count,
                     float *vals, float *bn, const int64_t *bn_off)
{
    if (len < 20 || memcmp(data, WTS_MAGIC, 8) != 0)
        return WTS_BAD("%s: not a flexpoint weights file (magic %s expected)", path, WTS_MAGIC);
    uint32_t crc;
    memcpy(&crc, data + len - 4, 4);
    if (fx_crc32(data, len - 4) != crc)
        return WTS_BAD("%s: checksum mismatch (file corrupted or truncated)", path);
    fx_reader r = {data + 8, len - 12, 0};
    uint32_t version, n;
    wts_get(&r, &version, 4);
    wts_get(&r, &n, 4);
    if (version != WTS_VERSION)
        return WTS_BAD("%s: version %u, this library reads version %u", path, version,
                       WTS_VERSION);
    if (n != (uint32_t)count)
        return WTS_BAD("%s: %u tensors, the model has %d", path, n, count);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t nl, nd;
        char name[WTS_NAME_MAX + 1];
        if (wts_get(&r, &nl, 4) || nl < 1 || nl > WTS_NAME_MAX)
            return WTS_BAD("%s: entry %u: name length %u is outside [1, %d]", path, i, nl,
                           WTS_NAME_MAX);
        if (wts_get(&r, name, nl)) return WTS_BAD("%s: entry %u: truncated name", path, i);
        name[nl] = '\0';
        if (memchr(name, '\0', nl))
            return WTS_BAD("%s: entry %u: the name holds a NUL byte", path, i);
        int k = 0;
        while (k < count && strcmp(e[k].name, name) != 0) k++;
        if (k == count)
            return fx_error(FX_ESHAPE, "fx_trainer_import_weights", "%s: '%s' is neither a "
                            "parameter nor a batch-norm statistic of the model", path, name);
        if (e[k].seen) return WTS_BAD("%s: '%s' appears twice", path, name);
        e[k].seen = 1;
        int64_t shape[4];
        if (wts_get(&r, &nd, 4) || nd < 1 || nd > 4)
            return WTS_BAD("%s: '%s': ndim %u is outside [1, 4]", path, name, nd);
        if (wts_get(&r, shape, (size_t)nd * sizeof(int64_t)))
            return WTS_BAD("%s: '%s': truncated shape", path, name);
        int same = (int)nd == e[k].ndim;
        for (uint32_t d = 0; same && d < nd; d++) same = shape[d] == e[k].shape[d];
        if (!same)
            return fx_error(FX_ESHAPE, "fx_trainer_import_weights", "%s: '%s' has another shape "
                            "(%u dims, first %lld) than the model's (%d dims, first %lld)", path,
                            name, nd, (long long)shape[0], e[k].ndim, (long long)e[k].shape[0]);
        float *dst = e[k].param_off >= 0 ? vals + e[k].param_off : bn + bn_off[k];
        if (r.left / sizeof(float) < (size_t)e[k].n || wts_get(&r, dst, (size_t)e[k].n * 4))
            return WTS_BAD("%s: '%s': truncated values", path, name);
        for (int64_t j = 0; j < e[k].n; j++)
            if (!isfinite(dst[j]))
                return fx_error(FX_ERANGE, "fx_trainer_import_weights", "%s: %s[%lld] is %g; "
                                "weights must be finite", path, name, (long long)j,
                                (double)dst[j]);
        if (e[k].bn_buf && e[k].name[strlen(e[k].name) - 1] == 'r') /* running_var */
            for (int64_t j = 0; j < e[k].n; j++)
                if (dst[j] < 0)
                    return fx_error(FX_ERANGE, "fx_trainer_import_weights", "%s: %s[%lld] is %g; "
                                    "a variance is not negative", path, name, (long long)j,
                                    (double)dst[j]);
    }
    if (r.left != 0) return WTS_BAD("%s: %zu unexpected bytes after the last tensor", path, r.left);
    return FX_OK;
}

int fx_trainer_import_weights(fx_trainer *t, const char *path)
{
    if (!t || !path) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "trainer" : "path");
    if (t->m.device >= 0)
        return FX_FAIL(FX_EUNSUPPORTED, "the trainer lives on CUDA device %d; import into a host "
                       "trainer", t->m.device);
    wts_entry *e = NULL;
    int count = 0;
    int rc = wts_entries(t, &e, &count, __func__);
    if (rc) return rc;
    int64_t np = 0, nbn = 0;
    int64_t *bn_off = calloc((size_t)(count > 0 ? count : 1), sizeof *bn_off);
    for (int i = 0; i < count && bn_off; i++)
        if (e[i].param_off >= 0) np += e[i].n;
        else {
            bn_off[i] = nbn;
            nbn += e[i].n;
        }
    float *vals = malloc((size_t)(np > 0 ? np : 1) * sizeof *vals);
    float *bn = malloc((size_t)(nbn > 0 ? nbn : 1) * sizeof *bn);
    uint8_t *data = NULL;
    size_t len = 0;
    if (!vals || !bn || !bn_off) rc = FX_FAIL(FX_ENOMEM, "out of memory");
    if (!rc) rc = fx_data_read_file(path, __func__, WTS_MAX_BYTES, &data, &len);
    if (!rc) rc = wts_parse(data, len, path, e, count, vals, bn, bn_off);
    /* valid: apply (a host write cannot fail) */
    if (!rc) rc = fx_trainer_set_params(t, vals);
    for (int i = 0; i < count && !rc; i++)
        if (e[i].bn_buf) memcpy(e[i].bn_buf, bn + bn_off[i], (size_t)e[i].n * sizeof(float));
    free(data);
    free(vals);
    free(bn);
    free(bn_off);
    free(e);
    return rc;
}
