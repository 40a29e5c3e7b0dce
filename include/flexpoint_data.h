/**
 * @file
 * @brief flexpoint data sets: Fashion-MNIST (IDX, gzip or plain), CIFAR-10 (binary batches), seeded
 * synthetic images and character-level text corpora, held in memory as float NCHW images and
 * int32 labels (text: windows of token numbers with their next-token targets).
 *
 * Conventions (the same as flexpoint.h)
 * -------------------------------------
 * - Constructors return a new `fx_dataset *` or NULL on failure; `int` functions return FX_OK
 *   (0) or a negative FX_E* code. After a failure flexpoint_last_error() names the function and
 *   the problem; for file errors it also names the file, e.g.
 *     "fx_dataset_fashion_mnist: /d/train-labels-idx1-ubyte.gz: bad magic 0x00000802
 *      (want 0x00000801)".
 * - File problems: FX_EIO (missing, unreadable, not a regular file, gzip stream error) and
 *   FX_ECORRUPT (bad magic, bad dimensions, truncated or oversized contents, count mismatch,
 *   label out of range, empty file). Bad arguments: FX_EINVAL. Allocation or size overflow:
 *   FX_ENOMEM.
 * - Ownership: the caller owns every dataset a constructor returns (including fx_dataset_pad and
 *   fx_dataset_subset, which copy) and frees it with fx_dataset_free. Pointers returned by the
 *   accessors are owned by the dataset and valid until it is freed.
 * - Every dataset holds at least one image. Images are float32, NCHW, row-major; loaded pixels
 *   are byte/255 in [0, 1]. Labels are int32 in [0, classes).
 * - A dataset is immutable except through fx_dataset_normalize; distinct threads may read one
 *   dataset at the same time.
 * - Loaders never abort or read out of bounds on a bad file: the whole file is validated before
 *   a dataset is returned, and nothing leaks on error paths.
 */
#ifndef FLEXPOINT_DATA_H
#define FLEXPOINT_DATA_H

#include "flexpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief An in-memory data set: float NCHW images and int32 labels (opaque). Created by the
 *  loaders and constructors below; freed with fx_dataset_free(). */
typedef struct fx_dataset fx_dataset;

/** @brief Number of classes of Fashion-MNIST and CIFAR-10. */
#define FX_DATA_CLASSES 10
/** @brief Largest file a loader reads, after decompression (guards against gzip bombs): 1 GiB. */
#define FX_DATA_MAX_FILE_BYTES ((int64_t)1 << 30)

/* ------------------------------------------------------------------------------------------ */
/* Loaders                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/** @brief Load Fashion-MNIST (or MNIST, same layout) from a directory of IDX files.
 *
 *  `dir`: NULL or "" means the environment variable FLEXPOINT_FASHION_MNIST_DIR if set and
 *  non-empty, else /usr/share/datasets/fashion-mnist (Debian package dataset-fashion-mnist).
 *  `train` != 0 reads train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz, 0 reads the
 *  t10k-* pair. Each file may also be present uncompressed, without ".gz" (the .gz name is tried
 *  first; zlib reads plain and gzip content alike).
 *  Validation: images magic 0x00000803 with 3 dimensions (count, rows, cols; rows and cols in
 *  1..1024), labels magic 0x00000801 with 1 dimension; the decompressed size must equal the
 *  header plus count*rows*cols (resp. count) bytes exactly: both truncated files and trailing
 *  bytes are rejected (FX_ECORRUPT). Bytes after the end of a gzip member that are not another
 *  gzip member are ignored by zlib. Image and label counts must match, the count must be >= 1
 *  and every label must be < 10.
 *  @param[in] dir   Directory, or NULL / "" for the default above.
 *  @param[in] train Nonzero: the training files; 0: the t10k test files.
 *  @return The dataset: n x 1 x rows x cols images, classes = 10. The caller owns it and frees
 *          it with fx_dataset_free(). NULL on failure: FX_EIO, FX_ECORRUPT, FX_ENOMEM (see
 *          the conventions above; flexpoint_last_status()). */
FX_API fx_dataset *fx_dataset_fashion_mnist(const char *dir, int train);

