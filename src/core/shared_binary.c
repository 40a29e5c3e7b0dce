/* add / sub of FLEX16_5 and DFP16 tensors without an int64 stage (ops.c calls this before the
 * dispatcher).
 *
 * Why: the dispatcher's integer route writes the exact sums into an int64 stage (8 bytes per
 * element, four times the int16 output) and the write reads it back twice, for the maximum and
 * to round. A conv's bias add on the CNN's first layer ([128, 32, 28, 28]) spent more time there
 * than an fp32 add. When the exponents of a and b are at most 15 apart, every aligned sum
 * (a << sa) +- (b << sb) fits int32, so this file recomputes the sums from the int16 inputs
 * instead of storing them: one pass for their maximum, then the write's quantisations (the
 * backend's sum2_maxabs / sum2_quant); where the output's exponent can be guessed before the
 * write, the rounding pass alone, which the write reuses when it picks that exponent
 * (fx_sb_write). The exponent choice, statistics, trace and rounding are
 * those of the write path (fx_write_shared_with) on the same exact values at the same exponent,
 * min(ea, eb), so the result is the dispatcher's bit for bit (tests/test_shared_binary.c).
 * Anything else returns FX_SHARED_BINARY_NOT_TAKEN and goes through the dispatcher. */
#include "shared_binary.h"
#include "dispatch.h"
#include "profile_counters.h"
#include "../flex/flex_math.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define FX_SB_CHUNK 16384                /* elements per work unit of a same-shape op */
#define FX_SB_PAR_MIN ((int64_t)1 << 16) /* below this, one thread */
#define FX_SB_MAX_GAP 15                 /* |ea - eb|: (int16 << 15) + int16 fits int32 */

/* test hooks, read by every op: relaxed atomics, so that ops on several threads stay race-free */
static int fx_sb_enabled_flag = 1;
static int64_t fx_sb_taken; /* ops done here */
static int64_t fx_sb_fused; /* of those, rounded first at a guessed exponent */
static int64_t fx_sb_missed; /* of those, rounded again at another exponent */
static int64_t fx_sb_add_relu_made; /* adds made with their ReLU in one pass */
static int64_t fx_sb_add_gated_made; /* sums made with a ReLU's gate in one pass */
static int fx_sb_gated_kernel_flag = 1; /* the level's sum2_quant_gated, where it has one */
static int64_t fx_sb_gated_units;       /* work units that kernel made (added once a call) */

void fx_shared_binary_set_enabled(int on)
{
    __atomic_store_n(&fx_sb_enabled_flag, on != 0, __ATOMIC_RELAXED);
}
int64_t fx_shared_binary_taken(void) { return __atomic_load_n(&fx_sb_taken, __ATOMIC_RELAXED); }
int64_t fx_shared_binary_fused(void) { return __atomic_load_n(&fx_sb_fused, __ATOMIC_RELAXED); }
int64_t fx_shared_binary_missed(void) { return __atomic_load_n(&fx_sb_missed, __ATOMIC_RELAXED); }
int64_t fx_shared_add_relu_made(void)
{
    return __atomic_load_n(&fx_sb_add_relu_made, __ATOMIC_RELAXED);
}
int64_t fx_shared_add_gated_made(void)
{
    return __atomic_load_n(&fx_sb_add_gated_made, __ATOMIC_RELAXED);
}
static int fx_sb_enabled(void) { return __atomic_load_n(&fx_sb_enabled_flag, __ATOMIC_RELAXED); }
void fx_shared_binary_set_gated_kernel(int on)
{
    __atomic_store_n(&fx_sb_gated_kernel_flag, on != 0, __ATOMIC_RELAXED);
}
int64_t fx_shared_binary_gated_units(void)
{
    return __atomic_load_n(&fx_sb_gated_units, __ATOMIC_RELAXED);
}

