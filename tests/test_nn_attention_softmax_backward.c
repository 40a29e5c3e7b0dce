/* tensor_attention_softmax_backward: by definition tensor_softmax_backward along the last axis
 * into fp32, then tensor_scale into dx. Against that composition, write by write (stored
 * bits, exponent, statistics, trace record): every format of y and dx (dy in y's format, and
 * every dy format beside a bf16 y), on every backend at 1 and 2 threads, square and
 * non-square probability matrices (causal and not), rows shorter and longer than a vector,
 * sizes above the parallel threshold, positive, negative and zero scales, with jumps of the
 * gradient's scale between writes (the shared-exponent writes' guesses miss); dy with +-Inf
 * and NaN (float formats); dx sharing dy's or y's storage. Without specials every write is
 * also checked against an fp64 reference on the values as stored, dx = s y (dy - sum dy y),
 * within the softmax gradient's bound (test_nn_softmax_axis.c: (2L + 16) u32 |y| (|dy| +
 * sum |dy y|), L the row length) times |s|, widened by 2 u32 for the fp32 product by (float)
 * s, then the output's one rounding (nn_bound). FLEX16_5/DFP16 outputs are also compared
 * bit for bit across backends and thread counts directly. Bad input gets its status and leaves
 * dx as it was. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "nn_misc_util.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const fmt_t FMTS[5] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5, FMT_DFP16};

/* probabilities of the forward: attention softmax of random scores into y */
static void probabilities(tensor_t *y, int causal, uint64_t seed)
{
    tensor_t *x = tensor_new(FMT_FP32, tensor_ndim(y), tensor_shape(y));
    CHECK(x != NULL, "scores");
    nn_fill_normal(x, 2.0, seed, 0);
    CHECK_STATUS(tensor_attention_softmax(y, x, 0.5, causal), FX_OK);
    tensor_free(x);
}

/* the fp64 reference on the stored dy and y, and each element's bound before dx's rounding */
static void reference(const tensor_t *dy, const tensor_t *y, double s, double *ref, double *acc)
{
    const int64_t len = tensor_shape(y)[tensor_ndim(y) - 1], n = tensor_numel(y);
    double *g = nn_doubles(n), *p = nn_doubles(n);
    nn_read(dy, g);
    nn_read(y, p);
    const double kk = ((2.0 * (double)len + 16.0) + 2.0) * NN_U32;
    for (int64_t b = 0; b < n; b += len) {
        double sum = 0, sa = 0;
        for (int64_t k = 0; k < len; k++) {
            sum += g[b + k] * p[b + k];
            sa += fabs(g[b + k] * p[b + k]);
        }
        for (int64_t k = 0; k < len; k++) {
            ref[b + k] = s * p[b + k] * (g[b + k] - sum);
            acc[b + k] = fabs(s) * kk * fabs(p[b + k]) * (fabs(g[b + k]) + sa);
        }
    }
    free(g);
    free(p);
}

/* dx = the composition, into ref (tmp: an fp32 tensor of y's shape) */
static int composed(tensor_t *ref, tensor_t *tmp, const tensor_t *dy, const tensor_t *y,
                    double s)
{
    int rc = tensor_softmax_backward(tmp, dy, y, -1);
    if (!rc) rc = tensor_scale(ref, tmp, s);
    return rc;
}

static void check_case(fmt_t fg, fmt_t fy, fmt_t fo, int ndim, const int64_t *shape, double s,
                       int causal, int specials)
{
    tensor_t *dy = tensor_new(fg, ndim, shape), *y = tensor_new(fy, ndim, shape);
    tensor_t *dx = tensor_new(fo, ndim, shape), *ref = tensor_new(fo, ndim, shape);
    tensor_t *tmp = tensor_new(FMT_FP32, ndim, shape);
    CHECK(dy && y && dx && ref && tmp, "tensors");
    if (fmt_is_shared_exponent(fo)) {
        tensor_trace_enable(dx, 1);
        tensor_trace_enable(ref, 1);
    }
    char what[200];
    snprintf(what, sizeof what, "%s <- dy %s, y %s, %d-D [.., %lld, %lld], scale %g, causal %d%s",
             fmt_name(fo), fmt_name(fg), fmt_name(fy), ndim, (long long)shape[ndim - 2],
             (long long)shape[ndim - 1], s, causal, specials ? ", specials" : "");
    probabilities(y, causal, 11u + (uint64_t)fy);
    static const double scales[] = {1.0, 1.0, 3.0, 1.5, 40.0, 1e-3, 1.0};
    for (int step = 0; step < (int)(sizeof scales / sizeof scales[0]); step++) {
        nn_fill_normal(dy, scales[step], 91u + (uint64_t)step,
                       specials && !fmt_is_shared_exponent(fg));
        CHECK_STATUS(tensor_attention_softmax_backward(dx, dy, y, s), FX_OK);
        CHECK_STATUS(composed(ref, tmp, dy, y, s), FX_OK);
        if (!test_same_writes(dx, ref, what, step)) break;
        if (!specials || fmt_is_shared_exponent(fg)) {
            const int64_t n = tensor_numel(y);
            double *r64 = nn_doubles(n), *acc = nn_doubles(n);
            reference(dy, y, s, r64, acc);
            nn_check(what, dx, r64, acc, n);
            free(r64);
            free(acc);
        }
    }
    tensor_free(dy);
    tensor_free(y);
    tensor_free(dx);
    tensor_free(ref);
    tensor_free(tmp);
}

