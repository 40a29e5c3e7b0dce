/* fp32 compute kernels, portable C: the reference level of FMT_FP32 (and, through the
 * dispatcher's widening fallback, of FP16/BF16). The AVX2 and AVX-512 files overwrite entries.
 *
 * Semantics shared by every level:
 *   COPY            bit copy (NaN payloads kept).
 *   ADD, SUB, MUL   one IEEE fp32 operation per element (round to nearest even, no FTZ/DAZ).
 *                   A NaN result from NaN operands is the first NaN operand, quieted (x86's
 *                   rule for a op b); written out, because compilers swap the operands of a
 *                   commutative op, which decides which of two NaNs survives.
 *   SCALE           x * c->scalar_f32, one rounding.
 *   RELU            x > 0 ? x : +0, and NaN stays NaN (same bits). So relu(-0) = +0 and
 *                   relu(-x) = +0: one documented choice instead of whatever max() gives.
 *   SUM             fp32 blocked pairwise sum (bound below).
 *   MATMUL          fp32 k-ordered chain per output element (f32_kernels.h, bound gamma_K).
 *
 * SUM error bound. An element that takes part in at most D roundings on its way to the
 * result gives |s - fl(s)| <= gamma_D * sum|x|, gamma_D = D u / (1 - D u), u = 2^-24 (the first
 * addition into a zero accumulator is exact and not counted). The scalar scheme:
 *   - contiguous rows (red_inner == 1): blocks of 128; inside a block 8 interleaved
 *     accumulators (<= 15 roundings each) then a 3-level tree: 18; blocks are combined by a
 *     balanced binary tree: + ceil(log2(ceil(n/128))).  D = 18 + ceil(log2(ceil(n/128))).
 *   - strided rows (red_inner > 1): blocks of 16 rows summed in order (15), then the same tree
 *     over blocks.  D = 15 + ceil(log2(ceil(n/16))).
 * Both are <= max(18, 11 + ceil(log2 n)): logarithmic in n, versus n-1 for a plain loop.
 * The tree over blocks splits at a block boundary that depends only on n, so neither splitting
 * independent outputs over threads nor computing one long sum's subtrees on several threads
 * changes a result.
 */
#include "f32_kernels.h"
#include "f32_math.h"

#include <string.h>

/* ---- chunked parallel loop (shared by every level) ----------------------------------------- */

void fx_f32_parallel_ranges(const fx_op_call *c, int64_t n, int64_t chunk, int64_t min_parallel,
                            fx_f32_range_fn fn)
{
    if (n <= 0) return;
    const int64_t nchunks = (n + chunk - 1) / chunk;
    int nt = 1;
    if (c->nthreads > 1 && n >= min_parallel && nchunks > 1)
        nt = nchunks < c->nthreads ? (int)nchunks : c->nthreads;
#ifndef _OPENMP
    (void)nt; /* serial build: the loop below runs on this thread */
#endif
    FX_F32_OMP(parallel for num_threads(nt) if (nt > 1) schedule(static))
    for (int64_t i = 0; i < nchunks; i++) {
        const int64_t lo = i * chunk;
        fn(c, lo, n - lo < chunk ? n : lo + chunk);
    }
}

static float sum_tree_split(const char *x, size_t esz, int64_t n, int64_t block,
                            fx_f32_sum_fn leaf_tree, int depth)
{
    if (depth == 0 || n <= block) return leaf_tree(x, n);
    const int64_t blocks = (n + block - 1) / block;
    const int64_t left = (blocks + 1) / 2 * block;
    float l = 0.0f, r;
    FX_F32_OMP(task shared(l))
    l = sum_tree_split(x, esz, left, block, leaf_tree, depth - 1);
    r = sum_tree_split(x + (size_t)left * esz, esz, n - left, block, leaf_tree, depth - 1);
    FX_F32_OMP(taskwait)
    return l + r;
}

float fx_f32_sum_tree_parallel(const void *x, size_t esz, int64_t n, int64_t block,
                               fx_f32_sum_fn leaf_tree, int nthreads)
{
    int depth = 0;
    while ((1 << depth) < nthreads && depth < 16) depth++;
    float s = 0.0f;
    FX_F32_OMP(parallel num_threads(nthreads) if (nthreads > 1))
    FX_F32_OMP(single)
    s = sum_tree_split(x, esz, n, block, leaf_tree, depth);
    return s;
}

