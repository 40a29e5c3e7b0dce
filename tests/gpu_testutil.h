/* Helpers shared by the device tests (test_gpu_ops.c, test_gpu_conv.c, test_gpu_nn.c). Each
 * test compares an op on a device with the same op on the host under the scalar backend. With
 * FX_GPU_TEST_ON_HOST=1 (gpu_test_on_host set), host tensors stand in for device tensors, so
 * the comparison harness and its bounds run on a machine without a GPU. */
#ifndef FX_GPU_TESTUTIL_H
#define FX_GPU_TESTUTIL_H

#include "flexpoint.h"
#include "flexpoint_gpu.h"
#include "testutil.h"

extern int gpu_test_on_host; /* stand-ins instead of device tensors */

/* A host copy of t (its logical contents, contiguous) with its exponent state: what
 * tensor_to_host / tensor_to_device copy. NULL on allocation failure. */
tensor_t *gpu_test_host_clone(const tensor_t *t);

/* The "device" copy of a host tensor, a new "device" tensor, and a host copy of a "device"
 * tensor (clones in host mode). Each CHECKs its result and returns NULL on failure. */
tensor_t *gpu_test_to_dev(const tensor_t *h);
tensor_t *gpu_test_new_dev(fmt_t f, int ndim, const int64_t *shape);
tensor_t *gpu_test_to_host(const tensor_t *d);

/* CHECKs that the device result d equals the host result h exactly: every element's bits and,
 * for the shared-exponent formats, the exponent and every write statistic. NULL h or d: no
 * check (the allocation failure was reported where it happened). */
void gpu_test_check_same(const tensor_t *h, const tensor_t *d, const char *what);

/* The device backend's tuning switches (src/core/device_backend.h), which do nothing in a
 * build without one: the integer GEMM's scheme (FX_GK_I16_*, src/gpu/gpu_kernels.h) with its
 * automatic K chunk, and the convolution's patch chunk (returns the previous value; 0 without
 * a device backend). */
void gpu_test_set_i16_gemm(int path);
int64_t gpu_test_set_conv_chunk(int64_t elems);

/* Values of many magnitudes: sign * u * 2^k, u in [0.01, 2.01), k in [-kspan, kspan]. */
void gpu_test_fill(float *v, int64_t n, test_rng *r, int kspan);

#endif
