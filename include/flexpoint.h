/**
 * @file
 * @brief flexpoint: 16-bit training number formats side by side on one tensor interface.
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

/** @def FX_API
 *  @brief Marks the library's exported functions: default symbol visibility with GCC and
 *  Clang (the library hides everything else), dllexport when building the Windows DLL. */
#if defined(_WIN32) && defined(FLEXPOINT_BUILD_SHARED)
#define FX_API __declspec(dllexport)
#elif defined(__GNUC__)
#define FX_API __attribute__((visibility("default")))
#else
#define FX_API
#endif

/** @brief Major version of these headers (the top-level CMakeLists.txt's project() version;
 *  the build checks that they agree, and flexpoint_version() returns the same number). */
#define FLEXPOINT_VERSION_MAJOR 0
/** @brief Minor version of these headers (see FLEXPOINT_VERSION_MAJOR). */
#define FLEXPOINT_VERSION_MINOR 2
/** @brief Patch version of these headers (see FLEXPOINT_VERSION_MAJOR). */
#define FLEXPOINT_VERSION_PATCH 0

/** Largest number of tensor dimensions. */
#define FX_MAX_DIMS 8

/* ------------------------------------------------------------------------------------------ */
/* Status codes                                                                                */
/* ------------------------------------------------------------------------------------------ */

