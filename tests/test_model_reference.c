/* One pre-norm transformer block built with the model-definition API, against an independent
 * fp64 reference of the same network written here in plain loops:
 *   emb (token + position) -> ln1 -> attention (2 causal heads) -> res1 = att + emb -> ln2 ->
 *   fc (4D) -> gelu -> proj (D) -> res2 = proj + res1 -> lnf -> head, softmax cross-entropy
 *   averaged over every position of the batch.
 * - the reference's gradient of every element of every parameter against five-point central
 *   differences of its own loss in double (bound 1e-7 relative: both are fp64);
 * - the reference's logits at a position do not move with a later token and do move with the
 *   token at that position (the mask it implements is the causal one), so that the comparison
 *   below is not of two equally wrong masks;
 * - the fp32 model (FMT_FP32), given the same weights and tokens, against the reference: the
 *   loss, every logit and every element of every parameter gradient within stated bounds, on
 *   the best backend of the CPU and on the scalar one.
 * The reference shares nothing with the library but the weights and the token numbers.
 */
#define _POSIX_C_SOURCE 200809L

#include "flexpoint_model.h"
#include "train/model.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME "test_model_reference"

enum { B = 2, T = 5, V = 6, D = 8, H = 2, DH = D / H, F = 4 * D, R = B * T };

/* The parameters in the order the model creates them (fx_model_def_* add them in this order);
 * the test checks the model's names and sizes against this table. */
enum { P_TOK, P_POS, P_G1, P_B1, P_WQ, P_WK, P_WV, P_WO, P_G2, P_B2, P_W1, P_C1, P_W2, P_C2,
       P_GF, P_BF, P_WH, P_CH, NP };
static const char *const pname[NP] = {
    "emb.tok",   "emb.pos",  "ln1.gamma", "ln1.beta", "att.wq",    "att.wk",
    "att.wv",    "att.wo",   "ln2.gamma", "ln2.beta", "fc.w",      "fc.b",
    "proj.w",    "proj.b",   "lnf.gamma", "lnf.beta", "head.w",    "head.b"};
static const int psize[NP] = {V * D, T * D, D, D, D * D, D * D, D * D, D * D, D, D,
                              F * D, F,     D * F, D, D, D, V * D, V};

#define LN_EPS 1e-5

typedef struct {
    double *p[NP], *g[NP];
    int32_t tok[R], tgt[R];
} ref_net;

/* ---------------------------------------------------------------- fp64 building blocks ---- */

/* y[r][o] = sum_i x[r][i] w[o][i] + b[o] (b may be NULL). */
static void lin_fwd(double *y, const double *x, const double *w, const double *b, int rows,
                    int in, int out)
{
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < in; i++) s += x[r * in + i] * w[o * in + i];
            y[r * out + o] = s;
        }
}

/* Adds the gradients of lin_fwd: dx += dy w, dw += dy^T x, db += sum_r dy (each may be NULL). */
static void lin_bwd(double *dx, double *dw, double *db, const double *dy, const double *x,
                    const double *w, int rows, int in, int out)
{
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            const double g = dy[r * out + o];
            if (db) db[o] += g;
            for (int i = 0; i < in; i++) {
                if (dw) dw[o * in + i] += g * x[r * in + i];
                if (dx) dx[r * in + i] += g * w[o * in + i];
            }
        }
}

/* Layer norm over D per row (biased variance), keeping xhat and 1/sigma for the backward. */
static void ln_fwd(double *y, double *xhat, double *rstd, const double *x, const double *g,
                   const double *b, int rows)
{
    for (int r = 0; r < rows; r++) {
        const double *xr = x + r * D;
        double mu = 0, var = 0;
        for (int k = 0; k < D; k++) mu += xr[k];
        mu /= D;
        for (int k = 0; k < D; k++) var += (xr[k] - mu) * (xr[k] - mu);
        var /= D;
        rstd[r] = 1.0 / sqrt(var + LN_EPS);
        for (int k = 0; k < D; k++) {
            xhat[r * D + k] = (xr[k] - mu) * rstd[r];
            y[r * D + k] = xhat[r * D + k] * g[k] + b[k];
        }
    }
}

