/* Per-storage write trace of shared-exponent tensors (the public side is tensor_trace_* in
 * flexpoint.h). The core's write path appends one record per write; the storage frees it. */
#ifndef FX_AUTOFLEX_TRACE_H
#define FX_AUTOFLEX_TRACE_H

#include "../core/internal.h"

/* Append a copy of *rec while tr->enabled (a no-op returning FX_OK while disabled, so the write
 * path may call it unconditionally). rec->write is stored as given: the caller numbers writes.
 * Grows geometrically; FX_ENOMEM (message set) if memory runs out, keeping the records so far. */
int fx_trace_append(fx_trace *tr, const fx_trace_record *rec);

/* Release the records and disable the trace (the struct is left empty and reusable). */
void fx_trace_free(fx_trace *tr);

#endif
