/* Pooling (NCHW): max pool with argmax, average pool (count_include_pad), global average pool,
 * and their gradients.
 *
 * Compute rule: the first input decides (include/flexpoint.h).
 *   FLEX16_5/DFP16: integer only.
 *     - max pool compares int16 mantissas (exact) and stages the winners as int16 at the input
 *       exponent (fx_write_i16), so the write keeps them exactly unless the output's exponent
 *       must differ.
 *     - its gradient scatters dy's mantissas into an int16 stage while no two nonzero ones
 *       meet at one input; where they do (overlapping windows), it scatter-adds into an int64
 *       stage instead (exact).
 *     - average pools sum in int64 (exact) and divide by the window count with
 *       pool_divide_exact: a power-of-two count only moves the exponent; any other count gives
 *       a round-to-odd quotient with 51 to 53 significant bits, whose one rounding in the write
 *       is then the correctly rounded average. So there is no reciprocal error at all: the
 *       result equals the exact average rounded once (ties to even) to the output exponent.
 *   other formats: fp32 values; max pool compares them (NaN wins, the first NaN in scan order,
 *   so that NaN propagates), sums add in fp32 and are divided by the count in fp32 (error
 *   gamma_{m-1} sum|x| / count + one rounding, m = terms), one rounding on write.
 *
 * Window: rows oh*sh - ph .. + kh - 1 (likewise columns), clipped to the input. Padding is at
 * most half the window (as in PyTorch), so every window holds at least one input element and
 * max pooling never selects padding. Average pools divide by kh*kw (count_include_pad; without
 * ceil mode every window lies inside the padded input, so the count is the same everywhere).
 *
 * Argmax: per output element the flat index into x (row-major over x's logical shape), int32.
 * The backward pass requires each index to lie in its own (n, c) plane, which is what the
 * forward pass produces; this lets threads split planes without ever adding to the same
 * element, and keeps the order of additions fixed.
 */
#include "../core/compose.h"
#include "../core/half_bits.h"
#include "nn_ops.h"
#include "../gpu/gpu_nn_math.h" /* fx_pool_geom, the exact average: shared with the device */
#include "pool_own.h"

#include <math.h>
#include <string.h>

/* Below this many elements touched, pooling runs on one thread. */
#define FX_POOL_PAR_MIN ((int64_t)1 << 15)

#ifdef _OPENMP
#define FX_POOL_PARALLEL_FOR                                                                   \
    _Pragma("omp parallel for schedule(static) num_threads(nt) if (nt > 1)")
#else
#define FX_POOL_PARALLEL_FOR
#endif

/* The geometry is shared with the device implementation (src/gpu/gpu_nn_math.h). */
typedef fx_pool_geom pool_geom;

/* The request of a pooling op on (out, in), named as in its public function. */
static fx_op_args pool_args(int op, const char *func, tensor_t *out, const char *on,
                            const tensor_t *in, const char *in_name)
{
    fx_op_args a = {.op = op, .func = func, .nt = 2, .t = {out, in}, .tn = {on, in_name}};
    a.u.pool.out = out;
    a.u.pool.in = in;
    return a;
}

/* elements * window, saturating (only used to decide whether threads are worth it) */
static int64_t pool_work(int64_t elements, int64_t window)
{
    return window > 0 && elements > INT64_MAX / window ? INT64_MAX : elements * window;
}

static int pool_threads(int64_t work, int64_t units)
{
    int nt = work >= FX_POOL_PAR_MIN ? flexpoint_num_threads() : 1;
    if (nt > units) nt = units > 1 ? (int)units : 1;
    return nt < 1 ? 1 : nt;
}

/* ---- validation ---------------------------------------------------------------------------- */

static int pool_params_check(const char *func, int kh, int kw, int sh, int sw, int ph, int pw)
{
    if (kh < 1 || kw < 1)
        return fx_error(FX_EINVAL, func, "kernel (%d, %d) must be >= 1", kh, kw);
    if (sh < 1 || sw < 1)
        return fx_error(FX_EINVAL, func, "stride (%d, %d) must be >= 1", sh, sw);
    if (ph < 0 || pw < 0)
        return fx_error(FX_EINVAL, func, "padding (%d, %d) must be >= 0", ph, pw);
    if (ph > kh / 2 || pw > kw / 2)
        return fx_error(FX_EINVAL, func, "padding (%d, %d) must be at most half the kernel "
                        "(%d, %d)", ph, pw, kh, kw);
    return FX_OK;
}

static int pool_4d(const char *func, const tensor_t *t, const char *name)
{
    char b[160];
    if (t->ndim != 4)
        return fx_error(FX_ESHAPE, func, "%s must be 4-D (N, C, H, W), got shape %s", name,
                        fx_shape_str(t, b, sizeof b));
    return FX_OK;
}

/* x: [N,C,H,W] and y: [N,C,OH,OW] under the window parameters. */
static int pool_geometry(const char *func, const tensor_t *x, const char *xn, const tensor_t *y,
                         const char *yn, int kh, int kw, int sh, int sw, int ph, int pw,
                         pool_geom *g)
{
    if (!x || !y) return fx_error(FX_EINVAL, func, "%s is NULL", !x ? xn : yn);
    int rc = pool_params_check(func, kh, kw, sh, sw, ph, pw);
    if (!rc) rc = pool_4d(func, x, xn);
    if (!rc) rc = pool_4d(func, y, yn);
    if (rc) return rc;
    char b1[160], b2[160];
    *g = (pool_geom){.N = x->shape[0], .C = x->shape[1], .H = x->shape[2], .W = x->shape[3],
                     .KH = kh, .KW = kw, .sh = sh, .sw = sw, .ph = ph, .pw = pw};
    if (g->N == 0 || g->C == 0)
        return fx_error(FX_ESHAPE, func, "empty batch or no channels: %s.shape=%s", xn,
                        fx_shape_str(x, b1, sizeof b1));
    if (g->H + 2 * ph < kh || g->W + 2 * pw < kw)
        return fx_error(FX_ESHAPE, func, "the window %dx%d does not fit %s.shape=%s with "
                        "padding (%d, %d)", kh, kw, xn, fx_shape_str(x, b1, sizeof b1), ph, pw);
    g->OH = (g->H + 2 * ph - kh) / sh + 1;
    g->OW = (g->W + 2 * pw - kw) / sw + 1;
    if (y->shape[0] != g->N || y->shape[1] != g->C || y->shape[2] != g->OH ||
        y->shape[3] != g->OW)
        return fx_error(FX_ESHAPE, func, "%s.shape=%s, but %s.shape=%s with window (%d, %d), "
                        "stride (%d, %d), padding (%d, %d) gives [%lld, %lld, %lld, %lld]", yn,
                        fx_shape_str(y, b1, sizeof b1), xn, fx_shape_str(x, b2, sizeof b2), kh,
                        kw, sh, sw, ph, pw, (long long)g->N, (long long)g->C, (long long)g->OH,
                        (long long)g->OW);
    return FX_OK;
}

