/* Exact int16 x int16 -> int64 GEMM: the portable driver (blocking, packing, threads) shared
 * by the SIMD levels, which supply only register-tile micro-kernels. No intrinsics here.
 *
 * Why the result is exact although SIMD lanes accumulate in int32
 * ----------------------------------------------------------------
 * The pair-product instructions (vpmaddwd, vpdpwssd) add a0*b0 + a1*b1 into an int32 lane, and
 * lane j of the accumulator of tile row i only ever receives terms A[i][k]*B[k][j] of the one
 * output C[i][j]. All of vpmaddwd, vpaddd and (non-saturating) vpdpwssd compute modulo 2^32, so
 * a lane always holds its true partial sum modulo 2^32 (even the one pair sum that does not fit,
 * (-32768)^2 * 2 = 2^31, wraps consistently). Hence: if the true value of a chain's sum lies in
 * [-2^31, 2^31), the lane holds it exactly, whatever happened in between. Three micro-kernels
 * build on this.
 *
 * 1. The fast kernel: plain int16 operands, one vpdpwssd per pair, data-dependent chain length.
 *    The K block is cut into segments of FX_GEMM_I16_SEG pairs (2*SEG values of k). While
 *    packing, the driver computes for every segment s
 *        nA[s] = ceil(sqrt(max over the tile's rows i    of sum_{k in s} A[i][k]^2))
 *        nB[s] = ceil(sqrt(max over the panel's columns j of sum_{k in s} B[k][j]^2)),
 *    exactly in int64 (ceil of an integer square root, no floating point). By Cauchy-Schwarz, for
 *    every (i, j) of the tile, sum_{k in s} |A[i][k] B[k][j]| <= ||A[i][s]|| ||B[s][j]|| <=
 *    nA[s] nB[s]. With t = max_s nA[s] nB[s], a chain of c = floor(FX_GEMM_I16_CHAIN_MAX / t)
 *    whole segments (FX_GEMM_I16_CHAIN_MAX = 2^31 - 2^16) therefore has |chain sum| <= sum over
 *    its segments of nA nB <= c t <= 2^31 - 2^16 (every partial sum too). The kernels (AVX2 and
 *    AVX-512) keep the exact sum T of the chains so far as T = 2^16 H + s, s being the running
 *    int32 lane and H a second int32 word: between two chains they fold H += s >> 16
 *    (arithmetic) and s &= 2^16 - 1, so every chain starts from s in [0, 2^16) and its partial
 *    sums stay in [-(2^31 - 2^16), 2^31 - 1]: the lane never wraps and holds s exactly, and
 *    T = 2^16 H + s in int64 at the end of the K block. One shift, one add and one and per
 *    accumulator and chain. |H| < F 2^15 + 1 < 2^23, F <= kp < 2^16 being the number of chains.
 *    (This is "fold (b)"; the alternative, fold (a), keeps the lane running and adds each chain's
 *    wrapped difference d >> 16 to H, which needs a copy of the lane per chain and allows
 *    chains up to 2^31 - 1; no kernel uses it.)
 *    A tile with a single chain needs no fold: its lanes hold the exact sums. If some
 *    single segment has nA nB > FX_GEMM_I16_CHAIN_MAX (values too large for even one segment), the
 *    tile takes:
 * 2. The split kernel: every B value is split into two small signed parts,
 *     b = 256 * bh + bl,   bl = ((b + 128) mod 256) - 128 in [-128, 127],   bh in [-128, 128],
 *    and the micro-kernel keeps two int32 accumulators per lane, Sh = sum a*bh and Sl = sum a*bl.
 *    Each pair sum in either chain is at most 2 * 2^15 * 2^7 = 2^23 in magnitude (even for the
 *    out-of-format value -32768), so a chain of FX_GEMM_I16_MAX_KP <= 255 pair steps stays below
 *    255 * 2^23 < 2^31: no int32 lane ever wraps. At the end of the K block the micro-kernel
 *    widens both chains to int64 and adds 256 * Sh + Sl = sum a*b into C. This costs two
 *    multiply instructions per pair instead of one, whatever the data.
 * 3. The wrap kernel (AVX512_VNNI; it replaces the split kernel where the level provides it):
 *    one vpdpwssd per pair and one vpdpbusd per two pairs, for any data. Per output it keeps
 *    two int32 lanes: L, the plain sum of a*b modulo 2^32 (one vpdpwssd per pair, left to
 *    wrap), and G, which at every chunk boundary holds floor(S / 2^16) of the exact partial sum
 *    S. Inside a chunk G gathers the products of the high bytes, ah = a >> 8 and bh = b >> 8
 *    (arithmetic shifts, so a = 256 ah + al with al in [0, 255]), four per int32 lane and
 *    instruction. vpdpbusd multiplies unsigned by signed bytes, so A's high bytes are stored
 *    offset, ah + 128, and the chunk's column sums 128 * sum bh, stored with B, are subtracted.
 *    Each product's error |a b - 2^16 ah bh| is at most 16,646,655 (exhaustive search over all
 *    int16 pairs: +16,646,145 at a = b = 32767, -16,646,655 at a = b = -32513), so after a
 *    chunk of at most 128 products (FX_GEMM_I16_WRAP_CHUNK_QUADS quads of 4 k values)
 *    r = S_new - 2^16 G lies in [-2,130,771,840, 2,130,772,095] (the 65,535 carried over from
 *    the floor included), inside [-2^31, 2^31). As L = S_new mod 2^32, r is the int32 value
 *    L - (G << 16) (mod 2^32) read as signed, exactly, and the fold G += r >> 16 (arithmetic)
 *    restores G = floor(S_new / 2^16): five register operations per accumulator and chunk, no
 *    memory. At the end of the call (one K block, or the K blocks of a group where the tile
 *    takes the wrap kernel on all of them) S = 2^16 G + (L mod 2^16), widened to int64 once.
 *    |S| <= 2^30 per product, so G stays within int32 for fewer than 2^16 pairs a call. This
 *    needs no norm test and costs 1.5 multiply instructions per pair instead of the split
 *    kernel's 2.
 * Every step of the three kernels is exact, so the int64 result equals the mathematical sum,
 * whatever the blocking, ISA, thread count or the path each tile takes.
 *
 * Packed layouts (K is walked in pairs k = 2p, 2p+1; a missing odd element is packed as 0):
 *   A micro-panel (mr rows, kp pairs): int32 ap[p*mr + i] holds A[i][2p] in its low 16 bits
 *     and A[i][2p+1] in its high 16 bits, ready for a 32-bit broadcast.
 *   B micro-panel, plain (fast kernel; nr columns, kp pairs): 2*nr int16 per pair p:
 *     bp[p*2nr + 2j + t]        = B[2p+t][j]
 *   B micro-panel, split (split kernel): 4*nr int16 per pair p:
 *     bp[p*4nr + 2j + t]        = bh(B[2p+t][j])   (the high parts, pair-interleaved)
 *     bp[p*4nr + 2nr + 2j + t]  = bl(B[2p+t][j])   (the low parts)
 *   B micro-panel, wrap (wrap kernel; nr columns, kp pairs, nq = ceil(kp / 2) quads of 4 k
 *     values, cut into chunks of FX_GEMM_I16_WRAP_CHUNK_QUADS quads). Per chunk, in int16 units:
 *       2*nr    nr int32: 128 * (sum over the chunk's k of bh(B[k][j])), the offset correction
 *       per quad q of the chunk, 6*nr:
 *         2*nr  nr int32 of 4 signed bytes: bytes of column j = the high bytes >> 8 of
 *               B[4q][j], B[4q+2][j], B[4q+1][j], B[4q+3][j] (the order that the A high panel
 *               gets from two pairs without a byte shuffle)
 *         2*nr  pair 2q in the plain layout above
 *         2*nr  pair 2q + 1 in the plain layout (zeros when 2q + 1 = kp)
 *     k values beyond K are zeros, so they add nothing to L, G or the correction.
 *   A high micro-panel (wrap kernel; mr rows): int32 ahi[p*mr + i] for every pair p, its bytes
 *     (x >> 8) + 128 of x = A[i][2p], A[i][2p+2], A[i][2p+1], A[i][2p+3]: bytes 1 and 3 of
 *     the packed words of pairs p and p + 1 of row i, merged by a mask (k beyond the panel's
 *     pairs count as 0). The kernel reads the even p = 2q only; the odd entries are a by-product
 *     of building all of them with whole vectors.
 *   Rows beyond M and columns beyond N are packed as zeros (they add 0 to the norms too).
 */
