/* An output made row by row (softmax, attention's probabilities, the softmax gradient) written
 * without a whole fp32 stage where its format allows (src/nn/nn_rows_write.c says how, and why
 * the bits are the stage's). */
#ifndef FX_NN_ROWS_WRITE_H
#define FX_NN_ROWS_WRITE_H

#include "flexpoint.h"

#include <stdint.h>

/* Rows [r0, r0 + nr) of the output (nr * len values, row-major) into out, computed by the op's
 * own arithmetic; also their largest finite |value| into *rmax and their count of NaN/Inf into
 * *rbad, as the stage's scan would find them, where the caller said it gives them (both may be
 * NULL otherwise). It may be called more than once for a row, from any thread, so it must only
 * read its context. */
typedef void (*nn_row_fn)(const void *ctx, int64_t r0, int64_t nr, float *out, float *rmax,
                          int64_t *rbad);

/* y (rows x len values, row-major) made by fn group rows at a time (group * len <= NN_ROW_MAX
 * for the 16-bit routes; the last group may be shorter), on nt threads, each group whole on one
 * thread:
 *   - an fp32 y whose storage no input shares (shares_input 0): the rows computed in place;
 *   - an fp16/bf16 y, contiguous, on the host, no distributed storage, sharing no storage
 *     with an input: each row converted into y by the write's conversion while in L1;
 *   - a FLEX16_5/DFP16 y that fx_guessed_write_ok accepts and no input shares: each row
 *     rounded at the guessed exponent with the write's rounding, and computed again where the
 *     write chooses another exponent (fx_guessed_write);
 *   - anything else: the rows into an fp32 stage, then the one write (fx_write_f32_max with
 *     fn's statistics where it gives them, else fx_write_f32).
 * The values, the exponent and the write's statistics are the stage route's in every case.
 * rows * len must be y's element count. FX_OK or a status with the message set (nothing
 * written on a failed allocation). */
#define NN_ROW_MAX 2048
int nn_write_rows(tensor_t *y, int64_t rows, int64_t len, int64_t group, nn_row_fn fn,
                  const void *ctx, int has_stats, int shares_input, int nt, const char *func);

/* Test hooks: 0 sends every output through the fp32 stage; the writes that took a 16-bit row
 * route (fp16/bf16 converted, or FLEX16_5/DFP16 rounded) and those of the latter whose write
 * asked for another exponent. */
void nn_rows_write_set_direct(int on);
int64_t nn_rows_write_direct_runs(void);
int64_t nn_rows_write_direct_missed(void);

#endif
