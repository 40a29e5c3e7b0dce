/* The trainer's convolution + bias + ReLU in FLEX16_5 / DFP16 (fx_conv2d_shared_bias_relu,
 * src/nn/conv2d.c): t = conv(x, w), and where t's write keeps the exponent guessed before the
 * op, u = t + bias and y = relu(u) made from each chunk of t's rounding while it is in cache.
 *
 * Against tensor_conv2d, tensor_add and tensor_relu into twin tensors with the same history,
 * on every backend, on 1 and 2 threads, over the CNN's folded first layer, a direct-kernel
 * layer, a 3 x 3 one, a stride-2 one (the GEMM route) and a 1 x 1 projection at stride 2 (on
 * the pixels it reads, its reference on the strided route): after every step, u and y have the
 * same mantissas, exponents, statistics and last trace record, and t the same exponent,
 * statistics and trace record (its values are not stored where u and y were made: the
 * trainer never reads them). The steps' scales make each guess wrong now and then: x jumping by
 * 200 (t's FLEX16_5 write overflows and recomputes, a DFP16 exponent moves: the op runs again
 * and u and y are written by the ops), a dominant bias (u's write picks another exponent and
 * rounds again from t's values), a mostly negative t (y's exponent falls below u's). The route
 * must be taken (u and y made from the chunks) on the levels that round into y's order, and
 * its fallbacks must run, among them a DFP16 t whose write picks the second rounding made
 * after a move (the exponent it left: x back from the jump), from which t is copied and u
 * and y are left to the ops. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "core/shared_binary.h"
#include "nn/nn_ops.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static void fill(tensor_t *t, double scale, int relu, test_rng *r)
{
    const int64_t n = tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        const double z = scale * test_rng_normal(r);
        v[i] = (float)(relu && z < 0 ? 0 : z);
    }
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    free(v);
}

/* t's write: its state (exponent, statistics, trace) without its values, which the fused route
 * does not store */
static int same_state(tensor_t *t1, tensor_t *t2, int step)
{
    memcpy(tensor_data(t1), tensor_data(t2), (size_t)tensor_numel(t1) * sizeof(int16_t));
    return test_same_writes(t1, t2, "conv+bias+relu: t", step);
}

typedef struct layer {
    int64_t C, HW, O, K, stride, pad;
} layer;

/* One layer's sequence of steps; *made counts the steps whose u and y came from the chunks,
 * *redone those where the ops wrote them after the route had started them. */
