/* Backend registry: builds the scalar, avx2 and avx512 tables once (BLIS-style: each level
 * starts as a copy of the level below and overwrites what it does faster), detects the CPU,
 * and selects the active backend (best available, or FLEXPOINT_CPU). */
#include "backend.h"
#include "../flex/gemm_i16.h"
#include "kernel_choice.h"
#include "../bf16/bf16_gemm.h" /* fx_amx_bf16_usable */
#include "../flex/flex_kernels.h" /* fx_amx_int8_usable */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

void fx_detect_cpu(fx_cpu_features *f);
void fx_cpu_feature_string(const fx_cpu_features *f, char *buf, size_t n);

static fx_backend fx_backends[FX_BACKEND_COUNT];
static fx_cpu_features fx_cpu_info;
static char fx_cpu_string[256];
static int fx_active = FX_BACKEND_SCALAR; /* read and written with __atomic builtins */
static int fx_threads = 0;                /* 0: default */
static pthread_once_t fx_once = PTHREAD_ONCE_INIT;

static const char *const fx_backend_names[FX_BACKEND_COUNT] = {"scalar", "avx2", "avx512"};

/* The bf16 x bf16 MATMUL route of the AVX-512 level in use (backend.h; its entries:
 * fx_cpu_avx512_bf16_gemm_route) and what chose it. */
static int fx_bf16_route = FX_BF16_GEMM_WIDEN;
static char fx_bf16_route_why[400] = "the CPU: no AVX512_BF16, widen is the only route";
/* what chose the int16 GEMM's kernel (fx_gemm_i16_force_kernel) */
static char fx_i16_kernel_why[64] = "default";
/* what chose AUTO's AMX-or-tiles answer where the AVX-512 level has the AMX kernel */
static char fx_i16_amx_why[400] = "";
static char fx_cpu_model_string[64];
static char fx_kernel_report_string[2048];

static int fx_backend_runnable(int i, const fx_cpu_features *c)
{
    switch (i) {
    case FX_BACKEND_SCALAR: return 1;
    case FX_BACKEND_AVX2: return c->avx2 && c->fma && c->f16c;
    case FX_BACKEND_AVX512:
        return c->avx2 && c->fma && c->f16c && c->avx512f && c->avx512bw && c->avx512vl &&
               c->avx512dq;
    default: return 0;
    }
}

/* The wrap kernel of the int16 GEMM exists on the AVX-512 level with AVX512_VNNI only. */
static int fx_i16_wrap_runnable(const fx_cpu_features *c)
{
    return fx_backend_runnable(FX_BACKEND_AVX512, c) && c->avx512vnni;
}

/* The AMX kernel: where the AVX-512 level installed it (usable AMX-INT8). */
static int fx_i16_amx_runnable(void)
{
    return fx_backend_runnable(FX_BACKEND_AVX512, &fx_cpu_info) &&
           fx_backends[FX_BACKEND_AVX512].gemm.i16_amx;
}

/* A kernel this CPU can run (wrap and amx are not everywhere); why names what is missing. */
static int fx_i16_kernel_runnable(int k, const char **why)
{
    if (k == FX_GEMM_I16_KERNEL_WRAP && !fx_i16_wrap_runnable(&fx_cpu_info)) {
        *why = "AVX-512 with AVX512_VNNI";
        return 0;
    }
    if (k == FX_GEMM_I16_KERNEL_AMX && !fx_i16_amx_runnable()) {
        *why = "AVX-512 with AVX512_VNNI and AMX-INT8 the OS lets this process use";
        return 0;
    }
    return 1;
}

static int fx_backend_index(const char *name)
{
    for (int i = 0; i < FX_BACKEND_COUNT; i++)
        if (strcmp(name, fx_backend_names[i]) == 0) return i;
    return -1;
}

