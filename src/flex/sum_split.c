/* The shared-exponent sum over the middle axis of [outer, len, inner] when outer alone cannot
 * keep the threads busy (flex_kernels.h: fx_flex_sum_split).
 *
 * Why: a linear layer's bias gradient sums dy [16384, O] over its rows, one outer item, so the
 * kernels' loop over outer ran on one thread: about 2 % of a two-thread DFP16 transformer step
 * with the second thread waiting. Here each thread sums a range of the rows into int64 partial
 * sums of its own, and the partials are added in thread order. Integer additions are exact, so
 * the sums are the definition's whatever the split. */
#include "flex_kernels.h"

#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

void fx_flex_sum_split(const int16_t *a, int64_t outer, int64_t len, int64_t inner, int64_t *out,
                       int nthreads, fx_sum_rows_fn rows)
{
    int nt = nthreads > 1 && len >= 2 * nthreads ? nthreads : 1;
    int64_t *part = nt > 1 ? malloc(sizeof *part * (size_t)(nt - 1) * (size_t)inner) : NULL;
    if (!part) nt = 1; /* no room for the partials: one thread, the same sums */
    for (int64_t o = 0; o < outer; o++) {
        const int16_t *src = a + o * len * inner;
        int64_t *dst = out + o * inner;
        if (nt == 1) {
            rows(src, len, inner, dst);
            continue;
        }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
        for (int t = 0; t < nt; t++) {
            const int64_t k0 = len * t / nt, k1 = len * (t + 1) / nt;
            rows(src + k0 * inner, k1 - k0, inner, t == 0 ? dst : part + (size_t)(t - 1) * inner);
        }
        for (int t = 1; t < nt; t++)
            for (int64_t i = 0; i < inner; i++) dst[i] += part[(size_t)(t - 1) * inner + i];
    }
    free(part);
}
