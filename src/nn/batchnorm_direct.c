/* Batch norm's outputs straight into a shared-exponent tensor, without an fp32 stage: the
 * forward pass's y here, the backward pass's dx further down (batchnorm.c takes the forward
 * route for FLEX16_5/DFP16 mantissa inputs into a whole FLEX16_5/DFP16 output).
 *
 * The general route normalises every element into an fp32 stage (rounded to odd), and the write
 * then rounds the stage into y at the exponent it chooses from the stage's largest |value|: an
 * fp32 array written and read again, 8 MiB for one of ResNet-20's stage-1 layers at batch 128.
 * Here the write's exponent is known first, so each row is normalised into a small buffer and
 * rounded from there while it is in L1:
 *   - the largest |output| is exact without computing the outputs: per channel an output is
 *     y(v) = odd32(((v - mean) * a) + b) in double, a composition of monotone roundings of v, so
 *     its extreme values are those of the channel's smallest and largest input (which the
 *     kernels' integer pass, sum_range_i16, finds with the mean's sum);
 *   - the write (fx_write_shared_with) decides the exponent from it as it would from the stage
 *     (DFP16 exactly, FLEX16_5 by Autoflex), and asks for the rounding through bn_quantize: each
 *     piece of a row is normalised by the level's kernel into fp32 (the stage's values) and
 *     rounded by the level's quant_f32 with the piece's element offset (the stage's rounding,
 *     stochastic rounding included), its statistics merged (maxima and counts, so in any
 *     order).
 * The same values are rounded by the same code as on the general route, so y, its exponent and
 * the write's statistics are the same bits (tests/test_bn_kernels.c compares the two). */
#include "bn_direct.h"
#include "nn_stage.h"
#include "../core/backend.h"
#include "../core/dispatch.h"
#include "../core/profile_counters.h"
#include "../core/shared_binary.h"
#include "../flex/flex_math.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define PIECE 1024 /* values normalised into the stack buffer at a time */

static atomic_int direct_enabled = 1;
static atomic_llong direct_runs, relu_runs;
static atomic_int y_unkept_enabled = 1;
static atomic_llong y_unkept_runs, y_stored_late;

int64_t fx_bn_direct_relu_runs(void) { return atomic_load(&relu_runs); }
void fx_bn_y_unkept_set_enabled(int on) { atomic_store(&y_unkept_enabled, on != 0); }
int64_t fx_bn_y_unkept_runs(void) { return atomic_load(&y_unkept_runs); }
int64_t fx_bn_y_stored_late(void) { return atomic_load(&y_stored_late); }

void fx_bn_direct_set_enabled(int on) { atomic_store(&direct_enabled, on != 0); }
int64_t fx_bn_direct_runs(void) { return atomic_load(&direct_runs); }

/* A pass of either route: every row's pieces (or several short rows) made into an L1 buffer
 * by fill (the level's kernel on the piece's element offset o and channel ch), each rounded there at e by the
 * level's quant_f32 with that offset (the stage's rounding, stochastic rounding included), into
 * dst with keep, and the rounding's statistics merged into *q. Each thread merges its pieces'
 * statistics into a local and into *q once: merged per piece into per-thread entries that share
 * cache lines, the two cores passed those lines back and forth after every row of a small
 * layer (ResNet-20's 64-channel batch norm, batch 128, two threads on a Zen 5: 0.61 ms that way,
 * 0.24 ms this way). The merges are sums and maxima, so their order does not change the result.
 *
 * Where the channels split evenly over the threads in the groups (fx_bn_group_size) of the
 * pass before it, the statistics or the gradient sums, each thread walks the channels that
 * pass gave it (OpenMP's static split, computed here), last image first: the rows that pass
 * read last are the likeliest still in this core's L2 (ResNet-20's 32- and 64-channel layers
 * fit whole). Walked image by image over all channels, each thread read half its rows from
 * the other core's share. Where they do not (a few channels, or a last group short of
 * channels), the threads split the rows evenly instead, so that none waits on another. */
typedef void (*bn_fill_fn)(const void *ctx, int64_t ch, int64_t o, float *buf, int64_t len);

/* The same values rounded at e in registers (the level's normalize_i16 or backward_i16: the
 * same bits, without the buffer): into dst (NULL: not kept), the rounding's statistics added
 * to *acc; 0 where the kernel declined, and the piece then takes the buffer. A pass has one only
 * for nearest-even rounding, on a level that has the kernels, with the route enabled. */
