/* The device dispatcher and write path: the CUDA counterpart of src/core/dispatch.c and of
 * fx_write (src/core/store.c), for ops whose tensors all live on one device.
 *
 * Same compute rule as the host (dispatch.c): first input FLEX16_5/DFP16 -> integer compute
 * (float inputs quantised at their exact exponent, as a DFP16 write would); otherwise fp32
 * compute (every input widened exactly, per element, inside the kernels).
 *
 * Write path: the op's kernel writes a stage (exact int64 values at an exponent, or fp32
 * values) into device memory and reduces the stage's statistics (largest magnitude, NaN/Inf
 * count) in its epilogue. For a FLEX16_5/DFP16 output the host reads those statistics (one
 * small copy) and hands them to fx_write_shared_with (store.c): the exponent choice, Autoflex
 * trials, the recompute rule and the bookkeeping are the host's own code; only the
 * quantisation runs on the device, reading back its statistics (one more small copy per
 * quantisation). Float outputs are rounded by one device kernel.
 *
 * Two shortcuts keep the host from waiting, with the same results:
 * - deferred writes: a FLEX16_5 write that Autoflex decides from its history alone and never
 *   revisits (KEEP presets, after the first write) is rounded at once and its statistics are
 *   copied back asynchronously; the bookkeeping completes later (fx_storage_settle);
 * - speculation: any other FLEX16_5 write with a predictable exponent (the "robust" preset) is
 *   rounded at the prediction before the statistics are read, so stage and rounding statistics
 *   come back in one copy, and the rounding is kept unless the write is recomputed. */
#include "../core/dispatch.h"
#include "../core/ops_internal.h"
#include "gpu.h"
#include "gpu_internal.h"
#include "gpu_nn.h"

#include <stddef.h> /* offsetof */
#include <stdlib.h>
#include <math.h>
#include <string.h>

/* Device allocations of one op call, freed together. */
#define FX_GPU_SCRATCH_MAX 16
typedef struct fx_gpu_scratch {
    void *p[FX_GPU_SCRATCH_MAX];
    int n;
} fx_gpu_scratch;

/* Device memory for the op (NULL with *rc set on failure; *rc must be FX_OK on entry, and a
 * call with *rc already failed does nothing, so that allocations can be chained). */
static void *fx_gs_alloc(fx_gpu_scratch *s, size_t bytes, int *rc, const char *func)
{
    if (*rc) return NULL;
    if (s->n >= FX_GPU_SCRATCH_MAX) {
        *rc = fx_error(FX_ENOMEM, func, "too many device temporaries in one op");
        return NULL;
    }
    void *p = NULL;
    *rc = fx_gr_malloc(bytes, &p, func);
    if (*rc == FX_OK) s->p[s->n++] = p;
    return p;
}

static void fx_gs_free(fx_gpu_scratch *s)
{
    for (int i = 0; i < s->n; i++) fx_gr_free(s->p[i]);
    s->n = 0;
}

/* Device-side statistics of one op call. */
typedef struct fx_gpu_stats {
    fx_dstage_stats stage;  /* of the op's stage */
    fx_dquant_stats quant;  /* of the latest quantisation (a launched write: the first) */
    fx_dquant_stats quant2; /* a launched write's recompute, if it ran */
    int dev_e[4];           /* exponents decided on the device: [0] the kept one, [1] the
                               stage's value, [2] whether a recompute ran, [3] padding */
    fx_dstage_stats aux;    /* operand preparation */
    int op_e;               /* a result exponent an op chose on the device (add/sub) */
} fx_gpu_stats;

/* The storage's record of writes pending on the host (defined below). */
typedef struct fx_gpu_pending fx_gpu_pending;
static const int *fx_gpu_pending_cell(const fx_storage *st);

fx_dview fx_gpu_view_of(const tensor_t *t)
{
    fx_dview v;
    memset(&v, 0, sizeof v);
    v.base = fx_tensor_base(t); /* address arithmetic only: the memory is the device's */
    v.fmt = t->fmt;
    if (fmt_is_shared_exponent(t->fmt)) {
        v.exp_dev = fx_gpu_pending_cell(t->st);
        v.exp = v.exp_dev ? 0 : t->st->exp;
    }
    v.ndim = t->ndim;
    v.contiguous = fx_tensor_is_contiguous(t);
    memcpy(v.shape, t->shape, sizeof v.shape);
    memcpy(v.strides, t->strides, sizeof v.strides);
    return v;
}

int fx_gpu_view_known(const tensor_t *t, fx_dview *v, const char *func)
{
    int rc = fx_storage_settle(t->st, func);
    *v = fx_gpu_view_of(t);
    return rc;
}

fx_dexp fx_dexp_const(int c)
{
    fx_dexp x = {c, {NULL, NULL}};
    return x;
}

