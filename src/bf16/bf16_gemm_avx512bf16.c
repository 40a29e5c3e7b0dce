/* bf16 x bf16 GEMM on bf16 pairs with AVX512_BF16 vdpbf16ps: the micro-kernels and helpers of
 * the fp32 GEMM framework's pair mode (src/fp32/f32_kernels.h states the arithmetic and when
 * vdpbf16ps gives its exact bits).
 *
 * Why pairs: vdpbf16ps does 32 multiply-adds per instruction against 16 for an fp32 FMA, at the
 * same rate on the CPUs that have it (Zen 4: 1 per cycle each, measured by bench_gemm), so a
 * bf16 GEMM can run at twice the fp32 limit. The widening route (bf16 -> fp32 while packing,
 * then FMAs) is capped at the fp32 limit. Where vdpbf16ps retires at half the FMA rate
 * (Emerald Rapids) the widening route wins instead; the table in bf16_route.c chooses.
 *
 * Register tile 6 x 32: 12 accumulators of 16 floats, two B vectors of 16 pair words, one
 * broadcast pair word per row; 6 rows because the convolution's int16 panel builder
 * (src/nn/conv_panels_avx512.c) makes 6-row panels in this very layout, from bf16 bits as from
 * int16 mantissas.
 *
 * This file is compiled with -mavx512bf16 and only installed when the CPU reports AVX512_BF16
 * and the "dpbf16" route is chosen (fx_bf16_gemm_route_set, src/core/backend.c). */
#include "../core/backend.h"
#include "../core/lanes_avx512.h"
#include "../core/pair_copy_avx512.h"
#include "../fp32/f32_kernels.h"
#include "../fp32/f32_nan_avx512.h"
#include "bf16_gemm.h"
#include "bf16_round_avx512bf16.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#define MR FX_BF16_PAIR_MR
#define NR 32

/* Lanes of c that are not 0 and below 2^-103 (biased exponent 0..23): where the chain could
 * continue from a value that is not a multiple of 2^-126 (condition (iii)). */
static inline __mmask16 not_multiple_lanes(__m512 c)
{
    const __m512i mag = _mm512_and_si512(_mm512_castps_si512(c), _mm512_set1_epi32(0x7FFFFFFF));
    const __mmask16 nonzero = _mm512_test_epi32_mask(mag, mag);
    return nonzero & _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(24 << 23));
}

/* The tile's accumulators from C (accumulate) or zero, and back. */
static inline void load_tile(__m512 acc[MR][2], const float *c, int64_t ldc, int accumulate)
{
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        acc[r][0] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
    }
}

static inline void store_tile(__m512 acc[MR][2], float *c, int64_t ldc)
{
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        _mm512_storeu_ps(c + r * ldc, acc[r][0]);
        _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
    }
}

/* The chain in FMAs: per pair, the odd element's product first (as vdpbf16ps), each widened
 * exactly (a bf16 is the top half of its fp32), no flushing. */
static void exact_6x32(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc,
                       int accumulate)
{
    const __m512i hi_mask = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 acc[MR][2];
    load_tile(acc, c, ldc, accumulate);
    for (int64_t p = 0; p < kp; p++) {
        const __m512i w0 = _mm512_load_si512(b), w1 = _mm512_load_si512(b + 16);
        const __m512 b0o = _mm512_castsi512_ps(_mm512_and_si512(w0, hi_mask));
        const __m512 b0e = _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16));
        const __m512 b1o = _mm512_castsi512_ps(_mm512_and_si512(w1, hi_mask));
        const __m512 b1e = _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16));
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            const __m512i w = _mm512_set1_epi32((int)a[r]);
            const __m512 ao = _mm512_castsi512_ps(_mm512_and_si512(w, hi_mask));
            const __m512 ae = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
            acc[r][0] = _mm512_fmadd_ps(ae, b0e, _mm512_fmadd_ps(ao, b0o, acc[r][0]));
            acc[r][1] = _mm512_fmadd_ps(ae, b1e, _mm512_fmadd_ps(ao, b1o, acc[r][1]));
        }
        a += MR;
        b += NR;
    }
    store_tile(acc, c, ldc);
}