static void check_layer(const layer *L, fmt_t ft, fmt_t fu, fmt_t fy, int *made, int *redone,
                        test_rng *r)
{
    const int64_t N = 4, OHW = (L->HW + 2 * L->pad - L->K) / L->stride + 1;
    const int64_t xs[4] = {N, L->C, L->HW, L->HW}, ws[4] = {L->O, L->C, L->K, L->K};
    const int64_t ys[4] = {N, L->O, OHW, OHW}, bs[3] = {L->O, 1, 1};
    tensor_t *x = tensor_new(ft, 4, xs), *w = tensor_new(ft, 4, ws), *b = tensor_new(ft, 3, bs);
    tensor_t *t1 = tensor_new(ft, 4, ys), *u1 = tensor_new(fu, 4, ys), *y1 = tensor_new(fy, 4, ys);
    tensor_t *t2 = tensor_new(ft, 4, ys), *u2 = tensor_new(fu, 4, ys), *y2 = tensor_new(fy, 4, ys);
    tensor_t *all[6] = {t1, u1, y1, t2, u2, y2};
    for (int i = 0; i < 6; i++) tensor_trace_enable(all[i], 1);
    /* x's scale, the bias's, and whether t is made mostly negative (w's sign flipped) */
    const double sx[] = {1, 1, 1, 1, 200, 200, 1, 1, 1, 1, 1e-3, 1, 1, 1};
    const double sb[] = {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 30, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1};
    const int neg[] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0};
    const int steps = (int)(sizeof sx / sizeof sx[0]);
    const int proj = L->K == 1 && L->stride > 1 && L->pad == 0;
    for (int step = 0; step < steps; step++) {
        fill(x, sx[step], 1, r);
        fill(w, neg[step] ? -0.05 : 0.05, 0, r);
        if (neg[step]) { /* weights all negative: every sum of the non-negative x is <= 0 */
            float *v = malloc((size_t)tensor_numel(w) * sizeof *v);
            CHECK_STATUS(tensor_to_f32(w, v), FX_OK);
            for (int64_t i = 0; i < tensor_numel(w); i++) v[i] = v[i] > 0 ? -v[i] : v[i];
            CHECK_STATUS(tensor_from_f32(w, v), FX_OK);
            free(v);
        }
        fill(b, sb[step], 0, r);
        const int64_t fused0 = fx_shared_binary_fused(), sub0 = fx_conv_subsampled();
        int done = -1;
        int rc = fx_conv2d_shared_bias_relu(t1, u1, y1, x, w, b, (int)L->stride, (int)L->stride,
                                            (int)L->pad, (int)L->pad, &done);
        CHECK(rc == FX_OK && (done == 0 || done == 1),
              "layer C=%lld K=%lld step %d: status %d, done %d", (long long)L->C,
              (long long)L->K, step, rc, done);
        if (rc != FX_OK) break;
        CHECK(!proj || fx_conv_subsampled() > sub0,
              "step %d: the projection did not run on the pixels it reads", step);
        if (done) {
            (*made)++;
            CHECK(fx_shared_binary_fused() > fused0, "step %d: u and y made, no early rounding",
                  step);
        } else { /* the trainer's route: the two writes from t */
            rc = fx_shared_add_relu(u1, y1, t1, b);
            if (rc == FX_SHARED_BINARY_NOT_TAKEN) {
                rc = tensor_add(u1, t1, b);
                if (!rc) rc = tensor_relu(y1, u1);
            }
            CHECK_STATUS(rc, FX_OK);
        }
        /* a projection's reference on the strided route (conv2d.c, conv_subsample_fits) */
        fx_conv_subsample_set_enabled(!proj);
        CHECK_STATUS(tensor_conv2d(t2, x, w, (int)L->stride, (int)L->stride, (int)L->pad,
                                   (int)L->pad, 1, 1),
                     FX_OK);
        fx_conv_subsample_set_enabled(1);
        CHECK_STATUS(tensor_add(u2, t2, b), FX_OK);
        CHECK_STATUS(tensor_relu(y2, u2), FX_OK);
        /* a step after x's jump whose t write was made again by the ops */
        *redone += !done && step > 0 && (sx[step] != sx[step - 1]);
        const int ok = (done ? same_state(t1, t2, step)
                             : test_same_writes(t1, t2, "conv+bias+relu: t", step)) &&
                       test_same_writes(u1, u2, "conv+bias+relu: u", step) &&
                       test_same_writes(y1, y2, "conv+bias+relu: y", step);
        if (!ok) {
            fprintf(stderr, "  (layer C=%lld HW=%lld O=%lld K=%lld stride %lld, formats %s/%s/%s, step %d)\n",
                      (long long)L->C, (long long)L->HW, (long long)L->O, (long long)L->K,
                      (long long)L->stride, fmt_name(ft), fmt_name(fu), fmt_name(fy), step);
            break;
        }
    }
    tensor_free(x);
    tensor_free(w);
    tensor_free(b);
    for (int i = 0; i < 6; i++) tensor_free(all[i]);
}

/* Arguments the route does not take still give tensor_conv2d's result and leave u and y to the
 * caller; bad arguments get tensor_conv2d's status. */
