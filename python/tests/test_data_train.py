"""Data sets (fx_dataset_*) and training (fx_trainer_*) through the binding."""
from __future__ import annotations

import gc
import gzip
import os
import struct
import weakref

import numpy as np
import pytest

import flexpoint as fx

FASHION_DIR = os.environ.get("FLEXPOINT_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"


# ------------------------------------------------------------------------------------------
# data sets
# ------------------------------------------------------------------------------------------
def test_synthetic_is_seeded_and_balanced():
    a = fx.data.synthetic(40, 3, 8, 6, 4, seed=5)
    b = fx.data.synthetic(40, 3, 8, 6, 4, seed=5)
    c = fx.data.synthetic(40, 3, 8, 6, 4, seed=6)
    assert len(a) == 40 and a.image_shape == (3, 8, 6) and a.classes == 4
    assert np.array_equal(a.images, b.images) and not np.array_equal(a.images, c.images)
    assert a.images.dtype == np.float32 and a.images.shape == (40, 3, 8, 6)
    assert a.images.min() >= 0 and a.images.max() <= 1
    assert list(a.class_counts()) == [10, 10, 10, 10]
    assert np.array_equal(np.bincount(a.labels, minlength=4), a.class_counts())
    assert "synthetic" in a.source and "seed=5" in a.source
    with pytest.raises(fx.InvalidArgumentError) as ei:
        fx.data.synthetic(10, 3, 8, 8, 1)
    assert "classes" in ei.value.message


def test_images_view_is_read_only_and_keeps_the_dataset_alive():
    ds = fx.data.synthetic(8, 1, 4, 4, 2, seed=1)
    ref = weakref.ref(ds)
    imgs = ds.images
    first = imgs.copy()
    assert not imgs.flags.writeable
    del ds
    gc.collect()
    assert ref() is not None and np.array_equal(imgs, first)
    del imgs
    gc.collect()
    assert ref() is None


def test_from_arrays_subset_pad_batch(rng):
    x = rng.random((10, 5, 5)).astype(np.float32)
    y = np.arange(10) % 3
    ds = fx.data.from_arrays(x, y)
    assert ds.image_shape == (1, 5, 5) and ds.classes == 3
    assert np.array_equal(ds.images[:, 0], x) and np.array_equal(ds.labels, y)
    sub = ds.subset(2, 5)
    assert len(sub) == 5 and np.array_equal(sub.images[:, 0], x[2:7])
    with pytest.raises(fx.RangeError):
        ds.subset(8, 5)
    padded = ds.pad(2)
    assert padded.image_shape == (1, 9, 9)
    assert np.array_equal(padded.images[:, 0, 2:7, 2:7], x)
    assert padded.images[:, :, :2].sum() == 0
    bx, by = ds.batch([4, 0, 4])
    assert np.array_equal(bx[:, 0], x[[4, 0, 4]]) and list(by) == [y[4], y[0], y[4]]
    with pytest.raises(fx.RangeError) as ei:
        ds.batch([1, 10])
    assert "10" in ei.value.message
    with pytest.raises(fx.InvalidArgumentError) as ei:
        fx.data.from_arrays(x, [0] * 9 + [7], classes=3)
    assert "labels[9]" in ei.value.message
    bad = x.copy()
    bad[3, 1, 1] = np.nan
    with pytest.raises(fx.InvalidArgumentError):
        fx.data.from_arrays(bad, y)
    with pytest.raises(fx.InvalidArgumentError):
        fx.data.from_arrays(x, y[:4])


def test_channel_stats_and_normalize(rng):
    x = (rng.random((20, 2, 4, 4)) * [[[[2.0]], [[0.5]]]] + 1).astype(np.float32)
    ds = fx.data.from_arrays(x, np.zeros(20, dtype=np.int32), classes=1)
    mean, std = ds.channel_stats()
    assert np.allclose(mean, x.mean(axis=(0, 2, 3)), rtol=1e-6)
    assert np.allclose(std, x.std(axis=(0, 2, 3)), rtol=1e-5)
    ds.normalize()
    m2, s2 = ds.channel_stats()
    assert np.allclose(m2, 0, atol=1e-5) and np.allclose(s2, 1, atol=1e-4)
    with pytest.raises(fx.InvalidArgumentError):
        ds.normalize([0.0, 0.0], [1.0, 0.0])
    with pytest.raises(fx.InvalidArgumentError):
        ds.normalize([0.0], [1.0])


def write_idx(path, magic, dims, payload: bytes, compress: bool):
    data = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload
    if compress:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)


