/* Kernel interface and backend registry.
 *
 * A backend is a table of kernels [op][compute format] plus a table of conversion routines.
 * Tables are filled BLIS-style, one file per CPU level: src/cpu/scalar.c fills "scalar",
 * "avx2" starts as a copy of scalar and src/cpu/avx2.c overwrites entries, "avx512" starts as a
 * copy of avx2 and src/cpu/avx512.c overwrites entries. Every level is therefore complete by
 * construction.
 *
 * Kernels never see tensors, Autoflex or the output's format. They read operands (already in
 * the compute format) and write a *stage*: fp32 values (float compute) or int64 values at an
 * exponent they report (integer compute), in row-major order of the output's logical shape.
 * The dispatcher then performs the one write into the output (src/core/store.c).
 */
#ifndef FX_CORE_BACKEND_H
#define FX_CORE_BACKEND_H

#include "internal.h"
#include "op_table.h"

/* The op enum, the element-wise function enum and the op descriptors: src/core/op_table.h */

#define FX_MAX_INPUTS 4

typedef struct fx_operand {
    const void *data; /* element [0, ..., 0] */
    fmt_t fmt;        /* compute format of this operand (FP32, FP16, BF16, or int16 formats) */
    int exp;          /* shared exponent (int16 formats) */
    int ndim;
    int64_t shape[FX_MAX_DIMS];
    int64_t strides[FX_MAX_DIMS]; /* elements */
} fx_operand;

/* Elements an fx_op_call.a_rows source may write on either side of each row's kc values. */
#define FX_A_ROWS_SLACK 32

