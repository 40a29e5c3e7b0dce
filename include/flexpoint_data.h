/*
 * flexpoint data sets: Fashion-MNIST (IDX, gzip or plain), CIFAR-10 (binary batches) and seeded
 * synthetic images, held in memory as float NCHW images and int32 labels.
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

typedef struct fx_dataset fx_dataset;

/** Number of classes of Fashion-MNIST and CIFAR-10. */
#define FX_DATA_CLASSES 10
/** Largest file a loader reads, after decompression (guards against gzip bombs): 1 GiB. */
#define FX_DATA_MAX_FILE_BYTES ((int64_t)1 << 30)

/* ------------------------------------------------------------------------------------------ */
/* Loaders                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/** Fashion-MNIST (or MNIST, same layout) from a directory of IDX files.
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
 *  Result: n x 1 x rows x cols images, classes = 10. NULL on failure (see above). */
FX_API fx_dataset *fx_dataset_fashion_mnist(const char *dir, int train);

/** CIFAR-10 binary version from a directory.
 *  `dir`: NULL or "" means FLEXPOINT_CIFAR10_DIR if set and non-empty, else
 *  "cifar-10-batches-bin" (relative to the working directory, the name the archive unpacks to).
 *  `train` != 0 reads data_batch_1.bin .. data_batch_5.bin in that order, 0 reads test_batch.bin.
 *  Each file is a sequence of 3073-byte records: one label byte (< 10), then 1024 red, 1024
 *  green and 1024 blue bytes (32x32, row-major). A missing batch fails with FX_EIO naming it; an
 *  empty file, a size that is not a multiple of 3073 or a label >= 10 fail with FX_ECORRUPT.
 *  Result: n x 3 x 32 x 32 images, classes = 10. NULL on failure. */
FX_API fx_dataset *fx_dataset_cifar10(const char *dir, int train);

/** Seeded synthetic, learnable images: every class has a fixed smooth random template per
 *  channel (half of it shared by all classes, so classes overlap); an image is its class's
 *  template, circularly shifted by up to height/4 and width/4 pixels, with a random contrast and
 *  brightness and per-pixel noise (sigma 0.2), clamped to [0, 1]. A nearest-class-mean
 *  classifier reaches only 35-45% on 3x32x32 with 10 classes; a CNN can do far better. Labels
 *  are balanced (i % classes, then shuffled). The result depends only on the arguments: the
 *  same arguments give the same bytes (no libm calls, no threads; the same on other machines
 *  unless a compiler fuses multiply-adds into FMA).
 *  Limits: n >= 1, channels 1..64, height and width 1..1024, classes 2..1000, and n*c*h*w must
 *  fit in memory (FX_EINVAL for bad values, FX_ENOMEM when too large). The usual CIFAR-shaped
 *  call is fx_dataset_synthetic(n, 3, 32, 32, 10, seed). NULL on failure. */
FX_API fx_dataset *fx_dataset_synthetic(int64_t n, int channels, int height, int width,
                                        int classes, uint64_t seed);

/** New dataset holding a copy of caller data: `images` has n*channels*height*width finite
 *  floats (NCHW), `labels` n values in [0, classes). Limits as for fx_dataset_synthetic, except
 *  classes may be 1. FX_EINVAL for NULL pointers, bad sizes, non-finite pixels or labels out of
 *  range; NULL on failure. */
FX_API fx_dataset *fx_dataset_from_arrays(int64_t n, int channels, int height, int width,
                                          int classes, const float *images,
                                          const int32_t *labels);

/** Free a dataset. NULL is a no-op. */
FX_API void fx_dataset_free(fx_dataset *ds);

/* ------------------------------------------------------------------------------------------ */
/* Accessors. On NULL they return -1 (sizes) or NULL (pointers) and set the error message.     */
/* ------------------------------------------------------------------------------------------ */

/** Number of images (>= 1). */
FX_API int64_t fx_dataset_len(const fx_dataset *ds);
FX_API int fx_dataset_channels(const fx_dataset *ds);
FX_API int fx_dataset_height(const fx_dataset *ds);
FX_API int fx_dataset_width(const fx_dataset *ds);
FX_API int fx_dataset_classes(const fx_dataset *ds);
/** len*channels*height*width floats, NCHW. Owned by the dataset. */
FX_API const float *fx_dataset_images(const fx_dataset *ds);
/** len labels in [0, classes). Owned by the dataset. */
FX_API const int32_t *fx_dataset_labels(const fx_dataset *ds);
/** Where the data came from, for logs: e.g. "fashion-mnist t10k (/usr/share/datasets/...)",
 *  "synthetic seed=1", "pad(2) of ...". Owned by the dataset. */
FX_API const char *fx_dataset_source(const fx_dataset *ds);

/* ------------------------------------------------------------------------------------------ */
/* Batches, transforms, statistics                                                             */
/* ------------------------------------------------------------------------------------------ */

/** Gather images ds[indices[i]] into x (n*channels*height*width floats) and their labels into
 *  y (n int32), for i in [0, n). Every index must be in [0, len) (FX_ERANGE otherwise, naming
 *  the first bad position); all are checked before anything is written. n == 0 is a no-op.
 *  FX_EINVAL for NULL ds, n < 0, or NULL indices/x/y with n > 0. */
FX_API int fx_dataset_batch(const fx_dataset *ds, const int64_t *indices, int64_t n, float *x,
                            int32_t *y);

/** New dataset with `pad` zero pixels added on every side of every image (e.g. 28x28 -> 32x32
 *  with pad 2, for ResNet-20 on Fashion-MNIST). pad in 0..1024 and the padded size at most 1024
 *  (FX_EINVAL otherwise). The caller frees the result. */
FX_API fx_dataset *fx_dataset_pad(const fx_dataset *ds, int pad);

/** New dataset holding a copy of images [start, start+n). n >= 1, start >= 0, start+n <= len
 *  (FX_ERANGE otherwise; FX_EINVAL for NULL). The caller frees the result. */
FX_API fx_dataset *fx_dataset_subset(const fx_dataset *ds, int64_t start, int64_t n);

/** Per-channel mean and (population) standard deviation of the pixels, accumulated in double,
 *  written to mean[channels] and std[channels]. FX_EINVAL for NULL arguments. */
FX_API int fx_dataset_channel_stats(const fx_dataset *ds, double *mean, double *std);

/** Normalise the images in place: x = (x - mean[c]) / std[c] for every pixel of channel c.
 *  mean[] and std[] have `channels` entries; each must be finite and each std > 0 (FX_EINVAL
 *  otherwise, nothing changed). After this the pixels are no longer in [0, 1]. */
FX_API int fx_dataset_normalize(fx_dataset *ds, const double *mean, const double *std);

/** Number of images of each class, written to counts[classes]. FX_EINVAL for NULL arguments. */
FX_API int fx_dataset_class_counts(const fx_dataset *ds, int64_t *counts);

#ifdef __cplusplus
}
#endif

#endif
