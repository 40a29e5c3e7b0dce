/* tensor_matmul of FLEX16_5 / DFP16 tensors in blocks rounded in cache (src/core/shared_matmul.c)
 * against the dispatcher's whole int64 stage.
 *
 * 1. On every backend at 1 and 2 threads, with block budgets small enough for many blocks
 *    (column blocks, row blocks, whole-row blocks and ragged edges), sequences of products into
 *    FLEX16_5 and DFP16 outputs from FLEX16_5 and DFP16 operands, compared after every write
 *    with twin outputs written through the dispatcher (the route switched off): the same
 *    mantissas, exponent, statistics and trace record. The sequences hold steady long enough for
 *    the route to be taken (its counter must move), then jump (a FLEX16_5 overflow that the
 *    write recomputes, a DFP16 scale that moves): those writes' early rounding misses (the
 *    miss counter must move), a FLEX16_5 product goes to the dispatcher and a DFP16 one runs
 *    its blocks again guessing the exponent asked for (the second-run counter must move for
 *    DFP16 only), and the results must still be the dispatcher's.
 * 2. Every product taken here is checked against an fp64 reference: each output within half a
 *    unit in the last place of its exponent (exact sums, one rounding).
 *    tensor_bmm likewise, with items run several at once (each within the block budget) and
 *    in turn in blocks, every transpose combination.
 * 3. Where the level's kernel rounds itself (gemm.i16_rounds: an AVX-512 CPU with AMX-INT8,
 *    forced on for these checks, shapes of at least 16 x 16 x 16 and K up to
 *    FX_GEMM_I16_AMX_ROUND_MAX_K; the AVX2 and AVX-512 register tiles, K up to one group of
 *    K blocks),
 *    the steady writes must take that route (its counter must
 *    move), ragged edges, the deepest K and products large enough for the kernel's two
 *    threads included; at the jumps, whose guess would saturate sums there, FLEX16_5 runs in
 *    blocks and DFP16 asks a dry write for its exponent and runs again in registers, with no
 *    blocks, also in a bmm whose last item jumps further than its first (those counters
 *    must move), and every write is still the dispatcher's bit for bit. With a
 *    FLEX16_5 preset that keeps overflows, the jump's saturated write is kept from those
 *    blocks, and must still be the dispatcher's, statistics included.
 * 3b. The rounding's edges (check_rounding_edges): integer-valued DFP16 products built so that
 *    the output's exponent is a chosen shift from 1 to 21 and sums sit on ties of both
 *    parities and signs, one unit either side of them, on the underflow bound and at zero,
 *    with the largest |sum| on either side, for K = 17, 40, 64, 100 and 128 (one or two k
 *    tiles: the AMX kernel rounds in int32 lanes) and 200 (int64 lanes): the dispatcher's
 *    bits, and the in-register route taken where the level has it. And the int32 rounding's
 *    bound: operands of 32767 and -32513 whose byte products put its accumulators at their
 *    extremes for K = 128 and 64, and K = 200, where they would wrap int32 (int64 lanes).
 * 3c. A DFP16 output whose exponent moves at every write (check_unsteady_dfp16): taken where
 *    the level's kernel rounds the product (AMX, and AVX-512's register tiles), its misses
 *    run again there, and left to the dispatcher elsewhere (the AVX2 level); every write the
 *    dispatcher's bit for bit.
 * 3d. Outputs marked disposable (as the trainer's activations; the plain products at two
 *    threads, the bmm at one) are rounded into straight, every take (fx_shared_matmul_direct),
 *    with the same checks; others never: their rounding buffer becomes their storage at every
 *    kept write (fx_shared_matmul_adopted), and views made before the products read each
 *    product, also once the output itself is freed (check_adopted_views), also where a block
 *    four times the output's size waits in the scratch cache before every product
 *    (check_adoption_beside_cached_block). A disposable bmm
 *    output that is its own first or second operand is taken but never rounded into before
 *    the products are done, and gives the product of a copy.
 * 3e. The register-tile driver's rounding (check_forced_kernels): every kernel forced in turn
 *    on full-range, small and mixed integer operands, K up to 1,536, the narrow tile, at 1 and
 *    2 threads: the dispatcher's bits, and in registers where the level rounds the shape.
 * 3f. The fast tiles that round their own sums (products of one K block): the rounding edges
 *    of 3b on operands the norms pass, every shift 1 to 20 those sums reach, one chain and
 *    several, and with the tiles' rounding switched off; sums of +-2^32 and 3 2^30 that an
 *    int32 lane reads as 0 or as a value that would fit (check_wrapping_sums); two tiles whose
 *    largest sums share their high word (check_tile_max_order), so that the bound that spares
 *    a tile its exact maximum is tested at its edge on both signs.
 * 4. Products it must not take (too small an output by default, K of 1024 or more where the
 *    level's kernel does not round it (and taken in registers where it does), a transposed
 *    output view, a float operand, an output that is an operand) give the dispatcher's
 *    results and leave the counter still. */
#include "flexpoint.h"
#include "flexpoint_nn.h"
#include "core/backend.h"
#include "core/dispatch.h" /* FX_GUESS_STEADY_WRITES */
#include "core/shared_matmul.h"
#include "flex/flex_kernels.h"
#include "flex/gemm_i16.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* t's values N(0, 1), but its first head values N(0, s_head^2) and its last tail values
 * N(0, s_tail^2) */
static void fill_scaled(tensor_t *t, int64_t head, double s_head, int64_t tail, double s_tail,
                        test_rng *r)
{
    const int64_t n = tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)((i < head ? s_head : i >= n - tail ? s_tail : 1.0) * test_rng_normal(r));
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    free(v);
}

/* t's values N(0, scale^2), or where tail > 0 only its last tail values at that scale and the
 * rest N(0, 1) */
static void fill_tail(tensor_t *t, double scale, int64_t tail, test_rng *r)
{
    fill_scaled(t, 0, 1.0, tail > 0 ? tail : tensor_numel(t), scale, r);
}

static void fill(tensor_t *t, double scale, test_rng *r) { fill_tail(t, scale, 0, r); }

/* out = a @ b against fp64: every element within half a unit of out's exponent (or saturated
 * at +-32767 units). */
static void check_reference(tensor_t *out, tensor_t *a, tensor_t *b, const char *what)
{
    const int64_t M = tensor_shape(a)[0], K = tensor_shape(a)[1], N = tensor_shape(b)[1];
    float *av = malloc((size_t)(M * K) * sizeof *av), *bv = malloc((size_t)(K * N) * sizeof *bv);
    float *ov = malloc((size_t)(M * N) * sizeof *ov);
    CHECK_STATUS(tensor_to_f32(a, av), FX_OK);
    CHECK_STATUS(tensor_to_f32(b, bv), FX_OK);
    CHECK_STATUS(tensor_to_f32(out, ov), FX_OK);
    const double ulp = ldexp(1.0, tensor_exp(out)), top = 32767.0 * ulp;
    int64_t bad = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0.0;
            for (int64_t k = 0; k < K; k++) s += (double)av[i * K + k] * (double)bv[k * N + j];
            const double want = s > top ? top : s < -top ? -top : s;
            bad += fabs((double)ov[i * N + j] - want) > 0.5 * ulp;
        }
    CHECK(bad == 0, "%s: %lld of %lld outputs beyond half a unit of the fp64 product", what,
          (long long)bad, (long long)(M * N));
    free(av);
    free(bv);
    free(ov);
}

/* Whether the route's outputs of the sequences are marked disposable (fx_storage.disposable,
 * as the trainer's activations): the route then rounds straight into them (counted by
 * fx_shared_matmul_direct) instead of into a buffer copied in afterwards. */
static int g_disposable;

/* Whether the active level's kernel rounds an [M, K] x [K, N] product itself (AMX in
 * registers, the register-tile driver from a column of tiles in cache): the route's "in
 * registers" runs. */
static int rounds_in_registers(int64_t M, int64_t K, int64_t N)
{
    const fx_backend *be = fx_backend_active();
    return be->gemm.i16_rounds && be->gemm.i16_rounds(M, K, N);
}

/* Whether the route takes a product whose exponent guess did not hold lately: where the
 * level's kernel rounds it on AMX, or on register tiles that the level lets take them
 * (gemm.i16_unsteady_rounds). */
static int rounds_unsteady(int64_t M, int64_t K, int64_t N)
{
    const fx_backend *be = fx_backend_active();
    return (be->gemm.i16_amx && fx_gemm_i16_amx_rounds(M, K, N)) ||
           (be->gemm.i16_unsteady_rounds && rounds_in_registers(M, K, N));
}

/* The level's answers at the edges of what it rounds: none on the portable level; K up to one
 * K block (384) everywhere else, up to a group of four on the VNNI kernels (1,536; AMX takes up
 * to FX_GEMM_I16_AMX_ROUND_MAX_K), the narrow tile (N <= 16) included, and not beyond. */