/* Window of output (oh, ow) clipped to the input: rows [*h0, *h1), columns [*w0, *w1). */
static void pool_window(const pool_geom *g, int64_t oh, int64_t ow, int64_t *h0, int64_t *h1,
                        int64_t *w0, int64_t *w1)
{
    const int64_t hs = oh * g->sh - g->ph, ws = ow * g->sw - g->pw;
    *h0 = hs < 0 ? 0 : hs;
    *h1 = hs + g->KH < g->H ? hs + g->KH : g->H;
    *w0 = ws < 0 ? 0 : ws;
    *w1 = ws + g->KW < g->W ? ws + g->KW : g->W;
}

/* ---- shared machinery ---------------------------------------------------------------------- */

static int pool_operand(const tensor_t *t, int int_compute, fx_operand *o, fx_scratch *s,
                        const char *func)
{
    return fx_operand_make(t, int_compute, int_compute ? FMT_DFP16 : FMT_FP32, 0, 0, NULL, o, s,
                           func);
}

static void *pool_alloc(fx_scratch *s, int64_t n, size_t sz, int *rc, const char *func)
{
    if (*rc) return NULL;
    void *p = fx_scratch_alloc(s, n > 0 ? n : 1, sz);
    if (!p)
        *rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld elements of %zu bytes",
                       (long long)n, sz);
    return p;
}

/* v[i] <- v[i] / count for exact int64 values at exponent *e, so that the write's one rounding
 * (to any output exponent at least 2 above the new *e, see below) is the correctly rounded
 * quotient; *e is updated.
 *   - count = 2^L: the quotient is exact, v stays and *e drops by L.
 *   - otherwise, with b = bitlen(max|v|) and L = floor(log2 count), k = 53 - b + L: every
 *     |v| * 2^k / count < 2^53, and the largest is >= 2^51. Each quotient is truncated and its
 *     lowest bit set when the remainder is nonzero (round to odd). A later round-to-nearest at
 *     a grid 4 or more times coarser is then exactly the correct rounding of the true quotient
 *     (the odd value sits strictly on the same side of every rounding midpoint as the true
 *     value, and it is exact when the true value is on the grid). The write picks its
 *     exponent from the largest value (>= 2^51 units, so at least 37 bits coarser; an
 *     Autoflex exponent predicted up to 35 below that still qualifies, and one further below
 *     would saturate the largest value anyway), and values below 2^53 convert to double
 *     exactly, so float outputs are rounded once as well.
 * Callers pass sums of at most `count` int16 mantissas, |v| < 2^15 count, so k >= 37 > 0. The
 * long division (fx_udiv_round_odd) keeps the shifted remainder below 2^63. */
static void pool_divide_exact(int64_t *v, int64_t n, int64_t count, int *e)
{
    const int L = fx_bitlen_u64((uint64_t)count) - 1;
    if (((uint64_t)count & ((uint64_t)count - 1)) == 0) {
        *e -= L;
        return;
    }
    uint64_t mx = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t a = v[i] < 0 ? (uint64_t)0 - (uint64_t)v[i] : (uint64_t)v[i];
        if (a > mx) mx = a;
    }
    if (mx == 0) return;
    const uint64_t cnt = (uint64_t)count;
    const int k = fx_div_odd_shift(mx, cnt); /* 53 - bitlen(mx) + L, shared with the device */
    for (int64_t i = 0; i < n; i++) v[i] = fx_div_odd_signed(v[i], cnt, k); /* |q| < 2^53 */
    *e -= k;
}

/* Largest averaging count: pool_divide_exact needs count < 2^41 to keep its quotients'
 * remainders in range; real windows and planes are far smaller. */
#define FX_POOL_MAX_COUNT ((int64_t)1 << 40)

/* Whether an op may build its fp32 results in out itself (out a plain fp32 host tensor, not
 * summed across ranks, whose write could still fail, and not sharing in's storage): the write
 * then finds them in place (fx_write_float_body copies nothing). */
static int pool_f32_direct(const tensor_t *out, const tensor_t *in)
{
    return out->fmt == FMT_FP32 && !out->st->on_device && !out->st->dist &&
           fx_tensor_is_contiguous(out) && out->st != in->st;
}

static int pool_write(tensor_t *out, const void *stage, int int_compute, int e, const char *func)
{
    return int_compute ? fx_write_i64(out, stage, e, func) : fx_write_f32(out, stage, func);
}

/* ---- max pool ------------------------------------------------------------------------------ */

/* The CNN's pooling (2x2 windows, stride 2, no padding, every window inside the input) is the
 * one that dominates training time; it gets a loop without the per-window clipping of the
 * general path. Same visiting order, same strict comparison (the first maximum wins), same NaN
 * rule, so the outputs and argmax indices are those of the general loop. */
static int pool_is_plain_2x2(const pool_geom *g)
{
    return g->KH == 2 && g->KW == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0 &&
           2 * g->OH <= g->H && 2 * g->OW <= g->W;
}

static inline int pool_f32_better(float v, float best)
{
    return v > best || (isnan(v) && !isnan(best));
}

static inline int pool_i16_better(int32_t v, int32_t best) { return v > best; }

