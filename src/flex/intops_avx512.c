/* AVX-512 integer kernels of the shared-exponent formats: the exact int16 GEMM micro-kernels.
 * Two variants share one body: vpdpwssd (AVX512_VNNI, installed only when the CPU has it) and
 * vpmaddwd + vpaddd (AVX-512BW). Exactness: see gemm_i16.h (split B, int32 chains of at most
 * 255 pair steps, widened to int64 at the end of every K block). */
#include "gemm_i16.h"

#include <immintrin.h>

#define FX_MR 6  /* rows of the register tile */
#define FX_NR 32 /* columns: two zmm of 16 int32 lanes */

#define FX_ALWAYS_INLINE inline __attribute__((always_inline))

static FX_ALWAYS_INLINE __m512i fx_dot_pairs(__m512i acc, __m512i a, __m512i b, const int vnni)
{
    return vnni ? _mm512_dpwssd_epi32(acc, a, b) : _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
}

/* The accumulators are indexed with constants only (fully unrolled loops), so they live in
 * registers: 6 rows x 2 column vectors x {hi, lo} = 24 zmm, plus 4 for B and 1 broadcast. */
static FX_ALWAYS_INLINE void fx_ukr_body(int64_t kp, const int32_t *ap, const int16_t *bp,
                                         int64_t *c, int64_t ldc, int m, int n, int accumulate,
                                         const int vnni)
{
    __m512i h[FX_MR][2], l[FX_MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < FX_MR; i++) h[i][0] = h[i][1] = l[i][0] = l[i][1] = _mm512_setzero_si512();

    for (int64_t p = 0; p < kp; p++) {
        const __m512i bh0 = _mm512_load_si512((const void *)bp);
        const __m512i bh1 = _mm512_load_si512((const void *)(bp + 32));
        const __m512i bl0 = _mm512_load_si512((const void *)(bp + 64));
        const __m512i bl1 = _mm512_load_si512((const void *)(bp + 96));
        bp += 4 * FX_NR;
#pragma GCC unroll 6
        for (int i = 0; i < FX_MR; i++) {
            const __m512i ai = _mm512_set1_epi32(ap[i]);
            h[i][0] = fx_dot_pairs(h[i][0], ai, bh0, vnni);
            h[i][1] = fx_dot_pairs(h[i][1], ai, bh1, vnni);
            l[i][0] = fx_dot_pairs(l[i][0], ai, bl0, vnni);
            l[i][1] = fx_dot_pairs(l[i][1], ai, bl1, vnni);
        }
        ap += FX_MR;
    }

    /* Spill the int32 chains with constant indices, then widen only the valid part. */
    int32_t hs[FX_MR][FX_NR] __attribute__((aligned(64)));
    int32_t ls[FX_MR][FX_NR] __attribute__((aligned(64)));
#pragma GCC unroll 6
    for (int i = 0; i < FX_MR; i++) {
        _mm512_store_si512((void *)&hs[i][0], h[i][0]);
        _mm512_store_si512((void *)&hs[i][16], h[i][1]);
        _mm512_store_si512((void *)&ls[i][0], l[i][0]);
        _mm512_store_si512((void *)&ls[i][16], l[i][1]);
    }
    for (int i = 0; i < m; i++) {
        int64_t *ci = c + i * ldc;
        for (int j = 0; j < n; j += 8) {
            const __mmask8 k = n - j >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - j)) - 1);
            const __m512i sh = _mm512_cvtepi32_epi64(_mm256_load_si256((const void *)&hs[i][j]));
            const __m512i sl = _mm512_cvtepi32_epi64(_mm256_load_si256((const void *)&ls[i][j]));
            __m512i s = _mm512_add_epi64(_mm512_slli_epi64(sh, 8), sl); /* 256*Sh + Sl */
            if (accumulate) s = _mm512_add_epi64(s, _mm512_maskz_loadu_epi64(k, ci + j));
            _mm512_mask_storeu_epi64(ci + j, k, s);
        }
    }
}

static void fx_ukr_avx512vnni(int64_t kp, const int32_t *ap, const int16_t *bp, int64_t *c,
                              int64_t ldc, int m, int n, int accumulate)
{
    fx_ukr_body(kp, ap, bp, c, ldc, m, n, accumulate, 1);
}

static void fx_ukr_avx512bw(int64_t kp, const int32_t *ap, const int16_t *bp, int64_t *c,
                            int64_t ldc, int m, int n, int accumulate)
{
    fx_ukr_body(kp, ap, bp, c, ldc, m, n, accumulate, 0);
}

static int fx_small_matmul(const fx_op_call *c)
{
    const int64_t M = c->in[0].shape[0], K = c->in[0].shape[1], N = c->in[1].shape[1];
    return M * N * K < FX_FLEX_MATMUL_SIMD_MIN_MACS;
}

int fx_flex_matmul_avx512vnni(const fx_op_call *c)
{
    static const fx_gemm_i16_kernel k = {FX_MR, FX_NR, fx_ukr_avx512vnni};
    return fx_small_matmul(c) ? fx_flex_matmul_scalar(c) : fx_gemm_i16(c, &k);
}

int fx_flex_matmul_avx512bw(const fx_op_call *c)
{
    static const fx_gemm_i16_kernel k = {FX_MR, FX_NR, fx_ukr_avx512bw};
    return fx_small_matmul(c) ? fx_flex_matmul_scalar(c) : fx_gemm_i16(c, &k);
}

void fx_flex_install_intops_avx512(fx_backend *b, const fx_cpu_features *cpu)
{
    fx_flex_set_kernel(b, FX_OP_MATMUL,
                       cpu->avx512vnni ? fx_flex_matmul_avx512vnni : fx_flex_matmul_avx512bw);
}