static void check_rounds_limits(void)
{
    const fx_backend *be = fx_backend_active();
    int (*const q)(int64_t, int64_t, int64_t) = be->gemm.i16_rounds;
    if (!q) {
        CHECK(strcmp(be->name, "scalar") == 0, "%s: no rounding on a SIMD level", be->name);
        return;
    }
    const int groups = q == fx_flex_matmul_avx512vnni_rounds || q == fx_flex_matmul_amx_rounds;
    CHECK(q(40, 384, 16) && q(150, 384, 70) && q(150, 1, 70), "%s: K of one block", be->name);
    CHECK(!groups || (q(150, 1536, 70) && q(150, 1536, 16)), "%s: K of four blocks", be->name);
    CHECK(groups || (!q(150, 385, 70) && !q(150, 385, 16)), "%s: K past one block", be->name);
    CHECK(q == fx_flex_matmul_amx_rounds || !q(150, 1537, 70), "%s: K past a group", be->name);
}

/* The operands a [M, K] and b [K, N] of a sequence of products into twin outputs with the same
 * history, traced: fast through the route, ref through the dispatcher. */
typedef struct twin_products {
    tensor_t *a, *b, *fast, *ref;
} twin_products;

static twin_products twin_products_new(fmt_t fo, fmt_t fa, fmt_t fb, int64_t M, int64_t K,
                                       int64_t N)
{
    const int64_t sa[2] = {M, K}, sb[2] = {K, N}, so[2] = {M, N};
    twin_products t = {tensor_new(fa, 2, sa), tensor_new(fb, 2, sb), tensor_new(fo, 2, so),
                       tensor_new(fo, 2, so)};
    tensor_trace_enable(t.fast, 1);
    tensor_trace_enable(t.ref, 1);
    if (g_disposable) fx_tensor_set_disposable(t.fast);
    return t;
}

/* One write of the sequence: a's values N(0, scale^2) and b's N(0, 1), drawn from the same
 * seed at every step (the maxima stay put between changes of scale), multiplied into both
 * twins. Returns whether the two writes are the same; *taken: whether the route took the
 * product (its counter moved); *kept: whether it also kept its first rounding (no miss). */
static int twin_products_step(twin_products *t, double scale, uint64_t seed, const char *what,
                              int step, int *taken, int *kept)
{
    test_rng vals;
    test_rng_seed(&vals, seed);
    fill(t->a, scale, &vals);
    fill(t->b, 1.0, &vals);
    const int64_t before = fx_shared_matmul_taken(), missed = fx_shared_matmul_missed();
    CHECK_STATUS(tensor_matmul(t->fast, t->a, t->b), FX_OK);
    *taken = fx_shared_matmul_taken() > before;
    *kept = *taken && fx_shared_matmul_missed() == missed;
    fx_shared_matmul_set_enabled(0);
    CHECK_STATUS(tensor_matmul(t->ref, t->a, t->b), FX_OK);
    fx_shared_matmul_set_enabled(1);
    return test_same_writes(t->fast, t->ref, what, step);
}

static void twin_products_free(twin_products *t)
{
    tensor_free(t->a);
    tensor_free(t->b);
    tensor_free(t->fast);
    tensor_free(t->ref);
}

/* A sequence of products into twin outputs with the same history: the route's and the
 * dispatcher's. */
static void check_sequence(fmt_t fo, fmt_t fa, fmt_t fb, int64_t M, int64_t K, int64_t N,
                           test_rng *r)
{
    twin_products t = twin_products_new(fo, fa, fb, M, K, N);
    char what[160];
    snprintf(what, sizeof what, "fmt %d = fmt %d [%lld, %lld] @ fmt %d [%lld, %lld]", (int)fo,
             (int)fa, (long long)M, (long long)K, (int)fb, (long long)K, (long long)N);
    /* steady scales (the route is taken once FX_GUESS_STEADY_WRITES guesses held), a jump of
     * 2^8 (a FLEX16_5 overflow, recomputed; a DFP16 exponent that moves), steady again, and a
     * fall */
    const double scale[] = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 256.0, 256.0, 256.0,
                            256.0, 256.0, 256.0, 256.0, 1e-3, 1e-3};
    const int steps = (int)(sizeof scale / sizeof scale[0]);
    const int64_t taken0 = fx_shared_matmul_taken(), missed0 = fx_shared_matmul_missed();
    const int64_t rerun0 = fx_shared_matmul_rerun(), inreg0 = fx_shared_matmul_in_registers();
    const int64_t uncovered0 = fx_shared_matmul_not_covered();
    const int64_t dry0 = fx_shared_matmul_asked_dry(), direct0 = fx_shared_matmul_direct();
    const int64_t adopted0 = fx_shared_matmul_adopted();
    int checked = 0, taken_unsteady = 0;
    for (int step = 0; step < steps; step++) {
        int taken, kept;
        if (!twin_products_step(&t, scale[step], 77, what, step, &taken, &kept)) break;
        if (kept && checked++ < 2) check_reference(t.fast, t.a, t.b, what);
        /* the jump's overflow (step 7) was recomputed: FLEX16_5's guess is not steady for the
         * next FX_GUESS_STEADY_WRITES writes, which the route takes only where the level's
         * kernel rounds the product itself (a miss there costs less than the stage saves) */
        if (fo == FMT_FLEX16_5 && step > 7 && step <= 7 + FX_GUESS_STEADY_WRITES)
            taken_unsteady += taken;
    }
    if (fo == FMT_FLEX16_5) {
        const int want = rounds_unsteady(M, K, N) ? FX_GUESS_STEADY_WRITES : 0;
        CHECK(taken_unsteady == want, "%s: %d FLEX16_5 writes taken right after a recomputed "
              "overflow, not %d", what, taken_unsteady, want);
    }
    (void)r;
    const int64_t taken = fx_shared_matmul_taken() - taken0;
    const int64_t missed = fx_shared_matmul_missed() - missed0;
    /* steady from the fifth write (four guesses held) up to the jump: at least writes 5-7 */
    CHECK(taken - missed >= 3, "%s: %lld products kept their blocked rounding", what,
          (long long)(taken - missed));
    CHECK(checked > 0, "%s: no product taken to check against fp64", what);
    const int64_t direct = fx_shared_matmul_direct() - direct0;
    CHECK(direct == (g_disposable ? taken : 0), "%s: %lld of %lld products rounded straight "
          "into a%s output", what, (long long)direct, (long long)taken,
          g_disposable ? " disposable" : "n ordinary");
    /* an ordinary output takes its rounding buffer as its storage at every kept write (all
     * but the misses that went on to the dispatcher), a disposable one never */
    const int64_t adopted = fx_shared_matmul_adopted() - adopted0;
    CHECK(g_disposable ? adopted == 0 : adopted >= taken - missed && adopted <= taken,
          "%s: %lld of %lld products (%lld missed) adopted their buffer (disposable: %d)", what,
          (long long)adopted, (long long)taken, (long long)missed, g_disposable);
    /* the jump misses: a FLEX16_5 prediction overflows (the dispatcher takes over), a DFP16
     * exponent moves (the blocks run again guessing the exact exponent) */
    CHECK(missed >= 1, "%s: no early rounding missed at the jump", what);
    const int64_t rerun = fx_shared_matmul_rerun() - rerun0;
    CHECK(fo == FMT_DFP16 ? rerun >= 1 : rerun == 0, "%s: %lld second runs", what,
          (long long)rerun);
    const int64_t inreg = fx_shared_matmul_in_registers() - inreg0;
    const int64_t uncovered = fx_shared_matmul_not_covered() - uncovered0;
    const int64_t dry = fx_shared_matmul_asked_dry() - dry0;
    if (rounds_in_registers(M, K, N)) {
        CHECK(inreg >= 3, "%s: %lld products rounded in registers", what, (long long)inreg);
        /* the jump of 2^8 saturates sums at the guess before it: FLEX16_5 runs the blocks, a
         * DFP16 write is asked for its exponent and runs again in registers */
        if (fo == FMT_DFP16)
            CHECK(dry >= 1 && uncovered == 0, "%s: %lld dry asks, %lld runs in blocks", what,
                  (long long)dry, (long long)uncovered);
        else
            CHECK(uncovered >= 1 && dry == 0, "%s: %lld runs in blocks, %lld dry asks", what,
                  (long long)uncovered, (long long)dry);
    } else
        CHECK(inreg == 0, "%s: %lld products rounded in registers by a level that cannot", what,
              (long long)inreg);
    twin_products_free(&t);
}

