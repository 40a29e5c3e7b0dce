// Kernels of the training ops on the device (gpu_nn_kernels.h). They are deliberately plain:
// one thread per output element, per (n, c) plane, per row or per channel, each running the
// CPU's loop for its item in the CPU's order (src/nn/...), so that the results can be argued
// equal to the CPU's by reading the two side by side. Integer formats sum exactly in int64;
// float formats repeat the CPU's IEEE operations one by one (see the helpers below). Speed
// comes second: the per-plane / per-channel kernels leave most of the GPU idle when there are
// few planes or channels, which is the first thing to revisit once they have been checked on
// hardware.
#include "gpu_common.cuh"
#include "gpu_nn_kernels.h"

// ---- IEEE steps with the x86 NaN rule -------------------------------------------------------
//
// The CPU code is compiled for x86 SSE: an operation with a NaN operand returns that NaN
// quieted (the first operand's when both are NaN), an invalid operation (Inf - Inf, 0 * Inf,
// sqrt(-1)) returns the default NaN, sign bit set; float <-> double conversions keep the sign
// and the high payload bits. CUDA returns a canonical NaN instead. The helpers compute with
// the _rn intrinsics (never contracted into FMAs, always round to nearest even, like SSE) and
// rewrite a NaN result by the x86 rule, so that NaN bits match the CPU too.

static __device__ __forceinline__ float fxn_qnanf(float x)
{
    return __uint_as_float(__float_as_uint(x) | 0x00400000u);
}
static __device__ __forceinline__ float fxn_fix_f(float r, float a, float b)
{
    if (r == r) return r;
    if (a != a) return fxn_qnanf(a);
    if (b != b) return fxn_qnanf(b);
    return __uint_as_float(0xFFC00000u);
}
static __device__ __forceinline__ float fxn_fadd(float a, float b)
{
    return fxn_fix_f(__fadd_rn(a, b), a, b);
}
static __device__ __forceinline__ float fxn_fmul(float a, float b)
{
    return fxn_fix_f(__fmul_rn(a, b), a, b);
}
static __device__ __forceinline__ float fxn_fdiv(float a, float b)
{
    return fxn_fix_f(__fdiv_rn(a, b), a, b);
}

static __device__ __forceinline__ double fxn_qnan(double x)
{
    return __longlong_as_double(__double_as_longlong(x) | 0x0008000000000000LL);
}
static __device__ __forceinline__ double fxn_fix(double r, double a, double b)
{
    if (r == r) return r;
    if (a != a) return fxn_qnan(a);
    if (b != b) return fxn_qnan(b);
    return __longlong_as_double((long long)0xFFF8000000000000ULL);
}
static __device__ __forceinline__ double fxn_add(double a, double b)
{
    return fxn_fix(__dadd_rn(a, b), a, b);
}
static __device__ __forceinline__ double fxn_sub(double a, double b)
{
    return fxn_fix(__dsub_rn(a, b), a, b);
}
static __device__ __forceinline__ double fxn_mul(double a, double b)
{
    return fxn_fix(__dmul_rn(a, b), a, b);
}
static __device__ __forceinline__ double fxn_div(double a, double b)
{
    return fxn_fix(__ddiv_rn(a, b), a, b);
}
static __device__ __forceinline__ double fxn_sqrt(double a)
{
    return fxn_fix(__dsqrt_rn(a), a, a);
}

// float -> double (exact; a NaN keeps sign and payload, quieted, as cvtss2sd).
static __device__ __forceinline__ double fxn_f2d(float x)
{
    if (x == x) return (double)x;
    const unsigned long long u = __float_as_uint(x);
    return __longlong_as_double((long long)(((u & 0x80000000ull) << 32) | 0x7FF8000000000000ull |
                                            ((u & 0x007FFFFFull) << 29)));
}

// double -> float to nearest (a NaN keeps sign and high payload bits, quieted, as cvtsd2ss).
static __device__ __forceinline__ float fxn_d2f(double d)
{
    if (d == d) return __double2float_rn(d);
    const unsigned long long u = (unsigned long long)__double_as_longlong(d);
    return __uint_as_float((unsigned)((u >> 32) & 0x80000000u) | 0x7FC00000u |
                           (unsigned)((u >> 29) & 0x007FFFFFu));
}

// nn_stage_f32 (src/nn/nn_stage.h): to nearest for an fp32 output, to odd otherwise.
static __device__ __forceinline__ float fxn_stage(double v, int fmt)
{
    if (fmt == FMT_FP32 || v != v) return fxn_d2f(v);
    return fx_f64_to_f32_round_odd(v);
}

#define FXN_FOR(i, n)                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                  \
         i += (int64_t)gridDim.x * blockDim.x)

static inline int fxn_check(const char *func, const char *kernel)
{
    return fx_gpu_launch_check(func, kernel);
}

// A view's scale for fx_dv_load_f32 (shared-exponent views; 1 otherwise).
static double fxn_scale(const fx_dview *v)
{
    return (v->fmt == FMT_FLEX16_5 || v->fmt == FMT_DFP16) ? ldexp(1.0, v->exp) : 1.0;
}

// ---- pointers -------------------------------------------------------------------------------

extern "C" int fx_gnr_pointer_where(const void *p, int *where, const char *func)
{
    (void)func;
    cudaPointerAttributes a;
    *where = -1;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        // runtimes before CUDA 11 report plain host memory as an error: it is host memory
        cudaGetLastError();
        return FX_OK;
    }
    if (a.type == cudaMemoryTypeDevice)
        *where = a.device;
    else if (a.type == cudaMemoryTypeManaged)
        *where = FX_GNN_MANAGED;
    return FX_OK;
}

