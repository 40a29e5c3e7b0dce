/* CIFAR-10 binary batches: records of one label byte and 3x32x32 planar RGB bytes, which is
 * already the NCHW order the dataset stores, so a record converts in one pass. */
#include "data_internal.h"
#include "../core/internal.h"

int fx_cifar_from_buffers(const uint8_t *const *bufs, const size_t *lens,
                          const char *const *names, int nbufs, const char *func,
                          fx_dataset **out)
{
    if (!out) return fx_error(FX_EINVAL, func, "NULL output");
    *out = NULL;
    if (!bufs || !lens || nbufs < 1 || nbufs > FX_CIFAR_MAX_FILES)
        return fx_error(FX_EINVAL, func, "%d batch buffers (want 1..%d, non-NULL)", nbufs,
                        FX_CIFAR_MAX_FILES);
    int64_t total = 0;
    for (int f = 0; f < nbufs; f++) {
        const char *name = names && names[f] ? names[f] : "(buffer)";
        size_t len = lens[f];
        if (len == 0) return fx_error(FX_ECORRUPT, func, "%s: empty file", name);
        if (!bufs[f]) return fx_error(FX_EINVAL, func, "%s: NULL buffer", name);
        if (len % FX_CIFAR_RECORD != 0)
            return fx_error(FX_ECORRUPT, func,
                            "%s: size %zu is not a multiple of the %d-byte record (%zu records "
                            "and %zu extra bytes: truncated or not CIFAR-10?)",
                            name, len, FX_CIFAR_RECORD, len / FX_CIFAR_RECORD,
                            len % FX_CIFAR_RECORD);
        size_t records = len / FX_CIFAR_RECORD;
        for (size_t r = 0; r < records; r++) {
            uint8_t label = bufs[f][r * FX_CIFAR_RECORD];
            if (label >= FX_DATA_CLASSES)
                return fx_error(FX_ECORRUPT, func,
                                "%s: label %u in record %zu (byte offset %zu) is out of range "
                                "(want 0..%d)",
                                name, (unsigned)label, r, r * FX_CIFAR_RECORD,
                                FX_DATA_CLASSES - 1);
        }
        total += (int64_t)records; /* each file is in memory, so the sum cannot overflow */
    }

    fx_dataset *ds = fx_ds_alloc(func, total, 3, FX_CIFAR_SIDE, FX_CIFAR_SIDE, FX_DATA_CLASSES);
    if (!ds) return FX_ENOMEM; /* the shape is valid here, so only the allocation can fail */
    int64_t i = 0;
    for (int f = 0; f < nbufs; f++) {
        size_t records = lens[f] / FX_CIFAR_RECORD;
        for (size_t r = 0; r < records; r++, i++) {
            const uint8_t *rec = bufs[f] + r * FX_CIFAR_RECORD;
            ds->labels[i] = rec[0];
            fx_bytes_to_unit(ds->images + i * FX_CIFAR_PIXELS, rec + 1, FX_CIFAR_PIXELS);
        }
    }
    fx_ds_set_source(ds, "cifar10 (%d batch file%s)", nbufs, nbufs == 1 ? "" : "s");
    *out = ds;
    return FX_OK;
}
