/* Layer norm's row kernels (src/nn/ln_kernels.h), written once for the AVX2 and AVX-512
 * levels: the portable kernels' operations (src/nn/layernorm.c), LANES rows at a time.
 *
 * Included by layernorm_avx2.c and layernorm_avx512.c after each has defined its vectors:
 *   LN_VF  LANES floats          LN_VM  a lane mask     LANES  8 or 16
 *   ln_mask(n)  the first min(n, LANES) lanes (n <= 0: none)
 *   LN_LOAD(mask, p) (masked-off lanes 0)   LN_STORE(p, mask, v)   LN_LOADU(p)  LN_STOREU(p, v)
 *   LN_ZERO() LN_SET1(x) LN_ADD LN_SUB LN_MUL LN_DIV LN_SQRT (each one IEEE operation, rounded
 *   to nearest)   LN_TRANSPOSE(t)  t[i] row i on entry, column i on exit (LANES x LANES)
 *   LN_NAME(f)  f with the level's suffix
 * Both files are built with -ffp-contract=off: every product and sum is rounded on its own, as
 * in the portable code.
 *
 * A row's sums run in index order with one accumulator, so the rows go side by side: a block
 * of LANES rows x LANES columns is loaded, transposed in registers (column j of the block in
 * one vector, lane i from row i), and the columns are added into the lanes' accumulators one
 * after another; each lane then holds exactly the portable scalar's running sum of its row.
 * The outputs and dgamma/dbeta's column sums are element-wise given the row statistics, so
 * they run along the rows, LANES columns a vector. */
#ifndef FX_NN_LAYERNORM_IMPL_H
#define FX_NN_LAYERNORM_IMPL_H

#include "ln_kernels.h"

/* The block of nr rows (from p, D apart) by nk columns as columns: t[j] lane i = p[i D + j],
 * lanes past nr and columns past nk zero */
static inline void ln_block(const float *p, int64_t D, int nr, int nk, LN_VF t[LANES])
{
    const LN_VM km = ln_mask(nk);
    for (int i = 0; i < LANES; i++)
        t[i] = i < nr ? LN_LOAD(km, p + i * D) : LN_ZERO();
    LN_TRANSPOSE(t);
}

/* Lane i: the mean and rstd of row i (i < nr) of the rows from x, by ln_row_stats's
 * operations: the sum in index order, the mean, the sum of squared deviations in index order,
 * 1 / sqrt(q / D + eps). */
static void ln_stats(const float *x, int64_t D, int nr, float eps, LN_VF *mu_out, LN_VF *is_out)
{
    LN_VF s = LN_ZERO();
    for (int64_t k0 = 0; k0 < D; k0 += LANES) {
        const int nk = D - k0 < LANES ? (int)(D - k0) : LANES;
        LN_VF t[LANES];
        ln_block(x + k0, D, nr, nk, t);
        for (int j = 0; j < LANES; j++) /* the row's own elements only */
            if (j < nk) s = LN_ADD(s, t[j]);
    }
    const LN_VF dv = LN_SET1((float)D);
    const LN_VF mu = LN_DIV(s, dv);
    LN_VF q = LN_ZERO();
    for (int64_t k0 = 0; k0 < D; k0 += LANES) {
        const int nk = D - k0 < LANES ? (int)(D - k0) : LANES;
        LN_VF t[LANES];
        ln_block(x + k0, D, nr, nk, t);
        for (int j = 0; j < LANES; j++)
            if (j < nk) {
                const LN_VF d = LN_SUB(t[j], mu);
                q = LN_ADD(q, LN_MUL(d, d));
            }
    }
    *mu_out = mu;
    *is_out = LN_DIV(LN_SET1(1.0f), LN_SQRT(LN_ADD(LN_DIV(q, dv), LN_SET1(eps))));
}

static void LN_NAME(ln_forward)(const float *x, float *y, float *st, int64_t r0, int64_t r1,
                                int64_t D, float eps, const float *gamma, const float *beta)
{
    for (int64_t r = r0; r < r1; r += LANES) {
        const int nr = r1 - r < LANES ? (int)(r1 - r) : LANES;
        LN_VF mu, is;
        ln_stats(x + r * D, D, nr, eps, &mu, &is);
        float m[LANES], v[LANES];
        LN_STOREU(m, mu);
        LN_STOREU(v, is);
        for (int i = 0; i < nr; i++) {
            st[2 * (r + i)] = m[i];
            st[2 * (r + i) + 1] = v[i];
        }
        if (!y) continue;
        /* every row of the block has its statistics: now its outputs (y may be x) */
        for (int i = 0; i < nr; i++) {
            const float *xr = x + (r + i) * D;
            float *yr = y + (r + i) * D;
            const LN_VF mv = LN_SET1(m[i]), iv = LN_SET1(v[i]);
            for (int64_t k = 0; k < D; k += LANES) {
                const LN_VM km = ln_mask(D - k);
                LN_VF val = LN_MUL(LN_SUB(LN_LOAD(km, xr + k), mv), iv);
                if (gamma) val = LN_MUL(val, LN_LOAD(km, gamma + k));
                if (beta) val = LN_ADD(val, LN_LOAD(km, beta + k));
                LN_STORE(yr + k, km, val);
            }
        }
    }
}

