/* Shared-exponent (FLEX16_5, DFP16) kernels: declarations shared by the files of src/flex and
 * by the tests. No intrinsics here: this header is included by generic and ISA files alike.
 *
 * The *_scalar functions are the definitions (docs/formats.md made executable). Every other level
 * gives exactly their bits and statistics, for any length n >= 0 and any (unaligned) pointers,
 * and never touches src[n..] or dst[n..]. A *_avx2 function may only run on a CPU with
 * AVX2+FMA+F16C, an *_avx512 one on a CPU with AVX-512 F/BW/VL/DQ (and *_vnni with VNNI).
 *
 * The SIMD conversions vectorise the exponents every tensor can have, e in [-128, 127]
 * (FX_DFP_EXP_MIN..MAX); other exponents and stochastic rounding go to the scalar definition.
 */
#ifndef FX_FLEX_KERNELS_H
#define FX_FLEX_KERNELS_H

#include "../core/backend.h"

/* ---- conversions (fx_cvt_table entries) ------------------------------------------------- */
void fx_flex_quant_f32_scalar(const float *src, int16_t *dst, int64_t n, int e,
                              const fx_rounding *r, int64_t index0, fx_qstats *st);
void fx_flex_dequant_scalar(const int16_t *src, float *dst, int64_t n, int e);
void fx_flex_scaled_f32_scalar(const int16_t *src, float *dst, int64_t n, int64_t c, double p2);
/* cvt.round_odd_i64 (round_odd.c, round_odd_avx2.c) */
int fx_flex_round_odd_i64_scalar(const int64_t *src, int32_t *dst, int64_t n, int k);
int fx_flex_round_odd_i64_avx2(const int64_t *src, int32_t *dst, int64_t n, int k);
void fx_flex_quant_i64_scalar(const int64_t *src, int16_t *dst, int64_t n, int shift,
                              fx_qstats *st);
void fx_flex_maxabs_f32_scalar(const float *src, int64_t n, float *maxabs, int64_t *nonfinite);
typedef void (*fx_quant_i64_fn)(const int64_t *src, int16_t *dst, int64_t n, int shift,
                                fx_qstats *st);
/* Widen the n aligned sums of p into int64 (fx_sum2_at of each; a level's vector version). */
typedef void (*fx_sum2_widen_fn)(const fx_sum2 *p, int64_t n, int64_t *wide);
void fx_flex_sum2_widen_scalar(const fx_sum2 *p, int64_t n, int64_t *wide);
void fx_flex_sum2_quant_with(fx_quant_i64_fn quant_i64, fx_sum2_widen_fn widen, const fx_sum2 *p,
                             int64_t n, int16_t *dst, int shift, fx_qstats *st);
uint32_t fx_flex_sum2_maxabs_scalar(const fx_sum2 *p, int64_t n);

/* The rounding of aligned sums (|v| < 2^31) to int16 in int32 vector lanes, as the SIMD
 * sum2_quant kernels do it: right shifts 1 <= s <= 31 round to nearest even (beyond 31,
 * |v| < 2^31 <= half and everything rounds to 0: `gone`); left shifts s = -shift saturate above
 * thr = 32767 >> s (0 from s = 16 on; s = 32 shifts everything out). The lane constants of one
 * shift, derived once for every level's kernel. */
typedef struct fx_shift32 {
    int right, gone, s;
    int32_t rmask, half, thr;
} fx_shift32;

/* The statistics of a bias plane's int16 route (fx_sum2_quant_bias16 in quant_avx512.c and
 * quant_avx2.c) from its lanes' largest and smallest a (hi, lo) and largest |q| (qm): |v| =
 * |a 2^s + b| is largest at an extreme a (exact in int64: |v| < 2^31). */
