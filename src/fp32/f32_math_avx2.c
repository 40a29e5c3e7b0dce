/* The element-wise math (f32_math.h) on 8 lanes: AVX2 + FMA (the file is compiled with the
 * AVX2 flags). The operations below are the scalar level's, one instruction each, so the
 * results are the same bits. */
#include "f32_kernels.h"
#include "f32_math.h"

#include <immintrin.h>

typedef __m256 VF;
typedef __m256i VI;
typedef __m256 VM; /* all-ones lanes where true */
typedef struct {
    __m256d lo, hi; /* lanes 0-3, 4-7 */
} VD;
#define FXM_N 8

static inline VF vf_set(float a) { return _mm256_set1_ps(a); }
static inline VF vf_loadu(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_storeu(float *p, VF v) { _mm256_storeu_ps(p, v); }
static inline VF vf_add(VF a, VF b) { return _mm256_add_ps(a, b); }
static inline VF vf_sub(VF a, VF b) { return _mm256_sub_ps(a, b); }
static inline VF vf_mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
static inline VF vf_div(VF a, VF b) { return _mm256_div_ps(a, b); }
static inline VF vf_fma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
static inline VF vf_sqrt(VF a) { return _mm256_sqrt_ps(a); }
static inline VF vf_and(VF a, VF b) { return _mm256_and_ps(a, b); }
static inline VF vf_or(VF a, VF b) { return _mm256_or_ps(a, b); }
static inline VF vf_xor(VF a, VF b) { return _mm256_xor_ps(a, b); }
static inline VM vf_lt(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline VM vf_le(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
static inline VM vf_gt(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline VM vf_ge(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline VM vf_eq(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
static inline VM vf_unord(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }
static inline VM vm_and(VM a, VM b) { return _mm256_and_ps(a, b); }
static inline VM vm_or(VM a, VM b) { return _mm256_or_ps(a, b); }
static inline VF vf_sel(VM m, VF a, VF b) { return _mm256_blendv_ps(b, a, m); }
static inline VI vi_sel(VM m, VI a, VI b)
{
    return _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(b), _mm256_castsi256_ps(a), m));
}
static inline VI vi_set(int32_t a) { return _mm256_set1_epi32(a); }
static inline VI vi_add(VI a, VI b) { return _mm256_add_epi32(a, b); }
static inline VI vi_sub(VI a, VI b) { return _mm256_sub_epi32(a, b); }
static inline VI vi_and(VI a, VI b) { return _mm256_and_si256(a, b); }
#define vi_sll(a, s) _mm256_slli_epi32((a), (s))
#define vi_sra(a, s) _mm256_srai_epi32((a), (s))
static inline VI vf_as_vi(VF a) { return _mm256_castps_si256(a); }
static inline VF vi_as_vf(VI a) { return _mm256_castsi256_ps(a); }
static inline VI vf_cvt_vi(VF a) { return _mm256_cvttps_epi32(a); }
static inline VF vi_cvt_vf(VI a) { return _mm256_cvtepi32_ps(a); }
static inline VF vf_lut8(const float *t, VI i) { return _mm256_permutevar8x32_ps(_mm256_loadu_ps(t), i); }

/* The split maps' lane moves (f32_math_impl.h). AVX2 has no compress or expand, so each is a
 * lane permutation looked up by the mask's 8 bits, its eight source lanes packed as nibbles
 * (lane j in bits 4j..4j+3). Compress: lane j takes the j-th set lane of m (0 beyond the
 * count). Expand: a set lane j takes the dense element whose index is the number of set lanes
 * below j; the other lanes are cleared. */
static const uint32_t FXM_COMPRESS_LANES[256] = {
    0x00000000, 0x00000000, 0x00000001, 0x00000010, 0x00000002, 0x00000020, 0x00000021, 0x00000210,
    0x00000003, 0x00000030, 0x00000031, 0x00000310, 0x00000032, 0x00000320, 0x00000321, 0x00003210,
    0x00000004, 0x00000040, 0x00000041, 0x00000410, 0x00000042, 0x00000420, 0x00000421, 0x00004210,
    0x00000043, 0x00000430, 0x00000431, 0x00004310, 0x00000432, 0x00004320, 0x00004321, 0x00043210,
    0x00000005, 0x00000050, 0x00000051, 0x00000510, 0x00000052, 0x00000520, 0x00000521, 0x00005210,
    0x00000053, 0x00000530, 0x00000531, 0x00005310, 0x00000532, 0x00005320, 0x00005321, 0x00053210,
    0x00000054, 0x00000540, 0x00000541, 0x00005410, 0x00000542, 0x00005420, 0x00005421, 0x00054210,
    0x00000543, 0x00005430, 0x00005431, 0x00054310, 0x00005432, 0x00054320, 0x00054321, 0x00543210,
    0x00000006, 0x00000060, 0x00000061, 0x00000610, 0x00000062, 0x00000620, 0x00000621, 0x00006210,
    0x00000063, 0x00000630, 0x00000631, 0x00006310, 0x00000632, 0x00006320, 0x00006321, 0x00063210,
    0x00000064, 0x00000640, 0x00000641, 0x00006410, 0x00000642, 0x00006420, 0x00006421, 0x00064210,
    0x00000643, 0x00006430, 0x00006431, 0x00064310, 0x00006432, 0x00064320, 0x00064321, 0x00643210,
    0x00000065, 0x00000650, 0x00000651, 0x00006510, 0x00000652, 0x00006520, 0x00006521, 0x00065210,
    0x00000653, 0x00006530, 0x00006531, 0x00065310, 0x00006532, 0x00065320, 0x00065321, 0x00653210,
    0x00000654, 0x00006540, 0x00006541, 0x00065410, 0x00006542, 0x00065420, 0x00065421, 0x00654210,
    0x00006543, 0x00065430, 0x00065431, 0x00654310, 0x00065432, 0x00654320, 0x00654321, 0x06543210,
    0x00000007, 0x00000070, 0x00000071, 0x00000710, 0x00000072, 0x00000720, 0x00000721, 0x00007210,
    0x00000073, 0x00000730, 0x00000731, 0x00007310, 0x00000732, 0x00007320, 0x00007321, 0x00073210,
    0x00000074, 0x00000740, 0x00000741, 0x00007410, 0x00000742, 0x00007420, 0x00007421, 0x00074210,
    0x00000743, 0x00007430, 0x00007431, 0x00074310, 0x00007432, 0x00074320, 0x00074321, 0x00743210,
    0x00000075, 0x00000750, 0x00000751, 0x00007510, 0x00000752, 0x00007520, 0x00007521, 0x00075210,
    0x00000753, 0x00007530, 0x00007531, 0x00075310, 0x00007532, 0x00075320, 0x00075321, 0x00753210,
    0x00000754, 0x00007540, 0x00007541, 0x00075410, 0x00007542, 0x00075420, 0x00075421, 0x00754210,
    0x00007543, 0x00075430, 0x00075431, 0x00754310, 0x00075432, 0x00754320, 0x00754321, 0x07543210,
    0x00000076, 0x00000760, 0x00000761, 0x00007610, 0x00000762, 0x00007620, 0x00007621, 0x00076210,
    0x00000763, 0x00007630, 0x00007631, 0x00076310, 0x00007632, 0x00076320, 0x00076321, 0x00763210,
    0x00000764, 0x00007640, 0x00007641, 0x00076410, 0x00007642, 0x00076420, 0x00076421, 0x00764210,
    0x00007643, 0x00076430, 0x00076431, 0x00764310, 0x00076432, 0x00764320, 0x00764321, 0x07643210,
    0x00000765, 0x00007650, 0x00007651, 0x00076510, 0x00007652, 0x00076520, 0x00076521, 0x00765210,
    0x00007653, 0x00076530, 0x00076531, 0x00765310, 0x00076532, 0x00765320, 0x00765321, 0x07653210,
    0x00007654, 0x00076540, 0x00076541, 0x00765410, 0x00076542, 0x00765420, 0x00765421, 0x07654210,
    0x00076543, 0x00765430, 0x00765431, 0x07654310, 0x00765432, 0x07654320, 0x07654321, 0x76543210,
};
static const uint32_t FXM_EXPAND_LANES[256] = {
    0x00000000, 0x00000000, 0x00000000, 0x00000010, 0x00000000, 0x00000100, 0x00000100, 0x00000210,
    0x00000000, 0x00001000, 0x00001000, 0x00002010, 0x00001000, 0x00002100, 0x00002100, 0x00003210,
    0x00000000, 0x00010000, 0x00010000, 0x00020010, 0x00010000, 0x00020100, 0x00020100, 0x00030210,
    0x00010000, 0x00021000, 0x00021000, 0x00032010, 0x00021000, 0x00032100, 0x00032100, 0x00043210,
    0x00000000, 0x00100000, 0x00100000, 0x00200010, 0x00100000, 0x00200100, 0x00200100, 0x00300210,
    0x00100000, 0x00201000, 0x00201000, 0x00302010, 0x00201000, 0x00302100, 0x00302100, 0x00403210,
    0x00100000, 0x00210000, 0x00210000, 0x00320010, 0x00210000, 0x00320100, 0x00320100, 0x00430210,
    0x00210000, 0x00321000, 0x00321000, 0x00432010, 0x00321000, 0x00432100, 0x00432100, 0x00543210,
    0x00000000, 0x01000000, 0x01000000, 0x02000010, 0x01000000, 0x02000100, 0x02000100, 0x03000210,
    0x01000000, 0x02001000, 0x02001000, 0x03002010, 0x02001000, 0x03002100, 0x03002100, 0x04003210,
    0x01000000, 0x02010000, 0x02010000, 0x03020010, 0x02010000, 0x03020100, 0x03020100, 0x04030210,
    0x02010000, 0x03021000, 0x03021000, 0x04032010, 0x03021000, 0x04032100, 0x04032100, 0x05043210,
    0x01000000, 0x02100000, 0x02100000, 0x03200010, 0x02100000, 0x03200100, 0x03200100, 0x04300210,
    0x02100000, 0x03201000, 0x03201000, 0x04302010, 0x03201000, 0x04302100, 0x04302100, 0x05403210,
    0x02100000, 0x03210000, 0x03210000, 0x04320010, 0x03210000, 0x04320100, 0x04320100, 0x05430210,
    0x03210000, 0x04321000, 0x04321000, 0x05432010, 0x04321000, 0x05432100, 0x05432100, 0x06543210,
    0x00000000, 0x10000000, 0x10000000, 0x20000010, 0x10000000, 0x20000100, 0x20000100, 0x30000210,
    0x10000000, 0x20001000, 0x20001000, 0x30002010, 0x20001000, 0x30002100, 0x30002100, 0x40003210,
    0x10000000, 0x20010000, 0x20010000, 0x30020010, 0x20010000, 0x30020100, 0x30020100, 0x40030210,
    0x20010000, 0x30021000, 0x30021000, 0x40032010, 0x30021000, 0x40032100, 0x40032100, 0x50043210,
    0x10000000, 0x20100000, 0x20100000, 0x30200010, 0x20100000, 0x30200100, 0x30200100, 0x40300210,
    0x20100000, 0x30201000, 0x30201000, 0x40302010, 0x30201000, 0x40302100, 0x40302100, 0x50403210,
    0x20100000, 0x30210000, 0x30210000, 0x40320010, 0x30210000, 0x40320100, 0x40320100, 0x50430210,
    0x30210000, 0x40321000, 0x40321000, 0x50432010, 0x40321000, 0x50432100, 0x50432100, 0x60543210,
    0x10000000, 0x21000000, 0x21000000, 0x32000010, 0x21000000, 0x32000100, 0x32000100, 0x43000210,
    0x21000000, 0x32001000, 0x32001000, 0x43002010, 0x32001000, 0x43002100, 0x43002100, 0x54003210,
    0x21000000, 0x32010000, 0x32010000, 0x43020010, 0x32010000, 0x43020100, 0x43020100, 0x54030210,
    0x32010000, 0x43021000, 0x43021000, 0x54032010, 0x43021000, 0x54032100, 0x54032100, 0x65043210,
    0x21000000, 0x32100000, 0x32100000, 0x43200010, 0x32100000, 0x43200100, 0x43200100, 0x54300210,
    0x32100000, 0x43201000, 0x43201000, 0x54302010, 0x43201000, 0x54302100, 0x54302100, 0x65403210,
    0x32100000, 0x43210000, 0x43210000, 0x54320010, 0x43210000, 0x54320100, 0x54320100, 0x65430210,
    0x43210000, 0x54321000, 0x54321000, 0x65432010, 0x54321000, 0x65432100, 0x65432100, 0x76543210,
};
static inline __m256i fxm_lanes_of(uint32_t nibbles)
{
    const __m256i at = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)nibbles), at),
                            _mm256_set1_epi32(7));
}
static inline VM vm_not(VM m) { return _mm256_xor_ps(m, _mm256_castsi256_ps(_mm256_set1_epi32(-1))); }
static inline int vm_count(VM m) { return __builtin_popcount((unsigned)_mm256_movemask_ps(m)); }
static inline int vf_compress_store(float *p, VM m, VF v)
{
    const int bits = _mm256_movemask_ps(m);
    _mm256_storeu_ps(p, _mm256_permutevar8x32_ps(v, fxm_lanes_of(FXM_COMPRESS_LANES[bits])));
    return __builtin_popcount((unsigned)bits);
}
static inline VF vf_expand_load(const float *p, VM m)
{
    const int bits = _mm256_movemask_ps(m);
    return _mm256_and_ps(
        _mm256_permutevar8x32_ps(_mm256_loadu_ps(p), fxm_lanes_of(FXM_EXPAND_LANES[bits])), m);
}