fx_dexp fx_dexp_view(const fx_dview *v, int c)
{
    fx_dexp x = fx_dexp_const(c);
    if (v->exp_dev)
        x.cell[0] = v->exp_dev;
    else
        x.c += v->exp;
    return x;
}

fx_dexp fx_dexp_views(const fx_dview *a, const fx_dview *b, int c)
{
    fx_dexp x = fx_dexp_view(a, c);
    if (b->exp_dev)
        x.cell[x.cell[0] ? 1 : 0] = b->exp_dev;
    else
        x.c += b->exp;
    return x;
}

int fx_dexp_known(const fx_dexp *x) { return !x->cell[0] && !x->cell[1]; }

/* x expanded (stride 0) to out's shape by NumPy broadcasting (validated by ops.c). */
static fx_dview fx_gpu_broadcast_view(const tensor_t *x, const tensor_t *out)
{
    fx_dview v = fx_gpu_view_of(x);
    const int nd = out->ndim;
    bool same = x->ndim == nd;
    for (int d = 0; same && d < nd; d++) same = x->shape[d] == out->shape[d];
    if (same) return v;
    for (int d = 0; d < nd; d++) {
        int xd = d - (nd - x->ndim);
        v.shape[d] = out->shape[d];
        v.strides[d] = (xd >= 0 && x->shape[xd] == out->shape[d]) ? x->strides[xd] : 0;
    }
    v.ndim = nd;
    v.contiguous = 0;
    return v;
}

static int64_t fx_view_numel(const fx_dview *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++) n *= v->shape[d];
    return n;
}

/* A float input of an integer op: quantised at its exact exponent, nearest-even, clamped to
 * the DFP16 range (fx_quantize_exact on the host), into a contiguous int16 temporary. */
static int fx_gpu_quantize_exact(fx_dview *v, fx_gpu_stats *ds, fx_gpu_scratch *s,
                                 const char *func)
{
    const int64_t n = fx_view_numel(v);
    int rc = FX_OK;
    float *f = fx_gs_alloc(s, (size_t)n * sizeof *f, &rc, func);
    int16_t *q = fx_gs_alloc(s, (size_t)n * sizeof *q, &rc, func);
    if (!rc) rc = fx_gr_memset0(&ds->aux, sizeof ds->aux, func);
    if (!rc) rc = fx_gk_float_ew(FX_GEW_COPY, v, NULL, 0.0f, f, n, &ds->aux, func);
    fx_dstage_stats h;
    if (!rc) rc = fx_gr_memcpy(&h, &ds->aux, sizeof h, FX_GR_D2H, func);
    if (rc) return rc;
    float mx;
    memcpy(&mx, &h.fmax, sizeof mx);
    int e = fx_exact_exp_f64((double)mx);
    if (e == FX_EXP_NONE) e = 0;
    e = fx_clamp_exp(e, FX_DFP_EXP_MIN, FX_DFP_EXP_MAX, NULL);

    fx_dview qv = *v;
    qv.base = q;
    qv.fmt = FMT_DFP16;
    qv.exp = e;
    qv.contiguous = 1;
    int64_t st = 1;
    for (int d = qv.ndim - 1; d >= 0; d--) {
        qv.strides[d] = st;
        st *= qv.shape[d] > 0 ? qv.shape[d] : 1;
    }
    fx_rounding r = {FX_ROUND_NEAREST_EVEN, 0, 0};
    rc = fx_gr_memset0(&ds->quant, sizeof ds->quant, func);
    if (!rc) rc = fx_gk_quant_f32(f, n, e, NULL, &r, &qv, &ds->quant, func);
    if (!rc) *v = qv;
    return rc;
}

/* ---- the write path ------------------------------------------------------------------------ */

typedef struct fx_gpu_stage {
    int kind; /* FX_STAGE_F32 or FX_STAGE_I64 */
    int64_t n;
    float *f32;
    int64_t *i64;
    fx_dexp exp; /* of int64 values; may live in device memory (pending input exponents) */
} fx_gpu_stage;

typedef struct fx_gpu_quant_ctx {
    const fx_gpu_stage *sg;
    const fx_dview *dst;
    fx_gpu_stats *ds;
    const char *func;
    /* a rounding already done into dst (the predicted exponent of a FLEX16_5 write, launched
     * before the statistics were read back), reused when the write asks for exactly it */
    int spec, spec_e;
    fx_rounding spec_r;
    fx_qstats spec_q;
} fx_gpu_quant_ctx;

/* Launch the rounding of the stage at e (or at the exponent in device memory e_dev, when not
 * NULL) into dst when keep, with its statistics into ds->quant, without reading them back. */
