// CUDA runtime and cuBLAS wrappers of the CUDA backend, behind extern "C". Nothing runs at
// load time: no device means cudaGetDeviceCount fails or reports 0, which the library treats
// as "no GPU", and the cuBLAS handle of a device is created on its first float matmul.
#include <cublas_v2.h>

#include <atomic>
#include <mutex>

#include "flexpoint_gpu.h" /* the public declarations: their export attribute */
#include "gpu_common.cuh"

// ---- devices --------------------------------------------------------------------------------

extern "C" int fx_gr_device_count(void)
{
    int n = 0;
    // No driver or no device is not an error for the library: it simply has no GPU.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the error state
        return 0;
    }
    return n;
}

extern "C" int fx_gr_set_device(int device, const char *func)
{
    cudaError_t err = cudaSetDevice(device);
    return err == cudaSuccess ? FX_OK : fx_cuda_fail(err, func, "cudaSetDevice");
}

extern "C" int fx_gr_get_device(int *device, const char *func)
{
    cudaError_t err = cudaGetDevice(device);
    return err == cudaSuccess ? FX_OK : fx_cuda_fail(err, func, "cudaGetDevice");
}

extern "C" int fx_gr_device_name(int device, char *buf, size_t n, const char *func)
{
    cudaDeviceProp prop;
    cudaError_t err = cudaGetDeviceProperties(&prop, device);
    if (err != cudaSuccess) return fx_cuda_fail(err, func, "cudaGetDeviceProperties");
    snprintf(buf, n, "%s", prop.name);
    return FX_OK;
}

// ---- memory ---------------------------------------------------------------------------------

// fx_gr_malloc / fx_gr_free: the caching allocator in gpu_alloc.cu

// Times the host waited for a device: synchronous copies to or from host memory (cudaMemcpy
// waits for the stream's earlier work), synchronisations, and statistics that had not arrived.
static std::atomic<long long> fx_host_waits(0);

// FLEXPOINT_GPU_LOG_WAITS=1 (read once) prints each wait to stderr with its cause and the
// function that waited: how a user finds which call of a training step drains the device.
extern "C" void fx_gr_count_wait(const char *what, const char *func)
{
    static int log_waits = -1;
    if (log_waits < 0) {
        const char *env = getenv("FLEXPOINT_GPU_LOG_WAITS");
        log_waits = env && env[0] == '1';
    }
    fx_host_waits.fetch_add(1, std::memory_order_relaxed);
    if (log_waits) fprintf(stderr, "flexpoint: host waits for the device: %s in %s\n", what, func);
}

extern "C" long long fx_gr_host_waits(void)
{
    return fx_host_waits.load(std::memory_order_relaxed);
}

extern "C" int fx_gr_memcpy(void *dst, const void *src, size_t bytes, int dir, const char *func)
{
    if (bytes == 0) return FX_OK;
    if (dir == FX_GR_H2D) { // small uploads are queued behind the device's work, not waited for
        int staged = 0;
        const int rc = fx_gr_h2d_staged(dst, src, bytes, &staged, func);
        if (staged) return rc;
    }
    if (dir != FX_GR_D2D)
        fx_gr_count_wait(dir == FX_GR_D2H ? "copy to the host" : "copy from pageable memory", func);
    const cudaMemcpyKind kind = dir == FX_GR_H2D   ? cudaMemcpyHostToDevice
                                : dir == FX_GR_D2H ? cudaMemcpyDeviceToHost
                                                   : cudaMemcpyDeviceToDevice;
    cudaError_t err = cudaMemcpy(dst, src, bytes, kind);
    return err == cudaSuccess ? FX_OK : fx_cuda_fail(err, func, "cudaMemcpy");
}

extern "C" int fx_gr_memset0(void *p, size_t bytes, const char *func)
{
    if (bytes == 0) return FX_OK;
    cudaError_t err = cudaMemset(p, 0, bytes);
    return err == cudaSuccess ? FX_OK : fx_cuda_fail(err, func, "cudaMemset");
}

extern "C" int fx_gr_sync(const char *func)
{
    fx_gr_count_wait("synchronisation", func);
    cudaError_t err = cudaDeviceSynchronize();
    if (err == cudaSuccess) err = cudaGetLastError();
    return err == cudaSuccess ? FX_OK : fx_cuda_fail(err, func, "a CUDA kernel");
}