int fx_f32_sum_drive(const fx_op_call *c, size_t esz, int64_t block, int64_t cols,
                     fx_f32_sum_fn leaf_tree, fx_f32_range_fn range)
{
    const int64_t inner = c->red_inner;
    if (c->red_outer == 1 && inner == 1 && c->nthreads > 1 && c->red_len >= FX_F32_EW_MIN_PARALLEL) {
        c->out_f32[0] =
            fx_f32_sum_tree_parallel(c->in[0].data, esz, c->red_len, block, leaf_tree, c->nthreads);
        return FX_OK;
    }
    const int64_t items = c->red_outer * (inner == 1 ? 1 : (inner + cols - 1) / cols);
    const int64_t per_item = c->red_len * (inner == 1 ? 1 : cols);
    /* one item per chunk when items are large; several small items per chunk otherwise */
    const int64_t chunk = per_item >= FX_F32_EW_CHUNK ? 1 : FX_F32_EW_CHUNK / (per_item + 1) + 1;
    const int64_t min_items = FX_F32_EW_MIN_PARALLEL / (per_item + 1) + 1;
    fx_f32_parallel_ranges(c, items, chunk, min_items, range);
    return FX_OK;
}

/* ---- elementwise ---------------------------------------------------------------------------- */

static const float *in_f32(const fx_op_call *c, int i) { return (const float *)c->in[i].data; }

static void copy_range(const fx_op_call *c, int64_t lo, int64_t hi)
{
    memcpy(c->out_f32 + lo, in_f32(c, 0) + lo, sizeof(float) * (size_t)(hi - lo));
}

#define FX_F32_BINARY_RANGE(name, expr)                                                          \
    static void name(const fx_op_call *c, int64_t lo, int64_t hi)                                \
    {                                                                                            \
        const float *restrict a = in_f32(c, 0), *restrict b = in_f32(c, 1);                      \
        float *restrict y = c->out_f32;                                                          \
        for (int64_t i = lo; i < hi; i++) y[i] = (expr);                                         \
    }
FX_F32_BINARY_RANGE(add_range, fx_f32_nan_first(a[i], a[i] + b[i]))
FX_F32_BINARY_RANGE(sub_range, fx_f32_nan_first(a[i], a[i] - b[i]))
FX_F32_BINARY_RANGE(mul_range, fx_f32_nan_first(a[i], a[i] * b[i]))

static void scale_range(const fx_op_call *c, int64_t lo, int64_t hi)
{
    const float *restrict a = in_f32(c, 0);
    float *restrict y = c->out_f32;
    const float s = c->scalar_f32;
    for (int64_t i = lo; i < hi; i++) y[i] = a[i] * s;
}

static void relu_range(const fx_op_call *c, int64_t lo, int64_t hi)
{
    const float *restrict a = in_f32(c, 0);
    float *restrict y = c->out_f32;
    for (int64_t i = lo; i < hi; i++) {
        const float x = a[i];
        y[i] = (x > 0.0f || x != x) ? x : 0.0f;
    }
}

#define FX_F32_EW_KERNEL(kname, range)                                                           \
    int kname(const fx_op_call *c)                                                               \
    {                                                                                            \
        fx_f32_parallel_ranges(c, c->out_numel, FX_F32_EW_CHUNK, FX_F32_EW_MIN_PARALLEL, range); \
        return FX_OK;                                                                            \
    }
FX_F32_EW_KERNEL(fx_f32_copy_scalar, copy_range)
FX_F32_EW_KERNEL(fx_f32_add_scalar, add_range)
FX_F32_EW_KERNEL(fx_f32_sub_scalar, sub_range)
FX_F32_EW_KERNEL(fx_f32_mul_scalar, mul_range)
FX_F32_EW_KERNEL(fx_f32_scale_scalar, scale_range)
FX_F32_EW_KERNEL(fx_f32_relu_scalar, relu_range)

/* ---- sum ------------------------------------------------------------------------------------ */

#define SUM_BLOCK 128  /* contiguous leaf length */
#define SUM_LANES 8    /* interleaved accumulators in a contiguous leaf */
#define SUM_ROWS 16    /* strided leaf: rows summed in order */
#define SUM_COLS 64    /* strided: columns handled together (one leaf reads 64 floats a row) */

