/* Shared, ISA-free pieces of the fp32 compute kernels (src/fp32/f32_*.c).
 *
 * 1. A portable GEMM framework (BLIS style, f32_gemm.c): blocking loops, operand packing and
 *    OpenMP threading in plain C around one register-blocked micro-kernel per ISA level.
 * 2. A chunked parallel loop for the elementwise kernels and reductions (f32_scalar.c).
 * No intrinsics here: this header is included by the scalar, AVX2 and AVX-512 files.
 *
 * GEMM summation order, and why the bits depend only on the micro-kernel's arithmetic:
 * every output element is one chain over k = 0, 1, ..., K-1 in order, started from 0. A K
 * block continues the chain of the previous block (the micro-kernel reloads the tile it left in
 * C), and threads split only M and N. So the result does not depend on the thread count, the
 * block sizes or the operands' layout, and the error bound is that of a recursive dot product
 * (with or without FMA): |C - fl(C)| <= gamma_K (|A||B|) elementwise,
 * gamma_K = K u / (1 - K u), u = 2^-24. The AVX2 and AVX-512 kernels (one FMA per step) give
 * identical bits; the scalar kernel (multiply, then add) differs from them in the last bits.
 */
#ifndef FX_FP32_KERNELS_H
#define FX_FP32_KERNELS_H

#include "core/backend.h"
#include "core/prefetch.h"

#include <stdint.h>
#include <string.h>

/* r = a op b under the ADD/SUB/MUL NaN rule (f32_scalar.c): when a is NaN the result is a,
 * quieted, whatever b is. Written out because a compiler may emit a commutative operation with
 * its operands swapped (and differently in vectorised and leftover iterations), which would
 * let b's NaN win. */
static inline float fx_f32_nan_first(float a, float r)
{
    /* a select on the bits, without a branch, so that loops over it still vectorise */
    uint32_t ua, ur;
    memcpy(&ua, &a, 4);
    memcpy(&ur, &r, 4);
    const uint32_t a_nan = (uint32_t)0 - (uint32_t)((ua & 0x7FFFFFFFu) > 0x7F800000u);
    ur = (ur & ~a_nan) | ((ua | 0x00400000u) & a_nan);
    memcpy(&r, &ur, 4);
    return r;
}

#ifdef _OPENMP
#define FX_F32_PRAGMA(x) _Pragma(#x)
#define FX_F32_OMP(x) FX_F32_PRAGMA(omp x)
#else
#define FX_F32_OMP(x)
#endif

/* ---- GEMM framework ---------------------------------------------------------------------- */

/* Largest micro-tile any kernel may use (sizes the edge-tile scratch on the stack). */
#define FX_F32_GEMM_MAX_MR 16
#define FX_F32_GEMM_MAX_NR 64

/* Micro-kernel: tile[mr][nr] (row stride ldc) = (or +=) a_panel x b_panel over kc steps.
 *   a: packed A micro-panel, kc groups of mr floats (a[k*mr + r] = A[r][k]);
 *   b: packed B micro-panel, kc groups of nr floats (b[k*nr + j] = B[k][j]), 64-byte aligned;
 *   c: the tile, any alignment; accumulate = 0 starts from zero, 1 continues from c's values.
 * Packed panels are zero-padded to mr rows and nr columns, so a kernel always does full tiles;
 * the framework runs partial tiles on a scratch tile, except a last row panel with whole
 * columns written in rows where the level has a kernel for its rows
 * (fx_f32_gemm_params.kernel_rows: the first r rows, its A stride still the panel's mr). */
typedef void (*fx_f32_ukernel)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                               int accumulate);

/* Optional transposing pack (NULL: the framework's scalar loops): dst[k*R + r] = src[r*ld + k]
 * for r < R, k < kb. It packs a full A micro-panel of a row-major A (R = mr) and a full B
 * micro-panel of a column-major B (R = nr): both gather R unit-stride rows into k-major groups,
 * which the compiler does not vectorise on its own. dst is 64-byte aligned when R*kb is. */
typedef void (*fx_f32_pack_fn)(float *dst, const float *src, int64_t ld, int64_t kb, int64_t R);