#ifndef FX_FLEX_GEMM_I16_H
#define FX_FLEX_GEMM_I16_H

#include "flex_kernels.h"
#include "core/prefetch.h"

#include <math.h>

/* Longest int32 chain of the split kernel, in K pairs, that provably cannot wrap (see above);
 * also the most pairs one micro-kernel call receives. */
#define FX_GEMM_I16_MAX_KP 255

/* Pairs per norm segment of the fast kernel: its chains are whole numbers of segments. With
 * Gaussian-like data whose maximum sits at 2^14..2^15 (the exact exponent), one segment of 16
 * products of two such operands stays well under 2^31 while chains of 8..40 pairs pass: see
 * the report of bench_gemm_i16 (fast-tile fraction). */
#define FX_GEMM_I16_SEG 8

/* Largest register tiles the driver supports (sizes its norm scratch). */
#define FX_GEMM_I16_MAX_MR 16
#define FX_GEMM_I16_MAX_NR 64

/* Split micro-kernel: C[0..m, 0..n] (row stride ldc, int64) = (accumulate ? C : 0) + the exact
 * products of an mr x kp A micro-panel and a kp x nr split B micro-panel. kp <=
 * FX_GEMM_I16_MAX_KP; m <= mr and n <= nr are the valid part of the tile (only it is read and
 * written). The packed panels are 64-byte aligned.
 * amax: NULL, or (on the last K block, whose values are final) the running maximum to raise to
 * max |C[i][j]| over the valid part as written: the driver hands the product's maximum to the
 * write path (fx_op_call.out_imax), which then needs no pass of its own over the int64 stage.
 * The kernels take it from the registers they store from, so it costs a few vector operations
 * per row instead of a reread of the stage. */