static float sum_contig_leaf(const float *x, int64_t n)
{
    float acc[SUM_LANES] = {0};
    int64_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES)
        for (int l = 0; l < SUM_LANES; l++) acc[l] += x[i + l];
    for (int l = 0; i + l < n; l++) acc[l] += x[i + l];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Balanced tree over blocks: the left part takes ceil(blocks / 2) blocks. */
static float sum_contig(const float *x, int64_t n)
{
    if (n <= SUM_BLOCK) return sum_contig_leaf(x, n);
    const int64_t blocks = (n + SUM_BLOCK - 1) / SUM_BLOCK;
    const int64_t left = (blocks + 1) / 2 * SUM_BLOCK;
    return sum_contig(x, left) + sum_contig(x + left, n - left);
}

/* sum_contig for fx_f32_sum_tree_parallel, which passes any element type */
static float sum_contig_any(const void *x, int64_t n) { return sum_contig(x, n); }

/* out[j] = sum_{k < len} x[k*stride + j] for j < w (w <= SUM_COLS). */
static void sum_cols(const float *x, int64_t len, int64_t stride, int64_t w, float *out)
{
    if (len <= SUM_ROWS) {
        for (int64_t j = 0; j < w; j++) out[j] = 0.0f;
        for (int64_t k = 0; k < len; k++)
            for (int64_t j = 0; j < w; j++) out[j] += x[k * stride + j];
        return;
    }
    const int64_t blocks = (len + SUM_ROWS - 1) / SUM_ROWS;
    const int64_t left = (blocks + 1) / 2 * SUM_ROWS;
    float right[SUM_COLS];
    sum_cols(x, left, stride, w, out);
    sum_cols(x + left * stride, len - left, stride, w, right);
    for (int64_t j = 0; j < w; j++) out[j] += right[j];
}

/* Work item t: output row o = t / chunks, column chunk t % chunks (inner == 1: one output). */
static void sum_range(const fx_op_call *c, int64_t lo, int64_t hi)
{
    const float *a = in_f32(c, 0);
    const int64_t len = c->red_len, inner = c->red_inner;
    if (inner == 1) {
        for (int64_t o = lo; o < hi; o++) c->out_f32[o] = sum_contig(a + o * len, len);
        return;
    }
    const int64_t chunks = (inner + SUM_COLS - 1) / SUM_COLS;
    for (int64_t t = lo; t < hi; t++) {
        const int64_t o = t / chunks, j0 = (t % chunks) * SUM_COLS;
        const int64_t w = inner - j0 < SUM_COLS ? inner - j0 : SUM_COLS;
        sum_cols(a + o * len * inner + j0, len, inner, w, c->out_f32 + o * inner + j0);
    }
}

int fx_f32_sum_scalar(const fx_op_call *c)
{
    return fx_f32_sum_drive(c, sizeof(float), SUM_BLOCK, SUM_COLS, sum_contig_any, sum_range);
}

/* ---- matmul --------------------------------------------------------------------------------- */

#define MR 4
#define NR 8

/* 4x8 tile; plain C the compiler may vectorise with SSE. Multiply and add are rounded
 * separately (no contraction in ISO C mode, and no FMA at this level). */
static void ukernel_4x8(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                        int accumulate)
{
    float acc[MR][NR];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) acc[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
    for (int64_t k = 0; k < kc; k++) {
        const float *ak = a + k * MR, *bk = b + k * NR;
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) acc[r][j] += ak[r] * bk[j];
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) c[r * ldc + j] = acc[r][j];
}

static const fx_f32_gemm_params gemm_scalar = {
    .mr = MR, .nr = NR, .kc = 256, .mc = 256, .nc = 512, .min_par_work = 1 << 21,
    .kernel = ukernel_4x8,
};

int fx_f32_matmul_scalar(const fx_op_call *c) { return fx_f32_gemm(&gemm_scalar, c); }

/* ---- the fused convolution epilogue (backend.h) ------------------------------------------- */

static float relu1(float x) { return (x > 0.0f || x != x) ? x : 0.0f; }

void fx_f32_bias_relu_scalar(float *v, int64_t rows, int64_t cols, const float *bias, int relu)
{
    for (int64_t r = 0; r < rows; r++) {
        float *row = v + r * cols;
        for (int64_t j = 0; j < cols; j++) {
            float x = row[j];
            if (bias) x = fx_f32_nan_first(x, x + bias[j]);
            row[j] = relu ? relu1(x) : x;
        }
    }
}
