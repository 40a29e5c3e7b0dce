/* A small decoder-only transformer built with the model-definition API (embedding, layer
 * norm, causal self-attention, residual add, per-position linear head, sequence softmax
 * cross-entropy):
 * - every parameter gradient of the fp32 model against central differences of the loss, which
 *   is computed in double from the fp32 logits;
 * - the loss depends on no later token: changing the last token of a window leaves the
 *   logits of every earlier position unchanged (the causal mask);
 * - the first training steps in flex16_5 and dfp16 (and fp32) are bit-identical between the
 *   scalar and the best backend and between 1 and 2 threads (losses and every parameter);
 * - shape errors name the layer; a sequence model refuses an image dataset;
 * - the built-in family (transformer, gpt<L>x<D>h<H>c<T>): names accepted and refused, the
 *   definition equal to examples/models/transformer.txt, the context checked against the
 *   input, and a trainer of the name trains the bits of one of its definition;
 * - fx_trainer_predict's logits give fx_trainer_evaluate's loss; non-tokens are refused;
 * - evaluations reuse their tensors' memory (parked between calls) and still start from
 *   fresh tensors: in fp32, flex16_5 and dfp16, a trainer that evaluated other windows and
 *   predicted before gives the bits of a twin that evaluates once, after the same steps.
 */
#define _POSIX_C_SOURCE 200809L

#include "flexpoint_model.h"
#include "train/model.h"
#include "train/trainer.h" /* the model's parked blocks */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NAME "test_model_transformer"

enum { T = 6, V = 7, D = 8, B = 2 };

static fx_model_def *small_def(void)
{
    fx_model_def *d = NULL;
    int64_t in[1] = {T};
    int rc = fx_model_def_new("tiny_gpt", 1, in, &d);
    if (!rc) rc = fx_model_def_embedding(d, "emb", NULL, V, D);
    if (!rc) rc = fx_model_def_layernorm(d, "ln1", NULL);
    if (!rc) rc = fx_model_def_attention(d, "att", NULL, 2);
    if (!rc) rc = fx_model_def_add(d, "res1", NULL, "emb");
    if (!rc) rc = fx_model_def_layernorm(d, "ln2", NULL);
    if (!rc) rc = fx_model_def_token_linear(d, "fc", NULL, 16);
    if (!rc) rc = fx_model_def_activation(d, "gelu", "act", NULL);
    if (!rc) rc = fx_model_def_token_linear(d, "head", NULL, V);
    CHECK(rc == FX_OK, "building the definition: %s", flexpoint_last_error());
    if (rc) {
        fx_model_def_free(d);
        return NULL;
    }
    return d;
}

/* The mean cross-entropy over every position, in double from the logits. */
static double loss_of(fx_model *m, const int32_t *targets, float *logits)
{
    tensor_t *out = NULL;
    if (fx_model_forward(m, FX_CTX_TRAIN, &out) || tensor_to_f32(out, logits)) return NAN;
    double sum = 0;
    for (int r = 0; r < B * T; r++) {
        const float *z = logits + r * V;
        double mx = z[0], se = 0;
        for (int j = 1; j < V; j++) mx = fmax(mx, z[j]);
        for (int j = 0; j < V; j++) se += exp(z[j] - mx);
        sum += mx + log(se) - z[targets[r]];
    }
    return sum / (B * T);
}

