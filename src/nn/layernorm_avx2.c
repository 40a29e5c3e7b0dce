/* Layer norm's row kernels on AVX2 (src/nn/ln_kernels.h): the portable kernels' operations
 * (src/nn/layernorm.c), eight rows at a time, as src/nn/layernorm_avx512.c does sixteen.
 *
 * A row's sums run in index order with one accumulator, so the rows go side by side: a block
 * of 8 rows x 8 columns is loaded, transposed in registers (column j of the block in one
 * vector, lane i from row i), and the columns are added into the lanes' accumulators one after
 * another; each lane then holds exactly the portable scalar's running sum of its row. The
 * outputs and dgamma/dbeta's column sums are element-wise given the row statistics, so they
 * run along the rows, eight columns a vector. Built with -ffp-contract=off: every product
 * and sum is rounded on its own, as in the portable code. */
#include "ln_kernels.h"
#include "../core/transpose_avx2.h"

#include <immintrin.h>

#define LANES 8

/* the first min(n, 8) lanes, for maskload / maskstore (n <= 0: none) */
static inline __m256i ln_mask(int64_t n)
{
    const int c = n >= LANES ? LANES : (n > 0 ? (int)n : 0);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The block of nr rows (from p, D apart) by nk columns as columns: t[j] lane i = p[i D + j],
 * lanes past nr and columns past nk zero */
static inline void ln_block(const float *p, int64_t D, int nr, int nk, __m256 t[LANES])
{
    const __m256i km = ln_mask(nk);
    for (int i = 0; i < LANES; i++)
        t[i] = i < nr ? _mm256_maskload_ps(p + i * D, km) : _mm256_setzero_ps();
    fx_transpose8x8_ps(t);
}

/* Lane i: the mean and rstd of row i (i < nr) of the rows from x, by ln_row_stats's
 * operations: the sum in index order, the mean, the sum of squared deviations in index order,
 * 1 / sqrt(q / D + eps). */
static void ln_stats8(const float *x, int64_t D, int nr, float eps, __m256 *mu_out,
                       __m256 *is_out)
{
    __m256 s = _mm256_setzero_ps();
    for (int64_t k0 = 0; k0 < D; k0 += LANES) {
        const int nk = D - k0 < LANES ? (int)(D - k0) : LANES;
        __m256 t[LANES];
        ln_block(x + k0, D, nr, nk, t);
        for (int j = 0; j < LANES; j++) /* the row's own elements only */
            if (j < nk) s = _mm256_add_ps(s, t[j]);
    }
    const __m256 dv = _mm256_set1_ps((float)D);
    const __m256 mu = _mm256_div_ps(s, dv);
    __m256 q = _mm256_setzero_ps();
    for (int64_t k0 = 0; k0 < D; k0 += LANES) {
        const int nk = D - k0 < LANES ? (int)(D - k0) : LANES;
        __m256 t[LANES];
        ln_block(x + k0, D, nr, nk, t);
        for (int j = 0; j < LANES; j++)
            if (j < nk) {
                const __m256 d = _mm256_sub_ps(t[j], mu);
                q = _mm256_add_ps(q, _mm256_mul_ps(d, d));
            }
    }
    *mu_out = mu;
    *is_out = _mm256_div_ps(_mm256_set1_ps(1.0f),
                            _mm256_sqrt_ps(_mm256_add_ps(_mm256_div_ps(q, dv),
                                                         _mm256_set1_ps(eps))));
}

static void ln_forward_avx2(const float *x, float *y, float *st, int64_t r0, int64_t r1,
                              int64_t D, float eps, const float *gamma, const float *beta)
{
    for (int64_t r = r0; r < r1; r += LANES) {
        const int nr = r1 - r < LANES ? (int)(r1 - r) : LANES;
        __m256 mu, is;
        ln_stats8(x + r * D, D, nr, eps, &mu, &is);
        float m[LANES], v[LANES];
        _mm256_storeu_ps(m, mu);
        _mm256_storeu_ps(v, is);
        for (int i = 0; i < nr; i++) {
            st[2 * (r + i)] = m[i];
            st[2 * (r + i) + 1] = v[i];
        }
        if (!y) continue;
        /* every row of the block has its statistics: now its outputs (y may be x) */
        for (int i = 0; i < nr; i++) {
            const float *xr = x + (r + i) * D;
            float *yr = y + (r + i) * D;
            const __m256 mv = _mm256_set1_ps(m[i]), iv = _mm256_set1_ps(v[i]);
            for (int64_t k = 0; k < D; k += LANES) {
                const __m256i km = ln_mask(D - k);
                __m256 val = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(xr + k, km), mv), iv);
                if (gamma) val = _mm256_mul_ps(val, _mm256_maskload_ps(gamma + k, km));
                if (beta) val = _mm256_add_ps(val, _mm256_maskload_ps(beta + k, km));
                _mm256_maskstore_ps(yr + k, km, val);
            }
        }
    }
}

