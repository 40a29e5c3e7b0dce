/* tensor_matmul and tensor_bmm of FLEX16_5 / DFP16 tensors without a whole int64 stage (ops.c
 * and bmm.c call this before their staged routes).
 *
 * Why: the dispatcher's integer route writes every exact sum into an int64 stage, 8 bytes per
 * output, and the write reads it back to round it into 2. Where each output has few products
 * (K = 25 to 64, a convolution's shapes as plain products, attention scores) that traffic, not
 * the multiplies, sets the time: the 800 x 25088 x 64 product spent most of its 42 ms moving
 * a 160 MB stage. Here the product runs in blocks of output whose sums stay in cache (a few
 * hundred KiB), and each block is rounded at once at a guess of the output's exponent
 * (fx_write_shared_guess_exp: FLEX16_5's Autoflex prediction, DFP16's current exponent) into
 * an int16 buffer, with its statistics; the kernels report each block's largest |sum| exactly.
 * The write then decides from those as it would from a stage. It keeps the guess in steady
 * training, and the buffer becomes out's storage (fx_sm_adopt). Where it asks for another
 * exponent, the write fails before anything is committed (its decision touches no state
 * until it succeeds): a DFP16 scale that moved runs the blocks again guessing the exponent asked for (the exact one
 * of the same sums); a FLEX16_5 overflow that the write recomputes, an Autoflex trial, or a
 * second miss hands the product to the dispatcher, which computes it again with a whole stage:
 * the same exact sums, so the same decision and bits. The route is taken where the guess
 * held for the output's last FX_GUESS_STEADY_WRITES writes, so that such misses stay rare, and
 * for an output whose guess did not hold where the AMX kernel rounds the product at it
 * (below): a DFP16 miss runs it again, in registers unless the exponent asked for is beyond
 * what the kernel rounds there; a FLEX16_5 one goes to the dispatcher as above.
 *
 * Where the level's kernel rounds the product itself (gemm.i16_rounds: the AMX kernel in one K
 * block, fx_gemm_i16_amx_rounds, each sum while it is in registers; the register-tile driver
 * where one group of K blocks holds the whole K, fx_gemm_i16_rounds, each column of tiles from
 * a buffer in cache) it rounds each sum at the guess (fx_op_call.out_i16), so there are no
 * int64 blocks at all and the product runs whole, each item in one call; this also takes
 * products from FX_SM_MAX_K. Below, "in registers" names both. A guess at which
 * some sum would saturate (its largest |sum| above fx_q64_fast_bound) is the one case that
 * rounding does not cover. For DFP16 that guess is a miss anyway, and the run in registers
 * measured the exact largest |sum|, from which the write's exponent follows: a dry write asks
 * for it and the product runs again in registers at once (fx_sm_ask_dry). Otherwise (FLEX16_5,
 * whose Autoflex may keep or recompute a saturated write) the product runs again in int64
 * blocks, as on other levels.
 *
 * The sums are exact integers whatever the blocking, and the rounding and statistics are
 * elementwise, counts and maxima, so the result is the dispatcher's bit for bit
 * (tests/test_shared_matmul.c). */
#include "shared_matmul.h"
#include "compose.h"
#include "dispatch.h"
#include "profile_counters.h"
#include "../flex/flex_math.h"
#include "../flex/gemm_i16.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Outputs below this many elements keep the dispatcher's route: their stage stays in cache. */
#define FX_SM_MIN_OUT_DEFAULT ((int64_t)1 << 17)
/* int64 sums of one block: 1 MiB, within a core's L2 on the CPUs measured (2 MiB on the Xeon,
 * 1 MiB on Zen 4) */
#define FX_SM_CHUNK_DEFAULT ((int64_t)1 << 17)
/* From this many products per output (2K operations each) the stage costs less than the
 * repacking of operands that the blocks add (products the kernel rounds itself have no
 * blocks): one thread on the Xeon reporting model 167, flex16_5 1024^3 at 418-426 GOP/s with
 * blocks against 410-453 without, 2048^3 at 418 against 483; 800 x 25088 x 64 at 115 against
 * 64, 64 x 25088 x 800 at 247 against 212. */
#define FX_SM_MAX_K 1024
/* Rows of a block (fx_sm_blocks), and the least number of its columns (the widest register
 * tile has 32). */
#define FX_SM_ROWS 256
#define FX_SM_MIN_EDGE 64

