/* One instance of the AVX2 level's SUM (f32_avx2.c includes this once per input element type):
 * the trees that the header of f32_avx2.c describes, over fp32 vectors that FX_SUM_LOAD8 and
 * FX_SUM_LOADN make from the input. An fp16 or bf16 instance widens each vector as it loads it;
 * widening is exact, so its sums have the bits of the fp32 instance on the widened input (what
 * the dispatcher's fallback computes; a NaN result is a NaN there too, though where two NaNs
 * meet, which one survives follows each instance's compiled operand order), without writing
 * and reading back a widened copy of the
 * input (4 bytes an element where the input has 2: in a bf16 CNN step on the AVX2 EPYC the
 * copy for the convolutions' bias gradients took about 1 % of the step).
 *
 * Parameters (undefined at the end):
 *   FX_SUM_NAME        the kernel, int (const fx_op_call *)
 *   FX_SUM_ID          a suffix for this instance's helpers
 *   FX_SUM_T           the input's element type
 *   FX_SUM_LOAD8(p)    the 8 elements at p as 8 floats
 *   FX_SUM_LOADN(p, n, m)  the first n elements at p (n may be <= 0 or >= 8; m = tail_mask(n))
 *                      in lanes [0, n), +0.0f in the others, reading nothing beyond them
 * Uses f32_avx2.c's SUM_* sizes, hsum, col_load, col_store and tail_mask. */

#define FX_SUM_CAT2(a, b) a##_##b
#define FX_SUM_CAT(a, b) FX_SUM_CAT2(a, b)
#define FX_SUM_FN(x) FX_SUM_CAT(x, FX_SUM_ID)

/* Vector i of the block goes to accumulator i % 4 (so with n <= 128 each lane adds <= 4). */
static float FX_SUM_FN(sum_contig_leaf)(const FX_SUM_T *x, int64_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, FX_SUM_LOAD8(x + i));
        a1 = _mm256_add_ps(a1, FX_SUM_LOAD8(x + i + 8));
        a2 = _mm256_add_ps(a2, FX_SUM_LOAD8(x + i + 16));
        a3 = _mm256_add_ps(a3, FX_SUM_LOAD8(x + i + 24));
    }
    /* fewer than 32 left: up to four vectors, the last one partial */
    if (i < n) a0 = _mm256_add_ps(a0, FX_SUM_LOADN(x + i, n - i, tail_mask(n - i)));
    i += 8;
    if (i < n) a1 = _mm256_add_ps(a1, FX_SUM_LOADN(x + i, n - i, tail_mask(n - i)));
    i += 8;
    if (i < n) a2 = _mm256_add_ps(a2, FX_SUM_LOADN(x + i, n - i, tail_mask(n - i)));
    i += 8;
    if (i < n) a3 = _mm256_add_ps(a3, FX_SUM_LOADN(x + i, n - i, tail_mask(n - i)));
    return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
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
 * chunk holds cnt[v] of them (m[v] = tail_mask(cnt[v]); full: every vector whole) */
static void FX_SUM_FN(sum_cols)(const FX_SUM_T *x, int64_t len, int64_t stride,
                                const __m256i m[COL_VECS], const int64_t cnt[COL_VECS], int full,
                                float *out)
{
    if (len <= SUM_ROWS) {
        __m256 acc[COL_VECS];
        for (int v = 0; v < COL_VECS; v++) acc[v] = _mm256_setzero_ps();
        for (int64_t k = 0; k < len; k++)
            for (int v = 0; v < COL_VECS; v++) {
                const FX_SUM_T *p = x + k * stride + 8 * v;
                acc[v] = _mm256_add_ps(acc[v], full ? FX_SUM_LOAD8(p) : FX_SUM_LOADN(p, cnt[v], m[v]));
            }
        for (int v = 0; v < COL_VECS; v++) col_store(out + 8 * v, m[v], full, acc[v]);
        return;
    }
    const int64_t blocks = (len + SUM_ROWS - 1) / SUM_ROWS;
    const int64_t left = (blocks + 1) / 2 * SUM_ROWS;
    _Alignas(32) float right[SUM_COLS];
    FX_SUM_FN(sum_cols)(x, left, stride, m, cnt, full, out);
    FX_SUM_FN(sum_cols)(x + left * stride, len - left, stride, m, cnt, full, right);
    for (int v = 0; v < COL_VECS; v++) {
        const __m256 s =
            _mm256_add_ps(col_load(out + 8 * v, m[v], full), col_load(right + 8 * v, m[v], full));
        col_store(out + 8 * v, m[v], full, s);
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
        __m256i m[COL_VECS];
        int64_t cnt[COL_VECS];
        for (int v = 0; v < COL_VECS; v++) {
            const int64_t left = inner - j0 - 8 * v;
            cnt[v] = left <= 0 ? 0 : left >= 8 ? 8 : left;
            m[v] = tail_mask(cnt[v]);
        }
        FX_SUM_FN(sum_cols)(a + o * len * inner + j0, len, inner, m, cnt, inner - j0 >= SUM_COLS,
                            c->out_f32 + o * inner + j0);
    }
}

int FX_SUM_NAME(const fx_op_call *c)
{
    return fx_f32_sum_drive(c, sizeof(FX_SUM_T), SUM_BLOCK, SUM_COLS, FX_SUM_FN(sum_contig_any),
                            FX_SUM_FN(sum_range));
}

#undef FX_SUM_FN
#undef FX_SUM_CAT
#undef FX_SUM_CAT2
#undef FX_SUM_NAME
#undef FX_SUM_ID
#undef FX_SUM_T
#undef FX_SUM_LOAD8
#undef FX_SUM_LOADN
