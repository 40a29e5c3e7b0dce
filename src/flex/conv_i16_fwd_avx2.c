/* The exact int16 forward convolution without a patch matrix on AVX2: vpmaddwd + vpaddd in
 * place of AVX512_VNNI's vpdpwssd, otherwise the design of conv_i16_avx512.c (its comment says
 * why and how the chains stay exact; conv_i16_direct.h holds what the two share).
 *
 * Why on AVX2: the patch GEMM route gathers every patch row, packs it in pairs and takes its
 * norms before the kernel sees it, and a convolution's GEMM has few columns (the CNN's conv2:
 * 64, its input gradient: 32), so that work is shared by few tiles. On a Zen 1 EPYC, where
 * vpmaddwd runs on one pipe at the fp32 FMA's multiply rate, it made the integer formats' conv2
 * input gradient slower than fp32's (docs/performance.md).
 *
 * Register tile: MR (1..6) pixels of one output row by 16 output channels, two ymm of int32
 * lanes per pixel: 12 accumulators, 2 weight vectors, the broadcast and the product fill the 16
 * ymm registers at MR = 6, and each broadcast feeds two multiplies, as in the GEMM's 6 x 16
 * fast kernel. An output row of OW pixels is cut into ceil(OW / 6) tiles of near-equal widths
 * (the CNN's 14: 5 + 5 + 4), so no lane computes a pixel that is not there.
 *
 * Unlike the AVX-512 kernel it takes chunks where one segment's bound alone exceeds an int32
 * chain (DFP16 tensors, whose mantissas fill the int16 range, in about one chunk of 28 of a
 * ResNet-20 epoch on Fashion-MNIST): the schedule marks the segment, and the tile folds after
 * each of its pairs, instead of handing the whole chunk to the patch GEMM, which then took the
 * two-multiply split kernel on most of its tiles as well. Only where such segments are many
 * (fx_i16_fwd_admit_any) does it still decline. */
#include "conv_i16.h"
#include "conv_i16_avx2.h"
#include "conv_i16_direct.h"
#include "quant_r4_avx2.h"
#include "../core/transpose_avx2.h"
#include "../nn/im2col.h"

#include <immintrin.h>
#include <stdatomic.h>

#define MR_MAX 6
#define ROUND_MAX_OW 256 /* the rounding epilogue's row buffers: [OW][16] int16 on the stack */
#define FWD_ROUND32_MAX_SHIFT 18 /* the epilogue's int32 route up to this shift (itile) */

/* The rounding epilogue's state (fx_i16_fwd_direct_avx2_round): the image's fast-route
 * roundings at one exponent (f) or two (f2 not NULL), and the output row's mantissas pixel by
 * pixel, 16 channels each (row, row2) */
typedef struct itile_round {
    fx_r4_fast *f, *f2;
    int16_t *row, *row2;
    int max_shift32;         /* the int32 route up to this shift (0: never) */
    int64_t *n32, *nmiss32;  /* pixels rounded on the int32 route, and checks that missed */
} itile_round;

/* c's statistics into the int64-lane state f (max_in and the counts widened, and the bound's
 * verdict: a lane's all ones keeps f's sign bits, a cleared one clears them) */
static inline void round32_merge(fx_r4_fast *f, const fx_round32_avx2 *c)
{
    const __m256i below = fx_round32_avx2_below(c);
    for (int h = 0; h < 2; h++) {
        const __m128i m = h ? _mm256_extracti128_si256(c->max_in, 1) : _mm256_castsi256_si128(c->max_in);
        const __m128i u = h ? _mm256_extracti128_si256(c->under, 1) : _mm256_castsi256_si128(c->under);
        const __m128i b = h ? _mm256_extracti128_si256(below, 1) : _mm256_castsi256_si128(below);
        const __m256i m64 = _mm256_cvtepu32_epi64(m); /* < 2^32: signed compares order them */
        f->max_in = _mm256_blendv_epi8(f->max_in, m64, _mm256_cmpgt_epi64(m64, f->max_in));
        f->underflow = _mm256_add_epi64(f->underflow, _mm256_cvtepi32_epi64(u));
        f->all_below = _mm256_and_si256(f->all_below, _mm256_cvtepi32_epi64(b));
    }
}

/* A pixel's sums 2^16 hi + acc in int32 lanes (t0: channels 0-7, t1: 8-15), and whether all 16
 * are exact there: hi within int16 (2^16 hi in int32) and no wrap in the add */
static inline __attribute__((always_inline)) int pixel_sums32(__m256i acc0, __m256i acc1,
                                                             const int32_t *hi, __m256i *t0,
                                                             __m256i *t1)
{
    const __m256i h0 = _mm256_load_si256((const __m256i *)hi);
    const __m256i h1 = _mm256_load_si256((const __m256i *)(hi + 8));
    const __m256i s0 = _mm256_slli_epi32(h0, 16), s1 = _mm256_slli_epi32(h1, 16);
    *t0 = _mm256_add_epi32(s0, acc0);
    *t1 = _mm256_add_epi32(s1, acc1);
    const __m256i range = _mm256_or_si256(_mm256_xor_si256(_mm256_srai_epi32(s0, 16), h0),
                                          _mm256_xor_si256(_mm256_srai_epi32(s1, 16), h1));
    /* a wrap: both addends' signs equal and the sum's differs */
    const __m256i wrap =
        _mm256_or_si256(_mm256_and_si256(_mm256_xor_si256(s0, *t0), _mm256_xor_si256(acc0, *t0)),
                        _mm256_and_si256(_mm256_xor_si256(s1, *t1), _mm256_xor_si256(acc1, *t1)));
    return _mm256_testz_si256(range, range) &&
           _mm256_testz_si256(wrap, _mm256_set1_epi32(INT32_MIN));
}

