/* The one write path. Every value that lands in a tensor (tensor_from_f32 and every op
 * output) goes through fx_write, so exponent management, statistics and traces live in one
 * place and kernels only compute. */
#include "dispatch.h"
#include "compose.h"
#include "profile_counters.h"
#include "../autoflex/trace.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Largest |value| of an int64 stage, in integer units: one pass, in parallel chunks, with the
 * backend's kernel where it has one (the maximum does not depend on the chunking). */
static uint64_t fx_stage_maxabs_i64(const fx_backend *be, const fx_stage *s)
{
    const int64_t chunk = (int64_t)1 << 16, nchunks = (s->n + chunk - 1) / chunk;
    uint64_t mx = 0;
    int nt = s->n >= ((int64_t)1 << 17) ? flexpoint_num_threads() : 1;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1) reduction(max : mx)
#endif
    for (int64_t c = 0; c < nchunks; c++) {
        const int64_t lo = c * chunk, len = s->n - lo < chunk ? s->n - lo : chunk;
        const uint64_t m = fx_maxabs_i64(be, s->i64 + lo, len);
        mx = m > mx ? m : mx;
    }
    return mx;
}

/* Largest finite |value| of a stage in real units, its count of NaN/Inf, and (int64 stages)
 * the integer maximum, kept for the exact exponent. */
static void fx_stage_maxabs(const fx_backend *be, const fx_stage *s, double *true_max,
                            int64_t *nonfinite, uint64_t *imax)
{
    *imax = 0;
    if (s->kind == FX_STAGE_F32 && s->f32_max_known) {
        *true_max = s->f32_max;
        *nonfinite = s->f32_nonfinite;
        return;
    }
    if (s->kind == FX_STAGE_F32) {
        float m;
        fx_par_maxabs_f32(be, s->f32, s->n, &m, nonfinite);
        *true_max = m;
        return;
    }
    if (s->imax_known)
        *imax = s->imax;
    else if (s->kind == FX_STAGE_I16)
        *imax = fx_maxabs_i16(s->i16, s->n);
    else
        *imax = fx_stage_maxabs_i64(be, s);
    *true_max = ldexp((double)*imax, s->exp);
    *nonfinite = 0;
}

/* Quantise a stage at exponent e (dst NULL: statistics only). */
static void fx_stage_quantize(const fx_backend *be, const fx_stage *s, int e,
                              const fx_rounding *r, int16_t *dst, fx_qstats *st)
{
    if (s->kind == FX_STAGE_F32) {
        fx_par_quant_f32(be, s->f32, dst, s->n, e, r, st);
    } else if (s->kind == FX_STAGE_I16) {
        fx_par_quant_i16(be, s->i16, dst, s->n, e - s->exp, st);
    } else {
        /* e - exp can exceed int range only for absurd exponents; both are within +-2^16 */
        fx_par_quant_i64(be, s->i64, dst, s->n, e - s->exp, st);
    }
}

/* Exact exponent of data with real maximum true_max, or FX_EXP_NONE. For an int64 stage it is
 * computed on the integers, so no double rounding can move it. */
static int fx_stage_exact_exp(int kind, int acc_exp, double true_max, uint64_t imax)
{
    if (kind == FX_STAGE_F32) return fx_exact_exp_f64(true_max);
    return fx_exact_exp_u64(imax, acc_exp);
}

/* Autoflex trials through the source's quantiser; the first failure is kept for the caller. */
typedef struct fx_trial_ctx {
    const fx_shared_src *src;
    const fx_rounding *r;
    int rc;
} fx_trial_ctx;

static void fx_trial(void *ctx, int e, fx_qstats *st)
{
    fx_trial_ctx *c = ctx;
    int rc = c->src->quantize(c->src->ctx, e, c->r, 0, st);
    if (rc) {
        if (!c->rc) c->rc = rc;
        fx_qstats_init(st);
    }
}

/* The bookkeeping of a finished write numbered `index` at exponent e with statistics q:
 * the last-write statistics, the trace record and the totals. The exponent, the Autoflex
 * history and the write counters are the caller's. */
/* Tally a finished write of `period` (0: untallied): a new period closes the open one, a
 * later write of the open period replaces its statistics. */
static void fx_write_tally_add(fx_write_tally *t, int64_t period, const fx_qstats *q)
{
    if (!period) return;
    if (period != t->period) {
        if (t->period) {
            t->periods++;
            t->saturated += t->cur_saturated;
            t->underflow += t->cur_underflow;
            t->zeroed += t->cur_zeroed;
        }
        t->period = period;
    }
    t->cur_saturated = q->saturated;
    t->cur_underflow = q->underflow;
    /* every nonzero finite input rounded to 0: nothing of the values was kept */
    t->cur_zeroed = q->underflow > 0 && q->max_abs_out == 0;
}

