/* tensor_matmul of FLEX16_5 / DFP16 tensors without a whole int64 stage (shared_matmul.c): the
 * same bits, exponent, statistics and trace record as the dispatcher's route. */
#ifndef FX_CORE_SHARED_MATMUL_H
#define FX_CORE_SHARED_MATMUL_H

#include "backend.h"

#define FX_SHARED_MATMUL_NOT_TAKEN (-1)

/* out = a @ b (shapes already validated by the caller, none NULL). The write's status when
 * done, or FX_SHARED_MATMUL_NOT_TAKEN (nothing written, no state changed, no error set) where
 * the product is not of the form handled here, and where its early rounding missed (a DFP16
 * product after a second run): then the caller runs the dispatcher, whose write makes the same
 * decision on the same sums. */
int fx_shared_matmul(tensor_t *out, const tensor_t *a, const tensor_t *b);

/* Where the items of a batched operand begin, in int16 elements from item 0's: item i at
 * (i / inner) * step + (i % inner) * inner_step (inner >= 1; with inner 1, i * step). Two
 * levels cover a [B, H] batch of views such as the attention's heads. */
typedef struct fx_sm_items {
    int64_t step, inner, inner_step;
} fx_sm_items;

/* out ([batch, M, N], contiguous) = a_i @ b_i for i < batch, where a ([M, K]) and b ([K, N])
 * are item 0's int16 operands (any strides, exponents in their exp) and item i's begin where
 * ai and bi say (tensor_bmm). The same contract as fx_shared_matmul. */
int fx_shared_bmm(tensor_t *out, const fx_operand *a, const fx_operand *b,
                  const fx_sm_items *ai, const fx_sm_items *bi, int64_t batch, const char *func);

/* Test hook: 0 sends every matmul and bmm through the dispatcher's route (to compare). */
void fx_shared_matmul_set_enabled(int on);
/* Test hook: the smallest output (elements) taken here and the chunk budget (int64 sums held
 * at once); 0 restores a default. Small values let a test cross many chunk edges. */
void fx_shared_matmul_set_sizes(int64_t min_out, int64_t chunk);
/* Test hooks: products taken here since the process started, and the early roundings that
 * missed. */
int64_t fx_shared_matmul_taken(void);
int64_t fx_shared_matmul_missed(void);
/* Test hook: of the misses, the DFP16 ones run again here guessing the exponent the write asked
 * for (the rest went to the dispatcher). */
int64_t fx_shared_matmul_rerun(void);
/* Test hook: runs whose sums the AMX kernel rounded in registers, with no int64 blocks (a run
 * whose guess would have saturated a sum there is not counted: it ran in blocks). */
int64_t fx_shared_matmul_in_registers(void);
/* Test hook: runs of products the AMX kernel takes that ran in blocks instead, because the
 * guess would have saturated a sum (or its shift is outside the rounding's fast route). */
int64_t fx_shared_matmul_not_covered(void);
/* Test hook: DFP16 runs whose guess would have saturated a sum in registers and that ran
 * again at once at the exponent a dry write asked for (fx_sm_ask_dry), with no blocks. */
int64_t fx_shared_matmul_asked_dry(void);
/* Test hook: products taken here that rounded straight into their disposable output
 * (fx_storage.disposable) instead of into a buffer copied in afterwards. */
int64_t fx_shared_matmul_direct(void);
/* Test hook: products whose rounding buffer became the output's storage in place of a copy
 * (fx_sm_adopt: outputs that are not disposable). */
int64_t fx_shared_matmul_adopted(void);

#endif