/* One pixel's 16 sums 2^16 hi + acc rounded by f into out16[0..15] (and by f2 into out16_2
 * where f2 is not NULL): in int32 lanes (q, q2: f's and f2's int32 states) where *use32 and the
 * sums fit (a miss clears *use32; *n32 counts the pixels it took), else quant_i64's fast
 * route; the same mantissas and statistics as rounding the stored sums either way. hi NULL: no
 * chain folded, so hi is zero and acc exact, and the sums fit int32 without a check. */
static inline __attribute__((always_inline)) void
round_pixel(__m256i acc0, __m256i acc1, const int32_t *hi, fx_r4_fast *f, fx_round32_avx2 *q,
            int16_t *out16, fx_r4_fast *f2, fx_round32_avx2 *q2, int16_t *out16_2, int *use32,
            int *n32)
{
    static const int32_t zero_hi[16] __attribute__((aligned(32))) = {0};
    __m256i t0 = acc0, t1 = acc1;
    if (*use32 && (!hi || (*use32 = pixel_sums32(acc0, acc1, hi, &t0, &t1)))) {
        (*n32)++;
        _mm_storeu_si128((__m128i *)out16, fx_pack8_epi32(fx_round32_avx2_step(t0, q)));
        _mm_storeu_si128((__m128i *)(out16 + 8), fx_pack8_epi32(fx_round32_avx2_step(t1, q)));
        if (f2) {
            _mm_storeu_si128((__m128i *)out16_2, fx_pack8_epi32(fx_round32_avx2_step(t0, q2)));
            _mm_storeu_si128((__m128i *)(out16_2 + 8),
                             fx_pack8_epi32(fx_round32_avx2_step(t1, q2)));
        }
        return;
    }
    __m256i s[4];
    fx_i16_row_sums_avx2(acc0, acc1, hi ? hi : zero_hi, s);
    for (int h = 0; h < 2; h++)
        _mm_storeu_si128((__m128i *)(out16 + 8 * h),
                         fx_pack8_i64_order(fx_narrow8(fx_requant4_fast(s[2 * h], f),
                                                       fx_requant4_fast(s[2 * h + 1], f))));
    if (f2)
        for (int h = 0; h < 2; h++)
            _mm_storeu_si128((__m128i *)(out16_2 + 8 * h),
                             fx_pack8_i64_order(fx_narrow8(fx_requant4_fast(s[2 * h], f2),
                                                           fx_requant4_fast(s[2 * h + 1], f2))));
}

/* One tile: MR pixels of an output row (xb: the first one's top-left tap in the copy, ld words
 * per pixel) by 16 output channels (wb: their packed weights, opad words per pair), the chain
 * over the nseg segments (segment i: SEG_PAIRS pairs at xb + xoff[i], weights at wb + i
 * SEG_PAIRS opad), a fold after segment i where fold[i]; the sums 2^16 hi + acc of its first
 * ncols channels stored as int64 at out (row r at out + r ldo). Returns the largest |sum|
 * where want_max, else 0. ROUND (1: one rounding, 2: two) rounds them instead, pixel r into
 * rd's rows at pixel px0 + r, and stores nothing at out. */
static inline __attribute__((always_inline)) uint64_t
itile(const int MR, const int64_t LD, int32_t *restrict hib, const uint32_t *xb, int64_t ld_any,
      const int64_t *xoff, int64_t nseg, const uint32_t *wb, int64_t opad, const uint8_t *fold,
      int64_t *out, int64_t ldo, int ncols, int want_max, const int ROUND,
      const itile_round *rd, int64_t px0)
{
    /* hi in the caller's frame, touched at folds only. Where no chain of the tile folds, acc
     * holds the exact sums (a chain from 0 whose bounds sum to at most FX_I16_CHAIN_LIMIT), so
     * the rounding reads zeros for hi and need not check the sums for int32, and hi is not
     * cleared. On standard-normal operands no tile of the CNN's conv1 folds; in training, whose
     * int16 mantissas fill their range, 3 % of the CNN's rounding tiles and 11 % of
     * ResNet-20's did not. */
    int32_t (*hi)[2][8] = (int32_t (*)[2][8])hib;
    unsigned folds = 0;
    for (int64_t i = 0; i < nseg; i++) folds |= fold[i];
    FX_I16_AVX2_TILE_ACCS;
    if (folds || !ROUND)
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < 2; v++)
                _mm256_store_si256((__m256i *)hi[r][v], _mm256_setzero_si256());
    const int64_t ld = LD > 0 ? LD : ld_any; /* constant offsets where LD is known */
#define FX_STEP(r, a0, a1)                                                                         \
    if (MR > r) {                                                                                  \
        if (LD > 0)                                                                                \
            FX_MADD_ROW(a0, a1, b0, b1, xs + r * LD + j);                                          \
        else                                                                                       \
            FX_MADD_ROW(a0, a1, b0, b1, xs + r * ld + j);                                          \
    }
