/* tensor_scale of a FLEX16_5 / DFP16 tensor without an int64 stage (ops.c calls this before
 * the dispatcher).
 *
 * Why: the dispatcher's integer route writes m * c (c the scalar's 31-bit mantissa) for every
 * element into an int64 stage with the scalar kernel, and the write then reads it twice, for
 * its maximum and to round; a float output gets the stage converted through double. Attention
 * scales its [B, H, T, T] scores and their gradient so, and those passes were about a tenth of
 * a FLEX16_5 transformer's training step. Here:
 *   - into a FLEX16_5/DFP16 tensor: the maximum is max|m| * |c|, from one pass over the int16
 *     mantissas, and the write's quantiser recomputes the products chunk by chunk (each chunk's
 *     int64 values in a buffer in cache, or the backend's scale_quant: in registers on AVX-512,
 *     in smaller blocks on AVX2) at whatever exponent the write asks for, straight into the
 *     output. It never fails (no allocation), so the write cannot stop half-way.
 *   - into an fp32 tensor: each value is (float)((m c) 2^e) in double arithmetic, where the
 *     integer m c has at most 47 bits and scaling by a power of two is exact, so the double
 *     holds the exact product, as the stage's conversion does, and the float rounds it once.
 * The scalar's mantissa and exponent are the dispatcher's (dispatch.c), so the integers, the
 * exponent, the statistics and the bits are the dispatcher's (tests/test_shared_scale.c). */
#include "shared_scale.h"
#include "compose.h"
#include "dispatch.h"
#include "profile_counters.h"
#include "../flex/flex_math.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define FX_SS_CHUNK 4096                  /* int64 products per chunk: 32 KiB, in L1/L2 */
#define FX_SS_PAR_MIN ((int64_t)1 << 16)  /* below this many elements, one thread */

static int fx_ss_enabled_flag = 1;
static int64_t fx_ss_taken;

void fx_shared_scale_set_enabled(int on)
{
    __atomic_store_n(&fx_ss_enabled_flag, on != 0, __ATOMIC_RELAXED);
}

int64_t fx_shared_scale_taken(void) { return __atomic_load_n(&fx_ss_taken, __ATOMIC_RELAXED); }

typedef struct fx_ss_plan {
    const fx_backend *be;
    const int16_t *m;
    int16_t *dst;
    int64_t n, c; /* c: the scalar's mantissa */
    int exp;      /* the products' exponent */
    int nt;
} fx_ss_plan;

/* fx_shared_src.quantize: the products m * c rounded at e chunk by chunk (into dst with keep),
 * the statistics merged (sums and maxima: any order gives the same). Never fails. */
static int fx_ss_quantize(void *ctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    (void)r; /* int64 values round to nearest even (fx_requant), whatever the tensor's mode */
    const fx_ss_plan *p = ctx;
    const int shift = e - p->exp;
    const int64_t chunks = (p->n + FX_SS_CHUNK - 1) / FX_SS_CHUNK;
    fx_qstats_init(q);
    const int nt = p->nt;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        int64_t v[FX_SS_CHUNK];
        fx_qstats mine;
        fx_qstats_init(&mine);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t k = 0; k < chunks; k++) {
            const int64_t lo = k * FX_SS_CHUNK;
            const int64_t len = p->n - lo < FX_SS_CHUNK ? p->n - lo : FX_SS_CHUNK;
            fx_qstats part;
            if (p->be->cvt.scale_quant) { /* |c| <= 2^30 (fx_shared_scale_split): an int32 */
                p->be->cvt.scale_quant(p->m + lo, (int32_t)p->c, len, keep ? p->dst + lo : NULL,
                                       shift, &part);
            } else {
                for (int64_t i = 0; i < len; i++) v[i] = (int64_t)p->m[lo + i] * p->c;
                p->be->cvt.quant_i64(v, keep ? p->dst + lo : NULL, len, shift, &part);
            }
            fx_qstats_merge(&mine, &part);
        }
#ifdef _OPENMP
#pragma omp critical(fx_shared_scale_merge)
#endif
        fx_qstats_merge(q, &mine);
    }
    return FX_OK;
}

/* Into an fp32 tensor: (float)((m c) 2^exp), the integer product first so that a zero is +0
 * as the stage's is (m * (c 2^exp) in double would give -0 for m = 0 and c < 0). */
static void fx_ss_to_f32(const fx_ss_plan *p, float *dst)
{
    const double scale = ldexp(1.0, p->exp);
    const int nt = p->nt;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t i = 0; i < p->n; i++) dst[i] = fx_shared_scale_f32(p->m[i], p->c, scale);
}

int fx_shared_scale(tensor_t *out, const tensor_t *a, double s)
{
    if (!__atomic_load_n(&fx_ss_enabled_flag, __ATOMIC_RELAXED)) return FX_SHARED_SCALE_NOT_TAKEN;
    /* a contiguous host FLEX16_5/DFP16 input; a whole contiguous host output in another
     * storage (an Autoflex recompute reads the input again after a write), FLEX16_5, DFP16 or
     * fp32, with no distributed storage (whose writes go through their own paths) */
    if (!fmt_is_shared_exponent(a->fmt) || a->st->on_device || !fx_tensor_is_contiguous(a))
        return FX_SHARED_SCALE_NOT_TAKEN;
    if (out->st->on_device || out->st->dist || out->st == a->st ||
        !fx_tensor_covers_storage(out) || !fx_tensor_is_contiguous(out) ||
        !(fmt_is_shared_exponent(out->fmt) || out->fmt == FMT_FP32))
        return FX_SHARED_SCALE_NOT_TAKEN;
    const fx_backend *be = fx_backend_active();
    if (!be->cvt.quant_i64) return FX_SHARED_SCALE_NOT_TAKEN;
    fx_ss_plan p;
    memset(&p, 0, sizeof p);
    p.be = be;
    p.m = fx_tensor_base(a);
    p.n = fx_numel_of(a->ndim, a->shape);
    p.nt = p.n >= FX_SS_PAR_MIN ? flexpoint_num_threads() : 1;
    int scalar_exp = 0;
    fx_shared_scale_split(s, &p.c, &scalar_exp); /* the dispatcher's split */
    p.exp = a->st->exp + scalar_exp;
    __atomic_fetch_add(&fx_ss_taken, 1, __ATOMIC_RELAXED);
    flexpoint_clear_error(); /* as the dispatcher does before its kernel */
    if (out->fmt == FMT_FP32) {
        fx_prof_span sp;
        fx_prof_begin(&sp);
        if (p.n > 0) fx_ss_to_f32(&p, fx_tensor_base(out));
        fx_prof_end(&sp, FX_PROF_CONVERSION);
        return FX_OK;
    }
    p.dst = fx_tensor_base(out);
    const uint64_t c_abs = (uint64_t)(p.c < 0 ? -p.c : p.c);
    const uint64_t imax = p.n > 0 ? fx_maxabs_i16(p.m, p.n) * c_abs : 0;
    fx_shared_src src;
    memset(&src, 0, sizeof src);
    src.kind = FX_STAGE_I64; /* exact integers at exponent exp, as the dispatcher's stage */
    src.exp = p.exp;
    src.imax = imax;
    src.true_max = ldexp((double)imax, p.exp);
    src.ctx = &p;
    src.quantize = fx_ss_quantize;
    return fx_write_shared_with(out, &src, "tensor_scale");
}
