/* How a fuzz input drives the data parsers. Shared by the libFuzzer harnesses (fuzz_idx.c,
 * fuzz_cifar.c) and the corpus regression test (tests/test_data_corpus.c), so that a saved
 * input means the same thing to both.
 *
 * Each function returns the parser's status (FX_OK or a negative FX_E* code), or
 * FX_FUZZ_BROKEN when a property that must always hold is violated: a failure without a
 * message, a success without a dataset, or a dataset whose contents disagree with the bytes.
 * The fuzzers abort on FX_FUZZ_BROKEN; the corpus test reports it. */
#ifndef FX_FUZZ_INPUTS_H
#define FX_FUZZ_INPUTS_H

#include "data/data_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FX_FUZZ_BROKEN 1
/* Largest decompressed file accepted by the file-reading mode (keeps iterations fast). */
#define FX_FUZZ_MAX_FILE 4096

static inline int fx_fuzz_check_error(int rc)
{
    if (rc != FX_OK && flexpoint_last_error()[0] == '\0') return FX_FUZZ_BROKEN;
    return rc;
}

/* A dataset built from IDX buffers must hold exactly the bytes of the payloads. */
static inline int fx_fuzz_check_mnist(const fx_dataset *ds, const uint8_t *img, size_t img_len,
                                      const uint8_t *lab)
{
    if (!ds) return FX_FUZZ_BROKEN;
    fx_idx_view iv;
    if (fx_idx_parse(img, img_len, FX_IDX_MAGIC_IMAGES, &iv, "fuzz", "img") != FX_OK)
        return FX_FUZZ_BROKEN;
    if (ds->n != (int64_t)iv.dims[0] || ds->n < 1 || ds->c != 1 || ds->h != (int)iv.dims[1] ||
        ds->w != (int)iv.dims[2] || ds->classes != FX_DATA_CLASSES)
        return FX_FUZZ_BROKEN;
    for (size_t i = 0; i < iv.data_len; i++)
        if (ds->images[i] != (float)iv.data[i] / 255.0f) return FX_FUZZ_BROKEN;
    for (int64_t i = 0; i < ds->n; i++)
        if (ds->labels[i] != lab[8 + i] || ds->labels[i] >= FX_DATA_CLASSES) return FX_FUZZ_BROKEN;
    return FX_OK;
}

/* IDX input: data[0] % 4 picks the mode, the rest is the payload.
 *   0: the payload is an images file       1: the payload is a labels file
 *   2: an images file and a labels file: the next 2 bytes (little-endian) give the images
 *      file's length (clamped), the labels file follows
 *   3: the payload is written to `tmp_path` and read back through the gzip/plain file reader,
 *      then parsed as an images file (skipped, returning FX_OK, when tmp_path is NULL). */
static inline int fx_fuzz_idx_input(const uint8_t *data, size_t size, const char *tmp_path)
{
    flexpoint_clear_error();
    if (size == 0) {
        fx_idx_view v;
        return fx_fuzz_check_error(fx_idx_parse(data, 0, FX_IDX_MAGIC_IMAGES, &v, "fuzz", "empty"));
    }
    int mode = data[0] % 4;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    fx_idx_view v;
    switch (mode) {
    case 0: return fx_fuzz_check_error(fx_idx_parse(p, n, FX_IDX_MAGIC_IMAGES, &v, "fuzz", "img"));
    case 1: return fx_fuzz_check_error(fx_idx_parse(p, n, FX_IDX_MAGIC_LABELS, &v, "fuzz", "lab"));
    case 2: {
        size_t split = 0;
        if (n >= 2) {
            split = (size_t)p[0] | (size_t)p[1] << 8;
            p += 2;
            n -= 2;
        }
        if (split > n) split = n;
        fx_dataset *ds = NULL;
        int rc = fx_mnist_from_buffers(p, split, "img", p + split, n - split, "lab", "fuzz", &ds);
        if (rc == FX_OK) rc = fx_fuzz_check_mnist(ds, p, split, p + split);
        else if (ds) rc = FX_FUZZ_BROKEN;
        fx_dataset_free(ds);
        return fx_fuzz_check_error(rc);
    }
    default: {
        if (!tmp_path) return FX_OK;
        FILE *f = fopen(tmp_path, "wb");
        if (!f) return FX_OK; /* the harness's problem, not the parser's */
        size_t wrote = n ? fwrite(p, 1, n, f) : 0;
        if (fclose(f) != 0 || wrote != n) return FX_OK;
        uint8_t *buf = NULL;
        size_t len = 0;
        int rc = fx_data_read_file(tmp_path, "fuzz", FX_FUZZ_MAX_FILE, &buf, &len);
        if (rc == FX_OK) {
            if (len > FX_FUZZ_MAX_FILE || (len == 0) != (buf == NULL)) rc = FX_FUZZ_BROKEN;
            else rc = fx_idx_parse(buf, len, FX_IDX_MAGIC_IMAGES, &v, "fuzz", tmp_path);
        } else if (buf) {
            rc = FX_FUZZ_BROKEN;
        }
        free(buf);
        return fx_fuzz_check_error(rc);
    }
    }
}

/* CIFAR input: data[0] % 3 + 1 batch files; each but the last takes a 2-byte little-endian
 * length (clamped) and its bytes; the last takes the rest. */
static inline int fx_fuzz_cifar_input(const uint8_t *data, size_t size)
{
    flexpoint_clear_error();
    const uint8_t *bufs[3];
    size_t lens[3];
    const char *names[3] = {"a.bin", "b.bin", "c.bin"};
    int nbufs = size ? data[0] % 3 + 1 : 1;
    const uint8_t *p = size ? data + 1 : data;
    size_t n = size ? size - 1 : 0;
    for (int b = 0; b < nbufs; b++) {
        size_t len = n;
        if (b < nbufs - 1) {
            len = 0;
            if (n >= 2) {
                len = (size_t)p[0] | (size_t)p[1] << 8;
                p += 2;
                n -= 2;
            }
            if (len > n) len = n;
        }
        bufs[b] = p;
        lens[b] = len;
        p += len;
        n -= len;
    }
    fx_dataset *ds = NULL;
    int rc = fx_cifar_from_buffers(bufs, lens, names, nbufs, "fuzz", &ds);
    if (rc == FX_OK) {
        int64_t want = 0;
        for (int b = 0; b < nbufs; b++) want += (int64_t)(lens[b] / FX_CIFAR_RECORD);
        if (!ds || ds->n != want || ds->c != 3 || ds->h != 32 || ds->w != 32) {
            rc = FX_FUZZ_BROKEN;
        } else {
            int64_t i = 0;
            for (int b = 0; b < nbufs && rc == FX_OK; b++)
                for (size_t r = 0; r < lens[b] / FX_CIFAR_RECORD && rc == FX_OK; r++, i++) {
                    const uint8_t *rec = bufs[b] + r * FX_CIFAR_RECORD;
                    if (ds->labels[i] != rec[0] || rec[0] >= FX_DATA_CLASSES) rc = FX_FUZZ_BROKEN;
                    for (int k = 0; k < FX_CIFAR_PIXELS && rc == FX_OK; k++)
                        if (ds->images[i * FX_CIFAR_PIXELS + k] != (float)rec[1 + k] / 255.0f)
                            rc = FX_FUZZ_BROKEN;
                }
        }
    } else if (ds) {
        rc = FX_FUZZ_BROKEN;
    }
    fx_dataset_free(ds);
    return fx_fuzz_check_error(rc);
}

#endif
