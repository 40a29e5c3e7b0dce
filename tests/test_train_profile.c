/* Profiling training steps (fx_trainer_profile_enable, fx_trainer_profile,
 * fx_trainer_layer_profile): it changes no result, counts the steps it measured, its per-layer
 * times split its forward and backward phases, its phases to at most the whole step, every
 * time is non-negative and the convolutions take time; enabling resets, disabling stops, bad
 * arguments are refused.
 * The split into conversions, rounding and Autoflex bookkeeping (fx_trainer_profile_split,
 * fx_trainer_layer_profile_split): every share of the step lies in [0, 1] and the three sum
 * to at most the step, each phase's split to at most the phase, the phases' splits add up to
 * the total and the layers' to their phase; flex16_5 spends time on all three and its
 * convolutions round their outputs, fp32 none on Autoflex; no counting outlives a step. */
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"
#include "testutil.h"
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAME = "test_train_profile";

static double split_sum(const fx_time_split *s)
{
    return s->conversion_s + s->rounding_s + s->autoflex_s;
}

static int split_nonneg(const fx_time_split *s)
{
    return s->conversion_s >= 0 && s->rounding_s >= 0 && s->autoflex_s >= 0;
}

/* a and b equal up to the rounding of summing nanoseconds in a different order */
static int close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fabs(b) + 1e-12;
}

/* The split's checks for format fmt after its profiled steps (p: the phase times). */
static void check_split(fx_trainer *b, int fmt, const fx_train_profile *p)
{
    const char *fn = fmt_name((fmt_t)fmt);
    fx_train_profile_split sp;
    CHECK_STATUS(fx_trainer_profile_split(b, &sp), FX_OK);
    const fx_time_split *ph[5] = {&sp.data, &sp.forward, &sp.loss, &sp.backward, &sp.update};
    const double phs[5] = {p->data_s, p->forward_s, p->loss_s, p->backward_s, p->update_s};
    fx_time_split sum = {0, 0, 0};
    for (int k = 0; k < 5; k++) {
        CHECK(split_nonneg(ph[k]), "%s: phase %d has a negative split", fn, k);
        CHECK(split_sum(ph[k]) <= phs[k] * (1 + 1e-6) + 1e-9,
              "%s: phase %d split %.9f s of a phase of %.9f s", fn, k, split_sum(ph[k]), phs[k]);
        sum.conversion_s += ph[k]->conversion_s;
        sum.rounding_s += ph[k]->rounding_s;
        sum.autoflex_s += ph[k]->autoflex_s;
    }
    CHECK(close_to(sum.conversion_s, sp.total.conversion_s) &&
              close_to(sum.rounding_s, sp.total.rounding_s) &&
              close_to(sum.autoflex_s, sp.total.autoflex_s),
          "%s: the phases' splits do not add up to the total", fn);
    const double shares[3] = {sp.total.conversion_s / p->total_s, sp.total.rounding_s / p->total_s,
                              sp.total.autoflex_s / p->total_s};
    for (int c = 0; c < 3; c++)
        CHECK(shares[c] >= 0 && shares[c] <= 1, "%s: share %d is %.6f", fn, c, shares[c]);
    CHECK(shares[0] + shares[1] + shares[2] <= 1 + 1e-6, "%s: the shares sum to %.6f", fn,
          shares[0] + shares[1] + shares[2]);
    /* the layers' splits partition their phases */
    fx_time_split lf = {0, 0, 0}, lb = {0, 0, 0};
    double conv_round = 0;
    for (int i = 0; i < fx_trainer_layer_count(b); i++) {
        fx_time_split f, g;
        fx_layer_profile lp;
        CHECK_STATUS(fx_trainer_layer_profile_split(b, i, &f, &g), FX_OK);
        CHECK_STATUS(fx_trainer_layer_profile(b, i, &lp), FX_OK);
        CHECK(split_nonneg(&f) && split_nonneg(&g), "%s: %s has a negative split", fn, lp.name);
        CHECK(split_sum(&f) + split_sum(&g) <= p->total_s, "%s: %s's split exceeds the steps",
              fn, lp.name);
        lf.conversion_s += f.conversion_s;
        lf.rounding_s += f.rounding_s;
        lf.autoflex_s += f.autoflex_s;
        lb.conversion_s += g.conversion_s;
        lb.rounding_s += g.rounding_s;
        lb.autoflex_s += g.autoflex_s;
        if (!strcmp(lp.kind, "conv")) conv_round += f.rounding_s;
    }
    CHECK(close_to(lf.conversion_s, sp.forward.conversion_s) &&
              close_to(lf.rounding_s, sp.forward.rounding_s) &&
              close_to(lf.autoflex_s, sp.forward.autoflex_s),
          "%s: the layers' forward splits (%.9f %.9f %.9f) are not the phase's (%.9f %.9f %.9f)",
          fn, lf.conversion_s, lf.rounding_s, lf.autoflex_s, sp.forward.conversion_s,
          sp.forward.rounding_s, sp.forward.autoflex_s);
    CHECK(close_to(lb.conversion_s, sp.backward.conversion_s) &&
              close_to(lb.rounding_s, sp.backward.rounding_s) &&
              close_to(lb.autoflex_s, sp.backward.autoflex_s),
          "%s: the layers' backward splits are not the phase's", fn);
    if (fmt == FMT_FP32) {
        CHECK(sp.total.autoflex_s == 0, "fp32 spent %.9f s on Autoflex", sp.total.autoflex_s);
    } else {
        CHECK(sp.total.conversion_s > 0 && sp.total.rounding_s > 0 && sp.total.autoflex_s > 0,
              "%s: conversion %.9f s, rounding %.9f s, Autoflex %.9f s", fn,
              sp.total.conversion_s, sp.total.rounding_s, sp.total.autoflex_s);
        CHECK(conv_round > 0, "%s: the convolutions' forward passes rounded nothing", fn);
    }
    /* every step detached its counts */
    CHECK(__atomic_load_n(&fx_prof_nsinks, __ATOMIC_RELAXED) == 0, "%d sinks still attached",
          fx_prof_nsinks);
}

