/* Portable driver of the exact int16 GEMM (see gemm_i16.h for the exactness argument and the
 * packed layouts). BLIS-style loops:
 *   jc: column blocks of NC        (packed B blocks: KC x NC each, shared by the threads)
 *    pg: groups of up to KG K blocks of at most KC values each (at most FX_GEMM_I16_MAX_KP
 *        pairs: the int32 chains flush), all packed before their tiles run
 *     ic: row blocks of MC         (packed A blocks: MC x KC each, one set per thread; threads
 *                                   split ic)
 *      jr: B micro-panels
 *       pc: the group's K blocks in turn (a column of tiles' partial sums, MC x NR int64, is
 *           still in L2 when the next block adds to them)
 *        ir: micro-kernel tiles    (each B micro-panel is reused across the ir loop)
 * The group size is the level's (fx_gemm_i16_kernel.k_group; one block: BLIS's own loops).
 * Why the group: with the K blocks outermost, as BLIS runs them, every K block after the first
 * reads and writes the whole int64 stage again (8 bytes per output, three times on a 1024^3
 * product).
 * On the Zen 5 (tensor_matmul, 1024^3 FLEX16_5, one thread, standard-normal operands) a product
 * that followed an fp32 one ran at 305-332 GOP/s with K blocks outermost, where the stage had
 * left the caches, and 370-400 when it followed itself; in groups 376-379 and 391-396. In
 * bench_gemm's alternation with the other formats and the peers, 2048^3 went from 285-290 to
 * 361-371 GOP/s (53-55 % to 69-71 % of the vpdpwssd limit).
 * Packing also computes the segment norms of every A micro-panel and B micro-panel; from them
 * each (tile, K block) takes the fast kernel with the longest chain the norms prove safe, or the
 * split kernel (its split B panel is made from the plain one by the thread that needs it, at
 * most once per thread and B block).
 * Each output element belongs to exactly one (ic, jr, ir) tile and receives the exact partial
 * sums of its K blocks in order, so the result is the exact int64 sum for any thread count.
 * fx_gemm_i16 is three steps (at the end of this file): fx_gemm_plan_make decides the route,
 * blocking and threads; fx_gemm_pack_b_block and fx_gemm_pack_a_block pack the operands with
 * their norms; fx_gemm_run_tiles calls the micro-kernels, which write the int64 stage (or, with
 * a rounding, fx_op_call.out_i16, a buffer of one column of tiles that is rounded as soon as it
 * is done) and, on the last K block, take its maximum for the write path (fx_op_call.out_imax).
 */
#include "gemm_i16.h"
#include "flex_kernels.h" /* fx_q64_fast_ok */
#include "../core/internal.h"

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
#define FX_GEMM_KG FX_GEMM_I16_KG /* K blocks per group, at most (fx_gemm_i16_kernel.k_group) */

/* Default size gates of the fast kernel (mode AUTO; a level may set its own in
 * fx_gemm_i16_kernel): it is tried only when M >= FX_GEMM_FAST_MIN_M, the B block has >=
 * FX_GEMM_FAST_MIN_N columns and the K block >= FX_GEMM_FAST_MIN_KP pairs. The norms cost a
 * pass over every packed A element (paid back in proportion to N) and B element (in proportion
 * to M); the fast kernel's folds and widening are paid back in proportion to K. With the fast
 * kernels' K loops in asm (folds in registers) the norms pay on every product of at least 16
 * pairs per K block. Measured on a Zen 4 (AVX-512 VNNI) with bench_gemm_i16 on Gaussian data,
 * one thread, against gates of 512 rows, 256 columns and 64 pairs: the CNN's conv2 forward
 * 85 -> 100-102 GOP/s, its weight gradient 100 -> 129-136, its input gradient (K = 64) 63 ->
 * 73-81, fc1 (M = 128) 118 -> 139-150, 256^3 119 -> 179-180; on full-range data, where no tile
 * passes, 0-4 % slower. Products with fewer pairs per K block take the norm test too: with the
 * SIMD packing a gate of 16 pairs only cost time on Gaussian data (tensor_matmul, one thread,
 * 32 x 100352 x K: K = 12 28.9 -> 34.3 GOP/s, K = 16 33.2 -> 39.6, K = 25 41.2 -> 54.0; the
 * CNN's conv1 in bench_gemm 37-41 -> 48-50), against 0-10 % on full-range data, where the one
 * K block leaves the probe below nothing to save (docs/performance.md). The AVX2 level keeps a
 * gate of 16 pairs (intops_avx2.c): on the AVX2 EPYC its training lost without it. */
/* Besides, in mode AUTO the first group of K blocks whose tiles took the norm test (one block
 * on levels without groups) is a probe: when not one of its (tile, K block) steps passed
 * (full-range data, as in bench_gemm), the remaining groups skip the norms, which would only
 * cost time (measured 3-5 % of a 1024^3 product). The probe counts steps over all threads, so
 * the choice does not depend on the thread count; either way every result is exact. */
#define FX_GEMM_FAST_MIN_M 1
#define FX_GEMM_FAST_MIN_N 1
#define FX_GEMM_FAST_MIN_KP 1

/* Below this many multiply-adds one thread does the work (thread start-up would dominate). */
#define FX_GEMM_PAR_MIN_MACS ((int64_t)1 << 21)
/* columns per thread from which the threads take slices of the columns rather than row blocks
 * (fx_gemm_i16_columns) */
#define FX_GEMM_COLUMNS_MIN_N 512

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

/* Test and benchmark switch (fx_gemm_i16_set_pack_runs): 0 packs a row-major B's panels one
 * call each, as before pack_b_run; the same bytes either way. */
static _Atomic int g_pack_runs = 1;

void fx_gemm_i16_set_pack_runs(int on) { g_pack_runs = on != 0; }

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

/* n[s] = ceil(sqrt(sq[s])) for the segments of kp pairs: the norms from a SIMD hook's exact
 * sums of squares */
static void fx_segment_norms(const int64_t *sq, int64_t kp, int32_t *n)
{
    for (int64_t s = 0; s * FX_GEMM_I16_SEG < kp; s++) n[s] = (int32_t)fx_ceil_sqrt(sq[s]);
}

/* Pack a kc x n block of B (n <= nr valid columns) into one plain micro-panel of nr columns,
 * and write nb[s] = ceil(sqrt(max_j sum_{k in segment s} B[k][j]^2)) for its segments. A full
 * panel of a B with contiguous columns takes the level's SIMD loop; a row-major B's full panels
 * are packed by segments across panels instead (fx_gemm_pack_b_rows). */
