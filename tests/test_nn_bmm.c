/* tensor_bmm (all four transpose combinations), tensor_bmm_backward, tensor_causal_mask and
 * tensor_masked_fill: every format x backend against fp64 references, the integer formats bit
 * for bit across backends and thread counts (and equal to tensor_matmul for one batch), the
 * backward passes against finite differences of the forward, special values, bad input.
 *
 * Bounds: the integer formats sum the int16 products exactly, so the only error is the write's
 * rounding (nn_bound with acc 0). The float formats run the fp32 GEMM on exactly widened
 * values: acc = (K + 2) u32 sum_k |a_ik| |b_kj| (the recursive-summation bound gamma_K with
 * room for the FMA order), then the output rounding of nn_bound. Masks copy kept elements
 * exactly (acc 0).
 */
#include "flexpoint_nn.h"
#include "nn_misc_util.h"
#include "core/backend.h"
#include "core/internal.h" /* fx_tensor_set_disposable */
#include "core/shared_matmul.h"
#include "nn/nn_ops.h"     /* fx_nn_bmm_h16_direct_runs */

typedef struct {
    const char *name;
    int64_t B0, B1, M, N, K;
} bmm_case;

static const bmm_case CASES[] = {
    {"1x[1,1,1]", 1, 1, 1, 1, 1},    {"2x[3,5,4]", 1, 2, 3, 5, 4},
    {"2x3x[7,9,16]", 2, 3, 7, 9, 16}, {"attention 2x4x[24,24,32]", 2, 4, 24, 24, 32},
    {"1x2x[40,33,300]", 1, 2, 40, 33, 300}, {"1x1x[33,40,300]", 1, 1, 33, 40, 300},
    {"K=0 1x2x[3,4,0]", 1, 2, 3, 4, 0},
};

/* stored shape of an operand [B0, B1, r, c] whose op is [R, C] */
static void op_shape(int64_t *sh, const bmm_case *c, int64_t R, int64_t C, int trans)
{
    sh[0] = c->B0;
    sh[1] = c->B1;
    sh[2] = trans ? C : R;
    sh[3] = trans ? R : C;
}

/* element (i, j) of op(t) in batch bt, t stored [r, c] per batch */
static double op_at(const double *t, const int64_t *sh, int64_t bt, int64_t i, int64_t j,
                    int trans)
{
    const int64_t r = trans ? j : i, cc = trans ? i : j;
    return t[bt * sh[2] * sh[3] + r * sh[3] + cc];
}

static void ref_bmm(const double *a, const int64_t *sa, const double *b, const int64_t *sb,
                    int ta, int tb, const bmm_case *c, double *out, double *acc)
{
    const int64_t B = c->B0 * c->B1;
    for (int64_t bt = 0; bt < B; bt++)
        for (int64_t i = 0; i < c->M; i++)
            for (int64_t j = 0; j < c->N; j++) {
                double s = 0, sa_ = 0;
                for (int64_t k = 0; k < c->K; k++) {
                    const double p = op_at(a, sa, bt, i, k, ta) * op_at(b, sb, bt, k, j, tb);
                    s += p;
                    sa_ += fabs(p);
                }
                out[(bt * c->M + i) * c->N + j] = s;
                if (acc) acc[(bt * c->M + i) * c->N + j] = (double)(c->K + 2) * NN_U32 * sa_;
            }
}

static void run_case(const bmm_case *c, fmt_t f, fmt_t fo, int ta, int tb, const char **bk,
                     int nbk)
{
    test_rng r;
    test_rng_seed(&r, 77 + (uint64_t)(c - CASES) * 5 + (uint64_t)f * 3 + (uint64_t)(2 * ta + tb));
    int64_t sa[4], sb[4], so[4] = {c->B0, c->B1, c->M, c->N};
    op_shape(sa, c, c->M, c->K, ta);
    op_shape(sb, c, c->K, c->N, tb);
    const int64_t na = nn_numel(4, sa), nb = nn_numel(4, sb), no = nn_numel(4, so);
    double *a = nn_doubles(na), *b = nn_doubles(nb), *ref = nn_doubles(no), *acc = nn_doubles(no);
    for (int64_t i = 0; i < na; i++) a[i] = test_rng_normal(&r);
    for (int64_t i = 0; i < nb; i++) b[i] = 2 * test_rng_normal(&r);
    tensor_t *tA = nn_tensor(f, 4, sa, a), *tB = nn_tensor(f, 4, sb, b);
    ref_bmm(a, sa, b, sb, ta, tb, c, ref, fmt_is_shared_exponent(f) ? NULL : acc);
    char what[200];
    tensor_t *first = NULL;
    const int integer = fmt_is_shared_exponent(f);
    for (int k = 0; k < nbk; k++) {
        CHECK_STATUS(flexpoint_set_backend(bk[k]), FX_OK);
        tensor_t *o = nn_zeros(fo, 4, so);
        snprintf(what, sizeof what, "bmm %s ta=%d tb=%d %s->%s %s", c->name, ta, tb, fmt_name(f),
                 fmt_name(fo), bk[k]);
        int rc = tensor_bmm(o, tA, tB, ta, tb);
        CHECK(rc == FX_OK, "%s: status %d: %s", what, rc, flexpoint_last_error());
        nn_check(what, o, ref, integer ? NULL : acc, no);
        if (!first) first = o;
        else {
            if (integer) CHECK(nn_same_bits(first, o), "%s: bits differ from %s", what, bk[0]);
            tensor_free(o);
        }
    }
    if (integer) {
        int prev = flexpoint_set_num_threads(1);
        tensor_t *o1 = nn_zeros(fo, 4, so), *o3 = nn_zeros(fo, 4, so);
        CHECK_STATUS(tensor_bmm(o1, tA, tB, ta, tb), FX_OK);
        flexpoint_set_num_threads(3);
        CHECK_STATUS(tensor_bmm(o3, tA, tB, ta, tb), FX_OK);
        flexpoint_set_num_threads(prev);
        CHECK(nn_same_bits(o1, o3) && nn_same_bits(o1, first), "bmm %s %s: thread count matters",
              c->name, fmt_name(f));
        tensor_free(o1);
        tensor_free(o3);
        /* one batch equals tensor_matmul on the 2-D slices */
        if (c->B0 * c->B1 == 1 && c->K > 0) {
            int64_t sa2[2] = {sa[2], sa[3]}, sb2[2] = {sb[2], sb[3]}, so2[2] = {c->M, c->N};
            tensor_t *a2 = tensor_view_reshape(tA, 2, sa2), *b2 = tensor_view_reshape(tB, 2, sb2);
            tensor_t *a2t = ta ? tensor_view_transpose(a2, 0, 1) : a2;
            tensor_t *b2t = tb ? tensor_view_transpose(b2, 0, 1) : b2;
            tensor_t *m2 = nn_zeros(fo, 2, so2), *f2 = tensor_view_reshape(first, 2, so2);
            CHECK_STATUS(tensor_matmul(m2, a2t, b2t), FX_OK);
            CHECK(nn_same_bits(m2, f2), "bmm %s %s: differs from tensor_matmul", c->name,
                  fmt_name(f));
            if (ta) tensor_free(a2t);
            if (tb) tensor_free(b2t);
            tensor_free(a2);
            tensor_free(b2);
            tensor_free(m2);
            tensor_free(f2);
        }
    }
    tensor_free(first);
    tensor_free(tA);
    tensor_free(tB);
    free(a);
    free(b);
    free(ref);
    free(acc);
}

