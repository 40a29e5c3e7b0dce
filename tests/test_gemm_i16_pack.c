/* The SIMD packing of the exact int16 GEMM (src/flex/gemm_i16_pack_avx2.c and the AVX-512
 * one) against the layouts and segment norms that gemm_i16.h defines, computed here element by
 * element: every packed word and every segment's largest sum of squares, for A micro-panels
 * (mr = 6 rows) from row-major A and from A with contiguous columns (pack_at: the layout
 * alone), row-major B panels and B panels with contiguous columns (nr columns).
 *
 * The norms decide how long a chain the fast kernel may run before its int32 accumulators could
 * overflow, so a norm below the true sum of squares would let the kernel silently wrap; the
 * matmul tests see that only where the data sit near the bound. Here each norm must equal the
 * exact value, and so must the norms of an already packed A panel (norms_a). Cases: K from 1 to past two segments' worth at every residue that matters (odd K,
 * a last segment of 1..8 pairs, whole segments only), values at the int16 extremes (-32768
 * pairs give the largest square sum, 2^31 per pair), random full-range and small values, a
 * single hot row or column, and row strides larger than K; a guard after each output buffer
 * catches a store beyond the panel. The largest product of two panels' segment norms
 * (norm_prod_max, the chain test) must equal the one taken product by product. pack_b_run,
 * which packs one norm segment across a run of panels, must give each panel the bytes and the
 * norm of packing it alone, touching nothing between panels. Skips (77) on a
 * CPU with neither AVX2 nor AVX-512. */
#include "core/backend.h"
#include "flex/gemm_i16.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

enum { KIND_RANDOM, KIND_MIN, KIND_MAX, KIND_SMALL, KIND_HOT, KINDS };
#define GUARD 0x5A5Au
/* segments of the largest K block (FX_GEMM_I16_KC values) */
#define MAX_SEGS ((FX_GEMM_I16_KC / 2 + FX_GEMM_I16_SEG - 1) / FX_GEMM_I16_SEG)

static int16_t value_of(test_rng *r, int kind, int line, int hot_line)
{
    switch (kind) {
    case KIND_MIN: return -32768;
    case KIND_MAX: return 32767;
    case KIND_SMALL: return (int16_t)((int)test_rng_range(r, -100, 100));
    case KIND_HOT: return line == hot_line ? -32768 : (int16_t)test_rng_range(r, -3, 3);
    default: return (int16_t)test_rng_range(r, -32768, 32767);
    }
}

/* Reference segment norms of `lines` vectors of kc values (vector l, value k at get(l, k)). */
static void ref_norms(const int16_t *src, int64_t line_step, int64_t k_step, int lines,
                      int64_t kc, int64_t *sq)
{
    const int64_t kp = (kc + 1) / 2;
    for (int64_t s = 0; s * FX_GEMM_I16_SEG < kp; s++) {
        int64_t mx = 0;
        for (int l = 0; l < lines; l++) {
            int64_t sum = 0;
            for (int64_t k = 2 * s * FX_GEMM_I16_SEG; k < 2 * (s + 1) * FX_GEMM_I16_SEG && k < kc;
                 k++) {
                const int64_t v = src[l * line_step + k * k_step];
                sum += v * v;
            }
            mx = sum > mx ? sum : mx;
        }
        sq[s] = mx;
    }
}

/* An A micro-panel of mr rows against the layout: ap[p * mr + i] = (A[i][2p], A[i][2p+1]) with
 * A[i][k] = a[i row_step + k k_step] (0 past kc), and the 8 guard words after it untouched.
 * Returns 1 where a word was wrong (reported once). */
