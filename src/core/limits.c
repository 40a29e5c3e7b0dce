/* Measured instruction limits of one thread (flexpoint_instruction_limits): the rate at which
 * this CPU retires the multiply instructions the GEMMs are built on, so that a GEMM's speed can
 * be stated as a share of what the hardware can do (bench/bench_gemm, flexpoint-info,
 * fx.kernel_info()).
 *
 * Each limit is a loop of twelve independent accumulating instructions per iteration (more than
 * latency x ports on current x86 cores, so the loop is bound by throughput, not latency), in
 * one inline-assembly block so the compiler can neither drop nor reorder the work. The
 * registers start at zero, so no floating-point operand is ever subnormal (which would slow
 * some cores down). The assembler accepts every instruction whatever the compiler's ISA flags,
 * so this file is compiled like the generic ones; each loop runs only on a CPU whose cpuid
 * reports its instruction set. Registers 0-13 are used (declared clobbered), so code compiled
 * without AVX-512 has nothing live in the registers it touches; vzeroupper ends each loop, as
 * the generic code around it may use SSE.
 *
 * Measured once per process, at the first call: 4 M iterations, best of 5 per instruction,
 * about 30-60 ms each on current cores. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, CLOCK_THREAD_CPUTIME_ID */
#include "backend.h"
#include "kernel_choice.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FX_LIMITS_X86 1
#else
#define FX_LIMITS_X86 0
#endif

/* the loops, in the order of kernel_choice.h's FX_INSTR_* */
typedef enum {
    LIM_FMA256,
    LIM_FMA512,
    LIM_MADD256,
    LIM_MADD512,
    LIM_DPW512,
    LIM_DPB512,
    LIM_MADD_ADD256 /* (reported only: no kernel choice reads it) */
} fx_lim;
_Static_assert((int)LIM_FMA512 == FX_INSTR_FMA512 && (int)LIM_DPB512 == FX_INSTR_DPBF16_512,
               "kernel_choice.h numbers the loops as fx_lim does");

/* The calling thread's CPU time: time spent descheduled on a busy machine does not count
 * (a core's other hardware thread, if busy, still slows the loop down). */
static double fx_lim_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if FX_LIMITS_X86
#define FX_R12(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11)
#define FX_ZERO(i) "vpxor %%xmm" #i ", %%xmm" #i ", %%xmm" #i "\n\t"
#define FX_FMA_Y(i) "vfmadd231ps %%ymm12, %%ymm13, %%ymm" #i "\n\t"
#define FX_FMA_Z(i) "vfmadd231ps %%zmm12, %%zmm13, %%zmm" #i "\n\t"
#define FX_MADD_Y(i) "vpmaddwd %%ymm12, %%ymm13, %%ymm" #i "\n\t"
#define FX_MADD_Z(i) "vpmaddwd %%zmm12, %%zmm13, %%zmm" #i "\n\t"
#define FX_DPW_Z(i) "vpdpwssd %%zmm12, %%zmm13, %%zmm" #i "\n\t"
#define FX_DPB_Z(i) "vdpbf16ps %%zmm12, %%zmm13, %%zmm" #i "\n\t"
/* what the AVX2 GEMM's fast kernel issues per pair product: the multiply and its accumulate */
#define FX_MADD_ADD_Y(i)                                                                          \
    "vpmaddwd %%ymm12, %%ymm13, %%ymm14\n\t"                                                       \
    "vpaddd %%ymm14, %%ymm" #i ", %%ymm" #i "\n\t"
/* zero registers 0-13, then n iterations of twelve instructions (or pairs; 14 is scratch) */
#define FX_LOOP(op, n)                                                                          \
    __asm__ volatile(FX_R12(FX_ZERO) FX_ZERO(12) FX_ZERO(13) "1:\n\t" FX_R12(op)                 \
                     "dec %0\n\t"                                                               \
                     "jnz 1b\n\t"                                                               \
                     "vzeroupper\n\t"                                                           \
                     : "+r"(n)                                                                  \
                     :                                                                          \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",  \
                       "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "cc", "memory")
#endif

/* Instructions per second of one thread (per second of its CPU time): the best of a few
 * repetitions, so that a moment of contention lowers no more than one of them. Runs no cpuid
 * check of its own (the caller's job), so the kernel choice can call it while the backend
 * tables are being built. */
