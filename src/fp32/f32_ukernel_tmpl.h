/* The fp32 GEMM micro-kernel of the FMA levels, written once for any vector width: an
 * FX_UK_MR x (2 * FX_UK_LANES) tile, per k step two vectors of B loaded, FX_UK_MR values of A
 * broadcast and 2 * FX_UK_MR independent FMAs issued. Each output is one FMA chain over k
 * (one rounding per step), so every width gives the same bits (f32_kernels.h).
 *
 * An ISA file defines the macros below, includes this header once per kernel, and gets
 * `static void FX_UK_NAME(...)`, an fx_f32_ukernel. FX_UK_NAME, FX_UK_MR and FX_UK_ASTRIDE
 * are undefined again, each kernel's own; the level's vector macros (FX_UK_LANES to FX_UK_FMA)
 * stay defined for the file's next kernel:
 *   FX_UK_NAME         the function's name
 *   FX_UK_MR           rows of the tile, an integer literal (it also sets the unroll pragmas)
 *   FX_UK_LANES        floats per vector; the tile is 2 * FX_UK_LANES columns
 *   FX_UK_VEC          the vector type
 *   FX_UK_ZERO()       all lanes +0
 *   FX_UK_LOAD(p)      aligned load (packed B is 64-byte aligned)
 *   FX_UK_LOADU(p)     unaligned load (C)
 *   FX_UK_STOREU(p, v) unaligned store (C)
 *   FX_UK_BCAST(p)     *p in every lane
 *   FX_UK_FMA(a, b, c) a * b + c with one rounding
 *   FX_UK_ASTRIDE      optional: floats of A per k step, when the kernel computes the first
 *                      FX_UK_MR rows of a wider packed panel (the framework's last row panel
 *                      of a product whose rows are not whole panels); FX_UK_MR by default
 *   FX_UK_NV           optional: vectors of C per row, 2 by default; 1 computes the first
 *                      FX_UK_LANES columns of the packed B panel (2 FX_UK_LANES wide) only,
 *                      the last column panel of a product with N = 16, 48, ... at 16 lanes
 * Apart from _mm_prefetch (SSE, present on every level) the body uses only these macros; the
 * including file is compiled with its level's flags. */

#define FX_UK_PRAGMA(x) _Pragma(#x)
#define FX_UK_UNROLL(n) FX_UK_PRAGMA(GCC unroll n)
#define FX_UK_NR (2 * FX_UK_LANES)
#ifndef FX_UK_NV
#define FX_UK_NV 2
#endif
_Static_assert(FX_UK_NV == 1 || FX_UK_NV == 2, "one or two vectors of C per row");
#ifndef FX_UK_ASTRIDE
#define FX_UK_ASTRIDE FX_UK_MR
#endif
_Static_assert(FX_UK_ASTRIDE >= FX_UK_MR, "a kernel reads at most its panel's rows");

static void FX_UK_NAME(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                       int accumulate)
{
    FX_UK_VEC acc[FX_UK_MR][2];
    if (accumulate) {
        FX_UK_UNROLL(FX_UK_MR)
        for (int r = 0; r < FX_UK_MR; r++) {
            acc[r][0] = FX_UK_LOADU(c + r * ldc);
            if (FX_UK_NV > 1) acc[r][1] = FX_UK_LOADU(c + r * ldc + FX_UK_LANES);
        }
    } else {
        FX_UK_UNROLL(FX_UK_MR)
        for (int r = 0; r < FX_UK_MR; r++) acc[r][0] = acc[r][1] = FX_UK_ZERO();
    }
    /* The framework's next tile is usually the one to the right: start fetching its C rows
     * now (every 64-byte line of a row's FX_UK_NR floats), so that its first loads do not wait
     * for L3. The address is formed as an integer: it may lie past the end of C, and
     * prefetches never fault. */
    FX_UK_UNROLL(FX_UK_MR)
    for (int r = 0; r < FX_UK_MR; r++) {
        const uintptr_t next = (uintptr_t)(c + r * ldc) + FX_UK_NV * FX_UK_LANES * sizeof(float);
        for (size_t line = 0; line < FX_UK_NV * FX_UK_LANES * sizeof(float); line += 64)
            _mm_prefetch((const char *)(next + line), _MM_HINT_T0);
    }
    for (int64_t k = 0; k < kc; k++) {
        const FX_UK_VEC b0 = FX_UK_LOAD(b), b1 = FX_UK_NV > 1 ? FX_UK_LOAD(b + FX_UK_LANES) : b0;
        FX_UK_UNROLL(FX_UK_MR)
        for (int r = 0; r < FX_UK_MR; r++) {
            const FX_UK_VEC ar = FX_UK_BCAST(a + r);
            acc[r][0] = FX_UK_FMA(ar, b0, acc[r][0]);
            if (FX_UK_NV > 1) acc[r][1] = FX_UK_FMA(ar, b1, acc[r][1]);
        }
        a += FX_UK_ASTRIDE;
        b += FX_UK_NR;
    }
    FX_UK_UNROLL(FX_UK_MR)
    for (int r = 0; r < FX_UK_MR; r++) {
        FX_UK_STOREU(c + r * ldc, acc[r][0]);
        if (FX_UK_NV > 1) FX_UK_STOREU(c + r * ldc + FX_UK_LANES, acc[r][1]);
    }
}

#undef FX_UK_NR
#undef FX_UK_NV
#undef FX_UK_ASTRIDE
#undef FX_UK_UNROLL
#undef FX_UK_PRAGMA
#undef FX_UK_NAME
#undef FX_UK_MR
