/* Layout transforms for convolution as GEMM; see im2col.h. Copies only: no arithmetic on the
 * values except the adds of col2im, which are done in the caller's accumulator type. */
#include "im2col.h"
#include "../core/backend.h"

#include <string.h>

/* Below this many elements moved, a transform runs on one thread (fork/join would cost more
 * than the memory traffic it overlaps). */
#define FX_IM2COL_PAR_MIN ((int64_t)1 << 15)

#ifdef _OPENMP
#define FX_PARALLEL_FOR_NT                                                                     \
    _Pragma("omp parallel for schedule(static) num_threads(nt) if (nt > 1)")
#else
#define FX_PARALLEL_FOR_NT
#endif

static int fx_im2col_threads(int nthreads, int64_t work, int64_t units)
{
    int nt = nthreads > 1 && work >= FX_IM2COL_PAR_MIN ? nthreads : 1;
    if (nt > units) nt = units > 1 ? (int)units : 1;
    return nt;
}

/* ---- short runs ----------------------------------------------------------------------------
 * The transforms move runs of 1 to 30 elements (a kernel row, an output row). At these lengths
 * a call to memcpy costs several times the copy, and GCC turns unit-stride copy loops (even
 * ones it versions for stride 1) into such calls; FX_SHORT_RUNS switches that off for the
 * functions that copy runs. Unit-stride runs are moreover copied in whole blocks of
 * FX_RUN_BLOCK elements (one or two vector moves), overshooting by up to FX_RUN_BLOCK - 1
 * elements: only where the same thread writes the next run right after (so the overshoot is
 * overwritten) and the source has slack (FX_CONV_PAD_SLACK). */
#define FX_RUN_BLOCK 8
#if defined(__GNUC__) && !defined(__clang__)
#define FX_SHORT_RUNS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define FX_SHORT_RUNS
#endif

_Static_assert(FX_CONV_PAD_SLACK >= FX_RUN_BLOCK, "block copies read past the padded input");

#define FX_RUN_HELPERS(T, SUF)                                                                 \
    static inline void fx_copy_##SUF(T *restrict d, const T *restrict s, int64_t n,            \
                                     int64_t stride)                                           \
    {                                                                                          \
        for (int64_t i = 0; i < n; i++) d[i] = s[i * stride];                                  \
    }                                                                                          \
    static inline void fx_copy_blocks_##SUF(T *restrict d, const T *restrict s, int64_t n)     \
    {                                                                                          \
        for (int64_t i = 0; i < n; i += FX_RUN_BLOCK)                                          \
            memcpy(d + i, s + i, FX_RUN_BLOCK * sizeof(T));                                    \
    }
FX_RUN_HELPERS(int16_t, i16)
FX_RUN_HELPERS(float, f32)

/* Runs of length len, one after another in the destination, from offset 0 to total: the
 * largest start offset whose block copy stays inside [0, total). */
static int64_t fx_last_blocked(int64_t len, int64_t total)
{
    return total - (len + FX_RUN_BLOCK - 1) / FX_RUN_BLOCK * FX_RUN_BLOCK;
}

/* ---- padding -------------------------------------------------------------------------------- */

int64_t fx_conv_padded_numel(const fx_conv_geom *g, int64_t nb)
{
    return nb * g->C * (g->H + 2 * g->ph) * (g->W + 2 * g->pw);
}

/* The padded planes, written element by element: the compiler makes vector moves of the rows
 * and stores of the few padding elements, where a memset, memcpy and memset per row (2, 64 and
 * 2 bytes for ResNet-20's 16-channel layers at int16) spent more in the three library calls
 * than in the copy: they took about a seventh of that layer's integer weight gradient in a
 * profile (one thread, a Zen 5), whose best of 100 calls went from 2.53 to 2.37 ms with this
 * copy, and to 2.30 with explicit stores for a padding of one element: GCC turns the padding
 * loops into memset calls, and FX_SHORT_RUNS, which stops that, made this pass slower
 * (2.40-2.44 ms). TS: source elements, TD: padded ones; ROW(srow, d, W)
 * fills a row's W values (a copy, or the level's widening of fp16/bf16 bits into floats). */
