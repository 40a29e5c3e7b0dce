/* error_table: the accuracy of the element-wise functions in every format and on every CPU
 * backend, measured through the public API (tensor_unary, tensor_pow_scalar, tensor_clamp)
 * against binary64 references from libm, over a stated input range per function.
 *
 * Inputs per format:
 *   fp16, bf16      every finite value of the format inside the range;
 *   fp32            every STEP-th fp32 bit pattern inside the range (ordered by value);
 *   flex16_5, dfp16 every int16 mantissa m with m 2^e inside the range, e the smallest
 *                   exponent with 32767 2^e >= max |x| of the range.
 * The output tensor has the input's format. The errors are taken against the reference of
 * the input as stored (read back with tensor_to_f32). ULPs: of the output format at the
 * exact value for the float formats (fp32 as in docs/math.md), one quantum 2^e of the output
 * tensor's shared exponent for flex16_5 and dfp16.
 *
 * Output: a Markdown table (stdout or --md FILE) and a CSV (--csv FILE), one CSV row per
 * function, format and backend. --check re-reads the CSV it wrote and fails (exit 1) when a
 * row does not parse or a maximum ULP error exceeds the bound docs/math.md states (fp32: the
 * table of bounds; fp16, bf16: within 1 ulp of the correctly rounded value, checked on each
 * element; flex16_5, dfp16: half a quantum plus the fp32 error, 0.52 quanta) or the backends
 * disagree. */
#define _POSIX_C_SOURCE 200809L /* fdopen, fcntl */
#include "flexpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PI 3.14159265358979323846

enum { K_UNARY, K_POW, K_CLAMP };

typedef struct {
    const char *label; /* table name */
    const char *fn;    /* tensor_unary name, NULL for pow and clamp */
    int kind;
    double p0, p1; /* pow exponent; clamp bounds */
    double lo, hi; /* input range */
    double bound32; /* docs/math.md fp32 bound, ulps */
} func_t;

static const func_t FUNCS[] = {
    {"exp", "exp", K_UNARY, 0, 0, -10, 10, 1.0},
    {"log", "log", K_UNARY, 0, 0, 0x1p-8, 256, 1.0},
    {"sqrt", "sqrt", K_UNARY, 0, 0, 0, 1024, 0.5},
    {"rsqrt", "rsqrt", K_UNARY, 0, 0, 0x1p-8, 256, 1.0},
    {"reciprocal", "reciprocal", K_UNARY, 0, 0, 0x1p-8, 256, 0.5},
    {"tanh", "tanh", K_UNARY, 0, 0, -8, 8, 1.5},
    {"sigmoid", "sigmoid", K_UNARY, 0, 0, -16, 16, 2.5},
    {"gelu", "gelu", K_UNARY, 0, 0, -8, 8, 4.0},
    {"gelu_tanh", "gelu_tanh", K_UNARY, 0, 0, -8, 8, 3.5},
    {"silu", "silu", K_UNARY, 0, 0, -16, 16, 3.5},
    {"square", "square", K_UNARY, 0, 0, -200, 200, 0.5},
    {"abs", "abs", K_UNARY, 0, 0, -100, 100, 0.0},
    {"pow(x;2.5)", NULL, K_POW, 2.5, 0, 0, 16, 0.5 + 0x1p-16},
    {"pow(x;-1.7)", NULL, K_POW, -1.7, 0, 0.0625, 16, 0.5 + 0x1p-16},
    {"clamp(x;-1.5;2.25)", NULL, K_CLAMP, -1.5, 2.25, -4, 4, 0.0},
};
#define NFUNCS ((int)(sizeof FUNCS / sizeof FUNCS[0]))

/* ---- binary64 references ----------------------------------------------------------------- */

static double sigmoid64(double x) { return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)); }

