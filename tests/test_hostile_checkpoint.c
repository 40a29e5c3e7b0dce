/* Checkpoints an adversary wrote: files whose checksum is right but whose fields are
 * impossible, a flipped bit in the length field, saves of non-finite weights, and the
 * temporaries that killed saves leave behind.
 *
 * Each field case writes a valid checkpoint, changes one field, recomputes the CRC so that
 * only the field's meaning is wrong, and asserts FX_ECORRUPT, a message naming the file, the
 * field and the value, and a trainer whose complete state (every byte a save would write) is
 * what it was before the load. The fuzzer's checkpoint corpus (tests/fuzz/corpus/checkpoint/)
 * is replayed too: ok-* inputs must load, bad-* must be refused, none may break a property.
 * The file versions: versions 2 and 3 load for a model without attention layers only, the
 * others but 4 are refused (version_cases). */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"
#include "testutil.h"
#include "train/checkpoint.h"
#include "fuzz/fuzz_checkpoint_inputs.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[256];

static uint8_t *file_bytes(const char *path, size_t *len)
{
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && fread(b, 1, (size_t)n, f) == (size_t)n) *len = (size_t)n;
    fclose(f);
    return b;
}

static void write_bytes(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, len, f) == len, "cannot write %s", path);
    if (f) fclose(f);
}

static void fix_crc(uint8_t *b, size_t len)
{
    uint32_t crc = fx_crc32(b + FX_CKPT_HEADER_BYTES, len - FX_CKPT_HEADER_BYTES);
    memcpy(b + FX_CKPT_OFF_CRC, &crc, 4);
}

/* Every byte a save would write for t (the trainer's complete state). */
static fx_buf state_of(fx_trainer *t)
{
    fx_buf b = {0};
    int rc = fx_ckpt_encode(t, &b, NULL, "state");
    CHECK(rc == FX_OK, "encode: %s", flexpoint_last_error());
    return b;
}

static int same_state(fx_trainer *t, const fx_buf *before)
{
    fx_buf now = state_of(t);
    int same = now.len == before->len && memcmp(now.data, before->data, now.len) == 0;
    fx_buf_free(&now);
    return same;
}

static fx_trainer *make(const char *model, int fmt, int scaling, int master, int batch,
                        const fx_dataset *tr)
{
    fx_train_config c;
    test_train_config(&c, model, fmt, 11);
    c.loss_scaling = scaling;
    c.master_weights = master;
    c.batch_size = batch;
    fx_trainer *t = fx_trainer_new(&c, tr, NULL);
    CHECK(t != NULL, "trainer %s: %s", model, flexpoint_last_error());
    return t;
}

/* Load bad[0..len) into t: FX_ECORRUPT, the message names the file and every `want`, and
 * t's state is unchanged. */
static void expect_refused(fx_trainer *t, const char *what, const uint8_t *bad, size_t len,
                           const char *want1, const char *want2)
{
    char path[512];
    snprintf(path, sizeof path, "%s/bad.ckpt", tmpdir);
    write_bytes(path, bad, len);
    fx_buf before = state_of(t);
    int64_t step = fx_trainer_global_step(t);
    int rc = fx_trainer_load(t, path);
    const char *msg = flexpoint_last_error();
    if (getenv("FX_TEST_VERBOSE")) printf("%-28s %s\n", what, msg);
    CHECK(rc == FX_ECORRUPT, "%s: load returned %d (%s)", what, rc, msg);
    CHECK(strstr(msg, "bad.ckpt") != NULL, "%s: message does not name the file: %s", what, msg);
    CHECK(strstr(msg, want1) != NULL, "%s: message lacks '%s': %s", what, want1, msg);
    CHECK(!want2 || strstr(msg, want2) != NULL, "%s: message lacks '%s': %s", what, want2, msg);
    CHECK(fx_trainer_global_step(t) == step, "%s: global step changed", what);
    CHECK(same_state(t, &before), "%s: the trainer's state changed", what);
    fx_buf_free(&before);
}

enum { I32, I64, F64, F32 };

typedef struct field_case {
    const char *what;
    size_t off; /* in the payload */
    int type;
    double value; /* for I32 / I64 small values, else see big */
    int64_t big; /* I64 value when value is NAN-free and |value| large */
    const char *want1, *want2;
} field_case;