/* tensor_bmm_backward: fp32 against central differences of L = sum w * bmm(a, b) (the product
 * is bilinear, so the difference quotient is exact up to rounding); fp16, bf16 and the integer
 * formats against the fp64 reference gradients on every backend, with the bound stated in the
 * loop; the integer formats bit for bit across backends. */
static void backward(const char **bk, int nbk)
{
    const bmm_case c = {"grad", 1, 2, 3, 4, 5};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            test_rng r;
            test_rng_seed(&r, 400 + (uint64_t)(2 * ta + tb));
            int64_t sa[4], sb[4], so[4] = {c.B0, c.B1, c.M, c.N};
            op_shape(sa, &c, c.M, c.K, ta);
            op_shape(sb, &c, c.K, c.N, tb);
            const int64_t na = nn_numel(4, sa), nb = nn_numel(4, sb), no = nn_numel(4, so);
            double *a = nn_doubles(na), *b = nn_doubles(nb), *w = nn_doubles(no);
            double *ga = nn_doubles(na), *gb = nn_doubles(nb), *o = nn_doubles(no);
            for (int64_t i = 0; i < na; i++) a[i] = test_rng_normal(&r);
            for (int64_t i = 0; i < nb; i++) b[i] = test_rng_normal(&r);
            for (int64_t i = 0; i < no; i++) w[i] = test_rng_normal(&r);
            tensor_t *tA = nn_tensor(FMT_FP32, 4, sa, a), *tB = nn_tensor(FMT_FP32, 4, sb, b);
            tensor_t *tW = nn_tensor(FMT_FP32, 4, so, w);
            tensor_t *dA = nn_zeros(FMT_FP32, 4, sa), *dB = nn_zeros(FMT_FP32, 4, sb);
            CHECK_STATUS(tensor_bmm_backward(dA, dB, tW, tA, tB, ta, tb), FX_OK);
            nn_read(dA, ga);
            nn_read(dB, gb);
            const double h = 0.5;
            for (int which = 0; which < 2; which++) {
                double *p = which ? b : a, *g = which ? gb : ga;
                const int64_t np_ = which ? nb : na;
                for (int64_t i = 0; i < np_; i++) {
                    const double keep = p[i];
                    double lp = 0, lm = 0;
                    p[i] = keep + h;
                    ref_bmm(a, sa, b, sb, ta, tb, &c, o, NULL);
                    for (int64_t j = 0; j < no; j++) lp += w[j] * o[j];
                    p[i] = keep - h;
                    ref_bmm(a, sa, b, sb, ta, tb, &c, o, NULL);
                    for (int64_t j = 0; j < no; j++) lm += w[j] * o[j];
                    p[i] = keep;
                    const double fd = (lp - lm) / (2 * h);
                    CHECK(fabs(fd - g[i]) <= 1e-5 * (1 + fabs(fd)),
                          "bmm_backward ta=%d tb=%d d%c[%lld]: fd=%.9g got=%.9g", ta, tb,
                          which ? 'b' : 'a', (long long)i, fd, g[i]);
                }
            }
            /* fp16, bf16 and the integer formats against the fp64 gradients of the stored
             * values. The integer formats sum exactly (acc 0: the write's rounding only) and
             * give the same bits on every backend. fp16 and bf16 run the fp32 GEMM on the
             * exactly widened values, then round once: each gradient element is a sum of at
             * most max(M, N) products w_j * (d o_j / d a_i), so acc = (M + N + 2) u32 times
             * the sum of their magnitudes (the bound of run_case's forward), then nn_bound's
             * 16-bit rounding; checked on every backend (the float GEMMs may sum in another
             * order, so no bit identity is asked of them). */
            for (int k = 1; k < FMT_COUNT; k++) {
                fmt_t f = NN_FORMATS[k];
                const int integer = fmt_is_shared_exponent(f);
                tensor_t *iA = nn_tensor(f, 4, sa, a), *iB = nn_tensor(f, 4, sb, b);
                tensor_t *iW = nn_tensor(f, 4, so, w), *fa = NULL, *fb = NULL;
                tensor_t *xa_all[8] = {NULL}, *xb_all[8] = {NULL};
                for (int q = 0; q < nbk && q < 8; q++) {
                    CHECK_STATUS(flexpoint_set_backend(bk[q]), FX_OK);
                    tensor_t *xa = nn_zeros(f, 4, sa), *xb = nn_zeros(f, 4, sb);
                    CHECK_STATUS(tensor_bmm_backward(xa, xb, iW, iA, iB, ta, tb), FX_OK);
                    xa_all[q] = xa;
                    xb_all[q] = xb;
                    if (!fa) {
                        fa = xa;
                        fb = xb;
                    } else if (integer) {
                        CHECK(nn_same_bits(fa, xa) && nn_same_bits(fb, xb),
                              "bmm_backward %s ta=%d tb=%d: bits differ on %s", fmt_name(f), ta, tb,
                              bk[q]);
                    }
                }
                /* against the reference on the stored values: one rounding each */
                double *sa_v = nn_doubles(na), *sb_v = nn_doubles(nb), *sw = nn_doubles(no);
                nn_read(iA, sa_v);
                nn_read(iB, sb_v);
                nn_read(iW, sw);
                double *ra = nn_doubles(na), *rb = nn_doubles(nb);
                double *acca = nn_doubles(na), *accb = nn_doubles(nb), *o2 = nn_doubles(no);
                const double kacc = (double)(c.M + c.N + 2) * NN_U32;
                for (int64_t i = 0; i < na; i++) {
                    double keep = sa_v[i], lp = 0, lm = 0, mag = 0;
                    sa_v[i] = keep + 1;
                    ref_bmm(sa_v, sa, sb_v, sb, ta, tb, &c, o, NULL);
                    for (int64_t j = 0; j < no; j++) lp += sw[j] * o[j];
                    sa_v[i] = keep - 1;
                    ref_bmm(sa_v, sa, sb_v, sb, ta, tb, &c, o2, NULL);
                    for (int64_t j = 0; j < no; j++) {
                        lm += sw[j] * o2[j];
                        mag += fabs(sw[j] * (o[j] - o2[j]) / 2);
                    }
                    sa_v[i] = keep;
                    ra[i] = (lp - lm) / 2;
                    acca[i] = integer ? 0 : kacc * mag;
                }
                for (int64_t i = 0; i < nb; i++) {
                    double keep = sb_v[i], lp = 0, lm = 0, mag = 0;
                    sb_v[i] = keep + 1;
                    ref_bmm(sa_v, sa, sb_v, sb, ta, tb, &c, o, NULL);
                    for (int64_t j = 0; j < no; j++) lp += sw[j] * o[j];
                    sb_v[i] = keep - 1;
                    ref_bmm(sa_v, sa, sb_v, sb, ta, tb, &c, o2, NULL);
                    for (int64_t j = 0; j < no; j++) {
                        lm += sw[j] * o2[j];
                        mag += fabs(sw[j] * (o[j] - o2[j]) / 2);
                    }
                    sb_v[i] = keep;
                    rb[i] = (lp - lm) / 2;
                    accb[i] = integer ? 0 : kacc * mag;
                }
                for (int q = 0; q < nbk && q < 8; q++) {
                    char what[120];
                    snprintf(what, sizeof what, "bmm_backward %s ta=%d tb=%d da (%s)", fmt_name(f),
                             ta, tb, bk[q]);
                    nn_check(what, xa_all[q], ra, acca, na);
                    snprintf(what, sizeof what, "bmm_backward %s ta=%d tb=%d db (%s)", fmt_name(f),
                             ta, tb, bk[q]);
                    nn_check(what, xb_all[q], rb, accb, nb);
                    tensor_free(xa_all[q]);
                    tensor_free(xb_all[q]);
                }
                free(sa_v); free(sb_v); free(sw); free(ra); free(rb);
                free(acca); free(accb); free(o2);
                tensor_free(iA); tensor_free(iB); tensor_free(iW);
            }
            tensor_free(tA); tensor_free(tB); tensor_free(tW); tensor_free(dA); tensor_free(dB);
            free(a); free(b); free(w); free(ga); free(gb); free(o);
        }
}

