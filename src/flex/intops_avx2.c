/* AVX2 integer kernels of the shared-exponent formats: the exact int16 GEMM micro-kernels with
 * vpmaddwd + vpaddd. Exactness: see gemm_i16.h (fast kernel: norm-bounded int32 chains folded
 * into Lo/Hi words; split kernel: split B, int32 chains of at most 255 pair steps, widened to
 * int64 at the end of every K block). */
#include "gemm_i16.h"

#include <immintrin.h>
#include <string.h>

#define FX_MR 6  /* rows of the register tile */
#define FX_NR 16 /* columns: two halves of one ymm of 8 int32 lanes each */
#define FX_HALF 8

/* Lanes j < n of the two int64 quarters of an 8-column half row (all ones where valid). */
static inline void fx_row_masks(int n, __m256i *k0, __m256i *k1)
{
    const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
    *k0 = _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), lane);
    *k1 = _mm256_cmpgt_epi64(_mm256_set1_epi64x(n - 4), lane);
}

/* The range of the int64 values a kernel writes on a last K block: signed maximum and minimum
 * per lane (AVX2 has no 64-bit max, min or abs). Both start at 0, which cannot change the
 * result max |v| >= 0, so lanes outside the tile may be cleared to 0 instead of skipped. */
typedef struct fx_range64 {
    __m256i hi, lo;
} fx_range64;

static inline void fx_range64_add(fx_range64 *r, __m256i t)
{
    r->hi = _mm256_blendv_epi8(r->hi, t, _mm256_cmpgt_epi64(t, r->hi));
    r->lo = _mm256_blendv_epi8(r->lo, t, _mm256_cmpgt_epi64(r->lo, t));
}

/* *amax = max(*amax, max |v| over the range's lanes); |INT64_MIN| = 2^63 is representable. */
static inline void fx_range64_finish(const fx_range64 *r, uint64_t *amax)
{
    int64_t hi[4] __attribute__((aligned(32))), lo[4] __attribute__((aligned(32)));
    _mm256_store_si256((void *)hi, r->hi);
    _mm256_store_si256((void *)lo, r->lo);
    uint64_t m = *amax;
    for (int q = 0; q < 4; q++) {
        const uint64_t p = (uint64_t)hi[q], n = 0u - (uint64_t)lo[q]; /* hi >= 0 >= lo */
        m = p > m ? p : m;
        m = n > m ? n : m;
    }
    *amax = m;
}

/* C half row (accumulate ? C : 0) + t, for the int64 quarters t0 (columns 0..3) and t1 (4..7)
 * of its first n (1..8) columns; when track is set, r takes the values written. (r is always a
 * kernel's local range, never NULL: with a pointer that may be NULL GCC kept the range in
 * memory, a load and store per update.) */
static inline void fx_store_row(int64_t *ci, __m256i t0, __m256i t1, __m256i k0, __m256i k1,
                                int n, int accumulate, int track, fx_range64 *r)
{
    long long *d0 = (long long *)ci, *d1 = (long long *)(ci + 4);
    if (n == FX_HALF) { /* a whole half: plain moves (masked stores are microcoded on AMD) */
        if (accumulate) {
            t0 = _mm256_add_epi64(t0, _mm256_loadu_si256((const void *)d0));
            t1 = _mm256_add_epi64(t1, _mm256_loadu_si256((const void *)d1));
        }
        _mm256_storeu_si256((void *)d0, t0);
        _mm256_storeu_si256((void *)d1, t1);
        if (track) {
            fx_range64_add(r, t0);
            fx_range64_add(r, t1);
        }
        return;
    }
    if (accumulate) t0 = _mm256_add_epi64(t0, _mm256_maskload_epi64(d0, k0));
    _mm256_maskstore_epi64(d0, k0, t0);
    if (track) fx_range64_add(r, _mm256_and_si256(t0, k0)); /* columns beyond n count as 0 */
    if (n <= 4) return;
    if (accumulate) t1 = _mm256_add_epi64(t1, _mm256_maskload_epi64(d1, k1));
    _mm256_maskstore_epi64(d1, k1, t1);
    if (track) fx_range64_add(r, _mm256_and_si256(t1, k1));
}