static void put_field(uint8_t *file, const field_case *c)
{
    uint8_t *p = file + FX_CKPT_HEADER_BYTES + c->off;
    if (c->type == I32) {
        int32_t v = (int32_t)c->big;
        memcpy(p, &v, 4);
    } else if (c->type == I64) {
        memcpy(p, &c->big, 8);
    } else if (c->type == F64) {
        memcpy(p, &c->value, 8);
    } else {
        float v = (float)c->value;
        memcpy(p, &v, 4);
    }
}

#define POS(f) (FX_CKPT_PAYLOAD_POS + offsetof(fx_ckpt_pos, f))
#define SC(f) (FX_CKPT_PAYLOAD_SCALER + offsetof(fx_loss_scaler, f))

static void field_cases(const fx_dataset *tr)
{
    /* flex16_5 with loss scaling: every kind of state (exponents, Autoflex, a live scaler) */
    fx_trainer *a = make("mlp", FMT_FLEX16_5, 1, 1, 32, tr);
    fx_trainer *b = make("mlp", FMT_FLEX16_5, 1, 1, 32, tr);
    if (!a || !b) return;
    for (int s = 0; s < 3; s++) CHECK_STATUS(fx_trainer_step(a, NULL), FX_OK);
    CHECK_STATUS(fx_trainer_step(b, NULL), FX_OK); /* b is somewhere else than the file */
    char good[512];
    snprintf(good, sizeof good, "%s/good.ckpt", tmpdir);
    CHECK_STATUS(fx_trainer_save(a, good), FX_OK);
    size_t len;
    uint8_t *file = file_bytes(good, &len);
    CHECK(file && len > 1000, "read back %zu bytes", len);
    if (!file) return;
    uint8_t *bad = malloc(len);

    const fx_trainer *ta = a;
    const size_t master0 = FX_CKPT_PAYLOAD_SCALER + sizeof(fx_loss_scaler) + 1;
    const size_t mom0 = master0 + (size_t)ta->m.params[0].n * sizeof(float) + 1;
    const field_case cases[] = {
        {"epoch INT32_MAX", POS(epoch), I32, 0, INT32_MAX, "epoch 2147483647", NULL},
        {"epoch -1", POS(epoch), I32, 0, -1, "epoch -1", NULL},
        {"negative global step", POS(global_step), I64, 0, -5, "global_step -5", NULL},
        {"global step INT64_MAX", POS(global_step), I64, 0, INT64_MAX,
         "global_step 9223372036854775807", NULL},
        {"step_in_epoch past the epoch", POS(step_in_epoch), I64, 0, 99, "step_in_epoch 99", NULL},
        {"steps_per_epoch", POS(steps_per_epoch), I64, 0, 3, "3 steps per epoch", NULL},
        {"unknown scaling mode", POS(scaling), I32, 0, 7, "loss scaling mode 7", NULL},
        {"epoch_reported 2", POS(epoch_reported), I32, 0, 2, "epoch_reported 2", NULL},
        {"reserved position field", POS(reserved), I32, 0, 1, "reserved position field is 1",
         NULL},
        {"correct > seen", POS(correct), I64, 0, 1000, "correct 1000", NULL},
        {"seen", POS(seen), I64, 0, 31, "seen 31", NULL},
        {"negative skipped", POS(skipped), I64, 0, -1, "skipped -1", NULL},
        {"nonfinite > steps", POS(nonfinite), I64, 0, 50, "nonfinite 50", NULL},
        {"NaN loss sum", POS(loss_sum), F64, NAN, 0, "loss_sum nan", NULL},
        {"infinite loss sum", POS(loss_sum), F64, INFINITY, 0, "loss_sum inf", NULL},
        {"negative seconds", POS(seconds), F64, -1.0, 0, "seconds -1", NULL},
        {"NaN loss scale", SC(scale), F64, NAN, 0, "loss scale nan", NULL},
        {"negative loss scale", SC(scale), F64, -2.0, 0, "loss scale -2", NULL},
        {"loss scale beyond fp32", SC(scale), F64, 1e300, 0, "loss scale 1e+300", NULL},
        {"backoff 0", SC(backoff_factor), F64, 0.0, 0, "backoff_factor 0", NULL},
        {"growth factor 1", SC(growth_factor), F64, 1.0, 0, "growth_factor 1", NULL},
        {"growth interval 0", SC(growth_interval), I64, 0, 0, "growth_interval 0", NULL},
        {"good steps past the interval", SC(good_steps), I64, 0, 5000, "good_steps 5000", NULL},
        {"negative skipped steps", SC(skipped_steps), I64, 0, -3, "skipped_steps -3", NULL},
        {"scaler disabled", SC(enabled), I32, 0, 0, "loss scaler enabled 0", NULL},
        {"NaN master weight", master0, F32, NAN, 0, "master weight 0 is nan", ta->m.params[0].name},
        {"infinite master weight", master0 + 5 * sizeof(float), F32, -INFINITY, 0,
         "master weight 5 is -inf", ta->m.params[0].name},
        {"NaN momentum", mom0 + 2 * sizeof(float), F32, NAN, 0, "momentum 2 is nan", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        memcpy(bad, file, len);
        put_field(bad, &cases[i]);
        fix_crc(bad, len);
        expect_refused(b, cases[i].what, bad, len, cases[i].want1, cases[i].want2);
    }

    /* header fields (outside the checksum) */
    memcpy(bad, file, len);
    bad[FX_CKPT_OFF_RESERVED] = 1;
    expect_refused(b, "reserved header field", bad, len, "reserved header field is 1", NULL);
    /* one flipped bit in the length field: 2^39 more bytes than there are. Refused by
     * comparing with the file's size before anything is allocated (an ASan build aborts on
     * a 512 GiB allocation). */
    for (int bit = 0; bit < 64; bit += 13) {
        memcpy(bad, file, len);
        bad[FX_CKPT_OFF_LENGTH + bit / 8] ^= (uint8_t)(1u << (bit % 8));
        char what[64];
        snprintf(what, sizeof what, "length bit %d", bit);
        expect_refused(b, what, bad, len, "than its header says", NULL);
    }
    memcpy(bad, file, len);
    bad[FX_CKPT_OFF_LENGTH + 4] ^= 0x80; /* bit 39 */
    expect_refused(b, "length bit 39", bad, len, "shorter than its header says", NULL);
    /* a presence byte that is neither 0 nor 1 */
    memcpy(bad, file, len);
    bad[FX_CKPT_HEADER_BYTES + master0 - 1] = 7;
    fix_crc(bad, len);
    expect_refused(b, "presence byte", bad, len, "presence byte 7", NULL);
    /* trailing bytes inside a consistent header and checksum */
    uint8_t *longer = malloc(len + 8);
    memcpy(longer, file, len);
    memset(longer + len, 0, 8);
    uint64_t plen = len + 8 - FX_CKPT_HEADER_BYTES;
    memcpy(longer + FX_CKPT_OFF_LENGTH, &plen, 8);
    fix_crc(longer, len + 8);
    expect_refused(b, "trailing bytes", longer, len + 8, "8 unexpected bytes", NULL);
    free(longer);

    /* the untouched file still loads, and b is then where a was */
    CHECK_STATUS(fx_trainer_load(b, good), FX_OK);
    CHECK(fx_trainer_global_step(b) == 3, "loaded at step %lld",
          (long long)fx_trainer_global_step(b));
    free(bad);
    free(file);
    fx_trainer_free(a);
    fx_trainer_free(b);
}

/* Batch-norm statistics: a negative running variance is refused. */
static void batchnorm_cases(void)
{
    enum { N = 8, SIDE = 8 };
    float x[N * SIDE * SIDE];
    int32_t y[N];
    for (int i = 0; i < N * SIDE * SIDE; i++) x[i] = (float)((i * 37) % 17) / 17.0f;
    for (int i = 0; i < N; i++) y[i] = i % 2;
    fx_dataset *tr = fx_dataset_from_arrays(N, 1, SIDE, SIDE, 2, x, y);
    fx_trainer *a = make("resnet20", FMT_BF16, 0, 1, 4, tr);
    fx_trainer *b = make("resnet20", FMT_BF16, 0, 1, 4, tr);
    if (!tr || !a || !b) goto done;
    CHECK_STATUS(fx_trainer_step(a, NULL), FX_OK);
    char good[512];
    snprintf(good, sizeof good, "%s/bn.ckpt", tmpdir);
    CHECK_STATUS(fx_trainer_save(a, good), FX_OK);
    size_t len;
    uint8_t *file = file_bytes(good, &len);
    if (!file) goto done;
    /* the first batch-norm layer's running variance follows every parameter buffer and its
     * running mean */
    const fx_model *m = &((const fx_trainer *)a)->m;
    size_t off = FX_CKPT_PAYLOAD_SCALER + sizeof(fx_loss_scaler);
    for (int i = 0; i < m->nparams; i++)
        off += 3 + (m->params[i].master ? (size_t)m->params[i].n * 4 : 0) +
               (m->params[i].mom ? (size_t)m->params[i].n * 4 : 0) +
               (m->params[i].var ? (size_t)m->params[i].n * 4 : 0);
    const fx_layer *bn = NULL;
    for (int i = 0; i < m->nlayers && !bn; i++)
        if (m->layers[i].kind == FX_L_BN) bn = &m->layers[i];
    CHECK(bn != NULL, "resnet20 has batch norm");
    if (bn) {
        off += 1 + (size_t)bn->channels * 4 + 1;
        float neg = -1.0f;
        memcpy(file + FX_CKPT_HEADER_BYTES + off + 4, &neg, 4);
        fix_crc(file, len);
        expect_refused(b, "negative running variance", file, len, "running variance 1 is -1",
                       bn->name);
    }
    free(file);
done:
    fx_trainer_free(a);
    fx_trainer_free(b);
    fx_dataset_free(tr);
}

/* A checkpoint's version word set to v (the CRC covers only the payload). */
static void set_version(uint8_t *file, uint32_t v) { memcpy(file + FX_CKPT_OFF_VERSION, &v, 4); }

/* Versions 3 and 4 changed the tensors of every attention layer's checkpoint state; a model
 * without attention layers saves the same bytes as before, so its version-2 and version-3
 * files still load (and give the saver's exact state), while a sequence model's version-2 or
 * version-3 file, and any version but 2 to 4, is refused with the versions in the message and
 * the trainer unchanged. */
static void version_cases(const fx_dataset *tr)
{
    char path[512];
    fx_trainer *a = make("mlp", FMT_FLEX16_5, 1, 1, 32, tr);
    fx_trainer *b = make("mlp", FMT_FLEX16_5, 1, 1, 32, tr);
    if (a && b) {
        for (int s = 0; s < 2; s++) CHECK_STATUS(fx_trainer_step(a, NULL), FX_OK);
        snprintf(path, sizeof path, "%s/v.ckpt", tmpdir);
        CHECK_STATUS(fx_trainer_save(a, path), FX_OK);
        size_t len;
        uint8_t *file = file_bytes(path, &len);
        uint32_t v = 0;
        if (file) memcpy(&v, file + FX_CKPT_OFF_VERSION, 4);
        CHECK(file && v == FX_CKPT_VERSION, "a save writes version %u", (unsigned)v);
        for (uint32_t old = 2; file && old <= 3; old++) {
            set_version(file, old);
            snprintf(path, sizeof path, "%s/v%u.ckpt", tmpdir, (unsigned)old);
            write_bytes(path, file, len);
            CHECK_STATUS(fx_trainer_load(b, path), FX_OK);
            fx_buf want = state_of(a);
            CHECK(same_state(b, &want), "a version-%u file of an MLP did not restore its state",
                  (unsigned)old);
            fx_buf_free(&want);
        }
        if (file) {
            const uint32_t refused_versions[] = {1, 5, 0xffffffffu};
            for (int i = 0; i < 3; i++) {
                set_version(file, refused_versions[i]);
                char want1[32];
                snprintf(want1, sizeof want1, "version %u", (unsigned)refused_versions[i]);
                expect_refused(b, want1, file, len, want1, "reads version 4");
            }
        }
        free(file);
    }
    fx_trainer_free(a);
    fx_trainer_free(b);

    /* a sequence model: versions 2 and 3 refused, version 4 loads */
    snprintf(path, sizeof path, "%s/text.txt", tmpdir);
    FILE *f = fopen(path, "w");
    for (int i = 0; f && i < 40; i++) fputs("the cat sat on the mat. ", f);
    if (f) fclose(f);
    fx_dataset *ttr = NULL, *tva = NULL;
    CHECK_STATUS(fx_dataset_text(path, 8, 0.1, &ttr, &tva), FX_OK);
    unlink(path);
    if (!ttr) return;
    fx_train_config cfg;
    test_lm_config(&cfg, "gpt1x16h2c8");
    fx_trainer *s = fx_trainer_new(&cfg, ttr, NULL), *u = fx_trainer_new(&cfg, ttr, NULL);
    CHECK(s && u, "trainers of gpt1x16h2c8: %s", flexpoint_last_error());
    if (s && u) {
        CHECK_STATUS(fx_trainer_step(s, NULL), FX_OK);
        snprintf(path, sizeof path, "%s/seq.ckpt", tmpdir);
        CHECK_STATUS(fx_trainer_save(s, path), FX_OK);
        size_t len;
        uint8_t *file = file_bytes(path, &len);
        if (file) {
            for (uint32_t old = 2; old <= 3; old++) {
                set_version(file, old);
                char what[64], want1[32];
                snprintf(what, sizeof what, "a sequence model's version %u", (unsigned)old);
                snprintf(want1, sizeof want1, "version %u", (unsigned)old);
                expect_refused(u, what, file, len, want1, "attention layers");
            }
            CHECK_STATUS(fx_trainer_load(u, path), FX_OK); /* the saved file, version 4 */
            fx_buf want = state_of(s);
            CHECK(same_state(u, &want), "a sequence model's checkpoint did not restore its state");
            fx_buf_free(&want);
        }
        free(file);
    }
    fx_trainer_free(s);
    fx_trainer_free(u);
    fx_dataset_free(ttr);
    fx_dataset_free(tva);
}

/* Count the entries of tmpdir whose name contains `part`. */
static int count_named(const char *part)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) n += strstr(e->d_name, part) != NULL;
    if (d) closedir(d);
    return n;
}

