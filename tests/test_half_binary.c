/* The one-pass fp16/bf16 add/sub/mul (src/core/half_binary.c) against the definition: widen
 * with the scalar conversions, one fp32 operation, narrow with the scalar round-to-nearest-even
 * (NaN canonical). Operands are random 16-bit patterns (NaN, Inf, subnormals and zeros of both
 * signs included), for same-shape operands, per-channel operands of shape [C], [C,1,1] and
 * [1,C,1,1] against [N,C,H,W], in place (out = a), and sizes around the 2048-element chunk.
 * Shapes the fast path does not take (a strided view, a broadcast along another axis) must give
 * the same values through the dispatcher. The fused forms (fx_half_add_relu: tensor_add then
 * tensor_relu; fx_half_gated_add: tensor_add then tensor_relu_backward with the gate as x)
 * against the two ops they replace, bit for bit on the same random patterns, per channel too
 * for the first, at 1 and 2 threads, and the shapes they decline (nothing written). All of it
 * on every backend the CPU runs: the chunk route, and where a level has one, its one-pass add
 * (fx_backend.half_add). */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "core/half_binary.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static uint16_t ref_op(fmt_t f, fx_op op, uint16_t x, uint16_t y)
{
    const float a = f == FMT_FP16 ? fx_fp16_to_f32(x) : fx_bf16_to_f32(x);
    const float b = f == FMT_FP16 ? fx_fp16_to_f32(y) : fx_bf16_to_f32(y);
    float r = op == FX_OP_ADD ? a + b : op == FX_OP_SUB ? a - b : a * b;
    if (a != a) r = a; /* two NaNs: the first survives (the fp32 kernels' rule) */
    return f == FMT_FP16 ? fx_f32_to_fp16(r) : fx_f32_to_bf16(r);
}

/* Equal patterns. Two NaN operands included: the first one's sign survives (the fp32 kernels'
 * rule), whatever operand order the compiler emits. */
static int same_bits(fmt_t f, uint16_t got, uint16_t want, uint16_t x, uint16_t y)
{
    (void)f;
    (void)x;
    (void)y;
    return got == want;
}

static int call(fx_op op, tensor_t *o, const tensor_t *a, const tensor_t *b)
{
    return op == FX_OP_ADD ? tensor_add(o, a, b) : op == FX_OP_SUB ? tensor_sub(o, a, b)
                                                                   : tensor_mul(o, a, b);
}

static void fill(tensor_t *t, test_rng *r)
{
    uint16_t *p = tensor_data(t);
    const int64_t n = tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        uint16_t v = (uint16_t)test_rng_u64(r);
        if (i % 3 == 0) v &= 0xBFFF; /* many ordinary magnitudes too */
        p[i] = v;
    }
}

/* out[N,C,H,W] = a op b with b of shape bshape (same as out, or per channel). */
static void check(fmt_t f, fx_op op, const int64_t *shape, int bnd, const int64_t *bshape,
                  int inplace, test_rng *r)
{
    tensor_t *a = tensor_new(f, 4, shape), *b = tensor_new(f, bnd, bshape);
    tensor_t *o = inplace ? a : tensor_new(f, 4, shape);
    fill(a, r);
    fill(b, r);
    const int64_t n = tensor_numel(a), C = shape[1], HW = shape[2] * shape[3];
    uint16_t *a0 = malloc((size_t)n * 2);
    memcpy(a0, tensor_data(a), (size_t)n * 2);
    const uint16_t *bp = tensor_data(b);
    const int same = tensor_numel(b) == n;
    CHECK_STATUS(call(op, o, a, b), FX_OK);
    const uint16_t *op16 = tensor_data(o);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t y = same ? bp[i] : bp[(i / HW) % C];
        bad += !same_bits(f, op16[i], ref_op(f, op, a0[i], y), a0[i], y);
    }
    CHECK(bad == 0, "fmt %d op %d shape [%lld,%lld,%lld,%lld] b %s%s: %lld values differ", (int)f,
          (int)op, (long long)shape[0], (long long)shape[1], (long long)shape[2],
          (long long)shape[3], same ? "same shape" : "per channel", inplace ? " in place" : "",
          (long long)bad);
    free(a0);
    if (!inplace) tensor_free(o);
    tensor_free(a);
    tensor_free(b);
}

