/* Helpers every benchmark program shares: a clock reading in seconds and the median of a
 * sample. Header-only (each bench/bench_*.c is its own program); include it after <time.h>'s
 * feature macros are set (_POSIX_C_SOURCE or _GNU_SOURCE at the top of the program). */
#ifndef FX_BENCH_UTIL_H
#define FX_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

/* Seconds on clock id: CLOCK_MONOTONIC (wall) or CLOCK_PROCESS_CPUTIME_ID (all threads' CPU
 * time, which a shared machine's other jobs do not inflate). */
static inline double bench_clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* qsort order of doubles, ascending */
static inline int bench_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n-1], n >= 1 (sorts v). */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