/* One (n, c) plane of 2x2 / stride-2 windows, visited in the general loop's order. T: input
 * element, S: stage element, BETTER: the comparison of the general loop for that type. The
 * four candidates are compared with selects rather than branches (the comparisons are data-
 * dependent coin flips), which also lets the compiler vectorise the row. */
#define FX_MAXPOOL_2X2_PLANE(NAME, T, S, BETTER)                                               \
    static void NAME(const T *restrict x, const pool_geom *g, int64_t pl, S *restrict out,     \
                     int32_t *restrict idx)                                                    \
    {                                                                                          \
        const int64_t W = g->W, OH = g->OH, OW = g->OW, base = pl * g->H * W;                  \
        for (int64_t oh = 0; oh < OH; oh++) {                                                  \
            const int64_t r0 = base + 2 * oh * W, o0 = (pl * OH + oh) * OW;                    \
            const T *restrict x0 = x + r0, *restrict x1 = x + r0 + W;                          \
            for (int64_t ow = 0; ow < OW; ow++) {                                              \
                T best = x0[2 * ow];                                                           \
                int32_t at = (int32_t)(r0 + 2 * ow);                                           \
                const T v1 = x0[2 * ow + 1], v2 = x1[2 * ow], v3 = x1[2 * ow + 1];             \
                const int b1 = BETTER(v1, best);                                               \
                best = b1 ? v1 : best;                                                         \
                at = b1 ? (int32_t)(r0 + 2 * ow + 1) : at;                                     \
                const int b2 = BETTER(v2, best);                                               \
                best = b2 ? v2 : best;                                                         \
                at = b2 ? (int32_t)(r0 + W + 2 * ow) : at;                                     \
                const int b3 = BETTER(v3, best);                                               \
                best = b3 ? v3 : best;                                                         \
                at = b3 ? (int32_t)(r0 + W + 2 * ow + 1) : at;                                 \
                out[o0 + ow] = best;                                                           \
                if (idx) idx[o0 + ow] = at;                                                    \
            }                                                                                  \
        }                                                                                      \
    }
FX_MAXPOOL_2X2_PLANE(maxpool_2x2_plane_f32, float, float, pool_f32_better)
FX_MAXPOOL_2X2_PLANE(maxpool_2x2_plane_i16, int16_t, int16_t, pool_i16_better)


/* One fp32 plane with the backend's kernel where the level has one (the same values and
 * argmax, src/nn/pool_avx2.c and pool_avx512.c), else the portable loop. */
static void maxpool_2x2_plane_f32_any(const fx_backend *be, const float *x, const pool_geom *g,
                                      int64_t pl, float *out, int32_t *idx)
{
    if (be->cvt.maxpool2x2_f32) {
        const int64_t HW = g->H * g->W, P = g->OH * g->OW;
        be->cvt.maxpool2x2_f32(x + pl * HW, pl * HW, g->W, g->OH, g->OW, out + pl * P,
                               idx ? idx + pl * P : NULL);
    } else {
        maxpool_2x2_plane_f32(x, g, pl, out, idx);
    }
}

static int pool_is_half(fmt_t f) { return f == FMT_FP16 || f == FMT_BF16; }

/* fp16/bf16 2x2 max pool of one plane without the fp32 copy of x and stage of y: the plane
 * (or, for large planes, each pair of input rows) is widened into L1, pooled by the fp32
 * route's own plane loop (same comparisons, same argmax) and the output narrowed with the
 * conversion the write path uses, so y and argmax are the fp32 route's bit for bit. Whole
 * planes up to FX_POOL_HALF_PLANE values (few conversion calls), rows up to FX_POOL_HALF_MAX_W. */
#define FX_POOL_HALF_PLANE 4096
#define FX_POOL_HALF_MAX_W 1024
static void maxpool_2x2_plane_half(const uint16_t *x, const pool_geom *g, int64_t pl,
                                   uint16_t *y, int32_t *idx,
                                   void (*widen)(const uint16_t *, float *, int64_t),
                                   void (*narrow)(const float *, uint16_t *, int64_t))
{
    float in[FX_POOL_HALF_PLANE], out[FX_POOL_HALF_PLANE / 4];
    const int64_t W = g->W, OW = g->OW, HW = g->H * W, P = g->OH * OW;
    pool_geom g1 = *g;
    const int whole = HW <= FX_POOL_HALF_PLANE;
    if (!whole) { /* one output row of a one-plane, two-row image at a time */
        g1.H = 2;
        g1.OH = 1;
    }
    const int64_t steps = whole ? 1 : g->OH, rows = whole ? HW : 2 * W, outs = whole ? P : OW;
    for (int64_t t = 0; t < steps; t++) {
        const int64_t r0 = pl * HW + 2 * t * W, o0 = pl * P + t * OW;
        widen(x + r0, in, rows);
        maxpool_2x2_plane_f32_any(fx_backend_active(), in, &g1, 0, out, idx ? idx + o0 : NULL);
        if (idx) /* positions in the widened rows -> flat indices into x */
            for (int64_t o = 0; o < outs; o++) idx[o0 + o] += (int32_t)r0;
        narrow(out, y + o0, outs);
    }
}
#undef FX_MAXPOOL_2X2_PLANE

int tensor_maxpool2d(tensor_t *y, int32_t *argmax, const tensor_t *x, int kh, int kw, int sh,
                     int sw, int ph, int pw)
{
    pool_geom g;
    int rc = pool_geometry(__func__, x, "x", y, "y", kh, kw, sh, sw, ph, pw, &g);
    if (rc) return rc;
    const int64_t HW = g.H * g.W, planes = g.N * g.C;
    if (argmax && planes * HW > INT32_MAX)
        return FX_FAIL(FX_EUNSUPPORTED, "x has %lld elements; int32 argmax indices need fewer "
                       "than 2^31", (long long)(planes * HW));
    fx_op_args a = pool_args(FX_OP_MAXPOOL2D, __func__, y, "y", x, "x");
    a.u.pool.argmax = argmax; /* memory of the tensors' place (flexpoint_gpu.h) */
    a.u.pool.g = &g;
    return fx_op_run(&a);
}