static inline void fx_bias16_stats(const int16_t *hi, const int16_t *lo, const int16_t *qm,
                                   int lanes, int s, int32_t b, int64_t nsat, int64_t nuf,
                                   fx_qstats *st)
{
    int32_t ah = INT16_MIN, al = INT16_MAX, qo = 0;
    for (int l = 0; l < lanes; l++) {
        ah = hi[l] > ah ? hi[l] : ah;
        al = lo[l] < al ? lo[l] : al;
        qo = qm[l] > qo ? qm[l] : qo;
    }
    const int64_t vh = (int64_t)ah * (1 << s) + b, vl = (int64_t)al * (1 << s) + b;
    const int64_t ah_abs = vh < 0 ? -vh : vh, al_abs = vl < 0 ? -vl : vl;
    st->saturated = nsat;
    st->underflow = nuf;
    st->nonfinite = 0;
    st->max_abs_in = (double)(ah_abs > al_abs ? ah_abs : al_abs);
    st->max_abs_out = qo;
}

/* The int64 -> int16 rounding's fast route (quant_avx512.c, quant_avx2.c), right shifts
 * 1 <= s <= 47: T, the largest |v| that rounds to at most 32767 at shift s; and the statistics
 * of a call whose every |v| is at most T, from its largest |v| and its underflow count: nothing
 * saturated, and the largest |q| is the largest |v| rounded (rounding is odd and monotone). */
static inline int fx_q64_fast_ok(int shift) { return shift >= 1 && shift <= 47; }

static inline uint64_t fx_q64_fast_bound(int s)
{
    return ((uint64_t)FX_MANT_MAX << s) + ((uint64_t)1 << (s - 1)) - 1;
}

static inline void fx_q64_fast_stats_of(fx_qstats *st, uint64_t max_in, int64_t nuf, int s)
{
    st->saturated = 0;
    st->nonfinite = 0;
    st->underflow = nuf;
    st->max_abs_in = (double)max_in;
    st->max_abs_out = (int32_t)fx_rshift_rne((int64_t)max_in, s); /* max_in <= T < 2^62 */
}

static inline fx_shift32 fx_shift32_of(int shift)
{
    fx_shift32 k;
    k.right = shift >= 1;
    k.gone = shift >= 32;
    k.s = k.right ? (k.gone ? 31 : shift) : (shift < -31 ? 32 : -shift);
    k.rmask = k.right ? (int32_t)(((uint32_t)1 << k.s) - 1) : 0;
    k.half = k.right ? (int32_t)((uint32_t)1 << (k.s - 1)) : 0;
    k.thr = !k.right && k.s < 16 ? (FX_MANT_MAX >> k.s) : 0;
    return k;
}
void fx_flex_sum2_quant_scalar(const fx_sum2 *p, int64_t n, int16_t *dst, int shift,
                               fx_qstats *st);
uint32_t fx_flex_sum2_maxabs_avx512(const fx_sum2 *p, int64_t n);
void fx_flex_scale_quant_avx512(const int16_t *m, int32_t c, int64_t n, int16_t *dst, int shift,
                                fx_qstats *st);
void fx_flex_sum2_quant_avx512(const fx_sum2 *p, int64_t n, int16_t *dst, int shift,
                               fx_qstats *st);
void fx_flex_sum2_quant_gated_avx512(const fx_sum2 *p, int64_t n, int16_t *dst, int shift,
                                     fx_qstats *st, const int16_t *gate, int16_t *gdst,
                                     fx_qstats *gst);

void fx_flex_quant_f32_avx2(const float *src, int16_t *dst, int64_t n, int e,
                            const fx_rounding *r, int64_t index0, fx_qstats *st);
void fx_flex_dequant_avx2(const int16_t *src, float *dst, int64_t n, int e);
void fx_flex_scaled_f32_avx2(const int16_t *src, float *dst, int64_t n, int64_t c, double p2);
void fx_flex_quant_i64_avx2(const int64_t *src, int16_t *dst, int64_t n, int shift,
                            fx_qstats *st);
void fx_flex_quant_i64_t_avx2(const int64_t *src, int16_t *dst, int64_t rows, int64_t cols,
                              int shift, fx_qstats *st);
