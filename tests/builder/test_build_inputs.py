"""build_datasets takes a spec file by path, and an empty split is named for what it is."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store
from tokenport.errors import ConfigError


@pytest.fixture
def stores(tmp_path):
    for name, count in (("a", 40), ("b", 3)):
        documents = [list(f"{name} document {k} ".encode()) * 3 + [256] for k in range(count)]
        build_store(tmp_path / name, documents, tokenizer=tp.load_tokenizer("byte"))
    return tmp_path


def test_build_datasets_takes_a_spec_file_path(stores):
    spec = stores / "spec.yaml"
    spec.write_text("blend:\n  - {path: a, weight: 0.25}\n  - {path: b, weight: 0.75}\n")
    config = tp.GPTSampleConfig(seq_length=16)
    by_path = tp.build_datasets(str(spec), sizes=(20, 0, 0), config=config, seed=3, split="1,0,0")[0]
    loaded = tp.build_datasets(tp.load_blend_spec(spec), sizes=(20, 0, 0), config=config, seed=3, split="1,0,0")[0]
    assert len(by_path) == len(loaded) == 20
    for i in range(20):
        for name, array in loaded[i].items():
            assert np.array_equal(by_path[i][name], array), (i, name)
    with pytest.raises(ConfigError, match="missing.yaml"):
        tp.build_datasets(stores / "missing.yaml", sizes=(20, 0, 0), config=config, seed=3)


def test_a_split_holding_no_documents_says_so(stores):
    config = tp.GPTSampleConfig(seq_length=16)
    with pytest.raises(
        ConfigError, match=r"b: the test split of '969,30,1' holds none of its 3 documents.*0 test samples"
    ):
        tp.build_gpt_dataset(
            tp.IndexedDataset(stores / "b"), num_samples=4, config=config, seed=1, split="969,30,1", which="test"
        )
