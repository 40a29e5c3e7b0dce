/* The element-wise math of f32_math.h, written once for every ISA level.
 *
 * Included by f32_math.c, f32_math_avx2.c and f32_math_avx512.c after each has defined its
 * types and operations:
 *   VF  FXM_N floats            VI  FXM_N int32            VM  a lane mask
 *   VD  FXM_N doubles (pow only; a pair of registers on the SIMD levels)
 *   vf_set vf_loadu vf_storeu vf_add vf_sub vf_mul vf_div vf_fma(a,b,c)=a*b+c vf_sqrt
 *   vf_and vf_or vf_xor (bits)   vf_lt vf_le vf_gt vf_ge vf_eq (ordered, false on NaN)
 *   vf_unord (true on NaN)   vm_and vm_or   vf_sel(m,a,b) vi_sel(m,a,b) = m ? a : b
 *   vi_set vi_add vi_sub vi_and vi_sll(a,imm) vi_sra(a,imm)   vf_as_vi vi_as_vf (bit casts)
 *   vf_cvt_vi (an integral float to int32) vi_cvt_vf   vf_lut8(table of 8, index in [0, 8))
 *   vd_set vd_add vd_sub vd_mul vd_div vd_fma vd_sqrt vd_min vd_max (no NaN reaches them)
 *   vd_from_vf vf_from_vd (round to nearest even) vd_from_vi vd_pow2i (2^k, k integral in
 *   [-1022, 1023])
 * and FXM_ENTRY / FXM_KERNEL, the level's names of the two exported functions (f32_math.h).
 * Each is one IEEE operation rounded to nearest even (fma: one rounding), so every level
 * computes the same bits. Constants are exact fp32 (hex) literals; the polynomial
 * coefficients were fitted as docs/math.md describes.
 *
 * Conventions: a NaN input is replaced by a harmless value before the arithmetic and the
 * result is selected at the end (no float-to-int conversion ever sees a NaN, which would be
 * undefined in C); every other special case (0, Inf, subnormals, overflow) comes out of the
 * arithmetic or is selected explicitly where noted.
 */
#ifndef FX_FP32_MATH_IMPL_H
#define FX_FP32_MATH_IMPL_H

#include "core/prefetch.h"

#include <math.h>
#include <string.h>

/* How far ahead of the loop FXM_MAP prefetches its inputs, in bytes. The heavier functions
 * (gelu: about 10 cycles an element) run so few loads that the out-of-order window holds only
 * a few lines of them, and on the VMs measured the hardware prefetchers did not keep ahead: a
 * 33 MB gelu ran 2.4x slower than one in L2 until the loop asked for its lines itself. */
#define FXM_AHEAD 2048

#if defined(__clang__)
/* one rounding per written operation: no contraction of a*b+c into an fma behind our back */
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- bit helpers ----------------------------------------------------------------------------- */

static inline VF fxm_bits(int32_t b) { return vi_as_vf(vi_set(b)); }
static inline VF fxm_abs(VF x) { return vf_and(x, fxm_bits(0x7fffffff)); }
static inline VF fxm_sign(VF x) { return vf_and(x, fxm_bits((int32_t)0x80000000u)); }
/* |mag| with the sign of s */
static inline VF fxm_copysign(VF mag, VF s) { return vf_or(fxm_abs(mag), fxm_sign(s)); }
static inline VF fxm_quiet(VF x) { return vf_or(x, fxm_bits(0x00400000)); } /* NaN -> quiet */
static inline VF fxm_nan(void) { return fxm_bits(0x7fc00000); }
static inline VF fxm_inf(void) { return fxm_bits(0x7f800000); }
/* x limited to [lo, hi]; NaN stays NaN */
static inline VF fxm_clamp(VF x, float lo, float hi)
{
    x = vf_sel(vf_lt(x, vf_set(lo)), vf_set(lo), x);
    return vf_sel(vf_gt(x, vf_set(hi)), vf_set(hi), x);
}
/* NaN lanes replaced by 0 */
static inline VF fxm_denan(VF x) { return vf_sel(vf_unord(x, x), vf_set(0.0f), x); }

/* 2^k for an integral k in [-126, 127] */
static inline VF fxm_pow2(VF k)
{
    return vi_as_vf(vi_sll(vi_add(vf_cvt_vi(k), vi_set(127)), 23));
}

/* v * 2^k (k integral, |k| < 2^20) with a single rounding for |v| in [2^-26, 2^24]: the first
 * factor (1, 2^100 or 2^-100) leaves v * 2^k1 normal and exact, the second is a normal power
 * of two, clamped where the result is 0 or Inf whatever v is. */
static inline VF fxm_scale(VF v, VF k)
{
    const VF k1 = vf_sel(vf_lt(k, vf_set(-100.0f)), vf_set(-100.0f),
                         vf_sel(vf_gt(k, vf_set(100.0f)), vf_set(100.0f), vf_set(0.0f)));
    const VF k2 = fxm_clamp(vf_sub(k, k1), -126.0f, 127.0f);
    return vf_mul(vf_mul(v, fxm_pow2(k1)), fxm_pow2(k2));
}

/* ---- double-float helpers ------------------------------------------------------------------ */

/* hi + lo = a * b exactly */
static inline VF fxm_two_prod(VF a, VF b, VF *lo)
{
    const VF h = vf_mul(a, b);
    *lo = vf_fma(a, b, vf_sub(vf_set(0.0f), h));
    return h;
}

/* ---- exp ----------------------------------------------------------------------------------- */

/* e^(xh + xl) = p * 2^k with p in [0.7, 1.42] and k integral (returned as a float). xh is
 * clamped to [-200, 89] (every caller's result is 0 or Inf beyond), |xl| is at most a few units
 * of xh's last place. k = rint(xh / ln2); r = xh - k ln2 is exact in its first step (Cody-Waite:
 * xh and k * LN2_HI are multiples of 2^-25 and |r| < 0.5), then e^r by its Taylor polynomial of
 * degree 7 (truncation < 2^-27.5 relatively on |r| <= 0.35), in Horner form ending in
 * fma(., r, 1), so that the last step rounds 1 + r (1 + r/2 + ...) once. */
static inline VF fxm_exp_parts(VF xh, VF xl, VF *k)
{
    xh = fxm_clamp(xh, -200.0f, 89.0f);
    xl = fxm_denan(xl);
    const VF magic = vf_set(0x1.8p23f); /* adding it rounds to an integer (|v| < 2^22) */
    const VF kf = vf_sub(vf_fma(xh, vf_set(0x1.715476p+0f), magic), magic);
    VF r = vf_fma(kf, vf_set(-0x1.62e430p-1f), xh); /* exact */
    r = vf_fma(kf, vf_set(0x1.05c610p-29f), r);     /* - k * (ln2 - LN2_HI) */
    r = vf_add(r, xl);
    VF p = vf_fma(vf_set(0x1.a01a02p-13f), r, vf_set(0x1.6c16c2p-10f)); /* 1/7!, 1/6! */
    p = vf_fma(p, r, vf_set(0x1.111112p-7f));                           /* 1/5! */
    p = vf_fma(p, r, vf_set(0x1.555556p-5f));                           /* 1/4! */
    p = vf_fma(p, r, vf_set(0x1.555556p-3f));                           /* 1/3! */
    p = vf_fma(p, r, vf_set(0.5f));
    p = vf_fma(p, r, vf_set(1.0f));
    p = vf_fma(p, r, vf_set(1.0f));
    *k = kf;
    return p;
}

