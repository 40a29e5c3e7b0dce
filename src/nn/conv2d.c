/* 2-D convolution (NCHW), forward and both gradients, as im2col + the format's GEMM.
 *
 * Compute rule (as every op, include/flexpoint.h): the first input decides.
 *   - FLEX16_5/DFP16 first input: integer compute. im2col copies int16 mantissas (padding is
 *     0, the exponent is unchanged), the backend's exact int16 GEMM produces int64 sums at
 *     exponent e_a + e_b, col2im and the sums over batch chunks add int64 values, and the only
 *     rounding is the one write of the output (fx_write_i64). The result is the exact sum
 *     rounded once, hence bit-identical on every backend and thread count. A float second
 *     input is quantised at its exact exponent first (as a DFP16 write would).
 *   - otherwise fp32 compute: inputs widened to fp32 (exact for fp16/bf16, dequantised for
 *     shared-exponent inputs), fp32 GEMM, fp32 col2im and chunk sums, one rounding on write.
 *
 * Scheme. The batch is cut into chunks of nb samples (patch matrix of CKK = C*KH*KW rows and
 * Pc = nb*OH*OW pixel columns, about FX_CONV_CHUNK_ELEMS elements, so that a chunk's working
 * set stays in the core's L2). Per chunk:
 *   forward:      Y^T[Pc, O]   = colT[Pc, CKK] x W^T[CKK, O]   then per-sample transposes to NCHW
 *   grad input:   col[CKK, Pc] = W^T[CKK, O] x dY[O, Pc]       then col2im adds into dx
 *   grad weight:  dW^T[CKK, O] += col[CKK, Pc] x dY^T[Pc, O]   then one transpose to [O, CKK]
 * The large operand (the patch matrix, CKK x Pc) is always the GEMM's row-major A operand or
 * its output: A panels pack cheaply (the integer GEMM splits every B value into two parts
 * while packing, and packing a transposed A reads across rows). colT is written directly by
 * a pixel-major im2col; dY[O, Pc] is gathered from NCHW in runs of OH*OW; the small operands'
 * transposes are strides. Threads take whole chunks, each running im2col, a single-threaded
 * GEMM and col2im on data that stays in its cache; with a single chunk the GEMM and the
 * transforms use the threads instead. Chunk boundaries depend only on the shapes, never on
 * the thread count, and the float weight gradient sums chunks within FX_CONV_WGRAD_GROUPS
 * fixed groups, then the groups in order, so the fp32 results do not depend on the thread count
 * (integer sums are exact in any order: each chunk goes to whichever thread is free).
 *
 * Error bounds of the fp32 path (u = 2^-24, gamma_n = n u / (1 - n u)), elementwise, before the
 * output rounding: forward gamma_{C KH KW} sum|terms| (one GEMM chain); grad input
 * gamma_{O + KH KW} sum|terms| (a GEMM chain of O terms, then at most KH KW col entries added);
 * grad weight gamma_{N OH OW} sum|terms| (GEMM chains, then chunk and group sums). The integer
 * path has no error before the one rounding of the write.
 *
 * Entry points. Each public function validates its arguments (shapes, geometry, the integer
 * path's term limit) and hands an fx_op_args to the dispatcher (src/core/op_run.c), which picks
 * the backend by the tensors' placement: the host implementations below (fx_nn_conv2d_host
 * and its siblings, installed for every CPU level) or a device backend's (src/gpu/gpu_conv.c:
 * the same scheme with device kernels, the same semantics; integer results bit-identical).
 */
#include "conv_fold.h"
#include "conv_dgrad_phases.h"
#include "im2col.h"
#include "conv_panels.h"
#include "../bf16/bf16_gemm.h"
#include "../flex/flex_kernels.h" /* fx_gemm_i16_amx_pack_b */
#include "../flex/conv_i16.h"
#include "../flex/gemm_i16.h"
#include "../fp32/conv_f32_direct.h"
#include "../core/compose.h"
#include "../core/profile_counters.h"
#include "../core/shared_binary.h" /* fx_add_relu_* */
#include "nn_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#define FX_CONV_THREAD_ID() omp_get_thread_num()
#define FX_CONV_PARALLEL_FOR                                                                   \
    _Pragma("omp parallel for schedule(dynamic, 1) num_threads(plan.outer) if (plan.outer > 1)")
#else
#define FX_CONV_THREAD_ID() 0
#define FX_CONV_PARALLEL_FOR
#endif

/* Target size of one chunk's patch matrix, in elements (1 MiB of int16, 2 MiB of fp32). */
#define FX_CONV_CHUNK_ELEMS ((int64_t)1 << 19)
/* The integer forward's int64 output stage, counted at this many int16 patch elements per
 * value in the chunk size (conv_plan_make): 8 keeps a chunk's sums within half of a 1 MiB L2,
 * so they are still there when the chunk is rounded. It matters for layers with few input
 * channels (the CNN's conv1: 8 samples per chunk before, 2 now); conv1 forward measured
 * 15-17 ms against 15-18 ms with factor 0, within this VM's noise. The float stages keep the
 * patch-based chunks. */
#define FX_CONV_OUT_FACTOR 8
#define FX_CONV_FWD_OUT_UNITS(ic) ((ic) ? FX_CONV_OUT_FACTOR : 0)
/* At least this many chunks (when the batch allows), so that up to this many threads have
 * work. A constant rather than the thread count: chunking must not depend on threads. */
#define FX_CONV_MIN_CHUNKS 16
/* The weight gradient's partial sums: chunks are summed within this many fixed groups. */
#define FX_CONV_WGRAD_GROUPS 16

/* Integer path: each product of two int16 mantissas is below 2^30 in magnitude, so up to 2^32
 * of them sum exactly in int64 (below 2^62). */
#define FX_CONV_MAX_INT_TERMS ((int64_t)1 << 32)

/* ---- validation ---------------------------------------------------------------------------- */

typedef struct conv_names {
    const char *x, *w, *y; /* the names the caller uses for the three tensors */
} conv_names;

static int conv_params_check(const char *func, int sh, int sw, int ph, int pw, int dh, int dw)
{
    if (sh < 1 || sw < 1)
        return fx_error(FX_EINVAL, func, "stride (%d, %d) must be >= 1", sh, sw);
    if (dh < 1 || dw < 1)
        return fx_error(FX_EINVAL, func, "dilation (%d, %d) must be >= 1", dh, dw);
    if (ph < 0 || pw < 0)
        return fx_error(FX_EINVAL, func, "padding (%d, %d) must be >= 0", ph, pw);
    return FX_OK;
}

/* Output size of one spatial dimension, or 0 if the dilated kernel does not fit. */
static int64_t conv_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d)
{
    const int64_t padded = in + 2 * p;
    if (padded < 1 || k - 1 > (padded - 1) / d) return 0;
    return (padded - d * (k - 1) - 1) / s + 1;
}

/* x: [N,C,H,W], w: [O,C,KH,KW], y: [N,O,OH,OW] (whichever of them are inputs or outputs). */
static int conv_geometry(const char *func, const conv_names *nm, const tensor_t *x,
                         const tensor_t *w, const tensor_t *y, int sh, int sw, int ph, int pw,
                         int dh, int dw, fx_conv_geom *g)
{
    if (!x || !w || !y)
        return fx_error(FX_EINVAL, func, "%s is NULL", !x ? nm->x : (!w ? nm->w : nm->y));
    int rc = conv_params_check(func, sh, sw, ph, pw, dh, dw);
    if (rc) return rc;
    char b1[160], b2[160], b3[160];
    const tensor_t *t[3] = {x, w, y};
    const char *n[3] = {nm->x, nm->w, nm->y};
    for (int i = 0; i < 3; i++)
        if (t[i]->ndim != 4)
            return fx_error(FX_ESHAPE, func, "%s must be 4-D (%s), got shape %s", n[i],
                            i == 1 ? "O, C, KH, KW" : "N, C, H, W",
                            fx_shape_str(t[i], b1, sizeof b1));
    *g = (fx_conv_geom){.N = x->shape[0], .C = x->shape[1], .H = x->shape[2], .W = x->shape[3],
                        .O = w->shape[0], .KH = w->shape[2], .KW = w->shape[3],
                        .sh = sh, .sw = sw, .ph = ph, .pw = pw, .dh = dh, .dw = dw};
    if (w->shape[1] != g->C)
        return fx_error(FX_ESHAPE, func, "channel mismatch: %s.shape=%s has %lld channels but "
                        "%s.shape=%s expects %lld", nm->x, fx_shape_str(x, b1, sizeof b1),
                        (long long)g->C, nm->w, fx_shape_str(w, b2, sizeof b2),
                        (long long)w->shape[1]);
    if (g->N == 0)
        return fx_error(FX_ESHAPE, func, "empty batch: %s.shape=%s", nm->x,
                        fx_shape_str(x, b1, sizeof b1));
    if (g->C == 0 || g->O == 0 || g->KH == 0 || g->KW == 0)
        return fx_error(FX_ESHAPE, func, "%s.shape=%s has a zero channel or kernel size", nm->w,
                        fx_shape_str(w, b1, sizeof b1));
    g->OH = conv_out_size(g->H, g->KH, sh, ph, dh);
    g->OW = conv_out_size(g->W, g->KW, sw, pw, dw);
    if (g->OH < 1 || g->OW < 1)
        return fx_error(FX_ESHAPE, func, "the kernel %lldx%lld with dilation (%d, %d) does not "
                        "fit the input %lldx%lld with padding (%d, %d)", (long long)g->KH,
                        (long long)g->KW, dh, dw, (long long)g->H, (long long)g->W, ph, pw);
    if (y->shape[0] != g->N || y->shape[1] != g->O || y->shape[2] != g->OH ||
        y->shape[3] != g->OW)
        return fx_error(FX_ESHAPE, func, "%s.shape=%s, but %s.shape=%s and %s.shape=%s with "
                        "stride (%d, %d), padding (%d, %d), dilation (%d, %d) give "
                        "[%lld, %lld, %lld, %lld]", nm->y, fx_shape_str(y, b1, sizeof b1), nm->x,
                        fx_shape_str(x, b2, sizeof b2), nm->w, fx_shape_str(w, b3, sizeof b3),
                        sh, sw, ph, pw, dh, dw, (long long)g->N, (long long)g->O,
                        (long long)g->OH, (long long)g->OW);
    /* one sample's patch matrix and padded input must be addressable (sizes below 2^58, so
     * that chunk sizes and byte counts cannot overflow); real layers are far below */
    const int64_t lim = (int64_t)1 << 58, CKK = g->C * g->KH * g->KW; /* <= numel(w) */
    const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;
    if (CKK > lim / (g->OH * g->OW) || Hp > lim / Wp || g->C > lim / (Hp * Wp))
        return fx_error(FX_ENOMEM, func, "the patch matrix (%lld x %lld) or the padded input "
                        "(%lld x %lld x %lld) of one sample is too large", (long long)CKK,
                        (long long)(g->OH * g->OW), (long long)g->C, (long long)Hp,
                        (long long)Wp);
    return FX_OK;
}

/* The request of a convolution op on (x, w, y) as named by nm (the placement sees the three
 * tensors under their public names): it writes out from the inputs (in0, in1) over g. */
static fx_op_args conv_args(int op, const char *func, const conv_names *nm, const tensor_t *x,
                            const tensor_t *w, const tensor_t *y, const fx_conv_geom *g,
                            tensor_t *out, const tensor_t *in0, const tensor_t *in1)
{
    fx_op_args a = {.op = op, .func = func, .nt = 3, .t = {x, w, y}, .tn = {nm->x, nm->w, nm->y}};
    a.u.conv.g = g;
    a.u.conv.out = out;
    a.u.conv.a = in0;
    a.u.conv.b = in1;
    return a;
}

static int conv_int_limit(const char *func, int int_compute, int64_t terms, const char *what)
{
    if (int_compute && terms > FX_CONV_MAX_INT_TERMS)
        return fx_error(FX_EUNSUPPORTED, func, "%s sums %lld products, more than the exact "
                        "int64 accumulation allows (2^32)", what, (long long)terms);
    return FX_OK;
}

/* ---- shared machinery ---------------------------------------------------------------------- */

typedef struct conv_plan {
    int64_t nb, nchunks; /* samples per chunk (the last chunk may hold fewer), chunk count */
    int outer, inner;    /* threads over chunks (or groups); threads inside one chunk */
} conv_plan;

/* Chunking for g where a chunk holds per_sample elements per sample (at least 1): chunks of
 * about FX_CONV_CHUNK_ELEMS elements, at most max_nb samples, at least FX_CONV_MIN_CHUNKS of
 * them where the batch allows; wgrad != 0: threads split the weight gradient's groups, not
 * chunks. */
static conv_plan conv_plan_sized(const fx_conv_geom *g, int wgrad, int64_t per_sample,
                                 int64_t max_nb)
{
    conv_plan p;
    int64_t fit = FX_CONV_CHUNK_ELEMS / per_sample; /* samples per target */
    if (fit > max_nb) fit = max_nb;
    if (fit < 1) fit = 1;
    int64_t want = (g->N + fit - 1) / fit;
    const int64_t min_chunks = g->N < FX_CONV_MIN_CHUNKS ? g->N : FX_CONV_MIN_CHUNKS;
    if (want < min_chunks) want = min_chunks;
    if (want > g->N) want = g->N;
    p.nb = (g->N + want - 1) / want;
    p.nchunks = (g->N + p.nb - 1) / p.nb;
    const int64_t units = wgrad && p.nchunks > FX_CONV_WGRAD_GROUPS ? FX_CONV_WGRAD_GROUPS
                                                                     : p.nchunks;
    const int nt = flexpoint_num_threads();
    p.outer = units < nt ? (int)units : nt;
    if (p.outer < 1) p.outer = 1;
    p.inner = p.outer > 1 ? 1 : nt;
    return p;
}

/* Chunking for g by one sample's patch matrix. out_units: the forward's output stage per pixel
 * and output channel, in patch-element units (FX_CONV_OUT_FACTOR for int64 sums next to int16
 * patches), so that a chunk's sums also stay in cache; 0 for the passes whose chunk size is the
 * patch matrix alone. */
static conv_plan conv_plan_make(const fx_conv_geom *g, int wgrad, int out_units)
{
    int64_t per_sample = g->C * g->KH * g->KW * g->OH * g->OW; /* < 2^58, validated */
    const int64_t out_per_sample = out_units * g->O * g->OH * g->OW;
    if (out_per_sample > per_sample) per_sample = out_per_sample;
    return conv_plan_sized(g, wgrad, per_sample, g->N);
}

/* One chunk of the batch per thread, each thread over its own chunk: for the AMX integer
 * weight gradient, which blocks its images itself (as many as keep its int32 sums from wrapping
 * and its copies within L2) and combines its accumulators into int64 once a block; with the
 * fixed chunks of conv_plan_sized (8 images for ResNet-20's 8 x 8 layers) each chunk's
 * combinations were a fifth of those layers' weight gradient (1.44 -> 1.20 ms for 64 channels,
 * two threads). Only for exact sums, which no chunking changes. */
static conv_plan conv_plan_per_thread(const fx_conv_geom *g)
{
    const int64_t nt = flexpoint_num_threads(), parts = g->N < nt ? g->N : nt;
    conv_plan p;
    p.nb = (g->N + parts - 1) / (parts > 0 ? parts : 1);
    if (p.nb < 1) p.nb = 1;
    p.nchunks = (g->N + p.nb - 1) / p.nb;
    p.outer = (int)(p.nchunks > 0 ? p.nchunks : 1);
    p.inner = 1;
    return p;
}

/* The operand format of an op's GEMMs: int16 mantissas (integer compute), or for float
 * compute fp32, or fp16/bf16 as they are stored when both GEMM inputs have that format and the
 * backend's GEMM widens such operands while it packs them (the widening is exact, so the GEMM
 * sees the same fp32 values as after a separate widening pass: the same results, without the
 * fp32 copy of the input and with half the bytes through im2col). */
typedef struct conv_compute {
    int ic;     /* integer compute */
    fmt_t cf;   /* operand format: FMT_DFP16 (int16) , FMT_FP32, FMT_FP16 or FMT_BF16 */
    size_t esz; /* bytes per operand element */
    size_t ssz; /* bytes per stage element (int64 or fp32) */
} conv_compute;

static conv_compute conv_compute_for(const tensor_t *a, const tensor_t *b)
{
    conv_compute c;
    c.ic = fx_is_int_compute(a);
    c.cf = c.ic ? FMT_DFP16 : FMT_FP32;
    if (!c.ic && (a->fmt == FMT_FP16 || a->fmt == FMT_BF16) && b->fmt == a->fmt &&
        fx_backend_active()->kernels[FX_OP_MATMUL][a->fmt])
        c.cf = a->fmt;
    c.esz = c.cf == FMT_FP32 ? sizeof(float) : sizeof(int16_t);
    c.ssz = c.ic ? sizeof(int64_t) : sizeof(float);
    return c;
}

/* Contiguous compute-format view of an input (no copy when it already is one). */
static int conv_operand(const tensor_t *t, const conv_compute *cc, fx_operand *o, fx_scratch *s,
                        const char *func)
{
    return fx_operand_make(t, cc->ic, cc->cf, 0, 0, NULL, o, s, func);
}

/* fx_operand_2d in the op's operand format. */
static fx_operand conv_op2d(const conv_compute *cc, const void *data, int exp, int64_t rows,
                            int64_t cols, int64_t ld, int trans)
{
    fx_operand o = fx_operand_2d(data, cc->ic, exp, rows, cols, ld, trans);
    o.fmt = cc->cf;
    return o;
}

/* p moved up to the next multiple of 64 bytes (NULL stays NULL): the pre-packed operands'
 * alignment, for which their allocations leave 64 spare bytes */
static void *conv_align64(void *p)
{
    return p ? (char *)p + ((64 - ((uintptr_t)p & 63)) & 63) : NULL;
}

static void *conv_alloc(fx_scratch *s, int64_t n, size_t sz, int *rc, const char *func)
{
    if (*rc) return NULL;
    void *p = fx_scratch_alloc(s, n > 0 ? n : 1, sz);
    if (!p)
        *rc = fx_error(FX_ENOMEM, func, "cannot allocate %lld elements of %zu bytes",
                       (long long)n, sz);
    return p;
}

/* The fewest values per patch (C KH KW) from which an integer convolution runs on the AMX
 * kernel rather than the register tiles' panels. Measured on the Xeon reporting model 167, one
 * thread, batch 128, 3x3 kernels, dfp16 forward, ms AMX / register tiles: C = 16 (K = 144):
 * 16 -> 16 channels at 32x32 15.3 / 12.5, 16 -> 32 at 16x16 4.0 / 3.1; C = 32 (K = 288): 32 -> 32
 * at 16x16 5.0 / 5.5, 32 -> 64 at 8x8 1.9 / 2.5; C = 64: 2.7 / 4.5. Below a few tiles of K the
 * AMX blocks' fixed work (zeroing, storing and combining four accumulators per 16 x 16
 * outputs) outweighs their few tile products. (Those were the AMX GEMM on gathered patch rows;
 * a layer with C and O multiples of 16 now takes fx_i16_fwd_amx, tiles read in place, at any
 * K: ResNet-20's 16-channel forward pass 2.1 -> 1.5 ms a step at two threads.) */
