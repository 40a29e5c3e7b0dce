/* The phases' sums into dx's rows (conv_dgrad_phases.c), in AVX2: the route runs only on levels
 * with a direct integer kernel (AVX2 and AVX-512), so the CPU has AVX2.
 *
 * Why: the phases leave their sums pixel-major (a pixel's C channels together) and dx is
 * channel-major. Copying element by element through each pixel's pointer took a fifth of
 * ResNet-20's stride-2 input gradients on the AVX2 EPYC. Here each dx row is first laid out
 * pixel-major in a small buffer (one contiguous copy of C sums per pixel, or zeros), then
 * turned by 4 x 4 transposes of 64-bit lanes into four channels' rows at a time. */
#include "conv_dgrad_phases.h"

#include <immintrin.h>
#include <string.h>

void fx_conv_dgrad_gather_rows_avx2(const int64_t *const *src, int64_t W, int64_t C,
                                    int64_t *row, int64_t *drow, int64_t HW)
{
    for (int64_t w = 0; w < W; w++) {
        if (src[w])
            memcpy(row + w * C, src[w], sizeof(int64_t) * (size_t)C);
        else
            memset(row + w * C, 0, sizeof(int64_t) * (size_t)C);
    }
    const int64_t W4 = W / 4 * 4, C4 = C / 4 * 4;
    for (int64_t c = 0; c < C4; c += 4) {
        int64_t *d = drow + c * HW;
        for (int64_t w = 0; w < W4; w += 4) {
            const int64_t *s = row + w * C + c;
            const __m256i r0 = _mm256_loadu_si256((const __m256i *)s);
            const __m256i r1 = _mm256_loadu_si256((const __m256i *)(s + C));
            const __m256i r2 = _mm256_loadu_si256((const __m256i *)(s + 2 * C));
            const __m256i r3 = _mm256_loadu_si256((const __m256i *)(s + 3 * C));
            const __m256i t0 = _mm256_unpacklo_epi64(r0, r1), t1 = _mm256_unpackhi_epi64(r0, r1);
            const __m256i t2 = _mm256_unpacklo_epi64(r2, r3), t3 = _mm256_unpackhi_epi64(r2, r3);
            _mm256_storeu_si256((__m256i *)(d + w), _mm256_permute2x128_si256(t0, t2, 0x20));
            _mm256_storeu_si256((__m256i *)(d + HW + w), _mm256_permute2x128_si256(t1, t3, 0x20));
            _mm256_storeu_si256((__m256i *)(d + 2 * HW + w), _mm256_permute2x128_si256(t0, t2, 0x31));
            _mm256_storeu_si256((__m256i *)(d + 3 * HW + w), _mm256_permute2x128_si256(t1, t3, 0x31));
        }
        for (int64_t w = W4; w < W; w++)
            for (int64_t j = 0; j < 4; j++) d[j * HW + w] = row[w * C + c + j];
    }
    for (int64_t c = C4; c < C; c++)
        for (int64_t w = 0; w < W; w++) drow[c * HW + w] = row[w * C + c];
}