/* Adds the layer norm's gradients: dx from the chain rule through mean and variance. */
static void ln_bwd(double *dx, double *dg, double *db, const double *dy, const double *xhat,
                   const double *rstd, const double *g, int rows)
{
    for (int r = 0; r < rows; r++) {
        double m1 = 0, m2 = 0; /* means of dy*g and of dy*g*xhat over the row */
        for (int k = 0; k < D; k++) {
            const double gy = dy[r * D + k] * g[k];
            m1 += gy;
            m2 += gy * xhat[r * D + k];
            dg[k] += dy[r * D + k] * xhat[r * D + k];
            db[k] += dy[r * D + k];
        }
        m1 /= D;
        m2 /= D;
        for (int k = 0; k < D; k++)
            dx[r * D + k] += rstd[r] * (dy[r * D + k] * g[k] - m1 - xhat[r * D + k] * m2);
    }
}

static double gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double gelu_d(double x)
{
    return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * acos(-1.0));
}

/* Every intermediate of one forward pass (the backward reads them). */
typedef struct {
    double e[R * D], a[R * D], xh1[R * D], rs1[R];
    double q[R * D], k[R * D], v[R * D], p[B * H * T * T], oc[R * D], att[R * D];
    double r1[R * D], n2[R * D], xh2[R * D], rs2[R];
    double h1[R * F], ge[R * F], h2[R * D], r2[R * D], nf[R * D], xhf[R * D], rsf[R];
    double z[R * V];
} ref_acts;

/* The mean cross-entropy of the batch; fills the intermediates. */
static double ref_forward(const ref_net *n, ref_acts *s)
{
    double *const *P = n->p;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < D; c++)
            s->e[r * D + c] = P[P_TOK][n->tok[r] * D + c] + P[P_POS][(r % T) * D + c];
    ln_fwd(s->a, s->xh1, s->rs1, s->e, P[P_G1], P[P_B1], R);
    lin_fwd(s->q, s->a, P[P_WQ], NULL, R, D, D);
    lin_fwd(s->k, s->a, P[P_WK], NULL, R, D, D);
    lin_fwd(s->v, s->a, P[P_WV], NULL, R, D, D);
    const double scale = 1.0 / sqrt((double)DH);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                double *pr = s->p + ((b * H + h) * T + i) * T, mx = -INFINITY, se = 0;
                /* causal: position i attends to positions 0..i */
                for (int j = 0; j <= i; j++) {
                    double dot = 0;
                    for (int c = 0; c < DH; c++)
                        dot += s->q[(b * T + i) * D + h * DH + c] * s->k[(b * T + j) * D + h * DH + c];
                    pr[j] = dot * scale;
                    mx = fmax(mx, pr[j]);
                }
                for (int j = 0; j <= i; j++) se += (pr[j] = exp(pr[j] - mx));
                for (int j = 0; j < T; j++) pr[j] = j <= i ? pr[j] / se : 0.0;
                for (int c = 0; c < DH; c++) {
                    double o = 0;
                    for (int j = 0; j <= i; j++) o += pr[j] * s->v[(b * T + j) * D + h * DH + c];
                    s->oc[(b * T + i) * D + h * DH + c] = o;
                }
            }
    lin_fwd(s->att, s->oc, P[P_WO], NULL, R, D, D);
    for (int i = 0; i < R * D; i++) s->r1[i] = s->att[i] + s->e[i];
    ln_fwd(s->n2, s->xh2, s->rs2, s->r1, P[P_G2], P[P_B2], R);
    lin_fwd(s->h1, s->n2, P[P_W1], P[P_C1], R, D, F);
    for (int i = 0; i < R * F; i++) s->ge[i] = gelu(s->h1[i]);
    lin_fwd(s->h2, s->ge, P[P_W2], P[P_C2], R, F, D);
    for (int i = 0; i < R * D; i++) s->r2[i] = s->h2[i] + s->r1[i];
    ln_fwd(s->nf, s->xhf, s->rsf, s->r2, P[P_GF], P[P_BF], R);
    lin_fwd(s->z, s->nf, P[P_WH], P[P_CH], R, D, V);
    double loss = 0;
    for (int r = 0; r < R; r++) {
        const double *zr = s->z + r * V;
        double mx = zr[0], se = 0;
        for (int j = 1; j < V; j++) mx = fmax(mx, zr[j]);
        for (int j = 0; j < V; j++) se += exp(zr[j] - mx);
        loss += mx + log(se) - zr[n->tgt[r]];
    }
    return loss / R;
}