static inline VF fxm_exp(VF x)
{
    VF k = vf_set(0.0f);
    const VF p = fxm_exp_parts(fxm_denan(x), vf_set(0.0f), &k);
    return vf_sel(vf_unord(x, x), fxm_quiet(x), fxm_scale(p, k));
}

/* ---- log ----------------------------------------------------------------------------------- */

/* x = m 2^k with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact), s = f / (2 + f);
 * log(1 + f) = f - hfsq + s (hfsq + R), hfsq = f^2 / 2, R = 2 s^2/3 + 2 s^4/5 + ... (the atanh
 * series, truncated after s^8: < 2^-28.8 relatively at |s| <= 0.1716). The leading f is exact
 * and the other terms are small corrections, which keeps the error below 1 ulp (the classic
 * fdlibm arrangement). k ln2 is added with k * LN2_HI exact (16-bit LN2_HI). */
static inline VF fxm_log(VF x)
{
    const VM sub = vf_lt(x, vf_set(0x1p-126f)); /* subnormal (or <= 0: selected below) */
    const VF xs = vf_sel(sub, vf_mul(x, vf_set(0x1p23f)), x);
    const VF kadj = vf_sel(sub, vf_set(-23.0f), vf_set(0.0f));
    const VI ix = vi_sub(vf_as_vi(xs), vi_set(0x3f3504f3));
    const VI ki = vi_sra(ix, 23);
    const VF m = vi_as_vf(vi_add(vi_and(ix, vi_set(0x007fffff)), vi_set(0x3f3504f3)));
    const VF f = vf_sub(m, vf_set(1.0f));
    const VF s = vf_div(f, vf_add(vf_set(2.0f), f));
    const VF z = vf_mul(s, s);
    VF R = vf_fma(vf_set(0x1.c71c72p-3f), z, vf_set(0x1.24924ap-2f)); /* 2/9, 2/7 */
    R = vf_fma(R, z, vf_set(0x1.99999ap-2f));                         /* 2/5 */
    R = vf_fma(R, z, vf_set(0x1.555556p-1f));                         /* 2/3 */
    R = vf_mul(R, z);
    const VF hfsq = vf_mul(vf_set(0.5f), vf_mul(f, f));
    const VF kf = vf_add(vi_cvt_vf(ki), kadj);
    const VF lo = vf_fma(s, vf_add(hfsq, R), vf_mul(kf, vf_set(0x1.2fefa4p-17f)));
    VF y = vf_fma(kf, vf_set(0x1.62e300p-1f), vf_sub(f, vf_sub(hfsq, lo)));
    y = vf_sel(vf_lt(x, vf_set(0.0f)), fxm_nan(), y);
    y = vf_sel(vf_eq(x, vf_set(0.0f)), vf_sub(vf_set(0.0f), fxm_inf()), y);
    y = vf_sel(vf_eq(x, fxm_inf()), x, y);
    return vf_sel(vf_unord(x, x), fxm_quiet(x), y);
}

/* ---- sqrt, rsqrt --------------------------------------------------------------------------- */

/* 1/sqrt(x): r = 1 / sqrt(x) (two roundings), then one Newton step on the exactly computed
 * residual e = 1 - x r^2 (r^2 = hi + lo by fma, x * hi - 1 by fma): r + r e / 2 is within
 * 0.5 ulp + O(e^2). x is scaled by 2^100 or 2^-100 where r^2 would leave the normal range.
 * 0, Inf, negative and NaN inputs keep the IEEE result of 1 / sqrt(x). */
static inline VF fxm_rsqrt(VF x)
{
    const VF r0 = vf_div(vf_set(1.0f), vf_sqrt(x));
    const VM tiny = vf_lt(x, vf_set(0x1p-100f)), huge = vf_gt(x, vf_set(0x1p100f));
    const VF xs = vf_sel(tiny, vf_mul(x, vf_set(0x1p100f)),
                         vf_sel(huge, vf_mul(x, vf_set(0x1p-100f)), x));
    const VF post = vf_sel(tiny, vf_set(0x1p50f), vf_sel(huge, vf_set(0x1p-50f), vf_set(1.0f)));
    const VF r = vf_div(vf_set(1.0f), vf_sqrt(xs));
    VF rrl;
    const VF rrh = fxm_two_prod(r, r, &rrl);
    const VF e = vf_sub(vf_fma(vf_sub(vf_set(0.0f), xs), rrh, vf_set(1.0f)), vf_mul(xs, rrl));
    const VF rn = vf_mul(vf_fma(vf_mul(vf_set(0.5f), r), e, r), post);
    const VM fine = vm_and(vf_gt(x, vf_set(0.0f)), vf_lt(x, fxm_inf()));
    return vf_sel(fine, rn, r0);
}

/* ---- tanh ---------------------------------------------------------------------------------- */

/* |x| < 0.625: x + x^3 P(x^2), a degree-5 fit in x^2 (relative error < 2^-32.3 with its fp32
 * coefficients); otherwise 1 - 2 / (e^(2|x|) + 1), with 2|x| clamped to 20 (tanh = 1 in fp32
 * from |x| = 9.01). The sign is copied from x, so tanh(-0) = -0. */
static inline VF fxm_tanh(VF x)
{
    const VF ax = fxm_abs(fxm_denan(x));
    const VF u = vf_mul(ax, ax);
    VF P = vf_fma(vf_set(0x1.1a2e3ep-9f), u, vf_set(-0x1.0c6020p-7f));
    P = vf_fma(P, u, vf_set(0x1.63a57ep-6f));
    P = vf_fma(P, u, vf_set(-0x1.b9f18ap-5f));
    P = vf_fma(P, u, vf_set(0x1.11107ap-3f));
    P = vf_fma(P, u, vf_set(-0x1.555554p-2f));
    const VF small = vf_fma(vf_mul(ax, u), P, ax);
    VF k = vf_set(0.0f);
    const VF p = fxm_exp_parts(vf_sel(vf_gt(ax, vf_set(10.0f)), vf_set(20.0f), vf_add(ax, ax)),
                               vf_set(0.0f), &k);
    const VF E = fxm_scale(p, k);
    const VF big = vf_sub(vf_set(1.0f), vf_div(vf_set(2.0f), vf_add(E, vf_set(1.0f))));
    const VF y = fxm_copysign(vf_sel(vf_lt(ax, vf_set(0.625f)), small, big), x);
    return vf_sel(vf_unord(x, x), fxm_quiet(x), y);
}

/* ---- erf, erfc ----------------------------------------------------------------------------- */

/* erf(z) for 0 <= z < 0.5 as eh + el: z (c0 + u Q(u)), u = z^2, c0 = 2/sqrt(pi) split in two
 * floats so that z * c0 is exact as a pair (Q: degree-4 fit, relative error < 2^-33.8). */
