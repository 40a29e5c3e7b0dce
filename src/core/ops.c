/* Public op wrappers: validate everything (so a failing op writes nothing), then fill one
 * request for the dispatcher. Adding an op: an enum entry in backend.h, a wrapper here, a
 * kernel per compute format, a reference and a case in the tests. */
#include "ops_internal.h"
#include "compose.h"
#include "half_bits.h"
#include "half_binary.h"
#include "shared_binary.h"
#include "shared_matmul.h"
#include "shared_scale.h"

#include <math.h>
#include <stdio.h>

#define FX_NEED(p, name)                                                                       \
    do {                                                                                       \
        if (!(p)) return FX_FAIL(FX_EINVAL, "%s is NULL", name);                               \
    } while (0)

static int fx_same_shape_check(const char *func, const tensor_t *out, const tensor_t *a)
{
    bool same = out->ndim == a->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = out->shape[d] == a->shape[d];
    if (!same) {
        char b1[160], b2[160];
        return fx_error(FX_ESHAPE, func, "out.shape=%s != a.shape=%s",
                        fx_shape_str(out, b1, sizeof b1), fx_shape_str(a, b2, sizeof b2));
    }
    return FX_OK;
}

/* NumPy broadcasting: out's shape must equal broadcast(a.shape, b.shape). */
static int fx_broadcast_check(const char *func, const tensor_t *out, const tensor_t *a,
                              const tensor_t *b)
{
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    char b1[160], b2[160], b3[160];
    if (out->ndim != nd)
        return fx_error(FX_ESHAPE, func, "out.shape=%s does not match the broadcast of "
                        "a.shape=%s and b.shape=%s", fx_shape_str(out, b1, sizeof b1),
                        fx_shape_str(a, b2, sizeof b2), fx_shape_str(b, b3, sizeof b3));
    for (int d = 0; d < nd; d++) {
        int da = d - (nd - a->ndim), db = d - (nd - b->ndim);
        int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return fx_error(FX_ESHAPE, func, "a.shape=%s and b.shape=%s cannot broadcast "
                            "(dimension %d: %lld vs %lld)", fx_shape_str(a, b2, sizeof b2),
                            fx_shape_str(b, b3, sizeof b3), d, (long long)sa, (long long)sb);
        int64_t want = sa == 1 ? sb : sa;
        if (out->shape[d] != want)
            return fx_error(FX_ESHAPE, func, "out.shape[%d]=%lld but broadcasting a.shape=%s "
                            "and b.shape=%s gives %lld", d, (long long)out->shape[d],
                            fx_shape_str(a, b2, sizeof b2), fx_shape_str(b, b3, sizeof b3),
                            (long long)want);
    }
    return FX_OK;
}

static int fx_binary(fx_op op, const char *func, tensor_t *out, const tensor_t *a,
                     const tensor_t *b)
{
    if (!out || !a || !b)
        return fx_error(FX_EINVAL, func, "%s is NULL", !out ? "out" : (!a ? "a" : "b"));
    int rc = fx_broadcast_check(func, out, a, b);
    if (rc) return rc;
    rc = fx_half_binary(op, out, a, b); /* 16-bit floats, common shapes: one pass */
    if (rc != FX_HALF_BINARY_NOT_TAKEN) return rc;
    rc = fx_shared_binary(op, out, a, b); /* FLEX16_5/DFP16 add/sub: no int64 stage */
    if (rc != FX_SHARED_BINARY_NOT_TAKEN) return rc;
    fx_op_request rq = {.op = op, .func = func, .out = out, .nin = 2, .in = {a, b},
                        .broadcast = 1};
    return fx_dispatch(&rq);
}

int tensor_add(tensor_t *out, const tensor_t *a, const tensor_t *b)
{
    return fx_binary(FX_OP_ADD, __func__, out, a, b);
}