static void fx_pack_b(const fx_gemm_i16_kernel *kd, const int16_t *b, int64_t sbk, int64_t sbn,
                      int64_t kc, int64_t n, int nr, int16_t *bp, int32_t *nb /* NULL: no norms */)
{
    const int64_t kp = (kc + 1) / 2;
    if (fx_simd_pack(kd) && n == nr && sbk == 1 && kd->pack->pack_bt) {
        int64_t sq[FX_GEMM_I16_MAX_SEGS];
        kd->pack->pack_bt(b, sbn, kc, bp, nb ? sq : NULL);
        if (nb) fx_segment_norms(sq, kp, nb);
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

static void fx_panel_norms(const fx_gemm_i16_kernel *kd, const int32_t *ap, int64_t kp, int mr,
                           int32_t *na);

/* Pack an m x kc block of A (m <= mr valid rows) into one micro-panel of mr rows, and write
 * na[s] = ceil(sqrt(max_i sum_{k in segment s} A[i][k]^2)) for its segments. */
static void fx_pack_a(const fx_gemm_i16_kernel *kd, const int16_t *a, int64_t sam, int64_t sak,
                      int64_t kc, int64_t m, int mr, int32_t *ap, int32_t *na /* NULL: no norms */)
{
    const int64_t kp = (kc + 1) / 2;
    if (fx_simd_pack(kd) && kd->pack->pack_a && m == mr && sak == 1) {
        int64_t sq[FX_GEMM_I16_MAX_SEGS];
        kd->pack->pack_a(a, sam, kc, ap, na ? sq : NULL);
        if (na) fx_segment_norms(sq, kp, na);
        return;
    }
    if (fx_simd_pack(kd) && kd->pack->pack_at && m == mr && sam == 1) {
        kd->pack->pack_at(a, sak, kc, ap);
        if (na) fx_panel_norms(kd, ap, kp, mr, na);
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
    if (na) fx_panel_norms(kd, ap, kp, mr, na);
}

/* na[s] = ceil(sqrt(max_i sum_{k in segment s} A[i][k]^2)) of a packed A micro-panel. */
static void fx_panel_norms(const fx_gemm_i16_kernel *kd, const int32_t *ap, int64_t kp, int mr,
                           int32_t *na)
{
    int64_t s = 0, p0 = 0;
    if (fx_simd_pack(kd) && kd->pack->norms_a && mr == kd->mr) { /* whole segments */
        s = kp / FX_GEMM_I16_SEG;
        p0 = s * FX_GEMM_I16_SEG;
        kd->pack->norms_a(ap, p0, na);
    }
    for (; p0 < kp; s++, p0 += FX_GEMM_I16_SEG) { /* the rest (all of it without the hook) */
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

/* The largest na[s] nb[s], s < n (the portable norm_prod_max of fx_gemm_i16_pack): four
 * independent maxima, since one running maximum is a chain of dependent compare-moves */
static int64_t fx_norm_prod_max(const int32_t *na, const int32_t *nb, int64_t n)
{
    int64_t t4[4] = {0, 0, 0, 0};
    int64_t s = 0;
    for (; s + 4 <= n; s += 4)
        for (int u = 0; u < 4; u++) {
            const int64_t x = (int64_t)na[s + u] * nb[s + u]; /* each norm <= 2^17 + 1: fits */
            t4[u] = x > t4[u] ? x : t4[u];
        }
    for (; s < n; s++) {
        const int64_t x = (int64_t)na[s] * nb[s];
        t4[0] = x > t4[0] ? x : t4[0];
    }
    const int64_t t01 = t4[0] > t4[1] ? t4[0] : t4[1], t23 = t4[2] > t4[3] ? t4[2] : t4[3];
    return t01 > t23 ? t01 : t23;
}

/* Chain length (pairs) the fast kernel may use on a tile, from the segment norms (see
 * gemm_i16.h): c whole segments with c * max_s na[s] nb[s] <= FX_GEMM_I16_CHAIN_MAX; 0 when even
 * one segment may exceed it (the tile takes the split kernel). */
static int64_t fx_fast_chain(const fx_gemm_i16_kernel *kd, const int32_t *na, const int32_t *nb,
                             int64_t nseg, int64_t kp, int64_t na_max, int64_t nb_max)
{
    /* every segment's bound na[s] nb[s] is at most na_max nb_max (the panels' largest norms,
     * each <= 2^17 + 1, so no overflow): when that already allows one chain, so does the exact
     * maximum below, and such tiles skip its loop (the driver's hottest on an AVX2 flex16_5
     * CNN epoch) */
    if (na_max * nb_max * nseg <= FX_GEMM_I16_CHAIN_MAX) return kp;
    /* and one segment whose bound alone leaves int32 rules the fast kernel out: on full-range
     * data the first does, and the whole scan below is skipped */
    if ((int64_t)na[0] * nb[0] > FX_GEMM_I16_CHAIN_MAX) return 0;
    const int64_t t = fx_simd_pack(kd) && kd->pack->norm_prod_max
                          ? kd->pack->norm_prod_max(na, nb, nseg)
                          : fx_norm_prod_max(na, nb, nseg);
    const int64_t lim = FX_GEMM_I16_CHAIN_MAX;
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

/* int16 units of one split or wrap B micro-panel of kp pairs in the given layout */
static int64_t fx_b_panel_numel(int64_t kp, int nr, int layout)
{
    return layout == FX_GEMM_I16_B_WRAP ? fx_gemm_i16_wrap_panel_numel(kp, nr) : kp * 4 * nr;
}

static _Atomic int g_mode = FX_GEMM_I16_AUTO;
static _Atomic int g_forced = FX_GEMM_I16_KERNEL_AUTO; /* fx_gemm_i16_force_kernel */

static const char *const fx_i16_kernel_names[FX_GEMM_I16_KERNELS] = {"auto", "split", "wrap",
                                                                      "fast", "amx"};
static _Atomic int g_amx_auto; /* fx_gemm_i16_set_amx_auto */
static _Atomic int g_tiles_round = 1; /* fx_gemm_i16_tiles_round_set_enabled */

void fx_gemm_i16_tiles_round_set_enabled(int on) { g_tiles_round = on != 0; }

void fx_gemm_i16_set_amx_auto(int on) { g_amx_auto = on != 0; }

int fx_gemm_i16_amx_auto(void) { return g_amx_auto; }

int fx_gemm_i16_amx_on(void)
{
    const int forced = g_forced;
    return forced == FX_GEMM_I16_KERNEL_AMX || (forced == FX_GEMM_I16_KERNEL_AUTO && g_amx_auto);
}

int fx_gemm_i16_amx_round_shape(int64_t M, int64_t K, int64_t N)
{
    return M >= 16 && N >= 16 && K >= FX_GEMM_I16_AMX_ROUND_MIN_K &&
           K <= FX_GEMM_I16_AMX_ROUND_MAX_K;
}

int fx_gemm_i16_amx_rounds(int64_t M, int64_t K, int64_t N)
{
    return fx_gemm_i16_amx_on() && fx_gemm_i16_amx_round_shape(M, K, N);
}

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

/* K blocks per group of kernel kd's products: its k_group, 1 to FX_GEMM_KG */
static int fx_gemm_kg_level(const fx_gemm_i16_kernel *kd)
{
    return kd->k_group < 1 ? 1 : kd->k_group > FX_GEMM_KG ? FX_GEMM_KG : kd->k_group;
}

int fx_gemm_i16_rounds(const fx_gemm_i16_kernel *kd, int64_t K)
{
    return kd->round != NULL && K >= 1 && K <= (int64_t)fx_gemm_kg_level(kd) * FX_GEMM_KC;
}

int fx_gemm_i16_narrow(int64_t N)
{
    const int forced = g_forced;
    return N >= 1 && N <= FX_GEMM_I16_NARROW_N && forced != FX_GEMM_I16_KERNEL_WRAP &&
           forced != FX_GEMM_I16_KERNEL_FAST;
}

/* since the process started (flexpoint_gemm_i16_stats): never reset; the tests' tile counts
 * are the tiles since their last reset, which records where the totals stood */
static _Atomic int64_t g_fast_tiles, g_split_tiles, g_fast_pairs, g_split_pairs, g_fast_chains;
static _Atomic int64_t g_fast_tiles_reset, g_split_tiles_reset;
static _Atomic int64_t g_rounded_tiles; /* tiles that rounded their own sums (fast_round) */
static _Atomic int g_a_in_place = 1;        /* fx_gemm_i16_a_in_place_set_enabled */
static _Atomic int64_t g_a_in_place_tiles;  /* fast steps that read A in place */

void fx_gemm_i16_a_in_place_set_enabled(int on) { g_a_in_place = on != 0; }

int64_t fx_gemm_i16_a_in_place_tiles(void) { return g_a_in_place_tiles; }

int64_t fx_gemm_i16_rounded_tiles(void) { return g_rounded_tiles; }

void fx_gemm_i16_set_mode(int mode) { g_mode = mode; }

void fx_gemm_i16_tile_counts(int64_t *fast, int64_t *split)
{
    *fast = g_fast_tiles - g_fast_tiles_reset;
    *split = g_split_tiles - g_split_tiles_reset;
}

void fx_gemm_i16_reset_tile_counts(void)
{
    g_fast_tiles_reset = g_fast_tiles;
    g_split_tiles_reset = g_split_tiles;
}

int flexpoint_gemm_i16_stats(flexpoint_gemm_i16_stats_t *st)
{
    if (!st) return FX_FAIL(FX_EINVAL, "st is NULL");
    st->fast_tiles = g_fast_tiles;
    st->anydata_tiles = g_split_tiles;
    st->fast_pairs = g_fast_pairs;
    st->anydata_pairs = g_split_pairs;
    st->fast_chains = g_fast_chains;
    return FX_OK;
}

/* ---- the driver: plan, pack, run ----------------------------------------------------------- */

/* Everything one product decides before it touches data (fx_gemm_plan): its operands and what
 * of them comes pre-packed, the kernel route, the blocking, the thread count, the layout of each
 * thread's scratch, and the int64 stage it writes. Read-only once made, shared by the threads. */
typedef struct fx_gemm_plan {
    const fx_gemm_i16_kernel *kd;
    int mr, nr;
    /* operands: A [M,K] (strides sam, sak) and B [K,N] (sbk, sbn), int16 mantissas */
    const int16_t *a, *b;
    int64_t M, K, N, sam, sak, sbk, sbn;
    /* what is pre-packed: A panels over the whole K (kp_all pairs each; a convolution's), A
     * rows on demand (each NULL when absent) */
    const int32_t *apan;
    void (*a_rows)(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int16_t *dst,
                   int64_t ld);
    const void *a_rows_ctx;
    int64_t kp_all;
    /* route: the any-data kernel (wrap, in layout blayout, or split), whether the fast kernel
     * is tried (use_fast), whether its size gates apply (gated) and what they are */
    int use_wrap, blayout, use_fast, gated;
    int64_t min_n, min_kp;
    /* blocking and threads: K blocks of kc values (kp_max pairs, nseg_max norm segments), row
     * blocks of mc (nmb of them, split over nt threads), column blocks of nc (npan_max panels) */
    int64_t kc, kp_max, nseg_max, mc, nc, nmb, npan_max;
    int kg; /* K blocks per group (the last group may hold fewer) */
    int nt;
    /* one thread's scratch, t_stride bytes (fx_gemm_thread_init): per K block of a group
     * (slot_stride bytes each) split or wrap B block, panel tags, A block, A high panels, A
     * norms; then, with a rounding, the column of tiles' sums (col_elems); then the A rows */
    size_t bs_elems, a_elems, ah_elems, na_elems, tag_elems, rows_elems, bs_bytes, slot_stride,
        t_stride;
    /* the shared B blocks of a group: kg of each, these many elements apart */
    size_t bpack_elems, bnorm_elems;
    int64_t rows_ld;
    /* the stage: out [M,N] row-major, rows ldo apart (N, or the whole product's N where this
     * plan is one thread's columns of it); want_max: report max |out| (fx_op_call.out_imax) */
    int64_t ldo;
    int64_t *out;
    int want_max;
    /* or, with a rounding (fx_gemm_i16_rounds), no stage: out16 [M,N] row-major gets the sums
     * rounded at 2^shift, each column of tiles from a per-thread buffer of col_elems sums */
    int16_t *out16;
    int shift;
    size_t col_elems;
    /* with out16 and one K block: the fast tiles round their own sums (kd->fast_round) */
    int tiles_round;
    /* A's full micro-panels are read in place by the fast tiles on K blocks that take the
     * norm test (a unit-stride A of even K, kd->fast_rows): their norms come from the rows,
     * and a panel is packed only when one of its tiles takes the any-data kernel */
    int a_in_place;
} fx_gemm_plan;

/* Choose the route, blocking and threads of a product (the call's operands are checked here;
 * FX_EUNSUPPORTED for what the level cannot run). Why each choice:
 *  - the any-data kernel is wrap where the level has it and it pays for this K, else split:
 *    both give every tile an exact result;
 *  - the fast kernel is tried (norms computed while packing) unless a kernel is forced that
 *    takes no norms or, in mode AUTO, the product has fewer rows than the level's gate: norms
 *    are paid back only by enough fast tiles;
 *  - K blocks of at most FX_GEMM_KC values keep every int32 chain exact (gemm_i16.h); row
 *    blocks of FX_GEMM_MC rows and column blocks of FX_GEMM_NC columns keep the packed A block
 *    in L2 and the B block in L3;
 *  - threads split the row blocks, and only on products large enough to pay for starting them;
 *    a product with fewer row blocks than threads gets smaller blocks, one per thread (a
 *    product of FX_GEMM_COLUMNS_MIN_N columns a thread or more gives each thread a slice of
 *    the columns instead, as a one-thread product: fx_gemm_i16_columns). */
static int fx_gemm_plan_make(const fx_op_call *c, const fx_gemm_i16_kernel *kd, int64_t ldo,
                             fx_gemm_plan *pl)
{
    memset(pl, 0, sizeof *pl);
    pl->kd = kd;
    pl->mr = kd->mr;
    pl->nr = kd->nr;
    const int mr = kd->mr, nr = kd->nr;
    if (mr < 1 || mr > FX_GEMM_I16_MAX_MR || nr < 1 || nr > FX_GEMM_I16_MAX_NR || !kd->ukr)
        return FX_EUNSUPPORTED;
    pl->a = (const int16_t *)c->in[0].data;
    pl->b = (const int16_t *)c->in[1].data;
    pl->M = c->in[0].shape[0];
    pl->K = c->in[0].shape[1];
    pl->N = c->in[1].shape[1];
    pl->ldo = ldo > 0 ? ldo : pl->N;
    pl->sam = c->in[0].strides[0];
    pl->sak = c->in[0].strides[1];
    pl->sbk = c->in[1].strides[0];
    pl->sbn = c->in[1].strides[1];
    const int64_t M = pl->M, K = pl->K, N = pl->N;
    /* pre-packed A panels (a convolution's, backend.h): panel of row i0 at K block pc is at
     * apan + (i0 / mr) * kp_all * mr + (pc / 2) * mr (K blocks start at even k) */
    pl->apan = (const int32_t *)c->a_panels;
    if (pl->apan && c->a_panels_mr != mr) return FX_EUNSUPPORTED;
    if (pl->apan && c->a_rows) return FX_EUNSUPPORTED; /* one source of A */
    pl->a_rows = c->a_rows;
    pl->a_rows_ctx = c->a_rows_ctx;
    pl->use_wrap = kd->wrap != NULL && g_wrap_enabled && fx_gemm_i16_wrap_pays(K);
    pl->blayout = pl->use_wrap ? FX_GEMM_I16_B_WRAP : FX_GEMM_I16_B_SPLIT;
    pl->kp_all = (K + 1) / 2;
    /* a forced kernel (fx_gemm_i16_force_kernel) maps onto the test modes: split and wrap take
     * no norms, fast tests them everywhere */
    const int forced = g_forced;
    const int mode = forced == FX_GEMM_I16_KERNEL_SPLIT || forced == FX_GEMM_I16_KERNEL_WRAP
                         ? FX_GEMM_I16_SPLIT_ONLY
                     : forced == FX_GEMM_I16_KERNEL_FAST ? FX_GEMM_I16_NORM_ALWAYS
                                                         : g_mode;
    const int64_t min_m = kd->fast_min_m ? kd->fast_min_m : FX_GEMM_FAST_MIN_M;
    pl->min_n = kd->fast_min_n ? kd->fast_min_n : FX_GEMM_FAST_MIN_N;
    pl->min_kp = kd->fast_min_kp ? kd->fast_min_kp : FX_GEMM_FAST_MIN_KP;
    pl->use_fast = kd->fast != NULL && mode != FX_GEMM_I16_SPLIT_ONLY &&
                   (mode == FX_GEMM_I16_NORM_ALWAYS || M >= min_m);
    pl->gated = mode != FX_GEMM_I16_NORM_ALWAYS;
    pl->out = c->out_i64;
    pl->want_max = c->out_imax != NULL && c->out_imax_known != NULL;
    pl->out16 = c->out_i16;
    pl->shift = c->out_i16_shift;
    /* the caller asked fx_gemm_i16_rounds: anything else is a library bug, which must not
     * reach the kernels (out_i64 is NULL) */
    if (pl->out16 && (!fx_gemm_i16_rounds(kd, K) || !fx_q64_fast_ok(pl->shift) ||
                      !pl->want_max || !c->out_i16_underflow))
        return fx_error(FX_EUNSUPPORTED, "matmul", "the register tiles cannot round a %lld x "
                        "%lld x %lld product at shift %d", (long long)M, (long long)K,
                        (long long)N, pl->shift);
    if (M == 0 || N == 0 || K == 0) return FX_OK; /* no blocks: fx_gemm_i16 writes the zeros */

    pl->kc = fx_min64(FX_GEMM_KC, K);
    if (kd->equal_k_blocks && K > FX_GEMM_KC) {
        /* every block costs one pass over the int64 stage and the packing's per-block work,
         * which a short last block pays for few products (K = 800, the CNN's conv2 forward:
         * 272 + 272 + 256 instead of 384 + 384 + 32; its input gradient's K = 1600: 5 x 320
         * instead of 4 x 384 + 64). */
        const int64_t nblocks = (K + FX_GEMM_KC - 1) / FX_GEMM_KC, seg = 2 * FX_GEMM_I16_SEG;
        pl->kc = fx_min64(FX_GEMM_KC, ((K + nblocks - 1) / nblocks + seg - 1) / seg * seg);
    }
    pl->kp_max = (pl->kc + 1) / 2;
    pl->nseg_max = (pl->kp_max + FX_GEMM_I16_SEG - 1) / FX_GEMM_I16_SEG;
    pl->kg = (int)fx_min64(fx_gemm_kg_level(kd), (K + pl->kc - 1) / pl->kc);
    /* a rounding needs the whole K in the one group (fx_gemm_i16_rounds said so) */
    if (pl->out16 && (int64_t)pl->kg * pl->kc < K) return FX_EUNSUPPORTED;
    pl->tiles_round = pl->out16 && kd->fast_round && K <= pl->kc &&
                      pl->shift <= FX_GEMM_I16_ROUND_MAX_SHIFT && g_tiles_round;
    /* even K: every K block (kc is even) then holds whole pairs, so no row is read past its
     * end (an odd K's last pair is packed with a zero high half); one column of tiles: each
     * packed micro-panel would serve one tile only (FX_GEMM_I16_A_IN_PLACE_MAX_N) */
    pl->a_in_place = g_a_in_place && pl->use_fast && !pl->apan && !pl->a_rows && pl->sak == 1 &&
                     K % 2 == 0 && N <= FX_GEMM_I16_A_IN_PLACE_MAX_N && kd->fast_rows &&
                     (!pl->tiles_round || kd->fast_round_rows) && fx_simd_pack(kd) &&
                     kd->pack->norms_rows;
    int nt = c->nthreads;
    if (nt < 1 || M * N * K < FX_GEMM_PAR_MIN_MACS) nt = 1;
    int64_t mc = fx_min64(FX_GEMM_MC / mr * mr, (M + mr - 1) / mr * mr);
    if (nt > 1 && (M + mc - 1) / mc < nt) mc = ((M + nt - 1) / nt + mr - 1) / mr * mr;
    pl->mc = mc;
    pl->nmb = (M + mc - 1) / mc;
    if (nt > pl->nmb) nt = (int)pl->nmb; /* threads split the row blocks */
    /* Where each thread runs several row blocks over one B group, the group's blocks together
     * take the columns one block did, so that the group stays in cache from one row block to
     * the next: 1024^3 and 2048^3 on full-range data 6-9 % faster than with 2048 columns
     * (AVX-512, Zen 5). A product of one row block per thread (the weight gradients' 64 x 800
     * x 25088, 64 x 576 x 8192) reads its B group once, and lost 7-8 % to the extra column
     * blocks. */
    const int64_t ncol = pl->nmb >= 2 * (int64_t)nt ? FX_GEMM_NC / pl->kg : FX_GEMM_NC;
    pl->nc = fx_min64(ncol / nr * nr, (N + nr - 1) / nr * nr);
    pl->nt = nt;

    /* per thread: split (or wrap) B block (panels made on demand, each at most once per B
     * block; tags say which panel holds the current block), packed A block, its high panels
     * (wrap kernel; made on demand too, as tiles that all take the fast kernel need none), its
     * segment norms; pre-packed operands need no packing buffers of their own */
    pl->npan_max = pl->nc / nr;
    pl->bs_elems = (size_t)(pl->npan_max * fx_b_panel_numel(pl->kp_max, nr, pl->blayout));
    pl->a_elems = pl->apan ? 0 : (size_t)(pl->kp_max * mc);                     /* int32 */
    pl->ah_elems = pl->use_wrap ? (size_t)(pl->kp_max * mc) : 0;                /* int32 */
    pl->na_elems = (size_t)(mc / mr * (pl->nseg_max + 1));                      /* int32 */
    pl->tag_elems = (size_t)(pl->npan_max + 2 * (mc / mr));                     /* int64 */
    /* A rows on demand: one micro-panel's rows with the source's slack */
    pl->rows_ld = pl->a_rows ? (2 * pl->kp_max + 2 * FX_A_ROWS_SLACK + 31) / 32 * 32 : 0;
    pl->rows_elems = (size_t)(mr * pl->rows_ld);                                /* int16 */
    pl->bs_bytes = (pl->bs_elems * 2 + 63) / 64 * 64;
    pl->slot_stride =
        (pl->bs_bytes + pl->tag_elems * 8 + (pl->a_elems + pl->ah_elems + pl->na_elems) * 4 + 63) /
        64 * 64;
    pl->col_elems = pl->out16 ? (size_t)(mc * nr) : 0; /* int64, a multiple of 8 */
    pl->t_stride = (pl->slot_stride * (size_t)pl->kg + pl->col_elems * 8 + pl->rows_elems * 2 +
                    63) / 64 * 64;
    pl->bpack_elems = (size_t)(pl->kp_max * 2 * pl->nc + 31) / 32 * 32; /* 64-byte multiples */
    pl->bnorm_elems = (size_t)(pl->nc / nr * (pl->nseg_max + 1));
    return FX_OK;
}

/* Buffers shared by the threads of one product: the packed plain B block with its segment
 * norms and each panel's largest norm, every thread's scratch, and the probe's count. */
typedef struct fx_gemm_shared {
    int16_t *bpack; /* the group's B blocks, pl->bpack_elems apart */
    int32_t *bnorm; /* their segment norms and panel maxima, pl->bnorm_elems apart */
    unsigned char *tpack;
    _Atomic int64_t probe_fast; /* fast steps of the first norm-tested group (all threads) */
} fx_gemm_shared;

/* One thread's buffers for one K block of a group (a slot). */
typedef struct fx_gemm_slot {
    int16_t *bsplit;          /* split or wrap B block, made panel by panel on demand */
    int64_t *split_tag;       /* == the block's id: panel jp of bsplit holds this B block */
    int64_t *ahi_tag;         /* == a_id: the micro-panel's high panel is made */
    int64_t *ap_tag;          /* == a_id: the micro-panel is packed (pl->a_in_place) */
    int32_t *ap, *ahi;        /* packed A block, its high panels (wrap kernel) */
    int32_t *anorm, *anorm_max; /* A segment norms, each micro-panel's largest */
    int64_t a_id;             /* the A block this slot holds (th->a_block when packed) */
} fx_gemm_slot;

/* One thread's scratch and state (laid out in its t_stride bytes of fx_gemm_shared.tpack). */
typedef struct fx_gemm_thread {
    fx_gemm_slot slot[FX_GEMM_KG];
    int64_t *col;             /* with out16: the sums of the column of tiles being run */
    int16_t *arows;           /* A rows on demand: one micro-panel's rows */
    int64_t block_id, a_block; /* B blocks and A blocks seen (ids count from 1) */
    int probed;               /* the probe group is behind us (no probe outside mode AUTO) */
    int norms_off;            /* the probe found no fast tile: no more norms */
    int64_t fast_tiles, split_tiles, rounded_tiles, in_place_tiles;
    int64_t fast_pairs, split_pairs, fast_chains; /* flexpoint_gemm_i16_stats */
    uint64_t imax;            /* max |out| of the tiles this thread finished */
    int64_t nuf;              /* with out16: the nonzero sums it rounded to 0 */
} fx_gemm_thread;

static void fx_gemm_thread_init(const fx_gemm_plan *pl, const fx_gemm_shared *sh, int tid,
                                fx_gemm_thread *th)
{
    unsigned char *tbase = sh->tpack + (size_t)tid * pl->t_stride;
    memset(th, 0, sizeof *th);
    for (int g = 0; g < pl->kg; g++) {
        unsigned char *sbase = tbase + (size_t)g * pl->slot_stride;
        fx_gemm_slot *sl = &th->slot[g];
        sl->bsplit = (int16_t *)sbase; /* 64-byte aligned */
        sl->split_tag = (int64_t *)(sbase + pl->bs_bytes);
        sl->ahi_tag = sl->split_tag + pl->npan_max;
        sl->ap_tag = sl->ahi_tag + pl->mc / pl->mr;
        sl->ap = (int32_t *)(sl->split_tag + pl->tag_elems);
        sl->ahi = sl->ap + pl->a_elems;
        sl->anorm = sl->ahi + pl->ah_elems;
        sl->anorm_max = sl->anorm + pl->mc / pl->mr * pl->nseg_max;
        /* tags 0: no panel is made (block and A block ids count from 1) */
        memset(sl->split_tag, 0, pl->tag_elems * sizeof *sl->split_tag);
    }
    th->col = pl->out16 ? (int64_t *)(void *)(tbase + (size_t)pl->kg * pl->slot_stride) : NULL;
    th->arows = (int16_t *)(void *)(tbase + (size_t)pl->kg * pl->slot_stride +
                                    pl->col_elems * 8) + FX_A_ROWS_SLACK;
    th->probed = !pl->gated;
}

/* One K block of the current B block, as the loops walk them (pc, jc: its origin; kcur, ncur:
 * its size; fast_ok: its tiles take the norm test, so packing computes norms). */
typedef struct fx_gemm_block {
    int64_t jc, ncur, npan, pc, kcur, kp, nseg, bpanel;
    int64_t id; /* this B block's number (th->block_id when it was set up) */
    int slot;   /* its place in the group: the thread's slot and the shared B block */
    int fast_ok;
    int last; /* the last K block: the values written are final */
} fx_gemm_block;

/* The shared packed B block of a block, its segment norms and each panel's largest norm. */
static int16_t *fx_gemm_bpack(const fx_gemm_plan *pl, const fx_gemm_shared *sh,
                              const fx_gemm_block *bk)
{
    return sh->bpack + (size_t)bk->slot * pl->bpack_elems;
}

static int32_t *fx_gemm_bnorm(const fx_gemm_plan *pl, const fx_gemm_shared *sh,
                              const fx_gemm_block *bk)
{
    return sh->bnorm + (size_t)bk->slot * pl->bnorm_elems;
}

static int32_t *fx_gemm_bnorm_max(const fx_gemm_plan *pl, const fx_gemm_shared *sh,
                                  const fx_gemm_block *bk)
{
    return fx_gemm_bnorm(pl, sh, bk) + pl->nc / pl->nr * pl->nseg_max;
}

/* fx_gemm_pack_b_block for a row-major B packed by the level's SIMD loop: each thread takes a
 * run of panels and packs them one norm segment (2 SEG rows) at a time across the run, so that
 * it reads 2 SEG rows sequentially instead of one cache line of every row of the K block per
 * panel, a pattern the hardware prefetchers do not follow when the rows are pages apart; one
 * pack_b_run call per segment and run where the level has it (the per-panel calls' own work
 * was a few percent of the narrow products, gemm_i16_pack_avx512.c). The
 * bytes and norms are those of packing each panel whole: a segment's pack writes its pairs at
 * their place in the panel and its own norm; the last panel, when partial, is packed whole by
 * the portable loop. Ends on the loop's implicit barrier, as fx_gemm_pack_b_block. */
static void fx_gemm_pack_b_rows(const fx_gemm_plan *pl, const fx_gemm_shared *sh,
                                const fx_gemm_block *bk, const int16_t *bblk)
{
    const int nr = pl->nr;
    const int64_t seg_rows = 2 * FX_GEMM_I16_SEG, nfull = bk->ncur / nr;
    int16_t *bpack = fx_gemm_bpack(pl, sh, bk);
    int32_t *bnorm = fx_gemm_bnorm(pl, sh, bk), *bnorm_max = fx_gemm_bnorm_max(pl, sh, bk);
    void (*const run)(const int16_t *, int64_t, int64_t, int64_t, int16_t *, int64_t,
                      int64_t *) = g_pack_runs ? pl->kd->pack->pack_b_run : NULL;
    FX_OMP(omp for schedule(static))
    for (int64_t t = 0; t < pl->nt; t++) {
        const int64_t jp0 = bk->npan * t / pl->nt, jp1 = bk->npan * (t + 1) / pl->nt;
        const int64_t jw = jp1 < nfull ? jp1 : nfull; /* full panels of the run */
        for (int64_t k0 = 0, s = 0; k0 < bk->kcur; k0 += seg_rows, s++) {
            const int64_t kc = fx_min64(seg_rows, bk->kcur - k0);
            if (run) { /* the full panels in runs of at most FX_GEMM_I16_RUN_PANELS */
                for (int64_t j0 = jp0; j0 < jw; j0 += FX_GEMM_I16_RUN_PANELS) {
                    const int64_t n = fx_min64(FX_GEMM_I16_RUN_PANELS, jw - j0);
                    int64_t sq[FX_GEMM_I16_RUN_PANELS];
                    run(bblk + k0 * pl->sbk + j0 * nr, pl->sbk, kc, n,
                        bpack + j0 * bk->kp * 2 * nr + k0 * nr, bk->kp * 2 * nr,
                        bk->fast_ok ? sq : NULL);
                    for (int64_t jp = j0; bk->fast_ok && jp < j0 + n; jp++)
                        bnorm[jp * bk->nseg + s] = (int32_t)fx_ceil_sqrt(sq[jp - j0]);
                }
                continue;
            }
            for (int64_t jp = jp0; jp < jw; jp++) {
                int64_t sq = 0;
                pl->kd->pack->pack_b(bblk + k0 * pl->sbk + jp * nr, pl->sbk, kc,
                                     bpack + jp * bk->kp * 2 * nr + k0 * nr,
                                     bk->fast_ok ? &sq : NULL);
                if (bk->fast_ok) bnorm[jp * bk->nseg + s] = (int32_t)fx_ceil_sqrt(sq);
            }
        }
        for (int64_t jp = jp0; jp < jp1; jp++) {
            if (jp >= jw)
                fx_pack_b(pl->kd, bblk + jp * nr, pl->sbk, 1, bk->kcur,
                          fx_min64(nr, bk->ncur - jp * nr), nr, bpack + jp * bk->kp * 2 * nr,
                          bk->fast_ok ? bnorm + jp * bk->nseg : NULL);
            if (bk->fast_ok)
                bnorm_max[jp] = (int32_t)fx_norm_max(bnorm + jp * bk->nseg, bk->nseg);
        }
    }
}

/* Pack the B block (all threads, panels split between them): the plain panels the fast kernel
 * reads and from which the any-data layouts are made on demand, with the segment norms when
 * the block's tiles take the norm test. Ends on the implicit barrier of the loop, so that the
 * block is complete before any thread reads it. */
static void fx_gemm_pack_b_block(const fx_gemm_plan *pl, const fx_gemm_shared *sh,
                                 const fx_gemm_block *bk)
{
    const int nr = pl->nr;
    const int16_t *bblk = pl->b + bk->pc * pl->sbk + bk->jc * pl->sbn;
    if (fx_simd_pack(pl->kd) && pl->sbn == 1 && pl->kd->pack->pack_b) {
        fx_gemm_pack_b_rows(pl, sh, bk, bblk);
        return;
    }
    int16_t *bpack = fx_gemm_bpack(pl, sh, bk);
    int32_t *bnorm = fx_gemm_bnorm(pl, sh, bk), *bnorm_max = fx_gemm_bnorm_max(pl, sh, bk);
    FX_OMP(omp for schedule(static))
    for (int64_t jp = 0; jp < bk->npan; jp++) {
        fx_pack_b(pl->kd, bblk + jp * nr * pl->sbn, pl->sbk, pl->sbn, bk->kcur,
                  fx_min64(nr, bk->ncur - jp * nr), nr, bpack + jp * bk->kp * 2 * nr,
                  bk->fast_ok ? bnorm + jp * bk->nseg : NULL);
        if (bk->fast_ok) bnorm_max[jp] = (int32_t)fx_norm_max(bnorm + jp * bk->nseg, bk->nseg);
    }
}

/* Pack this thread's A block (rows i0 .. i0 + mcur of the K block), micro-panel by micro-panel,
 * from the matrix or from rows gathered on demand (into L1 first, then packed as a strided A),
 * with the segment norms when the block's tiles take the norm test; pre-packed panels need
 * only their norms. */
static void fx_gemm_pack_a_block(const fx_gemm_plan *pl, fx_gemm_thread *th,
                                 const fx_gemm_block *bk, int64_t i0, int64_t mcur)
{
    const int mr = pl->mr;
    const int64_t kp = bk->kp, nseg = bk->nseg;
    fx_gemm_slot *sl = &th->slot[bk->slot];
    const int32_t *ablk = pl->apan ? pl->apan + i0 * pl->kp_all + bk->pc / 2 * mr : sl->ap;
    const int64_t ald = pl->apan ? pl->kp_all : kp; /* pairs between two panels */
    const int in_place = pl->a_in_place && bk->fast_ok;
    for (int64_t ir = 0; ir < mcur; ir += mr) {
        const int m = (int)fx_min64(mr, mcur - ir);
        int32_t *na = bk->fast_ok ? sl->anorm + ir / mr * nseg : NULL;
        /* a full micro-panel read in place: its norms from the rows (norms_rows also
         * prefetches the rows three micro-panels on), packed where a tile needs it (tag 0);
         * every other one packed now (tag: this A block's id) */
        sl->ap_tag[ir / mr] = in_place && m == mr ? 0 : th->a_block + 1;
        if (sl->ap_tag[ir / mr] == 0) {
            int64_t sq[FX_GEMM_I16_MAX_SEGS];
            pl->kd->pack->norms_rows(pl->a + (i0 + ir) * pl->sam + bk->pc, pl->sam, bk->kcur,
                                     sq);
            fx_segment_norms(sq, kp, na);
        } else if (pl->a_rows) {
            pl->a_rows(pl->a_rows_ctx, i0 + ir, m, bk->pc, bk->kcur, th->arows, pl->rows_ld);
            fx_pack_a(pl->kd, th->arows, pl->rows_ld, 1, bk->kcur, m, mr, sl->ap + ir * kp, na);
        } else if (!pl->apan)
            fx_pack_a(pl->kd, pl->a + (i0 + ir) * pl->sam + bk->pc * pl->sak, pl->sam, pl->sak,
                      bk->kcur, m, mr, sl->ap + ir * kp, na);
        else if (na)
            fx_panel_norms(pl->kd, ablk + ir * ald, kp, mr, na);
        if (na) sl->anorm_max[ir / mr] = (int32_t)fx_norm_max(na, nseg);
    }
    sl->a_id = ++th->a_block;
}

/* Row ir's micro-panel of this thread's A block packed, where it was left to be read in place
 * and a tile now needs it packed (the any-data kernels, a partial tile's), with no norms: they
 * came from the rows. */
static void fx_gemm_a_packed(const fx_gemm_plan *pl, fx_gemm_thread *th, const fx_gemm_block *bk,
                             int64_t i0, int64_t ir)
{
    fx_gemm_slot *sl = &th->slot[bk->slot];
    if (sl->ap_tag[ir / pl->mr] == sl->a_id) return;
    fx_pack_a(pl->kd, pl->a + (i0 + ir) * pl->sam + bk->pc, pl->sam, 1, bk->kcur, pl->mr, pl->mr,
              sl->ap + ir * bk->kp, NULL);
    sl->ap_tag[ir / pl->mr] = sl->a_id;
}

/* The fast kernel's chain for one (tile, K block): the longest the norms prove safe, 0 where
 * they allow none or the block takes no norm test (the any-data kernel then). */
static int64_t fx_gemm_chain(const fx_gemm_plan *pl, const fx_gemm_shared *sh,
                             const fx_gemm_thread *th, const fx_gemm_block *bk, int64_t ir,
                             int64_t jp)
{
    if (!bk->fast_ok) return 0;
    const fx_gemm_slot *sl = &th->slot[bk->slot];
    const int mr = pl->mr;
    const int64_t nseg = bk->nseg;
    return fx_fast_chain(pl->kd, sl->anorm + ir / mr * nseg, fx_gemm_bnorm(pl, sh, bk) + jp * nseg,
                         nseg, bk->kp, sl->anorm_max[ir / mr], fx_gemm_bnorm_max(pl, sh, bk)[jp]);
}

/* The any-data layouts one (tile, K block) needs, each made the first time a tile of this
 * thread needs it for this block: the block's split or wrap B panel jp, and (wrap kernel) the A
 * micro-panel's high panel. Returns the B panel. */
static int16_t *fx_gemm_anydata_panels(const fx_gemm_plan *pl, const fx_gemm_shared *sh,
                                       fx_gemm_thread *th, const fx_gemm_block *bk,
                                       const int32_t *apn, int64_t ir, int64_t jp)
{
    const fx_gemm_i16_kernel *kd = pl->kd;
    const int mr = pl->mr, nr = pl->nr;
    const int64_t kp = bk->kp;
    fx_gemm_slot *sl = &th->slot[bk->slot];
    int16_t *bsp = sl->bsplit + jp * bk->bpanel;
    if (sl->split_tag[jp] != bk->id) {
        const int16_t *bp = fx_gemm_bpack(pl, sh, bk) + jp * kp * 2 * nr;
        if (pl->use_wrap)
            fx_wrap_panel(kd, bp, kp, nr, bsp);
        else
            fx_split_panel(kd, bp, kp, nr, bsp);
        sl->split_tag[jp] = bk->id;
    }
    if (pl->use_wrap && sl->ahi_tag[ir / mr] != sl->a_id) {
        fx_a_high(kd, apn, kp, mr, sl->ahi + ir * kp);
        sl->ahi_tag[ir / mr] = sl->a_id;
    }
    return bsp;
}

/* The A micro-panel of row ir of a block (this thread's packed block or the pre-packed
 * panels). */
static const int32_t *fx_gemm_apanel(const fx_gemm_plan *pl, fx_gemm_thread *th,
                                     const fx_gemm_block *bk, int64_t i0, int64_t ir)
{
    if (pl->apan) return pl->apan + i0 * pl->kp_all + bk->pc / 2 * pl->mr + ir * pl->kp_all;
    if (pl->a_in_place) fx_gemm_a_packed(pl, th, bk, i0, ir);
    return th->slot[bk->slot].ap + ir * bk->kp;
}

/* One (tile, K block) for the wrap kernel: its A micro-panel, the panel's high panel and the
 * wrap B panel (made where this thread has not made them yet). */
static fx_gemm_i16_wrap_block fx_gemm_wrap_block(const fx_gemm_plan *pl,
                                                 const fx_gemm_shared *sh, fx_gemm_thread *th,
                                                 const fx_gemm_block *bk, int64_t i0, int64_t ir,
                                                 int64_t jp)
{
    const int32_t *apn = fx_gemm_apanel(pl, th, bk, i0, ir);
    const int16_t *bsp = fx_gemm_anydata_panels(pl, sh, th, bk, apn, ir, jp);
    return (fx_gemm_i16_wrap_block){bk->kp, apn, th->slot[bk->slot].ahi + ir * bk->kp, bsp};
}

/* One (tile, K block) with the fast kernel's chain from fx_gemm_chain: the fast kernel where
 * it is positive, else the any-data kernel. On the last K block the kernels write final
 * values, and take their maximum in passing when the product reports it. Returns 1 where the
 * fast kernel ran. */
static int fx_gemm_tile_block(const fx_gemm_plan *pl, const fx_gemm_shared *sh,
                              fx_gemm_thread *th, const fx_gemm_block *bk, int64_t i0,
                              int64_t ir, int64_t jp, int64_t chain, int64_t *ct, int64_t ldc,
                              int16_t *dst16, int m, int n)
{
    const fx_gemm_i16_kernel *kd = pl->kd;
    const int64_t kp = bk->kp;
    const int accumulate = bk->pc > 0;
    uint64_t *amax = bk->last && pl->want_max ? &th->imax : NULL;
    if (chain > 0 && pl->a_in_place && th->slot[bk->slot].ap_tag[ir / pl->mr] == 0) {
        /* a full micro-panel read in place (fx_gemm_pack_a_block left it unpacked) */
        const int16_t *bp = fx_gemm_bpack(pl, sh, bk) + jp * kp * 2 * pl->nr;
        const int16_t *arow = pl->a + (i0 + ir) * pl->sam + bk->pc;
        if (dst16)
            kd->fast_round_rows(kp, chain, arow, pl->sam, bp, dst16, pl->ldo, n, pl->shift, amax,
                                &th->nuf);
        else
            kd->fast_rows(kp, chain, arow, pl->sam, bp, ct, ldc, n, accumulate, amax);
        th->fast_pairs += kp;
        th->fast_chains += (uint32_t)(kp + chain - 1) / (uint32_t)chain;
        th->in_place_tiles++;
        return 1;
    }
    const int32_t *apn = fx_gemm_apanel(pl, th, bk, i0, ir);
    if (chain > 0) {
        const int16_t *bp = fx_gemm_bpack(pl, sh, bk) + jp * kp * 2 * pl->nr;
        if (dst16)
            kd->fast_round(kp, chain, apn, bp, dst16, pl->ldo, m, n, pl->shift, amax, &th->nuf);
        else
            kd->fast(kp, chain, apn, bp, ct, ldc, m, n, accumulate, amax);
        th->fast_pairs += kp;
        /* both at most FX_GEMM_I16_MAX_KP: a 32-bit division, once per tile */
        th->fast_chains += (uint32_t)(kp + chain - 1) / (uint32_t)chain;
        return 1;
    }
    th->split_pairs += kp;
    if (pl->use_wrap) {
        const fx_gemm_i16_wrap_block wb = fx_gemm_wrap_block(pl, sh, th, bk, i0, ir, jp);
        kd->wrap(1, &wb, ct, ldc, m, n, accumulate, amax);
    } else
        kd->ukr(kp, apn, fx_gemm_anydata_panels(pl, sh, th, bk, apn, ir, jp), ct, ldc, m, n,
                accumulate, amax);
    th->split_tiles++;
    return 0;
}

/* A tile that takes the wrap kernel on every K block of the group: one call over all of
 * them, so that its sums stay in registers from block to block and its int64 outputs are
 * read and written once per group instead of once per block. */
static void fx_gemm_tile_wrap_group(const fx_gemm_plan *pl, const fx_gemm_shared *sh,
                                    fx_gemm_thread *th, const fx_gemm_block *bk, int nb,
                                    int64_t i0, int64_t ir, int64_t jp, int64_t *ct, int64_t ldc,
                                    int m, int n)
{
    fx_gemm_i16_wrap_block wb[FX_GEMM_KG];
    for (int g = 0; g < nb; g++) {
        wb[g] = fx_gemm_wrap_block(pl, sh, th, &bk[g], i0, ir, jp);
        th->split_pairs += bk[g].kp;
    }
    uint64_t *amax = bk[nb - 1].last && pl->want_max ? &th->imax : NULL;
    pl->kd->wrap(nb, wb, ct, ldc, m, n, bk[0].pc > 0, amax);
    th->split_tiles += nb;
}

/* The tiles of one row block and one group of nb K blocks: jr over the B panels, then the
 * group's K blocks in order, then ir over the A micro-panels, so that each B panel of a block
 * is reused across the ir loop while in L1, and the column of tiles it writes (MC x NR int64
 * sums, 36 KiB on AVX-512) is still in L2 when the next block adds to it. (With the K blocks
 * innermost, each tile cycling through the blocks' B panels, those came from L2 instead:
 * 1024^3 FLEX16_5 on the Zen 5, one thread, 386-391 GOP/s against 398-404 with K blocks
 * outermost.) The exception: with the wrap kernel, a tile that takes it on every block of the
 * group runs them all in one call (fx_gemm_tile_wrap_group), the blocks innermost. There the
 * int64 outputs' loads and stores between blocks cost more than the B panels' coming from L2:
 * 1024^3 on full-range data, one thread on the Zen 5, 263-274 GOP/s with a call per block
 * against 272-282 with a call per group. Returns the (tile, K block) steps that took the fast
 * kernel. */
static int64_t fx_gemm_run_tiles(const fx_gemm_plan *pl, const fx_gemm_shared *sh,
                                 fx_gemm_thread *th, const fx_gemm_block *bk, int nb,
                                 int64_t i0, int64_t mcur)
{
    const int mr = pl->mr, nr = pl->nr;
    const int64_t ntiles = (mcur + mr - 1) / mr;
    int64_t group_fast = 0;
    int64_t chain[FX_GEMM_KG][FX_GEMM_MC];
    unsigned char all_wrap[FX_GEMM_MC], rounded[FX_GEMM_MC];
    for (int64_t jp = 0; jp < bk[0].npan; jp++) {
        const int64_t j0 = jp * nr;
        const int n = (int)fx_min64(nr, bk[0].ncur - j0);
        int any_group = 0;
        for (int64_t t = 0; t < ntiles; t++) {
            all_wrap[t] = pl->use_wrap;
            for (int g = 0; g < nb; g++) {
                chain[g][t] = fx_gemm_chain(pl, sh, th, &bk[g], t * mr, jp);
                if (chain[g][t] > 0) all_wrap[t] = 0;
            }
            /* tiles_round: the group is the one K block, bk[0] */
            rounded[t] = pl->tiles_round && chain[0][t] > 0;
            th->rounded_tiles += rounded[t];
            any_group |= all_wrap[t];
        }
        /* the tiles' sums: into the stage, or (out16) into this column's buffer, or rounded
         * by the fast tiles themselves (tiles_round: one K block) */
        int64_t *const cbase = pl->out16 ? th->col : pl->out + i0 * pl->ldo + bk[0].jc + j0;
        const int64_t ldc = pl->out16 ? nr : pl->ldo;
        int16_t *const dbase = pl->out16 ? pl->out16 + i0 * pl->ldo + bk[0].jc + j0 : NULL;
        for (int g = 0; g < nb; g++)
            for (int64_t t = 0; t < ntiles; t++) {
                if (all_wrap[t]) continue;
                const int64_t ir = t * mr;
                const int m = (int)fx_min64(mr, mcur - ir);
                group_fast += fx_gemm_tile_block(pl, sh, th, &bk[g], i0, ir, jp, chain[g][t],
                                                 cbase + ir * ldc, ldc,
                                                 rounded[t] ? dbase + ir * pl->ldo : NULL, m, n);
            }
        for (int64_t t = 0; any_group && t < ntiles; t++) {
            if (!all_wrap[t]) continue;
            const int64_t ir = t * mr;
            fx_gemm_tile_wrap_group(pl, sh, th, bk, nb, i0, ir, jp, cbase + ir * ldc, ldc,
                                    (int)fx_min64(mr, mcur - ir), n);
        }
        /* one group holds the whole K (fx_gemm_i16_rounds): the column's sums are final;
         * each run of tiles that did not round their own is rounded in one call */
        for (int64_t t = 0; pl->out16 && t < ntiles;) {
            if (rounded[t]) {
                t++;
                continue;
            }
            int64_t t1 = t + 1;
            while (t1 < ntiles && !rounded[t1]) t1++;
            const int64_t ir = t * mr, rows = fx_min64(t1 * mr, mcur) - ir;
            pl->kd->round(th->col + ir * nr, nr, dbase + ir * pl->ldo, pl->ldo, (int)rows, n,
                          pl->shift, &th->nuf);
            t = t1;
        }
    }
    th->fast_tiles += group_fast;
    return group_fast;
}

/* The blocked loops of one thread (called inside the parallel region; the work-sharing loops
 * bind to it): jc column blocks, groups of K blocks, ic row blocks shared dynamically. Each
 * output element belongs to one tile and receives its K blocks in order, so the sums do not
 * depend on the thread count (nor on the grouping: they are exact). In mode AUTO the first
 * norm-tested group is a probe: when not one of its (tile, K block) steps passed, the remaining
 * groups skip the norms (decided by every thread alike, after the barrier, from the count over
 * all threads). */
static void fx_gemm_run(const fx_gemm_plan *pl, fx_gemm_shared *sh, fx_gemm_thread *th)
{
    const int64_t M = pl->M, N = pl->N, K = pl->K;
    for (int64_t jc = 0; jc < N; jc += pl->nc) {
        const int64_t ncur = fx_min64(pl->nc, N - jc);
        for (int64_t pg = 0; pg < K; pg += pl->kg * pl->kc) {
            fx_gemm_block bk[FX_GEMM_KG];
            int nb = 0, group_norms = 0;
            for (int64_t pc = pg; pc < K && nb < pl->kg; pc += pl->kc, nb++) {
                fx_gemm_block *b = &bk[nb];
                b->jc = jc;
                b->ncur = ncur;
                b->npan = (ncur + pl->nr - 1) / pl->nr;
                b->pc = pc;
                b->kcur = fx_min64(pl->kc, K - pc);
                b->kp = (b->kcur + 1) / 2;
                b->bpanel = fx_b_panel_numel(b->kp, pl->nr, pl->blayout);
                b->nseg = (b->kp + FX_GEMM_I16_SEG - 1) / FX_GEMM_I16_SEG;
                b->last = pc + b->kcur == K;
                b->fast_ok = pl->use_fast && !th->norms_off &&
                             (!pl->gated || (b->ncur >= pl->min_n && b->kp >= pl->min_kp));
                b->id = ++th->block_id;
                b->slot = nb;
                group_norms |= b->fast_ok;
                fx_gemm_pack_b_block(pl, sh, b); /* ends on a barrier */
            }

            FX_OMP(omp for schedule(dynamic, 1))
            for (int64_t ib = 0; ib < pl->nmb; ib++) {
                const int64_t i0 = ib * pl->mc, mcur = fx_min64(pl->mc, M - i0);
                for (int g = 0; g < nb; g++) fx_gemm_pack_a_block(pl, th, &bk[g], i0, mcur);
                const int64_t group_fast = fx_gemm_run_tiles(pl, sh, th, bk, nb, i0, mcur);
                /* one atomic add per row block: per tile, the locked add cost 4 % of a CNN
                 * epoch on AVX2, where every one-block product is a probe */
                if (!th->probed && group_fast) sh->probe_fast += group_fast;
            }
            /* implicit barrier (this loop must never take nowait): nobody still reads the B
             * blocks when they are repacked, and every thread's probe count is in, so that all
             * threads reach the same norms_off, hence the same fast_ok, on which the B norms'
             * being written depends */
            if (group_norms && !th->probed) {
                th->probed = 1;
                th->norms_off = sh->probe_fast == 0;
            }
        }
    }
}

static int fx_gemm_i16_run(const fx_op_call *c, const fx_gemm_i16_kernel *kd, int64_t ldo)
{
    fx_gemm_plan pl;
    const int rc = fx_gemm_plan_make(c, kd, ldo, &pl);
    if (rc != FX_OK) return rc;
    *c->out_exp = c->in[0].exp + c->in[1].exp;
    if (pl.M == 0 || pl.N == 0 || pl.K == 0) {
        if (pl.K == 0) /* (a rounding takes K >= 1) */
            memset(pl.out, 0, (size_t)(pl.M * pl.N) * sizeof *pl.out);
        if (pl.want_max) { /* every value is 0 (or there is none) */
            *c->out_imax = 0;
            *c->out_imax_known = 1;
        }
        return FX_OK;
    }

    fx_gemm_shared sh;
    sh.bpack = fx_scratch_aligned_alloc(pl.bpack_elems * (size_t)pl.kg * sizeof(int16_t));
    /* per K block of a group: B segment norms, then each panel's largest */
    sh.bnorm = fx_scratch_aligned_alloc(pl.bnorm_elems * (size_t)pl.kg * sizeof(int32_t));
    sh.tpack = fx_scratch_aligned_alloc(pl.t_stride * (size_t)pl.nt);
    sh.probe_fast = 0;
    if (!sh.bpack || !sh.bnorm || !sh.tpack) {
        fx_scratch_aligned_free(sh.bpack);
        fx_scratch_aligned_free(sh.bnorm);
        fx_scratch_aligned_free(sh.tpack);
        return FX_ENOMEM;
    }
    int64_t fast_tiles = 0, split_tiles = 0, fast_pairs = 0, split_pairs = 0, fast_chains = 0;
    int64_t nuf = 0, rounded_tiles = 0, in_place_tiles = 0;
    uint64_t imax = 0;
    FX_OMP(omp parallel num_threads(pl.nt) if (pl.nt > 1)
               reduction(+ : fast_tiles, split_tiles, fast_pairs, split_pairs, fast_chains, nuf,
                             rounded_tiles, in_place_tiles)
                   reduction(max : imax))
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        fx_gemm_thread th;
        fx_gemm_thread_init(&pl, &sh, tid, &th);
        fx_gemm_run(&pl, &sh, &th);
        fast_tiles += th.fast_tiles;
        split_tiles += th.split_tiles;
        fast_pairs += th.fast_pairs;
        split_pairs += th.split_pairs;
        fast_chains += th.fast_chains;
        rounded_tiles += th.rounded_tiles;
        in_place_tiles += th.in_place_tiles;
        nuf += th.nuf;
        imax = th.imax > imax ? th.imax : imax;
    }
    g_fast_tiles += fast_tiles;
    g_split_tiles += split_tiles;
    g_fast_pairs += fast_pairs;
    g_split_pairs += split_pairs;
    g_fast_chains += fast_chains;
    g_rounded_tiles += rounded_tiles;
    g_a_in_place_tiles += in_place_tiles;
    if (pl.want_max) { /* every output was written by a kernel on its last K block */
        *c->out_imax = imax;
        *c->out_imax_known = 1;
    }
    if (pl.out16) *c->out_i16_underflow += nuf;
    fx_scratch_aligned_free(sh.bpack);
    fx_scratch_aligned_free(sh.bnorm);
    fx_scratch_aligned_free(sh.tpack);
    return FX_OK;
}

/* Test and benchmark switch (fx_gemm_i16_set_column_threads): 0 keeps every product on the
 * threads-over-row-blocks route below; the same sums either way. */
static _Atomic int g_column_threads = 1;

void fx_gemm_i16_set_column_threads(int on) { g_column_threads = on != 0; }

/* Whether a product takes its threads over columns (fx_gemm_i16_columns) rather than over row
 * blocks: at least FX_GEMM_COLUMNS_MIN_N columns a thread. */
int fx_gemm_i16_column_threads(int64_t M, int64_t K, int64_t N, int nt)
{
    return g_column_threads && nt > 1 && M > 0 && K > 0 &&
           N >= (int64_t)nt * FX_GEMM_COLUMNS_MIN_N && M * N * K >= FX_GEMM_PAR_MIN_MACS;
}

/* The product with each thread on a slice of whole panels of the columns (B's and the
 * output's), as a one-thread product of its own: its own B blocks, packed and read by that
 * thread alone, all of A, and no barrier until the end. Why: over row blocks the threads share
 * each packed B block, with a barrier after its packing and another after its tiles, and a
 * product of few rows splits its rows unevenly (16 = 12 + 4 at two threads, 145 = 144 + 1):
 * the convolutions' shapes as GEMMs (16-64 rows) ran slower on two threads than on one (16 x
 * 131072 x 144: 40-48 GOP/s against 80 on the Zen 4 in two of three phases of its VM), and
 * 1024^3 gained 2-13 % this way (docs/performance.md). Each thread packs all of A once per
 * column block of its slice, as one thread does once per column block of the whole: with at
 * least FX_GEMM_COLUMNS_MIN_N columns a thread that is at most four times one thread's packing
 * of A, against a product of at least 512 M K multiply-adds a thread. The sums are exact, so
 * the bits do not depend on the split. */
static int fx_gemm_i16_columns(const fx_op_call *c, const fx_gemm_i16_kernel *kd, int nt)
{
    /* the call's checks, with their messages, on the calling thread */
    fx_gemm_plan whole;
    const int rc0 = fx_gemm_plan_make(c, kd, 0, &whole);
    if (rc0 != FX_OK) return rc0;
    const int64_t N = whole.N, nr = kd->nr, npan = (N + nr - 1) / nr;
    const int want_max = whole.want_max;
    uint64_t imax = 0;
    int64_t nuf = 0;
    int rc = FX_OK, known = 1;
    FX_OMP(omp parallel num_threads(nt) reduction(max : imax) reduction(+ : nuf)
               reduction(min : rc, known))
    {
        int tid = 0, nthr = 1;
#ifdef _OPENMP
        tid = omp_get_thread_num();
        nthr = omp_get_num_threads();
#endif
        const int64_t j0 = npan * tid / nthr * nr, j1 = fx_min64(npan * (tid + 1) / nthr * nr, N);
        if (j1 > j0) {
            fx_op_call sub = *c;
            int exp = 0, sub_known = 0;
            uint64_t sub_max = 0;
            int64_t sub_nuf = 0;
            sub.nthreads = 1;
            sub.in[1].data = (const int16_t *)c->in[1].data + j0 * c->in[1].strides[1];
            sub.in[1].shape[1] = j1 - j0;
            sub.out_i64 = c->out_i64 ? c->out_i64 + j0 : NULL;
            sub.out_i16 = c->out_i16 ? c->out_i16 + j0 : NULL;
            sub.out_exp = &exp;
            sub.out_imax = want_max ? &sub_max : NULL;
            sub.out_imax_known = want_max ? &sub_known : NULL;
            sub.out_i16_underflow = c->out_i16_underflow ? &sub_nuf : NULL;
            /* a one-thread product: its parallel region has one thread, to which its
             * work-sharing loops bind */
            rc = fx_gemm_i16_run(&sub, kd, N);
            imax = sub_max;
            nuf = sub_nuf;
            known = sub_known;
        }
    }
    if (rc != FX_OK) return rc;
    *c->out_exp = c->in[0].exp + c->in[1].exp;
    if (want_max && known) {
        *c->out_imax = imax;
        *c->out_imax_known = 1;
    }
    if (c->out_i16_underflow) *c->out_i16_underflow += nuf;
    return FX_OK;
}

int fx_gemm_i16(const fx_op_call *c, const fx_gemm_i16_kernel *kd)
{
    if (c->nin >= 2 &&
        fx_gemm_i16_column_threads(c->in[0].shape[0], c->in[0].shape[1], c->in[1].shape[1],
                                   c->nthreads))
        return fx_gemm_i16_columns(c, kd, c->nthreads);
    return fx_gemm_i16_run(c, kd, 0);
}
