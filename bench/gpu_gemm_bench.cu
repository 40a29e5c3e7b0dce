// GPU GEMM benchmark body (bench_gpu_gemm.c is the driver): the library's exact int16 GEMM
// against cuBLAS fp16, bf16 (cublasGemmEx, fp32 compute) and int8 (CUDA_R_8I inputs,
// CUBLAS_COMPUTE_32I), square n x n x n, in one run. Built only with CUDA.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_kernels.h"

#define CK(call)                                                                               \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "bench_gpu_gemm: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

// Deterministic operand values from a hash of the index: int16 in [-32767, 32767] (the
// formats' range), and the same pattern scaled into fp16/bf16/int8.
__device__ static uint32_t hash32(uint64_t i)
{
    uint64_t z = i * 0x9e3779b97f4a7c15ULL;
    z ^= z >> 31;
    z *= 0xbf58476d1ce4e5b9ULL;
    return (uint32_t)(z >> 32);
}

__global__ void fill_operands(int64_t n, uint64_t seed, int16_t *i16, __half *f16,
                              __nv_bfloat16 *b16, int8_t *i8)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int32_t v = (int32_t)(hash32(seed + (uint64_t)i) % 65535u) - 32767;
        i16[i] = (int16_t)v;
        f16[i] = __float2half((float)v / 32768.0f);
        b16[i] = __float2bfloat16((float)v / 32768.0f);
        i8[i] = (int8_t)(v / 258);
    }
}

typedef struct {
    int16_t *i16;
    __half *f16;
    __nv_bfloat16 *b16;
    int8_t *i8;
} operands;

static int alloc_operands(operands *o, int64_t elems, uint64_t seed)
{
    CK(cudaMalloc(&o->i16, (size_t)elems * 2));
    CK(cudaMalloc(&o->f16, (size_t)elems * 2));
    CK(cudaMalloc(&o->b16, (size_t)elems * 2));
    CK(cudaMalloc(&o->i8, (size_t)elems));
    fill_operands<<<1024, 256>>>(elems, seed, o->i16, o->f16, o->b16, o->i8);
    CK(cudaGetLastError());
    return 0;
}

static void free_operands(operands *o)
{
    cudaFree(o->i16);
    cudaFree(o->f16);
    cudaFree(o->b16);
    cudaFree(o->i8);
}

typedef int (*gemm_fn)(void *ctx);

// Two warm-up runs, then the mean of `reps` runs between CUDA events.
static double time_ms(gemm_fn fn, void *ctx, int reps, int *rc)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    *rc = fn(ctx);
    *rc |= fn(ctx);
    cudaEventRecord(a);
    for (int r = 0; r < reps && !*rc; r++) *rc |= fn(ctx);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (cudaGetLastError() != cudaSuccess) *rc = 1;
    return ms / reps;
}

typedef struct {
    int n;
    operands A, B;
    int64_t *c64;
    float *c32;
    int32_t *ci32;
    fx_dstage_stats *st;
    cublasHandle_t h;
    cudaDataType_t type;
    int which; // 0 fp16, 1 bf16, 2 int8
    int path;  // our scheme: FX_GK_I16_IMAD or FX_GK_I16_TC
} ctx_t;

static fx_dview view2d(void *base, int n)
{
    fx_dview v;
    memset(&v, 0, sizeof v);
    v.base = base;
    v.fmt = FMT_DFP16;
    v.ndim = 2;
    v.contiguous = 1;
    v.shape[0] = v.shape[1] = n;
    v.strides[0] = n;
    v.strides[1] = 1;
    return v;
}

static int run_ours(void *p)
{
    ctx_t *c = (ctx_t *)p;
    fx_dview a = view2d(c->A.i16, c->n), b = view2d(c->B.i16, c->n);
    fx_gk_matmul_i16_set_path(c->path);
    const int rc = fx_gk_matmul_i16(&a, &b, c->c64, c->st, "bench_gpu_gemm");
    fx_gk_matmul_i16_set_path(FX_GK_I16_AUTO);
    return rc;
}

