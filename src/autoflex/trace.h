/* Per-storage write trace of shared-exponent tensors: an in-memory buffer of fx_trace_record
 * (the public side is tensor_trace_* in flexpoint.h, src/core/trace_io.c). The core's write
 * path appends one record per write; the storage frees it. Plain data: no core types, no
 * files, no error messages (docs/architecture.md, "Layers"). */
#ifndef FX_AUTOFLEX_TRACE_H
#define FX_AUTOFLEX_TRACE_H

#include "flexpoint.h"

#include <stdint.h>

typedef struct fx_trace {
    int enabled;
    int64_t len, cap;
    fx_trace_record *rec;
} fx_trace;

/* Append a copy of *rec while tr->enabled (a no-op returning FX_OK while disabled, so the write
 * path may call it unconditionally). rec->write is stored as given: the caller numbers writes.
 * Grows geometrically; FX_ENOMEM if memory (or the size arithmetic) runs out, keeping the
 * records so far and setting no message: the caller decides what a dropped record means. */
int fx_trace_append(fx_trace *tr, const fx_trace_record *rec);

/* Release the records and disable the trace (the struct is left empty and reusable). */
void fx_trace_free(fx_trace *tr);

#endif
