/* fp32 compute kernels, AVX2 + FMA level (the file is compiled with -mavx2 -mfma -mf16c).
 * Overwrites the scalar entries with 256-bit versions of the same operations; semantics and
 * bounds as in f32_scalar.c (RELU, SUM) and f32_kernels.h (MATMUL). COPY stays the scalar
 * level's memcpy, which libc already vectorises.
 *
 * MATMUL micro-kernel: 6 x 16. Per k step it loads two 8-float vectors of B, broadcasts 6
 * values of A and issues 12 independent FMAs: 12 accumulators cover the 4-cycle FMA latency on
 * two FMA ports (8 needed), and 12 + 2 (B) + 1 (broadcast) = 15 of the 16 ymm registers.
 * Each output is one FMA chain over k, so the bits equal those of the AVX-512 kernel: both
 * are instances of f32_ukernel_tmpl.h. The transposing packs are not shared: without mask
 * registers this level handles short rows and k tails through buffers and spilling stores.
 *
 * SUM (contiguous): blocks of 128 in 4 x 8 lanes (<= 3 roundings each), a 2-level tree over
 * the accumulators and a 3-level horizontal tree: 8; then the balanced tree over blocks.
 * D = 8 + ceil(log2(ceil(n/128))). Strided: 16 rows in order over 64 columns, as the scalar
 * level: D = 15 + ceil(log2(ceil(n/16))).
 */
#include "f32_kernels.h"
#include "f32_math.h"
#include "bf16/bf16_kernels.h"
#include "core/transpose_avx2.h"
#include "fp16/fp16_kernels.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* ---- elementwise ---------------------------------------------------------------------------- */

static const float *in_f32(const fx_op_call *c, int i) { return (const float *)c->in[i].data; }

/* all-ones in lanes [0, n) of an 8-lane vector, n <= 8 (n <= 0 gives none) */
static __m256i tail_mask(int64_t n)
{
    const int32_t k = n <= 0 ? 0 : n >= 8 ? 8 : (int32_t)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#define FX_AVX2_BINARY_RANGE(name, vop)                                                          \
    static void name(const fx_op_call *c, int64_t lo, int64_t hi)                                \
    {                                                                                            \
        const float *a = in_f32(c, 0), *b = in_f32(c, 1);                                        \
        float *y = c->out_f32;                                                                   \
        int64_t i = lo;                                                                          \
        for (; i + 16 <= hi; i += 16) {                                                          \
            __m256 r0 = vop(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));                     \
            __m256 r1 = vop(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));             \
            _mm256_storeu_ps(y + i, r0);                                                         \
            _mm256_storeu_ps(y + i + 8, r1);                                                     \
        }                                                                                        \
        for (; i < hi; i += 8) {                                                                 \
            const __m256i m = tail_mask(hi - i);                                                 \
            __m256 r = vop(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m));          \
            _mm256_maskstore_ps(y + i, m, r);                                                    \
        }                                                                                        \
    }
/* a op b with the first-NaN rule of f32_scalar.c: lanes where a is NaN take a, quieted (the
 * compiler may emit the instruction with its operands swapped, and then b's NaN would win) */
static inline __m256 nan_first(__m256 a, __m256 r)
{
    const __m256 an = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
    const __m256 qa = _mm256_or_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000)));
    return _mm256_blendv_ps(r, qa, an);
}
static inline __m256 add_nf(__m256 a, __m256 b) { return nan_first(a, _mm256_add_ps(a, b)); }
static inline __m256 sub_nf(__m256 a, __m256 b) { return nan_first(a, _mm256_sub_ps(a, b)); }
static inline __m256 mul_nf(__m256 a, __m256 b) { return nan_first(a, _mm256_mul_ps(a, b)); }
FX_AVX2_BINARY_RANGE(add_range, add_nf)
FX_AVX2_BINARY_RANGE(sub_range, sub_nf)
FX_AVX2_BINARY_RANGE(mul_range, mul_nf)

static inline __m256 scale_vec(__m256 x, __m256 s) { return _mm256_mul_ps(x, s); }
/* x > 0 or NaN (unordered "not less or equal"): keep x, else +0 */
static inline __m256 relu_vec(__m256 x, __m256 zero)
{
    return _mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_NLE_UQ), x);
}

