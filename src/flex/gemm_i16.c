/* Portable driver of the exact int16 GEMM (see gemm_i16.h for the exactness argument and the
 * packed layouts). BLIS-style loops:
 *   jc: column blocks of NC        (packed B block: KC x NC, shared by the threads)
 *    pc: K blocks of KC            (at most FX_GEMM_I16_MAX_KP pairs: the int32 chains flush)
 *     ic: row blocks of MC         (packed A block: MC x KC, one per thread; threads split ic)
 *      jr, ir: micro-kernel tiles  (each B micro-panel is reused across the ir loop)
 * Packing also computes the segment norms of every A micro-panel and B micro-panel; from them
 * each (tile, K block) takes the fast kernel with the longest chain the norms prove safe, or the
 * split kernel (its split B panel is made from the plain one by the thread that needs it, at
 * most once per thread and B block).
 * Each output element belongs to exactly one (ic, jr, ir) tile and receives the exact partial
 * sums of its K blocks in order, so the result is the exact int64 sum for any thread count.
 */
#include "gemm_i16.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#define FX_OMP(...) _Pragma(#__VA_ARGS__)
#else
#define FX_OMP(...)
#endif

#define FX_GEMM_KC FX_GEMM_I16_KC /* K elements per block: even, <= 2 * FX_GEMM_I16_MAX_KP */
#define FX_GEMM_MC 144  /* rows per packed A block (rounded down to a multiple of mr) */
#define FX_GEMM_NC 2048 /* columns per packed B block (rounded down to a multiple of nr) */

/* Default size gates of the fast kernel (mode AUTO; a level may set its own in
 * fx_gemm_i16_kernel): it is tried only when M >= FX_GEMM_FAST_MIN_M, the B block has >=
 * FX_GEMM_FAST_MIN_N columns and the K block >= FX_GEMM_FAST_MIN_KP pairs. The norms cost a
 * pass over every packed A element (paid back in proportion to N) and B element (in proportion
 * to M); the fast kernel's per-call Lo/Hi work is paid back in proportion to K. Measured on
 * AVX-512 with bench_gemm_i16: fc1 (M = 128), the CNN's N = 64 layers and conv2's K = 64
 * product lost 10-45 % with the norms, 1024^3 and 2048^3 gained. Below the gates no norms are
 * computed and every tile takes the any-data kernel (split or wrap). */
/* Besides, in mode AUTO the first K block whose tiles took the norm test is a probe: when not
 * one of its tiles passed (full-range data, as in bench_gemm), the remaining blocks skip the
 * norms, which would only cost time (measured 3-5 % of a 1024^3 product). The probe counts
 * tiles over all threads, so the choice does not depend on the thread count; either way every
 * result is exact. */
#define FX_GEMM_FAST_MIN_M 512
#define FX_GEMM_FAST_MIN_N 256
#define FX_GEMM_FAST_MIN_KP 64

/* Below this many multiply-adds one thread does the work (thread start-up would dominate). */
#define FX_GEMM_PAR_MIN_MACS ((int64_t)1 << 21)

/* Norm segments of one K block (sizes the hooks' output). */
#define FX_GEMM_I16_MAX_SEGS ((FX_GEMM_KC / 2 + FX_GEMM_I16_SEG - 1) / FX_GEMM_I16_SEG)

_Static_assert(FX_GEMM_KC % 2 == 0 && FX_GEMM_KC / 2 <= FX_GEMM_I16_MAX_KP,
               "a K block must not exceed the exact int32 chain length");

static inline int64_t fx_min64(int64_t x, int64_t y) { return x < y ? x : y; }

/* Test hook (fx_gemm_i16_set_portable_packing): the portable packing loops define the packed
 * bytes, and the tests run the SIMD kernels on them too. */
static _Atomic int g_portable_packing;

void fx_gemm_i16_set_portable_packing(int on) { g_portable_packing = on != 0; }

/* Test and benchmark switch (fx_gemm_i16_set_wrap): 0 keeps the split kernel where the wrap
 * kernel would run, so that both can be measured and checked on one machine. */
static _Atomic int g_wrap_enabled = 1;

void fx_gemm_i16_set_wrap(int on) { g_wrap_enabled = on != 0; }

static inline int fx_simd_pack(const fx_gemm_i16_kernel *kd)
{
    return kd->pack != NULL && !g_portable_packing;
}

/* b = 256 * hi + lo with lo in [-128, 127] and hi in [-128, 128]. */
static inline void fx_split_b(int32_t v, int16_t *hi, int16_t *lo)
{
    const int32_t l = (int32_t)(((uint32_t)v + 128u) & 255u) - 128;
    *lo = (int16_t)l;
    *hi = (int16_t)((v - l) / 256); /* exact: v - l is a multiple of 256 */
}

