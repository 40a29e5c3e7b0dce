/* A strided 1x1 convolution without padding runs its forward pass under integer or bf16 compute,
 * and its weight gradient under bf16 compute, as those of the stride-1 convolution of the
 * pixels it reads (conv2d.c, conv_subsample_fits). Checked here, on every backend at one and
 * two threads:
 *   - its outputs are the writes of the strided route (the switch fx_conv_subsample_set_enabled
 *     off): mantissas or fp32 and bf16 values, exponents, write statistics and trace records,
 *     for FLEX16_5 and DFP16 inputs into FLEX16_5, DFP16 and FP32 outputs, with integer and fp32
 *     weights, and for bf16 inputs and weights into BF16 and FP32 outputs; the weight gradients
 *     likewise, from the same x and a dy of y's shape;
 *   - over calls whose data changes scale, so that the shared-exponent writes keep, miss and
 *     move their guessed exponents (each route's y has its own history, fed the same calls);
 *   - uneven strides and sizes (the last pixel of a row or column read, or not), a dilation
 *     (which a 1x1 kernel ignores), a channel-sliced view as x, one sample, and ResNet-20's
 *     projection at full size (its copy split between threads);
 *   - the route counted (fx_conv_subsampled): each call with it on where it applies, none with
 *     it off, none for an integer weight gradient, a padded or 3x3 kernel, a stride of 1, fp32
 *     compute, or a y sharing x's storage.
 * The values themselves against an fp64 reference: test_nn_conv ("1x1 stride ..."); the fused
 * bias and ReLU on this route: test_conv_shared_relu. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "nn/nn_ops.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int64_t N, C, H, W, O;
    int sh, sw, dh, dw, view;
} sub_case;

static const sub_case CASES[] = {
    {"stride 2, odd sizes", 3, 5, 9, 7, 6, 2, 2, 1, 1, 0},
    {"stride (3,2), dilation (2,3)", 2, 8, 10, 11, 16, 3, 2, 2, 3, 0},
    {"stride (1,2), channel view", 2, 6, 6, 9, 5, 1, 2, 1, 1, 1},
    {"one sample, stride 2", 1, 16, 8, 8, 16, 2, 2, 1, 1, 0},
    /* 16 x 16 x 16 x 16 copied values: the copy's threshold for threads */
    {"ResNet-20 projection 16 -> 32", 16, 16, 32, 32, 32, 2, 2, 1, 1, 0},
};

static tensor_t *new4(fmt_t f, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const int64_t sh[4] = {a, b, c, d};
    tensor_t *t = tensor_new(f, 4, sh);
    CHECK(t != NULL, "tensor_new failed");
    return t;
}

/* Whether the route runs for x and the other operand in format of: integer compute (forward
 * passes only), or bf16 compute (x and the operand bf16 on a level with bf16 products,
 * conv2d.c's conv_compute_for, other than the AMX route) */
static int route_runs(fmt_t xf, fmt_t of, int wgrad)
{
    if (fmt_is_shared_exponent(xf)) return !wgrad;
    return xf == FMT_BF16 && of == FMT_BF16 &&
           fx_backend_active()->kernels[FX_OP_MATMUL][FMT_BF16] != NULL &&
           fx_conv_subsample_takes_bf16();
}