/* Every parameter gradient of the mean cross-entropy into n->g (overwritten). */
static void ref_backward(ref_net *n, const ref_acts *s)
{
    double *const *P = n->p, *const *G = n->g;
    for (int i = 0; i < NP; i++) memset(G[i], 0, (size_t)psize[i] * sizeof(double));
    static double dz[R * V], dnf[R * D], dr2[R * D], dge[R * F], dh1[R * F], dn2[R * D],
        dr1[R * D], doc[R * D], dq[R * D], dk[R * D], dv[R * D], da[R * D], de[R * D];
    memset(dnf, 0, sizeof dnf);
    memset(dr2, 0, sizeof dr2);
    memset(dge, 0, sizeof dge);
    memset(dn2, 0, sizeof dn2);
    memset(doc, 0, sizeof doc);
    memset(dq, 0, sizeof dq);
    memset(dk, 0, sizeof dk);
    memset(dv, 0, sizeof dv);
    memset(da, 0, sizeof da);
    memset(de, 0, sizeof de);
    /* softmax cross-entropy averaged over R rows: (softmax(z) - onehot) / R */
    for (int r = 0; r < R; r++) {
        const double *zr = s->z + r * V;
        double mx = zr[0], se = 0;
        for (int j = 1; j < V; j++) mx = fmax(mx, zr[j]);
        for (int j = 0; j < V; j++) se += exp(zr[j] - mx);
        for (int j = 0; j < V; j++)
            dz[r * V + j] = (exp(zr[j] - mx) / se - (j == n->tgt[r])) / R;
    }
    lin_bwd(dnf, G[P_WH], G[P_CH], dz, s->nf, P[P_WH], R, D, V);
    ln_bwd(dr2, G[P_GF], G[P_BF], dnf, s->xhf, s->rsf, P[P_GF], R);
    /* res2 = proj + res1: dr2 reaches both */
    memcpy(dr1, dr2, sizeof dr1);
    lin_bwd(dge, G[P_W2], G[P_C2], dr2, s->ge, P[P_W2], R, F, D);
    for (int i = 0; i < R * F; i++) dh1[i] = dge[i] * gelu_d(s->h1[i]);
    lin_bwd(dn2, G[P_W1], G[P_C1], dh1, s->n2, P[P_W1], R, D, F);
    ln_bwd(dr1, G[P_G2], G[P_B2], dn2, s->xh2, s->rs2, P[P_G2], R);
    /* res1 = att + emb */
    memcpy(de, dr1, sizeof de);
    lin_bwd(doc, G[P_WO], NULL, dr1, s->oc, P[P_WO], R, D, D);
    const double scale = 1.0 / sqrt((double)DH);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const double *pr = s->p + ((b * H + h) * T + i) * T;
                const double *doi = doc + (b * T + i) * D + h * DH;
                double dp[T], dot = 0;
                for (int j = 0; j <= i; j++) {
                    dp[j] = 0;
                    for (int c = 0; c < DH; c++) {
                        dp[j] += doi[c] * s->v[(b * T + j) * D + h * DH + c];
                        dv[(b * T + j) * D + h * DH + c] += pr[j] * doi[c];
                    }
                    dot += dp[j] * pr[j];
                }
                for (int j = 0; j <= i; j++) {
                    const double ds = pr[j] * (dp[j] - dot) * scale; /* softmax, then scale */
                    for (int c = 0; c < DH; c++) {
                        dq[(b * T + i) * D + h * DH + c] += ds * s->k[(b * T + j) * D + h * DH + c];
                        dk[(b * T + j) * D + h * DH + c] += ds * s->q[(b * T + i) * D + h * DH + c];
                    }
                }
            }
    lin_bwd(da, G[P_WQ], NULL, dq, s->a, P[P_WQ], R, D, D);
    lin_bwd(da, G[P_WK], NULL, dk, s->a, P[P_WK], R, D, D);
    lin_bwd(da, G[P_WV], NULL, dv, s->a, P[P_WV], R, D, D);
    ln_bwd(de, G[P_G1], G[P_B1], da, s->xh1, s->rs1, P[P_G1], R);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < D; c++) {
            G[P_TOK][n->tok[r] * D + c] += de[r * D + c];
            G[P_POS][(r % T) * D + c] += de[r * D + c];
        }
}

