/* fx_adamw_step (decoupled weight decay) and fx_clip_grad_norm on every format and CPU backend.
 *
 * AdamW reference (torch.optim.AdamW, in double from the stored fp32 state of the previous
 * step, the library's documented order): m' = (float)(b1 m + (1-b1) g s), v' likewise with
 * (g s)^2, p' = p (1 - lr wd) - lr/(1-b1^t) m' / (sqrt(v')/sqrt(1-b2^t) + eps). With an fp32
 * weight the reference reproduces the op's expression, so the fp32 results must be the same
 * bits; other formats are the format's one rounding of that fp32 master (nn_bound with acc =
 * the fp32 rounding, ulp/2). The state is bit-identical across backends and thread counts.
 *
 * Clip reference: total = sqrt(sum of the stored values squared), in double (exact for the
 * integer formats before the final square root); checked to 2^-50 relative. After clipping,
 * each element is within the format's one rounding of value * max_norm / (total + 1e-6)
 * (acc: 2^-30 relative for the integer formats' 31-bit factor, 2^-24 for the fp32 factor).
 */
#include "flexpoint_nn.h"
#include "nn_misc_util.h"

static void adamw_case(fmt_t f, int64_t n, int use_master, const char **bk, int nbk)
{
    test_rng r;
    test_rng_seed(&r, 600 + (uint64_t)f * 7 + (uint64_t)n + (uint64_t)use_master);
    int64_t sh[1] = {n};
    double *w0 = nn_doubles(n), *g = nn_doubles(n), *p = nn_doubles(n), *ref = nn_doubles(n);
    double *acc = nn_doubles(n);
    for (int64_t i = 0; i < n; i++) {
        w0[i] = test_rng_normal(&r);
        g[i] = 0.1 * test_rng_normal(&r);
    }
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1, gs = 0.5;
    tensor_t *tg = nn_tensor(f, 1, sh, g);
    float *m = nn_xmalloc(4 * (size_t)n), *v = nn_xmalloc(4 * (size_t)n);
    float *mr = nn_xmalloc(4 * (size_t)n), *vr = nn_xmalloc(4 * (size_t)n);
    float *master = nn_xmalloc(4 * (size_t)n), *keep = nn_xmalloc(4 * (size_t)n);
    tensor_t *first = NULL;
    float *first_m = nn_xmalloc(4 * (size_t)n);
    char what[160];
    for (int b = 0; b < nbk; b++) {
        CHECK_STATUS(flexpoint_set_backend(bk[b]), FX_OK);
        double *wv = nn_doubles(n);
        memcpy(wv, w0, sizeof(double) * (size_t)n);
        tensor_t *w = nn_tensor(f, 1, sh, wv);
        memset(m, 0, 4 * (size_t)n);
        memset(v, 0, 4 * (size_t)n);
        memset(mr, 0, 4 * (size_t)n);
        memset(vr, 0, 4 * (size_t)n);
        for (int64_t i = 0; i < n; i++) master[i] = (float)wv[i];
        for (uint64_t t = 1; t <= 3; t++) {
            /* reference from the stored state */
            if (use_master)
                for (int64_t i = 0; i < n; i++) p[i] = master[i];
            else
                nn_read(w, p);
            const double bc1 = 1 - pow(b1, (double)t), sbc2 = sqrt(1 - pow(b2, (double)t));
            for (int64_t i = 0; i < n; i++) {
                const double d = g[i] * gs;
                mr[i] = (float)(b1 * (double)mr[i] + (1 - b1) * d);
                vr[i] = (float)(b2 * (double)vr[i] + (1 - b2) * d * d);
                const double den = sqrt((double)vr[i]) / sbc2 + eps;
                ref[i] = (float)(p[i] * (1 - lr * wd) - lr / bc1 * (double)mr[i] / den);
                acc[i] = 0;
            }
            snprintf(what, sizeof what, "adamw %s n=%lld master=%d step %llu %s", fmt_name(f),
                     (long long)n, use_master, (unsigned long long)t, bk[b]);
            CHECK_STATUS(fx_adamw_step(w, tg, use_master ? master : NULL, m, v, lr, b1, b2, eps,
                                       wd, gs, 0, 1, t), FX_OK);
            CHECK(memcmp(m, mr, 4 * (size_t)n) == 0 && memcmp(v, vr, 4 * (size_t)n) == 0,
                  "%s: moments differ from the reference", what);
            if (use_master) {
                int64_t bad = 0;
                for (int64_t i = 0; i < n; i++) bad += master[i] != (float)ref[i];
                CHECK(bad == 0, "%s: %lld master values differ from the reference", what,
                      (long long)bad);
            }
            nn_check(what, w, ref, acc, n);
            if (f == FMT_FP32) {
                double *got = nn_doubles(n);
                nn_read(w, got);
                CHECK(memcmp(got, ref, sizeof(double) * (size_t)n) == 0, "%s: fp32 bits differ "
                      "from the reference", what);
                free(got);
            }
        }
        if (!first) {
            first = w;
            memcpy(first_m, m, 4 * (size_t)n);
        } else {
            CHECK(nn_same_bits(first, w) && memcmp(first_m, m, 4 * (size_t)n) == 0,
                  "adamw %s: bits differ from %s", fmt_name(f), bk[0]);
            tensor_free(w);
        }
        free(wv);
    }
    /* one thread against three */
    double *wv = nn_doubles(n);
    memcpy(wv, w0, sizeof(double) * (size_t)n);
    tensor_t *w1 = nn_tensor(f, 1, sh, wv), *w3 = nn_tensor(f, 1, sh, wv);
    memset(m, 0, 4 * (size_t)n);
    memset(v, 0, 4 * (size_t)n);
    int prev = flexpoint_set_num_threads(1);
    CHECK_STATUS(fx_adamw_step(w1, tg, NULL, m, v, lr, b1, b2, eps, wd, gs, 0, 1, 1), FX_OK);
    memcpy(keep, m, 4 * (size_t)n);
    memset(m, 0, 4 * (size_t)n);
    memset(v, 0, 4 * (size_t)n);
    flexpoint_set_num_threads(3);
    CHECK_STATUS(fx_adamw_step(w3, tg, NULL, m, v, lr, b1, b2, eps, wd, gs, 0, 1, 1), FX_OK);
    flexpoint_set_num_threads(prev);
    CHECK(nn_same_bits(w1, w3) && memcmp(keep, m, 4 * (size_t)n) == 0,
          "adamw %s: thread count matters", fmt_name(f));
    /* weight decay 0: AdamW and Adam are the same step, bit for bit */
    tensor_t *wa = nn_tensor(f, 1, sh, wv), *wb = nn_tensor(f, 1, sh, wv);
    memset(m, 0, 4 * (size_t)n);
    memset(v, 0, 4 * (size_t)n);
    CHECK_STATUS(fx_adamw_step(wa, tg, NULL, m, v, lr, b1, b2, eps, 0.0, gs, 0, 1, 1), FX_OK);
    memset(m, 0, 4 * (size_t)n);
    memset(v, 0, 4 * (size_t)n);
    CHECK_STATUS(fx_adam_step(wb, tg, NULL, m, v, lr, b1, b2, eps, 0.0, gs, 0, 1, 1), FX_OK);
    CHECK(nn_same_bits(wa, wb), "adamw %s with wd 0 differs from adam", fmt_name(f));
    tensor_free(w1); tensor_free(w3); tensor_free(wa); tensor_free(wb); tensor_free(first);
    tensor_free(tg);
    free(wv); free(w0); free(g); free(p); free(ref); free(acc); free(m); free(v); free(mr);
    free(vr); free(master); free(keep); free(first_m);
}

