/* The CUDA backend's kernel launchers and runtime wrappers, callable from C (the gpu_*.c files) and
 * implemented in the .cu files behind extern "C". Everything here works on device memory and
 * knows nothing about tensors, Autoflex or the write path; src/gpu/gpu_dispatch.c does.
 *
 * Status: every function returns FX_OK, FX_EDEVICE (a launch or CUDA call failed; the message,
 * set through fx_error, names `func` and carries the CUDA error text), or FX_EUNSUPPORTED for
 * sizes one launch or cuBLAS cannot take (said where it applies). Launchers
 * with n == 0 do nothing. Work is issued on the legacy default stream of the current device;
 * the D2H copies of statistics (fx_gr_memcpy) order it with the host. */
#ifndef FX_GPU_KERNELS_H
#define FX_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "flexpoint.h"
#include "../flex/flex_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's error setter (src/core/error.c), declared here for the C++ side. */
int fx_error(int code, const char *func, const char *fmt, ...);

/* A strided view of elements in device memory: element i of the row-major order of `shape`
 * lives at base + offset(i) elements, offset(i) = sum_d idx_d(i) * strides[d] (stride 0 for
 * broadcast dimensions). */
typedef struct fx_dview {
    void *base;     /* element [0, ..., 0] */
    int fmt;        /* fmt_t of the stored elements */
    int exp;        /* shared exponent (FLEX16_5, DFP16), unless exp_dev is set */
    const int *exp_dev; /* NULL, or device memory holding the shared exponent: a write whose
                           exponent the device chose and the host has not collected yet
                           (gpu_dispatch.c); kernels read it from there, in stream order */
    int ndim;
    int contiguous; /* 1: offset(i) = i (saves the index arithmetic) */
    int64_t shape[FX_MAX_DIMS];
    int64_t strides[FX_MAX_DIMS];
} fx_dview;

/* An exponent as kernels receive it: c plus the ints at cell[0] and cell[1] (device memory;
 * NULL entries count 0). Exponents the host knows have no cells; one that a pending device
 * write chose is a cell, and a stage's exponent can be the sum of two (a product's ea + eb).
 * Built by fx_dexp_* (gpu_dispatch.c). */
typedef struct fx_dexp {
    int c;
    const int *cell[2];
} fx_dexp;

/* Statistics of a staged result, reduced on the device by the kernel that produces the stage
 * (in its epilogue) or by fx_gk_maxabs_* for stages written by cuBLAS. */
typedef struct fx_dstage_stats {
    unsigned long long imax;      /* int64 stage: largest |v| */
    unsigned long long nonfinite; /* fp32 stage: NaN/Inf values */
    unsigned int fmax;            /* fp32 stage: largest finite |x|, as float bits (ordered
                                     like the values, since they are >= 0) */
    unsigned int nonzero;         /* fx_gk_any_nonzero: 1 if any element is nonzero */
} fx_dstage_stats;

/* Statistics of one quantisation (fx_qstats, reduced on the device). */
typedef struct fx_dquant_stats {
    unsigned long long saturated, nonfinite, underflow;
    unsigned long long in_imax; /* int64 input: largest |v| */
    unsigned int in_fmax;       /* fp32 input: largest finite |x| as float bits */
    unsigned int max_out;       /* largest |m| stored */
} fx_dquant_stats;

/* ---- runtime (gpu_runtime.cu) ------------------------------------------------------------ */
int fx_gr_device_count(void); /* 0 when there is no driver or device */
int fx_gr_set_device(int device, const char *func);
int fx_gr_get_device(int *device, const char *func);
int fx_gr_device_name(int device, char *buf, size_t n, const char *func);
/* Device memory through the caching allocator (gpu_alloc.cu): fx_gr_free keeps the block for
 * reuse by a later fx_gr_malloc of the same size class on the same device (safe because all
 * work runs on the legacy default stream); fx_gr_release_cache gives every cached block back. */
