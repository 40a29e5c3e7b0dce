/* fx_tensor_set_window_fresh (src/core/internal.h), the trainer's placement of a new FLEX16_5
 * tensor in its exponent window: the same exponent, window, statistics and later writes as
 * tensor_set_exp_window on a new tensor, the same errors for bad arguments, and none of the
 * tensor's pages read (tensor_set_exp_window's rescale reads them all, which maps them to the
 * kernel's zero page and makes the first write fault on each page a second time). */
#define _DEFAULT_SOURCE /* mincore */
#include "flexpoint.h"
#include "core/internal.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

/* Both placements of a new [4, 3, 5, 7] tensor at window start lo: their status, exponent,
 * window and saturation count, then a write of the same values into each (Autoflex's state
 * and the mantissas must agree). */
static void check_same_as_set_exp_window(int lo, uint64_t seed)
{
    const int64_t shape[4] = {4, 3, 5, 7};
    const int64_t n = 4 * 3 * 5 * 7;
    tensor_t *a = tensor_new(FMT_FLEX16_5, 4, shape), *b = tensor_new(FMT_FLEX16_5, 4, shape);
    CHECK(a && b, "tensor_new");
    if (!a || !b) {
        tensor_free(a);
        tensor_free(b);
        return;
    }
    const int ra = tensor_set_exp_window(a, lo), rb = fx_tensor_set_window_fresh(b, lo);
    CHECK(ra == rb, "window %d: status %d against tensor_set_exp_window's %d", lo, rb, ra);
    int alo = 0, ahi = 0, blo = 1, bhi = 1;
    CHECK_STATUS(tensor_exp_window(a, &alo, &ahi), FX_OK);
    CHECK_STATUS(tensor_exp_window(b, &blo, &bhi), FX_OK);
    double sa = -1, sb = -2;
    CHECK_STATUS(tensor_stat(a, "saturated", &sa), FX_OK);
    CHECK_STATUS(tensor_stat(b, "saturated", &sb), FX_OK);
    CHECK(tensor_exp(a) == tensor_exp(b) && alo == blo && ahi == bhi && sa == sb,
          "window %d: exponent %d in [%d, %d], %g saturated against %d in [%d, %d], %g", lo,
          tensor_exp(b), blo, bhi, sb, tensor_exp(a), alo, ahi, sa);
    float *x = malloc(sizeof(float) * (size_t)n), *ya = malloc(sizeof(float) * (size_t)n);
    float *yb = malloc(sizeof(float) * (size_t)n);
    test_rng r;
    test_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) x[i] = (float)test_rng_normal(&r) * 3.0f;
    /* every value still zero, then the same write into both */
    int zeros = 1;
    CHECK_STATUS(tensor_to_f32(b, yb), FX_OK);
    for (int64_t i = 0; i < n; i++) zeros &= yb[i] == 0.0f;
    CHECK(zeros, "window %d: a new tensor placed fresh reads as zeros", lo);
    for (int w = 0; w < 3; w++) {
        CHECK_STATUS(tensor_from_f32(a, x), ra);
        CHECK_STATUS(tensor_from_f32(b, x), rb);
        CHECK_STATUS(tensor_to_f32(a, ya), FX_OK);
        CHECK_STATUS(tensor_to_f32(b, yb), FX_OK);
        CHECK(tensor_exp(a) == tensor_exp(b) && !memcmp(ya, yb, sizeof(float) * (size_t)n),
              "window %d, write %d: exponent %d against %d, or other values", lo, w,
              tensor_exp(b), tensor_exp(a));
        for (int64_t i = 0; i < n; i++) x[i] *= 9.0f; /* Autoflex moves the exponent up */
    }
    free(x);
    free(ya);
    free(yb);
    tensor_free(a);
    tensor_free(b);
}

