/* Data sets: the Fashion-MNIST (IDX) and CIFAR-10 loaders on small files written here in the
 * exact on-disk layouts (gzip and plain), every corruption case giving its status and a message
 * naming the file and the problem, the synthetic generator (determinism, balance, learnable but
 * not trivial), the batch/pad/subset/statistics helpers and their argument errors, and the real
 * Fashion-MNIST files when the Debian package is installed. */
#define _POSIX_C_SOURCE 200809L

#include "flexpoint_data.h"
#include "data/data_internal.h"
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define NAME "test_data"
#define REAL_FASHION_MNIST "/usr/share/datasets/fashion-mnist"

static char g_root[256]; /* temporary directory for this run */

/* ---- helpers ------------------------------------------------------------------------------ */

static int msg_has(const char *needle) { return strstr(flexpoint_last_error(), needle) != NULL; }

/* A dataset constructor must have failed with a message holding both substrings. */
#define CHECK_FAILS(ds_expr, sub1, sub2)                                                           \
    do {                                                                                           \
        flexpoint_clear_error();                                                                   \
        fx_dataset *ds_ = (ds_expr);                                                               \
        CHECK(ds_ == NULL && msg_has(sub1) && msg_has(sub2),                                       \
              "%s: want NULL with \"%s\" and \"%s\"; got %p, message \"%s\"", #ds_expr, sub1,      \
              sub2, (void *)ds_, flexpoint_last_error());                                          \
        fx_dataset_free(ds_);                                                                      \
    } while (0)

static void path_in(char *out, size_t n, const char *dir, const char *name)
{
    int len = snprintf(out, n, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= n) {
        fprintf(stderr, "path too long: %s/%s\n", dir, name);
        exit(1);
    }
}

static void make_dir(char *out, size_t n, const char *name)
{
    path_in(out, n, g_root, name);
    if (mkdir(out, 0700) != 0) {
        fprintf(stderr, "cannot create %s\n", out);
        exit(1);
    }
}

static void write_plain(const char *dir, const char *name, const uint8_t *buf, size_t len)
{
    char p[512];
    path_in(p, sizeof p, dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || (len && fwrite(buf, 1, len, f) != len) || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(1);
    }
}

static void write_gz(const char *dir, const char *name, const uint8_t *buf, size_t len)
{
    char p[512];
    path_in(p, sizeof p, dir, name);
    gzFile g = gzopen(p, "wb");
    if (!g || (len && gzwrite(g, buf, (unsigned)len) != (int)len) || gzclose(g) != Z_OK) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(1);
    }
}

/* Whole contents of a file (for building corrupt gzip files from good ones). */
static uint8_t *slurp(const char *dir, const char *name, size_t *len)
{
    char p[512];
    path_in(p, sizeof p, dir, name);
    FILE *f = fopen(p, "rb");
    if (!f) exit(1);
    uint8_t *buf = malloc(1 << 16);
    *len = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* IDX images file: magic, n, rows, cols, then pixel (i, r, c) = (i*31 + r*7 + c*3 + 1) & 255. */
static uint8_t pixel_byte(size_t i, size_t r, size_t c)
{
    return (uint8_t)((i * 31 + r * 7 + c * 3 + 1) & 255);
}

static uint8_t *idx_images(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols, size_t *len)
{
    *len = 16 + (size_t)n * rows * cols;
    uint8_t *b = malloc(*len);
    put_be32(b, magic);
    put_be32(b + 4, n);
    put_be32(b + 8, rows);
    put_be32(b + 12, cols);
    for (size_t i = 0; i < n; i++)
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++)
                b[16 + (i * rows + r) * cols + c] = pixel_byte(i, r, c);
    return b;
}

static uint8_t *idx_labels(uint32_t magic, uint32_t n, size_t *len)
{
    *len = 8 + (size_t)n;
    uint8_t *b = malloc(*len);
    put_be32(b, magic);
    put_be32(b + 4, n);
    for (size_t i = 0; i < n; i++) b[8 + i] = (uint8_t)((i * 3 + 2) % 10);
    return b;
}

/* ---- Fashion-MNIST: good files ------------------------------------------------------------ */

enum { MN = 5, MR = 4, MC = 3 };

static void check_mnist_contents(const fx_dataset *ds, const char *what)
{
    CHECK(ds != NULL, "%s: load failed: %s", what, flexpoint_last_error());
    if (!ds) return;
    CHECK(fx_dataset_len(ds) == MN && fx_dataset_channels(ds) == 1 && fx_dataset_height(ds) == MR &&
              fx_dataset_width(ds) == MC && fx_dataset_classes(ds) == 10,
          "%s: shape %lld x %d x %d x %d, %d classes", what, (long long)fx_dataset_len(ds),
          fx_dataset_channels(ds), fx_dataset_height(ds), fx_dataset_width(ds),
          fx_dataset_classes(ds));
    const float *x = fx_dataset_images(ds);
    const int32_t *y = fx_dataset_labels(ds);
    int bad = 0;
    for (size_t i = 0; i < MN; i++) {
        if (y[i] != (int32_t)((i * 3 + 2) % 10)) bad++;
        for (size_t r = 0; r < MR; r++)
            for (size_t c = 0; c < MC; c++)
                if (x[(i * MR + r) * MC + c] != (float)pixel_byte(i, r, c) / 255.0f) bad++;
    }
    CHECK(bad == 0, "%s: %d wrong pixels or labels", what, bad);
}

