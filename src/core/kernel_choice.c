/* Kernels chosen by measurement, with a per-CPU cache (kernel_choice.h).
 *
 * The cache is a small text file per CPU model, e.g. ~/.cache/flexpoint/kernels-GenuineIntel-6-167.txt:
 *     flexpoint kernel choices 2
 *     cpu GenuineIntel family 6 model 167
 *     features sse2 avx avx2 fma f16c avx512f ... amx_bf16
 *     bf16_gemm amx
 *     fp32_fma_gflops 231.9
 *     bf16_pairs_gflops 117.6
 *     amx_gflops 3012.5
 * (amx_gflops 0.0 where the process cannot run AMX).
 * Every line must be present and agree with this CPU and with the rule that chose the route
 * from the rates; a file that does not (another library's format, a CPU whose features
 * changed under the same model number, a truncated or hand-edited file) is measured again and
 * rewritten. The file is written to a temporary and renamed, so a reader never sees half of
 * one; two processes measuring at once each rename a whole file. Nothing here can fail the
 * caller: without a cache the choice is measured in every process. */
#define _POSIX_C_SOURCE 200809L
#include "kernel_choice.h"
#include "backend.h"
#include "file_atomic.h" /* fx_io_read_full, fx_io_write_full */
#include "../bf16/bf16_gemm.h" /* fx_amx_bf16_usable, fx_amx_bf16_rate */
#include "../flex/flex_kernels.h" /* fx_amx_int8_rate */

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FX_CACHE_MAGIC "flexpoint kernel choices 2"

/* a reading that can win: positive and finite */
static int fx_rate_valid(double r) { return r > 0 && isfinite(r); }

int fx_bf16_route_from_rates(double fp32_fma, double bf16_pairs, double amx)
{
    if (!fx_rate_valid(fp32_fma)) return FX_BF16_GEMM_WIDEN;
    if (fx_rate_valid(amx) && amx >= FX_BF16_AMX_ROUTE_MARGIN * fp32_fma) return FX_BF16_GEMM_AMX;
    if (fx_rate_valid(bf16_pairs) && bf16_pairs >= FX_BF16_PAIR_ROUTE_MARGIN * fp32_fma)
        return FX_BF16_GEMM_DPBF16;
    return FX_BF16_GEMM_WIDEN;
}

static int fx_cache_enabled(void)
{
    const char *e = getenv("FLEXPOINT_KERNEL_CACHE");
    return !(e && (strcmp(e, "off") == 0 || strcmp(e, "0") == 0));
}

/* FLEXPOINT_CACHE_DIR, else $XDG_CACHE_HOME/flexpoint, else $HOME/.cache/flexpoint (absolute
 * paths only, as the XDG specification asks) */
static int fx_cache_dir(char *dir, size_t n, int *nested)
{
    const char *e = getenv("FLEXPOINT_CACHE_DIR");
    *nested = 0;
    if (e && e[0] == '/') return snprintf(dir, n, "%s", e) < (int)n ? 0 : -1;
    e = getenv("XDG_CACHE_HOME");
    if (e && e[0] == '/') {
        *nested = 1;
        return snprintf(dir, n, "%s/flexpoint", e) < (int)n ? 0 : -1;
    }
    e = getenv("HOME");
    if (e && e[0] == '/') {
        *nested = 2;
        return snprintf(dir, n, "%s/.cache/flexpoint", e) < (int)n ? 0 : -1;
    }
    return -1;
}