void fx_storage_tally_sum(const fx_storage *st, int64_t *periods, int64_t *saturated,
                          int64_t *underflow, int64_t *zeroed)
{
    const fx_write_tally *t = &st->tally;
    const int open = t->period != 0;
    *periods = t->periods + open;
    *saturated = t->saturated + (open ? t->cur_saturated : 0);
    *underflow = t->underflow + (open ? t->cur_underflow : 0);
    *zeroed = t->zeroed + (open ? t->cur_zeroed : 0);
}

static void fx_write_shared_account(fx_storage *st, int64_t index, int64_t period, int e,
                                    int clamped, int overflowed, int recomputed,
                                    const fx_qstats *q, double true_max)
{
    fx_write_tally_add(&st->tally, period, q);
    st->last.saturated = q->saturated;
    st->last.nonfinite = q->nonfinite;
    st->last.underflow = q->underflow;
    st->last.clamped = clamped;
    st->last.true_max = true_max;
    st->last.stored_max = ldexp((double)q->max_abs_out, e);
    if (st->trace.enabled) {
        fx_trace_record rec = {index, e, clamped, overflowed, recomputed, q->saturated,
                               q->nonfinite, q->underflow, true_max, st->last.stored_max};
        /* On ENOMEM the record is dropped and the data kept: the write itself succeeded, so
         * the message alone tells a reader of the error state why the trace has a gap. */
        if (fx_trace_append(&st->trace, &rec) != FX_OK)
            FX_FAIL(FX_ENOMEM, "cannot grow the trace beyond %" PRId64 " records; the record "
                    "of write %" PRId64 " is dropped", st->trace.len, index);
    }
    st->overflows += overflowed;
    st->clamped_total += clamped;
    st->nonfinite_total += q->nonfinite;
}

/* What one write decides: the exponent, the Autoflex state after it, the kept statistics and
 * the flags of its trace record. */
typedef struct fx_shared_outcome {
    fx_af_state af;
    int e, clamped, overflowed, recomputed;
    fx_qstats q;
} fx_shared_outcome;

/* The exponent choice of a write into st (cur_e: its exponent before the write) through src's
 * quantiser: DFP16 exact, FLEX16_5 Autoflex with trials and recompute, a partial view keeps
 * cur_e. Touches nothing but *o, so that a failure leaves the state as it was, and so that a
 * launched write can be decided again from its collected statistics (fx_storage_settle). */
static int fx_shared_decide(const fx_storage *st, bool whole, int cur_e, const fx_shared_src *src,
                            const fx_rounding *r, fx_shared_outcome *o)
{
    const double true_max = src->true_max;
    o->af = st->af; /* Autoflex works on a copy, committed with the rest */
    o->clamped = 0;
    o->overflowed = 0;
    o->recomputed = 0;
    if (!whole) {
        /* A partial view shares its exponent with the rest of the storage: keep it. */
        o->e = cur_e;
    } else if (st->fmt == FMT_DFP16) {
        o->e = fx_dfp16_write_exp(src->kind == FX_STAGE_F32, true_max, src->imax, src->exp, cur_e,
                                  st->win_lo, st->win_hi, &o->clamped);
    } else {
        fx_trial_ctx ctx = {src, r, FX_OK};
        fx_af_writer w = {&ctx, fx_trial, true_max};
        if (o->af.cfg.init_mode == FX_AF_INIT_EXACT && src->kind == FX_STAGE_I64) {
            /* exact initialisation from the integers (avoids a double-rounded maximum) */
            int want = fx_stage_exact_exp(src->kind, src->exp, true_max, src->imax);
            w.true_max = want == FX_EXP_NONE ? 0.0 : true_max;
        }
        o->e = fx_af_predict(&o->af, cur_e, st->win_lo, st->win_hi, &w, &o->clamped);
        if (ctx.rc) return ctx.rc;
    }

    int rc = src->quantize(src->ctx, o->e, r, 1, &o->q);
    if (rc) return rc;
    o->overflowed = o->q.saturated > 0;
    if (whole && st->fmt == FMT_FLEX16_5) {
        int redo;
        if (fx_af_wants_recompute(&o->af, o->e, &o->q, true_max, st->win_lo, st->win_hi,
                                  &redo)) {
            o->e = redo;
            rc = src->quantize(src->ctx, o->e, r, 1, &o->q);
            if (rc) return rc;
            o->recomputed = 1;
        }
        fx_af_observe(&o->af, o->e, &o->q, true_max, o->overflowed);
    }
    return FX_OK;
}

/* Commit a decided write numbered `index` (the counters are the caller's); prev_e: the
 * storage's exponent before the write (a launched write may have set st->exp already). */