/* masks: every format, kept values exact, fill rounded once; gradients by finite differences */
static void masks(const char **bk, int nbk)
{
    int64_t sh[4] = {2, 1, 3, 5}, msh[2] = {1, 5};
    const int64_t n = 30;
    test_rng r;
    test_rng_seed(&r, 5);
    double x[30], w[30];
    for (int i = 0; i < n; i++) {
        x[i] = test_rng_normal(&r);
        w[i] = test_rng_normal(&r);
    }
    double mv[5] = {0, 1, 0, 0, 1};
    for (int kb = 0; kb < FMT_COUNT * nbk; kb++) {
        const fmt_t f = NN_FORMATS[kb % FMT_COUNT];
        CHECK_STATUS(flexpoint_set_backend(bk[kb / FMT_COUNT]), FX_OK);
        double xs[30];
        memcpy(xs, x, sizeof xs);
        tensor_t *tx = nn_tensor(f, 4, sh, xs), *y = nn_zeros(f, 4, sh), *y2 = nn_zeros(f, 4, sh);
        tensor_t *tm = nn_tensor(FMT_BF16, 2, msh, mv);
        double ref[30], ref2[30];
        for (int i = 0; i < n; i++) {
            const int j = i % 5, q = (i / 5) % 3;
            ref[i] = j > q ? -2.5 : xs[i];
            ref2[i] = mv[j] != 0 ? 0.0 : xs[i];
        }
        CHECK_STATUS(tensor_causal_mask(y, tx, -2.5), FX_OK);
        char what[80];
        snprintf(what, sizeof what, "causal_mask %s %s", fmt_name(f), bk[kb / FMT_COUNT]);
        nn_check(what, y, ref, NULL, n);
        CHECK_STATUS(tensor_masked_fill(y2, tx, tm, 0.0), FX_OK);
        snprintf(what, sizeof what, "masked_fill %s %s", fmt_name(f), bk[kb / FMT_COUNT]);
        nn_check(what, y2, ref2, NULL, n);
        if (fmt_is_shared_exponent(f) && f == FMT_DFP16) /* exact mantissas kept */
            CHECK(tensor_exp(y2) <= tensor_exp(tx), "masked_fill dfp16 exponent %d > %d",
                  tensor_exp(y2), tensor_exp(tx));
        /* in place */
        CHECK_STATUS(tensor_causal_mask(tx, tx, 0.0), FX_OK);
        double back[30];
        nn_read(tx, back);
        for (int i = 0; i < n; i++)
            CHECK(back[i] == ((i % 5) > (i / 5) % 3 ? 0.0 : xs[i]), "in-place causal_mask %s [%d]",
                  fmt_name(f), i);
        /* -Inf fill: IEEE for the float formats, non-finite counted for the integer ones */
        tensor_t *yi = nn_zeros(f, 4, sh);
        CHECK_STATUS(tensor_causal_mask(yi, y2, -INFINITY), FX_OK);
        float v[30];
        CHECK_STATUS(tensor_to_f32(yi, v), FX_OK);
        if (fmt_is_shared_exponent(f)) {
            double nf = -1;
            CHECK_STATUS(tensor_stat(yi, "nonfinite", &nf), FX_OK);
            CHECK(nf == 18, "causal -Inf into %s: %g non-finite, want 18", fmt_name(f), nf);
        } else {
            CHECK(v[1] == -INFINITY && v[4] == -INFINITY, "causal -Inf into %s: %g", fmt_name(f),
                  v[1]);
        }
        tensor_free(tx);
        tensor_free(y);
        tensor_free(y2);
        tensor_free(yi);
        tensor_free(tm);
    }
    /* the gradient is the mask with fill 0: against differences of L = sum w causal(x) */
    tensor_t *tx = nn_tensor(FMT_FP32, 4, sh, x), *tw = nn_tensor(FMT_FP32, 4, sh, w);
    tensor_t *dx = nn_zeros(FMT_FP32, 4, sh), *y = nn_zeros(FMT_FP32, 4, sh);
    CHECK_STATUS(tensor_causal_mask(dx, tw, 0.0), FX_OK);
    double g[30], yv[30];
    nn_read(dx, g);
    float xf[30];
    for (int i = 0; i < n; i++) xf[i] = (float)x[i];
    for (int i = 0; i < n; i++) {
        double l[2];
        for (int s = 0; s < 2; s++) {
            xf[i] = (float)(x[i] + (s ? -0.25 : 0.25));
            CHECK_STATUS(tensor_from_f32(tx, xf), FX_OK);
            CHECK_STATUS(tensor_causal_mask(y, tx, -1e9), FX_OK);
            nn_read(y, yv);
            l[s] = 0;
            for (int j = 0; j < n; j++) l[s] += w[j] * yv[j];
        }
        xf[i] = (float)x[i];
        const double fd = (l[0] - l[1]) / 0.5;
        CHECK(fabs(fd - g[i]) <= 1e-5 * (1 + fabs(fd)), "causal_mask gradient [%d]: fd %g got %g",
              i, fd, g[i]);
    }
    tensor_free(tx);
    tensor_free(tw);
    tensor_free(dx);
    tensor_free(y);
}

