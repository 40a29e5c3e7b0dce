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

#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

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

typedef struct fx_stream_job {
    const fx_backend *be;
    const fx_op_request *rq;
    const void *in_base[2];
    void *out_base;  /* the output tensor's elements (float or 16-bit), or the fp32 stage */
    int out_kind;    /* FMT_FP32 (out_base holds floats), FMT_FP16, FMT_BF16 */
    int want_max;    /* a shared-exponent output: the stage's statistics are gathered */
} fx_stream_job;

/* Blocks [b0, b1): the statistics of those blocks in *mx, *nf. FX_OK or the core's status. */
static int fx_stream_blocks(const fx_stream_job *j, int64_t n, int64_t b0, int64_t b1,
                            float *mx, int64_t *nf)
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
        if (j->out_kind == FMT_FP16)
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
    j.out_base = shared ? fx_scratch_alloc(&tmp, n > 0 ? n : 1, sizeof(float))
                        : fx_tensor_base(out);
    if (!j.out_base) return fx_error(FX_ENOMEM, rq->func, "cannot allocate the fp32 stage");

    const int64_t nblocks = (n + FX_UNARY_BLOCK - 1) / FX_UNARY_BLOCK;
    const int nt = n >= FX_F32_MATH_MIN_PARALLEL && nblocks > 1 ? flexpoint_num_threads() : 1;
    float mx = 0.0f;
    int64_t nonfinite = 0;
    int rc = FX_OK;
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
        const int r = fx_stream_blocks(&j, n, nblocks * t / T, nblocks * (t + 1) / T, &mx,
                                       &nonfinite);
        if (r) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
            rc = r;
        }
    }
    if (rc == FX_OK && shared) rc = fx_write_f32_max(out, j.out_base, mx, nonfinite, rq->func);
    else if (rc != FX_OK) rc = fx_error(rc, rq->func, "the element-wise kernel failed");
    fx_scratch_free(&tmp);
    return rc;
}