static void gradient_check(void)
{
    fx_model_def *d = small_def();
    if (!d) return;
    fx_train_config cfg;
    fx_train_config_default(&cfg);
    cfg.fmt = FMT_FP32;
    cfg.batch_size = B;
    cfg.seed = 11;
    fx_model m;
    int rc = fx_model_build_def(&m, &cfg, d, 1, 1, T, V);
    CHECK(rc == FX_OK, "build: %s", flexpoint_last_error());
    if (!rc) rc = fx_model_alloc_ctx(&m, FX_CTX_TRAIN);
    CHECK(rc == FX_OK && m.seq == T, "alloc: %s", flexpoint_last_error());
    if (rc) {
        fx_model_free(&m);
        fx_model_def_free(d);
        return;
    }
    test_rng r;
    test_rng_seed(&r, 5);
    int32_t targets[B * T];
    for (int i = 0; i < B * T; i++) {
        m.tokens[FX_CTX_TRAIN][i] = (int32_t)(test_rng_u64(&r) % V);
        targets[i] = (int32_t)(test_rng_u64(&r) % V);
    }
    /* larger weights than the initial ones, so that attention is far from uniform and layer
     * norm's gains matter: every path's gradient is exercised */
    for (int i = 0; i < m.nparams; i++) {
        fx_param *p = &m.params[i];
        float *v = malloc((size_t)p->n * sizeof *v);
        for (int64_t j = 0; j < p->n; j++) v[j] = (float)(test_rng_uniform(&r) * 1.6 - 0.8);
        if (strstr(p->name, ".gamma"))
            for (int64_t j = 0; j < p->n; j++) v[j] += 1.0f;
        CHECK(tensor_from_f32(p->w, v) == FX_OK, "set %s", p->name);
        free(v);
    }
    float logits[B * T * V];
    double l0 = loss_of(&m, targets, logits);
    CHECK(isfinite(l0), "loss %g", l0);
    int64_t ls[3] = {B, T, V}, l2s[2] = {B * T, V};
    tensor_t *dl = tensor_new(FMT_FP32, 3, ls);
    tensor_t *out = m.layers[m.nlayers - 1].out[FX_CTX_TRAIN];
    tensor_t *o2 = tensor_view_reshape(out, 2, l2s), *d2 = tensor_view_reshape(dl, 2, l2s);
    float lossf = 0;
    CHECK_STATUS(tensor_softmax_cross_entropy(&lossf, d2, o2, targets, 1.0), FX_OK);
    CHECK(fabs(lossf - l0) < 1e-5 * fabs(l0) + 1e-6, "CE %g vs double %g", lossf, l0);
    CHECK_STATUS(fx_model_backward(&m, dl), FX_OK);
    int worst_param = -1;
    double worst = 0;
    int checked = 0;
    for (int i = 0; i < m.nparams; i++) {
        fx_param *p = &m.params[i];
        float *w = malloc((size_t)p->n * sizeof *w), *g = malloc((size_t)p->n * sizeof *g);
        tensor_to_f32(p->w, w);
        tensor_to_f32(p->g, g);
        double gmax = 0;
        for (int64_t j = 0; j < p->n; j++) gmax = fmax(gmax, fabs(g[j]));
        CHECK(gmax > 0, "%s: an all-zero gradient", p->name);
        /* up to 6 elements per parameter, spread over it */
        for (int64_t k = 0; k < 6 && k < p->n; k++) {
            int64_t j = (k * 7919 + i) % p->n;
            const float w0 = w[j], h = 1e-2f;
            w[j] = w0 + h;
            tensor_from_f32(p->w, w);
            double lp = loss_of(&m, targets, logits);
            w[j] = w0 - h;
            tensor_from_f32(p->w, w);
            double lm = loss_of(&m, targets, logits);
            w[j] = w0;
            tensor_from_f32(p->w, w);
            /* the perturbation actually applied, after fp32 rounding of w0 +- h */
            double fd = (lp - lm) / ((double)(w0 + h) - (double)(w0 - h));
            /* fp32 forward: differences carry ~1e-7 relative noise / 2e-2 step plus O(h^2) */
            double err = fabs(fd - g[j]) / (fabs(fd) + 1e-2 * gmax + 1e-4);
            if (err > worst) {
                worst = err;
                worst_param = i;
            }
            checked++;
        }
        free(w);
        free(g);
    }
    CHECK(worst < 2e-2, "worst relative gradient error %g (%s)", worst,
          worst_param >= 0 ? m.params[worst_param].name : "?");
    printf("%s: %d gradient elements of %d parameters, worst relative error %.2e\n", NAME,
           checked, m.nparams, worst);
    /* causality: the last token of window 0 changes no earlier position's logits */
    float before[B * T * V], after[B * T * V];
    loss_of(&m, targets, before);
    m.tokens[FX_CTX_TRAIN][T - 1] = (m.tokens[FX_CTX_TRAIN][T - 1] + 1) % V;
    loss_of(&m, targets, after);
    CHECK(memcmp(before, after, (size_t)((T - 1) * V) * sizeof(float)) == 0,
          "an earlier position saw a later token");
    CHECK(memcmp(before + (T - 1) * V, after + (T - 1) * V, V * sizeof(float)) != 0,
          "the changed position's logits did not change");
    tensor_free(o2);
    tensor_free(d2);
    tensor_free(dl);
    fx_model_free(&m);
    fx_model_def_free(d);
}