/* The same transposing pack from 16-bit sources (fp16 or bf16 bits), widened exactly. */
typedef void (*fx_f32_pack16_fn)(float *dst, const uint16_t *src, int64_t ld, int64_t kb,
                                 int64_t R);
/* Exact widening of n contiguous 16-bit values (the bulk conversions of src/fp16, src/bf16). */
typedef void (*fx_f32_widen16_fn)(const uint16_t *src, float *dst, int64_t n);

/* ---- bf16 pair mode (AVX512_BF16 vdpbf16ps) ------------------------------------------------
 * With both operands bf16, a level may run the GEMM on bf16 pairs instead of widened floats.
 * The arithmetic, per output: a chain over the pairs p = 0, 1, ... of K (an odd K's last pair
 * padded with a zero), started from 0, each pair adding two fp32 FMAs rounded to nearest even,
 * the odd element first:
 *     acc = fma(A[i][2p+1], B[2p+1][j], acc);  acc = fma(A[i][2p], B[2p][j], acc);
 * That is what vdpbf16ps computes (Intel's pseudocode; measured bit for bit on Zen 4), except
 * that vdpbf16ps treats subnormal inputs as zero and flushes subnormal results to zero. Each
 * step is one FMA (the product itself is never rounded), so the error bound is the fp32 GEMM's,
 * gamma_K with K rounded up to even (the pad step adds zero exactly).
 * Flushing can never matter when (i) no operand value is subnormal, (ii) every product is a
 * multiple of 2^-126 (biased exponents fa + fb >= 142: fa - 127 - 7 + fb - 127 - 7 >= -126),
 * and (iii) every fp32 value the chain continues from is 0 or a multiple of 2^-126 (biased
 * exponent >= 24). Then every partial sum is 0 or a multiple of 2^-126: either representable
 * as it is (below 2^-102 it has at most 24 significant bits) or rounded to a normal multiple,
 * so by induction no input, intermediate or result is ever subnormal, and vdpbf16ps gives the
 * chain's exact bits. The driver checks (i) and (ii) per packed A micro-panel and B block (the
 * smallest biased exponent of their nonzero values: fx_bf16_minkey) and runs `dot` only there;
 * `dot` checks (iii) on the tile it continues; everywhere else `exact` computes the same chain
 * with FMAs on the widened values. So the bits depend on the data only, never on the blocking,
 * the thread count or which kernel ran. */
#define FX_BF16_DOT_MIN_KEYSUM 142

/* Packed pair layouts (uint32 words w = x[2p] | x[2p+1] << 16):
 *   a: kp groups of mr words, a[p*mr + r] = pair p of row r of A (the integer GEMM's A
 *      micro-panel layout, so a convolution's int16 panel builder serves bf16 bits as well);
 *   b: kp groups of nr words, b[p*nr + j] = pair p of column j of B, 64-byte aligned.
 * c, ldc, accumulate as for fx_f32_ukernel. */
typedef void (*fx_bf16_pair_ukernel)(int64_t kp, const uint32_t *a, const uint32_t *b, float *c,
                                     int64_t ldc, int accumulate);
/* Smallest biased exponent field over the nonzero values of x[0, n) (bf16 bits; subnormals
 * give 0), 0x7FFF when every value is zero. */
typedef uint32_t (*fx_bf16_minkey_fn)(const uint16_t *x, int64_t n);

