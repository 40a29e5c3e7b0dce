/* A ReLU's gradient through the max pool after it, gated on the pooled values
 * (src/train/model.c fx_layer.relu_first) instead of on the full-size ReLU output:
 *   - the identity the trainer relies on, on the public ops, bit for bit in fp32, fp16 and
 *     bf16: maxpool_backward(relu_backward(dy, y_pooled)) equals
 *     relu_backward(maxpool_backward(dy), gate) with the gate the ReLU's output or its input,
 *     for 2x2 windows of stride 2 over even and odd sizes (rows and columns no window covers),
 *     with NaN, -NaN, +-Inf, +-0, subnormals and tied maxima in x and specials in dy;
 *   - the FLEX16_5/DFP16 route (fx_pool_relu_backward_shared) against the two ops over runs of
 *     calls whose gradients change scale: dx's mantissas and exponent, and the trace records
 *     of both writes (the pool's gradient, whose mantissas it does not store, and dx), with
 *     Autoflex managing both outputs, and with their exponents fixed above dy's (dy rounded,
 *     values underflowing) and below it (saturating), gated by the ReLU's input or output;
 *     an index outside its plane is not taken, with nothing written;
 *   - a CNN trainer in fp32, fp16, bf16, FLEX16_5 and DFP16 steps to the same losses,
 *     parameters and tensors (mantissas and exponents) as one built with
 *     FLEXPOINT_NO_FUSION=1; the pools' own ".dx", left unwritten, are refused with FX_ESTATE
 *     naming them and nothing else is; the route ran at both pools every step; in FLEX16_5 and
 *     DFP16 every tensor's trace (one record per write: exponent, clamping, overflow,
 *     recompute, saturations, NaN/Inf, underflows, maxima) is the unfused run's, the pools'
 *     unstored gradients and the ReLUs' gradients included (src/nn/pool_relu_shared.c). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_nn.h"
#include "flexpoint_train.h"
#include "nn/pool_own.h"  /* fx_pool_relu_backward_shared */
#include "train/model.h" /* fx_model_relu_pool_made */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static tensor_t *new4(fmt_t f, int64_t n, int64_t c, int64_t h, int64_t w)
{
    const int64_t s[4] = {n, c, h, w};
    tensor_t *t = tensor_new(f, 4, s);
    CHECK(t != NULL, "tensor_new(%s): %s", fmt_name(f), flexpoint_last_error());
    return t;
}

/* n values: normal ones with every kind of special sprinkled in, and where ties, windows of
 * equal values (a window's max taken by its first position) */
static void fill(float *v, int64_t n, int ties, test_rng *r)
{
    static const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-41f, -1e-41f,
                               6.0e4f, -6.0e4f};
    for (int64_t i = 0; i < n; i++) v[i] = (float)test_rng_normal(r);
    for (int64_t k = 0; k < n / 7; k++) v[test_rng_u64(r) % (uint64_t)n] = sp[k % 10];
    if (ties)
        for (int64_t i = 0; i + 1 < n; i += 5) v[i + 1] = v[i];
}

static int same_raw(const tensor_t *a, const tensor_t *b)
{
    const int64_t n = tensor_numel(a);
    const size_t es = tensor_fmt(a) == FMT_FP32 ? 4 : 2;
    void *pa = malloc(es * (size_t)n), *pb = malloc(es * (size_t)n);
    const int same = pa && pb && tensor_get_raw(a, pa) == FX_OK &&
                     tensor_get_raw(b, pb) == FX_OK && memcmp(pa, pb, es * (size_t)n) == 0;
    free(pa);
    free(pb);
    return same;
}