static int fx_sm_enabled_flag = 1;
static int64_t fx_sm_min_out = FX_SM_MIN_OUT_DEFAULT, fx_sm_chunk = FX_SM_CHUNK_DEFAULT;
static int64_t fx_sm_taken, fx_sm_missed, fx_sm_rerun, fx_sm_in_registers, fx_sm_not_covered,
    fx_sm_asked_dry, fx_sm_direct_taken, fx_sm_adopted;

void fx_shared_matmul_set_enabled(int on)
{
    __atomic_store_n(&fx_sm_enabled_flag, on != 0, __ATOMIC_RELAXED);
}

void fx_shared_matmul_set_sizes(int64_t min_out, int64_t chunk)
{
    __atomic_store_n(&fx_sm_min_out, min_out > 0 ? min_out : FX_SM_MIN_OUT_DEFAULT,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&fx_sm_chunk, chunk > 0 ? chunk : FX_SM_CHUNK_DEFAULT, __ATOMIC_RELAXED);
}

int64_t fx_shared_matmul_taken(void) { return __atomic_load_n(&fx_sm_taken, __ATOMIC_RELAXED); }
int64_t fx_shared_matmul_missed(void) { return __atomic_load_n(&fx_sm_missed, __ATOMIC_RELAXED); }
int64_t fx_shared_matmul_rerun(void) { return __atomic_load_n(&fx_sm_rerun, __ATOMIC_RELAXED); }
int64_t fx_shared_matmul_in_registers(void)
{
    return __atomic_load_n(&fx_sm_in_registers, __ATOMIC_RELAXED);
}
int64_t fx_shared_matmul_not_covered(void)
{
    return __atomic_load_n(&fx_sm_not_covered, __ATOMIC_RELAXED);
}
int64_t fx_shared_matmul_asked_dry(void)
{
    return __atomic_load_n(&fx_sm_asked_dry, __ATOMIC_RELAXED);
}
int64_t fx_shared_matmul_adopted(void)
{
    return __atomic_load_n(&fx_sm_adopted, __ATOMIC_RELAXED);
}

int64_t fx_shared_matmul_direct(void)
{
    return __atomic_load_n(&fx_sm_direct_taken, __ATOMIC_RELAXED);
}

typedef struct fx_sm_plan {
    const fx_backend *be;
    fx_operand a, b;        /* item 0's a: [M, K] and b: [K, N], any strides */
    fx_sm_items ai, bi;     /* where each item's operands begin (a single item: zero steps) */
    int64_t batch;          /* items: out holds [batch, M, N] */
    int64_t M, N, K, mc, nc;
    int ec;          /* the sums' exponent, a.exp + b.exp */
    int guess;       /* the exponent every block is rounded at */
    int nt_items;    /* > 0: whole items on this many threads at once (fx_sm_run_items) */
    int amx_rounds;  /* the level's AMX kernel can round this shape in registers */
    int rounds;      /* the level's kernel can round this shape (gemm.i16_rounds), on AMX or
                      * from a column of register tiles */
    int16_t *tmp;    /* [batch, M, N]: the rounding at guess, out's storage once kept
                      * (fx_sm_adopt; or out itself: fx_sm_direct) */
    int64_t *block;  /* sums of the block being rounded: [mc, nc], or [M, N] per thread */
    fx_qstats q;     /* the rounding's statistics, all blocks merged */
    uint64_t imax;   /* the largest |sum| */
    int copy_pending, missed;
    int asked;       /* after a miss: the exponent the write asked for first, else FX_EXP_NONE */
    int whole_max;   /* run every item in registers even after one saturates: imax exact */
    int dry;         /* a write that only asks for the exponent (fx_sm_quantize) */
    int steady;      /* the guess held for the output's last FX_GUESS_STEADY_WRITES writes */
} fx_sm_plan;

/* The blocks: every row where there are at most FX_SM_ROWS, else FX_SM_ROWS of them, and as
 * many columns as the budget then allows (whole rows where that is all of them, and then as
 * many rows as fit). Column blocks repack A and row blocks B, each once per block, and every
 * row of a block writes its mantissas into out's row as one run of at least nc values, so
 * neither edge is short: with 64-value rows (128 bytes) the rounding's stores into an
 * [800, 25088] output ran at a third of their speed in contiguous runs. */
