/* One causal self-attention head, forward and backward, composed from the transformer ops:
 *   scores = Q K^T (tensor_bmm, trans_b) / sqrt(Dh) (tensor_scale), causal mask with -Inf into
 *   an fp32 tensor (tensor_causal_mask), P = softmax (tensor_softmax), dropout on the attention
 *   weights (tensor_dropout), O = P_drop V (tensor_bmm); the backward through
 *   tensor_bmm_backward, tensor_dropout_backward, tensor_softmax_backward and the mask.
 * This is the test that the existing dropout covers attention weights: it is applied to the
 * [B, H, S, S] probabilities, its mask (recovered by dropping a tensor of ones with the same key)
 * is reproduced by the backward pass, and dropped weights are exact zeros in every format.
 *
 * Checks: the fp32 chain's dQ, dK, dV against central differences of L = sum dO * O (with the
 * dropout mask fixed by its key); every format's O and dQ, dK, dV against an fp64 reference of
 * the whole chain, normwise: max|y - r| <= 16 u max|r| (u = 2^-24 fp32, 2^-11 fp16, 2^-8 bf16,
 * 2^-14 for the shared-exponent formats, whose mantissas carry 15 bits at the tensor's
 * maximum): a handful of roundings of relative size u, each amplified at most by the softmax's
 * and the products' condition numbers of this well-scaled data (|scores| < 3).
 */
#include "flexpoint_nn.h"
#include "flexpoint_gpu.h"
#include "nn_misc_util.h"

enum { B = 2, H = 2, S = 6, DH = 8 };
#define NQ (B * H * S * DH)
#define NP (B * H * S * S)
static const double P_DROP = 0.25;
static const uint64_t SEED = 1234, STEP = 7;

static double u_of(fmt_t f)
{
    return fmt_is_shared_exponent(f) ? 0x1p-14 : nn_ulp(f);
}

/* fp64 reference of the chain; mask[i] = dropout factor of element i (0 or 1/(1-p)) */
static void ref_attention(const double *q, const double *k, const double *v, const double *mask,
                          const double *dout, double *o, double *dq, double *dk, double *dv)
{
    static double p[NP], pd[NP], dp[NP], ds[NP];
    const double sc = 1.0 / sqrt((double)DH);
    for (int bh = 0; bh < B * H; bh++) {
        const double *Q = q + bh * S * DH, *K = k + bh * S * DH, *V = v + bh * S * DH;
        for (int i = 0; i < S; i++) {
            double row[S], m = -INFINITY, s = 0;
            for (int j = 0; j <= i; j++) {
                double t = 0;
                for (int d = 0; d < DH; d++) t += Q[i * DH + d] * K[j * DH + d];
                row[j] = t * sc;
                m = fmax(m, row[j]);
            }
            for (int j = 0; j <= i; j++) s += exp(row[j] - m);
            for (int j = 0; j < S; j++) {
                const int e = (bh * S + i) * S + j;
                p[e] = j <= i ? exp(row[j] - m) / s : 0.0;
                pd[e] = p[e] * mask[e];
            }
        }
        for (int i = 0; i < S; i++)
            for (int d = 0; d < DH; d++) {
                double t = 0;
                for (int j = 0; j < S; j++) t += pd[(bh * S + i) * S + j] * V[j * DH + d];
                o[(bh * S + i) * DH + d] = t;
            }
        if (!dq) continue;
        const double *dO = dout + bh * S * DH;
        for (int j = 0; j < S; j++)
            for (int d = 0; d < DH; d++) {
                double t = 0;
                for (int i = 0; i < S; i++) t += pd[(bh * S + i) * S + j] * dO[i * DH + d];
                dv[(bh * S + j) * DH + d] = t;
            }
        for (int i = 0; i < S; i++) {
            double dot = 0;
            for (int j = 0; j < S; j++) {
                const int e = (bh * S + i) * S + j;
                double t = 0;
                for (int d = 0; d < DH; d++) t += dO[i * DH + d] * V[j * DH + d];
                dp[e] = t * mask[e];
                dot += dp[e] * p[e];
            }
            for (int j = 0; j < S; j++) {
                const int e = (bh * S + i) * S + j;
                ds[e] = p[e] * (dp[e] - dot) * sc;
            }
        }
        for (int i = 0; i < S; i++)
            for (int d = 0; d < DH; d++) {
                double tq = 0, tk = 0;
                for (int j = 0; j < S; j++) {
                    tq += ds[(bh * S + i) * S + j] * K[j * DH + d];
                    tk += ds[(bh * S + j) * S + i] * Q[j * DH + d];
                }
                dq[(bh * S + i) * DH + d] = tq;
                dk[(bh * S + i) * DH + d] = tk;
            }
    }
}

