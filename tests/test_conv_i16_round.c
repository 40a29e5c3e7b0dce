/* The direct integer forward convolutions with their sums rounded in the tiles' epilogue
 * (fx_i16_fwd_direct_avx2_round on AVX2, fx_i16_fwd_direct_round on AVX512_VNNI;
 * src/flex/conv_i16.h) against the sums the same kernel would store (fx_i16_fwd_direct_avx2,
 * fx_i16_fwd_direct) rounded by the portable fx_flex_quant_i64_scalar image by image in NCHW
 * order: every mantissa and every per-image statistic, bit for bit, at one shift and at two
 * (the second into its own mantissas and statistics), on ResNet-20's and the CNN's conv1
 * shapes, odd channel counts, output channels that fill no whole vector, rows of 7 to 256
 * pixels (every tile width of both kernels, rows of fewer than 8 pixels (the AVX2 kernel's
 * scalar loop), rows whose last 8-pixel transpose overlaps the one before it, the AVX2 row
 * buffer's full width), stride 2, and a 5 x 5 layer of 8 channels (the CNN's conv1 as the
 * convolution folds it has 5 x 1 taps; tensor_conv2d takes that path in test_nn_conv); on
 * normal and small data. A shift at which some sum saturates leaves that rounding unmade
 * (whole without it) and every image's statistics with the exact largest |sum| and a
 * saturation, also the images before the one that saturated; with two shifts the other stays
 * whole, either way round. Declined (0, nothing relied on): shifts off the kernel's fast route
 * (AVX2: outside [1, 32]; AVX-512: outside [1, 47]), on AVX2 rows above 256 pixels and more than
 * FX_I16_ROUND_MAX_K products an output (the AVX-512 kernel takes both), and data the kernel
 * itself declines. At the op, tensor_conv2d gives the same mantissas and statistics with the
 * route on and off on each level, and the route ran. Each kernel skips where the CPU lacks
 * it. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "flex/conv_i16.h"
#include "flex/conv_i16_direct.h"
#include "flex/flex_kernels.h"
#include "flex/gemm_i16.h" /* fx_gemm_i16_set_amx_auto */
#include "nn/im2col.h"
#include "testutil.h"
#include "dgrad_round_check.h"

#include <stdlib.h>
#include <string.h>

typedef struct shape {
    int64_t C, O, H, W, K, pad, stride;
} shape;

static fx_conv_geom geom_of(const shape *s, int64_t N)
{
    fx_conv_geom g = {N, s->C, s->H, s->W, s->O, s->K, s->K, 0, 0, s->stride, s->stride,
                      s->pad, s->pad, 1, 1};
    g.OH = (s->H + 2 * s->pad - s->K) / s->stride + 1;
    g.OW = (s->W + 2 * s->pad - s->K) / s->stride + 1;
    return g;
}

static int same_stats(const fx_qstats *a, const fx_qstats *b)
{
    return a->saturated == b->saturated && a->nonfinite == b->nonfinite &&
           a->underflow == b->underflow && memcmp(&a->max_abs_in, &b->max_abs_in, 8) == 0 &&
           a->max_abs_out == b->max_abs_out;
}

/* a kernel that stores the exact sums and its rounding twin, with the limits of the twin */
typedef struct kernel_pair {
    const char *name;
    int (*stored)(const fx_conv_geom *, const int16_t *, int64_t, const uint32_t *, uint32_t *,
                  int64_t *, int, uint64_t *);
    int (*round)(const fx_conv_geom *, const int16_t *, int64_t, const uint32_t *, uint32_t *,
                 int, int16_t *, fx_qstats *, int, int16_t *, fx_qstats *);
    int max_shift;   /* the last shift on its fast route */
    int avx2_limits; /* 1: rows of at most 256 pixels, at most FX_I16_ROUND_MAX_K products */
} kernel_pair;

static const kernel_pair avx2_pair = {"avx2", fx_i16_fwd_direct_avx2,
                                      fx_i16_fwd_direct_avx2_round, 32, 1};
static const kernel_pair avx512_pair = {"avx512", fx_i16_fwd_direct, fx_i16_fwd_direct_round,
                                        47, 0};