static inline VF fxm_erf_small(VF z, VF *el)
{
    const VF u = vf_mul(z, z);
    VF Q = vf_fma(vf_set(-0x1.839f26p-11f), u, vf_set(0x1.53a44ap-8f));
    Q = vf_fma(Q, u, vf_set(-0x1.b810fap-6f));
    Q = vf_fma(Q, u, vf_set(0x1.ce2ea6p-4f));
    Q = vf_fma(Q, u, vf_set(-0x1.812746p-2f));
    const VF s = vf_mul(z, vf_fma(u, Q, vf_set(-0x1.f7ac92p-25f)));
    VF pl;
    const VF ph = fxm_two_prod(z, vf_set(0x1.20dd76p+0f), &pl);
    *el = vf_add(pl, s);
    return ph;
}

/* erfcx(z) = e^(z^2) erfc(z) for z in [0.5, 10.6] (clamped there): eight pieces, each a
 * degree-8 polynomial in z - c (c chosen near the piece's middle where erfcx(c) is within
 * 2^-32 of an fp32 value, so the constant term costs no accuracy; relative error < 2^-28.8). */
static const float FXM_ERFCX_BREAK[7] = {1.0f, 1.5f, 2.0f, 2.75f, 3.75f, 5.0f, 7.0f};
static const float FXM_ERFCX[10][8] = {
    /* centres */
    {0x1.802cb6p-1f, 0x1.413cc4p+0f, 0x1.c06de2p+0f, 0x1.306956p+1f, 0x1.a0e4dcp+1f,
     0x1.197d2ep+2f, 0x1.7e617ap+2f, 0x1.1aff4ap+3f},
    /* coefficients of (z - c)^8, ..., (z - c)^0 */
    {0x1.3d3000p-9f, 0x1.304b34p-11f, 0x1.7f1feep-13f, 0x1.7210e6p-16f, 0x1.a734aep-19f,
     0x1.a48feep-22f, 0x1.20eb02p-25f, 0x1.9317b8p-30f},
    {-0x1.9aeb2ap-8f, -0x1.847f14p-10f, -0x1.0d96a8p-11f, -0x1.48f23cp-14f, -0x1.a019e2p-17f,
     -0x1.e83c6cp-20f, -0x1.f16248p-23f, -0x1.c56384p-27f},
    {0x1.d4078cp-7f, 0x1.c9969ep-9f, 0x1.0cd0d6p-10f, 0x1.197924p-12f, 0x1.c2e0a6p-15f,
     0x1.440cccp-17f, 0x1.87b50ap-20f, 0x1.e0c776p-24f},
    {-0x1.04ee8ap-5f, -0x1.25a75ep-7f, -0x1.882bb4p-9f, -0x1.dbecccp-11f, -0x1.ce3948p-13f,
     -0x1.9c1368p-15f, -0x1.3e2fc8p-17f, -0x1.15bf74p-20f},
    {0x1.115964p-4f, 0x1.65125ep-6f, 0x1.1293a8p-7f, 0x1.8495f6p-9f, 0x1.cc7932p-11f,
     0x1.00addap-12f, 0x1.001f9ap-14f, 0x1.3f2996p-17f},
    {-0x1.09b7f0p-3f, -0x1.97ec70p-5f, -0x1.6bcb8ap-6f, -0x1.31681cp-7f, -0x1.bf0f00p-9f,
     -0x1.3a6364p-10f, -0x1.97719cp-12f, -0x1.6baed6p-14f},
    {0x1.d8baf2p-3f, 0x1.b276eep-4f, 0x1.c7e648p-5f, 0x1.cc4ebcp-6f, 0x1.a59432p-7f,
     0x1.79c796p-8f, 0x1.404d32p-9f, 0x1.9bff88p-11f},
    {-0x1.78a48ap-2f, -0x1.a98f60p-3f, -0x1.0bdb62p-3f, -0x1.4af0f8p-4f, -0x1.812e64p-5f,
     -0x1.bcde34p-6f, -0x1.f18676p-7f, -0x1.cff866p-8f},
    {0x1.037ce2p-1f, 0x1.779ea2p-2f, 0x1.23963cp-2f, 0x1.c3102ap-3f, 0x1.53fb20p-3f,
     0x1.0062f4p-3f, 0x1.7d9474p-4f, 0x1.03ab28p-4f},
};

static inline VF fxm_erfcx(VF z)
{
    const VF zc = fxm_clamp(z, 0.5f, 10.6f);
    VI idx = vi_set(0);
    for (int i = 0; i < 7; i++)
        idx = vi_add(idx, vi_sel(vf_ge(zc, vf_set(FXM_ERFCX_BREAK[i])), vi_set(1), vi_set(0)));
    const VF v = vf_sub(zc, vf_lut8(FXM_ERFCX[0], idx)); /* exact (Sterbenz) */
    VF F = vf_lut8(FXM_ERFCX[1], idx);
    for (int j = 2; j < 10; j++) F = vf_fma(F, v, vf_lut8(FXM_ERFCX[j], idx));
    return F;
}

/* e^-(zh + zl)^2 = p 2^k: the square as a pair (hi by fma) plus 2 zh zl. */
static inline VF fxm_exp_negsq(VF zh, VF zl, VF *k)
{
    VF ql;
    const VF qh = fxm_two_prod(zh, zh, &ql);
    ql = vf_fma(vf_add(zh, zh), zl, ql);
    return fxm_exp_parts(vf_sub(vf_set(0.0f), qh), vf_sub(vf_set(0.0f), ql), k);
}

/* erfc(z) for z = zh + zl >= 0.5 as m 2^k: erfcx(z) e^(-z^2) */
static inline VF fxm_erfc_big(VF zh, VF zl, VF *k)
{
    const VF zc = fxm_clamp(zh, 0.5f, 10.6f);
    return vf_mul(fxm_erfcx(zc), fxm_exp_negsq(zc, vf_sel(vf_eq(zc, zh), zl, vf_set(0.0f)), k));
}

/* 1 + sg (eh + el) as one float, sg = +-1: Fast2Sum of 1 and sg eh (|eh| < 0.6), then el */
static inline VF fxm_one_plus(VF eh, VF el, VF sg)
{
    const VF a = vf_mul(sg, eh), b = vf_mul(sg, el);
    const VF sh = vf_add(vf_set(1.0f), a);
    const VF sl = vf_sub(a, vf_sub(sh, vf_set(1.0f)));
    return vf_add(sh, vf_add(sl, b));
}

static inline VF fxm_erf(VF x)
{
    const VF az = fxm_abs(fxm_denan(x));
    VF el;
    const VF eh = fxm_erf_small(az, &el);
    VF k = vf_set(0.0f);
    const VF m = fxm_erfc_big(az, vf_set(0.0f), &k);
    const VF big = vf_sub(vf_set(1.0f), fxm_scale(m, k));
    const VF y = fxm_copysign(vf_sel(vf_lt(az, vf_set(0.5f)), vf_add(eh, el), big), x);
    return vf_sel(vf_unord(x, x), fxm_quiet(x), y);
}

