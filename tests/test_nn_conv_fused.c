/* tensor_conv2d_bias_relu against the unfused sequence it stands for (tensor_conv2d into a
 * tensor of y's format, tensor_add of the bias, tensor_relu), bit for bit, on every CPU backend
 * and with 1 and 2 threads:
 *   - y in fp32, fp16 and bf16; x and w in y's format or fp32; bias in y's format, fp32 or
 *     absent; ReLU on and off; the small CNN's two layers and strided/dilated geometries;
 *   - data with the cases where rounding order could show: values that overflow fp16 only once
 *     the bias is added, sums that cancel to +-0 and to subnormals, NaN and +-Inf in x and in the
 *     bias, -0 biases;
 *   - the paths that fall back to the three ops (a y that is a view, FLEX16_5 x into a float y, a
 *     DFP16 bias) give the same bits as the three ops too;
 *   - the ReLU gradient masked by the fused output equals the one masked by the pre-activation
 *     (the model keeps only the fused output);
 *   - a FLEX16_5 y is FX_EUNSUPPORTED, a bias of the wrong shape FX_ESHAPE, NULLs FX_EINVAL,
 *     and y is untouched by a failed call. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int64_t N, C, H, W, O, K;
    int stride, pad, dil;
} fcase;

static const fcase CASES[] = {
    {"CNN conv1 5x5 pad 2", 4, 1, 28, 28, 32, 5, 1, 2, 1},
    {"CNN conv2 5x5 pad 2", 3, 32, 14, 14, 64, 5, 1, 2, 1},
    {"3x3 stride 2 pad 1", 2, 5, 9, 11, 7, 3, 2, 1, 1},
    {"3x3 dilation 2 pad 2", 2, 3, 10, 9, 4, 3, 1, 2, 2},
};

static tensor_t *make(fmt_t f, int nd, const int64_t *shape, const float *v)
{
    tensor_t *t = tensor_new(f, nd, shape);
    CHECK(t != NULL, "tensor_new(%s): %s", fmt_name(f), flexpoint_last_error());
    if (t && v) CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    return t;
}

/* x and w: mostly normal values; with specials, a few NaN/Inf/huge entries. */
static void fill(test_rng *r, float *v, int64_t n, float scale, int specials)
{
    for (int64_t i = 0; i < n; i++) v[i] = (float)(test_rng_normal(r) * scale);
    if (!specials) return;
    const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, 6.0e4f, -6.0e4f, 0.0f, -0.0f, 1e-30f};
    for (int k = 0; k < 12; k++) v[test_rng_u64(r) % (uint64_t)n] = sp[k % 9];
}

static int same_bits(const tensor_t *a, const tensor_t *b)
{
    const int64_t n = tensor_numel(a);
    const size_t es = tensor_fmt(a) == FMT_FP32 ? 4 : 2;
    unsigned char *pa = malloc((size_t)n * es), *pb = malloc((size_t)n * es);
    int same = pa && pb && tensor_get_raw(a, pa) == FX_OK && tensor_get_raw(b, pb) == FX_OK &&
               memcmp(pa, pb, (size_t)n * es) == 0;
    free(pa);
    free(pb);
    return same;
}

/* The unfused reference: t = conv, u = t + bias, y = relu(u); returns u too (pre-activation). */
static int unfused(tensor_t *y, tensor_t *u, const tensor_t *x, const tensor_t *w,
                   const tensor_t *bias, int relu, const fcase *c)
{
    tensor_t *t = tensor_new(tensor_fmt(y), 4, tensor_shape(y));
    int rc = t ? tensor_conv2d(t, x, w, c->stride, c->stride, c->pad, c->pad, c->dil, c->dil)
               : FX_ENOMEM;
    if (!rc) rc = bias ? tensor_add(u, t, bias) : tensor_copy(u, t);
    if (!rc) rc = relu ? tensor_relu(y, u) : tensor_copy(y, u);
    tensor_free(t);
    return rc;
}

