/* AVX-512BW builder of the implicit-GEMM A panels (conv_panels.h) for the 6-row register tile.
 *
 * A panel of 6 output pixels is "regular" when, relative to its first pixel's base in the
 * padded input, pixel r starts at d_r >= 0 with d_5 + (KW-1)*dw <= 31: then one 32-element load
 * at a kernel row holds the KW taps of all 6 pixels (a panel that wraps to the next output row
 * still qualifies; one that crosses into the next sample, or the chunk's last partial panel,
 * does not and takes the portable loop). K is walked two kernel rows ("groups" (c, kh)) at a
 * time: their 2*KW taps are KW whole pairs (a pair straddles the two rows when KW is odd), i.e.
 * 12*KW int16 of the panel, gathered by vpermt2w from the two rows' loads with indices that
 * depend only on KW, dw and the panel's d_r. */
#include "conv_panels.h"
#include "../core/backend.h" /* the scalar fp16/bf16 definitions */

#include <immintrin.h>
#include <stdlib.h>

#define FX_PANEL_MR 6
#define FX_PANEL_MAX_KW 10 /* 12*KW int16 per two groups: at most 4 vectors of 32 */
#define FX_PANEL_MAX_VEC ((12 * FX_PANEL_MAX_KW + 31) / 32)


/* An irregular panel (rows from two samples, or the chunk's partial last panel): each row's
 * taps one by one from the group offsets, written straight to their panel positions (the
 * portable fx_conv_panel_i16 recomputes every tap's offset with divisions: 30x slower). */
static void fx_panel_rows(const fx_conv_geom *g, const int16_t *xp, int64_t Pc, int64_t m0,
                          const int64_t *base, const int64_t *goff, int64_t G, int64_t kp,
                          int16_t *dst)
{
    const int64_t KW = g->KW, dw = g->dw;
    for (int r = 0; r < FX_PANEL_MR; r++) {
        if (m0 + r >= Pc) {
            for (int64_t p = 0; p < kp; p++) dst[p * 12 + 2 * r] = dst[p * 12 + 2 * r + 1] = 0;
            continue;
        }
        const int16_t *b = xp + base[r];
        int64_t k = 0;
        for (int64_t gi = 0; gi < G; gi++)
            for (int64_t kw = 0; kw < KW; kw++, k++)
                dst[(k >> 1) * 12 + 2 * r + (k & 1)] = b[goff[gi] + kw * dw];
        if (k & 1) dst[(k >> 1) * 12 + 2 * r + 1] = 0; /* odd K: the last pair's high half */
    }
}