/* A save of non-finite weights is refused with a message, and the previous file stays. */
static void nonfinite_saves(const fx_dataset *tr)
{
    char path[512];
    snprintf(path, sizeof path, "%s/keep.ckpt", tmpdir);
    fx_trainer *t = make("mlp", FMT_FP16, -1, 1, 32, tr);
    if (!t) return;
    CHECK_STATUS(fx_trainer_step(t, NULL), FX_OK);
    CHECK_STATUS(fx_trainer_save(t, path), FX_OK);
    size_t len0, len1;
    uint8_t *before = file_bytes(path, &len0);
    fx_trainer *tt = t;
    float *master = tt->m.params[1].master;
    float saved = master[3];
    master[3] = NAN;
    CHECK_STATUS(fx_trainer_save(t, path), FX_ERANGE);
    const char *msg = flexpoint_last_error();
    CHECK(strstr(msg, "master weight 3 is nan") && strstr(msg, tt->m.params[1].name) &&
          strstr(msg, "keep.ckpt"), "message: %s", msg);
    master[3] = INFINITY;
    CHECK_STATUS(fx_trainer_save(t, path), FX_ERANGE);
    master[3] = saved;
    tt->m.params[0].mom[0] = NAN;
    CHECK_STATUS(fx_trainer_save(t, path), FX_ERANGE);
    CHECK(strstr(flexpoint_last_error(), "momentum 0 is nan"), "message: %s",
          flexpoint_last_error());
    uint8_t *after = file_bytes(path, &len1);
    CHECK(before && after && len0 == len1 && memcmp(before, after, len0) == 0,
          "the previous checkpoint changed");
    CHECK(count_named("keep.ckpt.tmp") == 0, "a temporary was left behind");
    free(before);
    free(after);
    fx_trainer_free(t);

    /* without master weights the working weights are what is saved */
    t = make("mlp", FMT_FP32, 0, 0, 32, tr);
    if (!t) return;
    int w = fx_trainer_tensor_find(t, "fc2.w");
    CHECK(w >= 0, "fc2.w: %s", flexpoint_last_error());
    if (w >= 0) {
        tensor_t *x = fx_trainer_tensor(t, w);
        int64_t n = tensor_numel(x);
        float *v = malloc((size_t)n * sizeof(float));
        CHECK_STATUS(tensor_to_f32(x, v), FX_OK);
        v[n - 1] = INFINITY;
        CHECK_STATUS(tensor_from_f32(x, v), FX_OK);
        CHECK_STATUS(fx_trainer_save(t, path), FX_ERANGE);
        char want[64];
        snprintf(want, sizeof want, "weight %lld is inf", (long long)(n - 1));
        CHECK(strstr(flexpoint_last_error(), want), "message: %s", flexpoint_last_error());
        free(v);
    }
    fx_trainer_free(t);
}

