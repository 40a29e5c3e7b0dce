/* The device API without a device (include/flexpoint_gpu.h): this is the GPU test that runs in
 * CI. Built without CUDA, or with CUDA on a machine without a GPU, every device call must fail
 * with FX_EDEVICE and a message, nothing may crash, and host tensors must keep working.
 *
 * It also checks the placement guards of the core on a tensor whose storage is *marked* as
 * device memory (white box: the flag is set by hand, and the data pointer is host memory that
 * no code path may touch once the guards work): host accessors, mixed host/device ops,
 * exponent rescaling and composite ops must refuse such a tensor with a clear status. */
#include "core/internal.h"
#include "flexpoint_nn.h"
#include "testutil.h"

#include <string.h>

static int message_has(const char *needle)
{
    return strstr(flexpoint_last_error(), needle) != NULL;
}

/* Every entry point of the device API, with no device present. */
static void test_device_api_fails_cleanly(void)
{
    CHECK(flexpoint_gpu_device_count() == 0, "device count %d", flexpoint_gpu_device_count());

    flexpoint_clear_error();
    CHECK_STATUS(flexpoint_gpu_set_device(0), FX_EDEVICE);
    CHECK(flexpoint_last_error()[0] != '\0', "set_device left no message");
    CHECK_STATUS(flexpoint_gpu_device(), FX_EDEVICE);
    flexpoint_clear_error();
    CHECK_STATUS(flexpoint_gpu_synchronize(), FX_EDEVICE);
    CHECK(message_has("CUDA"), "synchronize: message '%s'", flexpoint_last_error());
    CHECK_STATUS(flexpoint_gpu_release_cache(), FX_OK); /* nothing cached: not an error */

    flexpoint_clear_error();
    CHECK(flexpoint_gpu_device_name() == NULL, "a device name without a device");
    CHECK(flexpoint_last_status() == FX_EDEVICE, "status %d", flexpoint_last_status());
    CHECK(message_has("CUDA"), "message '%s' does not mention CUDA", flexpoint_last_error());

    const int64_t shape[2] = {3, 4};
    for (int f = 0; f < FMT_COUNT; f++) {
        flexpoint_clear_error();
        tensor_t *d = tensor_new_device((fmt_t)f, 2, shape);
        CHECK(d == NULL, "tensor_new_device(%s) without a device", fmt_name((fmt_t)f));
        CHECK(flexpoint_last_status() == FX_EDEVICE, "status %d", flexpoint_last_status());
        CHECK(flexpoint_last_error()[0] != '\0', "no message");
        tensor_free(d);
    }

    tensor_t *h = tensor_new(FMT_DFP16, 2, shape);
    CHECK(h != NULL, "tensor_new");
    if (!h) return;
    CHECK(tensor_device(h) == -1, "host tensor reports device %d", tensor_device(h));
    CHECK_STATUS(tensor_device(NULL), FX_EINVAL);

    flexpoint_clear_error();
    tensor_t *d = tensor_to_device(h);
    CHECK(d == NULL, "tensor_to_device without a device");
    CHECK(flexpoint_last_status() == FX_EDEVICE, "status %d", flexpoint_last_status());
    tensor_free(d);

    /* a host tensor is not a device tensor: EINVAL (CUDA build) or EDEVICE (no CUDA) */
    flexpoint_clear_error();
    tensor_t *back = tensor_to_host(h);
    CHECK(back == NULL, "tensor_to_host of a host tensor");
    CHECK(flexpoint_last_status() == FX_EINVAL || flexpoint_last_status() == FX_EDEVICE,
          "status %d", flexpoint_last_status());
    tensor_free(back);
    flexpoint_clear_error();
    CHECK(tensor_to_host(NULL) == NULL && flexpoint_last_status() == FX_EINVAL,
          "tensor_to_host(NULL): status %d", flexpoint_last_status());

    tensor_t *h2 = tensor_new(FMT_DFP16, 2, shape);
    int rc = tensor_copy_to_device(h2, h);
    CHECK(rc == FX_EINVAL || rc == FX_EDEVICE, "copy_to_device between host tensors: %d", rc);
    rc = tensor_copy_to_host(h2, h);
    CHECK(rc == FX_EINVAL || rc == FX_EDEVICE, "copy_to_host between host tensors: %d", rc);

    /* the host keeps working after all of that */
    const float v[12] = {1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12};
    float out[12];
    CHECK_STATUS(tensor_from_f32(h, v), FX_OK);
    CHECK_STATUS(tensor_add(h2, h, h), FX_OK);
    CHECK_STATUS(tensor_to_f32(h2, out), FX_OK);
    for (int i = 0; i < 12; i++) CHECK(out[i] == 2 * v[i], "out[%d] = %g", i, out[i]);
    tensor_free(h2);
    tensor_free(h);
}