static void fx_shared_commit(fx_storage *st, int64_t index, int64_t period,
                             const fx_shared_outcome *o, double true_max, int prev_e)
{
    st->af = o->af;
    /* a first write's guess was the initial exponent, not a prediction: no miss */
    const int missed = index > 0 && (st->fmt == FMT_DFP16 ? o->e != prev_e : o->recomputed);
    st->guess_missed = (st->guess_missed << 1) | (uint32_t)missed;
    if (st->fmt == FMT_DFP16 && missed) {
        st->moved_from = prev_e;
        st->moved_from_set = 1;
    }
    st->exp = o->e;
    fx_write_shared_account(st, index, period, o->e, o->clamped, o->overflowed, o->recomputed,
                            &o->q, true_max);
}

/* A write into one rank's rows of a distributed batch (FX_DIST_ROWS): every quantisation's
 * statistics are those of all ranks' rows together, so that Autoflex's trials, the recompute
 * rule, its history and the tensor's statistics see what one process holding the whole batch
 * would see, and every rank takes the same decisions (hence calls the collectives alike). */
typedef struct fx_rows_quant_ctx {
    const fx_dist_ops *dist;
    const fx_shared_src *inner;
} fx_rows_quant_ctx;

static void fx_qstats_pack(const fx_qstats *q, uint64_t v[FX_DIST_NSTATS])
{
    /* maxima first (a non-negative double orders as its bit pattern), then the sums */
    memset(v, 0, FX_DIST_NSTATS * sizeof *v);
    memcpy(&v[0], &q->max_abs_in, sizeof q->max_abs_in);
    v[1] = (uint64_t)(q->max_abs_out < 0 ? 0 : q->max_abs_out);
    v[4] = (uint64_t)q->saturated;
    v[5] = (uint64_t)q->nonfinite;
    v[6] = (uint64_t)q->underflow;
}

static void fx_qstats_unpack(const uint64_t v[FX_DIST_NSTATS], fx_qstats *q)
{
    memcpy(&q->max_abs_in, &v[0], sizeof q->max_abs_in);
    q->max_abs_out = (int32_t)v[1];
    q->saturated = (int64_t)v[4];
    q->nonfinite = (int64_t)v[5];
    q->underflow = (int64_t)v[6];
}

static int fx_rows_quantize(void *ctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    fx_rows_quant_ctx *c = ctx;
    int rc = c->inner->quantize(c->inner->ctx, e, r, keep, q);
    if (rc) return rc;
    uint64_t v[FX_DIST_NSTATS];
    fx_qstats_pack(q, v);
    if ((rc = c->dist->agree(c->dist->ctx, v))) return rc;
    fx_qstats_unpack(v, q);
    return FX_OK;
}

/* The source's maximum and NaN/Inf count over every rank's rows. */
static int fx_rows_agree_src(const fx_dist_ops *dist, fx_shared_src *src)
{
    uint64_t v[FX_DIST_NSTATS] = {0};
    double tm = src->true_max > 0 ? src->true_max : 0.0;
    memcpy(&v[0], &tm, sizeof tm);
    v[1] = src->imax;
    v[4] = (uint64_t)src->nonfinite;
    int rc = dist->agree(dist->ctx, v);
    if (rc) return rc;
    memcpy(&src->true_max, &v[0], sizeof src->true_max);
    src->imax = v[1];
    src->nonfinite = (int64_t)v[4];
    return FX_OK;
}

static int fx_write_shared_with_body(tensor_t *out, const fx_shared_src *src, const char *func)
{
    fx_storage *st = out->st;
    int rc = fx_storage_settle(st, func); /* an earlier write's bookkeeping comes first */
    if (rc) return rc;
    fx_shared_src rows_src;
    fx_rows_quant_ctx rq = {st->dist, src};
    if (st->dist && st->dist_mode == FX_DIST_ROWS) {
        rows_src = *src;
        if ((rc = fx_rows_agree_src(st->dist, &rows_src))) return rc;
        rows_src.ctx = &rq;
        rows_src.quantize = fx_rows_quantize;
        src = &rows_src;
    }
    const fx_rounding r = {st->rounding, st->seed, st->write_counter};
    fx_shared_outcome o;
    rc = fx_shared_decide(st, fx_tensor_covers_storage(out), st->exp, src, &r, &o);
    if (rc) return rc;
    fx_shared_commit(st, st->writes, st->tally_period, &o, src->true_max, st->exp);
    st->writes++;
    st->write_counter++;
    (void)func;
    return FX_OK;
}

/* Profiling (profile_counters.h): a quantisation that stores the result is rounding, one that
 * only measures (an Autoflex trial) is exponent bookkeeping, as is the rest of the write. */
typedef struct fx_timed_quant_ctx {
    const fx_shared_src *inner;
} fx_timed_quant_ctx;

