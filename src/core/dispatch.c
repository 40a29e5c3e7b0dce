/* The dispatcher: picks the compute format and the kernel, brings the inputs into that
 * format (the ONE documented place where mixed inputs are converted), runs the kernel into a
 * stage, and hands the stage to the write path.
 *
 * Compute rule:
 *   - first input FLEX16_5/DFP16 -> integer compute. Other shared-exponent inputs are used as
 *     they are (int16 + exponent); float inputs are quantised at their exact exponent, as a
 *     DFP16 write would do.
 *   - otherwise float compute. If every input has the same float format and the backend has a
 *     kernel for it, that kernel reads the inputs directly; else every input is widened to
 *     fp32 (exact for fp16/bf16; dequantising for shared-exponent inputs) and the fp32 kernel
 *     runs. This is also the fallback for any empty [op][format] slot.
 */
#include "dispatch.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_internal.h"
#include "device_backend.h"

/* A view of x expanded (stride 0) to `ndim`/`shape` by NumPy broadcasting rules; the caller
 * has already checked compatibility. */
static tensor_t fx_broadcast_view(const tensor_t *x, int ndim, const int64_t *shape)
{
    tensor_t v = *x;
    v.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        int xd = d - (ndim - x->ndim);
        v.shape[d] = shape[d];
        v.strides[d] = (xd >= 0 && x->shape[xd] == shape[d]) ? x->strides[xd] : 0;
    }
    return v;
}

int fx_operand_make(const tensor_t *x, int int_compute, fmt_t cf, int strided_ok, int bc_ndim,
                    const int64_t *bc_shape, fx_operand *o, fx_scratch *tmp, const char *func)
{
    /* host operands only: fx_dispatch sends device tensors to the device backend first */
    int rc = fx_need_host(x, "an input", FX_EUNSUPPORTED, FX_HOST_PATH_HINT,
                          func);
    if (rc) return rc;
    const fx_backend *be = fx_backend_active();
    bool bcast = bc_shape && !fx_shape_is(x, bc_ndim, bc_shape);
    tensor_t v = bcast ? fx_broadcast_view(x, bc_ndim, bc_shape) : *x;
    bool shared = fmt_is_shared_exponent(x->fmt) != 0;
    bool convert = int_compute ? !shared : x->fmt != cf;
    bool gather = bcast || (!strided_ok && !fx_tensor_is_contiguous(&v));
    int64_t n = fx_numel_of(v.ndim, v.shape);

    o->fmt = cf;
    o->exp = shared ? x->st->exp : 0;
    o->ndim = v.ndim;
    memcpy(o->shape, v.shape, sizeof o->shape);
    memcpy(o->strides, v.strides, sizeof o->strides);
    o->data = fx_tensor_base(&v);
    if (!convert && !gather) return FX_OK;

    /* contiguous copy in the source format */
    const void *src = o->data;
    if (gather || !fx_tensor_is_contiguous(&v)) {
        void *g = fx_scratch_alloc(tmp, n, fmt_elem_size(x->fmt));
        if (!g) return fx_error(FX_ENOMEM, func, "cannot allocate %lld elements", (long long)n);
        fx_strided_copy(&v, g, 0);
        src = g;
    }
    if (convert) {
        if (int_compute) { /* float input into an integer op: exact exponent */
            const float *f = src;
            if (x->fmt != FMT_FP32) {
                float *w = fx_scratch_alloc(tmp, n, sizeof *w);
                if (!w) return fx_error(FX_ENOMEM, func, "cannot allocate %lld floats",
                                        (long long)n);
                fx_widen_to_f32(be, x->fmt, 0, src, w, n);
                f = w;
            }
            int16_t *q = fx_scratch_alloc(tmp, n, sizeof *q);
            if (!q) return fx_error(FX_ENOMEM, func, "cannot allocate %lld int16", (long long)n);
            fx_quantize_exact(be, f, q, n, &o->exp);
            src = q;
        } else { /* float compute: widen to fp32 */
            float *w = fx_scratch_alloc(tmp, n, sizeof *w);
            if (!w) return fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)n);
            fx_widen_to_f32(be, x->fmt, shared ? x->st->exp : 0, src, w, n);
            src = w;
        }
    }
    o->data = src;
    int64_t s = 1;
    for (int d = o->ndim - 1; d >= 0; d--) {
        o->strides[d] = s;
        s *= o->shape[d] > 0 ? o->shape[d] : 1;
    }
    return FX_OK;
}