@pytest.mark.parametrize("compress", [True, False])
def test_fashion_mnist_loader_on_small_files(tmp_path, rng, compress):
    imgs = rng.integers(0, 256, (7, 4, 3), dtype=np.uint8)
    labels = np.array([0, 1, 2, 9, 4, 5, 3], np.uint8)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", 0x803, [7, 4, 3], imgs.tobytes(), compress)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", 0x801, [7], labels.tobytes(), compress)
    ds = fx.data.fashion_mnist(tmp_path, train=False)
    assert len(ds) == 7 and ds.image_shape == (1, 4, 3)
    assert np.array_equal(ds.images[:, 0], imgs.astype(np.float32) / 255)
    assert np.array_equal(ds.labels, labels)
    with pytest.raises(fx.FlexpointIOError) as ei:  # no training files here
        fx.data.fashion_mnist(tmp_path, train=True)
    assert "train-images" in str(ei.value) and isinstance(ei.value, OSError)


def test_fashion_mnist_loader_rejects_bad_files(tmp_path):
    write_idx(tmp_path / "t10k-images-idx3-ubyte", 0x802, [1, 2, 2], bytes(4), False)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", 0x801, [1], bytes(1), False)
    with pytest.raises(fx.CorruptError) as ei:
        fx.data.fashion_mnist(tmp_path, train=False)
    assert "magic" in ei.value.message and "t10k-images" in ei.value.message
    write_idx(tmp_path / "t10k-images-idx3-ubyte", 0x803, [1, 2, 2], bytes(3), False)  # short
    with pytest.raises(fx.CorruptError):
        fx.data.fashion_mnist(tmp_path, train=False)


def test_cifar10_loader_on_small_files(tmp_path, rng):
    recs = {}
    for name, n in [("data_batch_%d.bin" % i, 2) for i in range(1, 6)] + [("test_batch.bin", 3)]:
        lab = rng.integers(0, 10, n, dtype=np.uint8)
        pix = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        (tmp_path / name).write_bytes(np.concatenate([lab[:, None], pix], axis=1).tobytes())
        recs[name] = (lab, pix)
    test = fx.data.cifar10(tmp_path, train=False)
    lab, pix = recs["test_batch.bin"]
    assert len(test) == 3 and test.image_shape == (3, 32, 32)
    assert np.array_equal(test.labels, lab)
    assert np.array_equal(test.images.reshape(3, -1), pix.astype(np.float32) / 255)
    assert len(fx.data.cifar10(tmp_path, train=True)) == 10
    (tmp_path / "test_batch.bin").write_bytes(bytes([10]) + bytes(3072))
    with pytest.raises(fx.CorruptError):
        fx.data.cifar10(tmp_path, train=False)
    os.remove(tmp_path / "data_batch_3.bin")
    with pytest.raises(fx.FlexpointIOError) as ei:
        fx.data.cifar10(tmp_path, train=True)
    assert "data_batch_3" in str(ei.value)


@pytest.mark.skipif(not os.path.isdir(FASHION_DIR), reason="Fashion-MNIST not installed")
def test_real_fashion_mnist_test_set():
    ds = fx.data.fashion_mnist(None, train=False)
    assert len(ds) == 10000 and ds.image_shape == (1, 28, 28)
    assert list(ds.class_counts()) == [1000] * 10


# ------------------------------------------------------------------------------------------
# training
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_data():
    return (fx.data.synthetic(128, 1, 8, 8, 4, seed=11),
            fx.data.synthetic(64, 1, 8, 8, 4, seed=12))


def cfg(**kw):
    base = dict(model="mlp", batch_size=32, epochs=2, lr=0.05, seed=3)
    base.update(kw)
    return fx.TrainConfig(**base)


@pytest.mark.parametrize("fmt", fx.FORMATS)
def test_trainer_steps_epochs_and_evaluates(tiny_data, fmt):
    train, test = tiny_data
    tr = fx.Trainer(cfg(fmt=fmt), train, test)
    assert tr.config.fmt == fmt and tr.global_step == 0 and tr.epoch_index == 0
    loss = tr.step()
    assert np.isfinite(loss) and tr.global_step == 1
    m = tr.epoch()
    assert m.epoch == 1 and tr.epoch_index == 1 and tr.global_step == 4
    assert np.isfinite(m.train_loss) and 0 <= m.test_accuracy <= 1 and m.seconds >= 0
    acc, tloss = tr.evaluate()
    assert acc == pytest.approx(m.test_accuracy) and tloss == pytest.approx(m.test_loss)
    assert 0 <= tr.evaluate(train)[0] <= 1
    ls = tr.loss_scaler
    assert ls.enabled == (fmt == "fp16")
    assert ls.scale == (65536.0 if fmt == "fp16" else 1.0)
    more = tr.fit()  # the remaining planned epoch
    assert [x.epoch for x in more] == [2]


def test_unusable_device_raises_device_error(tiny_data):
    train, _ = tiny_data
    # the first ordinal that does not exist: every machine has one, with or without a GPU
    missing = fx.gpu_device_count()
    with pytest.raises(fx.DeviceError, match="CUDA") as ei:
        fx.Trainer(cfg(device=missing), train)
    # the status comes from the library (flexpoint_last_status), not from the message's wording
    from flexpoint._lib import lib
    assert ei.value.status == lib().flexpoint_last_status() == -9


