/* The exact int16 weight gradient of a stride-1 convolution without a patch matrix on AVX2:
 * vpmaddwd + vpaddd in place of AVX512_VNNI's vpdpwssd, otherwise the design of
 * conv_i16_wgrad_avx512.c (its comment says how the chains stay exact; conv_i16_wgrad.h holds
 * what the two share).
 *
 * Why on AVX2: the GEMM route writes the chunk's patch matrix (each input value once per tap)
 * and packs it again, and on a Zen 1 EPYC, where vpmaddwd issues at the fp32 FMA's multiply
 * rate, that overhead is what separates the integer formats from fp32 (docs/performance.md).
 *
 * Register tile: MR (1..6) rows r = (c, kh, kw) of dW^T by 16 output channels, two ymm of
 * int32 lanes per row: per pixel pair along an output row, one broadcast per row of its two
 * input values (one unaligned 32-bit load from the padded chunk) and two vectors of dy's pair
 * words. The C KH KW rows are cut into tiles of near-equal heights, so no lane sums a row that
 * is not there. The pair step and the fold are those of the forward kernel (conv_i16_avx2.h). */
#include "conv_i16.h"
#include "conv_i16_avx2.h"
#include "conv_i16_direct.h"
#include "conv_i16_wgrad.h"
#include "gemm_i16.h" /* fx_ceil_sqrt */
#include "../nn/im2col.h"

#include <immintrin.h>

#define WG_MR_MAX 6

/* One tile: MR rows (offsets roff into a padded image) by 16 channels of dyt (already offset
 * to the tile's first channel), the chain over all nbc images' pixel pairs, a fold after
 * output row s = n OH + oy where fold[s]; the first ncols sums of each row stored at out (row i
 * at out + i ldo) or added to what is there (add). */
static inline __attribute__((always_inline)) void
wtile(const int MR, int32_t *restrict hib, const int16_t *xp, int64_t ximg, const int64_t *roff,
      const uint32_t *dyt, int64_t dimg, int64_t opad, int64_t OH, int64_t OW, int64_t Wp,
      int64_t nbc, const uint8_t *fold, int64_t *out, int64_t ldo, int ncols, int add)
{
    int32_t (*hi)[2][8] = (int32_t (*)[2][8])hib; /* in the caller's frame: see itile */
    FX_I16_AVX2_TILE_ACCS;
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < 2; v++) _mm256_store_si256((__m256i *)hi[r][v], _mm256_setzero_si256());
    const int64_t npair = OW / 2;
    for (int64_t n = 0; n < nbc; n++) {
        for (int64_t oy = 0; oy < OH; oy++) {
            const int16_t *xr = xp + n * ximg + oy * Wp;
            const uint32_t *dr = dyt + n * dimg + oy * npair * opad;
            const uint8_t fs = fold[n * OH + oy];
#define FX_STEP(r, a0, a1)                                                                         \
    if (MR > r) FX_MADD_ROW(a0, a1, b0, b1, xr + roff[r] + 2 * j);
/* pixel pair j of the row: dy's two vectors, then every kernel row's step */
#define FX_PAIR                                                                                    \
    const __m256i b0 = _mm256_load_si256((const __m256i *)(dr + j * opad));                       \
    const __m256i b1 = _mm256_load_si256((const __m256i *)(dr + j * opad + 8));                   \
    FX_I16_AVX2_ROWS(FX_STEP)
            if (__builtin_expect(fs == FX_I16_FOLD_PAIRS, 0)) {
                /* a row too large for a chain: one pixel pair per chain */
                for (int64_t j = 0; j < npair; j++) {
                    FX_PAIR
                    FX_I16_AVX2_FOLD_ALL(MR, hi);
                }
                continue;
            }
            for (int64_t j = 0; j < npair; j++) {
                FX_PAIR
            }
#undef FX_PAIR
#undef FX_STEP
            if (fs) FX_I16_AVX2_FOLD_ALL(MR, hi);
        }
    }
#define FX_STORE(r, a0, a1)                                                                        \
    if (MR > r) fx_i16_store_row_avx2(a0, a1, hi[r][0], out + r * ldo, ncols, add, NULL);
    FX_I16_AVX2_ROWS(FX_STORE)
#undef FX_STORE
}

typedef void (*wtile_fn)(const int16_t *, int64_t, const int64_t *, const uint32_t *, int64_t,
                         int64_t, int64_t, int64_t, int64_t, int64_t, const uint8_t *, int64_t *,
                         int64_t, int, int);

#define WTILE_FN(MR)                                                                              \
    static void wtile_##MR(const int16_t *xp, int64_t ximg, const int64_t *roff,                  \
                           const uint32_t *dyt, int64_t dimg, int64_t opad, int64_t OH,           \
                           int64_t OW, int64_t Wp, int64_t nbc, const uint8_t *fold,              \
                           int64_t *out, int64_t ldo, int ncols, int add)                         \
    {                                                                                             \
        int32_t hib[WG_MR_MAX * 2 * 8] __attribute__((aligned(32)));                              \
        wtile(MR, hib, xp, ximg, roff, dyt, dimg, opad, OH, OW, Wp, nbc, fold, out, ldo, ncols,   \
              add);                                                                               \
    }
