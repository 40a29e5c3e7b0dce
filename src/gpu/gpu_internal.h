/* Shared by the C files of the CUDA backend (src/gpu/gpu_*.c). */
#ifndef FX_GPU_INTERNAL_H
#define FX_GPU_INTERNAL_H

#include "../core/internal.h"
#include "gpu_kernels.h"

/* The device view of a tensor (its elements, format, exponent, shape and strides). The
 * exponent is exp_dev (device memory) while the storage's last write, whose exponent the
 * device chose, is pending on the host (gpu_dispatch.c); `exp` otherwise. */
fx_dview fx_gpu_view_of(const tensor_t *t);

/* Exponents for kernels (fx_dexp): a view's shared exponent plus c; the sum of two views'
 * exponents plus c (a product's stage). A view contributes at most one cell. */
fx_dexp fx_dexp_view(const fx_dview *v, int c);
fx_dexp fx_dexp_views(const fx_dview *a, const fx_dview *b, int c);
fx_dexp fx_dexp_const(int c);
/* 1 when x has no cells (its value is x.c). */
int fx_dexp_known(const fx_dexp *x);

/* The device view of a tensor whose exponent the host must know (settles a pending write
 * first, waiting for its statistics): for the few paths whose host code computes with the
 * exponent. FX_OK or the settle's status. */
int fx_gpu_view_known(const tensor_t *t, fx_dview *v, const char *func);

#endif
