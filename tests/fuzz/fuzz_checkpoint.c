/* libFuzzer harness for the checkpoint parser (fx_ckpt_decode: header, every field's range,
 * tensor states, and the trainer left unchanged on refusal). Build and run: see
 * tests/fuzz/README.md or tools/fuzz_check.sh. The meaning of an input is in
 * fuzz_checkpoint_inputs.h. Needs the whole library (a trainer is built once, at start). */
#include "fuzz_checkpoint_inputs.h"

#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fx_fuzz_ckpt g_ckpt;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    int rc = fx_fuzz_ckpt_setup(&g_ckpt);
    if (rc != FX_OK) {
        fprintf(stderr, "fuzz_checkpoint: setup failed (%d): %s\n", rc, flexpoint_last_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int rc = fx_fuzz_ckpt_input(&g_ckpt, data, size);
    if (rc == FX_FUZZ_BROKEN) {
        fprintf(stderr, "fuzz_checkpoint: broken property; last error: \"%s\"\n",
                flexpoint_last_error());
        abort();
    }
    return 0;
}