/* NaN, Inf, -0, subnormals and sums beyond the output format: IEEE for the float formats,
 * saturation counted for the integer ones. */
static void special_values(void)
{
    int64_t sa[3] = {1, 2, 2}, so[3] = {1, 2, 2};
    /* a = [[NaN, 1], [-0, 1e-40]], b = [[1, 0], [Inf, 2]] */
    float av[4] = {NAN, 1, -0.0f, 1e-40f}, bv[4] = {1, 0, INFINITY, 2};
    for (int k = 0; k < 3; k++) {
        fmt_t f = NN_FORMATS[k];
        tensor_t *a = nn_zeros(FMT_FP32, 3, sa), *b = nn_zeros(FMT_FP32, 3, sa);
        tensor_t *o = nn_zeros(f, 3, so);
        CHECK_STATUS(tensor_from_f32(a, av), FX_OK);
        CHECK_STATUS(tensor_from_f32(b, bv), FX_OK);
        CHECK_STATUS(tensor_bmm(o, a, b, 0, 0), FX_OK);
        float v[4];
        CHECK_STATUS(tensor_to_f32(o, v), FX_OK);
        /* row 0: NaN*1 + 1*Inf = NaN, NaN*0 + 1*2 = NaN; row 1: -0*1 + 1e-40*Inf = Inf,
         * -0*0 + 1e-40*2 = 2e-40 (0 in fp16, whose smallest subnormal is 6e-8) */
        CHECK(isnan(v[0]) && isnan(v[1]) && v[2] == INFINITY, "bmm specials %s: %g %g %g",
              fmt_name(f), v[0], v[1], v[2]);
        const double want = 2.0 * (double)1e-40f; /* exact in fp32 (a subnormal) */
        CHECK(f == FMT_FP16 ? v[3] == 0
                            : fabs(v[3] - want) <= (f == FMT_BF16 ? 0x1p-134 : 0.0),
              "bmm subnormal product %s: %g, want %g", fmt_name(f), v[3], want);
        tensor_free(a);
        tensor_free(b);
        tensor_free(o);
    }
    /* sums beyond the format: 300 * 300 * 2 = 180000 overflows fp16; FLEX16_5 saturates */
    float big[4] = {300, 300, 300, 300};
    tensor_t *a = nn_zeros(FMT_FP16, 3, sa), *oh = nn_zeros(FMT_FP16, 3, so);
    CHECK_STATUS(tensor_from_f32(a, big), FX_OK);
    CHECK_STATUS(tensor_bmm(oh, a, a, 0, 1), FX_OK);
    float v[4];
    CHECK_STATUS(tensor_to_f32(oh, v), FX_OK);
    CHECK(v[0] == INFINITY, "fp16 bmm overflow: %g, want +Inf", v[0]);
    tensor_t *af = nn_zeros(FMT_FLEX16_5, 3, sa), *of = nn_zeros(FMT_FLEX16_5, 3, so);
    CHECK_STATUS(tensor_from_f32(af, big), FX_OK);
    CHECK_STATUS(tensor_bmm(of, af, af, 0, 1), FX_OK);
    double sat = -1;
    CHECK_STATUS(tensor_stat(of, "saturated", &sat), FX_OK);
    CHECK(sat == 4, "flex16_5 bmm beyond its window: %g saturated, want 4", sat);
    tensor_free(a);
    tensor_free(oh);
    tensor_free(af);
    tensor_free(of);
}

