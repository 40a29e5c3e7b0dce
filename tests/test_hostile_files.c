/* Every file the library reads can be something other than a file: a FIFO (whose open would
 * wait for a writer forever), a folder, a character device or a symbolic-link loop. Each must
 * be refused quickly with FX_EIO and a message naming the path and the problem. Every call is
 * bounded by an alarm: a hang fails the test with the name of the case instead of stalling it.
 *
 * Readers covered: the Fashion-MNIST loader (the .gz name and the plain fallback), the
 * CIFAR-10 loader (train and test batches), the whole-file reader under both, checkpoint
 * loads, fx_checkpoint_config and weights-file imports. Checkpoint saves, weights-file exports
 * and Autoflex trace files are covered where a planted name could block or redirect them: the
 * target and the temporary name. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"
#include "testutil.h"
#include "data/data_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Generous for a sanitiser build on a loaded machine; a refused file takes microseconds. */
enum { CASE_SECONDS = 20 };

static char tmpdir[256];
static const char *current_case = "";

static void on_alarm(int sig)
{
    (void)sig;
    /* only async-signal-safe calls here */
    const char *a = "test_hostile_files: hung (no answer within the alarm) in case: ";
    if (write(2, a, strlen(a)) < 0 || write(2, current_case, strlen(current_case)) < 0 ||
        write(2, "\n", 1) < 0)
        _exit(1);
    _exit(1);
}

static void begin(const char *name)
{
    current_case = name;
    alarm(CASE_SECONDS);
}

static void end(void) { alarm(0); }

typedef enum { K_FIFO, K_FOLDER, K_LOOP, K_DEVICE, K_COUNT } kind_t;
static const char *const kind_names[K_COUNT] = {"FIFO", "folder", "symlink loop", "device"};
static const char *const kind_problem[K_COUNT] = {
    "not a regular file (a FIFO)", "not a regular file (a folder)",
    "too many levels of symbolic links", "not a regular file (a character device)"};

/* Create `path` as something hostile of kind k. */
static int make_hostile(const char *path, kind_t k)
{
    switch (k) {
    case K_FIFO: return mkfifo(path, 0600);
    case K_FOLDER: return mkdir(path, 0700);
    case K_LOOP: return symlink(path, path); /* a link to itself */
    default: return symlink("/dev/null", path);
    }
}

static void remove_hostile(const char *path)
{
    if (rmdir(path) != 0) unlink(path);
}

static void expect_refusal(const char *what, int rc, const char *path, kind_t k)
{
    const char *msg = flexpoint_last_error();
    CHECK(rc == FX_EIO, "%s (%s): status %d, want FX_EIO; message: %s", what, kind_names[k], rc,
          msg);
    CHECK(strstr(msg, path) != NULL, "%s (%s): message does not name %s: %s", what,
          kind_names[k], path, msg);
    CHECK(strstr(msg, kind_problem[k]) != NULL, "%s (%s): message lacks '%s': %s", what,
          kind_names[k], kind_problem[k], msg);
}

static void write_file(const char *path, const uint8_t *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, n, f) == n, "cannot write %s", path);
    if (f) fclose(f);
}

/* The whole-file reader the loaders share. */
static void file_reader(kind_t k)
{
    char p[512];
    snprintf(p, sizeof p, "%s/raw.bin", tmpdir);
    CHECK(make_hostile(p, k) == 0, "make %s: %s", p, strerror(errno));
    uint8_t *buf = (uint8_t *)"x";
    size_t len = 1;
    begin("fx_data_read_file");
    int rc = fx_data_read_file(p, "test", 1 << 20, &buf, &len);
    end();
    expect_refusal("fx_data_read_file", rc, p, k);
    CHECK(buf == NULL && len == 0, "outputs not cleared");
    begin("fx_file_open_regular");
    int fd = 7;
    int64_t size = 7;
    rc = fx_file_open_regular(p, "test", &fd, &size);
    end();
    expect_refusal("fx_file_open_regular", rc, p, k);
    CHECK(fd == -1 && size == 0, "outputs not cleared");
    remove_hostile(p);
}