/* A DFP16 output whose exponent moves at every write (scales 1 and 256 in turn), so that its
 * guess never holds: where the level rounds the product and takes such guesses
 * (rounds_unsteady) the route still takes it
 * (from the third write on, every write), each miss runs it again there (no product goes on to
 * the dispatcher: as many second runs as misses), and every write is the dispatcher's bit for
 * bit; where it does not, the dispatcher keeps every such product from the third write on (the
 * second is steady: one write, which held the initial exponent, is a history without a miss). */
static void check_unsteady_dfp16(int64_t M, int64_t K, int64_t N)
{
    twin_products t = twin_products_new(FMT_DFP16, FMT_FLEX16_5, FMT_DFP16, M, K, N);
    char what[120];
    snprintf(what, sizeof what, "unsteady DFP16 [%lld, %lld] @ [%lld, %lld]", (long long)M,
             (long long)K, (long long)K, (long long)N);
    const int steps = 10;
    int64_t taken_late = 0;
    const int64_t missed0 = fx_shared_matmul_missed(), rerun0 = fx_shared_matmul_rerun();
    const int64_t inreg0 = fx_shared_matmul_in_registers();
    const int64_t uncovered0 = fx_shared_matmul_not_covered();
    for (int step = 0; step < steps; step++) {
        int taken, kept;
        if (!twin_products_step(&t, step % 2 ? 256.0 : 1.0, 55, what, step, &taken, &kept))
            break;
        if (step >= 2) taken_late += taken;
        if (step == steps - 1 && taken_late) check_reference(t.fast, t.a, t.b, what);
    }
    const int64_t missed = fx_shared_matmul_missed() - missed0;
    const int64_t rerun = fx_shared_matmul_rerun() - rerun0;
    if (rounds_unsteady(M, K, N)) {
        CHECK(taken_late == steps - 2, "%s: %lld of %d writes taken", what,
              (long long)taken_late, steps - 2);
        CHECK(missed >= steps - 2 && rerun == missed, "%s: %lld misses, %lld second runs", what,
              (long long)missed, (long long)rerun);
        /* first runs and second runs alike in registers, none in int64 blocks */
        const int64_t inreg = fx_shared_matmul_in_registers() - inreg0;
        const int64_t uncovered = fx_shared_matmul_not_covered() - uncovered0;
        CHECK(inreg >= taken_late && uncovered == 0, "%s: %lld runs in registers, %lld in blocks",
              what, (long long)inreg, (long long)uncovered);
    } else {
        CHECK(taken_late == 0, "%s: taken %lld times where the level does not round it", what,
              (long long)taken_late);
    }
    twin_products_free(&t);
}

/* Six writes of a @ b into twins, fast through the route and ref through the dispatcher, each
 * the same bits, statistics and trace; where the level rounds [M, K] x [K, N] itself, some of
 * them must have been rounded so. */
static void steady_twin_writes(tensor_t *fast, tensor_t *ref, const tensor_t *a,
                               const tensor_t *b, int64_t M, int64_t K, int64_t N,
                               const char *what)
{
    const int64_t inreg0 = fx_shared_matmul_in_registers();
    for (int step = 0; step < 6; step++) {
        CHECK_STATUS(tensor_matmul(fast, a, b), FX_OK);
        fx_shared_matmul_set_enabled(0);
        CHECK_STATUS(tensor_matmul(ref, a, b), FX_OK);
        fx_shared_matmul_set_enabled(1);
        if (!test_same_writes(fast, ref, what, step)) break;
    }
    if (rounds_in_registers(M, K, N))
        CHECK(fx_shared_matmul_in_registers() - inreg0 >= 1, "%s: not rounded in registers",
              what);
}

/* DFP16 operands of the integer values av [M, K] and bv [K, N] (both exponent 0), written six
 * times into twin outputs, the route's and the dispatcher's, each write the same bits; the
 * last one within half a unit of fp64, and where the level rounds in registers the steady
 * writes must have taken that route. Returns the route's output (the caller frees it). */
static tensor_t *integer_steady_writes(const float *av, const float *bv, int64_t M, int64_t K,
                                       int64_t N, const char *what)
{
    const int64_t sa[2] = {M, K}, sb[2] = {K, N}, so[2] = {M, N};
    tensor_t *a = tensor_new(FMT_DFP16, 2, sa), *b = tensor_new(FMT_DFP16, 2, sb);
    tensor_t *fast = tensor_new(FMT_DFP16, 2, so), *ref = tensor_new(FMT_DFP16, 2, so);
    CHECK_STATUS(tensor_from_f32(a, av), FX_OK);
    CHECK_STATUS(tensor_from_f32(b, bv), FX_OK);
    CHECK(tensor_exp(a) == 0 && tensor_exp(b) == 0, "%s: operand exponents %d, %d", what,
          tensor_exp(a), tensor_exp(b));
    steady_twin_writes(fast, ref, a, b, M, K, N, what);
    check_reference(fast, a, b, what);
    tensor_free(a);
    tensor_free(b);
    tensor_free(ref);
    return fast;
}

/* Integer-valued DFP16 products whose output exponent, and so the rounding's shift, is the
 * target s, with sums at and beside the rounding's edges at that shift: ties (2m + 1) 2^(s-1)
 * of both parities and signs and one unit either side of them, the underflow bound 2^(s-1)
 * and its neighbours, zero, and the largest |sum| on the positive or the negative side.
 * Written six times with the same operands (the route is taken once its guess has held), each
 * write the dispatcher's bit for bit. Where the AMX kernel rounds in registers, the steady
 * writes must take that route; with K <= 128 it rounds in int32 lanes, whose two branches
 * (s < 16, s >= 16) and int64 keys for the largest |sum| these shifts cover.
 *   A's rows 0 and 1 and B's rows 2 .. K - 2 (`big` each, at most 32767 in A's) make the
 *   largest sums, about 17000 2^s, of opposite signs; where neg_larger row 0 is the negative
 *   one and one unit of `big` larger; the other rows
 *   take a0 in column 0 and a1 in column 1, against B's row 0 (16384) and row 1 (+1 or -1
 *   by column), so their sums are 16384 a0 +- a1; column K - 1 of A holds 32767 against a
 *   zero row of B, so that both operands keep exponent 0 (B's largest value is 16384 or
 *   32767). With big = 32767 the norms refuse the fast kernel on the tile of rows 0 and 1
 *   (an any-data kernel, rounded from the column's buffer); with big = 8192 every segment's
 *   bound passes and the fast tiles of a product of one K block round their own sums
 *   (fx_gemm_i16_rounded_tiles must move where the level has them; tiles_off: the same
 *   writes with that switched off, which must then not move). */
static void check_rounding_edges(int64_t K, int s, int neg_larger, int32_t big, int tiles_off)
{
    const int64_t M = 32, N = 32;
    float *av = calloc((size_t)(M * K), sizeof *av), *bv = calloc((size_t)(K * N), sizeof *bv);
    const double bigd = big;
    for (int64_t j = 0; j < N; j++) {
        bv[0 * N + j] = 16384.0f;
        bv[1 * N + j] = j % 3 == 1 ? -1.0f : 1.0f;
        for (int64_t k = 2; k <= K - 2; k++) bv[k * N + j] = (float)big;
    }
    /* rows 0 and 1: sums big sum_k A[r][k] of about 17000 2^s, of both signs (big = 32767,
     * s = 1, 2: 2 and 3 units of 32767, with no room for the extra unit) */
    const int units = big == 32767 && s <= 2;
    const double target = units ? (s + 1) * 32767.0 : 17000.0 * ldexp(1.0, s);
    const float sign = neg_larger ? -1.0f : 1.0f;
    double left = floor(target / bigd + 0.5);
    int64_t k = 2;
    for (; k <= K - 2 && left > 0; k++) {
        const double take = left < bigd ? left : bigd;
        av[0 * K + k] = sign * (float)take;
        av[1 * K + k] = -sign * (float)take;
        left -= take;
    }
    CHECK(left == 0 && k <= K - 2, "K %lld cannot reach 2^%d", (long long)K, s);
    if (neg_larger && !units) av[0 * K + k] = -1.0f; /* one unit of big more on that side */
    av[2 * K + K - 1] = 32767.0f;
    /* the other rows: 16384 a0 + a1 = the sum wanted, 0 <= a1 < 16384 */
    const double half = ldexp(1.0, s - 1);
    double sums[32];
    int n = 0;
    for (int m = -3; m <= 3; m++)
        for (int d = -1; d <= 1; d++)
            sums[n++] = m == 0 ? (double)d : (2.0 * m + (m > 0 ? -1 : 1)) * half + d;
    for (int d = -1; d <= 1; d++) { /* +-(2^(s-1) + d): the underflow bound */
        sums[n++] = half + d;
        sums[n++] = -(half + d);
    }
    CHECK(3 + n <= M, "%d sums in %lld rows", n, (long long)M);
    for (int r = 0; r < n && 3 + r < M; r++) {
        const double a0 = floor(sums[r] / 16384.0);
        av[(3 + r) * K + 0] = (float)a0;
        av[(3 + r) * K + 1] = (float)(sums[r] - 16384.0 * a0);
    }
    char what[128];
    snprintf(what, sizeof what, "rounding edges, K %lld, shift %d, %s side larger, values %d%s",
             (long long)K, s, neg_larger ? "negative" : "positive", (int)big,
             tiles_off ? ", tiles' rounding off" : "");
    const int64_t rounded0 = fx_gemm_i16_rounded_tiles();
    if (tiles_off) fx_gemm_i16_tiles_round_set_enabled(0);
    tensor_t *fast = integer_steady_writes(av, bv, M, K, N, what);
    fx_gemm_i16_tiles_round_set_enabled(1);
    const int64_t rounded = fx_gemm_i16_rounded_tiles() - rounded0;
    const fx_backend *be = fx_backend_active();
    if (be->gemm.i16_rounds && !be->gemm.i16_amx && K <= FX_GEMM_I16_KC && big != 32767)
        CHECK(tiles_off ? rounded == 0 : rounded > 0, "%s: %lld tiles rounded their own sums",
              what, (long long)rounded);
    CHECK(tensor_exp(fast) == s, "%s: the output's exponent is %d", what, tensor_exp(fast));
    double underflow = -1;
    CHECK_STATUS(tensor_stat(fast, "underflow", &underflow), FX_OK);
    CHECK(underflow > 0, "%s: no underflow counted", what);
    tensor_free(fast);
    free(av);
    free(bv);
}

