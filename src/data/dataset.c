/* The dataset object: allocation, accessors, batches and the copying transforms. */
#include "data_internal.h"
#include "../core/internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U(b) ((float)(b) / 255.0f)
#define U4(b) U(b), U(b + 1), U(b + 2), U(b + 3)
#define U16(b) U4(b), U4(b + 4), U4(b + 8), U4(b + 12)
const float fx_byte_to_unit[256] = {
    U16(0),   U16(16),  U16(32),  U16(48),  U16(64),  U16(80),  U16(96),  U16(112),
    U16(128), U16(144), U16(160), U16(176), U16(192), U16(208), U16(224), U16(240),
};
#undef U16
#undef U4
#undef U

void fx_bytes_to_unit(float *dst, const uint8_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = fx_byte_to_unit[src[i]];
}

static int check_shape(const char *func, int64_t n, int c, int h, int w, int classes,
                       int min_classes)
{
    if (n < 1) return fx_error(FX_EINVAL, func, "n = %lld (want >= 1)", (long long)n);
    if (c < 1 || c > FX_DATA_MAX_CHANNELS)
        return fx_error(FX_EINVAL, func, "channels = %d (want 1..%d)", c, FX_DATA_MAX_CHANNELS);
    if (h < 1 || h > FX_DATA_MAX_SIDE || w < 1 || w > FX_DATA_MAX_SIDE)
        return fx_error(FX_EINVAL, func, "image size %d x %d (want 1..%d each)", h, w,
                        FX_DATA_MAX_SIDE);
    if (classes < min_classes || classes > FX_DATA_MAX_CLASSES)
        return fx_error(FX_EINVAL, func, "classes = %d (want %d..%d)", classes, min_classes,
                        FX_DATA_MAX_CLASSES);
    return FX_OK;
}

fx_dataset *fx_ds_alloc(const char *func, int64_t n, int c, int h, int w, int classes)
{
    if (check_shape(func, n, c, h, w, classes, 1) != FX_OK) return NULL;
    int64_t chw = (int64_t)c * h * w; /* <= 64 * 1024 * 1024 */
    if (n > INT64_MAX / chw || (uint64_t)(n * chw) > SIZE_MAX / sizeof(float) ||
        (uint64_t)n > SIZE_MAX / sizeof(int32_t)) {
        fx_error(FX_ENOMEM, func, "%lld images of %d x %d x %d floats do not fit in memory",
                 (long long)n, c, h, w);
        return NULL;
    }
    fx_dataset *ds = calloc(1, sizeof *ds);
    if (ds) {
        ds->images = malloc((size_t)(n * chw) * sizeof(float));
        ds->labels = malloc((size_t)n * sizeof(int32_t));
    }
    if (!ds || !ds->images || !ds->labels) {
        fx_dataset_free(ds);
        fx_error(FX_ENOMEM, func, "cannot allocate %lld images of %d x %d x %d floats",
                 (long long)n, c, h, w);
        return NULL;
    }
    ds->n = n;
    ds->c = c;
    ds->h = h;
    ds->w = w;
    ds->classes = classes;
    return ds;
}

int64_t fx_ds_image_size(const fx_dataset *ds) { return (int64_t)ds->c * ds->h * ds->w; }

void fx_ds_set_source(fx_dataset *ds, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ds->source, sizeof ds->source, fmt, ap);
    va_end(ap);
}

void fx_dataset_free(fx_dataset *ds)
{
    if (!ds) return;
    free(ds->images);
    free(ds->labels);
    free(ds->targets);
    free(ds);
}

fx_dataset *fx_dataset_from_arrays(int64_t n, int channels, int height, int width, int classes,
                                   const float *images, const int32_t *labels)
{
    if (!images || !labels) {
        FX_FAIL(FX_EINVAL, "images or labels is NULL");
        return NULL;
    }
    if (check_shape(__func__, n, channels, height, width, classes, 1) != FX_OK) return NULL;
    int64_t chw = (int64_t)channels * height * width;
    for (int64_t i = 0; i < n; i++) {
        if (labels[i] < 0 || labels[i] >= classes) {
            FX_FAIL(FX_EINVAL, "labels[%lld] = %d is out of range (want 0..%d)", (long long)i,
                    (int)labels[i], classes - 1);
            return NULL;
        }
    }
    fx_dataset *ds = fx_ds_alloc(__func__, n, channels, height, width, classes);
    if (!ds) return NULL;
    for (int64_t i = 0; i < n * chw; i++) {
        if (!isfinite(images[i])) {
            fx_dataset_free(ds);
            FX_FAIL(FX_EINVAL, "images[%lld] is not finite", (long long)i);
            return NULL;
        }
    }
    memcpy(ds->images, images, (size_t)(n * chw) * sizeof(float));
    memcpy(ds->labels, labels, (size_t)n * sizeof(int32_t));
    fx_ds_set_source(ds, "arrays");
    return ds;
}

