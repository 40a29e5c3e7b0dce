/* The dispatcher's internal interface: stages, the one write path, and input preparation. */
#ifndef FX_CORE_DISPATCH_H
#define FX_CORE_DISPATCH_H

#include "backend.h"
#include "fx_hd.h"

#include <math.h>
#include <string.h>

/* Stage kinds: fp32 values; exact int64 values at an exponent; int16 mantissas at an exponent
 * (FX_STAGE_I16: outputs that select or mask their input's mantissas, such as relu and max-
 * pooling, whose values need no widening; 2 bytes per value instead of 8 through the write). */
enum { FX_STAGE_F32 = 0, FX_STAGE_I64 = 1, FX_STAGE_I16 = 2 };

/* A pending write: n values in row-major order of the destination's logical shape, either
 * fp32 values or exact int64 values at exponent `exp`. */
typedef struct fx_stage {
    int kind;
    int64_t n;
    const float *f32;
    const int64_t *i64;
    int exp;
    int imax_known; /* integer stages: imax = max |value|, computed by the producer */
    uint64_t imax;
    const int16_t *i16; /* FX_STAGE_I16 values (at exponent exp) */
    /* FX_STAGE_F32 when f32_max_known: the producer kept the write's scan statistics, the
     * largest finite |value| (f32_max) and the count of NaN/Inf values (f32_nonfinite) */
    int f32_max_known;
    float f32_max;
    int64_t f32_nonfinite;
} fx_stage;

/* The one write path (src/core/store.c): float outputs round once to their format; shared-
 * exponent outputs choose the exponent (DFP16 exact, FLEX16_5 Autoflex), quantise with
 * statistics, and update the tensor's counters and trace. Nothing is written on failure. */
int fx_write(tensor_t *out, const fx_stage *s, const char *func);

/* A pending write into a shared-exponent tensor as the exponent logic sees it, wherever its
 * values live: statistics already reduced over the staged values, and a quantiser. fx_write
 * (host stages) and the CUDA write path (src/gpu) both end in fx_write_shared_with, so the
 * exponent choice (DFP16 exact, FLEX16_5 Autoflex with trials and recompute), the statistics
 * and the trace are one code for every device. */
typedef struct fx_shared_src {
    int kind;          /* FX_STAGE_F32 or FX_STAGE_I64 */
    int exp;           /* exponent of int64 values */
    double true_max;   /* largest finite |value|, real units (0 if none) */
    int64_t nonfinite; /* NaN/Inf values */
    uint64_t imax;     /* int64 stages: largest |value| in integer units */
    void *ctx;
    /* Quantise the staged values at exponent e with rounding r, filling *q (overwritten).
     * keep != 0 stores the mantissas into the destination; keep == 0 is a statistics-only
     * trial. Returns FX_OK or a status (with the message set). */
    int (*quantize)(void *ctx, int e, const fx_rounding *r, int keep, fx_qstats *q);
} fx_shared_src;

/* Choose the exponent of out's storage (kept for partial views), quantise through src, and
 * update the storage's exponent, Autoflex state, statistics, counters and trace. On a failed
 * quantise the state is unchanged (the destination's elements may not be). */
int fx_write_shared_with(tensor_t *out, const fx_shared_src *src, const char *func);

/* The exponent that the next fx_write_shared_with into out will choose, when it is decided by
 * out's state alone: out is a whole FLEX16_5 tensor (host or device) whose Autoflex state is
 * unmanaged or already initialised (the prediction then reads only the history). Returns 1 and
 * sets *e, or 0 (DFP16, partial views, a first write). An op may round its results at *e
 * while they are still in cache (host) or before it reads any statistics back (device); the
 * write still decides, and asks for another exponent only when a saturated write is
 * recomputed. */
int fx_write_shared_peek_exp(const tensor_t *out, int *e);

