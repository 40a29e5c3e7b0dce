/* Chunked parallel drivers for the single-threaded conversion routines. The chunking is fixed
 * (independent of the thread count) and statistics are merged in chunk order, so results and
 * statistics are identical for every thread count. */
#include "dispatch.h"
#include "profile_counters.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define FX_CHUNK ((int64_t)1 << 16)

static int fx_threads_for(int64_t n)
{
    if (n < 2 * FX_CHUNK) return 1;
    return flexpoint_num_threads();
}

/* Chunks for nt threads over n elements: about FX_CHUNK each, their number a multiple of nt
 * and their lengths equal (multiples of 64 but for the last), so that a static schedule gives
 * every thread the same work. Chunks of FX_CHUNK exactly left one thread a chunk more than the
 * other: a 128 x 3136 product's rounding (7 chunks) ran 2 : 1 on two threads. The statistics
 * are maxima and counts, merged exactly in any split, and stochastic rounding is keyed by the
 * element's index, so the chunking changes no result. */
static void fx_par_chunks(int64_t n, int nt, int64_t *nchunks, int64_t *len)
{
    int64_t c = (n + FX_CHUNK - 1) / FX_CHUNK;
    c = c < 1 ? 1 : (c + nt - 1) / nt * nt;
    int64_t l = (n + c - 1) / c;
    l = l < 1 ? 64 : (l + 63) / 64 * 64;
    *len = l;
    *nchunks = (n + l - 1) / l; /* 0 for n = 0, as before */
}

/* fx_par_quant_i16(_gated) on one range. */
static void fx_quant_i16_chunk(const fx_backend *be, const int16_t *src, const int16_t *gate,
                               int16_t *dst, int64_t n, int shift, fx_qstats *st)
{
    /* src[i] + 0 as an aligned sum (fx_sum2): by its contract, quant_i64 of the widened values
     * (AVX-512: in int16 lanes; other levels widen to int64 in L1 blocks, or copy at shift 0) */
    static const int16_t zero = 0;
    const fx_sum2 p = {src, &zero, 0, 0, 0, 0, gate};
    be->cvt.sum2_quant(&p, n, dst, shift, st);
}

/* One quantisation, whatever its source: the three drivers below share the chunking. */
enum { FX_QSRC_F32, FX_QSRC_I64, FX_QSRC_I16 };
typedef struct fx_quant_job {
    const fx_backend *be;
    int kind;                /* FX_QSRC_* */
    const void *src;
    int16_t *dst;            /* NULL: statistics only */
    int e;                   /* f32: the exponent; integer sources: the shift */
    const fx_rounding *r;    /* f32 only */
    const int16_t *gate;     /* int16 sources: NULL, or src kept where gate > 0 */
} fx_quant_job;

static void fx_quant_range(const fx_quant_job *j, int64_t lo, int64_t len, fx_qstats *st)
{
    int16_t *d = j->dst ? j->dst + lo : NULL;
    if (j->kind == FX_QSRC_F32)
        j->be->cvt.quant_f32((const float *)j->src + lo, d, len, j->e, j->r, lo, st);
    else if (j->kind == FX_QSRC_I64)
        j->be->cvt.quant_i64((const int64_t *)j->src + lo, d, len, j->e, st);
    else
        fx_quant_i16_chunk(j->be, (const int16_t *)j->src + lo, j->gate ? j->gate + lo : NULL, d,
                           len, j->e, st);
}

static void fx_par_quant(const fx_quant_job *j, int64_t n, fx_qstats *st)
{
    int nt = fx_threads_for(n);
    int64_t nchunks, clen;
    fx_par_chunks(n, nt, &nchunks, &clen);
    fx_qstats *part = nt > 1 ? malloc((size_t)nchunks * sizeof *part) : NULL;
    if (!part) {
        fx_quant_range(j, 0, n, st);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t lo = c * clen, len = n - lo < clen ? n - lo : clen;
        fx_quant_range(j, lo, len, &part[c]);
    }
    fx_qstats_init(st);
    for (int64_t c = 0; c < nchunks; c++) fx_qstats_merge(st, &part[c]);
    free(part);
}

void fx_par_quant_f32(const fx_backend *be, const float *src, int16_t *dst, int64_t n, int e,
                      const fx_rounding *r, fx_qstats *st)
{
    const fx_quant_job j = {be, FX_QSRC_F32, src, dst, e, r, NULL};
    fx_par_quant(&j, n, st);
}

void fx_par_quant_i64(const fx_backend *be, const int64_t *src, int16_t *dst, int64_t n,
                      int shift, fx_qstats *st)
{
    const fx_quant_job j = {be, FX_QSRC_I64, src, dst, shift, NULL, NULL};
    fx_par_quant(&j, n, st);
}

