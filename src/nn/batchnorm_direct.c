/* Batch norm's forward output straight into a shared-exponent y (batchnorm.c takes this route
 * for FLEX16_5/DFP16 mantissa inputs into a whole FLEX16_5/DFP16 output).
 *
 * The general route normalises every element into an fp32 stage (rounded to odd), and the write
 * then rounds the stage into y at the exponent it chooses from the stage's largest |value|: an
 * fp32 array written and read again, 8 MiB for one of ResNet-20's stage-1 layers at batch 128.
 * Here the write's exponent is known first, so each row is normalised into a small buffer and
 * rounded from there while it is in L1:
 *   - the largest |output| is exact without computing the outputs: per channel an output is
 *     y(v) = odd32(((v - mean) * a) + b) in double, a composition of monotone roundings of v, so
 *     its extreme values are those of the channel's smallest and largest input;
 *   - the write (fx_write_shared_with) decides the exponent from it as it would from the stage
 *     (DFP16 exactly, FLEX16_5 by Autoflex), and asks for the rounding through bn_quantize: each
 *     piece of a row is normalised by the level's kernel into fp32 (the stage's values) and
 *     rounded by the level's quant_f32 with the piece's element offset (the stage's rounding,
 *     stochastic rounding included), its statistics merged (maxima and counts, so in any
 *     order).
 * The same values are rounded by the same code as on the general route, so y, its exponent and
 * the write's statistics are the same bits (tests/test_bn_kernels.c compares the two). */
#include "bn_direct.h"
#include "nn_stage.h"
#include "../core/backend.h"
#include "../core/dispatch.h"
#include "../flex/flex_math.h"

#include <math.h>
#include <stdatomic.h>

#define PIECE 1024 /* values normalised into the stack buffer at a time */

static atomic_int direct_enabled = 1;
static atomic_llong direct_runs;

void fx_bn_direct_set_enabled(int on) { atomic_store(&direct_enabled, on != 0); }
int64_t fx_bn_direct_runs(void) { return atomic_load(&direct_runs); }

typedef struct bn_direct_ctx {
    const fx_bn_kernels *k;
    const fx_backend *be;
    const fx_bn_src *x;
    const fx_bn_dims *d;
    const double *mu, *a, *b; /* per channel */
    int16_t *dst;             /* y's mantissas */
    int nt;
} bn_direct_ctx;

static int bn_quantize(void *vctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    const bn_direct_ctx *c = vctx;
    const int64_t C = c->d->C, S = c->d->S, rows = c->d->N * C;
    fx_qstats_init(q);
    const int nt = c->nt;
    /* Each thread merges its pieces' statistics into a local and into *q once: merged per
     * piece into per-thread entries that share cache lines, the two cores passed those lines
     * back and forth after every row of a small layer (ResNet-20's 64-channel batch norm, batch
     * 128, two threads on a Zen 5: 0.61 ms that way, 0.24 ms this way). The merges are sums and
     * maxima, so their order does not change the result. */
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        fx_qstats mine;
        fx_qstats_init(&mine);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t row = 0; row < rows; row++) {
            const int64_t ch = row % C;
            float buf[PIECE];
            for (int64_t s0 = 0; s0 < S; s0 += PIECE) {
                const int64_t o = row * S + s0, len = S - s0 < PIECE ? S - s0 : PIECE;
                c->k->normalize(c->x, o, buf, len, c->mu[ch], c->a[ch], c->b[ch], 1, NULL);
                fx_qstats st;
                fx_qstats_init(&st);
                c->be->cvt.quant_f32(buf, keep ? c->dst + o : NULL, len, e, r, o, &st);
                fx_qstats_merge(&mine, &st);
            }
        }
#ifdef _OPENMP
#pragma omp critical(fx_bn_quantize_merge)
#endif
        fx_qstats_merge(q, &mine);
    }
    return FX_OK;
}

int fx_bn_direct_ok(const tensor_t *y, const tensor_t *x, const fx_bn_src *xs)
{
    return atomic_load(&direct_enabled) && xs->kind == FX_BN_I16 &&
           fmt_is_shared_exponent(y->fmt) && fx_tensor_covers_storage(y) && y->st != x->st;
}

int fx_bn_forward_direct(tensor_t *y, const fx_bn_src *xs, const fx_bn_dims *d,
                         const fx_bn_kernels *k, const double *mu, const double *a,
                         const double *b, const char *func)
{
    const int64_t C = d->C, S = d->S;
    const int16_t *m = xs->p;
    if (d->N * S == 0) return FX_BN_DIRECT_DECLINED; /* no inputs, no extremes: the stage route */
    const int nt = nn_threads_for(d->N * C * S);
    /* the largest |output| from each channel's extreme inputs (the portable kernel on them) */
    double true_max = 0.0;
    int nonfinite = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && C > 1) \
    reduction(max : true_max) reduction(| : nonfinite)
#endif
    for (int64_t ch = 0; ch < C; ch++) {
        int16_t lo = INT16_MAX, hi = INT16_MIN;
        for (int64_t n = 0; n < d->N; n++) {
            const int16_t *p = m + (n * C + ch) * S;
            for (int64_t s = 0; s < S; s++) {
                lo = p[s] < lo ? p[s] : lo;
                hi = p[s] > hi ? p[s] : hi;
            }
        }
        const int16_t ends[2] = {lo, hi};
        const fx_bn_src e = {ends, FX_BN_I16, xs->scale};
        float q[2];
        fx_bn_kernels_portable.normalize(&e, 0, q, 2, mu[ch], a[ch], b[ch], 1, NULL);
        for (int i = 0; i < 2; i++) {
            const double v = fabs((double)q[i]);
            nonfinite |= !isfinite(v);
            if (isfinite(v)) true_max = v > true_max ? v : true_max;
        }
    }
    if (nonfinite) return FX_BN_DIRECT_DECLINED; /* the stage route counts them */
    bn_direct_ctx c = {k, fx_backend_active(), xs, d, mu, a, b, (int16_t *)fx_tensor_base(y), nt};
    fx_shared_src src = {.kind = FX_STAGE_F32, .true_max = true_max, .ctx = &c,
                         .quantize = bn_quantize};
    const int rc = fx_write_shared_with(y, &src, func);
    if (rc == FX_OK) atomic_fetch_add(&direct_runs, 1);
    return rc;
}