/* the vendor string as a file-name part: letters and digits only */
static void fx_vendor_token(const char *vendor, char *out, size_t n)
{
    size_t j = 0;
    for (size_t i = 0; vendor[i] && j + 1 < n; i++) {
        const char ch = vendor[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
            out[j++] = ch;
    }
    if (j == 0 && n > 7) j = (size_t)snprintf(out, n, "unknown");
    out[j < n ? j : n - 1] = '\0';
}

/* the cache file <dir>/<prefix>-<vendor>-<family>-<model>.txt */
static int fx_cache_path_named(const struct fx_cpu_features *cpu, const char *prefix, char *path,
                               size_t n)
{
    char dir[3072], vendor[16];
    int nested;
    if (n) path[0] = '\0';
    if (!cpu || !fx_cache_enabled() || fx_cache_dir(dir, sizeof dir, &nested) != 0) return -1;
    fx_vendor_token(cpu->vendor, vendor, sizeof vendor);
    const int w = snprintf(path, n, "%s/%s-%s-%d-%d.txt", dir, prefix, vendor, cpu->family,
                           cpu->model);
    if (w < 0 || (size_t)w >= n) {
        if (n) path[0] = '\0';
        return -1;
    }
    return 0;
}

int fx_kernel_cache_path(const struct fx_cpu_features *cpu, char *path, size_t n)
{
    return fx_cache_path_named(cpu, "kernels", path, n);
}

int fx_i16_kernel_cache_path(const struct fx_cpu_features *cpu, char *path, size_t n)
{
    return fx_cache_path_named(cpu, "kernels-i16", path, n);
}

/* The key a cache file must carry (cpu_line, 64 bytes) and the file's path (4096 bytes) for a
 * CPU; 0 when there is a cache, -1 when there is none (cpu_line is filled either way). */
static int fx_cache_locate(const struct fx_cpu_features *cpu, const char *prefix,
                           char *cpu_line, char *path)
{
    fx_cpu_model_format(cpu, cpu_line, 64);
    return fx_cache_path_named(cpu, prefix, path, 4096);
}

/* mkdir -p of the cache folder's last one or two levels (~/.cache may not exist yet) */
static void fx_make_cache_dir(const char *path)
{
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) return;
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return;
    *slash = '\0';
    if (mkdir(dir, 0755) == 0 || errno == EEXIST) return;
    char *up = strrchr(dir, '/');
    if (!up || up == dir) return;
    *up = '\0';
    (void)mkdir(dir, 0755);
    *up = '/';
    (void)mkdir(dir, 0755);
}

/* the value after "key " on a line of its own, copied into out (n bytes); -1 when absent */
static int fx_cache_field(const char *text, const char *key, char *out, size_t n)
{
    const size_t klen = strlen(key);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, key, klen) != 0 || line[klen] != ' ') continue;
        const char *v = line + klen + 1, *end = strchr(v, '\n');
        const size_t len = end ? (size_t)(end - v) : strlen(v);
        if (len + 1 > n) return -1;
        memcpy(out, v, len);
        out[len] = '\0';
        return 0;
    }
    return -1;
}

/* a rate as written: finite, positive (or zero where zero_ok: AMX not runnable) */
static int fx_parse_rate(const char *s, double *out, int zero_ok)
{
    char *end = NULL;
    errno = 0;
    const double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v < 0 || (v == 0 && !zero_ok))
        return -1;
    *out = v;
    return 0;
}

/* 0 and the cached route and rates when the file is whole and agrees with this CPU */
/* the whole text of a cache file (NUL-terminated in text, n bytes) when it is a plausible one:
 * no symlink, not empty, not too long, no NUL byte; 0 on success */
static int fx_cache_text(const char *path, char *text, size_t n)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    const ssize_t got = fx_io_read_full(fd, text, n - 1);
    close(fd);
    if (got <= 0 || (size_t)got == n - 1) return -1; /* empty, unreadable or too long */
    text[got] = '\0';
    return strlen(text) == (size_t)got ? 0 : -1; /* a NUL byte inside: not our file */
}

/* write text to path through a temporary and a rename (a reader never sees half a file) */
static int fx_cache_put(const char *path, const char *text, size_t len)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) return -1;
    fx_make_cache_dir(path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    const int wrote = fx_io_write_full(fd, text, len) == 0;
    const int ok = close(fd) == 0 && wrote;
    if (ok && rename(tmp, path) == 0) return 0;
    (void)unlink(tmp);
    return -1;
}

static int fx_cache_read(const char *path, const char *cpu_line,
                         const char *features, int *route, double *fma, double *pairs,
                         double *amx)
{
    char text[4096];
    if (fx_cache_text(path, text, sizeof text) != 0) return -1;
    char v[1024];
    if (strncmp(text, FX_CACHE_MAGIC "\n", sizeof FX_CACHE_MAGIC) != 0) return -1;
    if (fx_cache_field(text, "cpu", v, sizeof v) != 0 || strcmp(v, cpu_line) != 0) return -1;
    if (fx_cache_field(text, "features", v, sizeof v) != 0 || strcmp(v, features) != 0) return -1;
    if (fx_cache_field(text, "bf16_gemm", v, sizeof v) != 0) return -1;
    const int r = fx_bf16_gemm_route_parse(v);
    if (r < 0) return -1;
    if (fx_cache_field(text, "fp32_fma_gflops", v, sizeof v) != 0 ||
        fx_parse_rate(v, fma, 0) != 0)
        return -1;
    if (fx_cache_field(text, "bf16_pairs_gflops", v, sizeof v) != 0 ||
        fx_parse_rate(v, pairs, 0) != 0)
        return -1;
    if (fx_cache_field(text, "amx_gflops", v, sizeof v) != 0 || fx_parse_rate(v, amx, 1) != 0)
        return -1;
    if (fx_bf16_route_from_rates(*fma, *pairs, *amx) != r) return -1; /* not what the rule says */
    *route = r;
    return 0;
}