static void bad_input(void)
{
    int64_t s3[3] = {2, 3, 4}, s3b[3] = {2, 4, 5}, s3o[3] = {2, 3, 5}, s3x[3] = {3, 4, 5};
    int64_t s2[2] = {4, 5}, sm[2] = {3, 3};
    tensor_t *a = nn_zeros(FMT_DFP16, 3, s3), *b = nn_zeros(FMT_DFP16, 3, s3b);
    tensor_t *o = nn_zeros(FMT_FP32, 3, s3o), *bx = nn_zeros(FMT_DFP16, 3, s3x);
    tensor_t *b2 = nn_zeros(FMT_DFP16, 2, s2), *mk = nn_zeros(FMT_FP32, 2, sm);
    float before[30], after[30];
    for (int i = 0; i < 30; i++) before[i] = (float)i;
    CHECK_STATUS(tensor_from_f32(o, before), FX_OK);
    CHECK_STATUS(tensor_bmm(o, a, b, 0, 0), FX_OK);
    CHECK_STATUS(tensor_from_f32(o, before), FX_OK);
    CHECK_STATUS(tensor_bmm(o, a, b, 1, 0), FX_ESHAPE);
    nn_check_message("tensor_bmm");
    CHECK(strstr(flexpoint_last_error(), "inner sizes") != NULL, "message: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_bmm(o, a, bx, 0, 0), FX_ESHAPE);
    CHECK(strstr(flexpoint_last_error(), "batch axis 0") != NULL, "message: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_bmm(o, a, b2, 0, 0), FX_ESHAPE);
    CHECK_STATUS(tensor_bmm(o, b, a, 0, 0), FX_ESHAPE);
    CHECK_STATUS(tensor_bmm(o, a, b, 2, 0), FX_EINVAL);
    CHECK_STATUS(tensor_bmm(o, a, NULL, 0, 0), FX_EINVAL);
    CHECK_STATUS(tensor_bmm_backward(b, a, o, a, b, 0, 0), FX_ESHAPE); /* da/db swapped */
    nn_check_message("tensor_bmm_backward");
    CHECK_STATUS(tensor_bmm_backward(a, a, o, a, b, 0, 0), FX_ESHAPE);
    CHECK_STATUS(tensor_bmm_backward(NULL, NULL, NULL, a, b, 0, 0), FX_EINVAL);
    CHECK_STATUS(tensor_causal_mask(o, b2, 0.0), FX_ESHAPE);
    nn_check_message("tensor_causal_mask");
    CHECK_STATUS(tensor_causal_mask(o, o, NAN), FX_EINVAL);
    CHECK_STATUS(tensor_masked_fill(o, o, mk, 0.0), FX_ESHAPE);
    nn_check_message("tensor_masked_fill");
    CHECK(strstr(flexpoint_last_error(), "[3, 3]") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_masked_fill(o, o, NULL, 0.0), FX_EINVAL);
    CHECK_STATUS(tensor_to_f32(o, after), FX_OK);
    CHECK(memcmp(before, after, sizeof before) == 0, "out changed by a failing call");
    tensor_free(a);
    tensor_free(b);
    tensor_free(o);
    tensor_free(bx);
    tensor_free(b2);
    tensor_free(mk);
}

/* A causal mask above the parallel threshold (2^16 elements), 2 threads, Sq != Sk both ways:
 * every element against the rule "key j masked after query q = row % Sq", in place and not,
 * fp32 and DFP16 (whose kept mantissas are copied). */
static void large_causal_mask(void)
{
    static const int64_t shapes[2][4] = {{2, 3, 100, 130}, {3, 2, 130, 100}};
    flexpoint_set_num_threads(2);
    for (int si = 0; si < 2; si++)
        for (int k = 0; k < 2; k++) {
            const fmt_t f = k ? FMT_DFP16 : FMT_FP32;
            const int64_t *sh = shapes[si], n = sh[0] * sh[1] * sh[2] * sh[3];
            const int64_t Sq = sh[2], Sk = sh[3];
            float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
            float *x16 = malloc((size_t)n * sizeof *x16);
            for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 37 % 1001) - 500) / 64.0f;
            tensor_t *tx = tensor_new(f, 4, sh), *ty = tensor_new(f, 4, sh);
            CHECK_STATUS(tensor_from_f32(tx, x), FX_OK);
            CHECK_STATUS(tensor_to_f32(tx, x16), FX_OK); /* x as stored */
            for (int inplace = 0; inplace < 2; inplace++) {
                tensor_t *out = inplace ? tx : ty;
                CHECK_STATUS(tensor_causal_mask(out, tx, 0.0), FX_OK);
                CHECK_STATUS(tensor_to_f32(out, y), FX_OK);
                int64_t bad = 0;
                for (int64_t i = 0; i < n; i++) {
                    const int64_t j = i % Sk, q = (i / Sk) % Sq;
                    bad += y[i] != (j > q ? 0.0f : x16[i]);
                }
                CHECK(bad == 0, "causal mask %s [%lld, %lld, %lld, %lld]%s: %lld elements wrong",
                      fmt_name(f), (long long)sh[0], (long long)sh[1], (long long)Sq,
                      (long long)Sk, inplace ? " in place" : "", (long long)bad);
            }
            tensor_free(tx);
            tensor_free(ty);
            free(x);
            free(y);
            free(x16);
        }
    flexpoint_set_num_threads(0);
}