/* The op as work units: unit u covers a[lo(u) .. lo(u) + len(u)) and reads b from b_at(u). */
typedef struct fx_sb_plan {
    const fx_backend *be;
    const int16_t *a, *b, *gate; /* gate: NULL, or advancing with a */
    int16_t *dst;
    int64_t n, units, inner; /* inner: elements per unit (the last one may be shorter) */
    int64_t C;               /* per_plane: b holds C values, unit u (one plane) uses b[u % C] */
    int per_plane;           /* 0: b advances with a, from b[lo % b_period] */
    int64_t b_period;        /* n (same shape), or C for rows of a per-column b (inner = C) */
    int sa, sb, negate_b, nt;
    int ec; /* the exponent of the aligned sums: min(ea, eb) */
    /* fused_e: dst already holds the rounding at this exponent and fused_q its statistics
     * (else FX_EXP_NONE) */
    int fused_e;
    fx_qstats fused_q;
    /* a not yet stored: a_ready(a_ctx) stores it before a pass reads it (then NULL) */
    void (*a_ready)(void *);
    void *a_ctx;
} fx_sb_plan;

static fx_sum2 fx_sb_unit(const fx_sb_plan *p, int64_t u, int64_t *lo, int64_t *len)
{
    *lo = u * p->inner;
    *len = p->n - *lo < p->inner ? p->n - *lo : p->inner;
    const int16_t *b = p->per_plane ? p->b + u % p->C : p->b + *lo % p->b_period;
    const fx_sum2 s = {p->a + *lo, b, p->per_plane ? 0 : 1, p->sa, p->sb, p->negate_b,
                       p->gate ? p->gate + *lo : NULL};
    return s;
}

static uint32_t fx_sb_maxabs(const fx_sb_plan *p)
{
    uint32_t mx = 0;
    const int nt = p->nt;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1) reduction(max : mx)
#endif
    for (int64_t u = 0; u < p->units; u++) {
        int64_t lo, len;
        const fx_sum2 s = fx_sb_unit(p, u, &lo, &len);
        const uint32_t m = p->be->cvt.sum2_maxabs(&s, len);
        mx = m > mx ? m : mx;
    }
    return mx;
}

static const int16_t fx_sb_zero = 0;

/* A ReLU of a pass's kept output, made unit by unit while the unit is in cache: its mantissas
 * into dst at `shift` from the pass's exponent, its statistics into *q (fx_shared_add_relu). */
typedef struct fx_sb_relu_out {
    int16_t *dst;
    int shift;
    fx_qstats *q;
    const int16_t *gate; /* NULL: relu(out), out gated by its own signs; else a ReLU's gradient:
                          * out gated by these mantissas' signs (advancing with out) */
} fx_sb_relu_out;

/* Unit u of a pass at `shift` from the plan's exponent: its statistics merged into *q, and with
 * keep its mantissas into dst (and with relu, their ReLU into relu->dst, its statistics merged
 * into *qr). Returns 1 where the level's sum2_quant_gated made both outputs (the callers count
 * those units once a pass: an atomic add per unit would pass its line between the cores). */
static int fx_sb_unit_pass(const fx_sb_plan *p, int64_t u, int shift, int keep,
                           const fx_sb_relu_out *relu, fx_qstats *q, fx_qstats *qr)
{
    int64_t lo, len;
    const fx_sum2 s = fx_sb_unit(p, u, &lo, &len);
    fx_qstats part;
    if (relu && keep && relu->shift == 0 && p->be->cvt.sum2_quant_gated &&
        __atomic_load_n(&fx_sb_gated_kernel_flag, __ATOMIC_RELAXED)) {
        /* both outputs in one pass: the pair of calls below, the same mantissas and
         * statistics, without the first output read back (ResNet-20's block ends, whose
         * second output takes the sum's exponent in 19 units of 20 in FLEX16_5 and in all of
         * DFP16's: 10-25 % off the op at one thread, bench_ew) */
        fx_qstats rpart;
        p->be->cvt.sum2_quant_gated(&s, len, p->dst + lo, shift, &part,
                                    relu->gate ? relu->gate + lo : NULL, relu->dst + lo, &rpart);
        fx_qstats_merge(q, &part);
        fx_qstats_merge(qr, &rpart);
        return 1;
    }
    p->be->cvt.sum2_quant(&s, len, keep ? p->dst + lo : NULL, shift, &part);
    fx_qstats_merge(q, &part);
    if (relu) { /* relu(out) = out gated by out > 0, or out gated by another tensor's signs */
        const fx_sum2 r = {p->dst + lo, &fx_sb_zero, 0, 0, 0, 0,
                           relu->gate ? relu->gate + lo : p->dst + lo};
        p->be->cvt.sum2_quant(&r, len, relu->dst + lo, relu->shift, &part);
        fx_qstats_merge(qr, &part);
    }
    return 0;
}