static int fx_gpu_quantize_launch(fx_gpu_quant_ctx *c, int e, const int *e_dev,
                                  const fx_rounding *r, int keep)
{
    const fx_gpu_stage *sg = c->sg;
    const fx_dview *dst = keep ? c->dst : NULL;
    int rc = fx_gr_memset0(&c->ds->quant, sizeof c->ds->quant, c->func);
    if (!rc) {
        if (sg->kind == FX_STAGE_F32)
            rc = fx_gk_quant_f32(sg->f32, sg->n, e, e_dev, r, dst, &c->ds->quant, c->func);
        else
            rc = fx_gk_quant_i64(sg->i64, sg->n, sg->exp, e, e_dev, dst, &c->ds->quant,
                                 c->func);
    }
    return rc;
}

static void fx_gpu_qstats_of(const fx_gpu_stage *sg, const fx_dquant_stats *h, fx_qstats *q)
{
    q->saturated = (int64_t)h->saturated;
    q->nonfinite = (int64_t)h->nonfinite;
    q->underflow = (int64_t)h->underflow;
    if (sg->kind == FX_STAGE_F32) {
        float mx;
        memcpy(&mx, &h->in_fmax, sizeof mx);
        q->max_abs_in = mx;
    } else {
        q->max_abs_in = (double)h->in_imax;
    }
    q->max_abs_out = (int32_t)h->max_out;
}

/* fx_shared_src.quantize for a device stage: one kernel, one small copy of its statistics. */
static int fx_gpu_quantize(void *ctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    fx_gpu_quant_ctx *c = ctx;
    if (c->spec && keep && e == c->spec_e && r->mode == c->spec_r.mode &&
        r->seed == c->spec_r.seed && r->counter == c->spec_r.counter) {
        c->spec = 0; /* dst holds exactly this rounding already */
        *q = c->spec_q;
        return FX_OK;
    }
    c->spec = 0; /* any other rounding (into dst or not) makes the speculative one stale */
    int rc = fx_gpu_quantize_launch(c, e, NULL, r, keep);
    fx_dquant_stats h;
    if (!rc) rc = fx_gr_memcpy(&h, &c->ds->quant, sizeof h, FX_GR_D2H, c->func);
    if (rc) return rc;
    fx_gpu_qstats_of(c->sg, &h, q);
    return FX_OK;
}

/* The statistics and device-chosen exponents of a write, adjacent in fx_gpu_stats, as one
 * copy: the stage's, the first and the recomputed rounding's, and dev_e. */
typedef struct fx_gpu_stats_pair {
    fx_dstage_stats stage;
    fx_dquant_stats quant;
    fx_dquant_stats quant2;
    int dev_e[4];
} fx_gpu_stats_pair;
#define FX_GPU_PAIR_BYTES (offsetof(fx_gpu_stats, aux) - offsetof(fx_gpu_stats, stage))
_Static_assert(sizeof(fx_gpu_stats_pair) == FX_GPU_PAIR_BYTES &&
                   offsetof(fx_gpu_stats_pair, quant) ==
                       offsetof(fx_gpu_stats, quant) - offsetof(fx_gpu_stats, stage) &&
                   offsetof(fx_gpu_stats_pair, quant2) ==
                       offsetof(fx_gpu_stats, quant2) - offsetof(fx_gpu_stats, stage) &&
                   offsetof(fx_gpu_stats_pair, dev_e) ==
                       offsetof(fx_gpu_stats, dev_e) - offsetof(fx_gpu_stats, stage),
               "one copy of fx_gpu_stats' first members fills fx_gpu_stats_pair");

/* The real maximum of a stage from its statistics (int64 stages: exact integers at exp). */
static double fx_gpu_stage_true_max(int kind, int exp, const fx_dstage_stats *h)
{
    if (kind == FX_STAGE_F32) {
        float mx;
        memcpy(&mx, &h->fmax, sizeof mx);
        return mx;
    }
    return ldexp((double)h->imax, exp);
}

/* The stage's exponent in device memory only (inputs whose exponents the device chose):
 * evaluated into dev_e[1] by one thread, so that the value reaches the host with the
 * statistics and so that no later kernel of the write reads an input's exponent cell, which
 * this write may overwrite when its output is also an input. */
static int fx_gpu_stage_exp_fix(fx_gpu_stage *sg, fx_gpu_stats *ds, const char *func)
{
    if (sg->kind != FX_STAGE_I64 || fx_dexp_known(&sg->exp)) return FX_OK;
    int rc = fx_gk_exp_eval(sg->exp, &ds->dev_e[1], func);
    if (!rc) sg->exp = (fx_dexp){0, {&ds->dev_e[1], NULL}};
    return rc;
}

/* The host value of a stage exponent: known, or copied back in a statistics pair. */
static int fx_gpu_stage_exp_value(const fx_gpu_stage *sg, const fx_gpu_stats_pair *h)
{
    if (sg->kind != FX_STAGE_I64) return 0;
    return fx_dexp_known(&sg->exp) ? sg->exp.c : h->dev_e[1];
}

