/* Building blocks for composite ops; see compose.h. */
#include "compose.h"

#include <string.h>

int fx_is_int_compute(const tensor_t *t) { return fmt_is_shared_exponent(t->fmt); }

int fx_read_f32(const tensor_t *t, float **out, fx_scratch *s, const char *func)
{
    int rc0 = fx_need_host(t, "an input", FX_EUNSUPPORTED, FX_HOST_PATH_HINT,
                           func);
    if (rc0) return rc0;
    int64_t n = fx_numel_of(t->ndim, t->shape);
    float *buf = fx_scratch_alloc(s, n, sizeof *buf);
    if (!buf) return fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)n);
    int rc = tensor_to_f32(t, buf);
    if (rc) return rc;
    *out = buf;
    return FX_OK;
}

int fx_read_i16(const tensor_t *t, const int16_t **out, int *exp, fx_scratch *s,
                const char *func)
{
    fx_operand o;
    int rc = fx_operand_make(t, 1, t->fmt, 0, 0, NULL, &o, s, func);
    if (rc) return rc;
    *out = (const int16_t *)o.data;
    *exp = o.exp;
    return FX_OK;
}

int fx_write_f32(tensor_t *out, const float *vals, const char *func)
{
    fx_stage st = {.kind = FX_STAGE_F32, .n = fx_numel_of(out->ndim, out->shape), .f32 = vals};
    return fx_write(out, &st, func);
}

int fx_write_f32_max(tensor_t *out, const float *vals, float max, int64_t nonfinite,
                     const char *func)
{
    fx_stage st = {.kind = FX_STAGE_F32, .n = fx_numel_of(out->ndim, out->shape), .f32 = vals,
                   .f32_max_known = 1, .f32_max = max, .f32_nonfinite = nonfinite};
    return fx_write(out, &st, func);
}

int fx_write_i64(tensor_t *out, const int64_t *vals, int exp, const char *func)
{
    fx_stage st = {.kind = FX_STAGE_I64, .n = fx_numel_of(out->ndim, out->shape), .i64 = vals,
                   .exp = exp};
    return fx_write(out, &st, func);
}

int fx_write_i64_max(tensor_t *out, const int64_t *vals, int exp, uint64_t imax,
                     const char *func)
{
    fx_stage st = {.kind = FX_STAGE_I64, .n = fx_numel_of(out->ndim, out->shape), .i64 = vals,
                   .exp = exp, .imax_known = 1, .imax = imax};
    return fx_write(out, &st, func);
}

int fx_write_i16(tensor_t *out, const int16_t *vals, int exp, const char *func)
{
    fx_stage st = {.kind = FX_STAGE_I16, .n = fx_numel_of(out->ndim, out->shape), .exp = exp,
                   .i16 = vals};
    return fx_write(out, &st, func);
}

int fx_write_i16_max(tensor_t *out, const int16_t *vals, int exp, uint64_t imax, const char *func)
{
    fx_stage st = {.kind = FX_STAGE_I16, .n = fx_numel_of(out->ndim, out->shape), .exp = exp,
                   .imax_known = 1, .imax = imax, .i16 = vals};
    return fx_write(out, &st, func);
}

uint16_t *fx_half_direct(tensor_t *out, const tensor_t *const *in, int n)
{
    if ((out->fmt != FMT_FP16 && out->fmt != FMT_BF16) || out->st->on_device ||
        !fx_tensor_is_contiguous(out))
        return NULL;
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->st == out->st) return NULL;
    return (uint16_t *)fx_tensor_base(out);
}

int fx_write_half_bits(tensor_t *out, const uint16_t *bits, const char *func)
{
    int rc = fx_need_host(out, "the output", FX_EUNSUPPORTED, FX_HOST_PATH_HINT,
                          func);
    if (rc) return rc;
    if (out->fmt != FMT_FP16 && out->fmt != FMT_BF16)
        return fx_error(FX_EFORMAT, func, "internal: 16-bit patterns written into a %s tensor",
                        fmt_name(out->fmt));
    if (!fx_tensor_is_contiguous(out)) {
        fx_strided_copy(out, (void *)bits, 1);
        return FX_OK;
    }
    void *base = fx_tensor_base(out);
    if (base == (const void *)bits) return FX_OK;
    const int64_t n = fx_numel_of(out->ndim, out->shape);
    const char *src = (const char *)bits;
    char *dst = base;
    /* a stage never overlaps its output (ops pass their own scratch or the output itself), so
     * the copy may run in parallel pieces: one thread's copy of a layer's gradient (a pooling
     * backward's 6 MB) was a serial part of every step */
    if (dst + n * 2 <= src || src + n * 2 <= dst) {
        fx_parallel_copy(dst, src, (size_t)n * 2);
        return FX_OK;
    }
    memmove(dst, src, (size_t)n * sizeof *bits);
    return FX_OK;
}

void fx_parallel_copy(void *dstv, const void *srcv, size_t bytes)
{
    const size_t piece = (size_t)256 << 10;
    const int64_t npieces = (int64_t)((bytes + piece - 1) / piece);
    const int nt = npieces > 1 ? flexpoint_num_threads() : 1;
    char *dst = dstv;
    const char *src = srcv;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t i = 0; i < npieces; i++) {
        const size_t off = (size_t)i * piece, len = bytes - off < piece ? bytes - off : piece;
        memcpy(dst + off, src + off, len);
    }
}