/* ceil(sqrt(x)) for 0 <= x <= 2^40, exactly: the double square root is within one unit of the
 * true root (x is exact in a double), and the integer fix-ups make it exact. */
static int64_t fx_ceil_sqrt(int64_t x)
{
    int64_t r = (int64_t)sqrt((double)x);
    while (r > 0 && r * r >= x) r--; /* now r^2 < x, or r = 0 */
    while (r * r < x) r++;           /* the smallest r with r^2 >= x */
    return r;
}

/* Pack a kc x n block of B (n <= nr valid columns) into one plain micro-panel of nr columns,
 * and write nb[s] = ceil(sqrt(max_j sum_{k in segment s} B[k][j]^2)) for its segments. */
static void fx_pack_b(const fx_gemm_i16_kernel *kd, const int16_t *b, int64_t sbk, int64_t sbn,
                      int64_t kc, int64_t n, int nr, int16_t *bp, int32_t *nb /* NULL: no norms */)
{
    const int64_t kp = (kc + 1) / 2;
    const int rowmajor = sbn == 1 && kd->pack && kd->pack->pack_b;
    const int colmajor = sbk == 1 && kd->pack && kd->pack->pack_bt;
    if (fx_simd_pack(kd) && n == nr && (rowmajor || colmajor)) {
        int64_t sq[FX_GEMM_I16_MAX_SEGS];
        if (rowmajor)
            kd->pack->pack_b(b, sbk, kc, bp, nb ? sq : NULL);
        else
            kd->pack->pack_bt(b, sbn, kc, bp, nb ? sq : NULL);
        for (int64_t s = 0; nb && s * FX_GEMM_I16_SEG < kp; s++)
            nb[s] = (int32_t)fx_ceil_sqrt(sq[s]);
        return;
    }
    for (int64_t p = 0; p < kp; p++) {
        int16_t *dst = bp + p * 2 * nr;
        const int16_t *r0 = b + 2 * p * sbk;
        const int16_t *r1 = 2 * p + 1 < kc ? r0 + sbk : NULL;
        int64_t j = 0;
        for (; j < n; j++) {
            dst[2 * j] = r0[j * sbn];
            dst[2 * j + 1] = r1 ? r1[j * sbn] : 0;
        }
        for (; j < nr; j++) dst[2 * j] = dst[2 * j + 1] = 0;
    }
    for (int64_t s = 0, p0 = 0; nb && p0 < kp; s++, p0 += FX_GEMM_I16_SEG) {
        const int64_t p1 = fx_min64(kp, p0 + FX_GEMM_I16_SEG);
        /* per column: int32 pair sums (b0^2 + b1^2 <= 2^31 as uint32), summed in int64; the
         * loops are simple enough for the compiler to vectorise */
        int64_t sq[FX_GEMM_I16_MAX_NR] = {0}, mx = 0;
        for (int64_t p = p0; p < p1; p++) {
            const int16_t *row = bp + p * 2 * nr;
            for (int j = 0; j < nr; j++) {
                const int32_t b0 = row[2 * j], b1 = row[2 * j + 1];
                sq[j] += (int64_t)((uint32_t)(b0 * b0) + (uint32_t)(b1 * b1));
            }
        }
        for (int j = 0; j < nr; j++) mx = sq[j] > mx ? sq[j] : mx;
        nb[s] = (int32_t)fx_ceil_sqrt(mx); /* <= sqrt(2 SEG) 2^15 = 2^17 */
    }
}

/* Turn a plain B micro-panel into the split layout of the split kernel. */
static void fx_split_panel(const fx_gemm_i16_kernel *kd, const int16_t *bp, int64_t kp, int nr,
                           int16_t *bs)
{
    if (fx_simd_pack(kd) && kd->pack->split_panel) {
        kd->pack->split_panel(bp, kp, bs);
        return;
    }
    for (int64_t p = 0; p < kp; p++)
        for (int q = 0; q < 2 * nr; q++)
            fx_split_b(bp[p * 2 * nr + q], &bs[p * 4 * nr + q], &bs[p * 4 * nr + 2 * nr + q]);
}

int64_t fx_gemm_i16_wrap_panel_numel(int64_t kp, int nr)
{
    const int64_t nq = (kp + 1) / 2;
    const int64_t nch = (nq + FX_GEMM_I16_WRAP_CHUNK_QUADS - 1) / FX_GEMM_I16_WRAP_CHUNK_QUADS;
    return (nq * 6 + nch * 2) * nr;
}

