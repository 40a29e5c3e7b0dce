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
 *   - with y allowed to go unwritten (the trainer's call where the ReLU is y's only reader):
 *     relu(y) and y's exponent and trace records as above; y's mantissas those of the
 *     reference, or, where the call says it left them unwritten, unchanged from before the
 *     call, with relu(y) > 0 exactly where the reference y > 0 and relu(y)'s exponent no
 *     coarser than y's; both the unwritten runs and the writes of y made after all (relu(y)'s
 *     write rounding again from y) counted, so that neither route passes untaken;
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

/* the run's shape: N images of H x W planes */
static void set_shape(const int64_t s[3])
{
    N = s[0];
    H = s[1];
    W = s[2];
    NUMEL = N * C * H * W;
}

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

/* the same exponent and trace records, and with mantissas, the same mantissas */
static void check_same_write(const tensor_t *a, const tensor_t *b, int mantissas,
                             const char *what, const char *tag)
{
    static int16_t ma[MAXN], mb[MAXN];
    CHECK_STATUS(tensor_get_raw(a, ma), FX_OK);
    CHECK_STATUS(tensor_get_raw(b, mb), FX_OK);
    CHECK((!mantissas || memcmp(ma, mb, (size_t)NUMEL * sizeof *ma) == 0) &&
              tensor_exp(a) == tensor_exp(b),
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

static void check_same(const tensor_t *a, const tensor_t *b, const char *what, const char *tag)
{
    check_same_write(a, b, 1, what, tag);
}

/* y left unwritten: its mantissas as before the call (was), relu(y)'s signs the reference y's,
 * relu(y)'s exponent no coarser than y's */
static void check_unwritten(const tensor_t *u, const int16_t *was, const tensor_t *y,
                            const tensor_t *uref, int k, const char *tag)
{
    static int16_t mu[MAXN], my[MAXN], mr[MAXN];
    CHECK_STATUS(tensor_get_raw(u, mu), FX_OK);
    CHECK_STATUS(tensor_get_raw(y, my), FX_OK);
    CHECK_STATUS(tensor_get_raw(uref, mr), FX_OK);
    CHECK(memcmp(mu, was, (size_t)NUMEL * sizeof *mu) == 0,
          "%s call %d: y said unwritten, but its mantissas changed", tag, k);
    int64_t differ = 0;
    for (int64_t i = 0; i < NUMEL; i++) differ += (my[i] > 0) != (mr[i] > 0);
    CHECK(differ == 0 && tensor_exp(y) <= tensor_exp(u),
          "%s call %d: relu(y)'s signs differ from y's at %lld elements (exponents %d, %d)", tag,
          k, (long long)differ, tensor_exp(y), tensor_exp(u));
}

/* the run of calls for outputs in format f from inputs in format fx; with unkept, y may go
 * unwritten */
static void run(fmt_t f, fmt_t fx, int training, int threads, int unkept)
{
    char tag[112];
    snprintf(tag, sizeof tag, "%s from %s, %lldx%lld planes, training %d, %d threads%s",
             fmt_name(f), fmt_name(fx), (long long)H, (long long)W, training, threads,
             unkept ? ", y may go unwritten" : "");
    const int prev = flexpoint_set_num_threads(threads);
    test_rng r;
    test_rng_seed(&r, 77);
    tensor_t *x = new4(fx);
    tensor_t *u = new4(f), *y = new4(f), *uref = new4(f), *yref = new4(f);
    tensor_t *outs[4] = {u, y, uref, yref};
    /* (a traced y is always written: with unkept its trace is off on both sides, whose
     * exponents are compared) */
    for (int i = 0; i < 4; i++)
        if (!unkept || (outs[i] != u && outs[i] != uref))
            CHECK_STATUS(tensor_trace_enable(outs[i], 1), FX_OK);
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
        static int16_t was[MAXN];
        CHECK_STATUS(tensor_get_raw(u, was), FX_OK);
        int written = -1;
        CHECK_STATUS(fx_batchnorm_shared_relu(u, y, x, g, b, rm[1], rv[1], sm[1], si[1], 0.1,
                                              1e-5, training, unkept ? &written : NULL),
                     FX_OK);
        CHECK(unkept ? written == 0 || written == 1 : written == -1,
              "%s call %d: y_written %d", tag, k, written);
        char what[32];
        snprintf(what, sizeof what, "call %d y", k);
        check_same_write(u, uref, written != 0, what, tag);
        if (written == 0) check_unwritten(u, was, y, uref, k, tag);
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

/* A FLEX16_5 relu(y) whose Autoflex history (values `scale` times y's, which are about 3) puts
 * its exponent `above` places above y's: relu(y) then rounds y's smallest positive mantissas to
 * 0, so its signs are not y's, and y is written although the caller let it go unwritten; every
 * bit as the two separate ops give */
static void coarse_relu_exponent(float scale, int above)
{
    char tag[64];
    snprintf(tag, sizeof tag, "flex16_5, relu(y) %d above y", above);
    test_rng r;
    test_rng_seed(&r, 9);
    tensor_t *x = new4(FMT_FLEX16_5);
    tensor_t *u = new4(FMT_FLEX16_5), *y = new4(FMT_FLEX16_5);
    tensor_t *uref = new4(FMT_FLEX16_5), *yref = new4(FMT_FLEX16_5);
    static float v[MAXN];
    for (int k = 0; k < 6; k++) { /* the same history for both pairs of outputs */
        for (int64_t i = 0; i < NUMEL; i++) v[i] = (float)(3.0 * test_rng_normal(&r));
        CHECK_STATUS(tensor_from_f32(u, v), FX_OK);
        CHECK_STATUS(tensor_from_f32(uref, v), FX_OK);
        for (int64_t i = 0; i < NUMEL; i++) v[i] *= scale;
        CHECK_STATUS(tensor_from_f32(y, v), FX_OK);
        CHECK_STATUS(tensor_from_f32(yref, v), FX_OK);
    }
    /* (reading the exponents settles deferred writes: the route guesses from settled ones) */
    CHECK(tensor_exp(u) == tensor_exp(uref) && tensor_exp(y) == tensor_exp(yref),
          "%s: the histories differ", tag);
    fill(x, 0, &r);
    const float gv[C] = {1.0f, 1.0f, 1.0f}, bv[C] = {0.0f, 0.0f, 0.0f};
    tensor_t *g = new1(gv), *b = new1(bv);
    float rm[C] = {0}, rv[C] = {1, 1, 1}, rm2[C] = {0}, rv2[C] = {1, 1, 1};
    CHECK_STATUS(tensor_batchnorm(uref, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1), FX_OK);
    CHECK_STATUS(tensor_relu(yref, uref), FX_OK);
    const int64_t late0 = fx_bn_y_stored_late(), runs0 = fx_bn_direct_relu_runs();
    int written = -1;
    CHECK_STATUS(fx_batchnorm_shared_relu(u, y, x, g, b, rm2, rv2, NULL, NULL, 0.1, 1e-5, 1,
                                          &written),
                 FX_OK);
    CHECK(written == 1 && fx_bn_y_stored_late() == late0 + 1 &&
              fx_bn_direct_relu_runs() == runs0 + 1 && tensor_exp(y) == tensor_exp(u) + above,
          "%s: y_written %d, %lld late writes of y, exponents %d and %d", tag, written,
          (long long)(fx_bn_y_stored_late() - late0), tensor_exp(y), tensor_exp(u));
    check_same(u, uref, "y", tag);
    check_same(y, yref, "relu(y)", tag);
    tensor_free(g);
    tensor_free(b);
    tensor_free(x);
    tensor_free(u);
    tensor_free(y);
    tensor_free(uref);
    tensor_free(yref);
}

/* a y whose trace is on is written although the caller lets it go unwritten, where the same
 * call untraced leaves it so */
static void traced_y_written(void)
{
    test_rng r;
    test_rng_seed(&r, 11);
    tensor_t *x = new4(FMT_DFP16), *u = new4(FMT_DFP16), *y = new4(FMT_DFP16);
    const float gv[C] = {1.0f, 1.0f, 1.0f}, bv[C] = {0.0f, 0.0f, 0.0f};
    tensor_t *g = new1(gv), *b = new1(bv);
    float rm[C] = {0}, rv[C] = {1, 1, 1};
    int written[2] = {-1, -1};
    for (int traced = 0; traced <= 1; traced++) {
        fill(x, 0, &r);
        CHECK_STATUS(tensor_trace_enable(u, traced), FX_OK);
        CHECK_STATUS(fx_batchnorm_shared_relu(u, y, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1,
                                              &written[traced]),
                     FX_OK);
    }
    CHECK(written[0] == 0 && written[1] == 1, "y written %d untraced, %d traced", written[0],
          written[1]);
    tensor_free(g);
    tensor_free(b);
    tensor_free(x);
    tensor_free(u);
    tensor_free(y);
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
    CHECK(fx_batchnorm_shared_relu(uf, yf, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1, NULL) ==
              FX_BN_RELU_NOT_TAKEN,
          "took bf16 outputs");
    CHECK(fx_batchnorm_shared_relu(u, u, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1, NULL) ==
              FX_BN_RELU_NOT_TAKEN,
          "took relu_y = y");
    CHECK(fx_batchnorm_shared_relu(u, x, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1, NULL) ==
              FX_BN_RELU_NOT_TAKEN,
          "took relu_y = x");
    fx_bn_relu_set_enabled(0);
    CHECK(fx_batchnorm_shared_relu(u, y, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1, NULL) ==
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
    CHECK_STATUS(fx_batchnorm_shared_relu(u, y, x, g, b, rm, rv, NULL, NULL, 2.0, 1e-5, 1, NULL),
                 FX_EINVAL);
    const int64_t other[4] = {N, C, H, W + 1};
    tensor_t *ybad = tensor_new(FMT_DFP16, 4, other);
    CHECK_STATUS(fx_batchnorm_shared_relu(u, ybad, x, g, b, rm, rv, NULL, NULL, 0.1, 1e-5, 1, NULL),
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
        set_shape(shapes[si]);
        for (int i = 0; i < 2; i++)
            for (int training = 0; training <= 1; training++)
                for (int threads = 1; threads <= 2; threads++) {
                    run(fmts[i], fmts[i], training, threads, 0);
                    run(fmts[i], FMT_FP32, training, threads, 0);
                }
    }
    /* y allowed to go unwritten, on every level the CPU runs (AVX2 rounds the pieces in
     * registers, the others through the buffer): the runs that left it so, and those that
     * wrote it after all */
    const int64_t unkept0 = fx_bn_y_unkept_runs(), late0 = fx_bn_y_stored_late();
    char keep[16];
    snprintf(keep, sizeof keep, "%s", flexpoint_backend());
    static const char *const levels[3] = {"scalar", "avx2", "avx512"};
    for (int lv = 0; lv < 3; lv++) {
        if (flexpoint_set_backend(levels[lv]) != FX_OK) continue;
        for (int si = 0; si < 2; si++) {
            set_shape(shapes[si]);
            for (int i = 0; i < 2; i++)
                for (int threads = 1; threads <= 2; threads++) {
                    run(fmts[i], fmts[i], 1, threads, 1);
                    run(fmts[i], FMT_FP32, 1, threads, 1);
                }
        }
    }
    CHECK_STATUS(flexpoint_set_backend(keep), FX_OK);
    const int64_t unkept = fx_bn_y_unkept_runs() - unkept0, late = fx_bn_y_stored_late() - late0;
    CHECK(unkept > 0 && late > 0, "y left unwritten in %lld runs, written after all in %lld",
          (long long)unkept, (long long)late);
    /* the switch off: y written every time */
    fx_bn_y_unkept_set_enabled(0);
    const int64_t off0 = fx_bn_y_unkept_runs();
    run(FMT_DFP16, FMT_DFP16, 1, 1, 1);
    CHECK(fx_bn_y_unkept_runs() == off0, "y left unwritten with the switch off");
    fx_bn_y_unkept_set_enabled(1);
    coarse_relu_exponent(300.0f, 8);
    coarse_relu_exponent(2.0f, 1);
    traced_y_written();
    declined();
    return test_finish("test_bn_shared_relu");
}
