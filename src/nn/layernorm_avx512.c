/* Layer norm's row kernels on AVX-512: sixteen rows side by side (src/nn/layernorm_impl.h). */
#include "../core/transpose_avx512.h"

#include <immintrin.h>
#include <stdint.h>

#define LANES 16
#define LN_VF __m512
#define LN_VM __mmask16
#define LN_LOAD(m, p) _mm512_maskz_loadu_ps((m), (p))
#define LN_STORE(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
#define LN_LOADU(p) _mm512_loadu_ps(p)
#define LN_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define LN_ZERO() _mm512_setzero_ps()
#define LN_SET1(x) _mm512_set1_ps(x)
#define LN_ADD(a, b) _mm512_add_ps((a), (b))
#define LN_SUB(a, b) _mm512_sub_ps((a), (b))
#define LN_MUL(a, b) _mm512_mul_ps((a), (b))
#define LN_DIV(a, b) _mm512_div_ps((a), (b))
#define LN_SQRT(a) _mm512_sqrt_ps(a)
#define LN_TRANSPOSE(t) fx_transpose16x16_ps(t)
#define LN_NAME(f) f##_avx512

static inline __mmask16 ln_mask(int64_t n)
{
    return n >= LANES ? (__mmask16)0xFFFF : (n > 0 ? (__mmask16)((1u << n) - 1u) : 0);
}

#include "layernorm_impl.h"

const fx_ln_kernels fx_ln_kernels_avx512 = LN_KERNELS_TABLE;