/* ---------------------------------------------------------------- the checks --------------- */

static ref_acts g_acts; /* large: kept off the stack */

/* The reference's gradient of every parameter element against central differences of its own
 * fp64 loss, five-point (error O(h^4)): with h = 1e-3 the truncation is ~1e-12 and the
 * cancellation ~1e-16 / 1e-3 ~ 1e-13, against gradients of order 1e-3..1. */
#define FD_STEP 1e-3
static void reference_vs_differences(ref_net *n)
{
    ref_forward(n, &g_acts);
    ref_backward(n, &g_acts);
    double worst = 0;
    int worst_p = -1, count = 0;
    for (int i = 0; i < NP; i++) {
        double gmax = 0;
        for (int j = 0; j < psize[i]; j++) gmax = fmax(gmax, fabs(n->g[i][j]));
        CHECK(gmax > 0, "reference: %s has an all-zero gradient", pname[i]);
        for (int j = 0; j < psize[i]; j++) {
            const double w0 = n->p[i][j];
            double l[4];
            for (int k = 0; k < 4; k++) {
                n->p[i][j] = w0 + FD_STEP * (k < 2 ? k - 2 : k - 1); /* -2h, -h, +h, +2h */
                l[k] = ref_forward(n, &g_acts);
            }
            n->p[i][j] = w0;
            const double fd = (l[0] - 8 * l[1] + 8 * l[2] - l[3]) / (12 * FD_STEP);
            const double err = fabs(fd - n->g[i][j]) / (fabs(n->g[i][j]) + 1e-3 * gmax + 1e-12);
            if (err > worst) {
                worst = err;
                worst_p = i;
            }
            count++;
        }
    }
    CHECK(worst < 1e-7, "reference vs central differences: worst relative error %.3g (%s)",
          worst, worst_p >= 0 ? pname[worst_p] : "?");
    printf("%s: fp64 reference vs central differences: %d elements, worst relative error "
           "%.2e (bound 1e-7)\n", NAME, count, worst);
}

/* The reference's mask: changing the last token of window 0 leaves the losses of its earlier
 * positions as they were and changes the last one. */
static void reference_is_causal(ref_net *n)
{
    double before[V * T], after[V * T];
    ref_forward(n, &g_acts);
    memcpy(before, g_acts.z, sizeof before);
    const int32_t saved = n->tok[T - 1];
    n->tok[T - 1] = (saved + 1) % V;
    ref_forward(n, &g_acts);
    memcpy(after, g_acts.z, sizeof after);
    n->tok[T - 1] = saved;
    CHECK(memcmp(before, after, (T - 1) * V * sizeof(double)) == 0,
          "reference: an earlier position saw a later token");
    CHECK(memcmp(before + (T - 1) * V, after + (T - 1) * V, V * sizeof(double)) != 0,
          "reference: the changed position's logits did not change");
}

