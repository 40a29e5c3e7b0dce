/* Tensor state serialisation for checkpoints. The layout is little-endian host order with
 * fixed-size fields; checkpoints carry a version so the layout can evolve. */
#include "tensor_io.h"

#include <stdlib.h>
#include <string.h>

void fx_buf_put(fx_buf *b, const void *p, size_t n)
{
    if (b->failed) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d) {
            b->failed = 1;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void fx_buf_free(fx_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

void fx_reader_get(fx_reader *r, void *p, size_t n)
{
    if (r->failed || n > r->left) {
        r->failed = 1;
        memset(p, 0, n);
        return;
    }
    memcpy(p, r->p, n);
    r->p += n;
    r->left -= n;
}

/* The CRC-32 of zlib's crc32() and of gzip/PNG (reflected polynomial 0xEDB88320, initial and
 * final value 0xFFFFFFFF), computed here so that the tensor library needs no zlib: only the
 * training library reads gzip'd files. A byte at a time with a 256-entry table built on the
 * stack (2 KiB of work, nothing shared between threads); checkpoints and weights files are a
 * few megabytes, read or written once. tests/test_crc32.c compares it with zlib. */
uint32_t fx_crc32(const uint8_t *p, size_t n)
{
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

typedef struct fx_tensor_header {
    int32_t fmt, ndim;
    int64_t shape[FX_MAX_DIMS];
    int64_t numel;
} fx_tensor_header;

int fx_tensor_state_put(fx_buf *b, const tensor_t *t)
{
    int rc = fx_need_host(t, "the tensor", FX_EINVAL,
                          "copy it to the host (tensor_to_host, flexpoint_gpu.h) to save it",
                          __func__);
    if (rc) return rc;
    if (!fx_tensor_covers_storage(t))
        return FX_FAIL(FX_EINVAL, "only whole tensors can be saved");
    if ((rc = fx_storage_settle(t->st, __func__))) return rc;
    const fx_storage *st = t->st;
    fx_tensor_header h;
    memset(&h, 0, sizeof h);
    h.fmt = t->fmt;
    h.ndim = t->ndim;
    memcpy(h.shape, t->shape, sizeof h.shape);
    h.numel = st->numel;
    fx_buf_put(b, &h, sizeof h);
    fx_buf_put(b, st->data, (size_t)st->numel * fmt_elem_size(t->fmt));
    if (fmt_is_shared_exponent(t->fmt)) {
        int32_t ints[4] = {st->exp, st->win_lo, st->win_hi, st->rounding};
        fx_buf_put(b, ints, sizeof ints);
        fx_buf_put(b, &st->seed, sizeof st->seed);
        fx_buf_put(b, &st->write_counter, sizeof st->write_counter);
        fx_buf_put(b, &st->af, sizeof st->af);
        fx_buf_put(b, &st->last, sizeof st->last);
        int64_t counts[4] = {st->writes, st->overflows, st->clamped_total, st->nonfinite_total};
        fx_buf_put(b, counts, sizeof counts);
    }
    return b->failed ? FX_FAIL(FX_ENOMEM, "out of memory while serialising") : FX_OK;
}

int fx_tensor_state_get(fx_reader *r, tensor_t *t, const char *what)
{
    int rc = fx_need_host(t, what, FX_EINVAL,
                          "restore into a host tensor, then copy it (tensor_copy_to_device)",
                          __func__);
    if (rc) return rc;
    if (!fx_tensor_covers_storage(t))
        return FX_FAIL(FX_EINVAL, "%s: only whole tensors can be restored", what);
    /* the restored state replaces the current one, which must be complete (its trace stays) */
    if ((rc = fx_storage_settle(t->st, __func__))) return rc;
    fx_tensor_header h;
    fx_reader_get(r, &h, sizeof h);
    if (r->failed) return FX_FAIL(FX_ECORRUPT, "%s: truncated tensor header", what);
    bool same = h.fmt == (int32_t)t->fmt && h.ndim == t->ndim && h.numel == t->st->numel;
    for (int d = 0; same && d < t->ndim; d++) same = h.shape[d] == t->shape[d];
    if (!same)
        return FX_FAIL(FX_ECORRUPT, "%s: saved tensor (format %d, %d-D, %lld elements) does not "
                       "match (format %s, %d-D, %lld elements)", what, h.fmt, h.ndim,
                       (long long)h.numel, fmt_name(t->fmt), t->ndim, (long long)t->st->numel);
    size_t bytes = (size_t)h.numel * fmt_elem_size(t->fmt);
    if (bytes > r->left) return FX_FAIL(FX_ECORRUPT, "%s: truncated tensor data", what);
    const uint8_t *data = r->p;
    r->p += bytes;
    r->left -= bytes;
    fx_storage tmp = *t->st;
    if (fmt_is_shared_exponent(t->fmt)) {
        int32_t ints[4];
        int64_t counts[4];
        fx_reader_get(r, ints, sizeof ints);
        fx_reader_get(r, &tmp.seed, sizeof tmp.seed);
        fx_reader_get(r, &tmp.write_counter, sizeof tmp.write_counter);
        fx_reader_get(r, &tmp.af, sizeof tmp.af);
        fx_reader_get(r, &tmp.last, sizeof tmp.last);
        fx_reader_get(r, counts, sizeof counts);
        if (r->failed) return FX_FAIL(FX_ECORRUPT, "%s: truncated exponent state", what);
        if (ints[1] < FX_DFP_EXP_MIN || ints[2] > FX_DFP_EXP_MAX || ints[0] < ints[1] ||
            ints[0] > ints[2] || (ints[3] != 0 && ints[3] != 1) ||
            tmp.af.hist_n < 0 || tmp.af.hist_n > FX_AF_MAX_HISTORY || tmp.af.hist_pos < 0 ||
            tmp.af.hist_pos >= FX_AF_MAX_HISTORY)
            return FX_FAIL(FX_ECORRUPT, "%s: exponent state out of range (exp %d, window [%d, %d])",
                           what, ints[0], ints[1], ints[2]);
        if (t->fmt == FMT_FLEX16_5 && fx_af_config_validate(&tmp.af.cfg) != FX_OK)
            return FX_FAIL(FX_ECORRUPT, "%s: invalid Autoflex configuration", what);
        const int16_t *m = (const int16_t *)data;
        for (int64_t i = 0; i < h.numel; i++) {
            int16_t v;
            memcpy(&v, m + i, sizeof v);
            if (v < -FX_MANT_MAX)
                return FX_FAIL(FX_ECORRUPT, "%s: mantissa -32768 at %lld", what, (long long)i);
        }
        tmp.exp = ints[0];
        tmp.win_lo = ints[1];
        tmp.win_hi = ints[2];
        tmp.rounding = ints[3];
        tmp.writes = counts[0];
        tmp.overflows = counts[1];
        tmp.clamped_total = counts[2];
        tmp.nonfinite_total = counts[3];
    }
    /* everything validated: commit */
    memcpy(t->st->data, data, bytes);
    fx_trace saved_trace = t->st->trace;
    int refs = t->st->refcount;
    *t->st = tmp;
    t->st->trace = saved_trace;
    t->st->refcount = refs;
    return FX_OK;
}
