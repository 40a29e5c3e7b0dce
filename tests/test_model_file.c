/* Model files (fx_model_def_parse, fx_model_def_load; docs/models.md).
 *
 * - Every kind of bad text is refused with FX_ECORRUPT and a message "SOURCE:LINE: ..." naming
 *   the right line and the problem: an unknown kind, an unknown input, a forward reference (a
 *   cycle), a shape mismatch, truncated lines, a duplicate name, bad numbers, unknown keys,
 *   misplaced or malformed model and input lines, a NUL byte, an overlong line, a layer that
 *   feeds nothing, an empty text, one over the size limit.
 * - Comments, blank lines, tabs, CRLF line ends and a missing final newline are accepted, and
 *   a file's definition equals the same layers added with the C API.
 * - Loading: a missing file, a folder and a FIFO are refused with FX_EIO at once (never waited
 *   on); a gzip-compressed file reads like the plain one.
 * - The fuzzer's corpus (tests/fuzz/corpus/model/) replays with the fuzzer's properties
 *   (tests/fuzz/fuzz_model_inputs.h): ok-* accepted, bad-* refused. */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "flexpoint_model.h"
#include "testutil.h"
#include "fuzz/fuzz_model_inputs.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static const char *const NAME = "test_model_file";

/* text is refused with FX_ECORRUPT, its message holds "net.txt:<line>:" and `what`. */
static void refused(const char *text, int line, const char *what)
{
    fx_model_def *d = (fx_model_def *)&d; /* must be reset to NULL */
    int rc = fx_model_def_parse(text, strlen(text), "net.txt", &d);
    char want[32];
    snprintf(want, sizeof want, "net.txt:%d: ", line);
    const char *m = flexpoint_last_error();
    CHECK(rc == FX_ECORRUPT, "status %d for:\n%s", rc, text);
    CHECK(d == NULL, "a definition returned on failure");
    CHECK(strstr(m, want) != NULL, "message '%s' does not name line %d", m, line);
    CHECK(strstr(m, what) != NULL, "message '%s' does not say '%s'", m, what);
}