#define FX_AVX2_UNARY_RANGE(name, vfn, param)                                                    \
    static void name(const fx_op_call *c, int64_t lo, int64_t hi)                                \
    {                                                                                            \
        const float *a = in_f32(c, 0);                                                           \
        float *y = c->out_f32;                                                                   \
        const __m256 p = (param);                                                                \
        int64_t i = lo;                                                                          \
        for (; i + 16 <= hi; i += 16) {                                                          \
            _mm256_storeu_ps(y + i, vfn(_mm256_loadu_ps(a + i), p));                             \
            _mm256_storeu_ps(y + i + 8, vfn(_mm256_loadu_ps(a + i + 8), p));                     \
        }                                                                                        \
        for (; i < hi; i += 8) {                                                                 \
            const __m256i m = tail_mask(hi - i);                                                 \
            _mm256_maskstore_ps(y + i, m, vfn(_mm256_maskload_ps(a + i, m), p));                 \
        }                                                                                        \
    }
FX_AVX2_UNARY_RANGE(scale_range, scale_vec, _mm256_set1_ps(c->scalar_f32))
FX_AVX2_UNARY_RANGE(relu_range, relu_vec, _mm256_setzero_ps())

#define FX_AVX2_EW_KERNEL(kname, range)                                                          \
    int kname(const fx_op_call *c)                                                               \
    {                                                                                            \
        fx_f32_parallel_ranges(c, c->out_numel, FX_F32_EW_CHUNK, FX_F32_EW_MIN_PARALLEL, range); \
        return FX_OK;                                                                            \
    }
FX_AVX2_EW_KERNEL(fx_f32_add_avx2, add_range)
FX_AVX2_EW_KERNEL(fx_f32_sub_avx2, sub_range)
FX_AVX2_EW_KERNEL(fx_f32_mul_avx2, mul_range)
FX_AVX2_EW_KERNEL(fx_f32_scale_avx2, scale_range)
FX_AVX2_EW_KERNEL(fx_f32_relu_avx2, relu_range)

/* ---- sum ------------------------------------------------------------------------------------ */

#define SUM_BLOCK 128
#define SUM_ROWS 16
#define SUM_COLS 64
#define COL_VECS (SUM_COLS / 8)

/* ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)): a 3-level tree */
static float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* a chunk's vector v: whole chunks (full) take plain loads and stores, the last chunk of a row
 * its masks. Why: vmaskmovps costs more than a plain move on the AMD cores (its store form is
 * microcoded on Zen 2 and 3), and the masks only matter on the last chunk. */
static inline __m256 col_load(const float *p, __m256i m, int full)
{
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}

static inline void col_store(float *p, __m256i m, int full, __m256 v)
{
    if (full)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, m, v);
}

/* fp32 input: the loads as they are (a masked load reads nothing in its masked lanes) */
#define FX_SUM_NAME fx_f32_sum_avx2
#define FX_SUM_ID f32
#define FX_SUM_T float
#define FX_SUM_LOAD8(p) _mm256_loadu_ps(p)
#define FX_SUM_LOADN(p, n, m) _mm256_maskload_ps((p), (m))
#include "f32_sum_avx2_tmpl.h"

/* the first n (< 8) 16-bit elements at p in a zeroed vector: the tails of the 16-bit sums
 * (zero bits widen to +0.0f, as the fp32 tails' masked lanes read) */
static inline __m128i half_tail(const uint16_t *p, int64_t n)
{
    uint16_t t[8] = {0};
    if (n > 0) memcpy(t, p, (size_t)n * sizeof *t);
    return _mm_loadu_si128((const __m128i *)t);
}

/* bf16 input: a bf16 is the high half of its fp32 */
static inline __m256 bf16_widen8(__m128i h)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#define FX_SUM_NAME fx_bf16_sum_avx2
#define FX_SUM_ID bf16
#define FX_SUM_T uint16_t
#define FX_SUM_LOAD8(p) bf16_widen8(_mm_loadu_si128((const __m128i *)(p)))
#define FX_SUM_LOADN(p, n, m) ((n) >= 8 ? FX_SUM_LOAD8(p) : bf16_widen8(half_tail((p), (n))))
#include "f32_sum_avx2_tmpl.h"