/* Float bmm item by item: bf16 through the bf16 MATMUL kernel of every route this CPU runs,
 * each item the same bits as tensor_matmul of its two matrices (transposes as views); fp32,
 * fp16 and bf16 with many small items (run side by side on the threads) the same bits at one
 * and two threads. */
static void items_as_matmul(void)
{
    const int64_t B = 6, M = 24, N = 40, K = 33;
    const char *routes[] = {"widen", "dpbf16", "amx"};
    const fmt_t fmts[] = {FMT_FP32, FMT_FP16, FMT_BF16};
    test_rng rng;
    test_rng_seed(&rng, 4242);
    const char *prev_backend = flexpoint_backend();
    char keep_backend[32];
    snprintf(keep_backend, sizeof keep_backend, "%s", prev_backend);
    const char *kn = flexpoint_kernel_name("matmul", FMT_BF16);
    char keep_route[32];
    snprintf(keep_route, sizeof keep_route, "%s", kn ? kn : "widen");
    for (int fi = 0; fi < 3; fi++)
        for (int ta = 0; ta <= 1; ta++)
            for (int tb = 0; tb <= 1; tb++) {
                const fmt_t f = fmts[fi];
                int64_t sa[3] = {B, ta ? K : M, ta ? M : K}, sb[3] = {B, tb ? N : K, tb ? K : N};
                int64_t so[3] = {B, M, N};
                float *av = malloc((size_t)(B * M * K) * sizeof *av);
                float *bv = malloc((size_t)(B * K * N) * sizeof *bv);
                float *o1 = malloc((size_t)(B * M * N) * sizeof *o1);
                float *o2 = malloc((size_t)(B * M * N) * sizeof *o2);
                float *om = malloc((size_t)(M * N) * sizeof *om);
                for (int64_t i = 0; i < B * M * K; i++) av[i] = (float)test_rng_normal(&rng);
                for (int64_t i = 0; i < B * K * N; i++) bv[i] = (float)test_rng_normal(&rng);
                tensor_t *a = tensor_new(f, 3, sa), *b = tensor_new(f, 3, sb);
                tensor_t *out = tensor_new(FMT_FP32, 3, so);
                CHECK_STATUS(tensor_from_f32(a, av), FX_OK);
                CHECK_STATUS(tensor_from_f32(b, bv), FX_OK);
                for (int r = -1; r < 3; r++) { /* -1: the kernel in use; then each route */
                    if (f != FMT_BF16 && r >= 0) break;
                    if (r >= 0 && flexpoint_set_kernel("matmul", FMT_BF16, routes[r]) != FX_OK)
                        continue; /* this CPU does not run that route */
                    const int prev = flexpoint_set_num_threads(1);
                    CHECK_STATUS(tensor_bmm(out, a, b, ta, tb), FX_OK);
                    CHECK_STATUS(tensor_to_f32(out, o1), FX_OK);
                    flexpoint_set_num_threads(2);
                    CHECK_STATUS(tensor_bmm(out, a, b, ta, tb), FX_OK);
                    CHECK_STATUS(tensor_to_f32(out, o2), FX_OK);
                    flexpoint_set_num_threads(prev);
                    CHECK(memcmp(o1, o2, (size_t)(B * M * N) * sizeof *o1) == 0,
                          "bmm %s (%d, %d)%s%s: one and two threads differ", fmt_name(f), ta, tb,
                          r >= 0 ? ", route " : "", r >= 0 ? routes[r] : "");
                    for (int64_t i = 0; i < B; i++) {
                        int64_t s2a[2] = {sa[1], sa[2]}, s2b[2] = {sb[1], sb[2]}, s2o[2] = {M, N};
                        tensor_t *ai = tensor_new(f, 2, s2a), *bi = tensor_new(f, 2, s2b);
                        tensor_t *oi = tensor_new(FMT_FP32, 2, s2o);
                        CHECK_STATUS(tensor_from_f32(ai, av + i * M * K), FX_OK);
                        CHECK_STATUS(tensor_from_f32(bi, bv + i * K * N), FX_OK);
                        tensor_t *va = ta ? tensor_view_transpose(ai, 0, 1) : ai;
                        tensor_t *vb = tb ? tensor_view_transpose(bi, 0, 1) : bi;
                        CHECK_STATUS(tensor_matmul(oi, va, vb), FX_OK);
                        CHECK_STATUS(tensor_to_f32(oi, om), FX_OK);
                        CHECK(memcmp(om, o1 + i * M * N, (size_t)(M * N) * sizeof *om) == 0,
                              "bmm %s (%d, %d) item %lld%s%s: differs from tensor_matmul",
                              fmt_name(f), ta, tb, (long long)i, r >= 0 ? ", route " : "",
                              r >= 0 ? routes[r] : "");
                        if (ta) tensor_free(va);
                        if (tb) tensor_free(vb);
                        tensor_free(ai);
                        tensor_free(bi);
                        tensor_free(oi);
                    }
                }
                tensor_free(a);
                tensor_free(b);
                tensor_free(out);
                free(av);
                free(bv);
                free(o1);
                free(o2);
                free(om);
            }
    flexpoint_set_kernel("matmul", FMT_BF16, keep_route);
    CHECK_STATUS(flexpoint_set_backend(keep_backend), FX_OK);
}