/* Two NaN operands in every position of a per-channel plane with a leftover tail (9 elements:
 * vectorised iterations and the scalar rest are compiled differently): the first operand's
 * NaN survives everywhere, in every op. */
static void check_nan_pairs(void)
{
    const fmt_t fmts[2] = {FMT_FP16, FMT_BF16};
    const fx_op ops[3] = {FX_OP_ADD, FX_OP_SUB, FX_OP_MUL};
    const int64_t shape[4] = {2, 3, 3, 3}, bshape[3] = {3, 1, 1};
    for (int fi = 0; fi < 2; fi++)
        for (int k = 0; k < 3; k++)
            for (int same = 0; same < 2; same++) {
                const fmt_t f = fmts[fi];
                const uint16_t neg_nan = f == FMT_FP16 ? 0xFE00 : 0xFFC0;
                const uint16_t pos_nan = f == FMT_FP16 ? 0x7E01 : 0x7FC1;
                tensor_t *a = tensor_new(f, 4, shape), *o = tensor_new(f, 4, shape);
                tensor_t *b = same ? tensor_new(f, 4, shape) : tensor_new(f, 3, bshape);
                if (!a || !o || !b) {
                    CHECK(0, "tensor_new");
                    tensor_free(a), tensor_free(b), tensor_free(o);
                    continue;
                }
                uint16_t *pa = tensor_data(a), *pb = tensor_data(b);
                for (int64_t i = 0; i < 54; i++) pa[i] = neg_nan;
                for (int64_t i = 0; i < tensor_numel(b); i++) pb[i] = pos_nan;
                CHECK_STATUS(call(ops[k], o, a, b), FX_OK);
                const uint16_t *po = tensor_data(o);
                int bad = 0;
                for (int64_t i = 0; i < 54; i++) bad += po[i] != neg_nan;
                CHECK(bad == 0, "%s op %d (%s b): %d of 54 results are not the first NaN",
                      fmt_name(f), (int)ops[k], same ? "same-shape" : "per-channel", bad);
                tensor_free(a), tensor_free(b), tensor_free(o);
            }
}

static int64_t count_diff(tensor_t *x, tensor_t *y)
{
    const uint16_t *a = tensor_data(x), *b = tensor_data(y);
    int64_t bad = 0;
    for (int64_t i = 0; i < tensor_numel(x); i++) bad += a[i] != b[i];
    return bad;
}

