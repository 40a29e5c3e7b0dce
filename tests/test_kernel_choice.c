/* Kernels chosen by measurement (src/core/kernel_choice.c):
 *  - the rule that turns measured limits into a bf16 GEMM route, on the limits recorded on
 *    this project's machines (docs/performance.md, "Machines"): Emerald Rapids and the Xeon
 *    that reports family 6 model 167 (vdpbf16ps at half the FMA rate) take widen, Zen 4 and
 *    Zen 5 (vdpbf16ps at the FMA rate, twice the products) take dpbf16; the margin's edge;
 *    zero, negative and NaN readings fall back to widen;
 *  - the per-CPU cache: a written file reads back; a missing, foreign, truncated, edited or
 *    corrupt one (wrong magic, another CPU's line, other features, an unknown route, a route
 *    the rates contradict, NaN, negative or unparsable rates, a NUL byte, a directory or a
 *    link in its place, an oversized file) reads as missing; FLEXPOINT_KERNEL_CACHE=off and an
 *    unwritable folder neither read nor write, and nothing fails;
 *  - on a CPU with AVX-512 and AVX512_BF16: the measurement itself (for a made-up CPU key, so
 *    that the table never answers), its cache file, the second call answering from the cache,
 *    and a corrupt file measured again and rewritten whole;
 *  - in a child process of this program with an empty cache folder: the kernel report says
 *    what chose the route (the table, a measurement, the cache, or the CPU's lack of
 *    AVX512_BF16) and a second child reads the cache the first one wrote. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, setenv, symlink */
#include "flexpoint.h"
#include "core/backend.h"
#include "core/kernel_choice.h"
#include "flex/flex_kernels.h"
#include "bf16/bf16_gemm.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void check_rule(void)
{
    /* (fp32 FMA GFLOP/s, bf16 pair GFLOP/s, AMX GFLOP/s) as recorded per machine */
    CHECK(fx_bf16_route_from_rates(100.0, 43.0, 0) == FX_BF16_GEMM_WIDEN, "Emerald Rapids: widen");
    CHECK(fx_bf16_route_from_rates(231.9, 117.6, 0) == FX_BF16_GEMM_WIDEN,
          "Xeon model 167 without AMX: widen");
    CHECK(fx_bf16_route_from_rates(238.8, 111.8, 3574.2) == FX_BF16_GEMM_AMX,
          "Xeon model 167 with AMX: amx");
    CHECK(fx_bf16_route_from_rates(115.0, 234.0, 0) == FX_BF16_GEMM_DPBF16, "Zen 4: dpbf16");
    CHECK(fx_bf16_route_from_rates(248.0, 466.0, 0) == FX_BF16_GEMM_DPBF16, "Zen 5: dpbf16");
    CHECK(fx_bf16_route_from_rates(100.0, 100.0 * FX_BF16_PAIR_ROUTE_MARGIN, 0) ==
              FX_BF16_GEMM_DPBF16, "at the pair margin: dpbf16");
    CHECK(fx_bf16_route_from_rates(100.0, 100.0 * FX_BF16_PAIR_ROUTE_MARGIN - 0.1, 0) ==
              FX_BF16_GEMM_WIDEN, "below the pair margin: widen");
    CHECK(fx_bf16_route_from_rates(100.0, 300.0, 100.0 * FX_BF16_AMX_ROUTE_MARGIN) ==
              FX_BF16_GEMM_AMX, "at the AMX margin: amx");
    CHECK(fx_bf16_route_from_rates(100.0, 300.0, 100.0 * FX_BF16_AMX_ROUTE_MARGIN - 0.1) ==
              FX_BF16_GEMM_DPBF16, "below the AMX margin: the pair rule");
    CHECK(fx_bf16_route_from_rates(0.0, 200.0, 5000.0) == FX_BF16_GEMM_WIDEN, "no FMA reading");
    CHECK(fx_bf16_route_from_rates(100.0, -1.0, 0) == FX_BF16_GEMM_WIDEN, "negative reading");
    CHECK(fx_bf16_route_from_rates(NAN, 200.0, 0) == FX_BF16_GEMM_WIDEN, "NaN reading");
    CHECK(fx_bf16_route_from_rates(100.0, INFINITY, 0) == FX_BF16_GEMM_WIDEN, "Inf reading");
    CHECK(fx_bf16_route_from_rates(100.0, 50.0, NAN) == FX_BF16_GEMM_WIDEN, "NaN AMX reading");
    CHECK(fx_bf16_route_from_rates(100.0, 50.0, INFINITY) == FX_BF16_GEMM_WIDEN, "Inf AMX reading");
}