#ifdef __linux__
/* Resident pages of t's storage (mincore), or -1 where that cannot be asked */
static long resident_pages(tensor_t *t, int64_t bytes)
{
    const long page = sysconf(_SC_PAGESIZE);
    const uintptr_t p0 = (uintptr_t)tensor_data(t) & ~(uintptr_t)(page - 1);
    const uintptr_t p1 = (uintptr_t)tensor_data(t) + (uintptr_t)bytes;
    const size_t len = (size_t)(p1 - p0), npages = (len + (size_t)page - 1) / (size_t)page;
    unsigned char *vec = malloc(npages);
    if (!vec || mincore((void *)p0, len, vec) != 0) {
        free(vec);
        return -1;
    }
    long res = 0;
    /* the first and last pages may hold the allocator's header or a neighbour */
    for (size_t i = 1; i + 1 < npages; i++) res += vec[i] & 1;
    free(vec);
    return res;
}

/* A 64 MiB tensor (above any malloc mmap threshold, so its pages start unmapped): placed fresh,
 * none of its inner pages become resident; placed by tensor_set_exp_window, which moves the
 * exponent and so rescans the zeros, they do (the check can tell the two apart). */
static void check_pages_untouched(void)
{
    const int64_t shape[1] = {(int64_t)32 << 20};
    const int64_t bytes = shape[0] * (int64_t)sizeof(int16_t);
    tensor_t *a = tensor_new(FMT_FLEX16_5, 1, shape), *b = tensor_new(FMT_FLEX16_5, 1, shape);
    if (!a || !b) {
        tensor_free(a);
        tensor_free(b);
        return; /* no memory for the check: not the library's failure */
    }
    const long before = resident_pages(b, bytes);
    if (before < 0 || before > 0) { /* cannot ask, or the allocator handed out used pages */
        tensor_free(a);
        tensor_free(b);
        return;
    }
    /* window starts that move the default exponent, as the trainer's do */
    CHECK_STATUS(fx_tensor_set_window_fresh(b, -60), FX_OK);
    CHECK_STATUS(tensor_set_exp_window(a, -60), FX_OK);
    const long fresh = resident_pages(b, bytes), scanned = resident_pages(a, bytes);
    CHECK(fresh == 0, "placed fresh: %ld pages of 64 MiB read", fresh);
    CHECK(scanned > 0, "tensor_set_exp_window read no page: the check cannot tell the two apart");
    tensor_free(a);
    tensor_free(b);
}
#endif

int main(void)
{
    static const int los[] = {-128, -60, -40, -31, -20, -5, 0, 10, 96};
    uint64_t seed = 1;
    for (size_t i = 0; i < sizeof los / sizeof los[0]; i++)
        check_same_as_set_exp_window(los[i], seed++);
    /* bad arguments: the errors of tensor_set_exp_window, under its name */
    const int64_t shape[1] = {8};
    tensor_t *d = tensor_new(FMT_DFP16, 1, shape), *f = tensor_new(FMT_FLEX16_5, 1, shape);
    CHECK_STATUS(fx_tensor_set_window_fresh(NULL, 0), FX_EINVAL);
    CHECK_STATUS(fx_tensor_set_window_fresh(d, 0), FX_EFORMAT);
    CHECK(strstr(flexpoint_last_error(), "tensor_set_exp_window") != NULL,
          "the message names tensor_set_exp_window: %s", flexpoint_last_error());
    CHECK_STATUS(fx_tensor_set_window_fresh(f, 100), FX_ERANGE);
    CHECK_STATUS(fx_tensor_set_window_fresh(f, -129), FX_ERANGE);
    int lo = 0, hi = 0;
    CHECK_STATUS(tensor_exp_window(f, &lo, &hi), FX_OK);
    CHECK(lo == -31 && hi == 0, "a refused window leaves the default [%d, %d]", lo, hi);
    tensor_free(d);
    tensor_free(f);
#ifdef __linux__
    check_pages_untouched();
#endif
    return test_finish("test_window_fresh");
}