int tensor_sub(tensor_t *out, const tensor_t *a, const tensor_t *b)
{
    return fx_binary(FX_OP_SUB, __func__, out, a, b);
}

int tensor_mul(tensor_t *out, const tensor_t *a, const tensor_t *b)
{
    return fx_binary(FX_OP_MUL, __func__, out, a, b);
}

/* The arguments of a unary op: both tensors given, of one shape. */
static int fx_unary_check(const char *func, const tensor_t *out, const tensor_t *a)
{
    if (!out || !a) return fx_error(FX_EINVAL, func, "%s is NULL", !out ? "out" : "a");
    return fx_same_shape_check(func, out, a);
}

static int fx_unary_dispatch(fx_op op, const char *func, tensor_t *out, const tensor_t *a,
                             double s)
{
    fx_op_request rq = {.op = op, .func = func, .out = out, .nin = 1, .in = {a}, .scalar = s};
    return fx_dispatch(&rq);
}

static int fx_unary(fx_op op, const char *func, tensor_t *out, const tensor_t *a, double s)
{
    const int rc = fx_unary_check(func, out, a);
    return rc ? rc : fx_unary_dispatch(op, func, out, a, s);
}

int tensor_scale(tensor_t *out, const tensor_t *a, double s)
{
    if (!isfinite(s)) return FX_FAIL(FX_EINVAL, "scalar %g is not finite", s);
    int rc = fx_unary_check(__func__, out, a);
    if (rc) return rc;
    rc = fx_shared_scale(out, a, s); /* FLEX16_5/DFP16 input: no int64 stage */
    if (rc != FX_SHARED_SCALE_NOT_TAKEN) return rc;
    return fx_unary_dispatch(FX_OP_SCALE, __func__, out, a, s);
}

/* test hooks (ops_internal.h) */
static int fx_int16_unary_on = 1;
static int64_t fx_int16_copies;

void fx_int16_unary_set_enabled(int on) { __atomic_store_n(&fx_int16_unary_on, on, __ATOMIC_RELAXED); }

int64_t fx_int16_copy_taken(void) { return __atomic_load_n(&fx_int16_copies, __ATOMIC_RELAXED); }

static int fx_int16_unary_enabled(void) { return __atomic_load_n(&fx_int16_unary_on, __ATOMIC_RELAXED); }

/* copy (relu 0) or relu (1) of a shared-exponent tensor on the host: the outputs are the
 * input's mantissas, or for relu those or 0, at the input's exponent, so they are staged as
 * int16 (fx_write_i16_max) instead of going through the dispatcher's int64 stage, which the
 * FX_OP_COPY/FX_OP_RELU kernels fill one element at a time. The integers, hence the result,
 * are those kernels' (whose definitions are m and max(m, 0)); only the memory traffic
 * differs. A copy reads a contiguous a in place where out has storage of its own (the
 * transformer copies its attention heads this way, two million values a time), otherwise a
 * gathered or private copy. */
static int fx_int16_unary(tensor_t *out, const tensor_t *a, int relu, const char *func)
{
    if (relu) {
        int done = fx_shared_gated(out, a, a, func); /* from a itself, no int16 stage */
        if (done != FX_SHARED_BINARY_NOT_TAKEN) return done;
    } else {
        __atomic_fetch_add(&fx_int16_copies, 1, __ATOMIC_RELAXED);
    }
    fx_scratch s = {.n = 0};
    fx_operand o;
    int rc = fx_operand_make(a, 1, a->fmt, 0, 0, NULL, &o, &s, func);
    const int64_t n = fx_numel_of(a->ndim, a->shape);
    const int16_t *m = rc ? NULL : o.data;
    int16_t *v = NULL;
    const int in_place = !rc && !relu && a->st != out->st;
    if (!rc && !in_place) {
        v = fx_scratch_alloc(&s, n, sizeof *v);
        if (!v) rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld int16", (long long)n);
    }
    if (rc) {
        fx_scratch_free(&s);
        return rc;
    }
    int32_t mx = 0;
    const int nt = n >= ((int64_t)1 << 16) ? flexpoint_num_threads() : 1;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1) reduction(max : mx)
