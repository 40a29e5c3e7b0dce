/* The op table and its dispatcher (src/core/op_table.h, op_run.c, device_backend.h):
 *   - every op has a descriptor with a unique public name; out-of-range ops have none;
 *   - every CPU level says it supports every (op, format) pair and has the entry it says;
 *   - the placement rule: tensors in two places are refused naming both, before any work;
 *   - tensors on a device go to the device backend: without one in the build, FX_EDEVICE
 *     naming the missing backend; with the CUDA backend, the pairs it does not support
 *     (element-wise math, gradient clipping, AdamW) are refused with FX_EUNSUPPORTED naming it
 *     before any device memory is touched, and the fused convolution falls back by rule.
 * Device tensors are simulated by marking host storage as device memory (no op may read it:
 * every case here must be refused before the data is used). */
#include "core/backend.h"
#include "core/device_backend.h"
#include "core/internal.h"
#include "flexpoint_nn.h"
#include "testutil.h"

#include <string.h>

static int message_has(const char *s) { return strstr(flexpoint_last_error(), s) != NULL; }

static void test_descriptors(void)
{
    for (int op = 0; op < FX_OP_COUNT; op++) {
        const fx_op_info *info = fx_op_info_of(op);
        CHECK(info && info->name, "op %d has a descriptor with a name", op);
        if (!info || !info->name) continue;
        CHECK(strncmp(info->name, "tensor_", 7) == 0 || strncmp(info->name, "fx_", 3) == 0,
              "op %d's name '%s' is a public function's", op, info->name);
        for (int other = 0; other < op; other++) {
            const fx_op_info *o = fx_op_info_of(other);
            CHECK(!o || strcmp(o->name, info->name) != 0, "ops %d and %d share the name %s",
                  other, op, info->name);
        }
    }
    CHECK(fx_op_info_of(-1) == NULL && fx_op_info_of(FX_OP_COUNT) == NULL,
          "no descriptor outside the enum");
    const fx_op_info *fused = fx_op_info_of(FX_OP_CONV2D_BIAS_RELU);
    CHECK(fused && fused->fallback, "the fused convolution has its unfused fallback");
}

static void test_cpu_levels(void)
{
    for (int i = 0; i < FX_BACKEND_COUNT; i++) {
        const fx_backend *b = fx_backend_get(i);
        CHECK(b && b->supports_op, "CPU level %d has supports_op", i);
        if (!b || !b->supports_op) continue;
        for (int op = 0; op < FX_OP_COUNT; op++)
            for (int f = 0; f < FMT_COUNT; f++) {
                const int yes = b->supports_op(b, op, (fmt_t)f);
                CHECK(yes, "%s supports op %s for %s", b->name, fx_op_info_of(op)->name,
                      fmt_name((fmt_t)f));
                if (op >= FX_OP_STAGE_COUNT)
                    CHECK(!yes || b->run[op] != NULL, "%s says yes to %s and has its entry",
                          b->name, fx_op_info_of(op)->name);
                else
                    CHECK(!yes || b->kernels[op][f] || b->kernels[op][FMT_FP32],
                          "%s says yes to %s/%s and has a kernel or the fp32 one", b->name,
                          fx_op_info_of(op)->name, fmt_name((fmt_t)f));
            }
        CHECK(!b->supports_op(b, FX_OP_COUNT, FMT_FP32) && !b->supports_op(b, -1, FMT_FP32),
              "%s refuses ops outside the enum", b->name);
    }
}

/* Mark t's storage as memory of CUDA device `dev` (or the host again, dev < 0). */
static void place(tensor_t *t, int dev)
{
    t->st->on_device = dev >= 0;
    t->st->device = dev >= 0 ? dev : 0;
}

