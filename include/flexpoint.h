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
/* Element-wise math functions                                                                */
/* ------------------------------------------------------------------------------------------ */
/*
 * One entry point, the function named by a string, so that every binding reaches every
 * function the same way. Definitions, accuracy and special values: docs/math.md.
 *
 * Formats: the math runs in fp32 for every input format (fp16/bf16 widened exactly,
 * FLEX16_5/DFP16 dequantised: for these functions the compute rule's integer branch does not
 * apply), then one write into out: fp16/bf16 round once to nearest even, shared-exponent
 * outputs choose their exponent (Autoflex / exact) and count NaN/Inf results as non-finite.
 * The fp32 results are the same bits on every CPU backend and thread count. For fp16 and bf16
 * the result is within 1 ulp of the correctly rounded exact value on every finite input; fp32
 * bounds (ulps): exp, log, rsqrt 1; sqrt, reciprocal, square 0.5; tanh 1.5; sigmoid 2.5;
 * silu, gelu_tanh 3; gelu 3.5; pow 0.5 (plus 2^-16); clamp, abs exact.
 * Special values follow IEEE 754 where it defines them (log(0) = -Inf, log(-1) = NaN,
 * sqrt(-0) = -0, rsqrt(+0) = +Inf, reciprocal(-0) = -Inf, ...) and the limits elsewhere
 * (tanh(+-Inf) = +-1, sigmoid(-Inf) = 0, gelu(-Inf) = silu(-Inf) = -0, gelu(+Inf) = +Inf).
 * Device tensors: not implemented (FX_EUNSUPPORTED).
 * Like every op, these write into a caller-provided out of any format, which may be the input
 * itself (in place); nothing is written on failure.
 */

/**
 * @brief Apply an element-wise function: out = fn(a).
 *
 * Names: "exp", "log", "sqrt", "rsqrt" (1/sqrt), "reciprocal" (1/x), "tanh",
 * "sigmoid" (1/(1+e^-x)), "gelu" (x Phi(x), the erf form: x (1 + erf(x/sqrt 2)) / 2),
 * "gelu_tanh" (x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2), "silu" (x sigmoid(x)),
 * "square" (x*x), "abs". tensor_unary_name() lists them.
 *
 * @param[out] out Output tensor with a's shape, any format (may be a itself).
 * @param[in]  a   Input tensor, any format, any strides.
 * @param[in]  fn  Function name (NUL-terminated, case-sensitive).
 * @return FX_OK; FX_EINVAL if out, a or fn is NULL; FX_ENAME for an unknown name (the message
 *         lists the known names); FX_ESHAPE if out's shape differs from a's; FX_EUNSUPPORTED
 *         for device tensors; FX_ENOMEM if scratch memory cannot be allocated.
 */
FX_API int tensor_unary(tensor_t *out, const tensor_t *a, const char *fn);

/**
 * @brief Gradient of an element-wise function: dx = dy * fn'(x).
 *
 * The derivatives: exp e^x; log 1/x; sqrt 1/(2 sqrt x); rsqrt -x^(-3/2)/2; reciprocal -1/x^2;
 * tanh 1 - tanh^2 (computed as 4e^-2|x| / (1 + e^-2|x|)^2); sigmoid s (1 - s); gelu
 * Phi(x) + x phi(x); gelu_tanh and silu the derivatives of their definitions; square 2x;
 * abs sign(x) with sign(0) = 0. A NaN in x gives NaN. The fp32 arithmetic is the forward's;
 * "first input decides" does not apply (as for tensor_unary).
 *
 * @param[out] dx Output gradient with dy's shape, any format (may be dy or x itself).
 * @param[in]  dy Gradient of the loss with respect to fn(x).
 * @param[in]  x  The forward input, same shape as dy.
 * @param[in]  fn Function name, as for tensor_unary().
 * @return FX_OK; FX_EINVAL (NULL argument); FX_ENAME (unknown name); FX_ESHAPE (dy and x, or dx
 *         and dy, differ in shape); FX_EUNSUPPORTED (device tensors); FX_ENOMEM.
 */
FX_API int tensor_unary_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x,
                                 const char *fn);

/**
 * @brief Name of the i-th function tensor_unary() accepts.
 * @param[in] i Index, from 0.
 * @return A static string owned by the library, or NULL when i is out of range (so a loop
 *         until NULL lists every name).
 */
FX_API const char *tensor_unary_name(int i);

/**
 * @brief Clamp: out = min(max(a, lo), hi), with NaN kept.
 *
 * The bounds are rounded to fp32 (the compute format) before use; -Inf / +Inf leave a side
 * open. -0 and +0 compare equal, so a zero bound keeps the sign of a zero input.
 *
 * @param[out] out Output with a's shape, any format (may be a itself).
 * @param[in]  a   Input, any format.
 * @param[in]  lo  Lower bound, not NaN.
 * @param[in]  hi  Upper bound, not NaN, hi >= lo.
 * @return FX_OK; FX_EINVAL (NULL tensor, a NaN bound, or lo > hi); FX_ESHAPE;
 *         FX_EUNSUPPORTED (device tensors); FX_ENOMEM.
 */
