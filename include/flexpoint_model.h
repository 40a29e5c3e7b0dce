/**
 * @file
 * @brief flexpoint model definitions: describe a network layer by layer (or read it from a
 * model file) and train it with fx_trainer_new_model() in place of a built-in model name.
 *
 * A definition (fx_model_def) is a graph of named layers over a per-sample input shape. Each
 * layer has a kind ("linear", "conv2d", ...), a unique name and the names of its inputs:
 * "input" for the network input, and by default the layer added just before it. The shape of
 * every layer's output is computed when the layer is added, so a layer that does not fit its
 * input is refused at once (FX_ESHAPE, the message naming the layer). The last layer added is
 * the network's output: the logits of the softmax cross-entropy loss, one value per class.
 *
 * Shapes here are per sample (no batch dimension): (C, H, W) for images, (F) for features,
 * at most FX_MODEL_MAX_RANK dimensions. A definition holds no weights: the trainer draws them
 * from fx_train_config.seed in the order the layers' parameters appear (weights, then bias),
 * exactly as for the built-in networks, which are themselves built through this API
 * (fx_model_def_builtin()): a definition equal to a built-in trains to the same bits.
 *
 * Layer kinds (name in the model file, function here):
 * - `linear` (fx_model_def_linear): y = x W^T + b over the flattened input, with `out` features;
 * - `conv2d` (fx_model_def_conv2d): 2-D convolution of a (C, H, W) input, square kernel;
 * - `batchnorm` (fx_model_def_batchnorm): per channel of (C, H, W) or per feature of (F);
 *   fp32 parameters and statistics;
 * - `relu`, `tanh`, `sigmoid`, `gelu`, `gelu_tanh`, `silu` (fx_model_def_activation);
 * - `maxpool2d`, `avgpool2d` (fx_model_def_pool2d), `global_avgpool`
 *   (fx_model_def_global_avgpool): (C, H, W) -> (C);
 * - `add` (fx_model_def_add): the element-wise sum of two layers of equal shape (residual);
 * - `flatten` (fx_model_def_flatten): any shape -> (F), a view (no copy);
 * - `dropout` (fx_model_def_dropout): in training only, with a mask drawn from the run's seed
 *   and step, so runs repeat and resume bit for bit;
 * - language models over (T) token numbers (a text dataset, fx_dataset_text()):
 *   `embedding` (fx_model_def_embedding), `layernorm` (fx_model_def_layernorm), `attention`
 *   (fx_model_def_attention), `token_linear` (fx_model_def_token_linear). A definition whose
 *   input is (T) and whose first layer is an embedding is a sequence model: its last layer
 *   gives (T, classes), one prediction per position, and the loss is the softmax
 *   cross-entropy averaged over every position of the batch. These layers run on host
 *   trainers of one process.
 * fx_model_def_layer() adds any of them by kind name with `key=value` options, as one line of a
 * model file does (docs/models.md).
 *
 * Limits: names are 1 to FX_MODEL_LAYER_NAME_MAX - 1 bytes of letters, digits, '_', '-' and '.'
 * ("input" is reserved); a definition has at most FX_MODEL_MAX_LAYERS layers; a layer's output
 * feeds at most two layers (the network input any number); a layer takes one input, two for
 * `add`.
 *
 * Conventions are those of flexpoint.h: functions return FX_OK or a negative FX_E* status,
 * with a message in flexpoint_last_error(). A failed add leaves the definition as it was.
 */
#ifndef FLEXPOINT_MODEL_H
#define FLEXPOINT_MODEL_H

#include "flexpoint.h"
#include "flexpoint_data.h"
#include "flexpoint_train.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Most dimensions of a per-sample shape (the trainer adds the batch dimension). */
#define FX_MODEL_MAX_RANK 4
/** @brief Size of a name buffer: model and layer names have at most 31 bytes. */
#define FX_MODEL_LAYER_NAME_MAX 32
/** @brief Most layers of one definition. */
#define FX_MODEL_MAX_LAYERS 4096
/** @brief Largest model file fx_model_def_load() reads, in bytes. */
#define FX_MODEL_FILE_MAX (1 << 20)
/** @brief Size of the buffer of fx_model_def_identity(): "@" and 14 hex digits, NUL. */
#define FX_MODEL_ID_SIZE 16

/** @brief A model definition (opaque): created by fx_model_def_new(), fx_model_def_parse(),
 *  fx_model_def_load() or fx_model_def_builtin(), freed with fx_model_def_free(). */
typedef struct fx_model_def fx_model_def;

