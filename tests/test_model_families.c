/* Model families: mlp<W>x<D>, cnn<C1>-<C2>-<F>, resnet<6n+2>[x<K>] (fx_model_check).
 *
 * - The grammar: every accepted name, and every near miss refused with FX_ENAME and a message
 *   naming it (leading zeros, missing or zero sizes, depths that are not 6n+2, limits + 1,
 *   trailing characters); NULL and an unterminated field are FX_EINVAL.
 * - The built-in names are family members: "mlp" trains bit for bit like "mlp256x2", "cnn"
 *   like "cnn32-64-128", "resnet20" like "resnet20x1" (same tensor names, same parameters and
 *   losses after several steps).
 * - Sizes: the parameter count of several members equals the count computed here from the
 *   architecture, and resnet110 has exactly 18 blocks per stage.
 * - Fusion: a ResNet whose residual adds make their ReLU in the same pass (flex16_5, dfp16,
 *   fp16, bf16; in fp16 and bf16 also the blocks' ReLU gradients from the sum of their two
 *   output gradients), and whose float batch norms write their ReLU (fp32, fp16, bf16), trains
 *   to the same bits as one built with FLEXPOINT_NO_FUSION=1, and the fused passes ran;
 *   every tensor of the fused trainer's holds the unfused one's bits, or is refused where a
 *   fused op left it unwritten. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"
#include "core/shared_binary.h" /* fx_shared_add_relu_made */
#include "core/half_binary.h"   /* fx_half_fused_made */
#include "nn/nn_ops.h"          /* fx_bn_relu_made */

/* passes made with their ReLU (or a ReLU's gate) fused in, of every kind */
static int64_t fused_made(void)
{
    return fx_shared_add_relu_made() + fx_shared_add_gated_made() + fx_half_fused_made() +
           fx_bn_relu_made();
}
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static const char *const NAME = "test_model_families";

