/*
 * flexpoint: 16-bit training number formats side by side on one tensor interface.
 *
 * Conventions used by every function in this header
 * -------------------------------------------------
 * - Status codes: functions returning `int` return FX_OK (0) on success and a negative
 *   FX_E* code on failure. After a failure, flexpoint_last_error() gives a message that names
 *   the function and the offending values. Constructors return NULL on failure and set the
 *   same message. The library never aborts on user input.
 * - Ownership: the caller owns every tensor_t it creates (tensor_new, tensor_view_*), and frees
 *   each with tensor_free. A view shares its parent's storage and keeps it alive: the parent may
 *   be freed before the view. Ops never allocate their output: they write into a caller-provided
 *   tensor of any format.
 * - On failure an op leaves its output untouched (validation happens before anything is written).
 * - Numeric events (saturation, clamped exponents, NaN/Inf inputs, underflow) are not errors:
 *   they are counted per tensor and readable with tensor_stat().
 * - Shapes are int64_t, at most FX_MAX_DIMS dimensions, each >= 0 (empty tensors are allowed).
 * - Thread safety: distinct tensors may be used from distinct threads, as long as they do not
 *   share storage: views of one tensor are one storage, and even reading its state (tensor_stat,
 *   traces) may complete a write's bookkeeping, so one storage is used by one thread at a
 *   time. The error message is thread-local. Backend selection (flexpoint_set_backend) is global.
 */
#ifndef FLEXPOINT_H
#define FLEXPOINT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(FLEXPOINT_BUILD_SHARED)
#define FX_API __declspec(dllexport)
#elif defined(__GNUC__)
#define FX_API __attribute__((visibility("default")))
#else
#define FX_API
#endif

#define FLEXPOINT_VERSION_MAJOR 0
#define FLEXPOINT_VERSION_MINOR 1
#define FLEXPOINT_VERSION_PATCH 0

/** Largest number of tensor dimensions. */
#define FX_MAX_DIMS 8

/* ------------------------------------------------------------------------------------------ */
/* Status codes                                                                                */
/* ------------------------------------------------------------------------------------------ */

enum {
    FX_OK = 0,
    FX_EINVAL = -1,       /**< invalid argument: NULL pointer, bad ndim, negative size, bad axis */
    FX_ESHAPE = -2,       /**< shapes of the operands do not fit together */
    FX_EFORMAT = -3,      /**< unknown format value or name */
    FX_EUNSUPPORTED = -4, /**< valid request that this build, CPU or format cannot do */
    FX_ENOMEM = -5,       /**< allocation failed, or a size overflows int64/size_t */
    FX_ERANGE = -6,       /**< a value is outside its allowed range (exponent outside window) */
    FX_EIO = -7,          /**< a file could not be read or written */
    FX_ECORRUPT = -8,     /**< a file or buffer has bad contents (magic, size, checksum) */
    FX_EDEVICE = -9,      /**< a GPU/device call failed or no device exists */
    FX_ENAME = -10,       /**< unknown name (preset, statistic, backend) */
    FX_ESTATE = -11,      /**< operation not valid in the object's current state */
};

/** Short constant name of a status code ("FX_OK", "FX_ESHAPE", ...); "FX_UNKNOWN" otherwise. */
FX_API const char *flexpoint_status_str(int status);

/** Thread-local message describing the last failure in this thread ("" if none).
 *  The pointer stays valid until the next library call in the same thread. */
FX_API const char *flexpoint_last_error(void);

/** Status code of the last failure in this thread (FX_OK if none since the last clear). Useful
 *  after a constructor returned NULL. */
FX_API int flexpoint_last_status(void);

/** Clear the thread-local error message and status. */
FX_API void flexpoint_clear_error(void);

/** Library version as "MAJOR.MINOR.PATCH". */
FX_API const char *flexpoint_version(void);

/* ------------------------------------------------------------------------------------------ */
/* Formats                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/** Number formats. Values are stable (they are part of the ABI and of checkpoints). */
typedef enum {
    FMT_FP32 = 0,     /**< IEEE binary32, the reference */
    FMT_FP16 = 1,     /**< IEEE binary16 stored as uint16 */
    FMT_BF16 = 2,     /**< bfloat16 (top half of binary32) stored as uint16 */
    FMT_FLEX16_5 = 3, /**< int16 mantissas, one shared 5-bit exponent managed by Autoflex */
    FMT_DFP16 = 4,    /**< int16 mantissas, one shared 8-bit exponent chosen exactly per write */
    FMT_COUNT = 5
} fmt_t;

