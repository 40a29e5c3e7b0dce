/* The per-write trace buffer of shared-exponent storages (docs/autoflex.md, "What to expose").
 * Reading it through a tensor and writing it as CSV are the core's (src/core/trace_io.c). */
#include "trace.h"

#include <stdint.h>
#include <stdlib.h>

int fx_trace_append(fx_trace *tr, const fx_trace_record *rec)
{
    if (!tr->enabled) return FX_OK;
    if (tr->len == tr->cap) {
        int64_t cap = tr->cap > 0 ? tr->cap * 2 : 64;
        if (cap <= tr->cap || (uint64_t)cap > SIZE_MAX / sizeof(fx_trace_record))
            return FX_ENOMEM;
        fx_trace_record *grown = realloc(tr->rec, (size_t)cap * sizeof(fx_trace_record));
        if (!grown) return FX_ENOMEM;
        tr->rec = grown;
        tr->cap = cap;
    }
    tr->rec[tr->len++] = *rec;
    return FX_OK;
}

void fx_trace_free(fx_trace *tr)
{
    free(tr->rec);
    tr->rec = NULL;
    tr->len = tr->cap = 0;
    tr->enabled = 0;
}
