/* The parts of the exact int16 direct weight gradient that do not depend on the vector level
 * (conv_i16_wgrad.h): which geometries it takes, its scratch, the norms' bookkeeping and fold
 * schedule, the hooks, and the portable copies the AVX2 kernel takes as they are. */
#include "conv_i16.h"
#include "conv_i16_direct.h" /* FX_I16_CHAIN_LIMIT */
#include "conv_i16_wgrad.h"
#include "gemm_i16.h"        /* fx_ceil_sqrt */
#include "../nn/im2col.h"

#include <stdatomic.h>

int fx_i16_wgrad_direct_fits(const struct fx_conv_geom *g, int max_stride)
{
    const int64_t ms = max_stride > 1 ? max_stride : 1;
    /* a stride only where the taps reach every input pixel (KH >= sh, KW >= sw): the kernel
     * copies and bounds the whole padded input, four times the pixels a 1 x 1 projection at
     * stride 2 reads (such a projection took 1.1-1.5x the patch GEMM's time on the Zen 5).
     * Padded rows of at most 2^10 values: their sums of squares stay below 2^40, where
     * fx_ceil_sqrt is exact. */
    return g->sh >= 1 && g->sh <= ms && g->sw >= 1 && g->sw <= ms && g->KH >= g->sh &&
           g->KW >= g->sw && g->dh == 1 && g->dw == 1 && g->OW % 2 == 0 && g->OW >= 2 &&
           g->O >= 1 && g->W + 2 * g->pw <= 1024;
}

/* Words of a chunk's scratch before the rest fx_i16_wgrad_prepare lays out: at a horizontal
 * stride, the copy of the padded input in column runs; 0 at stride 1 */
static int64_t cols_words(const struct fx_conv_geom *g, int64_t nb)
{
    if (g->sw == 1) return 0;
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;
    const int64_t Wd = (Wp + g->sw - 1) / g->sw * g->sw;
    return (nb * g->C * Hp * Wd + 1) / 2; /* int16 values */
}

int64_t fx_i16_wgrad_direct_scratch(const struct fx_conv_geom *g, int64_t nb)
{
    const int64_t opad = (g->O + 15) / 16 * 16, Hp = g->H + 2 * g->ph;
    /* dy's pair words, the input rows' norms, dy's rows' norms and their maxima per block of 16
     * channels, the input norms per channel and output row, one channel block's dy norms per
     * output row, one tile's fold schedule (bytes, in words), 16 spare words for the alignment;
     * at a horizontal stride, first the copy of the padded input the tiles read */
    return cols_words(g, nb) + nb * (g->OH * g->OW / 2) * opad + nb * g->C * Hp +
           nb * g->O * g->OH + nb * g->OH * (opad / 16) + nb * g->C * g->OH + nb * g->OH +
           (nb * g->OH + 3) / 4 + 16;
}

/* out[i] = the largest of rows[k stride + i] over k < nrows (at least 1), for i < len: the
 * element-wise maximum every bound below is built from, as plain loops the compiler
 * vectorises (the norms are at most 2^20) */
static inline void max_of_rows(uint32_t *restrict out, const uint32_t *restrict rows,
                               int64_t stride, int64_t nrows, int64_t len)
{
    for (int64_t i = 0; i < len; i++) out[i] = rows[i];
    for (int64_t k = 1; k < nrows; k++) {
        const uint32_t *r = rows + k * stride;
        for (int64_t i = 0; i < len; i++) out[i] = r[i] > out[i] ? r[i] : out[i];
    }
}

/* dn[ob S + n OH + oh] (S = nbc OH, the chunk's output rows): the largest norm over block ob's
 * channels of dy's row (n, o, oh), from the rows' norms rn[(n O + o) OH + oh]. Every bound is
 * kept block- or channel-major over the chunk's output rows s = n OH + oh, so that the maxima
 * over blocks and channels below run along whole rows of S values (ResNet-20's last stage has
 * OH = 8: runs per image would be 8 long). */
