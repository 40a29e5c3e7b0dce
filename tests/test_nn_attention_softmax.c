/* tensor_attention_softmax: by definition tensor_scale into fp32, tensor_causal_mask with -Inf
 * (when causal) and tensor_softmax along the last axis. Against that composition, write by
 * write (stored bits, exponent, statistics, trace record): every input format x every output
 * format, on every backend at 1 and 2 threads, square and non-square score matrices, rows
 * shorter and longer than a vector, sizes above the parallel threshold, positive, negative
 * and zero scales, causal or not, with jumps of the scores' scale between writes; y sharing x's
 * storage; scores with +-Inf and NaN (float formats). Without specials every write is also
 * checked against an fp64 reference on the values as stored: softmax of s * x with -Inf past
 * the diagonal, within softmax's bound (test_nn_softmax_axis.c: (2L + 16 + 2 dm) u32 |ref|, L
 * the row length, dm = max |s x - m| over the row) widened by the rounding of s * x to fp32
 * (relative u32 of each |s x| and of the maximum, through exp: 2 (|s x| + |m|) u32 more),
 * then the output's one rounding (nn_bound). Bad input gets its status and leaves y as it
 * was. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "nn_misc_util.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const fmt_t FMTS[5] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5, FMT_DFP16};

/* the fp64 reference of the op on x's stored values, and each element's bound before the
 * output's rounding */
static void reference(const tensor_t *x, double s, int causal, double *ref, double *acc)
{
    const int nd = tensor_ndim(x);
    const int64_t Sk = tensor_shape(x)[nd - 1], Sq = tensor_shape(x)[nd - 2];
    const int64_t n = tensor_numel(x), rows = n / Sk;
    double *xv = nn_doubles(n);
    nn_read(x, xv);
    for (int64_t r = 0; r < rows; r++) {
        const int64_t keep = causal ? r % Sq + 1 : Sk;
        const double *xr = xv + r * Sk;
        double m = -INFINITY, sum = 0, dm = 0, big = 0;
        for (int64_t j = 0; j < keep; j++) m = fmax(m, s * xr[j]);
        for (int64_t j = 0; j < keep; j++) {
            sum += exp(s * xr[j] - m);
            dm = fmax(dm, fabs(s * xr[j] - m));
            big = fmax(big, fabs(s * xr[j]));
        }
        const double kk = (2.0 * (double)Sk + 16.0 + 2.0 * dm + 2.0 * (big + fabs(m))) * NN_U32;
        for (int64_t j = 0; j < Sk; j++) {
            ref[r * Sk + j] = j < keep ? exp(s * xr[j] - m) / sum : 0.0;
            acc[r * Sk + j] = kk * ref[r * Sk + j];
        }
    }
    free(xv);
}

/* y = the composition, into ref (tmp: an fp32 tensor of x's shape) */
static int composed(tensor_t *ref, tensor_t *tmp, const tensor_t *x, double s, int causal)
{
    int rc = tensor_scale(tmp, x, s);
    if (!rc && causal) rc = tensor_causal_mask(tmp, tmp, -INFINITY);
    if (!rc) rc = tensor_softmax(ref, tmp, -1);
    return rc;
}

static void check_case(fmt_t fx, fmt_t fy, int ndim, const int64_t *shape, double s, int causal,
                       int specials)
{
    tensor_t *x = tensor_new(fx, ndim, shape), *y = tensor_new(fy, ndim, shape);
    tensor_t *ref = tensor_new(fy, ndim, shape), *tmp = tensor_new(FMT_FP32, ndim, shape);
    CHECK(x && y && ref && tmp, "tensors");
    if (fmt_is_shared_exponent(fy)) {
        tensor_trace_enable(y, 1);
        tensor_trace_enable(ref, 1);
    }
    char what[200];
    snprintf(what, sizeof what, "%s <- %s, %d-D [.., %lld, %lld], scale %g, causal %d%s",
             fmt_name(fy), fmt_name(fx), ndim, (long long)shape[ndim - 2],
             (long long)shape[ndim - 1], s, causal, specials ? ", specials" : "");
    static const double scales[] = {1.0, 1.0, 40.0, 40.0, 1e-3, 1.0};
    for (int step = 0; step < (int)(sizeof scales / sizeof scales[0]); step++) {
        nn_fill_normal(x, scales[step], 77u + (uint64_t)step,
                       specials && !fmt_is_shared_exponent(fx));
        CHECK_STATUS(tensor_attention_softmax(y, x, s, causal), FX_OK);
        CHECK_STATUS(composed(ref, tmp, x, s, causal), FX_OK);
        if (!test_same_writes(y, ref, what, step)) break;
        if (!specials || fmt_is_shared_exponent(fx)) {
            const int64_t n = tensor_numel(x);
            double *r64 = nn_doubles(n), *acc = nn_doubles(n);
            reference(x, s, causal, r64, acc);
            nn_check(what, y, r64, acc, n);
            free(r64);
            free(acc);
        }
    }
    tensor_free(x);
    tensor_free(y);
    tensor_free(ref);
    tensor_free(tmp);
}