/* The register-tile driver's rounding from columns of tiles (fx_gemm_i16_rounds) on every
 * kernel it has, forced in turn (auto, split, wrap, fast: the wrap kernel's groups of K blocks
 * in one call, the fast kernel's blocks accumulated in the column's buffer), on full-range
 * integer operands (every tile an any-data one unless forced fast, which the norms then refuse
 * tile by tile), on small ones (every tile fast) and on operands full-range in their first 300
 * values of K only (tiles that take an any-data kernel on the first K block and the fast one
 * on the others, a kernel call per block, where the norms are tested after the first block:
 * forced FAST, or AUTO where the first group, its probe, holds them all), and on operands
 * whose A rows are full-range in every other tile of 6 rows (a column of tiles where fast
 * tiles, which round their own sums on a product of one K block, alternate with any-data
 * ones, rounded from the column's buffer; at K = 300 those take the wrap kernel's call per
 * group, at 200 the split kernel): more rows than a row block (144), ragged columns and the
 * narrow tile, K of one block (383, 300, 200), of four (1,536, beyond the int64 blocks'
 * limit) and odd; each write the dispatcher's bit for bit and within half a unit of fp64, in
 * registers where the level rounds the shape. The fast tiles of a product of one K block
 * must have rounded their own sums (fx_gemm_i16_rounded_tiles) on every register tile but
 * the AVX-512 levels' narrow one, and no tile elsewhere. */
static void check_forced_kernels(test_rng *r)
{
    static const int kernels[] = {FX_GEMM_I16_KERNEL_AUTO, FX_GEMM_I16_KERNEL_SPLIT,
                                  FX_GEMM_I16_KERNEL_WRAP, FX_GEMM_I16_KERNEL_FAST};
    static const int64_t shapes[][3] = {
        {150, 1536, 70}, {40, 383, 16}, {7, 1001, 33}, {40, 200, 70}, {40, 300, 70}};
    const int kernel0 = fx_gemm_i16_forced_kernel();
    for (size_t ki = 0; ki < sizeof kernels / sizeof kernels[0]; ki++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int kind = 0; kind <= 3; kind++) { /* full range, small, mixed, mixed rows */
                const int64_t M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
                /* exponent 0 for both: a value of 32767 in each; small: the rest below 64;
                 * mixed: small from k = 300; mixed rows: A full-range in rows 6 .. 11,
                 * 18 .. 23, ..., B small */
                const float top = 32767.0f;
                float *av = malloc((size_t)(M * K) * sizeof *av);
                float *bv = malloc((size_t)(K * N) * sizeof *bv);
                for (int64_t i = 0; i < M * K; i++) {
                    const int small = kind == 1 || (kind == 2 && i % K >= 300) ||
                                      (kind == 3 && (i / K / 6) % 2 == 0);
                    const int64_t lim = small ? 63 : 32767;
                    av[i] = i == 0 ? top : (float)test_rng_range(r, -lim, lim);
                }
                for (int64_t i = 0; i < K * N; i++) {
                    const int small = kind == 1 || kind == 3 || (kind == 2 && i / N >= 300);
                    const int64_t lim = small ? 63 : 32767;
                    bv[i] = i == 0 ? top : (float)test_rng_range(r, -lim, lim);
                }
                CHECK_STATUS(fx_gemm_i16_force_kernel(kernels[ki]), FX_OK);
                int64_t fast0, split0, fast1, split1;
                fx_gemm_i16_tile_counts(&fast0, &split0);
                const int64_t rounded0 = fx_gemm_i16_rounded_tiles();
                char what[96];
                snprintf(what, sizeof what, "kernel %s, %s, [%lld, %lld] @ [%lld, %lld]",
                         fx_gemm_i16_kernel_name(kernels[ki]),
                         kind == 0   ? "full range"
                         : kind == 1 ? "small"
                         : kind == 2 ? "mixed"
                                     : "mixed rows",
                         (long long)M, (long long)K, (long long)K, (long long)N);
                tensor_free(integer_steady_writes(av, bv, M, K, N, what));
                const int narrow = fx_gemm_i16_narrow(N); /* under the forced kernel */
                CHECK_STATUS(fx_gemm_i16_force_kernel(kernel0), FX_OK);
                /* the kernels meant to run did (the register tiles count them; AMX and the
                 * portable level do not) */
                fx_gemm_i16_tile_counts(&fast1, &split1);
                const int64_t fast = fast1 - fast0, split = split1 - split0;
                const int64_t rounded = fx_gemm_i16_rounded_tiles() - rounded0;
                const fx_backend *be = fx_backend_active();
                const int counted = be->gemm.i16_rounds && !be->gemm.i16_amx;
                const int any_only = kernels[ki] == FX_GEMM_I16_KERNEL_SPLIT ||
                                     kernels[ki] == FX_GEMM_I16_KERNEL_WRAP;
                if (counted && any_only)
                    CHECK(fast == 0 && split > 0, "%s: %lld fast, %lld any-data tiles", what,
                          (long long)fast, (long long)split);
                else if (counted) /* mixed: the fast kernel after the first K block where
                                     * norms are tested there (forced FAST: no probe group) */
                    CHECK((kind != 0 || split > 0) && (kind != 1 || fast > 0) &&
                              (kind != 2 ||
                               (split > 0 && (K <= FX_GEMM_I16_KC || fast > 0 ||
                                              kernels[ki] != FX_GEMM_I16_KERNEL_FAST))) &&
                              (kind != 3 || fast > 0),
                          "%s: %lld fast, %lld any-data tiles", what, (long long)fast,
                          (long long)split);
                /* every register tile but the AVX-512 levels' narrow one (N <= 16 under
                 * AUTO), which has no rounding of its own */
                const int narrow_tile = narrow && strncmp(be->name, "avx512", 6) == 0;
                const int tiles_round = counted && !narrow_tile && K <= FX_GEMM_I16_KC;
                if (tiles_round && fast > 0)
                    CHECK(rounded > 0 && rounded <= fast,
                          "%s: %lld of %lld fast tiles rounded their sums", what,
                          (long long)rounded, (long long)fast);
                else if (counted)
                    CHECK(rounded == 0, "%s: %lld tiles rounded their sums", what,
                          (long long)rounded);
                free(av);
                free(bv);
            }
}

/* Sums past 2^31 in tiles of several chains at a small shift: integer DFP16 operands (exponent
 * 0: a 32767 in each, against a zero row or column) whose first `nk` values of k are 4096 in
 * A and 1 in B for six writes (sums of nk 2^12, a steady small exponent), then `b` in B, so
 * that every sum is nk 4096 b: with nk = 256, b = +-4096 the sums are +-2^32, which read 0 in
 * an int32 lane; with nk = 192, b = 4096, 3 2^30, which reads -2^30, a value that would fit.
 * The jump's fast tiles (chains of 7 norm segments, of one in the tile and panel that hold
 * the 32767s; before the jump one chain) round their own sums at the shift guessed from the writes before, must
 * see the overflow from the exact maximum, and must have rounded (DFP16:
 * fx_gemm_i16_rounded_tiles moves where the level has them); every write the dispatcher's bit
 * for bit, FLEX16_5 and DFP16. */
