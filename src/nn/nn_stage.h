/* Input views and output stages shared by the element-wise and per-channel training ops
 * (activation.c, batchnorm.c, dropout.c, softmax_ce.c, reduce.c).
 *
 * These ops touch every element once or twice, so copies and fresh allocations dominate their
 * time: inputs are read in place whenever their storage already has the compute format, and an
 * fp32 output that shares no storage with the inputs is computed directly in its own storage
 * (the write then has nothing to copy). All other cases go through scratch buffers, and every
 * output still goes through the one write path.
 */
#ifndef FX_NN_STAGE_H
#define FX_NN_STAGE_H

#include "../core/compose.h"

#include <math.h>
#include <string.h>

/* Element-wise loops are memory-bound: threads pay off only for large arrays. */
#define NN_PAR_MIN_ELEMS ((int64_t)1 << 15)

static inline int nn_threads_for(int64_t work)
{
    return work >= NN_PAR_MIN_ELEMS ? flexpoint_num_threads() : 1;
}

/* Read-only fp32 values of all of t (row-major): t's storage itself when it is contiguous
 * fp32, else an exact widened (dequantised) copy in s. */
static inline int nn_in_f32(const tensor_t *t, const float **vals, fx_scratch *s,
                            const char *func)
{
    fx_operand o;
    int rc = fx_operand_make(t, 0, FMT_FP32, 0, 0, NULL, &o, s, func);
    if (rc) return rc;
    *vals = (const float *)o.data;
    return FX_OK;
}

/* Read-only int16 mantissas of all of a FLEX16_5/DFP16 tensor t and their exponent: t's storage
 * itself when it is contiguous, else a copy in s. */
static inline int nn_in_i16(const tensor_t *t, const int16_t **mant, int *exp, fx_scratch *s,
                            const char *func)
{
    fx_operand o;
    int rc = fx_operand_make(t, 1, t->fmt, 0, 0, NULL, &o, s, func);
    if (rc) return rc;
    *mant = (const int16_t *)o.data;
    *exp = o.exp;
    return FX_OK;
}

/* A writable pointer to values read by nn_in_f32 when they are a private scratch copy (the
 * input was converted or gathered), NULL when they are the tensor's own storage. */
static inline float *nn_private_f32(const tensor_t *t, const float *vals)
{
    return vals == (const float *)fx_tensor_base(t) ? NULL : (float *)vals;
}

/* The fp32 stage of a write into out: out's own storage when it is a contiguous fp32 tensor
 * that shares no storage with any of the n inputs (the write then copies nothing); else `own`
 * (a private copy of an input that the op may overwrite element by element, or NULL); else a
 * new scratch buffer. NULL on allocation failure. */
static inline float *nn_out_f32(tensor_t *out, const tensor_t *const *in, int n, float *own,
                                fx_scratch *s)
{
    bool direct = out->fmt == FMT_FP32 && fx_tensor_is_contiguous(out);
    for (int i = 0; i < n && direct; i++)
        if (in[i] && in[i]->st == out->st) direct = false;
    if (direct) return (float *)fx_tensor_base(out);
    if (own) return own;
    return fx_scratch_alloc(s, fx_numel_of(out->ndim, out->shape), sizeof(float));
}

/* Round-to-odd double -> fp32 (the core's inline definition, src/core/dispatch.h). */
static inline float nn_f64_to_f32_odd(double d) { return fx_f64_to_f32_round_odd(d); }

/* Rounding of a double into the fp32 stage of a write into format f: to nearest for an fp32
 * output; otherwise round-to-odd, so that the write's rounding to 16 bits (or to an int16
 * mantissa) is the only effective rounding of the double. */
static inline float nn_stage_f32(double v, fmt_t f)
{
    return f == FMT_FP32 ? (float)v : nn_f64_to_f32_odd(v);
}

/* The same rounding chosen by a flag: odd for a write into any format but fp32
 * (odd = f != FMT_FP32). */
static inline float nn_round_f32(double v, int odd)
{
    return odd ? nn_f64_to_f32_odd(v) : (float)v;
}

/* FX_ESHAPE naming both shapes unless a and b have the same shape. */
static inline int nn_same_shape(const char *func, const char *na, const tensor_t *a,
                                const char *nb, const tensor_t *b)
{
    bool same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    if (same) return FX_OK;
    char b1[160], b2[160];
    return fx_error(FX_ESHAPE, func, "%s.shape=%s != %s.shape=%s", na,
                    fx_shape_str(a, b1, sizeof b1), nb, fx_shape_str(b, b2, sizeof b2));
}

#endif
