"""Trainer.health(): the numeric health of an epoch (fx_trainer_health) from Python, and the
warnings Trainer.fit prints as flexpoint-train does: saturating weights, non-finite weights,
and silence for a healthy run. The ctypes mirror of struct fx_train_health is checked against
the compiler's layout (its arrays are sized by a macro, which the layout test of
test_library.py does not read)."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import textwrap

import numpy as np
import pytest

import flexpoint as fx
from flexpoint._structs import TrainHealthC

from conftest import REPO, needs

pytestmark = needs("fx_trainer_health")


def _trainer(fmt: str, **kw) -> fx.Trainer:
    ds = fx.data.synthetic(200, 1, 8, 8, 4, seed=5)
    cfg = fx.TrainConfig(model="mlp", fmt=fmt, batch_size=50, epochs=1, seed=2, threads=1, **kw)
    return fx.Trainer(cfg, ds, ds)


def test_saturating_weights_are_counted_and_warned(capfd):
    # flexpoint-train's own case (tools/test_cli.sh): an absurd learning rate saturates the
    # flex16_5 weights
    tr = _trainer("flex16_5", lr=1e9, momentum=0.0)
    ms = tr.fit(1)
    err = capfd.readouterr().err
    h = tr.health()
    assert h["measured"] is True and h["steps"] == ms[0].steps == 4
    w = h["weights"]
    assert w["saturated"] > 0 and w["written"] >= w["saturated"]
    assert w["worst_saturated"] in tr.tensor_names()
    assert w["worst_saturated_fraction"] > fx.train.HEALTH_WARN_FRACTION
    assert h["params"] == tr.param_count
    lines = tr.health_warnings()  # the epoch just reported, by default
    assert lines == tr.health_warnings(ms[0].epoch)
    assert any(f"flex16_5 epoch {ms[0].epoch}: weights saturated: {w['saturated']} of "
               f"{w['written']} elements written ({w['worst_saturated']}:" in s for s in lines)
    for line in lines:  # fit printed each line to stderr
        assert line in err
    assert err.count("flexpoint: warning:") == len(lines)


def test_nonfinite_weights_are_counted_in_every_format(capfd):
    # fp16 without loss scaling and a learning rate far too large (tools/test_cli.sh)
    tr = _trainer("fp16", loss_scaling=False, lr=1000.0)
    tr.fit(1)
    err = capfd.readouterr().err
    h = tr.health()
    assert h["measured"] is False  # float formats keep no write statistics
    assert 0 < h["nonfinite_weights"] <= h["params"] == tr.param_count
    np.testing.assert_equal(int(np.sum(~np.isfinite(tr.params()))) > 0, True)
    want = f"of {h['params']} weights are NaN or Inf"
    assert want in err and "fp16 epoch" in err
    # warn=False prints nothing
    tr.fit(1, warn=False)
    assert "warning" not in capfd.readouterr().err


def test_healthy_run_is_quiet(capfd):
    tr = _trainer("flex16_5")
    tr.fit(1)
    assert "warning" not in capfd.readouterr().err
    h = tr.health()
    assert h["measured"] and h["nonfinite_weights"] == 0
    for cls in fx.train.TENSOR_CLASSES:
        c = h[cls]
        assert c["writes"] > 0 and c["written"] > 0, cls
        assert c["worst_saturated_fraction"] <= fx.train.HEALTH_WARN_FRACTION
    assert tr.health_warnings() == []


def test_health_refusals():
    tr = _trainer("dfp16")
    with pytest.raises(fx.ArgumentTypeError):
        tr.fit(1, warn="no")  # truthy: it must not be read as True
    with pytest.raises(fx.ArgumentRangeError):
        tr.health_warnings(2**40)
    tr.close()
    with pytest.raises(fx.StateError):
        tr.health()


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to measure offsets")
def test_struct_layout_matches_the_compiler(tmp_path):
    lines = ['printf("size %zu\\n", sizeof(fx_train_health));']
    for name, _ in TrainHealthC._fields_:
        lines.append(f'printf("{name} %zu %zu\\n", offsetof(fx_train_health, {name}), '
                     f'sizeof(((fx_train_health *)0)->{name}));')
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
    r = subprocess.run(["cc", "-std=c11", "-I", os.path.join(REPO, "include"),
                        str(tmp_path / "layout.c"), "-o", str(exe)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout.split()
    assert out[:2] == ["size", str(ctypes.sizeof(TrainHealthC))]
    rows = [out[i:i + 3] for i in range(2, len(out), 3)]
    assert len(rows) == len(TrainHealthC._fields_)
    for name, off, size in rows:
        f = getattr(TrainHealthC, name)
        assert (int(off), int(size)) == (f.offset, f.size), name