static int fx_cache_write(const char *path, const char *cpu_line, const char *features, int route,
                          double fma, double pairs, double amx)
{
    char text[2048];
    const int len = snprintf(text, sizeof text,
                             FX_CACHE_MAGIC "\ncpu %s\nfeatures %s\nbf16_gemm %s\n"
                                            "fp32_fma_gflops %.1f\nbf16_pairs_gflops %.1f\n"
                                            "amx_gflops %.1f\n",
                             cpu_line, features, fx_bf16_gemm_route_name(route), fma, pairs, amx);
    if (len <= 0 || (size_t)len >= sizeof text) return -1;
    return fx_cache_put(path, text, (size_t)len);
}

int fx_bf16_route_cache_read(const struct fx_cpu_features *cpu, const char *features, int *route,
                             double *fp32_fma, double *bf16_pairs, double *amx)
{
    char cpu_line[64], path[4096];
    if (fx_cache_locate(cpu, "kernels", cpu_line, path) != 0) return -1;
    return fx_cache_read(path, cpu_line, features, route, fp32_fma, bf16_pairs, amx);
}

int fx_bf16_route_cache_write(const struct fx_cpu_features *cpu, const char *features, int route,
                              double fp32_fma, double bf16_pairs, double amx)
{
    char cpu_line[64], path[4096];
    if (fx_cache_locate(cpu, "kernels", cpu_line, path) != 0) return -1;
    if (fx_bf16_gemm_route_name(route) == NULL) return -1;
    return fx_cache_write(path, cpu_line, features, route, fp32_fma, bf16_pairs, amx);
}

int fx_bf16_route_measured(const struct fx_cpu_features *cpu, const char *features, char *why,
                           size_t n)
{
    char cpu_line[64], path[4096];
    const int cached = fx_cache_locate(cpu, "kernels", cpu_line, path) == 0;
    int route;
    double fma, pairs, amx;
    if (cached && fx_cache_read(path, cpu_line, features, &route, &fma, &pairs, &amx) == 0) {
        snprintf(why, n, "measurement cached in %s: bf16 pairs %.1f GFLOP/s, AMX %.1f, against "
                         "fp32 FMA %.1f", path, pairs, amx, fma);
        return route;
    }
    /* alternate the loops so that a change of clock or load falls on each; the best of each
     * (per second of this thread's CPU time) */
    const int with_amx = fx_amx_bf16_usable(cpu);
    fma = pairs = amx = 0;
    for (int round = 0; round < 2; round++) {
        const double f = fx_instr_rate(FX_INSTR_FMA512, 1000000, 3) * 32e-9;
        const double p = fx_instr_rate(FX_INSTR_DPBF16_512, 1000000, 3) * 64e-9;
        const double x = with_amx ? fx_amx_bf16_rate(20000, 3) * 1e-9 : 0;
        fma = f > fma ? f : fma;
        pairs = p > pairs ? p : pairs;
        amx = x > amx ? x : amx;
    }
    route = fx_bf16_route_from_rates(fma, pairs, amx);
    const int kept =
        cached && fx_cache_write(path, cpu_line, features, route, fma, pairs, amx) == 0;
    snprintf(why, n, "measurement (now; %s): bf16 pairs %.1f GFLOP/s, AMX %.1f, against fp32 "
                     "FMA %.1f",
             kept ? "cached for the next process" : cached ? "the cache could not be written" : "no cache",
             pairs, amx, fma);
    return route;
}

/* ---- the int16 GEMM: AMX-INT8 against the vpdpwssd register tiles ------------------------ */

#define FX_I16_CACHE_MAGIC "flexpoint int16 kernel choice 1"

int fx_i16_amx_from_rates(double int16_pairs, double amx_int8)
{
    return fx_rate_valid(int16_pairs) && fx_rate_valid(amx_int8) &&
           amx_int8 / 4 >= FX_I16_AMX_ROUTE_MARGIN * int16_pairs;
}