int fx_nn_maxpool2d_host(const fx_op_args *a)
{
    tensor_t *y = a->u.pool.out;
    const tensor_t *x = a->u.pool.in;
    int32_t *argmax = a->u.pool.argmax;
    const char *func = a->func;
    const pool_geom g = *a->u.pool.g;
    const int64_t HW = g.H * g.W, P = g.OH * g.OW, planes = g.N * g.C;
    int rc = FX_OK;
    const int64_t ny = planes * P;
    const int ic = fx_is_int_compute(x);
    const int fast2x2 = pool_is_plain_2x2(&g);
    if (fast2x2 && pool_is_half(x->fmt) && y->fmt == x->fmt && g.W <= FX_POOL_HALF_MAX_W &&
        fx_tensor_is_contiguous(x) && fx_tensor_covers_storage(y) && y->st != x->st) {
        const fx_backend *be = fx_backend_active();
        const int half_fp16 = x->fmt == FMT_FP16;
        void (*widen)(const uint16_t *, float *, int64_t) =
            half_fp16 ? be->cvt.fp16_to_f32 : be->cvt.bf16_to_f32;
        void (*narrow)(const float *, uint16_t *, int64_t) =
            half_fp16 ? be->cvt.f32_to_fp16 : be->cvt.f32_to_bf16;
        const uint16_t *xh = fx_tensor_base(x);
        uint16_t *yh = fx_tensor_base(y);
        const int nt = pool_threads(pool_work(ny, 4), planes);
        (void)nt;
        FX_POOL_PARALLEL_FOR
        for (int64_t pl = 0; pl < planes; pl++) {
            if (be->cvt.maxpool2x2_half)
                be->cvt.maxpool2x2_half(xh + pl * HW, pl * HW, g.W, g.OH, g.OW, yh + pl * P,
                                        argmax ? argmax + pl * P : NULL, half_fp16);
            else
                maxpool_2x2_plane_half(xh, &g, pl, yh, argmax, widen, narrow);
        }
        return FX_OK;
    }
    /* (other fp16/bf16 pools take the fp32 route: comparing patterns in the scalar loop below
     * measured slower than widening, comparing floats and rounding back) */
    fx_scratch s = {.n = 0};
    fx_operand xo;
    rc = pool_operand(x, ic, &xo, &s, func);
    /* integer path: the outputs are input mantissas, staged as int16 (fx_write_i16); fp32
     * outputs into a plain fp32 y are made in y itself, and then the indices straight in
     * argmax (nothing can fail after the loop, so neither is left half written). So do the
     * integer path's indices where y's write cannot fail (3.2 MB staged and copied for the
     * CNN's first pooling, otherwise). */
    const int direct = rc == FX_OK && !ic && pool_f32_direct(y, x);
    const int idx_direct = direct || (rc == FX_OK && ic && fx_write_i16_cannot_fail(y));
    void *stage = direct ? fx_tensor_base(y)
                         : pool_alloc(&s, ny, ic ? sizeof(int16_t) : sizeof(float), &rc, func);
    int32_t *idx =
        !argmax ? NULL : idx_direct ? argmax : pool_alloc(&s, ny, sizeof(int32_t), &rc, func);
    if (rc) {
        fx_scratch_free(&s);
        return rc;
    }
    const int nt = pool_threads(pool_work(ny, g.KH * g.KW), planes);
    (void)nt;
    const fx_backend *be = fx_backend_active();
    FX_POOL_PARALLEL_FOR
    for (int64_t pl = 0; pl < planes; pl++) {
        if (fast2x2) {
            if (ic && be->cvt.maxpool2x2_i16)
                be->cvt.maxpool2x2_i16((const int16_t *)xo.data + pl * HW, pl * HW, g.W, g.OH,
                                       g.OW, (int16_t *)stage + pl * P, idx ? idx + pl * P : NULL);
            else if (ic)
                maxpool_2x2_plane_i16((const int16_t *)xo.data, &g, pl, (int16_t *)stage, idx);
            else
                maxpool_2x2_plane_f32_any(be, (const float *)xo.data, &g, pl, (float *)stage, idx);
            continue;
        }
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow = 0; ow < g.OW; ow++) {
                int64_t h0, h1, w0, w1, o = pl * P + oh * g.OW + ow;
                pool_window(&g, oh, ow, &h0, &h1, &w0, &w1);
                int64_t best_at = pl * HW + h0 * g.W + w0; /* windows are never empty */
                if (ic) {
                    const int16_t *xp = (const int16_t *)xo.data;
                    int32_t best = xp[best_at];
                    for (int64_t ih = h0; ih < h1; ih++)
                        for (int64_t iw = w0; iw < w1; iw++) {
                            const int64_t at = pl * HW + ih * g.W + iw;
                            if (xp[at] > best) {
                                best = xp[at];
                                best_at = at;
                            }
                        }
                    ((int16_t *)stage)[o] = (int16_t)best;
                } else {
                    const float *xp = (const float *)xo.data;
                    float best = xp[best_at];
                    for (int64_t ih = h0; ih < h1; ih++)
                        for (int64_t iw = w0; iw < w1; iw++) {
                            const int64_t at = pl * HW + ih * g.W + iw;
                            const float v = xp[at];
                            if (v > best || (isnan(v) && !isnan(best))) {
                                best = v;
                                best_at = at;
                            }
                        }
                    ((float *)stage)[o] = best;
                }
                if (idx) idx[o] = (int32_t)best_at;
            }
    }
    rc = ic ? fx_write_i16(y, stage, xo.exp, func) : fx_write_f32(y, stage, func);
    /* the indices, staged until the write succeeded: 3.2 MB for the CNN's first pooling, copied
     * by the threads (a serial copy held back its two-thread speedup) */
    if (rc == FX_OK && argmax && idx != argmax)
        fx_parallel_copy(argmax, idx, (size_t)ny * sizeof *idx);
    fx_scratch_free(&s);
    return rc;
}

static int pool_maxpool2d_backward(tensor_t *dx, const tensor_t *dy, const int32_t *argmax,
                                   int own_indices, const char *func);

int tensor_maxpool2d_backward(tensor_t *dx, const tensor_t *dy, const int32_t *argmax)
{
    return pool_maxpool2d_backward(dx, dy, argmax, 0, __func__);
}