static void check_case(const sub_case *c, fmt_t xf, fmt_t wf, fmt_t yf, test_rng *r)
{
    enum { CALLS = 6 };
    static const double scale[CALLS] = {1, 1, 1.9, 0.9, 8, 1};
    char what[256];
    snprintf(what, sizeof what, "%s: x %s, w %s, y %s", c->name, fmt_name(xf), fmt_name(wf),
             fmt_name(yf));
    const int64_t OH = (c->H - 1) / c->sh + 1, OW = (c->W - 1) / c->sw + 1;
    /* with view, x is channels 1 .. C of a tensor of C + 2 (a strided view) */
    tensor_t *xbase = new4(xf, c->N, c->C + (c->view ? 2 : 0), c->H, c->W);
    tensor_t *x = c->view ? tensor_view_slice(xbase, 1, 1, c->C + 1, 1) : xbase;
    CHECK(x != NULL, "%s: tensor_view_slice failed", what);
    tensor_t *w = new4(wf, c->O, c->C, 1, 1);
    tensor_t *y[2] = {new4(yf, c->N, c->O, OH, OW), new4(yf, c->N, c->O, OH, OW)};
    /* the weight gradient: dy in x's format (dy's and x's formats decide its compute), dw in
     * y's */
    tensor_t *dy = new4(xf, c->N, c->O, OH, OW);
    tensor_t *dw[2] = {new4(yf, c->O, c->C, 1, 1), new4(yf, c->O, c->C, 1, 1)};
    if (fmt_is_shared_exponent(yf))
        for (int k = 0; k < 2; k++) {
            tensor_trace_enable(y[k], 1);
            tensor_trace_enable(dw[k], 1);
        }
    test_fill_normal(w, 0.3, r);
    const int runs_fwd = route_runs(xf, wf, 0), runs_wgrad = route_runs(xf, xf, 1);
    for (int call = 0; call < CALLS; call++) {
        test_fill_normal(xbase, scale[call], r);
        test_fill_normal(dy, 0.1 * scale[CALLS - 1 - call], r);
        for (int k = 0; k < 2; k++) { /* k = 0: the strided route; 1: the pixels copied */
            fx_conv_subsample_set_enabled(k);
            const int64_t before = fx_conv_subsampled();
            CHECK_STATUS(tensor_conv2d(y[k], x, w, c->sh, c->sw, 0, 0, c->dh, c->dw), FX_OK);
            CHECK(fx_conv_subsampled() - before == (k && runs_fwd),
                  "%s, call %d: the forward route ran %lld times with the switch %s", what, call,
                  (long long)(fx_conv_subsampled() - before), k ? "on" : "off");
            const int64_t mid = fx_conv_subsampled();
            CHECK_STATUS(tensor_conv2d_backward_weight(dw[k], x, dy, c->sh, c->sw, 0, 0, c->dh,
                                                       c->dw),
                         FX_OK);
            CHECK(fx_conv_subsampled() - mid == (k && runs_wgrad),
                  "%s, call %d: the weight gradient's route ran %lld times with the switch %s",
                  what, call, (long long)(fx_conv_subsampled() - mid), k ? "on" : "off");
        }
        if (!test_same_writes(y[0], y[1], what, call)) break;
        if (!test_same_writes(dw[0], dw[1], what, call)) break;
    }
    fx_conv_subsample_set_enabled(1);
    if (c->view) tensor_free(x);
    tensor_t *all[] = {xbase, w, y[0], y[1], dy, dw[0], dw[1]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tensor_free(all[i]);
}

/* kernels the route does not take: padded, 3x3, stride 1, and fp32 compute */
static void check_not_taken(test_rng *r)
{
    tensor_t *xi = new4(FMT_DFP16, 2, 4, 8, 8), *xf = new4(FMT_FP32, 2, 4, 8, 8);
    tensor_t *w1 = new4(FMT_DFP16, 4, 4, 1, 1), *w3 = new4(FMT_DFP16, 4, 4, 3, 3);
    tensor_t *w1f = new4(FMT_FP32, 4, 4, 1, 1);
    tensor_t *y5 = new4(FMT_DFP16, 2, 4, 5, 5), *y4 = new4(FMT_DFP16, 2, 4, 4, 4);
    tensor_t *y8 = new4(FMT_DFP16, 2, 4, 8, 8), *y4f = new4(FMT_FP32, 2, 4, 4, 4);
    test_fill_normal(xi, 1, r);
    test_fill_normal(xf, 1, r);
    test_fill_normal(w1, 0.3, r);
    test_fill_normal(w3, 0.3, r);
    test_fill_normal(w1f, 0.3, r);
    const int64_t before = fx_conv_subsampled();
    CHECK_STATUS(tensor_conv2d(y5, xi, w1, 2, 2, 1, 1, 1, 1), FX_OK);  /* padded */
    CHECK_STATUS(tensor_conv2d(y4, xi, w3, 2, 2, 1, 1, 1, 1), FX_OK);  /* 3x3 */
    CHECK_STATUS(tensor_conv2d(y8, xi, w1, 1, 1, 0, 0, 1, 1), FX_OK);  /* stride 1 */
    CHECK_STATUS(tensor_conv2d(y4f, xf, w1f, 2, 2, 0, 0, 1, 1), FX_OK); /* fp32 compute */
    tensor_t *dw1f = new4(FMT_FP32, 4, 4, 1, 1);
    CHECK_STATUS(tensor_conv2d_backward_weight(dw1f, xf, y4f, 2, 2, 0, 0, 1, 1), FX_OK);
    tensor_free(dw1f);
    /* y a view of x's storage (its first 4 x 4 pixels): the strided route, which keeps x whole
     * should the op fail */
    tensor_t *head = tensor_view_slice(xi, 2, 0, 4, 1);
    tensor_t *ys = head ? tensor_view_slice(head, 3, 0, 4, 1) : NULL;
    CHECK(ys != NULL, "tensor_view_slice failed");
    if (ys) CHECK_STATUS(tensor_conv2d(ys, xi, w1, 2, 2, 0, 0, 1, 1), FX_OK);
    CHECK(fx_conv_subsampled() == before, "the route ran %lld times for kernels it must not take",
          (long long)(fx_conv_subsampled() - before));
    /* and taken by the same 1x1 stride-2 kernel without padding on integer x */
    CHECK_STATUS(tensor_conv2d(y4, xi, w1, 2, 2, 0, 0, 1, 1), FX_OK);
    CHECK(fx_conv_subsampled() == before + 1, "the route did not run for a 1x1 stride-2 kernel");
    tensor_free(ys);
    tensor_free(head);
    tensor_t *all[] = {xi, xf, w1, w3, w1f, y5, y4, y8, y4f};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tensor_free(all[i]);
}

int main(void)
{
    test_rng r;
    test_rng_seed(&r, 5);
    static const fmt_t ints[2] = {FMT_FLEX16_5, FMT_DFP16};
    static const fmt_t outs[3] = {FMT_FLEX16_5, FMT_DFP16, FMT_FP32};
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        for (int nt = 1; nt <= 2; nt++) {
            flexpoint_set_num_threads(nt);
            for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++)
                for (int i = 0; i < 2; i++)
                    for (int o = 0; o < 3; o++) {
                        check_case(&CASES[c], ints[i], ints[i], outs[o], &r);
                        check_case(&CASES[c], ints[i], FMT_FP32, outs[o], &r);
                    }
            for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
                check_case(&CASES[c], FMT_BF16, FMT_BF16, FMT_BF16, &r);
                check_case(&CASES[c], FMT_BF16, FMT_BF16, FMT_FP32, &r);
            }
            check_not_taken(&r);
        }
    }
    return test_finish("test_conv_subsample");
}
