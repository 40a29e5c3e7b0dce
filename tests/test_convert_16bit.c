/* fp16 and bf16 conversions: the scalar definitions against an independent decoder, and every
 * bulk path (every backend, every per-ISA kernel the CPU can run) bit for bit against the
 * scalar definitions.
 *
 *  1. All 65,536 fp16 and all 65,536 bf16 patterns decode to the value an independent decoder
 *     (ldexp of the fields) gives, and encode back to the same pattern; NaNs keep their sign
 *     and payload on the way up and come back as the quiet pattern.
 *  2. Known encodings of landmark values (1, 65504, the 65520 overflow boundary, the
 *     smallest subnormals, ties).
 *  3. fp32 -> 16 bit is the *nearest* value with ties to even: for random and edge fp32
 *     inputs the result is compared with its two neighbours using the independent decoder.
 *  4. Every bulk path equals the scalar definition for lengths 0..100 at misaligned source
 *     and destination offsets, over random bit patterns and edge values, without touching a
 *     guard element after dst[n-1] or before dst[0]; plus one long run over every 16-bit pattern
 *     (16 -> 32 bit) and over the whole input pool (32 -> 16 bit), and one run long enough for
 *     the streaming-store path (FX_CVT_STREAM_MIN_BYTES of output), at misaligned pointers.
 *  5. Items 1 and 4 (without the streaming run) again with MXCSR set to flush-to-zero,
 *     denormals-are-zero and round toward zero: the conversions must not depend on the
 *     floating-point environment.
 * The exhaustive fp32 -> 16 bit check lives in test_slow_convert_f32_all.c. */
#include "bf16/bf16_kernels.h"
#include "core/backend.h"
#include "fp16/fp16_kernels.h"
#include "testutil.h"

#include <fenv.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h> /* _mm_getcsr / _mm_setcsr only: baseline SSE, no ISA flags needed */
#define HAVE_MXCSR 1
#endif

/* ------------------------------------------------------------------------------------------ */
/* Independent decoders and bit helpers                                                       */
/* ------------------------------------------------------------------------------------------ */

static uint32_t f2u(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float u2f(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Value of a 16-bit pattern with exponent width ebits and fraction width fbits, from the IEEE
 * field definitions (bias 2^(ebits-1) - 1), as a double; NaN for NaN patterns. */
static double decode_ieee(uint16_t h, int ebits, int fbits)
{
    int emax = (1 << ebits) - 1, bias = (1 << (ebits - 1)) - 1;
    int e = (h >> fbits) & emax;
    int f = h & ((1 << fbits) - 1);
    double v;
    if (e == emax)
        v = f ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)f, 1 - bias - fbits);
    else
        v = ldexp((double)(f + (1 << fbits)), e - bias - fbits);
    return (h & 0x8000) ? -v : v;
}

static double decode_fp16(uint16_t h) { return decode_ieee(h, 5, 10); }
static double decode_bf16(uint16_t h) { return decode_ieee(h, 8, 7); }

static int is_nan16(uint16_t h, int fbits)
{
    uint16_t mag = h & 0x7FFF;
    uint16_t inf = (uint16_t)(0x7FFF & ~((1u << fbits) - 1u));
    return mag > inf;
}

/* ------------------------------------------------------------------------------------------ */
/* 1. Exhaustive 16-bit patterns                                                               */
/* ------------------------------------------------------------------------------------------ */

/* The fp32 bits each 16-bit pattern must decode to. Filled in the default floating-point
 * environment from the independent decoder (a double -> float conversion of an exact value),
 * then reused to judge the library in a hostile environment where that conversion itself would
 * be flushed by FTZ. */
static uint32_t want_fp16_up[65536], want_bf16_up[65536];

static void expected_16bit(void)
{
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        /* NaN: exact, so the sign, the all-ones exponent and the payload bits on top of the
         * fraction (a signalling NaN stays signalling). */
        if (is_nan16(h, 10))
            want_fp16_up[i] = ((uint32_t)(h & 0x8000) << 16) | 0x7F800000u |
                              ((uint32_t)(h & 0x03FF) << 13);
        else
            want_fp16_up[i] = (h == 0x8000) ? 0x80000000u : f2u((float)decode_fp16(h));
        if (is_nan16(h, 7))
            want_bf16_up[i] = (uint32_t)h << 16;
        else
            want_bf16_up[i] = (h == 0x8000) ? 0x80000000u : f2u((float)decode_bf16(h));
    }
}