/* ---- Accessors ---------------------------------------------------------------------------- */

#define NULL_DS(ret)                                                                           \
    do {                                                                                       \
        if (!ds) {                                                                             \
            FX_FAIL(FX_EINVAL, "ds is NULL");                                                  \
            return ret;                                                                        \
        }                                                                                      \
    } while (0)

int64_t fx_dataset_len(const fx_dataset *ds)
{
    NULL_DS(-1);
    return ds->n;
}
int fx_dataset_channels(const fx_dataset *ds)
{
    NULL_DS(-1);
    return ds->c;
}
int fx_dataset_height(const fx_dataset *ds)
{
    NULL_DS(-1);
    return ds->h;
}
int fx_dataset_width(const fx_dataset *ds)
{
    NULL_DS(-1);
    return ds->w;
}
int fx_dataset_classes(const fx_dataset *ds)
{
    NULL_DS(-1);
    return ds->classes;
}
const float *fx_dataset_images(const fx_dataset *ds)
{
    NULL_DS(NULL);
    return ds->images;
}
const int32_t *fx_dataset_labels(const fx_dataset *ds)
{
    NULL_DS(NULL);
    return ds->labels;
}
const char *fx_dataset_source(const fx_dataset *ds)
{
    NULL_DS(NULL);
    return ds->source;
}

/* ---- Batches and transforms --------------------------------------------------------------- */

int fx_dataset_batch(const fx_dataset *ds, const int64_t *indices, int64_t n, float *x,
                     int32_t *y)
{
    if (!ds) return FX_FAIL(FX_EINVAL, "ds is NULL");
    if (n < 0) return FX_FAIL(FX_EINVAL, "n = %lld (want >= 0)", (long long)n);
    if (n == 0) return FX_OK;
    if (!indices || !x || !y) return FX_FAIL(FX_EINVAL, "indices, x or y is NULL");
    /* Validate everything first: on failure the outputs stay untouched. */
    for (int64_t i = 0; i < n; i++)
        if (indices[i] < 0 || indices[i] >= ds->n)
            return FX_FAIL(FX_ERANGE, "indices[%lld] = %lld is out of range (dataset has %lld)",
                           (long long)i, (long long)indices[i], (long long)ds->n);
    int64_t chw = fx_ds_image_size(ds);
    for (int64_t i = 0; i < n; i++) {
        memcpy(x + i * chw, ds->images + indices[i] * chw, (size_t)chw * sizeof(float));
        y[i] = ds->labels[indices[i]];
    }
    return FX_OK;
}

fx_dataset *fx_dataset_pad(const fx_dataset *ds, int pad)
{
    NULL_DS(NULL);
    if (ds->seq > 0) {
        FX_FAIL(FX_EINVAL, "%s is a text dataset: its samples are tokens, not images to pad",
                ds->source);
        return NULL;
    }
    if (pad < 0 || pad > FX_DATA_MAX_SIDE || ds->h + 2 * pad > FX_DATA_MAX_SIDE ||
        ds->w + 2 * pad > FX_DATA_MAX_SIDE) {
        FX_FAIL(FX_EINVAL, "pad = %d on %d x %d images (want pad >= 0 and sides <= %d)", pad,
                ds->h, ds->w, FX_DATA_MAX_SIDE);
        return NULL;
    }
    int h2 = ds->h + 2 * pad, w2 = ds->w + 2 * pad;
    fx_dataset *out = fx_ds_alloc(__func__, ds->n, ds->c, h2, w2, ds->classes);
    if (!out) return NULL;
    memset(out->images, 0, (size_t)(ds->n * fx_ds_image_size(out)) * sizeof(float));
    for (int64_t p = 0; p < ds->n * ds->c; p++) { /* every (image, channel) plane */
        const float *src = ds->images + p * ds->h * ds->w;
        float *dst = out->images + p * h2 * w2 + (int64_t)pad * w2 + pad;
        for (int r = 0; r < ds->h; r++)
            memcpy(dst + (int64_t)r * w2, src + (int64_t)r * ds->w, (size_t)ds->w * sizeof(float));
    }
    memcpy(out->labels, ds->labels, (size_t)ds->n * sizeof(int32_t));
    fx_ds_set_source(out, "pad(%d) of %s", pad, ds->source);
    return out;
}

