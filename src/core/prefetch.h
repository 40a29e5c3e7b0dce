/* A prefetch at an offset from a pointer, for the GEMM packers (src/flex, src/fp32): they
 * prefetch the line a few panels ahead along a row or a few rows below, an address that may
 * lie past the end of the operand. Formed as an integer, it is no C pointer beyond the array
 * (which would be undefined), and a prefetch of any address is harmless. */
#ifndef FX_PREFETCH_H
#define FX_PREFETCH_H

#include <stdint.h>

static inline void fx_prefetch_at(const void *p, int64_t bytes)
{
    __builtin_prefetch((const void *)((uintptr_t)p + (uintptr_t)bytes));
}

#endif
