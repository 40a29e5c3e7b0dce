/* Internal core types: the tensor object, its storage and the error helpers.
 * Never include ISA intrinsics here: this header is shared by every translation unit. */
#ifndef FX_CORE_INTERNAL_H
#define FX_CORE_INTERNAL_H

#include "flexpoint.h"
/* The public declarations of the tensor library (libflexpoint), so that each definition
 * carries FX_API (default visibility) whichever file defines it. Not flexpoint_train.h nor
 * flexpoint_data.h: those declare libflexpoint_train, which the tensor library never calls
 * (tests/check_layers.sh); src/train, src/data and src/dist include them themselves. */
#include "flexpoint_nn.h"
#include "flexpoint_gpu.h"
#include "internal_export.h" /* FX_INTERNAL */
/* The core calls into src/autoflex (the exponent manager, the trace buffer), never the
 * reverse (docs/architecture.md, "Layers"). */
#include "../autoflex/autoflex.h"
#include "../autoflex/trace.h"
#include "../flex/flex_math.h"

#include <stdarg.h>
#include <stdbool.h>

/* Statistics of the last write into a shared-exponent storage. */
typedef struct fx_write_info {
    int64_t saturated;
    int64_t nonfinite;
    int64_t underflow;
    int clamped;
    double true_max;
    double stored_max;
} fx_write_info;

/* Storage: the bytes plus everything that belongs to the data rather than to a view
 * (the shared exponent is a property of all the int16 values together). Reference-counted so
 * that views keep it alive. */
/* A write into a storage whose bookkeeping waits for its statistics (dispatch.h: "writes
 * whose statistics arrive later"). A backend embeds it as the first member of its own record. */
typedef struct fx_pending_write fx_pending_write;

/* What a backend reports about a launched write once its statistics have arrived: the facts
 * about the staged values that the exponent rules read, and every quantisation the backend
 * kept, in order (the first at the launch exponent; a second when it redid a saturated
 * write under overflow mode RECOMPUTE). The last one is what the tensor holds. */
typedef struct fx_pending_trial {
    int e;
    fx_qstats q;
} fx_pending_trial;
typedef struct fx_pending_result {
    int kind;        /* FX_STAGE_F32 or FX_STAGE_I64 */
    int exp;         /* exponent of the int64 values */
    double true_max; /* largest finite |value|, real units */
    uint64_t imax;   /* int64 stages: largest |value| in integer units */
    int ntrials;     /* 1 or 2 */
    fx_pending_trial trial[2];
} fx_pending_result;

typedef struct fx_pending_ops {
    /* Wait for the launched write's statistics and fill *res. FX_OK or a status with the
     * message set. */
    int (*collect)(fx_pending_write *p, fx_pending_result *res, const char *func);
    /* Free the record (its storage is being freed; a launched write may be uncollected). */
    void (*destroy)(fx_pending_write *p);
} fx_pending_ops;

/* How a launched write's exponent is decided (fx_write_shared_launch_mode, dispatch.h). */
enum {
    FX_LAUNCH_KEEP = 1,      /* by the Autoflex history alone, never revisited */
    FX_LAUNCH_RECOMPUTE = 2, /* predicted, then redone at the exact exponent if it saturated */
    FX_LAUNCH_EXACT = 3      /* DFP16: the exact exponent of the stage's maximum */
};

struct fx_pending_write {
    const fx_pending_ops *ops;
    int active;     /* a launched write awaits fx_storage_settle */
    int mode;       /* FX_LAUNCH_* */
    int prev_exp;   /* the storage's exponent before the write (the rules read it) */
    int exp_known;  /* st->exp already holds the write's exponent (KEEP, or a host backend);
                       else the backend holds it (in device memory) until settled */
    int64_t index;  /* the write's number (st->writes at launch), for its trace record */
    int64_t tally_period; /* st->tally_period at launch: where its statistics are tallied */
};

/* Data parallelism (src/dist/distributed.h): the collectives a storage's writes use when the
 * tensor is one rank's part of a computation spread over several processes. The core holds
 * only these pointers, so it needs no MPI; every call is collective (each rank calls it in the
 * same order with the same n) and returns FX_OK or a status with the message set. */