typedef void (*fx_gemm_i16_ukr)(int64_t kp, const int32_t *ap, const int16_t *bp, int64_t *c,
                                int64_t ldc, int m, int n, int accumulate, uint64_t *amax);

/* Fast micro-kernel: the same contract with a plain B micro-panel; the int32 lanes are folded
 * (see above) after every `chain` pairs (1 <= chain; the last chain may be shorter). The caller
 * guarantees that every chain's exact sum is below 2^31 in magnitude. */
typedef void (*fx_gemm_i16_fast_ukr)(int64_t kp, int64_t chain, const int32_t *ap,
                                     const int16_t *bp, int64_t *c, int64_t ldc, int m, int n,
                                     int accumulate, uint64_t *amax);

/* Fast micro-kernel of a tile whose whole K is this one call, rounding its sums instead of
 * writing them: the same chains as fx_gemm_i16_fast_ukr (accumulate 0), then the valid m x n
 * part rounded to nearest even at 2^shift (1 <= shift <= FX_GEMM_I16_ROUND_MAX_SHIFT) into
 * int16 dst (row stride ldd) as the level's `round` rounds int64 sums, with the same
 * contract: values above fx_q64_fast_bound(shift) are not kept, *amax (when not NULL) is
 * raised to the exact max |sum|, and the nonzero sums that rounded to 0 are added to *nuf.
 * Why: on short products (K = 64) the int64 sums' stores, the column buffer's reread and its
 * rounding took as long as the multiply-adds (docs/performance.md). */
typedef void (*fx_gemm_i16_fast_round_ukr)(int64_t kp, int64_t chain, const int32_t *ap,
                                           const int16_t *bp, int16_t *dst, int64_t ldd, int m,
                                           int n, int shift, uint64_t *amax, int64_t *nuf);
#define FX_GEMM_I16_ROUND_MAX_SHIFT 46

/* The two fast kernels with A read in place instead of from a packed micro-panel: the tile's
 * mr rows (all valid: m = mr) of a row-major A, row i's pair p the int32 word at a + i lda + 2p
 * (lda int16 units between rows; each row holds 2 kp values), the rest of the contracts as
 * above. Where a product has one column of tiles (the attention's p v items, 128 x 32 x 128),
 * each packed micro-panel serves one tile, and the packing is pure overhead. */
typedef void (*fx_gemm_i16_fast_rows_ukr)(int64_t kp, int64_t chain, const int16_t *a,
                                          int64_t lda, const int16_t *bp, int64_t *c, int64_t ldc,
                                          int n, int accumulate, uint64_t *amax);
typedef void (*fx_gemm_i16_fast_round_rows_ukr)(int64_t kp, int64_t chain, const int16_t *a,
                                                int64_t lda, const int16_t *bp, int16_t *dst,
                                                int64_t ldd, int n, int shift, uint64_t *amax,
                                                int64_t *nuf);
/* A is read in place only by products of at most this many output columns: one column of the
 * 6 x 32 tiles, so that each packed micro-panel would serve one tile. On the Zen 4, auto
 * alternated with auto on packed panels in one process (bench_gemm_i16, docs/performance.md):
 * the attention's 128 x 32 x 128 items ran 9-19 % faster in place, rounded or into int64 sums;
 * with four column panels (16384 x 128 x K, K = 64-192) in place ran from 5 % slower to 1 %
 * faster into int64 sums and from 17 % slower to 2 % faster rounded; with every tile on an
 * any-data kernel (full-range data) 2-11 % slower. */