static void grammar(void)
{
    static const char *const good[] = {"mlp",        "mlp1x1",        "mlp65536x64", "mlp256x2",
                                       "cnn",        "cnn1-1-1",      "cnn32-64-128",
                                       "resnet8",    "resnet20",      "resnet110",   "resnet1202",
                                       "resnet20x1", "resnet56x2",    "resnet8x16"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        CHECK(fx_model_check(good[i]) == FX_OK, "'%s' refused: %s", good[i],
              flexpoint_last_error());
    static const char *const bad[] = {
        "",           "mlp0",        "mlp256",     "mlp256x",      "mlp256x0",   "mlp0256x2",
        "mlp256x65",  "mlp65537x1",  "mlp256x2 ",  "mlp+1x2",      "MLP",        "cnn32-64",
        "cnn32-64-0", "cnn32--128",  "cnn4097-1-1", "resnet",      "resnet21",   "resnet2",
        "resnet1208", "resnet20x0",  "resnet20x17", "resnet20x",   "resnet20y2", "resnet20x01",
        "resnet020",  "vgg",         "resnet-20"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = fx_model_check(bad[i]);
        CHECK(rc == FX_ENAME, "'%s': status %d, want FX_ENAME", bad[i], rc);
        char want[40];
        snprintf(want, sizeof want, "model='%s'", bad[i]);
        CHECK(strstr(flexpoint_last_error(), want) != NULL, "'%s': message '%s'", bad[i],
              flexpoint_last_error());
    }
    CHECK_STATUS(fx_model_check(NULL), FX_EINVAL);
    char unterminated[16];
    memset(unterminated, 'x', sizeof unterminated);
    memcpy(unterminated, "mlp", 3);
    fx_train_config c;
    test_train_config(&c, "mlp", FMT_FP32, 1);
    memcpy(c.model, unterminated, sizeof c.model);
    fx_dataset *tr = test_patch_dataset(64, 1);
    CHECK(fx_trainer_new(&c, tr, NULL) == NULL && flexpoint_last_status() == FX_EINVAL,
          "an unterminated model field was accepted");
    fx_dataset_free(tr);
}

static fx_trainer *make(const char *model, int fmt, const fx_dataset *tr)
{
    fx_train_config c;
    test_train_config(&c, model, fmt, 3);
    c.batch_size = 16;
    fx_trainer *t = fx_trainer_new(&c, tr, NULL);
    CHECK(t != NULL, "fx_trainer_new(%s): %s", model, flexpoint_last_error());
    return t;
}

/* After the same steps, every tensor the fused ResNet a hands out holds the unfused b's
 * values bit for bit; it refuses some (FX_ESTATE, naming the tensor): those its fused ops left
 * unwritten, which before read as the zeros they were allocated with. In the float formats a
 * batch norm's or residual add's output or a ReLU's summed output gradient (fp32 fuses the
 * batch norms, fp16 and bf16 all three); in the shared-exponent formats only the output of a
 * batch norm whose one reader is the ReLU after it (bn0 and each block's bn1), where the
 * ReLU's signs are its own (fx_batchnorm_shared_relu). */
static void fused_tensors_as_unfused(fx_trainer *a, fx_trainer *b, const char *name, int fmt)
{
    const int shared = fmt == FMT_FLEX16_5 || fmt == FMT_DFP16;
    int refused = 0, compared = 0;
    for (int i = 0; i < fx_trainer_tensor_count(a); i++) {
        const char *tn = fx_trainer_tensor_name(a, i);
        tensor_t *ta = fx_trainer_tensor(a, i), *tb = fx_trainer_tensor(b, i);
        CHECK(tb != NULL, "%s unfused: tensor %s refused: %s", name, tn, flexpoint_last_error());
        if (!ta) {
            refused++;
            CHECK(flexpoint_last_status() == FX_ESTATE && strstr(flexpoint_last_error(), tn),
                  "%s: tensor %s: status %d, message '%s'", name, tn, flexpoint_last_status(),
                  flexpoint_last_error());
            const size_t n = strlen(tn);
            const int expected =
                shared ? !strcmp(tn, "bn0.out") || (n > 8 && !strcmp(tn + n - 8, ".bn1.out"))
                       : ((n > 4 && !strcmp(tn + n - 4, ".out") &&
                           (strstr(tn, "bn") || strstr(tn, "add"))) ||
                          (n > 3 && !strcmp(tn + n - 3, ".dy")));
            CHECK(expected, "%s: tensor %s refused, which no fused op leaves unwritten", name, tn);
            continue;
        }
        if (!tb) continue;
        const int64_t m = tensor_numel(ta);
        float *va = malloc((size_t)m * sizeof *va), *vb = malloc((size_t)m * sizeof *vb);
        if (va && vb && m == tensor_numel(tb)) {
            CHECK_STATUS(tensor_to_f32(ta, va), FX_OK);
            CHECK_STATUS(tensor_to_f32(tb, vb), FX_OK);
            CHECK(memcmp(va, vb, (size_t)m * sizeof *va) == 0, "%s: tensor %s differs from the "
                  "unfused run's", name, tn);
            compared++;
        }
        free(va);
        free(vb);
    }
    CHECK(shared || refused > 0, "%s in fmt %d: no tensor refused", name, fmt);
    CHECK(compared > 0, "%s: no tensor compared", name);
}

/* Two names of one network train to the same bits (b_unfused: b built with
 * FLEXPOINT_NO_FUSION=1, its layers' fusions off). */
static void same_network_as(const char *a_name, const char *b_name, int fmt, int steps,
                            const fx_dataset *tr, int b_unfused)
{
    fx_trainer *a = make(a_name, fmt, tr);
    if (b_unfused) setenv("FLEXPOINT_NO_FUSION", "1", 1);
    fx_trainer *b = make(b_name, fmt, tr);
    if (b_unfused) unsetenv("FLEXPOINT_NO_FUSION");
    if (!a || !b) goto done;
    CHECK(fx_trainer_tensor_count(a) == fx_trainer_tensor_count(b), "%s/%s: tensor counts",
          a_name, b_name);
    for (int i = 0; i < fx_trainer_tensor_count(a) && i < fx_trainer_tensor_count(b); i++)
        CHECK(strcmp(fx_trainer_tensor_name(a, i), fx_trainer_tensor_name(b, i)) == 0,
              "%s/%s: tensor %d is %s and %s", a_name, b_name, i, fx_trainer_tensor_name(a, i),
              fx_trainer_tensor_name(b, i));
    int64_t fused_a = 0, fused_b = 0; /* adds (or sums) made with their ReLU in one pass */
    int64_t gated_a = 0;              /* ReLU gradients made from the sum of two, in one pass */
    for (int s = 0; s < steps; s++) {
        float la = -1, lb = -2;
        int64_t f0 = fused_made();
        const int64_t g0 = fx_shared_add_gated_made() + fx_half_gated_made();
        CHECK_STATUS(fx_trainer_step(a, &la), FX_OK);
        fused_a += fused_made() - f0;
        gated_a += fx_shared_add_gated_made() + fx_half_gated_made() - g0;
        f0 = fused_made();
        CHECK_STATUS(fx_trainer_step(b, &lb), FX_OK);
        fused_b += fused_made() - f0;
        CHECK(memcmp(&la, &lb, sizeof la) == 0, "%s/%s: step %d loss %.9g and %.9g", a_name,
              b_name, s, (double)la, (double)lb);
    }
    int64_t n = fx_trainer_param_count(a);
    CHECK(n == fx_trainer_param_count(b), "%s/%s: parameter counts", a_name, b_name);
    float *pa = malloc((size_t)n * sizeof *pa), *pb = malloc((size_t)n * sizeof *pb);
    if (pa && pb && n == fx_trainer_param_count(b)) {
        CHECK_STATUS(fx_trainer_get_params(a, pa), FX_OK);
        CHECK_STATUS(fx_trainer_get_params(b, pb), FX_OK);
        CHECK(memcmp(pa, pb, (size_t)n * sizeof *pa) == 0, "%s/%s: parameters differ after %d "
              "steps", a_name, b_name, steps);
    }
    free(pa);
    free(pb);
    if (b_unfused) {
        fused_tensors_as_unfused(a, b, a_name, fmt);
        CHECK(fused_a > 0, "%s: no add made with its ReLU in one pass", a_name);
        CHECK(fmt == FMT_FP32 || gated_a > 0, "%s in fmt %d: no ReLU gradient made from its two "
              "output gradients in one pass", a_name, fmt);
        CHECK(fused_b == 0, "%s with FLEXPOINT_NO_FUSION=1: %lld adds made with their ReLU",
              b_name, (long long)fused_b);
    }
done:
    fx_trainer_free(a);
    fx_trainer_free(b);
}

static void same_network(const char *a_name, const char *b_name, int fmt, int steps,
                         const fx_dataset *tr)
{
    same_network_as(a_name, b_name, fmt, steps, tr, 0);
}

/* Parameters of the networks on 12x12x1 images with 10 classes, counted from their layers. */
static int64_t mlp_params(int64_t w, int d)
{
    int64_t n = 144 * w + w;
    for (int i = 1; i < d; i++) n += w * w + w;
    return n + 10 * w + 10;
}

static int64_t cnn_params(int64_t c1, int64_t c2, int64_t f)
{
    return (c1 * 25 + c1) + (c2 * c1 * 25 + c2) + (f * c2 * 3 * 3 + f) + (10 * f + 10);
}

static int64_t resnet_params(int blocks, int64_t k)
{
    int64_t ch[3] = {16 * k, 32 * k, 64 * k}, n = 16 * k * 9 + 2 * 16 * k, cin = 16 * k;
    for (int s = 0; s < 3; s++)
        for (int b = 0; b < blocks; b++) {
            int64_t c = ch[s];
            n += cin * c * 9 + 2 * c + c * c * 9 + 2 * c;
            if (s > 0 && b == 0) n += cin * c + 2 * c; /* 1x1 shortcut and its batch norm */
            cin = c;
        }
    return n + 64 * k * 10 + 10;
}

static void sizes(const fx_dataset *tr)
{
    struct {
        const char *name;
        int64_t want;
    } cases[] = {{"mlp", mlp_params(256, 2)},        {"mlp512x3", mlp_params(512, 3)},
                 {"mlp7x1", mlp_params(7, 1)},       {"cnn", cnn_params(32, 64, 128)},
                 {"cnn8-16-32", cnn_params(8, 16, 32)}, {"resnet20", resnet_params(3, 1)},
                 {"resnet32", resnet_params(5, 1)},  {"resnet8x2", resnet_params(1, 2)},
                 {"resnet110", resnet_params(18, 1)}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fx_trainer *t = make(cases[i].name, FMT_FP32, tr);
        if (!t) continue;
        CHECK(fx_trainer_param_count(t) == cases[i].want, "%s: %lld parameters, want %lld",
              cases[i].name, (long long)fx_trainer_param_count(t), (long long)cases[i].want);
        if (!strcmp(cases[i].name, "resnet110")) {
            CHECK(fx_trainer_tensor_find(t, "s3b18.conv2.w") >= 0, "resnet110 lacks s3b18");
            CHECK(fx_trainer_tensor_find(t, "s3b19.conv2.w") < 0, "resnet110 has an s3b19");
            CHECK(fx_trainer_tensor_find(t, "s2b1.down.w") >= 0, "resnet110 lacks s2b1.down");
        }
        fx_trainer_free(t);
    }
    /* resnet20 is 0.27 M parameters (He et al. 2016, table 6) */
    CHECK(resnet_params(3, 1) > 265000 && resnet_params(3, 1) < 280000,
          "the count formula disagrees with the paper: %lld", (long long)resnet_params(3, 1));
}

int main(void)
{
    flexpoint_set_num_threads(2);
    grammar();
    fx_dataset *tr = test_patch_dataset(96, 5);
    CHECK(tr != NULL, "data: %s", flexpoint_last_error());
    if (tr) {
        same_network("mlp", "mlp256x2", FMT_FLEX16_5, 4, tr);
        same_network("cnn", "cnn32-64-128", FMT_FLEX16_5, 3, tr);
        same_network("resnet20", "resnet20x1", FMT_BF16, 2, tr);
        same_network_as("resnet8", "resnet8", FMT_FLEX16_5, 3, tr, 1);
        same_network_as("resnet8", "resnet8", FMT_DFP16, 3, tr, 1);
        same_network_as("resnet8", "resnet8", FMT_BF16, 3, tr, 1);
        same_network_as("resnet8", "resnet8", FMT_FP16, 3, tr, 1);
        same_network_as("resnet8", "resnet8", FMT_FP32, 3, tr, 1);
        sizes(tr);
    }
    fx_dataset_free(tr);
    return test_finish(NAME);
}
