/* Format policies: which format each layer's tensors use (docs/training.md, "Format policies").
 *
 *   policy := item (';' item)*      items apply in order; the last matching rule wins
 *   item   := PRESET | TARGET '=' FORMAT
 *   PRESET := O0 | O1 | O2 | O3 | edges-fp32, optionally ':' FORMAT (else the run's format);
 *             only as the first item
 *   TARGET := default | CLASS | GLOB | GLOB '.' CLASS
 *   CLASS  := weights | biases | acts | dacts | dweights | grads (dacts and dweights)
 *   GLOB   := a shell pattern over layer names (fnmatch: *, ?, [...]; '.' is ordinary)
 *
 * The run's format is the starting point of every tensor (so "" and "default=F" with F the run's
 * format give the run exactly as without a policy). */
#ifndef FX_TRAIN_POLICY_H
#define FX_TRAIN_POLICY_H

#define FX_POLICY_MAX_RULES 48

/* Tensor classes of a layer. */
enum {
    FX_PC_WEIGHTS = 1,  /* conv / linear weights */
    FX_PC_BIASES = 2,   /* conv / linear biases */
    FX_PC_ACTS = 4,     /* the layer's output */
    FX_PC_DACTS = 8,    /* the gradients the layer computes w.r.t. its inputs */
    FX_PC_DWEIGHTS = 16, /* its weight and bias gradients */
    FX_PC_ALL = 31
};

/* Layer selectors beyond names, used by the presets. */
enum {
    FX_PSEL_NAME = 0,  /* the glob */
    FX_PSEL_GEMM = 1,  /* conv and linear layers */
    FX_PSEL_BN = 2,    /* batch-norm layers */
    FX_PSEL_FIRST = 3, /* the first conv/linear layer */
    FX_PSEL_LAST = 4   /* the last layer */
};

typedef struct fx_policy_rule {
    char glob[48];
    int select;  /* FX_PSEL_* */
    int classes; /* FX_PC_* mask */
    int fmt;
    int matched; /* set while resolving: a named glob that matches no layer is an error */
    char text[64]; /* the rule as written, for messages */
} fx_policy_rule;

typedef struct fx_policy {
    fx_policy_rule rules[FX_POLICY_MAX_RULES];
    int n;
    int no_master; /* O3: pure 16-bit; the configuration must have master_weights = 0 */
} fx_policy;

/* Parse text (NUL-terminated) into *p for a run whose format is run_fmt. FX_ENAME (unknown
 * preset, class or malformed rule), FX_EFORMAT (unknown format) or FX_EINVAL (empty policy, too
 * many rules), with a message naming the item, reported as func's. "" gives no rule. */
int fx_policy_parse(const char *text, int run_fmt, fx_policy *p, const char *func);

/* The format of class cls (one FX_PC_* bit) of layer `name` of kind `kind` (FX_L_*), the first
 * compute layer if first, the last layer if last; run_fmt where no rule matches. Marks the
 * rules that match. */
int fx_policy_format(fx_policy *p, const char *name, int kind, int first, int last, int cls,
                     int run_fmt);

/* After resolving every layer: FX_ENAME naming the first rule that matched no layer of model
 * (and, when its target is a plain word, saying that it is no tensor class either), reported
 * as func's; FX_OK when every rule matched. */
int fx_policy_unmatched(const fx_policy *p, const char *model, const char *func);

#endif