#define FX_GEMM_I16_A_IN_PLACE_MAX_N 32
/* Test and benchmark switch (default on): off, every A micro-panel is packed, the route before
 * A was read in place; the same bits either way. */
void fx_gemm_i16_a_in_place_set_enabled(int on);
/* (tile, K block) steps whose fast kernel read A in place since the process started */
int64_t fx_gemm_i16_a_in_place_tiles(void);
/* Whether an M x K x N product on nt threads splits its columns between the threads (each
 * thread a one-thread product over its slice) rather than its row blocks; and the test and
 * benchmark switch (default on) that keeps every product on row blocks when off (the same
 * sums either way). */
int fx_gemm_i16_column_threads(int64_t M, int64_t K, int64_t N, int nt);
void fx_gemm_i16_set_column_threads(int on);
/* Test and benchmark switch (default on): off, the SIMD packing of a row-major B takes one
 * pack_b call per panel instead of pack_b_run's runs of panels; the same packed bytes. */
void fx_gemm_i16_set_pack_runs(int on);
/* Test and benchmark switch (default on; AVX-512 level): off, partial tiles of four rows or
 * fewer run the fast kernel's six-row loop instead of its four-row one; the same sums. */
void fx_gemm_i16_set_fast4(int on);
/* Test and benchmark switch (default on): off, every tile writes the column buffer and the
 * level's `round` rounds it, the route before fast_round; the same bits either way. */
void fx_gemm_i16_tiles_round_set_enabled(int on);
/* Tiles that rounded their own sums since the process started (summed over threads). */
int64_t fx_gemm_i16_rounded_tiles(void);

/* Largest proven bound of one fast-kernel chain (see above): 2^16 below 2^31, the room that
 * fold (b) needs for the chain's starting value. */
#define FX_GEMM_I16_CHAIN_MAX ((int64_t)2147483648 - 65536)

/* The SIMD packing of a row-major B reads each row of a norm segment one panel (a cache line
 * or half of one) at a time, panel after panel (fx_gemm_pack_b_rows); the loops also prefetch
 * each row this many bytes ahead, the line of the panel two (AVX-512) or four (AVX2) ahead:
 * on the Zen 4 that added 8-12 % on the CNN's and ResNet-20's weight-gradient products as
 * GEMMs, beside the reordering (bench_gemm, docs/performance.md). */
#define FX_GEMM_I16_PACK_PREFETCH_BYTES 128

/* The most panels of one pack_b_run call: a column block (FX_GEMM_NC) of 32-column panels */
#define FX_GEMM_I16_RUN_PANELS 64

/* The SIMD packing of an A micro-panel reads its rows a short stretch each (one K block), and
 * that of a B with contiguous columns its columns likewise, so on a tall A (many rows, few
 * output columns) or a wide transposed B the hardware prefetchers barely start before the
 * next panel's lines are wanted: the packing loops prefetch the same stretch of the line
 * that many lines further (fx_prefetch_at), for A three micro-panels of 6 rows (tensor_matmul 25088 x 64 x 800 on
 * the Zen 4, one thread: 113-128 -> 135-140 GOP/s, the AVX2 level 91-95 -> 106-108; 6 and 30
 * rows ahead measured no better), for a transposed B one panel of columns (64 x 8192 x 576:
 * 108-115 -> 134-139; two and three panels no better). */
#define FX_GEMM_I16_PACK_A_PREFETCH_ROWS 18

/* K values per K block of the driver (even, at most 2 * FX_GEMM_I16_MAX_KP). */
#define FX_GEMM_I16_KC 384

/* Most K blocks per group of the driver (fx_gemm_i16_kernel.k_group): a group's blocks are
 * packed together and each column of tiles runs all of them in turn (gemm_i16.c). */
#define FX_GEMM_I16_KG 4

/* Quads (4 k values) per chunk of the wrap kernel: 128 products keep every chunk's error below
 * 2^31 (see above). */
#define FX_GEMM_I16_WRAP_CHUNK_QUADS 32

/* One K block of a wrap micro-kernel call: kp pairs, the A micro-panel ap, its high panel
 * ahi and the wrap B micro-panel bw (the layouts above). */
typedef struct fx_gemm_i16_wrap_block {
    int64_t kp;
    const int32_t *ap, *ahi;
    const int16_t *bw;
} fx_gemm_i16_wrap_block;

/* Wrap micro-kernel: the contract of fx_gemm_i16_ukr for the sum of the tile's products over
 * nb (1 .. FX_GEMM_I16_KG) consecutive K blocks blk[0 .. nb), whose sums stay in registers
 * from one block to the next (a block ends on a chunk boundary, where G = floor(S / 2^16)
 * holds); at most FX_GEMM_I16_KG * FX_GEMM_I16_KC / 2 pairs in all, so that |G| < 2^31. */
