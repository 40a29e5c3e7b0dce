/* A ReLU's gradient through the max pool after it, gated on the pooled values
 * (src/train/model.c fx_layer.relu_first) instead of on the full-size ReLU output:
 *   - the identity the trainer relies on, on the public ops, bit for bit in fp32, fp16 and
 *     bf16: maxpool_backward(relu_backward(dy, y_pooled)) equals
 *     relu_backward(maxpool_backward(dy), gate) with the gate the ReLU's output or its input,
 *     for 2x2 windows of stride 2 over even and odd sizes (rows and columns no window covers),
 *     with NaN, -NaN, +-Inf, +-0, subnormals and tied maxima in x and specials in dy;
 *   - a CNN trainer in fp32, fp16 and bf16 steps to the same losses, parameters and tensors as
 *     one built with FLEXPOINT_NO_FUSION=1; the pools' own ".dx", left unwritten, are refused
 *     with FX_ESTATE naming them and nothing else is; the route ran at both pools every step,
 *     and not in FLEX16_5 (whose writes each keep their own exponent). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_nn.h"
#include "flexpoint_train.h"
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

static void trainer(int fmt, const fx_dataset *tr)
{
    const int steps = 3;
    fx_trainer *a = make(fmt, tr, 0), *b = make(fmt, tr, 1);
    if (!a || !b) goto done;
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
    const int shared = fmt == FMT_FLEX16_5 || fmt == FMT_DFP16;
    CHECK(made == (shared ? 0 : 2 * steps), "%s: the pools gated first %lld times in %d steps",
          fmt_name((fmt_t)fmt), (long long)made, steps);
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
            CHECK(same_raw(ta, tb), "%s: tensor %s differs from the unfused run's",
                  fmt_name((fmt_t)fmt), tn);
    }
    CHECK(refused == (shared ? 0 : 2), "%s: %d pool gradients refused", fmt_name((fmt_t)fmt),
          refused);
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
    fx_dataset *tr = test_patch_dataset(64, 3);
    CHECK(tr != NULL, "test_patch_dataset: %s", flexpoint_last_error());
    if (tr) {
        trainer(FMT_FP32, tr);
        trainer(FMT_FP16, tr);
        trainer(FMT_BF16, tr);
        trainer(FMT_FLEX16_5, tr);
        fx_dataset_free(tr);
    }
    return test_finish("test_relu_pool_backward");
}