static void fx_sm_blocks(fx_sm_plan *p, int64_t budget)
{
    const int64_t M = p->M, N = p->N;
    p->mc = M < FX_SM_ROWS ? M : FX_SM_ROWS;
    p->nc = budget / p->mc / FX_SM_MIN_EDGE * FX_SM_MIN_EDGE;
    if (p->nc < FX_SM_MIN_EDGE) p->nc = FX_SM_MIN_EDGE;
    if (p->nc >= N) {
        p->nc = N;
        const int64_t rows = budget / N;
        if (rows > p->mc) p->mc = rows < M ? rows : M;
    }
}

static int64_t fx_sm_item_at(const fx_sm_items *w, int64_t i)
{
    return (i / w->inner) * w->step + (i % w->inner) * w->inner_step;
}

/* Views of item i's operands: a's rows [m0, m0 + mc) and b's columns [n0, n0 + nc). */
static void fx_sm_item_views(const fx_sm_plan *p, int64_t i, int64_t m0, int64_t mc, int64_t n0,
                             int64_t nc, fx_operand *a, fx_operand *b)
{
    *a = p->a;
    *b = p->b;
    a->shape[0] = mc;
    a->data = (const int16_t *)p->a.data + fx_sm_item_at(&p->ai, i) + m0 * p->a.strides[0];
    b->shape[1] = nc;
    b->data = (const int16_t *)p->b.data + fx_sm_item_at(&p->bi, i) + n0 * p->b.strides[1];
}

/* The sums of item i's block at rows [m0, m0 + mc) and columns [n0, n0 + nc) into sums
 * ([mc, nc]), by the backend's matmul kernel on views of a and b on nt threads; their largest
 * |sum| into *imax. */
static int fx_sm_block_sums(const fx_sm_plan *p, int64_t i, int64_t m0, int64_t mc, int64_t n0,
                            int64_t nc, int64_t *sums, int nt, uint64_t *imax)
{
    fx_operand a, b;
    fx_sm_item_views(p, i, m0, mc, n0, nc, &a, &b);
    return fx_matmul_i64_max(&a, &b, sums, nt, imax, "tensor_matmul");
}

/* Item i's whole product rounded at p->guess - p->ec by the level's kernel (gemm.i16_rounds:
 * AMX in registers, or the register tiles from a column in cache) into tmp, on nt threads: its statistics merged into *q and its largest |sum| into *imax; *fits
 * cleared where some sum would saturate (the values are then not the rounding's). */
static int fx_sm_item_in_registers(const fx_sm_plan *p, int64_t i, int nt, fx_qstats *q,
                                   uint64_t *imax, int *fits)
{
    const int shift = p->guess - p->ec;
    fx_operand a, b;
    fx_sm_item_views(p, i, 0, p->M, 0, p->N, &a, &b);
    uint64_t mx = 0;
    int64_t nuf = 0;
    const int rc = fx_matmul_i16_rounded(&a, &b, p->tmp + i * p->M * p->N, shift, nt, &mx, &nuf,
                                         "tensor_matmul");
    if (rc) return rc;
    *imax = mx > *imax ? mx : *imax;
    if (mx > fx_q64_fast_bound(shift)) {
        *fits = 0;
        return FX_OK;
    }
    fx_qstats part;
    fx_q64_fast_stats_of(&part, mx, nuf, shift);
    fx_qstats_merge(q, &part);
    return FX_OK;
}

/* Item i's block rounded at p->guess into tmp, its statistics merged into p->q. Rows are
 * split among the threads (a block of whole rows as equal runs of its one contiguous range). */
static void fx_sm_block_round(fx_sm_plan *p, int64_t i, int64_t m0, int64_t mc, int64_t n0,
                              int64_t nc)
{
    const int shift = p->guess - p->ec;
    const int whole_rows = nc == p->N;
    const int64_t n = mc * nc;
    int16_t *out = p->tmp + i * p->M * p->N;
    const int nt = n >= ((int64_t)1 << 15) ? flexpoint_num_threads() : 1;
    const int64_t pieces = whole_rows ? nt : mc;
    const int64_t piece = whole_rows ? (n + pieces - 1) / pieces : nc;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        fx_qstats mine;
        fx_qstats_init(&mine);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t r = 0; r < pieces; r++) {
            const int64_t lo = r * piece, len = n - lo < piece ? n - lo : piece;
            if (len <= 0) continue;
            int16_t *dst = whole_rows ? out + m0 * p->N + lo : out + (m0 + r) * p->N + n0;
            fx_qstats part;
            p->be->cvt.quant_i64(p->block + lo, dst, len, shift, &part);
            fx_qstats_merge(&mine, &part);
        }