static int check_a_words(const char *name, const char *hook, const int16_t *a, int64_t row_step,
                         int64_t k_step, int mr, int64_t kc, int kind, const int32_t *ap)
{
    const int64_t kp = (kc + 1) / 2;
    int bad = 0;
    for (int64_t p = 0; p < kp && !bad; p++)
        for (int i = 0; i < mr && !bad; i++) {
            const uint32_t lo = (uint16_t)a[i * row_step + 2 * p * k_step];
            const uint32_t hi =
                2 * p + 1 < kc ? (uint16_t)a[i * row_step + (2 * p + 1) * k_step] : 0u;
            const uint32_t w = (uint32_t)ap[p * mr + i];
            if (w != (lo | hi << 16)) {
                CHECK(0, "%s %s kc=%lld kind %d: pair %lld row %d is %08x, want %08x", name, hook,
                      (long long)kc, kind, (long long)p, i, w, lo | hi << 16);
                bad = 1;
            }
        }
    for (int64_t e = kp * mr; e < kp * mr + 8; e++)
        CHECK(ap[e] == (int32_t)GUARD, "%s %s kc=%lld: word %lld past the panel written", name,
              hook, (long long)kc, (long long)(e - kp * mr));
    return bad;
}

/* An A panel of kp pairs of mr rows, every word GUARD, with 8 guard words after it (NULL if
 * out of memory): what a packer leaves unwritten reads back as GUARD. */
static int32_t *guarded_a_panel(int64_t kp, int mr)
{
    int32_t *ap = malloc((size_t)(kp * mr + 8) * sizeof *ap);
    for (int64_t i = 0; ap && i < kp * mr + 8; i++) ap[i] = (int32_t)GUARD;
    return ap;
}

static void check_pack_a(const char *name, const fx_gemm_i16_pack *pk, int mr, int64_t kc,
                         int64_t sam, int kind, test_rng *r)
{
    const int64_t kp = (kc + 1) / 2, nseg = (kp + FX_GEMM_I16_SEG - 1) / FX_GEMM_I16_SEG;
    int16_t *a = malloc((size_t)(mr * sam) * sizeof *a);
    int32_t *ap = guarded_a_panel(kp, mr);
    int64_t sq[MAX_SEGS], want[MAX_SEGS];
    if (!a || !ap) {
        CHECK(0, "allocation");
        free(a);
        free(ap);
        return;
    }
    const int hot = (int)test_rng_range(r, 0, mr - 1);
    for (int64_t i = 0; i < mr * sam; i++) a[i] = value_of(r, kind, (int)(i / sam), hot);
    for (int64_t s = 0; s < nseg; s++) sq[s] = -1;
    pk->pack_a(a, sam, kc, ap, sq);
    const int bad = check_a_words(name, "pack_a", a, sam, 1, mr, kc, kind, ap);
    ref_norms(a, sam, 1, mr, kc, want);
    for (int64_t s = 0; s < nseg; s++)
        CHECK(sq[s] == want[s], "%s pack_a kc=%lld kind %d: segment %lld norm %lld, want %lld",
              name, (long long)kc, kind, (long long)s, (long long)sq[s], (long long)want[s]);
    if (pk->norms_a && !bad) { /* norms of the packed panel, whole segments (gemm_i16.h) */
        const int64_t nfull = kp / FX_GEMM_I16_SEG;
        int32_t na[MAX_SEGS + 1];
        for (int64_t s = 0; s <= nfull; s++) na[s] = -1;
        pk->norms_a(ap, nfull * FX_GEMM_I16_SEG, na);
        for (int64_t s = 0; s < nfull; s++)
            CHECK(na[s] == fx_ceil_sqrt(want[s]),
                  "%s norms_a kc=%lld kind %d: segment %lld norm %d, want %lld", name,
                  (long long)kc, kind, (long long)s, na[s], (long long)fx_ceil_sqrt(want[s]));
        CHECK(na[nfull] == -1, "%s norms_a kc=%lld: a norm past the whole segments written", name,
              (long long)kc);
    }
    free(a);
    free(ap);
}

/* A of mr rows with contiguous columns (column stride sak >= mr, the rows' values side by side
 * at each k), kc values a row: ap[p * mr + i] = (A[i][2p], A[i][2p+1]). The source ends at the
 * last row's last value (no slack to read into), and the words past the panel must stay. */
