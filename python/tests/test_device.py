"""Device placement from Python (flexpoint.device, Tensor.to / .device, device= arguments).

Without a CUDA device (CI, this machine) the tests check places, parsing, and that every call
that needs a device raises DeviceError with the library's message and leaves the host tensor
as it was. With a device they also check transfers bit for bit, that ops run where their
operands live, and that flex16_5 results on the device equal the host's bit for bit."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import flexpoint as fx

from conftest import needs

NO_DEVICE = fx.device.device_count() == 0
pytestmark = needs("tensor_to_device", "tensor_device", "flexpoint_gpu_built")


def test_places_parse():
    dev = fx.device
    assert dev.device_ordinal("cpu") == -1
    assert dev.device_ordinal("cuda") == 0
    assert dev.device_ordinal("cuda:3") == 3
    assert dev.device_ordinal(2) == 2 and dev.device_ordinal(-1) == -1
    assert dev.device_ordinal(np.int64(1)) == 1
    assert dev.device_name(-1) == "cpu" and dev.device_name(1) == "cuda:1"
    for bad in ("gpu", "cuda:", "cuda:-1", "cuda:x", "", True, np.bool_(True), 1.0, -2, None):
        with pytest.raises(fx.InvalidArgumentError):
            dev.device_ordinal(bad)  # type: ignore[arg-type]


def test_host_tensors_stay_put(rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    t = fx.from_numpy(a, "dfp16")
    assert t.device == "cpu"
    assert t.to("cpu") is t and t.cpu() is t and t.to(-1) is t
    c = t + t
    assert c.device == "cpu"
    np.testing.assert_array_equal(c.numpy(), (t.numpy() * 2))


def test_build_and_count_are_consistent():
    assert isinstance(fx.device.built(), bool)
    assert fx.device.device_count() >= 0
    if not fx.device.built():
        assert fx.device.device_count() == 0


@pytest.mark.skipif(not NO_DEVICE, reason="a CUDA device is present")
def test_without_a_device_everything_raises_device_error(rng):
    a = rng.standard_normal((4, 4)).astype(np.float32)
    t = fx.from_numpy(a, "flex16_5")
    raw = t.get_raw().copy()
    exp = t.exp
    for call in (lambda: t.to("cuda"), lambda: t.cuda(), lambda: t.to(0),
                 lambda: fx.tensor((2, 2), "fp16", device="cuda"),
                 lambda: fx.from_numpy(a, "bf16", device="cuda:0"),
                 lambda: fx.device.current_device(), lambda: fx.device.current_device_name(),
                 lambda: fx.device.set_device(0), lambda: fx.device.synchronize()):
        with pytest.raises(fx.DeviceError) as e:
            call()
        assert str(e.value)  # the library's message
    with pytest.raises(fx.DeviceError):
        fx.DeviceBuffer((3,))
    with pytest.raises(fx.InvalidArgumentError):
        fx.DeviceBuffer((3,), device="cpu")
    with pytest.raises(fx.InvalidArgumentError):
        fx.device.set_device("cpu")
    with pytest.raises(fx.InvalidArgumentError):
        t.to("gpu")
    # the host tensor is untouched by the failed moves
    np.testing.assert_array_equal(t.get_raw(), raw)
    assert t.exp == exp and t.device == "cpu"
    assert fx.device.host_waits() == 0


@pytest.mark.skipif(NO_DEVICE, reason="no CUDA device")
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16", "flex16_5", "dfp16"])
def test_round_trip_is_bit_exact(rng, fmt):
    a = (rng.standard_normal((7, 9)) * 10).astype(np.float32)
    h = fx.from_numpy(a, fmt)
    d = h.to("cuda")
    assert d.device == "cuda:0" and d.fmt == fmt and d.shape == h.shape
    with pytest.raises(fx.InvalidArgumentError):
        d.numpy()  # element access needs the host
    back = d.cpu()
    np.testing.assert_array_equal(back.get_raw(), h.get_raw())
    if h.is_shared_exponent:
        assert back.exp == h.exp
    assert pickle.loads(pickle.dumps(d)).device == "cpu"
    assert d.astype("fp32").device == "cuda:0"
    np.testing.assert_array_equal(d.clone().cpu().get_raw(), h.get_raw())


@pytest.mark.skipif(NO_DEVICE, reason="no CUDA device")
def test_ops_run_where_their_operands_live(rng):
    a = rng.standard_normal((33, 20)).astype(np.float32)
    b = rng.standard_normal((20, 17)).astype(np.float32)
    ha, hb = fx.from_numpy(a, "flex16_5"), fx.from_numpy(b, "flex16_5")
    da, db = ha.to("cuda"), hb.to("cuda")
    for hc, dc in ((ha @ hb, da @ db), (fx.relu(ha), fx.relu(da)), (ha * 0.5, da * 0.5)):
        assert dc.device == "cuda:0"
        back = dc.cpu()
        np.testing.assert_array_equal(back.get_raw(), hc.get_raw())
        assert back.exp == hc.exp
    with pytest.raises(fx.InvalidArgumentError):
        ha + da  # mixed places
    fx.device.synchronize()
    assert fx.device.host_waits() > 0


@pytest.mark.skipif(NO_DEVICE, reason="no CUDA device")
def test_device_buffers_round_trip(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = fx.DeviceBuffer.from_numpy(a)
    assert b.device == "cuda:0" and b.shape == (3, 4) and b.dtype == np.float32
    np.testing.assert_array_equal(b.numpy(), a)
    z = fx.DeviceBuffer((5,), np.int32)
    np.testing.assert_array_equal(z.numpy(), np.zeros(5, np.int32))  # zero-filled


@pytest.mark.skipif(NO_DEVICE, reason="no CUDA device")
def test_training_ops_with_device_state_match_the_host(rng):
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    hx = fx.from_numpy(x, "flex16_5")
    dx = hx.to("cuda")
    hy, ha = fx.maxpool2d(hx, 2, return_indices=True)
    dy, da = fx.maxpool2d(dx, 2, return_indices=True)
    assert isinstance(da, fx.DeviceBuffer)
    np.testing.assert_array_equal(da.numpy(), ha)
    np.testing.assert_array_equal(dy.cpu().get_raw(), hy.get_raw())
    hg = fx.maxpool2d_backward(hy, ha, hx.shape)
    for am in (da, ha):  # the device buffer, and a host array copied to the device
        dg = fx.maxpool2d_backward(dy, am, dx.shape)
        np.testing.assert_array_equal(dg.cpu().get_raw(), hg.get_raw())
        assert dg.exp == hg.exp
    # SGD with master weights on both sides: the same weights, bit for bit
    w = rng.standard_normal((6, 5)).astype(np.float32)
    g = rng.standard_normal((6, 5)).astype(np.float32)
    hw, hgr = fx.from_numpy(w, "flex16_5"), fx.from_numpy(g, "flex16_5")
    dw, dgr = hw.to("cuda"), hgr.to("cuda")
    hopt, dopt = fx.SGD([hw], lr=0.1, momentum=0.9), fx.SGD([dw], lr=0.1, momentum=0.9)
    assert isinstance(dopt.master[0], fx.DeviceBuffer)
    for _ in range(3):
        hopt.step([hgr])
        dopt.step([dgr])
    np.testing.assert_array_equal(dw.cpu().get_raw(), hw.get_raw())
    np.testing.assert_array_equal(dopt.master[0].numpy(), hopt.master[0])
    hu, hinf = fx.LossScaler().unscale([hgr])
    du, dinf = fx.LossScaler().unscale([dgr])
    assert isinstance(du[0], fx.DeviceBuffer) and hinf == dinf
    np.testing.assert_array_equal(du[0].numpy(), hu[0])


def test_unscale_writes_into_given_buffers(rng):
    g = fx.from_numpy(rng.standard_normal((4, 3)).astype(np.float32), "fp32")
    buf = np.full(12, np.nan, dtype=np.float32)
    outs, found = fx.LossScaler(enabled=True).unscale([g], out=[buf])
    assert outs[0] is buf and not found
    np.testing.assert_array_equal(buf.reshape(4, 3), g.numpy() / np.float32(2.0**16))
    with pytest.raises(fx.InvalidArgumentError):
        fx.LossScaler().unscale([g], out=[np.zeros(5, np.float32)])
    with pytest.raises(fx.InvalidArgumentError):
        fx.LossScaler().unscale([g], out=[])


@pytest.mark.skipif(NO_DEVICE, reason="no CUDA device")
def test_device_buffer_copies_own_their_memory(rng):
    import copy
    b = fx.DeviceBuffer.from_numpy(rng.standard_normal(6).astype(np.float32))
    for c in (copy.copy(b), copy.deepcopy(b), pickle.loads(pickle.dumps(b))):
        assert c.ptr != b.ptr and c.device == b.device
        np.testing.assert_array_equal(c.numpy(), b.numpy())
    d = fx.tensor((2, 2), "dfp16", device="cuda")
    assert copy.deepcopy(d).device == "cuda:0"