typedef struct fx_bf16_pair_kernels {
    fx_bf16_pair_ukernel dot;   /* vdpbf16ps; runs `exact` itself where (iii) fails */
    fx_bf16_pair_ukernel exact; /* the chain in FMAs, no flushing */
    fx_bf16_minkey_fn minkey;   /* optional (NULL: a portable loop) */
    /* optional: dst[2j + t] = (t ? r1 : r0)[j] for j < n (two B rows into pair words) */
    void (*interleave)(uint16_t *dst, const uint16_t *r0, const uint16_t *r1, int64_t n);
    /* optional: `dot` on a full tile with A read where it lies, row r's pair p the 32-bit word
     * at a + r * lda + 2p (bf16 elements), instead of from a packed panel, starting from zero
     * sums (one depth block): the same words in the same chains, so the same bits. The driver
     * takes it for a row-major A of even depth within one block (fx_f32_gemm_a_in_place). */
    void (*dot_rows)(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b, float *c,
                     int64_t ldc);
    /* optional: dot_rows with the tile's sums rounded to bf16 as bf16_cvt rounds them, into
     * rows of dst ldd apart, where the output is bf16 through that conversion; with bias (NULL:
     * none) the tile's 32 columns of it added as the separate pass adds them (h16_bias.h:
     * the rounded sum widened, the bias added under the ADD NaN rule, rounded again). The
     * conversion's and the pass's bits without the fp32 tile, its conversion call and the
     * rows' copies (a third of a 128 x 128 x 32 product's time on the Zen 4) */
    void (*dot_rows_bf16)(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b,
                          uint16_t *dst, int64_t ldd, const float *bias);
    void (*bf16_cvt)(const float *src, uint16_t *dst, int64_t n);
    /* optional: a whole A micro-panel of mr <= 8 rows from an A whose columns are contiguous
     * (a transposed operand: element (i, k) at a[i + k * ld]), dst[p*mr + r] = a[r + 2p ld] |
     * a[r + (2p+1) ld] << 16 for p < kp: two columns interleaved per pair, in place of a loop
     * per word (the attention's and the linear layers' weight gradients take A so) */
    void (*pack_a_cols)(uint32_t *dst, const uint16_t *a, int64_t ld, int64_t kp, int mr);
} fx_bf16_pair_kernels;

typedef struct fx_f32_gemm_params {
    int mr, nr;           /* micro-tile: rows broadcast from A, columns loaded from B */
    int64_t kc;           /* depth of one packed block (the A micro-panel kc*mr stays in L1) */
    int64_t mc;           /* rows of A packed at once, a multiple of mr (L2/L3 resident) */
    int64_t nc;           /* widest column block of packed B (kc*nc stays in L2) */
    double min_par_work;  /* M*N*K below which one thread is used */
    fx_f32_ukernel kernel;
    /* optional: kernel_rows[r] (r < mr), where not NULL, computes only the first r rows of a
     * tile from a packed panel of mr rows and writes just those: the last row panel of a
     * product whose rows are not whole panels (M = 16 is 12 + 4 rows), which would otherwise
     * run the whole kernel on a scratch tile. Same chains, same bits. */
    const fx_f32_ukernel *kernel_rows;
    /* optional: the first nr / 2 columns of a whole-row tile from a packed panel of nr columns
     * (the last column panel of N = 16, 48 ... on a 32-column tile), written in place instead
     * of through a scratch tile. Same chains, same bits. */
    fx_f32_ukernel kernel_half;
    fx_f32_pack_fn pack_rows; /* optional, see fx_f32_pack_fn */
    /* fp16 and bf16 operands (all optional: NULL takes the scalar definitions per element) */
    fx_f32_pack16_fn pack_rows_fp16, pack_rows_bf16;
    fx_f32_widen16_fn widen_fp16, widen_bf16;
    /* bf16 pair mode (optional): used when both operands are bf16; mr, nr, kc (even), mc and
     * nc then describe the pair kernels, `kernel` is not used, and pack_rows (a transpose that
     * moves bits unchanged) packs 32-bit pair words */
    const fx_bf16_pair_kernels *pairs;
    int force_exact; /* pair mode: `exact` everywhere (tests and benchmarks compare the two) */
} fx_f32_gemm_params;

/* c->out_f32[M,N] (row-major) = in[0][M,K] x in[1][K,N], with any element strides. Operands are
 * bf16 pairs in pair mode (above; a_panels then hold pair words, panel q at
 * a_panels + q * ceil(K/2) * mr), or fp32, or fp16 / bf16 widened exactly to fp32 while they are packed (so the products and sums
 * are those of the fp32 kernel on the widened values, bit for bit, without a separate widening
 * pass over the operands). Uses up to c->nthreads OpenMP threads. Returns FX_OK or FX_ENOMEM
 * (scratch). */
int fx_f32_gemm(const fx_f32_gemm_params *p, const fx_op_call *c);

/* Process-wide switch of the pair mode's A read in place (fx_bf16_pair_kernels.dot_rows),
 * default on; off, every A panel is packed, the route before it (the same bits either way:
 * tests compare them), and the count of tiles that read A in place since start-up. */