#define FX_PAD_PLANES(NAME, TS, TD, ROW)                                                      \
    static void NAME(const fx_conv_geom *g, const TS *x, int64_t n0, int64_t nb, TD *xp,     \
                     fx_widen_row_fn widen)                                                   \
    {                                                                                         \
        const int64_t H = g->H, W = g->W, ph = g->ph, pw = g->pw;                             \
        const int64_t Hp = H + 2 * ph, Wp = W + 2 * pw;                                       \
        (void)widen;                                                                          \
        for (int64_t pl = 0; pl < nb * g->C; pl++) {                                          \
            TD *restrict dp = xp + pl * Hp * Wp;                                              \
            const TS *restrict sp = x + (n0 * g->C + pl) * H * W;                             \
            for (int64_t i = 0; i < ph * Wp; i++) dp[i] = 0;                                  \
            for (int64_t ih = 0; ih < H; ih++) {                                              \
                TD *restrict d = dp + (ih + ph) * Wp;                                         \
                const TS *restrict srow = sp + ih * W;                                        \
                if (pw == 1) { /* stores, not the memset calls GCC makes of the loops */     \
                    d[0] = 0;                                                                 \
                    d[W + 1] = 0;                                                             \
                } else {                                                                      \
                    for (int64_t k = 0; k < pw; k++) d[k] = 0;                                \
                    for (int64_t k = 0; k < pw; k++) d[pw + W + k] = 0;                       \
                }                                                                             \
                ROW(srow, d + pw, W);                                                         \
            }                                                                                 \
            for (int64_t i = (ph + H) * Wp; i < Hp * Wp; i++) dp[i] = 0;                      \
        }                                                                                     \
    }
#define FX_PAD_COPY_ROW(s, d, n)                                                              \
    for (int64_t w = 0; w < (n); w++) (d)[w] = (s)[w]
#define FX_PAD_WIDEN_ROW(s, d, n) widen((s), (d), (n))
FX_PAD_PLANES(conv_pad_planes_16, uint16_t, uint16_t, FX_PAD_COPY_ROW)
FX_PAD_PLANES(conv_pad_planes_32, uint32_t, uint32_t, FX_PAD_COPY_ROW)
FX_PAD_PLANES(conv_pad_planes_widen, uint16_t, float, FX_PAD_WIDEN_ROW)

void fx_conv_pad(const fx_conv_geom *g, const void *xv, int64_t n0, int64_t nb, void *xpv,
                 size_t esz)
{
    if (esz == sizeof(uint16_t)) /* bits of int16 mantissas, fp16, bf16 */
        conv_pad_planes_16(g, xv, n0, nb, xpv, NULL);
    else /* fp32's bits */
        conv_pad_planes_32(g, xv, n0, nb, xpv, NULL);
}

void fx_conv_pad_widen(const fx_conv_geom *g, const uint16_t *x, int64_t n0, int64_t nb,
                       float *xp, fx_widen_row_fn widen)
{
    conv_pad_planes_widen(g, x, n0, nb, xp, widen);
}

void fx_conv_unpad(const fx_conv_geom *g, const void *xpv, int64_t n0, int64_t nb, void *xv,
                   size_t esz)
{
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;
    const char *xp = xpv;
    char *x = xv;
    for (int64_t pl = 0; pl < nb * g->C; pl++)
        for (int64_t ih = 0; ih < g->H; ih++)
            memcpy(x + (size_t)(((n0 * g->C + pl) * g->H + ih) * g->W) * esz,
                   xp + (size_t)((pl * Hp + ih + g->ph) * Wp + g->pw) * esz, (size_t)g->W * esz);
}

/* ---- im2col (channel-major) -----------------------------------------------------------------
 * Row r of col is, per sample and output row, one run of OW taps (stride sw) of one padded
 * input row. Threads split the rows r. Geometry in locals, as in im2row below. */
