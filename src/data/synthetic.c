/* Seeded synthetic images that a network can learn but that are not trivially separable:
 * each (class, channel) has a smooth template (a small random grid, half shared by all classes
 * and half specific to the class, interpolated bilinearly and periodically to the image size),
 * and each image is its class template under a random circular shift, contrast and brightness
 * plus per-pixel noise. Shifts defeat a per-pixel classifier (nearest class mean), while
 * convolutions handle them easily.
 *
 * Every random number comes from a counter-based generator keyed by (seed, purpose, index), and
 * only +, -, * and / on doubles are used (no libm calls), so the bytes do not depend on the
 * order in which images are generated, and are the same on every machine where the compiler
 * does not fuse a*b+c into one FMA (GCC in ISO C mode never does; this file gets no -mfma). */
#include "data_internal.h"
#include "../core/internal.h"

#include <stdlib.h>

enum { GRID = 8 }; /* template resolution per side (fewer if the image is smaller) */
enum { KEY_GRID = 1, KEY_LABELS = 2, KEY_IMAGE = 3, KEY_SHARED_GRID = 4 };
#define NOISE_SIGMA 0.2
#define SHIFT_DIV 4 /* shifts up to side/4 pixels each way */
/* Share of a template that is specific to its class; the rest is common to all classes, which
 * makes the classes overlap (nearest class mean: 35-45% on 3x32x32, 10 classes). */
#define CLASS_MIX 0.5
#define CONTRAST_MIN 0.6
#define CONTRAST_SPAN 0.4
#define BRIGHTNESS_SPAN 0.1 /* brightness offset in [-span, span] */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

typedef struct { uint64_t s; } syn_rng;

static syn_rng rng_for(uint64_t seed, uint64_t purpose, uint64_t index)
{
    syn_rng r = {mix64(seed ^ mix64(purpose * 0x9e3779b97f4a7c15ull ^ mix64(index)))};
    return r;
}

static uint64_t rng_next(syn_rng *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    return mix64(r->s);
}

static double rng_unit(syn_rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; } /* [0,1) */

/* Approximately standard normal from one draw: the sum of four 16-bit uniforms (Irwin-Hall),
 * centred and scaled to unit variance. Cheap, and exact-arithmetic deterministic. */
static double rng_noise(syn_rng *r)
{
    uint64_t v = rng_next(r);
    double s = (double)(v & 0xffff) + (double)(v >> 16 & 0xffff) + (double)(v >> 32 & 0xffff) +
               (double)(v >> 48);
    return (s / 65536.0 - 2.0) * 1.7320508075688772; /* sqrt(3) */
}

/* Periodic linear interpolation of a grid of g cells onto n pixels: pixel p reads cells lo[p]
 * and lo[p]+1 (mod g) with weight 1-t[p] and t[p]. */
static void interp_axis(int n, int g, int *lo, double *t)
{
    for (int p = 0; p < n; p++) {
        double u = ((double)p + 0.5) * g / n - 0.5; /* in [-0.5, g - 0.5) */
        if (u < 0) u += g;
        int k = (int)u;
        if (k >= g) k = g - 1;
        lo[p] = k;
        t[p] = u - k;
    }
}

static void free_tables(double *grid, int *row_lo, int *col_lo, double *row_t, double *col_t,
                        int *shift_c0, int *shift_c1, double *shift_t)
{
    free(grid);
    free(row_lo);
    free(col_lo);
    free(row_t);
    free(col_t);
    free(shift_c0);
    free(shift_c1);
    free(shift_t);
}

