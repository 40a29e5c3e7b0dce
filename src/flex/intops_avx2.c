/* AVX2 integer kernels of the shared-exponent formats: the exact int16 GEMM micro-kernels with
 * vpmaddwd + vpaddd. Exactness: see gemm_i16.h (fast kernel: norm-bounded int32 chains folded
 * into Lo/Hi words; split kernel: split B, int32 chains of at most 255 pair steps, widened to
 * int64 at the end of every K block). */
#include "gemm_i16.h"

#include <immintrin.h>
#include <string.h>

#define FX_MR 6 /* rows of the register tile */
#define FX_NR 8 /* columns: one ymm of 8 int32 lanes */

/* 6 rows x {hi, lo} = 12 ymm accumulators, 2 for B, 1 broadcast, 1 product: all 16 ymm. */
static void fx_ukr_avx2(int64_t kp, const int32_t *ap, const int16_t *bp, int64_t *c,
                        int64_t ldc, int m, int n, int accumulate)
{
    __m256i h[FX_MR], l[FX_MR];
#pragma GCC unroll 6
    for (int i = 0; i < FX_MR; i++) h[i] = l[i] = _mm256_setzero_si256();

    for (int64_t p = 0; p < kp; p++) {
        const __m256i bh = _mm256_load_si256((const void *)bp);
        const __m256i bl = _mm256_load_si256((const void *)(bp + 16));
        bp += 4 * FX_NR;
#pragma GCC unroll 6
        for (int i = 0; i < FX_MR; i++) {
            const __m256i ai = _mm256_set1_epi32(ap[i]);
            h[i] = _mm256_add_epi32(h[i], _mm256_madd_epi16(ai, bh));
            l[i] = _mm256_add_epi32(l[i], _mm256_madd_epi16(ai, bl));
        }
        ap += FX_MR;
    }

    int32_t hs[FX_MR][FX_NR] __attribute__((aligned(32)));
    int32_t ls[FX_MR][FX_NR] __attribute__((aligned(32)));
#pragma GCC unroll 6
    for (int i = 0; i < FX_MR; i++) {
        _mm256_store_si256((void *)hs[i], h[i]);
        _mm256_store_si256((void *)ls[i], l[i]);
    }
    /* lanes j < n of the masks are all ones */
    const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
    const __m256i k0 = _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), lane);
    const __m256i k1 = _mm256_cmpgt_epi64(_mm256_set1_epi64x(n - 4), lane);
    for (int i = 0; i < m; i++) {
        int64_t *ci = c + i * ldc;
        for (int half = 0; half < 2; half++) {
            const __m256i k = half ? k1 : k0;
            if (half && n <= 4) break;
            const __m256i sh = _mm256_cvtepi32_epi64(_mm_load_si128((const void *)&hs[i][4 * half]));
            const __m256i sl = _mm256_cvtepi32_epi64(_mm_load_si128((const void *)&ls[i][4 * half]));
            __m256i s = _mm256_add_epi64(_mm256_slli_epi64(sh, 8), sl); /* 256*Sh + Sl */
            long long *dst = (long long *)(ci + 4 * half);
            if (accumulate) s = _mm256_add_epi64(s, _mm256_maskload_epi64(dst, k));
            _mm256_maskstore_epi64(dst, k, s);
        }
    }
}

/* acc += a0*b0 + a1*b1 per int32 lane (mod 2^32). The add is inline asm: GCC 12 otherwise
 * copies every accumulator once per step in the fast kernel's chain loop (6 register moves per
 * 12 vector operations), which costs as much as a third of the work. */
static inline __m256i fx_add_madd(__m256i acc, __m256i a, __m256i b)
{
    const __m256i prod = _mm256_madd_epi16(a, b);
    __asm__("vpaddd %1, %0, %0" : "+x"(acc) : "x"(prod));
    return acc;
}

/* Fast kernel: plain B, one vpmaddwd + vpaddd per pair and row; 6 int32 chain accumulators,
 * the tile's Lo/Hi words in memory, updated once per chain. */
static void fx_fast_avx2(int64_t kp, int64_t chain, const int32_t *ap, const int16_t *bp,
                         int64_t *c, int64_t ldc, int m, int n, int accumulate)
{
    int32_t lo[FX_MR][FX_NR] __attribute__((aligned(32)));
    int32_t hi[FX_MR][FX_NR] __attribute__((aligned(32)));
    memset(lo, 0, sizeof lo);
    memset(hi, 0, sizeof hi);

    for (int64_t p0 = 0; p0 < kp; p0 += chain) {
        const int64_t len = kp - p0 < chain ? kp - p0 : chain;
        __m256i s[FX_MR];
#pragma GCC unroll 6
        for (int i = 0; i < FX_MR; i++) s[i] = _mm256_setzero_si256();
        for (int64_t p = 0; p < len; p++) {
            const __m256i b = _mm256_load_si256((const void *)bp);
            bp += 2 * FX_NR;
#pragma GCC unroll 6
            for (int i = 0; i < FX_MR; i++)
                s[i] = fx_add_madd(s[i], _mm256_set1_epi32(ap[i]), b);
            ap += FX_MR;
        }
        /* the chain sums are exact (|d| < 2^31): Lo += d (mod 2^32), Hi += floor(d / 2^16) */
#pragma GCC unroll 6
        for (int i = 0; i < FX_MR; i++) {
            __m256i *pl = (__m256i *)lo[i], *ph = (__m256i *)hi[i];
            *pl = _mm256_add_epi32(*pl, s[i]);
            *ph = _mm256_add_epi32(*ph, _mm256_srai_epi32(s[i], 16));
        }
    }

    /* T = 2^16 Hi + (uint32)(Lo - 2^16 Hi), exactly (gemm_i16.h); lanes j < n of the masks */
    const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
    const __m256i k0 = _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), lane);
    const __m256i k1 = _mm256_cmpgt_epi64(_mm256_set1_epi64x(n - 4), lane);
    for (int i = 0; i < m; i++) {
        int64_t *ci = c + i * ldc;
        for (int half = 0; half < 2; half++) {
            const __m256i k = half ? k1 : k0;
            if (half && n <= 4) break;
            const __m128i h = _mm_load_si128((const void *)&hi[i][4 * half]);
            const __m128i l = _mm_load_si128((const void *)&lo[i][4 * half]);
            const __m128i r = _mm_sub_epi32(l, _mm_slli_epi32(h, 16));
            __m256i t = _mm256_add_epi64(_mm256_slli_epi64(_mm256_cvtepi32_epi64(h), 16),
                                         _mm256_cvtepu32_epi64(r));
            long long *dst = (long long *)(ci + 4 * half);
            if (accumulate) t = _mm256_add_epi64(t, _mm256_maskload_epi64(dst, k));
            _mm256_maskstore_epi64(dst, k, t);
        }
    }
}

int fx_flex_matmul_avx2(const fx_op_call *c)
{
    static const fx_gemm_i16_kernel k = {FX_MR, FX_NR, fx_ukr_avx2, fx_fast_avx2, NULL, NULL};
    const int64_t M = c->in[0].shape[0], K = c->in[0].shape[1], N = c->in[1].shape[1];
    if (!c->a_panels && !c->b_split && M * N * K < FX_FLEX_MATMUL_SIMD_MIN_MACS)
        return fx_flex_matmul_scalar(c);
    return fx_gemm_i16(c, &k);
}

void fx_flex_install_intops_avx2(fx_backend *b, const fx_cpu_features *cpu)
{
    (void)cpu;
    fx_flex_set_kernel(b, FX_OP_MATMUL, fx_flex_matmul_avx2);
}
