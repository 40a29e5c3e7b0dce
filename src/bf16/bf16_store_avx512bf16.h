/* Register tiles of fp32 sums rounded to bf16 straight into an NCHW y, shared by the direct
 * forward kernels of the dpbf16 route (bf16_conv_avx512bf16.c) and the AMX route
 * (bf16_conv_amx.c). Included only by files compiled with AVX-512 F/BW/VL and AVX512_BF16. */
#ifndef FX_BF16_STORE_AVX512BF16_H
#define FX_BF16_STORE_AVX512BF16_H

#include "bf16_round_avx512bf16.h"
#include "../core/transpose_avx512.h"

#include <immintrin.h>
#include <stdint.h>

/* A forward tile's sums straight into a bf16 y: the tile's rows of 16 channels go through one
 * 16 x 16 transpose (NV = 2: the 8 pixel rows of the first 16 channels, then of the next 16),
 * so that each register then holds one channel's pixels (NV = 2: two channels' 8 each), which
 * are contiguous in y's NCHW layout; each is rounded to bf16 and stored under the pixel mask.
 * The rounding is the definition's (fx_bf16_round16): vcvtneps2bf16 unless the tile holds a
 * NaN or a nonzero subnormal, which the integer path rounds instead. This spares the pass that
 * converts and transposes a pixel-major fp32 stage of the chunk (about a twelfth of a bf16
 * ResNet-20 step went to it). out: channel 0's first pixel; ldo: the channels' stride (OH OW);
 * nout: the channels this tile holds. */
static inline __attribute__((always_inline)) void fx_bf16_store_rows(const int MR, const int NV,
                                                                     __m512 acc[][4], uint16_t *out,
                                                                     int64_t ldo, int rows, int nout)
{
    __m512 t[16];
    __mmask16 special = 0;
    for (int i = 0; i < 16; i++) {
        const int r = NV == 1 ? i : i % 8, v = NV == 1 ? 0 : i / 8;
        t[i] = r < MR ? acc[r][v] : _mm512_setzero_ps();
        special |= fx_bf16_special_lanes(t[i]);
    }
    fx_transpose16x16_ps(t);
    const __mmask16 rmask = (__mmask16)((1u << rows) - 1u);
    for (int j = 0; j < 16; j++) {
        const __m256i h = fx_bf16_round16(t[j], special != 0);
        if (rows == 16 && NV == 1) { /* whole rows: plain stores */
            if (j < nout) _mm256_storeu_si256((__m256i *)(out + j * ldo), h);
        } else if (rows == 8 && NV == 2) {
            _mm_storeu_si128((__m128i *)(out + j * ldo), _mm256_castsi256_si128(h));
            if (16 + j < nout)
                _mm_storeu_si128((__m128i *)(out + (16 + j) * ldo), _mm256_extracti128_si256(h, 1));
        } else if (NV == 1) {
            if (j < nout) _mm256_mask_storeu_epi16(out + j * ldo, rmask, h);
        } else {
            _mm_mask_storeu_epi16(out + j * ldo, (__mmask8)rmask, _mm256_castsi256_si128(h));
            if (16 + j < nout)
                _mm_mask_storeu_epi16(out + (16 + j) * ldo, (__mmask8)rmask,
                                      _mm256_extracti128_si256(h, 1));
        }
    }
}

#endif
