/* Format policies (policy.h): parsing and resolution. */
#define _POSIX_C_SOURCE 200809L
#include "policy.h"
#include "model.h"

#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int mask;
} classes[] = {{"weights", FX_PC_WEIGHTS}, {"biases", FX_PC_BIASES},
               {"acts", FX_PC_ACTS},       {"dacts", FX_PC_DACTS},
               {"dweights", FX_PC_DWEIGHTS}, {"grads", FX_PC_DACTS | FX_PC_DWEIGHTS}};

static int class_mask(const char *s)
{
    for (size_t i = 0; i < sizeof classes / sizeof *classes; i++)
        if (!strcmp(s, classes[i].name)) return classes[i].mask;
    return 0;
}

/* Copy s[0..n) without surrounding blanks into buf (size bsz). 0, or -1 if it does not fit. */
static int trimmed(char *buf, size_t bsz, const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    if (n >= bsz) return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return 0;
}

static int add_rule(fx_policy *p, const char *glob, int select, int cls, int fmt,
                    const char *text, const char *func)
{
    if (p->n == FX_POLICY_MAX_RULES)
        return fx_error(FX_EINVAL, func, "policy: more than %d rules", FX_POLICY_MAX_RULES);
    fx_policy_rule *r = &p->rules[p->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->glob, sizeof r->glob, "%s", glob);
    r->select = select;
    r->classes = cls;
    r->fmt = fmt;
    snprintf(r->text, sizeof r->text, "%s", text);
    /* only a named pattern can fail to match: presets' selectors and "*" always apply */
    r->matched = select != FX_PSEL_NAME || !strcmp(glob, "*");
    return FX_OK;
}

static int parse_format(const char *s, const char *item, int *fmt, const char *func)
{
    int f = fmt_from_name(s);
    if (f < 0)
        return fx_error(FX_EFORMAT, func, "policy item '%s': unknown format '%s' (fp32, fp16, "
                        "bf16, flex16_5, dfp16)", item, s);
    *fmt = f;
    return FX_OK;
}

/* A preset, expanded into rules; 1 if item is one, 0 if not, < 0 on error. */
static int preset(fx_policy *p, const char *item, int run_fmt, const char *func)
{
    char name[32];
    const char *colon = strchr(item, ':');
    size_t n = colon ? (size_t)(colon - item) : strlen(item);
    if (n >= sizeof name) return 0;
    memcpy(name, item, n);
    name[n] = '\0';
    int f = run_fmt, rc;
    if (strcmp(name, "O0") && strcmp(name, "O1") && strcmp(name, "O2") && strcmp(name, "O3") &&
        strcmp(name, "edges-fp32"))
        return 0;
    if (colon && (rc = parse_format(colon + 1, item, &f, func))) return rc;
    if (!strcmp(name, "O0")) {
        rc = add_rule(p, "*", FX_PSEL_NAME, FX_PC_ALL, FMT_FP32, item, func);
        return rc ? rc : 1;
    }
    if (!strcmp(name, "O1")) {
        /* GEMM and convolution operands 16-bit, everything else fp32 */
        rc = add_rule(p, "*", FX_PSEL_NAME, FX_PC_ALL, FMT_FP32, item, func);
        if (!rc) rc = add_rule(p, "", FX_PSEL_GEMM, FX_PC_ALL, f, item, func);
        return rc ? rc : 1;
    }
    if (!strcmp(name, "O2")) {
        /* 16-bit everywhere but batch norm */
        rc = add_rule(p, "*", FX_PSEL_NAME, FX_PC_ALL, f, item, func);
        if (!rc) rc = add_rule(p, "", FX_PSEL_BN, FX_PC_ALL, FMT_FP32, item, func);
        return rc ? rc : 1;
    }
    if (!strcmp(name, "O3")) {
        p->no_master = 1;
        rc = add_rule(p, "*", FX_PSEL_NAME, FX_PC_ALL, f, item, func);
        return rc ? rc : 1;
    }
    /* edges-fp32: the first and the last layer fp32 */
    rc = add_rule(p, "*", FX_PSEL_NAME, FX_PC_ALL, f, item, func);
    if (!rc) rc = add_rule(p, "", FX_PSEL_FIRST, FX_PC_ALL, FMT_FP32, item, func);
    if (!rc) rc = add_rule(p, "", FX_PSEL_LAST, FX_PC_ALL, FMT_FP32, item, func);
    return rc ? rc : 1;
}