static void fx_backends_build(void)
{
    fx_detect_cpu(&fx_cpu_info);
    fx_cpu_feature_string(&fx_cpu_info, fx_cpu_string, sizeof fx_cpu_string);

    /* One installer per level (src/cpu/<level>.c). They only assign function pointers and are
     * compiled without ISA flags, but what they install may run only on a CPU that has the
     * level's instruction set: a level the CPU cannot run stays a copy of the one below it,
     * marked unavailable. */
    fx_backend *s = &fx_backends[FX_BACKEND_SCALAR];
    memset(s, 0, sizeof *s);
    fx_cpu_install_scalar(s, &fx_cpu_info);

    fx_backend *a2 = &fx_backends[FX_BACKEND_AVX2];
    *a2 = *s;
    if (fx_backend_runnable(FX_BACKEND_AVX2, &fx_cpu_info)) fx_cpu_install_avx2(a2, &fx_cpu_info);

    fx_backend *a5 = &fx_backends[FX_BACKEND_AVX512];
    *a5 = *a2;
    if (fx_backend_runnable(FX_BACKEND_AVX512, &fx_cpu_info))
        fx_cpu_install_avx512(a5, &fx_cpu_info);

    /* bf16 x bf16 MATMUL on AVX-512: fx_cpu_install_avx512 installed the table's route
     * (src/bf16/bf16_route.c) where the CPU has AVX512_BF16; record it and the table's reason,
     * then FLEXPOINT_KERNEL_BF16_GEMM may force the other one */
    const char *kenv = getenv("FLEXPOINT_KERNEL_BF16_GEMM");
    if (fx_backend_runnable(FX_BACKEND_AVX512, &fx_cpu_info) && fx_cpu_info.avx512bf16) {
        const char *why = "";
        /* the table weighs dpbf16 against widen; where AMX runs, the measurement decides */
        int route = fx_amx_bf16_usable(&fx_cpu_info)
                        ? -1
                        : fx_bf16_gemm_route_preferred(&fx_cpu_info, &why);
        if (route >= 0)
            snprintf(fx_bf16_route_why, sizeof fx_bf16_route_why, "table: %s", why);
        else if (fx_bf16_gemm_route_parse(kenv) < 0) /* a forced route (below) needs none */
            route = fx_bf16_route_measured(&fx_cpu_info, fx_cpu_string, fx_bf16_route_why,
                                           sizeof fx_bf16_route_why);
        if (route >= 0) fx_bf16_gemm_route_set(route);
    }
    if (kenv && *kenv) {
        const int r = fx_bf16_gemm_route_parse(kenv);
        if (r < 0)
            fprintf(stderr, "flexpoint: FLEXPOINT_KERNEL_BF16_GEMM=%.64s is not a bf16 GEMM "
                            "kernel (widen, dpbf16, amx); using %s\n",
                    kenv, fx_bf16_gemm_route_name(fx_bf16_route));
        else if (fx_bf16_gemm_route_set(r) != FX_OK)
            fprintf(stderr, "flexpoint: FLEXPOINT_KERNEL_BF16_GEMM=%s needs AVX-512 with "
                            "AVX512_BF16%s, which this CPU lacks; using %s\n",
                    kenv, r == FX_BF16_GEMM_AMX ? " and AMX-BF16" : "",
                    fx_bf16_gemm_route_name(fx_bf16_route));
        else
            snprintf(fx_bf16_route_why, sizeof fx_bf16_route_why, "FLEXPOINT_KERNEL_BF16_GEMM");
    }
    /* the int16 GEMM's kernel (both integer formats share it): auto unless
     * FLEXPOINT_KERNEL_I16_GEMM forces one; refused values leave auto and say why, as the bf16
     * variable does */
    /* where the AVX-512 level has the AMX kernel, auto takes it or the register tiles by
     * measurement (src/core/kernel_choice.h) */
    if (fx_i16_amx_runnable())
        fx_gemm_i16_set_amx_auto(fx_i16_amx_measured(&fx_cpu_info, fx_cpu_string, fx_i16_amx_why,
                                                     sizeof fx_i16_amx_why));
    const char *ienv = getenv("FLEXPOINT_KERNEL_I16_GEMM");
    if (ienv && *ienv) {
        const int k = fx_gemm_i16_kernel_parse(ienv);
        const char *needs = "";
        if (k < 0)
            fprintf(stderr, "flexpoint: FLEXPOINT_KERNEL_I16_GEMM=%.64s is not an int16 GEMM "
                            "kernel (auto, split, wrap, fast, amx); using auto\n", ienv);
        else if (!fx_i16_kernel_runnable(k, &needs))
            fprintf(stderr, "flexpoint: FLEXPOINT_KERNEL_I16_GEMM=%s needs %s, which this CPU "
                            "lacks; using auto\n", ienv, needs);
        else {
            fx_gemm_i16_force_kernel(k);
            snprintf(fx_i16_kernel_why, sizeof fx_i16_kernel_why, "FLEXPOINT_KERNEL_I16_GEMM");
        }
    }
    fx_cpu_model_format(&fx_cpu_info, fx_cpu_model_string, sizeof fx_cpu_model_string);

    int best = FX_BACKEND_SCALAR;
    for (int i = 0; i < FX_BACKEND_COUNT; i++) {
        fx_backends[i].name = fx_backend_names[i];
        fx_backends[i].available = fx_backend_runnable(i, &fx_cpu_info);
        if (fx_backends[i].available) best = i;
    }
    const char *env = getenv("FLEXPOINT_CPU");
    if (env && *env) {
        int i = fx_backend_index(env);
        if (i < 0)
            fprintf(stderr, "flexpoint: FLEXPOINT_CPU=%s is not a backend (scalar, avx2, "
                            "avx512); using %s\n", env, fx_backend_names[best]);
        else if (!fx_backends[i].available)
            fprintf(stderr, "flexpoint: FLEXPOINT_CPU=%s is not supported by this CPU; using "
                            "%s\n", env, fx_backend_names[best]);
        else
            best = i;
    }
    __atomic_store_n(&fx_active, best, __ATOMIC_RELEASE);
}