/* n steps of a trainer on the text in `path`; the losses and the final parameters. */
static int run_steps(const char *path, fmt_t fmt, int steps, float *losses, float **params,
                     int64_t *np)
{
    fx_dataset *tr = NULL, *va = NULL;
    int rc = fx_dataset_text(path, T, 0.1, &tr, &va);
    if (rc) return rc;
    fx_model_def *d = NULL;
    int64_t in[1] = {T};
    const int vocab = fx_dataset_classes(tr);
    rc = fx_model_def_new("tiny_gpt", 1, in, &d);
    if (!rc) rc = fx_model_def_embedding(d, "emb", NULL, vocab, 16);
    if (!rc) rc = fx_model_def_layernorm(d, "ln1", NULL);
    if (!rc) rc = fx_model_def_attention(d, "att", NULL, 2);
    if (!rc) rc = fx_model_def_add(d, "res1", NULL, "emb");
    if (!rc) rc = fx_model_def_layernorm(d, "ln2", NULL);
    if (!rc) rc = fx_model_def_token_linear(d, "head", NULL, vocab);
    fx_train_config cfg;
    fx_train_config_default(&cfg);
    cfg.fmt = fmt;
    cfg.batch_size = 4;
    cfg.seed = 2;
    cfg.optimizer = FX_OPT_ADAMW;
    cfg.lr = 3e-3;
    cfg.weight_decay = 0.01;
    cfg.clip_norm = 1.0;
    fx_trainer *t = rc ? NULL : fx_trainer_new_model(&cfg, d, tr, va);
    if (!rc && !t) rc = flexpoint_last_status();
    for (int s = 0; s < steps && !rc; s++) rc = fx_trainer_step(t, &losses[s]);
    if (!rc) {
        *np = fx_trainer_param_count(t);
        *params = malloc((size_t)*np * sizeof(float));
        rc = fx_trainer_get_params(t, *params);
    }
    if (!rc) {
        double acc = -1, vl = -1;
        rc = fx_trainer_evaluate(t, va, &acc, &vl);
        if (!rc && !(vl > 0 && isfinite(vl) && acc >= 0 && acc <= 1)) rc = FX_ESTATE;
    }
    fx_trainer_free(t);
    fx_model_def_free(d);
    fx_dataset_free(tr);
    fx_dataset_free(va);
    return rc;
}

static void bit_identity(const char *path)
{
    const fmt_t fmts[3] = {FMT_FLEX16_5, FMT_DFP16, FMT_FP32};
    enum { STEPS = 4 };
    for (int f = 0; f < 3; f++) {
        float ref_loss[STEPS], loss[STEPS];
        float *ref = NULL, *got = NULL;
        int64_t nref = 0, n = 0;
        flexpoint_set_backend("scalar");
        flexpoint_set_num_threads(1);
        int rc = run_steps(path, fmts[f], STEPS, ref_loss, &ref, &nref);
        CHECK(rc == FX_OK, "%s scalar: %s", fmt_name(fmts[f]), flexpoint_last_error());
        CHECK(rc || (isfinite(ref_loss[0]) && ref_loss[STEPS - 1] < ref_loss[0]),
              "%s: loss %g -> %g does not fall", fmt_name(fmts[f]), ref_loss[0],
              ref_loss[STEPS - 1]);
        for (int variant = 0; variant < 2 && !rc; variant++) {
            flexpoint_set_backend(NULL); /* the best this CPU has */
            flexpoint_set_num_threads(variant == 0 ? 1 : 2);
            rc = run_steps(path, fmts[f], STEPS, loss, &got, &n);
            CHECK(rc == FX_OK, "%s: %s", fmt_name(fmts[f]), flexpoint_last_error());
            if (rc) break;
            CHECK(n == nref && memcmp(loss, ref_loss, sizeof loss) == 0 &&
                      memcmp(got, ref, (size_t)n * sizeof(float)) == 0,
                  "%s: best backend with %d thread(s) differs from scalar with 1",
                  fmt_name(fmts[f]), variant + 1);
            free(got);
            got = NULL;
        }
        free(ref);
    }
    flexpoint_set_backend(NULL);
    flexpoint_set_num_threads(0);
}

