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
 * the framework runs partial tiles on a scratch tile. */
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

typedef struct fx_f32_gemm_params {
    int mr, nr;           /* micro-tile: rows broadcast from A, columns loaded from B */
    int64_t kc;           /* depth of one packed block (the A micro-panel kc*mr stays in L1) */
    int64_t mc;           /* rows of A packed at once, a multiple of mr (L2/L3 resident) */
    int64_t nc;           /* widest column block of packed B (kc*nc stays in L2) */
    double min_par_work;  /* M*N*K below which one thread is used */
    fx_f32_ukernel kernel;
    fx_f32_pack_fn pack_rows; /* optional, see fx_f32_pack_fn */
    /* fp16 and bf16 operands (all optional: NULL takes the scalar definitions per element) */
    fx_f32_pack16_fn pack_rows_fp16, pack_rows_bf16;
    fx_f32_widen16_fn widen_fp16, widen_bf16;
} fx_f32_gemm_params;

/* c->out_f32[M,N] (row-major) = in[0][M,K] x in[1][K,N], with any element strides. Operands are
 * fp32, or fp16 / bf16 widened exactly to fp32 while they are packed (so the products and sums
 * are those of the fp32 kernel on the widened values, bit for bit, without a separate widening
 * pass over the operands). Uses up to c->nthreads OpenMP threads. Returns FX_OK or FX_ENOMEM
 * (scratch). */
int fx_f32_gemm(const fx_f32_gemm_params *p, const fx_op_call *c);

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
 * nthreads threads, so the bits equal leaf_tree(x, n) for every thread count. */
typedef float (*fx_f32_sum_fn)(const float *x, int64_t n);
float fx_f32_sum_tree_parallel(const float *x, int64_t n, int64_t block, fx_f32_sum_fn leaf_tree,
                               int nthreads);

/* Elements per chunk and the size from which elementwise kernels use several threads
 * (below it the fork/join costs more than the memory traffic it could overlap). */
#define FX_F32_EW_CHUNK 16384
#define FX_F32_EW_MIN_PARALLEL (1 << 18)

#endif