/** @brief Status codes: FX_OK (0) on success, a negative FX_E* code on failure. */
enum {
    FX_OK = 0,            /**< success */
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

/** @brief Short constant name of a status code.
 *  @param[in] status A status code (FX_OK or an FX_E* value).
 *  @return "FX_OK", "FX_ESHAPE", ...; "FX_UNKNOWN" for any other value. A static string owned
 *          by the library. */
FX_API const char *flexpoint_status_str(int status);

/** @brief Message describing the last failure in this thread.
 *  @return A thread-local string owned by the library ("" if none), naming the function and
 *          the offending values. It stays valid until the next library call in the same
 *          thread. */
FX_API const char *flexpoint_last_error(void);

/** @brief Status code of the last failure in this thread. Useful after a constructor returned
 *  NULL.
 *  @return The FX_E* code of the last failure, or FX_OK if none since the last clear. */
FX_API int flexpoint_last_status(void);

/** @brief Clear the thread-local error message and status. */
FX_API void flexpoint_clear_error(void);

/** @brief Version of the library.
 *  @return "MAJOR.MINOR.PATCH", a static string owned by the library: the version of the
 *          build (its CMake project version), equal to FLEXPOINT_VERSION_MAJOR,
 *          FLEXPOINT_VERSION_MINOR and FLEXPOINT_VERSION_PATCH of the headers it was built
 *          with. */
FX_API const char *flexpoint_version(void);

/* ------------------------------------------------------------------------------------------ */
/* Formats                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/** @brief Number formats. Values are stable (they are part of the ABI and of checkpoints). */
typedef enum {
    FMT_FP32 = 0,     /**< IEEE binary32, the reference */
    FMT_FP16 = 1,     /**< IEEE binary16 stored as uint16 */
    FMT_BF16 = 2,     /**< bfloat16 (top half of binary32) stored as uint16 */
    FMT_FLEX16_5 = 3, /**< int16 mantissas, one shared 5-bit exponent managed by Autoflex */
    FMT_DFP16 = 4,    /**< int16 mantissas, one shared 8-bit exponent chosen exactly per write */
    FMT_COUNT = 5     /**< number of formats (not a format) */
} fmt_t;

/** @brief Name of a format.
 *  @param[in] fmt A format.
 *  @return "fp32", "fp16", "bf16", "flex16_5" or "dfp16" (a static string); NULL for an
 *          unknown value. */
FX_API const char *fmt_name(fmt_t fmt);

/** @brief Format for a name.
 *  @param[in] name A name as fmt_name() gives; "flex16+5" is accepted too.
 *  @return The fmt_t value (>= 0).
 *  @retval FX_EINVAL name is NULL.
 *  @retval FX_EFORMAT unknown name. */
FX_API int fmt_from_name(const char *name);

/** @brief Bytes per stored element.
 *  @param[in] fmt A format.
 *  @return 4 for fp32, 2 for the others, 0 for an unknown format. */
FX_API size_t fmt_elem_size(fmt_t fmt);

/** @brief Whether a format stores int16 mantissas with one shared exponent.
 *  @param[in] fmt A format.
 *  @return 1 for FLEX16_5 and DFP16, else 0. */
FX_API int fmt_is_shared_exponent(fmt_t fmt);

/* ------------------------------------------------------------------------------------------ */
/* Tensors                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/** @brief An n-dimensional tensor of one format, or a view of one (opaque). Created by
 *  tensor_new(), tensor_new_device() or the tensor_view_* functions; freed with
 *  tensor_free(). */
typedef struct tensor tensor_t;

/** @brief New zero-filled, contiguous (row-major) tensor.
 *
 *  A shared-exponent tensor starts at exponent -8 (FLEX16_5, window [-31, 0], Autoflex preset
 *  from FLEXPOINT_AUTOFLEX or "robust", the default chosen by the experiments in the README)
 *  or 0 (DFP16).
 *  @param[in] fmt   Format.
 *  @param[in] ndim  Number of dimensions, 1 <= ndim <= FX_MAX_DIMS.
 *  @param[in] shape `ndim` sizes, each >= 0.
 *  @return The new tensor, which the caller owns and frees with tensor_free(); NULL on bad
 *          arguments (FX_EINVAL / FX_EFORMAT) or allocation failure (FX_ENOMEM; also when a
 *          size overflows: more than 2^46 elements, or non-zero sizes whose product in bytes
 *          exceeds int64, even beside a zero size); see flexpoint_last_error(). */
FX_API tensor_t *tensor_new(fmt_t fmt, int ndim, const int64_t *shape);

/** @brief Free a tensor or a view. Storage is released when its last view goes.
 *  @param[in] t The tensor; NULL is a no-op. */
FX_API void tensor_free(tensor_t *t);

/** @brief Number of elements.
 *  @param[in] t The tensor.
 *  @return The product of the shape (0 if any size is 0); -1 if t is NULL. */
FX_API int64_t tensor_numel(const tensor_t *t);
/** @brief Number of dimensions.
 *  @param[in] t The tensor.
 *  @return ndim; FX_EINVAL if t is NULL. */
FX_API int tensor_ndim(const tensor_t *t);
/** @brief Sizes of the tensor.
 *  @param[in] t The tensor.
 *  @return Pointer to the tensor's ndim sizes, owned by the tensor; NULL if t is NULL. */
FX_API const int64_t *tensor_shape(const tensor_t *t);
/** @brief Strides of the tensor, in elements.
 *  @param[in] t The tensor.
 *  @return Pointer to the tensor's ndim strides, owned by the tensor; NULL if t is NULL. */
FX_API const int64_t *tensor_strides(const tensor_t *t);
/** @brief Format of the tensor.
 *  @param[in] t The tensor.
 *  @return The tensor's format; (fmt_t)FX_EINVAL if t is NULL. */
FX_API fmt_t tensor_fmt(const tensor_t *t);
/** @brief Whether the tensor's elements are contiguous in row-major order.
 *  @param[in] t The tensor.
 *  @return 1 if contiguous, 0 if not, FX_EINVAL if t is NULL. */
FX_API int tensor_is_contiguous(const tensor_t *t);

/** @brief Write all elements of t from floats.
 *
 *  This is a *write*: fp16/bf16 round to nearest even; shared-exponent tensors choose the
 *  exponent (DFP16: exact; FLEX16_5: Autoflex) and record statistics (see tensor_stat()).
 *  NaN/Inf inputs are not errors; they are counted.
 *  @param[out] t   The tensor (host memory).
 *  @param[in]  src numel floats, row-major over t's logical shape.
 *  @retval FX_OK
 *  @retval FX_EINVAL t or src is NULL, or t is a device tensor (flexpoint_gpu.h).
 *  @retval FX_ENOMEM scratch memory could not be allocated. */
FX_API int tensor_from_f32(tensor_t *t, const float *src);

/** @brief Read all elements of t as floats.
 *
 *  fp16/bf16 convert exactly; shared-exponent values m*2^e are exact unless they exceed the
 *  fp32 range (DFP16 with e > 112 can overflow to +-Inf).
 *  @param[in]  t   The tensor (host memory).
 *  @param[out] dst numel floats, row-major.
 *  @retval FX_OK
 *  @retval FX_EINVAL t or dst is NULL, or t is a device tensor (flexpoint_gpu.h).
 *  @retval FX_ENOMEM scratch memory for a non-contiguous view could not be allocated. */
FX_API int tensor_to_f32(const tensor_t *t, float *dst);

/** @brief Copy the raw storage elements of t.
 *  @param[in]  t   The tensor (host memory).
 *  @param[out] dst numel elements, row-major over t's logical shape: 4-byte floats for FP32,
 *                  2-byte patterns (uint16 or int16) for the others.
 *  @retval FX_OK
 *  @retval FX_EINVAL t or dst is NULL, or t is a device tensor. */
FX_API int tensor_get_raw(const tensor_t *t, void *dst);
/** @brief Write raw storage elements (see tensor_get_raw()). The exponent is unchanged.
 *  @param[out] t   The tensor (host memory).
 *  @param[in]  src numel elements, row-major, in the layout tensor_get_raw() gives.
 *  @retval FX_OK
 *  @retval FX_EINVAL t or src is NULL, or t is a device tensor.
 *  @retval FX_ERANGE a shared-exponent value outside [-32767, 32767] (nothing written). */
FX_API int tensor_set_raw(tensor_t *t, const void *src);

/** @brief Pointer to the first element of t's storage (at the view's offset), for zero-copy
 *  access by bindings. A FLEX16_5/DFP16 mantissa written through it must lie in
 *  [-32767, 32767], as every write of the library leaves it (tensor_set_raw() checks; the
 *  exact integer kernels rely on it: -32768 is not a mantissa).
 *  @param[in] t The tensor (host memory).
 *  @return The pointer, owned by the tensor and valid while any view of the storage lives;
 *          NULL if t is NULL or a device tensor (its memory is not addressable from the
 *          host). */
FX_API void *tensor_data(tensor_t *t);

/* Views share storage with their source; the caller frees the returned view with tensor_free. */

/** @brief View with a new shape of equal numel.
 *  @param[in] t     The tensor; must be contiguous.
 *  @param[in] ndim  Number of dimensions of the view, 1 <= ndim <= FX_MAX_DIMS.
 *  @param[in] shape `ndim` sizes, each >= 0, with t's numel.
 *  @return The view, which the caller owns and frees with tensor_free(); NULL on failure:
 *          FX_EINVAL (NULL t, bad ndim or shape, t not contiguous), FX_ESHAPE (a different
 *          numel), FX_ENOMEM (also when a size overflows, as in tensor_new()). */
FX_API tensor_t *tensor_view_reshape(const tensor_t *t, int ndim, const int64_t *shape);
/** @brief View with dimensions d0 and d1 swapped.
 *  @param[in] t  The tensor.
 *  @param[in] d0 A dimension (negative indices count from the end).
 *  @param[in] d1 The other dimension (likewise).
 *  @return The view, which the caller owns and frees with tensor_free(); NULL on failure:
 *          FX_EINVAL (NULL t, a dimension out of range), FX_ENOMEM. */
FX_API tensor_t *tensor_view_transpose(const tensor_t *t, int d0, int d1);
/** @brief View of indices start, start+step, ... < stop along dimension dim.
 *  @param[in] t     The tensor.
 *  @param[in] dim   The dimension (negative counts from the end).
 *  @param[in] start First index, 0 <= start <= stop.
 *  @param[in] stop  End (exclusive), stop <= shape[dim].
 *  @param[in] step  Step, >= 1.
 *  @return The view, which the caller owns and frees with tensor_free(); NULL on failure:
 *          FX_EINVAL (NULL t, bad dim, step or bounds), FX_ENOMEM (also when an offset
 *          overflows). */
FX_API tensor_t *tensor_view_slice(const tensor_t *t, int dim, int64_t start, int64_t stop,
                                   int64_t step);

/* ------------------------------------------------------------------------------------------ */
/* Shared-exponent state (FLEX16_5, DFP16)                                                    */
/* ------------------------------------------------------------------------------------------ */

/** @brief Current shared exponent of a FLEX16_5/DFP16 tensor (value = m * 2^exp).
 *
 *  A device tensor whose last write chose its exponent on the device (flexpoint_gpu.h) waits
 *  for that write's statistics first. Prefer tensor_get_exp() where a failure must not go
 *  unseen.
 *  @param[in] t The tensor.
 *  @return The exponent. For other formats or NULL it returns 0 and sets the error message;
 *          check tensor_fmt() first. */
FX_API int tensor_exp(const tensor_t *t);
/** @brief The shared exponent, with a status. Prefer it to tensor_exp() where a failure must
 *  not go unseen.
 *  @param[in]  t The tensor.
 *  @param[out] e The exponent.
 *  @retval FX_OK
 *  @retval FX_EINVAL t or e is NULL.
 *  @retval FX_EFORMAT a float format.
 *  @retval FX_EDEVICE a device write's statistics cannot be collected or its exponent
 *          disagrees with the core's rules (*e is then the exponent the data are held at, as
 *          far as the host knows). */
FX_API int tensor_get_exp(const tensor_t *t, int *e);

/** @brief Set the shared exponent.
 *
 *  The stored mantissas are rescaled to keep their values (rounding shift, ties to even,
 *  saturating; saturation is counted). A device tensor is rescaled on its device (the call
 *  waits for it).
 *  @param[in,out] t The tensor (FLEX16_5 or DFP16).
 *  @param[in]     e The new exponent, inside the tensor's window ([lo, lo+31] for FLEX16_5,
 *                   [-128, 127] for DFP16).
 *  @retval FX_OK
 *  @retval FX_EINVAL t is NULL.
 *  @retval FX_EFORMAT other formats.
 *  @retval FX_ERANGE e is outside the window.
 *  @retval FX_EDEVICE the device rescale (or collecting a pending device write) failed; the
 *          exponent is unchanged. */
FX_API int tensor_set_exp(tensor_t *t, int e);

/** @brief FLEX16_5 only: set the exponent window to [lo, lo+31].
 *
 *  The current exponent is clamped into the window (rescaling the mantissas as
 *  tensor_set_exp() does).
 *  @param[in,out] t  The FLEX16_5 tensor.
 *  @param[in]     lo Window start, in [-128, 96].
 *  @retval FX_OK
 *  @retval FX_EINVAL t is NULL.
 *  @retval FX_EFORMAT t is not FLEX16_5.
 *  @retval FX_ERANGE lo is outside [-128, 96].
 *  @retval FX_EDEVICE a device rescale failed; neither the window nor the exponent changes. */
FX_API int tensor_set_exp_window(tensor_t *t, int lo);
/** @brief Window of a shared-exponent tensor.
 *  @param[in]  t  The tensor.
 *  @param[out] lo Lowest exponent of the window.
 *  @param[out] hi Highest exponent of the window.
 *  @retval FX_OK
 *  @retval FX_EINVAL t, lo or hi is NULL.
 *  @retval FX_EFORMAT float formats. */
FX_API int tensor_exp_window(const tensor_t *t, int *lo, int *hi);

/** @brief Rounding of fp32 -> shared-exponent conversions (every write from float data). */
enum {
    FX_ROUND_NEAREST_EVEN = 0, /**< round to nearest, ties to even (the default) */
    FX_ROUND_STOCHASTIC = 1    /**< stochastic rounding (tensor_set_rounding()) */
};

/** @brief Set the rounding mode for writes into t. Resets the write counter.
 *
 *  Stochastic rounding draws from a counter-based generator keyed by (seed, the tensor's write
 *  counter, element index), so results are the same for any thread count and backend.
 *  @param[in,out] t    The tensor (FLEX16_5 or DFP16).
 *  @param[in]     mode FX_ROUND_NEAREST_EVEN or FX_ROUND_STOCHASTIC.
 *  @param[in]     seed Seed of the stochastic rounding.
 *  @retval FX_OK
 *  @retval FX_EINVAL t is NULL or mode is unknown.
 *  @retval FX_EFORMAT t is not FLEX16_5 or DFP16. */
FX_API int tensor_set_rounding(tensor_t *t, int mode, uint64_t seed);

/** @brief Read a statistic of a shared-exponent tensor.
 *
 *  Names:
 *  - "saturated": elements that saturated in the last write
 *  - "true_max": largest finite |value| of the last write, before saturation (real units)
 *  - "nonfinite": NaN/Inf inputs in the last write
 *  - "underflow": nonzero finite inputs that rounded to 0 in the last write
 *  - "clamped": 1 if the last write's wanted exponent was outside the window, else 0
 *  - "overflows": writes that saturated, cumulative
 *  - "clamped_total", "nonfinite_total", "writes": cumulative counts
 *  - "exp": current exponent
 *  - "stored_max": largest |m| * 2^exp stored by the last write
 *
 *  @param[in]  t     The tensor.
 *  @param[in]  name  Name of the statistic.
 *  @param[out] value The statistic.
 *  @retval FX_OK
 *  @retval FX_EINVAL t, name or value is NULL.
 *  @retval FX_EFORMAT float formats.
 *  @retval FX_ENAME unknown name.
 *  @retval FX_EDEVICE a pending device write's statistics cannot be collected. */
FX_API int tensor_stat(const tensor_t *t, const char *name, double *value);

/* ------------------------------------------------------------------------------------------ */
/* Autoflex                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/** @brief Autoflex initialisation (fx_autoflex_config::init_mode). */
enum {
    FX_AF_INIT_PROBE = 0, /**< probe: trial writes from init_exp (at most probe_tries) */
    FX_AF_INIT_EXACT = 1  /**< one exact calibration pass on the true maximum */
};
/** @brief Statistic pushed to the Autoflex history (fx_autoflex_config::stat_mode). */
enum {
    FX_AF_STAT_SATURATED_MAX = 0, /**< saturated max (2 * 32767 * 2^e on overflow, history
                                       cleared) */
    FX_AF_STAT_TRUE_MAX = 1       /**< the true max from the kernel (history kept) */
};
/** @brief What a saturating write does (fx_autoflex_config::overflow_mode). */
enum {
    FX_AF_OVERFLOW_KEEP = 0,     /**< keep the saturated values */
    FX_AF_OVERFLOW_RECOMPUTE = 1 /**< redo the write at the exact exponent */
};

/** @brief Autoflex configuration (docs/autoflex.md). Passed by pointer, never by value. */
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

/** @brief Fill a configuration with a named preset.
 *  @param[in]  name "published" (Koester et al. 2017, bit-exact), "fixed" (management off),
 *                   "truemax" (published + true-max statistic), "exact_init" (published +
 *                   calibrated initialisation), "robust" (true max + exact init + recompute
 *                   on overflow).
 *  @param[out] cfg  The configuration.
 *  @retval FX_OK
 *  @retval FX_EINVAL name or cfg is NULL.
 *  @retval FX_ENAME unknown name. */
FX_API int fx_autoflex_preset(const char *name, fx_autoflex_config *cfg);

/** @brief Switch a FLEX16_5 tensor to a named preset. Resets the history (the exponent is
 *  kept).
 *  @param[in,out] t      The FLEX16_5 tensor.
 *  @param[in]     preset Preset name, as for fx_autoflex_preset().
 *  @retval FX_OK
 *  @retval FX_EINVAL t or preset is NULL.
 *  @retval FX_EFORMAT t is not FLEX16_5.
 *  @retval FX_ENAME unknown preset.
 *  @retval FX_EDEVICE a pending device write's statistics cannot be collected. */
FX_API int tensor_set_autoflex(tensor_t *t, const char *preset);
/** @brief Same as tensor_set_autoflex() with an explicit configuration.
 *  @param[in,out] t   The FLEX16_5 tensor.
 *  @param[in]     cfg The configuration (validated).
 *  @retval FX_OK
 *  @retval FX_EINVAL t or cfg is NULL, or a field is out of range.
 *  @retval FX_EFORMAT t is not FLEX16_5.
 *  @retval FX_EDEVICE a pending device write's statistics cannot be collected. */
FX_API int tensor_set_autoflex_config(tensor_t *t, const fx_autoflex_config *cfg);
/** @brief Copy the tensor's Autoflex configuration.
 *  @param[in]  t   The FLEX16_5 tensor.
 *  @param[out] cfg The configuration.
 *  @retval FX_OK
 *  @retval FX_EINVAL t or cfg is NULL.
 *  @retval FX_EFORMAT t is not FLEX16_5. */
FX_API int tensor_get_autoflex_config(const tensor_t *t, fx_autoflex_config *cfg);

/** @brief One record of a tensor's write trace (tensor_trace_get()). */
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

/** @brief Start or stop recording one record per write. Starting clears the trace.
 *  @param[in,out] t  The tensor (shared-exponent formats only).
 *  @param[in]     on Nonzero starts, 0 stops.
 *  @retval FX_OK
 *  @retval FX_EINVAL t is NULL.
 *  @retval FX_EFORMAT a float format.
 *  @retval FX_EDEVICE a pending device write's statistics cannot be collected. */
FX_API int tensor_trace_enable(tensor_t *t, int on);
/** @brief Number of trace records.
 *  @param[in] t The tensor (shared-exponent formats only).
 *  @return The count (>= 0); a negative status on error (FX_EINVAL, FX_EFORMAT, FX_EDEVICE as
 *          for tensor_trace_enable()). */
FX_API int64_t tensor_trace_len(const tensor_t *t);
/** @brief Copy one trace record.
 *  @param[in]  t   The tensor (shared-exponent formats only).
 *  @param[in]  i   Record index, 0 <= i < tensor_trace_len().
 *  @param[out] rec The record.
 *  @retval FX_OK
 *  @retval FX_EINVAL t or rec is NULL.
 *  @retval FX_EFORMAT a float format.
 *  @retval FX_ERANGE i is out of range.
 *  @retval FX_EDEVICE a pending device write's statistics cannot be collected. */
FX_API int tensor_trace_get(const tensor_t *t, int64_t i, fx_trace_record *rec);
/** @brief Write the trace as CSV (header line, then one row per write), atomically (temporary
 *  file, then rename).
 *  @param[in] t    The tensor (shared-exponent formats only).
 *  @param[in] path File to write.
 *  @retval FX_OK
 *  @retval FX_EINVAL t is NULL, or path is NULL or empty.
 *  @retval FX_EFORMAT a float format.
 *  @retval FX_EIO the file cannot be written.
 *  @retval FX_ENOMEM
 *  @retval FX_EDEVICE a pending device write's statistics cannot be collected. */
FX_API int tensor_trace_write_csv(const tensor_t *t, const char *path);

/* ------------------------------------------------------------------------------------------ */
/* Ops                                                                                         */
/* ------------------------------------------------------------------------------------------ */
/**
 * @name Ops
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
 * Status: FX_OK, FX_EINVAL (NULL, bad axis), FX_ESHAPE (shapes), FX_ENOMEM. Device tensors
 * (flexpoint_gpu.h): FX_EINVAL when host and device tensors are mixed, FX_EDEVICE when the
 * device fails.
 */
/** @{ */

/** @brief out = a + b elementwise, with NumPy broadcasting of a and b to out's shape.
 *  @param[out] out Output, any format, with the broadcast shape.
 *  @param[in]  a   First input.
 *  @param[in]  b   Second input.
 *  @return FX_OK; FX_EINVAL (NULL); FX_ESHAPE (shapes that do not broadcast to out's);
 *          FX_ENOMEM; FX_EDEVICE (device tensors). */
FX_API int tensor_add(tensor_t *out, const tensor_t *a, const tensor_t *b);
/** @brief out = a - b elementwise, with NumPy broadcasting of a and b to out's shape.
 *  @param[out] out Output, any format, with the broadcast shape.
 *  @param[in]  a   First input.
 *  @param[in]  b   Second input.
 *  @return As tensor_add(). */
FX_API int tensor_sub(tensor_t *out, const tensor_t *a, const tensor_t *b);
/** @brief out = a * b elementwise, with NumPy broadcasting of a and b to out's shape.
 *  @param[out] out Output, any format, with the broadcast shape.
 *  @param[in]  a   First input.
 *  @param[in]  b   Second input.
 *  @return As tensor_add(). */
FX_API int tensor_mul(tensor_t *out, const tensor_t *a, const tensor_t *b);

/** @brief out = s * a.
 *
 *  For integer compute s is used as m_s * 2^k with a 31-bit m_s (exact for every float and
 *  for doubles with <= 31 significant bits).
 *  @param[out] out Output with a's shape, any format.
 *  @param[in]  a   Input.
 *  @param[in]  s   Scale factor, finite.
 *  @return FX_OK; FX_EINVAL (NULL, or s not finite); FX_ESHAPE; FX_ENOMEM; FX_EDEVICE. */
FX_API int tensor_scale(tensor_t *out, const tensor_t *a, double s);

/** @brief out = max(a, 0) elementwise (same shape).
 *  @param[out] out Output with a's shape, any format.
 *  @param[in]  a   Input.
 *  @return FX_OK; FX_EINVAL (NULL); FX_ESHAPE; FX_ENOMEM; FX_EDEVICE. */
FX_API int tensor_relu(tensor_t *out, const tensor_t *a);

/** @brief Copy with format conversion: out = a (same shape). A write into out.
 *  @param[out] out Output with a's shape, any format.
 *  @param[in]  a   Input.
 *  @return FX_OK; FX_EINVAL (NULL); FX_ESHAPE; FX_ENOMEM; FX_EDEVICE. */
FX_API int tensor_copy(tensor_t *out, const tensor_t *a);

/** @brief The axis argument of tensor_sum() and tensor_mean() that reduces everything. */
#define FX_AXIS_ALL (-1000)
/** @brief Sum of a, over one axis or over everything.
 *
 *  Float formats accumulate in fp32; integer formats exactly in int64.
 *  @param[out] out Output: numel 1 for FX_AXIS_ALL; otherwise a's shape without that axis, or
 *                  with it kept as size 1.
 *  @param[in]  a    Input.
 *  @param[in]  axis FX_AXIS_ALL reduces everything; otherwise the axis to reduce (negative
 *                   counts from the end).
 *  @return FX_OK; FX_EINVAL (NULL, bad axis); FX_ESHAPE (out's shape); FX_ENOMEM;
 *          FX_EDEVICE. */
FX_API int tensor_sum(tensor_t *out, const tensor_t *a, int axis);

/** @brief Matrix product: out[M,N] = a[M,K] x b[K,N], 2-D operands.
 *
 *  Transposed operands are passed as views (tensor_view_transpose()), which cost nothing:
 *  kernels read any strides.
 *  @param[out] out Output [M,N], any format.
 *  @param[in]  a   Left operand [M,K].
 *  @param[in]  b   Right operand [K,N].
 *  @return FX_OK; FX_EINVAL (NULL); FX_ESHAPE (not 2-D, or the sizes do not fit);
 *          FX_ENOMEM; FX_EDEVICE. */
FX_API int tensor_matmul(tensor_t *out, const tensor_t *a, const tensor_t *b);
/** @} */

/* ------------------------------------------------------------------------------------------ */
/* Element-wise math functions                                                                */
/* ------------------------------------------------------------------------------------------ */
/**
 * @name Element-wise math functions
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
 * silu, gelu_tanh 3.5; gelu 4; pow 0.5 (plus 2^-16); clamp, abs exact.
 * Special values follow IEEE 754 where it defines them (log(0) = -Inf, log(-1) = NaN,
 * sqrt(-0) = -0, rsqrt(+0) = +Inf, reciprocal(-0) = -Inf, ...) and the limits elsewhere
 * (tanh(+-Inf) = +-1, sigmoid(-Inf) = 0, gelu(-Inf) = silu(-Inf) = -0, gelu(+Inf) = +Inf).
 * Device tensors: not implemented (FX_EUNSUPPORTED).
 * Like every op, these write into a caller-provided out of any format, which may be the input
 * itself (in place); nothing is written on failure.
 */
/** @{ */

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
/** @} */

/* ------------------------------------------------------------------------------------------ */
/* Scalar conversions                                                                          */
/* ------------------------------------------------------------------------------------------ */
/**
 * @name Scalar conversions
 * One value at a time, for callers that do not hold tensors. Bit patterns travel as uint16_t.
 * These are the definitions every tensor path of the library reproduces (docs/formats.md):
 * round to nearest, ties to even; overflow gives +-Inf (fp16: |x| >= 65520); subnormals are
 * kept; NaN gives a quiet NaN with the sign kept (fp16 sign|0x7E00, bf16 sign|0x7FC0); -0
 * stays -0. They do not depend on the floating-point environment (integer arithmetic only).
 */
/** @{ */

/** @brief fp32 -> fp16 bits, round to nearest even. @param[in] x Value. @return fp16 bits. */
FX_API uint16_t fx_f32_to_fp16(float x);
/** @brief fp16 bits -> fp32, exact (NaN payloads kept). @param[in] h fp16 bits. @return The value. */
FX_API float fx_fp16_to_f32(uint16_t h);
/** @brief fp32 -> bf16 bits, round to nearest even. @param[in] x Value. @return bf16 bits. */
FX_API uint16_t fx_f32_to_bf16(float x);
/**
 * @brief fp32 -> bf16 bits by truncation (round toward zero): the top 16 bits.
 *
 * TensorFlow's tensorflow::FloatToBFloat16 (tensorflow/core/framework/bfloat16.cc) converts
 * this way, copying the upper 16 bits of each float (its RoundFloatToBFloat16 rounds to
 * nearest even), and Arm's BFCVT/BFCVTN (Armv8.6 BF16) follow the FPCR rounding mode, so
 * they truncate when it selects round toward zero; use this function to reproduce such
 * numbers (docs/math.md). NaN still gives the quiet NaN sign|0x7FC0 (truncating a NaN whose
 * payload is in the low bits would give Inf).
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
/** @} */

/* ------------------------------------------------------------------------------------------ */
/* Backends and threads                                                                        */
/* ------------------------------------------------------------------------------------------ */

/** @brief Number of CPU backends compiled in ("scalar", "avx2", "avx512").
 *  @return The count. */
FX_API int flexpoint_backend_count(void);
/** @brief Name of a CPU backend.
 *  @param[in] i Backend index, 0 <= i < flexpoint_backend_count().
 *  @return The name (a static string); NULL for another i. */
FX_API const char *flexpoint_backend_name(int i);
/** @brief Whether this CPU (cpuid + xgetbv) can run a backend.
 *  @param[in] i Backend index.
 *  @return 1 if it can, else 0 (also for an index out of range). */
FX_API int flexpoint_backend_available(int i);
/** @brief Select the CPU backend by name (a global setting).
 *
 *  At start-up the best available backend is used, or the one in FLEXPOINT_CPU.
 *  @param[in] name "scalar", "avx2" or "avx512".
 *  @retval FX_OK
 *  @retval FX_EINVAL name is NULL.
 *  @retval FX_ENAME unknown name.
 *  @retval FX_EUNSUPPORTED the CPU cannot run it. */
FX_API int flexpoint_set_backend(const char *name);
/** @brief Name of the backend in use.
 *  @return "scalar", "avx2" or "avx512" (a static string). */
FX_API const char *flexpoint_backend(void);
/** @brief CPU features detected.
 *  @return A space-separated list ("avx2 fma f16c avx512f avx512bw ..."), a static string
 *          owned by the library. */
FX_API const char *flexpoint_cpu_features(void);

/** @brief The CPU's vendor, family and model as cpuid reports them.
 *  @return E.g. "GenuineIntel family 6 model 207" (display family and model, decimal), a
 *          static string owned by the library; "unknown family 0 model 0" where cpuid is
 *          not available. */
FX_API const char *flexpoint_cpu_model(void);
/** @brief Name of the kernel the active backend runs for an op and format.
 *
 *  Where an op and format have more than one kernel on a CPU, the backend chooses by a table
 *  of measurements per microarchitecture (vendor, family, model); for a CPU the table does not
 *  list (hypervisors often report a model number that is not the core's), and for one that can
 *  run AMX, it measures the instruction rates the routes are built on at first use (about
 *  20 ms, in the first call's thread) and keeps the answer per CPU model in a cache file (FLEXPOINT_CACHE_DIR, else
 *  $XDG_CACHE_HOME/flexpoint, else $HOME/.cache/flexpoint; a missing, stale or corrupt file is
 *  measured again and rewritten; FLEXPOINT_KERNEL_CACHE=off measures in every process). The
 *  environment variable FLEXPOINT_KERNEL_BF16_GEMM (read once, at first use) or
 *  flexpoint_set_kernel() forces a kernel over either. Today that is the bf16 matmul on
 *  AVX-512 with AVX512_BF16: "avx512-dpbf16" (vdpbf16ps on bf16 pairs), "avx512-widen" (bf16
 *  widened to fp32, fp32 FMAs) or, with AMX-BF16 that the OS lets the process use,
 *  "avx512-amx" (tdpbf16ps on AMX tiles; subnormal inputs read as zero and subnormal results
 *  flushed, as vdpbf16ps). Their sums run in different orders, so their bf16 results differ in the last bits; a run records the
 *  name to be reproducible (FLEXPOINT_CPU=avx512 FLEXPOINT_KERNEL_BF16_GEMM=widen gives the
 *  widen route's bits on another AVX-512 machine). Convolutions run on the same kernels
 *  (on "avx512-amx", those with fewer than 32 values per patch run on the widening one).
 *
 *  The exact int16 matmul of FLEX16_5 and DFP16 (one GEMM for both) picks a micro-kernel per
 *  register tile: "fast" (one pair product per pair, where the operands' norms prove the int32
 *  chains cannot wrap), "split" (any data, two multiplies per pair) or, on AVX-512 with
 *  AVX512_VNNI, "wrap" (any data, 1.5 multiplies per pair, on K blocks of at least 127
 *  values). Where the CPU has AMX-INT8 that the OS lets the process use, the AVX-512 level has
 *  one more kernel, "avx512-i16-amx": every int16 value split into a signed high and an
 *  unsigned low byte, four byte products on AMX tiles, exact int32 sums combined in int64; it
 *  takes plain products from 16 x 32 x 16 (smaller ones and pre-packed convolution operands go
 *  to the register tiles), and convolutions with at least 256 values per patch hand it their
 *  patch rows. Under "auto" (the default) the name is the level's ("avx2-i16",
 *  "avx512-i16"), or "avx512-i16-amx" where a measurement of the two instruction rates (cached
 *  per CPU model like the bf16 one) preferred AMX. The environment variable
 *  FLEXPOINT_KERNEL_I16_GEMM=auto|split|wrap|fast|amx (read once, at first use; an unknown
 *  value, "wrap" on a CPU without AVX512_VNNI or "amx" without usable AMX-INT8 is refused with
 *  a message on stderr and auto stays) or flexpoint_set_kernel() forces one, named
 *  "avx2-i16-split", "avx512-i16-wrap" and so on. "fast" runs the norm test on every product
 *  and still gives the tiles it refuses to an any-data kernel. The integer results are
 *  bit-identical whatever the kernel; forcing one reproduces a run's speed profile.
 *  @param[in] op "matmul".
 *  @param[in] fmt A format (the compute format of both operands).
 *  @return A static string ("scalar", "avx2-fma", "avx2-widen", "avx2-i16", "avx2-i16-split",
 *          "avx2-i16-fast", "avx512-fma", "avx512-widen", "avx512-dpbf16", "avx512-amx",
 *          "avx512-i16",
 *          "avx512-i16-split", "avx512-i16-wrap", "avx512-i16-fast", "avx512-i16-amx"); NULL
 *          for an unknown op
 *          or format. */
FX_API const char *flexpoint_kernel_name(const char *op, fmt_t fmt);
/** @brief Force the kernel for an op and format (a global setting, like
 *  flexpoint_set_backend(); not while ops run on other threads).
 *  @param[in] op "matmul".
 *  @param[in] fmt FMT_BF16 chooses among "widen", "dpbf16" and "amx" (the "avx512-" prefix
 *             is optional) for the AVX-512 backend; FMT_FLEX16_5 or FMT_DFP16 sets the int16
 *             matmul kernel of both formats: "auto", "split", "wrap", "fast" or "amx" (bare, or as
 *             flexpoint_kernel_name() gives it; "avx2-i16" and "avx512-i16" mean auto); for
 *             another format only the name of its one kernel (flexpoint_kernel_name()) is
 *             accepted.
 *  @param[in] name Kernel name.
 *  @retval FX_OK
 *  @retval FX_EINVAL op or name is NULL, or fmt is not a format.
 *  @retval FX_ENAME unknown op or kernel name (nothing changes).
 *  @retval FX_EUNSUPPORTED the CPU cannot run that kernel ("dpbf16" without AVX512_BF16,
 *          "amx" without AMX-BF16 or the OS's permission, "wrap" without AVX512_VNNI, int16
 *          "amx" without AMX-INT8 or the OS's permission; nothing changes). */
FX_API int flexpoint_set_kernel(const char *op, fmt_t fmt, const char *name);
/** @brief One line naming the backend, the matmul kernel per format, what chose the
 *  AVX-512 level's bf16 route and how the int16 matmul picks its kernel per tile and what
 *  chose that, e.g. "backend=avx512 matmul/fp32=avx512-fma ... matmul/bf16=avx512-widen
 *  (avx512 bf16 route chosen by table: ...; int16 kernel: auto: fast where the norms allow,
 *  else wrap (K >= 63) or split, chosen by default)", with "; int16 AMX under auto chosen by
 *  measurement ..." after the bf16 chooser where the AMX int16 kernel exists; the bf16 chooser is the per-CPU table,
 *  a measurement made now or read from the cache (with the measured rates and the cache
 *  file's path), FLEXPOINT_KERNEL_BF16_GEMM, flexpoint_set_kernel, or the CPU itself where only
 *  one route runs; the int16 one "default", FLEXPOINT_KERNEL_I16_GEMM or flexpoint_set_kernel.
 *  @return A static string owned by the library, rewritten by each call (copy it before
 *          calling again from another thread). */
FX_API const char *flexpoint_kernel_report(void);
/** @brief This CPU's instruction limits for one thread, measured: the rates at which it
 *  retires the multiply instructions the GEMMs are built on, so that a GEMM's speed can be
 *  given as a share of what the hardware can do.
 *
 *  Each is a dependency-free loop of one instruction with twelve accumulators (4 M iterations,
 *  best of 5), run once per process at the first call (about 0.1-0.2 s in all); later calls
 *  return the same numbers. The instructions follow the CPU, not the active backend: 512-bit
 *  where it has AVX-512 F/BW/VL/DQ, else 256-bit. Rates count two operations per product (a
 *  multiply and an add), as GEMM GFLOP/s count 2 M N K. Another busy thread on the same core
 *  lowers them: measure on an idle machine, or in the same run as what is compared.
 *  @param[out] fp32_fma   GFLOP/s of vfmadd231ps (zmm, else ymm with FMA); 0 without FMA.
 *  @param[out] i16_pairs  GOP/s of int16 pair products: vpdpwssd zmm (AVX512_VNNI), vpmaddwd
 *                         zmm (AVX-512BW) or vpmaddwd ymm (AVX2; the vpaddd that accumulates
 *                         its result is not counted, so the limit is an upper bound); 0
 *                         without AVX2.
 *  @param[out] bf16_pairs GFLOP/s of vdpbf16ps zmm (AVX512_BF16); 0 without.
 *  Each pointer may be NULL.
 *  @retval FX_OK
 *  @retval FX_EUNSUPPORTED not an x86-64 build (all limits 0). */
FX_API int flexpoint_instruction_limits(double *fp32_fma, double *i16_pairs, double *bf16_pairs);
/** @brief The limits of flexpoint_instruction_limits() in one line with the instructions
 *  measured, e.g. "fp32 FMA (vfmadd231ps ymm) 112.0 GFLOP/s, int16 pair products (vpmaddwd
 *  ymm) 224.0 GOP/s (168.0 with the vpaddd that accumulates each), bf16 pair products (none)
 *  0.0 GFLOP/s; one thread" (measuring them at the first call). The parenthesis, on AVX2
 *  without AVX-512, is the rate of vpmaddwd and vpaddd issued together, as the AVX2 GEMM must:
 *  the ceiling of an int16 GEMM on that CPU, below the multiplies' own limit where the adds
 *  compete for the same ports.
 *  @return A static string owned by the library. */
FX_API const char *flexpoint_instruction_limits_report(void);

/** @brief The exact int16 GEMM's work since the process started (flexpoint_gemm_i16_stats()):
 *  FLEX16_5 and DFP16 products (matmul, linear, convolution) on the CPU's register-tile
 *  kernels, summed over threads and calls. Each register tile of each K block takes the fast
 *  kernel (one multiply per pair of k, int32 chains folded as the tile's segment norms allow)
 *  or an any-data kernel (split or wrap: 1.5 to 2 multiplies per pair, for data the norms do
 *  not clear, and products whose K blocks are too short to pay for the norms); the results are
 *  the same bits either way, so these counts only say where the speed went. Products on the AMX
 *  kernel, the GPU, or in the portable level are not counted. Compare two readings for one
 *  piece of work (counts are process-wide: other threads' products count too). */
typedef struct flexpoint_gemm_i16_stats_t {
    int64_t fast_tiles;    /**< tile x K-block units on the fast kernel */
    int64_t anydata_tiles; /**< tile x K-block units on an any-data kernel */
    int64_t fast_pairs;    /**< pairs of k those fast units ran (one count per unit) */
    int64_t anydata_pairs; /**< pairs of k the any-data units ran */
    int64_t fast_chains;   /**< int32 chains the fast units ran: fast_pairs / fast_chains is
                                the mean number of pairs between two folds */
} flexpoint_gemm_i16_stats_t;

/** @brief Read the counts of flexpoint_gemm_i16_stats_t (cumulative, never reset).
 *  @param[out] st Filled.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL st. */
FX_API int flexpoint_gemm_i16_stats(flexpoint_gemm_i16_stats_t *st);

/** @brief Set the number of threads used by ops (OpenMP). Results of the integer formats do
 *  not depend on it.
 *  @param[in] n Thread count; n <= 0 restores the default (OMP/all cores).
 *  @return The previous setting (as flexpoint_num_threads() gave it). */
FX_API int flexpoint_set_num_threads(int n);
/** @brief Number of threads used by ops.
 *  @return The count set with flexpoint_set_num_threads(), else the default (OpenMP's maximum;
 *          1 without OpenMP). */
FX_API int flexpoint_num_threads(void);

/** @brief Number of CUDA devices visible.
 *  @return The count; 0 when built without CUDA or none is present. */
FX_API int flexpoint_gpu_device_count(void);

#ifdef __cplusplus
}
#endif
#endif /* FLEXPOINT_H */