static inline VF fxm_erfc(VF x)
{
    const VF xs = fxm_denan(x);
    const VF az = fxm_abs(xs);
    const VM neg = vf_lt(xs, vf_set(0.0f));
    VF el;
    const VF eh = fxm_erf_small(az, &el);
    const VF small = fxm_one_plus(eh, el, vf_sel(neg, vf_set(1.0f), vf_set(-1.0f)));
    VF k = vf_set(0.0f);
    const VF mb = fxm_erfc_big(az, vf_set(0.0f), &k);
    const VF b = fxm_scale(mb, k);
    const VF big = vf_sel(neg, vf_sub(vf_set(2.0f), b), b);
    const VF y = vf_sel(vf_lt(az, vf_set(0.5f)), small, big);
    return vf_sel(vf_unord(x, x), fxm_quiet(x), y);
}

/* ---- gelu (erf form) ----------------------------------------------------------------------- */

/* z = x / sqrt(2) as a pair: x * (S_H + S_L), S_H + S_L = 1/sqrt(2) to 48 bits */
static inline VF fxm_div_sqrt2(VF x, VF *zl)
{
    VF pl;
    const VF ph = fxm_two_prod(x, vf_set(0x1.6a09e6p-1f), &pl);
    *zl = vf_fma(x, vf_set(0x1.9fcef4p-27f), pl);
    return ph;
}

/* gelu's argument, shared by both branches of the value and of the derivative: x without NaN
 * (xs), clamped to [-20, 20] (xc), z = xc / sqrt(2) as a pair (zh, zl) and |z| as a pair (az,
 * azl), and the sign. */
typedef struct fxm_gelu_arg {
    VF xs, xc, zl, az, azl;
    VM neg;
} fxm_gelu_arg;

static inline fxm_gelu_arg fxm_gelu_prep(VF x)
{
    fxm_gelu_arg a;
    a.xs = fxm_denan(x);
    a.xc = fxm_clamp(a.xs, -20.0f, 20.0f);
    const VF zh = fxm_div_sqrt2(a.xc, &a.zl);
    a.neg = vf_lt(a.xc, vf_set(0.0f));
    a.az = fxm_abs(zh);
    a.azl = vf_sel(a.neg, vf_sub(vf_set(0.0f), a.zl), a.zl);
    return a;
}

/* which branch a lane takes, for the value and the derivative alike: |z| < 0.5 */
static inline VM fxm_gelu_small(const fxm_gelu_arg *a) { return vf_lt(a->az, vf_set(0.5f)); }

/* gelu(x) = x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2. |z| < 0.5: x (1 +- erf|z|) / 2 with
 * 1 +- erf as a pair; otherwise x (1 - erfc(z) / 2) for x > 0 and the tail x erfc(|z|) / 2
 * as (x m / 2) 2^k for x < 0 (one rounding, so subnormal results keep their bits). x is
 * clamped to [-20, 20] for Phi (gelu(x) = x beyond 20, and rounds to -0 below -20). */
static inline VF fxm_gelu_near(const fxm_gelu_arg *a)
{
    VF el;
    const VF eh = fxm_erf_small(a->az, &el);
    return vf_mul(vf_mul(vf_set(0.5f), a->xs),
                  fxm_one_plus(eh, el, vf_sel(a->neg, vf_set(-1.0f), vf_set(1.0f))));
}

static inline VF fxm_gelu_far(const fxm_gelu_arg *a)
{
    VF k = vf_set(0.0f);
    const VF m = fxm_erfc_big(a->az, a->azl, &k);
    const VF tail = fxm_scale(vf_mul(vf_mul(vf_set(0.5f), a->xc), m), k);
    const VF upper =
        vf_mul(a->xs, vf_sub(vf_set(1.0f), vf_mul(vf_set(0.5f), fxm_scale(m, k))));
    return vf_sel(a->neg, tail, upper);
}

/* ---- sigmoid, silu, gelu_tanh ------------------------------------------------------------ */

/* v sigmoid(yh + yl) with E = e^(-|y|) = p 2^k: v / (1 + E) for y >= 0, and for y < 0
 * (v p / (1 + E)) 2^k, scaled once at the end so that results far below 1 keep their bits.
 * vneg is the factor used for y < 0 (the callers clamp it so that -Inf gives -0, not NaN). */
static inline VF fxm_sigmoid_times(VF yh, VF yl, VF v, VF vneg)
{
    const VM neg = vf_lt(yh, vf_set(0.0f));
    VF k = vf_set(0.0f);
    const VF p = fxm_exp_parts(vf_sub(vf_set(0.0f), fxm_abs(yh)),
                               vf_sel(neg, yl, vf_sub(vf_set(0.0f), yl)), &k);
    const VF d = vf_add(vf_set(1.0f), fxm_scale(p, k));
    return vf_sel(neg, fxm_scale(vf_div(vf_mul(vneg, p), d), k), vf_div(v, d));
}

static inline VF fxm_sigmoid(VF x)
{
    const VF xs = fxm_denan(x);
    const VF y = fxm_sigmoid_times(xs, vf_set(0.0f), vf_set(1.0f), vf_set(1.0f));
    return vf_sel(vf_unord(x, x), fxm_quiet(x), y);
}

static inline VF fxm_silu(VF x)
{
    const VF xs = fxm_denan(x);
    const VF y = fxm_sigmoid_times(xs, vf_set(0.0f), xs, fxm_clamp(xs, -200.0f, 0.0f));
    return vf_sel(vf_unord(x, x), fxm_quiet(x), y);
}

/* 2u = 2 sqrt(2/pi) (x + 0.044715 x^3) = K x (1 + A x^2) as a pair (K and A as pairs too): the
 * result is e^(2u) times a factor for x < 0, so an error in 2u is a relative error of the
 * result; a plain fp32 evaluation would lose |2u| 2^-23 relatively. x is clamped to +-30. */
static inline VF fxm_gelu_tanh_arg(VF xc, VF *yl)
{
    VF ql;
    const VF qh = fxm_two_prod(xc, xc, &ql);
    const VF AH = vf_set(0x1.6e4e26p-5f), AL = vf_set(0x1.a9003ep-30f);
    VF tl;
    const VF th = fxm_two_prod(AH, qh, &tl);
    tl = vf_add(tl, vf_fma(AH, ql, vf_mul(AL, qh)));
    const VF wh = vf_add(vf_set(1.0f), th); /* Fast2Sum with the larger of 1 and th first */
    const VM tbig = vf_gt(th, vf_set(1.0f));
    const VF big = vf_sel(tbig, th, vf_set(1.0f)), sml = vf_sel(tbig, vf_set(1.0f), th);
    const VF wl = vf_add(vf_sub(sml, vf_sub(wh, big)), tl);
    VF vl;
    const VF vh = fxm_two_prod(xc, wh, &vl);
    vl = vf_fma(xc, wl, vl);
    const VF KH = vf_set(0x1.988454p+0f), KL = vf_set(-0x1.857936p-25f);
    VF l;
    const VF h = fxm_two_prod(KH, vh, &l);
    *yl = vf_add(l, vf_fma(KH, vl, vf_mul(KL, vh)));
    return h;
}

