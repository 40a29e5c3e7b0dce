/* fp32 compute kernels, AVX-512F level (the file is compiled with the AVX-512 flags).
 * Overwrites the AVX2 entries with 512-bit versions of the same operations; semantics and
 * bounds as in f32_scalar.c (RELU, SUM) and f32_kernels.h (MATMUL).
 *
 * MATMUL micro-kernel: 12 x 32. Per k step it loads two 16-float vectors of B, broadcasts 12
 * values of A and issues 24 independent FMAs: 24 accumulators cover the 4-cycle FMA latency on
 * two FMA ports (8 needed) three times over, and 24 + 2 (B) + 1 (broadcast) = 27 of the 32 zmm
 * registers leave room for the compiler. Each output is one FMA chain over k (one rounding per
 * step), so this kernel gives the same bits as the AVX2 one: both are instances of
 * f32_ukernel_tmpl.h. The transposing packs are not shared: here masked loads and stores
 * handle the k tail and short rows, which AVX2 does through buffers and spilling stores.
 *
 * SUM (contiguous): blocks of 128 in 4 x 16 lanes (<= 1 rounding each), a 2-level tree over
 * the 4 accumulators, a 4-level horizontal tree: 7 roundings; then the scalar level's balanced
 * tree over blocks. D = 7 + ceil(log2(ceil(n/128))). Strided: 16 rows in order over 64
 * columns, as the scalar level: D = 15 + ceil(log2(ceil(n/16))).
 */
#include "f32_kernels.h"
#include "f32_math.h"
#include "f32_nan_avx512.h"
#include "core/lanes_avx512.h"
#include "core/transpose_avx512.h"
#include "bf16/bf16_kernels.h"
#include "fp16/fp16_kernels.h"

#include <immintrin.h>
#include <stdint.h>

/* ---- elementwise ---------------------------------------------------------------------------- */

static const float *in_f32(const fx_op_call *c, int i) { return (const float *)c->in[i].data; }

/* lanes [0, n) of a 16-lane vector, n in [0, 16] */
static __mmask16 tail_mask(int64_t n) { return (__mmask16)((1u << n) - 1u); }

#define FX_AVX512_BINARY_RANGE(name, vop)                                                        \
    static void name(const fx_op_call *c, int64_t lo, int64_t hi)                                \
    {                                                                                            \
        const float *a = in_f32(c, 0), *b = in_f32(c, 1);                                        \
        float *y = c->out_f32;                                                                   \
        int64_t i = lo;                                                                          \
        for (; i + 32 <= hi; i += 32) {                                                          \
            __m512 r0 = vop(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));                     \
            __m512 r1 = vop(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16));           \
            _mm512_storeu_ps(y + i, r0);                                                         \
            _mm512_storeu_ps(y + i + 16, r1);                                                    \
        }                                                                                        \
        for (; i < hi; i += 16) {                                                                \
            const __mmask16 m = tail_mask(hi - i < 16 ? hi - i : 16);                            \
            __m512 r = vop(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i));    \
            _mm512_mask_storeu_ps(y + i, m, r);                                                  \
        }                                                                                        \
    }
/* a op b with the first-NaN rule of f32_scalar.c (f32_nan_avx512.h) */
static inline __m512 add_nf(__m512 a, __m512 b) { return fx_f32_add_nf16(a, b); }
static inline __m512 sub_nf(__m512 a, __m512 b)
{
    return fx_f32_nan_first16(a, _mm512_sub_ps(a, b));
}
static inline __m512 mul_nf(__m512 a, __m512 b)
{
    return fx_f32_nan_first16(a, _mm512_mul_ps(a, b));
}
FX_AVX512_BINARY_RANGE(add_range, add_nf)
FX_AVX512_BINARY_RANGE(sub_range, sub_nf)
FX_AVX512_BINARY_RANGE(mul_range, mul_nf)

/* x * s */
static inline __m512 scale_vec(__m512 x, __m512 s) { return _mm512_mul_ps(x, s); }
/* x > 0 or NaN (the unordered "not less or equal" predicate): keep x, else +0 */
static inline __m512 relu_vec(__m512 x, __m512 zero)
{
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, zero, _CMP_NLE_UQ), x);
}

#define FX_AVX512_UNARY_RANGE(name, vfn, param)                                                  \
    static void name(const fx_op_call *c, int64_t lo, int64_t hi)                                \
    {                                                                                            \
        const float *a = in_f32(c, 0);                                                           \
        float *y = c->out_f32;                                                                   \
        const __m512 p = (param);                                                                \
        int64_t i = lo;                                                                          \
        for (; i + 32 <= hi; i += 32) {                                                          \
            _mm512_storeu_ps(y + i, vfn(_mm512_loadu_ps(a + i), p));                             \
            _mm512_storeu_ps(y + i + 16, vfn(_mm512_loadu_ps(a + i + 16), p));                   \
        }                                                                                        \
        for (; i < hi; i += 16) {                                                                \
            const __mmask16 m = tail_mask(hi - i < 16 ? hi - i : 16);                            \
            _mm512_mask_storeu_ps(y + i, m, vfn(_mm512_maskz_loadu_ps(m, a + i), p));            \
        }                                                                                        \
    }