/* fp16 input: vcvtph2ps. It quiets a signalling NaN, which the exact widening (fp16_avx2.c)
 * keeps signalling; every value enters the sums through an addition, which quiets it anyway.
 * (Which NaN a sum returns where two meet is not fixed by the source in any instance: the
 * compiler may swap the operands of the commutative vaddps.) */
#define FX_SUM_NAME fx_fp16_sum_avx2
#define FX_SUM_ID fp16
#define FX_SUM_T uint16_t
#define FX_SUM_LOAD8(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define FX_SUM_LOADN(p, n, m) ((n) >= 8 ? FX_SUM_LOAD8(p) : _mm256_cvtph_ps(half_tail((p), (n))))
#include "f32_sum_avx2_tmpl.h"

/* ---- matmul --------------------------------------------------------------------------------- */

#define MR FX_F32_MR_AVX2
#define NR 16

/* the 6 x 16 tile of the common FMA micro-kernel (f32_ukernel_tmpl.h) on 8-float ymm vectors */
#define FX_UK_NAME ukernel_6x16
#define FX_UK_MR 6
#define FX_UK_LANES 8
#define FX_UK_VEC __m256
#define FX_UK_ZERO() _mm256_setzero_ps()
#define FX_UK_LOAD(p) _mm256_load_ps(p)
#define FX_UK_LOADU(p) _mm256_loadu_ps(p)
#define FX_UK_STOREU(p, v) _mm256_storeu_ps(p, v)
#define FX_UK_BCAST(p) _mm256_broadcast_ss(p)
#define FX_UK_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#include "f32_ukernel_tmpl.h"
_Static_assert(MR == 6 && NR == 16, "the tile of ukernel_6x16");

/* The first 4 or 2 rows of a 6-row panel (fx_f32_gemm_params.kernel_rows): the remainders of
 * M = 16, 32, 64, 128 ... rows */
#define FX_UK_NAME ukernel_4of6x16
#define FX_UK_MR 4
#define FX_UK_ASTRIDE 6
#include "f32_ukernel_tmpl.h"

#define FX_UK_NAME ukernel_2of6x16
#define FX_UK_MR 2
#define FX_UK_ASTRIDE 6
#include "f32_ukernel_tmpl.h"

static const fx_f32_ukernel kernel_rows_6[MR] = {[2] = ukernel_2of6x16, [4] = ukernel_4of6x16};

/* ---- transposing packs (fx_f32_pack_fn, fx_f32_pack16_fn) ----------------------------------
 * Without them the framework's scalar loop packed every A micro-panel one float at a time
 * (11 % of an AVX2 fp32 CNN epoch). 8 x 8 blocks go through registers. */
enum { SRC_F32, SRC_FP16, SRC_BF16 };

/* 8 source values at src as 8 floats, widened exactly from fp16/bf16 (vcvtph2ps quiets a
 * signalling NaN, which the kernel's FMAs would quiet anyway). */
static inline __attribute__((always_inline)) __m256 load_row8(const char *src, int kind)
{
    if (kind == SRC_F32) return _mm256_loadu_ps((const float *)(const void *)src);
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)src);
    if (kind == SRC_BF16) /* bf16 is the upper half of the fp32 bits */
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* A transposed 8 x 8 block's columns v[t] to d + t*stride as whole vectors: each may write
 * past its column's slots, which the caller's next store overwrites. Constant indices keep v[]
 * in registers. */
static inline __attribute__((always_inline)) void store_cols8(float *d, int64_t stride,
                                                              const __m256 v[8])
{
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++) _mm256_storeu_ps(d + t * stride, v[t]);
}

/* The block's first ncols columns, width floats each, and nothing past them: all 8 vectors
 * spilled by constant indices (a variable v[t] would put v[] on the stack for every block),
 * then copied. */
static inline __attribute__((always_inline)) void store_cols_exact(float *d, int64_t stride,
                                                                   const __m256 v[8], int ncols,
                                                                   int width)
{
    float spill[8][8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++) _mm256_storeu_ps(spill[t], v[t]);
    for (int t = 0; t < ncols; t++) memcpy(d + t * stride, spill[t], (size_t)width * sizeof(float));
}

