/* Kernels chosen by measurement (kernel_choice.c): where a CPU can run more than one route for
 * an op and format and the per-microarchitecture table (src/bf16/bf16_route.c) has no entry for
 * it, the backend measures the instruction rates the routes are built on, once per CPU model,
 * and keeps the answer in the user's cache directory.
 *
 * Why measure instead of trusting the CPUID flag: on Intel's Sapphire/Emerald Rapids cores
 * vdpbf16ps retires at half the rate of a 512-bit FMA, so its route loses to the widening one
 * although the flag is there; and hypervisors often report a model number that is not the
 * core's (a Xeon with AMX and AVX512_FP16 seen reporting family 6 model 167, a client core's
 * model), so no table keyed on the model can know every machine. */
#ifndef FX_CORE_KERNEL_CHOICE_H
#define FX_CORE_KERNEL_CHOICE_H

#include <stddef.h>

struct fx_cpu_features;

/* The instruction loops of limits.c that a choice can measure (same numbering as its loops). */
enum {
    FX_INSTR_FMA256 = 0,
    FX_INSTR_FMA512 = 1,
    FX_INSTR_MADD256 = 2,
    FX_INSTR_MADD512 = 3,
    FX_INSTR_DPWSSD512 = 4,
    FX_INSTR_DPBF16_512 = 5
};
/* Instructions per second of the calling thread's CPU time: the best of reps runs of iters
 * iterations of twelve independent instructions. The caller checks that the CPU has the
 * instruction. 0 for an unknown instr, iters < 1 or reps < 1, or on a non-x86-64 build. */
double fx_instr_rate(int instr, long iters, int reps);

/* The measured pair route must beat the FMA route's ceiling by this factor to be chosen: the
 * pair route packs pairs and its micro-kernel has more work around each instruction. Recorded
 * limits (docs/performance.md, "Machines"): Zen 4 and Zen 5 measure bf16 pairs at 1.9-2.0x
 * the FMA GFLOP/s and their pair route runs 1.66x oneDNN sgemm; Emerald Rapids and the Xeon
 * reporting model 167 measure 0.45-0.51x, where the widening route is 1.4-1.7x the pair one. */
#define FX_BF16_PAIR_ROUTE_MARGIN 1.25

/* The AMX route must beat the FMA route's ceiling by this factor: it packs both operands into
 * tiles on every call. Measured on the Xeon reporting model 167: tdpbf16ps at about 3,000
 * GFLOP/s of tile products against 232 GFLOP/s of 512-bit FMA (docs/performance.md). */
#define FX_BF16_AMX_ROUTE_MARGIN 2.0

/* The bf16 GEMM route for measured limits (GFLOP/s, two operations per product; amx 0 where
 * the process cannot run AMX): amx when amx >= FX_BF16_AMX_ROUTE_MARGIN * fp32_fma, else
 * dpbf16 when bf16_pairs >= FX_BF16_PAIR_ROUTE_MARGIN * fp32_fma, else widen; a non-positive
 * or non-finite reading never wins (widen when the FMA reading is one). */
int fx_bf16_route_from_rates(double fp32_fma, double bf16_pairs, double amx);

/* The bf16 GEMM route of a CPU with AVX-512 and AVX512_BF16 that the table does not list, or
 * that can run AMX (the table weighs dpbf16 against widen only): read
 * from the cache file for this CPU (vendor, family, model and feature string must match, the
 * route must parse, the rates must be positive and finite: anything else counts as missing),
 * else measured (about 20 ms; AMX's tdpbf16ps too where fx_amx_bf16_usable) and written to the cache (best effort: an unwritable directory
 * only costs the measurement again next time). why (n bytes) gets how it was chosen, with the
 * rates. Never fails. The cache directory: FLEXPOINT_CACHE_DIR, else $XDG_CACHE_HOME/flexpoint,
 * else $HOME/.cache/flexpoint; FLEXPOINT_KERNEL_CACHE=off neither reads nor writes it. */
int fx_bf16_route_measured(const struct fx_cpu_features *cpu, const char *features, char *why,
                           size_t n);

/* The cache alone (for the tests): read this CPU's file (0 and the route and rates when it is
 * whole and agrees, -1 otherwise), or write one (0 on success). */
int fx_bf16_route_cache_read(const struct fx_cpu_features *cpu, const char *features, int *route,
                             double *fp32_fma, double *bf16_pairs, double *amx);
int fx_bf16_route_cache_write(const struct fx_cpu_features *cpu, const char *features, int route,
                              double fp32_fma, double bf16_pairs, double amx);

/* The int16 GEMM on a CPU with AMX-INT8 that this process may use: the AMX kernel
 * (src/flex/gemm_i16_amx.c) or the vpdpwssd register tiles (src/flex/gemm_i16.c). The AMX
 * kernel must see its byte-product ceiling, divided by the four byte products one int16
 * product takes, at this factor above vpdpwssd's int16 pair-product ceiling: on the Xeon
 * reporting model 167 it reaches 15-25 % of that ceiling where the register tiles reach 35-40 %
 * of theirs (docs/performance.md), so it wins from about 2.5x. */
#define FX_I16_AMX_ROUTE_MARGIN 3.0

/* 1 (AMX) when amx_int8 / 4 >= FX_I16_AMX_ROUTE_MARGIN * int16_pairs (GOP/s, two operations
 * per product); a non-positive or non-finite reading never wins */
int fx_i16_amx_from_rates(double int16_pairs, double amx_int8);

/* The int16 GEMM choice (1: AMX) of a CPU with usable AMX-INT8: read from its own cache file
 * (kernels-i16-<vendor>-<family>-<model>.txt, same directory and rules as the bf16 one), else
 * measured (vpdpwssd and tdpbssd, about 10 ms) and written there. why (n bytes) gets how it was
 * chosen, with the rates. Never fails. */
int fx_i16_amx_measured(const struct fx_cpu_features *cpu, const char *features, char *why,
                        size_t n);
int fx_i16_amx_cache_read(const struct fx_cpu_features *cpu, const char *features, int *amx_on,
                          double *int16_pairs, double *amx_int8);
int fx_i16_amx_cache_write(const struct fx_cpu_features *cpu, const char *features, int amx_on,
                           double int16_pairs, double amx_int8);
int fx_i16_kernel_cache_path(const struct fx_cpu_features *cpu, char *path, size_t n);

/* The cache file's path for a CPU (n bytes; "" when no directory can be named): exposed for the
 * tests and flexpoint-info. Returns 0 on success, -1 when there is no cache. */
int fx_kernel_cache_path(const struct fx_cpu_features *cpu, char *path, size_t n);

#endif