static void check_wrapping_sums(fmt_t fo, int nk, float b)
{
    const int64_t M = 12, K = 384, N = 64;
    twin_products t = twin_products_new(fo, FMT_DFP16, FMT_DFP16, M, K, N);
    float *av = calloc((size_t)(M * K), sizeof *av), *bv = calloc((size_t)(K * N), sizeof *bv);
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < nk; k++) av[i * K + k] = 4096.0f;
    av[K - 2] = 32767.0f;       /* row 0, against B's zero row K - 2 */
    bv[(K - 1) * N] = 32767.0f; /* column 0, against A's zero column K - 1 */
    CHECK_STATUS(tensor_from_f32(t.a, av), FX_OK);
    char what[96];
    snprintf(what, sizeof what, "sums of %d x 4096 x %g at a small shift, fmt %d", nk, (double)b,
             (int)fo);
    int64_t rounded = 0;
    for (int step = 0; step < 8; step++) {
        const float bval = step < 6 ? 1.0f : b;
        for (int64_t k = 0; k < nk; k++)
            for (int64_t j = 0; j < N; j++) bv[k * N + j] = bval;
        CHECK_STATUS(tensor_from_f32(t.b, bv), FX_OK);
        CHECK(tensor_exp(t.a) == 0 && tensor_exp(t.b) == 0, "%s: operand exponents %d, %d",
              what, tensor_exp(t.a), tensor_exp(t.b));
        const int64_t rounded0 = fx_gemm_i16_rounded_tiles();
        CHECK_STATUS(tensor_matmul(t.fast, t.a, t.b), FX_OK);
        if (step == 6) rounded = fx_gemm_i16_rounded_tiles() - rounded0;
        fx_shared_matmul_set_enabled(0);
        CHECK_STATUS(tensor_matmul(t.ref, t.a, t.b), FX_OK);
        fx_shared_matmul_set_enabled(1);
        if (!test_same_writes(t.fast, t.ref, what, step)) break;
    }
    /* (a FLEX16_5 output keeps exponent 0 through this sequence, at which the product has
     * nothing to round) */
    const fx_backend *be = fx_backend_active();
    if (be->gemm.i16_rounds && !be->gemm.i16_amx && fo == FMT_DFP16)
        CHECK(rounded > 0, "%s: the jump's tiles did not round their own sums", what);
    check_reference(t.fast, t.a, t.b, what);
    free(av);
    free(bv);
    twin_products_free(&t);
}

/* The bound that spares a fast tile its exact maximum at shifts above 16: two tiles whose
 * largest sums share their high words, 2^16 45000 + 10 (row 0, the first tile) and
 * 2^16 45000 + 40000 (row 6, the second), at shift 17 (sums 8192 a against B's 8192, one
 * norm segment a chain, and a unit row for the low part). The second tile's bound must still
 * pass the first one's maximum, so that its own is found: the write's largest |sum| is
 * compared with the dispatcher's. With neg, both sums negative (high words -45001, the
 * bound's other side). Columns 1 .. N - 1 are zero but for B's 16384 against A's zero column
 * (exponent 0), as A's 32767 in row 11 against B's zero row. */
static void check_tile_max_order(int neg)
{
    const int64_t M = 12, K = 64, N = 32;
    float *av = calloc((size_t)(M * K), sizeof *av), *bv = calloc((size_t)(K * N), sizeof *bv);
    for (int64_t k = 0; k < 48; k++) bv[k * N] = 8192.0f;
    bv[48 * N] = 1.0f;
    bv[(K - 2) * N + N - 1] = 16384.0f;
    av[11 * K + K - 1] = 32767.0f;
    const int64_t target[2] = {INT64_C(65536) * 45000 + 10, INT64_C(65536) * 45000 + 40000};
    for (int r = 0; r < 2; r++) {
        const int64_t row = 6 * r;
        int64_t q = target[r] / 8192;
        const float sign = neg ? -1.0f : 1.0f;
        av[row * K + 48] = sign * (float)(target[r] % 8192);
        for (int64_t k = 0; k < 48 && q > 0; k++) {
            const int64_t take = q < 8192 ? q : 8192;
            av[row * K + k] = sign * (float)take;
            q -= take;
        }
        CHECK(q == 0, "row %lld cannot reach its sum", (long long)row);
    }
    const int64_t rounded0 = fx_gemm_i16_rounded_tiles();
    tensor_t *fast = integer_steady_writes(av, bv, M, K, N, "tiles' maxima in one high word");
    CHECK(tensor_exp(fast) == 17, "tiles' maxima in one high word: exponent %d", tensor_exp(fast));
    double mx = 0;
    CHECK_STATUS(tensor_stat(fast, "true_max", &mx), FX_OK);
    CHECK(mx == (double)target[1], "tiles' maxima in one high word: largest |sum| %.17g",
          mx);
    const fx_backend *be = fx_backend_active();
    if (be->gemm.i16_rounds && !be->gemm.i16_amx)
        CHECK(fx_gemm_i16_rounded_tiles() > rounded0,
              "tiles' maxima in one high word: no tile rounded its own sums");
    tensor_free(fast);
    free(av);
    free(bv);
}

/* Shifts beyond 32, which the AVX2 rounding takes one by one: a FLEX16_5 output whose window
 * starts `shift` above the sums' exponent, so that every write is clamped there, from DFP16
 * integer operands (exponent 0) whose first row and column are all 32767 and the rest uniform:
 * sums from 0 to K 2^30 (2^38.6 at K = 384), which round to 0 (underflows) up to a few hundred
 * units at shifts 31 to 37. Written six times into twins, the route's and the dispatcher's,
 * each write the same bits and statistics, and in registers where the level rounds the shape. */
static void check_clamped_shift(int64_t M, int64_t K, int64_t N, int shift, test_rng *r)
{
    const int64_t sa[2] = {M, K}, sb[2] = {K, N}, so[2] = {M, N};
    tensor_t *a = tensor_new(FMT_DFP16, 2, sa), *b = tensor_new(FMT_DFP16, 2, sb);
    tensor_t *fast = tensor_new(FMT_FLEX16_5, 2, so), *ref = tensor_new(FMT_FLEX16_5, 2, so);
    float *av = malloc((size_t)(M * K) * sizeof *av), *bv = malloc((size_t)(K * N) * sizeof *bv);
    for (int64_t i = 0; i < M * K; i++)
        av[i] = i < K ? 32767.0f : (float)test_rng_range(r, -32767, 32767);
    for (int64_t i = 0; i < K * N; i++)
        bv[i] = i % N == 0 ? 32767.0f : (float)test_rng_range(r, -32767, 32767);
    CHECK_STATUS(tensor_from_f32(a, av), FX_OK);
    CHECK_STATUS(tensor_from_f32(b, bv), FX_OK);
    free(av);
    free(bv);
    const int lo = tensor_exp(a) + tensor_exp(b) + shift;
    CHECK_STATUS(tensor_set_exp_window(fast, lo), FX_OK);
    CHECK_STATUS(tensor_set_exp_window(ref, lo), FX_OK);
    char what[96];
    snprintf(what, sizeof what, "clamped at shift %d, [%lld, %lld] @ [%lld, %lld]", shift,
             (long long)M, (long long)K, (long long)K, (long long)N);
    steady_twin_writes(fast, ref, a, b, M, K, N, what);
    CHECK(tensor_exp(fast) == lo, "%s: exponent %d, window from %d", what, tensor_exp(fast), lo);
    double uf = 0.0, mx = 0.0;
    CHECK_STATUS(tensor_stat(fast, "underflow", &uf), FX_OK);
    CHECK(uf > 0.0, "%s: no underflow counted", what);
    /* the all-32767 row and column's sum K 2^30 keeps a nonzero mantissa up to shift 38 */
    CHECK_STATUS(tensor_stat(fast, "stored_max", &mx), FX_OK);
    CHECK(mx >= ldexp(1.0, lo), "%s: every mantissa 0 (stored max %g)", what, mx);
    double clamped = 0.0;
    CHECK_STATUS(tensor_stat(fast, "clamped", &clamped), FX_OK);
    CHECK(clamped == 1.0, "%s: the exponent was not clamped", what);
    tensor_free(a);
    tensor_free(b);
    tensor_free(fast);
    tensor_free(ref);
}

/* The int32 rounding's bound on its accumulators (K <= 128): rows and columns of 32767
 * (whose byte products make HL + LH and LL their largest: X at its top, 2130706560 at K =
 * 128) and of -32513 (high byte -128, low byte 255: HL + LH at its lowest), and of the two
 * mixed, so that every sum is near 2^37 in size, each write the dispatcher's bit for bit. */