static void check_pack_at(const char *name, const fx_gemm_i16_pack *pk, int mr, int64_t kc,
                          int64_t sak, int kind, test_rng *r)
{
    const int64_t kp = (kc + 1) / 2, n_elems = (kc - 1) * sak + mr;
    int16_t *a = malloc((size_t)n_elems * sizeof *a);
    int32_t *ap = guarded_a_panel(kp, mr);
    if (!a || !ap) {
        CHECK(0, "allocation");
        free(a);
        free(ap);
        return;
    }
    const int hot = (int)test_rng_range(r, 0, mr - 1);
    for (int64_t e = 0; e < n_elems; e++) a[e] = value_of(r, kind, (int)(e % sak), hot);
    pk->pack_at(a, sak, kc, ap);
    (void)check_a_words(name, "pack_at", a, 1, sak, mr, kc, kind, ap);
    free(a);
    free(ap);
}

/* B of kc rows and nr columns, row-major (column_major = 0, row stride ld) or with contiguous
 * columns (column stride ld): bp[p * 2nr + 2j + t] = B[2p + t][j]. */
static void check_pack_b(const char *name, const fx_gemm_i16_pack *pk, int nr, int64_t kc,
                         int64_t ld, int column_major, int kind, test_rng *r)
{
    const int64_t kp = (kc + 1) / 2, nseg = (kp + FX_GEMM_I16_SEG - 1) / FX_GEMM_I16_SEG;
    const int64_t n_elems = column_major ? nr * ld : kc * ld;
    int16_t *b = malloc((size_t)n_elems * sizeof *b);
    int16_t *bp = malloc((size_t)(kp * 2 * nr + 16) * sizeof *bp);
    int64_t sq[MAX_SEGS], want[MAX_SEGS];
    if (!b || !bp) {
        CHECK(0, "allocation");
        free(b);
        free(bp);
        return;
    }
    const int hot = (int)test_rng_range(r, 0, nr - 1);
    for (int64_t i = 0; i < n_elems; i++) {
        const int col = (int)(column_major ? i / ld : i % ld);
        b[i] = value_of(r, kind, col, hot);
    }
    for (int64_t i = 0; i < kp * 2 * nr + 16; i++) bp[i] = (int16_t)GUARD;
    for (int64_t s = 0; s < nseg; s++) sq[s] = -1;
    if (column_major)
        pk->pack_bt(b, ld, kc, bp, sq);
    else
        pk->pack_b(b, ld, kc, bp, sq);
    const int64_t line_step = column_major ? ld : 1, k_step = column_major ? 1 : ld;
    int bad = 0;
    for (int64_t p = 0; p < kp && !bad; p++)
        for (int j = 0; j < nr && !bad; j++)
            for (int t = 0; t < 2 && !bad; t++) {
                const int64_t k = 2 * p + t;
                const int16_t want_v = k < kc ? b[j * line_step + k * k_step] : 0;
                if (bp[p * 2 * nr + 2 * j + t] != want_v) {
                    CHECK(0, "%s %s kc=%lld kind %d: pair %lld column %d half %d is %d, want %d",
                          name, column_major ? "pack_bt" : "pack_b", (long long)kc, kind,
                          (long long)p, j, t, bp[p * 2 * nr + 2 * j + t], want_v);
                    bad = 1;
                }
            }
    for (int64_t i = kp * 2 * nr; i < kp * 2 * nr + 16; i++)
        CHECK(bp[i] == (int16_t)GUARD, "%s kc=%lld: value %lld past the panel written", name,
              (long long)kc, (long long)(i - kp * 2 * nr));
    ref_norms(b, line_step, k_step, nr, kc, want);
    for (int64_t s = 0; s < nseg; s++)
        CHECK(sq[s] == want[s], "%s %s kc=%lld kind %d: segment %lld norm %lld, want %lld", name,
              column_major ? "pack_bt" : "pack_b", (long long)kc, kind, (long long)s,
              (long long)sq[s], (long long)want[s]);
    free(b);
    free(bp);
}