int fx_maxpool2d_backward_own(tensor_t *dx, const tensor_t *dy, const int32_t *argmax)
{
    /* errors name the public op the trainer's call stands for */
    return pool_maxpool2d_backward(dx, dy, argmax, 1, "tensor_maxpool2d_backward");
}

static int pool_maxpool2d_backward(tensor_t *dx, const tensor_t *dy, const int32_t *argmax,
                                   int own_indices, const char *func)
{
    if (!dx || !dy || !argmax)
        return fx_error(FX_EINVAL, func, "%s is NULL", !dx ? "dx" : (!dy ? "dy" : "argmax"));
    int rc = pool_4d(func, dx, "dx");
    if (!rc) rc = pool_4d(func, dy, "dy");
    if (rc) return rc;
    char b1[160], b2[160];
    if (dx->shape[0] != dy->shape[0] || dx->shape[1] != dy->shape[1])
        return fx_error(FX_ESHAPE, func, "dx.shape=%s and dy.shape=%s differ in batch or channels",
                       fx_shape_str(dx, b1, sizeof b1), fx_shape_str(dy, b2, sizeof b2));
    if (dx->shape[0] == 0 || dx->shape[1] == 0)
        return fx_error(FX_ESHAPE, func, "empty batch or no channels: dx.shape=%s",
                       fx_shape_str(dx, b1, sizeof b1));
    const int64_t planes = dx->shape[0] * dx->shape[1], HW = dx->shape[2] * dx->shape[3];
    const int64_t nx = planes * HW;
    if (nx > INT32_MAX)
        return fx_error(FX_EUNSUPPORTED, func, "dx has %lld elements; int32 argmax indices need "
                       "fewer than 2^31", (long long)nx);
    /* argmax is memory of the tensors' place; a device checks it there before anything is
     * written */
    fx_op_args a = pool_args(FX_OP_MAXPOOL2D_BACKWARD, func, dx, "dx", dy, "dy");
    a.u.pool.argmax_in = argmax;
    a.u.pool.own_indices = own_indices;
    return fx_op_run(&a);
}

/* The error for argmax[i] outside the (n, c) plane of its output (planes of HW inputs and P
 * outputs). */
static int pool_bad_index(const tensor_t *dx, const int32_t *argmax, int64_t i, int64_t P,
                          int64_t HW, const char *func)
{
    char b1[160];
    const int64_t lo = i / P * HW;
    return fx_error(FX_ERANGE, func, "argmax[%lld]=%d is outside the (n, c) plane of that "
                   "output, [%lld, %lld) in dx.shape=%s", (long long)i, argmax[i],
                   (long long)lo, (long long)(lo + HW), fx_shape_str(dx, b1, sizeof b1));
}

static int64_t pool_unpool_planes; /* test hook */

int64_t fx_pool_unpool_planes(void)
{
    return __atomic_load_n(&pool_unpool_planes, __ATOMIC_RELAXED);
}

