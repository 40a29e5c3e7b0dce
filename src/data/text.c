/* Character-level text corpora (fx_dataset_text): a file or a folder of text files read as
 * one byte string, its vocabulary (the bytes that occur, in byte order), a fixed split (the
 * last val_fraction of the text is held out) and non-overlapping windows of `context` tokens,
 * each with its next-token targets. A window starting at token s holds tokens s .. s+T-1 and
 * targets s+1 .. s+T, so a split of L tokens gives (L - 1) / T windows; the trainer draws them
 * in its seeded order (fx_trainer_make_perm). Windows never straddle the split. */
#define _POSIX_C_SOURCE 200809L

#include "data_internal.h"
#include "../core/internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int fx_ds_text_attach(fx_dataset *ds, int seq, const int32_t *targets, const uint8_t *vocab,
                      int nvocab, const char *func)
{
    size_t n = (size_t)ds->n * (size_t)seq;
    ds->targets = malloc(n * sizeof *ds->targets);
    if (!ds->targets)
        return fx_error(FX_ENOMEM, func, "cannot allocate %zu token targets", n);
    memcpy(ds->targets, targets, n * sizeof *ds->targets);
    ds->seq = seq;
    ds->nvocab = nvocab;
    memcpy(ds->vocab, vocab, (size_t)nvocab);
    return FX_OK;
}

/* The windows of tokens tok[0..len) as a dataset (len >= context + 1, checked by the caller). */
static fx_dataset *text_split(const int32_t *tok, size_t len, int T, const uint8_t *vocab,
                              int nvocab, const char *func)
{
    int64_t n = (int64_t)((len - 1) / (size_t)T);
    fx_dataset *ds = fx_ds_alloc(func, n, 1, 1, T, nvocab);
    if (!ds) return NULL;
    int32_t *tg = malloc((size_t)n * (size_t)T * sizeof *tg);
    if (!tg) {
        fx_dataset_free(ds);
        fx_error(FX_ENOMEM, func, "cannot allocate %lld windows of %d targets", (long long)n, T);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        const int32_t *w = tok + i * T;
        for (int t = 0; t < T; t++) {
            ds->images[i * T + t] = (float)w[t]; /* < 256: exact */
            tg[i * T + t] = w[t + 1];
        }
        ds->labels[i] = w[T];
    }
    int rc = fx_ds_text_attach(ds, T, tg, vocab, nvocab, func);
    free(tg);
    if (rc) {
        fx_dataset_free(ds);
        return NULL;
    }
    return ds;
}