static inline VD vd_set(double a)
{
    VD r = {_mm256_set1_pd(a), _mm256_set1_pd(a)};
    return r;
}
#define FXM_VD2(name, op)                                                                        \
    static inline VD name(VD a, VD b)                                                            \
    {                                                                                            \
        VD r = {op(a.lo, b.lo), op(a.hi, b.hi)};                                                 \
        return r;                                                                                \
    }
FXM_VD2(vd_add, _mm256_add_pd)
FXM_VD2(vd_sub, _mm256_sub_pd)
FXM_VD2(vd_mul, _mm256_mul_pd)
FXM_VD2(vd_div, _mm256_div_pd)
FXM_VD2(vd_min, _mm256_min_pd)
FXM_VD2(vd_max, _mm256_max_pd)
#undef FXM_VD2
static inline VD vd_fma(VD a, VD b, VD c)
{
    VD r = {_mm256_fmadd_pd(a.lo, b.lo, c.lo), _mm256_fmadd_pd(a.hi, b.hi, c.hi)};
    return r;
}
static inline VD vd_sqrt(VD a)
{
    VD r = {_mm256_sqrt_pd(a.lo), _mm256_sqrt_pd(a.hi)};
    return r;
}
static inline VD vd_from_vf(VF a)
{
    VD r = {_mm256_cvtps_pd(_mm256_castps256_ps128(a)), _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1))};
    return r;
}
static inline VF vf_from_vd(VD a)
{
    return _mm256_set_m128(_mm256_cvtpd_ps(a.hi), _mm256_cvtpd_ps(a.lo));
}
static inline VD vd_from_vi(VI a)
{
    VD r = {_mm256_cvtepi32_pd(_mm256_castsi256_si128(a)),
            _mm256_cvtepi32_pd(_mm256_extracti128_si256(a, 1))};
    return r;
}
static inline __m256d vd_pow2i_half(__m256d k)
{
    const __m256i e = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k)),
                                       _mm256_set1_epi64x(1023));
    return _mm256_castsi256_pd(_mm256_slli_epi64(e, 52));
}
static inline VD vd_pow2i(VD k)
{
    VD r = {vd_pow2i_half(k.lo), vd_pow2i_half(k.hi)};
    return r;
}

#define FXM_ENTRY fx_f32_math_avx2
#define FXM_KERNEL fx_f32_k_unary_avx2
#include "f32_math_impl.h"