typedef struct fx_dist_ops {
    void *ctx;
    int nranks;
    /* Exact element-wise sum over the ranks, in place, sent as `bytes`-byte integers (2, 4
     * or 8): the caller has checked that nranks times the largest |value| of any rank fits
     * that width, so that no partial sum can overflow it. */
    int (*sum_int)(void *ctx, int64_t *v, int64_t n, int bytes);
    /* Element-wise fp32 sum over the ranks in rank order (rank 0 + rank 1 + ...), in place:
     * the same bits on every rank and in every run with the same rank count. */
    int (*sum_f32)(void *ctx, float *v, int64_t n);
    /* The statistics of a write (FX_DIST_NSTATS values): the first FX_DIST_NMAX are maxima,
     * the rest sums, over the ranks, in place. */
    int (*agree)(void *ctx, uint64_t *v);
} fx_dist_ops;
#define FX_DIST_NSTATS 8
#define FX_DIST_NMAX 4

/* How a storage's writes combine across ranks (fx_storage.dist_mode). */
enum {
    FX_DIST_LOCAL = 0, /* the same on every rank (weights, optimiser state): no communication */
    FX_DIST_ROWS = 1,  /* one rank's rows of a batch: a shared exponent is chosen from the
                          statistics of every rank's rows, as if one process held them all */
    FX_DIST_SUM = 2    /* one rank's partial sum (a parameter gradient): the values are summed
                          over the ranks before the one write */
};

/* A storage's write tally: per counting period (a training step), the statistics of the last
 * write launched in it, summed over the periods (the trainer's health counts). Writes are
 * tallied when their statistics are known, at settle for a launched write, so a counter that
 * only sets periods never waits for a device; reading the tally settles first. */
typedef struct fx_write_tally {
    int64_t period;                          /* the period of the cur_* values; 0: none */
    int64_t periods;                         /* closed periods (excluding `period`) */
    int64_t saturated, underflow, zeroed;    /* sums over the closed periods */
    int64_t cur_saturated, cur_underflow, cur_zeroed; /* the open period's last write */
} fx_write_tally;

typedef struct fx_storage {
    void *data;
    int64_t numel; /* elements allocated */
    int refcount;  /* atomically updated */
    fmt_t fmt;
    bool on_device; /* data is CUDA device memory (src/gpu) rather than host memory */
    int device;     /* CUDA device ordinal when on_device */

    /* shared-exponent state (FLEX16_5, DFP16) */
    int exp;
    int win_lo, win_hi;
    int rounding;
    uint64_t seed;
    uint64_t write_counter; /* writes since tensor_set_rounding: keys stochastic rounding */
    fx_af_state af;         /* FLEX16_5 only */
    fx_write_info last;
    int64_t writes, overflows, clamped_total, nonfinite_total;
    /* nonzero: the tally period writes launched now count in (fx_write_tally); 0: untallied */
    int64_t tally_period;
    fx_write_tally tally;
    fx_trace trace;
    /* bit i: the write i writes ago picked another exponent than the guess before it
     * (fx_write_shared_guess_exp: DFP16's exponent moved, FLEX16_5 recomputed an overflow) */
    uint32_t guess_missed;
    /* DFP16: the exponent before its last move, where a write after the first has moved it
     * (moved_from_set); fx_write_shared_alt_exp */
    int moved_from, moved_from_set;
    /* A write launched before its statistics were known (a device write that does not wait
     * for its own statistics, src/core/dispatch.h): its Autoflex observation, statistics and
     * trace record, and for a write whose exponent the device chose also `exp`, are completed
     * by fx_storage_settle. NULL until the first such write; owned by the storage and
     * destroyed with it. While pending->active && !pending->exp_known, `exp` is the exponent
     * before that write: readers of exp settle first (tensor_exp), and device kernels read
     * the exponent from device memory instead (src/gpu). */
    struct fx_pending_write *pending;
    /* FX_DIST_*: with dist, this storage's writes combine across ranks (fx_dist_ops) */
    const fx_dist_ops *dist;
    int dist_mode;
    /* Set by an owner that never needs the values back from a write that fails (the trainer's
     * activations and activation gradients, fx_tensor_set_disposable): an op may then put its
     * rounding straight into this storage before the write commits, instead of into a buffer
     * of its own that it copies in afterwards. A failed write may leave such a storage with
     * other values (its exponent and state are never changed by a failed write). */
    bool disposable;
} fx_storage;