static void check_fused(fmt_t f, const int64_t *shape, int per_channel, int threads, test_rng *r)
{
    const int prev = flexpoint_set_num_threads(threads);
    const int64_t cb[4] = {1, shape[1], 1, 1};
    tensor_t *a = tensor_new(f, 4, shape), *b = tensor_new(f, 4, per_channel ? cb : shape);
    tensor_t *g = tensor_new(f, 4, shape), *u = tensor_new(f, 4, shape);
    tensor_t *want = tensor_new(f, 4, shape), *got = tensor_new(f, 4, shape);
    fill(a, r);
    fill(b, r);
    fill(g, r);
    CHECK_STATUS(tensor_add(u, a, b), FX_OK);
    CHECK_STATUS(tensor_relu(want, u), FX_OK);
    const int64_t made = fx_half_fused_made();
    CHECK_STATUS(fx_half_add_relu(got, a, b), FX_OK);
    CHECK(count_diff(got, want) == 0, "fmt %d add+relu %lldx%lldx%lldx%lld%s, %d threads: %lld "
          "values differ from tensor_add then tensor_relu", (int)f, (long long)shape[0],
          (long long)shape[1], (long long)shape[2], (long long)shape[3],
          per_channel ? " per channel" : "", threads, (long long)count_diff(got, want));
    if (!per_channel) {
        CHECK_STATUS(tensor_relu_backward(want, u, g), FX_OK);
        CHECK_STATUS(fx_half_gated_add(got, a, b, g), FX_OK);
        CHECK(count_diff(got, want) == 0, "fmt %d gated add %lld values, %d threads: %lld "
              "differ from tensor_add then tensor_relu_backward", (int)f,
              (long long)tensor_numel(a), threads, (long long)count_diff(got, want));
    }
    CHECK(fx_half_fused_made() - made == (per_channel ? 1 : 2), "fmt %d: %lld fused calls counted",
          (int)f, (long long)(fx_half_fused_made() - made));
    /* declined, nothing written: out is a's storage, the gate is out, a gate of another format */
    memcpy(tensor_data(u), tensor_data(got), (size_t)tensor_numel(got) * 2);
    CHECK(fx_half_add_relu(a, a, b) == FX_HALF_BINARY_NOT_TAKEN, "add+relu in place taken");
    CHECK(fx_half_gated_add(got, a, b, got) == FX_HALF_BINARY_NOT_TAKEN, "gate = out taken");
    tensor_t *g32 = tensor_new(FMT_FP32, 4, shape);
    CHECK(fx_half_gated_add(got, a, b, g32) == FX_HALF_BINARY_NOT_TAKEN, "fp32 gate taken");
    CHECK(count_diff(got, u) == 0, "a declined call wrote its output");
    flexpoint_set_num_threads(prev);
    tensor_free(g32);
    tensor_free(a);
    tensor_free(b);
    tensor_free(g);
    tensor_free(u);
    tensor_free(want);
    tensor_free(got);
}