static void adamw_bad_input(void)
{
    int64_t sh[1] = {4}, sh5[1] = {5};
    tensor_t *w = nn_zeros(FMT_BF16, 1, sh), *g = nn_zeros(FMT_FP32, 1, sh);
    tensor_t *g5 = nn_zeros(FMT_FP32, 1, sh5);
    float ones[4] = {1, 1, 1, 1}, m[4] = {0}, v[4] = {0}, after[4];
    CHECK_STATUS(tensor_from_f32(w, ones), FX_OK);
    CHECK_STATUS(tensor_from_f32(g, ones), FX_OK);
    CHECK_STATUS(fx_adamw_step(w, g, NULL, m, v, 0.1, 0.9, 0.999, 1e-8, 0.1, 1, 0, 1, 0),
                 FX_EINVAL);
    nn_check_message("fx_adamw_step");
    CHECK_STATUS(fx_adamw_step(w, g, NULL, m, v, NAN, 0.9, 0.999, 1e-8, 0.1, 1, 0, 1, 1),
                 FX_EINVAL);
    CHECK_STATUS(fx_adamw_step(w, g, NULL, m, v, 0.1, 1.0, 0.999, 1e-8, 0.1, 1, 0, 1, 1),
                 FX_EINVAL);
    CHECK_STATUS(fx_adamw_step(w, g, NULL, m, m, 0.1, 0.9, 0.999, 1e-8, 0.1, 1, 0, 1, 1),
                 FX_EINVAL);
    CHECK_STATUS(fx_adamw_step(w, g, NULL, NULL, v, 0.1, 0.9, 0.999, 1e-8, 0.1, 1, 0, 1, 1),
                 FX_EINVAL);
    CHECK_STATUS(fx_adamw_step(w, g, NULL, m, v, 0.1, 0.9, 0.999, 1e-8, -1, 1, 0, 1, 1),
                 FX_EINVAL);
    CHECK_STATUS(fx_adamw_step(w, g5, NULL, m, v, 0.1, 0.9, 0.999, 1e-8, 0.1, 1, 0, 1, 1),
                 FX_ESHAPE);
    nn_check_message("fx_adamw_step");
    CHECK_STATUS(tensor_to_f32(w, after), FX_OK);
    CHECK(memcmp(after, ones, sizeof ones) == 0 && m[0] == 0 && v[0] == 0,
          "adamw changed state on failure");
    /* a NaN gradient: IEEE NaN weights for the float formats, counted for the integer ones */
    float gn[4] = {NAN, 0, 0, 0};
    CHECK_STATUS(tensor_from_f32(g, gn), FX_OK);
    tensor_t *wf = nn_zeros(FMT_FLEX16_5, 1, sh);
    CHECK_STATUS(tensor_from_f32(wf, ones), FX_OK);
    CHECK_STATUS(fx_adamw_step(w, g, NULL, m, v, 0.1, 0.9, 0.999, 1e-8, 0.1, 1, 0, 1, 1), FX_OK);
    CHECK_STATUS(tensor_to_f32(w, after), FX_OK);
    CHECK(isnan(after[0]) && after[1] == (float)fx_bf16_to_f32(fx_f32_to_bf16(0.99f)),
          "adamw NaN gradient into bf16: %g %g", after[0], after[1]);
    memset(m, 0, sizeof m);
    memset(v, 0, sizeof v);
    CHECK_STATUS(fx_adamw_step(wf, g, NULL, m, v, 0.1, 0.9, 0.999, 1e-8, 0.1, 1, 0, 1, 1), FX_OK);
    double nf = -1;
    CHECK_STATUS(tensor_stat(wf, "nonfinite", &nf), FX_OK);
    CHECK(nf == 1, "adamw NaN gradient into flex16_5: %g non-finite, want 1", nf);
    tensor_free(w);
    tensor_free(g);
    tensor_free(g5);
    tensor_free(wf);
}