/* One pass of the backend's sum2_quant over every unit at exponent e: the statistics into *q,
 * and with keep the mantissas into dst (and with relu, also their ReLU into relu->dst).
 * Integer values round by fx_requant alone. The statistics are sums and maxima: merging them
 * in any order gives the same result. */
static void fx_sb_pass(const fx_sb_plan *p, int e, int keep, fx_qstats *q,
                       const fx_sb_relu_out *relu)
{
    const int shift = e - p->ec;
    fx_qstats_init(q);
    if (relu) fx_qstats_init(relu->q);
    const int nt = p->nt;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        fx_qstats mine, mine_relu;
        fx_qstats_init(&mine);
        fx_qstats_init(&mine_relu);
        int64_t gated = 0;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t u = 0; u < p->units; u++)
            gated += fx_sb_unit_pass(p, u, shift, keep, relu, &mine, &mine_relu);
        if (gated) __atomic_fetch_add(&fx_sb_gated_units, gated, __ATOMIC_RELAXED);
#ifdef _OPENMP
#pragma omp critical(fx_shared_binary_merge)
#endif
        {
            fx_qstats_merge(q, &mine);
            if (relu) fx_qstats_merge(relu->q, &mine_relu);
        }
    }
}

static void fx_sb_quant_pass(const fx_sb_plan *p, int e, int keep, fx_qstats *q)
{
    fx_sb_pass(p, e, keep, q, NULL);
}

/* fx_shared_src.quantize (r is not used: see fx_sb_quant_pass). At the exponent of a fused
 * first pass, dst and the statistics are already those of this rounding. */
static int fx_sb_quantize(void *ctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    (void)r;
    fx_sb_plan *p = ctx;
    if (e == p->fused_e) {
        *q = p->fused_q;
        return FX_OK;
    }
    if (keep && p->fused_e != FX_EXP_NONE)
        __atomic_fetch_add(&fx_sb_missed, 1, __ATOMIC_RELAXED);
    if (keep) p->fused_e = FX_EXP_NONE; /* dst now holds the rounding at e */
    if (p->a_ready) {
        p->a_ready(p->a_ctx);
        p->a_ready = NULL;
    }
    fx_sb_quant_pass(p, e, keep, q);
    return FX_OK;
}

/* The plan's work units and threads, no early rounding yet; counts the op as taken here. */
static void fx_sb_prepare(fx_sb_plan *p)
{
    p->units = (p->n + p->inner - 1) / p->inner;
    p->nt = p->n >= FX_SB_PAR_MIN ? flexpoint_num_threads() : 1;
    p->fused_e = FX_EXP_NONE;
    p->a_ready = NULL;
    p->a_ctx = NULL;
    flexpoint_clear_error(); /* as the dispatcher does before its kernel */
    __atomic_fetch_add(&fx_sb_taken, 1, __ATOMIC_RELAXED);
}

/* The write of the planned values, whose largest |value| (at exponent ec) is imax; where
 * p->fused_e is set, out already holds their rounding there and p->fused_q its statistics. */
static int fx_sb_decide(tensor_t *out, fx_sb_plan *p, uint32_t imax, const char *func)
{
    fx_shared_src src;
    memset(&src, 0, sizeof src);
    src.kind = FX_STAGE_I64; /* exact integers at exponent ec, as the dispatcher's stage */
    src.exp = p->ec;
    src.imax = imax;
    src.true_max = ldexp((double)imax, p->ec);
    src.nonfinite = 0;
    src.ctx = p;
    src.quantize = fx_sb_quantize;
    return fx_write_shared_with(out, &src, func);
}

