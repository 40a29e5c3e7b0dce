/* Backend registry: builds the scalar, avx2 and avx512 tables once (BLIS-style: each level
 * starts as a copy of the level below and overwrites what it does faster), detects the CPU,
 * and selects the active backend (best available, or FLEXPOINT_CPU). */
#include "backend.h"

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

    fx_backend *s = &fx_backends[FX_BACKEND_SCALAR];
    memset(s, 0, sizeof *s);
    fx_register_fp32_scalar(s, &fx_cpu_info);
    fx_register_fp16_scalar(s, &fx_cpu_info);
    fx_register_bf16_scalar(s, &fx_cpu_info);
    fx_register_flex_scalar(s, &fx_cpu_info);

    /* The registration functions live in files compiled for their instruction set, so the
     * compiler may use it anywhere in them, registration included (gcc does: AVX-512 moves
     * when filling the table). They are therefore called only on a CPU that runs that set;
     * a backend the CPU cannot run stays a copy of the one below it, marked unavailable. */
    fx_backend *a2 = &fx_backends[FX_BACKEND_AVX2];
    *a2 = *s;
    if (fx_backend_runnable(FX_BACKEND_AVX2, &fx_cpu_info)) {
        fx_register_fp32_avx2(a2, &fx_cpu_info);
        fx_register_fp16_avx2(a2, &fx_cpu_info);
        fx_register_bf16_avx2(a2, &fx_cpu_info);
        fx_register_flex_avx2(a2, &fx_cpu_info);
        fx_register_layout_avx2(a2, &fx_cpu_info);
        fx_register_nn_avx2(a2, &fx_cpu_info);
    }

    fx_backend *a5 = &fx_backends[FX_BACKEND_AVX512];
    *a5 = *a2;
    if (fx_backend_runnable(FX_BACKEND_AVX512, &fx_cpu_info)) {
        fx_register_fp32_avx512(a5, &fx_cpu_info);
        fx_register_fp16_avx512(a5, &fx_cpu_info);
        fx_register_bf16_avx512(a5, &fx_cpu_info);
        fx_register_flex_avx512(a5, &fx_cpu_info);
        fx_register_layout_avx512(a5, &fx_cpu_info);
        fx_register_nn_avx512(a5, &fx_cpu_info);
    }

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
