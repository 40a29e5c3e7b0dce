/* Model names: the built-in networks and their families (model.h, fx_model_spec).
 *
 *   mlp | mlp<W>x<D>          D hidden layers of width W (mlp = mlp256x2)
 *   cnn | cnn<C1>-<C2>-<F>    two 5x5 conv + max-pool stages and one hidden linear layer
 *                             (cnn = cnn32-64-128)
 *   resnet<D> | resnet<D>x<K> CIFAR ResNet of depth D = 6n + 2 (n basic blocks per stage),
 *                             channels 16K, 32K, 64K (resnet20 = resnet20x1)
 *   transformer | gpt<L>x<D>h<H>c<T>
 *                             decoder-only transformer of L pre-norm blocks, width D, H
 *                             attention heads (H divides D), context T tokens, for text
 *                             datasets (transformer = gpt4x128h4c128)
 *   @<14 hex digits>          not a name but a model definition's identity, which
 *                             fx_trainer_new_model stores in the configuration
 *
 * Numbers are decimal without sign or leading zero, so that one network has one name per
 * spelling family and checkpoints, which compare names, cannot disagree over "mlp0256x2". */
#include "model.h"

#include <stdlib.h>
#include <string.h>

/* A decimal number in [lo, hi] at *p, without sign or leading zero; advances *p. -1 if none. */
static long fx_name_number(const char **p, long lo, long hi)
{
    const char *s = *p;
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9')) return -1;
    long v = 0;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (*s - '0');
        if (v > hi) return -1;
        s++;
    }
    if (v < lo) return -1;
    *p = s;
    return v;
}

static int fx_name_fail(const char *name, const char *func, const char *why)
{
    return fx_error(FX_ENAME, func, "model='%.16s': %s (known: mlp, mlp<W>x<D>, cnn, "
                    "cnn<C1>-<C2>-<F>, resnet<6n+2>, resnet<6n+2>x<K>, transformer, "
                    "gpt<L>x<D>h<H>c<T>; docs/training.md)", name,
                    why);
}

int fx_model_parse(const char *name, fx_model_spec *spec, const char *func)
{
    fx_model_spec s;
    memset(&s, 0, sizeof s);
    if (!name) return fx_error(FX_EINVAL, func, "model name is NULL");
    if (!memchr(name, '\0', FX_MODEL_NAME_MAX))
        return fx_error(FX_EINVAL, func, "model name is not NUL-terminated within %d bytes",
                        FX_MODEL_NAME_MAX);
    const char *p = name;
    if (p[0] == '@') {
        s.kind = FX_MODEL_DEF;
        int n = 0;
        for (p++; n < 14 && ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')); p++) n++;
        if (n != 14)
            return fx_name_fail(name, func, "a definition's identity is '@' and 14 lowercase "
                                "hex digits");
    } else if (strncmp(p, "mlp", 3) == 0) {
        s.kind = FX_MODEL_MLP;
        p += 3;
        s.width = 256;
        s.depth = 2;
        if (*p) {
            if ((s.width = (int)fx_name_number(&p, 1, FX_MODEL_MAX_WIDTH)) < 0)
                return fx_name_fail(name, func, "the hidden width W is not a number in [1, 65536]");
            if (*p++ != 'x' || (s.depth = (int)fx_name_number(&p, 1, FX_MODEL_MAX_MLP_DEPTH)) < 0)
                return fx_name_fail(name, func, "mlp<W>x<D> needs a depth D in [1, 64]");
        }
    } else if (strncmp(p, "cnn", 3) == 0) {
        s.kind = FX_MODEL_CNN;
        p += 3;
        s.c1 = 32;
        s.c2 = 64;
        s.width = 128;
        if (*p) {
            s.c1 = (int)fx_name_number(&p, 1, FX_MODEL_MAX_CHANNELS);
            int ok = s.c1 > 0 && *p++ == '-';
            if (ok) s.c2 = (int)fx_name_number(&p, 1, FX_MODEL_MAX_CHANNELS);
            ok = ok && s.c2 > 0 && *p++ == '-';
            if (ok) s.width = (int)fx_name_number(&p, 1, FX_MODEL_MAX_WIDTH);
            if (!ok || s.width < 0)
                return fx_name_fail(name, func, "cnn<C1>-<C2>-<F> needs channels in [1, 4096] "
                                    "and a hidden width in [1, 65536]");
        }
    } else if (strncmp(p, "resnet", 6) == 0) {
        s.kind = FX_MODEL_RESNET;
        p += 6;
        long d = fx_name_number(&p, 8, 6 * FX_MODEL_MAX_BLOCKS + 2);
        if (d < 0 || (d - 2) % 6 != 0)
            return fx_name_fail(name, func, "the ResNet depth must be 6n+2 for n in [1, 200] "
                                "(8, 14, 20, 32, 44, 56, 110, ...)");
        s.depth = (int)d;
        s.blocks = (int)(d - 2) / 6;
        s.widen = 1;
        if (*p == 'x') {
            p++;
            if ((s.widen = (int)fx_name_number(&p, 1, FX_MODEL_MAX_WIDEN)) < 0)
                return fx_name_fail(name, func, "the width factor K must be in [1, 16]");
        }
    } else if (strcmp(p, "transformer") == 0) {
        s.kind = FX_MODEL_GPT;
        p += 11;
        s.depth = 4;
        s.width = 128;
        s.heads = 4;
        s.context = 128;
    } else if (strncmp(p, "gpt", 3) == 0) {
        s.kind = FX_MODEL_GPT;
        p += 3;
        if ((s.depth = (int)fx_name_number(&p, 1, FX_MODEL_MAX_GPT_LAYERS)) < 0)
            return fx_name_fail(name, func, "gpt<L>x<D>h<H>c<T> needs a layer count L in "
                                "[1, 64]");
        if (*p++ != 'x' || (s.width = (int)fx_name_number(&p, 1, FX_MODEL_MAX_GPT_WIDTH)) < 0)
            return fx_name_fail(name, func, "gpt<L>x<D>h<H>c<T> needs a width D in [1, 16384]");
        if (*p++ != 'h' || (s.heads = (int)fx_name_number(&p, 1, s.width)) < 0 ||
            s.width % s.heads)
            return fx_name_fail(name, func, "gpt<L>x<D>h<H>c<T> needs a head count H in "
                                "[1, D] that divides D");
        if (*p++ != 'c' || (s.context = (int)fx_name_number(&p, 1, FX_MODEL_MAX_CONTEXT)) < 0)
            return fx_name_fail(name, func, "gpt<L>x<D>h<H>c<T> needs a context T in [1, "
                                "1024]");
    } else {
        return fx_name_fail(name, func, "unknown model");
    }
    if (*p) return fx_name_fail(name, func, "unexpected characters after the sizes");
    if (spec) *spec = s;
    return FX_OK;
}

int fx_model_check(const char *name)
{
    flexpoint_clear_error();
    fx_model_spec s;
    int rc = fx_model_parse(name, &s, __func__);
    if (!rc && s.kind == FX_MODEL_DEF)
        return fx_error(FX_ENAME, __func__, "model='%.16s' is a model definition's identity: "
                        "give the definition to fx_trainer_new_model", name);
    return rc;
}