/* Fashion-MNIST: the .gz name hostile; then no .gz and the plain name hostile (after a valid
 * images file, so that the labels file is the one reached). */
static void fashion_mnist(kind_t k)
{
    char d[512], p[600];
    snprintf(d, sizeof d, "%s/fmnist", tmpdir);
    mkdir(d, 0700);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", d);
    CHECK(make_hostile(p, k) == 0, "make %s: %s", p, strerror(errno));
    begin("fx_dataset_fashion_mnist (.gz)");
    fx_dataset *ds = fx_dataset_fashion_mnist(d, 1);
    end();
    CHECK(ds == NULL, "a dataset from a hostile file");
    expect_refusal("fashion-mnist images .gz", flexpoint_last_status(), p, k);
    fx_dataset_free(ds);
    remove_hostile(p);

    /* one 1x1 image */
    static const uint8_t images[] = {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 200};
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", d);
    write_file(p, images, sizeof images);
    char lab[600];
    snprintf(lab, sizeof lab, "%s/t10k-labels-idx1-ubyte", d);
    CHECK(make_hostile(lab, k) == 0, "make %s: %s", lab, strerror(errno));
    begin("fx_dataset_fashion_mnist (plain)");
    ds = fx_dataset_fashion_mnist(d, 0);
    end();
    CHECK(ds == NULL, "a dataset from a hostile file");
    expect_refusal("fashion-mnist labels", flexpoint_last_status(), lab, k);
    fx_dataset_free(ds);
    remove_hostile(lab);
    unlink(p);
    rmdir(d);
}

static void cifar10(kind_t k)
{
    char d[512], p[600];
    snprintf(d, sizeof d, "%s/cifar", tmpdir);
    mkdir(d, 0700);
    for (int train = 0; train <= 1; train++) {
        snprintf(p, sizeof p, "%s/%s", d, train ? "data_batch_1.bin" : "test_batch.bin");
        CHECK(make_hostile(p, k) == 0, "make %s: %s", p, strerror(errno));
        begin(train ? "fx_dataset_cifar10 (train)" : "fx_dataset_cifar10 (test)");
        fx_dataset *ds = fx_dataset_cifar10(d, train);
        end();
        CHECK(ds == NULL, "a dataset from a hostile file");
        expect_refusal("cifar10", flexpoint_last_status(), p, k);
        fx_dataset_free(ds);
        remove_hostile(p);
    }
    rmdir(d);
}

static void checkpoints(fx_trainer *t, kind_t k)
{
    char p[512];
    snprintf(p, sizeof p, "%s/hostile.ckpt", tmpdir);
    CHECK(make_hostile(p, k) == 0, "make %s: %s", p, strerror(errno));
    int64_t step = fx_trainer_global_step(t);
    begin("fx_trainer_load");
    int rc = fx_trainer_load(t, p);
    end();
    expect_refusal("fx_trainer_load", rc, p, k);
    CHECK(fx_trainer_global_step(t) == step, "the trainer moved");
    remove_hostile(p);

    /* a planted temporary name: refused (not written through, not waited on), left alone */
    char planted[600];
    snprintf(p, sizeof p, "%s/save.ckpt", tmpdir);
    snprintf(planted, sizeof planted, "%s.tmp.%ld", p, (long)getpid());
    CHECK(make_hostile(planted, k) == 0, "make %s: %s", planted, strerror(errno));
    begin("fx_trainer_save (planted temporary)");
    rc = fx_trainer_save(t, p);
    end();
    CHECK(rc == FX_EIO && strstr(flexpoint_last_error(), planted),
          "save with a planted %s temporary: %d %s", kind_names[k], rc, flexpoint_last_error());
    struct stat st;
    CHECK(lstat(planted, &st) == 0 && !S_ISREG(st.st_mode), "the planted %s was replaced",
          kind_names[k]);
    remove_hostile(planted);
    unlink(p);

    /* the target itself hostile: a FIFO, link or device entry is replaced by the rename; a
     * folder cannot be, and the save says so */
    CHECK(make_hostile(p, k) == 0, "make %s: %s", p, strerror(errno));
    begin("fx_trainer_save (hostile target)");
    rc = fx_trainer_save(t, p);
    end();
    if (k == K_FOLDER) {
        CHECK(rc == FX_EIO && strstr(flexpoint_last_error(), "save.ckpt"),
              "save over a folder: %d %s", rc, flexpoint_last_error());
    } else {
        CHECK(rc == FX_OK, "save over a %s: %s", kind_names[k], flexpoint_last_error());
        CHECK(lstat(p, &st) == 0 && S_ISREG(st.st_mode), "not replaced by a regular file");
        begin("fx_trainer_load (replaced target)");
        CHECK_STATUS(fx_trainer_load(t, p), FX_OK);
        end();
    }
    remove_hostile(p);
}