/* pair j of the segment: its weight vectors, then every row's step */
#define FX_PAIR                                                                                    \
    const __m256i b0 = _mm256_load_si256((const __m256i *)(ws + j * opad));                       \
    const __m256i b1 = _mm256_load_si256((const __m256i *)(ws + j * opad + 8));                   \
    FX_I16_AVX2_ROWS(FX_STEP)
    for (int64_t i = 0; i < nseg; i++) {
        const uint32_t *xs = xb + xoff[i];
        const uint32_t *ws = wb + i * FX_I16_SEG_PAIRS * opad;
        if (__builtin_expect(fold[i] == FX_I16_FOLD_PAIRS, 0)) {
            /* a segment too large for a chain: one pair per chain (fx_i16_fold_schedule) */
            for (int j = 0; j < FX_I16_SEG_PAIRS; j++) {
                FX_PAIR
                FX_I16_AVX2_FOLD_ALL(MR, hi);
            }
            continue;
        }
#pragma GCC unroll 4
        for (int j = 0; j < FX_I16_SEG_PAIRS; j++) {
            FX_PAIR
        }
        if (fold[i]) FX_I16_AVX2_FOLD_ALL(MR, hi);
    }
#undef FX_PAIR
#undef FX_STEP
    if (ROUND) {
        /* local states (the mantissa stores could alias *rd's), merged at the end */
        fx_r4_fast f = fx_r4_fast_fresh(rd->f), f2 = fx_r4_fast_fresh(ROUND == 2 ? rd->f2 : rd->f);
        /* the int32 route where it mostly holds. A pixel takes it when its sums fit, which the
         * largest do not at shifts beyond 16 (|T| up to 32767 2^s); in ResNet-20 epochs on
         * Fashion-MNIST (FLEX16_5, DFP16) the shifts were 16 to 19 and the sums fit in 100 %,
         * 99 %, 78-85 % and 37 % of the pixels, the CNN's at 17 in 93 %: hence the limit of 18,
         * which leaves out 19. A miss costs the check besides the int64 route, so a tile goes
         * on without the check after its first miss: on synthetic products of larger sums,
         * half of them missing, the check alone had cost up to 9 % of the forward pass. */
        int use32 = f.s <= rd->max_shift32 && (ROUND == 1 || f2.s <= rd->max_shift32), n32 = 0;
        const int tried32 = use32;
        fx_round32_avx2 q = fx_round32_avx2_setup(use32 ? f.s : 1);
        fx_round32_avx2 q2 = fx_round32_avx2_setup(use32 ? f2.s : 1);
#define FX_ROUND(r, a0, a1)                                                                        \
    if (MR > r)                                                                                    \
        round_pixel(a0, a1, folds ? hi[r][0] : NULL, &f, &q, rd->row + (px0 + r) * 16,           \
                    ROUND == 2 ? &f2 : NULL, &q2, ROUND == 2 ? rd->row2 + (px0 + r) * 16 : NULL,  \
                    &use32, &n32);
        FX_I16_AVX2_ROWS(FX_ROUND)
#undef FX_ROUND
        if (tried32) {
            *rd->n32 += n32;
            *rd->nmiss32 += !use32;
            if (n32) {
                round32_merge(&f, &q);
                if (ROUND == 2) round32_merge(&f2, &q2);
            }
        }
        fx_r4_fast_merge(rd->f, &f);
        if (ROUND == 2) fx_r4_fast_merge(rd->f2, &f2);
        return 0;
    }
    __m256i mx = _mm256_setzero_si256();
    __m256i *const mxp = want_max ? &mx : NULL;
#define FX_STORE(r, a0, a1)                                                                        \
    if (MR > r) fx_i16_store_row_avx2(a0, a1, hi[r][0], out + r * ldo, ncols, 0, mxp);
    FX_I16_AVX2_ROWS(FX_STORE)
#undef FX_STORE
    return fx_i16_hmax_epu64_avx2(mx);
}

typedef uint64_t (*itile_fn)(const uint32_t *, int64_t, const int64_t *, int64_t,
                             const uint32_t *, int64_t, const uint8_t *, int64_t *, int64_t, int,
                             int);

#define ITILE_FN(MR, LD)                                                                          \
    static uint64_t itile_##MR##_##LD(const uint32_t *xb, int64_t ld, const int64_t *xoff,        \
                                      int64_t nseg, const uint32_t *wb, int64_t opad,             \
                                      const uint8_t *fold, int64_t *out, int64_t ldo, int ncols,  \
                                      int want_max)                                               \
    {                                                                                             \
        int32_t hib[MR_MAX * 2 * 8] __attribute__((aligned(32)));                                 \
        return itile(MR, LD, hib, xb, ld, xoff, nseg, wb, opad, fold, out, ldo, ncols, want_max,  \
                     0, NULL, 0);                                                                 \
    }
#define ITILE_FNS(LD)                                                                             \
    ITILE_FN(1, LD) ITILE_FN(2, LD) ITILE_FN(3, LD) ITILE_FN(4, LD) ITILE_FN(5, LD) ITILE_FN(6, LD)