static inline VF fxm_gelu_tanh(VF x)
{
    const VF xs = fxm_denan(x);
    const VF xc = fxm_clamp(xs, -30.0f, 30.0f);
    VF yl;
    const VF yh = fxm_gelu_tanh_arg(xc, &yl);
    const VF y = fxm_sigmoid_times(yh, yl, xs, xc);
    return vf_sel(vf_unord(x, x), fxm_quiet(x), y);
}

/* ---- pow (binary64 inside) ----------------------------------------------------------------- */

/* pow runs its log and exp in binary64: y = p ln|x| reaches +-104 before the result leaves the
 * fp32 range, and an fp32 log would put |y| 2^-24 of relative error into the result. Here ln is
 * 2 atanh(s) to s^17 (relative error ~2^-50), e^r a Taylor polynomial to r^13 (2^-52), so the
 * binary64 value is within 2^-40 of |x|^q and the one rounding to fp32 gives at most
 * 0.5 + 2^-16 ulp. Exact shortcuts: q = 1, 2, -1 and 0.5 (|x|, x*x, 1/|x| and sqrt|x| in
 * binary64, each exact or correctly rounded to fp32). */
enum { FXM_POW_GENERIC = 0, FXM_POW_ONE, FXM_POW_TWO, FXM_POW_INV, FXM_POW_HALF };

static inline int fxm_pow_method(double q)
{
    return q == 1.0 ? FXM_POW_ONE
                    : q == 2.0 ? FXM_POW_TWO
                               : q == -1.0 ? FXM_POW_INV : q == 0.5 ? FXM_POW_HALF : FXM_POW_GENERIC;
}

/* |x|^q in binary64 for q != 0: ax = |x| (0 and Inf give 0 or Inf; NaN lanes are the caller's) */
static inline VD fxm_pow_mag(VF ax, double q, int method)
{
    const VD a = vd_from_vf(ax);
    switch (method) {
    case FXM_POW_ONE: return a;
    case FXM_POW_TWO: return vd_mul(a, a);
    case FXM_POW_INV: return vd_div(vd_set(1.0), a);
    case FXM_POW_HALF: return vd_sqrt(a);
    default: break;
    }
    /* ln|x|: 0 and Inf take the generic path on 1 and get -Inf / +Inf added afterwards */
    const VM zero = vf_eq(ax, vf_set(0.0f)), inf = vf_eq(ax, fxm_inf());
    const VF ladd = vf_sel(zero, vf_sub(vf_set(0.0f), fxm_inf()), vf_sel(inf, fxm_inf(), vf_set(0.0f)));
    const VF axs = vf_sel(vm_or(zero, vm_or(inf, vf_unord(ax, ax))), vf_set(1.0f), ax);
    const VM sub = vf_lt(axs, vf_set(0x1p-126f));
    const VF xs = vf_sel(sub, vf_mul(axs, vf_set(0x1p23f)), axs);
    const VF kadj = vf_sel(sub, vf_set(-23.0f), vf_set(0.0f));
    const VI ix = vi_sub(vf_as_vi(xs), vi_set(0x3f3504f3));
    const VI ki = vi_sra(ix, 23);
    const VF m = vi_as_vf(vi_add(vi_and(ix, vi_set(0x007fffff)), vi_set(0x3f3504f3)));
    const VD kd = vd_add(vd_from_vi(ki), vd_from_vf(kadj));
    const VD f = vd_sub(vd_from_vf(m), vd_set(1.0)); /* exact */
    const VD s = vd_div(f, vd_add(vd_set(2.0), f));   /* 2 + f exact */
    const VD z = vd_mul(s, s);
    VD R = vd_fma(vd_set(2.0 / 17), z, vd_set(2.0 / 15));
    R = vd_fma(R, z, vd_set(2.0 / 13));
    R = vd_fma(R, z, vd_set(2.0 / 11));
    R = vd_fma(R, z, vd_set(2.0 / 9));
    R = vd_fma(R, z, vd_set(2.0 / 7));
    R = vd_fma(R, z, vd_set(2.0 / 5));
    R = vd_fma(R, z, vd_set(2.0 / 3));
    VD L = vd_fma(kd, vd_set(0x1.62e42fefa39efp-1), vd_fma(vd_mul(s, z), R, vd_add(s, s)));
    L = vd_add(L, vd_from_vf(ladd));
    VD y = vd_mul(vd_set(q), L);
    y = vd_min(vd_max(y, vd_set(-708.0)), vd_set(708.0));
    const VD magic = vd_set(0x1.8p52);
    const VD kk = vd_sub(vd_fma(y, vd_set(0x1.71547652b82fep+0), magic), magic);
    VD r = vd_fma(kk, vd_set(-0x1.62e42fee00000p-1), y); /* fdlibm's split: k * hi exact */
    r = vd_fma(kk, vd_set(-0x1.a39ef35793c76p-33), r);
    VD e = vd_fma(vd_set(1.0 / 6227020800.0), r, vd_set(1.0 / 479001600.0)); /* 1/13!, 1/12! */
    e = vd_fma(e, r, vd_set(1.0 / 39916800.0));
    e = vd_fma(e, r, vd_set(1.0 / 3628800.0));
    e = vd_fma(e, r, vd_set(1.0 / 362880.0));
    e = vd_fma(e, r, vd_set(1.0 / 40320.0));
    e = vd_fma(e, r, vd_set(1.0 / 5040.0));
    e = vd_fma(e, r, vd_set(1.0 / 720.0));
    e = vd_fma(e, r, vd_set(1.0 / 120.0));
    e = vd_fma(e, r, vd_set(1.0 / 24.0));
    e = vd_fma(e, r, vd_set(1.0 / 6.0));
    e = vd_fma(e, r, vd_set(0.5));
    e = vd_fma(e, r, vd_set(1.0));
    e = vd_fma(e, r, vd_set(1.0));
    return vd_mul(e, vd_pow2i(kk));
}

/* The constants of a pow call: the method for q and its integer properties. */
typedef struct fxm_pow_info {
    double q;
    int method, is_int, is_odd;
} fxm_pow_info;

static inline fxm_pow_info fxm_pow_prepare(double q)
{
    fxm_pow_info pi;
    pi.q = q;
    pi.method = fxm_pow_method(q);
    pi.is_int = q == floor(q);
    pi.is_odd = pi.is_int && fabs(q) < 0x1p53 && fmod(q, 2.0) != 0.0;
    return pi;
}

/* RN32(c * |x|^q) with C99's pow signs and special cases (q != 0): an odd integer q keeps x's
 * sign, a negative finite x with a non-integer q gives NaN, NaN gives NaN. c = 1 for pow
 * itself, c = p dy for its gradient (then q = p - 1). */