typedef int (*bn_fill_q_fn)(const void *ctx, int64_t ch, int64_t o, int16_t *dst, int64_t len,
                            int e, fx_bn_q16 *acc);

static atomic_int q16_enabled = 1;
static atomic_llong q16_pieces;

void fx_bn_q16_set_enabled(int on) { atomic_store(&q16_enabled, on != 0); }
int64_t fx_bn_q16_pieces(void) { return atomic_load(&q16_pieces); }

/* The ReLU a forward pass makes of its kept rounding, piece by piece while the piece is in
 * cache (fx_relu_piece): relu(y) `shift` places from y's exponent into dst, its statistics
 * merged into *q. With y_unkept, y's rounded pieces go to each thread's scratch, from which
 * the ReLU reads them, and y itself is not written (fx_bn_forward_direct's y_written). */
typedef struct bn_relu_out {
    int16_t *dst;
    int shift;
    fx_qstats *q;
    int y_unkept;
} bn_relu_out;

/* A pass's settings, and a piece of it: n values at element offset o, made into buf by fill,
 * rounded from there and (with relu) their ReLU made, the statistics merged into *mine and
 * *mine_relu */
typedef struct bn_pass {
    const fx_bn_dims *d;
    bn_fill_fn fill;
    const void *ctx;
    int16_t *dst;
    int e, keep;
    const fx_rounding *r;
    const bn_relu_out *relu;
    bn_fill_q_fn fill_q; /* NULL: every piece through the buffer */
} bn_pass;

/* where the rounded piece at element offset o goes: into y (NULL where the pass keeps
 * nothing), or where the pass keeps only relu(y), into the thread's scratch ybuf (PIECE
 * elements) */
static int16_t *bn_piece_y(const bn_pass *p, int64_t o, int16_t *ybuf)
{
    if (p->relu && p->relu->y_unkept) return ybuf;
    return p->keep ? p->dst + o : NULL;
}

/* a piece's rounding made into y (statistics st): merged, and its ReLU made where the pass
 * asks */
static void bn_piece_done(const bn_pass *p, int64_t o, int64_t n, const int16_t *y,
                          const fx_qstats *st, fx_qstats *mine, fx_qstats *mine_relu)
{
    fx_qstats_merge(mine, st);
    if (p->relu) fx_relu_piece(y, p->relu->dst + o, n, p->relu->shift, mine_relu);
}

static void bn_round_piece(const bn_pass *p, int64_t o, int64_t n, const float *buf,
                           int16_t *ybuf, fx_qstats *mine, fx_qstats *mine_relu)
{
    fx_qstats st;
    fx_qstats_init(&st);
    int16_t *y = bn_piece_y(p, o, ybuf);
    fx_backend_active()->cvt.quant_f32(buf, y, n, p->e, p->r, o, &st);
    bn_piece_done(p, o, n, y, &st, mine, mine_relu);
}

int fx_bn_q16_stats(const fx_bn_q16 *r, fx_qstats *st)
{
    double max_t = r->tail_max_t;
    int64_t nsat = r->tail_sat, nuf = r->tail_zero_m - r->tail_zero_t;
    int32_t max_out = r->tail_max_out;
    for (int i = 0; i < 4; i++) {
        max_t = r->max_t[i] > max_t ? r->max_t[i] : max_t;
        nuf -= r->zero_t[i];
    }
    for (int i = 0; i < 8; i++) {
        nsat += r->sat[i];
        nuf += r->zero_m[i];
        max_out = r->max_out[i] > max_out ? r->max_out[i] : max_out;
    }
    if (!(max_t <= FLT_MAX)) return 0;
    st->saturated = nsat;
    st->nonfinite = 0;
    st->underflow = nuf;
    st->max_abs_in = (double)fabsf(nn_round_f32(max_t, 1));
    st->max_abs_out = max_out;
    return 1;
}

/* elements [o, o + len) of channel ch rounded in registers into y (NULL: not kept) and
 * *acc: 0 where the kernel declined (what it stored is then overwritten through the buffer) */
static int bn_q_segment(const bn_pass *p, int64_t ch, int64_t o, int64_t len, int16_t *y,
                        fx_bn_q16 *acc)
{
    return p->fill_q(p->ctx, ch, o, y, len, p->e, acc);
}