/* the pixel strides of 8 channels (a layer folded into 8, src/nn/conv_fold.h), 16, 32 and 64
 * (ResNet-20's and the CNN's layers), and any */
ITILE_FNS(4)
ITILE_FNS(8)
ITILE_FNS(16)
ITILE_FNS(32)
ITILE_FNS(0)
#define ITILE_ROW(LD)                                                                             \
    {itile_1_##LD, itile_2_##LD, itile_3_##LD, itile_4_##LD, itile_5_##LD, itile_6_##LD}
static const itile_fn tile_fns[5][MR_MAX] = {ITILE_ROW(4), ITILE_ROW(8), ITILE_ROW(16),
                                             ITILE_ROW(32), ITILE_ROW(0)};

/* the rounding tiles, one and two roundings (R), the same pixel strides */
typedef void (*iround_fn)(const uint32_t *, int64_t, const int64_t *, int64_t, const uint32_t *,
                          int64_t, const uint8_t *, const itile_round *, int64_t);
#define IROUND_FN(MR, LD, R)                                                                      \
    static void iround_##R##_##MR##_##LD(const uint32_t *xb, int64_t ld, const int64_t *xoff,    \
                                         int64_t nseg, const uint32_t *wb, int64_t opad,          \
                                         const uint8_t *fold, const itile_round *rd,              \
                                         int64_t px0)                                             \
    {                                                                                             \
        int32_t hib[MR_MAX * 2 * 8] __attribute__((aligned(32)));                                 \
        itile(MR, LD, hib, xb, ld, xoff, nseg, wb, opad, fold, NULL, 0, 16, 0, R, rd, px0);       \
    }
#define IROUND_FNS(LD, R)                                                                         \
    IROUND_FN(1, LD, R) IROUND_FN(2, LD, R) IROUND_FN(3, LD, R) IROUND_FN(4, LD, R)               \
    IROUND_FN(5, LD, R) IROUND_FN(6, LD, R)