typedef void (*fx_gemm_i16_wrap_ukr)(int nb, const fx_gemm_i16_wrap_block *blk, int64_t *c,
                                     int64_t ldc, int m, int n, int accumulate, uint64_t *amax);

/* The wrap kernel pays only on K blocks of at least this many pairs (K >= 63): its per-call
 * work (the chunk corrections and folds, the A high panels made per A block) is paid back in
 * proportion to K. Forced wrap against forced split, the two alternated in one process, one
 * thread on the Zen 4 (docs/performance.md): 16384 x 128 x K 4 % faster at K = 32, 14 % at
 * K = 64, 96 and 128, 17 % at 192, 21 % at 256; the CNN's conv2 input gradient as a product
 * (800 x 25088 x 64) 15 %; the attention's 128 x 32 x 128 items 9 %. Shorter blocks lost: the
 * CNN's conv1 forward (K = 25, 13 pairs) ran 0.82x as fast on wrap (0a8151f). The gate once sat
 * at 128 pairs after ResNet-20's 16-channel convolutions (K = 144, N = 16) ran 11 % faster on
 * split on the Xeon reporting family 6 model 167; products of at most 16 columns now take the
 * narrow 6 x 16 tile, which has no wrap kernel, so that measurement no longer bears on the
 * gate. Longer K blocks (K >= 256) go to AMX where a CPU has it and the measured choice took
 * it. */
#define FX_GEMM_I16_WRAP_MIN_KP 32

/* The int16 GEMM's kernel choice, process-wide (FLEXPOINT_KERNEL_I16_GEMM, flexpoint_set_kernel;
 * src/core/backend.c installs it). AUTO: the fast kernel on the tiles whose norms allow it
 * (on products above the level's size gates, after the probe block found one), else the wrap
 * kernel where the level has it and fx_gemm_i16_wrap_pays, else split. SPLIT: the split kernel
 * on every tile, no norms. WRAP: the wrap kernel on every tile and K, no norms (only on a level
 * that has it). FAST: the norm test on every tile of every product, no gates and no probe; the
 * tiles it refuses take the any-data kernel AUTO would take, since the fast kernel cannot be
 * forced on data that would wrap its int32 chains. Every choice gives the same exact int64
 * sums; only the speed differs. */
enum {
    FX_GEMM_I16_KERNEL_AUTO = 0,
    FX_GEMM_I16_KERNEL_SPLIT = 1,
    FX_GEMM_I16_KERNEL_WRAP = 2,
    FX_GEMM_I16_KERNEL_FAST = 3,
    FX_GEMM_I16_KERNEL_AMX = 4,
    FX_GEMM_I16_KERNELS = 5
};
/* AMX (gemm_i16_amx.c) is a kernel of its own rather than a choice per tile: where the level
 * installed it (fx_gemm_tuning.i16_amx), it takes every plain product of 16 x 32 x 16 or more
 * while fx_gemm_i16_amx_on() says so: when forced (AMX), or under AUTO when the measured choice
 * (src/core/kernel_choice.h) preferred it (fx_gemm_i16_set_amx_auto). Under AMX the products
 * it does not take run this driver as under AUTO. */
/* Names "auto", "split", "wrap", "fast", "amx" and back (-1: unknown name) */
const char *fx_gemm_i16_kernel_name(int kernel);
int fx_gemm_i16_kernel_parse(const char *name);
/* Install a choice (not while products run on other threads); the caller checks that the CPU
 * can run it (WRAP needs AVX512_VNNI). FX_EINVAL for an unknown value. */
int fx_gemm_i16_force_kernel(int kernel);
int fx_gemm_i16_forced_kernel(void);
/* The measured choice of AUTO between AMX and this driver (process-wide, default off), and
 * whether the AMX kernel is to run now (forced, or AUTO with the measured choice on). */
void fx_gemm_i16_set_amx_auto(int on);
int fx_gemm_i16_amx_auto(void);
int fx_gemm_i16_amx_on(void);
/* Products of this depth or less are one K block of the AMX kernel: each sum is complete
 * when its block's tiles are, so the kernel can round it in registers (fx_op_call.out_i16). */
#define FX_GEMM_I16_AMX_ROUND_MAX_K 2048
/* and of this depth or more (see fx_gemm_i16_amx_rounds) */
#define FX_GEMM_I16_AMX_ROUND_MIN_K 16
/* 1 when the AMX kernel, where the level installed it, takes a plain [M, K] x [K, N] product
 * now and can round its sums in registers (fx_op_call.out_i16): fx_gemm_i16_amx_on(), at
 * least 16 x FX_GEMM_I16_AMX_ROUND_MIN_K x 16, and K <= FX_GEMM_I16_AMX_ROUND_MAX_K. From
 * K = 16, not 32 as where it writes int64 sums: with K <= 128 it rounds in int32 lanes, and on
 * the Xeon reporting model 207 a [32, 25] x [25, 100352] product took 2.7-2.9 ms there against
 * 3.5-5.3 ms on the register tiles (K = 16 and 27 likewise). */