/** @brief Load the CIFAR-10 binary version from a directory.
 *
 *  `dir`: NULL or "" means FLEXPOINT_CIFAR10_DIR if set and non-empty, else
 *  "cifar-10-batches-bin" (relative to the working directory, the name the archive unpacks to).
 *  `train` != 0 reads data_batch_1.bin .. data_batch_5.bin in that order, 0 reads test_batch.bin.
 *  Each file is a sequence of 3073-byte records: one label byte (< 10), then 1024 red, 1024
 *  green and 1024 blue bytes (32x32, row-major). A missing batch fails with FX_EIO naming it; an
 *  empty file, a size that is not a multiple of 3073 or a label >= 10 fail with FX_ECORRUPT.
 *  @param[in] dir   Directory, or NULL / "" for the default above.
 *  @param[in] train Nonzero: the five training batches; 0: the test batch.
 *  @return The dataset: n x 3 x 32 x 32 images, classes = 10. The caller owns it and frees it
 *          with fx_dataset_free(). NULL on failure (FX_EIO, FX_ECORRUPT, FX_ENOMEM). */
FX_API fx_dataset *fx_dataset_cifar10(const char *dir, int train);

/** @brief Seeded synthetic, learnable images.
 *
 *  Every class has a fixed smooth random template per channel (half of it shared by all
 *  classes, so classes overlap); an image is its class's
 *  template, circularly shifted by up to height/4 and width/4 pixels, with a random contrast and
 *  brightness and per-pixel noise (sigma 0.2), clamped to [0, 1]. A nearest-class-mean
 *  classifier reaches only 35-45% on 3x32x32 with 10 classes; a CNN can do far better. Labels
 *  are balanced (i % classes, then shuffled). The result depends only on the arguments: the
 *  same arguments give the same bytes (no libm calls, no threads; the same on other machines
 *  unless a compiler fuses multiply-adds into FMA).
 *  Limits: n >= 1, channels 1..64, height and width 1..1024, classes 2..1000, and n*c*h*w must
 *  fit in memory (FX_EINVAL for bad values, FX_ENOMEM when too large). The usual CIFAR-shaped
 *  call is fx_dataset_synthetic(n, 3, 32, 32, 10, seed).
 *  @param[in] n        Number of images, >= 1.
 *  @param[in] channels Channels, 1..64.
 *  @param[in] height   Image height, 1..1024.
 *  @param[in] width    Image width, 1..1024.
 *  @param[in] classes  Classes, 2..1000.
 *  @param[in] seed     Seed; the same arguments give the same bytes.
 *  @return The dataset, which the caller owns and frees with fx_dataset_free(); NULL on
 *          failure (FX_EINVAL, FX_ENOMEM). */
FX_API fx_dataset *fx_dataset_synthetic(int64_t n, int channels, int height, int width,
                                        int classes, uint64_t seed);

/** @brief New dataset holding a copy of caller data.
 *
 *  Limits as for fx_dataset_synthetic(), except classes may be 1.
 *  @param[in] n        Number of images, >= 1.
 *  @param[in] channels Channels, 1..64.
 *  @param[in] height   Image height, 1..1024.
 *  @param[in] width    Image width, 1..1024.
 *  @param[in] classes  Classes, 1..1000.
 *  @param[in] images   n*channels*height*width finite floats (NCHW).
 *  @param[in] labels   n values in [0, classes).
 *  @return The dataset, which the caller owns and frees with fx_dataset_free(); NULL on
 *          failure: FX_EINVAL for NULL pointers, bad sizes, non-finite pixels or labels out of
 *          range; FX_ENOMEM. */
FX_API fx_dataset *fx_dataset_from_arrays(int64_t n, int channels, int height, int width,
                                          int classes, const float *images,
                                          const int32_t *labels);

/** @brief Largest context (tokens per sample) of a text dataset. */
#define FX_DATA_MAX_CONTEXT 1024
/** @brief Most files fx_dataset_text() reads from one folder. */
#define FX_DATA_MAX_TEXT_FILES 4096
/** @brief The folder of the Debian package `fortunes` (plain-text fortune files, each with a
 *  .dat index and a .u8 companion that fx_dataset_text() skips). */
#define FX_DATA_FORTUNES_DIR "/usr/share/games/fortunes"

