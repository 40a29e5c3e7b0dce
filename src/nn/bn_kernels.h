/* The batch-norm kernels of a level (src/nn/batchnorm.c defines the portable ones, which are the
 * definition; src/nn/batchnorm_avx2.c the AVX2 ones, which give the same bits).
 *
 * Every sum runs in the portable order: per channel, four partial sums in double over
 * interleaved elements of each row (element s of a row goes to partial s mod 4; a row's last
 * S mod 4 elements to partial 0), rows in order, combined as (p0 + p1) + (p2 + p3). A SIMD
 * level keeps the four partials in the four lanes of one vector, so its sums are the same
 * bits; it gains its speed from running the chains of up to FX_BN_GROUP channels side by side
 * (the order within each channel does not change). Products and sums are never contracted
 * into fused multiply-adds. */
#ifndef FX_BN_KERNELS_H
#define FX_BN_KERNELS_H

#include "../core/backend.h" /* fx_fp16_to_f32 */
#include "../core/prefetch.h"
#include "../gpu/gpu_nn_math.h" /* fx_bn_dims */

#include <math.h>
#include <stdint.h>
#include <string.h>

struct fx_bn_q16;

#define FX_BN_GROUP 4 /* channels a stats or grad_sums call takes at most */

/* Where a kernel reads an input tensor (row-major, element i at index i): fp32 values, or
 * 16-bit values that the kernel widens itself to exactly the fp32 values that an fp32 copy
 * (nn_in_f32: dequantisation, bf16 and fp16 widening) would hold, so every sum and output is
 * the same bits as from that copy. Reading 2 bytes in place saves the copy's pass over the
 * tensor. (3 is the SIMD levels' FX_BN_I16_EXACT, below.) */
enum { FX_BN_F32 = 0, FX_BN_I16 = 1, FX_BN_BF16 = 2, FX_BN_FP16 = 4 };
#define FX_BN_I16_EXP_MIN (-149) /* 2^exp from the smallest fp32 subnormal ... */
#define FX_BN_I16_EXP_MAX 127    /* ... to the largest power of two in fp32 */
typedef struct fx_bn_src {
    const void *p; /* element 0 */
    int kind;      /* FX_BN_F32 (float), FX_BN_I16 (FLEX16_5/DFP16 mantissas), FX_BN_BF16,
                    * FX_BN_FP16 */
    double scale;  /* FX_BN_I16: 2^exp, the weight of a mantissa, an fp32 number (exp in
                    * [FX_BN_I16_EXP_MIN, FX_BN_I16_EXP_MAX]) */
} fx_bn_src;

/* Element i of a source as the double the kernels compute with: (double) of its fp32 value.
 * A mantissa's fp32 value is the dequantisation's (float)(m * 2^exp) (fx_flex_dequant_scalar),
 * which is m * 2^exp itself unless it leaves fp32's range; bf16 widens by a shift, fp16 by its
 * definition (fx_fp16_to_f32: exact; a signalling NaN stays one in fp32, and the widening to
 * double quiets it as the SIMD levels' conversion does). */
static inline double fx_bn_at(const fx_bn_src *s, int64_t i)
{
    if (s->kind == FX_BN_FP16) return (double)fx_fp16_to_f32(((const uint16_t *)s->p)[i]);
    if (s->kind == FX_BN_I16) return (double)(float)((double)((const int16_t *)s->p)[i] * s->scale);
    if (s->kind == FX_BN_BF16) {
        const uint32_t bits = (uint32_t)((const uint16_t *)s->p)[i] << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return (double)f;
    }
    return (double)((const float *)s->p)[i];
}

/* The SIMD levels' channel passes (stats, var, grad_sums, sum_range_i16) walk each channel's
 * rows, S values apiece, one image's channel plane after another: short runs (ResNet-20's
 * stage-3 rows are 128 bytes) a C S-value stride apart, which the hardware prefetchers do not
 * follow across the jumps. As a pass reads a line of a row it prefetches the same line of the
 * row enough images further on to be at least 2 KiB of each stream ahead (the stage-3 input
 * gradient's channel sums took a third less time with it, cold, two threads). */
static inline int64_t fx_bn_src_bytes(int kind) { return kind == FX_BN_F32 ? 4 : 2; }

