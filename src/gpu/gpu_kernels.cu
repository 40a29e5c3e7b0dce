// Elementwise, reduction, conversion and quantisation kernels of the CUDA backend. Each
// element goes through the same scalar definitions as the CPU (flex_math.h, fp16_scalar.h,
// bf16_scalar.h are FX_HD), so conversions and integer results are bit-identical to the CPU
// scalar backend. Statistics for the write path are reduced in each kernel's epilogue (warp
// shuffles, then one atomic per warp), never in an extra pass over the data.
#include "gpu_common.cuh"

// ---- float elementwise ----------------------------------------------------------------------

// A NaN result with the x86 (SSE/AVX) rule the CPU paths follow: an input NaN propagates,
// quieted and with its sign (the first operand's when both are NaN); an invalid operation
// (Inf - Inf, 0 * Inf) gives the default NaN 0xFFC00000. CUDA's arithmetic returns the
// canonical 0x7FFFFFFF instead, whose sign differs.
__device__ static inline float fx_x86_nan(float x, float b)
{
    if (x != x) return __uint_as_float(__float_as_uint(x) | 0x00400000u);
    if (b != b) return __uint_as_float(__float_as_uint(b) | 0x00400000u);
    return __uint_as_float(0xFFC00000u);
}

// The IEEE operations are spelled with the _rn intrinsics so that nvcc can never contract them
// into FMAs or change their rounding: one fp32 operation per element, as on the CPU.
__global__ void fx_k_float_ew(int op, fx_dview a, fx_dview b, double sa, double sb, float s,
                              float *out, int64_t n, fx_dstage_stats *st)
{
    unsigned fmax = 0;
    unsigned long long nonfinite = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float x = fx_dv_load_f32(a, i, sa);
        float y, bv = 0.0f;
        switch (op) {
        case FX_GEW_ADD: bv = fx_dv_load_f32(b, i, sb); y = __fadd_rn(x, bv); break;
        case FX_GEW_SUB: bv = fx_dv_load_f32(b, i, sb); y = __fsub_rn(x, bv); break;
        case FX_GEW_MUL: bv = fx_dv_load_f32(b, i, sb); y = __fmul_rn(x, bv); break;
        case FX_GEW_SCALE: bv = s; y = __fmul_rn(x, s); break;
        case FX_GEW_RELU: y = (x > 0.0f || x != x) ? x : 0.0f; break;
        default: y = x; break; // COPY: the widened value, bits kept
        }
        if (y != y && op != FX_GEW_RELU && op != FX_GEW_COPY) y = fx_x86_nan(x, bv);
        out[i] = y;
        if (st) fx_f32_stat1(y, &fmax, &nonfinite);
    }
    if (st) fx_stats_f32(st, fmax, nonfinite);
}

static double fx_dv_scale(const fx_dview *v)
{
    return (v->fmt == FMT_FLEX16_5 || v->fmt == FMT_DFP16) ? ldexp(1.0, v->exp) : 1.0;
}

extern "C" int fx_gk_float_ew(int op, const fx_dview *a, const fx_dview *b, float scalar,
                              float *out, int64_t n, fx_dstage_stats *st, const char *func)
{
    if (n <= 0) return FX_OK;
    const fx_dview bb = b ? *b : *a;
    fx_k_float_ew<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(op, *a, bb, fx_dv_scale(a),
                                                        fx_dv_scale(&bb), scalar, out, n, st);
    return fx_gpu_launch_check(func, "float_ew");
}

// ---- integer elementwise --------------------------------------------------------------------

// Exact int64 results, the same expressions as src/flex/intops_scalar.c.
__global__ void fx_k_int_ew(int op, fx_dview a, fx_dview b, int ec, int64_t smant, int64_t *out,
                            int64_t n, fx_dstage_stats *st)
{
    unsigned long long mx = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t x = fx_dv_load_i16(a, i);
        int64_t y;
        switch (op) {
        case FX_GEW_NEG: y = -x; break;
        case FX_GEW_RELU: y = x > 0 ? x : 0; break;
        case FX_GEW_ADD:
            y = fx_align_to(x, a.exp, ec) + fx_align_to(fx_dv_load_i16(b, i), b.exp, ec);
            break;
        case FX_GEW_SUB:
            y = fx_align_to(x, a.exp, ec) - fx_align_to(fx_dv_load_i16(b, i), b.exp, ec);
            break;
        case FX_GEW_MUL: y = (int64_t)((int32_t)x * (int32_t)fx_dv_load_i16(b, i)); break;
        case FX_GEW_SCALE: y = x * smant; break;
        default: y = x; break; // COPY
        }
        out[i] = y;
        const unsigned long long ay = fx_uabs64(y);
        mx = ay > mx ? ay : mx;
    }
    fx_stats_imax(st, mx);
}