static double ref(const func_t *f, double x)
{
    if (f->kind == K_POW) return pow(x, f->p0);
    if (f->kind == K_CLAMP) return x < f->p0 ? f->p0 : (x > f->p1 ? f->p1 : x);
    const char *n = f->fn;
    if (!strcmp(n, "exp")) return exp(x);
    if (!strcmp(n, "log")) return log(x);
    if (!strcmp(n, "sqrt")) return sqrt(x);
    if (!strcmp(n, "rsqrt")) return 1 / sqrt(x);
    if (!strcmp(n, "reciprocal")) return 1 / x;
    if (!strcmp(n, "tanh")) return tanh(x);
    if (!strcmp(n, "sigmoid")) return sigmoid64(x);
    if (!strcmp(n, "gelu")) return x * 0.5 * erfc(-x / sqrt(2.0));
    if (!strcmp(n, "gelu_tanh"))
        return x * sigmoid64(2 * sqrt(2 / PI) * (x + 0.044715 * x * x * x));
    if (!strcmp(n, "silu")) return x * sigmoid64(x);
    if (!strcmp(n, "square")) return x * x;
    if (!strcmp(n, "abs")) return fabs(x);
    return NAN;
}

/* ---- ulps ---------------------------------------------------------------------------------- */

/* one ulp of a float format with p significand bits (hidden bit included) and minimum normal
 * exponent emin, at the exact value r */
static double ulp_fmt(double r, int p, int emin)
{
    int e;
    if (r == 0) return ldexp(1.0, emin - p + 1);
    frexp(fabs(r), &e);
    e -= 1;
    if (e < emin) e = emin;
    return ldexp(1.0, e - p + 1);
}

static double ulp_of(fmt_t fmt, double r, int out_exp)
{
    switch (fmt) {
    case FMT_FP32: return ulp_fmt(r, 24, -126);
    case FMT_FP16: return ulp_fmt(r, 11, -14);
    case FMT_BF16: return ulp_fmt(r, 8, -126);
    default: return ldexp(1.0, out_exp);
    }
}

/* --whole: fp16 and bf16 on every finite value of the format, not the function's range */
static int WHOLE = 0;

/* ---- inputs -------------------------------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* fp32 patterns in value order: key(-0) = key(+0) - 1 */
static int64_t f32_key(float f)
{
    const uint32_t u = f32_bits(f);
    return (u & 0x80000000u) ? -(int64_t)(u & 0x7FFFFFFFu) - 1 : (int64_t)u;
}
static float f32_from_key(int64_t k)
{
    return k < 0 ? f32_of((uint32_t)(-(k + 1)) | 0x80000000u) : f32_of((uint32_t)k);
}

/* the input values of format fmt inside [lo, hi] (as floats); *n gets the count; for the
 * shared-exponent formats *in_exp gets the exponent the values are on */
static float *make_inputs(fmt_t fmt, double lo, double hi, int64_t f32_step, int sub16,
                          int64_t *n, int *in_exp)
{
    float *x = NULL;
    int64_t cnt = 0;
    *in_exp = 0;
    if (fmt == FMT_FP16 || fmt == FMT_BF16) {
        x = malloc(65536 * sizeof *x);
        if (!x) return NULL;
        for (uint32_t h = 0; h < 65536; h += (uint32_t)sub16) {
            const float v = fmt == FMT_FP16 ? fx_fp16_to_f32((uint16_t)h) : fx_bf16_to_f32((uint16_t)h);
            if (isfinite(v) && ((v >= lo && v <= hi) || WHOLE) && !(v == 0 && (h & 0x8000)))
                x[cnt++] = v;
        }
    } else if (fmt == FMT_FP32) {
        const int64_t k0 = f32_key((float)lo), k1 = f32_key((float)hi);
        const int64_t cap = (k1 - k0) / f32_step + 1;
        x = malloc((size_t)cap * sizeof *x);
        if (!x) return NULL;
        for (int64_t k = k0; k <= k1; k += f32_step) x[cnt++] = f32_from_key(k);
    } else {
        const double m = fmax(fabs(lo), fabs(hi));
        int e = -140;
        while (32767.0 * ldexp(1.0, e) < m) e++;
        *in_exp = e;
        x = malloc(65536 * sizeof *x);
        if (!x) return NULL;
        const double q = ldexp(1.0, e);
        for (int32_t i = (int32_t)ceil(lo / q); i <= (int32_t)floor(hi / q); i += sub16)
            x[cnt++] = (float)(i * q);
    }
    *n = cnt;
    return x;
}