/** @brief Create an empty definition for inputs of a per-sample shape.
 *  @param[in]  name  The model's name (used in messages and by fx_model_def_to_text()), 1 to
 *                    31 bytes of letters, digits, '_', '-', '.'.
 *  @param[in]  ndim  Rank of the input, 1 to FX_MODEL_MAX_RANK: 3 for (C, H, W) images, 1 for
 *                    a flat vector.
 *  @param[in]  shape ndim sizes, each in [1, 2^24], at most 2^31 - 1 elements in all.
 *  @param[out] out   Receives the definition, which the caller owns and frees with
 *                    fx_model_def_free().
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL argument, or ndim out of range.
 *  @retval FX_ENAME a bad name.
 *  @retval FX_ESHAPE a size out of range.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_new(const char *name, int ndim, const int64_t *shape,
                            fx_model_def **out);

/** @brief Free a definition. Trainers built from it keep their own copy.
 *  @param[in] d The definition; NULL is a no-op. */
FX_API void fx_model_def_free(fx_model_def *d);

/** @brief A fully connected layer: y = flatten(x) W^T + b, W of shape [out, in], b [out],
 *  both initialised uniformly in +-1/sqrt(in).
 *  @param[in,out] d            The definition.
 *  @param[in]     name         The new layer's name.
 *  @param[in]     input        The input layer's name, "input", or NULL / "" for the last layer
 *                              added (the network input when there is none).
 *  @param[in]     out_features Output features, in [1, 2^24].
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d.
 *  @retval FX_ENAME a bad, reserved or duplicate name, or an unknown input (the message names
 *          the layer).
 *  @retval FX_ESHAPE out_features out of range, more than 2^31 - 1 input features, an input
 *          already feeding two layers.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_linear(fx_model_def *d, const char *name, const char *input,
                               int64_t out_features);

/** @brief A 2-D convolution with a square kernel over a (C, H, W) input: output
 *  (out_channels, (H + 2 pad - kernel) / stride + 1, likewise for W). The weights
 *  [out_channels, C, kernel, kernel] and the bias [out_channels] are initialised uniformly in
 *  +-1/sqrt(C kernel^2).
 *  @param[in,out] d            The definition.
 *  @param[in]     name         The new layer's name.
 *  @param[in]     input        As for fx_model_def_linear().
 *  @param[in]     out_channels In [1, 65536].
 *  @param[in]     kernel       In [1, 64].
 *  @param[in]     stride       In [1, 64].
 *  @param[in]     pad          Zero padding on each side, in [0, kernel - 1].
 *  @param[in]     bias         1: with a bias; 0: without (e.g. before batch norm).
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d, or bias not 0 or 1.
 *  @retval FX_ENAME as for fx_model_def_linear().
 *  @retval FX_ESHAPE an input that is not (C, H, W), a parameter out of range, an empty
 *          output.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_conv2d(fx_model_def *d, const char *name, const char *input,
                               int64_t out_channels, int kernel, int stride, int pad, int bias);

/** @brief Batch normalisation per channel of a (C, H, W) input or per feature of an (F) input,
 *  with fp32 scale (initially 1), shift (0) and running statistics (momentum 0.1, eps 1e-5).
 *  @param[in,out] d     The definition.
 *  @param[in]     name  The new layer's name.
 *  @param[in]     input As for fx_model_def_linear().
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d.
 *  @retval FX_ENAME as for fx_model_def_linear().
 *  @retval FX_ESHAPE an input of another rank.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_batchnorm(fx_model_def *d, const char *name, const char *input);

/** @brief An element-wise activation of any input shape.
 *  @param[in,out] d     The definition.
 *  @param[in]     fn    "relu" (exact in every format, fused with a convolution before it in
 *                       the float formats), or "tanh", "sigmoid", "gelu", "gelu_tanh", "silu"
 *                       (tensor_unary(): fp32 math, one write; host trainers only).
 *  @param[in]     name  The new layer's name.
 *  @param[in]     input As for fx_model_def_linear().
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d or fn.
 *  @retval FX_ENAME an unknown fn, or as for fx_model_def_linear().
 *  @retval FX_ESHAPE an input already feeding two layers.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_activation(fx_model_def *d, const char *fn, const char *name,
                                   const char *input);

/** @brief 2-D max or average pooling of a (C, H, W) input with a square window: output
 *  (C, (H + 2 pad - kernel) / stride + 1, likewise for W).
 *  @param[in,out] d      The definition.
 *  @param[in]     kind   "maxpool2d" or "avgpool2d".
 *  @param[in]     name   The new layer's name.
 *  @param[in]     input  As for fx_model_def_linear().
 *  @param[in]     kernel Window size, in [1, 64].
 *  @param[in]     stride In [1, 64].
 *  @param[in]     pad    In [0, kernel / 2].
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d or kind.
 *  @retval FX_ENAME an unknown kind, or as for fx_model_def_linear().
 *  @retval FX_ESHAPE an input that is not (C, H, W), a parameter out of range, an empty
 *          output.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_pool2d(fx_model_def *d, const char *kind, const char *name,
                               const char *input, int kernel, int stride, int pad);

/** @brief Global average pooling: (C, H, W) -> (C).
 *  @param[in,out] d     The definition.
 *  @param[in]     name  The new layer's name.
 *  @param[in]     input As for fx_model_def_linear().
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d.
 *  @retval FX_ENAME as for fx_model_def_linear().
 *  @retval FX_ESHAPE an input that is not (C, H, W).
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_global_avgpool(fx_model_def *d, const char *name, const char *input);

/** @brief The element-wise sum of two layers' outputs of equal shape (a residual connection).
 *  @param[in,out] d    The definition.
 *  @param[in]     name The new layer's name.
 *  @param[in]     a    The first input ("input", a layer name, or NULL / "" for the last layer
 *                      added).
 *  @param[in]     b    The second input (a name; not NULL).
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d or b.
 *  @retval FX_ENAME as for fx_model_def_linear().
 *  @retval FX_ESHAPE inputs of different shapes (the message gives both).
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_add(fx_model_def *d, const char *name, const char *a, const char *b);

/** @brief Flatten to (F): the same values, a view of the input (nothing is copied).
 *  @param[in,out] d     The definition.
 *  @param[in]     name  The new layer's name.
 *  @param[in]     input As for fx_model_def_linear().
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d.
 *  @retval FX_ENAME as for fx_model_def_linear().
 *  @retval FX_ESHAPE an input already feeding two layers.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_flatten(fx_model_def *d, const char *name, const char *input);

/** @brief Dropout (tensor_dropout()): in training, each element is zeroed with probability p
 *  and the others scaled by 1/(1-p), with a mask drawn from the run's seed, the layer's
 *  position and the global step (the same in the backward pass, on resume and at any thread
 *  count); in evaluation the input passes unchanged.
 *  @param[in,out] d     The definition.
 *  @param[in]     name  The new layer's name.
 *  @param[in]     input As for fx_model_def_linear().
 *  @param[in]     p     Drop probability, in [0, 1).
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d.
 *  @retval FX_ENAME as for fx_model_def_linear().
 *  @retval FX_ERANGE p outside [0, 1).
 *  @retval FX_ESHAPE an input already feeding two layers.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_dropout(fx_model_def *d, const char *name, const char *input, double p);

/** @brief Token and learned position embedding: (T) token numbers -> (T, dim), row t of a
 *  sample = tok[token_t] + pos[t]. Parameters `NAME.tok` [vocab, dim] and `NAME.pos` [T, dim],
 *  initialised uniformly in +-1/sqrt(dim). It reads the network input, which must be (T).
 *  @param[in,out] d     The definition.
 *  @param[in]     name  The new layer's name.
 *  @param[in]     input "input", or NULL / "" when it is the first layer.
 *  @param[in]     vocab Table rows, in [1, 65536]; at least the dataset's classes.
 *  @param[in]     dim   Width, in [1, 65536].
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d.
 *  @retval FX_ENAME as for fx_model_def_linear().
 *  @retval FX_ESHAPE an input other than the network's (T), sizes out of range.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_embedding(fx_model_def *d, const char *name, const char *input,
                                  int64_t vocab, int64_t dim);

/** @brief Layer normalisation over the last dimension D (tensor_layernorm(), eps 1e-5), with
 *  fp32 parameters `NAME.gamma` (1) and `NAME.beta` (0) of D values; statistics in fp32.
 *  @param[in,out] d     The definition.
 *  @param[in]     name  The new layer's name.
 *  @param[in]     input As for fx_model_def_linear().
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d.
 *  @retval FX_ENAME as for fx_model_def_linear().
 *  @retval FX_ESHAPE a last dimension above 65536, an input already feeding two layers.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_layernorm(fx_model_def *d, const char *name, const char *input);

/** @brief Multi-head causal self-attention over (T, D): q, k, v = x Wq^T, x Wk^T, x Wv^T;
 *  per head (D / heads wide) P = softmax(causal_mask(q k^T / sqrt(D / heads))), o = P v; the
 *  heads side by side times Wo^T. Parameters `NAME.wq`, `NAME.wk`, `NAME.wv`, `NAME.wo`, each
 *  [D, D] (no biases), initialised uniformly in +-1/sqrt(D). Products by tensor_bmm() (exact
 *  integer sums in FLEX16_5/DFP16); the scaled, masked scores are fp32 and the softmax
 *  statistics fp32; q, k, v, the scores, the probabilities and o are written in the layer's
 *  activation format.
 *  @param[in,out] d     The definition.
 *  @param[in]     name  The new layer's name.
 *  @param[in]     input As for fx_model_def_linear().
 *  @param[in]     heads Heads, >= 1, dividing D.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d.
 *  @retval FX_ENAME as for fx_model_def_linear().
 *  @retval FX_ESHAPE an input that is not (T, D), heads not dividing D, D above 65536.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_attention(fx_model_def *d, const char *name, const char *input,
                                  int heads);

/** @brief A linear layer applied at every position: (T, F) -> (T, out), y_t = x_t W^T + b
 *  with W [out, F] and b [out] initialised uniformly in +-1/sqrt(F). A GEMM layer for format
 *  policies.
 *  @param[in,out] d            The definition.
 *  @param[in]     name         The new layer's name.
 *  @param[in]     input        As for fx_model_def_linear().
 *  @param[in]     out_features In [1, 65536].
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d.
 *  @retval FX_ENAME as for fx_model_def_linear().
 *  @retval FX_ESHAPE an input that is not (T, F), sizes out of range.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_token_linear(fx_model_def *d, const char *name, const char *input,
                                     int64_t out_features);

/** @brief Add a layer by kind name with `key=value` options separated by spaces: the generic
 *  form of the functions above and of a model file's layer line (docs/models.md lists every
 *  kind's keys). `in=a` or `in=a,b` names the inputs (default: the last layer added).
 *  Example: fx_model_def_layer(d, "conv2d", "conv1", "out=32 kernel=5 pad=2").
 *  @param[in,out] d       The definition.
 *  @param[in]     kind    A layer kind.
 *  @param[in]     name    The new layer's name.
 *  @param[in]     options The options; NULL or "" for none.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d, kind or name; a malformed option, a key the kind does not take
 *          or a bad number (the message names the key).
 *  @retval FX_ENAME an unknown kind, or as for fx_model_def_linear().
 *  @retval FX_ESHAPE, FX_ERANGE as for the kind's function.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_layer(fx_model_def *d, const char *kind, const char *name,
                              const char *options);

/** @brief Parse a model file's text (docs/models.md): `model NAME`, `input shape=C,H,W`, then
 *  one layer a line as `kind name key=value ... [in=a,b]`; `#` starts a comment.
 *  @param[in]  text   The text (need not be NUL-terminated; a NUL byte is an error).
 *  @param[in]  len    Its length in bytes, at most FX_MODEL_FILE_MAX.
 *  @param[in]  source The name used in messages (e.g. the file's path); NULL for "model".
 *  @param[out] out    Receives the definition (caller frees with fx_model_def_free()).
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL text (with len > 0) or out.
 *  @retval FX_ECORRUPT the text is not a model: the message is "SOURCE:LINE: problem" (an
 *          unknown kind, an unknown or later input name, a duplicate name, a shape mismatch, a
 *          line without its name, a bad number, a missing input line, an empty model, text too
 *          long).
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_parse(const char *text, size_t len, const char *source,
                              fx_model_def **out);

/** @brief Read and parse a model file (a regular file of at most FX_MODEL_FILE_MAX bytes,
 *  plain or gzip-compressed; a FIFO or folder is refused at once, never waited on).
 *  @param[in]  path The file.
 *  @param[out] out  Receives the definition (caller frees with fx_model_def_free()).
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL argument.
 *  @retval FX_EIO the file cannot be read, or is not a regular file.
 *  @retval FX_ECORRUPT as for fx_model_def_parse(), or a file too large.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_load(const char *path, fx_model_def **out);

/** @brief The definition of a built-in network (fx_model_check() names: mlp, cnn, resnet20,
 *  transformer and their families) for images of C x H x W with `classes` classes: exactly
 *  the network that fx_trainer_new() builds for that name.
 *
 *  A transformer (`gpt<L>x<D>h<H>c<T>`) takes an input of shape (T), one window of token
 *  numbers, so C x H x W must be T (a text dataset's 1 x 1 x T), and `classes` is the
 *  vocabulary: layers `emb`, then per block i `b<i>.ln1`, `b<i>.attn`, `b<i>.res1`,
 *  `b<i>.ln2`, `b<i>.fc` (4D), `b<i>.gelu`, `b<i>.proj`, `b<i>.res2`, then `lnf` and `head`.
 *  @param[in]  name    The built-in name.
 *  @param[in]  C       Image channels, >= 1.
 *  @param[in]  H       Image height, >= 1 (cnn and resnet: divisible by 4).
 *  @param[in]  W       Image width, likewise.
 *  @param[in]  classes Classes (a transformer's vocabulary), >= 1.
 *  @param[out] out     Receives the definition (caller frees with fx_model_def_free()).
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL argument.
 *  @retval FX_ENAME an unknown model name.
 *  @retval FX_ESHAPE an image shape the network does not fit, or a transformer's C x H x W
 *          other than its context T.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_builtin(const char *name, int C, int H, int W, int classes,
                                fx_model_def **out);

/** @brief Number of layers of a definition.
 *  @param[in] d The definition.
 *  @return The count, or FX_EINVAL for a NULL d. */