/* the kernel's stored sums of the chunk, rounded per image in NCHW order at shift: the
 * mantissas and statistics the rounding epilogue must give */
static void reference(const fx_conv_geom *g, int64_t nb, const int64_t *sums, int shift,
                      int16_t *want, fx_qstats *st)
{
    const int64_t P = g->OH * g->OW, O = g->O;
    int64_t *t = malloc(sizeof(int64_t) * (size_t)(P * O));
    for (int64_t n = 0; n < nb; n++) {
        for (int64_t o = 0; o < O; o++)
            for (int64_t p = 0; p < P; p++) t[o * P + p] = sums[(n * P + p) * O + o];
        fx_flex_quant_i64_scalar(t, want + n * O * P, O * P, shift, &st[n]);
    }
    free(t);
}

/* data: 0 normal (about +-3000), 1 small (+-40), 2 full scale (the kernel declines it), 3 small for
 * the first `small` values and normal after them (a later image saturates first), 4 large (+-12000:
 * sums beyond int32, so the AVX2 epilogue's int32 route misses on some pixels), 5 coarse (normal
 * values that are multiples of 2^8; with data 5 weights, multiples of 2^7: the products are
 * multiples of 2^15, so every sum's low 16 bits are 0 or 2^15, the ties at shift 16 and the borrows
 * above it of the AVX-512 epilogue's int32 route), 6 nearly constant (2000 plus a little noise;
 * with data 6 weights, 300 plus a little: the sums of a layer's interior pixels share their upper
 * half, so the image's largest |sum| lies in a later tile than an earlier one's with the same upper
 * half, which the int32 route's bound must not skip), 7 very large (+-25000, clipped: sums beyond
 * 2^31, which saturate at shift 16) */
static void fill_from(test_rng *r, int16_t *v, int64_t n, int data, int64_t small)
{
    for (int64_t i = 0; i < n; i++) {
        const double z = test_rng_normal(r);
        const double a = data == 6   ? (small ? 2000.0 + 2.0 * z : 300.0 + z)
                         : data == 7 ? 25000.0 * z
                         : data == 3 ? (i < small ? 40.0 : 3000.0) * z
                         : data == 4 ? 12000.0 * z
                         : data == 0 ? 3000.0 * z
                         : data == 1 ? 40.0 * z
                                     : 32767.0;
        const double c = a > 32767.0 ? 32767.0 : a < -32767.0 ? -32767.0 : a;
        v[i] = (int16_t)(data == 2   ? (i % 2 ? 32767 : -32767)
                         : data == 5 ? (small ? 256 : 128) * (int64_t)(c / 256)
                                     : (int64_t)c);
    }
}

static void fill(test_rng *r, int16_t *v, int64_t n, int data) { fill_from(r, v, n, data, 0); }

/* one shape, data kind and pair of shifts (shift2 0: one rounding); expect_whole the roundings
 * the call must return (-1: whatever the reference says, checked against it) */
