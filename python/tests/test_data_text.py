"""fx.data.text: a character-level corpus as windows of byte tokens (fx_dataset_text).

A small file gives the split sizes, vocabulary and windows the C library documents (the last
floor(len * val_fraction) bytes held out, (L - 1) // T windows per part of L bytes, tokens
numbered by byte order); bad arguments and a missing file raise the library's errors; and a
built-in transformer of the file's context trains on the windows with a falling loss."""
from __future__ import annotations

import numpy as np
import pytest

import flexpoint as fx

TEXT = b"the cat sat on the mat. a dog ran far away. " * 40  # 1800 bytes


@pytest.fixture()
def corpus(tmp_path):
    p = tmp_path / "tiny.txt"
    p.write_bytes(TEXT)
    return p


def test_windows_and_vocabulary(corpus):
    train, val = fx.data.text(corpus, 8, 0.1)
    held = int(len(TEXT) * 0.1)
    assert len(train) == (len(TEXT) - held - 1) // 8
    assert len(val) == (held - 1) // 8
    assert train.context == val.context == 8
    assert train.vocab == bytes(sorted(set(TEXT))) == val.vocab
    assert train.classes == len(train.vocab)
    assert train.image_shape == (1, 1, 8)
    # window i holds bytes [8 i, 8 i + 8) as token numbers
    tok = {b: t for t, b in enumerate(train.vocab)}
    x, _ = train.batch([0, 3])
    assert np.array_equal(x.reshape(2, 8)[1], [tok[b] for b in TEXT[24:32]])
    assert fx.data.text(corpus, 8, 0)[1] is None


def test_refusals(corpus, tmp_path):
    with pytest.raises(fx.FlexpointIOError):
        fx.data.text(tmp_path / "none.txt", 8)
    with pytest.raises(fx.InvalidArgumentError):
        fx.data.text(corpus, 0)
    with pytest.raises(fx.InvalidArgumentError):
        fx.data.text(corpus, 8, 0.9)
    with pytest.raises(fx.CorruptError):
        fx.data.text(corpus, 1024, 0.1)  # the held-out part is shorter than one window


def test_transformer_trains(corpus):
    train, val = fx.data.text(corpus, 8, 0.1)
    cfg = fx.TrainConfig(model="gpt1x16h2c8", fmt="flex16_5", batch_size=8, optimizer="adamw",
                         lr=3e-3, seed=1)
    t = fx.Trainer(cfg, train, val)
    losses = [t.step() for _ in range(12)]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