static void errors(void)
{
    const char *in = "model net\ninput shape=3,8,8\n";
    char t[2048];
#define T(body) (snprintf(t, sizeof t, "%s%s", in, body), t)
    /* unknown kind, on line 4 after a comment */
    refused(T("# a comment\nlstm l1\n"), 4, "unknown layer kind 'lstm'");
    /* missing input name, and an unknown one */
    refused(T("conv2d c out=4 kernel=3 pad=1\nrelu r in=nothere\n"), 4, "unknown input 'nothere'");
    refused(T("relu r in=\n"), 3, "key 'in' has no value");
    /* a forward reference: a cycle a -> b -> a */
    refused(T("flatten f\nlinear a out=16 in=b\nlinear b out=16 in=a\n"), 4,
            "defined later, on line 5");
    refused(T("relu r in=r\n"), 3, "unknown input 'r'");
    /* shape mismatches */
    refused(T("conv2d c out=4 kernel=3 pad=1\nconv2d d out=8 kernel=3 pad=1\nadd s in=c,d\n"),
            5, "differ in shape");
    refused(T("conv2d c out=4 kernel=9\n"), 3, "output would be empty");
    refused(T("flatten f\nconv2d c out=4 kernel=1\n"), 4, "takes (C, H, W)");
    refused(T("global_avgpool g\nmaxpool2d p kernel=2\n"), 4, "takes (C, H, W)");
    refused(T("maxpool2d p kernel=2 pad=2\n"), 3, "pad 2 is outside [0, 1]");
    /* truncated lines */
    refused(T("conv2d\n"), 3, "without a layer name");
    refused(T("conv2d c out=4 kernel=\n"), 3, "key 'kernel' has no value");
    refused(T("conv2d c out=4\n"), 3, "needs kernel=");
    refused(T("linear fc\n"), 3, "needs out=");
    refused(T("dropout d\nlinear fc out=2\n"), 3, "needs p=");
    refused(T("add s in=input\n"), 3, "needs in=a,b");
    refused(T("conv2d c out 4\n"), 3, "'out' is not key=value");
    /* duplicate names, reserved names */
    refused(T("flatten f\nlinear a out=4\nlinear a out=4\n"), 5, "name is taken");
    refused(T("relu input\n"), 3, "\"input\" names the network input");
    refused(T("relu a,b\n"), 3, "layer name 'a,b'");
    /* bad numbers */
    refused(T("linear a out=0x10\n"), 3, "out='0x10' is not a whole number");
    refused(T("linear a out=-3\n"), 3, "out='-3' is not a whole number");
    refused(T("linear a out=007\n"), 3, "out='007' is not a whole number");
    refused(T("linear a out=99999999999999999999\n"), 3, "not a whole number");
    refused(T("linear a out=16777217\n"), 3, "outside [1, 16777216]");
    refused(T("conv2d c out=4 kernel=3 bias=2\n"), 3, "bias=2 is outside [0, 1]");
    refused(T("dropout d p=abc\nlinear fc out=2\n"), 3, "p='abc' is not a number");
    refused(T("dropout d p=nan\nlinear fc out=2\n"), 3, "is not a number");
    refused(T("dropout d p=1\nlinear fc out=2\n"), 3, "outside [0, 1)");
    /* unknown or repeated keys, two inputs where one is taken */
    refused(T("linear a out=4 size=3\n"), 3, "unknown key 'size' (keys: out, in)");
    refused(T("linear a out=4 out=5\n"), 3, "key 'out' given twice");
    refused(T("linear a out=4 in=input,input\n"), 3, "must name one layer");
    /* a layer's output feeds at most two layers */
    refused(T("relu a\nrelu b in=a\nrelu c in=a\nrelu d in=a\n"), 6, "already feeds two");
    /* a layer that feeds nothing (only the last may) */
    refused(T("flatten f\nlinear a out=4\nlinear b out=4 in=f\n"), 4, "feeds no later layer");
    /* the model and input lines */
    refused("input shape=16\nmodel late\nlinear a out=2\n", 2, "'model' must come once");
    refused("model a b\ninput shape=16\n", 1, "'model NAME'");
    refused("model\ninput shape=16\n", 1, "'model NAME'");
    refused("# nothing yet\nlinear a out=4\ninput shape=16\n", 2, "before the input line");
    refused("input shape=16\ninput shape=16\n", 2, "a second input line");
    refused("input shape=1,,4\nlinear a out=2\n", 1, "not sizes separated by commas");
    refused("input shape=0,4\nlinear a out=2\n", 1, "outside [1, 2^24]");
    refused("input shape=1,2,3,4,5\nlinear a out=2\n", 1, "more than 4 dimensions");
    refused("input 1,28,28\nlinear a out=2\n", 1, "input shape=C,H,W");
    refused("model bad*name\ninput shape=4\nlinear a out=2\n", 2, "model name 'bad*name'");
    refused("", 1, "no input line");
    refused("# only a comment\n\n", 2, "no input line");
    refused("input shape=16\n\n", 2, "no layer after the input line");
    /* bytes: a NUL, an overlong line, too many words */
    const char nul[] = "input shape=16\nlinear a\0 out=4\n";
    fx_model_def *d = NULL;
    CHECK_STATUS(fx_model_def_parse(nul, sizeof nul - 1, "net.txt", &d), FX_ECORRUPT);
    CHECK(strstr(flexpoint_last_error(), "net.txt:2: a NUL byte"), "NUL: %s",
          flexpoint_last_error());
    char *longl = malloc(3000);
    if (longl) {
        int n = snprintf(longl, 3000, "input shape=16\n# ");
        memset(longl + n, 'x', 1500);
        longl[n + 1500] = '\0';
        refused(longl, 2, "longer than 1024 bytes");
        free(longl);
    }
    refused(T("relu a b c d e f g h i j k l m n o p q\n"), 3, "more than 16 words");
    /* the size limit */
    size_t big = (size_t)FX_MODEL_FILE_MAX + 1;
    char *huge = malloc(big);
    if (huge) {
        memset(huge, '#', big);
        CHECK_STATUS(fx_model_def_parse(huge, big, "net.txt", &d), FX_ECORRUPT);
        CHECK(strstr(flexpoint_last_error(), "more than a model file's"), "size: %s",
              flexpoint_last_error());
        free(huge);
    }
    CHECK_STATUS(fx_model_def_parse(NULL, 4, "x", &d), FX_EINVAL);
    CHECK_STATUS(fx_model_def_parse("input shape=1", 13, "x", NULL), FX_EINVAL);
#undef T
}

/* A file's definition equals the same layers added with the C API (same identity), whatever
 * its blanks, comments and line ends. */