static void check(const kernel_pair *kp, const shape *s, int64_t nb, int data, int shift,
                  int shift2, int expect_whole, test_rng *r)
{
    const fx_conv_geom g = geom_of(s, nb);
    const int64_t P = g.OH * g.OW, KK = s->K * s->K, nx = nb * s->C * s->H * s->W;
    int16_t *x = malloc(sizeof(int16_t) * (size_t)nx);
    int16_t *w = malloc(sizeof(int16_t) * (size_t)(s->O * s->C * KK));
    fill_from(r, x, nx, data, s->C * s->H * s->W); /* data 3: image 0 small */
    if (data == 5 || data == 6)
        fill_from(r, w, s->O * s->C * KK, data, 0); /* the weights' form of data 5 and 6 */
    else
        fill(r, w, s->O * s->C * KK, data == 2 ? 2 : 0);
    const int64_t wn = fx_i16_fwd_direct_weights_numel(&g), sn = fx_i16_fwd_direct_scratch(&g, nb);
    uint32_t *wq = aligned_alloc(64, (size_t)((wn * 4 + 63) / 64 * 64));
    uint32_t *scr = malloc(sizeof(uint32_t) * (size_t)sn);
    fx_i16_fwd_direct_pack_weights(&g, w, wq);
    int64_t *sums = malloc(sizeof(int64_t) * (size_t)(nb * P * s->O));
    uint64_t ymax;
    const int stored = kp->stored(&g, x, nb, wq, scr, sums, 1, &ymax);
    const int two = shift2 != 0;
    const int64_t ny = nb * s->O * P;
    const size_t ybytes = sizeof(int16_t) * (size_t)ny;
    int16_t *want = malloc(ybytes), *got = malloc(ybytes), *want2 = malloc(ybytes);
    int16_t *got2 = malloc(ybytes);
    fx_qstats *sw = calloc((size_t)nb, sizeof *sw), *sg = calloc((size_t)nb, sizeof *sg);
    fx_qstats *sw2 = calloc((size_t)nb, sizeof *sw2), *sg2 = calloc((size_t)nb, sizeof *sg2);
    memset(got, 0x33, ybytes);
    memset(got2, 0x33, ybytes);
    const int whole = kp->round(&g, x, nb, wq, scr, shift, got, sg, two ? shift2 : 0,
                                two ? got2 : NULL, two ? sg2 : NULL);
    char what[176];
    snprintf(what, sizeof what,
             "%s: C%lld O%lld %lldx%lld K%lld s%lld nb %lld data %d shifts %d/%d", kp->name,
             (long long)s->C, (long long)s->O, (long long)s->H, (long long)s->W, (long long)s->K,
             (long long)s->stride, (long long)nb, data, shift, shift2);
    if (!stored) {
        CHECK(whole == 0, "%s: the kernel declined the data, the rounding returned %d", what,
              whole);
        goto out;
    }
    reference(&g, nb, sums, shift, want, sw);
    if (two) reference(&g, nb, sums, shift2, want2, sw2);
    int ref_whole = 1, ref_whole2 = 1;
    for (int64_t n = 0; n < nb; n++) {
        ref_whole &= sw[n].saturated == 0;
        if (two) ref_whole2 &= sw2[n].saturated == 0;
    }
    const int want_whole = expect_whole >= 0 ? expect_whole
                                             : (ref_whole ? FX_I16_ROUND_FIRST : 0) |
                                                   (two && ref_whole2 ? FX_I16_ROUND_SECOND : 0);
    CHECK(whole == want_whole, "%s: returned %d, expected %d", what, whole, want_whole);
    if (whole & FX_I16_ROUND_FIRST) {
        int64_t bad = -1;
        for (int64_t i = 0; i < ny && bad < 0; i++)
            if (got[i] != want[i]) bad = i;
        CHECK(bad < 0, "%s: mantissa %lld is %d, the stored sums give %d", what, (long long)bad,
              bad < 0 ? 0 : got[bad], bad < 0 ? 0 : want[bad]);
        for (int64_t n = 0; n < nb; n++)
            CHECK(same_stats(&sg[n], &sw[n]),
                  "%s: image %lld statistics (sat %lld/%lld uf %lld/%lld max %.17g/%.17g "
                  "out %d/%d)", what, (long long)n, (long long)sg[n].saturated,
                  (long long)sw[n].saturated, (long long)sg[n].underflow,
                  (long long)sw[n].underflow, sg[n].max_abs_in, sw[n].max_abs_in,
                  sg[n].max_abs_out, sw[n].max_abs_out);
    } else if (whole) {
        /* broken: the exact largest |sum| and a saturation, for every image */
        for (int64_t n = 0; n < nb; n++)
            CHECK(sg[n].saturated > 0 && sg[n].max_abs_in == sw[n].max_abs_in,
                  "%s: broken rounding's image %lld statistics", what, (long long)n);
    }
    if (two && (whole & FX_I16_ROUND_SECOND)) {
        CHECK(memcmp(got2, want2, ybytes) == 0,
              "%s: second rounding's mantissas differ", what);
        for (int64_t n = 0; n < nb; n++)
            CHECK(same_stats(&sg2[n], &sw2[n]), "%s: image %lld second statistics", what,
                  (long long)n);
    } else if (two && whole) {
        for (int64_t n = 0; n < nb; n++)
            CHECK(sg2[n].saturated > 0 && sg2[n].max_abs_in == sw2[n].max_abs_in,
                  "%s: broken second rounding's image %lld statistics", what, (long long)n);
    }
out:
    free(x);
    free(w);
    free(wq);
    free(scr);
    free(sums);
    free(want);
    free(got);
    free(want2);
    free(got2);
    free(sw);
    free(sg);
    free(sw2);
    free(sg2);
}