static void block_norms(const uint32_t *rn, int64_t nbc, int64_t O, int64_t OH, int64_t nob,
                        uint32_t *dn)
{
    const int64_t S = nbc * OH;
    for (int64_t ob = 0; ob < nob; ob++)
        for (int64_t n = 0; n < nbc; n++)
            max_of_rows(dn + ob * S + n * OH, rn + (n * O + 16 * ob) * OH, OH,
                        O - 16 * ob < 16 ? O - 16 * ob : 16, OH);
}

void fx_i16_wgrad_dy_bounds(const uint32_t *dn, int64_t S, int64_t ob0, int64_t nv, uint32_t *dm)
{
    max_of_rows(dm, dn + ob0 * S, S, nv, S);
}

static atomic_int wdirect_enabled = 1;
static atomic_llong wdirect_calls, wdirect_declined, wdirect_paired;

void fx_i16_wgrad_direct_set_enabled(int on)
{
    atomic_store_explicit(&wdirect_enabled, on != 0, memory_order_relaxed);
}

int fx_i16_wgrad_direct_enabled(void)
{
    return atomic_load_explicit(&wdirect_enabled, memory_order_relaxed);
}

long long fx_i16_wgrad_direct_calls(void)
{
    return atomic_load_explicit(&wdirect_calls, memory_order_relaxed);
}

long long fx_i16_wgrad_direct_declined(void)
{
    return atomic_load_explicit(&wdirect_declined, memory_order_relaxed);
}

long long fx_i16_wgrad_direct_paired(void)
{
    return atomic_load_explicit(&wdirect_paired, memory_order_relaxed);
}

/* fold[s] for the output rows s of a tile over channels [c_lo, c_hi]: greedy chains of rows
 * whose bounds (the channels' largest input norm times dy's, dm[s]) sum to at most
 * FX_I16_CHAIN_LIMIT (each alone does, the chunk's check, except the few rows that
 * fx_i16_wgrad_prepare admits with any_data: FX_I16_FOLD_PAIRS). The bounds of FX_WG_RUN rows at a
 * time come from element-wise maxima and products the compiler vectorises; the greedy scan over
 * them is branch-free, as fx_i16_fold_schedule's: where a chain is cut depends on the data, and
 * a branch there mispredicts. */
#define FX_WG_RUN 64
void fx_i16_wgrad_fold_schedule(const uint32_t *xk, const uint32_t *dm, int64_t S, int64_t c_lo,
                                int64_t c_hi, uint8_t *fold)
{
    /* a row whose bound alone exceeds the limit (only in chunks fx_i16_wgrad_prepare admitted
     * with any_data) is FX_I16_FOLD_PAIRS: a fold before it and after each of its pairs, and
     * the chain after it starts afresh */
    int64_t run = 0;
    int prev_pairs = 0;
    for (int64_t s0 = 0; s0 < S; s0 += FX_WG_RUN) {
        const int64_t len = S - s0 < FX_WG_RUN ? S - s0 : FX_WG_RUN;
        const uint32_t *d = dm + s0;
        uint32_t xm[FX_WG_RUN];
        int64_t b[FX_WG_RUN];
        max_of_rows(xm, xk + c_lo * S + s0, S, c_hi - c_lo + 1, len);
        for (int64_t i = 0; i < len; i++) b[i] = (int64_t)xm[i] * d[i];
        uint8_t *f = fold + s0;
        for (int64_t i = 0; i < len; i++) {
            /* the first row never cuts: run is 0 there (conditional moves: a few cycles a row) */
            const int pairs = b[i] > FX_I16_CHAIN_LIMIT;
            const int cut = pairs | (run + b[i] > FX_I16_CHAIN_LIMIT);
            run = pairs ? 0 : cut ? b[i] : run + b[i];
            f[i] = (uint8_t)(pairs ? FX_I16_FOLD_PAIRS : 0);
            if (s0 + i > 0 && !prev_pairs) f[i - 1] = (uint8_t)cut;
            prev_pairs = pairs;
        }
    }
}

