// Layout kernels of the device convolution (src/gpu/gpu_conv.c runs the scheme): im2col, the
// gather of a chunk of an NCHW tensor, its inverse scatter, col2im and the chunk accumulation.
// The GEMMs between them are the backend's own (fx_gk_matmul_i16, cuBLAS).
//
// Every kernel is a grid-stride loop with one thread per output element, which computes its
// indices from scratch: no shared memory, no atomics on data, no cross-thread order, so what
// a kernel writes does not depend on the launch shape. Nothing here rounds an integer: int16
// mantissas are copied (padding is the mantissa 0, valid at any exponent), int64 values are
// moved or added exactly (the bounds that keep the sums below 2^62 are in gpu_conv.c). fp32
// values are widened exactly (fx_dv_load_f32, as the CPU widens) and added one IEEE addition at
// a time. Statistics of the written values are reduced in each kernel's epilogue (warp
// shuffles, one atomic per warp, gpu_common.cuh).
#include "gpu_common.cuh"
#include "gpu_conv.h"

namespace {

// ---- element types ------------------------------------------------------------------------------

// Element e of a view, as the compute type: int16 mantissa, or fp32 widened.
template <typename T> __device__ __forceinline__ T fx_conv_load(const fx_dview &v, int64_t e,
                                                                double scale);
template <> __device__ __forceinline__ int16_t fx_conv_load<int16_t>(const fx_dview &v, int64_t e,
                                                                     double)
{
    return (int16_t)fx_dv_load_i16(v, e);
}
template <> __device__ __forceinline__ float fx_conv_load<float>(const fx_dview &v, int64_t e,
                                                                 double scale)
{
    return fx_dv_load_f32(v, e, scale);
}

// Per-thread statistics of written values, merged into st by flush() (all lanes call it).
struct fx_conv_stats {
    unsigned long long imax = 0, nonfinite = 0;
    unsigned fmax = 0;
    __device__ void add(int64_t v)
    {
        const unsigned long long a = fx_uabs64(v);
        imax = a > imax ? a : imax;
    }
    __device__ void add(float v) { fx_f32_stat1(v, &fmax, &nonfinite); }
    __device__ void flush(fx_dstage_stats *st, bool is_int)
    {
        if (is_int)
            fx_stats_imax(st, imax);
        else
            fx_stats_f32(st, fmax, nonfinite);
    }
};

// One addition with the type's exact (int64) or single IEEE rounding (fp32) semantics. The
// fp32 case is spelled __fadd_rn so that nothing can be fused or reordered.
__device__ __forceinline__ int64_t fx_conv_add(int64_t a, int64_t b) { return a + b; }
__device__ __forceinline__ float fx_conv_add(float a, float b) { return __fadd_rn(a, b); }

// Scale of a shared-exponent view's mantissas (1 for float formats), for fx_dv_load_f32.
double fx_conv_scale(const fx_dview *v)
{
    return (v->fmt == FMT_FLEX16_5 || v->fmt == FMT_DFP16) ? ldexp(1.0, v->exp) : 1.0;
}

#define FX_CONV_GRID_STRIDE(i, n)                                                              \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                  \
         i += (int64_t)gridDim.x * blockDim.x)

// ---- im2col -------------------------------------------------------------------------------------

// col[r*Pc + q]: r = (c*KH + kh)*KW + kw, q = n*P + oh*OW + ow (n relative to n0); the tap is
// x[n0 + n][c][oh*sh - ph + kh*dh][ow*sw - pw + kw*dw], 0 outside the input.
template <typename T>
__global__ void fx_k_conv_im2col(fx_dview x, fx_conv_geom g, int64_t n0, int64_t nb,
                                 double scale, T *col)
{
    const int64_t KK = g.KH * g.KW, P = g.OH * g.OW, Pc = nb * P;
    const int64_t total = g.C * KK * Pc;
    FX_CONV_GRID_STRIDE(i, total)
    {
        const int64_t r = i / Pc, q = i - r * Pc;
        const int64_t c = r / KK, k = r - c * KK, kh = k / g.KW, kw = k - kh * g.KW;
        const int64_t n = q / P, p = q - n * P, oh = p / g.OW, ow = p - oh * g.OW;
        const int64_t ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
        T v = 0;
        if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W)
            v = fx_conv_load<T>(x, (((n0 + n) * g.C + c) * g.H + ih) * g.W + iw, scale);
        col[i] = v;
    }
}