static void check_extreme_accumulators(int64_t K)
{
    const int64_t M = 32, N = 48;
    float *av = malloc((size_t)(M * K) * sizeof *av), *bv = malloc((size_t)(K * N) * sizeof *bv);
    for (int64_t i = 0; i < M * K; i++) av[i] = (i / K) % 3 == 0 ? -32513.0f : 32767.0f;
    for (int64_t i = 0; i < K * N; i++) bv[i] = (i % N) % 2 ? -32513.0f : 32767.0f;
    char what[64];
    snprintf(what, sizeof what, "extreme accumulators, K %lld", (long long)K);
    tensor_free(integer_steady_writes(av, bv, M, K, N, what));
    free(av);
    free(bv);
}

/* A FLEX16_5 output whose preset keeps overflows ("published"): at a jump the guess saturates,
 * the product runs in blocks and the write keeps that saturated rounding, which must be the
 * dispatcher's, statistics included. B > 1: tensor_bmm of B items, of which only the last
 * jumps, so that the items before it have been rounded in registers when the run falls back
 * to blocks (whose statistics must then not count them twice). */
static void check_kept_overflow(int64_t B, int64_t M, int64_t K, int64_t N)
{
    const int64_t sa[3] = {B, M, K}, sb[3] = {B, K, N}, so[3] = {B, M, N};
    const int nd = B > 1 ? 3 : 2, o = B > 1 ? 0 : 1;
    tensor_t *a = tensor_new(FMT_DFP16, nd, sa + o), *b = tensor_new(FMT_DFP16, nd, sb + o);
    tensor_t *fast = tensor_new(FMT_FLEX16_5, nd, so + o);
    tensor_t *ref = tensor_new(FMT_FLEX16_5, nd, so + o);
    CHECK_STATUS(tensor_set_autoflex(fast, "published"), FX_OK);
    CHECK_STATUS(tensor_set_autoflex(ref, "published"), FX_OK);
    char what[120];
    snprintf(what, sizeof what, "kept overflow %lld x [%lld, %lld] @ [%lld, %lld]", (long long)B,
             (long long)M, (long long)K, (long long)K, (long long)N);
    const double scale[] = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 256.0, 256.0};
    const int64_t taken0 = fx_shared_matmul_taken(), uncovered0 = fx_shared_matmul_not_covered();
    int saturated_kept = 0;
    for (int step = 0; step < (int)(sizeof scale / sizeof scale[0]); step++) {
        test_rng vals;
        test_rng_seed(&vals, 5);
        fill_tail(a, scale[step], B > 1 ? M * K : 0, &vals);
        fill(b, 1.0, &vals);
        CHECK_STATUS(B > 1 ? tensor_bmm(fast, a, b, 0, 0) : tensor_matmul(fast, a, b), FX_OK);
        fx_shared_matmul_set_enabled(0);
        CHECK_STATUS(B > 1 ? tensor_bmm(ref, a, b, 0, 0) : tensor_matmul(ref, a, b), FX_OK);
        fx_shared_matmul_set_enabled(1);
        if (!test_same_writes(fast, ref, what, step)) break;
        double sat = 0;
        CHECK_STATUS(tensor_stat(fast, "saturated", &sat), FX_OK);
        saturated_kept += sat > 0;
    }
    CHECK(saturated_kept >= 1, "%s: no saturated write kept", what);
    CHECK(fx_shared_matmul_taken() - taken0 >= 3, "%s: route not taken", what);
    if (rounds_in_registers(M, K, N))
        CHECK(fx_shared_matmul_not_covered() - uncovered0 >= 1, "%s: no run in blocks", what);
    tensor_free(a);
    tensor_free(b);
    tensor_free(fast);
    tensor_free(ref);
}

/* tensor_bmm's sequences likewise: out [B, M, N] = op(a) op(b) per item, items run several
 * at once (each fits a block) or in turn in blocks, against the staged route. At the jump
 * every item scales, or (ramp) item 0 by the jump and the last item by ten times it, so that
 * the first item to saturate is not the largest: a DFP16 product rounded in registers must
 * then run every item to ask for the exponent of the exact largest |sum| (its second run in
 * registers must fit, with no run in blocks). */
static void check_bmm_sequence(fmt_t fo, int64_t B, int64_t M, int64_t K, int64_t N, int ta,
                               int tb, int ramp)
{
    const int64_t sa[3] = {B, ta ? K : M, ta ? M : K}, sb[3] = {B, tb ? N : K, tb ? K : N};
    const int64_t so[3] = {B, M, N};
    tensor_t *a = tensor_new(FMT_FLEX16_5, 3, sa), *b = tensor_new(FMT_DFP16, 3, sb);
    tensor_t *fast = tensor_new(fo, 3, so), *ref = tensor_new(fo, 3, so);
    tensor_trace_enable(fast, 1);
    tensor_trace_enable(ref, 1);
    if (g_disposable) fx_tensor_set_disposable(fast);
    char what[160];
    snprintf(what, sizeof what, "bmm into fmt %d, [%lld, %lld, %lld] x K %lld, trans %d %d",
             (int)fo, (long long)B, (long long)M, (long long)N, (long long)K, ta, tb);
    const double scale[] = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 300.0, 300.0, 300.0};
    const int steps = (int)(sizeof scale / sizeof scale[0]);
    int taken_late = 0;
    const int64_t taken0 = fx_shared_matmul_taken(), missed0 = fx_shared_matmul_missed();
    const int64_t inreg0 = fx_shared_matmul_in_registers();
    const int64_t dry0 = fx_shared_matmul_asked_dry(), uncovered0 = fx_shared_matmul_not_covered();
    const int64_t direct0 = fx_shared_matmul_direct(), adopted0 = fx_shared_matmul_adopted();
    for (int step = 0; step < steps; step++) {
        test_rng vals;
        test_rng_seed(&vals, 99);
        if (ramp)
            fill_scaled(a, tensor_numel(a) / B, scale[step], tensor_numel(a) / B,
                        10.0 * scale[step], &vals); /* item 0 and the last item */
        else
            fill(a, scale[step], &vals);
        fill(b, 1.0, &vals);
        const int64_t before = fx_shared_matmul_taken();
        CHECK_STATUS(tensor_bmm(fast, a, b, ta, tb), FX_OK);
        if (step >= 2) taken_late += fx_shared_matmul_taken() > before;
        fx_shared_matmul_set_enabled(0);
        CHECK_STATUS(tensor_bmm(ref, a, b, ta, tb), FX_OK);
        fx_shared_matmul_set_enabled(1);
        if (!test_same_writes(fast, ref, what, step)) break;
    }
    const int64_t taken = fx_shared_matmul_taken() - taken0;
    const int64_t missed = fx_shared_matmul_missed() - missed0;
    CHECK(taken - missed >= 3 && missed >= 1, "%s: %lld taken, %lld missed", what,
          (long long)taken, (long long)missed);
    const int64_t direct = fx_shared_matmul_direct() - direct0;
    CHECK(direct == (g_disposable ? taken : 0), "%s: %lld of %lld products rounded straight "
          "into the output (disposable: %d)", what, (long long)direct, (long long)taken,
          g_disposable);
    const int64_t adopted = fx_shared_matmul_adopted() - adopted0;
    CHECK(g_disposable ? adopted == 0 : adopted >= taken - missed && adopted <= taken,
          "%s: %lld of %lld products (%lld missed) adopted their buffer (disposable: %d)", what,
          (long long)adopted, (long long)taken, (long long)missed, g_disposable);
    /* a DFP16 output the level rounds is taken at every write from the third, the jump's
     * unsteady ones included */
    if (rounds_unsteady(M, K, N) && fo == FMT_DFP16)
        CHECK(taken_late == steps - 2, "%s: %d of %d writes taken", what, taken_late, steps - 2);
    const int64_t inreg = fx_shared_matmul_in_registers() - inreg0;
    CHECK(rounds_in_registers(M, K, N) ? inreg >= 3 : inreg == 0,
          "%s: %lld products rounded in registers", what, (long long)inreg);
    const int64_t dry = fx_shared_matmul_asked_dry() - dry0;
    const int64_t uncovered = fx_shared_matmul_not_covered() - uncovered0;
    if (rounds_in_registers(M, K, N) && fo == FMT_DFP16)
        CHECK(dry >= 1 && uncovered == 0, "%s: %lld dry asks, %lld runs in blocks", what,
              (long long)dry, (long long)uncovered);
    else if (rounds_in_registers(M, K, N))
        CHECK(dry == 0, "%s: %lld dry asks into FLEX16_5", what, (long long)dry);
    tensor_free(a);
    tensor_free(b);
    tensor_free(fast);
    tensor_free(ref);
}

/* A disposable bmm output that is also one of its operands (out = x b with out = x, or out =
 * a x with out = x; items [40, 40]): the route must take the product (its counter must move)
 * but not round into out while the products still read it. Against the dispatcher's product
 * of a copy of x, at every step, and no write rounded straight into out. */
