/* Directory loaders: find the files, read them whole (gzip or plain) and hand the bytes to the
 * in-memory parsers, which validate everything before a dataset is built. */
#define _POSIX_C_SOURCE 200809L

#include "data_internal.h"
#include "../core/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FASHION_MNIST_ENV "FLEXPOINT_FASHION_MNIST_DIR"
#define FASHION_MNIST_DEFAULT "/usr/share/datasets/fashion-mnist"
#define CIFAR10_ENV "FLEXPOINT_CIFAR10_DIR"
#define CIFAR10_DEFAULT "cifar-10-batches-bin"

static const char *resolve_dir(const char *dir, const char *env, const char *fallback)
{
    if (dir && dir[0]) return dir;
    const char *e = getenv(env);
    return e && e[0] ? e : fallback;
}

/* dir + "/" + name (+ suffix), malloc'd; NULL with FX_ENOMEM set on failure. */
static char *join_path(const char *func, const char *dir, const char *name, const char *suffix)
{
    size_t dl = strlen(dir);
    int slash = dl > 0 && dir[dl - 1] != '/';
    size_t n = dl + (size_t)slash + strlen(name) + strlen(suffix) + 1;
    char *p = malloc(n);
    if (!p) {
        fx_error(FX_ENOMEM, func, "cannot allocate a path");
        return NULL;
    }
    snprintf(p, n, "%s%s%s%s", dir, slash ? "/" : "", name, suffix);
    return p;
}

/* 1 if path names something (even a broken thing: a FIFO, a link loop) that the reader should
 * report on, 0 if it is absent (ENOENT, errno kept for the message). */
static int present(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 || errno != ENOENT;
}

/* Read dir/base.gz, or dir/base when the .gz file does not exist. On success *path_out is the
 * path that was read (malloc'd, caller frees). Anything under the .gz name other than plain
 * absence (a folder, a FIFO, a link loop, no permission) is reported for that name, so the
 * message names the real problem rather than falling back. */
static int read_gz_or_plain(const char *func, const char *dir, const char *base, char **path_out,
                            uint8_t **buf, size_t *len)
{
    *path_out = NULL;
    char *gz = join_path(func, dir, base, ".gz");
    char *plain = join_path(func, dir, base, "");
    if (!gz || !plain) {
        free(gz);
        free(plain);
        return FX_ENOMEM;
    }
    char *chosen = gz;
    if (!present(gz)) {
        int gz_errno = errno;
        if (present(plain)) {
            chosen = plain;
        } else {
            int rc = fx_error(FX_EIO, func, "%s: cannot open: %s (and no uncompressed %s)", gz,
                              strerror(gz_errno), plain);
            free(gz);
            free(plain);
            return rc;
        }
    }
    int rc = fx_data_read_file(chosen, func, FX_DATA_MAX_FILE_BYTES, buf, len);
    free(chosen == gz ? plain : gz);
    if (rc == FX_OK)
        *path_out = chosen;
    else
        free(chosen);
    return rc;
}

fx_dataset *fx_dataset_fashion_mnist(const char *dir, int train)
{
    const char *func = __func__;
    const char *d = resolve_dir(dir, FASHION_MNIST_ENV, FASHION_MNIST_DEFAULT);
    const char *split = train ? "train" : "t10k";
    char img_base[64], lab_base[64];
    snprintf(img_base, sizeof img_base, "%s-images-idx3-ubyte", split);
    snprintf(lab_base, sizeof lab_base, "%s-labels-idx1-ubyte", split);

    char *img_path = NULL, *lab_path = NULL;
    uint8_t *img = NULL, *lab = NULL;
    size_t img_len = 0, lab_len = 0;
    fx_dataset *ds = NULL;
    int rc = read_gz_or_plain(func, d, img_base, &img_path, &img, &img_len);
    if (rc == FX_OK) rc = read_gz_or_plain(func, d, lab_base, &lab_path, &lab, &lab_len);
    if (rc == FX_OK)
        rc = fx_mnist_from_buffers(img, img_len, img_path, lab, lab_len, lab_path, func, &ds);
    if (rc == FX_OK) fx_ds_set_source(ds, "fashion-mnist %s (%s)", split, d);
    free(img);
    free(lab);
    free(img_path);
    free(lab_path);
    return ds;
}

fx_dataset *fx_dataset_cifar10(const char *dir, int train)
{
    const char *func = __func__;
    const char *d = resolve_dir(dir, CIFAR10_ENV, CIFAR10_DEFAULT);
    enum { TRAIN_BATCHES = 5 };
    int nfiles = train ? TRAIN_BATCHES : 1;
    char *paths[TRAIN_BATCHES] = {0};
    uint8_t *bufs[TRAIN_BATCHES] = {0};
    size_t lens[TRAIN_BATCHES] = {0};
    fx_dataset *ds = NULL;
    int rc = FX_OK;
    for (int f = 0; f < nfiles && rc == FX_OK; f++) {
        char base[32];
        if (train)
            snprintf(base, sizeof base, "data_batch_%d.bin", f + 1);
        else
            snprintf(base, sizeof base, "test_batch.bin");
        paths[f] = join_path(func, d, base, "");
        if (!paths[f]) rc = FX_ENOMEM;
        else rc = fx_data_read_file(paths[f], func, FX_DATA_MAX_FILE_BYTES, &bufs[f], &lens[f]);
    }
    if (rc == FX_OK)
        rc = fx_cifar_from_buffers((const uint8_t *const *)bufs, lens, (const char *const *)paths,
                                   nfiles, func, &ds);
    if (rc == FX_OK) fx_ds_set_source(ds, "cifar10 %s (%s)", train ? "train" : "test", d);
    for (int f = 0; f < nfiles; f++) {
        free(bufs[f]);
        free(paths[f]);
    }
    return ds;
}