static void kernel_cases(const kernel_pair *kp)
{
    static const shape shapes[] = {
        {16, 16, 32, 32, 3, 1, 1}, /* ResNet-20 stage 1 */
        {32, 32, 16, 16, 3, 1, 1}, {64, 64, 8, 8, 3, 1, 1}, {16, 32, 32, 32, 3, 1, 2},
        {8, 32, 28, 28, 5, 2, 1},  /* the CNN's conv1 as folded: 5 channels padded to 8 */
        {5, 24, 9, 7, 3, 1, 1},    /* odd C, O not a multiple of 16, rows of 7 */
        {13, 40, 11, 14, 3, 1, 1}, /* rows of 14: two transposes, at pixels 0 and 6 */
        {24, 17, 6, 20, 3, 0, 1},  {9, 16, 10, 30, 1, 0, 1},
        {16, 16, 17, 17, 3, 1, 1}, /* rows of 17: the AVX-512 kernel's 9-pixel tiles */
    };
    test_rng r;
    test_rng_seed(&r, 2024);
    const int ms = kp->max_shift;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int data = 0; data < 2; data++) {
            const int64_t nb = 1 + (int64_t)(i % 3);
            /* normal data: sums up to about 2^26 C K^2; small data far below */
            const int lo = data ? 1 : 8, hi = data ? 9 : 16;
            check(kp, &shapes[i], nb, data, lo, 0, -1, &r);
            check(kp, &shapes[i], nb, data, hi, 0, -1, &r);
            check(kp, &shapes[i], nb, data, hi, hi + 1, -1, &r);
            check(kp, &shapes[i], nb, data, ms - 1, ms, -1, &r);
            /* saturating at the first shift (broken), whole at the second */
            check(kp, &shapes[i], nb, data, 1, 24, data ? -1 : FX_I16_ROUND_SECOND, &r);
        }
    /* image 0 whole at shift 8 and a later one saturating: every image's statistics broken,
     * the second rounding (24) whole; and the first whole with the second broken */
    const shape rn = {16, 16, 32, 32, 3, 1, 1};
    check(kp, &rn, 3, 3, 8, 24, FX_I16_ROUND_SECOND, &r);
    check(kp, &rn, 2, 0, 24, 1, FX_I16_ROUND_FIRST, &r);
    const shape row256 = {8, 16, 3, 256, 3, 1, 1}; /* the AVX2 row buffer's full width */
    check(kp, &row256, 1, 0, 16, 0, -1, &r);
    /* declines */
    check(kp, &rn, 1, 0, 0, 0, 0, &r);
    check(kp, &rn, 1, 0, ms + 1, 0, 0, &r);
    check(kp, &rn, 1, 0, 12, ms + 8, 0, &r);
    /* rows above 256 pixels, and 648 products an output (at a shift at which nothing
     * saturates): declined on AVX2, taken on AVX-512 */
    const shape wide = {8, 16, 2, 300, 3, 1, 1}, deep = {72, 16, 6, 6, 3, 1, 1};
    check(kp, &wide, 1, 0, 12, 0, kp->avx2_limits ? 0 : -1, &r);
    check(kp, &deep, 1, 0, 24, 0, kp->avx2_limits ? 0 : FX_I16_ROUND_FIRST, &r);
    const shape at_gate = {64, 16, 6, 6, 3, 1, 1}; /* 576: taken */
    check(kp, &at_gate, 1, 0, 24, 0, FX_I16_ROUND_FIRST, &r);
    /* full scale: every segment too large for a chain, so the kernel declines the chunk (the
     * AVX2 one takes a few such segments with a fold per pair; test_conv_i16_direct) */
    check(kp, &rn, 1, 2, 12, 0, 0, &r);
}

/* The epilogue's int32 route (pixels whose sums fit int32, at shifts up to 18) against the
 * stored sums, with the route on and off: at its last shift, 18 (where the bound is clamped to
 * 2^32 - 1), beside 19 (off the route: one of the two shifts is enough to keep a tile on int64
 * lanes), and on large data whose sums miss it on some pixels, so that tiles switch routes
 * part way; the counters show that it rounded pixels and that checks missed. */