/* position of a 16-bit pattern in value order (+0 and -0 both 0) */
static int ord16(uint16_t h) { return (h & 0x8000) ? -(int)(h & 0x7FFF) : (int)(h & 0x7FFF); }

/* ---- one measurement ------------------------------------------------------------------------ */

typedef struct {
    int64_t n, skipped, nonfinite_bad, off_rn, n_inf;
    double max_abs, sum_abs, max_rel, sum_rel, max_ulp, sum_ulp, x_at_max_ulp;
    int64_t nrel;
    int out_exp;
    double saturated;
    int levels_differ;
} stats_t;

static int apply(const func_t *f, tensor_t *out, const tensor_t *a)
{
    if (f->kind == K_POW) return tensor_pow_scalar(out, a, f->p0);
    if (f->kind == K_CLAMP) return tensor_clamp(out, a, f->p0, f->p1);
    return tensor_unary(out, a, f->fn);
}

/* FLEX16_5 outputs: window [-16, 15] instead of the default [-31, 0], whose largest value
 * 32767 is below square's and exp's results (--default-window keeps the default) */
static int OUT_WINDOW_LO = -16;


/* runs f on the inputs x (already on fmt's grid) and fills st; y gets the outputs */
static int measure(const func_t *f, fmt_t fmt, const float *xin, int64_t n, int in_exp, float *xs,
                   float *y, stats_t *st)
{
    memset(st, 0, sizeof *st);
    tensor_t *a = tensor_new(fmt, 1, &n), *out = tensor_new(fmt, 1, &n);
    if (!a || !out) {
        fprintf(stderr, "tensor_new: %s\n", flexpoint_last_error());
        tensor_free(a);
        tensor_free(out);
        return -1;
    }
    int rc = 0;
    if (fmt == FMT_FLEX16_5) { /* the grid's exponent, held fixed for the input */
        rc |= tensor_set_autoflex(a, "fixed");
        int wlo = in_exp - 16;
        if (wlo < -128) wlo = -128;
        if (wlo > 96) wlo = 96;
        rc |= tensor_set_exp_window(a, wlo);
        rc |= tensor_set_exp(a, in_exp);
    }
    if (fmt == FMT_FLEX16_5) rc |= tensor_set_exp_window(out, OUT_WINDOW_LO);
    rc |= tensor_from_f32(a, xin);
    rc |= tensor_to_f32(a, xs); /* the inputs as stored */
    rc |= apply(f, out, a);
    rc |= tensor_to_f32(out, y);
    if (fmt_is_shared_exponent(fmt)) {
        rc |= tensor_get_exp(out, &st->out_exp);
        rc |= tensor_stat(out, "saturated", &st->saturated);
    }
    if (rc) {
        fprintf(stderr, "%s on %s: %s\n", f->label, fmt_name(fmt), flexpoint_last_error());
        tensor_free(a);
        tensor_free(out);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        const double x = xs[i], r = ref(f, x), yy = y[i];
        if ((fmt == FMT_FP16 || fmt == FMT_BF16) && !isnan(r)) {
            /* a reference that rounds to +-Inf in the format (overflow, log 0) is met by the
             * same infinity with no error */
            const uint16_t rn = fmt == FMT_FP16 ? fx_f64_to_fp16(r) : fx_f64_to_bf16(r);
            const double rv = fmt == FMT_FP16 ? fx_fp16_to_f32(rn) : fx_bf16_to_f32(rn);
            if (isinf(rv)) {
                if (yy == rv) st->n++, st->n_inf++;
                else st->nonfinite_bad++;
                continue;
            }
        }
        if (!isfinite(r)) { /* outside the function's finite range (log 0 on a grid), NaN */
            if (!(isnan(r) && isnan(yy)) && !(isinf(r) && yy == r)) st->nonfinite_bad++;
            st->skipped++;
            continue;
        }
        if (!isfinite(yy)) {
            st->nonfinite_bad++;
            continue;
        }
        if (fmt == FMT_FP16 || fmt == FMT_BF16) { /* docs/math.md: within 1 ulp of RN(r) */
            const uint16_t rn = fmt == FMT_FP16 ? fx_f64_to_fp16(r) : fx_f64_to_bf16(r);
            const uint16_t yh = fmt == FMT_FP16 ? fx_f64_to_fp16(yy) : fx_f64_to_bf16(yy);
            if (abs(ord16(yh) - ord16(rn)) > 1) st->off_rn++;
        }
        const double ae = fabs(yy - r);
        const double ue = ae / ulp_of(fmt, r, st->out_exp);
        st->n++;
        st->sum_abs += ae;
        if (ae > st->max_abs) st->max_abs = ae;
        if (r != 0) {
            const double re = ae / fabs(r);
            st->nrel++;
            st->sum_rel += re;
            if (re > st->max_rel) st->max_rel = re;
        }
        st->sum_ulp += ue;
        if (ue > st->max_ulp) st->max_ulp = ue, st->x_at_max_ulp = x;
    }
    tensor_free(a);
    tensor_free(out);
    return 0;
}