#define FX_CONV_AMX_MIN_K 256

/* Pre-packed operands of a convolution's chunk GEMMs (backend.h): A panels or A rows on
 * demand, and B packed once for the AMX kernels, each NULL when the GEMM packs that operand
 * itself. */
typedef struct conv_prepacked {
    const void *a_panels;
    int a_mr;
    /* A's rows on demand and, beside them, the AMX kernel's tiles (fx_op_call.a_rows and
     * .a_tiles, conv_panels.h): the forward patch rows (fx_conv_rows_i16, tiles_i16) or the
     * weight gradient's (fx_conv_wrows_i16, wtiles_i16); NULL where the GEMM reads A */
    void (*a_rows)(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int16_t *dst,
                   int64_t ld);
    const void *a_rows_ctx;
    void (*a_tiles)(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int8_t *ap);
    const void *a_tiles_ctx;
    const uint16_t *b_amx; /* bf16 weights packed once for the AMX route, or NULL */
    const int8_t *b_amx_i16; /* int16 weights packed once for the AMX kernel, or NULL */
} conv_prepacked;

/* out = a x b with the active backend's GEMM kernel, on nthreads threads: int16 operands into
 * an exact int64 stage, or fp32 operands into an fp32 stage. This is fx_matmul_stage with an
 * explicit thread count (the kernel is called from inside this file's parallel loop over
 * chunks, where it must stay single-threaded) and optional pre-packed operands pp. The int64
 * stage's exponent is a.exp + b.exp. imax (may be NULL): where the integer kernel reports the
 * largest |value| of its output (fx_op_call.out_imax), it is stored there and *imax_known set
 * to 1, which spares the caller a pass over the stage; else *imax_known stays 0. */
static int conv_matmul_with(fx_operand a, const conv_prepacked *pp, fx_operand b,
                            int int_compute, void *out, int nthreads, uint64_t *imax,
                            int *imax_known)
{
    const fx_backend *be = fx_backend_active();
    fx_kernel k = be->kernels[FX_OP_MATMUL][a.fmt];
    if (!k) return FX_EUNSUPPORTED;
    fx_op_call c;
    memset(&c, 0, sizeof c);
    c.op = FX_OP_MATMUL;
    c.nin = 2;
    c.in[0] = a;
    c.in[1] = b;
    c.out_ndim = 2;
    c.out_shape[0] = a.shape[0];
    c.out_shape[1] = b.shape[1];
    c.out_numel = a.shape[0] * b.shape[1];
    int e = 0;
    c.out_f32 = int_compute ? NULL : (float *)out;
    c.out_i64 = int_compute ? (int64_t *)out : NULL;
    c.out_exp = &e;
    c.nthreads = nthreads;
    if (imax) {
        *imax_known = 0;
        c.out_imax = imax;
        c.out_imax_known = imax_known;
    }
    if (pp) {
        c.a_panels = pp->a_panels;
        c.a_panels_mr = pp->a_mr;
        c.a_rows = pp->a_rows;
        c.a_rows_ctx = pp->a_rows_ctx;
        if (pp->a_rows) { /* tiles only beside rows, which every other kernel takes */
            c.a_tiles = pp->a_tiles;
            c.a_tiles_ctx = pp->a_tiles_ctx;
        }
        c.b_amx = pp->b_amx;
        c.b_amx_i16 = pp->b_amx_i16;
    }
    return k(&c);
}

static int conv_matmul(fx_operand a, fx_operand b, int int_compute, void *out, int nthreads)
{
    return conv_matmul_with(a, NULL, b, int_compute, out, nthreads, NULL, NULL);
}

/* The first failed chunk's status as an error of the calling thread (kernels may fail only for
 * want of memory, inside the parallel loop, where no message can be set for the caller). */
static int conv_chunk_status(const int *status, int64_t n, const char *func)
{
    for (int64_t i = 0; i < n; i++)
        if (status[i])
            return fx_error(status[i], func, "the GEMM of chunk %lld failed (%s)", (long long)i,
                            flexpoint_status_str(status[i]));
    return FX_OK;
}

/* The chunk's patch matrix, channel-major (col) or pixel-major (colT), from its padded copy
 * xp (fx_conv_pad). */
static void conv_im2col(const fx_conv_geom *g, size_t esz, int64_t nb, const void *xp,
                        void *col, int pixel_major, int nt)
{
    /* 16-bit elements (int16 mantissas, fp16/bf16 patterns) are copied as bits */
    if (esz == 2 && pixel_major)
        fx_im2row_i16(g, xp, nb, col, nt);
    else if (esz == 2)
        fx_im2col_i16(g, xp, nb, col, nt);
    else if (pixel_major)
        fx_im2row_f32(g, xp, nb, col, nt);
    else
        fx_im2col_f32(g, xp, nb, col, nt);
}

/* The same via the padded chunk xp (scratch of fx_conv_padded_numel elements), padded here. */
static void conv_patches(const fx_conv_geom *g, const void *x, size_t esz, int64_t n0,
                         int64_t nb, void *xp, void *col, int pixel_major, int nt)
{
    fx_conv_pad(g, x, n0, nb, xp, esz);
    conv_im2col(g, esz, nb, xp, col, pixel_major, nt);
}

static int conv_write(tensor_t *out, const void *stage, int int_compute, int e, const char *func)
{
    return int_compute ? fx_write_i64(out, stage, e, func) : fx_write_f32(out, stage, func);
}

/* ---- forward output --------------------------------------------------------------------------
 * The forward GEMMs leave y pixel-major, ypix[(n*P + p)*O + o]. Where y is a whole contiguous
 * host tensor, its values are rounded first: shared-exponent mantissas straight into NCHW
 * order where the level has cvt.quant_i64_t, else pixel-major and then transposed; fp16/bf16
 * pixel-major and then transposed. Either way the transposes move 16-bit values instead of
 * int64/fp32 ones. Otherwise ypix is transposed into an NCHW stage and written as any stage.
 * Rounding is elementwise and the statistics are counts and maxima, so the order changes
 * nothing in the result. */

typedef struct conv_yquant_ctx {
    const fx_backend *be;
    const int64_t *pix; /* [N*P, O] exact sums at exponent exp; NULL: no whole stage (each
                         * chunk's sums lived only in its thread's buffer while it was
                         * rounded at fused_e), so only that rounding can be kept */
    int exp;
    int64_t N, O, P;
    int16_t *tmp;       /* the mantissas of y, [N, O, P] where the level rounds into the
                         * transposed order (cvt.quant_i64_t), else [N*P, O] */
    int16_t *dst;       /* y's elements */
    fx_qstats *part;    /* [N] per-sample statistics */
    int fused_e;        /* tmp and part[] already hold the rounding at this exponent (else
                         * FX_EXP_NONE); y itself is written only by the write */
    int nt;
    int need_stage;     /* set when the write asked, without a stage, for another exponent */
    int copy_pending;   /* the write kept fused_e, tmp is still to go to y (without a stage, or
                         * with defer_copy) */
    int defer_copy;     /* with a stage too, the copy of a kept rounding is left to the caller
                         * (fx_conv2d_shared_bias_relu, which may not need y's values) */
    int alt_e;          /* tmp2 and part2 hold the rounding at this second exponent (a DFP16 y
                         * whose exponent moved lately: fx_write_shared_alt_exp), else
                         * FX_EXP_NONE; swapped in when the write picks it */
    int16_t *tmp2;
    fx_qstats *part2;
    int alt_taken;      /* the write picked the second rounding: early u and relu(u) made from
                         * the first (fx_conv2d_shared_bias_relu) do not stand */
    int broken[2];      /* some chunk's rounding at fused_e (at alt_e) saturated in the AMX
                         * kernel's epilogue, which then leaves it unmade: not to be kept */
    int32_t *odd;       /* [N*P, O]: the sums rounded to odd at odd_e (conv_skip_stage),
                         * else NULL; odd_made: the samples it holds; odd_lost: a value left
                         * int32 */
    int odd_e, odd_lost;
    int64_t odd_made;
    uint64_t imax;      /* the largest |sum|, at exp */
} conv_yquant_ctx;

/* Round samples [n0, n0 + nb) at exponent e into part[]; keep: also into tmp, and with
 * scatter, into y (y's layout, from which tmp then differs only in being a copy). A level
 * with cvt.quant_i64_t rounds straight into the NCHW order; the others round pixel-major and
 * transpose. */
static void conv_yquant_samples(const conv_yquant_ctx *c, const int64_t *pix, int e, int keep,
                                int scatter, int64_t n0, int64_t nb, int nt)
{
    const int64_t block = c->P * c->O;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t n = n0; n < n0 + nb; n++) {
        int16_t *t = keep ? c->tmp + n * block : NULL;
        const int64_t *src = pix + (n - n0) * block; /* pix: sample n0's sums */
        if (t && c->be->cvt.quant_i64_t) {
            c->be->cvt.quant_i64_t(src, scatter ? c->dst + n * block : t, c->P, c->O,
                                   e - c->exp, &c->part[n]);
            continue;
        }
        c->be->cvt.quant_i64(src, t, block, e - c->exp, &c->part[n]);
        if (keep && scatter) fx_chunk_scatter_t(t, n, 1, c->O, c->P, c->dst, sizeof(int16_t));
    }
}

/* fx_shared_src.quantize: per sample, quantise its [P, O] block into y's [O, P] order. The
 * per-sample statistics are merged in sample order. When the forward loop already rounded
 * every chunk at e into tmp while its sums were in cache (fused_e), only the copies (or, on
 * levels that round pixel-major, the transposes) are left. Never fails: every buffer is
 * allocated before the op computes. */
static int64_t conv_early_reused; /* test hook: writes that found their rounding done */
static int64_t conv_alt_reused;   /* test hook: of those, the ones at the second exponent */

static int64_t conv_in_place_made; /* test hook: outputs the early rounding went into itself */

int64_t fx_conv_in_place_made(void)
{
    return __atomic_load_n(&conv_in_place_made, __ATOMIC_RELAXED);
}

static int64_t conv_y_chunks_made; /* test hook: float outputs written chunk by chunk */

int64_t fx_conv_y_chunks_made(void)
{
    return __atomic_load_n(&conv_y_chunks_made, __ATOMIC_RELAXED);
}

int64_t fx_conv_early_rounding_reused(void)
{
    return __atomic_load_n(&conv_early_reused, __ATOMIC_RELAXED);
}

int64_t fx_conv_alt_rounding_reused(void)
{
    return __atomic_load_n(&conv_alt_reused, __ATOMIC_RELAXED);
}

/* tmp, the rounding at fused_e, into y: a copy where the level rounds into y's order, else a
 * transpose per sample. */
static void conv_ycopy(const conv_yquant_ctx *c)
{
    if (c->tmp == c->dst) return; /* the rounding went into y itself */
    const int64_t block = c->P * c->O;
    const int nt = c->nt;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (int64_t n = 0; n < c->N; n++) {
        if (c->be->cvt.quant_i64_t)
            memcpy(c->dst + n * block, c->tmp + n * block, (size_t)block * sizeof(int16_t));
        else
            fx_chunk_scatter_t(c->tmp + n * block, n, 1, c->O, c->P, c->dst, sizeof(int16_t));
    }
}

/* The most products per sum for which a DFP16 output whose exponent moved lately takes the
 * second rounding (conv_skip_stage) rather than the stage. Per output value,
 * the stage writes 8 bytes out and reads them back; the second rounding is a pass over sums in
 * cache, and a write that picks neither guessed exponent runs the whole op again, whose cost
 * grows with the terms. In a ResNet-20 epoch on Fashion-MNIST (traces of 16 of its
 * convolution outputs and input gradients, 100 steps) 543 of 1,584 writes were not steady, of
 * which 189 took the exponent left at the last move and 11 neither; in the CNN's (4 tensors,
 * 100 steps, early in training, exponents that trend rather than hover) 137, 33 and 15. Timed
 * on the Zen 5: ResNet-20's DFP16 epochs (at most 576 terms) 4-7 % shorter; the CNN's, whose
 * conv2 sums 800 (forward) and 1,600 (input gradient) terms, 1.4 % longer over eight pairs
 * with every layer taking it. */
#define FX_CONV_ALT_MAX_TERMS 576

/* Whether an op that rounds its whole shared-exponent output `out` early, at a guess, keeps no
 * whole int64 stage, with *alt_e the second exponent it then also rounds at (FX_EXP_NONE:
 * none) and *keep_odd whether it keeps its sums rounded to odd instead (below). nostage_ok:
 * the op may go without a stage at all; first_run: no run before it imposed the guess; terms:
 * products per sum; odd_ok: the op can keep its sums so (conv_round_odd_ok, and a kernel that
 * stores them). On a first run of a DFP16 output past its first write (before it, the guess is
 * the initial exponent, which says nothing about the sums) with more than FX_CONV_ALT_MAX_TERMS
 * products, steady or not, the sums rounded to odd where odd_ok; else without a stage where
 * the guesses held lately (fx_write_shared_guess_steady); else, on a first run of sums of at
 * most FX_CONV_ALT_MAX_TERMS products, where the output is DFP16 and moved lately, with the
 * second rounding at the exponent it left (fx_write_shared_alt_exp). */
static int conv_skip_stage(const tensor_t *out, int nostage_ok, int first_run, int64_t terms,
                           int odd_ok, int *alt_e, int *keep_odd)
{
    *alt_e = FX_EXP_NONE;
    *keep_odd = 0;
    if (!nostage_ok) return 0;
    if (odd_ok && first_run && out->fmt == FMT_DFP16 && out->st->writes > 0 &&
        terms > FX_CONV_ALT_MAX_TERMS) {
        *keep_odd = 1;
        return 1;
    }
    if (fx_write_shared_guess_steady(out)) return 1;
    return first_run && terms <= FX_CONV_ALT_MAX_TERMS && fx_write_shared_alt_exp(out, alt_e);
}

/* Where a write picks e, the second rounding's exponent (*alt_e) rather than the first's
 * (*fused_e): the two roundings (mantissas, statistics and whether each is broken) trade
 * places, so that the first is the one kept, and the write takes it as it would a right guess.
 * Returns whether they did. */
static int conv_take_second(int e, int16_t **tmp, int16_t **tmp2, fx_qstats **part,
                            fx_qstats **part2, int *fused_e, int *alt_e, int broken[2])
{
    if (e == *fused_e || e != *alt_e) return 0;
    int16_t *t = *tmp;
    fx_qstats *p = *part;
    *tmp = *tmp2;
    *part = *part2;
    *tmp2 = t;
    *part2 = p;
    *alt_e = *fused_e;
    *fused_e = e;
    const int b = broken[0];
    broken[0] = broken[1];
    broken[1] = b;
    __atomic_fetch_add(&conv_alt_reused, 1, __ATOMIC_RELAXED);
    return 1;
}

/* Whether a write's exponent e is that of a rounding the AMX epilogue left unmade (a DFP16
 * write picks one only where its window clamps it): there is nothing to keep, and the write
 * goes on as for an exponent no rounding was made at */
static int conv_picks_broken(int e, int fused_e, int alt_e, const int broken[2])
{
    return (e == fused_e && broken[0]) || (e == alt_e && broken[1]);
}

/* The sums of a DFP16 output of more than FX_CONV_ALT_MAX_TERMS products kept rounded to odd
 * (fx_backend.conv.i16_round_odd_keep), FX_ROUND_ODD_BELOW binary places below the guessed
 * exponent, in int32 beside the rounding at the guess. A write that picks another exponent e
 * at least two places above them rounds these instead of running the op again: by the
 * round-to-odd property (src/flex/round_odd.c) the nearest-even rounding of q at 2^j, j >= 2,
 * is that of the exact sum, so the mantissas, and the statistics but the largest |sum|
 * (zeros, saturations and the largest mantissa follow from the rounding alone; the largest
 * |sum| is the chunks' exact one), are those of the int64 stage, for any e from the guess
 * less one up to where a value would leave int32. Why: at the AVX2 level the CNN's conv2 (800
 * and 1,600 products a sum; its input gradient's exponent moved at 44 of its first 100 writes,
 * always by one) either kept a whole int64 stage or, when its guesses had held, ran again
 * (about 22 ms) at each miss; the buffer costs 4 bytes a value and a pass over sums in cache
 * (0.3 ns a value in a loop of its own). */
#define FX_ROUND_ODD_BELOW 3
static int64_t conv_round_odd_taken; /* test hook: writes rounded from the buffer */

int64_t fx_conv_round_odd_taken(void)
{
    return __atomic_load_n(&conv_round_odd_taken, __ATOMIC_RELAXED);
}

static int conv_round_odd_enabled_flag = 1;

void fx_conv_round_odd_set_enabled(int on)
{
    __atomic_store_n(&conv_round_odd_enabled_flag, on != 0, __ATOMIC_RELAXED);
}

/* Whether this level keeps sums at exponent exp rounded to odd for an output guessed at fuse_e
 * (conv_skip_stage): its choice, its kernel, the route's switch and a shift the kernel takes
 * (1 to 62 places) */
static int conv_round_odd_ok(const fx_backend *be, int fuse_e, int exp)
{
    const int k = fuse_e - FX_ROUND_ODD_BELOW - exp;
    return be->conv.i16_round_odd_keep && be->cvt.round_odd_i64 &&
           __atomic_load_n(&conv_round_odd_enabled_flag, __ATOMIC_RELAXED) && k >= 1 && k <= 62;
}

static int conv_yquant(void *vctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    (void)r; /* int64 stages round to nearest even (fx_requant), whatever the tensor's mode */
    conv_yquant_ctx *c = vctx;
    const int broken = conv_picks_broken(e, c->fused_e, c->alt_e, c->broken);
    if (!broken && conv_take_second(e, &c->tmp, &c->tmp2, &c->part, &c->part2, &c->fused_e,
                                    &c->alt_e, c->broken))
        c->alt_taken = !c->alt_taken;
    if (e == c->fused_e && !broken) { /* part[] holds this rounding's statistics */
        if (keep) {
            __atomic_fetch_add(&conv_early_reused, 1, __ATOMIC_RELAXED);
            /* with a stage, y now; without, once the write has kept e (it may still ask for
             * another exponent, and then the op runs again and y must be as it was) */
            if (c->pix && !c->defer_copy)
                conv_ycopy(c);
            else
                c->copy_pending = 1;
        }
    } else if (!c->pix && c->odd && !c->odd_lost && c->odd_made == c->N && e - c->odd_e >= 2) {
        /* the sums rounded to odd two or more places below e, rounded at e sample by sample
         * (widened back to int64 for the level's rounding), into y as from a stage */
        c->fused_e = FX_EXP_NONE;
        c->copy_pending = 0;
        const int64_t block = c->P * c->O;
        int64_t *wide = malloc((size_t)block * sizeof(int64_t));
        if (!wide) return fx_error(FX_ENOMEM, "tensor_conv2d", "cannot allocate %lld sums",
                                   (long long)block);
        conv_yquant_ctx from_odd = *c;
        from_odd.exp = c->odd_e;
        for (int64_t n = 0; n < c->N; n++) {
            const int32_t *odd_row = c->odd + n * block;
            for (int64_t i = 0; i < block; i++) wide[i] = odd_row[i];
            conv_yquant_samples(&from_odd, wide, e, keep, 1, n, 1, 1);
        }
        free(wide);
        fx_qstats_init(q);
        for (int64_t n = 0; n < c->N; n++) fx_qstats_merge(q, &c->part[n]);
        q->max_abs_in = (double)c->imax; /* the exact sums', in units of 2^exp */
        if (keep) __atomic_fetch_add(&conv_round_odd_taken, 1, __ATOMIC_RELAXED);
        return FX_OK;
    } else if (!c->pix) {
        /* no sums to round again: conv2d_forward_host runs the op again, guessing the exponent
         * the write asks for first: this one (a DFP16 scale that moved: without a stage
         * again), or, where the write kept the guess before asking again (a FLEX16_5 overflow
         * it recomputes), the guess, which that run's first rounding, from a stage, reuses */
        c->need_stage = 1;
        if (!c->copy_pending) c->fused_e = e;
        return FX_ESTATE;
    } else {
        c->fused_e = FX_EXP_NONE; /* part[] and tmp now describe exponent e */
        c->copy_pending = 0;      /* and y, written here */
        conv_yquant_samples(c, c->pix, e, keep, 1, 0, c->N, c->nt);
    }
    fx_qstats_init(q);
    for (int64_t n = 0; n < c->N; n++) fx_qstats_merge(q, &c->part[n]);
    return FX_OK;
}