/* everything below on one backend */
static void check_backend(void)
{
    check_nan_pairs();
    {
        test_rng rf;
        test_rng_seed(&rf, 78);
        const int64_t fs[3][4] = {{2, 3, 5, 7}, {4, 16, 32, 32}, {1, 1, 1, 2049}};
        for (int fi = 0; fi < 2; fi++)
            for (int si = 0; si < 3; si++)
                for (int t = 1; t <= 2; t++) {
                    const fmt_t f = fi ? FMT_BF16 : FMT_FP16;
                    check_fused(f, fs[si], 0, t, &rf);
                    if (fs[si][1] > 1 && fs[si][2] * fs[si][3] >= 16) check_fused(f, fs[si], 1, t, &rf);
                }
    }
    test_rng r;
    test_rng_seed(&r, 77);
    const fmt_t fmts[2] = {FMT_FP16, FMT_BF16};
    const fx_op ops[3] = {FX_OP_ADD, FX_OP_SUB, FX_OP_MUL};
    /* {2, 5, 2, 2}: planes of 4 values, which the dispatcher takes */
    const int64_t shapes[5][4] = {{2, 3, 5, 7}, {3, 4, 33, 31}, {1, 1, 1, 2049}, {4, 16, 28, 28},
                                  {2, 5, 2, 2}};
    for (int fi = 0; fi < 2; fi++)
        for (int oi = 0; oi < 3; oi++)
            for (int si = 0; si < 5; si++) {
                const int64_t *s = shapes[si];
                const int64_t c1[1] = {s[1]}, c3[3] = {s[1], 1, 1}, c4[4] = {1, s[1], 1, 1};
                check(fmts[fi], ops[oi], s, 4, s, 0, &r);
                check(fmts[fi], ops[oi], s, 4, s, 1, &r);
                check(fmts[fi], ops[oi], s, 3, c3, 0, &r);
                check(fmts[fi], ops[oi], s, 3, c3, 1, &r);
                check(fmts[fi], ops[oi], s, 4, c4, 0, &r);
                if (s[3] == s[1]) check(fmts[fi], ops[oi], s, 1, c1, 0, &r);
            }
    /* [N, C] op [C] (a linear layer's bias: planes of one value, taken row by row), C across
     * the 2048-value chunk, and in place */
    for (int fi = 0; fi < 2; fi++)
        for (int oi = 0; oi < 3; oi++)
            for (int ci = 0; ci < 2; ci++)
                for (int inplace = 0; inplace <= 1; inplace++) {
                    const int64_t C = ci ? 2049 : 128, s[2] = {ci ? 3 : 130, C}, sb[1] = {C};
                    tensor_t *a = tensor_new(fmts[fi], 2, s), *b = tensor_new(fmts[fi], 1, sb);
                    tensor_t *o = inplace ? a : tensor_new(fmts[fi], 2, s);
                    fill(a, &r);
                    fill(b, &r);
                    const int64_t n = s[0] * C;
                    uint16_t *A = malloc((size_t)n * 2);
                    memcpy(A, tensor_data(a), (size_t)n * 2);
                    CHECK_STATUS(call(ops[oi], o, a, b), FX_OK);
                    const uint16_t *B = tensor_data(b), *O = tensor_data(o);
                    int64_t bad = 0;
                    for (int64_t i = 0; i < n; i++)
                        bad += !same_bits(fmts[fi], O[i], ref_op(fmts[fi], ops[oi], A[i], B[i % C]),
                                          A[i], B[i % C]);
                    CHECK(bad == 0, "fmt %d op %d [%lld, %lld] + [%lld]%s: %lld values differ",
                          (int)fmts[fi], (int)ops[oi], (long long)s[0], (long long)C, (long long)C,
                          inplace ? " in place" : "", (long long)bad);
                    free(A);
                    if (!inplace) tensor_free(o);
                    tensor_free(a);
                    tensor_free(b);
                }
    /* not taken: a transposed a, and b broadcast along the last axis; the dispatcher's values */
    for (int fi = 0; fi < 2; fi++) {
        const int64_t s[2] = {37, 41}, st[2] = {41, 37}, bl[2] = {37, 1};
        tensor_t *a = tensor_new(fmts[fi], 2, st), *b = tensor_new(fmts[fi], 2, s);
        tensor_t *o = tensor_new(fmts[fi], 2, s), *bc = tensor_new(fmts[fi], 2, bl);
        fill(a, &r);
        fill(b, &r);
        fill(bc, &r);
        tensor_t *at = tensor_view_transpose(a, 0, 1);
        CHECK_STATUS(tensor_add(o, at, b), FX_OK);
        const uint16_t *A = tensor_data(a), *B = tensor_data(b), *O = tensor_data(o);
        int64_t bad = 0;
        for (int64_t i = 0; i < 37; i++)
            for (int64_t j = 0; j < 41; j++)
                bad += !same_bits(fmts[fi], O[i * 41 + j],
                                  ref_op(fmts[fi], FX_OP_ADD, A[j * 37 + i], B[i * 41 + j]),
                                  A[j * 37 + i], B[i * 41 + j]);
        CHECK(bad == 0, "fmt %d transposed a: %lld values differ", (int)fmts[fi], (long long)bad);
        CHECK_STATUS(tensor_mul(o, b, bc), FX_OK);
        const uint16_t *BC = tensor_data(bc);
        bad = 0;
        for (int64_t i = 0; i < 37 * 41; i++)
            bad += !same_bits(fmts[fi], O[i], ref_op(fmts[fi], FX_OP_MUL, B[i], BC[i / 41]), B[i],
                              BC[i / 41]);
        CHECK(bad == 0, "fmt %d row broadcast: %lld values differ", (int)fmts[fi], (long long)bad);
        tensor_free(at);
        tensor_free(a);
        tensor_free(b);
        tensor_free(o);
        tensor_free(bc);
    }
}

/* on every backend: the portable chunk route, and the levels' one-pass adds where they have
 * them (AVX2: fx_half_add_avx2, AVX-512: fx_half_add_avx512) */
int main(void)
{
    int levels = 0;
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        check_backend();
        levels++;
    }
    CHECK(levels >= 1, "no backend ran");
    return test_finish("test_half_binary");
}