FX_AVX512_UNARY_RANGE(scale_range, scale_vec, _mm512_set1_ps(c->scalar_f32))
FX_AVX512_UNARY_RANGE(relu_range, relu_vec, _mm512_setzero_ps())

#define FX_AVX512_EW_KERNEL(kname, range)                                                        \
    int kname(const fx_op_call *c)                                                               \
    {                                                                                            \
        fx_f32_parallel_ranges(c, c->out_numel, FX_F32_EW_CHUNK, FX_F32_EW_MIN_PARALLEL, range); \
        return FX_OK;                                                                            \
    }
FX_AVX512_EW_KERNEL(fx_f32_add_avx512, add_range)
FX_AVX512_EW_KERNEL(fx_f32_sub_avx512, sub_range)
FX_AVX512_EW_KERNEL(fx_f32_mul_avx512, mul_range)
FX_AVX512_EW_KERNEL(fx_f32_scale_avx512, scale_range)
FX_AVX512_EW_KERNEL(fx_f32_relu_avx512, relu_range)

/* ---- sum ------------------------------------------------------------------------------------ */

#define SUM_BLOCK 128
#define SUM_ROWS 16
#define SUM_COLS 64

/* masks of the four 16-column vectors of a chunk w columns wide (w <= 64) */
static void col_masks(int64_t w, __mmask16 m[4])
{
    for (int v = 0; v < 4; v++) {
        const int64_t left = w - 16 * v;
        m[v] = tail_mask(left <= 0 ? 0 : left < 16 ? left : 16);
    }
}

/* fp32 input: the loads as they are (a masked load reads nothing in its masked lanes) */
#define FX_SUM_NAME fx_f32_sum_avx512
#define FX_SUM_ID f32
#define FX_SUM_T float
#define FX_SUM_LOADM(p, m) _mm512_maskz_loadu_ps((m), (p))
#include "f32_sum_avx512_tmpl.h"

/* bf16 input: a bf16 is the high half of its fp32 */
#define FX_SUM_NAME fx_bf16_sum_avx512
#define FX_SUM_ID bf16
#define FX_SUM_T uint16_t
#define FX_SUM_LOADM(p, m)                                                                     \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16((m), (p))), 16))
#include "f32_sum_avx512_tmpl.h"

/* fp16 input: vcvtph2ps. It quiets a signalling NaN, which the exact widening keeps
 * signalling; every value enters the sums through an addition, which quiets it anyway. */
#define FX_SUM_NAME fx_fp16_sum_avx512
#define FX_SUM_ID fp16
#define FX_SUM_T uint16_t
#define FX_SUM_LOADM(p, m) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((m), (p)))
#include "f32_sum_avx512_tmpl.h"

/* ---- matmul --------------------------------------------------------------------------------- */

#define MR FX_F32_MR_AVX512
#define NR 32

/* the 12 x 32 tile of the common FMA micro-kernel (f32_ukernel_tmpl.h) on 16-float zmm
 * vectors */
#define FX_UK_NAME ukernel_12x32
#define FX_UK_MR 12
#define FX_UK_LANES 16
#define FX_UK_VEC __m512
#define FX_UK_ZERO() _mm512_setzero_ps()
#define FX_UK_LOAD(p) _mm512_load_ps(p)
#define FX_UK_LOADU(p) _mm512_loadu_ps(p)
#define FX_UK_STOREU(p, v) _mm512_storeu_ps(p, v)
#define FX_UK_BCAST(p) _mm512_set1_ps(*(p))
#define FX_UK_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#include "f32_ukernel_tmpl.h"
_Static_assert(MR == 12 && NR == 32, "the tile of ukernel_12x32");

/* The first 8 or 4 rows of a 12-row panel (fx_f32_gemm_params.kernel_rows): the remainders of
 * M = 8, 16, 20, 32, 64, 128 ... rows */
#define FX_UK_NAME ukernel_8of12x32
#define FX_UK_MR 8
#define FX_UK_ASTRIDE 12
#include "f32_ukernel_tmpl.h"

#define FX_UK_NAME ukernel_4of12x32
#define FX_UK_MR 4
#define FX_UK_ASTRIDE 12
#include "f32_ukernel_tmpl.h"

static const fx_f32_ukernel kernel_rows_12[MR] = {[4] = ukernel_4of12x32, [8] = ukernel_8of12x32};

/* The first 16 columns of a 32-column panel (fx_f32_gemm_params.kernel_half): the last
 * column panel of N = 16, 48 ... (a weight gradient into 16 output channels), which would
 * otherwise run the whole 12 x 32 kernel on a scratch tile, half its FMAs on zeros */
#define FX_UK_NAME ukernel_12x16of32
#define FX_UK_MR 12
#define FX_UK_NV 1
#include "f32_ukernel_tmpl.h"

/* 16 source values of a row (only the first `ks` exist) as 16 floats, per source kind. */
enum { SRC_F32, SRC_FP16, SRC_BF16 };