/* The next tile to the right is usually next: fetch its C rows early (as the fp32 kernel). */
static inline __attribute__((always_inline)) void prefetch_next_tile(const float *c, int64_t ldc)
{
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        const uintptr_t next = (uintptr_t)(c + r * ldc) + NR * sizeof(float);
        _mm_prefetch((const char *)next, _MM_HINT_T0);
        _mm_prefetch((const char *)(next + 64), _MM_HINT_T0);
    }
}

/* The vdpbf16ps chains over kp pairs, added to acc: row r's pair p is the 32-bit word at
 * a + r * row_step + p * pair_step (16-bit units): a packed panel (2, 2 MR) or A's rows where
 * they lie (lda, 2; rows 0-2 and 3-5 off two pointers, so that each load is one address). */
static inline __attribute__((always_inline)) void dot_chains(__m512 acc[MR][2], int64_t kp,
                                                            const uint16_t *a, int64_t row_step,
                                                            int64_t pair_step, const uint32_t *b)
{
    const uint16_t *a3 = a + 3 * row_step;
    for (int64_t p = 0; p < kp; p++) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            int32_t w;
            memcpy(&w, r < 3 ? a + r * row_step : a3 + (r - 3) * row_step, sizeof w);
            const __m512bh ar = (__m512bh)_mm512_set1_epi32(w);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
        }
        a += pair_step;
        a3 += pair_step;
        b += NR;
    }
}

/* vdpbf16ps: one instruction per row, 16 columns and one pair. The driver calls it only where
 * conditions (i) and (ii) hold; a tile it continues from must meet (iii), else the exact kernel
 * runs (checked on the loaded accumulators, a few instructions per tile and depth block). */
static void dot_6x32(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc,
                     int accumulate)
{
    __m512 acc[MR][2];
    load_tile(acc, c, ldc, accumulate);
    if (accumulate) {
        __mmask16 bad = 0;
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++)
            bad |= not_multiple_lanes(acc[r][0]) | not_multiple_lanes(acc[r][1]);
        if (bad) {
            exact_6x32(kp, a, b, c, ldc, accumulate);
            return;
        }
    }
    prefetch_next_tile(c, ldc);
    dot_chains(acc, kp, (const uint16_t *)(const void *)a, 2, 2 * MR, b);
    store_tile(acc, c, ldc);
}

/* fx_bf16_pair_kernels.dot_rows */
static void dot_rows_6x32(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b,
                          float *c, int64_t ldc)
{
    __m512 acc[MR][2];
    load_tile(acc, c, ldc, 0);
    prefetch_next_tile(c, ldc);
    dot_chains(acc, kp, a, lda, 2, b);
    store_tile(acc, c, ldc);
}

/* 16 sums rounded to bf16 by fx_bf16_round16, the rounding of fx_cvt_f32_to_bf16_avx512bf16;
 * with bias (16 values, or NULL), h16_bias.h's pass on them: widened back, the bias added
 * under the ADD NaN rule, rounded again */
static inline __attribute__((always_inline)) __m256i round_bias16(__m512 v, const float *bias)
{
    __m256i h = fx_bf16_round16(v, fx_bf16_special_lanes(v) != 0);
    if (!bias) return h;
    const __m512 t = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    const __m512 r = fx_f32_add_nf16(t, _mm512_loadu_ps(bias));
    return fx_bf16_round16(r, fx_bf16_special_lanes(r) != 0);
}

/* fx_bf16_pair_kernels.dot_rows_bf16 */
static void dot_rows_bf16_6x32(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b,
                               uint16_t *dst, int64_t ldd, const float *bias)
{
    __m512 acc[MR][2];
    load_tile(acc, NULL, 0, 0);
    dot_chains(acc, kp, a, lda, 2, b);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        const __m256i h0 = round_bias16(acc[r][0], bias);
        const __m256i h1 = round_bias16(acc[r][1], bias ? bias + 16 : NULL);
        _mm512_storeu_si512((void *)(dst + r * ldd),
                            _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1));
    }
}

/* fx_bf16_pair_kernels.pack_a_cols: per pair, the panel's values of two columns (masked to
 * its mr rows) interleaved into mr words */
