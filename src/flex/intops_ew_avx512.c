/* AVX-512 elementwise and reduction kernels of the shared-exponent formats: relu, add, sub and
 * sum, the integer ops of every training step (activations, bias adds, bias gradients). They
 * produce exactly the int64 values of the definitions in intops_scalar.c: integer arithmetic
 * has no rounding, so only the order of the (exact) additions differs. Cases outside the fast
 * shape (add/sub whose exponents are more than FX_ALIGN_SPAN apart, which need the jammed
 * alignment) call the definitions themselves. */
#include "flex_kernels.h"
#include "../core/lanes_avx512.h"

#include <immintrin.h>

#ifdef _OPENMP
#define FX_EW_PRAGMA(x) _Pragma(#x)
#define FX_EW_PARALLEL_FOR_MAX(v)                                                              \
    FX_EW_PRAGMA(omp parallel for schedule(static) num_threads(nt) if (nt > 1) reduction(max : v))
#else
#define FX_EW_PARALLEL_FOR_MAX(v)
#endif

/* Report the outputs' maximum magnitude to the write path (see fx_op_call.out_imax). */
static inline void fx_set_out_imax(const fx_op_call *c, uint64_t imax)
{
    if (!c->out_imax) return;
    *c->out_imax = imax;
    *c->out_imax_known = 1;
}

/* Elements per parallel block (a multiple of 16: blocks never split a vector). */
#define FX_EW_BLOCK 8192

static int fx_ew_threads(const fx_op_call *c, int64_t n)
{
    return (c->nthreads > 1 && n >= FX_FLEX_PAR_MIN_ELEMS) ? c->nthreads : 1;
}

/* 16 int16 -> two vectors of 8 int64 (masked: only the first `left` of 16 exist). */
static inline __attribute__((always_inline)) void fx_load16_i64(const int16_t *p, int64_t left, __m512i *lo, __m512i *hi)
{
    const __m256i v = fx_load_w16(p, left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1));
    *lo = _mm512_cvtepi16_epi64(_mm256_castsi256_si128(v));
    *hi = _mm512_cvtepi16_epi64(_mm256_extracti128_si256(v, 1));
}

static inline __attribute__((always_inline)) void fx_store16_i64(int64_t *p, int64_t left, __m512i lo, __m512i hi)
{
    const __mmask8 m0 = left >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << left) - 1);
    const __mmask8 m1 = left >= 16 ? (__mmask8)0xFF : left > 8 ? (__mmask8)((1u << (left - 8)) - 1) : 0;
    fx_store_q8(p, m0, lo);
    fx_store_q8(p + 8, m1, hi);
}

int fx_flex_relu_avx512(const fx_op_call *c)
{
    const int16_t *a = (const int16_t *)c->in[0].data;
    int64_t *o = c->out_i64;
    const int64_t n = c->out_numel, nblocks = (n + FX_EW_BLOCK - 1) / FX_EW_BLOCK;
    const int nt = fx_ew_threads(c, n);
    uint64_t imax = 0; /* the outputs' maximum, for the write path (they are >= 0) */
    (void)nt;
    FX_EW_PARALLEL_FOR_MAX(imax)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        const int64_t end = (blk + 1) * FX_EW_BLOCK < n ? (blk + 1) * FX_EW_BLOCK : n;
        __m512i mx = _mm512_setzero_si512();
        for (int64_t i = blk * FX_EW_BLOCK; i < end; i += 16) {
            __m512i lo, hi;
            fx_load16_i64(a + i, end - i, &lo, &hi); /* missing lanes load as 0 */
            lo = _mm512_max_epi64(lo, _mm512_setzero_si512());
            hi = _mm512_max_epi64(hi, _mm512_setzero_si512());
            mx = _mm512_max_epi64(mx, _mm512_max_epi64(lo, hi));
            fx_store16_i64(o + i, end - i, lo, hi);
        }
        const uint64_t m = (uint64_t)_mm512_reduce_max_epi64(mx);
        imax = m > imax ? m : imax;
    }
    *c->out_exp = c->in[0].exp;
    fx_set_out_imax(c, imax);
    return FX_OK;
}

/* a +- b with both operands within FX_ALIGN_SPAN of each other: each is shifted left to the
 * smaller exponent, exactly (|m| 2^40 < 2^56), as fx_align_to does in that case. */
