/* The element-wise math (f32_math.h) on 16 lanes: AVX-512 F/DQ (the file is compiled with
 * the AVX-512 flags). The operations below are the scalar level's, one instruction each, so
 * the results are the same bits. */
#include "f32_kernels.h"
#include "f32_math.h"

#include <immintrin.h>

typedef __m512 VF;
typedef __m512i VI;
typedef __mmask16 VM;
typedef struct {
    __m512d lo, hi; /* lanes 0-7, 8-15 */
} VD;
#define FXM_N 16

static inline VF vf_set(float a) { return _mm512_set1_ps(a); }
static inline VF vf_loadu(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_storeu(float *p, VF v) { _mm512_storeu_ps(p, v); }
static inline VF vf_add(VF a, VF b) { return _mm512_add_ps(a, b); }
static inline VF vf_sub(VF a, VF b) { return _mm512_sub_ps(a, b); }
static inline VF vf_mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
static inline VF vf_div(VF a, VF b) { return _mm512_div_ps(a, b); }
static inline VF vf_fma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
static inline VF vf_sqrt(VF a) { return _mm512_sqrt_ps(a); }
static inline VF vf_and(VF a, VF b) { return _mm512_and_ps(a, b); }
static inline VF vf_or(VF a, VF b) { return _mm512_or_ps(a, b); }
static inline VF vf_xor(VF a, VF b) { return _mm512_xor_ps(a, b); }
static inline VM vf_lt(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline VM vf_le(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
static inline VM vf_gt(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline VM vf_ge(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
static inline VM vf_eq(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
static inline VM vf_unord(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }
static inline VM vm_and(VM a, VM b) { return (VM)(a & b); }
static inline VM vm_or(VM a, VM b) { return (VM)(a | b); }
static inline VF vf_sel(VM m, VF a, VF b) { return _mm512_mask_blend_ps(m, b, a); }
static inline VI vi_sel(VM m, VI a, VI b) { return _mm512_mask_blend_epi32(m, b, a); }
static inline VI vi_set(int32_t a) { return _mm512_set1_epi32(a); }
static inline VI vi_add(VI a, VI b) { return _mm512_add_epi32(a, b); }
static inline VI vi_sub(VI a, VI b) { return _mm512_sub_epi32(a, b); }
static inline VI vi_and(VI a, VI b) { return _mm512_and_si512(a, b); }
#define vi_sll(a, s) _mm512_slli_epi32((a), (s))
#define vi_sra(a, s) _mm512_srai_epi32((a), (s))
static inline VI vf_as_vi(VF a) { return _mm512_castps_si512(a); }
static inline VF vi_as_vf(VI a) { return _mm512_castsi512_ps(a); }
static inline VI vf_cvt_vi(VF a) { return _mm512_cvttps_epi32(a); }
static inline VF vi_cvt_vf(VI a) { return _mm512_cvtepi32_ps(a); }
/* the 8 entries in both halves; indices are in [0, 8) */
static inline VF vf_lut8(const float *t, VI i)
{
    return _mm512_permutexvar_ps(i, _mm512_broadcast_f32x8(_mm256_loadu_ps(t)));
}

/* the split maps' lane moves (f32_math_impl.h): compressed and expanded in registers (a
 * compress straight to memory is many times slower on Zen 4), with FXM_N floats stored or
 * loaded whatever the count */
static inline VM vm_not(VM m) { return (VM)~m; }
static inline int vm_count(VM m) { return __builtin_popcount((unsigned)m); }
static inline int vf_compress_store(float *p, VM m, VF v)
{
    _mm512_storeu_ps(p, _mm512_maskz_compress_ps(m, v));
    return vm_count(m);
}
static inline VF vf_expand_load(const float *p, VM m)
{
    return _mm512_maskz_expand_ps(m, _mm512_loadu_ps(p));
}

static inline VD vd_set(double a)
{
    VD r = {_mm512_set1_pd(a), _mm512_set1_pd(a)};
    return r;
}
#define FXM_VD2(name, op)                                                                        \
    static inline VD name(VD a, VD b)                                                            \
    {                                                                                            \
        VD r = {op(a.lo, b.lo), op(a.hi, b.hi)};                                                 \
        return r;                                                                                \
    }
FXM_VD2(vd_add, _mm512_add_pd)
FXM_VD2(vd_sub, _mm512_sub_pd)
FXM_VD2(vd_mul, _mm512_mul_pd)
FXM_VD2(vd_div, _mm512_div_pd)
FXM_VD2(vd_min, _mm512_min_pd)
FXM_VD2(vd_max, _mm512_max_pd)
#undef FXM_VD2
static inline VD vd_fma(VD a, VD b, VD c)
{
    VD r = {_mm512_fmadd_pd(a.lo, b.lo, c.lo), _mm512_fmadd_pd(a.hi, b.hi, c.hi)};
    return r;
}
static inline VD vd_sqrt(VD a)
{
    VD r = {_mm512_sqrt_pd(a.lo), _mm512_sqrt_pd(a.hi)};
    return r;
}
static inline VD vd_from_vf(VF a)
{
    VD r = {_mm512_cvtps_pd(_mm512_castps512_ps256(a)), _mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1))};
    return r;
}
static inline VF vf_from_vd(VD a)
{
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(a.lo)), _mm512_cvtpd_ps(a.hi), 1);
}
static inline VD vd_from_vi(VI a)
{
    VD r = {_mm512_cvtepi32_pd(_mm512_castsi512_si256(a)),
            _mm512_cvtepi32_pd(_mm512_extracti32x8_epi32(a, 1))};
    return r;
}
static inline __m512d vd_pow2i_half(__m512d k)
{
    const __m512i e = _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_cvtpd_epi32(k)),
                                       _mm512_set1_epi64(1023));
    return _mm512_castsi512_pd(_mm512_slli_epi64(e, 52));
}
static inline VD vd_pow2i(VD k)
{
    VD r = {vd_pow2i_half(k.lo), vd_pow2i_half(k.hi)};
    return r;
}

#define FXM_ENTRY fx_f32_math_avx512
#define FXM_KERNEL fx_f32_k_unary_avx512
#include "f32_math_impl.h"