static void fashion_mnist_good(void)
{
    char dir[512];
    make_dir(dir, sizeof dir, "fm_good");
    size_t il, ll;
    uint8_t *img = idx_images(FX_IDX_MAGIC_IMAGES, MN, MR, MC, &il);
    uint8_t *lab = idx_labels(FX_IDX_MAGIC_LABELS, MN, &ll);
    write_gz(dir, "train-images-idx3-ubyte.gz", img, il); /* train: gzip */
    write_gz(dir, "train-labels-idx1-ubyte.gz", lab, ll);
    write_plain(dir, "t10k-images-idx3-ubyte", img, il); /* test: plain, no .gz name */
    write_plain(dir, "t10k-labels-idx1-ubyte", lab, ll);
    /* A plain file next to a .gz one is ignored: the .gz name wins. */
    write_plain(dir, "train-labels-idx1-ubyte", (const uint8_t *)"junk", 4);

    fx_dataset *ds = fx_dataset_fashion_mnist(dir, 1);
    check_mnist_contents(ds, "gzip train");
    CHECK(ds && strstr(fx_dataset_source(ds), "train"), "source: %s",
          ds ? fx_dataset_source(ds) : "");
    fx_dataset_free(ds);
    ds = fx_dataset_fashion_mnist(dir, 0);
    check_mnist_contents(ds, "plain t10k");
    fx_dataset_free(ds);

    /* A trailing slash on the directory is fine. */
    char slash[520];
    snprintf(slash, sizeof slash, "%s/", dir);
    ds = fx_dataset_fashion_mnist(slash, 0);
    check_mnist_contents(ds, "dir with slash");
    fx_dataset_free(ds);

    /* NULL and "" mean the environment variable. */
    const char *old = getenv("FLEXPOINT_FASHION_MNIST_DIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("FLEXPOINT_FASHION_MNIST_DIR", dir, 1);
    ds = fx_dataset_fashion_mnist(NULL, 1);
    check_mnist_contents(ds, "env dir");
    fx_dataset_free(ds);
    ds = fx_dataset_fashion_mnist("", 0);
    check_mnist_contents(ds, "empty dir string -> env");
    fx_dataset_free(ds);
    setenv("FLEXPOINT_FASHION_MNIST_DIR", g_root, 1); /* no files there */
    CHECK_FAILS(fx_dataset_fashion_mnist(NULL, 1), g_root, "train-images-idx3-ubyte.gz");
    if (saved)
        setenv("FLEXPOINT_FASHION_MNIST_DIR", saved, 1);
    else
        unsetenv("FLEXPOINT_FASHION_MNIST_DIR");
    free(saved);
    free(img);
    free(lab);
}

/* ---- Fashion-MNIST: every corruption ------------------------------------------------------ */

/* One bad pair: checked through the in-memory parser (status, message) and through the files
 * (NULL, message naming the bad file's path and the problem). `bad_is_labels` says which file
 * the message must name. */
static void bad_pair(const char *tag, const uint8_t *img, size_t il, const uint8_t *lab, size_t ll,
                     int bad_is_labels, int want_status, const char *problem)
{
    fx_dataset *ds = NULL;
    flexpoint_clear_error();
    int rc = fx_mnist_from_buffers(img, il, "IMG", lab, ll, "LAB", "fx_test", &ds);
    CHECK(rc == want_status && ds == NULL, "%s: parser status %s, want %s", tag,
          flexpoint_status_str(rc), flexpoint_status_str(want_status));
    CHECK(msg_has(bad_is_labels ? "LAB" : "IMG") && msg_has(problem),
          "%s: parser message \"%s\" lacks the file or \"%s\"", tag, flexpoint_last_error(),
          problem);
    fx_dataset_free(ds);

    char dir[512], bad_path[600];
    make_dir(dir, sizeof dir, tag);
    write_gz(dir, "train-images-idx3-ubyte.gz", img, il);
    write_plain(dir, "train-labels-idx1-ubyte", lab, ll); /* mix gzip and plain */
    if (bad_is_labels)
        path_in(bad_path, sizeof bad_path, dir, "train-labels-idx1-ubyte");
    else
        path_in(bad_path, sizeof bad_path, dir, "train-images-idx3-ubyte.gz");
    CHECK_FAILS(fx_dataset_fashion_mnist(dir, 1), bad_path, problem);
    CHECK(strncmp(flexpoint_last_error(), "fx_dataset_fashion_mnist: ", 26) == 0,
          "%s: message names the function: %s", tag, flexpoint_last_error());
}

static void fashion_mnist_bad(void)
{
    size_t il, ll, l2;
    uint8_t *img = idx_images(FX_IDX_MAGIC_IMAGES, MN, MR, MC, &il);
    uint8_t *lab = idx_labels(FX_IDX_MAGIC_LABELS, MN, &ll);
    uint8_t *tmp;

    tmp = idx_images(0x00000802u, MN, MR, MC, &l2);
    bad_pair("bad_image_magic", tmp, l2, lab, ll, 0, FX_ECORRUPT,
             "bad magic 0x00000802 (want 0x00000803)");
    free(tmp);
    tmp = idx_labels(0x00000802u, MN, &l2);
    bad_pair("bad_label_magic", img, il, tmp, l2, 1, FX_ECORRUPT,
             "bad magic 0x00000802 (want 0x00000801)");
    free(tmp);
    bad_pair("swapped_files", lab, ll, img, il, 0, FX_ECORRUPT, "(a labels file?)");
    bad_pair("images_as_labels", img, il, img, il, 1, FX_ECORRUPT, "(an images file?)");
    bad_pair("empty_images", img, 0, lab, ll, 0, FX_ECORRUPT, "empty file");
    bad_pair("empty_labels", img, il, lab, 0, 1, FX_ECORRUPT, "empty file");
    bad_pair("short_magic", img, 3, lab, ll, 0, FX_ECORRUPT, "truncated header");
    bad_pair("short_header", img, 12, lab, ll, 0, FX_ECORRUPT,
             "truncated header (12 bytes, want 16)");
    bad_pair("short_label_header", img, il, lab, 6, 1, FX_ECORRUPT, "truncated header");
    bad_pair("truncated_images", img, il - 1, lab, ll, 0, FX_ECORRUPT, "truncated");
    bad_pair("truncated_labels", img, il, lab, ll - 2, 1, FX_ECORRUPT, "truncated");

    /* Trailing garbage is rejected, not ignored. */
    tmp = malloc(il + 7);
    memcpy(tmp, img, il);
    memset(tmp + il, 0xAB, 7);
    bad_pair("trailing_images", tmp, il + 7, lab, ll, 0, FX_ECORRUPT, "7 trailing bytes");
    free(tmp);
    tmp = malloc(ll + 1);
    memcpy(tmp, lab, ll);
    tmp[ll] = 0;
    bad_pair("trailing_labels", img, il, tmp, ll + 1, 1, FX_ECORRUPT, "1 trailing bytes");
    free(tmp);

    /* Sizes: a count that would overflow 32-bit products, zero and oversized sides. */
    tmp = idx_images(FX_IDX_MAGIC_IMAGES, 0, MR, MC, &l2);
    put_be32(tmp + 4, 0xFFFFFFFFu);
    bad_pair("huge_count", tmp, l2, lab, ll, 0, FX_ECORRUPT, "announces 4294967295 images");
    put_be32(tmp + 4, 0x10000000u);
    put_be32(tmp + 8, 1024);
    put_be32(tmp + 12, 1024);
    bad_pair("huge_payload", tmp, l2, lab, ll, 0, FX_ECORRUPT, "truncated");
    put_be32(tmp + 8, 0);
    bad_pair("zero_rows", tmp, l2, lab, ll, 0, FX_ECORRUPT, "bad image size 0 x 1024");
    put_be32(tmp + 8, 28);
    put_be32(tmp + 12, 5000);
    bad_pair("wide_cols", tmp, l2, lab, ll, 0, FX_ECORRUPT, "bad image size 28 x 5000");
    free(tmp);

    /* Count mismatch, no images, label out of range. */
    tmp = idx_labels(FX_IDX_MAGIC_LABELS, MN - 1, &l2);
    bad_pair("count_mismatch", img, il, tmp, l2, 1, FX_ECORRUPT, "has 5 images but");
    free(tmp);
    {
        size_t zl, zl2;
        uint8_t *zi = idx_images(FX_IDX_MAGIC_IMAGES, 0, MR, MC, &zl);
        uint8_t *zlab = idx_labels(FX_IDX_MAGIC_LABELS, 0, &zl2);
        bad_pair("no_images", zi, zl, zlab, zl2, 0, FX_ECORRUPT, "no images");
        free(zi);
        free(zlab);
    }
    tmp = malloc(ll);
    memcpy(tmp, lab, ll);
    tmp[8 + 3] = 10;
    bad_pair("label_10", img, il, tmp, ll, 1, FX_ECORRUPT, "label 10 at index 3 is out of range");
    tmp[8 + 3] = 255;
    bad_pair("label_255", img, il, tmp, ll, 1, FX_ECORRUPT, "label 255 at index 3");
    free(tmp);

    /* File-level failures: missing file, a directory, gzip damage, the size limit. */
    char dir[512], p[600];
    make_dir(dir, sizeof dir, "fm_files");
    write_gz(dir, "train-images-idx3-ubyte.gz", img, il);
    path_in(p, sizeof p, dir, "train-labels-idx1-ubyte.gz");
    CHECK_FAILS(fx_dataset_fashion_mnist(dir, 1), p, "No such file");
    CHECK(msg_has("no uncompressed"), "mentions the plain name: %s", flexpoint_last_error());
    mkdir(p, 0700); /* a directory where the labels file should be */
    CHECK_FAILS(fx_dataset_fashion_mnist(dir, 1), p, "not a regular file");
    uint8_t *got = NULL;
    size_t got_len = 0;
    CHECK_STATUS(fx_data_read_file(p, "fx_test", 1 << 20, &got, &got_len), FX_EIO);
    CHECK_STATUS(
        fx_data_read_file("/nonexistent/flexpoint/x.gz", "fx_test", 1 << 20, &got, &got_len),
        FX_EIO);
    CHECK(msg_has("/nonexistent/flexpoint/x.gz") && msg_has("cannot open"), "missing: %s",
          flexpoint_last_error());
    rmdir(p);

    size_t gl;
    uint8_t *gz = slurp(dir, "train-images-idx3-ubyte.gz", &gl);
    /* Truncated gzip: the deflate stream and trailer cut short. */
    write_plain(dir, "train-labels-idx1-ubyte.gz", gz, gl - 6);
    path_in(p, sizeof p, dir, "train-labels-idx1-ubyte.gz");
    CHECK_FAILS(fx_dataset_fashion_mnist(dir, 1), p, "gzip error");
    CHECK_STATUS(fx_data_read_file(p, "fx_test", 1 << 20, &got, &got_len), FX_EIO);
    CHECK(got == NULL, "no buffer on failure");
    /* Damaged CRC in the trailer. */
    gz[gl - 6] ^= 0x5A;
    write_plain(dir, "train-labels-idx1-ubyte.gz", gz, gl);
    CHECK_FAILS(fx_dataset_fashion_mnist(dir, 1), p, "gzip error");
    CHECK_STATUS(fx_data_read_file(p, "fx_test", 1 << 20, &got, &got_len), FX_EIO);
    /* A header that says gzip followed by garbage. */
    memset(gz + 10, 0xFF, gl - 10);
    write_plain(dir, "train-labels-idx1-ubyte.gz", gz, gl);
    CHECK_FAILS(fx_dataset_fashion_mnist(dir, 1), p, "gzip error");
    free(gz);

    /* The decompressed-size limit (a gzip bomb guard). */
    path_in(p, sizeof p, dir, "train-images-idx3-ubyte.gz");
    CHECK_STATUS(fx_data_read_file(p, "fx_test", 20, &got, &got_len), FX_ECORRUPT);
    CHECK(msg_has("more than 20 bytes"), "limit message: %s", flexpoint_last_error());
    CHECK_STATUS(fx_data_read_file(p, "fx_test", (int64_t)il, &got, &got_len), FX_OK);
    CHECK(got && got_len == il && memcmp(got, img, il) == 0, "exact-limit read returns the data");
    free(got);
    free(img);
    free(lab);
}

/* Files larger than the reader's first buffer: the buffer grows (gzip: the on-disk size is far
 * below the data size) or is exactly the file size (plain), and the limit still applies. */
static void file_reader_sizes(void)
{
    char dir[512], p[600];
    make_dir(dir, sizeof dir, "reader");
    const size_t n = 3000001; /* > 2 MiB, odd */
    uint8_t *big = malloc(n);
    for (size_t i = 0; i < n; i++) big[i] = (uint8_t)((i * 7 + i / 4096) & 255);
    write_gz(dir, "big.gz", big, n);
    write_plain(dir, "big.bin", big, n);
    const char *names[2] = {"big.gz", "big.bin"};
    for (int k = 0; k < 2; k++) {
        path_in(p, sizeof p, dir, names[k]);
        uint8_t *got = NULL;
        size_t len = 0;
        CHECK_STATUS(fx_data_read_file(p, "fx_test", FX_DATA_MAX_FILE_BYTES, &got, &len), FX_OK);
        CHECK(got && len == n && memcmp(got, big, n) == 0, "%s: %zu bytes read back", names[k],
              len);
        free(got);
        got = NULL;
        CHECK_STATUS(fx_data_read_file(p, "fx_test", 2000000, &got, &len), FX_ECORRUPT);
        CHECK(got == NULL && msg_has("more than 2000000 bytes") && msg_has(names[k]), "limit: %s",
              flexpoint_last_error());
        CHECK_STATUS(fx_data_read_file(p, "fx_test", (int64_t)n, &got, &len), FX_OK);
        CHECK(len == n, "%s: limit equal to the size is accepted", names[k]);
        free(got);
    }
    free(big);
}

/* ---- CIFAR-10 ----------------------------------------------------------------------------- */

static uint8_t cifar_byte(size_t rec, size_t k) { return (uint8_t)((rec * 13 + k * 7 + 5) & 255); }

/* `count` records numbered from `first`; record r has label r % 10. */
static uint8_t *cifar_records(size_t first, size_t count, size_t *len)
{
    *len = count * FX_CIFAR_RECORD;
    uint8_t *b = malloc(*len ? *len : 1);
    for (size_t r = 0; r < count; r++) {
        b[r * FX_CIFAR_RECORD] = (uint8_t)((first + r) % 10);
        for (size_t k = 0; k < FX_CIFAR_PIXELS; k++)
            b[r * FX_CIFAR_RECORD + 1 + k] = cifar_byte(first + r, k);
    }
    return b;
}

static void check_cifar(const fx_dataset *ds, size_t n, const char *what)
{
    CHECK(ds != NULL, "%s: %s", what, flexpoint_last_error());
    if (!ds) return;
    CHECK(fx_dataset_len(ds) == (int64_t)n && fx_dataset_channels(ds) == 3 &&
              fx_dataset_height(ds) == 32 && fx_dataset_width(ds) == 32 &&
              fx_dataset_classes(ds) == 10,
          "%s: shape", what);
    const float *x = fx_dataset_images(ds);
    int bad = 0;
    for (size_t r = 0; r < n; r++) {
        if (fx_dataset_labels(ds)[r] != (int32_t)(r % 10)) bad++;
        /* planar: channel c, row y, column x is byte 1 + c*1024 + y*32 + x of the record */
        for (size_t c = 0; c < 3; c++)
            for (size_t y = 0; y < 32; y++)
                for (size_t xx = 0; xx < 32; xx++) {
                    size_t k = c * 1024 + y * 32 + xx;
                    if (x[r * 3072 + k] != (float)cifar_byte(r, k) / 255.0f) bad++;
                }
    }
    CHECK(bad == 0, "%s: %d wrong values", what, bad);
}

static void cifar10(void)
{
    char dir[512], p[600];
    make_dir(dir, sizeof dir, "cifar");
    const size_t per_batch[5] = {2, 1, 3, 1, 2};
    size_t first = 0, len;
    for (int b = 0; b < 5; b++) {
        char name[32];
        snprintf(name, sizeof name, "data_batch_%d.bin", b + 1);
        uint8_t *buf = cifar_records(first, per_batch[b], &len);
        if (b == 2)
            write_gz(dir, name, buf, len); /* gzip content under the .bin name works too */
        else
            write_plain(dir, name, buf, len);
        free(buf);
        first += per_batch[b];
    }
    uint8_t *test = cifar_records(0, 4, &len);
    write_plain(dir, "test_batch.bin", test, len);

    fx_dataset *ds = fx_dataset_cifar10(dir, 1);
    check_cifar(ds, first, "train (5 batches, in order)");
    fx_dataset_free(ds);
    ds = fx_dataset_cifar10(dir, 0);
    check_cifar(ds, 4, "test");
    fx_dataset_free(ds);

    const char *old = getenv("FLEXPOINT_CIFAR10_DIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("FLEXPOINT_CIFAR10_DIR", dir, 1);
    ds = fx_dataset_cifar10(NULL, 0);
    check_cifar(ds, 4, "env dir");
    fx_dataset_free(ds);
    if (saved)
        setenv("FLEXPOINT_CIFAR10_DIR", saved, 1);
    else
        unsetenv("FLEXPOINT_CIFAR10_DIR");
    free(saved);

    /* A missing batch is named. */
    path_in(p, sizeof p, dir, "data_batch_4.bin");
    char moved[600];
    path_in(moved, sizeof moved, dir, "data_batch_4.moved");
    rename(p, moved);
    CHECK_FAILS(fx_dataset_cifar10(dir, 1), p, "cannot open");
    rename(moved, p);

    /* Corrupt test batches: empty, truncated record, extra byte, label out of range. */
    path_in(p, sizeof p, dir, "test_batch.bin");
    write_plain(dir, "test_batch.bin", test, 0);
    CHECK_FAILS(fx_dataset_cifar10(dir, 0), p, "empty file");
    write_plain(dir, "test_batch.bin", test, len - 100);
    CHECK_FAILS(fx_dataset_cifar10(dir, 0), p,
                "not a multiple of the 3073-byte record (3 records and 2973 extra bytes");
    uint8_t *longer = malloc(len + 1);
    memcpy(longer, test, len);
    longer[len] = 0;
    write_plain(dir, "test_batch.bin", longer, len + 1);
    CHECK_FAILS(fx_dataset_cifar10(dir, 0), p, "4 records and 1 extra bytes");
    free(longer);
    test[2 * FX_CIFAR_RECORD] = 10;
    write_plain(dir, "test_batch.bin", test, len);
    CHECK_FAILS(fx_dataset_cifar10(dir, 0), p, "label 10 in record 2 (byte offset 6146)");
    CHECK(strncmp(flexpoint_last_error(), "fx_dataset_cifar10: ", 20) == 0, "function named: %s",
          flexpoint_last_error());

    /* The parser's statuses. */
    const uint8_t *bufs[2] = {test, test};
    size_t lens[2] = {len, len - 1};
    const char *names[2] = {"A.bin", "B.bin"};
    fx_dataset *out = NULL;
    CHECK_STATUS(fx_cifar_from_buffers(bufs, lens, names, 1, "fx_test", &out), FX_ECORRUPT);
    CHECK(out == NULL && msg_has("A.bin"), "label error names A.bin: %s", flexpoint_last_error());
    test[2 * FX_CIFAR_RECORD] = 2;
    CHECK_STATUS(fx_cifar_from_buffers(bufs, lens, names, 2, "fx_test", &out), FX_ECORRUPT);
    CHECK(out == NULL && msg_has("B.bin"), "size error names B.bin: %s", flexpoint_last_error());
    lens[1] = len;
    CHECK_STATUS(fx_cifar_from_buffers(bufs, lens, names, 2, "fx_test", &out), FX_OK);
    CHECK(out && fx_dataset_len(out) == 8 && fx_dataset_labels(out)[6] == 2,
          "two buffers concatenate");
    fx_dataset_free(out);
    out = NULL;
    CHECK_STATUS(fx_cifar_from_buffers(bufs, lens, names, 0, "fx_test", &out), FX_EINVAL);
    CHECK_STATUS(fx_cifar_from_buffers(NULL, lens, names, 1, "fx_test", &out), FX_EINVAL);
    free(test);
}

/* ---- synthetic ---------------------------------------------------------------------------- */

/* Nearest class mean, fitted on the first half, scored on the second. */
static double nearest_mean_accuracy(const fx_dataset *ds)
{
    int64_t n = fx_dataset_len(ds), half = n / 2,
            d = (int64_t)fx_dataset_channels(ds) * fx_dataset_height(ds) * fx_dataset_width(ds);
    int k = fx_dataset_classes(ds);
    const float *x = fx_dataset_images(ds);
    const int32_t *y = fx_dataset_labels(ds);
    double *mean = calloc((size_t)(k * d), sizeof *mean);
    int64_t *cnt = calloc((size_t)k, sizeof *cnt);
    for (int64_t i = 0; i < half; i++) {
        cnt[y[i]]++;
        for (int64_t j = 0; j < d; j++) mean[y[i] * d + j] += x[i * d + j];
    }
    for (int c = 0; c < k; c++)
        for (int64_t j = 0; j < d; j++) mean[c * d + j] /= cnt[c] ? (double)cnt[c] : 1.0;
    int64_t right = 0;
    for (int64_t i = half; i < n; i++) {
        double best = INFINITY;
        int arg = -1;
        for (int c = 0; c < k; c++) {
            double s = 0;
            for (int64_t j = 0; j < d; j++) {
                double t = x[i * d + j] - mean[c * d + j];
                s += t * t;
            }
            if (s < best) best = s, arg = c;
        }
        right += arg == y[i];
    }
    free(mean);
    free(cnt);
    return (double)right / (double)(n - half);
}

static void synthetic(void)
{
    const int64_t n = 1000;
    fx_dataset *a = fx_dataset_synthetic(n, 3, 32, 32, 10, 42);
    fx_dataset *b = fx_dataset_synthetic(n, 3, 32, 32, 10, 42);
    fx_dataset *c = fx_dataset_synthetic(n, 3, 32, 32, 10, 43);
    CHECK(a && b && c, "synthetic: %s", flexpoint_last_error());
    if (!a || !b || !c) goto done;
    size_t bytes = (size_t)n * 3072 * sizeof(float);
    CHECK(memcmp(fx_dataset_images(a), fx_dataset_images(b), bytes) == 0 &&
              memcmp(fx_dataset_labels(a), fx_dataset_labels(b), (size_t)n * 4) == 0,
          "same seed gives the same bytes");
    CHECK(memcmp(fx_dataset_images(a), fx_dataset_images(c), bytes) != 0, "seed changes images");
    CHECK(memcmp(fx_dataset_labels(a), fx_dataset_labels(c), (size_t)n * 4) != 0,
          "seed changes labels");
    CHECK(fx_dataset_len(a) == n && fx_dataset_channels(a) == 3 && fx_dataset_height(a) == 32 &&
              fx_dataset_width(a) == 32 && fx_dataset_classes(a) == 10,
          "shape");
    const float *x = fx_dataset_images(a);
    float lo = 1, hi = 0;
    for (size_t i = 0; i < (size_t)n * 3072; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    CHECK(lo >= 0.0f && hi <= 1.0f && hi - lo > 0.5f, "pixels in [0, 1] and spread: %g..%g", lo,
          hi);
    int64_t counts[10];
    CHECK_STATUS(fx_dataset_class_counts(a, counts), FX_OK);
    int balanced = 1;
    for (int k = 0; k < 10; k++) balanced &= counts[k] == n / 10;
    CHECK(balanced, "balanced classes");
    int runs = 0; /* shuffled, not i % 10 */
    for (int64_t i = 0; i < n; i++) runs += fx_dataset_labels(a)[i] == (int32_t)(i % 10);
    CHECK(runs < n / 2, "labels are shuffled (%d in cyclic position)", runs);

    /* Learnable but not trivial: nearest class mean far above chance (0.1), far below 1. */
    double acc = nearest_mean_accuracy(a);
    printf("synthetic 3x32x32: nearest-class-mean accuracy %.3f (chance 0.1)\n", acc);
    CHECK(acc > 0.25 && acc < 0.8, "nearest-mean accuracy %.3f", acc);

    /* Odd shapes work (tiny images, one channel, two classes). */
    fx_dataset *tiny = fx_dataset_synthetic(7, 1, 1, 3, 2, 1);
    CHECK(tiny && fx_dataset_len(tiny) == 7 && fx_dataset_width(tiny) == 3, "tiny synthetic: %s",
          flexpoint_last_error());
    fx_dataset_free(tiny);

    CHECK_FAILS(fx_dataset_synthetic(0, 3, 32, 32, 10, 1), "fx_dataset_synthetic", "n = 0");
    CHECK_FAILS(fx_dataset_synthetic(10, 0, 32, 32, 10, 1), "channels = 0", "1..64");
    CHECK_FAILS(fx_dataset_synthetic(10, 3, 2000, 32, 10, 1), "image size 2000 x 32", "1..1024");
    CHECK_FAILS(fx_dataset_synthetic(10, 3, 32, -1, 10, 1), "image size 32 x -1", "1..1024");
    CHECK_FAILS(fx_dataset_synthetic(10, 3, 32, 32, 1, 1), "classes = 1", "2..1000");
    CHECK_FAILS(fx_dataset_synthetic(INT64_MAX / 100, 3, 32, 32, 10, 1), "do not fit", "images");
done:
    fx_dataset_free(a);
    fx_dataset_free(b);
    fx_dataset_free(c);
}

/* ---- batch, pad, subset, statistics ------------------------------------------------------- */

enum { AN = 4, AC = 2, AH = 3, AW = 2, ACHW = AC * AH * AW };

static void helpers(void)
{
    float img[AN * ACHW];
    int32_t lab[AN] = {1, 0, 2, 1};
    for (int i = 0; i < AN * ACHW; i++) img[i] = (float)i / 64.0f;
    fx_dataset *ds = fx_dataset_from_arrays(AN, AC, AH, AW, 3, img, lab);
    CHECK(ds != NULL, "from_arrays: %s", flexpoint_last_error());
    if (!ds) return;
    CHECK(memcmp(fx_dataset_images(ds), img, sizeof img) == 0 &&
              memcmp(fx_dataset_labels(ds), lab, sizeof lab) == 0,
          "from_arrays copies");

    /* batch */
    int64_t idx[3] = {3, 0, 3};
    float x[3 * ACHW];
    int32_t y[3];
    CHECK_STATUS(fx_dataset_batch(ds, idx, 3, x, y), FX_OK);
    int bad = 0;
    for (int i = 0; i < 3; i++) {
        bad += y[i] != lab[idx[i]];
        bad += memcmp(x + i * ACHW, img + idx[i] * ACHW, ACHW * sizeof(float)) != 0;
    }
    CHECK(bad == 0, "batch gathers images and labels");
    float sentinel[3 * ACHW];
    for (int i = 0; i < 3 * ACHW; i++) sentinel[i] = x[i] = -7.0f;
    int64_t out_of_range[3] = {0, 4, 1}, negative[2] = {-1, 0};
    CHECK_STATUS(fx_dataset_batch(ds, out_of_range, 3, x, y), FX_ERANGE);
    CHECK(msg_has("indices[1] = 4") && memcmp(x, sentinel, sizeof x) == 0,
          "range error names index, output untouched: %s", flexpoint_last_error());
    CHECK_STATUS(fx_dataset_batch(ds, negative, 2, x, y), FX_ERANGE);
    CHECK_STATUS(fx_dataset_batch(ds, idx, -1, x, y), FX_EINVAL);
    CHECK_STATUS(fx_dataset_batch(ds, idx, 3, NULL, y), FX_EINVAL);
    CHECK_STATUS(fx_dataset_batch(ds, idx, 3, x, NULL), FX_EINVAL);
    CHECK_STATUS(fx_dataset_batch(ds, NULL, 3, x, y), FX_EINVAL);
    CHECK_STATUS(fx_dataset_batch(NULL, idx, 3, x, y), FX_EINVAL);
    CHECK_STATUS(fx_dataset_batch(ds, NULL, 0, NULL, NULL), FX_OK);

    /* pad */
    fx_dataset *p = fx_dataset_pad(ds, 2);
    CHECK(p && fx_dataset_height(p) == AH + 4 && fx_dataset_width(p) == AW + 4 &&
              fx_dataset_channels(p) == AC && fx_dataset_len(p) == AN && fx_dataset_classes(p) == 3,
          "pad shape");
    if (p) {
        const float *px = fx_dataset_images(p);
        int H = AH + 4, W = AW + 4;
        bad = 0;
        for (int i = 0; i < AN; i++)
            for (int c = 0; c < AC; c++)
                for (int r = 0; r < H; r++)
                    for (int q = 0; q < W; q++) {
                        float got = px[((i * AC + c) * H + r) * W + q];
                        int inside = r >= 2 && r < AH + 2 && q >= 2 && q < AW + 2;
                        float want = inside ? img[((i * AC + c) * AH + r - 2) * AW + q - 2] : 0.0f;
                        bad += got != want;
                    }
        CHECK(bad == 0, "pad places images and zeros (%d wrong)", bad);
        CHECK(memcmp(fx_dataset_labels(p), lab, sizeof lab) == 0, "pad keeps labels");
        CHECK(strstr(fx_dataset_source(p), "pad(2)") != NULL, "pad source: %s",
              fx_dataset_source(p));
    }
    fx_dataset_free(p);
    p = fx_dataset_pad(ds, 0);
    CHECK(p && memcmp(fx_dataset_images(p), img, sizeof img) == 0, "pad 0 copies");
    fx_dataset_free(p);
    CHECK_FAILS(fx_dataset_pad(ds, -1), "fx_dataset_pad", "pad = -1");
    CHECK_FAILS(fx_dataset_pad(ds, 511), "pad = 511", "<= 1024");
    CHECK_FAILS(fx_dataset_pad(NULL, 1), "fx_dataset_pad", "NULL");

    /* subset */
    fx_dataset *s = fx_dataset_subset(ds, 1, 2);
    CHECK(s && fx_dataset_len(s) == 2 &&
              memcmp(fx_dataset_images(s), img + ACHW, 2 * ACHW * sizeof(float)) == 0 &&
              fx_dataset_labels(s)[0] == lab[1] && fx_dataset_labels(s)[1] == lab[2],
          "subset copies the range");
    fx_dataset_free(s);
    s = fx_dataset_subset(ds, 0, AN);
    CHECK(s && fx_dataset_len(s) == AN, "whole subset");
    fx_dataset_free(s);
    CHECK_FAILS(fx_dataset_subset(ds, 3, 2), "fx_dataset_subset", "[3, 3 + 2)");
    CHECK_FAILS(fx_dataset_subset(ds, 0, 0), "fx_dataset_subset", "non-empty");
    CHECK_FAILS(fx_dataset_subset(ds, -1, 1), "fx_dataset_subset", "[-1");
    CHECK_FAILS(fx_dataset_subset(ds, 1, INT64_MAX), "fx_dataset_subset", "of the 4 images");

    /* statistics and normalisation */
    double mean[AC], sd[AC];
    CHECK_STATUS(fx_dataset_channel_stats(ds, mean, sd), FX_OK);
    for (int c = 0; c < AC; c++) {
        double s1 = 0, s2 = 0;
        for (int i = 0; i < AN; i++)
            for (int k = 0; k < AH * AW; k++) {
                double v = img[(i * AC + c) * AH * AW + k];
                s1 += v;
                s2 += v * v;
            }
        double m = s1 / (AN * AH * AW), v = s2 / (AN * AH * AW) - m * m;
        CHECK(fabs(mean[c] - m) < 1e-12 && fabs(sd[c] - sqrt(v)) < 1e-9,
              "channel %d stats %g %g want %g %g", c, mean[c], sd[c], m, sqrt(v));
    }
    double zero_sd[AC] = {1.0, 0.0}, nan_mean[AC] = {NAN, 0.0};
    CHECK_STATUS(fx_dataset_normalize(ds, mean, zero_sd), FX_EINVAL);
    CHECK(msg_has("channel 1"), "names channel: %s", flexpoint_last_error());
    CHECK_STATUS(fx_dataset_normalize(ds, nan_mean, sd), FX_EINVAL);
    CHECK(memcmp(fx_dataset_images(ds), img, sizeof img) == 0, "failed normalize changes nothing");
    CHECK_STATUS(fx_dataset_normalize(ds, mean, sd), FX_OK);
    double m2[AC], s2[AC];
    CHECK_STATUS(fx_dataset_channel_stats(ds, m2, s2), FX_OK);
    CHECK(fabs(m2[0]) < 1e-6 && fabs(m2[1]) < 1e-6 && fabs(s2[0] - 1) < 1e-6 &&
              fabs(s2[1] - 1) < 1e-6,
          "normalised stats %g %g %g %g", m2[0], m2[1], s2[0], s2[1]);
    CHECK_STATUS(fx_dataset_channel_stats(ds, NULL, sd), FX_EINVAL);
    CHECK_STATUS(fx_dataset_normalize(NULL, mean, sd), FX_EINVAL);

    int64_t counts[3];
    CHECK_STATUS(fx_dataset_class_counts(ds, counts), FX_OK);
    CHECK(counts[0] == 1 && counts[1] == 2 && counts[2] == 1, "class counts");
    CHECK_STATUS(fx_dataset_class_counts(ds, NULL), FX_EINVAL);
    fx_dataset_free(ds);

    /* accessors on NULL, from_arrays errors */
    CHECK(fx_dataset_len(NULL) == -1 && fx_dataset_channels(NULL) == -1 &&
              fx_dataset_height(NULL) == -1 && fx_dataset_width(NULL) == -1 &&
              fx_dataset_classes(NULL) == -1 && fx_dataset_images(NULL) == NULL &&
              fx_dataset_labels(NULL) == NULL && fx_dataset_source(NULL) == NULL,
          "NULL accessors");
    CHECK(msg_has("ds is NULL"), "NULL accessor message: %s", flexpoint_last_error());
    fx_dataset_free(NULL);
    int32_t bad_lab[AN] = {1, 0, 3, 1};
    CHECK_FAILS(fx_dataset_from_arrays(AN, AC, AH, AW, 3, img, bad_lab), "labels[2] = 3", "0..2");
    img[5] = NAN;
    CHECK_FAILS(fx_dataset_from_arrays(AN, AC, AH, AW, 3, img, lab), "images[5]", "not finite");
    CHECK_FAILS(fx_dataset_from_arrays(AN, AC, AH, AW, 3, NULL, lab), "fx_dataset_from_arrays",
                "NULL");
    CHECK_FAILS(fx_dataset_from_arrays(0, AC, AH, AW, 3, img, lab), "fx_dataset_from_arrays",
                "n = 0");
}

/* ---- the real Fashion-MNIST, when installed ------------------------------------------------ */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void real_fashion_mnist(void)
{
    struct stat st;
    if (stat(REAL_FASHION_MNIST, &st) != 0) {
        printf("real Fashion-MNIST: SKIPPED: %s not found (install dataset-fashion-mnist)\n",
               REAL_FASHION_MNIST);
        return;
    }
    for (int train = 0; train <= 1; train++) {
        double t0 = now_s();
        fx_dataset *ds = fx_dataset_fashion_mnist(REAL_FASHION_MNIST, train);
        double dt = now_s() - t0;
        CHECK(ds != NULL, "real Fashion-MNIST: %s", flexpoint_last_error());
        if (!ds) continue;
        int64_t n = train ? 60000 : 10000;
        printf("real Fashion-MNIST %s: %lld images loaded in %.3f s\n", train ? "train" : "t10k",
               (long long)fx_dataset_len(ds), dt);
        CHECK(fx_dataset_len(ds) == n && fx_dataset_channels(ds) == 1 &&
                  fx_dataset_height(ds) == 28 && fx_dataset_width(ds) == 28,
              "real shape");
        /* Fashion-MNIST is exactly balanced: 6000 per class (train), 1000 (test). */
        int64_t counts[10];
        CHECK_STATUS(fx_dataset_class_counts(ds, counts), FX_OK);
        for (int k = 0; k < 10; k++)
            CHECK(counts[k] == n / 10, "class %d: %lld images", k, (long long)counts[k]);
        const float *x = fx_dataset_images(ds);
        float lo = 1, hi = 0;
        for (int64_t i = 0; i < n * 784; i++) {
            lo = x[i] < lo ? x[i] : lo;
            hi = x[i] > hi ? x[i] : hi;
        }
        CHECK(lo == 0.0f && hi == 1.0f, "pixel range %g..%g", lo, hi);
        double mean, sd;
        CHECK_STATUS(fx_dataset_channel_stats(ds, &mean, &sd), FX_OK);
        /* The published statistics of Fashion-MNIST: mean 0.286, std 0.353. */
        CHECK(fabs(mean - 0.286) < 0.002 && fabs(sd - 0.353) < 0.002, "mean %g std %g", mean, sd);
        fx_dataset *padded = fx_dataset_pad(ds, 2);
        CHECK(padded && fx_dataset_height(padded) == 32 && fx_dataset_width(padded) == 32,
              "28x28 -> 32x32 for ResNet-20");
        fx_dataset_free(padded);
        fx_dataset_free(ds);
    }
}

int main(void)
{
    snprintf(g_root, sizeof g_root, "%s/fx_test_data_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_root)) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    fashion_mnist_good();
    fashion_mnist_bad();
    file_reader_sizes();
    cifar10();
    synthetic();
    helpers();
    real_fashion_mnist();
    remove_tree(g_root);
    return test_finish(NAME);
}