/* Turn a plain B micro-panel into the wrap layout of the wrap kernel (gemm_i16.h). The int32
 * and byte parts go through memcpy: the panel is an int16 buffer. */
static void fx_wrap_panel(const fx_gemm_i16_kernel *kd, const int16_t *bp, int64_t kp, int nr,
                          int16_t *bw)
{
    if (fx_simd_pack(kd) && kd->pack->wrap_panel) {
        kd->pack->wrap_panel(bp, kp, bw);
        return;
    }
    const int64_t nq = (kp + 1) / 2;
    for (int64_t q0 = 0; q0 < nq; q0 += FX_GEMM_I16_WRAP_CHUNK_QUADS) {
        const int64_t q1 = fx_min64(nq, q0 + FX_GEMM_I16_WRAP_CHUNK_QUADS);
        int32_t corr[FX_GEMM_I16_MAX_NR] = {0};
        int16_t *corr_at = bw;
        bw += 2 * nr;
        for (int64_t q = q0; q < q1; q++, bw += 6 * nr) {
            signed char hb[4 * FX_GEMM_I16_MAX_NR];
            static const int slot[2][2] = {{0, 2}, {1, 3}}; /* [pair u][half t]: byte order */
            for (int u = 0; u < 2; u++) {
                const int64_t p = 2 * q + u;
                int16_t *dst = bw + 2 * nr + u * 2 * nr;
                for (int j = 0; j < nr; j++)
                    for (int t = 0; t < 2; t++) {
                        const int16_t v = p < kp ? bp[p * 2 * nr + 2 * j + t] : 0;
                        const int h = v >> 8; /* arithmetic: v = 256 h + (v & 255) */
                        hb[4 * j + slot[u][t]] = (signed char)h;
                        corr[j] += 128 * h;
                        dst[2 * j + t] = v;
                    }
            }
            memcpy(bw, hb, (size_t)(4 * nr));
        }
        memcpy(corr_at, corr, (size_t)nr * sizeof corr[0]);
    }
}

/* The high panel of an A micro-panel of kp pairs (gemm_i16.h): entry (p, i) holds the high
 * bytes, sign bit flipped (= (x >> 8) + 128), of A[i][2p], A[i][2p+2], A[i][2p+1], A[i][2p+3]. */
static void fx_a_high(const fx_gemm_i16_kernel *kd, const int32_t *ap, int64_t kp, int mr,
                      int32_t *ahi)
{
    if (fx_simd_pack(kd) && kd->pack->a_high) {
        kd->pack->a_high(ap, kp, ahi);
        return;
    }
    for (int64_t p = 0; p < kp; p++)
        for (int i = 0; i < mr; i++) {
            const uint32_t x = (uint32_t)ap[p * mr + i];
            const uint32_t y = p + 1 < kp ? (uint32_t)ap[(p + 1) * mr + i] : 0u;
            /* bytes 1, 3 of x to bytes 0, 2; bytes 1, 3 of y stay */
            const uint32_t w = ((x >> 8) & 0x00FF00FFu) | (y & 0xFF00FF00u);
            ahi[p * mr + i] = (int32_t)(w ^ 0x80808080u);
        }
}

static void fx_panel_norms(const int32_t *ap, int64_t kp, int mr, int32_t *na);

/* Pack an m x kc block of A (m <= mr valid rows) into one micro-panel of mr rows, and write
 * na[s] = ceil(sqrt(max_i sum_{k in segment s} A[i][k]^2)) for its segments. */
static void fx_pack_a(const fx_gemm_i16_kernel *kd, const int16_t *a, int64_t sam, int64_t sak,
                      int64_t kc, int64_t m, int mr, int32_t *ap, int32_t *na /* NULL: no norms */)
{
    const int64_t kp = (kc + 1) / 2;
    if (fx_simd_pack(kd) && kd->pack->pack_a && m == mr && sak == 1) {
        int64_t sq[FX_GEMM_I16_MAX_SEGS];
        kd->pack->pack_a(a, sam, kc, ap, na ? sq : NULL);
        for (int64_t s = 0; na && s * FX_GEMM_I16_SEG < kp; s++)
            na[s] = (int32_t)fx_ceil_sqrt(sq[s]);
        return;
    }
    for (int64_t p = 0; p < kp; p++) {
        int32_t *dst = ap + p * mr;
        const int64_t k0 = 2 * p;
        const int has1 = k0 + 1 < kc;
        int64_t i = 0;
        for (; i < m; i++) {
            const int16_t *ai = a + i * sam + k0 * sak;
            const uint32_t lo = (uint16_t)ai[0], hi = has1 ? (uint16_t)ai[sak] : 0u;
            dst[i] = (int32_t)(lo | (hi << 16));
        }
        for (; i < mr; i++) dst[i] = 0;
    }
    if (na) fx_panel_norms(ap, kp, mr, na);
}

