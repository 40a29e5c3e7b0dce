/* A ReLU's gradient through the non-overlapping max pool after it, for FLEX16_5/DFP16 tensors,
 * made on the pooled values (pool_own.h: fx_pool_relu_backward_shared).
 *
 * The two ops it stands for are two writes. The pool's gradient a = unpool(dy) is an int16
 * stage of dy's mantissas at their argmax positions, zeros elsewhere, at dy's exponent
 * (tensor_maxpool2d_backward's fx_write_i16_max); the ReLU's gradient dx = a where gate > 0 is
 * a's mantissas gated, at a's exponent (tensor_relu_backward's fx_shared_gated). Zeros add
 * nothing to a write's statistics (fx_qstats: saturations, NaN/Inf, underflows of nonzero
 * values, maxima), so both writes decide from the nonzero positions alone, which are the
 * pooled ones: here each write's exponent choice, Autoflex state, statistics and trace come
 * from a quantiser over the pooled values through the same kernel (the backend's sum2_quant,
 * in fx_par_quant_i16's chunks), each value rounded where it would be. a's mantissas are not stored (the
 * trainer reads a only to make dx, and marks it unwritten); dx gets its rounded values
 * scattered back to their argmax positions and zeros elsewhere. So dx, a's and dx's exponents
 * and every statistic are the two ops' bits, with two full-size stages and two full-size passes
 * fewer. */
#include "pool_own.h"

#include "../core/dispatch.h"
#include "../core/internal.h"
#include "../core/profile_counters.h"
#include "../flex/flex_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the pooled values and where they go: planes of P pooled values over planes of HW inputs */
typedef struct pr_plan {
    const fx_backend *be;
    const int16_t *dy;    /* dy's mantissas, [planes][P] */
    const int32_t *at;    /* argmax, flat input indices, each in its own plane */
    int16_t *gs;          /* the gate's mantissas at the argmax positions, [planes][P] */
    int16_t *as;          /* a's mantissas at the argmax positions (at a's exponent) */
    int16_t *dst;         /* dx's mantissas, [planes][HW] */
    int16_t *rs;          /* dx's mantissas at the argmax positions, before the scatter */
    int64_t planes, P, HW;
    int ey, ea;           /* dy's and a's exponents */
    int fused_e;          /* dst holds dx's rounding at this exponent, or FX_EXP_NONE */
    fx_qstats fused_q;
    int nt;               /* threads of the gather and the scatter */
} pr_plan;

/* dx from the rounded pooled values rs: each plane zeroed, then each value at its argmax
 * (the levels' 2 x 2 vector scatter measured slower here than a store per value) */
static void pr_scatter(const pr_plan *p)
{
    const int nt = p->nt;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t pl = 0; pl < p->planes; pl++) {
        memset(p->dst + pl * p->HW, 0, (size_t)p->HW * sizeof *p->dst);
        for (int64_t j = pl * p->P; j < (pl + 1) * p->P; j++) p->dst[p->at[j]] = p->rs[j];
    }
}

/* dx's rounding at shift from a's values: the statistics, and with keep, dx's mantissas */
static void pr_dx_pass(const pr_plan *p, int shift, int keep, fx_qstats *q)
{
    fx_par_quant_i16_gated(p->be, p->as, p->gs, keep ? p->rs : NULL, p->planes * p->P, shift, q);
    if (keep) pr_scatter(p);
}

/* the pool's gradient: its quantiser, its mantissas kept at the argmax positions only (as:
 * the last rounding kept is the one at the exponent the write chose) */
static int pr_quantize_a(void *ctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    (void)r;
    const pr_plan *p = ctx;
    fx_par_quant_i16(p->be, p->dy, keep ? p->as : NULL, p->planes * p->P, e - p->ey, q);
    return FX_OK;
}

/* the ReLU's gradient: its quantiser, reusing the early rounding at fused_e */
static int pr_quantize_dx(void *ctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    (void)r;
    pr_plan *p = ctx;
    if (e == p->fused_e) {
        *q = p->fused_q;
        return FX_OK;
    }
    if (keep) p->fused_e = FX_EXP_NONE; /* dst now holds the rounding at e */
    pr_dx_pass(p, e - p->ea, keep, q);
    return FX_OK;
}

static int pr_write(tensor_t *out, int exp, uint32_t imax, void *ctx,
                    int (*quantize)(void *, int, const fx_rounding *, int, fx_qstats *),
                    const char *func)
{
    fx_shared_src src;
    memset(&src, 0, sizeof src);
    src.kind = FX_STAGE_I64; /* exact integers at exp, as the ops' stages */
    src.exp = exp;
    src.imax = imax;
    src.true_max = ldexp((double)imax, exp);
    src.ctx = ctx;
    src.quantize = quantize;
    fx_prof_span sp;
    fx_prof_begin(&sp);
    const int rc = fx_write_shared_with(out, &src, func);
    fx_prof_end_split(&sp, FX_PROF_AUTOFLEX, FX_PROF_ROUNDING);
    return rc;
}

/* host FLEX16_5/DFP16, whole, contiguous, no distributed storage. The writes go through
 * fx_write_shared_with, which settles a pending write first and then decides at once (also in
 * the host's deferred test mode), and whose host quantiser here never fails, so dx's
 * mantissas may be written before its write decides. */
