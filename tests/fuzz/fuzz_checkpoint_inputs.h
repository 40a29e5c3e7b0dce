/* How a fuzz input drives the checkpoint parser (fx_ckpt_decode, src/train/checkpoint.h).
 * Shared by the libFuzzer harness (fuzz_checkpoint.c) and the corpus replay in
 * tests/test_hostile_checkpoint.c, so that a saved input means the same thing to both.
 *
 * A real checkpoint is hundreds of KB (the smallest model has 66k parameters), too big for
 * a corpus and for a fuzzer to find its way through a CRC, so the harness builds one valid
 * checkpoint in memory from a tiny trainer and the input says how to damage it:
 *
 *   data[0] % 3 is the mode; (data[0] / 3) % 2 == 1 keeps the header's length and CRC as
 *   they are after the damage (else both are recomputed, so that only meaning is wrong).
 *   0 raw:    data[1..] is the whole file.
 *   1 edits:  records [sel][delta][op][value...], each at offset marks[sel % n] + delta,
 *             where the marks are the starts of the file's fields (fx_ckpt_map): the header
 *             words, the configuration, position, loss scaler, each parameter and batch-norm
 *             buffer, each tensor's record and its exponent state. op % 8:
 *               0 xor a byte with value[0]      1 set 4 bytes to value[0..3]
 *               2 set 8 bytes to value[0..7]    3 set a double to F64[value[0] % 16]
 *               4 set a float to F64[..]         5 set an int32 to I32[value[0] % 16]
 *               6 set an int64 to I64[value[0] % 16]
 *               7 add (int8)value[0] to an int32
 *   2 splice: [sel][delta][del lo][del hi] then bytes: at marks[sel % n] + delta, `del`
 *             bytes are replaced by the rest of the input (truncations, insertions).
 *
 * fx_fuzz_ckpt_input returns the parser's status, or FX_FUZZ_BROKEN when a property that
 * must always hold is violated: a refusal that is not FX_ECORRUPT or has no message, a
 * refusal that changed the trainer (every byte of its saved state is compared), or an
 * accepted file whose state cannot be saved, reloaded and replaced by the original. */
#ifndef FX_FUZZ_CHECKPOINT_INPUTS_H
#define FX_FUZZ_CHECKPOINT_INPUTS_H

#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"
#include "train/checkpoint.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FX_FUZZ_BROKEN
#define FX_FUZZ_BROKEN 1
#endif

typedef struct fx_fuzz_ckpt {
    fx_dataset *ds;
    fx_trainer *t;
    fx_buf base;     /* a valid checkpoint of t's state */
    fx_ckpt_map map; /* where its fields start */
} fx_fuzz_ckpt;

static const double fx_fuzz_f64[16] = {NAN,  -NAN, INFINITY, -INFINITY, 0.0,     -0.0,
                                       -1.0, 1e300, DBL_MAX, DBL_MIN,  0.5,     1.0,
                                       2.0,  65536.0, 1e-45, 3.5e38};
static const int32_t fx_fuzz_i32[16] = {0,     -1,    1,      2,     7,  255, INT32_MAX, INT32_MIN,
                                        65536, -32768, 32767, 16, -16, 3,   100,       1000};
static const int64_t fx_fuzz_i64[16] = {
    0, -1, 1, 2, 3, INT64_MAX, INT64_MIN, (int64_t)1 << 31, (int64_t)1 << 32, (int64_t)1 << 39,
    (int64_t)1 << 62, -2, 2000, 1999, 32, 1000000};

/* A tiny flex16_5 MLP with a live loss scaler, a few steps in: every kind of state. */
static inline int fx_fuzz_ckpt_setup(fx_fuzz_ckpt *f)
{
    memset(f, 0, sizeof *f);
    flexpoint_set_num_threads(1);
    const float x[4] = {0.1f, 0.9f, 0.2f, 0.8f};
    const int32_t y[4] = {0, 1, 0, 1};
    f->ds = fx_dataset_from_arrays(4, 1, 1, 1, 2, x, y);
    if (!f->ds) return flexpoint_last_status();
    fx_train_config c;
    fx_train_config_default(&c);
    snprintf(c.model, sizeof c.model, "mlp");
    c.fmt = FMT_FLEX16_5;
    c.batch_size = 1;
    c.loss_scaling = 1;
    c.seed = 1;
    f->t = fx_trainer_new(&c, f->ds, NULL);
    if (!f->t) return flexpoint_last_status();
    for (int s = 0; s < 3; s++) {
        int rc = fx_trainer_step(f->t, NULL);
        if (rc) return rc;
    }
    return fx_ckpt_encode(f->t, &f->base, &f->map, "fuzz");
}

static inline void fx_fuzz_ckpt_teardown(fx_fuzz_ckpt *f)
{
    fx_trainer_free(f->t);
    fx_dataset_free(f->ds);
    fx_buf_free(&f->base);
    free(f->map.marks);
    memset(f, 0, sizeof *f);
}

static inline size_t fx_fuzz_ckpt_offset(const fx_fuzz_ckpt *f, uint8_t sel, uint8_t delta)
{
    return f->map.n ? f->map.marks[sel % f->map.n] + delta : delta;
}

