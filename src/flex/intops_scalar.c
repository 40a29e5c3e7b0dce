/* Integer-only op kernels of the shared-exponent formats: the definitions.
 *
 * Each kernel reads int16 mantissas (FLEX16_5 and DFP16 store the same thing) and writes the
 * EXACT result as int64 values at an exponent it reports; the dispatcher then rounds once into
 * the output. There is no floating point anywhere in this file. Exactness bounds used below:
 *   products      |m_a * m_b| <= 2^30, fits int32;
 *   scale         |m * s| < 2^15 * 2^31 = 2^46;
 *   add/sub       operands aligned by at most FX_ALIGN_SPAN = 40 bits: |sum| < 2^56;
 *   sum, matmul   n terms of <= 2^30 each: exact in int64 for n < 2^33 terms.
 */
#include "flex_kernels.h"

#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

static const int16_t *fx_in16(const fx_op_call *c, int i) { return (const int16_t *)c->in[i].data; }

/* Elementwise ops are memory-bound: threads help only for large arrays. */
static int fx_ew_threads(const fx_op_call *c)
{
    return (c->nthreads > 1 && c->out_numel >= FX_FLEX_PAR_MIN_ELEMS) ? c->nthreads : 1;
}

int fx_flex_copy_scalar(const fx_op_call *c)
{
    const int16_t *a = fx_in16(c, 0);
    int64_t *o = c->out_i64;
    const int64_t n = c->out_numel;
    for (int64_t i = 0; i < n; i++) o[i] = a[i];
    *c->out_exp = c->in[0].exp;
    return FX_OK;
}

int fx_flex_relu_scalar(const fx_op_call *c)
{
    const int16_t *a = fx_in16(c, 0);
    int64_t *o = c->out_i64;
    const int64_t n = c->out_numel;
    for (int64_t i = 0; i < n; i++) o[i] = a[i] > 0 ? a[i] : 0;
    *c->out_exp = c->in[0].exp;
    return FX_OK;
}

static int fx_all_zero(const int16_t *m, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (m[i] != 0) return 0;
    return 1;
}

/* a +- b at the common exponent of fx_align_exp: exact within FX_ALIGN_SPAN, jammed beyond
 * (see flex_math.h for why the final rounding is still correct).
 * That argument needs the operand with the larger exponent to be nonzero: a jammed small
 * operand on its own (+-1 at the common exponent) would otherwise pass for a value 2^span
 * times too large, e.g. when adding gradients at exponent -60 to an all-zero accumulator at
 * exponent 0. So when that operand is all zeros, the result is the other operand, exactly, at
 * its own exponent. (Single zero elements inside a nonzero operand are fine for DFP16 outputs:
 * the stage maximum is then >= 2^span, so the output exponent is >= common + 2.) */
static int fx_addsub(const fx_op_call *c, int negate_b)
{
    const int16_t *a = fx_in16(c, 0), *b = fx_in16(c, 1);
    const int ea = c->in[0].exp, eb = c->in[1].exp;
    int64_t *o = c->out_i64;
    const int64_t n = c->out_numel;
    const int gap = ea > eb ? ea - eb : eb - ea;
    if (gap > FX_ALIGN_SPAN && fx_all_zero(ea > eb ? a : b, n)) {
        if (ea > eb) {
            for (int64_t i = 0; i < n; i++) o[i] = negate_b ? -(int64_t)b[i] : b[i];
            *c->out_exp = eb;
        } else {
            for (int64_t i = 0; i < n; i++) o[i] = a[i];
            *c->out_exp = ea;
        }
        return FX_OK;
    }
    const int ec = fx_align_exp(ea, eb);
    const int nt = fx_ew_threads(c);
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t i = 0; i < n; i++) {
        const int64_t x = fx_align_to(a[i], ea, ec), y = fx_align_to(b[i], eb, ec);
        o[i] = negate_b ? x - y : x + y;
    }
    *c->out_exp = ec;
    return FX_OK;
}

