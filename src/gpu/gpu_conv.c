/* 2-D convolution on a CUDA device: the scheme of src/nn/conv2d.c (im2col + GEMM per batch
 * chunk) with device buffers, the backend's GEMMs, and the device write path.
 *
 * Per chunk of nb samples (Pc = nb*OH*OW pixel columns, CKK = C*KH*KW weight positions):
 *   forward:      Yc[O, Pc]    = W[O, CKK] x col[CKK, Pc]     then scatter Yc into the NCHW stage
 *   grad input:   col[CKK, Pc] = W^T[CKK, O] x dYc[O, Pc]     then col2im into the NCHW stage
 *   grad weight:  dW[O, CKK]  += dYc[O, Pc] x col^T[Pc, CKK]  (first chunk: =; then accumulate)
 * col comes from im2col of x, dYc is gathered from dy (both read x/dy through their views, so
 * strided inputs cost nothing extra); W^T and col^T are strides. The weight tensor is made
 * contiguous in the compute format first (it is small). The GEMMs are the backend's:
 *
 * Integer compute (first input FLEX16_5/DFP16): fx_gk_matmul_i16 (exact int64 sums of int16 x
 * int16 products). A float second input is quantised at its exact exponent first
 * (fx_gpu_quantize_exact_owned), as on the CPU. Exactness: every product is at most 2^30 in
 * magnitude, and conv2d.c refuses (before calling here) any op whose output sums more than 2^32
 * products, so every partial and total sum is below 2^62: the GEMM's int64 chains, col2im's sums
 * of at most KH*KW GEMM results (each output element of the input gradient is a sum of at most
 * O*KH*KW products in all), and the weight gradient's chunk accumulation (partial sums of the
 * N*OH*OW products of each weight) are all exact, whatever the chunking. The stage therefore
 * holds exactly the CPU's int64 values, at the CPU's exponent e_a + e_b, and the one write
 * (fx_gpu_write_stage in gpu_dispatch.c: fx_write_shared_with with device statistics) makes
 * the same exponent, Autoflex and statistics decisions and the same roundings: bit-identical
 * results.
 *
 * fp32 compute: inputs widened exactly to fp32 inside im2col/gather (the weight by one copy
 * kernel), cuBLAS SGEMM-class GEMM (cublasGemmEx, fp32 compute and accumulation, through
 * fx_gr_gemm_float), except when both inputs are fp16 or both bf16: then im2col and the
 * gathers copy their bits as they are (as for the integer formats), and cublasGemmEx takes the
 * 16-bit operands directly, on tensor cores with fp32 accumulation (the products of two fp16
 * values are exact in fp32, and those of two bf16 values unless they overflow or fall below
 * fp32's subnormals; tensor cores are reported to truncate inside their fp32 accumulation, so
 * strictly u doubles in the bounds below; the device tests keep the round-to-nearest bound,
 * which cuBLAS's 16-bit matmuls met on the H100); fp32 col2im (at most KH*KW additions per element) and chunk accumulation
 * (nchunks - 1 additions), one rounding on write. Error bounds, elementwise, before the output
 * rounding (u = 2^-24, gamma_n = n u / (1 - n u); +1 in each index for the product's
 * rounding): forward gamma_{C KH KW + 1} sum|terms| (one GEMM sum, in cuBLAS's order); input
 * gradient gamma_{O + KH KW + 1} (a GEMM sum of O terms, then at most KH*KW additions);
 * weight gradient gamma_{N OH OW + 1}: the chunk GEMMs sum nb*OH*OW terms in some order, then
 * nchunks - 1 additions, and nb*OH*OW + nchunks - 1 <= N*OH*OW for every 1 <= nb <= N. These
 * are the CPU's bounds (conv2d.c) up to the product's +1.
 *
 * cuDNN was not used for the float formats: it would add a library dependency (CMake, the
 * pkg-config file, the install) for them alone, and one scheme for both compute types keeps
 * them on the same chunking, layouts and already-reviewed GEMM wrappers. It is the natural
 * replacement for the fp32 path once speed matters.
 *
 * Statistics for shared-exponent outputs are reduced by the kernel that writes the final stage
 * values (scatter, col2im, the last accumulation, or the single GEMM's epilogue), never by an
 * extra pass, except for a single-chunk fp32 weight gradient, where cuBLAS writes the final
 * values and the stage (O*CKK values) takes one statistics pass, as tensor_matmul does. */
