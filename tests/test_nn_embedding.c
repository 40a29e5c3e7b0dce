/* tensor_embedding and tensor_embedding_backward: every format x backend against fp64
 * references, the integer formats as exact integer gathers and sums (bit for bit across
 * backends and thread counts), the backward against finite differences, special values, bad
 * indices and shapes (a clear status, nothing written).
 *
 * Bounds: the forward copies the table's values, so y equals the stored table row up to y's
 * own rounding (exact when y has the table's format: checked bit for bit). The backward sums
 * in double (float formats: acc = (n + 2) u64 sum |dy|) or exactly in int64 (acc 0), then one
 * rounding (nn_bound).
 */
#include "flexpoint_nn.h"
#include "nn_misc_util.h"

static void run_case(int64_t V, int64_t D, int64_t n, fmt_t f, fmt_t fo, const char **bk, int nbk)
{
    test_rng r;
    test_rng_seed(&r, 3000 + (uint64_t)(V * 7 + D * 3 + n) + (uint64_t)f * 11 + (uint64_t)fo);
    int64_t st[2] = {V, D}, sy[3] = {2, n / 2, D};
    double *t = nn_doubles(V * D), *g = nn_doubles(n * D), *ref = nn_doubles(n * D);
    double *dref = nn_doubles(V * D), *acc = nn_doubles(V * D);
    int32_t *idx = nn_xmalloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < V * D; i++) t[i] = 3 * test_rng_normal(&r);
    for (int64_t i = 0; i < n * D; i++) g[i] = test_rng_normal(&r);
    for (int64_t i = 0; i < n; i++) idx[i] = (int32_t)test_rng_range(&r, 0, V - 1);
    idx[n - 1] = idx[0]; /* a repeated index: its gradient rows add */
    tensor_t *tt = nn_tensor(f, 2, st, t), *tg = nn_tensor(f, 3, sy, g);
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < D; k++) ref[i * D + k] = t[(int64_t)idx[i] * D + k];
    for (int64_t i = 0; i < V * D; i++) dref[i] = acc[i] = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < D; k++) {
            dref[(int64_t)idx[i] * D + k] += g[i * D + k];
            acc[(int64_t)idx[i] * D + k] += fabs(g[i * D + k]);
        }
    for (int64_t i = 0; i < V * D; i++)
        acc[i] = fmt_is_shared_exponent(f) ? 0 : (double)(n + 2) * NN_U64 * acc[i];
    char what[160];
    tensor_t *fy = NULL, *fd = NULL;
    for (int b = 0; b < nbk; b++) {
        CHECK_STATUS(flexpoint_set_backend(bk[b]), FX_OK);
        tensor_t *y = nn_zeros(fo, 3, sy), *dt = nn_zeros(fo, 2, st);
        snprintf(what, sizeof what, "embedding V=%lld D=%lld n=%lld %s->%s %s", (long long)V,
                 (long long)D, (long long)n, fmt_name(f), fmt_name(fo), bk[b]);
        CHECK_STATUS(tensor_embedding(y, tt, idx, n), FX_OK);
        nn_check(what, y, ref, NULL, n * D);
        if (fo == f && (f == FMT_FP16 || f == FMT_BF16)) { /* the stored patterns, copied */
            uint16_t *ry = nn_xmalloc(2 * (size_t)(n * D)), *rt = nn_xmalloc(2 * (size_t)(V * D));
            CHECK_STATUS(tensor_get_raw(y, ry), FX_OK);
            CHECK_STATUS(tensor_get_raw(tt, rt), FX_OK);
            int same = 1;
            for (int64_t i = 0; i < n; i++)
                same &= memcmp(ry + i * D, rt + (int64_t)idx[i] * D, 2 * (size_t)D) == 0;
            CHECK(same, "%s: not the table's own patterns", what);
            free(ry);
            free(rt);
        }
        if (fo == f && f == FMT_DFP16) { /* exact: the rows' exponent is at most the table's */
            double *yv = nn_doubles(n * D);
            nn_read(y, yv);
            CHECK(memcmp(yv, ref, sizeof(double) * (size_t)(n * D)) == 0, "%s: not exact", what);
            free(yv);
        }
        snprintf(what, sizeof what, "embedding_backward V=%lld D=%lld n=%lld %s->%s %s",
                 (long long)V, (long long)D, (long long)n, fmt_name(f), fmt_name(fo), bk[b]);
        CHECK_STATUS(tensor_embedding_backward(dt, tg, idx, n), FX_OK);
        nn_check(what, dt, dref, acc, V * D);
        if (!fy) {
            fy = y;
            fd = dt;
        } else {
            CHECK(nn_same_bits(fy, y) && nn_same_bits(fd, dt), "%s: bits differ from %s", what,
                  bk[0]);
            tensor_free(y);
            tensor_free(dt);
        }
    }
    int prev = flexpoint_set_num_threads(1);
    tensor_t *d1 = nn_zeros(fo, 2, st);
    CHECK_STATUS(tensor_embedding_backward(d1, tg, idx, n), FX_OK);
    flexpoint_set_num_threads(prev);
    CHECK(nn_same_bits(d1, fd), "embedding_backward %s: thread count matters", fmt_name(f));
    tensor_free(d1);
    tensor_free(fy);
    tensor_free(fd);
    tensor_free(tt);
    tensor_free(tg);
    free(t); free(g); free(ref); free(dref); free(acc); free(idx);
}