static void make_file(const char *name, const void *data, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    write_bytes(p, data, n);
}

static int exists(const char *name)
{
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    return lstat(p, &st) == 0;
}

/* A pid that no process has: a child that exited and was reaped. */
static long dead_pid(void)
{
    pid_t child = fork();
    if (child == 0) _exit(0);
    CHECK(child > 0, "fork: %s", strerror(errno));
    if (child > 0) waitpid(child, NULL, 0);
    return (long)child;
}

static void plant(const char *target, long pid, const void *data, size_t n)
{
    char name[128];
    snprintf(name, sizeof name, "%s.tmp.%ld", target, pid);
    make_file(name, data, n);
}

static int planted(const char *target, long pid)
{
    char name[128];
    snprintf(name, sizeof name, "%s.tmp.%ld", target, pid);
    return exists(name);
}

/* Temporaries that killed writers left are removed by the next write of the same target
 * (checkpoint saves, weights exports, trace files); nothing else is: not the temporaries of
 * other targets, of live processes, links, folders, nor files holding another kind of data. */
static void stale_temporaries(const fx_dataset *tr)
{
    long dead[6];
    for (int i = 0; i < 6; i++) dead[i] = dead_pid();
    if (dead[0] <= 0) return;
    long self = (long)getpid(), parent = (long)getppid();
    const char ckpt[] = "FLEXCKPT\x01\0\0\0", wts[] = "FXWEIGHT\x01\0\0\0";
    /* the target's own temporaries of dead processes: removed */
    plant("e8.ckpt", dead[0], ckpt, sizeof ckpt - 1);
    plant("e8.ckpt", dead[1], "", 0);
    plant("e8.ckpt", dead[2], "FLEX", 4); /* killed within its first write */
    /* everything else: kept */
    plant("e8.ckpt", dead[3], "hello", 5);         /* not the start of a checkpoint */
    plant("e8.ckpt", dead[4], wts, sizeof wts - 1); /* another kind of file */
    plant("e8.ckpt", parent, ckpt, sizeof ckpt - 1); /* a live process */
    plant("e3.ckpt", dead[0], ckpt, sizeof ckpt - 1); /* another target */
    plant("e3.ckpt", dead[1], "", 0);
    plant("notes.txt", dead[0], "", 0); /* an empty temporary of an unrelated file */
    plant("notes.txt", dead[1], "hello", 5);
    plant("xe8.ckpt", dead[0], ckpt, sizeof ckpt - 1); /* the target's name is a suffix */
    char p[512], target[512], name[128];
    snprintf(name, sizeof name, "e8.ckpt.tmp.%ld", dead[5]);
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    snprintf(target, sizeof target, "%s/e3.ckpt.tmp.%ld", tmpdir, dead[0]);
    CHECK(symlink(target, p) == 0, "symlink: %s", strerror(errno));
    long dir_pid = dead_pid();
    snprintf(p, sizeof p, "%s/e8.ckpt.tmp.%ld", tmpdir, dir_pid);
    CHECK(mkdir(p, 0700) == 0, "mkdir: %s", strerror(errno));

    fx_trainer *t = make("mlp", FMT_BF16, 0, 1, 32, tr);
    snprintf(p, sizeof p, "%s/e8.ckpt", tmpdir);
    if (t) CHECK_STATUS(fx_trainer_save(t, p), FX_OK);
    for (int i = 0; i < 3; i++)
        CHECK(!planted("e8.ckpt", dead[i]), "stale temporary e8.ckpt.tmp.%ld was not removed",
              dead[i]);
    CHECK(planted("e8.ckpt", dead[3]), "a temporary that is no checkpoint was removed");
    CHECK(planted("e8.ckpt", dead[4]), "a weights-file temporary was removed by a save");
    CHECK(planted("e8.ckpt", parent), "the temporary of a live process was removed");
    CHECK(planted("e3.ckpt", dead[0]) && planted("e3.ckpt", dead[1]),
          "a temporary of another checkpoint was removed");
    CHECK(planted("notes.txt", dead[0]) && planted("notes.txt", dead[1]),
          "a temporary of an unrelated file was removed");
    CHECK(planted("xe8.ckpt", dead[0]), "a temporary of a longer name was removed");
    CHECK(planted("e8.ckpt", dead[5]), "a symbolic link was removed");
    CHECK(planted("e8.ckpt", dir_pid), "a folder was removed");
    CHECK(!planted("e8.ckpt", self), "the save left its own temporary");

    /* a leftover under this very process's temporary name (an earlier process had the pid) is
     * replaced, not an obstacle */
    char own[600];
    snprintf(own, sizeof own, "%s.tmp.%ld", p, self);
    write_bytes(own, (const uint8_t *)"junk", 4);
    if (t) CHECK_STATUS(fx_trainer_save(t, p), FX_OK);
    CHECK(access(own, F_OK) != 0, "%s is still there", own);

    /* weights files: the export removes its own kind, keeps a checkpoint's */
    plant("w.fxw", dead[0], wts, sizeof wts - 1);
    plant("w.fxw", dead[1], ckpt, sizeof ckpt - 1);
    snprintf(p, sizeof p, "%s/w.fxw", tmpdir);
    if (t) CHECK_STATUS(fx_trainer_export_weights(t, p), FX_OK);
    CHECK(!planted("w.fxw", dead[0]), "a stale weights-file temporary was not removed");
    CHECK(planted("w.fxw", dead[1]), "a checkpoint temporary was removed by a weights export");

    /* trace files: the same scheme, recognised by the CSV header */
    const char head[] = "write,exp,clamped,overflow";
    plant("t.csv", dead[0], head, sizeof head - 1);
    plant("t.csv", dead[1], "hello", 5);
    int64_t shape[1] = {4};
    tensor_t *x = tensor_new(FMT_FLEX16_5, 1, shape);
    float v[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    CHECK(x && tensor_trace_enable(x, 1) == FX_OK && tensor_from_f32(x, v) == FX_OK,
          "trace tensor: %s", flexpoint_last_error());
    snprintf(p, sizeof p, "%s/t.csv", tmpdir);
    if (x) CHECK_STATUS(tensor_trace_write_csv(x, p), FX_OK);
    CHECK(!planted("t.csv", dead[0]), "a stale trace temporary was not removed");
    CHECK(planted("t.csv", dead[1]), "a temporary that is no trace was removed");
    tensor_free(x);

    snprintf(p, sizeof p, "%s/e8.ckpt.tmp.%ld", tmpdir, dir_pid);
    rmdir(p); /* main removes the files */
    fx_trainer_free(t);
}

/* Every input of the fuzzer's corpus, with the fuzzer's property checks. */
static void corpus_replay(void)
{
    fx_fuzz_ckpt f;
    int rc = fx_fuzz_ckpt_setup(&f);
    CHECK(rc == FX_OK, "fuzz setup: %s", flexpoint_last_error());
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/checkpoint", FX_SOURCE_DIR);
    DIR *d = rc == FX_OK ? opendir(dir) : NULL;
    CHECK(d != NULL, "cannot open %s", dir);
    int ok = 0, bad = 0, files = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        size_t len;
        uint8_t *data = file_bytes(p, &len);
        CHECK(data != NULL, "cannot read %s", p);
        if (!data) continue;
        files++;
        rc = fx_fuzz_ckpt_input(&f, data, len);
        CHECK(rc != FX_FUZZ_BROKEN, "%s: broken property; last error: %s", e->d_name,
              flexpoint_last_error());
        if (strncmp(e->d_name, "ok-", 3) == 0) {
            ok++;
            CHECK(rc == FX_OK, "%s: refused: %s", e->d_name, flexpoint_last_error());
        } else if (strncmp(e->d_name, "bad-", 4) == 0) {
            bad++;
            CHECK(rc < 0, "%s: accepted", e->d_name);
        }
        if (getenv("FX_TEST_VERBOSE"))
            printf("%-28s %d %s\n", e->d_name, rc, rc ? flexpoint_last_error() : "");
        free(data);
    }
    if (d) closedir(d);
    CHECK(ok > 0 && bad > 0, "corpus: %d files, %d ok-*, %d bad-*", files, ok, bad);
    fx_fuzz_ckpt_teardown(&f);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fx_hostile_ckpt_XXXXXX");
    if (!mkdtemp(tmpdir)) return test_skip("test_hostile_checkpoint", "no temporary folder");
    flexpoint_set_num_threads(1);
    fx_dataset *tr = test_patch_dataset(64, 5);
    CHECK(tr != NULL, "dataset: %s", flexpoint_last_error());
    if (tr) {
        field_cases(tr);
        nonfinite_saves(tr);
        stale_temporaries(tr);
        version_cases(tr);
    }
    batchnorm_cases();
    corpus_replay();
    fx_dataset_free(tr);
    /* leave nothing behind */
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(tmpdir);
    return test_finish("test_hostile_checkpoint");
}
