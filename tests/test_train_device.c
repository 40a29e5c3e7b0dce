/* Training on a CUDA device (fx_train_config.device) against the same run on the host.
 * Skipped (exit 77) without CUDA in the build or without a device; the no-device behaviour
 * (FX_EDEVICE at creation, nothing leaked) is checked by test_train, which always runs.
 *
 * What is guaranteed, and asserted exactly:
 *  - the device run starts from the host run's weights, bit for bit (drawn on the host, copied);
 *  - every trainer tensor but the host staging "input" lives on the device;
 *  - flex16_5 and dfp16: the first forward pass is bit-identical (the device's integer
 *    convolutions, GEMMs, pooling, relu, adds and batch norm are exact, flexpoint_gpu.h): the
 *    logits' values and exponent, and the Autoflex trace record of the first layer's output;
 *  - the first loss agrees within the device's exp/log error (a few fp32 ulps) when the
 *    logits are identical, within the float formats' summation-order error otherwise;
 *  - checkpoints move between host and device trainers bit for bit (same file format).
 * What is not guaranteed, and asserted only as a sanity bound: later steps. Softmax
 * cross-entropy's gradient goes through the device's exp (1-2 ulp of double from glibc's),
 * which can move a dlogits rounding, and cuBLAS sums in another order than the CPU, so the
 * trajectories may drift apart by rounding-sized amounts; a wrong device op shows up as a far
 * larger difference than the bound below. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_gpu.h"
#include "flexpoint_train.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The checkpoint directory: main() creates it with mkdtemp, which replaces the trailing X's
 * with a unique name, and removes it at the end. */
static char tmpdir[] = "/tmp/fx_test_train_device_XXXXXX";

static fx_trainer *make_preset(const char *model, int fmt, const char *preset, int device,
                               const fx_dataset *tr, const fx_dataset *te)
{
    fx_train_config c;
    test_train_config(&c, model, fmt, 5);
    if (preset) snprintf(c.autoflex, sizeof c.autoflex, "%s", preset);
    c.device = device;
    fx_trainer *t = fx_trainer_new(&c, tr, te);
    CHECK(t != NULL, "trainer %s/%s (%s) on device %d: %s", model, fmt_name((fmt_t)fmt),
          preset ? preset : "default preset", device, flexpoint_last_error());
    return t;
}

static fx_trainer *make(const char *model, int fmt, int device, const fx_dataset *tr,
                        const fx_dataset *te)
{
    return make_preset(model, fmt, NULL, device, tr, te);
}

static float *params_of(const fx_trainer *t)
{
    int64_t n = fx_trainer_param_count(t);
    float *p = malloc((size_t)n * sizeof(float));
    if (p) CHECK_STATUS(fx_trainer_get_params(t, p), FX_OK);
    return p;
}

static int same_params(const fx_trainer *a, const fx_trainer *b)
{
    int64_t n = fx_trainer_param_count(a);
    if (n != fx_trainer_param_count(b)) return 0;
    float *pa = params_of(a), *pb = params_of(b);
    int eq = pa && pb && memcmp(pa, pb, (size_t)n * sizeof(float)) == 0;
    free(pa);
    free(pb);
    return eq;
}

/* Host floats of a trainer tensor, wherever it lives. */
static float *values_of(const tensor_t *t)
{
    float *v = malloc((size_t)tensor_numel(t) * sizeof(float));
    tensor_t *h = tensor_device(t) >= 0 ? tensor_to_host(t) : NULL;
    const tensor_t *src = tensor_device(t) >= 0 ? h : t;
    int rc = (v && src) ? tensor_to_f32(src, v) : FX_ENOMEM;
    CHECK(rc == FX_OK, "reading a tensor back: %s", flexpoint_last_error());
    tensor_free(h);
    if (rc) {
        free(v);
        return NULL;
    }
    return v;
}

static const char *logits_name(const char *model)
{
    return !strcmp(model, "mlp") ? "fc3.out" : !strcmp(model, "cnn") ? "fc2.out" : "fc.out";
}

static const char *first_out_name(const char *model)
{
    return !strcmp(model, "mlp") ? "fc1.out" : !strcmp(model, "cnn") ? "conv1.out" : "conv0.out";
}

/* Relative tolerance of the first forward pass of a float format: a few units in the last
 * place of the format, relative to the largest logit (summation order only). */
static double forward_tol(int fmt)
{
    switch (fmt) {
    case FMT_FP32: return 1e-4;
    case FMT_FP16: return 8.0 / 2048.0;
    case FMT_BF16: return 8.0 / 256.0;
    default: return 0.0;
    }
}