#ifdef _OPENMP
#pragma omp critical(fx_shared_matmul_merge)
#endif
        fx_qstats_merge(&p->q, &mine);
    }
}

/* Every block of every item in turn: its sums (on all threads), then at once their rounding
 * at the guess; or, in registers (fx_sm_item_in_registers), every item whole, clearing *fits
 * where that did not cover the guess. */
static int fx_sm_run_blocks(fx_sm_plan *p, int in_registers, int *fits)
{
    if (in_registers) {
        for (int64_t i = 0; i < p->batch && (*fits || p->whole_max); i++) {
            const int rc =
                fx_sm_item_in_registers(p, i, flexpoint_num_threads(), &p->q, &p->imax, fits);
            if (rc) return rc;
        }
        return FX_OK;
    }
    for (int64_t i = 0; i < p->batch; i++)
        for (int64_t n0 = 0; n0 < p->N; n0 += p->nc) {
            const int64_t nc = p->N - n0 < p->nc ? p->N - n0 : p->nc;
            for (int64_t m0 = 0; m0 < p->M; m0 += p->mc) {
                const int64_t mc = p->M - m0 < p->mc ? p->M - m0 : p->mc;
                uint64_t imax = 0;
                const int rc = fx_sm_block_sums(p, i, m0, mc, n0, nc, p->block,
                                                flexpoint_num_threads(), &imax);
                if (rc) return rc;
                p->imax = imax > p->imax ? imax : p->imax;
                fx_prof_span sp;
                fx_prof_begin(&sp);
                fx_sm_block_round(p, i, m0, mc, n0, nc);
                fx_prof_end(&sp, FX_PROF_ROUNDING);
            }
        }
    return FX_OK;
}

/* Items that each fit a block (attention's [T, T] scores), several at once: each thread runs
 * whole items on one thread of the kernel into its own buffer and rounds each at once, or
 * rounds them in registers (in_registers, clearing *fits as fx_sm_run_blocks does), so that
 * small products do not each pay a parallel region. The statistics are sums and maxima:
 * merged in any order, the same. */
static int fx_sm_run_items(fx_sm_plan *p, int in_registers, int *fits)
{
    const int64_t MN = p->M * p->N;
    const int shift = p->guess - p->ec;
    int rc = FX_OK;
    const int nt = p->nt_items;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        /* (no blocks where the kernel rounds products of FX_SM_MAX_K and more) */
        int64_t *sums = p->block ? p->block + tid * MN : NULL;
        fx_qstats mine;
        fx_qstats_init(&mine);
        uint64_t mx = 0;
        int my_rc = FX_OK, my_fits = 1;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t i = 0; i < p->batch; i++) {
            if (my_rc || (!my_fits && !p->whole_max)) continue;
            if (in_registers) {
                my_rc = fx_sm_item_in_registers(p, i, 1, &mine, &mx, &my_fits);
                continue;
            }
            uint64_t imax = 0;
            my_rc = fx_sm_block_sums(p, i, 0, p->M, 0, p->N, sums, 1, &imax);
            if (my_rc) continue;
            mx = imax > mx ? imax : mx;
            fx_qstats part;
            fx_prof_span sp; /* counted on the profiled thread, as every span */
            fx_prof_begin(&sp);
            p->be->cvt.quant_i64(sums, p->tmp + i * MN, MN, shift, &part);
            fx_prof_end(&sp, FX_PROF_ROUNDING);
            fx_qstats_merge(&mine, &part);
        }
#ifdef _OPENMP
#pragma omp critical(fx_shared_matmul_merge)
#endif
        {
            fx_qstats_merge(&p->q, &mine);
            p->imax = mx > p->imax ? mx : p->imax;
            if (my_rc && !rc) rc = my_rc;
            if (!my_fits) *fits = 0;
        }
    }
    return rc;
}

/* fx_shared_src.quantize: the rounding at the guess is done; any other exponent is a miss,
 * which fails the write before it commits anything (fx_shared_matmul then hands the product
 * to the dispatcher). */
static int fx_sm_quantize(void *ctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    (void)r; /* int64 sums round to nearest even (fx_requant), whatever the tensor's mode */
    fx_sm_plan *p = ctx;
    if (e != p->guess) {
        if (!p->missed && !p->copy_pending) p->asked = e; /* what a second run would guess */
        p->missed = 1;
        return FX_ESTATE;
    }
    if (p->dry) return FX_ESTATE; /* the guess itself, with saturated sums: run the blocks */
    *q = p->q;
    if (keep) p->copy_pending = 1;
    return FX_OK;
}

