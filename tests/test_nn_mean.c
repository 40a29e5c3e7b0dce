/* tensor_mean: fp64 reference, every format and backend, exact correctly rounded integer
 * results, bit-identity across backends (integer formats) and thread counts, bad input.
 *
 * Bounds (acc, before the output rounding of nn_bound):
 *   float compute: gamma_n * sum|a| / n + 2^-53 |r| (fp32 accumulation of n terms in any order,
 *   gamma_n = n u32 / (1 - n u32), then one double division);
 *   integer compute: none. The result must be the exact mean sum(m) * 2^e_in / n rounded once
 *   (nearest, ties to even): to the output's exponent for a shared-exponent output, to the
 *   format's significand for a float output; both checked bit for bit with integer
 *   arithmetic here.
 */
#include "flexpoint_nn.h"
#include "nn_misc_util.h"

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
    int axis;
    int keep;  /* out keeps the reduced axis as size 1 */
    int view;  /* 0 none, 1 transposed 2-D input, 2 every second element of the last dim */
} mean_case;

static const mean_case CASES[] = {
    {"all 1000", 1, {1000}, FX_AXIS_ALL, 0, 0},
    {"all 3x7", 2, {3, 7}, FX_AXIS_ALL, 0, 0},
    {"axis0 5x7x3", 3, {5, 7, 3}, 0, 0, 0},
    {"axis1 5x7x3", 3, {5, 7, 3}, 1, 0, 0},
    {"axis-1 5x7x3 keep", 3, {5, 7, 3}, -1, 1, 0},
    {"axis1 len2 40x2", 2, {40, 2}, 1, 0, 0},
    {"axis0 1-D 17", 1, {17}, 0, 1, 0},
    {"axis1 transposed 9x6", 2, {9, 6}, 1, 0, 1},
    {"axis0 sliced 8x5", 2, {8, 5}, 0, 0, 2},
    {"axis0 4x3x2x5", 4, {4, 3, 2, 5}, 0, 0, 0},
    {"axis1 400x400 (threaded)", 2, {400, 400}, 1, 0, 0},
};

/* Input tensor of logical shape c->shape, possibly a view; vals receives the stored values. */
static tensor_t *make_input(fmt_t f, const mean_case *c, double *vals, test_rng *r,
                            tensor_t **base)
{
    int64_t n = nn_numel(c->ndim, c->shape);
    *base = NULL;
    if (c->view == 0) {
        for (int64_t i = 0; i < n; i++) vals[i] = 1.0 + test_rng_normal(r);
        return nn_tensor(f, c->ndim, c->shape, vals);
    }
    int64_t bs[4];
    memcpy(bs, c->shape, sizeof bs);
    if (c->view == 1) {
        bs[0] = c->shape[1];
        bs[1] = c->shape[0];
    } else {
        bs[c->ndim - 1] *= 2;
    }
    int64_t bn = nn_numel(c->ndim, bs);
    double *bv = nn_doubles(bn);
    for (int64_t i = 0; i < bn; i++) bv[i] = 1.0 + test_rng_normal(r);
    *base = nn_tensor(f, c->ndim, bs, bv);
    free(bv);
    tensor_t *v = c->view == 1 ? tensor_view_transpose(*base, 0, 1)
                               : tensor_view_slice(*base, c->ndim - 1, 0, bs[c->ndim - 1], 2);
    nn_read(v, vals);
    return v;
}

/* Output shape and geometry of the reduction. */
static void geometry(const mean_case *c, int *ondim, int64_t *oshape, int64_t *outer,
                     int64_t *len, int64_t *inner)
{
    if (c->axis == FX_AXIS_ALL) {
        *ondim = 1;
        oshape[0] = 1;
        *outer = *inner = 1;
        *len = nn_numel(c->ndim, c->shape);
        return;
    }
    int ax = c->axis < 0 ? c->axis + c->ndim : c->axis;
    *outer = *inner = 1;
    for (int d = 0; d < ax; d++) *outer *= c->shape[d];
    *len = c->shape[ax];
    for (int d = ax + 1; d < c->ndim; d++) *inner *= c->shape[d];
    *ondim = 0;
    for (int d = 0; d < c->ndim; d++) {
        if (d == ax && !c->keep) continue;
        oshape[(*ondim)++] = d == ax ? 1 : c->shape[d];
    }
}

/* Nearest-even rounding of num / den, den > 0, in exact integer arithmetic. */
static int64_t div_rne(int64_t num, int64_t den)
{
    int64_t q = num / den, r = num % den; /* truncated */
    if (r < 0) {
        q -= 1;
        r += den;
    }
    /* now num = q * den + r with 0 <= r < den */
    if (2 * r > den || (2 * r == den && (q & 1))) q += 1;
    return q;
}