static fx_cpu_features fake_cpu(int model)
{
    fx_cpu_features f;
    memset(&f, 0, sizeof f);
    snprintf(f.vendor, sizeof f.vendor, "TestVendor");
    f.family = 99;
    f.model = model;
    return f;
}

static void write_text(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    CHECK(fwrite(text, 1, len, f) == len, "short write to %s", path);
    fclose(f);
}

#define GOOD_HEAD "flexpoint kernel choices 2\ncpu TestVendor family 99 model 1\nfeatures f1 f2\n"

static void check_cache(const char *dir)
{
    const fx_cpu_features cpu = fake_cpu(1);
    char path[4096];
    CHECK(fx_kernel_cache_path(&cpu, path, sizeof path) == 0, "no cache path under %s", dir);
    char want[4096];
    snprintf(want, sizeof want, "%s/kernels-TestVendor-99-1.txt", dir);
    CHECK(strcmp(path, want) == 0, "cache path %s, want %s", path, want);

    int route = -7;
    double fma = 0, pairs = 0, amx = -1;
    CHECK(fx_bf16_route_cache_read(&cpu, "f1 f2", &route, &fma, &pairs, &amx) != 0,
          "missing file read");
    CHECK(fx_bf16_route_cache_write(&cpu, "f1 f2", FX_BF16_GEMM_WIDEN, 231.9, 117.6, 0) == 0,
          "write");
    CHECK(fx_bf16_route_cache_read(&cpu, "f1 f2", &route, &fma, &pairs, &amx) == 0 &&
              route == FX_BF16_GEMM_WIDEN && fabs(fma - 231.9) < 0.05 && fabs(pairs - 117.6) < 0.05 &&
              amx == 0, "read back: route %d, %.2f %.2f %.2f", route, fma, pairs, amx);
    CHECK(fx_bf16_route_cache_write(&cpu, "f1 f2", FX_BF16_GEMM_AMX, 231.9, 117.6, 3000.0) == 0,
          "rewrite");
    CHECK(fx_bf16_route_cache_read(&cpu, "f1 f2", &route, &fma, &pairs, &amx) == 0 &&
              route == FX_BF16_GEMM_AMX && fabs(amx - 3000.0) < 0.05, "rewritten route %d", route);
    CHECK(fx_bf16_route_cache_read(&cpu, "f1 f2 f3", &route, &fma, &pairs, &amx) != 0,
          "a CPU with other features read another's choice");
    const fx_cpu_features other = fake_cpu(2);
    CHECK(fx_bf16_route_cache_read(&other, "f1 f2", &route, &fma, &pairs, &amx) != 0,
          "another model read this model's file");
    CHECK(fx_bf16_route_cache_write(&cpu, "f1 f2", 5, 1.0, 2.0, 0) != 0, "unknown route written");

    /* each corrupt file reads as missing */
    static const char *const bad[] = {
        "garbage\n",
        "flexpoint kernel choices 1\ncpu TestVendor family 99 model 1\nfeatures f1 f2\n"
        "bf16_gemm widen\nfp32_fma_gflops 200.0\nbf16_pairs_gflops 100.0\namx_gflops 0.0\n",
        "flexpoint kernel choices 2\ncpu TestVendor family 99 model 3\nfeatures f1 f2\n"
        "bf16_gemm widen\nfp32_fma_gflops 200.0\nbf16_pairs_gflops 100.0\namx_gflops 0.0\n",
        GOOD_HEAD "bf16_gemm tmul\nfp32_fma_gflops 200.0\nbf16_pairs_gflops 100.0\namx_gflops 0.0\n",
        GOOD_HEAD "bf16_gemm dpbf16\nfp32_fma_gflops 200.0\nbf16_pairs_gflops 100.0\namx_gflops 0.0\n",
        GOOD_HEAD "bf16_gemm widen\nfp32_fma_gflops 200.0\nbf16_pairs_gflops 100.0\namx_gflops 900.0\n",
        GOOD_HEAD "bf16_gemm amx\nfp32_fma_gflops 200.0\nbf16_pairs_gflops 100.0\namx_gflops 0.0\n",
        GOOD_HEAD "bf16_gemm widen\nfp32_fma_gflops nan\nbf16_pairs_gflops 100.0\namx_gflops 0.0\n",
        GOOD_HEAD "bf16_gemm widen\nfp32_fma_gflops 200.0\nbf16_pairs_gflops -3\namx_gflops 0.0\n",
        GOOD_HEAD "bf16_gemm widen\nfp32_fma_gflops 200.0\nbf16_pairs_gflops 100.0\namx_gflops -1\n",
        GOOD_HEAD "bf16_gemm widen\nfp32_fma_gflops 200.0x\nbf16_pairs_gflops 100.0\namx_gflops 0.0\n",
        GOOD_HEAD "bf16_gemm widen\nfp32_fma_gflops 200.0\nbf16_pairs_gflops 100.0\n", /* truncated */
        GOOD_HEAD "bf16_gemm widen\nfp32_fma_gflops 200.0\nbf16_pairs_gflops 1e999\namx_gflops 0.0\n",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(path, bad[i], strlen(bad[i]));
        route = -7;
        CHECK(fx_bf16_route_cache_read(&cpu, "f1 f2", &route, &fma, &pairs, &amx) != 0 && route == -7,
              "corrupt cache %zu read as route %d", i, route);
    }
    const char good[] =
        GOOD_HEAD "bf16_gemm widen\nfp32_fma_gflops 200.0\nbf16_pairs_gflops 100.0\namx_gflops 0.0\n";
    write_text(path, good, strlen(good));
    CHECK(fx_bf16_route_cache_read(&cpu, "f1 f2", &route, &fma, &pairs, &amx) == 0 &&
              route == FX_BF16_GEMM_WIDEN, "hand-written good file refused");
    char nul[sizeof good];
    memcpy(nul, good, sizeof good);
    nul[30] = '\0';
    write_text(path, nul, sizeof good - 1);
    CHECK(fx_bf16_route_cache_read(&cpu, "f1 f2", &route, &fma, &pairs, &amx) != 0, "NUL byte accepted");
    static char big[8192];
    memset(big, 'x', sizeof big - 1);
    memcpy(big, good, strlen(good));
    write_text(path, big, sizeof big - 1);
    CHECK(fx_bf16_route_cache_read(&cpu, "f1 f2", &route, &fma, &pairs, &amx) != 0, "oversized accepted");
    /* a link in the file's place is not followed; a directory is not a file */
    char target[4200];
    snprintf(target, sizeof target, "%s/target.txt", dir);
    write_text(target, good, strlen(good));
    CHECK(unlink(path) == 0 && symlink(target, path) == 0, "symlink %s", path);
    CHECK(fx_bf16_route_cache_read(&cpu, "f1 f2", &route, &fma, &pairs, &amx) != 0, "link followed");
    CHECK(unlink(path) == 0 && mkdir(path, 0755) == 0, "mkdir %s", path);
    CHECK(fx_bf16_route_cache_read(&cpu, "f1 f2", &route, &fma, &pairs, &amx) != 0, "directory read");
    CHECK(fx_bf16_route_cache_write(&cpu, "f1 f2", FX_BF16_GEMM_WIDEN, 200.0, 100.0, 0) != 0,
          "written over a directory");
    CHECK(rmdir(path) == 0, "rmdir %s", path);
    CHECK(unlink(target) == 0, "unlink %s", target);

    /* off: no path, no read, no write */
    setenv("FLEXPOINT_KERNEL_CACHE", "off", 1);
    CHECK(fx_kernel_cache_path(&cpu, path, sizeof path) != 0 && path[0] == '\0', "off: path %s", path);
    CHECK(fx_bf16_route_cache_write(&cpu, "f1 f2", FX_BF16_GEMM_WIDEN, 200.0, 100.0, 0) != 0, "off: wrote");
    unsetenv("FLEXPOINT_KERNEL_CACHE");
    struct stat st;
    snprintf(want, sizeof want, "%s/kernels-TestVendor-99-1.txt", dir);
    CHECK(stat(want, &st) != 0, "the cache was written while off");

    /* a folder that cannot be made: the write fails, nothing else */
    setenv("FLEXPOINT_CACHE_DIR", "/proc/flexpoint-no-such-folder/sub", 1);
    CHECK(fx_bf16_route_cache_write(&cpu, "f1 f2", FX_BF16_GEMM_WIDEN, 200.0, 100.0, 0) != 0,
          "write into /proc succeeded");
    setenv("FLEXPOINT_CACHE_DIR", dir, 1);
}

