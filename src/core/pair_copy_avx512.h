/* Channel-pair copies of 16-bit image data for the direct convolution kernels (bf16 on
 * vdpbf16ps, int16 on vpdpwssd): both multiply pairs of neighbouring channels, so both want
 * each pixel's channels as 32-bit pair words, channel pairs last. The copies only move bits, so
 * one code serves bf16 and int16. Include only from files compiled with the AVX-512 flags. */
#ifndef FX_CORE_PAIR_COPY_AVX512_H
#define FX_CORE_PAIR_COPY_AVX512_H

#include "lanes_avx512.h"
#include "transpose_avx512.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The vpermt2w index that pairs the first 16 values of two sources: lane 2j takes the first
 * source's value j, lane 2j + 1 the second's (adding 16 to every lane pairs values 16-31) */
static inline __m512i fx_pair_words_idx(void)
{
    static const uint16_t idx[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                     37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                     11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    return _mm512_loadu_si512(idx);
}

/* dst[2j + t] = (t ? r1 : r0)[j] for j < n: two rows of 16-bit values as pair words */
static inline void fx_interleave16_avx512(uint16_t *dst, const uint16_t *r0, const uint16_t *r1,
                                          int64_t n)
{
    const __m512i lo = fx_pair_words_idx();
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        const __m512i x0 = _mm512_loadu_si512(r0 + j), x1 = _mm512_loadu_si512(r1 + j);
        _mm512_storeu_si512(dst + 2 * j, _mm512_permutex2var_epi16(x0, lo, x1));
        _mm512_storeu_si512(dst + 2 * j + 32, _mm512_permutex2var_epi16(x0, hi, x1));
    }
    if (n - j == 16) { /* rows of 16 pixels: half vectors, no masks */
        const __m512i x0 = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(r0 + j)));
        const __m512i x1 = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(r1 + j)));
        _mm512_storeu_si512(dst + 2 * j, _mm512_permutex2var_epi16(x0, lo, x1));
        return;
    }
    if (n - j == 8) { /* and of 8 */
        const __m512i x0 = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(r0 + j)));
        const __m512i x1 = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(r1 + j)));
        _mm256_storeu_si256((__m256i *)(dst + 2 * j),
                            _mm512_castsi512_si256(_mm512_permutex2var_epi16(x0, lo, x1)));
        return;
    }
    if (j < n) { /* the last n - j < 32 values under masks */
        const int64_t rem = n - j;
        const __mmask32 m = (__mmask32)((1ull << rem) - 1);
        const __m512i x0 = _mm512_maskz_loadu_epi16(m, r0 + j);
        const __m512i x1 = _mm512_maskz_loadu_epi16(m, r1 + j);
        const __mmask32 m0 = (__mmask32)(rem >= 16 ? 0xFFFFFFFFull : (1ull << 2 * rem) - 1);
        const __mmask32 m1 = (__mmask32)(rem > 16 ? (1ull << (2 * rem - 32)) - 1 : 0);
        _mm512_mask_storeu_epi16(dst + 2 * j, m0, _mm512_permutex2var_epi16(x0, lo, x1));
        _mm512_mask_storeu_epi16(dst + 2 * j + 32, m1, _mm512_permutex2var_epi16(x0, hi, x1));
    }
}

/* out[i ld + cp] = planes[cp][i] for cp < Cp, i < HW: the Cp x HW word matrix transposed by
 * 16 x 16 blocks, each pixel's pairs ld words apart (ld >= Cp; words Cp..ld-1 not written) */
static inline void fx_pair_planes_transpose_avx512(const uint32_t *planes, int64_t Cp, int64_t HW,
                                                   int64_t ld, uint32_t *out)
{
    for (int64_t c0 = 0; c0 < Cp; c0 += 16) {
        const int nc = Cp - c0 < 16 ? (int)(Cp - c0) : 16;
        const __mmask16 cm = (__mmask16)((1u << nc) - 1);
        for (int64_t p0 = 0; p0 < HW; p0 += 16) {
            const int np = HW - p0 < 16 ? (int)(HW - p0) : 16;
            const __mmask16 pm = (__mmask16)((1u << np) - 1);
            __m512 v[16];
            /* plain loads and stores where a block is whole, or half wide (8 pairs: 16
             * channels); masked ones on every block cost time on the Zen 5 */
            for (int i = 0; i < 16; i++)
                v[i] = i < nc ? fx_load_d16(planes + (c0 + i) * HW + p0, pm) : _mm512_setzero_ps();
            fx_transpose16x16_ps(v); /* v[t]: pixel p0 + t, pair c0 + i in lane i */
            float *o = (float *)(void *)(out + p0 * ld + c0);
            if (nc == 8) /* half wide: one plain 256-bit store */
                for (int t = 0; t < np; t++) _mm256_storeu_ps(o + t * ld, _mm512_castps512_ps256(v[t]));
            else
                for (int t = 0; t < np; t++) fx_store_d16(o + t * ld, cm, v[t]);
        }
    }
}