static double fx_lim_rate_n(fx_lim k, long iters, int reps)
{
#if FX_LIMITS_X86
    double best = 0;
    for (int rep = 0; rep < reps; rep++) {
        long n = iters;
        const double t0 = fx_lim_now();
        switch (k) {
        case LIM_FMA256: FX_LOOP(FX_FMA_Y, n); break;
        case LIM_FMA512: FX_LOOP(FX_FMA_Z, n); break;
        case LIM_MADD256: FX_LOOP(FX_MADD_Y, n); break;
        case LIM_MADD512: FX_LOOP(FX_MADD_Z, n); break;
        case LIM_DPW512: FX_LOOP(FX_DPW_Z, n); break;
        case LIM_DPB512: FX_LOOP(FX_DPB_Z, n); break;
        case LIM_MADD_ADD256: FX_LOOP(FX_MADD_ADD_Y, n); break;
        }
        const double dt = fx_lim_now() - t0;
        const double r = dt > 0 ? 12.0 * (double)iters / dt : 0;
        best = r > best ? r : best;
    }
    return best;
#else
    (void)k;
    (void)iters;
    (void)reps;
    return 0;
#endif
}

static double fx_lim_rate(fx_lim k) { return fx_lim_rate_n(k, 4000000, 5); }

double fx_instr_rate(int instr, long iters, int reps)
{
    if (instr < LIM_FMA256 || instr > LIM_DPB512 || iters < 1 || reps < 1) return 0;
    return fx_lim_rate_n((fx_lim)instr, iters, reps);
}

static double fx_lim_fma, fx_lim_i16, fx_lim_bf16;
static char fx_lim_report[400];
static pthread_once_t fx_lim_once = PTHREAD_ONCE_INIT;

static void fx_limits_measure(void)
{
    const fx_cpu_features *c = fx_cpu();
    const int a512 = c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq;
    const char *fma = "none", *i16 = "none", *bf16 = "none";
    double with_add = 0; /* vpmaddwd + vpaddd pairs (AVX2), GOP/s */
    if (!FX_LIMITS_X86) {
        snprintf(fx_lim_report, sizeof fx_lim_report, "not measured: not an x86-64 build");
        return;
    }
    /* per instruction: lanes x 2 operations (a multiply and an add per product) */
    if (a512) {
        fx_lim_fma = fx_lim_rate(LIM_FMA512) * 32e-9;
        fma = "vfmadd231ps zmm";
        if (c->avx512vnni) {
            fx_lim_i16 = fx_lim_rate(LIM_DPW512) * 64e-9;
            i16 = "vpdpwssd zmm";
        } else {
            fx_lim_i16 = fx_lim_rate(LIM_MADD512) * 64e-9;
            i16 = "vpmaddwd zmm";
        }
        if (c->avx512bf16) {
            fx_lim_bf16 = fx_lim_rate(LIM_DPB512) * 64e-9;
            bf16 = "vdpbf16ps zmm";
        }
    } else if (c->avx2 && c->fma) {
        fx_lim_fma = fx_lim_rate(LIM_FMA256) * 16e-9;
        fma = "vfmadd231ps ymm";
        /* the limit is the multiplies' alone, an upper bound; the AVX2 GEMM adds each
         * vpmaddwd result with a vpaddd, and the rate of the two together is reported beside
         * it (on a Zen 3 the adds share the multiplies' ports: about three quarters) */
        fx_lim_i16 = fx_lim_rate(LIM_MADD256) * 32e-9;
        i16 = "vpmaddwd ymm";
        with_add = fx_lim_rate(LIM_MADD_ADD256) * 32e-9;
    }
    char add_note[96] = "";
    if (with_add > 0)
        snprintf(add_note, sizeof add_note, " (%.1f with the vpaddd that accumulates each)",
                 with_add);
    snprintf(fx_lim_report, sizeof fx_lim_report,
             "fp32 FMA (%s) %.1f GFLOP/s, int16 pair products (%s) %.1f GOP/s%s, bf16 pair "
             "products (%s) %.1f GFLOP/s; one thread",
             fma, fx_lim_fma, i16, fx_lim_i16, add_note, bf16, fx_lim_bf16);
}

int flexpoint_instruction_limits(double *fp32_fma, double *i16_pairs, double *bf16_pairs)
{
    pthread_once(&fx_lim_once, fx_limits_measure);
    if (fp32_fma) *fp32_fma = fx_lim_fma;
    if (i16_pairs) *i16_pairs = fx_lim_i16;
    if (bf16_pairs) *bf16_pairs = fx_lim_bf16;
    return FX_LIMITS_X86 ? FX_OK : FX_FAIL(FX_EUNSUPPORTED, "instruction limits are measured on "
                                                           "x86-64 only");
}

const char *flexpoint_instruction_limits_report(void)
{
    pthread_once(&fx_lim_once, fx_limits_measure);
    return fx_lim_report;
}