static void test_placement(void)
{
    const int64_t sh[4] = {2, 3, 4, 4};
    tensor_t *dx = tensor_new(FMT_FP32, 4, sh), *dy = tensor_new(FMT_FP32, 4, sh);
    tensor_t *x = tensor_new(FMT_FP32, 4, sh);
    CHECK(dx && dy && x, "tensors");
    if (!dx || !dy || !x) return;
    float ones[96];
    for (int i = 0; i < 96; i++) ones[i] = 1.0f;
    CHECK_STATUS(tensor_from_f32(dx, ones), FX_OK);

    /* mixed: refused naming both tensors, dx untouched */
    place(dy, 2);
    CHECK_STATUS(tensor_relu_backward(dx, dy, x), FX_EINVAL);
    CHECK(message_has("dx lives on the host") && message_has("dy lives on CUDA device 2"),
          "message names both places: '%s'", flexpoint_last_error());
    place(dy, -1);
    float v[96];
    CHECK_STATUS(tensor_to_f32(dx, v), FX_OK);
    int unchanged = 1;
    for (int i = 0; i < 96; i++) unchanged &= v[i] == 1.0f;
    CHECK(unchanged, "dx unchanged after the refusal");

    /* a loss scaler's gradient list: the n-th one named */
    tensor_t *gl[3] = {dx, dy, x};
    float o0[96], o1[96], o2[96];
    float *outs[3] = {o0, o1, o2};
    fx_loss_scaler sc;
    fx_loss_scaler_init(&sc, 1);
    int found = 0;
    place(x, 1);
    CHECK_STATUS(fx_loss_scaler_unscale(&sc, (const tensor_t *const *)gl, 3, outs, &found),
                 FX_EINVAL);
    CHECK(message_has("grads[2] lives on CUDA device 1"), "message '%s'",
          flexpoint_last_error());
    place(x, -1);

    const fx_device_backend *d = fx_device_backend_get();
    place(dx, 0);
    place(dy, 0);
    place(x, 0);
    if (!d) {
        /* no device backend in this build: every device op says so */
        CHECK_STATUS(tensor_relu_backward(dx, dy, x), FX_EDEVICE);
        CHECK(message_has("no CUDA backend"), "message '%s'", flexpoint_last_error());
        CHECK_STATUS(tensor_add(dx, dy, x), FX_EDEVICE);
        CHECK(message_has("no CUDA backend"), "message '%s'", flexpoint_last_error());
        CHECK_STATUS(tensor_softmax(dx, dy, -1), FX_EDEVICE);
        CHECK(message_has("no CUDA backend"), "message '%s'", flexpoint_last_error());
        CHECK(!flexpoint_gpu_built() && flexpoint_gpu_device_count() == 0,
              "the runtime API reports no device backend");
    } else {
        /* the CUDA backend: refusals by supports_op come before any device work */
        CHECK(d->supports_op(FX_OP_CONV2D, FMT_FLEX16_5) && d->supports_op(FX_OP_MATMUL, FMT_FP32),
              "cuda computes convolutions and matmuls");
        CHECK(!d->supports_op(FX_OP_UNARY, FMT_FP32) && !d->supports_op(FX_OP_CLIP_GRAD_NORM,
                                                                           FMT_FP32),
              "cuda does not compute element-wise math nor gradient clipping");
        CHECK_STATUS(tensor_unary(dx, dy, "exp"), FX_EUNSUPPORTED);
        CHECK(message_has("cuda backend") && message_has("tensor_unary"), "message '%s'",
              flexpoint_last_error());
        CHECK_STATUS(tensor_softmax(dx, dy, -1), FX_EUNSUPPORTED);
        CHECK(message_has("cuda backend has no tensor_softmax"), "message '%s'",
              flexpoint_last_error());
        tensor_t *grads[2] = {dx, dy};
        double norm = -1.0;
        CHECK_STATUS(fx_clip_grad_norm(grads, 2, 1.0, &norm), FX_EUNSUPPORTED);
        CHECK(message_has("cuda backend") && norm == -1.0, "message '%s', norm %g",
              flexpoint_last_error(), norm);
    }
    place(dx, -1);
    place(dy, -1);
    place(x, -1);
    tensor_free(dx);
    tensor_free(dy);
    tensor_free(x);
}

int main(void)
{
    test_descriptors();
    test_cpu_levels();
    test_placement();
    return test_finish("test_op_table");
}