/* Ask for the tile's C lines (m rows of n int64) before the K loop: the int64 stage is far
 * larger than the caches, so without this every row's store (and load, when accumulating)
 * missed and stalled at the end of the kernel; the chain loop is long enough to hide the
 * latency. (perf, 1024^3 flex16_5: 29 % of the fast kernel's samples sat on two C stores.) */
static inline void fx_prefetch_c(const int64_t *c, int64_t ldc, int m, int n)
{
    for (int i = 0; i < m; i++) {
        const char *row = (const char *)(c + i * ldc), *end = (const char *)(c + i * ldc + n);
        for (const char *p = row; p < end; p += 64) __builtin_prefetch(p, 1, 3);
        __builtin_prefetch(end - 1, 1, 3);
    }
}

/* Columns of half h of a tile with n valid columns (0: the half is empty). */
static inline int fx_half_cols(int n, int h)
{
    const int left = n - FX_HALF * h;
    return left <= 0 ? 0 : left < FX_HALF ? left : FX_HALF;
}

/* Split kernel, one half (8 columns) of the 16-column split panel at a time: 6 rows x {hi, lo}
 * = 12 ymm accumulators, 2 for B, 1 broadcast, 1 product, all 16 ymm. The split panel of pair
 * p holds the 16 high parts at bp + 64p and the 16 low parts at bp + 64p + 32 (gemm_i16.h), so
 * half h reads 16 int16 at + 16h of each. */