int fx_flex_add_scalar(const fx_op_call *c) { return fx_addsub(c, 0); }
int fx_flex_sub_scalar(const fx_op_call *c) { return fx_addsub(c, 1); }

int fx_flex_mul_scalar(const fx_op_call *c)
{
    const int16_t *a = fx_in16(c, 0), *b = fx_in16(c, 1);
    int64_t *o = c->out_i64;
    const int64_t n = c->out_numel;
    const int nt = fx_ew_threads(c);
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t i = 0; i < n; i++) o[i] = (int32_t)a[i] * (int32_t)b[i];
    *c->out_exp = c->in[0].exp + c->in[1].exp;
    return FX_OK;
}

int fx_flex_scale_scalar(const fx_op_call *c)
{
    const int16_t *a = fx_in16(c, 0);
    const int64_t s = c->scalar_mant; /* |s| < 2^31 by the call contract */
    int64_t *o = c->out_i64;
    const int64_t n = c->out_numel;
    for (int64_t i = 0; i < n; i++) o[i] = a[i] * s;
    *c->out_exp = c->in[0].exp + c->scalar_exp;
    return FX_OK;
}

/* out[o*inner + i] = sum_k a[(o*len + k)*inner + i]; rows of `inner` values are added one
 * after the other so the inner loop runs over contiguous memory. */
int fx_flex_sum_scalar(const fx_op_call *c)
{
    const int16_t *a = fx_in16(c, 0);
    const int64_t outer = c->red_outer, len = c->red_len, inner = c->red_inner;
    int64_t *out = c->out_i64;
    const int nt = (c->nthreads > 1 && outer > 1 && outer * len * inner >= FX_FLEX_PAR_MIN_ELEMS)
                       ? c->nthreads : 1;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t o = 0; o < outer; o++) {
        int64_t *dst = out + o * inner;
        for (int64_t i = 0; i < inner; i++) dst[i] = 0;
        const int16_t *src = a + o * len * inner;
        for (int64_t k = 0; k < len; k++, src += inner)
            for (int64_t i = 0; i < inner; i++) dst[i] += src[i];
    }
    *c->out_exp = c->in[0].exp;
    return FX_OK;
}

/* out[M,N] = a[M,K] x b[K,N] with any strides: each output row accumulates rows of b scaled
 * by one element of a (i-k-j order, unit stride over the output). */
int fx_flex_matmul_scalar(const fx_op_call *c)
{
    if (c->a_panels || c->a_rows) return FX_EUNSUPPORTED; /* only strided matrices */
    const int16_t *a = fx_in16(c, 0), *b = fx_in16(c, 1);
    const int64_t M = c->in[0].shape[0], K = c->in[0].shape[1], N = c->in[1].shape[1];
    const int64_t sam = c->in[0].strides[0], sak = c->in[0].strides[1];
    const int64_t sbk = c->in[1].strides[0], sbn = c->in[1].strides[1];
    int64_t *out = c->out_i64;
    const int nt = (c->nthreads > 1 && M > 1 && M * N * K >= ((int64_t)1 << 16)) ? c->nthreads : 1;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t i = 0; i < M; i++) {
        int64_t *row = out + i * N;
        for (int64_t j = 0; j < N; j++) row[j] = 0;
        for (int64_t k = 0; k < K; k++) {
            const int32_t av = a[i * sam + k * sak];
            if (av == 0) continue;
            const int16_t *bk = b + k * sbk;
            if (sbn == 1) {
                for (int64_t j = 0; j < N; j++) row[j] += av * (int32_t)bk[j];
            } else {
                for (int64_t j = 0; j < N; j++) row[j] += av * (int32_t)bk[j * sbn];
            }
        }
    }
    *c->out_exp = c->in[0].exp + c->in[1].exp;
    return FX_OK;
}