static void check_declined(void)
{
    const int64_t xs[4] = {2, 8, 6, 6}, ws[4] = {16, 8, 3, 3}, ys[4] = {2, 16, 6, 6};
    const int64_t bs[3] = {16, 1, 1}, bad[4] = {2, 16, 5, 5};
    tensor_t *x = tensor_new(FMT_DFP16, 4, xs), *w = tensor_new(FMT_DFP16, 4, ws);
    tensor_t *b = tensor_new(FMT_DFP16, 3, bs), *t = tensor_new(FMT_DFP16, 4, ys);
    tensor_t *u = tensor_new(FMT_DFP16, 4, ys), *yf = tensor_new(FMT_FP32, 4, ys);
    tensor_t *tb = tensor_new(FMT_DFP16, 4, bad);
    test_rng r;
    test_rng_seed(&r, 7);
    fill(x, 1, 1, &r);
    fill(w, 0.1, 0, &r);
    fill(b, 0.1, 0, &r);
    int done = -1;
    /* an fp32 y: fx_shared_add_relu's plans decline it */
    CHECK_STATUS(fx_conv2d_shared_bias_relu(t, u, yf, x, w, b, 1, 1, 1, 1, &done), FX_OK);
    CHECK(done == 0, "an fp32 y was made (done %d)", done);
    /* no bias */
    CHECK_STATUS(fx_conv2d_shared_bias_relu(t, u, u, x, w, NULL, 1, 1, 1, 1, &done), FX_OK);
    CHECK(done == 0, "no bias, but done %d", done);
    /* t of the wrong shape: tensor_conv2d's error, nothing done */
    CHECK_STATUS(fx_conv2d_shared_bias_relu(tb, u, u, x, w, b, 1, 1, 1, 1, &done), FX_ESHAPE);
    CHECK(done == 0, "a failed convolution reported done %d", done);
    tensor_free(x);
    tensor_free(w);
    tensor_free(b);
    tensor_free(t);
    tensor_free(u);
    tensor_free(yf);
    tensor_free(tb);
}

int main(void)
{
    test_rng r;
    test_rng_seed(&r, 2027);
    /* the CNN's first layer (folded onto the direct kernel), a direct-kernel layer, a 3 x 3 one,
     * a stride-2 one (the GEMM route) and a 1 x 1 projection at stride 2 (run on the pixels it
     * reads: conv2d_forward_subsampled) */
    const layer layers[] = {{1, 28, 32, 5, 1, 2}, {8, 14, 16, 5, 1, 2}, {16, 10, 32, 3, 1, 1},
                            {8, 11, 16, 3, 2, 1}, {16, 12, 32, 1, 2, 0}};
    const fmt_t combos[][3] = {{FMT_FLEX16_5, FMT_FLEX16_5, FMT_FLEX16_5},
                               {FMT_DFP16, FMT_DFP16, FMT_DFP16},
                               {FMT_FLEX16_5, FMT_DFP16, FMT_FLEX16_5}};
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        const fx_backend *be = fx_backend_active();
        int made = 0, redone = 0;
        const int64_t alt0 = fx_conv_alt_rounding_reused();
        for (int nt = 1; nt <= 2; nt++) {
            flexpoint_set_num_threads(nt);
            for (size_t li = 0; li < sizeof layers / sizeof layers[0]; li++)
                for (size_t k = 0; k < sizeof combos / sizeof combos[0]; k++)
                    check_layer(&layers[li], combos[k][0], combos[k][1], combos[k][2], &made,
                                &redone, &r);
        }
        /* the levels that round a convolution's sums into y's order make u and y from the
         * chunks; the others leave them to the ops */
        if (be->cvt.quant_i64_t) {
            CHECK(made > 0, "backend %s: u and y never made from the chunks",
                  flexpoint_backend_name(bi));
            CHECK(redone > 0, "backend %s: no step fell back to the ops",
                  flexpoint_backend_name(bi));
        } else {
            CHECK(made == 0, "backend %s: %d steps made u and y without quant_i64_t",
                  flexpoint_backend_name(bi), made);
        }
        const int64_t alt = fx_conv_alt_rounding_reused() - alt0;
        CHECK(alt > 0, "backend %s: no DFP16 write took the second rounding",
              flexpoint_backend_name(bi));
        printf("backend %s: u and y made from the chunks in %d steps, by the ops after a "
                  "miss in %d; t from the second rounding in %lld\n", flexpoint_backend_name(bi),
               made, redone, (long long)alt);
    }
    flexpoint_set_num_threads(0);
    check_declined();
    return test_finish("test_conv_shared_relu");
}
