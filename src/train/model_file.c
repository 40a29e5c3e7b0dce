/* Model files (docs/models.md): one statement a line,
 *
 *   model NAME                      optional, first
 *   input shape=C,H,W               once, before the layers
 *   KIND NAME [key=value ...]       a layer; in=a or in=a,b names its inputs (default: the
 *                                   layer on the line before)
 *
 * with '#' starting a comment. A layer line is fx_model_def_layer(d, KIND, NAME, the rest),
 * so the file and the C API accept the same layers with the same checks; the parser adds the
 * line number to every message and tells a forward reference (a cycle) from an unknown name.
 * The text is untrusted: lengths are bounded, numbers are parsed strictly, and nothing is
 * read past `len` (tests/fuzz/fuzz_model.c). */
#define _POSIX_C_SOURCE 200809L
#include "model_def.h"
#include "../core/internal.h"
#include "../data/data_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FX_LINE_MAX 1024   /* bytes of one line */
#define FX_MAX_TOKENS 16   /* tokens of one line (kind, name and options) */
#define FX_TOKEN_MAX 256   /* bytes of one token */

/* ---------------------------------------------------------------- options ----------------- */

typedef struct fx_opts {
    const char *func;
    const char *kind, *name;
    char key[FX_MAX_TOKENS][24];
    char val[FX_MAX_TOKENS][FX_TOKEN_MAX];
    int used[FX_MAX_TOKENS];
    int n;
} fx_opts;

/* Split "k=v k2=v2" into o (EINVAL naming the problem). */
static int fx_opts_split(fx_opts *o, const char *s)
{
    o->n = 0;
    while (s && *s) {
        while (*s == ' ' || *s == '\t') s++;
        if (!*s) break;
        const char *e = s;
        while (*e && *e != ' ' && *e != '\t') e++;
        const char *eq = memchr(s, '=', (size_t)(e - s));
        if (!eq || eq == s)
            return fx_error(FX_EINVAL, o->func, "layer '%s' (%s): '%.*s' is not key=value",
                            o->name, o->kind, (int)(e - s > 64 ? 64 : e - s), s);
        size_t kl = (size_t)(eq - s), vl = (size_t)(e - eq - 1);
        if (kl >= sizeof o->key[0] || vl >= sizeof o->val[0])
            return fx_error(FX_EINVAL, o->func, "layer '%s' (%s): option '%.*s' is too long",
                            o->name, o->kind, (int)(kl > 24 ? 24 : kl), s);
        if (vl == 0)
            return fx_error(FX_EINVAL, o->func, "layer '%s' (%s): key '%.*s' has no value",
                            o->name, o->kind, (int)kl, s);
        if (o->n == FX_MAX_TOKENS)
            return fx_error(FX_EINVAL, o->func, "layer '%s' (%s): more than %d options",
                            o->name, o->kind, FX_MAX_TOKENS);
        memcpy(o->key[o->n], s, kl);
        o->key[o->n][kl] = '\0';
        memcpy(o->val[o->n], eq + 1, vl);
        o->val[o->n][vl] = '\0';
        for (int i = 0; i < o->n; i++)
            if (!strcmp(o->key[i], o->key[o->n]))
                return fx_error(FX_EINVAL, o->func, "layer '%s' (%s): key '%s' given twice",
                                o->name, o->kind, o->key[i]);
        o->used[o->n] = 0;
        o->n++;
        s = e;
    }
    return FX_OK;
}

/* The value of key (NULL when absent), marked as used. */
static const char *fx_opt(fx_opts *o, const char *key)
{
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->key[i], key)) {
            o->used[i] = 1;
            return o->val[i];
        }
    return NULL;
}

/* An integer option in [lo, hi]: decimal digits only (no sign, no leading zero), or def when
 * absent; def < lo makes it required. */
