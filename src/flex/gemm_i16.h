/* Exact int16 x int16 -> int64 GEMM: the portable driver (blocking, packing, threads) shared
 * by the SIMD levels, which supply only a register-tile micro-kernel. No intrinsics here.
 *
 * Why the result is exact although SIMD lanes accumulate in int32
 * ----------------------------------------------------------------
 * The pair-product instructions (vpmaddwd, vpdpwssd) add a0*b0 + a1*b1 into an int32 lane.
 * With full-range int16 operands one pair sum is up to 2 * 2^30 = 2^31 and two of them already
 * wrap. So the packing splits every B value into two small signed parts,
 *     b = 256 * bh + bl,   bl = ((b + 128) mod 256) - 128 in [-128, 127],   bh in [-128, 128],
 * and the micro-kernel keeps two int32 accumulators per lane, Sh = sum a*bh and Sl = sum a*bl.
 * Each pair sum in either chain is at most 2 * 2^15 * 2^7 = 2^23 in magnitude (even for the
 * out-of-format value -32768), so a chain of FX_GEMM_I16_MAX_KP <= 255 pair steps stays below
 * 255 * 2^23 < 2^31: no int32 lane ever wraps. After at most that many steps the micro-kernel
 * widens both chains to int64 and adds 256 * Sh + Sl = sum a*b into C. Every step is exact, so
 * the int64 result equals the mathematical sum, whatever the blocking, ISA or thread count.
 *
 * Packed layouts (K is walked in pairs k = 2p, 2p+1; a missing odd element is packed as 0):
 *   A micro-panel (mr rows, kp pairs): int32 ap[p*mr + i] holds A[i][2p] in its low 16 bits
 *     and A[i][2p+1] in its high 16 bits, ready for a 32-bit broadcast.
 *   B micro-panel (nr columns, kp pairs): 4*nr int16 per pair p:
 *     bp[p*4nr + 2j + t]        = bh(B[2p+t][j])   (the high parts, pair-interleaved)
 *     bp[p*4nr + 2nr + 2j + t]  = bl(B[2p+t][j])   (the low parts)
 *   Rows beyond M and columns beyond N are packed as zeros.
 */
#ifndef FX_FLEX_GEMM_I16_H
#define FX_FLEX_GEMM_I16_H

#include "flex_kernels.h"

/* Longest int32 chain, in K pairs, that provably cannot wrap (see above). */
#define FX_GEMM_I16_MAX_KP 255

/* Micro-kernel: C[0..m, 0..n] (row stride ldc, int64) = (accumulate ? C : 0) + the exact
 * products of an mr x kp A micro-panel and a kp x nr B micro-panel. kp <= FX_GEMM_I16_MAX_KP;
 * m <= mr and n <= nr are the valid part of the tile (only it is read and written). The
 * packed panels are 64-byte aligned. */
typedef void (*fx_gemm_i16_ukr)(int64_t kp, const int32_t *ap, const int16_t *bp, int64_t *c,
                                int64_t ldc, int m, int n, int accumulate);

typedef struct fx_gemm_i16_kernel {
    int mr, nr; /* register tile */
    fx_gemm_i16_ukr ukr;
} fx_gemm_i16_kernel;

/* Run an FX_OP_MATMUL call (operand contract of backend.h) with micro-kernel k.
 * Returns FX_OK, or FX_ENOMEM if the packing buffers cannot be allocated. */
int fx_gemm_i16(const fx_op_call *c, const fx_gemm_i16_kernel *k);

#endif
