"""BlendedDataset.get_batch: children of one kind stack into one batch; other kinds are refused."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents


def _store(path, dtype, seed):
    documents = random_documents(np.random.default_rng(seed), 40, tokens=(3, 200), length=(5, 60), eod=2)
    return tp.IndexedDataset(build_store(path, documents, dtype=dtype))


def _gpt(store):
    config = tp.GPTSampleConfig(32, eod_id=2)
    return tp.GPTDataset(store, np.arange(len(store)), 30, config, seed=1)


def test_get_batch_equals_the_samples_one_by_one_across_store_dtypes(tmp_path):
    blend = tp.BlendedDataset(
        [_gpt(_store(tmp_path / "a", np.uint16, 0)), _gpt(_store(tmp_path / "b", np.int32, 1))], [0.5, 0.5], 40
    )
    ids = np.arange(40)
    batch = blend.get_batch(ids)
    for name, values in batch.items():
        assert np.array_equal(values, np.stack([np.asarray(blend[i][name]) for i in ids])), name
    assert set(batch["dataset_id"].tolist()) == {0, 1}


def test_get_batch_refuses_children_of_different_kinds(tmp_path):
    gpt = _gpt(_store(tmp_path / "a", np.uint16, 0))
    packed = tp.PackedDataset(_store(tmp_path / "b", np.uint16, 1), 64)
    blend = tp.BlendedDataset([gpt, packed], [0.5, 0.5], 20)
    with pytest.raises(tp.InputDataError, match=r"child 1 gives fields .* but child 0 gives"):
        blend.get_batch(np.arange(20))