static void refusals(const char *path)
{
    fx_model_def *d = NULL;
    int64_t in[1] = {T};
    CHECK_STATUS(fx_model_def_new("bad", 1, in, &d), FX_OK);
    CHECK_STATUS(fx_model_def_embedding(d, "emb", NULL, V, 10), FX_OK);
    CHECK_STATUS(fx_model_def_attention(d, "att", NULL, 3), FX_ESHAPE); /* 3 does not divide 10 */
    CHECK(strstr(flexpoint_last_error(), "'att'") != NULL, "names the layer: %s",
          flexpoint_last_error());
    CHECK_STATUS(fx_model_def_embedding(d, "emb2", "emb", V, 4), FX_ESHAPE);
    CHECK_STATUS(fx_model_def_layer(d, "attention", "att", "heads=2"), FX_OK);
    CHECK_STATUS(fx_model_def_layer(d, "token_linear", "head", "out=7"), FX_OK);
    char text[1024];
    size_t len = 0;
    CHECK_STATUS(fx_model_def_to_text(d, text, sizeof text, &len), FX_OK);
    fx_model_def *back = NULL;
    CHECK_STATUS(fx_model_def_parse(text, len, "round trip", &back), FX_OK);
    char id1[FX_MODEL_ID_SIZE], id2[FX_MODEL_ID_SIZE];
    if (back) {
        fx_model_def_identity(d, id1);
        fx_model_def_identity(back, id2);
        CHECK(strcmp(id1, id2) == 0, "the model file round trip keeps the identity:\n%s", text);
    }
    fx_model_def_free(back);
    /* a sequence model and an image dataset */
    fx_dataset *img = fx_dataset_synthetic(8, 1, 1, T, V, 1);
    fx_train_config cfg;
    fx_train_config_default(&cfg);
    cfg.batch_size = 2;
    fx_trainer *t = fx_trainer_new_model(&cfg, d, img, NULL);
    CHECK(t == NULL && flexpoint_last_status() == FX_ESHAPE, "image dataset refused: %s",
          flexpoint_last_error());
    fx_trainer_free(t);
    fx_dataset_free(img);
    /* the text's vocabulary is larger than the embedding's 7 rows */
    fx_dataset *tr = NULL, *va = NULL;
    CHECK_STATUS(fx_dataset_text(path, T, 0.1, &tr, &va), FX_OK);
    t = tr ? fx_trainer_new_model(&cfg, d, tr, NULL) : NULL;
    CHECK(t == NULL && flexpoint_last_status() == FX_ESHAPE, "small vocabulary refused: %s",
          flexpoint_last_error());
    fx_trainer_free(t);
    fx_dataset_free(tr);
    fx_dataset_free(va);
    fx_model_def_free(d);
}

/* A trainer of a built-in name (fx_trainer_new) and one of the same name's definition
 * (fx_trainer_new_model) on the text at path: the same losses, step for step. */