/* dst[k*R + r] = widen(src[r*ld + k]), r < R, k < kb, in 8 x 8 blocks. A block of fewer rows
 * than 8 (R = 6, the A panels) stores whole vectors too where the next k's store overwrites
 * the spill; a short k tail is read through a zeroed buffer (nothing past a row is read). */
static inline __attribute__((always_inline)) void pack_rows_any(float *dst, const void *src,
                                                                size_t esz, int kind, int64_t ld,
                                                                int64_t kb, int64_t R)
{
    const char *s = (const char *)src;
    for (int64_t r0 = 0; r0 < R; r0 += 8) {
        const int rows = R - r0 < 8 ? (int)(R - r0) : 8;
        /* a block of 8 rows stores whole vectors anyway; with 4 <= R < 8 (one row block) a
         * whole-vector store at k covers slots up to kR + 7 < (k + 2)R: it spills only into
         * k + 1's slots, which the next store writes */
        const int spill_ok = R >= 4 && R < 8;
        for (int64_t k0 = 0; k0 < kb; k0 += 8) {
            const int ks = kb - k0 < 8 ? (int)(kb - k0) : 8;
            __m256 v[8];
            for (int i = 0; i < rows; i++)
                fx_prefetch_at(s + (size_t)((r0 + i) * ld + k0) * esz,
                               FX_F32_PACK_PREFETCH_ROWS * ld * (int64_t)esz);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                if (i >= rows) { /* no pointer is formed for a missing row */
                    v[i] = _mm256_setzero_ps();
                    continue;
                }
                const char *row = s + (size_t)((r0 + i) * ld + k0) * esz;
                if (ks == 8) {
                    v[i] = load_row8(row, kind);
                } else {
                    char tmp[32] = {0};
                    memcpy(tmp, row, (size_t)ks * esz);
                    v[i] = load_row8(tmp, kind);
                }
            }
            fx_transpose8x8_ps(v);
            if (ks == 8 && (rows == 8 || (spill_ok && k0 + 8 < kb)))
                store_cols8(dst + k0 * R + r0, R, v); /* the common block */
            else
                store_cols_exact(dst + k0 * R + r0, R, v, ks, rows); /* a tail block */
        }
    }
}

/* The GEMM packs panels of MR (A) or NR (B) rows; with R a compile-time constant there the
 * block loops unroll and v[] stays in registers (a run-time R made the fp32 weight gradient's
 * pack cost more than its micro-kernel). Other R take the general instance. */
static inline __attribute__((always_inline)) void pack_rows_r(float *dst, const void *src,
                                                              size_t esz, int kind, int64_t ld,
                                                              int64_t kb, int64_t R)
{
    if (R == MR)
        pack_rows_any(dst, src, esz, kind, ld, kb, MR);
    else if (R == NR)
        pack_rows_any(dst, src, esz, kind, ld, kb, NR);
    else
        pack_rows_any(dst, src, esz, kind, ld, kb, R);
}

static void pack_rows_f32(float *dst, const float *src, int64_t ld, int64_t kb, int64_t R)
{
    pack_rows_r(dst, src, sizeof(float), SRC_F32, ld, kb, R);
}

static void pack_rows_fp16(float *dst, const uint16_t *src, int64_t ld, int64_t kb, int64_t R)
{
    pack_rows_r(dst, src, sizeof(uint16_t), SRC_FP16, ld, kb, R);
}

static void pack_rows_bf16(float *dst, const uint16_t *src, int64_t ld, int64_t kb, int64_t R)
{
    pack_rows_r(dst, src, sizeof(uint16_t), SRC_BF16, ld, kb, R);
}

void fx_f32_pack_rows_avx2(float *dst, const void *src, int fmt, int64_t ld, int64_t kb,
                           int64_t R)
{
    if (fmt == FMT_FP16)
        pack_rows_fp16(dst, src, ld, kb, R);
    else if (fmt == FMT_BF16)
        pack_rows_bf16(dst, src, ld, kb, R);
    else
        pack_rows_f32(dst, src, ld, kb, R);
}

/* lanes t < split of a, the others of b */
static inline __m256 first_lanes(__m256 a, __m256 b, int split)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 from_a = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(split), lane));
    return _mm256_blendv_ps(b, a, from_a);
}