static fx_model_def *block_def(void)
{
    fx_model_def *d = NULL;
    int64_t in[1] = {T};
    int rc = fx_model_def_new("ref_block", 1, in, &d);
    if (!rc) rc = fx_model_def_embedding(d, "emb", NULL, V, D);
    if (!rc) rc = fx_model_def_layernorm(d, "ln1", NULL);
    if (!rc) rc = fx_model_def_attention(d, "att", NULL, H);
    if (!rc) rc = fx_model_def_add(d, "res1", NULL, "emb");
    if (!rc) rc = fx_model_def_layernorm(d, "ln2", NULL);
    if (!rc) rc = fx_model_def_token_linear(d, "fc", NULL, F);
    if (!rc) rc = fx_model_def_activation(d, "gelu", "act", NULL);
    if (!rc) rc = fx_model_def_token_linear(d, "proj", NULL, D);
    if (!rc) rc = fx_model_def_add(d, "res2", NULL, "res1");
    if (!rc) rc = fx_model_def_layernorm(d, "lnf", NULL);
    if (!rc) rc = fx_model_def_token_linear(d, "head", NULL, V);
    CHECK(rc == FX_OK, "building the definition: %s", flexpoint_last_error());
    if (rc) {
        fx_model_def_free(d);
        return NULL;
    }
    return d;
}

/* Largest |a - b| over n elements, and the largest |b|. */
static void max_diff(const float *a, const double *b, int n, double *diff, double *bmax)
{
    *diff = *bmax = 0;
    for (int i = 0; i < n; i++) {
        *diff = fmax(*diff, fabs((double)a[i] - b[i]));
        *bmax = fmax(*bmax, fabs(b[i]));
    }
}

/* The fp32 model on the current backend against the reference. */
static void model_vs_reference(ref_net *n, const char *backend)
{
    fx_model_def *d = block_def();
    if (!d) return;
    fx_train_config cfg;
    fx_train_config_default(&cfg);
    cfg.fmt = FMT_FP32;
    cfg.batch_size = B;
    cfg.seed = 3;
    fx_model m;
    int rc = fx_model_build_def(&m, &cfg, d, 1, 1, T, V);
    CHECK(rc == FX_OK, "build: %s", flexpoint_last_error());
    if (!rc) rc = fx_model_alloc_ctx(&m, FX_CTX_TRAIN);
    CHECK(rc == FX_OK && m.seq == T, "alloc: %s", flexpoint_last_error());
    CHECK(rc || m.nparams == NP, "the model has %d parameters, the reference %d", m.nparams, NP);
    for (int i = 0; i < NP && !rc && m.nparams == NP; i++)
        CHECK(strcmp(m.params[i].name, pname[i]) == 0 && m.params[i].n == psize[i],
              "parameter %d: the model's %s of %lld, the reference's %s of %d", i,
              m.params[i].name, (long long)m.params[i].n, pname[i], psize[i]);
    if (rc || m.nparams != NP) {
        fx_model_free(&m);
        fx_model_def_free(d);
        return;
    }
    /* the reference's weights, written into the model's fp32 tensors (exact: they were drawn
     * as floats) */
    float *buf = malloc((size_t)(F * D) * sizeof *buf);
    for (int i = 0; i < NP; i++) {
        for (int j = 0; j < psize[i]; j++) buf[j] = (float)n->p[i][j];
        CHECK_STATUS(tensor_from_f32(m.params[i].w, buf), FX_OK);
    }
    memcpy(m.tokens[FX_CTX_TRAIN], n->tok, sizeof n->tok);
    tensor_t *out = NULL;
    CHECK_STATUS(fx_model_forward(&m, FX_CTX_TRAIN, &out), FX_OK);
    const double lref = ref_forward(n, &g_acts);
    ref_backward(n, &g_acts);
    float z[R * V], lossf = NAN;
    int64_t ls[3] = {B, T, V}, l2s[2] = {R, V};
    tensor_t *dl = tensor_new(FMT_FP32, 3, ls);
    tensor_t *o2 = out ? tensor_view_reshape(out, 2, l2s) : NULL, *d2 = tensor_view_reshape(dl, 2, l2s);
    CHECK(o2 && d2, "views: %s", flexpoint_last_error());
    if (o2 && d2) {
        CHECK_STATUS(tensor_to_f32(out, z), FX_OK);
        CHECK_STATUS(tensor_softmax_cross_entropy(&lossf, d2, o2, n->tgt, 1.0), FX_OK);
        CHECK_STATUS(fx_model_backward(&m, dl), FX_OK);
        /* fp32 arithmetic through 11 layers of width <= 32. Measured (AVX2 and scalar
         * backends): logits within 3e-7 of their largest value, the loss within 5e-8
         * relative, each gradient within 2e-6 of its parameter's largest gradient; the
         * bounds leave a factor of 10 or more */
        double dz, zmax;
        max_diff(z, g_acts.z, R * V, &dz, &zmax);
        CHECK(dz <= 1e-5 * zmax, "logits: fp32 vs fp64 differ by %.3g (largest %.3g)", dz, zmax);
        const double dloss = fabs((double)lossf - lref);
        CHECK(dloss <= 1e-6 * lref, "loss: fp32 %.9g, fp64 %.12g", (double)lossf, lref);
        printf("%s: %s backend: loss fp32 %.9g, fp64 %.12g (difference %.2e, bound %.2e); "
               "logits differ by %.2e of %.2e (bound 1e-5 relative)\n", NAME, backend,
               (double)lossf, lref, dloss, 1e-6 * lref, dz, zmax);
        double worst = 0;
        int worst_p = -1;
        for (int i = 0; i < NP; i++) {
            CHECK_STATUS(tensor_to_f32(m.params[i].g, buf), FX_OK);
            double dg, gmax;
            max_diff(buf, n->g[i], psize[i], &dg, &gmax);
            /* each gradient against the scale of its own parameter's gradient */
            const double rel = dg / gmax;
            CHECK(rel <= 2e-5, "%s: fp32 gradient differs from fp64 by %.3g (largest %.3g)",
                  pname[i], dg, gmax);
            if (rel > worst) {
                worst = rel;
                worst_p = i;
            }
        }
        printf("%s: %s backend: fp32 model vs fp64 reference: every element of %d parameter "
               "gradients, worst max|g32 - g64| / max|g64| %.2e (%s; bound 2e-5)\n", NAME,
               backend, NP, worst, worst_p >= 0 ? pname[worst_p] : "?");
    }
    free(buf);
    tensor_free(o2);
    tensor_free(d2);
    tensor_free(dl);
    fx_model_free(&m);
    fx_model_def_free(d);
}