/* The newer readers and writers: fx_checkpoint_config (what --eval reads first),
 * fx_trainer_import_weights, and fx_trainer_export_weights' planted temporary and target. */
static void weights_and_config(fx_trainer *t, kind_t k)
{
    char p[512];
    snprintf(p, sizeof p, "%s/hostile.bin", tmpdir);
    CHECK(make_hostile(p, k) == 0, "make %s: %s", p, strerror(errno));
    fx_train_config c;
    memset(&c, 0x5a, sizeof c);
    begin("fx_checkpoint_config");
    int rc = fx_checkpoint_config(p, &c);
    end();
    expect_refusal("fx_checkpoint_config", rc, p, k);
    int64_t n = fx_trainer_param_count(t);
    float *before = malloc((size_t)n * sizeof(float)), *after = malloc((size_t)n * sizeof(float));
    CHECK(n > 0 && before && after, "param_count %lld", (long long)n);
    if (before) CHECK_STATUS(fx_trainer_get_params(t, before), FX_OK);
    begin("fx_trainer_import_weights");
    rc = fx_trainer_import_weights(t, p);
    end();
    expect_refusal("fx_trainer_import_weights", rc, p, k);
    if (after) CHECK_STATUS(fx_trainer_get_params(t, after), FX_OK);
    CHECK(before && after && memcmp(before, after, (size_t)n * sizeof(float)) == 0,
          "a refused import changed the weights");
    free(before);
    free(after);
    remove_hostile(p);

    char planted[600];
    snprintf(p, sizeof p, "%s/w.fxw", tmpdir);
    snprintf(planted, sizeof planted, "%s.tmp.%ld", p, (long)getpid());
    CHECK(make_hostile(planted, k) == 0, "make %s: %s", planted, strerror(errno));
    begin("fx_trainer_export_weights (planted temporary)");
    rc = fx_trainer_export_weights(t, p);
    end();
    CHECK(rc == FX_EIO && strstr(flexpoint_last_error(), planted),
          "export with a planted %s temporary: %d %s", kind_names[k], rc,
          flexpoint_last_error());
    struct stat st;
    CHECK(lstat(planted, &st) == 0 && !S_ISREG(st.st_mode), "the planted %s was replaced",
          kind_names[k]);
    CHECK(lstat(p, &st) != 0, "a refused export created %s", p);
    remove_hostile(planted);

    CHECK(make_hostile(p, k) == 0, "make %s: %s", p, strerror(errno));
    begin("fx_trainer_export_weights (hostile target)");
    rc = fx_trainer_export_weights(t, p);
    end();
    if (k == K_FOLDER) {
        CHECK(rc == FX_EIO && strstr(flexpoint_last_error(), "w.fxw"),
              "export over a folder: %d %s", rc, flexpoint_last_error());
    } else {
        CHECK(rc == FX_OK, "export over a %s: %s", kind_names[k], flexpoint_last_error());
        CHECK(lstat(p, &st) == 0 && S_ISREG(st.st_mode), "not replaced by a regular file");
        begin("fx_trainer_import_weights (replaced target)");
        CHECK_STATUS(fx_trainer_import_weights(t, p), FX_OK);
        end();
    }
    remove_hostile(p);
}