FX_API int fx_model_def_layer_count(const fx_model_def *d);

/** @brief The per-sample output shape of a layer.
 *  @param[in]  d     The definition.
 *  @param[in]  layer A layer name, "input", or NULL for the network's output (the last layer).
 *  @param[out] ndim  Receives the rank.
 *  @param[out] shape Receives the sizes (FX_MODEL_MAX_RANK entries; those past ndim are 0).
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d, ndim or shape.
 *  @retval FX_ENAME no layer of that name.
 *  @retval FX_ESTATE layer NULL and no layer yet. */
FX_API int fx_model_def_shape(const fx_model_def *d, const char *layer, int *ndim,
                              int64_t shape[FX_MODEL_MAX_RANK]);

/** @brief The definition as model-file text in canonical form (every option spelled out, one
 *  layer a line), which fx_model_def_parse() reads back into an equal definition.
 *  @param[in]  d   The definition.
 *  @param[out] buf Receives the text, NUL-terminated; may be NULL when cap is 0.
 *  @param[in]  cap Size of buf in bytes.
 *  @param[out] len Receives the text's length without the NUL (the size needed is len + 1);
 *                  may be NULL.
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL d.
 *  @retval FX_ERANGE buf is too small (nothing useful is written; *len says what is needed). */
FX_API int fx_model_def_to_text(const fx_model_def *d, char *buf, size_t cap, size_t *len);

