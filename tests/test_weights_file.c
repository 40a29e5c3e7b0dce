/* Weights files (fx_trainer_export_weights / fx_trainer_import_weights).
 *
 * - A ResNet-8 (batch norm) trained a few steps in flex16_5, exported and imported into a
 *   fresh bf16 trainer: the master weights are the exported bits, and the import evaluates
 *   exactly like fx_trainer_copy_weights from the trained model (weights and batch-norm
 *   statistics both came across).
 * - Every damaged file is refused with the documented status, a message naming the file and
 *   the problem, and the trainer unchanged: flipped byte (checksum), truncation, another
 *   magic or version, a name the model lacks, a repeated name, another shape, a NaN value and a
 *   negative variance (these with the checksum recomputed, so the field checks are reached),
 *   trailing bytes, a missing file, a folder.
 * - Export refuses a model holding a NaN weight (FX_ERANGE) and writes nothing. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"
#include "core/tensor_io.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const NAME = "test_weights_file";
static char dir[] = "/tmp/fx_weights_file_XXXXXX";

static fx_trainer *make(int fmt, const fx_dataset *tr)
{
    fx_train_config c;
    test_train_config(&c, "resnet8", fmt, 11);
    c.batch_size = 16;
    fx_trainer *t = fx_trainer_new(&c, tr, tr);
    CHECK(t != NULL, "fx_trainer_new: %s", flexpoint_last_error());
    return t;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 64);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spit(const char *path, const uint8_t *b, size_t len, int fix_crc)
{
    uint8_t *c = malloc(len);
    memcpy(c, b, len);
    if (fix_crc && len >= 4) {
        uint32_t crc = fx_crc32(c, len - 4);
        memcpy(c + len - 4, &crc, 4);
    }
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(c, 1, len, f) == len, "write %s", path);
    if (f) fclose(f);
    free(c);
}

static float *params_of(const fx_trainer *t, int64_t *n)
{
    *n = fx_trainer_param_count(t);
    float *p = malloc((size_t)*n * sizeof *p);
    if (p) CHECK_STATUS(fx_trainer_get_params(t, p), FX_OK);
    return p;
}

/* import of `file` into t is refused with `want` and a message holding frag; t unchanged. */
static void refused(fx_trainer *t, const char *file, int want, const char *frag,
                    const char *what)
{
    int64_t n = 0, m = 0;
    float *before = params_of(t, &n);
    int rc = fx_trainer_import_weights(t, file);
    CHECK(rc == want, "%s: status %d (%s), want %d", what, rc, flexpoint_last_error(), want);
    CHECK(strstr(flexpoint_last_error(), frag) != NULL, "%s: message '%s' lacks '%s'", what,
          flexpoint_last_error(), frag);
    float *after = params_of(t, &m);
    CHECK(before && after && n == m && memcmp(before, after, (size_t)n * sizeof *before) == 0,
          "%s: the trainer changed", what);
    free(before);
    free(after);
}

/* The offset of the first byte of entry `name`'s record (its name length), or 0. */
static size_t find_entry(const uint8_t *b, size_t len, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 16; i + 4 + nl <= len; i++) {
        uint32_t l;
        memcpy(&l, b + i, 4);
        if (l == nl && memcmp(b + i + 4, name, nl) == 0) return i;
    }
    return 0;
}