int fx_nn_maxpool2d_backward_host(const fx_op_args *a)
{
    tensor_t *dx = a->u.pool.out;
    const tensor_t *dy = a->u.pool.in;
    const int32_t *argmax = a->u.pool.argmax_in;
    const char *func = a->func;
    const int64_t planes = dx->shape[0] * dx->shape[1], HW = dx->shape[2] * dx->shape[3];
    const int64_t P = dy->shape[2] * dy->shape[3], nx = planes * HW, ny = planes * P;
    int rc = FX_OK;
    const int ic = fx_is_int_compute(dy);
    const int half = !ic && pool_is_half(dy->fmt) && dx->fmt == dy->fmt;
    /* every index inside its own plane (the first one that is not is named) before anything
     * is written to dx: the 16-bit route below checks each index as it scatters into its
     * scratch stage (a pass over argmax of its own was a third of a pooling gradient), or into
     * a disposable dx itself, which may then be left part written; the others check them all
     * first, in parallel, as that reads all of argmax */
    int64_t first_bad = ny;
    const int64_t H = dx->shape[2], W = dx->shape[3], OH = dy->shape[2], OW = dy->shape[3];
    /* fp32 sums (not met) by the level's 2x2 vector scatter, plane by plane, where it has one
     * and the blocks fit the plane; it checks each index as it goes, so that a disposable fp32
     * dx written in place needs no pass of its own over argmax first (a bad index found
     * part-way leaves it part written, which such a dx allows) */
    const fx_maxunpool2x2_f32_fn unpool_f32 =
        !ic && !half && 2 * OH <= H && 2 * OW <= W ? fx_backend_active()->cvt.maxunpool2x2_f32
                                                   : NULL;
    const int f32_checked_in_scatter =
        unpool_f32 && pool_f32_direct(dx, dy) && dx->st->disposable;
    if (!ic && !half && !f32_checked_in_scatter) {
        const int ntv = pool_threads(ny, planes);
        (void)ntv;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(ntv) if (ntv > 1) reduction(min : first_bad)
#endif
        for (int64_t pl = 0; pl < planes; pl++) {
            const int64_t lo = pl * HW;
            for (int64_t i = pl * P; i < (pl + 1) * P; i++)
                if (argmax[i] < lo || argmax[i] >= lo + HW) {
                    first_bad = i < first_bad ? i : first_bad;
                    break;
                }
        }
        if (first_bad < ny) return pool_bad_index(dx, argmax, first_bad, P, HW, func);
    }
    fx_scratch s = {.n = 0};
    fx_operand dyo;
    rc = half ? fx_operand_make(dy, 0, dy->fmt, 0, 0, NULL, &dyo, &s, func)
              : pool_operand(dy, ic, &dyo, &s, func);
    if (rc == FX_OK && (ic || half)) {
        /* Where no two nonzero gradients meet at one input (windows that do not overlap), each
         * input's sum is 0 or a single gradient, which a 16-bit stage holds exactly: int16
         * mantissas, or fp16/bf16 patterns as the fp32 route leaves them (-0 + +0 = +0, NaN
         * canonical). A meeting (overlapping windows) is detected, and then the sums are made
         * in int64 or fp32 below. */
        /* A whole fp16/bf16 dx that is disposable (fx_storage.disposable: the trainer's
         * gradients, which a failed step leaves unused) and not dy's storage is the stage
         * itself: no scratch to fault in and no copy into dx after (a bad index found
         * part-way leaves dx part written, which such a dx allows) */
        const tensor_t *dy_in[1] = {dy};
        uint16_t *st16 = half && dx->st->disposable ? fx_half_direct(dx, dy_in, 1) : NULL;
        if (!st16) st16 = pool_alloc(&s, nx, sizeof(uint16_t), &rc, func);
        if (rc) {
            fx_scratch_free(&s);
            return rc;
        }
        const uint16_t *d = (const uint16_t *)dyo.data;
        const uint16_t inf = half ? fx_half_inf(dy->fmt) : 0;
        const uint16_t qnan = half ? fx_half_qnan(dy->fmt) : 0;
        int met = 0;
        /* planes the vector scatter took, added to the test hook once per call (an atomic add
         * per plane, on a line both threads wrote, was 2 % of a two-thread CNN step) */
        int64_t unpooled = 0;
        int32_t mx = 0; /* integer path: max |mantissa| of dy, which is that of st16 when not met */
        const int nt16 = pool_threads(nx + ny, planes);
        /* planes whose indices each lie in their own 2x2 block (a 2x2 / stride-2 pooling's, which
         * cannot meet): the level's vector scatter, else the loop below */
        const fx_maxunpool2x2_fn unpool =
            2 * OH <= H && 2 * OW <= W ? fx_backend_active()->cvt.maxunpool2x2_u16 : NULL;
        (void)nt16;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt16) if (nt16 > 1) \
    reduction(| : met) reduction(max : mx) reduction(min : first_bad) reduction(+ : unpooled)
#endif
        for (int64_t pl = 0; pl < planes; pl++) {
            /* each plane's indices must stay in its plane (a plane stops at its first that
             * does not): clear it here, in cache */
            const int64_t lo = pl * HW;
            if (unpool && unpool(d + pl * P, argmax + pl * P, lo, H, W, OH, OW, half, inf, qnan,
                                 st16 + lo, &mx)) {
                unpooled++;
                continue;
            }
            memset(st16 + lo, 0, (size_t)HW * sizeof *st16);
            for (int64_t i = pl * P; i < (pl + 1) * P; i++) {
                const int32_t at = argmax[i];
                if (at < lo || at >= lo + HW) {
                    first_bad = i < first_bad ? i : first_bad;
                    break;
                }
                uint16_t u = d[i];
                if (half) u = (u & 0x7FFFu) == 0 ? 0 : fx_half_canonical_c(u, inf, qnan);
                if (ic) {
                    const int32_t v = (int16_t)u, av = v < 0 ? -v : v;
                    mx = av > mx ? av : mx;
                }
                met |= (st16[at] != 0) & (u != 0);
                st16[at] = (uint16_t)(st16[at] | u); /* exact when not met */
            }
        }
        __atomic_fetch_add(&pool_unpool_planes, unpooled, __ATOMIC_RELAXED);
        if (first_bad < ny) {
            fx_scratch_free(&s);
            return pool_bad_index(dx, argmax, first_bad, P, HW, func);
        }
        if (!met) {
            rc = ic ? fx_write_i16_max(dx, (const int16_t *)st16, dyo.exp, (uint64_t)mx, func)
                    : fx_write_half_bits(dx, st16, func);
            fx_scratch_free(&s);
            return rc;
        }
        if (half) rc = pool_operand(dy, 0, &dyo, &s, func); /* the fp32 sums below */
    }
    const size_t ssz = ic ? sizeof(int64_t) : sizeof(float);
    /* fp32 sums into a plain fp32 dx are made in dx itself (the write then finds them in
     * place): no stage to fill and copy. Nothing can fail from here on but an index that a
     * disposable dx's scatter checks as it goes (f32_checked_in_scatter), so any other dx is
     * never left half written. */
    void *stage = !ic && pool_f32_direct(dx, dy) ? fx_tensor_base(dx)
                                                 : pool_alloc(&s, nx, ssz, &rc, func);
    if (rc) {
        fx_scratch_free(&s);
        return rc;
    }
    const int nt = pool_threads(nx + ny, planes);
    int64_t unpooled = 0;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1) \
    reduction(min : first_bad) reduction(+ : unpooled)
#endif
    for (int64_t pl = 0; pl < planes; pl++) {
        const int64_t lo = pl * HW;
        if (unpool_f32 && unpool_f32((const float *)dyo.data + pl * P, argmax + pl * P, lo, H, W,
                                     OH, OW, (float *)stage + lo)) {
            unpooled++;
            continue;
        }
        /* each plane's indices stay in its plane (checked above, or here as it goes): clear
         * it here, in cache */
        memset((char *)stage + (size_t)lo * ssz, 0, (size_t)HW * ssz);
        if (ic) {
            const int16_t *d = (const int16_t *)dyo.data;
            int64_t *st = stage;
            for (int64_t i = pl * P; i < (pl + 1) * P; i++) st[argmax[i]] += d[i];
        } else {
            const float *d = (const float *)dyo.data;
            float *st = stage;
            for (int64_t i = pl * P; i < (pl + 1) * P; i++) {
                if (f32_checked_in_scatter && (argmax[i] < lo || argmax[i] >= lo + HW)) {
                    first_bad = i < first_bad ? i : first_bad;
                    break;
                }
                st[argmax[i]] += d[i];
            }
        }
    }
    __atomic_fetch_add(&pool_unpool_planes, unpooled, __ATOMIC_RELAXED);
    if (first_bad < ny) {
        fx_scratch_free(&s);
        return pool_bad_index(dx, argmax, first_bad, P, HW, func);
    }
    rc = pool_write(dx, stage, ic, dyo.exp, func);
    fx_scratch_free(&s);
    return rc;
}

/* ---- average pool -------------------------------------------------------------------------- */