/* tensor_set_exp_window for a tensor whose storage holds only zeros, as tensor_new leaves it
 * (the caller vouches for that): the same window, exponent and state, without reading the
 * mantissas (no rescale is needed, as zero is zero at any exponent). The trainer places its
 * new tensors this way. */
FX_INTERNAL int fx_tensor_set_window_fresh(tensor_t *t, int lo);

/* Mark t's storage (shared by its views) as fx_storage.disposable. */
FX_INTERNAL void fx_tensor_set_disposable(tensor_t *t);

/* Tag t's storage (shared by its views) with the collectives of a distributed trainer and how
 * its writes combine (FX_DIST_*); dist NULL untags it. */
FX_INTERNAL void fx_tensor_set_dist(tensor_t *t, const fx_dist_ops *dist, int mode);

/* Complete st's pending write, if any (src/core/store.c), so that its Autoflex state,
 * statistics, counters and trace are those of every write launched so far. Every reader of
 * that state calls it first. FX_OK, or FX_EDEVICE: the statistics cannot be collected (the
 * write stays pending if the backend holds its exponent, else it is dropped), or the backend
 * kept another exponent than the core's rules ask for (the exponent is then the backend's and
 * the write's statistics are dropped). */
FX_INTERNAL int fx_storage_settle(fx_storage *st, const char *func);

/* The sums of st's tally over its periods, the open one included (the caller settles first
 * for a complete count): periods with a tallied write, and their last writes' saturated and
 * underflowed elements and writes that stored only zeros from nonzero inputs. */
FX_INTERNAL void fx_storage_tally_sum(const fx_storage *st, int64_t *periods, int64_t *saturated,
                                      int64_t *underflow, int64_t *zeroed);

struct tensor {
    fmt_t fmt;
    int ndim;
    int64_t shape[FX_MAX_DIMS];
    int64_t strides[FX_MAX_DIMS]; /* in elements */
    int64_t offset;               /* in elements from st->data */
    fx_storage *st;
};