#include "../core/dispatch.h" /* FX_STAGE_* */
#include "gpu_conv.h"
#include "gpu_internal.h"
#include "gpu_nn.h" /* fx_gpu_write_stage: the device write path */

#include <string.h>

/* ---- the chunk budget (tests shrink it) ------------------------------------------------------ */

static int64_t g_chunk_elems = FX_GPU_CONV_CHUNK_ELEMS;

int64_t fx_gpu_conv_chunk_elems(int64_t elems)
{
    const int64_t want = elems > 0 ? elems : FX_GPU_CONV_CHUNK_ELEMS;
    return __atomic_exchange_n(&g_chunk_elems, want, __ATOMIC_RELAXED);
}

/* ---- device temporaries of one call, freed together ------------------------------------------ */

#define GCONV_BUFS 12
typedef struct gconv_bufs {
    void *p[GCONV_BUFS];
    int n;
} gconv_bufs;

/* n elements of sz bytes of device memory (NULL with *rc set on failure; a call with *rc set
 * does nothing). n * sz cannot overflow: conv2d.c bounds the sizes. */
static void *gconv_alloc(gconv_bufs *b, int64_t n, size_t sz, int *rc, const char *func)
{
    if (*rc) return NULL;
    if (b->n >= GCONV_BUFS) {
        *rc = fx_error(FX_ENOMEM, func, "too many device temporaries in one convolution");
        return NULL;
    }
    void *p = NULL;
    *rc = fx_gr_malloc((size_t)(n > 0 ? n : 1) * sz, &p, func);
    if (*rc == FX_OK) b->p[b->n++] = p;
    return p;
}

/* Adopt device memory allocated elsewhere (freed with the rest). */
static int gconv_keep(gconv_bufs *b, void *p, const char *func)
{
    if (!p) return FX_OK;
    if (b->n >= GCONV_BUFS) {
        fx_gr_free(p);
        return fx_error(FX_ENOMEM, func, "too many device temporaries in one convolution");
    }
    b->p[b->n++] = p;
    return FX_OK;
}

static void gconv_free(gconv_bufs *b)
{
    for (int i = 0; i < b->n; i++) fx_gr_free(b->p[i]);
    b->n = 0;
}

/* ---- operands -------------------------------------------------------------------------------- */

/* A 2-D view of contiguous memory: rows x cols, row stride ld; trans != 0 views its transpose. */
static fx_dview gconv_2d(void *base, int fmt, const fx_dview *expof, int64_t rows, int64_t cols,
                         int64_t ld, int trans)
{
    fx_dview v;
    memset(&v, 0, sizeof v);
    v.base = base;
    v.fmt = fmt;
    v.exp = expof->exp; /* the exponent of the operand whose elements these are */
    v.exp_dev = expof->exp_dev;
    v.ndim = 2;
    v.shape[0] = trans ? cols : rows;
    v.shape[1] = trans ? rows : cols;
    v.strides[0] = trans ? 1 : ld;
    v.strides[1] = trans ? ld : 1;
    v.contiguous = !trans && ld == cols;
    return v;
}

/* Contiguous row-major strides for a view whose memory was replaced by a packed copy. */
static void gconv_set_packed(fx_dview *v)
{
    int64_t s = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        v->strides[d] = s;
        s *= v->shape[d] > 0 ? v->shape[d] : 1;
    }
    v->contiguous = 1;
}