/* whole rows [r0, r1), consecutive in memory, as one piece (at most PIECE elements); 1 where
 * it was rounded in registers */
static int bn_rows_piece(const bn_pass *p, int64_t r0, int64_t r1, float *buf, int16_t *ybuf,
                         fx_qstats *mine, fx_qstats *mine_relu)
{
    const int64_t C = p->d->C, S = p->d->S;
    if (p->fill_q) {
        fx_bn_q16 acc;
        memset(&acc, 0, sizeof acc);
        fx_qstats st;
        int16_t *y = bn_piece_y(p, r0 * S, ybuf);
        int64_t row = r0;
        while (row < r1 &&
               bn_q_segment(p, row % C, row * S, S, y ? y + (row - r0) * S : NULL, &acc))
            row++;
        if (row == r1 && fx_bn_q16_stats(&acc, &st)) {
            bn_piece_done(p, r0 * S, (r1 - r0) * S, y, &st, mine, mine_relu);
            return 1;
        }
    }
    for (int64_t row = r0; row < r1; row++)
        p->fill(p->ctx, row % C, row * S, buf + (row - r0) * S, S);
    bn_round_piece(p, r0 * S, (r1 - r0) * S, buf, ybuf, mine, mine_relu);
    return 0;
}

/* elements [s0, s0 + len) of one row as one piece; 1 where it was rounded in registers */
static int bn_part_piece(const bn_pass *p, int64_t row, int64_t s0, int64_t len, float *buf,
                         int16_t *ybuf, fx_qstats *mine, fx_qstats *mine_relu)
{
    const int64_t o = row * p->d->S + s0;
    fx_bn_q16 acc;
    memset(&acc, 0, sizeof acc);
    fx_qstats st;
    int16_t *y = bn_piece_y(p, o, ybuf);
    if (p->fill_q && bn_q_segment(p, row % p->d->C, o, len, y, &acc) &&
        fx_bn_q16_stats(&acc, &st)) {
        bn_piece_done(p, o, len, y, &st, mine, mine_relu);
        return 1;
    }
    p->fill(p->ctx, row % p->d->C, o, buf, len);
    bn_round_piece(p, o, len, buf, ybuf, mine, mine_relu);
    return 0;
}

/* rows [rb, re), consecutive in memory, in pieces: rows shorter than a piece several at a time
 * (per of them), longer ones cut into pieces; returns the pieces rounded in registers (counted
 * once per thread: an atomic add per piece would pass its line between the cores) */
static int64_t bn_walk_rows(const bn_pass *p, int64_t rb, int64_t re, int64_t per, float *buf,
                            int16_t *ybuf, fx_qstats *mine, fx_qstats *mine_relu)
{
    const int64_t S = p->d->S;
    int64_t in_registers = 0;
    if (per > 1) {
        for (int64_t r0 = rb; r0 < re; r0 += per)
            in_registers += bn_rows_piece(p, r0, r0 + per < re ? r0 + per : re, buf, ybuf, mine,
                                          mine_relu);
        return in_registers;
    }
    for (int64_t row = rb; row < re; row++)
        for (int64_t s0 = 0; s0 < S; s0 += PIECE)
            in_registers += bn_part_piece(p, row, s0, S - s0 < PIECE ? S - s0 : PIECE, buf, ybuf,
                                          mine, mine_relu);
    return in_registers;
}

/* [*lo, *hi): part `tid` of n items split into `parts` as schedule(static) splits them (the
 * first n mod parts parts one more) */
static void bn_static_part(int64_t n, int64_t parts, int64_t tid, int64_t *lo, int64_t *hi)
{
    const int64_t share = n / parts, extra = n % parts;
    *lo = tid * share + (tid < extra ? tid : extra);
    *hi = *lo + share + (tid < extra ? 1 : 0);
}