/* ---- launched writes (dispatch.h: "writes whose statistics arrive later") -------------------
 * A whole FLEX16_5 or DFP16 write whose exponent follows a launch rule (KEEP, RECOMPUTE,
 * EXACT) is rounded without the host waiting: the rule runs on the device (one-thread kernels
 * of gpu_kernels.cu over the shared definitions of flex_math.h), its statistics and the chosen
 * exponents travel to a pinned statistics slot asynchronously (gpu_stats_slot.cu), and the op
 * returns. The storage keeps one record (slot, event and an exponent cell in device memory)
 * for all its launched writes, from its first until it is freed. While a write whose exponent
 * the device chose is pending, views of the storage read the exponent from the cell
 * (fx_gpu_view_of), and the host learns it when the write is settled. */
struct fx_gpu_pending {
    fx_pending_write base;
    int device;
    void *host;  /* the slot: fx_gpu_stats_pair, pinned */
    void *event; /* recorded behind the copy into it */
    int *cell;   /* device memory: the exponent the device chose (RECOMPUTE, EXACT) */
    int kind;    /* the stage of the launched write: FX_STAGE_F32 or FX_STAGE_I64 */
    int e0;      /* the exponent it was first rounded at (KEEP, RECOMPUTE) */
    int sexp_on_device; /* its int64 stage's exponent is in the slot (dev_e[1]), not sexp */
    int sexp;           /* else: that exponent */
};

static const int *fx_gpu_pending_cell(const fx_storage *st)
{
    const fx_pending_write *p = st->pending;
    if (!st->on_device || !p || !p->active || p->exp_known) return NULL;
    return ((const fx_gpu_pending *)p)->cell;
}

static int fx_gpu_pending_collect(fx_pending_write *p, fx_pending_result *res, const char *func)
{
    fx_gpu_pending *g = (fx_gpu_pending *)p;
    int rc = fx_gr_slot_wait(g->event, func);
    if (rc) return rc;
    fx_gpu_stats_pair h;
    memcpy(&h, g->host, FX_GPU_PAIR_BYTES);
    res->kind = g->kind;
    res->exp = g->kind != FX_STAGE_I64 ? 0 : g->sexp_on_device ? h.dev_e[1] : g->sexp;
    const fx_gpu_stage sg = {g->kind, 0, NULL, NULL, fx_dexp_const(res->exp)};
    fx_qstats q1;
    fx_gpu_qstats_of(&sg, &h.quant, &q1);
    res->ntrials = 1;
    if (p->mode == FX_LAUNCH_EXACT) {
        /* the exponent came from the stage's statistics, which the host reads as they are */
        res->true_max = fx_gpu_stage_true_max(g->kind, res->exp, &h.stage);
        res->imax = h.stage.imax;
        res->trial[0] = (fx_pending_trial){h.dev_e[0], q1};
        return FX_OK;
    }
    /* the rounding kernel saw every staged value: its input maximum is the stage's (the same
     * finite values, the same |.|), so KEEP and RECOMPUTE need no stage statistics at all */
    res->imax = h.quant.in_imax;
    res->true_max = g->kind == FX_STAGE_F32 ? q1.max_abs_in : ldexp(q1.max_abs_in, res->exp);
    res->trial[0] = (fx_pending_trial){g->e0, q1};
    if (p->mode == FX_LAUNCH_RECOMPUTE && h.dev_e[2]) {
        fx_gpu_qstats_of(&sg, &h.quant2, &res->trial[1].q);
        res->trial[1].e = h.dev_e[0];
        res->ntrials = 2;
    }
    return FX_OK;
}

static void fx_gpu_pending_destroy(fx_pending_write *p)
{
    fx_gpu_pending *g = (fx_gpu_pending *)p;
    fx_gr_slot_put(g->device, g->host, g->event);
    fx_gr_free(g->cell); /* the caching allocator orders its reuse on the stream */
    free(g);
}

static const fx_pending_ops fx_gpu_pending_ops = {fx_gpu_pending_collect,
                                                  fx_gpu_pending_destroy};

/* FLEXPOINT_GPU_DEFER=0 in the environment (read once) turns launched writes off: every
 * FLEX16_5/DFP16 write then reads its statistics back at once, without launching.
 * Results are the same either way; it is there to measure what launching saves, and to rule
 * it out. */
static int fx_gpu_defer_enabled(void)
{
    static int mode = -1; /* every thread computes the same value: a benign, atomic race */
    int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
    if (m < 0) {
        const char *env = getenv("FLEXPOINT_GPU_DEFER");
        m = !(env && env[0] == '0');
        __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
    }
    return m;
}