/* A guess at the exponent the next fx_write_shared_with into out will choose, for host ops
 * that round their results speculatively while they are in cache: FLEX16_5 as
 * fx_write_shared_peek_exp (then the guess is the choice, a recomputed overflow aside); a
 * whole DFP16 tensor with no write pending, its current exponent (its writes' exact exponents
 * follow the scale of the data, which in training moves by a factor of two only now and
 * then). Returns 1 and sets *e, or 0. The write still decides; where it picks another
 * exponent the op rounds again, so a wrong guess costs one pass and changes no result. */
int fx_write_shared_guess_exp(const tensor_t *out, int *e);

/* Whether the guess (fx_write_shared_guess_exp) held for each of out's last
 * FX_GUESS_STEADY_WRITES writes. An op that must do its work again when the guess misses (it
 * kept too little to round once more) takes that route only then: a DFP16 gradient whose
 * maximum hovers at a power of two moves its exponent every other write. Before the first
 * write, whose guess is the initial exponent rather than a prediction, it is never steady; that
 * write counts as no miss. */
#define FX_GUESS_STEADY_WRITES 4
int fx_write_shared_guess_steady(const tensor_t *out);

/* For a DFP16 tensor, the exponent it left at its last move: where its maximum hovers at a
 * power of two, the choice a write makes when it is not the guess (fx_write_shared_guess_exp,
 * the current exponent). An op whose guesses are not steady may round at both and keep the
 * one the write picks. Returns 1 and sets *e (never the guess), or 0 (not DFP16, no move
 * since the first write, partial views, a write pending). */
int fx_write_shared_alt_exp(const tensor_t *out, int *e);

/* ---- writes rounded at a guessed exponent (src/core/guessed_write.c) ----------------------
 * A producer that makes a FLEX16_5/DFP16 output's values while they are in cache can round
 * them there at the exponent the write is expected to choose, instead of storing an fp32 stage
 * that the write reads back. round_all(ctx, dst, e, r, q) makes every value again and rounds it
 * at e with rounding r (each value at its own element offset, for stochastic rounding) into dst
 * (NULL: a statistics-only trial), the rounding's statistics into *q (overwritten): FX_OK or a
 * status with the message set. */
typedef int (*fx_round_all_fn)(void *ctx, int16_t *dst, int e, const fx_rounding *r,
                               fx_qstats *q);

/* Whether out may be written so, with *e the exponent to round at: a whole host FLEX16_5/DFP16
 * tensor whose write cannot fail (its mantissas are overwritten before the write decides) and
 * whose exponent can be guessed (fx_write_shared_guess_exp); DFP16 only while its guesses have
 * held (a gradient whose maximum hovers at a power of two would be made twice every other
 * write, where an fp32 stage is cheaper). The caller also checks that no input shares out's
 * storage: its values may be made again after out's mantissas are written. */
int fx_guessed_write_ok(const tensor_t *out, int *e);

/* out's write by round_all: every value rounded at e with the write's rounding into out's
 * mantissas, then fx_write_shared_with, which calls round_all again where it picks another
 * exponent or runs a trial; each write that rounded again adds 1 to *missed (NULL: not
 * counted). FX_OK or the write's or round_all's status. The mantissas, the exponent and the
 * statistics are those of the stage route. */
int fx_guessed_write(tensor_t *out, int e, fx_round_all_fn round_all, void *ctx, int64_t *missed,
                     const char *func);

/* Whether a write into out decides alone, with no collective among ranks (every storage but
 * one rank's rows of a distributed batch, FX_DIST_ROWS). Only then may a source's quantiser
 * fail part-way through a write and the op try again: every rank must call the collectives
 * of a write alike. */
int fx_write_shared_local(const tensor_t *out);

/* Whether a write of an int16 stage (fx_write_i16, fx_write_i16_max) into out cannot fail: a
 * whole host FLEX16_5/DFP16 tensor, no storage of a distributed trainer, no write pending, and
 * writes decided at once (not the host's deferred test mode, whose launch allocates). Its
 * settle, decision and quantiser then return no error (a trace that cannot grow only sets the
 * message), so an op may store a second output of its own before that write (the max-pool
 * indices) and still leave both untouched on any failure before it. */