#define FX_IM2COL_BODY(T, SUF)                                                                 \
    const int64_t C = g->C, KH = g->KH, KW = g->KW, OH = g->OH, OW = g->OW;                   \
    const int64_t KK = KH * KW, CKK = C * KK, P = OH * OW, ld = nb * P;                       \
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;                                \
    const int64_t sw = g->sw, rowstep = g->sh * Wp, dh = g->dh, dw = g->dw;                    \
    const int64_t blocked = fx_last_blocked(OW, P); /* within one (r, n) block */             \
    const int nt = fx_im2col_threads(nthreads, CKK * ld, CKK);                                 \
    (void)nt;                                                                                  \
    FX_PARALLEL_FOR_NT                                                                         \
    for (int64_t r = 0; r < CKK; r++) {                                                        \
        const int64_t c = r / KK, kh = (r % KK) / KW, kw = r % KW;                             \
        for (int64_t n = 0; n < nb; n++) {                                                     \
            const T *s = xp + ((n * C + c) * Hp + kh * dh) * Wp + kw * dw;                     \
            T *dst = col + r * ld + n * P;                                                     \
            for (int64_t oh = 0; oh < OH; oh++, s += rowstep) {                                \
                if (sw == 1 && oh * OW <= blocked)                                             \
                    fx_copy_blocks_##SUF(dst + oh * OW, s, OW);                                \
                else                                                                           \
                    fx_copy_##SUF(dst + oh * OW, s, OW, sw);                                   \
            }                                                                                  \
        }                                                                                      \
    }

FX_SHORT_RUNS void fx_im2col_i16(const fx_conv_geom *g, const int16_t *xp, int64_t nb,
                                 int16_t *col, int nthreads)
{
    FX_IM2COL_BODY(int16_t, i16)
}

FX_SHORT_RUNS void fx_im2col_f32(const fx_conv_geom *g, const float *xp, int64_t nb, float *col,
                                 int nthreads)
{
    FX_IM2COL_BODY(float, f32)
}

/* ---- im2row (pixel-major) -------------------------------------------------------------------
 * Each pixel's row is C*KH runs of KW taps (stride dw). Threads split the (sample, output row)
 * pairs. The geometry is read into locals first: the run copies store through char-typed
 * memcpy, which may alias *g, so fields read inside the loops would be reloaded per run. */
#define FX_IM2ROW_BODY(T, SUF)                                                                 \
    const int64_t C = g->C, KH = g->KH, KW = g->KW, OH = g->OH, OW = g->OW;                   \
    const int64_t sh = g->sh, sw = g->sw, dw = g->dw;                                          \
    const int64_t CKK = C * KH * KW, P = OH * OW;                                              \
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;                                \
    const int64_t plane = Hp * Wp, khstep = g->dh * Wp;                                        \
    const int64_t blocked = fx_last_blocked(KW, CKK); /* within one pixel's row */            \
    const int nt = fx_im2col_threads(nthreads, nb * P * CKK, nb * OH);                         \
    (void)nt;                                                                                  \
    FX_PARALLEL_FOR_NT                                                                         \
    for (int64_t nh = 0; nh < nb * OH; nh++) {                                                 \
        const int64_t n = nh / OH, oh = nh % OH;                                               \
        const T *rows = xp + (n * C * Hp + oh * sh) * Wp;                                      \
        T *d = colT + (n * P + oh * OW) * CKK;                                                 \
        for (int64_t ow = 0; ow < OW; ow++, d += CKK) {                                        \
            const T *s = rows + ow * sw;                                                       \
            int64_t at = 0; /* offset of the run in the pixel's row */                         \
            if (dw == 1 && KW <= FX_RUN_BLOCK) { /* each run is one block move */            \
                const T *sc = s;                                                               \
                for (int64_t c = 0; c < C; c++, sc += plane) {                                 \
                    const T *sr = sc;                                                          \
                    for (int64_t kh = 0; kh < KH; kh++, at += KW, sr += khstep) {              \
                        if (at <= blocked)                                                     \
                            memcpy(d + at, sr, FX_RUN_BLOCK * sizeof(T));                      \
                        else                                                                   \
                            fx_copy_##SUF(d + at, sr, KW, 1);                                  \
                    }                                                                          \
                }                                                                              \
            } else if (dw == 1) {                                                              \
                const T *sc = s;                                                               \
                for (int64_t c = 0; c < C; c++, sc += plane) {                                 \
                    const T *sr = sc;                                                          \
                    for (int64_t kh = 0; kh < KH; kh++, at += KW, sr += khstep) {              \
                        if (at <= blocked)                                                     \
                            fx_copy_blocks_##SUF(d + at, sr, KW);                              \
                        else                                                                   \
                            fx_copy_##SUF(d + at, sr, KW, 1);                                  \
                    }                                                                          \
                }                                                                              \
            } else {                                                                           \
                for (int64_t c = 0; c < C; c++)                                                \
                    for (int64_t kh = 0; kh < KH; kh++, at += KW)                              \
                        fx_copy_##SUF(d + at, s + c * plane + kh * khstep, KW, dw);            \
            }                                                                                  \
        }                                                                                      \
    }