int fx_policy_parse(const char *text, int run_fmt, fx_policy *p, const char *func)
{
    memset(p, 0, sizeof *p);
    if (!text[0]) return FX_OK;
    const char *s = text;
    for (int k = 0;; k++) {
        const char *end = strchr(s, ';');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        char item[160];
        if (trimmed(item, sizeof item, s, n))
            return fx_error(FX_ENAME, func, "policy: item %d is longer than %zu bytes", k + 1,
                            sizeof item - 1);
        if (!item[0])
            return fx_error(FX_EINVAL, func, "policy '%s': item %d is empty", text, k + 1);
        int rc = preset(p, item, run_fmt, func);
        if (rc < 0) return rc;
        if (rc == 1 && k > 0)
            return fx_error(FX_ENAME, func, "policy: the preset '%s' must come first", item);
        if (rc == 0) {
            const char *eq = strchr(item, '=');
            char target[96], fmt_s[32];
            if (!eq || trimmed(target, sizeof target, item, (size_t)(eq - item)) ||
                trimmed(fmt_s, sizeof fmt_s, eq + 1, strlen(eq + 1)) || !target[0])
                return fx_error(FX_ENAME, func, "policy item '%s' is neither a preset (O0, O1, "
                                "O2, O3, edges-fp32) nor TARGET=FORMAT", item);
            int f = 0;
            if ((rc = parse_format(fmt_s, item, &f, func))) return rc;
            int cls = class_mask(target);
            char glob[96];
            snprintf(glob, sizeof glob, "%s", target);
            if (!strcmp(target, "default")) {
                snprintf(glob, sizeof glob, "*");
                cls = FX_PC_ALL;
            } else if (cls) {
                snprintf(glob, sizeof glob, "*");
            } else {
                char *dot = strrchr(glob, '.');
                int c = dot ? class_mask(dot + 1) : 0;
                if (c) *dot = '\0';
                cls = c ? c : FX_PC_ALL;
            }
            if (strlen(glob) >= sizeof p->rules[0].glob || !glob[0])
                return fx_error(FX_ENAME, func, "policy item '%s': the layer pattern is empty or "
                                "too long", item);
            if ((rc = add_rule(p, glob, FX_PSEL_NAME, cls, f, item, func))) return rc;
        }
        if (!end) break;
        s = end + 1;
    }
    return FX_OK;
}

/* A rule that matched no layer: say so, and say when its target (whole, or after the last
 * dot) is no tensor class either, since a misspelt class ("activations", "fc1.dbiases") reads
 * as a layer pattern. */
int fx_policy_unmatched(const fx_policy *p, const char *model, const char *func)
{
    static const char class_list[] = "weights, biases, acts, dacts, dweights, grads";
    for (int i = 0; p && i < p->n; i++) {
        const fx_policy_rule *r = &p->rules[i];
        if (r->matched) continue;
        const char *dot = strrchr(r->glob, '.');
        const char *word = dot ? dot + 1 : r->glob;
        int plain = word[0] && !strpbrk(word, "*?[]");
        if (plain)
            return fx_error(FX_ENAME, func, "policy rule '%s' matches no layer of %s, and '%s' "
                            "is not a tensor class (%s; written alone or as PATTERN.CLASS)",
                            r->text, model, word, class_list);
        return fx_error(FX_ENAME, func, "policy rule '%s' matches no layer of %s", r->text,
                        model);
    }
    return FX_OK;
}

int fx_policy_format(fx_policy *p, const char *name, int kind, int first, int last, int cls,
                     int run_fmt)
{
    int f = run_fmt;
    for (int i = 0; p && i < p->n; i++) {
        fx_policy_rule *r = &p->rules[i];
        int hit = r->select == FX_PSEL_NAME ? fnmatch(r->glob, name, 0) == 0
                  : r->select == FX_PSEL_GEMM ? kind == FX_L_CONV || kind == FX_L_LINEAR ||
                                                    kind == FX_L_TLINEAR || kind == FX_L_ATTN
                  : r->select == FX_PSEL_BN   ? kind == FX_L_BN
                  : r->select == FX_PSEL_FIRST ? first
                                               : last;
        if (!hit) continue;
        r->matched = 1;
        if (r->classes & cls) f = r->fmt;
    }
    return f;
}