IROUND_FNS(4, 1)
IROUND_FNS(8, 1)
IROUND_FNS(16, 1)
IROUND_FNS(32, 1)
IROUND_FNS(0, 1)
IROUND_FNS(4, 2)
IROUND_FNS(8, 2)
IROUND_FNS(16, 2)
IROUND_FNS(32, 2)
IROUND_FNS(0, 2)
#define IROUND_ROW(LD, R)                                                                         \
    {iround_##R##_1_##LD, iround_##R##_2_##LD, iround_##R##_3_##LD,                               \
     iround_##R##_4_##LD, iround_##R##_5_##LD, iround_##R##_6_##LD}
static const iround_fn round_fns[2][5][MR_MAX] = {
    {IROUND_ROW(4, 1), IROUND_ROW(8, 1), IROUND_ROW(16, 1), IROUND_ROW(32, 1), IROUND_ROW(0, 1)},
    {IROUND_ROW(4, 2), IROUND_ROW(8, 2), IROUND_ROW(16, 2), IROUND_ROW(32, 2), IROUND_ROW(0, 2)}};

/* fx_i16_fold_schedule for four output rows at once, one per 64-bit lane: the AVX-512 level's
 * fx_i16_fold_schedules8_avx512 in four lanes, with FX_I16_FOLD_PAIRS segments. Why: the
 * scalar greedy cut takes about 15 instructions a segment and a row, about a tenth of the
 * kernel's own work a segment on the CNN's conv2 (6 % of its forward pass in perf on the AVX2
 * EPYC); in lanes four rows take about the time of one. */
void fx_i16_fold_schedules4_avx2(const uint32_t *rn, const int32_t base[4], const uint32_t *wm,
                                 int64_t KK, int64_t KW, int64_t G, uint8_t *fold)
{
    const int64_t nseg = KK * G;
    uint8_t bits[FX_I16_FWD_MAX_SEGS]; /* bits[i]: segment i's code (fx_i16_lanes_cut) */
    const __m128i vbase = _mm_loadu_si128((const __m128i *)(const void *)base);
    const __m256i lim = _mm256_set1_epi64x(FX_I16_CHAIN_LIMIT);
    __m256i run = _mm256_setzero_si256(), over = _mm256_setzero_si256();
    /* the taps of one kernel row share their input row's norms: gathered once per row where
     * there are at most 16 segments per tap (128 channels), else per segment */
    __m256i rv[16];
    for (int64_t t = 0; t < KK; t++)
        for (int64_t s = 0; s < G; s++) {
            const int64_t i = t * G + s;
            __m256i r;
            if (G > 16 || t % KW == 0) {
                const __m128i idx = _mm_add_epi32(vbase, _mm_set1_epi32((int)((t / KW) * G + s)));
                r = _mm256_cvtepu32_epi64(
                    _mm_i32gather_epi32((const int *)(const void *)rn, idx, 4));
                if (G <= 16) rv[s] = r;
            } else {
                r = rv[s];
            }
            /* norms of 8 int16 are below 2^17: the product is exact and the signed compares
             * order it */
            const __m256i b = _mm256_mul_epu32(r, _mm256_set1_epi64x((int64_t)wm[i]));
            const uint8_t code = fx_i16_lanes_cut(b, lim, &run, &over);
            if (i > 0) bits[i - 1] = code;
        }
    const int last = _mm256_movemask_pd(_mm256_castsi256_pd(over));
    bits[nseg - 1] = (uint8_t)(last | last << 4);
    for (int j = 0; j < 4; j++) fx_i16_lane_folds(bits, nseg, j, fold + j * nseg);
}

/* What both entry points set up for a chunk: the padded pair copy of its images and their row
 * norms (in scratch: fx_i16_fwd_direct_scratch, sized for the AVX-512 layout, which holds this
 * one: the copy, 32-byte aligned (a tile covers only pixels that are there, so nothing is read
 * past it), one image's pair planes, the norms, one image's sums of squares), the chunk's
 * admission, the segments' offsets and the tiles of an output row. */
typedef struct fwd_chunk {
    int64_t O, Cpp, G, opad, Hp, Wp, HW, OH, OW, P, KK, KW, nseg, sh, sw, ld;
    int64_t oy0, ox0; /* the first output computed: (0, 0) but in a strided dgrad's phase */
    int ldi;
    int64_t ntile, wide, base; /* an output row in ntile tiles of near-equal widths, wider first */
    int64_t nrn;               /* words of the row norms rn, [n][ih][s] */
    const uint32_t *wn;        /* the weight norms */
    uint32_t *xq, *rn;
    int64_t xoff[FX_I16_FWD_MAX_SEGS];
} fwd_chunk;

/* The chunk's copy and its rows' norms, for a geometry g (its input's: C, H, W, the padding,
 * the strides) */
static void fwd_chunk_copy(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                           uint32_t *scratch, fwd_chunk *k)
{
    const int64_t C = g->C;
    k->Cpp = fx_i16_pairs(C);
    k->G = fx_i16_groups(C);
    k->Hp = g->H + 2 * g->ph;
    k->Wp = g->W + 2 * g->pw;
    k->HW = k->Hp * k->Wp;
    k->xq = scratch + ((8 - ((uintptr_t)scratch / 4) % 8) % 8);
    uint32_t *planes = k->xq + nbc * k->HW * k->Cpp;
    k->rn = planes + k->Cpp * k->HW; /* [n][ih][s] */
    k->nrn = nbc * k->Hp * k->G;
    uint32_t *sqw = k->rn + nbc * k->Hp * k->G;
    uint64_t *sq = (uint64_t *)(void *)(sqw + ((uintptr_t)sqw / 4) % 2);
    for (int64_t n = 0; n < nbc; n++)
        fx_i16_fwd_copy_image_avx2(g, xp + n * C * g->H * g->W, k->xq + n * k->HW * k->Cpp,
                                   k->rn + n * k->Hp * k->G, planes, sq);
    k->sh = g->sh;
    k->sw = g->sw;
    k->ld = k->sw * k->Cpp; /* words between a tile's pixels */
    k->ldi = k->ld == 4 ? 0 : k->ld == 8 ? 1 : k->ld == 16 ? 2 : k->ld == 32 ? 3 : 4;
}

/* The taps of a kernel of geometry g over the copy (wq: its packed weights), computing the
 * OH x OW outputs from (oy0, ox0) on: the chunk's admission (fx_i16_fwd_admit_any), the
 * segments' offsets and the tiles of an output row; 1, or 0 where the chunk is declined */
static int fwd_chunk_taps(fwd_chunk *k, const struct fx_conv_geom *g, const uint32_t *wq,
                          int64_t oy0, int64_t ox0)
{
    k->O = g->O;
    k->opad = (k->O + 15) / 16 * 16;
    k->OH = g->OH;
    k->OW = g->OW;
    k->P = k->OH * k->OW;
    k->oy0 = oy0;
    k->ox0 = ox0;
    k->KK = g->KH * g->KW;
    k->KW = g->KW;
    k->nseg = k->KK * k->G;
    k->wn = wq + k->KK * k->Cpp * k->opad;
    /* a segment too large for a chain of its own gets a fold per pair, unless too many are */
    if (!fx_i16_fwd_admit_any(k->rn, k->nrn / k->G, k->wn, k->opad / 16 * k->KK, k->G)) return 0;
    fx_i16_fwd_offsets(g, k->xoff);
    k->ntile = (k->OW + MR_MAX - 1) / MR_MAX;
    k->wide = k->OW % k->ntile;
    k->base = k->OW / k->ntile;
    return 1;
}

/* the chunk's copy and taps for a convolution's own geometry; 1, or 0 where declined */
static int fwd_chunk_setup(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                           const uint32_t *wq, uint32_t *scratch, fwd_chunk *k)
{
    fwd_chunk_copy(g, xp, nbc, scratch, k);
    return fwd_chunk_taps(k, g, wq, 0, 0);
}

/* the copy's words at output (oh, ow) of image n: its top-left tap */
static inline const uint32_t *fwd_chunk_at(const fwd_chunk *k, int64_t n, int64_t oh, int64_t ow)
{
    return k->xq + (n * k->HW + (oh + k->oy0) * k->sh * k->Wp + (ow + k->ox0) * k->sw) * k->Cpp;
}

/* The fold schedules of the chunk's output rows r0 .. r0 + 3 ([n][oh] in order) into
 * fold[j nseg] (rows from `end` on repeat the one before it) */
static void row_schedules(const fwd_chunk *k, int64_t r0, int64_t end, const uint32_t *wm,
                          uint8_t *fold)
{
    int64_t at[4];
    for (int j = 0; j < 4; j++) {
        const int64_t row = r0 + j < end ? r0 + j : end - 1;
        at[j] = ((row / k->OH) * k->Hp + (row % k->OH + k->oy0) * k->sh) * k->G;
    }
    if (k->nrn > INT32_MAX) { /* beyond the gather's offsets (no layer of a trainable size) */
        for (int j = 0; j < 4; j++)
            fx_i16_fold_schedule(k->rn + at[j], wm, k->KK, k->KW, k->G, fold + j * k->nseg);
        return;
    }
    const int32_t base[4] = {(int32_t)at[0], (int32_t)at[1], (int32_t)at[2], (int32_t)at[3]};
    fx_i16_fold_schedules4_avx2(k->rn, base, wm, k->KK, k->KW, k->G, fold);
}

int fx_i16_fwd_direct_avx2(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                           const uint32_t *wq, uint32_t *scratch, int64_t *y, int nthreads,
                           uint64_t *ymax)
{
    fwd_chunk k;
    if (!fwd_chunk_setup(g, xp, nbc, wq, scratch, &k)) return 0;
    const int64_t O = k.O, OH = k.OH, OW = k.OW, nrows = nbc * OH;
    uint64_t mx = 0;
    (void)nthreads; /* without OpenMP */
    for (int64_t o0 = 0; o0 < O; o0 += 16) {
        const int ncols = O - o0 < 16 ? (int)(O - o0) : 16;
        const uint32_t *wm = k.wn + (o0 / 16) * k.nseg; /* this block's weight norms */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1) \
    reduction(max : mx)
#endif
        for (int64_t r0 = 0; r0 < nrows; r0 += 4) {
            uint8_t fold[4 * FX_I16_FWD_MAX_SEGS];
            row_schedules(&k, r0, nrows, wm, fold);
            for (int64_t row = r0; row < r0 + 4 && row < nrows; row++) {
                const int64_t n = row / OH, oh = row % OH;
                const uint8_t *rfold = fold + (row - r0) * k.nseg;
                int64_t ow0 = 0;
                for (int64_t t = 0; t < k.ntile; t++) {
                    const int w = (int)(k.base + (t < k.wide));
                    const uint64_t m = tile_fns[k.ldi][w - 1](
                        fwd_chunk_at(&k, n, oh, ow0), k.ld, k.xoff, k.nseg, wq + o0, k.opad, rfold,
                        y + (n * k.P + oh * OW + ow0) * O + o0, O, ncols, ymax != NULL);
                    mx = m > mx ? m : mx;
                    ow0 += w;
                }
            }
        }
    }
    if (ymax) *ymax = mx;
    return 1;
}