static inline VF fxm_pow_times(VF x, const fxm_pow_info *pi, VD c)
{
    const VF ax = fxm_abs(x);
    VF y = vf_from_vd(vd_mul(c, fxm_pow_mag(ax, pi->q, pi->method)));
    if (pi->is_odd) {
        y = vf_xor(y, fxm_sign(x));
    } else if (!pi->is_int) {
        const VM negfin = vm_and(vf_lt(x, vf_set(0.0f)), vf_gt(x, vf_sub(vf_set(0.0f), fxm_inf())));
        y = vf_sel(negfin, fxm_nan(), y);
    }
    return vf_sel(vf_unord(x, x), fxm_quiet(x), y);
}

/* ---- backward: dy * f'(x) ------------------------------------------------------------------ */

/* E = e^(-a) = p 2^k (a >= 0) and d = 1 + E */
static inline VF fxm_expneg(VF a, VF al, VF *k, VF *d)
{
    const VF p = fxm_exp_parts(vf_sub(vf_set(0.0f), a), vf_sub(vf_set(0.0f), al), k);
    *d = vf_add(vf_set(1.0f), fxm_scale(p, *k));
    return p;
}

/* tanh'(x) = sech^2 x = 4E / (1 + E)^2, E = e^(-2|x|): no cancellation for large |x| (where
 * 1 - tanh^2 would be 0), and scaled once at the end */
static inline VF fxm_dtanh(VF x)
{
    const VF a = fxm_clamp(fxm_abs(fxm_denan(x)), 0.0f, 100.0f);
    VF k = vf_set(0.0f), d = vf_set(0.0f);
    const VF p = fxm_expneg(vf_add(a, a), vf_set(0.0f), &k, &d);
    return fxm_scale(vf_div(vf_mul(vf_set(4.0f), p), vf_mul(d, d)), k);
}

/* sigmoid'(x) = E / (1 + E)^2, E = e^(-|x|) */
static inline VF fxm_dsigmoid(VF x)
{
    const VF a = fxm_clamp(fxm_abs(fxm_denan(x)), 0.0f, 200.0f);
    VF k = vf_set(0.0f), d = vf_set(0.0f);
    const VF p = fxm_expneg(a, vf_set(0.0f), &k, &d);
    return fxm_scale(vf_div(p, vf_mul(d, d)), k);
}

/* silu'(x) = s (1 + x (1 - s)), s = sigmoid(x); s and 1 - s from E = e^(-|x|) without
 * cancellation: x >= 0: s = 1/d, 1 - s = E/d; x < 0: s = E/d (scaled at the end), 1 - s = 1/d */
static inline VF fxm_dsilu(VF x)
{
    const VF xc = fxm_clamp(fxm_denan(x), -200.0f, 200.0f);
    const VM neg = vf_lt(xc, vf_set(0.0f));
    VF k = vf_set(0.0f), d = vf_set(0.0f);
    const VF p = fxm_expneg(fxm_abs(xc), vf_set(0.0f), &k, &d);
    const VF inv = vf_div(vf_set(1.0f), d);
    const VF pos = vf_mul(inv, vf_fma(xc, vf_div(fxm_scale(p, k), d), vf_set(1.0f)));
    const VF ng = fxm_scale(vf_mul(vf_div(p, d), vf_fma(xc, inv, vf_set(1.0f))), k);
    return vf_sel(neg, ng, pos);
}

/* gelu'(x) = Phi(x) + x phi(x), phi(x) = e^(-x^2/2) / sqrt(2 pi) = e^(-z^2) / sqrt(2 pi) with
 * the z of the forward pass. Below z = -0.5 both terms share the factor e^(-z^2) = p 2^k and
 * are scaled once: (erfcx(|z|) / 2 + x / sqrt(2 pi)) p 2^k. The branches are those of the
 * value (fxm_gelu_small); both take e^(-z^2). */
static inline VF fxm_dgelu_near(const fxm_gelu_arg *a)
{
    VF k = vf_set(0.0f);
    const VF p = fxm_exp_negsq(a->az, a->azl, &k);
    const VF xphi = fxm_scale(vf_mul(vf_mul(a->xc, vf_set(0x1.988454p-2f)), p), k);
    VF el;
    const VF eh = fxm_erf_small(a->az, &el);
    const VF phi_small = vf_mul(vf_set(0.5f),
                                fxm_one_plus(eh, el, vf_sel(a->neg, vf_set(-1.0f), vf_set(1.0f))));
    return vf_add(phi_small, xphi);
}

static inline VF fxm_dgelu_far(const fxm_gelu_arg *a)
{
    VF k = vf_set(0.0f);
    const VF p = fxm_exp_negsq(a->az, a->azl, &k);
    const VF xphi = fxm_scale(vf_mul(vf_mul(a->xc, vf_set(0x1.988454p-2f)), p), k);
    const VF F = fxm_erfcx(a->az);
    const VF phi_upper = vf_sub(vf_set(1.0f), vf_mul(vf_set(0.5f), fxm_scale(vf_mul(F, p), k)));
    const VF tail = fxm_scale(
        vf_mul(vf_fma(vf_set(0.5f), F, vf_mul(a->xc, vf_set(0x1.988454p-2f))), p), k);
    return vf_sel(a->neg, tail, vf_add(phi_upper, xphi));
}

/* gelu_tanh'(x) = S + x 2 S (1 - S) u', S = sigmoid(2u), u' = sqrt(2/pi) (1 + 3A x^2);
 * S and 1 - S from E = e^(-|2u|) as for silu; for x < 0 everything carries the factor 2^k,
 * applied once. */
static inline VF fxm_dgelu_tanh(VF x)
{
    const VF xc = fxm_clamp(fxm_denan(x), -30.0f, 30.0f);
    VF yl;
    const VF yh = fxm_gelu_tanh_arg(xc, &yl);
    const VM neg = vf_lt(yh, vf_set(0.0f));
    VF k = vf_set(0.0f), d = vf_set(0.0f);
    const VF p = fxm_expneg(fxm_abs(yh), vf_sel(neg, vf_sub(vf_set(0.0f), yl), yl), &k, &d);
    const VF up = vf_mul(vf_set(0x1.988454p-1f),
                         vf_fma(vf_mul(vf_set(0x1.12ba9ep-3f), xc), xc, vf_set(1.0f)));
    const VF t = vf_mul(vf_add(xc, xc), up); /* 2 x u' */
    const VF inv = vf_div(vf_set(1.0f), d);
    const VF pos = vf_mul(inv, vf_fma(t, vf_div(fxm_scale(p, k), d), vf_set(1.0f)));
    const VF ng = fxm_scale(vf_mul(vf_div(p, d), vf_fma(t, inv, vf_set(1.0f))), k);
    return vf_sel(neg, ng, pos);
}

/* ---- loops ----------------------------------------------------------------------------------- */

/* The last partial vector of a map from element `from` on: x (and dy) through zero-padded
 * buffers, so that no level reads or writes beyond n; PRE (statements) may use v and g before
 * y takes EXPR. */