/* na[s] = ceil(sqrt(max_i sum_{k in segment s} A[i][k]^2)) of a packed A micro-panel. */
static void fx_panel_norms(const int32_t *ap, int64_t kp, int mr, int32_t *na)
{
    for (int64_t s = 0, p0 = 0; p0 < kp; s++, p0 += FX_GEMM_I16_SEG) {
        const int64_t p1 = fx_min64(kp, p0 + FX_GEMM_I16_SEG);
        int64_t sq[FX_GEMM_I16_MAX_MR] = {0}, mx = 0;
        for (int64_t p = p0; p < p1; p++)
            for (int i = 0; i < mr; i++) {
                const uint32_t w = (uint32_t)ap[p * mr + i];
                const int32_t lo = (int16_t)(uint16_t)(w & 0xFFFFu), hi = (int16_t)(uint16_t)(w >> 16);
                /* lo^2 + hi^2 <= 2^31 (two -32768): exact as uint32 */
                sq[i] += (int64_t)((uint32_t)(lo * lo) + (uint32_t)(hi * hi));
            }
        for (int i = 0; i < mr; i++) mx = sq[i] > mx ? sq[i] : mx;
        na[s] = (int32_t)fx_ceil_sqrt(mx);
    }
}

/* Chain length (pairs) the fast kernel may use on a tile, from the segment norms (see
 * gemm_i16.h): c whole segments with c * max_s na[s] nb[s] < 2^31; 0 when even one segment may
 * reach 2^31 (the tile takes the split kernel). */
static int64_t fx_fast_chain(const int32_t *na, const int32_t *nb, int64_t nseg, int64_t kp,
                             int64_t na_max, int64_t nb_max)
{
    /* every segment's bound na[s] nb[s] is at most na_max nb_max (the panels' largest norms,
     * each <= 2^17 + 1, so no overflow): when that already allows one chain, so does the exact
     * maximum below, and such tiles skip its loop (the driver's hottest on an AVX2 flex16_5
     * CNN epoch) */
    if (na_max * nb_max * nseg <= ((int64_t)1 << 31) - 1) return kp;
    /* four independent maxima: one running maximum is a chain of dependent compare-moves */
    int64_t t4[4] = {0, 0, 0, 0};
    int64_t s = 0;
    for (; s + 4 <= nseg; s += 4)
        for (int u = 0; u < 4; u++) {
            const int64_t x = (int64_t)na[s + u] * nb[s + u]; /* each norm <= 2^17: fits */
            t4[u] = x > t4[u] ? x : t4[u];
        }
    for (; s < nseg; s++) {
        const int64_t x = (int64_t)na[s] * nb[s];
        t4[0] = x > t4[0] ? x : t4[0];
    }
    const int64_t t01 = t4[0] > t4[1] ? t4[0] : t4[1], t23 = t4[2] > t4[3] ? t4[2] : t4[3];
    const int64_t t = t01 > t23 ? t01 : t23;
    const int64_t lim = ((int64_t)1 << 31) - 1;
    if (t > lim) return 0;
    if (t * nseg <= lim) return kp; /* one chain (t < 2^31, nseg <= 24: no overflow) */
    return fx_min64(kp, lim / t * FX_GEMM_I16_SEG);
}

/* The largest of n segment norms. */
static int64_t fx_norm_max(const int32_t *nrm, int64_t n)
{
    int32_t m = 0;
    for (int64_t s = 0; s < n; s++) m = nrm[s] > m ? nrm[s] : m;
    return m;
}

/* int16 units of one pre-packed B micro-panel of kp pairs in the given layout */
static int64_t fx_b_panel_numel(int64_t kp, int nr, int layout)
{
    return layout == FX_GEMM_I16_B_WRAP ? fx_gemm_i16_wrap_panel_numel(kp, nr) : kp * 4 * nr;
}

static int fx_b_layout_known(int layout)
{
    return layout == FX_GEMM_I16_B_SPLIT || layout == FX_GEMM_I16_B_WRAP;
}

/* Where panel j of the K block starting at pc (kp pairs) lies in a pre-split B of np panels per
 * block (gemm_i16.h): every block before it is a full one of FX_GEMM_KC values. */
static int64_t fx_b_pre_offset(int64_t pc, int64_t j, int64_t kp, int64_t np, int nr, int layout)
{
    return pc / FX_GEMM_KC * np * fx_b_panel_numel(FX_GEMM_KC / 2, nr, layout) +
           j * fx_b_panel_numel(kp, nr, layout);
}

