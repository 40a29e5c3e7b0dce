/* GPU GEMM benchmark: the library's exact integer GEMM (FLEX16_5/DFP16 mantissas, exact int64
 * sums) against cuBLAS fp16, bf16 (fp32 accumulation) and int8 (int32 accumulation), square
 * sizes (default 1024 2048 4096, or the sizes given as arguments), in one run. Prints time,
 * TOPS (2 n^3 / t) and t_ours / t (how many times longer our kernel takes). Then the whole
 * library op, tensor_matmul on device DFP16 tensors (GEMM + statistics + exponent choice +
 * requantisation), to show what the write path adds.
 *
 * Without CUDA at build time or without a device it says so and exits 0. */
#include "flexpoint.h"
#include "flexpoint_gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "bench_util.h"

#ifdef FX_BENCH_CUDA
int fx_bench_gpu_gemm_run(const int *sizes, int nsizes);

static double now_s(void) { return bench_clock_s(CLOCK_MONOTONIC); }

/* The public op: device tensors in, device tensor out; ops return when their output is written. */
static int bench_library_matmul(int n)
{
    const int64_t s[2] = {n, n};
    float *v = malloc((size_t)n * n * sizeof *v);
    if (!v) return 1;
    uint64_t x = 88172645463325252ULL;
    for (int64_t i = 0; i < (int64_t)n * n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v[i] = (float)((double)(x >> 11) * 0x1p-53 * 2.0 - 1.0);
    }
    tensor_t *ah = tensor_new(FMT_DFP16, 2, s);
    int rc = ah ? tensor_from_f32(ah, v) : FX_ENOMEM;
    free(v);
    tensor_t *a = rc ? NULL : tensor_to_device(ah);
    tensor_t *c = tensor_new_device(FMT_DFP16, 2, s);
    if (!a || !c) {
        fprintf(stderr, "bench_gpu_gemm: %s\n", flexpoint_last_error());
        tensor_free(ah);
        tensor_free(a);
        tensor_free(c);
        return 1;
    }
    rc = tensor_matmul(c, a, a); /* warm-up: cuBLAS/context, allocator */
    const int reps = n <= 1024 ? 10 : n <= 2048 ? 5 : 2;
    double t0 = now_s();
    for (int r = 0; r < reps && rc == FX_OK; r++) rc = tensor_matmul(c, a, a);
    double ms = (now_s() - t0) * 1e3 / reps;
    if (rc)
        fprintf(stderr, "bench_gpu_gemm: tensor_matmul: %s\n", flexpoint_last_error());
    else
        printf("%6d  %-24s %10.3f %9.2f\n", n, "tensor_matmul dfp16 (all)", ms,
               2.0 * n * (double)n * n / (ms * 1e9));
    tensor_free(ah);
    tensor_free(a);
    tensor_free(c);
    return rc != FX_OK;
}
#endif

int main(int argc, char **argv)
{
#ifndef FX_BENCH_CUDA
    (void)argc;
    (void)argv;
    printf("bench_gpu_gemm: this build has no CUDA backend; nothing to measure\n");
    return 0;
#else
    if (flexpoint_gpu_device_count() <= 0) {
        printf("bench_gpu_gemm: no CUDA device; nothing to measure\n");
        return 0;
    }
    int sizes[16] = {256, 512, 1024, 2048, 4096}, ns = 5;
    if (argc > 1) {
        ns = 0;
        for (int i = 1; i < argc && ns < 16; i++) {
            int n = atoi(argv[i]);
            if (n < 1 || n > 32768) {
                fprintf(stderr, "usage: %s [n ...] (1 <= n <= 32768)\n", argv[0]);
                return 2;
            }
            sizes[ns++] = n;
        }
    }
    int rc = fx_bench_gpu_gemm_run(sizes, ns);
    for (int i = 0; i < ns; i++) rc |= bench_library_matmul(sizes[i]);
    return rc;
#endif
}