/* ---- the sums rounded in the epilogue ---------------------------------------------------------
 * Where the caller would only round each chunk's int64 sums at a guessed exponent (and at a
 * second one for a DFP16 output whose exponent moved lately) and drop them, the tiles round
 * them while they are in registers (quant_i64's fast route, the same mantissas and per-image
 * statistics) into a pixel-major row buffer, and each output row goes into the NCHW mantissas
 * by 8 x 8 transposes: no int64 sums written and read back, no separate transposing pass
 * (quant_i64_t took about a sixth of ResNet-20's stage-1 forward pass on the AVX2 EPYC).
 * Measured there (one thread, batch 128, the two routes alternated in one process): the CNN's
 * conv1 (25 products an output) 0.82-0.85x the time, ResNet-20's stage-1 to -3 layers (144,
 * 288 and 576) 0.94, 0.98 and 0.99x, the CNN's conv2 (800) 1.03-1.05x: the rounding costs
 * about what the pass it replaces did, and the gain is the int64 stores, so the epilogue is
 * taken up to FX_I16_ROUND_MAX_K products an output. */

/* an output row of OW pixels x 16 channels (row[p 16 + c]) into channel c's row at
 * dst + c plane, for c < ncols */
static void row_to_planes(const int16_t *row, int64_t OW, int ncols, int16_t *dst, int64_t plane)
{
    /* a row of at least 8 pixels ends with a block at OW - 8, over pixels the block before it
     * stored too (the same values): the CNN's conv1 has OW = 28, whose last 4 pixels went one
     * value at a time, as many scalar stores as its 24 others took in 8 x 8 transposes */
    const int64_t end = OW >= 8 ? OW : 0;
    for (int64_t p0 = 0; p0 < end; p0 += 8) {
        const int64_t p = p0 + 8 <= OW ? p0 : OW - 8;
        __m256i r[8], c[8];
        for (int i = 0; i < 8; i++)
            r[i] = _mm256_loadu_si256((const __m256i *)(row + (p + i) * 16));
        fx_transpose8x16_epi16(r, c);
        for (int j = 0; j < 8 && j < ncols; j++) {
            _mm_storeu_si128((__m128i *)(dst + j * plane + p), _mm256_castsi256_si128(c[j]));
            if (j + 8 < ncols)
                _mm_storeu_si128((__m128i *)(dst + (j + 8) * plane + p),
                                 _mm256_extracti128_si256(c[j], 1));
        }
    }
    for (int64_t p = end; p < OW; p++)
        for (int c = 0; c < ncols; c++) dst[c * plane + p] = row[p * 16 + c];
}

