/* IDX files (the MNIST / Fashion-MNIST format): a big-endian header of a 4-byte magic
 * (0, 0, type, ndim) and ndim 4-byte sizes, then the unsigned bytes. Everything is checked
 * against the buffer length before any byte of the payload is touched. */
#include "data_internal.h"
#include "../core/internal.h"

#include <inttypes.h>

static uint32_t load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* A hint for the most likely mix-ups, appended to a bad-magic message. */
static const char *magic_hint(uint32_t got, uint32_t want)
{
    if (got == FX_IDX_MAGIC_LABELS && want == FX_IDX_MAGIC_IMAGES) return " (a labels file?)";
    if (got == FX_IDX_MAGIC_IMAGES && want == FX_IDX_MAGIC_LABELS) return " (an images file?)";
    if ((got >> 16) == 0x1f8bu) return " (gzip data inside gzip?)";
    if ((got & 0xffff0000u) == 0 && ((got >> 8) & 0xffu) != 0x08u) return " (not unsigned bytes)";
    return "";
}

int fx_idx_parse(const uint8_t *buf, size_t len, uint32_t want_magic, fx_idx_view *out,
                 const char *func, const char *name)
{
    if (!name) name = "(buffer)";
    if ((!buf && len) || !out) return fx_error(FX_EINVAL, func, "%s: NULL buffer or output", name);
    if (want_magic != FX_IDX_MAGIC_IMAGES && want_magic != FX_IDX_MAGIC_LABELS)
        return fx_error(FX_EINVAL, func, "%s: unsupported IDX magic 0x%08" PRIX32, name,
                        want_magic);
    int ndim = (int)(want_magic & 0xffu);
    size_t header = 4 + 4 * (size_t)ndim;
    if (len == 0) return fx_error(FX_ECORRUPT, func, "%s: empty file", name);
    if (len < 4)
        return fx_error(FX_ECORRUPT, func, "%s: truncated header (%zu bytes, want %zu)", name, len,
                        header);
    uint32_t magic = load_be32(buf);
    if (magic != want_magic)
        return fx_error(FX_ECORRUPT, func, "%s: bad magic 0x%08" PRIX32 " (want 0x%08" PRIX32 ")%s",
                        name, magic, want_magic, magic_hint(magic, want_magic));
    if (len < header)
        return fx_error(FX_ECORRUPT, func, "%s: truncated header (%zu bytes, want %zu)", name, len,
                        header);

    fx_idx_view v = {.ndim = ndim, .item_bytes = 1};
    for (int d = 0; d < ndim; d++) v.dims[d] = load_be32(buf + 4 + 4 * (size_t)d);
    if (ndim == 3) {
        if (v.dims[1] < 1 || v.dims[1] > FX_IDX_MAX_SIDE || v.dims[2] < 1 ||
            v.dims[2] > FX_IDX_MAX_SIDE)
            return fx_error(FX_ECORRUPT, func,
                            "%s: bad image size %" PRIu32 " x %" PRIu32 " (want 1..%" PRIu32
                            " each)",
                            name, v.dims[1], v.dims[2], FX_IDX_MAX_SIDE);
        v.item_bytes = (uint64_t)v.dims[1] * v.dims[2];
    }
    /* dims[0] < 2^32 and item_bytes <= 2^20: the product fits in 64 bits. */
    uint64_t want_payload = (uint64_t)v.dims[0] * v.item_bytes;
    uint64_t payload = (uint64_t)(len - header);
    const char *what = ndim == 3 ? "images" : "labels";
    if (payload < want_payload)
        return fx_error(FX_ECORRUPT, func,
                        "%s: truncated: the header announces %" PRIu32 " %s (%" PRIu64
                        " data bytes) but the file has %" PRIu64 " data bytes",
                        name, v.dims[0], what, want_payload, payload);
    if (payload > want_payload)
        return fx_error(FX_ECORRUPT, func,
                        "%s: %" PRIu64 " trailing bytes after the %" PRIu32
                        " %s the header announces",
                        name, payload - want_payload, v.dims[0], what);
    v.data = buf + header;
    v.data_len = (size_t)want_payload;
    *out = v;
    return FX_OK;
}

int fx_mnist_from_buffers(const uint8_t *img, size_t img_len, const char *img_name,
                          const uint8_t *lab, size_t lab_len, const char *lab_name,
                          const char *func, fx_dataset **out)
{
    if (!out) return fx_error(FX_EINVAL, func, "NULL output");
    *out = NULL;
    if (!img_name) img_name = "(images buffer)";
    if (!lab_name) lab_name = "(labels buffer)";
    fx_idx_view iv = {0}, lv = {0};
    int rc = fx_idx_parse(img, img_len, FX_IDX_MAGIC_IMAGES, &iv, func, img_name);
    if (rc != FX_OK) return rc;
    rc = fx_idx_parse(lab, lab_len, FX_IDX_MAGIC_LABELS, &lv, func, lab_name);
    if (rc != FX_OK) return rc;
    if (iv.dims[0] != lv.dims[0])
        return fx_error(FX_ECORRUPT, func,
                        "%s has %" PRIu32 " images but %s has %" PRIu32 " labels", img_name,
                        iv.dims[0], lab_name, lv.dims[0]);
    if (iv.dims[0] == 0) return fx_error(FX_ECORRUPT, func, "%s: no images", img_name);
    for (size_t i = 0; i < lv.data_len; i++)
        if (lv.data[i] >= FX_DATA_CLASSES)
            return fx_error(FX_ECORRUPT, func,
                            "%s: label %u at index %zu is out of range (want 0..%d)", lab_name,
                            (unsigned)lv.data[i], i, FX_DATA_CLASSES - 1);

    fx_dataset *ds = fx_ds_alloc(func, (int64_t)iv.dims[0], 1, (int)iv.dims[1], (int)iv.dims[2],
                                 FX_DATA_CLASSES);
    if (!ds) return FX_ENOMEM; /* the shape is valid here, so only the allocation can fail */
    fx_bytes_to_unit(ds->images, iv.data, iv.data_len);
    for (size_t i = 0; i < lv.data_len; i++) ds->labels[i] = lv.data[i];
    fx_ds_set_source(ds, "idx %s + %s", img_name, lab_name);
    *out = ds;
    return FX_OK;
}