/* Apply the edit records of mode 1 to file[0..len). */
static inline void fx_fuzz_ckpt_edit(const fx_fuzz_ckpt *f, uint8_t *file, size_t len,
                                     const uint8_t *p, size_t n)
{
    while (n >= 4) {
        size_t off = fx_fuzz_ckpt_offset(f, p[0], p[1]);
        int op = p[2] % 8;
        const uint8_t *v = p + 3;
        size_t vlen = op == 1 ? 4 : op == 2 ? 8 : 1;
        if (vlen > n - 3) break;
        p += 3 + vlen;
        n -= 3 + vlen;
        size_t width = op == 0 ? 1 : op == 2 || op == 3 || op == 6 ? 8 : 4;
        if (off > len || width > len - off) continue;
        uint8_t *dst = file + off;
        switch (op) {
        case 0: *dst ^= v[0]; break;
        case 1:
        case 2: memcpy(dst, v, vlen); break;
        case 3: memcpy(dst, &fx_fuzz_f64[v[0] % 16], 8); break;
        case 4: {
            float x = (float)fx_fuzz_f64[v[0] % 16];
            memcpy(dst, &x, 4);
            break;
        }
        case 5: memcpy(dst, &fx_fuzz_i32[v[0] % 16], 4); break;
        case 6: memcpy(dst, &fx_fuzz_i64[v[0] % 16], 8); break;
        default: {
            int32_t x;
            memcpy(&x, dst, 4);
            x = (int32_t)((uint32_t)x + (uint32_t)(int32_t)(int8_t)v[0]);
            memcpy(dst, &x, 4);
        }
        }
    }
}

/* The file an input describes (malloc'd; *len set), or NULL when out of memory. */
static inline uint8_t *fx_fuzz_ckpt_file(const fx_fuzz_ckpt *f, const uint8_t *data, size_t size,
                                         size_t *len)
{
    int mode = data[0] % 3, keep_header = (data[0] / 3) % 2;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    uint8_t *file = NULL;
    if (mode == 0) {
        file = malloc(n ? n : 1);
        if (file && n) memcpy(file, p, n);
        *len = n;
        return file; /* raw: the header is the input's */
    }
    if (mode == 1) {
        *len = f->base.len;
        file = malloc(*len);
        if (!file) return NULL;
        memcpy(file, f->base.data, *len);
        fx_fuzz_ckpt_edit(f, file, *len, p, n);
    } else {
        uint8_t hdr[4] = {0, 0, 0, 0};
        memcpy(hdr, p, n < 4 ? n : 4);
        const uint8_t *ins = n > 4 ? p + 4 : p + n;
        size_t nins = n > 4 ? n - 4 : 0;
        size_t off = fx_fuzz_ckpt_offset(f, hdr[0], hdr[1]);
        size_t del = (size_t)hdr[2] | (size_t)hdr[3] << 8;
        if (off > f->base.len) off = f->base.len;
        if (del > f->base.len - off) del = f->base.len - off;
        *len = f->base.len - del + nins;
        file = malloc(*len ? *len : 1);
        if (!file) return NULL;
        memcpy(file, f->base.data, off);
        if (nins) memcpy(file + off, ins, nins);
        memcpy(file + off + nins, f->base.data + off + del, f->base.len - off - del);
    }
    if (!keep_header && *len >= FX_CKPT_HEADER_BYTES) {
        uint64_t plen = *len - FX_CKPT_HEADER_BYTES;
        uint32_t crc = fx_crc32(file + FX_CKPT_HEADER_BYTES, (size_t)plen);
        memcpy(file + FX_CKPT_OFF_LENGTH, &plen, 8);
        memcpy(file + FX_CKPT_OFF_CRC, &crc, 4);
    }
    return file;
}

/* 1 when t's state is exactly the one `want` holds. */
static inline int fx_fuzz_ckpt_state_is(fx_trainer *t, const fx_buf *want)
{
    fx_buf now = {0};
    int same = fx_ckpt_encode(t, &now, NULL, "fuzz") == FX_OK && now.len == want->len &&
               memcmp(now.data, want->data, now.len) == 0;
    fx_buf_free(&now);
    return same;
}

static inline int fx_fuzz_ckpt_input(fx_fuzz_ckpt *f, const uint8_t *data, size_t size)
{
    flexpoint_clear_error();
    if (size == 0) {
        int rc = fx_ckpt_decode(f->t, NULL, 0, "fuzz");
        return rc == FX_ECORRUPT && flexpoint_last_error()[0] ? rc : FX_FUZZ_BROKEN;
    }
    size_t len = 0;
    uint8_t *file = fx_fuzz_ckpt_file(f, data, size, &len);
    if (!file) return FX_OK; /* the harness's problem, not the parser's */
    int rc = fx_ckpt_decode(f->t, file, len, "fuzz");
    free(file);
    if (rc != FX_OK) {
        if (rc != FX_ECORRUPT || !flexpoint_last_error()[0]) return FX_FUZZ_BROKEN;
        return fx_fuzz_ckpt_state_is(f->t, &f->base) ? rc : FX_FUZZ_BROKEN;
    }
    /* accepted: what was loaded saves and loads again, and the original comes back */
    fx_buf again = {0};
    int ok = fx_ckpt_encode(f->t, &again, NULL, "fuzz") == FX_OK &&
             fx_ckpt_decode(f->t, again.data, again.len, "fuzz") == FX_OK &&
             fx_ckpt_decode(f->t, f->base.data, f->base.len, "fuzz") == FX_OK &&
             fx_fuzz_ckpt_state_is(f->t, &f->base);
    fx_buf_free(&again);
    return ok ? FX_OK : FX_FUZZ_BROKEN;
}

#endif