static int fx_timed_quantize(void *ctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    const fx_timed_quant_ctx *c = ctx;
    const uint64_t t0 = keep ? fx_prof_part_start() : 0;
    const int rc = c->inner->quantize(c->inner->ctx, e, r, keep, q);
    fx_prof_part_stop(t0);
    return rc;
}

int fx_write_shared_with(tensor_t *out, const fx_shared_src *src, const char *func)
{
    fx_prof_span sp;
    fx_prof_begin(&sp);
    if (!sp.on) return fx_write_shared_with_body(out, src, func);
    fx_timed_quant_ctx tq = {src};
    fx_shared_src timed = *src;
    timed.ctx = &tq;
    timed.quantize = fx_timed_quantize;
    const int rc = fx_write_shared_with_body(out, &timed, func);
    fx_prof_end_split(&sp, FX_PROF_AUTOFLEX, FX_PROF_ROUNDING);
    return rc;
}

/* Documented in dispatch.h: a whole FLEX16_5 tensor, unmanaged or past its first write, with
 * no write still pending (its history would not be complete). */
int fx_write_shared_peek_exp(const tensor_t *out, int *e)
{
    const fx_storage *st = out->st;
    if (st->fmt != FMT_FLEX16_5 || !fx_tensor_covers_storage(out)) return 0;
    if (st->pending && st->pending->active) return 0;
    fx_af_state af = st->af; /* fx_af_predict marks a first write initialised: work on a copy */
    if (af.cfg.managed && !af.initialized) return 0;
    *e = fx_af_predict(&af, st->exp, st->win_lo, st->win_hi, NULL, NULL);
    return 1;
}

/* Documented in dispatch.h. */
int fx_write_shared_guess_exp(const tensor_t *out, int *e)
{
    const fx_storage *st = out->st;
    if (st->fmt != FMT_DFP16) return fx_write_shared_peek_exp(out, e);
    if (!fx_tensor_covers_storage(out) || (st->pending && st->pending->active)) return 0;
    *e = st->exp;
    return 1;
}

/* Documented in dispatch.h. */
int fx_write_shared_guess_steady(const tensor_t *out)
{
    /* before the first write the guess is the initial exponent: no prediction to trust */
    return out->st->writes > 0 &&
           (out->st->guess_missed & ((1u << FX_GUESS_STEADY_WRITES) - 1)) == 0;
}

/* Documented in dispatch.h. */
int fx_write_shared_alt_exp(const tensor_t *out, int *e)
{
    const fx_storage *st = out->st;
    if (st->fmt != FMT_DFP16 || !st->moved_from_set || st->moved_from == st->exp) return 0;
    if (!fx_tensor_covers_storage(out) || (st->pending && st->pending->active)) return 0;
    *e = st->moved_from;
    return 1;
}

/* Documented in dispatch.h. */
int fx_write_shared_local(const tensor_t *out)
{
    const fx_storage *st = out->st;
    return !(st->dist && st->dist_mode == FX_DIST_ROWS);
}

int fx_write_shared_launch_mode(const tensor_t *out, int *e, fx_rounding *r)
{
    const fx_storage *st = out->st;
    if (st->pending && st->pending->active) return 0; /* settle first */
    int mode = 0;
    if (st->fmt == FMT_DFP16) {
        if (!fx_tensor_covers_storage(out)) return 0;
        mode = FX_LAUNCH_EXACT;
        *e = st->exp; /* the rule's fallback for an all-zero write */
    } else if (fx_write_shared_peek_exp(out, e)) {
        const int recompute =
            st->af.cfg.managed && st->af.cfg.overflow_mode == FX_AF_OVERFLOW_RECOMPUTE;
        mode = recompute ? FX_LAUNCH_RECOMPUTE : FX_LAUNCH_KEEP;
    } else {
        return 0;
    }
    *r = (fx_rounding){st->rounding, st->seed, st->write_counter};
    return mode;
}

void fx_write_shared_launched(tensor_t *out, fx_pending_write *p, int mode, int e, int exp_known)
{
    fx_storage *st = out->st;
    p->active = 1;
    p->mode = mode;
    p->prev_exp = st->exp;
    p->exp_known = exp_known;
    p->index = st->writes;
    p->tally_period = st->tally_period;
    st->pending = p;
    if (exp_known) st->exp = e;
    st->writes++;
    st->write_counter++;
}

/* A launched write decided again from its collected statistics: the quantiser hands back the
 * backend's quantisations in order, and fails if the rules ask for another exponent than the
 * one the backend used (a backend whose rules differ from the core's). */
typedef struct fx_replay_ctx {
    const fx_pending_result *res;
    int next;
    int mismatch, asked; /* the rules asked for exponent `asked`, which the backend did not keep */
} fx_replay_ctx;