/* The gradient against central differences of L = sum w * embedding(table) (linear in the
 * table: exact up to rounding). */
static void fd_check(void)
{
    int64_t st[2] = {5, 3}, sy[2] = {4, 3};
    int32_t idx[4] = {2, 0, 2, 4};
    double t[15], w[12], g[15], yv[12];
    test_rng r;
    test_rng_seed(&r, 9);
    for (int i = 0; i < 15; i++) t[i] = test_rng_normal(&r);
    for (int i = 0; i < 12; i++) w[i] = test_rng_normal(&r);
    tensor_t *tt = nn_tensor(FMT_FP32, 2, st, t), *tw = nn_tensor(FMT_FP32, 2, sy, w);
    tensor_t *y = nn_zeros(FMT_FP32, 2, sy), *dt = nn_zeros(FMT_FP32, 2, st);
    CHECK_STATUS(tensor_embedding_backward(dt, tw, idx, 4), FX_OK);
    nn_read(dt, g);
    float tf[15];
    for (int i = 0; i < 15; i++) tf[i] = (float)t[i];
    for (int i = 0; i < 15; i++) {
        double l[2];
        for (int s = 0; s < 2; s++) {
            tf[i] = (float)(t[i] + (s ? -0.5 : 0.5));
            CHECK_STATUS(tensor_from_f32(tt, tf), FX_OK);
            CHECK_STATUS(tensor_embedding(y, tt, idx, 4), FX_OK);
            nn_read(y, yv);
            l[s] = 0;
            for (int j = 0; j < 12; j++) l[s] += w[j] * yv[j];
        }
        tf[i] = (float)t[i];
        double fd = l[0] - l[1];
        CHECK(fabs(fd - g[i]) <= 1e-6 * (1 + fabs(fd)), "embedding gradient [%d]: fd %g got %g", i,
              fd, g[i]);
    }
    tensor_free(tt);
    tensor_free(tw);
    tensor_free(y);
    tensor_free(dt);
}

/* NaN/Inf rows are gathered as they are; their gradient sums follow IEEE; the integer
 * formats count them (and saturation) in the write. */
