/* Every one of the 2^32 fp32 bit patterns, converted to fp16 and to bf16, against a reference
 * written in a different style from the library: the library rounds with integer operations
 * on the bit fields; this reference computes the exact rounded *value* in double arithmetic
 * (scale by the format's quantum, explicit ties to even on the fraction, scale back) and
 * compares it with the library's pattern decoded by an ldexp-based table. Because a format's
 * finite patterns and their values are in one-to-one correspondence (the sign separating +-0),
 * equal values and signs mean equal bits. NaN and Inf results are checked as exact patterns.
 *
 * The scalar definitions (fx_f32_to_fp16, fx_f32_to_bf16) are checked against the reference;
 * then every bulk path (every available backend's table entry and every per-ISA kernel this
 * CPU can run) must reproduce the scalar bits exactly, in chunks of 2^20 patterns.
 * The running time is printed. */
#include "bf16/bf16_kernels.h"
#include "core/backend.h"
#include "fp16/fp16_kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHUNK_LOG2 20
#define CHUNK ((uint32_t)1 << CHUNK_LOG2)

typedef void (*to16_fn)(const float *, uint16_t *, int64_t);

typedef struct {
    char name[48];
    to16_fn fn;
    long bad_chunks;
} bulk_path;

typedef struct {
    const char *name;
    uint16_t (*scalar)(float);
    int fbits;              /* fraction bits of the 16-bit format */
    int emin;               /* exponent of the smallest normal */
    uint16_t inf, qnan;     /* +Inf and the canonical quiet NaN */
    double table[32768];    /* value of each non-negative pattern, from the fields */
    double max_finite;
    bulk_path paths[16];
    int npaths;
    long bad_scalar;
} format_check;

static double now_s(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC); /* C11; only used to report the running time */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Magnitudes of the 16-bit patterns, decoded from the fields with ldexp. */
static void build_table(format_check *f, int ebits)
{
    int emax = (1 << ebits) - 1, bias = (1 << (ebits - 1)) - 1, fb = f->fbits;
    for (int h = 0; h < 32768; h++) {
        int e = h >> fb, m = h & ((1 << fb) - 1);
        if (e == emax)
            f->table[h] = m ? NAN : INFINITY;
        else if (e == 0)
            f->table[h] = ldexp(m, 1 - bias - fb);
        else
            f->table[h] = ldexp(m + (1 << fb), e - bias - fb);
    }
    f->max_finite = f->table[f->inf - 1];
}

