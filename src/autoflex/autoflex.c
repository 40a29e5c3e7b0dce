/* Autoflex: the exponent manager of FLEX16_5 tensors, written from docs/autoflex.md.
 *
 * The dispatcher drives one write as
 *     e = fx_af_predict(...)                    exponent before the write
 *     quantise at e -> st                        (kernel, reports fx_qstats)
 *     if (fx_af_wants_recompute(..., &redo_e))   only for overflow_mode RECOMPUTE
 *         quantise again at redo_e -> st, e = redo_e
 *     fx_af_observe(s, e, &st, true_max, overflowed)
 * This file only decides exponents and keeps the history; it never touches tensor data, and it
 * depends on nothing of the core (docs/architecture.md, "Layers"). */
#include "autoflex.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Each test writes its reason into why[0..n) and returns FX_EINVAL; the caller (the core's
 * fx_af_config_validate) turns it into the library's error message. */
#define FX_AF_BAD(...) (snprintf(why, n, __VA_ARGS__), FX_EINVAL)

int fx_af_config_check(const fx_autoflex_config *cfg, char *why, size_t n)
{
    if (n > 0) why[0] = '\0';
    if (!cfg) return FX_AF_BAD("cfg is NULL");
    if (cfg->managed != 0 && cfg->managed != 1)
        return FX_AF_BAD("managed = %d, must be 0 or 1", cfg->managed);
    if (cfg->history_len < 1 || cfg->history_len > FX_AF_MAX_HISTORY)
        return FX_AF_BAD("history_len = %d, must be in [1, %d]", cfg->history_len,
                         FX_AF_MAX_HISTORY);
    /* Infinite margins would turn the prediction into inf or NaN (0 * inf), so every constant
     * must be finite as well as in range. */
    if (!(cfg->beta >= 0.0) || !isfinite(cfg->beta))
        return FX_AF_BAD("beta = %g, must be finite and >= 0", cfg->beta);
    if (!(cfg->gamma >= 0.0) || !isfinite(cfg->gamma))
        return FX_AF_BAD("gamma = %g, must be finite and >= 0", cfg->gamma);
    if (!(cfg->alpha > 0.0) || !isfinite(cfg->alpha))
        return FX_AF_BAD("alpha = %g, must be finite and > 0", cfg->alpha);
    if (cfg->init_mode != FX_AF_INIT_PROBE && cfg->init_mode != FX_AF_INIT_EXACT)
        return FX_AF_BAD("init_mode = %d, must be FX_AF_INIT_PROBE (0) or "
                         "FX_AF_INIT_EXACT (1)", cfg->init_mode);
    if (cfg->stat_mode != FX_AF_STAT_SATURATED_MAX && cfg->stat_mode != FX_AF_STAT_TRUE_MAX)
        return FX_AF_BAD("stat_mode = %d, must be FX_AF_STAT_SATURATED_MAX (0) or "
                         "FX_AF_STAT_TRUE_MAX (1)", cfg->stat_mode);
    if (cfg->overflow_mode != FX_AF_OVERFLOW_KEEP && cfg->overflow_mode != FX_AF_OVERFLOW_RECOMPUTE)
        return FX_AF_BAD("overflow_mode = %d, must be FX_AF_OVERFLOW_KEEP (0) or "
                         "FX_AF_OVERFLOW_RECOMPUTE (1)", cfg->overflow_mode);
    if (cfg->probe_tries < 1 || cfg->probe_tries > 64)
        return FX_AF_BAD("probe_tries = %d, must be in [1, 64]", cfg->probe_tries);
    if (cfg->init_exp < FX_DFP_EXP_MIN || cfg->init_exp > FX_DFP_EXP_MAX)
        return FX_AF_BAD("init_exp = %d, must be in [%d, %d]", cfg->init_exp, FX_DFP_EXP_MIN,
                         FX_DFP_EXP_MAX);
    return FX_OK;
}
#undef FX_AF_BAD

static void history_clear(fx_af_state *s)
{
    s->hist_n = 0;
    s->hist_pos = 0;
}

void fx_af_reset(fx_af_state *s, const fx_autoflex_config *cfg)
{
    /* Field by field over zeroed bytes: a struct copy would carry the caller's padding (stack
     * garbage) into the state, whose bytes are observable (tensor_get_autoflex_config copies
     * the struct, checkpoints store it), so that equal configurations compared unequal. */
    memset(&s->cfg, 0, sizeof s->cfg);
    s->cfg.managed = cfg->managed;
    s->cfg.history_len = cfg->history_len;
    s->cfg.beta = cfg->beta;
    s->cfg.gamma = cfg->gamma;
    s->cfg.alpha = cfg->alpha;
    s->cfg.init_mode = cfg->init_mode;
    s->cfg.stat_mode = cfg->stat_mode;
    s->cfg.overflow_mode = cfg->overflow_mode;
    s->cfg.init_exp = cfg->init_exp;
    s->cfg.probe_tries = cfg->probe_tries;
    s->initialized = 0;
    history_clear(s);
    for (int i = 0; i < FX_AF_MAX_HISTORY; i++) s->hist[i] = 0.0;
}