/* The write of the planned values. The exponent logic needs their maximum before any
 * rounding: a pass of its own, unless the output's exponent can be guessed before the write
 * (fx_write_shared_guess_exp: a FLEX16_5 tensor's Autoflex prediction, a DFP16 tensor's
 * current exponent). Then the one pass rounds at the guess straight into out, and its
 * statistics give the maximum (exact: |sum| < 2^31); the write finds that rounding already
 * done unless it picks another exponent (an overflow's recompute, a DFP16 scale that moved),
 * which rounds again. Writing out before the write decides is safe here only because that
 * write cannot fail at all: out shares storage with neither input, a host storage with no
 * write pending settles at once, this file's quantiser never fails, and without collectives
 * nothing else in the decision returns an error (a trace that cannot grow only sets the
 * message). A failure point added there must turn this path off. The early pass counts as
 * rounding in a profile, as the write's own rounding does. (For ReLU and the bias adds of a
 * FLEX16_5 CNN the maximum pass was about 3 % of a step.) */
static int fx_sb_write(tensor_t *out, fx_sb_plan *p, const char *func)
{
    fx_sb_prepare(p);
    uint32_t imax;
    int e;
    if (!out->st->dist && fx_write_shared_guess_exp(out, &e)) {
        /* A DFP16 gate applied to another tensor's signs (a ReLU's gradient) leaves its input
         * with some elements zeroed, so its exact exponent is the input's unless all of the
         * input's largest elements are gated away: that is the better guess. In the CNN's
         * training, relu1.dx's exponent differed from pool1.dx's in 3 of 99 steps, and from
         * its own last one in 40. (A ReLU gates its input by its own signs, and a FLEX16_5
         * guess is the Autoflex prediction the write makes.) */
        if (out->fmt == FMT_DFP16 && p->gate && p->gate != p->a) e = p->ec;
        fx_prof_span sp;
        fx_prof_begin(&sp);
        fx_sb_quant_pass(p, e, 1, &p->fused_q);
        fx_prof_end(&sp, FX_PROF_ROUNDING);
        p->fused_e = e;
        imax = (uint32_t)p->fused_q.max_abs_in;
        __atomic_fetch_add(&fx_sb_fused, 1, __ATOMIC_RELAXED);
    } else {
        imax = fx_sb_maxabs(p);
    }
    return fx_sb_decide(out, p, imax, func);
}

/* What both ops need: the path on, FLEX16_5/DFP16 host tensors, out whole and sharing storage
 * with neither input (the write may quantise twice: an Autoflex recompute reads the inputs
 * again; a partial view of out keeps another exponent path), contiguous inputs, a of out's
 * shape, and the backend's sum2 kernels. Fills the plan's common fields. */
static bool fx_sb_begin(fx_sb_plan *p, tensor_t *out, const tensor_t *a, const tensor_t *b)
{
    if (!fx_sb_enabled()) return false;
    if (!fmt_is_shared_exponent(out->fmt) || !fmt_is_shared_exponent(a->fmt) ||
        !fmt_is_shared_exponent(b->fmt))
        return false;
    if (out->st->on_device || a->st->on_device || b->st->on_device) return false;
    if (a->st == out->st || b->st == out->st || !fx_tensor_covers_storage(out) ||
        !fx_tensor_is_contiguous(a) || !fx_tensor_is_contiguous(b) ||
        !fx_shape_is(a, out->ndim, out->shape))
        return false;
    memset(p, 0, sizeof *p);
    p->be = fx_backend_active();
    p->n = fx_numel_of(out->ndim, out->shape);
    p->a = fx_tensor_base(a);
    p->dst = fx_tensor_base(out);
    return p->n > 0 && p->be->cvt.sum2_maxabs && p->be->cvt.sum2_quant;
}

/* The plan of out = a op b (add or sub) with a's values taken at exponent ea, or false where
 * this file does not take it. */