static int pr_plain(const tensor_t *t)
{
    return fmt_is_shared_exponent(t->fmt) && fx_tensor_covers_storage(t) &&
           fx_tensor_is_contiguous(t) && !t->st->on_device && !t->st->dist;
}

int fx_pool_relu_backward_shared(tensor_t *dx, tensor_t *a, const tensor_t *dy,
                                 const int32_t *argmax, const tensor_t *gate, const char *func)
{
    const fx_backend *be = fx_backend_active();
    if (!dx || !a || !dy || !argmax || !gate || dx->ndim != 4 || dy->ndim != 4 ||
        !pr_plain(dx) || !pr_plain(a) || !fmt_is_shared_exponent(dy->fmt) ||
        !fmt_is_shared_exponent(gate->fmt) || dy->st->on_device || gate->st->on_device ||
        !fx_tensor_is_contiguous(dy) || !fx_tensor_is_contiguous(gate) || !be->cvt.sum2_quant ||
        !fx_shape_is(a, dx->ndim, dx->shape) || !fx_shape_is(gate, dx->ndim, dx->shape) ||
        dx->st == a->st || dx->st == dy->st || dx->st == gate->st || a->st == dy->st ||
        a->st == gate->st ||
        dy->shape[0] != dx->shape[0] || dy->shape[1] != dx->shape[1] ||
        2 * dy->shape[2] > dx->shape[2] || 2 * dy->shape[3] > dx->shape[3])
        return FX_POOL_RELU_NOT_TAKEN;
    pr_plan p;
    memset(&p, 0, sizeof p);
    p.be = be;
    p.planes = dx->shape[0] * dx->shape[1];
    p.HW = dx->shape[2] * dx->shape[3];
    p.P = dy->shape[2] * dy->shape[3];
    const int64_t ny = p.planes * p.P;
    if (ny <= 0) return FX_POOL_RELU_NOT_TAKEN;
    p.dy = fx_tensor_base(dy);
    p.at = argmax;
    p.dst = fx_tensor_base(dx);
    p.ey = dy->st->exp;
    p.nt = ny >= ((int64_t)1 << 15) ? flexpoint_num_threads() : 1;
    p.fused_e = FX_EXP_NONE;
    /* from the scratch cache, whose pages stay mapped from one step to the next */
    fx_scratch sc = {.n = 0};
    int16_t *buf = fx_scratch_alloc(&sc, 3 * ny, sizeof *buf);
    if (!buf) return FX_POOL_RELU_NOT_TAKEN; /* the two ops, which report what fails */
    p.gs = buf;
    p.as = buf + ny;
    p.rs = buf + 2 * ny;
    /* the gate at each argmax, every index in its own plane (else the two ops, whose pool
     * gradient reports the index), and dy's largest |mantissa| (a's write's maximum, as the
     * pool gradient's scatter finds it) */
    const int16_t *g = fx_tensor_base(gate);
    int64_t bad = 0;
    int32_t dymax = 0;
    const int nt = p.nt;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1) reduction(+ : bad) \
    reduction(max : dymax)
#endif
    for (int64_t pl = 0; pl < p.planes; pl++) {
        const int64_t lo = pl * p.HW;
        for (int64_t j = pl * p.P; j < (pl + 1) * p.P; j++) {
            const int32_t v = p.dy[j], av = v < 0 ? -v : v;
            dymax = av > dymax ? av : dymax;
            const int32_t at = argmax[j];
            if (at < lo || at >= lo + p.HW) {
                bad++;
                p.gs[j] = 0;
                continue;
            }
            p.gs[j] = g[at];
        }
    }
    if (bad) {
        fx_scratch_free(&sc);
        return FX_POOL_RELU_NOT_TAKEN;
    }
    /* a's write: dy's values at dy's exponent, as fx_write_i16_max would stage them */
    int rc = pr_write(a, p.ey, (uint32_t)dymax, &p, pr_quantize_a, func);
    if (rc == FX_OK) {
        p.ea = a->st->exp; /* as holds a's mantissas at the argmax positions at ea */
        /* dx's write as fx_shared_gated makes it: rounded first at a guessed exponent where
         * there is one (DFP16: a's), then the decision */
        uint32_t imax;
        int e;
        if (fx_write_shared_guess_exp(dx, &e)) {
            if (dx->fmt == FMT_DFP16) e = p.ea;
            fx_prof_span sp;
            fx_prof_begin(&sp);
            pr_dx_pass(&p, e - p.ea, 1, &p.fused_q);
            fx_prof_end(&sp, FX_PROF_ROUNDING);
            p.fused_e = e;
            imax = (uint32_t)p.fused_q.max_abs_in;
        } else { /* the gated values' maximum from a statistics-only pass */
            fx_qstats q;
            fx_par_quant_i16_gated(be, p.as, p.gs, NULL, ny, 0, &q);
            imax = (uint32_t)q.max_abs_in;
        }
        rc = pr_write(dx, p.ea, imax, &p, pr_quantize_dx, func);
    }
    fx_scratch_free(&sc);
    return rc;
}
