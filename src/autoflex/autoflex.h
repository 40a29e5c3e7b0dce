/* Autoflex: the exponent manager of FLEX16_5 tensors (docs/autoflex.md).
 * Called only by the dispatcher (predict before a write, observe after it); kernels merely
 * report fx_qstats. */
#ifndef FX_AUTOFLEX_H
#define FX_AUTOFLEX_H

#include "flexpoint.h"
#include "../flex/flex_math.h"

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

/* Validate a configuration: FX_OK, or FX_EINVAL with the message set. */
int fx_af_config_validate(const fx_autoflex_config *cfg);

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

/* Named presets (the public fx_autoflex_preset uses this table). */
int fx_af_preset(const char *name, fx_autoflex_config *cfg);

/* Preset used by new FLEX16_5 tensors: FLEXPOINT_AUTOFLEX if set and valid, else the
 * library default. */
void fx_af_default_config(fx_autoflex_config *cfg);

#endif