static bool fx_sb_plan_binary_at(fx_sb_plan *pp, fx_op op, tensor_t *out, const tensor_t *a,
                                 int ea, const tensor_t *b)
{
    fx_sb_plan p;
    if ((op != FX_OP_ADD && op != FX_OP_SUB) || !fx_sb_begin(&p, out, a, b)) return false;
    const int eb = b->st->exp;
    if (ea - eb > FX_SB_MAX_GAP || eb - ea > FX_SB_MAX_GAP) return false;
    const int64_t n = p.n;
    p.b = fx_tensor_base(b);
    p.ec = ea < eb ? ea : eb;
    p.sa = ea - p.ec;
    p.sb = eb - p.ec;
    p.negate_b = op == FX_OP_SUB;
    if (fx_shape_is(b, out->ndim, out->shape)) {
        p.inner = FX_SB_CHUNK;
        p.b_period = n;
    } else if (fx_broadcasts_per_channel(out, b)) {
        const int64_t C = out->shape[1], planes = out->shape[0] * C;
        const int64_t inner = n / planes; /* planes >= 1: n > 0 */
        if (inner >= 16) { /* planes of one b value each (a conv's bias) */
            p.per_plane = 1;
            p.C = C;
            p.inner = inner;
        } else if (inner == 1) { /* rows of a [N, C] tensor plus a [C] vector (a linear bias) */
            p.inner = C;
            p.b_period = C;
        } else {
            return false;
        }
    } else {
        return false;
    }
    *pp = p;
    return true;
}

/* The plan of out = a op b (add or sub), or false where this file does not take it. */
static bool fx_sb_plan_binary(fx_sb_plan *pp, fx_op op, tensor_t *out, const tensor_t *a,
                              const tensor_t *b)
{
    return fx_sb_plan_binary_at(pp, op, out, a, a->st->exp, b);
}

int fx_shared_binary(fx_op op, tensor_t *out, const tensor_t *a, const tensor_t *b)
{
    fx_sb_plan p;
    if (!fx_sb_plan_binary(&p, op, out, a, b)) return FX_SHARED_BINARY_NOT_TAKEN;
    return fx_sb_write(out, &p, op == FX_OP_ADD ? "tensor_add" : "tensor_sub");
}

/* The plan of out = a where gate > 0, else 0, or false where this file does not take it. */
static bool fx_sb_plan_gated(fx_sb_plan *p, tensor_t *out, const tensor_t *a,
                             const tensor_t *gate)
{
    if (!fx_sb_begin(p, out, a, gate) || !fx_shape_is(gate, out->ndim, out->shape)) return false;
    p->b = &fx_sb_zero; /* a + 0 at a's exponent, gated */
    p->gate = fx_tensor_base(gate);
    p->ec = a->st->exp;
    p->inner = FX_SB_CHUNK;
    p->per_plane = 1; /* one b value (0) for every unit */
    p->C = 1;
    return true;
}

int fx_shared_gated(tensor_t *out, const tensor_t *a, const tensor_t *gate, const char *func)
{
    fx_sb_plan p;
    if (!fx_sb_plan_gated(&p, out, a, gate)) return FX_SHARED_BINARY_NOT_TAKEN;
    return fx_sb_write(out, &p, func);
}

/* Documented in shared_binary.h. The plan is fx_shared_gated's for tensor_relu(y, u). */
int fx_relu_early_ok(tensor_t *y, const tensor_t *u, int *ey)
{
    fx_sb_plan p;
    return y && u && fx_sb_plan_gated(&p, y, u, u) && !y->st->dist && !u->st->dist &&
           fx_write_shared_guess_exp(y, ey);
}

/* Documented in shared_binary.h: fx_sb_unit_pass's ReLU on one piece. */
void fx_relu_piece(const int16_t *u, int16_t *y, int64_t n, int shift, fx_qstats *q)
{
    const fx_sum2 r = {u, &fx_sb_zero, 0, 0, 0, 0, u};
    fx_qstats part;
    fx_backend_active()->cvt.sum2_quant(&r, n, y, shift, &part);
    fx_qstats_merge(q, &part);
}

/* Documented in shared_binary.h: the decision fx_shared_gated's fx_sb_write makes after its
 * early pass, with the pieces' rounding in place of that pass. */
int fx_relu_early_finish(tensor_t *y, const tensor_t *u, int eu, int ey, const fx_qstats *q)
{
    return fx_relu_early_finish_src(y, u, eu, ey, q, NULL, NULL);
}

