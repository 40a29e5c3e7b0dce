/* Run-time CPU feature detection: cpuid for the instruction sets, xgetbv for whether the OS
 * saves the AVX / AVX-512 register state (without it the instructions fault). */
#include "backend.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t fx_xgetbv0(void)
{
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

void fx_detect_cpu(fx_cpu_features *f)
{
    memset(f, 0, sizeof *f);
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d)) {
        memcpy(f->vendor, &b, 4);
        memcpy(f->vendor + 4, &d, 4);
        memcpy(f->vendor + 8, &c, 4);
        f->vendor[12] = '\0';
    }
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    /* display family and model: the extended family is added for family 15, the extended
     * model prepended for families 6 and 15 (Intel SDM vol. 2 CPUID; AMD APM vol. 3) */
    const int base_family = (int)((a >> 8) & 0xF), base_model = (int)((a >> 4) & 0xF);
    f->family = base_family == 15 ? base_family + (int)((a >> 20) & 0xFF) : base_family;
    f->model = base_family == 6 || base_family == 15 ? (int)((a >> 12) & 0xF0) + base_model
                                                     : base_model;
    f->sse2 = (d >> 26) & 1;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;
    uint64_t xcr0 = osxsave ? fx_xgetbv0() : 0;
    int ymm_os = (xcr0 & 0x6) == 0x6;         /* SSE + AVX state */
    int zmm_os = (xcr0 & 0xe6) == 0xe6;       /* + opmask, ZMM_Hi256, Hi16_ZMM */
    f->avx = avx && ymm_os;
    if (!f->avx) { f->fma = f->f16c = 0; return; }
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    f->avx2 = (b >> 5) & 1;
    if (zmm_os) {
        f->avx512f = (b >> 16) & 1;
        f->avx512dq = (b >> 17) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        f->avx512vnni = (c >> 11) & 1;
        unsigned a1, b1, c1, d1;
        __cpuid_count(7, 1, a1, b1, c1, d1);
        f->avx512bf16 = (a1 >> 5) & 1;
        (void)b1; (void)c1; (void)d1;
        /* AMX-BF16 (edx bit 22) and AMX-TILE (bit 24), and the OS's XTILECFG and XTILEDATA
         * state (XCR0 bits 17, 18); Linux still asks each process to request the tile data
         * (src/bf16/bf16_gemm_amx.c) */
        f->amx_bf16 = ((d >> 22) & 1) && ((d >> 24) & 1) && (xcr0 & 0x60000) == 0x60000;
        /* AMX-INT8 (edx bit 25) on the same tiles (src/flex/gemm_i16_amx.c), whose packing
         * also uses AVX512_VBMI (ecx bit 1; every AMX CPU so far has it) */
        f->amx_int8 = ((d >> 25) & 1) && ((d >> 24) & 1) && (xcr0 & 0x60000) == 0x60000 &&
                      ((c >> 1) & 1);
    }
}
#else
void fx_detect_cpu(fx_cpu_features *f) { memset(f, 0, sizeof *f); }
#endif

void fx_cpu_feature_string(const fx_cpu_features *f, char *buf, size_t n)
{
    buf[0] = '\0';
    size_t used = 0;
#define FX_ADD(flag, name)                                                                     \
    if (f->flag && used + sizeof(name) + 1 < n) {                                              \
        used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? " " : "", name);        \
    }
    FX_ADD(sse2, "sse2");
    FX_ADD(avx, "avx");
    FX_ADD(avx2, "avx2");
    FX_ADD(fma, "fma");
    FX_ADD(f16c, "f16c");
    FX_ADD(avx512f, "avx512f");
    FX_ADD(avx512bw, "avx512bw");
    FX_ADD(avx512vl, "avx512vl");
    FX_ADD(avx512dq, "avx512dq");
    FX_ADD(avx512vnni, "avx512vnni");
    FX_ADD(avx512bf16, "avx512bf16");
    FX_ADD(amx_bf16, "amx_bf16");
    FX_ADD(amx_int8, "amx_int8");
#undef FX_ADD
}

void fx_cpu_model_format(const fx_cpu_features *cpu, char *out, size_t n)
{
    snprintf(out, n, "%s family %d model %d", cpu->vendor[0] ? cpu->vendor : "unknown",
             cpu->family, cpu->model);
}