int tensor_avgpool2d(tensor_t *y, const tensor_t *x, int kh, int kw, int sh, int sw, int ph,
                     int pw)
{
    pool_geom g;
    int rc = pool_geometry(__func__, x, "x", y, "y", kh, kw, sh, sw, ph, pw, &g);
    if (rc) return rc;
    const int64_t count = (int64_t)kh * kw;
    if (count > FX_POOL_MAX_COUNT)
        return FX_FAIL(FX_EUNSUPPORTED, "window %dx%d: more than 2^40 elements cannot be "
                       "averaged with one correct rounding", kh, kw);
    fx_op_args a = pool_args(FX_OP_AVGPOOL2D, __func__, y, "y", x, "x");
    a.u.pool.g = &g;
    return fx_op_run(&a);
}

int fx_nn_avgpool2d_host(const fx_op_args *a)
{
    tensor_t *y = a->u.pool.out;
    const tensor_t *x = a->u.pool.in;
    const char *func = a->func;
    const pool_geom g = *a->u.pool.g;
    const int64_t HW = g.H * g.W, P = g.OH * g.OW, planes = g.N * g.C;
    int rc = FX_OK;
    const int64_t ny = planes * P, count = g.KH * g.KW;
    const int ic = fx_is_int_compute(x);
    fx_scratch s = {.n = 0};
    fx_operand xo;
    rc = pool_operand(x, ic, &xo, &s, func);
    void *stage = pool_alloc(&s, ny, ic ? sizeof(int64_t) : sizeof(float), &rc, func);
    if (rc) {
        fx_scratch_free(&s);
        return rc;
    }
    const int nt = pool_threads(pool_work(ny, count), planes);
    (void)nt;
    FX_POOL_PARALLEL_FOR
    for (int64_t pl = 0; pl < planes; pl++) {
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow = 0; ow < g.OW; ow++) {
                int64_t h0, h1, w0, w1, o = pl * P + oh * g.OW + ow;
                pool_window(&g, oh, ow, &h0, &h1, &w0, &w1);
                if (ic) {
                    const int16_t *xp = (const int16_t *)xo.data + pl * HW;
                    int64_t sum = 0;
                    for (int64_t ih = h0; ih < h1; ih++)
                        for (int64_t iw = w0; iw < w1; iw++) sum += xp[ih * g.W + iw];
                    ((int64_t *)stage)[o] = sum;
                } else {
                    const float *xp = (const float *)xo.data + pl * HW;
                    float sum = 0.0f;
                    for (int64_t ih = h0; ih < h1; ih++)
                        for (int64_t iw = w0; iw < w1; iw++) sum += xp[ih * g.W + iw];
                    ((float *)stage)[o] = sum / (float)count;
                }
            }
    }
    int e = xo.exp;
    if (ic) pool_divide_exact(stage, ny, count, &e);
    rc = pool_write(y, stage, ic, e, func);
    fx_scratch_free(&s);
    return rc;
}

int tensor_avgpool2d_backward(tensor_t *dx, const tensor_t *dy, int kh, int kw, int sh, int sw,
                              int ph, int pw)
{
    pool_geom g;
    int rc = pool_geometry(__func__, dx, "dx", dy, "dy", kh, kw, sh, sw, ph, pw, &g);
    if (rc) return rc;
    const int64_t count = (int64_t)kh * kw;
    if (count > FX_POOL_MAX_COUNT)
        return FX_FAIL(FX_EUNSUPPORTED, "window %dx%d: more than 2^40 elements cannot be "
                       "averaged with one correct rounding", kh, kw);
    fx_op_args a = pool_args(FX_OP_AVGPOOL2D_BACKWARD, __func__, dx, "dx", dy, "dy");
    a.u.pool.g = &g;
    return fx_op_run(&a);
}

int fx_nn_avgpool2d_backward_host(const fx_op_args *a)
{
    tensor_t *dx = a->u.pool.out;
    const tensor_t *dy = a->u.pool.in;
    const char *func = a->func;
    const pool_geom g = *a->u.pool.g;
    const int64_t HW = g.H * g.W, P = g.OH * g.OW, planes = g.N * g.C;
    int rc = FX_OK;
    const int64_t nx = planes * HW, count = g.KH * g.KW;
    const int ic = fx_is_int_compute(dy);
    const size_t ssz = ic ? sizeof(int64_t) : sizeof(float);
    fx_scratch s = {.n = 0};
    fx_operand dyo;
    rc = pool_operand(dy, ic, &dyo, &s, func);
    void *stage = pool_alloc(&s, nx, ssz, &rc, func);
    if (rc) {
        fx_scratch_free(&s);
        return rc;
    }
    memset(stage, 0, (size_t)nx * ssz);
    const int nt = pool_threads(pool_work(planes * P, count), planes);
    (void)nt;
    /* every input element sums the gradients of the windows that contain it (exactly in
     * int64, or in fp32 in scan order), then one division by the count */
    FX_POOL_PARALLEL_FOR
    for (int64_t pl = 0; pl < planes; pl++) {
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow = 0; ow < g.OW; ow++) {
                int64_t h0, h1, w0, w1, o = pl * P + oh * g.OW + ow;
                pool_window(&g, oh, ow, &h0, &h1, &w0, &w1);
                if (ic) {
                    int64_t *st = (int64_t *)stage + pl * HW;
                    const int64_t d = ((const int16_t *)dyo.data)[o];
                    for (int64_t ih = h0; ih < h1; ih++)
                        for (int64_t iw = w0; iw < w1; iw++) st[ih * g.W + iw] += d;
                } else {
                    float *st = (float *)stage + pl * HW;
                    const float d = ((const float *)dyo.data)[o];
                    for (int64_t ih = h0; ih < h1; ih++)
                        for (int64_t iw = w0; iw < w1; iw++) st[ih * g.W + iw] += d;
                }
            }
    }
    int e = dyo.exp;
    if (ic) {
        pool_divide_exact(stage, nx, count, &e);
    } else {
        float *st = stage;
        for (int64_t i = 0; i < nx; i++) st[i] /= (float)count;
    }
    rc = pool_write(dx, stage, ic, e, func);
    fx_scratch_free(&s);
    return rc;
}

/* ---- global average pool ----------------------------------------------------------------- */