// ---- chunk gather / scatter ---------------------------------------------------------------------

// chunk[(o*nb + n)*P + p] = t[n0 + n][o][p]; t is [N, O, OH, OW] read through its view.
template <typename T>
__global__ void fx_k_conv_gather(fx_dview t, int64_t n0, int64_t nb, double scale, T *chunk)
{
    const int64_t O = t.shape[1], P = t.shape[2] * t.shape[3];
    const int64_t total = O * nb * P;
    FX_CONV_GRID_STRIDE(i, total)
    {
        const int64_t on = i / P, p = i - on * P, o = on / nb, n = on - o * nb;
        chunk[i] = fx_conv_load<T>(t, ((n0 + n) * O + o) * P + p, scale);
    }
}

// stage[((n0 + n)*O + o)*P + p] = chunk[(o*nb + n)*P + p].
template <typename T>
__global__ void fx_k_conv_scatter(const T *chunk, int64_t O, int64_t P, int64_t n0, int64_t nb,
                                  T *stage, fx_dstage_stats *st)
{
    fx_conv_stats s;
    const int64_t total = O * nb * P;
    FX_CONV_GRID_STRIDE(i, total)
    {
        const int64_t on = i / P, p = i - on * P, o = on / nb, n = on - o * nb;
        const T v = chunk[i];
        stage[((n0 + n) * O + o) * P + p] = v;
        s.add(v);
    }
    s.flush(st, sizeof(T) == sizeof(int64_t));
}

// ---- col2im -------------------------------------------------------------------------------------

// One thread per input element (n, c, ih, iw) of the chunk: the pixels that read it are those
// with oh*sh = ih + ph - kh*dh and ow*sw = iw + pw - kw*dw (exact divisions, in range); their
// col entries are added in increasing (kh, kw), the order of the CPU's col2im.
template <typename T>
__global__ void fx_k_conv_col2im(const T *col, fx_conv_geom g, int64_t n0, int64_t nb, T *stage,
                                 fx_dstage_stats *st)
{
    fx_conv_stats s;
    const int64_t HW = g.H * g.W, CHW = g.C * HW, P = g.OH * g.OW, Pc = nb * P;
    const int64_t total = nb * CHW;
    FX_CONV_GRID_STRIDE(i, total)
    {
        const int64_t n = i / CHW, chw = i - n * CHW, c = chw / HW, hw = chw - c * HW;
        const int64_t ih = hw / g.W, iw = hw - ih * g.W;
        T acc = 0;
        for (int64_t kh = 0; kh < g.KH; kh++) {
            const int64_t th = ih + g.ph - kh * g.dh; // = oh*sh for the reading pixel
            if (th < 0 || th % g.sh != 0 || th / g.sh >= g.OH) continue;
            const int64_t oh = th / g.sh;
            for (int64_t kw = 0; kw < g.KW; kw++) {
                const int64_t tw = iw + g.pw - kw * g.dw;
                if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.OW) continue;
                const int64_t ow = tw / g.sw;
                const int64_t r = (c * g.KH + kh) * g.KW + kw, q = n * P + oh * g.OW + ow;
                acc = fx_conv_add(acc, col[r * Pc + q]);
            }
        }
        stage[n0 * CHW + i] = acc;
        s.add(acc);
    }
    s.flush(st, sizeof(T) == sizeof(int64_t));
}