typedef struct {
    tensor_t *q, *k, *v, *o, *dout, *dq, *dk, *dv;
} att_io;

/* the chain through the library; intermediates in format f (the masked scores in fp32) */
static void lib_attention(fmt_t f, att_io *io, int backward)
{
    int64_t sp[4] = {B, H, S, S};
    tensor_t *sc = nn_zeros(f, 4, sp), *masked = nn_zeros(FMT_FP32, 4, sp);
    tensor_t *p = nn_zeros(f, 4, sp), *pd = nn_zeros(f, 4, sp);
    CHECK_STATUS(tensor_bmm(sc, io->q, io->k, 0, 1), FX_OK);
    CHECK_STATUS(tensor_scale(sc, sc, 1.0 / sqrt((double)DH)), FX_OK);
    CHECK_STATUS(tensor_causal_mask(masked, sc, -INFINITY), FX_OK);
    CHECK_STATUS(tensor_softmax(p, masked, -1), FX_OK);
    CHECK_STATUS(tensor_dropout(pd, p, P_DROP, SEED, STEP), FX_OK);
    CHECK_STATUS(tensor_bmm(io->o, pd, io->v, 0, 0), FX_OK);
    if (backward) {
        tensor_t *dpd = nn_zeros(f, 4, sp), *dp = nn_zeros(f, 4, sp), *ds = nn_zeros(f, 4, sp);
        CHECK_STATUS(tensor_bmm_backward(dpd, io->dv, io->dout, pd, io->v, 0, 0), FX_OK);
        CHECK_STATUS(tensor_dropout_backward(dp, dpd, P_DROP, SEED, STEP), FX_OK);
        CHECK_STATUS(tensor_softmax_backward(ds, dp, p, -1), FX_OK);
        CHECK_STATUS(tensor_causal_mask(ds, ds, 0.0), FX_OK);
        CHECK_STATUS(tensor_scale(ds, ds, 1.0 / sqrt((double)DH)), FX_OK);
        CHECK_STATUS(tensor_bmm_backward(io->dq, io->dk, ds, io->q, io->k, 0, 1), FX_OK);
        tensor_free(dpd);
        tensor_free(dp);
        tensor_free(ds);
    }
    /* dropped attention weights are exact zeros */
    double *pv = nn_doubles(NP), *pdv = nn_doubles(NP);
    nn_read(p, pv);
    nn_read(pd, pdv);
    int nz = 0;
    for (int i = 0; i < NP; i++) nz += pdv[i] == 0 && pv[i] != 0;
    CHECK(nz > 0 && nz < NP / 2, "dropout on attention weights (%s): %d dropped", fmt_name(f), nz);
    free(pv);
    free(pdv);
    tensor_free(sc);
    tensor_free(masked);
    tensor_free(p);
    tensor_free(pd);
}

/* Device tensors: the transformer ops have no device kernels and refuse them with
 * FX_EUNSUPPORTED naming the tensor (runs where a CUDA device is usable). */