/** Name of a format: "fp32", "fp16", "bf16", "flex16_5", "dfp16"; NULL for an unknown value. */
FX_API const char *fmt_name(fmt_t fmt);

/** Format for a name (as fmt_name gives; "flex16+5" is accepted too).
 *  Returns the fmt_t value (>= 0), or FX_EINVAL for NULL, FX_EFORMAT for an unknown name. */
FX_API int fmt_from_name(const char *name);

/** Bytes per stored element: 4 for fp32, 2 for the others. 0 for an unknown format. */
FX_API size_t fmt_elem_size(fmt_t fmt);

/** 1 if the format stores int16 mantissas with one shared exponent (FLEX16_5, DFP16), else 0. */
FX_API int fmt_is_shared_exponent(fmt_t fmt);

/* ------------------------------------------------------------------------------------------ */
/* Tensors                                                                                     */
/* ------------------------------------------------------------------------------------------ */

typedef struct tensor tensor_t;

/** New zero-filled, contiguous (row-major) tensor. `shape` has `ndim` entries, each >= 0,
 *  with 1 <= ndim <= FX_MAX_DIMS. A shared-exponent tensor starts at exponent -8 (FLEX16_5,
 *  window [-31, 0], Autoflex preset from FLEXPOINT_AUTOFLEX or "robust", the default chosen by
 *  the experiments in the README) or 0 (DFP16).
 *  Returns NULL on bad arguments (FX_EINVAL / FX_EFORMAT) or allocation failure (FX_ENOMEM);
 *  see flexpoint_last_error(). The caller frees it with tensor_free. */
FX_API tensor_t *tensor_new(fmt_t fmt, int ndim, const int64_t *shape);

/** Free a tensor or a view. NULL is a no-op. Storage is released when its last view goes. */
FX_API void tensor_free(tensor_t *t);

/** Number of elements (product of the shape; 0 if any size is 0). -1 if t is NULL. */
FX_API int64_t tensor_numel(const tensor_t *t);
/** Number of dimensions; FX_EINVAL if t is NULL. */
FX_API int tensor_ndim(const tensor_t *t);
/** Pointer to the tensor's ndim sizes, owned by the tensor; NULL if t is NULL. */
FX_API const int64_t *tensor_shape(const tensor_t *t);
/** Pointer to the tensor's ndim strides, in elements, owned by the tensor; NULL if t is NULL. */
FX_API const int64_t *tensor_strides(const tensor_t *t);
/** The tensor's format; (fmt_t)FX_EINVAL if t is NULL. */
FX_API fmt_t tensor_fmt(const tensor_t *t);
/** 1 if the tensor's elements are contiguous in row-major order, 0 if not, FX_EINVAL if NULL. */
FX_API int tensor_is_contiguous(const tensor_t *t);

/** Write all elements of t from `src` (numel floats, row-major over t's logical shape). This is
 *  a *write*: fp16/bf16 round to nearest even; shared-exponent tensors choose the exponent
 *  (DFP16: exact; FLEX16_5: Autoflex) and record statistics (see tensor_stat).
 *  Returns FX_OK, FX_EINVAL (NULL). NaN/Inf inputs are not errors; they are counted. */
FX_API int tensor_from_f32(tensor_t *t, const float *src);

/** Read all elements of t into `dst` (numel floats, row-major). fp16/bf16 convert exactly;
 *  shared-exponent values m*2^e are exact unless they exceed the fp32 range (DFP16 with
 *  e > 112 can overflow to +-Inf). Returns FX_OK or FX_EINVAL. */
FX_API int tensor_to_f32(const tensor_t *t, float *dst);

/** Copy raw storage elements of t (row-major over its logical shape) into dst: 4-byte floats
 *  for FP32, 2-byte patterns (uint16 or int16) for the others. Returns FX_OK or FX_EINVAL. */
FX_API int tensor_get_raw(const tensor_t *t, void *dst);
/** Write raw storage elements (see tensor_get_raw). For shared-exponent formats the values must
 *  lie in [-32767, 32767] (FX_ERANGE otherwise, nothing written); the exponent is unchanged. */
FX_API int tensor_set_raw(tensor_t *t, const void *src);