static void compare_first_step(const char *model, int fmt, fx_trainer *h, fx_trainer *d)
{
    const char *fn = fmt_name((fmt_t)fmt);
    int exact = fmt_is_shared_exponent((fmt_t)fmt);
    int ih = fx_trainer_tensor_find(h, first_out_name(model));
    int id = fx_trainer_tensor_find(d, first_out_name(model));
    if (exact && ih >= 0 && id >= 0) {
        CHECK_STATUS(tensor_trace_enable(fx_trainer_tensor(h, ih), 1), FX_OK);
        CHECK_STATUS(tensor_trace_enable(fx_trainer_tensor(d, id), 1), FX_OK);
    }
    float lh = 0, ld = 0;
    CHECK_STATUS(fx_trainer_step(h, &lh), FX_OK);
    CHECK_STATUS(fx_trainer_step(d, &ld), FX_OK);

    int kh = fx_trainer_tensor_find(h, logits_name(model));
    int kd = fx_trainer_tensor_find(d, logits_name(model));
    CHECK(kh >= 0 && kd >= 0, "%s: no logits tensor", model);
    if (kh < 0 || kd < 0) return;
    const tensor_t *th = fx_trainer_tensor(h, kh), *td = fx_trainer_tensor(d, kd);
    float *vh = values_of(th), *vd = values_of(td);
    if (vh && vd) {
        int64_t n = tensor_numel(th);
        if (exact) {
            CHECK(memcmp(vh, vd, (size_t)n * sizeof(float)) == 0,
                  "%s/%s: first-step logits differ from the host's", model, fn);
            CHECK(tensor_exp(th) == tensor_exp(td), "%s/%s: logits exponent %d vs %d", model,
                  fn, tensor_exp(th), tensor_exp(td));
        } else {
            double mx = 0, diff = 0;
            for (int64_t i = 0; i < n; i++) {
                mx = fmax(mx, fabs(vh[i]));
                diff = fmax(diff, fabs((double)vh[i] - vd[i]));
            }
            CHECK(diff <= forward_tol(fmt) * mx, "%s/%s: first-step logits differ by %g "
                  "(largest %g, tolerance %g)", model, fn, diff, mx, forward_tol(fmt) * mx);
        }
    }
    free(vh);
    free(vd);
    /* the loss is computed in double from the logits, rounded to fp32 */
    double tol = exact ? 1e-5 : (fmt == FMT_FP32 ? 1e-3 : 3e-2);
    CHECK(fabs((double)lh - ld) <= tol * fabs(lh), "%s/%s: first loss %.9g (host) vs %.9g "
          "(device)", model, fn, lh, ld);
    if (exact && ih >= 0 && id >= 0) {
        const tensor_t *oh = fx_trainer_tensor(h, ih), *od = fx_trainer_tensor(d, id);
        CHECK(tensor_trace_len(oh) == 1 && tensor_trace_len(od) == 1,
              "%s/%s: trace lengths %lld / %lld after one step", model, fn,
              (long long)tensor_trace_len(oh), (long long)tensor_trace_len(od));
        fx_trace_record rh, rd;
        if (tensor_trace_get(oh, 0, &rh) == FX_OK && tensor_trace_get(od, 0, &rd) == FX_OK)
            CHECK(rh.exp == rd.exp && rh.saturated == rd.saturated &&
                  rh.underflow == rd.underflow && rh.true_max == rd.true_max,
                  "%s/%s: trace record of %s differs (exp %d/%d, saturated %lld/%lld)", model,
                  fn, first_out_name(model), rh.exp, rd.exp, (long long)rh.saturated,
                  (long long)rd.saturated);
    }
}