FX_SHORT_RUNS void fx_im2row_i16(const fx_conv_geom *g, const int16_t *xp, int64_t nb,
                                 int16_t *colT, int nthreads)
{
    FX_IM2ROW_BODY(int16_t, i16)
}

FX_SHORT_RUNS void fx_im2row_f32(const fx_conv_geom *g, const float *xp, int64_t nb, float *colT,
                                 int nthreads)
{
    FX_IM2ROW_BODY(float, f32)
}

/* d[i] += s[i]: restrict-qualified, so that the compiler vectorises it without aliasing checks. */
static inline void fx_add_run_i64(int64_t *restrict d, const int64_t *restrict s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) d[i] += s[i];
}
static inline void fx_add_run_f32(float *restrict d, const float *restrict s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) d[i] += s[i];
}

/* ---- col2im -----------------------------------------------------------------------------------
 * The mirror image of im2col's runs, adding into the padded chunk instead of copying. Threads
 * own channels, so no two threads touch one element, and each element's terms arrive in
 * increasing (kh, kw) order: the same sums for any thread count. */
#define FX_COL2IM_BODY(T, SUF)                                                                 \
    const int64_t C = g->C, KH = g->KH, KW = g->KW, OH = g->OH, OW = g->OW;                   \
    const int64_t KK = KH * KW, P = OH * OW, ld = nb * P;                                     \
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, sw = g->sw;                    \
    const int64_t rowstep = g->sh * Wp, dh = g->dh, dw = g->dw;                                \
    const int nt = fx_im2col_threads(nthreads, C * KK * ld, C);                                \
    (void)nt;                                                                                  \
    FX_PARALLEL_FOR_NT                                                                         \
    for (int64_t c = 0; c < C; c++)                                                            \
        for (int64_t kh = 0; kh < KH; kh++)                                                    \
            for (int64_t kw = 0; kw < KW; kw++) {                                              \
                const T *src = col + ((c * KH + kh) * KW + kw) * ld;                           \
                for (int64_t n = 0; n < nb; n++) {                                             \
                    T *d = dxp + ((n * C + c) * Hp + kh * dh) * Wp + kw * dw;                  \
                    const T *so = src + n * P;                                                 \
                    for (int64_t oh = 0; oh < OH; oh++, d += rowstep, so += OW) {              \
                        if (sw == 1)                                                           \
                            fx_add_run_##SUF(d, so, OW);                                        \
                        else                                                                   \
                            for (int64_t ow = 0; ow < OW; ow++) d[ow * sw] += so[ow];          \
                    }                                                                          \
                }                                                                              \
            }

void fx_col2im_i64(const fx_conv_geom *g, const int64_t *col, int64_t nb, int64_t *dxp,
                   int nthreads)
{
    FX_COL2IM_BODY(int64_t, i64)
}

void fx_col2im_f32(const fx_conv_geom *g, const float *col, int64_t nb, float *dxp,
                   int nthreads)
{
    FX_COL2IM_BODY(float, f32)
}

/* ---- NCHW <-> chunk orders ------------------------------------------------------------------ */