static void device_refused(void)
{
    if (flexpoint_gpu_device_count() < 1) {
        printf("device tensors: no CUDA device, skipped\n");
        return;
    }
    int64_t sh[3] = {2, 3, 3};
    tensor_t *d = tensor_new_device(FMT_FP32, 3, sh), *h = nn_zeros(FMT_FP32, 3, sh);
    if (!d) {
        printf("device tensors: %s, skipped\n", flexpoint_last_error());
        tensor_free(h);
        return;
    }
    float gam[3] = {1, 1, 1}, m[18] = {0}, v[18] = {0};
    int32_t idx[2] = {0, 1};
    tensor_t *gs[1] = {d};
    int64_t st[2] = {3, 3}, sy[2] = {2, 3};
    tensor_t *tab = tensor_new_device(FMT_FP32, 2, st), *y2 = nn_zeros(FMT_FP32, 2, sy);
    CHECK_STATUS(tensor_softmax(h, d, -1), FX_EUNSUPPORTED);
    CHECK(strstr(flexpoint_last_error(), "tensor_softmax") != NULL, "%s", flexpoint_last_error());
    CHECK_STATUS(tensor_log_softmax_backward(h, h, d, -1), FX_EUNSUPPORTED);
    CHECK_STATUS(tensor_layernorm(h, d, gam, NULL, 1e-5, NULL, NULL), FX_EUNSUPPORTED);
    CHECK_STATUS(tensor_layernorm_backward(h, NULL, NULL, h, d, NULL, 1e-5), FX_EUNSUPPORTED);
    CHECK_STATUS(tensor_bmm(h, d, h, 0, 0), FX_EUNSUPPORTED);
    CHECK_STATUS(tensor_bmm_backward(h, NULL, h, d, h, 0, 0), FX_EUNSUPPORTED);
    CHECK_STATUS(tensor_causal_mask(h, d, 0.0), FX_EUNSUPPORTED);
    CHECK_STATUS(tensor_masked_fill(h, h, d, 0.0), FX_EUNSUPPORTED);
    if (tab) {
        CHECK_STATUS(tensor_embedding(y2, tab, idx, 2), FX_EUNSUPPORTED);
        CHECK_STATUS(tensor_embedding_backward(tab, y2, idx, 2), FX_EUNSUPPORTED);
    }
    CHECK_STATUS(fx_clip_grad_norm(gs, 1, 1.0, NULL), FX_EUNSUPPORTED);
    CHECK_STATUS(fx_adamw_step(d, d, NULL, m, v, 0.1, 0.9, 0.999, 1e-8, 0.1, 1, 0, 1, 1),
                 FX_EUNSUPPORTED);
    tensor_free(d);
    tensor_free(h);
    tensor_free(tab);
    tensor_free(y2);
}

static double normwise(const tensor_t *t, const double *ref, int64_t n)
{
    double *y = nn_doubles(n), e = 0, m = 0;
    nn_read(t, y);
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs(y[i] - ref[i]));
        m = fmax(m, fabs(ref[i]));
    }
    free(y);
    return m > 0 ? e / m : e;
}

