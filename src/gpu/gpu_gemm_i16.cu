// The exact integer GEMM of the CUDA backend (FLEX16_5, DFP16): out[M,N] = a[M,K] x b[K,N] as
// the exact int64 sums of the int16 x int16 products (docs/formats.md), so the result is the CPU's
// bit for bit and does not depend on the blocking.
//
// Two schemes, both exact, so they give the same bits and the choice is only about speed:
//
// (1) The int8 tensor-core split (fx_gk_matmul_i16_tc, the default for all but small products).
//     GPUs have no int16 tensor cores, and cuBLAS's int8 GEMM multiplies signed bytes only. A
//     mantissa m in [-32768, 32767] is written as m = 256*h + l + 128 with h = m >> 8 and
//     l = (m & 255) - 128, both in [-128, 127]: the offset 128 is what lets two signed bytes
//     cover the whole int16 range (a plain signed split would need h = 128 for m >= 32640).
//     With a' = m - 128 = 256h + l,
//       sum_k a_k b_k = sum a'b' + 128 (sum_k a_k) + 128 (sum_k b_k) - 16384 K,
//       sum a'b'      = 65536 (Ah.Bh) + 256 (Ah.Bl + Al.Bh) + Al.Bl,
//     four int8 GEMMs with int32 accumulation (the two cross terms summed into one int32
//     buffer), row sums of A and column sums of B taken by the split kernels, and an int64
//     combination. Exactness: every int8 product is at most 2^14 in magnitude, so a K chunk of
//     at most 2^15 keeps every int32 partial sum, in whatever order cuBLAS adds them, within
//     2^29 (2^30 for the buffer holding both cross terms); longer K is summed chunk by chunk
//     into the int64 output. Zero padding (h = l = 0) of K to a multiple of 16 and of M and N
//     to multiples of 16 (cuBLAS's int8 kernels want aligned shapes) adds nothing to sum a'b'.
//     Cost: 4 int8 passes over 2MNK operations, so at best a quarter of the int8 rate.
// (2) Plain IMAD on the CUDA cores (fx_gk_matmul_i16_imad, small products, where the split's
//     eight launches and its buffers cost more than the arithmetic): int16 x int16 products in
//     int32 (|p| <= 2^30, even for -32768, which the format excludes but the CPU kernels still
//     sum exactly), each added to an int64 accumulator.
// dp2a (16-bit x 8-bit on the CUDA cores) was not built: it needs the same split at SIMT speed.
// bench/bench_gpu_gemm measures both schemes against cuBLAS fp16, bf16 and int8.
//
// IMAD tiling: a 64 x 64 output tile per block of 16 x 16 threads, each thread owning a 4 x 4 grid
// of outputs (rows ty + 16r, columns tx + 16c, so that a warp reads consecutive shared-memory
// words), K in steps of 32 staged through shared memory as int32. Operands have any strides
// (transposed views cost nothing); out-of-range elements load as 0, which adds nothing to an
// exact sum. The epilogue stores the int64 sums and reduces their largest magnitude into the
// write path's statistics (one atomic per warp), so the write needs no extra pass.
#include "gpu_common.cuh"

#define FX_G_BM 64
#define FX_G_BN 64
#define FX_G_BK 32
#define FX_G_TY 16
#define FX_G_TX 16

