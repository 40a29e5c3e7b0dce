/* Placement of the trainer's tensors and buffers: host memory or one CUDA device. */
#include "placement.h"
#include "flexpoint_gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fx_place_select(int device, const char *func)
{
    if (device < 0) return FX_OK;
    if (!flexpoint_gpu_built())
        return fx_error(FX_EDEVICE, func, "device=%d asks for CUDA device %d, but this build of "
                        "flexpoint has no CUDA backend (rebuild with nvcc installed, "
                        "-DFLEXPOINT_CUDA=AUTO or ON), or use device=-1 (the host)", device,
                        device);
    int count = flexpoint_gpu_device_count();
    if (count <= 0)
        return fx_error(FX_EDEVICE, func, "device=%d asks for CUDA device %d, but no CUDA "
                        "device is visible on this machine; use device=-1 (the host)", device,
                        device);
    if (device >= count)
        return fx_error(FX_EDEVICE, func, "device=%d: there is no CUDA device %d (%d visible: "
                        "0..%d)", device, device, count, count - 1);
    int rc = flexpoint_gpu_set_device(device);
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", flexpoint_last_error());
        return fx_error(FX_EDEVICE, func, "cannot select CUDA device %d: %s", device, msg);
    }
    return FX_OK;
}

tensor_t *fx_place_host_tensor(const fx_train_config *cfg, fmt_t fmt, int ndim,
                               const int64_t *shape, int window_lo)
{
    tensor_t *t = tensor_new(fmt, ndim, shape);
    if (t && fx_model_flex_setup(cfg, t, window_lo)) {
        tensor_free(t);
        return NULL;
    }
    return t;
}

tensor_t *fx_place_tensor(const fx_model *m, fmt_t fmt, int ndim, const int64_t *shape,
                          int window_lo)
{
    if (m->device < 0) return fx_place_host_tensor(&m->cfg, fmt, ndim, shape, window_lo);
    if (fmt != FMT_FLEX16_5) return tensor_new_device(fmt, ndim, shape);
    /* Setting a window may move the exponent, which rescales mantissas: a host-only operation.
     * Build the tensor on the host and copy it, state included. */
    tensor_t *h = fx_place_host_tensor(&m->cfg, fmt, ndim, shape, window_lo);
    tensor_t *d = h ? tensor_to_device(h) : NULL;
    tensor_free(h);
    return d;
}

int fx_place_zeros(const fx_model *m, void **p, int64_t n, size_t elem)
{
    *p = NULL;
    if (n < 1) n = 1; /* never a zero-byte request: both allocators treat it specially */
    if (m->device < 0) {
        *p = calloc((size_t)n, elem);
        return *p ? FX_OK : FX_FAIL(FX_ENOMEM, "out of memory (%lld elements)", (long long)n);
    }
    return flexpoint_gpu_malloc(p, (size_t)n * elem);
}

void fx_place_release(const fx_model *m, void *p)
{
    if (!p) return;
    if (m->device < 0) free(p);
    else flexpoint_gpu_free(p);
}

/* n floats between a host array and a model buffer, in the direction the model's placement
 * needs (a plain copy when the model lives on the host). */
static int fx_place_copy(const fx_model *m, float *dst, const float *src, int64_t n, int to_model)
{
    const size_t bytes = (size_t)n * sizeof(float);
    if (m->device < 0) {
        memcpy(dst, src, bytes);
        return FX_OK;
    }
    return to_model ? flexpoint_gpu_memcpy_to_device(dst, src, bytes)
                    : flexpoint_gpu_memcpy_to_host(dst, src, bytes);
}

int fx_place_upload(const fx_model *m, float *buf, const float *host, int64_t n)
{
    return fx_place_copy(m, buf, host, n, 1);
}

int fx_place_download(const fx_model *m, float *host, const float *buf, int64_t n)
{
    return fx_place_copy(m, host, buf, n, 0);
}

int fx_place_write_input(fx_model *m, int ctx, const float *x)
{
    if (m->device < 0) return tensor_from_f32(m->input[ctx], x);
    int rc = tensor_from_f32(m->stage[ctx], x);
    if (!rc) rc = tensor_copy_to_device(m->input[ctx], m->stage[ctx]);
    return rc;
}

int fx_place_read_f32(const fx_model *m, const tensor_t *t, tensor_t *host_tmp, float *dst)
{
    if (m->device < 0) return tensor_to_f32(t, dst);
    if (host_tmp) {
        int rc = tensor_copy_to_host(host_tmp, t);
        return rc ? rc : tensor_to_f32(host_tmp, dst);
    }
    tensor_t *h = tensor_to_host(t);
    if (!h) return flexpoint_last_status() ? flexpoint_last_status() : FX_EDEVICE;
    int rc = tensor_to_f32(h, dst);
    tensor_free(h);
    return rc;
}