int64_t fx_gemm_i16_split_b_numel(int64_t K, int64_t N, int nr, int layout)
{
    const int64_t np = (N + nr - 1) / nr, full = K / FX_GEMM_KC, rest = K % FX_GEMM_KC;
    return np * (full * fx_b_panel_numel(FX_GEMM_KC / 2, nr, layout) +
                 (rest ? fx_b_panel_numel((rest + 1) / 2, nr, layout) : 0));
}

int fx_gemm_i16_split_b(const int16_t *b, int64_t sbk, int64_t sbn, int64_t K, int64_t N, int nr,
                        int layout, int16_t *out)
{
    static const fx_gemm_i16_kernel portable = {0}; /* pack NULL: the portable loops */
    if (nr < 1 || nr > FX_GEMM_I16_MAX_NR || K < 0 || N < 0 || !fx_b_layout_known(layout))
        return FX_EUNSUPPORTED; /* the builders' scratch holds at most FX_GEMM_I16_MAX_NR */
    const int64_t np = (N + nr - 1) / nr;
    int16_t *plain = malloc((size_t)(FX_GEMM_KC * nr) * sizeof *plain); /* one plain panel */
    if (!plain) return FX_ENOMEM;
    for (int64_t pc = 0; pc < K; pc += FX_GEMM_KC) {
        const int64_t kcur = fx_min64(FX_GEMM_KC, K - pc), kp = (kcur + 1) / 2;
        for (int64_t j = 0; j < np; j++) {
            int16_t *dst = out + fx_b_pre_offset(pc, j, kp, np, nr, layout);
            fx_pack_b(&portable, b + pc * sbk + j * nr * sbn, sbk, sbn, kcur,
                      fx_min64(nr, N - j * nr), nr, plain, NULL);
            if (layout == FX_GEMM_I16_B_WRAP)
                fx_wrap_panel(&portable, plain, kp, nr, dst);
            else
                fx_split_panel(&portable, plain, kp, nr, dst);
        }
    }
    free(plain);
    return FX_OK;
}

static _Atomic int g_mode = FX_GEMM_I16_AUTO;
static _Atomic int g_forced = FX_GEMM_I16_KERNEL_AUTO; /* fx_gemm_i16_force_kernel */

static const char *const fx_i16_kernel_names[FX_GEMM_I16_KERNELS] = {"auto", "split", "wrap",
                                                                      "fast"};

const char *fx_gemm_i16_kernel_name(int kernel)
{
    return kernel >= 0 && kernel < FX_GEMM_I16_KERNELS ? fx_i16_kernel_names[kernel] : NULL;
}

int fx_gemm_i16_kernel_parse(const char *name)
{
    for (int i = 0; name && i < FX_GEMM_I16_KERNELS; i++)
        if (strcmp(name, fx_i16_kernel_names[i]) == 0) return i;
    return -1;
}

int fx_gemm_i16_force_kernel(int kernel)
{
    if (kernel < 0 || kernel >= FX_GEMM_I16_KERNELS) return FX_EINVAL;
    g_forced = kernel;
    return FX_OK;
}

int fx_gemm_i16_forced_kernel(void) { return g_forced; }

int fx_gemm_i16_wrap_pays(int64_t K)
{
    const int forced = g_forced;
    if (forced == FX_GEMM_I16_KERNEL_SPLIT) return 0;
    if (forced == FX_GEMM_I16_KERNEL_WRAP) return 1;
    const int64_t kc = K < FX_GEMM_I16_KC ? K : FX_GEMM_I16_KC;
    return (kc + 1) / 2 >= FX_GEMM_I16_WRAP_MIN_KP;
}
static _Atomic int64_t g_fast_tiles, g_split_tiles;

void fx_gemm_i16_set_mode(int mode) { g_mode = mode; }

void fx_gemm_i16_tile_counts(int64_t *fast, int64_t *split)
{
    *fast = g_fast_tiles;
    *split = g_split_tiles;
}

void fx_gemm_i16_reset_tile_counts(void)
{
    g_fast_tiles = 0;
    g_split_tiles = 0;
}