int main(void)
{
    if (!mkdtemp(dir)) return test_skip(NAME, "no temporary folder");
    flexpoint_set_num_threads(2);
    fx_dataset *tr = test_patch_dataset(96, 4);
    fx_trainer *a = tr ? make(FMT_FLEX16_5, tr) : NULL;
    fx_trainer *b = tr ? make(FMT_BF16, tr) : NULL;
    fx_trainer *c = tr ? make(FMT_BF16, tr) : NULL;
    if (!a || !b || !c) goto done;
    for (int s = 0; s < 3; s++) CHECK_STATUS(fx_trainer_step(a, NULL), FX_OK);
    char path[512], bad[512];
    snprintf(path, sizeof path, "%s/a.fxw", dir);
    snprintf(bad, sizeof bad, "%s/bad.fxw", dir);
    CHECK_STATUS(fx_trainer_export_weights(a, path), FX_OK);

    /* import == copy from the model itself, in another format */
    CHECK_STATUS(fx_trainer_import_weights(b, path), FX_OK);
    CHECK_STATUS(fx_trainer_copy_weights(c, a), FX_OK);
    int64_t na = 0, nb = 0;
    float *pa = params_of(a, &na), *pb = params_of(b, &nb);
    CHECK(pa && pb && na == nb && memcmp(pa, pb, (size_t)na * sizeof *pa) == 0,
          "imported master weights differ from the exported model's");
    free(pa);
    free(pb);
    double xb = -1, lb = -1, xc = -2, lc = -2;
    CHECK_STATUS(fx_trainer_evaluate(b, tr, &xb, &lb), FX_OK);
    CHECK_STATUS(fx_trainer_evaluate(c, tr, &xc, &lc), FX_OK);
    CHECK(xb == xc && lb == lc, "import evaluates to %.6f/%.9g, a copy to %.6f/%.9g", xb, lb, xc,
          lc);
    size_t len = 0;
    uint8_t *f = slurp(path, &len);
    CHECK(f != NULL && len > 100, "read %s", path);
    if (!f) goto done;
    /* training moved the running statistics, so the equal evaluations above include them */
    {
        size_t rm = find_entry(f, len, "bn0.running_mean");
        float mean0 = 0;
        if (rm) memcpy(&mean0, f + rm + 4 + 16 + 4 + 8, 4);
        CHECK(rm && mean0 != 0.0f, "bn0.running_mean[0] is %g after training", (double)mean0);
    }
    uint8_t *g = malloc(len + 64);

    memcpy(g, f, len);
    g[len / 2] ^= 0x40;
    spit(bad, g, len, 0);
    refused(b, bad, FX_ECORRUPT, "checksum", "a flipped byte");
    spit(bad, f, len - 9, 0);
    refused(b, bad, FX_ECORRUPT, "checksum", "truncated");
    memcpy(g, f, len);
    g[0] = 'X';
    spit(bad, g, len, 1);
    refused(b, bad, FX_ECORRUPT, "not a flexpoint weights file", "another magic");
    memcpy(g, f, len);
    g[8] = 2;
    spit(bad, g, len, 1);
    refused(b, bad, FX_ECORRUPT, "version 2", "another version");

    size_t e = find_entry(f, len, "conv0.w");
    CHECK(e > 0, "conv0.w not found in the file");
    if (e) {
        memcpy(g, f, len);
        g[e + 4 + 6] = 'W'; /* conv0.w -> conv0.W */
        spit(bad, g, len, 1);
        refused(b, bad, FX_ESHAPE, "'conv0.W' is neither a parameter", "an unknown name");
        memcpy(g, f, len);
        int64_t s0;
        memcpy(&s0, g + e + 4 + 7 + 4, 8);
        s0 += 1; /* first dimension; the values are then misaligned but the shape is checked
                    first */
        memcpy(g + e + 4 + 7 + 4, &s0, 8);
        spit(bad, g, len, 1);
        refused(b, bad, FX_ESHAPE, "another shape", "another shape");
        memcpy(g, f, len);
        float nan = NAN;
        memcpy(g + e + 4 + 7 + 4 + 4 * 8 + 12, &nan, 4); /* the 4th value of conv0.w */
        spit(bad, g, len, 1);
        refused(b, bad, FX_ERANGE, "conv0.w[3] is nan", "a NaN value");
    }
    size_t v = find_entry(f, len, "bn0.running_var");
    CHECK(v > 0, "bn0.running_var not found in the file");
    if (v) {
        memcpy(g, f, len);
        float neg = -1.0f;
        memcpy(g + v + 4 + 15 + 4 + 8, &neg, 4);
        spit(bad, g, len, 1);
        refused(b, bad, FX_ERANGE, "a variance is not negative", "a negative variance");
        memcpy(g, f, len);
        memcpy(g + v + 4, "bn0.running_vas", 15);
        spit(bad, g, len, 1);
        refused(b, bad, FX_ESHAPE, "'bn0.running_vas'", "a renamed statistic");
    }
    {
        /* a repeated name: fc.b renamed to fc.w */
        size_t fc = find_entry(f, len, "fc.w"), fb = find_entry(f, len, "fc.b");
        CHECK(fc && fb, "fc.w/fc.b not found");
        if (fc && fb) {
            memcpy(g, f, len);
            memcpy(g + fb + 4, "fc.w", 4);
            spit(bad, g, len, 1);
            refused(b, bad, FX_ECORRUPT, "'fc.w' appears twice", "a repeated name");
        }
    }
    memcpy(g, f, len);
    memset(g + len, 0, 8);
    spit(bad, g, len + 8, 1);
    refused(b, bad, FX_ECORRUPT, "unexpected bytes", "trailing bytes");
    snprintf(bad, sizeof bad, "%s/none.fxw", dir);
    refused(b, bad, FX_EIO, "none.fxw", "a missing file");
    refused(b, dir, FX_EIO, "not a regular file", "a folder");
    CHECK_STATUS(fx_trainer_import_weights(NULL, path), FX_EINVAL);
    CHECK_STATUS(fx_trainer_import_weights(b, NULL), FX_EINVAL);
    CHECK_STATUS(fx_trainer_export_weights(NULL, path), FX_EINVAL);
    free(g);
    free(f);

    /* another model's file: the first name it lacks is named */
    {
        fx_train_config mc;
        test_train_config(&mc, "mlp", FMT_FP32, 1);
        mc.batch_size = 16;
        fx_trainer *mlp = fx_trainer_new(&mc, tr, NULL);
        CHECK(mlp != NULL, "mlp: %s", flexpoint_last_error());
        if (mlp) refused(mlp, path, FX_ECORRUPT, "tensors, the model has", "another model");
        fx_trainer_free(mlp);
    }

    /* export refuses non-finite weights and leaves no file */
    {
        fx_train_config nc;
        test_train_config(&nc, "mlp", FMT_FP32, 1);
        nc.batch_size = 16;
        fx_trainer *t = fx_trainer_new(&nc, tr, NULL);
        int i = t ? fx_trainer_tensor_find(t, "fc1.w") : -1;
        CHECK(i >= 0, "fc1.w: %s", flexpoint_last_error());
        if (i >= 0) {
            tensor_t *w = fx_trainer_tensor(t, i);
            int64_t n = tensor_numel(w);
            float *vals = malloc((size_t)n * sizeof *vals);
            CHECK_STATUS(tensor_to_f32(w, vals), FX_OK);
            vals[5] = INFINITY;
            CHECK_STATUS(tensor_from_f32(w, vals), FX_OK);
            free(vals);
            char out[512];
            snprintf(out, sizeof out, "%s/inf.fxw", dir);
            CHECK_STATUS(fx_trainer_export_weights(t, out), FX_ERANGE);
            CHECK(strstr(flexpoint_last_error(), "fc1.w[5] is inf") != NULL, "message '%s'",
                  flexpoint_last_error());
            struct stat st;
            CHECK(stat(out, &st) != 0, "a refused export left %s", out);
        }
        fx_trainer_free(t);
    }
done:
    fx_trainer_free(a);
    fx_trainer_free(b);
    fx_trainer_free(c);
    fx_dataset_free(tr);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "%s: could not remove %s\n", NAME, dir);
    return test_finish(NAME);
}
