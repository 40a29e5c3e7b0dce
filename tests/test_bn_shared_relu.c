/* A FLEX16_5/DFP16 batch norm that writes the ReLU after it (fx_batchnorm_shared_relu, the
 * trainer's BN + ReLU pair) gives the bits of tensor_batchnorm and then tensor_relu:
 *   - y and relu(y) compared after every call of a run whose data changes scale (so that the
 *     ReLU's exponent guess holds, misses up and misses down, Autoflex recomputes an overflow,
 *     and a DFP16 exponent moves), with a negative gamma, outputs all negative in one channel
 *     and all negative everywhere in one call (relu(y) = 0);
 *   - mantissas, exponents and every trace record of both outputs (the writes' exponents,
 *     overflows, recomputes, saturation and underflow counts, true and stored maxima), and the
 *     running and saved statistics;
 *   - mantissa inputs (the direct route, which makes the ReLU from the pieces of y; counted by
 *     fx_bn_direct_relu_runs so that a route never taken cannot pass unnoticed) and fp32
 *     inputs (the stage route, then tensor_relu), training and inference, at 1 and 2 threads;
 *   - declined, with nothing written, for float outputs, a relu_y that is y or x, and with the
 *     switch off; bad arguments get tensor_batchnorm's status. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "nn/bn_direct.h"
#include "nn/nn_ops.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { C = 3, CALLS = 9, MAXN = 2 * C * 33 * 33 };

/* the shape of the run: planes shorter than the route's piece of 1024 values (several planes
 * rounded at once) and longer ones (a plane in pieces) */
static int64_t N = 4, H = 7, W = 9, NUMEL = 4 * C * 7 * 9;

static tensor_t *new4(fmt_t f)
{
    const int64_t sh[4] = {N, C, H, W};
    tensor_t *t = tensor_new(f, 4, sh);
    if (!t) exit(2);
    return t;
}

static tensor_t *new1(const float *v)
{
    const int64_t sh[1] = {C};
    tensor_t *t = tensor_new(FMT_FP32, 1, sh);
    if (!t) exit(2);
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    return t;
}

/* call k's input: standard normal values times a scale that moves, plus a shift per channel */
static void fill(tensor_t *x, int k, test_rng *r)
{
    static const double scale[CALLS] = {1.0, 1.0, 1.0, 300.0, 300.0, 0.002, 1.0, 1.0, 1.0};
    static float v[MAXN];
    for (int64_t i = 0; i < NUMEL; i++) {
        const int64_t c = (i / (H * W)) % C;
        v[i] = (float)(scale[k] * (test_rng_normal(r) + 0.5 * (double)c));
    }
    CHECK_STATUS(tensor_from_f32(x, v), FX_OK);
}

static void check_same(const tensor_t *a, const tensor_t *b, const char *what, const char *tag)
{
    static int16_t ma[MAXN], mb[MAXN];
    CHECK_STATUS(tensor_get_raw(a, ma), FX_OK);
    CHECK_STATUS(tensor_get_raw(b, mb), FX_OK);
    CHECK(memcmp(ma, mb, (size_t)NUMEL * sizeof *ma) == 0 && tensor_exp(a) == tensor_exp(b),
          "%s %s: mantissas or exponent (%d, %d) differ", tag, what, tensor_exp(a),
          tensor_exp(b));
    const int64_t n = tensor_trace_len(a);
    CHECK(n == tensor_trace_len(b), "%s %s: %lld trace records against %lld", tag, what,
          (long long)n, (long long)tensor_trace_len(b));
    for (int64_t i = 0; i < n && i < tensor_trace_len(b); i++) {
        fx_trace_record ra, rb;
        CHECK_STATUS(tensor_trace_get(a, i, &ra), FX_OK);
        CHECK_STATUS(tensor_trace_get(b, i, &rb), FX_OK);
        CHECK(ra.exp == rb.exp && ra.clamped == rb.clamped && ra.overflow == rb.overflow &&
                  ra.recomputed == rb.recomputed && ra.saturated == rb.saturated &&
                  ra.nonfinite == rb.nonfinite && ra.underflow == rb.underflow &&
                  ra.true_max == rb.true_max && ra.stored_max == rb.stored_max,
              "%s %s: trace record %lld differs", tag, what, (long long)i);
    }
}