/* An input as the kernels read it. A float input of an integer op is quantised at its exact
 * exponent (contiguous). With pack != 0 (the weight, a GEMM operand) the result is contiguous
 * in the operand format: int16 mantissas or fp16/bf16 bits when raw (copied as they are), else
 * fp32 widened once (so that cuBLAS gets two fp32 operands and never has to widen the large
 * patch matrix itself). */
static int gconv_operand(const tensor_t *t, int ic, int raw, int pack, fx_dview *v,
                         gconv_bufs *b, const char *func)
{
    *v = fx_gpu_view_of(t);
    const int64_t n = fx_numel_of(t->ndim, t->shape);
    int rc = FX_OK;
    if (ic && !fmt_is_shared_exponent(t->fmt)) {
        void *q = NULL;
        rc = fx_gpu_quantize_exact_owned(v, &q, func);
        const int krc = gconv_keep(b, q, func);
        return rc ? rc : krc;
    }
    if (!pack) return FX_OK;
    if (raw) {
        if (v->contiguous) return FX_OK;
        void *buf = gconv_alloc(b, n, sizeof(int16_t), &rc, func);
        if (!rc) rc = fx_gk_gather(v, n, buf, func);
        if (rc) return rc;
        v->base = buf;
    } else {
        float *buf = gconv_alloc(b, n, sizeof(float), &rc, func);
        if (!rc) rc = fx_gk_float_ew(FX_GEW_COPY, v, NULL, 0.0f, buf, n, NULL, func);
        if (rc) return rc;
        v->base = buf;
        v->fmt = FMT_FP32;
        v->exp = 0;
        v->exp_dev = NULL;
    }
    gconv_set_packed(v);
    return FX_OK;
}

/* out = a x b with the backend's GEMM for the compute type (out contiguous [M, N]). */
static int gconv_gemm(int ic, const fx_dview *a, const fx_dview *b, void *out,
                      fx_dstage_stats *st, const char *func)
{
    if (ic) return fx_gk_matmul_i16(a, b, (int64_t *)out, st, func);
    int rc = fx_gr_gemm_float(a, b, (float *)out, func);
    if (!rc && st) rc = fx_gk_maxabs_f32((const float *)out, a->shape[0] * b->shape[1], st, func);
    return rc;
}

/* ---- the three ops --------------------------------------------------------------------------- */

typedef struct gconv_ctx {
    const fx_conv_geom *g;
    int ic;
    int raw;               /* operands keep their 16 bits: integer compute, or fp16 x fp16 /
                              bf16 x bf16 (cuBLAS then multiplies them on tensor cores) */
    int opfmt;             /* the operands' format in the chunk buffers */
    size_t esz, ssz;       /* element sizes: operands (2 raw, else 4), sums (int64 / fp32) */
    int64_t nb, nchunks;   /* samples per chunk (the last may hold fewer), chunk count */
    fx_dstage_stats *st;   /* device statistics of the final stage */
    int gemm_stats;        /* a GEMM that writes the final stage needs a statistics pass */
    gconv_bufs *bufs;
    const char *func;
} gconv_ctx;

static int gconv_forward(const gconv_ctx *c, const fx_dview *x, const fx_dview *w, void *stage)
{
    const fx_conv_geom *g = c->g;
    const int64_t CKK = g->C * g->KH * g->KW, P = g->OH * g->OW, Pcmax = c->nb * P;
    int rc = FX_OK;
    void *col = gconv_alloc(c->bufs, CKK * Pcmax, c->esz, &rc, c->func);
    void *ych = gconv_alloc(c->bufs, g->O * Pcmax, c->ssz, &rc, c->func);
    const fx_dview w2 = gconv_2d(w->base, w->fmt, w, g->O, CKK, CKK, 0);
    for (int64_t ch = 0; ch < c->nchunks && !rc; ch++) {
        const int64_t n0 = ch * c->nb, nb = c->nb < g->N - n0 ? c->nb : g->N - n0;
        const fx_dview colv = gconv_2d(col, c->opfmt, x, CKK, nb * P, nb * P, 0);
        rc = fx_gk_conv_im2col(x, c->raw, g, n0, nb, col, c->func);
        if (!rc) rc = gconv_gemm(c->ic, &w2, &colv, ych, NULL, c->func);
        if (!rc) rc = fx_gk_conv_scatter(ych, c->ic, g->O, P, n0, nb, stage, c->st, c->func);
    }
    return rc;
}