/* ---- clipping ---------------------------------------------------------------------------- */

static void clip_case(const char **bk, int nbk)
{
    int64_t s0[2] = {7, 9}, s1[1] = {300}, s2[3] = {2, 3, 50};
    const int64_t *shapes[3] = {s0, s1, s2};
    const int nds[3] = {2, 1, 3};
    for (int k = 0; k < FMT_COUNT; k++) {
        fmt_t f = NN_FORMATS[k];
        for (int clipping = 0; clipping < 2; clipping++) {
            tensor_t *firsts[3] = {NULL, NULL, NULL};
            for (int b = 0; b < nbk; b++) {
                CHECK_STATUS(flexpoint_set_backend(bk[b]), FX_OK);
                test_rng r;
                test_rng_seed(&r, 70 + (uint64_t)k);
                tensor_t *gr[3];
                double *vals[3], sumsq = 0;
                int64_t ns[3];
                for (int t = 0; t < 3; t++) {
                    /* mixed formats: the first gradient fp32, the others in f */
                    fmt_t ft = t == 0 ? FMT_FP32 : f;
                    ns[t] = nn_numel(nds[t], shapes[t]);
                    vals[t] = nn_doubles(ns[t]);
                    for (int64_t i = 0; i < ns[t]; i++) vals[t][i] = 0.5 * test_rng_normal(&r);
                    gr[t] = nn_tensor(ft, nds[t], shapes[t], vals[t]);
                    for (int64_t i = 0; i < ns[t]; i++) sumsq += vals[t][i] * vals[t][i];
                }
                const double total = sqrt(sumsq), maxn = clipping ? total / 3 : total * 2;
                double got = -1;
                CHECK_STATUS(fx_clip_grad_norm(gr, 3, maxn, &got), FX_OK);
                CHECK(fabs(got - total) <= 0x1p-50 * total, "clip %s: norm %.17g ref %.17g",
                      fmt_name(f), got, total);
                const double coef = clipping ? maxn / (total + 1e-6) : 1.0;
                for (int t = 0; t < 3; t++) {
                    double *ref = nn_doubles(ns[t]), *acc = nn_doubles(ns[t]);
                    const double rel = fmt_is_shared_exponent(tensor_fmt(gr[t])) ? 0x1p-30 : NN_U32;
                    for (int64_t i = 0; i < ns[t]; i++) {
                        ref[i] = vals[t][i] * coef;
                        acc[i] = clipping ? rel * fabs(ref[i]) : 0;
                    }
                    char what[120];
                    snprintf(what, sizeof what, "clip %s tensor %d clipping=%d %s", fmt_name(f), t,
                             clipping, bk[b]);
                    if (clipping) nn_check(what, gr[t], ref, acc, ns[t]);
                    else { /* untouched */
                        double *now = nn_doubles(ns[t]);
                        nn_read(gr[t], now);
                        CHECK(memcmp(now, vals[t], sizeof(double) * (size_t)ns[t]) == 0,
                              "%s: changed below max_norm", what);
                        free(now);
                    }
                    if (!firsts[t]) firsts[t] = gr[t];
                    else {
                        CHECK(nn_same_bits(firsts[t], gr[t]), "%s: bits differ from %s", what,
                              bk[0]);
                        tensor_free(gr[t]);
                    }
                    free(ref);
                    free(acc);
                    free(vals[t]);
                }
            }
            for (int t = 0; t < 3; t++) tensor_free(firsts[t]);
        }
    }
}