int fx_i16_wgrad_sched_span(int64_t r0, int64_t rows, int64_t ahead, int64_t CKK, int64_t KK,
                            int64_t *lo, int64_t *hi)
{
    const int64_t c_lo = r0 / KK, c_hi = (r0 + rows - 1) / KK;
    if (*lo >= 0 && c_lo >= *lo && c_hi <= *hi) return 0;
    const int64_t end = r0 + rows + ahead < CKK ? r0 + rows + ahead : CKK;
    *lo = c_lo;
    *hi = (end - 1) / KK;
    return 1;
}

static int decline(void)
{
    atomic_fetch_add_explicit(&wdirect_declined, 1, memory_order_relaxed);
    return 0;
}

static void count_call(void)
{
    atomic_fetch_add_explicit(&wdirect_calls, 1, memory_order_relaxed);
}

/* xk[c S + n OH + oh]: the largest input row norm xn[(n C + c) Hp + sh oh + kh] of channel c
 * at output row oh over the kernel's rows kh (what a tile's bound takes per channel: a little
 * looser than per tap, and one lookup per channel); then whether the chunk can be taken: no
 * output row's bound (its largest xk times its largest dn) may leave int32 alone, or with
 * any_data at most one row in FX_I16_PAIRED_MAX_SHARE. Counts the call or the decline. */
static int channel_norms(const uint32_t *xn, const uint32_t *dn, int64_t nbc, int64_t C,
                         int64_t Hp, int64_t OH, int64_t KH, int64_t sh, int64_t nob,
                         int any_data, uint32_t *xk)
{
    const int64_t S = nbc * OH;
    for (int64_t c = 0; c < C; c++)
        for (int64_t n = 0; n < nbc; n++) {
            const uint32_t *rows = xn + (n * C + c) * Hp;
            uint32_t *out = xk + c * S + n * OH;
            if (sh == 1) {
                max_of_rows(out, rows, 1, KH, OH);
                continue;
            }
            for (int64_t oh = 0; oh < OH; oh++) {
                uint32_t m = 0;
                for (int64_t kh = 0; kh < KH; kh++)
                    m = rows[sh * oh + kh] > m ? rows[sh * oh + kh] : m;
                out[oh] = m;
            }
        }
    int64_t over = 0; /* output rows whose bound alone may leave a chain */
    for (int64_t s0 = 0; s0 < S; s0 += FX_WG_RUN) {
        const int64_t len = S - s0 < FX_WG_RUN ? S - s0 : FX_WG_RUN;
        uint32_t xmax[FX_WG_RUN], dmax[FX_WG_RUN];
        max_of_rows(xmax, xk + s0, S, C, len);
        max_of_rows(dmax, dn + s0, S, nob, len);
        for (int64_t i = 0; i < len; i++) over += (int64_t)xmax[i] * dmax[i] > FX_I16_CHAIN_LIMIT;
        if (over && !any_data) return decline();
    }
    /* taken with a fold per pixel pair of such rows, unless they are many (as the forward
     * kernel's admission, fx_i16_fwd_admit_any: then the patch GEMM is the cheaper) */
    if (over * FX_I16_PAIRED_MAX_SHARE > S) return decline();
    if (over) atomic_fetch_add_explicit(&wdirect_paired, 1, memory_order_relaxed);
    count_call();
    return 1;
}

void fx_i16_row_norms_portable(const int16_t *p, int64_t rows, int64_t len, int64_t ld,
                               uint32_t *out)
{
    for (int64_t i = 0; i < rows; i++) {
        int64_t sq = 0; /* at most 2^10 values of at most 2^30 */
        for (int64_t j = 0; j < len; j++) sq += (int64_t)p[i * ld + j] * p[i * ld + j];
        out[i] = (uint32_t)fx_ceil_sqrt(sq);
    }
}

