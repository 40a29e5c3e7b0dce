/* Throughput of every conversion routine of every available backend, against memcpy.
 *
 * Each routine is called directly through the backend's conversion table (single-threaded,
 * as the table's routines are). Bytes are counted as read + written: fp32 -> 16 bit reads 4
 * and writes 2 bytes per element. The peer is a plain memcpy moving the same number of bytes
 * (copying half of them: each copied byte is read once and written once), measured in the same
 * run, alternating with the routine: copy, routine, copy, routine, ... The median of the
 * repetitions after warm-up is printed, with the ratio routine / memcpy.
 *
 * Three cases: "large", 64 MiB of fp32 (16 Mi elements; far beyond the caches) in one call;
 * "large, chunked", the same arrays in calls of 64 Ki elements, as the library's parallel
 * drivers (src/core/parallel_cvt.c, store.c) call these routines; and "l2", 256 KiB of fp32
 * (64 Ki elements: input + output + the copy's buffers within a 1 MiB L2).
 *
 * usage: bench_convert [large_MiB]          fp32 MiB of the large case (default 64)
 * env:   BENCH_BACKENDS="avx2 avx512"       only these backends (default: all available)
 *        BENCH_REPS=9                       measured repetitions (after 2 warm-ups)
 * Wall-clock GB/s is the headline; GB/s per CPU second is printed too, because on a shared
 * machine wall time includes time the thread was descheduled.
 */
#define _POSIX_C_SOURCE 200112L /* clock_gettime */

#include "core/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

static int listed(const char *env, const char *word)
{
    const char *list = getenv(env);
    if (!list || !*list) return 1;
    const size_t n = strlen(word);
    for (const char *p = strstr(list, word); p; p = strstr(p + 1, word))
        if ((p == list || p[-1] == ' ' || p[-1] == ',') &&
            (p[n] == '\0' || p[n] == ' ' || p[n] == ','))
            return 1;
    return 0;
}

static void *xalloc(size_t bytes)
{
    /* 64-byte aligned, size rounded up to a multiple of the alignment (aligned_alloc rule). */
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "bench_convert: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    memset(p, 0, bytes); /* fault the pages in before any timing */
    return p;
}

typedef enum { OP_F32_TO_FP16, OP_FP16_TO_F32, OP_F32_TO_BF16, OP_BF16_TO_F32, OP_QUANT_F32,
               OP_DEQUANT, OP_MAXABS_F32, OP_COUNT } op_t;

static const struct {
    const char *name;
    int in_bytes, out_bytes; /* per element */
} op_info[OP_COUNT] = {
    {"f32_to_fp16", 4, 2}, {"fp16_to_f32", 2, 4}, {"f32_to_bf16", 4, 2}, {"bf16_to_f32", 2, 4},
    {"quant_f32(e=-10)", 4, 2}, {"dequant(e=-10)", 2, 4}, {"maxabs_f32", 4, 0},
};

/* Buffers of one size case: inputs of every kind (valid data for each routine) and outputs. */
typedef struct {
    int64_t n;
    float *f32_in, *f32_out;
    uint16_t *fp16_in, *bf16_in, *u16_out;
    int16_t *i16_in;
    unsigned char *copy_src, *copy_dst; /* memcpy peer: 3 bytes per element each (max) */
} buffers;