/* The storage's record (made on its first launched write), or NULL with *rc set. */
static fx_gpu_pending *fx_gpu_pending_of(fx_storage *st, int *rc, const char *func)
{
    if (st->pending) return (fx_gpu_pending *)st->pending;
    fx_gpu_pending *g = calloc(1, sizeof *g);
    if (!g) {
        *rc = fx_error(FX_ENOMEM, func, "cannot allocate a statistics record");
        return NULL;
    }
    *rc = fx_gr_slot_get(sizeof(fx_gpu_stats_pair), &g->host, &g->event, func);
    if (!*rc) {
        void *cell = NULL;
        *rc = fx_gr_malloc(sizeof(int), &cell, func);
        g->cell = cell;
        if (*rc) fx_gr_slot_put(st->device, g->host, g->event);
    }
    if (*rc) {
        free(g);
        return NULL;
    }
    g->base.ops = &fx_gpu_pending_ops;
    g->device = st->device;
    st->pending = &g->base;
    return g;
}

/* The one decision whether a write into out is launched, for fx_gpu_write and
 * fx_gpu_write_defers alike: its launch mode (FX_LAUNCH_*, dispatch.h) with the exponent and
 * rounding it starts from, and out's record made; 0 when it goes through the waiting path.
 * Settles out's previous write first (it decides this one); *rc is FX_OK, or that settle's
 * failure (then 0). Without a record (pinned memory, an event or the cell could not be made)
 * the waiting path gives the same result. */
static int fx_gpu_launch_mode(tensor_t *out, int *e, fx_rounding *r, int *rc, const char *func)
{
    if ((*rc = fx_storage_settle(out->st, func))) return 0;
    if (!fx_gpu_defer_enabled()) return 0;
    const int mode = fx_write_shared_launch_mode(out, e, r);
    if (!mode) return 0;
    int src = FX_OK;
    if (fx_gpu_pending_of(out->st, &src, func)) return mode;
    flexpoint_clear_error();
    return 0;
}

/* Whether the write of an op into out will need no statistics of its stage (a launched KEEP or
 * RECOMPUTE write: the rounding kernel reports the maximum), so that a pass that would only
 * compute them (after cuBLAS) can be skipped. A failure to settle out's previous write is
 * returned (settling again would not report it). */
int fx_gpu_write_defers(tensor_t *out, int *defers, const char *func)
{
    int e, rc;
    fx_rounding r;
    const int mode = fx_gpu_launch_mode(out, &e, &r, &rc, func);
    *defers = mode == FX_LAUNCH_KEEP || mode == FX_LAUNCH_RECOMPUTE;
    return rc;
}

/* Launch a write by its rule (mode), queue its statistics into out's slot; no wait. ds->stage
 * must hold the stage's statistics for EXACT. */
static int fx_gpu_write_launched(tensor_t *out, int mode, int e, const fx_rounding *r,
                                 fx_gpu_stage *sg, fx_gpu_stats *ds, const fx_dview *dst,
                                 const char *func)
{
    fx_storage *st = out->st;
    fx_gpu_pending *g = (fx_gpu_pending *)st->pending; /* fx_gpu_launch_mode made it */
    fx_gpu_quant_ctx qc = {sg, dst, ds, func, 0, 0, {0}, {0}};
    const int f32 = sg->kind == FX_STAGE_F32;
    /* where the settle will find the stage's exponent: known here, or evaluated on the device */
    const int sexp_on_device = !fx_dexp_known(&sg->exp), sexp = sg->exp.c;
    int rc = fx_gpu_stage_exp_fix(sg, ds, func);
    if (rc) return rc;
    switch (mode) {
    case FX_LAUNCH_EXACT:
        rc = fx_gk_dfp16_exp(&ds->stage, f32, sg->exp, st->exp, st->win_lo, st->win_hi,
                             &ds->dev_e[0], g->cell, func);
        if (!rc) rc = fx_gpu_quantize_launch(&qc, 0, &ds->dev_e[0], r, 1);
        break;
    case FX_LAUNCH_RECOMPUTE:
        rc = fx_gpu_quantize_launch(&qc, e, NULL, r, 1);
        if (!rc)
            rc = fx_gk_recompute_exp(&ds->quant, f32, sg->exp, e, st->win_lo, st->win_hi,
                                     &ds->dev_e[0], &ds->dev_e[2], g->cell, func);
        if (!rc) rc = fx_gr_memset0(&ds->quant2, sizeof ds->quant2, func);
        if (!rc && f32)
            rc = fx_gk_quant_f32_if(sg->f32, sg->n, &ds->dev_e[0], &ds->dev_e[2], r, dst,
                                    &ds->quant2, func);
        else if (!rc)
            rc = fx_gk_quant_i64_if(sg->i64, sg->n, sg->exp, &ds->dev_e[0], &ds->dev_e[2], dst,
                                    &ds->quant2, func);
        break;
    default: /* KEEP: the exponent is the host's */
        rc = fx_gpu_quantize_launch(&qc, e, NULL, r, 1);
        break;
    }
    if (!rc) rc = fx_gr_slot_fill(g->host, &ds->stage, FX_GPU_PAIR_BYTES, g->event, func);
    if (rc) return rc; /* nothing committed: the state is as before the write */
    g->kind = sg->kind;
    g->e0 = e;
    g->sexp_on_device = sexp_on_device;
    g->sexp = sexp;
    fx_write_shared_launched(out, &g->base, mode, e, mode == FX_LAUNCH_KEEP);
    return FX_OK;
}