/* Whether y is written by per-sample rounding of the int64 stage (conv_yquant): a whole host
 * shared-exponent tensor under integer compute (the host code runs on host tensors only). */
static int conv_y_direct_shared(const tensor_t *y, const conv_compute *cc)
{
    return cc->ic && fmt_is_shared_exponent(y->fmt) && fx_tensor_covers_storage(y);
}

/* Whether y is a whole host fp16/bf16 tensor under float compute: its values are the fp32
 * stage rounded to 16 bits, a conversion that does not depend on when it runs. */
static int conv_y_direct_half(const tensor_t *y, const conv_compute *cc)
{
    return !cc->ic && (y->fmt == FMT_FP16 || y->fmt == FMT_BF16) &&
           fx_tensor_covers_storage(y);
}

static void (*conv_half_cvt(fmt_t f))(const float *, uint16_t *, int64_t)
{
    const fx_backend *be = fx_backend_active();
    return f == FMT_FP16 ? be->cvt.f32_to_fp16 : be->cvt.f32_to_bf16;
}

/* Write y from the pixel-major stage ypix (int64 at exponent exp, imax its largest |value|, or
 * fp32). yq: the rounding context when conv_y_direct_shared(y), else NULL. half_done: for a
 * conv_y_direct_half(y), the stage already converted pixel-major (NULL: convert here). */