static int fx_replay_quantize(void *ctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    (void)r;
    fx_replay_ctx *c = ctx;
    if (!keep || c->next >= c->res->ntrials || c->res->trial[c->next].e != e) {
        c->mismatch = 1;
        c->asked = e;
        return FX_EDEVICE;
    }
    *q = c->res->trial[c->next++].q;
    return FX_OK;
}

static int fx_storage_settle_collected(fx_storage *st, fx_pending_write *p,
                                       const fx_pending_result *res, const char *func);

int fx_storage_settle(fx_storage *st, const char *func)
{
    fx_pending_write *p = st->pending;
    if (!p || !p->active) return FX_OK;
    p->active = 0; /* collected or failed, it is settled once */
    fx_pending_result res;
    memset(&res, 0, sizeof res);
    int rc = p->ops->collect(p, &res, func);
    if (rc) {
        /* the exponent of a write the backend decided is still only the backend's: keep the
         * write pending (the backend's views keep reading it there), and report the failure
         * again at the next settle; a write whose exponent is known is dropped */
        if (!p->exp_known) p->active = 1;
        return rc;
    }
    /* the decision is exponent bookkeeping; waiting for a device's collect is not */
    fx_prof_span sp;
    fx_prof_begin(&sp);
    rc = fx_storage_settle_collected(st, p, &res, func);
    fx_prof_end(&sp, FX_PROF_AUTOFLEX);
    return rc;
}

static int fx_storage_settle_collected(fx_storage *st, fx_pending_write *p,
                                       const fx_pending_result *res, const char *func)
{
    int rc;
    if (res->ntrials < 1 || res->ntrials > 2) {
        if (!p->exp_known) p->active = 1; /* as a failed collect */
        return fx_error(FX_EDEVICE, func, "a launched write reported %d quantisations",
                        res->ntrials);
    }
    /* The write is decided again by the core's own rules from what the backend measured,
     * at the state it was launched from (only this write changes it until it is settled);
     * the counters moved at launch. */
    fx_replay_ctx c = {res, 0, 0, 0};
    fx_shared_src src;
    memset(&src, 0, sizeof src);
    src.kind = res->kind;
    src.exp = res->exp;
    src.true_max = res->true_max;
    src.imax = res->imax;
    src.ctx = &c;
    src.quantize = fx_replay_quantize;
    const fx_rounding r = {st->rounding, st->seed, st->write_counter - 1};
    fx_shared_outcome o;
    rc = fx_shared_decide(st, true, p->prev_exp, &src, &r, &o);
    const int held = res->trial[res->ntrials - 1].e; /* the exponent of the stored mantissas */
    if (rc == FX_OK && c.next != res->ntrials) rc = FX_EDEVICE;
    if (rc) {
        /* the data stay at the exponent they were written at; the statistics are lost */
        st->exp = held;
        return fx_error(FX_EDEVICE, func, "write %lld: the backend kept exponent %d after %d "
                        "quantisation(s), but the rules of src/core/store.c ask for exponent "
                        "%d; its statistics are dropped", (long long)p->index, held,
                        res->ntrials, c.mismatch ? c.asked : o.e);
    }
    fx_shared_commit(st, p->index, p->tally_period, &o, res->true_max, p->prev_exp);
    return FX_OK;
}

/* ---- the deferred path on the host (tests only) -------------------------------------------- */

/* -1: not decided yet; FLEXPOINT_TEST_DEFER_HOST=1 in the environment turns it on for a whole
 * process (the test suite runs again that way, so that every reader is seen to settle). */
static int fx_defer_host = -1;

void fx_store_defer_host_writes(int on) { __atomic_store_n(&fx_defer_host, on != 0, __ATOMIC_RELAXED); }

