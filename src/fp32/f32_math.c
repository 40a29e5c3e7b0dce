/* The element-wise math (f32_math.h) on one value at a time: the portable level, and the
 * definition the SIMD levels reproduce bit for bit. fmaf and fma are libm's correctly rounded
 * fused operations (one rounding, as vfmadd on the SIMD levels); the compiler may not contract
 * anything else here (ISO C mode, and no FMA in this file's instruction set). */
#include "f32_kernels.h"
#include "f32_math.h"

#include <math.h>
#include <string.h>

typedef float VF;
typedef int32_t VI;
typedef int VM;
typedef double VD;
#define FXM_N 1

static inline VF vf_set(float a) { return a; }
static inline VF vf_loadu(const float *p) { return *p; }
static inline void vf_storeu(float *p, VF v) { *p = v; }
static inline VF vf_add(VF a, VF b) { return a + b; }
static inline VF vf_sub(VF a, VF b) { return a - b; }
static inline VF vf_mul(VF a, VF b) { return a * b; }
static inline VF vf_div(VF a, VF b) { return a / b; }
static inline VF vf_fma(VF a, VF b, VF c) { return fmaf(a, b, c); }
static inline VF vf_sqrt(VF a) { return sqrtf(a); }
static inline VI vf_as_vi(VF a)
{
    int32_t i;
    memcpy(&i, &a, sizeof i);
    return i;
}
static inline VF vi_as_vf(VI i)
{
    float a;
    memcpy(&a, &i, sizeof a);
    return a;
}
static inline VF vf_and(VF a, VF b) { return vi_as_vf(vf_as_vi(a) & vf_as_vi(b)); }
static inline VF vf_or(VF a, VF b) { return vi_as_vf(vf_as_vi(a) | vf_as_vi(b)); }
static inline VF vf_xor(VF a, VF b) { return vi_as_vf(vf_as_vi(a) ^ vf_as_vi(b)); }
static inline VM vf_lt(VF a, VF b) { return a < b; }
static inline VM vf_le(VF a, VF b) { return a <= b; }
static inline VM vf_gt(VF a, VF b) { return a > b; }
static inline VM vf_ge(VF a, VF b) { return a >= b; }
static inline VM vf_eq(VF a, VF b) { return a == b; }
static inline VM vf_unord(VF a, VF b) { return a != a || b != b; }
static inline VM vm_and(VM a, VM b) { return a & b; }
static inline VM vm_or(VM a, VM b) { return a | b; }
static inline VF vf_sel(VM m, VF a, VF b) { return m ? a : b; }
static inline VI vi_sel(VM m, VI a, VI b) { return m ? a : b; }
static inline VI vi_set(int32_t a) { return a; }
/* wrapping int32 arithmetic, as the vector instructions (signed overflow would be undefined) */
static inline VI vi_add(VI a, VI b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
static inline VI vi_sub(VI a, VI b) { return (int32_t)((uint32_t)a - (uint32_t)b); }
static inline VI vi_and(VI a, VI b) { return a & b; }
static inline VI vi_sll(VI a, int s) { return (int32_t)((uint32_t)a << s); }
/* arithmetic shift: implementation-defined for negative values in C, arithmetic in every
 * compiler this builds with (gcc, clang), as vpsrad */
static inline VI vi_sra(VI a, int s) { return a >> s; }
static inline VI vf_cvt_vi(VF a) { return (int32_t)a; }
static inline VF vi_cvt_vf(VI a) { return (float)a; }
static inline VF vf_lut8(const float *t, VI i) { return t[i]; }
/* the split maps' lane moves (f32_math_impl.h): one lane, kept or not */
static inline VM vm_not(VM m) { return !m; }
static inline int vm_count(VM m) { return m != 0; }
static inline int vf_compress_store(float *p, VM m, VF v)
{
    *p = v;
    return m != 0;
}
static inline VF vf_expand_load(const float *p, VM m) { return m ? *p : 0.0f; }

static inline VD vd_set(double a) { return a; }
static inline VD vd_add(VD a, VD b) { return a + b; }
static inline VD vd_sub(VD a, VD b) { return a - b; }
static inline VD vd_mul(VD a, VD b) { return a * b; }
static inline VD vd_div(VD a, VD b) { return a / b; }
static inline VD vd_fma(VD a, VD b, VD c) { return fma(a, b, c); }
static inline VD vd_sqrt(VD a) { return sqrt(a); }
static inline VD vd_min(VD a, VD b) { return a < b ? a : b; }
static inline VD vd_max(VD a, VD b) { return a > b ? a : b; }
static inline VD vd_from_vf(VF a) { return (double)a; }
static inline VF vf_from_vd(VD a) { return (float)a; }
static inline VD vd_from_vi(VI a) { return (double)a; }
static inline VD vd_pow2i(VD k)
{
    const uint64_t b = (uint64_t)((int64_t)k + 1023) << 52;
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

#define FXM_ENTRY fx_f32_math_scalar
#define FXM_KERNEL fx_f32_k_unary_scalar
#include "f32_math_impl.h"