static inline __attribute__((always_inline)) void pack_blocks_any(float *dst, const char *src,
                                                                  size_t esz, int kind,
                                                                  const int64_t *row_off,
                                                                  int rows,
                                                                  const fx_f32_block *blk,
                                                                  int64_t ncols)
{
    const int64_t nblk = (ncols + 7) / 8;
    for (int64_t b = 0; b < nblk; b++) {
        __m256 v[8];
        const int64_t off = blk[b].off, off2 = blk[b].off2;
        const int split = blk[b].split;
        if (split == 8) {
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) /* no pointer is formed for a missing row */
                v[i] = i < rows ? load_row8(src + (size_t)(row_off[i] + off) * esz, kind)
                                : _mm256_setzero_ps();
        } else { /* the block continues on the next output row */
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                v[i] = i < rows
                           ? first_lanes(load_row8(src + (size_t)(row_off[i] + off) * esz, kind),
                                         load_row8(src + (size_t)(row_off[i] + off2) * esz, kind),
                                         split)
                           : _mm256_setzero_ps();
        }
        fx_transpose8x8_ps(v);
        /* whole vectors spill 2 floats into the next column's slots, which the next store
         * writes; the panel's last block writes nothing past its columns */
        if (b + 1 < nblk)
            store_cols8(dst + b * 8 * MR, MR, v);
        else
            store_cols_exact(dst + b * 8 * MR, MR, v, (int)(ncols - b * 8), MR);
    }
}

void fx_f32_pack_blocks_avx2(float *dst, const void *src, int fmt, const int64_t *row_off, int rows,
                             const fx_f32_block *blk, int64_t ncols)
{
    if (fmt == FMT_FP16)
        pack_blocks_any(dst, src, sizeof(uint16_t), SRC_FP16, row_off, rows, blk, ncols);
    else if (fmt == FMT_BF16)
        pack_blocks_any(dst, src, sizeof(uint16_t), SRC_BF16, row_off, rows, blk, ncols);
    else
        pack_blocks_any(dst, src, sizeof(float), SRC_F32, row_off, rows, blk, ncols);
}

/* kc: the A micro-panel (6 x 256 floats, 6 KiB) stays in L1; nc: the packed B block
 * (256 x 512 floats, 512 KiB) in L2; mc: A block in L2/L3. */
static const fx_f32_gemm_params gemm_avx2 = {
    .mr = MR, .nr = NR, .kc = 256, .mc = 1200, .nc = 512, .min_par_work = 1 << 21,
    .kernel = ukernel_6x16, .kernel_rows = kernel_rows_6, .pack_rows = pack_rows_f32,
    .pack_rows_fp16 = pack_rows_fp16, .pack_rows_bf16 = pack_rows_bf16,
    .widen_fp16 = fx_cvt_fp16_to_f32_avx2, .widen_bf16 = fx_cvt_bf16_to_f32_avx2,
};

int fx_f32_matmul_avx2(const fx_op_call *c) { return fx_f32_gemm(&gemm_avx2, c); }

/* ---- the fused convolution epilogue (backend.h) ------------------------------------------- */

void fx_f32_bias_relu_avx2(float *v, int64_t rows, int64_t cols, const float *bias, int relu)
{
    const __m256 zero = _mm256_setzero_ps();
    for (int64_t r = 0; r < rows; r++) {
        float *row = v + r * cols;
        int64_t j = 0;
        for (; j + 8 <= cols; j += 8) { /* whole vectors: plain moves (masked stores are slow
                                          * on AMD cores, microcoded) */
            __m256 x = _mm256_loadu_ps(row + j);
            if (bias) x = add_nf(x, _mm256_loadu_ps(bias + j));
            if (relu) x = relu_vec(x, zero);
            _mm256_storeu_ps(row + j, x);
        }
        if (j < cols) {
            const __m256i m = tail_mask(cols - j);
            __m256 x = _mm256_maskload_ps(row + j, m);
            if (bias) x = add_nf(x, _mm256_maskload_ps(bias + j, m));
            if (relu) x = relu_vec(x, zero);
            _mm256_maskstore_ps(row + j, m, x);
        }
    }
}
