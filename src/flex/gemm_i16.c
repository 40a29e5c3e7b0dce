/* Portable driver of the exact int16 GEMM (see gemm_i16.h for the exactness argument and the
 * packed layouts). BLIS-style loops:
 *   jc: column blocks of NC        (packed B block: KC x NC, shared by the threads)
 *    pc: K blocks of KC            (at most FX_GEMM_I16_MAX_KP pairs: the int32 chains flush)
 *     ic: row blocks of MC         (packed A block: MC x KC, one per thread; threads split ic)
 *      jr, ir: micro-kernel tiles  (each B micro-panel is reused across the ir loop)
 * Each output element belongs to exactly one (ic, jr, ir) tile and receives the exact partial
 * sums of its K blocks in order, so the result is the exact int64 sum for any thread count.
 */
#include "gemm_i16.h"

#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#define FX_OMP(...) _Pragma(#__VA_ARGS__)
#else
#define FX_OMP(...)
#endif

#define FX_GEMM_KC 384  /* K elements per block: even, <= 2 * FX_GEMM_I16_MAX_KP */
#define FX_GEMM_MC 144  /* rows per packed A block (rounded down to a multiple of mr) */
#define FX_GEMM_NC 2048 /* columns per packed B block (rounded down to a multiple of nr) */

/* Below this many multiply-adds one thread does the work (thread start-up would dominate). */
#define FX_GEMM_PAR_MIN_MACS ((int64_t)1 << 21)

_Static_assert(FX_GEMM_KC % 2 == 0 && FX_GEMM_KC / 2 <= FX_GEMM_I16_MAX_KP,
               "a K block must not exceed the exact int32 chain length");

static inline int64_t fx_min64(int64_t x, int64_t y) { return x < y ? x : y; }

/* b = 256 * hi + lo with lo in [-128, 127] and hi in [-128, 128]. */
static inline void fx_split_b(int32_t v, int16_t *hi, int16_t *lo)
{
    const int32_t l = (int32_t)(((uint32_t)v + 128u) & 255u) - 128;
    *lo = (int16_t)l;
    *hi = (int16_t)((v - l) / 256); /* exact: v - l is a multiple of 256 */
}

/* Pack a kc x n block of B (n <= nr valid columns) into one micro-panel of nr columns. */
static void fx_pack_b(const int16_t *b, int64_t sbk, int64_t sbn, int64_t kc, int64_t n, int nr,
                      int16_t *bp)
{
    const int64_t kp = (kc + 1) / 2;
    for (int64_t p = 0; p < kp; p++) {
        int16_t *hi = bp + p * 4 * nr, *lo = hi + 2 * nr;
        const int16_t *r0 = b + 2 * p * sbk;
        const int16_t *r1 = 2 * p + 1 < kc ? r0 + sbk : NULL;
        int64_t j = 0;
        for (; j < n; j++) {
            fx_split_b(r0[j * sbn], &hi[2 * j], &lo[2 * j]);
            if (r1)
                fx_split_b(r1[j * sbn], &hi[2 * j + 1], &lo[2 * j + 1]);
            else
                hi[2 * j + 1] = lo[2 * j + 1] = 0;
        }
        for (; j < nr; j++) hi[2 * j] = hi[2 * j + 1] = lo[2 * j] = lo[2 * j + 1] = 0;
    }
}

/* Pack an m x kc block of A (m <= mr valid rows) into one micro-panel of mr rows. */
static void fx_pack_a(const int16_t *a, int64_t sam, int64_t sak, int64_t kc, int64_t m, int mr,
                      int32_t *ap)
{
    const int64_t kp = (kc + 1) / 2;
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

    *c->out_exp = c->in[0].exp + c->in[1].exp;
    if (M == 0 || N == 0) return FX_OK;
    if (K == 0) {
        memset(out, 0, (size_t)(M * N) * sizeof *out);
        return FX_OK;
    }

    const int64_t kc = fx_min64(FX_GEMM_KC, K);
    const int64_t kp_max = (kc + 1) / 2;
    const int64_t mc = fx_min64(FX_GEMM_MC / mr * mr, (M + mr - 1) / mr * mr);
    const int64_t nc = fx_min64(FX_GEMM_NC / nr * nr, (N + nr - 1) / nr * nr);
    const int64_t nmb = (M + mc - 1) / mc;
    int nt = c->nthreads;
    if (nt < 1 || M * N * K < FX_GEMM_PAR_MIN_MACS) nt = 1;
    if (nt > nmb) nt = (int)nmb; /* threads split the row blocks */

    const size_t a_elems = (size_t)(kp_max * mc);          /* int32 per thread */
    const size_t a_stride = (a_elems * sizeof(int32_t) + 63) / 64 * 64 / sizeof(int32_t);
    int16_t *bpack = fx_gemm_alloc((size_t)(kp_max * 4 * nc) * sizeof(int16_t));
    int32_t *apack = fx_gemm_alloc(a_stride * (size_t)nt * sizeof(int32_t));
    if (!bpack || !apack) {
        free(bpack);
        free(apack);
        return FX_ENOMEM;
    }

    FX_OMP(omp parallel num_threads(nt) if (nt > 1))
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        int32_t *ap = apack + (size_t)tid * a_stride;
        for (int64_t jc = 0; jc < N; jc += nc) {
            const int64_t ncur = fx_min64(nc, N - jc);
            const int64_t npan = (ncur + nr - 1) / nr;
            for (int64_t pc = 0; pc < K; pc += kc) {
                const int64_t kcur = fx_min64(kc, K - pc), kp = (kcur + 1) / 2;
                const int16_t *bblk = b + pc * sbk + jc * sbn;

                FX_OMP(omp for schedule(static))
                for (int64_t jp = 0; jp < npan; jp++)
                    fx_pack_b(bblk + jp * nr * sbn, sbk, sbn, kcur, fx_min64(nr, ncur - jp * nr),
                              nr, bpack + jp * kp * 4 * nr);
                /* implicit barrier: the B block is complete before any thread reads it */

                FX_OMP(omp for schedule(dynamic, 1))
                for (int64_t ib = 0; ib < nmb; ib++) {
                    const int64_t i0 = ib * mc, mcur = fx_min64(mc, M - i0);
                    for (int64_t ir = 0; ir < mcur; ir += mr)
                        fx_pack_a(a + (i0 + ir) * sam + pc * sak, sam, sak, kcur,
                                  fx_min64(mr, mcur - ir), mr, ap + ir * kp);
                    for (int64_t jp = 0; jp < npan; jp++) {
                        const int64_t j0 = jp * nr;
                        const int n = (int)fx_min64(nr, ncur - j0);
                        const int16_t *bp = bpack + jp * kp * 4 * nr;
                        for (int64_t ir = 0; ir < mcur; ir += mr)
                            kd->ukr(kp, ap + ir * kp, bp, out + (i0 + ir) * N + jc + j0, N,
                                    (int)fx_min64(mr, mcur - ir), n, pc > 0);
                    }
                }
                /* implicit barrier: nobody still reads the B block when it is repacked */
            }
        }
    }
    free(bpack);
    free(apack);
    return FX_OK;
}