int fx_text_from_buffer(const uint8_t *buf, size_t len, const char *name, int context,
                        double val_fraction, const char *func, fx_dataset **train,
                        fx_dataset **val)
{
    if (!train || !val) return fx_error(FX_EINVAL, func, "NULL output");
    *train = *val = NULL;
    if (!name) name = "text";
    if (len > 0 && !buf) return fx_error(FX_EINVAL, func, "NULL text of %zu bytes", len);
    if (context < 1 || context > FX_DATA_MAX_CONTEXT)
        return fx_error(FX_EINVAL, func, "context = %d (want 1..%d)", context,
                        FX_DATA_MAX_CONTEXT);
    if (!(val_fraction >= 0.0 && val_fraction <= 0.5))
        return fx_error(FX_EINVAL, func, "val_fraction = %g (want 0..0.5)", val_fraction);
    if (len == 0) return fx_error(FX_ECORRUPT, func, "%s: empty text", name);
    /* the held-out part: the last val_fraction of the bytes, rounded down */
    size_t nval = (size_t)((double)len * val_fraction);
    size_t ntrain = len - nval;
    if (ntrain < (size_t)context + 1)
        return fx_error(FX_ECORRUPT, func, "%s: %zu training bytes, fewer than one window of "
                        "%d tokens and its next token", name, ntrain, context);
    if (val_fraction > 0 && nval < (size_t)context + 1)
        return fx_error(FX_ECORRUPT, func, "%s: %zu held-out bytes (%g of %zu), fewer than one "
                        "window of %d tokens and its next token", name, nval, val_fraction, len,
                        context);
    int seen[256] = {0};
    for (size_t i = 0; i < len; i++) seen[buf[i]] = 1;
    uint8_t vocab[256];
    int32_t rank[256];
    int nvocab = 0;
    for (int b = 0; b < 256; b++)
        if (seen[b]) {
            rank[b] = nvocab;
            vocab[nvocab++] = (uint8_t)b;
        }
    if ((uint64_t)len > SIZE_MAX / sizeof(int32_t))
        return fx_error(FX_ENOMEM, func, "%s: %zu bytes do not fit in memory", name, len);
    int32_t *tok = malloc(len * sizeof *tok);
    if (!tok) return fx_error(FX_ENOMEM, func, "%s: cannot allocate %zu tokens", name, len);
    for (size_t i = 0; i < len; i++) tok[i] = rank[buf[i]];
    fx_dataset *tr = text_split(tok, ntrain, context, vocab, nvocab, func);
    fx_dataset *va = tr && nval ? text_split(tok + ntrain, nval, context, vocab, nvocab, func)
                                : NULL;
    free(tok);
    if (!tr || (nval && !va)) {
        fx_dataset_free(tr);
        return flexpoint_last_status() ? flexpoint_last_status() : FX_ENOMEM;
    }
    fx_ds_set_source(tr, "text %s (bytes 0..%zu, context %d, vocabulary %d)", name, ntrain,
                     context, nvocab);
    if (va)
        fx_ds_set_source(va, "text %s (bytes %zu..%zu held out, context %d, vocabulary %d)",
                         name, ntrain, len, context, nvocab);
    *train = tr;
    *val = va;
    return FX_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Append file `path` to *buf (have bytes, at most FX_DATA_MAX_FILE_BYTES in all). */
static int append_file(const char *path, const char *func, uint8_t **buf, size_t *have)
{
    uint8_t *data = NULL;
    size_t len = 0;
    int64_t room = FX_DATA_MAX_FILE_BYTES - (int64_t)*have;
    int rc = fx_data_read_file(path, func, room, &data, &len);
    if (rc == FX_ECORRUPT)
        return fx_error(FX_ECORRUPT, func, "%s: the text exceeds %lld bytes in all", path,
                        (long long)FX_DATA_MAX_FILE_BYTES);
    if (rc) return rc;
    if (len == 0) return FX_OK;
    uint8_t *grown = realloc(*buf, *have + len);
    if (!grown) {
        free(data);
        return fx_error(FX_ENOMEM, func, "%s: cannot allocate %zu bytes", path, *have + len);
    }
    memcpy(grown + *have, data, len);
    free(data);
    *buf = grown;
    *have += len;
    return FX_OK;
}

/* Every regular file of folder `dir` (not symbolic links, not hidden, no .dat or .u8 name),
 * in byte order of their names, concatenated. */
static int read_folder(const char *dir, const char *func, uint8_t **buf, size_t *have,
                       int *nfiles)
{
    DIR *d = opendir(dir);
    if (!d) return fx_error(FX_EIO, func, "%s: cannot open the folder: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, rc = FX_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        if (nm[0] == '.' || ends_with(nm, ".dat") || ends_with(nm, ".u8")) continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, nm) >= (int)sizeof path) continue;
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n == FX_DATA_MAX_TEXT_FILES) {
            rc = fx_error(FX_ECORRUPT, func, "%s: more than %d text files", dir,
                          FX_DATA_MAX_TEXT_FILES);
            break;
        }
        char **grown = realloc(names, (size_t)(n + 1) * sizeof *names);
        char *copy = grown ? malloc(strlen(path) + 1) : NULL;
        if (grown) names = grown;
        if (!copy) {
            rc = fx_error(FX_ENOMEM, func, "%s: out of memory", dir);
            break;
        }
        strcpy(copy, path);
        names[n++] = copy;
    }
    closedir(d);
    if (!rc && n == 0) rc = fx_error(FX_ECORRUPT, func, "%s: no text file in the folder", dir);
    if (!rc) qsort(names, (size_t)n, sizeof *names, cmp_names);
    for (int i = 0; i < n && !rc; i++) rc = append_file(names[i], func, buf, have);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    *nfiles = n;
    return rc;
}