WTILE_FN(1)
WTILE_FN(2)
WTILE_FN(3)
WTILE_FN(4)
WTILE_FN(5)
WTILE_FN(6)
static const wtile_fn wtile_fns[WG_MR_MAX] = {wtile_1, wtile_2, wtile_3,
                                              wtile_4, wtile_5, wtile_6};

/* out[i] = ceil(sqrt(sum of the squares of row i)), rows of len <= 2^10 values, as
 * fx_i16_row_norms_portable: 16 values a step, each pair's squares (at most 2^31, one unsigned
 * 32-bit lane of vpmaddwd) added into 64-bit lanes. The portable loop was 3 % of a ResNet-20
 * training step in flex16_5 on the Zen 3. */
void fx_i16_row_norms_avx2(const int16_t *p, int64_t rows, int64_t len, uint32_t *out)
{
    const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFFll);
    for (int64_t i = 0; i < rows; i++) {
        const int16_t *row = p + i * len;
        __m256i acc = _mm256_setzero_si256();
        int64_t j = 0;
        for (; j + 16 <= len; j += 16) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(row + j));
            const __m256i sq = _mm256_madd_epi16(v, v);
            acc = _mm256_add_epi64(acc, _mm256_and_si256(sq, lo32));
            acc = _mm256_add_epi64(acc, _mm256_srli_epi64(sq, 32));
        }
        uint64_t lane[4];
        _mm256_storeu_si256((__m256i *)lane, acc);
        int64_t sq = (int64_t)(lane[0] + lane[1] + lane[2] + lane[3]);
        for (; j < len; j++) sq += (int64_t)row[j] * row[j];
        out[i] = (uint32_t)fx_ceil_sqrt(sq);
    }
}

int fx_i16_wgrad_direct_avx2(const struct fx_conv_geom *g, const int16_t *xp, const int16_t *dy,
                             int64_t nbc, uint32_t *scratch, int64_t *dwt, int add)
{
    const int64_t C = g->C, O = g->O, OH = g->OH, OW = g->OW, P = OH * OW;
    const int64_t opad = (O + 15) / 16 * 16;
    const int64_t KH = g->KH, KW = g->KW, KK = KH * KW, CKK = C * KK;
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, ximg = C * Hp * Wp;
    fx_i16_wgrad_bufs b;
    /* any data: an output row too large for a chain of its own gets a fold per pair */
    if (!fx_i16_wgrad_prepare(g, xp, dy, nbc, scratch, fx_i16_row_norms_avx2, 1, &b)) return 0;
    uint32_t *dyt = b.dyt, *dn = b.dn, *xk = b.xk, *dm = b.dm;
    uint8_t *fold = b.fold;
    fx_i16_pair_rows(dy, nbc, O, P, opad, dyt);
    /* the rows in ntile tiles of near-equal heights, the taller ones first */
    const int64_t ntile = (CKK + WG_MR_MAX - 1) / WG_MR_MAX, tall = CKK % ntile;
    const int64_t base = CKK / ntile;
    for (int64_t o0 = 0; o0 < O; o0 += 16) {
        const int ncols = O - o0 < 16 ? (int)(O - o0) : 16;
        /* dm[s]: dy's row norms' largest over this block's channels, per output row */
        fx_i16_wgrad_dy_bounds(dn, nbc * OH, o0 / 16, 1, dm);
        int64_t sched_lo = -1, sched_hi = -1; /* the channels of the schedule in fold */
        int64_t r0 = 0;
        for (int64_t t = 0; t < ntile; t++) {
            const int rows = (int)(base + (t < tall));
            int64_t roff[WG_MR_MAX];
            for (int i = 0; i < rows; i++) {
                const int64_t r = r0 + i, kw = r % KW, kh = r / KW % KH, c = r / KK;
                roff[i] = c * Hp * Wp + kh * Wp + kw;
            }
            /* the tile's chains (the previous tile's when it covered the same channels) */
            const int64_t c_lo = r0 / KK, c_hi = (r0 + rows - 1) / KK;
            if (c_lo != sched_lo || c_hi != sched_hi)
                fx_i16_wgrad_fold_schedule(xk, dm, nbc * OH, c_lo, c_hi, fold);
            sched_lo = c_lo;
            sched_hi = c_hi;
            wtile_fns[rows - 1](xp, ximg, roff, dyt + o0, (P / 2) * opad, opad, OH, OW, Wp, nbc,
                                fold, dwt + r0 * O + o0, O, ncols, add);
            r0 += rows;
        }
    }
    return 1;
}
