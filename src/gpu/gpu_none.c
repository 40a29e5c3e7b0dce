/* Built when CUDA is off: the library reports no GPU. */
#include "flexpoint.h"

int flexpoint_gpu_device_count(void) { return 0; }
