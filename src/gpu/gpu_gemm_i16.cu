// The exact integer GEMM of the CUDA backend (FLEX16_5, DFP16): out[M,N] = a[M,K] x b[K,N] as
// the exact int64 sums of the int16 x int16 products (FORMATS.md), so the result is the CPU's
// bit for bit and does not depend on the blocking.
//
// Scheme, and why. GPUs have no int16 tensor cores. The candidates were
//   (1) IMMA on int8 halves: m = 256*hi + lo, four int8 GEMMs (hi*hi, hi*lo, lo*hi, lo*lo)
//       recombined with shifts; with lo unsigned in [0, 255] that needs the u8 x s8 variants,
//       and with ~2^12..2^16 terms per int32 accumulator the partial sums must be widened to
//       int64 between K chunks. Fastest in principle (4 int8 tensor-core passes), but it is
//       warp-level mma/PTX code whose fragment layouts cannot be checked without a GPU;
//   (2) dp2a: its operands are 16-bit x 8-bit, so it also needs a split, at SIMT speed;
//   (3) plain IMAD: int16 x int16 products in int32 on the CUDA cores.
// This first version is (3), chosen because it is obviously exact and could only be compiled,
// not run, when it was written: each product is exact in int32 (|p| <= 2^30, even for a
// -32768 written through tensor_data, which the format excludes but the CPU kernels still sum
// exactly) and is added to an int64 accumulator. The IMMA split is the follow-up once it can be tested
// on hardware against this kernel; bench/bench_gpu_gemm measures the gap to cuBLAS int8.
//
// Tiling: a 64 x 64 output tile per block of 16 x 16 threads, each thread owning a 4 x 4 grid
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

extern "C" int fx_gk_matmul_i16(const fx_dview *a, const fx_dview *b, int64_t *out,
                                fx_dstage_stats *st, const char *func)
{
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    if (M <= 0 || N <= 0) return FX_OK;
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