// ---- pooling --------------------------------------------------------------------------------

// Window of output (oh, ow) clipped to the input (pool.c's pool_window).
static __device__ __forceinline__ void fxn_window(const fx_pool_geom &g, int64_t oh, int64_t ow,
                                                  int64_t *h0, int64_t *h1, int64_t *w0,
                                                  int64_t *w1)
{
    const int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
    *h0 = hs < 0 ? 0 : hs;
    *h1 = hs + g.KH < g.H ? hs + g.KH : g.H;
    *w0 = ws < 0 ? 0 : ws;
    *w1 = ws + g.KW < g.W ? ws + g.KW : g.W;
}

__global__ void fxn_k_maxpool(fx_dview x, int ic, fx_pool_geom g, void *stage, int32_t *idx,
                              fx_dstage_stats *st)
{
    const int64_t P = g.OH * g.OW, HW = g.H * g.W, ny = g.N * g.C * P;
    unsigned long long imax = 0, nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(o, ny)
    {
        const int64_t pl = o / P, r = o - pl * P, oh = r / g.OW, ow = r - oh * g.OW;
        int64_t h0, h1, w0, w1;
        fxn_window(g, oh, ow, &h0, &h1, &w0, &w1);
        int64_t best_at = pl * HW + h0 * g.W + w0; // windows are never empty (pool.c)
        if (ic) {
            int32_t best = fx_dv_load_i16(x, best_at);
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++) {
                    const int64_t at = pl * HW + ih * g.W + iw;
                    const int32_t v = fx_dv_load_i16(x, at);
                    if (v > best) {
                        best = v;
                        best_at = at;
                    }
                }
            ((int64_t *)stage)[o] = best;
            const unsigned long long a = fx_uabs64(best);
            imax = a > imax ? a : imax;
        } else {
            float best = fx_dv_load_f32(x, best_at, 1.0);
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++) {
                    const int64_t at = pl * HW + ih * g.W + iw;
                    const float v = fx_dv_load_f32(x, at, 1.0);
                    if (v > best || (v != v && best == best)) {
                        best = v;
                        best_at = at;
                    }
                }
            ((float *)stage)[o] = best;
            fx_f32_stat1(best, &fmax, &nonfinite);
        }
        if (idx) idx[o] = (int32_t)best_at;
    }
    if (ic)
        fx_stats_imax(st, imax);
    else
        fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gnk_maxpool(const fx_dview *x, int ic, const fx_pool_geom *g, void *stage,
                              int32_t *idx, fx_dstage_stats *st, const char *func)
{
    const int64_t ny = g->N * g->C * g->OH * g->OW;
    if (ny <= 0) return FX_OK;
    fxn_k_maxpool<<<fx_gpu_blocks(ny), FX_GPU_THREADS>>>(*x, ic, *g, stage, idx, st);
    return fxn_check(func, "maxpool");
}

__global__ void fxn_k_argmax_check(const int32_t *argmax, int64_t n, int64_t P, int64_t HW,
                                   unsigned long long *first_bad)
{
    FXN_FOR(i, n)
    {
        const int64_t lo = (i / P) * HW, a = argmax[i];
        if (a < lo || a >= lo + HW) atomicMax(first_bad, (unsigned long long)(n - i));
    }
}

extern "C" int fx_gnk_argmax_check(const int32_t *argmax, int64_t n, int64_t P, int64_t HW,
                                   unsigned long long *first_bad, const char *func)
{
    if (n <= 0) return FX_OK;
    fxn_k_argmax_check<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(argmax, n, P, HW, first_bad);
    return fxn_check(func, "argmax_check");
}