static void round32_cases(void)
{
    static const shape shapes[] = {
        {16, 16, 32, 32, 3, 1, 1}, {32, 32, 16, 16, 3, 1, 1}, {64, 64, 8, 8, 3, 1, 1},
        {5, 24, 9, 7, 3, 1, 1},    {13, 40, 11, 14, 3, 1, 1},
    };
    test_rng r;
    test_rng_seed(&r, 77);
    for (int on = 1; on >= 0; on--) {
        fx_i16_fwd_direct_round32_set_enabled(on);
        const long long px0 = fx_i16_fwd_direct_round32_pixels();
        const long long miss0 = fx_i16_fwd_direct_round32_misses();
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            const int64_t nb = 1 + (int64_t)(i % 2);
            check(&avx2_pair, &shapes[i], nb, 0, 18, 0, -1, &r);
            check(&avx2_pair, &shapes[i], nb, 0, 17, 18, -1, &r);
            check(&avx2_pair, &shapes[i], nb, 0, 18, 19, -1, &r);
            check(&avx2_pair, &shapes[i], nb, 4, 17, 0, -1, &r);
            check(&avx2_pair, &shapes[i], nb, 4, 18, 17, -1, &r);
            check(&avx2_pair, &shapes[i], nb, 4, 19, 0, -1, &r);
        }
        const long long px = fx_i16_fwd_direct_round32_pixels() - px0;
        const long long miss = fx_i16_fwd_direct_round32_misses() - miss0;
        if (on) {
            CHECK(px > 0, "the int32 route rounded no pixel");
            CHECK(miss > 0, "no tile's int32 check missed on large data");
        } else {
            CHECK(px == 0 && miss == 0, "switched off, the int32 route still ran (%lld, %lld)",
                  px, miss);
        }
    }
    fx_i16_fwd_direct_round32_set_enabled(1);
}

/* The AVX-512 epilogue's int32 route (shifts 16-46) against the stored sums, with the route
 * on and off: at 16 (its carry form), 17-20 and 40-46 (the shift form), beside 15 (off the
 * route, so that a pair of shifts takes the int64 lanes), on normal, large, coarse and nearly
 * constant data (data 5: the ties at 16, the borrows above it; data 6: the exact largest |sum|
 * in a later tile), and a saturating chunk; the counter shows that it ran. */
static void round16_cases(void)
{
    static const shape shapes[] = {
        {16, 16, 32, 32, 3, 1, 1}, {32, 32, 16, 16, 3, 1, 1}, {64, 64, 8, 8, 3, 1, 1},
        {5, 24, 9, 7, 3, 1, 1},    {13, 40, 11, 14, 3, 1, 1}, {16, 16, 17, 17, 3, 1, 1},
    };
    static const int data[4] = {0, 4, 5, 6};
    test_rng r;
    test_rng_seed(&r, 78);
    for (int on = 1; on >= 0; on--) {
        fx_i16_fwd_direct_round16_set_enabled(on);
        const long long c0 = fx_i16_fwd_direct_round16_chunks();
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
            for (int d = 0; d < 4; d++) {
                const int64_t nb = 1 + (int64_t)(i % 2);
                check(&avx512_pair, &shapes[i], nb, data[d], 16, 0, -1, &r);
                check(&avx512_pair, &shapes[i], nb, data[d], 17, 16, -1, &r);
                check(&avx512_pair, &shapes[i], nb, data[d], 18, 19, -1, &r);
                check(&avx512_pair, &shapes[i], nb, data[d], 15, 17, -1, &r);
                check(&avx512_pair, &shapes[i], nb, data[d], 20, 0, -1, &r);
                check(&avx512_pair, &shapes[i], nb, data[d], 40, 46, -1, &r);
            }
        /* sums beyond 2^31: saturating at 16 (broken), whole at 24, either way round */
        const shape rn = {16, 16, 32, 32, 3, 1, 1};
        check(&avx512_pair, &rn, 2, 7, 16, 24, FX_I16_ROUND_SECOND, &r);
        check(&avx512_pair, &rn, 2, 7, 24, 16, FX_I16_ROUND_FIRST, &r);
        const long long ran = fx_i16_fwd_direct_round16_chunks() - c0;
        if (on)
            CHECK(ran > 0, "the int32 route rounded no chunk");
        else
            CHECK(ran == 0, "switched off, the int32 route still ran (%lld chunks)", ran);
    }
    fx_i16_fwd_direct_round16_set_enabled(1);
}