/* Setting c of the backend x bf16 route x thread count grid (c < nbk * 8): backend c / 8, the
 * route in use (c % 8 < 2) or one of the three forced (bf16 only, where this CPU runs it), one
 * or two threads; its name into label. 0 where the setting does not apply. */
static const char *const ROUTES[3] = {"widen", "dpbf16", "amx"};
static int enter_setting(int c, fmt_t f, const char **bk, char *label, size_t cap)
{
    const int r = (c % 8) / 2 - 1, nt = c % 2 + 1;
    CHECK_STATUS(flexpoint_set_backend(bk[c / 8]), FX_OK);
    if (r >= 0 && (f != FMT_BF16 || flexpoint_set_kernel("matmul", FMT_BF16, ROUTES[r]) != FX_OK))
        return 0;
    flexpoint_set_num_threads(nt);
    snprintf(label, cap, "%s %s%s%s, %d threads", fmt_name(f), bk[c / 8], r >= 0 ? ", route " : "",
             r >= 0 ? ROUTES[r] : "", nt);
    return 1;
}

/* An fp16/bf16 output the trainer marks disposable is the products' own staging (no copy):
 * the same bits as an ordinary output on every backend, bf16 route, thread count and
 * transpose, taken only where out is contiguous and in another storage than a and b; an
 * ordinary output keeps the staging. */
static void disposable_outputs(const char **bk, int nbk)
{
    const int64_t sa[3] = {6, 24, 33}, sb[3] = {6, 40, 33}, so[3] = {6, 24, 40};
    const char *kn = flexpoint_kernel_name("matmul", FMT_BF16);
    char keep_route[32], keep_backend[32];
    snprintf(keep_route, sizeof keep_route, "%s", kn ? kn : "widen");
    snprintf(keep_backend, sizeof keep_backend, "%s", flexpoint_backend());
    test_rng rng;
    test_rng_seed(&rng, 515);
    for (int fi = 0; fi < 2; fi++) {
        const fmt_t f = fi ? FMT_BF16 : FMT_FP16;
        double *av = nn_doubles(6 * 24 * 33), *bv = nn_doubles(6 * 40 * 33);
        for (int64_t i = 0; i < 6 * 24 * 33; i++) av[i] = test_rng_normal(&rng);
        for (int64_t i = 0; i < 6 * 40 * 33; i++) bv[i] = test_rng_normal(&rng);
        tensor_t *a = nn_tensor(f, 3, sa, av), *b = nn_tensor(f, 3, sb, bv);
        char what[160];
        for (int c = 0; c < nbk * 8; c++) {
            if (!enter_setting(c, f, bk, what, sizeof what)) continue;
            tensor_t *plain = nn_zeros(f, 3, so), *disp = nn_zeros(f, 3, so);
            fx_tensor_set_disposable(disp);
            const int64_t d0 = fx_nn_bmm_h16_direct_runs();
            CHECK_STATUS(tensor_bmm(plain, a, b, 0, 1), FX_OK);
            const int64_t d1 = fx_nn_bmm_h16_direct_runs();
            CHECK_STATUS(tensor_bmm(disp, a, b, 0, 1), FX_OK);
            const int64_t d2 = fx_nn_bmm_h16_direct_runs();
            CHECK(d1 == d0 && d2 == d0 + 1, "bmm %s: %lld ordinary and %lld disposable outputs "
                  "written without a staging", what, (long long)(d1 - d0), (long long)(d2 - d1));
            CHECK(nn_same_bits(plain, disp), "bmm %s: a disposable output differs", what);
            /* a view of another shape's storage: not contiguous, the staging again */
            const int64_t wide[3] = {6, 24, 41};
            tensor_t *w = nn_zeros(f, 3, wide);
            fx_tensor_set_disposable(w);
            tensor_t *v = tensor_view_slice(w, -1, 0, 40, 1);
            CHECK_STATUS(tensor_bmm(v, a, b, 0, 1), FX_OK);
            CHECK(fx_nn_bmm_h16_direct_runs() == d2, "a strided view was written without a "
                  "staging");
            CHECK(nn_same_bits(plain, v), "bmm %s into a view differs", what);
            tensor_free(v);
            tensor_free(w);
            tensor_free(plain);
            tensor_free(disp);
        }
        /* out sharing a's storage: the staging */
        tensor_t *sq = nn_tensor(f, 3, (const int64_t[3]){6, 24, 24}, av);
        fx_tensor_set_disposable(sq);
        const int64_t d0 = fx_nn_bmm_h16_direct_runs();
        CHECK_STATUS(tensor_bmm(sq, sq, sq, 0, 1), FX_OK);
        CHECK(fx_nn_bmm_h16_direct_runs() == d0, "an output in its operand's storage was "
              "written without a staging");
        tensor_free(sq);
        tensor_free(a);
        tensor_free(b);
        free(av);
        free(bv);
    }
    flexpoint_set_num_threads(0);
    flexpoint_set_kernel("matmul", FMT_BF16, keep_route);
    CHECK_STATUS(flexpoint_set_backend(keep_backend), FX_OK);
}