/* pack_b_run: npan panels of one norm segment (kc <= 16 rows) of a row-major B (row stride ld),
 * panel j from column j nr into bp + j pstride, against pack_b's layout and the segment's norm
 * per panel; the words between two panels (pstride is larger than a panel) stay guards, and
 * with_norms 0 passes no sq (layout only). */
static void check_pack_b_run(const char *name, const fx_gemm_i16_pack *pk, int nr, int64_t kc,
                             int64_t npan, int64_t ld, int with_norms, int kind, test_rng *r)
{
    const int64_t kp = (kc + 1) / 2, panel = kp * 2 * nr, pstride = panel + 16;
    int16_t *b = malloc((size_t)(kc * ld) * sizeof *b);
    int16_t *bp = malloc((size_t)(npan * pstride) * sizeof *bp);
    int64_t sq[FX_GEMM_I16_RUN_PANELS], want;
    if (!b || !bp) {
        CHECK(0, "allocation");
        free(b);
        free(bp);
        return;
    }
    const int hot = (int)test_rng_range(r, 0, npan * nr - 1);
    for (int64_t i = 0; i < kc * ld; i++) b[i] = value_of(r, kind, (int)(i % ld), hot);
    for (int64_t i = 0; i < npan * pstride; i++) bp[i] = (int16_t)GUARD;
    for (int64_t j = 0; j < npan; j++) sq[j] = -1;
    pk->pack_b_run(b, ld, kc, npan, bp, pstride, with_norms ? sq : NULL);
    int bad = 0;
    for (int64_t j = 0; j < npan && !bad; j++) {
        const int16_t *pj = bp + j * pstride;
        for (int64_t p = 0; p < kp && !bad; p++)
            for (int c = 0; c < nr && !bad; c++)
                for (int t = 0; t < 2 && !bad; t++) {
                    const int64_t k = 2 * p + t;
                    const int16_t want_v = k < kc ? b[k * ld + j * nr + c] : 0;
                    if (pj[p * 2 * nr + 2 * c + t] != want_v) {
                        CHECK(0, "%s pack_b_run kc=%lld npan=%lld kind %d: panel %lld pair %lld "
                              "column %d half %d is %d, want %d", name, (long long)kc,
                              (long long)npan, kind, (long long)j, (long long)p, c, t,
                              pj[p * 2 * nr + 2 * c + t], want_v);
                        bad = 1;
                    }
                }
        for (int64_t i = panel; i < pstride && !bad; i++)
            if (pj[i] != (int16_t)GUARD) {
                CHECK(0, "%s pack_b_run kc=%lld: value %lld past panel %lld written", name,
                      (long long)kc, (long long)(i - panel), (long long)j);
                bad = 1;
            }
        if (!with_norms) continue;
        ref_norms(b + j * nr, 1, ld, nr, kc, &want);
        CHECK(sq[j] == want, "%s pack_b_run kc=%lld npan=%lld kind %d: panel %lld norm %lld, "
              "want %lld", name, (long long)kc, (long long)npan, kind, (long long)j,
              (long long)sq[j], (long long)want);
    }
    free(b);
    free(bp);
}

/* norm_prod_max against the products taken one by one: every length up to past a K block's
 * segments (the vector loop's tails), norms from 0 to the largest a segment can have (2^17 + 1:
 * eight pairs of -32768), the largest product at every position. */