void fx_chunk_gather(const void *nchw, int64_t n0, int64_t nb, int64_t O, int64_t P, void *chunk,
                     size_t esz)
{
    const char *src = nchw;
    char *dst = chunk;
    for (int64_t n = 0; n < nb; n++)
        for (int64_t o = 0; o < O; o++)
            memcpy(dst + (size_t)(o * nb * P + n * P) * esz,
                   src + (size_t)(((n0 + n) * O + o) * P) * esz, (size_t)P * esz);
}

/* dst[j*rows + i] = src[i*cols + j] for elements of esz bytes, in 32 x 32 tiles so that both
 * sides move whole cache lines. */
#define FX_TILE 32
#define FX_TRANSPOSE_LOOP(T)                                                                   \
    do {                                                                                       \
        const T *s = src;                                                                      \
        T *d = dst;                                                                            \
        for (int64_t i0 = 0; i0 < rows; i0 += FX_TILE)                                         \
            for (int64_t j0 = 0; j0 < cols; j0 += FX_TILE) {                                   \
                const int64_t i1 = i0 + FX_TILE < rows ? i0 + FX_TILE : rows;                  \
                const int64_t j1 = j0 + FX_TILE < cols ? j0 + FX_TILE : cols;                  \
                for (int64_t i = i0; i < i1; i++)                                              \
                    for (int64_t j = j0; j < j1; j++) d[j * rows + i] = s[i * cols + j];       \
            }                                                                                  \
    } while (0)

static void fx_transpose(void *dst, const void *src, int64_t rows, int64_t cols, size_t esz)
{
    const fx_backend *be = fx_backend_active();
    if (esz == 2 && be->cvt.transpose16) {
        be->cvt.transpose16(src, dst, rows, cols);
        return;
    }
    if (esz == 4 && be->cvt.transpose32) {
        be->cvt.transpose32(src, dst, rows, cols);
        return;
    }
    if (esz == 8 && be->cvt.transpose64) {
        be->cvt.transpose64(src, dst, rows, cols);
        return;
    }
    if (esz == 2)
        FX_TRANSPOSE_LOOP(uint16_t);
    else if (esz == 4)
        FX_TRANSPOSE_LOOP(uint32_t);
    else
        FX_TRANSPOSE_LOOP(uint64_t);
}

void fx_transpose_i16(const int16_t *src, int16_t *dst, int64_t rows, int64_t cols)
{
    fx_transpose(dst, src, rows, cols, sizeof(int16_t));
}

void fx_chunk_scatter_t(const void *pix, int64_t n0, int64_t nb, int64_t O, int64_t P,
                        void *nchw, size_t esz)
{
    const char *src = pix;
    char *dst = nchw;
    for (int64_t n = 0; n < nb; n++)
        fx_transpose(dst + (size_t)((n0 + n) * O * P) * esz, src + (size_t)(n * P * O) * esz, P,
                     O, esz);
}

void fx_chunk_gather_t(const void *nchw, int64_t n0, int64_t nb, int64_t O, int64_t P, void *pix,
                       size_t esz)
{
    const char *src = nchw;
    char *dst = pix;
    for (int64_t n = 0; n < nb; n++)
        fx_transpose(dst + (size_t)(n * P * O) * esz, src + (size_t)((n0 + n) * O * P) * esz, O,
                     P, esz);
}

/* The transposes are bound by memory; one thread leaves half of it unused (the fp32 stage of
 * the CNN's first layer, 12.8 MB, took 6 % of a two-thread step on one thread). */
void fx_chunk_scatter_t_par(const void *pix, int64_t nb, int64_t O, int64_t P, void *nchw,
                            size_t esz, int nthreads)
{
    const char *src = pix;
    const int nt = fx_im2col_threads(nthreads, nb * O * P, nb);
    (void)nt;
    FX_PARALLEL_FOR_NT
    for (int64_t n = 0; n < nb; n++)
        fx_chunk_scatter_t(src + (size_t)(n * P * O) * esz, n, 1, O, P, nchw, esz);
}
