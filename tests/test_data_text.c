/* Character-level text datasets (fx_dataset_text): split sizes, vocabulary, windows and
 * targets exact on a small file; a folder read in name order with .dat/.u8 companions,
 * symbolic links and hidden files skipped; hostile inputs (missing file, FIFO, folder without
 * text, empty file, text shorter than a window, bad arguments) refused with their status and a
 * message naming the problem, never a hang; subset keeps the targets, pad and normalize refuse
 * text. The fortunes corpus, when installed, loads with a vocabulary of printable bytes. */
#define _POSIX_C_SOURCE 200809L

#include "flexpoint_data.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAME "test_data_text"

static char tmpdir[] = "/tmp/fx_text_XXXXXX";

static void write_file(const char *name, const char *text, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot create %s", path);
    if (!f) return;
    CHECK(fwrite(text, 1, len, f) == len, "short write of %s", path);
    fclose(f);
}

static void path_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

static int msg_has(const char *needle)
{
    return strstr(flexpoint_last_error(), needle) != NULL;
}

/* "abcabcabcabcabcabcabcabcabcabc" would hide offset mistakes: every byte here is distinct in
 * its neighbourhood, so each window and target is checked against the text itself. */
static void small_file(void)
{
    const char *text = "hello world, the quick brown fox!"; /* 33 bytes */
    const size_t len = strlen(text);
    write_file("small.txt", text, len);
    char path[512];
    path_of(path, sizeof path, "small.txt");
    fx_dataset *tr = NULL, *va = NULL;
    const int T = 4;
    CHECK_STATUS(fx_dataset_text(path, T, 0.25, &tr, &va), FX_OK);
    if (!tr || !va) return;
    /* 33 * 0.25 = 8.25: 8 bytes held out, 25 for training: (25 - 1) / 4 = 6 and (8 - 1) / 4 = 1
     * windows */
    const size_t nval = 8, ntrain = len - nval;
    CHECK(fx_dataset_len(tr) == 6, "train windows %lld", (long long)fx_dataset_len(tr));
    CHECK(fx_dataset_len(va) == 1, "val windows %lld", (long long)fx_dataset_len(va));
    CHECK(fx_dataset_seq_len(tr) == T && fx_dataset_seq_len(va) == T, "seq len");
    CHECK(fx_dataset_channels(tr) == 1 && fx_dataset_height(tr) == 1 &&
              fx_dataset_width(tr) == T, "shape 1 x 1 x T");
    /* vocabulary: the distinct bytes of the whole text in byte order */
    int seen[256] = {0}, want_n = 0;
    for (size_t i = 0; i < len; i++) seen[(unsigned char)text[i]] = 1;
    uint8_t want[256];
    for (int b = 0; b < 256; b++)
        if (seen[b]) want[want_n++] = (uint8_t)b;
    uint8_t vocab[256], vocab2[256];
    int nv = fx_dataset_vocab(tr, vocab);
    CHECK(nv == want_n, "vocabulary %d bytes, want %d", nv, want_n);
    CHECK(nv == want_n && memcmp(vocab, want, (size_t)nv) == 0, "vocabulary bytes");
    CHECK(fx_dataset_vocab(va, vocab2) == nv && memcmp(vocab, vocab2, (size_t)nv) == 0,
          "the held-out part shares the vocabulary");
    CHECK(fx_dataset_classes(tr) == nv, "classes = vocabulary size");
    /* windows and targets, decoded through the vocabulary, are the text's bytes */
    const float *x = fx_dataset_images(tr);
    const int32_t *tg = fx_dataset_targets(tr), *lab = fx_dataset_labels(tr);
    int bad = 0;
    for (int i = 0; i < 6; i++)
        for (int t = 0; t < T; t++) {
            int tok = (int)x[i * T + t];
            bad += (float)tok != x[i * T + t] || tok < 0 || tok >= nv ||
                   vocab[tok] != (uint8_t)text[i * T + t];
            bad += tg[i * T + t] < 0 || tg[i * T + t] >= nv ||
                   vocab[tg[i * T + t]] != (uint8_t)text[i * T + t + 1];
            if (t == T - 1) bad += lab[i] != tg[i * T + t];
        }
    CHECK(bad == 0, "%d training tokens or targets differ from the text", bad);
    x = fx_dataset_images(va);
    tg = fx_dataset_targets(va);
    bad = 0;
    for (int t = 0; t < T; t++) {
        bad += vocab[(int)x[t]] != (uint8_t)text[ntrain + (size_t)t];
        bad += vocab[tg[t]] != (uint8_t)text[ntrain + (size_t)t + 1];
    }
    CHECK(bad == 0, "%d held-out tokens or targets differ from the text's last part", bad);
    /* batches of targets follow the indices; a bad index writes nothing */
    int64_t idx[2] = {5, 0};
    int32_t got[2 * 4], sentinel[2 * 4];
    for (int i = 0; i < 8; i++) got[i] = sentinel[i] = -7;
    CHECK_STATUS(fx_dataset_batch_targets(tr, idx, 2, got), FX_OK);
    CHECK(memcmp(got, fx_dataset_targets(tr) + 5 * T, 4 * sizeof(int32_t)) == 0 &&
              memcmp(got + 4, fx_dataset_targets(tr), 4 * sizeof(int32_t)) == 0,
          "batch targets in index order");
    int64_t badidx[2] = {0, 6};
    memcpy(got, sentinel, sizeof got);
    CHECK_STATUS(fx_dataset_batch_targets(tr, badidx, 2, got), FX_ERANGE);
    CHECK(memcmp(got, sentinel, sizeof got) == 0, "nothing written on a bad index");
    /* subset keeps targets and vocabulary; pad and normalize refuse text */
    fx_dataset *sub = fx_dataset_subset(tr, 2, 3);
    CHECK(sub != NULL, "subset: %s", flexpoint_last_error());
    if (sub) {
        CHECK(fx_dataset_seq_len(sub) == T && fx_dataset_vocab(sub, NULL) == nv, "subset text");
        CHECK(memcmp(fx_dataset_targets(sub), fx_dataset_targets(tr) + 2 * T,
                     3 * T * sizeof(int32_t)) == 0, "subset targets");
        fx_dataset_free(sub);
    }
    CHECK(fx_dataset_pad(tr, 1) == NULL && flexpoint_last_status() == FX_EINVAL, "pad refused");
    double mean = 0, sd = 1;
    CHECK_STATUS(fx_dataset_normalize(tr, &mean, &sd), FX_EINVAL);
    fx_dataset_free(tr);
    fx_dataset_free(va);

    /* without a held-out part: every window of the whole text, val NULL */
    CHECK_STATUS(fx_dataset_text(path, T, 0.0, &tr, &va), FX_OK);
    CHECK(tr && va == NULL && fx_dataset_len(tr) == (int64_t)((len - 1) / T), "no split");
    fx_dataset_free(tr);
    /* an image dataset has no targets */
    fx_dataset *img = fx_dataset_synthetic(4, 1, 2, 2, 2, 1);
    CHECK(img && fx_dataset_seq_len(img) == 0 && fx_dataset_targets(img) == NULL &&
              fx_dataset_vocab(img, NULL) == 0, "image dataset: no text");
    int32_t t1[4];
    int64_t i0 = 0;
    CHECK_STATUS(fx_dataset_batch_targets(img, &i0, 1, t1), FX_EINVAL);
    fx_dataset_free(img);
}