/* y in x's storage (the temporary route) */
static void check_in_place(void)
{
    const int64_t shape[3] = {3, 6, 6};
    for (int k = 0; k < 5; k++) {
        tensor_t *x = tensor_new(FMTS[k], 3, shape), *r = tensor_new(FMTS[k], 3, shape);
        tensor_t *tmp = tensor_new(FMT_FP32, 3, shape);
        nn_fill_normal(x, 2.0, 5, 0);
        nn_fill_normal(r, 2.0, 5, 0); /* the same first write, so that both histories match */
        CHECK_STATUS(composed(r, tmp, x, 0.5, 1), FX_OK);
        CHECK_STATUS(tensor_attention_softmax(x, x, 0.5, 1), FX_OK);
        test_same_writes(x, r, "in place", 0);
        tensor_free(x);
        tensor_free(r);
        tensor_free(tmp);
    }
}

static void bad_input(void)
{
    const int64_t s2[2] = {4, 4}, s3[2] = {4, 5}, s1[1] = {4};
    tensor_t *x = tensor_new(FMT_FLEX16_5, 2, s2), *y = tensor_new(FMT_FP32, 2, s2);
    tensor_t *y45 = tensor_new(FMT_FP32, 2, s3), *x1 = tensor_new(FMT_FP32, 1, s1);
    tensor_t *y1 = tensor_new(FMT_FP32, 1, s1);
    nn_fill_normal(x, 1.0, 3, 0);
    const float before[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    CHECK_STATUS(tensor_from_f32(y, before), FX_OK);
    CHECK_STATUS(tensor_attention_softmax(NULL, x, 1.0, 1), FX_EINVAL);
    CHECK_STATUS(tensor_attention_softmax(y, NULL, 1.0, 1), FX_EINVAL);
    CHECK_STATUS(tensor_attention_softmax(y, x, NAN, 1), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), "scale") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_attention_softmax(y, x, INFINITY, 0), FX_EINVAL);
    CHECK_STATUS(tensor_attention_softmax(y, x, 1.0, 2), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), "causal") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_attention_softmax(y45, x, 1.0, 1), FX_ESHAPE);
    CHECK_STATUS(tensor_attention_softmax(y1, x1, 1.0, 0), FX_ESHAPE);
    float after[16];
    CHECK_STATUS(tensor_to_f32(y, after), FX_OK);
    CHECK(memcmp(before, after, sizeof before) == 0, "y changed by failing calls");
    /* empty: nothing to do */
    const int64_t e[3] = {0, 4, 4};
    tensor_t *ex = tensor_new(FMT_DFP16, 3, e), *ey = tensor_new(FMT_FLEX16_5, 3, e);
    CHECK_STATUS(tensor_attention_softmax(ey, ex, 1.0, 1), FX_OK);
    tensor_free(ex);
    tensor_free(ey);
    tensor_free(x);
    tensor_free(y);
    tensor_free(y45);
    tensor_free(x1);
    tensor_free(y1);
}

int main(void)
{
    const int64_t sq[4] = {2, 3, 17, 17}, rect[3] = {2, 5, 9}, one[2] = {1, 1};
    const int64_t wide[3] = {2, 3, 40}, big[4] = {2, 4, 128, 128};
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        for (int nt = 1; nt <= 2; nt++) {
            flexpoint_set_num_threads(nt);
            for (int i = 0; i < 5; i++)
                for (int o = 0; o < 5; o++) {
                    check_case(FMTS[i], FMTS[o], 4, sq, 0.25, 1, 0);
                    check_case(FMTS[i], FMTS[o], 3, rect, -0.7, 1, 1);
                    check_case(FMTS[i], FMTS[o], 2, one, 1.0, 1, 0);
                    check_case(FMTS[i], FMTS[o], 3, wide, 0.0, 0, 0);
                }
            for (int i = 3; i < 5; i++) { /* the fused route above the threads' gate */
                check_case(FMTS[i], FMT_FLEX16_5, 4, big, 0.1767766952966369, 1, 0);
                check_case(FMTS[i], FMT_FP32, 4, big, 0.1767766952966369, 0, 0);
            }
        }
    }
    flexpoint_set_num_threads(0);
    check_in_place();
    bad_input();
    return test_finish("test_nn_attention_softmax");
}