static void check_all_16bit(const char *env)
{
    long bad_up16 = 0, bad_back16 = 0, bad_upb = 0, bad_backb = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;

        uint32_t fb = f2u(fx_fp16_to_f32(h));
        if (fb != want_fp16_up[i] && bad_up16++ < 5)
            fprintf(stderr, "[%s] fp16 %04x -> %08x, want %08x\n", env, h, fb, want_fp16_up[i]);
        uint16_t back = fx_f32_to_fp16(u2f(fb));
        uint16_t want_back = is_nan16(h, 10) ? (uint16_t)((h & 0x8000) | 0x7E00) : h;
        if (back != want_back && bad_back16++ < 5)
            fprintf(stderr, "[%s] fp16 %04x -> fp32 -> %04x, want %04x\n", env, h, back,
                    want_back);

        uint32_t bb = f2u(fx_bf16_to_f32(h));
        if (bb != want_bf16_up[i] && bad_upb++ < 5)
            fprintf(stderr, "[%s] bf16 %04x -> %08x, want %08x\n", env, h, bb, want_bf16_up[i]);
        uint16_t backb = fx_f32_to_bf16(u2f(bb));
        uint16_t want_backb = is_nan16(h, 7) ? (uint16_t)((h & 0x8000) | 0x7FC0) : h;
        if (backb != want_backb && bad_backb++ < 5)
            fprintf(stderr, "[%s] bf16 %04x -> fp32 -> %04x, want %04x\n", env, h, backb,
                    want_backb);
    }
    CHECK(bad_up16 == 0, "[%s] %ld fp16 patterns decode wrongly", env, bad_up16);
    CHECK(bad_back16 == 0, "[%s] %ld fp16 patterns do not round-trip", env, bad_back16);
    CHECK(bad_upb == 0, "[%s] %ld bf16 patterns decode wrongly", env, bad_upb);
    CHECK(bad_backb == 0, "[%s] %ld bf16 patterns do not round-trip", env, bad_backb);
}

static void check_decoder_sanity(void)
{
    /* A decoder that is wrong would make check 1 meaningless: pin a few fields by hand. */
    CHECK(decode_fp16(0x3C00) == 1.0, "fp16 0x3C00 is 1");
    CHECK(decode_fp16(0x7BFF) == 65504.0, "fp16 max");
    CHECK(decode_fp16(0x0001) == 0x1p-24, "fp16 min subnormal");
    CHECK(decode_fp16(0x0400) == 0x1p-14, "fp16 min normal");
    CHECK(decode_fp16(0xC000) == -2.0, "fp16 -2");
    CHECK(decode_bf16(0x3F80) == 1.0, "bf16 1");
    CHECK(decode_bf16(0x0001) == 0x1p-133, "bf16 min subnormal");
    CHECK(decode_bf16(0x7F7F) == 0x1.FEp127, "bf16 max");
    CHECK(isinf(decode_bf16(0xFF80)) && decode_bf16(0xFF80) < 0, "bf16 -Inf");
}

/* ------------------------------------------------------------------------------------------ */
/* 2. Landmark encodings                                                                       */
/* ------------------------------------------------------------------------------------------ */

typedef struct { uint32_t in; uint16_t fp16, bf16; const char *what; } landmark;