uint64_t fx_maxabs_i16(const int16_t *vals, int64_t n)
{
    /* vals[i] + 0 as an aligned sum (fx_sum2), with the active level's kernel: AVX-512 runs it in
     * 32 int16 lanes; the other levels run the plain loop this function used to hold (the library
     * is built for baseline x86-64, so that loop gets SSE2 at most) */
    static const int16_t zero = 0;
    const fx_sum2 p = {vals, &zero, 0, 0, 0, 0, NULL};
    return fx_backend_active()->cvt.sum2_maxabs(&p, n);
}

uint64_t fx_maxabs_i64(const fx_backend *be, const int64_t *vals, int64_t n)
{
    if (be->cvt.maxabs_i64) return be->cvt.maxabs_i64(vals, n);
    uint64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t a = vals[i] < 0 ? (uint64_t)0 - (uint64_t)vals[i] : (uint64_t)vals[i];
        m = a > m ? a : m;
    }
    return m;
}

/* The active backend's matmul kernel for compute format cf on a [M, K] x b [K, N] into the
 * stage buffers of c (set by the caller), on nthreads threads. */
static int fx_matmul_call_fmt(fx_op_call *c, const fx_operand *a, const fx_operand *b, fmt_t cf,
                              int nthreads, const char *func)
{
    const fx_backend *be = fx_backend_active();
    fx_kernel k = be->kernels[FX_OP_MATMUL][cf];
    if (!k) return fx_error(FX_EUNSUPPORTED, func, "backend %s has no matmul kernel", be->name);
    c->op = FX_OP_MATMUL;
    c->nin = 2;
    c->in[0] = *a;
    c->in[1] = *b;
    c->out_ndim = 2;
    c->out_shape[0] = a->shape[0];
    c->out_shape[1] = b->shape[1];
    c->out_numel = a->shape[0] * b->shape[1];
    c->nthreads = nthreads;
    return k(c);
}

static int fx_matmul_call(fx_op_call *c, const fx_operand *a, const fx_operand *b, int int_compute,
                          int nthreads, const char *func)
{
    return fx_matmul_call_fmt(c, a, b, int_compute ? FMT_DFP16 : FMT_FP32, nthreads, func);
}

int fx_matmul_float_h16(const fx_operand *a, const fx_operand *b, fmt_t fmt, float *out_f32,
                        uint16_t *out_h16, void (*cvt)(const float *, uint16_t *, int64_t),
                        int *done, int nthreads, const char *func)
{
    fx_op_call c;
    memset(&c, 0, sizeof c);
    c.out_f32 = out_f32;
    c.out_h16 = out_h16;
    c.out_h16_cvt = cvt;
    c.out_h16_done = done;
    *done = 0;
    return fx_matmul_call_fmt(&c, a, b, fmt == FMT_BF16 ? FMT_BF16 : FMT_FP32, nthreads, func);
}

int fx_matmul_float(const fx_operand *a, const fx_operand *b, fmt_t fmt, float *out_f32,
                    int nthreads, const char *func)
{
    int done;
    return fx_matmul_float_h16(a, b, fmt, out_f32, NULL, NULL, &done, nthreads, func);
}

int fx_matmul_stage(const fx_operand *a, const fx_operand *b, int int_compute, float *out_f32,
                    int64_t *out_i64, int *out_exp, const char *func)
{
    fx_op_call c;
    memset(&c, 0, sizeof c);
    c.out_f32 = out_f32;
    c.out_i64 = out_i64;
    c.out_exp = out_exp;
    return fx_matmul_call(&c, a, b, int_compute, flexpoint_num_threads(), func);
}

int fx_matmul_i64_max(const fx_operand *a, const fx_operand *b, int64_t *out_i64, int nthreads,
                      uint64_t *imax, const char *func)
{
    fx_op_call c;
    memset(&c, 0, sizeof c);
    int e = 0, known = 0;
    c.out_i64 = out_i64;
    c.out_exp = &e;
    c.out_imax = imax;
    c.out_imax_known = &known;
    const int rc = fx_matmul_call(&c, a, b, 1, nthreads, func);
    if (rc == FX_OK && !known)
        *imax = fx_maxabs_i64(fx_backend_active(), out_i64, a->shape[0] * b->shape[1]);
    return rc;
}

int fx_matmul_i16_rounded(const fx_operand *a, const fx_operand *b, int16_t *out, int shift,
                          int nthreads, uint64_t *imax, int64_t *nuf, const char *func)
{
    fx_op_call c;
    memset(&c, 0, sizeof c);
    int e = 0, known = 0;
    c.out_exp = &e;
    c.out_imax = imax;
    c.out_imax_known = &known;
    c.out_i16 = out;
    c.out_i16_shift = shift;
    c.out_i16_underflow = nuf;
    return fx_matmul_call(&c, a, b, 1, nthreads, func);
}

fx_operand fx_operand_2d(const void *data, int int_compute, int exp, int64_t rows, int64_t cols,
                         int64_t ld, int trans)
{
    fx_operand o;
    memset(&o, 0, sizeof o);
    o.data = data;
    o.fmt = int_compute ? FMT_DFP16 : FMT_FP32;
    o.exp = exp;
    o.ndim = 2;
    if (!trans) {
        o.shape[0] = rows;
        o.shape[1] = cols;
        o.strides[0] = ld;
        o.strides[1] = 1;
    } else {
        o.shape[0] = cols;
        o.shape[1] = rows;
        o.strides[0] = 1;
        o.strides[1] = ld;
    }
    return o;
}