/* Whether a product into out may be taken here (operands aside): the route on, out a whole,
 * contiguous host FLEX16_5/DFP16 tensor, an output large enough for its stage to leave the
 * cache, at least one product per output (fx_sm_write requires fewer than FX_SM_MAX_K where
 * the kernel does not round), and an exponent guess, in a write that decides alone and at
 * once. *steady: the guess held lately; a FLEX16_5 guess must have, a DFP16 one need not, but
 * is then taken only where the product rounds on AMX at it (fx_sm_write). */
static bool fx_sm_takes_out(const tensor_t *out, int64_t numel, int64_t K, int *guess,
                            int *steady)
{
    if (!__atomic_load_n(&fx_sm_enabled_flag, __ATOMIC_RELAXED)) return false;
    if (!fmt_is_shared_exponent(out->fmt) || out->st->on_device || out->st->dist ||
        !fx_tensor_covers_storage(out) || !fx_tensor_is_contiguous(out))
        return false;
    /* K: from FX_SM_MAX_K only where the kernel rounds (fx_sm_write) */
    if (numel < __atomic_load_n(&fx_sm_min_out, __ATOMIC_RELAXED) || K < 1) return false;
    if (!fx_write_shared_guess_exp(out, guess) || !fx_write_shared_local(out)) return false;
    *steady = fx_write_shared_guess_steady(out);
    return true; /* an unsteady guess only where the kernel rounds in registers (fx_sm_write) */
}

/* The write's view of the plan's sums: exact integers at exponent ec, as the dispatcher's
 * stage */
static fx_shared_src fx_sm_src(fx_sm_plan *p)
{
    fx_shared_src src;
    memset(&src, 0, sizeof src);
    src.kind = FX_STAGE_I64;
    src.exp = p->ec;
    src.imax = p->imax;
    src.true_max = ldexp((double)p->imax, p->ec);
    src.ctx = p;
    src.quantize = fx_sm_quantize;
    return src;
}

/* A DFP16 guess at which some sum saturates is a miss whatever the sums round to there: the
 * write's exact exponent follows from the largest |sum| alone, which the run in registers
 * measured (every item run: whole_max). So the write is asked for it with no values, a dry
 * write that fails before it commits anything, and the product runs again in registers at
 * that exponent at once, instead of first rounding int64 blocks at a guess the write will not
 * keep. 1 with p->guess set to the exponent asked for; 0 where the write would keep the guess
 * (an exponent at the end of its range), which the blocks then give it. */
static int fx_sm_ask_dry(tensor_t *out, fx_sm_plan *p, const char *func)
{
    const fx_shared_src src = fx_sm_src(p);
    p->dry = 1;
    (void)fx_write_shared_with(out, &src, func); /* fails: the quantiser refuses every exponent */
    p->dry = 0;
    flexpoint_clear_error();
    const int asked = p->missed && p->asked != FX_EXP_NONE && p->asked != p->guess;
    if (asked) p->guess = p->asked;
    p->missed = 0;
    p->asked = FX_EXP_NONE;
    return asked;
}

/* Whether item operand o (its items where w says, batch of them) may reach any of the n int16
 * at lo: its extent from its first element to its last, with non-negative strides (anything
 * else counts as reaching). */
static int fx_sm_operand_reaches(const fx_operand *o, const fx_sm_items *w, int64_t batch,
                                 const int16_t *lo, int64_t n)
{
    if (w->step < 0 || w->inner_step < 0 || o->strides[0] < 0 || o->strides[1] < 0) return 1;
    const int16_t *first = o->data;
    const int64_t inner_last = (batch < w->inner ? batch : w->inner) - 1;
    const int64_t last = ((batch - 1) / w->inner) * w->step + inner_last * w->inner_step +
                         (o->shape[0] - 1) * o->strides[0] + (o->shape[1] - 1) * o->strides[1];
    return !((uintptr_t)(first + last) < (uintptr_t)lo || (uintptr_t)first >= (uintptr_t)(lo + n));
}

