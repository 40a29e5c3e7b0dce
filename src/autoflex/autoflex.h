/* Autoflex: the exponent manager of FLEX16_5 tensors (docs/autoflex.md).
 * Called only by the dispatcher (predict before a write, observe after it); kernels merely
 * report fx_qstats. A leaf of the layering (docs/architecture.md): it uses the public types of
 * flexpoint.h and the format arithmetic of flex_math.h, never the core; the core keeps the
 * state (fx_af_state) in each storage and owns the public tensor_*autoflex* functions
 * (src/core/tensor_autoflex.c). tests/check_layers.sh enforces the includes. */
#ifndef FX_AUTOFLEX_H
#define FX_AUTOFLEX_H

#include "flexpoint.h"
#include "../flex/flex_math.h"

#include <stddef.h>

#define FX_AF_MAX_HISTORY 64

typedef struct fx_af_state {
    fx_autoflex_config cfg;
    int initialized;
    int hist_n;   /* entries in use */
    int hist_pos; /* next slot to overwrite (ring buffer) */
    double hist[FX_AF_MAX_HISTORY]; /* maxima in real units */
} fx_af_state;

/* The pending write, seen by the exponent manager. */
typedef struct fx_af_writer {
    void *ctx;
    /* Quantise the pending write at exponent e without keeping it; fill *st. */
    void (*trial)(void *ctx, int e, fx_qstats *st);
    double true_max; /* largest finite |value| of the pending write, real units (0 if none) */
} fx_af_writer;

/* Check a configuration without touching the library's error state: FX_OK, or FX_EINVAL with
 * the reason ("beta = nan, must be finite and >= 0", naming the field) written into
 * why[0..n), truncated to fit (why may be NULL when n is 0). fx_af_config_validate
 * (src/core/internal.h) is the form that sets the error message. */
int fx_af_config_check(const fx_autoflex_config *cfg, char *why, size_t n);

/* Reset the state to a configuration (history cleared, not initialised). */
void fx_af_reset(fx_af_state *s, const fx_autoflex_config *cfg);

/* Exponent for the next write into a tensor whose exponent is cur_e and window [lo, hi].
 * First write: initialisation (probe or exact). Later writes: prediction from the history.
 * Unmanaged ("fixed"): cur_e. *clamped is set to 1 when a wanted exponent left the window. */
int fx_af_predict(fx_af_state *s, int cur_e, int lo, int hi, const fx_af_writer *w, int *clamped);

/* After writing at exponent e with statistics st: returns 1 and sets *redo_e when the
 * configuration asks to recompute a saturated write at the exact exponent. */
int fx_af_wants_recompute(const fx_af_state *s, int e, const fx_qstats *st, double true_max,
                          int lo, int hi, int *redo_e);

/* Record the final write: e is the exponent the kept values use, st their statistics,
 * overflowed whether any attempt of this write saturated, true_max the real maximum. */
void fx_af_observe(fx_af_state *s, int e, const fx_qstats *st, double true_max, int overflowed);

/* Named presets (the public fx_autoflex_preset uses this table): FX_OK and *cfg filled (every
 * byte, padding included), FX_EINVAL for a NULL argument, FX_ENAME for an unknown name. Quiet:
 * the error message is the caller's, which can list FX_AF_PRESET_NAMES. */
int fx_af_preset(const char *name, fx_autoflex_config *cfg);
#define FX_AF_PRESET_NAMES "published, fixed, truemax, exact_init, robust"

/* Preset used by new FLEX16_5 tensors: FLEXPOINT_AUTOFLEX if set and valid, else the
 * library default. */
void fx_af_default_config(fx_autoflex_config *cfg);

#endif
