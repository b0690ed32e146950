"""Collators: padded and padding-free batches, checked by hand and against transformers."""

from __future__ import annotations

import numpy as np
import pytest

from tokenport.errors import ConfigError
from tokenport.sampling.collate import PaddingCollator, PaddingFreeCollator


def _samples(lengths, seed=0, labels=False):
    rng = np.random.default_rng(seed)
    out = []
    for n in lengths:
        ids = rng.integers(1, 1000, n)
        sample = {"input_ids": ids}
        if labels:
            sample["labels"] = rng.integers(1, 1000, n)
        out.append(sample)
    return out


def test_padding_collator_pads_right_with_mask_and_labels():
    samples = _samples([3, 5, 1])
    batch = PaddingCollator(pad_id=7)(samples)
    assert batch["input_ids"].shape == (3, 5)
    assert batch["lengths"].tolist() == [3, 5, 1]
    for k, sample in enumerate(samples):
        n = len(sample["input_ids"])
        assert batch["input_ids"][k, :n].tolist() == sample["input_ids"].tolist()
        assert (batch["input_ids"][k, n:] == 7).all()
        assert batch["attention_mask"][k].tolist() == [1] * n + [0] * (5 - n)
        assert batch["labels"][k, :n].tolist() == sample["input_ids"].tolist()  # unshifted
        assert (batch["labels"][k, n:] == -100).all()
    assert batch["attention_mask"].dtype == np.int64


def test_padding_collator_multiple_given_labels_and_tokens_key():
    samples = _samples([4, 6], labels=True)
    samples[0] = {"tokens": samples[0]["input_ids"].tolist(), "labels": samples[0]["labels"]}
    batch = PaddingCollator(0, pad_to_multiple_of=8, label_pad=-1)(samples)
    assert batch["input_ids"].shape == (2, 8)
    assert batch["labels"][1, :6].tolist() == samples[1]["labels"].tolist()
    assert batch["labels"][0, :4].tolist() == samples[0]["labels"].tolist()
    assert (batch["labels"][0, 4:] == -1).all()
    assert PaddingCollator(0, pad_to_multiple_of=3)(_samples([6]))["input_ids"].shape == (1, 6)


def test_padding_collator_torch():
    torch = pytest.importorskip("torch")
    batch = PaddingCollator(0, return_tensors="pt")(_samples([2, 3]))
    assert isinstance(batch["input_ids"], torch.Tensor) and batch["input_ids"].dtype == torch.int64
    assert batch["attention_mask"].sum().item() == 5


def test_padding_free_collator_fields():
    samples = _samples([3, 1, 4])
    batch = PaddingFreeCollator()(samples)
    flat = np.concatenate([s["input_ids"] for s in samples])
    assert batch["input_ids"].tolist() == [flat.tolist()]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 0, 1, 2, 3]]
    assert batch["cu_seqlens"].tolist() == [0, 3, 4, 8] and batch["cu_seqlens"].dtype == np.int32
    assert batch["max_seqlen"] == 4
    expected = flat.copy()
    expected[[0, 3, 4]] = -100  # the first token of each sample
    assert batch["labels"].tolist() == [expected.tolist()]


@pytest.mark.parametrize("with_labels", [False, True])
def test_padding_free_matches_transformers(with_labels):
    transformers = pytest.importorskip("transformers")
    samples = _samples([5, 1, 9, 2], seed=3, labels=with_labels)
    ours = PaddingFreeCollator()(samples)
    hf_features = [{k: v.tolist() for k, v in s.items()} for s in samples]
    theirs = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_tensors="np")(hf_features)
    for name in ("input_ids", "labels", "position_ids"):
        np.testing.assert_array_equal(ours[name], theirs[name])
    np.testing.assert_array_equal(ours["cu_seqlens"], theirs["cu_seq_lens_q"])
    assert ours["max_seqlen"] == theirs["max_length_q"]


def test_padding_free_torch():
    torch = pytest.importorskip("torch")
    batch = PaddingFreeCollator(return_tensors="pt")(_samples([2, 2]))
    assert batch["cu_seqlens"].dtype == torch.int32 and batch["input_ids"].shape == (1, 4)


def test_collator_errors():
    with pytest.raises(ConfigError, match="empty"):
        PaddingCollator(0)([])
    with pytest.raises(ConfigError, match="return_tensors"):
        PaddingCollator(0, return_tensors="tf")
    with pytest.raises(ConfigError, match="pad_to_multiple_of"):
        PaddingCollator(0, pad_to_multiple_of=0)
    with pytest.raises(ConfigError, match=r"samples\[1\].*neither"):
        PaddingCollator(0)([{"input_ids": [1]}, {"ids": [1]}])
    with pytest.raises(ConfigError, match=r"samples\[0\].*labels"):
        PaddingCollator(0)([{"input_ids": [1, 2], "labels": [1]}])
    with pytest.raises(ConfigError, match=r"samples\[1\].*no 'labels'"):
        PaddingCollator(0)([{"input_ids": [1], "labels": [1]}, {"input_ids": [2]}])
    with pytest.raises(ConfigError, match="integer"):
        PaddingCollator(0)([{"input_ids": [1.5]}])
    with pytest.raises(ConfigError, match=r"samples\[1\].*empty"):
        PaddingFreeCollator()([{"input_ids": [1]}, {"input_ids": []}])