static void host_vs_device(const char *model, int fmt, const fx_dataset *tr,
                           const fx_dataset *te)
{
    const char *fn = fmt_name((fmt_t)fmt);
    fx_trainer *h = make(model, fmt, -1, tr, te), *d = make(model, fmt, 0, tr, te);
    if (!h || !d) goto done;
    CHECK(same_params(h, d), "%s/%s: the device run starts elsewhere", model, fn);
    CHECK(fx_trainer_tensor_count(h) == fx_trainer_tensor_count(d), "registry sizes differ");
    for (int i = 0; i < fx_trainer_tensor_count(d); i++) {
        const char *name = fx_trainer_tensor_name(d, i);
        int want = strcmp(name, "input") == 0 ? -1 : 0;
        CHECK(tensor_device(fx_trainer_tensor(d, i)) == want, "%s/%s: %s lives on %d", model,
              fn, name, tensor_device(fx_trainer_tensor(d, i)));
    }
    compare_first_step(model, fmt, h, d);

    /* sanity bound on the next steps (not a guarantee, see the top of the file) */
    float first = 0;
    for (int s = 0; s < 9; s++) {
        float lh = 0, ld = 0;
        CHECK_STATUS(fx_trainer_step(h, &lh), FX_OK);
        CHECK_STATUS(fx_trainer_step(d, &ld), FX_OK);
        if (s == 0) first = lh;
        CHECK(isfinite(ld) && fabs((double)lh - ld) <= 0.05 * fabs(lh) + 0.02,
              "%s/%s step %d: loss %.6g (host) vs %.6g (device)", model, fn, s + 2, lh, ld);
    }
    double ah = 0, ad = 0, Lh = 0, Ld = 0;
    CHECK_STATUS(fx_trainer_evaluate(h, te, &ah, &Lh), FX_OK);
    CHECK_STATUS(fx_trainer_evaluate(d, te, &ad, &Ld), FX_OK);
    CHECK(fabs(ah - ad) <= 0.1 && fabs(Lh - Ld) <= 0.05 * Lh + 0.02,
          "%s/%s: evaluation %.4f / %.4f (host) vs %.4f / %.4f (device)", model, fn, ah, Lh,
          ad, Ld);
    printf("%-8s %-8s after 10 steps (step-2 loss %.4f): test accuracy %.4f (host) %.4f "
           "(device), test loss %.4f / %.4f\n", model, fn, first, ah, ad, Lh, Ld);

    /* checkpoints cross over bit for bit: host -> device -> host */
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/%s_%s_host.ckpt", tmpdir, model, fn);
    snprintf(p2, sizeof p2, "%s/%s_%s_dev.ckpt", tmpdir, model, fn);
    CHECK_STATUS(fx_trainer_save(h, p1), FX_OK);
    fx_trainer *d2 = make(model, fmt, 0, tr, te);
    if (d2) {
        CHECK_STATUS(fx_trainer_load(d2, p1), FX_OK);
        CHECK(same_params(h, d2), "%s/%s: host checkpoint restored on the device differs",
              model, fn);
        CHECK(fx_trainer_global_step(d2) == fx_trainer_global_step(h), "position %lld",
              (long long)fx_trainer_global_step(d2));
        for (int i = 0; i < fx_trainer_tensor_count(h); i++) {
            tensor_t *x = fx_trainer_tensor(h, i), *y = fx_trainer_tensor(d2, i);
            if (fmt_is_shared_exponent(tensor_fmt(x)))
                CHECK(tensor_exp(x) == tensor_exp(y), "%s: exponent %d (host) vs %d (device)",
                      fx_trainer_tensor_name(h, i), tensor_exp(x), tensor_exp(y));
        }
        CHECK_STATUS(fx_trainer_save(d2, p2), FX_OK);
        fx_trainer *h2 = make(model, fmt, -1, tr, te);
        if (h2) {
            CHECK_STATUS(fx_trainer_load(h2, p2), FX_OK);
            CHECK(same_params(h, h2), "%s/%s: device checkpoint restored on the host differs",
                  model, fn);
            fx_trainer_free(h2);
        }
        float l = 0;
        CHECK_STATUS(fx_trainer_step(d2, &l), FX_OK);
        CHECK(isfinite(l), "%s/%s: step after resuming on the device: loss %g", model, fn, l);
        fx_trainer_free(d2);
    }
    remove(p1);
    remove(p2);
done:
    fx_trainer_free(h);
    fx_trainer_free(d);
}

/* Host waits per CNN training step on the device (flexpoint_gpu_host_waits), after warm-up
 * steps. fp32's are the step's own copies (labels, loss, argmax checks). The shared-exponent
 * formats launch their writes without waiting (FLEX16_5 under "published" and "robust", and
 * DFP16, whose exponents are chosen on the device), so they may wait at most once per step
 * more than fp32. The published device run also counts the same writes per tensor as the host
 * run; its exponents are reported (later steps are not guaranteed identical, see the top of
 * the file). */
static long long waits_per_steps(fx_trainer *t, int steps)
{
    float l = 0;
    for (int s = 0; s < 2; s++) CHECK_STATUS(fx_trainer_step(t, &l), FX_OK);
    long long w0 = flexpoint_gpu_host_waits();
    for (int s = 0; s < steps; s++) CHECK_STATUS(fx_trainer_step(t, &l), FX_OK);
    return flexpoint_gpu_host_waits() - w0;
}