static void bn_round_rows(const fx_bn_dims *d, int nt, bn_fill_fn fill, bn_fill_q_fn fill_q,
                          const void *ctx, int16_t *dst, int e, const fx_rounding *r, int keep,
                          fx_qstats *q, const bn_relu_out *relu)
{
    const int64_t C = d->C, S = d->S;
    const int64_t gsz = fx_bn_group_size(C, nt), ngroups = (C + gsz - 1) / gsz;
    /* rows shorter than a piece go to the buffer several at a time, consecutive rows being
     * consecutive elements (a group's channels of one image), and are rounded in one call:
     * ResNet-20's 8 x 8 planes made a kernel call and a rounding call per 64 values (the same
     * bits: the rounding is element by element at each element's offset) */
    const int64_t per = S > 0 && S < PIECE ? PIECE / S : 1;
    /* the registers route rounds to nearest only (stochastic rounding draws per element from
     * the buffer's offsets) */
    if ((r && r->mode == FX_ROUND_STOCHASTIC) || !atomic_load(&q16_enabled)) fill_q = NULL;
    const bn_pass p = {d, fill, ctx, dst, e, keep, r, relu, fill_q};
    fx_qstats_init(q);
    if (relu) fx_qstats_init(relu->q);
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        fx_qstats mine, mine_relu;
        fx_qstats_init(&mine);
        fx_qstats_init(&mine_relu);
#ifdef _OPENMP
        const int64_t tid = omp_get_thread_num(), nthr = omp_get_num_threads();
#else
        const int64_t tid = 0, nthr = 1;
#endif
        float buf[PIECE];
        int16_t ybuf[PIECE]; /* a piece of y where the pass keeps only relu(y) */
        int64_t in_registers = 0;
        if (C % gsz == 0 && ngroups % nthr == 0) {
            /* this thread's groups, and so its channels, as the channel pass had them */
            int64_t g0, g1;
            bn_static_part(ngroups, nthr, tid, &g0, &g1);
            const int64_t cb = g0 * gsz, ce = g1 * gsz;
            for (int64_t n = cb < ce ? d->N - 1 : -1; n >= 0; n--)
                in_registers += bn_walk_rows(&p, n * C + cb, n * C + ce, per, buf, ybuf,
                                             &mine, &mine_relu);
        } else {
            int64_t r0, r1;
            bn_static_part(d->N * C, nthr, tid, &r0, &r1);
            in_registers += bn_walk_rows(&p, r0, r1, per, buf, ybuf, &mine, &mine_relu);
        }
        if (in_registers)
            atomic_fetch_add_explicit(&q16_pieces, in_registers, memory_order_relaxed);
#ifdef _OPENMP
#pragma omp critical(fx_bn_round_rows_merge)
#endif
        {
            fx_qstats_merge(q, &mine);
            if (relu) fx_qstats_merge(relu->q, &mine_relu);
        }
    }
}

typedef struct bn_direct_ctx {
    const fx_bn_kernels *k;
    const fx_bn_src *x;
    const fx_bn_dims *d;
    const double *mu, *a, *b; /* per channel */
    int16_t *dst;             /* y's mantissas */
    int nt;
    /* the ReLU made with y (fx_bn_forward_direct's relu_y), else NULL */
    tensor_t *relu_y;
    int relu_guess;     /* relu_y's guessed exponent (FLEX16_5: its Autoflex prediction) */
    float top;          /* y's largest value before rounding (0 when none is positive) */
    int relu_eu, relu_ey; /* the kept pass: relu(y) rounded at relu_ey from y at relu_eu */
    fx_qstats relu_q;     /* ... and its statistics (relu_eu FX_EXP_NONE: no pass made it) */
    int unkept_ok;        /* the caller lets y go unwritten (fx_bn_forward_direct's y_written) */
    int y_unkept;         /* the kept pass left y unwritten: bn_store_y writes it */
    fx_rounding relu_r;   /* ... and that pass's rounding */
} bn_direct_ctx;

static void bn_normalize_piece(const void *vctx, int64_t ch, int64_t o, float *buf, int64_t len)
{
    const bn_direct_ctx *c = vctx;
    c->k->normalize(c->x, o, buf, len, c->mu[ch], c->a[ch], c->b[ch], 1, NULL);
}

static int bn_normalize_piece_q(const void *vctx, int64_t ch, int64_t o, int16_t *dst,
                                int64_t len, int e, fx_bn_q16 *acc)
{
    const bn_direct_ctx *c = vctx;
    return c->k->normalize_i16(c->x, o, dst, len, c->mu[ch], c->a[ch], c->b[ch], e, acc);
}

