/* Serialising a tensor's complete state (data, exponent, window, rounding, Autoflex history,
 * counters) into a growable byte buffer, for checkpoints that resume bit for bit. */
#ifndef FX_CORE_TENSOR_IO_H
#define FX_CORE_TENSOR_IO_H

#include "internal.h"

typedef struct fx_buf {
    uint8_t *data;
    size_t len, cap;
    int failed; /* set when an allocation failed; later appends are ignored */
} fx_buf;

FX_INTERNAL void fx_buf_put(fx_buf *b, const void *p, size_t n);
FX_INTERNAL void fx_buf_free(fx_buf *b);

typedef struct fx_reader {
    const uint8_t *p;
    size_t left;
    int failed; /* set when a read ran past the end */
} fx_reader;

FX_INTERNAL void fx_reader_get(fx_reader *r, void *p, size_t n); /* zero-fills and sets failed on underrun */

/* Append the state of t's storage (t must cover its whole storage). */
FX_INTERNAL int fx_tensor_state_put(fx_buf *b, const tensor_t *t);
/* Restore into t, whose format and shape must match the serialised ones (FX_ECORRUPT with a
 * message naming `what` otherwise). t is unchanged on failure. */
FX_INTERNAL int fx_tensor_state_get(fx_reader *r, tensor_t *t, const char *what);

/* CRC-32 of a buffer, the value zlib's crc32(0, p, n) gives (checkpoints, weights files). */
FX_INTERNAL uint32_t fx_crc32(const uint8_t *p, size_t n);

#endif