static void builtin_trains(const char *path)
{
    fx_dataset *tr = NULL, *va = NULL;
    CHECK_STATUS(fx_dataset_text(path, 8, 0.1, &tr, &va), FX_OK);
    if (!tr) return;
    fx_train_config cfg;
    test_lm_config(&cfg, "gpt1x16h2c8");
    fx_model_def *d = NULL;
    CHECK_STATUS(fx_model_def_builtin("gpt1x16h2c8", 1, 1, 8, fx_dataset_classes(tr), &d), FX_OK);
    fx_trainer *a = fx_trainer_new(&cfg, tr, va);
    fx_trainer *b = d ? fx_trainer_new_model(&cfg, d, tr, va) : NULL;
    CHECK(a && b, "trainers of gpt1x16h2c8: %s", flexpoint_last_error());
    for (int s = 0; s < 3 && a && b; s++) {
        float la = NAN, lb = NAN;
        CHECK_STATUS(fx_trainer_step(a, &la), FX_OK);
        CHECK_STATUS(fx_trainer_step(b, &lb), FX_OK);
        CHECK(isfinite(la) && memcmp(&la, &lb, sizeof la) == 0,
              "step %d: the name's loss %.9g, its definition's %.9g", s, la, lb);
    }
    /* fx_trainer_predict: the logits of 4 windows (one whole batch, as the evaluation of
     * those 4 windows runs it) give fx_trainer_evaluate's loss, summed in the same order */
    fx_dataset *four = fx_dataset_subset(tr, 0, 4);
    float x[4 * 8], *z = malloc(4 * 8 * (size_t)fx_dataset_classes(tr) * sizeof(float));
    int32_t y[4 * 8], lab[4];
    int64_t idx[4] = {0, 1, 2, 3};
    CHECK(four && z, "subset: %s", flexpoint_last_error());
    if (a && four && z) {
        const int Vn = fx_dataset_classes(tr);
        CHECK_STATUS(fx_dataset_batch(tr, idx, 4, x, lab), FX_OK);
        CHECK_STATUS(fx_dataset_batch_targets(tr, idx, 4, y), FX_OK);
        CHECK_STATUS(fx_trainer_predict(a, x, 4, z), FX_OK);
        double want = -1, sum = 0;
        CHECK_STATUS(fx_trainer_evaluate(a, four, NULL, &want), FX_OK);
        for (int w = 0; w < 4; w++) {
            double ls = 0;
            for (int r = w * 8; r < (w + 1) * 8; r++) {
                const float *q = z + (size_t)r * Vn;
                double mx = q[0], se = 0;
                for (int j = 1; j < Vn; j++) mx = q[j] > mx ? q[j] : mx;
                for (int j = 0; j < Vn; j++) se += exp((double)q[j] - mx);
                ls += mx + log(se) - (double)q[y[r]];
            }
            sum += ls / 8;
        }
        CHECK(sum / 4 == want, "predicted logits give loss %.17g, evaluate %.17g", sum / 4,
              want);
        x[3] = (float)Vn; /* not a token */
        CHECK_STATUS(fx_trainer_predict(a, x, 4, z), FX_ERANGE);
        x[3] = 0.5f;
        CHECK_STATUS(fx_trainer_predict(a, x, 4, z), FX_ERANGE);
        CHECK_STATUS(fx_trainer_predict(a, x, 0, z), FX_EINVAL);
    }
    free(z);
    fx_dataset_free(four);
    fx_trainer_free(a);
    fx_trainer_free(b);
    /* the context comes from the name: windows of another length are refused */
    snprintf(cfg.model, sizeof cfg.model, "gpt1x16h2c6");
    fx_trainer *c = fx_trainer_new(&cfg, tr, va);
    CHECK(c == NULL && flexpoint_last_status() == FX_ESHAPE &&
              strstr(flexpoint_last_error(), "6 tokens") != NULL,
          "gpt1x16h2c6 on windows of 8: '%s'", flexpoint_last_error());
    fx_trainer_free(c);
    fx_model_def_free(d);
    fx_dataset_free(tr);
    fx_dataset_free(va);
}

/* Evaluations in turn on one trainer, with the memory of their tensors parked between calls:
 * the last gives the twin's bits (one evaluation after the same steps), so nothing of an
 * earlier evaluation (values in the reused blocks, Autoflex or exponent state) leaks; the
 * blocks are parked after the first call and all taken again by the next. */