static void accepted(void)
{
    const char *text = "# an MLP with odd spacing\r\n"
                       "model   tiny\t# its name\r\n"
                       "\r\n"
                       "input shape=1,4,4\r\n"
                       "  linear\tfc1   out=8\r\n"
                       "relu r1 in=fc1\n"
                       "dropout d p=0.5\n"
                       "linear fc2 out=3"; /* no final newline */
    fx_model_def *f = NULL, *c = NULL;
    CHECK_STATUS(fx_model_def_parse(text, strlen(text), "tiny.txt", &f), FX_OK);
    int64_t s[3] = {1, 4, 4};
    CHECK_STATUS(fx_model_def_new("tiny", 3, s, &c), FX_OK);
    if (c) {
        CHECK_STATUS(fx_model_def_linear(c, "fc1", NULL, 8), FX_OK);
        CHECK_STATUS(fx_model_def_activation(c, "relu", "r1", NULL), FX_OK);
        CHECK_STATUS(fx_model_def_dropout(c, "d", NULL, 0.5), FX_OK);
        CHECK_STATUS(fx_model_def_linear(c, "fc2", NULL, 3), FX_OK);
    }
    char a[FX_MODEL_ID_SIZE] = "a", b[FX_MODEL_ID_SIZE] = "b";
    if (f && c) {
        CHECK_STATUS(fx_model_def_identity(f, a), FX_OK);
        CHECK_STATUS(fx_model_def_identity(c, b), FX_OK);
        char ta[1024], tb[1024];
        CHECK_STATUS(fx_model_def_to_text(f, ta, sizeof ta, NULL), FX_OK);
        CHECK_STATUS(fx_model_def_to_text(c, tb, sizeof tb, NULL), FX_OK);
        CHECK(strcmp(ta, tb) == 0, "texts differ:\n%s\n%s", ta, tb);
        CHECK(strstr(ta, "model tiny\n") && strstr(ta, "dropout d p=0.5 in=r1\n"),
              "canonical text:\n%s", ta);
    }
    CHECK(strcmp(a, b) == 0, "identities %s (file) and %s (API)", a, b);
    fx_model_def_free(f);
    fx_model_def_free(c);
}

static void loading(void)
{
    char dir[] = "/tmp/fx_test_model_file_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    char p[256];
    fx_model_def *d = NULL;
    snprintf(p, sizeof p, "%s/missing.txt", dir);
    CHECK_STATUS(fx_model_def_load(p, &d), FX_EIO);
    CHECK_STATUS(fx_model_def_load(dir, &d), FX_EIO);
    snprintf(p, sizeof p, "%s/fifo.txt", dir);
    if (mkfifo(p, 0600) == 0) {
        CHECK_STATUS(fx_model_def_load(p, &d), FX_EIO); /* at once: nobody writes to it */
        CHECK(strstr(flexpoint_last_error(), "FIFO") != NULL, "FIFO: %s",
              flexpoint_last_error());
        unlink(p);
    }
    /* plain and gzip-compressed */
    const char *text = "model z\ninput shape=4\nlinear out out=2\n";
    snprintf(p, sizeof p, "%s/net.txt.gz", dir);
    gzFile g = gzopen(p, "wb");
    CHECK(g != NULL, "gzopen");
    if (g) {
        gzwrite(g, text, (unsigned)strlen(text));
        gzclose(g);
        CHECK_STATUS(fx_model_def_load(p, &d), FX_OK);
        CHECK(d && fx_model_def_layer_count(d) == 1, "the gzip file's layers");
        fx_model_def_free(d);
        d = NULL;
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/bad.txt", dir);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs("input shape=4\nlinear out out=2\nlinear out out=2\n", f);
        fclose(f);
        CHECK_STATUS(fx_model_def_load(p, &d), FX_ECORRUPT);
        char want[300];
        snprintf(want, sizeof want, "%s:3: ", p);
        CHECK(strstr(flexpoint_last_error(), want), "the message names no path and line: %s",
              flexpoint_last_error());
        unlink(p);
    }
    CHECK_STATUS(fx_model_def_load(NULL, &d), FX_EINVAL);
    rmdir(dir);
}

static uint8_t *file_bytes(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *b = malloc(1 << 16);
    *len = b ? fread(b, 1, 1 << 16, f) : 0;
    fclose(f);
    return b;
}

static void corpus_replay(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/model", FX_SOURCE_DIR);
    DIR *dd = opendir(dir);
    CHECK(dd != NULL, "cannot open %s", dir);
    int ok = 0, bad = 0;
    struct dirent *e;
    while (dd && (e = readdir(dd)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        size_t len = 0;
        uint8_t *data = file_bytes(p, &len);
        CHECK(data != NULL, "cannot read %s", p);
        if (!data) continue;
        int rc = fx_fuzz_model_input(data, len);
        CHECK(rc != FX_FUZZ_BROKEN, "%s: broken property; last error: %s", e->d_name,
              flexpoint_last_error());
        if (!strncmp(e->d_name, "ok-", 3)) {
            ok++;
            CHECK(rc == FX_OK, "%s: refused: %s", e->d_name, flexpoint_last_error());
        } else if (!strncmp(e->d_name, "bad-", 4)) {
            bad++;
            CHECK(rc < 0, "%s: accepted", e->d_name);
        }
        if (getenv("FX_TEST_VERBOSE"))
            printf("%-36s %d %s\n", e->d_name, rc, rc ? flexpoint_last_error() : "");
        free(data);
    }
    if (dd) closedir(dd);
    CHECK(ok >= 4 && bad >= 20, "corpus: %d ok-*, %d bad-*", ok, bad);
}

int main(void)
{
    errors();
    accepted();
    loading();
    corpus_replay();
    return test_finish(NAME);
}
