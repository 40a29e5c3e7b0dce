/* Format traits: names, element sizes, families. */
#include "internal.h"

#include <string.h>

typedef struct fx_format_traits {
    const char *name;
    size_t elem_size;
    int shared_exponent;
} fx_format_traits;

static const fx_format_traits fx_formats[FMT_COUNT] = {
    [FMT_FP32] = {"fp32", 4, 0},
    [FMT_FP16] = {"fp16", 2, 0},
    [FMT_BF16] = {"bf16", 2, 0},
    [FMT_FLEX16_5] = {"flex16_5", 2, 1},
    [FMT_DFP16] = {"dfp16", 2, 1},
};

bool fx_fmt_valid(int fmt) { return fmt >= 0 && fmt < FMT_COUNT; }

const char *fmt_name(fmt_t fmt) { return fx_fmt_valid((int)fmt) ? fx_formats[fmt].name : NULL; }

size_t fmt_elem_size(fmt_t fmt) { return fx_fmt_valid((int)fmt) ? fx_formats[fmt].elem_size : 0; }

int fmt_is_shared_exponent(fmt_t fmt)
{
    return fx_fmt_valid((int)fmt) ? fx_formats[fmt].shared_exponent : 0;
}

int fmt_from_name(const char *name)
{
    if (!name) return FX_FAIL(FX_EINVAL, "name is NULL");
    for (int f = 0; f < FMT_COUNT; f++)
        if (strcmp(name, fx_formats[f].name) == 0) return f;
    if (strcmp(name, "flex16+5") == 0 || strcmp(name, "flex") == 0) return FMT_FLEX16_5;
    if (strcmp(name, "float32") == 0) return FMT_FP32;
    if (strcmp(name, "float16") == 0) return FMT_FP16;
    if (strcmp(name, "bfloat16") == 0) return FMT_BF16;
    return FX_FAIL(FX_EFORMAT,
                   "unknown format name '%.64s' (known: fp32, fp16, bf16, flex16_5, dfp16)",
                   name);
}