// One thread per plane: its outputs in order, as the CPU's loop, so an fp32 element that
// several windows select sums their gradients in the CPU's order.
__global__ void fxn_k_maxpool_backward(fx_dview dy, int ic, const int32_t *argmax,
                                       int64_t planes, int64_t P, int64_t HW, void *stage,
                                       fx_dstage_stats *st)
{
    unsigned long long imax = 0, nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(pl, planes)
    {
        // an index outside the plane (possible only for indices the caller vouched for,
        // fx_maxpool2d_backward_own) is skipped, never followed outside the plane's memory
        const int64_t lo = pl * HW, hi = lo + HW;
        if (ic) {
            int64_t *s = (int64_t *)stage;
            for (int64_t i = pl * P; i < (pl + 1) * P; i++)
                if (argmax[i] >= lo && argmax[i] < hi) s[argmax[i]] += fx_dv_load_i16(dy, i);
            for (int64_t j = pl * HW; j < (pl + 1) * HW; j++) {
                const unsigned long long a = fx_uabs64(s[j]);
                imax = a > imax ? a : imax;
            }
        } else {
            float *s = (float *)stage;
            for (int64_t i = pl * P; i < (pl + 1) * P; i++)
                if (argmax[i] >= lo && argmax[i] < hi)
                    s[argmax[i]] = fxn_fadd(s[argmax[i]], fx_dv_load_f32(dy, i, 1.0));
            for (int64_t j = pl * HW; j < (pl + 1) * HW; j++) fx_f32_stat1(s[j], &fmax, &nonfinite);
        }
    }
    if (ic)
        fx_stats_imax(st, imax);
    else
        fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gnk_maxpool_backward(const fx_dview *dy, int ic, const int32_t *argmax,
                                       int64_t planes, int64_t P, int64_t HW, void *stage,
                                       fx_dstage_stats *st, const char *func)
{
    if (planes <= 0) return FX_OK;
    fxn_k_maxpool_backward<<<fx_gpu_blocks(planes), FX_GPU_THREADS>>>(*dy, ic, argmax, planes,
                                                                      P, HW, stage, st);
    return fxn_check(func, "maxpool_backward");
}

__global__ void fxn_k_avgpool(fx_dview x, int ic, fx_pool_geom g, void *stage,
                              fx_dstage_stats *st)
{
    const int64_t P = g.OH * g.OW, HW = g.H * g.W, ny = g.N * g.C * P;
    const float count = (float)(g.KH * g.KW);
    unsigned long long imax = 0, nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(o, ny)
    {
        const int64_t pl = o / P, r = o - pl * P, oh = r / g.OW, ow = r - oh * g.OW;
        int64_t h0, h1, w0, w1;
        fxn_window(g, oh, ow, &h0, &h1, &w0, &w1);
        if (ic) {
            int64_t sum = 0;
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++) sum += fx_dv_load_i16(x, pl * HW + ih * g.W + iw);
            ((int64_t *)stage)[o] = sum;
            const unsigned long long a = fx_uabs64(sum);
            imax = a > imax ? a : imax;
        } else {
            float sum = 0.0f;
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++)
                    sum = fxn_fadd(sum, fx_dv_load_f32(x, pl * HW + ih * g.W + iw, 1.0));
            const float y = fxn_fdiv(sum, count);
            ((float *)stage)[o] = y;
            fx_f32_stat1(y, &fmax, &nonfinite);
        }
    }
    if (ic)
        fx_stats_imax(st, imax);
    else
        fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gnk_avgpool(const fx_dview *x, int ic, const fx_pool_geom *g, void *stage,
                              fx_dstage_stats *st, const char *func)
{
    const int64_t ny = g->N * g->C * g->OH * g->OW;
    if (ny <= 0) return FX_OK;
    fxn_k_avgpool<<<fx_gpu_blocks(ny), FX_GPU_THREADS>>>(*x, ic, *g, stage, st);
    return fxn_check(func, "avgpool");
}

// Outputs whose window holds input row ih: oh*sh - ph <= ih < oh*sh - ph + KH, within [0, OH).
static __device__ __forceinline__ void fxn_covering(int64_t i, int64_t p, int64_t k, int64_t s,
                                                    int64_t nout, int64_t *lo, int64_t *hi)
{
    const int64_t num = i + p - k + 1; // smallest oh: ceil(num / s), or 0
    *lo = num <= 0 ? 0 : (num + s - 1) / s;
    const int64_t top = (i + p) / s; // i + p >= 0
    *hi = top < nout - 1 ? top : nout - 1;
}