static void eval_reuse(const char *path)
{
    fx_dataset *tr = NULL, *va = NULL;
    CHECK_STATUS(fx_dataset_text(path, 8, 0.1, &tr, &va), FX_OK);
    if (!tr) return;
    fx_dataset *four = fx_dataset_subset(tr, 4, 4);
    static const fmt_t fmts[] = {FMT_FP32, FMT_FLEX16_5, FMT_DFP16};
    for (int fi = 0; fi < 3 && four; fi++) {
        fx_train_config cfg;
        test_lm_config(&cfg, "gpt1x16h2c8");
        cfg.fmt = fmts[fi];
        fx_trainer *a = fx_trainer_new(&cfg, tr, va), *b = fx_trainer_new(&cfg, tr, va);
        CHECK(a && b, "trainers: %s", flexpoint_last_error());
        if (!a || !b) {
            fx_trainer_free(a);
            fx_trainer_free(b);
            continue;
        }
        float la, lb;
        double acc[3], loss[3], acc_b = -1, loss_b = -1;
        CHECK_STATUS(fx_trainer_step(a, &la), FX_OK);
        CHECK_STATUS(fx_trainer_evaluate(a, four, &acc[0], &loss[0]), FX_OK);
        const int parked = a->m.nparked;
        CHECK(parked > 0, "fmt %d: %d blocks parked after an evaluation", (int)cfg.fmt, parked);
        /* the context built again takes every parked block, and its tensors read zeros, as
         * new ones do */
        CHECK_STATUS(fx_model_alloc_ctx(&a->m, FX_CTX_EVAL), FX_OK);
        CHECK(a->m.nparked == 0, "fmt %d: %d of %d blocks left parked by a new context",
              (int)cfg.fmt, a->m.nparked, parked);
        int nonzero = 0, seen = 0;
        for (int i = 0; i < a->m.nlayers; i++) {
            const fx_layer *l = &a->m.layers[i];
            const tensor_t *ts[2 + FX_AT_N] = {l->out[FX_CTX_EVAL], l->tmp[FX_CTX_EVAL]};
            for (int j = 0; j < FX_AT_N; j++) ts[2 + j] = l->att[FX_CTX_EVAL][j];
            for (int j = 0; j < 2 + FX_AT_N; j++) {
                if (!ts[j]) continue;
                const int64_t n = tensor_numel(ts[j]);
                float *v = malloc((size_t)n * sizeof *v);
                if (v && tensor_to_f32(ts[j], v) == FX_OK) {
                    seen++;
                    for (int64_t k = 0; k < n; k++) nonzero += v[k] != 0.0f;
                }
                free(v);
            }
        }
        CHECK(seen > 0 && nonzero == 0, "fmt %d: %d nonzero values in %d tensors of a context "
              "built from parked blocks", (int)cfg.fmt, nonzero, seen);
        fx_model_park_ctx(&a->m, FX_CTX_EVAL);
        CHECK(a->m.nparked == parked, "fmt %d: %d blocks parked again, %d before", (int)cfg.fmt,
              a->m.nparked, parked);
        float x[4 * 8], *z = malloc(4 * 8 * (size_t)fx_dataset_classes(tr) * sizeof(float));
        int32_t lab[4];
        int64_t idx[4] = {8, 9, 10, 11};
        CHECK_STATUS(fx_dataset_batch(tr, idx, 4, x, lab), FX_OK);
        if (z) CHECK_STATUS(fx_trainer_predict(a, x, 4, z), FX_OK);
        free(z);
        CHECK(a->m.nparked == parked, "fmt %d: %d blocks parked after predict, %d before",
              (int)cfg.fmt, a->m.nparked, parked);
        CHECK_STATUS(fx_trainer_step(a, &la), FX_OK);
        CHECK_STATUS(fx_trainer_evaluate(a, va, &acc[1], &loss[1]), FX_OK);
        CHECK_STATUS(fx_trainer_evaluate(a, va, &acc[2], &loss[2]), FX_OK);
        CHECK_STATUS(fx_trainer_step(b, &lb), FX_OK);
        CHECK_STATUS(fx_trainer_step(b, &lb), FX_OK);
        CHECK_STATUS(fx_trainer_evaluate(b, va, &acc_b, &loss_b), FX_OK);
        CHECK(memcmp(&loss[1], &loss_b, sizeof loss_b) == 0 &&
                  memcmp(&loss[2], &loss_b, sizeof loss_b) == 0 && acc[1] == acc_b &&
                  acc[2] == acc_b,
              "fmt %d: evaluations after others give loss %.17g and %.17g, a fresh one %.17g",
              (int)cfg.fmt, loss[1], loss[2], loss_b);
        fx_trainer_free(a);
        fx_trainer_free(b);
    }
    fx_dataset_free(four);
    fx_dataset_free(tr);
    fx_dataset_free(va);
}