/* relu(y)'s exponent to round at, with y at e: for DFP16 the write's own choice, from relu(y)'s
 * largest mantissa, which is y's largest value rounded at e (rounding is monotone; its offset
 * matters only to stochastic rounding, where this is a guess like any other); for FLEX16_5 the
 * Autoflex prediction. A wrong guess costs a pass over y, not a bit. */
static int bn_relu_exp(const bn_direct_ctx *c, int e, const fx_rounding *r)
{
    const fx_storage *st = c->relu_y->st;
    if (st->fmt != FMT_DFP16) return c->relu_guess;
    int16_t m = 0;
    fx_qstats qs;
    fx_qstats_init(&qs);
    fx_backend_active()->cvt.quant_f32(&c->top, &m, 1, e, r, 0, &qs);
    int clamped;
    const uint64_t imax = m > 0 ? (uint64_t)m : 0;
    return fx_dfp16_write_exp(0, ldexp((double)imax, e), imax, e, st->exp, st->win_lo, st->win_hi,
                              &clamped);
}

/* the level's in-register rounding of normalised pieces, where it has one */
static bn_fill_q_fn bn_normalize_q_of(const bn_direct_ctx *c)
{
    return c->k->normalize_i16 ? bn_normalize_piece_q : NULL;
}

static int bn_quantize(void *vctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    bn_direct_ctx *c = vctx;
    const bn_fill_q_fn fill_q = bn_normalize_q_of(c);
    if (!keep || !c->relu_y) {
        bn_round_rows(c->d, c->nt, bn_normalize_piece, fill_q, c, c->dst, e, r, keep, q, NULL);
        return FX_OK;
    }
    /* y's kept rounding, and relu(y) from it while each piece is in cache; where the caller
     * allows, relu(y) alone (nearest rounding: bn_store_y makes the same y again if needed) */
    const int ey = bn_relu_exp(c, e, r);
    const int unkept = c->unkept_ok && (!r || r->mode != FX_ROUND_STOCHASTIC);
    const bn_relu_out relu = {(int16_t *)fx_tensor_base(c->relu_y), ey - e, &c->relu_q, unkept};
    bn_round_rows(c->d, c->nt, bn_normalize_piece, fill_q, c, c->dst, e, r, keep, q, &relu);
    c->relu_eu = e;
    c->relu_ey = ey;
    c->y_unkept = unkept;
    c->relu_r = r ? *r : (fx_rounding){FX_ROUND_NEAREST_EVEN, 0, 0};
    return FX_OK;
}

/* y's mantissas, where the kept pass left them unwritten: that pass's rounding again into y
 * (the same values: a pure function of x, the channel constants and the exponent), its
 * statistics dropped (the write has them). For whatever reads y next: relu_y's write rounding
 * again from it, or the ReLU's gradient where relu_y's signs are not y's. */
static void bn_store_y(void *vctx)
{
    bn_direct_ctx *c = vctx;
    if (!c->y_unkept) return;
    fx_qstats q;
    bn_round_rows(c->d, c->nt, bn_normalize_piece, bn_normalize_q_of(c), c, c->dst, c->relu_eu,
                  &c->relu_r, 1, &q, NULL);
    c->y_unkept = 0;
    atomic_fetch_add(&y_stored_late, 1);
}

/* whether relu_y > 0 exactly where y > 0, with both writes settled: relu_y rounds y's
 * mantissas from y's exponent; at an exponent no coarser that is a left shift (saturating at
 * the largest mantissa), which keeps every sign, while a coarser one rounds y's smallest
 * positive mantissas to 0 */
static int bn_relu_signs_are_y(const tensor_t *y, const tensor_t *relu_y)
{
    const fx_storage *sy = y->st, *sr = relu_y->st;
    if ((sy->pending && sy->pending->active) || (sr->pending && sr->pending->active)) return 0;
    return sr->exp <= sy->exp;
}

int fx_bn_direct_ok(const tensor_t *y, const tensor_t *x, const fx_bn_src *xs)
{
    return atomic_load(&direct_enabled) && xs->kind == FX_BN_I16 &&
           fmt_is_shared_exponent(y->fmt) && fx_tensor_covers_storage(y) && y->st != x->st;
}