static int fx_i16_cache_read(const char *path, const char *cpu_line, const char *features,
                             int *amx_on, double *pairs, double *amx)
{
    char text[4096], v[1024];
    if (fx_cache_text(path, text, sizeof text) != 0) return -1;
    if (strncmp(text, FX_I16_CACHE_MAGIC "\n", sizeof FX_I16_CACHE_MAGIC) != 0) return -1;
    if (fx_cache_field(text, "cpu", v, sizeof v) != 0 || strcmp(v, cpu_line) != 0) return -1;
    if (fx_cache_field(text, "features", v, sizeof v) != 0 || strcmp(v, features) != 0) return -1;
    if (fx_cache_field(text, "i16_gemm", v, sizeof v) != 0) return -1;
    const int on = strcmp(v, "amx") == 0 ? 1 : strcmp(v, "tiles") == 0 ? 0 : -1;
    if (on < 0) return -1;
    if (fx_cache_field(text, "int16_pairs_gops", v, sizeof v) != 0 ||
        fx_parse_rate(v, pairs, 0) != 0)
        return -1;
    if (fx_cache_field(text, "amx_int8_gops", v, sizeof v) != 0 || fx_parse_rate(v, amx, 0) != 0)
        return -1;
    if (fx_i16_amx_from_rates(*pairs, *amx) != on) return -1; /* not what the rule says */
    *amx_on = on;
    return 0;
}

static int fx_i16_cache_write(const char *path, const char *cpu_line, const char *features,
                              int amx_on, double pairs, double amx)
{
    char text[2048];
    const int len = snprintf(text, sizeof text,
                             FX_I16_CACHE_MAGIC "\ncpu %s\nfeatures %s\ni16_gemm %s\n"
                                                "int16_pairs_gops %.1f\namx_int8_gops %.1f\n",
                             cpu_line, features, amx_on ? "amx" : "tiles", pairs, amx);
    if (len <= 0 || (size_t)len >= sizeof text) return -1;
    return fx_cache_put(path, text, (size_t)len);
}

int fx_i16_amx_cache_read(const struct fx_cpu_features *cpu, const char *features, int *amx_on,
                          double *int16_pairs, double *amx_int8)
{
    char cpu_line[64], path[4096];
    if (fx_cache_locate(cpu, "kernels-i16", cpu_line, path) != 0) return -1;
    return fx_i16_cache_read(path, cpu_line, features, amx_on, int16_pairs, amx_int8);
}

int fx_i16_amx_cache_write(const struct fx_cpu_features *cpu, const char *features, int amx_on,
                           double int16_pairs, double amx_int8)
{
    char cpu_line[64], path[4096];
    if (fx_cache_locate(cpu, "kernels-i16", cpu_line, path) != 0) return -1;
    return fx_i16_cache_write(path, cpu_line, features, amx_on != 0, int16_pairs, amx_int8);
}

int fx_i16_amx_measured(const struct fx_cpu_features *cpu, const char *features, char *why,
                        size_t n)
{
    char cpu_line[64], path[4096];
    const int cached = fx_cache_locate(cpu, "kernels-i16", cpu_line, path) == 0;
    int on;
    double pairs, amx;
    if (cached && fx_i16_cache_read(path, cpu_line, features, &on, &pairs, &amx) == 0) {
        snprintf(why, n, "measurement cached in %s: AMX-INT8 %.1f GOP/s of byte products "
                         "against int16 pairs %.1f", path, amx, pairs);
        return on;
    }
    pairs = amx = 0;
    for (int round = 0; round < 2; round++) { /* alternated, the best of each */
        const double p = fx_instr_rate(FX_INSTR_DPWSSD512, 1000000, 3) * 64e-9;
        const double x = fx_amx_int8_rate(20000, 3) * 1e-9;
        pairs = p > pairs ? p : pairs;
        amx = x > amx ? x : amx;
    }
    on = fx_i16_amx_from_rates(pairs, amx);
    const int kept = cached && fx_i16_cache_write(path, cpu_line, features, on, pairs, amx) == 0;
    snprintf(why, n, "measurement (now; %s): AMX-INT8 %.1f GOP/s of byte products against "
                     "int16 pairs %.1f",
             kept ? "cached for the next process" : cached ? "the cache could not be written" : "no cache",
             amx, pairs);
    return on;
}
