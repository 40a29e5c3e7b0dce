/* A prefetch at an offset from a pointer, for loops that read or write many short streams at
 * once (the GEMM packers in src/flex and src/fp32, the transposed rounding in src/flex/quant_*):
 * the line a few panels ahead along a row, a few rows below, or a few lines further down a
 * destination plane, an address that may lie past the end of the array. Formed as an integer,
 * it is no C pointer beyond the array (which would be undefined), and a prefetch of any address
 * is harmless. */
#ifndef FX_PREFETCH_H
#define FX_PREFETCH_H

#include <stdint.h>

static inline void fx_prefetch_at(const void *p, int64_t bytes)
{
    __builtin_prefetch((const void *)((uintptr_t)p + (uintptr_t)bytes));
}

#endif