/* Host-only paths given a tensor marked as living on a device. */
static void test_guards_on_marked_tensor(void)
{
    const int64_t shape[2] = {2, 3};
    tensor_t *h = tensor_new(FMT_FP32, 2, shape);
    tensor_t *m = tensor_new(FMT_FP32, 2, shape);
    tensor_t *q = tensor_new(FMT_DFP16, 2, shape);
    CHECK(h && m && q, "tensor_new");
    if (!h || !m || !q) {
        tensor_free(h);
        tensor_free(m);
        tensor_free(q);
        return;
    }
    m->st->on_device = true;
    m->st->device = 3;
    q->st->on_device = true;
    q->st->device = 3;
    CHECK(tensor_device(m) == 3, "tensor_device %d", tensor_device(m));

    float buf[6] = {0};
    CHECK_STATUS(tensor_to_f32(m, buf), FX_EINVAL);
    CHECK(message_has("lives on CUDA device 3"), "message '%s'", flexpoint_last_error());
    CHECK_STATUS(tensor_from_f32(m, buf), FX_EINVAL);
    CHECK_STATUS(tensor_get_raw(m, buf), FX_EINVAL);
    CHECK_STATUS(tensor_set_raw(m, buf), FX_EINVAL);
    flexpoint_clear_error();
    CHECK(tensor_data(m) == NULL && flexpoint_last_status() == FX_EINVAL,
          "tensor_data of a device tensor");

    /* rescaling mantissas runs on their device, which cannot be used here: nothing changes */
    CHECK_STATUS(tensor_set_exp(q, 5), FX_EDEVICE);
    CHECK(message_has("device"), "message '%s'", flexpoint_last_error());
    CHECK(tensor_exp(q) == 0, "exponent changed to %d", tensor_exp(q));
    CHECK_STATUS(tensor_set_exp(q, 0), FX_OK); /* unchanged exponent: nothing to rescale */

    /* mixed placements: the op names the operands and where they live, and writes nothing */
    CHECK_STATUS(tensor_add(h, h, m), FX_EINVAL);
    CHECK(message_has("out lives on the host but b lives on CUDA device 3"), "message '%s'",
          flexpoint_last_error());
    CHECK_STATUS(tensor_copy(m, h), FX_EINVAL);
    CHECK(message_has("out lives on CUDA device 3 but a lives on the host"), "message '%s'",
          flexpoint_last_error());
    CHECK_STATUS(tensor_matmul(h, m, h), FX_ESHAPE); /* shapes are validated first */

    /* composite ops check placement too: a host output with device inputs is refused,
     * naming the operands and where they live */
    tensor_t *y = tensor_new(FMT_FP32, 2, shape);
    CHECK_STATUS(tensor_relu_backward(y, m, m), FX_EINVAL);
    CHECK(message_has("tensor_relu_backward") && message_has("lives on CUDA device 3"),
          "message '%s'", flexpoint_last_error());
    const int64_t one = 1;
    tensor_t *mean = tensor_new(FMT_FP32, 1, &one);
    CHECK_STATUS(tensor_mean(mean, q, FX_AXIS_ALL), FX_EINVAL);
    CHECK(message_has("lives on CUDA device 3"), "message '%s'", flexpoint_last_error());
    tensor_free(mean);
    tensor_free(y);

    /* views share the placement */
    tensor_t *v = tensor_view_transpose(m, 0, 1);
    CHECK(v && tensor_device(v) == 3, "view placement");
    tensor_free(v);

    /* unmark before freeing: the memory is the host's */
    m->st->on_device = false;
    q->st->on_device = false;
    tensor_free(q);
    tensor_free(m);
    tensor_free(h);
}

int main(void)
{
    if (flexpoint_gpu_device_count() > 0)
        return test_skip("test_gpu_nodevice", "a CUDA device is present (test_gpu_ops covers it)");
    test_device_api_fails_cleanly();
    test_guards_on_marked_tensor();
    return test_finish("test_gpu_nodevice");
}