/** @brief A character-level text corpus as a training and a held-out dataset.
 *
 *  `path` is a regular file (plain or gzip), or a folder whose regular files (not symbolic
 *  links, not names starting with '.', not names ending in .dat or .u8) are read in byte order
 *  of their names and concatenated, e.g. FX_DATA_FORTUNES_DIR. Files are opened as every
 *  loader opens them: a FIFO, device or folder named as a file is refused at once, never
 *  waited on; the text is at most FX_DATA_MAX_FILE_BYTES in all.
 *  Tokens are bytes: the vocabulary is the set of bytes that occur anywhere in the text, in
 *  byte order, and token t stands for byte fx_dataset_vocab()[t] (the same numbering in both
 *  datasets). The last floor(len * val_fraction) bytes are held out; each part is cut into
 *  non-overlapping windows of `context` tokens from its start: window i holds tokens
 *  [i T, i T + T) as its "image" (1 x 1 x T floats, the token numbers) and the next tokens
 *  [i T + 1, i T + T] as its targets (fx_dataset_targets()); its label is the last target.
 *  A part of L tokens gives (L - 1) / T windows. classes = the vocabulary's size. The trainer
 *  draws the training windows in its seeded order and neither normalises nor augments them.
 *  @param[in]  path         A file or a folder.
 *  @param[in]  context      Tokens per window, 1..FX_DATA_MAX_CONTEXT.
 *  @param[in]  val_fraction Share of the text held out, in [0, 0.5]; 0 for none.
 *  @param[out] train        Receives the training windows (caller frees with fx_dataset_free()).
 *  @param[out] val          Receives the held-out windows, or NULL when val_fraction is 0
 *                           (caller frees).
 *  @retval FX_OK
 *  @retval FX_EINVAL NULL arguments, context or val_fraction out of range.
 *  @retval FX_EIO a missing or unreadable file or folder, a file that is not a regular file,
 *          a gzip error (the message names the file).
 *  @retval FX_ECORRUPT an empty text or folder, a part shorter than one window and its next
 *          token, more than FX_DATA_MAX_FILE_BYTES bytes or FX_DATA_MAX_TEXT_FILES files.
 *  @retval FX_ENOMEM
 *  On failure *train and *val are NULL. */
FX_API int fx_dataset_text(const char *path, int context, double val_fraction,
                           fx_dataset **train, fx_dataset **val);

/** @brief Tokens per sample of a text dataset.
 *  @param[in] ds The dataset.
 *  @return The context T (> 0) of a text dataset, 0 for an image dataset; FX_EINVAL if ds is
 *          NULL. */
FX_API int fx_dataset_seq_len(const fx_dataset *ds);

/** @brief The next-token targets of a text dataset.
 *  @param[in] ds The dataset.
 *  @return len * T int32 tokens, sample-major, owned by the dataset; NULL for an image dataset
 *          or a NULL ds. */
FX_API const int32_t *fx_dataset_targets(const fx_dataset *ds);

/** @brief The vocabulary of a text dataset: token t is byte bytes[t].
 *  @param[in]  ds    The dataset.
 *  @param[out] bytes NULL, or 256 bytes receiving the vocabulary.
 *  @return Its size (1..256; 0 for an image dataset); FX_EINVAL if ds is NULL. */
FX_API int fx_dataset_vocab(const fx_dataset *ds, uint8_t *bytes);

/** @brief Gather the targets of a batch of a text dataset (the companion of
 *  fx_dataset_batch(), which gathers the tokens).
 *  @param[in]  ds      A text dataset.
 *  @param[in]  indices n sample indices, each in [0, len).
 *  @param[in]  n       Batch size, >= 0.
 *  @param[out] targets n * T int32: the targets of sample indices[i] at [i T, i T + T).
 *  @retval FX_OK
 *  @retval FX_EINVAL NULL ds, not a text dataset, n < 0, NULL indices/targets with n > 0.
 *  @retval FX_ERANGE an index outside [0, len) (checked before anything is written). */
FX_API int fx_dataset_batch_targets(const fx_dataset *ds, const int64_t *indices, int64_t n,
                                    int32_t *targets);

/** @brief Free a dataset.
 *  @param[in] ds The dataset; NULL is a no-op. */
FX_API void fx_dataset_free(fx_dataset *ds);

/* ------------------------------------------------------------------------------------------ */
/* Accessors. On NULL they return -1 (sizes) or NULL (pointers) and set the error message.     */
/* ------------------------------------------------------------------------------------------ */

/** @brief Number of images.
 *  @param[in] ds The dataset.
 *  @return The count (>= 1); -1 if ds is NULL. */
FX_API int64_t fx_dataset_len(const fx_dataset *ds);
/** @brief Channels per image.
 *  @param[in] ds The dataset.
 *  @return The count; -1 if ds is NULL. */
FX_API int fx_dataset_channels(const fx_dataset *ds);
/** @brief Image height in pixels.
 *  @param[in] ds The dataset.
 *  @return The height; -1 if ds is NULL. */
FX_API int fx_dataset_height(const fx_dataset *ds);
/** @brief Image width in pixels.
 *  @param[in] ds The dataset.
 *  @return The width; -1 if ds is NULL. */