int fx_gemm_i16_amx_rounds(int64_t M, int64_t K, int64_t N);
/* The shape part of that test alone (the AMX kernel checks it at the call) */
int fx_gemm_i16_amx_round_shape(int64_t M, int64_t K, int64_t N);

/* 1 when a product with inner dimension K takes the wrap kernel (on a level that has one):
 * where it pays (FX_GEMM_I16_WRAP_MIN_KP) under AUTO and FAST, always under WRAP, never under
 * SPLIT. */
int fx_gemm_i16_wrap_pays(int64_t K);

/* 1 when a product with N output columns takes a level's narrow tile (FX_GEMM_I16_NARROW_N
 * columns; the AVX-512 level's 6 x 16 split kernel, where the 6 x 32 tile would multiply as
 * many zeros as values): N <= FX_GEMM_I16_NARROW_N under AUTO, SPLIT and AMX. Not under WRAP
 * or FAST, which the narrow tile does not have, so that forcing them still runs them. */
#define FX_GEMM_I16_NARROW_N 16
int fx_gemm_i16_narrow(int64_t N);

/* int16 units of one wrap B micro-panel of kp pairs and nr columns (a multiple of 2*nr). */
int64_t fx_gemm_i16_wrap_panel_numel(int64_t kp, int nr);

/* Optional SIMD packing of one level (any member may be NULL: the driver's portable loops).
 * Each packs one FULL micro-panel in the layouts above, and when sq != NULL also writes, per
 * norm segment s of its kp pairs, sq[s] = max over the panel's rows (A) or columns (B) of the
 * exact sum of squares of the segment's values (the driver takes the ceiling square root). */
typedef struct fx_gemm_i16_pack {
    /* mr rows of a unit-stride A (row stride sam), kc values each */
    void (*pack_a)(const int16_t *a, int64_t sam, int64_t kc, int32_t *ap, int64_t *sq);
    /* nr columns of a row-major B (row stride sbk), kc rows */
    void (*pack_b)(const int16_t *b, int64_t sbk, int64_t kc, int16_t *bp, int64_t *sq);
    /* pack_b over npan consecutive panels of one norm segment (kc <= 2 FX_GEMM_I16_SEG rows;
     * panel j at b + j nr): panel j into bp + j pstride, its sq into sq[j] (sq NULL: no
     * norms); NULL where a level has none (the driver then calls pack_b per panel) */
    void (*pack_b_run)(const int16_t *b, int64_t sbk, int64_t kc, int64_t npan, int16_t *bp,
                       int64_t pstride, int64_t *sq);
    /* nr columns of a B with contiguous columns (column stride sbn: a transposed operand,
     * as a convolution's weights and output gradients), kc rows */
    void (*pack_bt)(const int16_t *b, int64_t sbn, int64_t kc, int16_t *bp, int64_t *sq);
    /* mr rows of an A with contiguous columns (column stride sak: a transposed operand, as the
     * output gradients dy^T of a token linear's or an attention product's weight gradient), kc
     * values each; the layout only (the driver takes the norms from the panel, norms_a) */
    void (*pack_at)(const int16_t *a, int64_t sak, int64_t kc, int32_t *ap);
    /* plain B micro-panel of kp pairs -> split layout */
    void (*split_panel)(const int16_t *bp, int64_t kp, int16_t *bs);
    /* plain B micro-panel of kp pairs -> wrap layout */
    void (*wrap_panel)(const int16_t *bp, int64_t kp, int16_t *bw);
    /* A micro-panel of kp pairs (mr rows) -> its high panel; reads no pair beyond kp */
    void (*a_high)(const int32_t *ap, int64_t kp, int32_t *ahi);
    /* The segment norms of an already packed A micro-panel of kp pairs (mr rows), whole
     * segments only, as the driver uses them: na[s] = ceil(sqrt(sq[s])) */
    void (*norms_a)(const int32_t *ap, int64_t kp, int32_t *na);
    /* The sq[s] of pack_a for mr rows of a unit-stride A read in place, without packing
     * them (the fast kernels' fast_rows read them so) */
    void (*norms_rows)(const int16_t *a, int64_t sam, int64_t kc, int64_t *sq);
    /* The largest na[s] nb[s] over s < n, segment norms of an A and a B micro-panel (each at
     * most 2^17 + 1): the driver's chain test, once per tile and K block */
    int64_t (*norm_prod_max)(const int32_t *na, const int32_t *nb, int64_t n);
} fx_gemm_i16_pack;