void fx_flex_maxabs_f32_avx2(const float *src, int64_t n, float *maxabs, int64_t *nonfinite);
uint64_t fx_flex_maxabs_i64_avx2(const int64_t *src, int64_t n);
uint32_t fx_flex_sum2_maxabs_avx2(const fx_sum2 *p, int64_t n);
void fx_flex_scale_quant_avx2(const int16_t *m, int32_t c, int64_t n, int16_t *dst, int shift,
                              fx_qstats *st);
void fx_flex_sum2_quant_avx2(const fx_sum2 *p, int64_t n, int16_t *dst, int shift,
                             fx_qstats *st);

void fx_flex_quant_f32_avx512(const float *src, int16_t *dst, int64_t n, int e,
                              const fx_rounding *r, int64_t index0, fx_qstats *st);
void fx_flex_dequant_avx512(const int16_t *src, float *dst, int64_t n, int e);
void fx_flex_scaled_f32_avx512(const int16_t *src, float *dst, int64_t n, int64_t c, double p2);
void fx_flex_quant_i64_avx512(const int64_t *src, int16_t *dst, int64_t n, int shift,
                              fx_qstats *st);
void fx_flex_quant_i64_t_avx512(const int64_t *src, int16_t *dst, int64_t rows, int64_t cols,
                                int shift, fx_qstats *st);
void fx_flex_maxabs_f32_avx512(const float *src, int64_t n, float *maxabs, int64_t *nonfinite);
uint64_t fx_flex_maxabs_i64_avx512(const int64_t *src, int64_t n);

/* ---- integer-only op kernels (fx_kernel; operand data are const int16_t *) ---------------- */
int fx_flex_copy_scalar(const fx_op_call *c);
int fx_flex_add_scalar(const fx_op_call *c);
int fx_flex_sub_scalar(const fx_op_call *c);
int fx_flex_mul_scalar(const fx_op_call *c);
int fx_flex_scale_scalar(const fx_op_call *c);
int fx_flex_relu_scalar(const fx_op_call *c);
int fx_flex_sum_scalar(const fx_op_call *c);
int fx_flex_matmul_scalar(const fx_op_call *c);

/* A level's kernels of FX_OP_SUM: the sum of n contiguous int16 (inner == 1), and the column
 * sums out[i] = sum over k < len of src[k * inner + i], i < inner (overwritten) */
typedef int64_t (*fx_sum_row_fn)(const int16_t *src, int64_t n);
typedef void (*fx_sum_rows_fn)(const int16_t *src, int64_t len, int64_t inner, int64_t *out);
/* FX_OP_SUM of [outer, len, inner] int16 into c->out_i64 ([outer, inner]) with a level's
 * kernels (src/flex/sum_drive.c): outer items shared among the threads, or, where there are
 * fewer of them than threads (a bias gradient: outer 1), each item's rows split over the
 * threads into exact int64 partial sums. Never fails. */
int fx_flex_sum_drive(const fx_op_call *c, fx_sum_row_fn row, fx_sum_rows_fn cols);

int fx_flex_sum_avx2(const fx_op_call *c); /* intops_ew_avx2.c */
int fx_flex_matmul_avx2(const fx_op_call *c);
/* Whether it takes an [M, K] x [K, N] product with fx_op_call.out_i16 (fx_gemm_i16_rounds). */
int fx_flex_matmul_avx2_rounds(int64_t M, int64_t K, int64_t N);

int fx_flex_relu_avx512(const fx_op_call *c); /* intops_ew_avx512.c */
int fx_flex_add_avx512(const fx_op_call *c);
int fx_flex_sub_avx512(const fx_op_call *c);
int fx_flex_sum_avx512(const fx_op_call *c);
int fx_flex_matmul_avx512bw(const fx_op_call *c);   /* vpmaddwd + vpaddd */
int fx_flex_matmul_avx512vnni(const fx_op_call *c); /* vpdpwssd */
/* Whether those kernels take an [M, K] x [K, N] product with fx_op_call.out_i16, rounding its
 * sums instead of writing an int64 stage (fx_gemm_i16_rounds; fx_gemm_tuning.i16_rounds). */