int fx_conv_panels_i16_avx512(const fx_conv_geom *g, const int16_t *xp, int64_t nb, int mr,
                              int32_t *ap)
{
    const int64_t KW = g->KW, dw = g->dw;
    _Static_assert(FX_PANEL_MAX_KW == 10, "fx_conv_panels_fit states the same limits");
    if (!fx_conv_panels_fit(g, mr)) return 0;
    const int64_t G = g->C * g->KH, K = G * KW, kp = (K + 1) / 2;
    const int64_t P = g->OH * g->OW, Pc = nb * P;
    const int64_t dmax = 31 - (KW - 1) * dw; /* largest pixel offset a load still covers */
    int64_t *goff = fx_group_offsets(g);
    if (!goff) return 0;

    /* Output word w of a group pair: pair w / 12 of the pair, row r = (w % 12) / 2, half
     * h = w % 2, i.e. tap t = 2 * (w / 12) + h of the 2*KW: source row t / KW (vpermt2w index
     * bit 5), element (t % KW) * dw + d_r. */
    const int npos = (int)(12 * KW), npos_lone = (int)(12 * ((KW + 1) / 2));
    const int nvec = (npos + 31) / 32;
    __m512i tapc[FX_PANEL_MAX_VEC], rsel[FX_PANEL_MAX_VEC];
    __mmask32 mfull[FX_PANEL_MAX_VEC], mlone[FX_PANEL_MAX_VEC];
    for (int v = 0; v < nvec; v++) {
        short tc[32], rs[32];
        for (int l = 0; l < 32; l++) {
            const int w = 32 * v + l, t = 2 * (w / 12) + w % 2;
            tc[l] = w < npos ? (short)((t / KW) * 32 + (t % KW) * dw) : 0;
            rs[l] = w < npos ? (short)((w % 12) / 2) : 0;
        }
        tapc[v] = _mm512_loadu_si512((const void *)tc);
        rsel[v] = _mm512_loadu_si512((const void *)rs);
        const int left = npos - 32 * v, left_lone = npos_lone - 32 * v;
        mfull[v] = left >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << left) - 1);
        mlone[v] = left_lone >= 32 ? (__mmask32)0xFFFFFFFFu
                                   : left_lone <= 0 ? 0 : (__mmask32)((1u << left_lone) - 1);
    }

    fx_pixel_cursor cur = fx_cursor_start(g);
    for (int64_t q = 0; q * FX_PANEL_MR < Pc; q++) {
        const int64_t m0 = q * FX_PANEL_MR;
        int regular = m0 + FX_PANEL_MR <= Pc;
        int64_t base[FX_PANEL_MR];
        fx_cursor_next(&cur, FX_PANEL_MR, base);
        const int64_t base0 = base[0];
        short d[32] = {0};
        for (int r = 1; regular && r < FX_PANEL_MR; r++) {
            const int64_t dr = base[r] - base0;
            regular = dr >= 0 && dr <= dmax;
            d[r] = (short)dr;
        }
        if (!regular) {
            fx_panel_rows(g, xp, Pc, m0, base, goff, G, kp, (int16_t *)(ap + q * kp * FX_PANEL_MR));
            continue;
        }
        const __m512i dv = _mm512_loadu_si512((const void *)d);
        __m512i idx[FX_PANEL_MAX_VEC];
        for (int v = 0; v < nvec; v++)
            idx[v] = _mm512_add_epi16(tapc[v], _mm512_permutexvar_epi16(rsel[v], dv));
        const int16_t *b = xp + base0;
        int16_t *dst = (int16_t *)(ap + q * kp * FX_PANEL_MR);
        for (int64_t gi = 0; gi < G; gi += 2, dst += npos) {
            const __m512i v0 = _mm512_loadu_si512((const void *)(b + goff[gi]));
            const int lone = gi + 1 == G; /* the last group of an odd count pairs with zeros */
            const __m512i v1 = lone ? _mm512_setzero_si512()
                                    : _mm512_loadu_si512((const void *)(b + goff[gi + 1]));
            const __mmask32 *mk = lone ? mlone : mfull;
            for (int v = 0; v < nvec; v++)
                _mm512_mask_storeu_epi16(dst + 32 * v, mk[v],
                                         _mm512_permutex2var_epi16(v0, idx[v], v1));
        }
    }
    free(goff);
    return 1;
}

/* ---- fp32 GEMM panels ------------------------------------------------------------------------
 * 12-pixel panels. A panel is regular when d_11 + (KW-1)*dw <= 31: one 32-element load (two
 * of 16 floats for fp32 input) at a kernel row then holds that row's taps for all 12 pixels,
 * and tap kw is a word (float) permute with indices d_r + kw*dw, widened to fp32 in registers
 * (bf16: a 16-bit shift; fp16: vcvtph2ps, exact). Irregular panels take a scalar loop. */
#define FX_FPANEL_MR 12

/* One element of an irregular panel. fp16 by vcvtph2ps (F16C), the instruction the regular
 * panels use, so both give the same floats: the portable definition is a call per element,
 * which made fp16's stride-2 convolutions (whose 12-pixel panels mostly cross an output row)
 * 3x slower than bf16's on AVX-512. */
