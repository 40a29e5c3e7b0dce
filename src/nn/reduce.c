/* Mean along an axis (or of everything): tensor_sum's shapes and sum kernels, then a division
 * by the count.
 *
 *   - a FLEX16_5/DFP16 (integer compute, no dequantisation): the backend's exact int64 sum S
 *     at a's exponent e, then the exact quotient S * 2^e / count rounded ONCE into out.
 *     There is no reciprocal: the quotient is formed by integer long division with a sticky
 *     bit (round to odd) on a grid at least 2 bits finer than the final one, so the final
 *     round-to-nearest-even equals the correct rounding of the exact mean:
 *       shared-exponent out: int64 quotients on one common grid, written by fx_write_i64;
 *       float out: per element, a 53-bit round-to-odd double, then fp32 (round-to-odd again
 *       for fp16/bf16), so small means keep their relative precision.
 *     Bit-identical on every backend and thread count (integers only up to the final step).
 *   - a fp32/fp16/bf16: the backend's sum kernel (fp32 accumulation, as tensor_sum), then
 *     sum / count in double, rounded once into out's format (through fp32 with round-to-odd
 *     when out is not fp32).
 * A mean over zero elements is undefined: FX_ESHAPE when out would have any element.
 */
#include "nn_stage.h"
#include "nn_ops.h"
#include "../gpu/gpu_nn_math.h" /* fx_quotient_f64_odd, shared with the device */

#include "../core/ops_internal.h"

#include <math.h>
#include <string.h>

static uint64_t nn_magnitude(int64_t v) { return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v; }

/* s * 2^e / d as a double rounded to odd at 53 bits, so that any later rounding to 51 bits or
 * fewer (fp32 nearest; fp32 round-to-odd and then 16 bits) is the correct rounding of
 * s * 2^e / d: fx_quotient_f64_odd (src/gpu/gpu_nn_math.h, shared with the device). */
static double nn_quotient_f64_odd(int64_t s, uint64_t d, int e)
{
    return fx_quotient_f64_odd(s, d, e);
}

int tensor_mean(tensor_t *out, const tensor_t *a, int axis)
{
    if (!out || !a) return FX_FAIL(FX_EINVAL, "%s is NULL", !out ? "out" : "a");
    int64_t outer = 0, len = 0, inner = 0;
    int rc = fx_reduce_geometry(out, a, axis, &outer, &len, &inner, __func__);
    if (rc) return rc;
    const int64_t nout = outer * inner;
    if (len == 0 && nout > 0) {
        char b1[160];
        return FX_FAIL(FX_ESHAPE, "the mean over zero elements is undefined (a.shape=%s, "
                       "axis=%d)", fx_shape_str(a, b1, sizeof b1), axis);
    }
    fx_op_args r = {.op = FX_OP_MEAN, .func = __func__, .nt = 2, .t = {out, a}, .tn = {"out", "a"}};
    r.u.mean.out = out;
    r.u.mean.a = a;
    r.u.mean.outer = outer;
    r.u.mean.len = len;
    r.u.mean.inner = inner;
    return fx_op_run(&r);
}

int fx_nn_mean_host(const fx_op_args *r)
{
    tensor_t *out = r->u.mean.out;
    const tensor_t *a = r->u.mean.a;
    const int64_t outer = r->u.mean.outer, len = r->u.mean.len, inner = r->u.mean.inner;
    const int64_t nout = outer * inner;
    const char *func = r->func;
    int rc = FX_OK;

    const fx_backend *be = fx_backend_active();
    const int int_compute = fx_is_int_compute(a);
    fmt_t cf = FMT_FP32;
    if (int_compute) cf = a->fmt;
    else if (be->kernels[FX_OP_SUM][a->fmt]) cf = a->fmt; /* e.g. fp16 read directly */
    fx_kernel k = be->kernels[FX_OP_SUM][cf];
    if (!k) return fx_error(FX_EUNSUPPORTED, func, "backend %s has no sum kernel", be->name);

    fx_scratch sc = {.n = 0};
    fx_op_call c;
    memset(&c, 0, sizeof c);
    c.op = FX_OP_SUM;
    c.nin = 1;
    if ((rc = fx_operand_make(a, int_compute, cf, 0, 0, NULL, &c.in[0], &sc, func)))
        goto done;
    c.out_ndim = out->ndim;
    memcpy(c.out_shape, out->shape, sizeof c.out_shape);
    c.out_numel = nout;
    c.red_outer = outer;
    c.red_len = len;
    c.red_inner = inner;
    c.nthreads = flexpoint_num_threads();
    int sum_exp = 0;
    if (int_compute) {
        c.out_i64 = fx_scratch_alloc(&sc, nout, sizeof(int64_t));
        c.out_exp = &sum_exp;
    } else {
        c.out_f32 = fx_scratch_alloc(&sc, nout, sizeof(float));
    }
    if (!c.out_i64 && !c.out_f32) {
        rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld sums", (long long)nout);
        goto done;
    }
    if ((rc = k(&c))) goto done;

    if (int_compute && fmt_is_shared_exponent(out->fmt)) {
        /* |S| <= 32767 * len, so |S| / len < 2^15 units of 2^sum_exp: with the integer part
         * of the largest quotient taking b bits, F = 62 - b fraction bits keep every quotient
         * below 2^62, on one grid 2^(sum_exp - F). The largest quotient is >= 2^62 / len
         * (>= 2^17 for any len < 2^45), so out's exponent, which keeps 15 bits of it, is 2 or
         * more bits coarser than that grid. */
        uint64_t maxq = 0;
        for (int64_t i = 0; i < nout; i++) {
            uint64_t m = nn_magnitude(c.out_i64[i]) / (uint64_t)len;
            if (m > maxq) maxq = m;
        }
        const int frac = 62 - fx_bitlen_u64(maxq);
        for (int64_t i = 0; i < nout; i++) {
            const int64_t v = c.out_i64[i];
            const int64_t q = (int64_t)fx_udiv_round_odd(nn_magnitude(v), (uint64_t)len, frac);
            c.out_i64[i] = v < 0 ? -q : q;
        }
        rc = fx_write_i64(out, c.out_i64, sum_exp - frac, func);
    } else if (int_compute) {
        /* a float output keeps each element's own precision: one rounded quotient each */
        float *st = fx_scratch_alloc(&sc, nout, sizeof *st);
        if (!st) {
            rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)nout);
            goto done;
        }
        for (int64_t i = 0; i < nout; i++)
            st[i] = nn_stage_f32(nn_quotient_f64_odd(c.out_i64[i], (uint64_t)len, sum_exp),
                                 out->fmt);
        rc = fx_write_f32(out, st, func);
    } else {
        for (int64_t i = 0; i < nout; i++)
            c.out_f32[i] = nn_stage_f32((double)c.out_f32[i] / (double)len, out->fmt);
        rc = fx_write_f32(out, c.out_f32, func);
    }
done:
    fx_scratch_free(&sc);
    return rc;
}