/* The padded image's pair words pixel by pixel, straight from the unpadded image (C planes
 * of H x W 16-bit values): xq[(ih Wp + iw) ld + cp] = (x[2cp], x[2cp + 1]) at image pixel
 * (ih - ph, iw - pw) for cp < Cp = ceil(C / 2), over the Hp = H + 2 ph rows of Wp = W + 2 pw
 * pixels, zero words in the padding, zero halves past C and zero words for Cp <= cp < ld.
 * Why one pass: padded pair planes first and their transpose after
 * (fx_pair_planes_transpose_avx512) wrote and read the planes once more (37 KB an image at 16
 * channels of 34 x 34, beyond L1), and the integer kernels' row norms read them a third time;
 * here 16 pixels of 16 pairs are interleaved, summed and transposed in registers (a ResNet-20
 * 16-channel chunk's copy in 0.62-0.78x the two-pass route's time with its input out of
 * cache, Zen 4).
 *
 * Where sq is not NULL (ld a multiple of 4), sq[ih G + s], G = ld / 4, is the largest over padded
 * row ih's pixels of the sum of the squares of the values of pairs 4s .. 4s + 3, summed with
 * saturation (vpdpwssds: INT32_MAX where the sum may be larger); the integer kernels take their
 * row norms from it (fx_i16_fwd_copy_image defines them). */
#define FX_PAIR_NHWC_AHEAD 2
static inline void fx_pair_nhwc_padded_avx512(const uint16_t *img, int64_t C, int64_t H,
                                              int64_t W, int64_t ph, int64_t pw, int64_t ld,
                                              uint32_t *xq, int32_t *sq)
{
    const __m512i lo = fx_pair_words_idx();
    const int64_t Cp = (C + 1) / 2, Hp = H + 2 * ph, Wp = W + 2 * pw, G = ld / 4;
    for (int64_t ihp = 0; ihp < Hp; ihp++) {
        uint32_t *orow = xq + ihp * Wp * ld;
        const int64_t ih = ihp - ph;
        if (ih < 0 || ih >= H) { /* a padding row: zero words, no squares */
            fx_zero_bytes(orow, 4 * Wp * ld);
            if (sq)
                for (int64_t s = 0; s < G; s++) sq[ihp * G + s] = 0;
            continue;
        }
        fx_zero_bytes(orow, 4 * pw * ld);
        fx_zero_bytes(orow + (pw + W) * ld, 4 * pw * ld);
        /* each channel's row FX_PAIR_NHWC_AHEAD rows on, where it starts a cache line of its
         * own (short rows share lines): C rows a step are more streams than the hardware's
         * prefetchers follow */
        const int64_t ahead = ih + FX_PAIR_NHWC_AHEAD;
        if (ahead < H && (ahead * W * 2) / 64 != ((ahead - 1) * W * 2) / 64)
            for (int64_t c = 0; c < C; c++)
                for (int64_t b = 0; b < 2 * W; b += 64)
                    _mm_prefetch((const char *)(img + (c * H + ahead) * W) + b, _MM_HINT_T0);
        for (int64_t c0 = 0; c0 < ld; c0 += 16) {
            const int nc = ld - c0 < 16 ? (int)(ld - c0) : 16;
            const __mmask16 cm = (__mmask16)((1u << nc) - 1);
            __m512i mx[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(),
                             _mm512_setzero_si512(), _mm512_setzero_si512()};
            for (int64_t p0 = 0; p0 < W; p0 += 16) {
                const int np = W - p0 < 16 ? (int)(W - p0) : 16;
                const __mmask16 pm = (__mmask16)((1u << np) - 1);
                __m512 v[16];
                for (int i = 0; i < 16; i++) {
                    const int64_t cp = c0 + i;
                    if (i >= nc || cp >= Cp) {
                        v[i] = _mm512_setzero_ps();
                        continue;
                    }
                    const uint16_t *e = img + (2 * cp * H + ih) * W + p0;
                    const __m256i ev = fx_load_w16(e, pm);
                    const __m256i dv = 2 * cp + 1 < C ? fx_load_w16(e + H * W, pm)
                                                      : _mm256_setzero_si256();
                    v[i] = _mm512_castsi512_ps(_mm512_permutex2var_epi16(
                        _mm512_castsi256_si512(ev), lo, _mm512_castsi256_si512(dv)));
                }
                if (sq)
                    for (int j = 0; j < 4 && 4 * j < nc; j++) {
                        __m512i acc = _mm512_setzero_si512();
                        for (int i = 4 * j; i < 4 * j + 4; i++) {
                            const __m512i w = _mm512_castps_si512(v[i]);
                            acc = _mm512_dpwssds_epi32(acc, w, w);
                        }
                        mx[j] = _mm512_max_epi32(mx[j], acc);
                    }
                float *o = (float *)(void *)(orow + (pw + p0) * ld + c0);
                if (nc == 8) { /* eight pairs (16 channels): half the shuffles of 16 x 16 */
                    __m256 t8[16];
                    fx_transpose8x16_ps(v, t8);
                    for (int t = 0; t < np; t++) _mm256_storeu_ps(o + t * ld, t8[t]);
                    continue;
                }
                fx_transpose16x16_ps(v); /* v[t]: pixel p0 + t, pair c0 + i in lane i */
                for (int t = 0; t < np; t++) fx_store_d16(o + t * ld, cm, v[t]);
            }
            if (sq)
                for (int j = 0; j < 4 && 4 * j < nc; j++)
                    sq[ihp * G + c0 / 4 + j] = _mm512_reduce_max_epi32(mx[j]);
        }
    }
}

