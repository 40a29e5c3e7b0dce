/* libFuzzer harness for the IDX (Fashion-MNIST) parsers and the gzip/plain file reader.
 * Build and run: see tests/fuzz/README.md. The meaning of an input is in fuzz_inputs.h. */
#define _POSIX_C_SOURCE 200809L

#include "fuzz_inputs.h"

#include <stdlib.h>
#include <unistd.h>

static char tmp_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void remove_tmp(void)
{
    if (tmp_path[0]) unlink(tmp_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* One scratch file per fuzzing process for the file-reader mode. */
    snprintf(tmp_path, sizeof tmp_path, "/tmp/fx_fuzz_idx_XXXXXX");
    int fd = mkstemp(tmp_path);
    if (fd < 0) {
        tmp_path[0] = '\0';
        return 0;
    }
    close(fd);
    atexit(remove_tmp);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int rc = fx_fuzz_idx_input(data, size, tmp_path[0] ? tmp_path : NULL);
    if (rc == FX_FUZZ_BROKEN) {
        fprintf(stderr, "fuzz_idx: broken property; last error: \"%s\"\n", flexpoint_last_error());
        abort();
    }
    return 0;
}