static void builtin_family(void)
{
    const char *ok[] = {"transformer", "gpt4x128h4c128", "gpt1x1h1c1", "gpt64x16384h1c1",
                        "gpt2x64h4c64"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        CHECK(fx_model_check(ok[i]) == FX_OK, "%s refused: %s", ok[i], flexpoint_last_error());
    const char *bad[] = {"gpt2x64h3c64", "gpt0x64h4c64", "gpt2x64h4c1025", "gpt2x64h4",
                         "gpt2x64h4c64x", "transformer2", "gpt2x64h128c64", "gpt02x64h4c64",
                         "gpt65x64h4c64", "gpt"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(fx_model_check(bad[i]) == FX_ENAME, "%s accepted", bad[i]);
        CHECK(strstr(flexpoint_last_error(), "gpt<L>x<D>h<H>c<T>") != NULL,
              "%s: the message '%s' gives no grammar", bad[i], flexpoint_last_error());
    }
    /* "transformer" is gpt4x128h4c128 and examples/models/transformer.txt (fortunes: 114 tokens) */
    fx_model_def *named = NULL, *sized = NULL, *file = NULL;
    CHECK_STATUS(fx_model_def_builtin("transformer", 1, 1, 128, 114, &named), FX_OK);
    CHECK_STATUS(fx_model_def_builtin("gpt4x128h4c128", 1, 1, 128, 114, &sized), FX_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/examples/models/transformer.txt", FX_SOURCE_DIR);
    CHECK(fx_model_def_load(path, &file) == FX_OK, "%s: %s", path, flexpoint_last_error());
    if (named && sized && file) {
        char a[FX_MODEL_ID_SIZE], b[FX_MODEL_ID_SIZE], c[FX_MODEL_ID_SIZE];
        CHECK_STATUS(fx_model_def_identity(named, a), FX_OK);
        CHECK_STATUS(fx_model_def_identity(sized, b), FX_OK);
        CHECK_STATUS(fx_model_def_identity(file, c), FX_OK);
        CHECK(strcmp(a, b) == 0 && strcmp(a, c) == 0,
              "transformer %s, gpt4x128h4c128 %s, transformer.txt %s", a, b, c);
        /* embedding, 8 layers a block, final norm and head */
        CHECK(fx_model_def_layer_count(named) == 1 + 4 * 8 + 2, "transformer has %d layers",
              fx_model_def_layer_count(named));
    }
    fx_model_def_free(named);
    fx_model_def_free(sized);
    fx_model_def_free(file);
    /* the input must hold one window of the name's context */
    fx_model_def *d = NULL;
    CHECK_STATUS(fx_model_def_builtin("gpt1x8h2c8", 1, 1, 16, 7, &d), FX_ESHAPE);
    CHECK(strstr(flexpoint_last_error(), "8 tokens") != NULL, "message '%s'",
          flexpoint_last_error());
    CHECK(d == NULL, "a refused built-in gave a definition");
}

int main(void)
{
    char path[] = "/tmp/fx_tfm_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return test_skip(NAME, "no temporary file");
    /* a text with structure to learn: repeated phrases */
    const char *phrase = "the cat sat on the mat. a dog ran. ";
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < 40; i++) fputs(phrase, f);
    fclose(f);
    gradient_check();
    refusals(path);
    bit_identity(path);
    builtin_family();
    builtin_trains(path);
    eval_reuse(path);
    unlink(path);
    return test_finish(NAME);
}
