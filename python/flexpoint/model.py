"""Model definitions through the C API (flexpoint_model.h): a network built layer by layer, or
read from a model file (docs/models.md), which :class:`flexpoint.Trainer` trains in place of a
built-in model name::

    import flexpoint as fx

    net = (fx.Model((1, 28, 28), name="cnn")
           .conv2d("conv1", 32, 5, pad=2).relu()
           .maxpool2d("pool1", 2)
           .linear("fc1", 128).relu()
           .linear("fc2", 10))
    trainer = fx.Trainer(fx.TrainConfig(fmt="flex16_5"), train, test, model=net)

Each method adds one layer and returns the model, so calls chain. A layer reads the layer added
before it unless ``input=`` names another ("input" is the network input). Shapes are checked
as each layer is added: a layer that does not fit raises ShapeError (UnknownNameError for an
unknown input or a taken name) naming the layer, and leaves the model as it was. Shapes are per
sample, without the batch dimension. Nothing here computes: every check is the library's.
"""
from __future__ import annotations

import ctypes
from typing import Optional, Sequence, Tuple, Union

from ._check import c_int, c_int64, c_path, c_str
from ._lib import lib
from .errors import ArgumentTypeError, StateError, check

__all__ = ["Model", "ACTIVATIONS", "MAX_RANK", "FILE_MAX"]

#: Activation layers (fx_model_def_activation): relu and the tensor_unary functions.
ACTIVATIONS = ("relu", "tanh", "sigmoid", "gelu", "gelu_tanh", "silu")
#: FX_MODEL_MAX_RANK: most dimensions of a per-sample shape.
MAX_RANK = 4
#: FX_MODEL_FILE_MAX: the largest model file, in bytes.
FILE_MAX = 1 << 20
_NAME_SIZE = 32  # FX_MODEL_LAYER_NAME_MAX


def _name(value: str, what: str) -> bytes:
    return c_str(value, what, _NAME_SIZE)


def _opt_name(value: Optional[str], what: str) -> Optional[bytes]:
    return None if value is None else c_str(value, what, _NAME_SIZE)