fx_dataset *fx_dataset_synthetic(int64_t n, int channels, int height, int width, int classes,
                                 uint64_t seed)
{
    if (classes < 2) {
        FX_FAIL(FX_EINVAL, "classes = %d (want 2..%d)", classes, FX_DATA_MAX_CLASSES);
        return NULL;
    }
    fx_dataset *ds = fx_ds_alloc(__func__, n, channels, height, width, classes);
    if (!ds) return NULL;
    int gh = height < GRID ? height : GRID, gw = width < GRID ? width : GRID;
    size_t grid_len = (size_t)classes * (size_t)channels * (size_t)(gh * gw);
    double *grid = malloc(grid_len * sizeof *grid);
    int *row_lo = malloc((size_t)height * sizeof *row_lo);
    int *col_lo = malloc((size_t)width * sizeof *col_lo);
    double *row_t = malloc((size_t)height * sizeof *row_t);
    double *col_t = malloc((size_t)width * sizeof *col_t);
    int *shift_c0 = malloc((size_t)width * sizeof *shift_c0);
    int *shift_c1 = malloc((size_t)width * sizeof *shift_c1);
    double *shift_t = malloc((size_t)width * sizeof *shift_t);
    if (!grid || !row_lo || !col_lo || !row_t || !col_t || !shift_c0 || !shift_c1 || !shift_t) {
        free_tables(grid, row_lo, col_lo, row_t, col_t, shift_c0, shift_c1, shift_t);
        fx_dataset_free(ds);
        FX_FAIL(FX_ENOMEM, "cannot allocate the class templates");
        return NULL;
    }
    for (size_t g = 0; g < grid_len; g++) {
        syn_rng r = rng_for(seed, KEY_GRID, g);
        size_t shared_idx = g % ((size_t)channels * (size_t)(gh * gw));
        syn_rng rs = rng_for(seed, KEY_SHARED_GRID, shared_idx);
        grid[g] = CLASS_MIX * rng_unit(&r) + (1.0 - CLASS_MIX) * rng_unit(&rs);
    }
    interp_axis(height, gh, row_lo, row_t);
    interp_axis(width, gw, col_lo, col_t);

    /* Balanced labels, shuffled (Fisher-Yates). */
    for (int64_t i = 0; i < n; i++) ds->labels[i] = (int32_t)(i % classes);
    syn_rng lr = rng_for(seed, KEY_LABELS, 0);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_next(&lr) % (uint64_t)(i + 1));
        int32_t tmp = ds->labels[i];
        ds->labels[i] = ds->labels[j];
        ds->labels[j] = tmp;
    }

    int max_dy = height / SHIFT_DIV, max_dx = width / SHIFT_DIV;
    int64_t hw = (int64_t)height * width;
    for (int64_t i = 0; i < n; i++) {
        syn_rng r = rng_for(seed, KEY_IMAGE, (uint64_t)i);
        int dy = (int)(rng_next(&r) % (uint64_t)(2 * max_dy + 1)) - max_dy;
        int dx = (int)(rng_next(&r) % (uint64_t)(2 * max_dx + 1)) - max_dx;
        double contrast = CONTRAST_MIN + CONTRAST_SPAN * rng_unit(&r);
        double brightness = BRIGHTNESS_SPAN * (2.0 * rng_unit(&r) - 1.0);
        /* This image's shifted column lookups, so the pixel loop has no divisions. */
        for (int x = 0; x < width; x++) {
            int sx = ((x + dx) % width + width) % width;
            shift_c0[x] = col_lo[sx];
            shift_c1[x] = (col_lo[sx] + 1) % gw;
            shift_t[x] = col_t[sx];
        }
        for (int ch = 0; ch < channels; ch++) {
            const double *tg = grid + ((size_t)ds->labels[i] * (size_t)channels + (size_t)ch) *
                                          (size_t)(gh * gw);
            float *out = ds->images + (i * channels + ch) * hw;
            for (int y = 0; y < height; y++) {
                int sy = ((y + dy) % height + height) % height;
                const double *g0 = tg + row_lo[sy] * gw, *g1 = tg + ((row_lo[sy] + 1) % gh) * gw;
                double ty = row_t[sy];
                for (int x = 0; x < width; x++) {
                    int c0 = shift_c0[x], c1 = shift_c1[x];
                    double tx = shift_t[x];
                    double top = g0[c0] + (g0[c1] - g0[c0]) * tx;
                    double bot = g1[c0] + (g1[c1] - g1[c0]) * tx;
                    double tmpl = top + (bot - top) * ty;
                    double v = 0.5 + contrast * (tmpl - 0.5) + brightness +
                               NOISE_SIGMA * rng_noise(&r);
                    out[(int64_t)y * width + x] = (float)(v < 0.0 ? 0.0 : v > 1.0 ? 1.0 : v);
                }
            }
        }
    }
    free_tables(grid, row_lo, col_lo, row_t, col_t, shift_c0, shift_c1, shift_t);
    fx_ds_set_source(ds, "synthetic %dx%dx%d, %d classes, seed=%llu", channels, height, width,
                     classes, (unsigned long long)seed);
    return ds;
}