static int gconv_backward_input(const gconv_ctx *c, const fx_dview *dy, const fx_dview *w,
                                void *stage)
{
    const fx_conv_geom *g = c->g;
    const int64_t CKK = g->C * g->KH * g->KW, P = g->OH * g->OW, Pcmax = c->nb * P;
    int rc = FX_OK;
    void *dyc = gconv_alloc(c->bufs, g->O * Pcmax, c->esz, &rc, c->func);
    void *col = gconv_alloc(c->bufs, CKK * Pcmax, c->ssz, &rc, c->func);
    const fx_dview wt = gconv_2d(w->base, w->fmt, w, g->O, CKK, CKK, 1); /* [CKK, O] */
    for (int64_t ch = 0; ch < c->nchunks && !rc; ch++) {
        const int64_t n0 = ch * c->nb, nb = c->nb < g->N - n0 ? c->nb : g->N - n0;
        const fx_dview dyv = gconv_2d(dyc, c->opfmt, dy, g->O, nb * P, nb * P, 0);
        rc = fx_gk_conv_gather(dy, c->raw, n0, nb, dyc, c->func);
        if (!rc) rc = gconv_gemm(c->ic, &wt, &dyv, col, NULL, c->func);
        if (!rc) rc = fx_gk_conv_col2im(col, c->ic, g, n0, nb, stage, c->st, c->func);
    }
    return rc;
}

static int gconv_backward_weight(const gconv_ctx *c, const fx_dview *x, const fx_dview *dy,
                                 void *stage)
{
    const fx_conv_geom *g = c->g;
    const int64_t CKK = g->C * g->KH * g->KW, P = g->OH * g->OW, Pcmax = c->nb * P;
    const int64_t nw = g->O * CKK;
    int rc = FX_OK;
    void *col = gconv_alloc(c->bufs, CKK * Pcmax, c->esz, &rc, c->func);
    void *dyc = gconv_alloc(c->bufs, g->O * Pcmax, c->esz, &rc, c->func);
    void *part = c->nchunks > 1 ? gconv_alloc(c->bufs, nw, c->ssz, &rc, c->func) : NULL;
    for (int64_t ch = 0; ch < c->nchunks && !rc; ch++) {
        const int64_t n0 = ch * c->nb, nb = c->nb < g->N - n0 ? c->nb : g->N - n0;
        const int last = ch == c->nchunks - 1;
        const fx_dview dyv = gconv_2d(dyc, c->opfmt, dy, g->O, nb * P, nb * P, 0);
        const fx_dview colt = gconv_2d(col, c->opfmt, x, CKK, nb * P, nb * P, 1);
        rc = fx_gk_conv_im2col(x, c->raw, g, n0, nb, col, c->func);
        if (!rc) rc = fx_gk_conv_gather(dy, c->raw, n0, nb, dyc, c->func);
        /* dW[O, CKK] is dw's own layout: the stage needs no transpose */
        if (!rc && ch == 0) {
            rc = gconv_gemm(c->ic, &dyv, &colt, stage, last && c->gemm_stats ? c->st : NULL,
                            c->func);
        } else if (!rc) {
            rc = gconv_gemm(c->ic, &dyv, &colt, part, NULL, c->func);
            if (!rc)
                rc = fx_gk_conv_accumulate(stage, part, c->ic, nw, last ? c->st : NULL, c->func);
        }
    }
    return rc;
}