/* how many elements ahead a pass over sources of elem_bytes elements prefetches */
static inline int64_t fx_bn_ahead(const fx_bn_dims *d, int64_t elem_bytes)
{
    const int64_t row = d->S * elem_bytes;
    return (row >= 2048 ? 1 : (2048 + row - 1) / row) * d->C * d->S;
}

/* At element i, s values into its row: where s starts a line (elements of elem_bytes), the
 * line `ahead` elements on */
static inline void fx_bn_prefetch(const fx_bn_src *x, int64_t i, int64_t s, int64_t ahead,
                                  int64_t elem_bytes)
{
    if (s % (64 / elem_bytes) == 0)
        fx_prefetch_at((const char *)x->p + i * elem_bytes, ahead * elem_bytes);
}

/* The statistics a write needs of the fp32 values an element-wise kernel produced (those of
 * the write path's own scan, fx_flex_maxabs_f32_scalar): the largest finite |value| and the
 * count of NaN and Inf. Kernels add to them (max and sum), so one record can span calls. */
typedef struct fx_bn_max {
    float max;
    int64_t nonfinite;
} fx_bn_max;

static inline void fx_bn_max_add(fx_bn_max *m, float v)
{
    const float a = fabsf(v);
    if (!isfinite(a))
        m->nonfinite++;
    else if (a > m->max)
        m->max = a;
}

typedef struct fx_bn_kernels {
    /* mean[j] and biased variance var[j] of channel c0 + j, j < nc (1 <= nc <= FX_BN_GROUP),
     * two-pass: the mean, then the mean of (x - mean)^2 */
    void (*stats)(const fx_bn_src *x, const fx_bn_dims *d, int64_t c0, int nc, double *mean,
                  double *var);
    /* sdy[j] = sum dy and sdyx[j] = sum dy * ((x - mu[j]) * is[j]) over channel c0 + j */
    void (*grad_sums)(const fx_bn_src *x, const fx_bn_src *dy, const fx_bn_dims *d, int64_t c0,
                      int nc, const double *mu, const double *is, double *sdy, double *sdyx);
    /* q[s] = (x[off + s] - mu) * a + b for s < S, rounded to fp32 to nearest, or to odd when
     * odd is set (nn_round_f32); mx (NULL: not kept) takes the statistics of the q[s] */
    void (*normalize)(const fx_bn_src *x, int64_t off, float *q, int64_t S, double mu, double a,
                      double b, int odd, fx_bn_max *mx);
    /* q[s] = k * (g[off + s] - mdy - xhat * mdyx), xhat = (x[off + s] - mu) * is, rounded and
     * counted as normalize's */
    void (*backward)(const fx_bn_src *x, const fx_bn_src *g, int64_t off, float *q, int64_t S,
                     double mu, double is, double k, double mdy, double mdyx, int odd,
                     fx_bn_max *mx);
    /* stats' second pass alone: var[j] = the mean of (x - mean[j])^2 over channel c0 + j, in
     * stats' order (the same bits as stats gives, for the same mean) */
    void (*var)(const fx_bn_src *x, const fx_bn_dims *d, int64_t c0, int nc, const double *mean,
                double *var);
    /* Integers only: over channel c0 + j of int16 mantissas m (laid out as x), the exact sum
     * sum[j] and the smallest and largest mantissa lo[j], hi[j] (INT16_MAX and INT16_MIN for a
     * channel with no elements). d->M must be below 2^47, so that no sum leaves int64. */
    void (*sum_range_i16)(const int16_t *m, const fx_bn_dims *d, int64_t c0, int nc,
                          int64_t *sum, int16_t *lo, int16_t *hi);
    /* fp16/bf16 outputs written in registers, for `rows` rows of S values with the same
     * constants (one channel's rows), row r at element off + r * stride of x and at out +
     * r * stride: out[s] = normalize's q[s] rounded to odd, then (relu set) tensor_relu's rule,
     * then rounded to the half format (FX_BN_OUT_FP16 or FX_BN_OUT_BF16) by its definition;
     * the bits of normalize into an fp32 row, the ReLU on it and the bulk conversion, without
     * the row's store and reload (on a Zen 5 that conversion alone was 6 % of a bf16 ResNet-20
     * step). out may be x itself (in place). Returns 1, or 0 for a source it declines (nothing
     * written: the caller takes the fp32 rows). NULL where a level has none. */
    int (*normalize_half)(const fx_bn_src *x, int64_t off, uint16_t *out, int64_t S,
                          int64_t rows, int64_t stride, double mu, double a, double b, int half,
                          int relu);
    /* the same for backward's q (rounded to odd, no ReLU); out may be x or g itself */
    int (*backward_half)(const fx_bn_src *x, const fx_bn_src *g, int64_t off, uint16_t *out,
                         int64_t S, int64_t rows, int64_t stride, double mu, double is,
                         double k, double mdy, double mdyx, int half);
    /* FLEX16_5/DFP16 outputs rounded in registers, nearest-even only: out[s] (out NULL: none
     * stored) = normalize's q[s] rounded to odd and then quantised at exponent e as the
     * level's quant_f32 quantises it, that quantisation's statistics added to *acc
     * (fx_bn_q16_stats turns a record into them); the bits of the fp32 row and quant_f32 on
     * it, without the row (on the AVX2 EPYC the row and its separate rounding made FLEX16_5
     * batch norm 2.3x fp32's). Returns 1, or 0 for what it declines (sources other than exact
     * mantissas, coefficients that are not finite or above 2^200, e outside
     * [FX_BN_Q16_EXP_MIN, FX_BN_Q16_EXP_MAX]): out and *acc are then not to be used, and the
     * caller takes the fp32 row. NULL where a level has none. */
    int (*normalize_i16)(const fx_bn_src *x, int64_t off, int16_t *out, int64_t S, double mu,
                         double a, double b, int e, struct fx_bn_q16 *acc);
    /* the same for backward's q */
    int (*backward_i16)(const fx_bn_src *x, const fx_bn_src *g, int64_t off, int16_t *out,
                        int64_t S, double mu, double is, double k, double mdy, double mdyx,
                        int e, struct fx_bn_q16 *acc);
    /* Nonzero where the op should hand this level fp16 tensors as FX_BN_FP16 sources (read in
     * place) rather than through an fp32 copy: every level's kernels take both with the same
     * bits, and which is faster is measured per level (the passes widen a source each time
     * they read it, the copy once). */
    int fp16_in_place;
} fx_bn_kernels;