/* Columns [c0, c0 + 32) at most, four vectors of each sum in registers over all R rows */
static void ln_param_sums32(const float *x, const float *dy, const float *st, int64_t R,
                            int64_t D, int64_t c0, int64_t c1, float *sg)
{
    __m256i km[4];
    __m256 a[4], b[4];
    for (int v = 0; v < 4; v++) {
        km[v] = c0 + LANES * v < c1 ? ln_mask(c1 - c0 - LANES * v) : ln_mask(0);
        a[v] = _mm256_maskload_ps(sg + c0 + LANES * v, km[v]);
        b[v] = _mm256_maskload_ps(sg + D + c0 + LANES * v, km[v]);
    }
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * D + c0, *gr = dy + r * D + c0;
        const __m256 mu = _mm256_set1_ps(st[2 * r]), is = _mm256_set1_ps(st[2 * r + 1]);
        for (int v = 0; v < 4; v++) {
            const __m256 g = _mm256_maskload_ps(gr + LANES * v, km[v]);
            const __m256 xh =
                _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(xr + LANES * v, km[v]), mu), is);
            a[v] = _mm256_add_ps(a[v], _mm256_mul_ps(g, xh));
            b[v] = _mm256_add_ps(b[v], g);
        }
    }
    for (int v = 0; v < 4; v++) {
        _mm256_maskstore_ps(sg + c0 + LANES * v, km[v], a[v]);
        _mm256_maskstore_ps(sg + D + c0 + LANES * v, km[v], b[v]);
    }
}

static void ln_param_sums_avx2(const float *x, const float *dy, const float *st, int64_t R,
                                 int64_t D, int64_t k0, int64_t k1, float *sg)
{
    for (int64_t c0 = k0; c0 < k1; c0 += 4 * LANES)
        ln_param_sums32(x, dy, st, R, D, c0, c0 + 4 * LANES < k1 ? c0 + 4 * LANES : k1, sg);
}

static void ln_backward_avx2(const float *x, const float *dy, const float *st, float *dx,
                               int64_t r0, int64_t r1, int64_t D, const float *gamma)
{
    for (int64_t r = r0; r < r1; r += LANES) {
        const int nr = r1 - r < LANES ? (int)(r1 - r) : LANES;
        float m[LANES] = {0}, v[LANES] = {0};
        for (int i = 0; i < nr; i++) {
            m[i] = st[2 * (r + i)];
            v[i] = st[2 * (r + i) + 1];
        }
        const __m256 mu = _mm256_loadu_ps(m), is = _mm256_loadu_ps(v);
        /* lane i: sum g and sum g xhat of row i in index order, g = dy gamma */
        __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
        for (int64_t k0 = 0; k0 < D; k0 += LANES) {
            const int nk = D - k0 < LANES ? (int)(D - k0) : LANES;
            __m256 tg[LANES], tx[LANES];
            ln_block(dy + r * D + k0, D, nr, nk, tg);
            ln_block(x + r * D + k0, D, nr, nk, tx);
            for (int j = 0; j < LANES; j++)
                if (j < nk) {
                    const __m256 g = _mm256_mul_ps(
                        tg[j], _mm256_set1_ps(gamma ? gamma[k0 + j] : 1.0f));
                    a = _mm256_add_ps(a, g);
                    b = _mm256_add_ps(b, _mm256_mul_ps(g, _mm256_mul_ps(_mm256_sub_ps(tx[j], mu), is)));
                }
        }
        const __m256 dv = _mm256_set1_ps((float)D);
        float av[LANES], bv[LANES];
        _mm256_storeu_ps(av, _mm256_div_ps(a, dv));
        _mm256_storeu_ps(bv, _mm256_div_ps(b, dv));
        for (int i = 0; i < nr; i++) {
            const float *xr = x + (r + i) * D, *gr = dy + (r + i) * D;
            float *vr = dx + (r + i) * D;
            const __m256 mi = _mm256_set1_ps(m[i]), ii = _mm256_set1_ps(v[i]);
            const __m256 ai = _mm256_set1_ps(av[i]), bi = _mm256_set1_ps(bv[i]);
            for (int64_t k = 0; k < D; k += LANES) {
                const __m256i km = ln_mask(D - k);
                const __m256 gm = gamma ? _mm256_maskload_ps(gamma + k, km) : _mm256_set1_ps(1.0f);
                const __m256 g = _mm256_mul_ps(_mm256_maskload_ps(gr + k, km), gm);
                const __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(xr + k, km), mi), ii);
                const __m256 o = _mm256_mul_ps(ii, _mm256_sub_ps(_mm256_sub_ps(g, ai), _mm256_mul_ps(xh, bi)));
                _mm256_maskstore_ps(vr + k, km, o);
            }
        }
    }
}

const fx_ln_kernels fx_ln_kernels_avx2 = {ln_forward_avx2, ln_param_sums_avx2,
                                            ln_backward_avx2};