/* x: [N,C,H,W]; y: [N,C] or [N,C,1,1]. */
static int global_geometry(const char *func, const tensor_t *x, const char *xn, const tensor_t *y,
                           const char *yn, int64_t *planes, int64_t *HW)
{
    if (!x || !y) return fx_error(FX_EINVAL, func, "%s is NULL", !x ? xn : yn);
    int rc = pool_4d(func, x, xn);
    if (rc) return rc;
    char b1[160], b2[160];
    const int64_t *xs = x->shape, *ys = y->shape;
    const int ok = (y->ndim == 2 || (y->ndim == 4 && ys[2] == 1 && ys[3] == 1)) &&
                   ys[0] == xs[0] && ys[1] == xs[1];
    if (!ok)
        return fx_error(FX_ESHAPE, func, "%s.shape=%s must be [%lld, %lld] or [%lld, %lld, 1, 1] "
                        "for %s.shape=%s", yn, fx_shape_str(y, b1, sizeof b1), (long long)xs[0],
                        (long long)xs[1], (long long)xs[0], (long long)xs[1], xn,
                        fx_shape_str(x, b2, sizeof b2));
    if (xs[0] == 0 || xs[1] == 0 || xs[2] == 0 || xs[3] == 0)
        return fx_error(FX_ESHAPE, func, "%s.shape=%s is empty", xn,
                        fx_shape_str(x, b1, sizeof b1));
    *planes = xs[0] * xs[1];
    *HW = xs[2] * xs[3];
    if (*HW > FX_POOL_MAX_COUNT)
        return fx_error(FX_EUNSUPPORTED, func, "%lld elements per plane: more than 2^40 cannot "
                        "be averaged with one correct rounding", (long long)*HW);
    return FX_OK;
}

int tensor_global_avgpool(tensor_t *y, const tensor_t *x)
{
    int64_t planes = 0, HW = 0;
    int rc = global_geometry(__func__, x, "x", y, "y", &planes, &HW);
    if (rc) return rc;
    fx_op_args a = pool_args(FX_OP_GLOBAL_AVGPOOL, __func__, y, "y", x, "x");
    a.u.pool.planes = planes;
    a.u.pool.HW = HW;
    return fx_op_run(&a);
}

int fx_nn_global_avgpool_host(const fx_op_args *a)
{
    tensor_t *y = a->u.pool.out;
    const tensor_t *x = a->u.pool.in;
    const char *func = a->func;
    const int64_t planes = a->u.pool.planes, HW = a->u.pool.HW;
    int rc = FX_OK;
    const int ic = fx_is_int_compute(x);
    fx_scratch s = {.n = 0};
    fx_operand xo;
    rc = pool_operand(x, ic, &xo, &s, func);
    void *stage = pool_alloc(&s, planes, ic ? sizeof(int64_t) : sizeof(float), &rc, func);
    if (rc) {
        fx_scratch_free(&s);
        return rc;
    }
    const int nt = pool_threads(planes * HW, planes);
    (void)nt;
    FX_POOL_PARALLEL_FOR
    for (int64_t pl = 0; pl < planes; pl++) {
        if (ic) {
            const int16_t *xp = (const int16_t *)xo.data + pl * HW;
            int64_t sum = 0;
            for (int64_t i = 0; i < HW; i++) sum += xp[i];
            ((int64_t *)stage)[pl] = sum;
        } else {
            const float *xp = (const float *)xo.data + pl * HW;
            float sum = 0.0f;
            for (int64_t i = 0; i < HW; i++) sum += xp[i];
            ((float *)stage)[pl] = sum / (float)HW;
        }
    }
    int e = xo.exp;
    if (ic) pool_divide_exact(stage, planes, HW, &e);
    rc = pool_write(y, stage, ic, e, func);
    fx_scratch_free(&s);
    return rc;
}

int tensor_global_avgpool_backward(tensor_t *dx, const tensor_t *dy)
{
    int64_t planes = 0, HW = 0;
    int rc = global_geometry(__func__, dx, "dx", dy, "dy", &planes, &HW);
    if (rc) return rc;
    fx_op_args a = pool_args(FX_OP_GLOBAL_AVGPOOL_BACKWARD, __func__, dx, "dx", dy, "dy");
    a.u.pool.planes = planes;
    a.u.pool.HW = HW;
    return fx_op_run(&a);
}

int fx_nn_global_avgpool_backward_host(const fx_op_args *a)
{
    tensor_t *dx = a->u.pool.out;
    const tensor_t *dy = a->u.pool.in;
    const char *func = a->func;
    const int64_t planes = a->u.pool.planes, HW = a->u.pool.HW;
    int rc = FX_OK;
    const int ic = fx_is_int_compute(dy);
    const size_t ssz = ic ? sizeof(int64_t) : sizeof(float);
    fx_scratch s = {.n = 0};
    fx_operand dyo;
    rc = pool_operand(dy, ic, &dyo, &s, func);
    void *quot = pool_alloc(&s, planes, ssz, &rc, func);
    void *stage = pool_alloc(&s, planes * HW, ssz, &rc, func);
    if (rc) {
        fx_scratch_free(&s);
        return rc;
    }
    int e = dyo.exp;
    if (ic) { /* each plane's gradient dy / HW, rounded once, then broadcast */
        int64_t *q = quot;
        for (int64_t pl = 0; pl < planes; pl++) q[pl] = ((const int16_t *)dyo.data)[pl];
        pool_divide_exact(q, planes, HW, &e);
    } else {
        float *q = quot;
        for (int64_t pl = 0; pl < planes; pl++)
            q[pl] = ((const float *)dyo.data)[pl] / (float)HW;
    }
    const int nt = pool_threads(planes * HW, planes);
    (void)nt;
    FX_POOL_PARALLEL_FOR
    for (int64_t pl = 0; pl < planes; pl++) {
        if (ic) {
            int64_t *st = (int64_t *)stage + pl * HW;
            const int64_t v = ((const int64_t *)quot)[pl];
            for (int64_t i = 0; i < HW; i++) st[i] = v;
        } else {
            float *st = (float *)stage + pl * HW;
            const float v = ((const float *)quot)[pl];
            for (int64_t i = 0; i < HW; i++) st[i] = v;
        }
    }
    rc = pool_write(dx, stage, ic, e, func);
    fx_scratch_free(&s);
    return rc;
}