int fx_gr_malloc(size_t bytes, void **p, const char *func);
void fx_gr_free(void *p);
void fx_gr_release_cache(void);
enum { FX_GR_H2D = 0, FX_GR_D2H = 1, FX_GR_D2D = 2 };
/* A copy in stream order. D2H waits for the device (the bytes are in dst on return); H2D of up
 * to 4 MiB goes through a pinned staging buffer and is only queued (gpu_h2d_stage.cu: src may
 * be reused at once, later work sees the bytes); larger H2D copies wait. */
int fx_gr_memcpy(void *dst, const void *src, size_t bytes, int dir, const char *func);
/* The staged H2D copy behind fx_gr_memcpy: *staged = 1 if it took the copy (then its status),
 * 0 if the caller must copy synchronously (too large, or no pinned memory). */
int fx_gr_h2d_staged(void *dst, const void *src, size_t bytes, int *staged, const char *func);
/* Give the staging buffers back to CUDA (fx_gr_release_cache; made again when next needed). */
void fx_gr_stage_release(void);
int fx_gr_memset0(void *p, size_t bytes, const char *func);
/* Wait for the device's work and report any asynchronous kernel failure. */
int fx_gr_sync(const char *func);
/* The end of an op: report errors already known without waiting for the device (ops are
 * asynchronous), or wait as fx_gr_sync when FLEXPOINT_GPU_SYNC=1. */
int fx_gr_op_done(const char *func);
/* Count one wait of the host for the device (flexpoint_gpu_host_waits). */
void fx_gr_count_wait(const char *what, const char *func);
/* the count of those waits (flexpoint_gpu_host_waits) */
long long fx_gr_host_waits(void);

/* Statistics slots (gpu_stats_slot.cu): pinned host memory of up to 256 bytes with a CUDA
 * event, pooled per device. get: a slot of the current device for `bytes`; put: back to the
 * pool of `device` (no wait needed: see the file); fill: queue an asynchronous copy of `bytes`
 * of device memory into the slot and record its event; wait: until that copy has landed
 * (counted as a host wait only when it had not). */
int fx_gr_slot_get(size_t bytes, void **host, void **event, const char *func);
void fx_gr_slot_put(int device, void *host, void *event);
int fx_gr_slot_fill(void *host, const void *dev, size_t bytes, void *event, const char *func);
int fx_gr_slot_wait(void *event, const char *func);
/* Wait until `event` (a cudaEvent_t) has completed, counted as a host wait only when it had
 * not; `what` names the wait in an error message. */
int fx_gr_event_wait(void *event, const char *what, const char *func);
/* Give a device's slots back to CUDA when none is held (fx_gr_release_cache). */
void fx_gr_slot_release(void);

/* out[M,N] (fp32, row-major, contiguous) = a[M,K] x b[K,N] with cuBLAS (cublasGemmEx, fp32
 * compute and accumulation). a and b are FP32, FP16 or BF16 views with any 2-D strides; when
 * both have the same 16-bit format and a cuBLAS-compatible layout they are used directly,
 * otherwise they are widened into contiguous fp32 copies first. The cuBLAS handle of the current
 * device is created on the first call. */
int fx_gr_gemm_float(const fx_dview *a, const fx_dview *b, float *out, const char *func);

/* out[M][N] (int32, row-major) = (accumulate ? out : 0) + sum over k of a[m][k] * b[n][k], for
 * int8 a [M][K] and b [N][K] (row-major, row length K) on the int8 tensor cores through cuBLAS.
 * Exact while no sum leaves int32 (the caller's K chunking). Asynchronous. */
int fx_gr_gemm_s8_tn(int64_t N, int64_t M, int64_t K, const int8_t *b, const int8_t *a,
                     int accumulate, int32_t *out, const char *func);

/* ---- kernels (gpu_kernels.cu) ------------------------------------------------------------ */

/* Elementwise ops, also the conversions (COPY). */
enum {
    FX_GEW_COPY = 0, /* a */
    FX_GEW_NEG,      /* -a (integer only) */
    FX_GEW_RELU,
    FX_GEW_ADD,
    FX_GEW_SUB,
    FX_GEW_MUL,
    FX_GEW_SCALE
};