__global__ void __launch_bounds__(FX_G_TX *FX_G_TY)
    fx_k_gemm_i16(const int16_t *__restrict__ a, int64_t sam, int64_t sak,
                  const int16_t *__restrict__ b, int64_t sbk, int64_t sbn, int64_t M, int64_t N,
                  int64_t K, int64_t *__restrict__ out, fx_dstage_stats *st)
{
    // +1 column: the transposed fill order below writes down columns without bank conflicts
    __shared__ int32_t As[FX_G_BK][FX_G_BM + 1]; // As[k][m]
    __shared__ int32_t Bs[FX_G_BK][FX_G_BN + 1]; // Bs[k][n]
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * FX_G_TX + tx;
    const int64_t m0 = (int64_t)blockIdx.y * FX_G_BM, n0 = (int64_t)blockIdx.x * FX_G_BN;

    int64_t acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) acc[r][c] = 0;

    for (int64_t k0 = 0; k0 < K; k0 += FX_G_BK) {
        // 64 x 32 elements of each operand, 8 per thread. Consecutive threads read along the
        // operand's unit-stride dimension when it has one (coalesced global loads).
        for (int l = tid; l < FX_G_BM * FX_G_BK; l += FX_G_TX * FX_G_TY) {
            int kk = l / FX_G_BM, mm = l % FX_G_BM;
            if (sak == 1) { kk = l % FX_G_BK; mm = l / FX_G_BK; }
            const int64_t gm = m0 + mm, gka = k0 + kk;
            As[kk][mm] = (gm < M && gka < K) ? (int32_t)a[gm * sam + gka * sak] : 0;
            int kb = l / FX_G_BN, nn = l % FX_G_BN;
            if (sbn != 1 && sbk == 1) { kb = l % FX_G_BK; nn = l / FX_G_BK; }
            const int64_t gn = n0 + nn, gkb = k0 + kb;
            Bs[kb][nn] = (gn < N && gkb < K) ? (int32_t)b[gkb * sbk + gn * sbn] : 0;
        }
        __syncthreads();
#pragma unroll 4
        for (int kk = 0; kk < FX_G_BK; kk += 2) {
            int32_t a0[4], a1[4], b0[4], b1[4];
            for (int r = 0; r < 4; r++) {
                a0[r] = As[kk][ty + FX_G_TY * r];
                a1[r] = As[kk + 1][ty + FX_G_TY * r];
            }
            for (int c = 0; c < 4; c++) {
                b0[c] = Bs[kk][tx + FX_G_TX * c];
                b1[c] = Bs[kk + 1][tx + FX_G_TX * c];
            }
            for (int r = 0; r < 4; r++)
                for (int c = 0; c < 4; c++)
                    acc[r][c] += (int64_t)(a0[r] * b0[c]) + (int64_t)(a1[r] * b1[c]); // exact
        }
        __syncthreads();
    }

    unsigned long long mx = 0;
    for (int r = 0; r < 4; r++) {
        const int64_t gm = m0 + ty + FX_G_TY * r;
        for (int c = 0; c < 4; c++) {
            const int64_t gn = n0 + tx + FX_G_TX * c;
            if (gm < M && gn < N) {
                out[gm * N + gn] = acc[r][c];
                const unsigned long long av = fx_uabs64(acc[r][c]);
                mx = av > mx ? av : mx;
            }
        }
    }
    fx_stats_imax(st, mx);
}

static int fx_gk_matmul_i16_imad(const fx_dview *a, const fx_dview *b, int64_t *out,
                                 fx_dstage_stats *st, const char *func)
{
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    const int64_t gx = (N + FX_G_BN - 1) / FX_G_BN, gy = (M + FX_G_BM - 1) / FX_G_BM;
    if (gx > 2147483647 || gy > 65535)
        return fx_error(FX_EUNSUPPORTED, func, "matmul with M=%lld, N=%lld is too large for one "
                        "launch of the device integer GEMM (M <= %d)", (long long)M,
                        (long long)N, 65535 * FX_G_BM);
    dim3 grid((unsigned)gx, (unsigned)gy), block(FX_G_TX, FX_G_TY);
    fx_k_gemm_i16<<<grid, block>>>((const int16_t *)a->base, a->strides[0], a->strides[1],
                                   (const int16_t *)b->base, b->strides[0], b->strides[1], M, N,
                                   K, out, st);
    return fx_gpu_launch_check(func, "gemm_i16");
}

// ---- the int8 tensor-core split -------------------------------------------------------------

