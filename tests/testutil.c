#define _POSIX_C_SOURCE 200809L /* popen */
#include "testutil.h"
#include "core/backend.h"

#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long fx_test_failures = 0;
long fx_test_checks = 0;

void test_check_status(int got, int want, const char *expr, const char *file, int line)
{
    fx_test_checks++;
    if (got != want) {
        fx_test_failures++;
        if (fx_test_failures <= 50)
            fprintf(stderr, "%s:%d: %s returned %d (%s), wanted %d (%s); last error: %s\n", file,
                    line, expr, got, flexpoint_status_str(got), want, flexpoint_status_str(want),
                    flexpoint_last_error());
    }
}

int test_finish(const char *name)
{
    if (fx_test_checks == 0) {
        fprintf(stderr, "%s: no checks ran\n", name);
        return 1;
    }
    printf("%s: %ld checks, %ld failures\n", name, fx_test_checks, fx_test_failures);
    return fx_test_failures ? 1 : 0;
}

int test_skip(const char *name, const char *reason)
{
    printf("%s: SKIPPED: %s\n", name, reason);
    return 77;
}

void test_rng_seed(test_rng *r, uint64_t seed) { r->s = seed * 0x9e3779b97f4a7c15ULL + 1; }

uint64_t test_rng_u64(test_rng *r)
{
    /* xorshift64* */
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545f4914f6cdd1dULL;
}

double test_rng_uniform(test_rng *r) { return (double)(test_rng_u64(r) >> 11) * 0x1.0p-53; }

double test_rng_normal(test_rng *r)
{
    double u1 = test_rng_uniform(r), u2 = test_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t test_rng_range(test_rng *r, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)(span ? test_rng_u64(r) % span : test_rng_u64(r));
}

uint32_t test_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

fx_dataset *test_patch_dataset(int64_t n, uint64_t seed)
{
    float *x = malloc((size_t)n * 144 * sizeof(float));
    int32_t *y = malloc((size_t)n * sizeof(int32_t));
    fx_dataset *d = NULL;
    if (x && y) {
        test_rng r;
        test_rng_seed(&r, seed);
        for (int64_t i = 0; i < n; i++) {
            const int c = (int)(i % 10);
            y[i] = c;
            const int py = 1 + 3 * (c / 4), px = 1 + 3 * (c % 4);
            for (int k = 0; k < 144; k++) x[i * 144 + k] = (float)(0.3 * test_rng_normal(&r));
            for (int dy = 0; dy < 3; dy++)
                for (int dx = 0; dx < 3; dx++) x[i * 144 + (py + dy) * 12 + px + dx] += 1.0f;
        }
        d = fx_dataset_from_arrays(n, 1, 12, 12, 10, x, y);
    }
    free(x);
    free(y);
    return d;
}

void test_train_config(fx_train_config *c, const char *model, int fmt, uint64_t seed)
{
    fx_train_config_default(c);
    snprintf(c->model, sizeof c->model, "%s", model);
    c->fmt = fmt;
    c->batch_size = 32;
    c->lr = 0.05;
    c->seed = seed;
}

void test_lm_config(fx_train_config *c, const char *model)
{
    fx_train_config_default(c);
    snprintf(c->model, sizeof c->model, "%s", model);
    c->fmt = FMT_FLEX16_5;
    c->batch_size = 4;
    c->optimizer = FX_OPT_ADAMW;
    c->lr = 3e-3;
}

int test_run_capture(const char *cmd, char *out, size_t n)
{
    FILE *p = popen(cmd, "r");
    size_t got = 0;
    int status = -1;
    if (p) {
        got = fread(out, 1, n - 1, p);
        status = pclose(p);
    }
    out[got] = '\0';
    return status;
}

void test_fill_normal(tensor_t *t, double scale, test_rng *r)
{
    const int64_t n = tensor_numel(t);
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    CHECK(v != NULL, "test_fill_normal: cannot allocate %lld values", (long long)n);
    if (!v) return;
    for (int64_t i = 0; i < n; i++) v[i] = (float)(scale * test_rng_normal(r));
    CHECK_STATUS(tensor_from_f32(t, v), FX_OK);
    free(v);
}

int test_same_writes(tensor_t *x, tensor_t *y, const char *what, int step)
{
    const int64_t n = tensor_numel(x);
    const fmt_t f = tensor_fmt(x);
    int ok = n == 0 || memcmp(tensor_data(x), tensor_data(y), (size_t)n * fmt_elem_size(f)) == 0;
    if (fmt_is_shared_exponent(f)) {
        ok = ok && tensor_exp(x) == tensor_exp(y);
        static const char *const stats[] = {"saturated", "true_max", "underflow", "clamped",
                                            "overflows", "writes"};
        for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++) {
            double u = 0, w = 0;
            tensor_stat(x, stats[i], &u);
            tensor_stat(y, stats[i], &w);
            ok = ok && u == w;
        }
        const int64_t len = tensor_trace_len(x);
        ok = ok && len == tensor_trace_len(y);
        if (ok && len > 0) {
            fx_trace_record p, q;
            tensor_trace_get(x, len - 1, &p);
            tensor_trace_get(y, len - 1, &q);
            ok = p.exp == q.exp && p.overflow == q.overflow && p.recomputed == q.recomputed &&
                 p.saturated == q.saturated && p.underflow == q.underflow &&
                 p.true_max == q.true_max && p.stored_max == q.stored_max &&
                 p.clamped == q.clamped;
        }
    }
    CHECK(ok, "%s, write %d: the two routes' results differ", what, step);
    return ok;
}

void test_ref_matmul_i16(const int16_t *A, const int16_t *B, int64_t M, int64_t K, int64_t N,
                         int64_t *want)
{
    memset(want, 0, sizeof *want * (size_t)(M * N));
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++) want[i * N + j] += (int64_t)A[i * K + k] * B[k * N + j];
}

void test_i16_matmul_call(struct fx_op_call *c, int16_t *A, int ea, int16_t *B, int eb,
                          int64_t M, int64_t K, int64_t N, int64_t *out, int *exp, int threads)
{
    memset(c, 0, sizeof *c);
    c->op = FX_OP_MATMUL;
    c->nin = 2;
    c->in[0] = (fx_operand){A, FMT_FLEX16_5, ea, 2, {M, K}, {K, 1}};
    c->in[1] = (fx_operand){B, FMT_FLEX16_5, eb, 2, {K, N}, {N, 1}};
    c->out_ndim = 2;
    c->out_shape[0] = M;
    c->out_shape[1] = N;
    c->out_numel = M * N;
    c->out_i64 = out;
    c->out_exp = exp;
    c->nthreads = threads;
}
