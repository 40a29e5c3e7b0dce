/* Integer convolutions that round straight into a disposable output (fx_storage.disposable,
 * set by the trainer on its activations and activation gradients) give the bits of the same
 * ops into an ordinary output, which gets the rounding through a buffer copied in after the
 * write:
 *   - the forward pass, the stride-1 input gradient (which runs as a forward pass) and the
 *     stride-2 input gradient by phases, in FLEX16_5 and DFP16, on the default backend;
 *   - over a run of calls whose data changes scale, so that the writes take the early rounding
 *     without a stage (steady guesses), with a stage, at a second exponent (a DFP16 output that
 *     moved lately) and again after a guess that missed;
 *   - mantissas and exponents compared after every call, and the in-place route counted
 *     (fx_conv_in_place_made), so that a route never taken cannot pass unnoticed.
 * An output that is also an input of the op (here y as x) is never written in place. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/internal.h"
#include "nn/nn_ops.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static tensor_t *new4(fmt_t f, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const int64_t sh[4] = {a, b, c, d};
    return tensor_new(f, 4, sh);
}

static void check_same(const tensor_t *a, const tensor_t *b, const char *what, fmt_t f, int call)
{
    const int64_t n = tensor_numel(a);
    int16_t *ma = malloc(2 * (size_t)n), *mb = malloc(2 * (size_t)n);
    CHECK_STATUS(tensor_get_raw(a, ma), FX_OK);
    CHECK_STATUS(tensor_get_raw(b, mb), FX_OK);
    CHECK(memcmp(ma, mb, 2 * (size_t)n) == 0 && tensor_exp(a) == tensor_exp(b),
          "%s %s, call %d: the disposable output differs (exponents %d and %d)", fmt_name(f),
          what, call, tensor_exp(a), tensor_exp(b));
    free(ma);
    free(mb);
}

static void check_format(fmt_t f)
{
    enum { N = 6, C = 16, H = 16, O = 16, CALLS = 10 };
    test_rng r;
    test_rng_seed(&r, 11);
    tensor_t *x = new4(f, N, C, H, H), *w = new4(f, O, C, 3, 3);
    tensor_t *dy1 = new4(f, N, O, H, H), *dy2 = new4(f, N, O, H / 2, H / 2);
    tensor_t *y[2] = {new4(f, N, O, H, H), new4(f, N, O, H, H)};
    tensor_t *dx1[2] = {new4(f, N, C, H, H), new4(f, N, C, H, H)};
    tensor_t *dx2[2] = {new4(f, N, C, H, H), new4(f, N, C, H, H)};
    fx_tensor_set_disposable(y[1]);
    fx_tensor_set_disposable(dx1[1]);
    fx_tensor_set_disposable(dx2[1]);
    test_fill_normal(w, 0.2, &r);
    /* scales that hold, move by a factor of two and back, and jump */
    static const double scale[CALLS] = {1, 1, 1, 1, 1.9, 1, 2.1, 0.9, 8, 1};
    const int64_t made0 = fx_conv_in_place_made();
    for (int call = 0; call < CALLS; call++) {
        test_fill_normal(x, scale[call], &r);
        test_fill_normal(dy1, scale[call], &r);
        test_fill_normal(dy2, scale[call], &r);
        for (int k = 0; k < 2; k++) {
            CHECK_STATUS(tensor_conv2d(y[k], x, w, 1, 1, 1, 1, 1, 1), FX_OK);
            CHECK_STATUS(tensor_conv2d_backward_input(dx1[k], dy1, w, 1, 1, 1, 1, 1, 1), FX_OK);
            CHECK_STATUS(tensor_conv2d_backward_input(dx2[k], dy2, w, 2, 2, 1, 1, 1, 1), FX_OK);
        }
        check_same(y[0], y[1], "forward", f, call);
        check_same(dx1[0], dx1[1], "stride-1 input gradient", f, call);
        check_same(dx2[0], dx2[1], "stride-2 input gradient", f, call);
    }
    CHECK(fx_conv_in_place_made() > made0, "%s: no convolution rounded into its disposable "
          "output", fmt_name(f));
    /* y as its own input: never in place (the rounding would overwrite what the op reads) */
    tensor_t *sq[2] = {new4(f, N, C, H, H), new4(f, N, C, H, H)};
    tensor_t *wsq = new4(f, C, C, 3, 3);
    test_fill_normal(wsq, 0.2, &r);
    fx_tensor_set_disposable(sq[1]);
    for (int call = 0; call < 4; call++) {
        test_fill_normal(sq[0], 1.0, &r);
        CHECK_STATUS(tensor_copy(sq[1], sq[0]), FX_OK);
        for (int k = 0; k < 2; k++)
            CHECK_STATUS(tensor_conv2d(sq[k], sq[k], wsq, 1, 1, 1, 1, 1, 1), FX_OK);
        check_same(sq[0], sq[1], "in-place forward (y is x)", f, call);
    }
    tensor_free(x);
    tensor_free(w);
    tensor_free(dy1);
    tensor_free(dy2);
    tensor_free(wsq);
    for (int k = 0; k < 2; k++) {
        tensor_free(y[k]);
        tensor_free(dx1[k]);
        tensor_free(dx2[k]);
        tensor_free(sq[k]);
    }
}

int main(void)
{
    check_format(FMT_FLEX16_5);
    check_format(FMT_DFP16);
    return test_finish("test_conv_in_place");
}