/* The output's mantissas must be the exact mean rounded once to its exponent. */
static void check_exact(const char *what, const tensor_t *a, const tensor_t *out,
                        int64_t outer, int64_t len, int64_t inner)
{
    int64_t n = tensor_numel(a), no = tensor_numel(out);
    int16_t *m = nn_xmalloc(sizeof(int16_t) * (size_t)n);
    int16_t *mo = nn_xmalloc(sizeof(int16_t) * (size_t)no);
    CHECK_STATUS(tensor_get_raw(a, m), FX_OK);
    CHECK_STATUS(tensor_get_raw(out, mo), FX_OK);
    int ea = tensor_exp(a), eo = tensor_exp(out);
    int bad = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t s = 0;
            for (int64_t k = 0; k < len; k++) s += m[(o * len + k) * inner + i];
            /* mean = s / len * 2^ea = want * 2^eo */
            int64_t want;
            if (ea >= eo) {
                CHECK(ea - eo < 30, "%s: exponent gap %d too large for the test", what, ea - eo);
                want = div_rne(s * ((int64_t)1 << (ea - eo)), len);
            } else {
                CHECK(eo - ea < 30, "%s: exponent gap %d too large for the test", what, eo - ea);
                want = div_rne(s, len * ((int64_t)1 << (eo - ea)));
            }
            if (want > 32767) want = 32767; /* saturation (the test also checks it is 0) */
            if (want < -32767) want = -32767;
            if (mo[o * inner + i] != want && bad++ < 3)
                CHECK(0, "%s: out[%lld] mantissa %d, exact rounding gives %lld (e_in %d, e_out %d)",
                      what, (long long)(o * inner + i), mo[o * inner + i], (long long)want, ea, eo);
        }
    CHECK(bad == 0, "%s: %d outputs not correctly rounded", what, bad);
    free(m);
    free(mo);
}

/* A float output of an integer mean must be the correctly rounded value of sum(m) * 2^e / n
 * (p significant bits, nearest even), computed here with integers. Values outside the normal
 * range of the output format are skipped. */
static int bit_length(uint64_t v)
{
    int b = 0;
    while (v) {
        b++;
        v >>= 1;
    }
    return b;
}

static void check_exact_float(const char *what, const tensor_t *a, const tensor_t *out,
                              int64_t outer, int64_t len, int64_t inner)
{
    const fmt_t f = tensor_fmt(out);
    const int p = f == FMT_FP32 ? 24 : f == FMT_FP16 ? 11 : 8;
    const double lo = f == FMT_FP16 ? 0x1.0p-14 : 0x1.0p-126, hi = f == FMT_FP16 ? 65504 : 1e38;
    int64_t n = tensor_numel(a), no = tensor_numel(out);
    int16_t *m = nn_xmalloc(sizeof(int16_t) * (size_t)n);
    double *y = nn_doubles(no);
    CHECK_STATUS(tensor_get_raw(a, m), FX_OK);
    nn_read(out, y);
    int ea = tensor_exp(a), bad = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t s = 0;
            for (int64_t k = 0; k < len; k++) s += m[(o * len + k) * inner + i];
            double want = 0;
            if (s != 0) {
                int64_t as = s < 0 ? -s : s;
                /* t with 2^(p-1) <= |s| 2^t / len < 2^p (exact comparisons), then
                 * q = round(|s| 2^t / len) */
                int t = p - 1 - (bit_length((uint64_t)as) - bit_length((uint64_t)len));
                int64_t num = 0, den = 1;
                for (int tries = 0; tries < 4; tries++) {
                    CHECK(t > -20 && t < 61 - bit_length((uint64_t)as), "%s: shift %d", what, t);
                    num = t >= 0 ? as * ((int64_t)1 << t) : as;
                    den = t >= 0 ? len : len * ((int64_t)1 << -t);
                    if (num < den * ((int64_t)1 << (p - 1))) t++;
                    else if (num >= den * ((int64_t)1 << p)) t--;
                    else break;
                }
                int64_t q = div_rne(num, den);
                want = ldexp((double)(s < 0 ? -q : q), ea - t);
            }
            double aw = fabs(want);
            if (want != 0 && (aw < lo || aw > hi)) continue;
            if (y[o * inner + i] != want && bad++ < 3)
                CHECK(0, "%s: out[%lld] = %.10g, correctly rounded %.10g", what,
                      (long long)(o * inner + i), y[o * inner + i], want);
        }
    CHECK(bad == 0, "%s: %d outputs not correctly rounded", what, bad);
    free(m);
    free(y);
}