/* Operands that are views, as the attention's heads ([B, T, H, d] viewed as [B, H, T, d]: rows
 * H d apart; the float formats read them where they lie) and a transposed one: the same bits as
 * the product of their contiguous copies, every format, backend, bf16 route, thread count and
 * transpose. */
static void view_operands(const char **bk, int nbk)
{
    const int64_t B = 2, T = 24, H = 3, dh = 16;
    const int64_t s4[4] = {B, T, H, dh}, h4[4] = {B, H, T, dh};
    const char *kn = flexpoint_kernel_name("matmul", FMT_BF16);
    char keep_route[32], keep_backend[32];
    snprintf(keep_route, sizeof keep_route, "%s", kn ? kn : "widen");
    snprintf(keep_backend, sizeof keep_backend, "%s", flexpoint_backend());
    test_rng rng;
    test_rng_seed(&rng, 616);
    double *qv = nn_doubles(B * T * H * dh), *kv = nn_doubles(B * T * H * dh);
    for (int64_t i = 0; i < B * T * H * dh; i++) {
        qv[i] = test_rng_normal(&rng);
        kv[i] = test_rng_normal(&rng);
    }
    for (int fi = 0; fi < FMT_COUNT; fi++) {
        const fmt_t f = NN_FORMATS[fi];
        tensor_t *q = nn_tensor(f, 4, s4, qv), *k = nn_tensor(f, 4, s4, kv);
        tensor_t *qr = tensor_view_transpose(q, 1, 2), *kr = tensor_view_transpose(k, 1, 2);
        tensor_t *qc = nn_zeros(f, 4, h4), *kc = nn_zeros(f, 4, h4);
        CHECK_STATUS(tensor_copy(qc, qr), FX_OK);
        CHECK_STATUS(tensor_copy(kc, kr), FX_OK);
        /* k's head view transposed over its last two axes: [B, H, d, T], columns H d apart */
        const int64_t t4[4] = {B, H, dh, T};
        tensor_t *kt = tensor_view_transpose(kr, 2, 3), *ktc = nn_zeros(f, 4, t4);
        CHECK_STATUS(tensor_copy(ktc, kt), FX_OK);
        char what[160];
        for (int c = 0; c < nbk * 8; c++) {
            if (!enter_setting(c, f, bk, what, sizeof what)) continue;
            for (int t = 0; t < 3; t++) {
                /* q k^T (scores), q^T k, and q (k^T)^T through k's transposed view */
                const int ta = t == 1, tb = t == 0;
                const tensor_t *va = qr, *vb = t == 2 ? kt : kr;
                const tensor_t *ca = qc, *cb = t == 2 ? ktc : kc;
                const int64_t so[4] = {B, H, ta ? dh : T, t == 1 ? dh : T};
                tensor_t *o1 = nn_zeros(f, 4, so), *o2 = nn_zeros(f, 4, so);
                /* the integer formats write the same outputs again, so that their guesses
                 * settle and the blocked route (its sizes lowered to take these) runs on the
                 * views' two-level items */
                const int writes = fmt_is_shared_exponent(f) ? 7 : 1;
                if (writes > 1) fx_shared_matmul_set_sizes(1, 0);
                const int64_t taken0 = fx_shared_matmul_taken();
                for (int w = 0; w < writes; w++) {
                    CHECK_STATUS(tensor_bmm(o1, va, vb, ta, tb), FX_OK);
                    CHECK_STATUS(tensor_bmm(o2, ca, cb, ta, tb), FX_OK);
                    CHECK(nn_same_bits(o1, o2), "bmm %s, case %d, write %d: views and their "
                          "copies differ", what, t, w);
                }
                if (writes > 1) {
                    fx_shared_matmul_set_sizes(0, 0);
                    /* the route needs the level's integer kernel and rounding */
                    const fx_backend *be = fx_backend_active();
                    const int64_t taken = fx_shared_matmul_taken() - taken0;
                    if (be->kernels[FX_OP_MATMUL][FMT_DFP16] && be->cvt.quant_i64)
                        CHECK(taken >= 4, "bmm %s, case %d: the blocked route took %lld of the "
                              "products", what, t, (long long)taken);
                }
                tensor_free(o1);
                tensor_free(o2);
            }
        }
        tensor_free(kt);
        tensor_free(ktc);
        tensor_free(qr);
        tensor_free(kr);
        tensor_free(qc);
        tensor_free(kc);
        tensor_free(q);
        tensor_free(k);
    }
    free(qv);
    free(kv);
    flexpoint_set_num_threads(0);
    flexpoint_set_kernel("matmul", FMT_BF16, keep_route);
    CHECK_STATUS(flexpoint_set_backend(keep_backend), FX_OK);
}

int main(void)
{
    const char *bk[8];
    int nbk = nn_backends(bk, 8);
    const int ncases = (int)(sizeof CASES / sizeof *CASES);
    for (int ci = 0; ci < ncases; ci++)
        for (int k = 0; k < FMT_COUNT; k++)
            for (int t = 0; t < 4; t++) {
                fmt_t f = NN_FORMATS[k];
                run_case(&CASES[ci], f, f, t >> 1, t & 1, bk, nbk);
                if (t == 1) /* another output format: one rounding of the same sums */
                    run_case(&CASES[ci], f, fmt_is_shared_exponent(f) ? FMT_FP32 : FMT_DFP16, 0,
                             1, bk, nbk);
            }
    printf("bmm: %d cases x %d formats x 4 transposes on %d backends\n", ncases, FMT_COUNT, nbk);
    backward(bk, nbk);
    masks(bk, nbk);
    large_causal_mask();
    special_values();
    items_as_matmul();
    disposable_outputs(bk, nbk);
    view_operands(bk, nbk);
    bad_input();
    return test_finish("test_nn_bmm");
}