static void *fx_gemm_alloc(size_t bytes)
{
    bytes = (bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

int fx_gemm_i16(const fx_op_call *c, const fx_gemm_i16_kernel *kd)
{
    const int16_t *a = (const int16_t *)c->in[0].data, *b = (const int16_t *)c->in[1].data;
    const int64_t M = c->in[0].shape[0], K = c->in[0].shape[1], N = c->in[1].shape[1];
    const int64_t sam = c->in[0].strides[0], sak = c->in[0].strides[1];
    const int64_t sbk = c->in[1].strides[0], sbn = c->in[1].strides[1];
    int64_t *out = c->out_i64;
    const int mr = kd->mr, nr = kd->nr;
    if (mr < 1 || mr > FX_GEMM_I16_MAX_MR || nr < 1 || nr > FX_GEMM_I16_MAX_NR || !kd->ukr)
        return FX_EUNSUPPORTED;
    /* pre-packed A panels (a convolution's, backend.h): panel of row i0 at K block pc is at
     * a_panels + (i0 / mr) * kp_all * mr + (pc / 2) * mr (K blocks start at even k) */
    const int32_t *apan = (const int32_t *)c->a_panels;
    if (apan && c->a_panels_mr != mr) return FX_EUNSUPPORTED;
    if (apan && c->a_rows) return FX_EUNSUPPORTED; /* one source of A */
    const int16_t *bpre = c->b_split; /* pre-split B (fx_gemm_i16_split_b) */
    /* the any-data kernel: wrap (its own B layout, plus A high panels) or split; a pre-split B
     * names it by its layout */
    const int use_wrap = bpre ? c->b_split_layout == FX_GEMM_I16_B_WRAP
                              : kd->wrap != NULL && g_wrap_enabled && fx_gemm_i16_wrap_pays(K);
    const int blayout = use_wrap ? FX_GEMM_I16_B_WRAP : FX_GEMM_I16_B_SPLIT;
    if (bpre && (c->b_split_nr != nr || ((uintptr_t)bpre & 63) || !fx_b_layout_known(c->b_split_layout)))
        return FX_EUNSUPPORTED;
    if (use_wrap && !kd->wrap) return FX_EUNSUPPORTED; /* a level without the wrap kernel */
    const int64_t np_all = (N + nr - 1) / nr;
    const int64_t kp_all = (K + 1) / 2;
    /* a forced kernel (fx_gemm_i16_force_kernel) maps onto the test modes: split and wrap take
     * no norms, fast tests them everywhere */
    const int forced = g_forced;
    const int mode = forced == FX_GEMM_I16_KERNEL_SPLIT || forced == FX_GEMM_I16_KERNEL_WRAP
                         ? FX_GEMM_I16_SPLIT_ONLY
                     : forced == FX_GEMM_I16_KERNEL_FAST ? FX_GEMM_I16_NORM_ALWAYS
                                                         : g_mode;
    const int64_t min_m = kd->fast_min_m ? kd->fast_min_m : FX_GEMM_FAST_MIN_M;
    const int64_t min_n = kd->fast_min_n ? kd->fast_min_n : FX_GEMM_FAST_MIN_N;
    const int64_t min_kp = kd->fast_min_kp ? kd->fast_min_kp : FX_GEMM_FAST_MIN_KP;
    const int use_fast = kd->fast != NULL && !c->b_split && mode != FX_GEMM_I16_SPLIT_ONLY &&
                         (mode == FX_GEMM_I16_NORM_ALWAYS || M >= min_m);
    const int gated = mode != FX_GEMM_I16_NORM_ALWAYS;

    *c->out_exp = c->in[0].exp + c->in[1].exp;
    if (M == 0 || N == 0) return FX_OK;
    if (K == 0) {
        memset(out, 0, (size_t)(M * N) * sizeof *out);
        return FX_OK;
    }

    const int64_t kc = fx_min64(FX_GEMM_KC, K);
    const int64_t kp_max = (kc + 1) / 2;
    const int64_t nseg_max = (kp_max + FX_GEMM_I16_SEG - 1) / FX_GEMM_I16_SEG;
    int nt = c->nthreads;
    if (nt < 1 || M * N * K < FX_GEMM_PAR_MIN_MACS) nt = 1;
    int64_t mc = fx_min64(FX_GEMM_MC / mr * mr, (M + mr - 1) / mr * mr);
    /* threads split the row blocks: a product with fewer rows than nt blocks (a batch of 128,
     * the fully connected layers) gets smaller blocks, one per thread, instead of leaving all
     * but one thread idle */
    if (nt > 1 && (M + mc - 1) / mc < nt) mc = ((M + nt - 1) / nt + mr - 1) / mr * mr;
    const int64_t nc = fx_min64(FX_GEMM_NC / nr * nr, (N + nr - 1) / nr * nr);
    const int64_t nmb = (M + mc - 1) / mc;
    if (nt > nmb) nt = (int)nmb; /* threads split the row blocks */

    /* per thread: split (or wrap) B block (panels made on demand, each at most once per B
     * block; tags say which panel holds the current block), packed A block, its high panels
     * (wrap kernel; made on demand too, as tiles that all take the fast kernel need none), its
     * segment norms */
    const int64_t npan_max = nc / nr;
    /* pre-packed operands need no packing buffers of their own */
    const size_t bs_elems =
        bpre ? 0 : (size_t)(npan_max * fx_b_panel_numel(kp_max, nr, blayout));  /* int16 */
    const size_t a_elems = apan ? 0 : (size_t)(kp_max * mc);            /* int32 */
    const size_t ah_elems = use_wrap ? (size_t)(kp_max * mc) : 0;       /* int32 */
    const size_t na_elems = (size_t)(mc / mr * (nseg_max + 1));         /* int32 */
    const size_t tag_elems = (size_t)(npan_max + mc / mr);              /* int64 */
    /* A rows on demand (c->a_rows): one micro-panel's rows with the source's slack */
    const int64_t rows_ld = c->a_rows ? (2 * kp_max + 2 * FX_A_ROWS_SLACK + 31) / 32 * 32 : 0;
    const size_t rows_elems = (size_t)(mr * rows_ld);                   /* int16 */
    const size_t bs_bytes = (bs_elems * 2 + 63) / 64 * 64;
    const size_t t_stride = (bs_bytes + tag_elems * 8 + (a_elems + ah_elems + na_elems) * 4 +
                             rows_elems * 2 + 63) / 64 * 64;
    int16_t *bpack = fx_gemm_alloc(bpre ? 0 : (size_t)(kp_max * 2 * nc) * sizeof(int16_t));
    /* B segment norms, then each panel's largest */
    int32_t *bnorm = fx_gemm_alloc((size_t)(nc / nr * (nseg_max + 1)) * sizeof(int32_t));
    int32_t *bnorm_max = bnorm ? bnorm + nc / nr * nseg_max : NULL;
    unsigned char *tpack = fx_gemm_alloc(t_stride * (size_t)nt);
    if (!bpack || !bnorm || !tpack) {
        free(bpack);
        free(bnorm);
        free(tpack);
        return FX_ENOMEM;
    }
    int64_t fast_tiles = 0, split_tiles = 0;
    _Atomic int64_t probe_fast = 0; /* fast tiles of the first norm-tested K block (all threads) */

    FX_OMP(omp parallel num_threads(nt) if (nt > 1) reduction(+ : fast_tiles, split_tiles))
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        /* this thread's scratch: split B block (64-byte aligned), panel tags, A block, A norms */
        unsigned char *tbase = tpack + (size_t)tid * t_stride;
        int16_t *bsplit = (int16_t *)tbase;
        int64_t *split_tag = (int64_t *)(tbase + bs_bytes);
        int32_t *ap = (int32_t *)(split_tag + tag_elems);
        int32_t *ahi = ap + a_elems;
        int32_t *anorm = ahi + ah_elems;
        int32_t *anorm_max = anorm + mc / mr * nseg_max; /* per micro-panel: its largest */
        int16_t *arows = (int16_t *)(void *)(anorm + na_elems) + FX_A_ROWS_SLACK;
        int64_t block_id = 0; /* counts B blocks; split_tag[jp] == block_id: panel jp is split */
        int64_t *ahi_tag = split_tag + npan_max; /* == a_block: micro-panel's high panel made */
        int64_t a_block = 0;                     /* counts this thread's A blocks */
        int probed = !gated;  /* the probe block is behind us (no probe outside mode AUTO) */
        int norms_off = 0;    /* the probe found no fast tile: no more norms */
        memset(split_tag, 0, tag_elems * sizeof *split_tag);
        for (int64_t jc = 0; jc < N; jc += nc) {
            const int64_t ncur = fx_min64(nc, N - jc);
            const int64_t npan = (ncur + nr - 1) / nr;
            for (int64_t pc = 0; pc < K; pc += kc) {
                const int64_t kcur = fx_min64(kc, K - pc), kp = (kcur + 1) / 2;
                const int64_t bpanel = fx_b_panel_numel(kp, nr, blayout);
                const int64_t nseg = (kp + FX_GEMM_I16_SEG - 1) / FX_GEMM_I16_SEG;
                const int16_t *bblk = b + pc * sbk + jc * sbn;
                const int fast_ok = use_fast && !norms_off &&
                                    (!gated || (ncur >= min_n && kp >= min_kp));
                block_id++;

                if (!bpre) {
                    FX_OMP(omp for schedule(static))
                    for (int64_t jp = 0; jp < npan; jp++) {
                        fx_pack_b(kd, bblk + jp * nr * sbn, sbk, sbn, kcur,
                                  fx_min64(nr, ncur - jp * nr), nr, bpack + jp * kp * 2 * nr,
                                  fast_ok ? bnorm + jp * nseg : NULL);
                        if (fast_ok)
                            bnorm_max[jp] = (int32_t)fx_norm_max(bnorm + jp * nseg, nseg);
                    }
                    /* implicit barrier: the B block is complete before any thread reads it */
                }

                FX_OMP(omp for schedule(dynamic, 1))
                for (int64_t ib = 0; ib < nmb; ib++) {
                    const int64_t i0 = ib * mc, mcur = fx_min64(mc, M - i0);
                    int64_t block_fast = 0; /* this row block's fast tiles (the probe's count) */
                    const int32_t *ablk = apan ? apan + i0 * kp_all + pc / 2 * mr : ap;
                    const int64_t ald = apan ? kp_all : kp; /* pairs between two panels */
                    for (int64_t ir = 0; ir < mcur; ir += mr) {
                        const int m = (int)fx_min64(mr, mcur - ir);
                        if (c->a_rows) { /* gathered into L1, then packed as a strided A */
                            c->a_rows(c->a_rows_ctx, i0 + ir, m, pc, kcur, arows, rows_ld);
                            fx_pack_a(kd, arows, rows_ld, 1, kcur, m, mr, ap + ir * kp,
                                      fast_ok ? anorm + ir / mr * nseg : NULL);
                        } else if (!apan)
                            fx_pack_a(kd, a + (i0 + ir) * sam + pc * sak, sam, sak, kcur, m, mr,
                                      ap + ir * kp, fast_ok ? anorm + ir / mr * nseg : NULL);
                        else if (fast_ok)
                            fx_panel_norms(ablk + ir * ald, kp, mr, anorm + ir / mr * nseg);
                        if (fast_ok)
                            anorm_max[ir / mr] = (int32_t)fx_norm_max(anorm + ir / mr * nseg, nseg);
                    }
                    a_block++;
                    for (int64_t jp = 0; jp < npan; jp++) {
                        const int64_t j0 = jp * nr;
                        const int n = (int)fx_min64(nr, ncur - j0);
                        const int16_t *bp = bpack + jp * kp * 2 * nr;
                        int16_t *bsp = bsplit + jp * bpanel;
                        const int16_t *bpre_p =
                            bpre ? bpre + fx_b_pre_offset(pc, jc / nr + jp, kp, np_all, nr, blayout)
                                 : NULL;
                        for (int64_t ir = 0; ir < mcur; ir += mr) {
                            int64_t *ct = out + (i0 + ir) * N + jc + j0;
                            const int m = (int)fx_min64(mr, mcur - ir);
                            const int64_t chain =
                                fast_ok ? fx_fast_chain(anorm + ir / mr * nseg, bnorm + jp * nseg,
                                                         nseg, kp, anorm_max[ir / mr],
                                                         bnorm_max[jp])
                                         : 0;
                            if (chain > 0) {
                                kd->fast(kp, chain, ablk + ir * ald, bp, ct, N, m, n, pc > 0);
                                fast_tiles++;
                                block_fast++;
                            } else {
                                const int16_t *bany = bpre_p ? bpre_p : bsp;
                                if (!bpre_p && split_tag[jp] != block_id) {
                                    if (use_wrap)
                                        fx_wrap_panel(kd, bp, kp, nr, bsp);
                                    else
                                        fx_split_panel(kd, bp, kp, nr, bsp);
                                    split_tag[jp] = block_id;
                                }
                                if (use_wrap) {
                                    if (ahi_tag[ir / mr] != a_block) {
                                        fx_a_high(kd, ablk + ir * ald, kp, mr, ahi + ir * kp);
                                        ahi_tag[ir / mr] = a_block;
                                    }
                                    kd->wrap(kp, ablk + ir * ald, ahi + ir * kp, bany,
                                             ct, N, m, n, pc > 0);
                                } else
                                    kd->ukr(kp, ablk + ir * ald, bany, ct, N, m, n, pc > 0);
                                split_tiles++;
                            }
                        }
                    }
                    /* one atomic add per row block: per tile, the locked add cost 4 % of a
                     * CNN epoch on AVX2, where every one-block product is a probe */
                    if (!probed && block_fast) probe_fast += block_fast;
                }
                /* implicit barrier (this loop must never take nowait): nobody still reads
                 * the B block when it is repacked, and every thread's probe count is in, so
                 * that all threads reach the same norms_off, hence the same fast_ok, on which
                 * the B norms' being written depends */
                if (fast_ok && !probed) {
                    probed = 1;
                    norms_off = probe_fast == 0;
                }
            }
        }
    }
    g_fast_tiles += fast_tiles;
    g_split_tiles += split_tiles;
    free(bpack);
    free(bnorm);
    free(tpack);
    return FX_OK;
}