static void one(const fcase *c, fmt_t yf, fmt_t xf, int bias_kind, int relu, int specials,
                test_rng *r, const char *backend, int threads)
{
    const int64_t OH = (c->H + 2 * c->pad - c->dil * (c->K - 1) - 1) / c->stride + 1;
    const int64_t OW = (c->W + 2 * c->pad - c->dil * (c->K - 1) - 1) / c->stride + 1;
    const int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->O, c->C, c->K, c->K};
    const int64_t ys[4] = {c->N, c->O, OH, OW}, bs[3] = {c->O, 1, 1};
    const int64_t nx = c->N * c->C * c->H * c->W, nw = c->O * c->C * c->K * c->K;
    float *xv = malloc((size_t)nx * sizeof *xv), *wv = malloc((size_t)nw * sizeof *wv),
          *bv = malloc((size_t)c->O * sizeof *bv);
    if (!xv || !wv || !bv) {
        CHECK(0, "host allocation");
        free(xv), free(wv), free(bv);
        return;
    }
    /* fp16 cases: magnitudes near its top, so that some sums overflow only with the bias */
    const float scale = yf == FMT_FP16 ? 8.0f : 1.0f;
    fill(r, xv, nx, scale, specials);
    fill(r, wv, nw, 1.0f, 0);
    for (int64_t o = 0; o < c->O; o++) bv[o] = (float)(test_rng_normal(r) * 4.0);
    if (specials && c->O > 4) {
        bv[0] = -0.0f;
        bv[1] = NAN;
        bv[2] = yf == FMT_FP16 ? 6.5e4f : 3.0e38f;
        bv[3] = -INFINITY;
    }
    const fmt_t bf = bias_kind == 1 ? yf : FMT_FP32;
    tensor_t *x = make(xf, 4, xs, xv), *w = make(xf, 4, ws, wv);
    tensor_t *b = bias_kind ? make(bf, 3, bs, bv) : NULL;
    tensor_t *y = make(yf, 4, ys, NULL), *yr = make(yf, 4, ys, NULL), *u = make(yf, 4, ys, NULL);
    if (x && w && y && yr && u && (b || !bias_kind)) {
        CHECK_STATUS(unfused(yr, u, x, w, b, relu, c), FX_OK);
        CHECK_STATUS(tensor_conv2d_bias_relu(y, x, w, b, relu, c->stride, c->stride, c->pad,
                                             c->pad, c->dil, c->dil),
                     FX_OK);
        CHECK(same_bits(y, yr), "%s: y %s, x/w %s, bias %s, relu %d, specials %d, %s, %d "
              "threads: fused and unfused differ", c->name, fmt_name(yf), fmt_name(xf),
              bias_kind ? fmt_name(bf) : "none", relu, specials, backend, threads);
        if (relu) { /* the gradient mask from the fused output equals the pre-activation's */
            tensor_t *dy = make(yf, 4, ys, NULL), *d1 = make(yf, 4, ys, NULL),
                     *d2 = make(yf, 4, ys, NULL);
            const int64_t ny = tensor_numel(y);
            float *gv = malloc((size_t)ny * sizeof *gv);
            if (dy && d1 && d2 && gv) {
                fill(r, gv, ny, 1.0f, 0);
                CHECK_STATUS(tensor_from_f32(dy, gv), FX_OK);
                CHECK_STATUS(tensor_relu_backward(d1, dy, u), FX_OK);
                CHECK_STATUS(tensor_relu_backward(d2, dy, y), FX_OK);
                CHECK(same_bits(d1, d2), "%s %s: relu gradient masked by y differs from the "
                      "one masked by the pre-activation", c->name, fmt_name(yf));
            }
            free(gv);
            tensor_free(dy), tensor_free(d1), tensor_free(d2);
        }
    }
    tensor_free(x), tensor_free(w), tensor_free(b), tensor_free(y), tensor_free(yr), tensor_free(u);
    free(xv), free(wv), free(bv);
}

/* Paths that run the three ops: a y view, integer compute into a float y, a DFP16 bias. */
static void fallbacks(test_rng *r)
{
    const fcase *c = &CASES[2];
    const int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->O, c->C, c->K, c->K};
    const int64_t OH = (c->H + 2 - 3) / 2 + 1, OW = (c->W + 2 - 3) / 2 + 1;
    const int64_t ys[4] = {c->N, c->O, OH, OW}, big[4] = {c->N, c->O + 3, OH, OW},
                  bs[3] = {c->O, 1, 1};
    float xv[2 * 5 * 9 * 11], wv[7 * 5 * 3 * 3], bv[7];
    fill(r, xv, 2 * 5 * 9 * 11, 1.0f, 0);
    fill(r, wv, 7 * 5 * 3 * 3, 1.0f, 0);
    fill(r, bv, 7, 2.0f, 0);
    for (int variant = 0; variant < 3; variant++) {
        const fmt_t xf = variant == 1 ? FMT_FLEX16_5 : FMT_BF16;
        tensor_t *x = make(xf, 4, xs, xv), *w = make(xf, 4, ws, wv);
        tensor_t *b = make(variant == 2 ? FMT_DFP16 : FMT_BF16, 3, bs, bv);
        tensor_t *owner = make(FMT_BF16, 4, big, NULL);
        tensor_t *y = variant == 0 ? tensor_view_slice(owner, 1, 1, 1 + c->O, 1)
                                   : make(FMT_BF16, 4, ys, NULL);
        tensor_t *yr = make(FMT_BF16, 4, ys, NULL), *u = make(FMT_BF16, 4, ys, NULL);
        if (x && w && b && y && yr && u) {
            CHECK_STATUS(unfused(yr, u, x, w, b, 1, c), FX_OK);
            CHECK_STATUS(tensor_conv2d_bias_relu(y, x, w, b, 1, 2, 2, 1, 1, 1, 1), FX_OK);
            tensor_t *yc = make(FMT_BF16, 4, ys, NULL); /* a whole copy of the view */
            if (yc) CHECK_STATUS(tensor_copy(yc, y), FX_OK);
            CHECK(yc && same_bits(yc, yr), "fallback variant %d differs from the three ops",
                  variant);
            tensor_free(yc);
        }
        tensor_free(x), tensor_free(w), tensor_free(b), tensor_free(yr), tensor_free(u);
        tensor_free(y); /* a view, or the tensor itself */
        tensor_free(owner);
    }
}

