/* libFuzzer harness for the model-file parser (fx_model_def_parse, src/train/model_file.c):
 * every layer kind's options, names, inputs and shapes from untrusted text. Build and run: see
 * tests/fuzz/README.md. The properties checked are in fuzz_model_inputs.h. */
/* fuzz-options: -max_len=4096 -dict=tests/fuzz/model.dict */
#include "fuzz_model_inputs.h"

#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fx_fuzz_model_input(data, size) == FX_FUZZ_BROKEN) {
        fprintf(stderr, "fuzz_model: broken property; last error: \"%s\"\n",
                flexpoint_last_error());
        abort();
    }
    return 0;
}
