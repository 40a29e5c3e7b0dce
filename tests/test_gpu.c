/* GPU presence. Skips (ctest code 77) when the library has no CUDA device; CUDA kernels arrive
 * with a later issue, and their tests will live behind the same check. */
#include "flexpoint.h"
#include "testutil.h"

int main(void)
{
    int n = flexpoint_gpu_device_count();
    if (n <= 0) return test_skip("test_gpu", "no CUDA device (or built without CUDA)");
    CHECK(n >= 1, "device count %d", n);
    return test_finish("test_gpu");
}