static int fx_opt_int(fx_opts *o, const char *key, int64_t lo, int64_t hi, int64_t def,
                      int64_t *out)
{
    const char *v = fx_opt(o, key);
    if (!v) {
        if (def < lo)
            return fx_error(FX_EINVAL, o->func, "layer '%s' (%s) needs %s=", o->name, o->kind,
                            key);
        *out = def;
        return FX_OK;
    }
    int64_t x = 0;
    int ok = v[0] >= '0' && v[0] <= '9' && !(v[0] == '0' && v[1]);
    for (const char *c = v; ok && *c; c++) {
        ok = *c >= '0' && *c <= '9' && x <= (INT64_C(1) << 40);
        x = x * 10 + (*c - '0');
    }
    if (!ok)
        return fx_error(FX_EINVAL, o->func, "layer '%s' (%s): %s='%.32s' is not a whole number",
                        o->name, o->kind, key, v);
    if (x < lo || x > hi)
        return fx_error(FX_EINVAL, o->func, "layer '%s' (%s): %s=%lld is outside [%lld, %lld]",
                        o->name, o->kind, key, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return FX_OK;
}

/* The in= option's one or two names (empty strings when absent). */
static int fx_opt_inputs(fx_opts *o, int max, char in[2][FX_TOKEN_MAX])
{
    in[0][0] = in[1][0] = '\0';
    const char *v = fx_opt(o, "in");
    if (!v) return FX_OK;
    const char *comma = strchr(v, ',');
    size_t n0 = comma ? (size_t)(comma - v) : strlen(v);
    if ((comma && max < 2) || (comma && strchr(comma + 1, ',')) || n0 == 0 ||
        (comma && !comma[1]))
        return fx_error(FX_EINVAL, o->func, "layer '%s' (%s): in='%.64s' must name %s", o->name,
                        o->kind, v, max < 2 ? "one layer" : "one or two layers (in=a,b)");
    memcpy(in[0], v, n0);
    in[0][n0] = '\0';
    if (comma) snprintf(in[1], FX_TOKEN_MAX, "%s", comma + 1);
    return FX_OK;
}

static int fx_opts_unused(fx_opts *o, const char *keys)
{
    for (int i = 0; i < o->n; i++)
        if (!o->used[i])
            return fx_error(FX_EINVAL, o->func, "layer '%s' (%s): unknown key '%s' (keys: %s)",
                            o->name, o->kind, o->key[i], keys);
    return FX_OK;
}

static const char *const fx_kind_list[] = {
    "linear",    "conv2d",    "batchnorm", "relu",           "tanh", "sigmoid", "gelu",
    "gelu_tanh", "silu",      "maxpool2d", "avgpool2d", "global_avgpool", "add",  "flatten",
    "dropout",   "embedding", "layernorm", "attention",      "token_linear"};
static const char *const fx_kinds =
    "linear, conv2d, batchnorm, relu, tanh, sigmoid, gelu, gelu_tanh, silu, maxpool2d, "
    "avgpool2d, global_avgpool, add, flatten, dropout, embedding, layernorm, attention, "
    "token_linear";

int fx_model_def_layer(fx_model_def *d, const char *kind, const char *name, const char *options)
{
    if (!d || !kind || !name) return FX_FAIL(FX_EINVAL, "NULL argument");
    size_t ki = 0;
    while (ki < sizeof fx_kind_list / sizeof *fx_kind_list && strcmp(kind, fx_kind_list[ki]))
        ki++;
    if (ki == sizeof fx_kind_list / sizeof *fx_kind_list)
        return FX_FAIL(FX_ENAME, "unknown layer kind '%.32s' (known: %s)", kind, fx_kinds);
    static _Thread_local fx_opts o; /* 4 KB: not on the stack of deep callers */
    memset(&o, 0, sizeof o);
    o.func = __func__;
    o.kind = kind;
    o.name = name;
    int rc = fx_opts_split(&o, options);
    if (rc) return rc;
    char in[2][FX_TOKEN_MAX];
    int64_t out = 0, k = 0, stride = 0, pad = 0, bias = 0;
    const char *keys = "in";
    if (!strcmp(kind, "add")) {
        if ((rc = fx_opt_inputs(&o, 2, in))) return rc;
        if (!in[1][0])
            return FX_FAIL(FX_EINVAL, "layer '%s' (add) needs in=a,b: the two layers it sums",
                           name);
    } else if ((rc = fx_opt_inputs(&o, 1, in))) {
        return rc;
    }
    if (!strcmp(kind, "linear")) {
        keys = "out, in";
        if ((rc = fx_opt_int(&o, "out", 1, INT64_C(1) << 24, 0, &out))) return rc;
        if ((rc = fx_opts_unused(&o, keys))) return rc;
        return fx_model_def_linear(d, name, in[0], out);
    }
    if (!strcmp(kind, "token_linear")) {
        keys = "out, in";
        if ((rc = fx_opt_int(&o, "out", 1, 65536, 0, &out))) return rc;
        if ((rc = fx_opts_unused(&o, keys))) return rc;
        return fx_model_def_token_linear(d, name, in[0], out);
    }
    if (!strcmp(kind, "embedding")) {
        keys = "vocab, dim, in";
        int64_t vocab = 0;
        if ((rc = fx_opt_int(&o, "vocab", 1, 65536, 0, &vocab)) ||
            (rc = fx_opt_int(&o, "dim", 1, 65536, 0, &out)) || (rc = fx_opts_unused(&o, keys)))
            return rc;
        return fx_model_def_embedding(d, name, in[0], vocab, out);
    }
    if (!strcmp(kind, "attention")) {
        keys = "heads, in";
        int64_t heads = 0;
        if ((rc = fx_opt_int(&o, "heads", 1, 65536, 0, &heads)) ||
            (rc = fx_opts_unused(&o, keys)))
            return rc;
        return fx_model_def_attention(d, name, in[0], (int)heads);
    }
    if (!strcmp(kind, "conv2d")) {
        keys = "out, kernel, stride, pad, bias, in";
        if ((rc = fx_opt_int(&o, "out", 1, 65536, 0, &out)) ||
            (rc = fx_opt_int(&o, "kernel", 1, 64, 0, &k)) ||
            (rc = fx_opt_int(&o, "stride", 1, 64, 1, &stride)) ||
            (rc = fx_opt_int(&o, "pad", 0, 64, 0, &pad)) ||
            (rc = fx_opt_int(&o, "bias", 0, 1, 1, &bias)) || (rc = fx_opts_unused(&o, keys)))
            return rc;
        return fx_model_def_conv2d(d, name, in[0], out, (int)k, (int)stride, (int)pad,
                                   (int)bias);
    }
    if (!strcmp(kind, "maxpool2d") || !strcmp(kind, "avgpool2d")) {
        keys = "kernel, stride, pad, in";
        if ((rc = fx_opt_int(&o, "kernel", 1, 64, 0, &k)) ||
            (rc = fx_opt_int(&o, "stride", 1, 64, k, &stride)) ||
            (rc = fx_opt_int(&o, "pad", 0, 64, 0, &pad)) || (rc = fx_opts_unused(&o, keys)))
            return rc;
        return fx_model_def_pool2d(d, kind, name, in[0], (int)k, (int)stride, (int)pad);
    }
    if (!strcmp(kind, "dropout")) {
        keys = "p, in";
        const char *v = fx_opt(&o, "p");
        if (!v) return FX_FAIL(FX_EINVAL, "layer '%s' (dropout) needs p=", name);
        char *end = NULL;
        errno = 0;
        double p = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(p))
            return FX_FAIL(FX_EINVAL, "layer '%s' (dropout): p='%.32s' is not a number", name,
                           v);
        if ((rc = fx_opts_unused(&o, keys))) return rc;
        return fx_model_def_dropout(d, name, in[0], p);
    }
    if ((rc = fx_opts_unused(&o, keys))) return rc;
    if (!strcmp(kind, "batchnorm")) return fx_model_def_batchnorm(d, name, in[0]);
    if (!strcmp(kind, "global_avgpool")) return fx_model_def_global_avgpool(d, name, in[0]);
    if (!strcmp(kind, "flatten")) return fx_model_def_flatten(d, name, in[0]);
    if (!strcmp(kind, "layernorm")) return fx_model_def_layernorm(d, name, in[0]);
    if (!strcmp(kind, "add")) return fx_model_def_add(d, name, in[0], in[1]);
    if (!strcmp(kind, "relu") || !strcmp(kind, "tanh") || !strcmp(kind, "sigmoid") ||
        !strcmp(kind, "gelu") || !strcmp(kind, "gelu_tanh") || !strcmp(kind, "silu"))
        return fx_model_def_activation(d, kind, name, in[0]);
    return FX_FAIL(FX_ENAME, "unknown layer kind '%.32s' (known: %s)", kind, fx_kinds);
}