static void folder(void)
{
    char dir[512];
    path_of(dir, sizeof dir, "corpus");
    CHECK(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    write_file("corpus/b", "BBBBBBBB", 8);
    write_file("corpus/a", "aaaaaaaa", 8);
    write_file("corpus/a.dat", "\x01\x02\x03\x04", 4);      /* an index: skipped */
    write_file("corpus/.hidden", "zzzzzzzz", 8);             /* skipped */
    char target[512], link[512];
    path_of(target, sizeof target, "corpus/a");
    path_of(link, sizeof link, "corpus/a.u8");
    CHECK(symlink(target, link) == 0, "symlink");            /* a companion: skipped */
    path_of(link, sizeof link, "corpus/c");
    CHECK(symlink(target, link) == 0, "symlink");            /* a link: skipped */
    fx_dataset *tr = NULL, *va = NULL;
    CHECK_STATUS(fx_dataset_text(dir, 3, 0.0, &tr, &va), FX_OK);
    if (tr) {
        /* "aaaaaaaaBBBBBBBB": vocabulary {B, a}, (16 - 1) / 3 = 5 windows */
        uint8_t v[256];
        CHECK(fx_dataset_vocab(tr, v) == 2 && v[0] == 'B' && v[1] == 'a', "folder vocabulary");
        CHECK(fx_dataset_len(tr) == 5, "folder windows %lld", (long long)fx_dataset_len(tr));
        const float *x = fx_dataset_images(tr);
        /* window 2 covers bytes 6..8: "aaB" -> tokens 1 1 0, targets "aBB" */
        const int32_t *tg = fx_dataset_targets(tr);
        CHECK(x[6] == 1 && x[7] == 1 && x[8] == 0 && tg[6] == 1 && tg[7] == 0 && tg[8] == 0,
              "files concatenated in name order");
        CHECK(strstr(fx_dataset_source(tr), "2 files") != NULL, "source '%s'",
              fx_dataset_source(tr));
    }
    fx_dataset_free(tr);
}

static void hostile(void)
{
    fx_dataset *tr = (fx_dataset *)1, *va = (fx_dataset *)1;
    char path[512];
    path_of(path, sizeof path, "missing.txt");
    CHECK_STATUS(fx_dataset_text(path, 4, 0.1, &tr, &va), FX_EIO);
    CHECK(tr == NULL && va == NULL, "outputs NULL on failure");
    CHECK(msg_has("missing.txt"), "message names the file: %s", flexpoint_last_error());
    path_of(path, sizeof path, "fifo");
    CHECK(mkfifo(path, 0600) == 0, "mkfifo");
    CHECK_STATUS(fx_dataset_text(path, 4, 0.1, &tr, &va), FX_EIO); /* at once, no writer */
    CHECK(msg_has("FIFO"), "FIFO named: %s", flexpoint_last_error());
    write_file("empty.txt", "", 0);
    path_of(path, sizeof path, "empty.txt");
    CHECK_STATUS(fx_dataset_text(path, 4, 0.1, &tr, &va), FX_ECORRUPT);
    CHECK(msg_has("empty"), "empty named: %s", flexpoint_last_error());
    write_file("short.txt", "abcd", 4);
    path_of(path, sizeof path, "short.txt");
    CHECK_STATUS(fx_dataset_text(path, 4, 0.0, &tr, &va), FX_ECORRUPT); /* needs 5 bytes */
    CHECK_STATUS(fx_dataset_text(path, 3, 0.0, &tr, &va), FX_OK);
    fx_dataset_free(tr);
    write_file("tenbytes.txt", "0123456789", 10);
    path_of(path, sizeof path, "tenbytes.txt");
    /* 10 * 0.2 = 2 held-out bytes: fewer than a window of 2 and its next token */
    CHECK_STATUS(fx_dataset_text(path, 2, 0.2, &tr, &va), FX_ECORRUPT);
    CHECK(msg_has("held-out"), "held-out part named: %s", flexpoint_last_error());
    CHECK_STATUS(fx_dataset_text(path, 0, 0.1, &tr, &va), FX_EINVAL);
    CHECK_STATUS(fx_dataset_text(path, FX_DATA_MAX_CONTEXT + 1, 0.1, &tr, &va), FX_EINVAL);
    CHECK_STATUS(fx_dataset_text(path, 2, 0.6, &tr, &va), FX_EINVAL);
    CHECK_STATUS(fx_dataset_text(path, 2, -0.1, &tr, &va), FX_EINVAL);
    CHECK_STATUS(fx_dataset_text(NULL, 2, 0.1, &tr, &va), FX_EINVAL);
    CHECK_STATUS(fx_dataset_text(path, 2, 0.1, NULL, &va), FX_EINVAL);
    /* a folder with nothing but companions and links */
    char dir[512];
    path_of(dir, sizeof dir, "nothing");
    CHECK(mkdir(dir, 0700) == 0, "mkdir");
    write_file("nothing/x.dat", "1234", 4);
    CHECK_STATUS(fx_dataset_text(dir, 2, 0.1, &tr, &va), FX_ECORRUPT);
    CHECK(msg_has("no text file"), "empty folder named: %s", flexpoint_last_error());
    /* every byte value, NUL included, is a token */
    char all[600];
    for (int i = 0; i < 600; i++) all[i] = (char)(i % 256);
    write_file("binary", all, sizeof all);
    path_of(path, sizeof path, "binary");
    CHECK_STATUS(fx_dataset_text(path, 8, 0.1, &tr, &va), FX_OK);
    CHECK(tr && fx_dataset_vocab(tr, NULL) == 256 && fx_dataset_classes(tr) == 256,
          "256 byte values");
    fx_dataset_free(tr);
    fx_dataset_free(va);
}

static void fortunes(void)
{
    struct stat st;
    if (stat(FX_DATA_FORTUNES_DIR, &st) != 0) {
        printf("%s: %s absent (Debian package fortunes): corpus check skipped\n", NAME,
               FX_DATA_FORTUNES_DIR);
        return;
    }
    fx_dataset *tr = NULL, *va = NULL;
    CHECK_STATUS(fx_dataset_text(FX_DATA_FORTUNES_DIR, 64, 0.1, &tr, &va), FX_OK);
    if (!tr || !va) return;
    uint8_t v[256];
    int nv = fx_dataset_vocab(tr, v);
    CHECK(nv > 60 && nv <= 256 && memchr(v, 'e', (size_t)nv) && memchr(v, ' ', (size_t)nv),
          "fortunes vocabulary of %d bytes", nv);
    /* about a tenth of the windows are held out */
    double share = (double)fx_dataset_len(va) /
                   (double)(fx_dataset_len(tr) + fx_dataset_len(va));
    CHECK(share > 0.09 && share < 0.11, "held-out share %g", share);
    printf("%s: fortunes: %lld training and %lld held-out windows of 64, vocabulary %d\n", NAME,
           (long long)fx_dataset_len(tr), (long long)fx_dataset_len(va), nv);
    fx_dataset_free(tr);
    fx_dataset_free(va);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) return test_skip(NAME, "no temporary folder");
    small_file();
    folder();
    hostile();
    fortunes();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "%s: could not remove %s\n", NAME, tmpdir);
    return test_finish(NAME);
}
