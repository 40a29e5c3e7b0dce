/* fuzz-options: -max_len=10000 */
/* libFuzzer harness for the CIFAR-10 binary-batch parser. Build and run: see
 * tests/fuzz/README.md. The meaning of an input is in fuzz_inputs.h. */
#include "fuzz_inputs.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int rc = fx_fuzz_cifar_input(data, size);
    if (rc == FX_FUZZ_BROKEN) {
        fprintf(stderr, "fuzz_cifar: broken property; last error: \"%s\"\n",
                flexpoint_last_error());
        abort();
    }
    return 0;
}