/** @brief The identity of a definition: "@" and 14 hex digits of a 64-bit FNV-1a hash of its
 *  canonical text without the model's name (input shape and every layer's kind, name, inputs
 *  and options). fx_trainer_new_model() stores it in fx_train_config.model, so checkpoints
 *  (which compare that field) refuse a checkpoint of another network.
 *  @param[in]  d  The definition.
 *  @param[out] id Receives the identity, NUL-terminated (FX_MODEL_ID_SIZE bytes).
 *  @retval FX_OK
 *  @retval FX_EINVAL a NULL argument.
 *  @retval FX_ENOMEM */
FX_API int fx_model_def_identity(const fx_model_def *d, char id[FX_MODEL_ID_SIZE]);

/** @brief fx_trainer_new() for a model definition in place of a built-in name.
 *
 *  cfg->model is ignored: the trainer's configuration (checkpoints,
 *  fx_trainer_copy_weights()) holds the definition's identity (fx_model_def_identity())
 *  instead, so fx_trainer_load() refuses a checkpoint of another network. The definition's
 *  per-sample input must hold C x H x W values (the images, row-major, reshaped to it) and its
 *  last layer must give (classes) values. The definition is copied: the caller may free it at
 *  once. A format policy (cfg->policy) names the definition's layers.
 *  @param[in] cfg   The configuration (every field but model checked as by fx_trainer_new()).
 *  @param[in] def   The definition.
 *  @param[in] train The training set, borrowed: it must outlive the trainer.
 *  @param[in] test  NULL, or the test set (borrowed likewise).
 *  @return The trainer (free it with fx_trainer_free()); NULL on error with
 *          flexpoint_last_status(): as for fx_trainer_new(), FX_EINVAL for a NULL def, FX_ESHAPE
 *          for images or classes that do not fit the definition or an empty definition,
 *          FX_EUNSUPPORTED for a layer the device cannot run. */
FX_API fx_trainer *fx_trainer_new_model(const fx_train_config *cfg, const fx_model_def *def,
                                        const fx_dataset *train, const fx_dataset *test);

#ifdef __cplusplus
}
#endif
#endif
