/* Element-wise math (FX_OP_UNARY, FX_OP_UNARY_BACKWARD) on 16-bit tensors in one pass, and
 * tensor_scale of fp16/bf16 ones: see fx_unary_stream in dispatch.h.
 *
 * Why: the dispatcher's general route widens every input to a whole fp32 tensor, runs the fp32
 * core over it into a second one, and hands that to the write, which for a shared-exponent
 * output scans it for its largest value before rounding it. On the transformer's GELU
 * ([16384, 512]) those passes over 32 MiB arrays took longer than the function itself: one
 * call was 12 ms on 16-bit tensors against 7 ms on fp32 ones (model-167 Xeon, two threads).
 * Here each thread widens a block of each input into L1, runs the same fp32 core on it (the
 * backend's unary_f32, the arithmetic of src/fp32/f32_math_impl.h), and then narrows the block
 * straight into an fp16 or bf16 output, or stores it into the fp32 stage of a shared-exponent
 * output along with the block's largest finite |value| and its count of NaN/Inf, so the write
 * needs no scan. Every element is computed by the same operations as before, and the maxima
 * and counts merge exactly in any order, so the results are the same bits. */
#include "compose.h"
#include "dispatch.h"
#include "ops_internal.h"
#include "fp32/f32_math.h"

#include <stdatomic.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

static atomic_int direct_enabled = 1;
void fx_unary_stream_direct_set_enabled(int on) { atomic_store(&direct_enabled, on != 0); }

/* Elements per block: three fp32 blocks (x, dy, y) of 8 KiB stay in L1 together. */
#define FX_UNARY_BLOCK 2048

/* Whether t can be read (or out written) in place as a flat array. */
static int fx_stream_plain(const tensor_t *t)
{
    return !t->st->on_device && fx_tensor_is_contiguous(t);
}

/* The next block of an input, asked for while this one computes: the converters stream
 * faster than the hardware prefetchers of the VMs measured follow a loop that spends ~10
 * cycles an element between its loads. Into L2 (a block is at most 8 KiB per input). */
static void fx_stream_prefetch(const void *base, size_t es, int64_t lo, int64_t n, int write)
{
    const int64_t len = n - lo < FX_UNARY_BLOCK ? n - lo : FX_UNARY_BLOCK;
    const char *p = (const char *)base + (size_t)lo * es;
    if (write)
        for (size_t off = 0; off < (size_t)len * es; off += 64) __builtin_prefetch(p + off, 1, 2);
    else
        for (size_t off = 0; off < (size_t)len * es; off += 64) __builtin_prefetch(p + off, 0, 2);
}

/* out_kind of a shared-exponent output rounded block by block at a known exponent */
#define FX_STREAM_ROUNDED (-1)

typedef struct fx_stream_job {
    const fx_backend *be;
    const fx_op_request *rq;
    const void *in_base[2];
    void *out_base;  /* the output tensor's elements (float or 16-bit), or the fp32 stage */
    int out_kind;    /* FMT_FP32 (out_base holds floats), FMT_FP16, FMT_BF16, or
                      * FX_STREAM_ROUNDED (out_base: the int16 mantissas, NULL: none kept) */
    int want_max;    /* a shared-exponent output: the stage's statistics are gathered */
    int e;           /* FX_STREAM_ROUNDED: the exponent and rounding of each block's write */
    const fx_rounding *r;
} fx_stream_job;

/* Blocks [b0, b1): the statistics of those blocks in *mx, *nf (an fp32 stage) or merged into
 * *q (FX_STREAM_ROUNDED: the rounding's, each block rounded at its own element offsets as the
 * write's rounding of the whole stage would). FX_OK or the core's status. */