FX_API int fx_dataset_width(const fx_dataset *ds);
/** @brief Number of classes.
 *  @param[in] ds The dataset.
 *  @return The count; -1 if ds is NULL. */
FX_API int fx_dataset_classes(const fx_dataset *ds);
/** @brief The images.
 *  @param[in] ds The dataset.
 *  @return len*channels*height*width floats, NCHW, owned by the dataset; NULL if ds is NULL. */
FX_API const float *fx_dataset_images(const fx_dataset *ds);
/** @brief The labels.
 *  @param[in] ds The dataset.
 *  @return len labels in [0, classes), owned by the dataset; NULL if ds is NULL. */
FX_API const int32_t *fx_dataset_labels(const fx_dataset *ds);
/** @brief Where the data came from, for logs.
 *  @param[in] ds The dataset.
 *  @return e.g. "fashion-mnist t10k (/usr/share/datasets/...)", "synthetic seed=1",
 *          "pad(2) of ...". Owned by the dataset; NULL if ds is NULL. */
FX_API const char *fx_dataset_source(const fx_dataset *ds);

/* ------------------------------------------------------------------------------------------ */
/* Batches, transforms, statistics                                                             */
/* ------------------------------------------------------------------------------------------ */

/** @brief Gather a batch of images and labels.
 *
 *  All indices are checked before anything is written. n == 0 is a no-op.
 *  @param[in]  ds      The dataset.
 *  @param[in]  indices n image indices, each in [0, len).
 *  @param[in]  n       Batch size, >= 0.
 *  @param[out] x       n*channels*height*width floats: images ds[indices[i]], i in [0, n).
 *  @param[out] y       n int32: their labels.
 *  @retval FX_OK
 *  @retval FX_EINVAL NULL ds, n < 0, or NULL indices/x/y with n > 0.
 *  @retval FX_ERANGE an index outside [0, len) (the message names the first bad position). */
FX_API int fx_dataset_batch(const fx_dataset *ds, const int64_t *indices, int64_t n, float *x,
                            int32_t *y);

/** @brief New dataset with zero pixels added on every side of every image (e.g. 28x28 ->
 *  32x32 with pad 2, for ResNet-20 on Fashion-MNIST). A text dataset is refused (FX_EINVAL).
 *  @param[in] ds  The dataset.
 *  @param[in] pad Pixels per side, 0..1024, with the padded size at most 1024.
 *  @return The new dataset, which the caller owns and frees with fx_dataset_free(); NULL on
 *          failure (FX_EINVAL for NULL ds or a bad pad, FX_ENOMEM). */
FX_API fx_dataset *fx_dataset_pad(const fx_dataset *ds, int pad);

/** @brief New dataset holding a copy of images [start, start+n) (of a text dataset: those
 *  windows, with their targets and the vocabulary).
 *  @param[in] ds    The dataset.
 *  @param[in] start First image, >= 0.
 *  @param[in] n     Number of images, >= 1, with start+n <= len.
 *  @return The new dataset, which the caller owns and frees with fx_dataset_free(); NULL on
 *          failure (FX_ERANGE for a bad range, FX_EINVAL for NULL, FX_ENOMEM). */
FX_API fx_dataset *fx_dataset_subset(const fx_dataset *ds, int64_t start, int64_t n);

/** @brief Per-channel mean and (population) standard deviation of the pixels, accumulated in
 *  double.
 *  @param[in]  ds   The dataset.
 *  @param[out] mean channels values.
 *  @param[out] std  channels values.
 *  @retval FX_OK
 *  @retval FX_EINVAL NULL arguments. */
FX_API int fx_dataset_channel_stats(const fx_dataset *ds, double *mean, double *std);

/** @brief Normalise the images in place: x = (x - mean[c]) / std[c] for every pixel of
 *  channel c. After this the pixels are no longer in [0, 1].
 *  @param[in,out] ds   The dataset.
 *  @param[in]     mean channels finite values.
 *  @param[in]     std  channels finite values, each > 0.
 *  @retval FX_OK
 *  @retval FX_EINVAL NULL arguments, a text dataset, or a value not finite or std <= 0 (nothing
 *          changed). */
FX_API int fx_dataset_normalize(fx_dataset *ds, const double *mean, const double *std);

/** @brief Number of images of each class.
 *  @param[in]  ds     The dataset.
 *  @param[out] counts classes values.
 *  @retval FX_OK
 *  @retval FX_EINVAL NULL arguments. */
FX_API int fx_dataset_class_counts(const fx_dataset *ds, int64_t *counts);

#ifdef __cplusplus
}
#endif

#endif