typedef struct fx_op_call {
    fx_op op;
    int nin;
    fx_operand in[FX_MAX_INPUTS];

    /* output stage, row-major over the output's logical shape, out_numel elements */
    int out_ndim;
    int64_t out_shape[FX_MAX_DIMS];
    int64_t out_numel;
    float *out_f32;   /* float compute kernels write here */
    int64_t *out_i64; /* integer compute kernels write here ... */
    int *out_exp;     /* ... and store the exponent of the int64 values here */
    /* Optional, integer kernels: when out_imax is not NULL, a kernel that saw every final
     * output value in passing may store max |out_i64[i]| in *out_imax and set *out_imax_known
     * to 1, which spares the write path its own pass over the stage (the exact exponent needs
     * only this maximum). Kernels that do not know it leave both alone. */
    uint64_t *out_imax;
    int *out_imax_known;
    /* Optional, MATMUL: in[0] already packed as the GEMM's A micro-panels of a_panels_mr rows
     * over the whole K, built by the convolution straight from its input (src/nn/
     * conv_panels.h). Integer GEMM: int32 pairs, panel q at a_panels + q * ceil(K/2) * mr;
     * fp32 GEMM: floats, panel q at a_panels + q * K * mr. Set only when the backend's
     * gemm.i16_panel_mr / gemm.f32_panel_mr equals a_panels_mr; in[0] then supplies only its
     * shape and exponent. */
    const void *a_panels;
    int a_panels_mr;
    /* Optional, integer MATMUL: in[0]'s rows produced on demand instead of read from memory (a
     * convolution's patch rows, gathered from its input while the GEMM packs them: an implicit
     * GEMM without a patch matrix). a_rows(a_rows_ctx, i0, m, k0, kc, dst, ld) writes
     * A[i0 + r][k0 + t] to dst[r*ld + t] for r < m, t < kc, and may write anything to the
     * FX_A_ROWS_SLACK elements before dst[r*ld] and after dst[r*ld + kc - 1] (ld leaves that
     * room). It is called from the GEMM's threads at once, so it must only read its context.
     * Set only when the backend's gemm.i16_row_source or gemm.i16_amx (integer compute; the
     * AMX kernel hands the products it does not take, with a_rows, to the register-tile
     * driver, which takes rows on every level) or gemm.bf16_row_source (bf16 x bf16) is
     * nonzero; in[0] then supplies only its shape, format and exponent. */
    void (*a_rows)(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int16_t *dst,
                   int64_t ld);
    const void *a_rows_ctx;
    /* Optional, integer MATMUL on the AMX kernel (src/flex/gemm_i16_amx.c), beside a_rows:
     * in[0]'s rows i0 .. i0 + m - 1 (m <= 16) and values k0 .. k0 + kc - 1 (k0 a multiple of
     * 64) as that kernel's packed byte tiles, written by the source itself: ceil(kc / 64)
     * tiles 2 KiB apart from ap, each a 16 x 64 high-byte plane then a low-byte plane, rows
     * beyond m and values beyond kc zero. Called from the GEMM's threads at once; it must only
     * read its context. Kernels without the AMX layout use a_rows. */
    void (*a_tiles)(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int8_t *ap);
    const void *a_tiles_ctx;
    /* bf16 x bf16 on the AMX route (gemm.bf16_row_source): in[1] already packed in that
     * kernel's tiles by fx_bf16_amx_pack_b (src/bf16/bf16_gemm.h; a convolution's weights,
     * packed once for all its chunks), 64-byte aligned; NULL: the kernel packs in[1] */
    const uint16_t *b_amx;
    /* Optional, integer MATMUL on the AMX kernel (src/flex/gemm_i16_amx.c): in[1] already
     * packed in that kernel's byte tiles by fx_gemm_i16_amx_pack_b (src/flex/flex_kernels.h; a
     * convolution's weights, packed once for all its chunks), 64-byte aligned. Used where the
     * kernel streams A's rows; NULL, or any other kernel: in[1] is packed from its values. */
    const int8_t *b_amx_i16;
    /* Optional, integer MATMUL of plain operands, set only where the level's
     * gemm.i16_rounds(M, K, N) said yes and fx_q64_fast_ok(out_i16_shift)
     * (src/flex/flex_kernels.h), with out_i64 NULL, and out_imax, out_imax_known and
     * out_i16_underflow set (the register tiles refuse it otherwise): instead of an int64 stage
     * the kernel rounds each exact sum v to nearest even at 2^out_i16_shift into out_i16
     * ([M, N], row stride N) while it is in registers (AMX) or in a column of tiles that is
     * still in cache (the register-tile driver, src/flex/gemm_i16.c), adds the nonzero sums
     * that rounded to 0 to *out_i16_underflow, and reports max |v| exactly. The rounded
     * values are those of cvt.quant_i64 where that maximum is at most
     * fx_q64_fast_bound(out_i16_shift), that is where nothing saturates; above it they are
     * not, and the caller computes the product again. Why: writing and reading 8 bytes of
     * stage per output cost more than the tile products where each output has few products
     * (K = 25 to 576, a convolution's shapes as plain products), and a sixth of a 1024^3
     * product on full-range data (src/core/shared_matmul.c). */
    int16_t *out_i16;
    int out_i16_shift;
    int64_t *out_i16_underflow;
    /* Optional, float MATMUL into an fp16/bf16 output: its elements ([M, N], row stride N) and
     * the write's conversion (cvt.f32_to_fp16 or cvt.f32_to_bf16). A kernel that takes them
     * converts each block of fp32 results into out_h16 while the block is in cache, stores no
     * fp32 stage (out_f32 is still given: it may use it as scratch) and sets *out_h16_done;
     * the values are those the write would make of the stage. It takes them only where
     * nothing can fail once it has written into out_h16. Kernels that do not know them leave
     * *out_h16_done alone and write out_f32. Why: the transformer's bf16 products wrote an
     * fp32 stage twice the output's size and read it back, which cost about a fifth of the
     * products' time (src/core/dispatch.c). */
    uint16_t *out_h16;
    void (*out_h16_cvt)(const float *src, uint16_t *dst, int64_t n);
    int *out_h16_done;
    /* Optional, with out_h16: a bias per output column (N floats, the [N] bias tensor's values
     * widened) that a kernel taking out_h16 adds to each converted value as tensor_add would
     * (src/core/h16_bias.h, out_h16_widen the format's widening); *out_h16_done then means
     * the bias is in too. NULL: none. */
    const float *out_h16_bias;
    void (*out_h16_widen)(const uint16_t *src, float *dst, int64_t n);

    /* op parameters */
    float scalar_f32;     /* FX_OP_SCALE, float compute */
    int64_t scalar_mant;  /* FX_OP_SCALE, integer compute: s = scalar_mant * 2^scalar_exp, */
    int scalar_exp;       /*   |scalar_mant| < 2^31 */
    int64_t red_outer, red_len, red_inner; /* FX_OP_SUM: out[o*inner+i] = sum_k a[(o*len+k)*inner+i] */
    int unary_fn;       /* FX_OP_UNARY(_BACKWARD): an fx_unary_fn */
    double unary_p[2];  /*   its parameters (clamp bounds, the exponent of pow) */

    int nthreads; /* OpenMP threads the kernel may use (>= 1) */
} fx_op_call;

/* Operand contract per op:
 *  COPY, RELU, SCALE, SUM:  in[0] contiguous, numel = product of its shape.
 *  ADD, SUB, MUL:           in[0], in[1] contiguous, each with out_numel elements (the
 *                           dispatcher has already broadcast them).
 *  MATMUL:                  in[0] [M,K], in[1] [K,N], any strides (transposed views arrive as
 *                           strides); out [M,N].
 *  UNARY:                   in[0] contiguous with out_numel elements.
 *  UNARY_BACKWARD:          in[0] (dy) and in[1] (x) contiguous, out_numel elements each.
 * Integer kernels: products exact, sums exact (as if in int64), add/sub aligned with
 * fx_align_exp/fx_align_to; *out_exp is the exponent of the exact int64 results. */
typedef int (*fx_kernel)(const fx_op_call *c);

/* Operands of an aligned add/sub of int16 mantissas (src/core/shared_binary.c): b advances with
 * a (b_inc 1) or holds one value for all (b_inc 0; no other value is allowed), and both are shifted left onto their
 * common exponent by sa, sb in [0, 15], so every |v| <= 2^30 + 2^15 fits int32 exactly. With a
 * gate (advancing with a), v[i] is kept where gate[i] > 0 and is 0 elsewhere (ReLU and its
 * gradient: gate = the ReLU's input). */