static int fx_defer_host_on(void)
{
    int v = __atomic_load_n(&fx_defer_host, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *env = getenv("FLEXPOINT_TEST_DEFER_HOST");
        v = env && env[0] == '1';
        __atomic_store_n(&fx_defer_host, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* Documented in dispatch.h. */
int fx_write_i16_cannot_fail(const tensor_t *out)
{
    const fx_storage *st = out->st;
    return fmt_is_shared_exponent(out->fmt) && !st->on_device && !st->dist &&
           fx_tensor_covers_storage(out) && !(st->pending && st->pending->active) &&
           !fx_defer_host_on();
}

/* The host's statistics are known at once; the record only holds them until settled. */
typedef struct fx_host_pending {
    fx_pending_write base;
    fx_pending_result res;
} fx_host_pending;

static int fx_host_pending_collect(fx_pending_write *p, fx_pending_result *res, const char *func)
{
    (void)func;
    *res = ((const fx_host_pending *)p)->res;
    return FX_OK;
}

static void fx_host_pending_destroy(fx_pending_write *p) { free(p); }

static const fx_pending_ops fx_host_pending_ops = {fx_host_pending_collect,
                                                   fx_host_pending_destroy};

/* Write a host stage through the launch protocol when it applies: 1 if written. The host
 * applies each launch mode's rule itself, as a device does in its kernels (gpu_dispatch.c),
 * and the settle checks it against the core's decision. */
static int fx_write_shared_deferred_host(tensor_t *out, const fx_stage *s,
                                         const fx_shared_src *src, int16_t *dst,
                                         const char *func, int *rc)
{
    fx_storage *st = out->st;
    *rc = fx_storage_settle(st, func);
    if (*rc) return 1;
    int e;
    fx_rounding r;
    const int mode = fx_write_shared_launch_mode(out, &e, &r);
    if (!mode) return 0;
    if (!st->pending) {
        fx_host_pending *h = calloc(1, sizeof *h);
        if (!h) return 0; /* the ordinary path needs no record */
        h->base.ops = &fx_host_pending_ops;
        st->pending = &h->base;
    }
    fx_host_pending *h = (fx_host_pending *)st->pending;
    fx_pending_result *res = &h->res;
    memset(res, 0, sizeof *res);
    res->kind = src->kind;
    res->exp = src->exp;
    res->true_max = src->true_max;
    res->imax = src->imax;
    if (mode == FX_LAUNCH_EXACT)
        e = fx_dfp16_write_exp(src->kind == FX_STAGE_F32, src->true_max, src->imax, src->exp, e,
                               st->win_lo, st->win_hi, NULL);
    const fx_backend *be = fx_backend_active();
    uint64_t pt = fx_prof_part_start(); /* the quantisations store the result: rounding */
    fx_stage_quantize(be, s, e, &r, dst, &res->trial[0].q);
    fx_prof_part_stop(pt);
    res->trial[0].e = e;
    res->ntrials = 1;
    if (mode == FX_LAUNCH_RECOMPUTE) {
        const int redo = fx_recompute_exp(res->trial[0].q.saturated, src->true_max, e,
                                          st->win_lo, st->win_hi);
        if (redo != e) {
            e = redo;
            pt = fx_prof_part_start();
            fx_stage_quantize(be, s, e, &r, dst, &res->trial[1].q);
            fx_prof_part_stop(pt);
            res->trial[1].e = e;
            res->ntrials = 2;
        }
    }
    fx_write_shared_launched(out, &h->base, mode, e, 1);
    return 1;
}

/* The host stage's quantiser: into dst (keep) or statistics only. */
typedef struct fx_host_quant_ctx {
    const fx_backend *be;
    const fx_stage *s;
    int16_t *dst;
} fx_host_quant_ctx;

static int fx_host_quantize(void *ctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    fx_host_quant_ctx *c = ctx;
    fx_stage_quantize(c->be, c->s, e, r, keep ? c->dst : NULL, q);
    return FX_OK;
}

static int fx_write_shared_body(tensor_t *out, const fx_stage *s, const char *func)
{
    const fx_backend *be = fx_backend_active();
    int64_t n = s->n;
    bool whole = fx_tensor_covers_storage(out);
    int16_t *direct = whole ? (int16_t *)fx_tensor_base(out) : NULL;
    int16_t *tmp = NULL;
    if (!direct) {
        tmp = fx_alloc_array(n, sizeof *tmp);
        if (!tmp) return fx_error(FX_ENOMEM, func, "cannot allocate %lld int16 values",
                                  (long long)n);
    }
    fx_host_quant_ctx qc = {be, s, direct ? direct : tmp};
    fx_shared_src src;
    memset(&src, 0, sizeof src);
    src.kind = s->kind == FX_STAGE_F32 ? FX_STAGE_F32 : FX_STAGE_I64; /* integers at exp */
    src.exp = s->exp;
    fx_stage_maxabs(be, s, &src.true_max, &src.nonfinite, &src.imax);
    int rc;
    /* a distributed write decides at once (its collectives cannot wait for a later settle) */
    if (!out->st->dist && direct && fx_defer_host_on() &&
        fx_write_shared_deferred_host(out, s, &src, direct, func, &rc))
        return rc;
    src.ctx = &qc;
    src.quantize = fx_host_quantize;
    rc = fx_write_shared_with(out, &src, func);
    if (tmp) {
        const uint64_t pt = fx_prof_part_start(); /* storing the rounded values */
        if (rc == FX_OK) fx_strided_copy(out, tmp, 1);
        fx_prof_part_stop(pt);
        free(tmp);
    }
    return rc;
}

/* Profiled, a write's maximum scan and exponent choice are bookkeeping, its quantisation into
 * the output and the copy into a strided view rounding (profile_counters.h). */
static int fx_write_shared(tensor_t *out, const fx_stage *s, const char *func)
{
    fx_prof_span sp;
    fx_prof_begin(&sp);
    const int rc = fx_write_shared_body(out, s, func);
    fx_prof_end_split(&sp, FX_PROF_AUTOFLEX, FX_PROF_ROUNDING);
    return rc;
}

/* fp32 values of an int64 stage: v * 2^exp. For fp16/bf16 targets the double is rounded to
 * fp32 with round-to-odd, so that the later 16-bit rounding is the only effective rounding. */
static void fx_stage_i64_to_f32(const fx_stage *s, float *dst, int odd)
{
    /* (double)v is exact for |v| < 2^53: every product, and every sum of fewer than 2^23
     * products. Only add/sub of operands whose exponents differ by more than 38 can exceed it,
     * and then the double adds one more rounding. Multiplying by 2^exp is exact in double for
     * every exponent the formats produce. */
    const double scale = ldexp(1.0, s->exp);
    int nt = s->n >= ((int64_t)1 << 17) ? flexpoint_num_threads() : 1;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t i = 0; i < s->n; i++) {
        double d = (double)s->i64[i] * scale;
        dst[i] = odd ? fx_f64_to_f32_round_odd(d) : (float)d;
    }
}

static int fx_write_float_body(tensor_t *out, const fx_stage *s, const char *func)
{
    const fx_backend *be = fx_backend_active();
    int64_t n = s->n;
    bool contig = fx_tensor_is_contiguous(out);
    const float *vals = s->f32;
    float *ftmp = NULL;
    void *tmp16 = NULL;
    if (s->kind == FX_STAGE_I64) {
        ftmp = fx_alloc_array(n, sizeof *ftmp);
        if (!ftmp) return fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)n);
        fx_stage_i64_to_f32(s, ftmp, out->fmt != FMT_FP32);
        vals = ftmp;
    }
    if (out->fmt == FMT_FP32) {
        if (vals != fx_tensor_base(out)) fx_strided_copy(out, (void *)vals, 1);
        free(ftmp);
        return FX_OK;
    }
    uint16_t *dst = contig ? (uint16_t *)fx_tensor_base(out) : NULL;
    if (!dst) {
        tmp16 = fx_alloc_array(n, sizeof(uint16_t));
        if (!tmp16) {
            free(ftmp);
            return fx_error(FX_ENOMEM, func, "cannot allocate %lld 16-bit values",
                            (long long)n);
        }
        dst = tmp16;
    }
    void (*cvt)(const float *, uint16_t *, int64_t) =
        out->fmt == FMT_FP16 ? be->cvt.f32_to_fp16 : be->cvt.f32_to_bf16;
    const int64_t chunk = (int64_t)1 << 16;
    int64_t nchunks = (n + chunk - 1) / chunk;
    int nt = n >= 2 * chunk ? flexpoint_num_threads() : 1;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t lo = c * chunk, len = n - lo < chunk ? n - lo : chunk;
        cvt(vals + lo, dst + lo, len);
    }
    if (tmp16) fx_strided_copy(out, tmp16, 1);
    free(tmp16);
    free(ftmp);
    return FX_OK;
}