static int conv_write_y(tensor_t *y, const fx_conv_geom *g, const conv_compute *cc,
                        const void *ypix, int exp, uint64_t imax, conv_yquant_ctx *yq,
                        uint16_t *half_done, fx_scratch *s, const char *func)
{
    const int64_t P = g->OH * g->OW, ny = g->N * g->O * P;
    const int nt = flexpoint_num_threads();
    const int direct = fx_tensor_covers_storage(y);
    int rc = FX_OK;
    if (yq) {
        fx_shared_src src;
        memset(&src, 0, sizeof src);
        src.kind = FX_STAGE_I64;
        src.exp = exp;
        src.imax = imax;
        src.true_max = ldexp((double)imax, exp);
        src.ctx = yq;
        src.quantize = conv_yquant;
        return fx_write_shared_with(y, &src, func);
    }
    if (direct && !cc->ic && y->fmt == FMT_FP32) { /* the transpose is the write */
        fx_chunk_scatter_t_par(ypix, g->N, g->O, P, fx_tensor_base(y), sizeof(float), nt);
        return FX_OK;
    }
    if (direct && !cc->ic && (y->fmt == FMT_FP16 || y->fmt == FMT_BF16)) {
        void (*cvt)(const float *, uint16_t *, int64_t) = conv_half_cvt(y->fmt);
        uint16_t *tmp = half_done;
        if (!tmp) tmp = conv_alloc(s, ny, sizeof(uint16_t), &rc, func);
        if (rc) return rc;
        const int64_t block = P * g->O;
        (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
        for (int64_t n = 0; n < g->N; n++) {
            if (!half_done) cvt((const float *)ypix + n * block, tmp + n * block, block);
            fx_chunk_scatter_t(tmp + n * block, n, 1, g->O, P, fx_tensor_base(y), sizeof(uint16_t));
        }
        return FX_OK;
    }
    char *ystage = conv_alloc(s, ny, cc->ssz, &rc, func);
    if (rc) return rc;
    fx_chunk_scatter_t_par(ypix, g->N, g->O, P, ystage, cc->ssz, nt);
    if (cc->ic) return fx_write_i64_max(y, (const int64_t *)ystage, exp, imax, func);
    return fx_write_f32(y, (const float *)ystage, func);
}

/* ---- fused bias and ReLU (tensor_conv2d_bias_relu) -------------------------------------------
 * The unfused sequence is three writes: t = conv(x, w) rounded to y's format, u = t + bias (one
 * fp32 addition of the widened values, rounded to y's format), y = relu(u). For a float y the
 * same per-element steps run on each chunk of fp32 sums while it is in cache, so the result is
 * those bits without the two extra passes over y. For fp16/bf16 the ReLU runs on the fp32 sum
 * before the one rounding: relu and rounding to a 16-bit format commute exactly (a positive
 * value rounds to a value >= +0, a non-positive one to <= 0 or -0, NaN stays NaN with its
 * sign), so cvt(relu(r)) is relu(cvt(r)). */
typedef struct conv_epilogue {
    const float *bias; /* [O], widened (exact), or NULL */
    int relu;
} conv_epilogue;

/* Apply ep to a chunk of rows x O fp32 sums (pixel-major, in place), before they are written
 * to y. half: y is fp16/bf16 and this is the chunk's 16-bit buffer, which then receives the
 * chunk's final conversion too; with a bias, the sums are first rounded to y's format through
 * it and widened back, as the unfused convolution's own write would round them. The 16-bit
 * route's four passes (round, widen, bias and ReLU, round) run block by block of rows, each
 * block's in L1: over a whole chunk they had taken three times fp32's epilogue (a bf16 CNN
 * conv1 with bias and ReLU 3.8 ms against fp32's 3.0 at the AVX2 level, one thread). */
static void conv_epilogue_chunk(const conv_epilogue *ep, const fx_backend *be, fmt_t yfmt,
                                float *v, int64_t rows, int64_t O, uint16_t *half)
{
    void (*cvt)(const float *, uint16_t *, int64_t) = half ? conv_half_cvt(yfmt) : NULL;
    void (*widen)(const uint16_t *, float *, int64_t) =
        yfmt == FMT_FP16 ? be->cvt.fp16_to_f32 : be->cvt.bf16_to_f32;
    /* rows per block: about 4 KiB of sums (fp32 y: the whole chunk, one pass) */
    const int64_t rb = !half ? rows : O >= 1024 ? 1 : 1024 / O;
    for (int64_t r0 = 0; r0 < rows; r0 += rb) {
        const int64_t nr = rows - r0 < rb ? rows - r0 : rb, n = nr * O;
        float *vb = v + r0 * O;
        uint16_t *hb = half ? half + r0 * O : NULL;
        if (half && ep->bias) {
            cvt(vb, hb, n);
            widen(hb, vb, n);
        }
        if (ep->bias || ep->relu) be->conv.bias_relu_f32(vb, nr, O, ep->bias, ep->relu);
        if (half) cvt(vb, hb, n);
    }
}

/* fx_conv2d_shared_bias_relu's u = y + bias and relu(u) (nn_ops.h): done once both are written */
typedef struct conv_shared_relu {
    tensor_t *u, *y;
    const tensor_t *bias;
    int done;
} conv_shared_relu;

/* ---- forward ------------------------------------------------------------------------------- */

static const conv_names conv_fwd_names = {"x", "w", "y"};

/* The forward op's validation: geometry and the integer path's term limit. */
static int conv2d_forward_check(tensor_t *y, const tensor_t *x, const tensor_t *w, int sh,
                                int sw, int ph, int pw, int dh, int dw, fx_conv_geom *g,
                                const char *func)
{
    int rc = conv_geometry(func, &conv_fwd_names, x, w, y, sh, sw, ph, pw, dh, dw, g);
    if (rc) return rc;
    return conv_int_limit(func, conv_compute_for(x, w).ic, g->C * g->KH * g->KW, "each output");
}

/* Whether the level's bf16 GEMM is the fp32 one on widened values, whose chains the fp32
 * convolution kernels and panels reproduce; the AVX512_BF16 pair and AMX GEMMs sum in orders
 * of their own, so a bf16 convolution takes those fp32 routes only where they are its own. */
static int bf16_gemm_widens(const fx_backend *be)
{
    return be->kernels[FX_OP_MATMUL][FMT_BF16] == be->kernels[FX_OP_MATMUL][FMT_FP32];
}

/* The forward. A whole shared-exponent y is rounded at a guessed exponent chunk by chunk
 * (below); on a first run (redo_guess FX_EXP_NONE), where nothing else needs them, the chunks'
 * int64 sums then live only in a per-thread buffer, and if the write picks another exponent
 * the op returns with *redo_e set to the guess for a second run (conv_yquant), y untouched,
 * for conv2d_forward_host to run it again guessing redo_guess, with a whole stage where
 * staged. */
static int conv2d_forward_run(tensor_t *y, const tensor_t *x, const tensor_t *w,
                              const fx_conv_geom *gp, const conv_epilogue *ep,
                              conv_shared_relu *sr, int redo_guess, int staged, int *redo_e,
                              const char *func)
{
    const fx_conv_geom g = *gp;
    const conv_compute cc = conv_compute_for(x, w);
    const int ic = cc.ic;
    int rc = FX_OK;
    const conv_plan plan = conv_plan_make(&g, 0, FX_CONV_FWD_OUT_UNITS(ic));
    const int64_t CKK = g.C * g.KH * g.KW, P = g.OH * g.OW;
    /* integer compute with a GEMM that takes pre-packed A panels: build them straight from the
     * padded input (conv_panels.h) instead of im2row + packing; the same values, so the same
     * exact sums. bf16 x bf16 on a pair GEMM (vdpbf16ps) takes the same int32 pair panels,
     * built from the bf16 bits by the same builder. */
    const fx_backend *be = fx_backend_active();
    /* bf16 on the pair route: no patch matrix and no GEMM, the level's direct kernel on a
     * channel-pair-last copy of each padded chunk (fx_bf16_fwd_direct: its own order of the
     * products, the route's bits) */
    const int fdirect = !ic && cc.cf == FMT_BF16 && be->conv.bf16_fwd &&
                        fx_bf16_fwd_direct_enabled() && be->conv.bf16_fwd_fits(&g);
    /* integer compute on the AMX kernel, which packs plain operands itself (gemm_i16_amx.c):
     * the patch rows on demand (16 at a time, gathered while it packs them: no patch matrix)
     * and the plain weights, from FX_CONV_AMX_MIN_K values per patch (narrower products go
     * to the register-tile GEMM, which wants its panels) */
    /* integer compute on AMX tiles read in place from byte planes of the chunk (fx_i16_fwd_amx:
     * no patch rows), from 16 channels each way; the same exact sums. Its tiles are 16 pixels
     * of one output row, or 16 positions across rows (span blocks), taken where at least three
     * quarters of each tile count (fx_i16_fwd_amx_tiles_full): ResNet-20's 8 x 8 layers in
     * row blocks, half tiles, took 1.77 ms forward and 2.01 ms for the input gradient at one
     * thread against 1.67 and 1.70 on the GEMM's gathered rows; the CNN's 14 x 14 conv2
     * gains */
    const int iamx = ic && be->conv.i16_fwd_amx && fx_gemm_i16_amx_on() &&
                     fx_i16_fwd_amx_fits(&g) && fx_i16_fwd_amx_tiles_full(&g);
    const int plain_i16 = ic && !iamx && be->gemm.i16_amx && fx_gemm_i16_amx_on() &&
                          CKK >= FX_CONV_AMX_MIN_K;
    /* integer compute elsewhere with VNNI: the direct kernel on a channel-pair-last copy of
     * each padded chunk (fx_i16_fwd_direct: the exact sums, so the same bits); a chunk whose
     * data it declines takes the patch panels and GEMM below, which stay set up for that */
    const int ikernel = ic && !iamx && !plain_i16 && be->conv.i16_fwd && fx_i16_fwd_direct_enabled();
    const int ifits = ikernel && fx_i16_fwd_direct_fits(&g);
    /* a layer with too few input channels for it (the CNN's first) takes it folded: its
     * kernel columns as channels (conv_fold.h: the same products, so the same exact sums) */
    fx_conv_geom gfold;
    const int ifold = ikernel && !ifits && fx_conv_fold_geom(&g, &gfold) &&
                      fx_i16_fwd_direct_fits(&gfold);
    const int idirect = ifits || ifold || iamx;
    const fx_conv_geom *gd = ifold ? &gfold : &g; /* the direct kernel's geometry */
    /* a kernel that pads while it copies takes the chunk as it is, and the folded chunk (padded
     * in height by the fold) as an unpadded one of height H + 2 ph; the GEMM's padded chunk is
     * then made only for a chunk the kernel declines */
    /* the chosen kernel's packing, scratch and entry */
    const fx_i16_fwd_kernel ik = fx_i16_fwd_kernel_of(be, iamx);
    const int kunpad = idirect && ik.unpadded;
    fx_conv_geom gkernel = *gd;
    if (kunpad && ifold) {
        gkernel.H += 2 * gkernel.ph;
        gkernel.ph = 0;
    }
    const int pair_mr = plain_i16 || fdirect ? 0
                        : ic                ? be->gemm.i16_panel_mr
                        : cc.cf == FMT_BF16 ? be->gemm.bf16_pair_panel_mr
                                            : 0;
    const int panel_mr = fx_conv_panels_fit(&g, pair_mr) ? pair_mr : 0;
    /* float compute likewise: fp32 panels for the fp32 GEMM, widened from the input's storage
     * format (cc.cf) while they are built */
    const int plain_bf16 = cc.cf == FMT_BF16 && !fdirect && be->gemm.bf16_plain_min_k > 0 &&
                           CKK >= be->gemm.bf16_plain_min_k; /* its GEMM packs */
    /* float compute on the level's direct fp32 kernel, where it has one: the panels' chains in
     * their order (conv_f32_direct.h: the same bits) with the taps read from the padded input;
     * fp16 and bf16 chunks are widened to fp32 first, exactly as the panels widen them; bf16
     * only where it would have taken those panels or its GEMM is the widened fp32 one (the
     * pair and AMX GEMMs sum in orders of their own) */
    const int f32direct_fmt =
        cc.cf == FMT_FP32 || cc.cf == FMT_FP16 ||
        (cc.cf == FMT_BF16 && (bf16_gemm_widens(be) ||
                               (!panel_mr && fx_conv_panels_f32_fit(&g, be->gemm.f32_panel_mr))));
    const int f32direct = !ic && !fdirect && !plain_bf16 && be->conv.f32_fwd &&
                          fx_f32_fwd_direct_enabled() && f32direct_fmt;
    const int fpanel_mr = !ic && !panel_mr && !plain_bf16 && !fdirect && !f32direct &&
                                  fx_conv_panels_f32_fit(&g, be->gemm.f32_panel_mr)
                              ? be->gemm.f32_panel_mr
                              : 0;
    /* integer compute on a GEMM that gathers A rows itself, or bf16 on the AMX route, which
     * does too: the patch rows are made for one register tile (or pair of AMX row panels) at a
     * time inside the GEMM (conv_panels.h), so no patch matrix at all */
    const int row_src = (ic && !panel_mr && (plain_i16 || be->gemm.i16_row_source)) ||
                        (plain_bf16 && be->gemm.bf16_row_source);
    const int64_t col_n =
        panel_mr    ? 2 * fx_conv_panels_numel(&g, plan.nb, panel_mr)
        : fpanel_mr ? fx_conv_panels_f32_numel(&g, plan.nb, fpanel_mr) * (int64_t)(4 / cc.esz)
        : row_src || fdirect || f32direct ? 0
                                          : CKK * plan.nb * P;
    const int64_t slack = FX_CONV_PAD_SLACK > FX_CONV_PANEL_SLACK ? FX_CONV_PAD_SLACK
                                                                  : FX_CONV_PANEL_SLACK;
    const int64_t xp_n = fx_conv_padded_numel(&g, plan.nb) + slack;
    /* a folded chunk (ifold) lives in the padded chunk's buffer, which then takes its size (the
     * folded one is never smaller: KW (W + 2pw - KW + 1) >= W + 2pw) */
    const int64_t xpa_n = ifold ? fx_conv_padded_numel(gd, plan.nb) + slack : xp_n;
    const size_t esz = cc.esz, ssz = cc.ssz;

    fx_scratch s = {.n = 0};
    fx_operand xo, wo;
    rc = conv_operand(x, &cc, &xo, &s, func);
    if (!rc) rc = conv_operand(w, &cc, &wo, &s, func);
    /* the direct bf16 kernel pads while it copies, so it needs no padded chunk */
    char *xp = fdirect ? NULL : conv_alloc(&s, xpa_n * plan.outer, esz, &rc, func);
    /* the slack, read by im2col; folded, every chunk's pad writes each thread's buffer up to the
     * end of the last (shortest) chunk's, so only what lies past that needs setting */
    const int64_t xp_set =
        ifold ? fx_conv_padded_numel(gd, g.N - (plan.nchunks - 1) * plan.nb) : 0;
    for (int t = 0; xp && t < plan.outer; t++)
        memset(xp + (size_t)(t * xpa_n + xp_set) * esz, 0, (size_t)(xpa_n - xp_set) * esz);
    char *col = col_n ? conv_alloc(&s, col_n * plan.outer, esz, &rc, func) : NULL;
    /* integer rows on demand come from a channel-last copy of the padded chunk, with the
     * weights' taps permuted to match (conv_panels.h: the same exact sums); bf16 rows from the
     * padded chunk itself, at its kernel rows' offsets */
    const int nhwc = row_src && ic;
    int64_t *goff = row_src && !nhwc ? conv_alloc(&s, g.C * g.KH, sizeof(int64_t), &rc, func)
                                     : NULL;
    if (goff) fx_group_offsets_fill(&g, goff);
    char *xq = nhwc ? conv_alloc(&s, xp_n * plan.outer, esz, &rc, func) : NULL;
    int16_t *wq = nhwc ? conv_alloc(&s, g.O * CKK, sizeof(int16_t), &rc, func) : NULL;
    if (wq && !rc) fx_conv_weights_nhwc(&g, (const int16_t *)wo.data, wq);
    const void *wdata = wq ? (const void *)wq : wo.data; /* the GEMMs' weights */
    /* on the AMX kernel (at least 16 output channels, so that it takes every chunk's product),
     * its A tiles made straight from byte planes of the channel-last chunk */
    const int tiles = nhwc && plain_i16 && g.O >= 16 && be->conv.tiles_i16 &&
                      be->conv.byte_planes_i16;
    const int64_t plane_n = xp_n + 2 * FX_CONV_TILES_SLACK; /* bytes per plane */
    int8_t *planes = tiles ? conv_alloc(&s, 2 * plane_n * plan.outer, 1, &rc, func) : NULL;
    /* A whole shared-exponent y is rounded per sample (conv_yquant). When its exponent can be
     * guessed before the op (fx_write_shared_guess_exp: FLEX16_5's Autoflex prediction, DFP16's
     * current exponent), each chunk is rounded at the guess right after its GEMM, while its
     * int64 sums are in cache, into an int16 buffer (in y's order where the level rounds
     * transposed, else pixel-major); the write then only copies (or transposes) it into y (so
     * y stays untouched if a chunk fails), unless it picks another exponent (a recomputed
     * overflow, a DFP16 scale that moved), which rounds again from the stage. */
    const int yshared = conv_y_direct_shared(y, &cc);
    int fuse_e = FX_EXP_NONE;
    if (yshared && fx_write_shared_guess_exp(y, &fuse_e) == 0) fuse_e = FX_EXP_NONE;
    if (yshared && redo_guess != FX_EXP_NONE) fuse_e = redo_guess;
    /* A fused rounding pass reports each sample's largest |sum| as a double (fx_qstats), which
     * is exact while every sum is below 2^53: |sum| <= CKK 2^30 (int16 products) < 2^53 when
     * CKK < 2^23. Then the chunks need no maximum pass of their own (about 2 % of an AVX2
     * flex16_5 CNN epoch). */
    const int fused_max_exact = CKK < ((int64_t)1 << 23);
    /* Then the whole [N*P, O] int64 stage is needed only when the write picks another exponent
     * than the guess, which in training is now and then (the stage is kept for a y whose
     * guesses missed lately, fx_write_shared_guess_steady): without it, each thread's chunk sums
     * go to one buffer that stays in cache, instead of N*P*O*8 bytes (25.7 MB for the CNN's
     * first layer) written out and faulted in afresh at every call. (A second run finds y
     * as steady as the first did: the write that missed committed nothing.) */
    const int nostage_ok = !staged && fuse_e != FX_EXP_NONE && fused_max_exact &&
                           fx_write_shared_local(y);
    /* A DFP16 y whose exponent moved lately, on a first run: instead of the stage, each chunk
     * is rounded a second time, at the exponent y left at its last move
     * (fx_write_shared_alt_exp), which is where a maximum that hovers at a power of two goes
     * when the guess misses. That costs a second rounding from cache and an int16 buffer
     * instead of an int64 stage written out and read back (ResNet-20's DFP16 convolutions
     * took the stage in a third of their writes); a write that picks neither runs the op
     * again, which a DFP16 write's exact exponent lets do without a stage. With the fused
     * bias and ReLU, u and relu(u) stand on the first rounding: where the write picks the
     * second, y is copied from it and the caller makes u and relu(u), as after a stage. Only
     * for sums of at most FX_CONV_ALT_MAX_TERMS products, where the stage costs more than the
     * second rounding and the runs again. */
    int alt_e, keep_odd;
    /* (the sums kept rounded to odd where the kernel stores them: AMX rounds its chunks in its
     * epilogue) */
    const int nostage = conv_skip_stage(
        y, nostage_ok, redo_guess == FX_EXP_NONE, CKK,
        !iamx && conv_round_odd_ok(be, fuse_e, xo.exp + wo.exp), &alt_e, &keep_odd);
    /* A float y (fp32, fp16, bf16, whole) from a direct kernel (bf16's or fp32's): each
     * chunk's sums get their epilogue (bias, ReLU), conversion and transpose into y while they
     * are in cache, instead of an fp32 stage of the whole batch and a 16-bit copy of y that go
     * out to memory and come back for the transposing pass (a fifth of ResNet-20's 16-channel
     * forward pass in bf16; with the CNN's bias and ReLU, which had kept the stage, conv1's and
     * conv2's forward passes in bf16 took about 2 ms more each than without). The same
     * functions in the same order on the same values, so the same bits. The kernels cannot
     * fail, so no failed op leaves y partly written; a chunk reads only its own images of x
     * (or a padded copy of them) before it writes the same images of y, and the weights are
     * packed before the first chunk, so y may also be x itself (in place). A bias that is y's
     * own storage has O elements, so y holds one image: one chunk, whose epilogue reads the
     * bias before the chunk is written. */
    const int yfloat = conv_y_direct_half(y, &cc) ||
                       (!ic && y->fmt == FMT_FP32 && fx_tensor_covers_storage(y));
    const int ychunks = (fdirect || f32direct) && yfloat;
    /* a bf16 y the bf16 kernel writes itself, rounding each tile's sums in registers (no
     * epilogue) */
    uint16_t *ybf16 = ychunks && fdirect && !ep && y->fmt == FMT_BF16 ? fx_tensor_base(y) : NULL;
    if (ychunks) __atomic_fetch_add(&conv_y_chunks_made, 1, __ATOMIC_RELAXED);
    const int64_t ypix_chunk = plan.nb * P * g.O;
    /* [N*P, O], or a chunk's [nb*P, O] per thread (none for the kernel's own bf16 y) */
    const int64_t ypix_n = nostage || ychunks ? ypix_chunk * plan.outer : g.N * g.O * P;
    char *ypix = ybf16 ? NULL : conv_alloc(&s, ypix_n, ssz, &rc, func);
    int *status = conv_alloc(&s, plan.nchunks, sizeof(int), &rc, func);
    conv_yquant_ctx yq = {.be = be,
                          .exp = rc ? 0 : xo.exp + wo.exp,
                          .N = g.N,
                          .O = g.O,
                          .P = P,
                          .fused_e = FX_EXP_NONE,
                          .nt = flexpoint_num_threads(),
                          .alt_e = FX_EXP_NONE};
    if (yshared) {
        yq.pix = nostage ? NULL : (const int64_t *)(const void *)ypix;
        /* a disposable y (fx_storage.disposable) that is none of the inputs takes the early
         * rounding itself where the level rounds into y's order: no copy of it into y after
         * the write (conv_ycopy: a 4 MB copy per ResNet-20 stage-1 convolution) */
        const int y_in_place = be->cvt.quant_i64_t && y->st->disposable && y->st != x->st &&
                               y->st != w->st && (!sr || !sr->bias || y->st != sr->bias->st);
        yq.tmp = y_in_place ? (int16_t *)fx_tensor_base(y)
                            : conv_alloc(&s, g.N * g.O * P, sizeof(int16_t), &rc, func);
        if (y_in_place) __atomic_fetch_add(&conv_in_place_made, 1, __ATOMIC_RELAXED);
        yq.part = conv_alloc(&s, g.N, sizeof(fx_qstats), &rc, func);
        yq.dst = (int16_t *)fx_tensor_base(y);
        if (alt_e != FX_EXP_NONE) {
            yq.tmp2 = conv_alloc(&s, g.N * g.O * P, sizeof(int16_t), &rc, func);
            yq.part2 = conv_alloc(&s, g.N, sizeof(fx_qstats), &rc, func);
        }
        if (keep_odd) {
            yq.odd = conv_alloc(&s, g.N * g.O * P, sizeof(int32_t), &rc, func);
            yq.odd_e = fuse_e - FX_ROUND_ODD_BELOW;
        }
    }
    /* the second rounding's context: the same sums into tmp2 and part2 */
    conv_yquant_ctx yq_alt = yq;
    yq_alt.tmp = yq.tmp2;
    yq_alt.part = yq.part2;
    /* A whole fp16/bf16 y: each chunk is converted while its fp32 sums are in cache, into a
     * pixel-major buffer that the write transposes into y (untouched if a chunk fails), or
     * with ychunks into one chunk's buffer per thread that goes into y at once */
    uint16_t *yhalf = conv_y_direct_half(y, &cc) && !ybf16
                          ? conv_alloc(&s, ypix_n, sizeof(uint16_t), &rc, func)
                          : NULL;
    void (*half_cvt)(const float *, uint16_t *, int64_t) = yhalf ? conv_half_cvt(y->fmt) : NULL;
    /* integer path: each chunk's largest |sum|, taken while the chunk is in cache, so that
     * the write needs no pass of its own over the int64 stage for the exponent */
    uint64_t *chunk_max = conv_alloc(&s, plan.nchunks, sizeof(uint64_t), &rc, func);
    if (rc) {
        fx_scratch_free(&s);
        return rc;
    }
    /* fx_conv2d_shared_bias_relu: u = y + bias and relu(u) made from each chunk's rounding while
     * it is in cache (fx_add_relu_units), where that rounding is in y's order and each chunk
     * runs on one thread; aq: each thread's statistics of u and of relu(u) */
    fx_add_relu_run *arr = NULL;
    fx_qstats *aq = NULL;
    if (sr && yshared && fuse_e != FX_EXP_NONE && be->cvt.quant_i64_t && !ep &&
        plan.inner == 1) {
        aq = fx_scratch_alloc(&s, 2 * plan.outer, sizeof(fx_qstats));
        if (aq) arr = fx_add_relu_begin(sr->u, sr->y, y, fuse_e, yq.tmp, sr->bias, P);
        for (int t = 0; arr && t < 2 * plan.outer; t++) fx_qstats_init(&aq[t]);
    }
    yq.defer_copy = arr != NULL;
    /* On the AMX kernel, where each chunk's sums would only be rounded at the guess (and at
     * alt_e) and then dropped (no stage, one thread a chunk), the kernel rounds them in its
     * epilogue instead of storing them (fx_i16_fwd_amx_round: the same mantissas and per-sample
     * statistics, without the int64 sums written and read back); a chunk it declines (a
     * saturating sum) takes the int64 route below. */
    int yq_broken[2] = {0, 0}; /* a chunk left the rounding at fuse_e (at alt_e) unmade */
    /* the same on a level's register-tile kernel with a rounding epilogue (AVX2:
     * fx_i16_fwd_direct_avx2_round; AVX512_VNNI: fx_i16_fwd_direct_round), for the chunks that
     * kernel takes */
    int (*const round_fn)(const fx_conv_geom *, const int16_t *, int64_t, const uint32_t *,
                          uint32_t *, int, int16_t *, fx_qstats *, int, int16_t *, fx_qstats *) =
        iamx      ? (fx_i16_fwd_amx_round_enabled() ? be->conv.i16_fwd_amx_round : NULL)
        : kunpad ? (fx_i16_fwd_direct_round_enabled() ? be->conv.i16_fwd_round : NULL)
                  : NULL;
    /* (not where the sums are kept rounded to odd: that needs them stored, and the stored
     * sums' rounding and the kept ones cost about what the rounding epilogue does alone) */
    const int kround = round_fn && yshared && yq.pix == NULL && fuse_e != FX_EXP_NONE &&
                       fused_max_exact && plan.inner == 1 && !ep && be->cvt.quant_i64_t &&
                       !keep_odd;
    /* bf16 on the AMX route from patch rows: the weights packed in its tiles once for all
     * chunks (each chunk's GEMM would pack the same B again: about 5 % of a bf16 CNN step) */
    uint16_t *bamx = NULL;
    if (plain_bf16 && row_src) {
        const fx_operand wb = conv_op2d(&cc, wo.data, wo.exp, g.O, CKK, CKK, 1);
        /* 32 spare bf16 cover the alignment (failing, the chunks' GEMMs pack B) */
        bamx = conv_align64(fx_scratch_alloc(&s, fx_bf16_amx_b_numel(CKK, g.O) + 32,
                                             sizeof(uint16_t)));
        if (bamx) fx_bf16_amx_pack_b(wo.data, wb.strides[0], wb.strides[1], CKK, g.O, bamx);
    }
    /* the direct bf16 route: its weights once, and a copy of the chunk per thread */
    uint32_t *fwq = NULL, *fscr = NULL, fwkey = 0;
    const int64_t fscr_n = fdirect ? fx_bf16_fwd_direct_scratch(&g, plan.nb) : 0;
    if (fdirect) {
        fwq = conv_align64(conv_alloc(&s, fx_bf16_fwd_direct_weights_numel(&g) + 16,
                                      sizeof(uint32_t), &rc, func));
        fscr = conv_alloc(&s, fscr_n * plan.outer, sizeof(uint32_t), &rc, func);
        if (rc) {
            fx_scratch_free(&s);
            return rc;
        }
        fwkey = fx_bf16_fwd_direct_pack_weights(&g, (const uint16_t *)wo.data, fwq);
    }
    /* the direct fp32 route: its weights (widened) and tap offsets once, and for 16-bit inputs
     * a padded chunk per thread in fp32, widened while it is padded */
    float *f32w = NULL, *f32x = NULL;
    int64_t *f32off = NULL;
    const int64_t f32x_n = f32direct && cc.cf != FMT_FP32 ? fx_conv_padded_numel(&g, plan.nb) : 0;
    const fx_widen_row_fn f32widen = !f32x_n           ? NULL
                                     : cc.cf == FMT_FP16 ? be->cvt.fp16_to_f32
                                                         : be->cvt.bf16_to_f32;
    if (f32direct) {
        f32w = conv_align64(conv_alloc(&s, fx_f32_fwd_direct_weights_numel(&g) + 16,
                                       sizeof(float), &rc, func));
        f32off = conv_alloc(&s, CKK, sizeof(int64_t), &rc, func);
        float *wide = cc.cf != FMT_FP32 ? conv_alloc(&s, g.O * CKK, sizeof(float), &rc, func)
                                        : NULL;
        f32x = f32x_n ? conv_alloc(&s, f32x_n * plan.outer, sizeof(float), &rc, func) : NULL;
        if (rc) {
            fx_scratch_free(&s);
            return rc;
        }
        if (wide) fx_widen_to_f32(be, cc.cf, 0, wo.data, wide, g.O * CKK);
        fx_f32_fwd_direct_pack_weights(&g, wide ? wide : (const float *)wo.data, f32w);
        fx_f32_fwd_direct_offsets(&g, f32off);
    }
    /* the direct integer route: its weights and their segment norms once, a copy of the chunk
     * per thread */
    uint32_t *iwq = NULL, *iscr = NULL;
    const int64_t iscr_n = idirect ? ik.scratch(gd, plan.nb) : 0;
    if (idirect) {
        /* folded, the folded weights follow the packed ones in the same block (a scratch
         * region of its own would push a larger buffer out of the scratch cache) */
        const int64_t iwq_n = ik.weights_numel(gd);
        const int64_t wf_words = ifold ? (g.O * gd->C * g.KH + 1) / 2 : 0;
        iwq = conv_align64(conv_alloc(&s, iwq_n + 16 + wf_words, sizeof(uint32_t), &rc, func));
        iscr = conv_alloc(&s, iscr_n * plan.outer, sizeof(uint32_t), &rc, func);
        if (rc) {
            fx_scratch_free(&s);
            return rc;
        }
        int16_t *wf = ifold ? (int16_t *)(void *)(iwq + iwq_n) : NULL;
        if (wf) fx_conv_fold_weights_i16(&g, gd, (const int16_t *)wo.data, wf);
        ik.pack_weights(gd, wf ? wf : (const int16_t *)wo.data, iwq);
    }
    /* integer compute on the AMX kernel likewise: the weights in its byte tiles once (each
     * chunk's GEMM would split and pack the same B again: about 5 % of the CNN's input
     * gradient, whose B is 1600 x 32) */
    int8_t *bamx16 = NULL;
    if (plain_i16 && row_src) {
        const fx_operand wb = conv_op2d(&cc, wdata, wo.exp, g.O, CKK, CKK, 1);
        bamx16 = conv_align64(fx_scratch_alloc(&s, fx_gemm_i16_amx_b_bytes(CKK, g.O) + 64, 1));
        if (bamx16)
            fx_gemm_i16_amx_pack_b((const int16_t *)wb.data, wb.strides[0], wb.strides[1], CKK,
                                   g.O, bamx16);
    }
    FX_CONV_PARALLEL_FOR
    for (int64_t ch = 0; ch < plan.nchunks; ch++) {
        const int tid = FX_CONV_THREAD_ID();
        const int64_t n0 = ch * plan.nb, nbc = plan.nb < g.N - n0 ? plan.nb : g.N - n0;
        const int64_t Pc = nbc * P;
        char *mycol = col ? col + (size_t)(tid * col_n) * esz : NULL;
        char *myy = ypix ? ypix + (size_t)((nostage || ychunks ? tid * ypix_chunk
                                                               : n0 * P * g.O)) *
                                      ssz
                         : NULL;
        char *myxp = xp ? xp + (size_t)(tid * xpa_n) * esz : NULL;
        /* the chunk's A: panels built from the padded input, rows the GEMM gathers from it,
         * or the patch matrix; the same GEMM call for all */
        conv_prepacked pp = {.b_amx = bamx, .b_amx_i16 = bamx16};
        char *myxq = xq ? xq + (size_t)(tid * xp_n) * esz : NULL;
        const fx_conv_rows rows = {&g, (const int16_t *)(const void *)(myxq ? myxq : myxp), goff,
                                   myxq != NULL};
        const void *adata = NULL;
        const int pad_g = panel_mr || row_src || fpanel_mr || idirect || (f32direct && !f32x);
        if (pad_g && !ifold && !kunpad) fx_conv_pad(&g, xo.data, n0, nbc, myxp, esz);
        if (ifold)
            fx_conv_fold_pad_i16(&g, gd, (const int16_t *)xo.data, n0, nbc,
                                 (int16_t *)(void *)myxp);
        uint64_t kmax = 0;
        /* the direct integer kernel first; what it declines goes on to the GEMM */
        const int16_t *ksrc = kunpad && !ifold
                                  ? (const int16_t *)xo.data + n0 * g.C * g.H * g.W
                                  : (const int16_t *)(const void *)myxp;
        const int two = alt_e != FX_EXP_NONE;
        const int whole =
            kround ? round_fn(
                         &gkernel, ksrc, nbc, iwq, iscr + tid * iscr_n, fuse_e - yq.exp,
                         yq.tmp + n0 * g.O * P, yq.part + n0, two ? alt_e - yq.exp : 0,
                         two ? yq_alt.tmp + n0 * g.O * P : NULL, two ? yq_alt.part + n0 : NULL)
                   : 0;
        const int rounded = whole != 0;
        fx_i16_round_mark_broken(whole, two, yq_broken);
        /* a chunk the kernel computes is rounded below, whose statistics give its largest |sum|
         * where fused_max_exact: the kernel need not find it (the AVX2 kernel then skips an
         * int64 abs and max per four sums in its stores) */
        uint64_t *const want_kmax = fuse_e != FX_EXP_NONE && fused_max_exact ? NULL : &kmax;
        const int idone = rounded || (idirect && ik.run(&gkernel, ksrc, nbc, iwq,
                                                        iscr + tid * iscr_n,
                                                        (int64_t *)(void *)myy, plan.inner,
                                                        want_kmax));
        if (ifold && !idone) {
            /* declined: the GEMM's padded chunk in place of the folded one, its slack zeros */
            fx_conv_pad(&g, xo.data, n0, nbc, myxp, esz);
            memset(myxp + (size_t)fx_conv_padded_numel(&g, nbc) * esz, 0, (size_t)slack * esz);
        } else if (kunpad && !idone && pad_g) {
            fx_conv_pad(&g, xo.data, n0, nbc, myxp, esz);
        }
        int kmax_known = idone;
        if (myxq && !idone)
            fx_conv_nhwc(&g, (const int16_t *)(const void *)myxp, nbc,
                         (int16_t *)(void *)myxq);
        int8_t *myhi = planes ? planes + 2 * plane_n * tid + FX_CONV_TILES_SLACK : NULL;
        const fx_conv_tiles tl = {&g, myhi, myhi ? myhi + plane_n : NULL};
        if (myhi && !idone)
            be->conv.byte_planes_i16((const int16_t *)(const void *)myxq,
                                     fx_conv_padded_numel(&g, nbc), myhi, myhi + plane_n);
        if (idone) {
            status[ch] = FX_OK; /* the direct kernel wrote the chunk's sums and their maximum */
        } else if (panel_mr) {
            int32_t *pan = (int32_t *)(void *)mycol;
            if (!be->conv.panels_i16 ||
                !be->conv.panels_i16(&g, (const int16_t *)myxp, nbc, panel_mr, pan))
                fx_conv_panels_i16(&g, (const int16_t *)myxp, nbc, panel_mr, pan);
            pp.a_panels = pan;
            pp.a_mr = panel_mr;
        } else if (row_src) {
            pp.a_rows = fx_conv_rows_i16;
            pp.a_rows_ctx = &rows;
            pp.a_tiles = myhi ? be->conv.tiles_i16 : NULL;
            pp.a_tiles_ctx = &tl;
        } else if (fpanel_mr) {
            float *pan = (float *)(void *)mycol;
            if (!be->conv.panels_f32 ||
                !be->conv.panels_f32(&g, myxp, (int)cc.cf, nbc, fpanel_mr, pan))
                fx_conv_panels_f32(&g, myxp, (int)cc.cf, nbc, fpanel_mr, pan);
            pp.a_panels = pan;
            pp.a_mr = fpanel_mr;
        } else if (!fdirect && !f32direct) {
            conv_patches(&g, xo.data, esz, n0, nbc, myxp, mycol, 1, plan.inner);
            adata = mycol;
        }
        if (fdirect) {
            be->conv.bf16_fwd(&g, (const uint16_t *)xo.data + n0 * g.C * g.H * g.W, nbc, fwq,
                              fwkey, fscr + tid * fscr_n, (float *)(void *)myy,
                              ybf16 ? ybf16 + n0 * g.O * P : NULL, plan.inner);
            status[ch] = FX_OK;
        } else if (f32direct) {
            const float *xf = (const float *)(const void *)myxp;
            if (f32x) {
                float *wx = f32x + tid * f32x_n;
                fx_conv_pad_widen(&g, (const uint16_t *)xo.data, n0, nbc, wx, f32widen);
                xf = wx;
            }
            be->conv.f32_fwd(&g, xf, nbc, f32w, f32off, (float *)(void *)myy, plan.inner);
            status[ch] = FX_OK;
        } else if (!idone)
            status[ch] = conv_matmul_with(conv_op2d(&cc, adata, xo.exp, Pc, CKK, CKK, 0), &pp,
                                          conv_op2d(&cc, wdata, wo.exp, g.O, CKK, CKK, 1), ic,
                                          myy, plan.inner, ic ? &kmax : NULL, &kmax_known);
        chunk_max[ch] = 0;
        const int fused = status[ch] == FX_OK && fuse_e != FX_EXP_NONE;
        if (fused) {
            /* the write's rounding done early: a profile counts it as rounding (the calling
             * thread's chunks stand for the loop, as in any parallel region) */
            fx_prof_span sp;
            fx_prof_begin(&sp);
            if (!rounded) /* else the kernel rounded the chunk */
                conv_yquant_samples(&yq, (const int64_t *)(const void *)myy, fuse_e, 1, 0, n0,
                                    nbc, plan.inner);
            if (alt_e != FX_EXP_NONE && !rounded)
                conv_yquant_samples(&yq_alt, (const int64_t *)(const void *)myy, alt_e, 1, 0, n0,
                                    nbc, plan.inner);
            if (yq.odd && !rounded) {
                if (!be->cvt.round_odd_i64((const int64_t *)(const void *)myy,
                                           yq.odd + n0 * g.O * P, nbc * g.O * P,
                                           yq.odd_e - yq.exp))
                    __atomic_store_n(&yq.odd_lost, 1, __ATOMIC_RELAXED);
                __atomic_fetch_add(&yq.odd_made, nbc, __ATOMIC_RELAXED);
            }
            if (arr && (!rounded || (whole & FX_I16_ROUND_FIRST)))
                fx_add_relu_units(arr, n0 * g.O * P, nbc * g.O * P, &aq[2 * tid], &aq[2 * tid + 1]);
            fx_prof_end(&sp, FX_PROF_ROUNDING);
        }
        if (fused && fused_max_exact) { /* the rounding pass found each sample's largest |sum| */
            for (int64_t n = n0; n < n0 + nbc; n++) {
                const uint64_t m = (uint64_t)yq.part[n].max_abs_in;
                chunk_max[ch] = m > chunk_max[ch] ? m : chunk_max[ch];
            }
        } else if (status[ch] == FX_OK && ic) {
            /* the GEMM's own maximum when it reported one (every value it wrote is final) */
            chunk_max[ch] = kmax_known ? kmax
                                       : fx_maxabs_i64(fx_backend_active(),
                                                       (const int64_t *)myy, Pc * g.O);
        }
        /* the chunk's 16-bit values: its own place in a whole pixel-major yhalf, or with
         * ychunks this thread's chunk buffer */
        uint16_t *const h = !yhalf ? NULL : ychunks ? yhalf + tid * ypix_chunk : yhalf + n0 * P * g.O;
        if (status[ch] == FX_OK && ep) /* with yhalf, the chunk's conversion too */
            conv_epilogue_chunk(ep, be, y->fmt, (float *)(void *)myy, Pc, g.O, h);
        if (status[ch] == FX_OK && ychunks && !ybf16) {
            if (h && !ep) half_cvt((const float *)(const void *)myy, h, Pc * g.O);
            if (h)
                fx_chunk_scatter_t(h, n0, nbc, g.O, P, fx_tensor_base(y), sizeof(uint16_t));
            else /* an fp32 y */
                fx_chunk_scatter_t(myy, n0, nbc, g.O, P, fx_tensor_base(y), sizeof(float));
        } else if (status[ch] == FX_OK && yhalf && !ep) {
            half_cvt((const float *)(const void *)myy, yhalf + n0 * P * g.O, Pc * g.O);
        }
    }
    rc = conv_chunk_status(status, plan.nchunks, func);
    if (rc == FX_OK) {
        uint64_t imax = 0;
        for (int64_t ch = 0; ic && ch < plan.nchunks; ch++)
            imax = chunk_max[ch] > imax ? chunk_max[ch] : imax;
        yq.fused_e = fuse_e;
        yq.alt_e = alt_e;
        yq.imax = imax;
        yq.broken[0] = yq_broken[0];
        yq.broken[1] = yq_broken[1];
        if (!ychunks) /* else the chunks wrote y */
            rc = conv_write_y(y, &g, &cc, ypix, xo.exp + wo.exp, imax, yshared ? &yq : NULL,
                              yhalf, &s, func);
        /* the write kept the guess, whose rounding tmp holds: y gets it, unless the early u and
         * relu(u) stand on it (fx_conv2d_shared_bias_relu), and then y's values are needed by
         * nobody and stay unwritten */
        if (rc == FX_OK && yq.copy_pending && (!arr || yq.alt_taken)) {
            fx_prof_span sp;
            fx_prof_begin(&sp);
            conv_ycopy(&yq);
            fx_prof_end(&sp, FX_PROF_ROUNDING);
        } else if (rc == FX_OK && yq.copy_pending) {
            fx_qstats qu, qy;
            fx_qstats_init(&qu);
            fx_qstats_init(&qy);
            for (int t = 0; t < plan.outer; t++) {
                fx_qstats_merge(&qu, &aq[2 * t]);
                fx_qstats_merge(&qy, &aq[2 * t + 1]);
            }
            fx_prof_span sp;
            fx_prof_begin(&sp);
            rc = fx_add_relu_finish(arr, &qu, &qy);
            fx_prof_end(&sp, FX_PROF_ROUNDING);
            arr = NULL;
            sr->done = 1;
        }
        if (rc != FX_OK && yq.need_stage) *redo_e = yq.fused_e;
    }
    if (arr) fx_add_relu_cancel(arr);
    fx_scratch_free(&s);
    return rc;
}

/* A strided 1x1 convolution without padding (ResNet's projection shortcuts) reads one input
 * pixel in sh sw. Under integer compute its forward pass, and under bf16 compute (x and w, or x
 * and dy, bf16 on a level with bf16 products) its forward pass and weight gradient, run as
 * those of the stride-1 convolution of those pixels, copied out first: the same products in the
 * same order (a 1x1 kernel's chain runs over the channel pairs alone, in the direct kernels as
 * in the GEMM; the weight gradient's over dy's pixel pairs), so the same sums and bits, and the
 * stride-1 layer takes the level's direct kernels where it has them (with the rounding
 * epilogues where the output's exponent is guessed), where the strided one took patch
 * panels, the GEMM and, for integers, an int64 stage (the direct kernel's copy would hold every
 * input pixel, four times those a stride of 2 reads). Measured on the AVX2 EPYC (one thread,
 * batch 128, DFP16): ResNet-20's 16 -> 32 projection at 32 x 32 5.8 ms forward, its stride-1
 * twin on the copied pixels 3.4 ms; on the Zen 5 in bf16 (one thread, batch 128, without the
 * copy) forward 1.16 -> 0.43 ms and weight gradient 0.83 -> 0.32 ms, 32 -> 64 at 16 x 16 0.49
 * -> 0.22 and 0.59 -> 0.24. Other float compute keeps its route: its sums' order, and so its
 * bits, belong to that route, and so does the AMX route's bf16 (fx_conv_subsample_takes_bf16).
 * test_conv_subsample checks the bits on every backend. */
static int conv_bf16_phases_on = 1; /* conv_backward_input_bf16_s2 */
static int64_t conv_bf16_phased_runs;

void fx_conv_bf16_phases_set_enabled(int on)
{
    __atomic_store_n(&conv_bf16_phases_on, on != 0, __ATOMIC_RELAXED);
}
int64_t fx_conv_bf16_phased(void)
{
    return __atomic_load_n(&conv_bf16_phased_runs, __ATOMIC_RELAXED);
}

static int conv_subsample_on = 1;
static int64_t conv_subsampled_runs; /* test hook: ops run on the copied pixels */

void fx_conv_subsample_set_enabled(int on)
{
    __atomic_store_n(&conv_subsample_on, on != 0, __ATOMIC_RELAXED);
}
int64_t fx_conv_subsampled(void)
{
    return __atomic_load_n(&conv_subsampled_runs, __ATOMIC_RELAXED);
}

/* The AMX route's stride-1 bf16 kernels sum in orders of their own (bf16_conv_amx.c,
 * bf16_wgrad_amx.c), which were not compared with the AMX GEMM's over the strided patches on a
 * CPU with AMX: that route keeps the strided one. */
int fx_conv_subsample_takes_bf16(void)
{
    const fx_backend *be = fx_backend_active();
    return be->conv.bf16_fwd != fx_bf16_fwd_amx && be->conv.bf16_wgrad != fx_bf16_wgrad_amx;
}

/* Whether an op on x and the other operand b (the weights, or dy for a weight gradient, wgrad)
 * with output out takes the copied pixels. An out that shares x's storage keeps the strided
 * route, which never rounds into it in place (a failed op must leave x as it was); the copy
 * would hide the sharing from that check. The integer weight gradient keeps its route: on the
 * Zen 5 (one and two threads, FLEX16_5 and DFP16) the copied pixels took ResNet-20's 16 -> 32
 * projection's weight gradient to 0.73-0.97x its time but the 32 -> 64 one to 0.97-1.12x. */
static int conv_subsample_fits(const tensor_t *out, const tensor_t *x, const tensor_t *b,
                               const fx_conv_geom *g, int wgrad)
{
    if (!__atomic_load_n(&conv_subsample_on, __ATOMIC_RELAXED) || out->st == x->st ||
        g->KH != 1 || g->KW != 1 || g->ph != 0 || g->pw != 0 || (g->sh == 1 && g->sw == 1))
        return 0;
    const conv_compute cc = conv_compute_for(x, b);
    return (cc.ic && !wgrad) || (cc.cf == FMT_BF16 && fx_conv_subsample_takes_bf16());
}

/* The pixels a strided 1x1 kernel reads (conv_subsample_fits), [N, C, OH, OW]: under integer
 * compute mantissas at x's exponent in a DFP16 tensor, under bf16 compute x's bf16 values
 * (a dilation does not move a 1x1 kernel's only tap); *g1 the stride-1 geometry on them.
 * NULL with *rc set on failure. */
static tensor_t *conv_subsampled_input(const tensor_t *x, const tensor_t *b,
                                       const fx_conv_geom *g, fx_conv_geom *g1, int *rc,
                                       const char *func)
{
    const conv_compute cc = conv_compute_for(x, b);
    fx_scratch s = {.n = 0};
    fx_operand xo;
    *rc = conv_operand(x, &cc, &xo, &s, func);
    const int64_t shape[4] = {g->N, g->C, g->OH, g->OW};
    tensor_t *xs = *rc ? NULL : tensor_new(cc.ic ? FMT_DFP16 : FMT_BF16, 4, shape);
    if (!*rc && !xs) *rc = fx_error(FX_ENOMEM, func, "cannot allocate the strided input's pixels");
    if (!*rc) {
        const int16_t *src = xo.data;
        int16_t *dst = fx_tensor_base(xs);
        const int64_t planes = g->N * g->C, H = g->H, W = g->W, OH = g->OH, OW = g->OW;
        const int64_t sh = g->sh, sw = g->sw;
        const int nt = flexpoint_num_threads();
        (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) \
    if (nt > 1 && planes * OH * OW >= (1 << 16))
#endif
        for (int64_t p = 0; p < planes; p++)
            for (int64_t i = 0; i < OH; i++) {
                const int16_t *row = src + (p * H + i * sh) * W;
                int16_t *out = dst + (p * OH + i) * OW;
                for (int64_t j = 0; j < OW; j++) out[j] = row[j * sw];
            }
        if (cc.ic) xs->st->exp = xo.exp; /* the mantissas' own exponent: no rescaling */
        *g1 = *g;
        g1->H = OH;
        g1->W = OW;
        g1->sh = g1->sw = 1;
        g1->dh = g1->dw = 1;
        __atomic_fetch_add(&conv_subsampled_runs, 1, __ATOMIC_RELAXED);
    }
    fx_scratch_free(&s);
    return xs;
}

static int64_t conv_stage_redone;  /* test hook: forward ops (and input gradients by phases) run again */
static int64_t conv_redone_staged; /* test hook: of those runs, the ones with a whole stage */

int64_t fx_conv_stage_redone(void) { return __atomic_load_n(&conv_stage_redone, __ATOMIC_RELAXED); }

int64_t fx_conv_redone_staged(void)
{
    return __atomic_load_n(&conv_redone_staged, __ATOMIC_RELAXED);
}

/* Whether run 2 or 3 of an op whose first run kept no stage keeps a whole one, counted for the
 * tests: a DFP16 write asks for the exact exponent of the sums, which the same sums give again,
 * so its second run needs none; a FLEX16_5 write that recomputes an overflow asks twice (it
 * keeps the prediction first), and a third run, should a DFP16 second run ever miss, keeps one. */
static int conv_redo_staged(int run, fmt_t f)
{
    const int staged = run == 3 || f != FMT_DFP16;
    __atomic_fetch_add(&conv_stage_redone, 1, __ATOMIC_RELAXED);
    if (staged) __atomic_fetch_add(&conv_redone_staged, 1, __ATOMIC_RELAXED);
    return staged;
}

static int conv2d_forward_subsampled(tensor_t *y, const tensor_t *x, const tensor_t *w,
                                     const fx_conv_geom *g, const conv_epilogue *ep,
                                     conv_shared_relu *sr, const char *func);

/* A first run without a stage whose write asked for another exponent runs again guessing it.
 * A DFP16 write asks for the exact exponent of the sums, which the same sums give again, so
 * its second run needs no stage either (a stage of the CNN's first layer is 25.7 MB written
 * out and read back). A FLEX16_5 write that recomputes an overflow asks twice (it keeps the
 * prediction first), so its second run keeps a stage to round from again; so does a third
 * run, should a DFP16 second run ever miss. */
static int conv2d_forward_host(tensor_t *y, const tensor_t *x, const tensor_t *w,
                               const fx_conv_geom *gp, const conv_epilogue *ep,
                               conv_shared_relu *sr, const char *func)
{
    if (conv_subsample_fits(y, x, w, gp, 0))
        return conv2d_forward_subsampled(y, x, w, gp, ep, sr, func);
    int redo_e = FX_EXP_NONE;
    int rc = conv2d_forward_run(y, x, w, gp, ep, sr, FX_EXP_NONE, 0, &redo_e, func);
    if (redo_e == FX_EXP_NONE) return rc;
    /* The runs again, whole (kernels, roundings, the write), are the price of an exponent the
     * early rounding did not guess: a profiled step (profile_counters.h) counts them as
     * exponent bookkeeping, not in the layer's kernel time, so that a DFP16 output whose
     * exponent moves shows there. */
    fx_prof_span sp;
    fx_prof_begin(&sp);
    for (int run = 2; redo_e != FX_EXP_NONE && run <= 3; run++) {
        const int staged = conv_redo_staged(run, y->fmt);
        const int guess = redo_e;
        redo_e = FX_EXP_NONE;
        rc = conv2d_forward_run(y, x, w, gp, ep, NULL, guess, staged, &redo_e, func);
    }
    fx_prof_end(&sp, FX_PROF_AUTOFLEX);
    return rc;
}

/* conv_subsample_fits: the stride-1 convolution of the pixels a strided 1x1 kernel reads into
 * y (conv2d_forward_host: y shares no storage with x). */
static int conv2d_forward_subsampled(tensor_t *y, const tensor_t *x, const tensor_t *w,
                                     const fx_conv_geom *g, const conv_epilogue *ep,
                                     conv_shared_relu *sr, const char *func)
{
    fx_conv_geom g1;
    int rc;
    tensor_t *xs = conv_subsampled_input(x, w, g, &g1, &rc, func);
    if (!rc) rc = conv2d_forward_host(y, xs, w, &g1, ep, sr, func);
    tensor_free(xs);
    return rc;
}

int fx_nn_conv2d_host(const fx_op_args *a)
{
    return conv2d_forward_host(a->u.conv.out, a->u.conv.a, a->u.conv.b, a->u.conv.g, NULL, NULL,
                               a->func);
}

int tensor_conv2d(tensor_t *y, const tensor_t *x, const tensor_t *w, int sh, int sw, int ph,
                  int pw, int dh, int dw)
{
    fx_conv_geom g;
    int rc = conv2d_forward_check(y, x, w, sh, sw, ph, pw, dh, dw, &g, __func__);
    if (rc) return rc;
    fx_op_args a = conv_args(FX_OP_CONV2D, __func__, &conv_fwd_names, x, w, y, &g, y, x, w);
    return fx_op_run(&a);
}

int fx_conv2d_shared_bias_relu(tensor_t *t, tensor_t *u, tensor_t *y, const tensor_t *x,
                               const tensor_t *w, const tensor_t *bias, int sh, int sw, int ph,
                               int pw, int *done)
{
    *done = 0;
    fx_conv_geom g;
    int rc = conv2d_forward_check(t, x, w, sh, sw, ph, pw, 1, 1, &g, "tensor_conv2d");
    if (rc) return rc;
    fx_op_args a = conv_args(FX_OP_CONV2D, "tensor_conv2d", &conv_fwd_names, x, w, t, &g, t, x, w);
    int device = -1;
    rc = fx_op_placement(&a, &device);
    if (rc) return rc;
    const fx_backend *be = fx_backend_active();
    /* the host convolution of the shared-exponent formats, with u and y on the host too */
    if (device >= 0 || !u || !y || !bias || u->st->on_device || y->st->on_device ||
        bias->st->on_device || be->run[FX_OP_CONV2D] != fx_nn_conv2d_host ||
        !be->supports_op(be, FX_OP_CONV2D, x->fmt))
        return fx_op_run(&a);
    conv_shared_relu sr = {u, y, bias, 0};
    rc = conv2d_forward_host(t, x, w, &g, NULL, &sr, "tensor_conv2d");
    *done = sr.done;
    return rc;
}

/* The unfused sequence, the op's fallback on a backend without the fused op and the host's
 * choice where the fused path does not apply (views that do not cover their storage, integer
 * compute into a float y, a bias in a shared-exponent format): the same three writes, each a
 * table op of its own, through a temporary of y's format in y's place. */
int fx_nn_conv2d_bias_relu_unfused(const fx_op_args *a)
{
    tensor_t *y = a->u.conv.out;
    const tensor_t *x = a->u.conv.a, *w = a->u.conv.b, *bias = a->u.conv.bias;
    const fx_conv_geom *g = a->u.conv.g; /* validated: its strides, paddings, dilations */
    const int relu = a->u.conv.relu, sh = (int)g->sh, sw = (int)g->sw, ph = (int)g->ph,
              pw = (int)g->pw, dh = (int)g->dh, dw = (int)g->dw;
    if (!bias && !relu) return tensor_conv2d(y, x, w, sh, sw, ph, pw, dh, dw);
    tensor_t *t = fx_tensor_create(y->fmt, y->ndim, y->shape, tensor_device(y), a->func);
    if (!t) return flexpoint_last_status() ? flexpoint_last_status() : FX_ENOMEM;
    int rc = tensor_conv2d(t, x, w, sh, sw, ph, pw, dh, dw);
    if (!rc && bias) rc = tensor_add(relu ? t : y, t, bias);
    if (!rc && relu) rc = tensor_relu(y, t);
    tensor_free(t);
    return rc;
}

/* Host: the convolution with the bias and ReLU applied to its fp32 sums before the one
 * rounding into y, where float compute writes a y that covers its storage; else unfused. */
int fx_nn_conv2d_bias_relu_host(const fx_op_args *a)
{
    tensor_t *y = a->u.conv.out;
    const tensor_t *x = a->u.conv.a, *w = a->u.conv.b, *bias = a->u.conv.bias;
    const conv_compute cc = conv_compute_for(x, w);
    const int fused = !cc.ic && fx_tensor_covers_storage(y) &&
                      (!bias || !fmt_is_shared_exponent(bias->fmt));
    if (!fused) return fx_nn_conv2d_bias_relu_unfused(a);
    float *b32 = NULL;
    if (bias) {
        b32 = malloc((size_t)bias->shape[0] * sizeof *b32);
        if (!b32)
            return fx_error(FX_ENOMEM, a->func, "cannot allocate %lld bias values",
                            (long long)bias->shape[0]);
        int rc = tensor_to_f32(bias, b32); /* exact for the float formats */
        if (rc) {
            free(b32);
            return rc;
        }
    }
    const conv_epilogue ep = {b32, a->u.conv.relu};
    int rc = conv2d_forward_host(y, x, w, a->u.conv.g, &ep, NULL, a->func);
    free(b32);
    return rc;
}

int tensor_conv2d_bias_relu(tensor_t *y, const tensor_t *x, const tensor_t *w,
                            const tensor_t *bias, int relu, int sh, int sw, int ph, int pw,
                            int dh, int dw)
{
    if (!y || !x || !w) return FX_FAIL(FX_EINVAL, "%s is NULL", !y ? "y" : !x ? "x" : "w");
    if (relu != 0 && relu != 1) return FX_FAIL(FX_EINVAL, "relu=%d must be 0 or 1", relu);
    if (fmt_is_shared_exponent(y->fmt))
        return FX_FAIL(FX_EUNSUPPORTED, "y is %s: the convolution, the bias sum and the ReLU of "
                       "a shared-exponent result are three writes, each with its own exponent "
                       "(Autoflex) state; call tensor_conv2d, tensor_add and tensor_relu",
                       fmt_name(y->fmt));
    if (bias) {
        const int64_t O = w->ndim == 4 ? w->shape[0] : -1;
        if (bias->ndim != 3 || bias->shape[0] != O || bias->shape[1] != 1 || bias->shape[2] != 1)
            return FX_FAIL(FX_ESHAPE, "bias must have shape [O, 1, 1] = [%lld, 1, 1] (got %d-D "
                           "with first dimension %lld)", (long long)O, bias->ndim,
                           (long long)(bias->ndim ? bias->shape[0] : 0));
    }
    fx_conv_geom g;
    int rc = conv2d_forward_check(y, x, w, sh, sw, ph, pw, dh, dw, &g, __func__);
    if (rc) return rc;
    fx_op_args a =
        conv_args(FX_OP_CONV2D_BIAS_RELU, __func__, &conv_fwd_names, x, w, y, &g, y, x, w);
    a.t[3] = bias;
    a.tn[3] = "bias";
    a.nt = 4;
    a.u.conv.bias = bias;
    a.u.conv.relu = relu;
    return fx_op_run(&a);
}

/* ---- gradient with respect to the input ------------------------------------------------------ */

/* With stride 1, the input gradient is itself a convolution: of dy, with the kernel flipped in
 * both spatial dimensions and its channel axes swapped (w'[c][o][kh][kw] = w[o][c][KH-1-kh]
 * [KW-1-kw]), padding (K-1)*d - p and the same dilation; each dx element is then the sum of the
 * same products. The integer path takes this route: its sums are exact, so the result is the
 * same bits, and it skips the col2im of an int64 patch matrix (C*KH*KW values per pixel, 8 bytes
 * each, far beyond the cache) in favour of the forward path's int16 im2row. The float path keeps
 * col2im, whose summation order its stated bound and earlier results refer to. */
/* The forward route's GEMM has C output columns: with too few, most of each register tile is
 * wasted (measured: C = 1, the CNN's first layer, 14x slower than col2im on AVX-512), so narrow
 * inputs keep col2im. The level says from how many channels the route pays
 * (gemm.i16_bwd_fwd_min_c), else from one register tile of columns (gemm.i16_tile_nr: 16 on
 * AVX2). ResNet-20's 16-channel 3x3 input gradient (bench_conv_peer, 1 thread) took 32.8 ms
 * against 53.0 through col2im on the AVX2 EPYC at one tile of 16, and on a Xeon with AVX-512
 * 12.0 against 30.2 at half a tile of 32. */
static int64_t conv_bwd_as_fwd_min_c(void)
{
    const fx_backend *b = fx_backend_active();
    if (b && b->gemm.i16_bwd_fwd_min_c > 0) return b->gemm.i16_bwd_fwd_min_c;
    return b && b->gemm.i16_tile_nr > 0 ? b->gemm.i16_tile_nr : 32;
}

static int conv_backward_input_as_forward(tensor_t *dx, const tensor_t *dy, const tensor_t *w,
                                          const fx_conv_geom *g, fmt_t wfmt, const char *func)
{
    /* the weights as int16 mantissas (float w: exact exponent), or as bf16 values (wfmt =
     * FMT_BF16: both operands bf16, moved bit for bit) */
    const conv_compute cc = wfmt == FMT_BF16
                                ? (conv_compute){0, FMT_BF16, sizeof(uint16_t), sizeof(float)}
                                : (conv_compute){1, FMT_DFP16, sizeof(int16_t), sizeof(int64_t)};
    fx_scratch s = {.n = 0};
    fx_operand wo;
    int rc = conv_operand(w, &cc, &wo, &s, func);
    const int64_t shape[4] = {g->C, g->O, g->KH, g->KW};
    tensor_t *wt = rc ? NULL : tensor_new(wfmt, 4, shape);
    if (!rc && !wt) rc = fx_error(FX_ENOMEM, func, "cannot allocate the flipped kernel");
    if (rc) {
        fx_scratch_free(&s);
        return rc;
    }
    const int16_t *src = wo.data;
    int16_t *dst = fx_tensor_base(wt);
    const int64_t C = g->C, O = g->O, KH = g->KH, KW = g->KW;
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t kh = 0; kh < KH; kh++)
                for (int64_t kw = 0; kw < KW; kw++)
                    dst[((c * O + o) * KH + kh) * KW + kw] =
                        src[((o * C + c) * KH + (KH - 1 - kh)) * KW + (KW - 1 - kw)];
    if (wfmt != FMT_BF16) wt->st->exp = wo.exp; /* the mantissas' own exponent: no rescaling */
    rc = tensor_conv2d(dx, dy, wt, 1, 1, (int)((KH - 1) * g->dh - g->ph),
                       (int)((KW - 1) * g->dw - g->pw), (int)g->dh, (int)g->dw);
    tensor_free(wt);
    fx_scratch_free(&s);
    return rc;
}