static void special_values(void)
{
    int64_t st[2] = {3, 2}, sy[2] = {3, 2};
    float tv[6] = {NAN, INFINITY, -0.0f, 1e-40f, 1e30f, -1e30f};
    int32_t idx[3] = {0, 1, 0};
    for (int k = 0; k < FMT_COUNT; k++) {
        fmt_t f = NN_FORMATS[k];
        tensor_t *t = nn_zeros(FMT_FP32, 2, st), *y = nn_zeros(f, 2, sy), *dt = nn_zeros(f, 2, st);
        CHECK_STATUS(tensor_from_f32(t, tv), FX_OK);
        CHECK_STATUS(tensor_embedding(y, t, idx, 3), FX_OK);
        CHECK_STATUS(tensor_embedding_backward(dt, t, idx, 3), FX_OK);
        float v[6], d[6];
        CHECK_STATUS(tensor_to_f32(y, v), FX_OK);
        CHECK_STATUS(tensor_to_f32(dt, d), FX_OK);
        if (!fmt_is_shared_exponent(f)) {
            CHECK(isnan(v[0]) && v[1] == INFINITY && v[2] == 0 && signbit(v[2]),
                  "embedding specials %s: %g %g %g", fmt_name(f), v[0], v[1], v[2]);
            /* row 0 = t[0] + t[2]: NaN + -0 and Inf + 1e30 */
            CHECK(isnan(d[0]) && d[1] == INFINITY, "embedding_backward specials %s: %g %g",
                  fmt_name(f), d[0], d[1]);
        } else {
            double nf = -1;
            CHECK_STATUS(tensor_stat(y, "nonfinite", &nf), FX_OK);
            CHECK(nf == 4, "embedding specials %s: %g non-finite, want 4", fmt_name(f), nf);
        }
        tensor_free(t);
        tensor_free(y);
        tensor_free(dt);
    }
    /* values beyond the format: a FLEX16_5 table at its top exponent summed twice saturates */
    int64_t s1[2] = {1, 1};
    tensor_t *g = nn_zeros(FMT_FLEX16_5, 2, s1), *dt = nn_zeros(FMT_FLEX16_5, 2, s1);
    float big = 30000.0f;
    CHECK_STATUS(tensor_from_f32(g, &big), FX_OK);
    int64_t s2[2] = {2, 1};
    tensor_t *g2 = nn_zeros(FMT_FLEX16_5, 2, s2);
    float bb[2] = {30000.0f, 30000.0f};
    CHECK_STATUS(tensor_from_f32(g2, bb), FX_OK);
    int32_t zz[2] = {0, 0};
    CHECK_STATUS(tensor_embedding_backward(dt, g2, zz, 2), FX_OK);
    double sat = -1;
    float got;
    CHECK_STATUS(tensor_stat(dt, "saturated", &sat), FX_OK);
    CHECK_STATUS(tensor_to_f32(dt, &got), FX_OK);
    CHECK(sat == 1 && got == 32767.0f, "flex16_5 sum 60000 at window top: saturated %g, got %g",
          sat, got);
    tensor_t *dh = nn_zeros(FMT_FP16, 2, s1);
    float h2[2] = {60000.0f, 60000.0f};
    tensor_t *gh = nn_zeros(FMT_FP16, 2, s2);
    CHECK_STATUS(tensor_from_f32(gh, h2), FX_OK);
    CHECK_STATUS(tensor_embedding_backward(dh, gh, zz, 2), FX_OK);
    CHECK_STATUS(tensor_to_f32(dh, &got), FX_OK);
    CHECK(got == INFINITY, "fp16 sum 120000: %g, want +Inf", got);
    tensor_free(g);
    tensor_free(dt);
    tensor_free(g2);
    tensor_free(dh);
    tensor_free(gh);
}