static void buffers_init(buffers *b, int64_t n, const fx_backend *ref)
{
    b->n = n;
    size_t un = (size_t)n;
    b->f32_in = xalloc(un * 4);
    b->f32_out = xalloc(un * 4);
    b->fp16_in = xalloc(un * 2);
    b->bf16_in = xalloc(un * 2);
    b->u16_out = xalloc(un * 2);
    b->i16_in = xalloc(un * 2);
    b->copy_src = xalloc(un * 3);
    b->copy_dst = xalloc(un * 3);
    /* Normally distributed data (Box-Muller on a fixed LCG): ordinary training values, no
     * NaN/Inf or subnormals, so the timing is of the common path. */
    uint64_t s = 12345;
    for (size_t i = 0; i < un; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        double u1 = ((double)(s >> 11) + 1.0) * 0x1.0p-53;
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        double u2 = (double)(s >> 11) * 0x1.0p-53;
        b->f32_in[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    memset(b->copy_src, 0x5A, un * 3);
    ref->cvt.f32_to_fp16(b->f32_in, b->fp16_in, n);
    ref->cvt.f32_to_bf16(b->f32_in, b->bf16_in, n);
    for (size_t i = 0; i < un; i++) {
        float q = b->f32_in[i] * 1024.0f; /* mantissas at e = -10 */
        b->i16_in[i] = (int16_t)(q > 32767.0f ? 32767.0f : q < -32767.0f ? -32767.0f : q);
    }
}

static void buffers_free(buffers *b)
{
    free(b->f32_in);
    free(b->f32_out);
    free(b->fp16_in);
    free(b->bf16_in);
    free(b->u16_out);
    free(b->i16_in);
    free(b->copy_src);
    free(b->copy_dst);
}

static int op_available(const fx_backend *be, op_t op)
{
    switch (op) {
    case OP_F32_TO_FP16: return be->cvt.f32_to_fp16 != NULL;
    case OP_FP16_TO_F32: return be->cvt.fp16_to_f32 != NULL;
    case OP_F32_TO_BF16: return be->cvt.f32_to_bf16 != NULL;
    case OP_BF16_TO_F32: return be->cvt.bf16_to_f32 != NULL;
    case OP_QUANT_F32: return be->cvt.quant_f32 != NULL;
    case OP_DEQUANT: return be->cvt.dequant != NULL;
    case OP_MAXABS_F32: return be->cvt.maxabs_f32 != NULL;
    default: return 0;
    }
}

static volatile float sink_f;
static volatile int64_t sink_i;

/* Elements [lo, lo + n) of the case's arrays through one routine. */
static void op_run_range(const fx_backend *be, op_t op, buffers *b, int64_t lo, int64_t n)
{
    switch (op) {
    case OP_F32_TO_FP16: be->cvt.f32_to_fp16(b->f32_in + lo, b->u16_out + lo, n); break;
    case OP_FP16_TO_F32: be->cvt.fp16_to_f32(b->fp16_in + lo, b->f32_out + lo, n); break;
    case OP_F32_TO_BF16: be->cvt.f32_to_bf16(b->f32_in + lo, b->u16_out + lo, n); break;
    case OP_BF16_TO_F32: be->cvt.bf16_to_f32(b->bf16_in + lo, b->f32_out + lo, n); break;
    case OP_QUANT_F32: {
        fx_rounding r = {FX_ROUND_NEAREST_EVEN, 0, 0};
        fx_qstats st;
        be->cvt.quant_f32(b->f32_in + lo, (int16_t *)b->u16_out + lo, n, -10, &r, lo, &st);
        sink_i = st.saturated;
        break;
    }
    case OP_DEQUANT: be->cvt.dequant(b->i16_in + lo, b->f32_out + lo, n, -10); break;
    case OP_MAXABS_F32: {
        float mx;
        int64_t nf;
        be->cvt.maxabs_f32(b->f32_in + lo, n, &mx, &nf);
        sink_f = mx;
        sink_i = nf;
        break;
    }
    default: break;
    }
}

/* The whole array, in one call (chunk 0) or in calls of `chunk` elements. */
static void op_run(const fx_backend *be, op_t op, buffers *b, int64_t chunk)
{
    if (chunk <= 0) chunk = b->n;
    for (int64_t lo = 0; lo < b->n; lo += chunk)
        op_run_range(be, op, b, lo, b->n - lo < chunk ? b->n - lo : chunk);
}

#define MAX_REPS 51

typedef struct { double wall, cpu; } sample;

/* One timed sample: `iters` calls (of the routine, or of memcpy when be is NULL). */
static sample time_one(const fx_backend *be, op_t op, buffers *b, int64_t chunk,
                       size_t copy_bytes, int iters)
{
    const bench_span span = bench_span_begin(CLOCK_THREAD_CPUTIME_ID);
    for (int it = 0; it < iters; it++) {
        if (be)
            op_run(be, op, b, chunk);
        else
            memcpy(b->copy_dst, b->copy_src, copy_bytes);
    }
    sample s;
    bench_span_end(&span, &s.wall, &s.cpu);
    return s;
}

static void bench_case(const char *label, buffers *b, int64_t chunk, int reps)
{
    const double mib_f32 = (double)b->n * 4 / (1 << 20);
    printf("\n== %s: n = %lld elements (%.3g MiB of fp32), ", label, (long long)b->n, mib_f32);
    if (chunk > 0)
        printf("in calls of %lld elements, single thread ==\n", (long long)chunk);
    else
        printf("one call, single thread ==\n");
    printf("%-8s %-17s %10s %9s %9s %7s   %9s %9s %7s\n", "backend", "routine", "MB/call",
           "GB/s", "memcpy", "ratio", "GB/s cpu", "memcpy", "ratio");
    for (int bi = 0; bi < FX_BACKEND_COUNT; bi++) {
        const fx_backend *be = fx_backend_get(bi);
        if (!be || !be->available || !listed("BENCH_BACKENDS", be->name)) continue;
        for (int op = 0; op < OP_COUNT; op++) {
            if (!op_available(be, (op_t)op)) {
                printf("%-8s %-17s (not set in this backend's table: skipped)\n", be->name,
                       op_info[op].name);
                continue;
            }
            const double bytes = (double)b->n * (op_info[op].in_bytes + op_info[op].out_bytes);
            const size_t copy_bytes = (size_t)(bytes / 2);
            /* Repeat small cases so one sample lasts long enough for the clock (>= 16 MiB). */
            int iters = (int)((16.0 * (1 << 20)) / bytes);
            if (iters < 1) iters = 1;

            double cw[MAX_REPS], cc[MAX_REPS], rw[MAX_REPS], rc[MAX_REPS];
            for (int r = -2; r < reps; r++) { /* two warm-ups, then alternate copy / routine */
                sample sc = time_one(NULL, (op_t)op, b, chunk, copy_bytes, iters);
                sample sr = time_one(be, (op_t)op, b, chunk, copy_bytes, iters);
                if (r < 0) continue;
                cw[r] = sc.wall;
                cc[r] = sc.cpu;
                rw[r] = sr.wall;
                rc[r] = sr.cpu;
            }
            const double total = bytes * iters / 1e9;
            const double gw = total / bench_median(rw, reps), gc = total / bench_median(rc, reps);
            const double mw = total / bench_median(cw, reps), mc = total / bench_median(cc, reps);
            printf("%-8s %-17s %10.3f %9.2f %9.2f %6.0f%%   %9.2f %9.2f %6.0f%%\n", be->name,
                   op_info[op].name, bytes / 1e6, gw, mw, 100.0 * gw / mw, gc, mc,
                   100.0 * gc / mc);
            fflush(stdout);
        }
    }
}

int main(int argc, char **argv)
{
    double large_mib = argc > 1 ? atof(argv[1]) : 64.0;
    if (!(large_mib > 0 && large_mib <= 4096)) {
        fprintf(stderr, "usage: bench_convert [large_MiB (0, 4096]]\n");
        return 2;
    }
    int reps = 9;
    const char *env = getenv("BENCH_REPS");
    if (env && *env) reps = atoi(env);
    if (reps < 1) reps = 1;
    if (reps > MAX_REPS) reps = MAX_REPS;

    printf("bench_convert: threads 1 (the conversion routines are single-threaded); CPU "
           "features: %s\n", flexpoint_cpu_features());
    printf("bytes = read + written; memcpy copies half that many bytes (same traffic); median "
           "of %d repetitions after 2 warm-ups, copy and routine alternating\n", reps);

    const fx_backend *ref = fx_backend_get(FX_BACKEND_SCALAR);
    buffers b;
    buffers_init(&b, (int64_t)(large_mib * (1 << 20) / 4), ref);
    bench_case("large", &b, 0, reps);
    /* The same array in the 64 Ki-element calls the library's parallel drivers make: each call
     * is below the streaming threshold, so this shows what the dispatcher path gets. */
    bench_case("large, chunked", &b, (int64_t)1 << 16, reps);
    buffers_free(&b);

    buffers_init(&b, (int64_t)1 << 16, ref);
    bench_case("l2", &b, 0, reps);
    buffers_free(&b);
    return 0;
}