static void check_norm_prod_max(const char *name, const fx_gemm_i16_pack *pk, test_rng *r)
{
    enum { MAXN = MAX_SEGS + 5 };
    const int32_t top = (1 << 17) + 1;
    int32_t na[MAXN], nb[MAXN];
    for (int64_t n = 0; n <= MAXN; n++)
        for (int kind = 0; kind < 4; kind++)
            for (int64_t hot = 0; hot < (n > 0 ? n : 1); hot++) {
                for (int64_t s = 0; s < n; s++) {
                    na[s] = kind == 0 ? (int32_t)test_rng_range(r, 0, top)
                            : kind == 1 ? top
                            : kind == 2 ? (int32_t)test_rng_range(r, 0, 1000)
                                        : 0;
                    nb[s] = kind == 0 ? (int32_t)test_rng_range(r, 0, top)
                            : kind == 1 ? top
                            : kind == 2 ? (int32_t)test_rng_range(r, 0, 1000)
                                        : 0;
                }
                if (kind >= 2 && n > 0) { /* one position far above the rest */
                    na[hot] = top - (int32_t)hot;
                    nb[hot] = top;
                }
                int64_t want = 0;
                for (int64_t s = 0; s < n; s++) {
                    const int64_t x = (int64_t)na[s] * nb[s];
                    want = x > want ? x : want;
                }
                const int64_t got = pk->norm_prod_max(na, nb, n);
                CHECK(got == want, "%s norm_prod_max n=%lld kind %d hot %lld: %lld, want %lld",
                      name, (long long)n, kind, (long long)hot, (long long)got, (long long)want);
                if (kind < 2) break; /* no hot position in these kinds */
            }
}

static void check_packing(const char *name, const fx_gemm_i16_pack *pk, int mr, int nr,
                          test_rng *r)
{
    if (pk->norm_prod_max) check_norm_prod_max(name, pk, r);
    /* every last-segment length (odd and even K), whole segments only, several blocks */
    static const int64_t kcs[] = {1,  2,  3,  5,  14, 15, 16, 17,  18,  31,  32,  33,
                                  47, 48, 63, 64, 65, 95, 96, 100, 255, 256, 383, 384};
    for (size_t c = 0; c < sizeof kcs / sizeof kcs[0]; c++) {
        const int64_t kc = kcs[c];
        if ((kc + 1) / 2 > (int64_t)MAX_SEGS * FX_GEMM_I16_SEG) continue;
        for (int kind = 0; kind < KINDS; kind++) {
            const int64_t pad = test_rng_range(r, 0, 39); /* strides beyond K */
            if (pk->pack_a) check_pack_a(name, pk, mr, kc, kc + pad, kind, r);
            if (pk->pack_b) check_pack_b(name, pk, nr, kc, nr + pad, 0, kind, r);
            if (pk->pack_bt) check_pack_b(name, pk, nr, kc, kc + pad, 1, kind, r);
            if (pk->pack_at) check_pack_at(name, pk, mr, kc, mr + pad, kind, r);
        }
    }
    /* pack_b_run: every segment length, single panels to a whole column block's run */
    static const int64_t runs[] = {1, 2, 3, 17, FX_GEMM_I16_RUN_PANELS};
    for (int64_t kc = 1; pk->pack_b_run && kc <= 2 * FX_GEMM_I16_SEG; kc++)
        for (size_t n = 0; n < sizeof runs / sizeof runs[0]; n++)
            for (int kind = 0; kind < KINDS; kind++) {
                const int64_t ld = runs[n] * nr + test_rng_range(r, 0, 39);
                check_pack_b_run(name, pk, nr, kc, runs[n], ld, kind != KIND_SMALL, kind, r);
            }
}

int main(void)
{
    test_rng r;
    test_rng_seed(&r, 20261126);
    int levels = 0;
    if (flexpoint_backend_available(FX_BACKEND_AVX2)) {
        check_packing("avx2 6x16", &fx_gemm_i16_pack_avx2_6x16, 6, 16, &r);
        levels++;
    }
    if (flexpoint_backend_available(FX_BACKEND_AVX512)) {
        check_packing("avx512 6x32", &fx_gemm_i16_pack_avx512_6x32, 6, 32, &r);
        levels++;
    }
    if (levels == 0) return test_skip("test_gemm_i16_pack", "no AVX2 or AVX-512 on this CPU");
    return test_finish("test_gemm_i16_pack");
}
