/* Shared by the C files of the CUDA backend (src/gpu/gpu_*.c). */
#ifndef FX_GPU_INTERNAL_H
#define FX_GPU_INTERNAL_H

#include "../core/internal.h"
#include "gpu_kernels.h"

/* The device view of a tensor (its elements, format, exponent, shape and strides). */
fx_dview fx_gpu_view_of(const tensor_t *t);

#endif