void fx_i16_cols_by_stride_portable(const int16_t *xp, int64_t rows, int64_t Wp, int64_t s,
                                    int16_t *xd)
{
    const int64_t Wq = (Wp + s - 1) / s, Wd = s * Wq;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < s; k++)
            for (int64_t v = 0; v < Wq; v++) {
                const int64_t col = s * v + k;
                xd[r * Wd + k * Wq + v] = col < Wp ? xp[r * Wp + col] : 0;
            }
}

void fx_i16_pair_rows(const int16_t *dy, int64_t nbc, int64_t O, int64_t P, int64_t opad,
                      uint32_t *dyt)
{
    const int64_t pp_n = P / 2;
    for (int64_t n = 0; n < nbc; n++) {
        const uint32_t *src = (const uint32_t *)(const void *)(dy + n * O * P);
        uint32_t *dst = dyt + n * pp_n * opad;
        for (int64_t o = 0; o < opad; o++)
            for (int64_t pp = 0; pp < pp_n; pp++)
                dst[pp * opad + o] = o < O ? src[o * pp_n + pp] : 0u;
    }
}

int fx_i16_wgrad_prepare(const struct fx_conv_geom *g, const int16_t *xp, const int16_t *dy,
                         int64_t nbc, uint32_t *scratch,
                         void (*row_norms)(const int16_t *, int64_t, int64_t, int64_t, uint32_t *),
                         fx_i16_cols_by_2_fn cols_by_2, int any_data, fx_i16_wgrad_bufs *b)
{
    const int64_t C = g->C, O = g->O, OH = g->OH, OW = g->OW, P = OH * OW;
    const int64_t opad = (O + 15) / 16 * 16, nob = opad / 16;
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, sw = g->sw;
    if (nbc * P > ((int64_t)1 << 16)) return decline(); /* hi's range */
    /* the rows the tiles read: at a horizontal stride, the copy at the scratch's start */
    b->sw = sw;
    b->wq = (Wp + sw - 1) / sw;
    b->ld = sw * b->wq;
    b->plane = Hp * b->ld;
    b->ximg = C * b->plane;
    b->ystep = g->sh * b->ld;
    int16_t *copy = sw == 1 ? NULL : (int16_t *)(void *)scratch;
    b->x = copy ? copy : xp;
    scratch += cols_words(g, nbc);
    b->dyt = scratch + ((16 - ((uintptr_t)scratch / 4) % 16) % 16); /* 64-byte aligned */
    b->xn = b->dyt + nbc * (P / 2) * opad;
    b->drn = b->xn + nbc * C * Hp;
    b->dn = b->drn + nbc * O * OH;
    b->xk = b->dn + nbc * OH * nob;
    b->dm = b->xk + nbc * C * OH;
    b->fold = (uint8_t *)(void *)(b->dm + nbc * OH);
    /* a padded input row's norm from its W values between the padding columns (zeros): at 32 x
     * 32 one vector's load where its 34 values took two. All rows in one call, the padding rows
     * too (norm 0), so that the rows go eight at a time across the planes: a call per plane
     * left CNN's 14-row planes a tail of six rows, each reduced alone. */
    row_norms(xp + g->pw, nbc * C * Hp, g->W, Wp, b->xn);
    row_norms(dy, nbc * O * OH, OW, OW, b->drn);
    block_norms(b->drn, nbc, O, OH, nob, b->dn);
    /* xk, and rows that alone may leave int32 (any, or with any_data too many): the GEMM's
     * any-data kernels take the chunk */
    if (!channel_norms(b->xn, b->dn, nbc, C, Hp, OH, g->KH, g->sh, nob, any_data, b->xk))
        return 0;
    /* the norms above are the rows' own, whatever the order of their values */
    if (copy && sw == 2 && cols_by_2)
        cols_by_2(xp, nbc * C * Hp, Wp, copy);
    else if (copy)
        fx_i16_cols_by_stride_portable(xp, nbc * C * Hp, Wp, sw, copy);
    return 1;
}