#define FXM_TAIL(from, PRE, EXPR)                                                                \
    do {                                                                                         \
        float bx[FXM_N], bg[FXM_N], by[FXM_N];                                                   \
        const size_t rest_ = (size_t)(n - (from)) * sizeof(float);                               \
        memset(bx, 0, sizeof bx);                                                                \
        memset(bg, 0, sizeof bg);                                                                \
        memcpy(bx, x + (from), rest_);                                                           \
        if (dy) memcpy(bg, dy + (from), rest_);                                                  \
        const VF v = vf_loadu(bx);                                                               \
        (void)v;                                                                                 \
        const VF g = dy ? vf_loadu(bg) : vf_set(1.0f);                                           \
        (void)g;                                                                                 \
        PRE                                                                                      \
        vf_storeu(by, (EXPR));                                                                   \
        memcpy(y + (from), by, rest_);                                                           \
    } while (0)

/* y[i] = EXPR(v) over n elements, v = the vector of x (and g of dy when dy is used). */
#define FXM_MAP(EXPR)                                                                            \
    do {                                                                                         \
        int64_t i_ = 0;                                                                          \
        for (; i_ + FXM_N <= n; i_ += FXM_N) {                                                   \
            if (FXM_N >= 16 || (i_ & 15) == 0) { /* once a 64-byte line */                     \
                fx_prefetch_at(x + i_, FXM_AHEAD);                                               \
                if (dy) fx_prefetch_at(dy + i_, FXM_AHEAD);                                      \
            }                                                                                    \
            const VF v = vf_loadu(x + i_);                                                       \
            (void)v;                                                                             \
            const VF g = dy ? vf_loadu(dy + i_) : vf_set(1.0f);                                  \
            (void)g;                                                                             \
            vf_storeu(y + i_, (EXPR));                                                           \
        }                                                                                        \
        if (i_ < n) FXM_TAIL(i_, , EXPR);                                                        \
    } while (0)

/* NaN x gives NaN in every gradient that uses x's value (abs and clamp decide by compares) */
static inline VF fxm_nan_of(VF x, VF r) { return vf_sel(vf_unord(x, x), fxm_quiet(x), r); }

/* ---- split maps ------------------------------------------------------------------------------ */

/* gelu and its derivative have two branches, chosen per lane by |z| < 0.5, and the one-vector
 * forms compute both and select. Over an array each lane needs only its own: a block of up to
 * FXM_SPLIT values is partitioned by the lanes' branch into two dense buffers (the level's
 * compress, lanes kept in order), each branch runs over its buffer in whole vectors, and the
 * results are expanded back into place. Every value goes through the same operations as in
 * the one-vector form, so the bits are the same on every level; what is saved is the discarded
 * branch, most of the work where the inputs are mixed (standard-normal ones are about half
 * and half, so nearly every vector holds both). The partial vector at the end takes the
 * one-vector form. EPI(v, g, r) makes the stored value from the input v, dy's g (1 in a
 * forward pass) and the branch's result r. */
#define FXM_SPLIT 512

/* One line of x, dy (where there is one) and y at byte `ahead` from element `at`, once a line,
 * and the cursor moved on by a vector: the split maps' prefetches. Issued all at once at the
 * start of a block, they filled the line-fill buffers and left memory idle through the
 * arithmetic (gelu's backward over 100 MB, one thread: slower than the one-vector map). */
#define FXM_SPLIT_AHEAD(x, dy, y, at, ahead)                                                     \
    do {                                                                                         \
        if (((ahead) & 63) == 0) {                                                               \
            fx_prefetch_at((x) + (at), (ahead));                                                 \
            if (dy) fx_prefetch_at((dy) + (at), (ahead));                                        \
            fx_prefetch_write_at((y) + (at), (ahead));                                           \
        }                                                                                        \
        (ahead) += FXM_N * (int64_t)sizeof(float);                                               \
    } while (0)

#define FXM_SPLIT_MAP(NAME, NEAR, FAR, EPI)                                                      \
    static void NAME(const float *x, const float *dy, float *y, int64_t n)                      \
    {                                                                                            \
        float near_[FXM_SPLIT + FXM_N], far_[FXM_SPLIT + FXM_N];                                 \
        VM small_[FXM_SPLIT / FXM_N];                                                            \
        const int64_t whole = n / FXM_N * FXM_N;                                                 \
        for (int64_t i0 = 0; i0 < whole; i0 += FXM_SPLIT) {                                      \
            const int64_t len = whole - i0 < FXM_SPLIT ? whole - i0 : FXM_SPLIT;                 \
            int64_t nn = 0, nf = 0;                                                              \
            for (int64_t i = 0; i < len; i += FXM_N) {                                           \
                const VF v = vf_loadu(x + i0 + i);                                               \
                const fxm_gelu_arg a = fxm_gelu_prep(v);                                         \
                const VM m = fxm_gelu_small(&a);                                                 \
                small_[i / FXM_N] = m;                                                           \
                nn += vf_compress_store(near_ + nn, m, v);                                       \
                nf += vf_compress_store(far_ + nf, vm_not(m), v);                                \
            }                                                                                    \
            /* the last partial vector of each buffer (and what the expands read past it) */    \
            memset(near_ + nn, 0, FXM_N * sizeof(float));                                        \
            memset(far_ + nf, 0, FXM_N * sizeof(float));                                         \
            /* the next block's lines, one of each stream a vector of either branch (about \
             * the block's length in all), so that memory stays busy through the arithmetic */  \
            int64_t ahead = 0;                                                                   \
            for (int64_t k = 0; k < nn; k += FXM_N) {                                            \
                FXM_SPLIT_AHEAD(x, dy, y, i0 + len, ahead);                                      \
                const fxm_gelu_arg a = fxm_gelu_prep(vf_loadu(near_ + k));                       \
                vf_storeu(near_ + k, NEAR(&a));                                                  \
            }                                                                                    \
            for (int64_t k = 0; k < nf; k += FXM_N) {                                            \
                FXM_SPLIT_AHEAD(x, dy, y, i0 + len, ahead);                                      \
                const fxm_gelu_arg a = fxm_gelu_prep(vf_loadu(far_ + k));                        \
                vf_storeu(far_ + k, FAR(&a));                                                    \
            }                                                                                    \
            int64_t pn = 0, pf = 0;                                                              \
            for (int64_t i = 0; i < len; i += FXM_N) {                                           \
                const VM m = small_[i / FXM_N];                                                  \
                const VF r = vf_sel(m, vf_expand_load(near_ + pn, m),                            \
                                    vf_expand_load(far_ + pf, vm_not(m)));                       \
                pn += vm_count(m);                                                               \
                pf += FXM_N - vm_count(m);                                                       \
                const VF v = vf_loadu(x + i0 + i);                                               \
                const VF g = dy ? vf_loadu(dy + i0 + i) : vf_set(1.0f);                          \
                (void)g;                                                                         \
                vf_storeu(y + i0 + i, (EPI));                                                    \
            }                                                                                    \
        }                                                                                        \
        if (whole < n)                                                                           \
            FXM_TAIL(whole,                                                                      \
                     const fxm_gelu_arg a = fxm_gelu_prep(v);                                    \
                     const VF r = vf_sel(fxm_gelu_small(&a), NEAR(&a), FAR(&a));, EPI);          \
    }

/* gelu: fxm_gelu's bits; gelu's backward: dy * fxm_dgelu's, NaN where x is NaN */
FXM_SPLIT_MAP(fxm_gelu_map, fxm_gelu_near, fxm_gelu_far,
              vf_sel(vf_unord(v, v), fxm_quiet(v), r))