/* the measurement itself, where this CPU has the instructions it times */
static void check_measurement(void)
{
    const fx_cpu_features *c = fx_cpu();
    if (!(c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq && c->avx512bf16)) {
        fprintf(stderr, "test_kernel_choice: no AVX512_BF16 here; the measurement is not run\n");
        return;
    }
    /* this CPU's features under a made-up key, so that the table never answers */
    fx_cpu_features cpu = *c;
    snprintf(cpu.vendor, sizeof cpu.vendor, "TestVendor");
    cpu.family = 99;
    cpu.model = 7;
    char why[512];
    const int r1 = fx_bf16_route_measured(&cpu, "f1", why, sizeof why);
    CHECK(fx_bf16_gemm_route_name(r1) != NULL, "measured route %d", r1);
    CHECK(strstr(why, "measurement (now; cached for the next process)") != NULL, "first: %s", why);
    int route = -1;
    double fma = 0, pairs = 0, amx = -1;
    CHECK(fx_bf16_route_cache_read(&cpu, "f1", &route, &fma, &pairs, &amx) == 0 && route == r1,
          "cache after measuring: route %d (measured %d)", route, r1);
    CHECK(fma >= 16.0 && fma < 1600.0 && pairs >= 16.0 && pairs < 3200.0,
          "measured %.1f and %.1f GFLOP/s", fma, pairs);
    /* AMX: about 1,000 operations a cycle where it runs (between 2 and 12 GHz of that) */
    CHECK(fx_amx_bf16_usable(fx_cpu()) ? amx >= 2000.0 && amx < 12000.0 : amx == 0,
          "AMX reading %.1f GFLOP/s (usable %d)", amx, fx_amx_bf16_usable(fx_cpu()));
    CHECK(route == fx_bf16_route_from_rates(fma, pairs, amx), "route disagrees with its rates");
    const int r2 = fx_bf16_route_measured(&cpu, "f1", why, sizeof why);
    CHECK(r2 == r1 && strstr(why, "measurement cached in ") != NULL, "second: %d %s", r2, why);
    char path[4096];
    CHECK(fx_kernel_cache_path(&cpu, path, sizeof path) == 0, "path");
    write_text(path, "flexpoint kernel choices 2\ncpu TestVendor", 41);
    const int r3 = fx_bf16_route_measured(&cpu, "f1", why, sizeof why);
    CHECK(strstr(why, "measurement (now;") != NULL, "corrupt file not measured again: %s", why);
    CHECK(fx_bf16_route_cache_read(&cpu, "f1", &route, &fma, &pairs, &amx) == 0 && route == r3,
          "corrupt file not rewritten whole");
    fprintf(stderr, "test_kernel_choice: this CPU measured bf16 pairs %.1f GFLOP/s, AMX %.1f, "
            "fp32 FMA %.1f: %s\n", pairs, amx, fma, fx_bf16_gemm_route_name(r3));
}