int fx_write_i16_cannot_fail(const tensor_t *out);

/* ---- writes whose statistics arrive later ----------------------------------------------------
 * A backend whose statistics arrive late (the GPU: a copy from device memory) can launch a
 * whole write without waiting for them when the write's exponent follows from the storage's
 * state and the write's own data by a fixed rule the backend can apply itself:
 *   FX_LAUNCH_KEEP      FLEX16_5, decided by the Autoflex history alone and never revisited
 *                       (overflow_mode KEEP, or unmanaged): the exponent is known at launch;
 *   FX_LAUNCH_RECOMPUTE FLEX16_5 under overflow_mode RECOMPUTE ("robust"): rounded at the
 *                       history's prediction, then at fx_recompute_exp(...) if that differs;
 *   FX_LAUNCH_EXACT     DFP16: fx_dfp16_write_exp of the stage's maximum.
 * The backend rounds by the rule, keeps its statistics and quantisations for collection, and
 * fx_write_shared_launched moves the write counters (and the exponent, when the backend knows
 * it at launch). fx_storage_settle (internal.h) completes the write later: it decides the
 * write again with the core's own code from the collected statistics (checking that the
 * backend kept the exponent the core asks for), then updates the exponent, the Autoflex
 * history, the statistics and the trace exactly as fx_write_shared_with would have done at
 * once. It runs before the next write into the storage and before anything reads its state,
 * so every result and every trace is the same. Until then a device storage whose exponent the
 * device chose holds it in device memory (src/gpu) and `exp` is stale. */

/* The launch mode of out's next write (FX_LAUNCH_*) with *e (KEEP, RECOMPUTE: the exponent to
 * round at first; EXACT: the exponent the rule keeps for an all-zero write) and the rounding
 * *r; 0 when the write must go through fx_write_shared_with (a first write of a managed
 * configuration, a partial view, a write still pending: settle first). */
int fx_write_shared_launch_mode(const tensor_t *out, int *e, fx_rounding *r);

/* Commit a launched write into out: the write counters move now, and the exponent to e when
 * exp_known (the backend knows it: KEEP, or a host backend). p (owned by out's storage from
 * now on, as st->pending) is completed by fx_storage_settle. */
void fx_write_shared_launched(tensor_t *out, fx_pending_write *p, int mode, int e,
                              int exp_known);

/* Tests: host writes into FLEX16_5 and DFP16 tensors take the launch path too (statistics kept in a
 * host record until settled), so that every reader's settle is exercised without a GPU.
 * FLEXPOINT_TEST_DEFER_HOST=1 in the environment does the same for a whole process (ctest
 * runs the suite again that way: the *_deferred tests). */
void fx_store_defer_host_writes(int on);

/* Scratch allocations of one op call, freed together (src/core/scratch.c). Large blocks go back
 * to a small process-wide cache instead of the system, so that an op called again (every
 * training step) reuses memory whose pages are already mapped. Contents are uninitialised. */
#define FX_SCRATCH_MAX 32
typedef struct fx_scratch {
    void *p[FX_SCRATCH_MAX];
    size_t cap[FX_SCRATCH_MAX]; /* bytes usable at p[i] */
    int n;
} fx_scratch;
void *fx_scratch_alloc(fx_scratch *s, int64_t n, size_t sz); /* NULL on failure or when full */
/* The same, but a cached block is taken only if it is at most `most` bytes, else a fresh one:
 * for a buffer that may become a tensor's storage (fx_scratch_exchange refuses larger ones). */
void *fx_scratch_alloc_fit(fx_scratch *s, int64_t n, size_t sz, size_t most);
void fx_scratch_free(fx_scratch *s);
/* Exchange block p of s (one fx_scratch_alloc returned) for `other`, a block of at least cap
 * bytes from malloc that s then owns (fx_scratch_free caches or frees it), and hand p to the
 * caller, who owns it from then on: how a result rounded into scratch becomes a tensor's
 * storage without a copy. Only where p's whole block is at most max_cap bytes: the cache
 * hands out the smallest block that is large enough, which can be a far larger one that
 * another op reuses (an 80 MB stage serving a 40 MB product); kept by a tensor, it would
 * leave the cache for good, and that op would map a fresh one at every call. 0 where p is not
 * one of s's blocks or is larger (nothing changes). */
