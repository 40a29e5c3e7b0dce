/* A tour of the C API: tensors in two formats, an op, a matmul, Autoflex statistics and a
 * trace, and an error message. Built and run by ctest (test_example_tour); README.md shows
 * the body of main() verbatim, and a test checks that it still does. */
#include <flexpoint.h>
#include <math.h>
#include <stdio.h>

#define N 64

static int check(int status)
{
    if (status != FX_OK) fprintf(stderr, "error: %s\n", flexpoint_last_error());
    return status != FX_OK;
}

int main(void)
{
    float xa[N * N], xb[N * N], y[N * N];
    for (int i = 0; i < N * N; i++) {
        xa[i] = sinf(0.1f * (float)i);
        xb[i] = cosf(0.07f * (float)i) * 0.01f;
    }
    int64_t shape[2] = {N, N};
    tensor_t *a = tensor_new(FMT_FLEX16_5, 2, shape);   /* int16 + one shared exponent */
    tensor_t *b = tensor_new(FMT_FLEX16_5, 2, shape);
    tensor_t *c = tensor_new(FMT_FLEX16_5, 2, shape);
    tensor_t *d = tensor_new(FMT_DFP16, 2, shape);      /* outputs may have any format */
    if (!a || !b || !c || !d) return check(flexpoint_last_status());

    /* A write: Autoflex (preset "robust" by default) chooses each tensor's exponent. */
    if (check(tensor_from_f32(a, xa)) || check(tensor_from_f32(b, xb))) return 1;
    printf("exponents: a %d, b %d (window [-31, 0])\n", tensor_exp(a), tensor_exp(b));

    /* An element-wise op, then a matmul with a transposed view: integer-only, exact sums,
     * one rounding, the same bits on every backend and thread count. */
    if (check(tensor_add(c, a, b))) return 1;
    tensor_t *bt = tensor_view_transpose(b, 0, 1);      /* a view: no copy */
    if (!bt || check(tensor_matmul(d, a, bt))) return 1;
    if (check(tensor_to_f32(d, y))) return 1;
    printf("d[0][0] = %.6f at exponent %d\n", y[0], tensor_exp(d));

    /* Autoflex statistics of the last write, and a per-write trace. */
    double saturated, true_max;
    tensor_stat(c, "saturated", &saturated);
    tensor_stat(c, "true_max", &true_max);
    printf("c: %.0f saturated, true max %.4f\n", saturated, true_max);
    tensor_trace_enable(c, 1);
    for (int step = 0; step < 4; step++) {
        if (check(tensor_scale(c, a, step == 2 ? 100.0 : 1.0))) return 1;  /* a jump at step 2 */
    }
    for (int64_t i = 0; i < tensor_trace_len(c); i++) {
        fx_trace_record r;
        tensor_trace_get(c, i, &r);
        printf("write %lld: exp %d overflow %d recomputed %d\n", (long long)r.write, r.exp,
               r.overflow, r.recomputed);
    }

    /* Errors are status codes with a message naming the problem; nothing aborts. */
    int64_t other[2] = {N + 1, N};
    tensor_t *e = tensor_new(FMT_FP32, 2, other);
    int status = tensor_matmul(d, a, e);
    printf("%s: %s\n", flexpoint_status_str(status), flexpoint_last_error());

    tensor_free(bt);
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
    tensor_free(d);
    tensor_free(e);
    return status == FX_ESHAPE ? 0 : 1;
}