static inline float fx_widen1(const void *xp, int fmt, int64_t i)
{
    if (fmt == FMT_FP32) return ((const float *)xp)[i];
    const uint16_t h = ((const uint16_t *)xp)[i];
    return fmt == FMT_FP16 ? _cvtsh_ss(h) : fx_bf16_to_f32(h);
}

int fx_conv_panels_f32_avx512(const fx_conv_geom *g, const void *xp, int fmt, int64_t nb,
                              int mr, float *ap)
{
    if (mr != FX_FPANEL_MR || !fx_conv_panels_f32_fit(g, mr) || (fmt != FMT_FP32 && fmt != FMT_FP16 && fmt != FMT_BF16))
        return 0;
    const int64_t KW = g->KW, dw = g->dw, G = g->C * g->KH, K = G * KW;
    const int64_t Pc = nb * g->OH * g->OW;
    const int64_t dmax = 31 - (KW - 1) * dw;
    int64_t *goff = fx_group_offsets(g);
    if (!goff) return 0;
    const __mmask16 m12 = (__mmask16)0x0FFF;
    const int16_t *x16 = xp;
    const float *x32 = xp;

    fx_pixel_cursor cur = fx_cursor_start(g);
    for (int64_t q = 0; q * FX_FPANEL_MR < Pc; q++) {
        const int64_t m0 = q * FX_FPANEL_MR;
        int regular = m0 + FX_FPANEL_MR <= Pc;
        int64_t base[FX_FPANEL_MR];
        fx_cursor_next(&cur, FX_FPANEL_MR, base);
        float *dst = ap + q * K * FX_FPANEL_MR;
        int32_t d[16] = {0};
        for (int r = 1; regular && r < FX_FPANEL_MR; r++) {
            const int64_t dr = base[r] - base[0];
            regular = dr >= 0 && dr <= dmax;
            d[r] = (int32_t)dr;
        }
        if (!regular) {
            for (int r = 0; r < FX_FPANEL_MR; r++) {
                const int valid = m0 + r < Pc;
                int64_t k = 0;
                for (int64_t gi = 0; gi < G; gi++)
                    for (int64_t kw = 0; kw < KW; kw++, k++)
                        dst[k * FX_FPANEL_MR + r] =
                            valid ? fx_widen1(xp, fmt, base[r] + goff[gi] + kw * dw) : 0.0f;
            }
            continue;
        }
        const __m512i d32 = _mm512_loadu_si512((const void *)d);
        if (fmt == FMT_FP32) {
            for (int64_t gi = 0; gi < G; gi++) {
                const float *row = x32 + base[0] + goff[gi];
                const __m512 lo = _mm512_loadu_ps(row), hi = _mm512_loadu_ps(row + 16);
                for (int64_t kw = 0; kw < KW; kw++, dst += FX_FPANEL_MR) {
                    const __m512i idx = _mm512_add_epi32(d32, _mm512_set1_epi32((int)(kw * dw)));
                    _mm512_mask_storeu_ps(dst, m12, _mm512_permutex2var_ps(lo, idx, hi));
                }
            }
        } else {
            /* word indices: d_r + kw*dw in the low 12 words */
            const __m512i d16 = _mm512_zextsi256_si512(_mm512_cvtepi32_epi16(d32));
            for (int64_t gi = 0; gi < G; gi++) {
                const __m512i v = _mm512_loadu_si512((const void *)(x16 + base[0] + goff[gi]));
                for (int64_t kw = 0; kw < KW; kw++, dst += FX_FPANEL_MR) {
                    const __m512i idx = _mm512_add_epi16(d16, _mm512_set1_epi16((short)(kw * dw)));
                    const __m256i w = _mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, v));
                    const __m512 f = fmt == FMT_BF16
                                         ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(w), 16))
                                         : _mm512_cvtph_ps(w);
                    _mm512_mask_storeu_ps(dst, m12, f);
                }
            }
        }
    }
    free(goff);
    return 1;
}