int fx_scratch_exchange(fx_scratch *s, void *p, void *other, size_t cap, size_t max_cap);
/* Test hooks: the cache's blocks, their bytes in all and the largest block's; and every
 * cached block given back to the system. */
#define FX_SCRATCH_CACHE_SLOTS 64
#define FX_SCRATCH_CACHE_MIN ((size_t)64 << 10)
#define FX_SCRATCH_CACHE_CAP ((size_t)512 << 20)
/* below this, a request takes no cached block of more than FX_SCRATCH_SMALL_FIT times its size
 * (a large block lent to a small request would leave its own op to map a fresh one) */
#define FX_SCRATCH_CACHE_LARGE ((size_t)1 << 20)
#define FX_SCRATCH_SMALL_FIT 4
void fx_scratch_cache_census(int *blocks, size_t *total, size_t *largest);
void fx_scratch_cache_release(void);

/* What a specialised route returns when it leaves an op to the general one (never an error
 * code, which are all negative or FX_OK). */
#define FX_DECLINED 1

/* FX_OP_UNARY / FX_OP_UNARY_BACKWARD on host tensors in 16-bit formats, and FX_OP_SCALE of
 * fp16/bf16 ones, block by block (src/core/unary_stream.c): each input block widened into L1,
 * the backend's fp32 core (unary_f32; for SCALE the product by (float)s), the block narrowed
 * into an fp16/bf16 output, rounded into a shared-exponent output at the exponent its write is
 * expected to choose (computed again where the write chooses another), or stored into a
 * shared-exponent output's fp32 stage with its statistics. The same bits as the general route.
 * FX_DECLINED where it does not apply (fp32 throughout, strided or device tensors, a summed
 * distributed output, overlapping views, an unknown function); else FX_OK or the error it
 * reported. */
struct fx_op_request;
int fx_unary_stream(const struct fx_op_request *rq, const fx_backend *be);

/* Test hooks: 0 keeps every float product's fp32 stage (fx_op_call.out_h16 never offered);
 * the products whose kernel converted into an fp16/bf16 output itself. fx_gemm_h16_enabled:
 * whether the dispatcher offers it. */
void fx_gemm_h16_set_enabled(int on);
int fx_gemm_h16_enabled(void);
int64_t fx_gemm_h16_runs(void);
/* Test hook: the products of fx_matmul_bias whose kernel added the bias itself. */
int64_t fx_gemm_h16_bias_runs(void);

/* out = tensor_add(tensor_matmul(a, b), bias) with the same bits and the same status codes,
 * bias [N] for out [M, N]. Where out and a contiguous bias are fp16 (or both bf16) and every
 * tensor is on the host, the product's kernel adds the bias where it converts its results into
 * out (fx_op_call.out_h16_bias), without a pass of its own over out, if the dispatcher offers
 * it that conversion; elsewhere it is the two ops.
 * FX_EINVAL for NULL tensors, FX_ESHAPE for shapes that do not fit, and the ops' own codes. */
FX_INTERNAL int fx_matmul_bias(tensor_t *out, const tensor_t *a, const tensor_t *b,
                               const tensor_t *bias);

/* Test hooks: 0 sends shared-exponent outputs through the fp32 stage; the writes rounded
 * straight from the blocks, and those of them whose write asked for another exponent
 * (computed and rounded again). */
void fx_unary_stream_direct_set_enabled(int on);
int64_t fx_unary_stream_direct_runs(void);
int64_t fx_unary_stream_direct_missed(void);