static void identity(fmt_t f, int64_t H, int64_t W, int ties, test_rng *r)
{
    const int64_t N = 3, C = 4, OH = H / 2, OW = W / 2;
    tensor_t *x = new4(f, N, C, H, W), *y = new4(f, N, C, H, W), *p = new4(f, N, C, OH, OW);
    tensor_t *dy = new4(f, N, C, OH, OW), *g = new4(f, N, C, OH, OW);
    tensor_t *a = new4(f, N, C, H, W), *dxa = new4(f, N, C, H, W), *dxb = new4(f, N, C, H, W);
    float *v = malloc(sizeof(float) * (size_t)(N * C * H * W));
    int32_t *am = malloc(sizeof(int32_t) * (size_t)(N * C * OH * OW));
    fill(v, N * C * H * W, ties, r);
    CHECK_STATUS(tensor_from_f32(x, v), FX_OK);
    fill(v, N * C * OH * OW, 0, r);
    CHECK_STATUS(tensor_from_f32(dy, v), FX_OK);
    CHECK_STATUS(tensor_relu(y, x), FX_OK);
    CHECK_STATUS(tensor_maxpool2d(p, am, y, 2, 2, 2, 2, 0, 0), FX_OK);
    /* gated on the pooled values, then scattered */
    CHECK_STATUS(tensor_relu_backward(g, dy, p), FX_OK);
    CHECK_STATUS(tensor_maxpool2d_backward(dxb, g, am), FX_OK);
    for (int gate = 0; gate < 2; gate++) { /* the ReLU's output, or its input */
        CHECK_STATUS(tensor_maxpool2d_backward(a, dy, am), FX_OK);
        CHECK_STATUS(tensor_relu_backward(dxa, a, gate ? x : y), FX_OK);
        CHECK(same_raw(dxa, dxb), "%s %lldx%lld%s, gate %s: the pooled gate's gradient differs",
              fmt_name(f), (long long)H, (long long)W, ties ? " with ties" : "",
              gate ? "x" : "relu(x)");
    }
    free(v);
    free(am);
    tensor_t *all[] = {x, y, p, dy, g, a, dxa, dxb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tensor_free(all[i]);
}

static int same_record(const fx_trace_record *x, const fx_trace_record *y);

/* the two tensors' traces hold the same records */
static int same_trace(const tensor_t *a, const tensor_t *b)
{
    const int64_t n = tensor_trace_len(a);
    int same = n >= 0 && n == tensor_trace_len(b);
    for (int64_t w = 0; same && w < n; w++) {
        fx_trace_record x, y;
        same = tensor_trace_get(a, w, &x) == FX_OK && tensor_trace_get(b, w, &y) == FX_OK &&
               same_record(&x, &y);
    }
    return same;
}

/* fixed: 0 Autoflex (or DFP16's exact exponents); else the outputs' exponents fixed at dy's
 * first exponent + fixed */
static void shared_identity(fmt_t f, int fixed, int gate_out, test_rng *r)
{
    const int64_t N = 3, C = 4, H = 8, W = 10, OH = 4, OW = 5;
    tensor_t *x = new4(f, N, C, H, W), *y = new4(f, N, C, H, W), *p = new4(f, N, C, OH, OW);
    tensor_t *dy = new4(f, N, C, OH, OW);
    tensor_t *a1 = new4(f, N, C, H, W), *dx1 = new4(f, N, C, H, W); /* the route */
    tensor_t *a2 = new4(f, N, C, H, W), *dx2 = new4(f, N, C, H, W); /* the two ops */
    float *v = malloc(sizeof(float) * (size_t)(N * C * H * W));
    int32_t *am = malloc(sizeof(int32_t) * (size_t)(N * C * OH * OW));
    for (int64_t i = 0; i < N * C * H * W; i++) v[i] = (float)test_rng_normal(r);
    CHECK_STATUS(tensor_from_f32(x, v), FX_OK);
    CHECK_STATUS(tensor_relu(y, x), FX_OK);
    CHECK_STATUS(tensor_maxpool2d(p, am, y, 2, 2, 2, 2, 0, 0), FX_OK);
    tensor_t *outs[4] = {a1, dx1, a2, dx2};
    for (int k = 0; k < 4; k++) CHECK_STATUS(tensor_trace_enable(outs[k], 1), FX_OK);
    for (int call = 0; call < 6; call++) {
        const double scale = ldexp(1.0, (call % 3) * 5 - 4); /* the gradients change scale */
        for (int64_t i = 0; i < N * C * OH * OW; i++) v[i] = (float)(scale * test_rng_normal(r));
        for (int64_t i = 0; i < N * C * OH * OW; i += 9) v[i] = 0.0f;
        CHECK_STATUS(tensor_from_f32(dy, v), FX_OK);
        if (fixed && call == 0)
            for (int k = 0; k < 4; k++) {
                CHECK_STATUS(tensor_set_autoflex(outs[k], "fixed"), FX_OK);
                CHECK_STATUS(tensor_set_exp(outs[k], tensor_exp(dy) + fixed), FX_OK);
            }
        const tensor_t *gate = gate_out ? y : x;
        CHECK_STATUS(fx_pool_relu_backward_shared(dx1, a1, dy, am, gate, "test"), FX_OK);
        CHECK_STATUS(tensor_maxpool2d_backward(a2, dy, am), FX_OK);
        CHECK_STATUS(tensor_relu_backward(dx2, a2, gate), FX_OK);
        CHECK(same_raw(dx1, dx2) && tensor_exp(dx1) == tensor_exp(dx2) &&
                  tensor_exp(a1) == tensor_exp(a2),
              "%s fixed %+d gate %s call %d: dx (exp %d, %d) or a (exp %d, %d) differs",
              fmt_name(f), fixed, gate_out ? "out" : "in", call, tensor_exp(dx1),
              tensor_exp(dx2), tensor_exp(a1), tensor_exp(a2));
        CHECK(same_trace(a1, a2) && same_trace(dx1, dx2),
              "%s fixed %+d gate %s call %d: a trace differs", fmt_name(f), fixed,
              gate_out ? "out" : "in", call);
    }
    /* an index outside its plane: not taken, nothing written */
    const int64_t len = tensor_trace_len(dx1);
    am[5] = (int32_t)(H * W); /* the next plane's first element */
    CHECK(fx_pool_relu_backward_shared(dx1, a1, dy, am, x, "test") == FX_POOL_RELU_NOT_TAKEN,
          "%s: an index outside its plane was taken", fmt_name(f));
    CHECK(tensor_trace_len(dx1) == len, "%s: a refused call wrote dx", fmt_name(f));
    free(v);
    free(am);
    tensor_t *all[] = {x, y, p, dy, a1, dx1, a2, dx2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tensor_free(all[i]);
}

static fx_trainer *make(int fmt, const fx_dataset *tr, int unfused)
{
    fx_train_config c;
    test_train_config(&c, "cnn8-8-16", fmt, 5);
    c.batch_size = 16;
    if (unfused) setenv("FLEXPOINT_NO_FUSION", "1", 1);
    fx_trainer *t = fx_trainer_new(&c, tr, NULL);
    if (unfused) unsetenv("FLEXPOINT_NO_FUSION");
    CHECK(t != NULL, "fx_trainer_new(%s): %s", fmt_name((fmt_t)fmt), flexpoint_last_error());
    return t;
}

static int same_record(const fx_trace_record *x, const fx_trace_record *y)
{
    return x->write == y->write && x->exp == y->exp && x->clamped == y->clamped &&
           x->overflow == y->overflow && x->recomputed == y->recomputed &&
           x->saturated == y->saturated && x->nonfinite == y->nonfinite &&
           x->underflow == y->underflow && x->true_max == y->true_max &&
           x->stored_max == y->stored_max;
}

enum { MAX_TRACED = 64 };

static void trainer(int fmt, const fx_dataset *tr)
{
    const int steps = 4;
    const int shared = fmt == FMT_FLEX16_5 || fmt == FMT_DFP16;
    fx_trainer *a = make(fmt, tr, 0), *b = make(fmt, tr, 1);
    if (!a || !b) goto done;
    /* every shared-exponent tensor of both, traced from the start (taken before any step
     * leaves one unwritten) */
    tensor_t *ta_all[MAX_TRACED], *tb_all[MAX_TRACED];
    const char *names[MAX_TRACED];
    int ntraced = 0;
    for (int i = 0; shared && i < fx_trainer_tensor_count(a) && ntraced < MAX_TRACED; i++) {
        const char *tn = fx_trainer_tensor_name(a, i);
        const int j = fx_trainer_tensor_find(b, tn);
        tensor_t *ta = fx_trainer_tensor(a, i), *tb = j >= 0 ? fx_trainer_tensor(b, j) : NULL;
        if (!ta || !tb || !fmt_is_shared_exponent(tensor_fmt(ta))) continue;
        CHECK_STATUS(tensor_trace_enable(ta, 1), FX_OK);
        CHECK_STATUS(tensor_trace_enable(tb, 1), FX_OK);
        ta_all[ntraced] = ta;
        tb_all[ntraced] = tb;
        names[ntraced++] = tn;
    }
    int64_t made = 0;
    for (int s = 0; s < steps; s++) {
        float la = -1, lb = -2;
        const int64_t m0 = fx_model_relu_pool_made();
        CHECK_STATUS(fx_trainer_step(a, &la), FX_OK);
        made += fx_model_relu_pool_made() - m0;
        const int64_t m1 = fx_model_relu_pool_made();
        CHECK_STATUS(fx_trainer_step(b, &lb), FX_OK);
        CHECK(fx_model_relu_pool_made() == m1, "%s with FLEXPOINT_NO_FUSION=1: the route ran",
              fmt_name((fmt_t)fmt));
        CHECK(memcmp(&la, &lb, sizeof la) == 0, "%s step %d: loss %.9g and %.9g",
              fmt_name((fmt_t)fmt), s, (double)la, (double)lb);
    }
    CHECK(made == 2 * steps, "%s: the pools gated first %lld times in %d steps",
          fmt_name((fmt_t)fmt), (long long)made, steps);
    int pool_traces = 0;
    for (int k = 0; k < ntraced; k++) {
        const int64_t la = tensor_trace_len(ta_all[k]), lb = tensor_trace_len(tb_all[k]);
        CHECK(la == lb, "%s: tensor %s: %lld writes traced, unfused %lld", fmt_name((fmt_t)fmt),
              names[k], (long long)la, (long long)lb);
        int same = la == lb;
        for (int64_t w = 0; same && w < la; w++) {
            fx_trace_record x, y;
            same = tensor_trace_get(ta_all[k], w, &x) == FX_OK &&
                   tensor_trace_get(tb_all[k], w, &y) == FX_OK && same_record(&x, &y);
        }
        CHECK(same, "%s: tensor %s: its trace differs from the unfused run's",
              fmt_name((fmt_t)fmt), names[k]);
        pool_traces += strncmp(names[k], "pool", 4) == 0 && strstr(names[k], ".dx") && la > 0;
    }
    CHECK(!shared || pool_traces == 2, "%s: %d pool gradients traced", fmt_name((fmt_t)fmt),
          pool_traces);
    const int64_t n = fx_trainer_param_count(a);
    float *pa = malloc(sizeof(float) * (size_t)n), *pb = malloc(sizeof(float) * (size_t)n);
    CHECK_STATUS(fx_trainer_get_params(a, pa), FX_OK);
    CHECK_STATUS(fx_trainer_get_params(b, pb), FX_OK);
    CHECK(memcmp(pa, pb, sizeof(float) * (size_t)n) == 0, "%s: parameters differ after %d steps",
          fmt_name((fmt_t)fmt), steps);
    free(pa);
    free(pb);
    int refused = 0;
    for (int i = 0; i < fx_trainer_tensor_count(a); i++) {
        const char *tn = fx_trainer_tensor_name(a, i);
        const int j = fx_trainer_tensor_find(b, tn);
        tensor_t *ta = fx_trainer_tensor(a, i);
        if (!ta) {
            const size_t len = strlen(tn);
            const int pool_dx = strncmp(tn, "pool", 4) == 0 && len > 3 &&
                                strcmp(tn + len - 3, ".dx") == 0;
            CHECK(flexpoint_last_status() == FX_ESTATE && strstr(flexpoint_last_error(), tn),
                  "%s: tensor %s: status %d, '%s'", fmt_name((fmt_t)fmt), tn,
                  flexpoint_last_status(), flexpoint_last_error());
            /* a conv's own output, which its fused ReLU never writes, may be refused too */
            CHECK(pool_dx || strstr(tn, ".out"), "%s: tensor %s refused", fmt_name((fmt_t)fmt),
                  tn);
            refused += pool_dx;
            continue;
        }
        CHECK(j >= 0, "%s: tensor %s missing from the unfused trainer", fmt_name((fmt_t)fmt), tn);
        tensor_t *tb = j >= 0 ? fx_trainer_tensor(b, j) : NULL;
        CHECK(tb != NULL, "%s unfused: tensor %s refused", fmt_name((fmt_t)fmt), tn);
        if (tb && tensor_fmt(ta) == tensor_fmt(tb) && tensor_numel(ta) == tensor_numel(tb))
            CHECK(same_raw(ta, tb) && (!shared || tensor_exp(ta) == tensor_exp(tb)),
                  "%s: tensor %s differs from the unfused run's", fmt_name((fmt_t)fmt), tn);
    }
    CHECK(refused == 2, "%s: %d pool gradients refused", fmt_name((fmt_t)fmt), refused);
done:
    fx_trainer_free(a);
    fx_trainer_free(b);
}

int main(void)
{
    test_rng r;
    test_rng_seed(&r, 20261206);
    const fmt_t fmts[3] = {FMT_FP32, FMT_FP16, FMT_BF16};
    for (int i = 0; i < 3; i++)
        for (int ties = 0; ties < 2; ties++) {
            identity(fmts[i], 8, 10, ties, &r);
            identity(fmts[i], 9, 7, ties, &r);
        }
    for (int gate_out = 0; gate_out < 2; gate_out++) {
        shared_identity(FMT_FLEX16_5, 0, gate_out, &r);
        shared_identity(FMT_FLEX16_5, 3, gate_out, &r);
        shared_identity(FMT_FLEX16_5, -3, gate_out, &r);
        shared_identity(FMT_DFP16, 0, gate_out, &r);
    }
    fx_dataset *tr = test_patch_dataset(64, 3);
    CHECK(tr != NULL, "test_patch_dataset: %s", flexpoint_last_error());
    if (tr) {
        trainer(FMT_FP32, tr);
        trainer(FMT_FP16, tr);
        trainer(FMT_BF16, tr);
        trainer(FMT_FLEX16_5, tr);
        trainer(FMT_DFP16, tr);
        fx_dataset_free(tr);
    }
    return test_finish("test_relu_pool_backward");
}
