/* One-pass add/sub of FLEX16_5 / DFP16 tensors for same-shape, per-channel and per-column
 * operands whose exponents are at most 15 apart (shared_binary.c); the same bits, exponent,
 * statistics and trace as the dispatcher's int64-stage route. */
#ifndef FX_CORE_SHARED_BINARY_H
#define FX_CORE_SHARED_BINARY_H

#include "backend.h"

/* positive, so that no status (FX_OK or a negative error) is mistaken for it */
#define FX_SHARED_BINARY_NOT_TAKEN 1

/* The write's status when done (shapes already validated by the caller, out is not NULL),
 * FX_SHARED_BINARY_NOT_TAKEN when the operands are not of a form handled here (nothing
 * written, no state changed). */
int fx_shared_binary(fx_op op, tensor_t *out, const tensor_t *a, const tensor_t *b);

/* out = a where gate > 0, else 0, at a's exponent (ReLU: gate = a; its gradient: a = dy,
 * gate = x), for whole FLEX16_5/DFP16 outputs that share storage with neither input and
 * contiguous FLEX16_5/DFP16 inputs of out's shape: the same write as an int16 stage of those
 * values (fx_write_i16). Otherwise FX_SHARED_BINARY_NOT_TAKEN (nothing written). */
int fx_shared_gated(tensor_t *out, const tensor_t *a, const tensor_t *gate, const char *func);

/* u = t + bias, then y = relu(u), as tensor_add and then tensor_relu write them (the same
 * bits, exponents, statistics and trace records), in one pass over the data instead of two
 * where both outputs' exponents can be guessed before the writes (fx_write_shared_guess_exp)
 * and both ops would be taken here: FLEX16_5/DFP16 host tensors, u and y whole, distinct from
 * each other and from the inputs, bias of u's shape or broadcast per channel or per column,
 * exponents of t and bias at most 15 apart, no distributed storage. The status of the writes
 * when done; FX_SHARED_BINARY_NOT_TAKEN when not taken (nothing written, no state changed,
 * no error set: the caller runs the two ops, which report any bad argument). */
FX_INTERNAL int fx_shared_add_relu(tensor_t *u, tensor_t *y, const tensor_t *t,
                                   const tensor_t *bias);

/* u = a + b, then y = u where gate > 0, else 0, as tensor_add and then tensor_relu_backward
 * (dy u, x gate) write them (the same bits, exponents, statistics and trace records), in one
 * pass over the data: the gradient of a ReLU whose output feeds two layers (u, the sum of
 * their gradients; gate, the ReLU's input). The conditions of fx_shared_add_relu, with a and b
 * of u's shape (b also per channel, as fx_shared_add_relu takes it) and gate a FLEX16_5/DFP16
 * host tensor of u's shape, distinct from u and y. The status of the writes, or
 * FX_SHARED_BINARY_NOT_TAKEN as fx_shared_add_relu's. */
FX_INTERNAL int fx_shared_add_gated(tensor_t *u, tensor_t *y, const tensor_t *a, const tensor_t *b,
                                    const tensor_t *gate);

/* fx_shared_add_relu for a producer that makes t in pieces (the trainer's convolutions,
 * src/nn/conv2d.c fx_conv2d_shared_bias_relu): u = t + bias and y = relu(u) rounded at their
 * guessed exponents straight into u and y, piece by piece while each piece of t is in cache,
 * then the two writes. The bits, exponents, statistics and trace records are
 * fx_shared_add_relu's on t's values at exponent et.
 *
 * fx_add_relu_begin: the run, reading t's values (et) from tdata, t's layout; NULL where
 * fx_shared_add_relu would not take the op, the bias is not one value per plane of `unit`
 * elements (a conv's [O, 1, 1] bias), or memory is short (nothing written, no state changed).
 * fx_add_relu_units: elements [lo, lo + n) (whole planes) of t into u and y, their statistics
 * merged into *qu and *qy; one thread, any order, disjoint ranges from several threads.
 * fx_add_relu_finish: after every element went through fx_add_relu_units with tdata still
 * holding t's values, the writes of u and y from the merged statistics (either may round
 * again from tdata or u); returns their status and frees the run. fx_add_relu_cancel frees
 * it without writing: u and y then hold whatever the pieces wrote, and must be written again
 * (fx_shared_add_relu, or tensor_add and tensor_relu) before they are read. */