static void clip_special_and_bad(void)
{
    int64_t sh[1] = {3};
    tensor_t *a = nn_zeros(FMT_FP32, 1, sh), *b = nn_zeros(FMT_DFP16, 1, sh);
    float av[3] = {3, NAN, 0}, bv[3] = {4, 0, 0}, got[3];
    CHECK_STATUS(tensor_from_f32(a, av), FX_OK);
    CHECK_STATUS(tensor_from_f32(b, bv), FX_OK);
    tensor_t *gs[2] = {a, b};
    double norm = 0;
    /* a NaN norm scales nothing */
    CHECK_STATUS(fx_clip_grad_norm(gs, 2, 1.0, &norm), FX_OK);
    CHECK(isnan(norm), "NaN gradient: norm %g", norm);
    CHECK_STATUS(tensor_to_f32(b, got), FX_OK);
    CHECK(got[0] == 4, "NaN norm scaled the gradients: %g", got[0]);
    av[1] = INFINITY;
    CHECK_STATUS(tensor_from_f32(a, av), FX_OK);
    CHECK_STATUS(fx_clip_grad_norm(gs, 2, 1.0, &norm), FX_OK);
    CHECK(isinf(norm), "Inf gradient: norm %g", norm);
    /* -0, subnormals: norm of {3, -0, 1e-40} and {4, 0, 0} is 5 */
    av[1] = -0.0f;
    av[2] = 1e-40f;
    CHECK_STATUS(tensor_from_f32(a, av), FX_OK);
    CHECK_STATUS(fx_clip_grad_norm(gs, 2, 2.5, &norm), FX_OK);
    CHECK(norm == 5.0, "norm %.17g, want 5", norm);
    CHECK_STATUS(tensor_to_f32(a, got), FX_OK);
    CHECK(fabs(got[0] - 1.5) <= 1e-6 && got[1] == 0 && signbit(got[1]),
          "clipped by half: %g %g", got[0], got[1]);
    /* bad input: nothing scaled */
    CHECK_STATUS(tensor_from_f32(b, bv), FX_OK);
    tensor_t *dup[2] = {b, b}, *withnull[2] = {b, NULL};
    CHECK_STATUS(fx_clip_grad_norm(dup, 2, 1.0, &norm), FX_EINVAL);
    nn_check_message("fx_clip_grad_norm");
    CHECK_STATUS(fx_clip_grad_norm(withnull, 2, 1.0, &norm), FX_EINVAL);
    CHECK_STATUS(fx_clip_grad_norm(gs, -1, 1.0, &norm), FX_EINVAL);
    CHECK_STATUS(fx_clip_grad_norm(NULL, 2, 1.0, &norm), FX_EINVAL);
    CHECK_STATUS(fx_clip_grad_norm(gs, 2, NAN, &norm), FX_EINVAL);
    CHECK_STATUS(fx_clip_grad_norm(gs, 2, -1, &norm), FX_EINVAL);
    CHECK_STATUS(tensor_to_f32(b, got), FX_OK);
    CHECK(got[0] == 4, "a failing clip scaled the gradients: %g", got[0]);
    CHECK_STATUS(fx_clip_grad_norm(NULL, 0, 1.0, &norm), FX_OK);
    CHECK(norm == 0, "empty list: norm %g", norm);
    tensor_free(a);
    tensor_free(b);
}

int main(void)
{
    const char *bk[8];
    int nbk = nn_backends(bk, 8);
    for (int k = 0; k < FMT_COUNT; k++)
        for (int um = 0; um < 2; um++) {
            adamw_case(NN_FORMATS[k], 37, um, bk, nbk);
            adamw_case(NN_FORMATS[k], 40000, um, bk, nbk);
        }
    printf("adamw: %d formats x master/no master x 2 sizes on %d backends\n", FMT_COUNT, nbk);
    adamw_bad_input();
    clip_case(bk, nbk);
    clip_special_and_bad();
    return test_finish("test_nn_adamw_clip");
}