/* ---------------------------------------------------------------- the file ---------------- */

typedef struct fx_line {
    int no;
    char tok[FX_MAX_TOKENS][FX_TOKEN_MAX];
    int ntok;
    char rest[FX_LINE_MAX + 1]; /* the tokens after the second, for fx_model_def_layer */
} fx_line;

typedef struct fx_parse {
    const char *text, *src;
    size_t len, pos;
    int no;
} fx_parse;

#define PARSE_FUNC "fx_model_def_parse"

static int fx_parse_fail(const fx_parse *p, int line, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fx_error(FX_ECORRUPT, PARSE_FUNC, "%.200s:%d: %s", p->src, line, msg);
}

/* The message of the call that just failed, without its "function: " prefix. */
static void fx_last_message(char *out, size_t cap)
{
    const char *m = flexpoint_last_error();
    const char *c = strstr(m, ": ");
    snprintf(out, cap, "%s", c ? c + 2 : m);
}

/* The next line's tokens in *l (comments and surrounding blanks removed); 0 at the end of the
 * text, 1 for a line, or a negative status after a message. */
static int fx_next_line(fx_parse *p, fx_line *l)
{
    if (p->pos >= p->len) return 0;
    const char *s = p->text + p->pos;
    size_t rem = p->len - p->pos;
    const char *nl = memchr(s, '\n', rem);
    size_t n = nl ? (size_t)(nl - s) : rem;
    p->pos += n + (nl ? 1 : 0);
    l->no = ++p->no;
    l->ntok = 0;
    l->rest[0] = '\0';
    if (memchr(s, '\0', n)) return fx_parse_fail(p, l->no, "a NUL byte (not a text file)");
    if (n > FX_LINE_MAX)
        return fx_parse_fail(p, l->no, "the line is longer than %d bytes", FX_LINE_MAX);
    const char *hash = memchr(s, '#', n);
    if (hash) n = (size_t)(hash - s);
    size_t i = 0;
    while (i < n) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
        if (i >= n) break;
        size_t b = i;
        while (i < n && s[i] != ' ' && s[i] != '\t' && s[i] != '\r') i++;
        if (l->ntok == FX_MAX_TOKENS)
            return fx_parse_fail(p, l->no, "more than %d words", FX_MAX_TOKENS);
        if (i - b >= FX_TOKEN_MAX)
            return fx_parse_fail(p, l->no, "a word longer than %d bytes", FX_TOKEN_MAX - 1);
        memcpy(l->tok[l->ntok], s + b, i - b);
        l->tok[l->ntok][i - b] = '\0';
        if (l->ntok >= 2) {
            size_t o = strlen(l->rest);
            snprintf(l->rest + o, sizeof l->rest - o, "%s%s", o ? " " : "", l->tok[l->ntok]);
        }
        l->ntok++;
    }
    return 1;
}