/* Float compute: every input element is widened to fp32 exactly as on the CPU (fp16/bf16
 * exact, shared-exponent m * 2^e through double), then one IEEE fp32 operation (ADD, SUB, MUL:
 * a op b; SCALE: a * scalar; RELU: x > 0 || NaN ? x : +0; COPY: a) into out[i] (contiguous).
 * b is used by ADD/SUB/MUL only. st (may be NULL): largest finite |out| and NaN/Inf count. */
int fx_gk_float_ew(int op, const fx_dview *a, const fx_dview *b, float scalar, float *out,
                   int64_t n, fx_dstage_stats *st, const char *func);

/* Integer compute on int16 mantissas, exact int64 results (src/flex/intops_scalar.c):
 * COPY a; NEG -a; RELU max(a, 0); ADD/SUB a, b aligned to exponent ec (fx_align_to);
 * MUL a*b; SCALE a*smant. st (may be NULL): largest |out| (imax). */
int fx_gk_int_ew(int op, const fx_dview *a, const fx_dview *b, int ec, int64_t smant,
                 int64_t *out, int64_t n, fx_dstage_stats *st, const char *func);

/* ADD/SUB of int16 views whose exponents live in device memory (exp_dev): the same values as
 * fx_gk_int_ew with the host's choice made on the device (gpu_dispatch.c fx_gpu_int_ew): ec =
 * fx_align_exp(ea, eb), except that when the exponents lie more than FX_ALIGN_SPAN apart and
 * the operand with the larger one is all zero, the result is the other operand (negated for
 * b in a SUB) at its own exponent. Two launches: the zero check (it returns at once unless the
 * gap is that large; aux must be zeroed first), then the op, whose first thread writes the
 * result's exponent to *ec_out (device memory). */
int fx_gk_int_addsub_dev(int op, const fx_dview *a, const fx_dview *b, int64_t *out, int64_t n,
                         fx_dstage_stats *st, fx_dstage_stats *aux, int *ec_out,
                         const char *func);

/* *out = the value of x (one thread; device memory), in stream order. */
int fx_gk_exp_eval(fx_dexp x, int *out, const char *func);

/* st->nonzero = 1 if any of the n int16 elements of a is nonzero (st must be zeroed first). */
int fx_gk_any_nonzero(const fx_dview *a, int64_t n, fx_dstage_stats *st, const char *func);

/* out[o*inner + i] = sum_k a[(o*len + k)*inner + i] (indices in a's row-major order).
 * int_compute: exact int64 sums of the int16 mantissas into out (int64_t *), stats imax;
 * else fp32 sums of the widened elements into out (float *), stats fmax/nonfinite. Each sum:
 * 256 threads add every 256th term in order, then a balanced tree of 8 levels. */
int fx_gk_sum(const fx_dview *a, int int_compute, int64_t outer, int64_t len, int64_t inner,
              void *out, fx_dstage_stats *st, const char *func);

/* out[M,N] (int64, row-major, contiguous) = a[M,K] x b[K,N], int16 mantissas with any strides;
 * the exact sums of the products (the integer GEMM scheme is described in gpu_gemm_i16.cu).
 * st (may be NULL): largest |out|, reduced in the kernel's epilogue. */
int fx_gk_matmul_i16(const fx_dview *a, const fx_dview *b, int64_t *out, fx_dstage_stats *st,
                     const char *func);

/* Which scheme fx_gk_matmul_i16 uses (tests and benchmarks compare them; both give the same
 * bits): AUTO picks by size, IMAD is the CUDA-core kernel, TC the int8 tensor-core split. */
enum { FX_GK_I16_AUTO = 0, FX_GK_I16_IMAD = 1, FX_GK_I16_TC = 2 };
void fx_gk_matmul_i16_set_path(int path);
/* The tensor-core split's K chunk (the depth summed in one int32 pass; rounded down to a
 * multiple of 16, at most and by default FX_GK_I16_TC_CHUNK). Tests shrink it to exercise the
 * chunk loop; 0 restores the default. */
#define FX_GK_I16_TC_CHUNK 32768
void fx_gk_matmul_i16_set_chunk(int64_t k);

/* Stage statistics of a contiguous fp32 or int64 array (for stages cuBLAS wrote). */
int fx_gk_maxabs_f32(const float *src, int64_t n, fx_dstage_stats *st, const char *func);

