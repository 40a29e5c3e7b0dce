"""Loading the library, status codes, backends and the ctypes struct layouts."""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import flexpoint as fx
from flexpoint._structs import STRUCTS

from conftest import PYROOT, REPO

INCLUDE = os.path.join(REPO, "include")
needs_headers = pytest.mark.skipif(not os.path.isfile(os.path.join(INCLUDE, "flexpoint.h")),
                                   reason="C headers not found (not run from the source tree)")


def test_version_and_library_path():
    assert re.fullmatch(r"\d+\.\d+\.\d+", fx.version())
    # the package and the C library it drives are released together
    assert fx.__version__ == fx.version()
    assert os.path.exists(fx.library_path())
    assert fx.lib().missing == [], f"library lacks {fx.lib().missing}"


def test_status_names_match_the_library():
    from flexpoint.errors import STATUS_NAMES, error_class
    for code, name in STATUS_NAMES.items():
        assert fx.lib().flexpoint_status_str(code).decode() == name
        if code < 0:
            assert issubclass(error_class(code), fx.FlexpointError)
    assert fx.lib().flexpoint_status_str(-999).decode() == "FX_UNKNOWN"


def test_backends_and_threads():
    names = fx.backends()
    assert "scalar" in names
    assert fx.backend() in fx.available_backends()
    current = fx.backend()
    fx.set_backend("scalar")
    assert fx.backend() == "scalar"
    fx.set_backend(current)
    with pytest.raises(fx.UnknownNameError) as ei:
        fx.set_backend("no-such-backend")
    assert "no-such-backend" in str(ei.value)
    prev = fx.set_num_threads(1)
    assert fx.num_threads() == 1
    fx.set_num_threads(prev)
    assert isinstance(fx.cpu_features(), list)
    assert fx.gpu_device_count() >= 0


def test_formats():
    assert fx.FORMATS == ("fp32", "fp16", "bf16", "flex16_5", "dfp16")
    assert fx.fmt_name("flex16+5") == "flex16_5"
    assert fx.fmt_id(fx.Format.DFP16) == 4
    assert fx.elem_size("fp32") == 4 and fx.elem_size("bf16") == 2
    assert fx.is_shared_exponent("dfp16") and not fx.is_shared_exponent("fp16")
    with pytest.raises(fx.FormatError) as ei:
        fx.fmt_id("fp8")
    assert ei.value.status_name == "FX_EFORMAT" and "fp8" in str(ei.value)
    with pytest.raises(fx.FormatError):
        fx.fmt_id(9)


def test_bad_library_path_is_a_clear_import_error(tmp_path):
    code = "import flexpoint as fx\ntry:\n    fx.version()\nexcept fx.LibraryNotFoundError as e:\n" \
           "    print('LNF', e)\n"
    env = dict(os.environ, FLEXPOINT_LIBRARY=str(tmp_path / "missing.so"),
               PYTHONPATH=PYROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "LNF" in r.stdout and "missing.so" in r.stdout


# ------------------------------------------------------------------------------------------
# struct layouts: the ctypes mirrors against the C declarations
# ------------------------------------------------------------------------------------------
_CTYPES = {"int": ctypes.c_int, "double": ctypes.c_double, "int64_t": ctypes.c_int64,
           "uint64_t": ctypes.c_uint64, "float": ctypes.c_float}


def _header_fields(header: str, struct: str):
    text = open(os.path.join(INCLUDE, header)).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    m = re.search(r"typedef\s+struct\s+" + struct + r"\s*\{(.*?)\}\s*" + struct + r"\s*;", text,
                  re.S)
    assert m, f"struct {struct} not found in {header}"
    fields = []
    for decl in m.group(1).split(";"):
        decl = decl.strip()
        if not decl:
            continue
        dm = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_ ]*?)\s*(\*?)\s*([A-Za-z_][A-Za-z0-9_]*)\s*"
                          r"(\[\d+\])?", decl)
        assert dm, f"cannot parse {decl!r} in {struct}"
        ctype, ptr, name, arr = dm.group(1).strip(), dm.group(2), dm.group(3), dm.group(4)
        if ptr:
            assert ctype == "const char", f"{struct}.{name}: unexpected pointer type {ctype} *"
            fields.append((name, ctypes.c_char_p))
            continue
        base = _CTYPES[ctype] if ctype != "char" else ctypes.c_char
        fields.append((name, base * int(arr[1:-1]) if arr else base))
    return fields


def _same_type(a, b) -> bool:
    if hasattr(a, "_length_"):
        return hasattr(b, "_length_") and a._length_ == b._length_ and a._type_ == b._type_
    return ctypes.sizeof(a) == ctypes.sizeof(b) and a._type_ == b._type_


@needs_headers
@pytest.mark.parametrize("struct", sorted(STRUCTS))
def test_struct_fields_match_header(struct):
    header, cls = STRUCTS[struct]
    want = _header_fields(header, struct)
    got = cls._fields_
    assert [n for n, _ in got] == [n for n, _ in want]
    for (n, t1), (_, t2) in zip(got, want):
        assert _same_type(t1, t2), f"{struct}.{n}: ctypes {t1} vs C {t2}"