extern "C" int fx_gk_int_ew(int op, const fx_dview *a, const fx_dview *b, int ec, int64_t smant,
                            int64_t *out, int64_t n, fx_dstage_stats *st, const char *func)
{
    if (n <= 0) return FX_OK;
    fx_k_int_ew<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(op, *a, b ? *b : *a, ec, smant, out, n,
                                                      st);
    return fx_gpu_launch_check(func, "int_ew");
}

// fx_gk_int_addsub_dev: the operand whose exponent is larger by more than FX_ALIGN_SPAN, if
// any, is checked for a nonzero element (every thread reads both exponents and returns at once
// when the gap is smaller, the usual case).
// st->nonzero |= 1 if any of the n int16 elements of a is nonzero (every lane calls it).
static __device__ __forceinline__ void fx_any_nonzero_into(const fx_dview &a, int64_t n,
                                                           fx_dstage_stats *st)
{
    unsigned nz = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        nz |= fx_dv_load_i16(a, i) != 0;
    nz = fx_warp_max_u32(nz);
    if (fx_lane0() && nz) atomicOr(&st->nonzero, 1u);
}

__global__ void fx_k_addsub_zero_check(fx_dview a, fx_dview b, int64_t n, fx_dstage_stats *aux)
{
    const int ea = fx_dv_exp(a), eb = fx_dv_exp(b);
    const int gap = ea > eb ? ea - eb : eb - ea;
    if (gap <= FX_ALIGN_SPAN) return; // the same for every thread: whole warps return
    fx_any_nonzero_into(ea > eb ? a : b, n, aux);
}

// The op itself: each thread makes gpu_dispatch.c's choice from the exponents and the zero
// check, then the element as fx_k_int_ew does.
__global__ void fx_k_int_addsub_dev(int sub, fx_dview a, fx_dview b, int64_t *out, int64_t n,
                                    fx_dstage_stats *st, const fx_dstage_stats *aux, int *ec_out)
{
    const int ea = fx_dv_exp(a), eb = fx_dv_exp(b);
    const int gap = ea > eb ? ea - eb : eb - ea;
    // 0: aligned a +- b at ec; 1: a alone (b is the zero one); 2: +-b alone (a is)
    int mode = 0, ec = fx_align_exp(ea, eb);
    if (gap > FX_ALIGN_SPAN && !aux->nonzero) {
        mode = ea > eb ? 2 : 1;
        ec = ea > eb ? eb : ea;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) *ec_out = ec;
    unsigned long long mx = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t y;
        if (mode == 1) {
            y = fx_dv_load_i16(a, i);
        } else if (mode == 2) {
            y = fx_dv_load_i16(b, i);
            if (sub) y = -y;
        } else {
            const int64_t x = fx_align_to(fx_dv_load_i16(a, i), ea, ec);
            const int64_t z = fx_align_to(fx_dv_load_i16(b, i), eb, ec);
            y = sub ? x - z : x + z;
        }
        out[i] = y;
        const unsigned long long ay = fx_uabs64(y);
        mx = ay > mx ? ay : mx;
    }
    fx_stats_imax(st, mx);
}

extern "C" int fx_gk_int_addsub_dev(int op, const fx_dview *a, const fx_dview *b, int64_t *out,
                                    int64_t n, fx_dstage_stats *st, fx_dstage_stats *aux,
                                    int *ec_out, const char *func)
{
    const unsigned blocks = n > 0 ? fx_gpu_blocks(n) : 1; // ec_out is written even for n == 0
    fx_k_addsub_zero_check<<<blocks, FX_GPU_THREADS>>>(*a, *b, n, aux);
    int rc = fx_gpu_launch_check(func, "addsub_zero_check");
    if (rc) return rc;
    fx_k_int_addsub_dev<<<blocks, FX_GPU_THREADS>>>(op == FX_GEW_SUB, *a, *b, out, n, st, aux,
                                                    ec_out);
    return fx_gpu_launch_check(func, "int_addsub_dev");
}