static fx_trainer *make(const fx_dataset *tr, int fmt)
{
    fx_train_config c;
    test_train_config(&c, "cnn", fmt, 4);
    c.batch_size = 16;
    fx_trainer *t = fx_trainer_new(&c, tr, NULL);
    CHECK(t != NULL, "fx_trainer_new: %s", flexpoint_last_error());
    return t;
}

int main(void)
{
    flexpoint_set_num_threads(2);
    fx_dataset *tr = test_patch_dataset(96, 2);
    for (int f = 0; f < 2 && tr; f++) {
        int fmt = f ? FMT_FLEX16_5 : FMT_FP32;
        fx_trainer *a = make(tr, fmt), *b = make(tr, fmt);
        if (!a || !b) break;
        CHECK_STATUS(fx_trainer_profile_enable(b, 1), FX_OK);
        for (int s = 0; s < 4; s++) {
            float la = -1, lb = -2;
            CHECK_STATUS(fx_trainer_step(a, &la), FX_OK);
            CHECK_STATUS(fx_trainer_step(b, &lb), FX_OK);
            CHECK(memcmp(&la, &lb, sizeof la) == 0, "%s: profiling changed the loss of step %d",
                  fmt_name((fmt_t)fmt), s);
        }
        fx_train_profile p;
        CHECK_STATUS(fx_trainer_profile(b, &p), FX_OK);
        CHECK(p.steps == 4, "steps %lld, want 4", (long long)p.steps);
        double fwd = 0, bwd = 0, conv = 0;
        int n = fx_trainer_layer_count(b), convs = 0;
        CHECK(n == 9, "the CNN has %d layers, want 9", n);
        for (int i = 0; i < n; i++) {
            fx_layer_profile lp;
            CHECK_STATUS(fx_trainer_layer_profile(b, i, &lp), FX_OK);
            CHECK(lp.forward_s >= 0 && lp.backward_s >= 0, "%s: negative time", lp.name);
            fwd += lp.forward_s;
            bwd += lp.backward_s;
            if (!strcmp(lp.kind, "conv")) {
                conv += lp.forward_s + lp.backward_s;
                convs++;
            }
            if (i == 0) CHECK(!strcmp(lp.name, "conv1"), "layer 0 is %s", lp.name);
        }
        CHECK(convs == 2 && conv > 0, "the convolutions took no time");
        /* the layer times split the phase (which also holds the clock readings around them) */
        CHECK(fwd <= p.forward_s * (1 + 1e-9) && fwd >= 0.5 * p.forward_s,
              "layers' forward %.9f vs phase %.9f", fwd, p.forward_s);
        CHECK(bwd <= p.backward_s * (1 + 1e-9) && bwd >= 0.5 * p.backward_s,
              "layers' backward %.9f vs phase %.9f", bwd, p.backward_s);
        double phases = p.data_s + p.forward_s + p.loss_s + p.backward_s + p.update_s;
        CHECK(p.total_s > 0 && phases <= p.total_s * (1 + 1e-9) && phases >= 0.5 * p.total_s,
              "phases %.6f of a total %.6f", phases, p.total_s);
        CHECK(memcmp(&p, &(fx_train_profile){0}, sizeof p) != 0, "an empty profile");
        check_split(b, fmt, &p);
        /* disabling stops and clears; the trainer still matches the unprofiled one */
        CHECK_STATUS(fx_trainer_profile_enable(b, 0), FX_OK);
        CHECK_STATUS(fx_trainer_step(a, NULL), FX_OK);
        CHECK_STATUS(fx_trainer_step(b, NULL), FX_OK);
        CHECK_STATUS(fx_trainer_profile(b, &p), FX_OK);
        CHECK(p.steps == 0 && p.total_s == 0, "a disabled profile counted %lld steps",
              (long long)p.steps);
        fx_layer_profile lp;
        CHECK_STATUS(fx_trainer_layer_profile(b, 3, &lp), FX_OK);
        CHECK(lp.forward_s == 0 && lp.backward_s == 0, "a disabled profile kept layer times");
        fx_train_profile_split sp;
        fx_time_split lf, lb;
        CHECK_STATUS(fx_trainer_profile_split(b, &sp), FX_OK);
        CHECK_STATUS(fx_trainer_layer_profile_split(b, 0, &lf, &lb), FX_OK);
        CHECK(split_sum(&sp.total) == 0 && split_sum(&lf) == 0 && split_sum(&lb) == 0,
              "a disabled profile kept its split");
        int64_t np = fx_trainer_param_count(a);
        float *wa = malloc((size_t)np * sizeof *wa), *wb = malloc((size_t)np * sizeof *wb);
        if (wa && wb) {
            CHECK_STATUS(fx_trainer_get_params(a, wa), FX_OK);
            CHECK_STATUS(fx_trainer_get_params(b, wb), FX_OK);
            CHECK(memcmp(wa, wb, (size_t)np * sizeof *wa) == 0, "%s: profiling changed weights",
                  fmt_name((fmt_t)fmt));
        }
        free(wa);
        free(wb);
        /* refusals */
        CHECK_STATUS(fx_trainer_profile_enable(b, 2), FX_EINVAL);
        CHECK_STATUS(fx_trainer_profile_enable(NULL, 1), FX_EINVAL);
        CHECK_STATUS(fx_trainer_profile(b, NULL), FX_EINVAL);
        CHECK_STATUS(fx_trainer_layer_profile(b, n, &lp), FX_EINVAL);
        CHECK_STATUS(fx_trainer_layer_profile(b, -1, &lp), FX_EINVAL);
        CHECK_STATUS(fx_trainer_profile_split(NULL, &sp), FX_EINVAL);
        CHECK_STATUS(fx_trainer_profile_split(b, NULL), FX_EINVAL);
        CHECK_STATUS(fx_trainer_layer_profile_split(b, n, &lf, &lb), FX_EINVAL);
        CHECK_STATUS(fx_trainer_layer_profile_split(b, 0, NULL, &lb), FX_EINVAL);
        CHECK(fx_trainer_layer_count(NULL) == FX_EINVAL, "layer count of NULL");
        fx_trainer_free(a);
        fx_trainer_free(b);
    }
    fx_dataset_free(tr);
    return test_finish(NAME);
}