int fx_dataset_text(const char *path, int context, double val_fraction, fx_dataset **train,
                    fx_dataset **val)
{
    const char *func = __func__;
    if (train) *train = NULL;
    if (val) *val = NULL;
    if (!path || !train || !val) return FX_FAIL(FX_EINVAL, "NULL path or output");
    if (context < 1 || context > FX_DATA_MAX_CONTEXT)
        return FX_FAIL(FX_EINVAL, "context = %d (want 1..%d)", context, FX_DATA_MAX_CONTEXT);
    if (!(val_fraction >= 0.0 && val_fraction <= 0.5))
        return FX_FAIL(FX_EINVAL, "val_fraction = %g (want 0..0.5)", val_fraction);
    struct stat st;
    uint8_t *buf = NULL;
    size_t len = 0;
    int nfiles = 1, rc;
    /* a folder is listed; anything else goes to fx_file_open_regular, which names the problem
     * (missing, FIFO, device) without ever waiting on it */
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        rc = read_folder(path, func, &buf, &len, &nfiles);
    else
        rc = append_file(path, func, &buf, &len);
    if (!rc) {
        char name[300];
        if (nfiles > 1) snprintf(name, sizeof name, "%.200s (%d files)", path, nfiles);
        else snprintf(name, sizeof name, "%.200s", path);
        rc = fx_text_from_buffer(buf, len, name, context, val_fraction, func, train, val);
    }
    free(buf);
    return rc;
}

/* ---- Accessors ---------------------------------------------------------------------------- */

int fx_dataset_seq_len(const fx_dataset *ds)
{
    if (!ds) return FX_FAIL(FX_EINVAL, "ds is NULL");
    return ds->seq;
}

const int32_t *fx_dataset_targets(const fx_dataset *ds)
{
    if (!ds) FX_FAIL(FX_EINVAL, "ds is NULL");
    return ds ? ds->targets : NULL;
}

int fx_dataset_vocab(const fx_dataset *ds, uint8_t *bytes)
{
    if (!ds) return FX_FAIL(FX_EINVAL, "ds is NULL");
    if (bytes && ds->nvocab) memcpy(bytes, ds->vocab, (size_t)ds->nvocab);
    return ds->nvocab;
}

int fx_dataset_batch_targets(const fx_dataset *ds, const int64_t *indices, int64_t n,
                             int32_t *targets)
{
    if (!ds) return FX_FAIL(FX_EINVAL, "ds is NULL");
    if (n < 0) return FX_FAIL(FX_EINVAL, "n = %lld (want >= 0)", (long long)n);
    if (ds->seq == 0)
        return FX_FAIL(FX_EINVAL, "%s is not a text dataset: its samples have no token targets",
                       ds->source);
    if (n == 0) return FX_OK;
    if (!indices || !targets) return FX_FAIL(FX_EINVAL, "indices or targets is NULL");
    for (int64_t i = 0; i < n; i++)
        if (indices[i] < 0 || indices[i] >= ds->n)
            return FX_FAIL(FX_ERANGE, "indices[%lld] = %lld is outside [0, %lld)", (long long)i,
                           (long long)indices[i], (long long)ds->n);
    for (int64_t i = 0; i < n; i++)
        memcpy(targets + i * ds->seq, ds->targets + indices[i] * ds->seq,
               (size_t)ds->seq * sizeof *targets);
    return FX_OK;
}