/* norms_a of the 6-row panels (AVX2 code, shared by the AVX2 and AVX-512 levels) */
void fx_gemm_i16_norms_a_6(const int32_t *ap, int64_t kp, int32_t *na);
/* norm_prod_max in AVX2 (shared likewise) */
int64_t fx_gemm_i16_norm_prod_max(const int32_t *na, const int32_t *nb, int64_t n);

/* ceil(sqrt(x)) for 0 <= x <= 2^40, exactly and without branches (the driver takes one per
 * segment and panel). x is exact in a double and the square root is correctly rounded; below
 * 2^40 the root of a non-square x = r^2 + d (0 < d <= 2r) lies at least 1/(2r + 2) >= 2^-21
 * from both r and r + 1, far more than half an ulp of a double near r <= 2^20 (2^-33), so the
 * conversion gives floor(sqrt(x)) exactly, and one comparison turns it into the ceiling
 * (checked against the fix-up loop it replaced for every x < 2^26 and x = r^2 - 2 .. r^2 + 2,
 * r <= 2^17 + 2). */
static inline int64_t fx_ceil_sqrt(int64_t x)
{
    const int64_t r = (int64_t)sqrt((double)x);
    return r + (r * r < x);
}
/* pack_bt of the AVX-512 level's 32-column panels (AVX2 code) */
void fx_gemm_i16_pack_bt_32(const int16_t *b, int64_t sbn, int64_t kc, int16_t *bp, int64_t *sq);
/* pack_at of the 6-row panels (AVX2 code, shared by the AVX2 and AVX-512 levels) */
void fx_gemm_i16_pack_at_6(const int16_t *a, int64_t sak, int64_t kc, int32_t *ap);

typedef struct fx_gemm_i16_kernel {
    int mr, nr; /* register tile, mr <= FX_GEMM_I16_MAX_MR, nr <= FX_GEMM_I16_MAX_NR */
    fx_gemm_i16_ukr ukr;       /* split kernel: any data */
    fx_gemm_i16_fast_ukr fast; /* plain kernel: tiles whose norms allow it (NULL: never) */
    /* the plain kernel rounding its tile, for products of one K block with a rounding
     * (fx_op_call.out_i16; NULL: the tiles write the column buffer, which `round` rounds) */
    fx_gemm_i16_fast_round_ukr fast_round;
    /* optional (with pack->norms_rows): the same two reading A's rows in place, which the
     * driver takes for the full micro-panels of a unit-stride A of even K on K blocks that
     * take the norm test */
    fx_gemm_i16_fast_rows_ukr fast_rows;
    fx_gemm_i16_fast_round_rows_ukr fast_round_rows;
    const fx_gemm_i16_pack *pack; /* packing for this mr x nr (NULL: portable loops) */
    fx_gemm_i16_wrap_ukr wrap; /* when set, takes the split kernel's place on every tile of
                                * products where fx_gemm_i16_wrap_pays */
    /* Size gates of the norm test in mode AUTO: products with fewer rows, B blocks with fewer
     * columns and K blocks with fewer pairs than these take the any-data kernel without norms.
     * Where the norms pay depends on how much the fast kernel saves against the level's
     * any-data kernel, so each level measures its own; 0 takes the driver's defaults
     * (FX_GEMM_FAST_MIN_* in gemm_i16.c). */
    int fast_min_m, fast_min_n, fast_min_kp;
    /* nonzero: K blocks of equal size (at most FX_GEMM_I16_KC values, a whole number of norm
     * segments) instead of full blocks and a short rest; set where it was measured to pay (the
     * AVX2 level: the CNN's K = 1600 input gradient 8 % faster). The sums are exact either
     * way, so the bits do not change. */
    int equal_k_blocks;
    /* K blocks per group (gemm_i16.c), at most FX_GEMM_I16_KG; 0 or 1: one block at a time,
     * as BLIS runs them. Set where it was measured to pay (AVX-512 on the Zen 5: 2048^3 53-55 %
     * -> 69-71 % of the vpdpwssd limit); the AVX2 level's code ran 1-4 % slower in groups on
     * the same CPU (bench_gemm, FLEXPOINT_CPU=avx2, three alternating runs: 1024^3 170-178
     * GOP/s against 175-183). The sums are exact either way, so the bits do not change. */
    int k_group;
    /* Optional: the level's rounding of a block of exact sums into int16 mantissas, with which
     * the driver takes fx_op_call.out_i16 (fx_gemm_i16_rounds): rows x cols sums (row stride
     * lds) rounded to nearest even at 2^shift (fx_q64_fast_ok shifts) into dst (row stride
     * ldd), the nonzero sums that rounded to 0 added to *nuf. The values are cvt.quant_i64's
     * where every |sum| is at most fx_q64_fast_bound(shift); above it they are not (nothing
     * may then be kept: the driver's caller knows from the exact maximum). NULL: the driver
     * writes int64 sums only. */
    void (*round)(const int64_t *src, int64_t lds, int16_t *dst, int64_t ldd, int rows,
                  int cols, int shift, int64_t *nuf);
} fx_gemm_i16_kernel;