/* the run of calls for outputs in format f from inputs in format fx */
static void run(fmt_t f, fmt_t fx, int training, int threads)
{
    char tag[96];
    snprintf(tag, sizeof tag, "%s from %s, %lldx%lld planes, training %d, %d threads", fmt_name(f),
             fmt_name(fx), (long long)H, (long long)W, training, threads);
    const int prev = flexpoint_set_num_threads(threads);
    test_rng r;
    test_rng_seed(&r, 77);
    tensor_t *x = new4(fx);
    tensor_t *u = new4(f), *y = new4(f), *uref = new4(f), *yref = new4(f);
    tensor_t *outs[4] = {u, y, uref, yref};
    for (int i = 0; i < 4; i++) CHECK_STATUS(tensor_trace_enable(outs[i], 1), FX_OK);
    float rm[2][C], rv[2][C], sm[2][C], si[2][C];
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < C; c++) {
            rm[k][c] = 0.25f * (float)c;
            rv[k][c] = 1.0f + 0.5f * (float)c;
        }
    const int64_t before = fx_bn_direct_relu_runs();
    for (int k = 0; k < CALLS; k++) {
        fill(x, k, &r);
        /* channel 1 has a negative gamma; channel 2's beta sends all of it below 0; call 7's
         * betas send every output below 0 */
        const float gv[C] = {1.25f, -0.75f, 0.5f};
        const float bv[C] = {k == 7 ? -40.0f : 0.2f, k == 7 ? -40.0f : 0.1f, -40.0f};
        tensor_t *g = new1(gv), *b = new1(bv);
        CHECK_STATUS(tensor_batchnorm(uref, x, g, b, rm[0], rv[0], sm[0], si[0], 0.1, 1e-5,
                                      training),
                     FX_OK);
        CHECK_STATUS(tensor_relu(yref, uref), FX_OK);
        CHECK_STATUS(fx_batchnorm_shared_relu(u, y, x, g, b, rm[1], rv[1], sm[1], si[1], 0.1,
                                              1e-5, training),
                     FX_OK);
        char what[32];
        snprintf(what, sizeof what, "call %d y", k);
        check_same(u, uref, what, tag);
        snprintf(what, sizeof what, "call %d relu(y)", k);
        check_same(y, yref, what, tag);
        CHECK(memcmp(rm[0], rm[1], sizeof rm[0]) == 0 && memcmp(rv[0], rv[1], sizeof rv[0]) == 0 &&
                  (!training || (memcmp(sm[0], sm[1], sizeof sm[0]) == 0 &&
                                 memcmp(si[0], si[1], sizeof si[0]) == 0)),
              "%s call %d: statistics differ", tag, k);
        tensor_free(g);
        tensor_free(b);
    }
    /* the direct route made the ReLUs from the pieces of y (mantissa inputs only), all but a
     * FLEX16_5 relu(y)'s first, whose exponent has no Autoflex prediction to guess from */
    const int64_t made = fx_bn_direct_relu_runs() - before;
    const int64_t want = fx != f ? 0 : f == FMT_FLEX16_5 ? CALLS - 1 : CALLS;
    CHECK(made == want, "%s: %lld ReLUs made with y, %lld expected", tag, (long long)made,
          (long long)want);
    for (int i = 0; i < 4; i++) tensor_free(outs[i]);
    tensor_free(x);
    flexpoint_set_num_threads(prev);
}

/* declined where it does not apply, with nothing written; bad arguments refused */
static void declined(void)
{
    const float gv[C] = {1, 1, 1}, bv[C] = {0, 0, 0};
    tensor_t *g = new1(gv), *b = new1(bv);
    tensor_t *x = new4(FMT_DFP16), *u = new4(FMT_DFP16), *y = new4(FMT_DFP16);
    tensor_t *uf = new4(FMT_BF16), *yf = new4(FMT_BF16);
    test_rng r;
    test_rng_seed(&r, 5);
    fill(x, 0, &r);
    float rm[C] = {0}, rv[C] = {1, 1, 1};
    CHECK(fx_batchnorm_shared_relu(uf, yf, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1) ==
              FX_BN_RELU_NOT_TAKEN,
          "took bf16 outputs");
    CHECK(fx_batchnorm_shared_relu(u, u, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1) ==
              FX_BN_RELU_NOT_TAKEN,
          "took relu_y = y");
    CHECK(fx_batchnorm_shared_relu(u, x, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1) ==
              FX_BN_RELU_NOT_TAKEN,
          "took relu_y = x");
    fx_bn_relu_set_enabled(0);
    CHECK(fx_batchnorm_shared_relu(u, y, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1) ==
              FX_BN_RELU_NOT_TAKEN,
          "ran with the switch off");
    fx_bn_relu_set_enabled(1);
    static int16_t m[MAXN];
    int nz = 0;
    CHECK_STATUS(tensor_get_raw(u, m), FX_OK);
    for (int i = 0; i < NUMEL; i++) nz += m[i] != 0;
    CHECK_STATUS(tensor_get_raw(y, m), FX_OK);
    for (int i = 0; i < NUMEL; i++) nz += m[i] != 0;
    CHECK(nz == 0 && rm[0] == 0.0f, "a declined call wrote its outputs or statistics");
    /* bad input gets tensor_batchnorm's and tensor_relu's status */
    CHECK_STATUS(fx_batchnorm_shared_relu(u, y, x, g, b, rm, rv, NULL, NULL, 2.0, 1e-5, 1),
                 FX_EINVAL);
    const int64_t other[4] = {N, C, H, W + 1};
    tensor_t *ybad = tensor_new(FMT_DFP16, 4, other);
    CHECK_STATUS(fx_batchnorm_shared_relu(u, ybad, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1),
                 FX_ESHAPE);
    tensor_free(ybad);
    tensor_free(g);
    tensor_free(b);
    tensor_free(x);
    tensor_free(u);
    tensor_free(y);
    tensor_free(uf);
    tensor_free(yf);
}

int main(void)
{
    static const fmt_t fmts[2] = {FMT_FLEX16_5, FMT_DFP16};
    static const int64_t shapes[2][3] = {{4, 7, 9}, {2, 33, 33}};
    for (int si = 0; si < 2; si++) {
        N = shapes[si][0];
        H = shapes[si][1];
        W = shapes[si][2];
        NUMEL = N * C * H * W;
        for (int i = 0; i < 2; i++)
            for (int training = 0; training <= 1; training++)
                for (int threads = 1; threads <= 2; threads++) {
                    run(fmts[i], fmts[i], training, threads);
                    run(fmts[i], FMT_FP32, training, threads);
                }
    }
    declined();
    return test_finish("test_bn_shared_relu");
}
