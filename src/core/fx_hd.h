/* FX_HD marks the scalar format definitions that both the C library and the CUDA kernels
 * compile: `__host__ __device__` under nvcc, nothing under a C compiler. The GPU therefore runs
 * the very functions the CPU tests prove bit for bit (docs/formats.md), rather than a copy.
 *
 * Rules for FX_HD functions: static inline, plain C that is also valid C++ (no designated
 * initialisers, no compound literals), no libc beyond <math.h>/<string.h> basics that CUDA
 * provides in device code (memcpy, fabs, frexp, ldexp), no __builtin_* without a device
 * alternative (see fx_clz64 below). */
#ifndef FX_CORE_FX_HD_H
#define FX_CORE_FX_HD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define FX_HD __host__ __device__
#else
#define FX_HD
#endif

/* Count of leading zero bits of a nonzero 64-bit value. */
static inline FX_HD int fx_clz64(uint64_t v)
{
#ifdef __CUDA_ARCH__
    return __clzll((long long)v);
#else
    return __builtin_clzll(v);
#endif
}

/* Round a double to fp32 with round-to-odd, so that a following fp32 -> fp16/bf16 (or int16
 * mantissa) rounding is a single correct rounding of the double. Truncate toward zero, then set
 * the lowest bit if anything was discarded; branch-free because it runs once per element. The
 * float's magnitude bits are an integer, so "one step toward zero" is u - 1 (taken only when
 * |f| > |d|, so f != 0); an overflow to Inf steps back to FLT_MAX; a nonzero value below the
 * smallest subnormal becomes it; NaN and exact values pass unchanged.
 * (The double -> float conversion rounds to nearest even on both the CPU, without FTZ, and the
 * GPU, whose cvt.rn.f32.f64 keeps subnormals.) */
static inline FX_HD float fx_f64_to_f32_round_odd(double d)
{
    float f = (float)d;
    double back = (double)f;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t inexact = (uint32_t)((back != d) & (d == d));
    uint32_t away = (uint32_t)(fabs(back) > fabs(d));
    u = (u - away) | inexact;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
