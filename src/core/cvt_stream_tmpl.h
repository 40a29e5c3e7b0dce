/* The streaming driver of the bulk fp16 / bf16 conversions (src/fp16/fp16_<isa>.c,
 * src/bf16/bf16_<isa>.c), written once for every direction and vector width.
 *
 * Outputs below FX_CVT_STREAM_MIN_BYTES (fp16_kernels.h, bf16_kernels.h), and outputs not
 * aligned to their element, are converted with normal stores (FX_CS_CACHED). Larger ones are
 * converted in three parts: a head up to the first FX_CS_LINE-byte boundary of dst with normal
 * stores, whole FX_CS_STEP-element steps with streaming stores (FX_CS_STREAM, dst aligned to
 * FX_CS_LINE), an sfence, and the tail with normal stores. Every element is converted by the
 * same per-vector code either way, so the bits do not depend on the path.
 *
 * An ISA file defines the macros below, includes this header, and gets the public function
 * `void FX_CS_NAME(const FX_CS_SRC *src, FX_CS_DST *dst, int64_t n)` (the macros are undefined
 * again, so the header can be included once per direction):
 *   FX_CS_NAME              the function's name
 *   FX_CS_SRC, FX_CS_DST    element types
 *   FX_CS_CACHED(s, d, n)   converts any n >= 0 elements with normal stores
 *   FX_CS_LINE              bytes one streaming step's stores start on (32: ymm, 64: zmm)
 *   FX_CS_STEP              elements per streaming step
 *   FX_CS_STREAM(s, d)      converts FX_CS_STEP elements with streaming stores, d aligned to
 *                           FX_CS_LINE
 * Apart from _mm_sfence (SSE, present on every level) the body uses only these macros. */

void FX_CS_NAME(const FX_CS_SRC *src, FX_CS_DST *dst, int64_t n)
{
    const int64_t esz = (int64_t)sizeof(FX_CS_DST);
    if (n * esz < FX_CVT_STREAM_MIN_BYTES || ((uintptr_t)dst & (uintptr_t)(esz - 1))) {
        FX_CS_CACHED(src, dst, n);
        return;
    }
    /* Streaming stores need FX_CS_LINE-byte aligned destinations: convert a head up to that. */
    int64_t i = (int64_t)((FX_CS_LINE - ((uintptr_t)dst & (FX_CS_LINE - 1))) & (FX_CS_LINE - 1)) /
                esz;
    FX_CS_CACHED(src, dst, i);
    for (; i + FX_CS_STEP <= n; i += FX_CS_STEP) FX_CS_STREAM(src + i, dst + i);
    _mm_sfence(); /* order the streaming stores before anything the caller writes next */
    FX_CS_CACHED(src + i, dst + i, n - i);
}

#undef FX_CS_NAME
#undef FX_CS_SRC
#undef FX_CS_DST
#undef FX_CS_CACHED
#undef FX_CS_LINE
#undef FX_CS_STEP
#undef FX_CS_STREAM