/* Image n's outputs (the chunk's taps: O channels of OH x OW from (oy0, ox0) on) rounded in
 * the tiles by rd's states into the planes y ([O][OH OW]), and with rd->f2 into y2 */
static void round_image(const fwd_chunk *k, const uint32_t *wq, int64_t n, const itile_round *rd0,
                        int16_t *y, int16_t *y2)
{
    const int64_t O = k->O, OH = k->OH, OW = k->OW, P = k->P;
    const int two = y2 != NULL;
    int16_t row[ROUND_MAX_OW * 16] __attribute__((aligned(32)));
    int16_t row2[ROUND_MAX_OW * 16] __attribute__((aligned(32)));
    itile_round rd = *rd0;
    rd.row = row;
    rd.row2 = row2;
    for (int64_t o0 = 0; o0 < O; o0 += 16) {
        const int ncols = O - o0 < 16 ? (int)(O - o0) : 16;
        const uint32_t *wm = k->wn + (o0 / 16) * k->nseg;
        uint8_t fold[4 * FX_I16_FWD_MAX_SEGS];
        for (int64_t oh = 0; oh < OH; oh++) {
            if (oh % 4 == 0) row_schedules(k, n * OH + oh, (n + 1) * OH, wm, fold);
            const uint8_t *rfold = fold + (oh % 4) * k->nseg;
            int64_t ow0 = 0;
            for (int64_t t = 0; t < k->ntile; t++) {
                const int w = (int)(k->base + (t < k->wide));
                round_fns[two][k->ldi][w - 1](fwd_chunk_at(k, n, oh, ow0), k->ld, k->xoff,
                                              k->nseg, wq + o0, k->opad, rfold, &rd, ow0);
                ow0 += w;
            }
            const int64_t at = o0 * P + oh * OW;
            row_to_planes(row, OW, ncols, y + at, P);
            if (two) row_to_planes(row2, OW, ncols, y2 + at, P);
        }
    }
}

static atomic_int round32_enabled = 1;
static atomic_llong round32_pixels, round32_misses;
void fx_i16_fwd_direct_round32_set_enabled(int on) { atomic_store(&round32_enabled, on != 0); }
long long fx_i16_fwd_direct_round32_pixels(void) { return atomic_load(&round32_pixels); }
long long fx_i16_fwd_direct_round32_misses(void) { return atomic_load(&round32_misses); }

int fx_i16_fwd_direct_avx2_round(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                                 const uint32_t *wq, uint32_t *scratch, int shift, int16_t *yq,
                                 fx_qstats *part, int shift2, int16_t *yq2, fx_qstats *part2)
{
    const int two = yq2 != NULL;
    if (!fx_r4_fast_ok(shift) || (two && !fx_r4_fast_ok(shift2)) || nbc <= 0 ||
        g->OW > ROUND_MAX_OW || g->C * g->KH * g->KW > FX_I16_ROUND_MAX_K)
        return 0;
    fwd_chunk k;
    if (!fwd_chunk_setup(g, xp, nbc, wq, scratch, &k)) return 0;
    const int64_t OP = k.O * k.P;
    /* the roundings still whole: a sum above a rounding's bound drops that one (a saturating
     * write, which the general rounding counts), and the chunk is given back once none is */
    int whole = two ? FX_I16_ROUND_FIRST | FX_I16_ROUND_SECOND : FX_I16_ROUND_FIRST;
    int64_t done = 0, n32 = 0, nmiss32 = 0;
    const int max_shift32 = atomic_load(&round32_enabled) ? FWD_ROUND32_MAX_SHIFT : 0;
    for (; done < nbc && whole; done++) { /* an image at a time: its statistics complete */
        const int64_t n = done;
        fx_r4_fast f = fx_r4_fast_setup(shift), f2 = fx_r4_fast_setup(two ? shift2 : shift);
        const itile_round rd = {&f, two ? &f2 : NULL, NULL, NULL, max_shift32, &n32, &nmiss32};
        round_image(&k, wq, n, &rd, yq + n * OP, two ? yq2 + n * OP : NULL);
        /* every sum is below 2^47 (C KH KW <= 2^16 products of int16): max_in is exact */
        const uint64_t mx = fx_r4_fast_max_in(&f);
        if (!fx_r4_fast_held(&f)) whole &= ~FX_I16_ROUND_FIRST;
        if (two && !fx_r4_fast_held(&f2)) whole &= ~FX_I16_ROUND_SECOND;
        if (whole & FX_I16_ROUND_FIRST) fx_r4_fast_stats(&f, &part[n]);
        else fx_i16_round_stats_broken(&part[n], mx);
        if (two && (whole & FX_I16_ROUND_SECOND)) fx_r4_fast_stats(&f2, &part2[n]);
        else if (two) fx_i16_round_stats_broken(&part2[n], mx);
    }
    /* a rounding broken at some image: every image's statistics say so */
    fx_i16_round_mark_broken_images(whole, two, done, part, part2);
    fx_i16_fwd_round_count(whole);
    atomic_fetch_add_explicit(&round32_pixels, n32, memory_order_relaxed);
    atomic_fetch_add_explicit(&round32_misses, nmiss32, memory_order_relaxed);
    return whole;
}