/* Ring buffer of the last history_len maxima. While it is filling, entries 0..n-1 are used. */
static void history_push(fx_af_state *s, double v)
{
    int len = s->cfg.history_len;
    if (len < 1 || len > FX_AF_MAX_HISTORY) len = FX_AF_MAX_HISTORY; /* never index outside */
    if (!(v >= 0.0)) v = 0.0;     /* a NaN or negative maximum carries no information */
    if (isinf(v)) v = DBL_MAX;    /* keeps the std finite-or-inf, never NaN (inf - inf) */
    if (s->hist_pos >= len) s->hist_pos = 0;
    s->hist[s->hist_pos] = v;
    s->hist_pos = (s->hist_pos + 1) % len;
    if (s->hist_n < len) s->hist_n++;
}

/* Number of significant bits of g >= 1 (bitlen(1) = 1). */
static int bitlen_u32(uint32_t g)
{
    return 32 - __builtin_clz(g);
}

/* Published initialisation: probe the pending write at trial exponents (docs/autoflex.md). */
static int probe_init(const fx_af_state *s, int cur_e, int lo, int hi, const fx_af_writer *w,
                      int *clamped)
{
    int e = cur_e;
    for (int tries = 0; tries < s->cfg.probe_tries; tries++) {
        fx_qstats st;
        fx_qstats_init(&st);
        w->trial(w->ctx, e, &st);
        int32_t out = st.max_abs_out;
        if (out < 0) out = 0;
        if (out > FX_MANT_MAX) out = FX_MANT_MAX;
        uint32_t g = 1u + (uint32_t)out;
        if (st.saturated > 0) {
            e = fx_clamp_exp(e + 7, lo, hi, clamped);
        } else if (g < (1u << 14)) {
            /* put the top bit at 2^14; at least 5 significant bits make the jump trustworthy */
            e = fx_clamp_exp(e + bitlen_u32(g) - 15, lo, hi, clamped);
            if (g >= 32) return e;
        } else {
            return e;
        }
    }
    /* Tries used up (all-zero data, say): the published fallback. */
    return fx_clamp_exp(0, lo, hi, clamped);
}

int fx_af_predict(fx_af_state *s, int cur_e, int lo, int hi, const fx_af_writer *w, int *clamped)
{
    int dummy = 0;
    if (!clamped) clamped = &dummy;
    *clamped = 0;
    if (!s->cfg.managed) return cur_e;

    if (!s->initialized) {
        int e;
        if (s->cfg.init_mode == FX_AF_INIT_EXACT || !w || !w->trial)
            e = fx_exact_clamped(w ? w->true_max : 0.0, cur_e, lo, hi, clamped);
        else
            e = probe_init(s, cur_e, lo, hi, w, clamped);
        s->initialized = 1;
        return e;
    }

    int n = s->hist_n;
    if (n <= 0) return cur_e;

    /* M = alpha * (max(H) + beta * std(H) + gamma * 2^e), population std, two passes. */
    double mx = s->hist[0], sum = 0.0;
    for (int i = 0; i < n; i++) {
        if (s->hist[i] > mx) mx = s->hist[i];
        sum += s->hist[i];
    }
    double mean = sum / n, var = 0.0;
    for (int i = 0; i < n; i++) {
        double d = s->hist[i] - mean;
        var += d * d;
    }
    double sd = sqrt(var / n);
    double M = s->cfg.alpha * (mx + s->cfg.beta * sd + s->cfg.gamma * ldexp(1.0, cur_e));
    return fx_exact_clamped(M, cur_e, lo, hi, clamped);
}

int fx_af_wants_recompute(const fx_af_state *s, int e, const fx_qstats *st, double true_max,
                          int lo, int hi, int *redo_e)
{
    if (!s->cfg.managed || s->cfg.overflow_mode != FX_AF_OVERFLOW_RECOMPUTE) return 0;
    if (!st) return 0;
    /* An exponent already at the top of the window saturates again at the same exponent:
     * redoing it would change nothing (fx_recompute_exp then returns e). */
    const int r = fx_recompute_exp(st->saturated, true_max, e, lo, hi);
    if (r == e) return 0;
    if (redo_e) *redo_e = r;
    return 1;
}

/* The history is fed from what the *kept* values say (st describes the stored result):
 * - SATURATED_MAX (published): if the kept result saturated, its true size is unknown, so the
 *   history is cleared and 2 * 32767 * 2^e is pushed (one more bit than fits). With overflow
 *   mode RECOMPUTE a saturated first attempt is redone at the exact exponent; the kept result
 *   then does not saturate (unless the window's top stopped it), its maximum is exact, and it is
 *   pushed like any other write without clearing the history. `overflowed` (any attempt
 *   saturated) is therefore not used for the decision; the core counts it and traces it.
 * - TRUE_MAX: the true maximum is exact even after saturation, so old history stays valid and
 *   is never cleared; true_max is pushed for every write. */
void fx_af_observe(fx_af_state *s, int e, const fx_qstats *st, double true_max, int overflowed)
{
    (void)overflowed;
    if (!s->cfg.managed) return;
    if (s->cfg.stat_mode == FX_AF_STAT_TRUE_MAX) {
        history_push(s, true_max);
        return;
    }
    if (st->saturated > 0) {
        history_clear(s);
        history_push(s, ldexp(2.0 * FX_MANT_MAX, e));
    } else {
        history_push(s, ldexp((double)st->max_abs_out, e));
    }
}