void fx_par_quant_i16(const fx_backend *be, const int16_t *src, int16_t *dst, int64_t n,
                      int shift, fx_qstats *st)
{
    fx_par_quant_i16_gated(be, src, NULL, dst, n, shift, st);
}

void fx_par_quant_i16_gated(const fx_backend *be, const int16_t *src, const int16_t *gate,
                            int16_t *dst, int64_t n, int shift, fx_qstats *st)
{
    const fx_quant_job j = {be, FX_QSRC_I16, src, dst, shift, NULL, gate};
    fx_par_quant(&j, n, st);
}

void fx_par_maxabs_f32(const fx_backend *be, const float *src, int64_t n, float *maxabs,
                       int64_t *nonfinite)
{
    int nt = fx_threads_for(n);
    int64_t nchunks, clen;
    fx_par_chunks(n, nt, &nchunks, &clen);
    float *pm = nt > 1 ? malloc((size_t)nchunks * sizeof *pm) : NULL;
    int64_t *pn = nt > 1 ? malloc((size_t)nchunks * sizeof *pn) : NULL;
    if (!pm || !pn) {
        free(pm);
        free(pn);
        be->cvt.maxabs_f32(src, n, maxabs, nonfinite);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t lo = c * clen, len = n - lo < clen ? n - lo : clen;
        be->cvt.maxabs_f32(src + lo, len, &pm[c], &pn[c]);
    }
    *maxabs = 0.0f;
    *nonfinite = 0;
    for (int64_t c = 0; c < nchunks; c++) {
        if (pm[c] > *maxabs) *maxabs = pm[c];
        *nonfinite += pn[c];
    }
    free(pm);
    free(pn);
}

const float *fx_f32_block(const fx_backend *be, fmt_t fmt, int exp, const void *base,
                          int64_t off, int64_t n, float *buf)
{
    switch (fmt) {
    case FMT_FP32: return (const float *)base + off;
    case FMT_FP16: be->cvt.fp16_to_f32((const uint16_t *)base + off, buf, n); break;
    case FMT_BF16: be->cvt.bf16_to_f32((const uint16_t *)base + off, buf, n); break;
    default: be->cvt.dequant((const int16_t *)base + off, buf, n, exp); break;
    }
    return buf;
}

/* Widening conversions for float compute. Chunked in parallel for large arrays. Profiled, a
 * conversion (profile_counters.h). */
void fx_widen_to_f32(const fx_backend *be, fmt_t src_fmt, int exp, const void *src, float *dst,
                     int64_t n)
{
    fx_prof_span sp;
    fx_prof_begin(&sp);
    int nt = fx_threads_for(n);
    int64_t nchunks, clen;
    fx_par_chunks(n, nt, &nchunks, &clen);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t lo = c * clen, len = n - lo < clen ? n - lo : clen;
        const float *v = fx_f32_block(be, src_fmt, exp, src, lo, len, dst + lo);
        if (v != dst + lo) memcpy(dst + lo, v, (size_t)len * sizeof *dst); /* fp32 */
    }
    fx_prof_end(&sp, FX_PROF_CONVERSION);
}

/* Profiled, a conversion (an operand into integer compute), exponent included. */
void fx_quantize_exact(const fx_backend *be, const float *src, int16_t *dst, int64_t n, int *exp)
{
    fx_prof_span sp;
    fx_prof_begin(&sp);
    float mx;
    int64_t nonfinite;
    fx_par_maxabs_f32(be, src, n, &mx, &nonfinite);
    int e = fx_exact_exp_f64((double)mx);
    if (e == FX_EXP_NONE) e = 0;
    e = fx_clamp_exp(e, FX_DFP_EXP_MIN, FX_DFP_EXP_MAX, NULL);
    fx_rounding r = {FX_ROUND_NEAREST_EVEN, 0, 0};
    fx_qstats st;
    fx_par_quant_f32(be, src, dst, n, e, &r, &st);
    *exp = e;
    fx_prof_end(&sp, FX_PROF_CONVERSION);
}

/* Documented in dispatch.h. Slices of equal length, multiples of 64 bytes, one per thread. */
void fx_par_memcpy(void *dst, const void *src, size_t bytes)
{
    const int nt = bytes >= ((size_t)1 << 18) ? flexpoint_num_threads() : 1;
    if (nt <= 1) {
        memcpy(dst, src, bytes);
        return;
    }
    const size_t slice = ((bytes + (size_t)nt - 1) / (size_t)nt + 63) / 64 * 64;
    char *d = dst;
    const char *s = src;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (int i = 0; i < nt; i++) {
        const size_t lo = (size_t)i * slice, hi = lo + slice < bytes ? lo + slice : bytes;
        if (lo < hi) memcpy(d + lo, s + lo, hi - lo);
    }
}
