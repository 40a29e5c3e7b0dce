/* The checkpoint file format and its in-memory encoder and parser, shared by fx_trainer_save /
 * fx_trainer_load, the hostile-checkpoint tests and the fuzzer (tests/fuzz/fuzz_checkpoint.c).
 *
 * File: header (FX_CKPT_HEADER_BYTES) | payload.
 *   header: "FLEXCKPT" | u32 version | u32 reserved (0) | u64 payload length | u32 CRC-32 of
 *           the payload; the length must equal the file's size minus the header.
 *   payload: fx_train_config | fx_ckpt_pos | fx_loss_scaler | per parameter: master, momentum,
 *           second moment (each a presence byte, 0 or 1, then its floats) | per batch-norm layer: running
 *           mean, running variance, saved mean, saved inverse std (same encoding) | every
 *           registered tensor's state (src/core/tensor_io.h), in the registry's order.
 * Numbers are in host byte order (little-endian on every supported machine). */
#ifndef FX_TRAIN_CHECKPOINT_H
#define FX_TRAIN_CHECKPOINT_H

#include "trainer.h"
#include "../core/tensor_io.h"
#include "../core/file_atomic.h" /* fx_write_file_atomic, fx_remove_stale_temps */

#define FX_CKPT_MAGIC "FLEXCKPT"
/* 2: fx_train_config grew the optimiser and loss-scaler fields, and each parameter a
 * second-moment buffer (Adam, AdamW); 3: an attention layer's backward keeps one more
 * shared-exponent tensor (fx_layer.gatt[FX_AG_XC]), whose state a sequence model's checkpoint
 * holds; 4: it keeps one fewer (the unscaled score gradient, now never stored:
 * tensor_attention_softmax_backward). Saves write FX_CKPT_VERSION; loads also read versions
 * FX_CKPT_VERSION_NO_ATTN up for a model without attention layers, whose checkpoints these
 * changes left byte for byte the same. */
#define FX_CKPT_VERSION 4u
#define FX_CKPT_VERSION_NO_ATTN 2u

/* Byte offsets of the header fields. */
enum {
    FX_CKPT_OFF_VERSION = 8,
    FX_CKPT_OFF_RESERVED = 12,
    FX_CKPT_OFF_LENGTH = 16,
    FX_CKPT_OFF_CRC = 24,
    FX_CKPT_HEADER_BYTES = 28
};

/* The loop position and the epoch accumulators (no padding: 4 x 4 + 9 x 8 bytes). */
typedef struct fx_ckpt_pos {
    int32_t epoch, scaling, epoch_reported, reserved;
    int64_t step_in_epoch, global_step, steps_per_epoch;
    int64_t correct, seen, skipped, nonfinite;
    double loss_sum, seconds;
} fx_ckpt_pos;

/* Offsets of the fixed-size parts of the payload (from the start of the payload). */
#define FX_CKPT_PAYLOAD_POS sizeof(fx_train_config)
#define FX_CKPT_PAYLOAD_SCALER (sizeof(fx_train_config) + sizeof(fx_ckpt_pos))

/* Where the fields of an encoded file start (file offsets), for fuzzers that edit fields
 * rather than random bytes: the header's fields, the configuration, the position, the scaler,
 * and each parameter buffer, batch-norm buffer and tensor state. Filled by fx_ckpt_encode
 * when passed; `marks` is malloc'd (free it with free). */
typedef struct fx_ckpt_map {
    size_t *marks;
    int n, cap;
} fx_ckpt_map;

/* The complete file of t's current state in *out (which must be zeroed; free it with
 * fx_buf_free). Refuses a state that fx_ckpt_decode would refuse, so that no file is written
 * that cannot be loaded: FX_ERANGE with a message naming the parameter when a master weight
 * (the working weight without master weights) or a momentum value is NaN or infinite. map may
 * be NULL. Errors are reported as coming from `func`. */
int fx_ckpt_encode(fx_trainer *t, fx_buf *out, fx_ckpt_map *map, const char *func);

/* Restore t from a complete file held in file[0..len), named `name` in messages. Everything
 * is parsed and validated before anything of t changes: the header (magic, version, reserved
 * 0, length equal to the rest of the file, checksum), the configuration (must match t's), the
 * position and accumulators, the loss scaler, every float buffer (finite master weights and
 * momentum, non-negative running variances) and every tensor state (shape, exponent window,
 * Autoflex history). FX_ECORRUPT with a message naming the file, the field and its value, and
 * t unchanged, on any problem. */
int fx_ckpt_decode(fx_trainer *t, const uint8_t *file, size_t len, const char *name);

#endif
