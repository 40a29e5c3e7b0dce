/* add / sub / mul of fp16 or bf16 tensors in one pass (ops.c calls this before the dispatcher).
 *
 * Why: the dispatcher's float route widens each 16-bit input into a full fp32 copy, runs the
 * fp32 kernel into an fp32 stage and narrows the stage: four passes over n elements plus a
 * materialised broadcast operand. For the common shapes (a conv's per-channel bias, a
 * residual add) this file does the same arithmetic chunk by chunk in L1: widen (exact), one fp32
 * operation, narrow with the backend's conversion (the write path's round-to-nearest-even and
 * NaN rule), so the result is the dispatcher's bit for bit. Anything else returns
 * FX_HALF_BINARY_NOT_TAKEN and goes through the dispatcher. */
#include "half_binary.h"
#include "backend.h"
#include "half_bits.h"
#include "../fp32/f32_kernels.h" /* fx_f32_nan_first: the fp32 ops' NaN rule */

#ifdef _OPENMP
#include <omp.h>
#endif

#define FX_HB_CHUNK 2048                 /* elements per step: 8 KiB of fp32 per operand */
#define FX_HB_PAR_MIN ((int64_t)1 << 16) /* below this, one thread */

typedef void (*fx_widen_fn)(const uint16_t *, float *, int64_t);
typedef void (*fx_narrow_fn)(const float *, uint16_t *, int64_t);

static inline void fx_hb_apply(fx_op op, float *restrict x, const float *restrict y, int64_t n)
{
    if (op == FX_OP_ADD)
        for (int64_t i = 0; i < n; i++) x[i] = fx_f32_nan_first(x[i], x[i] + y[i]);
    else if (op == FX_OP_SUB)
        for (int64_t i = 0; i < n; i++) x[i] = fx_f32_nan_first(x[i], x[i] - y[i]);
    else
        for (int64_t i = 0; i < n; i++) x[i] = fx_f32_nan_first(x[i], x[i] * y[i]);
}

static inline void fx_hb_apply_scalar(fx_op op, float *restrict x, float y, int64_t n)
{
    if (op == FX_OP_ADD)
        for (int64_t i = 0; i < n; i++) x[i] = fx_f32_nan_first(x[i], x[i] + y);
    else if (op == FX_OP_SUB)
        for (int64_t i = 0; i < n; i++) x[i] = fx_f32_nan_first(x[i], x[i] - y);
    else
        for (int64_t i = 0; i < n; i++) x[i] = fx_f32_nan_first(x[i], x[i] * y);
}

/* What is done with each chunk's narrowed result before it goes to out: nothing; the ReLU of
 * tensor_relu on fp16/bf16 bits (fx_relu_half: kept where positive or NaN, canonical, else +0);
 * or the ReLU gradient's selection of tensor_relu_backward (kept, canonical, where the gate's
 * pattern is positive, else +0), the gate advancing with out. */
typedef enum {
    FX_HB_PLAIN = FX_HALF_ADD_PLAIN,
    FX_HB_RELU = FX_HALF_ADD_RELU,
    FX_HB_GATE = FX_HALF_ADD_GATE
} fx_hb_kind;

typedef struct fx_hb_epilogue {
    fx_hb_kind kind;
    const uint16_t *gate;
    uint16_t inf, qnan;
} fx_hb_epilogue;

static void fx_hb_finish(const fx_hb_epilogue *ep, const uint16_t *restrict h,
                         uint16_t *restrict out, int64_t at, int64_t n)
{
    const uint16_t inf = ep->inf, qnan = ep->qnan;
    if (ep->kind == FX_HB_RELU) {
        for (int64_t i = 0; i < n; i++) out[i] = fx_half_relu_c(h[i], inf, qnan);
        return;
    }
    const uint16_t *restrict g = ep->gate + at;
    for (int64_t i = 0; i < n; i++) out[i] = fx_half_gated_c(h[i], g[i], inf, qnan);
}

