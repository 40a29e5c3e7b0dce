/* Which bf16 x bf16 GEMM route an AVX-512 CPU runs: a table per microarchitecture, BLIS-style
 * (one entry per vendor, family and model, each with the measurement that justified it).
 *
 * The two routes (src/core/backend.h):
 *  - dpbf16: vdpbf16ps on bf16 pairs (src/bf16/bf16_gemm_avx512bf16.c), 32 multiply-adds per
 *    instruction, twice an fp32 FMA's 16 where both retire at the same rate;
 *  - widen: bf16 -> fp32 by a 16-bit shift while packing, then the fp32 FMA GEMM
 *    (src/fp32/f32_gemm.c), capped at the fp32 limit.
 * Which is faster is a property of the core, not of the CPUID flag: on Intel's Golden Cove /
 * Raptor Cove server cores vdpbf16ps retires at half the FMA rate, so it only ties with the
 * FMA route at best and loses to it once packing costs are counted.
 *
 * This file has no instructions of its own (compiled for the baseline), so the table can be
 * read, and tested from recorded features, on any CPU. */
#include "../core/backend.h"

#include <string.h>

typedef struct {
    const char *vendor; /* cpuid leaf 0 */
    int family;         /* display family */
    int model;          /* display model; -1: every model of the family */
    int route;
    const char *why;    /* the measurement behind the entry */
} route_entry;

static const route_entry table[] = {
    /* Emerald Rapids (Xeon 5th gen): bench_gemm 1 thread, 1024^3, 2026-11-24: vdpbf16ps
     * 32.3 G instr/s against 64.7 G FMA/s measured by bench_gemm's limit loops; bf16 GEMM on
     * dpbf16 0.55x oneDNN sgemm, on widen 0.9x or more (docs/performance.md) */
    {"GenuineIntel", 6, 207, FX_BF16_GEMM_WIDEN,
     "Emerald Rapids: vdpbf16ps retires at half the FMA rate (bench_gemm, 2026-11-24)"},
    /* Zen 4 (family 25 = 0x19): vdpbf16ps and FMA at one per cycle each (bench_gemm's limit
     * loops), so the pair GEMM runs near twice the fp32 limit (docs/performance.md, Zen 4) */
    {"AuthenticAMD", 25, -1, FX_BF16_GEMM_DPBF16,
     "Zen 4: vdpbf16ps at the FMA rate, 32 products per instruction (bench_gemm)"},
    /* Zen 5 (family 26 = 0x1a): bench_gemm 1 thread, 2026-11-25: vdpbf16ps pairs 490.5
     * GFLOP/s against an FMA limit of 262.6, and bf16 GEMM on dpbf16 1.66x oneDNN sgemm at
     * 1024^3 and 2048^3 (docs/performance.md, Zen 5) */
    {"AuthenticAMD", 26, -1, FX_BF16_GEMM_DPBF16,
     "Zen 5: vdpbf16ps at the FMA rate, 32 products per instruction (bench_gemm, 2026-11-25)"},
};

int fx_bf16_gemm_route_preferred(const fx_cpu_features *cpu, const char **why)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const route_entry *e = &table[i];
        if (strcmp(cpu->vendor, e->vendor) == 0 && cpu->family == e->family &&
            (e->model < 0 || cpu->model == e->model)) {
            if (why) *why = e->why;
            return e->route;
        }
    }
    /* not in the table: the backend measures (src/core/kernel_choice.h) */
    if (why) *why = "not in the table";
    return -1;
}

static const char *const route_names[FX_BF16_GEMM_ROUTES] = {"widen", "dpbf16", "amx"};

const char *fx_bf16_gemm_route_name(int route)
{
    return route >= 0 && route < FX_BF16_GEMM_ROUTES ? route_names[route] : NULL;
}

int fx_bf16_gemm_route_parse(const char *name)
{
    for (int i = 0; name && i < FX_BF16_GEMM_ROUTES; i++)
        if (strcmp(name, route_names[i]) == 0) return i;
    return -1;
}