/* out's own storage as the plan's rounding buffer, or NULL: where out is disposable (the
 * trainer's activations and gradients, fx_storage.disposable: a write that fails may leave
 * other values there) and no operand reads it, the blocks round straight into out, with no
 * buffer of the output's size and no copy into out once the write keeps them (a memmove of
 * 4 % of a two-thread DFP16 transformer step). A miss that hands the product to the
 * dispatcher, or a failure, then leaves out with other values, its exponent unchanged. */
static int16_t *fx_sm_direct(tensor_t *out, const fx_sm_plan *p)
{
    if (!out->st->disposable) return NULL;
    int16_t *base = fx_tensor_base(out);
    const int64_t n = p->batch * p->M * p->N;
    if (fx_sm_operand_reaches(&p->a, &p->ai, p->batch, base, n) ||
        fx_sm_operand_reaches(&p->b, &p->bi, p->batch, base, n))
        return NULL;
    return base;
}

/* The largest buffer block an output of `bytes` bytes adopts (below) */
static size_t fx_sm_adopt_most(size_t bytes) { return bytes + bytes / 4; }

/* After a write that kept the buffer's values: the buffer becomes out's storage and the
 * storage's old block goes to the scratch cache, where the next such product finds it mapped,
 * instead of a copy of the whole output into out (a fifth of an 800 x 25088 x 64 product's
 * time on the Xeon reporting model 167). The route takes only outputs that cover their host
 * storage contiguously (fx_sm_takes_out), so the buffer holds every element of the storage in
 * its order, and the views sharing the storage see the new values as after a copy; the
 * storage's blocks come from malloc (tensor.c, fx_alloc_array), as scratch blocks do, and are
 * released with free. 0 (nothing changed: copy) where the buffer is not a scratch block or
 * is a cached block far larger than the output, which stays in the cache for the op it
 * served (fx_scratch_exchange); the next call then finds the old block, of the output's
 * size. */
static int fx_sm_adopt(tensor_t *out, fx_sm_plan *p, fx_scratch *s)
{
    fx_storage *st = out->st;
    const size_t bytes = (size_t)st->numel * sizeof(int16_t);
    if (!fx_scratch_exchange(s, p->tmp, st->data, bytes, fx_sm_adopt_most(bytes))) return 0;
    st->data = p->tmp;
    __atomic_fetch_add(&fx_sm_adopted, 1, __ATOMIC_RELAXED);
    return 1;
}

/* Whether the level's kernel rounds the plan's product itself at exponent e (gemm.i16_rounds
 * said so for the shape, amx: AMX's own, and the shift is one it rounds) */
static int fx_sm_rounds_at(const fx_sm_plan *p, int amx, int e)
{
    return (amx ? p->amx_rounds : p->rounds) && fx_q64_fast_ok(e - p->ec);
}

/* The product of a plan whose operands, batch, shape and guess are set, written into out:
 * FX_SHARED_MATMUL_NOT_TAKEN where the level lacks the kernels or the rounding missed. */