int main(void)
{
    ref_net n;
    memset(&n, 0, sizeof n);
    int ok = 1;
    for (int i = 0; i < NP; i++) {
        n.p[i] = calloc((size_t)psize[i], sizeof(double));
        n.g[i] = calloc((size_t)psize[i], sizeof(double));
        ok = ok && n.p[i] && n.g[i];
    }
    if (!ok) return test_skip(NAME, "out of memory");
    /* weights drawn as floats (so that the fp32 model holds them exactly), larger than the
     * initial ones so that attention is far from uniform and the norms' gains matter */
    test_rng r;
    test_rng_seed(&r, 29);
    for (int i = 0; i < NP; i++)
        for (int j = 0; j < psize[i]; j++) {
            float w = (float)(test_rng_uniform(&r) * 1.6 - 0.8);
            if (i == P_G1 || i == P_G2 || i == P_GF) w += 1.0f;
            n.p[i][j] = w;
        }
    for (int i = 0; i < R; i++) {
        n.tok[i] = (int32_t)(test_rng_u64(&r) % V);
        n.tgt[i] = (int32_t)(test_rng_u64(&r) % V);
    }
    reference_vs_differences(&n);
    reference_is_causal(&n);
    /* the best backend this CPU has (chosen at start-up) and the scalar one: their fp32 sums
     * run in different orders */
    char best[32];
    snprintf(best, sizeof best, "%s", flexpoint_backend());
    model_vs_reference(&n, best);
    if (strcmp(best, "scalar") != 0) {
        CHECK_STATUS(flexpoint_set_backend("scalar"), FX_OK);
        model_vs_reference(&n, "scalar");
        CHECK_STATUS(flexpoint_set_backend(best), FX_OK);
    }
    for (int i = 0; i < NP; i++) {
        free(n.p[i]);
        free(n.g[i]);
    }
    return test_finish(NAME);
}
