/* See gpu_testutil.h. */
#include "gpu_testutil.h"

#include "core/internal.h"
#include "core/device_backend.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int gpu_test_on_host;

tensor_t *gpu_test_host_clone(const tensor_t *t)
{
    tensor_t *c = tensor_new(t->fmt, t->ndim, t->shape);
    if (!c) return NULL;
    int64_t n = tensor_numel(t);
    void *buf = malloc((size_t)(n ? n : 1) * fmt_elem_size(t->fmt));
    if (!buf) {
        tensor_free(c);
        return NULL;
    }
    tensor_get_raw(t, buf);
    tensor_set_raw(c, buf);
    free(buf);
    if (fx_storage_copy_exp_state(c->st, t->st, __func__) != FX_OK) {
        tensor_free(c);
        return NULL;
    }
    return c;
}

tensor_t *gpu_test_to_dev(const tensor_t *h)
{
    tensor_t *d = gpu_test_on_host ? gpu_test_host_clone(h) : tensor_to_device(h);
    CHECK(d != NULL, "to device: %s", flexpoint_last_error());
    return d;
}

tensor_t *gpu_test_new_dev(fmt_t f, int ndim, const int64_t *shape)
{
    tensor_t *d = gpu_test_on_host ? tensor_new(f, ndim, shape) : tensor_new_device(f, ndim, shape);
    CHECK(d != NULL, "new device tensor: %s", flexpoint_last_error());
    return d;
}

tensor_t *gpu_test_to_host(const tensor_t *d)
{
    tensor_t *h = gpu_test_on_host ? gpu_test_host_clone(d) : tensor_to_host(d);
    CHECK(h != NULL, "to host: %s", flexpoint_last_error());
    return h;
}

void gpu_test_check_same(const tensor_t *h, const tensor_t *d, const char *what)
{
    if (!h || !d) return;
    tensor_t *b = gpu_test_to_host(d);
    if (!b) return;
    fmt_t f = tensor_fmt(h);
    int64_t n = tensor_numel(h);
    size_t es = fmt_elem_size(f);
    unsigned char *x = malloc((size_t)(n ? n : 1) * es), *y = malloc((size_t)(n ? n : 1) * es);
    tensor_get_raw(h, x);
    tensor_get_raw(b, y);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (memcmp(x + i * es, y + i * es, es) != 0) bad = i;
    if (bad >= 0) {
        uint32_t xv = 0, yv = 0;
        memcpy(&xv, x + bad * es, es);
        memcpy(&yv, y + bad * es, es);
        CHECK(0, "%s (%s): element %lld differs: host 0x%x, device 0x%x", what, fmt_name(f),
              (long long)bad, xv, yv);
    } else {
        CHECK(1, "%s", what);
    }
    if (fmt_is_shared_exponent(f)) {
        CHECK(tensor_exp(h) == tensor_exp(b), "%s: exp host %d device %d", what, tensor_exp(h),
              tensor_exp(b));
        static const char *const stats[] = {"saturated", "nonfinite", "underflow", "clamped",
                                            "true_max",  "stored_max", "writes",   "overflows",
                                            "clamped_total", "nonfinite_total"};
        for (size_t s = 0; s < sizeof stats / sizeof *stats; s++) {
            double a = -1, c = -2;
            tensor_stat(h, stats[s], &a);
            tensor_stat(b, stats[s], &c);
            CHECK(a == c, "%s: stat %s host %.17g device %.17g", what, stats[s], a, c);
        }
    }
    free(x);
    free(y);
    tensor_free(b);
}

void gpu_test_fill(float *v, int64_t n, test_rng *r, int kspan)
{
    for (int64_t i = 0; i < n; i++) {
        double u = test_rng_uniform(r) * 2.0 + 0.01;
        int k = (int)test_rng_range(r, -kspan, kspan);
        v[i] = (float)((test_rng_uniform(r) < 0.5 ? -u : u) * ldexp(1.0, k));
    }
}

void gpu_test_set_i16_gemm(int path)
{
    const fx_device_backend *d = fx_device_backend_get();
    if (d) d->set_i16_gemm(path, 0);
}

int64_t gpu_test_set_conv_chunk(int64_t elems)
{
    const fx_device_backend *d = fx_device_backend_get();
    return d ? d->set_conv_chunk(elems) : 0;
}
