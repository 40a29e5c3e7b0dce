/* Regression test over the fuzzing corpus (tests/fuzz/corpus/{idx,cifar}/): every saved input
 * (seeds, and inputs that once crashed a fuzzer) goes through the same parser calls as in the
 * fuzzers (tests/fuzz/fuzz_inputs.h) and must give FX_OK or an error status with a message,
 * never a crash or a broken property (run it under the ASan build). Files named ok-* must be
 * accepted and files named bad-* rejected. Every prefix of every file is parsed too, since
 * truncation is the most common corruption. */
#define _POSIX_C_SOURCE 200809L

#include "flexpoint_data.h"
#include "fuzz/fuzz_inputs.h"
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAME "test_data_corpus"

static char g_tmp[64]; /* scratch file for the IDX file-reader mode */

typedef struct {
    int files, ok_named, bad_named;
} corpus_counts;

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

static int run_one(int is_idx, const uint8_t *data, size_t len)
{
    return is_idx ? fx_fuzz_idx_input(data, len, g_tmp) : fx_fuzz_cifar_input(data, len);
}

static void check_file(int is_idx, const char *dir, const char *name, corpus_counts *cnt)
{
    char path[1536];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return;
    size_t len = 0;
    uint8_t *data = read_all(path, &len);
    CHECK(data != NULL, "cannot read %s", path);
    if (!data) return;
    cnt->files++;

    int rc = run_one(is_idx, data, len);
    CHECK(rc != FX_FUZZ_BROKEN && rc <= 0, "%s: broken property (status %d, message \"%s\")", path,
          rc, flexpoint_last_error());
    if (rc < 0)
        CHECK(strncmp(flexpoint_last_error(), "fuzz: ", 6) == 0 &&
                  strlen(flexpoint_last_error()) > 8,
              "%s: %s without a proper message: \"%s\"", path, flexpoint_status_str(rc),
              flexpoint_last_error());
    if (strncmp(name, "ok-", 3) == 0) {
        cnt->ok_named++;
        CHECK(rc == FX_OK, "%s: must be accepted, got %s: %s", path, flexpoint_status_str(rc),
              flexpoint_last_error());
    } else if (strncmp(name, "bad-", 4) == 0) {
        cnt->bad_named++;
        CHECK(rc < 0, "%s: must be rejected, got %s", path, flexpoint_status_str(rc));
    }

    /* Every truncation of the input: no crash, no broken property. */
    int broken = 0;
    for (size_t cut = 0; cut < len; cut++) {
        int r = run_one(is_idx, data, cut);
        if (r == FX_FUZZ_BROKEN || r > 0) broken++;
    }
    CHECK(broken == 0, "%s: %d prefixes break a property", path, broken);
    free(data);
}

static corpus_counts check_dir(int is_idx, const char *sub)
{
    corpus_counts cnt = {0, 0, 0};
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", FX_SOURCE_DIR, sub);
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open corpus directory %s", dir);
    if (!d) return cnt;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') check_file(is_idx, dir, e->d_name, &cnt);
    closedir(d);
    printf("corpus %s: %d files (%d ok-*, %d bad-*)\n", sub, cnt.files, cnt.ok_named,
           cnt.bad_named);
    CHECK(cnt.files > 0 && cnt.ok_named > 0 && cnt.bad_named > 0,
          "corpus %s: %d files, %d ok-*, %d bad-* (want some of each)", sub, cnt.files,
          cnt.ok_named, cnt.bad_named);
    return cnt;
}

int main(void)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fx_corpus_XXXXXX");
    int fd = mkstemp(g_tmp);
    if (fd < 0) {
        fprintf(stderr, "mkstemp failed\n");
        return 1;
    }
    close(fd);
    check_dir(1, "idx");
    check_dir(0, "cifar");
    unlink(g_tmp);
    return test_finish(NAME);
}
