/* Shared-exponent writes rounded at a guessed exponent while their values are made
 * (dispatch.h: fx_guessed_write). The element-wise functions (unary_stream.c) and the outputs
 * made row by row (src/nn/nn_rows_write.c) write so: the values are rounded at the exponent the
 * write is expected to choose, with the write's own rounding, and the rounding's statistics
 * (which include the values' largest finite |value| and their NaN/Inf count, what the write's
 * scan of a stage finds) go to fx_write_shared_with. Where the write chooses another exponent,
 * or runs a statistics-only trial, the producer rounds every value again there, so the
 * mantissas, the exponent and the statistics are the stage route's. */
#include "dispatch.h"
#include "internal.h"

typedef struct fx_guessed {
    fx_round_all_fn round_all;
    void *ctx;
    int16_t *dst;
    int fused_e; /* dst holds the rounding at this exponent and rounding, or FX_EXP_NONE */
    fx_rounding fused_r;
    fx_qstats fused_q;
    int64_t *missed;
} fx_guessed;

static int fx_guessed_quantize(void *ctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    fx_guessed *g = ctx;
    if (e == g->fused_e && r->mode == g->fused_r.mode && r->seed == g->fused_r.seed &&
        r->counter == g->fused_r.counter) {
        *q = g->fused_q;
        return FX_OK;
    }
    if (keep) { /* dst is about to hold another rounding */
        if (g->fused_e != FX_EXP_NONE && g->missed)
            __atomic_fetch_add(g->missed, 1, __ATOMIC_RELAXED);
        g->fused_e = FX_EXP_NONE;
    }
    return g->round_all(g->ctx, keep ? g->dst : NULL, e, r, q);
}

int fx_guessed_write_ok(const tensor_t *out, int *e)
{
    if (!fmt_is_shared_exponent(out->fmt) || !fx_tensor_covers_storage(out) ||
        !fx_write_i16_cannot_fail(out) || !fx_write_shared_guess_exp(out, e))
        return 0;
    return out->fmt == FMT_FLEX16_5 || fx_write_shared_guess_steady(out);
}

int fx_guessed_write(tensor_t *out, int e, fx_round_all_fn round_all, void *ctx, int64_t *missed,
                     const char *func)
{
    const fx_storage *st = out->st;
    fx_guessed g = {round_all, ctx, (int16_t *)fx_tensor_base(out), e,
                    {st->rounding, st->seed, st->write_counter} /* the write's (store.c) */,
                    {0}, missed};
    int rc = round_all(ctx, g.dst, e, &g.fused_r, &g.fused_q);
    if (rc) return rc;
    fx_shared_src src = {.kind = FX_STAGE_F32, .true_max = g.fused_q.max_abs_in,
                         .nonfinite = g.fused_q.nonfinite, .ctx = &g,
                         .quantize = fx_guessed_quantize};
    return fx_write_shared_with(out, &src, func);
}