/* dyt[n][pp][o] = (dy[o][2pp], dy[o][2pp + 1]) for pp < P / 2 and o < O, zero for
 * O <= o < opad: the chunk's dy (NCHW, images of O P values) as pixel-pair-major words, one
 * 16 x 16 word transpose per block (P even). */
static inline void fx_pair_rows_transpose_avx512(const uint16_t *dy, int64_t nbc, int64_t O,
                                                 int64_t P, int64_t opad, uint32_t *dyt)
{
    const int64_t pp_n = P / 2;
    for (int64_t n = 0; n < nbc; n++) {
        const uint32_t *src = (const uint32_t *)(const void *)(dy + n * O * P);
        uint32_t *dst = dyt + n * pp_n * opad;
        for (int64_t o0 = 0; o0 < opad; o0 += 16) {
            for (int64_t p0 = 0; p0 < pp_n; p0 += 16) {
                const int np = pp_n - p0 < 16 ? (int)(pp_n - p0) : 16;
                const __mmask16 pm = (__mmask16)((1u << np) - 1);
                __m512 v[16];
                for (int i = 0; i < 16; i++)
                    v[i] = o0 + i < O ? fx_load_d16(src + (o0 + i) * (P / 2) + p0, pm)
                                      : _mm512_setzero_ps();
                fx_transpose16x16_ps(v); /* v[t]: pixel pair p0 + t, channel o0 + i in lane i */
                for (int t = 0; t < np; t++)
                    _mm512_storeu_ps((float *)(void *)(dst + (p0 + t) * opad + o0), v[t]);
            }
        }
    }
}

/* Each of rows rows of Wp 16-bit values as its even columns then its odd ones, Wq = ceil(Wp / 2)
 * values each (a missing last odd value is 0), rows 2 Wq apart: the direct weight gradients'
 * input at a horizontal stride of 2, where a pair of neighbouring output pixels reads input
 * columns two apart, which the copy puts side by side (fx_i16_cols_by_stride_portable defines
 * the layout for any stride). Two-source word permutes, 64 values a step. */
static inline void fx_cols_by_2_avx512(const uint16_t *xp, int64_t rows, int64_t Wp, uint16_t *xd)
{
    const int64_t Wq = (Wp + 1) / 2, Wd = 2 * Wq;
    int16_t ie[32], io[32];
    for (int i = 0; i < 32; i++) {
        ie[i] = (int16_t)(2 * i);
        io[i] = (int16_t)(2 * i + 1);
    }
    const __m512i even = _mm512_loadu_si512((const void *)ie);
    const __m512i odd = _mm512_loadu_si512((const void *)io);
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *src = xp + r * Wp;
        uint16_t *de = xd + r * Wd, *dodd = de + Wq;
        for (int64_t j = 0; j < Wp; j += 64) {
            const int64_t m = Wp - j < 64 ? Wp - j : 64, ne = (m + 1) / 2, no = m / 2;
            const __mmask32 m0 = m >= 32 ? ~0u : (1u << m) - 1;
            const __mmask32 m1 = m >= 64 ? ~0u : m > 32 ? (1u << (m - 32)) - 1 : 0;
            const __m512i a = _mm512_maskz_loadu_epi16(m0, src + j);
            /* (a second half with nothing to load reads nothing from a pointer in the row) */
            const __m512i b = _mm512_maskz_loadu_epi16(m1, m > 32 ? src + j + 32 : src + j);
            _mm512_mask_storeu_epi16(de + j / 2, ne >= 32 ? ~0u : (1u << ne) - 1,
                                     _mm512_permutex2var_epi16(a, even, b));
            _mm512_mask_storeu_epi16(dodd + j / 2, no >= 32 ? ~0u : (1u << no) - 1,
                                     _mm512_permutex2var_epi16(a, odd, b));
        }
        if (Wp % 2) dodd[Wq - 1] = 0;
    }
}

#endif