// Split rows [R] of a K chunk of an int16 operand (element (r, k) at src[r*sr + (k0+k)*sk]) into
// the int8 halves h, l of the scheme above, row-major [rp][kp] (rows padded to rp, kc to kp,
// with zeros), and add each row's sum of the original values to rowsum (int64 as unsigned, so the
// two's complement atomics wrap correctly). A 32 x 32 tile goes through shared memory so that
// both the reads (along whichever of r, k has unit stride) and the writes (along k) coalesce.
// Block: 32 x 8 threads; grid.x over rows, grid.y over k.
__global__ void __launch_bounds__(256)
    fx_k_split_i16(const int16_t *__restrict__ src, int64_t sr, int64_t sk, int64_t R,
                   int64_t rp, int64_t k0, int64_t kc, int64_t kp, int k_unit, int8_t *__restrict__ h,
                   int8_t *__restrict__ l, unsigned long long *__restrict__ rowsum)
{
    __shared__ int32_t t[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t r0 = (int64_t)blockIdx.x * 32, c0 = (int64_t)blockIdx.y * 32;
    for (int i = ty; i < 32; i += 8) {
        const int rr = k_unit ? i : tx, cc = k_unit ? tx : i;
        const int64_t r = r0 + rr, c = c0 + cc;
        t[rr][cc] = (r < R && c < kc) ? (int32_t)src[r * sr + (k0 + c) * sk] : 0;
    }
    __syncthreads();
    for (int i = ty; i < 32; i += 8) { // one warp per row: the row sum is one atomic per warp
        const int64_t r = r0 + i, c = c0 + tx;
        const int32_t m = t[i][tx];
        const bool real = r < R && c < kc;
        if (r < rp && c < kp) {
            h[r * kp + c] = real ? (int8_t)(m >> 8) : 0;
            l[r * kp + c] = real ? (int8_t)((m & 255) - 128) : 0;
        }
        int32_t sum = real ? m : 0;
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
        if (tx == 0 && r < R && sum) atomicAdd(&rowsum[r], (unsigned long long)(long long)sum);
    }
}

// out[m][n] = (first ? 0 : out) + 65536 hh + 256 x + ll (+ on the last chunk the offset terms
// 128 ra[m] + 128 cb[n] - 16384 K, and the statistics of the finished sums). hh, x, ll are
// [Mp][np] (padded rows).
__global__ void fx_k_split_combine(const int32_t *__restrict__ hh, const int32_t *__restrict__ x,
                                   const int32_t *__restrict__ ll, const unsigned long long *ra,
                                   const unsigned long long *cb, int64_t M, int64_t N, int64_t np,
                                   int64_t K,
                                   int first, int last, int64_t *__restrict__ out,
                                   fx_dstage_stats *st)
{
    unsigned long long mx = 0;
    const int64_t n_all = M * N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_all;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = i / N, n = i - m * N, j = m * np + n;
        int64_t v = (int64_t)hh[j] * 65536 + (int64_t)x[j] * 256 + (int64_t)ll[j];
        if (!first) v += out[i];
        if (last) {
            v += 128 * ((long long)ra[m] + (long long)cb[n]) - 16384 * K;
            const unsigned long long av = fx_uabs64(v);
            mx = av > mx ? av : mx;
        }
        out[i] = v;
    }
    if (last) fx_stats_imax(st, mx);
}

static int fx_gk_i16_path = FX_GK_I16_AUTO;
static int64_t fx_gk_i16_chunk = FX_GK_I16_TC_CHUNK;

extern "C" void fx_gk_matmul_i16_set_path(int path) { fx_gk_i16_path = path; }
extern "C" void fx_gk_matmul_i16_set_chunk(int64_t k)
{
    k = k / 16 * 16;
    fx_gk_i16_chunk = (k >= 16 && k <= FX_GK_I16_TC_CHUNK) ? k : FX_GK_I16_TC_CHUNK;
}

static int64_t fx_round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

static int fx_gk_split_launch(const fx_dview *v, int rows_dim, int64_t rp, int64_t k0, int64_t kc,
                              int64_t kp, int8_t *h, int8_t *l, unsigned long long *rowsum,
                              const char *func)
{
    const int64_t R = v->shape[rows_dim], sr = v->strides[rows_dim], sk = v->strides[1 - rows_dim];
    const int64_t gx = (rp + 31) / 32, gy = (kp + 31) / 32;
    dim3 grid((unsigned)gx, (unsigned)gy), block(32, 8);
    fx_k_split_i16<<<grid, block>>>((const int16_t *)v->base, sr, sk, R, rp, k0, kc, kp,
                                    sk == 1 || R == 1, h, l, rowsum);
    return fx_gpu_launch_check(func, "split_i16");
}

