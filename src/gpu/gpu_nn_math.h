/* Scalar steps of the training ops that the CPU code (src/nn/...) and the CUDA kernels
 * (src/gpu/gpu_nn.cu) both run: FX_HD (src/core/fx_hd.h), so there is one definition of each
 * and the device results are those the CPU tests prove.
 *
 *   fx_pool_geom            the pooling geometry (pool.c validates it, both sides use it)
 *   fx_div_odd_shift        the shift of pool.c's exact average (pool_divide_exact)
 *   fx_div_odd_signed       one quotient of that average
 *   fx_quotient_f64_odd     one mean of reduce.c as a round-to-odd double
 *   fx_sr_round_hd          stochastic rounding onto the fp16/bf16 grids: the definition
 *                           behind src/nn/stochastic_round.c's fx_sr_round
 */
#ifndef FX_GPU_NN_MATH_H
#define FX_GPU_NN_MATH_H

#include "../core/fx_hd.h"
#include "../flex/flex_math.h"

/* Pooling geometry of x [N,C,H,W] -> y [N,C,OH,OW]: window KH x KW, stride (sh, sw), padding
 * (ph, pw). */
typedef struct fx_pool_geom {
    int64_t N, C, H, W, KH, KW, OH, OW, sh, sw, ph, pw;
} fx_pool_geom;

/* The batch-norm layout (batchnorm.c validates it, both sides use it). */
typedef struct fx_bn_dims {
    int64_t N, C, S, M; /* element (n, c, s) at (n * C + c) * S + s; M = N * S */
} fx_bn_dims;

/* The shift k of an exact average by a count that is not a power of two (pool.c,
 * pool_divide_exact): with b = bitlen(max |v|) and L = floor(log2 count), k = 53 - b + L makes
 * every |v| * 2^k / count < 2^53 and the largest >= 2^51. mx must be nonzero. */
static inline FX_HD int fx_div_odd_shift(uint64_t mx, uint64_t count)
{
    const int L = fx_bitlen_u64(count) - 1;
    return 53 - fx_bitlen_u64(mx) + L;
}

/* v * 2^k / count, truncated with the lowest bit set when inexact (round to odd), sign kept. */
static inline FX_HD int64_t fx_div_odd_signed(int64_t v, uint64_t count, int k)
{
    const int neg = v < 0;
    const uint64_t a = neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    const uint64_t q = fx_udiv_round_odd(a, count, k);
    return neg ? -(int64_t)q : (int64_t)q; /* q < 2^53 by the choice of k */
}

/* s * 2^e / d as a double rounded to odd at 53 bits (reduce.c's float-output mean). The
 * quotient is formed with 60 to 62 significant bits and the sticky bit, then jammed down to 53
 * bits (rounding to odd twice is rounding to odd once), so the double is exact and any later
 * rounding to 51 bits or fewer is the correct rounding of s * 2^e / d. */
static inline FX_HD double fx_quotient_f64_odd(int64_t s, uint64_t d, int e)
{
    if (s == 0) return 0.0;
    const uint64_t a = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    int k = 61 + fx_bitlen_u64(d) - fx_bitlen_u64(a); /* a * 2^k / d in [2^60, 2^62) */
    if (k < 0) k = 0;                                  /* a / d >= 2^60 already */
    uint64_t q = fx_udiv_round_odd(a, d, k);
    const int sh = fx_bitlen_u64(q) > 53 ? fx_bitlen_u64(q) - 53 : 0;
    if (sh) q = (q >> sh) | (uint64_t)((q & (((uint64_t)1 << sh) - 1)) != 0);
    const double v = ldexp((double)q, e - k + sh);
    return s < 0 ? -v : v;
}

/* Stochastic rounding of x onto the fp16 (fp16 != 0) or bf16 grid with 64 random bits, as
 * fx_sr_round (src/nn/stochastic_round.h): |x| = M * 2^k; the kept part is M >> d with d the
 * bits below the grid step, rounded up iff bits < (discarded fraction) * 2^64. +-0, Inf and NaN
 * pass unchanged; a magnitude rounded past the largest finite value becomes +-Inf. */
static inline FX_HD float fx_sr_round_hd(int fp16, float x, uint64_t bits)
{
    const int prec = fp16 ? 11 : 8, emin = fp16 ? -14 : -126;
    const double overflow = fp16 ? 65536.0 : ldexp(1.0, 128);
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t biased = (u >> 23) & 0xffu;
    const uint32_t frac_bits = u & 0x7fffffu;
    if (biased == 0xffu) return x;               /* Inf and NaN */
    if (biased == 0 && frac_bits == 0) return x; /* +-0 */
    uint64_t M;
    int k, e;
    if (biased == 0) {
        M = frac_bits;
        k = -149;
        e = -127;
    } else {
        M = frac_bits | 0x800000u;
        k = (int)biased - 150;
        e = (int)biased - 127;
    }
    const int g = (e > emin ? e : emin) - (prec - 1); /* grid step 2^g at x */
    const int d = g - k;                             /* >= 13 discarded bits */
    uint64_t kept, frac64;
    if (d >= 64) {
        kept = 0;
        frac64 = d - 64 < 64 ? M >> (d - 64) : 0;
    } else {
        kept = M >> d;
        frac64 = (M & (((uint64_t)1 << d) - 1)) << (64 - d);
    }
    if (bits < frac64) kept++;
    const double mag = ldexp((double)kept, g); /* exact: kept <= 2^prec */
    uint32_t r;
    if (mag >= overflow) {
        r = 0x7f800000u;
    } else {
        const float f = (float)mag;
        memcpy(&r, &f, sizeof r);
    }
    r |= u & 0x80000000u; /* the sign of x, also for a result of zero */
    float out;
    memcpy(&out, &r, sizeof out);
    return out;
}

#endif