/* narrow x into out[at, at + n), through the epilogue (plain: straight) */
static inline void fx_hb_store(fx_narrow_fn narrow, const float *x, uint16_t *out, int64_t at,
                               int64_t n, const fx_hb_epilogue *ep)
{
    if (ep->kind == FX_HB_PLAIN) {
        narrow(x, out + at, n);
        return;
    }
    uint16_t h[FX_HB_CHUNK];
    narrow(x, h, n);
    fx_hb_finish(ep, h, out + at, at, n);
}

static int fx_half_binary_with(fx_op op, tensor_t *out, const tensor_t *a, const tensor_t *b,
                               fx_hb_epilogue *ep);

int fx_half_binary(fx_op op, tensor_t *out, const tensor_t *a, const tensor_t *b)
{
    fx_hb_epilogue ep = {FX_HB_PLAIN, NULL, 0, 0};
    return fx_half_binary_with(op, out, a, b, &ep);
}

/* test hooks: ops made with their ReLU or gate in the pass, and of those the gated sums */
static int64_t fx_hb_fused, fx_hb_gated;

int64_t fx_half_fused_made(void) { return __atomic_load_n(&fx_hb_fused, __ATOMIC_RELAXED); }
int64_t fx_half_gated_made(void) { return __atomic_load_n(&fx_hb_gated, __ATOMIC_RELAXED); }

static int fx_hb_count(int rc, int gated)
{
    if (rc == FX_OK) __atomic_fetch_add(&fx_hb_fused, 1, __ATOMIC_RELAXED);
    if (rc == FX_OK && gated) __atomic_fetch_add(&fx_hb_gated, 1, __ATOMIC_RELAXED);
    return rc;
}

int fx_half_add_relu(tensor_t *out, const tensor_t *a, const tensor_t *b)
{
    if (!out || !a || !b || out->st == a->st) return FX_HALF_BINARY_NOT_TAKEN;
    fx_hb_epilogue ep = {FX_HB_RELU, NULL, fx_half_inf(out->fmt), fx_half_qnan(out->fmt)};
    return fx_hb_count(fx_half_binary_with(FX_OP_ADD, out, a, b, &ep), 0);
}

int fx_half_gated_add(tensor_t *out, const tensor_t *a, const tensor_t *b, const tensor_t *gate)
{
    if (!out || !a || !b || !gate || gate->fmt != out->fmt || gate->st->on_device ||
        gate->st == out->st || out->st == a->st || !fx_tensor_is_contiguous(gate) ||
        !fx_shape_is(gate, out->ndim, out->shape) || !fx_shape_is(b, out->ndim, out->shape))
        return FX_HALF_BINARY_NOT_TAKEN;
    fx_hb_epilogue ep = {FX_HB_GATE, fx_tensor_base(gate), fx_half_inf(out->fmt),
                         fx_half_qnan(out->fmt)};
    return fx_hb_count(fx_half_binary_with(FX_OP_ADD, out, a, b, &ep), 1);
}

