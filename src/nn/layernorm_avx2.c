/* Layer norm's row kernels on AVX2: eight rows side by side (src/nn/layernorm_impl.h). */
#include "../core/transpose_avx2.h"

#include <immintrin.h>
#include <stdint.h>

#define LANES 8
#define LN_VF __m256
#define LN_VM __m256i
#define LN_LOAD(m, p) _mm256_maskload_ps((p), (m))
#define LN_STORE(p, m, v) _mm256_maskstore_ps((p), (m), (v))
#define LN_LOADU(p) _mm256_loadu_ps(p)
#define LN_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define LN_ZERO() _mm256_setzero_ps()
#define LN_SET1(x) _mm256_set1_ps(x)
#define LN_ADD(a, b) _mm256_add_ps((a), (b))
#define LN_SUB(a, b) _mm256_sub_ps((a), (b))
#define LN_MUL(a, b) _mm256_mul_ps((a), (b))
#define LN_DIV(a, b) _mm256_div_ps((a), (b))
#define LN_SQRT(a) _mm256_sqrt_ps(a)
#define LN_TRANSPOSE(t) fx_transpose8x8_ps(t)
#define LN_NAME(f) f##_avx2

/* a mask for maskload / maskstore: lanes below min(n, 8) set */
static inline __m256i ln_mask(int64_t n)
{
    const int c = n >= LANES ? LANES : (n > 0 ? (int)n : 0);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#include "layernorm_impl.h"

const fx_ln_kernels fx_ln_kernels_avx2 = LN_KERNELS_TABLE;