void fx_f32_gemm_a_in_place_set_enabled(int on);
int64_t fx_f32_gemm_a_in_place_tiles(void);

/* ---- the kernels each level installs (src/cpu/<level>.c) -----------------------------------
 * One set per ISA level: *_scalar runs anywhere, *_avx2 needs AVX2+FMA+F16C, *_avx512 needs
 * AVX-512 F/BW/VL/DQ. COPY is the scalar level's on every level (libc's memcpy is already
 * vectorised). The MATMUL kernels also take fp16 and bf16 operands, widened exactly while
 * packed. UNARY and UNARY_BACKWARD are in f32_math.h. */
int fx_f32_copy_scalar(const fx_op_call *c);
int fx_f32_add_scalar(const fx_op_call *c);
int fx_f32_sub_scalar(const fx_op_call *c);
int fx_f32_mul_scalar(const fx_op_call *c);
int fx_f32_scale_scalar(const fx_op_call *c);
int fx_f32_relu_scalar(const fx_op_call *c);
int fx_f32_sum_scalar(const fx_op_call *c);
int fx_f32_matmul_scalar(const fx_op_call *c);
void fx_f32_bias_relu_scalar(float *v, int64_t rows, int64_t cols, const float *bias, int relu);

int fx_f32_add_avx2(const fx_op_call *c);
int fx_f32_sub_avx2(const fx_op_call *c);
int fx_f32_mul_avx2(const fx_op_call *c);
int fx_f32_scale_avx2(const fx_op_call *c);
int fx_f32_relu_avx2(const fx_op_call *c);
int fx_f32_sum_avx2(const fx_op_call *c);
/* SUM of fp16 and bf16 inputs read in their storage: each vector widened (exactly) as it is
 * loaded, then fx_f32_sum_avx2's tree, so the bits equal that kernel's on the widened values
 * (the dispatcher's fallback) without a widened copy of the input */
int fx_fp16_sum_avx2(const fx_op_call *c);
int fx_bf16_sum_avx2(const fx_op_call *c);
int fx_f32_matmul_avx2(const fx_op_call *c);
void fx_f32_bias_relu_avx2(float *v, int64_t rows, int64_t cols, const float *bias, int relu);

int fx_f32_add_avx512(const fx_op_call *c);
int fx_f32_sub_avx512(const fx_op_call *c);
int fx_f32_mul_avx512(const fx_op_call *c);
int fx_f32_scale_avx512(const fx_op_call *c);
int fx_f32_relu_avx512(const fx_op_call *c);
int fx_f32_sum_avx512(const fx_op_call *c);
/* the same for fx_f32_sum_avx512's trees (f32_sum_avx512_tmpl.h) */
int fx_fp16_sum_avx512(const fx_op_call *c);
int fx_bf16_sum_avx512(const fx_op_call *c);
int fx_f32_matmul_avx512(const fx_op_call *c);
void fx_f32_bias_relu_avx512(float *v, int64_t rows, int64_t cols, const float *bias, int relu);

/* The SIMD packers (pack_rows: A micro-panels, and B with contiguous columns) read each row a
 * K block long, too short a stretch for the hardware prefetchers to start on a tall A (many
 * rows, few output columns), so they prefetch the row this many below (tensor_matmul
 * 25088 x 64 x 800 on the Zen 4, one thread, GFLOP/s: bf16 138-140 -> 150-155, fp32 82-84 ->
 * 83-85; the AVX2 level 77 -> 86-88 and 74-76 -> 85-88; 12 and 36 rows measured alike;
 * fx_prefetch_at). */
#define FX_F32_PACK_PREFETCH_ROWS 24

/* The largest micro-tile (mr x nr) of any level's fp32 GEMM (AVX-512: 12 x 32): the buffer
 * of a tile converted to fp16/bf16 in the GEMM (fx_op_call.out_h16). */
#define FX_F32_TILE_MAX 384

/* Register-tile heights of the AVX2 (6 x 16) and AVX-512 (12 x 32) fp32 MATMUL kernels: the
 * A panel height a convolution's panel builder must produce (fx_backend.gemm.f32_panel_mr). */
#define FX_F32_MR_AVX2 6
#define FX_F32_MR_AVX512 12