/* normalize_i16's and backward_i16's exponents: from e = -140, fp32's finest step (2^-149, in
 * the subnormals) is at most 2^-9 of the integer grid at e, so the round to odd keeps the two
 * bits beyond that grid that make rounding the double straight to the grid give the same
 * integer (Boldo and Melquiond's round-to-odd property); the top is the largest exponent a
 * write can pick. */
#define FX_BN_Q16_EXP_MIN (-140)
#define FX_BN_Q16_EXP_MAX 127

/* normalize_i16's and backward_i16's statistics over the rows of a piece (at most 2^31
 * elements), kept per lane as the AVX2 kernels keep them, so that a row adds to them without a
 * horizontal reduction (a 64-value row of ResNet-20's last stage is 8 vectors): t is a value
 * before any rounding, m its mantissa. fx_bn_q16_stats (batchnorm_direct.c) sums them into a
 * quant_f32's statistics. */
typedef struct fx_bn_q16 {
    double max_t[4];                          /* largest |t| */
    int64_t zero_t[4];                        /* the zeros of t */
    int32_t zero_m[8], sat[8], max_out[8];    /* zeros of m, saturations, largest |m| */
    double tail_max_t;                        /* the same for the elements rounded one by one */
    int64_t tail_zero_t, tail_zero_m, tail_sat;
    int32_t tail_max_out;
} fx_bn_q16;

/* A record's statistics as quant_f32 gives them for the same values (batchnorm_avx2.c says
 * why): 1, or 0 where some |t| passed FLT_MAX (the piece then takes the fp32 row). */
struct fx_qstats;
int fx_bn_q16_stats(const fx_bn_q16 *r, struct fx_qstats *st);

enum { FX_BN_OUT_FP16 = 1, FX_BN_OUT_BF16 = 2 }; /* normalize_half's and backward_half's half */

/* A mantissa source whose every m 2^exp is an fp32 number: 2^exp from 2^-149 (fx_bn_src's
 * least: m 2^exp is then a multiple of fp32's smallest step with at most 16 significant bits)
 * to 2^112 (|m| 2^exp below 2^128). fx_bn_at then gives m 2^exp itself, so the SIMD levels
 * widen it to double in one conversion and an exact multiply, where the fp32 route takes two
 * conversions (int32 -> fp32 -> double), and its mean follows from the mantissas' integer sum
 * (fx_bn_int_mean_ok). Other mantissa sources (exponents above 112: values up to 2^127, which
 * training never holds) take the portable kernels, which give the same bits. */