def test_null_constructor_status_is_the_librarys(tmp_path):
    from flexpoint._lib import lib
    write_idx(tmp_path / "t10k-images-idx3-ubyte", 0x802, [1, 2, 2], bytes(4), False)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", 0x801, [1], bytes(1), False)
    with pytest.raises(fx.CorruptError) as ei:
        fx.data.fashion_mnist(tmp_path, train=False)
    assert ei.value.status == lib().flexpoint_last_status() == -8
    t = fx.Tensor((2, 3), "fp32")
    with pytest.raises(fx.FlexpointError) as ei:
        t.transpose(0, 5)  # a view constructor that returns NULL
    assert ei.value.status == lib().flexpoint_last_status() < 0


@pytest.mark.skipif(fx.gpu_device_count() == 0, reason="no CUDA device")
def test_device_run_starts_where_the_host_run_starts(tiny_data):
    train, test = tiny_data
    host = fx.Trainer(cfg(fmt="flex16_5"), train, test)
    dev = fx.Trainer(cfg(fmt="flex16_5", device="cuda"), train, test)
    assert np.array_equal(host.params(), dev.params())
    assert np.isfinite(dev.step()) and 0 <= dev.evaluate()[0] <= 1


def test_same_seed_same_start_in_every_format(tiny_data):
    train, _ = tiny_data
    starts = [fx.Trainer(cfg(fmt=f), train).params() for f in fx.FORMATS]
    for p in starts[1:]:
        assert np.array_equal(p, starts[0])


def test_tensor_registry(tiny_data):
    train, _ = tiny_data
    tr = fx.Trainer(cfg(fmt="flex16_5"), train)
    names = tr.tensor_names()
    for n in ("fc1.w", "fc1.w.grad", "fc1.out", "loss.dlogits"):
        assert n in names
    w = tr.tensor("fc1.w")
    assert w.fmt == "flex16_5" and w.size * 1 > 0 and w.exp is not None
    g = tr.tensor("fc1.w.grad").trace_enable()
    for _ in range(3):
        tr.step()
    assert len(g.trace()) >= 3 and g.stats["writes"] >= 3
    assert tr.tensor(names.index("fc1.w")).shape == w.shape
    with pytest.raises(fx.UnknownNameError) as ei:
        tr.tensor("no.such.tensor")
    assert "no.such.tensor" in ei.value.message
    all_t = tr.tensors()
    assert set(all_t) == set(names)
    assert tr.param_count == tr.params().size
    fp = fx.Trainer(cfg(fmt="fp32"), train)
    w32 = fp.tensor("fc1.w").numpy().reshape(-1)
    assert np.array_equal(fp.params()[:w32.size], w32)


def test_checkpoint_resumes_bit_for_bit(tiny_data, tmp_path):
    train, test = tiny_data
    a = fx.Trainer(cfg(fmt="flex16_5"), train, test)
    for _ in range(2):
        a.step()
    path = tmp_path / "ck.bin"
    a.save(path)
    losses_a = [a.step() for _ in range(3)]
    b = fx.Trainer(cfg(fmt="flex16_5"), train, test)
    b.load(path)
    assert b.global_step == 2
    losses_b = [b.step() for _ in range(3)]
    assert losses_a == losses_b
    assert np.array_equal(a.params(), b.params())
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "bad.bin"
    bad.write_bytes(bytes(data))
    before = b.params()
    with pytest.raises(fx.CorruptError) as ei:
        b.load(bad)
    assert "bad.bin" in ei.value.message
    assert np.array_equal(b.params(), before) and b.global_step == 5
    with pytest.raises(fx.FlexpointIOError):
        b.load(tmp_path / "missing.bin")


def test_trainer_configuration_errors(tiny_data):
    train, test = tiny_data
    with pytest.raises(fx.UnknownNameError):
        fx.Trainer(cfg(autoflex="bogus"), train)
    with pytest.raises(fx.ShapeError) as ei:
        fx.Trainer(cfg(batch_size=1000), train)
    assert "batch" in ei.value.message
    with pytest.raises(fx.InvalidArgumentError) as ei:
        fx.Trainer(cfg(lr=-1.0), train)
    assert "lr" in ei.value.message
    with pytest.raises(fx.FlexpointError):
        fx.Trainer(cfg(model="transformer"), train)
    with pytest.raises(fx.InvalidArgumentError):
        fx.Trainer(cfg(), np.zeros(3))
    with pytest.raises(fx.InvalidArgumentError):
        fx.Trainer(cfg(), train).evaluate()  # no test set


def test_cnn_trains_through_the_library(tiny_data):
    train, test = tiny_data
    tr = fx.Trainer(cfg(model="cnn", fmt="bf16", batch_size=32), train, test)
    m = tr.epoch()
    assert np.isfinite(m.train_loss) and m.steps == 4
    assert "conv1.w" in tr.tensor_names()