/* The line on which a layer named `name` is defined after the current position, or 0. */
static int fx_defined_later(const fx_parse *p, const char *name)
{
    fx_parse q = *p;
    static _Thread_local fx_line l;
    int r;
    while ((r = fx_next_line(&q, &l)) != 0)
        if (r > 0 && l.ntok >= 2 && strcmp(l.tok[0], "model") && strcmp(l.tok[0], "input") &&
            !strcmp(l.tok[1], name))
            return l.no;
    return 0;
}

/* A failed layer line: the message with the line number, and for an input that a later line
 * defines, that line (a forward reference, which would make a cycle). */
static int fx_layer_fail(const fx_parse *p, const fx_line *l)
{
    char msg[768];
    fx_last_message(msg, sizeof msg);
    const int status = flexpoint_last_status();
    const char *key = "unknown input '";
    const char *u = status == FX_ENAME ? strstr(msg, key) : NULL;
    if (u) {
        char name[FX_TOKEN_MAX];
        const char *b = u + strlen(key), *e = strchr(b, '\'');
        size_t n = e ? (size_t)(e - b) : 0;
        if (n > 0 && n < sizeof name) {
            memcpy(name, b, n);
            name[n] = '\0';
            int later = fx_defined_later(p, name);
            if (later)
                return fx_parse_fail(p, l->no, "layer '%s': input '%s' is defined later, on "
                                     "line %d (a layer reads only earlier layers, so the "
                                     "graph has no cycle)", l->tok[1], name, later);
        }
    }
    return fx_parse_fail(p, l->no, "%s", msg);
}

/* `input shape=A,B,...` */
static int fx_parse_input(fx_parse *p, const fx_line *l, const char *name, fx_model_def **d)
{
    if (l->ntok != 2 || strncmp(l->tok[1], "shape=", 6) != 0)
        return fx_parse_fail(p, l->no, "the input line is 'input shape=C,H,W' (or shape=F)");
    int64_t shape[FX_MODEL_MAX_RANK];
    int nd = 0;
    const char *c = l->tok[1] + 6;
    for (;;) {
        if (nd == FX_MODEL_MAX_RANK)
            return fx_parse_fail(p, l->no, "the input has more than %d dimensions",
                                 FX_MODEL_MAX_RANK);
        int64_t x = 0;
        int digits = 0;
        if (*c == '0' && c[1] >= '0' && c[1] <= '9')
            return fx_parse_fail(p, l->no, "input shape: a size with a leading zero");
        for (; *c >= '0' && *c <= '9' && digits < 10; c++, digits++) x = x * 10 + (*c - '0');
        if (!digits || (*c && *c != ','))
            return fx_parse_fail(p, l->no, "input shape: '%s' is not sizes separated by commas",
                                 l->tok[1] + 6);
        shape[nd++] = x;
        if (!*c) break;
        c++;
    }
    if (fx_model_def_new(name, nd, shape, d)) {
        char msg[768];
        fx_last_message(msg, sizeof msg);
        return fx_parse_fail(p, l->no, "%s", msg);
    }
    return FX_OK;
}