static double bound_of(const func_t *f, fmt_t fmt)
{
    switch (fmt) {
    case FMT_FP32: return f->bound32;
    case FMT_FP16: case FMT_BF16: return f->bound32 == 0 ? 0.5 : 1.5; /* |y - RN(r)| <= 1 ulp */
    default: return f->bound32 == 0 ? 0.5 : 0.52;
    }
}

static const char *range_str(const func_t *f, char *buf, size_t len)
{
    if (WHOLE) snprintf(buf, len, "all finite");
    else snprintf(buf, len, "[%g, %g]", f->lo, f->hi);
    return buf;
}

/* ---- files -------------------------------------------------------------------------------- */

/* A stdio stream on the regular file `path`, for reading (write 0) or writing (write 1,
 * created or truncated), or NULL after a message naming the path and the problem. Anything
 * but a regular file is refused at once, as the library refuses what it reads
 * (docs/robustness.md): stat first, so that a device is never opened; O_NONBLOCK, so that
 * opening a FIFO neither waits for a writer nor, for writing, for a reader (ENXIO); fstat of
 * what was opened, in case the name changed in between. */
static FILE *open_regular(const char *path, int write)
{
    struct stat st;
    const char *why = NULL;
    int fd = -1;
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode)) why = "not a regular file";
    } else if (!write || errno != ENOENT) {
        why = strerror(errno);
    }
    if (!why) {
        int flags = write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY;
        fd = open(path, flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
        if (fd < 0) why = errno == ENXIO ? "not a regular file" : strerror(errno);
        else if (fstat(fd, &st) != 0) why = strerror(errno);
        else if (!S_ISREG(st.st_mode)) why = "not a regular file";
        else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) why = strerror(errno);
    }
    FILE *f = why ? NULL : fdopen(fd, write ? "w" : "r");
    if (!f) {
        if (!why) why = strerror(errno);
        if (fd >= 0) close(fd);
        fprintf(stderr, "error_table: cannot %s %s: %s\n", write ? "write" : "read", path, why);
    }
    return f;
}

/* ---- CSV read-back check ------------------------------------------------------------------ */