static void fx_ukr_avx2(int64_t kp, const int32_t *ap0, const int16_t *bp0, int64_t *c,
                        int64_t ldc, int m, int n, int accumulate, uint64_t *amax)
{
    fx_range64 range = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    fx_prefetch_c(c, ldc, m, n);
    for (int half = 0; half < 2; half++) {
        const int nh = fx_half_cols(n, half);
        if (nh == 0) break;
        const int32_t *ap = ap0;
        const int16_t *bp = bp0 + 2 * FX_HALF * half;
        __m256i h[FX_MR], l[FX_MR];
#pragma GCC unroll 6
        for (int i = 0; i < FX_MR; i++) h[i] = l[i] = _mm256_setzero_si256();

        for (int64_t p = 0; p < kp; p++) {
            const __m256i bh = _mm256_load_si256((const void *)bp);
            const __m256i bl = _mm256_load_si256((const void *)(bp + 2 * FX_NR));
            bp += 4 * FX_NR;
#pragma GCC unroll 6
            for (int i = 0; i < FX_MR; i++) {
                const __m256i ai = _mm256_set1_epi32(ap[i]);
                h[i] = _mm256_add_epi32(h[i], _mm256_madd_epi16(ai, bh));
                l[i] = _mm256_add_epi32(l[i], _mm256_madd_epi16(ai, bl));
            }
            ap += FX_MR;
        }

        /* through memory: indexing h[i] with the run-time i < m below would make GCC keep
         * the accumulators on the stack inside the loop above */
        int32_t hs[FX_MR][FX_HALF] __attribute__((aligned(32)));
        int32_t ls[FX_MR][FX_HALF] __attribute__((aligned(32)));
#pragma GCC unroll 6
        for (int i = 0; i < FX_MR; i++) {
            _mm256_store_si256((void *)hs[i], h[i]);
            _mm256_store_si256((void *)ls[i], l[i]);
        }
        __m256i k0, k1;
        fx_row_masks(nh, &k0, &k1);
        for (int i = 0; i < m; i++) {
            __m256i t[2];
            for (int q = 0; q < 2; q++) {
                const __m256i sh = _mm256_cvtepi32_epi64(_mm_load_si128((const void *)&hs[i][4 * q]));
                const __m256i sl = _mm256_cvtepi32_epi64(_mm_load_si128((const void *)&ls[i][4 * q]));
                t[q] = _mm256_add_epi64(_mm256_slli_epi64(sh, 8), sl); /* 256*Sh + Sl */
            }
            fx_store_row(c + i * ldc + FX_HALF * half, t[0], t[1], k0, k1, nh, accumulate,
                         amax != NULL, &range);
        }
    }
    if (amax) fx_range64_finish(&range, amax);
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

/* s[2i + h] (row i, half h) += the products of `len` pairs (mod 2^32 per lane): 12
 * accumulators, 2 B vectors, 1 broadcast and 1 product fill the 16 ymm registers, and each
 * broadcast feeds two multiplies (a 6 x 8 tile spends one per multiply; the 16-column tile
 * measured ~20 % faster in the loop on a Zen 3, which issues two vpmaddwd per cycle). */
static inline void fx_fast_chain_avx2(__m256i s[2 * FX_MR], int64_t len, const int32_t **ap,
                                      const int16_t **bp)
{
    const int32_t *a = *ap;
    const int16_t *b = *bp;
    for (int64_t p = 0; p < len; p++) {
        const __m256i b0 = _mm256_load_si256((const void *)b);
        const __m256i b1 = _mm256_load_si256((const void *)(b + 2 * FX_HALF));
        b += 2 * FX_NR;
#pragma GCC unroll 6
        for (int i = 0; i < FX_MR; i++) {
            const __m256i ai = _mm256_set1_epi32(a[i]);
            s[2 * i] = fx_add_madd(s[2 * i], ai, b0);
            s[2 * i + 1] = fx_add_madd(s[2 * i + 1], ai, b1);
        }
        a += FX_MR;
    }
    *ap = a;
    *bp = b;
}

/* Fast kernel: plain B, one vpmaddwd + vpaddd per pair, row and half. The 12 accumulators run
 * on over the whole K block, modulo 2^32 (= Lo of gemm_i16.h). At a chain's end the chain's
 * exact value is d = s - s_prev (mod 2^32): |d| < 2^31, so the wrapped difference is d itself,
 * and Hi += floor(d / 2^16). A K block that is one chain needs neither: its sum is s. */
static void fx_fast_avx2(int64_t kp, int64_t chain, const int32_t *ap, const int16_t *bp,
                         int64_t *c, int64_t ldc, int m, int n, int accumulate, uint64_t *amax)
{
    __m256i s[2 * FX_MR];
#pragma GCC unroll 12
    for (int i = 0; i < 2 * FX_MR; i++) s[i] = _mm256_setzero_si256();
    fx_prefetch_c(c, ldc, m, n);
    const int64_t first = kp < chain ? kp : chain;
    fx_fast_chain_avx2(s, first, &ap, &bp);
    const int n0 = fx_half_cols(n, 0), n1 = fx_half_cols(n, 1);
    __m256i k00, k01, k10, k11;
    fx_row_masks(n0, &k00, &k01);
    fx_row_masks(n1, &k10, &k11);
    fx_range64 range = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    /* the values written are the int32 sums themselves (one chain, nothing accumulated): their
     * range is taken on the int32 vectors, 6 operations per row instead of 16 on the int64
     * quarters */
    const int range32 = amax && first == kp && !accumulate;
    if (first == kp) { /* one chain: every lane holds its exact sum */
        for (int i = 0; i < m; i++) {
            const __m256i s0 = s[2 * i], s1 = s[2 * i + 1];
            fx_store_row(c + i * ldc, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(s0)),
                         _mm256_cvtepi32_epi64(_mm256_extracti128_si256(s0, 1)), k00, k01, n0,
                         accumulate, amax && !range32, &range);
            if (n1)
                fx_store_row(c + i * ldc + FX_HALF,
                             _mm256_cvtepi32_epi64(_mm256_castsi256_si128(s1)),
                             _mm256_cvtepi32_epi64(_mm256_extracti128_si256(s1, 1)), k10, k11,
                             n1, accumulate, amax && !range32, &range);
        }
        if (range32) {
            /* lanes j >= n count as 0 (cleared by the column masks); rows i >= m are skipped */
            const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            const __m256i c0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n0), lane);
            const __m256i c1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n1), lane);
            __m256i hi = _mm256_setzero_si256(), lo = hi;
            for (int i = 0; i < m; i++) {
                const __m256i s0 = _mm256_and_si256(s[2 * i], c0);
                const __m256i s1 = _mm256_and_si256(s[2 * i + 1], c1);
                hi = _mm256_max_epi32(hi, _mm256_max_epi32(s0, s1));
                lo = _mm256_min_epi32(lo, _mm256_min_epi32(s0, s1));
            }
            /* the tile's int32 maximum and minimum in every lane, widened for fx_range64_finish */
            hi = _mm256_max_epi32(hi, _mm256_shuffle_epi32(hi, 0x4E));
            lo = _mm256_min_epi32(lo, _mm256_shuffle_epi32(lo, 0x4E));
            hi = _mm256_max_epi32(hi, _mm256_shuffle_epi32(hi, 0xB1));
            lo = _mm256_min_epi32(lo, _mm256_shuffle_epi32(lo, 0xB1));
            range.hi = _mm256_cvtepi32_epi64(_mm_max_epi32(_mm256_castsi256_si128(hi),
                                                           _mm256_extracti128_si256(hi, 1)));
            range.lo = _mm256_cvtepi32_epi64(_mm_min_epi32(_mm256_castsi256_si128(lo),
                                                           _mm256_extracti128_si256(lo, 1)));
        }
        if (amax) fx_range64_finish(&range, amax);
        return;
    }
    __m256i prev[2 * FX_MR], hi[2 * FX_MR]; /* s at the last chain end; Hi (in memory) */
    for (int i = 0; i < 2 * FX_MR; i++) {
        prev[i] = s[i];
        hi[i] = _mm256_srai_epi32(s[i], 16);
    }
    for (int64_t p0 = first; p0 < kp; p0 += chain) {
        fx_fast_chain_avx2(s, kp - p0 < chain ? kp - p0 : chain, &ap, &bp);
        for (int i = 0; i < 2 * FX_MR; i++) {
            const __m256i d = _mm256_sub_epi32(s[i], prev[i]);
            prev[i] = s[i];
            hi[i] = _mm256_add_epi32(hi[i], _mm256_srai_epi32(d, 16));
        }
    }
    /* T = 2^16 Hi + (uint32)(Lo - 2^16 Hi), exactly (gemm_i16.h) */
    for (int i = 0; i < m; i++)
        for (int half = 0; half < 2; half++) {
            const int nh = half ? n1 : n0;
            if (nh == 0) break;
            const __m256i hv = hi[2 * i + half];
            const __m256i r = _mm256_sub_epi32(s[2 * i + half], _mm256_slli_epi32(hv, 16));
            __m256i t[2];
            for (int q = 0; q < 2; q++) {
                const __m128i hh = q ? _mm256_extracti128_si256(hv, 1) : _mm256_castsi256_si128(hv);
                const __m128i rr = q ? _mm256_extracti128_si256(r, 1) : _mm256_castsi256_si128(r);
                t[q] = _mm256_add_epi64(_mm256_slli_epi64(_mm256_cvtepi32_epi64(hh), 16),
                                        _mm256_cvtepu32_epi64(rr));
            }
            fx_store_row(c + i * ldc + FX_HALF * half, t[0], t[1], half ? k10 : k00,
                         half ? k11 : k01, nh, accumulate, amax != NULL, &range);
        }
    if (amax) fx_range64_finish(&range, amax);
}