/* Documented in shared_binary.h. */
int fx_relu_early_finish_src(tensor_t *y, const tensor_t *u, int eu, int ey,
                             const fx_qstats *q, void (*u_ready)(void *), void *ctx)
{
    fx_sb_plan p;
    if (!fx_sb_plan_gated(&p, y, u, u) || u->st->exp != eu) {
        if (u_ready) u_ready(ctx);
        return tensor_relu(y, u);
    }
    fx_sb_prepare(&p);
    p.ec = eu;
    p.fused_e = ey;
    p.fused_q = *q;
    p.a_ready = u_ready;
    p.a_ctx = ctx;
    __atomic_fetch_add(&fx_sb_fused, 1, __ATOMIC_RELAXED);
    return fx_sb_decide(y, &p, (uint32_t)q->max_abs_in, "tensor_relu");
}

/* The two writes after an early pass: u's (pu.fused_q holds the statistics of u rounded at eu
 * into u, py.fused_q those of relu(u) rounded at ey into y), then y's. Where u's write keeps
 * eu, y's early values are relu(u) and its write reuses them unless it picks another exponent
 * (then it rounds again from u, as tensor_relu would); where u's write picks another exponent,
 * u is rounded again and y is written by tensor_relu itself. */
static int fx_sb_add_relu_decide(tensor_t *u, tensor_t *y, fx_sb_plan *pu, fx_sb_plan *py,
                                 int eu, int ey, const tensor_t *gate)
{
    pu->fused_e = eu;
    int rc = fx_sb_decide(u, pu, (uint32_t)pu->fused_q.max_abs_in, "tensor_add");
    if (rc) return rc;
    if (u->st->exp != eu) /* y's early values are not relu(u) (or u gated) */
        return gate ? tensor_relu_backward(y, u, gate) : tensor_relu(y, u);
    fx_sb_prepare(py); /* (keeps fused_q, the pass's ReLU statistics) */
    py->ec = eu;       /* the plan's a, u, now holds its values at eu */
    py->fused_e = ey;
    __atomic_fetch_add(&fx_sb_fused, 1, __ATOMIC_RELAXED);
    return fx_sb_decide(y, py, (uint32_t)py->fused_q.max_abs_in,
                        gate ? "tensor_relu_backward" : "tensor_relu");
}

/* The plans of u = t + bias (t's values at exponent et) and y = relu(u), and the exponents
 * guessed for u and y; false where the one-pass route does not take the two ops. The plans take
 * only shapes that fit (u of t's shape, bias of it or per channel / column). */
static bool fx_sb_add_relu_plans(tensor_t *u, tensor_t *y, const tensor_t *t, int et,
                                 const tensor_t *bias, fx_sb_plan *pu, fx_sb_plan *py, int *eu,
                                 int *ey, const tensor_t *gate)
{
    const bool ok = fx_sb_enabled() && u && y && t && bias &&
                    fx_sb_plan_binary_at(pu, FX_OP_ADD, u, t, et, bias) &&
                    fx_sb_plan_gated(py, y, u, gate ? gate : u) && y->st != t->st &&
                    y->st != bias->st && !u->st->dist && !y->st->dist &&
                    fx_write_shared_guess_exp(u, eu) && fx_write_shared_guess_exp(y, ey);
    /* a DFP16 gradient gated by another tensor's signs: the exponent of what it gates, as
     * fx_sb_write guesses it */
    if (ok && gate && y->fmt == FMT_DFP16) *ey = *eu;
    return ok;
}

/* Documented in shared_binary.h. One pass over u's work units rounds u = t + bias at u's
 * guessed exponent into u and, while the unit is in cache, y = relu(u) at y's guessed exponent
 * into y; then u's write decides, and y's. Each is the write its own op would make: the same
 * plans (fx_sb_plan_binary, fx_sb_plan_gated), the same statistics of the same roundings, the
 * same decision (fx_sb_decide). Where u's write keeps its guess, y's early values are relu(u)
 * and its write reuses them unless it picks another exponent (then it rounds again from u, as
 * tensor_relu would). Where u's write picks another exponent, u is rounded again and y is
 * written by tensor_relu itself. y is written before either write decides: safe for the
 * reason fx_sb_write gives (neither write can fail) and because y is then always written
 * again, or kept, by a write that completes. */