static void step_waits(const fx_dataset *tr, const fx_dataset *te)
{
    const int steps = 6;
    fx_trainer *pub = make_preset("cnn", FMT_FLEX16_5, "published", 0, tr, te);
    fx_trainer *rob = make_preset("cnn", FMT_FLEX16_5, "robust", 0, tr, te);
    fx_trainer *dfp = make_preset("cnn", FMT_DFP16, NULL, 0, tr, te);
    fx_trainer *f32 = make_preset("cnn", FMT_FP32, NULL, 0, tr, te);
    fx_trainer *host = make_preset("cnn", FMT_FLEX16_5, "published", -1, tr, te);
    if (pub && rob && dfp && f32 && host) {
        long long wp = waits_per_steps(pub, steps), wr = waits_per_steps(rob, steps);
        long long wd = waits_per_steps(dfp, steps), wf = waits_per_steps(f32, steps);
        printf("host waits per CNN step: flex16_5 published %.1f, flex16_5 robust %.1f, "
               "dfp16 %.1f, fp32 %.1f\n", (double)wp / steps, (double)wr / steps,
               (double)wd / steps, (double)wf / steps);
        CHECK(wp <= wf + steps && wr <= wf + steps && wd <= wf + steps,
              "waits in %d steps: published %lld, robust %lld, dfp16 %lld, fp32 %lld (at most "
              "one more per step than fp32 expected)", steps, wp, wr, wd, wf);
        float l = 0;
        for (int s = 0; s < steps + 2; s++) CHECK_STATUS(fx_trainer_step(host, &l), FX_OK);
        int exp_differ = 0;
        for (int i = 0; i < fx_trainer_tensor_count(host); i++) {
            tensor_t *x = fx_trainer_tensor(host, i), *y = fx_trainer_tensor(pub, i);
            if (!fmt_is_shared_exponent(tensor_fmt(x))) continue;
            double wx = -1, wy = -2;
            CHECK_STATUS(tensor_stat(x, "writes", &wx), FX_OK);
            CHECK_STATUS(tensor_stat(y, "writes", &wy), FX_OK);
            CHECK(wx == wy, "published %s: %g writes on the host, %g on the device",
                  fx_trainer_tensor_name(host, i), wx, wy);
            exp_differ += tensor_exp(x) != tensor_exp(y);
        }
        printf("published, after %d steps: %d tensors' exponents differ from the host's\n",
               steps + 2, exp_differ);
        /* the health counts, tallied at settle on the device and at the write on the host:
         * the same steps and writes per class (their statistics may drift with the steps) */
        fx_train_health hh, hd;
        CHECK_STATUS(fx_trainer_health(host, &hh), FX_OK);
        CHECK_STATUS(fx_trainer_health(pub, &hd), FX_OK);
        CHECK(hh.steps == hd.steps && hh.measured == 1 && hd.measured == 1,
              "health: %lld steps on the host, %lld on the device", (long long)hh.steps,
              (long long)hd.steps);
        for (int c = 0; c < FX_TENSOR_CLASSES; c++) {
            CHECK(hh.writes[c] == hd.writes[c] && hh.written[c] == hd.written[c] &&
                      hd.written[c] > 0,
                  "health class %d: %lld writes / %lld elements on the host, %lld / %lld on "
                  "the device", c, (long long)hh.writes[c], (long long)hh.written[c],
                  (long long)hd.writes[c], (long long)hd.written[c]);
            printf("health class %d: saturated %lld / %lld, underflow %lld / %lld (host / "
                   "device)\n", c, (long long)hh.saturated[c], (long long)hd.saturated[c],
                   (long long)hh.underflow[c], (long long)hd.underflow[c]);
        }
    }
    fx_trainer_free(pub);
    fx_trainer_free(rob);
    fx_trainer_free(dfp);
    fx_trainer_free(f32);
    fx_trainer_free(host);
}

int main(void)
{
    if (!flexpoint_gpu_built())
        return test_skip("test_train_device", "this build has no CUDA backend");
    if (flexpoint_gpu_device_count() < 1)
        return test_skip("test_train_device", "no CUDA device is visible");
    if (!mkdtemp(tmpdir))
        return test_skip("test_train_device", "cannot create a temporary directory");
    flexpoint_set_num_threads(4);
    printf("device: %s\n", flexpoint_gpu_device_name());
    /* 1x12x12 images, 10 classes: 320 training images = 10 steps of 32 */
    fx_dataset *all = fx_dataset_synthetic(384, 1, 12, 12, 10, 21);
    fx_dataset *tr = all ? fx_dataset_subset(all, 0, 320) : NULL;
    fx_dataset *te = all ? fx_dataset_subset(all, 320, 64) : NULL;
    CHECK(tr && te, "synthetic data: %s", flexpoint_last_error());
    if (tr && te) {
        for (int f = 0; f < FMT_COUNT; f++) {
            host_vs_device("mlp", f, tr, te);
            host_vs_device("cnn", f, tr, te);
        }
        host_vs_device("resnet20", FMT_FLEX16_5, tr, te);
        host_vs_device("resnet20", FMT_FP32, tr, te);
        step_waits(tr, te);
    }
    fx_dataset_free(all);
    fx_dataset_free(tr);
    fx_dataset_free(te);
    rmdir(tmpdir);
    return test_finish("test_train_device");
}