/* fp32 -> int16 mantissas at exponent e (fx_quant1_f32 per element, stochastic draws keyed by
 * the element index as on the CPU), into dst (any strides; NULL: statistics only). q must be
 * zeroed first. e_dev: NULL, or device memory holding the exponent to use instead of e (an
 * exponent chosen on the device, fx_gk_dfp16_exp). */
int fx_gk_quant_f32(const float *src, int64_t n, int e, const int *e_dev, const fx_rounding *r,
                    const fx_dview *dst, fx_dquant_stats *q, const char *func);

/* A rounding that happens only if *only_if (device memory) is nonzero when it runs: the
 * recompute of a saturated write decided on the device (fx_gk_recompute_exp). Otherwise as
 * fx_gk_quant_f32 / fx_gk_quant_i64 with e_dev. */
int fx_gk_quant_f32_if(const float *src, int64_t n, const int *e_dev, const int *only_if,
                       const fx_rounding *r, const fx_dview *dst, fx_dquant_stats *q,
                       const char *func);
int fx_gk_quant_i64_if(const int64_t *src, int64_t n, fx_dexp src_exp, const int *e_dev,
                       const int *only_if, const fx_dview *dst, fx_dquant_stats *q,
                       const char *func);

/* int64 values at exponent src_exp -> int16 mantissas at exponent e by fx_requant(v, e -
 * src_exp) into dst (any strides; NULL: statistics only). q must be zeroed first. e_dev as in
 * fx_gk_quant_f32. */
int fx_gk_quant_i64(const int64_t *src, int64_t n, fx_dexp src_exp, int e, const int *e_dev,
                    const fx_dview *dst, fx_dquant_stats *q, const char *func);

/* Requantise n contiguous mantissas in place by fx_requant(m, shift) (shared_exp.c's rescale
 * of a storage to another exponent), adding the saturated count to *sat (device memory). */
int fx_gk_rescale_i16(int16_t *m, int64_t n, int shift, unsigned long long *sat,
                      const char *func);

/* DFP16's exponent for a stage (store.c's choice, on the device: fx_dfp16_write_exp of the
 * stage's maximum; st: an fp32 stage when f32, else int64 values at stage_exp), written by one
 * thread to *e_out and, when cell is not NULL, to *cell (device memory), in stream order
 * before the kernels that read them. */
int fx_gk_dfp16_exp(const fx_dstage_stats *st, int f32, fx_dexp stage_exp, int cur_e, int lo,
                    int hi, int *e_out, int *cell, const char *func);

/* Overflow mode RECOMPUTE on the device (store.c's rule, fx_recompute_exp): q holds the
 * statistics of the write rounded at e (its input maximum is the stage's: an fp32 stage's
 * largest finite |x| when f32, else int64 values at stage_exp). One thread writes the kept
 * exponent to *e_out and *cell, and to *redo whether it differs from e. */
int fx_gk_recompute_exp(const fx_dquant_stats *q, int f32, fx_dexp stage_exp, int e, int lo,
                        int hi, int *e_out, int *redo, int *cell, const char *func);

/* Store a stage into a float-format destination (FP32, FP16, BF16; any strides): fp32 values
 * (f32 != NULL) round once to the format; int64 values at exponent exp become v * 2^exp in
 * double, then fp32 (round-to-odd when the destination is 16-bit), then the format. */
int fx_gk_store_float(const float *f32, const int64_t *i64, fx_dexp exp, int64_t n,
                      const fx_dview *dst, const char *func);

/* Raw copy of the n elements of v (2 or 4 bytes each, row-major order) into contiguous dst. */
int fx_gk_gather(const fx_dview *v, int64_t n, void *dst, const char *func);

/* ---- operand preparation (gpu_dispatch.c), for the C files of the backend -----------------
 * A float view used as an operand of an integer op, quantised at its exact exponent (as the
 * host's fx_quantize_exact and the elementwise ops and matmul on the device): *v becomes a
 * contiguous DFP16 view of new device memory *owned, which the caller releases with
 * fx_gr_free. Uses the current device. */
int fx_gpu_quantize_exact_owned(fx_dview *v, void **owned, const char *func);

#ifdef __cplusplus
}
#endif
#endif