static int fx_sm_write(tensor_t *out, fx_sm_plan *p, const char *func)
{
    p->be = fx_backend_active();
    /* the integer kernel of both formats, and the rounding */
    if (!p->be->kernels[FX_OP_MATMUL][FMT_DFP16] || !p->be->cvt.quant_i64)
        return FX_SHARED_MATMUL_NOT_TAKEN;
    p->ec = p->a.exp + p->b.exp;
    const int64_t budget = __atomic_load_n(&fx_sm_chunk, __ATOMIC_RELAXED);
    const int nt = flexpoint_num_threads();
    const int64_t MN = p->M * p->N;
    p->nt_items = MN <= budget && p->batch > 1 ? (p->batch < nt ? (int)p->batch : nt) : 0;
    p->amx_rounds = p->be->gemm.i16_amx && fx_gemm_i16_amx_rounds(p->M, p->K, p->N);
    p->rounds = p->be->gemm.i16_rounds && p->be->gemm.i16_rounds(p->M, p->K, p->N);
    const int blocks_ok = p->K < FX_SM_MAX_K; /* else the int64 blocks lose to the stage */
    if (!blocks_ok && !fx_sm_rounds_at(p, 0, p->guess))
        return FX_SHARED_MATMUL_NOT_TAKEN;
    /* A DFP16 guess that did not hold lately (an exponent that trends, a first write) misses
     * more often than not: in a transformer's training about two in three of them did. A miss
     * then costs one more run of the product, which where the kernel rounds in registers is
     * still less than the stage's traffic: dfp16 steps 14-17 % shorter on the Xeon reporting
     * model 167 with AMX, and on the Zen 4's register tiles the transformer's dfp16 steps
     * 0.743-0.790 of fp32's (medians; summed 0.729-0.782) against 0.760-0.802 (0.785-0.793)
     * with such products left to the dispatcher
     * (four alternations of bench_train_pairs, docs/performance.md; the level says where it
     * takes them: gemm.i16_unsteady_rounds). A FLEX16_5 guess that did not hold lately is
     * Autoflex's prediction after a recomputed overflow, and holds again almost always (of
     * the transformer attention's 112 gradient products taken here in an epoch, steady or
     * not, 5 missed); its miss costs the run in registers on top of the dispatcher's stage,
     * and those products took 8-10 % less time on AMX. Where the runs are in int64 blocks (no
     * rounding by the kernel) it was 3 % slower on the AVX2 level and 4 % faster on the
     * AVX-512 level, within that machine's noise, so the dispatcher keeps them there. */
    if (!p->steady && !fx_sm_rounds_at(p, 1, p->guess) &&
        !(p->be->gemm.i16_unsteady_rounds && fx_sm_rounds_at(p, 0, p->guess)))
        return FX_SHARED_MATMUL_NOT_TAKEN;
    if (!p->nt_items) fx_sm_blocks(p, budget);
    fx_scratch s = {.n = 0};
    int16_t *direct = fx_sm_direct(out, p);
    /* A cached block far larger than out would not be adopted (an AMX kernel's 16 MB packed B
     * served a 4 MB product's buffer, and every call then copied the product into out: a sixth
     * of a 16 x 131072 x 27 product); a fresh block is, and out's old block of its own size
     * then goes to the cache for the next call. */
    const size_t tmp_bytes = (size_t)(p->batch * MN) * sizeof *p->tmp;
    p->tmp = direct ? direct
                    : fx_scratch_alloc_fit(&s, p->batch * MN, sizeof *p->tmp,
                                           fx_sm_adopt_most(tmp_bytes));
    p->block = !blocks_ok ? NULL
               : fx_scratch_alloc(&s, p->nt_items ? p->nt_items * MN : p->mc * p->nc,
                                  sizeof *p->block);
    if (!p->tmp || (blocks_ok && !p->block)) {
        fx_scratch_free(&s);
        return fx_error(FX_ENOMEM, func, "cannot allocate the buffers of a [%lld, %lld, %lld] "
                        "output", (long long)p->batch, (long long)p->M, (long long)p->N);
    }
    __atomic_fetch_add(&fx_sm_taken, 1, __ATOMIC_RELAXED);
    if (direct) __atomic_fetch_add(&fx_sm_direct_taken, 1, __ATOMIC_RELAXED);
    int rc;
    for (int run = 1;; run++) {
        flexpoint_clear_error(); /* as the dispatcher does before its kernel */
        fx_qstats_init(&p->q);
        p->imax = 0;
        p->missed = p->copy_pending = 0;
        p->asked = FX_EXP_NONE;
        rc = FX_OK;
        /* rounded by the kernel where it covers the guess, else (or where a sum would have
         * saturated there) in int64 blocks */
        int fits = fx_sm_rounds_at(p, 0, p->guess);
        if (fits) {
            const int may_ask_dry = out->fmt == FMT_DFP16 && run == 1;
            p->whole_max = may_ask_dry;
            rc = p->nt_items ? fx_sm_run_items(p, 1, &fits) : fx_sm_run_blocks(p, 1, &fits);
            p->whole_max = 0;
            if (rc == FX_OK && fits) __atomic_fetch_add(&fx_sm_in_registers, 1, __ATOMIC_RELAXED);
            if (rc == FX_OK && !fits && may_ask_dry && fx_sm_ask_dry(out, p, func)) {
                __atomic_fetch_add(&fx_sm_asked_dry, 1, __ATOMIC_RELAXED);
                __atomic_fetch_add(&fx_sm_missed, 1, __ATOMIC_RELAXED);
                __atomic_fetch_add(&fx_sm_rerun, 1, __ATOMIC_RELAXED);
                continue;
            }
        }
        if (rc == FX_OK && !fits && p->rounds)
            __atomic_fetch_add(&fx_sm_not_covered, 1, __ATOMIC_RELAXED);
        if (rc == FX_OK && !fits && !blocks_ok) { /* nothing is committed: the stage's turn */
            fx_scratch_free(&s);
            return FX_SHARED_MATMUL_NOT_TAKEN;
        }
        if (rc == FX_OK && !fits) {
            fx_qstats_init(&p->q);
            p->imax = 0;
            rc = p->nt_items ? fx_sm_run_items(p, 0, &fits) : fx_sm_run_blocks(p, 0, &fits);
        }
        if (rc) {
            /* a worker thread's message is its own: name the failure here */
            if (flexpoint_last_error()[0] == '\0') fx_error(rc, func, "kernel failed");
            fx_scratch_free(&s);
            return rc;
        }
        const fx_shared_src src = fx_sm_src(p);
        rc = fx_write_shared_with(out, &src, func);
        /* A DFP16 write asks for the exact exponent of the sums, which the same sums give
         * again: a second run guessing it needs no stage either (in a transformer's training
         * a tenth of the DFP16 products missed, against 3 % for FLEX16_5, whose misses are
         * recomputed overflows: those go to the dispatcher, whose stage is rounded twice). */
        /* (and where the exponent asked for can be run: without blocks, rounded) */
        if (!(rc != FX_OK && p->missed && run == 1 && out->fmt == FMT_DFP16 &&
              p->asked != FX_EXP_NONE &&
              (blocks_ok || fx_sm_rounds_at(p, 0, p->asked))))
            break;
        __atomic_fetch_add(&fx_sm_missed, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&fx_sm_rerun, 1, __ATOMIC_RELAXED);
        p->guess = p->asked;
    }
    if (rc == FX_OK && p->copy_pending && !direct && !fx_sm_adopt(out, p, &s)) {
        fx_prof_span sp;
        fx_prof_begin(&sp);
        fx_par_memcpy(fx_tensor_base(out), p->tmp, (size_t)(p->batch * MN) * sizeof *p->tmp);
        fx_prof_end(&sp, FX_PROF_ROUNDING);
    }
    fx_scratch_free(&s);
    if (rc != FX_OK && p->missed) {
        __atomic_fetch_add(&fx_sm_missed, 1, __ATOMIC_RELAXED);
        flexpoint_clear_error();
        return FX_SHARED_MATMUL_NOT_TAKEN;
    }
    return rc;
}