/* Profiled, a float write that changes the values' format is rounding; an fp32 stage copied
 * into an fp32 tensor is not counted. */
static int fx_write_float(tensor_t *out, const fx_stage *s, const char *func)
{
    if (out->fmt == FMT_FP32 && s->kind == FX_STAGE_F32) return fx_write_float_body(out, s, func);
    fx_prof_span sp;
    fx_prof_begin(&sp);
    const int rc = fx_write_float_body(out, s, func);
    fx_prof_end(&sp, FX_PROF_ROUNDING);
    return rc;
}

static int fx_write_local(tensor_t *out, const fx_stage *s, const char *func);

/* A rank's partial sum written as the sum over every rank (FX_DIST_SUM): integer stages are
 * summed exactly in int64, so the one write that follows rounds the same exact sum as a single
 * process would; fp32 stages are summed in rank order, then rounded once by the write. */
static int fx_write_summed(tensor_t *out, const fx_stage *s, const char *func)
{
    const fx_dist_ops *dist = out->st->dist;
    fx_stage w = *s;
    int rc;
    if (s->kind == FX_STAGE_F32) {
        float *v = fx_alloc_array(s->n, sizeof *v);
        if (!v) return fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)s->n);
        memcpy(v, s->f32, (size_t)s->n * sizeof *v);
        rc = dist->sum_f32(dist->ctx, v, s->n);
        w.f32 = v;
        w.f32_max_known = 0; /* the statistics were of this rank's values, not of the sum */
        if (!rc) rc = fx_write_local(out, &w, func);
        free(v);
        return rc;
    }
    int64_t *v = fx_alloc_array(s->n, sizeof *v);
    if (!v) return fx_error(FX_ENOMEM, func, "cannot allocate %lld int64 values",
                            (long long)s->n);
    if (s->kind == FX_STAGE_I16)
        for (int64_t i = 0; i < s->n; i++) v[i] = s->i16[i];
    else
        memcpy(v, s->i64, (size_t)s->n * sizeof *v);
    /* The narrowest integers that hold every partial sum: nranks times the largest |value| on
     * any rank (one agreement of 64 bytes) decides int16, int32 or int64, so the sum stays
     * exact while the common small gradients travel in 2 or 4 bytes instead of 8. */
    uint64_t mx = 0;
    for (int64_t i = 0; i < s->n; i++) {
        const uint64_t a = v[i] < 0 ? (uint64_t)0 - (uint64_t)v[i] : (uint64_t)v[i];
        mx = a > mx ? a : mx;
    }
    uint64_t stats[FX_DIST_NSTATS] = {mx};
    rc = dist->agree(dist->ctx, stats);
    const uint64_t bound = stats[0] > UINT64_MAX / (uint64_t)dist->nranks
                               ? UINT64_MAX
                               : stats[0] * (uint64_t)dist->nranks;
    const int bytes = bound <= INT16_MAX ? 2 : bound <= INT32_MAX ? 4 : 8;
    if (!rc) rc = dist->sum_int(dist->ctx, v, s->n, bytes);
    w.kind = FX_STAGE_I64;
    w.i64 = v;
    w.i16 = NULL;
    w.imax_known = 0; /* a rank's maximum is not the sum's */
    if (!rc) rc = fx_write_local(out, &w, func);
    free(v);
    return rc;
}