/* ---- the stride-2 input gradient rounded in the epilogue ---------------------------------------
 * fx_i16_dgrad_s2_round's design on these tiles (conv_i16_avx512.c; src/nn/conv_dgrad_phases.c
 * drives it): one copy of the chunk's dy padded for the widest phase, each phase computing only
 * the H/2 x W/2 window of its correlation that dx takes, rounded in the tiles into a
 * quarter-size plane, and dx's rows interleaved from the two phases of their parity. The int64
 * phases it replaces stored every phase's whole correlation as int64 sums, gathered them into
 * dx's order and rounded them in a pass of their own. */

/* an fx_i16_s2_interleave_fn (conv_i16.h): an unpack pair per 16 values of a dx row */
static void dgrad_s2_interleave(int16_t *const q[4], int64_t nbc, int64_t C, int64_t H,
                                int64_t W, int64_t ph, int64_t pw, int16_t *dx)
{
    const int64_t hw = H / 2, ww = W / 2;
    for (int64_t n = 0; n < nbc; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++) {
                const int64_t rh = (h + ph) & 1, win = ((n * C + c) * hw + (h >> 1)) * ww;
                const int16_t *ev = q[rh * 2 + (pw & 1)], *od = q[rh * 2 + ((pw + 1) & 1)];
                int16_t *row = dx + ((n * C + c) * H + h) * W;
                int64_t i = 0;
                for (; i + 8 <= ww; i += 8) {
                    const __m128i e = ev ? _mm_loadu_si128((const __m128i *)(ev + win + i))
                                         : _mm_setzero_si128();
                    const __m128i o = od ? _mm_loadu_si128((const __m128i *)(od + win + i))
                                         : _mm_setzero_si128();
                    _mm_storeu_si128((__m128i *)(row + 2 * i), _mm_unpacklo_epi16(e, o));
                    _mm_storeu_si128((__m128i *)(row + 2 * i + 8), _mm_unpackhi_epi16(e, o));
                }
                for (; i < ww; i++) {
                    row[2 * i] = ev ? ev[win + i] : 0;
                    row[2 * i + 1] = od ? od[win + i] : 0;
                }
            }
}

int fx_i16_dgrad_s2_round_avx2(const fx_i16_dgrad_s2 *d, const int16_t *dy, int64_t nbc,
                               uint32_t *scratch, int shift, int16_t *dx, fx_qstats *part,
                               int shift2, int16_t *dx2, fx_qstats *part2)
{
    const int two = dx2 != NULL;
    if (!fx_r4_fast_ok(shift) || (two && !fx_r4_fast_ok(shift2)) || nbc <= 0 ||
        d->planes->OW > ROUND_MAX_OW)
        return 0;
    for (int k4 = 0; k4 < 4; k4++)
        if (d->wq[k4] &&
            d->phase[k4]->C * d->phase[k4]->KH * d->phase[k4]->KW > FX_I16_ROUND_MAX_K)
            return 0;
    fwd_chunk k;
    fwd_chunk_copy(d->planes, dy, nbc, scratch, &k);
    int16_t *q[4], *q2[4];
    fx_i16_dgrad_s2_windows(scratch, fx_i16_fwd_direct_scratch(d->planes, nbc), d, nbc, two, q,
                            q2);
    /* one state per rounding for the whole chunk: the route's statistics are the chunk's */
    fx_r4_fast f = fx_r4_fast_setup(shift), f2 = fx_r4_fast_setup(two ? shift2 : shift);
    int64_t n32 = 0, nmiss32 = 0;
    const int max_shift32 = atomic_load(&round32_enabled) ? FWD_ROUND32_MAX_SHIFT : 0;
    const itile_round rd = {&f, two ? &f2 : NULL, NULL, NULL, max_shift32, &n32, &nmiss32};
    int whole = two ? FX_I16_ROUND_FIRST | FX_I16_ROUND_SECOND : FX_I16_ROUND_FIRST;
    for (int k4 = 0; k4 < 4 && whole; k4++) {
        if (!d->wq[k4]) continue;
        /* data the kernel declines (too many segments too large for a chain): the caller's
         * int64 phases decline it too, and col2im takes the op */
        if (!fwd_chunk_taps(&k, d->phase[k4], d->wq[k4], d->oy0[k4], d->ox0[k4])) return 0;
        const int64_t OP = k.O * k.P;
        for (int64_t n = 0; n < nbc; n++)
            round_image(&k, d->wq[k4], n, &rd, q[k4] + n * OP, two ? q2[k4] + n * OP : NULL);
        if (!fx_r4_fast_held(&f)) whole &= ~FX_I16_ROUND_FIRST;
        if (two && !fx_r4_fast_held(&f2)) whole &= ~FX_I16_ROUND_SECOND;
    }
    atomic_fetch_add_explicit(&round32_pixels, n32, memory_order_relaxed);
    atomic_fetch_add_explicit(&round32_misses, nmiss32, memory_order_relaxed);
    /* every phase ran where whole: max_in is the chunk's largest |sum| (below 2^47: exact) */
    const fx_i16_round_sums sums = {fx_r4_fast_max_in(&f), fx_r4_fast_underflow(&f),
                                    fx_r4_fast_underflow(&f2), shift, shift2};
    return fx_i16_dgrad_s2_finish(d, whole, two, &sums, q, q2, nbc, part, part2, dx, dx2,
                                  dgrad_s2_interleave);
}