/** Pointer to the first element of t's storage (at the view's offset), for zero-copy access by
 *  bindings. Owned by the tensor; valid while any view of the storage lives. NULL if t is NULL. */
FX_API void *tensor_data(tensor_t *t);

/* Views share storage with their source; the caller frees the returned view with tensor_free. */

/** View with a new shape of equal numel. t must be contiguous (FX_EINVAL otherwise). */
FX_API tensor_t *tensor_view_reshape(const tensor_t *t, int ndim, const int64_t *shape);
/** View with dimensions d0 and d1 swapped (negative indices count from the end). */
FX_API tensor_t *tensor_view_transpose(const tensor_t *t, int d0, int d1);
/** View of indices start, start+step, ... < stop along dimension dim (step >= 1,
 *  0 <= start <= stop <= shape[dim]). */
FX_API tensor_t *tensor_view_slice(const tensor_t *t, int dim, int64_t start, int64_t stop,
                                   int64_t step);

/* ------------------------------------------------------------------------------------------ */
/* Shared-exponent state (FLEX16_5, DFP16)                                                    */
/* ------------------------------------------------------------------------------------------ */

/** Current shared exponent of a FLEX16_5/DFP16 tensor (value = m * 2^exp). For other formats or
 *  NULL it returns 0 and sets the error message; check tensor_fmt first. A device tensor whose
 *  last write chose its exponent on the device (flexpoint_gpu.h) waits for that write's
 *  statistics first. */
FX_API int tensor_exp(const tensor_t *t);
/** The shared exponent into *e, with a status: FX_OK; FX_EINVAL (NULL t or e); FX_EFORMAT
 *  (a float format); FX_EDEVICE when a device write's statistics cannot be collected or its
 *  exponent disagrees with the core's rules (*e is then the exponent the data are held at,
 *  as far as the host knows). Prefer it to tensor_exp where a failure must not go unseen. */
FX_API int tensor_get_exp(const tensor_t *t, int *e);

/** Set the shared exponent. The stored mantissas are rescaled to keep their values (rounding
 *  shift, ties to even, saturating; saturation is counted). FX_ERANGE if e is outside the
 *  tensor's window ([lo, lo+31] for FLEX16_5, [-128, 127] for DFP16), FX_EFORMAT for other
 *  formats, FX_EINVAL for NULL. A device tensor is rescaled on its device (the call waits for
 *  it); FX_EDEVICE if that fails, with the exponent unchanged. */
FX_API int tensor_set_exp(tensor_t *t, int e);

/** FLEX16_5 only: set the exponent window to [lo, lo+31], lo in [-128, 96] (FX_ERANGE
 *  otherwise). The current exponent is clamped into the window (rescaling the mantissas as
 *  tensor_set_exp does; on FX_EDEVICE neither the window nor the exponent changes). */
FX_API int tensor_set_exp_window(tensor_t *t, int lo);
/** Window of a shared-exponent tensor: writes *lo and *hi. FX_EFORMAT for float formats. */
FX_API int tensor_exp_window(const tensor_t *t, int *lo, int *hi);

/** Rounding of fp32 -> shared-exponent conversions (every write from float data). */
enum { FX_ROUND_NEAREST_EVEN = 0, FX_ROUND_STOCHASTIC = 1 };

/** Set the rounding mode for writes into t. Stochastic rounding draws from a counter-based
 *  generator keyed by (seed, the tensor's write counter, element index), so results are the
 *  same for any thread count and backend. Applies to FLEX16_5 and DFP16 (FX_EFORMAT otherwise);
 *  FX_EINVAL for an unknown mode. Resets the write counter. */
FX_API int tensor_set_rounding(tensor_t *t, int mode, uint64_t seed);

/** Read a statistic of a shared-exponent tensor into *value. Names:
 *  - "saturated": elements that saturated in the last write
 *  - "true_max": largest finite |value| of the last write, before saturation (real units)
 *  - "nonfinite": NaN/Inf inputs in the last write
 *  - "underflow": nonzero finite inputs that rounded to 0 in the last write
 *  - "clamped": 1 if the last write's wanted exponent was outside the window, else 0
 *  - "overflows": writes that saturated, cumulative
 *  - "clamped_total", "nonfinite_total", "writes": cumulative counts
 *  - "exp": current exponent
 *  FX_ENAME for an unknown name, FX_EFORMAT for float formats, FX_EINVAL for NULL. */