// ---- accumulation of chunk partial sums ---------------------------------------------------------

template <typename T>
__global__ void fx_k_conv_accumulate(T *acc, const T *part, int64_t n, fx_dstage_stats *st)
{
    fx_conv_stats s;
    FX_CONV_GRID_STRIDE(i, n)
    {
        const T v = fx_conv_add(acc[i], part[i]);
        acc[i] = v;
        s.add(v);
    }
    s.flush(st, sizeof(T) == sizeof(int64_t));
}

} // namespace

// ---- launchers ----------------------------------------------------------------------------------

extern "C" int fx_gk_conv_im2col(const fx_dview *x, int raw, const fx_conv_geom *g,
                                 int64_t n0, int64_t nb, void *col, const char *func)
{
    const int64_t n = g->C * g->KH * g->KW * nb * g->OH * g->OW;
    if (n <= 0) return FX_OK;
    if (raw)
        fx_k_conv_im2col<int16_t><<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(*x, *g, n0, nb, 1.0,
                                                                        (int16_t *)col);
    else
        fx_k_conv_im2col<float><<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(
            *x, *g, n0, nb, fx_conv_scale(x), (float *)col);
    return fx_gpu_launch_check(func, "conv_im2col");
}

extern "C" int fx_gk_conv_gather(const fx_dview *t, int raw, int64_t n0, int64_t nb,
                                 void *chunk, const char *func)
{
    const int64_t n = t->shape[1] * nb * t->shape[2] * t->shape[3];
    if (n <= 0) return FX_OK;
    if (raw)
        fx_k_conv_gather<int16_t><<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(*t, n0, nb, 1.0,
                                                                        (int16_t *)chunk);
    else
        fx_k_conv_gather<float><<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(*t, n0, nb,
                                                                      fx_conv_scale(t),
                                                                      (float *)chunk);
    return fx_gpu_launch_check(func, "conv_gather");
}

extern "C" int fx_gk_conv_scatter(const void *chunk, int int_compute, int64_t O, int64_t P,
                                  int64_t n0, int64_t nb, void *stage, fx_dstage_stats *st,
                                  const char *func)
{
    const int64_t n = O * nb * P;
    if (n <= 0) return FX_OK;
    if (int_compute)
        fx_k_conv_scatter<int64_t><<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(
            (const int64_t *)chunk, O, P, n0, nb, (int64_t *)stage, st);
    else
        fx_k_conv_scatter<float><<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(
            (const float *)chunk, O, P, n0, nb, (float *)stage, st);
    return fx_gpu_launch_check(func, "conv_scatter");
}

extern "C" int fx_gk_conv_col2im(const void *col, int int_compute, const fx_conv_geom *g,
                                 int64_t n0, int64_t nb, void *stage, fx_dstage_stats *st,
                                 const char *func)
{
    const int64_t n = nb * g->C * g->H * g->W;
    if (n <= 0) return FX_OK;
    if (int_compute)
        fx_k_conv_col2im<int64_t><<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(
            (const int64_t *)col, *g, n0, nb, (int64_t *)stage, st);
    else
        fx_k_conv_col2im<float><<<fx_gpu_blocks(n), FX_GPU_THREADS>>>((const float *)col, *g, n0,
                                                                      nb, (float *)stage, st);
    return fx_gpu_launch_check(func, "conv_col2im");
}

extern "C" int fx_gk_conv_accumulate(void *acc, const void *part, int int_compute, int64_t n,
                                     fx_dstage_stats *st, const char *func)
{
    if (n <= 0) return FX_OK;
    if (int_compute)
        fx_k_conv_accumulate<int64_t><<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(
            (int64_t *)acc, (const int64_t *)part, n, st);
    else
        fx_k_conv_accumulate<float><<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(
            (float *)acc, (const float *)part, n, st);
    return fx_gpu_launch_check(func, "conv_accumulate");
}