/* Errors: set the thread-local message ("func: ...") and return the code. */
FX_INTERNAL int fx_error(int code, const char *func, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
#define FX_FAIL(code, ...) fx_error((code), __func__, __VA_ARGS__)

/* fx_af_config_check (src/autoflex/autoflex.h) with its reason set as the error message
 * ("fx_af_config_validate: beta = nan, ..."): FX_OK or FX_EINVAL. src/core/tensor_autoflex.c. */
int fx_af_config_validate(const fx_autoflex_config *cfg);

/* Helpers shared by the core files. */
FX_INTERNAL bool fx_fmt_valid(int fmt);
/* Element count of a shape whose sizes are >= 0 and whose non-zero sizes multiply within
 * int64 (every tensor's shape: fx_shape_layout refuses the others). */
int64_t fx_numel_of(int ndim, const int64_t *shape);

/* Checked int64 arithmetic for sizes, strides and offsets: true when the exact result does not
 * fit (*r is then unspecified). */
static inline bool fx_mul_overflows(int64_t a, int64_t b, int64_t *r)
{
    return __builtin_mul_overflow(a, b, r);
}
static inline bool fx_add_overflows(int64_t a, int64_t b, int64_t *r)
{
    return __builtin_add_overflow(a, b, r);
}

/* Most elements one tensor may hold (fx_alloc_array's byte limit caps it further). */
#define FX_NUMEL_MAX ((int64_t)1 << 46)

/* Validate a user-supplied shape for a tensor of format fmt: 1 <= ndim <= FX_MAX_DIMS, shape
 * not NULL, every size >= 0 (FX_EINVAL), and the row-major strides in elements and in bytes
 * within int64 whatever the position of a zero size, so that every offset into a view of it is
 * representable (FX_ENOMEM, "size overflows"). On FX_OK, *numel is the element count and, when
 * strides is not NULL, strides[0..ndim) the row-major strides (a size-0 dimension steps like
 * a size-1 one). Messages name func and the sizes. */
int fx_shape_layout(const char *func, fmt_t fmt, int ndim, const int64_t *shape, int64_t *numel,
                    int64_t *strides);
/* "[2, 3]" for ndim sizes (truncated to fit n bytes). */
char *fx_dims_str(int ndim, const int64_t *shape, char *buf, size_t n);
/* Whether a's logical shape is ndim/shape. */
static inline bool fx_shape_is(const tensor_t *a, int ndim, const int64_t *shape)
{
    if (a->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (a->shape[d] != shape[d]) return false;
    return true;
}
/* b holds out.shape[1] values and broadcasts along every other axis ([C], [C,1,1], ...):
 * a per-channel operand, such as a convolution's bias. */
static inline bool fx_broadcasts_per_channel(const tensor_t *out, const tensor_t *b)
{
    if (out->ndim < 2 || b->ndim > out->ndim) return false;
    for (int d = 0; d < out->ndim; d++) {
        const int db = d - (out->ndim - b->ndim);
        const int64_t sb = db >= 0 ? b->shape[db] : 1;
        if (sb != (d == 1 ? out->shape[1] : 1)) return false;
    }
    return true;
}
bool fx_tensor_is_contiguous(const tensor_t *t);
bool fx_tensor_covers_storage(const tensor_t *t); /* contiguous and spans all of its storage */
/* Copy the shared-exponent state (exponent, window, rounding, Autoflex state, statistics; not
 * the trace, which stays with its tensor) of s into d, for copies of a tensor's elements such
 * as host <-> device transfers. Both are settled first (a pending write of s belongs to the
 * state copied; one of d would land after the copy). Nothing for float formats. FX_OK, or the
 * status of a failed settle (nothing copied). */
int fx_storage_copy_exp_state(fx_storage *d, fx_storage *s, const char *func);
FX_INTERNAL void *fx_tensor_base(const tensor_t *t); /* address of element [0,..,0] */
char *fx_shape_str(const tensor_t *t, char *buf, size_t n); /* "[2, 3]" */

/* Device placement (src/gpu). A host-only path given a device tensor fails with a message
 * "<func>: <what> lives on CUDA device <d>; <hint>" and returns `code`; FX_OK for host tensors. */
static inline bool fx_on_device(const tensor_t *t) { return t->st->on_device; }
int fx_need_host(const tensor_t *t, const char *what, int code, const char *hint,
                 const char *func);
/* The hint of the guards on the host implementations of ops: every op branches to its device
 * implementation before it reaches them, so a device tensor there is a library bug. */
#define FX_HOST_PATH_HINT                                                                      \
    "internal error: the host implementation was reached with a device tensor"

/* tensor_new's constructor with a placement: device < 0 allocates host memory, otherwise the
 * memory of that CUDA device (src/gpu). Zero-filled; NULL on failure with the error set. */
tensor_t *fx_tensor_create(fmt_t fmt, int ndim, const int64_t *shape, int device,
                           const char *func);

/* Overflow-checked allocation of n elements of size sz (NULL on overflow or failure). */
FX_INTERNAL void *fx_alloc_array(int64_t n, size_t sz);

/* Host storage blocks passed from tensors being freed to tensors just created, so that an
 * owner that frees and creates the same tensors again (the trainer's evaluation context, at
 * every evaluation) reuses memory whose pages are mapped instead of faulting in fresh zero
 * pages (a transformer's evaluation context is half a gigabyte).
 * fx_tensor_detach_block: t's storage block, taken out of the storage (which then holds
 * none: the caller frees t next, touching nothing in between), with its size in *bytes; NULL
 * (nothing changes) where the storage is on a device or shared with another tensor or view.
 * A host write pending its statistics does not matter: they are never read.
 * fx_tensor_attach_block: make `block` (of `bytes` bytes, from fx_tensor_detach_block or
 * malloc, which the caller has zero-filled) the storage of t, a tensor just created and not
 * yet written or shared, freeing t's own block; 0 (nothing changes, the caller keeps block)
 * where bytes is not t's storage size or t does not qualify. */
FX_INTERNAL void *fx_tensor_detach_block(tensor_t *t, size_t *bytes);
FX_INTERNAL int fx_tensor_attach_block(tensor_t *t, void *block, size_t bytes);

/* A kernel's packing buffer of `bytes` (uninitialised), 64-byte aligned, from the scratch
 * cache of src/core/scratch.c: the packed operands of a large product are megabytes, which
 * fresh mappings would fault in page by page on every call (a fifth of a 128 x 128 x 16384
 * bf16 product on AMX). NULL on failure; fx_scratch_aligned_free(NULL) does nothing. */
FX_INTERNAL void *fx_scratch_aligned_alloc(size_t bytes);
FX_INTERNAL void fx_scratch_aligned_free(void *p);

#endif