static const landmark landmarks[] = {
    {0x3F800000u, 0x3C00, 0x3F80, "1"},
    {0xC0000000u, 0xC000, 0xC000, "-2"},
    {0x00000000u, 0x0000, 0x0000, "+0"},
    {0x80000000u, 0x8000, 0x8000, "-0"},
    {0x477FE000u, 0x7BFF, 0x4780, "65504 (fp16 max)"},
    {0x477FEFFFu, 0x7BFF, 0x4780, "65519.998 (below the fp16 overflow midpoint)"},
    {0x477FF000u, 0x7C00, 0x4780, "65520 (fp16 overflow midpoint: ties to even gives Inf)"},
    {0xC77FF000u, 0xFC00, 0xC780, "-65520"},
    {0x47800000u, 0x7C00, 0x4780, "65536"},
    {0x7F7FFFFFu, 0x7C00, 0x7F80, "FLT_MAX (bf16 overflow)"},
    {0x7F7F7FFFu, 0x7C00, 0x7F7F, "just below the bf16 overflow midpoint"},
    {0x7F7F8000u, 0x7C00, 0x7F80, "bf16 overflow midpoint (odd: rounds up to Inf)"},
    {0x7F800000u, 0x7C00, 0x7F80, "+Inf"},
    {0xFF800000u, 0xFC00, 0xFF80, "-Inf"},
    {0x7F800001u, 0x7E00, 0x7FC0, "signalling NaN, payload 1"},
    {0xFFC12345u, 0xFE00, 0xFFC0, "negative quiet NaN with payload"},
    {0x7FFFFFFFu, 0x7E00, 0x7FC0, "NaN, all payload bits"},
    {0x33800000u, 0x0001, 0x3380, "2^-24 (fp16 min subnormal)"},
    {0x33000000u, 0x0000, 0x3300, "2^-25 (tie between 0 and 2^-24: even is 0)"},
    {0x33000001u, 0x0001, 0x3300, "just above 2^-25"},
    {0xB3000001u, 0x8001, 0xB300, "-(just above 2^-25)"},
    {0x33C00000u, 0x0002, 0x33C0, "1.5 * 2^-24 (tie: even is 2)"},
    {0x38800000u, 0x0400, 0x3880, "2^-14 (fp16 min normal)"},
    {0x387FC000u, 0x03FF, 0x3880, "largest fp16 subnormal, 1023 * 2^-24"},
    {0x387FE000u, 0x0400, 0x3880, "tie between largest subnormal and min normal (even: 1024)"},
    {0x387FDFFFu, 0x03FF, 0x3880, "just below that tie"},
    {0x3F801000u, 0x3C00, 0x3F80, "1 + 2^-11 (fp16 tie: even is 1)"},
    {0x3F803000u, 0x3C02, 0x3F80, "1 + 3 * 2^-11 (fp16 tie: even is 1 + 2^-9)"},
    {0x3F808000u, 0x3C04, 0x3F80, "1 + 2^-8 (bf16 tie: even is 1)"},
    {0x3F818000u, 0x3C0C, 0x3F82, "1 + 3 * 2^-8 (bf16 tie: even is 1 + 2^-6)"},
    {0x3DCCCCCDu, 0x2E66, 0x3DCD, "0.1f"},
    {0x40490FDBu, 0x4248, 0x4049, "pi"},
    {0x00000001u, 0x0000, 0x0000, "fp32 min subnormal"},
    {0x80000001u, 0x8000, 0x8000, "-(fp32 min subnormal)"},
    {0x00008000u, 0x0000, 0x0000, "bf16 subnormal tie at 0 (even is 0)"},
    {0x00008001u, 0x0000, 0x0001, "just above: bf16 min subnormal"},
    {0x00018000u, 0x0000, 0x0002, "bf16 subnormal tie 1.5 (even is 2)"},
    {0x007FFFFFu, 0x0000, 0x0080, "largest fp32 subnormal: carries to bf16 min normal"},
    {0x00800000u, 0x0000, 0x0080, "fp32 min normal"},
};