/* tensor_conv2d on one level with the route on and off: the same mantissas and statistics;
 * the route ran */
static void op_on_off(const char *level)
{
    CHECK_STATUS(flexpoint_set_backend(level), FX_OK);
    /* the register-tile kernel, not the AMX one, where the CPU has AMX */
    const int amx_auto_prev = fx_gemm_i16_amx_auto();
    fx_gemm_i16_set_amx_auto(0);
    static const fmt_t fmts[2] = {FMT_FLEX16_5, FMT_DFP16};
    const int64_t xs[4] = {6, 16, 12, 12}, ws[4] = {24, 16, 3, 3}, ys[4] = {6, 24, 12, 12};
    const int64_t nx = 6 * 16 * 144, nw = 24 * 16 * 9, ny = 6 * 24 * 144;
    float *xv = malloc(sizeof(float) * (size_t)nx), *wv = malloc(sizeof(float) * (size_t)nw);
    int16_t *raw[2];
    raw[0] = malloc(sizeof(int16_t) * (size_t)ny);
    raw[1] = malloc(sizeof(int16_t) * (size_t)ny);
    for (int fi = 0; fi < 2; fi++) {
        double st[2][4];
        long long calls = 0;
        for (int on = 1; on >= 0; on--) {
            test_rng r;
            test_rng_seed(&r, 77);
            fx_i16_fwd_direct_round_set_enabled(on);
            tensor_t *x = tensor_new(fmts[fi], 4, xs), *w = tensor_new(fmts[fi], 4, ws);
            tensor_t *y = tensor_new(fmts[fi], 4, ys);
            const long long c0 = fx_i16_fwd_direct_round_whole();
            for (int rep = 0; rep < 3; rep++) { /* later writes have a guessed exponent */
                for (int64_t i = 0; i < nx; i++) xv[i] = (float)test_rng_normal(&r);
                for (int64_t i = 0; i < nw; i++) wv[i] = (float)(0.2 * test_rng_normal(&r));
                CHECK_STATUS(tensor_from_f32(x, xv), FX_OK);
                CHECK_STATUS(tensor_from_f32(w, wv), FX_OK);
                CHECK_STATUS(tensor_conv2d(y, x, w, 1, 1, 1, 1, 1, 1), FX_OK);
            }
            if (on) calls = fx_i16_fwd_direct_round_whole() - c0;
            CHECK_STATUS(tensor_get_raw(y, raw[on]), FX_OK);
            CHECK_STATUS(tensor_stat(y, "exp", &st[on][0]), FX_OK);
            CHECK_STATUS(tensor_stat(y, "saturated", &st[on][1]), FX_OK);
            CHECK_STATUS(tensor_stat(y, "underflow", &st[on][2]), FX_OK);
            CHECK_STATUS(tensor_stat(y, "true_max", &st[on][3]), FX_OK);
            tensor_free(x);
            tensor_free(w);
            tensor_free(y);
        }
        fx_i16_fwd_direct_round_set_enabled(1);
        CHECK(memcmp(raw[0], raw[1], sizeof(int16_t) * (size_t)ny) == 0 &&
                  memcmp(st[0], st[1], sizeof st[0]) == 0,
              "%s %s: tensor_conv2d differs with the rounding epilogue on and off", level,
              fmt_name(fmts[fi]));
        CHECK(calls > 0, "%s %s: the rounding epilogue never ran whole", level,
              fmt_name(fmts[fi]));
    }
    fx_gemm_i16_set_amx_auto(amx_auto_prev);
    free(xv);
    free(wv);
    free(raw[0]);
    free(raw[1]);
}