static void run_case(const mean_case *c, fmt_t fin, fmt_t fout, const char **bk, int nbk,
                     int threads_check)
{
    test_rng r;
    test_rng_seed(&r, 900 + (uint64_t)(c - CASES) * 13 + (uint64_t)fin);
    int64_t n = nn_numel(c->ndim, c->shape);
    double *a = nn_doubles(n);
    tensor_t *base;
    tensor_t *ta = make_input(fin, c, a, &r, &base);
    int ondim;
    int64_t oshape[4], outer, len, inner;
    geometry(c, &ondim, oshape, &outer, &len, &inner);
    int64_t no = outer * inner;
    double *ref = nn_doubles(no), *acc = nn_doubles(no);
    const int integer = fmt_is_shared_exponent(fin);
    const double gam = len * NN_U32 / (1.0 - len * NN_U32);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double s = 0, sa = 0;
            for (int64_t k = 0; k < len; k++) {
                double v = a[(o * len + k) * inner + i];
                s += v;
                sa += fabs(v);
            }
            ref[o * inner + i] = s / (double)len;
            acc[o * inner + i] = integer ? 0.0 : gam * sa / (double)len + NN_U64 * fabs(s / len);
        }

    char what[200];
    tensor_t *first = NULL;
    for (int b = 0; b < nbk; b++) {
        CHECK_STATUS(flexpoint_set_backend(bk[b]), FX_OK);
        tensor_t *out = nn_zeros(fout, ondim, oshape);
        snprintf(what, sizeof what, "mean %s in=%s out=%s %s", c->name, fmt_name(fin),
                 fmt_name(fout), bk[b]);
        int rc = tensor_mean(out, ta, c->axis);
        CHECK(rc == FX_OK, "%s: status %d: %s", what, rc, flexpoint_last_error());
        nn_check(what, out, ref, acc, no);
        if (integer && fmt_is_shared_exponent(fout)) check_exact(what, ta, out, outer, len, inner);
        if (integer && !fmt_is_shared_exponent(fout))
            check_exact_float(what, ta, out, outer, len, inner);
        if (!first) {
            first = out;
        } else {
            if (integer)
                CHECK(nn_same_bits(first, out), "%s: bits differ from backend %s", what, bk[0]);
            tensor_free(out);
        }
    }
    if (threads_check) {
        int prev = flexpoint_set_num_threads(1);
        tensor_t *o1 = nn_zeros(fout, ondim, oshape), *o3 = nn_zeros(fout, ondim, oshape);
        CHECK_STATUS(tensor_mean(o1, ta, c->axis), FX_OK);
        flexpoint_set_num_threads(3);
        CHECK_STATUS(tensor_mean(o3, ta, c->axis), FX_OK);
        flexpoint_set_num_threads(prev);
        CHECK(nn_same_bits(o1, o3), "mean %s %s: results depend on the thread count", c->name,
              fmt_name(fout));
        if (integer)
            CHECK(nn_same_bits(o1, first), "mean %s %s: threads differ from the default",
                  c->name, fmt_name(fout));
        tensor_free(o1);
        tensor_free(o3);
    }
    tensor_free(first);
    tensor_free(ta);
    tensor_free(base);
    free(a);
    free(ref);
    free(acc);
}

/* Exact ties and near-ties: means of two or three mantissas at the top of the range. */
static void ties(void)
{
    int64_t sh[2] = {5, 2}, osh[1] = {5};
    const int16_t m[10] = {32767, 32766, 1, 2, 3, 0, -5, 2, 7, 8};
    /* means 32766.5 -> 32766 (tie, even), 1.5 -> 2, 1.5 -> 2, -1.5 -> -2, 7.5 -> 8 */
    const int16_t want[5] = {32766, 2, 2, -2, 8};
    fmt_t fs[2] = {FMT_DFP16, FMT_FLEX16_5};
    for (int k = 0; k < 2; k++) {
        tensor_t *a = nn_zeros(fs[k], 2, sh), *o = nn_zeros(FMT_DFP16, 1, osh);
        CHECK_STATUS(tensor_set_exp(a, -3), FX_OK);
        CHECK_STATUS(tensor_set_raw(a, m), FX_OK);
        CHECK_STATUS(tensor_mean(o, a, 1), FX_OK);
        int16_t got[5];
        CHECK_STATUS(tensor_get_raw(o, got), FX_OK);
        CHECK(tensor_exp(o) == -3, "ties %s: exponent %d, want -3", fmt_name(fs[k]), tensor_exp(o));
        for (int i = 0; i < 5; i++)
            CHECK(got[i] == want[i], "ties %s [%d]: %d, want %d", fmt_name(fs[k]), i, got[i],
                  want[i]);
        tensor_free(a);
        tensor_free(o);
    }
    /* a mean of 1/3: needs the sticky bit; 1/3 * 2^16 = 21845.33 -> 21845 at exponent -16 */
    int64_t s3[1] = {3}, s1[1] = {1};
    const int16_t t[3] = {1, 0, 0};
    tensor_t *a = nn_zeros(FMT_DFP16, 1, s3), *o = nn_zeros(FMT_DFP16, 1, s1);
    CHECK_STATUS(tensor_set_raw(a, t), FX_OK);
    CHECK_STATUS(tensor_mean(o, a, FX_AXIS_ALL), FX_OK);
    int16_t got;
    CHECK_STATUS(tensor_get_raw(o, &got), FX_OK);
    CHECK(got == 21845 && tensor_exp(o) == -16, "mean 1/3: %d at %d", got, tensor_exp(o));
    tensor_free(a);
    tensor_free(o);
}