/* The one write of a device stage into out. ds->stage must hold the stage's statistics when
 * out has a shared exponent, unless fx_gpu_write_defers said it defers. */
static int fx_gpu_write(tensor_t *out, fx_gpu_stage *sg, fx_gpu_stats *ds, const char *func)
{
    if (!fmt_is_shared_exponent(out->fmt)) {
        const fx_dview dst = fx_gpu_view_of(out);
        return fx_gk_store_float(sg->f32, sg->i64, sg->exp, sg->n, &dst, func);
    }

    int le, rc;
    fx_rounding lr;
    const int mode = fx_gpu_launch_mode(out, &le, &lr, &rc, func);
    if (rc) return rc;
    const fx_dview dst = fx_gpu_view_of(out); /* after the settle: the mantissas only */
    if (mode) return fx_gpu_write_launched(out, mode, le, &lr, sg, ds, &dst, func);

    /* The waiting path (a first write, a partial view, launching turned off). Speculation:
     * round before the statistics are read, then read the stage's and the rounding's
     * statistics back in one copy (one wait instead of two). A FLEX16_5 write whose exponent
     * the Autoflex history already decides is rounded at it; a whole DFP16 write at its exact
     * exponent, chosen on the device from the stage's maximum by the same function as
     * store.c and copied back with the statistics. The write path below still decides; when
     * it picks the speculated exponent (every write but a recomputed overflow) the rounding
     * is reused, and otherwise it rounds again. */
    rc = fx_gpu_stage_exp_fix(sg, ds, func);
    if (rc) return rc;
    fx_gpu_quant_ctx qc = {sg, &dst, ds, func, 0, 0, {0}, {0}};
    const fx_storage *st = out->st;
    const int dfp_spec = out->fmt == FMT_DFP16 && fx_tensor_covers_storage(out);
    if (dfp_spec || fx_write_shared_peek_exp(out, &qc.spec_e)) {
        qc.spec_r = (fx_rounding){st->rounding, st->seed, st->write_counter};
        if (dfp_spec)
            rc = fx_gk_dfp16_exp(&ds->stage, sg->kind == FX_STAGE_F32, sg->exp, st->exp,
                                 st->win_lo, st->win_hi, &ds->dev_e[0], NULL, func);
        if (!rc)
            rc = fx_gpu_quantize_launch(&qc, qc.spec_e, dfp_spec ? &ds->dev_e[0] : NULL,
                                        &qc.spec_r, 1);
        if (rc) return rc;
        qc.spec = 1;
    }
    /* stage and quant are adjacent in fx_gpu_stats: one copy (quant is read only if rounded) */
    fx_gpu_stats_pair hs;
    rc = fx_gr_memcpy(&hs, &ds->stage, FX_GPU_PAIR_BYTES, FX_GR_D2H, func);
    if (rc) return rc;
    const int sexp = fx_gpu_stage_exp_value(sg, &hs);
    sg->exp = fx_dexp_const(sexp); /* for the roundings the write path asks for */
    if (qc.spec) {
        fx_gpu_qstats_of(sg, &hs.quant, &qc.spec_q);
        if (dfp_spec) qc.spec_e = hs.dev_e[0];
    }
    const fx_dstage_stats h = hs.stage;
    fx_shared_src src;
    memset(&src, 0, sizeof src);
    src.kind = sg->kind;
    src.exp = sexp;
    src.true_max = fx_gpu_stage_true_max(sg->kind, sexp, &h);
    if (sg->kind == FX_STAGE_F32)
        src.nonfinite = (int64_t)h.nonfinite;
    else
        src.imax = h.imax;
    src.ctx = &qc;
    src.quantize = fx_gpu_quantize;
    return fx_write_shared_with(out, &src, func);
}

/* ---- ops ------------------------------------------------------------------------------------ */

static int fx_gpu_ew_op(fx_op op)
{
    switch (op) {
    case FX_OP_COPY: return FX_GEW_COPY;
    case FX_OP_ADD: return FX_GEW_ADD;
    case FX_OP_SUB: return FX_GEW_SUB;
    case FX_OP_MUL: return FX_GEW_MUL;
    case FX_OP_SCALE: return FX_GEW_SCALE;
    case FX_OP_RELU: return FX_GEW_RELU;
    default: return -1;
    }
}