static int fx_addsub_avx512(const fx_op_call *c, int negate_b)
{
    const int ea = c->in[0].exp, eb = c->in[1].exp;
    const int gap = ea > eb ? ea - eb : eb - ea;
    if (gap > FX_ALIGN_SPAN) return negate_b ? fx_flex_sub_scalar(c) : fx_flex_add_scalar(c);
    const int ec = ea < eb ? ea : eb;
    const __m128i sa = _mm_cvtsi32_si128(ea - ec), sb = _mm_cvtsi32_si128(eb - ec);
    const int16_t *a = (const int16_t *)c->in[0].data, *b = (const int16_t *)c->in[1].data;
    int64_t *o = c->out_i64;
    const int64_t n = c->out_numel, nblocks = (n + FX_EW_BLOCK - 1) / FX_EW_BLOCK;
    const int nt = fx_ew_threads(c, n);
    uint64_t imax = 0; /* max |output| (missing tail lanes load as 0 and add 0) */
    (void)nt;
    FX_EW_PARALLEL_FOR_MAX(imax)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        const int64_t end = (blk + 1) * FX_EW_BLOCK < n ? (blk + 1) * FX_EW_BLOCK : n;
        __m512i mx = _mm512_setzero_si512();
        for (int64_t i = blk * FX_EW_BLOCK; i < end; i += 16) {
            __m512i alo, ahi, blo, bhi;
            fx_load16_i64(a + i, end - i, &alo, &ahi);
            fx_load16_i64(b + i, end - i, &blo, &bhi);
            alo = _mm512_sll_epi64(alo, sa);
            ahi = _mm512_sll_epi64(ahi, sa);
            blo = _mm512_sll_epi64(blo, sb);
            bhi = _mm512_sll_epi64(bhi, sb);
            if (negate_b) {
                alo = _mm512_sub_epi64(alo, blo);
                ahi = _mm512_sub_epi64(ahi, bhi);
            } else {
                alo = _mm512_add_epi64(alo, blo);
                ahi = _mm512_add_epi64(ahi, bhi);
            }
            mx = _mm512_max_epu64(mx, _mm512_max_epu64(_mm512_abs_epi64(alo), _mm512_abs_epi64(ahi)));
            fx_store16_i64(o + i, end - i, alo, ahi);
        }
        const uint64_t m = _mm512_reduce_max_epu64(mx);
        imax = m > imax ? m : imax;
    }
    *c->out_exp = ec;
    fx_set_out_imax(c, imax);
    return FX_OK;
}

int fx_flex_add_avx512(const fx_op_call *c) { return fx_addsub_avx512(c, 0); }
int fx_flex_sub_avx512(const fx_op_call *c) { return fx_addsub_avx512(c, 1); }

/* Sum of n contiguous int16: vpmaddwd against ones adds pairs into int32 lanes (each step adds
 * at most 2^16 in magnitude per lane), and the lanes are widened to int64 every
 * FX_SUM_FLUSH steps, long before they could reach 2^31. */
#define FX_SUM_FLUSH 16384
static int64_t fx_sum_row_i16(const int16_t *x, int64_t n)
{
    const __m512i ones = _mm512_set1_epi16(1);
    __m512i total = _mm512_setzero_si512();
    int64_t i = 0;
    while (i < n) {
        __m512i acc = _mm512_setzero_si512();
        for (int64_t steps = 0; steps < FX_SUM_FLUSH && i < n; steps++, i += 32) {
            const int64_t left = n - i;
            const __mmask32 m = left >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << left) - 1);
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maskz_loadu_epi16(m, x + i), ones));
        }
        total = _mm512_add_epi64(total, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc)));
        total = _mm512_add_epi64(total, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc, 1)));
    }
    return _mm512_reduce_add_epi64(total);
}

/* out[0..inner) = the column sums of rows [0, len) of src (row stride inner): 64 columns at a
 * time, each row's 128 contiguous bytes widened into int32 lanes (each row adds at most 2^15
 * to a lane) and moved into int64 every FX_SUM_FLUSH rows, long before a lane could reach
 * 2^31. Row by row along each block's 128 bytes, where 8 columns at a time down all the rows
 * read every 64-byte line of a wide dy four times, 16 bytes at a time. */
static void fx_sum_cols_i16(const int16_t *src, int64_t len, int64_t inner, int64_t *out)
{
    for (int64_t c0 = 0; c0 < inner; c0 += 64) {
        __mmask16 m[4];
        const int ng = inner - c0 >= 64 ? 4 : (int)((inner - c0 + 15) / 16); /* groups in play */
        for (int g = 0; g < ng; g++) {
            const int64_t left = inner - c0 - 16 * g;
            m[g] = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        }
        __m512i total[8];
        for (int v = 0; v < 2 * ng; v++) total[v] = _mm512_setzero_si512();
        for (int64_t k = 0; k < len;) {
            __m512i acc[4];
            for (int g = 0; g < ng; g++) acc[g] = _mm512_setzero_si512();
            for (int64_t steps = 0; steps < FX_SUM_FLUSH && k < len; steps++, k++) {
                const int16_t *row = src + k * inner + c0;
                for (int g = 0; g < ng; g++)
                    acc[g] = _mm512_add_epi32(
                        acc[g], _mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(m[g], row + 16 * g)));
            }
            for (int g = 0; g < ng; g++) {
                total[2 * g] = _mm512_add_epi64(
                    total[2 * g], _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc[g])));
                total[2 * g + 1] = _mm512_add_epi64(
                    total[2 * g + 1], _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc[g], 1)));
            }
        }
        for (int g = 0; g < ng; g++) {
            _mm512_mask_storeu_epi64(out + c0 + 16 * g, (__mmask8)m[g], total[2 * g]);
            _mm512_mask_storeu_epi64(out + c0 + 16 * g + 8, (__mmask8)(m[g] >> 8), total[2 * g + 1]);
        }
    }
}

int fx_flex_sum_avx512(const fx_op_call *c)
{
    return fx_flex_sum_drive(c, fx_sum_row_i16, fx_sum_cols_i16);
}