int fx_shared_add_relu(tensor_t *u, tensor_t *y, const tensor_t *t, const tensor_t *bias)
{
    fx_sb_plan pu, py;
    int eu, ey;
    if (!t || !fx_sb_add_relu_plans(u, y, t, t->st->exp, bias, &pu, &py, &eu, &ey, NULL))
        return FX_SHARED_BINARY_NOT_TAKEN;
    fx_sb_prepare(&pu);
    fx_prof_span sp;
    fx_prof_begin(&sp);
    const fx_sb_relu_out relu = {py.dst, ey - eu, &py.fused_q, NULL};
    fx_sb_pass(&pu, eu, 1, &pu.fused_q, &relu);
    fx_prof_end(&sp, FX_PROF_ROUNDING);
    __atomic_fetch_add(&fx_sb_fused, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&fx_sb_add_relu_made, 1, __ATOMIC_RELAXED);
    return fx_sb_add_relu_decide(u, y, &pu, &py, eu, ey, NULL);
}

/* Documented in shared_binary.h: fx_shared_add_relu's pass with y gated by gate's signs. */
int fx_shared_add_gated(tensor_t *u, tensor_t *y, const tensor_t *a, const tensor_t *b,
                        const tensor_t *gate)
{
    fx_sb_plan pu, py;
    int eu, ey;
    if (!a || !gate || gate->st == u->st ||
        !fx_sb_add_relu_plans(u, y, a, a->st->exp, b, &pu, &py, &eu, &ey, gate))
        return FX_SHARED_BINARY_NOT_TAKEN;
    fx_sb_prepare(&pu);
    fx_prof_span sp;
    fx_prof_begin(&sp);
    const fx_sb_relu_out relu = {py.dst, ey - eu, &py.fused_q, py.gate};
    fx_sb_pass(&pu, eu, 1, &pu.fused_q, &relu);
    fx_prof_end(&sp, FX_PROF_ROUNDING);
    __atomic_fetch_add(&fx_sb_fused, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&fx_sb_add_gated_made, 1, __ATOMIC_RELAXED);
    return fx_sb_add_relu_decide(u, y, &pu, &py, eu, ey, gate);
}

/* Documented in shared_binary.h: fx_shared_add_relu's pass made unit by unit by the producer of
 * t, with its decisions at the end. */
struct fx_add_relu_run {
    tensor_t *u, *y;
    fx_sb_plan pu, py;
    int eu, ey;
};

fx_add_relu_run *fx_add_relu_begin(tensor_t *u, tensor_t *y, const tensor_t *t, int et,
                                   const int16_t *tdata, const tensor_t *bias, int64_t unit)
{
    if (!tdata) return NULL;
    fx_add_relu_run *r = malloc(sizeof *r);
    if (!r) return NULL;
    r->u = u;
    r->y = y;
    if (!fx_sb_add_relu_plans(u, y, t, et, bias, &r->pu, &r->py, &r->eu, &r->ey, NULL) ||
        !r->pu.per_plane || r->pu.inner != unit) {
        free(r);
        return NULL;
    }
    r->pu.a = tdata; /* t's values at et, which t itself may never hold */
    return r;
}

void fx_add_relu_units(const fx_add_relu_run *r, int64_t lo, int64_t n, fx_qstats *qu,
                       fx_qstats *qy)
{
    const fx_sb_relu_out relu = {r->py.dst, r->ey - r->eu, NULL, NULL};
    const int64_t u0 = lo / r->pu.inner, u1 = (lo + n) / r->pu.inner;
    int64_t gated = 0;
    for (int64_t u = u0; u < u1; u++)
        gated += fx_sb_unit_pass(&r->pu, u, r->eu - r->pu.ec, 1, &relu, qu, qy);
    if (gated) __atomic_fetch_add(&fx_sb_gated_units, gated, __ATOMIC_RELAXED);
}

int fx_add_relu_finish(fx_add_relu_run *r, const fx_qstats *qu, const fx_qstats *qy)
{
    fx_sb_prepare(&r->pu); /* (the units ran on the plan's fields this leaves as they were) */
    r->pu.fused_q = *qu;
    r->py.fused_q = *qy;
    __atomic_fetch_add(&fx_sb_fused, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&fx_sb_add_relu_made, 1, __ATOMIC_RELAXED);
    const int rc = fx_sb_add_relu_decide(r->u, r->y, &r->pu, &r->py, r->eu, r->ey, NULL);
    free(r);
    return rc;
}

void fx_add_relu_cancel(fx_add_relu_run *r) { free(r); }