/* The int16 GEMM's AMX-or-tiles rule, its own cache file and, where AMX-INT8 runs, the
 * measurement. */
static void check_i16_choice(void)
{
    /* recorded: the Xeon reporting model 167 (tdpbssd 7,343.5 GOP/s, vpdpwssd 478.6) */
    CHECK(fx_i16_amx_from_rates(478.6, 7343.5) == 1, "Xeon model 167: amx");
    CHECK(fx_i16_amx_from_rates(100.0, 4 * 100.0 * FX_I16_AMX_ROUTE_MARGIN) == 1, "at the margin");
    CHECK(fx_i16_amx_from_rates(100.0, 4 * 100.0 * FX_I16_AMX_ROUTE_MARGIN - 0.1) == 0,
          "below the margin");
    CHECK(fx_i16_amx_from_rates(100.0, 0) == 0 && fx_i16_amx_from_rates(0, 5000.0) == 0 &&
              fx_i16_amx_from_rates(NAN, 5000.0) == 0 && fx_i16_amx_from_rates(100.0, INFINITY) == 0 &&
              fx_i16_amx_from_rates(-1.0, 5000.0) == 0,
          "a missing or broken reading chose AMX");
    fx_cpu_features cpu;
    memset(&cpu, 0, sizeof cpu);
    snprintf(cpu.vendor, sizeof cpu.vendor, "TestVendor");
    cpu.family = 99;
    cpu.model = 5;
    int on = -1;
    double pairs = 0, amx = 0;
    CHECK(fx_i16_amx_cache_read(&cpu, "f1", &on, &pairs, &amx) != 0, "no file yet, read anyway");
    CHECK(fx_i16_amx_cache_write(&cpu, "f1", 1, 478.6, 7343.5) == 0, "write");
    CHECK(fx_i16_amx_cache_read(&cpu, "f1", &on, &pairs, &amx) == 0 && on == 1 &&
              fabs(pairs - 478.6) < 0.05 && fabs(amx - 7343.5) < 0.05,
          "read back: %d %.1f %.1f", on, pairs, amx);
    CHECK(fx_i16_amx_cache_read(&cpu, "f1 f2", &on, &pairs, &amx) != 0, "other features read");
    char path[4096];
    CHECK(fx_i16_kernel_cache_path(&cpu, path, sizeof path) == 0 && strstr(path, "kernels-i16-"),
          "path %s", path);
    static const char *const bad[] = {
        "",
        "flexpoint int16 kernel choice 1\ncpu TestVendor family 99 model 5\nfeatures f1\n",
        "flexpoint int16 kernel choice 2\ncpu TestVendor family 99 model 5\nfeatures f1\n"
        "i16_gemm amx\nint16_pairs_gops 478.6\namx_int8_gops 7343.5\n",
        "flexpoint int16 kernel choice 1\ncpu TestVendor family 99 model 5\nfeatures f1\n"
        "i16_gemm tiles\nint16_pairs_gops 478.6\namx_int8_gops 7343.5\n", /* not the rule's */
        "flexpoint int16 kernel choice 1\ncpu TestVendor family 99 model 5\nfeatures f1\n"
        "i16_gemm tmul\nint16_pairs_gops 478.6\namx_int8_gops 7343.5\n",
        "flexpoint int16 kernel choice 1\ncpu TestVendor family 99 model 5\nfeatures f1\n"
        "i16_gemm amx\nint16_pairs_gops nan\namx_int8_gops 7343.5\n",
        "flexpoint int16 kernel choice 1\ncpu TestVendor family 99 model 5\nfeatures f1\n"
        "i16_gemm amx\nint16_pairs_gops 478.6\namx_int8_gops 0\n",
        "flexpoint int16 kernel choice 1\ncpu TestVendor family 99 model 6\nfeatures f1\n"
        "i16_gemm amx\nint16_pairs_gops 478.6\namx_int8_gops 7343.5\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(path, bad[i], strlen(bad[i]));
        CHECK(fx_i16_amx_cache_read(&cpu, "f1", &on, &pairs, &amx) != 0, "bad file %zu read", i);
    }
    const fx_cpu_features *c = fx_cpu();
    if (!fx_amx_int8_usable(c)) {
        fprintf(stderr, "test_kernel_choice: no usable AMX-INT8 here; its measurement is not run\n");
        return;
    }
    cpu = *c;
    snprintf(cpu.vendor, sizeof cpu.vendor, "TestVendor");
    cpu.family = 99;
    cpu.model = 8;
    char why[512];
    const int m1 = fx_i16_amx_measured(&cpu, "f1", why, sizeof why);
    CHECK(strstr(why, "measurement (now; cached for the next process)") != NULL, "first: %s", why);
    CHECK(fx_i16_amx_cache_read(&cpu, "f1", &on, &pairs, &amx) == 0 && on == m1,
          "cache after measuring: %d (measured %d)", on, m1);
    /* vpdpwssd: 16 to 3,200 GOP/s; tdpbssd: about 2,000 byte products a cycle */
    CHECK(pairs >= 16.0 && pairs < 3200.0 && amx >= 2000.0 && amx < 40000.0,
          "measured int16 pairs %.1f, AMX-INT8 %.1f GOP/s", pairs, amx);
    const int m2 = fx_i16_amx_measured(&cpu, "f1", why, sizeof why);
    CHECK(m2 == m1 && strstr(why, "measurement cached in ") != NULL, "second: %d %s", m2, why);
    fprintf(stderr, "test_kernel_choice: this CPU measured AMX-INT8 %.1f GOP/s against int16 "
            "pairs %.1f: %s\n", amx, pairs, m1 ? "amx" : "tiles");
}

