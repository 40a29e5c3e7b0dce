#include "testutil.h"

#include "flexpoint.h"

#include <math.h>
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