/* The AVX-512 level's 16 x 16 transposing fp32 pack, which the AVX512_BF16 pair GEMM (src/bf16)
 * uses for 32-bit pair words (it moves bits unchanged). Only on CPUs with AVX-512 F/BW/VL. */
void fx_f32_pack_rows_avx512(float *dst, const float *src, int64_t ld, int64_t kb, int64_t R);
/* The AVX2 level's transposing pack from fp32, fp16 or bf16 rows (fmt), widened exactly, which
 * the AVX2 convolution panel builder (src/nn/conv_panels_avx2.c) applies to its patch rows.
 * Only on CPUs with AVX2 and F16C. */
void fx_f32_pack_rows_avx2(float *dst, const void *src, int fmt, int64_t ld, int64_t kb,
                           int64_t R);
/* The same transposing pack for sources that are not one strided matrix: an MR-row micro-panel
 * (MR = FX_F32_MR_AVX2) of ncols columns in blocks of 8, dst[(8b + t)*MR + r] = widen(src[
 * row_off[r] + the column's offset]) for r < rows (offsets in elements of fmt), 0 for rows <= r
 * < MR. Block b's column t is at blk[b].off + t for t < blk[b].split, else at blk[b].off2 + t:
 * the weight gradient's A panels (conv_panels_avx2.c), where the 8 pixels of a block are
 * consecutive input values per tap within an output row, and a block may continue on the next
 * row. Loads read 8 values from each of those bases (up to 7 past a block's last column);
 * exactly ncols * MR floats are written. */
typedef struct fx_f32_block {
    int64_t off, off2; /* off2: the second run's start less split (unused with split 8) */
    int split;         /* 8: all in the first run */
} fx_f32_block;
typedef void (*fx_f32_pack_blocks_fn)(float *dst, const void *src, int fmt,
                                      const int64_t *row_off, int rows, const fx_f32_block *blk,
                                      int64_t ncols);
void fx_f32_pack_blocks_avx2(float *dst, const void *src, int fmt, const int64_t *row_off, int rows,
                             const fx_f32_block *blk, int64_t ncols);

/* ---- chunked parallel loop --------------------------------------------------------------- */

/* Calls fn(c, lo, hi) on consecutive ranges covering [0, n), each at most `chunk` long, on up
 * to c->nthreads threads when n >= min_parallel. Chunks never split a unit that fn needs whole,
 * so results are identical for every thread count. */
typedef void (*fx_f32_range_fn)(const fx_op_call *c, int64_t lo, int64_t hi);
void fx_f32_parallel_ranges(const fx_op_call *c, int64_t n, int64_t chunk, int64_t min_parallel,
                            fx_f32_range_fn fn);

/* Sum of x[0, n) as the balanced tree over blocks that every level's contiguous SUM uses: a
 * range of more than `block` elements splits after ceil(blocks / 2) blocks; `leaf_tree(x, n)`
 * is the level's own (sequential) evaluation of that same tree. The top subtrees run on up to
 * nthreads threads, so the bits equal leaf_tree(x, n) for every thread count. x holds elements
 * of esz bytes (fp32, or the fp16/bf16 that a level's 16-bit SUM widens as it loads them). */
typedef float (*fx_f32_sum_fn)(const void *x, int64_t n);
float fx_f32_sum_tree_parallel(const void *x, size_t esz, int64_t n, int64_t block,
                               fx_f32_sum_fn leaf_tree, int nthreads);

/* Every level's SUM kernel around its own trees: one whole-array sum on the threaded tree
 * (fx_f32_sum_tree_parallel over leaf_tree, elements of esz bytes from c->in[0]), else the work
 * items of range(c, lo, hi), one per output row (inner == 1) or per chunk of `cols` columns of
 * an output row, several small items per chunk of fx_f32_parallel_ranges. */
int fx_f32_sum_drive(const fx_op_call *c, size_t esz, int64_t block, int64_t cols,
                     fx_f32_sum_fn leaf_tree, fx_f32_range_fn range);

/* Elements per chunk and the size from which elementwise kernels use several threads
 * (below it the fork/join costs more than the memory traffic it could overlap). */
#define FX_F32_EW_CHUNK 16384
#define FX_F32_EW_MIN_PARALLEL (1 << 18)

#endif