static void fx_init(void) { pthread_once(&fx_once, fx_backends_build); }

const fx_backend *fx_backend_get(int index)
{
    fx_init();
    if (index < 0 || index >= FX_BACKEND_COUNT) return NULL;
    return &fx_backends[index];
}

const fx_backend *fx_backend_active(void)
{
    fx_init();
    return &fx_backends[__atomic_load_n(&fx_active, __ATOMIC_ACQUIRE)];
}

const fx_cpu_features *fx_cpu(void)
{
    fx_init();
    return &fx_cpu_info;
}

int flexpoint_backend_count(void) { return FX_BACKEND_COUNT; }

const char *flexpoint_backend_name(int i)
{
    return (i >= 0 && i < FX_BACKEND_COUNT) ? fx_backend_names[i] : NULL;
}

int flexpoint_backend_available(int i)
{
    fx_init();
    return (i >= 0 && i < FX_BACKEND_COUNT) ? fx_backends[i].available : 0;
}

int flexpoint_set_backend(const char *name)
{
    if (!name) return FX_FAIL(FX_EINVAL, "name is NULL");
    fx_init();
    int i = fx_backend_index(name);
    if (i < 0)
        return FX_FAIL(FX_ENAME, "unknown backend '%.64s' (known: scalar, avx2, avx512)", name);
    if (!fx_backends[i].available)
        return FX_FAIL(FX_EUNSUPPORTED, "backend '%s' needs CPU features this machine lacks "
                                        "(detected: %s)", name, fx_cpu_string);
    __atomic_store_n(&fx_active, i, __ATOMIC_RELEASE);
    return FX_OK;
}

const char *flexpoint_backend(void) { return fx_backend_active()->name; }

const char *flexpoint_cpu_features(void)
{
    fx_init();
    return fx_cpu_string;
}