int fx_write(tensor_t *out, const fx_stage *s, const char *func)
{
    /* composite ops (flexpoint_nn.h) reach here with host stages only */
    int rc = fx_need_host(out, "the output", FX_EUNSUPPORTED, FX_HOST_PATH_HINT,
                          func);
    if (rc) return rc;
    if (out->st->dist && out->st->dist_mode == FX_DIST_SUM) return fx_write_summed(out, s, func);
    return fx_write_local(out, s, func);
}

void fx_tensor_set_disposable(tensor_t *t) { t->st->disposable = true; }

void fx_tensor_set_dist(tensor_t *t, const fx_dist_ops *dist, int mode)
{
    if (!t) return;
    t->st->dist = dist;
    t->st->dist_mode = dist ? mode : FX_DIST_LOCAL;
}

static int fx_write_local(tensor_t *out, const fx_stage *s, const char *func)
{
    int rc;
    if (fmt_is_shared_exponent(out->fmt)) return fx_write_shared(out, s, func);
    if (s->kind == FX_STAGE_I16) { /* a float output: through the int64 conversion */
        int64_t *wide = fx_alloc_array(s->n, sizeof *wide);
        if (!wide) return fx_error(FX_ENOMEM, func, "cannot allocate %lld int64 values",
                                   (long long)s->n);
        for (int64_t i = 0; i < s->n; i++) wide[i] = s->i16[i];
        fx_stage w = *s;
        w.kind = FX_STAGE_I64;
        w.i64 = wide;
        rc = fx_write_float(out, &w, func);
        free(wide);
        return rc;
    }
    return fx_write_float(out, s, func);
}

int tensor_from_f32(tensor_t *t, const float *src)
{
    if (!t || !src) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "tensor" : "src");
    int rc = fx_need_host(t, "the tensor", FX_EINVAL,
                          "write a host tensor and copy it (tensor_copy_to_device, "
                          "flexpoint_gpu.h)", __func__);
    if (rc) return rc;
    fx_stage s = {.kind = FX_STAGE_F32, .n = fx_numel_of(t->ndim, t->shape), .f32 = src};
    return fx_write(t, &s, __func__);
}

int tensor_to_f32(const tensor_t *t, float *dst)
{
    if (!t || !dst) return FX_FAIL(FX_EINVAL, "%s is NULL", !t ? "tensor" : "dst");
    int rc = fx_need_host(t, "the tensor", FX_EINVAL,
                          "copy it to the host first (tensor_to_host, flexpoint_gpu.h)",
                          __func__);
    if (rc) return rc;
    int64_t n = fx_numel_of(t->ndim, t->shape);
    const fx_backend *be = fx_backend_active();
    if (t->fmt == FMT_FP32) {
        fx_strided_copy(t, dst, 0);
        return FX_OK;
    }
    const void *src = fx_tensor_base(t);
    void *tmp = NULL;
    if (!fx_tensor_is_contiguous(t)) {
        tmp = fx_alloc_array(n, 2);
        if (!tmp) return FX_FAIL(FX_ENOMEM, "cannot allocate %lld elements", (long long)n);
        fx_strided_copy(t, tmp, 0);
        src = tmp;
    }
    fx_widen_to_f32(be, t->fmt, t->st->exp, src, dst, n);
    free(tmp);
    return FX_OK;
}