/* Columns [c0, c0 + 4 LANES) at most, four vectors of each sum in registers over all R rows */
static void ln_param_sums_block(const float *x, const float *dy, const float *st, int64_t R,
                                int64_t D, int64_t c0, int64_t c1, float *sg)
{
    LN_VM km[4];
    LN_VF a[4], b[4];
    for (int v = 0; v < 4; v++) {
        km[v] = c0 + LANES * v < c1 ? ln_mask(c1 - c0 - LANES * v) : ln_mask(0);
        a[v] = LN_LOAD(km[v], sg + c0 + LANES * v);
        b[v] = LN_LOAD(km[v], sg + D + c0 + LANES * v);
    }
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * D + c0, *gr = dy + r * D + c0;
        const LN_VF mu = LN_SET1(st[2 * r]), is = LN_SET1(st[2 * r + 1]);
        for (int v = 0; v < 4; v++) {
            const LN_VF g = LN_LOAD(km[v], gr + LANES * v);
            const LN_VF xh = LN_MUL(LN_SUB(LN_LOAD(km[v], xr + LANES * v), mu), is);
            a[v] = LN_ADD(a[v], LN_MUL(g, xh));
            b[v] = LN_ADD(b[v], g);
        }
    }
    for (int v = 0; v < 4; v++) {
        LN_STORE(sg + c0 + LANES * v, km[v], a[v]);
        LN_STORE(sg + D + c0 + LANES * v, km[v], b[v]);
    }
}

static void LN_NAME(ln_param_sums)(const float *x, const float *dy, const float *st, int64_t R,
                                   int64_t D, int64_t k0, int64_t k1, float *sg)
{
    for (int64_t c0 = k0; c0 < k1; c0 += 4 * LANES)
        ln_param_sums_block(x, dy, st, R, D, c0, c0 + 4 * LANES < k1 ? c0 + 4 * LANES : k1, sg);
}

static void LN_NAME(ln_backward)(const float *x, const float *dy, const float *st, float *dx,
                                 int64_t r0, int64_t r1, int64_t D, const float *gamma)
{
    for (int64_t r = r0; r < r1; r += LANES) {
        const int nr = r1 - r < LANES ? (int)(r1 - r) : LANES;
        float m[LANES] = {0}, v[LANES] = {0};
        for (int i = 0; i < nr; i++) {
            m[i] = st[2 * (r + i)];
            v[i] = st[2 * (r + i) + 1];
        }
        const LN_VF mu = LN_LOADU(m), is = LN_LOADU(v);
        /* lane i: sum g and sum g xhat of row i in index order, g = dy gamma */
        LN_VF a = LN_ZERO(), b = LN_ZERO();
        for (int64_t k0 = 0; k0 < D; k0 += LANES) {
            const int nk = D - k0 < LANES ? (int)(D - k0) : LANES;
            LN_VF tg[LANES], tx[LANES];
            ln_block(dy + r * D + k0, D, nr, nk, tg);
            ln_block(x + r * D + k0, D, nr, nk, tx);
            for (int j = 0; j < LANES; j++)
                if (j < nk) {
                    const LN_VF g = LN_MUL(tg[j], LN_SET1(gamma ? gamma[k0 + j] : 1.0f));
                    a = LN_ADD(a, g);
                    b = LN_ADD(b, LN_MUL(g, LN_MUL(LN_SUB(tx[j], mu), is)));
                }
        }
        const LN_VF dv = LN_SET1((float)D);
        float av[LANES], bv[LANES];
        LN_STOREU(av, LN_DIV(a, dv));
        LN_STOREU(bv, LN_DIV(b, dv));
        for (int i = 0; i < nr; i++) {
            const float *xr = x + (r + i) * D, *gr = dy + (r + i) * D;
            float *vr = dx + (r + i) * D;
            const LN_VF mi = LN_SET1(m[i]), ii = LN_SET1(v[i]);
            const LN_VF ai = LN_SET1(av[i]), bi = LN_SET1(bv[i]);
            for (int64_t k = 0; k < D; k += LANES) {
                const LN_VM km = ln_mask(D - k);
                const LN_VF gm = gamma ? LN_LOAD(km, gamma + k) : LN_SET1(1.0f);
                const LN_VF g = LN_MUL(LN_LOAD(km, gr + k), gm);
                const LN_VF xh = LN_MUL(LN_SUB(LN_LOAD(km, xr + k), mi), ii);
                const LN_VF o = LN_MUL(ii, LN_SUB(LN_SUB(g, ai), LN_MUL(xh, bi)));
                LN_STORE(vr + k, km, o);
            }
        }
    }
}

#define LN_KERNELS_TABLE {LN_NAME(ln_forward), LN_NAME(ln_param_sums), LN_NAME(ln_backward)}

#endif