static inline int fx_bn_i16_exact(const fx_bn_src *x)
{
    return x->kind == FX_BN_I16 && x->scale >= 0x1p-149 && x->scale <= 0x1p112;
}

/* The SIMD levels' kind for fx_bn_i16_exact sources (never seen by fx_bn_src's callers), the
 * source with that kind where it applies, and fx_bn_at for every kind including it. */
#define FX_BN_I16_EXACT 3

static inline fx_bn_src fx_bn_exact_kind(const fx_bn_src *x)
{
    fx_bn_src e = *x;
    if (fx_bn_i16_exact(x)) e.kind = FX_BN_I16_EXACT;
    return e;
}

static inline double fx_bn_at_exact(const fx_bn_src *x, int64_t i)
{
    if (x->kind == FX_BN_I16_EXACT) return (double)((const int16_t *)x->p)[i] * x->scale;
    return fx_bn_at(x, i);
}

/* The SIMD levels' sum_range_i16 sum pairs of mantissas (|pair| <= 2^16) into int32 lanes and
 * widen those into int64 lanes every FX_BN_SUM32_VECS vectors, before 2^15 pairs could leave
 * int32. */
#define FX_BN_SUM32_VECS 16384

/* Whether a source's mean can be taken from the integer sum of its mantissas (sum_range_i16):
 * fx_bn_i16_exact sources, whose every partial sum of stats' first pass is then an integer
 * multiple of 2^exp below 2^53 2^exp, exact in double, so that the mean it gives,
 * (sum m) 2^exp / M, is fx_bn_int_mean's. M below 2^37 keeps those sums below 2^53 units. */
static inline int fx_bn_int_mean_ok(const fx_bn_src *x, const fx_bn_dims *d)
{
    return fx_bn_i16_exact(x) && d->M < ((int64_t)1 << 37);
}

/* stats' mean from the exact sum of the mantissas (fx_bn_int_mean_ok sources) */
static inline double fx_bn_int_mean(int64_t sum, double scale, const fx_bn_dims *d)
{
    return (double)sum * scale / (double)d->M;
}

/* Channels per kernel call of the channel passes: FX_BN_GROUP while there are groups for every
 * thread, else one (a few channels over many threads); the bits do not depend on it. The
 * direct routes' element-wise passes (batchnorm_direct.c) walk the same groups on the same
 * threads, so that each thread reads again what its channel pass read last. */
static inline int64_t fx_bn_group_size(int64_t C, int nt)
{
    return (C + FX_BN_GROUP - 1) / FX_BN_GROUP >= nt ? FX_BN_GROUP : 1;
}

extern const fx_bn_kernels fx_bn_kernels_portable;
extern const fx_bn_kernels fx_bn_kernels_avx2;
extern const fx_bn_kernels fx_bn_kernels_avx512;

/* Every pair of source kinds (x, dy) gets its own loop in the SIMD levels' grad_sums and
 * backward: training's pairs have one kind, a mixed pair is x and dy in two formats. FX_BN_KIND_PAIRS_OF takes the
 * kind that stands for mantissa sources (a level may have a kind of its own for them). */
#define FX_BN_KIND_PAIRS_OF(X, I16)                                                            \
    X(FX_BN_F32, FX_BN_F32)                                                                    \
    X(I16, I16)                                                                                \
    X(FX_BN_BF16, FX_BN_BF16)                                                                  \
    X(I16, FX_BN_F32)                                                                          \
    X(FX_BN_F32, I16)                                                                          \
    X(FX_BN_BF16, FX_BN_F32)                                                                   \
    X(FX_BN_F32, FX_BN_BF16)                                                                   \
    X(I16, FX_BN_BF16)                                                                         \
    X(FX_BN_BF16, I16)                                                                         \
    X(FX_BN_FP16, FX_BN_FP16)                                                                  \
    X(FX_BN_FP16, FX_BN_F32)                                                                   \
    X(FX_BN_F32, FX_BN_FP16)                                                                   \
    X(FX_BN_FP16, FX_BN_BF16)                                                                  \
    X(FX_BN_BF16, FX_BN_FP16)                                                                  \
    X(I16, FX_BN_FP16)                                                                         \
    X(FX_BN_FP16, I16)