int main(void)
{
    int64_t sq[4] = {B, H, S, DH}, sp[4] = {B, H, S, S};
    test_rng r;
    test_rng_seed(&r, 4242);
    double q[NQ], k[NQ], v[NQ], dout[NQ], mask[NP];
    for (int i = 0; i < NQ; i++) {
        q[i] = test_rng_normal(&r);
        k[i] = test_rng_normal(&r);
        v[i] = test_rng_normal(&r);
        dout[i] = test_rng_normal(&r);
    }
    /* the dropout factors of the key: dropout of a tensor of ones */
    {
        tensor_t *ones = nn_zeros(FMT_FP32, 4, sp), *m = nn_zeros(FMT_FP32, 4, sp);
        float one[NP];
        for (int i = 0; i < NP; i++) one[i] = 1.0f;
        CHECK_STATUS(tensor_from_f32(ones, one), FX_OK);
        CHECK_STATUS(tensor_dropout(m, ones, P_DROP, SEED, STEP), FX_OK);
        nn_read(m, mask);
        tensor_free(ones);
        tensor_free(m);
    }
    for (int k_ = 0; k_ < FMT_COUNT; k_++) {
        fmt_t f = NN_FORMATS[k_];
        double qs[NQ], ks[NQ], vs[NQ], ds[NQ];
        memcpy(qs, q, sizeof q);
        memcpy(ks, k, sizeof k);
        memcpy(vs, v, sizeof v);
        memcpy(ds, dout, sizeof dout);
        att_io io = {nn_tensor(f, 4, sq, qs), nn_tensor(f, 4, sq, ks), nn_tensor(f, 4, sq, vs),
                     nn_zeros(f, 4, sq),      nn_tensor(f, 4, sq, ds), nn_zeros(f, 4, sq),
                     nn_zeros(f, 4, sq),      nn_zeros(f, 4, sq)};
        lib_attention(f, &io, 1);
        double o[NQ], dq[NQ], dk[NQ], dv[NQ];
        ref_attention(qs, ks, vs, mask, ds, o, dq, dk, dv);
        const double bound = 16 * u_of(f);
        const double eo = normwise(io.o, o, NQ), eq = normwise(io.dq, dq, NQ);
        const double ek = normwise(io.dk, dk, NQ), ev = normwise(io.dv, dv, NQ);
        printf("attention %-8s normwise errors: O %.2e dQ %.2e dK %.2e dV %.2e (bound %.2e)\n",
               fmt_name(f), eo, eq, ek, ev, bound);
        CHECK(eo <= bound && eq <= bound && ek <= bound && ev <= bound,
              "attention %s: errors O %g dQ %g dK %g dV %g > %g", fmt_name(f), eo, eq, ek, ev,
              bound);
        if (f == FMT_FP32) { /* central differences of L = sum dO * O, mask fixed by its key */
            double g[3][NQ];
            nn_read(io.dq, g[0]);
            nn_read(io.dk, g[1]);
            nn_read(io.dv, g[2]);
            tensor_t *ins[3] = {io.q, io.k, io.v};
            double *vals[3] = {qs, ks, vs};
            const double h = 1e-2;
            double gmax = 0;
            for (int w = 0; w < 3; w++)
                for (int i = 0; i < NQ; i++) gmax = fmax(gmax, fabs(g[w][i]));
            for (int w = 0; w < 3; w++)
                for (int i = 0; i < NQ; i += 3) {
                    float buf[NQ];
                    double l[2];
                    for (int s = 0; s < 2; s++) {
                        for (int j = 0; j < NQ; j++) buf[j] = (float)vals[w][j];
                        buf[i] = (float)(vals[w][i] + (s ? -h : h));
                        CHECK_STATUS(tensor_from_f32(ins[w], buf), FX_OK);
                        lib_attention(f, &io, 0);
                        double ov[NQ];
                        nn_read(io.o, ov);
                        l[s] = 0;
                        for (int j = 0; j < NQ; j++) l[s] += ds[j] * ov[j];
                    }
                    float orig[NQ];
                    for (int j = 0; j < NQ; j++) orig[j] = (float)vals[w][j];
                    CHECK_STATUS(tensor_from_f32(ins[w], orig), FX_OK);
                    const double fd = (l[0] - l[1]) / (2 * h);
                    CHECK(fabs(fd - g[w][i]) <= 2e-3 * gmax, "attention fd d%c[%d]: fd %.8g got "
                          "%.8g", "qkv"[w], i, fd, g[w][i]);
                }
        }
        tensor_free(io.q); tensor_free(io.k); tensor_free(io.v); tensor_free(io.o);
        tensor_free(io.dout); tensor_free(io.dq); tensor_free(io.dk); tensor_free(io.dv);
    }
    device_refused();
    return test_finish("test_nn_attention");
}