static int fx_half_binary_with(fx_op op, tensor_t *out, const tensor_t *a, const tensor_t *b,
                               fx_hb_epilogue *ep)
{
    if (op != FX_OP_ADD && op != FX_OP_SUB && op != FX_OP_MUL) return FX_HALF_BINARY_NOT_TAKEN;
    const fmt_t f = out->fmt;
    if ((f != FMT_FP16 && f != FMT_BF16) || a->fmt != f || b->fmt != f)
        return FX_HALF_BINARY_NOT_TAKEN;
    if (out->st->on_device || a->st->on_device || b->st->on_device || b->st == out->st)
        return FX_HALF_BINARY_NOT_TAKEN;
    if (!fx_tensor_is_contiguous(out) || !fx_tensor_is_contiguous(a) ||
        !fx_tensor_is_contiguous(b) || !fx_shape_is(a, out->ndim, out->shape))
        return FX_HALF_BINARY_NOT_TAKEN;
    const bool same = fx_shape_is(b, out->ndim, out->shape);
    if (!same && !fx_broadcasts_per_channel(out, b)) return FX_HALF_BINARY_NOT_TAKEN;
    /* a may be out itself (each chunk of a is read before the same chunk of out is written),
     * but not an overlapping view of it */
    if (a->st == out->st && fx_tensor_base(a) != fx_tensor_base(out))
        return FX_HALF_BINARY_NOT_TAKEN;

    const fx_backend *be = fx_backend_active();
    const fx_widen_fn widen = f == FMT_FP16 ? be->cvt.fp16_to_f32 : be->cvt.bf16_to_f32;
    const fx_narrow_fn narrow = f == FMT_FP16 ? be->cvt.f32_to_fp16 : be->cvt.f32_to_bf16;
    const int64_t n = fx_numel_of(out->ndim, out->shape);
    const int64_t C = same ? 1 : out->shape[1];
    if (n == 0) return FX_OK;
    const int64_t planes = same ? 1 : out->shape[0] * C; /* >= 1: n > 0 */
    /* work units: per-channel planes (each one value of b), or chunks of the same-shape op */
    const int64_t inner = same ? FX_HB_CHUNK : n / planes;
    const int64_t units = same ? (n + FX_HB_CHUNK - 1) / FX_HB_CHUNK : planes;
    const uint16_t *ap = fx_tensor_base(a), *bp = fx_tensor_base(b);
    uint16_t *op16 = fx_tensor_base(out);
    const int nt = n >= FX_HB_PAR_MIN ? flexpoint_num_threads() : 1;
    (void)nt;
    /* planes of 2 to 15 values: four calls per plane would cost more than the dispatcher's
     * vector passes (the same bits) */
    if (!same && inner > 1 && inner < 16) return FX_HALF_BINARY_NOT_TAKEN;
    if (!same && inner == 1) {
        /* planes of one value ([N, C] + [C], a linear layer's bias): b varies along each row,
         * so each row is the same-shape op against b, a chunk at a time (one value per plane
         * cost four calls per element: a [128, 128] bias add took 0.38 ms) */
        const int64_t rows = out->shape[0];
        const int b_once = C <= FX_HB_CHUNK; /* b widened once per thread, not per row */
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
        {
            float x[FX_HB_CHUNK], y[FX_HB_CHUNK];
            if (b_once) widen(bp, y, C);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t r = 0; r < rows; r++)
                for (int64_t i = 0; i < C; i += FX_HB_CHUNK) {
                    const int64_t len = C - i < FX_HB_CHUNK ? C - i : FX_HB_CHUNK;
                    widen(ap + r * C + i, x, len);
                    if (!b_once) widen(bp + i, y, len);
                    fx_hb_apply(op, x, y, len);
                    fx_hb_store(narrow, x, op16, r * C + i, len, ep);
                }
        }
        return FX_OK;
    }
    if (same && op == FX_OP_ADD && be->half_add) { /* the level's one-pass add, the same bits */
        const uint16_t *gp = ep->kind == FX_HB_GATE ? ep->gate : NULL;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
        for (int64_t u = 0; u < units; u++) {
            const int64_t lo = u * inner, len = n - lo < inner ? n - lo : inner;
            be->half_add(f, (int)ep->kind, ap + lo, bp + lo, gp ? gp + lo : NULL, op16 + lo, len);
        }
        return FX_OK;
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t u = 0; u < units; u++) {
        float x[FX_HB_CHUNK], y[FX_HB_CHUNK];
        const int64_t lo = u * inner, hi = lo + inner < n ? lo + inner : n;
        float bval = 0.0f;
        if (!same) widen(bp + u % C, &bval, 1);
        for (int64_t i = lo; i < hi; i += FX_HB_CHUNK) {
            const int64_t len = hi - i < FX_HB_CHUNK ? hi - i : FX_HB_CHUNK;
            widen(ap + i, x, len);
            if (same) {
                widen(bp + i, y, len);
                fx_hb_apply(op, x, y, len);
            } else {
                fx_hb_apply_scalar(op, x, bval, len);
            }
            fx_hb_store(narrow, x, op16, i, len, ep);
        }
    }
    return FX_OK;
}