int fx_gpu_conv2d(int kind, tensor_t *out, const tensor_t *a, const tensor_t *b,
                  const fx_conv_geom *g, const char *func)
{
    const int device = out->st->device;
    int prev = device;
    int rc = fx_gr_get_device(&prev, func);
    if (!rc && prev != device) rc = fx_gr_set_device(device, func);
    if (rc) return rc;

    gconv_bufs bufs = {.n = 0};
    gconv_ctx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    c.ic = fmt_is_shared_exponent(a->fmt);
    const int half = !c.ic && a->fmt == b->fmt && (a->fmt == FMT_FP16 || a->fmt == FMT_BF16);
    c.raw = c.ic || half;
    c.opfmt = c.ic ? FMT_DFP16 : half ? (int)a->fmt : FMT_FP32;
    c.esz = c.raw ? sizeof(int16_t) : sizeof(float);
    c.ssz = c.ic ? sizeof(int64_t) : sizeof(float);
    c.bufs = &bufs;
    c.func = func;

    /* Chunks: as many samples as keep the largest per-chunk matrix (the patch matrix, or the
     * [O, Pc] chunk of y/dy) within the budget; at least one sample. Chunking changes no
     * integer result; fp32 results stay within the bounds above for any chunking. */
    const int64_t CKK = g->C * g->KH * g->KW, P = g->OH * g->OW;
    const int64_t per_sample = (CKK > g->O ? CKK : g->O) * P;
    const int64_t budget = __atomic_load_n(&g_chunk_elems, __ATOMIC_RELAXED);
    c.nb = budget / per_sample;
    if (c.nb < 1) c.nb = 1;
    if (c.nb > g->N) c.nb = g->N;
    c.nchunks = (g->N + c.nb - 1) / c.nb;

    /* cuBLAS writing the final stage (a one-chunk fp32 weight gradient) needs a statistics
     * pass, except for a deferred write, whose rounding kernel reports the maximum */
    int defers = 0;
    if (!rc) rc = fx_gpu_write_defers(out, &defers, func);
    c.gemm_stats = fmt_is_shared_exponent(out->fmt) && !defers;
    /* the statistics first: the first device allocation, before anything reads the tensors */
    c.st = gconv_alloc(&bufs, 1, sizeof *c.st, &rc, func);
    if (!rc) rc = fx_gr_memset0(c.st, sizeof *c.st, func);

    fx_dview va, vb;
    const int kind_w = kind == FX_GCONV_BACKWARD_WEIGHT;
    if (!rc) rc = gconv_operand(a, c.ic, c.raw, 0, &va, &bufs, func);
    if (!rc) rc = gconv_operand(b, c.ic, c.raw, !kind_w, &vb, &bufs, func); /* w packs, dy not */
    void *stage = gconv_alloc(&bufs, fx_numel_of(out->ndim, out->shape), c.ssz, &rc, func);
    if (!rc) {
        switch (kind) {
        case FX_GCONV_FORWARD: rc = gconv_forward(&c, &va, &vb, stage); break;
        case FX_GCONV_BACKWARD_INPUT: rc = gconv_backward_input(&c, &va, &vb, stage); break;
        default: rc = gconv_backward_weight(&c, &va, &vb, stage); break;
        }
    }
    /* the sums are at exponent e_a + e_b (0 for fp32 stages) */
    if (!rc)
        rc = fx_gpu_write_stage(out, c.ic ? FX_STAGE_I64 : FX_STAGE_F32,
                                fx_numel_of(out->ndim, out->shape),
                                c.ic ? NULL : (float *)stage, c.ic ? (int64_t *)stage : NULL,
                                c.ic ? fx_dexp_views(&va, &vb, 0) : fx_dexp_const(0), c.st,
                                func);
    if (!rc) rc = fx_gr_op_done(func);
    gconv_free(&bufs);
    if (prev != device) fx_gr_set_device(prev, func);
    return rc;
}
