/* Built when CUDA is off: no device tensor can be made, so conv2d.c reaches this only with a
 * tensor marked as device memory by other means; it reports FX_EDEVICE with a message and
 * touches nothing. */
#include "../core/internal.h"
#include "gpu_conv.h"

int fx_gpu_conv2d(int kind, tensor_t *out, const tensor_t *a, const tensor_t *b,
                  const fx_conv_geom *g, const char *func)
{
    (void)kind;
    (void)a;
    (void)b;
    (void)g;
    return fx_error(FX_EDEVICE, func, "the tensors live on CUDA device %d, but this build of "
                    "flexpoint has no CUDA backend (built with FLEXPOINT_CUDA=OFF or without "
                    "nvcc)", out->st->device);
}

/* Only the CUDA path chunks; the value is kept so that tests read back what they set. */
static int64_t g_chunk_elems = FX_GPU_CONV_CHUNK_ELEMS;

int64_t fx_gpu_conv_chunk_elems(int64_t elems)
{
    const int64_t want = elems > 0 ? elems : FX_GPU_CONV_CHUNK_ELEMS;
    return __atomic_exchange_n(&g_chunk_elems, want, __ATOMIC_RELAXED);
}
