/* One instance of the AVX-512 level's SUM (f32_avx512.c includes this once per input element
 * type): the trees of the fp32 kernel (a contiguous row in blocks of SUM_BLOCK halved
 * recursively, each block's vectors into four accumulators; columns in chunks of SUM_COLS,
 * runs of SUM_ROWS rows added in order and halved recursively), over fp32 vectors that
 * FX_SUM_LOADM makes from the input. An fp16 or bf16 instance widens each vector as it loads
 * it; widening is exact, so its sums have the bits of the fp32 instance on the widened input
 * (what the dispatcher's fallback computes; a NaN result is a NaN there too, though where two
 * NaNs meet, which one survives follows each instance's compiled operand order), without
 * writing and reading back a widened copy of the input: the transformer's bias gradients
 * ([16384, 512] bf16 column sums) took 2.1 ms at two threads on the Xeon reporting model 167
 * through that copy (docs/performance.md).
 *
 * Parameters (undefined at the end):
 *   FX_SUM_NAME          the kernel, int (const fx_op_call *)
 *   FX_SUM_ID            a suffix for this instance's helpers
 *   FX_SUM_T             the input's element type
 *   FX_SUM_LOADM(p, m)   the elements at p in the lanes of mask m as 16 floats, +0.0f in the
 *                        others, reading nothing outside m
 * Uses f32_avx512.c's SUM_* sizes and tail_mask. */

#define FX_SUM_CAT2(a, b) a##_##b
#define FX_SUM_CAT(a, b) FX_SUM_CAT2(a, b)
#define FX_SUM_FN(x) FX_SUM_CAT(x, FX_SUM_ID)
#define FX_SUM_LOAD16(p) FX_SUM_LOADM((p), (__mmask16)0xFFFF)

/* Vector i of the block goes to accumulator i % 4 (so with n <= 128 each lane adds <= 2). */
static float FX_SUM_FN(sum_contig_leaf)(const FX_SUM_T *x, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, FX_SUM_LOAD16(x + i));
        a1 = _mm512_add_ps(a1, FX_SUM_LOAD16(x + i + 16));
        a2 = _mm512_add_ps(a2, FX_SUM_LOAD16(x + i + 32));
        a3 = _mm512_add_ps(a3, FX_SUM_LOAD16(x + i + 48));
    }
    /* fewer than 64 left: up to four vectors, the last one partial */
    if (i < n) a0 = _mm512_add_ps(a0, FX_SUM_LOADM(x + i, tail_mask(n - i < 16 ? n - i : 16)));
    i += 16;
    if (i < n) a1 = _mm512_add_ps(a1, FX_SUM_LOADM(x + i, tail_mask(n - i < 16 ? n - i : 16)));
    i += 16;
    if (i < n) a2 = _mm512_add_ps(a2, FX_SUM_LOADM(x + i, tail_mask(n - i < 16 ? n - i : 16)));
    i += 16;
    if (i < n) a3 = _mm512_add_ps(a3, FX_SUM_LOADM(x + i, tail_mask(n - i)));
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

static float FX_SUM_FN(sum_contig)(const FX_SUM_T *x, int64_t n)
{
    if (n <= SUM_BLOCK) return FX_SUM_FN(sum_contig_leaf)(x, n);
    const int64_t blocks = (n + SUM_BLOCK - 1) / SUM_BLOCK;
    const int64_t left = (blocks + 1) / 2 * SUM_BLOCK;
    return FX_SUM_FN(sum_contig)(x, left) + FX_SUM_FN(sum_contig)(x + left, n - left);
}

/* sum_contig for fx_f32_sum_tree_parallel, which passes any element type */
static float FX_SUM_FN(sum_contig_any)(const void *x, int64_t n)
{
    return FX_SUM_FN(sum_contig)((const FX_SUM_T *)x, n);
}

/* out[j] = sum_{k < len} x[k*stride + j] over one chunk of SUM_COLS columns; vector v of the
 * chunk holds the columns of mask m[v] */
static void FX_SUM_FN(sum_cols)(const FX_SUM_T *x, int64_t len, int64_t stride,
                                const __mmask16 m[4], float *out)
{
    if (len <= SUM_ROWS) {
        __m512 acc[4];
        for (int v = 0; v < 4; v++) acc[v] = _mm512_setzero_ps();
        for (int64_t k = 0; k < len; k++)
            for (int v = 0; v < 4; v++)
                acc[v] = _mm512_add_ps(acc[v], FX_SUM_LOADM(x + k * stride + 16 * v, m[v]));
        for (int v = 0; v < 4; v++) _mm512_mask_storeu_ps(out + 16 * v, m[v], acc[v]);
        return;
    }
    const int64_t blocks = (len + SUM_ROWS - 1) / SUM_ROWS;
    const int64_t left = (blocks + 1) / 2 * SUM_ROWS;
    _Alignas(64) float right[SUM_COLS];
    FX_SUM_FN(sum_cols)(x, left, stride, m, out);
    FX_SUM_FN(sum_cols)(x + left * stride, len - left, stride, m, right);
    for (int v = 0; v < 4; v++) {
        const __m512 s = _mm512_add_ps(_mm512_maskz_loadu_ps(m[v], out + 16 * v),
                                       _mm512_maskz_loadu_ps(m[v], right + 16 * v));
        _mm512_mask_storeu_ps(out + 16 * v, m[v], s);
    }
}

static void FX_SUM_FN(sum_range)(const fx_op_call *c, int64_t lo, int64_t hi)
{
    const FX_SUM_T *a = (const FX_SUM_T *)c->in[0].data;
    const int64_t len = c->red_len, inner = c->red_inner;
    if (inner == 1) {
        for (int64_t o = lo; o < hi; o++) c->out_f32[o] = FX_SUM_FN(sum_contig)(a + o * len, len);
        return;
    }
    const int64_t chunks = (inner + SUM_COLS - 1) / SUM_COLS;
    for (int64_t t = lo; t < hi; t++) {
        const int64_t o = t / chunks, j0 = (t % chunks) * SUM_COLS;
        __mmask16 m[4];
        col_masks(inner - j0, m);
        FX_SUM_FN(sum_cols)(a + o * len * inner + j0, len, inner, m, c->out_f32 + o * inner + j0);
    }
}

int FX_SUM_NAME(const fx_op_call *c)
{
    return fx_f32_sum_drive(c, sizeof(FX_SUM_T), SUM_BLOCK, SUM_COLS, FX_SUM_FN(sum_contig_any),
                            FX_SUM_FN(sum_range));
}

#undef FX_SUM_LOAD16
#undef FX_SUM_FN
#undef FX_SUM_CAT
#undef FX_SUM_CAT2
#undef FX_SUM_NAME
#undef FX_SUM_ID
#undef FX_SUM_T
#undef FX_SUM_LOADM