static void add_path(format_check *f, const char *name, to16_fn fn)
{
    if (!fn) {
        printf("  %s %s: not set, skipped\n", f->name, name);
        return;
    }
    for (int i = 0; i < f->npaths; i++)
        if (f->paths[i].fn == fn) return; /* the same kernel under another name */
    bulk_path *p = &f->paths[f->npaths++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->fn = fn;
    p->bad_chunks = 0;
}

/* Reference values for the non-negative patterns base .. base + CHUNK - 1: the exact rounded
 * magnitude, INFINITY for an Inf input and NAN for a NaN input (whose results are checked as
 * exact patterns). All patterns in a chunk share the biased exponent E (a chunk of 2^20 lies
 * inside one block of 2^23 fractions), so the scale factors are set once per chunk. A negative
 * input's reference is the same magnitude with the sign, so each chunk serves both signs. */
static void reference_chunk(const format_check *f, uint32_t base, double *ref)
{
    uint32_t E = (base >> 23) & 0xFF;
    if (E == 0xFF) {
        for (uint32_t j = 0; j < CHUNK; j++) ref[j] = ((base + j) & 0x7FFFFF) ? NAN : INFINITY;
        return;
    }
    /* value = sig * 2^(Eeff - 150), sig including the implicit bit for normal inputs. */
    int Eeff = E ? (int)E : 1;
    double implicit = E ? 8388608.0 : 0.0;
    /* The format's quantum (spacing) at this magnitude: 2^(floor(log2 value) - fbits), but
     * never finer than its subnormal spacing 2^(emin - fbits). For fp32 subnormal inputs the
     * value is below 2^-126 and every format here is in its subnormal range (or, for bf16, at
     * the same spacing): the quantum is the subnormal one. */
    int qexp = (E ? (int)E - 127 : -127) - f->fbits;
    if (qexp < f->emin - f->fbits) qexp = f->emin - f->fbits;
    double to_units = ldexp(1.0, Eeff - 150 - qexp); /* value / quantum = sig * to_units */
    double quantum = ldexp(1.0, qexp);
    for (uint32_t j = 0; j < CHUNK; j++) {
        double sig = implicit + (double)(int32_t)((base + j) & 0x7FFFFF);
        double units = sig * to_units;         /* exact: a power-of-two scaling; < 2^24 */
        int32_t whole = (int32_t)units;        /* units >= 0, so truncation is floor */
        double rest = units - (double)whole;   /* exact */
        int up = (rest > 0.5) | ((rest == 0.5) & (whole & 1)); /* nearest, ties to even */
        ref[j] = (double)(whole + up) * quantum;
    }
}

/* The library's patterns for base .. base + CHUNK - 1 (any sign), decoded by the table,
 * against the reference magnitudes. Returns the number of mismatches. */
static long compare_chunk(const format_check *f, uint32_t base, const double *ref,
                          const uint16_t *got, uint32_t *first_bad)
{
    uint16_t sbit = (uint16_t)((base >> 31) << 15);
    long bad = 0;
    for (uint32_t j = 0; j < CHUNK; j++) {
        double r = ref[j];
        int ok;
        if (r != r)
            ok = got[j] == (sbit | f->qnan);
        else if (r > f->max_finite)
            ok = got[j] == (sbit | f->inf);
        else
            ok = (got[j] & 0x8000) == sbit && f->table[got[j] & 0x7FFF] == r;
        if (!ok && !bad++) *first_bad = base + j;
    }
    return bad;
}

int main(void)
{
    static format_check fp16 = {.name = "fp16", .scalar = fx_f32_to_fp16, .fbits = 10,
                                .emin = -14, .inf = 0x7C00, .qnan = 0x7E00};
    static format_check bf16 = {.name = "bf16", .scalar = fx_f32_to_bf16, .fbits = 7,
                                .emin = -126, .inf = 0x7F80, .qnan = 0x7FC0};
    build_table(&fp16, 5);
    build_table(&bf16, 8);
    CHECK(fp16.max_finite == 65504.0, "fp16 table max %g", fp16.max_finite);
    CHECK(bf16.max_finite == 0x1.FEp127, "bf16 table max %a", bf16.max_finite);

    /* Bulk paths: every available backend, then every per-ISA kernel this CPU can run. */
    for (int i = 0; i < FX_BACKEND_COUNT; i++) {
        const fx_backend *b = fx_backend_get(i);
        CHECK(b != NULL, "fx_backend_get(%d)", i);
        if (!b) continue;
        if (!b->available) {
            printf("  backend %s: not available on this CPU, skipped\n", b->name);
            continue;
        }
        char name[48];
        snprintf(name, sizeof name, "backend %s", b->name);
        add_path(&fp16, name, b->cvt.f32_to_fp16);
        add_path(&bf16, name, b->cvt.f32_to_bf16);
    }
    const fx_cpu_features *c = fx_cpu();
    add_path(&fp16, "kernel scalar", fx_cvt_f32_to_fp16_scalar);
    add_path(&bf16, "kernel scalar", fx_cvt_f32_to_bf16_scalar);
    if (c->avx2 && c->f16c) {
        add_path(&fp16, "kernel avx2", fx_cvt_f32_to_fp16_avx2);
        add_path(&bf16, "kernel avx2", fx_cvt_f32_to_bf16_avx2);
    }
    if (c->avx512f && c->avx512bw && c->avx512vl) {
        add_path(&fp16, "kernel avx512", fx_cvt_f32_to_fp16_avx512);
        add_path(&bf16, "kernel avx512", fx_cvt_f32_to_bf16_avx512);
        if (c->avx512bf16)
            add_path(&bf16, "kernel avx512bf16", fx_cvt_f32_to_bf16_avx512bf16);
        else
            printf("  kernel avx512bf16: CPU lacks AVX512_BF16, skipped (NOT TESTED)\n");
    }
    format_check *fmts[2] = {&fp16, &bf16};
    for (int k = 0; k < 2; k++) {
        printf("%s bulk paths (distinct kernels):", fmts[k]->name);
        for (int i = 0; i < fmts[k]->npaths; i++) printf(" [%s]", fmts[k]->paths[i].name);
        printf("\n");
    }

    float *src = malloc(CHUNK * sizeof *src);
    uint16_t *want = malloc(CHUNK * sizeof *want), *got = malloc(CHUNK * sizeof *got);
    double *ref[2] = {malloc(CHUNK * sizeof(double)), malloc(CHUNK * sizeof(double))};
    if (!src || !want || !got || !ref[0] || !ref[1])
        return test_skip("test_slow_convert_f32_all", "out of memory");

    double t0 = now_s(), t_ref = 0, t_def = 0, t_bulk = 0;
    clock_t cpu0 = clock();
    for (uint32_t base = 0; base < 0x80000000u; base += CHUNK) {
        double ta = now_s();
        for (int k = 0; k < 2; k++) reference_chunk(fmts[k], base, ref[k]);
        t_ref += now_s() - ta;
        for (int neg = 0; neg < 2; neg++) {
            uint32_t sbase = base | (neg ? 0x80000000u : 0u);
            for (uint32_t j = 0; j < CHUNK; j++) {
                uint32_t u = sbase + j;
                memcpy(src + j, &u, sizeof u);
            }
            for (int k = 0; k < 2; k++) {
                format_check *f = fmts[k];
                double tb = now_s();
                for (uint32_t j = 0; j < CHUNK; j++) want[j] = f->scalar(src[j]);
                uint32_t first_bad = 0;
                long bad = compare_chunk(f, sbase, ref[k], want, &first_bad);
                if (bad && f->bad_scalar++ < 5) {
                    float x;
                    memcpy(&x, &first_bad, sizeof x);
                    fprintf(stderr, "%s scalar: %ld mismatches in chunk %08x, first %08x -> "
                            "%04x\n", f->name, bad, sbase, first_bad, f->scalar(x));
                }
                double tc = now_s();
                for (int i = 0; i < f->npaths; i++) {
                    bulk_path *p = &f->paths[i];
                    p->fn(src, got, CHUNK);
                    if (memcmp(got, want, CHUNK * sizeof *got) != 0 && p->bad_chunks++ < 3) {
                        uint32_t j = 0;
                        while (got[j] == want[j]) j++;
                        fprintf(stderr, "%s %s: chunk %08x, first %08x -> %04x, scalar %04x\n",
                                f->name, p->name, sbase, sbase + j, got[j], want[j]);
                    }
                }
                t_def += tc - tb;
                t_bulk += now_s() - tc;
            }
        }
    }
    double t1 = now_s();
    double cpu = (double)(clock() - cpu0) / CLOCKS_PER_SEC;

    for (int k = 0; k < 2; k++) {
        format_check *f = fmts[k];
        CHECK(f->bad_scalar == 0, "%s: %ld chunks where the scalar definition differs from the "
              "reference", f->name, f->bad_scalar);
        for (int i = 0; i < f->npaths; i++)
            CHECK(f->paths[i].bad_chunks == 0, "%s %s: %ld chunks differ from the scalar "
                  "definition", f->name, f->paths[i].name, f->paths[i].bad_chunks);
    }
    printf("all 2^32 fp32 patterns: %.1f s wall, %.1f s CPU (wall: reference %.1f s, scalar "
           "definitions + comparison %.1f s, bulk paths %.1f s)\n", t1 - t0, cpu, t_ref, t_def,
           t_bulk);
    free(ref[0]);
    free(ref[1]);
    free(src);
    free(want);
    free(got);
    return test_finish("test_slow_convert_f32_all");
}