/* The bf16 input gradient at stride 2 by phases on the dpbf16 route (fx_bf16_dgrad_s2_direct,
 * src/bf16/bf16_gemm.h): each dx value one chain over its phase's taps and dy's channel pairs,
 * rounded once, where the col2im route adds the taps' fp32 products of the pair GEMM; its own
 * order of the sums, so its own bits, as every bf16 route has (docs/formats.md). Chunks of
 * images on the threads, dx written in place where it covers its storage and shares none with
 * dy or w (else through a buffer, written whole at the end). Why: ResNet-20's stride-2 3x3
 * input gradients on the pair GEMM and col2im (docs/performance.md). Returns 1 where it does
 * not fit. */
static int conv_backward_input_bf16_s2(tensor_t *dx, const tensor_t *dy, const tensor_t *w,
                                       const fx_conv_geom *g, const char *func)
{
    const fx_backend *be = fx_backend_active();
    if (!be->conv.bf16_dgrad_s2 || !__atomic_load_n(&conv_bf16_phases_on, __ATOMIC_RELAXED) ||
        dx->fmt != FMT_BF16 || !fx_bf16_fwd_direct_enabled() || !be->conv.bf16_dgrad_s2_fits(g))
        return 1;
    const conv_compute cc = {0, FMT_BF16, sizeof(uint16_t), sizeof(float)};
    const int64_t N = g->N, chw = g->C * g->H * g->W, ohw = g->O * g->OH * g->OW;
    const conv_plan plan = conv_plan_sized(g, 0, chw + g->O * (g->OH + 2) * (g->OW + 2), N);
    const int64_t scr_n = fx_bf16_dgrad_s2_scratch(g, plan.nb);
    fx_scratch s = {.n = 0};
    fx_operand dyo, wo;
    int rc = conv_operand(dy, &cc, &dyo, &s, func);
    if (!rc) rc = conv_operand(w, &cc, &wo, &s, func);
    uint32_t *wq = conv_align64(
        conv_alloc(&s, fx_bf16_dgrad_s2_weights_numel(g) + 16, sizeof(uint32_t), &rc, func));
    uint32_t *scr = conv_alloc(&s, scr_n * plan.outer, sizeof(uint32_t), &rc, func);
    const int in_place = fx_tensor_covers_storage(dx) && dx->st != dy->st && dx->st != w->st;
    uint16_t *out = in_place ? fx_tensor_base(dx)
                             : conv_alloc(&s, N * chw, sizeof(uint16_t), &rc, func);
    if (rc) {
        fx_scratch_free(&s);
        return rc;
    }
    const uint32_t wkey = fx_bf16_dgrad_s2_pack_weights(g, wo.data, wq);
    const uint16_t *dyd = dyo.data;
    FX_CONV_PARALLEL_FOR
    for (int64_t ch = 0; ch < plan.nchunks; ch++) {
        const int tid = FX_CONV_THREAD_ID();
        const int64_t n0 = ch * plan.nb, nbc = plan.nb < N - n0 ? plan.nb : N - n0;
        be->conv.bf16_dgrad_s2(g, dyd + n0 * ohw, nbc, wq, wkey, scr + tid * scr_n,
                               out + n0 * chw);
    }
    if (!in_place) rc = tensor_set_raw(dx, out);
    if (!rc) __atomic_fetch_add(&conv_bf16_phased_runs, 1, __ATOMIC_RELAXED);
    fx_scratch_free(&s);
    return rc;
}