/* dx in dy's or y's storage */
static void check_in_place(void)
{
    const int64_t shape[3] = {3, 6, 6};
    for (int k = 0; k < 5; k++)
        for (int on_y = 0; on_y <= 1; on_y++) {
            tensor_t *dy = tensor_new(FMTS[k], 3, shape), *y = tensor_new(FMTS[k], 3, shape);
            tensor_t *r = tensor_new(FMTS[k], 3, shape), *tmp = tensor_new(FMT_FP32, 3, shape);
            probabilities(y, 1, 3);
            nn_fill_normal(dy, 2.0, 5, 0);
            /* r: the same first write as the tensor overwritten, so that both histories match */
            CHECK_STATUS(tensor_copy(r, on_y ? y : dy), FX_OK);
            CHECK_STATUS(composed(r, tmp, dy, y, -0.5), FX_OK);
            tensor_t *dx = on_y ? y : dy;
            CHECK_STATUS(tensor_attention_softmax_backward(dx, dy, y, -0.5), FX_OK);
            test_same_writes(dx, r, on_y ? "dx in y's storage" : "dx in dy's storage", 0);
            tensor_free(dy);
            tensor_free(y);
            tensor_free(r);
            tensor_free(tmp);
        }
}

/* dy and y as views (strided): the temporary route, the same bits */
static void check_views(void)
{
    const int64_t wide[3] = {2, 5, 12}, part[3] = {2, 5, 5};
    for (int k = 0; k < 5; k++) {
        tensor_t *gw = tensor_new(FMTS[k], 3, wide), *yv = tensor_new(FMTS[k], 3, part);
        tensor_t *dx = tensor_new(FMTS[k], 3, part), *ref = tensor_new(FMTS[k], 3, part);
        tensor_t *tmp = tensor_new(FMT_FP32, 3, part);
        nn_fill_normal(gw, 1.0, 8, 0);
        probabilities(yv, 1, 9);
        tensor_t *g = tensor_view_slice(gw, -1, 4, 9, 1);
        CHECK(g != NULL, "slice: %s", flexpoint_last_error());
        if (g) {
            CHECK_STATUS(tensor_attention_softmax_backward(dx, g, yv, 0.3), FX_OK);
            CHECK_STATUS(composed(ref, tmp, g, yv, 0.3), FX_OK);
            test_same_writes(dx, ref, "dy a strided view", 0);
        }
        tensor_free(g);
        tensor_free(gw);
        tensor_free(yv);
        tensor_free(dx);
        tensor_free(ref);
        tensor_free(tmp);
    }
}