int fx_flex_matmul_avx512bw_rounds(int64_t M, int64_t K, int64_t N);
int fx_flex_matmul_avx512vnni_rounds(int64_t M, int64_t K, int64_t N);
/* The AMX-INT8 kernel (src/flex/gemm_i16_amx.c): plain operands of at least 16 x 32 x 16 on
 * byte tiles, anything else (pre-packed or on-demand A, small products) handed to
 * fx_flex_matmul_avx512vnni; the same exact int64 sums. Whether this process may run it (the
 * CPU's amx_int8 and the kernel's permission, asked once), and the tile products' rate in
 * operations per second of the calling thread's CPU time (only where usable). */
int fx_flex_matmul_amx(const fx_op_call *c);
/* Its out_i16 products: those it rounds itself (fx_gemm_i16_amx_rounds), and those the
 * vpdpwssd kernel rounds (fx_flex_matmul_avx512vnni_rounds) */
int fx_flex_matmul_amx_rounds(int64_t M, int64_t K, int64_t N);
/* B (K x N int16, strides sbk and sbn) packed once in that kernel's byte tiles, for many
 * products with it (fx_op_call.b_amx_i16): fx_gemm_i16_amx_b_bytes(K, N) bytes at bpk,
 * 64-byte aligned. AVX-512 code: call only where the AMX kernel runs. */
int64_t fx_gemm_i16_amx_b_bytes(int64_t K, int64_t N);
void fx_gemm_i16_amx_pack_b(const int16_t *b, int64_t sbk, int64_t sbn, int64_t K, int64_t N,
                            int8_t *bpk);
int fx_amx_int8_usable(const fx_cpu_features *cpu);
double fx_amx_int8_rate(long iters, int reps);
/* The register tile of the AVX-512 integer MATMUL kernels: the A panel height they take and
 * their width in output columns (fx_backend.gemm.i16_panel_mr, gemm.i16_tile_nr) */
#define FX_FLEX_MR_AVX512 6
#define FX_FLEX_NR_AVX512 32
#define FX_FLEX_NR_NARROW_AVX512 16 /* the tile of products of at most 16 columns */

/* A kernel for both int16 formats, which share every integer kernel (src/cpu/<level>.c). */
static inline void fx_flex_set_kernel(fx_backend *b, fx_op op, fx_kernel k)
{
    b->kernels[op][FMT_FLEX16_5] = k;
    b->kernels[op][FMT_DFP16] = k;
}

/* Matmuls with fewer multiply-adds than this run the scalar kernel on every level: packing
 * would cost more than it saves, and the scalar kernel needs no scratch memory. */
#define FX_FLEX_MATMUL_SIMD_MIN_MACS 2048

/* Elementwise kernels use threads only above this many elements (they are memory-bound). */
#define FX_FLEX_PAR_MIN_ELEMS ((int64_t)1 << 17)

/* Elements ahead that the SIMD streaming conversions (fp32 -> int16, int64 -> int16, the fp32
 * maximum) ask for with a prefetch instruction: 2 KiB of floats, 4 KiB of int64 sums. On the
 * Xeon reporting model 167 (a KVM guest) the hardware prefetchers alone left these loops
 * waiting on memory: fp32 -> int16 over 64 MB streamed at 0.69 ns a value on AVX-512 and 2.4
 * on AVX2 without it, 0.39-0.48 and 0.52 with it (0.24 and 0.43 in cache). A prefetch past the
 * end of an array is a hint that cannot fault. */
#define FX_Q_PREFETCH 512

/* The transposed rounding (quant_i64_t) writes one short run into each of a block's column
 * planes, more streams than a hardware prefetcher follows, into an output written once per op,
 * so each line's first store waited for memory: both levels read each plane's line this many
 * bytes (two lines) ahead of the stores. Conv2's [196, 64] samples into a cold output on the
 * Zen 4: 0.56-0.69 -> 0.41-0.52 ns a value (AVX2 code 1.06-1.19 -> 0.62-0.71); one line ahead
 * 0.55, three 0.46-0.55. */
#define FX_Q_T_STORE_AHEAD 128

#endif