static void pack_a_cols_avx512(uint32_t *dst, const uint16_t *a, int64_t ld, int64_t kp, int mr)
{
    const __mmask8 m = (__mmask8)((1u << mr) - 1u);
    for (int64_t q = 0; q < kp; q++) {
        const __m128i c0 = _mm_maskz_loadu_epi16(m, a + 2 * q * ld);
        const __m128i c1 = _mm_maskz_loadu_epi16(m, a + (2 * q + 1) * ld);
        const __m256i w =
            _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(c0, c1)),
                                    _mm_unpackhi_epi16(c0, c1), 1);
        _mm256_mask_storeu_epi32(dst + q * mr, m, w);
    }
}

/* fx_bf16_minkey_fn in 32 lanes of 16 bits: the smallest magnitude less one, unsigned, so
 * that a zero (and a masked-off lane, loaded as 0) wraps to 0xFFFF and never wins; the key is
 * that magnitude's exponent field (the shift is monotone, so the smallest field is the
 * smallest magnitude's) */
uint32_t fx_bf16_minkey_avx512(const uint16_t *x, int64_t n)
{
    const __m512i mag_mask = _mm512_set1_epi16(0x7FFF), one = _mm512_set1_epi16(1);
    __m512i m = _mm512_set1_epi16(-1);
    for (int64_t i = 0; i < n; i += 32) {
        const __mmask32 k = n - i >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (n - i)) - 1u);
        const __m512i mag = _mm512_and_si512(fx_load_w32(x + i, k), mag_mask);
        m = _mm512_min_epu16(m, _mm512_sub_epi16(mag, one));
    }
    __m256i h = _mm256_min_epu16(_mm512_castsi512_si256(m), _mm512_extracti64x4_epi64(m, 1));
    __m128i q = _mm_min_epu16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    const uint32_t least = (uint32_t)_mm_extract_epi16(_mm_minpos_epu16(q), 0);
    return least == 0xFFFFu ? 0x7FFFu : (least + 1u) >> 7;
}

/* Two B rows into pair words: dst[2j + t] = (t ? r1 : r0)[j]. */
static void interleave_avx512(uint16_t *dst, const uint16_t *r0, const uint16_t *r1, int64_t n)
{
    fx_interleave16_avx512(dst, r0, r1, n);
}

static const fx_bf16_pair_kernels pairs_avx512bf16 = {
    .dot = dot_6x32, .exact = exact_6x32, .minkey = fx_bf16_minkey_avx512, .interleave = interleave_avx512,
    .dot_rows = dot_rows_6x32, .dot_rows_bf16 = dot_rows_bf16_6x32,
    .bf16_cvt = fx_cvt_f32_to_bf16_avx512bf16, .pack_a_cols = pack_a_cols_avx512,
};

/* kc: the A micro-panel (6 x 512 bf16, 6 KiB) stays in L1 while B micro-panels (32 x 512 bf16,
 * 32 KiB) stream from the packed B block (512 x 512 bf16, 512 KiB) in L2. */
#define PAIR_PARAMS(exact)                                                                       \
    {.mr = MR, .nr = NR, .kc = 512, .mc = 1200, .nc = 512, .min_par_work = 1 << 21,             \
     .pack_rows = fx_f32_pack_rows_avx512, .pairs = &pairs_avx512bf16, .force_exact = (exact)}
static const fx_f32_gemm_params gemm_pairs = PAIR_PARAMS(0);
static const fx_f32_gemm_params gemm_pairs_exact = PAIR_PARAMS(1);

static atomic_int dot_enabled = 1;

void fx_bf16_dot_set_enabled(int on) { atomic_store_explicit(&dot_enabled, on != 0, memory_order_relaxed); }

int fx_bf16_dot_enabled(void) { return atomic_load_explicit(&dot_enabled, memory_order_relaxed); }

int fx_bf16_matmul_avx512bf16(const fx_op_call *c)
{
    /* The [MATMUL][BF16] slot is called with bf16 operands only (both inputs bf16: the
     * dispatcher and the convolution); the pair GEMM refuses anything else (FX_EUNSUPPORTED). */
    const int on = atomic_load_explicit(&dot_enabled, memory_order_relaxed);
    return fx_f32_gemm(on ? &gemm_pairs : &gemm_pairs_exact, c);
}