static void bad_arguments(void)
{
    const int64_t xs[4] = {1, 2, 6, 6}, ws[4] = {3, 2, 3, 3}, ys[4] = {1, 3, 4, 4},
                  bs[3] = {3, 1, 1}, bad[3] = {4, 1, 1};
    float xv[72], wv[54], bv[3] = {1, 2, 3};
    for (int i = 0; i < 72; i++) xv[i] = (float)i / 7.0f;
    for (int i = 0; i < 54; i++) wv[i] = (float)(i % 5) - 2.0f;
    tensor_t *x = make(FMT_FP32, 4, xs, xv), *w = make(FMT_FP32, 4, ws, wv);
    tensor_t *b = make(FMT_FP32, 3, bs, bv), *bb = make(FMT_FP32, 3, bad, NULL);
    tensor_t *y = make(FMT_FP32, 4, ys, NULL), *yflex = make(FMT_FLEX16_5, 4, ys, NULL);
    if (!x || !w || !b || !bb || !y || !yflex) return;
    float sentinel[48], after[48];
    for (int i = 0; i < 48; i++) sentinel[i] = 1234.5f + (float)i;
    CHECK_STATUS(tensor_from_f32(y, sentinel), FX_OK);
    CHECK_STATUS(tensor_conv2d_bias_relu(NULL, x, w, b, 1, 1, 1, 0, 0, 1, 1), FX_EINVAL);
    CHECK_STATUS(tensor_conv2d_bias_relu(y, NULL, w, b, 1, 1, 1, 0, 0, 1, 1), FX_EINVAL);
    CHECK_STATUS(tensor_conv2d_bias_relu(y, x, w, bb, 1, 1, 1, 0, 0, 1, 1), FX_ESHAPE);
    CHECK(strstr(flexpoint_last_error(), "[O, 1, 1]") != NULL, "message '%s'",
          flexpoint_last_error());
    CHECK_STATUS(tensor_conv2d_bias_relu(y, x, w, b, 1, 0, 1, 0, 0, 1, 1), FX_EINVAL); /* stride */
    CHECK_STATUS(tensor_conv2d_bias_relu(yflex, x, w, b, 1, 1, 1, 0, 0, 1, 1), FX_EUNSUPPORTED);
    CHECK(strstr(flexpoint_last_error(), "Autoflex") != NULL, "message '%s'",
          flexpoint_last_error());
    CHECK_STATUS(tensor_to_f32(y, after), FX_OK);
    CHECK(memcmp(sentinel, after, sizeof after) == 0, "a failed call changed y");
    tensor_free(x), tensor_free(w), tensor_free(b), tensor_free(bb), tensor_free(y);
    tensor_free(yflex);
}

int main(void)
{
    test_rng r;
    test_rng_seed(&r, 20261123);
    const fmt_t yfs[3] = {FMT_FP32, FMT_FP16, FMT_BF16};
    for (int be = 0; be < flexpoint_backend_count(); be++) {
        if (!flexpoint_backend_available(be)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(be)), FX_OK);
        for (int threads = 1; threads <= 2; threads++) {
            flexpoint_set_num_threads(threads);
            for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++)
                for (int f = 0; f < 3; f++)
                    for (int xk = 0; xk < 2; xk++)
                        for (int bk = 0; bk < 3; bk++)
                            for (int relu = 0; relu < 2; relu++)
                                one(&CASES[k], yfs[f], xk ? FMT_FP32 : yfs[f], bk, relu,
                                    (k + relu) % 2, &r, flexpoint_backend_name(be), threads);
        }
    }
    flexpoint_set_num_threads(0);
    fallbacks(&r);
    bad_arguments();
    return test_finish("test_nn_conv_fused");
}