/* The stride-2 input gradient by phases rounded in the register tiles' epilogue
 * (fx_i16_dgrad_s2_round on AVX512_VNNI, fx_i16_dgrad_s2_round_avx2 on AVX2) against the int64
 * phases (dgrad_round_check.h's shapes; dy of 64 channels takes the phases only on this route),
 * on the level with the AMX kernel off, at one thread and two */
static void dgrad_cases(const char *level)
{
    CHECK_STATUS(flexpoint_set_backend(level), FX_OK);
    const int amx_auto_prev = fx_gemm_i16_amx_auto();
    fx_gemm_i16_set_amx_auto(0);
    uint64_t seed = 500;
    for (int threads = 1; threads <= 2; threads++) {
        flexpoint_set_num_threads(threads);
        check_dgrad_round_shapes(fx_i16_fwd_direct_round_set_enabled, &seed);
    }
    /* dy of 64 channels, dx's first FLEX16_5 write (no exponent to guess, so no rounding to
     * make in the epilogue): col2im, not the phases on int64 sums, which lose to it there */
    const int64_t dys[4] = {2, 64, 8, 8}, ws[4] = {64, 32, 3, 3}, dxs[4] = {2, 32, 16, 16};
    tensor_t *dy = tensor_new(FMT_FLEX16_5, 4, dys), *w = tensor_new(FMT_FLEX16_5, 4, ws);
    tensor_t *dx = tensor_new(FMT_FLEX16_5, 4, dxs);
    const int nv = 64 * 32 * 9; /* w's values; dy takes the first 2 * 64 * 64 */
    float *v = malloc(sizeof(float) * nv);
    test_rng r;
    test_rng_seed(&r, 9);
    for (int i = 0; i < nv; i++) v[i] = (float)test_rng_normal(&r);
    v[0] = 100.0f; /* the others' mantissas small: data the kernels take */
    CHECK_STATUS(tensor_from_f32(dy, v), FX_OK);
    CHECK_STATUS(tensor_from_f32(w, v), FX_OK);
    const int64_t runs = fx_conv_dgrad_phases_runs(), declined = fx_i16_fwd_direct_declined();
    CHECK_STATUS(tensor_conv2d_backward_input(dx, dy, w, 2, 2, 1, 1, 1, 1), FX_OK);
    CHECK(fx_conv_dgrad_phases_runs() == runs,
          "%s: a first write of 64 channels without an exponent to guess ran the int64 phases",
          level);
    /* its later writes have one: the phases, rounded in the epilogue */
    const int64_t rounded = fx_conv_dgrad_phases_rounded();
    for (int k = 0; k < 12; k++)
        CHECK_STATUS(tensor_conv2d_backward_input(dx, dy, w, 2, 2, 1, 1, 1, 1), FX_OK);
    CHECK(fx_conv_dgrad_phases_rounded() > rounded && fx_i16_fwd_direct_declined() == declined,
          "%s: later writes of 64 channels: %lld chunks rounded in the epilogue, %lld declined",
          level, (long long)(fx_conv_dgrad_phases_rounded() - rounded),
          (long long)(fx_i16_fwd_direct_declined() - declined));
    free(v);
    tensor_free(dy);
    tensor_free(w);
    tensor_free(dx);
    flexpoint_set_num_threads(1);
    fx_gemm_i16_set_amx_auto(amx_auto_prev);
}

int main(void)
{
    const fx_backend *avx2 = fx_backend_get(FX_BACKEND_AVX2);
    const fx_backend *avx512 = fx_backend_get(FX_BACKEND_AVX512);
    const int has_avx2 = avx2 && avx2->available;
    const int has_vnni = avx512 && avx512->available && avx512->conv.i16_fwd_round;
    if (!has_avx2 && !has_vnni) {
        printf("test_conv_i16_round: neither AVX2 nor AVX512_VNNI here\n");
        return 77;
    }
    if (has_avx2) {
        kernel_cases(&avx2_pair);
        round32_cases();
        op_on_off("avx2");
        dgrad_cases("avx2");
    }
    if (has_vnni) {
        kernel_cases(&avx512_pair);
        round16_cases();
        op_on_off("avx512");
        dgrad_cases("avx512");
    } else {
        printf("test_conv_i16_round: no AVX512_VNNI here; its kernel not run\n");
    }
    return test_finish("test_conv_i16_round");
}