#endif
    for (int64_t i = 0; i < n; i++) {
        const int32_t r = relu ? (m[i] > 0 ? m[i] : 0) : (m[i] < 0 ? -m[i] : m[i]);
        if (v) v[i] = (int16_t)(relu ? r : m[i]);
        mx = r > mx ? r : mx;
    }
    rc = fx_write_i16_max(out, v ? v : m, o.exp, (uint64_t)mx, func);
    fx_scratch_free(&s);
    return rc;
}

static int64_t fx_half_copies, fx_half_gathered;
int64_t fx_half_copy_taken(void) { return __atomic_load_n(&fx_half_copies, __ATOMIC_RELAXED); }
int64_t fx_half_select_gathered_runs(void)
{
    return __atomic_load_n(&fx_half_gathered, __ATOMIC_RELAXED);
}

/* fx_half_select's selection of n patterns (src stride apart) into dst: an fx_gather_run_fn */
typedef struct {
    int relu;
    uint16_t inf, qnan;
} fx_half_select_run;

static void fx_half_select_span(const void *ctx, const void *src, int64_t stride, void *dst,
                                int64_t n)
{
    const fx_half_select_run *c = ctx;
    const uint16_t *h = src;
    uint16_t *v = dst;
    for (int64_t i = 0; i < n; i++)
        v[i] = c->relu ? fx_half_relu_c(h[i * stride], c->inf, c->qnan)
                       : fx_half_canonical_c(h[i * stride], c->inf, c->qnan);
}

/* relu (relu 1) or a copy (relu 0) of an fp16/bf16 tensor into one of the same format, on bit
 * patterns (half_bits.h): the fp32 route (widen, x > 0 ? x : +0 with NaN kept or x itself,
 * round back) gives these same bits. The copies are the attention's heads split and merged
 * ([B, T, H, D/H] and [B, H, T, D/H] in turn), which the fp32 route widened into a stage and
 * rounded back. Not into a summed distributed output: its write sums the ranks (fx_write). */