int fx_flex_matmul_avx2(const fx_op_call *c)
{
    /* Gates: the norm test on every product whose K block has at least 16 pairs. On AVX2 the
     * alternative is the split kernel (two vpmaddwd per pair), so with the SIMD packing the
     * norms pay even on the CNN's narrow products (N = 32, 64; M = 128 for the dense layers),
     * unlike on AVX-512 where the wrap kernel needs only 1.5. Measured on a Zen 3 EPYC (2
     * vCPUs) with flexpoint-train flex16_5 CNN epochs on 6400 images, two configurations at
     * once on the two cores, four pairs with the cores swapped in turn, mean s/epoch: 12.0
     * against 12.9 with M >= 256 and N >= 32, and 13.0 against 14.3 with the AVX-512 gates
     * (FX_GEMM_FAST_MIN_*). Below 16 pairs (conv1's 13-pair forward) the norms cost what the
     * fast kernel saves: bench_gemm_i16's conv1 forward 0.97-1.01x the split kernel's time,
     * whole epochs 11.5 against 11.6 s (within noise). */
    static const fx_gemm_i16_kernel k = {.mr = FX_MR, .nr = FX_NR, .ukr = fx_ukr_avx2,
                                          .fast = fx_fast_avx2,
                                          .pack = &fx_gemm_i16_pack_avx2_6x16,
                                          .fast_min_m = 1, .fast_min_n = 1, .fast_min_kp = 16,
                                          .equal_k_blocks = 1};
    const int64_t M = c->in[0].shape[0], K = c->in[0].shape[1], N = c->in[1].shape[1];
    if (!c->a_panels && !c->a_rows && !c->b_split && M * N * K < FX_FLEX_MATMUL_SIMD_MIN_MACS)
        return fx_flex_matmul_scalar(c);
    return fx_gemm_i16(c, &k);
}
