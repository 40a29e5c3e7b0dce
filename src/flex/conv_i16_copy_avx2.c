/* The direct integer forward's per-image copy on AVX2: fx_i16_fwd_copy_image's pair words and
 * row norms, the same values (test_conv_i16_direct compares the two).
 *
 * Why: the portable copy writes one 32-bit word per pixel Cpp words apart, then reads the copy
 * again for the norms, a scalar pass per channel pair. On ResNet-20's 16-channel 32 x 32 layers
 * (AVX2 EPYC, one thread) the copy took 14 % of the forward pass against 45 % for the tiles. Here
 * an image is first interleaved into pair planes (two channel rows into one row of words, in
 * vectors), the sums of squares come from the planes in vertical operations, and an 8 x 8
 * transpose of 32-bit words writes each pixel's pairs together. The planes hold one image,
 * small enough (Cpp Hp Wp words: 37 KB for 16 channels at 34 x 34) to stay in the cache between
 * the three steps. */
#include "conv_i16_direct.h"
#include "gemm_i16.h"
#include "../nn/im2col.h"
#include "../core/transpose_avx2.h"

#include <immintrin.h>
#include <string.h>

/* one row of n pair words from two channel rows (d NULL: the odd channel past C, zeros) */
static inline void pair_row(const uint16_t *e, const uint16_t *d, int64_t n, uint32_t *q)
{
    int64_t p = 0;
    for (; p + 16 <= n; p += 16) {
        const __m256i ev = _mm256_loadu_si256((const __m256i *)(e + p));
        const __m256i dv = d ? _mm256_loadu_si256((const __m256i *)(d + p)) : _mm256_setzero_si256();
        /* per 128-bit lane: pixels 0-3 and 8-11 in lo, 4-7 and 12-15 in hi */
        const __m256i lo = _mm256_unpacklo_epi16(ev, dv), hi = _mm256_unpackhi_epi16(ev, dv);
        _mm256_storeu_si256((__m256i *)(q + p), _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_storeu_si256((__m256i *)(q + p + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
    if (p + 8 <= n) {
        const __m128i ev = _mm_loadu_si128((const __m128i *)(e + p));
        const __m128i dv = d ? _mm_loadu_si128((const __m128i *)(d + p)) : _mm_setzero_si128();
        _mm_storeu_si128((__m128i *)(q + p), _mm_unpacklo_epi16(ev, dv));
        _mm_storeu_si128((__m128i *)(q + p + 4), _mm_unpackhi_epi16(ev, dv));
        p += 8;
    }
    for (; p < n; p++) q[p] = (uint32_t)e[p] | (d ? (uint32_t)d[p] << 16 : 0u);
}

/* planes[cp][ih Wp + iw] = (x[2cp][ih - ph][iw - pw], x[2cp + 1][...]): the padded image's pair
 * planes from the unpadded one (C planes of H x W), zero in the padding, for the odd channel
 * past C and for the pairs past it up to Cpp, so that every segment is whole */
static void pair_planes(const struct fx_conv_geom *g, const uint16_t *x, int64_t Cpp,
                        uint32_t *planes)
{
    const int64_t C = g->C, Cp = (C + 1) / 2, H = g->H, W = g->W, ph = g->ph, pw = g->pw;
    const int64_t Wp = W + 2 * pw, HW = (H + 2 * ph) * Wp;
    memset(planes + Cp * HW, 0, sizeof(uint32_t) * (size_t)((Cpp - Cp) * HW));
    for (int64_t cp = 0; cp < Cp; cp++) {
        const uint16_t *e = x + 2 * cp * H * W, *d = 2 * cp + 1 < C ? e + H * W : NULL;
        uint32_t *q = planes + cp * HW;
        memset(q, 0, sizeof(uint32_t) * (size_t)(ph * Wp + pw));
        for (int64_t ih = 0; ih < H; ih++) {
            uint32_t *r = q + (ph + ih) * Wp + pw;
            /* the same row of the next pair of planes (past the image on the last pair: a
             * prefetch does not fault). Without it the loads of this row took about half of
             * the copy's time: one row per plane and pair is too short a stream for the
             * hardware's prefetcher (dfp16 ResNet-20 training, perf, AVX2 EPYC: the copy's
             * samples 0.75x those of stage 3's tiles before, 0.50x after) */
            const uintptr_t next = (uintptr_t)(e + ih * W) + sizeof(uint16_t) * (size_t)(2 * H * W);
            _mm_prefetch((const char *)next, _MM_HINT_T0);
            _mm_prefetch((const char *)(next + sizeof(uint16_t) * (size_t)(H * W)), _MM_HINT_T0);
            pair_row(e + ih * W, d ? d + ih * W : NULL, W, r);
            /* this row's right padding and the next one's left, if there is a next */
            memset(r + W, 0, sizeof(uint32_t) * (size_t)(ih + 1 < H ? 2 * pw : pw));
        }
        memset(q + (ph + H) * Wp, 0, sizeof(uint32_t) * (size_t)(ph * Wp));
    }
}

/* a segment's four pair words of 8 pixels: the per-pixel sums of squares as two vectors of four
 * 64-bit lanes (pixels 0-3, 4-7). vpmaddwd's x0^2 + x1^2 <= 2^31 fits an unsigned 32-bit lane
 * (the int32 result wraps only at exactly 2^31, read here as unsigned); four of them need 34
 * bits. */
static inline void segment_squares(const uint32_t *q, int64_t HW, int64_t p, __m256i *s03,
                                   __m256i *s47)
{
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
    for (int j = 0; j < FX_I16_SEG_PAIRS; j++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(q + j * HW + p));
        const __m256i sq = _mm256_madd_epi16(v, v);
        a = _mm256_add_epi64(a, _mm256_cvtepu32_epi64(_mm256_castsi256_si128(sq)));
        b = _mm256_add_epi64(b, _mm256_cvtepu32_epi64(_mm256_extracti128_si256(sq, 1)));
    }
    *s03 = a;
    *s47 = b;
}

/* sq[s HW + p]: segment s's sum of squares at pixel p */
static void sums_of_squares(const uint32_t *planes, int64_t G, int64_t HW, uint64_t *sq)
{
    for (int64_t s = 0; s < G; s++) {
        const uint32_t *q = planes + s * FX_I16_SEG_PAIRS * HW;
        uint64_t *out = sq + s * HW;
        int64_t p = 0;
        for (; p + 8 <= HW; p += 8) {
                __m256i a, b;
                segment_squares(q, HW, p, &a, &b);
                _mm256_storeu_si256((__m256i *)(out + p), a);
                _mm256_storeu_si256((__m256i *)(out + p + 4), b);
            }
        for (; p < HW; p++) {
            int64_t t = 0;
            for (int64_t j = 0; j < FX_I16_SEG_PAIRS; j++) {
                const int64_t lo = (int16_t)(q[j * HW + p] & 0xFFFF), hi = (int16_t)(q[j * HW + p] >> 16);
                t += lo * lo + hi * hi;
            }
            out[p] = (uint64_t)t;
        }
    }
}

/* xq[p Cpp + cp] = planes[cp][p]: 8 pixels by 8 pairs at a time (Cpp is a multiple of 4: a
 * last group of 4 pairs takes half a transpose, the other half zeros, not stored) */
static void planes_to_pixels(const uint32_t *planes, int64_t Cpp, int64_t HW, uint32_t *xq)
{
    int64_t p = 0;
    for (; p + 8 <= HW; p += 8)
        for (int64_t c0 = 0; c0 < Cpp; c0 += 8) {
            const int64_t nc = Cpp - c0 < 8 ? Cpp - c0 : 8; /* 4 or 8 */
            __m256i r[8];
            for (int64_t j = 0; j < 8; j++)
                r[j] = j < nc ? _mm256_loadu_si256((const __m256i *)(planes + (c0 + j) * HW + p))
                                   : _mm256_setzero_si256();
            fx_transpose8x8_epi32(r);
            uint32_t *d = xq + p * Cpp + c0;
            if (nc == 8)
                for (int i = 0; i < 8; i++) _mm256_storeu_si256((__m256i *)(d + i * Cpp), r[i]);
            else
                for (int i = 0; i < 8; i++)
                    _mm_storeu_si128((__m128i *)(d + i * Cpp), _mm256_castsi256_si128(r[i]));
        }
    for (; p < HW; p++)
        for (int64_t cp = 0; cp < Cpp; cp++) xq[p * Cpp + cp] = planes[cp * HW + p];
}

void fx_i16_fwd_copy_image_avx2(const struct fx_conv_geom *g, const int16_t *img, uint32_t *xq,
                                uint32_t *rn, uint32_t *planes, uint64_t *sq)
{
    const int64_t C = g->C, Cpp = fx_i16_pairs(C), G = fx_i16_groups(C);
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, HW = Hp * Wp;
    pair_planes(g, (const uint16_t *)(const void *)img, Cpp, planes);
    sums_of_squares(planes, G, HW, sq);
    for (int64_t ih = 0; ih < Hp; ih++)
        for (int64_t s = 0; s < G; s++) {
            const uint64_t *r = sq + s * HW + ih * Wp;
            uint64_t m = 0;
            for (int64_t iw = 0; iw < Wp; iw++) m = r[iw] > m ? r[iw] : m;
            rn[ih * G + s] = (uint32_t)fx_ceil_sqrt((int64_t)m);
        }
    planes_to_pixels(planes, Cpp, HW, xq);
}
