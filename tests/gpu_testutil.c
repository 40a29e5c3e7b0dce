/* See gpu_testutil.h. */
#include "gpu_testutil.h"

#include "core/internal.h"
#include "testutil.h"

#include <stdlib.h>

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
    fx_storage *d = c->st;
    const fx_storage *s = t->st;
    d->exp = s->exp;
    d->win_lo = s->win_lo;
    d->win_hi = s->win_hi;
    d->rounding = s->rounding;
    d->seed = s->seed;
    d->write_counter = s->write_counter;
    d->af = s->af;
    d->last = s->last;
    d->writes = s->writes;
    d->overflows = s->overflows;
    d->clamped_total = s->clamped_total;
    d->nonfinite_total = s->nonfinite_total;
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