_Static_assert(FX_MAX_INPUTS + 1 <= FX_OP_MAX_TENSORS, "out and every input fit one fx_op_args");

/* Where the op runs: 0 host, 1 device (all tensors on one device). Mixed placements fail with
 * a message naming out and the operand that lives elsewhere (the rule of fx_op_placement). */
static int fx_placement(const fx_op_request *rq, int *on_device)
{
    fx_op_args a = {.func = rq->func, .nt = 1 + rq->nin, .t = {rq->out},
                    .tn = {"out", "a", "b", "c", "d"}};
    for (int i = 0; i < rq->nin; i++) a.t[1 + i] = rq->in[i];
    int device = -1;
    int rc = fx_op_placement(&a, &device);
    *on_device = device >= 0;
    return rc;
}

/* A stage op whose tensors live on one device: the device backend's own dispatcher, when the
 * build has a device backend and it computes (op, format of the first input). */
static int fx_device_dispatch(const fx_op_request *rq)
{
    const fx_device_backend *d = fx_device_backend_get();
    if (!d) return fx_error(FX_EDEVICE, rq->func, FX_NO_DEVICE_BACKEND);
    if (!d->supports_op(rq->op, rq->in[0]->fmt))
        return fx_error(FX_EUNSUPPORTED, rq->func, "the %s backend has no %s for %s inputs; the "
                        "tensors live on CUDA device %d (move them with tensor_to_host)",
                        d->name, fx_op_info_of(rq->op)->name, fmt_name(rq->in[0]->fmt),
                        rq->out->st->device);
    return d->dispatch(rq);
}

static atomic_int gemm_h16_enabled = 1;
static atomic_llong gemm_h16_runs;
static atomic_llong gemm_h16_bias_runs;
int64_t fx_gemm_h16_bias_runs(void) { return atomic_load(&gemm_h16_bias_runs); }
void fx_gemm_h16_set_enabled(int on) { atomic_store(&gemm_h16_enabled, on != 0); }
int fx_gemm_h16_enabled(void) { return atomic_load(&gemm_h16_enabled); }
int64_t fx_gemm_h16_runs(void) { return atomic_load(&gemm_h16_runs); }

