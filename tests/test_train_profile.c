/* Profiling training steps (fx_trainer_profile_enable, fx_trainer_profile,
 * fx_trainer_layer_profile): it changes no result, counts the steps it measured, its per-layer
 * times split its forward and backward phases, its phases to at most the whole step, every
 * time is non-negative and the convolutions take time; enabling resets, disabling stops, bad
 * arguments are refused. */
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAME = "test_train_profile";

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
        CHECK(fx_trainer_layer_count(NULL) == FX_EINVAL, "layer count of NULL");
        fx_trainer_free(a);
        fx_trainer_free(b);
    }
    fx_dataset_free(tr);
    return test_finish(NAME);
}