/* the report of a child run with FLEXPOINT_CACHE_DIR=dir */
static void run_child(const char *self, const char *dir, char *out, size_t n)
{
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "FLEXPOINT_CACHE_DIR='%s' '%s' --report-child 2>&1", dir, self);
    CHECK(test_run_capture(cmd, out, n) == 0, "child failed: %s", out);
}

static void check_children(const char *self, const char *dir)
{
    char sub[4200], out[4096];
    snprintf(sub, sizeof sub, "%s/children", dir);
    run_child(self, sub, out, sizeof out);
    const fx_cpu_features *c = fx_cpu();
    const int avx512 = c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq;
    if (!avx512 || !c->avx512bf16) {
        CHECK(strstr(out, "chosen by the CPU: no AVX512_BF16") != NULL, "no bf16 here: %s", out);
        return;
    }
    if (!fx_amx_bf16_usable(c) && fx_bf16_gemm_route_preferred(c, NULL) >= 0) {
        CHECK(strstr(out, "chosen by table: ") != NULL, "listed CPU: %s", out);
        return;
    }
    CHECK(strstr(out, "chosen by measurement (now; cached for the next process)") != NULL,
          "first child: %s", out);
    run_child(self, sub, out, sizeof out);
    CHECK(strstr(out, "chosen by measurement cached in ") != NULL, "second child: %s", out);
    char want[64];
    snprintf(want, sizeof want, "matmul/bf16=avx512-%s",
             fx_bf16_gemm_route_name(fx_bf16_gemm_route()));
    CHECK(strstr(out, want) != NULL, "the child runs another route than this process: %s", out);
    if (fx_amx_int8_usable(c))
        CHECK(strstr(out, "int16 AMX under auto chosen by measurement cached in ") != NULL,
              "second child, int16: %s", out);
}

static void remove_tree(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--report-child") == 0) {
        printf("%s\n", flexpoint_kernel_report());
        return 0;
    }
    char dir[] = "/tmp/fx_kernel_choice_XXXXXX";
    if (!mkdtemp(dir)) return test_skip("test_kernel_choice", "cannot make a temporary folder");
    setenv("FLEXPOINT_CACHE_DIR", dir, 1);
    check_rule();
    check_cache(dir);
    check_measurement();
    check_i16_choice();
    check_children(argv[0], dir);
    remove_tree(dir);
    return test_finish("test_kernel_choice");
}