/* The strided integer input gradient by phases. Where dx is a whole host shared-exponent
 * tensor whose exponent can be guessed (fx_write_shared_guess_exp), each chunk of its sums is
 * rounded at the guess while in cache, into an int16 buffer with its statistics (whose
 * largest |sum| is exact below 2^53, as every sum of O KH KW < 2^23 products of int16 values
 * is), as the forward pass does (conv_yquant): the write then finds its rounding done and
 * copies it, or rounds again from the whole int64 stage. Where the guesses held lately
 * (fx_write_shared_guess_steady), no whole stage is kept: a write that asks for another
 * exponent fails before it commits anything, and the op runs again guessing that exponent. */
typedef struct conv_dxquant_ctx {
    const fx_backend *be;
    const int64_t *stage; /* dx's int64 sums at exp, or NULL (none kept) */
    int exp;
    int64_t n, chw, nparts;
    int16_t *tmp;         /* the rounding at fused_e, in dx's order */
    int16_t *dst;         /* dx's elements */
    fx_qstats *part;      /* per chunk, in chunk order */
    int fused_e;
    int need_stage, copy_pending;
    int alt_e;            /* tmp2 and part2: the rounding at a second exponent, as the forward
                           * pass's (conv_yquant_ctx), else FX_EXP_NONE */
    int16_t *tmp2;
    fx_qstats *part2;
    int broken[2];        /* a chunk's rounding at fused_e (alt_e) left unmade by the AMX
                           * epilogue (fx_dgrad_round.broken): not to be kept */
} conv_dxquant_ctx;

static uint64_t conv_dx_chunk(void *vctx, const int64_t *sums, int64_t n0, int64_t nbc,
                              int64_t ch)
{
    conv_dxquant_ctx *c = vctx;
    fx_qstats *q = &c->part[ch];
    /* the write's rounding done early: a profile counts it as rounding */
    fx_prof_span sp;
    fx_prof_begin(&sp);
    c->be->cvt.quant_i64(sums, c->tmp + n0 * c->chw, nbc * c->chw, c->fused_e - c->exp, q);
    if (c->alt_e != FX_EXP_NONE)
        c->be->cvt.quant_i64(sums, c->tmp2 + n0 * c->chw, nbc * c->chw, c->alt_e - c->exp,
                             &c->part2[ch]);
    fx_prof_end(&sp, FX_PROF_ROUNDING);
    return (uint64_t)q->max_abs_in;
}

/* tmp, the rounding at fused_e, into dx (nothing where the rounding went into dx itself) */
static void conv_dxcopy(const conv_dxquant_ctx *c)
{
    if (c->tmp != c->dst) fx_par_memcpy(c->dst, c->tmp, (size_t)c->n * sizeof(int16_t));
}

static int conv_dxquant(void *vctx, int e, const fx_rounding *r, int keep, fx_qstats *q)
{
    (void)r; /* int64 stages round to nearest even, whatever the tensor's mode */
    conv_dxquant_ctx *c = vctx;
    const int broken = conv_picks_broken(e, c->fused_e, c->alt_e, c->broken);
    if (!broken)
        conv_take_second(e, &c->tmp, &c->tmp2, &c->part, &c->part2, &c->fused_e, &c->alt_e,
                         c->broken);
    if (e == c->fused_e && !broken) {
        if (keep) {
            __atomic_fetch_add(&conv_early_reused, 1, __ATOMIC_RELAXED);
            if (c->stage)
                conv_dxcopy(c);
            else
                c->copy_pending = 1; /* once the write has kept e */
        }
        fx_qstats_init(q);
        for (int64_t i = 0; i < c->nparts; i++) fx_qstats_merge(q, &c->part[i]);
        return FX_OK;
    }
    if (!c->stage) { /* the op runs again (conv_backward_input_phases) */
        c->need_stage = 1;
        if (!c->copy_pending) c->fused_e = e;
        return FX_ESTATE;
    }
    c->fused_e = FX_EXP_NONE;
    c->copy_pending = 0;
    fx_par_quant_i64(c->be, c->stage, keep ? c->dst : NULL, c->n, e - c->exp, q);
    return FX_OK;
}

/* One run: FX_OK or a status when done, 1 when the kernel declined the data (nothing written
 * into dx). guess: the exponent to round at (FX_EXP_NONE: dx's own guess); staged: keep the
 * whole stage; *redo_e: set where the write asked, without a stage, for another exponent. */
