"""GPT samples take the EOD id from the store's manifest, and refuse one that disagrees with it."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store
from tokenport.builder import build_datasets
from tokenport.errors import ConfigError


def _store(path, identity, eod: int):
    """Twelve documents of 5..16 tokens (none equal to ``eod`` but the last of each)."""
    documents = [list(range(1, 5 + k)) + [eod] for k in range(12)]
    return tp.IndexedDataset(build_store(path, documents, tokenizer=identity))


@pytest.fixture
def byte_store(tmp_path):
    return _store(tmp_path / "byte", tp.load_tokenizer("byte").identity(), 256)


def test_eod_id_defaults_to_the_manifests(byte_store):
    config = tp.GPTSampleConfig(seq_length=16, reset_position_ids=True, eod_mask_loss=True)
    train = tp.build_gpt_dataset(byte_store, num_samples=4, config=config, seed=1)
    assert train.config.eod_id == 256
    sample = train[0]
    ends = np.flatnonzero(sample["tokens"] == 256)
    assert len(ends) and not sample["loss_mask"][ends].any()  # EODs masked from the loss
    starts = ends[ends + 1 < 16] + 1
    assert len(starts) and not sample["position_ids"][starts].any()  # positions restart per document
    assert len(sample["cu_seqlens"][sample["cu_seqlens"] < 16]) > 1  # document boundaries seen
    explicit = tp.build_gpt_dataset(
        byte_store,
        num_samples=4,
        seed=1,
        config=tp.GPTSampleConfig(seq_length=16, eod_id=256, reset_position_ids=True, eod_mask_loss=True),
    )
    for name, array in explicit[0].items():
        assert np.array_equal(array, sample[name]), name


def test_a_wrong_eod_id_is_refused(byte_store):
    config = tp.GPTSampleConfig(seq_length=16, eod_id=0, eod_mask_loss=True)
    with pytest.raises(ConfigError, match=r"byte: eod_id=0 but .* EOD id is 256.*eod_id=256"):
        tp.build_gpt_dataset(byte_store, num_samples=4, config=config, seed=1)
    with pytest.raises(ConfigError, match="pad_id=256 equals eod_id"):
        tp.build_gpt_dataset(byte_store, num_samples=4, config=tp.GPTSampleConfig(seq_length=16, pad_id=256), seed=1)


def test_a_store_without_a_manifest_eod_needs_eod_id(tmp_path):
    store = _store(tmp_path / "bare", None, 7)
    with pytest.raises(ConfigError, match=r"bare: .*names none.*pass eod_id="):
        tp.build_gpt_dataset(store, num_samples=4, config=tp.GPTSampleConfig(seq_length=16), seed=1)
    train = tp.build_gpt_dataset(store, num_samples=4, config=tp.GPTSampleConfig(seq_length=16, eod_id=7), seed=1)
    assert train.config.eod_id == 7


def test_a_blend_of_stores_with_different_eod_ids_is_refused(tmp_path, byte_store):
    other = dict(tp.load_tokenizer("byte").identity(), eod_id=0, name="other")
    _store(tmp_path / "other", other, 0)
    config = tp.GPTSampleConfig(seq_length=8)
    with pytest.raises(ConfigError, match=r"other was prepared with another tokenizer than .*byte"):
        build_datasets(
            ["1", str(tmp_path / "byte"), "1", str(tmp_path / "other")],
            sizes=(8, 0, 0),
            config=config,
            seed=1,
            split="1,0,0",
        )
    with pytest.raises(ConfigError, match=r"other ends documents with EOD id 0 but .*byte with 256"):
        build_datasets(  # tokenizers allowed to differ: their EOD ids still must agree
            ["1", str(tmp_path / "byte"), "1", str(tmp_path / "other")],
            sizes=(8, 0, 0),
            config=config,
            seed=1,
            split="1,0,0",
            allow_mixed_tokenizers=True,
        )
    train, _, _ = build_datasets(
        ["1", str(tmp_path / "byte"), "1", str(tmp_path / "byte")],
        sizes=(8, 0, 0),
        config=config,
        seed=1,
        split="1,0,0",
    )
    assert len(train) == 8
