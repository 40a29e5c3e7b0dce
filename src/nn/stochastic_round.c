/* Stochastic rounding onto the fp16/bf16 grids; see stochastic_round.h.
 *
 * Why integers: |x| = M * 2^k exactly, with M the 24-bit significand (implicit bit included)
 * and k its weight, and the target grid step at x is 2^g. The kept part is M >> (g - k) and the
 * discarded fraction is the low (g - k) bits of M, read as a binary fraction. Working on those
 * bits makes the probability of rounding up exactly the fraction, with no floating-point
 * rounding anywhere, and handles normal numbers, subnormals of both formats and fp32
 * subnormals with one formula. */
#include "stochastic_round.h"

#include "../flex/flex_math.h"

#include <math.h>
#include <string.h>

typedef struct fx_sr_grid {
    int prec;        /* significand bits of the target, implicit bit included */
    int emin;        /* exponent of the smallest normal target value */
    double overflow; /* first power of two past the largest finite target value */
} fx_sr_grid;

static const fx_sr_grid FX_SR_FP16 = {11, -14, 0x1.0p16};
static const fx_sr_grid FX_SR_BF16 = {8, -126, 0x1.0p128};

static float fx_sr_round_grid(const fx_sr_grid *gr, float x, uint64_t bits)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t biased = (u >> 23) & 0xffu;
    const uint32_t frac_bits = u & 0x7fffffu;
    if (biased == 0xffu) return x; /* Inf and NaN pass through */
    if (biased == 0 && frac_bits == 0) return x; /* +-0 */

    uint64_t M;
    int k, e; /* |x| = M * 2^k; e = floor(log2 |x|) for normals, below -126 for subnormals */
    if (biased == 0) {
        M = frac_bits;
        k = -149;
        e = -127;
    } else {
        M = frac_bits | 0x800000u;
        k = (int)biased - 150;
        e = (int)biased - 127;
    }
    const int g = (e > gr->emin ? e : gr->emin) - (gr->prec - 1); /* grid step 2^g at x */
    const int d = g - k; /* bits to discard: >= 24 - prec >= 13 for both targets */

    uint64_t kept, frac64;
    if (d >= 64) {
        /* M < 2^24 <= 2^d: nothing is kept; the fraction M / 2^d as 64 fraction bits
           (truncated when d > 64, i.e. far below the smallest subnormal) */
        kept = 0;
        frac64 = d - 64 < 64 ? M >> (d - 64) : 0;
    } else {
        kept = M >> d;
        frac64 = (M & ((1ULL << d) - 1)) << (64 - d);
    }
    if (bits < frac64) kept++;

    /* kept * 2^g: kept <= 2^prec, g >= -149 - 24, so the double is exact */
    double mag = ldexp((double)kept, g);
    float r = mag >= gr->overflow ? INFINITY : (float)mag;
    return signbit(x) ? -r : r;
}

float fx_sr_round(fmt_t fmt, float x, uint64_t bits)
{
    if (fmt == FMT_FP16) return fx_sr_round_grid(&FX_SR_FP16, x, bits);
    if (fmt == FMT_BF16) return fx_sr_round_grid(&FX_SR_BF16, x, bits);
    return x; /* fp32 holds every fp32 value; shared-exponent formats round in the write path */
}

void fx_sr_round_array(fmt_t fmt, float *vals, int64_t n, uint64_t seed, uint64_t counter)
{
    if (fmt != FMT_FP16 && fmt != FMT_BF16) return;
    const fx_sr_grid *gr = fmt == FMT_FP16 ? &FX_SR_FP16 : &FX_SR_BF16;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(flexpoint_num_threads()) if (n >= (1 << 17))
#endif
    for (int64_t i = 0; i < n; i++)
        vals[i] = fx_sr_round_grid(gr, vals[i], fx_rng_u64(seed, counter, (uint64_t)i));
}