__global__ void fx_k_exp_eval(fx_dexp x, int *out) { *out = fx_dexp_value(x); }

extern "C" int fx_gk_exp_eval(fx_dexp x, int *out, const char *func)
{
    fx_k_exp_eval<<<1, 1>>>(x, out);
    return fx_gpu_launch_check(func, "exp_eval");
}

__global__ void fx_k_any_nonzero(fx_dview a, int64_t n, fx_dstage_stats *st)
{
    fx_any_nonzero_into(a, n, st);
}

extern "C" int fx_gk_any_nonzero(const fx_dview *a, int64_t n, fx_dstage_stats *st,
                                 const char *func)
{
    if (n <= 0) return FX_OK;
    fx_k_any_nonzero<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(*a, n, st);
    return fx_gpu_launch_check(func, "any_nonzero");
}

// ---- sum ------------------------------------------------------------------------------------

// One block per output (grid-stride over outputs). Thread t adds terms k = t, t + 256, ... in
// order; the 256 partial sums are then combined by a balanced tree in shared memory. Integer
// sums are exact, so their order does not matter; fp32 sums have D <= ceil(len/256) + 8
// roundings per term (error <= gamma_D * sum |x|).
template <typename Acc>
__global__ void fx_k_sum(fx_dview a, int int_compute, int64_t outer, int64_t len, int64_t inner,
                         double scale, Acc *out, fx_dstage_stats *st)
{
    __shared__ Acc part[FX_GPU_THREADS];
    const int64_t nout = outer * inner;
    unsigned long long imax = 0;
    unsigned fmax = 0;
    unsigned long long nonfinite = 0;
    for (int64_t j = blockIdx.x; j < nout; j += gridDim.x) {
        const int64_t o = j / inner, i = j - o * inner;
        Acc acc = 0;
        for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
            const int64_t idx = (o * len + k) * inner + i;
            if (int_compute)
                acc += (Acc)fx_dv_load_i16(a, idx);
            else
                acc = (Acc)(acc + (Acc)fx_dv_load_f32(a, idx, scale));
        }
        part[threadIdx.x] = acc;
        __syncthreads();
        for (int w = FX_GPU_THREADS / 2; w > 0; w >>= 1) {
            if ((int)threadIdx.x < w) part[threadIdx.x] = part[threadIdx.x] + part[threadIdx.x + w];
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            const Acc r = part[0];
            out[j] = r;
            if (int_compute) {
                const unsigned long long ar = fx_uabs64((int64_t)r);
                imax = ar > imax ? ar : imax;
            } else {
                fx_f32_stat1((float)r, &fmax, &nonfinite);
            }
        }
        __syncthreads(); // part[] is reused by the next output
    }
    if (int_compute)
        fx_stats_imax(st, imax);
    else
        fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gk_sum(const fx_dview *a, int int_compute, int64_t outer, int64_t len,
                         int64_t inner, void *out, fx_dstage_stats *st, const char *func)
{
    const int64_t nout = outer * inner;
    if (nout <= 0) return FX_OK;
    const unsigned blocks = (unsigned)(nout < 65535 ? nout : 65535);
    if (int_compute)
        fx_k_sum<int64_t><<<blocks, FX_GPU_THREADS>>>(*a, 1, outer, len, inner, 1.0,
                                                      (int64_t *)out, st);
    else
        fx_k_sum<float><<<blocks, FX_GPU_THREADS>>>(*a, 0, outer, len, inner, fx_dv_scale(a),
                                                    (float *)out, st);
    return fx_gpu_launch_check(func, "sum");
}

// ---- statistics of a cuBLAS stage -----------------------------------------------------------

__global__ void fx_k_maxabs_f32(const float *src, int64_t n, fx_dstage_stats *st)
{
    unsigned fmax = 0;
    unsigned long long nonfinite = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        fx_f32_stat1(src[i], &fmax, &nonfinite);
    fx_stats_f32(st, fmax, nonfinite);
}