static void check_bmm_aliased(int out_is_b)
{
    const int64_t sx[3] = {3, 40, 40};
    tensor_t *x = tensor_new(FMT_DFP16, 3, sx), *x0 = tensor_new(FMT_DFP16, 3, sx);
    tensor_t *o = tensor_new(FMT_DFP16, 3, sx), *ref = tensor_new(FMT_DFP16, 3, sx);
    fx_tensor_set_disposable(x);
    const int64_t n = tensor_numel(x), direct0 = fx_shared_matmul_direct();
    const int64_t taken0 = fx_shared_matmul_taken();
    float *got = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * (size_t)n);
    for (int step = 0; step < 8; step++) {
        test_rng vals;
        test_rng_seed(&vals, 5);
        fill(x, 1.0, &vals);
        test_rng_seed(&vals, 5);
        fill(x0, 1.0, &vals);
        fill(o, 1.0, &vals);
        /* reading the exponent settles the fill's deferred write (FLEXPOINT_TEST_DEFER_HOST):
         * an output pending a write has no guess, and the route would not take it */
        CHECK(tensor_exp(x) > -200, "exponent %d", tensor_exp(x));
        CHECK_STATUS(out_is_b ? tensor_bmm(x, o, x, 0, 0) : tensor_bmm(x, x, o, 0, 0), FX_OK);
        fx_shared_matmul_set_enabled(0);
        CHECK_STATUS(out_is_b ? tensor_bmm(ref, o, x0, 0, 0) : tensor_bmm(ref, x0, o, 0, 0),
                     FX_OK);
        fx_shared_matmul_set_enabled(1);
        CHECK_STATUS(tensor_to_f32(x, got), FX_OK);
        CHECK_STATUS(tensor_to_f32(ref, want), FX_OK);
        CHECK(tensor_exp(x) == tensor_exp(ref) &&
                  memcmp(got, want, sizeof(float) * (size_t)n) == 0,
              "bmm into its own operand %c, step %d: differs from the product of a copy",
              out_is_b ? 'b' : 'a', step);
    }
    CHECK(fx_shared_matmul_taken() > taken0, "bmm into its own operand %c: never taken",
          out_is_b ? 'b' : 'a');
    CHECK(fx_shared_matmul_direct() == direct0,
          "bmm into its own operand %c: %lld products rounded straight into it",
          out_is_b ? 'b' : 'a', (long long)(fx_shared_matmul_direct() - direct0));
    free(got);
    free(want);
    tensor_free(x);
    tensor_free(x0);
    tensor_free(o);
    tensor_free(ref);
}

/* An output of at least the scratch cache's smallest block, with a block four times its size
 * cached before every product (as an AMX kernel's packed B is, freed by the product before):
 * the rounding buffer must still be one the output adopts (a fresh block, then the output's
 * old one), at every kept write, and each product the dispatcher's bit for bit. Taking the
 * large block would refuse adoption and copy at every call. */
static void check_adoption_beside_cached_block(void)
{
    const int64_t M = 256, K = 32, N = 2048;
    const size_t out_bytes = (size_t)(M * N) * sizeof(int16_t);
    twin_products t = twin_products_new(FMT_DFP16, FMT_DFP16, FMT_DFP16, M, K, N);
    int kept_writes = 0, taken_writes = 0;
    const int64_t adopted0 = fx_shared_matmul_adopted();
    for (int step = 0; step < 8; step++) {
        fx_scratch big = {.n = 0};
        CHECK(fx_scratch_alloc(&big, (int64_t)(4 * out_bytes), 1) != NULL, "a %zu-byte block",
              4 * out_bytes);
        fx_scratch_free(&big); /* cached */
        int taken, kept;
        if (!twin_products_step(&t, 1.0, 5, "beside a cached block", step, &taken, &kept)) break;
        kept_writes += kept;
        taken_writes += taken;
    }
    /* a first write that missed and ran again also adopts */
    const int64_t adopted = fx_shared_matmul_adopted() - adopted0;
    CHECK(kept_writes >= 3 && adopted >= kept_writes && adopted <= taken_writes,
          "beside a cached block: %lld products adopted their buffer, %d kept their first "
          "rounding, %d taken", (long long)adopted, kept_writes, taken_writes);
    twin_products_free(&t);
}

/* An ordinary output whose rounding buffer becomes its storage (fx_sm_adopt): views made
 * before the products (a reshape and a row slice) share the storage and must read each new
 * product, the same values as the dispatcher's twin; the output freed first, the views keep
 * the storage (read after it, under the sanitizers a use after free); and a product that
 * misses and goes to the dispatcher leaves the values right too. */
static void check_adopted_views(void)
{
    const int64_t M = 40, K = 64, N = 50, flat[1] = {M * N};
    twin_products t = twin_products_new(FMT_FLEX16_5, FMT_DFP16, FMT_DFP16, M, K, N);
    tensor_t *whole = tensor_view_reshape(t.fast, 1, flat);
    tensor_t *rows = tensor_view_slice(t.fast, 0, 10, 30, 1);
    CHECK(whole && rows, "views of the output: %s", flexpoint_last_error());
    float *got = malloc(sizeof(float) * (size_t)(M * N));
    float *want = malloc(sizeof(float) * (size_t)(M * N));
    const double scale[] = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 256.0, 256.0};
    const int64_t adopted0 = fx_shared_matmul_adopted();
    for (int step = 0; step < (int)(sizeof scale / sizeof scale[0]) && whole && rows; step++) {
        int taken, kept;
        if (!twin_products_step(&t, scale[step], 31 + (uint64_t)step, "adopted views", step,
                                &taken, &kept))
            break;
        CHECK_STATUS(tensor_to_f32(t.ref, want), FX_OK);
        CHECK_STATUS(tensor_to_f32(whole, got), FX_OK);
        CHECK(memcmp(got, want, sizeof(float) * (size_t)(M * N)) == 0,
              "step %d: the reshaped view differs from the product", step);
        CHECK_STATUS(tensor_to_f32(rows, got), FX_OK);
        CHECK(memcmp(got, want + 10 * N, sizeof(float) * (size_t)(20 * N)) == 0,
              "step %d: the row slice differs from the product's rows 10-29", step);
    }
    CHECK(fx_shared_matmul_adopted() - adopted0 >= 3, "adopted views: %lld products adopted",
          (long long)(fx_shared_matmul_adopted() - adopted0));
    CHECK_STATUS(tensor_to_f32(t.ref, want), FX_OK);
    tensor_free(t.fast); /* the views hold the storage now */
    t.fast = NULL;
    if (whole) {
        CHECK_STATUS(tensor_to_f32(whole, got), FX_OK);
        CHECK(memcmp(got, want, sizeof(float) * (size_t)(M * N)) == 0,
              "the view differs from the product once the output is freed");
    }
    tensor_free(whole);
    tensor_free(rows);
    twin_products_free(&t);
    free(got);
    free(want);
}

/* Products left to the dispatcher: the counter stays still, the results are its own. */
static void check_not_taken(test_rng *r)
{
    const int64_t s[2] = {40, 40};
    tensor_t *a = tensor_new(FMT_FLEX16_5, 2, s), *b = tensor_new(FMT_DFP16, 2, s);
    tensor_t *f = tensor_new(FMT_FP32, 2, s), *o = tensor_new(FMT_DFP16, 2, s);
    fill(a, 1.0, r);
    fill(b, 1.0, r);
    fill(f, 1.0, r);
    const int64_t before = fx_shared_matmul_taken();
    for (int i = 0; i < 6; i++) { /* steady, but each excluded for its own reason */
        CHECK_STATUS(tensor_matmul(o, a, f), FX_OK);   /* a float operand */
        CHECK_STATUS(tensor_matmul(a, a, b), FX_OK);   /* out is an operand */
        tensor_t *t = tensor_view_transpose(o, 0, 1); /* a transposed output view */
        CHECK_STATUS(tensor_matmul(t, b, b), FX_OK);
        tensor_free(t);
    }
    CHECK(fx_shared_matmul_taken() == before, "an excluded product was taken");
    /* by default a [40, 40] output is too small, and K of 1024 too deep for int64 blocks:
     * taken only where the level's kernel rounds it */
    fx_shared_matmul_set_sizes(0, 0);
    const int64_t sk[2] = {400, 1024}, skb[2] = {1024, 400}, so[2] = {400, 400};
    tensor_t *ak = tensor_new(FMT_DFP16, 2, sk), *bk = tensor_new(FMT_DFP16, 2, skb);
    tensor_t *ok = tensor_new(FMT_DFP16, 2, so);
    fill(ak, 1.0, r);
    fill(bk, 1.0, r);
    for (int i = 0; i < 6; i++) CHECK_STATUS(tensor_matmul(o, b, b), FX_OK);
    CHECK(fx_shared_matmul_taken() == before, "a small product was taken by default");
    const int64_t inreg_deep0 = fx_shared_matmul_in_registers();
    for (int i = 0; i < 6; i++) {
        CHECK_STATUS(tensor_matmul(ok, ak, bk), FX_OK);
        CHECK(tensor_exp(ok) > -200, "exponent %d", tensor_exp(ok)); /* settles, as below */
    }
    const int deep = rounds_in_registers(400, 1024, 400);
    const int64_t deep_taken = fx_shared_matmul_taken() - before;
    /* (where the level takes unsteady guesses, a DFP16 first write is taken too, and its miss
     * runs again in registers) */
    CHECK(deep ? deep_taken >= 1 && fx_shared_matmul_in_registers() - inreg_deep0 >= deep_taken
               : deep_taken == 0,
          "a product of K = 1024 taken %lld times by a level that %s round it",
          (long long)deep_taken, deep ? "does" : "does not");
    const int64_t before2 = fx_shared_matmul_taken();
    /* and with K = 1023 the same output is */
    const int64_t sk2[2] = {400, 1023}, skb2[2] = {1023, 400};
    tensor_t *ak2 = tensor_new(FMT_DFP16, 2, sk2), *bk2 = tensor_new(FMT_DFP16, 2, skb2);
    fill(ak2, 1.0, r);
    fill(bk2, 1.0, r);
    for (int i = 0; i < 6; i++) {
        CHECK_STATUS(tensor_matmul(ok, ak2, bk2), FX_OK);
        /* reading the exponent settles a deferred write (FLEXPOINT_TEST_DEFER_HOST), whose
         * output has no guess while it is pending */
        CHECK(tensor_exp(ok) > -200, "exponent %d", tensor_exp(ok));
    }
    CHECK(fx_shared_matmul_taken() > before2, "a [400, 400] output of K = 1023 was not taken");
    tensor_free(a);
    tensor_free(b);
    tensor_free(f);
    tensor_free(o);
    tensor_free(ak);
    tensor_free(bk);
    tensor_free(ok);
    tensor_free(ak2);
    tensor_free(bk2);
}