// FLEXPOINT_GPU_SYNC=1 (read once): every op waits for its work, so that an asynchronous
// kernel fault is reported by the op that caused it (a debugging mode; slower).
static int fx_gr_sync_each_op(void)
{
    static int mode = -1;
    if (mode < 0) {
        const char *env = getenv("FLEXPOINT_GPU_SYNC");
        mode = env && env[0] == '1';
    }
    return mode;
}

extern "C" int fx_gr_op_done(const char *func)
{
    if (fx_gr_sync_each_op()) return fx_gr_sync(func);
    // no wait: only errors already known (launch errors, and sticky faults of earlier work)
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? FX_OK : fx_cuda_fail(err, func, "a CUDA kernel");
}

// ---- cuBLAS ---------------------------------------------------------------------------------

#define FX_GPU_MAX_DEVICES 64
static std::mutex fx_cublas_lock;
static cublasHandle_t fx_cublas_handles[FX_GPU_MAX_DEVICES];

// The handle of the current device, created on first use (cuBLAS allows one handle to be used
// from several host threads; it is never destroyed, like the CUDA context it belongs to).
static int fx_cublas_handle(cublasHandle_t *h, const char *func)
{
    int dev = 0;
    int rc = fx_gr_get_device(&dev, func);
    if (rc) return rc;
    if (dev < 0 || dev >= FX_GPU_MAX_DEVICES)
        return fx_error(FX_EDEVICE, func, "device %d is beyond the %d devices this build "
                        "manages", dev, FX_GPU_MAX_DEVICES);
    std::lock_guard<std::mutex> guard(fx_cublas_lock);
    if (!fx_cublas_handles[dev]) {
        cublasStatus_t s = cublasCreate(&fx_cublas_handles[dev]);
        if (s != CUBLAS_STATUS_SUCCESS) {
            fx_cublas_handles[dev] = NULL;
            return fx_error(FX_EDEVICE, func, "cublasCreate failed: %s",
                            cublasGetStatusString(s));
        }
    }
    *h = fx_cublas_handles[dev];
    return FX_OK;
}

// A 2-D operand [R, C] as cuBLAS sees it: column-major memory with leading dimension ld,
// either holding the operand (col = 1) or its transpose (col = 0, i.e. row-major). Size-1
// dimensions have meaningless strides, so they never disqualify a layout.
typedef struct {
    int ok, col;
    int64_t ld;
} fx_blas_layout;

static fx_blas_layout fx_blas_layout_of(const fx_dview *v)
{
    const int64_t R = v->shape[0], C = v->shape[1], sr = v->strides[0], sc = v->strides[1];
    fx_blas_layout L = {0, 0, 0};
    if ((C == 1 || sc == 1) && (R == 1 || sr >= C)) { // row-major, ld = row stride
        L.ok = 1;
        L.col = 0;
        L.ld = R == 1 ? (C > 1 ? C : 1) : sr;
    } else if ((R == 1 || sr == 1) && (C == 1 || sc >= R)) { // column-major, ld = col stride
        L.ok = 1;
        L.col = 1;
        L.ld = C == 1 ? (R > 1 ? R : 1) : sc;
    }
    if (L.ld > 2147483647) L.ok = 0;
    return L;
}