extern "C" int fx_gk_maxabs_f32(const float *src, int64_t n, fx_dstage_stats *st,
                                const char *func)
{
    if (n <= 0) return FX_OK;
    fx_k_maxabs_f32<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(src, n, st);
    return fx_gpu_launch_check(func, "maxabs_f32");
}

// ---- quantisation (the write path's kernels) ------------------------------------------------

// Merge one thread's quantisation statistics into q (all lanes call it).
static __device__ __forceinline__ void fx_qstats_merge_dev(fx_dquant_stats *q,
                                                           unsigned long long sat,
                                                           unsigned long long nonfinite,
                                                           unsigned long long under,
                                                           unsigned long long in_imax,
                                                           unsigned in_fmax, unsigned max_out)
{
    sat = fx_warp_sum_u64(sat);
    nonfinite = fx_warp_sum_u64(nonfinite);
    under = fx_warp_sum_u64(under);
    in_imax = fx_warp_max_u64(in_imax);
    in_fmax = fx_warp_max_u32(in_fmax);
    max_out = fx_warp_max_u32(max_out);
    if (!fx_lane0()) return;
    if (sat) atomicAdd(&q->saturated, sat);
    if (nonfinite) atomicAdd(&q->nonfinite, nonfinite);
    if (under) atomicAdd(&q->underflow, under);
    if (in_imax) atomicMax(&q->in_imax, in_imax);
    if (in_fmax) atomicMax(&q->in_fmax, in_fmax);
    if (max_out) atomicMax(&q->max_out, max_out);
}

// fx_flex_quant_f32_scalar per element: fx_quant1_f32 (flex_math.h), draws keyed by the
// element's index in the write (index0 = 0: the whole write is one launch).
__global__ void fx_k_quant_f32(const float *src, int64_t n, double scale, const int *e_dev,
                               const int *only_if, int stochastic, uint64_t seed,
                               uint64_t counter, fx_dview dst, int keep, fx_dquant_stats *q)
{
    if (only_if && !*only_if) return; // a recompute that was not needed
    if (e_dev) scale = ldexp(1.0, -*e_dev); /* exact: a power of two in double's range */
    unsigned long long sat = 0, nonfinite = 0, under = 0;
    unsigned in_fmax = 0, max_out = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float x = src[i];
        const double u = stochastic ? fx_rng_unit(seed, counter, (uint64_t)i) : -1.0;
        int flags = 0;
        const int32_t m = fx_quant1_f32(x, scale, u, &flags);
        if (flags & FX_Q_NONFINITE) {
            nonfinite++;
        } else {
            const unsigned ax = fx_f32_to_bits(x) & 0x7FFFFFFFu;
            in_fmax = ax > in_fmax ? ax : in_fmax;
            sat += (flags & FX_Q_SATURATED) != 0;
            under += (flags & FX_Q_UNDERFLOW) != 0;
        }
        const unsigned am = (unsigned)(m < 0 ? -m : m);
        max_out = am > max_out ? am : max_out;
        if (keep) ((int16_t *)dst.base)[fx_dv_offset(dst, i)] = (int16_t)m;
    }
    fx_qstats_merge_dev(q, sat, nonfinite, under, 0, in_fmax, max_out);
}

static int fx_quant_f32_launch(const float *src, int64_t n, int e, const int *e_dev,
                               const int *only_if, const fx_rounding *r, const fx_dview *dst,
                               fx_dquant_stats *q, const char *func)
{
    if (n <= 0) return FX_OK;
    const int stochastic = r && r->mode == FX_ROUND_STOCHASTIC;
    fx_dview d;
    if (dst)
        d = *dst;
    else
        memset(&d, 0, sizeof d);
    fx_k_quant_f32<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(
        src, n, ldexp(1.0, -e), e_dev, only_if, stochastic, stochastic ? r->seed : 0,
        stochastic ? r->counter : 0, d, dst != NULL, q);
    return fx_gpu_launch_check(func, "quant_f32");
}

extern "C" int fx_gk_quant_f32(const float *src, int64_t n, int e, const int *e_dev,
                               const fx_rounding *r, const fx_dview *dst, fx_dquant_stats *q,
                               const char *func)
{
    return fx_quant_f32_launch(src, n, e, e_dev, NULL, r, dst, q, func);
}