static int check_csv(const char *path)
{
    FILE *fp = open_regular(path, 0);
    if (!fp) return 1;
    char line[1024];
    int rows = 0, bad = 0;
    if (!fgets(line, sizeof line, fp) || strncmp(line, "function,", 9)) {
        fprintf(stderr, "check: no header in %s\n", path);
        fclose(fp);
        return 1;
    }
    while (fgets(line, sizeof line, fp)) {
        char func[64], range[64], fmt[16], backend[16];
        long long n, skipped, nfb, offrn;
        int oexp, differ;
        double mabs, meabs, mrel, merel, mulp, meulp, xat, bound, sat;
        const int k = sscanf(line,
                             "\"%63[^\"]\",\"%63[^\"]\",%15[^,],%15[^,],%lld,%lld,%lg,%lg,%lg,%lg,%lg,%lg,"
                             "%lg,%lg,%d,%lg,%lld,%lld,%d",
                             func, range, fmt, backend, &n, &skipped, &mabs, &meabs, &mrel, &merel,
                             &mulp, &meulp, &xat, &bound, &oexp, &sat, &nfb, &offrn, &differ);
        rows++;
        if (k != 19) {
            fprintf(stderr, "check: row %d does not parse (%d fields): %s", rows, k, line);
            bad++;
            continue;
        }
        if (!(mulp <= bound) || n <= 0 || nfb != 0 || offrn != 0 || differ != 0 || sat != 0) {
            fprintf(stderr,
                    "check: %s %s %s: max %.4f ulp (bound %.4f), n=%lld, non-finite %lld, "
                    "off RN %lld, backends differ %d, saturated %g\n",
                    func, fmt, backend, mulp, bound, n, nfb, offrn, differ, sat);
            bad++;
        }
    }
    fclose(fp);
    if (rows == 0) {
        fprintf(stderr, "check: no rows\n");
        return 1;
    }
    fprintf(stderr, "check: %d rows, %d outside the bounds\n", rows, bad);
    return bad ? 1 : 0;
}

/* ---- the pow measurement of docs/math.md ------------------------------------------------ */

static double ulp_err32(float y, double r)
{
    if (isnan(r) || isnan(y)) return isnan(r) && isnan(y) ? 0 : 1e30;
    if (isinf(r) && isinf(y)) return (r > 0) == (y > 0) ? 0 : 1e30;
    if (fabs(r) >= 0x1p127 || isinf(y)) { /* Inf stands one ulp (2^104) above the largest float */
        const double R = copysign(fmin(fabs(r), 0x1p128), r);
        const double Y = isinf(y) ? copysign(0x1p128, y) : y;
        return fabs(Y - R) / 0x1p104;
    }
    return fabs((double)y - r) / ulp_fmt(r, 24, -126);
}

static int pow_sweep(double p, int64_t step)
{
    enum { C = 1 << 20 };
    int64_t n = C;
    const int nb = flexpoint_backend_count();
    tensor_t *a = tensor_new(FMT_FP32, 1, &n), *out = tensor_new(FMT_FP32, 1, &n);
    float *x = malloc(C * sizeof *x), *y = malloc(C * sizeof *y), *y0 = malloc(C * sizeof *y0);
    if (!a || !out || !x || !y || !y0) return 1;
    double worst = 0, wx = 0;
    int64_t count = 0, differ = 0;
    const uint64_t end = 0x7F800000u; /* +Inf, the last pattern */
    uint64_t u = 0;
    while (u <= end) {
        int m = 0;
        for (; m < C && u <= end; m++, u += (uint64_t)step) x[m] = f32_of((uint32_t)u);
        for (int i = m; i < C; i++) x[i] = 1.0f;
        if (tensor_from_f32(a, x)) return 1;
        int first = 1;
        for (int b = 0; b < nb; b++) {
            if (!flexpoint_backend_available(b)) continue;
            if (flexpoint_set_backend(flexpoint_backend_name(b)) || tensor_pow_scalar(out, a, p) ||
                tensor_to_f32(out, first ? y0 : y))
                return 1;
            if (!first)
                for (int i = 0; i < m; i++) differ += memcmp(&y[i], &y0[i], 4) != 0;
            first = 0;
        }
        for (int i = 0; i < m; i++) {
            const double e = ulp_err32(y0[i], pow(x[i], p));
            if (e > worst) worst = e, wx = x[i];
        }
        count += m;
    }
    printf("pow p=%.17g: %lld inputs (every %lld-th pattern from +0 to +Inf), max %.6f ulp at "
           "x=%a (%.9g), backends differ on %lld\n",
           p, (long long)count, (long long)step, worst, wx, wx, (long long)differ);
    tensor_free(a);
    tensor_free(out);
    free(x);
    free(y);
    free(y0);
    return worst <= 0.5 + 0x1p-16 && differ == 0 ? 0 : 1;
}