static int conv_backward_input_phases_run(tensor_t *dx, const tensor_t *dy, const tensor_t *w,
                                          const fx_conv_geom *g, const conv_compute *cc,
                                          int guess, int staged, int *redo_e, const char *func)
{
    const fx_backend *be = fx_backend_active();
    const int shared = conv_y_direct_shared(dx, cc);
    int fuse_e = FX_EXP_NONE;
    if (shared && fx_write_shared_guess_exp(dx, &fuse_e) == 0) fuse_e = FX_EXP_NONE;
    if (shared && guess != FX_EXP_NONE) fuse_e = guess;
    if (g->O * g->KH * g->KW >= ((int64_t)1 << 23)) fuse_e = FX_EXP_NONE;
    const int fused = fuse_e != FX_EXP_NONE;
    /* dy of 64 channels or more takes the phases for the epilogue route
     * (fx_conv_dgrad_phases_fit); a write with no exponent to guess (dx's first, or not a
     * shared-exponent format) goes to col2im, the faster on int64 sums, before any conversion
     * or buffer. A write that has one but cannot take the route (a stage kept after guesses
     * that missed, a run again) keeps the int64 phases, as rare as those are: in 50 ResNet-20
     * steps on the Zen 5, FLEX16_5 rounded all 49 of its 32 -> 64 input gradients in the
     * epilogue, DFP16 52 of 53. */
    if (!fused && fx_conv_dgrad_phases_needs_rounding(g, be)) return 1;
    fx_scratch s = {.n = 0};
    fx_operand dyo, wo;
    int rc = conv_operand(dy, cc, &dyo, &s, func);
    if (!rc) rc = conv_operand(w, cc, &wo, &s, func);
    const int64_t n = g->N * g->C * g->H * g->W;
    const int nostage_ok = fused && !staged && fx_write_shared_local(dx);
    /* a DFP16 dx whose exponent moved lately: a second rounding instead of the stage, as in
     * the forward pass (conv2d_forward_run) */
    int alt_e, keep_odd; /* (the phases keep no sums rounded to odd) */
    const int nostage = conv_skip_stage(dx, nostage_ok, guess == FX_EXP_NONE,
                                        g->O * g->KH * g->KW, 0, &alt_e, &keep_odd);
    int64_t *dxstage = nostage ? NULL : conv_alloc(&s, n, sizeof(int64_t), &rc, func);
    conv_dxquant_ctx q = {be, dxstage, rc ? 0 : dyo.exp + wo.exp, n, g->C * g->H * g->W, g->N,
                          NULL, NULL, NULL, fuse_e, 0, 0, alt_e, NULL, NULL, {0, 0}};
    if (fused) {
        /* a disposable dx that is no input takes the early rounding itself (as the forward
         * pass's y): no copy after the write */
        const int dx_in_place = dx->st->disposable && dx->st != dy->st && dx->st != w->st;
        q.dst = (int16_t *)fx_tensor_base(dx);
        q.tmp = dx_in_place ? q.dst : conv_alloc(&s, n, sizeof(int16_t), &rc, func);
        if (dx_in_place) __atomic_fetch_add(&conv_in_place_made, 1, __ATOMIC_RELAXED);
        q.part = conv_alloc(&s, g->N, sizeof(fx_qstats), &rc, func);
        for (int64_t i = 0; !rc && i < g->N; i++) fx_qstats_init(&q.part[i]);
    }
    if (alt_e != FX_EXP_NONE) {
        q.tmp2 = conv_alloc(&s, n, sizeof(int16_t), &rc, func);
        q.part2 = conv_alloc(&s, g->N, sizeof(fx_qstats), &rc, func);
        for (int64_t i = 0; !rc && i < g->N; i++) fx_qstats_init(&q.part2[i]);
    }
    if (!rc) {
        uint64_t imax = 0;
        /* what conv_dx_chunk does, for an epilogue route (AMX's, or the AVX-512 register
         * tiles' at stride 2) to do itself (shifts off the fast route it declines) */
        const int two = alt_e != FX_EXP_NONE;
        const fx_dgrad_round round = {fuse_e - q.exp, two ? alt_e - q.exp : 0, q.tmp,
                                      two ? q.tmp2 : NULL, q.part, two ? q.part2 : NULL,
                                      q.broken};
        const fx_dgrad_sink sink = {conv_dx_chunk, &q, !nostage, fused ? &round : NULL};
        const int r = fx_conv_dgrad_phases_i16(g, be, (const int16_t *)dyo.data,
                                               (const int16_t *)wo.data, dxstage, &imax,
                                               fused ? &sink : NULL, func);
        if (r < 0) {
            rc = r;
        } else if (r == 0) {
            rc = 1;
        } else if (fused) {
            fx_shared_src src;
            memset(&src, 0, sizeof src);
            src.kind = FX_STAGE_I64;
            src.exp = q.exp;
            src.imax = imax;
            src.true_max = ldexp((double)imax, q.exp);
            src.ctx = &q;
            src.quantize = conv_dxquant;
            rc = fx_write_shared_with(dx, &src, func);
            if (rc == FX_OK && q.copy_pending) {
                fx_prof_span sp;
                fx_prof_begin(&sp);
                conv_dxcopy(&q);
                fx_prof_end(&sp, FX_PROF_ROUNDING);
            }
            if (rc != FX_OK && q.need_stage) *redo_e = q.fused_e;
        } else {
            rc = fx_write_i64_max(dx, dxstage, q.exp, imax, func);
        }
    }
    fx_scratch_free(&s);
    return rc;
}

/* As conv2d_forward_host: a run without a stage whose write asked for another exponent runs
 * again guessing it (conv_redo_staged). */
static int conv_backward_input_phases(tensor_t *dx, const tensor_t *dy, const tensor_t *w,
                                      const fx_conv_geom *g, const conv_compute *cc,
                                      const char *func)
{
    int redo_e = FX_EXP_NONE;
    int rc = conv_backward_input_phases_run(dx, dy, w, g, cc, FX_EXP_NONE, 0, &redo_e, func);
    if (redo_e == FX_EXP_NONE) return rc;
    fx_prof_span sp; /* profiled as conv2d_forward_host's runs again */
    fx_prof_begin(&sp);
    for (int run = 2; redo_e != FX_EXP_NONE && run <= 3; run++) {
        const int staged = conv_redo_staged(run, dx->fmt);
        const int guess = redo_e;
        redo_e = FX_EXP_NONE;
        rc = conv_backward_input_phases_run(dx, dy, w, g, cc, guess, staged, &redo_e, func);
    }
    fx_prof_end(&sp, FX_PROF_AUTOFLEX);
    return rc;
}

int tensor_conv2d_backward_input(tensor_t *dx, const tensor_t *dy, const tensor_t *w, int sh,
                                 int sw, int ph, int pw, int dh, int dw)
{
    static const conv_names nm = {"dx", "w", "dy"};
    fx_conv_geom g;
    int rc = conv_geometry(__func__, &nm, dx, w, dy, sh, sw, ph, pw, dh, dw, &g);
    if (!rc) rc = conv_int_limit(__func__, conv_compute_for(dy, w).ic, g.O * g.KH * g.KW,
                                 "each input gradient");
    if (rc) return rc;
    fx_op_args a =
        conv_args(FX_OP_CONV2D_BACKWARD_INPUT, __func__, &nm, dx, w, dy, &g, dx, dy, w);
    return fx_op_run(&a);
}

/* The float input gradient on the level's direct kernel (fx_f32_dgrad_direct,
 * src/fp32/conv_f32_direct.h): the GEMM's chains over o and col2im's additions over the taps in
 * their order, so the bits of the route below, without its patch matrix (C KH KW values per
 * pixel, written by the GEMM and read back by col2im) and the col2im and unpadding passes.
 * fp32 and fp16 compute, and bf16 where its GEMM is the widened fp32 one, on the shapes where
 * the level measured it faster (fx_backend.conv.f32_dgrad_min_c and its siblings); weights
 * with an Inf or NaN keep the route below (a tap that reads dy's padding would multiply them
 * by zero). ResNet-20's input gradients on the Xeon reporting model 167: docs/performance.md.
 * Returns 1 where it does not apply. */
/* Whether an input gradient may write dx's storage as it goes: a whole host tensor, not
 * distributed, and none of the op's inputs */
static int conv_dx_own(const tensor_t *dx, const tensor_t *dy, const tensor_t *w)
{
    return fx_tensor_covers_storage(dx) && !dx->st->on_device && !dx->st->dist &&
           dx->st != dy->st && dx->st != w->st;
}

static int conv_backward_input_f32_direct(tensor_t *dx, const tensor_t *dy, const tensor_t *w,
                                          const fx_conv_geom *g, const conv_compute *cc,
                                          const char *func)
{
    const fx_backend *be = fx_backend_active();
    /* bf16 on the AMX route too where its tile kernels do not take the input gradient (at a
     * stride: there its GEMM had a depth of O and col2im added fp32 products, 2.2 times the
     * integer formats' time on ResNet-20's 16 -> 32 opener); the widened values' chains are
     * then the widening route's bits (docs/formats.md) */
    const int bf16_amx_strided =
        cc->cf == FMT_BF16 && be->gemm.bf16_plain_min_k > 0 && (g->sh > 1 || g->sw > 1);
    const int fmt_ok = cc->cf == FMT_FP32 || cc->cf == FMT_FP16 ||
                       (cc->cf == FMT_BF16 && bf16_gemm_widens(be)) || bf16_amx_strided;
    if (cc->ic || !fmt_ok || !be->conv.f32_dgrad || !fx_f32_dgrad_direct_enabled() ||
        g->C < be->conv.f32_dgrad_min_c ||
        (be->conv.f32_dgrad_max_o && g->O > be->conv.f32_dgrad_max_o) ||
        g->KH * g->KW < be->conv.f32_dgrad_min_taps || !fx_f32_dgrad_direct_fits(g))
        return 1;
    fx_conv_geom gd;
    fx_f32_dgrad_direct_pad_geom(g, &gd);
    const int64_t KK = g->KH * g->KW, HW = g->H * g->W, CHW = g->C * HW;
    const int64_t dyp_n = fx_conv_padded_numel(&gd, 1);
    const conv_plan plan = conv_plan_sized(g, 0, dyp_n + CHW, g->N);
    fx_scratch s = {.n = 0};
    fx_operand dyo, wo;
    int rc = conv_operand(dy, cc, &dyo, &s, func);
    if (!rc) rc = conv_operand(w, cc, &wo, &s, func);
    float *wide = cc->cf != FMT_FP32
                      ? conv_alloc(&s, g->O * g->C * KK, sizeof(float), &rc, func)
                      : NULL;
    float *wq = conv_align64(
        conv_alloc(&s, fx_f32_dgrad_direct_weights_numel(g) + 16, sizeof(float), &rc, func));
    const int64_t stride_dyp = dyp_n * plan.nb + FX_CONV_PAD_SLACK; /* a thread's padded dy */
    float *dyp = conv_alloc(&s, stride_dyp * plan.outer, sizeof(float), &rc, func);
    float *ypix = conv_alloc(&s, CHW * plan.nb * plan.outer, sizeof(float), &rc, func);
    /* A whole fp32, fp16 or bf16 dx of its own (not dy's or w's storage) gets each chunk from
     * the kernel's buffer, converted there where dx is 16-bit, instead of a stage of the batch
     * that the write then copied (fp32: 3.3 % of a one-thread fp32 ResNet-20 step on the
     * model 167) or converted. The same conversion of the same values, so the same bits; the
     * kernels cannot fail, and every check that can send the op elsewhere comes before the
     * first chunk, so dx is written only by an op that succeeds. */
    const int dx_half = dx->fmt == FMT_FP16 || dx->fmt == FMT_BF16;
    const int dx_direct = (dx->fmt == FMT_FP32 || dx_half) && conv_dx_own(dx, dy, w);
    float *stage = dx_direct ? NULL : conv_alloc(&s, g->N * CHW, sizeof(float), &rc, func);
    uint16_t *hpix = dx_direct && dx_half
                         ? conv_alloc(&s, CHW * plan.nb * plan.outer, sizeof(uint16_t), &rc, func)
                         : NULL;
    if (rc) {
        fx_scratch_free(&s);
        return rc;
    }
    if (wide) fx_widen_to_f32(be, cc->cf, 0, wo.data, wide, g->O * g->C * KK);
    const float *wf = wide ? wide : (const float *)wo.data;
    for (int64_t i = 0; i < g->O * g->C * KK; i++)
        if (!isfinite(wf[i])) {
            fx_scratch_free(&s);
            return 1;
        }
    fx_f32_dgrad_direct_pack_weights(g, wf, wq);
    const fx_widen_row_fn widen = cc->cf == FMT_FP32   ? NULL
                                  : cc->cf == FMT_FP16 ? be->cvt.fp16_to_f32
                                                       : be->cvt.bf16_to_f32;
    FX_CONV_PARALLEL_FOR
    for (int64_t ch = 0; ch < plan.nchunks; ch++) {
        const int tid = FX_CONV_THREAD_ID();
        const int64_t n0 = ch * plan.nb, nbc = plan.nb < g->N - n0 ? plan.nb : g->N - n0;
        float *mydyp = dyp + tid * stride_dyp, *myy = ypix + tid * CHW * plan.nb;
        if (widen)
            fx_conv_pad_widen(&gd, (const uint16_t *)dyo.data, n0, nbc, mydyp, widen);
        else
            fx_conv_pad(&gd, dyo.data, n0, nbc, mydyp, sizeof(float));
        be->conv.f32_dgrad(g, mydyp, nbc, wq, myy, plan.inner);
        if (hpix) {
            uint16_t *myh = hpix + tid * CHW * plan.nb;
            conv_half_cvt(dx->fmt)(myy, myh, nbc * CHW);
            fx_chunk_scatter_t(myh, n0, nbc, g->C, HW, fx_tensor_base(dx), sizeof(uint16_t));
        } else {
            fx_chunk_scatter_t(myy, n0, nbc, g->C, HW, dx_direct ? fx_tensor_base(dx) : stage,
                               sizeof(float));
        }
    }
    rc = dx_direct ? FX_OK : conv_write(dx, stage, 0, dyo.exp + wo.exp, func);
    fx_scratch_free(&s);
    return rc;
}

int fx_nn_conv2d_backward_input_host(const fx_op_args *a)
{
    tensor_t *dx = a->u.conv.out;
    const tensor_t *dy = a->u.conv.a, *w = a->u.conv.b;
    const fx_conv_geom g = *a->u.conv.g;
    const char *func = a->func;
    const conv_compute cc = conv_compute_for(dy, w);
    const int ic = cc.ic;
    int rc = FX_OK;
    const int fwd_geom = g.sh == 1 && g.sw == 1 && (g.KH - 1) * g.dh >= g.ph &&
                         (g.KW - 1) * g.dw >= g.pw;
    if (ic && g.C >= conv_bwd_as_fwd_min_c() && fwd_geom)
        return conv_backward_input_as_forward(dx, dy, w, &g, FMT_DFP16, func);
    /* integer compute with stride: one stride-1 convolution per phase on the direct kernel
     * (conv_dgrad_phases.h: the same exact sums); data it declines takes col2im below */
    if (ic && fx_conv_dgrad_phases_fit(&g, fx_backend_active())) {
        rc = conv_backward_input_phases(dx, dy, w, &g, &cc, func);
        if (rc != 1) return rc;
        rc = FX_OK;
    }
    /* bf16 at stride 2 by phases on the direct forward tiles (no patch matrix, no col2im) */
    if (cc.cf == FMT_BF16) {
        rc = conv_backward_input_bf16_s2(dx, dy, w, &g, func);
        if (rc != 1) return rc;
        rc = FX_OK;
    }
    /* bf16 on the pair route as a forward convolution on its direct kernel (no
     * patch matrix, no col2im: the CNN's conv2, one thread on the Zen 4, about 13.5 against
     * 17.8 ms) when that takes the flipped problem: dy's O channels are its input channels */
    const fx_conv_geom gf = {.N = g.N, .C = g.O, .H = g.OH, .W = g.OW, .O = g.C, .KH = g.KH,
                             .KW = g.KW, .sh = 1, .sw = 1, .dh = g.dh, .dw = g.dw};
    if (cc.cf == FMT_BF16 && fwd_geom && fx_backend_active()->conv.bf16_fwd &&
        fx_bf16_fwd_direct_enabled() && fx_backend_active()->conv.bf16_fwd_fits(&gf))
        return conv_backward_input_as_forward(dx, dy, w, &g, FMT_BF16, func);
    /* bf16 on a GEMM that takes the patch matrix itself (the AMX route): the forward
     * convolution's product has O KH KW values per patch where the col2im route's has only O,
     * which suits the tile kernel (the CNN's conv2, batch 128, one thread on the Xeon reporting
     * model 167: 9.5 against 11.7 ms). The same products summed in another order, as the bf16
     * routes differ from each other. */
    if (cc.cf == FMT_BF16 && fx_backend_active()->gemm.bf16_plain_min_k > 0 &&
        g.O * g.KH * g.KW >= fx_backend_active()->gemm.bf16_plain_min_k && g.C >= 16 && fwd_geom)
        return conv_backward_input_as_forward(dx, dy, w, &g, FMT_BF16, func);
    /* float compute on the level's direct kernel (the same bits as below) */
    rc = conv_backward_input_f32_direct(dx, dy, w, &g, &cc, func);
    if (rc != 1) return rc;
    rc = FX_OK;
    const conv_plan plan = conv_plan_make(&g, 0, 0);
    const int64_t CKK = g.C * g.KH * g.KW, P = g.OH * g.OW, CHW = g.C * g.H * g.W;
    const int64_t col_n = CKK * plan.nb * P, dyg_n = g.O * plan.nb * P;
    const int64_t dxp_n = fx_conv_padded_numel(&g, plan.nb);
    const size_t esz = cc.esz, ssz = cc.ssz;

    fx_scratch s = {.n = 0};
    fx_operand dyo, wo;
    rc = conv_operand(dy, &cc, &dyo, &s, func);
    if (!rc) rc = conv_operand(w, &cc, &wo, &s, func);
    char *dyg = conv_alloc(&s, dyg_n * plan.outer, esz, &rc, func);
    char *col = conv_alloc(&s, col_n * plan.outer, ssz, &rc, func);
    char *dxp = conv_alloc(&s, dxp_n * plan.outer, ssz, &rc, func);
    /* float sums into a whole fp32 dx of its own go to dx itself, which the write then finds
     * in place (no copy of a stage). Only a chunk's GEMM can fail, after other chunks wrote
     * theirs: so for one chunk, or a disposable dx (fx_storage.disposable: the trainer's
     * gradients, which a failed step leaves unused) */
    const int dx_direct = !ic && (plan.nchunks == 1 || dx->st->disposable) &&
                          dx->fmt == FMT_FP32 && conv_dx_own(dx, dy, w);
    char *dxstage = dx_direct ? fx_tensor_base(dx) : conv_alloc(&s, g.N * CHW, ssz, &rc, func);
    int *status = conv_alloc(&s, plan.nchunks, sizeof(int), &rc, func);
    if (rc) {
        fx_scratch_free(&s);
        return rc;
    }
    FX_CONV_PARALLEL_FOR
    for (int64_t ch = 0; ch < plan.nchunks; ch++) {
        const int tid = FX_CONV_THREAD_ID();
        const int64_t n0 = ch * plan.nb, nbc = plan.nb < g.N - n0 ? plan.nb : g.N - n0;
        const int64_t Pc = nbc * P;
        char *mydy = dyg + (size_t)(tid * dyg_n) * esz, *mycol = col + (size_t)(tid * col_n) * ssz;
        char *mydxp = dxp + (size_t)(tid * dxp_n) * ssz;
        fx_chunk_gather(dyo.data, n0, nbc, g.O, P, mydy, esz);
        status[ch] = conv_matmul(conv_op2d(&cc, wo.data, wo.exp, g.O, CKK, CKK, 1),
                                 conv_op2d(&cc, mydy, dyo.exp, g.O, Pc, Pc, 0), ic, mycol,
                                 plan.inner);
        if (status[ch] != FX_OK) continue;
        /* the padded accumulator starts at zero (zero bytes are 0 and 0.0f) */
        memset(mydxp, 0, (size_t)fx_conv_padded_numel(&g, nbc) * ssz);
        if (ic)
            fx_col2im_i64(&g, (const int64_t *)mycol, nbc, (int64_t *)mydxp, plan.inner);
        else
            fx_col2im_f32(&g, (const float *)mycol, nbc, (float *)mydxp, plan.inner);
        fx_conv_unpad(&g, mydxp, n0, nbc, dxstage, ssz);
    }
    rc = conv_chunk_status(status, plan.nchunks, func);
    if (rc == FX_OK) rc = conv_write(dx, dxstage, ic, dyo.exp + wo.exp, func);
    fx_scratch_free(&s);
    return rc;
}