static int fx_half_select(tensor_t *out, const tensor_t *a, int relu, const char *func)
{
    const tensor_t *ins[1] = {a};
    const int64_t n = fx_numel_of(a->ndim, a->shape);
    fx_scratch s = {.n = 0};
    uint16_t *v = fx_half_direct(out, ins, 1);
    if (!v) v = fx_scratch_alloc(&s, n, sizeof *v);
    if (!v) return fx_error(FX_ENOMEM, func, "cannot allocate %lld 16-bit values", (long long)n);
    const fx_half_select_run c = {relu, fx_half_inf(a->fmt), fx_half_qnan(a->fmt)};
    if (!fx_tensor_is_contiguous(a)) {
        /* a view (the heads' split and merge) read run by run straight into v: one pass,
         * where a gathered copy and then the select made two */
        fx_strided_gather_with(a, v, fx_half_select_span, &c);
        __atomic_fetch_add(&fx_half_gathered, 1, __ATOMIC_RELAXED);
    } else { /* in pieces of 2^14 on the threads, from 2^16 values */
        const uint16_t *h = fx_tensor_base(a);
        const int64_t piece = (int64_t)1 << 14, pieces = (n + piece - 1) / piece;
        const int nt = n >= ((int64_t)1 << 16) ? flexpoint_num_threads() : 1;
        (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
        for (int64_t p = 0; p < pieces; p++) {
            const int64_t i0 = p * piece;
            fx_half_select_span(&c, h + i0, 1, v + i0, n - i0 < piece ? n - i0 : piece);
        }
    }
    const int rc = fx_write_half_bits(out, v, func);
    fx_scratch_free(&s);
    return rc;
}

int tensor_relu(tensor_t *out, const tensor_t *a)
{
    if (out && a && !a->st->on_device && !out->st->on_device &&
        fx_same_shape_check(__func__, out, a) == FX_OK) {
        if (fmt_is_shared_exponent(a->fmt) && fx_int16_unary_enabled())
            return fx_int16_unary(out, a, 1, __func__);
        if ((a->fmt == FMT_FP16 || a->fmt == FMT_BF16) && out->fmt == a->fmt && !out->st->dist)
            return fx_half_select(out, a, 1, __func__);
    }
    return fx_unary(FX_OP_RELU, __func__, out, a, 0);
}

int tensor_copy(tensor_t *out, const tensor_t *a)
{
    if (out && a && !a->st->on_device && !out->st->on_device &&
        fx_same_shape_check(__func__, out, a) == FX_OK) {
        if (fmt_is_shared_exponent(a->fmt) && fx_int16_unary_enabled())
            return fx_int16_unary(out, a, 0, __func__);
        if ((a->fmt == FMT_FP16 || a->fmt == FMT_BF16) && out->fmt == a->fmt &&
            !out->st->dist && fx_int16_unary_enabled()) {
            __atomic_fetch_add(&fx_half_copies, 1, __ATOMIC_RELAXED);
            return fx_half_select(out, a, 0, __func__);
        }
    }
    return fx_unary(FX_OP_COPY, __func__, out, a, 0);
}

/* The reduction geometry of tensor_sum (FX_OP_SUM): out[o*inner + i] is the reduction of
 * a[(o*len + k)*inner + i] over k. Validates out's shape exactly as tensor_sum does. */
int fx_reduce_geometry(const tensor_t *out, const tensor_t *a, int axis, int64_t *outer,
                              int64_t *len, int64_t *inner, const char *func)
{
    char b1[160], b2[160];
    if (axis == FX_AXIS_ALL) {
        if (fx_numel_of(out->ndim, out->shape) != 1)
            return fx_error(FX_ESHAPE, func, "reducing everything needs an output with 1 "
                            "element, out.shape=%s", fx_shape_str(out, b1, sizeof b1));
        *outer = *inner = 1;
        *len = fx_numel_of(a->ndim, a->shape);
        return FX_OK;
    }
    int ax = axis < 0 ? axis + a->ndim : axis;
    if (ax < 0 || ax >= a->ndim)
        return fx_error(FX_EINVAL, func, "axis=%d is out of range for a %d-D tensor (or "
                        "FX_AXIS_ALL)", axis, a->ndim);
    /* out: a's shape without the axis, or with the axis kept as size 1 */
    bool dropped = out->ndim == a->ndim - 1, kept = out->ndim == a->ndim;
    for (int d = 0, od = 0; d < a->ndim; d++) {
        if (d == ax) {
            if (kept && out->shape[d] != 1) kept = false;
            if (out->ndim == a->ndim) od++;
            continue;
        }
        if (dropped && out->shape[od] != a->shape[d]) dropped = false;
        if (kept && out->shape[d] != a->shape[d]) kept = false;
        od++;
    }
    if (a->ndim == 1 && out->ndim == 1 && out->shape[0] == 1) kept = true;
    if (!dropped && !kept)
        return fx_error(FX_ESHAPE, func, "out.shape=%s does not match a.shape=%s reduced "
                        "along axis %d", fx_shape_str(out, b1, sizeof b1),
                        fx_shape_str(a, b2, sizeof b2), ax);
    *outer = 1;
    for (int d = 0; d < ax; d++) *outer *= a->shape[d];
    *len = a->shape[ax];
    *inner = 1;
    for (int d = ax + 1; d < a->ndim; d++) *inner *= a->shape[d];
    return FX_OK;
}

int tensor_sum(tensor_t *out, const tensor_t *a, int axis)
{
    FX_NEED(out, "out");
    FX_NEED(a, "a");
    fx_op_request rq = {.op = FX_OP_SUM, .func = __func__, .out = out, .nin = 1, .in = {a}};
    int rc = fx_reduce_geometry(out, a, axis, &rq.red_outer, &rq.red_len, &rq.red_inner,
                                __func__);
    return rc ? rc : fx_dispatch(&rq);
}

int fx_matmul_shape_check(const tensor_t *out, const tensor_t *a, const tensor_t *b,
                        const char *func)
{
    char b1[160], b2[160], b3[160];
    if (a->ndim != 2 || b->ndim != 2 || out->ndim != 2)
        return fx_error(FX_ESHAPE, func, "matmul needs 2-D tensors, got a.shape=%s b.shape=%s "
                        "out.shape=%s", fx_shape_str(a, b1, sizeof b1),
                        fx_shape_str(b, b2, sizeof b2), fx_shape_str(out, b3, sizeof b3));
    if (a->shape[1] != b->shape[0])
        return fx_error(FX_ESHAPE, func, "a.shape[1]=%lld != b.shape[0]=%lld",
                        (long long)a->shape[1], (long long)b->shape[0]);
    if (out->shape[0] != a->shape[0] || out->shape[1] != b->shape[1])
        return fx_error(FX_ESHAPE, func, "out.shape=%s but a.shape=%s x b.shape=%s gives "
                        "[%lld, %lld]", fx_shape_str(out, b1, sizeof b1),
                        fx_shape_str(a, b2, sizeof b2), fx_shape_str(b, b3, sizeof b3),
                        (long long)a->shape[0], (long long)b->shape[1]);
    return FX_OK;
}

int tensor_matmul(tensor_t *out, const tensor_t *a, const tensor_t *b)
{
    FX_NEED(out, "out");
    FX_NEED(a, "a");
    FX_NEED(b, "b");
    const int crc = fx_matmul_shape_check(out, a, b, __func__);
    if (crc) return crc;
    /* FLEX16_5/DFP16 products with a large output: blocks rounded in cache, no whole stage */
    const int rc = fx_shared_matmul(out, a, b);
    if (rc != FX_SHARED_MATMUL_NOT_TAKEN) return rc;
    fx_op_request rq = {.op = FX_OP_MATMUL, .func = __func__, .out = out, .nin = 2,
                        .in = {a, b}, .strided_ok = 1};
    return fx_dispatch(&rq);
}

int fx_matmul_bias(tensor_t *out, const tensor_t *a, const tensor_t *b, const tensor_t *bias)
{
    FX_NEED(out, "out");
    FX_NEED(a, "a");
    FX_NEED(b, "b");
    FX_NEED(bias, "bias");
    int rc = fx_matmul_shape_check(out, a, b, __func__);
    if (rc) return rc;
    char b1[160], b2[160];
    if (bias->ndim != 1 || bias->shape[0] != out->shape[1])
        return FX_FAIL(FX_ESHAPE, "bias.shape=%s does not match out.shape=%s: want [%lld]",
                       fx_shape_str(bias, b1, sizeof b1), fx_shape_str(out, b2, sizeof b2),
                       (long long)out->shape[1]);
    const int half_host = (out->fmt == FMT_FP16 || out->fmt == FMT_BF16) &&
                          !out->st->on_device && !a->st->on_device && !b->st->on_device &&
                          !bias->st->on_device;
    if (!half_host) {
        rc = tensor_matmul(out, a, b);
        return rc ? rc : tensor_add(out, out, bias);
    }
    /* the product with the bias as its epilogue where the dispatcher offers it one (else the
     * dispatcher adds it in a pass of its own after the write) */
    fx_op_request rq = {.op = FX_OP_MATMUL, .func = __func__, .out = out, .nin = 2,
                        .in = {a, b}, .strided_ok = 1, .epi_bias = bias};
    return fx_dispatch(&rq);
}