FX_API int tensor_stat(const tensor_t *t, const char *name, double *value);

/* ------------------------------------------------------------------------------------------ */
/* Autoflex                                                                                    */
/* ------------------------------------------------------------------------------------------ */

enum { FX_AF_INIT_PROBE = 0, FX_AF_INIT_EXACT = 1 };
enum { FX_AF_STAT_SATURATED_MAX = 0, FX_AF_STAT_TRUE_MAX = 1 };
enum { FX_AF_OVERFLOW_KEEP = 0, FX_AF_OVERFLOW_RECOMPUTE = 1 };

/** Autoflex configuration (docs/autoflex.md). Passed by pointer, never by value. */
typedef struct fx_autoflex_config {
    int managed;         /**< 0: exponent fixed (set by tensor_set_exp); 1: Autoflex predicts */
    int history_len;     /**< L, 1..64 */
    double beta;         /**< standard deviations of margin */
    double gamma;        /**< margin in units of the current step 2^e */
    double alpha;        /**< multiplicative headroom, > 0 */
    int init_mode;       /**< FX_AF_INIT_PROBE or FX_AF_INIT_EXACT */
    int stat_mode;       /**< FX_AF_STAT_SATURATED_MAX or FX_AF_STAT_TRUE_MAX */
    int overflow_mode;   /**< FX_AF_OVERFLOW_KEEP or FX_AF_OVERFLOW_RECOMPUTE */
    int init_exp;        /**< exponent a new tensor starts from (published: -8) */
    int probe_tries;     /**< probe initialisation tries (published: 10) */
} fx_autoflex_config;

/** Fill *cfg with a named preset: "published" (Koester et al. 2017, bit-exact), "fixed"
 *  (management off), "truemax" (published + true-max statistic), "exact_init" (published +
 *  calibrated initialisation), "robust" (true max + exact init + recompute on overflow).
 *  FX_ENAME for an unknown name, FX_EINVAL for NULL. */
FX_API int fx_autoflex_preset(const char *name, fx_autoflex_config *cfg);

/** Switch a FLEX16_5 tensor to a named preset. Resets the history (the exponent is kept).
 *  FX_ENAME unknown preset, FX_EFORMAT not FLEX16_5, FX_EINVAL NULL. */
FX_API int tensor_set_autoflex(tensor_t *t, const char *preset);
/** Same with an explicit configuration (validated: FX_EINVAL for out-of-range fields). */
FX_API int tensor_set_autoflex_config(tensor_t *t, const fx_autoflex_config *cfg);
/** Copy the tensor's Autoflex configuration into *cfg. */
FX_API int tensor_get_autoflex_config(const tensor_t *t, fx_autoflex_config *cfg);

/** One record of a tensor's write trace. */
typedef struct fx_trace_record {
    int64_t write;      /**< write index, from 0 */
    int exp;            /**< exponent used by the write */
    int clamped;        /**< 1 if the wanted exponent was clamped to the window */
    int overflow;       /**< 1 if the write saturated (before any recompute) */
    int recomputed;     /**< 1 if the write was redone at the exact exponent */
    int64_t saturated;  /**< saturated elements kept in the stored result */
    int64_t nonfinite;  /**< NaN/Inf inputs */
    int64_t underflow;  /**< nonzero inputs rounded to 0 */
    double true_max;    /**< largest finite |value| before saturation */
    double stored_max;  /**< largest |m| * 2^exp stored */
} fx_trace_record;

/** Start (on != 0) or stop recording one record per write. Starting clears the trace.
 *  Shared-exponent formats only (FX_EFORMAT otherwise). */
FX_API int tensor_trace_enable(tensor_t *t, int on);
/** Number of trace records; negative status on error. */
FX_API int64_t tensor_trace_len(const tensor_t *t);
/** Copy record i into *rec (FX_ERANGE if i is out of range). */
FX_API int tensor_trace_get(const tensor_t *t, int64_t i, fx_trace_record *rec);
/** Write the trace as CSV (header line, then one row per write) to `path`, atomically
 *  (temporary file, then rename). FX_EIO if the file cannot be written. */
FX_API int tensor_trace_write_csv(const tensor_t *t, const char *path);

