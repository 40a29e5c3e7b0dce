// CUDA side of the library, behind an extern "C" boundary: C callers see only plain functions.
#include <cuda_runtime.h>

#include "flexpoint.h"

extern "C" int flexpoint_gpu_device_count(void)
{
    int n = 0;
    // No driver or no device is not an error for the library: it simply has no GPU.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky error state
        return 0;
    }
    return n;
}
