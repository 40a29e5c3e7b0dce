/* Softmax cross-entropy of one rank's rows of a batch split over several processes
 * (src/dist/distributed.h). */
#ifndef FX_NN_SOFTMAX_CE_H
#define FX_NN_SOFTMAX_CE_H

#include "flexpoint_nn.h"
#include "../core/internal_export.h" /* FX_INTERNAL: src/train calls it */

/* tensor_softmax_cross_entropy's host computation on logits [N, K] with two differences that
 * let the rows of one batch be computed apart: each row's loss goes to row_loss[0..N) (the
 * caller sums them in row order, as the one-process mean does), and the gradient divides by
 * n_div, the whole batch's row count, rather than N. FX_EUNSUPPORTED for device tensors; the
 * other checks and errors are tensor_softmax_cross_entropy's. */
FX_INTERNAL int fx_softmax_ce_rows(double *row_loss, tensor_t *dlogits, const tensor_t *logits,
                                   const int32_t *labels, double grad_scale, int64_t n_div);

#endif