/* 1 when the driver can run a product with inner dimension K on kernel kd rounding its sums
 * into int16 (fx_op_call.out_i16) instead of writing an int64 stage: kd has a rounding and K
 * is one group of K blocks, so that each column of tiles is complete, in a per-thread buffer
 * of MC x NR sums that stays in cache, when the driver leaves it (a product of several groups
 * revisits every output once per group, and its partial sums need the whole stage). Why: at
 * 1024^3 the stage is 8 MiB written by the tiles and read back by the rounding, and on
 * full-range data its traffic and that pass took a sixth of the product's time on the Zen 5
 * (docs/performance.md); on AVX2, whose groups are one K block, products of K <= 384 with
 * large outputs took 0.80-0.83 of their time rounded this way instead of in int64 blocks. */
int fx_gemm_i16_rounds(const fx_gemm_i16_kernel *kd, int64_t K);

/* Layouts of the any-data kernels' B micro-panels (made from the plain ones on demand). */
enum { FX_GEMM_I16_B_SPLIT = 0, FX_GEMM_I16_B_WRAP = 1 };

/* The B layout a product with inner dimension K takes on a level whose fx_backend
 * gemm.i16_b_layout is level_layout: the wrap layout where the level has the wrap kernel and it
 * pays for this K, else the split layout. */
static inline int fx_gemm_i16_b_layout_for(int level_layout, int64_t K)
{
    return level_layout == FX_GEMM_I16_B_WRAP && fx_gemm_i16_wrap_pays(K) ? FX_GEMM_I16_B_WRAP
                                                                          : FX_GEMM_I16_B_SPLIT;
}

/* AVX-512BW packing for a 6 x 32 tile (gemm_i16_pack_avx512.c). */
extern const fx_gemm_i16_pack fx_gemm_i16_pack_avx512_6x32;
/* AVX2 packing for a 6 x 16 tile (gemm_i16_pack_avx2.c; no wrap layout: AVX2 has no wrap
 * kernel). */
extern const fx_gemm_i16_pack fx_gemm_i16_pack_avx2_6x16;

/* Run an FX_OP_MATMUL call (operand contract of backend.h) with micro-kernels k. When
 * c->out_imax is set, the product's max |out| is reported there (out_imax_known = 1): the
 * micro-kernels take it while they write the last K block. Returns FX_OK, FX_ENOMEM if the
 * packing buffers cannot be allocated, or FX_EUNSUPPORTED for a register tile beyond the limits
 * above (a programming error of the level). */
int fx_gemm_i16(const fx_op_call *c, const fx_gemm_i16_kernel *k);

/* ---- instrumentation for tests and benchmarks --------------------------------------------- */

/* Path selection, process-wide: AUTO (the norm test picks per tile and K block, on products
 * large enough to pay for the norms: see FX_GEMM_FAST_MIN_* in gemm_i16.c), SPLIT_ONLY (every
 * tile takes the split kernel: the behaviour before the fast kernel existed), NORM_ALWAYS (the
 * norm test on every size: lets tests reach both kernels with small products). */
enum { FX_GEMM_I16_AUTO = 0, FX_GEMM_I16_SPLIT_ONLY = 1, FX_GEMM_I16_NORM_ALWAYS = 2 };
void fx_gemm_i16_set_mode(int mode);

/* Process-wide: when on, the driver packs with its portable loops even where the level has
 * SIMD packing (the tests check that both give the same products). */
void fx_gemm_i16_set_portable_packing(int on);

/* Process-wide, default on: when off, products take the split kernel where the wrap kernel
 * would run. For the tests and bench_gemm_i16, which compare the two kernels on one machine. */
void fx_gemm_i16_set_wrap(int on);

/* Tile x K-block counts taken by each kernel since the last reset (summed over threads). */
void fx_gemm_i16_tile_counts(int64_t *fast, int64_t *split);
void fx_gemm_i16_reset_tile_counts(void);

#endif