int fx_gpu_stage_op_supported(int op)
{
    return fx_gpu_ew_op((fx_op)op) >= 0 || op == FX_OP_SUM || op == FX_OP_MATMUL;
}

/* Integer elementwise op into an int64 stage (src/flex/intops_scalar.c, op by op). */
static int fx_gpu_int_ew(const fx_op_request *rq, fx_dview *in, fx_gpu_stage *sg,
                         fx_gpu_stats *ds, fx_dstage_stats *sst)
{
    const char *func = rq->func;
    int op = fx_gpu_ew_op(rq->op);
    int64_t smant = 0;
    const fx_dview *a = &in[0], *b = rq->nin > 1 ? &in[1] : NULL;
    sg->exp = fx_dexp_view(a, 0); /* COPY, RELU: the input's exponent */
    switch (rq->op) {
    case FX_OP_SCALE:
        if (rq->scalar != 0.0) { /* s = f * 2^k, f in [0.5, 1): 31-bit mantissa (dispatch.c) */
            int k2;
            double f = frexp(rq->scalar, &k2);
            smant = (int64_t)nearbyint(f * 1073741824.0);
            sg->exp = fx_dexp_view(a, k2 - 30);
        }
        break;
    case FX_OP_MUL: sg->exp = fx_dexp_views(a, b, 0); break;
    case FX_OP_ADD:
    case FX_OP_SUB: {
        if (a->exp_dev || b->exp_dev) {
            /* an exponent the device chose: the same choice, made on the device */
            int rc = fx_gr_memset0(&ds->aux, sizeof ds->aux, func);
            if (!rc)
                rc = fx_gk_int_addsub_dev(op, a, b, sg->i64, sg->n, sst, &ds->aux, &ds->op_e,
                                          func);
            sg->exp = (fx_dexp){0, {&ds->op_e, NULL}};
            return rc;
        }
        const int ea = a->exp, eb = b->exp;
        const int gap = ea > eb ? ea - eb : eb - ea;
        int ec = fx_align_exp(ea, eb);
        if (gap > FX_ALIGN_SPAN) {
            /* the operand with the larger exponent all zero: the result is the other operand,
             * exactly, at its own exponent (see fx_addsub in intops_scalar.c for why) */
            const fx_dview *big = ea > eb ? a : b;
            fx_dstage_stats h;
            int rc = fx_gr_memset0(&ds->aux, sizeof ds->aux, func);
            if (!rc) rc = fx_gk_any_nonzero(big, sg->n, &ds->aux, func);
            if (!rc) rc = fx_gr_memcpy(&h, &ds->aux, sizeof h, FX_GR_D2H, func);
            if (rc) return rc;
            if (!h.nonzero) {
                if (ea > eb) {
                    op = rq->op == FX_OP_SUB ? FX_GEW_NEG : FX_GEW_COPY;
                    a = b;
                    ec = eb;
                } else {
                    op = FX_GEW_COPY;
                    ec = ea;
                }
                b = NULL;
            }
        }
        sg->exp = fx_dexp_const(ec);
        return fx_gk_int_ew(op, a, b, ec, smant, sg->i64, sg->n, sst, func);
    }
    default: break;
    }
    /* ec is read by ADD/SUB only */
    return fx_gk_int_ew(op, a, b, 0, smant, sg->i64, sg->n, sst, func);
}

/* Make the calling thread's current device `device` for the op, remembering the previous one
 * (CUDA's current device is per thread and belongs to the caller). */
static int fx_gpu_enter(int device, int *prev, const char *func)
{
    int rc = fx_gr_get_device(prev, func);
    if (!rc && *prev != device) rc = fx_gr_set_device(device, func);
    return rc;
}

static void fx_gpu_leave(int device, int prev)
{
    if (prev != device) fx_gr_set_device(prev, "fx_gpu_leave");
}