extern "C" int fx_gk_quant_f32_if(const float *src, int64_t n, const int *e_dev,
                                  const int *only_if, const fx_rounding *r, const fx_dview *dst,
                                  fx_dquant_stats *q, const char *func)
{
    return fx_quant_f32_launch(src, n, 0, e_dev, only_if, r, dst, q, func);
}

// fx_flex_quant_i64_scalar per element: fx_requant (flex_math.h).
__global__ void fx_k_quant_i64(const int64_t *src, int64_t n, fx_dexp src_exp, int e,
                               const int *e_dev, const int *only_if, fx_dview dst, int keep,
                               fx_dquant_stats *q)
{
    if (only_if && !*only_if) return; // a recompute that was not needed
    const int shift = (e_dev ? *e_dev : e) - fx_dexp_value(src_exp); /* within +-2^17 */
    unsigned long long sat = 0, under = 0, in_imax = 0;
    unsigned max_out = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t v = src[i];
        const unsigned long long av = fx_uabs64(v);
        in_imax = av > in_imax ? av : in_imax;
        int64_t s = 0;
        const int32_t m = fx_requant(v, shift, &s);
        sat += (unsigned long long)s;
        under += (m == 0 && v != 0);
        const unsigned am = (unsigned)(m < 0 ? -m : m);
        max_out = am > max_out ? am : max_out;
        if (keep) ((int16_t *)dst.base)[fx_dv_offset(dst, i)] = (int16_t)m;
    }
    fx_qstats_merge_dev(q, sat, 0, under, in_imax, 0, max_out);
}

static int fx_quant_i64_launch(const int64_t *src, int64_t n, fx_dexp src_exp, int e,
                               const int *e_dev, const int *only_if, const fx_dview *dst,
                               fx_dquant_stats *q, const char *func)
{
    if (n <= 0) return FX_OK;
    fx_dview d;
    if (dst)
        d = *dst;
    else
        memset(&d, 0, sizeof d);
    fx_k_quant_i64<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(src, n, src_exp, e, e_dev, only_if, d,
                                                         dst != NULL, q);
    return fx_gpu_launch_check(func, "quant_i64");
}

extern "C" int fx_gk_quant_i64(const int64_t *src, int64_t n, fx_dexp src_exp, int e,
                               const int *e_dev, const fx_dview *dst, fx_dquant_stats *q,
                               const char *func)
{
    return fx_quant_i64_launch(src, n, src_exp, e, e_dev, NULL, dst, q, func);
}

extern "C" int fx_gk_quant_i64_if(const int64_t *src, int64_t n, fx_dexp src_exp,
                                  const int *e_dev, const int *only_if, const fx_dview *dst,
                                  fx_dquant_stats *q, const char *func)
{
    return fx_quant_i64_launch(src, n, src_exp, 0, e_dev, only_if, dst, q, func);
}

// shared_exp.c's fx_rescale_storage per element: the mantissa requantised by fx_requant.
__global__ void fx_k_rescale_i16(int16_t *m, int64_t n, int shift, unsigned long long *sat)
{
    unsigned long long s_total = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t s = 0;
        m[i] = (int16_t)fx_requant((int64_t)m[i], shift, &s);
        s_total += (unsigned long long)s;
    }
    s_total = fx_warp_sum_u64(s_total);
    if (fx_lane0() && s_total) atomicAdd(sat, s_total);
}

extern "C" int fx_gk_rescale_i16(int16_t *m, int64_t n, int shift, unsigned long long *sat,
                                 const char *func)
{
    if (n <= 0) return FX_OK;
    fx_k_rescale_i16<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(m, n, shift, sat);
    return fx_gpu_launch_check(func, "rescale_i16");
}

// store.c's DFP16 choice (fx_dfp16_write_exp, the shared definition), from the stage's
// statistics.
__global__ void fx_k_dfp16_exp(const fx_dstage_stats *st, int f32, fx_dexp stage_exp, int cur_e,
                               int lo, int hi, int *e_out, int *cell)
{
    const int e = fx_dfp16_write_exp(f32, (double)__uint_as_float(st->fmax), st->imax,
                                     f32 ? 0 : fx_dexp_value(stage_exp), cur_e, lo, hi, NULL);
    *e_out = e;
    if (cell) *cell = e;
}