/* Bring tensor x into a compute format as a kernel operand (src/core/dispatch.c), converting
 * where needed (the one documented place for mixed inputs):
 *   int_compute: int16 mantissas + exponent (float inputs quantised at their exact exponent);
 *   else: format cf (x->fmt == cf: used directly; otherwise widened to fp32, cf must be FP32).
 * strided_ok: the kernel reads strides, so a view is passed without copying when no
 * conversion is needed; otherwise the operand is contiguous. bc_shape (may be NULL): broadcast
 * x to that shape first (NumPy rules, already validated). */
int fx_operand_make(const tensor_t *x, int int_compute, fmt_t cf, int strided_ok, int bc_ndim,
                    const int64_t *bc_shape, fx_operand *o, fx_scratch *tmp, const char *func);

/* Elements [off, off + n) of a contiguous array of `fmt` elements (shared-exponent ones at
 * exponent exp) as fp32, on the calling thread: a pointer into the array itself for fp32,
 * else widened or dequantised (exactly) into buf, which is returned. For loops that convert
 * a block at a time while it is in cache. */
const float *fx_f32_block(const fx_backend *be, fmt_t fmt, int exp, const void *base,
                          int64_t off, int64_t n, float *buf);

/* Convert a contiguous array of `src_fmt` elements to fp32 (exact widening / dequantising). */
void fx_widen_to_f32(const fx_backend *be, fmt_t src_fmt, int exp, const void *src, float *dst,
                     int64_t n);

/* Quantise contiguous fp32 values to int16 at their exact exponent (clamped to the DFP16
 * range); *exp receives it. Used for float inputs to integer ops. */
void fx_quantize_exact(const fx_backend *be, const float *src, int16_t *dst, int64_t n, int *exp);

/* Chunked, OpenMP-parallel wrappers of the single-threaded conversion routines. Results do
 * not depend on the thread count (chunks are fixed; statistics are merged in chunk order). */
void fx_par_quant_f32(const fx_backend *be, const float *src, int16_t *dst, int64_t n, int e,
                      const fx_rounding *r, fx_qstats *st);
void fx_par_quant_i64(const fx_backend *be, const int64_t *src, int16_t *dst, int64_t n,
                      int shift, fx_qstats *st);
/* fx_par_quant_i64 of int16 values (bit-identical to quantising them widened to int64): a copy
 * when shift is 0, else blocks widened in L1 through the backend's quant_i64. */
void fx_par_quant_i16(const fx_backend *be, const int16_t *src, int16_t *dst, int64_t n,
                      int shift, fx_qstats *st);
/* The same with src[i] kept where gate[i] > 0 and 0 elsewhere (a ReLU's gradient gated by
 * its input's mantissas): the backend's sum2_quant with that gate, as fx_shared_gated's pass
 * rounds it. */
void fx_par_quant_i16_gated(const fx_backend *be, const int16_t *src, const int16_t *gate,
                            int16_t *dst, int64_t n, int shift, fx_qstats *st);
void fx_par_maxabs_f32(const fx_backend *be, const float *src, int64_t n, float *maxabs,
                       int64_t *nonfinite);

/* memcpy of non-overlapping buffers, on the library's threads from 256 KiB (the copies of
 * whole outputs that a write commits, the gathers of large views). */
void fx_par_memcpy(void *dst, const void *src, size_t bytes);

/* Strided copy between a view and a contiguous buffer (row-major), elem size of t's format. */
void fx_strided_copy(const tensor_t *t, void *buf, int to_view);
/* The gather of fx_strided_copy (view to buf) with each run of n elements (stride apart in
 * the view, in elements) handed to fn instead of copied, into its place in buf: a map made
 * while the view is read (fp16/bf16 copies canonicalise their NaN patterns so). fn may run on
 * several threads at once, each on runs of its own. */
typedef void (*fx_gather_run_fn)(const void *ctx, const void *src, int64_t stride, void *dst,
                                 int64_t n);
void fx_strided_gather_with(const tensor_t *t, void *buf, fx_gather_run_fn fn, const void *ctx);

/* fx_f64_to_f32_round_odd: src/core/fx_hd.h (shared with the CUDA kernels). */

#endif