/* ---- main --------------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: error_table [--csv FILE] [--md FILE] [--f32-step N] [--sub16 N]\n"
            "                   [--only NAME] [--formats a,b,..] [--reduced] [--check]\n"
            "  --f32-step N  fp32 inputs: every N-th pattern inside the range (default 256)\n"
            "  --sub16 N     16-bit and shared-exponent inputs: every N-th (default 1: all)\n"
            "  --reduced     --f32-step 65536 --sub16 7 (a quick run)\n"
            "  --only NAME   one function (a label of the table, e.g. exp or pow(x,2.5))\n"
            "  --default-window  FLEX16_5 outputs keep the default window [-31, 0]\n"
            "  --pow-sweep P  (put last) tensor_pow_scalar(x, P) in fp32 on every --f32-step-th\n"
            "                 pattern of x >= +0, +Inf included, on every backend: max ulp\n"
            "  --whole       fp16, bf16: every finite value (+0 once), whatever the range\n"
            "  --check       fail unless every row parses and is within its bound\n");
}

int main(int argc, char **argv)
{
    const char *csv_path = NULL, *md_path = NULL, *only = NULL, *formats = NULL;
    int64_t f32_step = 256;
    int sub16 = 1, check = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv_path = argv[++i];
        else if (!strcmp(argv[i], "--md") && i + 1 < argc) md_path = argv[++i];
        else if (!strcmp(argv[i], "--f32-step") && i + 1 < argc) f32_step = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--sub16") && i + 1 < argc) sub16 = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--formats") && i + 1 < argc) formats = argv[++i];
        else if (!strcmp(argv[i], "--reduced")) f32_step = 65536, sub16 = 7;
        else if (!strcmp(argv[i], "--check")) check = 1;
        else if (!strcmp(argv[i], "--default-window")) OUT_WINDOW_LO = -31;
        else if (!strcmp(argv[i], "--whole")) WHOLE = 1;
        else if (!strcmp(argv[i], "--pow-sweep") && i + 1 < argc) return pow_sweep(atof(argv[++i]), f32_step);
        else {
            usage();
            return 2;
        }
    }
    if (f32_step < 1 || sub16 < 1) {
        usage();
        return 2;
    }
    if (check && !csv_path) csv_path = "error_table.csv";

    const int nb = flexpoint_backend_count();
    const char *bnames[8];
    int nlev = 0;
    for (int b = 0; b < nb && nlev < 8; b++)
        if (flexpoint_backend_available(b)) bnames[nlev++] = flexpoint_backend_name(b);

    /* opened before the long measurement, so that a bad output path fails at once */
    FILE *csv = csv_path ? open_regular(csv_path, 1) : NULL;
    FILE *md = md_path ? open_regular(md_path, 1) : stdout;
    if ((csv_path && !csv) || !md) {
        if (csv) fclose(csv);
        if (md && md != stdout) fclose(md);
        return 1;
    }
    if (csv)
        fprintf(csv, "function,range,format,backend,n,skipped,max_abs,mean_abs,max_rel,mean_rel,"
                     "max_ulp,mean_ulp,x_at_max_ulp,bound_ulp,out_exp,saturated,nonfinite_bad,"
                     "off_rn16,backends_differ\n");
    fprintf(md, "Inputs: fp16/bf16 every %sfinite value %s; fp32 every %lld-th bit pattern in "
                "the range; flex16_5/dfp16 every %sint16 mantissa on the range's exponent. "
                "Backends: ",
            sub16 == 1 ? "" : "7th ", WHOLE ? "of the format" : "in the range",
            (long long)f32_step, sub16 == 1 ? "" : "7th ");
    for (int l = 0; l < nlev; l++) fprintf(md, "%s%s", l ? ", " : "", bnames[l]);
    fprintf(md, ".\n\n| function | range | format | n | max abs | mean abs | max rel | mean rel "
                "| max ulp | mean ulp | at x | backends |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|\n");

    const fmt_t fmts[] = {FMT_FP32, FMT_FP16, FMT_BF16, FMT_FLEX16_5, FMT_DFP16};
    int fail = 0;
    for (int fi = 0; fi < NFUNCS; fi++) {
        const func_t *f = &FUNCS[fi];
        if (only && strcmp(only, f->label)) continue;
        for (int k = 0; k < 5; k++) {
            const fmt_t fmt = fmts[k];
            if (formats && !strstr(formats, fmt_name(fmt))) continue;
            int64_t n = 0;
            int in_exp = 0;
            float *x = make_inputs(fmt, f->lo, f->hi, f32_step, sub16, &n, &in_exp);
            float *xs = malloc((size_t)(n ? n : 1) * sizeof *xs);
            float *y0 = malloc((size_t)(n ? n : 1) * sizeof *y0);
            float *y = malloc((size_t)(n ? n : 1) * sizeof *y);
            if (!x || !xs || !y0 || !y) {
                fprintf(stderr, "out of memory\n");
                return 1;
            }
            stats_t st[8], worst;
            int differ = 0;
            for (int l = 0; l < nlev; l++) {
                if (flexpoint_set_backend(bnames[l]) != FX_OK) {
                    fprintf(stderr, "backend %s: %s\n", bnames[l], flexpoint_last_error());
                    return 1;
                }
                if (measure(f, fmt, x, n, in_exp, xs, l ? y : y0, &st[l])) return 1;
                if (l && memcmp(y, y0, (size_t)n * sizeof *y)) differ = 1;
            }
            worst = st[0];
            for (int l = 0; l < nlev; l++) {
                st[l].levels_differ = differ;
                if (st[l].max_ulp > worst.max_ulp) worst = st[l];
                if (csv)
                    fprintf(csv, "\"%s\",\"%s\",%s,%s,%lld,%lld,%.6g,%.6g,%.6g,%.6g,%.6f,%.6f,%.9g,"
                                 "%.6f,%d,%g,%lld,%lld,%d\n",
                            f->label, range_str(f, (char[64]){0}, 64), fmt_name(fmt), bnames[l],
                            (long long)st[l].n, (long long)st[l].skipped, st[l].max_abs,
                            st[l].n ? st[l].sum_abs / st[l].n : 0, st[l].max_rel,
                            st[l].nrel ? st[l].sum_rel / st[l].nrel : 0, st[l].max_ulp,
                            st[l].n ? st[l].sum_ulp / st[l].n : 0, st[l].x_at_max_ulp,
                            bound_of(f, fmt), st[l].out_exp, st[l].saturated,
                            (long long)st[l].nonfinite_bad, (long long)st[l].off_rn, differ);
            }
            fprintf(md, "| %s | %s | %s | %lld | %.3g | %.3g | %.3g | %.3g | %.3f | %.3f | %.6g | %s |\n",
                    f->label, range_str(f, (char[64]){0}, 64), fmt_name(fmt), (long long)worst.n,
                    worst.max_abs, worst.n ? worst.sum_abs / worst.n : 0, worst.max_rel,
                    worst.nrel ? worst.sum_rel / worst.nrel : 0, worst.max_ulp,
                    worst.n ? worst.sum_ulp / worst.n : 0, worst.x_at_max_ulp,
                    differ ? "DIFFER" : "identical");
            fflush(md);
            free(x);
            free(xs);
            free(y0);
            free(y);
        }
    }
    if (md != stdout) fclose(md);
    if (csv) fclose(csv);
    if (check) fail = check_csv(csv_path);
    return fail;
}
