/* Internal interface of the data sets: the dataset object and the in-memory parsers that the
 * file loaders, the tests and the fuzzers (tests/fuzz/) share. The parsers take the whole file
 * contents as one buffer, validate all of it before allocating the result, and name `func` and
 * the file (`name`) in every error message. */
#ifndef FX_DATA_INTERNAL_H
#define FX_DATA_INTERNAL_H

#include "flexpoint_data.h"

#include <stddef.h>
#include <stdint.h>

/* Per-image size limits shared by every constructor (keeps c*h*w far from overflow). */
#define FX_DATA_MAX_CHANNELS 64
#define FX_DATA_MAX_SIDE 1024
#define FX_DATA_MAX_CLASSES 1000

struct fx_dataset {
    int64_t n;        /* images, >= 1 */
    int c, h, w;      /* per-image shape */
    int classes;      /* labels are in [0, classes) */
    float *images;    /* n*c*h*w, NCHW */
    int32_t *labels;  /* n */
    char source[512]; /* description for logs */
    /* Text datasets (fx_dataset_text): seq > 0 tokens per sample, stored as the images
     * (n x 1 x 1 x seq, token numbers as floats), with seq next-token targets per sample in
     * targets (the label is the last of them) and the vocabulary: token t is byte vocab[t].
     * Image datasets: seq = 0, targets = NULL, nvocab = 0. */
    int seq;
    int32_t *targets;
    int nvocab;
    uint8_t vocab[256];
};

/* New dataset with uninitialised images and labels. Checks the limits above (FX_EINVAL) and
 * the allocation size (FX_ENOMEM); errors are reported as coming from `func`. */
fx_dataset *fx_ds_alloc(const char *func, int64_t n, int c, int h, int w, int classes);
/* c*h*w of a dataset (cannot overflow thanks to the limits). */
int64_t fx_ds_image_size(const fx_dataset *ds);
/* printf-style description stored in ds->source (truncated to fit). */
void fx_ds_set_source(fx_dataset *ds, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* byte/255 for every byte value: the one conversion every loader uses. */
extern const float fx_byte_to_unit[256];
void fx_bytes_to_unit(float *dst, const uint8_t *src, size_t n);

/* ---- IDX (Yann LeCun's format, big-endian header) ---------------------------------------- */

#define FX_IDX_MAGIC_LABELS 0x00000801u /* unsigned bytes, 1 dimension */
#define FX_IDX_MAGIC_IMAGES 0x00000803u /* unsigned bytes, 3 dimensions */
#define FX_IDX_MAX_SIDE ((uint32_t)FX_DATA_MAX_SIDE) /* largest rows/cols of an image file */

typedef struct fx_idx_view {
    int ndim;             /* 1 (labels) or 3 (images) */
    uint32_t dims[3];     /* dims[0] = number of items */
    uint64_t item_bytes;  /* product of dims[1..ndim-1] (1 for labels) */
    const uint8_t *data;  /* payload inside the parsed buffer */
    size_t data_len;      /* = dims[0] * item_bytes */
} fx_idx_view;

/* Validate an IDX file held in buf[0..len) whose magic must be `want_magic` (one of the two
 * above) and describe it in *out (pointing into buf). The payload size must match the header
 * exactly. Returns FX_OK, FX_ECORRUPT (bad contents) or FX_EINVAL (NULL arguments, unknown
 * want_magic). */
int fx_idx_parse(const uint8_t *buf, size_t len, uint32_t want_magic, fx_idx_view *out,
                 const char *func, const char *name);

/* Fashion-MNIST from an images file and a labels file held in memory: both parsed, counts
 * matched, count >= 1, labels < FX_DATA_CLASSES. *out is the new dataset (NULL on failure). */
int fx_mnist_from_buffers(const uint8_t *img, size_t img_len, const char *img_name,
                          const uint8_t *lab, size_t lab_len, const char *lab_name,
                          const char *func, fx_dataset **out);

/* ---- CIFAR-10 binary --------------------------------------------------------------------- */

#define FX_CIFAR_SIDE 32
#define FX_CIFAR_PIXELS (3 * FX_CIFAR_SIDE * FX_CIFAR_SIDE)
#define FX_CIFAR_RECORD (1 + FX_CIFAR_PIXELS) /* 3073 */
#define FX_CIFAR_MAX_FILES 16

/* CIFAR-10 from nbufs (1..FX_CIFAR_MAX_FILES) batch files held in memory, concatenated in
 * order. Every file must be non-empty, a multiple of FX_CIFAR_RECORD bytes, with labels < 10.
 * *out is the new dataset (NULL on failure). */
int fx_cifar_from_buffers(const uint8_t *const *bufs, const size_t *lens,
                          const char *const *names, int nbufs, const char *func,
                          fx_dataset **out);

/* ---- Text -------------------------------------------------------------------------------- */

/* Make ds (n samples of 1 x 1 x seq, allocated by fx_ds_alloc) a text dataset: copies
 * n*seq targets and the vocabulary (nvocab bytes). FX_ENOMEM. */
int fx_ds_text_attach(fx_dataset *ds, int seq, const int32_t *targets, const uint8_t *vocab,
                      int nvocab, const char *func);

/* The training and validation datasets of a text held in buf[0..len) (fx_dataset_text's rules,
 * which calls it after reading the files; `name` describes the text in messages and sources).
 * *train and *val are set (val NULL when val_fraction is 0), or both NULL on failure. */
int fx_text_from_buffer(const uint8_t *buf, size_t len, const char *name, int context,
                        double val_fraction, const char *func, fx_dataset **train,
                        fx_dataset **val);

/* ---- Files ------------------------------------------------------------------------------- */

/* Open a file for reading: the one way the library opens a file it reads (data sets,
 * checkpoints), so that none can hang or read something that is not a file. Refuses at once,
 * with FX_EIO and a message naming the path and the problem, anything but a regular file (a
 * folder, FIFO, device or socket: "not a regular file (a FIFO)"), a symbolic-link loop ("too
 * many levels of symbolic links") and a missing or unreadable file; a FIFO is never waited
 * on. On success *fd_out is a blocking, close-on-exec descriptor the caller closes and
 * *size_out (may be NULL) the file's size; on failure *fd_out is -1. */
int fx_file_open_regular(const char *path, const char *func, int *fd_out, int64_t *size_out);

/* Read a whole regular file (opened with fx_file_open_regular), decompressing it if it is gzip
 * (zlib passes plain files through).
 * At most max_bytes bytes after decompression (FX_ECORRUPT beyond). On success *buf (malloc'd,
 * caller frees; NULL for an empty file) and *len are set. FX_EIO for a missing or unreadable
 * file, a non-regular file or a gzip error (corrupt or truncated stream). */
int fx_data_read_file(const char *path, const char *func, int64_t max_bytes, uint8_t **buf,
                      size_t *len);

#endif