int fx_shared_matmul(tensor_t *out, const tensor_t *a, const tensor_t *b)
{
    static const char func[] = "tensor_matmul";
    fx_sm_plan p;
    memset(&p, 0, sizeof p);
    /* FLEX16_5/DFP16 host operands (a float one would be quantised first: the dispatcher's
     * work), neither sharing out's storage */
    if (!fmt_is_shared_exponent(a->fmt) || !fmt_is_shared_exponent(b->fmt) ||
        a->st->on_device || b->st->on_device || a->st == out->st || b->st == out->st)
        return FX_SHARED_MATMUL_NOT_TAKEN;
    p.M = a->shape[0];
    p.K = a->shape[1];
    p.N = b->shape[1];
    p.batch = 1;
    p.ai.inner = p.bi.inner = 1; /* one item */
    if (!fx_sm_takes_out(out, p.M * p.N, p.K, &p.guess, &p.steady))
        return FX_SHARED_MATMUL_NOT_TAKEN;
    fx_scratch s = {.n = 0};
    /* host shared-exponent operands are used as they are, strides and all (no allocation) */
    int rc = fx_operand_make(a, 1, a->fmt, 1, 2, NULL, &p.a, &s, func);
    if (!rc) rc = fx_operand_make(b, 1, b->fmt, 1, 2, NULL, &p.b, &s, func);
    if (!rc) rc = fx_sm_write(out, &p, func);
    fx_scratch_free(&s);
    return rc;
}

int fx_shared_bmm(tensor_t *out, const fx_operand *a, const fx_operand *b,
                  const fx_sm_items *ai, const fx_sm_items *bi, int64_t batch, const char *func)
{
    fx_sm_plan p;
    memset(&p, 0, sizeof p);
    p.a = *a;
    p.b = *b;
    if (ai->inner < 1 || bi->inner < 1) return FX_SHARED_MATMUL_NOT_TAKEN;
    p.ai = *ai;
    p.bi = *bi;
    p.batch = batch;
    p.M = a->shape[0];
    p.K = a->shape[1];
    p.N = b->shape[1];
    if (batch < 1 || !fx_sm_takes_out(out, batch * p.M * p.N, p.K, &p.guess, &p.steady))
        return FX_SHARED_MATMUL_NOT_TAKEN;
    return fx_sm_write(out, &p, func);
}