static void bad_input(void)
{
    int64_t s23[2] = {2, 3}, s3[1] = {3}, s2[1] = {2}, s1[1] = {1}, s05[2] = {0, 5}, s0[1] = {0};
    int64_t s5[1] = {5};
    tensor_t *a = nn_zeros(FMT_DFP16, 2, s23), *o3 = nn_zeros(FMT_FP32, 1, s3);
    tensor_t *o2 = nn_zeros(FMT_FP32, 1, s2), *o1 = nn_zeros(FMT_FP32, 1, s1);
    CHECK_STATUS(tensor_mean(NULL, a, 0), FX_EINVAL);
    nn_check_message("tensor_mean");
    CHECK_STATUS(tensor_mean(o3, NULL, 0), FX_EINVAL);
    CHECK_STATUS(tensor_mean(o3, a, 2), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), "axis=2") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_mean(o3, a, -3), FX_EINVAL);
    CHECK_STATUS(tensor_mean(o2, a, 0), FX_ESHAPE); /* [2,3] over axis 0 gives [3] */
    nn_check_message("tensor_mean");
    CHECK_STATUS(tensor_mean(o3, a, FX_AXIS_ALL), FX_ESHAPE);
    CHECK_STATUS(tensor_mean(o3, a, 0), FX_OK);
    CHECK_STATUS(tensor_mean(o2, a, 1), FX_OK);
    CHECK_STATUS(tensor_mean(o1, a, FX_AXIS_ALL), FX_OK);
    /* zero elements: undefined mean, unless the output is empty too */
    tensor_t *e = nn_zeros(FMT_FP32, 2, s05), *e5 = nn_zeros(FMT_FP32, 1, s5);
    tensor_t *e0 = nn_zeros(FMT_FP32, 1, s0);
    float keep[5] = {4, 4, 4, 4, 4}, after[5];
    CHECK_STATUS(tensor_from_f32(e5, keep), FX_OK);
    CHECK_STATUS(tensor_mean(e5, e, 0), FX_ESHAPE);
    CHECK(strstr(flexpoint_last_error(), "zero") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_to_f32(e5, after), FX_OK);
    CHECK(memcmp(keep, after, sizeof keep) == 0, "out changed by a failing call");
    CHECK_STATUS(tensor_mean(o1, e, FX_AXIS_ALL), FX_ESHAPE);
    CHECK_STATUS(tensor_mean(e0, e, 1), FX_OK);
    tensor_free(a);
    tensor_free(o1);
    tensor_free(o2);
    tensor_free(o3);
    tensor_free(e);
    tensor_free(e5);
    tensor_free(e0);
}

int main(void)
{
    const char *bk[8];
    int nbk = nn_backends(bk, 8);
    const int ncases = (int)(sizeof CASES / sizeof *CASES);
    for (int ci = 0; ci < ncases; ci++) {
        int big = CASES[ci].shape[0] >= 400;
        for (int k = 0; k < FMT_COUNT; k++) {
            fmt_t f = NN_FORMATS[k];
            run_case(&CASES[ci], f, f, bk, nbk, big);
            if (big) continue;
            run_case(&CASES[ci], f, fmt_is_shared_exponent(f) ? FMT_FP32 : FMT_DFP16, bk, nbk, 0);
            if (f == FMT_DFP16) {
                run_case(&CASES[ci], f, FMT_FLEX16_5, bk, nbk, 0);
                run_case(&CASES[ci], f, FMT_FP16, bk, nbk, 0);
                run_case(&CASES[ci], f, FMT_BF16, bk, nbk, 0);
            }
        }
    }
    printf("mean: %d cases x %d formats (+ mixed) on %d backends\n", ncases, FMT_COUNT, nbk);
    ties();
    bad_input();
    return test_finish("test_nn_mean");
}