/* ---- gradient with respect to the weights ---------------------------------------------------- */

/* acc[i] += part[i] for n values of the stage type (int64: exact, |sum| < 2^62). */
static void conv_accumulate(void *acc, const void *part, int64_t n, int int_compute)
{
    if (int_compute) {
        int64_t *a = acc;
        const int64_t *p = part;
        for (int64_t i = 0; i < n; i++) a[i] += p[i];
    } else {
        float *a = acc;
        const float *p = part;
        for (int64_t i = 0; i < n; i++) a[i] += p[i];
    }
}

int tensor_conv2d_backward_weight(tensor_t *dw_out, const tensor_t *x, const tensor_t *dy,
                                  int sh, int sw, int ph, int pw, int dh, int dw)
{
    static const conv_names nm = {"x", "dw", "dy"};
    fx_conv_geom g;
    int rc = conv_geometry(__func__, &nm, x, dw_out, dy, sh, sw, ph, pw, dh, dw, &g);
    if (!rc) rc = conv_int_limit(__func__, conv_compute_for(x, dy).ic, g.N * g.OH * g.OW,
                                 "each weight gradient");
    if (rc) return rc;
    fx_op_args a =
        conv_args(FX_OP_CONV2D_BACKWARD_WEIGHT, __func__, &nm, x, dw_out, dy, &g, dw_out, x, dy);
    return fx_op_run(&a);
}

int fx_nn_conv2d_backward_weight_host(const fx_op_args *a)
{
    tensor_t *dw_out = a->u.conv.out;
    const tensor_t *x = a->u.conv.a, *dy = a->u.conv.b;
    const fx_conv_geom g = *a->u.conv.g;
    const char *func = a->func;
    if (conv_subsample_fits(dw_out, x, dy, &g, 1)) { /* the stride-1 weight gradient of x's pixels */
        fx_conv_geom g1;
        int rc;
        tensor_t *xs = conv_subsampled_input(x, dy, &g, &g1, &rc, func);
        if (!rc) {
            fx_op_args b = *a;
            b.u.conv.a = xs;
            b.u.conv.g = &g1;
            rc = fx_nn_conv2d_backward_weight_host(&b);
        }
        tensor_free(xs);
        return rc;
    }
    const conv_compute cc = conv_compute_for(x, dy);
    const int ic = cc.ic;
    int rc = FX_OK;
    const int64_t CKK = g.C * g.KH * g.KW, P = g.OH * g.OW, nw = g.O * CKK;
    /* integer compute on the AMX kernel with stride 1 across: the transposed patch matrix's
     * rows as tiles made straight from byte planes of the padded chunk (conv_panels.h), no
     * im2col; the same exact sums. The kernel takes products of at least 16 x 16 outputs and
     * 32 values of k; a chunk with fewer pixels goes to the register-tile driver, which takes
     * the same rows on demand (fx_conv_wrows_i16). */
    const fx_backend *be = fx_backend_active();
    /* integer compute on AMX tiles read in place (fx_i16_wgrad_amx), from 16 channels each
     * way in multiples of 16: no patch rows; the same exact sums */
    const int iwamx = ic && be->conv.i16_wgrad_amx && fx_gemm_i16_amx_on() &&
                      fx_i16_wgrad_amx_fits(&g);
    const int wtiles = ic && !iwamx && fx_conv_wsrc_fit(&g) && be->gemm.i16_amx && fx_gemm_i16_amx_on() &&
                       be->conv.wtiles_i16 && be->conv.byte_planes_i16 && CKK >= 16 && g.O >= 16;
    /* bf16 on the pair GEMM: each chunk's dW^T straight from its padded input
     * (fx_bf16_wgrad_direct: the same pairs in the same order, so the same bits), no patch
     * matrix and no packing; on the AMX route its tiles likewise (fx_bf16_wgrad_amx, in its
     * own order) */
    const int wdirect = !ic && cc.cf == FMT_BF16 && be->conv.bf16_wgrad &&
                        fx_bf16_wgrad_direct_enabled() && be->conv.bf16_wgrad_fits(&g);
    /* integer compute with VNNI (no AMX) likewise, in exact sums (fx_i16_wgrad_direct); a
     * chunk whose data it declines takes the patch matrix and GEMM below */
    const int iwdirect = iwamx || (ic && !wtiles && be->conv.i16_wgrad &&
                                   fx_i16_wgrad_direct_enabled() &&
                                   fx_i16_wgrad_direct_fits(&g, be->conv.i16_wgrad_max_stride));
    /* Chunks of the patch-matrix size, except on the direct integer route, which builds no
     * patch matrix: its chunk is the padded input and dy's pair words, and each chunk ends by
     * adding its dW^T into the group's int64 slot (conv2's is 400 KiB), so chunks of three
     * samples, the patch-matrix size, spent a part of the pass on that. Integer sums are exact,
     * so the chunking changes no bit; the float routes keep theirs, which fixes their order of
     * summation. Measured in bench_conv (CNN conv2, batch 128, one thread, Zen 4): the weight
     * gradient 15.5-15.8 ms at 3 samples per chunk, 15.0-15.2 at 6, 15.1-15.2 at 12 and 24.
     * At most 2^16 / P samples: the kernel's hi words' range (fx_i16_wgrad_direct). */
    const conv_plan plan =
        iwamx      ? conv_plan_per_thread(&g)
        : iwdirect ? conv_plan_sized(&g, 1, fx_conv_padded_numel(&g, 1) + P * ((g.O + 15) / 16 * 16),
                                     ((int64_t)1 << 16) / P)
                   : conv_plan_make(&g, 1, 0);
    /* Float sums are made in fixed groups of chunks, so that their order does not depend on
     * the thread count. Integer sums are exact in any order: every chunk is a group of its own,
     * handed to whichever thread is free, which adds it into its thread's slot, and the last
     * pass adds one int64 slot per thread (summing 16 of conv2's 400 KiB slots took 3.6 % of
     * its weight gradient at one thread). With fixed halves of the batch per thread, one
     * thread's kernel ran longer on the same number of chunks (the AVX2 EPYC, two threads: 339
     * against 222 perf samples in CNN conv2's kernel; the cause was not found) and the other
     * waited for it; chunks may also differ (a chunk the direct kernel declines takes the
     * patch GEMM). */
    const int64_t groups = ic                                       ? plan.nchunks
                           : plan.nchunks < FX_CONV_WGRAD_GROUPS ? plan.nchunks
                                                                   : FX_CONV_WGRAD_GROUPS;
    const int64_t nslots = ic ? plan.outer : groups;
    const int64_t wd_n = wdirect ? be->conv.bf16_wgrad_scratch(&g, plan.nb) : 0;
    const int64_t iwd_n = iwamx      ? fx_i16_wgrad_amx_scratch(&g, plan.nb)
                          : iwdirect ? fx_i16_wgrad_direct_scratch(&g, plan.nb)
                                     : 0;
    /* float compute on the fp32 GEMM: its A panels straight from the padded chunk where the
     * level builds them (conv_panels.h; the same values, so the same bits), in the patch
     * matrix's buffer, which takes the panels' size (floats, rows rounded up to the tile) */
    const int wpanel_mr = !ic && !wdirect && (cc.cf != FMT_BF16 || bf16_gemm_widens(be)) &&
                                  be->conv.wpanels_f32 &&
                                  fx_conv_wpanels_enabled() && fx_conv_wpanels_f32_fit(&g)
                              ? be->gemm.f32_panel_mr
                              : 0;
    /* float compute on the level's direct fp32 kernel (conv_f32_direct.h: the GEMM's chains
     * in its order, so its bits) on the output widths where the level measured it faster: the
     * padded chunk in fp32 and dy^T per chunk, no panels, no patch matrix and no packing */
    const int f32w = !ic && !wdirect &&
                     (cc.cf == FMT_FP32 || cc.cf == FMT_FP16 ||
                      (cc.cf == FMT_BF16 && bf16_gemm_widens(be))) &&
                     be->conv.f32_wgrad && fx_f32_wgrad_direct_enabled() &&
                     g.O >= be->conv.f32_wgrad_min_o &&
                     (!be->conv.f32_wgrad_max_o || g.O <= be->conv.f32_wgrad_max_o);
    const int64_t f32x_n = f32w ? fx_conv_padded_numel(&g, plan.nb) : 0;
    const int64_t f32dy_n = f32w ? g.O * plan.nb * P : 0;
    /* the AMX kernel never declines and reads x and dy in place: no patch matrix, padded chunk
     * or gathered dy */
    const int64_t col_n = wtiles || wdirect || iwamx || f32w ? 0
                          : wpanel_mr ? fx_conv_wpanels_f32_numel(&g, plan.nb, wpanel_mr) *
                                            (int64_t)(sizeof(float) / cc.esz)
                                      : CKK * plan.nb * P;
    const int64_t dyg_n = iwamx || (f32w && cc.cf == FMT_FP32) ? 0 : g.O * plan.nb * P;
    const int64_t xp_n =
        iwamx || f32w ? 0 : fx_conv_padded_numel(&g, plan.nb) + FX_CONV_PAD_SLACK;
    const int64_t plane_n = xp_n + 2 * FX_CONV_TILES_SLACK; /* bytes per plane */
    const size_t esz = cc.esz, ssz = cc.ssz;

    fx_scratch s = {.n = 0};
    fx_operand xo, dyo;
    rc = conv_operand(x, &cc, &xo, &s, func);
    if (!rc) rc = conv_operand(dy, &cc, &dyo, &s, func);
    char *xp = xp_n ? conv_alloc(&s, xp_n * plan.outer, esz, &rc, func) : NULL;
    char *col = col_n ? conv_alloc(&s, col_n * plan.outer, esz, &rc, func) : NULL;
    int8_t *planes = wtiles ? conv_alloc(&s, 2 * plane_n * plan.outer, 1, &rc, func) : NULL;
    char *dyg = wdirect || !dyg_n ? NULL : conv_alloc(&s, dyg_n * plan.outer, esz, &rc, func);
    uint32_t *wd = wdirect ? conv_alloc(&s, wd_n * plan.outer, sizeof(uint32_t), &rc, func) : NULL;
    uint32_t *iwd =
        iwdirect ? conv_alloc(&s, iwd_n * plan.outer, sizeof(uint32_t), &rc, func) : NULL;
    float *f32x = f32w ? conv_alloc(&s, f32x_n * plan.outer, sizeof(float), &rc, func) : NULL;
    float *f32dy = f32w ? conv_alloc(&s, f32dy_n * plan.outer, sizeof(float), &rc, func) : NULL;
    char *part = conv_alloc(&s, nw * plan.outer, ssz, &rc, func);
    char *slots = conv_alloc(&s, nw * nslots, ssz, &rc, func); /* one dW^T per slot */
    /* integer compute: whether a thread's slot holds sums yet */
    unsigned char *slot_used = conv_alloc(&s, plan.outer, 1, &rc, func);
    char *dwstage = conv_alloc(&s, nw, ssz, &rc, func);
    int *status = conv_alloc(&s, plan.nchunks, sizeof(int), &rc, func);
    if (rc) {
        fx_scratch_free(&s);
        return rc;
    }
    memset(status, 0, sizeof(int) * (size_t)plan.nchunks);
    memset(slot_used, 0, (size_t)plan.outer);
    FX_CONV_PARALLEL_FOR
    for (int64_t grp = 0; grp < groups; grp++) {
        const int tid = FX_CONV_THREAD_ID();
        char *mycol = col ? col + (size_t)(tid * col_n) * esz : NULL;
        char *mydy = dyg ? dyg + (size_t)(tid * dyg_n) * esz : NULL;
        char *mypart = part + (size_t)(tid * nw) * ssz;
        char *slot = slots + (size_t)((ic ? tid : grp) * nw) * ssz;
        char *myxp = xp ? xp + (size_t)(tid * xp_n) * esz : NULL;
        int8_t *myhi = planes ? planes + 2 * plane_n * tid + FX_CONV_TILES_SLACK : NULL;
        const fx_conv_wsrc ws = {&g, (const int16_t *)(const void *)myxp, myhi,
                                 myhi ? myhi + plane_n : NULL};
        const conv_prepacked pp = {.a_rows = fx_conv_wrows_i16, .a_rows_ctx = &ws,
                                   .a_tiles = be->conv.wtiles_i16, .a_tiles_ctx = &ws};
        const int64_t c0 = grp * plan.nchunks / groups, c1 = (grp + 1) * plan.nchunks / groups;
        for (int64_t ch = c0; ch < c1; ch++) {
            const int64_t n0 = ch * plan.nb, nbc = plan.nb < g.N - n0 ? plan.nb : g.N - n0;
            const int64_t Pc = nbc * P;
            /* the slot's first sums are stored, later ones added */
            const int first = ic ? !slot_used[tid] : ch == c0;
            if (ic) slot_used[tid] = 1;
            /* the slack after the chunk's padded input, which im2col's block copies read (and
             * drop): zeroed per chunk, since every route pads the chunk over what came before,
             * instead of the whole buffer once per call (ResNet-20's stage-1 integer chunks
             * hold 64 padded images, 2.4 MB a thread) */
            if (myxp)
                memset(myxp + (size_t)fx_conv_padded_numel(&g, nbc) * esz, 0,
                       (size_t)FX_CONV_PAD_SLACK * esz);
            if (wd) {
                fx_conv_pad(&g, xo.data, n0, nbc, myxp, esz);
                be->conv.bf16_wgrad(&g, (const uint16_t *)(const void *)myxp,
                                    (const uint16_t *)dyo.data + n0 * g.O * P, nbc,
                                    wd + tid * wd_n, (float *)(void *)(first ? slot : mypart));
                status[ch] = FX_OK;
                if (!first) conv_accumulate(slot, mypart, nw, ic);
                continue;
            }
            if (f32w) {
                float *mx = f32x + tid * f32x_n, *mdy = f32dy + tid * f32dy_n;
                const int64_t ndy = nbc * P * g.O;
                if (cc.cf == FMT_FP32) {
                    fx_conv_pad(&g, xo.data, n0, nbc, mx, sizeof(float));
                    fx_chunk_gather_t(dyo.data, n0, nbc, g.O, P, mdy, sizeof(float));
                } else { /* widened exactly, as the GEMM's packing widens them */
                    const fx_widen_row_fn widen =
                        cc.cf == FMT_FP16 ? be->cvt.fp16_to_f32 : be->cvt.bf16_to_f32;
                    fx_conv_pad_widen(&g, (const uint16_t *)xo.data, n0, nbc, mx, widen);
                    fx_chunk_gather_t(dyo.data, n0, nbc, g.O, P, mydy, esz);
                    widen((const uint16_t *)(const void *)mydy, mdy, ndy);
                }
                be->conv.f32_wgrad(&g, mx, nbc, mdy, (float *)(void *)(first ? slot : mypart),
                                   plan.inner);
                status[ch] = FX_OK;
                if (!first) conv_accumulate(slot, mypart, nw, ic);
                continue;
            }
            /* a slot's later chunks add their sums to it in the kernel; the AMX kernel pads
             * the chunk itself as it copies it */
            if (iwamx) {
                be->conv.i16_wgrad_amx(&g, (const int16_t *)xo.data + n0 * g.C * g.H * g.W,
                                       (const int16_t *)dyo.data + n0 * g.O * P, nbc,
                                       iwd + tid * iwd_n, (int64_t *)(void *)slot, !first);
                status[ch] = FX_OK;
                continue;
            }
            if (iwd) {
                fx_conv_pad(&g, xo.data, n0, nbc, myxp, esz);
                if (be->conv.i16_wgrad(&g, (const int16_t *)(const void *)myxp,
                                       (const int16_t *)dyo.data + n0 * g.O * P, nbc,
                                       iwd + tid * iwd_n, (int64_t *)(void *)slot, !first)) {
                    status[ch] = FX_OK;
                    continue;
                }
            }
            conv_prepacked wpp = {.a_panels = NULL};
            if (myhi) {
                fx_conv_pad(&g, xo.data, n0, nbc, myxp, esz);
                be->conv.byte_planes_i16((const int16_t *)(const void *)myxp,
                                         fx_conv_padded_numel(&g, nbc), myhi, myhi + plane_n);
            } else if (wpanel_mr) {
                fx_conv_pad(&g, xo.data, n0, nbc, myxp, esz);
                if (be->conv.wpanels_f32(&g, myxp, (int)cc.cf, nbc, wpanel_mr,
                                         (float *)(void *)mycol)) {
                    wpp.a_panels = mycol;
                    wpp.a_mr = wpanel_mr;
                    fx_conv_wpanels_count();
                } else { /* declined (out of memory): the patch matrix of the padded chunk */
                    conv_im2col(&g, esz, nbc, myxp, mycol, 0, plan.inner);
                }
            } else {
                conv_patches(&g, xo.data, esz, n0, nbc, myxp, mycol, 0, plan.inner);
            }
            fx_chunk_gather(dyo.data, n0, nbc, g.O, P, mydy, esz);
            status[ch] = conv_matmul_with(conv_op2d(&cc, mycol, xo.exp, CKK, Pc, Pc, 0),
                                          myhi ? &pp : wpp.a_panels ? &wpp : NULL,
                                          conv_op2d(&cc, mydy, dyo.exp, g.O, Pc, Pc, 1), ic,
                                          first ? slot : mypart, plan.inner, NULL, NULL);
            if (status[ch] != FX_OK) break;
            if (!first) conv_accumulate(slot, mypart, nw, ic);
        }
    }
    rc = conv_chunk_status(status, plan.nchunks, func);
    if (rc == FX_OK) {
        /* a thread that got no chunk left its slot empty */
        for (int t = 0; ic && t < plan.outer; t++)
            if (!slot_used[t]) memset(slots + (size_t)(t * nw) * ssz, 0, (size_t)nw * ssz);
        /* the slots' partial sums added in slot order (fixed fp32 sums), blocks of dW^T on
         * the threads: serial, the 16 groups of conv2's 51,200 sums were 1.5 % of a two-thread
         * integer CNN step */
        const int64_t blk = 4096, nblk = (nw + blk - 1) / blk;
        const int ntb = nw * nslots >= ((int64_t)1 << 16) ? flexpoint_num_threads() : 1;
        (void)ntb;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(ntb) if (ntb > 1)
#endif
        for (int64_t b = 0; b < nblk; b++) {
            const int64_t lo = b * blk, len = nw - lo < blk ? nw - lo : blk;
            for (int64_t grp = 1; grp < nslots; grp++)
                conv_accumulate(slots + (size_t)lo * ssz, slots + (size_t)(grp * nw + lo) * ssz,
                                len, ic);
        }
        fx_chunk_scatter_t(slots, 0, 1, g.O, CKK, dwstage, ssz); /* [CKK, O] -> [O, CKK] */
        rc = conv_write(dw_out, dwstage, ic, dyo.exp + xo.exp, func);
    }
    fx_scratch_free(&s);
    return rc;
}