int fx_gpu_dispatch(const fx_op_request *rq)
{
    const char *func = rq->func;
    tensor_t *out = rq->out;
    const int device = out->st->device;
    if (!fx_gpu_stage_op_supported(rq->op)) /* the dispatcher asked supports_op first */
        return fx_error(FX_EUNSUPPORTED, func, "op %d is not implemented on the device",
                        (int)rq->op);
    int prev = device;
    int rc = fx_gpu_enter(device, &prev, func);
    if (rc) return rc;

    const int int_compute = fmt_is_shared_exponent(rq->in[0]->fmt);
    const bool shared_out = fmt_is_shared_exponent(out->fmt) != 0;
    fx_gpu_scratch s = {.n = 0};
    fx_gpu_stats *ds = fx_gs_alloc(&s, sizeof *ds, &rc, func);
    if (!rc) rc = fx_gr_memset0(ds, sizeof *ds, func);

    fx_dview in[FX_MAX_INPUTS];
    for (int i = 0; i < rq->nin && !rc; i++) {
        in[i] = rq->broadcast ? fx_gpu_broadcast_view(rq->in[i], out)
                              : fx_gpu_view_of(rq->in[i]);
        if (int_compute && !fmt_is_shared_exponent(rq->in[i]->fmt))
            rc = fx_gpu_quantize_exact(&in[i], ds, &s, func);
    }

    fx_gpu_stage sg = {int_compute ? FX_STAGE_I64 : FX_STAGE_F32,
                       fx_numel_of(out->ndim, out->shape), NULL, NULL, fx_dexp_const(0)};
    void *buf =
        fx_gs_alloc(&s, (size_t)sg.n * (int_compute ? sizeof(int64_t) : sizeof(float)), &rc, func);
    if (int_compute)
        sg.i64 = buf;
    else
        sg.f32 = buf;
    /* statistics are reduced by the kernels only when the write needs them */
    fx_dstage_stats *sst = shared_out && ds ? &ds->stage : NULL;

    if (!rc) {
        switch (rq->op) {
        case FX_OP_SUM:
            rc = fx_gk_sum(&in[0], int_compute, rq->red_outer, rq->red_len, rq->red_inner, buf,
                           sst, func);
            sg.exp = int_compute ? fx_dexp_view(&in[0], 0) : fx_dexp_const(0);
            break;
        case FX_OP_MATMUL:
            if (int_compute) {
                rc = fx_gk_matmul_i16(&in[0], &in[1], sg.i64, sst, func);
                sg.exp = fx_dexp_views(&in[0], &in[1], 0);
            } else {
                rc = fx_gr_gemm_float(&in[0], &in[1], sg.f32, func);
                /* cuBLAS has no epilogue hook: the statistics take one pass over the stage,
                 * unless the write is deferred (its rounding kernel reports the maximum) */
                int defers = 0;
                if (!rc && sst) rc = fx_gpu_write_defers(out, &defers, func);
                if (!rc && sst && !defers) rc = fx_gk_maxabs_f32(sg.f32, sg.n, sst, func);
            }
            break;
        default:
            if (int_compute)
                rc = fx_gpu_int_ew(rq, in, &sg, ds, sst);
            else
                rc = fx_gk_float_ew(fx_gpu_ew_op(rq->op), &in[0], rq->nin > 1 ? &in[1] : NULL,
                                    (float)rq->scalar, sg.f32, sg.n, sst, func);
            break;
        }
    }
    if (!rc) rc = fx_gpu_write(out, &sg, ds, func);
    if (!rc) rc = fx_gr_op_done(func);
    fx_gs_free(&s);
    fx_gpu_leave(device, prev);
    return rc;
}

/* ---- operand preparation for the other ops of the backend (declared in gpu_kernels.h) ------ */

int fx_gpu_quantize_exact_owned(fx_dview *v, void **owned, const char *func)
{
    *owned = NULL;
    fx_gpu_scratch s = {.n = 0};
    int rc = FX_OK;
    fx_gpu_stats *ds = fx_gs_alloc(&s, sizeof *ds, &rc, func);
    if (!rc) rc = fx_gr_memset0(ds, sizeof *ds, func);
    if (!rc) rc = fx_gpu_quantize_exact(v, ds, &s, func);
    /* keep the int16 copy that v now views; the other temporaries go */
    for (int i = 0; i < s.n && !rc; i++)
        if (s.p[i] == v->base) {
            *owned = s.p[i];
            s.p[i] = NULL;
        }
    fx_gs_free(&s); /* fx_gr_free(NULL) does nothing */
    return rc;
}

/* ---- the write path for composite ops (src/gpu/gpu_nn.c; declared in gpu_nn.h) ------------ */

/* One write of a device stage (fp32 values, or exact int64 values at exponent exp) into out,
 * through the same fx_gpu_write as the simple ops. stats: device memory holding the stage's
 * statistics, reduced by the kernel that produced it; read only when out has a shared
 * exponent (it may be NULL otherwise). */
int fx_gpu_write_stage(tensor_t *out, int kind, int64_t n, float *f32, int64_t *i64,
                       fx_dexp exp, const fx_dstage_stats *stats, const char *func)
{
    fx_gpu_scratch s = {.n = 0};
    int rc = FX_OK;
    fx_gpu_stats *ds = fx_gs_alloc(&s, sizeof *ds, &rc, func);
    if (!rc) rc = fx_gr_memset0(ds, sizeof *ds, func);
    if (!rc && stats && fmt_is_shared_exponent(out->fmt))
        rc = fx_gr_memcpy(&ds->stage, stats, sizeof ds->stage, FX_GR_D2D, func);
    fx_gpu_stage sg = {kind, n, f32, i64, exp};
    if (!rc) rc = fx_gpu_write(out, &sg, ds, func);
    fx_gs_free(&s);
    return rc;
}
