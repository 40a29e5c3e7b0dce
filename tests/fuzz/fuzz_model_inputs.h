/* The model-file parser's fuzz properties (fx_model_def_parse), shared by the libFuzzer harness
 * tests/fuzz/fuzz_model.c and the corpus replay in tests/test_model_file.c. An input is the
 * text of a model file. Returns FX_OK when the text is accepted, its (negative) status when it
 * is refused as it must be, or FX_FUZZ_BROKEN when a property that must always hold is broken:
 * - a refusal is FX_ECORRUPT (or FX_ENOMEM) with no definition and a message
 *   "fx_model_def_parse: fuzz:LINE: ..." whose LINE is a line of the input (1 to lines + 1),
 *   or, for a text over the size limit, "fuzz: N bytes";
 * - an accepted text gives a definition with at least one layer whose canonical text parses
 *   back to the same canonical text and identity. */
#ifndef FX_FUZZ_MODEL_INPUTS_H
#define FX_FUZZ_MODEL_INPUTS_H

#include "flexpoint.h"
#include "flexpoint_model.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef FX_FUZZ_BROKEN
#define FX_FUZZ_BROKEN 1
#endif

static inline int fx_fuzz_model_refusal(int rc, const fx_model_def *d, const uint8_t *data,
                                        size_t size)
{
    if (d || (rc != FX_ECORRUPT && rc != FX_ENOMEM)) return FX_FUZZ_BROKEN;
    if (rc == FX_ENOMEM) return rc;
    const char *m = flexpoint_last_error();
    const char *pre = "fx_model_def_parse: fuzz:";
    if (strncmp(m, pre, strlen(pre)) != 0) return FX_FUZZ_BROKEN;
    m += strlen(pre);
    if (*m == ' ') return size > FX_MODEL_FILE_MAX ? rc : FX_FUZZ_BROKEN;
    long line = 0;
    int digits = 0;
    for (; *m >= '0' && *m <= '9' && digits < 9; m++, digits++) line = line * 10 + (*m - '0');
    if (!digits || *m != ':') return FX_FUZZ_BROKEN;
    long lines = 1;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    return line >= 1 && line <= lines ? rc : FX_FUZZ_BROKEN;
}

static inline int fx_fuzz_model_input(const uint8_t *data, size_t size)
{
    fx_model_def *d = NULL;
    flexpoint_clear_error();
    int rc = fx_model_def_parse((const char *)data, size, "fuzz", &d);
    if (rc != FX_OK) return fx_fuzz_model_refusal(rc, d, data, size);
    int broken = !d || fx_model_def_layer_count(d) < 1;
    size_t len = 0, len2 = 0;
    char *t1 = NULL, *t2 = NULL;
    fx_model_def *back = NULL;
    char i1[FX_MODEL_ID_SIZE] = "", i2[FX_MODEL_ID_SIZE] = "";
    if (!broken && fx_model_def_to_text(d, NULL, 0, &len) == FX_ERANGE &&
        (t1 = malloc(len + 1)) != NULL && (t2 = malloc(len + 1)) != NULL) {
        broken = fx_model_def_to_text(d, t1, len + 1, NULL) != FX_OK ||
                 fx_model_def_parse(t1, len, "canonical", &back) != FX_OK ||
                 fx_model_def_to_text(back, t2, len + 1, &len2) != FX_OK || len2 != len ||
                 memcmp(t1, t2, len) != 0 || fx_model_def_identity(d, i1) != FX_OK ||
                 fx_model_def_identity(back, i2) != FX_OK || strcmp(i1, i2) != 0;
    }
    free(t1);
    free(t2);
    fx_model_def_free(back);
    fx_model_def_free(d);
    return broken ? FX_FUZZ_BROKEN : FX_OK;
}

#endif