/* tensor_trace_write_csv: a planted temporary is refused and left alone; a hostile target
 * (but a folder) is replaced by the rename */
static void trace_files(kind_t k)
{
    int64_t shape[1] = {4};
    tensor_t *x = tensor_new(FMT_FLEX16_5, 1, shape);
    float v[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    CHECK(x != NULL, "tensor_new: %s", flexpoint_last_error());
    if (!x) return;
    CHECK_STATUS(tensor_trace_enable(x, 1), FX_OK);
    CHECK_STATUS(tensor_from_f32(x, v), FX_OK);

    char p[512], planted[600];
    snprintf(p, sizeof p, "%s/trace.csv", tmpdir);
    snprintf(planted, sizeof planted, "%s.tmp.%ld", p, (long)getpid());
    CHECK(make_hostile(planted, k) == 0, "make %s: %s", planted, strerror(errno));
    begin("tensor_trace_write_csv (planted temporary)");
    int rc = tensor_trace_write_csv(x, p);
    end();
    CHECK(rc == FX_EIO && strstr(flexpoint_last_error(), planted),
          "trace with a planted %s temporary: %d %s", kind_names[k], rc, flexpoint_last_error());
    struct stat st;
    CHECK(lstat(planted, &st) == 0 && !S_ISREG(st.st_mode), "the planted %s was replaced",
          kind_names[k]);
    CHECK(lstat(p, &st) != 0, "a refused trace write created %s", p);
    remove_hostile(planted);

    CHECK(make_hostile(p, k) == 0, "make %s: %s", p, strerror(errno));
    begin("tensor_trace_write_csv (hostile target)");
    rc = tensor_trace_write_csv(x, p);
    end();
    if (k == K_FOLDER) {
        CHECK(rc == FX_EIO && strstr(flexpoint_last_error(), "trace.csv"),
              "trace over a folder: %d %s", rc, flexpoint_last_error());
    } else {
        CHECK(rc == FX_OK, "trace over a %s: %s", kind_names[k], flexpoint_last_error());
        CHECK(lstat(p, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0,
              "trace target not replaced by a regular file");
    }
    remove_hostile(p);
    tensor_free(x);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fx_hostile_files_XXXXXX");
    if (!mkdtemp(tmpdir)) return test_skip("test_hostile_files", "no temporary folder");
    signal(SIGALRM, on_alarm);
    flexpoint_set_num_threads(1);
    fx_dataset *tr = test_patch_dataset(64, 3);
    fx_train_config c;
    test_train_config(&c, "mlp", FMT_BF16, 1);
    fx_trainer *t = tr ? fx_trainer_new(&c, tr, NULL) : NULL;
    CHECK(t != NULL, "trainer: %s", flexpoint_last_error());
    if (t) CHECK_STATUS(fx_trainer_step(t, NULL), FX_OK);
    for (int k = 0; k < K_COUNT; k++) {
        file_reader((kind_t)k);
        fashion_mnist((kind_t)k);
        cifar10((kind_t)k);
        if (t) checkpoints(t, (kind_t)k);
        if (t) weights_and_config(t, (kind_t)k);
        trace_files((kind_t)k);
    }
    /* a folder given where a file is expected, by its own name */
    begin("fx_trainer_load (folder path)");
    int rc = t ? fx_trainer_load(t, tmpdir) : FX_EIO;
    end();
    if (t) expect_refusal("fx_trainer_load of the temporary folder", rc, tmpdir, K_FOLDER);
    fx_trainer_free(t);
    fx_dataset_free(tr);
    rmdir(tmpdir);
    return test_finish("test_hostile_files");
}