static int fx_stream_blocks(const fx_stream_job *j, int64_t n, int64_t b0, int64_t b1,
                            float *mx, int64_t *nf, fx_qstats *q)
{
    float xb[FX_UNARY_BLOCK], gb[FX_UNARY_BLOCK], yb[FX_UNARY_BLOCK];
    const fx_op_request *rq = j->rq;
    const int bwd = rq->op == FX_OP_UNARY_BACKWARD;
    /* tensor_unary_backward's inputs are (dy, x); the core takes (x, dy) */
    const tensor_t *xt = rq->in[bwd ? 1 : 0];
    const void *xbase = j->in_base[bwd ? 1 : 0];
    for (int64_t b = b0; b < b1; b++) {
        const int64_t lo = b * FX_UNARY_BLOCK;
        const int64_t len = n - lo < FX_UNARY_BLOCK ? n - lo : FX_UNARY_BLOCK;
        if (b + 1 < b1) {
            for (int i = 0; i < rq->nin; i++)
                fx_stream_prefetch(j->in_base[i], fmt_elem_size(rq->in[i]->fmt), lo + len, n, 0);
            if (j->out_base)
                fx_stream_prefetch(j->out_base, j->out_kind == FMT_FP32 ? 4 : 2, lo + len, n, 1);
        }
        const float *x = fx_f32_block(j->be, xt->fmt, xt->st->exp, xbase, lo, len, xb);
        const float *g = bwd ? fx_f32_block(j->be, rq->in[0]->fmt, rq->in[0]->st->exp,
                                            j->in_base[0], lo, len, gb)
                             : NULL;
        float *y = j->out_kind == FMT_FP32 ? (float *)j->out_base + lo : yb;
        if (rq->op == FX_OP_SCALE) { /* the fp32 SCALE kernels' one rounding: x * (float)s */
            const float sc = (float)rq->scalar;
            for (int64_t i = 0; i < len; i++) y[i] = x[i] * sc;
        } else {
            const int rc = j->be->unary_f32(rq->unary_fn, rq->unary_p, x, g, y, len);
            if (rc) return rc;
        }
        if (j->out_kind == FX_STREAM_ROUNDED) {
            fx_qstats bq;
            j->be->cvt.quant_f32(yb, j->out_base ? (int16_t *)j->out_base + lo : NULL, len, j->e,
                                 j->r, lo, &bq);
            fx_qstats_merge(q, &bq);
        } else if (j->out_kind == FMT_FP16)
            j->be->cvt.f32_to_fp16(yb, (uint16_t *)j->out_base + lo, len);
        else if (j->out_kind == FMT_BF16)
            j->be->cvt.f32_to_bf16(yb, (uint16_t *)j->out_base + lo, len);
        if (j->want_max) {
            float m;
            int64_t c;
            j->be->cvt.maxabs_f32(y, len, &m, &c);
            *mx = m > *mx ? m : *mx;
            *nf += c;
        }
    }
    return FX_OK;
}

/* Whether an input may be read while out is written block by block: a different storage, a
 * shared-exponent output (written from the stage after the last block), or the very same
 * elements in the same format (each block is read whole before it is written). */
static int fx_stream_alias_ok(const tensor_t *in, const tensor_t *out)
{
    if (in->st != out->st || fmt_is_shared_exponent(out->fmt)) return 1; /* via the stage */
    return fx_tensor_base(in) == fx_tensor_base(out) && in->fmt == out->fmt;
}

/* Every block of j over the threads: the fp32 stage's statistics in *mx, *nf, or the rounding's
 * in *q (FX_STREAM_ROUNDED). FX_OK or the core's status. */
static int fx_stream_run(const fx_stream_job *j, int64_t n, float *mx_out, int64_t *nf_out,
                         fx_qstats *q_out)
{
    const int64_t nblocks = (n + FX_UNARY_BLOCK - 1) / FX_UNARY_BLOCK;
    const int nt = n >= FX_F32_MATH_MIN_PARALLEL && nblocks > 1 ? flexpoint_num_threads() : 1;
    float mx = 0.0f;
    int64_t nonfinite = 0;
    int rc = FX_OK;
    fx_qstats_init(q_out);
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(max : mx) reduction(+ : nonfinite)
#endif
    {
#ifdef _OPENMP
        const int t = omp_get_thread_num(), T = omp_get_num_threads();
#else
        const int t = 0, T = 1;
#endif
        fx_qstats mine;
        fx_qstats_init(&mine);
        const int r = fx_stream_blocks(j, n, nblocks * t / T, nblocks * (t + 1) / T, &mx,
                                       &nonfinite, &mine);
#ifdef _OPENMP
#pragma omp critical(fx_stream_run_merge)
#endif
        {
            fx_qstats_merge(q_out, &mine);
            if (r) rc = r;
        }
    }
    *mx_out = mx;
    *nf_out = nonfinite;
    return rc;
}

/* A shared-exponent output rounded straight from each block while it is in L1
 * (fx_guessed_write), without the fp32 stage (a 4-byte array written and read again: on the
 * transformer's GELU, [16384, 512], about a quarter of a FLEX16_5 call's time); the same values
 * rounded by the same kernel at the same element offsets, so the stage route's bits. */
static int64_t direct_runs, direct_missed;
int64_t fx_unary_stream_direct_runs(void) { return __atomic_load_n(&direct_runs, __ATOMIC_RELAXED); }
int64_t fx_unary_stream_direct_missed(void)
{
    return __atomic_load_n(&direct_missed, __ATOMIC_RELAXED);
}

