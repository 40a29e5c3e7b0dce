/* Where a model's tensors and raw buffers live: host memory (fx_model.device < 0, the default)
 * or the memory of one CUDA device (cfg.device >= 0). The rest of the trainer allocates, fills
 * and reads through these helpers, so the host path stays exactly what it was and the device
 * path differs only in where bytes go (flexpoint_gpu.h says which op buffers must be device
 * memory: argmax, master weights, momentum, loss-scaler outputs; which stay on the host:
 * labels, loss, batch-norm statistics, found_inf). */
#ifndef FX_TRAIN_PLACEMENT_H
#define FX_TRAIN_PLACEMENT_H

#include "model.h"

/* Check that CUDA device `device` can be used (the library has CUDA, a device with that
 * ordinal exists) and make it current on the calling thread. FX_EDEVICE with a message naming
 * `func` and the reason otherwise. device < 0 (the host) is always FX_OK. */
int fx_place_select(int device, const char *func);

/* A new zero-filled tensor where the model lives, with the flex16_5 window window_lo and the
 * config's Autoflex preset (fx_model_flex_setup; nothing for other formats). Its exponent
 * state is that of the same tensor built on the host. NULL on failure (message set). */
tensor_t *fx_place_tensor(const fx_model *m, fmt_t fmt, int ndim, const int64_t *shape,
                          int window_lo);
/* The same on the host, whatever the model's placement (staging tensors). */
tensor_t *fx_place_host_tensor(const fx_train_config *cfg, fmt_t fmt, int ndim,
                               const int64_t *shape, int window_lo);

/* n zero-filled elements of elem bytes where the model lives (calloc or flexpoint_gpu_malloc).
 * FX_ENOMEM / FX_EDEVICE with a message; *p is NULL on failure. */
int fx_place_zeros(const fx_model *m, void **p, int64_t n, size_t elem);
/* Release a buffer of fx_place_zeros (NULL is a no-op and never touches the error message). */
void fx_place_release(const fx_model *m, void *p);

/* Copy n floats between a host array and a buffer of fx_place_zeros. */
int fx_place_upload(const fx_model *m, float *buf, const float *host, int64_t n);
int fx_place_download(const fx_model *m, float *host, const float *buf, int64_t n);

/* Write host floats into m->input[ctx] (converted to the run format, one write as on the
 * host). On a device the write happens in the host staging tensor m->stage[ctx], whose
 * elements and exponent state are then copied to the device input. */
int fx_place_write_input(fx_model *m, int ctx, const float *x);

/* Dequantise a tensor of the model into host floats. On a device the tensor is first copied
 * into `host_tmp` (a host tensor of the same format and shape), or into a temporary one when
 * host_tmp is NULL. */
int fx_place_read_f32(const fx_model *m, const tensor_t *t, tensor_t *host_tmp, float *dst);

#endif