FXM_SPLIT_MAP(fxm_dgelu_map, fxm_dgelu_near, fxm_dgelu_far, fxm_nan_of(v, vf_mul(g, r)))

static int fxm_forward(int fn, const double *prm, const float *x, float *y, int64_t n)
{
    const float *dy = NULL;
    switch (fn) {
    case FX_UN_EXP: FXM_MAP(fxm_exp(v)); break;
    case FX_UN_LOG: FXM_MAP(fxm_log(v)); break;
    case FX_UN_SQRT: FXM_MAP(vf_sqrt(v)); break;
    case FX_UN_RSQRT: FXM_MAP(fxm_rsqrt(v)); break;
    case FX_UN_RECIPROCAL: FXM_MAP(vf_div(vf_set(1.0f), v)); break;
    case FX_UN_TANH: FXM_MAP(fxm_tanh(v)); break;
    case FX_UN_SIGMOID: FXM_MAP(fxm_sigmoid(v)); break;
    case FX_UN_GELU: fxm_gelu_map(x, NULL, y, n); break;
    case FX_UN_GELU_TANH: FXM_MAP(fxm_gelu_tanh(v)); break;
    case FX_UN_SILU: FXM_MAP(fxm_silu(v)); break;
    case FX_UN_SQUARE: FXM_MAP(vf_mul(v, v)); break;
    case FX_UN_ABS: FXM_MAP(fxm_abs(v)); break;
    case FX_UN_ERF: FXM_MAP(fxm_erf(v)); break;
    case FX_UN_ERFC: FXM_MAP(fxm_erfc(v)); break;
    case FX_UN_CLAMP: {
        const VF lo = vf_set((float)prm[0]), hi = vf_set((float)prm[1]);
        FXM_MAP(vf_sel(vf_lt(v, lo), lo, vf_sel(vf_gt(v, hi), hi, v)));
        break;
    }
    case FX_UN_POW: {
        if (prm[0] == 0.0) { /* x^0 = 1 for every x, NaN included (C99) */
            FXM_MAP(vf_set(1.0f));
            break;
        }
        const fxm_pow_info pi = fxm_pow_prepare(prm[0]);
        FXM_MAP(fxm_pow_times(v, &pi, vd_set(1.0)));
        break;
    }
    default: return FX_EINVAL;
    }
    return FX_OK;
}

static int fxm_backward(int fn, const double *prm, const float *dy, const float *x, float *y,
                        int64_t n)
{
    switch (fn) {
    case FX_UN_EXP: FXM_MAP(vf_mul(g, fxm_exp(v))); break;
    case FX_UN_LOG: FXM_MAP(vf_div(g, v)); break;
    case FX_UN_SQRT: {
        FXM_MAP(vf_div(g, vf_add(vf_sqrt(v), vf_sqrt(v))));
        break;
    }
    case FX_UN_RSQRT: /* -x^(-3/2) / 2 = -(r / x) / 2 */
        FXM_MAP(vf_mul(vf_mul(vf_set(-0.5f), g), vf_div(fxm_rsqrt(v), v)));
        break;
    case FX_UN_RECIPROCAL: { /* -1/x^2, as -(dy / x) / x so that x^2 never overflows alone */
        FXM_MAP(vf_sub(vf_set(0.0f), vf_mul(vf_mul(g, vf_div(vf_set(1.0f), v)),
                                            vf_div(vf_set(1.0f), v))));
        break;
    }
    case FX_UN_TANH: FXM_MAP(fxm_nan_of(v, vf_mul(g, fxm_dtanh(v)))); break;
    case FX_UN_SIGMOID: FXM_MAP(fxm_nan_of(v, vf_mul(g, fxm_dsigmoid(v)))); break;
    case FX_UN_GELU: fxm_dgelu_map(x, dy, y, n); break;
    case FX_UN_GELU_TANH: FXM_MAP(fxm_nan_of(v, vf_mul(g, fxm_dgelu_tanh(v)))); break;
    case FX_UN_SILU: FXM_MAP(fxm_nan_of(v, vf_mul(g, fxm_dsilu(v)))); break;
    case FX_UN_SQUARE: FXM_MAP(vf_mul(vf_add(v, v), g)); break;
    case FX_UN_ABS: { /* dy * sign(x), sign(0) = 0 (as PyTorch), NaN x gives NaN */
        const VF one = vf_set(1.0f), zero = vf_set(0.0f);
        FXM_MAP(fxm_nan_of(v, vf_mul(g, vf_sel(vf_gt(v, zero), one,
                                              vf_sel(vf_lt(v, zero), vf_sub(zero, one), zero)))));
        break;
    }
    case FX_UN_CLAMP: { /* dy where lo <= x <= hi, else 0 (NaN x: 0), as PyTorch */
        const VF lo = vf_set((float)prm[0]), hi = vf_set((float)prm[1]);
        FXM_MAP(vf_sel(vm_and(vf_ge(v, lo), vf_le(v, hi)), g, vf_set(0.0f)));
        break;
    }
    case FX_UN_POW: {
        const double p = prm[0];
        if (p == 0.0) { /* the gradient of a constant (PyTorch masks it to 0 the same way) */
            FXM_MAP(vf_mul(g, vf_set(0.0f)));
            break;
        }
        if (p == 1.0) {
            FXM_MAP(g);
            break;
        }
        const fxm_pow_info pi = fxm_pow_prepare(p - 1.0);
        FXM_MAP(fxm_pow_times(v, &pi, vd_mul(vd_set(p), vd_from_vf(g))));
        break;
    }
    default: return FX_EINVAL;
    }
    return FX_OK;
}

#undef FXM_MAP

/* The exported entry points; FXM_KERNEL and FXM_ENTRY are the level's names. */
int FXM_ENTRY(int fn, const double *p, const float *x, const float *dy, float *y, int64_t n)
{
    static const double none[2] = {0.0, 0.0};
    if (!p) p = none;
    return dy ? fxm_backward(fn, p, dy, x, y, n) : fxm_forward(fn, p, x, y, n);
}

static void fxm_range(const fx_op_call *c, int64_t lo, int64_t hi)
{
    const float *a = (const float *)c->in[0].data;
    if (c->op == FX_OP_UNARY)
        fxm_forward(c->unary_fn, c->unary_p, a + lo, c->out_f32 + lo, hi - lo);
    else
        fxm_backward(c->unary_fn, c->unary_p, a + lo, (const float *)c->in[1].data + lo,
                     c->out_f32 + lo, hi - lo);
}

int FXM_KERNEL(const fx_op_call *c)
{
    if (c->unary_fn < 0 || c->unary_fn >= FX_UN_COUNT ||
        (c->op == FX_OP_UNARY_BACKWARD && (c->unary_fn == FX_UN_ERF || c->unary_fn == FX_UN_ERFC)))
        return FX_EINVAL;
    fx_f32_parallel_ranges(c, c->out_numel, FX_F32_EW_CHUNK, FX_F32_MATH_MIN_PARALLEL, fxm_range);
    return FX_OK;
}

#endif