int fx_bn_forward_direct(tensor_t *y, const fx_bn_src *xs, const fx_bn_dims *d,
                         const fx_bn_kernels *k, const double *mu, const double *a,
                         const double *b, const int16_t *lo, const int16_t *hi,
                         tensor_t *relu_y, int *relu_done, int *y_written, const char *func)
{
    if (relu_done) *relu_done = 0;
    if (y_written) *y_written = 1;
    const int64_t C = d->C, S = d->S;
    if (d->N * S == 0) return FX_BN_DIRECT_DECLINED; /* no inputs, no extremes: the stage route */
    const int nt = nn_threads_for(d->N * C * S);
    /* the largest |output| from each channel's extreme inputs (the portable kernel on them) */
    double true_max = 0.0;
    float top = 0.0f;
    int nonfinite = 0;
    for (int64_t ch = 0; ch < C; ch++) {
        const int16_t ends[2] = {lo[ch], hi[ch]};
        const fx_bn_src e = {ends, FX_BN_I16, xs->scale};
        float q[2];
        fx_bn_kernels_portable.normalize(&e, 0, q, 2, mu[ch], a[ch], b[ch], 1, NULL);
        for (int i = 0; i < 2; i++) {
            const double v = fabs((double)q[i]);
            nonfinite |= !isfinite(v);
            if (isfinite(v)) true_max = v > true_max ? v : true_max;
            top = q[i] > top ? q[i] : top;
        }
    }
    if (nonfinite) return FX_BN_DIRECT_DECLINED; /* the stage route counts them */
    bn_direct_ctx c = {k, xs, d, mu, a, b, (int16_t *)fx_tensor_base(y), nt, NULL,
                       FX_EXP_NONE, top, FX_EXP_NONE, FX_EXP_NONE, {0}, 0, 0, {0, 0, 0}};
    /* relu(y) made with y where tensor_relu would take its one-pass route: relu_y is then
     * written before either write decides, which is safe as fx_shared_add_relu's early pass
     * is (neither write can fail, and relu_y is always written again or kept by a write that
     * completes) */
    if (relu_y && fx_relu_early_ok(relu_y, y, &c.relu_guess)) {
        c.relu_y = relu_y;
        c.unkept_ok = y_written && atomic_load(&y_unkept_enabled);
    }
    fx_shared_src src = {.kind = FX_STAGE_F32, .true_max = true_max, .ctx = &c,
                         .quantize = bn_quantize};
    int rc = fx_write_shared_with(y, &src, func);
    if (rc == FX_OK) atomic_fetch_add(&direct_runs, 1);
    if (rc == FX_OK && c.relu_eu != FX_EXP_NONE) {
        /* y's write kept the last rounding it asked for: relu(y) stands on it where that was at
         * y's exponent now (else fx_relu_early_finish rounds it again from y, which bn_store_y
         * writes first where the pass left it unwritten) */
        if (y->st->exp == c.relu_eu) atomic_fetch_add(&relu_runs, 1);
        rc = fx_relu_early_finish_src(relu_y, y, c.relu_eu, c.relu_ey, &c.relu_q, bn_store_y,
                                      &c);
        if (relu_done) *relu_done = 1;
    }
    /* y stays unwritten only where relu_y's signs stand for it, the ReLU's gradient then being
     * gated by relu_y (fx_bn_forward_direct's contract); else, and after a failed write (whose
     * y the stage route would have left written), y is written now */
    if (c.y_unkept && (rc != FX_OK || !bn_relu_signs_are_y(y, relu_y))) bn_store_y(&c);
    if (c.y_unkept) {
        *y_written = 0;
        atomic_fetch_add(&y_unkept_runs, 1);
    }
    return rc;
}

/* ---- the backward pass: dx rounded at a guessed exponent -------------------------------------
 * dx's largest |value| is not known before its values are: they depend on x and dy together.
 * The stage route writes every value into an fp32 stage (8 MiB for one of ResNet-20's stage-1
 * layers at batch 128), which the write reads again to round: on a Zen 5 the stores of that
 * stage took most of the backward kernel's time. Where dx's exponent can be guessed before the
 * write (fx_write_shared_guess_exp: FLEX16_5's Autoflex prediction, which is then the write's
 * choice unless an overflow is recomputed; DFP16's current exponent), each piece of a row is
 * computed into a small buffer by the level's backward kernel and rounded from there at the
 * guess into dx, with the statistics of the values (the stage's largest finite |value| and
 * NaN/Inf count) and of the rounding kept. The write then decides from those statistics as it
 * would from the stage's; where it asks for the guessed exponent and rounding, the rounding is
 * already in dx, and anywhere else (a recompute, a DFP16 scale that moved, an Autoflex trial)
 * the pieces are computed and rounded again from x and dy, which the route leaves intact. The
 * values are those of the stage and are rounded by the same code with the same element offsets,
 * so dx, its exponent and every statistic are the stage route's bits (tests/test_bn_kernels.c).
 * dx is written before its write decides, so the route needs a write that cannot fail
 * (fx_write_i16_cannot_fail); the write itself is fx_guessed_write's (src/core/dispatch.h). */
