/* Batch norm's forward output straight into a shared-exponent y (batchnorm_direct.c says how
 * and why the bits are the stage route's). */
#ifndef FX_BN_DIRECT_H
#define FX_BN_DIRECT_H

#include "bn_kernels.h"
#include "flexpoint.h"

#define FX_BN_DIRECT_DECLINED 1 /* not taken: the caller runs the stage route */

/* Whether the route may take y = batchnorm(x) where the kernels read x as xs: x's int16
 * mantissas, into a whole FLEX16_5/DFP16 y that shares no storage with x (the route may
 * normalise x again after it has written y, when the write recomputes an overflow). */
int fx_bn_direct_ok(const tensor_t *y, const tensor_t *x, const fx_bn_src *xs);

/* y's write with channel c's output (xs - mu[c]) * a[c] + b[c] (as the kernels compute it,
 * rounded to odd fp32), where lo[c] and hi[c] are channel c's smallest and largest mantissa
 * (the kernels' sum_range_i16): FX_OK or the write's status, or FX_BN_DIRECT_DECLINED (nothing
 * written) where an output is not finite, which the stage route counts, or where there are no
 * inputs. With relu_y (a tensor of y's shape sharing storage with neither x nor y; NULL: none),
 * where tensor_relu would take its one-pass route (fx_relu_early_ok), relu(y) is also made from
 * each piece of y while it is in cache, and once y's write succeeded, relu_y's write follows
 * (tensor_relu's bits); *relu_done then says that relu_y's write was made (the status is that
 * write's), and stays 0 otherwise: the caller writes relu_y itself. y_written (NULL: y is always
 * written) lets the route leave y's mantissas unwritten where relu_y > 0 holds exactly where
 * y > 0 (relu_y's exponent, both writes settled, no coarser than y's): y's write is still made
 * (its exponent, statistics and Autoflex state are the same), only its values are not stored;
 * *y_written is then 0, else 1. A ReLU's gradient gated by relu_y is then the one gated by y,
 * and y's storage keeps whatever it held. */
int fx_bn_forward_direct(tensor_t *y, const fx_bn_src *xs, const fx_bn_dims *d,
                         const fx_bn_kernels *k, const double *mu, const double *a,
                         const double *b, const int16_t *lo, const int16_t *hi,
                         tensor_t *relu_y, int *relu_done, int *y_written, const char *func);

/* Test hooks: 0 makes fx_bn_forward_direct write y even where the caller lets it go unwritten;
 * the runs that left y unwritten, and the passes that left it so and then wrote it after all
 * (relu_y's write rounding again from y, or relu_y's exponent coarser than y's) */
void fx_bn_y_unkept_set_enabled(int on);
int64_t fx_bn_y_unkept_runs(void);
int64_t fx_bn_y_stored_late(void);

/* The backward pass's coefficients per channel c: dx = k[c] * (dy - mdy[c] - xhat * mdyx[c]),
 * xhat = (x - mu[c]) * is[c] (bn_kernels.h, backward; mu and is are the caller's save_mean and
 * save_invstd) */
typedef struct fx_bn_coefs {
    const float *mu, *is;
    const double *k, *mdy, *mdyx;
} fx_bn_coefs;

/* Whether the backward route may take dx from x and dy, with *e the exponent to round at: a
 * whole FLEX16_5/DFP16 dx that shares no storage with x or dy (the route reads both again after
 * writing dx when the write asks for another exponent), whose write cannot fail (dx is written
 * before its write decides) and whose exponent can be guessed (fx_write_shared_guess_exp: not
 * a managed FLEX16_5 tensor's first write), and a batch with elements. */
int fx_bn_backward_direct_ok(const tensor_t *dx, const tensor_t *x, const tensor_t *dy,
                             const fx_bn_dims *d, int *e);

/* dx's write with its values computed by k's backward kernel from xs and gs with the
 * coefficients cf, rounded at exponent e (fx_bn_backward_direct_ok's, dx unchanged since)
 * without an fp32 stage (batchnorm_direct.c): FX_OK or the write's status. */
int fx_bn_backward_direct(tensor_t *dx, int e, const fx_bn_src *xs, const fx_bn_src *gs,
                          const fx_bn_dims *d, const fx_bn_kernels *k, const fx_bn_coefs *cf,
                          const char *func);

/* Test hooks: 0 sends every backward pass to the stage route; runs, and writes that asked for
 * another exponent than the guess (rounded again), counted */
void fx_bn_backward_direct_set_enabled(int on);
int64_t fx_bn_backward_direct_runs(void);
int64_t fx_bn_backward_direct_missed(void);

/* Test hooks: 0 makes both routes above round every piece from its fp32 buffer, not in
 * registers (the level's normalize_i16/backward_i16: the same bits); the pieces rounded in
 * registers, counted */
void fx_bn_q16_set_enabled(int on);
int64_t fx_bn_q16_pieces(void);

/* Test hooks: 0 sends every forward pass to the stage route; runs counted, and of those the
 * ReLUs made from the pieces of y */
void fx_bn_direct_set_enabled(int on);
int64_t fx_bn_direct_runs(void);
int64_t fx_bn_direct_relu_runs(void);

#endif