/* ------------------------------------------------------------------------------------------ */
/* Ops                                                                                         */
/* ------------------------------------------------------------------------------------------ */
/*
 * Every op writes into `out`, which may have any format, and reads inputs of any formats.
 * Compute rule (one documented place, src/core/dispatch.c):
 *   - all inputs FLEX16_5/DFP16: integer-only arithmetic with exact sums, then one rounding
 *     (ties to even, saturating) to out's exponent; bit-identical on every backend and thread
 *     count;
 *   - first input FLEX16_5/DFP16 and another input float: the float input is first converted
 *     to int16 at its exact exponent (as a DFP16 write would), then integer arithmetic;
 *   - otherwise: fp32 arithmetic (fp16/bf16 inputs are widened exactly; a shared-exponent input
 *     is dequantised), with fp32 accumulation, then one rounding to out's format.
 * Writing the result into out is a write like tensor_from_f32 (exponent choice, statistics).
 * Inputs may be views with any strides, and may alias each other. `out` must not overlap an
 * input unless it is the very same tensor (in-place), which is allowed.
 * Status: FX_OK, FX_EINVAL (NULL, bad axis), FX_ESHAPE (shapes), FX_ENOMEM.
 */

/** out = a + b, a - b, a * b elementwise, with NumPy broadcasting of a and b to out's shape. */
FX_API int tensor_add(tensor_t *out, const tensor_t *a, const tensor_t *b);
FX_API int tensor_sub(tensor_t *out, const tensor_t *a, const tensor_t *b);
FX_API int tensor_mul(tensor_t *out, const tensor_t *a, const tensor_t *b);

/** out = s * a. s must be finite (FX_EINVAL otherwise). For integer compute s is used as
 *  m_s * 2^k with a 31-bit m_s (exact for every float and for doubles with <= 31 significant
 *  bits). */
FX_API int tensor_scale(tensor_t *out, const tensor_t *a, double s);

/** out = max(a, 0) elementwise (same shape). */
FX_API int tensor_relu(tensor_t *out, const tensor_t *a);

/** Copy with format conversion: out = a (same shape). A write into out. */
FX_API int tensor_copy(tensor_t *out, const tensor_t *a);

/** Sum of a. axis = FX_AXIS_ALL reduces everything (out must have numel 1); otherwise the
 *  axis (negative counts from the end) is reduced and out has a's shape without that axis, or
 *  with it kept as size 1. Float formats accumulate in fp32; integer formats exactly in int64. */
#define FX_AXIS_ALL (-1000)
FX_API int tensor_sum(tensor_t *out, const tensor_t *a, int axis);

/** out[M,N] = a[M,K] x b[K,N], 2-D operands. Transposed operands are passed as views
 *  (tensor_view_transpose), which cost nothing: kernels read any strides. */
FX_API int tensor_matmul(tensor_t *out, const tensor_t *a, const tensor_t *b);

/* ------------------------------------------------------------------------------------------ */
/* Backends and threads                                                                        */
/* ------------------------------------------------------------------------------------------ */

/** Number of CPU backends compiled in ("scalar", "avx2", "avx512"). */
FX_API int flexpoint_backend_count(void);
/** Name of backend i (0 <= i < count); NULL otherwise. */
FX_API const char *flexpoint_backend_name(int i);
/** 1 if this CPU (cpuid + xgetbv) can run backend i, else 0. */
FX_API int flexpoint_backend_available(int i);
/** Select the backend by name. FX_ENAME unknown, FX_EUNSUPPORTED if the CPU cannot run it.
 *  At start-up the best available backend is used, or the one in FLEXPOINT_CPU. */
FX_API int flexpoint_set_backend(const char *name);
/** Name of the backend in use ("scalar", "avx2" or "avx512"). */
FX_API const char *flexpoint_backend(void);
/** Space-separated CPU features detected ("avx2 fma f16c avx512f avx512bw ..."). */
FX_API const char *flexpoint_cpu_features(void);

/** Threads used by ops (OpenMP). n <= 0 restores the default (OMP/all cores). Results of the
 *  integer formats do not depend on it. Returns the previous setting. */
FX_API int flexpoint_set_num_threads(int n);
FX_API int flexpoint_num_threads(void);

/** Number of CUDA devices visible (0 when built without CUDA or none is present). */
FX_API int flexpoint_gpu_device_count(void);

#ifdef __cplusplus
}
#endif
#endif /* FLEXPOINT_H */