extern "C" int fx_gk_dfp16_exp(const fx_dstage_stats *st, int f32, fx_dexp stage_exp, int cur_e,
                               int lo, int hi, int *e_out, int *cell, const char *func)
{
    fx_k_dfp16_exp<<<1, 1>>>(st, f32, stage_exp, cur_e, lo, hi, e_out, cell);
    return fx_gpu_launch_check(func, "dfp16_exp");
}

// store.c's recompute decision (fx_recompute_exp, the shared definition) from the statistics
// of the rounding at e. The real maximum is formed as the host forms it from a stage's
// statistics (gpu_dispatch.c fx_gpu_stage_true_max): the fp32 maximum, or ldexp of the
// integer maximum.
__global__ void fx_k_recompute_exp(const fx_dquant_stats *q, int f32, fx_dexp stage_exp, int e,
                                   int lo, int hi, int *e_out, int *redo, int *cell)
{
    const double true_max = f32 ? (double)__uint_as_float(q->in_fmax)
                                : ldexp((double)q->in_imax, fx_dexp_value(stage_exp));
    const int r = fx_recompute_exp((int64_t)q->saturated, true_max, e, lo, hi);
    *e_out = r;
    *redo = r != e;
    *cell = r;
}

extern "C" int fx_gk_recompute_exp(const fx_dquant_stats *q, int f32, fx_dexp stage_exp, int e,
                                   int lo, int hi, int *e_out, int *redo, int *cell,
                                   const char *func)
{
    fx_k_recompute_exp<<<1, 1>>>(q, f32, stage_exp, e, lo, hi, e_out, redo, cell);
    return fx_gpu_launch_check(func, "recompute_exp");
}

// ---- float stores ---------------------------------------------------------------------------

// store.c's fx_write_float per element: fp32 -> format through the shared definitions; an
// int64 stage through double (exact) and fp32 (round-to-odd for 16-bit formats).
__global__ void fx_k_store_float(const float *f32, const int64_t *i64, fx_dexp exp, int64_t n,
                                 fx_dview dst)
{
    const int odd = dst.fmt != FMT_FP32;
    const double scale = f32 ? 1.0 : ldexp(1.0, fx_dexp_value(exp));
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float x;
        if (f32) {
            x = f32[i];
        } else {
            const double d = (double)i64[i] * scale;
            x = odd ? fx_f64_to_f32_round_odd(d) : (float)d;
        }
        const int64_t off = fx_dv_offset(dst, i);
        const uint32_t u = fx_f32_to_bits(x);
        switch (dst.fmt) {
        case FMT_FP16: ((uint16_t *)dst.base)[off] = fx_fp16_from_bits(u); break;
        case FMT_BF16: ((uint16_t *)dst.base)[off] = fx_bf16_from_bits(u); break;
        default: ((uint32_t *)dst.base)[off] = u; break; // bits: NaN payloads kept
        }
    }
}

extern "C" int fx_gk_store_float(const float *f32, const int64_t *i64, fx_dexp exp, int64_t n,
                                 const fx_dview *dst, const char *func)
{
    if (n <= 0) return FX_OK;
    fx_k_store_float<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(f32, i64, exp, n, *dst);
    return fx_gpu_launch_check(func, "store_float");
}

// ---- raw gather -----------------------------------------------------------------------------

__global__ void fx_k_gather(fx_dview v, int64_t n, void *dst)
{
    const bool four = v.fmt == FMT_FP32;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t off = fx_dv_offset(v, i);
        if (four)
            ((uint32_t *)dst)[i] = ((const uint32_t *)v.base)[off];
        else
            ((uint16_t *)dst)[i] = ((const uint16_t *)v.base)[off];
    }
}

extern "C" int fx_gk_gather(const fx_dview *v, int64_t n, void *dst, const char *func)
{
    if (n <= 0) return FX_OK;
    fx_k_gather<<<fx_gpu_blocks(n), FX_GPU_THREADS>>>(*v, n, dst);
    return fx_gpu_launch_check(func, "gather");
}