@needs_headers
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to measure offsets")
def test_struct_offsets_match_the_compiler(tmp_path):
    lines = []
    for struct, (_, cls) in sorted(STRUCTS.items()):
        lines.append(f'printf("{struct} size %zu\\n", sizeof({struct}));')
        for name, _ in cls._fields_:
            lines.append(f'printf("{struct} {name} %zu\\n", offsetof({struct}, {name}));')
    src = textwrap.dedent("""\
        #include <stddef.h>
        #include <stdio.h>
        #include "flexpoint_train.h"
        int main(void) {
        %s
        return 0; }
        """) % "\n".join(lines)
    (tmp_path / "layout.c").write_text(src)
    exe = tmp_path / "layout"
    r = subprocess.run(["cc", "-std=c11", "-I", INCLUDE, str(tmp_path / "layout.c"), "-o",
                        str(exe)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout.split("\n")
    seen = 0
    for line in filter(None, out):
        struct, name, value = line.split()
        cls = STRUCTS[struct][1]
        want = ctypes.sizeof(cls) if name == "size" else getattr(cls, name).offset
        assert int(value) == want, f"{struct}.{name}: C {value}, ctypes {want}"
        seen += 1
    assert seen == sum(len(c._fields_) + 1 for _, c in STRUCTS.values())


def test_train_config_defaults_read_through_the_struct():
    # Garbage here would mean the ctypes layout does not match the library's.
    c = fx.TrainConfig.default()
    assert c.model == "cnn" and c.fmt == "fp32" and c.autoflex == "robust"
    assert c.batch_size == 128 and c.lr == pytest.approx(0.02) and c.momentum == 0.9
    assert (c.grad_window_lo, c.act_window_lo, c.weight_window_lo) == (-44, -31, -31)
    assert c.loss_scaling == "auto" and c.master_weights is True and c.epochs == 5
    # and back: every field set survives the trip through the C struct
    c2 = fx.TrainConfig(model="mlp", fmt="flex16_5", master_weights=False, loss_scaling=True,
                        stochastic_rounding=True, autoflex="robust", grad_window_lo=-50,
                        act_window_lo=-30, weight_window_lo=-29, batch_size=7, lr=0.5,
                        momentum=0.25, weight_decay=1e-4, lr_schedule="cosine", epochs=9,
                        augment=True, seed=2**63 + 5, threads=2, device="cuda:1",
                        optimizer="adamw", adam_beta1=0.8, adam_beta2=0.95, adam_eps=1e-6,
                        clip_norm=2.5, loss_scale_init=512.0, loss_scale_growth=3.0,
                        loss_scale_backoff=0.25, loss_scale_interval=7,
                        loss_scale_min=2.0, policy="fc2=fp32").resolved()
    assert c2 == fx.TrainConfig(model="mlp", fmt="flex16_5", master_weights=False,
                                loss_scaling=True, stochastic_rounding=True, autoflex="robust",
                                grad_window_lo=-50, act_window_lo=-30, weight_window_lo=-29,
                                batch_size=7, lr=0.5, momentum=0.25, weight_decay=1e-4,
                                lr_schedule="cosine", epochs=9, augment=True, seed=2**63 + 5,
                                threads=2, device=1, optimizer="adamw", adam_beta1=0.8,
                                adam_beta2=0.95, adam_eps=1e-6, clip_norm=2.5,
                                loss_scale_init=512.0, loss_scale_growth=3.0,
                                loss_scale_backoff=0.25, loss_scale_interval=7,
                                loss_scale_min=2.0, policy="fc2=fp32")
    with pytest.raises(fx.InvalidArgumentError):
        fx.TrainConfig(model="x" * 16).to_c()
    assert fx.TrainConfig.default().device == -1
    assert [fx.TrainConfig(device=d).resolved().device for d in ("cpu", "cuda", "cuda:3", 2)] \
        == [-1, 0, 3, 2]
    for bad in ("gpu", "cuda:", "cuda:x", "cuda:-1", -2, True):
        with pytest.raises(fx.InvalidArgumentError):
            fx.TrainConfig(device=bad).to_c()


def test_autoflex_presets_through_the_struct():
    pub = fx.autoflex_preset("published")
    assert (pub.history_len, pub.beta, pub.gamma, pub.alpha) == (16, 3.0, 100.0, 1.0)
    assert (pub.init_exp, pub.probe_tries, pub.init_mode) == (-8, 10, "probe")
    assert fx.autoflex_preset("truemax").stat_mode == "true_max"
    rob = fx.autoflex_preset("robust")
    assert (rob.stat_mode, rob.init_mode, rob.overflow_mode) == ("true_max", "exact", "recompute")
    assert fx.autoflex_preset("fixed").managed is False
    for name in fx.PRESETS:
        assert fx.AutoflexConfig.from_c(fx.autoflex_preset(name).to_c()) == \
            fx.autoflex_preset(name)
    with pytest.raises(fx.UnknownNameError) as ei:
        fx.autoflex_preset("nope")
    assert "nope" in str(ei.value)
