/* A prefetch at an offset from a pointer, for loops that read or write many short streams at
 * once (the GEMM packers in src/flex and src/fp32, the transposed rounding in src/flex/quant_*):
 * the line a few panels ahead along a row, a few rows below, or a few lines further down a
 * destination plane, an address that may lie past the end of the array. Formed as an integer,
 * it is no C pointer beyond the array (which would be undefined), and a prefetch of any address
 * is harmless. Keep prefetching helpers inline: GCC 12's -fipa-modref takes a function whose
 * only effect is __builtin_prefetch as pure and drops its calls. */
#ifndef FX_PREFETCH_H
#define FX_PREFETCH_H

#include <stdint.h>

static inline void fx_prefetch_at(const void *p, int64_t bytes)
{
    __builtin_prefetch((const void *)((uintptr_t)p + (uintptr_t)bytes));
}

/* The same for a line about to be written (a write prefetch: the line is fetched for
 * ownership ahead of the stores). */
static inline void fx_prefetch_write_at(const void *p, int64_t bytes)
{
    __builtin_prefetch((const void *)((uintptr_t)p + (uintptr_t)bytes), 1);
}

/* Rows row .. row + n - 1 of a matrix at base (rows ld bytes apart), at byte col of each,
 * `ahead` bytes further on; rows from the first with row + skip >= rows on are left alone
 * (skip: how many rows below its own a prefetch lands, so that none asks past the matrix's
 * last row). The AMX packers' B rows (src/flex/gemm_i16_amx.c, src/bf16/bf16_gemm_amx.c). */
static inline void fx_prefetch_rows(const void *base, int64_t row, int n, int64_t ld, int64_t col,
                                    int64_t ahead, int64_t skip, int64_t rows)
{
    for (int e = 0; e < n && row + e + skip < rows; e++)
        fx_prefetch_at(base, (row + e) * ld + col + ahead);
}

#endif