typedef struct fx_stream_direct {
    fx_stream_job job;
    int64_t n;
} fx_stream_direct;

/* fx_round_all_fn: every block made again and rounded at e into dst (NULL: statistics only) */
static int fx_stream_round_all(void *ctx, int16_t *dst, int e, const fx_rounding *r,
                               fx_qstats *q)
{
    const fx_stream_direct *d = ctx;
    fx_stream_job j = d->job;
    j.out_base = dst;
    j.e = e;
    j.r = r;
    float mx;
    int64_t nf;
    const int rc = fx_stream_run(&j, d->n, &mx, &nf, q);
    return rc ? fx_error(rc, j.rq->func, "the element-wise kernel failed") : FX_OK;
}

/* Whether out takes the direct route, with *e the exponent to round at: fx_guessed_write_ok's
 * conditions, and no input sharing out's storage (the blocks are read again after out's
 * mantissas are written when the write asks for another exponent). */
static int fx_stream_direct_ok(const fx_op_request *rq, int *e)
{
    if (!atomic_load(&direct_enabled)) return 0;
    for (int i = 0; i < rq->nin; i++)
        if (rq->in[i]->st == rq->out->st) return 0;
    return fx_guessed_write_ok(rq->out, e);
}

static int fx_stream_direct_write(const fx_stream_job *j0, int64_t n, int e)
{
    fx_stream_direct d = {.job = *j0, .n = n};
    d.job.out_kind = FX_STREAM_ROUNDED;
    d.job.want_max = 0;
    const int rc = fx_guessed_write(j0->rq->out, e, fx_stream_round_all, &d, &direct_missed,
                                    j0->rq->func);
    if (rc == FX_OK) __atomic_fetch_add(&direct_runs, 1, __ATOMIC_RELAXED);
    return rc;
}

int fx_unary_stream(const fx_op_request *rq, const fx_backend *be)
{
    if (rq->op == FX_OP_SCALE) {
        /* fp16/bf16 inputs only: a shared-exponent one is scaled exactly in integers */
        if (rq->nin != 1 || (rq->in[0]->fmt != FMT_FP16 && rq->in[0]->fmt != FMT_BF16))
            return FX_DECLINED;
    } else if ((rq->op != FX_OP_UNARY && rq->op != FX_OP_UNARY_BACKWARD) || !be->unary_f32) {
        return FX_DECLINED;
    } else if (rq->unary_fn < 0 || rq->unary_fn >= FX_UN_COUNT || rq->unary_fn == FX_UN_ERF ||
               rq->unary_fn == FX_UN_ERFC) {
        return FX_DECLINED; /* the general route reports what is wrong */
    }
    tensor_t *out = rq->out;
    if (!fx_stream_plain(out) || (out->st->dist && out->st->dist_mode == FX_DIST_SUM))
        return FX_DECLINED;
    int all_f32 = out->fmt == FMT_FP32;
    for (int i = 0; i < rq->nin; i++) {
        const tensor_t *t = rq->in[i];
        if (!fx_stream_plain(t) || !fx_stream_alias_ok(t, out)) return FX_DECLINED;
        all_f32 = all_f32 && t->fmt == FMT_FP32;
    }
    if (all_f32) return FX_DECLINED; /* the fp32 kernel already reads and writes in place */

    flexpoint_clear_error(); /* as the general route does before its kernel */
    const int64_t n = fx_numel_of(out->ndim, out->shape);
    const int shared = fmt_is_shared_exponent(out->fmt) != 0;
    fx_scratch tmp = {.n = 0};
    fx_stream_job j = {.be = be, .rq = rq, .out_kind = shared ? FMT_FP32 : out->fmt,
                       .want_max = shared};
    for (int i = 0; i < rq->nin; i++) j.in_base[i] = fx_tensor_base(rq->in[i]);
    int e;
    if (shared && n > 0 && fx_stream_direct_ok(rq, &e)) return fx_stream_direct_write(&j, n, e);
    j.out_base = shared ? fx_scratch_alloc(&tmp, n > 0 ? n : 1, sizeof(float))
                        : fx_tensor_base(out);
    if (!j.out_base) return fx_error(FX_ENOMEM, rq->func, "cannot allocate the fp32 stage");

    float mx;
    int64_t nonfinite;
    fx_qstats unused;
    int rc = fx_stream_run(&j, n, &mx, &nonfinite, &unused);
    if (rc == FX_OK && shared) rc = fx_write_f32_max(out, j.out_base, mx, nonfinite, rq->func);
    else if (rc != FX_OK) rc = fx_error(rc, rq->func, "the element-wise kernel failed");
    fx_scratch_free(&tmp);
    return rc;
}