static int fx_gk_matmul_i16_tc(const fx_dview *a, const fx_dview *b, int64_t *out,
                               fx_dstage_stats *st, const char *func)
{
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    const int64_t chunk = fx_gk_i16_chunk, kp_max = fx_round_up(K < chunk ? K : chunk, 16);
    const int64_t mp = fx_round_up(M, 16), np = fx_round_up(N, 16);
    // one allocation, each piece 256-byte aligned (cuBLAS's int8 kernels want aligned rows)
    const size_t sa = (size_t)fx_round_up(mp * kp_max, 256),
                 sb = (size_t)fx_round_up(np * kp_max, 256),
                 sp = (size_t)fx_round_up(mp * np * 4, 256);
    const size_t bytes = 2 * sa + 2 * sb + 3 * sp + (size_t)fx_round_up((M + N) * 8, 256);
    char *buf = NULL;
    int rc = fx_gr_malloc(bytes, (void **)&buf, func);
    if (rc) return rc;
    int8_t *ah = (int8_t *)buf, *al = ah + sa, *bh = al + sa, *bl = bh + sb;
    int32_t *phh = (int32_t *)(bl + sb), *px = (int32_t *)((char *)phh + sp),
            *pll = (int32_t *)((char *)px + sp);
    unsigned long long *ra = (unsigned long long *)((char *)pll + sp), *cb = ra + M;
    rc = fx_gr_memset0(ra, (size_t)(M + N) * 8, func);
    for (int64_t k0 = 0; k0 < K && !rc; k0 += chunk) {
        const int64_t kc = K - k0 < chunk ? K - k0 : chunk, kp = fx_round_up(kc, 16);
        rc = fx_gk_split_launch(a, 0, mp, k0, kc, kp, ah, al, ra, func);
        if (!rc) rc = fx_gk_split_launch(b, 1, np, k0, kc, kp, bh, bl, cb, func);
        if (!rc) rc = fx_gr_gemm_s8_tn(np, mp, kp, bh, ah, 0, phh, func);
        if (!rc) rc = fx_gr_gemm_s8_tn(np, mp, kp, bl, ah, 0, px, func);
        if (!rc) rc = fx_gr_gemm_s8_tn(np, mp, kp, bh, al, 1, px, func);
        if (!rc) rc = fx_gr_gemm_s8_tn(np, mp, kp, bl, al, 0, pll, func);
        if (!rc) {
            fx_k_split_combine<<<fx_gpu_blocks(M * N), FX_GPU_THREADS>>>(
                phh, px, pll, ra, cb, M, N, np, K, k0 == 0, k0 + kc >= K, out, st);
            rc = fx_gpu_launch_check(func, "split_combine");
        }
    }
    // the work above is still queued: the buffer goes back to the cache, and whoever gets it
    // next queues their work after this (one stream)
    fx_gr_free(buf);
    return rc;
}

// Below this many multiply-adds the IMAD kernel wins: the split's eight launches cost a fixed
// ~50 microseconds. On the H100 (bench/bench_gpu_gemm, both schemes): 256^3 = 2^24 took 0.042
// ms by IMAD and 0.054 ms split; 512^3 = 2^27 0.083 and 0.057 ms.
#define FX_GK_I16_TC_MIN_WORK ((int64_t)1 << 26)

extern "C" int fx_gk_matmul_i16(const fx_dview *a, const fx_dview *b, int64_t *out,
                                fx_dstage_stats *st, const char *func)
{
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    if (M <= 0 || N <= 0) return FX_OK;
    int path = fx_gk_i16_path;
    if (path == FX_GK_I16_AUTO)
        path = (double)M * (double)N * (double)K >= (double)FX_GK_I16_TC_MIN_WORK ? FX_GK_I16_TC
                                                                                 : FX_GK_I16_IMAD;
    // K = 0 (all sums empty) and grids beyond the split's launch shape go to the IMAD kernel
    if (path == FX_GK_I16_TC && K > 0 && (M + 31) / 32 <= 2147483647 && (N + 31) / 32 <= 2147483647)
        return fx_gk_matmul_i16_tc(a, b, out, st, func);
    return fx_gk_matmul_i16_imad(a, b, out, st, func);
}
