/* Minimal test harness shared by every test program. A CHECK failure prints the location and
 * counts; test_finish() returns the process exit code (0 pass, 1 fail, 77 skip). */
#ifndef FX_TESTUTIL_H
#define FX_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern long fx_test_failures;
extern long fx_test_checks;

#define CHECK(cond, ...)                                                                    \
    do {                                                                                    \
        fx_test_checks++;                                                                   \
        if (!(cond)) {                                                                      \
            fx_test_failures++;                                                             \
            if (fx_test_failures <= 50) {                                                   \
                fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);    \
                fprintf(stderr, __VA_ARGS__);                                               \
                fprintf(stderr, "\n");                                                      \
            }                                                                               \
        }                                                                                   \
    } while (0)

/* Status check: expr must return want; prints the library's last error otherwise. */
#define CHECK_STATUS(expr, want) test_check_status((expr), (want), #expr, __FILE__, __LINE__)
void test_check_status(int got, int want, const char *expr, const char *file, int line);

/* Print a summary and return 0 if every check passed, 1 otherwise. Fails when no check ran. */
int test_finish(const char *name);

/* Print the reason and return 77 (ctest's skip code). */
int test_skip(const char *name, const char *reason);

/* Deterministic pseudo-random numbers for tests (xorshift-based). */
typedef struct { uint64_t s; } test_rng;
void test_rng_seed(test_rng *r, uint64_t seed);
uint64_t test_rng_u64(test_rng *r);
double test_rng_uniform(test_rng *r);          /* [0, 1) */
double test_rng_normal(test_rng *r);           /* standard normal */
int64_t test_rng_range(test_rng *r, int64_t lo, int64_t hi); /* [lo, hi] */
/* Every element of t set to scale times a standard normal draw (through tensor_from_f32, so in
 * t's format), checked. */
struct tensor;
void test_fill_normal(struct tensor *t, double scale, test_rng *r);

/* An easy, learnable problem: class c (of 10) lights a 3x3 patch at its own position of a
 * 12x12 one-channel image, plus Gaussian noise (sd 0.3). A working trainer in any format
 * separates it. NULL on allocation failure. */
struct fx_dataset;
struct fx_dataset *test_patch_dataset(int64_t n, uint64_t seed);

/* The training tests' configuration: the defaults with `model` in `fmt`, batches of 32,
 * lr 0.05 and `seed`. */
struct fx_train_config;
void test_train_config(struct fx_train_config *c, const char *model, int fmt, uint64_t seed);

/* A small language model's configuration: the defaults with `model` (a gpt<L>x<D>h<H>c<T>
 * name) in FLEX16_5, batches of 4, AdamW at lr 3e-3. */
void test_lm_config(struct fx_train_config *c, const char *model);

/* Run the shell command cmd (popen), its output into out (n bytes, NUL-terminated, cut at
 * n - 1): pclose's status (0: the command exited 0), -1 when it could not be started. */
int test_run_capture(const char *cmd, char *out, size_t n);

/* The exact int64 product want[M, N] = A[M, K] B[K, N] of row-major int16 matrices (each
 * |sum| <= K 2^30 fits for the tests' K). */
void test_ref_matmul_i16(const int16_t *A, const int16_t *B, int64_t M, int64_t K, int64_t N,
                         int64_t *want);

/* A MATMUL call (src/core/backend.h) of row-major FLEX16_5 mantissas A[M, K] (exponent ea) and
 * B[K, N] (eb) into the int64 stage out[M, N], its exponent into *exp, on `threads` threads;
 * everything else zero. */
struct fx_op_call;
void test_i16_matmul_call(struct fx_op_call *c, int16_t *A, int ea, int16_t *B, int eb,
                          int64_t M, int64_t K, int64_t N, int64_t *out, int *exp, int threads);

/* The bits of an fp32 value (for bit-for-bit comparisons). */
uint32_t test_f32_bits(float x);

/* Whether two tensors of one shape and format hold the result of the same writes: the same
 * stored bits and, for FLEX16_5/DFP16, the same exponent, statistics (saturated, true_max,
 * underflow, clamped, overflows, writes) and last trace record. CHECKs it, naming `what` and
 * the write's number `step`, and returns the outcome (a test comparing a fast route with the
 * dispatcher's, write by write, stops at the first difference). */
struct tensor;
int test_same_writes(struct tensor *x, struct tensor *y, const char *what, int step);

#endif