typedef struct fx_add_relu_run fx_add_relu_run;
fx_add_relu_run *fx_add_relu_begin(tensor_t *u, tensor_t *y, const tensor_t *t, int et,
                                   const int16_t *tdata, const tensor_t *bias, int64_t unit);
void fx_add_relu_units(const fx_add_relu_run *r, int64_t lo, int64_t n, fx_qstats *qu,
                       fx_qstats *qy);
int fx_add_relu_finish(fx_add_relu_run *r, const fx_qstats *qu, const fx_qstats *qy);
void fx_add_relu_cancel(fx_add_relu_run *r);

/* tensor_relu(y, u) for a producer that writes u in pieces (batch norm's direct route,
 * src/nn/batchnorm_direct.c): y = relu(u) rounded at a guessed exponent straight into y, piece
 * by piece while each piece of u is in cache, then y's write, which reuses that rounding where
 * it picks the guess. The bits, exponent, statistics and trace records are tensor_relu's.
 *
 * fx_relu_early_ok: whether tensor_relu(y, u) takes this file's one-pass route (fx_shared_gated)
 * and y's exponent can be guessed before u is written (*ey, fx_write_shared_guess_exp); no
 * state is read but shapes, formats, storage and y's exponent state.
 * fx_relu_piece: n mantissas of u, at u's exponent, gated by their own signs and rounded
 * `shift` places into y (the pass fx_shared_gated makes), their statistics merged into *q; one
 * thread, any order of pieces.
 * fx_relu_early_finish: after every piece of u went through fx_relu_piece with u at exponent
 * eu (u's exponent now) and shift ey - eu, y's write from the merged statistics q, rounding
 * again from u where it picks another exponent than ey; returns its status.
 * fx_relu_early_finish_src: the same for a u whose mantissas may not be stored yet: before
 * anything reads them (a write that picks another exponent than ey, a u whose exponent is no
 * longer eu, a pair the one-pass route does not take), u_ready(ctx) is called once to store
 * them. */
FX_INTERNAL int fx_relu_early_ok(tensor_t *y, const tensor_t *u, int *ey);
FX_INTERNAL void fx_relu_piece(const int16_t *u, int16_t *y, int64_t n, int shift, fx_qstats *q);
FX_INTERNAL int fx_relu_early_finish(tensor_t *y, const tensor_t *u, int eu, int ey,
                                     const fx_qstats *q);
FX_INTERNAL int fx_relu_early_finish_src(tensor_t *y, const tensor_t *u, int eu, int ey,
                                         const fx_qstats *q, void (*u_ready)(void *),
                                         void *ctx);

/* Test hook: 0 sends every add/sub (and gated write) through the dispatcher (to compare the two routes). */
void fx_shared_binary_set_enabled(int on);
/* Test hook: how many ops this file has done since the process started. */
int64_t fx_shared_binary_taken(void);
/* Test hook: how many of those were rounded first at a guessed exponent
 * (fx_write_shared_guess_exp), without a maximum pass. */
int64_t fx_shared_binary_fused(void);
/* Test hook: how many writes rounded again because the write picked another exponent than
 * the early rounding's guess. */
int64_t fx_shared_binary_missed(void);
/* Test hook: how many adds fx_shared_add_relu or fx_add_relu_finish made with their ReLU in
 * one pass. */
int64_t fx_shared_add_relu_made(void);
/* Test hook: how many sums fx_shared_add_gated made with the gate in the same pass. */
FX_INTERNAL int64_t fx_shared_add_gated_made(void);
/* Test and benchmark hook: 0 makes an add's ReLU (or a sum's gate) in a second pass over each
 * work unit even where the level has sum2_quant_gated, which makes both in one (default 1). */
FX_INTERNAL void fx_shared_binary_set_gated_kernel(int on);
/* Test hook: how many work units sum2_quant_gated has made since the process started. */
FX_INTERNAL int64_t fx_shared_binary_gated_units(void);

#endif