typedef struct fx_sum2 {
    const int16_t *a, *b;
    int64_t b_inc;
    int sa, sb, negate_b;
    const int16_t *gate; /* NULL: none */
} fx_sum2;

/* Conversion routines. All single-threaded; the dispatcher splits large arrays across
 * threads and merges statistics. Lengths may be 0 and pointers need not be aligned. */
/* The max-pool gradient's 2x2 scatter of one plane (fx_cvt_table.maxunpool2x2_u16). */
typedef int (*fx_maxunpool2x2_fn)(const uint16_t *dy, const int32_t *idx, int64_t lo, int64_t H,
                                  int64_t W, int64_t OH, int64_t OW, int half, uint16_t inf,
                                  uint16_t qnan, uint16_t *dst, int32_t *mx);
/* The fp32 max-pool gradient's 2x2 scatter of one plane (fx_cvt_table.maxunpool2x2_f32). */
typedef int (*fx_maxunpool2x2_f32_fn)(const float *dy, const int32_t *idx, int64_t lo,
                                      int64_t H, int64_t W, int64_t OH, int64_t OW, float *dst);

typedef struct fx_cvt_table {
    void (*f32_to_fp16)(const float *src, uint16_t *dst, int64_t n);
    void (*fp16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*f32_to_bf16)(const float *src, uint16_t *dst, int64_t n);
    void (*bf16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    /* fp32 -> int16 mantissas at exponent e (docs/formats.md steps 1-5). dst may be NULL (a trial:
     * statistics only). index0 is the global element index of src[0], for stochastic rounding.
     * *st is overwritten (not merged). */
    void (*quant_f32)(const float *src, int16_t *dst, int64_t n, int e, const fx_rounding *r,
                      int64_t index0, fx_qstats *st);
    /* int16 mantissas at exponent e -> fp32 (exact unless beyond the fp32 range). */
    void (*dequant)(const int16_t *src, float *dst, int64_t n, int e);
    /* int16 mantissas times c 2^k at exponent e -> fp32, one rounding of the exact product:
     * dst[i] = (float)((double)(src[i] * c) * p2) with p2 = 2^(e + k), |c| < 2^31
     * (fx_shared_scale_f32, src/core/shared_scale.h; the attention's scaled scores,
     * src/nn/softmax_axis.c). */
    void (*scaled_i16_f32)(const int16_t *src, float *dst, int64_t n, int64_t c, double p2);
    /* int64 values -> int16 by fx_requant(v, shift) (shift = e_out - e_acc); dst may be NULL.
     * *st is overwritten; max_abs_in is the largest |v| as a double. */
    void (*quant_i64)(const int64_t *src, int16_t *dst, int64_t n, int shift, fx_qstats *st);
    /* quant_i64 of a rows x cols matrix written transposed, dst[j*rows + i] = the rounding of
     * src[i*cols + j] (a convolution's pixel-major sums into one NCHW sample); the same
     * mantissas and statistics as quant_i64 then transpose16. dst must not be NULL (a trial
     * takes quant_i64). NULL: those two passes. */
    void (*quant_i64_t)(const int64_t *src, int16_t *dst, int64_t rows, int64_t cols, int shift,
                        fx_qstats *st);
    /* int64 values rounded to odd at 2^k (1 <= k <= 62) into int32: dst[i] = floor(src[i] /
     * 2^k) with its last bit set where that division was inexact (src/flex/round_odd.c, the
     * definition). Returns 0 where some result left int32 (dst is then not to be used). */
    int (*round_odd_i64)(const int64_t *src, int32_t *dst, int64_t n, int k);
    /* largest finite |x| (0 if none) and the number of NaN/Inf values */
    void (*maxabs_f32)(const float *src, int64_t n, float *maxabs, int64_t *nonfinite);
    /* The values v[i] = (a[i] << sa) +- (b[i * b_inc] << sb) (gated) of an aligned add/sub of
     * int16 mantissas (fx_sum2): sum2_maxabs returns max |v[i]|; sum2_quant is quant_i64 on the
     * v[i] (the same mantissas and statistics as widening them to int64 first). */
    uint32_t (*sum2_maxabs)(const fx_sum2 *p, int64_t n);
    void (*sum2_quant)(const fx_sum2 *p, int64_t n, int16_t *dst, int shift, fx_qstats *st);
    /* sum2_quant into dst (statistics *st) and, in the same pass, those mantissas kept where
     * gate[i] > 0 (gate NULL: where the mantissa itself is above 0, a ReLU), else 0, into gdst
     * at the same exponent (statistics *gst): the outputs and statistics of sum2_quant and then
     * sum2_quant({dst, 0, 0, 0, 0, 0, gate ? gate : dst}, n, gdst, 0, gst). dst and gdst are
     * not NULL and distinct from every input. NULL: those two calls. */
    void (*sum2_quant_gated)(const fx_sum2 *p, int64_t n, int16_t *dst, int shift, fx_qstats *st,
                             const int16_t *gate, int16_t *gdst, fx_qstats *gst);
    /* quant_i64 of the exact int64 products m[i] c of int16 mantissas and a scalar |c| <= 2^30
     * (a shared-exponent tensor_scale's values, src/core/shared_scale.c): the same mantissas
     * and statistics, without the products stored; NULL: the portable products, then quant_i64 */
    void (*scale_quant)(const int16_t *m, int32_t c, int64_t n, int16_t *dst, int shift,
                        fx_qstats *st);
    /* largest |v| of int64 values, as uint64 (|INT64_MIN| = 2^63 included); NULL: the portable
     * loop of fx_par_maxabs_i64 */
    uint64_t (*maxabs_i64)(const int64_t *src, int64_t n);
    /* 2x2 / stride-2 max pooling of one plane of int16 (fp32) values x (H >= 2 OH rows of W): the
     * OH x OW maxima into out and, when idx is not NULL, their flat indices x_base + h W + w;
     * NULL: the portable loop (src/nn/pool.c) */
    void (*maxpool2x2_i16)(const int16_t *x, int64_t x_base, int64_t W, int64_t OH, int64_t OW,
                           int16_t *out, int32_t *idx);
    void (*maxpool2x2_f32)(const float *x, int64_t x_base, int64_t W, int64_t OH, int64_t OW,
                           float *out, int32_t *idx);
    /* the same of an fp16 (fp16 != 0) or bf16 plane: the values and indices of the fp32 route
     * on the widened plane, out narrowed back (exact; a NaN as the format's quiet NaN with its
     * sign); NULL: that route (src/nn/pool.c) */
    void (*maxpool2x2_half)(const uint16_t *x, int64_t x_base, int64_t W, int64_t OH,
                            int64_t OW, uint16_t *out, int32_t *idx, int fp16);
    /* the max-pool gradient's scatter of one plane of 16-bit values whose argmax indices each
     * lie in their own 2x2 block (output (r, c) at flat index lo + (2r + i) W + 2c + j, i, j in
     * {0, 1}; H >= 2 OH, W >= 2 OW): dst (the plane, H x W) gets each dy value at its index
     * and zeros elsewhere, as the portable scatter leaves it (src/nn/pool.c); half: the values
     * are fp16/bf16 patterns, stored canonical (-0 as +0, NaN as qnan with its sign; inf and
     * qnan of the format), else int16 mantissas, whose largest |value| raises *mx. Returns 1,
     * or 0 at the first index outside its block (dst then holds anything; the caller scatters
     * that plane its own way); NULL: the portable scatter */
    fx_maxunpool2x2_fn maxunpool2x2_u16;
    /* the same scatter of fp32 gradients: dst gets 0 + each dy value at its index (what the
     * portable scatter's add into a zeroed plane stores: -0 as +0, a signalling NaN quieted)
     * and +0 elsewhere; returns 1, or 0 at the first index outside its block (dst then holds
     * anything); NULL: the portable scatter */
    fx_maxunpool2x2_f32_fn maxunpool2x2_f32;
    /* dst[j*rows + i] = src[i*cols + j] for 16-, 32- and 64-bit elements (bits moved unchanged;
     * the buffers do not overlap); NULL: the portable tiled loop (src/nn/im2col.c) */
    void (*transpose16)(const void *src, void *dst, int64_t rows, int64_t cols);
    void (*transpose32)(const void *src, void *dst, int64_t rows, int64_t cols);
    void (*transpose64)(const void *src, void *dst, int64_t rows, int64_t cols);
    /* softmax's arithmetic (src/nn/softmax_def.h, which defines the bits): exp_f32 is
     * fx_expf_def of n values (y may be x), the row kernels' exponential on its own so that
     * tests can sweep it (no op calls it); softmax_row_f32 one contiguous row of softmax
     * (logsm 0) or log-softmax (1), raising *rmax to the largest finite |result| and counting
     * the others in *rbad; softmax_backward_row_f32 one row of the backward pass from dy = g
     * and the forward's output y (dx may be g, y may be x). NULL: the portable loops. */
    void (*exp_f32)(const float *x, float *y, int64_t n);
    void (*softmax_row_f32)(const float *x, float *y, int64_t len, int logsm, float *rmax,
                            int64_t *rbad);
    void (*softmax_backward_row_f32)(const float *g, const float *y, float *dx, int64_t len,
                                     int logsm);
} fx_cvt_table;

typedef struct fx_cpu_features {
    int sse2, avx, avx2, fma, f16c;
    int avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    int amx_bf16; /* AMX-TILE and AMX-BF16, with the tile state enabled by the OS (XCR0) */
    int amx_int8; /* AMX-TILE and AMX-INT8, likewise */
    /* cpuid leaf 0 vendor ("GenuineIntel", "AuthenticAMD"; "" when unknown) and leaf 1's
     * display family and model (extended fields folded in as the vendors document): the key
     * of the per-microarchitecture kernel tables (src/bf16/bf16_route.c) */
    char vendor[13];
    int family, model;
} fx_cpu_features;

struct fx_conv_geom;    /* src/nn/im2col.h */
struct fx_i16_dgrad_s2; /* src/flex/conv_i16.h */
struct fx_bn_kernels; /* src/nn/bn_kernels.h */
struct fx_ln_kernels; /* src/nn/ln_kernels.h */

/* The GEMM tuning of a level: what its MATMUL kernels accept besides plain operands, at which
 * register-tile sizes. The convolution reads these to pack operands the way the kernel wants
 * them. All 0: plain operands only (the scalar level). */
typedef struct fx_gemm_tuning {
    /* The register-tile height of the integer MATMUL kernel when it accepts pre-packed A
     * panels (fx_op_call.a_panels); 0 when it does not. */
    int i16_panel_mr;
    /* The integer MATMUL kernel's register-tile width in output columns. A convolution's input
     * gradient runs as a forward convolution with C output columns from this many input
     * channels up (src/nn/conv2d.c); 0: 32. */
    int i16_tile_nr;
    /* The fewest input channels from which a stride-1 integer convolution's input gradient
     * runs as a forward convolution instead of col2im (src/nn/conv2d.c); 0: i16_tile_nr. */
    int i16_bwd_fwd_min_c;
    /* nonzero when the integer MATMUL kernel takes A rows on demand (fx_op_call.a_rows) */
    int i16_row_source;
    /* FX_GEMM_I16_B_WRAP when its integer MATMUL kernel has the wrap kernel (which takes the
     * split kernel's place where fx_gemm_i16_wrap_pays; fx_gemm_i16_b_layout_for),
     * FX_GEMM_I16_B_SPLIT otherwise */
    int i16_b_layout;
    /* nonzero when the integer MATMUL kernel is the AMX one (src/flex/gemm_i16_amx.c), which
     * packs plain operands itself: while fx_gemm_i16_amx_on(), a convolution hands it the
     * patch matrix and the plain weights instead of A panels */
    int i16_amx;
    /* Whether the integer MATMUL kernel takes a plain [M, K] x [K, N] product with
     * fx_op_call.out_i16 (rounding instead of an int64 stage); NULL: never */
    int (*i16_rounds)(int64_t M, int64_t K, int64_t N);
    /* nonzero when a FLEX16_5/DFP16 product whose exponent guess did not hold lately is still
     * rounded by that kernel (src/core/shared_matmul.c), a miss running it again, instead of
     * going to the dispatcher's int64 stage: set where it was measured to pay (AVX-512's
     * register tiles); AMX's rounding takes such products on every level */
    int i16_unsteady_rounds;
    int f32_panel_mr; /* the same for the fp32 MATMUL kernels (fp32, fp16, bf16 operands) */
    /* nonzero when the bf16 x bf16 MATMUL kernel runs on bf16 pairs (src/bf16/bf16_gemm.h) and
     * takes pre-packed A panels of this height in the integer GEMM's pair layout instead */
    int bf16_pair_panel_mr;
    /* nonzero when the bf16 x bf16 MATMUL kernel packs plain bf16 operands itself (the AMX
     * route): a bf16 convolution whose patches have at least this many values (its K) then
     * hands it the patch matrix instead of fp32 panels; 0: never */
    int bf16_plain_min_k;
    /* nonzero when that kernel also takes A rows on demand (fx_op_call.a_rows): such a
     * convolution then hands it its patch rows, gathered while it packs them, instead of a
     * patch matrix */
    int bf16_row_source;
} fx_gemm_tuning;

/* The convolution's own kernels of a level (src/nn/conv2d.c). */
typedef struct fx_conv_kernels {
    /* Builders of a convolution's implicit-GEMM A panels (src/nn/conv_panels.h) for the tile
     * heights of fx_gemm_tuning; each returns 0 (nothing written) for a geometry or height it
     * does not handle. NULL: the portable builders. */
    int (*panels_i16)(const struct fx_conv_geom *g, const int16_t *xp, int64_t nb, int mr,
                      int32_t *ap);
    int (*panels_f32)(const struct fx_conv_geom *g, const void *xp, int fmt, int64_t nb, int mr,
                      float *ap);
    /* The weight gradient's fp32 GEMM A panels straight from the padded chunk
     * (fx_conv_wpanels_f32_avx2, conv_panels.h), or 0 where it does not handle g or mr. NULL:
     * the patch matrix, packed by the GEMM. */
    int (*wpanels_f32)(const struct fx_conv_geom *g, const void *xp, int fmt, int64_t nb, int mr,
                       float *ap);
    /* The fused convolution epilogue (tensor_conv2d_bias_relu) on rows x cols fp32 values,
     * in place: v = v + bias[col] (when bias is not NULL; the ADD kernel's arithmetic and NaN
     * rule, v first), then the RELU kernel's x > 0 ? x : +0 with NaN kept (when relu). */
    void (*bias_relu_f32)(float *v, int64_t rows, int64_t cols, const float *bias, int relu);
    /* The AMX integer GEMM's A tiles straight from a convolution's channel-last byte planes
     * (fx_op_call.a_tiles; ctx: struct fx_conv_tiles, src/nn/conv_panels.h). NULL: the
     * kernel packs the rows of a_rows. */
    void (*tiles_i16)(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int8_t *ap);
    /* ... and the byte planes it reads: hi[i] = x[i] >> 8, lo[i] = x[i] & 255 */
    void (*byte_planes_i16)(const int16_t *x, int64_t n, int8_t *hi, int8_t *lo);
    /* The AMX integer GEMM's A tiles of a stride-1 weight gradient, from byte planes of the
     * padded NCHW chunk (ctx: struct fx_conv_wsrc, src/nn/conv_panels.h). NULL: the weight
     * gradient writes its patch matrix (im2col) and the GEMM packs it. */
    void (*wtiles_i16)(const void *ctx, int64_t i0, int m, int64_t k0, int64_t kc, int8_t *ap);
    /* bf16 weight gradient of one chunk straight from its padded input, on the pair GEMM's
     * arithmetic (fx_bf16_wgrad_direct, src/bf16/bf16_gemm.h: the same bits as the GEMM
     * route). NULL: patch matrix and GEMM. */
    void (*bf16_wgrad)(const struct fx_conv_geom *g, const uint16_t *xp, const uint16_t *dy,
                       int64_t nbc, uint32_t *scratch, float *dwt);
    /* the geometries bf16_wgrad takes and its scratch words for a chunk of nb images
     * (fx_bf16_wgrad_direct_fits and _scratch on the dpbf16 route, fx_bf16_wgrad_amx_* on the
     * AMX route, whose bits are its own); set with bf16_wgrad */
    int (*bf16_wgrad_fits)(const struct fx_conv_geom *g);
    int64_t (*bf16_wgrad_scratch)(const struct fx_conv_geom *g, int64_t nb);
    /* bf16 forward of one chunk without a patch matrix, in its own order of the products
     * (fx_bf16_fwd_direct, src/bf16/bf16_gemm.h), from the unpadded chunk x. NULL: patch
     * panels and GEMM. */
    void (*bf16_fwd)(const struct fx_conv_geom *g, const uint16_t *x, int64_t nbc,
                     const uint32_t *wq, uint32_t wkey, uint32_t *scratch, float *y,
                     uint16_t *ybf, int nthreads);
    /* the geometries bf16_fwd takes (fx_bf16_fwd_direct_fits on the dpbf16 route,
     * fx_bf16_fwd_amx_fits on the AMX route); set with bf16_fwd */
    int (*bf16_fwd_fits)(const struct fx_conv_geom *g);
    /* bf16 input gradient of a stride-2 convolution by phases on bf16_fwd's tiles, one chunk
     * (fx_bf16_dgrad_s2_direct on the dpbf16 route, fx_bf16_dgrad_s2_amx on the AMX route,
     * src/bf16/bf16_gemm.h, with the weights and scratch functions they share), and the
     * geometries it takes (fx_bf16_dgrad_s2_fits, fx_bf16_dgrad_s2_amx_fits). NULL: the
     * route's other input gradients (the pair GEMM and col2im; the fp32 direct kernel). */
    void (*bf16_dgrad_s2)(const struct fx_conv_geom *g, const uint16_t *dy, int64_t nbc,
                          const uint32_t *wq, uint32_t wkey, uint32_t *scratch, uint16_t *dx);
    int (*bf16_dgrad_s2_fits)(const struct fx_conv_geom *g);
    /* fp32 forward of one chunk without patch rows or panels (src/fp32/conv_f32_direct.h):
     * the GEMM route's chains in its order, so its bits. NULL: panels and GEMM. */
    void (*f32_fwd)(const struct fx_conv_geom *g, const float *xp, int64_t nbc, const float *wq,
                    const int64_t *off, float *y, int nthreads);
    /* fp32 input gradient of one chunk without a patch matrix or col2im (fx_f32_dgrad_direct,
     * src/fp32/conv_f32_direct.h): the GEMM's chains and col2im's additions in their order, so
     * their bits. NULL: the GEMM and col2im. */
    void (*f32_dgrad)(const struct fx_conv_geom *g, const float *dyp, int64_t nbc,
                      const float *wq, float *dx, int nthreads);
    /* where f32_dgrad runs: from min_c input channels (its vector width: narrower inputs
     * leave lanes empty, and the GEMM over the patch matrix wins there; C = 1, the CNN's first
     * layer, took 4.5 times the GEMM route's time on AVX-512), up to max_o output channels (0:
     * any; the depth of its chains, where AVX2's small tile lost to the GEMM) and from
     * min_taps taps (AVX2's 1 x 1 projections lost too). Measured per level: src/cpu/. */
    int64_t f32_dgrad_min_c, f32_dgrad_max_o, f32_dgrad_min_taps;
    /* fp32 weight gradient of one chunk without panels or packing (fx_f32_wgrad_direct,
     * src/fp32/conv_f32_direct.h): the GEMM's chains in their order, so its bits. NULL: the
     * panels and the GEMM. From f32_wgrad_min_o output channels (its vector width) up to
     * f32_wgrad_max_o (0: any), where the level measured it faster. */
    void (*f32_wgrad)(const struct fx_conv_geom *g, const float *xp, int64_t nbc,
                      const float *dyt, float *dwt, int nthreads);
    int64_t f32_wgrad_min_o, f32_wgrad_max_o;
    /* exact int16 forward of one chunk without a patch matrix (fx_i16_fwd_direct,
     * src/flex/conv_i16.h): the exact sums, so the patch GEMM's bits. Returns 0 for a chunk
     * whose data it declines, which then takes the GEMM. NULL: patch panels and GEMM. */
    int (*i16_fwd)(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                   const uint32_t *wq, uint32_t *scratch, int64_t *y, int nthreads,
                   uint64_t *ymax);
    /* 1: i16_fwd takes the chunk unpadded (nbc images of C x H x W) and pads while it copies
     * (AVX2, AVX-512); 0: the chunk padded by fx_conv_pad */
    int i16_fwd_unpadded;
    /* the same on AMX-INT8 tiles from byte planes it makes of the unpadded chunk
     * (fx_i16_fwd_amx, src/flex/conv_i16.h; never declines), taken before i16_fwd and the AMX GEMM's patch rows
     * where fx_i16_fwd_amx_fits while fx_gemm_i16_amx_on(). NULL: not installed. */
    int (*i16_fwd_amx)(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                       const uint32_t *wq, uint32_t *scratch, int64_t *y, int nthreads,
                       uint64_t *ymax);
    /* the same with its sums rounded in its epilogue into NCHW mantissas, at one exponent or
     * two (fx_i16_fwd_amx_round, src/flex/conv_i16.h: 0 where it declines); installed with
     * i16_fwd_amx */
    int (*i16_fwd_amx_round)(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                             const uint32_t *wq, uint32_t *scratch, int shift, int16_t *yq,
                             struct fx_qstats *part, int shift2, int16_t *yq2,
                             struct fx_qstats *part2);
    /* i16_fwd's kernel with the same rounding epilogue (fx_i16_fwd_direct_avx2_round,
     * fx_i16_fwd_direct_round; src/flex/conv_i16.h: 0 where it declines), for the chunks
     * i16_fwd takes; NULL: their sums are stored and rounded after */
    int (*i16_fwd_round)(const struct fx_conv_geom *g, const int16_t *xp, int64_t nbc,
                         const uint32_t *wq, uint32_t *scratch, int shift, int16_t *yq,
                         struct fx_qstats *part, int shift2, int16_t *yq2,
                         struct fx_qstats *part2);
    /* the stride-2 input gradient by phases of dy with the same rounding epilogue on i16_fwd's
     * register tiles (fx_i16_dgrad_s2_round, fx_i16_dgrad_s2_round_avx2: src/flex/conv_i16.h);
     * NULL: the phases' int64 sums are gathered and rounded after */
    int (*i16_dgrad_s2_round)(const struct fx_i16_dgrad_s2 *d, const int16_t *dy, int64_t nbc,
                              uint32_t *scratch, int shift, int16_t *dx, struct fx_qstats *part,
                              int shift2, int16_t *dx2, struct fx_qstats *part2);
    /* 1: a DFP16 convolution output of sums of more than FX_CONV_ALT_MAX_TERMS products that
     * this level stores chunk by chunk keeps them rounded to odd (cvt.round_odd_i64) beside
     * its rounding at the guess, in place of an int64 stage and of running again where the
     * write picks another exponent (src/nn/conv2d.c); 0: the stage and the runs again. Set
     * where the level measured it faster. */
    int i16_round_odd_keep;
    /* exact int16 weight gradient of one chunk without a patch matrix (fx_i16_wgrad_direct,
     * src/flex/conv_i16.h): the exact sums. Returns 0 for a chunk it declines, which then takes
     * the GEMM. NULL: patch matrix and GEMM. */
    int (*i16_wgrad)(const struct fx_conv_geom *g, const int16_t *xp, const int16_t *dy,
                     int64_t nbc, uint32_t *scratch, int64_t *dwt, int add);
    /* the largest stride (either axis) i16_wgrad takes (fx_i16_wgrad_direct_fits); 0 or 1:
     * stride 1 only */
    int i16_wgrad_max_stride;
    /* the same on AMX-INT8 tiles from the unpadded chunk x (fx_i16_wgrad_amx,
     * src/flex/conv_i16.h; never declines), taken before the AMX GEMM's tiles where
     * fx_i16_wgrad_amx_fits while fx_gemm_i16_amx_on(). NULL: not installed. */
    int (*i16_wgrad_amx)(const struct fx_conv_geom *g, const int16_t *x, const int16_t *dy,
                         int64_t nbc, uint32_t *scratch, int64_t *dwt, int add);
} fx_conv_kernels;

/* out[i] = a[i] + b[i] for i < n, fp16 or bf16 (f), with the epilogue kind (FX_HALF_ADD_*,
 * half_binary.h): the bits of half_binary.c's chunk route (widen, fp32 add, narrow, epilogue) in
 * one pass. gate: the ReLU inputs for FX_HALF_ADD_GATE, else unused. */
typedef void (*fx_half_add_fn)(fmt_t f, int kind, const uint16_t *a, const uint16_t *b,
                               const uint16_t *gate, uint16_t *out, int64_t n);

typedef struct fx_backend {
    const char *name;
    int available;
    /* stage ops: a kernel per compute format (NULL: none; the dispatcher widens to fp32) */
    fx_kernel kernels[FX_OP_STAGE_COUNT][FMT_COUNT];
    /* whole ops (FX_OP_CONV2D onwards, src/core/op_table.h): NULL where this level has none */
    fx_op_fn run[FX_OP_COUNT];
    /* Whether this backend computes (op, fmt), fmt being the format of the op's first input:
     * the question the dispatcher asks before it runs an op here (fx_cpu_supports_op for the
     * CPU levels, src/core/op_run.c). */
    int (*supports_op)(const struct fx_backend *b, int op, fmt_t fmt);
    fx_cvt_table cvt;
    fx_gemm_tuning gemm; /* what the GEMM kernels take pre-packed, and their tile sizes */
    fx_conv_kernels conv; /* the convolution's panel builders and fused epilogue */
    const struct fx_bn_kernels *bn; /* batch norm's kernels; NULL: the portable ones */
    const struct fx_ln_kernels *ln; /* layer norm's row kernels; NULL: the portable ones */
    fx_half_add_fn half_add;        /* NULL: half_binary.c's chunk route */
    /* The element-wise math's fp32 core on plain arrays (fx_f32_math_<level>, f32_math.h):
     * what fx_unary_stream runs on each block it widens. NULL: that route is not taken. */
    int (*unary_f32)(int fn, const double *p, const float *x, const float *dy, float *y,
                     int64_t n);
} fx_backend;

enum { FX_BACKEND_SCALAR = 0, FX_BACKEND_AVX2 = 1, FX_BACKEND_AVX512 = 2, FX_BACKEND_COUNT = 3 };

/* The supports_op of every CPU level (src/core/op_run.c): stage ops with a kernel for the
 * format or for fp32 (the dispatcher widens), whole ops with a run[op] entry. */
int fx_cpu_supports_op(const fx_backend *b, int op, fmt_t fmt);

/* Registry access (src/core/backend.c). Backends are built once, at first use. */
const fx_backend *fx_backend_get(int index); /* NULL for a bad index */
const fx_backend *fx_backend_active(void);
const fx_cpu_features *fx_cpu(void);
/* "GenuineIntel family 6 model 207": the key of the per-CPU tables and caches, as
 * flexpoint_cpu_model() reports it ("unknown" for an empty vendor) */
void fx_cpu_model_format(const fx_cpu_features *cpu, char *out, size_t n);

/* One installer per CPU level (src/cpu/<level>.c), each naming every kernel, conversion routine
 * and tuning value its level installs. The registry (src/core/backend.c) calls them in order:
 * scalar on a zeroed table; avx2 on a copy of the scalar table, avx512 on a copy of the avx2
 * one, each only on a CPU that runs that level. */
void fx_cpu_install_scalar(fx_backend *b, const fx_cpu_features *cpu);
void fx_cpu_install_avx2(fx_backend *b, const fx_cpu_features *cpu);
void fx_cpu_install_avx512(fx_backend *b, const fx_cpu_features *cpu);
/* The entries of one bf16 x bf16 MATMUL route (below) in an AVX-512 table (src/cpu/avx512.c):
 * installing the table's route and switching it later both go through here. */
void fx_cpu_avx512_bf16_gemm_route(fx_backend *b, int route);

/* Kernels chosen per CPU among routes of one op and format (src/core/backend.c). The bf16 x
 * bf16 MATMUL on AVX-512 has two: FX_BF16_GEMM_WIDEN (bf16 widened to fp32 while packed, fp32
 * FMAs: the fp32 MATMUL kernel) and FX_BF16_GEMM_DPBF16 (vdpbf16ps on bf16 pairs,
 * src/bf16/bf16_gemm.h; only with AVX512_BF16). Their sums run in different orders, so their
 * bits differ; flexpoint_kernel_name() reports the one in use. */
enum { FX_BF16_GEMM_WIDEN = 0, FX_BF16_GEMM_DPBF16 = 1, FX_BF16_GEMM_AMX = 2, FX_BF16_GEMM_ROUTES = 3 };
/* The route the table (src/bf16/bf16_route.c) prefers for a CPU that can run both; *why, if
 * not NULL, gets the entry's justification (a static string). -1 for a CPU the table does not
 * list: the backend then measures (src/core/kernel_choice.h). */
int fx_bf16_gemm_route_preferred(const fx_cpu_features *cpu, const char **why);
/* Route names ("widen", "dpbf16") and back (-1: unknown name) */
const char *fx_bf16_gemm_route_name(int route);
int fx_bf16_gemm_route_parse(const char *name);
/* Install a route in the AVX-512 backend: FX_OK, FX_EUNSUPPORTED when this CPU cannot run it.
 * Not while ops run on other threads. */
int fx_bf16_gemm_route_set(int route);
int fx_bf16_gemm_route(void); /* the route installed (FX_BF16_GEMM_WIDEN without AVX512_BF16) */

/* Scalar reference conversions (the definitions; src/fp16, src/bf16). */
uint16_t fx_f32_to_fp16(float x);
float fx_fp16_to_f32(uint16_t h);
uint16_t fx_f32_to_bf16(float x);
float fx_bf16_to_f32(uint16_t h);

#endif