static inline __attribute__((always_inline)) __m512 load_row16(const void *src, int kind,
                                                               __mmask16 k_mask)
{
    if (kind == SRC_F32) return fx_load_d16(src, k_mask);
    const __m256i h = fx_load_w16(src, k_mask);
    if (kind == SRC_BF16) /* bf16 is the upper half of the fp32 bits */
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    /* vcvtph2ps is exact except that it quiets signalling NaNs (the definition keeps them
     * signalling); packed values only ever feed the kernel's FMAs, which quiet them anyway */
    return _mm512_cvtph_ps(h);
}

/* dst[k*R + r] = widen(src[r*ld + k]) (fx_f32_pack_fn and fx_f32_pack16_fn): 16 x 16 blocks
 * through registers, masked loads for the k tail (nothing past a row is read) and masked
 * stores for R % 16 rows. */
static inline void pack_rows_any(float *dst, const void *src, size_t esz, int kind, int64_t ld,
                                 int64_t kb, int64_t R)
{
    const char *s = (const char *)src;
    for (int64_t r0 = 0; r0 < R; r0 += 16) {
        const int rows = R - r0 < 16 ? (int)(R - r0) : 16;
        const __mmask16 row_mask = (__mmask16)((1u << rows) - 1);
        for (int64_t k0 = 0; k0 < kb; k0 += 16) {
            const int ks = kb - k0 < 16 ? (int)(kb - k0) : 16;
            const __mmask16 k_mask = (__mmask16)((1u << ks) - 1);
            __m512 v[16];
            for (int i = 0; i < rows; i++)
                fx_prefetch_at(s + (size_t)((r0 + i) * ld + k0) * esz,
                               FX_F32_PACK_PREFETCH_ROWS * ld * (int64_t)esz);
            for (int i = 0; i < 16; i++)
                v[i] = i < rows ? load_row16(s + (size_t)((r0 + i) * ld + k0) * esz, kind, k_mask)
                                : _mm512_setzero_ps();
            fx_transpose16x16_ps(v);
            for (int t = 0; t < ks; t++) fx_store_d16(dst + (k0 + t) * R + r0, row_mask, v[t]);
        }
    }
}

void fx_f32_pack_rows_avx512(float *dst, const float *src, int64_t ld, int64_t kb, int64_t R)
{
    pack_rows_any(dst, src, sizeof(float), SRC_F32, ld, kb, R);
}

static void pack_rows_fp16_avx512(float *dst, const uint16_t *src, int64_t ld, int64_t kb,
                                  int64_t R)
{
    pack_rows_any(dst, src, sizeof(uint16_t), SRC_FP16, ld, kb, R);
}

static void pack_rows_bf16_avx512(float *dst, const uint16_t *src, int64_t ld, int64_t kb,
                                  int64_t R)
{
    pack_rows_any(dst, src, sizeof(uint16_t), SRC_BF16, ld, kb, R);
}

/* kc: the A micro-panel (12 x 384 floats, 18 KiB) stays in L1; nc: the packed B block
 * (384 x 512 floats, 768 KiB) in the 1 MiB L2 of the development Xeon; mc: A block in L3. */
static const fx_f32_gemm_params gemm_avx512 = {
    .mr = MR, .nr = NR, .kc = 384, .mc = 1200, .nc = 512, .min_par_work = 1 << 21,
    .kernel = ukernel_12x32, .kernel_rows = kernel_rows_12, .kernel_half = ukernel_12x16of32,
    .pack_rows = fx_f32_pack_rows_avx512,
    .pack_rows_fp16 = pack_rows_fp16_avx512, .pack_rows_bf16 = pack_rows_bf16_avx512,
    .widen_fp16 = fx_cvt_fp16_to_f32_avx512, .widen_bf16 = fx_cvt_bf16_to_f32_avx512,
};

int fx_f32_matmul_avx512(const fx_op_call *c) { return fx_f32_gemm(&gemm_avx512, c); }

/* ---- the fused convolution epilogue (backend.h) ------------------------------------------- */

void fx_f32_bias_relu_avx512(float *v, int64_t rows, int64_t cols, const float *bias, int relu)
{
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t r = 0; r < rows; r++) {
        float *row = v + r * cols;
        int64_t j = 0;
        for (; j + 16 <= cols; j += 16) { /* whole vectors: plain loads and stores */
            __m512 x = _mm512_loadu_ps(row + j);
            if (bias) x = add_nf(x, _mm512_loadu_ps(bias + j));
            if (relu) x = relu_vec(x, zero);
            _mm512_storeu_ps(row + j, x);
        }
        if (j < cols) {
            const __mmask16 m = tail_mask(cols - j);
            __m512 x = _mm512_maskz_loadu_ps(m, row + j);
            if (bias) x = add_nf(x, _mm512_maskz_loadu_ps(m, bias + j));
            if (relu) x = relu_vec(x, zero);
            _mm512_mask_storeu_ps(row + j, m, x);
        }
    }
}