int main(void)
{
    test_rng r;
    test_rng_seed(&r, 2026);
    /* M, K, N with small block budgets: column blocks with ragged edges, more rows than a
     * block holds, whole-row blocks, odd K, K = 1 */
    static const int64_t shapes[][3] = {{37, 45, 300}, {300, 19, 70}, {5, 64, 1000},
                                        {260, 3, 130}, {70, 1, 90}, {48, 64, 200},
                                        {16, 1023, 33}, {20, 31, 40}, {33, 130, 16},
                                        /* 2^20 multiply-adds and more: the AMX kernel's
                                         * threads, rows streamed and columns streamed */
                                        {300, 64, 100}, {40, 200, 256}, {16, 600, 128}};
    static const int64_t budgets[] = {256, 4096};
    const fmt_t fmts[2] = {FMT_FLEX16_5, FMT_DFP16};
    const int kernel0 = fx_gemm_i16_forced_kernel();
    for (int bi = 0; bi < flexpoint_backend_count(); bi++) {
        if (!flexpoint_backend_available(bi)) continue;
        CHECK_STATUS(flexpoint_set_backend(flexpoint_backend_name(bi)), FX_OK);
        /* the AMX kernel where the level has it, whatever the measured choice */
        CHECK_STATUS(fx_gemm_i16_force_kernel(fx_backend_active()->gemm.i16_amx
                                                  ? FX_GEMM_I16_KERNEL_AMX
                                                  : kernel0),
                     FX_OK);
        for (int nt = 1; nt <= 2; nt++) {
            flexpoint_set_num_threads(nt);
            g_disposable = nt == 2; /* outputs rounded into: at two threads */
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                fx_shared_matmul_set_sizes(64, budgets[si % 2]);
                const int k = (int)(si + nt) % 2, ka = (int)si % 2, kb = (int)(si / 2) % 2;
                check_sequence(fmts[k], fmts[ka], fmts[kb], shapes[si][0], shapes[si][1],
                               shapes[si][2], &r);
            }
        }
        /* bmm: items of 7 x 9 (63 sums) at once under a budget of 256, in blocks under 32;
         * odd item counts against 2 threads */
        for (int nt = 1; nt <= 2; nt++) {
            flexpoint_set_num_threads(nt);
            g_disposable = nt == 1; /* the other thread count than the plain products' */
            fx_shared_matmul_set_sizes(64, 256);
            check_bmm_sequence(FMT_FLEX16_5, 5, 7, 13, 9, 0, 1, 0);
            check_bmm_sequence(FMT_DFP16, 4, 7, 5, 9, 1, 0, 0);
            fx_shared_matmul_set_sizes(64, 32);
            check_bmm_sequence(FMT_DFP16, 3, 70, 13, 9, 1, 1, 0);
            check_bmm_sequence(FMT_FLEX16_5, 3, 7, 2, 90, 0, 0, 0);
            /* items the AMX kernel rounds in registers: several at once (each within a budget
             * of 4096), and in turn under a budget of 256 */
            fx_shared_matmul_set_sizes(64, 4096);
            check_bmm_sequence(FMT_DFP16, 5, 17, 40, 33, 0, 1, 0);
            check_bmm_sequence(FMT_DFP16, 5, 17, 40, 33, 0, 1, 1); /* the last item largest */
            fx_shared_matmul_set_sizes(64, 256);
            check_bmm_sequence(FMT_FLEX16_5, 3, 40, 64, 30, 1, 0, 0);
            check_bmm_sequence(FMT_DFP16, 3, 40, 64, 30, 1, 0, 1);
        }
        g_disposable = 0;
        fx_shared_matmul_set_sizes(64, 256);
        check_bmm_aliased(0);
        check_bmm_aliased(1);
        fx_shared_matmul_set_sizes(64, 256);
        flexpoint_set_num_threads(2);
        check_kept_overflow(1, 48, 64, 200);
        check_kept_overflow(1, 300, 64, 100);
        check_kept_overflow(3, 40, 64, 50); /* items in turn (budget 256) */
        fx_shared_matmul_set_sizes(64, 4096);
        check_kept_overflow(4, 40, 64, 50); /* items at once, each on one thread */
        for (int nt = 1; nt <= 2; nt++) {
            flexpoint_set_num_threads(nt);
            static const int shifts[] = {1, 2, 7, 14, 15, 16, 17, 18, 21};
            for (size_t si = 0; si < sizeof shifts / sizeof shifts[0]; si++)
                for (int neg = 0; neg <= 1; neg++) {
                    check_rounding_edges(64, shifts[si], neg, 32767, 0);
                    check_rounding_edges(40, shifts[si], neg, 32767, 0);
                    check_rounding_edges(100, shifts[si], neg, 32767, 0);
                    check_rounding_edges(128, shifts[si], neg, 32767, 0);
                    if (shifts[si] <= 18) check_rounding_edges(17, shifts[si], neg, 32767, 0);
                }
            check_rounding_edges(200, 21, 1, 32767, 0); /* several k tiles: the int64 rounding */
            /* the fast tiles' own rounding: every shift their sums reach (one chain at K = 64,
             * several at 384), and a few with it switched off */
            for (int s = 1; s <= 20; s++)
                for (int neg = 0; neg <= 1; neg++) {
                    check_rounding_edges(384, s, neg, 8192, 0);
                    if (s <= 17) check_rounding_edges(64, s, neg, 8192, 0);
                    if (s == 1 || s == 16 || s == 17 || s == 20)
                        check_rounding_edges(384, s, neg, 8192, 1);
                }
            check_extreme_accumulators(128);
            check_extreme_accumulators(64);
            check_extreme_accumulators(200); /* where X would wrap: int64 lanes */
            check_forced_kernels(&r);
            check_tile_max_order(0);
            check_tile_max_order(1);
            for (int fi = 0; fi < 2; fi++) {
                const fmt_t fo = fi ? FMT_FLEX16_5 : FMT_DFP16;
                check_wrapping_sums(fo, 256, 4096.0f);
                check_wrapping_sums(fo, 256, -4096.0f);
                check_wrapping_sums(fo, 192, 4096.0f);
            }
            check_rounds_limits();
            for (int shift = 31; shift <= 37; shift += 2) check_clamped_shift(70, 384, 50, shift, &r);
        }
        fx_shared_matmul_set_sizes(64, 256);
        for (int nt = 1; nt <= 2; nt++) {
            flexpoint_set_num_threads(nt);
            check_unsteady_dfp16(48, 64, 200);
            check_unsteady_dfp16(300, 64, 100); /* the AMX kernel's two threads */
            check_unsteady_dfp16(37, 19, 300);
        }
        check_adopted_views();
        check_adoption_beside_cached_block();
        check_not_taken(&r);
    }
    CHECK_STATUS(fx_gemm_i16_force_kernel(kernel0), FX_OK);
    fx_shared_matmul_set_sizes(0, 0);
    flexpoint_set_num_threads(0);
    return test_finish("test_shared_matmul");
}