static int run_cublas(void *p)
{
    ctx_t *c = (ctx_t *)p;
    const int n = c->n;
    cublasStatus_t s;
    if (c->which == 2) {
        const int32_t one = 1, zero = 0;
        // int8 IMMA: A transposed, B not (the layout cuBLAS's int8 kernels require)
        s = cublasGemmEx(c->h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, c->B.i8, CUDA_R_8I, n,
                         c->A.i8, CUDA_R_8I, n, &zero, c->ci32, CUDA_R_32I, n,
                         CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
    } else {
        const float one = 1.0f, zero = 0.0f;
        const void *a = c->which == 0 ? (const void *)c->A.f16 : (const void *)c->A.b16;
        const void *b = c->which == 0 ? (const void *)c->B.f16 : (const void *)c->B.b16;
        s = cublasGemmEx(c->h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b, c->type, n, a,
                         c->type, n, &zero, c->c32, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
    }
    return s == CUBLAS_STATUS_SUCCESS ? 0 : 1;
}

// A few entries of our int64 result against host int64 sums of the same operands.
static int check_ours(ctx_t *c)
{
    const int n = c->n;
    int16_t *a = (int16_t *)malloc((size_t)n * n * 2), *b = (int16_t *)malloc((size_t)n * n * 2);
    int64_t got[16];
    int bad = 0;
    if (cudaMemcpy(a, c->A.i16, (size_t)n * n * 2, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(b, c->B.i16, (size_t)n * n * 2, cudaMemcpyDeviceToHost) != cudaSuccess)
        bad = 1;
    for (int t = 0; t < 16 && !bad; t++) {
        const int i = (t * 7919) % n, j = (t * 104729 + 13) % n;
        int64_t want = 0;
        for (int k = 0; k < n; k++) want += (int64_t)a[(int64_t)i * n + k] * b[(int64_t)k * n + j];
        if (cudaMemcpy(&got[t], c->c64 + (int64_t)i * n + j, 8, cudaMemcpyDeviceToHost) !=
                cudaSuccess ||
            got[t] != want) {
            fprintf(stderr, "bench_gpu_gemm: our GEMM [%d,%d] = %lld, host %lld\n", i, j,
                    (long long)got[t], (long long)want);
            bad = 1;
        }
    }
    free(a);
    free(b);
    return bad;
}

extern "C" int fx_bench_gpu_gemm_run(const int *sizes, int nsizes)
{
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "bench_gpu_gemm: cublasCreate failed\n");
        return 1;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    // ratio: our tensor-core split's time over the row's time (how many times faster the row is)
    printf("%6s  %-28s %10s %9s %12s\n", "n", "gemm", "ms", "TOPS", "t_split/t");
    int status = 0;
    for (int s = 0; s < nsizes; s++) {
        const int n = sizes[s];
        const int64_t elems = (int64_t)n * n;
        const int reps = n <= 1024 ? 20 : n <= 2048 ? 10 : 4;
        ctx_t c;
        memset(&c, 0, sizeof c);
        c.n = n;
        c.h = h;
        if (alloc_operands(&c.A, elems, 1) || alloc_operands(&c.B, elems, 2)) return 1;
        CK(cudaMalloc(&c.c64, (size_t)elems * 8));
        CK(cudaMalloc(&c.c32, (size_t)elems * 4));
        CK(cudaMalloc(&c.ci32, (size_t)elems * 4));
        CK(cudaMalloc(&c.st, sizeof *c.st));
        CK(cudaMemset(c.st, 0, sizeof *c.st));
        const double ops = 2.0 * n * (double)n * n;
        int rc = 0;
        double t_ours = 0.0, t_imad = 0.0;
        for (int p = 0; p < 2; p++) { // the split last: its time is the ratios' reference
            c.path = p ? FX_GK_I16_TC : FX_GK_I16_IMAD;
            const double t = time_ms(run_ours, &c, reps, &rc);
            if (rc || check_ours(&c)) {
                fprintf(stderr, "bench_gpu_gemm: our integer GEMM (%s) failed at n=%d\n",
                        p ? "split" : "IMAD", n);
                status = 1;
            }
            if (p)
                t_ours = t;
            else
                t_imad = t;
            printf("%6d  %-28s %10.3f %9.2f %12s\n", n,
                   p ? "ours int16 exact, int8 split" : "ours int16 exact, IMAD", t,
                   ops / (t * 1e9), p ? "1.00" : "");
        }
        printf("%6d  %-28s %10s %9s %12.2f\n", n, "(split's speed-up over IMAD)", "", "",
               t_imad / t_ours);
        const char *names[3] = {"cuBLAS fp16 (fp32 acc)", "cuBLAS bf16 (fp32 acc)",
                                "cuBLAS int8 (int32 acc)"};
        const cudaDataType_t types[3] = {CUDA_R_16F, CUDA_R_16BF, CUDA_R_8I};
        for (int w = 0; w < 3; w++) {
            c.which = w;
            c.type = types[w];
            const double t = time_ms(run_cublas, &c, reps, &rc);
            if (rc) {
                printf("%6d  %-24s %10s\n", n, names[w], "failed");
                continue;
            }
            printf("%6d  %-28s %10.3f %9.2f %12.2f\n", n, names[w], t, ops / (t * 1e9),
                   t_ours / t);
            if (w == 2) /* the split's floor: its four int8 GEMMs alone, without the split and
                         * combination passes */
                printf("%6d  %-28s %10.3f %9.2f %12.2f\n", n, "(4 x cuBLAS int8: floor)",
                       4 * t, ops / (4 * t * 1e9), t_ours / (4 * t));
        }
        free_operands(&c.A);
        free_operands(&c.B);
        cudaFree(c.c64);
        cudaFree(c.c32);
        cudaFree(c.ci32);
        cudaFree(c.st);
    }
    cublasDestroy(h);
    return status;
}