FX_API int tensor_clamp(tensor_t *out, const tensor_t *a, double lo, double hi);

/**
 * @brief Gradient of tensor_clamp(): dx = dy where lo <= x <= hi, else 0 (a NaN x gives 0).
 * @param[out] dx Output gradient with dy's shape, any format.
 * @param[in]  dy Gradient of the loss with respect to the clamp's output.
 * @param[in]  x  The forward input, same shape as dy.
 * @param[in]  lo Lower bound of the forward call.
 * @param[in]  hi Upper bound of the forward call.
 * @return As tensor_clamp(), with FX_ESHAPE when dy and x, or dx and dy, differ in shape.
 */
FX_API int tensor_clamp_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x, double lo,
                                 double hi);

/**
 * @brief Power with a scalar exponent: out = a^p, C99 pow semantics.
 *
 * p is used exactly (it is not rounded to fp32). The result is |a|^p rounded once to fp32
 * (binary64 log and exp inside), with C99's rules: x^0 = 1 for every x (NaN too); a negative
 * finite x gives NaN unless p is an integer (odd p keeps x's sign); 0^p is +-0 for p > 0 and
 * +-Inf for p < 0 (the sign only for odd integer p); Inf^p is Inf or 0. p = 1, 2, -1 and 0.5
 * give x, the correctly rounded x*x, 1/x and sqrt(x) (with pow's signs: (-0)^0.5 = +0).
 *
 * @param[out] out Output with a's shape, any format (may be a itself).
 * @param[in]  a   Input, any format.
 * @param[in]  p   Exponent, finite.
 * @return FX_OK; FX_EINVAL (NULL tensor or non-finite p); FX_ESHAPE; FX_EUNSUPPORTED (device
 *         tensors); FX_ENOMEM.
 */
FX_API int tensor_pow_scalar(tensor_t *out, const tensor_t *a, double p);

/**
 * @brief Gradient of tensor_pow_scalar(): dx = dy * p * x^(p-1), rounded once from binary64.
 *
 * p = 0 gives dy * 0 (the gradient of a constant); p = 1 gives dy.
 *
 * @param[out] dx Output gradient with dy's shape, any format.
 * @param[in]  dy Gradient of the loss with respect to a^p.
 * @param[in]  x  The forward input, same shape as dy.
 * @param[in]  p  The forward exponent, finite.
 * @return As tensor_pow_scalar(), with FX_ESHAPE when dy and x, or dx and dy, differ in shape.
 */
FX_API int tensor_pow_scalar_backward(tensor_t *dx, const tensor_t *dy, const tensor_t *x,
                                      double p);

/* ------------------------------------------------------------------------------------------ */
/* Scalar conversions                                                                          */
/* ------------------------------------------------------------------------------------------ */
/*
 * One value at a time, for callers that do not hold tensors. Bit patterns travel as uint16_t.
 * These are the definitions every tensor path of the library reproduces (docs/formats.md):
 * round to nearest, ties to even; overflow gives +-Inf (fp16: |x| >= 65520); subnormals are
 * kept; NaN gives a quiet NaN with the sign kept (fp16 sign|0x7E00, bf16 sign|0x7FC0); -0
 * stays -0. They do not depend on the floating-point environment (integer arithmetic only).
 */

/** @brief fp32 -> fp16 bits, round to nearest even. @param[in] x Value. @return fp16 bits. */
FX_API uint16_t fx_f32_to_fp16(float x);
/** @brief fp16 bits -> fp32, exact (NaN payloads kept). @param[in] h fp16 bits. @return The value. */
FX_API float fx_fp16_to_f32(uint16_t h);
/** @brief fp32 -> bf16 bits, round to nearest even. @param[in] x Value. @return bf16 bits. */
FX_API uint16_t fx_f32_to_bf16(float x);
/**
 * @brief fp32 -> bf16 bits by truncation (round toward zero): the top 16 bits.
 *
 * Some accelerators and older software convert this way; use it to reproduce their numbers.
 * NaN still gives the quiet NaN sign|0x7FC0 (truncating a NaN whose payload is in the low bits
 * would give Inf).
 *
 * @param[in] x Value.
 * @return bf16 bits.
 */
FX_API uint16_t fx_f32_to_bf16_trunc(float x);
/** @brief bf16 bits -> fp32, exact. @param[in] h bf16 bits. @return The value. */
FX_API float fx_bf16_to_f32(uint16_t h);
/**
 * @brief binary64 -> fp16 bits, rounded once to nearest even.
 *
 * Not through fp32 by ordinary rounding, which would round twice and miss the correct result
 * where the fp32 value lands on an fp16 half-way point (1 + 2^-11 + 2^-30 must give
 * 1 + 2^-10, not 1).
 *
 * @param[in] x Value.
 * @return fp16 bits.
 */
FX_API uint16_t fx_f64_to_fp16(double x);
/** @brief binary64 -> bf16 bits, rounded once to nearest even (as fx_f64_to_fp16()).
 *  @param[in] x Value. @return bf16 bits. */
FX_API uint16_t fx_f64_to_bf16(double x);

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