static void bad_input(void)
{
    int64_t st[2] = {4, 3}, sy[2] = {2, 3}, sy4[2] = {2, 4}, s1[1] = {12}, sy3[2] = {3, 3};
    tensor_t *t = nn_zeros(FMT_DFP16, 2, st), *y = nn_zeros(FMT_FP16, 2, sy);
    tensor_t *y4 = nn_zeros(FMT_FP16, 2, sy4), *t1 = nn_zeros(FMT_FP32, 1, s1);
    tensor_t *yb = nn_zeros(FMT_FP16, 2, sy3), *dt = nn_zeros(FMT_DFP16, 2, st);
    float ones[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, before[12], after[12];
    CHECK_STATUS(tensor_from_f32(y, ones), FX_OK);
    CHECK_STATUS(tensor_from_f32(dt, ones), FX_OK);
    CHECK_STATUS(tensor_to_f32(y, before), FX_OK);
    int32_t ok[2] = {0, 3}, hi[2] = {0, 4}, neg[2] = {-1, 0};
    CHECK_STATUS(tensor_embedding(y, t, hi, 2), FX_ERANGE);
    nn_check_message("tensor_embedding");
    CHECK(strstr(flexpoint_last_error(), "indices[1]=4") != NULL, "message: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_embedding(y, t, neg, 2), FX_ERANGE);
    CHECK(strstr(flexpoint_last_error(), "indices[0]=-1") != NULL, "message: %s",
          flexpoint_last_error());
    CHECK_STATUS(tensor_embedding(y4, t, ok, 2), FX_ESHAPE);
    CHECK_STATUS(tensor_embedding(y, t, ok, 3), FX_ESHAPE);
    CHECK_STATUS(tensor_embedding(yb, t, ok, 2), FX_ESHAPE);
    CHECK_STATUS(tensor_embedding(y, t1, ok, 2), FX_ESHAPE);
    CHECK_STATUS(tensor_embedding(y, t, NULL, 2), FX_EINVAL);
    CHECK_STATUS(tensor_embedding(y, t, ok, -1), FX_EINVAL);
    CHECK_STATUS(tensor_embedding(NULL, t, ok, 2), FX_EINVAL);
    CHECK_STATUS(tensor_embedding_backward(dt, y, hi, 2), FX_ERANGE);
    nn_check_message("tensor_embedding_backward");
    CHECK_STATUS(tensor_embedding_backward(dt, y4, ok, 2), FX_ESHAPE);
    CHECK_STATUS(tensor_to_f32(y, after), FX_OK);
    CHECK(memcmp(before, after, 6 * sizeof(float)) == 0, "y changed by a failing call");
    CHECK_STATUS(tensor_to_f32(dt, after), FX_OK);
    CHECK(memcmp(ones, after, sizeof ones) == 0, "dtable changed by a failing call");
    /* no indices: nothing to gather; the gradient is all zeros */
    int64_t s0[2] = {0, 3};
    tensor_t *y0 = nn_zeros(FMT_FP32, 2, s0);
    CHECK_STATUS(tensor_embedding(y0, t, NULL, 0), FX_OK);
    CHECK_STATUS(tensor_embedding_backward(dt, y0, NULL, 0), FX_OK);
    CHECK_STATUS(tensor_to_f32(dt, after), FX_OK);
    CHECK(after[0] == 0 && after[11] == 0, "empty gradient not zero: %g", after[0]);
    tensor_free(t); tensor_free(y); tensor_free(y4); tensor_free(t1); tensor_free(yb);
    tensor_free(dt); tensor_free(y0);
}

int main(void)
{
    const char *bk[8];
    int nbk = nn_backends(bk, 8);
    static const int64_t sizes[][3] = {{1, 1, 2}, {10, 4, 6}, {50, 16, 40}, {1000, 64, 256}};
    for (int s = 0; s < 4; s++)
        for (int k = 0; k < FMT_COUNT; k++) {
            fmt_t f = NN_FORMATS[k];
            run_case(sizes[s][0], sizes[s][1], sizes[s][2], f, f, bk, nbk);
            run_case(sizes[s][0], sizes[s][1], sizes[s][2], f,
                     fmt_is_shared_exponent(f) ? FMT_FP32 : FMT_DFP16, bk, nbk);
        }
    printf("embedding: 4 sizes x %d formats (+ another output format) on %d backends\n", FMT_COUNT,
           nbk);
    fd_check();
    special_values();
    bad_input();
    return test_finish("test_nn_embedding");
}