fx_dataset *fx_dataset_subset(const fx_dataset *ds, int64_t start, int64_t n)
{
    NULL_DS(NULL);
    if (start < 0 || n < 1 || start > ds->n || n > ds->n - start) {
        FX_FAIL(FX_ERANGE, "[%lld, %lld + %lld) is not a non-empty range of the %lld images",
                (long long)start, (long long)start, (long long)n, (long long)ds->n);
        return NULL;
    }
    fx_dataset *out = fx_ds_alloc(__func__, n, ds->c, ds->h, ds->w, ds->classes);
    if (!out) return NULL;
    int64_t chw = fx_ds_image_size(ds);
    memcpy(out->images, ds->images + start * chw, (size_t)(n * chw) * sizeof(float));
    memcpy(out->labels, ds->labels + start, (size_t)n * sizeof(int32_t));
    if (ds->seq > 0 && fx_ds_text_attach(out, ds->seq, ds->targets + start * ds->seq, ds->vocab,
                                         ds->nvocab, __func__) != FX_OK) {
        fx_dataset_free(out);
        return NULL;
    }
    fx_ds_set_source(out, "subset[%lld:%lld] of %s", (long long)start, (long long)(start + n),
                     ds->source);
    return out;
}

/* ---- Statistics --------------------------------------------------------------------------- */

int fx_dataset_channel_stats(const fx_dataset *ds, double *mean, double *std)
{
    if (!ds || !mean || !std) return FX_FAIL(FX_EINVAL, "ds, mean or std is NULL");
    int64_t hw = (int64_t)ds->h * ds->w;
    double count = (double)ds->n * (double)hw;
    for (int ch = 0; ch < ds->c; ch++) {
        /* Two passes (mean, then squared deviations) to avoid cancellation. */
        double s = 0.0;
        for (int64_t i = 0; i < ds->n; i++) {
            const float *p = ds->images + (i * ds->c + ch) * hw;
            for (int64_t k = 0; k < hw; k++) s += p[k];
        }
        double m = s / count, q = 0.0;
        for (int64_t i = 0; i < ds->n; i++) {
            const float *p = ds->images + (i * ds->c + ch) * hw;
            for (int64_t k = 0; k < hw; k++) q += (p[k] - m) * (p[k] - m);
        }
        mean[ch] = m;
        std[ch] = sqrt(q / count);
    }
    return FX_OK;
}

int fx_dataset_normalize(fx_dataset *ds, const double *mean, const double *std)
{
    if (!ds || !mean || !std) return FX_FAIL(FX_EINVAL, "ds, mean or std is NULL");
    if (ds->seq > 0)
        return FX_FAIL(FX_EINVAL, "%s is a text dataset: its token numbers are not normalised",
                       ds->source);
    for (int ch = 0; ch < ds->c; ch++)
        if (!isfinite(mean[ch]) || !isfinite(std[ch]) || !(std[ch] > 0.0))
            return FX_FAIL(FX_EINVAL, "channel %d: mean %g, std %g (want finite, std > 0)", ch,
                           mean[ch], std[ch]);
    int64_t hw = (int64_t)ds->h * ds->w;
    for (int64_t i = 0; i < ds->n; i++)
        for (int ch = 0; ch < ds->c; ch++) {
            float *p = ds->images + (i * ds->c + ch) * hw;
            for (int64_t k = 0; k < hw; k++) p[k] = (float)((p[k] - mean[ch]) / std[ch]);
        }
    return FX_OK;
}

int fx_dataset_class_counts(const fx_dataset *ds, int64_t *counts)
{
    if (!ds || !counts) return FX_FAIL(FX_EINVAL, "ds or counts is NULL");
    memset(counts, 0, (size_t)ds->classes * sizeof *counts);
    for (int64_t i = 0; i < ds->n; i++) counts[ds->labels[i]]++;
    return FX_OK;
}
