// Device helpers shared by the CUDA kernels: element addressing of fx_dview, element loads
// through the scalar format definitions (the FX_HD headers), warp/block reductions into the
// statistics, and the launch-error check.
#ifndef FX_GPU_COMMON_CUH
#define FX_GPU_COMMON_CUH

#include <cuda_runtime.h>

#include <stdio.h>  // snprintf: not pulled in by the CUDA headers with every host compiler
#include <stdlib.h>
#include <string.h>

#include "gpu_kernels.h"
#include "../bf16/bf16_scalar.h"
#include "../fp16/fp16_scalar.h"

#define FX_GPU_THREADS 256
#define FX_GPU_MAX_BLOCKS 4096 // grid-stride loops cover larger n

// Blocks for a grid-stride loop over n > 0 elements.
static inline unsigned fx_gpu_blocks(int64_t n)
{
    int64_t b = (n + FX_GPU_THREADS - 1) / FX_GPU_THREADS;
    return (unsigned)(b < FX_GPU_MAX_BLOCKS ? b : FX_GPU_MAX_BLOCKS);
}

// FX_OK, or FX_EDEVICE with the CUDA error text after a launch.
// A failed CUDA runtime call as FX_EDEVICE naming it; clears a non-sticky error so that later
// calls are not blamed for it.
static inline int fx_cuda_fail(cudaError_t err, const char *func, const char *what)
{
    cudaGetLastError();
    return fx_error(FX_EDEVICE, func, "%s failed: %s (%s)", what, cudaGetErrorString(err),
                    cudaGetErrorName(err));
}

static inline int fx_gpu_launch_check(const char *func, const char *kernel)
{
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) return FX_OK;
    return fx_error(FX_EDEVICE, func, "CUDA kernel %s failed to launch: %s", kernel,
                    cudaGetErrorString(err));
}

// The calling thread's current device, restored when the scope ends: the release functions
// switch to each device in turn to free its memory with its own context current. ok() is false
// when the current device cannot be read (then nothing should be switched); any error left by a
// switch is cleared on exit, so that later calls are not blamed for it.
class fx_device_restorer {
  public:
    fx_device_restorer() : ok_(cudaGetDevice(&prev_) == cudaSuccess)
    {
        if (!ok_) (void)cudaGetLastError();
    }
    ~fx_device_restorer()
    {
        if (ok_) (void)cudaSetDevice(prev_);
        (void)cudaGetLastError();
    }
    fx_device_restorer(const fx_device_restorer &) = delete;
    fx_device_restorer &operator=(const fx_device_restorer &) = delete;
    bool ok() const { return ok_; }

  private:
    int prev_ = 0;
    bool ok_;
};

// Offset (in elements) of element i of the view's row-major order.
static __device__ __forceinline__ int64_t fx_dv_offset(const fx_dview &v, int64_t i)
{
    if (v.contiguous) return i;
    int64_t off = 0;
    for (int d = v.ndim - 1; d >= 0; d--) {
        const int64_t s = v.shape[d];
        const int64_t q = i / s;
        off += (i - q * s) * v.strides[d];
        i = q;
    }
    return off;
}

static __device__ __forceinline__ float fx_bits_to_f32(uint32_t u) { return __uint_as_float(u); }
static __device__ __forceinline__ uint32_t fx_f32_to_bits(float x) { return __float_as_uint(x); }

// Element i of a view widened to fp32 exactly as the CPU widens it (fx_widen_to_f32):
// fp16/bf16 through the shared bit definitions, shared-exponent m * 2^e through double
// (scale = 2^e, computed once by the caller).
static __device__ __forceinline__ float fx_dv_load_f32(const fx_dview &v, int64_t i, double scale)
{
    const int64_t off = fx_dv_offset(v, i);
    switch (v.fmt) {
    case FMT_FP32: return ((const float *)v.base)[off];
    case FMT_FP16: return fx_bits_to_f32(fx_fp16_to_bits(((const uint16_t *)v.base)[off]));
    case FMT_BF16: return fx_bits_to_f32(fx_bf16_to_bits(((const uint16_t *)v.base)[off]));
    default: {
        // an exponent still in device memory (a pending device-chosen write) overrides scale
        const double sc = v.exp_dev ? ldexp(1.0, *v.exp_dev) : scale;
        return (float)((double)((const int16_t *)v.base)[off] * sc);
    }
    }
}

// The shared exponent of a view (int16 formats).
static __device__ __forceinline__ int fx_dv_exp(const fx_dview &v)
{
    return v.exp_dev ? *v.exp_dev : v.exp;
}

// The value of an exponent as kernels receive it (gpu_kernels.h).
static __device__ __forceinline__ int fx_dexp_value(const fx_dexp &x)
{
    return x.c + (x.cell[0] ? *x.cell[0] : 0) + (x.cell[1] ? *x.cell[1] : 0);
}

static __device__ __forceinline__ int32_t fx_dv_load_i16(const fx_dview &v, int64_t i)
{
    return ((const int16_t *)v.base)[fx_dv_offset(v, i)];
}

// Warp reductions (every lane of the warp must call them).
static __device__ __forceinline__ unsigned long long fx_warp_max_u64(unsigned long long v)
{
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long w = __shfl_down_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}
static __device__ __forceinline__ unsigned fx_warp_max_u32(unsigned v)
{
    for (int o = 16; o > 0; o >>= 1) {
        unsigned w = __shfl_down_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}
static __device__ __forceinline__ unsigned long long fx_warp_sum_u64(unsigned long long v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
// Lane 0 of the warp, from the linear thread index (warps are formed from it in 2-D blocks).
static __device__ __forceinline__ bool fx_lane0()
{
    return ((threadIdx.y * blockDim.x + threadIdx.x) & 31u) == 0;
}

// |v| of an int64 as unsigned (|INT64_MIN| = 2^63 fits only unsigned).
static __device__ __forceinline__ unsigned long long fx_uabs64(int64_t v)
{
    return v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
}

// Merge one thread's int64-stage maximum into st (all lanes call it).
static __device__ __forceinline__ void fx_stats_imax(fx_dstage_stats *st, unsigned long long m)
{
    m = fx_warp_max_u64(m);
    if (st && fx_lane0() && m) atomicMax(&st->imax, m);
}

// Merge one thread's fp32-stage statistics into st (all lanes call it).
static __device__ __forceinline__ void fx_stats_f32(fx_dstage_stats *st, unsigned fmax_bits,
                                                    unsigned long long nonfinite)
{
    fmax_bits = fx_warp_max_u32(fmax_bits);
    nonfinite = fx_warp_sum_u64(nonfinite);
    if (st && fx_lane0()) {
        if (fmax_bits) atomicMax(&st->fmax, fmax_bits);
        if (nonfinite) atomicAdd(&st->nonfinite, nonfinite);
    }
}

// One value's contribution to fp32-stage statistics.
static __device__ __forceinline__ void fx_f32_stat1(float y, unsigned *fmax_bits,
                                                    unsigned long long *nonfinite)
{
    const unsigned mag = fx_f32_to_bits(y) & 0x7FFFFFFFu;
    if (mag >= 0x7F800000u)
        ++*nonfinite;
    else if (mag > *fmax_bits)
        *fmax_bits = mag;
}

#endif