int fx_dispatch(const fx_op_request *rq)
{
    int on_device = 0;
    int prc = fx_placement(rq, &on_device);
    if (prc) return prc;
    if (on_device) return fx_device_dispatch(rq);

    const fx_backend *be = fx_backend_active();
    const int src = fx_unary_stream(rq, be);
    if (src != FX_DECLINED) return src;
    tensor_t *out = rq->out;
    int int_compute = fmt_is_shared_exponent(rq->in[0]->fmt);
    fmt_t cf;
    if (int_compute) {
        cf = rq->in[0]->fmt;
    } else {
        cf = rq->in[0]->fmt;
        for (int i = 1; i < rq->nin; i++)
            if (rq->in[i]->fmt != cf) cf = FMT_FP32;
        if (fmt_is_shared_exponent(cf) || !be->kernels[rq->op][cf]) cf = FMT_FP32;
    }
    fx_kernel k = be->kernels[rq->op][cf];
    if (!k && int_compute) { /* no integer kernel for this op: dequantise and use fp32 */
        int_compute = 0;
        cf = FMT_FP32;
        k = be->kernels[rq->op][cf];
    }
    if (!k)
        return fx_error(FX_EUNSUPPORTED, rq->func, "backend %s has no kernel for this op",
                        be->name);

    fx_scratch tmp = {.n = 0};
    fx_op_call c;
    memset(&c, 0, sizeof c);
    c.op = rq->op;
    c.nin = rq->nin;
    int rc = FX_OK;
    for (int i = 0; i < rq->nin && rc == FX_OK; i++)
        rc = fx_operand_make(rq->in[i], int_compute, cf, rq->strided_ok, rq->out->ndim,
                             rq->broadcast ? rq->out->shape : NULL, &c.in[i], &tmp, rq->func);
    if (rc) {
        fx_scratch_free(&tmp);
        return rc;
    }

    c.out_ndim = out->ndim;
    memcpy(c.out_shape, out->shape, sizeof c.out_shape);
    c.out_numel = fx_numel_of(out->ndim, out->shape);
    c.red_outer = rq->red_outer;
    c.red_len = rq->red_len;
    c.red_inner = rq->red_inner;
    c.unary_fn = rq->unary_fn;
    c.unary_p[0] = rq->unary_p[0];
    c.unary_p[1] = rq->unary_p[1];
    c.scalar_f32 = (float)rq->scalar;
    if (rq->op == FX_OP_SCALE && rq->scalar != 0.0) {
        /* s = f * 2^k with f in [0.5, 1): a 31-bit mantissa m = round(f * 2^30) */
        int k2;
        double f = frexp(rq->scalar, &k2);
        c.scalar_mant = (int64_t)nearbyint(f * 1073741824.0);
        c.scalar_exp = k2 - 30;
    }
    c.nthreads = flexpoint_num_threads();

    fx_stage s = {.kind = int_compute ? FX_STAGE_I64 : FX_STAGE_F32, .n = c.out_numel};
    int out_exp = 0, imax_known = 0, h16_done = 0;
    uint64_t imax = 0;
    c.out_imax = &imax;
    c.out_imax_known = &imax_known;
    if (int_compute) {
        c.out_i64 = fx_scratch_alloc(&tmp, c.out_numel, sizeof(int64_t));
        c.out_exp = &out_exp;
        if (!c.out_i64) rc = fx_error(FX_ENOMEM, rq->func, "cannot allocate the int64 stage");
    } else {
        bool direct = out->fmt == FMT_FP32 && fx_tensor_is_contiguous(out);
        bool half_out = (out->fmt == FMT_FP16 || out->fmt == FMT_BF16) &&
                        fx_tensor_is_contiguous(out) && !out->st->dist;
        for (int i = 0; i < rq->nin; i++)
            if (rq->in[i]->st == out->st) direct = half_out = false;
        c.out_f32 = direct ? fx_tensor_base(out) : fx_scratch_alloc(&tmp, c.out_numel, sizeof(float));
        if (!c.out_f32) rc = fx_error(FX_ENOMEM, rq->func, "cannot allocate the fp32 stage");
        /* a product into a whole fp16/bf16 tensor: a kernel may convert its results into it
         * in cache (fx_op_call.out_h16), the write's conversion without the stage's pass */
        if (rq->op == FX_OP_MATMUL && half_out && fx_gemm_h16_enabled()) {
            c.out_h16 = (uint16_t *)fx_tensor_base(out);
            c.out_h16_cvt = out->fmt == FMT_FP16 ? be->cvt.f32_to_fp16 : be->cvt.f32_to_bf16;
            c.out_h16_done = &h16_done;
            /* fx_matmul_bias's bias, added where the kernel converts (h16_bias.h) */
            const tensor_t *bias = rq->epi_bias;
            if (bias && rc == FX_OK && bias->st != out->st && bias->fmt == out->fmt &&
                fx_tensor_is_contiguous(bias)) {
                float *bf = fx_scratch_alloc(&tmp, out->shape[1], sizeof *bf);
                if (bf) {
                    fx_widen_to_f32(be, bias->fmt, 0, fx_tensor_base(bias), bf, out->shape[1]);
                    c.out_h16_bias = bf;
                    c.out_h16_widen =
                        out->fmt == FMT_FP16 ? be->cvt.fp16_to_f32 : be->cvt.bf16_to_f32;
                }
            }
        }
    }
    if (rc == FX_OK) {
        flexpoint_clear_error();
        rc = k(&c);
    }
    int bias_done = 0;
    if (rc == FX_OK && h16_done) {
        atomic_fetch_add(&gemm_h16_runs, 1);
        bias_done = c.out_h16_bias != NULL;
        if (bias_done) atomic_fetch_add(&gemm_h16_bias_runs, 1);
    } else if (rc == FX_OK) {
        s.f32 = c.out_f32;
        s.i64 = c.out_i64;
        s.exp = out_exp;
        s.imax_known = int_compute && imax_known;
        s.imax = imax;
        rc = fx_write(out, &s, rq->func);
    } else if (rc != FX_OK && flexpoint_last_error()[0] == '\0') {
        fx_error(rc, rq->func, "kernel failed");
    }
    fx_scratch_free(&tmp);
    /* a bias the kernel did not add: the separate pass, on the product as written */
    if (rc == FX_OK && rq->epi_bias && !bias_done) rc = tensor_add(out, out, rq->epi_bias);
    return rc;
}