static cudaDataType_t fx_blas_type(int fmt)
{
    return fmt == FMT_FP16 ? CUDA_R_16F : fmt == FMT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// The handle of the current device for a GEMM of M x N x K, which cuBLAS's int arguments must
// hold (FX_EUNSUPPORTED otherwise).
static int fx_cublas_gemm_handle(int64_t M, int64_t N, int64_t K, const char *what,
                                 cublasHandle_t *h, const char *func)
{
    if (M > 2147483647 || N > 2147483647 || K > 2147483647)
        return fx_error(FX_EUNSUPPORTED, func, "%s dimensions M=%lld N=%lld K=%lld exceed "
                        "cuBLAS's int range", what, (long long)M, (long long)N, (long long)K);
    return fx_cublas_handle(h, func);
}

extern "C" int fx_gr_gemm_float(const fx_dview *a, const fx_dview *b, float *out,
                                const char *func)
{
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    if (M <= 0 || N <= 0) return FX_OK;
    if (K == 0) return fx_gr_memset0(out, (size_t)(M * N) * sizeof(float), func);
    cublasHandle_t h = NULL;
    int rc = fx_cublas_gemm_handle(M, N, K, "matmul", &h, func);
    if (rc) return rc;

    // Operands go to cuBLAS as they are when both have the same format and a layout cuBLAS
    // reads; otherwise both are widened to contiguous fp32 (exact), which changes nothing but
    // speed: the products and the fp32 accumulation are the same.
    fx_dview va = *a, vb = *b;
    fx_blas_layout La = fx_blas_layout_of(&va), Lb = fx_blas_layout_of(&vb);
    void *wa = NULL, *wb = NULL;
    if (!(La.ok && Lb.ok && va.fmt == vb.fmt && va.fmt != FMT_FLEX16_5 && va.fmt != FMT_DFP16)) {
        rc = fx_gr_malloc((size_t)(M * K) * sizeof(float), &wa, func);
        if (!rc) rc = fx_gr_malloc((size_t)(K * N) * sizeof(float), &wb, func);
        if (!rc) rc = fx_gk_float_ew(FX_GEW_COPY, &va, NULL, 0.0f, (float *)wa, M * K, NULL, func);
        if (!rc) rc = fx_gk_float_ew(FX_GEW_COPY, &vb, NULL, 0.0f, (float *)wb, K * N, NULL, func);
        if (rc) {
            fx_gr_free(wa);
            fx_gr_free(wb);
            return rc;
        }
        va.base = wa;
        va.fmt = FMT_FP32;
        va.strides[0] = K;
        va.strides[1] = 1;
        vb.base = wb;
        vb.fmt = FMT_FP32;
        vb.strides[0] = N;
        vb.strides[1] = 1;
        La = fx_blas_layout_of(&va);
        Lb = fx_blas_layout_of(&vb);
    }

    // Row-major out[M,N] is column-major out^T[N,M] (ld N) = b^T a^T. A row-major operand's
    // memory, read column-major, already is its transpose (CUBLAS_OP_N); a column-major one
    // needs CUBLAS_OP_T.
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t s = cublasGemmEx(h, Lb.col ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    La.col ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                    &alpha, vb.base, fx_blas_type(vb.fmt), (int)Lb.ld, va.base,
                                    fx_blas_type(va.fmt), (int)La.ld, &beta, out, CUDA_R_32F,
                                    (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    // cuBLAS runs asynchronously; its temporaries go back to the cache, ordered on the stream
    if (s == CUBLAS_STATUS_SUCCESS) rc = fx_gr_op_done(func);
    fx_gr_free(wa);
    fx_gr_free(wb);
    if (s != CUBLAS_STATUS_SUCCESS)
        return fx_error(FX_EDEVICE, func, "cublasGemmEx failed: %s", cublasGetStatusString(s));
    return rc;
}

// out (int32, column-major N x M with ld N, i.e. row-major [M][N]) = beta * out + b . a^T over
// K: b is int8 [N][K] and a int8 [M][K], both row-major with row length K (the "TN" layout of
// cuBLAS's int8 tensor-core kernels). Integer arithmetic: exact while no sum leaves int32, which
// the caller guarantees by its K chunking. Runs asynchronously on the default stream.
extern "C" int fx_gr_gemm_s8_tn(int64_t N, int64_t M, int64_t K, const int8_t *b, const int8_t *a,
                                int accumulate, int32_t *out, const char *func)
{
    cublasHandle_t h = NULL;
    int rc = fx_cublas_gemm_handle(M, N, K, "int8 GEMM", &h, func);
    if (rc) return rc;
    const int32_t alpha = 1, beta = accumulate ? 1 : 0;
    cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, b,
                                    CUDA_R_8I, (int)K, a, CUDA_R_8I, (int)K, &beta, out,
                                    CUDA_R_32I, (int)N, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return fx_error(FX_EDEVICE, func, "cublasGemmEx (int8) failed: %s",
                        cublasGetStatusString(s));
    return FX_OK;
}