int fx_model_def_parse(const char *text, size_t len, const char *source, fx_model_def **out)
{
    if (out) *out = NULL;
    if (!out || (!text && len)) return fx_error(FX_EINVAL, PARSE_FUNC, "NULL argument");
    fx_parse p = {text, source ? source : "model", len, 0, 0};
    if (len > FX_MODEL_FILE_MAX)
        return fx_error(FX_ECORRUPT, PARSE_FUNC, "%.200s: %zu bytes, more than a model file's "
                        "%d", p.src, len, FX_MODEL_FILE_MAX);
    fx_line *l = malloc(sizeof *l);
    int *lines = NULL; /* each layer's line, for messages about the whole graph */
    if (!l) return fx_error(FX_ENOMEM, PARSE_FUNC, "out of memory");
    fx_model_def *d = NULL;
    char name[FX_MODEL_LAYER_NAME_MAX] = "model";
    int model_line = 0, rc = FX_OK, r, cap = 0;
    while (!rc && (r = fx_next_line(&p, l)) != 0) {
        if (r < 0) {
            rc = r;
            break;
        }
        if (l->ntok == 0) continue;
        const char *kind = l->tok[0];
        if (!strcmp(kind, "model")) {
            if (model_line || d)
                rc = fx_parse_fail(&p, l->no, "'model' must come once, before the input line");
            else if (l->ntok != 2)
                rc = fx_parse_fail(&p, l->no, "the model line is 'model NAME'");
            else if (strlen(l->tok[1]) >= sizeof name)
                rc = fx_parse_fail(&p, l->no, "the model name is longer than %d bytes",
                                   FX_MODEL_LAYER_NAME_MAX - 1);
            else /* fits (checked above); memcpy, as GCC's truncation check cannot see that */
                memcpy(name, l->tok[1], strlen(l->tok[1]) + 1);
            model_line = l->no;
            continue;
        }
        if (!strcmp(kind, "input")) {
            rc = d ? fx_parse_fail(&p, l->no, "a second input line")
                   : fx_parse_input(&p, l, name, &d);
            continue;
        }
        if (!d) {
            rc = fx_parse_fail(&p, l->no, "'%.32s' before the input line (input shape=C,H,W)",
                               kind);
            break;
        }
        if (l->ntok < 2) {
            rc = fx_parse_fail(&p, l->no, "'%.32s' without a layer name (the line is "
                               "'KIND NAME key=value ...')", kind);
            break;
        }
        if (fx_model_def_layer(d, kind, l->tok[1], l->rest)) {
            rc = fx_layer_fail(&p, l);
            break;
        }
        if (d->n > cap) {
            int nc = cap ? 2 * cap : 64;
            int *g = realloc(lines, (size_t)nc * sizeof *g);
            if (!g) {
                rc = fx_error(FX_ENOMEM, PARSE_FUNC, "out of memory");
                break;
            }
            lines = g;
            cap = nc;
        }
        lines[d->n - 1] = l->no;
    }
    /* an empty text has one (empty) line */
    if (!rc && !d) rc = fx_parse_fail(&p, p.no ? p.no : 1, "no input line (input shape=C,H,W)");
    if (!rc && d->n == 0) rc = fx_parse_fail(&p, p.no, "no layer after the input line");
    for (int i = 0; !rc && i + 1 < d->n; i++)
        if (d->layers[i].consumers == 0)
            rc = fx_parse_fail(&p, lines[i], "layer '%s' feeds no later layer (only the last "
                               "layer, the logits, may be unused)", d->layers[i].name);
    free(lines);
    free(l);
    if (rc) {
        fx_model_def_free(d);
        return rc;
    }
    *out = d;
    return FX_OK;
}

int fx_model_def_load(const char *path, fx_model_def **out)
{
    if (out) *out = NULL;
    if (!path || !out) return FX_FAIL(FX_EINVAL, "NULL argument");
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = fx_data_read_file(path, __func__, FX_MODEL_FILE_MAX, &buf, &len);
    if (rc) return rc;
    rc = fx_model_def_parse((const char *)buf, len, path, out);
    free(buf);
    return rc;
}
