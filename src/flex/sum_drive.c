/* FX_OP_SUM of the shared-exponent formats, the part every SIMD level shares
 * (flex_kernels.h: fx_flex_sum_drive): which threads take which rows, around the level's own
 * row and column kernels.
 *
 * Why the rows are split: a linear layer's bias gradient sums dy [16384, O] over its rows, one
 * outer item, so a loop over outer items alone ran on one thread: about 2 % of a two-thread
 * DFP16 transformer step with the second thread waiting. Where there are fewer outer items
 * than threads, each thread sums a range of the rows into int64 partial sums of its own, and
 * the partials are added in thread order. Integer additions are exact, so the sums are the
 * definition's whatever the split. */
#include "flex_kernels.h"

#include <stdlib.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Each outer item's rows split over nthreads threads (one where the partials cannot be
 * allocated: the same sums). */
static void sum_rows_split(const int16_t *a, int64_t outer, int64_t len, int64_t inner,
                           int64_t *out, int nthreads, fx_sum_rows_fn cols)
{
    int nt = nthreads > 1 && len >= 2 * nthreads ? nthreads : 1;
    int64_t *part = nt > 1 ? malloc(sizeof *part * (size_t)(nt - 1) * (size_t)inner) : NULL;
    if (!part) nt = 1;
    for (int64_t o = 0; o < outer; o++) {
        const int16_t *src = a + o * len * inner;
        int64_t *dst = out + o * inner;
        if (nt == 1) {
            cols(src, len, inner, dst);
            continue;
        }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
        for (int t = 0; t < nt; t++) {
            const int64_t k0 = len * t / nt, k1 = len * (t + 1) / nt;
            cols(src + k0 * inner, k1 - k0, inner, t == 0 ? dst : part + (size_t)(t - 1) * inner);
        }
        for (int t = 1; t < nt; t++)
            for (int64_t i = 0; i < inner; i++) dst[i] += part[(size_t)(t - 1) * inner + i];
    }
    free(part);
}

int fx_flex_sum_drive(const fx_op_call *c, fx_sum_row_fn row, fx_sum_rows_fn cols)
{
    const int16_t *a = (const int16_t *)c->in[0].data;
    const int64_t outer = c->red_outer, len = c->red_len, inner = c->red_inner;
    int64_t *out = c->out_i64;
    const int par = c->nthreads > 1 && outer * len * inner >= FX_FLEX_PAR_MIN_ELEMS;
    *c->out_exp = c->in[0].exp;
    if (inner > 1 && par && outer < c->nthreads) { /* too few items to share: split the rows */
        sum_rows_split(a, outer, len, inner, out, c->nthreads, cols);
        return FX_OK;
    }
    const int nt = par && outer > 1 ? c->nthreads : 1;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t o = 0; o < outer; o++) {
        const int16_t *src = a + o * len * inner;
        int64_t *dst = out + o * inner;
        if (inner == 1)
            dst[0] = row(src, len);
        else
            cols(src, len, inner, dst);
    }
    return FX_OK;
}