static atomic_int bwd_direct_enabled = 1;
static atomic_llong bwd_direct_runs;
static int64_t bwd_direct_missed;

void fx_bn_backward_direct_set_enabled(int on) { atomic_store(&bwd_direct_enabled, on != 0); }
int64_t fx_bn_backward_direct_runs(void) { return atomic_load(&bwd_direct_runs); }
int64_t fx_bn_backward_direct_missed(void)
{
    return __atomic_load_n(&bwd_direct_missed, __ATOMIC_RELAXED);
}

typedef struct bn_bwd_ctx {
    const fx_bn_kernels *k;
    const fx_bn_src *x, *g;
    const fx_bn_coefs *cf;
    const fx_bn_dims *d;
    int nt;
} bn_bwd_ctx;

/* The backward kernel on a piece. The rounding's statistics include the values' largest finite
 * |value| and their NaN/Inf count (max_abs_in and nonfinite: fx_qstats), which are what the
 * write's scan of a stage finds, so the kernel keeps no statistics of its own (keeping them,
 * in mask registers, took about a third of its time on a Zen 5). */
static void bn_backward_piece(const void *vctx, int64_t ch, int64_t o, float *buf, int64_t len)
{
    const bn_bwd_ctx *c = vctx;
    const fx_bn_coefs *cf = c->cf;
    c->k->backward(c->x, c->g, o, buf, len, cf->mu[ch], cf->is[ch], cf->k[ch], cf->mdy[ch],
                   cf->mdyx[ch], 1, NULL);
}

static int bn_backward_piece_q(const void *vctx, int64_t ch, int64_t o, int16_t *dst,
                               int64_t len, int e, fx_bn_q16 *acc)
{
    const bn_bwd_ctx *c = vctx;
    const fx_bn_coefs *cf = c->cf;
    return c->k->backward_i16(c->x, c->g, o, dst, len, cf->mu[ch], cf->is[ch], cf->k[ch],
                              cf->mdy[ch], cf->mdyx[ch], e, acc);
}

/* fx_round_all_fn: every piece computed and rounded at e into dst (NULL: statistics only) */
static int bn_bwd_round_all(void *vctx, int16_t *dst, int e, const fx_rounding *r, fx_qstats *q)
{
    const bn_bwd_ctx *c = vctx;
    fx_prof_span sp;
    fx_prof_begin(&sp);
    bn_round_rows(c->d, c->nt, bn_backward_piece, c->k->backward_i16 ? bn_backward_piece_q : NULL,
                  c, dst, e, r, dst != NULL, q, NULL);
    fx_prof_end(&sp, FX_PROF_ROUNDING);
    return FX_OK;
}

int fx_bn_backward_direct_ok(const tensor_t *dx, const tensor_t *x, const tensor_t *dy,
                             const fx_bn_dims *d, int *e)
{
    return atomic_load(&bwd_direct_enabled) && d->N * d->S > 0 &&
           fmt_is_shared_exponent(dx->fmt) && fx_tensor_covers_storage(dx) &&
           dx->st != x->st && dx->st != dy->st && fx_write_i16_cannot_fail(dx) &&
           fx_write_shared_guess_exp(dx, e);
}

int fx_bn_backward_direct(tensor_t *dx, int e, const fx_bn_src *xs, const fx_bn_src *gs,
                          const fx_bn_dims *d, const fx_bn_kernels *k, const fx_bn_coefs *cf,
                          const char *func)
{
    bn_bwd_ctx c = {k, xs, gs, cf, d, nn_threads_for(d->N * d->C * d->S)};
    const int rc = fx_guessed_write(dx, e, bn_bwd_round_all, &c, &bwd_direct_missed, func);
    if (rc == FX_OK) atomic_fetch_add(&bwd_direct_runs, 1);
    return rc;
}