static void check_landmarks(void)
{
    for (size_t i = 0; i < sizeof landmarks / sizeof landmarks[0]; i++) {
        const landmark *l = &landmarks[i];
        uint16_t h = fx_f32_to_fp16(u2f(l->in)), b = fx_f32_to_bf16(u2f(l->in));
        CHECK(h == l->fp16, "fp16(%s = %08x) = %04x, want %04x", l->what, l->in, h, l->fp16);
        CHECK(b == l->bf16, "bf16(%s = %08x) = %04x, want %04x", l->what, l->in, b, l->bf16);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Input pool: edge values and random bit patterns                                            */
/* ------------------------------------------------------------------------------------------ */

static uint32_t *pool;
static size_t pool_n;

static void pool_add(uint32_t u) { pool[pool_n++] = u; }

static void build_pool(size_t nrandom)
{
    pool = malloc((nrandom + 4096) * sizeof *pool);
    pool_n = 0;
    for (size_t i = 0; i < sizeof landmarks / sizeof landmarks[0]; i++) {
        pool_add(landmarks[i].in);
        pool_add(landmarks[i].in ^ 0x80000000u);
    }
    /* Every fp16 boundary and tie, +-1 ulp of fp32: each fp16 pattern h with its midpoints to
     * the next pattern, for a spread of h. */
    for (uint32_t h = 0; h < 0x7BFF; h += 97) {
        double lo = fx_fp16_to_f32((uint16_t)h), hi = fx_fp16_to_f32((uint16_t)(h + 1));
        /* The midpoint has 12 significant bits: exact in double and in fp32. */
        uint32_t mid = f2u((float)((lo + hi) / 2));
        for (int d = -1; d <= 1; d++) {
            pool_add(mid + (uint32_t)d);
            pool_add((mid + (uint32_t)d) | 0x80000000u);
        }
        pool_add(f2u((float)lo));
    }
    /* bf16 ties in several binades, and NaN payloads of every kind. */
    for (uint32_t e = 0; e < 256; e += 17) {
        pool_add((e << 23) | 0x8000u);
        pool_add((e << 23) | 0x18000u);
        pool_add((e << 23) | 0x7FFFu);
        pool_add((e << 23) | 0x8001u);
    }
    const uint32_t nans[] = {0x7F800001u, 0x7F802000u, 0x7FA00000u, 0x7FBFFFFFu, 0x7FC00000u,
                             0x7FC00001u, 0x7FE00000u, 0xFF800001u, 0xFFFFFFFFu, 0x7F80E000u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) pool_add(nans[i]);

    test_rng r;
    test_rng_seed(&r, 0xF16B16u);
    for (size_t i = 0; i < nrandom; i++) {
        uint64_t x = test_rng_u64(&r);
        uint32_t u = (uint32_t)x;
        switch ((x >> 32) % 4) {
        case 0: break; /* any pattern */
        case 1: /* fp16 range: exponent 98..144 (|x| ~ 2^-29 .. 2^17), any fraction */
            u = (u & 0x807FFFFFu) | ((uint32_t)(98 + (x >> 40) % 47) << 23);
            break;
        case 2: { /* fp16 or bf16 ties and near-ties in the fp16 range */
            uint32_t e = (uint32_t)(98 + (x >> 40) % 47) << 23;
            uint32_t near = (uint32_t)((x >> 50) % 3) - 1u; /* -1, 0, +1 */
            if ((x >> 48) & 1)
                u = ((u & 0x807FE000u) | e | 0x1000u) + near; /* fp16: 13 dropped bits */
            else
                u = ((u & 0x807F0000u) | e | 0x8000u) + near; /* bf16: 16 dropped bits */
            break;
        }
        default: /* small magnitudes: subnormals of both formats */
            u &= 0x80000000u | ((1u << ((x >> 58) % 32)) - 1u);
            break;
        }
        pool_add(u);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* 3. Nearest, ties to even, judged with the independent decoder                              */
/* ------------------------------------------------------------------------------------------ */

/* The encoder of a format (returns the pattern) and the decoder's view of its magnitudes. */
static void check_nearest(const char *fmt, uint16_t (*enc)(float), double (*dec)(uint16_t),
                          uint16_t inf_mag, double overflow_at)
{
    long bad = 0;
    for (size_t i = 0; i < pool_n; i++) {
        float x = u2f(pool[i]);
        if (isnan(x)) continue;
        uint16_t h = enc(x);
        uint16_t sign = (pool[i] >> 16) & 0x8000;
        uint16_t m = h & 0x7FFF;
        double ax = fabs((double)x);
        int ok = (h & 0x8000) == sign;
        if (ax >= overflow_at) {
            ok = ok && m == inf_mag;
        } else if (ok && m < inf_mag) {
            /* The neighbours of m; the one above the largest finite is the overflow point's
             * 'next binade' value 2 * overflow_at - max, i.e. where Inf would sit. */
            double d = dec(m);
            double up = m + 1 < inf_mag ? dec((uint16_t)(m + 1)) : 2 * overflow_at - d;
            double dn = m > 0 ? dec((uint16_t)(m - 1)) : -dec(1);
            double e = fabs(ax - d), eu = fabs(ax - up), ed = fabs(ax - dn);
            ok = e <= eu && e <= ed;
            if (ok && (e == eu || e == ed)) ok = (m & 1) == 0; /* a tie goes to even */
        } else {
            ok = 0;
        }
        if (!ok && bad++ < 5)
            fprintf(stderr, "%s(%a = %08x) = %04x is not the nearest, ties to even\n", fmt,
                    (double)x, pool[i], h);
    }
    CHECK(bad == 0, "%s: %ld inputs not rounded to nearest even", fmt, bad);
}

/* ------------------------------------------------------------------------------------------ */
/* 4. Bulk paths                                                                               */
/* ------------------------------------------------------------------------------------------ */

typedef void (*to16_fn)(const float *, uint16_t *, int64_t);
typedef void (*from16_fn)(const uint16_t *, float *, int64_t);

typedef enum { K_F32_TO_FP16, K_FP16_TO_F32, K_F32_TO_BF16, K_BF16_TO_F32 } kind_t;
static const char *const kind_name[] = {"f32_to_fp16", "fp16_to_f32", "f32_to_bf16",
                                        "bf16_to_f32"};

typedef struct {
    char name[64];
    kind_t kind;
    to16_fn to16;
    from16_fn from16;
} path_t;

static path_t paths[64];
static int npaths;

static void add_path(const char *owner, kind_t kind, to16_fn to16, from16_fn from16)
{
    if (!to16 && !from16) {
        printf("  %s %s: not set, skipped\n", owner, kind_name[kind]);
        return;
    }
    for (int i = 0; i < npaths; i++)
        if ((to16 && paths[i].to16 == to16) || (from16 && paths[i].from16 == from16)) {
            printf("  %s %s: same kernel as %s\n", owner, kind_name[kind], paths[i].name);
            return;
        }
    path_t *p = &paths[npaths++];
    snprintf(p->name, sizeof p->name, "%s %s", owner, kind_name[kind]);
    p->kind = kind;
    p->to16 = to16;
    p->from16 = from16;
}

static void collect_paths(void)
{
    for (int i = 0; i < FX_BACKEND_COUNT; i++) {
        const fx_backend *b = fx_backend_get(i);
        CHECK(b != NULL, "fx_backend_get(%d) is NULL", i);
        if (!b) continue;
        if (!b->available) {
            printf("  backend %s: not available on this CPU, skipped\n", b->name);
            continue;
        }
        char owner[48];
        snprintf(owner, sizeof owner, "backend %s", b->name);
        add_path(owner, K_F32_TO_FP16, b->cvt.f32_to_fp16, NULL);
        add_path(owner, K_FP16_TO_F32, NULL, b->cvt.fp16_to_f32);
        add_path(owner, K_F32_TO_BF16, b->cvt.f32_to_bf16, NULL);
        add_path(owner, K_BF16_TO_F32, NULL, b->cvt.bf16_to_f32);
    }
    /* The per-ISA kernels by name, so that a kernel a backend does not install on this CPU
     * (e.g. the integer AVX-512 bf16 path on a CPU with AVX512_BF16) is still checked. */
    const fx_cpu_features *c = fx_cpu();
    add_path("kernel scalar", K_F32_TO_FP16, fx_cvt_f32_to_fp16_scalar, NULL);
    add_path("kernel scalar", K_FP16_TO_F32, NULL, fx_cvt_fp16_to_f32_scalar);
    add_path("kernel scalar", K_F32_TO_BF16, fx_cvt_f32_to_bf16_scalar, NULL);
    add_path("kernel scalar", K_BF16_TO_F32, NULL, fx_cvt_bf16_to_f32_scalar);
    if (c->avx2 && c->f16c) {
        add_path("kernel avx2", K_F32_TO_FP16, fx_cvt_f32_to_fp16_avx2, NULL);
        add_path("kernel avx2", K_FP16_TO_F32, NULL, fx_cvt_fp16_to_f32_avx2);
        add_path("kernel avx2", K_F32_TO_BF16, fx_cvt_f32_to_bf16_avx2, NULL);
        add_path("kernel avx2", K_BF16_TO_F32, NULL, fx_cvt_bf16_to_f32_avx2);
    } else {
        printf("  kernels avx2: CPU lacks AVX2/F16C, skipped\n");
    }
    int avx512 = c->avx512f && c->avx512bw && c->avx512vl;
    if (avx512) {
        add_path("kernel avx512", K_F32_TO_FP16, fx_cvt_f32_to_fp16_avx512, NULL);
        add_path("kernel avx512", K_FP16_TO_F32, NULL, fx_cvt_fp16_to_f32_avx512);
        add_path("kernel avx512", K_F32_TO_BF16, fx_cvt_f32_to_bf16_avx512, NULL);
        add_path("kernel avx512", K_BF16_TO_F32, NULL, fx_cvt_bf16_to_f32_avx512);
    } else {
        printf("  kernels avx512: CPU lacks AVX-512 F/BW/VL, skipped\n");
    }
    if (avx512 && c->avx512bf16)
        add_path("kernel avx512bf16", K_F32_TO_BF16, fx_cvt_f32_to_bf16_avx512bf16, NULL);
    else
        printf("  kernel avx512bf16 f32_to_bf16: CPU lacks AVX512_BF16, skipped (NOT TESTED)\n");
}

static uint16_t ref16(kind_t k, uint32_t u)
{
    return k == K_F32_TO_FP16 ? fx_f32_to_fp16(u2f(u)) : fx_f32_to_bf16(u2f(u));
}

static uint32_t ref32(kind_t k, uint16_t h)
{
    return f2u(k == K_FP16_TO_F32 ? fx_fp16_to_f32(h) : fx_bf16_to_f32(h));
}

#define GUARD 24
#define GUARD16 0xA5A5u
#define GUARD32 0xDEADBEEFu

/* One call of a path on len elements taken from the pool at `start`, with the given source and
 * destination element offsets. The source buffer is exactly src_off + len elements, so a read
 * past the end is an out-of-bounds access that the sanitizer build reports. */
static int run_case(const path_t *p, size_t start, int64_t len, int src_off, int dst_off)
{
    int bad = 0;
    size_t nd = (size_t)(dst_off + len + GUARD);
    if (p->to16) {
        float *src = malloc((size_t)(src_off + len + (src_off + len == 0)) * sizeof *src);
        uint16_t *dst = malloc(nd * sizeof *dst);
        for (int64_t i = 0; i < src_off + len; i++) {
            uint32_t u = pool[(start + (size_t)i) % pool_n];
            memcpy(src + i, &u, sizeof u);
        }
        for (size_t i = 0; i < nd; i++) dst[i] = GUARD16;
        p->to16(src + src_off, dst + dst_off, len);
        for (size_t i = 0; i < nd; i++) {
            int64_t j = (int64_t)i - dst_off;
            uint16_t want = (j >= 0 && j < len) ? ref16(p->kind, f2u(src[src_off + j])) : GUARD16;
            if (dst[i] != want && bad++ < 3)
                fprintf(stderr, "%s len %lld src+%d dst+%d: dst[%lld] = %04x, want %04x%s\n",
                        p->name, (long long)len, src_off, dst_off, (long long)j, dst[i], want,
                        (j < 0 || j >= len) ? " (guard overwritten)" : "");
        }
        free(src);
        free(dst);
    } else {
        uint16_t *src = malloc((size_t)(src_off + len + (src_off + len == 0)) * sizeof *src);
        float *dst = malloc(nd * sizeof *dst);
        for (int64_t i = 0; i < src_off + len; i++) {
            uint32_t u = pool[(start + (size_t)i) % pool_n];
            /* Alternate halves so both fp32-derived and raw 16-bit patterns appear. */
            src[i] = (uint16_t)(i & 1 ? u >> 16 : u);
        }
        for (size_t i = 0; i < nd; i++) {
            uint32_t g = GUARD32;
            memcpy(dst + i, &g, sizeof g);
        }
        p->from16(src + src_off, dst + dst_off, len);
        for (size_t i = 0; i < nd; i++) {
            int64_t j = (int64_t)i - dst_off;
            uint32_t want = (j >= 0 && j < len) ? ref32(p->kind, src[src_off + j]) : GUARD32;
            if (f2u(dst[i]) != want && bad++ < 3)
                fprintf(stderr, "%s len %lld src+%d dst+%d: dst[%lld] = %08x, want %08x%s\n",
                        p->name, (long long)len, src_off, dst_off, (long long)j, f2u(dst[i]),
                        want, (j < 0 || j >= len) ? " (guard overwritten)" : "");
        }
        free(src);
        free(dst);
    }
    return bad;
}

/* A long run: every 16-bit pattern (16 -> 32) or the whole pool (32 -> 16), at dst + 1. */
static int run_long(const path_t *p)
{
    int bad = 0;
    if (p->to16) {
        size_t n = pool_n;
        float *src = malloc(n * sizeof *src);
        uint16_t *dst = malloc((n + 1) * sizeof *dst);
        memcpy(src, pool, n * sizeof *src);
        p->to16(src, dst + 1, (int64_t)n);
        for (size_t i = 0; i < n; i++)
            if (dst[i + 1] != ref16(p->kind, pool[i]) && bad++ < 3)
                fprintf(stderr, "%s long run: %08x -> %04x, want %04x\n", p->name, pool[i],
                        dst[i + 1], ref16(p->kind, pool[i]));
        free(src);
        free(dst);
    } else {
        uint16_t *src = malloc(65536 * sizeof *src);
        float *dst = malloc(65537 * sizeof *dst);
        for (uint32_t i = 0; i < 65536; i++) src[i] = (uint16_t)i;
        p->from16(src, dst + 1, 65536);
        for (uint32_t i = 0; i < 65536; i++)
            if (f2u(dst[i + 1]) != ref32(p->kind, (uint16_t)i) && bad++ < 3)
                fprintf(stderr, "%s all patterns: %04x -> %08x, want %08x\n", p->name, i,
                        f2u(dst[i + 1]), ref32(p->kind, (uint16_t)i));
        free(src);
        free(dst);
    }
    return bad;
}

/* A run long enough for the streaming-store path (output of FX_CVT_STREAM_MIN_BYTES or more),
 * at src + 1 and dst + 1 so the kernels' alignment head is exercised, with guards after. */
static int run_streaming(const path_t *p)
{
    int bad = 0;
    if (p->to16) {
        int64_t n = FX_CVT_STREAM_MIN_BYTES / 2 + 45;
        float *src = malloc((size_t)(n + 1) * sizeof *src);
        uint16_t *dst = malloc((size_t)(n + 1 + GUARD) * sizeof *dst);
        for (int64_t i = 0; i < n + 1; i++) {
            uint32_t u = pool[(size_t)i % pool_n];
            memcpy(src + i, &u, sizeof u);
        }
        for (int64_t i = 0; i < n + 1 + GUARD; i++) dst[i] = GUARD16;
        p->to16(src + 1, dst + 1, n);
        for (int64_t i = 0; i < n + 1 + GUARD; i++) {
            uint16_t want = (i >= 1 && i <= n) ? ref16(p->kind, f2u(src[i])) : GUARD16;
            if (dst[i] != want && bad++ < 3)
                fprintf(stderr, "%s streaming run: dst[%lld] = %04x, want %04x\n", p->name,
                        (long long)i - 1, dst[i], want);
        }
        free(src);
        free(dst);
    } else {
        int64_t n = FX_CVT_STREAM_MIN_BYTES / 4 + 45;
        uint16_t *src = malloc((size_t)(n + 1) * sizeof *src);
        float *dst = malloc((size_t)(n + 1 + GUARD) * sizeof *dst);
        for (int64_t i = 0; i < n + 1; i++) src[i] = (uint16_t)(i * 40503u);
        for (int64_t i = 0; i < n + 1 + GUARD; i++) {
            uint32_t g = GUARD32;
            memcpy(dst + i, &g, sizeof g);
        }
        p->from16(src + 1, dst + 1, n);
        for (int64_t i = 0; i < n + 1 + GUARD; i++) {
            uint32_t want = (i >= 1 && i <= n) ? ref32(p->kind, src[i]) : GUARD32;
            if (f2u(dst[i]) != want && bad++ < 3)
                fprintf(stderr, "%s streaming run: dst[%lld] = %08x, want %08x\n", p->name,
                        (long long)i - 1, f2u(dst[i]), want);
        }
        free(src);
        free(dst);
    }
    return bad;
}

/* NaN and Inf at every place of every short run (1 to 24 elements, so every kernel's vector
 * steps and each tail length), among ordinary values: a tail handled apart from the vector
 * steps must fix its NaNs as they do (the pool's stride above need not put one there). The
 * sources are exactly len elements long, so that a read past them is an error the sanitizer
 * build reports. */
static int run_special_tails(const path_t *p)
{
    static const uint32_t specials[] = {0x7F812345u, 0xFFC00001u, 0x7F800000u, 0xFF800000u,
                                        0x7FFFFFFFu};
    /* the same kinds in the 16-bit formats: a signalling NaN, a negative quiet NaN with a
     * payload, +Inf, -Inf, a signalling NaN with another payload */
    static const uint16_t specials_fp16[] = {0x7C01u, 0xFE05u, 0x7C00u, 0xFC00u, 0x7D23u};
    static const uint16_t specials_bf16[] = {0x7F81u, 0xFFC5u, 0x7F80u, 0xFF80u, 0x7FA3u};
    const uint16_t *sp16 = p->kind == K_FP16_TO_F32 ? specials_fp16 : specials_bf16;
    int bad = 0;
    for (size_t si = 0; si < sizeof specials / sizeof *specials; si++)
        for (int64_t len = 1; len <= 24; len++)
            for (int64_t at = 0; at < len; at++) {
                float *src = malloc(sizeof(float) * (size_t)len);
                uint16_t *src16 = malloc(sizeof(uint16_t) * (size_t)len);
                uint16_t dst16[24 + 1];
                float dst[24 + 1];
                for (int64_t i = 0; i < len; i++) {
                    src[i] = 0.75f * (float)(i + 1);
                    src16[i] = (uint16_t)(0x3C00u + (uint32_t)i); /* normals in both formats */
                }
                uint32_t u = specials[si];
                memcpy(src + at, &u, sizeof u);
                src16[at] = sp16[si];
                if (p->to16) {
                    dst16[len] = GUARD16;
                    p->to16(src, dst16, len);
                    for (int64_t i = 0; i <= len; i++) {
                        const uint16_t want = i < len ? ref16(p->kind, f2u(src[i])) : GUARD16;
                        if (dst16[i] != want && bad++ < 3)
                            fprintf(stderr, "%s special tail len %lld at %lld: dst[%lld] = "
                                    "%04x, want %04x\n", p->name, (long long)len, (long long)at,
                                    (long long)i, dst16[i], want);
                    }
                } else {
                    const uint32_t g = GUARD32;
                    memcpy(dst + len, &g, sizeof g);
                    p->from16(src16, dst, len);
                    for (int64_t i = 0; i <= len; i++) {
                        const uint32_t want = i < len ? ref32(p->kind, src16[i]) : GUARD32;
                        if (f2u(dst[i]) != want && bad++ < 3)
                            fprintf(stderr, "%s special tail len %lld at %lld: dst[%lld] = "
                                    "%08x, want %08x\n", p->name, (long long)len,
                                    (long long)at, (long long)i, f2u(dst[i]), want);
                    }
                }
                free(src);
                free(src16);
            }
    return bad;
}

static void check_bulk_paths(const char *env, int with_streaming)
{
    static const int src_offs[] = {0, 1, 3}, dst_offs[] = {0, 1};
    for (int pi = 0; pi < npaths; pi++) {
        const path_t *p = &paths[pi];
        long bad = 0;
        size_t start = 0;
        for (int64_t len = 0; len <= 100; len++)
            for (int so = 0; so < 3; so++)
                for (int d = 0; d < 2; d++) {
                    bad += run_case(p, start, len, src_offs[so], dst_offs[d]);
                    start = (start + 131) % pool_n;
                }
        bad += run_long(p);
        bad += run_special_tails(p);
        if (with_streaming) bad += run_streaming(p);
        CHECK(bad == 0, "[%s] %s: %ld elements differ from the scalar definition", env,
              p->name, bad);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* 5. A hostile floating-point environment                                                    */
/* ------------------------------------------------------------------------------------------ */

static void check_env_independence(void)
{
#ifdef HAVE_MXCSR
    /* Reference bits in the default environment. */
    uint16_t *h16 = malloc(pool_n * sizeof *h16), *hb = malloc(pool_n * sizeof *hb);
    for (size_t i = 0; i < pool_n; i++) {
        h16[i] = fx_f32_to_fp16(u2f(pool[i]));
        hb[i] = fx_f32_to_bf16(u2f(pool[i]));
    }
    unsigned saved = _mm_getcsr();
    int saved_round = fegetround();
    fesetround(FE_TOWARDZERO);
    _mm_setcsr(_mm_getcsr() | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */

    long bad = 0;
    for (size_t i = 0; i < pool_n; i++)
        bad += fx_f32_to_fp16(u2f(pool[i])) != h16[i] || fx_f32_to_bf16(u2f(pool[i])) != hb[i];
    check_bulk_paths("FTZ+DAZ+round-toward-zero", 0);
    unsigned csr_during = _mm_getcsr();

    _mm_setcsr(saved);
    fesetround(saved_round);
    CHECK((csr_during & 0x8040u) == 0x8040u, "MXCSR FTZ/DAZ were really set (%#x)", csr_during);
    CHECK(bad == 0, "%ld scalar results change under FTZ+DAZ+round-toward-zero", bad);
    free(h16);
    free(hb);
    /* The exhaustive 16-bit check compares bits with tables made in the default mode. */
    fesetround(FE_TOWARDZERO);
    _mm_setcsr(_mm_getcsr() | 0x8040u);
    check_all_16bit("FTZ+DAZ+round-toward-zero");
    _mm_setcsr(saved);
    fesetround(saved_round);
#else
    printf("  no MXCSR on this architecture: environment check skipped\n");
#endif
}

int main(void)
{
    check_decoder_sanity();
    expected_16bit();
    check_all_16bit("default");
    check_landmarks();

    build_pool(200000);
    check_nearest("fp16", fx_f32_to_fp16, decode_fp16, 0x7C00, 65520.0);
    check_nearest("bf16", fx_f32_to_bf16, decode_bf16, 0x7F80, 0x1.FFp127);

    printf("bulk paths:\n");
    collect_paths();
    for (int i = 0; i < npaths; i++) printf("  checking %s\n", paths[i].name);
    CHECK(npaths >= 4, "at least the scalar backend's four routines are checked (%d)", npaths);
    check_bulk_paths("default", 1);
    check_env_independence();

    free(pool);
    return test_finish("test_convert_16bit");
}