#define FX_BN_KIND_PAIRS(X) FX_BN_KIND_PAIRS_OF(X, FX_BN_I16)


/* A SIMD level's half-output entry points (fx_bn_kernels.normalize_half, backward_half) from its
 * instances, which every level names normalize_half_k(x, off, out, S, rows, stride, mu, a, b,
 * K, H, RELU) and backward_half_k(x, g, off, out, S, rows, stride, mu, is, k, mdy, mdyx, KX,
 * KG, H), with K, KX, KG its source kinds (mantissa sources as FX_BN_I16_EXACT), H the half
 * format and RELU constants: one dispatch for every level. Sources outside the instances'
 * kinds are declined (0, nothing written: the caller takes the fp32 rows). */
#define FX_BN_NH_KIND_(K)                                                                      \
    if (half == FX_BN_OUT_BF16) {                                                              \
        if (relu)                                                                              \
            normalize_half_k(&xe, off, out, S, rows, stride, mu, a, b, (K), FX_BN_OUT_BF16, 1); \
        else                                                                                   \
            normalize_half_k(&xe, off, out, S, rows, stride, mu, a, b, (K), FX_BN_OUT_BF16, 0); \
    } else {                                                                                   \
        if (relu)                                                                              \
            normalize_half_k(&xe, off, out, S, rows, stride, mu, a, b, (K), FX_BN_OUT_FP16, 1); \
        else                                                                                   \
            normalize_half_k(&xe, off, out, S, rows, stride, mu, a, b, (K), FX_BN_OUT_FP16, 0); \
    }
#define FX_BN_BH_CASE_(KX, KG)                                                                 \
    if (xe.kind == (KX) && ge.kind == (KG)) {                                                  \
        if (half == FX_BN_OUT_BF16)                                                            \
            backward_half_k(&xe, &ge, off, out, S, rows, stride, mu, is, k, mdy, mdyx, (KX),  \
                            (KG), FX_BN_OUT_BF16);                                             \
        else                                                                                   \
            backward_half_k(&xe, &ge, off, out, S, rows, stride, mu, is, k, mdy, mdyx, (KX),  \
                            (KG), FX_BN_OUT_FP16);                                             \
        return 1;                                                                              \
    }
#define FX_BN_HALF_ENTRIES(NORMALIZE_HALF, BACKWARD_HALF)                                      \
    static int NORMALIZE_HALF(const fx_bn_src *x, int64_t off, uint16_t *out, int64_t S,      \
                              int64_t rows, int64_t stride, double mu, double a, double b,    \
                              int half, int relu)                                             \
    {                                                                                          \
        const fx_bn_src xe = fx_bn_exact_kind(x);                                              \
        switch (xe.kind) {                                                                     \
        case FX_BN_I16_EXACT: FX_BN_NH_KIND_(FX_BN_I16_EXACT); break;                          \
        case FX_BN_BF16: FX_BN_NH_KIND_(FX_BN_BF16); break;                                    \
        case FX_BN_FP16: FX_BN_NH_KIND_(FX_BN_FP16); break;                                    \
        case FX_BN_F32: FX_BN_NH_KIND_(FX_BN_F32); break;                                      \
        default: return 0;                                                                     \
        }                                                                                      \
        return 1;                                                                              \
    }                                                                                          \
    static int BACKWARD_HALF(const fx_bn_src *x, const fx_bn_src *g, int64_t off,             \
                             uint16_t *out, int64_t S, int64_t rows, int64_t stride,          \
                             double mu, double is, double k, double mdy, double mdyx,         \
                             int half)                                                        \
    {                                                                                          \
        const fx_bn_src xe = fx_bn_exact_kind(x), ge = fx_bn_exact_kind(g);                    \
        FX_BN_KIND_PAIRS_OF(FX_BN_BH_CASE_, FX_BN_I16_EXACT)                                   \
        return 0;                                                                              \
    }

/* Test switch: 0 makes batch norm copy every input to fp32 first (nn_in_f32) and scan its
 * outputs in the write, as before the in-place sources, so tests can compare the two. */
void fx_bn_set_in_place(int on);

#endif