class Model:
    """A model definition (fx_model_def): a per-sample input shape and named layers.

    ``Model(input_shape, name="model")``: input_shape is (C, H, W) for images or (F,) for flat
    vectors (at most MAX_RANK sizes); the trainer's images must hold as many values per sample.
    The last layer added gives the logits: it must have one value per class.
    """

    def __init__(self, input_shape: Union[int, Sequence[int]], name: str = "model") -> None:
        self._ptr: Optional[int] = None
        if isinstance(input_shape, int):
            input_shape = (input_shape,)
        try:
            dims = [c_int64(s, "input_shape") for s in input_shape]
        except TypeError:
            raise ArgumentTypeError("input_shape must be an int or a sequence of ints") from None
        n = c_int(len(dims), "len(input_shape)", 1, MAX_RANK)
        arr = (ctypes.c_int64 * n)(*dims)
        out = ctypes.c_void_p()
        L = lib()
        L.flexpoint_clear_error()
        check(L.fx_model_def_new(_name(name, "name"), n, arr, ctypes.byref(out)),
              "fx_model_def_new")
        self._ptr = out.value
        self._auto = 0

    @classmethod
    def _wrap(cls, ptr: int) -> "Model":
        m = cls.__new__(cls)
        m._ptr = ptr
        m._auto = 0
        return m

    @classmethod
    def load(cls, path) -> "Model":
        """Read a model file (plain or gzip; a FIFO or folder is refused at once). Raises
        CorruptError with "PATH:LINE: problem" for a bad file, FlexpointIOError when it cannot
        be read."""
        out = ctypes.c_void_p()
        lib().flexpoint_clear_error()
        check(lib().fx_model_def_load(c_path(path), ctypes.byref(out)), "fx_model_def_load")
        return cls._wrap(out.value)

    @classmethod
    def parse(cls, text: str, source: str = "model") -> "Model":
        """Parse a model file's text; errors as for :meth:`load`, named after `source`."""
        if not isinstance(text, str):
            raise ArgumentTypeError("text must be a str")
        raw = text.encode("utf-8")
        out = ctypes.c_void_p()
        lib().flexpoint_clear_error()
        check(lib().fx_model_def_parse(raw, len(raw), c_path(source, "source"),
                                       ctypes.byref(out)), "fx_model_def_parse")
        return cls._wrap(out.value)

    @classmethod
    def builtin(cls, name: str, image_shape: Sequence[int], classes: int) -> "Model":
        """The definition of a built-in network ("mlp", "cnn", "resnet20" or a family member)
        for images of image_shape = (C, H, W) and `classes` classes: the network a TrainConfig
        with model=name trains."""
        C, H, W = (c_int(v, "image_shape", 1) for v in image_shape)
        out = ctypes.c_void_p()
        lib().flexpoint_clear_error()
        check(lib().fx_model_def_builtin(c_str(name, "name", 16), C, H, W,
                                         c_int(classes, "classes", 1), ctypes.byref(out)),
              "fx_model_def_builtin")
        return cls._wrap(out.value)

    # lifetime -------------------------------------------------------------------------------
    @property
    def handle(self) -> int:
        """The fx_model_def* (owned by this object)."""
        if not self._ptr:
            raise StateError("the model was closed", -11)
        return self._ptr

    def close(self) -> None:
        """Free the definition now (trainers built from it keep their own copy)."""
        ptr, self._ptr = self._ptr, None
        if ptr:
            lib().fx_model_def_free(ptr)

    def __del__(self) -> None:
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            try:
                lib().fx_model_def_free(ptr)
            except Exception:  # interpreter shutdown
                pass

    # layers ---------------------------------------------------------------------------------
    def _auto_name(self, kind: str) -> str:
        # kind + a number not yet taken: "relu1", "relu2", ...
        while True:
            self._auto += 1
            candidate = f"{kind}{self._auto}"
            if candidate not in self.layer_names():
                return candidate

    def layer(self, kind: str, name: Optional[str] = None, **options) -> "Model":
        """Add a layer by kind name with key=value options, as a model file's line does
        (docs/models.md), e.g. ``layer("conv2d", "conv1", out=32, kernel=5, pad=2)``;
        ``input="x"`` (or ``in_="a,b"``) names the inputs."""
        parts = []
        for key, value in options.items():
            if key in ("input", "in_"):
                key = "in"
            if isinstance(value, bool):
                value = int(value)
            if isinstance(value, (list, tuple)):
                value = ",".join(str(v) for v in value)
            if value is None:
                continue
            parts.append(f"{key}={value}")
        if name is None:
            name = self._auto_name(kind)
        opts = " ".join(parts)
        lib().flexpoint_clear_error()
        check(lib().fx_model_def_layer(self.handle, c_str(kind, "kind", 64),
                                       _name(name, "name"), c_str(opts, "options")),
              "fx_model_def_layer")
        return self

    def linear(self, name: Optional[str], out: int, input: Optional[str] = None) -> "Model":
        """A fully connected layer of `out` features over the flattened input."""
        return self.layer("linear", name, out=c_int64(out, "out"), input=input)

    def conv2d(self, name: Optional[str], out: int, kernel: int, stride: int = 1,
               pad: int = 0, bias: bool = True, input: Optional[str] = None) -> "Model":
        """A 2-D convolution of `out` channels with a square kernel over a (C, H, W) input."""
        return self.layer("conv2d", name, out=c_int64(out, "out"), kernel=c_int(kernel, "kernel"),
                          stride=c_int(stride, "stride"), pad=c_int(pad, "pad"),
                          bias=bool(bias), input=input)

    def batchnorm(self, name: Optional[str] = None, input: Optional[str] = None) -> "Model":
        """Batch normalisation per channel of (C, H, W) or per feature of (F,)."""
        return self.layer("batchnorm", name, input=input)

    def activation(self, fn: str, name: Optional[str] = None,
                   input: Optional[str] = None) -> "Model":
        """An element-wise activation, one of ACTIVATIONS."""
        return self.layer(fn, name, input=input)

    def relu(self, name: Optional[str] = None, input: Optional[str] = None) -> "Model":
        return self.activation("relu", name, input)

    def tanh(self, name: Optional[str] = None, input: Optional[str] = None) -> "Model":
        return self.activation("tanh", name, input)

    def sigmoid(self, name: Optional[str] = None, input: Optional[str] = None) -> "Model":
        return self.activation("sigmoid", name, input)

    def gelu(self, name: Optional[str] = None, input: Optional[str] = None) -> "Model":
        return self.activation("gelu", name, input)

    def silu(self, name: Optional[str] = None, input: Optional[str] = None) -> "Model":
        return self.activation("silu", name, input)

    def maxpool2d(self, name: Optional[str], kernel: int, stride: Optional[int] = None,
                  pad: int = 0, input: Optional[str] = None) -> "Model":
        """Max pooling with a square window; the stride defaults to the window."""
        return self.layer("maxpool2d", name, kernel=c_int(kernel, "kernel"),
                          stride=None if stride is None else c_int(stride, "stride"),
                          pad=c_int(pad, "pad"), input=input)

    def avgpool2d(self, name: Optional[str], kernel: int, stride: Optional[int] = None,
                  pad: int = 0, input: Optional[str] = None) -> "Model":
        """Average pooling with a square window; the stride defaults to the window."""
        return self.layer("avgpool2d", name, kernel=c_int(kernel, "kernel"),
                          stride=None if stride is None else c_int(stride, "stride"),
                          pad=c_int(pad, "pad"), input=input)

    def global_avgpool(self, name: Optional[str] = None,
                       input: Optional[str] = None) -> "Model":
        """(C, H, W) -> (C,)."""
        return self.layer("global_avgpool", name, input=input)

    def add(self, name: Optional[str], a: str, b: Optional[str] = None) -> "Model":
        """The sum of two layers of equal shape: ``add(name, a, b)``, or ``add(name, b)`` for
        the last layer added plus b (a residual connection)."""
        if b is None:
            a, b = self.layer_names()[-1] if len(self) else "input", a
        c_str(a, "a")
        c_str(b, "b")
        return self.layer("add", name, input=f"{a},{b}")

    def flatten(self, name: Optional[str] = None, input: Optional[str] = None) -> "Model":
        """Any shape -> (F,), a view."""
        return self.layer("flatten", name, input=input)

    def dropout(self, p: float, name: Optional[str] = None,
                input: Optional[str] = None) -> "Model":
        """Dropout with probability p in [0, 1) in training; the identity in evaluation."""
        if isinstance(p, bool) or not isinstance(p, (int, float)):
            raise ArgumentTypeError("p must be a number")
        return self.layer("dropout", name, p=repr(float(p)), input=input)

    # queries --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return check(lib().fx_model_def_layer_count(self.handle), "fx_model_def_layer_count")

    def shape(self, layer: Optional[str] = None) -> Tuple[int, ...]:
        """The per-sample output shape of `layer` ("input" for the input; None: the output)."""
        nd = ctypes.c_int()
        s = (ctypes.c_int64 * MAX_RANK)()
        check(lib().fx_model_def_shape(self.handle, _opt_name(layer, "layer"), ctypes.byref(nd),
                                       s), "fx_model_def_shape")
        return tuple(s[i] for i in range(nd.value))

    def to_text(self) -> str:
        """The model-file text in canonical form, which :meth:`parse` reads back."""
        n = ctypes.c_size_t()
        lib().fx_model_def_to_text(self.handle, None, 0, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value + 1)
        check(lib().fx_model_def_to_text(self.handle, buf, n.value + 1, None),
              "fx_model_def_to_text")
        return buf.value.decode("utf-8")

    def layer_names(self) -> Tuple[str, ...]:
        """The layers' names, in the order they were added."""
        names = []
        for line in self.to_text().splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] not in ("model", "input"):
                names.append(words[1])
        return tuple(names)

    @property
    def identity(self) -> str:
        """"@" and 14 hex digits: what a trainer of this model stores as its model name, so a
        checkpoint of another network is refused."""
        buf = ctypes.create_string_buffer(16)
        check(lib().fx_model_def_identity(self.handle, buf), "fx_model_def_identity")
        return buf.value.decode()

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"<flexpoint.Model {self.identity}: {len(self)} layers, output {self.shape()}>"