int flexpoint_set_num_threads(int n)
{
    int prev = flexpoint_num_threads();
    __atomic_store_n(&fx_threads, n > 0 ? n : 0, __ATOMIC_RELEASE);
    return prev;
}

int flexpoint_num_threads(void)
{
    int n = __atomic_load_n(&fx_threads, __ATOMIC_ACQUIRE);
    if (n > 0) return n;
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* ---- kernels chosen per op and format ------------------------------------------------------ */

/* Called while the tables are built (under pthread_once) and by flexpoint_set_kernel. */
int fx_bf16_gemm_route_set(int route)
{
    fx_backend *a5 = &fx_backends[FX_BACKEND_AVX512];
    if (route == FX_BF16_GEMM_DPBF16) {
        if (!fx_backend_runnable(FX_BACKEND_AVX512, &fx_cpu_info) || !fx_cpu_info.avx512bf16)
            return FX_EUNSUPPORTED;
        fx_cpu_avx512_bf16_gemm_route(a5, route);
    } else if (route == FX_BF16_GEMM_AMX) {
        if (!fx_backend_runnable(FX_BACKEND_AVX512, &fx_cpu_info) || !fx_cpu_info.avx512bf16 ||
            !fx_amx_bf16_usable(&fx_cpu_info))
            return FX_EUNSUPPORTED;
        fx_cpu_avx512_bf16_gemm_route(a5, route);
    } else if (route == FX_BF16_GEMM_WIDEN) {
        /* the only route where the level cannot run or lacks AVX512_BF16: nothing to change */
        if (fx_backend_runnable(FX_BACKEND_AVX512, &fx_cpu_info) && fx_cpu_info.avx512bf16)
            fx_cpu_avx512_bf16_gemm_route(a5, route);
    } else {
        return FX_EINVAL;
    }
    __atomic_store_n(&fx_bf16_route, route, __ATOMIC_RELEASE);
    return FX_OK;
}

int fx_bf16_gemm_route(void)
{
    fx_init();
    return __atomic_load_n(&fx_bf16_route, __ATOMIC_ACQUIRE);
}

const char *flexpoint_cpu_model(void)
{
    fx_init();
    return fx_cpu_model_string;
}

/* MATMUL kernel names per backend level and format (convolutions run on the same GEMMs). The
 * int16 GEMM's name carries a forced kernel ("avx2-i16-split"); under auto it is the level's
 * plain name ("avx2-i16"), whose kernel choice per tile flexpoint_kernel_report spells out. */
static const char *fx_matmul_kernel(int backend, fmt_t fmt)
{
    static const char *const i16[2][FX_GEMM_I16_KERNELS] = {
        {"avx2-i16", "avx2-i16-split", "avx2-i16-wrap", "avx2-i16-fast", "avx2-i16"},
        {"avx512-i16", "avx512-i16-split", "avx512-i16-wrap", "avx512-i16-fast",
         "avx512-i16-amx"}};
    const int integer = fmt == FMT_FLEX16_5 || fmt == FMT_DFP16;
    switch (backend) {
    case FX_BACKEND_SCALAR: return "scalar";
    case FX_BACKEND_AVX2:
        if (integer) {
            /* this level has no wrap kernel: forced wrap runs split here */
            const int k = fx_gemm_i16_forced_kernel();
            return i16[0][k == FX_GEMM_I16_KERNEL_WRAP ? FX_GEMM_I16_KERNEL_SPLIT : k];
        }
        return fmt == FMT_FP32 ? "avx2-fma" : "avx2-widen";
    default:
        if (integer) /* the AMX kernel's name under auto too: it is another kernel, not a
                      * choice per tile */
            return fx_backends[FX_BACKEND_AVX512].gemm.i16_amx && fx_gemm_i16_amx_on()
                       ? i16[1][FX_GEMM_I16_KERNEL_AMX]
                       : i16[1][fx_gemm_i16_forced_kernel()];
        if (fmt == FMT_FP32) return "avx512-fma";
        if (fmt == FMT_FP16) return "avx512-widen";
        switch (fx_bf16_gemm_route()) {
        case FX_BF16_GEMM_DPBF16: return "avx512-dpbf16";
        case FX_BF16_GEMM_AMX: return "avx512-amx";
        default: return "avx512-widen";
        }
    }
}

const char *flexpoint_kernel_name(const char *op, fmt_t fmt)
{
    if (!op || (int)fmt < 0 || (int)fmt >= FMT_COUNT) return NULL;
    if (strcmp(op, "matmul") != 0) return NULL;
    fx_init();
    return fx_matmul_kernel(__atomic_load_n(&fx_active, __ATOMIC_ACQUIRE), fmt);
}

/* The int16 GEMM's kernels (flex16_5 and dfp16 share it): "auto", "split", "wrap", "fast", bare
 * or with the "avx2-i16-" / "avx512-i16-" prefix flexpoint_kernel_name() gives; the plain
 * level names "avx2-i16" / "avx512-i16" are auto. */
static int fx_set_i16_kernel(const char *name)
{
    const char *bare = name;
    if (strncmp(bare, "avx512-i16", 10) == 0) bare += 10;
    else if (strncmp(bare, "avx2-i16", 8) == 0) bare += 8;
    if (bare != name) bare = *bare == '\0' ? "auto" : *bare == '-' ? bare + 1 : "";
    const int k = fx_gemm_i16_kernel_parse(bare);
    if (k < 0)
        return FX_FAIL(FX_ENAME, "unknown int16 matmul kernel '%.64s' (known: auto, split, wrap, "
                                 "fast, amx)", name);
    const char *needs = "";
    if (!fx_i16_kernel_runnable(k, &needs))
        return FX_FAIL(FX_EUNSUPPORTED, "int16 matmul kernel '%s' needs %s (detected: %s)", name,
                       needs, fx_cpu_string);
    fx_gemm_i16_force_kernel(k);
    snprintf(fx_i16_kernel_why, sizeof fx_i16_kernel_why, "flexpoint_set_kernel");
    return FX_OK;
}

int flexpoint_set_kernel(const char *op, fmt_t fmt, const char *name)
{
    if (!op || !name) return FX_FAIL(FX_EINVAL, "op or name is NULL");
    if ((int)fmt < 0 || (int)fmt >= FMT_COUNT) return FX_FAIL(FX_EINVAL, "bad format %d", (int)fmt);
    if (strcmp(op, "matmul") != 0)
        return FX_FAIL(FX_ENAME, "unknown op '%.64s' (known: matmul)", op);
    fx_init();
    if (fmt == FMT_FLEX16_5 || fmt == FMT_DFP16) return fx_set_i16_kernel(name);
    if (fmt != FMT_BF16) { /* one kernel per level: only its own name is accepted */
        const char *cur = fx_matmul_kernel(__atomic_load_n(&fx_active, __ATOMIC_ACQUIRE), fmt);
        if (strcmp(name, cur) == 0) return FX_OK;
        return FX_FAIL(FX_ENAME, "matmul has one kernel for this format here ('%s'), not "
                                 "'%.64s'", cur, name);
    }
    /* "widen" / "dpbf16", with or without the "avx512-" prefix flexpoint_kernel_name() gives */
    const char *bare = strncmp(name, "avx512-", 7) == 0 ? name + 7 : name;
    const int r = fx_bf16_gemm_route_parse(bare);
    if (r < 0)
        return FX_FAIL(FX_ENAME, "unknown bf16 matmul kernel '%.64s' (known: widen, dpbf16, amx)",
                       name);
    if (fx_bf16_gemm_route_set(r) != FX_OK)
        return FX_FAIL(FX_EUNSUPPORTED, "bf16 matmul kernel '%s' needs AVX-512 with AVX512_BF16%s "
                                        "(detected: %s)", name,
                       r == FX_BF16_GEMM_AMX ? " and AMX-BF16 the OS lets this process use" : "",
                       fx_cpu_string);
    snprintf(fx_bf16_route_why, sizeof fx_bf16_route_why, "flexpoint_set_kernel");
    return FX_OK;
}

/* How the int16 GEMM of a level picks its kernel per tile. */
static const char *fx_i16_choice(int backend)
{
    if (backend == FX_BACKEND_SCALAR) return "the scalar loop";
    const int wrap = backend == FX_BACKEND_AVX512 && fx_cpu_info.avx512vnni;
    if (backend == FX_BACKEND_AVX512 && fx_backends[backend].gemm.i16_amx && fx_gemm_i16_amx_on())
        return "AMX-INT8 tiles on plain products from 16 x 32 x 16 (from 16 x 16 x 16 where "
               "the sums are rounded in registers), else auto: fast where the norms allow, else "
               "wrap (K >= 63) or split";
    switch (fx_gemm_i16_forced_kernel()) {
    case FX_GEMM_I16_KERNEL_SPLIT: return "split on every tile";
    case FX_GEMM_I16_KERNEL_WRAP:
        return wrap ? "wrap on every tile" : "split on every tile (no wrap kernel on this level)";
    case FX_GEMM_I16_KERNEL_FAST:
        return wrap ? "fast where the norms allow on every product, else wrap (K >= 63) or split"
                    : "fast where the norms allow on every product, else split";
    default:
        return wrap ? "auto: fast where the norms allow, else wrap (K >= 63) or split"
                    : "auto: fast where the norms allow, else split";
    }
}

const char *flexpoint_kernel_report(void)
{
    fx_init();
    const int be = __atomic_load_n(&fx_active, __ATOMIC_ACQUIRE);
    int used = snprintf(fx_kernel_report_string, sizeof fx_kernel_report_string,
                        "backend=%s", fx_backend_names[be]);
    for (int f = 0; f < FMT_COUNT && used > 0 && (size_t)used < sizeof fx_kernel_report_string; f++)
        used += snprintf(fx_kernel_report_string + used, sizeof fx_kernel_report_string - (size_t)used,
                         " matmul/%s=%s", fmt_name((fmt_t)f),
                         fx_matmul_kernel(be, (fmt_t)f));
    if (used > 0 && (size_t)used < sizeof fx_kernel_report_string)
        snprintf(fx_kernel_report_string + used, sizeof fx_kernel_report_string - (size_t)used,
                 " (avx512 bf16 route chosen by %s%s%s%s%s%s; int16 kernel: %s, chosen by %s)",
                 fx_bf16_route_why,
                 /* the route's convolutions: their own order of the products (formats.md) */
                 fx_backends[be].conv.bf16_fwd
                     ? "; bf16 convolutions on it: direct kernels (taps x channel pairs) where "
                       "they fit"
                     : "",
                 fx_i16_amx_why[0] ? "; int16 AMX under auto chosen by " : "", fx_i16_amx_why,
                 /* exact sums: the same bits as the GEMM, only the time differs */
                 !fx_backends[be].conv.i16_fwd ? ""
                 : fx_backends[be].gemm.i16_amx && fx_gemm_i16_amx_on()
                     ? "; int16 convolutions: AMX tiles from 256 values per patch (weight "
                       "gradients from 16 channels each way), narrower ones on "
                     : "; int16 stride-1 convolutions: ",
                 fx_backends[be].conv.i16_fwd
                     ? "direct kernels with norm-cut chains where they fit, forward passes under "
                       "8 input channels folded, strided input gradients of dy under 64 channels "
                       "as one such convolution per phase (exact, the GEMM's bits)"
                     : "",
                 fx_i16_choice(be), fx_i16_kernel_why);
    return fx_kernel_report_string;
}