static void bad_input(void)
{
    const int64_t s2[2] = {4, 4}, s3[2] = {4, 5}, s1[1] = {4};
    tensor_t *g = tensor_new(FMT_FLEX16_5, 2, s2), *y = tensor_new(FMT_BF16, 2, s2);
    tensor_t *dx = tensor_new(FMT_DFP16, 2, s2), *dx45 = tensor_new(FMT_FP32, 2, s3);
    tensor_t *g1 = tensor_new(FMT_FP32, 1, s1), *y1 = tensor_new(FMT_FP32, 1, s1);
    tensor_t *dx1 = tensor_new(FMT_FP32, 1, s1);
    nn_fill_normal(g, 1.0, 3, 0);
    probabilities(y, 1, 4);
    const float before[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    CHECK_STATUS(tensor_from_f32(dx, before), FX_OK);
    CHECK_STATUS(tensor_attention_softmax_backward(NULL, g, y, 1.0), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), "dx") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_attention_softmax_backward(dx, NULL, y, 1.0), FX_EINVAL);
    CHECK_STATUS(tensor_attention_softmax_backward(dx, g, NULL, 1.0), FX_EINVAL);
    CHECK_STATUS(tensor_attention_softmax_backward(dx, g, y, NAN), FX_EINVAL);
    CHECK(strstr(flexpoint_last_error(), "scale") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_attention_softmax_backward(dx, g, y, -INFINITY), FX_EINVAL);
    CHECK_STATUS(tensor_attention_softmax_backward(dx45, g, y, 1.0), FX_ESHAPE);
    CHECK(strstr(flexpoint_last_error(), "dx") != NULL, "message: %s", flexpoint_last_error());
    CHECK_STATUS(tensor_attention_softmax_backward(dx, dx45, y, 1.0), FX_ESHAPE);
    CHECK_STATUS(tensor_attention_softmax_backward(dx1, g1, y1, 1.0), FX_ESHAPE);
    CHECK(strstr(flexpoint_last_error(), "[..., Sq, Sk]") != NULL, "message: %s",
          flexpoint_last_error());
    float after[16];
    CHECK_STATUS(tensor_to_f32(dx, after), FX_OK);
    CHECK(memcmp(before, after, sizeof before) == 0, "dx changed by failing calls");
    /* empty: nothing to do */
    const int64_t e[3] = {0, 4, 4};
    tensor_t *eg = tensor_new(FMT_DFP16, 3, e), *ey = tensor_new(FMT_FLEX16_5, 3, e);
    CHECK_STATUS(tensor_attention_softmax_backward(ey, eg, ey, 1.0), FX_OK);
    tensor_free(eg);
    tensor_free(ey);
    tensor_free(g);
    tensor_free(y);
    tensor_free(dx);
    tensor_free(dx45);
    tensor_free(g1);
    tensor_free(y1);
    tensor_free(dx1);
}

/* FLEX16_5/DFP16 outputs bit for bit across backends and 1 and 2 threads (each backend's own
 * ops were compared above; this compares the backends' results with one another), from
 * FLEX16_5, DFP16 and bf16 gradients, with the rows above the threads' gate. */
static void integer_outputs_across_backends(void)
{
    const int64_t big[4] = {2, 4, 128, 128};
    const fmt_t grads[3] = {FMT_FLEX16_5, FMT_DFP16, FMT_BF16};
    for (int gi = 0; gi < 3; gi++)
        for (int o = 3; o < 5; o++) {
            tensor_t *first = NULL;
            for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
                if (!flexpoint_backend_available(bi)) continue;
                CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
                for (int nt = 1; nt <= 2; nt++) {
                    flexpoint_set_num_threads(nt);
                    tensor_t *dy = tensor_new(grads[gi], 4, big), *y = tensor_new(FMT_BF16, 4, big);
                    tensor_t *dx = tensor_new(FMTS[o], 4, big);
                    probabilities(y, 1, 21);
                    nn_fill_normal(dy, 0.01, 22, 0);
                    CHECK_STATUS(tensor_attention_softmax_backward(dx, dy, y, 0.1767766952966369),
                                 FX_OK);
                    if (!first) first = dx;
                    else {
                        CHECK(nn_same_bits(first, dx) && tensor_exp(first) == tensor_exp(dx),
                              "%s <- dy %s: backend %s at %d threads differs from the first",
                              fmt_name(FMTS[o]), fmt_name(grads[gi]), flexpoint_backend_name(bi),
                              nt);
                        tensor_free(dx);
                    }
                    tensor_free(dy);
                    tensor_free(y);
                }
            }
            tensor_free(first);
        }
    flexpoint_set_num_threads(0);
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
                    check_case(FMTS[i], FMTS[i], FMTS[o], 4, sq, 0.25, 1, 0);
                    check_case(FMTS[i], FMTS[i], FMTS[o], 3, rect, -0.7, 1, 1);
                    check_case(FMTS[i], FMTS[i], FMTS[o], 2, one, 1.0, 1, 0);
                    check_case(FMTS[i], FMTS[i], FMTS[o], 3, wide, 0.0, 0, 0);
                    /* the trainer's mix: probabilities in one format, gradients in another */
                    check_case(FMTS[i], FMT_BF16, FMTS[o], 4, sq, 0.1767766952966369, 1, 0);
                }
            for (int i = 3; i < 5; i++) { /* the rows above the threads' gate */
                check_case(FMTS[i], FMTS[i], FMTS[i], 4, big, 0.1767766952966369, 1, 0);
                check_case(FMTS[i], FMT_BF16, FMT_FP32, 4, big, 0.1767766952966369, 0, 0);
            }
            check_case(FMT_BF16, FMT_BF16, FMT_BF16, 4, big, 0.1767766952966369, 1, 0);
        }
    }
    flexpoint_set_num_threads(0);
    integer_outputs_across_backends();
    check_in_place();
    check_views();
    bad_input();
    return test_finish("test_nn_attention_softmax_backward");
}