__global__ void fxn_k_avgpool_backward(fx_dview dy, int ic, fx_pool_geom g, void *stage,
                                       fx_dstage_stats *st)
{
    const int64_t P = g.OH * g.OW, HW = g.H * g.W, nx = g.N * g.C * HW;
    const float count = (float)(g.KH * g.KW);
    unsigned long long imax = 0, nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(j, nx)
    {
        const int64_t pl = j / HW, r = j - pl * HW, ih = r / g.W, iw = r - ih * g.W;
        int64_t oh0, oh1, ow0, ow1;
        fxn_covering(ih, g.ph, g.KH, g.sh, g.OH, &oh0, &oh1);
        fxn_covering(iw, g.pw, g.KW, g.sw, g.OW, &ow0, &ow1);
        if (ic) {
            int64_t sum = 0;
            for (int64_t oh = oh0; oh <= oh1; oh++)
                for (int64_t ow = ow0; ow <= ow1; ow++)
                    sum += fx_dv_load_i16(dy, pl * P + oh * g.OW + ow);
            ((int64_t *)stage)[j] = sum;
            const unsigned long long a = fx_uabs64(sum);
            imax = a > imax ? a : imax;
        } else {
            float sum = 0.0f; // the CPU's zeroed stage, then one addition per window
            for (int64_t oh = oh0; oh <= oh1; oh++)
                for (int64_t ow = ow0; ow <= ow1; ow++)
                    sum = fxn_fadd(sum, fx_dv_load_f32(dy, pl * P + oh * g.OW + ow, 1.0));
            const float y = fxn_fdiv(sum, count);
            ((float *)stage)[j] = y;
            fx_f32_stat1(y, &fmax, &nonfinite);
        }
    }
    if (ic)
        fx_stats_imax(st, imax);
    else
        fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gnk_avgpool_backward(const fx_dview *dy, int ic, const fx_pool_geom *g,
                                       void *stage, fx_dstage_stats *st, const char *func)
{
    const int64_t nx = g->N * g->C * g->H * g->W;
    if (nx <= 0) return FX_OK;
    fxn_k_avgpool_backward<<<fx_gpu_blocks(nx), FX_GPU_THREADS>>>(*dy, ic, *g, stage, st);
    return fxn_check(func, "avgpool_backward");
}

__global__ void fxn_k_gap_backward(fx_dview dy, int ic, int64_t planes, int64_t HW, void *stage,
                                   fx_dstage_stats *st)
{
    const float count = (float)HW;
    unsigned long long imax = 0, nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(j, planes * HW)
    {
        const int64_t pl = j / HW;
        if (ic) {
            const int64_t v = fx_dv_load_i16(dy, pl);
            ((int64_t *)stage)[j] = v;
            const unsigned long long a = fx_uabs64(v);
            imax = a > imax ? a : imax;
        } else {
            const float y = fxn_fdiv(fx_dv_load_f32(dy, pl, 1.0), count);
            ((float *)stage)[j] = y;
            fx_f32_stat1(y, &fmax, &nonfinite);
        }
    }
    if (ic)
        fx_stats_imax(st, imax);
    else
        fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gnk_gap_backward(const fx_dview *dy, int ic, int64_t planes, int64_t HW,
                                   void *stage, fx_dstage_stats *st, const char *func)
{
    if (planes * HW <= 0) return FX_OK;
    fxn_k_gap_backward<<<fx_gpu_blocks(planes * HW), FX_GPU_THREADS>>>(*dy, ic, planes, HW,
                                                                       stage, st);
    return fxn_check(func, "gap_backward");
}

__global__ void fxn_k_div_odd(int64_t *v, int64_t n, uint64_t count, int k, fx_dstage_stats *st)
{
    unsigned long long imax = 0;
    FXN_FOR(i, n)
    {
        const int64_t q = fx_div_odd_signed(v[i], count, k);
        v[i] = q;
        const unsigned long long a = fx_uabs64(q);
        imax = a > imax ? a : imax;
    }
    fx_stats_imax(st, imax);
}

extern "C" int fx_gnk_div_odd(int64_t *v, int64_t n, uint64_t count, int k, fx_dstage_stats *st,
                              const char *func)
{
    if (n <= 0) return FX_OK;
    fxn_k_div_odd<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(v, n, count, k, st);
    return fxn_check(func, "div_odd");
}

// ---- element-wise ---------------------------------------------------------------------------

// x > 0 in x's own format (activation.c's nn_positive_mask).
static __device__ __forceinline__ bool fxn_positive(const fx_dview &x, int64_t i)
{
    const int64_t off = fx_dv_offset(x, i);
    switch (x.fmt) {
    case FMT_FP32: return ((const float *)x.base)[off] > 0.0f;
    case FMT_FP16: {
        const uint16_t h = ((const uint16_t *)x.base)[off];
        return h != 0 && h <= 0x7c00;
    }
    case FMT_BF16: {
        const uint16_t h = ((const uint16_t *)x.base)[off];
        return h != 0 && h <= 0x7f80;
    }
    default: return ((const int16_t *)x.base)[off] > 0;
    }
}

__global__ void fxn_k_relu_backward(fx_dview dy, int ic, fx_dview x, int64_t n, void *stage,
                                    fx_dstage_stats *st)
{
    unsigned long long imax = 0, nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(i, n)
    {
        const bool keep = fxn_positive(x, i);
        if (ic) {
            const int64_t v = keep ? fx_dv_load_i16(dy, i) : 0;
            ((int64_t *)stage)[i] = v;
            const unsigned long long a = fx_uabs64(v);
            imax = a > imax ? a : imax;
        } else {
            const float v = keep ? fx_dv_load_f32(dy, i, 1.0) : 0.0f;
            ((float *)stage)[i] = v;
            fx_f32_stat1(v, &fmax, &nonfinite);
        }
    }
    if (ic)
        fx_stats_imax(st, imax);
    else
        fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gnk_relu_backward(const fx_dview *dy, int ic, const fx_dview *x, int64_t n,
                                    void *stage, fx_dstage_stats *st, const char *func)
{
    if (n <= 0) return FX_OK;
    fxn_k_relu_backward<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(*dy, ic, *x, n, stage, st);
    return fxn_check(func, "relu_backward");
}

__global__ void fxn_k_dropout(fx_dview x, int ic, int64_t n, uint64_t seed, uint64_t step,
                              uint64_t thr, int64_t ms, double factor, int out_fmt, void *stage,
                              fx_dstage_stats *st)
{
    unsigned long long imax = 0, nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(i, n)
    {
        const bool dropped = (fx_rng_u64(seed, step, (uint64_t)i) >> 11) < thr;
        if (ic) {
            const int64_t v = (int64_t)fx_dv_load_i16(x, i) * (dropped ? 0 : ms);
            ((int64_t *)stage)[i] = v;
            const unsigned long long a = fx_uabs64(v);
            imax = a > imax ? a : imax;
        } else {
            const double xv = fxn_f2d(fx_dv_load_f32(x, i, 1.0));
            const float v = fxn_stage(fxn_mul(xv, dropped ? 0.0 : factor), out_fmt);
            ((float *)stage)[i] = v;
            fx_f32_stat1(v, &fmax, &nonfinite);
        }
    }
    if (ic)
        fx_stats_imax(st, imax);
    else
        fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gnk_dropout(const fx_dview *x, int ic, int64_t n, uint64_t seed, uint64_t step,
                              uint64_t thr, int64_t ms, double factor, int out_fmt, void *stage,
                              fx_dstage_stats *st, const char *func)
{
    if (n <= 0) return FX_OK;
    fxn_k_dropout<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(*x, ic, n, seed, step, thr, ms, factor,
                                                        out_fmt, stage, st);
    return fxn_check(func, "dropout");
}

__global__ void fxn_k_mean_int(int64_t *v, int64_t n, uint64_t len, int frac, int e, float *f32,
                               int out_fmt, fx_dstage_stats *st)
{
    unsigned long long imax = 0, nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(i, n)
    {
        if (f32) {
            const float y = fxn_stage(fx_quotient_f64_odd(v[i], len, e), out_fmt);
            f32[i] = y;
            fx_f32_stat1(y, &fmax, &nonfinite);
        } else {
            const int64_t q = fx_div_odd_signed(v[i], len, frac);
            v[i] = q;
            const unsigned long long a = fx_uabs64(q);
            imax = a > imax ? a : imax;
        }
    }
    if (f32)
        fx_stats_f32(st, fmax, nonfinite);
    else
        fx_stats_imax(st, imax);
}

extern "C" int fx_gnk_mean_int(int64_t *v, int64_t n, uint64_t len, int frac, int e, float *f32,
                               int out_fmt, fx_dstage_stats *st, const char *func)
{
    if (n <= 0) return FX_OK;
    fxn_k_mean_int<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(v, n, len, frac, e, f32, out_fmt, st);
    return fxn_check(func, "mean_int");
}

__global__ void fxn_k_mean_f32(float *f32, int64_t n, double len, int out_fmt,
                               fx_dstage_stats *st)
{
    unsigned long long nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(i, n)
    {
        const float y = fxn_stage(fxn_div(fxn_f2d(f32[i]), len), out_fmt);
        f32[i] = y;
        fx_f32_stat1(y, &fmax, &nonfinite);
    }
    fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gnk_mean_f32(float *f32, int64_t n, double len, int out_fmt,
                               fx_dstage_stats *st, const char *func)
{
    if (n <= 0) return FX_OK;
    fxn_k_mean_f32<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(f32, n, len, out_fmt, st);
    return fxn_check(func, "mean_f32");
}

// ---- softmax cross-entropy ------------------------------------------------------------------

// softmax_ce.c's row loop, one thread per row. exp/log/log1p are CUDA's (within 1-2 ulp of
// double, not glibc's): the one place where these kernels may differ from the CPU beyond
// summation order, by far less than the fp32 rounding of the results.
__global__ void fxn_k_softmax_ce(fx_dview logits, double xscale, const int32_t *labels,
                                 int64_t N, int64_t K, double gscale, double *row_loss, float *g, int g_fmt,
                                 fx_dstage_stats *st)
{
    unsigned long long nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(i, N)
    {
        double m = -INFINITY; // a NaN never wins; it reaches the sums and poisons the row
        for (int64_t j = 0; j < K; j++) {
            const double x = fxn_f2d(fx_dv_load_f32(logits, i * K + j, xscale));
            if (x > m) m = x;
        }
        const int32_t lab = labels[i];
        const double xl = fxn_f2d(fx_dv_load_f32(logits, i * K + lab, xscale));
        const double e_lab = exp(fxn_sub(xl, m));
        double others = 0.0;
        for (int64_t j = 0; j < K; j++)
            if (j != lab)
                others = fxn_add(others, exp(fxn_sub(fxn_f2d(fx_dv_load_f32(logits, i * K + j,
                                                                           xscale)), m)));
        const double sum = fxn_add(e_lab, others);
        row_loss[i] = fxn_sub(xl, m) > -1.0 ? log1p(fxn_div(others, e_lab))
                                            : fxn_sub(fxn_add(m, log(sum)), xl);
        if (g) {
            const double c = fxn_div(gscale, sum);
            for (int64_t j = 0; j < K; j++) {
                double v;
                if (j == lab)
                    v = fxn_mul(-others, c);
                else
                    v = fxn_mul(exp(fxn_sub(fxn_f2d(fx_dv_load_f32(logits, i * K + j, xscale)), m)),
                                c);
                const float y = fxn_stage(v, g_fmt);
                g[i * K + j] = y;
                fx_f32_stat1(y, &fmax, &nonfinite);
            }
        }
    }
    fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gnk_softmax_ce(const fx_dview *logits, const int32_t *labels, int64_t N,
                                 int64_t K, double gscale, double *row_loss, float *g,
                                 int g_fmt, fx_dstage_stats *st, const char *func)
{
    if (N <= 0) return FX_OK;
    // A shared-exponent input is m * 2^exp (the kernel widens m with this scale, as the CPU does).
    fxn_k_softmax_ce<<<fx_gpu_blocks(N), FX_GPU_THREADS>>>(*logits, fxn_scale(logits), labels, N,
                                                           K, gscale, row_loss, g, g_fmt, st);
    return fxn_check(func, "softmax_ce");
}

// ---- batch norm -----------------------------------------------------------------------------

// batchnorm.c's NN_BN_ROW_SUM, per channel: four running sums a0..a3 that continue from row
// to row (rows n = 0..N-1 of S elements); within a row, element s of the first S - S%4 goes to
// a[s % 4] in order of s, the last S%4 elements to a0; the result is (a0 + a1) + (a2 + a3).
// These are sequential chains of double additions, so the GPU keeps them: one warp per
// channel, in which all 32 lanes compute the terms of 128 elements at a time into shared
// memory and lanes 0..3 each run one chain over them (lane j: a_j). Compared with one thread
// per channel walking global memory, the loads are coalesced and off the chains' critical
// path; the additions, and so the bits, are the CPU's.
#define FXN_CHAIN_BLOCK 128
#define FXN_WARPS (FX_GPU_THREADS / 32)

// NS sums at once over the terms term(n, s, v) (v[0..NS-1]); every lane of the warp calls it
// and gets the finished sums. buf: this warp's NS * FXN_CHAIN_BLOCK doubles of shared memory.
template <int NS, class Term>
static __device__ void fxn_warp_chain_sums(int64_t N, int64_t S, const Term &term, double *buf,
                                           double *out)
{
    const int lane = threadIdx.x & 31;
    const int64_t S4 = S - S % 4;
    double acc[NS];
    for (int k = 0; k < NS; k++) acc[k] = 0.0;
    for (int64_t n = 0; n < N; n++) {
        for (int64_t s0 = 0; s0 < S4; s0 += FXN_CHAIN_BLOCK) {
            const int lim = (int)(S4 - s0 < FXN_CHAIN_BLOCK ? S4 - s0 : FXN_CHAIN_BLOCK);
            for (int e = lane; e < lim; e += 32) {
                double v[NS];
                term(n, s0 + e, v);
                for (int k = 0; k < NS; k++) buf[k * FXN_CHAIN_BLOCK + e] = v[k];
            }
            __syncwarp();
            if (lane < 4)
#pragma unroll 8
                for (int e = lane; e < lim; e += 4)
                    for (int k = 0; k < NS; k++)
                        acc[k] = fxn_add(acc[k], buf[k * FXN_CHAIN_BLOCK + e]);
            __syncwarp();
        }
        if (lane == 0)
            for (int64_t t = S4; t < S; t++) { // the row's tail, into a0
                double v[NS];
                term(n, t, v);
                for (int k = 0; k < NS; k++) acc[k] = fxn_add(acc[k], v[k]);
            }
    }
    for (int k = 0; k < NS; k++) {
        const double a1 = __shfl_sync(0xffffffffu, acc[k], 1),
                     a2 = __shfl_sync(0xffffffffu, acc[k], 2),
                     a3 = __shfl_sync(0xffffffffu, acc[k], 3),
                     a0 = __shfl_sync(0xffffffffu, acc[k], 0);
        out[k] = fxn_add(fxn_add(a0, a1), fxn_add(a2, a3));
    }
}

static __device__ __forceinline__ double fxn_ld(const fx_dview &v, int64_t i, double scale)
{
    return fxn_f2d(fx_dv_load_f32(v, i, scale));
}

// Channels per warp: c = global warp index, striding by the number of warps in the grid.
#define FXN_FOR_CHANNEL(c, C)                                                                  \
    for (int64_t c = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; c < (C);           \
         c += ((int64_t)gridDim.x * blockDim.x) / 32)

static inline unsigned fxn_channel_blocks(int64_t C)
{
    const int64_t b = (C + FXN_WARPS - 1) / FXN_WARPS;
    return (unsigned)(b < FX_GPU_MAX_BLOCKS ? b : FX_GPU_MAX_BLOCKS);
}

__global__ void fxn_k_bn_channels(fx_dview x, double sx, fx_dview gamma, double sg,
                                  fx_dview beta, double sb, const float *run_mean,
                                  const float *run_var, int64_t N, int64_t C, int64_t S,
                                  double eps, double *chan)
{
    __shared__ double bufs[FXN_WARPS][FXN_CHAIN_BLOCK];
    double *buf = bufs[threadIdx.x / 32];
    const bool lead = (threadIdx.x & 31) == 0;
    const double M = (double)(N * S);
    FXN_FOR_CHANNEL(c, C)
    {
        double mu, var;
        if (!run_mean) {
            auto xterm = [&](int64_t n, int64_t s, double *v) {
                v[0] = fxn_ld(x, (n * C + c) * S + s, sx);
            };
            fxn_warp_chain_sums<1>(N, S, xterm, buf, &mu);
            mu = fxn_div(mu, M);
            auto d2term = [&](int64_t n, int64_t s, double *v) {
                const double d = fxn_sub(fxn_ld(x, (n * C + c) * S + s, sx), mu);
                v[0] = fxn_mul(d, d);
            };
            fxn_warp_chain_sums<1>(N, S, d2term, buf, &var);
            var = fxn_div(var, M);
            if (lead) chan[c * FX_BN_FWD + FX_BN_UVAR] = fxn_div(fxn_mul(var, M), (double)(N * S - 1));
        } else {
            mu = fxn_f2d(run_mean[c]);
            var = fxn_f2d(run_var[c]);
            if (lead) chan[c * FX_BN_FWD + FX_BN_UVAR] = 0.0;
        }
        if (lead) {
            const double is = fxn_div(1.0, fxn_sqrt(fxn_add(var, eps)));
            chan[c * FX_BN_FWD + FX_BN_MU] = mu;
            chan[c * FX_BN_FWD + FX_BN_IS] = is;
            chan[c * FX_BN_FWD + FX_BN_A] = fxn_mul(is, fxn_ld(gamma, c, sg));
            chan[c * FX_BN_FWD + FX_BN_B] = fxn_ld(beta, c, sb);
        }
    }
}

extern "C" int fx_gnk_bn_channels(const fx_dview *x, const fx_dview *gamma, const fx_dview *beta,
                                  const float *run_mean, const float *run_var, int64_t N,
                                  int64_t C, int64_t S, double eps, double *chan,
                                  const char *func)
{
    if (C <= 0) return FX_OK;
    fxn_k_bn_channels<<<fxn_channel_blocks(C), FX_GPU_THREADS>>>(
        *x, fxn_scale(x), *gamma, fxn_scale(gamma), *beta, fxn_scale(beta), run_mean, run_var,
        N, C, S, eps, chan);
    return fxn_check(func, "bn_channels");
}

__global__ void fxn_k_bn_apply(fx_dview x, double sx, int64_t n, int64_t C, int64_t S,
                               const double *chan, int y_fmt, float *y, fx_dstage_stats *st)
{
    unsigned long long nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(i, n)
    {
        const double *ch = chan + ((i / S) % C) * FX_BN_FWD;
        const double v = fxn_add(fxn_mul(fxn_sub(fxn_ld(x, i, sx), ch[FX_BN_MU]), ch[FX_BN_A]),
                                 ch[FX_BN_B]);
        const float q = fxn_stage(v, y_fmt);
        y[i] = q;
        fx_f32_stat1(q, &fmax, &nonfinite);
    }
    fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gnk_bn_apply(const fx_dview *x, int64_t n, int64_t C, int64_t S,
                               const double *chan, int y_fmt, float *y, fx_dstage_stats *st,
                               const char *func)
{
    if (n <= 0) return FX_OK;
    fxn_k_bn_apply<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(*x, fxn_scale(x), n, C, S, chan, y_fmt,
                                                         y, st);
    return fxn_check(func, "bn_apply");
}

__global__ void fxn_k_bn_grad_channels(fx_dview x, double sx, fx_dview dy, double sdy_scale,
                                       fx_dview gamma, double sg, const float *save_mean,
                                       const float *save_invstd, int64_t N, int64_t C,
                                       int64_t S, float *dg, int g_fmt, fx_dstage_stats *gst,
                                       float *db, int b_fmt, fx_dstage_stats *bst, double *chan)
{
    __shared__ double bufs[FXN_WARPS][2 * FXN_CHAIN_BLOCK];
    double *buf = bufs[threadIdx.x / 32];
    const bool lead = (threadIdx.x & 31) == 0;
    const double M = (double)(N * S);
    unsigned long long gnf = 0, bnf = 0;
    unsigned gmax = 0, bmax = 0;
    FXN_FOR_CHANNEL(c, C)
    {
        const double mu = fxn_f2d(save_mean[c]), is = fxn_f2d(save_invstd[c]);
        // sum dy and sum dy * xhat, as the CPU's two chains per row (a and b)
        auto terms = [&](int64_t n, int64_t s, double *v) {
            const int64_t i = (n * C + c) * S + s;
            v[0] = fxn_ld(dy, i, sdy_scale);
            v[1] = fxn_mul(v[0], fxn_mul(fxn_sub(fxn_ld(x, i, sx), mu), is));
        };
        double sums[2];
        fxn_warp_chain_sums<2>(N, S, terms, buf, sums);
        const double sdy = sums[0], sdyx = sums[1];
        if (lead) {
            const float gq = fxn_stage(sdyx, g_fmt), bq = fxn_stage(sdy, b_fmt);
            dg[c] = gq;
            db[c] = bq;
            fx_f32_stat1(gq, &gmax, &gnf);
            fx_f32_stat1(bq, &bmax, &bnf);
            double *ch = chan + c * FX_BN_BWD;
            ch[FX_BNB_MU] = mu;
            ch[FX_BNB_IS] = is;
            ch[FX_BNB_K] = fxn_mul(fxn_ld(gamma, c, sg), is);
            ch[FX_BNB_MDY] = fxn_div(sdy, M);
            ch[FX_BNB_MDYX] = fxn_div(sdyx, M);
        }
    }
    fx_stats_f32(gst, gmax, gnf);
    fx_stats_f32(bst, bmax, bnf);
}

extern "C" int fx_gnk_bn_grad_channels(const fx_dview *x, const fx_dview *dy,
                                       const fx_dview *gamma, const float *save_mean,
                                       const float *save_invstd, int64_t N, int64_t C,
                                       int64_t S, float *dg, int g_fmt, fx_dstage_stats *gst,
                                       float *db, int b_fmt, fx_dstage_stats *bst, double *chan,
                                       const char *func)
{
    if (C <= 0) return FX_OK;
    fxn_k_bn_grad_channels<<<fxn_channel_blocks(C), FX_GPU_THREADS>>>(
        *x, fxn_scale(x), *dy, fxn_scale(dy), *gamma, fxn_scale(gamma), save_mean, save_invstd,
        N, C, S, dg, g_fmt, gst, db, b_fmt, bst, chan);
    return fxn_check(func, "bn_grad_channels");
}

__global__ void fxn_k_bn_grad_apply(fx_dview x, double sx, fx_dview dy, double sdy_scale,
                                    int64_t n, int64_t C, int64_t S, const double *chan,
                                    int dx_fmt, float *dx, fx_dstage_stats *st)
{
    unsigned long long nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(i, n)
    {
        const double *ch = chan + ((i / S) % C) * FX_BN_BWD;
        const double xhat = fxn_mul(fxn_sub(fxn_ld(x, i, sx), ch[FX_BNB_MU]), ch[FX_BNB_IS]);
        const double v =
            fxn_mul(ch[FX_BNB_K], fxn_sub(fxn_sub(fxn_ld(dy, i, sdy_scale), ch[FX_BNB_MDY]),
                                          fxn_mul(xhat, ch[FX_BNB_MDYX])));
        const float q = fxn_stage(v, dx_fmt);
        dx[i] = q;
        fx_f32_stat1(q, &fmax, &nonfinite);
    }
    fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gnk_bn_grad_apply(const fx_dview *x, const fx_dview *dy, int64_t n, int64_t C,
                                    int64_t S, const double *chan, int dx_fmt, float *dx,
                                    fx_dstage_stats *st, const char *func)
{
    if (n <= 0) return FX_OK;
    fxn_k_bn_grad_apply<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(*x, fxn_scale(x), *dy,
                                                              fxn_scale(dy), n, C, S, chan,
                                                              dx_fmt, dx, st);
    return fxn_check(func, "bn_grad_apply");
}

// ---- optimisers -----------------------------------------------------------------------------

__global__ void fxn_k_sgd(fx_dview grad, double sgr, fx_dview w, double sw, const float *master,
                          const float *buf, int64_t n, double lr, double momentum, double wd,
                          double gs, float *new_p, float *new_buf, fx_dstage_stats *st)
{
    unsigned long long nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(i, n)
    {
        const double g = fxn_ld(grad, i, sgr);
        const double p = master ? fxn_f2d(master[i]) : fxn_ld(w, i, sw);
        const double d = fxn_add(fxn_mul(g, gs), fxn_mul(wd, p));
        const double b = buf ? fxn_add(fxn_mul(momentum, fxn_f2d(buf[i])), d) : d;
        const float b32 = fxn_d2f(b); // the stored buffer, which the update uses
        new_buf[i] = b32;
        const float np = fxn_d2f(fxn_sub(p, fxn_mul(lr, fxn_f2d(b32))));
        new_p[i] = np;
        fx_f32_stat1(np, &fmax, &nonfinite);
    }
    fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gnk_sgd(const fx_dview *grad, const fx_dview *w, const float *master,
                          const float *buf, int64_t n, double lr, double momentum,
                          double weight_decay, double grad_scale, float *new_p, float *new_buf,
                          fx_dstage_stats *st, const char *func)
{
    if (n <= 0) return FX_OK;
    fxn_k_sgd<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(*grad, fxn_scale(grad), *w, fxn_scale(w),
                                                    master, buf, n, lr, momentum, weight_decay,
                                                    grad_scale, new_p, new_buf, st);
    return fxn_check(func, "sgd");
}

__global__ void fxn_k_adam(fx_dview grad, double sgr, fx_dview w, double sw, const float *master,
                           const float *m, const float *v, int64_t n, double step_size,
                           double beta1, double beta2, double eps, double sqrt_bc2, double wd,
                           double gs, float *new_p, float *new_m, float *new_v,
                           fx_dstage_stats *st)
{
    const double om1 = __dsub_rn(1.0, beta1), om2 = __dsub_rn(1.0, beta2); // finite by check
    unsigned long long nonfinite = 0;
    unsigned fmax = 0;
    FXN_FOR(i, n)
    {
        const double g = fxn_ld(grad, i, sgr);
        const double p = master ? fxn_f2d(master[i]) : fxn_ld(w, i, sw);
        const double d = fxn_add(fxn_mul(g, gs), fxn_mul(wd, p));
        const float m32 = fxn_d2f(fxn_add(fxn_mul(beta1, fxn_f2d(m[i])), fxn_mul(om1, d)));
        const float v32 =
            fxn_d2f(fxn_add(fxn_mul(beta2, fxn_f2d(v[i])), fxn_mul(fxn_mul(om2, d), d)));
        new_m[i] = m32;
        new_v[i] = v32;
        const double denom = fxn_add(fxn_div(fxn_sqrt(fxn_f2d(v32)), sqrt_bc2), eps);
        const float np =
            fxn_d2f(fxn_sub(p, fxn_div(fxn_mul(step_size, fxn_f2d(m32)), denom)));
        new_p[i] = np;
        fx_f32_stat1(np, &fmax, &nonfinite);
    }
    fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gnk_adam(const fx_dview *grad, const fx_dview *w, const float *master,
                           const float *m, const float *v, int64_t n, double lr_over_bc1,
                           double beta1, double beta2, double eps, double sqrt_bc2,
                           double weight_decay, double grad_scale, float *new_p, float *new_m,
                           float *new_v, fx_dstage_stats *st, const char *func)
{
    if (n <= 0) return FX_OK;
    fxn_k_adam<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(
        *grad, fxn_scale(grad), *w, fxn_scale(w), master, m, v, n, lr_over_bc1, beta1, beta2,
        eps, sqrt_bc2, weight_decay, grad_scale, new_p, new_m, new_v, st);
    return fxn_check(func, "adam");
}

__global__ void fxn_k_sr_round(const float *src, float *dst, int64_t n, int fp16, uint64_t seed,
                               uint64_t step)
{
    FXN_FOR(i, n) dst[i] = fx_sr_round_hd(fp16, src[i], fx_rng_u64(seed, step, (uint64_t)i));
}

extern "C" int fx_gnk_sr_round(const float *src, float *dst, int64_t n, int fp16, uint64_t seed,
                               uint64_t step, const char *func)
{
    if (n <= 0) return FX_OK;
    fxn_k_sr_round<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(src, dst, n, fp16, seed, step);
    return fxn_check(func, "sr_round");
}

// ---- loss scaling ---------------------------------------------------------------------------

__global__ void fxn_k_unscale(fx_dview g, double sg, int64_t n, float inv, float *out,
                              unsigned int *bad)
{
    unsigned b = 0;
    FXN_FOR(i, n)
    {
        const float y = fxn_fmul(fx_dv_load_f32(g, i, sg), inv);
        out[i] = y;
        b |= (__float_as_uint(y) & 0x7F800000u) == 0x7F800000u;
    }
    b = fx_warp_max_u32(b);
    if (fx_lane0() && b) atomicOr(bad, 1u);
}

extern "C" int fx_gnk_unscale(const fx_dview *g, int64_t n, float inv, float *out,
                              unsigned int *bad, const char *func)
{
    if (n <= 0) return FX_OK;
    fxn_k_unscale<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(*g, fxn_scale(g), n, inv, out, bad);
    return fxn_check(func, "unscale");
}
